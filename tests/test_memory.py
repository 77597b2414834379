"""Memory (issue 32, items 6 and 7): what the renderer keeps depends on the threads alive at once, not on the
threads ever seen (a thread's end is in the recording: a THREAD block with flag 1 after its last chunk, and
the renderer frees its stacks, chunks and sink state there); a rendered output costs no more resident
memory than about twice the `.ocular` recording's run, whatever the trace's length (the recording's pages
leave the resident set behind the reader); and the stop of a program with 300,000 functions adds far less
than it did (the renderer's code table in an arena, smaller per-code statistics).

Peak RSS is measured from a small wrapper process (conftest.RSS_CHILD): ru_maxrss of a child forked from
pytest would count pytest's own RSS.  The bounds are generous (2x or more what this code takes) and
below what the code before these changes took."""

import json
import os
import struct
import sys

import pytest

from conftest import OS_THREADS, RSS_CHILD, SRC, check_balanced, load_trace, run_py

BLK_THREAD, BLK_CHUNK = 3, 4

THREADS = OS_THREADS + """
import sys, threading
n = int(sys.argv[1])
def leaf(x):
    return x + 1
def mid(x):
    return leaf(x) * 2
def work():
    for i in range(3):
        mid(i)
for i in range(n):  # started one after the other: one or two alive at once
    t = threading.Thread(target=work)
    t.start()
    t.join()
# join() returns when a thread's Python state is done, before its OS thread's destructors have run (they
# say the thread ended): wait until only this thread and Ocular's are left
import time
def others():
    return len([c for c in thread_names() if not c.startswith("ocular")]) - 1
deadline = time.monotonic() + 60
while others() and time.monotonic() < deadline:
    time.sleep(0.01)
"""


def peak(tmp_path, *args, timeout=120):
    """(exit status, peak RSS in MiB, stderr) of `python *args` run from the wrapper"""
    p = run_py(RSS_CHILD, sys.executable, *args, cwd=str(tmp_path), env={"PYTHONPATH": SRC}, timeout=timeout,
               check=False)
    status, rss_kb = map(int, p.stdout.splitlines()[-1].split())
    return status, rss_kb / 1024, p.stderr


