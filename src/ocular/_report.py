"""The report printed at stop: function statistics and the hot-trace disassembly.

Built from ``_ocular._report_data()`` after the session's callbacks are unregistered, so nothing here
is traced.  Specialized instruction names are read from the adaptive bytecode (``dis`` with
``adaptive=True``) once our instrumentation is gone: in adaptive mode the hot loop's instructions are
still quickened (``BINARY_OP -> BINARY_OP_ADD_INT``); in precise mode an instruction is specialized
only if it was de-instrumented (past the threshold) and ran again before stop, because CPython does
not specialize instructions while INSTRUCTION events are on.

The names are this interpreter's own, read from ``dis`` at run time, never from a table of ours: 3.14
renamed specializations (``BINARY_SUBSCR_LIST_INT`` became ``BINARY_OP_SUBSCR_LIST_INT``, ``LOAD_FAST`` is
often ``LOAD_FAST_BORROW``, ``JUMP_BACKWARD`` specializes to ``JUMP_BACKWARD_NO_JIT`` without the JIT) and
added ``NOT_TAKEN``, the no-op after a conditional jump that fires BRANCH_LEFT; it shows as a row of its
own, as it is an instruction the loop executes.

Estimates (adaptive mode, sampling windows: attrib.c): a function de-instrumented after the threshold is
still measured in short windows, and the renderer estimates its calls and time outside them and takes that
time out of its callers' self time.  A row's ``calls``, ``self_*`` and ``total_*`` are then the estimates,
``estimated_fields`` says which, ``measured`` keeps the recorded figures, and a caller's
``estimated_callees`` lists the shares; the text marks estimated figures with ``~``.  Without windows
(``sampling=False``, a program that ended before the first window opened, another sys.monitoring tool
registered) the
caller's ``untraced_callees`` only names them, and the text says why nothing was estimated.

Units: *cycles* are ticks of the trace clock (TSC cycles on x86-64), *ns* converts them with the
calibrated rate.  Ocular's own cost per event (calibrated at the start of the session) is subtracted
from self times and from per-instruction/per-block cycles.
"""

import array
import bisect
import dis
import functools
import operator
import os
import re
import sys

from . import _pyversions

__all__ = ["Report"]

TOP_FUNCTIONS = 15
TOP_LOOPS = 3
ENTRY_ROWS = 3  # entry points into the user's code on the first screen
FIRST_SCREEN = 40  # lines of the report's first screen with the default rows
JSON_LOOPS = 10  # loops in the JSON report (each with its instructions)
LOOP_ROWS = 16  # a longer loop is cut to its hottest rows
SORT_KEYS = {"self": "self_cycles", "total": "total_cycles", "calls": "calls", "mean": "mean_ns", "name": "name"}
USER = "your code"
GENERATED = "generated code"
TASKS = "asyncio tasks"  # a task's steps (asyncio.c): one entry per task name, file "<asyncio task>"
TASK_FILE = "<asyncio task>"
CALLBACK = "(loop callback)"  # a loop stall's "task" when a callback that is no task's step held the loop
_CALLBACK_RUNNERS = ("Handle._run", "<method 'run' of '_contextvars.Context' objects>")  # (asyncio's, above it)
STALL_MS = 100  # by default, a step that holds the event loop this long is a loop stall (render.c OC_STALL_MS)
FOLDED = ("site-packages", "standard library", GENERATED, "frozen importlib", "ocular")
KEEP_FUNCTIONS = 5000  # rows a Report keeps (by self time, and loops by cycles): bounded memory at stop


def _settle(codes):
    """Bring the given code objects' bytecode up to date with the (now empty) instrumentation.

    CPython removes instrumentation lazily, when a code object next runs; until then its adaptive
    bytecode still holds INSTRUMENTED_* opcodes.  set_local_events() instruments a code object
    immediately, so setting no local events under a temporary tool id settles it without running it.
    """
    from . import _toolid

    mon = _toolid.mon
    with _toolid.borrowed("ocular-report") as tool:
        for code in codes if tool is not None else ():
            try:
                mon.set_local_events(tool, code, mon.events.PY_START)  # a change forces the update
                mon.set_local_events(tool, code, 0)
            except (ValueError, TypeError):
                pass


def _is_call(name):
    """An instruction that runs a callee (whose time, once the callee is de-instrumented, an instruction
    probe cannot tell from the instruction's own)."""
    return name.startswith("CALL") and not name.startswith("CALL_INTRINSIC")


def _block_shares(units, block, calls, block_cycles):
    """Cycles per execution of each instruction of a basic block (offsets `block`) whose executions took
    `block_cycles` each, from the instruction probe that followed the loop's threshold (adaptive mode),
    or evenly without one.  The block's cycles exclude the calls made in it (they are their own rows),
    but in the probe a call instruction's time includes any de-instrumented callee's: so the call
    instructions (offsets in `calls`) get what the other instructions leave of the block, each at most
    its probe figure, and the others the rest in proportion to the probe (without calls, the whole
    block in proportion to the probe)."""
    weights = {}
    for off in block:
        v = units.get(off)
        weights[off] = v[4] / v[3] if v and v[3] else 0.0
    total = sum(weights.values())
    if total <= 0:
        return {off: block_cycles / (len(block) or 1) for off in block}
    in_calls = [off for off in block if off in calls]
    call_total = sum(weights[off] for off in in_calls)
    rest = total - call_total
    if not in_calls or rest <= 0:
        # (an instruction the probe never saw alone, one without INSTRUCTION events of its own: its time
        # is in the instruction before it)
        return {off: block_cycles * w / total for off, w in weights.items()}
    if block_cycles <= rest:  # the others alone account for the block: scaled down to it
        return {off: 0.0 if off in calls else block_cycles * w / rest for off, w in weights.items()}
    left = block_cycles - rest
    if left <= call_total:  # the calls share what is left, each at most its probe figure
        return {off: left * w / call_total if off in calls else w for off, w in weights.items()}
    # more than the probe's calls took (the block's executions ran slower than the probe's: preemption,
    # a colder cache): the excess goes to the other instructions, in proportion
    grow = (block_cycles - call_total) / rest
    return {off: w if off in calls else w * grow for off, w in weights.items()}


@functools.lru_cache(maxsize=1)
def _cache_table():
    from . import _cache_entries

    return _cache_entries()


_JUMPS = frozenset(dis.hasjrel) | frozenset(getattr(dis, "hasjabs", ())) | frozenset(getattr(dis, "hasjump", ()))


def _arg(ins):
    """The argument column: a jump's target as an offset on every version (3.13+'s dis prints labels,
    for specialized forms too: FOR_ITER_RANGE is known by its base opcode)."""
    if getattr(ins, "baseopcode", ins.opcode) in _JUMPS and isinstance(ins.argval, int):
        return f"to {ins.argval}"
    return ins.argrepr


def _version(hexversion):
    """'3.12', or '3.15.0a2' for a pre-release, from a PY_VERSION_HEX."""
    major, minor, micro, level, serial = (hexversion >> 24, (hexversion >> 16) & 0xFF, (hexversion >> 8) & 0xFF,
                                          (hexversion >> 4) & 0xF, hexversion & 0xF)
    if level == 0xF:
        return f"{major}.{minor}"
    return f"{major}.{minor}.{micro}{_LEVELS.get(level, '?')}{serial}"


_LEVELS = {0xA: "a", 0xB: "b", 0xC: "rc"}


def _same_bytecode(recorded, running):
    """Whether bytecode recorded by PY_VERSION_HEX `recorded` has `running`'s opcodes: the same feature
    release, both final (bytecode is frozen from the release candidates on, not between alphas or betas),
    or the very same version."""
    def final(h):  # (a release candidate's bytecode is the release's)
        return (h >> 4) & 0xF in (0xC, 0xF)

    return recorded == running or (recorded >> 16 == running >> 16 and final(recorded) and final(running))


class _Ins:
    """One instruction of a loop's rows: offset, base and specialized names, line; `arg` its argument
    column once decoded (None until then)."""

    __slots__ = ("offset", "base", "opname", "line", "arg")

    def __init__(self, offset, base, opname, line, arg=None):
        self.offset, self.base, self.opname, self.line, self.arg = offset, base, opname, line, arg


