"""What the commands of `python -m ocular` share: argument groups (the report's shape, the recording's
options), the help formatter, and how a message is said."""

import argparse
import os
import sys


def _wrap(text, width=110):
    """text in lines of at most width, broken at spaces (textwrap costs start-up; this is all it needs)"""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join(lines + [line])


def _version():
    import ocular

    return f"{ocular.__version__} (Python {sys.version.split()[0]})"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's help layout at the terminal's width, found without importing shutil (argparse's own
    lookup; its add_argument makes a formatter for every option, so shutil, bz2 and lzma would be imported
    into every traced program's start-up)."""

    def __init__(self, prog, **kw):
        if kw.get("width") is None:
            try:
                kw["width"] = int(os.environ["COLUMNS"]) - 2
            except (KeyError, ValueError):
                try:
                    kw["width"] = os.get_terminal_size(sys.__stdout__.fileno()).columns - 2
                except (AttributeError, ValueError, OSError):
                    kw["width"] = 78
        super().__init__(prog, **kw)


def _say(msg):
    """A line on stderr that never fails: the trace is saved even when stderr is a closed pipe (and
    with no stderr at all, nothing is printed rather than into the program's stdout)."""
    if sys.stderr is None:
        return
    try:
        print(msg, file=sys.stderr)
    except (OSError, ValueError):
        pass


def _message(exc):
    """An exception's text with one 'ocular: ' prefix at most (the caller adds its own); an OSError of
    ours says what happened itself (not '[Errno N] ...: path' around it)."""
    text = str(exc)
    if isinstance(exc, OSError) and isinstance(exc.strerror, str) and exc.strerror.startswith("ocular: "):
        text = exc.strerror
    return text[len("ocular: "):] if text.startswith("ocular: ") else text


def _add_report_shape(p, file_option):
    """The options that shape the printed report, shared by the runner and convert (file_option: the
    runner's --report FILE, convert's --report-file FILE)."""
    p.add_argument("--top", type=int, default=15, metavar="N",
                   help="function rows in the report's tables (default: %(default)s; when your code is a thin "
                        "driver of others', 5 of yours and 12 of the hottest elsewhere)")
    p.add_argument("--width", type=int, default=None, metavar="COLUMNS",
                   help="fit the report's lines in COLUMNS, wrapping prose and shortening paths, never cutting a "
                        "word (default: the terminal's width when the report goes to one; 0 or to a file or "
                        "pipe: whole lines)")
    p.add_argument("--sort", choices=("self", "total", "calls", "mean", "name"), default="self",
                   help="order of the report's function rows (default: %(default)s)")
    p.add_argument("--loops", type=int, default=3, metavar="N",
                   help="hot loops shown in the report, each with its instructions (default: %(default)s)")
    p.add_argument("--all", action="store_true", dest="all_code",
                   help="one table of every function and loop, ranked together; by default your code's functions "
                        "come first, then the hottest elsewhere (libraries, standard library, C functions), after "
                        "a line per kind of code saying where the time goes")
    p.add_argument("--tree", action="store_true",
                   help="also print the call tree: per thread, total and self time and calls per node, children by "
                        "total time, nodes under 1%% of the thread left out")
    p.add_argument(file_option, metavar="FILE", default=None, dest="report_file",
                   help="write the report (and the tree) to FILE instead of stderr")


def _apply_report_shape(parser, ns, file_option):
    """Check the report options (parser.error on a bad one) and give them to the package."""
    import ocular

    if ns.tree and ns.report_json:
        parser.error("--tree prints the call tree as text: it cannot go with --report-json")
    if not 0 <= ns.top <= 1000000:
        parser.error("argument --top: must be from 0 to 1000000")
    if ns.width is not None and not (ns.width == 0 or 40 <= ns.width <= 100000):
        parser.error("argument --width: must be 0 (whole lines) or from 40 to 100000")
    if not 0 <= ns.loops <= 1000:
        parser.error("argument --loops: must be from 0 to 1000")
    ocular._configure(report_format=dict(top=ns.top, sort=ns.sort, all_code=ns.all_code, loops=ns.loops),
                      report_tree=ns.tree)
    if ns.width is not None:
        ocular._configure(report_format={"width": ns.width or None})
    if ns.report_file:
        report_file = os.path.abspath(ns.report_file)
        ocular._configure(report_file=report_file)
        where = os.path.dirname(report_file)
        if os.path.isdir(report_file):
            parser.error(f"{file_option} {ns.report_file!r} is a directory; give a file name")
        if not os.path.exists(report_file) and (not os.path.isdir(where) or
                                                        not os.access(where, os.W_OK | os.X_OK)):
            parser.error(f"{file_option} {ns.report_file!r}: the directory {where!r} "
                         f"{'is not writable' if os.path.isdir(where) else 'does not exist'}")


def _add_recording_args(p):
    """What is traced, for a program and for attach alike: --threshold, --near-zero, --include, --exclude."""
    p.add_argument("--threshold", type=int, default=500, metavar="N",
                   help="hits of a loop's jump or a cheap C call site before it stops being traced (a "
                        "loop's instruction probe: 256 executions of its hottest instruction, or N if "
                        "lower; function calls are always traced, but with --near-zero); 0 traces "
                        "everything (default: %(default)s)")
    p.add_argument("--near-zero", action="store_true",
                   help="near-zero overhead: after --threshold calls a function's start and return are "
                        "de-instrumented too, so its later calls are estimated (marked ~ and *), not counted; by "
                        "default every function call is counted and timed, and only loops, instruction probes "
                        "and cheap C call sites are de-instrumented")
    p.add_argument("--include", action="append", default=None, metavar="PATTERN",
                   help="trace only files matching PATTERN (substring, or fnmatch with *?[); repeatable")
    p.add_argument("--exclude", action="append", default=None, metavar="PATTERN",
                   help="do not trace files matching PATTERN; repeatable")


def _refuse_report_over(parser, option, report_file, files):
    """The report file must not be one of the traces, nor the recording a convert reads: the report would
    replace it (or it the report)."""
    import ocular

    if not report_file:
        return
    for what, f in files:
        if ocular._same_file(report_file, f):
            parser.error(f"{option} {report_file!r} is also {what} {f!r}; give the report another name "
                         f"(one would replace the other)")
