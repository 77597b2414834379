"""``python -m ocular attach PID``: tracing a running process through sys.remote_exec (PEP 768).

Attaching needs Python 3.14+ on both sides; on an older Python only the refusal of the attach command
itself (and the pieces that need no attaching) are tested here, and the rest skip, saying why.  The
targets are subprocesses running a known workload (a loop calling ``attach_workload``) that print
``ready`` once it runs; the attach command runs in its own subprocess, as a user would run it.  Waits
are bounded by timeouts only (a hung attach fails the test), never by timing assertions.
"""

import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings

import pytest

from conftest import SRC, check_balanced, load_trace

from ocular import _attach

HAS_ATTACH = sys.version_info >= (3, 14)
WHY_NOT = (f"attach needs Python 3.14+ (sys.remote_exec, PEP 768); this is "
           f"{sys.version.split()[0]}")
TIMEOUT = 120

WORKLOAD = textwrap.dedent("""
    import os, sys, threading, time

    def attach_workload(i):
        return i * 2

    def in_thread(i):
        return i + 1

    def worker():
        while True:
            for i in range(200):
                in_thread(i)
            time.sleep(0.005)

    threading.Thread(target=worker, name="worker", daemon=True).start()
    stop = sys.argv[1] if len(sys.argv) > 1 else None
    if len(sys.argv) > 2 and sys.argv[2] == "block":
        sys.stdin.readline()  # the main thread blocked in a system call until the test says go
    attach_workload(0)
    print("ready", flush=True)
    while not (stop and os.path.exists(stop)):
        for i in range(200):
            attach_workload(i)
        time.sleep(0.005)
    print("done", flush=True)
""")


_said = set()


def _say_skip(reason):
    """Skip, and say why (once per reason): pytest lists skip reasons only with -rs, but always shows
    warnings."""
    if reason not in _said:
        _said.add(reason)
        warnings.warn(f"test_attach skipped: {reason}", UserWarning, stacklevel=2)
    pytest.skip(reason)


@pytest.fixture
def needs_attach():
    if not HAS_ATTACH:
        _say_skip(WHY_NOT)


def _env(extra=None, drop=()):
    e = dict(os.environ)
    e["PYTHONPATH"] = SRC + os.pathsep + e.get("PYTHONPATH", "")
    for k in ("PYTHON_DISABLE_REMOTE_DEBUG", *drop):
        e.pop(k, None)
    if extra:
        e.update(extra)
    return e


def _python(minor):
    """An interpreter of Python 3.<minor>: pyenv's, the prefixes of ../shared/tools/get-python.sh, PATH."""
    if (3, minor) == sys.version_info[:2]:
        return sys.executable
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = sorted(glob.glob(f"{root}/versions/3.{minor}.*/bin/python3.{minor}"))
    found += glob.glob(f"/opt/ocular-pythons/3.{minor}/bin/python3.{minor}")
    which = shutil.which(f"python3.{minor}")
    return (found + [which])[0] if found or which else None


class Target:
    """A Python process running WORKLOAD; `stop` (a path) ends it when created."""

    def __init__(self, tmp, python=None, args=(), env=None, block=False, cwd=None, preexec=None, wrapper=()):
        fd, self.script = tempfile.mkstemp(suffix="_target.py", dir=tmp)
        with os.fdopen(fd, "w") as f:
            f.write(WORKLOAD)
        os.chmod(self.script, 0o644)
        self.stop = os.path.join(tmp, os.path.basename(self.script) + ".stop")
        cmd = [*wrapper, python or sys.executable, *args, self.script, self.stop] + (["block"] if block else [])
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env if env is not None else _env(), cwd=cwd or tmp,
                                     preexec_fn=preexec)
        self.pid = self.proc.pid
        if not block:
            self.wait_ready()

    def wait_ready(self):
        line = self.proc.stdout.readline()
        assert line == "ready\n", f"target did not start: {line!r}, exit {self.proc.poll()}"

    def alive(self):
        return self.proc.poll() is None

    def close(self):
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            f.close()


@pytest.fixture
def targets(tmp_path):
    made = []

    def make(directory=None, **kw):
        t = Target(directory or str(tmp_path), **kw)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


def attach(*args, python=None, env=None, cwd=None, preexec=None):
    return subprocess.run([python or sys.executable, "-m", "ocular", "attach", *map(str, args)],
                          env=env if env is not None else _env(), cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT, preexec_fn=preexec)


