"""Ocular benchmark runner.

    python -m bench [--quick] [--repeats R] [--workloads a,b] [--configs x,y]
                    [--python 3.13|/path/to/python] [--no-setup] [--cpu N]
                    [--output bench/results.md] [--list] [--callgrind]

Every (workload, configuration) pair runs in a fresh child interpreter
(bench/_child.py), which times only the workload call.  Runs are interleaved:
each of R rounds goes once over every workload and every configuration (the
configuration order rotates from round to round), so slow drifts of the
machine spread over all configurations instead of biasing one.  The median
over rounds is reported.

Before timing, one extra child per workload counts the sys.monitoring events
the workload produces (with _ocular_floor counters), giving the ns/event
columns.

Children run under .venv-bench-X.Y at the repository root (created with
bench/setup_env.sh unless --no-setup; it holds viztracer and yappi) or, if
that is unavailable, under the base interpreter.  Configurations whose
module cannot be imported (ocular before `make`, viztracer, yappi) are
skipped with the reason printed.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import glob
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.configs import CONFIGS, EVENT_SETS
from bench.workloads import WORKLOADS

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
CHILD_TIMEOUT = 300  # seconds per child; a hung tracer must not hang the suite


def log(msg: str = "") -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Interpreters and environment


def resolve_python(spec: str | None) -> str:
    """--python value -> interpreter path (X.Y looks in pyenv, then PATH)."""
    if spec is None:
        return sys.executable
    if os.sep in spec or os.path.exists(spec):
        return os.path.abspath(spec)

    def patch(path):
        m = re.search(r"/versions/\d+\.\d+\.(\d+)/", path)
        return int(m.group(1)) if m else -1

    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    cands = sorted(glob.glob("{0}/versions/{1}.*/bin/python{1}".format(pyenv, spec)), key=patch)
    if cands:
        return cands[-1]
    found = shutil.which("python" + spec)
    if found:
        return found
    raise SystemExit("no interpreter found for --python {}".format(spec))


def python_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    )
    return out.stdout.strip()


def child_python(base: str, setup: bool) -> tuple[str, str]:
    """Interpreter for the children: the bench venv if possible."""
    ver = python_version(base)
    venv = REPO / ".venv-bench-{}".format(ver)
    venv_py = venv / "bin" / "python"
    stamp = venv / ".bench-requirements.txt"
    reqs = (BENCH_DIR / "requirements.txt").read_text()
    fresh = venv_py.exists() and stamp.exists() and stamp.read_text() == reqs
    if not fresh and setup:
        log("bench: {} .venv-bench-{} (bench/setup_env.sh)...".format(
            "updating" if venv_py.exists() else "creating", ver))
        proc = subprocess.run(
            ["bash", str(BENCH_DIR / "setup_env.sh"), base],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        if proc.returncode != 0:
            log("bench: setup_env.sh failed (exit {}); using {} without the "
                "optional tracers:\n{}".format(proc.returncode, base, proc.stdout.strip()))
    if venv_py.exists():
        return str(venv_py), ver
    return base, ver


def child_env(floor_dir: str | None) -> dict:
    env = dict(os.environ)
    # What the caller put on PYTHONPATH comes first (`make bench` sets src;
    # another Ocular build can be pointed at the same way), made absolute
    # because children run in a scratch directory; then the in-place build
    # in src/, the repository root (the bench package) and the floor module.
    paths = []
    for p in env.get("PYTHONPATH", "").split(os.pathsep):
        if p and os.path.abspath(p) not in paths:
            paths.append(os.path.abspath(p))
    for p in (str(REPO / "src"), str(REPO), floor_dir):
        if p and p not in paths:
            paths.append(p)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONHASHSEED"] = "0"
    env.pop("PYTHONSTARTUP", None)
    return env


def build_floor(python: str) -> tuple[str | None, str | None]:
    proc = subprocess.run(
        [python, str(BENCH_DIR / "build_floor.py")], capture_output=True, text=True
    )
    if proc.returncode != 0:
        return None, (proc.stderr.strip() or proc.stdout.strip() or "build failed")
    return proc.stdout.strip().splitlines()[-1], None


# --------------------------------------------------------------------------
# Children


class ChildError(RuntimeError):
    pass


def run_child(python, env, workload, size, config, cpu=None, save=True,
              timeout=CHILD_TIMEOUT, prefix=(), flags=()):
    """Run bench/_child.py once in a scratch directory; return its result dict.

    prefix: command words put before the interpreter (e.g. valgrind ...);
    flags: extra child flags (e.g. --callgrind).
    """
    with tempfile.TemporaryDirectory(prefix="ocular-bench-") as tmp:
        result = os.path.join(tmp, "result.txt")
        cmd = list(prefix) + [python, "-m", "bench._child", workload, str(size), config, result]
        cmd += list(flags)
        if not save:
            cmd.append("--no-save")
        if cpu is not None:
            cmd = ["taskset", "-c", str(cpu)] + cmd
        try:
            proc = subprocess.run(
                cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise ChildError("timed out after {} s".format(timeout)) from None
        if proc.returncode != 0 or not os.path.exists(result):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-12:]
            raise ChildError("exit {}:\n    {}".format(proc.returncode, "\n    ".join(tail)))
        with open(result) as f:
            return ast.literal_eval(f.read())


# --------------------------------------------------------------------------
# Formatting


def fmt_s(x):
    return "—" if x is None else ("{:.4f}".format(x) if x < 10 else "{:.2f}".format(x))


def fmt_ratio(x):
    return "—" if x is None else "{:.2f}×".format(x)


def fmt_count(n):
    if n is None:
        return "—"
    if n >= 1e6:
        return "{:.2f}M".format(n / 1e6)
    if n >= 1e3:
        return "{:.1f}k".format(n / 1e3)
    return str(n)


def fmt_ns(x):
    return "—" if x is None else "{:.1f}".format(x)


def md_table(header, rows, left=2):
    """Markdown table; the first `left` columns left-aligned, the rest right."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(lines)


