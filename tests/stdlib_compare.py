"""Run CPython's own test modules untraced and under Ocular, and check that they end the same way.

    python tests/stdlib_compare.py [--modes adaptive,precise] [--threshold 500] [--set full|ci] [NAME ...]

Each test module runs in a fresh interpreter (the one running this script, with ``src/`` first on
``sys.path``): once untraced (``python -m test NAME``), then once per mode under
``python -m ocular --mode MODE --threshold N -o DIR/trace.json -m test NAME``.  The traced runs must
agree with the untraced one on the exit status and on regrtest's summary (``Result:``, and the
``Total tests: run=... failures=... skipped=...`` counts), and must leave a trace that is valid JSON
with balanced slices and no temporary file beside it.  A NAME may carry regrtest options after it, e.g. ``"test_threading -m ThreadTests"``.

The modules whose results change under *any* sys.monitoring tool (INHERENT below; the reasons and a
reproduction are in docs/stdlib-differences.md) are never skipped: in each mode they also run under a
no-op tool (``tests/noop_tool.py``: the same tool id, events and threshold, callbacks that record
nothing), and Ocular must end as the no-op tool does (exit status and tests run).  The table says whether the no-op tool differed from
the untraced run (the difference is inherent) or not (then Ocular matched the untraced run too).
Exit status 0 when every module agrees; a table of the runs is printed either way.  A run that exceeds
--timeout is reported with the native backtraces of its threads (gdb) before it is killed.
Test cases whose result changes under any sys.monitoring tool with the same events in a way the no-op
tool cannot show (CPython's behaviour, not Ocular's; CPYTHON_QUIRKS) are left out of every run on the
versions concerned, and the table says so.

The regrtest package is part of CPython's standard library (pyenv's builds include it); if it is missing
the script says so and exits 2.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
NOOP = os.path.join(ROOT, "tests", "noop_tool.py")
sys.path.insert(0, os.path.join(ROOT, "tests"))
from conftest import check_balanced  # noqa: E402
from watchdog import native_backtraces  # noqa: E402

def stdlib_name(*candidates):
    """The first of these test modules the running interpreter's test package has (3.15 moved test_posix
    into the test_os package)."""
    import importlib.util

    for name in candidates:
        try:
            if importlib.util.find_spec(f"test.{name}") is not None:
                return name
        except ImportError:
            pass
    return candidates[0]


TEST_POSIX = stdlib_name("test_posix", "test_os.test_posix")

# Modules that must end exactly as untraced, in every mode.  test_threading is long and forks a lot: its
# core classes only.
FULL = [
    "test_generators", "test_exceptions", "test_threading -m ThreadTests -m LockTests -m RLockTests "
    "-m EventTests -m ConditionAsRLockTests -m ConditionTests -m SemaphoreTests -m BarrierTests",
    "test_asyncio.test_tasks", "test_json", "test_re", "test_contextlib", "test_itertools",
    "test_functools", "test_with", "test_coroutines", "test_dict",
    # language: classes, scopes, calls, exceptions, pattern matching, comprehensions, async generators
    "test_class", "test_scope", "test_super", "test_property", "test_keywordonlyarg", "test_raise",
    "test_exception_group", "test_except_star", "test_patma", "test_listcomps", "test_genexps",
    "test_asyncgen", "test_contextlib_async", "test_types", "test_abc", "test_dataclasses", "test_enum",
    "test_typing", "test_inspect", "test_traceback", "test_sys_settrace", "test_weakref",
    # library: containers, numbers, text
    "test_collections", "test_deque", "test_heapq", "test_bisect", "test_set", "test_list", "test_tuple",
    "test_int", "test_fractions", "test_statistics", "test_random", "test_operator", "test_copy",
    "test_struct", "test_base64", "test_csv", "test_difflib", "test_textwrap", "test_string", "test_pprint",
    "test_shlex", "test_sched", "test_queue",
    # fork workers killed while busy (it hung when Ocular caught SIGTERM in fork children)
    "test_concurrent_futures.test_deadlock",
    # fork, exec (posix.execve, fexecve), register_at_fork; subprocess with preexec_fn (its children run
    # the at-fork hooks, then exec from C)
    TEST_POSIX, "test_subprocess",
    # a program's own co_extra index (test_code's CoExtra tests: Ocular's per-code data is not in co_extra), no
    # GC object per code object (test_descr's slots tests count them), doctest's own tracing
    "test_code", "test_descr", "test_doctest",
    # profilers beside Ocular: cProfile (sys.monitoring), the pure-Python profile module and plain
    # sys.setprofile users (which once got a c_return of sys.setprofile itself: 'Bad return')
    "test_cprofile", "test_profile", "test_sys_setprofile",
]
# Modules whose result changes under any sys.monitoring tool (docs/stdlib-differences.md): compared with
# the no-op tool in the same mode, never skipped.
INHERENT = {
    "test_monitoring": "its tests assert that no tool holds an id or has events set",
    "test_dis": "it disassembles live code, which shows INSTRUMENTED_* opcodes while a tool has events set",
    "test_opcache": "3.13 precise mode, 3.14 both modes: instrumentation turns specialization off where it "
                    "expects specialized forms",
    "test_tracemalloc": "test_get_traced_memory expects a zero peak between clear_traces() and the next call, but "
                        "CPython makes an int object (28 bytes) for the instruction offset it passes to a tool's "
                        "CALL callback, at call sites past offset 256 (3.12, 3.13; on 3.14+ Ocular ends as untraced)",
    "test_pdb": "3.13.0 and 3.14, adaptive mode: with another tool's events set, pdb stops at --Return-- of "
                "the function that called set_trace() instead of at its next line",
}
# What CI runs on every interpreter (with the INHERENT modules: 39 in all, 4-6 min on a loaded 2-core
# machine): the first dozen but test_asyncio.test_tasks (the longest), and a cross-section of the rest.
CI = [n for n in FULL[:12] if n != "test_asyncio.test_tasks"] + [
    "test_class", "test_scope", "test_super", "test_raise", "test_exception_group", "test_except_star",
    "test_patma", "test_listcomps", "test_asyncgen", "test_contextlib_async", "test_types", "test_dataclasses",
    "test_enum", "test_typing", "test_inspect", "test_traceback", "test_sys_settrace", "test_collections",
    "test_set", "test_struct", "test_cprofile", "test_profile", "test_sys_setprofile",
    # 2-6 s a run (loaded 2-core machine); test_subprocess (18-25 s a run on 3.12, 27-34 s on 3.13 and 3.15)
    # is in the full set only
    TEST_POSIX,
]

# CPython's own behaviour under sys.monitoring, not Ocular's (a no-op Python tool with the same events does
# the same): these test cases are left out of every run, untraced and traced, on the versions listed.
CPYTHON_QUIRKS = {
    # 3.15: with INSTRUCTION events on (precise mode), the KeyboardInterrupt that _testinternalcapi's
    # SelfInterruptingContextManager raises on leaving __enter__ escapes before __exit__ is set up
    "test_with": [((3, 15), "test_exit_called_after_interrupt")],
}


def quirk_options(name):
    """regrtest options that leave out this interpreter's CPYTHON_QUIRKS for test module `name`."""
    out = []
    for since, case in CPYTHON_QUIRKS.get(name, ()):
        if sys.version_info[:2] >= since:
            out += ["-i", case]
    return out


