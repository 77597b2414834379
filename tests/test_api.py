"""Public API (ocular.start_tracing / stop_tracing / tracing / is_tracing) and the command line.

Argument checking: every bad input raises a clear error *and starts nothing* (no session, no
sys.monitoring tool id held, and a following valid session works).  Session life cycle: temp file
while tracing, atomic rename at stop, perfetto=False writes nothing, repeated sessions in one process.
The CLI (python -m ocular) runs programs like python itself does.
"""

import errno
import json
import os
import subprocess
import sys

import pytest

import ocular
from conftest import SRC, check_balanced, load_trace, names, run_py


def _holders():
    return [sys.monitoring.get_tool(i) for i in range(6)]


_WORK_SRC = """
def _work(n=20):
    total = 0
    for i in range(n):
        total += _leaf(i)
    return total

def _leaf(i):
    return i * 2
"""


def _work(n=20):
    """Call _leaf n times, from code objects compiled afresh for every call.

    Fresh code matters: sys.monitoring remembers DISABLE per code location and tool id across
    sessions (see test_new_session_traces_code_deinstrumented_in_previous_session), so code that an
    earlier test excluded or de-instrumented could be invisible to a later session.
    """
    ns = {}
    exec(compile(_WORK_SRC, __file__, "exec"), ns)
    return ns["_work"](n)


def assert_nothing_started(tmp_path):
    """After a failed start: no session, no tool id held, and a valid start/stop works."""
    assert not ocular.is_tracing()
    assert "ocular" not in _holders()
    out = tmp_path / "after_failure.json"
    ocular.start_tracing(output=str(out))
    try:
        assert ocular.is_tracing()
        _work()
    finally:
        res = ocular.stop_tracing()
    assert not ocular.is_tracing()
    assert "ocular" not in _holders()
    assert res.output == str(out)
    data = load_trace(str(out))
    check_balanced(data["traceEvents"])
    assert "_leaf" in names(data["traceEvents"])
    out.unlink()


@pytest.fixture(autouse=True)
def _no_leftover_session():
    assert not ocular.is_tracing()
    yield
    if ocular.is_tracing():  # a failing test must not leave tracing on for the others
        ocular.stop_tracing()
        pytest.fail("test left a tracing session running")
    assert "ocular" not in _holders()


# ---------------------------------------------------------------------------------------------
# argument validation


def test_unknown_mode_names_the_valid_modes(tmp_path):
    with pytest.raises(ValueError) as ei:
        ocular.start_tracing(mode="fast", output=str(tmp_path / "t.json"))
    msg = str(ei.value)
    assert "adaptive" in msg and "precise" in msg and "fast" in msg
    assert os.listdir(tmp_path) == []
    assert_nothing_started(tmp_path)


@pytest.mark.parametrize("mode", [None, 1, b"adaptive", ["adaptive"]])
def test_mode_not_a_str(tmp_path, mode):
    with pytest.raises(TypeError, match="mode"):
        ocular.start_tracing(mode=mode, output=str(tmp_path / "t.json"))
    assert_nothing_started(tmp_path)


@pytest.mark.parametrize("perfetto", [1, 0, "yes", None])
def test_perfetto_not_a_bool(tmp_path, perfetto):
    with pytest.raises(TypeError, match="perfetto"):
        ocular.start_tracing(perfetto=perfetto, output=str(tmp_path / "t.json"))
    assert_nothing_started(tmp_path)


@pytest.mark.parametrize("threshold", [-1, -500])
def test_threshold_negative(tmp_path, threshold):
    with pytest.raises(ValueError, match="deinstrument_threshold"):
        ocular.start_tracing(deinstrument_threshold=threshold, output=str(tmp_path / "t.json"))
    assert_nothing_started(tmp_path)


@pytest.mark.parametrize("threshold", [10.0, "10", True, False, None])
def test_threshold_wrong_type(tmp_path, threshold):
    with pytest.raises(TypeError, match="deinstrument_threshold"):
        ocular.start_tracing(deinstrument_threshold=threshold, output=str(tmp_path / "t.json"))
    assert_nothing_started(tmp_path)


