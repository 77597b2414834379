"""What the default settings de-instrument, and what every output says of it (docs/exactness.md): function
events never (every call counted, whatever the threshold); a C call site whose calls are cheap after the
threshold, marked partial in every output; an expensive C call site never; Ocular's own cost per event,
measured at start and stated in the report, with the functions that measure it in no output.  Near-zero
mode is flagged in the recording and in what is rendered from it later.

No timing thresholds: which sites stay is decided by calls of 20 us against calls of 50 ns, far either side of
the rule's 1 us."""

import gzip
import json
import os
import pstats
import subprocess

from conftest import SRC, check_balanced, load_trace, python_cmd, run_py

# a cheap C call site (len: ~50 ns) and an expensive one (sorted of 3,000 ints: ~20 us), each called
# 1,200 times from main, past the default threshold (500)
PROG = """
def main():
    data = list(range(3000))
    n = 0
    for i in range(1200):
        n += len(data)
        n += sorted(data, reverse=True)[0]
    return n
main()
"""


def cli(tmp_path, *args, env=None):
    (tmp_path / "prog.py").write_text(PROG)
    e = dict(os.environ, PYTHONPATH=SRC, **(env or {}))
    return subprocess.run([*python_cmd(), "-m", "ocular", *args, "prog.py"], cwd=tmp_path, env=e,
                          capture_output=True, text=True, timeout=300)


def report_json(p):
    return json.loads(p.stderr[p.stderr.index("{"):p.stderr.rindex("}") + 1])


def test_cheap_c_sites_go_expensive_ones_stay_and_python_calls_are_all_counted(tmp_path):
    p = cli(tmp_path, "--report-json", "--no-sampling", "-o", "t.json")  # (no window: exactly 500 of len)
    assert p.returncode == 0, p.stderr
    f = {r["name"]: r for r in report_json(p)["functions"]}
    main, srt, ln = f["main"], f["<built-in method builtins.sorted>"], f["<built-in method builtins.len>"]
    assert main["calls"] == 1 and not main["sample"]
    # the expensive site keeps every call, unmarked; the cheap one stops after the threshold, marked
    assert srt["measured"]["calls"] == 1200 and not srt["sample"] and not srt["deinstrumented"]
    assert ln["measured"]["calls"] == 500 and ln["sample"] and ln["deinstrumented"]
    # its caller's row names it: its later calls are in main's self time
    assert "<built-in method builtins.len>" in main["untraced_callees"]
    data = load_trace(str(tmp_path / "t.json"))
    check_balanced(data["traceEvents"])
    other = data["otherData"]
    assert other["near_zero"] is False and other["partial_functions"] >= 1 and "de-instrumented" in other["note"]
    slices = [e for e in data["traceEvents"] if e["ph"] == "B"]
    assert sum(1 for e in slices if e["name"] == "<built-in method builtins.sorted>") == 1200
    assert sum(1 for e in slices if e["name"] == "<built-in method builtins.len>") == 500


def test_threshold_zero_keeps_every_c_call_and_marks_nothing(tmp_path):
    p = cli(tmp_path, "--report-json", "--threshold", "0", "-o", "t.json")
    assert p.returncode == 0, p.stderr
    f = {r["name"]: r for r in report_json(p)["functions"]}
    assert f["<built-in method builtins.len>"]["calls"] == 1200 and not f["<built-in method builtins.len>"]["sample"]
    assert load_trace(str(tmp_path / "t.json"))["otherData"]["partial_functions"] == 0


