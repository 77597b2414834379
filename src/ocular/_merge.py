"""Merging the traces of several processes into one (``python -m ocular merge``, and ``--follow``).

Every Ocular trace stamps its events with CLOCK_MONOTONIC, which all processes of a machine share, so
merging needs no clock shifting: it puts the events of every input in one file, one track group
(pid) per process.

Chrome trace JSON: Ocular writes one event per line between a fixed header and a footer of metadata
events and ``otherData``.  A finished Ocular file is copied in large blocks; any other input is checked
event by event (``json.loads``), so a corrupt input gives an error naming the file and line and never a
broken output.  A trace whose process died before finishing it (a ``*.tmp`` file of a process killed by
a signal) has a clean prefix and a torn last line: merge keeps every complete event, closes the slices
still open at the last time stamp of their thread, and labels the process incomplete.  JSON files of
other tools (object or array form) are accepted too.

Native Perfetto protobuf: a trace is a sequence of ``TracePacket``s (field 1 of ``Trace``), and Ocular
gives every process its own range of packet-sequence ids, so the merged trace is the concatenation of
the inputs' packets; a torn last packet is dropped and the slices left open by an unfinished trace are
closed (an end at the last time stamp of each thread's sequence).  Inputs and output must be of the same format.

The output is written under a temporary name and renamed when complete.  On a terminal, merging more
than a few megabytes shows its progress.
"""

import json
import math
import os
import sys
import time

from ._formats import BY_NAME
from ._paths import _replace_file
from ._session import _format_for, _loops_code

PERFETTO_SUFFIXES = BY_NAME["perfetto"].suffixes

JSON_HEADER = b'{"traceEvents":[\n'
_META_PREFIX = b'{"ph":"M"'
_BLOCK = 1 << 20


class MergeError(ValueError):
    """An input is not a trace we can merge; the message names the file and what is wrong."""