def script(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def blocks(data):
    off = 0
    while off + 8 <= len(data):
        t, n = struct.unpack_from("<II", data, off)
        if off + 8 + n > len(data):
            return
        yield t, off, n
        off = (off + 8 + n + 7) & ~7


def test_many_short_threads_cost_the_threads_alive_not_the_threads_ever_seen(tmp_path):
    """20,000 threads started one after the other at threshold 0, rendered to .pftrace while the program
    runs and at stop: the process stays under 128 MB (it took 257 MB, ~11 KB a thread ever seen)."""
    prog = script(tmp_path, "threads.py", THREADS)
    status, mb, err = peak(tmp_path, "-m", "ocular", "--threshold", "0", "--no-report", "-o",
                           str(tmp_path / "t.pftrace"), prog, "20000")
    assert status == 0, err
    assert "0 dropped" in err, err
    assert mb < 128, f"{mb:.0f} MB for 20,000 short threads"


def test_many_threads_recording_converts_in_bounded_memory(tmp_path):
    """convert of a recording of 20,000 short threads: every THREAD block after a thread's last chunk says
    it ended, and convert to .pftrace and speedscope stays under 100 MB (.pftrace took 241 MB)."""
    prog = script(tmp_path, "threads.py", THREADS)
    rec = tmp_path / "t.ocular"
    status, mb, err = peak(tmp_path, "-m", "ocular", "--threshold", "0", "--no-report", "-o", str(rec), prog,
                           "20000")
    assert status == 0, err
    data = rec.read_bytes()
    ended, last_chunk = {}, {}
    for t, off, n in blocks(data):
        if t == BLK_CHUNK:
            idx = struct.unpack_from("<I", data, off + 8)[0]
            assert idx not in ended, "a chunk after its thread's end"
            last_chunk[idx] = off
        elif t == BLK_THREAD:
            idx, flags = struct.unpack_from("<II", data, off + 8)
            if flags & 1:
                assert idx in last_chunk and idx not in ended
                ended[idx] = off
    # every worker thread ended (the main thread did not; the program waits for the last workers' OS threads
    # to be gone: until 2026-11-29 it did not, and a loaded machine's stop came before the last few ends)
    assert len(ended) == 20000, len(ended)
    for out in ("c.pftrace", "c.speedscope.json"):
        status, mb, err = peak(tmp_path, "-m", "ocular", "convert", str(rec), "-o", str(tmp_path / out))
        assert status == 0, err
        assert mb < 100, f"convert to {out}: {mb:.0f} MB"


def test_the_profile_formats_of_many_threads_keep_1000_trees(tmp_path):
    """The profile formats (pstats, gecko, folded, HTML...) are written from a call tree per thread: past
    1,000 threads the others share one tree, named as merged, so 20,000 short threads render .pstats and
    .gecko.json under 100 MB (.pstats took 277 MB), with every call still counted (pstats sums the threads anyway)."""
    import pstats
    prog = script(tmp_path, "threads.py", THREADS)
    out, gecko = tmp_path / "t.pstats", tmp_path / "t.gecko.json"
    status, mb, err = peak(tmp_path, "-m", "ocular", "--threshold", "0", "--no-report", "-o", str(out), "-o",
                           str(gecko), prog, "20000")
    assert status == 0, err
    assert mb < 100, f".pstats and .gecko.json of 20,000 threads: {mb:.0f} MB"
    calls = {k[2]: v[1] for k, v in pstats.Stats(str(out)).stats.items()}
    assert calls["work"] == 20000 and calls["mid"] == 60000 and calls["leaf"] == 60000, calls
    names = [t["name"] for t in json.loads(gecko.read_text())["threads"]]
    merged = [n for n in names if "threads (merged: past the first 1000)" in n]
    assert len(merged) == 1 and len(names) == 1001, (len(names), names[:3], merged)
    # the main thread and 999 workers apart, the other 19,001 workers merged
    assert int(merged[0].split()[0]) == 20000 - 999, merged


def test_ended_threads_render_whole_and_named(tmp_path):
    """A thread's state freed at its end changes nothing in the trace: every thread keeps its name and its
    slices, balanced, rendered while recording (JSON) and by convert; a chunk of a thread index after that
    thread's end (a damaged recording) renders as a thread of its own."""
    prog = script(tmp_path, "threads.py", THREADS)
    rec = tmp_path / "t.ocular"
    e = dict(os.environ, PYTHONPATH=SRC)
    import subprocess

    for out in (rec, tmp_path / "live.json"):
        p = subprocess.run([sys.executable, "-m", "ocular", "--threshold", "0", "--no-report", "-o", str(out), prog,
                            "300"], env=e, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    p = subprocess.run([sys.executable, "-m", "ocular", "convert", str(rec), "-o", str(tmp_path / "c.json")], env=e,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    for path in (tmp_path / "live.json", tmp_path / "c.json"):
        doc = load_trace(str(path))
        evs = doc["traceEvents"]
        check_balanced(evs)
        names = {e["tid"]: e["args"]["name"] for e in evs if e.get("ph") == "M" and e.get("name") == "thread_name"}
        assert len(names) >= 301, len(names)
        works = collections_count(e["tid"] for e in evs if e.get("ph") == "B" and e.get("name", "").endswith("work"))
        assert len(works) == 300 and set(works.values()) == {1}, works
        leaves = sum(1 for e in evs if e.get("ph") == "B" and e.get("name", "").endswith("leaf"))
        assert leaves == 900
    # damaged: the first ended thread's end block moved before its last chunk (swap the two blocks)
    data = bytearray(rec.read_bytes())
    bl = list(blocks(data))
    for i, (t, off, n) in enumerate(bl):
        if t == BLK_THREAD and struct.unpack_from("<I", data, off + 12)[0] & 1:
            idx = struct.unpack_from("<I", data, off + 8)[0]
            j = max(k for k in range(i) if bl[k][0] == BLK_CHUNK and struct.unpack_from("<I", data, bl[k][1] + 8)[0] == idx)
            cs, cn = bl[j][1], (bl[j][2] + 8 + 7) & ~7
            ts, tn = off, (n + 8 + 7) & ~7
            assert cs + cn == ts  # (adjacent: written one after the other)
            data[cs:ts + tn] = data[ts:ts + tn] + data[cs:cs + cn]
            break
    bad = tmp_path / "bad.ocular"
    bad.write_bytes(bytes(data))
    p = subprocess.run([sys.executable, "-m", "ocular", "convert", str(bad), "-o", str(tmp_path / "b.json")], env=e,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    evs = load_trace(str(tmp_path / "b.json"))["traceEvents"]
    check_balanced(evs)
    assert sum(1 for e in evs if e.get("ph") == "B" and e.get("name", "").endswith("leaf")) == 900


def collections_count(it):
    import collections

    return collections.Counter(it)


FIB = """
import sys
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
fib(int(sys.argv[1]))
"""


def test_a_rendered_trace_costs_about_what_the_recording_run_costs(tmp_path):
    """fib(30) at threshold 0 (8 million events, a 130 MB recording): the .pftrace, JSON and pstats runs
    peak at most 2x the .ocular run plus 16 MB (the .pftrace run took 118 MB against 24 MB: the recording
    read whole into the resident set)."""
    prog = script(tmp_path, "fib.py", FIB)
    base = None
    for out in ("f.ocular", "f.pftrace", "f.json", "f.pstats"):
        status, mb, err = peak(tmp_path, "-m", "ocular", "--threshold", "0", "--no-report", "-o",
                               str(tmp_path / out), prog, "30")
        assert status == 0, err
        if base is None:
            base = mb
        else:
            assert mb <= 2 * base + 16, f"{out}: {mb:.0f} MB against {base:.0f} MB for the recording"
        os.unlink(tmp_path / out)


EXECS = """
import sys
for i in range(int(sys.argv[1])):
    exec(f"def f{i}(): return {i}\\nf{i}()")
"""


def test_the_stop_of_300000_functions_adds_far_less_than_it_did(tmp_path):
    """300,000 distinct functions (600,000 code objects) with --no-trace-file --no-report: the traced run
    peaks under the untraced one plus 480 MB (it was +530 MB: 720 MB against 190 MB; the recording phase
    alone takes ~+140 MB)."""
    prog = script(tmp_path, "execs.py", EXECS)
    status, untraced, err = peak(tmp_path, prog, "300000")
    assert status == 0, err
    status, traced, err = peak(tmp_path, "-m", "ocular", "--no-trace-file", "--no-report", prog, "300000")
    assert status == 0, err
    assert traced - untraced < 480, f"traced {traced:.0f} MB, untraced {untraced:.0f} MB"
