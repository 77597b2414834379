"""The micro suite: our workloads (bench/workloads.py) under every configuration
(bench/configs.py), in-process timing of the workload call only.

Every (workload, configuration) pair runs in a fresh child interpreter
(bench/_child.py), which times only the workload call.  Runs are interleaved:
each of R rounds goes once over every workload and every configuration (the
configuration order rotates from round to round), so slow drifts of the
machine spread over all configurations instead of biasing one.  The median
over rounds is reported.

Before timing, one extra child per workload counts the sys.monitoring events
the workload produces (with _ocular_floor counters), giving the ns/event
columns.
"""

from __future__ import annotations

import ast
import os
import statistics
import subprocess
import tempfile
import time

from bench.common import (
    CHILD_TIMEOUT,
    ChildError,
    Section,
    fmt_count,
    fmt_ns,
    fmt_ratio,
    fmt_s,
    log,
    md_table,
    median,
    rotated,
    spread,
)
from bench.configs import CONFIGS, EVENT_SETS
from bench.workloads import WORKLOADS, fib_calls

MIN_EVENTS_FOR_NS = 10_000  # below this, ns/event is noise
DEFAULT_REPEATS, QUICK_REPEATS = 5, 2

# Configurations drawn in the overview plot (bench/plot.py), in this order.
PLOT_CONFIGS = ("floor", "cProfile", "ocular-adaptive-t0", "ocular-adaptive-t500",
                "viztracer", "yappi")


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


def probe(python, env):
    """Which optional modules import in the children's interpreter."""
    return run_child(python, env, "-", 0, "probe")


def run(ctx, workloads, configs, sizes, repeats, floor_err=None) -> Section:
    """Time every workload under every configuration; return the section."""
    python, env = ctx.python, ctx.env
    # The ratios need the baseline and the floors: always run them.
    needed = {"untraced"} | {CONFIGS[c].floor for c in configs if CONFIGS[c].floor}
    configs = [c for c in CONFIGS if c in configs or c in needed]

    skipped = {}
    for c in list(configs):
        req = CONFIGS[c].requires
        if req is None:
            continue
        info = ctx.probe.get(req, {"ok": False, "reason": "not probed"})
        if not info["ok"]:
            reason = info["reason"]
            if req == "_ocular_floor" and floor_err:
                reason = "building bench/floor.c failed: " + floor_err
            skipped[c] = reason
            configs.remove(c)
    for c, reason in skipped.items():
        log("bench: SKIP {}: {}".format(c, reason))

    # -- event counts -------------------------------------------------------
    counts = {}
    if ctx.has("_ocular_floor"):
        for w in workloads:
            try:
                res = run_child(python, env, w, sizes[w], "count", cpu=ctx.cpu)
                counts[w] = res["counts"]
            except ChildError as exc:
                log("bench: event count for {} failed: {}".format(w, exc))
    else:
        log("bench: no event counts (floor module unavailable): ns/event columns empty")

    # Cross-check the counting pass against arithmetic: fib(n) makes
    # 2*F(n+1) - 1 calls (plus a few for the harness around it).
    if "fib" in counts:
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
    log("bench: micro: {} rounds x {} workloads x {} configurations = {} runs".format(
        repeats, len(workloads), len(configs), total))
    for r in range(repeats):
        order = rotated(configs, r)
        for w in workloads:
            for c in order:
                k += 1
                if (w, c) in failures:
                    continue
                try:
                    # Trace output is written in the first round only (a 1M
                    # event viztracer save takes seconds and is not timed).
                    res = run_child(python, env, w, sizes[w], c, cpu=ctx.cpu, save=(r == 0))
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
        return median(samples.get((w, c)))

    header = ["workload", "config", "median s", "spread", "× untraced", "× floor",
              "events", "ns/event", "tracer ns/event", "stop+save s"]
    rows = []
    ratios = {}
    for w in workloads:
        base_t = med(w, "untraced")
        for c in configs:
            cfg = CONFIGS[c]
            m = med(w, c)
            if m is None:
                rows.append([w, c, "FAILED", "", "", "", "", "", "", ""])
                continue
            x_base = m / base_t if base_t else None
            if x_base is not None:
                ratios[(w, c)] = x_base
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
            rows.append([w, c, fmt_s(m), spread(samples[(w, c)]),
                         fmt_ratio(x_base) if c != "untraced" else "1.00×",
                         fmt_ratio(x_floor), fmt_count(ev), fmt_ns(ns), fmt_ns(ns_tr), fmt_s(fin)])

    count_rows = []
    for w in workloads:
        cw = counts.get(w)
        count_rows.append([
            w, sizes[w], WORKLOADS[w].doc,
            *(fmt_count(sum(cw.get(e, 0) for e in EVENT_SETS[k])) if cw else "—"
              for k in ("calls", "adaptive", "precise")),
        ])

    out = []
    out.append("Our workloads (bench/workloads.py), each timed inside a fresh child "
               "(bench/_child.py). Rounds: {}, interleaved; medians; {:.0f} s.\n".format(repeats, elapsed))
    for c, reason in skipped.items():
        out.append("- skipped **{}**: {}".format(c, reason))
    for (w, c), err in failures.items():
        out.append("- failed **{}/{}**: {}".format(w, c, err.splitlines()[0]))
    if skipped or failures:
        out.append("")
    table = md_table(header, rows)
    counts_table = md_table(["workload", "size", "what", "calls events", "adaptive events",
                             "precise events"], count_rows, left=3)
    out.append(table)
    out.append("")
    out.append("### Workloads and event counts\n")
    out.append("Events counted once per workload with no-op counting callbacks "
               "(bench/floor.c), per event set: *calls* = PY_START, PY_RESUME, PY_THROW, "
               "PY_RETURN, PY_YIELD, PY_UNWIND; *adaptive* = calls + JUMP, BRANCH; "
               "*precise* = adaptive + INSTRUCTION.\n")
    out.append(counts_table)
    out.append("")
    out.append("### Columns\n")
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
    out.append("\n### Configurations\n")
    for c in CONFIGS.values():
        out.append("- **{}**: {}".format(c.name, c.doc))

    console = table + "\n\n" + counts_table
    for c, reason in skipped.items():
        console += "\nskipped {}: {}".format(c, reason)
    series = [c for c in PLOT_CONFIGS if c in configs]
    panel = ("micro suite: workload time (bench/workloads.py)", list(workloads), series, ratios)
    return Section("Micro suite (in-process, workload call only)", "\n".join(out), console,
                   panels=[panel], failed=bool(failures))
