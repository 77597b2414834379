"""De-instrumentation and the hot-trace report (issue 3): DISABLE really stops events, restart_events by
another tool is survived, specialized opcodes show up, and with the deterministic test clock (one tick
per clock read, no own-cost subtraction) the report's figures are exact."""

import pytest
import json
import sys

from conftest import load_trace, check_balanced, run_py

GOLDEN_SRC = """
def leaf():
    pass

def mid():
    leaf()
    leaf()

def loop():
    t = 0
    for i in range(5):
        t += i * 2
    return t

mid()
loop()
"""


def run_golden(extra=""):
    p = run_py(f"""
        import json, ocular, ocular._ocular as o
        o._set_test_clock(True)
        ocular.start_tracing(perfetto=False, deinstrument_threshold=0, include_only=["/golden/prog.py"], report=False)
        exec(compile({GOLDEN_SRC!r}, "/golden/prog.py", "exec"), {{}})
        ocular.stop_tracing()
        rep = ocular.last_report()
        print(rep.to_json())
        print("=====")
        print(rep.format())
        {extra}
    """)
    js, text = p.stdout.split("=====\n")
    return json.loads(js), text


def test_golden_function_figures():
    rep, text = run_golden()
    assert rep["clock"] == "test" and rep["overhead_cycles_per_event"] == 0
    f = {x["name"]: x for x in rep["functions"]}
    # leaf: START and RETURN are consecutive clock reads -> 1 tick each call
    assert f["leaf"]["calls"] == 2
    assert f["leaf"]["self_cycles"] == 2 and f["leaf"]["total_cycles"] == 2
    assert f["leaf"]["mean_ns"] == 1.0 and f["leaf"]["stddev_ns"] == 0.0
    # mid: 3 gaps while on top (start->leaf, between leaves, leaf->return), 2 ticks in its callees
    assert f["mid"]["calls"] == 1
    assert f["mid"]["self_cycles"] == 3 and f["mid"]["total_cycles"] == 5
    assert not f["mid"]["deinstrumented"]
    # the table is rendered with those figures
    rows = [ln for ln in text.splitlines() if "leaf  " in ln]
    assert any(ln.split()[:3] == ["2", "2ns", "10.0%"] and ln.endswith("leaf  /golden/prog.py:2") for ln in rows), text


def test_golden_loop_disassembly():
    rep, text = run_golden()
    (lp,) = [x for x in rep["loops"] if x["function"] == "loop"]
    # 5 iterations, the first has no start: 4 measured, each exactly 2 events (FOR_ITER branch + JUMP_BACKWARD)
    assert lp["iterations"] == 4
    assert lp["cycles_per_iteration"] == 2.0
    assert lp["line"] == 11
    names = [(r["base"], r["specialized"]) for r in lp["rows"]]
    bases = [b for b, _ in names]
    assert bases[0] == "FOR_ITER" and bases[-1] == "JUMP_BACKWARD"
    assert "BINARY_OP" in bases
    assert all(r["line"] in (11, 12) for r in lp["rows"])
    assert "Hot loop loop at /golden/prog.py:11" in text


def test_a_loops_instructions_are_decoded_from_its_slice_as_dis_decodes_the_whole_code():
    """The report reads a loop's instructions from the bytecode and decodes the argument column of the
    rows it shows from a stand-in code object holding only their slice; what it gives must be what
    dis.get_instructions on the whole code gives for those offsets: base and specialized names, the
    argument column (jump targets as offsets), lines, for every loop of a few standard modules (all of
    its rows, and every third one alone) and for a specialized loop."""
    p = run_py("""
        import dis, importlib, types
        from ocular import _report as R

        def codes(co):
            yield co
            for c in co.co_consts:
                if isinstance(c, types.CodeType):
                    yield from codes(c)

        def key(i):
            arg = R._arg(i) or ("(fall-through of the jump above)" if i.opname == "NOT_TAKEN" else "")
            return (i.offset, i.opname, arg, i.positions.lineno if i.positions else None)

        def compare(co):
            n = bad = 0
            whole = list(dis.get_instructions(co, adaptive=True))  # (3.12 quickens superinstructions at once)
            base = {i.offset: i.opname for i in dis.get_instructions(co)}
            for ins in whole:
                if base[ins.offset] == "JUMP_BACKWARD":
                    lo, hi = ins.argval, ins.offset
                    want = [key(i) for i in whole if lo <= i.offset <= hi]
                    new = R._loop_instructions(co, lo, hi)
                    R._loop_args(co, new[::3])  # (a few rows alone, as the text decodes what it shows)
                    R._loop_args(co, new)
                    got = [(i.offset, i.opname, i.arg, i.line) for i in new]
                    n += 1
                    if want != got or any(i.base != base[i.offset] for i in new):
                        bad += 1
                        print("differs", co.co_name, lo, hi, want, got)
            return n, bad

        n = bad = 0
        for m in ["json.decoder", "re._parser", "argparse", "inspect", "tokenize", "difflib", "textwrap"]:
            for co in codes(importlib.import_module(m).__spec__.loader.get_code(m)):
                a, b = compare(co)
                n, bad = n + a, bad + b

        class P:
            def __init__(self):
                self.x = 1

        def hot(k):
            t, p, d = 0, P(), {"a": 1}
            for i in range(k):
                t += i * 2 + p.x + d["a"] + len(d)
            return t

        for _ in range(60):
            hot(300)
        spec = [i.opname for i in dis.get_instructions(hot.__code__, adaptive=True)]
        a, b = compare(hot.__code__)
        print("loops", n + a, "differ", bad + b, "specialized", sum(s not in dis.opmap for s in spec))
    """)
    last = p.stdout.split()
    assert last[-6] == "loops" and int(last[-5]) > 300, p.stdout
    assert last[-4:-2] == ["differ", "0"], p.stdout
    assert int(last[-1]) > 0, p.stdout  # (the specialized loop was specialized: its names were compared)


