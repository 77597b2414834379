"""USDT probes (provider "ocular"): ELF notes, the semaphore poller, bpftrace, gdb, the CLI flag.

The bpftrace tests need root (or CAP_BPF/CAP_PERFMON) and a kernel that allows BPF and uprobes; when
it does not, they print why and skip.  Targets run in subprocesses that start their workload only once
bpftrace has run its BEGIN block (all of its probes attached) and the probes' events are on
(ocular.usdt.wait_for_tracer), so the counts are exact.  Attaching is simulated without bpftrace by
writing a semaphore the way the kernel does (ctypes at the address readelf gives).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings

import pytest

from conftest import SRC, as_begin_end, run_py

import ocular.usdt  # importable thanks to PYTHONPATH=src
from ocular import _ocular

PROBES = ("py_start", "py_resume", "py_return", "py_yield", "py_unwind", "call", "line", "raise")
LIB = os.path.realpath(_ocular.__file__)

needs_probes = pytest.mark.skipif(not ocular.usdt.available(),
                                  reason=f"USDT probes compiled out: {ocular.usdt.reason()}")


def _say_skip(reason):
    """Skip, and say why: pytest lists skip reasons only with -rs, but always shows warnings."""
    warnings.warn(f"test_usdt skipped: {reason}", UserWarning, stacklevel=2)
    pytest.skip(reason)


def _env(extra=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = SRC + os.pathsep + e.get("PYTHONPATH", "")
    e.pop("OCULAR_USDT_POLL_MS", None)
    e.pop("OCULAR_USDT_WAIT", None)
    if extra:
        e.update(extra)
    return e


@pytest.fixture(scope="session")
def bpftrace():
    if not ocular.usdt.available():
        _say_skip(f"USDT probes compiled out: {ocular.usdt.reason()}")
    exe = shutil.which("bpftrace")
    if not exe:
        _say_skip("bpftrace is not installed (Debian: apt-get install bpftrace)")
    # a BPF program on one of our probes, in this process (where the probes are off): needs BPF and uprobes
    prog = 'usdt::ocular:py_start { @n = count(); } BEGIN { printf("ok\\n"); exit(); }'
    p = subprocess.run([exe, "-p", str(os.getpid()), "-e", prog], capture_output=True, text=True, timeout=60)
    if p.returncode != 0 or "ok" not in p.stdout:
        why = (p.stderr.strip().splitlines() or ["no output"])[-1]
        _say_skip(f"bpftrace cannot load BPF programs here (uid {os.getuid()}; kernel or permissions "
                  f"forbid BPF): {why}")
    return exe


@pytest.fixture
def short_tmp():
    """A short directory name: bpftrace's str() keeps 63 bytes by default."""
    d = tempfile.mkdtemp(prefix="ocu")
    yield d
    shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------
# helpers

TARGET_HEAD = """
import json, os, sys, time
import ocular.usdt as u
u.enable()
print("READY", os.getpid(), flush=True)
sys.stdin.readline()  # "go": bpftrace ran BEGIN, so every one of its probes is attached
if not u.wait_for_tracer({probes!r}, timeout=90):
    print("NO TRACER", json.dumps(u.status()), flush=True)
    sys.exit(3)
TOOL = u.status()["tool_id"]
"""

TARGET_TAIL = """
def stop_marker():
    pass
stop_marker()
deadline = time.monotonic() + 20
while time.monotonic() < deadline and u._ocular._usdt_info()["tool_id"] is not None:
    time.sleep(0.005)
st = u.status()
st["tool_before"] = TOOL
st["events_after"] = sys.monitoring.get_events(TOOL)
st["holder_after"] = sys.monitoring.get_tool(TOOL)
print("STATUS", json.dumps(st), flush=True)
"""

WORKLOAD = '''
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

class Box:
    def method(self):
        return 1

def outer():
    def inner():
        return 2
    return inner()

def gen(n):
    for i in range(n):
        yield i

def café():
    return 3

def work():
    fib(15)
    b = Box()
    for _ in range(10):
        b.method()
    for _ in range(7):
        outer()
    sum(gen(5))
    café()
'''


def write_target(directory, body, probes, name="work.py", pre=""):
    """A target script: `pre`, enable the probes, wait for the tracer, `body`, stop_marker(), wait for
    the detach, print STATUS."""
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent(pre) + TARGET_HEAD.format(probes=tuple(probes)) + textwrap.dedent(body)
                + TARGET_TAIL)
    return path


def lineno(path, text):
    """1-based number of the first line of `path` that is `text` once stripped."""
    lines = [ln.strip() for ln in open(path, encoding="utf-8").read().splitlines()]
    return lines.index(text) + 1


def start(argv, env=None, cwd=None):
    """Start a target; its stderr goes to a file, so a chatty target never blocks on a full pipe."""
    err = tempfile.TemporaryFile("w+", encoding="utf-8")
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                         env=_env(env), cwd=cwd, encoding="utf-8")
    p.err_file = err
    line = p.stdout.readline()
    if not line.startswith("READY"):
        out, _ = p.communicate(timeout=30)
        raise AssertionError(f"target did not start: {line}{out}\n{read_err(p)}")
    return p, int(line.split()[1])


