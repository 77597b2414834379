"""Rendering while recording (issue 14): with a second CPU, a JSON or .pftrace output is rendered as the
recording grows (every thread's chunks, in the recording's order), and stop renders only the rest.  The output must be the one a
render from scratch makes; anything the early render cannot do (a recorded pause) falls back to a render
from scratch; a killed process leaves no partial output behind.  OCULAR_LIVE_RENDER=1 forces it on (also
with one CPU), =0 off, so each test compares the two on the same workload."""

import json
import os
import signal
import subprocess
import textwrap
import time

import pytest

from conftest import SRC, check_balanced, load_trace, python_cmd, run_py

# single-threaded, so that two runs with the test clock give the same timestamps; long enough (sleeps)
# for the clock's calibration (20 ms) and several recorder writes to happen while it runs
WORKLOAD = """
import time
def leaf(i):
    return i * 2
def mid(n):
    t = 0
    for i in range(n):
        t += leaf(i)
    return t
def gen():
    for i in range(3):
        yield i
def fails():
    raise ValueError("x")
def rec(n):
    return n if n < 2 else rec(n - 1) + rec(n - 2)
for k in range(40):
    mid(300)
    list(gen())
    try:
        fails()
    except ValueError:
        pass
    rec(12)
    sorted([3, 1, 2])
    time.sleep(0.004)
"""

RUN = """
import json, sys, ocular, ocular._ocular as o
o._set_test_clock(True)
ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=int(sys.argv[2]), report=False)
exec(compile(WORKLOAD, "<workload>", "exec"), {})
wait_live()
r = ocular.stop_tracing()
print(json.dumps(dict(events=r["events"], live=r["live_events"], pid=r.get("pid"))))
"""


# For the test programs (put before their dedented text): wait until the live render has rendered a chunk,
# or given up (-1), before the stop (a loaded machine may not have run it at all during the workload; the
# tests would then see no live events)
WAIT_LIVE = """
def wait_live():
    import time, ocular._ocular
    deadline = time.monotonic() + 60
    while ocular._ocular._live_progress() == 0 and time.monotonic() < deadline:
        time.sleep(0.002)
"""
RUN = WAIT_LIVE + RUN


def run(tmp_path, name, live, threshold=0, env=None):
    out = tmp_path / name
    # no sampling windows: they open at random times, so two runs would differ (and an early render gives
    # up on them: their estimates need the code states written at the end)
    e = {"OCULAR_LIVE_RENDER": "1" if live else "0", "OCULAR_SAMPLING": "0", **(env or {})}
    p = run_py("WORKLOAD = " + repr(WORKLOAD) + "\n" + RUN, str(out), str(threshold), env=e)
    return out, json.loads(p.stdout.strip().splitlines()[-1])


def normalized(path):
    """The JSON trace's events with pid and tid taken out (two runs are two processes)."""
    evs = []
    for e in load_trace(path)["traceEvents"]:
        e = dict(e)
        e.pop("pid", None)
        e.pop("tid", None)
        evs.append(e)
    return evs


@pytest.mark.parametrize("threshold", [0, 500])
def test_json_rendered_while_recording_equals_render_at_stop(tmp_path, threshold):
    live, live_info = run(tmp_path, "live.json", True, threshold)
    stop, stop_info = run(tmp_path, "stop.json", False, threshold)
    assert stop_info["live"] == 0
    assert 0 < live_info["live"] <= live_info["events"] == stop_info["events"]
    a, b = normalized(live), normalized(stop)
    assert a == b
    assert sum(1 for e in a if e.get("name") == "leaf" and e["ph"] == "B") == 40 * 300  # every call: only loops and C call sites are de-instrumented
    check_balanced(load_trace(live)["traceEvents"])
    assert sorted(os.listdir(tmp_path)) == ["live.json", "stop.json"]  # nothing temporary left


def _fields(b):
    """(field, wire type, value) of a protobuf message."""
    def varint(i):
        v = s = 0
        while True:
            c = b[i]
            i += 1
            v |= (c & 0x7F) << s
            s += 7
            if c < 0x80:
                return v, i

    i = 0
    while i < len(b):
        k, i = varint(i)
        f, t = k >> 3, k & 7
        if t == 0:
            v, i = varint(i)
        elif t == 2:
            n, i = varint(i)
            v, i = b[i:i + n], i + n
        elif t == 1:
            v, i = b[i:i + 8], i + 8
        elif t == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise AssertionError(f"wire type {t}")
        yield f, t, v


def _packets(path):
    """Every TracePacket of a .pftrace, compressed ones expanded (field 50 of a packet: zlib)."""
    import zlib

    out = []
    with open(path, "rb") as fh:
        for f, _, v in _fields(fh.read()):
            assert f == 1
            sub = [x for x in _fields(v) if x[0] == 50]
            if sub:
                out.extend(p for _, _, p in _fields(zlib.decompress(sub[0][2])))
            else:
                out.append(v)
    return out