class Part(dict):
    """What merge() found in one input: ``path``, ``pid``, ``format``, ``events`` (JSON events; None for
    protobuf), ``packets`` (protobuf packets; None for JSON), ``dropped`` (events the process could not
    record, from its JSON footer; None if unknown), ``complete``, ``note``."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


RECORDING_HEAD = b"\x01\x00\x00\x00"  # an Ocular recording: a HEADER block ...
RECORDING_MAGIC = b"OCULARRC"          # ... whose payload starts with this (docs/recording.md)


def detect_format(f, path):
    """"json", "perfetto" or "recording" from the first bytes of the open file; MergeError if it is
    none of them."""
    try:
        f.seek(0)
        head = f.read(64)
        f.seek(0)
    except OSError as exc:
        raise MergeError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    if head[:4] == RECORDING_HEAD and head[8:16] == RECORDING_MAGIC:
        return "recording"
    stripped = head.lstrip()
    if not stripped:
        raise MergeError(f"{path!r} is empty, not a trace")
    second = stripped[1:].lstrip()[:1]
    if stripped[:1] in (b"{", b"[") and second in (b'"', b"{", b"}", b"]"):
        return "json"
    if head[:1] == b"\x0a":  # Trace.packet: field 1, length-delimited
        return "perfetto"
    if head[:2] == b"\x1f\x8b":
        raise MergeError(f"{path!r} is gzip-compressed: decompress it first (gunzip -k), then merge the .json")
    raise MergeError(f"{path!r} is neither Chrome trace JSON nor a Perfetto protobuf trace")


class _Progress:
    """'ocular: merging N traces: 42% (120/266 MB)' on a terminal, redrawn at most 5 times a second."""

    def __init__(self, total, n, stream=None):
        self.stream = stream or sys.stderr
        self.total = max(total, 1)
        self.done = 0
        self.n = n
        self.last = 0.0
        try:
            tty = self.stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        self.on = tty and total > (8 << 20)
        self.shown = False

    def add(self, nbytes):
        self.done += nbytes
        if not self.on:
            return
        now = time.monotonic()
        if now - self.last < 0.2:
            return
        self.last = now
        self.shown = True
        self.stream.write(f"\rocular: merging {self.n} traces: {100 * self.done // self.total}% "
                          f"({self.done / 1e6:.0f}/{self.total / 1e6:.0f} MB)")
        self.stream.flush()

    def finish(self):
        if self.shown:
            self.stream.write("\r" + " " * 60 + "\r")
            self.stream.flush()


# ---------------------------------------------------------------- JSON ----

def _event_line(ev):
    return json.dumps(ev, separators=(",", ":")).encode("ascii") + b",\n"


class _JsonOut:
    """The merged JSON file: events as they come, metadata and otherData gathered for the end."""

    def __init__(self, f):
        self.f = f
        self.meta = []
        self.other = None
        self.events = 0
        f.write(JSON_HEADER)

    def write(self, data, nevents):
        self.f.write(data)
        self.events += nevents

    def finish(self, parts):
        meta = list(self.meta)
        for order, p in enumerate(parts):
            if p["pid"] is not None:
                meta.append({"ph": "M", "name": "process_sort_index", "pid": p["pid"], "tid": p["pid"],
                             "args": {"sort_index": order}})
        lines = [json.dumps(m, separators=(",", ":")) for m in meta]
        self.f.write(",\n".join(lines).encode("ascii") if lines else b'{"ph":"M","name":"trace_merged","pid":0,"tid":0,"args":{}}')
        other = dict(self.other or {})
        other["merged"] = [{k: p.get(k) for k in ("path", "pid", "events", "dropped", "complete", "note")}
                           for p in parts]
        other["dropped"] = sum(p.get("dropped") or 0 for p in parts)
        tail = {"displayTimeUnit": "ns", "otherData": other}
        self.f.write(b"\n]," + json.dumps(tail, separators=(",", ":"))[1:].encode("ascii") + b"\n")


def _load_foreign_json(f, path, part, out):
    """A JSON trace not in Ocular's line layout: load it whole and re-emit its events."""
    try:
        f.seek(0)
        doc = json.loads(f.read())
    except (ValueError, UnicodeDecodeError) as exc:
        raise MergeError(f"{path!r} is not valid JSON: {exc}") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise MergeError(f"{path!r} is JSON but not a Chrome trace (no traceEvents list)")
    buf = []
    n = 0
    for i, ev in enumerate(events):
        try:
            _check_event(ev)
        except ValueError as exc:
            raise MergeError(f"{path!r}: traceEvents[{i}] is not a trace event ({exc}): {str(ev)[:80]}") from None
        if part["pid"] is None and isinstance(ev.get("pid"), int):
            part["pid"] = ev["pid"]
        if ev["ph"] == "M":
            out.meta.append(ev)
            continue
        buf.append(_event_line(ev))
        n += 1
        if len(buf) >= 4096:
            out.write(b"".join(buf), len(buf))
            buf = []
    out.write(b"".join(buf), len(buf))
    part["events"] = n
    if isinstance(doc, dict) and isinstance(doc.get("otherData"), dict) and out.other is None:
        out.other = doc["otherData"]


def _parse_footer(path, footer):
    """Ocular's footer: the metadata event lines, then ``],"displayTimeUnit":...}``."""
    text = footer.decode("utf-8", "surrogateescape")
    try:
        doc = json.loads('{"traceEvents":[' + text)
    except ValueError as exc:
        raise MergeError(f"{path!r}: the end of the trace is corrupt ({exc})") from None
    meta = doc.get("traceEvents")
    if not isinstance(meta, list) or not all(isinstance(m, dict) for m in meta):
        raise MergeError(f"{path!r}: the end of the trace is corrupt (metadata is not a list of events)")
    return meta, doc.get("otherData") if isinstance(doc.get("otherData"), dict) else {}


def _find_footer(f, size):
    """Offset of the first metadata line of a finished Ocular JSON trace (they close the file)."""
    want = b"\n" + _META_PREFIX + b',"name":"process_name"'
    window = 1 << 16
    while True:
        start = max(0, size - window)
        f.seek(start)
        tail = f.read(size - start)
        at = tail.rfind(want)
        if at >= 0:
            return start + at + 1
        if start == 0:
            return -1
        window *= 4