def test_specialized_opcodes_appear_in_adaptive_mode():
    p = run_py("""
        import ocular
        def work(n):
            total = 0
            for i in range(n):
                total += i * 2
            return total
        ocular.start_tracing(perfetto=False, deinstrument_threshold=500, report=False)
        work(3_000_000)
        ocular.stop_tracing()
        rep = ocular.last_report()
        (lp,) = [l for l in rep.loops if l["function"] == "work"]
        for r in lp["rows"]:
            print(r["base"], r["specialized"])
    """)
    pairs = [tuple(ln.split()) for ln in p.stdout.splitlines()]
    specialized = {s for b, s in pairs if b != s}
    assert "BINARY_OP_ADD_INT" in specialized or "BINARY_OP_MULTIPLY_INT" in specialized, pairs
    assert not any(s.startswith("INSTRUMENTED") or s == "INSTRUCTION" for _, s in pairs), pairs


def test_precise_mode_reports_per_instruction_cycles(trace_path):
    p = run_py(f"""
        import ocular
        def work(n):
            total = 0
            for i in range(n):
                total += i * 2
            return total
        ocular.start_tracing(mode="precise", deinstrument_threshold=0, output={trace_path!r}, report=False,
                             loops="iterations")
        work(2000)
        ocular.stop_tracing()
        rep = ocular.last_report()
        (lp,) = [l for l in rep.loops if l["function"] == "work"]
        print(sum(1 for r in lp["rows"] if r["cycles"] is not None), len(lp["rows"]), lp["instructions_per_iteration"])
        print(all(not r["specialized"].startswith("INSTRUMENTED") for r in lp["rows"]))
    """)
    with_cycles, nrows, ipi = p.stdout.split("\n")[0].split()
    assert int(with_cycles) == int(nrows) > 0
    assert float(ipi) >= int(nrows) - 1
    assert p.stdout.split("\n")[1] == "True"
    data = load_trace(trace_path)
    check_balanced(data["traceEvents"])
    loops = [e for e in data["traceEvents"] if e["ph"] == "i" and "work" in e["name"]]
    assert loops and all(e["args"]["instructions"] > 0 for e in loops)


@pytest.mark.parametrize("near_zero", [False, True])
def test_disable_stops_events_at_the_threshold(trace_path, near_zero):
    """Near-zero mode: a function's start answers DISABLE after the threshold (no sampling windows here: a
    window, the first of which opens as soon as f is de-instrumented, records the calls made while it is
    open).  By default every call is recorded whatever the threshold (only the loop's jump is
    de-instrumented)."""
    run_py(f"""
        import ocular
        def f(x):
            return x + 1
        ocular.start_tracing(deinstrument_threshold=100, output={trace_path!r}, report=False,
                             near_zero={near_zero!r}, sampling=False)
        for i in range(1000):
            f(i)
        ocular.stop_tracing()
    """)
    ev = load_trace(trace_path)["traceEvents"]
    check_balanced(ev)
    assert sum(1 for e in ev if e["ph"] == "B" and e["name"] == "f") == (100 if near_zero else 1000)


