"""`python -m ocular [options] (script.py | -m module | -c code | -) [args...]`: run a program as Python
would (same sys.argv, __main__, sys.path[0] and exit status) with tracing on, and save the trace however
it ends."""

import argparse
import os
import sys

from .. import _formats, _ocular
from .common import (_Formatter, _add_recording_args, _add_report_shape, _apply_report_shape, _message,
                     _refuse_report_over, _say, _version)


# the sys.path entry Python made for this runner (the working directory for `-m ocular`, the script's
# directory for the `ocular` command), which the program's own entry replaces (_Program.run)
_RUNNER_PATH0 = sys.path[0] if sys.path else None


EPILOG = """examples:
  python -m ocular script.py arg1 arg2        trace script.py, write ocular_trace.pftrace
  python -m ocular -o fib.json -m mypkg.tool  run a module, write fib.json
  python -m ocular --mode precise --threshold 0 -c "sum(range(10))"
  python -m ocular --follow -o all.json pool.py   also trace subprocesses and multiprocessing
  python -m ocular -o prof.pstats -o prof.html script.py   profiles: pstats, HTML (several -o at once)
  python -m ocular -o run.ocular script.py   keep only the recording (renders nothing)...
  python -m ocular convert run.ocular -o run.pftrace   ...and render it later, in any format
  python -m ocular --ring 64M server.py       flight recorder: keep the newest 64 MiB only; kill -USR2
                                              renders it without stopping
  python -m ocular merge a.json b.json -o all.json    merge traces by hand (see: merge --help)
  python -m ocular attach 1234 --duration 10 -o t.json  trace a running process (3.14+; see: attach --help)

which output for what (the suffix of -o picks the format; several -o record once, render each):
  a timeline to look at      -o t.pftrace (the default)          https://ui.perfetto.dev
  a profile to sort          -o p.pstats | -o p.html             snakeviz, python -m pstats | a browser
  a flame graph              -o p.folded | -o p.speedscope.json  flamegraph.pl, inferno | speedscope
  fleet tools                -o p.pb.gz (pprof)                  go tool pprof, Pyroscope, Parca
  chrome://tracing, scripts  -o t.json (Chrome trace JSON)       chrome://tracing (to 512 MiB), json.load
Also .gecko.json (Firefox Profiler), .json.gz, and .ocular (the raw recording: convert renders it later).
SIGTERM or SIGHUP (kill, timeout, docker stop, systemd) saves the trace, then the program dies of the signal
as it would untraced (a profile format keeps the recording for convert, named on stderr).
Exit status: the program's.  If Ocular cannot write the trace (a full disk), a program that failed keeps
its status; a program that exited 0 gives 74, with "ocular: the program exited 0; the trace could not be
written: <cause>" on stderr.  2: an option or output refused before the program runs.
See README.md and docs/formats.md."""


