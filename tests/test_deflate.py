"""The hand-written deflate encoder of the Perfetto sink (deflate.c: kept because it measured 1.7-2.6x cheaper
than libdeflate or zlib at level 1 inside the sink, docs/performance.md), checked by zlib itself: every
stream it makes must decompress to its input.  Inputs cover what the encoder distinguishes: empty and
one-byte input, every byte value, incompressible bytes, runs (matches of the longest length, 258, and
overlapping ones), matches at every distance class up to the 32 KiB window, batches larger than the window,
and consecutive batches coded with the symbol counts of the batch before (a symbol absent before must still
have a code), as the sink's batches are."""

import pickle
import random
import struct

from conftest import run_py


def _inputs():
    rnd = random.Random(1669)
    yield b""
    yield b"x"
    yield bytes(range(256)) * 3
    yield bytes(rnd.getrandbits(8) for _ in range(70_000))              # incompressible, past the window
    yield b"a" * 100_000                                                  # runs: 258-byte matches, distance 1
    yield b"ab" * 40_000 + b"abc" * 1000
    for dist in (1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
                 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577, 32768):  # every distance code's first value
        head = bytes(rnd.getrandbits(8) for _ in range(dist))
        yield head + head[:200] + bytes(rnd.getrandbits(8) for _ in range(50))
    for length in range(3, 259, 17):                                       # length codes
        blk = bytes(rnd.getrandbits(8) for _ in range(300))
        yield blk + blk[:length] + b"\x00" + blk[:length]
    # trace-like: packets with varint fields, many near-repeats
    buf = bytearray()
    for i in range(20_000):
        buf += struct.pack("<BQIH", 0x1A, 1_000_000 + i * 37, rnd.randrange(64), i & 0xFFF)
    yield bytes(buf)
    yield bytes(rnd.choice(b"ACGT") for _ in range(50_000))               # skewed symbol counts


def test_every_stream_decompresses_to_its_input(tmp_path):
    (tmp_path / "inputs.pickle").write_bytes(pickle.dumps(list(_inputs())))
    p = run_py("""
        import pickle, sys, zlib
        from ocular import _ocular
        with open(sys.argv[1], "rb") as f:
            inputs = pickle.load(f)
        bad = []
        for fresh in (True, False):
            for i, data in enumerate(inputs):
                z = _ocular._deflate(data, fresh and i == 0)
                if zlib.decompress(z) != data:
                    bad.append((fresh, i, len(data)))
        # a batch after one with very different symbols (codes made from the earlier counts)
        _ocular._deflate(b"a" * 5000, True)
        for data in (bytes(range(256)), b"zzzz" * 1000, bytes(range(255, -1, -1)) * 50):
            if zlib.decompress(_ocular._deflate(data)) != data:
                bad.append(("after", len(data)))
        print(repr(bad))
    """, str(tmp_path / "inputs.pickle"))
    assert p.stdout.strip().splitlines()[-1] == "[]", p.stdout


def test_refused_while_tracing():
    p = run_py("""
        import ocular
        from ocular import _ocular
        ocular.start_tracing(perfetto=False, report=False)
        try:
            _ocular._deflate(b"abc")
        except RuntimeError as e:
            print("refused:", e)
        ocular.stop_tracing()
        import zlib
        print(zlib.decompress(_ocular._deflate(b"abc" * 100)) == b"abc" * 100)
    """)
    assert "refused: _deflate is for tests" in p.stdout and p.stdout.strip().endswith("True"), p.stdout
