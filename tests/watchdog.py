"""Watchdog for the tests: a hung test program is diagnosed from the log alone.

``native_backtraces(pid)`` prints gdb's backtraces of every thread of a process and of all its
descendants (``gdb -p PID -batch -ex "thread apply all bt"``).  ``tests/conftest.py`` calls it when a wait
for a child process times out (every wait has a timeout there), and ``tests/stdlib_compare.py`` when a
test module runs past its limit.

Run as a script (``python watchdog.py PID``), it watches the pytest process PID itself, for tests that run
traced code in-process: it reads "SECONDS NODEID" lines (arm: the test must end within SECONDS) and "0"
(disarm) from stdin; on expiry it prints the backtraces of PID and its descendants, then sends PID SIGABRT
(pytest's faulthandler prints the Python tracebacks of every thread and the process ends).  It exits when
stdin closes.
"""

import collections
import os
import select
import shutil
import signal
import subprocess
import sys
import time


def descendants(pid):
    """pid and every process below it (from /proc), parents first."""
    children = collections.defaultdict(list)
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children[ppid].append(int(name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(sorted(children.get(p, ())))
    return out


def native_backtraces(pid, why="", stream=None, exclude=()):
    """Print gdb's backtraces of every thread of pid and of its descendants."""
    stream = stream or sys.stderr
    gdb = shutil.which("gdb")
    pids = [p for p in descendants(pid) if p not in exclude]
    print(f"\n===== watchdog: {why}: native backtraces of pid {pid} and its descendants {pids[1:]} =====",
          file=stream, flush=True)
    if not gdb:
        print("===== gdb is not installed (apt-get install gdb): no backtraces =====", file=stream, flush=True)
        return
    for p in pids:
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:300]
        except OSError:
            continue  # gone meanwhile
        print(f"----- pid {p}: {cmd}", file=stream, flush=True)
        try:
            r = subprocess.run([gdb, "-p", str(p), "-batch", "-nx", "-iex", "set auto-load python-scripts off",
                                "-ex", "set pagination off",
                                "-ex", "thread apply all bt"], stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, errors="replace", timeout=120)
            text = r.stdout + r.stderr
        except subprocess.TimeoutExpired:
            text = "(gdb timed out)"
        print(text, file=stream, flush=True)
    print("===== watchdog: end of backtraces =====", file=stream, flush=True)


def _watch(pid):
    deadline = None
    what = ""
    fd = sys.stdin.fileno()
    buf = b""
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([fd], [], [], wait)
        if ready:
            data = os.read(fd, 4096)
            if not data:
                return
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                secs, _, node = line.decode(errors="replace").partition(" ")
                deadline = time.monotonic() + float(secs) if float(secs) > 0 else None
                what = node
        elif deadline is not None and time.monotonic() >= deadline:
            native_backtraces(pid, f"{what} still running after its time limit", exclude={os.getpid()})
            try:
                os.kill(pid, signal.SIGABRT)  # faulthandler: the Python tracebacks, then the end
            except ProcessLookupError:
                pass
            return


if __name__ == "__main__":
    _watch(int(sys.argv[1]))
