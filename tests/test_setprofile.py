"""sys.setprofile users inside a traced program (issue #32): the pure-Python `profile` module, cProfile and a
plain `sys.setprofile` function see the same events, and count the same calls, as untraced.

CPython runs a setprofile user on sys.monitoring, and delivers C_RETURN to it at a call site that was
dispatched as an instrumented CALL because some tool monitored CALL there.  Ocular records C functions
with CALL events: where it armed the site of ``sys.setprofile(f)`` itself, the new profile function got
a ``c_return`` for sys.setprofile with no ``c_call`` before it, and ``profile`` stopped on it ("Bad
return").  CALL is now a local event, left unset on code objects that name sys.setprofile
(codeinfo.c); every other C call is still recorded, before, while and after a profiler runs.

Each program runs twice in a fresh interpreter, untraced (``python prog.py``) and under
``python -m ocular -o trace.json prog.py``, at the default threshold and at 0.
"""

import subprocess
import sys
import textwrap

import pytest

from conftest import SRC, check_balanced, load_trace, names

THRESHOLDS = [500, 0]

WORK = """
import sys, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # (3.15: profile is deprecated)

def work(n):
    s = 0
    for i in range(n):
        s += len(str(i)) + abs(-i)
    return sorted([3, 1, 2]), divmod(s, 7)
"""


