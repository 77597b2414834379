"""SIGTERM and SIGHUP under the command line (and save_on_signals= in the API): the trace is saved, and the
process still dies of the signal, with the status it has untraced -- while busy in Python, asleep in
time.sleep(), or inside a long C call that never returns to the interpreter."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import SRC, load_trace, python_cmd, run_py

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

PROGRAM = r"""
import re, sys, threading, time
def f(n):
    return n if n < 2 else f(n - 1) + f(n - 2)
def spin():
    x = 0
    while True:
        x += 1
def nap():
    time.sleep(1000)
def c_call():
    re.match(r"(a+)+$", "a" * 64 + "b")  # catastrophic backtracking: one C call for ages
def work(i):
    f(10)
    spin()
f(12)
if "threads" in sys.argv:
    for i in range(3):
        threading.Thread(target=work, args=(i,), name=f"worker{i}", daemon=True).start()
print("ready", flush=True)
{"py": spin, "sleep": nap, "c": c_call}[sys.argv[1]]()
"""


def _stat(pid):
    """(state, utime ticks) of the process's main thread."""
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return fields[0], int(fields[11])


def _wait_until_in(p, mode):
    """After "ready": wait until the main thread is where `mode` says (asleep, or burning CPU in the loop
    or the C call), so that the signal lands there."""
    line = p.stdout.readline()
    assert line == "ready\n", (line, p.stderr.read() if p.poll() is not None else "")
    if mode == "sleep":
        while _stat(p.pid)[0] != "S":
            time.sleep(0.01)
    else:
        t0 = _stat(p.pid)[1]
        while _stat(p.pid)[1] - t0 < 10:  # (10 clock ticks of CPU: it is in there)
            time.sleep(0.01)