def read_err(p):
    p.err_file.seek(0)
    return p.err_file.read()


def finish(p, timeout=90):
    out, _ = p.communicate(timeout=timeout)
    err = read_err(p)
    assert p.returncode == 0, f"target exit {p.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    m = re.search(r"^STATUS (.*)$", out, re.M)
    assert m, out + err
    return json.loads(m.group(1)), out, err


class Bpftrace:
    """bpftrace in the background, its stdout collected line by line by a thread."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     encoding="utf-8", errors="backslashreplace")
        self.lines = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)  # EOF
            self.cond.notify_all()

    def wait_line(self, pattern, timeout=90):
        """Wait for a stdout line matching `pattern`; False on EOF or timeout."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                if any(ln is not None and rx.search(ln) for ln in self.lines):
                    return True
                if None in self.lines or not self.cond.wait(max(0.0, deadline - time.monotonic())):
                    return False

    def stop(self, timeout=60):
        """Let bpftrace end (SIGINT if still running); returns (stdout, stderr).

        bpftrace 0.17 can miss a SIGINT that arrives while it prints (it then sleeps in epoll_wait
        until the next event), so the signal is repeated until it exits, as one presses Ctrl-C again."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=30)
        return "\n".join(ln for ln in self.lines if ln is not None) + "\n", self.proc.stderr.read()

    def wait_exit(self, target=None, timeout=120):
        """Wait for bpftrace to exit by itself; stop waiting if the target ends first."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            if target is not None and target.poll() is not None:
                time.sleep(1)
                break
            time.sleep(0.02)


READY_BEGIN = 'BEGIN { printf("BT_READY\\n"); } '


def run_bpftrace(exe, program, *args, pid=None, target=None, ready=r"^BT_READY$", timeout=120):
    """Run bpftrace on `target` (pid `pid`): once bpftrace's BEGIN has run (all its probes attached), tell
    the target to go; then wait until bpftrace exits (the programs exit() at stop_marker).  If the target
    ends first (a failure), bpftrace is interrupted instead of waiting for a marker that never comes."""
    argv = [exe, "-B", "line"]
    if pid is not None:
        argv += ["-p", str(pid)]
    argv += ["-e", READY_BEGIN + program] if "{" in program else [program]
    argv += list(args)
    bt = Bpftrace(argv)
    try:
        if bt.wait_line(ready, timeout=90) and target is not None:
            target.stdin.write("go\n")
            target.stdin.flush()
        bt.wait_exit(target, timeout)
    finally:
        out, err = bt.stop()
    if target is not None and target.poll() is not None and target.returncode != 0:
        tout, _ = target.communicate()
        terr = read_err(target)
        raise AssertionError(f"target exit {target.returncode}\nstdout:\n{tout}\nstderr:\n{terr}\n"
                             f"bpftrace:\n{out}\n{err}")
    assert bt.proc.returncode == 0, f"bpftrace exit {bt.proc.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    return out


def maps(text):
    """bpftrace's END dump -> {map: {key: value}} (keys as printed, e.g. 'fib' or 'fib, 3')."""
    out = {}
    for m in re.finditer(r"^@(\w*)\[(.*)\]: (-?\d+)$", text, re.M):
        out.setdefault(m.group(1), {})[m.group(2)] = int(m.group(3))
    for m in re.finditer(r"^@(\w*): (-?\d+)$", text, re.M):
        out.setdefault(m.group(1), {})[None] = int(m.group(2))
    return out


def stop_on_marker(target="::"):
    return f'usdt{target}ocular:py_start /str(arg0) == "stop_marker"/ {{ exit(); }}'


# ---------------------------------------------------------------------------------------------------
# without a tracer


def test_api_without_tracer():
    st = ocular.usdt.status()
    assert set(st["semaphores"]) == set(PROBES)
    assert ocular.usdt.PROBES == PROBES
    assert os.path.exists(ocular.usdt.library_path())
    assert ocular.usdt.script_path("calltree").endswith(os.path.join("bpftrace", "calltree.bt"))
    with pytest.raises(FileNotFoundError):
        ocular.usdt.script_path("nope")
    if not ocular.usdt.available():
        assert ocular.usdt.reason()
        with pytest.raises(RuntimeError, match="sdt.h|compiled out|Linux"):
            ocular.usdt.enable()