def build_parser():
    p = argparse.ArgumentParser(
        prog="python -m ocular",
        description="Trace a Python program with Ocular (sys.monitoring, PEP 669) and write a timeline.",
        epilog=EPILOG,
        formatter_class=_Formatter,
    )
    p.add_argument("--mode", choices=("adaptive", "precise"), default="adaptive",
                   help="adaptive: function and jump events, jumps de-instrumented after --threshold hits (each "
                        "hot loop then gets a short instruction probe); precise: also every instruction "
                        "(default: %(default)s)")
    _add_recording_args(p)
    p.add_argument("-o", "--output", action="append", default=None, metavar="PATH",
                   help="output file, its format from its suffix (see below); repeatable: the program is "
                        "recorded once and rendered into each; a regular file or a new name (a symlink is "
                        "followed; a device, FIFO or socket is refused) (default: ocular_trace.pftrace, compressed Perfetto "
                        "protobuf; -o t.json for Chrome trace JSON)")
    p.add_argument("--thread-roots", action="store_true",
                   help="folded stacks (.folded, .collapsed) start with their thread's name (default: threads summed)")
    p.add_argument("--no-trace-file", action="store_true", help="record, but write no trace file (not with -o)")
    p.add_argument("--follow", action="store_true",
                   help="also trace every Python process the program starts (subprocess, multiprocessing "
                        "fork/spawn/forkserver, os.fork): each writes its own file in OUTPUT's parts "
                        "directory (trace.json -> trace.procs/), merged into OUTPUT at the end; the program "
                        "runs as a child process (default: off)")
    p.add_argument("--follow-wait", type=float, default=10.0, metavar="SECONDS",
                   help="with --follow: how long to wait, after the program exits, for the processes it "
                        "started that are still writing their trace (default: %(default)s)")
    p.add_argument("--keep-parts", action="store_true",
                   help="with --follow: keep the per-process traces after merging them (default: removed)")
    p.add_argument("--usdt", action="store_true",
                   help="enable the USDT probes (provider 'ocular', for bpftrace and gdb); with "
                        "--no-trace-file: the probes only, no tracing (see docs/usdt.md)")
    p.add_argument("--tool-id", type=int, default=None, choices=range(6), metavar="ID",
                   help="sys.monitoring tool id 0-5 (default: the first free of 3, 4, 5; 0-2 belong to pdb, "
                        "coverage and cProfile)")
    p.add_argument("--format", choices=_formats.NAMES, default=None,
                   help="output format (default: from the output's suffix: .pftrace/.perfetto-trace/.pb = "
                        "native Perfetto protobuf, .ocular = the raw recording, rendered later by 'convert', "
                        ".json.gz = gzip-compressed Chrome trace JSON, profile suffixes as listed below, anything "
                        "else = Chrome trace JSON)")
    p.add_argument("--loop-events", choices=("iterations", "runs", "off"), default=None,
                   help="what the trace shows of loops: an instant per iteration, a slice per loop run (JSON "
                        "only: refused for .pftrace), or nothing (default: runs for JSON, iterations for .pftrace)")
    p.add_argument("--no-c-functions", action="store_false", dest="c_functions", default=None,
                   help="do not record calls of C functions (builtins, methods of built-in types, extension "
                        "functions); by default each is its own slice and report row, as in cProfile")
    p.add_argument("--no-sampling", action="store_false", dest="sampling", default=True,
                   help="no sampling windows: the later calls of a de-instrumented C call site (or, with "
                        "--near-zero, function) count in its caller's self time, unmeasured (the report names "
                        "them); by default short windows (1 ms, the first at once, then 2, 4, 8 ... ms apart up "
                        "to every 100 ms; OCULAR_SAMPLING=PERIOD_MS,WINDOW_MS changes it) keep measuring them and the "
                        "report shows the estimated split, marked ~")
    p.add_argument("--stall-ms", type=int, default=100, metavar="MS",
                   help="asyncio: a task step that holds the event loop MS milliseconds or more is a loop stall, "
                        "listed in the report with where it was at MS (default: %(default)s, as asyncio's debug "
                        "mode)")
    p.add_argument("--ring", default=None, metavar="SIZE",
                   help="flight recorder: keep only the newest SIZE (e.g. 64M) of the recording in memory and "
                        "render it at exit; SIGUSR2 renders it without stopping, into OUTPUT with "
                        ".snapshotN before its suffix; not with --follow (default: off, everything is recorded to "
                        "disk)")
    r = p.add_mutually_exclusive_group()
    r.add_argument("--no-report", action="store_true", help="do not print the report at the end")
    r.add_argument("--report-json", action="store_true",
                   help="print the report as JSON (on stderr) instead of the text table")
    _add_report_shape(p, "--report")
    p.add_argument("--version", action="version", version=f"ocular {_version()}")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print where the trace went")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("-m", dest="module", metavar="MODULE", help="run a library module as a script")
    g.add_argument("-c", dest="code", metavar="CODE", help="run a program passed as a string")
    g.add_argument("script", nargs="?", help="the Python script to run (or a directory or zip file with a "
                   "__main__.py, or - to read the program from stdin)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the program")
    return p


