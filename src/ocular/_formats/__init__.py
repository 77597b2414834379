"""Profile formats written from the aggregated call tree of a recording.

The C renderer folds a recording into one call tree per thread (``_ocular._render(rec, 3, None, ...)``,
``sink_tree.c``): a node is (parent node, code) with its calls, total and self nanoseconds.  The
formats below are written from that tree in Python, one render for all of them:

===================  =======================  ==================================================
format               suffixes                 module
===================  =======================  ==================================================
pstats               .pstats .prof            ``_pstats``: marshal data that pstats.Stats loads
folded               .folded .collapsed       ``_folded``: ``a;b;c N`` (N: ns of self time)
pprof                .pb.gz .pprof            ``_pprof``: gzipped profile.proto
gecko                .gecko.json              ``_gecko``: Firefox Profiler (processed format)
html                 .html .htm               ``_html``: one self-contained page
===================  =======================  ==================================================

speedscope (``.speedscope.json``) is a C sink of its own (``sink_speedscope.c``): it needs the events
in order, not the aggregate.  Times are the timeline's (wall-clock between a frame's begin and end,
as the JSON and Perfetto outputs show them); the console report instead subtracts Ocular's own cost
per event, so its self times are a little lower.
"""

import os

from .. import _ocular

# format name -> suffixes (checked longest first by ocular._format_for)
SUFFIXES = {
    "speedscope": (".speedscope.json",),
    "gecko": (".gecko.json",),
    "pstats": (".pstats", ".prof"),
    "folded": (".folded", ".collapsed"),
    "pprof": (".pb.gz", ".pprof"),
    "html": (".html", ".htm"),
}
TREE_FORMATS = ("pstats", "folded", "pprof", "gecko", "html")
C_CODES = {"speedscope": 4}
TIMELINE_CODES = {"json": 0, "perfetto": 1}  # _ocular._render's codes (2: statistics only)
RENDER_TREE = 3


# formats with no place for a note of their own: a line on stderr says what in them is partial
NOTE_ON_STDERR = ("pstats", "folded", "speedscope", "perfetto")


def partial_note(rendered):
    """What in a rendered output is partial, or None: every function call is in it unless near-zero mode
    de-instrumented function starts, or cheap C call sites were de-instrumented after the threshold (their
    later calls are their callers' self time).  rendered: _ocular._render's dict."""
    n = (rendered or {}).get("partial") or 0
    if not n:
        return None
    if rendered.get("near_zero"):
        return (f"near-zero mode: {n} function{'s' if n != 1 else ''} de-instrumented after the threshold "
                f"(only their first calls are in it; the report estimates the rest, marked ~)")
    return (f"{n} C function{'s' if n != 1 else ''} with call sites de-instrumented after the threshold (their "
            f"later calls are in their callers' self time; the report estimates them, marked ~)")


# The longest string V8 makes on 64-bit machines, in characters (String::kMaxLength, 2**29 - 24): Chromium
# 156's 'x'.repeat(536870888) works and one character more throws "RangeError: Invalid string length".
# A viewer that reads a JSON trace into one string before parsing it (chrome://tracing's importer,
# speedscope's, a page's FileReader.readAsText) cannot open a larger file at all; ui.perfetto.dev reads
# it in pieces and opens it, slowly (docs/formats.md).  A UTF-8 file's bytes are never fewer than its
# string's UTF-16 units, so checking bytes errs on the side of saying it.
JSON_VIEWER_LIMIT = (1 << 29) - 24


def json_size_note(nbytes, path="trace.json"):
    """The line said at stop when a Chrome JSON trace is too large for the browser viewers that read it
    as one string, or None."""
    if not nbytes or nbytes <= JSON_VIEWER_LIMIT:
        return None
    root = split_suffix(str(path))[0]
    return (f"{nbytes / 1e6:,.1f} MB of Chrome JSON, past {JSON_VIEWER_LIMIT:,} bytes (V8's longest string): "
            f"chrome://tracing and speedscope cannot open it (ui.perfetto.dev can, slowly); "
            f"-o {os.path.basename(root)}.pftrace writes the same timeline 20-40x smaller")


