"""End to end, as a user lives it: process start to exit with the trace saved.

Standalone scripts (bench/scripts/fib.py: call heavy; bench/scripts/
generators.py: generator resumes; bench/scripts/empty.py: nothing, for each
tool's fixed cost) are run by each tool's own command line:

    untraced              python SCRIPT N
    ocular                python -m ocular -o trace.json SCRIPT N         (defaults: threshold 500, report printed)
    ocular-t0-json        python -m ocular --threshold 0 -o trace.json SCRIPT N
    ocular-t0-pftrace     python -m ocular --threshold 0 -o trace.pftrace SCRIPT N
    ocular-t0-recording   python -m ocular --threshold 0 -o trace.ocular SCRIPT N   (nothing rendered)
    cProfile              python -m cProfile -o prof.out SCRIPT N
    viztracer             viztracer -o trace.json SCRIPT N                (defaults)
    viztracer-nomp        viztracer --ignore_multiprocess -o trace.json SCRIPT N

The wall time is taken by the runner from just before the spawn to the
reaping of the process (bench.common.run_timed), each configuration in a
fresh process, interleaved round by round; medians and ratios to untraced.
Sizes keep VizTracer's default ring buffer (1M entries) from wrapping, so
every tool saves the whole run.

Issue 14 asks that Ocular at threshold 0, with the trace rendered and saved,
be no slower end to end than ``python -m cProfile -o``: the table's
"× cProfile" column, and the goal lines under it.

Recorder cost: in the same rounds, bench/_encode_child.py runs each script at
threshold 0 through the API and measures the CPU time of Ocular's recorder
thread as process CPU minus main-thread CPU (see that file): divided by the
events, what recording costs beside the program, in ns/event; and the wall
time of stop_tracing(), which renders the recording (JSON or .pftrace).
"""

from __future__ import annotations

import ast
import os
import subprocess
import tempfile
import time

