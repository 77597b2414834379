"""A program that replaces ``sys.monitoring`` or frees Ocular's tool id: the trace is still saved, Ocular
can start again, the CLI exits with the program's status, and no event or callback of Ocular's is left
behind after stop.  Each program runs in its own interpreter."""

import os

from conftest import check_balanced, load_trace, names, run_py
from test_api import run_cli

REPLACE = """
import sys, ocular
real = sys.monitoring
def before(): pass
def after(): pass
ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=0, report=False)
before()
sys.monitoring = None          # the program replaces the module attribute ...
r = ocular.stop_tracing()      # ... Ocular still stops and saves through the real module
print("first", r.events)
ocular.start_tracing(output=sys.argv[2], deinstrument_threshold=0, report=False)  # and starts again
after()
del sys.monitoring
ocular.stop_tracing()
print("tools left:", [real.get_tool(i) for i in range(6)])
"""


def test_replaced_sys_monitoring_keeps_the_trace_and_restarts(tmp_path):
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    p = run_py(REPLACE, a, b)
    assert "tools left: [None, None, None, None, None, None]" in p.stdout, p.stdout + p.stderr
    for path, fn in ((a, "before"), (b, "after")):
        ev = load_trace(path)["traceEvents"]
        check_balanced(ev)
        assert fn in names(ev)
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


def test_cli_program_replacing_sys_monitoring(tmp_path):
    """Under the CLI the trace is written and the exit status is the program's (it was 1, with a 0-byte
    .tmp left behind)."""
    code = "import sys\ndef work(): pass\nwork()\nsys.monitoring = object()\nsys.exit(4)\n"
    p = run_cli("--no-report", "-o", str(tmp_path / "t.json"), "-c", code, cwd=tmp_path)
    assert p.returncode == 4, p.stderr
    ev = load_trace(str(tmp_path / "t.json"))["traceEvents"]
    assert "work" in names(ev)
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


FREED = """
import sys, ocular
m = sys.monitoring
def f(): pass
ocular.start_tracing(output=sys.argv[1], report=False)
tid = ocular._current.tool_id
m.free_tool_id(tid)            # another tool frees our id (3.12/3.13 leave its events and callbacks set)
f()
ocular.stop_tracing()
print("events after stop:", m.get_events(tid))
m.use_tool_id(tid, "probe")
single = {v for v in vars(m.events).values() if isinstance(v, int) and v and not v & (v - 1)}
print("callbacks left after stop:", [cb for ev in sorted(single) if (cb := m.register_callback(tid, ev, None))])
m.free_tool_id(tid)
"""

TAKEN = """
import sys, ocular
m = sys.monitoring
def theirs(*a): pass
ocular.start_tracing(output=sys.argv[1], report=False)
tid = ocular._current.tool_id
m.free_tool_id(tid)
m.use_tool_id(tid, "other")    # ... and takes it for itself, with one callback of its own
m.register_callback(tid, m.events.PY_RETURN, theirs)
ocular.stop_tracing()
print("holder:", m.get_tool(tid))
print("theirs kept:", m.register_callback(tid, m.events.PY_RETURN, None) is theirs)
print("ours left:", m.register_callback(tid, m.events.PY_START, None))
"""


def test_id_freed_by_another_tool_leaves_nothing_set_after_stop(tmp_path):
    p = run_py(FREED, str(tmp_path / "t.json"))
    assert "events after stop: 0" in p.stdout, p.stdout
    assert "callbacks left after stop: []" in p.stdout, p.stdout


def test_id_taken_by_another_tool_keeps_its_callbacks(tmp_path):
    p = run_py(TAKEN, str(tmp_path / "t.json"))
    assert "holder: other" in p.stdout and "theirs kept: True" in p.stdout, p.stdout
    assert "ours left: None" in p.stdout, p.stdout
