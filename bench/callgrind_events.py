"""Instructions per monitoring event, measured with valgrind's callgrind.

    python -m bench.callgrind_events [--n 20] [--configs untraced,floor,ocular-adaptive-t0]
    python -m bench.callgrind_events --workload loop --n 3000000 --configs untraced,ocular-adaptive-t500

(The instructions of the callbacks alone, per event and per Python version; bench/callgrind.py, the
runner's --callgrind section, counts every thread and the rendering.)

Runs fib(n) (or another workload of bench/workloads.py, ``--workload``) once per configuration under ``valgrind --tool=callgrind`` with
collection switched off at start and on only inside the C function
``ocular_floor_measured_call`` (bench/floor.c), which calls the workload: the
instruction counts (Ir) exclude interpreter start-up, imports and tracer
start/stop, and so are nearly deterministic.

Reported per configuration: Ir collected, Ir above untraced divided by the
number of events the configuration receives (counted once, without valgrind,
by the same counting pass as the timing suite), and the same above the floor
(the tracer's own instructions per event).  Wall-clock times under valgrind
mean nothing and are not shown.

The report is printed and written to bench/_build/callgrind.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile

from bench.configs import CONFIGS, EVENT_SETS
from bench.workloads import WORKLOADS, fib_calls
from bench.common import (
    BENCH_DIR,
    ChildError,
    build_floor,
    child_env,
    child_python,
    log,
    machine_info,
    md_table,
    print_and_write,
    resolve_python,
)
from bench.micro import run_child

DEFAULT_CONFIGS = ("untraced", "floor", "ocular-adaptive-t0")
TOGGLE = "ocular_floor_measured_call"


def read_total_ir(path: str) -> int:
    """Total Ir from a callgrind output file ("totals:" or "summary:" line)."""
    total = None
    with open(path) as f:
        for line in f:
            m = re.match(r"(totals|summary):\s+(\d+)", line)
            if m:
                total = int(m.group(2))
                if m.group(1) == "totals":
                    break
    if total is None:
        raise ChildError("no totals/summary line in " + path)
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.callgrind_events",
                                 description="Instructions per event with callgrind.")
    ap.add_argument("--n", type=int, default=20, help="workload size (default 20, fib's)")
    ap.add_argument("--workload", default="fib", choices=sorted(WORKLOADS),
                    help="workload of bench/workloads.py (default fib)")
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                    help="comma-separated configurations (default: %(default)s)")
    ap.add_argument("--python", default=None, help="X.Y or interpreter path")
    ap.add_argument("--no-setup", action="store_true",
                    help="do not create .venv-bench-X.Y if it is missing")
    ap.add_argument("--output", "-o", default=str(BENCH_DIR / "_build" / "callgrind.md"),
                    help="markdown report path ('-' for none)")
    args = ap.parse_args(argv)

    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("callgrind: valgrind not found (apt-get install valgrind); nothing measured")
        return 1

    configs = args.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            ap.error("unknown configuration {!r}".format(c))
    if "untraced" not in configs:
        configs.insert(0, "untraced")

    base = resolve_python(args.python)
    python, _ = child_python(base, setup=not args.no_setup)
    floor_dir, floor_err = build_floor(python)
    if floor_dir is None:
        print("callgrind: building bench/floor.c failed (it provides the measured "
              "region):\n" + (floor_err or ""))
        return 1
    env = child_env(floor_dir)
    probe = run_child(python, env, "-", 0, "probe")
    for c in list(configs):
        req = CONFIGS[c].requires
        if req and not probe["probe"].get(req, {}).get("ok"):
            log("callgrind: SKIP {}: {}".format(c, probe["probe"].get(req, {}).get("reason")))
            configs.remove(c)

    wl = args.workload
    counts = run_child(python, env, wl, args.n, "count", flags=["--callgrind"])["counts"]

    ir = {}
    failures = {}
    for c in configs:
        with tempfile.TemporaryDirectory(prefix="ocular-callgrind-") as tmp:
            out = os.path.join(tmp, "callgrind.out")
            prefix = [
                valgrind, "--tool=callgrind", "--quiet",
                "--callgrind-out-file=" + out,
                "--collect-atstart=no", "--toggle-collect=" + TOGGLE,
            ]
            log("callgrind: {}({}) {} ...".format(wl, args.n, c))
            try:
                run_child(python, env, wl, args.n, c, save=False, timeout=900,
                          prefix=prefix, flags=["--callgrind"])
                ir[c] = read_total_ir(out)
            except ChildError as exc:
                failures[c] = str(exc)
                log("callgrind: {} FAILED: {}".format(c, exc))

    rows = []
    base_ir = ir.get("untraced")
    for c in configs:
        cfg = CONFIGS[c]
        if c not in ir:
            rows.append([c, "FAILED", "", "", "", ""])
            continue
        ev = sum(counts.get(e, 0) for e in EVENT_SETS[cfg.events]) if cfg.events else None
        per = per_floor = None
        if ev and base_ir is not None and cfg.per_event:
            per = (ir[c] - base_ir) / ev
            floor_ir = ir.get(cfg.floor) if cfg.floor and cfg.floor != c else None
            if floor_ir is not None:
                per_floor = (ir[c] - floor_ir) / ev
        rows.append([
            c,
            "{:,}".format(ir[c]),
            "{:.2f}×".format(ir[c] / base_ir) if base_ir else "—",
            "{:,}".format(ev) if ev else "—",
            "{:.1f}".format(per) if per is not None else "—",
            "{:.1f}".format(per_floor) if per_floor is not None else "—",
        ])
    header = ["config", "Ir (measured region)", "× untraced", "events",
              "Ir/event", "tracer Ir/event"]
    table = md_table(header, rows, left=1)

    lines = [
        "# Ocular callgrind results: {}({})\n".format(wl, args.n),
        "- python: {} (`{}`)".format(probe["python"].replace("\n", " "), python),
        "- machine: {}".format(machine_info()),
        "- {}({}){}; events counted (a few are the harness's): {}".format(
            wl, args.n, " makes {:,} calls".format(fib_calls(args.n)) if wl == "fib" else "",
            ", ".join("{} {:,}".format(k, v) for k, v in counts.items() if v)),
        "",
        table,
        "",
        "Ir: instructions executed inside {} (the workload call only). "
        "Ir/event: (Ir − untraced Ir) / events of the configuration's event set. "
        "tracer Ir/event: (Ir − Ir of the matching floor) / events, the tracer's own "
        "instructions above CPython's dispatch to a no-op C callback.".format(TOGGLE),
    ]
    for c, err in failures.items():
        lines.append("\n- failed **{}**: {}".format(c, err))
    report = "\n".join(lines) + "\n"
    print_and_write(report, args.output, "callgrind")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
