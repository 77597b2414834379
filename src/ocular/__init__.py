"""Ocular: a low-overhead tracer and profiler for CPython 3.12+ built on sys.monitoring (PEP 669).

    import ocular
    ocular.start_tracing()            # adaptive mode, writes ocular_trace.pftrace at stop
    ...                               # your program
    ocular.stop_tracing()             # open the file in ui.perfetto.dev (output="t.json": Chrome JSON)

or ``with ocular.tracing(): ...``, or from the shell ``python -m ocular script.py``.

The engine is a C extension (``ocular._ocular``): the callbacks append fixed-size records to per-thread
buffers, and a background recorder thread moves them, as they are, into a recording (a raw file next
to the output, ``<output>.<pid>.tmp``; docs/recording.md).  At stop the recording is rendered into the
output under a temporary name, which is then renamed to its final name; ``python -m ocular convert``
renders a kept recording (``output="x.ocular"``) again later, in any format.  A session still running at interpreter exit is stopped by an
atexit handler, so ``sys.exit()`` or an uncaught exception still leaves a complete trace.

Fork: a child process forked while tracing keeps tracing into its own file, named after the output
with the child's pid before the suffix (``trace.json`` -> ``trace.12345.json``); the parent's trace is
not affected.  A process that leaves through ``os._exit`` (as multiprocessing's forked workers do) must
call ``stop_tracing()`` first, or its file is not written -- unless it was forked while tracing: Ocular then
wraps ``os._exit`` in the child so the child's trace is saved first.  Signals: with
``save_on_signals`` (the command line's default), SIGTERM and SIGHUP save the trace and then end the
process by the signal, in a forked child too (``multiprocessing.Pool.terminate()`` sends SIGTERM); without
it a process killed by a signal dies exactly as it would untraced and leaves its recording (as SIGKILL
always does), which ``python -m ocular convert`` renders and ``merge`` salvages: ``<output>.<pid>.tmp``,
or for a forked child, in a private directory of the session's (_child_recording; docs/fork.md).  A
``subprocess`` child made for ``preexec_fn`` (it execs from C) is not traced at all.
"""

import atexit
import contextlib
import errno
import gc
import opcode
import os
import stat
import sys
import threading
import time
import warnings

from . import _env, _ocular, _pyversions, _toolid
from ._paths import (_check_output, _child_output, _install, _recording_name, _render_tmp_name, _replace_file,
                     _same_file, _tmp_name, _writing)
from ._say import _print_err
from ._session import MODES, SAVE_SIGNALS, Options, Session, _check_report, _format_for, _loops_code, _start_code
from . import _formats

__version__ = "0.1.0"  # the same as pyproject.toml's (tests/test_cli_report.py checks)

