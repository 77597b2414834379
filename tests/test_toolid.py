"""sys.monitoring tool ids: by default Ocular takes the first free of 3, 4, 5 and never 0-2 (the ids of
CPython's debugger, coverage and profiler tools: pdb on 3.14+, coverage.py, cProfile), takes 0-2 only when
asked with tool_id=, coexists with other tools, reports who holds an id it cannot have, frees only what
it holds, and never calls sys.monitoring.restart_events (which would re-enable every other tool's
disabled events).
"""

import cProfile
import os
import pstats
import sys

import pytest

import ocular
from conftest import check_balanced, load_trace, names

mon = sys.monitoring

_SRC = """
def {name}(n):
    total = 0
    for i in range(n):
        total += {name}_leaf(i)
    return total

def {name}_leaf(i):
    return i + 1
"""


def make_work(name):
    """A fresh workload function `name` calling `name`_leaf (new code objects on every call, so no
    DISABLE left over from another session can hide them)."""
    ns = {}
    exec(compile(_SRC.format(name=name), __file__, "exec"), ns)
    return ns[name]


def holders():
    return [mon.get_tool(i) for i in range(6)]


_baseline = [None] * 6


def expected(**held):
    """The holders we expect: the ones from before the test, plus held={'id2': 'name', ...}."""
    out = list(_baseline)
    for key, name in held.items():
        out[int(key[2:])] = name
    return out


@pytest.fixture(autouse=True)
def clean_tool_ids():
    """Ids 2-5 must be free before each test (ids 0/1 may belong to a debugger or coverage tool
    running the tests; they are left alone), and each test gives back every id it took, also when
    it fails."""
    global _baseline
    _baseline = holders()
    assert _baseline[2:] == [None] * 4, f"tool ids in use before the test: {_baseline}"
    assert not ocular.is_tracing()
    yield
    if ocular.is_tracing():
        ocular.stop_tracing()
    for i in range(6):
        if mon.get_tool(i) is not None and _baseline[i] is None:
            mon.set_events(i, 0)
            mon.free_tool_id(i)


def profiled_names(prof):
    return {func for (_file, _line, func) in pstats.Stats(prof).stats}


def test_default_leaves_the_claimed_ids_alone(trace_path):
    work = make_work("toolid_default")
    ocular.start_tracing(output=trace_path)
    try:
        assert mon.get_tool(3) == "ocular"
        assert holders()[:3] == _baseline[:3]  # 0 debugger, 1 coverage, 2 profiler: untouched
        assert holders().count("ocular") == 1
        work(5)
    finally:
        res = ocular.stop_tracing()
    assert res.tool_id == 3
    assert mon.get_tool(3) is None
    assert mon.get_events(3) == 0
    assert "toolid_default_leaf" in names(load_trace(trace_path)["traceEvents"])


def test_explicit_free_tool_id(trace_path):
    work = make_work("toolid_explicit")
    ocular.start_tracing(output=trace_path, tool_id=5)
    try:
        assert mon.get_tool(5) == "ocular"
        assert holders().count("ocular") == 1
        work(5)
    finally:
        res = ocular.stop_tracing()
    assert res.tool_id == 5
    assert holders() == expected()
    assert "toolid_explicit_leaf" in names(load_trace(trace_path)["traceEvents"])


def test_coexists_with_cprofile(trace_path):
    work = make_work("toolid_shared")
    prof = cProfile.Profile()
    prof.enable()
    try:
        assert mon.get_tool(2) not in (None, "ocular")  # cProfile sits on PROFILER_ID
        ocular.start_tracing(output=trace_path)
        try:
            work(10)
        finally:
            res = ocular.stop_tracing()
        assert mon.get_tool(2) not in (None, "ocular")  # still cProfile's
    finally:
        prof.disable()
    assert res.tool_id == 3  # the first of the documented order 3, 4, 5
    assert holders() == expected()
    # both tools saw the workload
    assert {"toolid_shared", "toolid_shared_leaf"} <= profiled_names(prof)
    calls = {func: st[1] for (_f, _l, func), st in pstats.Stats(prof).stats.items()}
    assert calls["toolid_shared_leaf"] == 10
    data = load_trace(trace_path)
    check_balanced(data["traceEvents"])
    traced = names(data["traceEvents"])
    assert traced.count("toolid_shared_leaf") == 10
    assert traced.count("toolid_shared") == 1


def test_tool_id_held_by_cprofile(trace_path):
    before = make_work("toolid_before")
    after = make_work("toolid_after")
    prof = cProfile.Profile()
    prof.enable()
    try:
        before(3)
        holder = mon.get_tool(2)
        with pytest.raises(RuntimeError) as ei:
            ocular.start_tracing(output=trace_path, tool_id=2)
        assert not ocular.is_tracing()
        assert mon.get_tool(2) == holder  # untouched
        assert "ocular" not in holders()
        after(4)
    finally:
        prof.disable()
    msg = str(ei.value)
    assert repr(holder) in msg and "2" in msg
    assert "cProfile" in msg or holder != "cProfile"
    # cProfile kept working after the refused start
    stats = pstats.Stats(prof).stats
    calls = {func: st[1] for (_f, _l, func), st in stats.items()}
    assert calls.get("toolid_before_leaf") == 3
    assert calls.get("toolid_after_leaf") == 4
    assert not os.path.exists(trace_path)


