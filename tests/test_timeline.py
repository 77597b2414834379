"""The rebuilt timeline: JSON validity (complete events, read as B/E by conftest.load_trace), balance and nesting, exact slice sequences, exceptions,
generators and coroutines, sessions started or stopped inside running code, deep recursion,
de-instrumentation (threshold) and loop instants (adaptive and precise mode).

Most programs run in a fresh interpreter (run_py) so that the traced code objects are new and the
chronology is deterministic; the snippets get the trace path as sys.argv[1].  deinstrument_threshold=0
is used wherever the full chronology matters.
"""

import collections
import json
import re

import pytest

import ocular
from conftest import check_balanced, load_trace, names, run_py

PRELUDE = """
import functools, json, sys
import ocular
OUT = sys.argv[1]
# no Python frames of our own around start/stop: the trace holds only the snippet's functions
start = functools.partial(ocular.start_tracing, output=OUT, deinstrument_threshold=0, report=False,
                          loops="iterations")  # loop instants: what these tests look at
stop = ocular.stop_tracing
"""


def trace_snippet(code, trace_path, **kw):
    """Run PRELUDE + code in a fresh interpreter; returns (completed process, trace events)."""
    p = run_py(PRELUDE + code, trace_path, **kw)
    return p, load_trace(trace_path)["traceEvents"]


def sequence(events, keep=None):
    """[("B"|"E", name), ...] per the B/E order of the (single-threaded) trace, E named after its B."""
    out, stack = [], []
    for e in events:
        if e["ph"] == "B":
            stack.append(e["name"])
            if keep is None or e["name"] in keep:
                out.append(("B", e["name"]))
        elif e["ph"] == "E":
            name = stack.pop()
            if keep is None or name in keep:
                out.append(("E", name))
    return out


def all_slices(events):
    """Every reconstructed slice (name, begin, end, depth), from check_balanced (which must pass)."""
    return [s for per_thread in check_balanced(events).values() for s in per_thread]


def loop_instants(events, prefix):
    return [e for e in events if e["ph"] == "i" and e["name"].startswith(prefix)]


# ---------------------------------------------------------------------------------------------
# JSON validity


