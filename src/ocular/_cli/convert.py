"""`python -m ocular convert RECORDING -o OUT...`: render a kept recording (.ocular) into any formats."""

import argparse

from .. import _formats
from .common import (_Formatter, _add_report_shape, _apply_report_shape, _message, _refuse_report_over, _say,
                     _wrap)


# the suffixes from the format table (ocular._formats.TABLE)
CONVERT_EPILOG = _wrap("The format comes from each output's suffix: " + "; ".join(
    f"{'/'.join(f.suffixes)} = {f.what}" for f in _formats.TABLE if f.name not in ("json", "recording")) +
    "; anything else = Chrome trace JSON.") + """
""" + _wrap("A recording cut short (its process was killed) renders up to its last complete block.  A damaged "
            "recording renders into valid outputs whose repairs are said on stderr and in a JSON trace's "
            "otherData (damaged, clamped_records, damage): records whose time goes back in their thread are "
            "clamped, so that slices nest; one it cannot read is refused (exit status 1).") + """
examples:
  python -m ocular convert run.ocular -o run.json -o run.pftrace
  python -m ocular convert run.ocular -o run.pstats -o run.folded -o run.html
  python -m ocular convert run.ocular -o run.json --report"""


def build_convert_parser():
    p = argparse.ArgumentParser(
        prog="python -m ocular convert",
        description="Render an Ocular recording (-o NAME.ocular, or one left by a killed process) into traces.",
        epilog=CONVERT_EPILOG,
        formatter_class=_Formatter,
    )
    p.add_argument("recording", metavar="RECORDING", help="the recording to render")
    p.add_argument("-o", "--output", action="append", required=True, metavar="PATH",
                   help="an output (repeatable: one render per output); .json.gz writes gzip-compressed JSON")
    p.add_argument("--loop-events", choices=("iterations", "runs", "off"), default=None,
                   help="what the trace shows of loops (default: runs for JSON, iterations for .pftrace)")
    r = p.add_mutually_exclusive_group()
    r.add_argument("--report", action="store_true",
                   help="also print the report (function statistics, hot loops); without a report a JSON or "
                        ".pftrace output is rendered alone, faster")
    r.add_argument("--report-json", action="store_true", help="also print the report as JSON")
    p.add_argument("--thread-roots", action="store_true",
                   help="folded stacks (.folded, .collapsed) start with their thread's name (default: threads summed)")
    _add_report_shape(p, "--report-file")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print where the traces went")
    return p


def convert_main(argv):
    import ocular

    parser = build_convert_parser()
    ns = parser.parse_args(argv)
    _apply_report_shape(parser, ns, "--report-file")
    report = "json" if ns.report_json else bool(ns.report or ns.report_file or ns.tree)
    _refuse_report_over(parser, "--report-file", ns.report_file,
                        [("the recording", ns.recording)] + [("the output", o) for o in ns.output])
    for out in ns.output:  # every output checked before any is rendered
        try:
            ocular._loops_code(ns.loop_events, ocular._format_for(ocular._check_output(out), None))
            if ocular._same_file(ns.recording, out):
                raise ValueError(f"the output {out!r} is the recording itself (it would replace it)")
        except (ValueError, OSError, TypeError) as exc:
            parser.exit(1, f"python -m ocular convert: error: {_message(exc)}\n")
    failed, reported = [], False
    for out in ns.output:  # an output that fails does not stop the others
        try:
            want = report if not reported else False  # (statistics only for a report: else the trace alone)
            res = ocular.convert(ns.recording, out, report=want, loops=ns.loop_events,
                                 thread_roots=ns.thread_roots, statistics=bool(want))
        except (ValueError, OSError) as exc:
            if len(ns.output) == 1:
                parser.exit(1, f"python -m ocular convert: error: {_message(exc)}\n")
            _say(f"python -m ocular convert: error: {_message(exc)}")
            failed.append(out)
            continue
        if not ns.quiet:
            _say(f"ocular: {ns.recording} rendered to {res.output} ({res.bytes / 1e6:.1f} MB, {res.events} events, "
                 f"{res.dropped} dropped{'' if res.complete else '; the recording was cut short'})")
        first, reported = not reported, True  # (the report and the tree with the first output written)
        if first and ns.tree and report != "json":
            try:
                from .._formats._tree import tree_text

                ocular._report_out("\nCall tree\n" + tree_text(ns.recording), append=True)
            except Exception as exc:
                _say(f"ocular: could not build the call tree: {exc!r}")
    if failed:
        parser.exit(1, f"python -m ocular convert: error: {len(failed)} of {len(ns.output)} outputs not written "
                       f"({', '.join(failed)})\n")
    return 0
