"""Shared test helpers: run Python snippets in a subprocess with Ocular importable, load and check traces,
and the watchdog that turns a hung test program into native backtraces in the log.

Which Ocular the tests use: the source tree (``src/``, with the extension built in place: ``make test``),
a copy of it (``OCULAR_TEST_SRC``: ``make test-asan``), or the package installed from the wheel
(``OCULAR_TEST_INSTALLED=1``: ``make test-installed``; nothing from ``src/`` is put on any path then,
and the session refuses to start if ``import ocular`` finds the source tree).

Watchdog: every wait for a child process (``subprocess.run``/``Popen.communicate``/``Popen.wait``, in any
test) has a timeout -- the one the test gives, else ``OCULAR_TEST_TIMEOUT`` seconds (default 600) -- and
when it expires, before the test kills the child and fails, gdb prints the native backtraces of every
thread of the child and of all its descendants (``gdb -p PID -batch -ex "thread apply all bt"``).  A test
that runs traced code in its own process is watched too: after ``OCULAR_TEST_TIMEOUT_TEST`` seconds
(default 1800) the backtraces of the pytest process (and its children) are printed and it exits.
"""

import bisect
import collections
import contextlib
import json
import os
import shlex
import subprocess
import sys
import textwrap

import pytest

from watchdog import native_backtraces

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALLED = os.environ.get("OCULAR_TEST_INSTALLED") == "1"


def _installed_root():
    """The directory that holds the installed `ocular` package (site-packages), checked not to be src/."""
    import ocular

    pkg = os.path.dirname(os.path.abspath(ocular.__file__))
    if os.path.commonpath([pkg, ROOT]) == ROOT and not os.path.relpath(pkg, ROOT).startswith(("build", ".venv")):
        raise RuntimeError(f"OCULAR_TEST_INSTALLED=1 but `import ocular` found the source tree: {pkg}")
    return os.path.dirname(pkg)


# the directory holding the `ocular` package the subprocesses import; `make test-asan` points it at a copy
# of the package built with the sanitizers; `make test-installed` at the installed package's site-packages
SRC = os.environ.get("OCULAR_TEST_SRC") or (_installed_root() if INSTALLED else os.path.join(ROOT, "src"))


def is_ocular_file(path):
    """Whether a recorded file name is one of Ocular's own files: under the directory of the package the
    subprocesses import (SRC/ocular), not any path that merely contains the word (a checkout in ~/ocular,
    with its venv's _distutils_hack or an editable install's import hook)."""
    pkg = os.path.join(SRC, "ocular")
    dirs = {os.path.join(os.path.abspath(pkg), ""), os.path.join(os.path.realpath(pkg), "")}
    return any(p.startswith(d) for p in (os.path.abspath(path), os.path.realpath(path)) for d in dirs)


# ---------------------------------------------------------------- watchdog ----
TIMEOUT = float(os.environ.get("OCULAR_TEST_TIMEOUT") or 600)
TEST_TIMEOUT = float(os.environ.get("OCULAR_TEST_TIMEOUT_TEST") or 1800)
_real_wait = subprocess.Popen.wait
_real_communicate = subprocess.Popen.communicate


def _dump_once(proc, timeout):
    if not getattr(proc, "_ocular_dumped", False) and proc.poll() is None:
        proc._ocular_dumped = True
        native_backtraces(proc.pid, f"{proc.args!r:.300} still running after {timeout:g} s")


def _watched_wait(self, timeout=None):
    t = TIMEOUT if timeout is None else timeout
    try:
        return _real_wait(self, timeout=t)
    except subprocess.TimeoutExpired:
        if t >= 1 and not getattr(self, "_ocular_communicating", False):  # a short poll is not a hang
            _dump_once(self, t)
        raise


def _watched_communicate(self, input=None, timeout=None):
    t = TIMEOUT if timeout is None else timeout
    self._ocular_communicating = True
    try:
        return _real_communicate(self, input=input, timeout=t)
    except subprocess.TimeoutExpired:
        if t >= 1:
            _dump_once(self, t)
        raise
    finally:
        self._ocular_communicating = False