def check_probe_notes(lib):
    """readelf -n of `lib` lists each of PROBES (provider ocular) with its own semaphore -- the address of
    the symbol ocular_<name>_semaphore, inside .probes -- the right number of arguments, each of which a
    tracer can evaluate, and the base address of .stapsdt.base.  Returns readelf's notes."""
    notes = subprocess.run(["readelf", "-nW", lib], capture_output=True, text=True, check=True).stdout
    found = {}
    bases = set()
    for m in re.finditer(r"Provider: (\S+)\s+Name: (\S+)\s+Location: (0x[0-9a-f]+), Base: (0x[0-9a-f]+), "
                         r"Semaphore: (0x[0-9a-f]+)\s+Arguments: ([^\n]*)", notes):
        provider, name, loc, base, sema, args = m.groups()
        assert provider == "ocular"
        assert int(loc, 16) != 0, (name, loc)
        bases.add(int(base, 16))
        found.setdefault(name, set()).add((int(sema, 16), len(args.split())))
    assert set(found) == set(PROBES), notes
    syms = subprocess.run(["readelf", "-sW", lib], capture_output=True, text=True, check=True).stdout
    sections = subprocess.run(["readelf", "-SW", lib], capture_output=True, text=True, check=True).stdout
    sec = re.search(r"\]\s+\.probes\s+PROGBITS\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", sections)
    assert sec, sections
    lo, size = int(sec.group(1), 16), int(sec.group(2), 16)
    base = re.search(r"\]\s+\.stapsdt\.base\s+PROGBITS\s+([0-9a-f]+)", sections)
    assert base and bases == {int(base.group(1), 16)}, (bases, sections)
    nargs = {"call": 6, "raise": 6}
    for name, entries in found.items():
        for sema, n in entries:
            m = re.search(rf"^\s*\d+:\s+([0-9a-f]+)\s+2\s+OBJECT\s+\w+\s+\w+\s+\d+\s+ocular_{name}_semaphore$", syms,
                          re.M)
            assert m, f"no symbol ocular_{name}_semaphore"
            assert int(m.group(1), 16) == sema != 0, name
            assert lo <= sema < lo + size, f"{name}: semaphore outside .probes"
            assert n == nargs.get(name, 5), (name, n)
    # every argument is a register, a register-relative memory operand or a constant: what bpftrace and
    # gdb can evaluate (not, e.g., a %fs: thread-local operand)
    for args in re.findall(r"Arguments: ([^\n]*)", notes):
        for arg in args.split():
            assert re.fullmatch(r"-?[1248]@(%\w+|-?\d*\(%\w+\)|\$-?\d+|[xw]\d+|sp|\[\w+(, #?-?\d+)?\]|#-?\d+)",
                                arg), (arg, args)
    return notes


@needs_probes
def test_readelf_lists_probes_and_semaphores():
    if not shutil.which("readelf"):
        _say_skip("readelf (binutils) is not installed")
    check_probe_notes(LIB)


USDT_C = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "ocular", "_ext", "usdt.c")


def _build_usdt(tmp_path, cc, *flags):
    """usdt.c alone as a shared object, built by `cc` like setup.py builds the extension, with a
    <sys/sdt.h> first on the include path that fails the build if anything includes it.
    (-DOC_UNRESOLVED_OK: its references to the rest of the extension stay undefined, for the loader.)"""
    import sysconfig

    poison = tmp_path / "poison" / "sys"
    poison.mkdir(parents=True)
    (poison / "sdt.h").write_text('#error "sys/sdt.h was included: Ocular must build its probes without it"\n')
    out = tmp_path / "usdt.so"
    src = USDT_C
    cmd = [cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE", "-DOC_UNRESOLVED_OK",
           "-fvisibility=hidden", "-fPIC",
           "-shared", "-pthread", *flags, f"-I{tmp_path / 'poison'}", f"-I{sysconfig.get_paths()['include']}",
           src, "-o", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stderr}"
    return str(out)


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_probes_built_without_sys_sdt_h(tmp_path, cc):
    """Every build on x86-64 and aarch64 Linux has the probes, whether or not systemtap-sdt-dev is
    installed: usdt.c built with a <sys/sdt.h> that cannot be included still has all its notes."""
    import platform

    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"):
        _say_skip(f"Ocular's own probe notes are for x86-64 and aarch64 Linux, not {sys.platform} "
                  f"{platform.machine()}")
    if not shutil.which(cc):
        _say_skip(f"{cc} is not installed")
    if not shutil.which("readelf"):
        _say_skip("readelf (binutils) is not installed")
    check_probe_notes(_build_usdt(tmp_path, cc))


def test_own_notes_match_sys_sdt_h(tmp_path):
    """Where <sys/sdt.h> is installed, the probes it makes (-DOCULAR_USDT_SYS_SDT) are the same probes,
    with the same semaphores and argument counts, as Ocular's own notes."""
    import sysconfig

    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc or not shutil.which("readelf"):
        _say_skip("needs a C compiler and readelf")
    p = subprocess.run([cc, "-E", "-x", "c", "-", f"-I{sysconfig.get_paths()['include']}"],
                       input="#include <sys/sdt.h>\n", capture_output=True, text=True)
    if p.returncode != 0:
        _say_skip("<sys/sdt.h> is not installed (systemtap-sdt-dev): nothing to compare Ocular's notes with")

    def probes(notes):
        return sorted((m.group(1), m.group(2), len(m.group(3).split()))
                      for m in re.finditer(r"Provider: (\S+)\s+Name: (\S+)\s+Location: .*\s+Arguments: ([^\n]*)",
                                           notes))

    own = tmp_path / "own"
    sys_ = tmp_path / "sys"
    own.mkdir()
    sys_.mkdir()
    ours = check_probe_notes(_build_usdt(own, cc))
    theirs = subprocess.run(["readelf", "-nW", _build_usdt_sys(sys_, cc)], capture_output=True, text=True,
                            check=True).stdout
    assert set(probes(ours)) == set(probes(theirs)), (ours, theirs)


