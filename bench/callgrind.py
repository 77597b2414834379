"""Instruction counts with valgrind's callgrind: what tracing costs every thread, and what rendering costs.

    python -m bench --callgrind                 # as a section of the runner (results.md)
    python -m bench.callgrind [--n 22] [--configs a,b] [--quick] [--python X.Y] [-o PATH]

Instruction counts (Ir) are nearly deterministic, so one run per measurement
is enough, even on a loaded machine.  Three tables (bench/_callgrind_child.py
is what runs under valgrind):

1. **Threads.** fib(N) (default 22) under each configuration, threshold 0,
   the whole process under ``valgrind --tool=callgrind --separate-threads=yes
   --dump-before=F --dump-after=F`` with F = ``ocular_floor_measured_call``
   (bench/floor.c), the C function the fib call goes through.  Callgrind
   writes one file per thread, and the program's thread's counts are cut into
   three parts at F's entry and exit (a dump writes and zeroes only the
   dumping thread's counters; the recorder's thread keeps one file).  Each
   configuration runs fib(N) and fib(1); the difference removes interpreter
   start-up, imports and the tracer's fixed costs.  Columns, as multiples of
   the untraced run's difference:

   - *program's thread, run*: the program's thread inside the fib call only
     (the callbacks; what the traced program pays while it runs);
   - *program's thread, total*: the program's thread over the whole process
     (adds stop_tracing(): rendering the recording, the report);
   - *all threads*: every thread of the process (adds Ocular's recorder thread).

   *all ÷ program's thread, run* is issue 14's must-have 1 ratio for the
   ``.ocular`` row (target 1.15×: recording costs little beside the hot path).

2. **Render instructions per event.** Recordings of fib(N) and fib(1) are
   made without valgrind (``-o X.ocular``), then ``ocular.convert()`` of
   each runs under callgrind (every thread summed): Ir/event = (Ir(fib N) −
   Ir(fib 1)) / (events(fib N) − events(fib 1)), for JSON and .pftrace
   (targets: 300 and 150).

3. **Render cost against the program's shape** (issue 14, must-have 7): the
   same measure on recordings of a loop whose body is 1 or 200 statements
   (one JUMP and one BRANCH per iteration either way), and of recursion to
   depth 5 or 800 (three events per call), big minus small run; the ratios
   200/1 and 800/5 should be within 1.5×.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import sys
import tempfile
import time

from bench.common import (
    BENCH_DIR,
    ChildError,
    Context,
    Section,
    build_floor,
    child_env,
    child_python,
    log,
    machine_info,
    md_table,
    print_and_write,
    resolve_python,
    run_timed,
    tail,
)

BOUNDARY = "ocular_floor_measured_call"
DEFAULT_N = 22
THREAD_CONFIGS = ("untraced", "floor", "cProfile", "ocular-nofile", "ocular-recording",
                  "ocular-json", "ocular-pftrace")
THREAD_DOCS = {
    "untraced": "no tracer",
    "floor": "no-op C callback (bench/floor.c) on Ocular adaptive's events",
    "cProfile": "cProfile.Profile().enable(), then dump_stats()",
    "ocular-nofile": "start_tracing(perfetto=False): recording, statistics rendered at stop, no file",
    "ocular-recording": "output X.ocular: the recording only, nothing rendered",
    "ocular-json": "output X.json: recording, rendered to Chrome JSON at stop",
    "ocular-pftrace": "output X.pftrace: recording, rendered to Perfetto protobuf at stop",
}
FORMATS = ("json", "pftrace")
# fib's render rows also measure the trace alone (convert(statistics=False): `python -m ocular convert`
# without a report), "FMT:trace"
FIB_FORMATS = FORMATS + ("json:trace", "pftrace:trace")
RENDER_TARGET = {"json": 300, "pftrace": 150}
# shape -> (N big, N small, quick big, quick small); about 600k / 60k events (quick: 150k / 15k)
SHAPES = {
    "loop-1": (300_000, 30_000, 75_000, 7_500),
    "loop-200": (300_000, 30_000, 75_000, 7_500),
    "depth-5": (200_000, 20_000, 50_000, 5_000),
    "depth-800": (200_000, 20_000, 50_000, 5_000),
}
SHAPE_DOCS = {
    "loop-1": "for loop, body of 1 statement",
    "loop-200": "for loop, body of 200 statements",
    "depth-5": "recursion to depth 5, repeated",
    "depth-800": "recursion to depth 800, repeated",
}
SHAPE_PAIRS = (("loop-200", "loop-1"), ("depth-800", "depth-5"))
INDEPENDENCE_TARGET = 1.5


def read_totals(path):
    """Total Ir of one callgrind output file ("totals:" or "summary:" line)."""
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


def read_parts(tmp):
    """{thread: {part: Ir}} from callgrind.out[.PART]-TT files; the last (unnumbered) part is 0x7fff."""
    out = {}
    for name in os.listdir(tmp):
        m = re.fullmatch(r"callgrind\.out(?:\.(\d+))?-(\d+)", name)
        if m:
            part = int(m.group(1)) if m.group(1) else 0x7FFF
            out.setdefault(int(m.group(2)), {})[part] = read_totals(os.path.join(tmp, name))
    return out


def valgrind_cmd(valgrind, out, threads=False):
    cmd = [valgrind, "--tool=callgrind", "--quiet", "--callgrind-out-file=" + out]
    if threads:
        cmd += ["--separate-threads=yes", "--dump-before=" + BOUNDARY, "--dump-after=" + BOUNDARY]
    return cmd


def run_child(ctx, args, tmp, prefix=(), timeout=1800):
    result = os.path.join(tmp, "result.txt")
    cmd = list(prefix) + [ctx.python, "-m", "bench._callgrind_child"] + list(args) + [result]
    proc = run_timed(cmd, tmp, ctx.env, timeout=timeout)
    if proc.status != 0 or not os.path.exists(result):
        raise ChildError("exit {}: {}\n    {}".format(proc.status, " ".join(args),
                                                     tail(proc.stderr or proc.stdout)))
    with open(result) as f:
        return ast.literal_eval(f.read())


def warm_up(ctx, args):
    """Run a child once without valgrind, unmeasured: whatever it imports has its bytecode cached
    (written beside the sources) before the measured runs, so the first measured run of a
    configuration does not also pay for compiling modules the next one loads from the cache (that
    charged fib(N) minus fib(1) with up to 20 M instructions of compiling, either way)."""
    with tempfile.TemporaryDirectory(prefix="ocular-callgrind-warm-") as tmp:
        args = [a.replace("{tmp}", tmp) for a in args]
        run_child(ctx, args, tmp)


def measure_threads(ctx, valgrind, cfg, n):
    """(run Ir of the program's thread, its total Ir, all threads' Ir, threads, child result)."""
    warm_up(ctx, ["run", cfg, "1", "{tmp}"])
    with tempfile.TemporaryDirectory(prefix="ocular-callgrind-") as tmp:
        res = run_child(ctx, ["run", cfg, str(n), tmp], tmp,
                        prefix=valgrind_cmd(valgrind, os.path.join(tmp, "callgrind.out"), True))
        parts = read_parts(tmp)
    if 1 not in parts:
        raise ChildError("no callgrind output for thread 1")
    numbered = sorted(p for p in parts[1] if p != 0x7FFF)
    if len(numbered) != 2:
        raise ChildError("expected the program's thread cut in 3 parts at {}, got {}".format(
            BOUNDARY, sorted(parts[1])))
    run_ir = parts[1][numbered[1]]  # part 1: before the call; part 2: the call; last: after
    main_ir = sum(parts[1].values())
    all_ir = sum(sum(p.values()) for p in parts.values())
    return run_ir, main_ir, all_ir, len(parts), res


def measure_convert(ctx, valgrind, rec, fmt):
    fmt, _, alone = fmt.partition(":")
    extra = ["trace"] if alone else []
    warm_up(ctx, ["convert", rec, "{tmp}/trace." + fmt] + extra)
    with tempfile.TemporaryDirectory(prefix="ocular-callgrind-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        res = run_child(ctx, ["convert", rec, os.path.join(tmp, "trace." + fmt)] + extra, tmp,
                        prefix=valgrind_cmd(valgrind, out))
        ir = sum(read_totals(os.path.join(tmp, f)) for f in os.listdir(tmp)
                 if f.startswith("callgrind.out"))
    return ir, res


def record(ctx, shape, n, path):
    with tempfile.TemporaryDirectory(prefix="ocular-callgrind-rec-") as tmp:
        return run_child(ctx, ["record", shape, str(n), path], tmp)


def render_per_event(ctx, valgrind, recdir, label, shape, big, small, formats=FORMATS):
    """{fmt: (Ir/event, events big, events small, Ir big, Ir small)} for one shape."""
    recs = {}
    for n in (big, small):
        path = os.path.join(recdir, "{}-{}.ocular".format(shape, n))
        recs[n] = (path, record(ctx, shape, n, path))
    out = {}
    for fmt in formats:
        ir_big, res_big = measure_convert(ctx, valgrind, recs[big][0], fmt)
        ir_small, res_small = measure_convert(ctx, valgrind, recs[small][0], fmt)
        ev = res_big["events"] - res_small["events"]
        out[fmt] = ((ir_big - ir_small) / ev if ev > 0 else None,
                    res_big["events"], res_small["events"], ir_big, ir_small)
        log("callgrind: render {} {}: {:.1f} Ir/event ({:,} − {:,} events)".format(
            label, fmt, out[fmt][0] or 0, res_big["events"], res_small["events"]))
    return out


def run(ctx, n=DEFAULT_N, configs=THREAD_CONFIGS, shapes=True) -> Section:
    title = "Instructions (callgrind): every thread, and rendering"
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        msg = "Skipped: valgrind not found (apt-get install valgrind)."
        log("bench: callgrind: " + msg)
        return Section(title, msg)
    if not ctx.has("_ocular_floor"):
        msg = "Skipped: the floor module (bench/floor.c) is not built; it provides the measured boundary."
        log("bench: callgrind: " + msg)
        return Section(title, msg)
    has_ocular = ctx.has("ocular")
    failures = {}
    t_start = time.perf_counter()

    # -- 1. threads ------------------------------------------------------------
    meas = {}
    for cfg in configs:
        if cfg.startswith("ocular") and not has_ocular:
            failures[cfg] = "skipped: ocular not importable"
            continue
        try:
            for m in (n, 1):
                log("callgrind: fib({}) {} (whole process, per thread) ...".format(m, cfg))
                meas[(cfg, m)] = measure_threads(ctx, valgrind, cfg, m)
        except ChildError as exc:
            failures[cfg] = str(exc)
            log("callgrind: {} FAILED: {}".format(cfg, exc))
    rows = []
    base = None
    if ("untraced", n) in meas and ("untraced", 1) in meas:
        b, b1 = meas[("untraced", n)], meas[("untraced", 1)]
        base = [b[i] - b1[i] for i in range(3)]
    events = None  # events of fib(n) - fib(1), as Ocular recorded them (the floor gets the same)
    for cfg in configs:
        if (cfg, n) in meas and (cfg, 1) in meas and meas[(cfg, n)][4].get("events"):
            events = meas[(cfg, n)][4]["events"] - (meas[(cfg, 1)][4].get("events") or 0)
            break
    for cfg in configs:
        if (cfg, n) not in meas or (cfg, 1) not in meas:
            rows.append([cfg, "FAILED"] + [""] * 8)
            continue
        a, a1 = meas[(cfg, n)], meas[(cfg, 1)]
        d = [a[i] - a1[i] for i in range(3)]
        res = a[4]

        def ratio(i):
            return "{:.2f}×".format(d[i] / base[i]) if base and base[i] else "—"

        per = None
        if base and events and cfg in ("floor",) + tuple(c for c in configs if c.startswith("ocular")):
            per = (d[0] - base[0]) / events
        rows.append([
            cfg, "{:,}".format(d[2]), ratio(0), ratio(1), ratio(2),
            "{:.2f}×".format(d[2] / d[0]) if d[0] else "—",
            a[3],
            "{:.0f}".format(per) if per is not None else "—",
            res.get("pauses", "—") if res.get("pauses") is not None else "—",
            "{:,}".format(res["recording_bytes"] if res.get("recording_bytes") else res["bytes"])
            if res.get("bytes") or res.get("recording_bytes") else "—",
        ])
    header = ["config", "Ir all threads", "program's thread, run", "program's thread, total",
              "all threads", "all ÷ run", "threads", "run Ir/event", "pauses", "recording bytes"]
    threads_table = md_table(header, rows, left=1)

    # -- 2 and 3. rendering -----------------------------------------------------------
    render_rows, shape_rows, pair_lines = [], [], []
    render = {}
    if has_ocular:
        with tempfile.TemporaryDirectory(prefix="ocular-callgrind-recs-") as recdir:
            try:
                render["fib"] = render_per_event(ctx, valgrind, recdir, "fib({})".format(n), "fib", n, 1,
                                                 formats=FIB_FORMATS)
            except ChildError as exc:
                failures["render fib"] = str(exc)
                log("callgrind: render fib FAILED: {}".format(exc))
            for shape, sizes in (SHAPES.items() if shapes else ()):
                big, small = (sizes[2], sizes[3]) if ctx.quick else (sizes[0], sizes[1])
                try:
                    render[shape] = render_per_event(ctx, valgrind, recdir, shape, shape, big, small)
                except ChildError as exc:
                    failures["render " + shape] = str(exc)
                    log("callgrind: render {} FAILED: {}".format(shape, exc))
    if "fib" in render:
        for fmt in FIB_FORMATS:
            per, eb, es, ib, is_ = render["fib"][fmt]
            kind, _, alone = fmt.partition(":")  # (not `base`: that is the untraced run's counts)
            render_rows.append(["fib({}) − fib(1)".format(n), kind + (" (the trace alone)" if alone else ""),
                                "{:,}".format(eb - es), "{:,}".format(ib), "{:,}".format(is_),
                                "**{:.0f}**".format(per), "≤ {}: {}".format(
                                    RENDER_TARGET[kind], "met" if per <= RENDER_TARGET[kind] else "**not met**")])
    for shape in SHAPES:
        if shape not in render:
            continue
        r = render[shape]
        shape_rows.append([shape, SHAPE_DOCS[shape], "{:,} − {:,}".format(r["json"][1], r["json"][2])]
                          + ["{:.0f}".format(r[f][0]) for f in FORMATS])
    for a, b in SHAPE_PAIRS:
        if a in render and b in render:
            for fmt in FORMATS:
                q = render[a][fmt][0] / render[b][fmt][0]
                pair_lines.append("- {} ÷ {}, {}: **{:.2f}×** (target ≤ {}×: {})".format(
                    a, b, fmt, q, INDEPENDENCE_TARGET,
                    "met" if q <= INDEPENDENCE_TARGET else "**not met**"))
    elapsed = time.perf_counter() - t_start

    out = ["Python {}, fib({}) at threshold 0; callgrind counts (nearly deterministic, one run "
           "each); {:.0f} s.\n".format(ctx.version, n, elapsed)]
    for k, err in failures.items():
        out.append("- failed **{}**: {}".format(k, err.splitlines()[0]))
    if failures:
        out.append("")
    out.append("### Every thread: fib({}) − fib(1), multiples of untraced\n".format(n))
    out.append(threads_table)
    out.append("")
    out.append(
        "Whole process under `valgrind --tool=callgrind --separate-threads=yes` with the "
        "program's thread cut at the entry and exit of `{}` (the fib call); every figure is "
        "fib({}) minus fib(1), which removes start-up, imports and fixed costs. **program's thread, "
        "run**: the program's thread inside the fib call (the callbacks). **program's thread, "
        "total**: the same thread over the whole process (adds stop_tracing(): rendering, the "
        "report, cProfile's dump). **all threads**: every thread (adds Ocular's recorder). "
        "**all ÷ run**: all threads over the program's thread during the run (issue 14 target for "
        "`ocular-recording`: ≤ 1.15×). **run Ir/event**: (run Ir − untraced run Ir) / events "
        "recorded. Untraced fib({}) − fib(1): {:,} Ir.\n".format(
            BOUNDARY, n, n, base[0] if base else 0))
    for cfg in configs:
        out.append("- **{}**: {}".format(cfg, THREAD_DOCS.get(cfg, "")))
    render_table = ""
    if render_rows:
        render_table = md_table(["recordings", "format", "events", "Ir (big)", "Ir (small)",
                                 "render Ir/event", "target"], render_rows)
        out.append("\n### Rendering a recording: instructions per event\n")
        out.append(render_table)
        out.append("")
        out.append("`python -m ocular convert` (ocular.convert) of a recording of fib({}) and of "
                   "fib(1), each under callgrind, all threads: (Ir(big) − Ir(small)) / (events(big) − "
                   "events(small)): decoding the recording, rebuilding stacks, statistics, "
                   "encoding, deflate for .pftrace, the report.".format(n))
    shape_table = ""
    if shape_rows:
        shape_table = md_table(["shape", "what", "events (big − small)"]
                               + ["{} Ir/event".format(f) for f in FORMATS], shape_rows)
        out.append("\n### Render cost against the program's shape (issue 14, must-have 7)\n")
        out.append(shape_table)
        out.append("")
        out.extend(pair_lines)
        out.append("")
        out.append("Same measure, on recordings of shapes whose old writer cost grew with the code "
                   "(loop-body walk per back jump; stack scan per return). Sizes: {}.".format(
                       ", ".join("{} {:,} / {:,}".format(s, *(v[2:] if ctx.quick else v[:2]))
                                 for s, v in SHAPES.items())))
    console = "\n\n".join(t for t in (threads_table, render_table, shape_table) if t)
    if pair_lines:
        console += "\n" + "\n".join(pair_lines)
    return Section(title, "\n".join(out), console, failed=bool(failures))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.callgrind",
                                 description="Instruction counts with callgrind: threads and rendering.")
    ap.add_argument("--n", type=int, default=DEFAULT_N, help="fib size (default %(default)s)")
    ap.add_argument("--configs", default=",".join(THREAD_CONFIGS),
                    help="threads table configurations (default: %(default)s)")
    ap.add_argument("--no-shapes", action="store_true", help="skip the render-cost-by-shape table")
    ap.add_argument("--quick", action="store_true", help="smaller shape recordings")
    ap.add_argument("--python", default=None, help="X.Y or interpreter path")
    ap.add_argument("--no-setup", action="store_true",
                    help="do not create .venv-bench-X.Y if it is missing")
    ap.add_argument("--output", "-o", default=str(BENCH_DIR / "_build" / "callgrind.md"),
                    help="markdown report path ('-' for none)")
    args = ap.parse_args(argv)
    configs = args.configs.split(",")
    for c in configs:
        if c not in THREAD_CONFIGS:
            ap.error("unknown configuration {!r} (choose from {})".format(c, ", ".join(THREAD_CONFIGS)))
    if "untraced" not in configs:
        configs.insert(0, "untraced")

    from bench import micro

    python, _ = child_python(resolve_python(args.python), setup=not args.no_setup)
    floor_dir, floor_err = build_floor(python)
    if floor_dir is None:
        print("callgrind: building bench/floor.c failed:\n" + (floor_err or ""))
        return 1
    env = child_env(floor_dir)
    probe = micro.probe(python, env)
    ctx = Context(python, probe["python"].split()[0], env, quick=args.quick,
                  setup=not args.no_setup, probe=probe["probe"])
    sec = run(ctx, args.n, configs, shapes=not args.no_shapes)
    report = "# {}\n\n- machine: {}\n\n{}\n".format(sec.title, machine_info(), sec.markdown)
    print_and_write(report, args.output, "callgrind")
    return 1 if sec.failed else 0


if __name__ == "__main__":
    sys.exit(main())