def pytest_configure(config):
    # the programs the tests start see SIGTERM and SIGHUP at their defaults, as a shell gives them, however
    # pytest was started (nohup ignores SIGHUP, and an ignored disposition is inherited: Ocular then, rightly,
    # leaves it ignored and saves nothing on it, which tests/test_signals.py would take for a failure)
    import signal
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
    subprocess.Popen.wait = _watched_wait
    subprocess.Popen.communicate = _watched_communicate


def pytest_unconfigure(config):
    subprocess.Popen.wait = _real_wait
    subprocess.Popen.communicate = _real_communicate


_watcher = None  # the watchdog process of this pytest process (tests/watchdog.py)


@pytest.fixture(autouse=True)
def _test_watchdog(request):
    """A test running longer than TEST_TIMEOUT (e.g. traced code hung in this process): the watchdog
    process prints the native backtraces of this process and its children, then aborts it."""
    global _watcher
    if _watcher is None or _watcher.poll() is not None:
        # started with pytest's capture off: its output goes to the real stderr (the log), not into
        # the output captured for one test
        capman = request.config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            _watcher = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "watchdog.py"),
                                         str(os.getpid())], stdin=subprocess.PIPE, close_fds=True)
    try:
        _watcher.stdin.write(f"{TEST_TIMEOUT} {request.node.nodeid}\n".encode())
        _watcher.stdin.flush()
    except OSError:
        pass
    yield
    try:
        _watcher.stdin.write(b"0\n")
        _watcher.stdin.flush()
    except OSError:
        pass


def python_cmd():
    """The command that starts a test interpreter: this one, under $OCULAR_TEST_WRAPPER when it is set
    (`make test-valgrind` runs the traced programs under valgrind that way)."""
    return shlex.split(os.environ.get("OCULAR_TEST_WRAPPER", "")) + [sys.executable]


# Peak RSS of a command: run it from a small wrapper (ru_maxrss of a forked child counts its parent's RSS at
# the fork, so the measured process is not forked from pytest): prints the command's output, then its
# exit status and the peak RSS in KiB (RUSAGE_CHILDREN) on the last line.
RSS_CHILD = """
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(p.stdout)
sys.stderr.write(p.stderr)
print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


# Source text for test programs (interpreters of their own) to include: the process's thread count, and the
# OS names of its threads from a complete listing of /proc/self/task.  Linux ends such a listing early when
# the thread it stands on exits meanwhile, and the live threads after it are missed (175 in 1.6 M listings
# with older threads ending; CI once), so a listing counts only if it holds as many threads as the Threads:
# line says, before and after.
OS_THREADS = """
def thread_count():
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("Threads:")).split()[1])
def thread_names():
    import os
    while True:
        n, names = thread_count(), []
        for t in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{t}/comm") as f:
                    names.append(f.read().strip())
            except OSError:  # gone since
                pass
        if len(names) == n == thread_count():
            return sorted(names)
"""


def run_py(code, *args, cwd=None, env=None, timeout=120, check=True):
    """Run `code` (dedented) in a fresh interpreter (this one) with src/ on sys.path."""
    e = dict(os.environ)
    e["PYTHONPATH"] = SRC + os.pathsep + e.get("PYTHONPATH", "")
    if env:
        e.update(env)
    p = subprocess.run([*python_cmd(), "-c", textwrap.dedent(code), *args], cwd=cwd, env=e,
                       capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def load_trace(path, raw=False):
    """Parse a Chrome trace JSON file written by Ocular and check its envelope.  Ocular writes each
    function's slice as one complete event ("X", at its end); unless raw, they are given back as a
    begin and an end ("B"/"E"), every thread's events in time order, as a viewer reads them (see
    as_begin_end)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    assert isinstance(data, dict)
    assert data["displayTimeUnit"] == "ns"
    assert isinstance(data["traceEvents"], list)
    if not raw:
        data["traceEvents"] = as_begin_end(data["traceEvents"])
    return data


def _ns(us):
    return round(us * 1000)


