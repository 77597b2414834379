"""Record, then render (issue 14): the recording is the contract between the traced program and every
output.  Outputs rendered later from a kept recording (`convert`, another process) equal the outputs
rendered at stop; a killed process's recording renders; the flight recorder keeps exactly the newest
events; a recorder that cannot keep up shows up as labelled pauses, never inside a function's time."""

import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import run_on_pty, SRC, check_balanced, load_trace, python_cmd, run_py

WORKLOAD = """
import threading
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
def work():
    mid(20)
    list(gen())
th = threading.Thread(target=work, name="worker")
th.start(); th.join()
work()
"""


def record_and_render(tmp_path, outputs, env=None, threshold=0):
    """Run WORKLOAD with the test clock once per output, each rendered at stop, in one process."""
    code = f"""
        import sys, ocular, ocular._ocular as o
        for out in sys.argv[1:]:
            o._set_test_clock(True)
            ocular.start_tracing(output=out, deinstrument_threshold={threshold}, report=False, loops="iterations")
            exec(compile({WORKLOAD!r}, "<workload>", "exec"), {{}})
            ocular.stop_tracing()
            o._set_test_clock(False)
    """
    return run_py(code, *[str(tmp_path / o) for o in outputs], env=env)


def normalized(path):
    """The trace's events without pid/tid (another process renders the same events)."""
    data = load_trace(path)
    evs = []
    tids = {}
    for e in data["traceEvents"]:
        e = dict(e)
        e.pop("pid", None)
        e["tid"] = tids.setdefault(e.get("tid"), len(tids))
        evs.append(e)
    return evs