def test_formats_without_a_note_of_their_own_say_it_on_stderr(tmp_path):
    """pstats has no place for a note: one line on stderr, even with -q; pprof carries a comment; gecko names
    it in its product; the HTML marks the row and says it in its summary."""
    p = cli(tmp_path, "-q", "--no-report", "-o", "t.pstats")
    assert p.returncode == 0, p.stderr
    assert "t.pstats: partial: 1 C function with call sites de-instrumented" in p.stderr, p.stderr
    st = pstats.Stats(str(tmp_path / "t.pstats")).stats
    calls = {name: v[1] for (fn, ln, name), v in st.items()}
    assert calls["main"] == 1 and calls["<built-in method builtins.sorted>"] == 1200
    p = cli(tmp_path, "-q", "--no-report", "-o", "t.gecko.json")
    assert p.returncode == 0 and "partial" not in p.stderr, p.stderr
    assert "partial: 1 C function" in json.loads((tmp_path / "t.gecko.json").read_text())["meta"]["product"]
    p = cli(tmp_path, "-q", "--no-report", "-o", "t.pb.gz")
    assert p.returncode == 0, p.stderr
    assert b"ocular: partial: 1 C function" in gzip.decompress((tmp_path / "t.pb.gz").read_bytes())
    p = cli(tmp_path, "-q", "--no-report", "-o", "t.html")
    assert p.returncode == 0, p.stderr
    page = (tmp_path / "t.html").read_text()
    blob = json.loads(page.split('id="data">', 1)[1].split("</script>", 1)[0])
    row = next(r for r in blob["functions"] if r[0] == "<built-in method builtins.len>")
    # (at least, or estimated where a sampling window saw its calls after the cut)
    assert row[8] in (">", "~") and "every function call counted and timed" in blob["exact"] and blob["note"]


