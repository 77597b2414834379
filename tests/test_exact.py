"""Ocular's default mode counts and times every function activation: its .pstats against cProfile's on
twelve program shapes (tests/exact_programs/), each at two sizes picked by the program's first argument:
"short" (~50 ms untraced) and "long" (~0.5 s).  Each program runs under Ocular
(``python -m ocular -q --report-json --report R -o X.pstats prog.py SIZE``, default settings) and under
cProfile (``python -P -m cProfile -o X.prof prog.py SIZE``) in separate processes, and the two files are read
with pstats.  Functions are compared by (file, first line, name): cProfile names a Python function by its
``co_name``, Ocular by its ``co_qualname``, so the last dotted part of Ocular's name is used.

Calls (exact, no tolerance): every Python function's total calls, and its primitive calls, equal cProfile's.
Both count as cProfile counts: every start and every resume of a generator or coroutine is a call (the JSON
report's "calls" are starts, its "segments" the resumes), and a call is primitive unless an activation of
the same function is open below it.  cProfile keeps a single call stack for all threads (sys.monitoring
gives it every thread's events), so in a threaded program its primitive counts are wrong (``unit`` in
threads.py: 18,631 primitive of 60,000 calls, none of them recursive): there only total calls are compared
with cProfile, and Ocular's primitive calls of the program's functions must equal their total calls.  C
functions (file ``~``) are not compared: Ocular de-instruments a cheap C call site (< 1 us a call) after 500
calls, so e.g. ``len`` has 547 calls of 4,547 in c_heavy.py, by design; cProfile also names some C functions
with an address (``<built-in method __new__ of type object at 0x...>``).  Functions of ``<frozen ...>``
modules (the import system, abc, os) are compared but for a few whose calls depend on caches the process
filled before the program started (FROZEN_CACHES).  In default mode no Python row of the JSON report may be
marked as estimated or de-instrumented.

The same calls, made the same: cProfile and Ocular each import modules of their own before the program
(cProfile: optparse, pstats, dataclasses, inspect...; Ocular: threading...), so a module the program imports
would be imported (its module code run, its functions called) under one profiler and not under the other.
Both runs preload the union of those modules and the programs' own imports (exact_programs/_preload/
sitecustomize.py).  ``-P`` keeps cProfile's ``sys.path`` as a plain ``python prog.py`` has it (``-m`` would
put the current directory first, and every import would search one more directory than under Ocular).

Self-time shares (a function's tottime / the sum of all tottimes): within 10 percentage points of
cProfile's.  A C function whose calls Ocular does not give in full (a de-instrumented cheap call site, or a
name only one profiler uses) is folded into its callers' self time in both profiles (Ocular's unrecorded
calls already are there).  Ocular's own row ("ocular: waiting for the disk") is left out.  cProfile's own
cost lands in the functions' times too; the programs give their functions enough work that it stays inside
the tolerance, but for async_tasks.py's crunch() and fib_then_loop.py's fib(), which are also compared with
the program's own untraced timing, and hot_child.py's child(), with an untraced sampling profiler's share
(py-spy): a row passes within the tolerance of the range from cProfile's share to the untraced one
(TRUTH_ROWS).  threads.py: cProfile's single stack mixes the threads up, so the reference is cProfile
on the same calls made one after the other in the main thread (OCULAR_EXACT_SEQUENTIAL=1), the shares among
the program's own functions; the threads hand the GIL over in a C call (os.sched_yield), so a thread's wait
for it is not charged to whichever Python function a forced switch would have caught.

Wall-clock shares of two processes on a shared machine: a run preempted for a while puts that time in
whatever function was running (and the two profilers do not even spread it alike: Ocular charges more of it
to the functions dense in events), so the comparison takes every pairing of an Ocular run with a cProfile
run, and passes when one pairing is within the tolerance (a systematic difference shows in every pairing).
Out of tolerance, both profilers run again, up to ATTEMPTS steady runs (the program had the CPU for STEADY of
its wall time: it prints its CPU time beside its wall time) or MAX_RUNS runs in all; the comparison then
fails on the steady runs, or is skipped if no run was steady (the call counts and the checks below ran all
the same).  Only shares and ratios of two times of one run are asserted, never an absolute time.

No time in no row: in Ocular's pstats the self times of all rows add up to the inclusive times of the roots
(the rows nobody calls: the program's ``<module>``, each thread's ``Thread._bootstrap``), within 1 %: no time
of a run sits outside every row (lost with an unrecorded call, or in a node without a function).  And
``main``'s inclusive time is within 3 % of what the program measured around its call with
time.perf_counter in the same run (it prints it), plus the time the program was off the CPU (a stall around
main's first or last event falls outside main): the root's time is the run's (what the tracer does before
main's first event and after its last lands outside main: a few hundred microseconds).

Near-zero mode (``--near-zero``): after 500 calls a function's start is de-instrumented too, and its later
calls are estimated from sampling windows, or only a sample of its first calls is known.  The JSON report
must mark what is not counted: a Python row whose calls (in the same run's pstats) differ from cProfile's is
marked (``"calls"`` in ``estimated_fields``, or ``deinstrumented``/``sample``; a de-instrumented row is always
``sample`` or estimated); the report's self times add up to its roots' totals (within 2 %: an estimate moves
time between rows, it makes none); a row whose self time is not marked (``"self"`` in ``estimated_fields``,
``untraced_callees``, ``deinstrumented``/``sample``) has a share within 10 points of cProfile's; and on the
long programs every row's share, marked or not, is within 15 points (NEAR_ZERO_LONG_OFF: programs where the
estimates are further off, with the numbers measured).  A known Ocular bug is a strict xfail with the
numbers (test_near_zero_marks_c_functions_behind_a_shared_call_site), a known limit of near-zero mode without
windows a non-strict one (test_near_zero_names_the_untraced_callees_of_a_caller);
test_near_zero_recursion_then_a_call_keeps_its_time was a strict xfail until the render ended the frames of
a recursion whose ends were not seen at the thread's last record.
"""

