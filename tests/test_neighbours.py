"""Ocular as a good neighbour: CPython's own tools work the same inside a traced program.

cProfile (sys.monitoring PROFILER_ID on 3.12+), coverage.py with ``COVERAGE_CORE=sysmon`` (COVERAGE_ID),
pdb (DEBUGGER_ID: 3.14's pdb runs on sys.monitoring, and calls ``restart_events()``, which re-arms the
sites Ocular disabled) and plain ``sys.settrace``/``sys.setprofile`` users.  Each program runs twice in a
fresh interpreter, once with Ocular tracing and once without (``OCULAR=0``): the tool's result must be
the same, and Ocular's trace must be valid (balanced) and hold the workload's calls.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import SRC, check_balanced, load_trace, names

# The workload: `leaf` is called N times from `work`; with the default threshold (500) its start is
# de-instrumented after 500 calls, so DISABLE and re-arming are part of every run.  `traced(fn)` (in a
# module of its own, so that both runs execute the same lines of the program) runs fn under Ocular
# unless OCULAR=0.
WORKLOAD = """
import os, sys
from switch import traced

def leaf(i):
    if i % 3:
        return i * 2
    return -i

def work(n):
    total = 0
    for i in range(n):
        total += leaf(i)
    return total
"""

SWITCH = """
import os
import ocular

def traced(fn, *args):
    if os.environ.get("OCULAR") == "0":
        return fn(*args)
    ocular.start_tracing(output=os.environ["OCULAR_OUT"], report=False,
                         deinstrument_threshold=int(os.environ["OCULAR_THRESHOLD"]))
    try:
        return fn(*args)
    finally:
        res = ocular.stop_tracing()
        print("OCULAR_TOOL", res.tool_id, flush=True)
"""


def write(tmp_path, name, body, threshold=500):
    (tmp_path / "switch.py").write_text(SWITCH)
    (tmp_path / "threshold").write_text(str(threshold))
    path = tmp_path / name
    path.write_text(textwrap.dedent(WORKLOAD) + textwrap.dedent(body))
    return str(path)


def run(args, tmp_path, ocular_on, env=None, stdin=None, timeout=120):
    e = dict(os.environ)
    e["PYTHONPATH"] = SRC + os.pathsep + e.get("PYTHONPATH", "")
    e["OCULAR"] = "1" if ocular_on else "0"
    e["OCULAR_OUT"] = str(tmp_path / "trace.json")
    e["OCULAR_THRESHOLD"] = (tmp_path / "threshold").read_text()
    e.pop("COVERAGE_PROCESS_START", None)
    if env:
        e.update(env)
    p = subprocess.run([sys.executable, *args], env=e, cwd=str(tmp_path), input=stdin, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, f"{args}: exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p.stdout


def check_trace(tmp_path, expect_leaf):
    """The trace is valid and holds `work` once and `leaf` expect_leaf times."""
    data = load_trace(str(tmp_path / "trace.json"))
    check_balanced(data["traceEvents"])
    got = names(data["traceEvents"])
    assert got.count("work") == 1, got[:50]
    assert got.count("leaf") == expect_leaf, (got.count("leaf"), expect_leaf)


def work(n):
    """The workload's result, computed here."""
    return sum(i * 2 if i % 3 else -i for i in range(n))


def tool_line(out):
    m = re.search(r"^OCULAR_TOOL (\d)$", out, re.M)
    assert m, out
    return int(m.group(1))


# ---- cProfile ----------------------------------------------------------------------------------
def test_cprofile_inside_a_traced_program(tmp_path):
    path = write(tmp_path, "prof.py", """
    import cProfile, pstats, io
    def profiled():
        prof = cProfile.Profile()
        prof.enable()
        work(2000)
        prof.disable()
        st = pstats.Stats(prof).stats
        print("CALLS", sorted((f, v[1]) for (_fl, _ln, f), v in st.items() if f in ("leaf", "work")))
    traced(profiled)
    """, threshold=0)
    plain, traced_out = run([path], tmp_path, False), run([path], tmp_path, True)
    calls = [ln for ln in plain.splitlines() if ln.startswith("CALLS")]
    assert calls == ["CALLS [('leaf', 2000), ('work', 1)]"], plain
    assert [ln for ln in traced_out.splitlines() if ln.startswith("CALLS")] == calls, traced_out
    assert tool_line(traced_out) == 3
    check_trace(tmp_path, 2000)