def _split_argv(argv, parser):
    """Options before the program belong to us; everything from the program on belongs to it (as
    argparse reads them: a long option by a unique prefix, a short option's value attached)."""
    ours = []
    i = 0
    takes_value = {o for a in parser._actions if a.nargs != 0 and a.option_strings for o in a.option_strings}
    longs = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    while i < len(argv):
        a = argv[i]
        if a in ("-m", "-c"):
            if i + 1 >= len(argv):
                return argv, []
            return ours + [a, argv[i + 1]], argv[i + 2:]
        if a[:2] in ("-m", "-c") and len(a) > 2:  # -mjson.tool, -c'print(1)': the value attached
            return ours + [a[:2], a[2:]], argv[i + 1:]
        if a == "--":
            return ours + argv[i + 1:i + 2], argv[i + 2:]
        if a.startswith("-") and a != "-":
            ours.append(a)
            if a.startswith("--") and "=" not in a and a not in longs:
                full = [o for o in longs if o.startswith(a)]
                if len(full) == 1:  # (an ambiguous or unknown one: argparse says so)
                    a = full[0]
            if a in takes_value:
                if i + 1 < len(argv):
                    ours.append(argv[i + 1])
                i += 2
                continue
            i += 1
            continue
        return ours + [a], argv[i + 1:]
    return ours, []


def _join_threads():
    """Wait for the program's non-daemon threads as the interpreter does at exit, before atexit handlers
    (``threading._shutdown``: threading's own atexit calls, then a join of every non-daemon thread), so
    the calls those threads make after the main module returned are traced.  The interpreter's own call
    at exit then finds the work done.  ^C during the wait is reported and ignored, as Python does."""
    _ocular._mute_thread(True)  # first: the runner's own frames are not recorded; the other threads' are
    import threading

    try:
        if threading.current_thread() is not threading.main_thread():
            return
        threading._shutdown()
    except BaseException as exc:  # KeyboardInterrupt: Python prints it as ignored and goes on exiting
        _say(f"Exception ignored on threading shutdown: {type(exc).__name__}: {exc}")
    finally:
        _ocular._mute_thread(False)


from .. import _TRACE_NOT_WRITTEN as TRACE_NOT_WRITTEN  # noqa: E402 (74: the program exited 0, Ocular failed)