def test_all_tool_ids_taken(trace_path):
    for i in range(6):
        if mon.get_tool(i) is None:
            mon.use_tool_id(i, f"other{i}")
    full = holders()
    assert None not in full
    with pytest.raises(RuntimeError) as ei:
        ocular.start_tracing(output=trace_path)
    msg = str(ei.value)
    for i, name in enumerate(full):  # every holder is listed
        assert f"{i}={name!r}" in msg
    assert not ocular.is_tracing()
    assert holders() == full
    # the explicit-id path names the holder too
    with pytest.raises(RuntimeError, match="other4"):
        ocular.start_tracing(output=trace_path, tool_id=4)
    assert holders() == full
    # once one id is free ocular takes it, and gives it back at stop
    mon.free_tool_id(3)
    work = make_work("toolid_last_free")
    ocular.start_tracing(output=trace_path)
    try:
        assert mon.get_tool(3) == "ocular"
        work(2)
    finally:
        res = ocular.stop_tracing()
    assert res.tool_id == 3
    assert holders() == [name if i != 3 else None for i, name in enumerate(full)]
    assert "toolid_last_free_leaf" in names(load_trace(trace_path)["traceEvents"])


def test_preference_order_skips_held_ids(trace_path):
    for i in (3, 4):
        mon.use_tool_id(i, f"other{i}")
    ocular.start_tracing(output=trace_path)
    res = ocular.stop_tracing()
    assert res.tool_id == 5
    assert holders() == expected(id3="other3", id4="other4")


def test_never_takes_0_to_2_unless_asked(trace_path):
    """With 3, 4 and 5 held the default start fails, naming the holders and the way out, although ids
    of 0-2 are free; an explicit tool_id= gets one of them."""
    for i in (3, 4, 5):
        mon.use_tool_id(i, f"other{i}")
    free_low = [i for i in range(3) if mon.get_tool(i) is None]
    with pytest.raises(RuntimeError) as ei:
        ocular.start_tracing(output=trace_path)
    msg = str(ei.value)
    for i in (3, 4, 5):
        assert f"{i}='other{i}'" in msg, msg
    assert "tool_id=" in msg, msg
    assert not ocular.is_tracing()
    assert holders() == expected(id3="other3", id4="other4", id5="other5")
    assert not os.path.exists(trace_path)
    if not free_low:
        pytest.skip("ids 0-2 are all held by the tools running the tests: no explicit id to try")
    work = make_work("toolid_explicit_low")
    ocular.start_tracing(output=trace_path, tool_id=free_low[-1])
    try:
        assert mon.get_tool(free_low[-1]) == "ocular"
        work(2)
    finally:
        res = ocular.stop_tracing()
    assert res.tool_id == free_low[-1]
    assert holders() == expected(id3="other3", id4="other4", id5="other5")
    assert names(load_trace(trace_path)["traceEvents"]).count("toolid_explicit_low_leaf") == 2


def test_stop_frees_only_our_id(trace_path):
    mon.use_tool_id(4, "other")
    cb_calls = []

    def other_cb(code, offset):
        if code.co_name.startswith("toolid_"):
            cb_calls.append(code.co_name)

    mon.register_callback(4, mon.events.PY_START, other_cb)
    mon.set_events(4, mon.events.PY_START)
    work = make_work("toolid_neighbour")
    ocular.start_tracing(output=trace_path)
    try:
        work(3)
    finally:
        res = ocular.stop_tracing()
    assert res.tool_id == 3
    assert mon.get_tool(3) is None and mon.get_events(3) == 0
    # the neighbour's id, events and callback are all still in place and working
    assert mon.get_tool(4) == "other"
    assert mon.get_events(4) == mon.events.PY_START
    cb_calls.clear()
    try:
        work(2)
    finally:
        mon.set_events(4, 0)
    assert cb_calls.count("toolid_neighbour_leaf") == 2
    assert mon.register_callback(4, mon.events.PY_START, None) is other_cb