@pytest.mark.parametrize("arg", ["exclude", "include_only"])
def test_patterns_bare_str(tmp_path, arg):
    with pytest.raises(TypeError) as ei:
        ocular.start_tracing(output=str(tmp_path / "t.json"), **{arg: "mod_a"})
    msg = str(ei.value)
    assert arg in msg and "list or tuple" in msg
    assert_nothing_started(tmp_path)


@pytest.mark.parametrize("arg", ["exclude", "include_only"])
@pytest.mark.parametrize("value", [["ok", 3], ("ok", None), [b"mod_a"], {"mod_a"}])
def test_patterns_bad_items(tmp_path, arg, value):
    with pytest.raises(TypeError, match=arg):
        ocular.start_tracing(output=str(tmp_path / "t.json"), **{arg: value})
    assert_nothing_started(tmp_path)


@pytest.mark.parametrize("arg", ["exclude", "include_only"])
def test_patterns_empty_string_rejected(tmp_path, arg):
    # an empty substring would match every file
    with pytest.raises(ValueError, match=arg):
        ocular.start_tracing(output=str(tmp_path / "t.json"), **{arg: ["x", ""]})
    assert_nothing_started(tmp_path)


@pytest.mark.parametrize("value", [["no_such_file_xyz"], ("no_such_file_xyz",), [], ()])
def test_patterns_list_and_tuple_accepted(tmp_path, value):
    out = tmp_path / "t.json"
    ocular.start_tracing(output=str(out), exclude=value, include_only=value)
    _work()
    res = ocular.stop_tracing()
    data = load_trace(res.output)
    check_balanced(data["traceEvents"])
    if value:  # include_only matching no file: nothing of ours is traced
        assert "_leaf" not in names(data["traceEvents"])
    else:  # an empty include_only means "no restriction"
        assert "_leaf" in names(data["traceEvents"])


def test_output_missing_directory(tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    with pytest.raises(FileNotFoundError) as ei:
        ocular.start_tracing(output=str(missing / "t.json"))
    assert str(missing) in str(ei.value)
    assert not (tmp_path / "no").exists()
    assert_nothing_started(tmp_path)


def test_output_is_a_directory(tmp_path):
    d = tmp_path / "adir"
    d.mkdir()
    with pytest.raises(ValueError, match="directory"):
        ocular.start_tracing(output=str(d))
    assert os.listdir(d) == []
    assert_nothing_started(tmp_path)


def test_output_not_writable_directory():
    # The tests run as root, and root ignores permission bits, so a chmod 0o555 directory would be
    # writable for us and the check would test nothing.  The child process therefore drops to the
    # 'nobody' uid/gid (65534) first when it is root (ocular is imported before, while src/ is surely
    # readable); then a 0o555 directory really refuses new files: we check that it does (creating a
    # file there fails with EACCES) before checking that start_tracing reports PermissionError, starts
    # nothing, and that tracing into a writable directory afterwards works.
    code = r"""
        import errno, json, os, shutil, sys, tempfile
        import ocular
        if os.geteuid() == 0:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        base = tempfile.mkdtemp(prefix="ocular-perm-")
        ro = os.path.join(base, "ro")
        os.mkdir(ro)
        os.chmod(ro, 0o555)
        out = {}
        try:
            try:
                open(os.path.join(ro, "probe"), "w").close()
                out["probe"] = "created"
            except PermissionError:
                out["probe"] = "refused"
            try:
                ocular.start_tracing(output=os.path.join(ro, "t.json"))
                out["error"] = None
                ocular.stop_tracing()
            except Exception as exc:
                out["error"] = type(exc).__name__
                out["message"] = str(exc)
            out["tracing"] = ocular.is_tracing()
            out["holders"] = [sys.monitoring.get_tool(i) for i in range(6)]
            out["ro_files"] = os.listdir(ro)
            good = os.path.join(base, "good.json")
            def good_func():
                return 1
            ocular.start_tracing(output=good)
            good_func()
            res = ocular.stop_tracing()
            out["good_events"] = res.events
            with open(good) as f:
                out["good_ok"] = json.load(f)["displayTimeUnit"] == "ns"
        finally:
            os.chmod(ro, 0o755)
            shutil.rmtree(base)
        print(json.dumps(out))
    """
    p = run_py(code)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["probe"] == "refused", "the directory must really refuse new files for this test to mean anything"
    assert out["error"] == "PermissionError", out
    assert "not writable" in out["message"]
    assert out["tracing"] is False
    assert "ocular" not in out["holders"]
    assert out["ro_files"] == []
    assert out["good_ok"] is True and out["good_events"] > 0


def test_output_temp_file_cannot_be_created_starts_nothing(trace_path, tmp_path):
    # The directory checks pass, but the engine cannot create the temp file (its name is taken by
    # a directory): start_tracing raises OSError, holds no tool id and leaves no file behind.
    blocker = f"{trace_path}.{os.getpid()}.tmp"
    os.mkdir(blocker)
    with pytest.raises(OSError):
        ocular.start_tracing(output=trace_path)
    assert not os.path.exists(trace_path)
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(blocker)]
    os.rmdir(blocker)
    assert_nothing_started(tmp_path)


