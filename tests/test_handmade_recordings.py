"""Recordings built byte by byte (tests/recbuild.py, from docs/recording.md) and given to the renderer
directly, with no program recorded: every slice, time, count and thread name of the outputs is known
in advance.  A sound recording renders exactly (Chrome JSON slices, pstats counts, the report's
figures); one cut short renders its complete blocks and says so; an unknown block is skipped; a version
this Ocular does not read is a clear error; ends with no begin are ignored and enters close the deeper
frames left open; a flight-recorder window opens the frames that began before it, marked cut; and 300
threads each keep their own track and name."""

import collections
import json
import os
import pstats
import subprocess

import pytest

import ocular
import recbuild as rb
from conftest import SRC, check_balanced, load_trace, python_cmd
from recbuild import K_CCALL, K_CRETURN, K_RETURN, K_START

PID = 4242
TSC0, MONO0 = 500, 10**9  # a tick t is MONO0 + (t - TSC0) ns (ns_per_tick 1.0): 1 s after the clock's start
FILE = "/handmade/app.py"


def ns(ticks):
    """The time the renderer gives a tick, in integer nanoseconds."""
    return MONO0 + ticks - TSC0


def convert(rec, out, **kw):
    """ocular.convert in this process (the renderer is the same C code the command line runs)."""
    return ocular.convert(str(rec), str(out), **kw)


def cli_convert(rec, out):
    """python -m ocular convert REC -o OUT in a subprocess: (exit status, stderr)."""
    p = subprocess.run([*python_cmd(), "-m", "ocular", "convert", str(rec), "-o", str(out)],
                       env=dict(os.environ, PYTHONPATH=SRC), capture_output=True, text=True, timeout=120)
    return p.returncode, p.stderr


def write(path, *blocks):
    path.write_bytes(b"".join(blocks))
    return path


def slices(path):
    """{tid: sorted [(name, begin ns, end ns, cut)]} of a JSON trace's function slices, after checking the
    trace is balanced (every slice nested in its parent, times monotonic per thread)."""
    check_balanced(load_trace(path)["traceEvents"])
    out = collections.defaultdict(list)
    for e in load_trace(path, raw=True)["traceEvents"]:
        if e["ph"] == "X" and e.get("cat") != "loop":
            assert e["pid"] == PID, e
            b = round(e["ts"] * 1000)
            out[e["tid"]].append((e["name"], b, b + round(e["dur"] * 1000), e["args"].get("cut", False)))
    return {tid: sorted(s, key=lambda x: (x[1], -x[2], x[0])) for tid, s in out.items()}