SUMMARY = re.compile(r"^(Result: .*|Total tests: .*|\d+ tests? (OK|failed|skipped|omitted).*)$", re.M)


def tests_run(summ):
    """'run=N' of regrtest's summary: what is compared for the INHERENT modules, with the exit status (the
    number of their failing cases varies from run to run on some versions, under any tool: 3.15's
    test_opcache has dis mis-decode instrumented code now and then)."""
    for line in summ:
        m = re.search(r"run=([\d,]+)", line)
        if m:
            return m.group(1)
    return None


def summary(out):
    return [m.group(1).strip() for m in SUMMARY.finditer(out)]


def run(cmd, timeout):
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace", start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        native_backtraces(p.pid, f"{shlex.join(cmd)} still running after {timeout:g} s", stream=sys.stdout)
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return "timeout", out, time.monotonic() - t0


# traces past this size are checked at both ends, not parsed: with every call recorded, test_set in precise
# mode writes 2.9 GB of JSON, which json.load takes minutes and 13 GB of memory to read (tests/test_formats.py
# and tests/test_stress.py parse large traces of their own)
PARSE_LIMIT = 256 << 20


def check_trace(path):
    """'' if the trace is valid JSON with balanced slices (past PARSE_LIMIT: a whole Chrome trace object at
    both ends), else what is wrong."""
    try:
        size = os.path.getsize(path)
        if size > PARSE_LIMIT:
            with open(path, "rb") as f:
                head = f.read(64)
                f.seek(size - 64)
                tail = f.read().rstrip()
            if not head.startswith(b'{"traceEvents":[') or not tail.endswith(b"}"):
                return f"bad trace: {size:,} bytes, not a whole Chrome trace object at its ends"
            return ""
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        check_balanced(data["traceEvents"])
        return ""
    except Exception as exc:  # report, do not stop the other modules
        return f"bad trace: {exc!r}"[:300]
    finally:
        if os.path.exists(path):
            os.unlink(path)


def stray_files(tmp, prefix):
    """'' unless the traced run left temporary files beside its trace (a forked child's recording, say:
    those go to a private directory, docs/fork.md), else what it left."""
    stray = sorted(n for n in os.listdir(tmp) if n.startswith(prefix) and n.endswith(".tmp"))
    return f"left {len(stray)} temporary file(s) beside the trace: {stray[:4]}" if stray else ""