def _run(tmp_path, argv, mode, sig, traced=True, extra=(), env=None):
    """Run PROGRAM (traced by the command line with argv, or untraced), send `sig` once it is in `mode`;
    (returncode, stdout, stderr)."""
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    e = dict(os.environ, PYTHONPATH=SRC, **(env or {}))
    cmd = [*python_cmd()] + (["-m", "ocular", *argv] if traced else []) + [str(prog), mode, *extra]
    p = subprocess.Popen(cmd, cwd=tmp_path, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_until_in(p, mode)
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return p.returncode, out, err


def _leftovers(tmp_path):
    return sorted(n for n in os.listdir(tmp_path) if n.endswith(".tmp"))


def _names(events):
    return {e["name"] for e in events if e["ph"] == "B"}


@pytest.mark.parametrize("mode,callee", [("py", "spin"), ("sleep", "nap"), ("c", "c_call")])
def test_sigterm_saves_json_and_dies_of_it(tmp_path, mode, callee):
    untraced = _run(tmp_path, [], mode, signal.SIGTERM, traced=False)[0]
    assert untraced == -signal.SIGTERM
    rc, out, err = _run(tmp_path, ["-o", "t.json"], mode, signal.SIGTERM)
    assert rc == untraced, err
    assert "ocular: SIGTERM: trace written to" in err, err
    ev = load_trace(tmp_path / "t.json")["traceEvents"]
    names = _names(ev)
    assert {"f", "<module>", callee} <= names, names
    if mode == "sleep":
        assert "<built-in method time.sleep>" in names
    if mode == "c":
        assert any("match" in n and "Pattern" in n for n in names), names
    assert _leftovers(tmp_path) == []


def test_sighup_saves_pftrace(tmp_path):
    pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from test_perfetto import Decoded

    untraced = _run(tmp_path, [], "sleep", signal.SIGHUP, traced=False)[0]
    assert untraced == -signal.SIGHUP
    rc, out, err = _run(tmp_path, ["-o", "t.pftrace"], "sleep", signal.SIGHUP)
    assert rc == untraced, err
    names = {e["name"] for e in Decoded(str(tmp_path / "t.pftrace")).events}
    assert {"f", "nap", "<built-in method time.sleep>"} <= names, names
    assert _leftovers(tmp_path) == []


def test_python_format_keeps_the_recording_for_convert(tmp_path):
    rc, out, err = _run(tmp_path, ["-o", "p.pstats"], "c", signal.SIGTERM)
    assert rc == -signal.SIGTERM, err
    m = re.search(r"ocular: SIGTERM: the recording is kept in (\S+): render it with python -m ocular convert (\S+) "
                  r"-o (\S+)", err)
    assert m, err
    kept, out_path = m.group(1), m.group(3)
    assert os.path.isfile(kept) and m.group(2) == kept
    assert out_path == str(tmp_path / "p.pstats") and not os.path.exists(out_path)
    assert _leftovers(tmp_path) == []
    p = subprocess.run([sys.executable, "-m", "ocular", "convert", kept, "-o", out_path],
                       env=dict(os.environ, PYTHONPATH=SRC), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    import pstats

    funcs = {k[2] for k in pstats.Stats(out_path).stats}
    assert {"f", "c_call"} <= funcs, funcs


def test_several_outputs_keep_one_recording_for_all(tmp_path):
    rc, out, err = _run(tmp_path, ["-o", "a.json", "-o", "b.folded"], "sleep", signal.SIGTERM)
    assert rc == -signal.SIGTERM, err
    m = re.search(r"the recording is kept in (\S+): render it with python -m ocular convert \S+ (-o .*)$", err, re.M)
    assert m, err
    args = m.group(2).split()
    assert args == ["-o", str(tmp_path / "a.json"), "-o", str(tmp_path / "b.folded")]
    p = subprocess.run([sys.executable, "-m", "ocular", "convert", m.group(1), *args],
                       env=dict(os.environ, PYTHONPATH=SRC), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "nap" in _names(load_trace(tmp_path / "a.json")["traceEvents"])
    assert "nap" in (tmp_path / "b.folded").read_text()


def test_busy_threads_are_saved(tmp_path):
    rc, out, err = _run(tmp_path, ["-o", "t.json"], "sleep", signal.SIGTERM, extra=["threads"])
    assert rc == -signal.SIGTERM, err
    data = load_trace(tmp_path / "t.json")
    ev = data["traceEvents"]
    threads = {e["args"]["name"]: e["tid"] for e in ev if e.get("name") == "thread_name"}
    assert {"MainThread", "worker0", "worker1", "worker2"} <= set(threads), threads
    for i in range(3):
        mine = _names([e for e in ev if e.get("tid") == threads[f"worker{i}"]])
        assert {"work", "f", "spin"} <= mine, (i, mine)
    assert _leftovers(tmp_path) == []


OWN_HANDLER = r"""
import signal, sys, time
def handler(sig, frame):
    print("handled", sig, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, handler)
def nap():
    time.sleep(1000)
print("ready", flush=True)
nap()
"""


def test_program_handler_installed_while_traced_wins(tmp_path):
    prog = tmp_path / "own.py"
    prog.write_text(OWN_HANDLER)
    p = subprocess.Popen([*python_cmd(), "-m", "ocular", "-o", "t.json", str(prog)], cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=SRC), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_until_in(p, "sleep")
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert out == "handled 15\n"  # ("ready" was read)
    assert "SIGTERM" not in err  # (not Ocular's: the program's handler ended it, and the exit saved it)
    assert {"nap", "handler"} <= _names(load_trace(tmp_path / "t.json")["traceEvents"])
    assert _leftovers(tmp_path) == []


API_CHAINED = r"""
import os, signal, sys, time
import ocular
def handler(sig, frame):
    print("handler:", ocular.is_tracing(), os.path.getsize(sys.argv[1]) > 0, flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, handler)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
ocular.start_tracing(output=sys.argv[1], save_on_signals=(signal.SIGTERM, signal.SIGHUP), report=False)
assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
os.kill(os.getpid(), signal.SIGHUP)  # ignored, as before
def nap():
    time.sleep(1000)
print("ready", flush=True)
nap()
"""


def test_api_chains_a_handler_installed_before_and_keeps_sig_ign(tmp_path):
    prog = tmp_path / "api.py"
    prog.write_text(API_CHAINED)
    out_path = tmp_path / "t.json"
    p = subprocess.Popen([*python_cmd(), str(prog), str(out_path)], cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=SRC), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_until_in(p, "sleep")
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 3, err  # the program's handler decided
    assert out == "handler: False True\n"  # called after the trace was saved ("ready" was read)
    assert "nap" in _names(load_trace(out_path)["traceEvents"])
    assert _leftovers(tmp_path) == []


def test_api_option_arms_and_disarms_and_checks_its_argument(tmp_path):
    p = run_py(f"""
        import signal, ocular
        from ocular import _ocular
        out = {str(tmp_path / "t.json")!r}
        ocular.start_tracing(output=out, report=False)
        assert _ocular._signals_armed() == 0  # off by default in the API
        ocular.stop_tracing()
        for bad, exc in (("SIGTERM", TypeError), ([True], TypeError), ((signal.SIGINT,), ValueError),
                         ((signal.SIGKILL,), ValueError), (3.5, TypeError)):
            try:
                ocular.start_tracing(output=out, save_on_signals=bad, report=False)
            except exc as e:
                print(type(e).__name__, e)
            else:
                raise AssertionError(bad)
            assert not ocular.is_tracing()
        ocular.start_tracing(output=out, save_on_signals=True, report=False)
        assert _ocular._signals_armed() == 3
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # (what the program sees is unchanged)
        ocular.stop_tracing()
        assert _ocular._signals_armed() == 0
        ocular.start_tracing(output=out, save_on_signals=[signal.SIGHUP], report=False)
        assert _ocular._signals_armed() == 2
        ocular.stop_tracing()
        print("ok")
    """)
    lines = p.stdout.splitlines()
    assert lines[-1] == "ok"
    assert "only SIGTERM and SIGHUP" in lines[2] and "KeyboardInterrupt" in lines[2]
    assert "SIGKILL cannot be saved on" in lines[3]


def test_follow_sigterm_saves_the_program_and_dies_of_it(tmp_path):
    rc, out, err = _run(tmp_path, ["--follow", "-o", "all.json"], "sleep", signal.SIGTERM)
    assert rc == -signal.SIGTERM, err
    assert "trace written to" in err and "incomplete" not in err, err
    assert {"f", "nap"} <= _names(load_trace(tmp_path / "all.json")["traceEvents"])
    assert not os.path.exists(tmp_path / "all.procs")


def test_signal_during_a_python_stop_waits_for_it(tmp_path):
    """A SIGTERM that comes while stop_tracing() runs (Python renders a profile format) is raised when the
    stop has saved everything: the output is there, and the process dies of it."""
    prog = textwrap.dedent(r"""
        import os, signal, sys, ocular
        from ocular import _formats
        real = _formats.render
        def render(*a, **k):  # the signal lands in the middle of the stop's render
            os.kill(os.getpid(), signal.SIGTERM)
            return real(*a, **k)
        _formats.render = render
        ocular.start_tracing(output=sys.argv[1], save_on_signals=True, report=False)
        def f():
            pass
        f()
        ocular.stop_tracing()
        print("not reached", flush=True)
    """)
    out_path = tmp_path / "t.folded"
    p = subprocess.run([*python_cmd(), "-c", prog, str(out_path)], env=dict(os.environ, PYTHONPATH=SRC),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == -signal.SIGTERM, p.stderr
    assert "not reached" not in p.stdout
    assert re.search(r"(^|;)f \(", out_path.read_text(), re.M), out_path.read_text()
    assert _leftovers(tmp_path) == []


POOL = r"""
import multiprocessing as mp, sys, time
def f(x):
    return x * 2
def slow(x):
    time.sleep(1000)
if __name__ == "__main__":
    with mp.get_context("fork").Pool(2) as pool:  # (the end of the block SIGTERMs the workers)
        print(pool.map(f, range(8)), flush=True)
        pool.map_async(slow, range(2))
        time.sleep(0.2)
"""


def test_forked_pool_workers_terminated_save_their_traces(tmp_path):
    prog = tmp_path / "pool.py"
    prog.write_text(POOL)
    p = subprocess.run([*python_cmd(), "-W", "ignore::DeprecationWarning", "-m", "ocular", "--no-report", "-o",
                        "t.json", str(prog)], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=SRC),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    workers = [n for n in os.listdir(tmp_path) if re.fullmatch(r"t\.\d+\.json", n)]
    assert len(workers) == 2, (os.listdir(tmp_path), p.stderr)
    assert p.stderr.count("ocular: SIGTERM: trace written to") == 2, p.stderr
    seen = set()
    for w in workers:
        seen |= _names(load_trace(tmp_path / w)["traceEvents"])
    assert "f" in seen, seen
    assert _leftovers(tmp_path) == []
