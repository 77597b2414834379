"""Benchmark configurations: what runs around a workload in the child process.

Shared by the runner (bench/run.py) and the child (bench/_child.py) so both
agree on names, event sets and which floor each configuration is compared to.
"""

from __future__ import annotations

# sys.monitoring event names (attributes of sys.monitoring.events).
CALL_EVENTS = ("PY_START", "PY_RESUME", "PY_THROW", "PY_RETURN", "PY_YIELD", "PY_UNWIND")
ADAPTIVE_EVENTS = CALL_EVENTS + ("JUMP", "BRANCH")
PRECISE_EVENTS = ADAPTIVE_EVENTS + ("INSTRUCTION",)

EVENT_SETS = {
    "calls": CALL_EVENTS,
    "adaptive": ADAPTIVE_EVENTS,
    "precise": PRECISE_EVENTS,
}

# sys.monitoring tool id the floor uses (PROFILER_ID; cProfile uses it too on
# 3.12+, but never in the same process here).
FLOOR_TOOL_ID = 2


def monitoring_events(names):
    """The sys.monitoring events behind event names, as (name, number) pairs read at run time.  "BRANCH"
    stands for the branch events of this Python: BRANCH_LEFT and BRANCH_RIGHT on 3.14+ (where BRANCH is
    deprecated and renumbered), as Ocular registers them."""
    import sys

    ev = sys.monitoring.events
    out = []
    for name in names:
        if name == "BRANCH" and hasattr(ev, "BRANCH_LEFT"):
            out += [("BRANCH_LEFT", ev.BRANCH_LEFT), ("BRANCH_RIGHT", ev.BRANCH_RIGHT)]
        else:
            out.append((name, getattr(ev, name)))
    return out


class Config:
    """One configuration.  (A plain class, not a dataclass: every child
    imports this module, and dataclasses costs ~20 ms of start-up.)

    name, kind: kind is untraced | floor | cprofile | ocular | viztracer | yappi.
    events: event set (key of EVENT_SETS) the configuration receives: used for
        the floor's registration and for ns/event; None: no events.
    floor: the floor configuration this one is compared with ("x floor").
    per_event: False when fewer events are delivered than counted (adaptive
        de-instrumentation after a threshold): no ns/event then.
    params: keyword arguments (ocular.start_tracing).
    requires: module the child imports; the runner probes it and skips the
        configuration, with the reason, if it fails.
    """

    __slots__ = ("name", "kind", "doc", "events", "floor", "per_event", "params", "requires")

    def __init__(self, name, kind, doc, events=None, floor=None, per_event=True,
                 params=None, requires=None):
        self.name = name
        self.kind = kind
        self.doc = doc
        self.events = events
        self.floor = floor
        self.per_event = per_event
        self.params = dict(params or {})
        self.requires = requires


CONFIGS = {
    c.name: c
    for c in (
        Config("untraced", "untraced", "no tracer at all (the baseline)"),
        Config(
            "floor-calls", "floor",
            "no-op C callback (bench/floor.c) on the call events only: "
            "PY_START, PY_RESUME, PY_THROW, PY_RETURN, PY_YIELD, PY_UNWIND",
            events="calls", floor="floor-calls", requires="_ocular_floor",
        ),
        Config(
            "floor", "floor",
            "no-op C callback on Ocular adaptive's events: call events + JUMP, BRANCH",
            events="adaptive", floor="floor", requires="_ocular_floor",
        ),
        Config(
            "floor-clock", "floor",
            "the floor, reading the clock Ocular reads per event (the TSC): what any tracer that "
            "timestamps every event pays at least",
            events="adaptive", floor="floor", requires="_ocular_floor", params={"clock": True},
        ),
        Config(
            "floor-precise", "floor",
            "no-op C callback on Ocular precise's events: adaptive + INSTRUCTION",
            events="precise", floor="floor-precise", requires="_ocular_floor",
        ),
        Config(
            "cProfile", "cprofile",
            "cProfile.Profile().enable() (stdlib; hooks Python and C calls)",
            events="calls", floor="floor-calls", requires="cProfile",
        ),
        Config(
            "ocular-adaptive-t0", "ocular",
            "ocular.start_tracing(mode='adaptive', deinstrument_threshold=0)",
            events="adaptive", floor="floor", requires="ocular",
            params={"mode": "adaptive", "deinstrument_threshold": 0},
        ),
        Config(
            "ocular-adaptive-t500", "ocular",
            "ocular.start_tracing(mode='adaptive', deinstrument_threshold=500)",
            events="adaptive", floor="floor", per_event=False, requires="ocular",
            params={"mode": "adaptive", "deinstrument_threshold": 500},
        ),
        Config(
            "ocular-precise", "ocular",
            "ocular.start_tracing(mode='precise', deinstrument_threshold=0)",
            events="precise", floor="floor-precise", requires="ocular",
            params={"mode": "precise", "deinstrument_threshold": 0},
        ),
        Config(
            "viztracer", "viztracer",
            "viztracer.VizTracer(verbose=0) with default settings",
            events="calls", floor="floor-calls", requires="viztracer",
        ),
        Config(
            "yappi", "yappi",
            "yappi.start() with default settings (CPU clock, all threads)",
            events="calls", floor="floor-calls", requires="yappi",
        ),
    )
}