def test_output_temp_file_open_error_keeps_errno(trace_path):
    blocker = f"{trace_path}.{os.getpid()}.tmp"
    os.mkdir(blocker)
    try:
        with pytest.raises(OSError) as ei:
            ocular.start_tracing(output=trace_path)
    finally:
        os.rmdir(blocker)
    assert ei.value.errno == errno.EISDIR
    assert isinstance(ei.value, IsADirectoryError)


@pytest.mark.parametrize("tool_id", [-1, 6, 100])
def test_tool_id_out_of_range(tmp_path, tool_id):
    with pytest.raises(ValueError, match="tool_id"):
        ocular.start_tracing(tool_id=tool_id, output=str(tmp_path / "t.json"))
    assert_nothing_started(tmp_path)


@pytest.mark.parametrize("tool_id", ["2", 2.0, True])
def test_tool_id_not_an_int(tmp_path, tool_id):
    with pytest.raises(TypeError, match="tool_id"):
        ocular.start_tracing(tool_id=tool_id, output=str(tmp_path / "t.json"))
    assert_nothing_started(tmp_path)


# ---------------------------------------------------------------------------------------------
# session life cycle


def test_start_while_running_keeps_the_session(tmp_path):
    first = tmp_path / "first.json"
    second = tmp_path / "second.json"
    ocular.start_tracing(output=str(first))
    try:
        holders = _holders()
        with pytest.raises(RuntimeError, match="already running"):
            ocular.start_tracing(output=str(second))
        # the refused call changed nothing: same session, same tool id, still recording
        assert ocular.is_tracing()
        assert _holders() == holders
        _work()
    finally:
        res = ocular.stop_tracing()
    assert res.output == str(first)
    assert res.events > 0
    assert not second.exists()
    data = load_trace(str(first))
    check_balanced(data["traceEvents"])
    assert "_leaf" in names(data["traceEvents"])
    assert sorted(os.listdir(tmp_path)) == ["first.json"]


def test_the_running_session_holds_its_checked_options(tmp_path):
    """ocular._current: the running Session (_session.py), its options in the engine's form; None around it."""
    from ocular._session import Session

    assert ocular._current is None
    ocular.start_tracing(output=str(tmp_path / "t.json"), mode="precise", deinstrument_threshold=7, ring="2M",
                         exclude=["zzz"], loops="off", stall_ms=5, report=False)
    try:
        s = ocular._current
        assert isinstance(s, Session)
        o = s.options
        assert (o.mode, o.threshold, o.ring, o.exclude, o.loops, o.stall_ms, o.format) == \
            ("precise", 7, 2 << 20, ("zzz",), 2, 5, "json")
        assert s.output == o.output == str(tmp_path / "t.json") and s.pid == os.getpid() and not s.forked
        assert s.tool_id in (3, 4, 5) and sys.monitoring.get_tool(s.tool_id) == "ocular"
        assert s.recording.startswith(str(tmp_path))  # (a ring keeps it in memory: no file)
        assert {"ccall", "leave"} <= set(s.own_cost)  # (what one event costs, measured at this start)
    finally:
        ocular.stop_tracing()
    assert ocular._current is None