def test_restart_events_by_another_tool_is_survived(trace_path):
    p = run_py(f"""
        import sys, ocular
        mon = sys.monitoring
        def f(x):
            return x + 1
        ocular.start_tracing(deinstrument_threshold=50, output={trace_path!r}, report=False, near_zero=True,
                             sampling=False)  # (a window would record f's calls while it is open)
        for i in range(200):
            f(i)
        mon.use_tool_id(5, "other")
        mon.restart_events()        # re-arms every disabled site, ours included
        for i in range(200):
            f(i)
        r = ocular.stop_tracing()
        mon.free_tool_id(5)
        print(r.report.functions[0]["name"] if r.report.functions else "")
    """)
    ev = load_trace(trace_path)["traceEvents"]
    check_balanced(ev)
    # counters persist past the threshold: after the restart f is disabled again at its first event
    assert sum(1 for e in ev if e["ph"] == "B" and e["name"] == "f") == 50


def test_deinstrumented_functions_are_marked_as_samples():
    p = run_py("""
        import ocular
        def g():
            return 1
        ocular.start_tracing(perfetto=False, deinstrument_threshold=20, report="json", near_zero=True,
                             sampling=False)  # (the recorded calls alone: no window's)
        for i in range(500):
            g()
        ocular.stop_tracing()
    """)
    rep = json.loads(p.stderr.strip().splitlines()[-1])
    (g,) = [f for f in rep["functions"] if f["name"] == "g"]
    assert g["deinstrumented"] and g["sample"] and g["calls"] == 20


def test_report_text_goes_to_sys_stderr():
    p = run_py("""
        import io, sys, ocular
        buf = io.StringIO()
        sys.stderr = buf
        def h():
            return [i for i in range(100)]
        ocular.start_tracing(perfetto=False, deinstrument_threshold=0)
        h()
        ocular.stop_tracing()
        sys.stderr = sys.__stderr__
        print("captured" if "ocular report" in buf.getvalue() else "missing")
    """)
    assert p.stdout.strip() == "captured"
    assert "ocular report" not in p.stderr


def test_version_specific_opcodes_in_the_hot_loop():
    """The report names this interpreter's opcodes: 3.14 renamed the list subscript specialization
    (BINARY_SUBSCR -> BINARY_OP with BINARY_OP_SUBSCR_LIST_INT) and added NOT_TAKEN after conditional
    jumps; none of the instrumented forms leak into the rows."""
    p = run_py("""
        import ocular
        def work(lst, n):
            total = 0
            for i in range(n):
                if lst[i % 4]:
                    total += i
            return total
        ocular.start_tracing(perfetto=False, deinstrument_threshold=500, report=False)
        work([0, 1, 2, 3], 200_000)
        ocular.stop_tracing()
        rep = ocular.last_report()
        (lp,) = [l for l in rep.loops if l["function"] == "work"]
        for r in lp["rows"]:
            print(r["base"], r["specialized"], "|", r["arg"])
        print("TEXT", "NOT_TAKEN" in rep.format())
    """)
    rows = [ln.split(" | ")[0].split() + [ln.split(" | ")[1]] for ln in p.stdout.splitlines() if " | " in ln]
    pairs = {(b, s) for b, s, _ in rows}
    if sys.version_info >= (3, 14):
        assert ("BINARY_OP", "BINARY_OP_SUBSCR_LIST_INT") in pairs, rows
        nt = [r for r in rows if r[0] == "NOT_TAKEN"]
        assert nt and nt[0][2] == "(fall-through of the jump above)", rows
        assert "TEXT True" in p.stdout
    else:
        assert ("BINARY_SUBSCR", "BINARY_SUBSCR_LIST_INT") in pairs, rows
        assert not any(b == "NOT_TAKEN" for b, _s, _a in rows), rows
    assert not any(s.startswith("INSTRUMENTED") for _b, s, _a in rows), rows


