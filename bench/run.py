"""Ocular benchmark runner: ``python -m bench``.

    python -m bench [--quick] [--repeats R] [--python 3.13|/path/to/python]
                    [--micro] [--pyperformance] [--e2e] [--nowait] [--memory] [--memory-profile] [--callgrind]
                    [--workloads a,b] [--configs x,y] [--size W=N]
                    [--benchmarks a,b] [--memory-events N] [--memory-format F]
                    [--no-setup] [--cpu N] [--output bench/results.md]
                    [--plot bench/results.png] [--list]

Seven sections, each in fresh child processes, interleaved over rounds,
medians reported (callgrind: instruction counts, one run each):

- micro (bench/micro.py): our workloads under every configuration, only the
  workload call timed;
- pyperformance (bench/pyperf_suite.py): real pyperformance benchmarks,
  untraced and under ``python -m ocular``;
- e2e (bench/e2e.py): standalone scripts from process start to exit with the
  trace saved, Ocular against cProfile and VizTracer, and the recorder
  thread's cost per event;
- nowait (bench/nowait.py): fib(26) at threshold 0, the program's thread's
  wall time against its CPU time and the floor's wall time, pauses;
- memory (bench/memory.py): 100M events recorded to a file and in the flight
  recorder: peak RSS, recorder throughput, pauses, dropped events;
- memory_profile (bench/memory_profile.py, --memory-profile): peak RSS of every
  output against events, threads ever started and functions;
- callgrind (bench/callgrind.py, needs valgrind): instructions of the
  program's thread and of every thread, render instructions per event,
  render cost against loop-body length and stack depth.

With no section flag all seven run, except that --workloads/--configs/--size
alone select the micro suite.  The report goes to bench/results.md and the
overhead plot to bench/results.png (gnuplot; skipped with the reason printed
when gnuplot is missing).  Children run under .venv-bench-X.Y at the
repository root (created with bench/setup_env.sh unless --no-setup) or, if
that is unavailable, under the base interpreter.  Configurations whose
module cannot be imported are skipped with the reason printed.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

from bench import callgrind, e2e, memory, memory_profile, micro, nowait, pyperf_suite
from bench.common import (
    BENCH_DIR,
    Context,
    build_floor,
    child_env,
    child_python,
    ensure_gnuplot,
    load_average,
    log,
    machine_info,
    resolve_python,
)
from bench.configs import CONFIGS
from bench.plot import plot
from bench.workloads import WORKLOADS

SECTIONS = ("micro", "pyperformance", "e2e", "nowait", "memory", "memory_profile", "callgrind")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench", description="Ocular tracing-overhead benchmarks.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--quick", action="store_true",
                    help="small sizes and fewer rounds in every section (smoke test, < 1 min)")
    ap.add_argument("--repeats", "-r", type=int, default=None,
                    help="rounds in every section (default: micro 5, pyperformance 3, e2e 3, "
                         "nowait 7, memory 1; --quick: 2, 1, 1, 2, 1)")
    sec = ap.add_argument_group("sections (default: all)")
    sec.add_argument("--micro", action="store_true", help="our workloads, workload call timed")
    sec.add_argument("--pyperformance", action="store_true",
                     help="pyperformance benchmarks, untraced vs python -m ocular")
    sec.add_argument("--e2e", action="store_true",
                     help="end to end: process start to exit, trace saved; writer ns/event")
    sec.add_argument("--nowait", action="store_true",
                     help="fib(26) at threshold 0: the traced thread's wall vs CPU time, pauses")
    sec.add_argument("--memory", action="store_true",
                     help="100M events, file and flight recorder: peak RSS, throughput, pauses")
    sec.add_argument("--memory-profile", dest="memory_profile", action="store_true",
                     help="peak RSS of every output against events, threads ever started and functions "
                          "(bench/memory_profile.py)")
    sec.add_argument("--callgrind", action="store_true",
                     help="instruction counts (valgrind): every thread, render Ir/event and its "
                          "independence of the program's shape (more options: python -m "
                          "bench.callgrind --help)")
    mic = ap.add_argument_group("micro suite")
    mic.add_argument("--workloads", "-w", default=None,
                     help="comma-separated subset of: " + ",".join(WORKLOADS))
    mic.add_argument("--configs", "-c", default=None,
                     help="comma-separated subset of: " + ",".join(CONFIGS))
    mic.add_argument("--size", action="append", default=[], metavar="WORKLOAD=N",
                     help="override a workload size (repeatable)")
    oth = ap.add_argument_group("other sections")
    oth.add_argument("--benchmarks", default=None,
                     help="pyperformance benchmarks, comma-separated subset of: "
                          + ",".join(pyperf_suite.BENCHMARKS))
    oth.add_argument("--memory-events", type=int, default=None, metavar="N",
                     help="events to trace in the memory section (default {:,}; --quick {:,})".format(
                         memory.DEFAULT_EVENTS, memory.QUICK_EVENTS))
    oth.add_argument("--memory-format", choices=tuple(memory.FORMATS), default="pftrace",
                     help="trace format of the memory section (default: %(default)s)")
    ap.add_argument("--python", default=None,
                    help="interpreter for the children: X.Y ($PYENV_ROOT/versions/X.Y.*, then "
                         "pythonX.Y on PATH) or a path (default: the one running this)")
    ap.add_argument("--no-setup", action="store_true",
                    help="do not create .venv-bench-X.Y or install gnuplot when missing")
    ap.add_argument("--cpu", type=int, default=None,
                    help="pin children to this CPU with taskset")
    ap.add_argument("--output", "-o", default=str(BENCH_DIR / "results.md"),
                    help="markdown report path (default bench/results.md; '-' for none)")
    ap.add_argument("--plot", default=str(BENCH_DIR / "results.png"),
                    help="overhead plot (PNG, gnuplot) path (default bench/results.png; '-' for none)")
    ap.add_argument("--list", action="store_true",
                    help="list workloads, configurations and pyperformance benchmarks")
    args = ap.parse_args(argv)

    if args.list:
        print("micro workloads:")
        for w in WORKLOADS.values():
            print("  {:14} size {:>9} (quick {:>7})  {}".format(w.name, w.size, w.quick_size, w.doc))
        print("micro configurations:")
        for c in CONFIGS.values():
            print("  {:21} {}".format(c.name, c.doc))
        print("pyperformance benchmarks (quick: {}):".format(", ".join(pyperf_suite.QUICK_BENCHMARKS)))
        for b in pyperf_suite.BENCHMARKS.values():
            print("  {:14} loops {:>2} {:28} {}".format(b.name, b.loops, " ".join(b.args), b.doc))
        print("pyperformance configurations:")
        for c in pyperf_suite.CONFIGS.values():
            print("  {:21} {}".format(c.name, c.doc))
        print("e2e configurations (scripts: {}):".format(", ".join(e2e.SCRIPTS)))
        for c in e2e.CONFIGS.values():
            print("  {:21} {}".format(c.name, c.doc))
        return 0

    chosen = [s for s in SECTIONS if getattr(args, s)]
    if not chosen:
        chosen = ["micro"] if (args.workloads or args.configs or args.size) else list(SECTIONS)

    workloads = list(WORKLOADS) if not args.workloads else args.workloads.split(",")
    configs = list(CONFIGS) if not args.configs else args.configs.split(",")
    for w in workloads:
        if w not in WORKLOADS:
            ap.error("unknown workload {!r}".format(w))
    for c in configs:
        if c not in CONFIGS:
            ap.error("unknown configuration {!r}".format(c))
    sizes = {w: (WORKLOADS[w].quick_size if args.quick else WORKLOADS[w].size) for w in workloads}
    for item in args.size:
        name, _, n = item.partition("=")
        if name not in sizes or not n.isdigit():
            ap.error("bad --size {!r} (want WORKLOAD=N for a selected workload)".format(item))
        sizes[name] = int(n)
    benchmarks = args.benchmarks.split(",") if args.benchmarks else None
    for b in benchmarks or ():
        if b not in pyperf_suite.BENCHMARKS:
            ap.error("unknown pyperformance benchmark {!r}".format(b))

    # -- interpreters, floor build, probe -----------------------------------
    t_start = time.perf_counter()
    load_before = load_average()
    base = resolve_python(args.python)
    python, _ = child_python(base, setup=not args.no_setup)
    floor_dir, floor_err = build_floor(python)
    env = child_env(floor_dir)
    probe = micro.probe(python, env)
    py_version = probe["python"].split()[0]
    log("bench: children run {} (Python {}); sections: {}; load average {}".format(
        python, py_version, ", ".join(chosen), load_before))
    ctx = Context(python, py_version, env, cpu=args.cpu, quick=args.quick,
                  setup=not args.no_setup, probe=probe["probe"])
    versions = {m: i.get("version") for m, i in probe["probe"].items() if i.get("ok") and i.get("version")}

    sections = []
    for name in chosen:
        t0 = time.perf_counter()
        if name == "micro":
            sec = micro.run(ctx, workloads, configs, sizes,
                            args.repeats or (micro.QUICK_REPEATS if args.quick else micro.DEFAULT_REPEATS),
                            floor_err=floor_err)
        elif name == "pyperformance":
            sec = pyperf_suite.run(ctx, benchmarks, args.repeats)
        elif name == "e2e":
            sec = e2e.run(ctx, args.repeats)
        elif name == "nowait":
            sec = nowait.run(ctx, args.repeats)
        elif name == "callgrind":
            sec = callgrind.run(ctx)
        elif name == "memory_profile":
            sec = memory_profile.run(ctx)
        else:
            sec = memory.run(ctx, args.memory_events, args.memory_format, args.repeats)
        log("bench: section {} done in {:.0f} s".format(name, time.perf_counter() - t0))
        sections.append(sec)
    elapsed = time.perf_counter() - t_start
    load_after = load_average()

    # -- plot and report -----------------------------------------------------
    plot_note = None
    if args.plot != "-":
        gnuplot = ensure_gnuplot(setup=not args.no_setup)
        png, msg = plot([p for s in sections for p in s.panels], args.plot, gnuplot)
        plot_note = msg if png else "plot skipped: " + msg
        log("bench: " + plot_note)

    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    out = ["# Ocular benchmark results\n"]
    out.append("- date: {}".format(now))
    out.append("- python: {} (`{}`)".format(probe["python"].replace("\n", " "), python))
    out.append("- machine: {}".format(machine_info()))
    out.append("- load average (1, 5, 15 min): {} at start, {} at end".format(load_before, load_after))
    out.append("- sections: {}{}{}; wall time {:.0f} s".format(
        ", ".join(chosen), " (--quick sizes)" if args.quick else "",
        ", pinned to CPU {}".format(args.cpu) if args.cpu is not None else "", elapsed))
    if versions:
        out.append("- versions: " + ", ".join("{} {}".format(m, v) for m, v in sorted(versions.items())))
    if plot_note:
        out.append("- " + plot_note)
    for sec in sections:
        out.append("\n## {}\n".format(sec.title))
        out.append(sec.markdown)
    report = "\n".join(out) + "\n"

    for sec in sections:
        print("\n## {}\n".format(sec.title))
        print(sec.console)
    if args.output != "-":
        Path(args.output).write_text(report)
        log("bench: wrote {} ({:.0f} s)".format(args.output, elapsed))
    return 1 if any(s.failed for s in sections) else 0


if __name__ == "__main__":
    sys.exit(main())