def thread_names(path):
    """{tid: name} from a JSON trace's thread_name metadata (each tid named once)."""
    named = [(e["tid"], e["args"]["name"]) for e in load_trace(path, raw=True)["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "thread_name"]
    assert len({tid for tid, _ in named}) == len(named), named
    return dict(named)


def expect(*spans):
    """Expected slices from (name, begin ticks, end ticks[, cut]), sorted as slices() sorts them."""
    out = [(name, ns(b), ns(e), rest[0] if rest else False) for name, b, e, *rest in spans]
    return sorted(out, key=lambda x: (x[1], -x[2], x[0]))


# ---------------------------------------------------------------------------------------------
# a sound recording: two threads, nested Python calls, a C call inside a Python function

MAIN, WORK, LEAF, LEN = 0, 1, 2, 3
LEN_NAME = "<built-in method builtins.len>"
CODES = [rb.code(MAIN, "main", FILE, 1), rb.code(WORK, "work", FILE, 10), rb.code(LEAF, "leaf", FILE, 20),
         rb.c_function(LEN, LEN_NAME)]
MAIN_TID, WORKER_TID = 1001, 1002
# thread 0 (MainThread): main -> work -> leaf, len (a C call from work: the caller's depth, 2), leaf
T0 = [(1000, MAIN, K_START, 1), (2000, WORK, K_START, 2), (3000, LEAF, K_START, 3), (3500, LEAF, K_RETURN, 3),
      (4000, LEN, K_CCALL, 2), (4200, LEN, K_CRETURN, 2),
      (5000, LEAF, K_START, 3), (5600, LEAF, K_RETURN, 3), (6000, WORK, K_RETURN, 2), (7000, MAIN, K_RETURN, 1)]
# thread 1 (worker): work -> leaf
T1 = [(1500, WORK, K_START, 1), (2500, LEAF, K_START, 2), (2750, LEAF, K_RETURN, 2), (3250, WORK, K_RETURN, 1)]
STOP = 8000
EXPECTED = {
    MAIN_TID: expect(("main", 1000, 7000), ("work", 2000, 6000), ("leaf", 3000, 3500), (LEN_NAME, 4000, 4200),
                     ("leaf", 5000, 5600)),
    WORKER_TID: expect(("work", 1500, 3250), ("leaf", 2500, 2750)),
}


def sound_blocks():
    """The blocks of the sound recording, in the recorder's order: header, codes, threads, each thread's
    records in two chunks, the threads' chunks interleaved, END."""
    return [rb.header(pid=PID, tsc0=TSC0, mono0_ns=MONO0), *CODES,
            rb.thread(0, MAIN_TID, 140001, "MainThread"), rb.thread(1, WORKER_TID, 140002, "worker"),
            rb.chunk(0, T0[:6]), rb.chunk(1, T1[:3]), rb.chunk(0, T0[6:]), rb.chunk(1, T1[3:]),
            rb.end(STOP, len(T0) + len(T1))]


def test_a_sound_recording_renders_exactly(tmp_path):
    """Two threads (THREAD blocks naming them), nested Python calls and a C call inside work(), each
    thread's records in two chunks: the JSON trace holds exactly the expected slices per tid (names,
    begins and durations in microseconds from the exact ticks, the C call nested in its caller), the
    thread names, the process's pid and name; the pstats output has cProfile's exact counts and times,
    callers included; the report has the same calls and exact self and total times."""
    rec = write(tmp_path / "s.ocular", *sound_blocks())
    res = convert(rec, tmp_path / "s.json")
    assert res["complete"] and res["events"] == 14 and res["damaged"] is None
    assert res["clock"] == "test" and res["pid"] == PID and res["process_name"] == "handmade"
    assert slices(tmp_path / "s.json") == EXPECTED
    assert thread_names(tmp_path / "s.json") == {MAIN_TID: "MainThread", WORKER_TID: "worker"}
    doc = json.loads((tmp_path / "s.json").read_text())
    (proc,) = [e for e in doc["traceEvents"] if e.get("name") == "process_name"]
    assert proc["pid"] == PID and proc["args"]["name"] == "handmade"
    assert doc["otherData"]["clock"] == "test" and doc["otherData"]["ns_per_tick"] == 1
    assert "damaged" not in doc["otherData"]
    leaf = [e for e in doc["traceEvents"] if e.get("name") == "leaf"]
    assert {(e["ts"], e["dur"]) for e in leaf} == {(1000002.5, 0.5), (1000004.5, 0.6), (1000002.0, 0.25)}
    assert all(e["args"] == {"file": FILE, "line": 20} for e in leaf)

    # functions by their figures: calls, self and total nanoseconds (the test clock: nothing taken off)
    figures = {f["name"]: (f["calls"], f["self_ns"], f["total_ns"]) for f in res.report.functions}
    assert figures == {"main": (1, 2000, 6000), "work": (2, 4200, 5750), "leaf": (3, 1350, 1350),
                       LEN_NAME: (1, 200, 200)}

    convert(rec, tmp_path / "s.pstats")
    st = pstats.Stats(str(tmp_path / "s.pstats")).stats
    main, work, leaf, length = (FILE, 1, "main"), (FILE, 10, "work"), (FILE, 20, "leaf"), ("~", 0, LEN_NAME)
    assert set(st) == {main, work, leaf, length}
    counts = {k: (v[0], v[1]) for k, v in st.items()}
    assert counts == {main: (1, 1), work: (2, 2), leaf: (3, 3), length: (1, 1)}
    times = {k: (round(v[2] * 1e9), round(v[3] * 1e9)) for k, v in st.items()}  # (tottime, cumtime) in ns
    assert times == {main: (2000, 6000), work: (4200, 5750), leaf: (1350, 1350), length: (200, 200)}
    callers = {k: {c: e[:2] for c, e in v[4].items()} for k, v in st.items()}
    # (worker's work() is a root: its thread has no frame below it)
    assert callers == {main: {}, work: {main: (1, 1)}, leaf: {work: (3, 3)}, length: {work: (1, 1)}}


def test_the_calibration_block_maps_the_ticks(tmp_path):
    """A CALIB block after the header, whose rate it replaces: 24 bytes with one rate; then two of 40
    bytes (the last calibration wins: the first has no final rate yet), an early rate up to a knee and
    the final rate after it.  Each slice's times follow the formula of docs/recording.md exactly."""
    base = sound_blocks()
    # one rate, 2 ns per tick, from tick 1000 at 5 ms
    write(tmp_path / "one.ocular", base[0], rb.calib(1000, 5_000_000, 2.0), *base[1:])
    convert(tmp_path / "one.ocular", tmp_path / "one.json")
    got = slices(tmp_path / "one.json")
    one = lambda t: 5_000_000 + (t - 1000) * 2  # noqa: E731
    assert got[WORKER_TID] == [("work", one(1500), one(3250), False), ("leaf", one(2500), one(2750), False)]
    # the early rate (4 ns per tick) up to the knee at tick 3000, the final one (0.5) after it
    write(tmp_path / "knee.ocular", base[0], rb.calib(0, 0, 0.0, 3.0), rb.calib(1000, 5_000_000, 0.5, 4.0, 3000),
          *base[1:])
    convert(tmp_path / "knee.ocular", tmp_path / "knee.json")
    got = slices(tmp_path / "knee.json")
    knee = lambda t: 5_000_000 + (t - 1000) * 4 if t < 3000 else 5_008_000 + (t - 3000) // 2  # noqa: E731
    assert got[WORKER_TID] == [("work", knee(1500), knee(3250), False), ("leaf", knee(2500), knee(2750), False)]
    assert ("main", knee(1000), knee(7000), False) in got[MAIN_TID]


# ---------------------------------------------------------------------------------------------
# a recording cut short


@pytest.mark.parametrize("which", ["last chunk", "the chunk before it"])
def test_a_recording_cut_in_a_chunk_renders_the_complete_blocks(tmp_path, which):
    """The sound recording cut inside its last CHUNK block (thread 1's second: work's return), or inside
    the one before it (thread 0's second), so that block and every one after it, END included, are lost;
    cut in the block's header, in a record, one byte before its end.  The command line exits 0, says the
    recording was cut short and counts the records of the complete chunks; the JSON is valid and
    balanced, and each thread's open slices are closed at that thread's own last record (work of thread
    1 at leaf's return, tick 2750; main and work of thread 0 at len's return, 4200), not at the last
    record of the recording.  The whole recording is not said to be cut short."""
    data = b"".join(sound_blocks())
    *_, (t_prev, off_prev, n_prev), (t_last, off_last, n_last), (t_end, _, _) = rb.blocks(data)
    assert (t_prev, t_last, t_end) == (rb.BLK_CHUNK, rb.BLK_CHUNK, rb.BLK_END)
    worker = expect(("work", 1500, 2750), ("leaf", 2500, 2750))
    if which == "last chunk":
        off, n, events = off_last, n_last, 13
        want = {MAIN_TID: EXPECTED[MAIN_TID], WORKER_TID: worker}
    else:
        off, n, events = off_prev, n_prev, 9
        want = {MAIN_TID: expect(("main", 1000, 4200), ("work", 2000, 4200), ("leaf", 3000, 3500),
                                 (LEN_NAME, 4000, 4200)),
                WORKER_TID: worker}
    for cut in (off + 3, off + 8 + 8 + 5, off + 8 + n - 1):
        rec = tmp_path / f"cut{cut}.ocular"
        rec.write_bytes(data[:cut])
        status, err = cli_convert(rec, tmp_path / "cut.json")
        assert status == 0, err
        assert f"{events} events" in err and "the recording was cut short" in err, err
        assert slices(tmp_path / "cut.json") == want, cut
        assert thread_names(tmp_path / "cut.json") == {MAIN_TID: "MainThread", WORKER_TID: "worker"}
        res = convert(rec, tmp_path / "api.json")
        assert not res["complete"] and res["events"] == events
    status, err = cli_convert(write(tmp_path / "whole.ocular", data), tmp_path / "whole.json")
    assert status == 0 and "14 events" in err and "cut short" not in err, err


# ---------------------------------------------------------------------------------------------
# a block this renderer does not know


def test_an_unknown_block_type_is_skipped(tmp_path):
    """Blocks of type 99 (13 payload bytes: padded to 16) and 1000 (empty) after the header, between the
    codes and the threads, between chunks, before and after END: the JSON trace and the pstats output
    are byte for byte those of the recording without them."""
    base = sound_blocks()
    odd, empty = rb.block(99, b"not a block!\xff"), rb.block(1000, b"")
    assert len(odd) == 8 + 16 and len(empty) == 8
    assert [t for t, _, _ in rb.blocks(b"".join(base))] == [1, 2, 2, 2, 2, 3, 3, 4, 4, 4, 4, 7]
    mixed = [base[0], odd, *base[1:5], empty, *base[5:8], odd, base[8], odd, *base[9:11], empty, base[11], odd]
    write(tmp_path / "plain.ocular", *base)
    write(tmp_path / "mixed.ocular", *mixed)
    for suffix in ("json", "pstats"):
        convert(tmp_path / "plain.ocular", tmp_path / f"plain.{suffix}")
        convert(tmp_path / "mixed.ocular", tmp_path / f"mixed.{suffix}")
        assert (tmp_path / f"mixed.{suffix}").read_bytes() == (tmp_path / f"plain.{suffix}").read_bytes()
    assert slices(tmp_path / "mixed.json") == EXPECTED


def test_an_unknown_mark_is_passed_over(tmp_path):
    """The room for new record kinds (render.h: a new OC_MARK_*): marks this renderer does not know (7, 1000,
    the payload's largest) before an enter, a return and a C call, each at the next record's time, leave the
    JSON trace, the pstats output and the report's rows as they are without them."""
    def marked(records):
        out = []
        for i, r in enumerate(records):
            if i in (1, 3, 4):
                out.append((r[0], 0xFFFFFFFF, rb.K_MARK, (7, 1000, (1 << 28) - 1)[(1, 3, 4).index(i)]))
            out.append(r)
        return out

    base = sound_blocks()
    assert [t for t, _, _ in rb.blocks(b"".join(base))][7:11] == [4, 4, 4, 4]  # (the main thread's: 7 and 9)
    odd = [*base[:7], rb.chunk(0, marked(T0[:6])), base[8], rb.chunk(0, marked(T0[6:])), *base[10:]]
    assert len(b"".join(odd)) == len(b"".join(base)) + 5 * 16  # (three marks in the first chunk, two in the second)
    write(tmp_path / "plain.ocular", *base)
    write(tmp_path / "odd.ocular", *odd)
    rows = {}
    for name in ("plain", "odd"):
        convert(tmp_path / f"{name}.ocular", tmp_path / f"{name}.pstats")
        res = convert(tmp_path / f"{name}.ocular", tmp_path / f"{name}.json")
        rows[name] = sorted((f["name"], f["calls"], f["self_ns"], f["total_ns"]) for f in res.report.functions)
    for suffix in ("json", "pstats"):
        assert (tmp_path / f"odd.{suffix}").read_bytes() == (tmp_path / f"plain.{suffix}").read_bytes(), suffix
    assert rows["odd"] == rows["plain"] and slices(tmp_path / "odd.json") == EXPECTED


# ---------------------------------------------------------------------------------------------
# a version this Ocular does not read


@pytest.mark.parametrize("version", [1, 3, 99])
def test_a_wrong_version_is_a_clear_error(tmp_path, version):
    """The sound recording with another version in its HEADER: the command line exits 1 with one line
    naming the version and the one it reads, no traceback, no output; convert() raises ValueError with
    the same words."""
    base = sound_blocks()
    rec = write(tmp_path / "v.ocular", rb.header(version=version, pid=PID, tsc0=TSC0, mono0_ns=MONO0), *base[1:])
    said = f"recording format version {version} is not supported (this Ocular reads version {rb.VERSION})"
    status, err = cli_convert(rec, tmp_path / "v.json")
    assert status == 1, err
    assert err.startswith("python -m ocular convert: error: ") and said in err, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    with pytest.raises(ValueError, match=r"version \d+ is not supported") as exc:
        convert(rec, tmp_path / "v.json")
    assert said in str(exc.value)
    assert not (tmp_path / "v.json").exists()
    assert sorted(os.listdir(tmp_path)) == ["v.ocular"]  # (no temporary output left either)


# ---------------------------------------------------------------------------------------------
# ends with no begin, enters over frames whose end was never recorded


def test_unmatched_ends_are_ignored_and_enters_close_deeper_frames(tmp_path):
    """One thread: a return at depth 1 before anything began (code running before tracing) and a return
    at depth 3 with nothing open there are ignored (no slice, no count); an enter at depth 2 while frames
    at depths 2 and 3 are open (b, c: their returns never recorded) closes them, and a return at depth 1
    while frames at depths 2 and 3 are open (e, f) closes those: the closed frames end at the thread's
    record before (c's C call returned at 4700; g at 6950), their children whole.  The report counts the
    four whose end was inferred as calls without an end, not in their rows' calls, but keeps their time
    in their rows (no time in no row: the self times add up to the root's total); pstats counts every call
    once."""
    a, b, c, d, e, f, old, x, g, h = range(10)
    names = "a b c d e f old x".split() + ["<built-in method g>", "<built-in method h>"]
    codes = [rb.code(i, n, FILE, 100 + i) for i, n in enumerate(names[:8])]
    codes += [rb.c_function(g, names[g]), rb.c_function(h, names[h])]
    records = [(1000, old, K_RETURN, 1),                              # ignored: nothing open
               (2000, a, K_START, 1), (3000, b, K_START, 2), (4000, c, K_START, 3),
               (4500, h, K_CCALL, 3), (4700, h, K_CRETURN, 3),
               (5000, d, K_START, 2),                                 # closes c and b at 4700
               (6000, d, K_RETURN, 2),
               (6500, x, K_RETURN, 3),                                # ignored: nothing open at depth 3
               (6600, e, K_START, 2), (6800, f, K_START, 3), (6900, g, K_CCALL, 3), (6950, g, K_CRETURN, 3),
               (7000, a, K_RETURN, 1)]                                # closes f and e at 6950
    rec = write(tmp_path / "u.ocular", rb.header(pid=PID, tsc0=TSC0, mono0_ns=MONO0), *codes,
                rb.thread(0, 7, 70, "only"), rb.chunk(0, records), rb.end(8000, len(records)))
    res = convert(rec, tmp_path / "u.json")
    assert res["events"] == len(records)
    assert slices(tmp_path / "u.json") == {7: expect(
        ("a", 2000, 7000), ("b", 3000, 4700), ("c", 4000, 4700), (names[h], 4500, 4700), ("d", 5000, 6000),
        ("e", 6600, 6950), ("f", 6800, 6950), (names[g], 6900, 6950))}
    # the report: the four whose only end was inferred have 0 calls (counted apart, as calls without an
    # end) and their measured time, up to the end the trace gives them
    rows = {fn["name"]: (fn["calls"], fn["total_ns"], fn["self_ns"]) for fn in res.report.functions}
    assert rows == {"a": (1, 5000, 1950), "d": (1, 1000, 1000), names[g]: (1, 50, 50), names[h]: (1, 200, 200),
                    "b": (0, 1700, 1000), "c": (0, 700, 500), "e": (0, 350, 200), "f": (0, 150, 100)}
    assert sum(s for _, _, s in rows.values()) == rows["a"][1]
    assert sorted((u["name"], u["calls"]) for u in res.report.unended) == [("b", 1), ("c", 1), ("e", 1), ("f", 1)]
    # the text: b's row has 0 calls and no mean (no whole call to take one of), and the line says where the
    # four calls' time is
    text = res.report.format(width=None)
    (b_row,) = [ln.split() for ln in text.splitlines() if ln.split()[-2:-1] == ["b"]]
    assert b_row[:5] == ["0", "1.0us", "20.0%", "1.7us", "-"], text
    assert "4 calls had no end seen" in text and "not in the rows' calls, but in their times" in text, text
    convert(rec, tmp_path / "u.pstats")
    st = pstats.Stats(str(tmp_path / "u.pstats")).stats
    assert sorted(k[2] for k in st) == sorted([*"abcdef", names[g], names[h]])
    assert all(v[1] == 1 for v in st.values())


# ---------------------------------------------------------------------------------------------
# a flight-recorder window


OUTER, MID, LEAF_W, MID2, RUN, SLEEP = range(6)
SLEEP_NAME = "<built-in method time.sleep>"
WINDOW_CODES = [rb.code(OUTER, "outer", FILE, 1), rb.code(MID, "mid", FILE, 5), rb.code(LEAF_W, "leaf", FILE, 9),
                rb.code(MID2, "mid2", FILE, 13), rb.code(RUN, "run", FILE, 17), rb.c_function(SLEEP, SLEEP_NAME)]
# thread 0: inside mid (depth 2) inside outer (depth 1) when the window begins; both end in it
W0 = [(10_000, LEAF_W, K_START, 3), (10_500, LEAF_W, K_RETURN, 3), (11_000, MID, K_RETURN, 2),
      (11_500, MID2, K_START, 2), (12_000, MID2, K_RETURN, 2), (13_000, OUTER, K_RETURN, 1)]
# thread 1: inside time.sleep called by run (depth 1) since before the window; then a call of leaf at depth 1
W1 = [(10_200, SLEEP, K_CRETURN, 1), (10_250, RUN, K_RETURN, 1), (10_300, LEAF_W, K_START, 1),
      (10_400, LEAF_W, K_RETURN, 1)]


@pytest.mark.parametrize("ring,empty_first", [(True, False), (True, True), (False, False)])
def test_a_flight_recorder_window_opens_the_frames_begun_before_it(tmp_path, ring, empty_first):
    """HEADER flag 2 and a WINDOW block at tick 9000; thread 0's first kept record is at 10000, inside
    mid inside outer, whose returns come later; thread 1's first record is the return of time.sleep (a C
    call), then run returns.  The frames that began before the window are opened at their thread's first
    kept record and marked cut ("cut": true in the slice's args), nested as their depths say; the others
    are whole and not marked.  Without the flag (and its WINDOW block) those returns match nothing and
    are ignored.  (empty_first: thread 0's first chunk has no record -- a damaged recording -- and changes
    nothing: the cut frames open at the first record kept, not at tick 0.)"""
    blocks = [rb.header(flags=rb.F_RING if ring else 0, pid=PID, tsc0=TSC0, mono0_ns=MONO0),
              *([rb.window(9000)] if ring else []), *WINDOW_CODES,
              rb.thread(0, 501, 5010, "MainThread"), rb.thread(1, 502, 5020, "poller"),
              *([rb.chunk(0, [])] if empty_first else []), rb.chunk(0, W0[:3]), rb.chunk(1, W1), rb.chunk(0, W0[3:]),
              rb.end(14_000, len(W0) + len(W1))]
    rec = write(tmp_path / "w.ocular", *blocks)
    convert(rec, tmp_path / "w.json")
    got = slices(tmp_path / "w.json")
    whole = {501: [("leaf", 10_000, 10_500), ("mid2", 11_500, 12_000)], 502: [("leaf", 10_300, 10_400)]}
    cut = {501: [("outer", 10_000, 13_000, True), ("mid", 10_000, 11_000, True)],
           502: [("run", 10_200, 10_250, True), (SLEEP_NAME, 10_200, 10_200, True)]}
    assert got == {tid: expect(*whole[tid], *(cut[tid] if ring else [])) for tid in whole}
    cut_args = sorted((e["name"], e["args"]) for e in json.loads((tmp_path / "w.json").read_text())["traceEvents"]
                      if e.get("args", {}).get("cut"))
    assert cut_args == ([(SLEEP_NAME, {"file": "~", "line": 0, "cut": True}),
                         ("mid", {"file": FILE, "line": 5, "cut": True}),
                         ("outer", {"file": FILE, "line": 1, "cut": True}),
                         ("run", {"file": FILE, "line": 17, "cut": True})] if ring else [])


# ---------------------------------------------------------------------------------------------
# many threads


def test_three_hundred_threads_each_keep_their_track_and_name(tmp_path):
    """300 threads, each with a THREAD block and one CHUNK (task -> leaf; task returns in even threads),
    interleaved as a recorder writes them; every third thread is marked ended by a THREAD block with
    flag 1 right after its chunk, and every fifth is named only then (its first THREAD block has an
    empty name).  Expect 300 distinct tids, each with its own slices and name: a task left open closes at
    the stop (tick 100000), or at its thread's last record if the thread ended.  The pstats counts are
    300 tasks and 300 leaves."""
    n, stop = 300, 100_000
    blocks = [rb.header(pid=PID, tsc0=TSC0, mono0_ns=MONO0), rb.code(0, "task", FILE, 30),
              rb.code(1, "leaf", FILE, 40)]
    want, names = {}, {}
    for i in range(n):
        tid, t0, name = 30_000 + i, 1000 + 10 * i, f"worker-{i}"
        late = i % 5 == 0
        blocks.append(rb.thread(i, tid, 7_000_000 + i, "" if late else name))
        records = [(t0, 0, K_START, 1), (t0 + 3, 1, K_START, 2), (t0 + 7, 1, K_RETURN, 2)]
        if i % 2 == 0:
            records.append((t0 + 9, 0, K_RETURN, 1))
        blocks.append(rb.chunk(i, records))
        ended = i % 3 == 0
        if ended or late:
            blocks.append(rb.thread(i, tid, 7_000_000 + i, name, flags=rb.THREAD_ENDED if ended else 0))
        task_end = t0 + 9 if i % 2 == 0 else t0 + 7 if ended else stop
        want[tid] = expect(("task", t0, task_end), ("leaf", t0 + 3, t0 + 7))
        names[tid] = name
    blocks.append(rb.end(stop, sum(4 if i % 2 == 0 else 3 for i in range(n))))
    rec = write(tmp_path / "many.ocular", *blocks)
    res = convert(rec, tmp_path / "many.json")
    assert res["events"] == sum(4 if i % 2 == 0 else 3 for i in range(n))
    got = slices(tmp_path / "many.json")
    assert len(got) == n
    assert got == want
    assert thread_names(tmp_path / "many.json") == names
    convert(rec, tmp_path / "many.pstats")
    st = pstats.Stats(str(tmp_path / "many.pstats")).stats
    assert {k: v[:2] for k, v in st.items()} == {(FILE, 30, "task"): (n, n), (FILE, 40, "leaf"): (n, n)}


def test_a_thread_without_a_thread_block_is_named_on_its_own_track(tmp_path):
    """A killed process's recording can hold a thread's chunks without its THREAD block (the recorder
    writes them lazily).  Thread 5 has chunks and no THREAD block, thread 6 both.  Expect thread 5's slices
    on tid 5 (its index) and its name ("thread") given to tid 5 in the JSON metadata and in the .pftrace's
    thread descriptors -- not to a tid 0 that carries no slice."""
    records = [(1000, 0, K_START, 1), (1500, 0, K_RETURN, 1)]
    rec = write(tmp_path / "nothread.ocular", rb.header(pid=PID, tsc0=TSC0, mono0_ns=MONO0), rb.code(0, "f", FILE, 3),
                rb.chunk(5, records), rb.chunk(6, records), rb.thread(6, 606, 6_000_606, "six"), rb.end(2000, 4))
    convert(rec, tmp_path / "t.json")
    assert slices(tmp_path / "t.json") == {5: expect(("f", 1000, 1500)), 606: expect(("f", 1000, 1500))}
    assert thread_names(tmp_path / "t.json") == {5: "thread", 606: "six"}
    pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2",
                        reason="perfetto (PyPI) decodes the .pftrace: requirements-test.txt installs it")
    from test_perfetto import read_packets

    convert(rec, tmp_path / "t.pftrace")
    packets, _ = read_packets(str(tmp_path / "t.pftrace"))
    named = {p.track_descriptor.thread.tid: p.track_descriptor.thread.thread_name for p in packets
             if p.HasField("track_descriptor") and p.track_descriptor.HasField("thread")}
    assert named == {5: "thread", 606: "six"}, named


# ---------------------------------------------------------------------------------------------
# near-zero: a sampling window opens inside a recursion whose frames were not recorded

FIB_CODES = (0, 1, 2)  # main, fib (de-instrumented at stop), len


def fib_window_rows(tmp_path, records):
    """A near-zero recording of main, fib and len with `records` on one thread and windows W1 [400, 600)
    and W2 [1500, 1600), converted: the report's rows of main, fib and len, and the result."""
    main, fib, ln = FIB_CODES
    codes = [rb.code(main, "main", FILE, 1), rb.code(fib, "fib", FILE, 10), rb.c_function(ln, LEN_NAME)]
    rec = write(tmp_path / "w.ocular", rb.header(pid=PID, tsc0=0, mono0_ns=MONO0, flags=rb.F_NEAR_ZERO,
                                                 threshold=500), *codes,
                rb.thread(0, 7, 70, "MainThread"), rb.sampling([(400, 600), (1500, 1600)]),
                rb.chunk(0, records), rb.codestate([(fib, rb.CF_START_DISABLED, 500)]),
                rb.end(2100, len(records)))
    res = convert(rec, tmp_path / "w.json")
    rows = {f["name"]: f for f in res.report.functions}
    return rows["main"], rows["fib"], rows[LEN_NAME], res

def test_a_window_inside_an_unrecorded_recursion_gives_its_time_to_the_callees(tmp_path):
    """Near-zero mode: main (depth 1) recurses into fib, de-instrumented, from about 10 to 1010 ticks,
    then works on its own to 2000.  Window W1 [400, 600) opens at fib's depth 6: fib frames begun before
    it return unmatched (at 420 and 500: their callers, fib frames at depths 5 and 4, were not recorded)
    and two new calls are recorded (hidden).  Window W2 [1500, 1600) sees main's own work (a C call of
    its marks that main runs).  All of W1 is fib's, none of it main's own, even the gaps after a return
    whose caller was not recorded (before: main's, which left main 1,521 ticks of self against ~1,000).
    The expected figures follow attrib.c's arithmetic: main's self outside windows from the first on,
    A = 900 + 400 = 1,300, split as its window ticks are: own B = 99 (W2 after the C call), hidden
    callees 201 (fib's recorded self 40 and the tails 160, len's 1): 1,300 x 201/300 = 871 of main's
    measured self 1,959 is its callees'.  (The gap that straddles W1's begin counts outside windows only
    from the begin on: none of [0, 400), where no window stands for anything.)"""
    main, fib, ln = FIB_CODES
    mark = (0, 0xFFFFFFFF, rb.K_MARK, rb.MARK_SAMPLED)
    records = [(0, main, K_START, 1),
               (420, fib, K_RETURN, 6),                          # begun before W1: unmatched
               (440, *mark[1:]), (440, fib, K_START, 6), (460, fib, K_RETURN, 6),  # a call inside W1
               (500, fib, K_RETURN, 5),                          # unmatched
               (540, *mark[1:]), (540, fib, K_START, 5), (560, fib, K_RETURN, 5),
               (1500, *mark[1:]), (1500, ln, K_CCALL, 1), (1501, ln, K_CRETURN, 1),  # main's own, in W2
               (2000, main, K_RETURN, 1)]
    m, f, c, res = fib_window_rows(tmp_path, records)
    assert m["measured"]["self_ns"] == 1959 and m["total_ns"] == 2000
    assert res.report.sampling["windows"] == 2
    removed = 1300 * 201 / 300
    assert m["self_ns"] == pytest.approx(1959 - removed, abs=1), (m, f)
    # (the tails, whose own code is not known, are spread over the hidden callees' self times in proportion)
    assert f["self_ns"] == pytest.approx(40 + removed * 40 / 41, abs=1), (m, f)
    assert c["self_ns"] == pytest.approx(1 + removed / 41, abs=1), (m, c)
    assert "self" in m["estimated_fields"] and "self" in f["estimated_fields"]
    # no time in no row: the estimates move time between rows, they make none
    assert m["self_ns"] + f["self_ns"] + c["self_ns"] == pytest.approx(2000, abs=1)


def test_a_window_that_sees_only_ends_of_unrecorded_calls_keeps_their_time(tmp_path):
    """As above, but W1 sees no new call of fib, only two ends of calls begun before it (at 420 and 500),
    and main's C call in W2 is a recorded one (visible: its own row).  W1's ticks are all tails of main's
    callee fib -- none is main's own -- and with no hidden frame's self time to spread them over, they are
    fib's: 1,300 x 200/299 of main's measured self goes to fib's row (fib has no measured call: a row of
    estimates only), nothing to no row."""
    main, fib, ln = FIB_CODES
    records = [(0, main, K_START, 1), (420, fib, K_RETURN, 6), (500, fib, K_RETURN, 5),
               (1500, ln, K_CCALL, 1), (1501, ln, K_CRETURN, 1), (2000, main, K_RETURN, 1)]
    m, f, c, res = fib_window_rows(tmp_path, records)
    moved = 1300 * 200 / 299
    assert m["self_ns"] == pytest.approx(1999 - moved, abs=1), (m, f)
    assert f["self_ns"] == pytest.approx(moved, abs=1) and f["measured"]["calls"] == 0, f
    assert c["self_ns"] == 1
    assert m["self_ns"] + f["self_ns"] + c["self_ns"] == pytest.approx(2000, abs=1)


# ---------------------------------------------------------------------------------------------
# near-zero: what a window shows of a thread that records nothing in it, and where outside time starts

WORK, UNIT, YIELD = 0, 1, 2
YIELD_NAME = "<built-in method posix.sched_yield>"


def work_rows(tmp_path, chunks, windows, kick=None):
    """A near-zero recording of work, which calls unit (de-instrumented) and the C function sched_yield,
    on threads 0 and 1 (chunks: thread index -> records), converted: the rows of work, unit, sched_yield
    (None: no row)."""
    codes = [rb.code(WORK, "work", FILE, 20), rb.code(UNIT, "unit", FILE, 10), rb.c_function(YIELD, YIELD_NAME)]
    rec = write(tmp_path / "w.ocular", rb.header(pid=PID, tsc0=0, mono0_ns=MONO0, flags=rb.F_NEAR_ZERO,
                                                 threshold=500), *codes,
                rb.thread(0, 7, 70, "MainThread"), rb.thread(1, 8, 80, "worker"), rb.sampling(windows, kick=kick),
                *[rb.chunk(i, r) for i, r in chunks.items()], rb.codestate([(UNIT, rb.CF_START_DISABLED, 500)]),
                rb.end(3100, sum(len(r) for r in chunks.values())))
    res = convert(rec, tmp_path / "w.json")
    rows = {f["name"]: f for f in res.report.functions}
    return rows["work"], rows["unit"], rows.get(YIELD_NAME)


def test_a_thread_silent_through_a_window_was_in_a_c_call(tmp_path):
    """Two threads run work; window W [1000, 2000).  Thread 0 runs in W: unit 300 ticks and sched_yield 100
    (hidden: recorded inside W only), work's own 600.  Thread 1 records nothing from 0 to 3000: it was
    blocked in a sched_yield begun before W (a de-instrumented C call site records no return on 3.12), as
    a worker waiting for the GIL is.  All of its time in W is a C callee's, none of it work's own (before:
    work's own, which made its own share of the time outside windows 1,600/2,000 instead of 600/2,000).
    attrib.c's arithmetic: work's self outside windows from W's begin on A = 1,000 + 1,000; in W, own 600,
    unit 300, sched_yield 100 + the silent 1,000: scale 2,000 / 2,000 = 1, so 1,400 of work's measured self
    5,600 goes to its callees: unit 300, sched_yield 1,100."""
    mark = (0xFFFFFFFF, rb.K_MARK, rb.MARK_SAMPLED)
    t0 = [(0, WORK, K_START, 1),
          (1000, *mark), (1000, UNIT, K_START, 2), (1300, UNIT, K_RETURN, 2),
          (1400, *mark), (1400, YIELD, K_CCALL, 1), (1500, YIELD, K_CRETURN, 1),
          (3000, WORK, K_RETURN, 1)]
    t1 = [(0, WORK, K_START, 1), (3000, WORK, K_RETURN, 1)]
    w, u, y = work_rows(tmp_path, {0: t0, 1: t1}, [(1000, 2000)])
    assert w["measured"]["self_ns"] == 5600 and w["total_ns"] == 6000, w
    assert w["self_ns"] == pytest.approx(5600 - 1400, abs=1), (w, u, y)
    assert u["self_ns"] == pytest.approx(300 + 300, abs=1), u
    assert y["self_ns"] == pytest.approx(100 + 1100, abs=1), y
    assert "self" in w["estimated_fields"] and "self" in y["estimated_fields"]
    assert w["self_ns"] + u["self_ns"] + y["self_ns"] == pytest.approx(6000, abs=1)


def test_a_thread_silent_through_a_window_with_no_c_callee_keeps_its_time(tmp_path):
    """As above, but thread 0 calls no C function in W: nothing says what thread 1 was in (a thread waiting
    for the GIL at a bytecode runs no call), so its window time stays work's own.  A = 2,000; in W own
    600 + 100 + 1,000 silent, unit 300: 2,000 x 300 / 2,000 goes to unit."""
    mark = (0xFFFFFFFF, rb.K_MARK, rb.MARK_SAMPLED)
    t0 = [(0, WORK, K_START, 1), (1000, *mark), (1000, UNIT, K_START, 2), (1300, UNIT, K_RETURN, 2),
          (3000, WORK, K_RETURN, 1)]
    t1 = [(0, WORK, K_START, 1), (3000, WORK, K_RETURN, 1)]
    w, u, _ = work_rows(tmp_path, {0: t0, 1: t1}, [(1000, 2000)])
    assert w["self_ns"] == pytest.approx(5700 - 300, abs=1), (w, u)
    assert u["self_ns"] == pytest.approx(300 + 300, abs=1), u


@pytest.mark.parametrize("kick", [None, 500])
def test_outside_time_counts_from_the_first_de_instrumentation(tmp_path, kick):
    """One thread: work calls unit, recorded until 200; unit is de-instrumented at 500 (the SAMPLING
    block's kick trailer says when); the first window opens late, W [1500, 2000) (on 3.12 busy threads
    kept it from opening for up to ~90 ms), and sees unit 300, work's own 200.  From the kick on, work's
    recorded self holds unit's calls: A = 1,000 before W + 1,000 after; 2,000 x 300/500 = 1,200 is unit's
    (before: A counted from W's begin only, 1,000: work kept 600 of unit's time as its own).  A recording
    without the trailer (an older one) still counts from the first window."""
    mark = (0xFFFFFFFF, rb.K_MARK, rb.MARK_SAMPLED)
    t0 = [(0, WORK, K_START, 1), (100, UNIT, K_START, 2), (200, UNIT, K_RETURN, 2),
          (1500, *mark), (1500, UNIT, K_START, 2), (1800, UNIT, K_RETURN, 2), (3000, WORK, K_RETURN, 1)]
    w, u, _ = work_rows(tmp_path, {0: t0}, [(1500, 2000)], kick=kick)
    moved = 1200 if kick else 600
    assert w["measured"]["self_ns"] == 2600, w
    assert w["self_ns"] == pytest.approx(2600 - moved, abs=1), (w, u)
    assert u["self_ns"] == pytest.approx(400 + moved, abs=1), u