def as_begin_end(events):
    """The function slices of a trace ("X" events not of category "loop") as "B"/"E" pairs, every thread's
    timed events in time order, as a viewer nests them: per thread, slices in order of their begins (the
    longest first among equal begins), each inside the open one that contains it (a slice of zero
    duration too), an end emitted once the next slice begins at or after it; other timed events (instants,
    loop runs) after the begins and ends of their nanosecond.  A slice's "E" has its end time; its "B"
    keeps the args (file, line, cut).  Untimed events (metadata) keep their order, last."""
    untimed, other, slices = [], collections.defaultdict(list), collections.defaultdict(list)
    for i, e in enumerate(events):
        if "ts" not in e:
            untimed.append(e)
        elif e.get("ph") == "X" and e.get("cat") != "loop":
            b, d = _ns(e["ts"]), _ns(e["dur"])
            slices[(e["pid"], e["tid"])].append((b, -d, i, e))
        else:
            other[(e.get("pid"), e.get("tid"))].append((_ns(e["ts"]), i, e))
    out = []
    for key in sorted(set(slices) | set(other), key=repr):
        seq, stack = [], []  # seq: (time, event); stack: (end, event)
        for b, negd, _, e in sorted(slices.get(key, ()), key=lambda s: s[:3]):
            end = b - negd
            while stack and not (end <= stack[-1][0]):
                top_end, top = stack.pop()
                seq.append((top_end, {"ph": "E", "pid": top["pid"], "tid": top["tid"], "ts": top_end / 1000}))
            begin = {k: v for k, v in e.items() if k != "dur"}
            begin["ph"] = "B"
            seq.append((b, begin))
            stack.append((end, e))
        while stack:
            top_end, top = stack.pop()
            seq.append((top_end, {"ph": "E", "pid": top["pid"], "tid": top["tid"], "ts": top_end / 1000}))
        times = [t for t, _ in seq]
        merged, k = [], 0
        for t, _, e in sorted(other.get(key, ()), key=lambda o: o[:2]):
            j = bisect.bisect_right(times, t)
            merged.extend(ev for _, ev in seq[k:j])
            k = max(k, j)
            merged.append(e)
        merged.extend(ev for _, ev in seq[k:])
        out.extend(merged)
    return out + untimed


def check_balanced(events):
    """Every B has an E on the same (pid, tid), properly nested, timestamps monotonic per thread.

    Returns {(pid, tid): [(name, begin_ts, end_ts, depth), ...]} of the reconstructed slices.  Complete
    events ("X") are read as a begin and an end first (as_begin_end).
    """
    events = _begin_end(events)
    stacks = collections.defaultdict(list)
    last_ts = {}
    slices = collections.defaultdict(list)
    for e in events:
        if e["ph"] not in ("B", "E", "i"):
            continue
        key = (e["pid"], e["tid"])
        ts = e["ts"]
        assert ts >= last_ts.get(key, float("-inf")), f"time goes backwards on {key}: {e}"
        last_ts[key] = ts
        if e["ph"] == "B":
            stacks[key].append(e)
        elif e["ph"] == "E":
            assert stacks[key], f"end without begin on {key} at {ts}"
            b = stacks[key].pop()
            slices[key].append((b["name"], b["ts"], ts, len(stacks[key])))
    for key, st in stacks.items():
        assert not st, f"begins without end on {key}: {[b['name'] for b in st]}"
    return slices


def _begin_end(events):
    """events as as_begin_end gives them, if they hold a function slice as a complete event"""
    if any(e.get("ph") == "X" and e.get("cat") != "loop" for e in events):
        return as_begin_end(events)
    return events


def names(events, ph="B"):
    return [e["name"] for e in _begin_end(events) if e["ph"] == ph]


@pytest.fixture
def trace_path(tmp_path):
    return str(tmp_path / "trace.json")


def run_on_pty(cmd, cwd, env, timeout=120):
    """Run cmd with its stderr on a pseudo-terminal; returns (exit status, what it wrote there)."""
    import pty

    master, slave = pty.openpty()
    try:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=slave)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        return p.wait(timeout=timeout), out.decode(errors="replace")
    finally:
        os.close(master)


@contextlib.contextmanager
def small_tmpfs(path, size):
    """A tmpfs of `size` (mount's syntax: "256k", "1m") mounted at `path` (made here) for the block, to
    fill a disk; the test is skipped, saying why, where mounting is not permitted."""
    path.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        reason = f"cannot mount a small tmpfs (needs root): {mount.stderr.strip()}"
        print(reason)
        pytest.skip(reason)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)