def _run(argv=None):
    import ocular

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    ours, rest = _split_argv(argv, parser)
    cli_pid = os.getpid()
    ns = parser.parse_args(ours)
    outputs = ns.output or ["ocular_trace.pftrace"]
    ns.output_given = ns.output is not None
    ns.output = outputs[0]
    if ns.follow:
        try:
            follow_fmt = ocular._format_for(ns.output, ns.format)
        except (ValueError, TypeError) as exc:
            parser.error(_message(exc))
        if len(outputs) > 1 or follow_fmt not in _formats.TIMELINES:
            parser.error("--follow merges timelines: give one output, a .json or .pftrace trace")
        if ns.ring:
            parser.error("--ring keeps one process's newest events in memory; it cannot go with --follow, which "
                         "writes every process's whole trace")
    if len(outputs) > 1 and (ns.format or ns.ring):
        parser.error("several -o: each output's format comes from its suffix (no --format, no --ring)")
    if ns.loop_events == "runs" and not ns.no_trace_file:
        for out in outputs:
            try:
                fmt = ocular._format_for(out, ns.format)
            except (ValueError, TypeError):
                continue  # (an output refused below, with its message)
            if fmt == "perfetto":
                parser.error(f"--loop-events runs: {out!r} is written as Perfetto protobuf, which shows loops "
                             f"as iterations (or off); runs are drawn in JSON traces only")
    many = len(outputs) > 1
    if many:  # record once, render into each output at the end: each is checked now, before the program runs
        for out in outputs:
            try:
                fmt = ocular._format_for(ocular._check_output(out), None)
                ocular._env.check_render(perfetto_file=fmt == "perfetto")
            except (ValueError, TypeError, OSError) as exc:
                parser.error(_message(exc))
        ns.output = f"{os.path.abspath(outputs[0])}.{os.getpid()}.ocular"
        ocular._configure(recording=True)
    if not 0 <= ns.threshold <= 0xFFFFFFF0:
        parser.error("argument --threshold: must be from 0 to 4294967280")
    if ns.module == "":
        parser.error("argument -m: expected a module name")
    _apply_report_shape(parser, ns, "--report")
    try:
        only_recordings = all(ocular._format_for(o, ns.format) == "recording" for o in outputs)
    except (ValueError, TypeError):
        only_recordings = False  # (an output refused below, with its message)
    if only_recordings and not ns.no_report and (ns.report_file or ns.report_json or ns.tree):
        _say("ocular: a .ocular output renders nothing, so no report is made: "
             "python -m ocular convert RECORDING -o OUT --report gives it")
    if not ns.follow_wait >= 0 or ns.follow_wait > 86400:  # also rejects nan
        parser.error("--follow-wait must be a number of seconds from 0 to 86400")
    if ns.follow and ns.no_trace_file:
        parser.error("--follow merges the trace files of every process: it cannot go with --no-trace-file")
    if ns.module:
        prog_argv = [ns.module] + rest
        command = ["-m", ns.module] + rest
    elif ns.code is not None:
        prog_argv = ["-c"] + rest
        command = ["-c", ns.code] + rest
        ocular._configure(user_files={"<string>"})  # (the report: the program's own code, not generated code)
    else:
        if ns.script != "-" and not os.path.exists(ns.script):  # as Python says it: the error line, no usage
            parser.exit(2, f"python -m ocular: error: can't open file {ns.script!r}: no such file\n")
        prog_argv = [ns.script] + rest
        command = [ns.script] + rest

    if ns.no_trace_file and ns.output_given:
        parser.error("--no-trace-file writes no trace file: it cannot go with -o")
    written = ([] if ns.no_trace_file else list(outputs)) + ([ns.report_file] if ns.report_file else [])
    _refuse_report_over(parser, "--report", ns.report_file,
                        [] if ns.no_trace_file else [("the output", o) for o in outputs])
    if ns.script is not None:
        _refuse_overwriting(parser, written, ns.script, "the script being run")

    if ns.follow:
        from .. import _follow

        def say(msg):
            if not ns.quiet:
                _say(msg)

        try:
            return _follow.run(ns, command, say, _say)
        except (ValueError, TypeError, OSError, RuntimeError) as exc:
            parser.exit(2, f"python -m ocular: error: {_message(exc)}\n")

    # Everything the program needs is prepared before tracing starts: the runner's own frames (runpy,
    # importlib finding the module, reading the script) are never recorded.
    saved_argv = sys.argv
    sys.argv = prog_argv  # the process name in the trace is the program's, not ours
    try:
        program = _prepare(ns)
    except _NotRunnable as exc:
        sys.argv = saved_argv
        parser.exit(2, f"python -m ocular: error: {exc}\n")
    except SyntaxError as exc:  # as Python itself reports it: the error, no frames of ours, status 1
        import traceback

        traceback.print_exception(type(exc), exc, None)
        return 1
    if ns.module and isinstance(program.source, str):  # (found by the lookup just made)
        sys.argv = saved_argv  # (argparse's error names this command)
        _refuse_overwriting(parser, written, program.source, f"the source of module {ns.module!r}")
        sys.argv = prog_argv

    # (SIGTERM, SIGHUP: the trace is saved, then the process dies of it)
    ocular._configure(signals_verbose=not ns.quiet, outputs=[os.path.abspath(o) for o in outputs] if many else None)

    def start():
        if ns.usdt:  # the USDT probes (docs/usdt.md), live before the program starts
            from ocular import usdt

            usdt.enable()
        if not (ns.usdt and ns.no_trace_file):  # --usdt --no-trace-file: the probes only
            ocular.start_tracing(mode=ns.mode, perfetto=not ns.no_trace_file, deinstrument_threshold=ns.threshold,
                                 exclude=ns.exclude, include_only=ns.include, output=ns.output, tool_id=ns.tool_id,
                                 format=ns.format, ring=ns.ring, loops=ns.loop_events, thread_roots=ns.thread_roots,
                                 c_functions=ns.c_functions, sampling=ns.sampling, near_zero=ns.near_zero,
                                 stall_ms=ns.stall_ms, report=False if ns.no_report else ("json" if ns.report_json else True),
                                 save_on_signals=True)

    status = 0
    failures = []  # Ocular's own: what it could not write (the program's status is apart: _final_status)
    try:
        try:
            program.run(start)
        except _StartFailed as exc:
            sys.argv = saved_argv
            parser.exit(2, f"python -m ocular: error: {_message(exc.__cause__)}\n")
        except _NotFoundWhileTracing as exc:  # (as Python says it; the trace of the imports is saved)
            _say(f"python -m ocular: error: {exc}")
            status = 1
    except SystemExit as exc:
        status = exc.code
    except KeyboardInterrupt as exc:
        _report_uncaught(exc)
        status = _INTERRUPTED  # the trace is saved below, then the process dies of SIGINT (main)
        _INTERRUPTED.exc = exc
    except BaseException as exc:
        _report_uncaught(exc)
        status = 1
    finally:
        _join_threads()
        program.restore()
        if os.getpid() != cli_pid and many:  # a forked child that returned here: its own recording and outputs
            rec_path = ocular._child_output(ns.output, os.getpid())
            outputs = [ocular._child_output(os.path.abspath(o), os.getpid()) for o in outputs]
        else:
            rec_path = ns.output
        if ocular.is_tracing():
            try:
                res = ocular._final_stop()  # (the process ends after this, the runner's last stop)
                if not many and not ns.quiet and res.output:
                    size = os.path.getsize(res.output)
                    what = "recording" if ocular._format_for(res.output, ns.format) == "recording" else "trace"
                    _say(f"ocular: {what} written to {res.output} ({size / 1e6:.1f} MB, {res.events} events, "
                         f"{res.dropped} dropped)")
                    if what == "recording":
                        _say(f"ocular: render it with: python -m ocular convert {res.output} -o trace.json")
            except Exception as exc:
                if many and isinstance(exc, OSError) and exc.errno and os.path.exists(rec_path):
                    # (the recording was cut short, a full disk: rendered below; its own name is not the user's)
                    failures.append((exc, f"writing the recording failed ({ocular._why_write_failed(exc.errno)}); "
                                          f"what was recorded before it goes into each output"))
                else:
                    failures.append((exc, _message(exc)))
        # Several -o: the recording of the session started here, whoever stopped it (this code, or the
        # program itself, which may then have traced into files of its own), rendered into each output.
        if many and os.path.exists(rec_path):
            try:
                _render_all(rec_path, outputs, ns)
            except Exception as exc:
                failures.append((exc, _message(exc)))
    return _final_status(status, failures)


