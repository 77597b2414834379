"""Recordings built byte by byte, for tests that feed the renderer exactly what they mean to (the layout of
docs/recording.md and src/ocular/_ext/recording.h): each function returns one block's bytes -- an 8-byte
header {u32 type, u32 length}, the payload, zeros up to the next multiple of 8 -- and a recording is the
blocks joined, a HEADER first.  Every integer is little-endian and fixed-width."""

import struct
import sys

MAGIC = b"OCULARRC"
VERSION = 2

# block types
BLK_HEADER, BLK_CODE, BLK_THREAD, BLK_CHUNK, BLK_CALIB = 1, 2, 3, 4, 5
BLK_CODESTATE, BLK_END, BLK_WINDOW, BLK_SAMPLING = 6, 7, 8, 9

# HEADER flags, THREAD flags
F_PRECISE, F_RING, F_NEAR_ZERO = 1, 2, 4
THREAD_ENDED = 1
# CODESTATE flags; K_MARK payloads
CF_START_DISABLED = 2
MARK_SAMPLED = 1

# record kinds (the low 4 bits of a record's info; the payload is above them)
K_START, K_RESUME, K_THROW, K_RETURN, K_YIELD, K_UNWIND = 1, 2, 3, 4, 5, 6
K_CCALL, K_CRETURN, K_MARK = 13, 14, 15

HEADER_FIXED = 8 + 4 * 4 + 8 * 3 + 24 + 256 + 4 + 4  # (recording.h, OC_HEADER_FIXED: 336)


def block(btype, payload):
    """One block: its header, the payload, zeros to the next multiple of 8."""
    payload = bytes(payload)
    return struct.pack("<II", btype, len(payload)) + payload + bytes(-len(payload) % 8)


def header(version=VERSION, flags=0, threshold=0, pid=4242, tsc0=0, mono0_ns=0, ns_per_tick=1.0, clock="test",
           cache_entries=bytes(256), python_hex=sys.hexversion, name="handmade"):
    """The HEADER block: magic, version, flags, threshold, pid, tsc0, mono0_ns, ns_per_tick, clock[24],
    cache_entries[256], PY_VERSION_HEX, the process name."""
    raw = name.encode()
    payload = (MAGIC + struct.pack("<IIIIQQd", version, flags, threshold, pid, tsc0, mono0_ns, ns_per_tick)
               + clock.encode().ljust(24, b"\0") + bytes(cache_entries) + struct.pack("<II", python_hex, len(raw))
               + raw)
    assert len(payload) == HEADER_FIXED + len(raw)
    return block(BLK_HEADER, payload)


def code(cid, qualname, filename, firstline, bytecode=b"", lines=()):
    """A CODE block: id, first line, code units n, the two names, bytecode (2n bytes), a line per unit."""
    q, f = qualname.encode(), filename.encode()
    n = len(bytecode) // 2
    assert len(bytecode) == 2 * n and len(lines) == n
    return block(BLK_CODE, struct.pack("<IiIII", cid, firstline, n, len(q), len(f)) + q + f + bytes(bytecode)
                 + struct.pack(f"<{n}i", *lines))


def c_function(cid, name):
    """A C function's entry in the code table, as the recorder writes it: file "~", line 0, no bytecode."""
    return code(cid, name, "~", 0)


def thread(idx, tid, ident, name, flags=0):
    """A THREAD block: index, flags (THREAD_ENDED), kernel tid, threading ident, name (empty: not known yet)."""
    raw = name.encode()
    return block(BLK_THREAD, struct.pack("<IIqQI", idx, flags, tid, ident, len(raw)) + raw)


def rec(ts, code_id, kind, payload=0):
    """One 16-byte record: u64 ts (ticks), u32 code id, u32 info = kind | payload << 4."""
    assert 0 <= kind < 16 and 0 <= payload < 1 << 28
    return struct.pack("<QII", ts, code_id, kind | payload << 4)


def chunk(idx, records):
    """A CHUNK block of thread index idx: records are (ts, code_id, kind, payload) tuples."""
    return block(BLK_CHUNK, struct.pack("<II", idx, len(records)) + b"".join(rec(*r) for r in records))


def calib(tsc0, mono0_ns, ns_per_tick, early_ns_per_tick=None, knee_tsc=None):
    """A CALIB block: 24 bytes (one rate), or 40 with the early rate and the knee (2^64-1: none)."""
    payload = struct.pack("<QQd", tsc0, mono0_ns, ns_per_tick)
    if early_ns_per_tick is not None:
        payload += struct.pack("<dQ", early_ns_per_tick, (1 << 64) - 1 if knee_tsc is None else knee_tsc)
    return block(BLK_CALIB, payload)


def end(stop_ticks, events, dropped=0, pauses=0):
    """The END block: the session ended normally."""
    return block(BLK_END, struct.pack("<QQQQ", stop_ticks, events, dropped, pauses))


def window(ticks):
    """The WINDOW block of a flight-recorder recording: the kept window begins at these ticks."""
    return block(BLK_WINDOW, struct.pack("<Q", ticks))


def codestate(entries):
    """The CODESTATE block: (code id, flags, enters) per code, its state at stop."""
    return block(BLK_CODESTATE, b"".join(struct.pack("<III", *e) for e in entries))


SAMPLING_KICK_MAGIC = 0x4B43494B  # "KICK"


def sampling(windows, status=1, skipped=0, kick=None):
    """A SAMPLING block: status (1: on), the windows (begin, end ticks) opened, skipped, no other tool; kick:
    the ticks of the first de-instrumentation, in the trailer that says it (None: no trailer, as before it)."""
    trailer = b"" if kick is None else struct.pack("<IIQ", SAMPLING_KICK_MAGIC, 0, kick)
    return block(BLK_SAMPLING, struct.pack("<IIII", status, len(windows), skipped, 0) + bytes(32)
                 + b"".join(struct.pack("<QQ", b, e) for b, e in windows) + trailer)


def blocks(data):
    """(type, offset, payload length) of every complete block of a recording."""
    off = 0
    while off + 8 <= len(data):
        t, n = struct.unpack_from("<II", data, off)
        if n > len(data) - off - 8:
            break
        yield t, off, n
        off = (off + 8 + n + 7) & ~7