def test_python_m_ocular_m_cprofile(tmp_path):
    """`python -m ocular -m cProfile script.py`: cProfile's statistics as without Ocular, and the trace
    holds the script's calls."""
    path = write(tmp_path, "script.py", """
    work(700)
    """)
    def stats(prof_file):
        import pstats
        st = pstats.Stats(str(prof_file)).stats
        return sorted((f, v[0], v[1]) for (fl, _ln, f), v in st.items() if fl.endswith("script.py"))

    run(["-m", "cProfile", "-o", "plain.prof", path], tmp_path, False)
    out = tmp_path / "trace.json"
    run(["-m", "ocular", "-q", "--no-report", "--threshold", "0", "-o", str(out), "-m", "cProfile", "-o", "traced.prof", path],
        tmp_path, True)
    plain = stats(tmp_path / "plain.prof")
    assert ("leaf", 700, 700) in plain and ("work", 1, 1) in plain, plain
    assert stats(tmp_path / "traced.prof") == plain
    check_trace(tmp_path, 700)


# ---- coverage.py on sys.monitoring --------------------------------------------------------------
def coverage_lines(tmp_path, path, ocular_on):
    data = tmp_path / (".coverage-on" if ocular_on else ".coverage-off")
    report = tmp_path / ("cov-on.json" if ocular_on else "cov-off.json")
    env = {"COVERAGE_CORE": "sysmon"}
    out = run(["-m", "coverage", "run", f"--data-file={data}", path], tmp_path, ocular_on, env=env)
    run(["-m", "coverage", "json", f"--data-file={data}", "-o", str(report)], tmp_path, ocular_on, env=env)
    files = json.loads(report.read_text())["files"]
    (summary,) = [v for k, v in files.items() if k.endswith("covered.py")]
    return out, summary["executed_lines"], summary["missing_lines"]


def test_coverage_sysmon_same_lines(tmp_path):
    pytest.importorskip("coverage", reason="coverage.py is not installed (requirements-test.txt)")
    path = write(tmp_path, "covered.py", """
    def never():
        return "not run"

    def measured():
        print("COVERAGE_TOOL", sys.monitoring.get_tool(sys.monitoring.COVERAGE_ID), flush=True)
        work(1200)
        try:
            raise ValueError
        except ValueError:
            pass
    traced(measured)
    """)
    out_off, lines_off, missing_off = coverage_lines(tmp_path, path, False)
    out_on, lines_on, missing_on = coverage_lines(tmp_path, path, True)
    # coverage.py measured through sys.monitoring in both runs, Ocular on another id
    assert "COVERAGE_TOOL coverage.py" in out_off and "COVERAGE_TOOL coverage.py" in out_on, (out_off, out_on)
    assert tool_line(out_on) == 3
    assert missing_off, "the never-called function must show as missing"
    assert (lines_on, missing_on) == (lines_off, missing_off)
    data = load_trace(str(tmp_path / "trace.json"))
    check_balanced(data["traceEvents"])
    got = names(data["traceEvents"])
    assert got.count("measured") == 1 and 500 <= got.count("leaf") <= 1200, got.count("leaf")


# ---- pdb ----------------------------------------------------------------------------------------
PDB_BODY = """
def inspected(k):
    a = k * 10
    b = work(k)                      # BREAK_A
    return a + b                     # BREAK_B

def main():
    r = 0
    for k in (600, 900):
        r += inspected(k)
    print("RESULT", r, flush=True)
traced(main)
"""


def pdb_lines(path):
    src = open(path).read().splitlines()
    return [i + 1 for i, ln in enumerate(src) if "# BREAK_A" in ln][0], \
        [i + 1 for i, ln in enumerate(src) if "# BREAK_B" in ln][0]


def pdb_transcript(out):
    """What pdb showed: the stop locations and the printed values (prompts and paths stripped)."""
    keep = []
    for ln in out.splitlines():
        ln = ln.replace("(Pdb) ", "").strip()
        if ln.startswith(">"):
            keep.append(re.sub(r"^> .*?([\w.]+\.py)", r"> \1", ln))
        elif ln.startswith(("VAL", "RESULT", "DEBUGGER")):
            keep.append(ln)
    return keep


def test_pdb_breakpoints_in_a_traced_program(tmp_path):
    path = write(tmp_path, "dbg.py", PDB_BODY)
    la, lb = pdb_lines(path)
    cmds = "\n".join([
        f"break {la}", f"break {lb}", "continue",
        "!print('VAL', k, a)", "!print('DEBUGGER', sys.monitoring.get_tool(0))", "continue",
        "!print('VAL', k, a, b)", "continue",
        "!print('VAL', k, a)", "continue",
        "!print('VAL', k, a, b)", "continue",
        "quit", "",
    ])
    plain = pdb_transcript(run(["-m", "pdb", path], tmp_path, False, stdin=cmds))
    traced = pdb_transcript(run(["-m", "pdb", path], tmp_path, True, stdin=cmds))
    vals = [ln for ln in plain if ln.startswith(("VAL", "RESULT"))]
    w6, w9 = work(600), work(900)
    assert vals == ["VAL 600 6000", f"VAL 600 6000 {w6}", "VAL 900 9000", f"VAL 900 9000 {w9}",
                    f"RESULT {6000 + w6 + 9000 + w9}"], plain
    assert plain.count(f"> dbg.py({la})inspected()") == 2 and plain.count(f"> dbg.py({lb})inspected()") == 2
    assert traced == plain
    if sys.version_info >= (3, 14):  # pdb runs on sys.monitoring: it held DEBUGGER_ID beside Ocular
        debugger = [ln for ln in plain if ln.startswith("DEBUGGER")]
        assert debugger and debugger != ["DEBUGGER None"], plain  # bdb's "bdbtracer" on 3.14
    check_trace_pdb(tmp_path)