import json
import os
import pstats
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import SRC, python_cmd

HERE = os.path.dirname(os.path.abspath(__file__))
PROG_DIR = os.path.join(HERE, "exact_programs")
PRELOAD_DIR = os.path.join(PROG_DIR, "_preload")

PROGRAMS = ["hot_child", "two_children", "fib_then_loop", "deep_chain", "c_heavy", "gen_pipeline",
            "async_tasks", "threads", "oo_props", "many_modules", "cost_change", "exceptions"]
SIZES = ["short", "long"]
THREADED = {"threads"}
# modules the programs import (preloaded in both runs, with the profilers' own)
PROGRAM_IMPORTS = ["asyncio", "importlib", "json", "re", "shutil", "tempfile", "threading"]

TOLERANCE = 0.10                 # self-time share: default mode, and unmarked near-zero rows
NEAR_ZERO_LONG_TOLERANCE = 0.15  # every near-zero row's share, long programs
ATTEMPTS = 3                     # steady runs of both profilers before a share comparison fails
MAX_RUNS = 6                     # runs at most, steady or not
STEADY = 0.85                    # a steady run: the program had the CPU for this part of main's wall time at least
NO_ROW_TOLERANCE = 0.01          # sum of self times against the roots' inclusive times (the report's: 2x)
MAIN_TOLERANCE = 0.03            # main's inclusive time against the program's own measurement

# functions of <frozen ...> modules whose calls depend on caches the process filled before the program
# started: importlib.invalidate_caches() calls every finder in sys.path_importer_cache (Ocular's process has
# two more entries), and the first isinstance() against an ABC fills its subclass cache
# (os.PathLike.__subclasshook__...)
FROZEN_CACHES = {"invalidate_caches", "_path_isabs", "__subclasshook__", "__subclasscheck__", "_check_methods"}

# rows compared with the program's own timing too (untraced, OCULAR_EXACT_TRUTH=1), {program: function}:
# async_tasks.py's event loop makes many small calls per crunch(), and a tracer's own cost on them shrinks
# crunch's share, cProfile's far more than Ocular's (3.12, long: untraced 78-83 % of main's time, Ocular
# 73-77 %, cProfile 64-67 %; short: untraced 75-81 %, Ocular 67-71 %, cProfile ~65 %): the row passes within
# the tolerance of the range from cProfile's share to the untraced one (shares of main's inclusive time).
# fib_then_loop.py: cProfile's cost per call lands in fib's tottime, which lifts fib (3.14, long: cProfile
# 23 %, Ocular 13 %, untraced ~12 %); main does nothing but call fib and loop, so its row is compared with
# the complement too (TRUTH_MAIN)
# hot_child.py: cProfile's cost per call lands in main's tottime, which lifts main (CI, 3.13, long: cProfile
# 43.5 %, Ocular 33.3 %); child's calls are too short for the program to time them itself, so its truth is an
# untraced sampling profiler's share (PYSPY_TRUTH; py-spy at 1,000 samples a second: child 66-75 % of main's
# time on 3.12 and 3.13, Ocular 63-67 %, cProfile 56-62 %)
TRUTH_ROWS = {"async_tasks": "crunch", "fib_then_loop": "fib", "hot_child": "child"}
TRUTH_MAIN = {"fib_then_loop", "hot_child"}
PYSPY_TRUTH = {"hot_child"}
TRUTH = re.compile(r"^exact: truth (\S+) ([0-9.e+-]+)$", re.M)
MAIN_TOOK = re.compile(r"^exact: main took ([0-9.e+-]+) s, cpu ([0-9.e+-]+) s, process ([0-9.e+-]+) s$", re.M)
LOG = os.environ.get("OCULAR_EXACT_LOG")  # a file to append one JSON line per attempt to (to study the margins)


# ---- running the programs ----------------------------------------------------------------------------