def _final_status(status, failures):
    """The command's exit status: the program's, unless only Ocular failed (TRACE_NOT_WRITTEN); each
    failure is said in one line that tells whose status is whose."""
    if not failures:
        return status
    code = 0 if status is None else status if isinstance(status, int) else 1  # (sys.exit("msg"): 1)
    for exc, cause in failures:
        what = "the trace could not be written" if isinstance(exc, OSError) else "ocular failed"
        if status is _INTERRUPTED:
            _say(f"ocular: the program was interrupted; {what}: {cause}")
        elif code == 0:
            _say(f"ocular: the program exited 0; {what}: {cause}")
        else:
            _say(f"ocular: the program exited {code} (the exit status is the program's); {what}: {cause}")
    if status is _INTERRUPTED or code != 0:
        return status
    return TRACE_NOT_WRITTEN


# _run()'s status for a program ended by a KeyboardInterrupt it did not catch: Python then exits by
# SIGINT (its parent sees -SIGINT, a shell loop stops), after its exit handlers, and so must we.
class _Interrupted:
    exc = None  # the program's KeyboardInterrupt, raised again out of the main module


_INTERRUPTED = _Interrupted()


def main(argv=None):
    """Running a program (the `ocular` command, `python -m ocular`, without a command): _run(), and the
    process's end as Python's: a program interrupted by ^C ends as Python ends it,
    raising KeyboardInterrupt out of the main module (already reported), so that the interpreter kills
    itself with SIGINT once finalized (an exit status of 130 would let `for ...; do python ...; done`
    go on)."""
    status = _run(argv)
    if status is _INTERRUPTED:
        sys.excepthook = lambda *exc: None  # (reported by _report_uncaught, through the program's hook)
        raise _INTERRUPTED.exc  # (the program's own: Python sets sys.last_exc to it again)
    return status