def test_stop_when_not_running():
    with pytest.raises(RuntimeError, match="not running"):
        ocular.stop_tracing()
    assert not ocular.is_tracing()


def test_stop_twice(trace_path):
    ocular.start_tracing(output=trace_path)
    ocular.stop_tracing()
    with pytest.raises(RuntimeError, match="not running"):
        ocular.stop_tracing()


def test_stop_returns_trace_result(trace_path):
    ocular.start_tracing(output=trace_path)
    _work()
    res = ocular.stop_tracing()
    assert isinstance(res, ocular.TraceResult)
    assert res.events > 0 and res["events"] == res.events
    assert res.output == os.path.abspath(trace_path)
    assert res.mode == "adaptive"
    assert res.tool_id in range(6)
    assert res.bytes == os.path.getsize(trace_path)
    assert res.dropped == 0
    assert res.threads >= 1 and res.codes >= 1
    assert "tmp_output" not in res
    with pytest.raises(AttributeError):
        res.no_such_key


def test_pathlike_output_and_precise_mode(tmp_path):
    out = tmp_path / "p.json"
    ocular.start_tracing(mode="precise", output=out)
    _work()
    res = ocular.stop_tracing()
    assert res.mode == "precise"
    assert res.output == str(out)
    data = load_trace(str(out))
    assert data["otherData"]["mode"] == "precise"
    check_balanced(data["traceEvents"])


def test_context_manager_writes_file(trace_path):
    with ocular.tracing(output=trace_path) as h:
        assert ocular.is_tracing()
        _work()
    assert not ocular.is_tracing()
    assert h.result.output == trace_path and h.result.events > 0
    data = load_trace(trace_path)
    check_balanced(data["traceEvents"])
    assert "_leaf" in names(data["traceEvents"])


def test_context_manager_stops_when_block_raises(trace_path, tmp_path):
    class Boom(Exception):
        pass

    with pytest.raises(Boom, match="from the block"):
        with ocular.tracing(output=trace_path) as h:
            _work()
            raise Boom("from the block")
    assert not ocular.is_tracing()
    assert "ocular" not in _holders()
    assert h.result is not None and h.result.events > 0
    data = load_trace(trace_path)
    check_balanced(data["traceEvents"])
    assert "_leaf" in names(data["traceEvents"])
    assert os.listdir(tmp_path) == ["trace.json"]


def test_context_manager_bad_arguments_start_nothing(tmp_path):
    with pytest.raises(ValueError):
        with ocular.tracing(mode="bogus", output=str(tmp_path / "t.json")):
            pytest.fail("the block must not run")
    assert_nothing_started(tmp_path)


def test_perfetto_false_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default output name would land here
    out = tmp_path / "t.json"
    ocular.start_tracing(perfetto=False, output=str(out))
    try:
        _work()
        assert os.listdir(tmp_path) == []  # not even a temp file
    finally:
        res = ocular.stop_tracing()
    assert res.output is None
    assert res.events > 0
    assert os.listdir(tmp_path) == []
    # and with the default output name
    ocular.start_tracing(perfetto=False)
    _work()
    res = ocular.stop_tracing()
    assert res.output is None
    assert os.listdir(tmp_path) == []


def test_temp_name_while_tracing_final_name_after(tmp_path):
    out = tmp_path / "trace.json"
    ocular.start_tracing(output=str(out))
    try:
        _work()
        during = sorted(os.listdir(tmp_path))
    finally:
        res = ocular.stop_tracing()
    assert not any(n == "trace.json" for n in during)
    assert during == [f"trace.json.{os.getpid()}.tmp"]
    after = sorted(os.listdir(tmp_path))
    assert after == ["trace.json"]
    assert res.output == str(out)
    load_trace(str(out))