def attach_bg(*args, cwd=None):
    return subprocess.Popen([sys.executable, "-m", "ocular", "attach", *map(str, args)], env=_env(), cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_until(stream, needle):
    """Lines of `stream` up to and including the first that holds `needle`; fails if none does."""
    lines = []
    for line in stream:
        lines.append(line)
        if needle in line:
            return "".join(lines)
    raise AssertionError(f"no {needle!r} in the attach command's output:\n{''.join(lines)}")


def workload_calls(path, pid):
    data = load_trace(path)
    events = data["traceEvents"]
    check_balanced(events)
    return [e for e in events if e["ph"] == "B" and e["name"] == "attach_workload" and e["pid"] == pid]


def refused(p, *needles):
    """Exit status 2 and one line `ocular: ...` holding every needle; no traceback."""
    assert p.returncode == 2, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ocular: "), p.stderr
    for n in needles:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"
    return lines[0]


@contextlib.contextmanager
def killed_at_the_end(proc):
    """A background attach command, killed if the test leaves it running."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def no_session_left(directory):
    left = glob.glob(os.path.join(directory, ".ocular-attach.*"))
    assert not left, f"session directories left behind: {left}"


# ---------------------------------------------------------------------------------------------------
# attaching and tracing
# ---------------------------------------------------------------------------------------------------

def test_duration_traces_the_running_workload(needs_attach, targets, tmp_path):
    t = targets()
    here = tmp_path / "here"
    here.mkdir()
    p = attach(t.pid, "--duration", "1", "-o", "rel.json", "--threshold", "0", cwd=here)
    assert p.returncode == 0, p.stderr
    out = str(here / "rel.json")  # resolved on the attaching side, not in the target's directory
    assert f"trace written to {out} (" in p.stderr
    assert "stopped after 1 s" in p.stderr
    assert "attach_workload" in p.stderr  # the report is printed here, not in the target
    calls = workload_calls(out, t.pid)
    assert calls
    assert all(c["args"]["file"] == t.script and c["tid"] == t.pid for c in calls)
    # every thread is traced, not only the main thread that ran the attach script
    events = load_trace(out)["traceEvents"]
    worker = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
              and e["args"]["name"] == "worker"}
    assert len(worker) == 1, worker
    assert any(e["ph"] == "B" and e["name"] == "in_thread" and e["tid"] in worker for e in events)
    assert t.alive()  # the target goes on, untraced
    no_session_left(str(here))
    # tracing was stopped in the target: it can be attached to again, in another format
    p = attach(t.pid, "--duration", "0.2", "-o", str(tmp_path / "again.pftrace"), "--no-report", "-q")
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    assert os.path.getsize(tmp_path / "again.pftrace") > 0
    assert t.alive()


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_signal_stops_and_saves(needs_attach, targets, tmp_path, sig):
    t = targets()
    out = str(tmp_path / "int.json")
    a = attach_bg(t.pid, "-o", out, *(["--report-json"] if sig == "SIGTERM" else []))
    try:
        seen = read_until(a.stderr, "ocular: tracing process")
        assert f"ocular: tracing process {t.pid}" in seen, seen
        a.send_signal(getattr(signal, sig))
        rest = a.communicate(timeout=TIMEOUT)[1]
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    assert a.returncode == 0, seen + rest
    assert ("stopped on ^C" if sig == "SIGINT" else "stopped on SIGTERM") in rest
    assert workload_calls(out, t.pid)
    if sig == "SIGTERM":  # the report, as JSON, printed by the attach command
        report = [json.loads(line) for line in rest.splitlines() if line.startswith("{")]
        assert len(report) == 1 and "attach_workload" in json.dumps(report[0]["functions"]), rest
    assert t.alive()
    no_session_left(str(tmp_path))


def test_target_exit_stops_and_saves(needs_attach, targets, tmp_path):
    t = targets()
    out = str(tmp_path / "exit.json")
    a = attach_bg(t.pid, "-o", out, "--no-report")
    try:
        seen = read_until(a.stderr, "ocular: tracing process")
        with open(t.stop, "w"):
            pass
        rest = a.communicate(timeout=TIMEOUT)[1]
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    assert a.returncode == 0, seen + rest
    assert "stopped when the process exited" in rest
    assert t.proc.wait(TIMEOUT) == 0
    assert workload_calls(out, t.pid)
    no_session_left(str(tmp_path))


def test_killed_target_is_reported(needs_attach, targets, tmp_path):
    t = targets()
    out = str(tmp_path / "killed.json")
    a = attach_bg(t.pid, "-o", out)
    try:
        seen = read_until(a.stderr, "ocular: tracing process")
        t.proc.kill()
        rest = a.communicate(timeout=TIMEOUT)[1]
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    assert a.returncode == 1, seen + rest
    assert f"process {t.pid} ended without saving the trace" in rest
    assert not os.path.exists(out)
    no_session_left(str(tmp_path))


def test_killed_attacher_stops_tracing_and_saves(needs_attach, targets, tmp_path):
    """The target sees end of file on the control FIFO: it saves the trace and removes the session."""
    t = targets()
    out = str(tmp_path / "orphan.json")
    a = attach_bg(t.pid, "-o", out)
    try:
        read_until(a.stderr, "ocular: tracing process")
    finally:
        a.kill()
        a.communicate()
    deadline = time.monotonic() + TIMEOUT  # a bound on waiting, not a timing assertion
    while not os.path.exists(out) and t.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert workload_calls(out, t.pid)
    while glob.glob(str(tmp_path / ".ocular-attach.*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    no_session_left(str(tmp_path))
    assert t.alive()


def test_interrupt_while_the_main_thread_is_blocked(needs_attach, targets, tmp_path):
    """The script waits for the target's next bytecode; ^C before then calls the attach off, and the
    target, when it runs the script, does nothing but remove the session."""
    t = targets(block=True)
    out = str(tmp_path / "never.json")
    a = attach_bg(t.pid, "-o", out)
    try:
        seen = read_until(a.stderr, "ocular: waiting for process")
        assert "waiting for process" in seen, seen
        a.send_signal(signal.SIGINT)
        rest = a.communicate(timeout=TIMEOUT)[1]
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    assert a.returncode == 130, seen + rest
    assert "interrupted before process" in rest
    assert glob.glob(str(tmp_path / ".ocular-attach.*"))  # left for the target to remove
    t.proc.stdin.write("go\n")
    t.proc.stdin.flush()
    t.wait_ready()
    deadline = time.monotonic() + TIMEOUT
    while glob.glob(str(tmp_path / ".ocular-attach.*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    no_session_left(str(tmp_path))
    assert not os.path.exists(out)
    # the target is not tracing: attaching now works
    p = attach(t.pid, "--duration", "0.2", "-o", out, "--no-report", "-q")
    assert p.returncode == 0, p.stderr
    assert workload_calls(out, t.pid)


def test_one_attach_at_a_time_and_a_superseded_session_is_removed(needs_attach, targets, tmp_path):
    """CPython keeps one pending attach script per process: a second attach while the first waits would
    replace its script and leave the first waiting for ever.  It is refused; once the first gave up (^C),
    the next attach replaces the first's never-run script and removes its session directory."""
    t = targets(block=True)
    with killed_at_the_end(attach_bg(t.pid, "-o", str(tmp_path / "a.json"))) as a:
        read_until(a.stderr, "ocular: waiting for process")
        refused(attach(t.pid, "--duration", "0.2", "-o", str(tmp_path / "b.json")), "another", "waiting for it")
        a.send_signal(signal.SIGINT)
        a.communicate(timeout=TIMEOUT)
    assert a.returncode == 130
    assert glob.glob(str(tmp_path / ".ocular-attach.*"))  # the first one's, its script still pending
    with killed_at_the_end(attach_bg(t.pid, "--duration", "0.3", "-o", str(tmp_path / "c.json"), "--no-report")) as c:
        read_until(c.stderr, "ocular: waiting for process")  # (its script sent while the target is blocked)
        t.proc.stdin.write("go\n")
        t.proc.stdin.flush()
        t.wait_ready()
        c.communicate(timeout=TIMEOUT)
    assert c.returncode == 0
    assert workload_calls(str(tmp_path / "c.json"), t.pid)
    no_session_left(str(tmp_path))
    assert not os.path.exists(tmp_path / "a.json") and not os.path.exists(tmp_path / "b.json")


def test_root_attaches_to_another_users_process(needs_attach, targets):
    """The session directory is handed to the target's user, who writes the trace."""
    if os.geteuid() != 0:
        _say_skip("needs root (to run the target as another user)")
    shared = tempfile.mkdtemp(prefix="ocular-attach-test-")
    try:
        os.chmod(shared, 0o777)
        nobody = lambda: (os.setgid(65534), os.setuid(65534))  # noqa: E731
        t = targets(directory=shared, preexec=nobody)
        out = os.path.join(shared, "nobody.json")
        p = attach(t.pid, "--duration", "0.5", "-o", out, "--no-report")
        assert p.returncode == 0, p.stderr
        assert os.stat(out).st_uid == 65534
        assert workload_calls(out, t.pid)
        no_session_left(shared)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_target_that_cannot_write_the_output(needs_attach, targets):
    """The target writes the trace under its own user: start_tracing's refusal there comes back here."""
    if os.geteuid() != 0:
        _say_skip("needs root (to run the target as another user)")
    shared = tempfile.mkdtemp(prefix="ocular-attach-test-")
    try:
        os.chmod(shared, 0o755)  # root's: nobody may not create the trace in it
        nobody = lambda: (os.setgid(65534), os.setuid(65534))  # noqa: E731
        t = targets(directory=shared, preexec=nobody)
        out = os.path.join(shared, "t.json")
        refused(attach(t.pid, "--duration", "1", "-o", out), f"cannot start tracing in process {t.pid}",
                "is not writable")
        assert not os.path.exists(out)
        no_session_left(shared)
        assert t.alive()
    finally:
        shutil.rmtree(shared, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------
# refusals: exit status 2, one line
# ---------------------------------------------------------------------------------------------------

def test_no_such_process(needs_attach):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # reaped: the pid names no process now
    refused(attach(p.pid), f"no such process: {p.pid}")


def test_old_python_is_refused(tmp_path):
    if HAS_ATTACH:
        python = _python(13) or _python(12)
        if python is None:
            _say_skip("no Python 3.12 or 3.13 found (pyenv) to run the attach command on")
        if subprocess.run([python, "-c", "import ocular"], env=_env(), capture_output=True).returncode:
            _say_skip(f"Ocular is not built for {python} (make PYTHON={python} build)")
    else:
        python = sys.executable
    line = refused(attach(os.getpid(), python=python), "attach needs Python 3.14 or newer")
    assert "PEP 768" in line


@pytest.mark.parametrize("minor", [m for m in (12, 13, 14, 15) if m != sys.version_info[1]])
def test_other_python_version_is_refused(needs_attach, targets, minor):
    python = _python(minor)
    if python is None:
        _say_skip(f"no Python 3.{minor} found (pyenv, /opt/ocular-pythons, PATH)")
    t = targets(python=python, env=_env(drop=("PYTHONPATH",)))
    line = refused(attach(t.pid, "--duration", "1"), f"process {t.pid} runs Python 3.{minor}")
    if minor < 14:
        assert "needs Python 3.14 or newer in the target" in line
    else:
        assert "needs the same version" in line
    assert t.alive()


@pytest.mark.parametrize("how", ["env", "-X"])
def test_remote_debugging_disabled_in_target(needs_attach, targets, how):
    if how == "env":
        t = targets(env=_env({"PYTHON_DISABLE_REMOTE_DEBUG": "1"}))
        cause = "PYTHON_DISABLE_REMOTE_DEBUG is set in its environment"
    else:
        t = targets(args=("-X", "disable-remote-debug"))
        cause = "started with -X disable-remote-debug"
    refused(attach(t.pid, "--duration", "1"), f"remote debugging is disabled in process {t.pid}", cause)
    assert t.alive()


def test_remote_debugging_disabled_in_attacher(needs_attach, targets):
    t = targets()
    refused(attach(t.pid, env=_env({"PYTHON_DISABLE_REMOTE_DEBUG": "1"})),
            "remote debugging is disabled in this Python")


def test_ocular_not_importable_in_target(needs_attach, targets, tmp_path):
    # -I: neither PYTHONPATH nor the script's directory on sys.path; -S: nor site-packages (make
    # test-installed installs Ocular there), so no `ocular`
    t = targets(args=("-I", "-S"))
    out = tmp_path / "none.json"
    refused(attach(t.pid, "--duration", "1", "-o", out), f"Ocular is not importable in process {t.pid}",
            "(started with -I", "No module named 'ocular'")
    assert not out.exists()
    no_session_left(str(tmp_path))
    assert t.alive()


def test_already_traced_target(needs_attach, tmp_path):
    script = tmp_path / "w.py"
    script.write_text(WORKLOAD)
    stop = tmp_path / "stop"
    t = subprocess.Popen([sys.executable, "-m", "ocular", "--no-report", "-q", "-o", str(tmp_path / "own.json"),
                          str(script), str(stop)], stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert t.stdout.readline() == "ready\n"
        refused(attach(t.pid, "--duration", "1", "-o", tmp_path / "second.json"),
                f"process {t.pid} is already being traced by Ocular")
        assert t.poll() is None
        stop.touch()
        assert t.wait(TIMEOUT) == 0
        assert (tmp_path / "own.json").exists()  # its own session was not disturbed
    finally:
        if t.poll() is None:
            t.kill()
        t.wait()
        t.stdout.close()


def test_not_a_python_process(needs_attach):
    p = subprocess.Popen(["sleep", "60"])
    try:
        refused(attach(p.pid), f"process {p.pid}", "is not a Python process")
    finally:
        p.kill()
        p.wait()


def test_target_that_sees_other_files_is_refused(needs_attach, targets, tmp_path):
    """A target in its own mount namespace with a tmpfs over the output's directory would not find the
    session's files: refused before anything is sent."""
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    if os.geteuid() != 0 or not shutil.which("unshare"):
        _say_skip("needs root and unshare(1) to run a target in its own mount namespace")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs none {hidden}"], capture_output=True)
    if probe.returncode:
        _say_skip(f"cannot mount in a new mount namespace here: {probe.stderr.decode().strip()}")
    t = targets(wrapper=["unshare", "-m", "sh", "-c", 'mount -t tmpfs none "$0" && exec "$@"', str(hidden)])
    refused(attach(t.pid, "--duration", "1", "-o", hidden / "t.json"),
            f"process {t.pid} does not see {hidden} as this command does")
    assert not os.listdir(hidden)
    # the rest of the file system is shared: attaching with an output there works
    p = attach(t.pid, "--duration", "0.2", "-o", tmp_path / "shared.json", "--no-report")
    assert p.returncode == 0, p.stderr
    assert workload_calls(str(tmp_path / "shared.json"), t.pid)


def test_other_user_is_refused(needs_attach, targets, tmp_path):
    if os.geteuid() != 0:
        _say_skip("needs root (to run the attach command as another user than the target's)")
    t = targets()
    nobody = lambda: (os.setgid(65534), os.setuid(65534))  # noqa: E731
    refused(attach(t.pid, "-o", "/nonexistent/x.json", cwd="/", preexec=nobody),
            f"no permission to attach to process {t.pid}", "belongs to root")
    assert t.alive()


def test_bad_arguments():
    for args, needle in ((["abc"], "invalid process id value"), (["0"], "invalid process id value"),
                         ([str(os.getpid()), "--duration", "0"], "invalid number of seconds value"),
                         ([str(os.getpid()), "--duration", "nan"], "invalid number of seconds value")):
        p = attach(*args)
        assert p.returncode == 2, p.stderr
        assert needle in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_help():
    p = subprocess.run([sys.executable, "-m", "ocular", "attach", "--help"], env=_env(), capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert p.returncode == 0
    for needle in ("--duration", "sys.remote_exec", "PYTHON_DISABLE_REMOTE_DEBUG", "ptrace_scope"):
        assert needle in p.stdout
    p = subprocess.run([sys.executable, "-m", "ocular", "--help"], env=_env(), capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert "ocular attach" in p.stdout


# ---------------------------------------------------------------------------------------------------
# pieces that need no attaching (every version)
# ---------------------------------------------------------------------------------------------------

def test_version_of_a_process_is_read_from_its_files():
    hexversion, version, where = _attach._target_python(os.getpid())
    assert version == sys.version_info[:2], where
    if sys.version_info >= (3, 13):  # _Py_DebugOffsets (cookie and version) exist since 3.13
        assert hexversion == sys.hexversion, where


@pytest.mark.parametrize("scope, needle", [("1", "only a parent process may attach"),
                                           ("2", "only root"), ("3", "nobody may attach"),
                                           (None, "CAP_SYS_PTRACE")])
def test_ptrace_scope_is_explained(tmp_path, monkeypatch, scope, needle):
    path = tmp_path / "ptrace_scope"
    if scope is not None:
        path.write_text(scope + "\n")
    monkeypatch.setattr(_attach, "YAMA", str(path))
    msg = str(_attach._no_permission(1234, "Operation not permitted"))
    assert msg.startswith("no permission to attach to process 1234 (Operation not permitted): ")
    assert needle in msg
    assert "\n" not in msg


def test_stale_session_directories_of_dead_targets_are_removed(tmp_path):
    """A session directory is left when the attach is interrupted before its target ran the script and
    the target then dies.  The next attach into that directory removes those whose process is gone, and
    leaves a live process's (and anything else) alone.  (Any version: only the clean-up is run.)"""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".ocular-attach.{dead.pid}.abc123"
    live = tmp_path / f".ocular-attach.{os.getpid()}.def456"
    other = tmp_path / ".ocular-attach.notapid.x"
    for d in (stale, live, other):
        d.mkdir()
        (d / "script.py").write_text("pass\n")
    _attach._remove_stale_sessions(str(tmp_path))
    assert not stale.exists() and live.exists() and other.exists()
