"""Ocular's defaults against the floor and cProfile, in instructions (callgrind), workload by workload.

    python -m bench.callgrind_compare [--python X.Y] [--jobs 2] [--configs a,b] [--workloads a,b]
                                      [--keep DIR] [-o PATH]

One table per measure, workloads down, configurations across, each figure a multiple of the
untraced run's instructions (Ir), side by side:

- configurations (bench/_callgrind_child.py, COMPARE_CONFIGS): ``untraced``; ``floor-calls``, a
  no-op C callback (bench/floor.c) on the six function events (PY_START, PY_RESUME, PY_THROW,
  PY_RETURN, PY_YIELD, PY_UNWIND); ``floor-jumps``, the same plus JUMP and BRANCH (BRANCH_LEFT and
  BRANCH_RIGHT on 3.14+); ``cProfile`` (``enable()``, then ``print_stats()`` at stop, what
  ``python -m cProfile SCRIPT`` prints); ``ocular-near-zero`` = the old default
  (``start_tracing(near_zero=True, deinstrument_threshold=500)``: function starts and returns
  de-instrumented after 500 calls too); ``ocular-default`` (``deinstrument_threshold=500``: every
  function event recorded; jump sites, instruction probes and cheap C call sites de-instrumented);
  ``ocular-t0`` (threshold 0: everything, for reference).  Every Ocular configuration writes its
  default output (``ocular_trace.pftrace``, compressed Perfetto protobuf) and prints its text report at stop, as
  ``python -m ocular SCRIPT`` does;
- workloads: ``fib:22`` (recursive fib), ``loop_ccalls:1000000`` (bench/workloads.py: a loop with
  two C calls per iteration), and pyperformance's richards, deltablue, raytrace and go
  (``pyperf:NAME``: the package's own ``run_benchmark.py``, unmodified, run by runpy as one pyperf
  worker, ``--worker --loops L --warmups 0 --values 1``, from cold code, as in
  bench/pyperf_suite.py; sizes in bench/_callgrind_child.py PYPERF keep each callgrind run under ~2
  minutes); ``aio_loopback:N`` (bench/workloads.py: an asyncio echo server and 20 clients on loopback,
  N request lines; not in the default set).

Each (configuration, workload) runs once under ``valgrind --tool=callgrind --separate-threads=yes``
with the program's thread cut at the entry and exit of ``ocular_floor_measured_call`` (bench/floor.c)
that makes the workload call, as bench/callgrind.py does.  The program's thread's first part
(interpreter start-up, imports, the tracer's start) is left out, and the same configuration's run of
fib(1) (``null``) is subtracted from each figure, removing the tracer's fixed stop costs and
interpreter exit.  Measures:

- *program's thread, run*: the program's thread inside the workload call (the callbacks);
- *program's thread, total*: that thread from the workload call to exit (adds stop: rendering the
  trace, building and printing the report, cProfile's print_stats);
- *all threads*: every thread (adds Ocular's recorder thread): what the machine pays.

Instruction counts are nearly deterministic (one run each, any machine load), so runs go ``--jobs``
at a time.  The report is printed and written to bench/_build/callgrind_compare.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# (the pyperformance benchmarks and their sizes live in the child, which imports nothing heavy)
from bench._callgrind_child import PYPERF
from bench.common import (
    BENCH_DIR,
    ChildError,
    Context,
    build_floor,
    child_env,
    child_python,
    log,
    machine_info,
    md_table,
    print_and_write,
    resolve_python,
)

CONFIGS = ("untraced", "floor-calls", "floor-jumps", "cProfile", "ocular-near-zero", "ocular-default",
           "ocular-default-report", "ocular-t0")
DEFAULT_CONFIGS = tuple(c for c in CONFIGS if c != "ocular-default-report")
LABELS = {
    "untraced": "untraced",
    "floor-calls": "floor, 6 function events",
    "floor-jumps": "floor, + JUMP, BRANCH",
    "cProfile": "cProfile",
    "ocular-near-zero": "Ocular near-zero (= old default)",
    "ocular-default": "Ocular new default",
    "ocular-default-report": "Ocular new default, report only",
    "ocular-t0": "Ocular threshold 0",
}
DOCS = {
    "untraced": "no tracer",
    "floor-calls": "no-op C callback (bench/floor.c), tool 2, on PY_START, PY_RESUME, PY_THROW, PY_RETURN, "
                   "PY_YIELD, PY_UNWIND",
    "floor-jumps": "the same on those plus JUMP and BRANCH (BRANCH_LEFT, BRANCH_RIGHT on 3.14+): Ocular's "
                   "adaptive event set but its C call events",
    "cProfile": "cProfile.Profile().enable(); at stop disable() and print_stats() (what `python -m cProfile "
                "SCRIPT` prints)",
    "ocular-near-zero": "start_tracing(near_zero=True, deinstrument_threshold=500): the default before "
                        "cea7725 (function starts and returns de-instrumented after 500 calls too)",
    "ocular-default": "start_tracing(deinstrument_threshold=500): the default (every function event "
                      "recorded; jumps, instruction probes and cheap C call sites de-instrumented)",
    "ocular-default-report": "start_tracing(deinstrument_threshold=500, perfetto=False): the default but no "
                             "trace file: recording, statistics and the text report",
    "ocular-t0": "start_tracing(deinstrument_threshold=0): everything recorded, for reference",
}
NULL = "fib:1"
# Ocular's sampling windows are timed by the clock: under callgrind, ~50x slower than natively, the
# default 100 ms / 1 ms would open ~50x more windows per unit of work (each re-arms every disabled site)
SAMPLING = "5000,50"
WORKLOADS = ("fib:22", "loop_ccalls:1000000") + tuple("pyperf:" + n for n in PYPERF)
WORKLOAD_DOCS = {
    "fib": "recursive fib(N), minus fib(1)",
    "loop_ccalls": "`for i in range(N): total += abs(i - half) + word.count('a')` (two C calls per "
                   "iteration), minus fib(1)",
    "pyperf": "pyperformance's run_benchmark.py, one pyperf worker, minus fib(1)",
}
RUN, TOTAL, ALL = 0, 1, 2
MEASURES = (("program's thread, run", "inside the workload call"),
            ("program's thread, total", "adds stop: rendering, the report"),
            ("all threads", "adds the recorder thread: report and trace rendered at stop"))


def label(w):
    kind, _, arg = w.partition(":")
    if kind == "fib":
        return "fib({})".format(arg)
    if kind == "loop_ccalls":
        return "loop, 2 C calls × {:,}".format(int(arg))
    if kind == "pyperf":
        loops, args = PYPERF[arg]
        return "{}{}{}".format(arg, " " + " ".join(args) if args else "",
                               ", {} loops".format(loops) if loops != 1 else "")
    return w


def measure(ctx, valgrind, cfg, workload, keep=None):
    """(run Ir, program's thread Ir, all threads' Ir, threads, child result) of one run."""
    from bench.callgrind import read_parts, run_child, valgrind_cmd

    args = ["compare", cfg, workload]
    with tempfile.TemporaryDirectory(prefix="ocular-cgcmp-warm-") as tmp:
        run_child(ctx, args + [tmp], tmp)  # unmeasured: bytecode caches written (bench/callgrind.py warm_up)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ocular-cgcmp-") as tmp:
        prefix = valgrind_cmd(valgrind, os.path.join(tmp, "callgrind.out"), True)
        if keep:  # every part file readable alone by callgrind_annotate
            prefix.append("--compress-strings=no")
        res = run_child(ctx, args + [tmp], tmp, prefix=prefix)
        parts = read_parts(tmp)
        if keep:
            dest = os.path.join(keep, "{}__{}".format(cfg, workload.replace(":", "-")))
            shutil.rmtree(dest, ignore_errors=True)
            os.makedirs(dest)
            for f in os.listdir(tmp):
                if f.startswith("callgrind.out") or f in (".stderr", ".stdout"):
                    shutil.copy(os.path.join(tmp, f), dest)
    if 1 not in parts:
        raise ChildError("no callgrind output for thread 1")
    numbered = sorted(p for p in parts[1] if p != 0x7FFF)
    if len(numbered) != 2:
        raise ChildError("expected the program's thread cut in 3 parts, got {}".format(sorted(parts[1])))
    # part 1: start-up, imports, the tracer's start (left out: the same in the fib(1) run, but for
    # what preparing the workload imports); part 2: the workload call; the rest: stop, exit
    before, run_ir = parts[1][numbered[0]], parts[1][numbered[1]]
    main_ir = sum(parts[1].values()) - before
    all_ir = sum(sum(p.values()) for p in parts.values()) - before
    log("callgrind_compare: {:18} {:22} run {:>14,} all {:>14,} Ir ({:.0f} s)".format(
        cfg, workload, run_ir, all_ir, time.perf_counter() - t0))
    return run_ir, main_ir, all_ir, len(parts), res


def run(ctx, configs=DEFAULT_CONFIGS, workloads=WORKLOADS, jobs=2, keep=None, reuse=None):
    """Markdown report, failures, and the raw measurements {(config, workload): (run, thread, all,
    threads, result)}; measurements in `reuse` (the same form) are not run again."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("callgrind_compare: valgrind not found (apt-get install valgrind)")
    t_start = time.perf_counter()
    jobs_list = [(c, w) for w in (NULL,) + tuple(workloads) for c in configs]
    # the longest first (t0 and the pyperformance runs), so that two workers finish together
    jobs_list.sort(key=lambda cw: (cw[1].startswith("pyperf"), cw[0] == "ocular-t0", cw[0] == "cProfile"),
                   reverse=True)
    meas, failures = {}, {}
    for cw in list(jobs_list):
        if reuse and cw in reuse:
            meas[cw] = reuse[cw]
            jobs_list.remove(cw)

    def one(cw):
        c, w = cw
        try:
            meas[cw] = measure(ctx, valgrind, c, w, keep)
        except ChildError as exc:
            failures[cw] = str(exc)
            log("callgrind_compare: {} {} FAILED: {}".format(c, w, exc))

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, jobs_list))
    elapsed = time.perf_counter() - t_start

    def diff(c, w):
        if (c, w) not in meas or (c, NULL) not in meas:
            return None
        a, z = meas[(c, w)], meas[(c, NULL)]
        return [a[i] - z[i] for i in range(3)]

    def ratio(c, w, i):
        d, b = diff(c, w), diff("untraced", w)
        if d is None or b is None or not b[i]:
            return None
        return d[i] / b[i]

    def fmt(x, digits=2):
        return "—" if x is None else "{:.{}f}×".format(x, digits)

    out = ["Python {}; callgrind instruction counts (nearly deterministic, one run each); "
           "{} runs, {} at a time, {:.0f} s.\n".format(ctx.version, len(jobs_list), jobs, elapsed)]
    for (c, w), err in failures.items():
        out.append("- failed **{} / {}**: {}".format(c, w, err.splitlines()[0]))
    if failures:
        out.append("")
    traced = [c for c in configs if c != "untraced"]
    for i, (title, what) in enumerate(MEASURES):
        header = ["workload", "untraced Ir"] + [LABELS[c] for c in traced]
        vs_cp = [c for c in ("ocular-default", "ocular-default-report") if c in configs and "cProfile" in configs]
        for c in vs_cp:
            header.append("{} ÷ cProfile".format("new default" if c == "ocular-default" else "report only"))
        rows = []
        for w in workloads:
            b = diff("untraced", w)
            row = [label(w), "{:,}".format(b[i]) if b else "—"]
            for c in traced:
                x = ratio(c, w, i)
                row.append(fmt(x, 3 if w.startswith("loop") else 2))
            for c in vs_cp:
                d, p = diff(c, w), diff("cProfile", w)
                row.append("**{:.2f}**".format(d[i] / p[i]) if d and p and p[i] else "—")
            rows.append(row)
        out.append("### {}: × untraced ({})\n".format(title.capitalize(), what))
        out.append(md_table(header, rows, left=1))
        out.append("")

    # events as Ocular recorded them, and the pauses (the program waiting for the recorder)
    ev_rows = []
    for w in workloads:
        row = [label(w)]
        for c in configs:
            if not c.startswith("ocular"):
                continue
            r = meas.get((c, w))
            row.append("—" if r is None or r[4].get("events") is None else "{:,} / {}".format(
                r[4]["events"], r[4].get("pauses", "—")))
        ev_rows.append(row)
    out.append("### Events recorded / pauses (Ocular)\n")
    out.append(md_table(["workload"] + [LABELS[c] for c in configs if c.startswith("ocular")], ev_rows,
                        left=1))
    out.append("")

    # the targets of the defaults change
    lines = []

    def target(name, x, bound):
        if x is None:
            lines.append("- {}: not measured".format(name))
        else:
            lines.append("- {}: **{:.3f}** (target ≤ {}): {}".format(
                name, x, bound, "met" if x <= bound else "**not met**"))

    def vs(c1, c2, w, i):
        d1, d2 = diff(c1, w), diff(c2, w)
        return d1[i] / d2[i] if d1 and d2 and d2[i] else None

    for w in workloads:
        if w.startswith("fib:"):
            target("{}: new default ÷ cProfile, program's thread (run)".format(label(w)),
                   vs("ocular-default", "cProfile", w, RUN), 0.7)
        elif w.startswith("loop_ccalls:"):
            target("{}: new default × untraced, program's thread (run)".format(label(w)),
                   ratio("ocular-default", w, RUN), 1.05)
            target("{}: new default × untraced, all threads".format(label(w)),
                   ratio("ocular-default", w, ALL), 1.05)
        elif w.startswith("pyperf:"):
            target("{}: new default ÷ cProfile, all threads (report rendered)".format(label(w)),
                   vs("ocular-default", "cProfile", w, ALL), 1.0)
            if "ocular-default-report" in configs:
                target("{}: (no trace file) report only ÷ cProfile, all threads".format(label(w)),
                       vs("ocular-default-report", "cProfile", w, ALL), 1.0)
    out.append("### Targets\n")
    out.extend(lines)
    out.append("")
    out.append("Every figure is (Ir of the workload run − Ir of the same configuration's fib(1) run) ÷ the "
               "same for untraced; ÷ cProfile divides the new default's difference by cProfile's. "
               "Configurations:\n")
    for c in configs:
        out.append("- **{}** (`{}`): {}".format(LABELS[c], c, DOCS[c]))
    out.append("")
    out.append("Workloads: " + "; ".join("**{}**: {}".format(k, v) for k, v in WORKLOAD_DOCS.items())
               + ". pyperformance sizes: " + ", ".join(
                   "{} `{}` loops {}".format(n, " ".join(a) or "—", lp) for n, (lp, a) in PYPERF.items()) + ".")
    return "\n".join(out), failures, meas


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.callgrind_compare",
                                 description="Ocular's defaults against the floor and cProfile, in instructions.")
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                    help="default: %(default)s (also: ocular-default-report)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="fib:N, loop_ccalls:N, pyperf:NAME (NAME in {}); default: %(default)s".format(
                        ", ".join(PYPERF)))
    ap.add_argument("--jobs", "-j", type=int, default=2, help="valgrind runs at a time (default %(default)s)")
    ap.add_argument("--keep", default=None, metavar="DIR",
                    help="keep every run's callgrind files in DIR/CONFIG__WORKLOAD/ (for callgrind_annotate)")
    ap.add_argument("--sampling", default=SAMPLING, metavar="P,W|native|off",
                    help="Ocular's sampling windows (period, window in ms): %(default)s by default, the native "
                         "100,1 stretched by ~callgrind's slowdown (50x), so that a run has about as many "
                         "windows per unit of work as natively; 'native': the library's default; 'off': none")
    ap.add_argument("--ccall-keep-ns", default="100000",
                    help="OCULAR_CCALL_KEEP_NS for the runs (default 100000: the native 1 us rule x100, as "
                         "callgrind runs ~100x slow; 'native': leave the default)")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the raw measurements to PATH")
    ap.add_argument("--reuse", action="append", default=[], metavar="PATH",
                    help="raw measurements of an earlier run (--json) to take instead of running them again "
                         "(same interpreter and build!); repeatable")
    ap.add_argument("--python", default=None, help="X.Y or interpreter path")
    ap.add_argument("--no-setup", action="store_true", help="do not create .venv-bench-X.Y if it is missing")
    ap.add_argument("--output", "-o", default=str(BENCH_DIR / "_build" / "callgrind_compare.md"),
                    help="markdown report path ('-' for none)")
    args = ap.parse_args(argv)
    configs = args.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            ap.error("unknown configuration {!r} (choose from {})".format(c, ", ".join(CONFIGS)))
    if "untraced" not in configs:
        configs.insert(0, "untraced")
    configs.sort(key=CONFIGS.index)
    workloads = tuple(args.workloads.split(","))
    for w in workloads:
        kind, _, arg = w.partition(":")
        if not (kind in ("fib", "loop_ccalls", "aio_loopback") and arg.isdigit() or kind == "pyperf" and arg in PYPERF):
            ap.error("unknown workload {!r}".format(w))

    from bench import micro

    python, _ = child_python(resolve_python(args.python), setup=not args.no_setup)
    floor_dir, floor_err = build_floor(python)
    if floor_dir is None:
        print("callgrind_compare: building bench/floor.c failed:\n" + (floor_err or ""))
        return 1
    env = child_env(floor_dir)
    if args.sampling == "native":
        env.pop("OCULAR_BENCH_SAMPLING", None)
    else:
        env["OCULAR_BENCH_SAMPLING"] = "0" if args.sampling == "off" else args.sampling
    # the C call site rule is timed by the clock, which callgrind slows ~100x: its limit x100 keeps the
    # native decisions (cheap builtins de-instrumented); --ccall-keep-ns native: the default 1,000 ns
    if args.ccall_keep_ns != "native":
        env["OCULAR_CCALL_KEEP_NS"] = args.ccall_keep_ns
    probe = micro.probe(python, env)
    ctx = Context(python, probe["python"].split()[0], env, setup=not args.no_setup, probe=probe["probe"])
    for c in configs:
        need = {"ocular-near-zero": "ocular", "ocular-default": "ocular", "ocular-t0": "ocular",
                "cProfile": "cProfile"}.get(c, "_ocular_floor")
        if not ctx.has(need):
            raise SystemExit("callgrind_compare: {} needs {}: {}".format(
                c, need, ctx.probe.get(need, {}).get("reason")))
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    import ast

    reuse = {}
    for path in args.reuse:
        for k, v in ast.literal_eval(Path(path).read_text()).items():
            reuse[tuple(k.split("|"))] = v
    body, failures, meas = run(ctx, configs, workloads, args.jobs, args.keep, reuse)
    if args.json:
        Path(args.json).write_text(repr({"|".join(k): v for k, v in meas.items()}))
    report = ("# Ocular's defaults in instructions (callgrind)\n\n- python: `{}`\n- machine: {}\n"
              "- Ocular's sampling windows: {}\n\n{}\n").format(
        python, machine_info(), {"native": "the default (100 ms period, 1 ms window)",
                                 "off": "off (sampling=False)"}.get(
            args.sampling, "period {} ms, window {} ms (the default 100/1 stretched like the run under "
                           "callgrind)".format(*args.sampling.split(","))), body)
    print_and_write(report, args.output, "callgrind_compare")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