def _report_uncaught(exc):
    """An exception the program did not catch, reported as Python reports it (through sys.excepthook, which
    the program may have replaced), without this runner's own frames on top of the program's."""
    tb = exc.__traceback__
    here = os.path.abspath(__file__)
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == here:
        tb = tb.tb_next
    exc.__traceback__ = tb  # (the default hook prints the exception's own traceback)
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb  # (as Python sets them)
    sys.last_exc = exc
    try:
        sys.excepthook(type(exc), exc, tb)
    except Exception:
        import traceback

        traceback.print_exception(type(exc), exc, tb)


def _refuse_overwriting(parser, written, source, what):
    """The outputs (traces, the report file) must not be the program itself: the trace would replace it.
    Compared as the files they are (a symbolic link to the script is the script)."""
    import ocular

    for out in written:
        if ocular._same_file(out, source):
            parser.error(f"the output {out!r} is {what}; choose another name (it would be replaced)")


class _NotRunnable(Exception):
    """The script or module cannot be run (not found, unreadable): said before anything starts."""


class _NotFoundWhileTracing(Exception):
    """-m MODULE not found by the lookup made once tracing runs (its packages imported: see
    _Program.find_module)."""


class _StartFailed(Exception):
    """start_tracing() refused its arguments (the cause says why)."""


class _Program:
    """The user's program, compiled and with its __main__ namespace ready, run by run(start): `start`
    (which starts tracing) is called right before the program's first line."""

    def __init__(self, code, globs, path0, argv0=None, module=None, path0_safe=False, lookup=None, source=None):
        self.code, self.globs, self.path0, self.argv0 = code, globs, path0, argv0
        self.module = module
        self.path0_safe = path0_safe  # path0 is added with -P too (a directory or zip run: its own entry)
        self.saved_main = None
        self.lookup = lookup  # -m MODULE whose packages are imported once tracing runs (_deferred_module)
        self.source = source if source is not None else (globs or {}).get("__file__")

    def set_path0(self):
        """sys.path[0] as Python sets it for the program (none with -P / PYTHONSAFEPATH, but for a directory
        or zip), in place of the entry it set for the runner (`-m ocular`: the working directory; the
        `ocular` command: its bin/), which -P leaves out."""
        if not sys.flags.safe_path:
            if sys.path and sys.path[0] == _RUNNER_PATH0:
                sys.path[0] = self.path0
            else:
                sys.path.insert(0, self.path0)
        elif self.path0_safe:
            sys.path.insert(0, self.path0)

    def run(self, start):
        import types

        self.set_path0()
        if self.argv0 is not None:
            sys.argv[0] = self.argv0
        main_mod = types.ModuleType("__main__")
        main_mod.__dict__.update(self.globs)
        self.saved_main = sys.modules.get("__main__")
        sys.modules["__main__"] = main_mod
        globs = main_mod.__dict__
        try:
            start()
        except (ValueError, TypeError, OSError, RuntimeError) as exc:
            raise _StartFailed() from exc
        if self.lookup is not None:
            self.find_module()
            globs.update(self.globs)
            sys.argv[0] = self.argv0
        exec(self.code, globs)

    def find_module(self):
        """-m MODULE: import the packages it is in (and the package it is, whose __main__ runs), traced as
        the program's own code, as `python -m` runs them before the module; then runpy's lookup, which then
        runs nothing of the program's, unrecorded.  sys.argv[0] is '-m' meanwhile, as Python has it."""
        import importlib.util
        import runpy

        name = self.lookup
        argv0, sys.argv[0] = sys.argv[0], "-m"
        parts = name.split(".")
        for i in range(1, len(parts)):
            __import__(".".join(parts[:i]))
        muted = _ocular._mute_thread(True)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            _ocular._mute_thread(muted)
        if spec is not None and spec.submodule_search_locations is not None:
            __import__(name)
        muted = _ocular._mute_thread(True)
        try:
            mod_name, spec, code = runpy._get_module_details(name)
        except ImportError as exc:
            raise _NotFoundWhileTracing(str(exc)) from None
        finally:
            _ocular._mute_thread(muted)
            sys.argv[0] = argv0
        self.code, self.globs, self.argv0, self.module = code, _module_globs(spec), spec.origin, mod_name

    def restore(self):
        if self.saved_main is not None:
            sys.modules["__main__"] = self.saved_main
            self.saved_main = None


