"""Honest attribution in adaptive mode (issue 17): after the threshold a callee's calls are no longer
recorded and would land in its caller's self time; sampling windows keep measuring them, and the report
gives the estimated split, labelled as an estimate (``~`` in the text, ``estimated`` in JSON).

The split is checked against cProfile's on the same deterministic programs (a callee that sleeps a fixed
time per call; a callee that loops a fixed number of times), run long enough for tens of windows.  No
timing thresholds: only the ratio of two profilers' splits of one program.  Each profiler runs in its own
process, so the program's true split differs between the two runs (a sleep lasts what the machine gives
it); each program measures its own true split (perf_counter in the callee and in main), and each
profiler's split is compared with cProfile's after dividing by its own run's true split.  A comparison
outside the tolerance is run again (up to three runs) before it fails.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import SRC, python_cmd

# TRUTH: the seconds the program itself measures (perf_counter) in the callee and in main: its true split
# in that very run, which the comparison corrects each profiler's split by
SLEEPER = """
import time
TRUTH = [0.0, 0.0]
def child():
    t0 = time.perf_counter()
    time.sleep(0.0003)
    TRUTH[0] += time.perf_counter() - t0
def main():
    t0 = time.perf_counter()
    t = 0
    for i in range(1200):
        child()
        for j in range(5000):
            t += j
    TRUTH[1] = time.perf_counter() - t0
    return t
main()
"""

LOOPER = """
import time
TRUTH = [0.0, 0.0]
def child():
    t0 = time.perf_counter()
    s = 0
    for i in range(1000):
        s += i
    TRUTH[0] += time.perf_counter() - t0
    return s
def main():
    t0 = time.perf_counter()
    t = 0
    for i in range(12000):
        t += child()
        for j in range(800):
            t -= 1
    TRUTH[1] = time.perf_counter() - t0
    return t
main()
"""

SHORT = """
def child():
    return sum(range(50))
def main():
    for _ in range(3000):
        child()
main()
"""

# windows every 25 ms (1 ms each): tens of windows in a second, so the sample is large enough to compare
RUN_OCULAR = """
import json, sys
import ocular
sampling = eval(sys.argv[2])
ocular.start_tracing(perfetto=False, report=False, sampling=sampling, near_zero=True)
g = {"__name__": "__main__"}
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), g)
ocular.stop_tracing()
rep = ocular.last_report()
print(json.dumps({"functions": rep.functions, "sampling": rep.sampling, "text": rep.format(),
                  "truth": g.get("TRUTH")}))