def test_block_cycles_are_split_by_the_instruction_probe():
    """Adaptive mode: a block's measured cycles per execution are split among its instructions in
    proportion to the instruction probe's figures; a call instruction (whose probe figure includes any
    de-instrumented callee) gets what the other instructions leave; no probe: evenly."""
    from ocular._report import _block_shares

    # offset -> (block executions, block ticks, block end, probe executions, probe ticks)
    units = {0: (10, 1000, 6, 5, 50), 2: (0, 0, 0, 5, 850), 4: (0, 0, 0, 5, 50), 6: (0, 0, 0, 5, 50)}
    assert _block_shares(units, [0, 2, 4, 6], set(), 100.0) == {0: 5.0, 2: 85.0, 4: 5.0, 6: 5.0}
    # offset 2 is a call: the others keep their probe figures (10 each), the call the remaining 70
    assert _block_shares(units, [0, 2, 4, 6], {2}, 100.0) == {0: 10.0, 2: 70.0, 4: 10.0, 6: 10.0}
    # ...but at most its own probe figure (170): the rest goes to the others in proportion
    assert _block_shares(units, [0, 2, 4, 6], {2}, 230.0) == {0: 20.0, 2: 170.0, 4: 20.0, 6: 20.0}
    # the others' probe figures exceed the block: scaled down to it, the call gets nothing
    assert _block_shares(units, [0, 2, 4, 6], {2}, 15.0) == {0: 5.0, 2: 0.0, 4: 5.0, 6: 5.0}
    # no probe
    assert _block_shares({0: (10, 1000, 6, 0, 0)}, [0, 2, 4, 6], set(), 100.0) == {0: 25.0, 2: 25.0, 4: 25.0, 6: 25.0}


def test_instruction_probe_leaves_no_local_events_behind():
    """A probe sets INSTRUCTION events on the hot loop's code object alone (set_local_events); stop takes
    them away on every version (3.12/3.13's free_tool_id would leave them armed under our old id), and
    the next session probes the loop again, recording the same events."""
    p = run_py("""
        import sys, ocular
        def work(n):
            t = 0
            for i in range(n):
                t += i
            return t
        counts = []
        for k in range(2):
            ocular.start_tracing(perfetto=False, report=False, sampling=False)
            work(3000)
            r = ocular.stop_tracing()
            counts.append(r["events"])
            print(sys.monitoring.get_local_events(r["tool_id"], work.__code__))
        print(counts[0], counts[1])
    """)
    first, second, counts = p.stdout.split("\n")[:3]
    assert first == second == "0", p.stdout
    a, b = map(int, counts.split())
    # 500 iterations' jumps, then the probe's instructions (256 of each): well above the jumps alone
    assert a == b and a > 2000, p.stdout


def test_calls_without_a_seen_end_are_said(tmp_path):
    """fib(20) at the default threshold: the outer recorded calls stay open while more than 4,096
    unrecorded ends return, so their return sites are disabled and their ends inferred.  Expect the text
    report to say how many calls it leaves out for that (the JSON report's `truncated`), instead of a
    table that silently disagrees with the trace and .pstats."""
    from test_api import run_cli

    (tmp_path / "prog.py").write_text("def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
                                      "def main():\n    fib(20)\nmain()\n")
    p = run_cli("--near-zero", "--no-sampling", "-o", "t.json", "prog.py", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    j = run_cli("--near-zero", "--no-sampling", "--report-json", "-o", "t2.json", "prog.py", cwd=tmp_path)
    trunc = sum(f["truncated"] for f in json.loads(j.stderr[j.stderr.index("{"):j.stderr.rindex("}") + 1])["functions"])
    assert trunc > 0
    assert f"{trunc:,} calls had no end seen" in p.stderr, p.stderr


def test_negative_durations_are_formatted():
    """A difference of estimates can be negative: formatted as one (it printed as raw nanoseconds)."""
    from ocular._report import _fmt_ns

    assert _fmt_ns(-84188956) == "-84.19ms" and _fmt_ns(-1500) == "-1.5us" and _fmt_ns(2e9) == "2.00s"


def test_a_function_whose_calls_all_lack_an_end_is_still_reported():
    """Recursion 6,000 deep at threshold 500: the 500 recorded calls of r are the outermost, and their
    returns come after the 4,096 unrecorded ones that disarm r's return site, so none has a seen end.
    r has no row then, but the header counts it as de-instrumented and the report names it among the
    calls it does not count (it vanished, and the header said "no function de-instrumented")."""
    p = run_py("""
        import json, sys, ocular
        sys.setrecursionlimit(20000)
        def r(n):
            return 0 if n == 0 else r(n - 1) + 1
        ocular.start_tracing(perfetto=False, report=False, sampling=False, near_zero=True)
        r(6000)
        ocular.stop_tracing()
        rep = ocular.last_report()
        print(json.dumps(rep.to_dict()["unended"]))
        print(rep.format())
    """)
    unended, text = p.stdout.split("\n", 1)
    (u,) = json.loads(unended)
    assert u["name"] == "r" and u["calls"] == 500
    assert "1 function de-instrumented" in text and "500 calls had no end seen" in text, text
    assert "(r 500)" in text, text