def _prepare(ns):
    import builtins

    if ns.code is not None:
        import importlib.machinery

        globs = dict(__name__="__main__", __doc__=None, __package__=None, __spec__=None,
                     __loader__=importlib.machinery.BuiltinImporter, __builtins__=builtins)
        return _Program(compile(ns.code, "<string>", "exec"), globs, "", module="__main__")
    if ns.module:
        import runpy

        deferred = _deferred_module(ns.module)
        if deferred is not None:  # packages to import first: that is the program's code, traced
            globs = dict(__name__="__main__", __doc__=None, __package__=None, __spec__=None, __builtins__=builtins)
            return _Program(None, globs, os.getcwd(), lookup=ns.module, source=deferred)
        try:
            # runpy's own lookup (packages' __main__, namespace packages), done before tracing starts
            mod_name, spec, code = runpy._get_module_details(ns.module)
        except ImportError as exc:
            raise _NotRunnable(str(exc)) from None
        except SyntaxError:
            raise
        return _Program(code, _module_globs(spec), os.getcwd(), argv0=spec.origin, module=mod_name)
    path = ns.script
    if path == "-":  # the program read from stdin, as `python -` does
        import importlib.machinery

        source = sys.stdin.buffer.read()
        globs = dict(__name__="__main__", __file__="<stdin>", __doc__=None, __package__=None, __spec__=None,
                     __loader__=importlib.machinery.BuiltinImporter, __builtins__=builtins)
        return _Program(compile(source, "<stdin>", "exec", dont_inherit=True), globs, "", module="__main__")
    program = _main_of_path(path)
    if program is not None:
        return program
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        raise _NotRunnable(f"can't open file {path!r}: {exc.strerror}") from None
    import importlib.machinery

    path = os.path.abspath(path)  # (Python 3.9+: the main script's __file__ and code are absolute)
    code = compile(source, path, "exec", dont_inherit=True)
    globs = dict(__name__="__main__", __file__=path, __cached__=None, __doc__=None,
                 __loader__=importlib.machinery.SourceFileLoader("__main__", path), __package__=None,
                 __spec__=None, __builtins__=builtins)
    # sys.path[0]: the script's directory with symbolic links resolved (a script linked into ~/bin
    # imports the modules beside the file the link points to)
    return _Program(code, globs, os.path.dirname(os.path.realpath(path)), module="__main__")


def _module_globs(spec):
    import builtins

    return dict(__name__="__main__", __file__=spec.origin, __cached__=spec.cached, __doc__=None,
                __loader__=spec.loader, __package__=spec.parent, __spec__=spec, __builtins__=builtins)


def _deferred_module(name):
    """For -m NAME: when running it imports packages not imported yet (the packages NAME is in, or NAME
    itself when it is a package, whose __main__ runs), their code is the program's and must be traced:
    the lookup then waits until tracing runs (_Program.find_module).  Returns the module's source file
    as found now without importing anything (for the check that no output replaces it; "" if it has
    none), or None: nothing to import (or not found this way), so the lookup runs before tracing."""
    import importlib.util

    parts = name.split(".")
    if not all(parts):
        return None
    try:
        spec, runs_code = None, False
        for i in range(len(parts)):
            full = ".".join(parts[:i + 1])
            if full in sys.modules:
                spec = getattr(sys.modules[full], "__spec__", None)
            else:
                if i == 0:
                    spec = importlib.util.find_spec(full)  # (top level: imports nothing)
                else:  # found as importlib finds it, in its package's path, without importing anything
                    parent = sys.modules.get(full.rpartition(".")[0])
                    spec = _find_in(full, parent.__path__ if parent is not None else spec.submodule_search_locations)
                if spec is not None and (i < len(parts) - 1 or spec.submodule_search_locations is not None):
                    runs_code = True  # (a package's __init__)
            if spec is None:
                return None
        if not runs_code:
            return None  # (nothing of the program runs during the lookup)
        if spec.submodule_search_locations is not None:  # a package: its __main__ runs
            spec = _find_in(name + ".__main__", spec.submodule_search_locations)
            if spec is None:
                return None
        return spec.origin if spec.has_location and isinstance(spec.origin, str) else ""
    except Exception:  # (a finder that fails, a module that is not a package, ...): the eager lookup says it
        return None