def _build_usdt_sys(tmp_path, cc):
    import sysconfig

    out = tmp_path / "usdt.so"
    src = USDT_C
    cmd = [cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-D_GNU_SOURCE", "-DOC_UNRESOLVED_OK", "-fvisibility=hidden",
           "-fPIC", "-shared", "-pthread", "-DOCULAR_USDT_SYS_SDT", f"-I{sysconfig.get_paths()['include']}", src, "-o",
           str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stderr}"
    return str(out)


SIMULATE = """
import ctypes, os, re, subprocess, sys, time
import ocular.usdt as u
from ocular import _ocular
LIB = os.path.realpath(_ocular.__file__)
SYMS = subprocess.run(["readelf", "-sW", LIB], capture_output=True, text=True, check=True).stdout
def _base():
    for line in open("/proc/self/maps"):
        f = line.split()
        if len(f) >= 6 and f[5] == LIB and int(f[2], 16) == 0:
            return int(f[0].split("-")[0], 16)
    raise RuntimeError("library not mapped")
def sema(name):
    m = re.search(r"^\\s*\\d+:\\s+([0-9a-f]+)\\s+2\\s+OBJECT.*\\socular_%s_semaphore$" % name, SYMS, re.M)
    return ctypes.c_ushort.from_address(_base() + int(m.group(1), 16))
def settle(pred, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.002)
    return False
def holders():
    return {i: sys.monitoring.get_tool(i) for i in range(6) if sys.monitoring.get_tool(i)}
E = sys.monitoring.events
"""


def run_sim(code):
    return run_py(SIMULATE + textwrap.dedent(code))


@needs_probes
def test_poller_follows_semaphores():
    """Attach simulated by bumping a semaphore the way the kernel does: exactly the events needed."""
    if not shutil.which("readelf"):
        _say_skip("readelf (binutils) is not installed")
    p = run_sim("""
    nthreads = len(os.listdir("/proc/self/task"))
    u.enable(poll_ms=2)
    assert len(os.listdir("/proc/self/task")) == nthreads + 1
    time.sleep(0.05)
    st = u.status()
    assert st["enabled"] and st["tool_id"] is None and st["events"] == 0 and st["applied"] == [], st
    assert "ocular-usdt" not in holders().values()

    expect = {"py_start": E.PY_START, "py_resume": E.PY_RESUME | E.PY_THROW, "py_return": E.PY_RETURN,
              "py_yield": E.PY_YIELD, "py_unwind": E.PY_UNWIND, "call": E.CALL, "line": E.LINE,
              "raise": E.RAISE}
    for name, ev in expect.items():
        s = sema(name)
        s.value += 1
        assert settle(lambda: u.status()["applied"] == [name]), (name, u.status())
        st = u.status()
        assert st["tool_id"] == 3 and holders()[3] == "ocular-usdt", st  # never 0-2 (pdb, coverage, cProfile)
        assert sys.monitoring.get_events(3) == ev == st["events"], (name, st)
        s.value -= 1
        assert settle(lambda: u.status()["tool_id"] is None), u.status()
        assert sys.monitoring.get_events(3) == 0 and sys.monitoring.get_tool(3) is None
    # two tracers on one probe, then one leaves: still on
    s = sema("py_start")
    s.value += 2
    assert settle(lambda: u.status()["applied"] == ["py_start"])
    s.value -= 1
    time.sleep(0.05)
    assert u.status()["applied"] == ["py_start"]
    # a second probe joins: both sets of events
    sema("line").value += 1
    assert settle(lambda: u.status()["applied"] == ["py_start", "line"])
    assert sys.monitoring.get_events(3) == E.PY_START | E.LINE
    u.disable()
    assert len(os.listdir("/proc/self/task")) == nthreads
    st = u.status()
    assert not st["enabled"] and st["tool_id"] is None and sys.monitoring.get_tool(3) is None, st
    s.value -= 1
    sema("line").value -= 1
    print("ok")
    """)
    assert p.stdout.strip().endswith("ok"), p.stdout + p.stderr


