"""The hot loops' specialized instructions, kept in a recording for reports rendered in another process.

A report rendered in the process that traced reads each loop's specialized instructions (``FOR_ITER ->
FOR_ITER_RANGE``) and arguments (``i``, ``to 164``) from the live code objects.  A recording kept for
later (``-o run.ocular``) is rendered by ``convert``, usually in another process, where those objects do
not exist; so at stop the session appends one ADAPTIVE block (type 10, docs/recording.md) after END:
for each live code object with a loop, its adaptive opcodes (one byte per code unit, our
instrumentation gone) and what its arguments name (names, variable names by argument, short reprs of
its constants).  ``convert`` rebuilds the instructions from them with ``dis`` on a stand-in code object
holding the recorded base bytecode, when the recording was made by a Python with this one's bytecode.
"""

import dis
import json
import os
import struct
import sys

from . import _ocular

BLOCK_ADAPTIVE = 10
MAX_CODES = 5000  # code objects with loops written at most (the first registered first)
MAX_REPR = 120  # characters of a constant's repr kept

_JUMP_BACKWARD = frozenset(op for name, op in dis.opmap.items() if name.startswith("JUMP_BACKWARD"))


def _has_loop(co):
    return not _JUMP_BACKWARD.isdisjoint(co.co_code[::2])


def _varnames(co):
    """The name each variable argument (LOAD_FAST, LOAD_DEREF, ...) refers to, by argument."""
    out = []
    get = getattr(co, "_varname_from_oparg", None)
    if get is None:
        return list(co.co_varnames + co.co_cellvars + co.co_freevars)
    while len(out) < 65536:
        try:
            out.append(get(len(out)))
        except (IndexError, ValueError):
            break
    return out


def _short_repr(value):
    try:
        r = repr(value)
    except Exception:
        r = f"<{type(value).__name__}>"
    return r if len(r) <= MAX_REPR else r[:MAX_REPR - 3] + "..."


def block(codes):
    """The ADAPTIVE block (header, payload, padding) for [(code id, code object with a loop)], or None if
    none can be written.  The code objects' adaptive bytecode must be settled (no INSTRUMENTED_* left)."""
    entries = {}
    for cid, co in codes:
        try:
            entries[str(cid)] = dict(
                adaptive=co._co_code_adaptive[::2].hex(), names=list(co.co_names), varnames=_varnames(co),
                consts=[_short_repr(c) for c in co.co_consts])
        except Exception:  # (an odd code object: its loops show the recorded base opcodes)
            continue
    if not entries:
        return None
    payload = json.dumps(dict(python=sys.hexversion, codes=entries), separators=(",", ":")).encode()
    return struct.pack("<II", BLOCK_ADAPTIVE, len(payload)) + payload + b"\0" * (-len(payload) % 8)


def append(rec):
    """At stop, for a recording kept for later: append the ADAPTIVE block of the session's live code
    objects with loops.  Never fails the stop: a failure only costs the report's specialized names."""
    try:
        from ._report import _settle

        codes = [(cid, co) for cid, co in _ocular._live_codes() if _has_loop(co)][:MAX_CODES]
        if not codes:
            return
        _settle([co for _, co in codes])  # (adaptive bytecode without our instrumentation)
        data = block(codes)
        if data:
            with open(rec, "ab") as f:
                f.write(data)
    except Exception:
        pass


def parse(payload):
    """{code id: entry} of an ADAPTIVE block's payload written by this Python's bytecode version, else {}."""
    if not payload:
        return {}
    try:
        data = json.loads(payload)
        from ._report import _same_bytecode

        if not _same_bytecode(int(data["python"]), sys.hexversion):
            return {}
        return {int(k): v for k, v in data["codes"].items()}
    except (ValueError, KeyError, TypeError):
        return {}


class _Repr:
    """A constant as dis shows it: its recorded repr."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def _valid(bc, cache):
    """The recorded bytecode is whole instructions of known opcodes (a damaged recording's is not given
    to the code object constructor)."""
    n = len(bc) // 2
    u = 0
    while u < n:
        op = bc[2 * u]
        if op >= len(dis.opname) or dis.opname[op].startswith("<"):
            return False
        u += 1 + (cache[op] & 0x7F)
    return u == n


def instructions(bc, entry, cache):
    """The instructions of recorded base bytecode `bc` with their arguments as dis shows them, each named
    by its specialized form (dis.Instruction's opname; base opcodes and offsets as recorded), or None."""
    try:
        spec = bytes.fromhex(entry["adaptive"])
        if len(spec) * 2 != len(bc) or not _valid(bc, cache):
            return None
        varnames = tuple(str(v) for v in entry["varnames"])
        stand_in = compile("pass", "<ocular>", "exec").replace(
            co_code=bytes(bc), co_consts=tuple(_Repr(str(c)) for c in entry["consts"]),
            co_names=tuple(str(n) for n in entry["names"]), co_varnames=varnames, co_nlocals=len(varnames),
            co_cellvars=(), co_freevars=(), co_argcount=0, co_posonlyargcount=0, co_kwonlyargcount=0,
            co_stacksize=4096, co_linetable=b"", co_exceptiontable=b"")
        names = getattr(dis, "_all_opname", dis.opname)
        out = []
        for ins in dis.get_instructions(stand_in):
            op = spec[ins.offset // 2]
            name = names[op] if op < len(names) else ""
            if not name or name.startswith(("INSTRUMENTED_", "<")) or name == "ENTER_EXECUTOR":
                name = ins.opname
            out.append(ins._replace(opname=name))
        return out
    except Exception:
        return None


def block_offset(path):
    """(for tests) the offset of the ADAPTIVE block in a recording, or None."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while pos + 8 <= size:
            f.seek(pos)
            typ, length = struct.unpack("<II", f.read(8))
            if typ == BLOCK_ADAPTIVE:
                return pos
            pos += 8 + length + (-length % 8)
    return None