def _base_env():
    e = dict(os.environ)
    # PROG_DIR too: the preloading imports then cache its finder in both runs (cProfile puts the script's
    # directory on sys.path after sitecustomize ran, Ocular before its last import: the program's first import
    # would look into it with one more path hook under one of them)
    e["PYTHONPATH"] = os.pathsep.join([SRC, PRELOAD_DIR, PROG_DIR] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    for k in ("OCULAR_EXACT_PRELOAD", "OCULAR_EXACT_SEQUENTIAL", "OCULAR_EXACT_SIZE"):
        e.pop(k, None)
    return e


def _run(cmd, env, cwd):
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{cmd}: exit {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="session")
def env(tmp_path_factory):
    """The environment of every run: src/ and the preloading sitecustomize on the path, and the modules to
    preload: those either profiler has imported when the program starts, and the programs' own imports."""
    d = tmp_path_factory.mktemp("exact_probe")
    probe = d / "modules.py"
    probe.write_text("import sys\nprint(','.join(sorted(sys.modules)))\n")
    e = _base_env()
    mods = set(PROGRAM_IMPORTS)
    for cmd in ([*python_cmd(), "-P", "-m", "cProfile", str(probe)],
                [*python_cmd(), "-m", "ocular", "-q", "--no-report", "--no-trace-file", str(probe)]):
        mods |= set(_run(cmd, e, str(d)).stdout.splitlines()[0].split(","))
    e["OCULAR_EXACT_PRELOAD"] = ",".join(sorted(m for m in mods if m not in ("__main__", "sitecustomize")
                                                and not m.startswith("ocular")))
    return e


def _key(file, line, name):
    """(file, first line, name) as both profilers can give it: a generated module's temporary directory
    dropped (it differs from run to run), a Python function's qualified name cut to its last part."""
    if file == "~":
        return file, line, name
    if "ocular_exact_mods_" in file:
        file = os.path.basename(file)
    return file, line, name.rsplit(".", 1)[-1]


class Profile:
    """One run's pstats, keys normalized (_key), callers too: {key: [cc, nc, tt, ct, {caller: [nc, cc, tt,
    ct]}]}.  main_s: the program's own measurement of main() (perf_counter); steady: the program had the CPU
    (its thread's CPU time, all threads' in a threaded program) for STEADY of that time at least, so the
    machine's other work barely shows in the run's wall-clock times; report: Ocular's JSON report."""

    def __init__(self, path, stdout, threaded, report=None):
        self.stats = {}
        self.truth = None  # the program's own share of main's time for its TRUTH_ROWS function (run_pairs)
        for k, (cc, nc, tt, ct, callers) in pstats.Stats(str(path)).stats.items():
            row = self.stats.setdefault(_key(*k), [0, 0, 0.0, 0.0, {}])
            for i, v in enumerate((cc, nc, tt, ct)):
                row[i] += v
            for ck, v in callers.items():
                c = row[4].setdefault(_key(*ck), [0, 0, 0.0, 0.0])
                for i in range(4):
                    c[i] += v[i]
        m = MAIN_TOOK.search(stdout)
        assert m, f"the program did not print its time:\n{stdout[-2000:]}"
        self.main_s = float(m.group(1))
        self.cpu_s = float(m.group(3 if threaded else 2))
        self.cpu_share = self.cpu_s / self.main_s
        self.steady = self.cpu_share >= STEADY
        self.report = report

    def row(self, key):
        return self.stats.get(key, [0, 0, 0.0, 0.0, {}])


def _prog(name):
    return os.path.join(PROG_DIR, name + ".py")


def run_cprofile(env, d, name, size, tag="c", sequential=False):
    out = d / f"{tag}.prof"
    e = dict(env, OCULAR_EXACT_SEQUENTIAL="1") if sequential else env
    p = _run([*python_cmd(), "-P", "-m", "cProfile", "-o", str(out), _prog(name), size], e, str(d))
    return Profile(out, p.stdout, name in THREADED)


def run_truth(env, d, name, size):
    """The program run untraced, timing its TRUTH_ROWS function itself: that function's share of main's time
    (PYSPY_TRUTH: sampled by py-spy instead, its samples with the function on top over those with main on the
    stack)."""
    if name in PYSPY_TRUTH:
        return _py_spy_share(env, d, name, size, TRUTH_ROWS[name])
    p = _run([*python_cmd(), _prog(name), size], dict(env, OCULAR_EXACT_TRUTH="1"), str(d))
    m = TRUTH.search(p.stdout)
    assert m and m.group(1) == TRUTH_ROWS[name], p.stdout
    return float(m.group(2))


def _py_spy_share(env, d, name, size, func):
    """py-spy (requirements-test.txt) records the program untraced, 1,000 samples a second, run after run
    until main was sampled 300 times (a short program: several runs; at most 20): the samples with `func`
    of the program's file on top over those with the program's main on the stack."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    out = d / "spy.txt"
    top = under = 0
    pat = re.compile(r"(\S+) \((.*):\d+\)$")
    for _ in range(20):
        _run([spy, "record", "-r", "1000", "--format", "raw", "-o", str(out), "--", *python_cmd(), _prog(name),
              size], env, str(d))
        for ln in out.read_text().splitlines():
            stack, n = ln.rsplit(" ", 1)
            frames = [pat.match(f) for f in stack.split(";")]
            mine = [m.group(1) for m in frames if m and os.path.basename(m.group(2)) == f"{name}.py"]
            if "main" in mine:
                under += int(n)
                top += int(n) if frames[-1] and frames[-1].group(1) == func else 0
        if under >= 300:
            break
    assert under >= 300, f"py-spy took {under} samples of {name} {size}'s main in 20 runs"
    return top / under


def run_ocular(env, d, name, size, tag="o", near_zero=False, extra=()):
    out, rep = d / f"{tag}.pstats", d / f"{tag}.report.json"
    p = _run([*python_cmd(), "-m", "ocular", "-q", *(["--near-zero"] if near_zero else []), *extra, "--report-json",
              "--report", str(rep), "--all", "--top", "1000000", "-o", str(out), _prog(name), size], env, str(d))
    report = json.loads(rep.read_text())
    assert len(report["functions"]) == report["functions_total"], "the report left rows out"
    return Profile(out, p.stdout, name in THREADED, report)


def _log(**kw):
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps(dict(kw, t=time.time())) + "\n")


# ---- comparisons --------------------------------------------------------------------------------------


def _is_python(key):
    # (not C functions, file "~", nor asyncio tasks' steps, file "<asyncio task>": rows of Ocular's own,
    # which cProfile has not, with no self time)
    return key[0] not in ("~", "<asyncio task>")


def _ocular_own(key):
    """A row of Ocular's own ("ocular: waiting for the disk": the recorder's waits, never another
    function's self time): no share of the program's time; in the sums of a run's rows."""
    return key[0] == "<ocular>"


def _program_file(key):
    return key[0].startswith(PROG_DIR + os.sep) or key[0].startswith("exact_gen_")


def _cache_dependent(key):
    return key[0].startswith("<frozen ") and key[2] in FROZEN_CACHES


def _label(k):
    return f"{os.path.basename(k[0])}:{k[1]} {k[2]}" if _is_python(k) else k[2]


def count_mismatches(ours, theirs, threaded):
    """Python functions whose calls differ: [(key, cProfile's (primitive, total), Ocular's)]."""
    bad = []
    for k in sorted(set(ours.stats) | set(theirs.stats)):
        if not _is_python(k) or _ocular_own(k) or _cache_dependent(k):
            continue
        o, t = ours.row(k), theirs.row(k)
        if o[1] != t[1] or (not threaded and o[0] != t[0]) or (threaded and _program_file(k) and o[0] != o[1]):
            bad.append((k, tuple(t[:2]), tuple(o[:2])))
    return bad


def partial_c_rows(ours, theirs):
    """C functions Ocular does not give in full (a de-instrumented cheap call site) or that only one
    profiler names so: folded into their callers for time shares."""
    return {k for k in set(ours.stats) | set(theirs.stats) if not _is_python(k) and ours.row(k)[1] != theirs.row(k)[1]}


def fold(self_times, callers, folded):
    """self_times ({key: time}) with each folded row's time moved to its callers, in proportion to the
    self time of each caller's calls to it as `callers` ({key: {caller: [nc, cc, tt, ct]}}) gives it; a
    root's stays."""
    st = dict(self_times)
    for _ in range(8):  # a folded row called by a folded row: passed on again
        moved = False
        for k in folded:
            t = st.get(k, 0.0)
            cs = {c: v[2] for c, v in callers.get(k, {}).items() if c != k}
            if t <= 0 or not cs:
                continue
            w = sum(cs.values())
            for c, v in cs.items():
                st[c] = st.get(c, 0.0) + t * (v / w if w > 0 else 1 / len(cs))
            st[k] = 0.0
            moved = True
        if not moved:
            break
    return st


def share_diffs(ours, theirs, only=None):
    """[(|difference|, key, Ocular's share, the reference's, the reference)] for every row, the worst first: each row's
    time over the sum of the rows' (`only`: just these rows, among themselves; Ocular's own rows never)."""
    keys = {k for k in (set(ours) | set(theirs) if only is None else only) if not _ocular_own(k)}
    to, tt = sum(ours.get(k, 0.0) for k in keys), sum(theirs.get(k, 0.0) for k in keys)
    assert to > 0 and tt > 0
    diffs = [(abs(ours.get(k, 0.0) / to - theirs.get(k, 0.0) / tt), k, ours.get(k, 0.0) / to, theirs.get(k, 0.0) / tt,
              "cProfile") for k in keys]
    return sorted(diffs, key=lambda d: (-d[0], repr(d[1])))


def _fmt_diffs(diffs, n=5):
    return "; ".join(f"{_label(k)}: ocular {o:.1%} {ref} {t:.1%}" for _, k, o, t, ref in diffs[:n])


def _tottimes(p):
    return {k: v[2] for k, v in p.stats.items()}


def _callers(p):
    return {k: v[4] for k, v in p.stats.items()}


def own_rows(*profiles):
    return {k for p in profiles for k in p.stats if _program_file(k)}


def with_truth(diffs, ref, self_of, main_total):
    """diffs with the TRUTH_ROWS function's row (when ref has a truth) as a share of main's inclusive time:
    Ocular's (its self time over main's total) against the range from cProfile's (the same share in ref) to
    the program's own untraced timing -- a tracer costs the event loop's many small calls more than crunch's
    few, so its share of crunch falls below the untraced one, cProfile's the furthest; the difference is the
    distance to that range."""
    if ref.truth is None:
        return diffs
    out = []
    for d in diffs:
        k = d[1]
        if _is_python(k) and _program_file(k) and (k[2] in TRUTH_ROWS.values() or
                                                   (k[2] == "main" and getattr(ref, "truth_main", False))):
            truth = ref.truth if k[2] != "main" else 1.0 - ref.truth  # (main's own: all but the truth row's)
            o, cp = self_of(k) / main_total, ref.row(k)[2] / ref.row(_main_key(ref))[3]
            lo, hi = min(cp, truth), max(cp, truth)
            d = (max(0.0, lo - o, o - hi), k, o, truth, f"(of main's time; cProfile {cp:.1%}) untraced")
        out.append(d)
    return sorted(out, key=lambda d: (-d[0], repr(d[1])))


def _main_key(p):
    return next(k for k in p.stats if _program_file(k) and k[2] == "main")


def default_share_diffs(ours, theirs, ref):
    """Shares of Ocular's pstats against cProfile's (see the module's docstring)."""
    if ref is not theirs:  # threads: the program's rows, against cProfile on the calls made one after the other
        return share_diffs(_tottimes(ours), _tottimes(ref), own_rows(ours, ref))
    folded = partial_c_rows(ours, theirs)
    diffs = share_diffs(fold(_tottimes(ours), _callers(ours), folded),
                        fold(_tottimes(theirs), _callers(theirs), folded))
    return with_truth(diffs, ref, lambda k: ours.row(k)[2], ours.row(_main_key(ours))[3])


def best_pairing(ours_runs, ref_runs, diffs_of, tolerance):
    """Compare every Ocular run with every reference run (wall-clock shares in two processes: a stall of
    the machine in one run is a spike in one row; a pairing without one shows the profilers' agreement, a
    systematic difference shows in every pairing).  Returns (the pairing's worst difference, its diffs),
    the best pairing's."""
    best = None
    for o in ours_runs:
        for r in ref_runs:
            diffs = diffs_of(o, r)
            worst = diffs[0][0] if diffs else 0.0
            if best is None or worst < best[0]:
                best = (worst, diffs)
            if worst <= tolerance:
                return best
    return best


def check_no_time_in_no_row(ours, name, size):
    """See the module's docstring.  A root: a row without callers (its inclusive time counted once, as a
    root's primitive calls give it)."""
    total_self = sum(v[2] for v in ours.stats.values())
    roots = {k: v[3] for k, v in ours.stats.items() if not v[4]}
    total_roots = sum(roots.values())
    assert abs(total_self - total_roots) <= NO_ROW_TOLERANCE * total_roots, (
        f"{name} {size}: self times add up to {total_self:.6f} s, the roots' inclusive times to "
        f"{total_roots:.6f} s: {sorted(((round(v, 6), _label(k)) for k, v in roots.items()), reverse=True)[:8]}")
    main = [v for k, v in ours.stats.items() if _program_file(k) and k[2] == "main"]
    assert len(main) == 1 and main[0][1] == 1, main
    ct = main[0][3]
    off_cpu = max(0.0, ours.main_s - ours.cpu_s)  # a stall of the program around main's first or last event
    assert abs(ct - ours.main_s) <= MAIN_TOLERANCE * ours.main_s + off_cpu, (
        f"{name} {size}: main's inclusive time {ct:.6f} s, the program measured {ours.main_s:.6f} s "
        f"({ours.cpu_s:.6f} s of CPU)")


# ---- default mode -------------------------------------------------------------------------------------


def run_pairs(env, tmp_path, name, size, near_zero=False):
    """Yield (Ocular's run, cProfile's, the share reference) run after run: at most MAX_RUNS, and no more once
    ATTEMPTS of them were steady in both runs (a comparison that passes stops earlier)."""
    steady = 0
    for i in range(MAX_RUNS):
        d = tmp_path / f"run{i}"
        d.mkdir()
        theirs = run_cprofile(env, d, name, size)
        ours = run_ocular(env, d, name, size, near_zero=near_zero)
        ref = run_cprofile(env, d, name, size, tag="seq", sequential=True) if name in THREADED else theirs
        if name in TRUTH_ROWS:
            ref.truth = run_truth(env, d, name, size)
            ref.truth_main = name in TRUTH_MAIN
        yield ours, theirs, ref
        steady += ours.steady and ref.steady
        if steady >= ATTEMPTS:
            return


def settle(ours_runs, ref_runs, diffs_of, tolerance, what):
    """The comparison after the runs: (worst difference, diffs) of the best pairing; if none is within the
    tolerance, the best pairing of the steady runs only, or a skip when no run of Ocular's and of the
    reference's was steady (the machine kept the program from the CPU: wall-clock shares mean nothing then;
    the call counts were checked all the same)."""
    best = best_pairing(ours_runs, ref_runs, diffs_of, tolerance)
    if best[0] <= tolerance:
        return best
    steady_o, steady_r = [o for o in ours_runs if o.steady], [r for r in ref_runs if r.steady]
    if not steady_o or not steady_r:
        pytest.skip(f"{what}: no steady run to compare ({_runs_text(ours_runs, ref_runs)}; steady: at least "
                    f"{STEADY:.0%}); the best pairing of the unsteady ones: {_fmt_diffs(best[1], 3)}")
    return best_pairing(steady_o, steady_r, diffs_of, tolerance)


def _runs_text(ours_runs, ref_runs):
    return (f"{len(ours_runs)} runs, the program's CPU share of its wall time: Ocular "
            f"{[round(o.cpu_share, 2) for o in ours_runs]}, cProfile {[round(r.cpu_share, 2) for r in ref_runs]}")


@pytest.mark.quiet  # (time shares measured in two runs: another test's load beside one run skews them)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", PROGRAMS)
def test_default_mode_matches_cprofile(env, tmp_path, name, size):
    threaded = name in THREADED
    ours_runs, ref_runs = [], []

    def diffs_of(o, r):
        return default_share_diffs(o, None if threaded else r, r)

    for ours, theirs, ref in run_pairs(env, tmp_path, name, size):
        rep = ours.report
        # nothing estimated: every Python function's calls are counted
        assert rep["exact_calls"] and not rep["near_zero"], {k: rep[k] for k in ("exact_calls", "near_zero")}
        marked = [(f["name"], f["estimated_fields"]) for f in rep["functions"] if f["file"] != "~"
                  and (f["deinstrumented"] or f["sample"] or "calls" in f["estimated_fields"])]
        assert not marked, f"{name} {size}: Python functions not fully counted in the default mode: {marked}"
        bad = count_mismatches(ours, theirs, threaded)
        assert not bad, (f"{name} {size}: calls (primitive, total) differ from cProfile's for {len(bad)} "
                         f"functions: " + "; ".join(f"{_label(k)}: cProfile {t} ocular {o}" for k, t, o in bad[:20]))
        check_no_time_in_no_row(ours, name, size)
        ours_runs.append(ours)
        ref_runs.append(ref)
        worst, diffs = best_pairing(ours_runs, ref_runs, diffs_of, TOLERANCE)
        _log(test="default", name=name, size=size, run=len(ours_runs), worst=round(worst, 4),
             cpu=[round(ours.cpu_share, 2), round(ref.cpu_share, 2)], top=_fmt_diffs(diffs, 3))
        if worst <= TOLERANCE:
            break
    worst, diffs = settle(ours_runs, ref_runs, diffs_of, TOLERANCE, f"{name} {size}")
    assert worst <= TOLERANCE, (f"{name} {size}: self-time shares differ from cProfile's by more than "
                                f"{TOLERANCE:.0%} in every pairing of {_runs_text(ours_runs, ref_runs)}; the best "
                                f"pairing: " + _fmt_diffs(diffs))


# ---- near-zero mode ------------------------------------------------------------------------------------


def _report_rows(rep):
    """{key: row}; rows of one key merged, as pstats merges them (code objects of one name and first line:
    exec'd code such as namedtuple's, "<string>" line 1; C functions of one name bound to different objects)."""
    rows = {}
    for f in rep["functions"]:
        k = _key(f["file"], f["line"], f["name"])
        if k not in rows:
            rows[k] = dict(f)
            continue
        m = rows[k]
        for field in ("calls", "segments", "self_ns", "total_ns"):
            m[field] += f[field]
        for field in ("deinstrumented", "sample"):
            m[field] = m[field] or f[field]
        for field in ("estimated_fields", "untraced_callees"):
            m[field] = sorted(set(m[field]) | set(f[field]))
    return rows


def _calls_marked(f):
    return "calls" in f["estimated_fields"] or f["deinstrumented"] or f["sample"]


def _self_marked(f):
    return "self" in f["estimated_fields"] or bool(f["untraced_callees"]) or f["deinstrumented"] or f["sample"]


def near_zero_counts(ours, theirs, threaded):
    """Python rows the report does not mark whose calls differ from cProfile's.  Calls: the run's pstats (as
    cProfile counts them, a generator's resumes too: the report's "calls" are starts, its "segments" the
    resumes); the marks: the report's."""
    bad = []
    for k, f in _report_rows(ours.report).items():
        if not _is_python(k) or _ocular_own(k) or _cache_dependent(k) or _calls_marked(f):
            continue
        o, t = ours.row(k), theirs.row(k)
        if o[1] != t[1] or (not threaded and o[0] != t[0]):
            bad.append(f"{_label(k)}: cProfile {tuple(t[:2])} ocular {tuple(o[:2])} (report {f['calls']} calls, "
                       f"{f['segments']} segments)")
    return bad


def near_zero_time_in_no_row(ours):
    """The report's self times (estimates included: an estimate moves time from a caller's self time to a
    callee's, it makes none) against the roots' total times (the roots: the rows without callers in the
    same run's pstats): (sum of self times, sum of the roots' totals, {root: total})."""
    rows = _report_rows(ours.report)
    roots = {k: rows[k]["total_ns"] for k, v in ours.stats.items() if not v[4] and k in rows}
    return sum(f["self_ns"] for f in rows.values()), sum(roots.values()), roots


def near_zero_share_diffs(ours, theirs, ref):
    """The report's self times (estimates included) against the reference's tottimes; C rows Ocular
    neither gives in full nor marks folded into their callers in both (the report's in proportion to the
    same run's pstats' callers); threads: the program's rows among themselves, against cProfile on the same
    calls made one after the other."""
    rows = _report_rows(ours.report)
    self_ns = {k: f["self_ns"] for k, f in rows.items()}
    if ref is not theirs:
        return share_diffs(self_ns, _tottimes(ref), own_rows(ours, ref))
    folded = {k for k in partial_c_rows(ours, theirs) if not (k in rows and _calls_marked(rows[k]))}
    diffs = share_diffs(fold(self_ns, _callers(ours), folded), fold(_tottimes(theirs), _callers(theirs), folded))
    return with_truth(diffs, ref, lambda k: self_ns.get(k, 0.0), rows[_main_key(ours)]["total_ns"])


def _unmarked_diffs(ours, theirs, ref):
    rows = _report_rows(ours.report)
    return [d for d in near_zero_share_diffs(ours, theirs, ref) if not (d[1] in rows and _self_marked(rows[d[1]]))]


# rows of the near-zero comparison whose self time is unmarked because of the bug of
# test_near_zero_names_the_untraced_callees_of_a_caller, {(program, function): reason}: an xfail when they (and
# no other row) are out of the tolerance, the assertion stays for every other row
NEAR_ZERO_UNMARKED_BUG = {
    ("many_modules", "source_to_code"):
        "near-zero: SourceLoader.source_to_code's self time holds its unrecorded calls to the de-instrumented "
        "_call_with_frames_removed (and compile), and its row names no untraced callee (3.13 with the preloaded "
        "modules: 10-15 % of all self time, unmarked, cProfile 0.3 %; see "
        "test_near_zero_names_the_untraced_callees_of_a_caller)",
}


# near-zero long programs whose estimates are more than 15 points off cProfile's shares, {program: reason
# with the measured numbers}: the assertion stays, an xfail when it fails (estimates from a few sampling
# windows vary from run to run: not strict)
# (gen_pipeline and oo_props were here until 2026-11-29: 5 of 16 and 3 of 15 attempts 15-35 points off; then
# 0 of 26 attempts each on 3.12-3.15 more than 6.1 points off.  threads was here until the evening of that
# day: work at 46-81 % of the program's self time against cProfile's 20-25 % in about one attempt in six --
# a worker blocked in sched_yield through another thread's window, and a first window opened ~90 ms late,
# both counted as work's own; then 0 of 28 attempts on 3.12-3.15 more than 13.8 points off)
NEAR_ZERO_LONG_OFF = {}


@pytest.mark.quiet  # (time shares measured in two runs: another test's load beside one run skews them)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", PROGRAMS)
def test_near_zero_marks_what_it_estimates(env, tmp_path, name, size):
    threaded = name in THREADED
    ours_runs, ref_runs = [], []

    def unmarked_of(o, r):
        return _unmarked_diffs(o, None if threaded else r, r)

    def every_of(o, r):
        return near_zero_share_diffs(o, None if threaded else r, r)

    for ours, theirs, ref in run_pairs(env, tmp_path, name, size, near_zero=True):
        rep = ours.report
        assert rep["near_zero"] and not rep["exact_calls"], {k: rep[k] for k in ("exact_calls", "near_zero")}
        bad = near_zero_counts(ours, theirs, threaded)
        assert not bad, f"{name} {size}: unmarked rows whose calls differ from cProfile's: {bad[:20]}"
        for f in rep["functions"]:  # a de-instrumented row says its figures are a sample or estimates
            assert not f["deinstrumented"] or f["sample"] or "calls" in f["estimated_fields"], f
        total_self, total_roots, roots = near_zero_time_in_no_row(ours)
        assert abs(total_self - total_roots) <= 2 * NO_ROW_TOLERANCE * total_roots, (
            f"{name} {size}: the report's self times add up to {total_self / 1e6:.3f} ms, the roots' totals to "
            f"{total_roots / 1e6:.3f} ms ({ {_label(k): round(v / 1e6, 3) for k, v in roots.items()} }); rows: "
            + "; ".join(f"{f['name']} self {f['self_ns'] / 1e6:.3f} total {f['total_ns'] / 1e6:.3f} ms"
                        for f in sorted(rep["functions"], key=lambda f: -f["total_ns"])[:8]))
        ours_runs.append(ours)
        ref_runs.append(ref)
        unmarked = best_pairing(ours_runs, ref_runs, unmarked_of, TOLERANCE)
        every = best_pairing(ours_runs, ref_runs, every_of, NEAR_ZERO_LONG_TOLERANCE)
        # (the long check of a program known to be off does not ask for more runs)
        long_ok = size != "long" or name in NEAR_ZERO_LONG_OFF or every[0] <= NEAR_ZERO_LONG_TOLERANCE
        _log(test="near_zero", name=name, size=size, run=len(ours_runs), unmarked=round(unmarked[0], 4),
             every=round(every[0], 4), windows=rep["sampling"]["windows"],
             cpu=[round(ours.cpu_share, 2), round(ref.cpu_share, 2)], top_unmarked=_fmt_diffs(unmarked[1], 3),
             top=_fmt_diffs(every[1], 3))
        if unmarked[0] <= TOLERANCE and long_ok:
            break
    unmarked = settle(ours_runs, ref_runs, unmarked_of, TOLERANCE, f"{name} {size}")
    known = [NEAR_ZERO_UNMARKED_BUG.get((name, d[1][2])) for d in unmarked[1] if d[0] > TOLERANCE]
    if known and all(known):
        pytest.xfail(f"{known[0]}; this time, the best pairing of {len(ours_runs)} run(s): "
                     + _fmt_diffs(unmarked[1], 3))
    assert unmarked[0] <= TOLERANCE, (f"{name} {size}: unmarked self-time shares differ from cProfile's by more "
                                      f"than {TOLERANCE:.0%} in every pairing of {_runs_text(ours_runs, ref_runs)}; "
                                      f"the best pairing: " + _fmt_diffs(unmarked[1]))
    if size != "long":
        return
    if name in NEAR_ZERO_LONG_OFF:
        if every[0] > NEAR_ZERO_LONG_TOLERANCE:
            pytest.xfail(f"{NEAR_ZERO_LONG_OFF[name]}; this time, the best pairing of {len(ours_runs)} run(s): "
                         + _fmt_diffs(every[1], 4))
        return
    every = settle(ours_runs, ref_runs, every_of, NEAR_ZERO_LONG_TOLERANCE, f"{name} {size}")
    assert every[0] <= NEAR_ZERO_LONG_TOLERANCE, (
        f"{name} {size}: self-time shares (estimates included) differ from cProfile's by more than "
        f"{NEAR_ZERO_LONG_TOLERANCE:.0%} in every pairing of {_runs_text(ours_runs, ref_runs)}; the best pairing: "
        + _fmt_diffs(every[1]))


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "near-zero: C functions called from one shared call site (importlib's _call_with_frames_removed calls "
    "compile, exec, _imp.find_frozen, _imp.create_dynamic...) lose their calls once the site is de-instrumented, "
    "and only the function called there last (exec) is marked: many_modules short, --no-sampling: "
    "builtins.compile 161-167 calls of 300 (3.13: 150 of 301) and _imp.find_frozen 167-168 of 300 (3.13: 178 of "
    "329), with deinstrumented false, sample false, no estimated field, and _call_with_frames_removed's "
    "untraced_callees naming exec only; with sampling windows they are marked only when a window happens to "
    "see them"))