def machine_info():
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "{} ({} cores), {}".format(cpu or "unknown CPU", os.cpu_count(), platform.platform())


# --------------------------------------------------------------------------


MIN_EVENTS_FOR_NS = 10_000  # below this, ns/event is noise


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench", description="Ocular tracing-overhead benchmark.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--quick", action="store_true",
                    help="small sizes and 2 rounds (smoke test, ~30 s)")
    ap.add_argument("--repeats", "-r", type=int, default=None,
                    help="rounds over all (workload, config) pairs (default 5, --quick 2)")
    ap.add_argument("--workloads", "-w", default=None,
                    help="comma-separated subset of: " + ",".join(WORKLOADS))
    ap.add_argument("--configs", "-c", default=None,
                    help="comma-separated subset of: " + ",".join(CONFIGS))
    ap.add_argument("--python", default=None,
                    help="interpreter for the children: X.Y ($PYENV_ROOT/versions/X.Y.*, then "
                         "pythonX.Y on PATH) or a path "
                         "(default: the one running this)")
    ap.add_argument("--no-setup", action="store_true",
                    help="do not create .venv-bench-X.Y if it is missing")
    ap.add_argument("--cpu", type=int, default=None,
                    help="pin children to this CPU with taskset")
    ap.add_argument("--size", action="append", default=[], metavar="WORKLOAD=N",
                    help="override a workload size (repeatable)")
    ap.add_argument("--output", "-o", default=str(BENCH_DIR / "results.md"),
                    help="markdown report path (default bench/results.md; '-' for none)")
    ap.add_argument("--list", action="store_true", help="list workloads and configurations")
    ap.add_argument("--callgrind", action="store_true",
                    help="run the callgrind instruction-count measurement instead; "
                         "other options then go to it (python -m bench --callgrind --help)")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--callgrind" in argv:
        # Everything else on the command line belongs to bench/callgrind.py.
        from bench import callgrind

        return callgrind.main([a for a in argv if a != "--callgrind"])
    args = ap.parse_args(argv)

    if args.list:
        print("workloads:")
        for w in WORKLOADS.values():
            print("  {:14} size {:>9} (quick {:>7})  {}".format(w.name, w.size, w.quick_size, w.doc))
        print("configurations:")
        for c in CONFIGS.values():
            print("  {:21} {}".format(c.name, c.doc))
        return 0

    workloads = list(WORKLOADS) if not args.workloads else args.workloads.split(",")
    configs = list(CONFIGS) if not args.configs else args.configs.split(",")
    for w in workloads:
        if w not in WORKLOADS:
            ap.error("unknown workload {!r}".format(w))
    for c in configs:
        if c not in CONFIGS:
            ap.error("unknown configuration {!r}".format(c))
    # The ratios need the baseline and the floors: always run them.
    needed = {"untraced"} | {CONFIGS[c].floor for c in configs if CONFIGS[c].floor}
    configs = [c for c in CONFIGS if c in configs or c in needed]
    repeats = args.repeats or (2 if args.quick else 5)
    sizes = {w: (WORKLOADS[w].quick_size if args.quick else WORKLOADS[w].size) for w in workloads}
    for item in args.size:
        name, _, n = item.partition("=")
        if name not in sizes or not n.isdigit():
            ap.error("bad --size {!r} (want WORKLOAD=N for a selected workload)".format(item))
        sizes[name] = int(n)

    # -- interpreters, floor build, probes ---------------------------------
    base = resolve_python(args.python)
    python, ver = child_python(base, setup=not args.no_setup)
    floor_dir, floor_err = build_floor(python)
    env = child_env(floor_dir)
    probe = run_child(python, env, "-", 0, "probe")
    py_version = probe["python"].split()[0]
    log("bench: children run {} (Python {})".format(python, py_version))

    skipped = {}
    for c in list(configs):
        req = CONFIGS[c].requires
        if req is None:
            continue
        info = probe["probe"].get(req, {"ok": False, "reason": "not probed"})
        if not info["ok"]:
            reason = info["reason"]
            if req == "_ocular_floor" and floor_err:
                reason = "building bench/floor.c failed: " + floor_err
            skipped[c] = reason
            configs.remove(c)
    for c, reason in skipped.items():
        log("bench: SKIP {}: {}".format(c, reason))
    versions = {m: i.get("version") for m, i in probe["probe"].items() if i.get("ok") and i.get("version")}

    # -- event counts -------------------------------------------------------
    counts = {}
    if "_ocular_floor" in probe["probe"] and probe["probe"]["_ocular_floor"]["ok"]:
        for w in workloads:
            try:
                res = run_child(python, env, w, sizes[w], "count", cpu=args.cpu)
                counts[w] = res["counts"]
            except ChildError as exc:
                log("bench: event count for {} failed: {}".format(w, exc))
    else:
        log("bench: no event counts (floor module unavailable): ns/event columns empty")

    # Cross-check the counting pass against arithmetic: fib(n) makes
    # 2*F(n+1) - 1 calls (plus a few for the harness around it).
    if "fib" in counts:
        from bench.workloads import fib_calls

        expected, got = fib_calls(sizes["fib"]), counts["fib"].get("PY_START", 0)
        if not expected <= got <= expected + 10:
            log("bench: WARNING event counting looks wrong: fib({}) counted {} PY_START, "
                "expected {} (+ a few)".format(sizes["fib"], got, expected))

    def events_for(w, cfg):
        if w not in counts or cfg.events is None:
            return None
        return sum(counts[w].get(e, 0) for e in EVENT_SETS[cfg.events])

    # -- timed runs, interleaved -------------------------------------------
    samples = {(w, c): [] for w in workloads for c in configs}
    stops = {(w, c): [] for w in workloads for c in configs}
    saves = {(w, c): [] for w in workloads for c in configs}
    results = {}
    failures = {}
    total = repeats * len(workloads) * len(configs)
    k = 0
    t_start = time.perf_counter()
    log("bench: {} rounds x {} workloads x {} configurations = {} runs".format(
        repeats, len(workloads), len(configs), total))
    for r in range(repeats):
        order = configs[r % len(configs):] + configs[: r % len(configs)]
        for w in workloads:
            for c in order:
                k += 1
                if (w, c) in failures:
                    continue
                try:
                    # Trace output is written in the first round only (a 1M
                    # event viztracer save takes seconds and is not timed).
                    res = run_child(python, env, w, sizes[w], c, cpu=args.cpu, save=(r == 0))
                except ChildError as exc:
                    failures[(w, c)] = str(exc)
                    log("[{:4}/{}] round {} {}/{}: FAILED {}".format(k, total, r + 1, w, c, exc))
                    continue
                samples[(w, c)].append(res["work_s"])
                stops[(w, c)].append(res["stop_s"])
                if res["save_s"] is not None:
                    saves[(w, c)].append(res["save_s"])
                if c == "untraced":
                    results.setdefault(w, res["result"])
                elif w in results and res["result"] != results[w] and (w, c) not in failures:
                    log("bench: WARNING {}/{} returned {} (untraced: {})".format(
                        w, c, res["result"], results[w]))
                log("[{:4}/{}] round {} {:14} {:21} {:.4f} s".format(
                    k, total, r + 1, w, c, res["work_s"]))
    elapsed = time.perf_counter() - t_start

    # -- report -------------------------------------------------------------
    def med(w, c):
        s = samples.get((w, c))
        return statistics.median(s) if s else None

    header = ["workload", "config", "median s", "spread", "× untraced", "× floor",
              "events", "ns/event", "tracer ns/event", "stop+save s"]
    rows = []
    for w in workloads:
        base_t = med(w, "untraced")
        for c in configs:
            cfg = CONFIGS[c]
            m = med(w, c)
            if m is None:
                rows.append([w, c, "FAILED", "", "", "", "", "", "", ""])
                continue
            s = samples[(w, c)]
            spread = "±{:.1f}%".format(50 * (max(s) - min(s)) / m) if len(s) > 1 and m else "—"
            x_base = m / base_t if base_t else None
            floor_t = med(w, cfg.floor) if cfg.floor and cfg.floor != c else None
            x_floor = m / floor_t if floor_t else None
            ev = events_for(w, cfg)
            ns = ns_tr = None
            if ev and ev >= MIN_EVENTS_FOR_NS and cfg.per_event and base_t is not None:
                ns = (m - base_t) / ev * 1e9
                if floor_t is not None:
                    ns_tr = (m - floor_t) / ev * 1e9
            fin = None
            if cfg.kind != "untraced":
                fin = statistics.median(stops[(w, c)])
                if saves[(w, c)]:
                    fin += statistics.median(saves[(w, c)])
            rows.append([w, c, fmt_s(m), spread, fmt_ratio(x_base) if c != "untraced" else "1.00×",
                         fmt_ratio(x_floor), fmt_count(ev), fmt_ns(ns), fmt_ns(ns_tr), fmt_s(fin)])

    count_rows = []
    for w in workloads:
        cw = counts.get(w)
        count_rows.append([
            w, sizes[w], WORKLOADS[w].doc,
            *(fmt_count(sum(cw.get(e, 0) for e in EVENT_SETS[k])) if cw else "—"
              for k in ("calls", "adaptive", "precise")),
        ])

    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    out = []
    out.append("# Ocular benchmark results\n")
    out.append("- date: {}".format(now))
    out.append("- python: {} (`{}`)".format(probe["python"].replace("\n", " "), python))
    out.append("- machine: {}".format(machine_info()))
    out.append("- rounds: {}{}{}; wall time {:.0f} s".format(
        repeats, " (--quick sizes)" if args.quick else "",
        ", pinned to CPU {}".format(args.cpu) if args.cpu is not None else "", elapsed))
    if versions:
        out.append("- versions: " + ", ".join("{} {}".format(m, v) for m, v in sorted(versions.items())))
    for c, reason in skipped.items():
        out.append("- skipped **{}**: {}".format(c, reason))
    for (w, c), err in failures.items():
        out.append("- failed **{}/{}**: {}".format(w, c, err.splitlines()[0]))
    out.append("")
    out.append(md_table(header, rows))
    out.append("")
    out.append("## Workloads and event counts\n")
    out.append("Events counted once per workload with no-op counting callbacks "
               "(bench/floor.c), per event set: *calls* = PY_START, PY_RESUME, PY_THROW, "
               "PY_RETURN, PY_YIELD, PY_UNWIND; *adaptive* = calls + JUMP, BRANCH; "
               "*precise* = adaptive + INSTRUCTION.\n")
    out.append(md_table(["workload", "size", "what", "calls events", "adaptive events",
                         "precise events"], count_rows, left=3))
    out.append("")
    out.append("## Columns\n")
    out.append(
        "- **median s**: median over rounds of the workload's own run time in a fresh "
        "process (tracer start, stop and save excluded); **spread**: ±half the "
        "min–max range, relative to the median.\n"
        "- **× untraced**: median / untraced median. **× floor**: median / median of the "
        "floor with the same event set (floor-calls for cProfile, viztracer, yappi; "
        "floor for ocular adaptive; floor-precise for ocular precise).\n"
        "- **events**: monitoring events of the configuration's event set for this workload "
        "(calls set for cProfile, viztracer and yappi, which also see C calls not counted here).\n"
        "- **ns/event**: (median − untraced median) / events. **tracer ns/event**: "
        "(median − floor median) / events, the tracer's own cost above CPython's dispatch. "
        "Empty below {} events, and for adaptive with a threshold > 0, whose "
        "de-instrumentation means fewer events are delivered than counted.\n"
        "- **stop+save s**: median time to stop the tracer plus the time to write its "
        "output, which is done in the first round only "
        "(ocular: stop_tracing(), every round; viztracer: stop() + save(); "
        "cProfile, yappi: stop + pstat dump)."
        .format(MIN_EVENTS_FOR_NS)
    )
    out.append("\n## Configurations\n")
    for c in CONFIGS.values():
        out.append("- **{}**: {}".format(c.name, c.doc))
    report = "\n".join(out) + "\n"

    print()
    print(md_table(header, rows))
    print()
    print(md_table(["workload", "size", "what", "calls events", "adaptive events",
                    "precise events"], count_rows, left=3))
    for c, reason in skipped.items():
        print("skipped {}: {}".format(c, reason))
    if args.output != "-":
        Path(args.output).write_text(report)
        log("bench: wrote {} ({:.0f} s)".format(args.output, elapsed))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