def suffix_format(path):
    """The format a suffix names, or None."""
    low = str(path).lower()
    for fmt, sufs in SUFFIXES.items():
        if low.endswith(sufs):
            return fmt
    return None


def split_suffix(path):
    """(root, suffix), the suffix whole for the two-part ones (x.speedscope.json -> x, .speedscope.json)."""
    low = str(path).lower()
    for sufs in SUFFIXES.values():
        for suf in sufs:
            if low.endswith(suf):
                return path[:-len(suf)], path[-len(suf):]
    return os.path.splitext(path)


class CallTree:
    """The call tree of the last tree render: parallel lists by node index."""

    def __init__(self, data):
        nodes = data["nodes"]
        self.parent = [n[0] for n in nodes]
        self.code = [n[1] for n in nodes]
        self.calls = [n[2] for n in nodes]
        self.total = [n[3] for n in nodes]
        self.self_ns = [n[4] for n in nodes]
        self.threads = [dict(tid=t[0], name=t[1], root=t[2], first_ns=t[3], last_ns=t[4]) for t in data["threads"]]
        self.codes = data["codes"]
        self.note = None  # what in the tree is partial (partial_note), set before a format writes it
        self.children = [[] for _ in nodes]
        for i, p in enumerate(self.parent):
            if p >= 0:
                self.children[p].append(i)

    def func(self, code):
        """(filename, firstlineno, qualname) of a code id."""
        c = self.codes[code] if 0 <= code < len(self.codes) else None
        if c is None:
            return ("?", 0, "<unknown code>")
        return (c[1], c[2], c[0])

    def thread_label(self, t):
        return f"{t['name'] or 'thread'} ({t['tid']})" if t["name"] else f"thread {t['tid']}"

    def walk(self, root):
        """Pre-order (node, depth) under root (root excluded, depth 0 for its children); iterative."""
        stack = [(c, 0) for c in reversed(self.children[root])]
        while stack:
            n, d = stack.pop()
            yield n, d
            stack.extend((c, d + 1) for c in reversed(self.children[n]))


def _write(fmt, tree, path, options):
    tree.note = partial_note(options.get("rendered"))
    if fmt == "pstats":
        from ._pstats import write
    elif fmt == "folded":
        from ._folded import write
    elif fmt == "pprof":
        from ._pprof import write
    elif fmt == "gecko":
        from ._gecko import write
    else:
        from ._html import write
    write(tree, path, options)


def render(rec, fmt, tmp, progress, options=None):
    """Render the recording rec into tmp as fmt ('json', 'perfetto', or one of SUFFIXES; None: statistics
    only).  options: thread_roots (folded stacks), with_code (HTML: the session's code objects are alive),
    loops (0 iterations, 1 runs, 2 off: the timeline's loop events), gzip (JSON: compress, for .json.gz),
    stats (False: a JSON or Perfetto trace alone, no statistics kept).
    Returns _ocular._render's dict (bytes: the size written; write_errno set if the file could not be
    written)."""
    options = options or {}
    if fmt in C_CODES:
        return _ocular._render(rec, C_CODES[fmt], tmp, progress)
    if fmt not in TREE_FORMATS:
        rendered = _ocular._render(rec, TIMELINE_CODES.get(fmt, 2), tmp, progress, options.get("loops") or 0,
                                   bool(options.get("stats", True)))
        if fmt == "json" and tmp and options.get("gzip") and not rendered["write_errno"]:
            from .. import _gzip_in_place

            rendered["bytes"] = _gzip_in_place(tmp)
        return rendered
    rendered = _ocular._render(rec, RENDER_TREE, None, progress)
    if tmp:
        try:
            _write(fmt, CallTree(_ocular._calltree()), tmp, dict(options or {}, rendered=rendered))
            rendered["bytes"] = os.path.getsize(tmp)
        except OSError as exc:
            rendered["write_errno"] = exc.errno or 5
    return rendered