from bench.common import (
    BENCH_DIR,
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
GOAL = 3.0  # issue #7: traced and saved within 3x of untraced
GOAL_CPROFILE = 1.0  # issue 14: threshold 0, trace saved, no slower than python -m cProfile -o

# script name -> (default size, quick size, what)
SCRIPTS = {
    "empty": (0, 0, "does nothing: each tool's fixed cost"),
    "fib": (27, 22, "recursive fib(N): 2*F(N+1)-1 calls (635,621 for 27)"),
    "generators": (100_000, 20_000, "chained generators, yield from, generator expressions"),
}


class Config:
    """A command line around ``SCRIPT N``; argv items "{python}", "{viztracer}"
    and "{out}" (a path in the run's scratch directory) are filled in."""

    __slots__ = ("name", "argv", "out", "requires", "doc")

    def __init__(self, name, argv, out=None, requires=None, doc=""):
        self.name = name
        self.argv = argv
        self.out = out
        self.requires = requires
        self.doc = doc


CONFIGS = {
    c.name: c
    for c in (
        Config("untraced", ["{python}"], doc="python SCRIPT N"),
        Config("ocular", ["{python}", "-m", "ocular", "-o", "{out}"], "trace.json", "ocular",
               "python -m ocular -o trace.json SCRIPT N (defaults: adaptive, threshold 500, "
               "report printed)"),
        Config("ocular-t0-json", ["{python}", "-m", "ocular", "--threshold", "0", "-o", "{out}"],
               "trace.json", "ocular", "python -m ocular --threshold 0 -o trace.json SCRIPT N"),
        Config("ocular-t0-pftrace", ["{python}", "-m", "ocular", "--threshold", "0", "-o", "{out}"],
               "trace.pftrace", "ocular",
               "python -m ocular --threshold 0 -o trace.pftrace SCRIPT N"),
        Config("ocular-t0-recording", ["{python}", "-m", "ocular", "--threshold", "0", "-o", "{out}"],
               "trace.ocular", "ocular",
               "python -m ocular --threshold 0 -o trace.ocular SCRIPT N (the recording only, "
               "nothing rendered)"),
        Config("cProfile", ["{python}", "-m", "cProfile", "-o", "{out}"], "prof.out", None,
               "python -m cProfile -o prof.out SCRIPT N"),
        Config("viztracer", ["{viztracer}", "-o", "{out}"], "trace.json", "viztracer",
               "viztracer -o trace.json SCRIPT N (defaults)"),
        Config("viztracer-nomp", ["{viztracer}", "--ignore_multiprocess", "-o", "{out}"],
               "trace.json", "viztracer",
               "viztracer --ignore_multiprocess -o trace.json SCRIPT N (no multiprocess hooks)"),
    )
}
PLOT_CONFIGS = tuple(c for c in CONFIGS if c != "untraced")
ENCODE_FORMATS = ("json", "pftrace")


def script_path(name):
    return str(BENCH_DIR / "scripts" / (name + ".py"))


def viztracer_cmd(python):
    """VizTracer's own console script beside the interpreter, else -m viztracer."""
    exe = os.path.join(os.path.dirname(python), "viztracer")
    return [exe] if os.path.exists(exe) else [python, "-m", "viztracer"]


def run_one(ctx, cfg, script, size):
    with tempfile.TemporaryDirectory(prefix="ocular-e2e-") as tmp:
        out = os.path.join(tmp, cfg.out) if cfg.out else None
        cmd = list(ctx.prefix())
        for a in cfg.argv:
            if a == "{python}":
                cmd.append(ctx.python)
            elif a == "{viztracer}":
                cmd += viztracer_cmd(ctx.python)
            elif a == "{out}":
                cmd.append(out)
            else:
                cmd.append(a)
        cmd += [script_path(script), str(size)]
        proc = run_timed(cmd, tmp, ctx.env)
        if proc.status != 0:
            raise ChildError("exit {}:\n    {}".format(proc.status, tail(proc.stderr or proc.stdout)))
        if out and not os.path.exists(out):
            raise ChildError("no output file {}:\n    {}".format(cfg.out, tail(proc.stderr)))
        cpu = proc.rusage.ru_utime + proc.rusage.ru_stime if proc.rusage else None
        return {"wall": proc.wall, "cpu": cpu, "stdout": proc.stdout.strip().splitlines()[:1],
                "bytes": os.path.getsize(out) if out else None}


def run_encode(ctx, script, size, fmt):
    with tempfile.TemporaryDirectory(prefix="ocular-encode-") as tmp:
        result = os.path.join(tmp, "result.txt")
        cmd = ctx.prefix() + [ctx.python, "-m", "bench._encode_child", result,
                              os.path.join(tmp, "trace." + fmt), "0", script_path(script), str(size)]
        # the recorder's CPU alone: nothing rendered while recording (that thread's CPU would count too)
        proc = run_timed(cmd, tmp, dict(ctx.env, OCULAR_LIVE_RENDER="0"))
        if proc.status != 0 or not os.path.exists(result):
            raise ChildError("exit {}:\n    {}".format(proc.status, tail(proc.stderr or proc.stdout)))
        with open(result) as f:
            return ast.literal_eval(f.read())


def run(ctx, repeats=None) -> Section:
    title = "End to end: process start to exit, trace saved"
    quick = ctx.quick
    repeats = repeats or (QUICK_REPEATS if quick else DEFAULT_REPEATS)
    sizes = {s: (v[1] if quick else v[0]) for s, v in SCRIPTS.items()}
    configs, skipped = [], {}
    for c in CONFIGS.values():
        if c.requires and not ctx.has(c.requires):
            skipped[c.name] = ctx.probe.get(c.requires, {}).get("reason", "not importable")
            log("bench: e2e: SKIP {}: {}".format(c.name, skipped[c.name]))
        else:
            configs.append(c.name)
    encode = ctx.has("ocular")
    encode_jobs = ["encode-" + f for f in ENCODE_FORMATS] if encode else []
    jobs = configs + encode_jobs

    # the bytecode cache of every package a tool imports exists before the first timed run
    for pkg in ("ocular", "viztracer"):
        subprocess.run([ctx.python, "-c", "import importlib, sys, compileall, os\n"
                        "try:\n m = importlib.import_module(sys.argv[1])\n"
                        " compileall.compile_dir(os.path.dirname(m.__file__), quiet=1)\n"
                        "except Exception: pass", pkg], env=ctx.env, capture_output=True, timeout=300)
    samples = {(s, c): [] for s in sizes for c in jobs}
    failures = {}
    outputs = {}
    total = repeats * (len(sizes) * len(jobs) - len(encode_jobs))
    k = 0
    t_start = time.perf_counter()
    log("bench: e2e: {} rounds x {} scripts x {} runs = {} processes".format(
        repeats, len(sizes), len(jobs), total))
    for r in range(repeats):
        order = rotated(jobs, r)
        for s, n in sizes.items():
            for c in order:
                if s == "empty" and c in encode_jobs:
                    continue
                k += 1
                if (s, c) in failures:
                    continue
                try:
                    if c.startswith("encode-"):
                        res = run_encode(ctx, s, n, c[len("encode-"):])
                        msg = "recorder {:.1f} ns/event".format(
                            res["writer_cpu_s"] / max(res["events"], 1) * 1e9)
                    else:
                        res = run_one(ctx, CONFIGS[c], s, n)
                        msg = "wall {:.3f} s".format(res["wall"])
                        if c == "untraced":
                            outputs.setdefault(s, res["stdout"])
                        elif outputs.get(s) and res["stdout"] != outputs[s]:
                            log("bench: WARNING e2e {}/{} printed {} (untraced: {})".format(
                                s, c, res["stdout"], outputs[s]))
                except ChildError as exc:
                    failures[(s, c)] = str(exc)
                    log("[{:4}/{}] round {} {}/{}: FAILED {}".format(k, total, r + 1, s, c, exc))
                    continue
                samples[(s, c)].append(res)
                log("[{:4}/{}] round {} {:10} {:18} {}".format(k, total, r + 1, s, c, msg))
    elapsed = time.perf_counter() - t_start

    header = ["script", "config", "wall median s", "spread", "× untraced", "× cProfile",
              "CPU median s", "CPU × cProfile", "output size"]
    rows, ratios, goal_lines = [], {}, []
    for s in sizes:
        walls = {c: [x["wall"] for x in samples[(s, c)]] for c in configs}
        base = median(walls.get("untraced", []))
        cprof = median(walls.get("cProfile", []))
        cpus = {c: [x["cpu"] for x in samples[(s, c)] if x.get("cpu") is not None] for c in configs}
        cprof_cpu = median(cpus.get("cProfile", []))
        for c in configs:
            m = median(walls[c])
            label = s if s == "empty" else "{}({})".format(s, sizes[s])
            if m is None:
                rows.append([label, c, "FAILED", "", "", "", "", "", ""])
                continue
            ratio = m / base if base else None
            if c != "untraced" and ratio is not None:
                ratios[(s, c)] = ratio
            size = median([r["bytes"] for r in samples[(s, c)] if r["bytes"] is not None])
            rows.append([label, c, fmt_s(m), spread(walls[c]),
                         fmt_ratio(ratio) if c != "untraced" else "1.00×",
                         fmt_ratio(m / cprof) if cprof else "—",
                         fmt_s(median(cpus[c])),
                         fmt_ratio(median(cpus[c]) / cprof_cpu) if cprof_cpu and cpus[c] else "—",
                         fmt_bytes(int(size)) if size is not None else "—"])
        for c in ("ocular-t0-json", "ocular-t0-pftrace"):
            m = median(walls.get(c, []))
            if m and cprof and s != "empty":
                cpu = median(cpus.get(c, []))
                goal_lines.append("- {} `{}`: {:.2f}× `python -m cProfile -o` ({:.3f} s vs {:.3f} s; "
                                  "CPU {}): issue 14 goal (≤ {:.0f}×) {}".format(
                                      s, c, m / cprof, m, cprof,
                                      fmt_ratio(cpu / cprof_cpu) if cpu and cprof_cpu else "—",
                                      GOAL_CPROFILE,
                                      "met" if m / cprof <= GOAL_CPROFILE else "**not met**"))
        for c in ("ocular", "ocular-t0-json", "ocular-t0-pftrace"):
            if (s, c) in ratios and s != "empty":
                goal_lines.append("- {} `{}`: {:.2f}× untraced: goal ({:.0f}×) {}".format(
                    s, c, ratios[(s, c)], GOAL, "met" if ratios[(s, c)] <= GOAL else "**not met**"))

    enc_header = ["script", "format", "events", "output bytes/event", "recorder CPU s",
                  "recorder ns/event", "recorder Mevents/s", "main thread CPU s",
                  "stop_tracing() s (render)", "dropped"]
    enc_rows = []
    if encode:
        for s in [s for s in sizes if s != "empty"]:
            for f in ENCODE_FORMATS:
                xs = samples[(s, "encode-" + f)]
                if not xs:
                    enc_rows.append([s, f, "FAILED"] + [""] * (len(enc_header) - 3))
                    continue
                ev = median([x["events"] for x in xs])
                wcpu = median([x["writer_cpu_s"] for x in xs])
                ns = median([x["writer_cpu_s"] / x["events"] * 1e9 for x in xs if x["events"]])
                enc_rows.append([
                    s, f, fmt_count(int(ev)), "{:.2f}".format(median([x["bytes"] / x["events"] for x in xs])),
                    "{:.3f}".format(wcpu), "{:.1f}".format(ns), "{:.1f}".format(1e3 / ns) if ns else "—",
                    "{:.3f}".format(median([x["main_cpu_s"] for x in xs])),
                    "{:.3f}".format(median([x["stop_s"] for x in xs])),
                    max(x["dropped"] for x in xs),
                ])

    out = []
    out.append("Standalone scripts (bench/scripts/) run by each tool's command line; wall time "
               "from spawn to exit, trace written; CPU: user + system time of the process and all "
               "its threads (`wait4`'s rusage), which a loaded machine distorts less than wall "
               "time. Rounds: {}, interleaved; medians; {:.0f} s.\n".format(repeats, elapsed))
    for c, reason in skipped.items():
        out.append("- skipped **{}**: {}".format(c, reason))
    for (s, c), err in failures.items():
        out.append("- failed **{}/{}**: {}".format(s, c, err.splitlines()[0]))
    if skipped or failures:
        out.append("")
    table = md_table(header, rows)
    out.append(table)
    out.append("")
    if goal_lines:
        out.append("Goals: issue #7, traced and saved within {:.0f}× of untraced; issue 14, threshold 0 "
                   "no slower than `python -m cProfile -o`:\n".format(GOAL))
        out.extend(goal_lines)
        out.append("")
    out.append("Configurations:\n")
    for c in configs:
        out.append("- **{}**: `{}`".format(c, CONFIGS[c].doc))
    enc_table = md_table(enc_header, enc_rows) if enc_rows else ""
    if enc_rows:
        out.append("")
        out.append("### Recorder thread: cost per event; rendering at stop\n")
        out.append(
            "Each script at threshold 0 through the API (bench/_encode_child.py), same rounds. "
            "**recorder CPU** = process CPU time − main-thread CPU time over start_tracing() … "
            "stop_tracing() (`time.process_time()` − `time.thread_time()`; the scripts start no "
            "threads, and rendering at stop runs on the main thread, so the rest is Ocular's "
            "recorder: copying records into the recording, write(2)). **recorder ns/event** = "
            "recorder CPU / events (median over rounds); **Mevents/s** = its inverse. "
            "**main thread CPU**: the traced program plus the callbacks plus stop_tracing(). "
            "**stop_tracing()**: wall time of the call (drains the recorder, renders the "
            "recording into JSON or .pftrace, builds the report, renames the file).\n")
        out.append(enc_table)
    console = table + ("\n\n" + enc_table if enc_table else "")
    if goal_lines:
        console += "\n" + "\n".join(goal_lines)
    panel = ("end to end: process wall time, trace saved (bench/scripts/)",
             list(sizes), [c for c in PLOT_CONFIGS if c in configs], ratios)
    return Section(title, "\n".join(out), console, panels=[panel], failed=bool(failures))
