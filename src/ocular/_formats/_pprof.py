"""pprof output (.pb.gz, .pprof): profile.proto (github.com/google/pprof, proto/profile.proto), gzipped.

Sample types: ``calls/count`` and ``wall/nanoseconds`` (self time; the default).  One sample per
call-tree node: its stack (leaf first) and its calls and self nanoseconds.  pprof sums a frame's
samples to get its flat time and the samples under it for its cumulative time, counting a frame once
per stack, so ``-top`` shows our self time as flat and our total time (recursion counted once) as cum.
One location per function (line: its first line), with its function (name, file, start line; the
name with ``[module]`` for ``<module>``, as pprof drops what is inside ``<>``, the system name as is); threads
are summed and each sample carries a ``thread`` label.  The protobuf is encoded here by hand (a few
field kinds suffice); field numbers are profile.proto's.
"""

import gzip


def _varint(v):
    out = bytearray()
    v &= 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _key(field, wire):
    return _varint(field << 3 | wire)


def _int(field, v):
    return _key(field, 0) + _varint(v) if v else b""


def _msg(field, payload):
    return _key(field, 2) + _varint(len(payload)) + payload


def _packed(field, values):
    if not values:
        return b""
    return _msg(field, b"".join(_varint(v) for v in values))


class _Strings:
    def __init__(self):
        self.index = {"": 0}
        self.table = [""]

    def __call__(self, s):
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.table)
            self.table.append(s)
        return i


def parts(tree):
    """profile.proto's bytes (not compressed), in parts, the string table last."""
    st = _Strings()
    for typ, unit in (("calls", "count"), ("wall", "nanoseconds")):
        yield _msg(1, _int(1, st(typ)) + _int(2, st(unit)))
    func_ids = {}   # function key -> id (functions and locations share ids)
    funcs, locs = [], []
    for n in range(len(tree.code)):
        c = tree.code[n]
        if c < 0:
            continue
        k = tree.func(c)
        if k not in func_ids:
            fid = func_ids[k] = len(func_ids) + 1
            file, line, name = k
            shown = name.replace("<", "[").replace(">", "]")  # pprof would cut "<module>" away as template args
            funcs.append(_msg(5, _int(1, fid) + _int(2, st(shown)) + _int(3, st(name)) + _int(4, st(file))
                              + _int(5, line)))
            locs.append(_msg(4, _int(1, fid) + _msg(4, _int(1, fid) + _int(2, line))))
    thread_key = st("thread")
    first = last = None
    fid_bytes = {}  # code id -> its location id as a varint
    for t in tree.threads:
        label = _msg(3, _int(1, thread_key) + _int(2, st(tree.thread_label(t))))
        first = t["first_ns"] if first is None else min(first, t["first_ns"])
        last = t["last_ns"] if last is None else max(last, t["last_ns"])
        # A sample's locations, leaf first: the varints of the path's ids from the node up, reversed.  Every
        # 64 levels the bytes of the whole path so far are kept (kept[d], d + 1 a multiple of 64): a
        # sample then costs its own length, and what is kept stays small however deep the recursion.
        path = []
        kept = {}
        for n, d in tree.walk(t["root"]):
            del path[d:]
            c = tree.code[n]
            v = fid_bytes.get(c)
            if v is None:
                v = fid_bytes[c] = _varint(func_ids[tree.func(c)])
            path.append(v)
            top = (d + 1) // 64 * 64 - 1  # the deepest kept level at or above d
            if top == d:
                kept[d] = b"".join(reversed(path[d - 63:])) + (kept[d - 64] if d >= 64 else b"")
            if tree.calls[n] or tree.self_ns[n]:
                if top == d:
                    ids = kept[d]
                elif top < 0:
                    ids = b"".join(reversed(path))
                else:
                    ids = b"".join(reversed(path[top + 1:])) + kept[top]
                yield _msg(2, _msg(1, ids) + _packed(2, [tree.calls[n], tree.self_ns[n]]) + label)
    yield from locs
    yield from funcs
    if first is not None:
        yield _int(10, last - first)             # duration_nanos
    yield _msg(11, _int(1, st("wall")) + _int(2, st("nanoseconds")))  # period_type
    yield _int(12, 1)                            # period
    yield _int(14, st("wall"))                   # default_sample_type
    if tree.note:
        yield _int(13, st("ocular: partial: " + tree.note))  # comment
    yield b"".join(_msg(6, s.encode("utf-8", "replace")) for s in st.table)  # every string is in


def write(tree, path, options):
    with open(path, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0) as gz:
        for part in parts(tree):
            gz.write(part)