def test_near_zero_marks_c_functions_behind_a_shared_call_site(env, tmp_path):
    """--near-zero --no-sampling (no window estimates anything, so the marks alone tell what is not counted):
    a C function the default mode counts in full (an expensive call site is never de-instrumented there;
    cProfile's counts are the same) has, in near-zero mode, all its calls or a mark.  Both runs are Ocular's,
    so the process state (ABC caches...) is the same in both."""
    full = run_ocular(env, tmp_path, "many_modules", "short", tag="default")
    ours = run_ocular(env, tmp_path, "many_modules", "short", tag="near_zero", near_zero=True, extra=["--no-sampling"])
    short = [f"{k[2]}: {ours.row(k)[1]} calls of {full.row(k)[1]} (report {f['calls']})"
             for k, f in _report_rows(ours.report).items()
             if not _is_python(k) and ours.row(k)[1] < full.row(k)[1] and not _calls_marked(f)]
    assert not short, f"unmarked C rows short of the calls the default mode counts: {short}"


def test_near_zero_recursion_then_a_call_keeps_its_time(env, tmp_path):
    """fib_then_call.py (short) in near-zero mode: the report's self times add up to its roots' totals."""
    ours = run_ocular(env, tmp_path, "fib_then_call", "short", near_zero=True)
    total_self, total_roots, roots = near_zero_time_in_no_row(ours)
    rows = {f["name"]: (f["calls"], round(f["self_ns"] / 1e6, 3), round(f["total_ns"] / 1e6, 3))
            for f in ours.report["functions"] if _program_file(_key(f["file"], f["line"], f["name"]))}
    assert abs(total_self - total_roots) <= 2 * NO_ROW_TOLERANCE * total_roots, (
        f"the report's self times add up to {total_self / 1e6:.3f} ms, the roots' totals to "
        f"{total_roots / 1e6:.3f} ms; the program's rows (calls, self ms, total ms): {rows}")


