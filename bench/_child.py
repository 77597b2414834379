"""One benchmark measurement, run in a fresh interpreter by bench/run.py.

usage: python -m bench._child WORKLOAD SIZE CONFIG RESULT_FILE [--no-save] [--callgrind]

CONFIG is a name from bench.configs.CONFIGS, or "count" (count the events
the workload produces with _ocular_floor counters), or "probe" (WORKLOAD and
SIZE ignored: report which optional imports work).

Only the workload call is timed (time.perf_counter around it, and
time.thread_time: this thread's CPU time); starting the
tracer happens before, stopping it and writing its output after, each timed
separately.  With --callgrind the workload is called through
_ocular_floor.measured_call, the region bench/callgrind.py collects.  With --no-save the tracer's output is not written (the runner
saves only in its first round; a tracer that writes as it stops, like
Ocular's stop_tracing(), is counted as stop).  There is no warm-up run: every measurement is a first run in a
fresh process, like tracing a real program.

The result goes to RESULT_FILE (not stdout, which tracers may print to).
It is written as a Python literal (read back with ast.literal_eval) rather
than JSON: importing json costs every child ~13 ms of start-up.
"""

from __future__ import annotations

import os
import sys
import time


def _write(path, obj):
    with open(path, "w") as f:
        f.write(repr(obj))


def _thread_rusage():
    """(voluntary, involuntary) context switches of the calling thread, or None off Linux."""
    try:
        import resource

        ru = resource.getrusage(resource.RUSAGE_THREAD)
    except (ImportError, AttributeError, OSError):
        return None
    return ru.ru_nvcsw, ru.ru_nivcsw


def _floor_start(events, clock=False):
    import _ocular_floor

    from bench.configs import EVENT_SETS, FLOOR_TOOL_ID, monitoring_events

    mon = sys.monitoring
    cb = _ocular_floor.clocked() if clock else _ocular_floor.callback()
    mon.use_tool_id(FLOOR_TOOL_ID, "ocular-bench-floor")
    mask = 0
    evs = monitoring_events(EVENT_SETS[events])
    for _name, ev in evs:
        mon.register_callback(FLOOR_TOOL_ID, ev, cb)
        mask |= ev
    mon.set_events(FLOOR_TOOL_ID, mask)

    def stop():
        mon.set_events(FLOOR_TOOL_ID, 0)
        for _name, ev in evs:
            mon.register_callback(FLOOR_TOOL_ID, ev, None)
        mon.free_tool_id(FLOOR_TOOL_ID)

    return stop, None


def _count_start():
    import _ocular_floor

    from bench.configs import FLOOR_TOOL_ID, PRECISE_EVENTS, monitoring_events

    mon = sys.monitoring
    counters = {}
    mon.use_tool_id(FLOOR_TOOL_ID, "ocular-bench-count")
    mask = 0
    for name, ev in monitoring_events(PRECISE_EVENTS):
        counters[name] = _ocular_floor.counter()
        mon.register_callback(FLOOR_TOOL_ID, ev, counters[name])
        mask |= ev
    mon.set_events(FLOOR_TOOL_ID, mask)

    def stop():
        mon.set_events(FLOOR_TOOL_ID, 0)
        mon.free_tool_id(FLOOR_TOOL_ID)

    return stop, counters


def _start(cfg_name, outdir):
    """Start the configuration's tracer; return (stop, save, extra)."""
    from bench.configs import CONFIGS

    if cfg_name == "count":
        stop, counters = _count_start()
        return stop, None, counters
    cfg = CONFIGS[cfg_name]
    kind = cfg.kind
    if kind == "untraced":
        return None, None, None
    if kind == "floor":
        stop, _ = _floor_start(cfg.events, cfg.params.get("clock", False))
        return stop, None, None
    if kind == "cprofile":
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        return prof.disable, lambda: prof.dump_stats(os.path.join(outdir, "cprofile.pstat")), None
    if kind == "ocular":
        import ocular

        ocular.start_tracing(output=os.path.join(outdir, "ocular_trace.json"), **cfg.params)
        figures = {}

        def stop():
            # Ocular renders and writes its trace when tracing stops: stop and save are one.
            res = ocular.stop_tracing()
            figures.update(events=res.get("events"), pauses=res.get("pauses"))

        return stop, None, figures
    if kind == "viztracer":
        from viztracer import VizTracer

        tracer = VizTracer(output_file=os.path.join(outdir, "viztracer.json"), verbose=0)
        tracer.start()
        return tracer.stop, tracer.save, None
    if kind == "yappi":
        import yappi

        yappi.start()
        return yappi.stop, lambda: yappi.get_func_stats().save(
            os.path.join(outdir, "yappi.pstat"), type="pstat"
        ), None
    raise SystemExit("unknown configuration kind: " + kind)