def test_existing_output_is_replaced(trace_path):
    with open(trace_path, "w") as f:
        f.write("old content, not JSON")
    ocular.start_tracing(output=trace_path)
    try:
        with open(trace_path) as f:  # the old file stays untouched while tracing
            assert f.read() == "old content, not JSON"
        _work()
    finally:
        ocular.stop_tracing()
    check_balanced(load_trace(trace_path)["traceEvents"])


def test_twenty_sessions_in_a_row(tmp_path):
    results = []
    for i in range(20):
        out = tmp_path / f"t{i}.json"
        ocular.start_tracing(output=str(out), mode="precise" if i % 5 == 4 else "adaptive")
        try:
            _work(5)
        finally:
            results.append(ocular.stop_tracing())
        assert not ocular.is_tracing()
        assert "ocular" not in _holders()
    assert sorted(os.listdir(tmp_path)) == sorted(f"t{i}.json" for i in range(20))
    for i, res in enumerate(results):
        assert res.output == str(tmp_path / f"t{i}.json")
        assert res.events > 0
        data = load_trace(res.output)
        check_balanced(data["traceEvents"])
        assert names(data["traceEvents"]).count("_leaf") == 5, i


def _hot(i):
    return i + 1


def test_new_session_traces_code_deinstrumented_in_previous_session(tmp_path):
    ocular.start_tracing(output=str(tmp_path / "a.json"), deinstrument_threshold=50, near_zero=True, sampling=False)
    for i in range(200):  # past the threshold: _hot answers DISABLE (near-zero mode)
        _hot(i)
    ocular.stop_tracing()
    assert names(load_trace(str(tmp_path / "a.json"))["traceEvents"]).count("_hot") == 50

    ocular.start_tracing(output=str(tmp_path / "b.json"), deinstrument_threshold=50, near_zero=True, sampling=False)
    for i in range(10):
        _hot(i)
    ocular.stop_tracing()
    # counters are per session: the second session sees its 10 calls
    assert names(load_trace(str(tmp_path / "b.json"))["traceEvents"]).count("_hot") == 10


# ---------------------------------------------------------------------------------------------
# command line


def run_cli(*args, cwd=None, timeout=60):
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "ocular", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


SCRIPT = """\
import json, sys

def script_func(n):
    return n * 3

script_func(2)
with open(sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].endswith(".out") else "info.out", "w") as f:
    json.dump({"argv": sys.argv, "name": __name__, "path0": sys.path[0]}, f)
"""


