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
(``sampling=False``, a program shorter than the first window, another sys.monitoring tool registered) the
caller's ``untraced_callees`` only names them, and the text says why nothing was estimated.

Units: *cycles* are ticks of the trace clock (TSC cycles on x86-64), *ns* converts them with the
calibrated rate.  Ocular's own cost per event (calibrated at the start of the session) is subtracted
from self times and from per-instruction/per-block cycles.
"""

import array
import bisect
import dis
import functools
import os
import re
import sys

__all__ = ["Report"]

TOP_FUNCTIONS = 15
TOP_LOOPS = 3
LOOP_ROWS = 16  # a longer loop is cut to its hottest rows
SORT_KEYS = {"self": "self_cycles", "total": "total_cycles", "calls": "calls", "mean": "mean_ns", "name": "name"}
USER = "your code"
FOLDED = ("standard library", "frozen importlib", "site-packages", "ocular")
KEEP_FUNCTIONS = 5000  # rows a Report keeps (by self time, and loops by cycles): bounded memory at stop


def _settle(codes):
    """Bring the given code objects' bytecode up to date with the (now empty) instrumentation.

    CPython removes instrumentation lazily, when a code object next runs; until then its adaptive
    bytecode still holds INSTRUMENTED_* opcodes.  set_local_events() instruments a code object
    immediately, so setting no local events under a temporary tool id settles it without running it.
    """
    from . import _mon as mon  # the real sys.monitoring, even if the program replaced the attribute

    tool = next((i for i in (5, 4, 3) if mon.get_tool(i) is None), None)  # never 0-2 (pdb, coverage, cProfile)
    if tool is None:
        return
    mon.use_tool_id(tool, "ocular-report")
    try:
        for code in codes:
            try:
                mon.set_local_events(tool, code, mon.events.PY_START)  # a change forces the update
                mon.set_local_events(tool, code, 0)
            except (ValueError, TypeError):
                pass
    finally:
        mon.free_tool_id(tool)


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


def _base_names(code):
    return {ins.offset: ins.opname for ins in dis.get_instructions(code, adaptive=False)}


_OCULAR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# the standard library's directory (sysconfig's stdlib and platstdlib are that one on every CPython here;
# sysconfig itself costs ~2.5 M instructions to import, a tenth of what a run on an empty script adds)
_STDLIB_DIRS = (os.path.join(getattr(sys, "_stdlib_dir", None) or os.path.dirname(os.__file__), ""),)
_STDLIB_RE = re.compile(r"[/\\]lib[/\\]python3\.\d+t?[/\\]")  # another machine's standard library


C_FUNCTIONS = "C functions"


def category(path):
    """Where a file belongs: "your code", "C functions" (file "~", as cProfile names them), "standard
    library", "frozen importlib", "site-packages" or "ocular" (by its path: the report ranks the user's own
    code, then the C functions, and folds the others into one line each)."""
    if path == "~":
        return C_FUNCTIONS
    if path.startswith("<frozen "):
        return "frozen importlib"
    if path.startswith(_OCULAR_DIR):
        return "ocular"
    if "site-packages" in path or "dist-packages" in path:
        return "site-packages"
    if path.startswith(_STDLIB_DIRS) or _STDLIB_RE.search(path):
        return "standard library"
    return USER


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
    if len(path) <= width:
        return path
    return "..." + path[-(width - 3):]


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
        # functions whose every call lacked a seen end have no row (no figure to show): they are still
        # counted, in the header (de-instrumented) and in the line about calls without an end
        self.unended = sorted(({"name": f["name"], "file": f["file"], "line": f["firstlineno"],
                                "calls": f["truncated"]} for f in data["functions"] if f.get("truncated")),
                              key=lambda u: -u["calls"])
        self.deinstrumented_total = sum(1 for f in data["functions"] if f.get("deinstrumented"))
        self._rowless = sum(1 for f in data["functions"] if not f["segments"] and f.get("truncated"))
        self.functions = []
        self._loops = []    # rows (the disassembly) are built only for the loops someone looks at
        self._pending = {}  # id(loop) -> (code, f, lp) while its rows are not built
        for f in data["functions"]:
            self._add_function(f)
        self.functions.sort(key=lambda r: r["self_cycles"], reverse=True)
        self._loops.sort(key=lambda r: r["cycles"], reverse=True)

    @property
    def loops(self):
        """Every loop seen, hottest (by cycles) first, each with its rows."""
        self._fill(self._loops)
        return self._loops

    def _fill(self, loops):
        todo = [lp for lp in loops if id(lp) in self._pending]
        if not todo:
            return
        codes = {id(self._pending[id(lp)][0]): self._pending[id(lp)][0] for lp in todo}
        codes.pop(id(None), None)
        _settle(list(codes.values()))  # adaptive bytecode without our instrumentation
        cache = {}
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
            if id(code) not in cache:
                cache[id(code)] = (_base_names(code), list(dis.get_instructions(code, adaptive=True)))
            lp["rows"] = self._rows(code, f, raw, *cache[id(code)])
            lp["line"] = next((r["line"] for r in lp["rows"] if r["line"]), code.co_firstlineno)

    # -- building -----------------------------------------------------------------------------
    def _add_function(self, f):
        code = f["code"]
        ns = self.ns_per_tick
        if f["segments"]:
            sample = f["deinstrumented"]
            est = f.get("estimate")
            calls, incl, self_c = f["calls"], f["incl"], f["self"]
            estimated = False
            est_calls = est_self = False
            callees = []
            if est:
                # sampling windows: the de-instrumented calls' share, estimated (attrib.c)
                calls = round(calls + est["calls"])
                incl = f["incl"] + est["incl"]
                self_c = max(0.0, f["self"] + est["self"] - est["removed"])
                est_calls = est["calls"] > 0 or est["incl"] > 0
                est_self = est_calls or est["removed"] > 0
                estimated = est_self
                callees = [{"name": c["name"], "calls": round(c["calls"]), "total_cycles": c["incl"],
                            "total_ns": c["incl"] * ns, "self_ns": c["self"] * ns}
                           for c in sorted(est["callees"], key=lambda c: -c["incl"])]
            self.functions.append({
                "category": category(f["file"]),
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
                "sample": sample,
                "truncated": f["truncated"],
            })
        for lp in f["loops"]:
            entry = self._loop(code, f, lp)
            self._loops.append(entry)
            self._pending[id(entry)] = (code, f, lp)

    def _rows(self, code, f, lp, base, all_instrs):
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
        calls = {i.offset for i in instrs if _is_call(base.get(i.offset, i.opname))}
        shares = {}  # adaptive: block start -> {offset: cycles per execution}
        k = 0  # adaptive: the first block (by start) that does not end before the current instruction
        for ins in instrs:
            cyc = None
            if precise:
                v = units.get(ins.offset)
                if v and v[0]:
                    cyc = v[1] / v[0]
            else:  # the block with the smallest start covering the instruction; one pass, not quadratic
                while k < len(blocks) and blocks[k][1][2] < ins.offset:
                    k += 1
                if k < len(blocks) and blocks[k][0] <= ins.offset:
                    start, (count, cycles, end, _, _) = blocks[k]
                    if start not in shares:
                        i0, i1 = bisect.bisect_left(offsets, start), bisect.bisect_right(offsets, end)
                        shares[start] = _block_shares(units, offsets[i0:i1], calls, cycles / count)
                    cyc = shares[start].get(ins.offset)
            line = ins.positions.lineno if ins.positions and ins.positions.lineno else None
            b = base.get(ins.offset, ins.opname)
            arg = _arg(ins)
            if b == "NOT_TAKEN" and not arg:  # 3.14+: a no-op that carries the BRANCH_LEFT event
                arg = "(fall-through of the jump above)"
            rows.append({
                "offset": ins.offset,
                "line": line,
                "base": b,
                "specialized": ins.opname,
                "arg": arg,
                "cycles": cyc,
                "ns": cyc * ns if cyc is not None else None,
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
        base = {i.offset: dis.opname[bc[i.offset]] for i in instrs}
        rows = self._rows(None, f, lp, base, instrs)
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
            cyc = None
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
            op = bc[2 * u]
            name = dis.opname[op] if same_python and op < len(dis.opname) else ""  # (no other version's name)
            rows.append({"offset": off, "line": lines[u] if lines[u] >= 0 else None, "base": name,
                         "specialized": name, "arg": str(bc[2 * u + 1]) if same_python else "",
                         "cycles": cyc, "ns": cyc * ns if cyc is not None else None})
        return rows

    def _loop(self, code, f, lp):
        ns = self.ns_per_tick
        lo, hi = lp["dest"], lp["src"]
        it = lp["iterations"] or 1
        timed = lp.get("timed_iterations", lp["iterations"]) or 1  # (iterations an instruction probe slowed: untimed)
        return {
            "category": category(f["file"]),
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
            "deinstrumented": f["deinstrumented"] or lp["iterations"] >= self.threshold > 0,
            "split": None,  # once its rows are built: "instructions", "probe" or "even"
            "rows": None,
            "note": None,   # once its rows are built: why they have no instruction names, if they have none
        }

    # -- views --------------------------------------------------------------------------------
    def hot_loops(self, n=TOP_LOOPS, all_code=True):
        """The hottest loops: the top n by cycles and the top n by iterations (all_code=False: of the
        user's own code only, unless it has none)."""
        pool = self._loops
        if not all_code:
            pool = [lp for lp in self._loops if lp["category"] == USER] or pool
        by_cycles = sorted(pool, key=lambda r: r["cycles"], reverse=True)[:n]
        by_hits = sorted(pool, key=lambda r: r["iterations"], reverse=True)[:n]
        out = list(by_cycles)
        for lp in by_hits:
            if len(out) >= 2 * n:
                break
            if not any(lp is o for o in out):
                out.append(lp)
        self._fill(out)
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
            "functions": self.functions,
            "functions_total": self.functions_total,
            "unended": self.unended,
            "loops": self.hot_loops(),
        }

    def to_json(self, **kw):
        import json  # (here: the report is made at every stop, its JSON seldom; json costs ~1.5 ms to import)

        return json.dumps(self.to_dict(), **kw)

    def format(self, width=120, top=TOP_FUNCTIONS, sort="self", all_code=False, loops=TOP_LOOPS):
        """The report as text.  top: function rows; sort: self, total, calls, mean or name; all_code:
        rank every function and loop (by default the standard library, frozen importlib, site-packages
        and Ocular are folded into one line each); loops: how many hot loops to show."""
        if sort not in SORT_KEYS:
            raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)}, not {sort!r}")
        ns = self.ns_per_tick
        cyc_label = "cyc/exec" if self.mode == "precise" else "cyc/exec(blk)"
        out = []
        out.append(f"ocular report - {self.mode} mode{', near-zero' if self.near_zero else ''}, threshold "
                   f"{self.threshold}, clock {self.clock} ({ns:.4f} ns/cycle)")
        oc = self.own_cost
        if oc:
            out.append(f"own cost subtracted per event, measured at start: call {oc['enter']}+{oc['leave']}, "
                       f"C call {oc['ccall']}+{oc['creturn']}, jump {oc['jump']} cycles")
        else:
            out.append(f"own cost subtracted: {self.overhead_cycles} cycles/event (the smallest gap seen)")
        deinst = self.deinstrumented_total
        facts = []
        if self.wall_ns is not None:
            facts.append(f"traced for {_fmt_ns(self.wall_ns)}")
        if self.events is not None:
            facts.append(f"{self.events:,} events")
        facts.append(f"{self.dropped:,} dropped")
        if self.near_zero:
            facts.append(f"{deinst} function{'s' if deinst != 1 else ''} de-instrumented after the threshold "
                         "(* = figures are a sample of the first calls)" if deinst else "no function de-instrumented")
        else:
            facts.append("every function call counted and timed")
        out.append(", ".join(facts))
        sw = self.sampling
        if sw.get("windows"):
            out.append(f"sampling: {sw['windows']} window{'s' if sw['windows'] != 1 else ''} "
                       f"({_fmt_ns(sw['window_ns'])}) measured de-instrumented "
                       f"{'functions' if self.near_zero else 'C call sites'}; "
                       "~ = estimated from them (calls and time after the threshold)")
        elif sw.get("skipped"):
            out.append(f"sampling: no window opened ({sw['skipped']} skipped: another sys.monitoring tool, "
                       f"{sw.get('other_tool') or '?'}, was registered)")
        if self.incomplete:
            out.append("warning: statistics are incomplete (out of memory in the renderer)")
        trunc = sum(u["calls"] for u in self.unended)
        if trunc:
            out.append(f"{trunc:,} call{'s' if trunc != 1 else ''} not counted below: no end seen (tracing stopped "
                       f"inside, or the return was no longer"[:width])
            out.append("  reported after de-instrumentation); the trace ends them at the caller's next event or at "
                       "the stop"[:width])
            most = ", ".join(f"{u['name']} ({_short(u['file'], 30)}:{u['line']}) {u['calls']:,}"
                             for u in self.unended[:3])
            out.append(f"  most: {most}{', ...' if len(self.unended) > 3 else ''}"[:width])
        if self.functions_total - self._rowless > len(self.functions):
            out.append(f"({self.functions_total} functions ran; the report keeps the {len(self.functions)} with the "
                       "most self time)")
        out.append("")
        key = SORT_KEYS[sort]
        rows = sorted(self.functions, key=lambda r: r[key], reverse=key != "name")
        mine = rows if all_code else [f for f in rows if f["category"] == USER]
        out.append(("Functions" if all_code else "Your code") + f" (by {sort}{' time' if sort in ('self', 'total') else ''})")
        out.append(f"{'calls':>9} {'self':>9} {'total':>9} {'mean':>9} {'stddev':>9}  function")
        for f in mine[:top]:
            out.append(self._row(f, f"{f['name']}  ({_short(f['file'], 40)}:{f['line']})")[:width])
        shares = [f for f in mine[:top] if f["untraced_callees"] or f.get("estimated_callees")]
        for f in shares[:5]:
            est = f.get("estimated_callees") or []
            if est:
                names = ", ".join(f"{c['name']} (~{c['calls']:,} calls)" for c in est[:3])
                more = ", ..." if len(est) > 3 else ""
                moved = f['measured']['self_ns'] - f['self_ns']
                if moved >= 0:
                    out.append(f"        ^ {f['name']}'s self time excludes ~{_fmt_ns(moved)}"
                               f" estimated as de-instrumented calls to {names}{more}"[:width])
                else:  # it was de-instrumented itself: its own unmeasured calls add more than its callees take
                    out.append(f"        ^ {f['name']}'s self time adds ~{_fmt_ns(-moved)} estimated for its own calls "
                               f"after it was de-instrumented, net of its calls to {names}{more}"[:width])
                continue
            names = ", ".join(f["untraced_callees"][:4]) + (", ..." if len(f["untraced_callees"]) > 4 else "")
            out.append(f"        ^ {f['name']}'s self time also holds the unmeasured calls it made to {names} "
                       f"after {'that was' if len(f['untraced_callees']) == 1 else 'those were'} de-instrumented"[:width])
            out.append(f"          ({self._why_not_estimated()})"[:width])
        if not mine:
            out.append("        (no function of your own code was recorded)")
        elif len(mine) > top:
            out.append(f"        ... {len(mine) - top} more (--top N shows more)")
        if not all_code:
            cfuncs = [f for f in rows if f["category"] == C_FUNCTIONS]
            for f in cfuncs[:max(top // 3, 5)]:
                out.append(self._row(f, f"{f['name']}  [C function]")[:width])
            if len(cfuncs) > max(top // 3, 5):
                out.append(f"        ... {len(cfuncs) - max(top // 3, 5)} more C functions (--all shows them)")
            for cat in FOLDED:
                fs = [f for f in rows if f["category"] == cat]
                if fs:
                    calls = sum(f["calls"] for f in fs)
                    self_ns = sum(f["self_ns"] for f in fs)
                    out.append(f"{calls:>9} {_fmt_ns(self_ns):>9} {'':>9} {'':>9} {'':>9}  "
                               f"[{cat}: {len(fs)} function{'s' if len(fs) != 1 else ''}, folded; --all shows them]"[:width])
        hot = self.hot_loops(loops, all_code=all_code) if loops else []
        out.append("")
        if not hot:
            out.append("Hot loops: none recorded")
        for lp in hot:
            out.append("")
            head = (f"Hot loop {lp['function']} at {_short(lp['file'], 50)}:{lp['line']} - "
                    f"{lp['iterations']} iterations{' (sample)' if lp['deinstrumented'] else ''}, "
                    f"{lp['cycles_per_iteration']:.0f} cycles ({_fmt_ns(lp['ns_per_iteration'])}) per iteration, "
                    f"{lp['instructions_per_iteration']:.1f} instructions")
            out.append(head[:width])
            if lp["note"]:
                out.append(f"  note: {lp['note']}")
            out.append(f"  {'offset':>6} {'line':>5}  {'instruction (base -> specialized)':<52} "
                       f"{'argument':<24} {cyc_label:>13} {'ns':>7}")
            shown = lp["rows"]
            if len(shown) > LOOP_ROWS:  # a long loop: its hottest rows, in order
                hottest = sorted(range(len(shown)), key=lambda i: shown[i]["cycles"] or 0, reverse=True)
                keep = set(hottest[:LOOP_ROWS - 2]) | {0, len(shown) - 1}
                shown = [r if i in keep else None for i, r in enumerate(shown)]
            gap = 0
            timed = any(r["cycles"] for r in lp["rows"])  # (else the rows kept are the first ones)
            for r in shown:
                if r is None:
                    gap += 1
                    continue
                if gap:
                    out.append(f"  {'...':>6} {'':>5}  ({gap} {'cooler' if timed else 'more'} "
                               f"instruction{'s' if gap != 1 else ''})")
                    gap = 0
                name = r["base"] if r["base"] == r["specialized"] else f"{r['base']} -> {r['specialized']}"
                cyc = f"{r['cycles']:.1f}" if r["cycles"] is not None else "-"
                nsv = f"{r['ns']:.1f}" if r["ns"] is not None else "-"
                line = r["line"] if r["line"] is not None else ""
                out.append(f"  {r['offset']:>6} {line:>5}  {name[:52]:<52} {r['arg'][:24]:<24} {cyc:>13} {nsv:>7}"[:width])
        if self.mode == "precise" and self.threshold == 0 and hot:
            out.append("")
            out.append("note: precise mode with threshold 0 keeps every instruction instrumented, and CPython does")
            out.append("      not specialize instrumented instructions; use a threshold to see the specialized forms")
        if self.mode != "precise" and hot:
            out.append("")
            out.append("cyc/exec(blk): cycles of each basic block per execution, split over its instructions in proportion")
            out.append("               to an instruction-level probe after the loop's threshold (evenly where none ran)")
        return "\n".join(out)

    @staticmethod
    def _row(f, where):
        """One function's line: * = a sample of the first calls, ~ = estimated from sampling windows."""
        star = "*" if f["sample"] else " "
        est = f.get("estimated_fields", ())
        t = "~" if "calls" in est else ""
        s = "~" if "self" in est else ""
        calls = f"{t}{f['calls']}"
        return (f"{calls:>8}{star} {s + _fmt_ns(f['self_ns']):>9} {t + _fmt_ns(f['total_ns']):>9} "
                f"{_fmt_ns(f['mean_ns']):>9} {_fmt_ns(f['stddev_ns']):>9}  {where}")

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
