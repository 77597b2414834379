"""USDT probes for bpftrace, gdb and other SDT-aware tools: provider ``ocular`` in ``ocular._ocular``.

    import ocular.usdt
    ocular.usdt.enable()      # or: python -m ocular --usdt --no-trace-file script.py

then, as root, ``bpftrace -p PID -e 'usdt::ocular:py_start { @[str(arg0)] = count(); }'``.  The probes live
in ``ocular.usdt.library_path()`` (``usdt:LIB:ocular:py_start`` without ``-p``); a sample call-tree script
is at ``ocular.usdt.script_path("calltree")``.  See docs/usdt.md for more.

Zero cost until a tracer attaches: each probe has a semaphore that the tracer increments when it
attaches.  ``enable()`` starts a thread that checks the semaphores every 10 ms (environment variable
``OCULAR_USDT_POLL_MS`` or ``enable(poll_ms=...)`` to change it) without holding the GIL.  Only when the
set of attached probes changes does it take the GIL and set exactly the sys.monitoring events those
probes need, on a tool id of its own named ``"ocular-usdt"`` (the first free of 3, 4, 5, taken
when the first probe attaches and given back when the last one detaches).  So with nothing attached
no callback is registered and no event is enabled.  Events fired in the first poll interval after an
attach are not seen unless the program waits for its tracer (``OCULAR_USDT_WAIT`` seconds or
``enable(wait=...)``, ``wait_for_tracer()``).  This is independent of ``ocular.start_tracing()``, and never takes
ids 0-2, so pdb, coverage.py and cProfile (which insist on them) can start at any time.  A forked child restarts the
poller.

Probes (arguments are stable; strings are NUL-terminated UTF-8):

    ================  ==================================================  ===========================
    probe             arguments                                           sys.monitoring event
    ================  ==================================================  ===========================
    py_start          qualname, filename, line, offset, tid               PY_START
    py_resume         qualname, filename, line, offset, tid               PY_RESUME, PY_THROW
    py_return         qualname, filename, line, offset, tid               PY_RETURN
    py_yield          qualname, filename, line, offset, tid               PY_YIELD
    py_unwind         qualname, filename, line, offset, tid               PY_UNWIND
    call              qualname, filename, line, offset, tid, callee       CALL
    line              qualname, filename, line, offset, tid               LINE
    raise             qualname, filename, line, offset, tid, exctype      RAISE
    ================  ==================================================  ===========================

- arg0 ``qualname`` (char *): the code object's ``co_qualname``; arg1 ``filename`` (char *): its
  ``co_filename``.  Encoded once per code object with ``backslashreplace`` (a file name that is not
  valid UTF-8 shows as ``\\udcff``...), never raising.
- arg2 ``line`` (int): ``co_firstlineno`` for py_start, otherwise the line of ``offset`` (for py_resume
  the line where the frame resumes; for line the new line).  -1 if unknown.
- arg3 ``offset`` (int): bytecode offset in bytes of the instruction (-1 if unknown).
- arg4 ``tid`` (int): kernel thread id (gettid(), the ``tid`` builtin of bpftrace).
- arg5 for ``call``: the callee's name (char *) -- ``__qualname__`` for Python functions and methods,
  ``__name__`` for builtins and method descriptors, the type's name for classes and other callables.
  Computed without calling into Python (no repr()).  For ``raise``: the exception's type name.

The strings live as long as their code object: copy them (``str(arg0)``) rather than keep pointers.
"""

import atexit
import os

from . import _ocular
from ._env import shown as _shown

__all__ = ["enable", "disable", "available", "reason", "status", "is_enabled", "wait_for_tracer", "library_path",
           "script_path", "PROBES", "PROVIDER"]

PROVIDER = "ocular"
PROBES = ("py_start", "py_resume", "py_return", "py_yield", "py_unwind", "call", "line", "raise")
DEFAULT_POLL_MS = 10
POLL_ENV = "OCULAR_USDT_POLL_MS"
WAIT_ENV = "OCULAR_USDT_WAIT"
_MAX_POLL_MS = 60000


def available():
    """True if the probes are compiled in (Linux, built with <sys/sdt.h>); see ``reason()`` otherwise."""
    return _ocular._usdt_info()["available"]


def reason():
    """Why the probes are not available ("" when they are)."""
    return _ocular._usdt_info()["reason"]


def library_path():
    """Path of the shared object that holds the probes: the ``usdt:PATH:ocular:...`` of bpftrace."""
    return os.path.abspath(_ocular.__file__)


