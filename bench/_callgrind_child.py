"""What bench/callgrind.py runs under valgrind (and, to make recordings, without it).

usage:
    python -m bench._callgrind_child run CONFIG N OUTDIR RESULT
        fib(N) under CONFIG (THREAD_CONFIGS below), the fib call made through
        _ocular_floor.measured_call (the boundary of callgrind's
        --dump-before/--dump-after), then the tracer stopped and its output
        written into OUTDIR.
    python -m bench._callgrind_child compare CONFIG WORKLOAD OUTDIR RESULT
        WORKLOAD (fib:N, loop_ccalls:N, or pyperf:NAME, see
        bench/callgrind_compare.py) under CONFIG (COMPARE_CONFIGS below), the
        workload called through _ocular_floor.measured_call, then the tracer
        stopped, its output written into OUTDIR and its report printed (for
        cProfile: print_stats(), what `python -m cProfile SCRIPT` prints).
    python -m bench._callgrind_child record SHAPE N OUTPUT RESULT
        SHAPE(N) (SHAPES below) traced at threshold 0 into the recording
        OUTPUT (.ocular); nothing is rendered.
    python -m bench._callgrind_child convert RECORDING OUTPUT [trace] RESULT
        ocular.convert(RECORDING, OUTPUT): the renderer alone; with `trace`,
        statistics=False (the trace alone, what `python -m ocular convert`
        renders when no report is asked for).

RESULT receives a Python literal (events, pauses, bytes when a tracer ran):
nothing is printed, so the child's output cannot disturb the measurement.
"""

from __future__ import annotations

import os
import sys

sys.setrecursionlimit(10_000)


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


# -- render-cost shapes (issue 14, must-have 7) ------------------------------
# Each makes about the same number of events per unit of N whatever its
# shape, so that rendering cost per event can be compared across shapes.

def _loop_func(stmts):
    """for i in range(n): <stmts straight-line statements>: one JUMP (back edge) and one BRANCH
    (FOR_ITER) per iteration, whatever the body's length."""
    body = "\n".join("        x = x + 1" for _ in range(stmts))
    src = "def loop(n):\n    x = 0\n    for i in range(n):\n{}\n    return x\n".format(body)
    ns = {}
    exec(compile(src, "<bench-loop{}>".format(stmts), "exec"), ns)
    return ns["loop"]


def _rec(d):
    if d:
        return _rec(d - 1) + 1
    return 0


