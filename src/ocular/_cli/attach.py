"""`python -m ocular attach PID`: the command's arguments; the work is _attach.py's."""

import argparse

from .. import _formats
from .common import _Formatter, _add_recording_args


ATTACH_EPILOG = """The process runs the attach script (sys.remote_exec, PEP 768) at its next bytecode in its main
thread: it starts tracing there with these options, and stops after --duration, on ^C (or SIGTERM,
SIGHUP) of this command, when this command is killed, or when the process exits; the trace is then
written to OUTPUT (resolved here, so relative to this command's directory) and the report printed here.
Needs Python 3.14+ on both sides, the same version (3.14.x attaches to 3.14.y), remote debugging not
disabled in the process (PYTHON_DISABLE_REMOTE_DEBUG, -X disable-remote-debug), permission to ptrace it
(same user, or root; see /proc/sys/kernel/yama/ptrace_scope) and Ocular importable in it.  A refusal is
one 'ocular: ...' line and exit status 2.  One attach per process at a time (a second one is refused).
examples:
  python -m ocular attach 1234                       trace until ^C, write ocular_trace.pftrace here
  python -m ocular attach 1234 --duration 5 -o /tmp/app.pftrace --threshold 0"""


def _seconds(text):
    value = float(text)
    if not 0 < value <= 86400 * 365:  # also rejects nan
        raise ValueError(text)
    return value


def _pid(text):
    value = int(text)
    if not 0 < value < 1 << 31:
        raise ValueError(text)
    return value


_seconds.__name__ = "number of seconds"  # argparse names the type in its error message
_pid.__name__ = "process id"


def build_attach_parser():
    p = argparse.ArgumentParser(
        prog="python -m ocular attach",
        description="Trace a running Python process (CPython 3.14+) for a while, then write its trace.",
        epilog=ATTACH_EPILOG,
        formatter_class=_Formatter,
    )
    p.add_argument("pid", type=_pid, metavar="PID", help="the process to trace")
    p.add_argument("--duration", type=_seconds, default=None, metavar="SECONDS",
                   help="stop tracing after this many seconds (default: at ^C or when the process exits)")
    p.add_argument("--mode", choices=("adaptive", "precise"), default="adaptive",
                   help="as for tracing a program (default: %(default)s)")
    _add_recording_args(p)
    p.add_argument("-o", "--output", default="ocular_trace.pftrace", metavar="PATH",
                   help="trace file, relative to this command's directory (default: %(default)s)")
    p.add_argument("--format", choices=_formats.TIMELINES + ("recording",), default=None,
                   help="trace format (default: from the output's suffix, as for tracing a program: "
                        ".pftrace/.perfetto-trace/.pb = Perfetto protobuf, .ocular = the raw recording, "
                        ".json.gz = gzip-compressed Chrome trace JSON, anything else = Chrome trace JSON)")
    p.add_argument("--tool-id", type=int, default=None, choices=range(6), metavar="ID",
                   help="sys.monitoring tool id 0-5 in the process (default: the first free of 3, 4, 5; 0-2 belong "
                        "to pdb, coverage and cProfile)")
    r = p.add_mutually_exclusive_group()
    r.add_argument("--no-report", action="store_true", help="do not print the report at the end")
    r.add_argument("--report-json", action="store_true", help="print the report as JSON instead of the text table")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors and the report")
    return p


def attach_main(argv):
    from .. import _attach

    parser = build_attach_parser()
    ns = parser.parse_args(argv)
    if not 0 <= ns.threshold <= 0xFFFFFFF0:
        parser.error("argument --threshold: must be from 0 to 4294967280")
    try:
        return _attach.run(ns)
    except _attach.AttachError as exc:
        parser.exit(2, f"ocular: {exc}\n")