@needs_probes
def test_tool_id_etiquette():
    if not shutil.which("readelf"):
        _say_skip("readelf (binutils) is not installed")
    p = run_sim("""
    import cProfile
    prof = cProfile.Profile()
    prof.enable()                       # takes sys.monitoring.PROFILER_ID (2)
    sys.monitoring.use_tool_id(3, "other")
    u.enable(poll_ms=2)
    s = sema("py_start")
    s.value += 1
    assert settle(lambda: u.status()["applied"] == ["py_start"]), u.status()
    assert u.status()["tool_id"] == 4 and holders() == {2: "cProfile", 3: "other", 4: "ocular-usdt"}
    # someone frees and re-takes our id: we must not free theirs on detach
    sys.monitoring.free_tool_id(4)
    sys.monitoring.use_tool_id(4, "intruder")
    s.value -= 1
    assert settle(lambda: u.status()["tool_id"] is None)
    assert holders() == {2: "cProfile", 3: "other", 4: "intruder"}, holders()
    # 3, 4 and 5 taken: an error in status(), said once on stderr, nothing raised, 0 and 1 left free
    sys.monitoring.use_tool_id(5, "filler")
    s.value += 1
    assert settle(lambda: "tool ids 3, 4 and 5 are all in use" in u.status()["error"]), u.status()
    assert u.status()["applied"] == [] and u.status()["tool_id"] is None
    assert sys.monitoring.get_tool(0) is None and sys.monitoring.get_tool(1) is None
    sys.monitoring.free_tool_id(5)
    assert settle(lambda: u.status()["applied"] == ["py_start"], timeout=10), u.status()
    assert u.status()["tool_id"] == 5 and u.status()["error"] == ""
    s.value -= 1
    assert settle(lambda: u.status()["tool_id"] is None)
    prof.disable()
    u.disable()
    print("ok")
    """)
    assert p.stdout.strip().endswith("ok"), p.stdout + p.stderr
    assert p.stderr.count("tool ids 3, 4 and 5 are all in use") == 1, p.stderr


@needs_probes
def test_fork_restarts_poller():
    if not shutil.which("readelf"):
        _say_skip("readelf (binutils) is not installed")
    p = run_sim("""
    import warnings
    warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads running
    u.enable(poll_ms=2)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            assert len(os.listdir("/proc/self/task")) == 2  # main + a new poller
            s = sema("py_return")
            s.value += 1
            if settle(lambda: u.status()["applied"] == ["py_return"]):
                code = 0 if sys.monitoring.get_events(u.status()["tool_id"]) == E.PY_RETURN else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert u.status()["applied"] == [] and u.status()["tool_id"] is None  # the parent did not move
    print("ok")
    """)
    assert p.stdout.strip().endswith("ok"), p.stdout + p.stderr


@needs_probes
def test_probe_attached_after_a_thread_forked_child_lost_its_last_python_thread():
    """A child forked from a non-main thread whose Python threads have all ended, while the poller still
    runs (it ends at its next orphan check, up to 200 ms later): a probe attached in that gap (simulated:
    the last thread bumps a semaphore as it ends) makes the poller apply it.  It must not crash the child.
    (CI: CPython 3.12.1 aborted with "init_threadstate: thread state already initialized" -- a thread state
    made while the interpreter has none reuses the main thread's built-in one, which fork had left marked
    in use.  The poller now ends there instead, as its orphan check would have.)"""
    if not shutil.which("readelf"):
        _say_skip("readelf (binutils) is not installed")
    p = run_sim("""
    import threading, warnings
    warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads running
    u.enable(poll_ms=60000)   # in a fork child the poller still wakes every 200 ms (its orphan check)
    out, s = {}, sema("py_return")
    def last():
        time.sleep(0.05)
        s.value += 1   # the "attach", as this thread ends
        print("attached", file=sys.stderr)
    def forker():
        out["pid"] = pid = os.fork()
        if pid == 0:
            threading.Thread(target=last).start()
    t = threading.Thread(target=forker)
    t.start()
    t.join()
    _, status = os.waitpid(out["pid"], 0)
    print("child exit", os.waitstatus_to_exitcode(status))
    """)
    assert "child exit 0" in p.stdout and "attached" in p.stderr, p.stdout + p.stderr
    assert "Fatal Python error" not in p.stderr, p.stderr


@needs_probes
@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5", "60001"])
def test_poll_env_validation(value):
    p = run_py("""
    import ocular.usdt as u
    try:
        u.enable()
    except ValueError as exc:
        print("ValueError:", exc)
    print("enabled:", u.is_enabled())
    """, env={"OCULAR_USDT_POLL_MS": value})
    assert "ValueError: OCULAR_USDT_POLL_MS" in p.stdout and "enabled: False" in p.stdout, p.stdout
    assert "milliseconds" in p.stdout
    p = subprocess.run([sys.executable, "-m", "ocular", "--usdt", "--no-trace-file", "-c", "pass"],
                       capture_output=True, text=True, env=_env({"OCULAR_USDT_POLL_MS": value}))
    assert p.returncode == 2 and "OCULAR_USDT_POLL_MS" in p.stderr, p.stderr


@needs_probes
def test_poll_env_accepts_good_values():
    p = run_py("""
    import ocular.usdt as u
    u.enable()
    print(u.status()["poll_ms"])
    u.enable(poll_ms=3)
    print(u.status()["poll_ms"])
    """, env={"OCULAR_USDT_POLL_MS": " 25 "})
    assert p.stdout.split() == ["25", "3"]


