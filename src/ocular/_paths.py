"""Where Ocular writes, and the policy for it: an output is checked before anything runs (a regular file, or
none yet, in a writable directory, with a name leaving room for the temporary files beside it); a session's
recording and rendered output are written under temporary names beside it; a forked child's outputs carry its
pid; and a finished output is installed by a rename that never replaces what is not a regular file."""
import contextlib
import errno
import os
import stat
import sys

from . import _formats, _ocular
from ._say import _print_err


def _file_kind(mode):
    for test, kind in ((stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISLNK, "symbolic link"), (stat.S_ISDIR, "directory")):
        if test(mode):
            return kind
    return "special file"


def _regular_output(output, path, hint=True):
    """The file a trace (or merge) written to ``path`` really lands in: symbolic links are followed (the
    trace replaces the file the link points to; the link stays), and an existing file that is not a
    regular file (a device such as /dev/null, a FIFO, a socket) is refused with ValueError, since the
    trace is renamed over the output at the end and would replace it."""
    real = os.path.realpath(path) if os.path.islink(path) else path  # only the last component is renamed over
    if real != path:  # (/dev/stdout on a pipe: realpath gives /proc/PID/fd/pipe:[N], no file; what it is,
        with contextlib.suppress(OSError):  # through the link, says why it is refused)
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
                real = path
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return real
    except OSError as exc:  # a symlink loop, a component that is not a directory, ...
        raise OSError(exc.errno, f"ocular: cannot use the output {output!r}: {exc.strerror}", output) from None
    if stat.S_ISDIR(st.st_mode):
        raise ValueError(f"output {output!r} is a directory; give a file name such as {output}/trace.json")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"output {output!r} is a {_file_kind(st.st_mode)}, not a regular file: Ocular writes "
                         f"the trace to a temporary file and renames it over the output, which would replace "
                         f"it" + (" (to record without writing a trace: perfetto=False, or --no-trace-file)"
                                  if hint else ""))
    return real


def _same_file(a, b):
    """Whether paths ``a`` and ``b`` name the same file: the same path once symbolic links are resolved
    (either may not exist yet), or the same existing file (a hard link)."""
    try:
        if os.path.realpath(a) == os.path.realpath(b):
            return True
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _install(tmp, out):
    """Rename the finished trace ``tmp`` over ``out`` unless ``out`` has become something other than a
    regular file meanwhile (then the trace stays in ``tmp`` and OSError says so)."""
    try:
        mode = os.lstat(out).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise OSError(errno.EEXIST, f"ocular: {out!r} became a {_file_kind(mode)} while tracing and was not "
                                    f"replaced; the trace is in {tmp!r}", out)
    _replace_file(tmp, out)


def _replace_file(src, dst):
    """os.replace(src, dst), cheaper over a large existing ``dst``: the names are exchanged and the old
    file removed (on ext4 a rename over an existing file starts writing the new one back at once,
    ~58 ms for a 97 MB trace; an exchange does not).  An existing ``dst`` keeps its permissions (and its
    owner, where we may give it), as a file written over in place would.  OSError as os.replace."""
    with contextlib.suppress(OSError):
        old = os.stat(dst)
        if stat.S_ISREG(old.st_mode):
            if os.geteuid() == 0:  # (first: a chown clears the mode's set-id bits, which a trace does not get)
                os.chown(src, old.st_uid, old.st_gid)
            os.chmod(src, stat.S_IMODE(old.st_mode) & 0o777)
    if not _ocular._replace(src, dst):  # exchanged, but the old file is still under src
        with contextlib.suppress(OSError):
            _ocular._remove(src)
        if os.path.lexists(src):
            _print_err(f"ocular: the previous {dst!r} could not be removed; it is left as {src!r}")