def _find_in(full, path):
    if path is None:
        return None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is not None:
            spec = find(full, path)
            if spec is not None:
                return spec
    return None


def _path_importer(path):
    """Whether an import hook takes PATH as a sys.path entry (a directory, a zip file), as `python PATH` asks
    (pkgutil.get_importer's question, without importing pkgutil and typing at start-up)."""
    if sys.path_importer_cache.get(path) is not None:
        return True
    for hook in sys.path_hooks:
        try:
            hook(path)
            return True
        except ImportError:
            pass
    return False


def _main_of_path(path):
    """The program of a directory or zip file (its __main__ module) as `python PATH` runs it, or None for a
    script.  As CPython does: PATH is a sys.path entry if an importer takes it; it becomes sys.path[0]
    (made absolute, not normalised; also with -P) in place of the runner's entry, and its __main__ is found
    there (here, before tracing starts: the lookup's frames are not the program's); sys.argv[0] stays PATH
    as given."""
    import builtins
    import runpy

    if not _path_importer(path):
        return None
    path0 = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    program = _Program(None, None, path0, argv0=path, module="__main__", path0_safe=True)
    saved = sys.path[:]
    try:
        program.set_path0()  # (the lookup sees the path the program will: not the runner's entry)
        _, spec, code = runpy._get_main_module_details()
    except ImportError as exc:  # can't find '__main__' module in '/abs/dir'
        raise _NotRunnable(str(exc)) from None
    finally:
        sys.path[:] = saved
    program.code = code
    program.globs = dict(__name__="__main__", __file__=spec.origin, __cached__=spec.cached, __doc__=None,
                         __loader__=spec.loader, __package__=spec.parent, __spec__=spec, __builtins__=builtins)
    return program


def _render_all(rec, outputs, ns):
    """Several -o: the session kept a recording; render it into each output (a .ocular output gets the
    recording itself), then remove it.  An output that fails does not stop the others; if any failed,
    the recording is kept (named in the error) so that it can be rendered again with `convert`."""
    import shutil

    import ocular

    report = False if ns.no_report else ("json" if ns.report_json else True)
    failed, first = [], True
    for out in outputs:
        try:
            if ocular._format_for(os.path.abspath(out), None) == "recording":
                tmp = ocular._render_tmp_name(os.path.abspath(out))
                try:
                    shutil.copyfile(rec, tmp)
                    ocular._install(tmp, ocular._check_output(out))
                finally:
                    ocular._discard(tmp)
                if not ns.quiet:
                    _say(f"ocular: recording written to {out} ({os.path.getsize(out) / 1e6:.1f} MB)")
                continue
            res = ocular.convert(rec, out, report=report if first else False, loops=ns.loop_events,
                                 thread_roots=ns.thread_roots)
            first = False
            if not ns.quiet:
                _say(f"ocular: written to {res.output} ({os.path.getsize(res.output) / 1e6:.1f} MB, {res.events} "
                     f"events, {res.dropped} dropped)")
        except (ValueError, TypeError, OSError) as exc:
            failed.append(out)
            _say(f"ocular: {out}: {_message(exc)}")
    if not failed:
        try:
            os.unlink(rec)
        except OSError:
            pass
        return
    kept = ocular._keep_recording(rec, os.path.abspath(outputs[0])) or rec
    raise OSError(f"ocular: {len(failed)} of {len(outputs)} outputs not written ({', '.join(failed)}); "
                  f"the recording is kept in {kept!r}: render it again with python -m ocular convert {kept} -o ...")
