"""Memory and throughput: a long trace (100 million events by default) under Ocular.

    python -m bench --memory [--memory-events N] [--memory-format pftrace|json]

Runs bench/_memory_child.py untraced and traced (adaptive, threshold 0, the
native Perfetto output by default: ~1 byte per event, where JSON would need
~6 GB for 100M events), interleaved over rounds, and reports:

- peak RSS of the process running the workload (``ru_maxrss`` from
  ``os.wait4``, see bench/_memory_child.py for why it is a forked worker),
  traced minus untraced: what tracing costs in memory (goal < 64 MiB);
- events per second: per CPU-second of Ocular's writer thread (its encoding
  throughput) and per wall-second of the whole traced run (tracing, waiting
  for the writer when its bounded chunk pool is full, and stop_tracing());
- dropped events (must be 0).
"""

from __future__ import annotations

import ast
import os
import statistics
import tempfile
import time

from bench.common import (
    ChildError,
    Section,
    fmt_bytes,
    fmt_count,
    fmt_s,
    log,
    md_table,
    run_timed,
    tail,
)

DEFAULT_EVENTS = 100_000_000
QUICK_EVENTS = 5_000_000
EVENTS_PER_REP = 3 * 21_891 + 2 * 10_000  # fib(20): 3 events per call; loop: 2 per iteration
GOAL_RSS = 64 << 20
FORMATS = {"pftrace": "perfetto", "json": "json"}


def run_one(ctx, mode, reps, suffix):
    with tempfile.TemporaryDirectory(prefix="ocular-memory-") as tmp:
        result = os.path.join(tmp, "result.txt")
        cmd = ctx.prefix() + [ctx.python, "-m", "bench._memory_child", result, mode, str(reps),
                              os.path.join(tmp, "trace." + suffix), FORMATS[suffix]]
        proc = run_timed(cmd, tmp, ctx.env, timeout=1800)
        if proc.status != 0 or not os.path.exists(result):
            raise ChildError("{} exit {}:\n    {}".format(mode, proc.status,
                                                      tail(proc.stderr or proc.stdout)))
        with open(result) as f:
            out = ast.literal_eval(f.read())
        out["wall"] = proc.wall
        return out


def run(ctx, events=None, fmt="pftrace", repeats=None) -> Section:
    title = "Memory and throughput: a long trace"
    if not ctx.has("ocular"):
        reason = ctx.probe.get("ocular", {}).get("reason", "ocular not importable")
        log("bench: SKIP memory: " + reason)
        return Section(title, "Skipped: " + reason)
    target = events or (QUICK_EVENTS if ctx.quick else DEFAULT_EVENTS)
    reps = max(1, -(-target // EVENTS_PER_REP))
    repeats = repeats or 1
    samples = {"untraced": [], "traced": []}
    failures = {}
    t_start = time.perf_counter()
    log("bench: memory: {} rounds, {} repetitions (~{} events), {}".format(
        repeats, reps, fmt_count(reps * EVENTS_PER_REP), fmt))
    for r in range(repeats):
        order = ("untraced", "traced") if r % 2 == 0 else ("traced", "untraced")
        for mode in order:
            if mode in failures:
                continue
            try:
                res = run_one(ctx, mode, reps, fmt)
            except ChildError as exc:
                failures[mode] = str(exc)
                log("bench: memory {}: FAILED {}".format(mode, exc))
                continue
            samples[mode].append(res)
            msg = "peak RSS {}".format(fmt_bytes(res["ru_maxrss"]))
            if mode == "traced":
                msg += ", {} events, {} dropped, writer {:.1f} Mevents/s".format(
                    fmt_count(res["events"]), res["dropped"],
                    res["events"] / res["writer_cpu_s"] / 1e6 if res["writer_cpu_s"] else 0)
            log("bench: memory round {} {:8} work {:.2f} s, {}".format(r + 1, mode, res["work_s"], msg))
    elapsed = time.perf_counter() - t_start

    def med(mode, key):
        xs = [s[key] for s in samples[mode] if s.get(key) is not None]
        return statistics.median(xs) if xs else None

    out = ["Workload (bench/_memory_child.py): {} repetitions of fib(20) plus a 10,000-iteration "
           "loop, adaptive mode, threshold 0, output `.{}`; {} round(s); {:.0f} s.\n".format(
               reps, fmt, repeats, elapsed)]
    for mode, err in failures.items():
        out.append("- failed **{}**: {}".format(mode, err.splitlines()[0]))
    console = ""
    if samples["traced"] and samples["untraced"]:
        u_rss, t_rss = med("untraced", "ru_maxrss"), med("traced", "ru_maxrss")
        u_hwm, t_hwm = med("untraced", "vm_hwm"), med("traced", "vm_hwm")
        ev = med("traced", "events")
        wcpu = med("traced", "writer_cpu_s")
        work, stop = med("traced", "work_s"), med("traced", "stop_s")
        dropped = max(s["dropped"] for s in samples["traced"])
        delta = t_rss - u_rss
        rows = [
            ["events traced", fmt_count(int(ev)), "from stop_tracing()"],
            ["dropped events", dropped, "must be 0: {}".format("ok" if dropped == 0 else "**FAILED**")],
            ["peak RSS untraced", fmt_bytes(int(u_rss)), "ru_maxrss (wait4); VmHWM {}".format(
                fmt_bytes(int(u_hwm)) if u_hwm else "—")],
            ["peak RSS traced", fmt_bytes(int(t_rss)), "ru_maxrss (wait4); VmHWM {}".format(
                fmt_bytes(int(t_hwm)) if t_hwm else "—")],
            ["**traced − untraced**", "**{}**".format(fmt_bytes(int(delta))),
             "goal < {}: {}".format(fmt_bytes(GOAL_RSS), "met" if delta < GOAL_RSS else "**not met**")],
            ["trace file", fmt_bytes(int(med("traced", "file_bytes"))),
             "{:.2f} bytes/event".format(med("traced", "file_bytes") / ev)],
            ["workload untraced", "{} s".format(fmt_s(med("untraced", "work_s"))), ""],
            ["workload traced", "{} s".format(fmt_s(work)),
             "{:.2f}× untraced; main thread CPU {:.2f} s".format(
                 work / med("untraced", "work_s"), med("traced", "main_cpu_s"))],
            ["stop_tracing()", "{} s".format(fmt_s(stop)), "drains the writer, builds the report"],
            ["writer CPU", "{:.2f} s".format(wcpu), "{:.1f} ns/event (process − main-thread CPU)".format(
                wcpu / ev * 1e9)],
            ["**events/s encoded by the writer**", "**{:.2f} M**".format(ev / wcpu / 1e6),
             "per CPU-second of the writer thread"],
            ["events/s end to end", "{:.2f} M".format(ev / (work + stop) / 1e6),
             "events / (traced workload + stop_tracing()) wall time"],
        ]
        table = md_table(["measure", "value", "note"], rows, align="lrl")
        out.append(table)
        out.append("")
        out.append(
            "Peak RSS is `ru_maxrss` of a worker forked by the small measuring process and "
            "reaped with `os.wait4` (a process spawned by the runner directly would report at "
            "least the runner's RSS: Linux keeps the high-water mark across fork and exec); "
            "VmHWM is the worker's own reading from /proc/self/status at its end. Untraced "
            "does not import Ocular: the difference is all Ocular costs (module, chunk pool, "
            "writer state, report).")
        console = table
    return Section(title, "\n".join(out), console or "\n".join(out), failed=bool(failures))
