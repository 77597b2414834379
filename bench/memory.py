"""Memory and throughput: a long trace (100 million events by default) under Ocular.

    python -m bench --memory [--memory-events N] [--memory-format pftrace|json]

Runs bench/_memory_child.py untraced, traced (the whole recording written
to a file by the recorder thread, rendered at stop) and under the flight
recorder (``ring="64M"``: only the newest ~64 MiB of the recording kept in
memory, rendered at stop), adaptive, threshold 0, the native Perfetto output
by default (JSON would need ~6 GB for 100M events), interleaved over rounds,
and reports for each:

- peak RSS of the process running the workload (``ru_maxrss`` from
  ``os.wait4``, see bench/_memory_child.py for why it is a forked worker),
  minus untraced: what tracing costs in memory (goal < 64 MiB for the file
  recording; the ring is bounded by its size plus the renderer's state);
- the recorder thread's CPU per event, the wall time of the workload and of
  stop_tracing() (rendering), events per wall-second end to end;
- pauses (times the program waited for the recorder) and dropped events.
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
    rotated,
    run_timed,
    tail,
)

DEFAULT_EVENTS = 100_000_000
QUICK_EVENTS = 5_000_000
EVENTS_PER_REP = 3 * 21_891 + 2 * 10_000  # fib(20): 3 events per call; loop: 2 per iteration
GOAL_RSS = 64 << 20
FORMATS = {"pftrace": "perfetto", "json": "json"}


MODES = ("untraced", "traced", "ring")
RING = "64M"


def run_one(ctx, mode, reps, suffix, ring=RING):
    with tempfile.TemporaryDirectory(prefix="ocular-memory-") as tmp:
        result = os.path.join(tmp, "result.txt")
        cmd = ctx.prefix() + [ctx.python, "-m", "bench._memory_child", result, mode, str(reps),
                              os.path.join(tmp, "trace." + suffix), FORMATS[suffix], ring]
        proc = run_timed(cmd, tmp, ctx.env, timeout=1800)
        if proc.status != 0 or not os.path.exists(result):
            raise ChildError("{} exit {}:\n    {}".format(mode, proc.status,
                                                      tail(proc.stderr or proc.stdout)))
        with open(result) as f:
            out = ast.literal_eval(f.read())
        out["wall"] = proc.wall
        return out


def run(ctx, events=None, fmt="pftrace", repeats=None) -> Section:
    title = "Memory and throughput: a long trace, recorded to a file and in the flight recorder"
    if not ctx.has("ocular"):
        reason = ctx.probe.get("ocular", {}).get("reason", "ocular not importable")
        log("bench: SKIP memory: " + reason)
        return Section(title, "Skipped: " + reason)
    target = events or (QUICK_EVENTS if ctx.quick else DEFAULT_EVENTS)
    reps = max(1, -(-target // EVENTS_PER_REP))
    repeats = repeats or 1
    samples = {m: [] for m in MODES}
    failures = {}
    t_start = time.perf_counter()
    log("bench: memory: {} rounds, {} repetitions (~{} events), {}".format(
        repeats, reps, fmt_count(reps * EVENTS_PER_REP), fmt))
    for r in range(repeats):
        for mode in rotated(list(MODES), r):
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
            if mode != "untraced":
                msg += ", {} events, {} pauses, {} dropped, stop {:.2f} s".format(
                    fmt_count(res["events"]), res.get("pauses"), res["dropped"], res["stop_s"])
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
    traced = [m for m in ("traced", "ring") if samples[m]]
    if samples["untraced"] and traced:
        u_rss, u_work = med("untraced", "ru_maxrss"), med("untraced", "work_s")

        def col(fn):
            return [fn(mode) for mode in traced]

        def recorded(mode):
            # The ring renders only its window; it recorded as many events as the file run (the
            # workload is deterministic), which stop_tracing() does not report for a ring.
            if mode == "ring" and samples["traced"]:
                return med("traced", "events")
            return med(mode, "events")

        def opt(x, f):
            return f(x) if x is not None else "—"

        rows = [
            ["events recorded"] + col(lambda m: fmt_count(int(recorded(m)))),
            ["events rendered (ring: the kept window)"] + col(lambda m: fmt_count(int(med(m, "events")))),
            ["pauses (program waited for the recorder)"] + col(lambda m: opt(med(m, "pauses"), int)),
            ["dropped events"] + col(lambda m: max(s["dropped"] for s in samples[m])),
            ["peak RSS (untraced: {})".format(fmt_bytes(int(u_rss)))]
            + col(lambda m: fmt_bytes(int(med(m, "ru_maxrss")))),
            ["**peak RSS − untraced**"]
            + col(lambda m: "**{}**".format(fmt_bytes(int(med(m, "ru_maxrss") - u_rss)))),
            ["VmHWM (worker's own)"] + col(lambda m: opt(med(m, "vm_hwm"), lambda x: fmt_bytes(int(x)))),
            ["peak anonymous RSS (RssAnon, sampled; untraced: {})".format(
                opt(med("untraced", "peak_anon"), lambda x: fmt_bytes(int(x))))]
            + col(lambda m: opt(med(m, "peak_anon"), lambda x: fmt_bytes(int(x)))),
            ["peak file-backed RSS (RssFile, sampled: the mapped recording)"]
            + col(lambda m: opt(med(m, "peak_file"), lambda x: fmt_bytes(int(x)))),
            ["recording written to disk"]
            + col(lambda m: opt(med(m, "recording_bytes"), lambda x: fmt_bytes(int(x)))),
            ["trace file"] + col(lambda m: fmt_bytes(int(med(m, "file_bytes")))),
            ["workload wall (untraced: {} s)".format(fmt_s(u_work))]
            + col(lambda m: "{} s ({:.2f}×)".format(fmt_s(med(m, "work_s")), med(m, "work_s") / u_work)),
            ["workload CPU, its thread (untraced: {:.2f} s)".format(med("untraced", "work_cpu_s"))]
            + col(lambda m: "{:.2f} s ({:.2f}×)".format(
                med(m, "work_cpu_s"), med(m, "work_cpu_s") / med("untraced", "work_cpu_s"))),
            ["main thread CPU over the session"] + col(lambda m: "{:.2f} s".format(med(m, "main_cpu_s"))),
            ["stop_tracing() wall (rendering)"] + col(lambda m: "{} s".format(fmt_s(med(m, "stop_s")))),
            ["recorder thread CPU"]
            + col(lambda m: "{:.2f} s, {:.1f} ns/event".format(
                med(m, "writer_cpu_s"), med(m, "writer_cpu_s") / recorded(m) * 1e9)),
            ["events/s end to end"]
            + col(lambda m: "{:.2f} M".format(recorded(m) / (med(m, "work_s") + med(m, "stop_s")) / 1e6)),
        ]
        names = {"traced": "recording to a file", "ring": "flight recorder ring={}".format(RING)}
        table = md_table(["measure"] + [names[m] for m in traced], rows, left=1)
        out.append(table)
        out.append("")
        if samples["traced"]:
            d = med("traced", "ru_maxrss") - u_rss
            out.append("- recording to a file: peak RSS − untraced {} (goal < {}: {})".format(
                fmt_bytes(int(d)), fmt_bytes(GOAL_RSS), "met" if d < GOAL_RSS else "**not met**"))
        if samples["ring"]:
            d = med("ring", "ru_maxrss") - u_rss
            out.append("- flight recorder: peak RSS − untraced {} with ring={} (the ring, plus the "
                       "renderer's state at stop)".format(fmt_bytes(int(d)), RING))
        out.append("")
        out.append(
            "Peak RSS is `ru_maxrss` of a worker forked by the small measuring process and "
            "reaped with `os.wait4` (a process spawned by the runner directly would report at "
            "least the runner's RSS: Linux keeps the high-water mark across fork and exec); "
            "VmHWM is the worker's own reading from /proc/self/status at its end. RssAnon and "
            "RssFile are sampled by the measuring process every 10 ms while the worker runs: the "
            "renderer maps the recording file at stop, and its pages count in RSS as file-backed "
            "page cache (reclaimable), not as memory Ocular allocated. Untraced "
            "does not import Ocular: the difference is all Ocular costs (module, chunks, "
            "ring, renderer, report). **recorder thread CPU** = process CPU − main-thread CPU "
            "over start_tracing() … stop_tracing() (rendering at stop runs on the main thread).")
        console = table
    return Section(title, "\n".join(out), console or "\n".join(out), failed=bool(failures))