def compare_module(spec, py, args, modes, tool_id, tmp):
    """One test module, untraced and then traced in each mode: (its table row, its failures)."""
    failures = []
    name, *extra = shlex.split(spec)
    quirks = quirk_options(name)
    extra += quirks
    base_rc, base_out, base_t = run([py, "-m", "test", name, *extra], args.timeout)
    base_sum = summary(base_out)
    label = " (subset)" if len(extra) > len(quirks) else f" (without {len(quirks) // 2} CPython quirk)" if quirks else ""
    row = [f"{name}{label}: untraced rc={base_rc} {base_t:.0f}s"]
    if base_rc == "timeout" or not base_sum:
        failures.append(f"{name}: the untraced run gave no summary (rc={base_rc})\n{base_out[-2000:]}")
    for mode in modes:
        want_rc, want_sum, against = base_rc, base_sum, "untraced"
        if name in INHERENT:  # the reference is a tool that does nothing
            want_rc, noop_out, noop_t = run([py, NOOP, "--mode", mode, "--threshold", str(args.threshold),
                                             "--tool-id", tool_id, "-m", "test", name, *extra], args.timeout)
            want_sum, against = summary(noop_out), "no-op tool"
            same = want_rc == base_rc and want_sum == base_sum
            row.append(f"no-op tool {mode} rc={want_rc} {noop_t:.0f}s "
                       f"{'same as untraced' if same else 'DIFFERS from untraced (inherent)'}")
        trace = os.path.join(tmp, f"{name}.{mode}.json")
        cmd = [py, "-m", "ocular", "--mode", mode, "--threshold", str(args.threshold), "-q",
               "--no-report", "-o", trace, "-m", "test", name, *extra]
        rc, out, t = run(cmd, args.timeout)
        got = summary(out)
        problem = ""
        if name in INHERENT and rc == base_rc and got == base_sum:
            problem = check_trace(trace) or stray_files(tmp, f"{name}.{mode}.")  # as untraced: better than any tool
        elif rc != want_rc:
            problem = f"exit status {rc} != {want_rc} ({against})"
        elif name in INHERENT and tests_run(got) != tests_run(want_sum):
            problem = f"tests run {tests_run(got)} != {tests_run(want_sum)} ({against})"
        elif name not in INHERENT and got != want_sum:
            problem = f"summary {got} != {want_sum} ({against})"
        else:
            problem = check_trace(trace) or stray_files(tmp, f"{name}.{mode}.")
        row.append(f"{mode} rc={rc} {t:.0f}s {'OK' if not problem else 'DIFFERS'}")
        if problem:
            failures.append(f"{name} [{mode}]: {problem}\n{out[-3000:]}")
    return "  " + ", ".join(row) + f"  [{'; '.join(base_sum[-2:])}]", failures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="test modules (default: --set, then the INHERENT modules)")
    ap.add_argument("--set", choices=("full", "ci"), default="full")
    ap.add_argument("--modes", default="adaptive,precise")
    ap.add_argument("--threshold", type=int, default=500)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run")
    ap.add_argument("--jobs", "-j", type=int, default=1, help="test modules compared at a time (default 1)")
    args = ap.parse_args(argv)
    # Started in the background by a non-interactive shell (nohup, `cmd &`, some CI runners), we inherit
    # SIGINT ignored, and so would every test interpreter: test_generators' SignalAndYieldFromTest (which
    # raises SIGINT and expects KeyboardInterrupt) then fails, traced and untraced alike.  A handler of
    # ours becomes the default action across exec, so the test modules see a normal SIGINT.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    py = sys.executable
    if subprocess.run([py, "-c", "import test.libregrtest"], capture_output=True).returncode != 0:
        print(f"{py} has no regrtest (the stdlib `test` package is not installed): nothing to compare")
        return 2
    names = args.names or (FULL if args.set == "full" else CI) + list(INHERENT)
    # the no-op tool takes the tool id Ocular takes by default (test_monitoring sees which one is held)
    probe = run([py, "-c", "import ocular; ocular.start_tracing(perfetto=False, report=False); "
                 "print(ocular.stop_tracing().tool_id)"], 120)
    tool_id = probe[1].split()[-1] if probe[0] == 0 and probe[1].split() else "2"
    modes = [m for m in args.modes.split(",") if m]
    failures = []
    start = time.monotonic()
    print(f"Python {sys.version.split()[0]}, threshold {args.threshold}, modes {', '.join(modes)}, "
          f"{len(names)} modules", flush=True)
    with tempfile.TemporaryDirectory(prefix="ocular-stdlib-") as tmp:
        # --jobs modules at a time (each module's runs one after another, so a traced run and the untraced
        # one it is compared with see the same load); rows are printed in the list's order
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for row, failed in pool.map(lambda spec: compare_module(spec, py, args, modes, tool_id, tmp), names):
                print(row, flush=True)
                failures += failed
    for f in failures:
        print("\nFAIL " + f)
    bad = {f.split(":")[0].split(" [")[0] for f in failures}
    print(f"\n{len(names) - len(bad)}/{len(names)} modules end the same traced as untraced (or, for "
          f"{len([n for n in names if n in INHERENT])} of them, as under a no-op tool); "
          f"{time.monotonic() - start:.0f} s in all")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