def _copy_trusted(path, f, size, part, out, progress):
    """A finished Ocular JSON trace: the event lines in blocks, the footer parsed."""
    foot = _find_footer(f, size)
    if foot < 0:
        raise MergeError(f"{path!r}: no process metadata at the end: not a finished Ocular trace")
    f.seek(foot)
    meta, other = _parse_footer(path, f.read())
    f.seek(len(JSON_HEADER))
    left = foot - len(JSON_HEADER)
    while left > 0:
        block = f.read(min(_BLOCK, left))
        if not block:
            break
        left -= len(block)
        out.write(block, block.count(b"\n"))
        part["events"] += block.count(b"\n")
        progress.add(len(block))
    return meta, other


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_event(ev):
    """Raise ValueError naming what is wrong with a trace event: a timed event needs its time, process and
    thread, a complete event ("X") its duration, for a viewer to place it."""
    if not isinstance(ev, dict) or not isinstance(ev.get("ph"), str):
        raise ValueError("not a trace event")
    if ev["ph"] in ("B", "E", "X", "i", "C"):
        if not _number(ev.get("ts")):
            raise ValueError("no time stamp")
        if not all(isinstance(ev.get(k), (int, str)) and not isinstance(ev.get(k), bool) for k in ("pid", "tid")):
            raise ValueError("no process or thread id")
    if ev["ph"] == "X":
        if not _number(ev.get("dur")):
            raise ValueError("no duration")
        if ev["dur"] < 0:
            raise ValueError("a negative duration")