def script_path(name="calltree"):
    """Path of a bpftrace script shipped with Ocular (``src/ocular/bpftrace/NAME.bt``)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bpftrace", name + ".bt")
    if not os.path.exists(path):
        raise FileNotFoundError(f"ocular.usdt: no bpftrace script {name!r} ({path})")
    return path


def _check_poll_ms(value, source):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{source} must be an int number of milliseconds, not {type(value).__name__}")
    if not 1 <= value <= _MAX_POLL_MS:
        raise ValueError(f"{source} must be from 1 to {_MAX_POLL_MS} milliseconds, got {_shown(value)}")
    return value


def _poll_ms_from_env():
    raw = os.environ.get(POLL_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_POLL_MS
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        raise ValueError(f"{POLL_ENV}={_shown(raw)} is not a whole number of milliseconds (from 1 to "
                         f"{_MAX_POLL_MS}; default {DEFAULT_POLL_MS})") from None
    return _check_poll_ms(value, POLL_ENV)


def _wait_from_env():
    raw = os.environ.get(WAIT_ENV)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 3600:  # also rejects nan
        raise ValueError(f"{WAIT_ENV}={_shown(raw)} is not a number of seconds from 0 to 3600")
    return value


def enable(poll_ms=None, wait=None):
    """Make the probes live: start the poller thread that watches the semaphores.

    poll_ms: how often to check for attached tracers, in milliseconds (1-60000); default from the
    environment variable OCULAR_USDT_POLL_MS, else 10.  Calling enable() again only changes the interval.
    wait: seconds to block until a tracer has attached (see ``wait_for_tracer()``), so that a program
    started before its tracer loses no event; default from OCULAR_USDT_WAIT, else no waiting.

    With a wait, returns True if a tracer attached in time, else False; without, returns None.
    Raises RuntimeError if the probes are not available (``reason()`` says why), ValueError/TypeError for a bad interval or wait (including
    bad OCULAR_USDT_POLL_MS / OCULAR_USDT_WAIT values); nothing is started in those cases.
    """
    ms = _poll_ms_from_env() if poll_ms is None else _check_poll_ms(poll_ms, "poll_ms")
    if wait is None:
        wait = _wait_from_env()
    elif isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 3600:
        raise ValueError(f"wait must be a number of seconds from 0 to 3600, got {_shown(wait)}")
    _ocular._usdt_enable(ms)
    if wait:
        return wait_for_tracer(timeout=wait)
    return None


def wait_for_tracer(probes=None, timeout=10.0):
    """Block until the given probes (default: any probe) have a tracer attached and their events are on.

    Returns True when they are, False after ``timeout`` seconds.  Needs enable() first.
    """
    import time

    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise ValueError(f"timeout must be a number of seconds >= 0, got {_shown(timeout)}")
    if not _ocular._usdt_info()["enabled"]:
        raise RuntimeError("ocular.usdt: call enable() before wait_for_tracer()")
    if probes is not None:
        probes = (probes,) if isinstance(probes, str) else tuple(probes)
        unknown = [p for p in probes if p not in PROBES]
        if unknown:
            raise ValueError(f"unknown probe(s) {unknown}: choose from {', '.join(PROBES)}")
    deadline = time.monotonic() + timeout
    while True:
        applied = _ocular._usdt_info()["applied"]
        if (set(probes) <= set(applied)) if probes else applied:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


def disable():
    """Stop the poller; events off, callbacks unregistered, the tool id given back.  Idempotent."""
    _ocular._usdt_disable()


def is_enabled():
    """True between enable() and disable()."""
    return _ocular._usdt_info()["enabled"]


def status():
    """The probes' state, as a dict.

    ``available``, ``reason``: compiled in, or why not.  ``probes_from``: what wrote the probe notes
    ("Ocular's own SDT notes" on x86-64 and aarch64 Linux, else "<sys/sdt.h>").  ``enabled``: the poller runs.  ``poll_ms``.
    ``semaphores``: {probe: count of attached tracers}.  ``attached``: probes with a tracer now.
    ``applied``: probes whose events are currently enabled (lags ``attached`` by up to one poll).
    ``tool_id``: the sys.monitoring id held ("ocular-usdt"), or None while nothing is attached.
    ``events``: ``sys.monitoring.get_events(tool_id)`` (0 without a tool id).  ``changes``: how many
    times the set of enabled events changed.  ``error``: why the attached probes could not be
    enabled, e.g. tool ids 3-5 all in use ("" once they are; a failed set is retried about every second).
    """
    import sys

    info = _ocular._usdt_info()
    tid = info["tool_id"]
    if tid is not None and sys.monitoring.get_tool(tid) == "ocular-usdt":
        info["events"] = sys.monitoring.get_events(tid)
    info["pid"] = os.getpid()
    return info


def _after_fork_child():
    _ocular._usdt_after_fork_child()


atexit.register(disable)  # stop the poller while the interpreter can still take it back
os.register_at_fork(after_in_child=_after_fork_child)
