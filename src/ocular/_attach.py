"""``python -m ocular attach PID``: trace a running Python process (CPython 3.14+, PEP 768).

Two halves live in this module:

* the **attacher** (``run``), run by the ``attach`` command: checks that the target can be attached to
  (it exists, we may ptrace it, it runs the same Python minor version, remote debugging is on), creates a
  session directory next to the output, and asks CPython to run a small script in the target with
  ``sys.remote_exec(pid, script)``.  CPython runs that script in the target's main thread at its next
  safe point (a bytecode boundary: a main thread blocked in a system call or in C code delays it).
* the **agent** (``_agent``), run inside the target by that script: starts tracing with the attacher's
  options and a thread that stops it after ``--duration``, when the attacher says so, or when the
  attacher goes away; an ``atexit`` handler stops it when the target exits first.

The two talk through the session directory (``.ocular-attach.<pid>.XXXX`` in the output's directory, so
that both sides see the same files): ``attach.py`` (the script), ``ctl`` (a FIFO: the attacher holds
its write end for the whole session and writes ``stop`` (save, I am waiting) or ``bye`` (save, and
clean up: I am gone); end of file means the attacher died) and ``status.json`` (written by the target,
atomically: ``tracing``, ``done`` with the figures and the report, or ``error`` with a message, e.g.
when Ocular cannot be imported in the target).  The attacher removes the directory at the end; when
it is gone first, the agent does.

While tracing, the agent's own code (this file) is never traced, and it calls only C functions
(``select``, ``os.read``, ``os.write``, ``os.replace``...): nothing of it shows up in the trace.
Refusals are ``AttachError``: ``__main__`` prints them as one ``ocular: ...`` line and exits with 2.
"""

import errno
import json
import os
import re
import shutil
import signal
import struct
import sys
import tempfile
import time

from . import _pyversions

STATUS = "status.json"
CTL = "ctl"
SCRIPT = "attach.py"
POLL = 0.05  # seconds between two looks at the target and the status file (attacher side)
WAIT_NOTE = 1.0  # seconds without an answer before saying what we are waiting for
YAMA = "/proc/sys/kernel/yama/ptrace_scope"


class AttachError(Exception):
    """A refusal, shown as one ``ocular: ...`` line; the attach command exits with status 2."""


# ---------------------------------------------------------------------------------------------------
# the target: what is it, may we attach
# ---------------------------------------------------------------------------------------------------

def _proc(pid, name):
    return f"/proc/{pid}/{name}"


def _stat(pid):
    """(state, start time) of a process from /proc/PID/stat, or None when it does not exist."""
    try:
        with open(_proc(pid, "stat"), "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = data[data.rindex(b")") + 2:].split()  # the command name may hold spaces and parentheses
    return fields[0].decode(), int(fields[19])


def _alive(pid, start):
    """The process we attached to (same start time, so not a reused pid) exists and is no zombie."""
    st = _stat(pid)
    return st is not None and st[1] == start and st[0] not in ("Z", "X")


