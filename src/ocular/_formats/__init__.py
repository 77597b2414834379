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

class Format:
    """One output format: every list of formats, CLI choice and dispatch is derived from TABLE below.

    name: the `format=` / `--format` name; suffixes: what `-o` names it by (matched longest first over
    all formats; a suffix no format has is Chrome JSON); render: ``_ocular._render``'s code for it (0
    Chrome JSON, 1 Perfetto, 3 the call tree, written in Python by `writer`, 4 speedscope; None: the
    recording itself, nothing rendered); live: rendered while the program runs (a C timeline sink fed as
    the recording grows); timeline: every event in time order, so --follow and merge can merge several
    processes' outputs; note_on_stderr: the file has no place for a note of its own, so what in it is
    partial is said on stderr; what: one line for the help."""

    __slots__ = ("name", "suffixes", "render", "writer", "live", "timeline", "note_on_stderr", "what")

    def __init__(self, name, suffixes, render, writer=None, live=False, timeline=False, note_on_stderr=False,
                 what=""):
        self.name, self.suffixes, self.render, self.writer = name, suffixes, render, writer
        self.live, self.timeline, self.note_on_stderr, self.what = live, timeline, note_on_stderr, what


RENDER_JSON, RENDER_PERFETTO, RENDER_STATS, RENDER_TREE, RENDER_SPEEDSCOPE = 0, 1, 2, 3, 4  # (_ocular._render)

TABLE = (
    Format("json", (".json",), RENDER_JSON, live=True, timeline=True,
           what="Chrome trace JSON (any suffix no other format has; .json.gz: gzip-compressed)"),
    Format("perfetto", (".pftrace", ".perfetto-trace", ".pb"), RENDER_PERFETTO, live=True, timeline=True,
           note_on_stderr=True, what="native Perfetto protobuf, compressed"),
    Format("recording", (".ocular",), None, what="the raw recording, rendered later by 'convert'"),
    Format("speedscope", (".speedscope.json",), RENDER_SPEEDSCOPE, note_on_stderr=True,
           what="speedscope's evented profiles, one per thread"),
    Format("gecko", (".gecko.json",), RENDER_TREE, "_gecko", what="the Firefox Profiler's processed format"),
    Format("pstats", (".pstats", ".prof"), RENDER_TREE, "_pstats", note_on_stderr=True,
           what="marshal data that pstats.Stats loads, as cProfile writes it"),
    Format("folded", (".folded", ".collapsed"), RENDER_TREE, "_folded", note_on_stderr=True,
           what="folded stacks, self nanoseconds"),
    Format("pprof", (".pb.gz", ".pprof"), RENDER_TREE, "_pprof", what="gzipped profile.proto"),
    Format("html", (".html", ".htm"), RENDER_TREE, "_html", what="one self-contained page"),
)
BY_NAME = {f.name: f for f in TABLE}
NAMES = tuple(f.name for f in TABLE)
TIMELINES = tuple(f.name for f in TABLE if f.timeline)
_BY_SUFFIX = sorted(((suf, f) for f in TABLE for suf in f.suffixes), key=lambda x: -len(x[0]))


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
    """The format a suffix names (a Format), or None (Chrome JSON, by default)."""
    low = str(path).lower()
    for suf, f in _BY_SUFFIX:
        if low.endswith(suf):
            return f
    return None


def split_suffix(path):
    """(root, suffix), the suffix whole for the two-part ones (x.speedscope.json -> x, .speedscope.json)."""
    low = str(path).lower()
    for suf, f in _BY_SUFFIX:
        if low.endswith(suf) and f.name != "json":
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
    import importlib

    tree.note = partial_note(options.get("rendered"))
    importlib.import_module(f".{BY_NAME[fmt].writer}", __name__).write(tree, path, options)


def render(rec, fmt, tmp, progress, options=None):
    """Render the recording rec into tmp as fmt (a name in TABLE but "recording"; None: statistics
    only).  options: thread_roots (folded stacks), with_code (HTML: the session's code objects are alive),
    loops (0 iterations, 1 runs, 2 off: the timeline's loop events), gzip (JSON: compress, for .json.gz),
    stats (False: a JSON or Perfetto trace alone, no statistics kept).
    Returns _ocular._render's dict (bytes: the size written; write_errno set if the file could not be
    written)."""
    options = options or {}
    code = BY_NAME[fmt].render if fmt else RENDER_STATS
    if code == RENDER_SPEEDSCOPE:
        return _ocular._render(rec, code, tmp, progress)
    if code != RENDER_TREE:
        rendered = _ocular._render(rec, code, tmp, progress, options.get("loops") or 0,
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