def _check_output(output):
    if isinstance(output, os.PathLike):
        output = os.fspath(output)
    if not isinstance(output, str):
        raise TypeError(f"output must be a path (str or os.PathLike), not {type(output).__name__}")
    if not output:
        raise ValueError("output must not be empty")
    if output.endswith(os.sep) or (os.altsep and output.endswith(os.altsep)):
        raise ValueError(f"output {output!r} ends with {output[-1]!r}, so it names a directory; give a file name "
                         f"such as {output}trace.json")
    path = _regular_output(output, os.path.abspath(output))
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"ocular: the output directory {directory!r} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(f"ocular: the output directory {directory!r} is not writable")
    _check_name_length(output, path)
    return path


_TMP_ROOM = 40  # bytes of file name Ocular adds to an output's for its temporary files (.<pid>.render.tmp, ...)


def _check_name_length(output, path):
    """Refuse an output whose file name leaves no room in its directory for the temporary files written
    beside it (OSError ENAMETOOLONG naming the output, not a temporary file)."""
    directory, base = os.path.split(path)
    try:
        name_max = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    n = len(os.fsencode(base))
    if name_max and n + _TMP_ROOM > name_max:
        raise OSError(errno.ENAMETOOLONG, f"ocular: the output's file name {base[:40]!r}... is {n} bytes long, "
                      f"too long to write: file names in {directory!r} have at most {name_max} bytes, and "
                      f"Ocular needs {_TMP_ROOM} of them for its temporary files (use at most "
                      f"{name_max - _TMP_ROOM})", output)


@contextlib.contextmanager
def _writing(output, path):
    """An OSError about a file written for ``output`` (its temporary files, beside ``path``) names the
    output and its directory rather than the temporary file."""
    try:
        yield
    except OSError as exc:
        if (isinstance(exc.filename, str) and exc.filename.startswith(path) and isinstance(exc.strerror, str)
                and not exc.strerror.startswith("ocular: ")):
            raise OSError(exc.errno, f"ocular: cannot write the output {output!r} in {os.path.dirname(path)!r}: "
                          f"{exc.strerror}", output) from None
        raise


def _tmp_name(path):
    """The recording of a session writing ``path`` (renamed to ``path`` itself for a .ocular output)."""
    return f"{path}.{os.getpid()}.tmp"


def _render_tmp_name(path):
    """Where the rendered output goes before its rename to ``path``."""
    return f"{path}.{os.getpid()}.render.tmp"


def _recording_name(path):
    """The recording of a session writing ``path``; without an output (the report only), a new file in the
    temporary directory, as tempfile.mkstemp makes one (its directories in its order, or tempfile.tempdir if
    the program set it) without importing tempfile: with shutil, random and weakref it was ~5 ms of such a
    session's start, and what the program imported later ran traced."""
    if path:
        return _tmp_name(path)
    t = sys.modules.get("tempfile")
    if t is not None and t.tempdir:
        dirs = [t.tempdir]
    else:
        dirs = [os.environ[k] for k in ("TMPDIR", "TEMP", "TMP") if os.environ.get(k)]
        dirs += ["/tmp", "/var/tmp", "/usr/tmp"] if os.name == "posix" else []
        try:
            dirs.append(os.getcwd())
        except OSError:
            pass
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    why = None
    for d in dirs:
        for _ in range(10):  # (a name taken: another)
            name = os.path.join(os.path.abspath(d), f"ocular-{os.getpid()}-{os.urandom(6).hex()}.rec")
            try:
                os.close(os.open(name, flags, 0o600))
                return name
            except FileExistsError:
                continue
            except OSError as exc:
                why = exc
                break
    raise OSError(why.errno if why else errno.ENOENT, f"ocular: no temporary directory to write the recording in "
                  f"(tried {', '.join(dirs) or 'none'}: {why.strerror if why else 'no directory'}); set TMPDIR or "
                  f"give an output file")


def _child_output(path, pid):
    """A forked child's output: its pid before the whole suffix (x.speedscope.json -> x.<pid>.speedscope.json,
    which keeps its format)."""
    if path.lower().endswith(".json.gz"):
        root, ext = path[:-len(".json.gz")], path[-len(".json.gz"):]
    else:
        root, ext = _formats.split_suffix(path)
    return f"{root}.{pid}{ext}"