def _loop_instructions(code, lo, hi):
    """The instructions of `code` from offset `lo` to `hi` (a loop's), read from its bytecode: base
    names from co_code (de-specialized, un-instrumented), specialized ones from the adaptive bytecode,
    lines from co_lines(); no argument yet (_loop_args decodes it for the rows that are shown: dis on a
    big loop was the largest part of a report's stop, ~40,000 instructions an instruction on 3.12)."""
    bc = code.co_code
    if not 0 <= lo <= hi < len(bc) or lo % 2 or hi % 2:
        return []
    spec = getattr(code, "_co_code_adaptive", bc)
    base_names, spec_names, step = _opcode_tables()
    end = hi + 2
    lines = {}
    for a, b, line in code.co_lines():
        if b > lo and a < end:
            for off in range(max(a, lo), min(b, end), 2):
                lines[off] = line
    out = []
    append, get = out.append, lines.get
    nspec = len(spec)
    off = lo
    while off <= hi:
        op = bc[off]
        base = base_names[op]
        append(_Ins(off, base, (spec_names[spec[off]] if off < nspec else None) or base, get(off)))
        off += step[op]
    return out


@functools.lru_cache(maxsize=1)
def _call_names():
    """The base names of the instructions that run a callee (_is_call)."""
    return frozenset(n for n in dis.opname if _is_call(n))


@functools.lru_cache(maxsize=1)
def _opcode_tables():
    """Per opcode byte: the base name (dis.opname), the specialized name (None for an instrumented form,
    ENTER_EXECUTOR or a gap: the base name stands), and the step to the next instruction (2 + its caches)."""
    names = getattr(dis, "_all_opname", dis.opname)
    base = [dis.opname[op] if op < len(dis.opname) else "" for op in range(256)]
    spec = []
    for op in range(256):
        name = names[op] if op < len(names) else ""
        spec.append(None if not name or name.startswith(("INSTRUMENTED_", "<")) or name == "ENTER_EXECUTOR"
                    else name)
    return base, spec, [2 + 2 * _caches_after(op) for op in range(256)]


def _loop_args(code, ins):
    """Fill the argument column of instructions `ins` (_Ins of `code`) as dis shows it, jump targets as
    offsets.  Each run of consecutive ones is decoded alone: dis gets a stand-in of the code holding
    only that slice (with the EXTENDED_ARG prefix of its first instruction); jumps are relative since
    3.12, so the slice keeps them, and their targets are moved back by the slice's start."""
    todo = sorted((i for i in ins if i.arg is None), key=lambda i: i.offset)
    if not todo:
        return
    bc = code.co_code
    ext = dis.opmap["EXTENDED_ARG"]
    step = _opcode_tables()[2]
    runs, run = [], [todo[0]]
    for i in todo[1:]:
        prev = run[-1].offset
        if i.offset == prev + step[bc[prev]]:
            run.append(i)
        else:
            runs.append(run)
            run = [i]
    runs.append(run)
    for run in runs:
        lo, hi = run[0].offset, run[-1].offset
        while lo >= 2 and bc[lo - 2] == ext:
            lo -= 2
        end = min(len(bc), hi + step[bc[hi]])
        want = {i.offset: i for i in run}
        try:
            piece = code.replace(co_code=bc[lo:end], co_linetable=b"", co_exceptiontable=b"")
            for d in dis.get_instructions(piece):
                i = want.get(d.offset + lo)
                if i is not None:
                    if getattr(d, "baseopcode", d.opcode) in _JUMPS and isinstance(d.argval, int):
                        i.arg = f"to {d.argval + lo}"
                    else:
                        i.arg = d.argrepr
        except (ValueError, TypeError, IndexError):
            pass
    for i in todo:
        if i.arg is None:
            i.arg = ""
        if _pyversions.NOT_TAKEN and i.base == "NOT_TAKEN" and not i.arg:  # a no-op carrying BRANCH_LEFT
            i.arg = "(fall-through of the jump above)"


@functools.lru_cache(maxsize=None)
def _caches_after(op):
    """Inline cache entries after base opcode `op` (dis's table: by opcode on 3.12, by name since)."""
    table = dis._inline_cache_entries
    if _pyversions.CACHE_TABLE_BY_NAME:
        return table.get(dis.opname[op] if op < len(dis.opname) else "", 0)
    return table[op] if op < len(table) else 0


_OCULAR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# the standard library's directory (sysconfig's stdlib and platstdlib are that one on every CPython here;
# sysconfig itself costs ~2.5 M instructions to import, a tenth of what a run on an empty script adds)
_STDLIB_DIRS = (os.path.join(getattr(sys, "_stdlib_dir", None) or os.path.dirname(os.__file__), ""),)
_STDLIB_RE = re.compile(r"[/\\]lib[/\\]python3\.\d+t?[/\\]")  # another machine's standard library


C_FUNCTIONS = "C functions"


def category(path, user_files=()):
    """Where a file belongs: "your code", "C functions" (file "~", as cProfile names them), "standard
    library", "frozen importlib", "site-packages" or "ocular" (by its path: the report ranks the user's own
    code, then the C functions, and folds the others into one line each)."""
    if path == "~":
        return C_FUNCTIONS
    if path == TASK_FILE:
        return TASKS
    if path in user_files or path == "<stdin>":
        return USER
    if path.startswith("<frozen "):
        return "frozen importlib"
    if path.startswith("<"):  # exec/eval/compile of a string: dataclass, namedtuple and attrs methods, templates,
        return GENERATED      # networkx's "<class '...argmap'> compilation 58" (not the user's own lines)
    if path.startswith(_OCULAR_DIR):
        return "ocular"
    if "site-packages" in path or "dist-packages" in path:
        return "site-packages"
    if path.startswith(_STDLIB_DIRS) or _STDLIB_RE.search(path):
        return "standard library"
    return USER


def _group_generated(rows, key, full=lambda f: f):
    """rows with the generated functions of one name and file as one row (dataclass and namedtuple methods
    are compiled per class: black's 2,106 `__create_fn__.<locals>.__init__` would take the first screen's
    rows one class at a time): calls and times summed, marked as any of them is, "grouped": how many;
    sorted by `key` as rows are.  full(row): the full row of a light one (Report._row)."""
    groups, out = {}, []
    for f in rows:
        if f["category"] != GENERATED:
            out.append(f)
            continue
        f = full(f)
        g = groups.get((f["name"], f["file"]))
        if g is None:
            groups[(f["name"], f["file"])] = g = dict(f, grouped=0, calls=0, self_cycles=0.0, total_cycles=0.0,
                                                      self_ns=0.0, total_ns=0.0, untraced_callees=[],
                                                      estimated_callees=[], estimated_fields=[])
            out.append(g)
        g["grouped"] += 1
        for k in ("calls", "self_cycles", "total_cycles", "self_ns", "total_ns"):
            g[k] += f[k]
        g["estimated_fields"] = sorted(set(g["estimated_fields"]) | set(f.get("estimated_fields") or ()))
        g["estimated"] = bool(g["estimated_fields"])
        g["sample"] = g.get("sample") or f.get("sample")
        g["mean_ns"] = g["total_ns"] / g["calls"] if g["calls"] else 0.0
    return sorted(out, key=operator.itemgetter(key), reverse=key != "name") if groups else rows


def _ended_text(g):
    """How a task row's tasks ended: "returned", "raised", "cancelled", "not done" (one task), else counts."""
    e, rest = g["ended"], g["not_ended"]
    if g["tasks"] == 1:
        return next((k for k in ("returned", "raised", "cancelled") if e[k]), "not done")
    parts = [f"{e[k]:,} {k}" for k in ("returned", "raised", "cancelled") if e[k]]
    return ", ".join(parts + ([f"{rest:,} not done"] if rest else [])) or "not done"


def _fmt_ns(ns):
    if ns < 0:
        return "-" + _fmt_ns(-ns)
    if ns >= 1e9:
        return f"{ns / 1e9:.2f}s"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f}ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f}us"
    return f"{ns:.0f}ns"


def _short(path, width):
    """The path's last whole components that fit in `width` (``.../pkg/mod.py``), never cut inside a name."""
    if width is None or len(path) <= width:
        return path
    parts = path.replace("\\", "/").split("/")
    if len(parts) == 1:  # one name: whole or not at all
        return path
    for i in range(1, len(parts)):
        tail = ".../" + "/".join(parts[i:])
        if len(tail) <= width:
            return tail
    return ".../" + parts[-1]