def test_cli_script_argv_name_and_trace(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    info = tmp_path / "x.out"
    out = tmp_path / "cli.json"
    p = run_cli("-o", str(out), str(script), str(info), "a", "b", "--mode", "-o", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    got = json.loads(info.read_text())
    # everything after the script belongs to the script, even options that look like ours
    assert got["argv"] == [str(script), str(info), "a", "b", "--mode", "-o"]
    assert got["name"] == "__main__"
    assert got["path0"] == str(tmp_path)
    data = load_trace(str(out))
    check_balanced(data["traceEvents"])
    assert "script_func" in names(data["traceEvents"])
    assert "trace written to" in p.stderr


def test_cli_script_plain_args(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    p = run_cli("-o", str(tmp_path / "t.json"), str(script), "a", "b", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    got = json.loads((tmp_path / "info.out").read_text())
    assert got["argv"] == [str(script), "a", "b"]
    assert got["name"] == "__main__"


def test_cli_sys_exit_status_and_trace(tmp_path):
    script = tmp_path / "exits.py"
    script.write_text("import sys\n\ndef before_exit():\n    return 1\n\nbefore_exit()\nsys.exit(3)\n")
    out = tmp_path / "t.json"
    p = run_cli("-o", str(out), str(script))
    assert p.returncode == 3, p.stderr
    data = load_trace(str(out))
    check_balanced(data["traceEvents"])
    assert "before_exit" in names(data["traceEvents"])
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


def test_cli_uncaught_exception(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("def failing_func():\n    raise KeyError('distinctive-key-42')\n\nfailing_func()\n")
    out = tmp_path / "t.json"
    p = run_cli("-o", str(out), str(script))
    assert p.returncode == 1
    assert "Traceback" in p.stderr
    assert "KeyError: 'distinctive-key-42'" in p.stderr
    assert "failing_func" in p.stderr
    data = load_trace(str(out))
    check_balanced(data["traceEvents"])
    assert "failing_func" in names(data["traceEvents"])


def test_cli_dash_c(tmp_path):
    out = tmp_path / "t.json"
    info = tmp_path / "c.out"
    code = ("import json, sys\n"
            "def from_dash_c():\n    return 5\n"
            "from_dash_c()\n"
            f"json.dump({{'argv': sys.argv, 'name': __name__}}, open({str(info)!r}, 'w'))\n")
    p = run_cli("-o", str(out), "-c", code, "x", "-y")
    assert p.returncode == 0, p.stderr
    got = json.loads(info.read_text())
    assert got["argv"] == ["-c", "x", "-y"]
    assert got["name"] == "__main__"
    data = load_trace(str(out))
    check_balanced(data["traceEvents"])
    assert "from_dash_c" in names(data["traceEvents"])


def test_cli_dash_m(tmp_path):
    (tmp_path / "clitarget_mod.py").write_text(
        "import json, sys\n"
        "def from_dash_m():\n    return 7\n"
        "from_dash_m()\n"
        "if __name__ == '__main__':\n"
        "    json.dump({'argv': sys.argv, 'name': __name__}, open('m.out', 'w'))\n")
    out = tmp_path / "t.json"
    p = run_cli("-o", str(out), "-m", "clitarget_mod", "a", "--b", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    got = json.loads((tmp_path / "m.out").read_text())
    assert got["name"] == "__main__"
    assert got["argv"][1:] == ["a", "--b"]
    assert os.path.samefile(got["argv"][0], tmp_path / "clitarget_mod.py")
    data = load_trace(str(out))
    check_balanced(data["traceEvents"])
    assert "from_dash_m" in names(data["traceEvents"])


def test_cli_bad_mode_exits_2(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("open('ran.out', 'w').close()\n")
    p = run_cli("--mode", "bogus", "-o", str(tmp_path / "t.json"), str(script), cwd=tmp_path)
    assert p.returncode == 2
    assert "bogus" in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["s.py"]  # the program did not run, no trace


def test_cli_bad_output_exits_2(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("open('ran.out', 'w').close()\n")
    p = run_cli("-o", str(tmp_path / "missing" / "t.json"), str(script), cwd=tmp_path)
    assert p.returncode == 2
    assert "does not exist" in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["s.py"]


def test_cli_help():
    p = run_cli("--help")
    assert p.returncode == 0
    assert "--threshold" in p.stdout
    assert "--mode" in p.stdout


THREADS_AFTER_MAIN = """\
import threading, time

go = threading.Event()
def late_call(i):
    return i

def worker():
    go.wait()
    for i in range(200):
        late_call(i)
    open("worker.out", "w").write("done")

for _ in range(2):
    threading.Thread(target=worker).start()  # non-daemon: the interpreter waits for them at exit
threading.Timer(0.2, go.set).start()
"""


@pytest.mark.parametrize("how", ["script", "-c", "-m"])
def test_cli_waits_for_non_daemon_threads_before_stopping(tmp_path, how):
    """The main module returns while two non-daemon threads still have 200 calls each to make: the CLI
    joins them as the interpreter does at exit (threading._shutdown) before stopping, so all 400 calls
    are in the trace, as they are with the API (whose atexit stop runs after that join)."""
    (tmp_path / "late.py").write_text(THREADS_AFTER_MAIN)
    out = tmp_path / "t.json"
    prog = {"script": ["late.py"], "-c": ["-c", THREADS_AFTER_MAIN], "-m": ["-m", "late"]}[how]
    p = run_cli("--threshold", "0", "--no-report", "-o", str(out), *prog, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "worker.out").read_text() == "done"
    ev = load_trace(str(out))["traceEvents"]
    check_balanced(ev)
    assert names(ev).count("late_call") == 400, names(ev).count("late_call")