def _probe():
    """Which optional modules import (and look usable) in this interpreter."""
    out = {}
    for mod in ("_ocular_floor", "cProfile", "ocular", "viztracer", "yappi", "pyperf", "pyperformance"):
        try:
            m = __import__(mod)
            if mod == "ocular" and not (
                hasattr(m, "start_tracing") and hasattr(m, "stop_tracing")
            ):
                raise ImportError(
                    "'ocular' imports but has no start_tracing/stop_tracing "
                    "(package not built yet? run `make`) [{}]".format(
                        getattr(m, "__file__", None) or list(getattr(m, "__path__", []))
                    )
                )
            version = getattr(m, "__version__", None)
            if version is None and mod in ("viztracer", "yappi", "ocular", "pyperf", "pyperformance"):
                try:
                    from importlib.metadata import version as dist_version

                    version = dist_version({"ocular": "ocular-profiler"}.get(mod, mod))
                except Exception:
                    version = None
            out[mod] = {"ok": True, "version": str(version or "")}
        except Exception as exc:  # any failure means "skip", with the reason
            out[mod] = {"ok": False, "reason": "{}: {}".format(type(exc).__name__, exc)}
    return out


def main(argv):
    flags = {a for a in argv if a.startswith("--")}
    argv = [a for a in argv if not a.startswith("--")]
    no_save = "--no-save" in flags
    if len(argv) != 4:
        raise SystemExit(__doc__)
    wl_name, size, cfg_name, result_path = argv
    outdir = os.path.dirname(os.path.abspath(result_path))

    if cfg_name == "probe":
        _write(result_path, {"probe": _probe(), "python": sys.version})
        return 0

    from bench.workloads import WORKLOADS

    func = WORKLOADS[wl_name].func
    size = int(size)
    if "--callgrind" in flags:
        import _ocular_floor

        inner = func

        def func(n):
            return _ocular_floor.measured_call(inner, n)

    t0 = time.perf_counter()
    stop, save, extra = _start(cfg_name, outdir)
    ru1 = _thread_rusage()
    t1 = time.perf_counter()
    c1 = time.thread_time()
    result = func(size)
    c2 = time.thread_time()
    t2 = time.perf_counter()
    ru2 = _thread_rusage()
    if stop is not None:
        stop()
    t3 = time.perf_counter()
    if save is not None and not no_save:
        save()
    else:
        save = None
    t4 = time.perf_counter()

    out = {
        "start_s": t1 - t0,
        "work_s": t2 - t1,
        "work_cpu_s": c2 - c1,  # this thread's CPU time over the workload call
        # this thread's context switches over the call: voluntary (it blocked: waited for a lock,
        # a condition, I/O) and involuntary (preempted: another thread or process took its CPU)
        "work_vcsw": ru2[0] - ru1[0] if ru1 else None,
        "work_ivcsw": ru2[1] - ru1[1] if ru1 else None,
        "stop_s": t3 - t2,
        "save_s": None if save is None else t4 - t3,
        "result": repr(result),
    }
    if cfg_name == "count":
        out["counts"] = {name: c.count for name, c in extra.items()}
        if "BRANCH_LEFT" in out["counts"]:  # 3.14+: the two branch events count as BRANCH
            out["counts"]["BRANCH"] = out["counts"].pop("BRANCH_LEFT") + out["counts"].pop("BRANCH_RIGHT")
    elif extra:
        out["tracer"] = extra  # Ocular: events and pauses from stop_tracing()
    _write(result_path, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
