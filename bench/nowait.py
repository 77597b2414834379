"""The program never waits (issue 14, must-have 3): wall time against CPU time of the traced thread.

    python -m bench --nowait [-r R] [--quick]

fib(26) (``--quick``: 22) in a fresh child per run (bench/_child.py, as the
micro suite), untraced, under the floor (a no-op C callback on Ocular
adaptive's events), under the floor reading the TSC per event
(``floor-clock``: the least a tracer that timestamps every event can cost)
and under Ocular at threshold 0
(``ocular-adaptive-t0``: the recorder runs beside the program, the trace is
rendered at stop, outside the timed region).  The child times the fib call
twice: ``time.perf_counter`` (wall) and ``time.thread_time`` (the program's
thread's CPU time).  A program that waited for the recorder would show wall
time above CPU time; a program that does not shows the same ratio as the
untraced run (which measures what the machine's load does to wall time).
Runs are interleaved over rounds (the order rotates); medians.

Reported per configuration: wall, CPU, wall ÷ CPU, wall ÷ the floor's wall
(target for Ocular: ≤ 1.3×) and, for Ocular, the pauses stop_tracing()
reports (times the program waited for the recorder; target 0).
"""

from __future__ import annotations

import time

from bench.common import ChildError, Section, fmt_s, log, md_table, median, rotated, spread
from bench.micro import run_child

DEFAULT_REPEATS, QUICK_REPEATS = 7, 2
SIZE, QUICK_SIZE = 26, 22
CONFIGS = ("untraced", "floor", "floor-clock", "ocular-adaptive-t0")
GOAL = 1.3