def _cmdline(pid):
    try:
        with open(_proc(pid, "cmdline"), "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return []
    if args and args[-1] == b"":
        args.pop()
    return [os.fsdecode(a) for a in args]


def _describe(pid):
    """A short description of a process for messages: its command line, shortened."""
    args = _cmdline(pid)
    text = " ".join(args) if args else "?"
    return text if len(text) <= 80 else text[:77] + "..."


def _ids(pid):
    """(effective uid, effective gid) of a process, from /proc/PID/status."""
    uid = gid = None
    with open(_proc(pid, "status"), encoding="ascii", errors="replace") as f:
        for line in f:
            if line.startswith("Uid:"):
                uid = int(line.split()[2])
            elif line.startswith("Gid:"):
                gid = int(line.split()[2])
    return uid, gid


def _user(uid):
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _ptrace_hint():
    """What may be in the way of ptrace on this machine, for the 'no permission' message."""
    try:
        with open(YAMA, encoding="ascii") as f:
            scope = f.read().strip()
    except OSError:
        scope = None
    if scope == "1":
        return (f"{YAMA} is 1 (only a parent process may attach): run the attach command as root, or "
                f"relax it with 'echo 0 | sudo tee {YAMA}'")
    if scope == "2":
        return f"{YAMA} is 2 (only root, with CAP_SYS_PTRACE, may attach): run the attach command as root"
    if scope == "3":
        return f"{YAMA} is 3 (nobody may attach until the next reboot)"
    return ("attaching needs the target's user (and a target that is not set-user-id) or CAP_SYS_PTRACE "
            "(root); a container may also forbid ptrace")


def _no_permission(pid, why):
    return AttachError(f"no permission to attach to process {pid} ({why}): {_ptrace_hint()}")


def _check_process(pid):
    """Refuse a pid that is not a live process we may signal.  Returns its start time."""
    if pid == os.getpid():
        raise AttachError("the attach command cannot attach to itself")
    st = _stat(pid)
    if st is None or st[0] in ("Z", "X"):
        raise AttachError(f"no such process: {pid}" + (" (it has exited)" if st else ""))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise AttachError(f"no such process: {pid}") from None
    except PermissionError:
        try:
            owner = _user(_ids(pid)[0])
        except OSError:
            owner = "another user"
        raise AttachError(f"no permission to attach to process {pid}: it belongs to {owner} and this is "
                          f"{_user(os.geteuid())}; run the attach command as that user or as root") from None
    return st[1]


def _elf_python_version(path):
    """PY_VERSION_HEX of the CPython runtime in an ELF file (executable or libpython), read from the
    _Py_DebugOffsets at the start of its .PyRuntime section (CPython 3.13+: cookie 'xdebugpy', then
    the version), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
                return None
            end = "<" if head[5] == 1 else ">"
            if head[4] == 2:  # ELF64
                shoff, = struct.unpack_from(end + "Q", head, 0x28)
                shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", head, 0x3A)
                sh = struct.Struct(end + "IIQQQQ")  # name, type, flags, addr, offset, size
            else:
                shoff, = struct.unpack_from(end + "I", head, 0x20)
                shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", head, 0x2E)
                sh = struct.Struct(end + "IIIIII")
            if not shoff or not shnum or shstrndx >= shnum or shentsize < sh.size:
                return None
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            if len(table) < shentsize * shnum:
                return None
            sections = [sh.unpack_from(table, i * shentsize) for i in range(shnum)]
            strtab = sections[shstrndx]
            f.seek(strtab[4])
            names = f.read(min(strtab[5], 1 << 20))
            for name, _type, _flags, _addr, offset, size in sections:
                if names[name:name + 11] == b".PyRuntime\0" and size >= 16:
                    f.seek(offset)
                    data = f.read(16)
                    if data[:8] == b"xdebugpy":
                        return struct.unpack_from(end + "Q", data, 8)[0]
                    return None
    except (OSError, struct.error, IndexError):
        return None
    return None


def _version_text(hexversion):
    major, minor, micro = hexversion >> 24, (hexversion >> 16) & 0xFF, (hexversion >> 8) & 0xFF
    level, serial = (hexversion >> 4) & 0xF, hexversion & 0xF
    tail = {0xA: f"a{serial}", 0xB: f"b{serial}", 0xC: f"rc{serial}"}.get(level, "")
    return f"{major}.{minor}.{micro}{tail}"


def _target_python(pid):
    """(hexversion or None, (major, minor) or None, where) of the CPython in a process: from the debug
    offsets of its executable or of a libpython it maps, else from those files' names (python3.12)."""
    root = _proc(pid, "root")
    try:
        exe = os.readlink(_proc(pid, "exe"))
    except PermissionError as exc:
        raise _no_permission(pid, f"cannot read {exc.filename}") from None
    except FileNotFoundError:
        exe = None
    candidates = [(_proc(pid, "exe"), exe or "?")]
    try:
        with open(_proc(pid, "maps"), encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and re.search(r"/libpython\d+\.\d+[^/]*\.so", parts[5]):
                    path = parts[5].rstrip("\n")
                    if path.endswith(" (deleted)"):
                        path = path[:-10]
                    if all(c[1] != path for c in candidates):
                        candidates.append((root + path, path))
    except PermissionError as exc:
        raise _no_permission(pid, f"cannot read {exc.filename}") from None
    except OSError:
        pass
    for real, shown in candidates:
        hexversion = _elf_python_version(real)
        if hexversion is not None:
            return hexversion, (hexversion >> 24, (hexversion >> 16) & 0xFF), shown
    for _real, shown in candidates:
        m = re.search(r"python(\d+)\.(\d+)", os.path.basename(shown))
        if m:
            return None, (int(m.group(1)), int(m.group(2))), shown
    return None, None, exe


def _check_version(pid):
    hexversion, version, where = _target_python(pid)
    if version is None:
        return  # not recognised: sys.remote_exec decides (and says "not a Python process")
    text = _version_text(hexversion) if hexversion is not None else "%d.%d" % version
    ours = sys.version_info
    if version < (3, 14):
        raise AttachError(f"process {pid} runs Python {text} ({where}); attaching needs Python 3.14 or "
                          f"newer in the target (sys.remote_exec, PEP 768)")
    if version != (ours.major, ours.minor):
        raise AttachError(f"process {pid} runs Python {text} ({where}) and this is Python "
                          f"{_version_text(sys.hexversion)}: attaching needs the same version; run "
                          f"'python{version[0]}.{version[1]} -m ocular attach {pid}' with Ocular installed for it")
    prerelease = lambda v: (v >> 4) & 0xF != 0xF  # noqa: E731
    if hexversion is not None and hexversion != sys.hexversion and (prerelease(hexversion)
                                                                    or prerelease(sys.hexversion)):
        raise AttachError(f"process {pid} runs Python {text} and this is Python {_version_text(sys.hexversion)}: "
                          f"a pre-release attaches only to exactly the same version")


def _check_visible(pid, directory):
    """The target must see the session directory at the same path as we do (not so in another mount
    namespace, e.g. a container, or a chroot, unless the path is shared)."""
    try:
        ours = os.stat(directory)
    except OSError:
        return
    try:
        theirs = os.stat(_proc(pid, "root") + directory)
    except (FileNotFoundError, NotADirectoryError):
        theirs = None
    except OSError:  # /proc/PID/root not readable: cannot tell, let it try
        return
    if theirs is None or (ours.st_dev, ours.st_ino) != (theirs.st_dev, theirs.st_ino):
        raise AttachError(f"process {pid} does not see {os.path.dirname(directory)} as this command does (it "
                          f"runs in a container or a chroot?): give an output path it shares with this "
                          f"command, or run the attach command in there")


def _disabled_how(pid):
    """Why remote debugging is off in a process, as far as its environment and command line say."""
    how = []
    try:
        with open(_proc(pid, "environ"), "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"PYTHON_DISABLE_REMOTE_DEBUG="):
                    how.append("PYTHON_DISABLE_REMOTE_DEBUG is set in its environment")
    except OSError:
        pass
    args = _cmdline(pid)
    for i, a in enumerate(args[1:], 1):
        if (a in ("-X", "-Xdisable-remote-debug", "-Xdisable_remote_debug")
                and (a != "-X" or (i + 1 < len(args) and args[i + 1] in ("disable-remote-debug",
                                                                         "disable_remote_debug")))):
            how.append("it was started with -X disable-remote-debug")
            break
    return " and ".join(how) if how else ("it was started with PYTHON_DISABLE_REMOTE_DEBUG set or "
                                          "-X disable-remote-debug, or built --without-remote-debug")


def _remote_exec(pid, start, script):
    """sys.remote_exec, its failures turned into AttachError."""
    try:
        sys.remote_exec(pid, script)
    except (ProcessLookupError, FileNotFoundError) as exc:
        if not _alive(pid, start):
            raise AttachError(f"no such process: {pid} (it has exited)") from None
        raise AttachError(f"cannot attach to process {pid}: {exc}") from None
    except PermissionError as exc:
        raise _no_permission(pid, exc.strerror or str(exc)) from None
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            raise _no_permission(pid, exc.strerror) from None
        if not _alive(pid, start):
            raise AttachError(f"no such process: {pid} (it has exited)") from None
        raise AttachError(f"cannot attach to process {pid}: {exc}") from None
    except RuntimeError as exc:
        msg = str(exc)
        cause = exc.__cause__ or exc.__context__
        if not _alive(pid, start):
            raise AttachError(f"no such process: {pid} (it has exited)") from None
        if "not enabled in the remote process" in msg:
            raise AttachError(f"remote debugging is disabled in process {pid}: {_disabled_how(pid)}; "
                              f"restart it without that to attach") from None
        if "not enabled" in msg:
            raise AttachError("remote debugging is disabled in this Python (the attach command's): run it "
                              "without PYTHON_DISABLE_REMOTE_DEBUG and -X disable-remote-debug") from None
        if "Can't send commands" in msg:
            raise AttachError(f"cannot attach to process {pid}: {msg} (attaching needs the same Python "
                              f"version on both sides)") from None
        while cause is not None:
            if isinstance(cause, PermissionError) or (isinstance(cause, OSError)
                                                      and cause.errno in (errno.EPERM, errno.EACCES)):
                raise _no_permission(pid, cause.strerror or str(cause)) from None
            cause = cause.__cause__ or cause.__context__
        if "PyRuntime" in msg:
            raise AttachError(f"process {pid} ({_describe(pid)}) is not a Python process (no CPython "
                              f"runtime found in it)") from None
        raise AttachError(f"cannot attach to process {pid}: {msg}") from None


# ---------------------------------------------------------------------------------------------------
# the session directory and the script run in the target
# ---------------------------------------------------------------------------------------------------

STUB = '''\
# Ocular: run in process {pid} by sys.remote_exec (PEP 768), sent by `python -m ocular attach`.
# Starts tracing with the attacher's options; removed when the session ends.
def _ocular_attach(cfg):
    import os

    def report(kind, exc):
        import json, sys
        flags = [f for f, on in (("-I", sys.flags.isolated), ("-S", sys.flags.no_site),
                                 ("-E", sys.flags.ignore_environment)) if on]
        info = dict(state="error", kind=kind, message=f"{{type(exc).__name__}}: {{exc}}",
                    executable=sys.executable, path=sys.path, flags=flags)
        tmp = cfg["status"] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(info, f)
        os.replace(tmp, cfg["status"])

    try:
        fd = os.open(cfg["ctl"], os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except BaseException as exc:
        report("start", exc)
        return
    try:
        said = os.read(fd, 64)
    except BlockingIOError:
        said = None
    if said is not None:  # b"" (the attacher is gone) or b"bye" (it gave up): nothing to do
        os.close(fd)
        import shutil
        shutil.rmtree(cfg["dir"], ignore_errors=True)
        return
    try:
        import ocular._attach as agent
    except BaseException as exc:
        os.close(fd)
        report("import", exc)
        return
    try:
        agent._agent(cfg, fd)
    except BaseException as exc:
        report("start", exc)


_ocular_attach({cfg!r})
'''


def _remove_stale_sessions(outdir):
    """Session directories left by an attach that was interrupted before its target ran the script (the
    target then cleans up), whose target died without running it: removed when their process is gone."""
    try:
        names = os.listdir(outdir)
    except OSError:
        return
    for name in names:
        m = re.fullmatch(r"\.ocular-attach\.(\d+)\.[A-Za-z0-9_]+", name)
        if not m:
            continue
        path = os.path.join(outdir, name)
        try:
            if os.lstat(path).st_uid != os.getuid() and os.getuid() != 0:
                continue
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, OverflowError):
            pass


def _lock_target(pid, start):
    """One attach per target process at a time: CPython keeps one pending attach script per process, so a
    second attach while the first still waits would replace the first's script, and the first would wait
    for ever.  The lock is an abstract socket named after the process (its pid and start time), held while
    this command runs and gone with it however it ends."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(f"\0ocular-attach-{pid}-{start}")
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise AttachError(f"another 'python -m ocular attach' to process {pid} is waiting for it or tracing "
                              f"it; attach once that one has ended (a process runs one attach script at a "
                              f"time)") from None
        return None  # (no abstract sockets here: no lock)
    return sock


def _remove_superseded(outdir, pid, mine):
    """Session directories for the same process left by an attach that gave up before the process ran its
    script (^C): our script has just replaced theirs, which will never run, so nobody else removes them."""
    try:
        names = os.listdir(outdir)
    except OSError:
        return
    for name in names:
        path = os.path.join(outdir, name)
        if (re.fullmatch(rf"\.ocular-attach\.{pid}\.[A-Za-z0-9_]+", name) and path != mine
                and _read_status(os.path.join(path, STATUS)) is None):
            shutil.rmtree(path, ignore_errors=True)


def _make_session(pid, output, options, duration):
    """Create the session directory in the output's directory, with its FIFO and script; the target
    must be able to read and write there, so when we are root and it is not, it gets the files.  Stale
    session directories of processes that are gone are removed first."""
    outdir = os.path.dirname(output)
    _remove_stale_sessions(outdir)
    try:
        d = tempfile.mkdtemp(prefix=f".ocular-attach.{pid}.", dir=outdir)
    except OSError as exc:
        raise AttachError(f"cannot create the session directory in {outdir}: {exc.strerror or exc}") from None
    try:
        return _fill_session(pid, d, output, options, duration)
    except OSError as exc:
        shutil.rmtree(d, ignore_errors=True)
        raise AttachError(f"cannot prepare the session directory {d}: {exc}") from None
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise


def _fill_session(pid, d, output, options, duration):
    ctl = os.path.join(d, CTL)
    os.mkfifo(ctl, 0o600)
    cfg = dict(pid=pid, dir=d, ctl=ctl, status=os.path.join(d, STATUS), output=output,
               duration=duration, options=options)
    script = os.path.join(d, SCRIPT)
    with open(script, "w", encoding="utf-8") as f:
        f.write(STUB.format(pid=pid, cfg=cfg))
    if os.geteuid() == 0:
        uid, gid = _ids(pid)
        if uid != 0:
            for p in (d, ctl, script):
                os.chown(p, uid, gid)
    os.chmod(script, 0o644)
    # held for the whole session: the target sees end of file on it only once we are gone
    fd = os.open(ctl, os.O_RDWR | os.O_CLOEXEC)
    return d, fd, cfg


def _read_status(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # written by rename: never half a file, but say so if it is
        return dict(state="error", kind="status", message=f"unreadable status file {path}: {exc}")


# ---------------------------------------------------------------------------------------------------
# the agent, inside the target
# ---------------------------------------------------------------------------------------------------

class _Agent:
    """The agent's state in the target (a plain namespace: lock, done, pid, start)."""


def _write_status(path, data):
    """Atomically replace the status file; C functions only (it runs while tracing)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _agent(cfg, fd):
    """Inside the target, on its main thread: start tracing and the thread that stops it."""
    import _thread
    import atexit
    import select

    import ocular

    opts = cfg["options"]
    kind = "start"
    try:
        if ocular.is_tracing():
            kind = "busy"
            raise RuntimeError("Ocular is already tracing in this process")
        tracing = json.dumps(dict(state="tracing", pid=os.getpid(), executable=sys.executable,
                                  version=sys.version.split()[0], ocular=os.path.dirname(ocular.__file__))).encode()
        ocular.start_tracing(mode=opts["mode"], deinstrument_threshold=opts["threshold"],
                             exclude=opts["exclude"], include_only=opts["include"], output=cfg["output"],
                             tool_id=opts["tool_id"], format=opts["format"], report=False,
                             near_zero=opts.get("near_zero", False))
    except BaseException as exc:
        os.close(fd)
        msg = str(exc).removeprefix("ocular: ")
        _write_status(cfg["status"], json.dumps(dict(state="error", kind=kind,
                                                     message=f"{type(exc).__name__}: {msg}")).encode())
        return
    # from here on: C functions only until tracing stops
    agent = _Agent()
    agent.lock = _thread.allocate_lock()
    agent.done = False
    agent.pid = os.getpid()
    agent.start = time.monotonic()

    def finish(reason):
        """Stop tracing, save, tell the attacher (or clean up if it is gone).  Runs once."""
        if os.getpid() != agent.pid:  # a fork child (whose copy of the lock may be held): Ocular saves
            return                     # its trace by itself
        with agent.lock:
            if agent.done:
                return
            agent.done = True
            if reason != "exit":
                atexit.unregister(at_exit)
            try:
                res = ocular.stop_tracing()
                info = dict(state="done", reason=reason, output=res.output, events=res.events,
                            dropped=res.dropped, bytes=res.bytes, threads=res.threads,
                            seconds=time.monotonic() - agent.start, report=None)
                rep = res.report
                if rep is not None and opts["report"] == "json":
                    info["report"] = rep.to_json()
                elif rep is not None and opts["report"]:
                    info["report"] = rep.format()
            except BaseException as exc:
                msg = str(exc).removeprefix("ocular: ")
                info = dict(state="error", kind="stop", reason=reason, message=f"{type(exc).__name__}: {msg}")
            gone = reason in ("gone", "bye")
            if not gone:
                _write_status(cfg["status"], json.dumps(info).encode())
                try:  # did the attacher give up waiting meanwhile?
                    gone = os.read(fd, 64) in (b"", b"bye")
                except OSError:
                    pass
            if reason != "exit":  # at exit the stop thread may be in select() on it: leave it open, never
                os.close(fd)      # let the number be reused under that thread's feet
            if gone:
                shutil.rmtree(cfg["dir"], ignore_errors=True)

    def at_exit():
        finish("exit")

    def watch():
        """The stop thread: waits on the FIFO (and the clock) without touching Python code."""
        deadline = None if cfg["duration"] is None else agent.start + cfg["duration"]
        reason = "duration"
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ready, _, _ = select.select([fd], [], [], timeout)
            except (OSError, ValueError):  # the FIFO was closed: finish() has run
                return
            if not ready:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                continue
            try:
                said = os.read(fd, 64)
            except BlockingIOError:
                continue
            except OSError:
                return
            if not said:
                reason = "gone"
                break
            if b"bye" in said:
                reason = "bye"
                break
            if b"stop" in said:
                reason = "stop"
                break
        try:
            finish(reason)
        except BaseException:
            pass

    atexit.register(at_exit)
    try:
        _thread.start_new_thread(watch, ())
    except BaseException as exc:  # no thread, no stop: do not leave tracing on
        finish("start")
        msg = f"could not start the thread that stops tracing: {type(exc).__name__}: {exc}"
        _write_status(cfg["status"], json.dumps(dict(state="error", kind="start", message=msg)).encode())
        return
    _write_status(cfg["status"], tracing)


# ---------------------------------------------------------------------------------------------------
# the attacher
# ---------------------------------------------------------------------------------------------------

def _say(ns, msg):
    if not ns.quiet:
        print(msg, file=sys.stderr, flush=True)


def _ctl(fd, word):
    try:
        os.write(fd, word)
    except OSError:
        pass


REASONS = {"duration": "after {d}", "stop": "on {s}", "exit": "when the process exited",
           "gone": "when the attach command went away"}


def _refusal(pid, status):
    """The AttachError for an 'error' status from the target, or None (an error at stop: trace lost)."""
    kind = status.get("kind")
    if kind == "import":
        flags = f" (started with {' '.join(status['flags'])})" if status.get("flags") else ""
        return AttachError(f"Ocular is not importable in process {pid}{flags}: {status['message']}; install it "
                           f"where {status.get('executable') or 'its Python'} finds it (its sys.path: "
                           f"{os.pathsep.join(status.get('path') or [])})")
    if kind == "busy":
        return AttachError(f"process {pid} is already being traced by Ocular")
    if kind in ("start", "status"):
        return AttachError(f"cannot start tracing in process {pid}: {status['message']}")
    return None


def run(ns):
    """Attach to ns.pid with the options of the attach command; returns the exit status, raises
    AttachError for a refusal (the caller prints it and exits with status 2)."""
    if not _pyversions.REMOTE_EXEC:
        raise AttachError(f"attach needs Python 3.14 or newer (sys.remote_exec, PEP 768); this is Python "
                          f"{sys.version.split()[0]} ({sys.executable})")
    if not sys.is_remote_debug_enabled():
        raise AttachError("remote debugging is disabled in this Python (the attach command's): run it "
                          "without PYTHON_DISABLE_REMOTE_DEBUG and -X disable-remote-debug")
    pid = ns.pid
    start = _check_process(pid)
    _check_version(pid)
    output = os.path.abspath(ns.output)
    if os.path.isdir(output):
        raise AttachError(f"output {ns.output!r} is a directory; give a file name such as {ns.output}/trace.json")
    if not os.path.isdir(os.path.dirname(output)):
        raise AttachError(f"the output directory {os.path.dirname(output)!r} does not exist")
    options = dict(mode=ns.mode, threshold=ns.threshold, near_zero=ns.near_zero, include=ns.include, exclude=ns.exclude,
                   tool_id=ns.tool_id, format=ns.format,
                   report=False if ns.no_report else ("json" if ns.report_json else "text"))

    stops = []  # signals received: ^C, SIGTERM, SIGHUP

    def on_signal(signum, frame):
        stops.append(signum)

    lock = _lock_target(pid, start)
    try:
        d, fd, cfg = _make_session(pid, output, options, ns.duration)
    except BaseException:
        if lock is not None:
            lock.close()
        raise
    cleanup = True  # False: the target removes the session directory (we leave before it is done)
    old = {}
    try:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            old[s] = signal.signal(s, on_signal)
        _check_visible(pid, d)
        _remote_exec(pid, start, os.path.join(d, SCRIPT))
        _remove_superseded(os.path.dirname(output), pid, d)
        waited = 0.0
        announced = False
        asked = 0  # signals already answered by a stop request
        while True:
            status = _read_status(cfg["status"])
            state = status["state"] if status else None
            if state in ("done", "error"):
                break
            if state == "tracing" and not announced:
                how = f"for {ns.duration:g} s" if ns.duration is not None else "until the process exits"
                _say(ns, f"ocular: tracing process {pid} ({_describe(pid)}) {how} or until ^C; trace to {output}")
                announced = True
            if stops and state is None:  # ^C before the target has run the script: call it off
                _ctl(fd, b"bye")
                cleanup = False  # the target removes the session if it ever runs the script
                print(f"ocular: interrupted before process {pid} started tracing; nothing was traced",
                      file=sys.stderr)
                return 130
            if stops and not asked:
                _ctl(fd, b"stop")
                asked = len(stops)
                _say(ns, f"ocular: stopping; process {pid} is saving the trace to {output} (^C again: stop waiting)")
            elif len(stops) > asked:  # a second ^C: stop waiting
                _ctl(fd, b"bye")
                cleanup = False
                print(f"ocular: not waiting any longer; process {pid} goes on saving the trace to {output}",
                      file=sys.stderr)
                return 130
            if not _alive(pid, start):
                status = _read_status(cfg["status"])  # it may have saved just before it went
                if status and status["state"] in ("done", "error"):
                    break
                if status and status["state"] == "tracing":
                    tmp = f"{output}.{pid}.tmp"
                    left = (f"; its unfinished trace is {tmp} ('python -m ocular merge' salvages it)"
                            if os.path.exists(tmp) else "")
                    print(f"ocular: process {pid} ended without saving the trace (killed, or os._exit()){left}",
                          file=sys.stderr)
                    return 1
                print(f"ocular: process {pid} exited before it started tracing", file=sys.stderr)
                return 1
            if state is None and waited < WAIT_NOTE <= waited + POLL:
                _say(ns, f"ocular: waiting for process {pid} to run Python code in its main thread (the attach "
                         f"script runs at its next bytecode; a main thread blocked in a system call or in C code "
                         f"delays it); ^C gives up")
            waited += POLL
            time.sleep(POLL)
        if status["state"] == "error":
            refusal = _refusal(pid, status)
            if refusal is not None:
                raise refusal
            print(f"ocular: process {pid} could not save the trace: {status['message']}", file=sys.stderr)
            return 1
        if status.get("report"):
            print(status["report"], file=sys.stderr)
        why = REASONS.get(status.get("reason"), status.get("reason")).format(
            d=f"{ns.duration:g} s" if ns.duration is not None else "",
            s="^C" if not stops or stops[0] == signal.SIGINT else signal.Signals(stops[0]).name)
        out = status.get("output")
        if out:
            size = os.path.getsize(out) if os.path.exists(out) else 0
            _say(ns, f"ocular: trace written to {out} ({size / 1e6:.1f} MB, {status['events']} events, "
                     f"{status['dropped']} dropped; process {pid} traced for {status['seconds']:.1f} s, "
                     f"stopped {why})")
        return 0
    finally:
        os.close(fd)
        if cleanup:
            shutil.rmtree(d, ignore_errors=True)
        for s, h in old.items():
            signal.signal(s, h)
        if lock is not None:
            lock.close()