def _library_part(p):
    """The part of a path (with slashes) after site-packages or a standard library directory, and whether
    that directory is one this interpreter knows (site-packages, its own standard library) rather than
    another machine's standard library: (None, False) for neither."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in p:
            return p.split(marker, 1)[1], True
    for d in _STDLIB_DIRS:
        d = d.replace("\\", "/")
        if p.startswith(d):
            return p[len(d):], True
    m = _STDLIB_RE.search(p)
    return (p[m.end():], False) if m else (None, False)


def package(path):
    """The package a file belongs to, as a user names it: the top directory under site-packages, the
    standard library's module (``re``, ``json``), or the file's own directory name."""
    p = path.replace("\\", "/")
    rest, _ = _library_part(p)
    if rest is not None:
        top = rest.split("/", 1)[0]
        return top[:-3] if top.endswith(".py") else top
    if p.startswith("<frozen "):
        return p[len("<frozen "):-1].split(".", 1)[0]
    return os.path.basename(os.path.dirname(p)) or p


def short_path(path):
    """A file as a user reads it: under site-packages or the standard library, the part after it
    (``docutils/nodes.py``); under the working directory, relative to it; else as recorded."""
    p = path.replace("\\", "/")
    rest, known = _library_part(p)
    if known:
        return rest
    try:
        cwd = os.getcwd().replace("\\", "/").rstrip("/") + "/"
    except OSError:
        cwd = None
    if cwd and p.startswith(cwd):
        return p[len(cwd):]
    return path


_C_OWNER = re.compile(r"of '([^']+)' objects>$|^<built-in method ([\w.]+?)\.\w+>$")


def c_owner(name):
    """The type or module a C function belongs to, from its name as cProfile writes it:
    ``<method 'search' of 're.Pattern' objects>`` -> re.Pattern; ``<built-in method _imp.exec_dynamic>``
    -> _imp."""
    m = _C_OWNER.search(name)
    return (m.group(1) or m.group(2)) if m else "builtins"


def _fit(text, width, indent=0):
    """A line of prose at `width` (None: as it is): wrapped at spaces, the continuation indented."""
    if width is None or len(text) <= width:
        return [text]
    import textwrap

    room = width - indent - 2  # a word longer than a line is a path: its last whole components that fit
    words = [w if len(w) <= room or "/" not in w else _short(w, room) for w in text.split(" ")]
    return textwrap.wrap(" ".join(words), width, subsequent_indent=" " * (indent + 2), break_long_words=False,
                         break_on_hyphens=False) or [text]


def _pct(part, whole):
    return f"{100 * part / whole:.1f}%" if whole > 0 else "-"


class Report:
    """Function statistics and hot loops of one session (``ocular.last_report()``)."""

    def __init__(self, data, mode, threshold, clock):
        self.mode = mode
        self.threshold = data.get("threshold", 0) if threshold is None else threshold
        self.clock = clock
        # near-zero mode: function starts were de-instrumented after the threshold too (their later calls
        # are samples and estimates); else every call is counted and timed
        self.near_zero = bool(data.get("near_zero", False))
        self.ns_per_tick = data["ns_per_tick"] or 1.0
        self.overhead_cycles = data["overhead_ticks"]
        # Ocular's own cost per event taken off each gap, by the kind of event after it, as measured at start
        # (owncost.c): {"enter", "leave", "jump", "ccall", "creturn"} in cycles; None: the smallest gap seen
        self.own_cost = data.get("own_cost")
        self.incomplete = data["stats_incomplete"]
        self.functions_total = data.get("functions_total", len(data["functions"]))
        self.python_hex = data.get("python_hex", sys.hexversion)
        # the recorded bytecode's inline cache units per opcode (the recording's header); this
        # interpreter's opcode names only where they are the recording's (bytecode_note says why not)
        self.cache_entries = data.get("cache_entries")
        self.same_python = _same_bytecode(self.python_hex, sys.hexversion)
        if data.get("adaptive"):
            from ._adaptive import parse

            self._adaptive = parse(data["adaptive"])
        else:
            self._adaptive = {}  # {code id: the specialized bytecode kept at stop}
        self.bytecode_note = None if self.same_python else (
            f"recorded on Python {_version(self.python_hex)}, read by {_version(sys.hexversion)}, whose opcodes "
            f"differ: no instruction names, no block split (convert with Python {_version(self.python_hex)} for them)")
        self.events = data.get("events")
        self.dropped = data.get("dropped", 0)
        self.wall_ns = data.get("wall_ns")
        self.sampling = dict(data.get("sampling") or {"status": "off", "windows": 0, "window_ticks": 0,
                                                       "skipped": 0, "other_tool": ""})
        self.sampling["window_ns"] = self.sampling.get("window_ticks", 0) * self.ns_per_tick
        run = getattr(sys.modules.get("ocular"), "_run", None)
        self._user_files = frozenset(run.user_files if run is not None else ())
        self._categories = {}  # file -> category (a program's functions share few files)
        self._raw = data["functions"]
        self._functions = None  # the full rows, once asked for
        self._entries = None    # entry_points, once asked for
        self._callers = None    # {function id: its statistics}, once a row's callers are named
        self._loops = []    # rows (the disassembly) are built only for the loops someone looks at
        self._pending = {}  # id(loop) -> (code, f, lp) while its rows are not built
        self._args_todo = {}  # id(loop) -> (code, [_Ins]) while some of its rows' "arg" is not decoded
        # Each function with a row is first a *light* row: the figures the ranking and the first screen's
        # sums need (the sort keys, self_ns, category, name, file) and where its statistics are ("_i": their
        # index in _raw, not the dict: a dict of atomic values stays out of the cyclic collector's walks, as
        # the statistics do, results.c); its full row is built when it is shown, or when `functions` is read
        # (_row): a stop prints ~30 rows of thousands.  One pass over the statistics (thousands at a stop).
        # unended: calls without a seen end: their time up to the thread's last record before the frames under
        # them went on (or the stop) is in their function's row, their count only in the line about calls
        # without an end (a function whose every call lacked one has a row of 0 calls)
        light, unended, rowless, deinst = [], [], 0, 0
        cats, category_of, ns = self._categories, self._category, self.ns_per_tick
        for i, f in enumerate(self._raw):
            if f["deinstrumented"]:
                deinst += 1
            est = f.get("estimate")
            if f["truncated"]:
                unended.append({"name": f["name"], "file": f["file"], "line": f["firstlineno"],
                                "calls": f["truncated"]})
            elif not f["segments"] and not est:
                rowless += 1
            # a row: calls, or calls without an end seen (their time is measured), or estimated time only
            # (windows saw only ends of its calls)
            if f["segments"] or f["truncated"] or est:
                if est:  # sampling windows: the de-instrumented calls' share, estimated (attrib.c)
                    calls = round(f["calls"] + est["calls"])
                    incl = f["incl"] + est["incl"]
                    self_c = max(0.0, f["self"] + est["self"] - est["removed"])
                else:
                    calls, incl, self_c = f["calls"], f["incl"], f["self"]
                light.append({"self_cycles": self_c, "total_cycles": incl, "calls": calls, "mean_ns": f["mean"] * ns,
                              "self_ns": self_c * ns, "category": cats.get(f["file"]) or category_of(f["file"]),
                              "name": f["name"], "file": f["file"], "_i": i})
            for lp in f["loops"]:
                entry = self._loop(f["code"], f, lp)
                self._loops.append(entry)
                self._pending[id(entry)] = (f["code"], f, lp)
        light.sort(key=operator.itemgetter("self_cycles"), reverse=True)
        self._light = light
        self.unended = sorted(unended, key=lambda u: -u["calls"])
        self.deinstrumented_total = deinst
        self._rowless = rowless
        self._tasks(data)
        self._loops.sort(key=lambda r: r["own_cycles"], reverse=True)

    @property
    def functions(self):
        """Every function's row, by self time (the report keeps at most KEEP_FUNCTIONS)."""
        if self._functions is None:
            self._functions = [self._row(x) for x in self._light]
        return self._functions

    @property
    def entry_points(self):
        """The entry points into the user's code: its functions (not module bodies) called from code
        elsewhere (a test runner's call of a test, a server's of a handler), or with no caller recorded (a
        thread's run function), slowest (by total time) first."""
        if self._entries is None:
            names = self._caller_table()
            ns = self.ns_per_tick
            out = []
            for x in self._light:
                if x["category"] != USER or x["name"] == "<module>":
                    continue
                f = self._raw[x["_i"]]
                callers = [(self._category(names[c]["file"]), names[c]["name"]) if c in names else ("?", "?")
                           for c in f.get("callers", ())]
                outside = [name for cat, name in callers if cat in FOLDED]  # (Python code elsewhere: not a C
                                                                            # function such as sum() resuming a
                                                                            # generator)
                if outside or not callers:
                    out.append(dict(name=x["name"], file=x["file"], line=f["firstlineno"], calls=x["calls"],
                                    total_ns=x["total_cycles"] * ns, mean_ns=x["mean_ns"], max_ns=f["max"] * ns,
                                    called_from=outside[:3]))
            out.sort(key=lambda e: -e["total_ns"])
            self._entries = out
        return self._entries

    def _caller_table(self):  # {function id: its statistics}
        if self._callers is None:
            self._callers = {f["id"]: f for f in self._raw if "id" in f}
        return self._callers

    @property
    def loops(self):
        """Every loop seen, hottest (by its own time) first, each with its rows."""
        self._fill(self._loops)
        return self._loops

    def _fill(self, loops, args=True):
        """Build the rows of `loops` that have none yet, and (args) their argument column."""
        todo = [lp for lp in loops if id(lp) in self._pending]
        if args:
            for lp in loops:
                if id(lp) in self._args_todo:
                    self._fill_args(lp)
        if not todo:
            return
        codes = {id(self._pending[id(lp)][0]): self._pending[id(lp)][0] for lp in todo}
        codes.pop(id(None), None)
        _settle(list(codes.values()))  # adaptive bytecode without our instrumentation
        for lp in todo:
            code, f, raw = self._pending.pop(id(lp))
            # how the rows' cycles were had: per instruction (precise), or blocks split by an instruction
            # probe, or evenly (no probe ran in the loop)
            lp["split"] = "instructions" if self.mode == "precise" else "probe" if any(
                v[3] for off, v in f["units"].items() if raw["dest"] <= off <= raw["src"]) else "even"
            if code is None and f.get("id") in self._adaptive and self.same_python:
                rows = self._kept_rows(f, raw)
                if rows:  # recorded by another process, with its specialized bytecode kept at stop
                    lp["rows"] = rows
                    lp["line"] = next((r["line"] for r in rows if r["line"]), f["firstlineno"])
                    continue
            if code is None:  # gone by stop, or recorded by another process: the recorded bytecode
                lp["rows"] = self._recorded_rows(f, raw)
                lp["note"] = self.bytecode_note
                lp["line"] = next((r["line"] for r in lp["rows"] if r["line"]), f["firstlineno"])
                continue
            instrs = _loop_instructions(code, raw["dest"], raw["src"])
            lp["rows"] = self._rows(f, raw, instrs)
            self._args_todo[id(lp)] = (code, instrs)
            lp["line"] = next((r["line"] for r in lp["rows"] if r["line"]), code.co_firstlineno)
            if args:
                self._fill_args(lp)

    def _fill_args(self, lp, rows=None):
        """The argument column of a live code's loop rows (all, or `rows`), decoded when first shown."""
        todo = self._args_todo.get(id(lp))
        if todo is None:
            return
        code, instrs = todo
        want = {r["offset"] for r in (lp["rows"] if rows is None else rows) if r["arg"] is None}
        ins = [i for i in instrs if i.offset in want]
        _loop_args(code, ins)
        by = {i.offset: i.arg for i in ins}
        for r in lp["rows"]:
            if r["offset"] in by:
                r["arg"] = by[r["offset"]]
        if all(r["arg"] is not None for r in lp["rows"]):
            del self._args_todo[id(lp)]

    # -- building -----------------------------------------------------------------------------
    def _category(self, path):
        c = self._categories.get(path)
        if c is None:
            c = self._categories[path] = category(path, self._user_files)
        return c

    def _row(self, x):
        """The full row of light row `x` (built once); a full row (a group of generated functions) as it is."""
        i = x.get("_i")
        if i is None:
            return x
        row = x.get("_row")
        if row is None:
            row = x["_row"] = self._full_row(self._raw[i], x)
        return row

    def _full_row(self, f, x):
        ns = self.ns_per_tick
        sample = f["deinstrumented"]
        est = f.get("estimate")
        calls, incl, self_c = x["calls"], x["total_cycles"], x["self_cycles"]
        estimated = False
        est_calls = est_self = False
        callees = []
        if est:
            est_calls = est["calls"] > 0 or est["incl"] > 0
            est_self = est_calls or est["removed"] > 0
            estimated = est_self
            callees = [{"name": c["name"], "calls": round(c["calls"]), "total_cycles": c["incl"],
                        "total_ns": c["incl"] * ns, "self_ns": c["self"] * ns}
                       for c in sorted(est["callees"], key=lambda c: -c["incl"])]
        callers = f.get("callers", ())
        if callers:
            names = self._caller_table()
            callers = [names[c]["name"] if c in names else "?" for c in callers]
        return {
            "category": x["category"],
            "name": f["name"],
            "file": f["file"],
            "line": f["firstlineno"],
            "calls": calls,
            "segments": f["segments"],
            "total_cycles": incl,
            "self_cycles": self_c,
            "total_ns": incl * ns,
            "self_ns": self_c * ns,
            "estimated": estimated,
            "estimated_fields": [k for k, on in (("calls", est_calls), ("total", est_calls), ("self", est_self))
                                 if on],
            "measured": {"calls": f["calls"], "total_cycles": f["incl"], "self_cycles": f["self"],
                         "total_ns": f["incl"] * ns, "self_ns": f["self"] * ns},
            "estimated_callees": callees,
            "mean_ns": f["mean"] * ns,
            "stddev_ns": f["stddev"] * ns,
            "min_ns": f["min"] * ns,
            "max_ns": f["max"] * ns,
            "deinstrumented": f["deinstrumented"],
            "untraced_callees": list(f.get("untraced_callees", ())),
            "id": f.get("id"),
            "sample": sample,
            "truncated": f["truncated"],
            "callers": list(callers),
        }

    def _rows(self, f, lp, all_instrs):
        """A loop's rows from its instructions (_Ins): cycles per execution from the instruction's counts
        (precise) or its block's, split by the probe; "arg" is None until _fill_args."""
        ns = self.ns_per_tick
        units = f["units"]
        precise = self.mode == "precise"
        rows = []
        lo, hi = lp["dest"], lp["src"]
        # adaptive: blocks (start -> (count, cycles, end)) covering each instruction
        # only blocks that begin inside the loop: the one that enters it (from the function's start, or
        # before the loop) ends at its header too, and would charge the header with the way in
        blocks = sorted((start, v) for start, v in units.items() if v[0] and lo <= start <= hi) if not precise else []
        instrs = [i for i in all_instrs if lo <= i.offset <= hi]
        offsets = [i.offset for i in instrs]
        call_names = _call_names()
        calls = {i.offset for i in instrs if i.base in call_names}
        shares = {}  # adaptive: block start -> {offset: cycles per execution}
        k = 0  # adaptive: the first block (by start) that does not end before the current instruction
        nb = len(blocks)
        for ins in instrs:
            cyc, blk = None, False
            if precise:
                v = units.get(ins.offset)
                if v and v[0]:
                    cyc = v[1] / v[0]
            else:  # the block with the smallest start covering the instruction; one pass, not quadratic
                while k < nb and blocks[k][1][2] < ins.offset:
                    k += 1
                if k < nb and blocks[k][0] <= ins.offset:
                    start, (count, cycles, end, _, _) = blocks[k]
                    if start not in shares:
                        i0, i1 = bisect.bisect_left(offsets, start), bisect.bisect_right(offsets, end)
                        shares[start] = _block_shares(units, offsets[i0:i1], calls, cycles / count)
                    cyc = shares[start].get(ins.offset)
                    blk = cyc is not None and None in shares[start]
            rows.append({
                "offset": ins.offset,
                "line": ins.line,
                "base": ins.base,
                "specialized": ins.opname,
                "arg": ins.arg,
                "cycles": cyc,
                "ns": cyc * ns if cyc is not None else None,
                "block_total": blk,  # cycles: the whole block's (it calls a function: not split)
            })
        return rows

    def _kept_rows(self, f, lp):
        """Rows from the recorded bytecode and the specialized forms and argument names kept with it at
        stop (_adaptive.py), as a live code object gives them; [] if they cannot be rebuilt."""
        from ._adaptive import instructions

        bc, raw_lines = f.get("bytecode"), f.get("lines")
        cache = self.cache_entries or _cache_table()
        instrs = instructions(bc, self._adaptive[f["id"]], cache) if bc and raw_lines else None
        if not instrs:
            return []
        lines = array.array("i")
        lines.frombytes(raw_lines)
        ins = []
        for i in instrs:
            b = dis.opname[bc[i.offset]]
            arg = _arg(i)
            if b == "NOT_TAKEN" and not arg:
                arg = "(fall-through of the jump above)"
            ins.append(_Ins(i.offset, b, i.opname, None, arg))
        rows = self._rows(f, lp, ins)
        for r in rows:
            u = r["offset"] // 2
            r["line"] = lines[u] if u < len(lines) and lines[u] >= 0 else None
        return rows

    def _recorded_rows(self, f, lp):
        """Rows from the de-instrumented bytecode in the recording: base instruction names (the
        specialized forms and arguments need the live code object), lines and cycles."""
        bc, raw_lines = f.get("bytecode"), f.get("lines")
        if not bc or not raw_lines:
            return []
        same_python = self.same_python
        lines = array.array("i")
        lines.frombytes(raw_lines)
        cache = self.cache_entries or (_cache_table() if same_python else None)
        if cache is None:  # (statistics without the recording's table, of another version: no offsets known)
            return []
        units = f["units"]
        precise = self.mode == "precise"
        ns = self.ns_per_tick
        offsets = []
        u = lp["dest"] // 2
        while u * 2 <= lp["src"] and u < len(bc) // 2:
            offsets.append(u)
            u += 1 + (cache[bc[2 * u]] & 0x7F)  # (the recorded interpreter's cache units)
        blocks = (sorted((start, v) for start, v in units.items() if v[0] and lp["dest"] <= start <= lp["src"])
                  if not precise else [])
        calls = {u * 2 for u in offsets
                 if same_python and bc[2 * u] < len(dis.opname) and _is_call(dis.opname[bc[2 * u]])}
        shares = {}  # block start -> {offset: cycles per execution}
        rows = []
        for u in offsets:
            off = u * 2
            cyc, blk = None, False
            if precise:
                v = units.get(off)
                if v and v[0]:
                    cyc = v[1] / v[0]
            elif same_python:  # (a block's split needs its calls: another version's opcodes are not known)
                cover = [(s0, v) for s0, v in blocks if s0 <= off <= v[2]]
                if cover:
                    start, (count, cycles, end, _, _) = cover[-1]
                    if start not in shares:
                        shares[start] = _block_shares(units, [x * 2 for x in offsets if start <= x * 2 <= end],
                                                      calls, cycles / count)
                    cyc = shares[start].get(off)
                    blk = cyc is not None and None in shares[start]
            op = bc[2 * u]
            name = dis.opname[op] if same_python and op < len(dis.opname) else ""  # (no other version's name)
            rows.append({"offset": off, "line": lines[u] if lines[u] >= 0 else None, "base": name,
                         "specialized": name, "arg": str(bc[2 * u + 1]) if same_python else "",
                         "cycles": cyc, "ns": cyc * ns if cyc is not None else None, "block_total": blk})
        return rows

    def _loop(self, code, f, lp):
        ns = self.ns_per_tick
        lo, hi = lp["dest"], lp["src"]
        it = lp["iterations"] or 1
        timed = lp.get("timed_iterations", lp["iterations"]) or 1  # (iterations an instruction probe slowed: untimed)
        # its back edge was de-instrumented: `threshold` back jumps recorded (each run's first too; the
        # threshold's own hit answers DISABLE unrecorded), or its function's start was (near-zero)
        sample = bool(f["deinstrumented"] or lp.get("jumps", lp["iterations"] + 2) >= self.threshold > 0)
        own = lp["self_cycles"] / timed * lp["iterations"]  # (its untimed iterations at the timed ones' mean)
        own_estimated = False
        if sample and f.get("looped_self") and lp["self_cycles"]:
            # the function's self time is measured in full (every call is counted and timed): the loop's share
            # of it in the calls where its iterations were recorded, extended to all of it
            est = min(1.0, own / f["looped_self"]) * f["self"]
            if est > own:
                own, own_estimated = est, True
        per_it = lp["self_cycles"] / timed
        return {
            "category": self._category(f["file"]),
            "function": f["name"],
            "file": f["file"],
            "line": None,  # the first line of its rows, once built
            "offset": lo,
            "end_offset": hi,
            "iterations": lp["iterations"],
            "cycles": lp["cycles"],
            "cycles_per_iteration": lp["cycles"] / timed,
            "self_cycles_per_iteration": lp["self_cycles"] / timed,
            "ns_per_iteration": lp["cycles"] / timed * ns,
            "instructions_per_iteration": lp["instructions"] / it,
            "deinstrumented": sample,
            # the figures are its first iterations' (see `sample` above)
            "sample": sample,
            # its own time (callees excluded), what loops are ranked by: measured, or (own_estimated) for a
            # loop whose iterations went on unrecorded, its share of its function's self time in its recorded
            # iterations applied to all of that self time, and its iterations at the recorded ones' mean cost
            "own_cycles": own,
            "own_ns": own * ns,
            "own_estimated": own_estimated,
            "estimated_iterations": round(own / per_it) if own_estimated and per_it else None,
            "timed_iterations": lp.get("timed_iterations", lp["iterations"]),
            "self_ns_per_iteration": lp["self_cycles"] / timed * ns,
            "split": None,  # once its rows are built: "instructions", "probe" or "even"
            "rows": None,
            "note": None,   # once its rows are built: why they have no instruction names, if they have none
        }

    # -- views --------------------------------------------------------------------------------
    def hot_loops(self, n=TOP_LOOPS, all_code=True, args=True):
        """The hottest loops by their own time (the loop's own instructions, callees excluded), the top n
        (all_code=False: the user's own code's first, then the others'); args=False leaves the rows'
        "arg" None where not decoded yet (the text decodes the rows it shows)."""
        ranked = sorted(self._loops, key=operator.itemgetter("own_cycles"), reverse=True)
        if not all_code:  # the user's own loops first, then the others' (a thin driver's are few)
            ranked = [lp for lp in ranked if lp["category"] == USER] + [lp for lp in ranked if lp["category"] != USER]
        out = ranked[:n]
        self._fill(out, args)
        return out

    def to_dict(self):
        return {
            "mode": self.mode,
            "threshold": self.threshold,
            "near_zero": self.near_zero,
            "exact_calls": not self.near_zero,
            "clock": self.clock,
            "ns_per_cycle": self.ns_per_tick,
            "overhead_cycles_per_event": self.overhead_cycles,
            "own_cost_cycles": self.own_cost,
            "events": self.events,
            "dropped": self.dropped,
            "wall_ns": self.wall_ns,
            "sampling": self.sampling,
            "functions": [dict(f, marks=self.marks(f)) for f in self.functions],
            "notation": self.notation(),
            "functions_total": self.functions_total,
            "unended": self.unended,
            "entry_points": self.entry_points,
            "loops": self.hot_loops(JSON_LOOPS, all_code=False),
            "tasks": self.tasks,
            "stalls": self.stalls,
            "stalls_more": self.stalls_more,
            "stall_ms": self.stall_ms,
        }

    def to_json(self, **kw):
        import json  # (here: the report is made at every stop, its JSON seldom; json costs ~1.5 ms to import)

        return json.dumps(self.to_dict(), **kw)

    def _tasks(self, data):
        """asyncio: the tasks' rows out of the functions into `tasks` (asyncio.c: one entry per task name,
        and one per coroutine for the tasks the program did not name, "Task (coroutine)"), and the loop
        stalls."""
        rows = [self._row(x) for x in self._light if x["category"] == TASKS]
        if rows:
            self._light = [x for x in self._light if x["category"] != TASKS]
            self.functions_total -= len(rows)
        raw = {f["id"]: f for f in data["functions"] if f["file"] == TASK_FILE}
        self._task_names = {i: f["name"] for i, f in raw.items()}
        self.tasks = []
        for f in rows:
            r = raw.get(f["id"], {})
            ended = {k: r.get(k, 0) for k in ("returned", "raised", "cancelled")}
            one = r.get("tasks", 0) == 1
            life = r.get("last_ns", 0) - r.get("first_ns", 0) if one else None
            self.tasks.append({"name": f["name"], "coroutine": r.get("coroutine", "?"), "tasks": r.get("tasks", 0),
                               "steps": f["calls"], "running_ns": f["total_ns"],
                               "mean_step_ns": f["total_ns"] / f["calls"] if f["calls"] else 0.0,
                               "slowest_step_ns": f["max_ns"],
                               # one task: from its first step's begin to its last step's end, and the part of it
                               # it was not running (awaiting); several: their steps' span
                               "first_ns": r.get("first_ns"), "last_ns": r.get("last_ns"),
                               "life_ns": life, "waiting_ns": max(0.0, life - f["total_ns"]) if one else None,
                               "ended": ended, "not_ended": max(0, r.get("tasks", 0) - sum(ended.values()))})
        self.tasks.sort(key=lambda g: -g["running_ns"])
        ns = self.ns_per_tick
        self.stalls = []
        for s in data.get("stalls") or ():
            stack = [{"name": q, "file": fl, "line": ln} for q, fl, ln in s["stack"]]
            if s["task"] == 0xFFFFFFFF:  # a loop callback, not a task's step: from the callback up
                while stack and stack[0]["name"] in _CALLBACK_RUNNERS:
                    del stack[0]
            self.stalls.append({"task": CALLBACK if s["task"] == 0xFFFFFFFF else self._task_names.get(s["task"], "?"),
                                "at_ns": s["begin_ns"], "held_ns": s["ticks"] * ns, "stack": stack})
        self.stalls_more = data.get("stalls_more", 0)
        self.stall_ms = data.get("stall_ms", STALL_MS)

    # -- the text report ------------------------------------------------------------------------
    def marks(self, f):
        """{"calls"|"self"|"total": "measured" | "estimated" | "lower_bound"} of a function row: estimated
        from sampling windows (~), or a lower bound (>): near-zero mode counted and timed its first calls
        only and no window saw the rest."""
        est = f.get("estimated_fields", ())
        out = {}
        for k in ("calls", "self", "total"):
            out[k] = "estimated" if k in est else "lower_bound" if f.get("sample") else "measured"
        return out

    def notation(self, functions=None, loops=None):
        """The marks the figures carry (of the given rows; default: all of them), each explained once
        ({mark: meaning})."""
        used = {}
        sw = self.sampling
        for f in self.functions if functions is None else functions:
            for m in self.marks(f).values():
                used[m] = True
        out = {}
        if used.get("estimated"):
            rd = sw.get("run_delay") or {}
            scaled = (f"; calls scaled by {rd['calls_factor']:.2f} for the CPU waited for outside windows "
                      f"({rd['outside']:.0%}) and inside ({rd['inside']:.0%})"
                      if rd and abs(rd.get("calls_factor", 1) - 1) >= 0.05 else "")
            out["~"] = (f"estimated, with the calls after a {'call site' if not self.near_zero else 'function'}'s "
                        f"de-instrumentation ({sw.get('windows', 0)} sampling window"
                        f"{'s' if sw.get('windows', 0) != 1 else ''}, {_fmt_ns(sw.get('window_ns', 0))}{scaled})")
        if used.get("lower_bound"):
            out[">"] = ("at least: counted until de-instrumented; no sampling window saw the rest")
        loops = self._loops if loops is None else loops
        if any(lp["own_estimated"] for lp in loops):
            what = "a loop's own time: from its function's measured self time (see Hot loop)"
            out["~"] = f"{out['~']}; {what}" if "~" in out else f"estimated: {what}"
        if any(lp["sample"] and not lp["own_estimated"] for lp in loops):
            out[">"] = (f"{out['>']}; " if ">" in out else "at least: ") + "a loop's own time in its recorded iterations"
        if any(lp["sample"] for lp in loops):
            out["(first)"] = "a loop's first iterations only (its jumps were then de-instrumented)"
        return out

    def _cells(self, f):
        m = self.marks(f)
        sign = {"measured": "", "estimated": "~", "lower_bound": ">"}
        return (f"{sign[m['calls']]}{f['calls']:,}", sign[m["self"]] + _fmt_ns(f["self_ns"]),
                sign[m["total"]] + _fmt_ns(f["total_ns"]))

    def _table(self, rows, width, total_self, where):
        """Function rows: calls, self, share of all self time, total, mean, then the name and where it lives
        (shortened by whole path components to fit `width`).  Narrower than a row: without the mean column,
        then the name on a line of its own; nothing is cut inside a name."""
        cells = []
        for f in rows:
            calls, self_s, total = self._cells(f)
            mean = _fmt_ns(f["mean_ns"]) if f["segments"] else "-"  # (only calls without an end seen: no mean)
            cells.append((calls, self_s, _pct(f["self_ns"], total_self), total, mean, *where(f)))
        with_mean = width is None or all(len(c[5]) + 57 <= width for c in cells)

        def head(c):
            return (f"{c[0]:>10} {c[1]:>9} {c[2]:>6} {c[3]:>9}" + (f" {c[4]:>9}" if with_mean else "") + "  ")

        out = [head(("calls", "self", "self%", "total", "mean")) + "function"]
        for c in cells:
            h, name, loc = head(c), c[5], c[6]
            if width is not None and len(h) + len(name) > width:
                out.append(h.rstrip())
                h = " " * 4
            line = h + name
            if loc:
                room = None if width is None else width - len(line) - 2
                loc = loc if room is None else _short(loc, room)
                if room is None or len(loc) <= room:
                    line += "  " + loc
            out.append(line)
        return out

    def _where_user(self, f):
        return f["name"], f"{short_path(f['file'])}:{f['line']}"

    def _where_elsewhere(self, f):
        if f["category"] == C_FUNCTIONS:
            return f["name"], "[C]"
        if f["category"] == GENERATED:
            n = f.get("grouped", 1)
            return f["name"], f"[generated: {f['file']}" + (f", {n:,} functions]" if n > 1 else "]")
        return f["name"], f"{short_path(f['file'])}:{f['line']}"

    def format(self, width=None, top=TOP_FUNCTIONS, sort="self", all_code=False, loops=TOP_LOOPS):
        """The report as text: a first screen (the header, where the time goes by kind of code and package,
        your code's functions, the hottest functions elsewhere, the hot loops by their own time; at most
        FIRST_SCREEN lines with the default rows), then notes on some rows' self time and each hot loop's
        instructions.  width: the column to fit prose and rows in (None: no limit; nothing is ever cut
        inside a word); top: function rows per table; sort: self, total, calls, mean or name; all_code: one
        table of every function instead of your code and the hottest elsewhere; loops: how many hot loops
        to show."""
        cut = 0
        while True:
            lines, screen = self._format(width, top, sort, all_code, loops, cut)
            if screen <= FIRST_SCREEN or top != TOP_FUNCTIONS or all_code or cut >= 12:
                return "\n".join(lines)
            cut += screen - FIRST_SCREEN  # fewer rows in the longer table (wrapped lines at a narrow width)

    def _format(self, width, top, sort, all_code, loops, cut):
        if sort not in SORT_KEYS:
            raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)}, not {sort!r}")
        ns = self.ns_per_tick
        out = []

        def prose(text, indent=0):
            out.extend(_fit(" " * indent + text, width, indent))

        deinst = self.deinstrumented_total
        exact = (f"near-zero: {deinst:,} function{'s' if deinst != 1 else ''} de-instrumented after the threshold"
                 if self.near_zero else "every Python call counted and timed")
        prose(f"ocular report - {self.mode}{', near-zero' if self.near_zero else ''}, threshold {self.threshold}; "
              f"{exact}")
        facts = []
        if self.wall_ns is not None:
            facts.append(f"traced {_fmt_ns(self.wall_ns)}")
        if self.events is not None:
            facts.append(f"{self.events:,} events ({self.dropped:,} dropped)")
        facts.append(f"{self.clock} clock {ns:.4f} ns/cycle")
        prose(", ".join(facts))
        oc = self.own_cost
        if oc:  # (measured at start: owncost.c)
            prose(f"own cost subtracted per event (cycles): call {oc['enter']}+{oc['leave']}, "
                  f"C call {oc['ccall']}+{oc['creturn']}, jump {oc['jump']}")
        else:
            prose(f"own cost subtracted: {self.overhead_cycles} cycles/event (the smallest gap seen)")
        legend_at = len(out)  # the marks the rows shown carry, explained once (filled in at the end)
        shown = []
        sw = self.sampling
        if sw.get("skipped") and not sw.get("windows"):
            prose(f"sampling: no window opened ({sw['skipped']} skipped: another sys.monitoring tool, "
                  f"{sw.get('other_tool') or '?'}, was registered)")
        if self.incomplete:
            prose("warning: statistics are incomplete (out of memory in the renderer)")
        trunc = sum(u["calls"] for u in self.unended)
        if trunc:
            most = ", ".join(f"{u['name']} {u['calls']:,}" for u in self.unended[:3])
            prose(f"{trunc:,} call{'s' if trunc != 1 else ''} had no end seen (tracing stopped inside, or the return "
                  f"was no longer reported): not in the rows' calls, but in their times, up to the thread's last "
                  f"event before the caller went on (or the stop), where the trace ends them too "
                  f"({most}{', ...' if len(self.unended) > 3 else ''})")
        light = self._light  # (full rows are built for the rows shown: self._row)
        if self.functions_total - self._rowless > len(light):
            prose(f"({self.functions_total:,} functions ran; the report keeps the {len(light):,} with the "
                  "most self time)")
        total_self = sum(f["self_ns"] for f in light)
        key = SORT_KEYS[sort]
        rows = light if key == "self_cycles" else sorted(light, key=operator.itemgetter(key), reverse=key != "name")
        full = self._row

        # where the time goes: by kind of code, the biggest packages named
        out.append("")
        out.append("Where the time goes (self time)")
        kinds = {}
        for f in light:
            kinds.setdefault(f["category"], []).append(f)
        packages = {}  # file -> package (functions share files)
        for cat, fs in sorted(kinds.items(), key=lambda kv: -sum(f["self_ns"] for f in kv[1])):
            t = sum(f["self_ns"] for f in fs)
            if cat in ("site-packages", "standard library", GENERATED, C_FUNCTIONS):
                by = {}
                for f in fs:
                    if cat == C_FUNCTIONS:
                        k = c_owner(f["name"])
                    elif cat == GENERATED:
                        k = f["file"]
                    else:
                        k = packages.get(f["file"])
                        if k is None:
                            k = packages[f["file"]] = package(f["file"])
                    by[k] = by.get(k, 0) + f["self_ns"]
                big = [(k, v) for k, v in sorted(by.items(), key=lambda kv: -kv[1])[:3] if v > 0]
            else:
                big = []
            n = len(fs)
            line = f"{_fmt_ns(t):>10} {_pct(t, total_self):>6}  {cat} ({n:,} function{'s' if n != 1 else ''})"
            sep = ": "
            for k, v in big:  # the biggest packages, as many as fit on the line
                part = f"{sep}{k} {_fmt_ns(v)}"
                if width is not None and len(line) + len(part) > width:
                    break
                line, sep = line + part, ", "
            out.append(line)

        entries = []
        if all_code:
            out.append("")
            out.append(f"Functions (by {sort}{' time' if sort in ('self', 'total') else ''})")
            noted = [full(x) for x in rows[:top]]
            shown += noted
            out.extend(self._table(noted, width, total_self,
                                   lambda f: self._where_user(f) if f["category"] == USER else self._where_elsewhere(f)))
            if len(rows) > top:
                out.append(f"{'':>10} ... {len(rows) - top:,} more (--top N shows more)")
        else:
            mine = [f for f in rows if f["category"] == USER]
            others = _group_generated([f for f in rows if f["category"] != USER], key, full)
            noted = []
            mine_self = sum(f["self_ns"] for f in mine)
            thin = total_self > 0 and mine_self < total_self / 2  # the user's code mostly drives others'
            entries = [e for e in self.entry_points if e["called_from"]][:ENTRY_ROWS] if thin else []
            n_mine = min(top, 3 if entries else 5) if thin else max(min(top, 3), top - cut)
            n_other = max(min(top, 3), min(top, 12) - cut) if thin else min(top, 5)
            out.append("")
            out.append(f"Your code (by {sort}{' time' if sort in ('self', 'total') else ''})")
            if mine:
                noted = [full(x) for x in mine[:n_mine]]
                shown += noted
                out.extend(self._table(noted, width, total_self, self._where_user))
                if len(mine) > n_mine:
                    out.append(f"{'':>10} ... {len(mine) - n_mine:,} more (--top N shows more)")
            else:
                out.append(f"{'':>10} (no function of your own code was recorded)")
            if others:
                out.append("")
                out.append(f"Hottest elsewhere: libraries, standard library, C functions (by {sort}"
                           f"{' time' if sort in ('self', 'total') else ''})")
                top_others = [full(x) for x in others[:n_other]]
                shown += top_others
                out.extend(self._table(top_others, width, total_self, self._where_elsewhere))
                if len(others) > n_other:
                    out.append(f"{'':>10} ... {len(others) - n_other:,} more (--all ranks every function)")
                noted = noted + top_others
        if self.tasks:
            self._tasks_text(out, width, top)
        hot = self.hot_loops(loops, all_code=all_code, args=False) if loops else []
        out.append("")
        if not hot:
            out.append("Hot loops: none recorded")
        else:
            out.append("Hot loops (by their own time: the loop's instructions, callees excluded)")
            out.append(f"{'own':>10} {'iterations':>12} {'per iter':>9}  loop")
            for lp in hot:
                mark = "~" if lp["own_estimated"] else ">" if lp["sample"] else ""
                it = (f"~{lp['estimated_iterations']:,}" if lp["own_estimated"]
                      else f"{lp['iterations']:,}" + (" (first)" if lp["sample"] else ""))
                line = (f"{mark + _fmt_ns(lp['own_ns']):>10} {it:>12} "
                        f"{_fmt_ns(lp['self_cycles_per_iteration'] * ns):>9}  {lp['function']}")
                loc = f"{short_path(lp['file'])}:{lp['line']}"
                room = None if width is None else width - len(line) - 2
                loc = loc if room is None else _short(loc, room)
                if room is None or len(loc) <= room:
                    line += "  " + loc
                out.append(line)
        screen = len(out)
        if entries:  # a test runner's tests, a server's handlers (after the first screen's tables)
            out.append("")
            out.append("Entry points into your code, called from elsewhere (by total time)")
            out.append(f"{'calls':>10} {'total':>9} {'mean':>9} {'max':>9}  function")
            for e in entries:
                line = (f"{e['calls']:>10,} {_fmt_ns(e['total_ns']):>9} {_fmt_ns(e['mean_ns']):>9} "
                        f"{_fmt_ns(e['max_ns']):>9}  {e['name']}")
                room = None if width is None else width - len(line) - 2
                for loc in (f"{short_path(e['file'])}:{e['line']}, called from {e['called_from'][0]}",
                            f"{short_path(e['file'])}:{e['line']}"):
                    if room is None or len(loc) <= room:
                        line += "  " + loc
                        break
                out.append(line)
        notes = []
        self._notes(notes, noted, width)
        if notes:  # (after the first screen: what some rows' self time holds)
            out.append("")
            out.extend(notes)
        for lp in hot:
            self._loop_text(out, lp, width)
        if self.mode == "precise" and self.threshold == 0 and hot:
            out.append("")
            prose("note: precise mode with threshold 0 keeps every instruction instrumented, and CPython does not "
                  "specialize instrumented instructions; use a threshold to see the specialized forms")
        if self.mode != "precise" and hot:
            out.append("")
            prose("cyc/exec(blk): cycles of each basic block per execution, split over its instructions in proportion "
                  "to an instruction-level probe after the loop's threshold (evenly where none ran)")
        legend = []
        for mark, meaning in self.notation(shown, hot).items():
            legend.extend(_fit(f"{mark} = {meaning}", width, 0))
        out[legend_at:legend_at] = legend
        return out, screen + len(legend)

    def _notes(self, out, shown, width):
        """The ^ notes under a table: what a row's self time holds that is not its own."""
        shares = [f for f in shown if f["untraced_callees"] or f.get("estimated_callees")]
        for f in shares[:4]:
            est = f.get("estimated_callees") or []
            if est:
                names = ", ".join(f"{c['name']} (~{c['calls']:,} calls)" for c in est[:3])
                more = ", ..." if len(est) > 3 else ""
                moved = f['measured']['self_ns'] - f['self_ns']
                if moved >= 0:
                    text = (f"^ {f['name']}'s self time excludes ~{_fmt_ns(moved)} estimated as de-instrumented "
                            f"calls to {names}{more}")
                else:  # it was de-instrumented itself: its own unmeasured calls add more than its callees take
                    text = (f"^ {f['name']}'s self time adds ~{_fmt_ns(-moved)} estimated for its own calls after "
                            f"it was de-instrumented, net of its calls to {names}{more}")
            else:
                names = ", ".join(f["untraced_callees"][:4]) + (", ..." if len(f["untraced_callees"]) > 4 else "")
                text = (f"^ {f['name']}'s self time also holds the unmeasured calls it made to {names} after "
                        f"{'that was' if len(f['untraced_callees']) == 1 else 'those were'} de-instrumented "
                        f"({self._why_not_estimated()})")
            out.extend(_fit(" " * 8 + text, width, 8))

    def _tasks_text(self, out, width, top):
        out.append("")
        out.append("asyncio tasks (by running time; a step: from the loop's resume of the task's coroutine to "
                   "its next await)")
        out.append(f"{'tasks':>7} {'steps':>9} {'running':>9} {'waiting':>9} {'mean':>9} {'slowest':>9}  "
                   f"task (its coroutine): how it ended")
        n = max(5, min(top or 10, 10))
        for g in self.tasks[:n]:
            who = g["name"] if g["name"].startswith("Task (") else f"{g['name']} ({g['coroutine']})"
            out.extend(_fit(f"{g['tasks']:>7,} {g['steps']:>9,} {_fmt_ns(g['running_ns']):>9} "
                            f"{_fmt_ns(g['waiting_ns']) if g['waiting_ns'] is not None else '-':>9} "
                            f"{_fmt_ns(g['mean_step_ns']):>9} {_fmt_ns(g['slowest_step_ns']):>9}  {who}: "
                            f"{_ended_text(g)}", width, 60))
        if len(self.tasks) > n:
            out.append(f"{'':>10} ... {len(self.tasks) - n:,} more (--report-json lists them all)")
        if self.stalls:
            k = len(self.stalls) + self.stalls_more
            out.append("")
            out.append(f"Loop stalls: {k:,} step{'s' if k != 1 else ''} or callback{'s' if k != 1 else ''} held the "
                       f"event loop {self.stall_ms} ms or more "
                       f"(where each was at {self.stall_ms} ms)")
            out.append(f"{'at':>10} {'held':>9}  task: stack")
            for s in sorted(self.stalls, key=lambda s: -s["held_ns"])[:5]:
                frames = [fr for fr in s["stack"] if fr["file"] != TASK_FILE]
                stack = " > ".join(fr["name"] if fr["file"] == "~" else
                                   f"{fr['name']} ({short_path(fr['file']) if width else fr['file']}:{fr['line']})"
                                   for fr in frames) or "?"
                out.extend(_fit(f"{_fmt_ns(s['at_ns']):>10} {_fmt_ns(s['held_ns']):>9}  {s['task']}: {stack}",
                                width, 22))
            if k > 5:
                out.append(f"{'':>10} ... {k - 5:,} more (--report-json lists them)")

    def _loop_text(self, out, lp, width):
        cyc_label = "cyc/exec" if self.mode == "precise" else "cyc/exec(blk)"
        out.append("")
        it = (f"first {lp['iterations']:,} iterations (then de-instrumented)" if lp["sample"]
              else f"{lp['iterations']:,} iterations")
        if lp["own_estimated"]:
            it += (f", ~{_fmt_ns(lp['own_ns'])} of its own in all (~{lp['estimated_iterations']:,} iterations, "
                   f"from its function's measured self time)")
        where = lp["file"] if width is None else short_path(lp["file"])
        head = (f"Hot loop {lp['function']} at {where}:{lp['line']} - {it}, "
                f"{lp['cycles_per_iteration']:.0f} cycles ({_fmt_ns(lp['ns_per_iteration'])}) per iteration with its "
                f"callees, {lp['self_cycles_per_iteration']:.0f} of its own, "
                f"{lp['instructions_per_iteration']:.1f} instructions")
        out.extend(_fit(head, width, 0))
        if lp["note"]:
            out.extend(_fit(f"  note: {lp['note']}", width, 2))
        shown = lp["rows"]
        if len(shown) > LOOP_ROWS:  # a long loop: its hottest rows, in order
            cycles = [r["cycles"] or 0 for r in shown]
            hottest = sorted(range(len(shown)), key=cycles.__getitem__, reverse=True)
            keep = set(hottest[:LOOP_ROWS - 2]) | {0, len(shown) - 1}
            shown = [r if i in keep else None for i, r in enumerate(shown)]
        self._fill_args(lp, [r for r in shown if r])
        cells = []
        for r in shown:
            if r is None:
                cells.append(None)
                continue
            blk = "=blk" if r.get("block_total") else ""
            cells.append((r["offset"], r["line"] if r["line"] is not None else "",
                          r["base"] if r["base"] == r["specialized"] else f"{r['base']} -> {r['specialized']}",
                          r["specialized"], r["arg"],
                          f"{r['cycles']:.1f}{blk}" if r["cycles"] is not None else "-",
                          f"{r['ns']:.1f}" if r["ns"] is not None else "-"))
        real = [c for c in cells if c]
        # columns: offset, line, instruction, argument, cycles, ns; at a narrow width the argument column
        # goes first, then the base form of the instruction (the specialized one stays)
        title = "instruction (base -> specialized)"
        name_w = max([len(c[2]) for c in real] + [len(title)])
        arg_w = min(24, max([len(c[4]) for c in real] + [len("argument")]))
        cyc_w = max([len(c[5]) for c in real] + [len(cyc_label)])
        ns_w = max([len(c[6]) for c in real] + [len("ns")])
        fixed = 2 + 6 + 1 + 5 + 2 + 1 + cyc_w + 1 + ns_w
        use_base = True
        if width is not None and fixed + name_w + 1 + arg_w > width:
            arg_w = 0
            if fixed + name_w > width:
                use_base, title = False, "instruction (specialized)"
                name_w = max([len(c[3]) for c in real] + [len(title)])
        out.append(f"  {'offset':>6} {'line':>5}  {title:<{name_w}}" + (f" {'argument':<{arg_w}}" if arg_w else "")
                   + f" {cyc_label:>{cyc_w}} {'ns':>{ns_w}}")
        gap = 0
        timed = any(r["cycles"] for r in lp["rows"])  # (else the rows kept are the first ones)
        for c in cells:
            if c is None:
                gap += 1
                continue
            if gap:
                out.append(f"  {'...':>6} {'':>5}  ({gap} {'cooler' if timed else 'more'} "
                           f"instruction{'s' if gap != 1 else ''})")
                gap = 0
            arg = c[4]
            if len(arg) > arg_w:  # its first whole words that fit, then ".."
                words, arg = c[4].split(" "), ""
                for w in words:
                    if len(arg) + len(w) + (1 if arg else 0) + 2 > arg_w:
                        break
                    arg += (" " if arg else "") + w
                arg += ".."
            out.append(f"  {c[0]:>6} {c[1]:>5}  {(c[2] if use_base else c[3]):<{name_w}}"
                       + (f" {arg:<{arg_w}}" if arg_w else "") + f" {c[5]:>{cyc_w}} {c[6]:>{ns_w}}")

    def _why_not_estimated(self):
        sw = self.sampling
        if sw.get("skipped") and not sw.get("windows"):
            return f"not estimated: another sys.monitoring tool, {sw.get('other_tool') or '?'}, was registered"
        if sw.get("status") == "on" and not sw.get("windows"):
            return "not estimated: no sampling window ran; the program was too short"
        if sw.get("status") != "on":
            return "not estimated: sampling windows were off"
        return "not estimated: no sampling window saw those calls"

    def __str__(self):
        return self.format()