def test_id_taken_over_while_tracing_is_not_freed(trace_path):
    """Someone frees our id and takes it while we trace: at stop we must leave it (and its events and
    callbacks) alone, and leave the other holders alone too."""
    mon.use_tool_id(4, "other")
    work = make_work("toolid_takeover")
    ocular.start_tracing(output=trace_path)
    try:
        work(3)
        tid = 3
        assert mon.get_tool(tid) == "ocular"
        mon.set_events(tid, 0)
        mon.free_tool_id(tid)
        mon.use_tool_id(tid, "intruder")
        seen = []

        def intruder_cb(code, *args):  # PY_START: (code, offset); PY_RETURN: (code, offset, retval)
            if code.co_name.startswith("toolid_"):
                seen.append(code.co_name)

        for ev in ("PY_START", "PY_RETURN"):  # replace ocular's callbacks, as a new tool would
            mon.register_callback(tid, getattr(mon.events, ev), intruder_cb)
        mon.set_events(tid, mon.events.PY_START | mon.events.PY_RETURN)
    finally:
        res = ocular.stop_tracing()
    try:
        assert res.tool_id == tid
        assert not ocular.is_tracing()
        assert mon.get_tool(tid) == "intruder"
        assert mon.get_tool(4) == "other"
        assert mon.get_events(tid) == mon.events.PY_START | mon.events.PY_RETURN
        seen.clear()
        work(2)
        assert seen.count("toolid_takeover_leaf") == 4  # 2 starts + 2 returns: still delivered
    finally:  # the intruder's events fire for all code, pytest's included: switch them off now
        mon.set_events(tid, 0)
    assert mon.register_callback(tid, mon.events.PY_START, None) is intruder_cb
    # ocular's trace of the part before the takeover is intact
    data = load_trace(trace_path)
    check_balanced(data["traceEvents"])
    assert names(data["traceEvents"]).count("toolid_takeover_leaf") == 3
    # and a new session picks a free id
    mon.register_callback(tid, mon.events.PY_RETURN, None)
    ocular.start_tracing(output=trace_path)
    res2 = ocular.stop_tracing()
    assert res2.tool_id == 5
    assert holders() == expected(id3="intruder", id4="other")


def test_failed_start_releases_the_id(trace_path, tmp_path, monkeypatch):
    """A failure after the id was taken (here: registering the callbacks) gives the id back."""
    real_set_events = mon.set_events

    def boom(tool_id, events):
        if events:  # refuse to switch events on; switching them off (the cleanup) still works
            raise RuntimeError("set_events refused")
        return real_set_events(tool_id, events)

    monkeypatch.setattr(mon, "set_events", boom)
    with pytest.raises(RuntimeError, match="set_events refused"):
        ocular.start_tracing(output=trace_path)
    monkeypatch.undo()
    assert not ocular.is_tracing()
    assert holders() == expected()
    assert list(tmp_path.iterdir()) == []  # the temp file was removed
    work = make_work("toolid_after_failure")
    ocular.start_tracing(output=trace_path)
    work(2)
    res = ocular.stop_tracing()
    assert res.tool_id == 3
    assert "toolid_after_failure_leaf" in names(load_trace(trace_path)["traceEvents"])


def test_never_calls_restart_events(trace_path, monkeypatch):
    calls = []

    def forbidden(*args, **kwargs):
        calls.append(args)
        raise AssertionError("ocular must never call sys.monitoring.restart_events")

    monkeypatch.setattr(mon, "restart_events", forbidden)
    work = make_work("toolid_restart")
    for mode in ("adaptive", "precise"):
        # threshold 5 with 50 calls: the DISABLE path is taken many times
        ocular.start_tracing(output=trace_path, mode=mode, deinstrument_threshold=5, exclude=["no_match_xyz"])
        try:
            work(50)
        finally:
            res = ocular.stop_tracing()
        assert res.events > 0
        check_balanced(load_trace(trace_path)["traceEvents"])
        work = make_work(f"toolid_restart_{mode}")
    assert calls == []


@pytest.mark.parametrize("mode", ["adaptive", "precise"])
def test_registers_this_versions_events(trace_path, mode):
    """The events are looked up by name in sys.monitoring.events at run time (3.14 renumbered them):
    BRANCH_LEFT and BRANCH_RIGHT where they exist, never the deprecated BRANCH, and a callback for each."""
    E = mon.events
    want = E.PY_START | E.PY_RESUME | E.PY_THROW | E.PY_RETURN | E.PY_YIELD | E.PY_UNWIND | E.JUMP
    want |= (E.BRANCH_LEFT | E.BRANCH_RIGHT) if hasattr(E, "BRANCH_LEFT") else E.BRANCH
    if mode == "precise":
        want |= E.INSTRUCTION
    # C functions (on by default): CALL is a local event, set on each code object as it registers (C_RETURN
    # and C_RAISE come with it), here on this function, which was running at start
    ocular.start_tracing(output=trace_path, mode=mode)
    try:
        tid = ocular._current.tool_id
        got = mon.get_events(tid)
        local = mon.get_local_events(tid, sys._getframe().f_code)
        names = ("BRANCH_LEFT", "BRANCH_RIGHT") if hasattr(E, "BRANCH_LEFT") else ("BRANCH",)
        cbs = {}
        for name in names:
            cb = mon.register_callback(tid, getattr(E, name), None)  # read it back, then put it back
            mon.register_callback(tid, getattr(E, name), cb)
            cbs[name] = cb
    finally:
        ocular.stop_tracing()
    assert got == want, (bin(got), bin(want))
    assert local == E.CALL, bin(local)
    if hasattr(E, "BRANCH_LEFT"):
        assert not got & E.BRANCH
    assert all(cb is not None and "ocular callback" in repr(cb) for cb in cbs.values()), cbs
