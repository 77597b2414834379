"""`python -m ocular merge TRACE... -o OUT`: one timeline of several processes' traces."""

import argparse
import os
import sys

from .. import _formats
from .common import _Formatter, _message, _say


MERGE_EPILOG = """Every Ocular trace is stamped with CLOCK_MONOTONIC, so the processes of one machine line up as
they are.  Inputs are all Chrome trace JSON or all native Perfetto protobuf, like the output.  A
'.tmp' input (the unfinished trace of a process that was killed) is salvaged up to its last complete
event and marked incomplete.
example:
  python -m ocular merge trace.procs/*.json -o all.json"""


def build_merge_parser():
    p = argparse.ArgumentParser(
        prog="python -m ocular merge",
        description="Merge trace files (of several processes) into one trace, one track group per process.",
        epilog=MERGE_EPILOG,
        formatter_class=_Formatter,
    )
    p.add_argument("inputs", nargs="+", metavar="TRACE", help="trace files to merge")
    p.add_argument("-o", "--output", required=True, metavar="PATH",
                   help="the merged trace: Perfetto protobuf for .pftrace/.perfetto-trace/.pb, else Chrome trace "
                        "JSON; a suffix of another format (.json.gz, .pstats, .html, .ocular, ...) is refused")
    p.add_argument("--format", choices=_formats.TIMELINES, default=None,
                   help="format of the inputs and the output (default: from the output's suffix)")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print what was merged")
    return p


def merge_main(argv):
    from .. import _merge

    parser = build_merge_parser()
    ns = parser.parse_args(argv)
    try:
        parts = _merge.merge(ns.inputs, ns.output, format=ns.format)
    except (ValueError, OSError) as exc:
        parser.exit(1, f"python -m ocular merge: error: {_message(exc)}\n")
    if not ns.quiet:
        size = os.path.getsize(ns.output)
        counts = ", ".join(f"{p['path']}: {p['events']} events" if p["events"] is not None
                           else f"{p['path']}: {p['packets']} packets" for p in parts)
        _say(f"ocular: merged {len(parts)} trace{'s' if len(parts) != 1 else ''} into {ns.output} "
             f"({size / 1e6:.1f} MB; {counts})")
        for p in parts:
            if not p["complete"]:
                _say(f"ocular: incomplete: {p['path']} (pid {p['pid']}): {p['note']}")
    for p in parts:  # (said even with -q, as convert does: the merged trace holds a repaired part)
        if p.get("damaged") and (ns.quiet or p["complete"]):
            print(f"ocular: {p['path']}: {p['damaged']}", file=sys.stderr)
    from .. import _format_for, _formats

    note = _formats.json_size_note(os.path.getsize(ns.output), ns.output) if (
        _format_for(ns.output, ns.format) == "json" and not ns.output.lower().endswith(".gz")) else None
    if note:
        _say(f"ocular: {ns.output}: {note}")
    return 0