def test_pftrace_rendered_while_recording_has_the_same_packets(tmp_path):
    live, live_info = run(tmp_path, "live.pftrace", True)
    stop, stop_info = run(tmp_path, "stop.pftrace", False)
    assert live_info["live"] > 0 and stop_info["live"] == 0
    a, b = _packets(live), _packets(stop)
    # the same packets in the same order: their fields, and the slice and instant packets (TrackEvent,
    # field 11) byte for byte but for the sequence id (field 10; the process's pid and uuids differ)
    shape = lambda ps: [tuple(f for f, _, _ in _fields(p)) for p in ps]
    assert shape(a) == shape(b)
    events = lambda ps: [bytes(b"".join(v if isinstance(v, bytes) else str(v).encode() for f, _, v in _fields(p)
                                        if f != 10)) for p in ps if any(f == 11 for f, _, _ in _fields(p))]
    ea, eb = events(a), events(b)
    assert len(ea) > 40 * 300 * 2 and ea == eb


def test_recorded_pause_falls_back_to_a_render_from_scratch(tmp_path):
    # a recorder that cannot keep up: the program waits, and the waits are recorded as pauses (slices of a
    # code id made up after the whole code table, which an early render cannot know yet)
    slow = {"OCULAR_TEST_RECORDER_DELAY_US": "3000", "OCULAR_TEST_RECORDER_QUEUE": "2"}
    live, info = run(tmp_path, "live.json", True, env=slow)
    stop, _ = run(tmp_path, "stop.json", False, env=slow)
    evs = load_trace(live)["traceEvents"]
    check_balanced(evs)
    pauses = [e for e in evs if e.get("name") == "ocular: waiting for the disk" and e["ph"] == "B"]
    assert pauses
    # everything else is the same as the render at stop (the pauses' timing depends on the recorder)
    same = lambda evs: [(e["ph"], e.get("name")) for e in evs
                        if e.get("name") != "ocular: waiting for the disk" and e["ph"] in "BE"]
    stop_evs = load_trace(stop)["traceEvents"]
    drop_pause_ends = lambda evs: _without_pause_ends(evs)
    assert same(drop_pause_ends(evs)) == same(drop_pause_ends(stop_evs))


def _without_pause_ends(evs):
    """Drop each pause slice's E (the event right after its B on the same thread)."""
    out, skip = [], set()
    for i, e in enumerate(evs):
        if i in skip:
            continue
        if e.get("name") == "ocular: waiting for the disk" and e["ph"] == "B":
            for j in range(i + 1, len(evs)):
                if evs[j].get("tid") == e.get("tid"):
                    skip.add(j)
                    break
            continue
        out.append(e)
    return out


def test_threads_are_rendered_interleaved_as_recorded(tmp_path):
    """Four threads: their chunks are rendered in the recording's order (every thread while recording,
    not only the first), and the output is the one a render from scratch of the same recording makes
    (the recording is kept under a second name, then converted)."""
    code = """
        import os, sys, threading, time, ocular
        def leaf(i):
            return i
        def work(n):
            for i in range(n):
                leaf(i)
                if i % 500 == 0:
                    time.sleep(0.001)
        ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=0, report=False)
        os.link(ocular._current.recording, sys.argv[2])
        ts = [threading.Thread(target=work, args=(20000,), name=f"w{k}") for k in range(3)]
        for t in ts:
            t.start()
        work(20000)
        for t in ts:
            t.join()
        wait_live()
        r = ocular.stop_tracing()
        ocular.convert(sys.argv[2], sys.argv[3])
        print(r["live_events"], r["events"])
    """
    out, kept, scratch = tmp_path / "t.json", tmp_path / "kept.ocular", tmp_path / "scratch.json"
    p = run_py(WAIT_LIVE + textwrap.dedent(code), str(out), str(kept), str(scratch), env={"OCULAR_LIVE_RENDER": "1", "OCULAR_SAMPLING": "0"})
    live_events, events = map(int, p.stdout.split())
    assert 0 < live_events <= events
    assert load_trace(out, raw=True)["traceEvents"] == load_trace(scratch, raw=True)["traceEvents"]
    evs = load_trace(out)["traceEvents"]
    check_balanced(evs)
    per_thread = {}
    for e in evs:
        if e.get("name") == "leaf" and e["ph"] == "B":
            per_thread[e["tid"]] = per_thread.get(e["tid"], 0) + 1
    assert sorted(per_thread.values()) == [20000] * 4
    # in the file, the threads' slices come interleaved chunk by chunk, not one thread after another
    tids = [e["tid"] for e in load_trace(out, raw=True)["traceEvents"] if e.get("ph") == "X"]
    assert sum(a != b for a, b in zip(tids, tids[1:])) > 4