"""


def _python(names):
    """Python functions among a row's callees (C functions, the programs' time.perf_counter, are named too)."""
    return [n for n in names if not n.startswith("<")]


def _env():
    e = dict(os.environ)
    e["PYTHONPATH"] = SRC + os.pathsep + e.get("PYTHONPATH", "")
    return e


def ocular_report(prog, sampling="(25, 1)", pre=""):
    code = pre + RUN_OCULAR
    p = subprocess.run([*python_cmd(), "-c", code, str(prog), sampling], env=_env(), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def cprofile_split(prog):
    code = textwrap.dedent("""
        import cProfile, pstats, sys, io
        pr = cProfile.Profile()
        src = open(sys.argv[1]).read()
        g = {"__name__": "__main__"}
        pr.enable()
        exec(compile(src, sys.argv[1], "exec"), g)
        pr.disable()
        st = pstats.Stats(pr).stats
        out = {}
        for (fn, ln, name), (cc, nc, tt, ct, callers) in st.items():
            if fn == sys.argv[1]:
                out[name] = (nc, tt, ct)
        print(repr((out, g.get("TRUTH"))))
    """)
    p = subprocess.run([*python_cmd(), "-c", code, str(prog)], env=_env(), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return eval(p.stdout.strip().splitlines()[-1])


def split(prog):
    """Each profiler's split (the callee's share of main's time) in its own run, with that run's true
    share as the program measured it: two runs are two processes, and the true split of a program that
    sleeps moves from one to the other on a shared machine."""
    rep = ocular_report(prog)
    f = {r["name"]: r for r in rep["functions"]}
    cp, truth_c = cprofile_split(prog)
    ours = f["child"]["total_ns"] / f["main"]["total_ns"]
    theirs = cp["child"][2] / cp["main"][2]
    truth_o = rep["truth"][0] / rep["truth"][1]
    truth_c = truth_c[0] / truth_c[1]
    return rep, f, cp, ours, theirs, truth_o, truth_c


def off_by(ours, theirs, truth_o, truth_c):
    """How far Ocular's split is from cProfile's, each corrected by its own run's true split: for the
    callee's share and for the caller's own."""
    callee = (ours / truth_o) / (theirs / truth_c) - 1
    caller = ((1 - ours) / (1 - truth_o)) / ((1 - theirs) / (1 - truth_c)) - 1
    return abs(callee), abs(caller)


@pytest.mark.quiet  # (time shares measured in two runs: another test's load beside one run skews them)
@pytest.mark.parametrize("program", ["sleeper", "looper"])
def test_the_split_matches_cprofile(tmp_path, program):
    prog = tmp_path / f"{program}.py"
    prog.write_text(SLEEPER if program == "sleeper" else LOOPER)
    # the caller's own share is the smaller side of the split (sleeper: ~31 % of main), so the same error in
    # points weighs about twice as much there; and sleeper's callee comes out 1-5 points over its true share
    # in this mode (its 0.6 ms cycle is near the 1 ms window; with 3 ms sleeps the split is within 0.2 %),
    # which is up to 15 % of the caller's share: a known bias of near-zero mode's windows (docs/exactness.md)
    caller_tolerance = 0.20 if program == "sleeper" else 0.10
    for attempt in range(3):
        rep, f, cp, ours, theirs, truth_o, truth_c = split(prog)
        callee, caller = off_by(ours, theirs, truth_o, truth_c)
        if callee <= 0.10 and caller <= caller_tolerance:
            break
    main, child = f["main"], f["child"]
    msg = (f"child's share of main's time: ocular {ours:.3f} (true {truth_o:.3f} in its run), cProfile "
           f"{theirs:.3f} (true {truth_c:.3f}); ocular main {main}, child {child}; cProfile {cp}; "
           f"sampling {rep['sampling']}")
    assert callee <= 0.10, msg  # the callee's share
    assert caller <= caller_tolerance, msg  # and the caller's own
    assert rep["sampling"]["windows"] >= 5, msg
    # labelled: the caller's self time and the callee's calls and total are estimates, the measured
    # figures are kept beside them
    assert main["estimated"] and "self" in main["estimated_fields"] and "calls" not in main["estimated_fields"]
    assert main["self_ns"] < main["measured"]["self_ns"]
    assert child["estimated"] and {"calls", "total"} <= set(child["estimated_fields"])
    assert child["measured"]["calls"] < child["calls"]
    true_calls = 1200 if program == "sleeper" else 12000
    assert abs(child["calls"] / true_calls - 1) < 0.5, msg  # a count from samples: looser than time
    # child, and the clock the program reads in child to know its true split (a C call a window can catch
    # in a child whose start it missed, so it hangs under main)
    shares = {c["name"]: c for c in main["estimated_callees"]}
    assert set(shares) <= {"child", "<built-in method time.perf_counter>"}, shares
    assert shares["child"]["total_ns"] > 0
    text = rep["text"]
    assert "~ = estimated" in text and f"({rep['sampling']['windows']} sampling windows" in text, text
    assert "^ main's self time excludes ~" in text and "calls to child (~" in text
    row = next(line for line in text.splitlines() if re.search(r"  child  \S*\.py:\d+$", line))
    assert row.lstrip().startswith("~"), text


@pytest.mark.parametrize("other", ["dummy", "cProfile"])
def test_no_window_while_another_tool_is_registered(tmp_path, other):
    """restart_events() would re-arm the other tool's disabled sites too: no window then, and the report
    names the callee without an estimate and says why."""
    prog = tmp_path / "p.py"
    prog.write_text(SLEEPER.replace("1200", "600"))
    if other == "dummy":
        pre = "import sys\nsys.monitoring.use_tool_id(0, 'dummy')\n"
    else:
        pre = "import cProfile\n_pr = cProfile.Profile()\n_pr.enable()\n"
    rep = ocular_report(prog, pre=pre)
    sw = rep["sampling"]
    assert sw["windows"] == 0 and sw["skipped"] >= 3 and sw["other_tool"] == other, sw
    f = {r["name"]: r for r in rep["functions"] if r["file"] == str(prog)}
    assert not f["main"]["estimated"] and _python(f["main"]["untraced_callees"]) == ["child"]
    assert f["main"]["self_ns"] == f["main"]["measured"]["self_ns"]
    assert f"not estimated: another sys.monitoring tool, {other}, was registered" in rep["text"]


def test_sampling_off_and_threshold_zero(tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text(SLEEPER.replace("1200", "800"))
    rep = ocular_report(prog, sampling="False")
    assert rep["sampling"]["status"] == "off" and rep["sampling"]["windows"] == 0
    f = {r["name"]: r for r in rep["functions"]}
    assert not f["main"]["estimated"] and _python(f["main"]["untraced_callees"]) == ["child"]
    assert "not estimated: sampling windows were off" in rep["text"]
    code = RUN_OCULAR.replace("sampling=sampling", "sampling=sampling, deinstrument_threshold=0")
    p = subprocess.run([*python_cmd(), "-c", code, str(prog), "(25, 1)"], env=_env(), capture_output=True,
                       text=True, timeout=300)
    rep = json.loads(p.stdout.strip().splitlines()[-1])
    assert rep["sampling"]["windows"] == 0  # nothing is de-instrumented: nothing to sample
    assert all(not r["estimated"] for r in rep["functions"])


def test_bad_sampling_arguments():
    code = textwrap.dedent("""
        import ocular
        for bad, exc in (((5, 5), ValueError), ((1, 2), ValueError), ("x", TypeError), ((1,), TypeError)):
            try:
                ocular.start_tracing(perfetto=False, report=False, sampling=bad)
            except exc:
                pass
            else:
                raise SystemExit(f"accepted {bad!r}")
            assert not ocular.is_tracing()
    """)
    p = subprocess.run([*python_cmd(), "-c", code], env=_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_a_recording_keeps_its_windows(tmp_path):
    """The windows are in the recording (its SAMPLING block): `convert` renders the same estimate later."""
    prog = tmp_path / "p.py"
    prog.write_text(SLEEPER.replace("1200", "800"))
    e = _env()
    e["OCULAR_SAMPLING"] = "25,1"
    p = subprocess.run([*python_cmd(), "-m", "ocular", "--near-zero", "-o", "r.ocular", "p.py"], cwd=tmp_path, env=e,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([*python_cmd(), "-m", "ocular", "convert", "r.ocular", "-o", "t.json", "--report-json"],
                       cwd=tmp_path, env=e, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = p.stdout + p.stderr
    rep = json.JSONDecoder().raw_decode(out[out.index("{"):])[0]
    assert rep["sampling"]["windows"] >= 5
    f = {r["name"]: r for r in rep["functions"]}
    assert f["main"]["estimated"] and f["child"]["estimated"]


def test_a_short_program_is_estimated(tmp_path):
    """The first window opens as soon as something is de-instrumented (on 3.12 too, where the timer thread
    would wait a switch interval for the GIL): a program of 2-3 ms, whose child passes the threshold at
    its 100th call, gets a window, and its calls after it are estimated, marked, not left unsaid in
    main's self time.  (Windows spaced by the period only, the first 50-150 ms in, gave it none.)"""
    (tmp_path / "m.py").write_text(SHORT)
    # A window or two of 1 ms in a 2 ms run is a large sample, but a sample: a window's ticks are wall time,
    # so a preemption inside it (CI's 3.12 under load once had no window; CI's 3.15 once saw 942 calls, a
    # third) moves the estimate by what the thread lost.  Up to three runs; each failed one is printed.
    for attempt in range(3):
        p = subprocess.run([*python_cmd(), "-m", "ocular", "--near-zero", "--threshold", "100", "-o", "t.json",
                            "--report-json", "m.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        out = p.stdout + p.stderr
        rep = json.JSONDecoder().raw_decode(out[out.index("{"):])[0]
        f = {r["name"]: r for r in rep["functions"]}
        if rep["sampling"]["windows"] >= 1 and 1500 <= f["child"]["calls"] <= 6000:
            break
        print(f"run {attempt + 1}: {rep['sampling']}, child {f['child']}")
    assert rep["sampling"]["windows"] >= 1, rep["sampling"]
    # estimated, or (3.15: the window stays open for most of a 1 ms run) recorded nearly all, marked at least
    assert "calls" in f["child"]["estimated_fields"] or f["child"]["sample"], f["child"]
    # (3,000 calls: a window or two of 1 ms in a 2 ms run is a large sample, but a sample)
    assert 1500 <= f["child"]["calls"] <= 6000, f["child"]
    assert "no sampling window ran" not in out


PHASES = """
import time
TRUTH = [0.0, 0.0]
def early():
    s = 0
    for k in range(30):
        s += k
    return s
def late():
    return 1
def main():
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.04:
        for _ in range(100):
            early()
    t1 = time.perf_counter()
    n = 0
    while time.perf_counter() - t1 < 0.4:
        for _ in range(100):
            late()
            for k in range(40):
                n += k
    TRUTH[0], TRUTH[1] = t1 - t0, time.perf_counter() - t0
main()
"""


@pytest.mark.quiet  # (a share measured against the program's own clock: another test's load moves windows)
def test_early_dense_windows_are_weighed_by_the_time_they_stand_for(tmp_path):
    """Windows come every 2, 4, 8 ... ms after the first de-instrumentation, then every period: the ones
    of a program's first 40 ms are as many as those of the next 400.  Each window is weighed by the time
    it stands for (recorded with it), so a callee that runs only in those first 40 ms gets its ~9 % of
    main's time, not the ~50 % an unweighted count of windows gives it (the old schedule, the first window
    50-150 ms in, saw none of it: 0.1 %)."""
    prog = tmp_path / "phases.py"
    prog.write_text(PHASES)
    seen = []
    for attempt in range(3):
        rep = ocular_report(prog, sampling="True")
        f = {r["name"]: r for r in rep["functions"]}
        early, truth = f["early"]["total_ns"] / f["main"]["total_ns"], rep["truth"][0] / rep["truth"][1]
        seen.append((round(early, 3), round(truth, 3), rep["sampling"]["windows"]))
        assert "calls" in f["early"]["estimated_fields"], f["early"]
        if abs(early - truth) <= 0.05:
            break
    assert abs(early - truth) <= 0.05, f"early's share of main, estimated and true, and windows, per run: {seen}"


THREADS = """
import threading, time
def unit():
    return sum(range(30))
def work(sec):
    t = time.perf_counter()
    while time.perf_counter() - t < sec:
        for _ in range(50):
            unit()
ts = [threading.Thread(target=work, args=(0.5,)) for _ in range(2)]
for t in ts:
    t.start()
work(0.5)
for t in ts:
    t.join()
"""


def test_windows_last_long_enough_to_see_every_running_thread(tmp_path):
    """With the GIL a thread runs a switch interval (5 ms) at a time, so a 1 ms window sees one of three
    busy threads.  The sampling thread counts the program's threads that ran (their CPU time, Ocular's own
    threads left out) and makes a window one switch interval per running thread: three busy threads get
    windows of ~15 ms after the first; one thread keeps 1 ms windows."""
    prog = tmp_path / "threads.py"
    prog.write_text(THREADS)
    one = tmp_path / "one.py"
    one.write_text(THREADS.replace("range(2)", "range(0)"))
    means = {}
    for name, path in (("three", prog), ("one", one)):
        rep = ocular_report(path, sampling="True")
        sw = rep["sampling"]
        assert sw["windows"] >= 2, sw
        means[name] = sw["window_ns"] / sw["windows"] / 1e6
    assert means["three"] >= 3 * means["one"] and means["one"] < 1.5, means
HOG = "import time\nt = time.time()\nwhile time.time() - t < 120:\n    pass\n"


@pytest.mark.quiet  # (the program shares its CPU with a busy process on purpose; another test's load would add to it)
def test_calls_estimated_on_a_shared_cpu_follow_running_time(tmp_path):
    """A window opens while the program's thread runs, so on a CPU shared with a busy process its measured
    part holds less waiting for the CPU than the rest of the run, and calls counted in windows and scaled
    by wall time came out about twice the truth (looper: 24,000-25,000 estimated of 12,000).  The sampling
    thread reads the threads' run delays (schedstat) in and outside windows, and estimated calls are scaled
    by the two running shares."""
    prog = tmp_path / "looper.py"
    prog.write_text(LOOPER)
    cpu = max(os.sched_getaffinity(0))
    pin = lambda: os.sched_setaffinity(0, {cpu})  # noqa: E731
    hog = subprocess.Popen([sys.executable, "-c", HOG], preexec_fn=pin)
    try:
        best = None
        for attempt in range(3):
            code = RUN_OCULAR
            p = subprocess.run([*python_cmd(), "-c", code, str(prog), "(25, 1)"], env=_env(), capture_output=True,
                               text=True, timeout=300, preexec_fn=pin)
            assert p.returncode == 0, p.stderr
            rep = json.loads(p.stdout.strip().splitlines()[-1])
            child = next(r for r in rep["functions"] if r["name"] == "child")
            rd = rep["sampling"]["run_delay"]
            off = abs(child["calls"] / 12000 - 1)
            best = min(best or (9, None), (off, (child["calls"], rd)))
            if off < 0.35:
                break
    finally:
        hog.kill()
        hog.wait()
    calls, rd = best[1]
    assert rd is not None and rd["outside"] > 0.2 and rd["calls_factor"] < 0.9, rd  # the CPU was shared
    assert best[0] < 0.35, f"estimated {calls} calls of 12,000; run delays {rd}"