def _recursion(depth):
    """Recursion to DEPTH and back, N // DEPTH times: 3 events per call (PY_START, BRANCH,
    PY_RETURN), N calls in all."""

    def run(n):
        total = 0
        for _ in range(max(1, n // depth)):
            total += _rec(depth - 1)
        return total

    return run


def shape(name):
    kind, _, arg = name.partition("-")
    if kind == "fib":
        return fib
    if kind == "loop":
        return _loop_func(int(arg))
    if kind == "depth":
        return _recursion(int(arg))
    raise SystemExit("unknown shape " + name)


# -- configurations of the threads table ---------------------------------------
# name -> (kind, output file name or None, start_tracing keywords)
THREAD_CONFIGS = {
    "untraced": ("untraced", None, None),
    "floor": ("floor", None, None),
    "cProfile": ("cprofile", "prof.out", None),
    "ocular-nofile": ("ocular", None, {"perfetto": False}),
    "ocular-recording": ("ocular", "trace.ocular", {}),
    "ocular-json": ("ocular", "trace.json", {}),
    "ocular-pftrace": ("ocular", "trace.pftrace", {}),
}


# -- configurations of the defaults comparison (bench/callgrind_compare.py) ----
# name -> (kind, floor event set or start_tracing keywords)
COMPARE_CONFIGS = {
    "untraced": ("untraced", None),
    "floor-calls": ("floor", "calls"),
    "floor-jumps": ("floor", "adaptive"),
    "cProfile": ("cprofile", None),
    "ocular-near-zero": ("ocular", {"near_zero": True, "deinstrument_threshold": 500}),
    "ocular-default": ("ocular", {"deinstrument_threshold": 500}),
    "ocular-default-report": ("ocular", {"deinstrument_threshold": 500, "perfetto": False}),
    "ocular-t0": ("ocular", {"deinstrument_threshold": 0}),
}


# pyperformance benchmark -> (loops, script arguments) for bench/callgrind_compare.py; small, so that
# one callgrind run of the heaviest configuration stays under ~2 minutes on the 2-core reference machine
PYPERF = {
    "richards": (1, []),
    "deltablue": (2, []),
    "raytrace": (1, ["--width", "20", "--height", "20"]),
    "go": (1, []),
    "async_tree": (1, ["none"]),  # (asyncio: 55,987 tasks of gather() on a tree 6 deep, 6 wide)
}


def pyperf_argv(name, result):
    """sys.argv for running pyperformance's bm_NAME/run_benchmark.py as one pyperf worker."""
    import importlib.util

    # the package's directory without importing it (~300 M instructions)
    spec = importlib.util.find_spec("pyperformance")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pyperformance is not installed (bench/requirements.txt)")
    script = os.path.join(list(spec.submodule_search_locations)[0], "data-files", "benchmarks",
                          "bm_" + name, "run_benchmark.py")
    loops, args = PYPERF[name]
    return [script] + list(args) + ["--worker", "--loops", str(loops), "--warmups", "0", "--values", "1",
                                    "--output", result]


def _workload(spec, outdir):
    """(callable of one argument, its argument) for a WORKLOAD spec."""
    kind, _, arg = spec.partition(":")
    if kind == "fib":
        return fib, int(arg)
    if kind == "loop_ccalls":
        from bench.workloads import loop_ccalls

        return loop_ccalls, int(arg)
    if kind == "aio_loopback":
        from bench.workloads import aio_loopback

        return aio_loopback, int(arg)
    if kind == "pyperf":
        # the benchmark's own run_benchmark.py, unmodified, as one pyperf worker (bench/pyperf_suite.py)
        import functools
        import runpy

        argv = pyperf_argv(arg, os.path.join(outdir, "pyperf.json"))
        sys.argv[:] = argv
        sys.path.insert(0, os.path.dirname(argv[0]))
        return functools.partial(runpy.run_path, run_name="__main__"), argv[0]
    raise SystemExit("unknown workload " + spec)


def compare(cfg, spec, outdir, result):
    import _ocular_floor

    kind, params = COMPARE_CONFIGS[cfg]
    func, arg = _workload(spec, outdir)
    out = {}
    if kind == "floor":
        from bench._child import _floor_start

        stop, _ = _floor_start(params)
        _ocular_floor.measured_call(func, arg)
        stop()
    elif kind == "cprofile":
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        _ocular_floor.measured_call(func, arg)
        prof.disable()
        prof.print_stats()  # what `python -m cProfile SCRIPT` prints at exit (sorted by name)
    elif kind == "ocular":
        import ocular

        # the defaults but the keywords: the default trace file (ocular_trace.pftrace: compressed Perfetto
        # protobuf), text report on stderr; the sampling windows' timing from OCULAR_BENCH_SAMPLING ("P,W" ms,
        # or "0": off; unset: the default, 100 ms / 1 ms)
        kw = dict(params)
        sampling = os.environ.get("OCULAR_BENCH_SAMPLING")
        if sampling:
            kw["sampling"] = False if sampling == "0" else tuple(int(x) for x in sampling.split(","))
        ocular.start_tracing(output=os.path.join(outdir, "ocular_trace.pftrace"), **kw)
        _ocular_floor.measured_call(func, arg)
        res = ocular.stop_tracing()
        out = {"events": res.get("events"), "pauses": res.get("pauses"), "dropped": res.get("dropped")}
    else:
        _ocular_floor.measured_call(func, arg)
    _write(result, out)


def _write(path, obj):
    with open(path, "w") as f:
        f.write(repr(obj))


def run(cfg, n, outdir, result):
    import _ocular_floor

    kind, fname, params = THREAD_CONFIGS[cfg]
    out = {}
    path = os.path.join(outdir, fname) if fname else None
    if kind == "floor":
        from bench._child import _floor_start

        stop, _ = _floor_start("adaptive")
        _ocular_floor.measured_call(fib, n)
        stop()
    elif kind == "cprofile":
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        _ocular_floor.measured_call(fib, n)
        prof.disable()
        prof.dump_stats(path)
    elif kind == "ocular":
        import ocular

        kw = dict(deinstrument_threshold=0, report=False, **params)
        if path:
            kw["output"] = path
        else:
            kw["output"] = os.path.join(outdir, "unused.json")
        ocular.start_tracing(**kw)
        _ocular_floor.measured_call(fib, n)
        res = ocular.stop_tracing()
        out = {"events": res.get("events"), "pauses": res.get("pauses"), "bytes": res.get("bytes"),
               "recording_bytes": res.get("recording_bytes")}
    else:
        _ocular_floor.measured_call(fib, n)
    _write(result, out)


def record(shape_name, n, output, result):
    import ocular

    func = shape(shape_name)
    ocular.start_tracing(output=output, deinstrument_threshold=0, report=False)
    func(n)
    res = ocular.stop_tracing()
    _write(result, {"events": res.get("events"), "bytes": os.path.getsize(output),
                    "pauses": res.get("pauses")})


def convert(recording, output, result, statistics=True):
    import ocular

    res = ocular.convert(recording, output, statistics=statistics)
    _write(result, {"events": res.get("events"), "bytes": os.path.getsize(output)})


def main(argv):
    if not argv:
        raise SystemExit(__doc__)
    cmd = argv[0]
    if cmd == "run" and len(argv) == 5:
        run(argv[1], int(argv[2]), argv[3], argv[4])
    elif cmd == "compare" and len(argv) == 5:
        compare(argv[1], argv[2], argv[3], argv[4])
    elif cmd == "record" and len(argv) == 5:
        record(argv[1], int(argv[2]), argv[3], argv[4])
    elif cmd == "convert" and (len(argv) == 4 or len(argv) == 5 and argv[3] == "trace"):
        convert(argv[1], argv[2], argv[-1], statistics=len(argv) == 4)
    else:
        raise SystemExit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