def test_breakpoint_call_inside_traced_code(tmp_path):
    """breakpoint() while Ocular traces (3.14: pdb's sys.monitoring backend takes DEBUGGER_ID then)."""
    path = write(tmp_path, "bp.py", """
    def inspected(k):
        a = k + 1
        breakpoint()
        b = work(k)
        return a + b

    def main():
        print("RESULT", inspected(800), flush=True)
    traced(main)
    """)
    cmds = "!print('VAL', k, a)\nnext\nnext\n!print('VAL', b)\ncontinue\n"
    env = {"PYTHONBREAKPOINT": "pdb.set_trace"}
    plain = pdb_transcript(run([path], tmp_path, False, env=env, stdin=cmds))
    traced = pdb_transcript(run([path], tmp_path, True, env=env, stdin=cmds))
    assert [ln for ln in plain if ln.startswith(("VAL", "RESULT"))] == ["VAL 800 801", f"VAL {work(800)}",
                                                                        f"RESULT {801 + work(800)}"], plain
    if sys.version_info[:2] == (3, 13):
        # CPython 3.13: breakpoint() stops at its next opcode event (gh-111744), which lands on the next
        # line whenever any sys.monitoring tool has PY_START, PY_RETURN or JUMP events on -- a no-op
        # Python tool without Ocular does the same.  Compare what pdb printed, not where it stopped.
        traced = [ln for ln in traced if not ln.startswith(">")]
        plain = [ln for ln in plain if not ln.startswith(">")]
    assert traced == plain
    data = load_trace(str(tmp_path / "trace.json"))
    check_balanced(data["traceEvents"])
    got = names(data["traceEvents"])
    assert got.count("inspected") == 1 and got.count("work") == 1 and got.count("leaf") >= 500


def check_trace_pdb(tmp_path):
    data = load_trace(str(tmp_path / "trace.json"))
    check_balanced(data["traceEvents"])
    got = names(data["traceEvents"])
    assert got.count("main") == 1 and got.count("inspected") == 2 and got.count("work") == 2, got[:40]
    assert got.count("leaf") >= 500


# ---- sys.settrace / sys.setprofile ----------------------------------------------------------------
def test_settrace_and_setprofile_users(tmp_path):
    path = write(tmp_path, "hooks.py", """
    import collections, threading
    seen = collections.Counter()

    def prof(frame, event, arg):
        if frame.f_code.co_filename == __file__:
            seen["profile", event, frame.f_code.co_name] += 1

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != __file__:
            return None
        seen["trace", event, frame.f_code.co_name] += 1
        return tracer

    def hooked():
        sys.setprofile(prof)
        work(300)
        sys.setprofile(None)
        sys.settrace(tracer)
        work(900)
        sys.settrace(None)
        # a thread started while both hooks are set through threading
        threading.setprofile(prof)
        t = threading.Thread(target=work, args=(50,))
        t.start(); t.join()
        threading.setprofile(None)
    traced(hooked)
    print("SEEN", sorted(seen.items()))
    """, threshold=0)
    plain = [ln for ln in run([path], tmp_path, False).splitlines() if ln.startswith("SEEN")]
    traced_out = run([path], tmp_path, True)
    assert plain and ("('trace', 'line', 'leaf'), " in plain[0]), plain
    assert "('profile', 'call', 'leaf'), 350)" in plain[0], plain
    seen = [ln for ln in traced_out.splitlines() if ln.startswith("SEEN")]
    # (no c_return of sys.setprofile(prof) itself: Ocular leaves CALL unarmed in `hooked`, which names
    # sys.setprofile -- tests/test_setprofile.py)
    assert seen == plain
    check_trace_threads(tmp_path)


def check_trace_threads(tmp_path):
    data = load_trace(str(tmp_path / "trace.json"))
    check_balanced(data["traceEvents"])
    got = names(data["traceEvents"])
    assert got.count("hooked") == 1 and got.count("work") == 3 and got.count("leaf") == 1250, \
        (got.count("work"), got.count("leaf"))