def test_json_valid_balanced_monotonic_in_process(trace_path):
    """In-process session (pytest's own frames are running): valid envelope, balanced, monotonic."""
    src = (
        "def leaf(i):\n    return i + 1\n"
        "def mid(n):\n    return [leaf(i) for i in range(n)]\n"
        "def outer():\n    return sum(mid(5)) + sum(mid(3))\n"
    )
    ns = {}
    exec(compile(src, "<timeline-inproc>", "exec"), ns)  # fresh code objects for this session
    ocular.start_tracing(output=trace_path, deinstrument_threshold=0, report=False, loops="iterations")
    try:
        ns["outer"]()
    finally:
        res = ocular.stop_tracing()
    data = load_trace(trace_path)
    events = data["traceEvents"]
    slices = check_balanced(events)
    assert res["events"] > 0
    assert data["otherData"]["mode"] == "adaptive"
    assert data["otherData"]["threshold"] == 0

    got = collections.Counter(names(events))
    assert got["outer"] == 1 and got["mid"] == 2 and got["leaf"] == 8
    # every leaf is strictly inside a mid, every mid inside outer
    per_thread = [s for v in slices.values() for s in v]
    outer = [s for s in per_thread if s[0] == "outer"]
    mids = [s for s in per_thread if s[0] == "mid"]
    leaves = [s for s in per_thread if s[0] == "leaf"]
    assert len(outer) == 1
    assert all(outer[0][1] <= m[1] and m[2] <= outer[0][2] and m[3] == outer[0][3] + 1 for m in mids)
    for lf in leaves:
        assert any(m[1] <= lf[1] and lf[2] <= m[2] and lf[3] >= m[3] + 1 for m in mids)

    # field shapes
    for e in events:
        assert e["ph"] in ("B", "E", "i", "M"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "B":
            assert e["cat"] == "python"
            assert isinstance(e["name"], str) and e["name"]
            assert set(e["args"]) >= {"file", "line"}
            assert isinstance(e["args"]["line"], int)
        if e["ph"] in ("B", "E", "i"):
            assert isinstance(e["ts"], (int, float))
    b = next(e for e in events if e["ph"] == "B" and e["name"] == "mid")
    assert b["args"] == {"file": "<timeline-inproc>", "line": 3}
    # metadata comes last
    kinds = [e["ph"] for e in events]
    first_m = kinds.index("M")
    assert all(k == "M" for k in kinds[first_m:])
    # timestamps are microseconds with exactly three decimals in the file text
    with open(trace_path, encoding="utf-8") as f:
        text = f.read()
    stamps = re.findall(r'"(?:ts|dur)":([0-9.eE+-]+)', text)
    assert stamps and all(re.fullmatch(r"\d+\.\d{3}", s) for s in stamps), stamps[:5]
    # in the file, a slice is one complete event, written when it ends: no B/E, ends in file order
    raw = load_trace(trace_path, raw=True)["traceEvents"]
    assert {e["ph"] for e in raw} <= {"X", "i", "M"}, {e["ph"] for e in raw}
    xs = [e for e in raw if e["ph"] == "X"]
    assert collections.Counter(e["name"] for e in xs) == got
    assert all(e["cat"] == "python" and e["dur"] >= 0 for e in xs)
    ends = [round(e["ts"] * 1000) + round(e["dur"] * 1000) for e in xs]
    assert ends == sorted(ends)
    assert xs[-1]["name"] == "outer" and [e["name"] for e in xs[:2]] == ["leaf", "leaf"]


def test_exact_sequence_of_slices(trace_path):
    """f calls g twice, g calls h: exact nested order, counts, depths, file and first lines."""
    code = """
def h():
    return 1

def g():
    return h() + 1

def f():
    return g() + g()

start()
f()
stop()
print(json.dumps({n: c.__code__.co_firstlineno for n, c in (("f", f), ("g", g), ("h", h))}))
"""
    p, events = trace_snippet(code, trace_path)
    lines = json.loads(p.stdout)
    seq = sequence(events, keep={"f", "g", "h"})
    assert seq == [
        ("B", "f"),
        ("B", "g"), ("B", "h"), ("E", "h"), ("E", "g"),
        ("B", "g"), ("B", "h"), ("E", "h"), ("E", "g"),
        ("E", "f"),
    ]
    slices = all_slices(events)
    depth = {s[0]: s[3] for s in slices}
    assert depth["g"] == depth["f"] + 1 and depth["h"] == depth["f"] + 2
    for e in events:
        if e["ph"] == "B" and e["name"] in lines:
            assert e["args"]["file"] == "<string>"
            assert e["args"]["line"] == lines[e["name"]]
    # nothing else was traced on the main thread while f ran: only these three functions
    assert collections.Counter(names(events)) == {"f": 1, "g": 2, "h": 2}


def test_exception_through_three_frames(trace_path):
    """A raise 3 frames down caught at the top: every frame has its slice; the catcher goes on."""
    code = """
def c3():
    raise KeyError("k")

def c2():
    c3()

def c1():
    c2()

def after():
    return 2

def top():
    try:
        c1()
    except KeyError:
        pass
    return after()

start()
top()
stop()
"""
    _, events = trace_snippet(code, trace_path)
    assert sequence(events) == [
        ("B", "top"), ("B", "c1"), ("B", "c2"), ("B", "c3"),
        ("E", "c3"), ("E", "c2"), ("E", "c1"),
        ("B", "after"), ("E", "after"),
        ("E", "top"),
    ]
    depth = {s[0]: s[3] for s in all_slices(events)}
    assert depth == {"top": 0, "c1": 1, "c2": 2, "c3": 3, "after": 1}


def test_exception_caught_in_the_middle_keeps_depths(trace_path):
    """Caught halfway down: the catcher's later calls nest under it at the right depth."""
    code = """
def deep():
    raise ValueError("v")

def mid():
    deep()

def catcher():
    try:
        mid()
    except ValueError:
        pass
    return sibling()

def sibling():
    return 1

def top():
    catcher()
    return sibling()

start()
top()
stop()
"""
    _, events = trace_snippet(code, trace_path)
    assert sequence(events) == [
        ("B", "top"), ("B", "catcher"), ("B", "mid"), ("B", "deep"),
        ("E", "deep"), ("E", "mid"),
        ("B", "sibling"), ("E", "sibling"),
        ("E", "catcher"),
        ("B", "sibling"), ("E", "sibling"),
        ("E", "top"),
    ]
    got = [(s[0], s[3]) for s in all_slices(events) if s[0] == "sibling"]
    assert got == [("sibling", 2), ("sibling", 1)]


# ---------------------------------------------------------------------------------------------
# generators and coroutines


def test_generator_for_loop_has_n_plus_one_segments(trace_path):
    """A generator of 5 items consumed by a for loop: 1 start + 5 resumes = 6 slices, children of
    the consumer, disjoint and in order; a generator expression consumed by sum() likewise."""
    code = """
def gen(n):
    for i in range(n):
        yield i

def consume():
    t = 0
    for x in gen(5):
        t += x
    return t

def consume_genexpr():
    return sum(x * 2 for x in range(7))

start()
consume()
consume_genexpr()
stop()
"""
    _, events = trace_snippet(code, trace_path)
    slices = all_slices(events)
    gens = sorted((s for s in slices if s[0] == "gen"), key=lambda s: s[1])
    (cons,) = [s for s in slices if s[0] == "consume"]
    assert len(gens) == 6
    for s in gens:
        assert s[3] == cons[3] + 1
        assert cons[1] <= s[1] <= s[2] <= cons[2]
    for a, b in zip(gens, gens[1:]):
        assert a[2] <= b[1]
    genexprs = [s for s in slices if s[0] == "consume_genexpr.<locals>.<genexpr>"]
    assert len(genexprs) == 8


def test_generator_throw_and_close_balance(trace_path):
    """throw() caught inside (generator yields again), throw() escaping, close() running a finally
    block that calls a function, close() of a plain generator, and a generator collected while
    suspended: balanced, and the resumed segments are where they should be."""
    code = """
def catching():
    while True:
        try:
            yield 1
        except ValueError:
            pass

def plain(n):
    for i in range(n):
        yield i

def cleanup():
    return 0

def with_finally():
    try:
        yield 1
        yield 2
    finally:
        cleanup()

def drive():
    g = catching()
    next(g)
    g.throw(ValueError)           # caught: a PY_THROW segment ending in a yield
    g.throw(ValueError)
    g.close()                     # GeneratorExit escapes the except ValueError: one more segment
    p = plain(10)
    next(p)
    try:
        p.throw(KeyError("x"))    # escapes: a PY_THROW segment ending in an unwind
    except KeyError:
        pass
    w = with_finally()
    next(w)
    w.close()                     # GeneratorExit runs the finally block, which calls cleanup()
    q = plain(10)
    next(q)
    q.close()
    r = plain(10)
    next(r)
    del r
    return 1

start()
drive()
stop()
"""
    _, events = trace_snippet(code, trace_path)
    slices = all_slices(events)
    count = collections.Counter(s[0] for s in slices)
    assert count["drive"] == 1
    assert count["catching"] == 4      # next, two caught throws, close
    assert count["with_finally"] == 2  # next + close (the finally runs)
    assert count["cleanup"] == 1
    (cl,) = [s for s in slices if s[0] == "cleanup"]
    wf = [s for s in slices if s[0] == "with_finally"]
    assert any(s[1] <= cl[1] and cl[2] <= s[2] and cl[3] == s[3] + 1 for s in wf)
    # plain: the next() calls (3) and the escaping throw (1); close() and collection run the frame
    # on 3.12 (+2) but not on 3.13, which skips it when the yield is outside any try block
    assert 4 <= count["plain"] <= 6
    (drive,) = [s for s in slices if s[0] == "drive"]
    for s in slices:
        if s[0] != "drive":
            assert s[3] > drive[3] and drive[1] <= s[1] and s[2] <= drive[2], s


def test_async_gather_balanced(trace_path):
    """asyncio.run + gather of 4 tasks that await asyncio.sleep(0): balanced, every coroutine is
    there, and each coroutine has one slice per resume segment."""
    code = """
import asyncio

async def leaf(i):
    await asyncio.sleep(0)
    return i

async def worker(i):
    for _ in range(3):
        await asyncio.sleep(0)
    return await leaf(i)

async def main():
    return await asyncio.gather(*(worker(i) for i in range(4)))

start()
print(asyncio.run(main()))
stop()
"""
    p, events = trace_snippet(code, trace_path)
    assert p.stdout.strip() == "[0, 1, 2, 3]"
    check_balanced(events)
    count = collections.Counter(names(events))
    assert count["main"] >= 1
    # worker: start, 3 sleeps, 1 more suspension inside leaf -> 5 segments; leaf: 2 segments
    assert count["worker"] == 4 * 5
    assert count["leaf"] == 4 * 2


# ---------------------------------------------------------------------------------------------
# sessions starting or stopping inside running code


def test_start_inside_nested_calls(trace_path):
    """start_tracing 3 frames deep: those frames' returns have no begin and are dropped; the calls
    made afterwards at every level are traced, each at the top of the timeline."""
    code = """
def a3():
    start()
    inner()

def a2():
    a3()
    after2()

def a1():
    a2()
    after1()

def inner():
    return 0

def after2():
    return 2

def after1():
    return 1

def after_all():
    return 3

a1()
after_all()
stop()
"""
    _, events = trace_snippet(code, trace_path)
    slices = all_slices(events)  # also: no E without B
    assert names(events) == ["inner", "after2", "after1", "after_all"]
    assert [s[3] for s in slices] == [0, 0, 0, 0]
    assert len([e for e in events if e["ph"] == "E"]) == 4


def test_stop_inside_nested_calls(trace_path):
    """stop_tracing 5 frames deep: the 5 open slices are closed at the stop time, after everything."""
    code = """
def y():
    return 1

def s5():
    y()
    stop()

def s4():
    s5()

def s3():
    s4()

def s2():
    s3()

def s1():
    s2()

start()
s1()
"""
    _, events = trace_snippet(code, trace_path)
    slices = all_slices(events)
    assert names(events) == ["s1", "s2", "s3", "s4", "s5", "y"]
    ends = {s[0]: s[2] for s in slices}
    stamps = [e["ts"] for e in events if e["ph"] in ("B", "E", "i")]
    last = max(stamps)
    for n in ("s1", "s2", "s3", "s4", "s5"):
        assert ends[n] == last
    assert ends["y"] <= last
    assert [s[3] for s in sorted(slices, key=lambda s: s[1])] == [0, 1, 2, 3, 4, 5]


def test_recursion_deeper_than_1000(trace_path):
    code = """
sys.setrecursionlimit(10000)

def rec(n):
    return 0 if n == 0 else 1 + rec(n - 1)

start()
rec(3000)
stop()
"""
    _, events = trace_snippet(code, trace_path)
    slices = [s for s in all_slices(events) if s[0] == "rec"]
    assert len(slices) == 3001
    base = min(s[3] for s in slices)
    assert sorted(s[3] - base for s in slices) == list(range(3001))
    # properly nested: deeper activations end no later than shallower ones
    by_depth = sorted(slices, key=lambda s: s[3])
    for outer, inner in zip(by_depth, by_depth[1:]):
        assert outer[1] <= inner[1] and inner[2] <= outer[2]


# ---------------------------------------------------------------------------------------------
# de-instrumentation


@pytest.mark.parametrize("near_zero", [False, True])
def test_threshold_500_limits_slices(trace_path, near_zero):
    """Near-zero mode: a function's slices stop at the threshold.  By default every call is a slice; the
    loop's back edge is de-instrumented either way."""
    code = """
def small():
    return 1

def other():
    return 2

def caller():
    for i in range(2000):
        small()
    other()

start(deinstrument_threshold=500, near_zero=NEAR_ZERO, sampling=False)  # (the recorded calls alone: no window's)
caller()
stop()
""".replace("NEAR_ZERO", repr(near_zero))
    _, events = trace_snippet(code, trace_path)
    check_balanced(events)
    count = collections.Counter(names(events))
    assert 500 <= count["small"] <= 501 if near_zero else count["small"] == 2000
    assert count["caller"] == 1 and count["other"] == 1
    # the loop's back edge is de-instrumented after 500 hits too: 500 recorded jumps, 499 instants
    assert len(loop_instants(events, "loop caller:")) == 499


def test_threshold_recursive_function_slices_end_at_their_return(trace_path):
    code = """
import time
sys.setrecursionlimit(5000)

def rec(n):
    return 0 if n == 0 else 1 + rec(n - 1)

def marker():
    return 0

def main():
    rec(1000)
    time.sleep(0.002)   # untraced C time between rec's return and marker's start
    marker()

start(deinstrument_threshold=500, near_zero=True, sampling=False)
main()
stop()
"""
    _, events = trace_snippet(code, trace_path)
    slices = all_slices(events)
    recs = [s for s in slices if s[0] == "rec"]
    (mk,) = [s for s in slices if s[0] == "marker"]
    assert len(recs) == 500
    late = [s for s in recs if s[2] >= mk[1]]
    assert not late, f"{len(late)} rec slices end at or after marker's start ({mk[1]})"


# ---------------------------------------------------------------------------------------------
# loop instants

LOOP_CODE = """
def loop():
    total = 0
    for i in range(1000):
        total += i * 2
    return total

def nested():
    t = 0
    for i in range(10):
        for j in range(20):
            t += j
    return t

def short(n):
    s = 0
    for i in range(n):
        s += i
    return s

start(mode=MODE)
loop()
nested()
short(1)
short(2)
short(3)
stop()
import dis
lines = {}
for fn in (loop, nested, short):
    lines[fn.__name__] = [ins.positions.lineno for ins in dis.get_instructions(fn) if ins.opname == "FOR_ITER"]
print(json.dumps(lines))
"""


def _loops(mode, trace_path):
    p, events = trace_snippet(f"MODE = {mode!r}\n" + LOOP_CODE, trace_path)
    return json.loads(p.stdout), events


@pytest.mark.parametrize("mode", ["adaptive", "precise"])
def test_loop_instants_single_loop(mode, trace_path):
    lines, events = _loops(mode, trace_path)
    check_balanced(events)
    inst = loop_instants(events, "loop loop:")
    (for_line,) = lines["loop"]
    assert len(inst) == 999  # 1000 iterations, the first one is not reported
    for e in inst:
        assert e["cat"] == "loop" and e["s"] == "t"
        assert e["name"] == f"loop loop:{for_line}"
        assert e["args"]["line"] == for_line
        assert set(e["args"]) >= {"line", "offset", "instructions", "cycles"}
        assert e["args"].get("file", "<string>") == "<string>"  # optional: the name holds the code
        assert e["args"]["instructions"] > 0
        assert e["args"]["cycles"] >= 0 and e["args"].get("ns", 0) >= 0
        assert e["args"]["offset"] % 2 == 0
    assert len({e["args"]["instructions"] for e in inst}) == 1  # straight-line body
    assert len({e["args"]["offset"] for e in inst}) == 1
    # every instant lies inside loop's slice, on the same thread
    (lp,) = [s for s in all_slices(events) if s[0] == "loop"]
    assert all(lp[1] <= e["ts"] <= lp[2] for e in inst)


@pytest.mark.parametrize("mode", ["adaptive", "precise"])
def test_loop_instants_nested_and_short(mode, trace_path):
    lines, events = _loops(mode, trace_path)
    check_balanced(events)
    outer_line, inner_line = lines["nested"]
    inst = loop_instants(events, "loop nested:")
    per_line = collections.Counter(e["args"]["line"] for e in inst)
    # the inner loop restarts at each outer iteration: 10 runs of 20 iterations -> 10 * 19
    assert per_line == {inner_line: 10 * 19, outer_line: 9}
    # n iterations -> n - 1 instants (one call per n: 0 + 1 + 2)
    assert len(loop_instants(events, "loop short:")) == 0 + 1 + 2


def test_precise_instructions_match_adaptive_static_count(tmp_path):
    """For a straight-line loop body, the executed count (precise) equals the static count."""
    counts = {}
    for mode in ("adaptive", "precise"):
        path = str(tmp_path / f"{mode}.json")
        _, events = _loops(mode, path)
        assert load_trace(path)["otherData"]["mode"] == mode
        counts[mode] = {e["args"]["instructions"] for e in loop_instants(events, "loop loop:")}
        assert len(counts[mode]) == 1 and min(counts[mode]) > 0
    assert counts["adaptive"] == counts["precise"]


def test_loop_instants_default_threshold_stop_after_threshold(trace_path):
    """Adaptive mode with the default threshold: the back edge is recorded 500 times -> 499 instants,
    all with the same positive static instruction count."""
    code = """
def loop():
    total = 0
    for i in range(2000):
        total += i * 2
    return total

ocular.start_tracing(output=OUT, report=False, loops="iterations")
loop()
stop()
"""
    _, events = trace_snippet(code, trace_path)
    check_balanced(events)
    inst = loop_instants(events, "loop loop:")
    assert len(inst) == 499
    assert len({e["args"]["instructions"] for e in inst}) == 1
    assert inst[0]["args"]["instructions"] > 0


def test_loop_break_reports_iterations_ended_by_the_back_edge(trace_path):
    """break at i == 500: iterations 0..499 end with the back edge (500 jumps) -> 499 instants."""
    code = """
def with_break():
    for i in range(1000):
        if i == 500:
            break
    return i

start()
with_break()
stop()
"""
    _, events = trace_snippet(code, trace_path)
    check_balanced(events)
    assert len(loop_instants(events, "loop with_break:")) == 499


def test_while_loop_instants(trace_path):
    """A while loop of 1000 iterations: one loop, at the loop's line.  CPython 3.12/3.13 test the
    condition again at the bottom, so the last iteration leaves forward (no back edge): 998 or 999."""
    code = """
def while_loop():
    i = 0
    while i < 1000:
        i += 1
    return i

start()
while_loop()
stop()
"""
    _, events = trace_snippet(code, trace_path)
    check_balanced(events)
    inst = loop_instants(events, "loop while_loop:")
    assert 998 <= len(inst) <= 999
    assert len({e["name"] for e in inst}) == 1
    assert len({e["args"]["instructions"] for e in inst}) == 1


def test_loop_with_continue_reports_every_iteration(trace_path):
    code = """
def with_continue():
    total = 0
    for i in range(1000):
        if i % 2:
            continue
        total += i
    return total

start()
with_continue()
stop()
"""
    _, events = trace_snippet(code, trace_path)
    check_balanced(events)
    inst = loop_instants(events, "loop with_continue:")
    assert len({e["args"]["line"] for e in inst}) == 1
    assert len(inst) == 999


# ---------------------------------------------------------------------------------------------
# more unwinding


def test_recursion_error_unwinds_balanced(trace_path):
    """RecursionError raised ~2000 frames down and caught at the top: every frame unwinds, the
    catcher's next call is at depth 1."""
    code = """
sys.setrecursionlimit(2000)

def r(n):
    return r(n + 1)

def after():
    return 1

def top():
    try:
        r(0)
    except RecursionError:
        return after()

start()
top()
stop()
"""
    _, events = trace_snippet(code, trace_path)
    slices = all_slices(events)
    rs = [s for s in slices if s[0] == "r"]
    assert len(rs) > 1000
    base = min(s[3] for s in rs)
    assert sorted(s[3] - base for s in rs) == list(range(len(rs)))
    assert [(s[0], s[3]) for s in slices if s[0] in ("top", "after")] == [("after", 1), ("top", 0)]


def test_task_cancellation_balanced(trace_path):
    """A task cancelled while suspended: the CancelledError thrown into it is a resume segment of
    its own (PY_THROW), the handler's call nests in it, and everything is balanced."""
    code = """
import asyncio

def cleanup():
    return 0

async def sleeper():
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        cleanup()
        raise

async def amain():
    task = asyncio.create_task(sleeper())
    await asyncio.sleep(0)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return "cancelled"

start()
print(asyncio.run(amain()))
stop()
"""
    p, events = trace_snippet(code, trace_path)
    assert p.stdout.strip() == "cancelled"
    slices = all_slices(events)
    sl = sorted((s for s in slices if s[0] == "sleeper"), key=lambda s: s[1])
    assert len(sl) == 2  # start .. suspended in sleep(10); thrown CancelledError .. unwind
    (cl,) = [s for s in slices if s[0] == "cleanup"]
    assert sl[1][1] <= cl[1] and cl[2] <= sl[1][2] and cl[3] == sl[1][3] + 1


# ---------------------------------------------------------------------------------------------
# JSON escaping


def test_names_and_files_are_escaped(trace_path):
    """Non-ASCII qualnames and file names with quotes and backslashes survive the JSON encoding."""
    code = r'''
src = "def caf\u00e9():\n    return 1\nclass K\u00f6:\n    def m(self):\n        return caf\u00e9()\n"
ns = {}
exec(compile(src, 'we"ird\\fi\u00e9le.py', "exec"), ns)
start()
ns["K\u00f6"]().m()
stop()
'''
    _, events = trace_snippet(code, trace_path)
    check_balanced(events)
    got = {e["name"]: e["args"] for e in events if e["ph"] == "B"}
    assert got["caf\u00e9"] == {"file": 'we"ird\\fi\u00e9le.py', "line": 1}
    assert got["K\u00f6.m"] == {"file": 'we"ird\\fi\u00e9le.py', "line": 4}


def test_loops_after_four_sequential_loops(trace_path):
    """Four 10-iteration loops, then a 10 x 10 nested loop, in one function: 9 instants per simple
    loop, 10 * 9 for the inner loop and 9 for the outer one."""
    code = """
def many():
    t = 0
    for a in range(10):
        t += a
    for b in range(10):
        t += b
    for c in range(10):
        t += c
    for d in range(10):
        t += d
    for i in range(10):
        for j in range(10):
            t += j
    return t

start()
many()
stop()
import dis
print(json.dumps([ins.positions.lineno for ins in dis.get_instructions(many) if ins.opname == "FOR_ITER"]))
"""
    p, events = trace_snippet(code, trace_path)
    check_balanced(events)
    a, b, c, d, outer, inner = json.loads(p.stdout)
    per_line = collections.Counter(e["args"]["line"] for e in loop_instants(events, "loop many:"))
    assert per_line[inner] == 10 * 9
    assert [per_line[x] for x in (a, b, c, d)] == [9, 9, 9, 9]
    assert per_line[outer] == 9


# ---------------------------------------------------------------------------------------------
# de-instrumentation keeps the real end of every recorded call (monitor.c's per-thread open stack)

SHARED_CALLEE = """
import threading
go_b, go_a = threading.Event(), threading.Event()
def f(first):
    if first:
        go_b.set()
        go_a.wait()        # thread A's recorded call stays open while B calls f past the threshold
def target_a():
    f(True)
def target_b():
    go_b.wait()
    for _ in range(10):
        f(False)           # the same code at the same frame depth: 2 more recorded, then de-instrumented
    go_a.set()
a = threading.Thread(target=target_a)
b = threading.Thread(target=target_b)
a.start(); b.start(); a.join(); b.join()
"""

DEEP_RECURSION = """
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
def descend(n):
    return descend(n - 1) if n else fib(15)     # 1,973 calls, from 100 frames down
descend(100)
"""


def report_row(tmp_path, prog, name, *args):
    from test_api import run_cli

    (tmp_path / "prog.py").write_text(prog)
    p = run_cli("--no-sampling", "--report-json", "--report", "r.json", "-o", "t.json", *args, "prog.py",
                cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = [f for f in json.loads((tmp_path / "r.json").read_text())["functions"] if f["name"] == name]
    assert len(rows) == 1, rows
    return rows[0], load_trace(str(tmp_path / "t.json"))["traceEvents"]


def test_another_threads_calls_do_not_end_a_recorded_call(tmp_path):
    """Thread A's call of f is recorded and open while thread B calls f at the same depth until f's
    start is de-instrumented (threshold 3) and its unrecorded ends return.  Expect A's call to keep its
    real end (its return recorded, not inferred later): 3 calls, none truncated.  (With one record of
    open calls per code and depth for all threads, B's unrecorded return took A's, f's return sites were
    disabled, and A's end was inferred at its caller's next event.)"""
    row, events = report_row(tmp_path, SHARED_CALLEE, "f", "--near-zero", "--threshold", "3")
    assert row["calls"] == 3 and row["truncated"] == 0, row
    check_balanced(events)


def test_recorded_calls_deeper_than_64_frames_keep_their_ends(tmp_path):
    """Recursion from 100 frames down in near-zero mode at threshold 500: the recorded calls' returns stay
    armed while any of them is open, at any depth.  Expect every recorded fib call to end with its real
    return: 500 calls, none truncated.  (Open calls were kept as a bit per depth below 64: deeper ones
    were not seen, fib's return sites were disabled, and the outer calls' ends were inferred.)"""
    row, events = report_row(tmp_path, DEEP_RECURSION, "fib", "--near-zero")
    assert row["calls"] == 500 and row["truncated"] == 0, row
    assert names(events).count("fib") == 500
    row, events = report_row(tmp_path, DEEP_RECURSION, "fib")  # by default: every call, every end
    assert row["calls"] == 1973 and row["truncated"] == 0, row
    assert names(events).count("fib") == 1973
    check_balanced(events)


def test_a_loop_whose_body_yields_is_counted_across_resumes(tmp_path):
    """for i in range(n): yield i -- one backward jump per activation segment: the renderer carries the
    generator's loop over its suspension, so the report counts its iterations (it showed none), each
    timed by the generator's own time (not the consumer's between two resumes), and the JSON trace shows
    no loop run spanning the suspensions (its slices stay nested)."""
    code = """
import json, sys, time, ocular
def gen(n):
    for i in range(n):
        yield i
def consume():
    for x in gen(300):
        time.sleep(0.0002)  # the consumer's time between two resumes: not the loop's
ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=0, report=False)
consume()
ocular.stop_tracing()
rep = ocular.last_report().to_dict()
print(json.dumps([lp for lp in rep["loops"] if lp["function"] == "gen"]))
"""
    out = tmp_path / "t.json"
    p = run_py(code, str(out))
    (lp,) = json.loads(p.stdout)
    assert 295 <= lp["iterations"] <= 299, lp  # (the first segments hold no complete iteration)
    # each iteration timed by the generator's own time: its cycles are its self cycles (the wall time since
    # the last backward jump would hold the consumer's sleep between two resumes)
    assert lp["cycles_per_iteration"] == lp["self_cycles_per_iteration"], lp
    events = load_trace(out)["traceEvents"]
    check_balanced(events)
    assert not [e for e in events if e.get("cat") == "loop" and "gen" in e["name"]]  # no run across yields


def test_loops_carried_over_a_yield_stay_with_their_generator():
    """100 generators of one code, each `for i in range(2): yield i`, one after another: each counts the
    one iteration that spans its second suspension, and none inherits the loop of the one before it
    (which would count its first backward jump too: 200)."""
    p = run_py("""
        import json, sys, ocular
        def g():
            for i in range(2):
                yield i
        ocular.start_tracing(perfetto=False, deinstrument_threshold=0, report=False)
        for _ in range(100):
            list(g())
        ocular.stop_tracing()
        print(json.dumps([lp["iterations"] for lp in ocular.last_report().to_dict()["loops"] if lp["function"] == "g"]))
    """)
    assert json.loads(p.stdout) == [100]