def test_near_zero_is_in_the_recording_and_what_is_rendered_from_it(tmp_path):
    (tmp_path / "prog.py").write_text("def f():\n    return 1\nfor i in range(2000):\n    f()\n")
    e = dict(os.environ, PYTHONPATH=SRC)
    p = subprocess.run([*python_cmd(), "-m", "ocular", "-q", "--near-zero", "--no-sampling", "-o", "r.ocular",
                        "prog.py"], cwd=tmp_path, env=e, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([*python_cmd(), "-m", "ocular", "convert", "r.ocular", "-o", "t.pstats", "--report-json"],
                       cwd=tmp_path, env=e, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rep = report_json(p)
    assert rep["near_zero"] is True and rep["exact_calls"] is False
    f = {r["name"]: r for r in rep["functions"]}
    assert f["f"]["calls"] == 500 and f["f"]["sample"]
    assert "t.pstats: partial: near-zero mode: 1 function de-instrumented" in p.stderr, p.stderr


def test_own_cost_is_measured_at_start_and_its_functions_are_in_no_output(tmp_path):
    """The calibration functions run traced at start (whatever --include says), into a buffer that never
    reaches the recording: no row, no slice, no code in the call tree; the report states the costs."""
    out = tmp_path / "t.json"
    p = run_py(f"""
        import json, ocular
        ocular.start_tracing(output={str(out)!r}, report=False, include_only=["no-such-file"])
        def g():
            return 1
        for i in range(10):
            g()
        r = ocular.stop_tracing()
        rep = ocular.last_report()
        print(json.dumps(dict(own=rep.own_cost, names=[f["name"] for f in rep.functions], text=rep.format())))
    """, env={"OCULAR_CLOCK": ""})
    res = json.loads(p.stdout.splitlines()[-1])
    data = load_trace(str(out))
    assert not any("calibration" in json.dumps(e) for e in data["traceEvents"])
    assert not any(n in ("f", "calls", "ccalls", "loop") for n in res["names"]), res["names"]
    clock = data["otherData"]["clock"]
    if clock == "tsc":  # (clock_gettime too, but its figures in ns could round to 0)
        own = res["own"]
        assert own and own["enter"] + own["leave"] > 0, own
        assert "own cost subtracted per event (cycles): call " in res["text"]


def test_no_own_cost_with_the_test_clock():
    p = run_py("""
        import ocular, ocular._ocular as o
        o._set_test_clock(True)
        ocular.start_tracing(perfetto=False, report=False)
        ocular.stop_tracing()
        print(repr(ocular.last_report().own_cost))
    """)
    assert p.stdout.split()[-1] == "None"


FIB_THEN_LOOP = """
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
def main():
    fib(20)
    t = 0
    for i in range(200000):
        t += i
    return t
main()
"""


def test_recursion_then_the_callers_loop_leaves_no_time_in_no_row(tmp_path):
    """fib(20) (21,891 calls) then a loop in main.  By default every call is counted; in near-zero mode fib's
    return sites go after 4,096 unrecorded ends, and main's jumps end the recorded fib frames left open
    (they charged the loop's time to a stale fib frame, and main had no row).  Either way the rows' self
    times add up to the module's total."""
    (tmp_path / "prog.py").write_text(FIB_THEN_LOOP)
    e = dict(os.environ, PYTHONPATH=SRC)
    for mode in ((), ("--near-zero",)):
        p = subprocess.run([*python_cmd(), "-m", "ocular", *mode, "--no-sampling", "--report-json", "--no-trace-file",
                            "prog.py"], cwd=tmp_path, env=e, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        rows = {r["name"]: r for r in report_json(p)["functions"] if r["file"].endswith("prog.py")}
        assert rows["main"]["calls"] == 1, (mode, rows)
        fib = rows["fib"]
        assert fib["calls"] + fib["truncated"] == (21891 if not mode else 500) and (mode or not fib["truncated"]), fib
        total = rows["<module>"]["total_ns"]
        selfs = sum(r["self_ns"] for r in rows.values())
        assert 0.97 * total <= selfs <= 1.001 * total, (mode, selfs, total)
        assert rows["main"]["self_ns"] > 0.2 * total, (mode, rows["main"])  # the loop is main's


def test_the_c_call_site_limit_is_an_environment_variable(tmp_path):
    p = cli(tmp_path, "--report-json", "--no-sampling", "-o", "t.json", env={"OCULAR_CCALL_KEEP_NS": "0"})
    assert p.returncode == 0, p.stderr
    f = {r["name"]: r for r in report_json(p)["functions"]}
    assert f["<built-in method builtins.len>"]["calls"] == 1200 and not f["<built-in method builtins.len>"]["sample"]
    p = cli(tmp_path, "-o", "t.json", env={"OCULAR_CCALL_KEEP_NS": "1us"})
    assert p.returncode == 2 and "OCULAR_CCALL_KEEP_NS='1us' is not valid" in p.stderr, p.stderr


def test_a_call_site_of_several_c_functions_stays(tmp_path):
    """One call site calling len and str.upper by turns (a dispatch, as importlib's
    _call_with_frames_removed calls compile, exec, ...): cut, it would lose the calls of the function not at
    hand unmarked; it stays instrumented, both counted in full."""
    (tmp_path / "prog.py").write_text(
        "def main():\n    fs = [len, str.upper]\n    for i in range(2000):\n        fs[i % 2]('abc')\nmain()\n")
    e = dict(os.environ, PYTHONPATH=SRC)
    p = subprocess.run([*python_cmd(), "-m", "ocular", "--no-sampling", "--report-json", "--no-trace-file", "prog.py"],
                       cwd=tmp_path, env=e, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    f = {r["name"]: r for r in report_json(p)["functions"]}
    for name in ("<built-in method builtins.len>", "<method 'upper' of 'str' objects>"):
        assert f[name]["calls"] == 1000 and not f[name]["sample"], f[name]


# one C call site: sorted() of 3 items (~200 ns) 1,200 times, and once, among its first 500 calls, of
# 300,000 shuffled ints (~40 ms: an average of ~80 us over 500 calls if it counted in full)
ONE_LONG_CALL = """
import random
def main():
    rng = random.Random(1)
    big = list(range(300000))
    rng.shuffle(big)
    n = 0
    for i in range(1200):
        n += sorted(big if i == 100 else (3, 1, 2))[0]
    return n
main()
"""


def test_one_long_call_keeps_no_cheap_c_site_armed(tmp_path):
    """A timed C call counts at most 100 times the rule's limit in its site's average (OC_CCALL_CAP, ~100 us):
    a call preempted for a time slice, or one rare big input, does not keep a site of cheap calls armed.  The
    site goes at the threshold, as len's does above; the long call, among the recorded ones, is in its row."""
    (tmp_path / "prog.py").write_text(ONE_LONG_CALL)
    p = subprocess.run([*python_cmd(), "-m", "ocular", "--report-json", "--no-sampling", "-o", "t.json", "prog.py"],
                       cwd=tmp_path, env=dict(os.environ, PYTHONPATH=SRC), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    srt = {r["name"]: r for r in report_json(p)["functions"]}["<built-in method builtins.sorted>"]
    assert srt["measured"]["calls"] == 500 and srt["sample"] and srt["deinstrumented"], srt
    assert srt["max_ns"] > 1e6, srt  # (the big sort, recorded: milliseconds)