__all__ = ["start_tracing", "stop_tracing", "tracing", "is_tracing", "last_report", "convert", "snapshot",
           "TraceResult", "MODES"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# Ids 0, 1 and 2 are claimed by CPython's own tools (DEBUGGER_ID: pdb/bdb on 3.14+, COVERAGE_ID: coverage.py,
# PROFILER_ID: cProfile/profile); by default Ocular takes the first free of the others (_toolid.PREFERENCE), and
# only an explicit tool_id= gets 0-2.  (5 is named OPTIMIZER_ID but no CPython tool uses it.)
_TOOL_NAME = "ocular"

# The real sys.monitoring, captured at import: a program may replace the attribute (``sys.monitoring =
# something``) or delete it, and Ocular must still be able to stop, save and start again.
_mon = sys.monitoring

_current = None  # the running Session (_session.py), or None


class _RunSettings:
    """What a runner sets for the sessions of its process -- the command line (`python -m ocular`) and
    --follow's boot in a followed process -- through _configure(), never by writing module globals; read by
    the stop, the report and the signal save.  The API alone leaves every one at its default."""

    def __init__(self):
        self.report_format = {}  # format() options for the printed report (the CLI's --top, --sort, --all, --loops)
        self.user_files = set()  # file names the report counts as the user's own code ("<string>": -c)
        self.report_file = None  # where the CLI's --report FILE puts it instead of stderr
        self.report_tree = False  # the CLI's --tree: the call tree after the report
        self.recording = False  # the command line's several -o: the session's output is its own recording
        self.outputs = None  # ...and what that recording is rendered into
        self.signals_verbose = False  # the command line (not --quiet): a signal's save says where the trace went
        self.title = None  # --follow's boot: the name of a followed process
        self.follow_log = None  # --follow's boot: the session's log, where a followed process says it failed


_run = _RunSettings()


def _configure(**settings):
    """Set the runner's settings (_RunSettings' attributes; report_format and user_files are added to)."""
    for name, value in settings.items():
        if not hasattr(_run, name):
            raise TypeError(f"ocular._configure: no setting {name!r}")
        if name in ("report_format", "user_files"):
            getattr(_run, name).update(value)
        else:
            setattr(_run, name, value)


def _final_stop():
    """The runner's last stop: the process ends after it (SIGUSR2 is left ignored, not restored)."""
    global _exiting
    _exiting = True
    return stop_tracing()
# One render at a time in the process (the C renderer's state, and the statistics the report reads from
# it, are global): start, stop, convert, snapshot and merge's renders take it; re-made in a forked child.
_render_lock = threading.Lock()
_render_owner = None  # the thread holding it
_render_nested = False  # a stop ran inside the holder's turn (a signal handler): the holder's statistics are gone


class _RenderTurn:
    """The process's render turn: `with _rendering() as mine:` holds the render lock (mine is False when it
    was busy and blocking was False).  A class of this package, not a contextlib generator: stop_tracing()
    takes it while tracing is on, and only this package's own frames are left out of the trace."""

    __slots__ = ("blocking", "lock", "muted")

    def __init__(self, blocking):
        self.blocking = blocking
        self.lock = None
        self.muted = None

    def __enter__(self):
        global _render_owner
        lock = _render_lock
        if self.blocking and _render_owner == threading.get_ident():  # (it would wait for itself forever)
            raise RuntimeError("ocular: this thread is rendering already (a signal handler called Ocular "
                               "during a render); call it again after the render")
        if not lock.acquire(blocking=self.blocking):
            return False
        self.lock = lock
        _render_owner = threading.get_ident()
        # this thread records nothing while it renders (a snapshot, convert() during a session): the
        # formats' own Python (json, gzip, the imports they make) is not the program's, and in ring mode
        # it would push the program's own history out of the window
        self.muted = _ocular._mute_thread(True)
        return True

    def __exit__(self, *exc):
        global _render_owner
        if self.lock is not None:
            _ocular._mute_thread(self.muted)
            _render_owner = None
            self.lock.release()
            self.lock = None
        return False


def _rendering(blocking=True):
    """The process's render turn (a context manager, above).  A thread that holds it already (a signal
    handler that runs between the bytecodes of a render's Python part) is not given it again: see _stop."""
    return _RenderTurn(blocking)


class _NotRunning(RuntimeError):
    """stop_tracing() without a session (or another thread stopped it first)."""


_last_report = None


class TraceResult(dict):
    """What ``stop_tracing()`` returns: a dict with the session's figures.

    Keys: ``output`` (final path, or None with ``perfetto=False``), ``events`` (records written),
    ``dropped``, ``bytes``, ``threads``, ``codes`` (code objects seen), ``clock``, ``ns_per_tick``,
    ``mode``, ``tool_id``; with a rendered output also ``live_events``: of ``events``, those rendered
    while the program was still running (with a second CPU a JSON or ``.pftrace`` output is rendered
    as it is recorded, every thread's part; 0 if all was rendered at stop).
    """

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _events_for(mode):
    """The events set globally.  C functions' CALL (with the C_RETURN and C_RAISE it brings) is a local
    event, set on each code object as it registers (codeinfo.c: so that code calling sys.setprofile can
    be left out)."""
    names = ["PY_START", "PY_RESUME", "PY_THROW", "PY_RETURN", "PY_YIELD", "PY_UNWIND", "JUMP"]
    names += ["BRANCH_LEFT", "BRANCH_RIGHT"] if _pyversions.BRANCH_SPLIT else ["BRANCH"]
    if mode == "precise":
        names.append("INSTRUCTION")
    return names


def _arm_running():
    """C functions: a code object's calls are armed when it registers, at its first event; those already
    running when tracing starts (every thread's frames) are registered now, so that their calls from here
    on are recorded (an audit hook that refuses sys._current_frames: this thread's only)."""
    try:
        frames = list(sys._current_frames().values())
    except Exception:
        frames = [sys._getframe()]
    for frame in frames:
        while frame is not None:
            _ocular._arm_code(frame.f_code)
            frame = frame.f_back


def _cache_entries():
    """Inline cache entries per opcode, as 256 bytes (3.12: a list; 3.13, 3.14: a dict by name; 3.15: a
    frozendict by name); bit 7 marks the opcodes that end a basic block (jumps and branches), which the
    renderer needs to tell one block from several."""
    table = bytearray(256)
    ice = opcode._inline_cache_entries
    for op in range(256):
        if _pyversions.CACHE_TABLE_BY_NAME:
            table[op] = ice.get(opcode.opname[op], 0) if op < len(opcode.opname) else 0
        elif op < len(ice):
            table[op] = ice[op]
    for op in set(opcode.hasjrel) | set(getattr(opcode, "hasjabs", ())) | set(getattr(opcode, "hasjump", ())):
        if op < 256:
            table[op] |= 0x80
    return bytes(table)


def _acquire_tool(tool_id):
    return _toolid.acquire(_TOOL_NAME, tool_id, "pass another tool_id or omit it to pick a free one" if tool_id
                           is not None else "free one of 3-5, or pass tool_id= (--tool-id on the command line) to take one of 0-2")


def _release_tool(tool_id, callbacks):
    """Our events and callbacks cleared and our id freed (_toolid.release: never another tool's)."""
    _toolid.release(tool_id, _TOOL_NAME, callbacks, _ocular._probed_codes)


def _register(tool_id, mode, callbacks):
    """Register every callback and switch on the mode's events (adaptive mode registers INSTRUCTION's
    callback without the event: probes set it locally on hot loops' code objects)."""
    _toolid.register(tool_id, callbacks)  # (3.14+: BRANCH_LEFT and BRANCH_RIGHT share the BRANCH handler)
    mask = 0
    for name in _events_for(mode):
        mask |= getattr(_mon.events, name)
    _mon.set_events(tool_id, mask)




def _process_name():
    if _run.title:
        return _run.title.encode("utf-8", "backslashreplace").decode("utf-8")
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    name = f"{os.path.basename(sys.executable or 'python')} {argv0}".strip()
    return name.encode("utf-8", "backslashreplace").decode("utf-8")  # a non-UTF-8 script name stays valid text


PERFETTO_SUFFIXES = _formats.BY_NAME["perfetto"].suffixes
RECORDING_SUFFIX = _formats.BY_NAME["recording"].suffixes[0]


_chained = {}  # signal -> the program's Python handler that Ocular's (_on_chained_signal) runs after the save
_chain_busy = []  # signals that arrived while _on_chained_signal saved (each calls the program's handler after)


def _arm_signals(sigs, s):
    """save_on_signals: the C handler where the signal does its default, the Python wrapper where the
    program has a Python handler (main thread only: elsewhere it is left as it is)."""
    import _signal as signal  # (the C module, as _session._parse_signals)

    out, fmt = s.output, s.format
    if not out:
        render = -1
    elif fmt == "recording":
        render = -2
    elif out.lower().endswith(".gz") or _formats.BY_NAME[fmt].render == _formats.RENDER_TREE:
        render = -1  # (the call-tree formats are written in Python; gzip too)
    else:
        render = _formats.BY_NAME[fmt].render  # a C sink: rendered by the recorder thread, no Python needed
    convert_args = None  # the convert command's -o, for a signal that keeps the recording (shlex only then)
    if _run.outputs or (out and render == -1):
        import shlex

        convert_args = " ".join(f"-o {shlex.quote(o)}" for o in (_run.outputs or [out]))
    bits = _ocular._signals_arm(sigs, render, convert_args, _run.signals_verbose)
    s.signals = sigs
    for i, name in enumerate(SAVE_SIGNALS):
        sig = int(getattr(signal, name))
        if sig not in sigs or bits & (1 << i):
            continue
        try:
            old = signal.getsignal(sig)
            if callable(old) and old not in (signal.SIG_DFL, signal.SIG_IGN):
                signal.signal(sig, _on_chained_signal)
                _chained[sig] = old
        except ValueError:  # (not the main thread: the program's handler stays as it is)
            pass


def _on_chained_signal(signum, frame):
    """A program's Python handler, installed before tracing started with save_on_signals: the session is
    saved first (as stop_tracing() does), then the program's handler runs and decides."""
    handlers = dict(_chained)
    if _chain_busy:  # (a second signal during the save: the program's handler runs after it, for each)
        _chain_busy.append(signum)
        return None
    _chain_busy.append(signum)
    try:
        if _current is not None and _current.pid == os.getpid():
            try:
                stop_tracing()
            except _NotRunning:
                pass
            except Exception as exc:
                _save_failed(exc)
    finally:
        todo = _chain_busy[:]
        _chain_busy.clear()
    for sig in todo:
        handler = handlers.get(sig)
        if callable(handler):
            handler(sig, frame)
    return None


def _release_signals():
    """After a stop: the program's chained handlers back where Ocular's wrapper still is; the C handler
    disarmed (a signal that arrived during the stop ends the process now, by itself)."""
    if _chained:
        import _signal as signal

        for sig, old in list(_chained.items()):
            with contextlib.suppress(ValueError, OSError, TypeError):
                if signal.getsignal(sig) is _on_chained_signal:
                    signal.signal(sig, old)
        _chained.clear()
    _ocular._signals_disarm()


def start_tracing(mode="adaptive", perfetto=True, deinstrument_threshold=500, exclude=None,
                  include_only=None, output="ocular_trace.pftrace", tool_id=None, format=None, report=True,
                  ring=None, loops=None, thread_roots=False, c_functions=None, sampling=True, near_zero=False,
                  save_on_signals=None, stall_ms=100):
    """Start tracing every thread of this process.

    mode: "adaptive" (every function start and return, and jumps; a jump site is de-instrumented after
        ``deinstrument_threshold`` hits so the loop runs at full speed again, and a loop whose back
        edge passes it gets a short instruction probe that splits its blocks' cycles among their
        instructions) or "precise" (also every instruction; a code object's instructions stop being
        recorded once one of them passes the threshold).  Every function call is counted and timed in
        either mode (unless ``near_zero``).
    perfetto: write the timeline to ``output`` (opens in ui.perfetto.dev); False records statistics
        only and writes no file.
    deinstrument_threshold: hits of a jump site or a cheap C call site before it answers DISABLE (an
        int >= 0; an instruction probe lasts 256 executions of its hottest instruction, or the threshold
        if lower); 0 traces everything, chronologically, for the whole session.
        Function starts and returns are never de-instrumented (but with ``near_zero``).
    near_zero: near-zero overhead: function starts and returns are de-instrumented after
        ``deinstrument_threshold`` calls too, so a hot function's later calls are not recorded: its
        calls and times past the threshold are lower bounds (marked ``>``) or estimates from the sampling
        windows (marked ``~``) in every output.  Default False: every call is counted and timed.
    exclude / include_only: list or tuple of file-name patterns; a pattern with ``*?[`` is matched with
        fnmatch against the whole file name, otherwise as a substring.  Ocular's own files are always
        excluded.
    output: path of the trace file (its directory must exist and be writable); a symbolic link is
        followed (the file it points to is replaced, the link stays); a device, FIFO or socket is
        refused with ValueError.  Default ``ocular_trace.pftrace``: compressed Perfetto protobuf, 30-40x
        smaller than Chrome JSON for the same full trace (docs/exactness.md); ``"t.json"`` writes Chrome
        trace JSON.
    format: "json" (Chrome trace JSON), "perfetto" (native Perfetto protobuf) or "recording" (Ocular's
        raw recording, rendered later by ``python -m ocular convert``; nothing is rendered at stop and
        no report is printed); by default chosen from the output's suffix: .pftrace, .perfetto-trace
        or .pb mean protobuf, .ocular a recording, anything else JSON.  Profile formats (docs/formats.md):
        "pstats" (.pstats, .prof), "folded" (.folded, .collapsed), "speedscope" (.speedscope.json),
        "gecko" (Firefox Profiler, .gecko.json), "pprof" (.pb.gz, .pprof), "html" (.html).
    thread_roots: folded stacks start with their thread's name (default: threads summed).
    ring: flight recorder: a size (bytes, or a str such as "64M") -- only the newest part of the
        recording, about that large, is kept in memory and rendered at stop (and on SIGUSR2, without
        stopping, into ``<output stem>.snapshot<N><suffix>``).  Slices that began before the kept
        window start at its edge, marked as cut.  None (default): everything is recorded to disk.
    c_functions: record calls of C functions (builtins such as ``len`` or ``time.sleep``, methods of
        built-in types, extension functions) as their own slices and report rows, named as cProfile
        names them, the way cProfile counts them; a site that calls Python code is left alone at once,
        and a C call site is judged after every ``deinstrument_threshold`` calls: it stays instrumented
        while its calls average 1 us or more (or mostly run other recorded calls), else it is
        de-instrumented (its later calls count in the caller's self time, estimated by the sampling
        windows and marked ``~``).  None (default): the OCULAR_C_FUNCTIONS setting, else on.
    loops: what the trace shows of loops: "iterations" (an instant per iteration, with its instructions
        and cycles), "runs" (one slice per run of a loop, with its iterations and cycles; JSON only: a
        ValueError for Perfetto protobuf) or
        "off".  None (default): "runs" for JSON (a loop-heavy script's trace stays small), "iterations"
        for Perfetto protobuf (compressed, about a byte per instant).  The report's loop figures are the
        same either way.
    sampling: in adaptive mode with a threshold, keep measuring de-instrumented C call sites (and, with
        ``near_zero``, functions) in short sampling windows (1 ms, the first as soon as a site is disabled, then
        2, 4, 8 ... ms apart up to every 100 ms, longer with several running threads: every disabled site is
        re-armed by ``sys.monitoring.restart_events()`` and recorded while the window is open), so the
        report estimates, labelled with ``~``, the calls and time of de-instrumented callees that would
        otherwise count as their callers' self time.  Windows are opened only while no other
        sys.monitoring tool holds a tool id (restart_events() re-arms every tool's sites); otherwise the
        report names such callees without an estimate.  False: no windows.  A (period_ms, window_ms)
        tuple sets the timing.
    tool_id: force a sys.monitoring tool id (0-5); by default the first free one of 3, 4, 5 (0, 1
        and 2 are left to the debugger, coverage and profiler tools: pdb, coverage.py, cProfile).
    report: what stop_tracing() prints to sys.stderr: True or "text" (function statistics and the
        hot-loop disassembly), "json" (the same, machine-readable), False (nothing).  The report is
        always available afterwards from ocular.last_report().
    save_on_signals: signals that save the trace before they end the process: True for
        (signal.SIGTERM, signal.SIGHUP), or a tuple/list of those; None or False (default): none (the
        command line turns it on).  Where such a signal does its default (kills the process), Ocular's
        handler hands the stop to its recorder thread, even while the program is busy in a long C call:
        that thread ends the recording, writes a JSON, .pftrace or speedscope output (a format written
        by Python code, or gzip, keeps the recording as ``<output>.ocular``, named on stderr with the
        ``python -m ocular convert`` that renders it; no report is printed), and the process then dies of
        the signal, as it would have untraced.  A Python handler the program installed before this call
        (made in the main thread) is kept: the signal stops tracing (saving everything, as stop_tracing() does), then calls it,
        and it decides what happens.  An ignored signal stays ignored, a handler installed outside Python
        is left alone, and a handler the program installs while tracing replaces Ocular's.
    stall_ms: asyncio: a task step that holds the event loop this many milliseconds or more (1 to
        3,600,000; default 100, as asyncio's debug mode) is a loop stall, listed in the report with where
        it was when it reached that.

    Raises ValueError/TypeError for bad arguments and RuntimeError if tracing is already running or
    the tool id is taken; nothing is started in those cases.
    """
    global _current, _codes_held_for, _exiting
    if _current is not None:
        raise RuntimeError("ocular: tracing is already running; call ocular.stop_tracing() first")
    o = Options(mode, perfetto, deinstrument_threshold, exclude, include_only, output, tool_id, format, report, ring,
                loops, thread_roots, c_functions, sampling, near_zero, save_on_signals, stall_ms)
    if _ocular._is_active():
        raise RuntimeError("ocular: tracing is already running in this process")

    _quiet_fork_warning()  # before tracing starts: it must not import anything while traced
    _save_before_exec()
    if o.ring:
        import signal  # noqa: F401  (likewise: SIGUSR2's handler, once tracing runs; save_on_signals uses _signal)
    tid = _acquire_tool(o.tool_id)
    try:
        rec = _recording_name(o.output)
        # (starting may start the render while recording: not during another render)
        with _rendering(), _writing(output, o.output or "\0"):
            _codes_held_for = None  # (the session's code table replaces a held one)
            _exiting = False
            owncost = _owncost_funcs()
            _ocular._owncost_baseline(*owncost)  # (untraced: before the callbacks are registered)
            callbacks = _ocular._start(
                precise=o.mode == "precise", threshold=o.threshold, output=o.output,
                tmp_output=_render_tmp_name(o.output) if o.output else None, include_only=o.include_only, exclude=o.exclude,
                own_dir=_PACKAGE_DIR, cache_entries=_cache_entries(), process_name=_process_name(),
                disable=_mon.DISABLE, main_ident=threading.main_thread().ident,
                format=_start_code(o.format if o.output else None), recording=rec, ring_bytes=o.ring, loops=o.loops,
                c_functions=o.c_functions, near_zero=o.near_zero, stall_ms=o.stall_ms,
            )
    except BaseException:
        _release_tool(tid, ())
        raise
    session = Session(o, tid, callbacks, rec)
    try:
        if "CALL" in callbacks:
            _ocular._calls(tid, _mon.set_local_events, _mon.events.CALL)
        _register(tid, o.mode, callbacks)
        if "CALL" in callbacks:
            _arm_running()
        # what one event costs, by kind, for the renderer to take off (before probes and windows exist)
        session.own_cost = _ocular._owncost_measure(*owncost)
        if o.mode == "adaptive":
            _ocular._probes(tid, _mon.set_local_events, _mon.events.INSTRUCTION)
        if o.sampling:
            _ocular._sampling_start(tid, _mon.get_tool, _mon.restart_events, *o.sampling)
    except BaseException:
        _release_tool(tid, callbacks)
        _ocular._stop()
        _discard(rec)
        raise
    _current = session
    if o.ring or o.signals:
        muted = _ocular._mute_thread(True)  # (its signal module calls are Ocular's, not the program's)
        try:
            if o.ring:
                _snapshot_on_sigusr2()
            if o.signals:
                _arm_signals(o.signals, session)
        except BaseException:
            with contextlib.suppress(Exception):
                stop_tracing()
            raise
        finally:
            _ocular._mute_thread(muted)


_OWNCOST_FILE = "<ocular own-cost calibration>"
_owncost = None


def _owncost_funcs():
    """The functions owncost.c times untraced, then traced, at each start: (calls, ccalls, loop, x)."""
    global _owncost
    if _owncost is None:
        src = ("def f():\n    pass\n" + "def calls():\n" + "    f()\n" * 16 + "def ccalls(x):\n" + "    len(x)\n" * 16
               + "def loop():\n    for _ in range(16):\n        pass\n")
        ns = {"__builtins__": __builtins__}
        exec(compile(src, _OWNCOST_FILE, "exec"), ns)
        _owncost = (ns["calls"], ns["ccalls"], ns["loop"], "abc")
    return _owncost


def _keep_recording(rec, out):
    """Rendering ``out`` failed (a full disk, ^C): the complete recording is kept, renamed next to it (a
    rename needs no room), so that nothing recorded is lost.  Its new name, or None."""
    root = out[:-len(".json.gz")] if out.lower().endswith(".json.gz") else os.path.splitext(out)[0]
    for name in (root + RECORDING_SUFFIX, f"{out}.{os.getpid()}{RECORDING_SUFFIX}"):
        if os.path.lexists(name):
            continue
        try:
            os.rename(rec, name)
            return name
        except OSError:
            return None
    return None


def _save_cut_recording(rec, out, fmt, s):
    """The recording of a session whose writes failed (a full disk) holds every block written before the
    failure: rendered into ``out`` like a killed process's (slices still open end at their thread's last
    record), or kept next to it when that fails too (the render needs room; a rename does not), so that
    nothing recorded is lost.  (what the error says of it, the recording's path if it is still to be
    removed, else None)."""
    try:
        if not os.path.getsize(rec):
            return f"nothing was left under {out!r} (nothing had been written)", rec
    except OSError:
        return f"nothing was left under {out!r}", None
    if fmt == "recording":
        try:
            _install(rec, out)
            return (f"{out!r} keeps what was recorded before (a recording cut short: python -m ocular convert "
                    f"{out} -o trace.json renders it)"), None
        except OSError:
            pass
    else:
        tmp = _render_tmp_name(out)
        try:
            rendered = _formats.render(rec, fmt, tmp, True, dict(thread_roots=s.thread_roots, with_code=True,
                                                                 loops=s.loops, gzip=out.lower().endswith(".gz")))
            if not rendered["write_errno"]:
                _install(tmp, out)
                return f"the trace {out!r} holds the {rendered['events']} events recorded before it", rec
        except ValueError:  # not even a complete header block: nothing to keep
            _discard(tmp)
            return f"nothing was left under {out!r} (nothing complete had been written)", rec
        except OSError:
            pass
        _discard(tmp)
    kept = _keep_recording(rec, out)
    if kept:
        return (f"what was recorded before it is kept in {kept!r} (the trace did not fit): render it with "
                f"python -m ocular convert {kept} -o {out}"), None
    return f"nothing was left under {out!r}", rec


def _note_partial(fmt, out, rendered):
    """A format with no place for a note of its own gets a line on stderr when a part of its figures is
    partial (functions or C call sites de-instrumented: _formats.partial_note); a Chrome JSON trace too
    large for the browser viewers that read it as one string gets one saying so (_formats.json_size_note)."""
    note = _formats.partial_note(rendered) if fmt and _formats.BY_NAME[fmt].note_on_stderr else None
    if note:
        _print_err(f"ocular: {out}: partial: {note}")
    # a Chrome JSON trace past what the browser viewers read (the size on disk: not after .json.gz's gzip)
    note = _formats.json_size_note((rendered or {}).get("bytes"), out) if (
        fmt == "json" and not str(out).lower().endswith(".gz")) else None
    if note:
        _print_err(f"ocular: {out}: {note}")


def _kept_text(kept, out):
    return f"the recording is kept in {kept!r}: render it with python -m ocular convert {kept} -o {out}"


def _discard(path):
    """Remove a file of ours if it exists; a large one's blocks are freed by a short-lived thread while
    the program goes on (_ocular._remove)."""
    if path:
        with contextlib.suppress(OSError):
            _ocular._remove(path)


def is_tracing():
    """True while a tracing session is running in this process."""
    return _current is not None


def stop_tracing():
    """Stop tracing, save everything recorded and return a TraceResult.

    The trace is written under a temporary name while tracing and renamed to the final name here.
    Raises RuntimeError if tracing is not running, and OSError if the trace could not be written (the
    partial file is removed, never left under the final name; if only the rendering failed, the
    complete recording is kept next to the output and the message names it).  Internal failures of the
    engine (for instance running out of memory) are reported as RuntimeError after the trace is saved.
    """
    if _current is None:
        raise _NotRunning("ocular: tracing is not running; call ocular.start_tracing() first")
    return _stop()


def _stop():
    global _render_nested
    if _render_owner == threading.get_ident():
        # This thread is in the middle of a render's Python part (convert, snapshot) and a signal handler
        # stops tracing (to save on SIGTERM, say): waiting would never end, so the stop goes first, and
        # the interrupted render leaves its report out (its statistics are gone).
        _render_nested = True
        return _stop_locked()
    with _rendering():  # (a convert() in another thread finishes first)
        return _stop_locked()


def _stop_locked():
    global _current, _last_report, _codes_held_for
    s = _current
    if s is None:  # (another thread stopped it while this one waited for the render lock)
        raise _NotRunning("ocular: tracing is not running; call ocular.start_tracing() first")
    _current = None
    try:
        _release_tool(s.tool_id, s.callbacks)
    except Exception as exc:  # stop the engine and save the trace whatever happened to sys.monitoring
        _print_err(f"ocular: could not release sys.monitoring tool id {s.tool_id}: {exc!r}")
    figures = _ocular._stop()
    if s.ring:
        _release_sigusr2()
    try:
        from ._report import _settle

        # Sites we answered DISABLE stay disabled for our tool id until their code object is
        # re-instrumented; do it now, so the next session (which may reuse the id) sees them armed.
        _settle(_ocular._disabled_codes())
    except Exception as exc:
        _print_err(f"ocular: could not re-arm disabled code: {exc!r}")
    rec = figures.pop("recording")
    out = figures["output"] or None
    fmt = s.format if out else None
    try:
        result = TraceResult(figures)
        del result["tmp_output"]
        result["mode"] = s.mode
        result["tool_id"] = s.tool_id
        result["report"] = None
        result["output"] = out
        if figures["write_errno"]:  # the recording could not be written whole (a full disk): what was
            err = figures["write_errno"]  # written before is a recording cut short, kept or rendered
            why = f"ocular: writing the recording failed ({_why_write_failed(err)})"
            if not out:
                raise OSError(err, f"{why}: {rec!r}", rec)
            saved, rec = _save_cut_recording(rec, out, fmt, s)
            raise OSError(err, f"{why}; {saved}", out)
        if out and not os.path.isdir(os.path.dirname(out)):  # (the program removed it, and the recording in it)
            raise FileNotFoundError(errno.ENOENT, f"ocular: the output directory {os.path.dirname(out)!r} was "
                                    f"removed while tracing, and the recording in it: no trace is written", out)
        if fmt == "recording":
            from . import _adaptive

            _adaptive.append(rec)  # the hot loops' specialized instructions, for a report rendered elsewhere
            _install(rec, out)
            rec = None
            result["bytes"] = os.path.getsize(out)
        else:
            tmp = _render_tmp_name(out) if out else None
            try:
                rendered = _formats.render(rec, fmt, tmp, True, dict(thread_roots=s.thread_roots, with_code=True,
                                                                     loops=s.loops, gzip=out.lower().endswith(".gz")
                                                                     if out else False))
            except BaseException:
                _discard(tmp)
                if out:  # (^C while rendering, say) the recording stays, for `convert`
                    kept = _keep_recording(rec, out)
                    if kept:
                        rec = None
                        _print_err(f"ocular: rendering {out!r} did not finish; {_kept_text(kept, out)}")
                raise
            result["recording_bytes"] = figures["bytes"]
            result["bytes"] = rendered["bytes"]
            result["pauses"] = rendered["pauses"]
            result["events"] = rendered["events"]
            result["live_events"] = rendered["live_events"]
            if out:  # saved before anything is printed: a closed stderr must not lose the trace
                if rendered["write_errno"]:
                    _discard(tmp)
                    kept = _keep_recording(rec, out)
                    if kept:
                        rec = None
                    raise OSError(rendered["write_errno"],
                                  f"ocular: writing the trace failed ({_why_write_failed(rendered['write_errno'])}); "
                                  f"nothing was left under {out!r}" + (f"; {_kept_text(kept, out)}" if kept else ""),
                                  out)
                _install(tmp, out)
                _note_partial(fmt, out, rendered)
            _last_report = _make_report(s.mode, s.threshold, s.report, figures["clock"], with_code=True)
            result["report"] = _last_report
            if _run.report_tree and s.report in (True, "text"):
                try:
                    from ._formats._tree import tree_text

                    _report_out("\nCall tree\n" + tree_text(rec), append=True)
                except Exception as exc:
                    _print_err(f"ocular: could not build the call tree: {exc!r}")
        if figures["internal_error"]:
            raise RuntimeError(f"ocular: internal error during tracing: {figures['internal_error']} "
                               f"(the trace was saved to {out!r})")
        return result
    finally:
        _discard(rec)
        ident = _file_identity(out) if fmt == "recording" and out else None
        _codes_held_for = (out, ident) if ident else None
        _ocular._release(_codes_held_for is not None)
        if s.child_dir:
            try:
                _clean_child_dirs(s)
            except Exception as exc:  # (the trace is saved: a leftover directory is no reason to fail)
                _print_err(f"ocular: could not clean up the forked children's directory: {exc!r}")
        if s.signals:
            _release_signals()  # (last: a SIGTERM that came during the stop ends the process here)


# A session that kept only its recording (a .ocular output, as the command line's several -o do) leaves
# its code table in place past the stop: a convert() of that very file in this process, before another
# session starts, reports with the live code objects -- the hot loops' specialized instructions and their
# arguments -- as a render at stop does.  (path, identity of the file at stop); convert() frees the table.
_codes_held_for = None


def _file_identity(path):
    """What tells the file at `path` from another one written there since (None if there is none)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _release_render(used_held=False):
    """Free the last render's tables; a held code table too once a render has used it."""
    global _codes_held_for
    if used_held:
        _codes_held_for = None
    _ocular._release(_codes_held_for is not None)




def _make_report(mode, threshold, report, clock, with_code):
    """The report of the last render (printed as the session asked); None if it cannot be built.  The
    cyclic collector is paused while it is built and formatted (thousands of small dicts and tuples,
    none cyclic: the collections they set off walked the program's whole heap, ~30 M instructions of a
    pyperformance run's stop) and resumed as it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        return _build_report(mode, threshold, report, clock, with_code)
    finally:
        if was:
            gc.enable()


def _build_report(mode, threshold, printed, clock, with_code):
    try:
        from ._report import KEEP_FUNCTIONS, Report

        report = Report(_ocular._report_data(with_code, KEEP_FUNCTIONS), mode, threshold, clock)
    except Exception as exc:  # the trace matters more than the report: it is saved; say so
        _print_err(f"ocular: could not build the report: {exc!r}")
        return None
    if printed in (True, "text", "json"):
        try:
            fmt = dict(_run.report_format)
            if "width" not in fmt and not _run.report_file:  # a terminal's width; a file or pipe gets whole lines
                try:
                    fmt["width"] = os.get_terminal_size(sys.stderr.fileno()).columns if sys.stderr.isatty() else None
                except (AttributeError, ValueError, OSError):
                    fmt["width"] = None
            text = report.format(**fmt) if printed != "json" else report.to_json()
        except Exception as exc:
            text = f"ocular: could not format the report: {exc!r}"
        _report_out(text)
    return report


def _report_out(text, append=False):
    """The printed report (and the call tree after it, append=True): to the CLI's --report FILE, else
    to stderr."""
    if not _run.report_file:
        _print_err(text)
        return
    try:  # (a FIFO nobody reads fails at once, ENXIO, instead of blocking the exit)
        fd = os.open(_run.report_file, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | (os.O_APPEND if append else os.O_TRUNC),
                     0o666)
        os.set_blocking(fd, True)
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError as exc:
        why = "a FIFO that nobody reads" if exc.errno == errno.ENXIO else exc.strerror or exc
        _print_err(f"ocular: cannot write the {'call tree' if append else 'report'} to {_run.report_file!r}: {why}")


                        # the user gave (messages do not show it)


def _recording_failed(err):
    """Called by the recorder (a pending call in the main thread) when a write of the session's recording
    fails: the program learns it now, not only at stop.  Never raises."""
    try:
        s = _current
        where = f" for {s.output!r}" if s and s.output and not _run.recording else ""
        _print_err(f"ocular: writing the recording{where} failed ({_why_write_failed(err)}): the program goes "
                   f"on, but what it does from now on is not recorded; what was recorded before is kept at stop")
    except Exception:
        pass


def _why_write_failed(err):
    """What a write error of the renderer's or the recorder's means, for the user."""
    if err == errno.EBADF:  # (out.c: our descriptor was closed by the program, and its file cannot be had again)
        return "the program closed Ocular's file descriptor, and the file could not be opened again"
    return os.strerror(err)


def _gzip_in_place(path):
    """Compress a rendered JSON trace (output ``.json.gz``) with zlib's gzip; returns its new size."""
    import gzip
    import shutil

    gz = path + ".gz"
    try:
        # (the header's file name would be the temporary one, which `gunzip -N` restores: none at all)
        with open(path, "rb") as src, open(gz, "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        _replace_file(gz, path)
    except BaseException:
        _discard(gz)
        raise
    return os.path.getsize(path)


def convert(recording, output, format=None, report=False, loops=None, thread_roots=False, statistics=True):
    """Render a recording (written with ``output="x.ocular"``, possibly by another process, or left by
    a process that was killed) into ``output``; the format comes from the output's suffix as for
    start_tracing() (``.json.gz``: gzip-compressed JSON).  report: print the report to stderr
    (True/"text" or "json").  loops: as for start_tracing().  thread_roots: folded stacks start with
    their thread.  statistics: False renders a JSON or ``.pftrace`` trace alone, without the
    statistics (faster; ``report`` is then None, and a report cannot be asked for).  Returns a
    TraceResult (``report`` holds the Report: its hot loops show the specialized instructions and their
    arguments, kept in the recording at stop, or the recorded base opcodes for a recording without them,
    one cut short by a kill).  Raises FileNotFoundError if the recording does not
    exist, ValueError for a path that is not a recording (a directory, a FIFO, another file), and
    OSError if the output cannot be written (nothing is left under its name).  One render runs at a
    time in the process: a call from another thread waits for the one running."""
    recording = os.fspath(recording)
    if not isinstance(thread_roots, bool):
        raise TypeError(f"thread_roots must be True or False, not {type(thread_roots).__name__}")
    if not isinstance(statistics, bool):
        raise TypeError(f"statistics must be True or False, not {type(statistics).__name__}")
    _check_report(report)
    if report and not statistics:
        raise ValueError("ocular: a report needs the statistics (statistics=False renders the trace alone)")
    if not os.path.isfile(recording):
        if os.path.exists(recording):
            raise ValueError(f"ocular: the recording {recording!r} is "
                             f"{'a directory' if os.path.isdir(recording) else 'not a regular file'}")
        raise FileNotFoundError(f"ocular: the recording {recording!r} does not exist")
    path = _check_output(output)
    fmt = _format_for(path, format)
    if fmt == "recording":
        raise ValueError(f"ocular: {output!r} names a recording; convert renders to a trace (.json, .pftrace)")
    if _same_file(recording, path):
        raise ValueError(f"ocular: the output {output!r} is the recording itself (it would replace it)")
    _env.check_render(perfetto_file=fmt == "perfetto")
    with _rendering():  # one render at a time in the process (convert() from several threads waits its turn)
        return _convert_locked(recording, path, output, fmt, report, loops, thread_roots, statistics)


def _convert_locked(recording, path, output, fmt, report, loops, thread_roots, statistics=True):
    global _last_report, _render_nested
    _render_nested = False
    path_of_recording = os.path.abspath(recording)
    tmp = _render_tmp_name(path)
    try:
        rendered = _formats.render(recording, fmt, tmp, True, dict(thread_roots=thread_roots, loops=_loops_code(loops, fmt),
                                                                   gzip=path.lower().endswith(".gz"), stats=statistics))
    except ValueError as exc:
        _discard(tmp)
        raise ValueError(f"ocular: {recording}: {exc}") from None
    except BaseException:
        _discard(tmp)
        raise
    if rendered["write_errno"]:
        _discard(tmp)
        raise OSError(rendered["write_errno"], f"ocular: writing the trace failed "
                      f"({_why_write_failed(rendered['write_errno'])}); nothing was left under {output!r}", path)
    _replace_file(tmp, path)
    _note_partial(fmt, path, rendered)
    if rendered.get("damaged"):  # (also in a JSON trace's otherData: damaged, clamped_records, damage)
        _print_err(f"ocular: {recording}: {rendered['damaged']}")
    mode = "precise" if rendered["precise"] else "adaptive"
    result = TraceResult(rendered)
    result.update(output=path, format=fmt, mode=mode)
    if _render_nested:  # a signal handler stopped tracing meanwhile: these statistics are that session's
        _print_err(f"ocular: {recording}: no report (tracing was stopped while it was rendered)")
        return result
    if not statistics and fmt in ("json", "perfetto"):  # the trace alone: there are none to report
        result["report"] = None
        _release_render()
        return result
    held = _codes_held_for  # (see its definition)
    live = held is not None and held[0] == path_of_recording and held[1] == _file_identity(path_of_recording)
    try:
        _last_report = result["report"] = _make_report(mode, None, report, rendered["clock"], with_code=live)
    finally:
        _release_render(live)  # the renderer's tables (a running session's are left alone)
    return result


_snapshots = 0

# The command line's exit status when the program exited 0 but Ocular could not write its trace (a full
# disk): distinct from the program's own failures, which keep their status (sysexits' EX_IOERR).
_TRACE_NOT_WRITTEN = 74


def _snapshot_on_sigusr2():
    """Ring mode: SIGUSR2 renders the kept window without stopping (only where SIGUSR2 does the default,
    in the main thread)."""
    import signal

    try:
        if signal.getsignal(signal.SIGUSR2) is not signal.SIG_DFL:
            return
    except (ValueError, AttributeError):
        return

    def _on_usr2(signum, frame):  # (never raises into the program, never waits for a render)
        with _rendering(blocking=False) as mine:
            if not mine:
                _print_err("ocular: SIGUSR2: a render is already running (another snapshot, a stop or a "
                           "convert); no snapshot for this signal")
                return
            try:
                _snapshot(None)
            except Exception as exc:
                _print_err(f"ocular: SIGUSR2: the snapshot failed: {exc}")

    global _usr2_handler
    try:
        signal.signal(signal.SIGUSR2, _on_usr2)
        _usr2_handler = _on_usr2
    except ValueError:
        pass


_usr2_handler = None  # ring mode's SIGUSR2 handler while it is installed
_exiting = False  # the process ends after this stop (at exit; the command line's runner)


def _release_sigusr2():
    """After a ring session: SIGUSR2 does the default again (ends the process), as before the session.  When
    the process is exiting it is ignored instead: Python's finalization puts the default back itself, and
    a snapshot asked for in that gap would kill a process that saved its trace and is ending well."""
    global _usr2_handler
    if _usr2_handler is None:
        return
    import signal

    try:
        if signal.getsignal(signal.SIGUSR2) is _usr2_handler:  # (not if the program replaced it since)
            signal.signal(signal.SIGUSR2, signal.SIG_IGN if _exiting else signal.SIG_DFL)
        _usr2_handler = None
    except ValueError:  # (not the main thread: left as it is)
        pass


def snapshot(output=None):
    """Ring mode: render the kept window now, without stopping, into ``output`` (default: the session's
    output with ``.snapshot<N>`` before its suffix).  Returns the path written.  Waits for a render
    another thread is doing (one render at a time)."""
    with _rendering():
        return _snapshot(output)


def _snapshot(output):
    global _snapshots
    s = _current
    if s is None or not s.ring:
        raise RuntimeError("ocular: snapshot() needs a running flight-recorder session (start_tracing(ring=...))")
    if output is None:
        base = s.output or os.path.abspath("ocular_trace.pftrace")
        root, ext = _formats.split_suffix(base)
        _snapshots += 1
        output = f"{root}.snapshot{_snapshots}{ext if s.format != 'recording' else '.json'}"
    path = _check_output(output)
    fmt = _format_for(path, None)
    rec = f"{path}.{os.getpid()}.window.tmp"
    tmp = _render_tmp_name(path)
    try:
        _ocular._dump(rec)
        if fmt == "recording":
            _replace_file(rec, path)
        else:
            rendered = _formats.render(rec, fmt, tmp, False, dict(thread_roots=s.thread_roots, loops=s.loops))
            if rendered["write_errno"]:
                raise OSError(rendered["write_errno"], f"ocular: writing the snapshot failed "
                              f"({_why_write_failed(rendered['write_errno'])})", path)
            _replace_file(tmp, path)
    finally:
        _discard(rec)
        _discard(tmp)
        _ocular._release()
    _print_err(f"ocular: flight recorder snapshot saved to {path}")
    return path


def last_report():
    """The Report of the last finished session (None before the first stop_tracing())."""
    return _last_report


@contextlib.contextmanager
def tracing(**kwargs):
    """Context manager: ``with ocular.tracing(output="t.json"): ...`` starts and stops tracing.

    Takes the same keyword arguments as start_tracing(); the TraceResult is stored on the yielded
    object's ``result`` attribute after the block.
    """
    holder = _Holder()
    start_tracing(**kwargs)
    try:
        yield holder
    finally:
        holder.result = stop_tracing()


class _Holder:
    result = None




def _save_failed(exc):
    """A save at exit (or os._exit) failed: nobody to raise to, so it is said -- and, in a process that
    --follow traces, written to the session's log, so that the command line names it and fails."""
    text = str(exc.strerror if isinstance(exc, OSError) and isinstance(exc.strerror, str) else exc)
    text = text[len("ocular: "):] if text.startswith("ocular: ") else text
    _print_err(f"ocular: {text}")
    if _run.follow_log and isinstance(exc, OSError):  # (a RuntimeError after the save, say, is no lost trace)
        with contextlib.suppress(Exception):
            with open(_run.follow_log, "ab") as f:
                f.write(f"{os.getpid()} {_run.title or ''}: not saved: {text}\n".encode("utf-8", "backslashreplace"))


def _at_exit():
    global _exiting
    if _current is not None and _current.pid == os.getpid():
        _exiting = True
        try:
            stop_tracing()
        except _NotRunning:  # another thread stopped it meanwhile
            pass
        except Exception as exc:  # at exit there is nobody to raise to: say it
            _save_failed(exc)


def _before_fork():
    """In the process that forks while tracing: name, once per session, the private directory where its
    forked children keep their recordings while they run (_child_recording).  Before the fork, so that
    every child, and its own children, use the same one."""
    s = _current
    if s is not None and s.child_dir is None and s.pid == os.getpid():
        with contextlib.suppress(Exception):
            s.child_dir = _child_dir_for()


def _forked_to_exec():
    """Whether this fork child is one that subprocess made to run preexec_fn: CPython runs the at-fork
    hooks in it only for preexec_fn, then it execs the new program from C (or _exits 255), and nothing
    could save its trace.  The innermost Python frame (the one that called _posixsubprocess.fork_exec,
    which runs the hooks) is then subprocess's Popen._execute_child."""
    sub = sys.modules.get("subprocess")
    execute = getattr(getattr(sub, "Popen", None), "_execute_child", None)
    try:
        return getattr(execute, "__code__", None) is sys._getframe(2).f_code
    except ValueError:
        return False


def _after_fork_child():
    global _current, _render_lock, _render_owner
    _render_lock = threading.Lock()  # (another thread may have held it at the fork)
    _render_owner = None
    if _current is None:
        return
    pid = os.getpid()
    if _forked_to_exec():  # tracing is off here, and nothing is written (a recording left behind was all it did)
        with contextlib.suppress(Exception):
            _ocular._after_fork_child(None, None, None, threading.current_thread().ident)
        with contextlib.suppress(Exception):
            _release_tool(_current.tool_id, _current.callbacks)
        _current = None
        return
    out = _current.output
    child_out = _child_output(out, pid) if out else None
    try:
        rec = _child_recording(_current, child_out)
        ok = _ocular._after_fork_child(child_out, _render_tmp_name(child_out) if child_out else None,
                                       rec, threading.current_thread().ident)
    except Exception as exc:
        _print_err(f"ocular: tracing is off in forked child {pid}: {exc}")
        _release_tool(_current.tool_id, _current.callbacks)
        _current = None
        return
    if ok:
        _current = _current.forked_child(child_out, rec)
        _wrap_os_exit()  # (the dispositions are the parent's: save_on_signals' handler goes on saving here)


# ---- where forked children keep their recordings (docs/fork.md) ----
# A forked child's recording is written while it runs and, once it has rendered its output
# (<output>.<pid>.<ext>, beside the parent's), removed.  A child that never gets there -- killed by a signal
# (multiprocessing.Pool's terminate() at the end of its with block) -- leaves it behind: not in the user's
# directory but in a private one, per session, <root>/run-<parent pid>-<random>/, <root> being
# $XDG_RUNTIME_DIR/ocular, else <temp dir>/ocular-<uid> (mode 0700, ours, checked).  The process that
# started the session removes its run's directory at its end when nothing is left in it; a run whose
# processes are all gone and whose files are more than a day old is removed by the next session that
# forks.  (--follow keeps its children's recordings in its parts directory, where the merge salvages them.)

_RUN_KEEP_SECONDS = 24 * 3600  # how long the partial recordings of killed children are kept for salvage


def _private_root():
    """$XDG_RUNTIME_DIR/ocular (a directory of the user's own, mode 0700, by the XDG spec), else
    ocular-<uid> in the temporary directory ($TMPDIR, else /tmp, else /var/tmp).  No import: this runs
    while tracing."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg) and _own_private_dir(xdg):
        return os.path.join(xdg, "ocular")
    for d in (os.environ.get("TMPDIR"), "/tmp", "/var/tmp"):
        if d and os.path.isabs(d) and os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return os.path.join(d, f"ocular-{os.getuid()}")
    return None


def _own_private_dir(path):
    """A directory (not a symlink) of this user's, that nobody else may enter."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _child_dir_for():
    root = _private_root()
    return os.path.join(root, f"run-{os.getpid()}-{os.urandom(4).hex()}") if root else ""


def _make_private_dir(path):
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    if not _own_private_dir(path):
        raise PermissionError(errno.EACCES, f"ocular: {path!r} is not a private directory of this user's "
                              f"(mode 0700)", path)


def _child_recording(s, child_out):
    """A forked child's recording: in the session's private directory (see above); beside the output as
    before in a --follow session (its parts directory is Ocular's own) or when there is no private
    directory to be had."""
    if child_out and _run.follow_log is None and s.child_dir:
        run = s.child_dir
        try:
            _make_private_dir(os.path.dirname(run))
            _make_private_dir(run)
            return os.path.join(run, os.path.basename(_tmp_name(child_out)))
        except OSError:
            pass
    return _recording_name(child_out)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _tmp_pid(name):
    """The writer's pid of a recording named <...>.<pid>.tmp, or None."""
    if not name.endswith(".tmp"):
        return None
    pid = name[:-len(".tmp")].rpartition(".")[2]
    return int(pid) if pid.isdigit() else None


def _clean_child_dirs(s):
    """At the end of the session that forked (not in its children): remove its run's directory if it is
    empty, else say what is in it (recordings of children that were killed, or still run); remove the
    runs of earlier sessions that are over (no process of theirs alive) and more than a day old."""
    run = s.child_dir
    if not run or s.forked:
        return
    left = []
    with contextlib.suppress(OSError):
        left = sorted(os.listdir(run))
    if not left:
        with contextlib.suppress(OSError):
            os.rmdir(run)
    elif s.report and any(_tmp_pid(n) and not _pid_alive(_tmp_pid(n)) for n in left):
        dead = [n for n in left if _tmp_pid(n) and not _pid_alive(_tmp_pid(n))]
        _print_err(f"ocular: {len(dead)} forked child process{'es' if len(dead) > 1 else ''} ended without saving "
                   f"{'their' if len(dead) > 1 else 'its'} trace (killed?); what was recorded is kept (a day at least) "
                   f"in {run} (python -m ocular convert {os.path.join(run, dead[0])} -o trace.json)")
    root = os.path.dirname(run)
    try:
        runs = os.listdir(root)
    except OSError:
        return
    now = time.time()
    for name in runs:
        path = os.path.join(root, name)
        parts = name.split("-")
        if path == run or len(parts) != 3 or parts[0] != "run" or not parts[1].isdigit():
            continue
        with contextlib.suppress(OSError):
            files = [os.path.join(path, n) for n in os.listdir(path)]
            if _pid_alive(int(parts[1])) or any(_tmp_pid(f) and _pid_alive(_tmp_pid(f)) for f in files):
                continue
            if max([os.lstat(path).st_mtime] + [os.lstat(f).st_mtime for f in files]) > now - _RUN_KEEP_SECONDS:
                continue
            for f in files:
                os.unlink(f)
            os.rmdir(path)


_real_os_exit = os._exit
_real_os_fork = getattr(os, "fork", None)


def _executable(path):
    """Whether os.exec*(path) can replace the process: a path that names an executable file, or (fexecve,
    ``os.execve(fd, ...)``) a descriptor open on a regular file with an execute bit.  Anything else
    (a wrong type included) is for the real function to refuse, in its own words."""
    try:
        if isinstance(path, int) and not isinstance(path, bool):
            st = os.fstat(path)
            return stat.S_ISREG(st.st_mode) and bool(st.st_mode & 0o111)
        return os.access(path, os.X_OK)
    except (OSError, TypeError, ValueError, OverflowError):
        return False


class _ExecWrapper:
    # os.execv / os.execve as Ocular wraps them (_save_before_exec).  It equals, and hashes as, the
    # function it wraps, so that ``os.execve in os.supports_fd`` (a set of the os functions, built when os
    # was imported) stays true and the supports_* sets stay as they are; name, doc, module and signature
    # are the real function's (``__wrapped__``).  (A function wrapper was not in os.supports_fd.)

    __slots__ = ("__wrapped__",)
    __doc__ = property(lambda self: self.__wrapped__.__doc__)
    __module__ = property(lambda self: self.__wrapped__.__module__)

    def __init__(self, real):
        self.__wrapped__ = real

    def __call__(self, path, *args, **kwargs):
        if _current is not None and _executable(path):
            try:
                stop_tracing()
            except BaseException as exc:  # (the exec must go on: say it and let it)
                with contextlib.suppress(BaseException):
                    _print_err(f"ocular: the trace could not be saved before os.exec: {exc}")
        return self.__wrapped__(path, *args, **kwargs)

    def __eq__(self, other):
        return other is self or other is self.__wrapped__ or NotImplemented

    def __hash__(self):
        return hash(self.__wrapped__)

    def __getattr__(self, name):  # __name__, __qualname__, __doc__, __module__, __text_signature__, __self__
        return getattr(self.__wrapped__, name)

    def __repr__(self):
        return repr(self.__wrapped__)

    _ocular = True


def _save_before_exec():
    """os.exec*() replaces the process: no exit handler runs, and the trace was lost silently (its
    recording left as a .tmp file).  os.execv and os.execve (which the other exec functions call) are
    wrapped, once, as os.fork and os._exit are: with a session running, tracing stops there, which saves
    the trace and prints the report as at exit, then the exec goes on.  Only for a file that can be
    executed (a path, or a descriptor for fexecve: _executable): os.execvp tries each PATH entry in turn,
    and a failed try must leave tracing on.  (An audit hook would see every audited event of the process
    for good: id() 8.5x slower.)"""
    posix = sys.modules.get("posix")  # (os's own functions: code that calls posix.execve directly, as
    for name in ("execv", "execve"):  # CPython's test_posix does, would skip a wrapper on os only)
        real = getattr(os, name, None)
        if real is None or getattr(real, "_ocular", False):
            continue
        wrapper = _ExecWrapper(real)
        setattr(os, name, wrapper)
        if posix is not None and getattr(posix, name, None) is real:
            setattr(posix, name, wrapper)


class _ForkWarning:
    """The message pattern of an "ignore" filter that os.fork's wrapper puts at the head of the warnings
    filters for the time of the real fork(): it matches (and keeps the text of) only CPython's warning
    about forking a multi-threaded process."""

    __slots__ = ("caught",)

    def __init__(self):
        self.caught = []

    def match(self, text):
        if isinstance(text, str) and text.startswith("This process (pid=") and " is multi-threaded, use of " in text:
            self.caught.append(text)
            return True
        return False


def _warning_filters():
    """The list the warnings machinery reads now (3.14+: the current context's, with context-aware warnings)."""
    return warnings._get_filters() if _pyversions.WARNINGS_BY_CONTEXT else warnings.filters


def _quiet_fork_warning():
    """Python 3.12+ warns at os.fork() in a process with several threads (DeprecationWarning: "This
    process is multi-threaded, use of fork() may lead to deadlocks"), counting the OS threads; while
    tracing, Ocular's writer thread would make every fork of a single-threaded program warn (and
    raise under -W error).  The writer is fork-safe (pthread_atfork), so os.fork is wrapped: for the time
    of the real fork(), an "ignore" filter that matches only that warning (_ForkWarning) heads the warnings
    filters, and the warning caught is given again from the caller's line (so the usual filters apply to
    it) only when the program itself has several threads.  The filter goes into the list as it is, not
    through warnings.filterwarnings() or catch_warnings(): those declare the filters changed, which empties
    every module's warning registry, so that each fork made "once"/"default" warnings already given show
    again, in the parent and in the child.  The wrapper is installed once and otherwise calls the real
    os.fork."""
    if _real_os_fork is None or getattr(os.fork, "_ocular", False):
        return

    def fork():
        if _current is None:
            return _real_os_fork()
        own_threads = threading.active_count() > 1
        catcher = _ForkWarning()
        entry = ("ignore", catcher, DeprecationWarning, None, 0)
        filters = _warning_filters()
        filters.insert(0, entry)
        try:
            pid = _real_os_fork()
        finally:
            for i, item in enumerate(filters):  # (by identity: another thread may have changed the list)
                if item is entry:
                    del filters[i]
                    break
        if pid and own_threads:
            for text in catcher.caught:
                warnings.warn(text, DeprecationWarning, stacklevel=2)
        return pid

    fork.__doc__ = _real_os_fork.__doc__
    fork._ocular = True
    os.fork = fork


def _wrap_os_exit():
    """In a forked child, save the trace before os._exit (multiprocessing's fork workers end that way)."""

    def _exit(status):
        if _current is not None and _current.pid == os.getpid():
            try:
                stop_tracing()
            except _NotRunning:
                pass
            except Exception as exc:
                _save_failed(exc)
        _real_os_exit(status)

    _exit.__doc__ = _real_os_exit.__doc__
    os._exit = _exit


atexit.register(_at_exit)
os.register_at_fork(before=_before_fork, after_in_child=_after_fork_child)  # the C engine holds its own locks across fork()