def test_killed_while_rendering_as_it_records_leaves_only_the_recording(tmp_path):
    out = tmp_path / "k.json"
    mark = tmp_path / "ready"
    code = """
        import sys, time, ocular
        ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=0, report=False)
        def f(i):
            return i
        for i in range(200000):
            f(i)
        wait_live()                   # the live render has begun the output
        open(sys.argv[2], "w").close()
        time.sleep(60)
    """
    e = dict(os.environ, PYTHONPATH=SRC, OCULAR_LIVE_RENDER="1")
    proc = subprocess.Popen([*python_cmd(), "-c", WAIT_LIVE + textwrap.dedent(code), str(out), str(mark)], env=e)
    deadline = time.monotonic() + 120
    while not mark.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # the output being rendered has no name until it is complete: only the recording is left
    assert sorted(os.listdir(tmp_path)) == sorted([f"k.json.{proc.pid}.tmp", "ready"])


def test_a_bad_setting_is_refused_before_tracing(tmp_path):
    p = run_py("""
        import sys, ocular
        try:
            ocular.start_tracing(output=sys.argv[1])
        except ValueError as exc:
            print(exc)
        print(ocular.is_tracing())
    """, str(tmp_path / "t.json"), env={"OCULAR_LIVE_RENDER": "yes"})
    assert "OCULAR_LIVE_RENDER='yes' is not valid" in p.stdout and p.stdout.split()[-1] == "False"


def test_the_real_clock_renders_early_and_the_same_as_from_scratch(tmp_path):
    """With the real clock, ticks convert at an early rate (calibrated ~2 ms in) up to a knee ~20 ms in and
    at the final rate after it, so rendering can start at ~2 ms: the chunks before the knee are final
    at once, the later ones wait for the final rate.  The output rendered while recording must be
    byte for byte the render of the same recording from scratch, and its timestamps increase per
    thread across the knee and agree with the program's own clock: the leaves of each of 30 rounds lie
    between the clock reads that end the round before and begin the round after, each 2 ms of sleep away
    (no timing threshold: a sleep lasts at least what it is asked; until 2026-11-29 the leaves' span was
    checked against 90 % of the program's, which a loaded machine's late wake-ups broke)."""
    out = tmp_path / "k.json"
    p = run_py(WAIT_LIVE + textwrap.dedent("""
        import json, sys, time, ocular
        kept = []
        ocular._discard = kept.append  # keep the recording, to render it again from scratch
        def leaf(i):
            return i * 2
        ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=0, report=False, sampling=False)
        begins, ends = [], []
        t0 = time.monotonic_ns()
        for k in range(30):
            time.sleep(0.002)
            begins.append(time.monotonic_ns())
            for i in range(2000):
                leaf(i)
            ends.append(time.monotonic_ns())
        time.sleep(0.002)
        t1 = time.monotonic_ns()
        wait_live()
        r = ocular.stop_tracing()
        print(json.dumps(dict(live=r["live_events"], events=r["events"], rec=kept[0], t0=t0, t1=t1,
                              begins=begins, ends=ends)))
    """), str(out), env={"OCULAR_LIVE_RENDER": "1"})
    info = json.loads(p.stdout.strip().splitlines()[-1])
    assert info["live"] > 0, info
    again = tmp_path / "again.json"
    run_py("import ocular, sys; ocular.convert(sys.argv[1], sys.argv[2])", info["rec"], str(again))
    assert out.read_bytes() == again.read_bytes()
    trace = load_trace(out)["traceEvents"]
    check_balanced(trace)
    evs = [e for e in trace if e["ph"] in ("B", "E")]  # one thread: in the file's order
    assert sum(1 for e in evs if e["ph"] == "B" and e.get("name") == "leaf") == 30 * 2000
    ts = [e["ts"] for e in evs if e["ph"] == "B" and e.get("name") == "leaf"]
    assert [e["ts"] for e in evs] == sorted(e["ts"] for e in evs)
    # (µs in the trace, CLOCK_MONOTONIC: round k's leaves lie after the read that ended round k - 1 (t0 for
    # the first) and before the one that began round k + 1 (t1 after the last), a sleep away on each side;
    # 28 sleeps of 2 ms lie between the first round's leaves and the last's, so they cross the knee)
    after = [info["t0"]] + info["ends"][:-1]
    before = info["begins"][1:] + [info["t1"]]
    for k in range(30):
        rnd = ts[k * 2000:(k + 1) * 2000]
        assert after[k] / 1e3 < rnd[0] and rnd[-1] < before[k] / 1e3, (k, rnd[0], rnd[-1], after[k], before[k])
    assert ts[-1] - ts[0] > 28 * 2000
