"""Real benchmarks from the pyperformance suite, untraced and under ``python -m ocular``.

Code nobody here wrote: each benchmark is the ``run_benchmark.py`` that the
``pyperformance`` package ships (``pyperformance/data-files/benchmarks/
bm_NAME/run_benchmark.py``, installed into .venv-bench-X.Y from
bench/requirements.txt), run unmodified as a script, in one process, as a
pyperf *worker*:

    python [-m ocular --threshold T -o trace.EXT] run_benchmark.py [ARGS] \\
        --worker --loops L --warmups 0 --values 1 --output result.json

``--worker`` makes pyperf run the benchmark in this very process instead of
spawning its usual 20 worker processes (which would escape the tracer);
``--warmups 0 --values 1`` takes one timed value of L loops inside the
traced process, from cold code, as a traced program runs (for threshold 500
it includes Ocular's warm-up, the 500 traced hits per location).  pyperf's
value is per loop and times only the benchmark's own function; the
**process wall** time (spawn to exit, from the runner) adds interpreter
start-up, importing pyperf, stopping Ocular, writing the trace and building
its report.

Every configuration runs in a fresh process, interleaved round by round
(the configuration order rotates), and medians over rounds are reported.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time

from bench.common import (
    ChildError,
    Section,
    fmt_bytes,
    fmt_count,
    fmt_ratio,
    fmt_s,
    log,
    md_table,
    median,
    rotated,
    run_timed,
    spread,
    tail,
)

DEFAULT_REPEATS, QUICK_REPEATS = 3, 1


class Bench:
    """A pyperformance benchmark: loops per value and extra script arguments
    (default and --quick), chosen for about 0.1-0.3 s per value untraced on
    the reference machine."""

    __slots__ = ("name", "loops", "args", "quick_loops", "quick_args", "doc")

    def __init__(self, name, loops, args, quick_loops, quick_args, doc):
        self.name = name
        self.loops = loops
        self.args = list(args)
        self.quick_loops = quick_loops
        self.quick_args = list(quick_args)
        self.doc = doc


BENCHMARKS = {
    b.name: b
    for b in (
        Bench("nbody", 1, ["--iterations", "8000"], 1, ["--iterations", "2000"],
              "n-body float arithmetic, loops over pairs"),
        Bench("richards", 1, [], 1, [], "OS task scheduler simulation, method calls"),
        Bench("float", 1, [], 1, [], "Point objects, math.sin/cos, float ops"),
        Bench("deltablue", 10, [], 2, [], "constraint solver, deep OO class hierarchy"),
        Bench("go", 1, [], 1, [], "Go game, Monte Carlo tree search"),
        Bench("raytrace", 1, ["--width", "40", "--height", "40"], 1,
              ["--width", "10", "--height", "10"], "ray tracer, vector classes"),
        Bench("json_dumps", 3, [], 1, [], "json.dumps of nested data (C encoder, Python default hooks)"),
        Bench("generators", 1, [], 1, [], "recursive tree walk with generators (yield from, depth 17)"),
    )
}
QUICK_BENCHMARKS = ("deltablue", "json_dumps")


class Config:
    """How the benchmark process is started: plain, or under ``python -m ocular``."""

    __slots__ = ("name", "ocular", "doc")

    def __init__(self, name, ocular, doc):
        self.name = name
        self.ocular = ocular  # (threshold, suffix) or None
        self.doc = doc


CONFIGS = {
    c.name: c
    for c in (
        Config("untraced", None, "python run_benchmark.py ..."),
        Config("ocular-t0-json", (0, "json"),
               "python -m ocular --threshold 0 -o trace.json run_benchmark.py ..."),
        Config("ocular-t0-pftrace", (0, "pftrace"),
               "python -m ocular --threshold 0 -o trace.pftrace run_benchmark.py ..."),
        Config("ocular-t500-json", (500, "json"),
               "python -m ocular --threshold 500 -o trace.json run_benchmark.py ... (the defaults)"),
        Config("ocular-t500-pftrace", (500, "pftrace"),
               "python -m ocular --threshold 500 -o trace.pftrace run_benchmark.py ..."),
    )
}

_WRITTEN = re.compile(r"ocular: trace written to .* \(([\d.]+) MB, (\d+) events, (\d+) dropped\)")


def benchmarks_dir(python, env):
    """pyperformance's benchmark directory in the children's interpreter, or
    (None, reason)."""
    code = ("import os, pyperformance, pyperf; "
            "print(os.path.join(os.path.dirname(pyperformance.__file__), 'data-files', 'benchmarks'))")
    proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["import failed"])[-1]
        return None, "pyperformance/pyperf not importable in {}: {}".format(python, last)
    path = proc.stdout.strip()
    if not os.path.isdir(path):
        return None, "no benchmark directory at " + path
    return path, None


def run_one(ctx, script, bench, cfg, loops, args, values):
    """One benchmark process; returns a dict of its figures (raises ChildError)."""
    with tempfile.TemporaryDirectory(prefix="ocular-pyperf-") as tmp:
        result = os.path.join(tmp, "result.json")
        cmd = ctx.prefix() + [ctx.python]
        trace = None
        if cfg.ocular:
            threshold, suffix = cfg.ocular
            trace = os.path.join(tmp, "trace." + suffix)
            cmd += ["-m", "ocular", "--threshold", str(threshold), "-o", trace]
        cmd += [script] + args + ["--worker", "--loops", str(loops), "--warmups", "0",
                                  "--values", str(values), "--output", result]
        proc = run_timed(cmd, tmp, ctx.env)
        if proc.status != 0 or not os.path.exists(result):
            raise ChildError("{} {} exit {}:\n    {}".format(
                bench.name, cfg.name, proc.status, tail(proc.stderr or proc.stdout)))
        with open(result) as f:
            data = json.load(f)
        vals = data["benchmarks"][0]["runs"][0]["values"]
        out = {"wall": proc.wall, "values": vals, "events": None, "dropped": None, "bytes": None}
        if trace:
            m = _WRITTEN.search(proc.stderr)
            if not m or not os.path.exists(trace):
                raise ChildError("{} {}: no trace written:\n    {}".format(
                    bench.name, cfg.name, tail(proc.stderr)))
            out["events"] = int(m.group(2))
            out["dropped"] = int(m.group(3))
            out["bytes"] = os.path.getsize(trace)
        return out


def run(ctx, names=None, repeats=None, values=1) -> Section:
    """Run the selected pyperformance benchmarks under every configuration."""
    title = "pyperformance benchmarks under `python -m ocular`"
    bdir, err = benchmarks_dir(ctx.python, ctx.env)
    if bdir is None:
        log("bench: SKIP pyperformance: " + err)
        return Section(title, "Skipped: " + err, panels=())
    if not ctx.has("ocular"):
        reason = ctx.probe.get("ocular", {}).get("reason", "ocular not importable")
        log("bench: SKIP pyperformance: " + reason)
        return Section(title, "Skipped: " + reason)
    quick = ctx.quick
    names = list(names or (QUICK_BENCHMARKS if quick else BENCHMARKS))
    repeats = repeats or (QUICK_REPEATS if quick else DEFAULT_REPEATS)
    configs = list(CONFIGS)
    scripts = {n: os.path.join(bdir, "bm_" + n, "run_benchmark.py") for n in names}
    for n, s in scripts.items():
        if not os.path.exists(s):
            raise SystemExit("pyperformance has no benchmark {!r} ({} missing)".format(n, s))

    samples = {(n, c): [] for n in names for c in configs}
    failures = {}
    total = repeats * len(names) * len(configs)
    k = 0
    t_start = time.perf_counter()
    log("bench: pyperformance: {} rounds x {} benchmarks x {} configurations = {} runs".format(
        repeats, len(names), len(configs), total))
    for r in range(repeats):
        order = rotated(configs, r)
        for n in names:
            b = BENCHMARKS[n]
            loops, args = (b.quick_loops, b.quick_args) if quick else (b.loops, b.args)
            for c in order:
                k += 1
                if (n, c) in failures:
                    continue
                try:
                    res = run_one(ctx, scripts[n], b, CONFIGS[c], loops, args, values)
                except ChildError as exc:
                    failures[(n, c)] = str(exc)
                    log("[{:4}/{}] round {} {}/{}: FAILED {}".format(k, total, r + 1, n, c, exc))
                    continue
                samples[(n, c)].append(res)
                log("[{:4}/{}] round {} {:12} {:20} {} wall {:.3f} s{}".format(
                    k, total, r + 1, n, c,
                    " ".join("{:.4f}".format(v) for v in res["values"]), res["wall"],
                    "" if res["events"] is None else ", {} events".format(fmt_count(res["events"]))))
    elapsed = time.perf_counter() - t_start

    def med(n, c, key, i=None):
        xs = [s[key] if i is None else s[key][i] for s in samples[(n, c)]
              if (i is None or len(s[key]) > i) and (i is not None or s[key] is not None)]
        return median(xs)

    header = ["benchmark", "config", "value s", "spread", "× untraced",
              "process wall s", "× untraced", "events", "dropped", "trace size"]
    rows = []
    ratios = {}
    for n in names:
        base1, basew = med(n, "untraced", "values", 0), med(n, "untraced", "wall")
        for c in configs:
            if not samples[(n, c)]:
                rows.append([n, c, "FAILED"] + [""] * (len(header) - 3))
                continue
            v1, w = med(n, c, "values", 0), med(n, c, "wall")
            x1 = v1 / base1 if base1 else None
            if c != "untraced" and x1 is not None:
                ratios[(n, c)] = x1
            ev = med(n, c, "events")
            dropped = max((s["dropped"] or 0) for s in samples[(n, c)]) if CONFIGS[c].ocular else None
            size = med(n, c, "bytes")
            rows.append([
                n, c, fmt_s(v1), spread([s["values"][0] for s in samples[(n, c)]]),
                fmt_ratio(x1) if c != "untraced" else "1.00×",
                fmt_s(w), fmt_ratio(w / basew) if (basew and c != "untraced") else "1.00×",
                fmt_count(int(ev)) if ev is not None else "—",
                "—" if dropped is None else dropped,
                fmt_bytes(int(size)) if size is not None else "—",
            ])

    bench_rows = []
    for n in names:
        b = BENCHMARKS[n]
        loops, args = (b.quick_loops, b.quick_args) if quick else (b.loops, b.args)
        bench_rows.append([n, " ".join(args) or "—", loops, b.doc])

    out = []
    out.append(
        "Each benchmark's own `run_benchmark.py` from the pyperformance package, run "
        "unmodified as one pyperf worker process (`--worker --loops L --warmups 0 "
        "--values {v}`), plain or under `python -m ocular` (report printed, as by "
        "default). Rounds: {r}, interleaved; medians; {e:.0f} s.\n".format(
            v=values, r=repeats, e=elapsed))
    for (n, c), err in failures.items():
        out.append("- failed **{}/{}**: {}".format(n, c, err.splitlines()[0]))
    if failures:
        out.append("")
    table = md_table(header, rows)
    out.append(table)
    out.append("")
    out.append("- **value s**: pyperf's timed value, seconds per loop of the benchmark "
               "function only, from cold code (with threshold 500 it carries Ocular's "
               "warm-up: 500 traced hits per location before de-instrumentation). "
               "**spread**: ±half the min–max range over rounds.")
    out.append("- **process wall s**: spawn to exit, measured by the runner: start-up, "
               "imports (pyperf, psutil), the benchmark, Ocular's stop (draining the writer, "
               "building the report) and the trace file.")
    out.append("- **events**, **dropped**: as printed by `python -m ocular`; **trace size**: "
               "the file written.")
    out.append("")
    out.append(md_table(["benchmark", "arguments", "loops per value", "what"], bench_rows, left=4))
    console = table
    panel = ("pyperformance: pyperf value (benchmark function only, cold)", names,
             [c for c in configs if c != "untraced"], ratios)
    return Section(title, "\n".join(out), console, panels=[panel], failed=bool(failures))