def run(ctx, repeats=None) -> Section:
    title = "The program never waits: wall time against the traced thread's CPU time"
    repeats = repeats or (QUICK_REPEATS if ctx.quick else DEFAULT_REPEATS)
    n = QUICK_SIZE if ctx.quick else SIZE
    needs = {"floor": "_ocular_floor", "floor-clock": "_ocular_floor", "ocular-adaptive-t0": "ocular"}
    configs, skipped = [], {}
    for c in CONFIGS:
        if c in needs and not ctx.has(needs[c]):
            skipped[c] = ctx.probe.get(needs[c], {}).get("reason", "not importable")
            log("bench: nowait: SKIP {}: {}".format(c, skipped[c]))
        else:
            configs.append(c)
    samples = {c: [] for c in configs}
    failures = {}
    t_start = time.perf_counter()
    log("bench: nowait: {} rounds x {} configurations, fib({})".format(repeats, len(configs), n))
    for r in range(repeats):
        for c in rotated(configs, r):
            if c in failures:
                continue
            try:
                res = run_child(ctx.python, ctx.env, "fib", n, c, cpu=ctx.cpu)
            except ChildError as exc:
                failures[c] = str(exc)
                log("bench: nowait {}: FAILED {}".format(c, exc))
                continue
            samples[c].append(res)
            tr = res.get("tracer") or {}
            log("bench: nowait round {} {:20} wall {:.3f} s, CPU {:.3f} s{}".format(
                r + 1, c, res["work_s"], res["work_cpu_s"],
                ", pauses {}".format(tr.get("pauses")) if tr else ""))
    elapsed = time.perf_counter() - t_start

    floor_wall = median([s["work_s"] for s in samples.get("floor", [])])
    floor_cpu = median([s["work_cpu_s"] for s in samples.get("floor", [])])
    clock_wall = median([s["work_s"] for s in samples.get("floor-clock", [])])
    rows, goal_lines = [], []
    for c in configs:
        xs = samples[c]
        if not xs:
            rows.append([c, "FAILED"] + [""] * 9)
            continue
        walls = [s["work_s"] for s in xs]
        wall, cpu = median(walls), median([s["work_cpu_s"] for s in xs])
        ratio = median([s["work_s"] / s["work_cpu_s"] for s in xs if s["work_cpu_s"]])
        tr = [s.get("tracer") or {} for s in xs]
        pauses = [t["pauses"] for t in tr if t.get("pauses") is not None]
        events = [t["events"] for t in tr if t.get("events") is not None]
        vcsw = [s["work_vcsw"] for s in xs if s.get("work_vcsw") is not None]
        ivcsw = [s["work_ivcsw"] for s in xs if s.get("work_ivcsw") is not None]
        x_floor = wall / floor_wall if floor_wall and c != "untraced" else None
        x_floor_cpu = cpu / floor_cpu if floor_cpu and c != "untraced" else None
        rows.append([c, fmt_s(wall), spread(walls), fmt_s(cpu), "{:.3f}".format(ratio) if ratio else "—",
                     "{:.2f}×".format(x_floor) if x_floor else "—",
                     "{:.2f}×".format(x_floor_cpu) if x_floor_cpu else "—",
                     "{:.0f}".format(median(vcsw)) if vcsw else "—",
                     "{:.0f}".format(median(ivcsw)) if ivcsw else "—",
                     "{:,}".format(int(median(events))) if events else "—",
                     "{} (max {})".format(int(median(pauses)), max(pauses)) if pauses else "—"])
        if c.startswith("ocular") and x_floor:
            goal_lines.append("- `{}`: wall {:.2f}× the floor's (target ≤ {}×: {}; CPU {:.2f}× the "
                              "floor's); wall ÷ CPU {:.3f} (untraced: {}); pauses {}".format(
                                  c, x_floor, GOAL, "met" if x_floor <= GOAL else "**not met**",
                                  x_floor_cpu or 0, ratio,
                                  rows[0][4] if configs[0] == "untraced" else "—",
                                  max(pauses) if pauses else "—"))
            if clock_wall and floor_wall:
                goal_lines.append("- reading the clock alone (`floor-clock`): {:.2f}× the floor's wall; "
                                  "`{}` {:.2f}× the clocked floor's".format(clock_wall / floor_wall, c,
                                                                          wall / clock_wall))
    header = ["config", "wall median s", "spread", "thread CPU s", "wall ÷ CPU", "× floor wall",
              "× floor CPU", "voluntary switches", "preemptions", "events", "pauses"]
    table = md_table(header, rows, left=1)
    out = ["fib({}) in a fresh child per run (bench/_child.py), {} rounds interleaved, medians; "
           "{:.0f} s.\n".format(n, repeats, elapsed)]
    for c, reason in skipped.items():
        out.append("- skipped **{}**: {}".format(c, reason))
    for c, err in failures.items():
        out.append("- failed **{}**: {}".format(c, err.splitlines()[0]))
    out.append(table)
    out.append("")
    out.extend(goal_lines)
    out.append("")
    out.append("**floor-clock**: the floor callback reading the TSC per event, as Ocular does: the least "
               "any tracer that timestamps each event pays.  "
               "**wall**: `time.perf_counter()` around the fib call; **thread CPU**: "
               "`time.thread_time()` around the same call (the program's thread only; Ocular's "
               "recorder runs on its own thread). wall ÷ CPU is the median of the per-run ratios: "
               "above 1 when the thread waited (for the recorder, or for a CPU on a loaded "
               "machine: compare with untraced). **× floor CPU**: thread CPU over the floor's, which a "
               "loaded machine does not distort. **voluntary switches / preemptions**: the "
               "thread's context switches during the call (`getrusage(RUSAGE_THREAD)`), medians: "
               "voluntary ones mean it blocked (a lock, a condition, I/O, a page fault waiting "
               "for I/O); preemptions mean another thread or process took its CPU. **pauses**: times the program waited for the "
               "recorder (stop_tracing()'s `pauses`), median (max).")
    console = table + ("\n" + "\n".join(goal_lines) if goal_lines else "")
    return Section(title, "\n".join(out), console, failed=bool(failures))