def _copy_checked(path, f, part, out, progress, incomplete):
    """Event by event, each line parsed; an incomplete trace may end in a torn line.  Returns the
    metadata and otherData of the footer (None when the trace has no footer)."""
    f.seek(len(JSON_HEADER))
    stacks = {}   # (pid, tid) -> open B events
    last_ts = {}  # (pid, tid) -> last time stamp
    buf = []
    lineno = 1
    footer = None
    for raw in f:
        lineno += 1
        progress.add(len(raw))
        if raw.startswith(_META_PREFIX) or raw.startswith(b"]"):
            rest = f.read()
            footer = raw + rest
            break
        line = raw.rstrip(b"\n")
        body = line[:-1] if line.endswith(b",") else line
        try:
            ev = json.loads(body)
            _check_event(ev)
        except ValueError as exc:
            if incomplete and not raw.endswith(b"\n"):
                break  # the torn last line of a process that died while writing
            raise MergeError(f"{path!r}, line {lineno}: corrupt event ({exc}): {line[:80]!r}") from None
        key = (ev.get("pid"), ev.get("tid"))
        if part["pid"] is None and isinstance(ev.get("pid"), int):
            part["pid"] = ev["pid"]
        ts = ev.get("ts")
        if isinstance(ts, (int, float)):
            last_ts[key] = max(last_ts.get(key, ts), ts)
        if ev["ph"] == "B":
            stacks[key] = stacks.get(key, 0) + 1
        elif ev["ph"] == "E" and stacks.get(key):
            stacks[key] -= 1
        buf.append(line if line.endswith(b",") else line + b",")
        buf.append(b"\n")
        part["events"] += 1
        if len(buf) >= 8192:
            out.write(b"".join(buf), len(buf) // 2)
            buf = []
    out.write(b"".join(buf), len(buf) // 2)
    closers = []
    for key, depth in stacks.items():
        for _ in range(depth):  # close what the dead process left open, where its thread stopped
            closers.append(_event_line({"ph": "E", "pid": key[0], "tid": key[1], "ts": last_ts.get(key, 0),
                                        "args": {"incomplete": True}}))
    out.write(b"".join(closers), len(closers))
    if footer is None:
        return None, None
    return _parse_footer(path, footer)


def _merge_json_input(f, path, part, out, progress, trusted):
    size = os.fstat(f.fileno()).st_size
    f.seek(0)
    head = f.read(len(JSON_HEADER))
    if head != JSON_HEADER:
        _load_foreign_json(f, path, part, out)
        progress.add(size)
        return
    meta = other = None
    if trusted:
        meta, other = _copy_trusted(path, f, size, part, out, progress)
    else:
        meta, other = _copy_checked(path, f, part, out, progress, not part["complete"])
        if meta is None and part["complete"]:
            raise MergeError(f"{path!r} ends before its metadata: an unfinished trace "
                             "(its process may have been killed); merge it as a .tmp file to salvage it")
    if meta is None:  # an unfinished trace: say so in the timeline
        meta = []
        if part["pid"] is not None:
            meta.append({"ph": "M", "name": "process_name", "pid": part["pid"], "tid": part["pid"],
                         "args": {"name": f"pid {part['pid']}"}})
    for m in meta:
        if part["pid"] is None and isinstance(m.get("pid"), int):
            part["pid"] = m["pid"]
        if m.get("name") == "process_name" and part.get("label"):
            m.setdefault("args", {})["name"] = f"{m.get('args', {}).get('name', '')} ({part['label']})".strip()
    if other and isinstance(other.get("dropped"), int):
        part["dropped"] = other["dropped"]
    if not part["complete"] and part["pid"] is not None:
        meta.append({"ph": "M", "name": "process_labels", "pid": part["pid"], "tid": part["pid"],
                     "args": {"labels": f"incomplete: {part['note'] or 'the process did not finish its trace'}"}})
    out.meta.extend(meta)
    if other and out.other is None:
        out.other = other


# ------------------------------------------------------------ Perfetto ----

def _varint(buf, pos, end):
    """(value, next position) of the varint at pos, or (None, pos) if it runs past end."""
    shift = value = 0
    while pos < end:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
    return None, pos


def zlib_error():
    import zlib

    return zlib.error


def _fields(buf, pos, end):
    """(field number, wire type, value) of a protobuf message: value is an int for varints, a
    (start, end) range for length-delimited fields, None for fixed-size ones (skipped)."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        if key is None:
            raise ValueError("truncated key")
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            if value is None:
                raise ValueError("truncated varint")
        elif wire == 2:
            n, pos = _varint(buf, pos, end)
            if n is None or pos + n > end:
                raise ValueError("truncated field")
            value = (pos, pos + n)
            pos += n
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            value = None
        else:
            raise ValueError(f"wire type {wire}")
        yield field, wire, value


_TP_SEQUENCE_ID, _TP_TRACK_EVENT, _TP_COMPRESSED = 10, 11, 50
_TE_TYPE, _SLICE_BEGIN, _SLICE_END = 9, 1, 2


def _count_slices(buf, start, end, depth):
    """Follow one TracePacket (buf[start:end]) into depth {sequence id: open slices}; compressed
    batches (zlib, as Ocular writes them) are expanded and followed packet by packet."""
    seq = kind = None
    for field, wire, value in _fields(buf, start, end):
        if field == _TP_SEQUENCE_ID and wire == 0:
            seq = value
        elif field == _TP_TRACK_EVENT and wire == 2:
            for f2, w2, v2 in _fields(buf, *value):
                if f2 == _TE_TYPE and w2 == 0:
                    kind = v2
        elif field == _TP_COMPRESSED and wire == 2:
            import zlib

            inner = zlib.decompress(bytes(buf[value[0]:value[1]]))
            for f2, w2, v2 in _fields(inner, 0, len(inner)):
                if f2 == 1 and w2 == 2:
                    _count_slices(inner, v2[0], v2[1], depth)
    if seq is not None and kind in (_SLICE_BEGIN, _SLICE_END):
        d = depth.get(seq, 0) + (1 if kind == _SLICE_BEGIN else -1)
        depth[seq] = max(d, 0)


def _pb_varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _pb_bytes(field, data):
    return _pb_varint(field << 3 | 2) + _pb_varint(len(data)) + data


def _slice_closers(depth):
    """TracePackets ending every slice left open, on its own sequence, at the sequence's last time stamp:
    Ocular's thread sequences default to the incremental clock and their track, so a timestamp delta
    of 0 is the time of the sequence's last event."""
    event = _pb_bytes(_TP_TRACK_EVENT, _pb_varint(_TE_TYPE << 3) + _pb_varint(_SLICE_END))
    out = []
    for seq, d in sorted(depth.items()):
        packet = (_pb_varint(8 << 3) + b"\x00"                                  # timestamp: delta 0
                  + _pb_varint(_TP_SEQUENCE_ID << 3) + _pb_varint(seq)
                  + _pb_varint(13 << 3) + _pb_varint(2)                        # SEQ_NEEDS_INCREMENTAL_STATE
                  + event)
        out += [_pb_bytes(1, packet)] * d
    return b"".join(out)


def _merge_perfetto_input(f, path, part, outf, progress):
    """Copy whole packets; a torn last packet of an incomplete trace is dropped, and the slices its
    threads left open are closed where each thread's sequence stopped."""
    f.seek(0)
    depth = {} if not part["complete"] else None
    if True:
        carry = b""
        offset = 0
        while True:
            block = f.read(_BLOCK)
            data = carry + block if carry else block
            if not data:
                break
            pos = 0
            end = len(data)
            while pos < end:
                if data[pos] != 0x0A:
                    raise MergeError(f"{path!r}: byte {offset + pos}: not a TracePacket (field 1), "
                                     "the protobuf trace is corrupt")
                try:
                    n, p2 = _varint(data, pos + 1, end)
                except ValueError:
                    raise MergeError(f"{path!r}: byte {offset + pos}: corrupt packet length") from None
                if n is None or p2 + n > end:
                    break  # the packet continues in the next block
                if depth is not None:
                    try:
                        _count_slices(data, p2, p2 + n, depth)
                    except (ValueError, zlib_error()) as exc:
                        raise MergeError(f"{path!r}: byte {offset + pos}: corrupt packet ({exc})") from None
                pos = p2 + n
                part["packets"] += 1
            outf.write(data[:pos])
            progress.add(pos)
            offset += pos
            carry = data[pos:]
            if not block:
                break
        if carry:
            if part["complete"]:
                raise MergeError(f"{path!r}: ends inside a packet ({len(carry)} bytes at byte {offset}): "
                                 "the trace is truncated")
            progress.add(len(carry))  # the torn tail of a process that died while writing
        if depth:
            closers = _slice_closers(depth)
            outf.write(closers)
            part["packets"] += sum(depth.values())


# --------------------------------------------------------------- merge ----

def _pid_from_name(path):
    """Ocular's per-process names end in the pid: ``123.json``, ``trace.123.json``, ``x.json.123.tmp``."""
    base = os.path.basename(path)
    for piece in reversed(base.split(".")):
        if piece.isdigit():
            return int(piece)
    return None


def merge(inputs, output, format=None, trusted=False, skip_bad=False, progress_stream=None):
    """Merge trace files into ``output`` and return a list of Part, one per input.

    inputs: paths, or (path, info) pairs where info may hold ``complete`` (False for a trace its process
    did not finish: it is salvaged), ``note`` (why) and ``label`` (added to the process name).
    A path ending in ``.tmp`` counts as incomplete.  format: "json" or "perfetto" (default: from the
    output's suffix, else the inputs').  trusted: the inputs are finished Ocular traces of this session
    (copied in blocks, not checked event by event).  skip_bad: an input that cannot be read or is not
    a trace is left out (its Part says why, with ``skipped``) instead of failing the merge.

    Raises MergeError (a ValueError) for an input that is not a trace or is corrupt, and OSError if
    the output cannot be written; the output is then left untouched.
    """
    items = []
    rendered = []  # temporary renders of recordings, removed at the end
    for item in inputs:
        path, info = (item, {}) if isinstance(item, (str, os.PathLike)) else item
        path = os.fspath(path)
        complete = info.get("complete", not path.endswith(".tmp"))
        items.append(Part(path=path, pid=info.get("pid"), format=None, events=None, packets=None, dropped=None,
                          complete=bool(complete),
                          note=info.get("note", "" if complete else "the process did not finish its trace"),
                          label=info.get("label", "")))
    if not items:
        raise MergeError("nothing to merge: give at least one trace file")
    if format is None and isinstance(output, (str, os.PathLike)):
        low = os.fspath(output).lower()
        kind = "gzip-compressed JSON" if low.endswith(".gz") and not low.endswith(".pb.gz") else _format_for(low, None)
        if kind not in ("json", "perfetto"):
            raise MergeError(f"merge writes a Chrome JSON or Perfetto trace, but {os.fspath(output)!r} names a "
                             f"{kind} output by its suffix: name it .json or .pftrace (convert a recording to "
                             "the other formats with `python -m ocular convert`)")
    files = {}
    try:
        return _merge_open(items, files, output, format, trusted, skip_bad, progress_stream, rendered)
    finally:
        for f in files.values():
            f.close()
        for path in rendered:
            try:
                os.unlink(path)
            except OSError:
                pass


def _render_part(p, f, output, format, rendered):
    """A recording among the inputs (the part of a process killed before it rendered its trace, or a
    .ocular file): render it into a temporary trace of the output's format, as ``convert`` does (loops
    the same way: a slice per run in JSON, and the trace alone, with no statistics), and merge that.
    The render closes the slices a recording cut short left open: its trace is a finished Ocular trace,
    copied in blocks like any other (not event by event)."""
    from . import _ocular, _rendering  # (the process's one render at a time: ocular's lock)

    fmt = format or ("perfetto" if output.lower().endswith(PERFETTO_SUFFIXES) else "json")
    tmp = f"{os.path.abspath(output)}.{os.getpid()}.part{len(rendered)}.tmp"
    rendered.append(tmp)
    f.close()
    try:
        with _rendering():
            res = _ocular._render(p["path"], 1 if fmt == "perfetto" else 0, tmp, False, _loops_code(None, fmt), False)
    except ValueError as exc:
        raise MergeError(f"{p['path']!r}: {exc}") from None
    if res["write_errno"]:
        raise OSError(res["write_errno"], f"cannot write {tmp!r}: {os.strerror(res['write_errno'])}", tmp)
    if not res["complete"]:
        p["complete"] = False
        if not p["note"]:
            p["note"] = "the process did not finish its recording"
    if res.get("damaged"):
        p["damaged"] = res["damaged"]
        p["note"] = f"{p['note']}; {res['damaged']}" if p["note"] else res["damaged"]
    if p["pid"] is None:
        p["pid"] = res["pid"]
    p["recording"] = p["path"]
    return open(tmp, "rb"), fmt


def _open_part(p):
    """Open an input once (a file renamed later stays readable); a '.tmp' whose process finished in
    the meantime is read under its final name."""
    path = p["path"]
    try:
        if os.path.isdir(path):
            raise MergeError(f"{path!r} is a directory, not a trace file")
        return open(path, "rb")
    except FileNotFoundError:
        if path.endswith(".tmp"):
            final = path[:-4].rpartition(".")[0]
            try:
                f = open(final, "rb")
            except OSError:
                pass
            else:
                p.update(path=final, complete=True, note="")
                return f
        raise MergeError(f"{path!r} does not exist") from None
    except OSError as exc:
        raise MergeError(f"cannot read {path!r}: {exc.strerror or exc}") from None


def _merge_open(items, files, output, format, trusted, skip_bad, progress_stream, rendered):
    skipped = []
    for p in list(items):
        try:
            files[id(p)] = f = _open_part(p)
            size = os.fstat(f.fileno()).st_size
            if not p["complete"] and size < len(JSON_HEADER):  # killed before it wrote its header
                p.update(events=0, note=p["note"] + "; nothing was written", skipped=True)
            else:
                p["format"] = detect_format(f, p["path"])
                if p["format"] == "recording":
                    files[id(p)], p["format"] = _render_part(p, f, output, format, rendered)
                p["events" if p["format"] == "json" else "packets"] = 0
                if p["pid"] is None:
                    p["pid"] = _pid_from_name(p["path"]) if p["path"].endswith(".tmp") else None
                continue
        except MergeError as exc:
            if not skip_bad:
                raise
            p.update(note=str(exc), skipped=True, complete=False)
        items.remove(p)
        skipped.append(p)
    if not items:
        raise MergeError("nothing to merge: " + ("; ".join(p["note"] for p in skipped) or "no input"))
    fmts = {p["format"] for p in items}
    if format is None:
        format = "perfetto" if output.lower().endswith(PERFETTO_SUFFIXES) else (
            fmts.pop() if len(fmts) == 1 else "json")
        fmts = {p["format"] for p in items}
    if format not in ("json", "perfetto"):
        raise MergeError(f"unknown format {format!r}: choose 'json' or 'perfetto'")
    wrong = [p["path"] for p in items if p["format"] != format]
    if wrong:
        raise MergeError(f"cannot merge into {format} ({output!r}): {', '.join(map(repr, wrong))} "
                         f"{'is' if len(wrong) == 1 else 'are'} in the other format; inputs and output "
                         "must share one format")
    from ._paths import _check_name_length, _regular_output, _same_file, _writing

    if not output:
        raise MergeError("the output must not be empty")
    out_abs = _regular_output(output, os.path.abspath(output), hint=False)  # follows a symlink; refuses devices
    if any(_same_file(p["path"], out_abs) for p in items):
        raise MergeError(f"the output {output!r} is also an input; write the merge to another file")
    directory = os.path.dirname(out_abs)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"ocular: the output directory {directory!r} does not exist")
    _check_name_length(output, out_abs)

    progress = _Progress(sum(os.fstat(files[id(p)].fileno()).st_size for p in items), len(items), progress_stream)
    tmp = f"{out_abs}.{os.getpid()}.tmp"
    try:
        with _writing(output, out_abs), open(tmp, "wb") as f:
            if format == "json":
                out = _JsonOut(f)
                for p in items:
                    _merge_json_input(files[id(p)], p["path"], p, out, progress,
                                      "recording" in p or (trusted and p["complete"]))
                out.finish(items)
            else:
                for p in items:
                    _merge_perfetto_input(files[id(p)], p["path"], p, f, progress)
        _replace_file(tmp, out_abs)  # (cheaper than os.replace over a large previous merge)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        progress.finish()
    for p in items + skipped:
        p.pop("label", None)
        if "recording" in p:
            p["path"] = p.pop("recording")
    return items + skipped