@needs_probes
def test_cli_usdt_no_trace_file(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import ocular, ocular.usdt\nprint(ocular.is_tracing(), ocular.usdt.is_enabled())\n")
    p = subprocess.run([sys.executable, "-m", "ocular", "--usdt", "--no-trace-file", str(script)],
                       capture_output=True, text=True, env=_env(), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "True"]
    assert not list(tmp_path.glob("*.json"))
    out = tmp_path / "t.json"
    p = subprocess.run([sys.executable, "-m", "ocular", "--usdt", "-q", "-o", str(out), str(script)],
                       capture_output=True, text=True, env=_env(), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "True"]
    assert out.exists()


# ---------------------------------------------------------------------------------------------------
# bpftrace


@needs_probes
def test_bpftrace_counts_and_arguments(bpftrace, short_tmp):
    path = write_target(short_tmp, WORKLOAD + "\nwork()\n", ("py_start", "py_return", "py_yield", "py_resume"))
    assert len(path) < 60
    target, pid = start([sys.executable, path])
    prog = f"""
    usdt::ocular:py_start /str(arg1) == "{path}"/ {{ @start[str(arg0)] = count(); @tid_ok[arg4 == tid] = count(); }}
    usdt::ocular:py_start /str(arg0) == "fib"/ {{ @fib_where[str(arg1), arg2, arg3] = count(); }}
    usdt::ocular:py_return /str(arg1) == "{path}"/ {{ @ret[str(arg0)] = count(); }}
    usdt::ocular:py_yield /str(arg1) == "{path}"/ {{ @yield[str(arg0), arg2] = count(); }}
    usdt::ocular:py_resume /str(arg1) == "{path}"/ {{ @resume[str(arg0), arg2] = count(); }}
    {stop_on_marker()}
    """
    out = run_bpftrace(bpftrace, prog, pid=pid, target=target)
    st, tout, _ = finish(target)
    got = maps(out)
    assert got["start"]["fib"] == 1973 and got["ret"]["fib"] == 1973, out
    assert got["start"]["Box.method"] == got["ret"]["Box.method"] == 10, out
    assert got["start"]["outer"] == got["ret"]["outer"] == 7, out
    assert got["start"]["outer.<locals>.inner"] == got["ret"]["outer.<locals>.inner"] == 7, out
    assert got["start"]["gen"] == got["ret"]["gen"] == 1, out
    assert got["start"]["café"] == got["ret"]["café"] == 1, out
    assert got["start"]["work"] == got["ret"]["work"] == 1, out
    assert got["start"]["Box"] == got["ret"]["Box"] == 1, out  # the class body
    assert got["yield"] == {f"gen, {lineno(path, 'yield i')}": 5}, out
    assert got["resume"] == {f"gen, {lineno(path, 'yield i')}": 5}, out
    assert got["fib_where"] == {f"{path}, {lineno(path, 'def fib(n):')}, 0": 1973}, out
    assert got["tid_ok"] == {"1": sum(got["start"].values())}, out
    # detached: the poller gave the tool id back
    assert st["tool_before"] == 3 and st["events_after"] == 0 and st["holder_after"] is None, st
    assert st["tool_id"] is None and st["events"] == 0 and st["attached"] == [], st


CALLS = '''
class Box:
    def method(self):
        return len("ab")

def boom():
    raise KeyError("k")

def caller():
    b = Box()
    b.method()
    str.upper("x")
    sorted([3, 1])
    try:
        boom()
    except KeyError:
        pass
'''


@needs_probes
def test_bpftrace_call_line_raise(bpftrace, short_tmp):
    body = CALLS + "\ncaller()\n"
    path = write_target(short_tmp, body, ("call", "line", "raise", "py_unwind"))
    target, pid = start([sys.executable, path])
    prog = f"""
    usdt::ocular:call /str(arg1) == "{path}"/ {{ @call[str(arg0), str(arg5), arg2] = count(); }}
    usdt::ocular:line /str(arg1) == "{path}" && str(arg0) == "caller"/ {{ @line[arg2] = count(); }}
    usdt::ocular:line /str(arg1) == "{path}" && str(arg0) == "caller" && arg3 < 0/ {{ @bad_offset = count(); }}
    usdt::ocular:raise /str(arg1) == "{path}"/ {{ @raise[str(arg0), str(arg5), arg2] = count(); }}
    usdt::ocular:py_unwind /str(arg1) == "{path}"/ {{ @unwind[str(arg0), arg2] = count(); }}
    {stop_on_marker()}
    """
    out = run_bpftrace(bpftrace, prog, pid=pid, target=target)
    finish(target)
    got = maps(out)
    L = lambda text: lineno(path, text)  # noqa: E731
    calls = got["call"]
    for key in (f"caller, Box, {L('b = Box()')}", f"caller, Box.method, {L('b.method()')}",
                f"caller, upper, {L('str.upper(\"x\")')}", f"caller, sorted, {L('sorted([3, 1])')}",
                f"caller, boom, {L('boom()')}", f"Box.method, len, {L('return len(\"ab\")')}",
                f"boom, KeyError, {L('raise KeyError(\"k\")')}"):
        assert calls.get(key) == 1, (key, out)
    body_lines = {L(t) for t in ("b = Box()", "b.method()", 'str.upper("x")', "sorted([3, 1])", "try:", "boom()",
                                 "except KeyError:", "pass")}
    assert set(map(int, got["line"])) == body_lines, out
    assert got.get("bad_offset", {}).get(None, 0) == 0, out  # LINE offsets come from the frame
    assert got["raise"] == {f"boom, KeyError, {L('raise KeyError(\"k\")')}": 1,
                            f"caller, KeyError, {L('boom()')}": 1}, out
    assert got["unwind"] == {f"boom, {L('raise KeyError(\"k\")')}": 1}, out


@needs_probes
def test_bpftrace_launch_recipe(bpftrace, short_tmp):
    """docs/usdt.md's launch recipe: attach to the library for every process, then start the program."""
    path = os.path.join(short_tmp, "prog.py")
    with open(path, "w") as f:
        f.write(WORKLOAD + "\nimport ocular.usdt\nocular.usdt.wait_for_tracer(timeout=60)\nwork()\n"
                 "def stop_marker():\n    pass\nstop_marker()\n")
    prog = (READY_BEGIN + f'usdt:{LIB}:ocular:py_start /str(arg1) == "{path}"/ {{ @start[str(arg0)] = count(); }} '
            + stop_on_marker(f":{LIB}:"))
    bt = Bpftrace([bpftrace, "-B", "line", "-e", prog])
    try:
        assert bt.wait_line(r"^BT_READY$"), bt.stop()
        p = subprocess.run([sys.executable, "-m", "ocular", "--usdt", "--no-trace-file", path],
                           capture_output=True, text=True, env=_env(), timeout=120)
        assert p.returncode == 0, p.stderr
        bt.wait_exit(timeout=60)
    finally:
        out, err = bt.stop()
    got = maps(out)
    assert got["start"]["fib"] == 1973 and got["start"]["work"] == 1, out


@needs_probes
def test_bpftrace_coexists_with_cprofile_and_tracing(bpftrace, short_tmp):
    trace = os.path.join(short_tmp, "t.json")
    pre = f"""
    import cProfile, pstats, ocular
    prof = cProfile.Profile()
    prof.enable()  # cProfile takes sys.monitoring.PROFILER_ID (2); tracing and the probes never do
    ocular.start_tracing(output={trace!r}, deinstrument_threshold=0, report=False)
    """
    body = WORKLOAD + """
work()
res = ocular.stop_tracing()
prof.disable()
calls = {k[2]: v[1] for k, v in pstats.Stats(prof).stats.items()}
print("CPROFILE_FIB", calls.get("fib"), "TRACE_TOOL", res.tool_id, "USDT_TOOL", TOOL, flush=True)
"""
    path = write_target(short_tmp, body, ("py_start", "py_return"), pre=pre)
    target, pid = start([sys.executable, path])
    prog = f"""
    usdt::ocular:py_start /str(arg1) == "{path}"/ {{ @start[str(arg0)] = count(); }}
    usdt::ocular:py_return /str(arg1) == "{path}"/ {{ @ret[str(arg0)] = count(); }}
    {stop_on_marker()}
    """
    out = run_bpftrace(bpftrace, prog, pid=pid, target=target)
    st, tout, _ = finish(target)
    got = maps(out)
    assert got["start"]["fib"] == got["ret"]["fib"] == 1973, out
    m = re.search(r"CPROFILE_FIB (\d+) TRACE_TOOL (\d) USDT_TOOL (\d)", tout)
    assert m, tout
    # cProfile counts primitive calls in v[0] and all calls in v[1]
    assert int(m.group(1)) == 1973
    assert (int(m.group(2)), int(m.group(3))) == (3, 4)  # cProfile 2, tracing 3, the probes 4
    with open(trace, encoding="utf-8") as f:
        names = [e.get("name") for e in as_begin_end(json.load(f)["traceEvents"]) if e.get("ph") == "B"]
    assert names.count("fib") == 1973
    assert st["events_after"] == 0 and st["holder_after"] is None


@needs_probes
def test_bpftrace_forked_child(bpftrace, short_tmp):
    path = os.path.join(short_tmp, "fk.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(WORKLOAD + textwrap.dedent("""
        import json, os, sys, time, warnings
        import ocular.usdt as u
        warnings.simplefilter("ignore", DeprecationWarning)
        u.enable()
        pid = os.fork()
        if pid == 0:
            print("READY", os.getpid(), flush=True)
            sys.stdin.readline()
            ok = u.wait_for_tracer(("py_start",), timeout=90)
            work()
            def stop_marker():
                pass
            stop_marker()
            sys.stdout.flush()
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("CHILD", os.waitstatus_to_exitcode(status), flush=True)
        print("STATUS", json.dumps(u.status()), flush=True)
        """))
    target, pid = start([sys.executable, path])
    prog = f"""
    usdt::ocular:py_start /str(arg1) == "{path}"/ {{ @start[str(arg0)] = count(); @pid[pid] = count(); }}
    {stop_on_marker()}
    """
    out = run_bpftrace(bpftrace, prog, pid=pid, target=target)
    st, tout, _ = finish(target)
    assert "CHILD 0" in tout, tout
    got = maps(out)
    assert got["start"]["fib"] == 1973, out
    assert set(got["pid"]) == {str(pid)}, out


@needs_probes
def test_bpftrace_calltree_script(bpftrace, short_tmp):
    script = ocular.usdt.script_path("calltree")
    path = write_target(short_tmp, """
    def leaf():
        return 1
    def gen():
        yield 1
    def boom():
        raise ValueError
    def main():
        leaf()
        list(gen())
        try:
            boom()
        except ValueError:
            pass
    main()
    """, ("py_start", "py_return", "py_yield", "py_resume", "py_unwind"))
    target, pid = start([sys.executable, path])
    bt = Bpftrace([bpftrace, "-B", "line", "-p", str(pid), script, short_tmp + "/"])
    try:
        ready = bt.wait_line(r"^ocular calltree: ")  # BEGIN ran: every probe is attached
        if ready:
            target.stdin.write("go\n")
            target.stdin.flush()
        done = ready and bt.wait_line(r"<- stop_marker ")
    finally:
        out, err = bt.stop()
    if not done:
        target.kill()
        tout, _ = target.communicate()
        raise AssertionError(f"bpftrace ready={ready}:\n{out}\n{err}\ntarget:\n{tout}\n{read_err(target)}")
    lines = out.splitlines()
    st, tout, _ = finish(target)
    assert st["tool_id"] is None and st["events_after"] == 0, json.dumps(st)  # detached
    tree = []
    for ln in lines:
        m = re.match(r"^(\d+) ", ln)
        if m:  # "%-7d " then the tree
            tree.append(ln[max(7, len(m.group(1))) + 1:])
    tree = [re.sub(r"\d+\.\d{3} us", "T us", ln) for ln in tree]
    assert tree == [
        f"-> main  {path}:{lineno(path, 'def main():')}",
        f"  -> leaf  {path}:{lineno(path, 'def leaf():')}",
        "  <- leaf  T us",
        f"  -> gen  {path}:{lineno(path, 'def gen():')}",
        "  <- gen  T us yield",
        f"  -> gen  {path}:{lineno(path, 'def gen():') + 1}",
        "  <- gen  T us",
        f"  -> boom  {path}:{lineno(path, 'def boom():')}",
        "  <- boom  T us unwind",
        "<- main  T us",
        f"-> stop_marker  {path}:{lineno(path, 'def stop_marker():')}",
        "<- stop_marker  T us",
    ], "\n".join(lines) + err


# ---------------------------------------------------------------------------------------------------
# gdb


@needs_probes
def test_gdb_probe_breakpoint_arguments(short_tmp):
    gdb = shutil.which("gdb")
    if not gdb:
        _say_skip("gdb is not installed")
    path = os.path.join(short_tmp, "g.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent("""
        import ocular.usdt as u
        u.enable()
        assert u.wait_for_tracer(("py_start",), timeout=60)
        ns = {}
        exec(compile("def café(x):\\n    return x + 1\\n", "bad\\udcffname.py", "exec"), ns)
        def target_fn(x):
            return x * 2
        ns["café"](1)
        target_fn(21)
        """))
    cmds = os.path.join(short_tmp, "cmds.gdb")
    with open(cmds, "w") as f:
        f.write(textwrap.dedent("""
        set breakpoint pending on
        set pagination off
        set confirm off
        break -probe-stap ocular:py_start
        run
        while !$_streq((const char *)$_probe_arg0, "café")
          continue
        end
        printf "ARGS2 %s|%s|%d|%d\\n", (const char *)$_probe_arg0, (const char *)$_probe_arg1, $_probe_arg2, $_probe_arg3
        while !$_streq((const char *)$_probe_arg0, "target_fn")
          continue
        end
        info probes stap ocular
        printf "ARGC %d\\n", $_probe_argc
        printf "ARGS %s|%s|%d|%d|%d\\n", (const char *)$_probe_arg0, (const char *)$_probe_arg1, $_probe_arg2, $_probe_arg3, $_probe_arg4
        info inferiors
        delete
        continue
        """))
    env = _env()
    pre = []
    if env.get("LD_PRELOAD"):  # e.g. make test-asan: preload the sanitizers into the program, not into gdb
        pre = ["-ex", f"set environment LD_PRELOAD {env.pop('LD_PRELOAD')}"]
    p = subprocess.run([gdb, "-nx", "-q", "-batch", *pre, "-x", cmds, "--args", sys.executable, path],
                       capture_output=True, env=env, timeout=180)
    out = p.stdout.decode("utf-8", "backslashreplace")
    if "ptrace: Operation not permitted" in out + p.stderr.decode(errors="replace"):
        _say_skip("ptrace is not permitted here")
    for name in PROBES:
        assert re.search(rf"^stap\s+ocular\s+{name}\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+{re.escape(LIB)}", out, re.M), \
            (name, out)
    assert "ARGC 5" in out, out
    line = open(path, encoding="utf-8").read().splitlines().index("def target_fn(x):") + 1
    m = re.search(r"^ARGS target_fn\|(.*)\|(\d+)\|(-?\d+)\|(\d+)$", out, re.M)
    assert m, out
    assert m.group(1) == path and int(m.group(2)) == line and m.group(3) == "0"
    inferior = re.search(r"process (\d+)", out[out.index("ARGS target_fn"):])
    assert inferior and m.group(4) == inferior.group(1), out  # main thread: tid == pid
    assert "ARGS2 café|bad\\udcffname.py|1|0" in out, out
    assert "exited normally" in out, out