def run(tmp_path, body, traced, threshold=500, extra=()):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(WORK) + textwrap.dedent(body))
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable]
    if traced:
        cmd += ["-m", "ocular", "--threshold", str(threshold), "-o", str(tmp_path / "trace.json"), "--no-report",
                *extra]
    p = subprocess.run([*cmd, str(prog)], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return [ln for ln in p.stdout.splitlines() if ln.startswith("OUT ")]


def same_untraced_and_traced(tmp_path, body, threshold, extra=()):
    plain = run(tmp_path, body, False)
    assert plain, "the program printed nothing"
    traced = run(tmp_path, body, True, threshold, extra)
    assert traced == plain
    return plain


def trace_names(tmp_path):
    data = load_trace(str(tmp_path / "trace.json"))
    check_balanced(data["traceEvents"])
    return names(data["traceEvents"])


# pstats rows by function name (addresses left out); indented as the programs that follow it
STATS = """
    import pstats, re
    def rows(p):
        st = pstats.Stats(p)
        return sorted((re.sub(r" at 0x[0-9a-f]+", "", k[2]), v[0], v[1]) for k, v in st.stats.items())
"""


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_profile_runcall_same_counts(tmp_path, threshold):
    out = same_untraced_and_traced(tmp_path, STATS + """
    import profile
    p = profile.Profile()
    p.runcall(work, 600)
    print("OUT", rows(p))
    """, threshold)
    assert "('len', 600, 600)" in out[0] and "('abs', 600, 600)" in out[0], out
    assert trace_names(tmp_path).count("<built-in method builtins.len>") >= 1  # (a cheap site goes at 500)


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_profile_run_statement_same_counts(tmp_path, threshold):
    out = same_untraced_and_traced(tmp_path, STATS + """
    import profile
    p = profile.Profile()
    p.run("work(300)")
    print("OUT", rows(p))
    p = profile.Profile()
    p.runctx("work(n)", globals(), {"n": 40})
    print("OUT", rows(p))
    """, threshold)
    assert "('divmod', 1, 1)" in out[0] and "('len', 40, 40)" in out[1], out


def test_profile_run_prints_its_table(tmp_path):
    """profile.run() with no file prints its table; only the times may differ."""
    body = """
    import profile, re
    import io, contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        profile.run("work(200)", sort="name")
    for line in buf.getvalue().splitlines():
        f = line.split()
        if len(f) == 6 and f[0].isdigit():  # ncalls tottime percall cumtime percall filename:lineno(function)
            print("OUT", f[0], re.sub(r"0x[0-9a-f]+", "", f[5]))
    """
    out = same_untraced_and_traced(tmp_path, body, 500)
    assert any("(len)" in ln and ln.split()[1] == "200" for ln in out), out


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_cprofile_inside_traced_program_same_counts(tmp_path, threshold):
    out = same_untraced_and_traced(tmp_path, STATS + """
    import cProfile
    p = cProfile.Profile()
    p.enable()
    work(500)
    p.disable()
    print("OUT", rows(p))
    p = cProfile.Profile()
    p.runcall(work, 70)
    print("OUT", rows(p))
    """, threshold)
    assert "('<built-in method builtins.len>', 500, 500)" in out[0], out
    assert "('<built-in method builtins.len>', 70, 70)" in out[1], out


PAIRS = """
    import threading
    def pairs(log):
        # every c_return/c_exception ends the c_call before it in the same frame; every return a call
        stack, bad = [], []
        for ev, frame, fn in log:
            if ev in ("call", "c_call"):
                stack.append((ev, frame, fn))
            elif ev in ("return",):
                if not stack or stack[-1][:2] != ("call", frame):
                    bad.append((ev, frame))
                else:
                    stack.pop()
            elif ev in ("c_return", "c_exception"):
                if not stack or stack[-1] != ("c_call", frame, fn):
                    bad.append((ev, fn))
                else:
                    stack.pop()
        return bad

    def recorder(log):
        def prof(frame, event, arg):
            log.append((event, frame, getattr(arg, "__name__", None) if event.startswith("c_") else None))
        return prof

    def summary(log):
        return [(ev, f.f_code.co_name, fn) for ev, f, fn in log]
"""


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_setprofile_function_sees_matching_pairs(tmp_path, threshold):
    out = same_untraced_and_traced(tmp_path, PAIRS + """
    def main():
        log = []
        sys.setprofile(recorder(log))
        work(30)
        try:
            int("x")  # a C function that raises: c_exception
        except ValueError:
            pass
        sys.setprofile(None)
        print("OUT bad", pairs(log[:-1]))  # (the last event: the c_call of setprofile(None))
        print("OUT", summary(log))
    main()
    """, threshold)
    assert out[0] == "OUT bad []", out
    assert out[1].startswith("OUT [('call', 'work', None)"), out  # not a c_return of setprofile


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_threads_started_under_threading_setprofile(tmp_path, threshold):
    """threading.setprofile: a new thread sets it itself (threading's _bootstrap_inner), and
    threading.setprofile_all_threads sets it on every running thread (sys._setprofileallthreads)."""
    out = same_untraced_and_traced(tmp_path, PAIRS + """
    def main():
        log = []
        threading.setprofile(recorder(log))
        t = threading.Thread(target=work, args=(20,))
        t.start(); t.join()
        threading.setprofile(None)
        mine = [e for e in log if e[1].f_code.co_name == "work"]
        print("OUT bad", pairs(mine))
        print("OUT", summary(mine))
        log2 = []
        threading.setprofile_all_threads(recorder(log2))
        work(5)
        threading.setprofile_all_threads(None)
        mine = [e for e in log2 if e[1].f_code.co_name == "work"]
        print("OUT bad", pairs(mine))
        print("OUT", summary(mine))
    main()
    """, threshold)
    assert out[0] == "OUT bad []" and out[2] == "OUT bad []", out
    assert "('c_call', 'work', 'len')" in out[1] and "('c_call', 'work', 'len')" in out[3], out


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_c_functions_recorded_before_during_and_after(tmp_path, threshold):
    """Ocular goes on recording C functions while a profiler runs: all but the calls made by the code
    object that names sys.setprofile itself (here `profiled`: its math.comb call is not recorded)."""
    same_untraced_and_traced(tmp_path, STATS + """
    import math, profile
    def before():
        return math.gcd(4, 6)
    def during():
        return math.lcm(4, 6)
    def profiled():
        p = profile.Profile()
        sys.setprofile(p.dispatcher)
        try:
            math.comb(5, 2)
        finally:
            sys.setprofile(None)
        p = profile.Profile()
        p.runcall(during)
        return rows(p)
    def after():
        return math.hypot(3, 4)
    before()
    print("OUT", profiled())
    after()
    """, threshold)
    got = trace_names(tmp_path)
    def calls_of(fn):  # (3.15: math.gcd is <built-in method math.integer.gcd>)
        return [n for n in got if n.startswith("<built-in method math.") and n.endswith(f".{fn}>")]
    for fn in ("gcd", "lcm", "hypot"):
        assert len(calls_of(fn)) == 1, (fn, sorted(set(got)))
    assert not calls_of("comb")
    assert got.count("profiled") == 1 and got.count("during") == 1


def test_no_c_functions_unchanged(tmp_path):
    """--no-c-functions: no CALL events at all (as before), the profile works too."""
    same_untraced_and_traced(tmp_path, STATS + """
    import profile
    p = profile.Profile()
    p.runcall(work, 50)
    print("OUT", rows(p))
    """, 500, extra=("--no-c-functions",))
    assert not any(n.startswith("<built-in") for n in trace_names(tmp_path))


def test_start_tracing_arms_running_code(tmp_path):
    """C calls of a frame that was already running when start_tracing() was called are recorded (its
    code object registers, and so gets CALL, at start), and stop leaves no events of ours behind."""
    prog = tmp_path / "inline.py"
    prog.write_text(textwrap.dedent(f"""
    import sys, ocular
    ocular.start_tracing(output={str(tmp_path / "trace.json")!r}, report=False)
    x = abs(-3)
    y = divmod(7, 2)
    ocular.stop_tracing()
    mon = sys.monitoring
    code = sys._getframe().f_code
    print("OUT", [mon.get_local_events(t, code) for t in range(6)], [mon.get_events(t) for t in range(6)])
    """))
    p = subprocess.run([sys.executable, str(prog)], env={"PYTHONPATH": SRC}, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "OUT [0, 0, 0, 0, 0, 0] [0, 0, 0, 0, 0, 0]" in p.stdout, p.stdout
    got = trace_names(tmp_path)
    assert "<built-in method builtins.abs>" in got and "<built-in method builtins.divmod>" in got, sorted(set(got))