@pytest.mark.xfail(strict=False, raises=AssertionError, reason=(
    "near-zero: a caller whose every call of a function came after that function's start was de-instrumented "
    "made no recorded call of it, and nothing recorded says it calls it: with --no-sampling its row names no "
    "untraced callee (3.14: sre_parse's getuntil -> Tokenizer.__next, 0 of 19 calls recorded).  A caller with "
    "recorded calls is named now (a code keeps 16 callers, not 4: 3.12's SourceLoader.source_to_code -> "
    "_call_with_frames_removed, 161 of 300 recorded, passes); a sampling window may see the others"))
def test_near_zero_names_the_untraced_callees_of_a_caller(env, tmp_path):
    """--near-zero --no-sampling: a Python function whose calls to a de-instrumented function are not all
    recorded (fewer than the default mode counts from it, per caller, in pstats) names that function in its
    report row's untraced_callees, or marks its self time as estimated.  Both runs are Ocular's."""
    e = dict(env, OCULAR_EXACT_PRELOAD="")  # (preloading the modules the test preloads elsewhere, 3.12 marks it)
    full = run_ocular(e, tmp_path, "many_modules", "short", tag="default")
    ours = run_ocular(e, tmp_path, "many_modules", "short", tag="near_zero", near_zero=True, extra=["--no-sampling"])
    rows = _report_rows(ours.report)
    names = {k: f["name"] for k, f in rows.items()}
    unnamed = []
    for callee, f in rows.items():
        if not _is_python(callee) or not f["deinstrumented"]:
            continue
        for caller, v in full.row(callee)[4].items():
            got = ours.row(callee)[4].get(caller, [0])[0]
            c = rows.get(caller)
            if got < v[0] and c and names[callee] not in c["untraced_callees"] and "self" not in c["estimated_fields"]:
                unnamed.append(f"{_label(caller)} -> {names[callee]}: {got} of {v[0]} calls recorded")
    assert not unnamed, f"callers whose self time holds unrecorded calls, unmarked: {unnamed}"