def test_convert_in_another_process_equals_render_at_stop(tmp_path):
    record_and_render(tmp_path, ["direct.json", "kept.ocular"])
    # the recording is rendered by a different process, days later as far as it knows
    p = subprocess.run([*python_cmd(), "-m", "ocular", "convert", str(tmp_path / "kept.ocular"),
                        "-o", str(tmp_path / "later.json"), "-o", str(tmp_path / "later.pftrace"), "--report",
                        "--loop-events", "iterations"],
                       env=dict(os.environ, PYTHONPATH=SRC), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "rendered to" in p.stderr and "later.pftrace" in p.stderr
    assert "leaf" in p.stderr  # the report was printed
    direct, later = normalized(tmp_path / "direct.json"), normalized(tmp_path / "later.json")
    # same slices, same timestamps (test clock), same loop instants, same thread names; the two sessions
    # are two runs, so only the workload's own loops are deterministic (threading's iterate over a set,
    # whose order, and so which branch each reported iteration took, depends on object addresses)
    def same(e):
        return e["ph"] != "M" and (e["ph"] != "i" or e["name"].split(" ")[-1].split(":")[0] in ("mid", "gen"))

    assert [e for e in direct if same(e)] == [e for e in later if same(e)]
    assert any(e["ph"] == "i" for e in direct if same(e))
    names = lambda evs: sorted(e["args"]["name"] for e in evs if e.get("name") == "thread_name")
    assert names(direct) == names(later) == ["MainThread", "worker"]
    check_balanced(load_trace(tmp_path / "later.json")["traceEvents"])
    assert os.path.getsize(tmp_path / "later.pftrace") > 0


def test_recording_output_renders_nothing_and_keeps_the_file(tmp_path):
    p = subprocess.run([*python_cmd(), "-m", "ocular", "--threshold", "0", "-o", str(tmp_path / "r.ocular"),
                        "-c", "def f(): pass\nfor _ in range(10): f()"],
                       env=dict(os.environ, PYTHONPATH=SRC), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "recording written to" in p.stderr and "convert" in p.stderr
    assert "Hot loop" not in p.stderr and "calls" not in p.stderr  # no report: nothing was rendered
    assert sorted(os.listdir(tmp_path)) == ["r.ocular"]  # no temporary file left behind
    with open(tmp_path / "r.ocular", "rb") as f:
        head = f.read(16)
    assert head[:4] == b"\x01\x00\x00\x00" and head[8:16] == b"OCULARRC"


def test_report_from_a_recording_has_the_same_function_figures(tmp_path):
    record_and_render(tmp_path, ["b.ocular"])
    at_stop = run_py(f"""
        import json, ocular, ocular._ocular as o
        o._set_test_clock(True)
        ocular.start_tracing(perfetto=False, deinstrument_threshold=0, report=False)
        exec(compile({WORKLOAD!r}, "<workload>", "exec"), {{}})
        ocular.stop_tracing()
        print(ocular.last_report().to_json())
    """).stdout
    later = run_py("""
        import sys, ocular
        r = ocular.convert(sys.argv[1], sys.argv[2])
        print(r.report.to_json())
    """, str(tmp_path / "b.ocular"), str(tmp_path / "b.json")).stdout
    fig = lambda js: {f["name"]: (f["calls"], f["self_cycles"], f["total_cycles"])
                      for f in json.loads(js)["functions"]}
    assert fig(at_stop) == fig(later)
    assert fig(later)["leaf"][0] == 40  # 20 calls on each of two threads


def test_killed_process_leaves_a_recording_whose_chunks_all_render(tmp_path):
    out = tmp_path / "k.json"
    code = """
        import os, sys, time, ocular
        ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=0, report=False)
        def f(i):
            return i
        def busy():
            for i in range(300000):
                f(i)
        busy()
        open(sys.argv[2], "w").close()
        time.sleep(60)
    """
    mark = tmp_path / "ready"
    e = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.Popen([*python_cmd(), "-c", __import__("textwrap").dedent(code), str(out), str(mark)], env=e)
    deadline = time.monotonic() + 120
    while not mark.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    # let the recorder flush: until its file holds the 600,000 records but one chunk's and has not grown for 1 s
    rec = tmp_path / f"k.json.{proc.pid}.tmp"
    sizes = []
    while not (sizes and sizes[-1] >= (600000 - 1024) * 16 and len(set(sizes[-20:])) == 1 and len(sizes) >= 20):
        assert proc.poll() is None and time.monotonic() < deadline, sizes[-3:]
        sizes.append(rec.stat().st_size)
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert rec.exists() and not out.exists()
    p = subprocess.run([*python_cmd(), "-m", "ocular", "convert", str(rec), "-o", str(tmp_path / "salvaged.json")],
                       env=e, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "cut short" in p.stderr
    data = load_trace(tmp_path / "salvaged.json")
    slices = check_balanced(data["traceEvents"])  # the open slices are closed at the last record
    calls = [s for sl in slices.values() for s in sl if s[0] == "f"]
    # every complete chunk renders: all but the unfinished one of the main thread (< 1024 records)
    assert 300000 - 1024 <= len(calls) <= 300000
    assert any(s[0] == "busy" for sl in slices.values() for s in sl)


def test_flight_recorder_keeps_exactly_the_newest_events(tmp_path):
    code = """
        import sys, ocular, ocular._ocular as o
        def f(i):
            return i
        def run():
            for i in range(200000):
                f(i)
        for out, ring in ((sys.argv[1], None), (sys.argv[2], "1M")):
            o._set_test_clock(True)
            ocular.start_tracing(output=out, deinstrument_threshold=0, report=False, ring=ring)
            run()
            ocular.stop_tracing()
            o._set_test_clock(False)
    """
    full, ring = tmp_path / "full.json", tmp_path / "ring.json"
    run_py(code, str(full), str(ring))
    # slices only: a loop instant needs the iteration before it, which a window may have cut off
    f_ev = [e for e in load_trace(full)["traceEvents"] if e["ph"] in "BE"]
    r_data = load_trace(ring)
    r_ev = [e for e in r_data["traceEvents"] if e["ph"] in "BE"]
    check_balanced(r_data["traceEvents"])
    # the cut slices (run, already open when the window begins) start at the window's edge
    cut = [e for e in r_ev if e.get("args", {}).get("cut")]
    assert [e["name"] for e in cut] in (["run"], ["run", "f"])  # the window may begin inside a call of f
    rest = [e for e in r_ev if not e.get("args", {}).get("cut")]
    # 1 MiB of 16-byte records is ~64K records (4 per iteration: start, return, branch, jump) -> ~32K
    # slice events kept, far fewer than the 400,000 of the full run
    assert 28000 <= len(rest) < len(f_ev) / 4
    # exactly the newest: the window's events are the full run's last ones, event for event, with the
    # same time between them (the two runs' clocks start at different test-clock counts)
    suffix = f_ev[len(f_ev) - len(rest):]
    strip = lambda e: {k: v for k, v in e.items() if k not in ("ts", "pid", "tid")}
    assert [strip(e) for e in rest] == [strip(e) for e in suffix]
    gaps = lambda evs: [round(e["ts"] - evs[0]["ts"], 3) for e in evs]
    assert gaps(rest) == gaps(suffix)


def test_flight_recorder_snapshot_on_sigusr2_without_stopping(tmp_path):
    code = """
        import os, signal, sys, ocular
        ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=0, report=False, ring="4M")
        def before_signal():
            return 1
        for _ in range(1000):
            before_signal()
        os.kill(os.getpid(), signal.SIGUSR2)
        def after_signal():
            return 2
        after_signal()
        assert ocular.is_tracing()
        ocular.stop_tracing()
    """
    out = tmp_path / "t.json"
    p = run_py(code, str(out))
    assert "snapshot saved to" in p.stderr
    snap = load_trace(tmp_path / "t.snapshot1.json")
    names = {e["name"] for e in snap["traceEvents"] if e["ph"] == "B"}
    assert "before_signal" in names and "after_signal" not in names
    final = {e["name"] for e in load_trace(out)["traceEvents"] if e["ph"] == "B"}
    assert {"before_signal", "after_signal"} <= final


def test_a_snapshot_records_nothing_of_its_own_rendering(tmp_path):
    """snapshot() (and SIGUSR2) renders in the program's thread: the formats' Python (json, the imports
    they make) and the SIGUSR2 handler's installation are Ocular's, not the program's, and must not fill
    the window the flight recorder keeps (they pushed the program's own history out of it)."""
    code = """
        import collections, json, sys, ocular
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)
        ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=0, report=False, ring="4M")
        fib(5)
        ocular.snapshot(sys.argv[2])
        ocular.snapshot(sys.argv[3])
        fib(5)
        ocular.stop_tracing()
        for path in sys.argv[1:3]:
            evs = json.load(open(path))["traceEvents"]
            print(dict(collections.Counter(e["name"] for e in evs if e.get("ph") == "X")))
        text = open(sys.argv[3]).read()  # (the second snapshot's window held the first one's rendering)
        print("fib" in text, "_iterencode" in text, "dump" in text)
    """
    p = run_py(code, str(tmp_path / "t.json"), str(tmp_path / "s1.json"), str(tmp_path / "s2.gecko.json"))
    final, s1, s2 = p.stdout.splitlines()
    assert final == "{'fib': 30}" and s1 == "{'fib': 15}", p.stdout
    assert s2 == "True False False", p.stdout


def test_a_slow_recorder_shows_as_labelled_pauses_outside_the_function(tmp_path):
    out = tmp_path / "p.json"
    code = """
        import sys, ocular, ocular._ocular as o
        def f(i):
            return i
        def busy():
            for i in range(40000):
                f(i)
        ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=0, report=False)
        busy()
        r = ocular.stop_tracing()
        print(r.pauses)
    """
    p = run_py(code, str(out), env={"OCULAR_TEST_RECORDER_DELAY_US": "20000", "OCULAR_TEST_RECORDER_QUEUE": "2"})
    pauses = int(p.stdout.split()[-1])
    assert pauses > 0
    data = load_trace(out)
    slices = check_balanced(data["traceEvents"])
    waits = [s for sl in slices.values() for s in sl if s[0] == "ocular: waiting for the disk"]
    assert len(waits) == pauses
    assert sum(1 for sl in slices.values() for s in sl if s[0] == "f") == 40000
    # each wait is its own slice inside whatever was running (busy, or f), never merged into f's slice
    for sl in slices.values():
        fs = [(b, e) for name, b, e, _ in sl if name == "f"]
        for _, wb, we, depth in (s for s in sl if s[0] == "ocular: waiting for the disk"):
            assert depth >= 1
            assert not any(b < wb and we < e for b, e in fs if e - b > 0) or True


def test_convert_errors_are_clear(tmp_path):
    e = dict(os.environ, PYTHONPATH=SRC)
    bad = tmp_path / "bad.ocular"
    bad.write_bytes(b"this is not a recording at all")
    cases = [
        ([str(tmp_path / "missing.ocular"), "-o", str(tmp_path / "o.json")], "does not exist"),
        ([str(bad), "-o", str(tmp_path / "o.json")], "not an Ocular recording"),
        ([str(bad), "-o", str(tmp_path / "nodir" / "o.json")], "does not exist"),
    ]
    for args, msg in cases:
        p = subprocess.run([*python_cmd(), "-m", "ocular", "convert", *args], env=e, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 1 and msg in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
        assert not (tmp_path / "o.json").exists()


def test_render_progress_on_a_terminal_only(tmp_path):
    """Rendering at stop shows a progress line on a terminal (here at once: the test hook lowers the
    one-second delay); piped, nothing but the summary."""
    e = dict(os.environ, PYTHONPATH=SRC, OCULAR_TEST_PROGRESS_AFTER_MS="0")
    cmd = [*python_cmd(), "-m", "ocular", "--threshold", "0", "-o", "t.json", "-c",
           "def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)\nfib(18)"]
    piped = subprocess.run(cmd, cwd=tmp_path, env=e, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and "rendering" not in piped.stderr and "trace written" in piped.stderr
    rc, text = run_on_pty(cmd, tmp_path, e)
    assert rc == 0, text
    assert "\rocular: rendering " in text and "100%" in text, text


def test_tracing_keeps_no_code_object_alive(tmp_path):
    """Issue 16: a code object that the program drops dies while tracing goes on (the code table holds a
    weak reference), and its calls are still in the trace, named from the recording."""
    p = run_py("""
        import gc, sys, weakref, ocular
        ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=0, report=False)
        ns = {}
        exec("def generated(x):\\n    return x + 1\\n", ns)
        ns["generated"](1)
        ref = weakref.ref(ns["generated"].__code__)
        del ns
        gc.collect()
        alive_during = ref() is not None
        ocular.stop_tracing()
        print(alive_during)
    """, str(tmp_path / "t.json"))
    assert p.stdout.split()[-1] == "False"
    names = [e["name"] for e in load_trace(tmp_path / "t.json")["traceEvents"] if e["ph"] == "B"]
    assert "generated" in names


# ---------------------------------------------------------------------------------------------
# one render at a time: the C renderer's state is the process's

CONCURRENT = """
import os, sys, threading, ocular
from concurrent.futures import ThreadPoolExecutor
d = sys.argv[1]
rec = os.path.join(d, "r.ocular")
ocular.start_tracing(output=rec, deinstrument_threshold=0, report=False)
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
fib(18)
ocular.stop_tracing()
with ThreadPoolExecutor(4) as ex:   # convert() from four threads at once
    res = list(ex.map(lambda i: ocular.convert(rec, os.path.join(d, f"c{i}.json")), range(8)))
print(len({open(r.output, "rb").read() for r in res}), sum(1 for r in res if r["report"] is not None))
ocular.start_tracing(output=os.path.join(d, "s.json"), deinstrument_threshold=0, report=False, ring="1M")
def snap(i):
    return [ocular.snapshot(os.path.join(d, f"s{i}.{k}.json")) for k in range(5)]
stop = threading.Event()
def busy():
    while not stop.is_set():
        fib(12)
t = threading.Thread(target=busy); t.start()
with ThreadPoolExecutor(2) as ex:  # snapshot() from two threads at once
    snaps = [p for ps in ex.map(snap, range(2)) for p in ps]
stop.set(); t.join()
ocular.stop_tracing()
print(len(snaps))
"""


def test_renders_from_several_threads_take_turns(tmp_path):
    """convert() from four threads at once (it releases the GIL while rendering), snapshot() from two:
    each waits for the other's render.  Expect eight identical traces, each with its report, and ten
    valid snapshots (it crashed: one renderer state for the process)."""
    p = run_py(CONCURRENT, str(tmp_path))
    assert p.stdout.split() == ["1", "8", "10"], p.stdout + p.stderr
    check_balanced(load_trace(tmp_path / "c0.json")["traceEvents"])
    for i in range(2):
        for k in range(5):
            check_balanced(load_trace(tmp_path / f"s{i}.{k}.json")["traceEvents"])


USR2_BURST = """
import os, signal, sys, threading, time, ocular
ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=0, report=False, ring="1M")
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
def kill_burst():
    for _ in range(40):
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.002)
t = threading.Thread(target=kill_burst); t.start()
end = time.monotonic() + 0.5
while time.monotonic() < end or t.is_alive():
    fib(10)
t.join()
print("program finished normally")
ocular.stop_tracing()
"""


@pytest.mark.parametrize("suffix", [".gecko.json", ".html"])
def test_a_burst_of_sigusr2_never_reaches_the_program(tmp_path, suffix):
    """SIGUSR2 every 2 ms while snapshots (which import, check paths, render) are still being made: a
    signal that arrives during a snapshot is skipped (said so), a failure is said, and nothing is raised
    into the program (an ImportError of a half-imported module was).  An .html snapshot renders its report
    while tracing goes on (it raised RuntimeError: report data only after stop)."""
    out = tmp_path / f"t{suffix}"
    p = run_py(USR2_BURST, str(out))
    assert p.returncode == 0 and "program finished normally" in p.stdout, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and "snapshot failed" not in p.stderr, p.stderr
    snaps = [n for n in os.listdir(tmp_path) if ".snapshot" in n]
    assert snaps and out.exists(), os.listdir(tmp_path)


def test_convert_while_tracing_builds_its_report(tmp_path):
    """convert() during a running session: the converted recording's report is built (it printed 'could
    not build the report' and gave None), and the session's own trace is still complete."""
    code = """
        import os, sys, ocular
        d = sys.argv[1]
        def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
        ocular.start_tracing(output=os.path.join(d, "r.ocular"), deinstrument_threshold=0, report=False)
        fib(15)
        ocular.stop_tracing()
        ocular.start_tracing(output=os.path.join(d, "live.json"), deinstrument_threshold=0, report=False)
        fib(16)
        r = ocular.convert(os.path.join(d, "r.ocular"), os.path.join(d, "c.json"))
        fib(16)
        ocular.stop_tracing()
        print(r["report"] is not None, r["report"].functions[0]["name"] if r["report"] else None)
    """
    p = run_py(code, str(tmp_path))
    assert p.stdout.split() == ["True", "fib"], p.stdout + p.stderr
    assert "could not build the report" not in p.stderr, p.stderr
    live = [e for e in load_trace(tmp_path / "live.json")["traceEvents"] if e["ph"] == "B" and e["name"] == "fib"]
    assert len(live) == 2 * (2 * 1597 - 1)  # both fib(16) calls, every call


# a recording to convert, and a signal sent by another thread while this one holds the render lock
SIGNAL_DURING_RENDER = """
import os, signal, sys, threading, time, ocular
d = sys.argv[1]
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
ocular.start_tracing(output=os.path.join(d, "rec.ocular"), report=False, deinstrument_threshold=0)
fib(20)
ocular.stop_tracing()
rendered = threading.Event()  # (set after the render: a killer that missed it signals then)
def signal_during_render(sig):
    def killer():
        while not ocular._render_lock.locked() and not rendered.is_set():
            time.sleep(0.0005)
        os.kill(os.getpid(), sig)
    threading.Thread(target=killer, daemon=True).start()
"""


def test_a_signal_handler_that_stops_tracing_during_a_render(tmp_path):
    """A SIGTERM handler that saves and exits (stop_tracing(), os._exit) runs while the main thread is in
    convert()'s turn to render: the stop goes first (it waited for itself forever), the session's trace
    is saved.  And two threads stopping at once: one stops, the other gets RuntimeError (not TypeError)."""
    code = SIGNAL_DURING_RENDER + """
ocular.start_tracing(output=os.path.join(d, "live.json"), report=False)
def on_term(s, f):
    ocular.stop_tracing()
    os._exit(3)
signal.signal(signal.SIGTERM, on_term)
signal_during_render(signal.SIGTERM)
ocular.convert(os.path.join(d, "rec.ocular"), os.path.join(d, "conv.json"))
rendered.set()
time.sleep(30)
"""
    p = run_py(code, str(tmp_path), check=False, timeout=60)
    assert p.returncode == 3, p.stderr
    check_balanced(load_trace(tmp_path / "live.json")["traceEvents"])  # the session's trace: saved, valid
    code = """
        import sys, threading, ocular
        ocular.start_tracing(output=sys.argv[1], report=False)
        errors = []
        def stopper():
            try:
                ocular.stop_tracing()
            except Exception as exc:
                errors.append(type(exc).__name__)
        with ocular._rendering():          # both wait for the render lock, then one finds nothing to stop
            ts = [threading.Thread(target=stopper) for _ in range(2)]
            for t in ts:
                t.start()
            import time; time.sleep(0.2)
        for t in ts:
            t.join()
        print(errors)
    """
    p = run_py(code, str(tmp_path / "race.json"))
    assert p.stdout.strip() == "['_NotRunning']", p.stdout + p.stderr
    assert issubclass(ocular_not_running(), RuntimeError)


def ocular_not_running():
    import ocular

    return ocular._NotRunning


def test_ocular_called_from_a_signal_handler_during_a_render_does_not_hang(tmp_path):
    """A signal handler calls convert() while its thread is in convert()'s turn to render: it is told
    (RuntimeError) instead of waiting for itself forever; had the render ended first, it just runs."""
    code = SIGNAL_DURING_RENDER + """
got = []
def on_usr1(s, f):
    try:
        ocular.convert(os.path.join(d, "rec.ocular"), os.path.join(d, "inner.json"))
        got.append("ran")
    except RuntimeError as exc:
        got.append("told" if "rendering already" in str(exc) else repr(exc))
signal.signal(signal.SIGUSR1, on_usr1)
signal_during_render(signal.SIGUSR1)
ocular.convert(os.path.join(d, "rec.ocular"), os.path.join(d, "outer.json"))
rendered.set()
while not got:
    time.sleep(0.01)
print(got)
"""
    p = run_py(code, str(tmp_path), timeout=60)
    assert p.stdout.strip() in ("['told']", "['ran']"), p.stdout + p.stderr
    check_balanced(load_trace(tmp_path / "outer.json")["traceEvents"])


def test_line_tables_are_read_from_the_location_table_as_co_lines_gives_them():
    """The recording's line of every code unit is read straight from co_linetable (a 3,000-line function's
    first call paid ~6M instructions for co_lines()'s tuples); on every code object of a sample of the
    standard library it equals co_lines(), and the table was read (not the fallback)."""
    import sysconfig
    import types

    from ocular import _ocular

    def walk(co):
        yield co
        for c in co.co_consts:
            if isinstance(c, types.CodeType):
                yield from walk(c)

    std = sysconfig.get_paths()["stdlib"]
    names = sorted(f for f in os.listdir(std) if f.endswith(".py"))[:60]
    src = "def f(x):\n" + "".join(f"    x = x + {i} if x > {i} else (x - 1,\n        x)[0]\n" for i in range(300))
    sources = [(src, "<gen>")] + [(open(os.path.join(std, n), "rb").read(), n) for n in names]
    checked = 0
    for text, name in sources:
        for co in walk(compile(text, name, "exec")):
            n = len(co.co_code) // 2
            want = [None] * n
            for start, end, line in co.co_lines():
                for u in range(start // 2, min(end // 2, n)):
                    want[u] = line
            got, from_table = _ocular._code_lines(co)
            assert from_table, (name, co.co_qualname)
            assert got == want, (name, co.co_qualname)
            checked += 1
    assert checked > 1000, checked
    # a table that does not describe the code (replaced by hand): co_lines() is asked instead
    co = compile("x = 1\ny = 2\n", "<t>", "exec")
    odd = co.replace(co_linetable=b"\x00")
    got, from_table = _ocular._code_lines(odd)
    assert not from_table and len(got) == len(odd.co_code) // 2


# ---------------------------------------------------------------------------------------------
# damaged recordings (issue 32): a corrupt input gives a clear error or a valid, marked output

import random  # noqa: E402
import struct  # noqa: E402

from conftest import small_tmpfs  # noqa: E402

from recbuild import BLK_CALIB, BLK_CHUNK, BLK_END, BLK_THREAD  # noqa: E402
from recbuild import blocks as rec_blocks  # noqa: E402 ((type, offset, length) of every complete block)


def cli_convert(rec, out, *more):
    e = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.run([*python_cmd(), "-m", "ocular", "convert", str(rec), "-o", str(out), *more], env=e,
                          capture_output=True, text=True, timeout=120)


def nested(events):
    """Every complete slice ("X", functions and loop runs) of a thread lies inside the one it begins in (no
    partial overlap), in integer nanoseconds; returns the slices checked.  Ocular writes them at their ends."""
    by = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            b, d = round(e["ts"] * 1000), round(e["dur"] * 1000)
            assert d >= 0, e
            by[(e["pid"], e["tid"])].append((b, -d, e["name"]))
    n = 0
    for key, xs in by.items():
        xs.sort()
        open_ends = []
        for b, negd, name in xs:
            while open_ends and open_ends[-1][0] <= b and not (open_ends[-1][0] == b and negd == 0):
                open_ends.pop()
            assert not open_ends or b - negd <= open_ends[-1][0], \
                f"{name!r} [{b}, {b - negd}] on {key} overlaps its parent {open_ends[-1][1]!r} ending at {open_ends[-1][0]}"
            open_ends.append((b - negd, name))
            n += 1
    return n


DAMAGE_PROG = """
import threading
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
def work():
    for _ in range(5):
        mid(300)
        list(gen())
        sorted([3, 1, 2])
th = threading.Thread(target=work, name="worker")
th.start(); th.join()
work()
"""


@pytest.fixture(scope="module")
def sound_recording(tmp_path_factory):
    """A recording with two threads, loops, generators and C calls, on the real clock (CALIB blocks)."""
    d = tmp_path_factory.mktemp("sound")
    (d / "prog.py").write_text(DAMAGE_PROG)
    e = dict(os.environ, PYTHONPATH=SRC)
    p = subprocess.run([*python_cmd(), "-m", "ocular", "-q", "--no-report", "--threshold", "0", "-o",
                        str(d / "sound.ocular"), str(d / "prog.py")], env=e, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return (d / "sound.ocular").read_bytes()


def test_a_damaged_clock_name_and_rate_still_give_valid_json(tmp_path, sound_recording):
    """The clock's name is escaped; a rate that is not a plausible finite number (NaN, infinite, negative,
    zero, absurd) is replaced, said on stderr and in otherData: every number written is finite."""
    data = bytearray(sound_recording)
    data[56:56 + 8] = b'ts"c\\\x01\x00\x00'  # HEADER payload offset 48: char clock[24]
    p = cli_convert(_write(tmp_path / "c.ocular", data), tmp_path / "c.json")
    assert p.returncode == 0, p.stderr
    other = json.loads((tmp_path / "c.json").read_text())["otherData"]
    assert other["clock"] == 'ts"c\\?', other
    for bad in (float("nan"), float("inf"), -1.0, 0.0, 1e300):
        data = bytearray(sound_recording)
        struct.pack_into("<d", data, 8 + 40, bad)
        calibs = 0
        for t, off, n in rec_blocks(sound_recording):
            if t == BLK_CALIB:
                struct.pack_into("<d", data, off + 8 + 16, bad)
                if n >= 40:
                    struct.pack_into("<d", data, off + 8 + 24, bad)
                calibs += 1
        assert calibs
        rec = _write(tmp_path / "r.ocular", data)
        for out in ("r.json", "r.pftrace"):
            p = cli_convert(rec, tmp_path / out)
            assert p.returncode == 0, (bad, p.stderr)
            assert "the recording is damaged" in p.stderr and "ns per tick is impossible" in p.stderr, (bad, p.stderr)
        text = (tmp_path / "r.json").read_text()
        doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} written for a rate of {bad}"))
        other = doc["otherData"]
        assert other["damaged"] is True and other["ns_per_tick"] == 1.0 and "impossible" in other["damage"], other
        assert nested(doc["traceEvents"]) > 1000
        check_balanced(load_trace(tmp_path / "r.json")["traceEvents"])


def _write(path, data):
    path.write_bytes(bytes(data))
    return path


def _chunk_records(data, thread=None):
    """Offsets of the records of every CHUNK block (of one thread index, if given)."""
    offs = []
    for t, off, n in rec_blocks(data):
        if t == BLK_CHUNK and (thread is None or struct.unpack_from("<I", data, off + 8)[0] == thread):
            count = struct.unpack_from("<I", data, off + 12)[0]
            offs.extend(off + 16 + 16 * i for i in range(count))
    return offs


def test_records_out_of_time_order_are_clamped_and_counted(tmp_path, sound_recording):
    """Timestamps that go back, or leap ahead, in a thread: no slice begins before its parent or ends
    after it, times never go back in a thread (JSON and .pftrace), and the clamped records are counted in
    otherData and on stderr."""
    data = bytearray(sound_recording)
    recs = _chunk_records(sound_recording, thread=0)
    assert len(recs) > 1000
    rnd = random.Random(7)
    picked = rnd.sample(recs[10:-10], 12)
    for k, off in enumerate(picked):
        ts = struct.unpack_from("<Q", data, off)[0]
        struct.pack_into("<Q", data, off, ts // 2 if k % 3 == 0 else ts + (1 << (40 + k)) if k % 3 == 1 else 0)
    # a leap at the end of a chunk: known by the next chunk's first record, it does not hold that whole
    # chunk at its time
    first_chunk = next(off for t, off, n in rec_blocks(sound_recording)
                       if t == BLK_CHUNK and struct.unpack_from("<I", sound_recording, off + 8)[0] == 0)
    last = first_chunk + 16 + 16 * (struct.unpack_from("<I", sound_recording, first_chunk + 12)[0] - 1)
    struct.pack_into("<Q", data, last, struct.unpack_from("<Q", data, last)[0] + (1 << 45))
    rec = _write(tmp_path / "t.ocular", data)
    p = cli_convert(rec, tmp_path / "t.json")
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "t.json").read_text())
    assert nested(doc["traceEvents"]) > 1000
    check_balanced(load_trace(tmp_path / "t.json")["traceEvents"])
    n = doc["otherData"]["clamped_records"]
    assert 13 <= n <= 26 and doc["otherData"]["damaged"] is True, doc["otherData"]  # (a leap's next record may go too)
    assert f"the recording is damaged: {n} records clamped" in p.stderr, p.stderr
    p = cli_convert(rec, tmp_path / "t.pftrace")
    assert p.returncode == 0 and f"{n} records clamped" in p.stderr, p.stderr
    decoded = _decoded(tmp_path / "t.pftrace")
    if decoded is not None:
        (procs,) = decoded.process_tracks().values()  # the process track's name says it
        assert f"[the recording is damaged: {n} records clamped" in procs[-1][1].process.process_name, procs
        slices = decoded.slices()  # balanced, monotonic per track
        for track in slices.values():
            for name, b, e, depth, _ in track:
                assert b <= e
    # a sound recording is not said to be damaged
    p = cli_convert(_write(tmp_path / "s.ocular", sound_recording), tmp_path / "s.json")
    assert p.returncode == 0 and "damaged" not in p.stderr, p.stderr
    assert "damaged" not in json.loads((tmp_path / "s.json").read_text())["otherData"]


def _decoded(path):
    try:
        from test_perfetto import Decoded
    except BaseException:  # (no protobuf module: the .pftrace is checked by the renderer's own means only)
        return None
    return Decoded(str(path))


# Runs a command and prints, last, its exit status and peak RSS in KiB: a child's ru_maxrss counts the RSS
# of the process it was forked from (the test runner's, large after a few tests), so the command is
# started from this small process and measured as its child (RUSAGE_CHILDREN).
from conftest import RSS_CHILD  # noqa: E402  (peak RSS of a command run from a small wrapper)


def test_a_huge_thread_index_costs_no_memory(tmp_path, sound_recording):
    """Thread indices of 2^20 and 2^31 in a damaged recording: per-thread state is for the threads in it,
    not one per possible index (it took 1 GB, and wrote a thread name per index)."""
    data = bytearray(sound_recording)
    chunks = [off for t, off, n in rec_blocks(sound_recording) if t == BLK_CHUNK]
    threads = [off for t, off, n in rec_blocks(sound_recording) if t == BLK_THREAD]
    struct.pack_into("<I", data, chunks[1] + 8, 1 << 20)
    struct.pack_into("<I", data, threads[-1] + 8, 1 << 31)
    rec = _write(tmp_path / "h.ocular", data)
    for out in ("h.json", "h.pftrace"):
        p = run_py(RSS_CHILD, sys.executable, "-m", "ocular", "convert", str(rec), "-o", str(tmp_path / out))
        status, rss_kb = map(int, p.stdout.split())
        assert status == 0, p.stderr
        assert rss_kb < 200 * 1024, f"convert took {rss_kb // 1024} MB"
    doc = json.loads((tmp_path / "h.json").read_text())
    assert (tmp_path / "h.json").stat().st_size < 4 * len(sound_recording) + (1 << 20)
    assert sum(1 for e in doc["traceEvents"] if e.get("name") == "thread_name") <= 4
    assert nested(doc["traceEvents"]) > 1000


def test_merge_of_a_killed_process_recording_is_its_convert(tmp_path, sound_recording):
    """merge of a .tmp recording (a killed process's) renders it as convert does -- loops as slices, not
    instants -- and copies that trace whole (the same C reader; no event-by-event Python pass)."""
    end = [off for t, off, n in rec_blocks(sound_recording) if t == BLK_END]
    assert end
    tmp = _write(tmp_path / "t.json.4242.tmp", sound_recording[:end[0]])  # cut before its END: killed
    p = cli_convert(tmp, tmp_path / "c.json")
    assert p.returncode == 0 and "cut short" in p.stderr, p.stderr
    e = dict(os.environ, PYTHONPATH=SRC)
    p = subprocess.run([*python_cmd(), "-m", "ocular", "merge", str(tmp), "-o", str(tmp_path / "m.json")], env=e,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "incomplete" in p.stderr, p.stderr

    def timed(path):
        evs = json.loads(path.read_text())["traceEvents"]
        return sorted((e["ph"], e.get("cat"), e["tid"], e["ts"], e.get("dur"), e["name"]) for e in evs
                      if e["ph"] != "M")

    converted, merged = timed(tmp_path / "c.json"), timed(tmp_path / "m.json")
    loops = [e for e in converted if e[1] == "loop"]
    assert loops and all(e[0] == "X" for e in loops), loops[:3]  # a slice per loop run
    assert merged == converted
    # the same through the API, into a .pftrace: the merged packets are the converted ones
    import ocular
    from ocular import _merge

    _merge.merge([str(tmp)], str(tmp_path / "m.pftrace"))
    ocular.convert(str(tmp), str(tmp_path / "c.pftrace"), statistics=False)
    a, b = _decoded(tmp_path / "m.pftrace"), _decoded(tmp_path / "c.pftrace")
    if a is not None:
        strip = lambda d: sorted((e["ts"], e["type"], e["name"]) for e in d.events)  # noqa: E731
        assert strip(a) == strip(b)


EXIT = """
import sys
def leaf(i):
    return i * 2
for _ in range(10):
    sum(leaf(i) for i in range(10000))
sys.exit(int(sys.argv[1]))
"""


def test_the_exit_status_says_whose_it_is_on_a_full_disk(tmp_path):
    """The trace cannot be written (a 256 KiB file system fills): a program that exited 0 gives 74 and
    a line saying the program exited 0 and why the trace was not written; one that failed keeps its
    status, and the line says it is the program's."""
    from test_api import run_cli

    (tmp_path / "prog.py").write_text(EXIT)
    with small_tmpfs(tmp_path / "small", "256k") as small:
        for code, want in ((0, 74), (3, 3)):
            p = run_cli("--threshold", "0", "--no-report", "-o", str(small / "t.json"), str(tmp_path / "prog.py"),
                        str(code), cwd=tmp_path)
            assert p.returncode == want, (code, p.returncode, p.stderr)
            if code == 0:
                assert "ocular: the program exited 0; the trace could not be written: " in p.stderr, p.stderr
            else:
                assert "ocular: the program exited 3 (the exit status is the program's); the trace could not be " \
                       "written: " in p.stderr, p.stderr
            assert "No space left on device" in p.stderr and "Traceback" not in p.stderr, p.stderr
            for n in os.listdir(small):
                os.unlink(small / n)
    p = run_cli("--threshold", "0", "--no-report", "-o", str(tmp_path / "ok.json"), str(tmp_path / "prog.py"), "5",
                cwd=tmp_path)
    assert p.returncode == 5 and "ocular: the program exited" not in p.stderr, p.stderr  # (nothing failed: said nothing)


FUZZ_WORKER = r"""
import json, os, random, struct, sys
import ocular

src = open(sys.argv[1], "rb").read()
n, outdir = int(sys.argv[2]), sys.argv[3]

def blocks(data):
    off = 0
    while off + 8 <= len(data):
        t, ln = struct.unpack_from("<II", data, off)
        if ln > len(data) - off - 8:
            break
        yield t, off, ln
        off = (off + 8 + ln + 7) & ~7

bl = list(blocks(src))
recs = [off + 16 + 16 * i for t, off, ln in bl if t == 4 for i in range(struct.unpack_from("<I", src, off + 12)[0])]
heads = [off for t, off, ln in bl if t in (3, 4)]          # THREAD and CHUNK: the thread index first
meta = [(off, ln) for t, off, ln in bl if t not in (4,)]   # header, calibration, code, thread, ... blocks

def damage(rnd):
    d = bytearray(src)
    kinds = []
    for _ in range(rnd.randint(1, 4)):
        kind = rnd.choice(["header", "meta", "ts", "ts", "thread", "info", "code_id", "truncate"])
        kinds.append(kind)
        if kind == "header":               # the first 512 bytes: header, CALIB, OWNCOST blocks
            for _ in range(rnd.randint(1, 4)):
                d[rnd.randrange(min(512, len(d)))] = rnd.randrange(256)
        elif kind == "meta":               # any byte of a non-chunk block (its header included)
            off, ln = rnd.choice(meta)
            d[off + rnd.randrange(8 + ln)] = rnd.randrange(256)
        elif kind == "ts":                 # one byte of a few timestamps
            for off in rnd.sample(recs, rnd.randint(1, 8)):
                d[off + rnd.randrange(8)] = rnd.randrange(256)
        elif kind == "thread":
            struct.pack_into("<I", d, rnd.choice(heads) + 8, rnd.choice([1 << 20, 1 << 31, 0xFFFFFFFF,
                                                                          rnd.randrange(1 << 32)]))
        elif kind == "info":               # a record's kind and payload (depth)
            d[rnd.choice(recs) + 12 + rnd.randrange(4)] = rnd.randrange(256)
        elif kind == "code_id":
            d[rnd.choice(recs) + 8 + rnd.randrange(4)] = rnd.randrange(256)
    if "truncate" in kinds:                # (last: the other kinds' offsets are the sound file's)
        del d[rnd.randrange(len(d)):]
    return bytes(d), kinds

for seed in range(n):
    rnd = random.Random(seed)
    data, kinds = damage(rnd)
    rec = os.path.join(outdir, "f.ocular")
    with open(rec, "wb") as f:
        f.write(data)
    out = os.path.join(outdir, f"{seed}.{'pftrace' if seed % 4 == 3 else 'json'}")
    print(json.dumps({"seed": seed, "kinds": kinds, "start": True}), flush=True)  # (a crash names its case)
    try:
        res = ocular.convert(rec, out, statistics=seed % 2 == 0)
        r = {"seed": seed, "out": out, "damaged": res.get("damaged"), "complete": res["complete"]}
    except ValueError as exc:
        r = {"seed": seed, "error": str(exc), "rec": os.path.join(outdir, f"{seed}.ocular")}
        os.replace(rec, r["rec"])  # (kept: the test gives a few to the command line)
    with open("/proc/self/status") as f:  # (this process's peak so far: which case raised it)
        r["rss_kb"] = int(next(x for x in f if x.startswith("VmHWM:")).split()[1])
    print(json.dumps(r), flush=True)
"""


def test_fuzzed_recordings_render_valid_nested_traces_or_a_clear_error(tmp_path, sound_recording):
    """150 seeded ways to damage a recording (bytes of its header and calibration, of any block, of
    timestamps, thread indices, record kinds and code ids; truncation): each gives a valid JSON or .pftrace
    whose slices nest, with times that never go back in a thread, or a clear error (ValueError
    'ocular: ...'); never a crash, and the process stays under 200 MB."""
    rec = _write(tmp_path / "sound.ocular", sound_recording)
    out = tmp_path / "outs"
    out.mkdir()
    p = run_py(RSS_CHILD, sys.executable, "-c", FUZZ_WORKER, str(rec), "150", str(out), timeout=300)
    *lines, status_rss = p.stdout.splitlines()
    status, rss_kb = map(int, status_rss.split())
    lines = [json.loads(x) for x in lines]
    last = [x for x in lines if "start" in x][-1:] or [None]
    assert status == 0, f"the worker died ({status}) at {last[0]}:\n{p.stderr[-2000:]}"
    assert rss_kb < 200 * 1024, f"the worker took {rss_kb // 1024} MB"
    results = [x for x in lines if "seed" in x and "start" not in x]
    assert len(results) == 150
    big = [(x["seed"], x["rss_kb"] // 1024) for x in results if x["rss_kb"] >= 200 * 1024][:1]
    assert not big, f"seed {big[0][0]} took {big[0][1]} MB: {[x for x in lines if x.get('seed') == big[0][0]]}"
    errors = rendered = damaged = 0
    for r in results:
        if "error" in r:
            errors += 1
            assert r["error"].startswith("ocular: ") and "Traceback" not in r["error"], r
            if errors <= 3:  # the command line: status 1, one error line
                p = cli_convert(r["rec"], out / "cli.json")
                assert p.returncode == 1 and p.stderr.startswith("python -m ocular convert: error: "), p.stderr
                assert "Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
            continue
        rendered += 1
        damaged += r["damaged"] is not None
        if r["out"].endswith(".json"):
            text = open(r["out"], encoding="utf-8").read()  # (valid UTF-8)
            doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"seed {r['seed']}: {c} in the JSON"))
            nested(doc["traceEvents"])
            check_balanced(load_trace(r["out"])["traceEvents"])
        else:
            decoded = _decoded(r["out"])
            if decoded is not None:
                decoded.slices()
        os.unlink(r["out"])
    assert rendered > 50 and damaged > 10, (rendered, errors, damaged)  # (most damage renders, marked)
