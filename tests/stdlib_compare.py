"""Run CPython's own test modules untraced and under Ocular, and check that they end the same way.

    python tests/stdlib_compare.py [--modes adaptive,precise] [--threshold 500] [--set full|ci] [NAME ...]

Each test module runs in a fresh interpreter (the one running this script, with ``src/`` first on
``sys.path``): once untraced (``python -m test NAME``), then once per mode under
``python -m ocular --mode MODE --threshold N -o DIR/trace.json -m test NAME``.  The traced runs must
agree with the untraced one on the exit status and on regrtest's summary (``Result:``, and the
``Total tests: run=... failures=... skipped=...`` counts), and must leave a trace that is valid JSON
with balanced slices.  A NAME may carry regrtest options after it, e.g. ``"test_threading -m ThreadTests"``.
Exit status 0 when every module agrees; a table of the runs is printed either way.  Test cases whose result
changes under any sys.monitoring tool with the same events (CPython's behaviour, not Ocular's; CPYTHON_QUIRKS)
are left out of every run on the versions concerned, and the table says so.

The regrtest package is part of CPython's standard library (pyenv's builds include it); if it is missing
the script says so and exits 2.
"""

import argparse
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
sys.path.insert(0, os.path.join(ROOT, "tests"))
from conftest import check_balanced  # noqa: E402

# test_threading is long and forks a lot: its core classes only
FULL = [
    "test_generators", "test_exceptions", "test_threading -m ThreadTests -m LockTests -m RLockTests "
    "-m EventTests -m ConditionAsRLockTests -m ConditionTests -m SemaphoreTests -m BarrierTests",
    "test_asyncio.test_tasks", "test_json", "test_re", "test_contextlib", "test_itertools",
    "test_functools", "test_with", "test_coroutines", "test_dict",
]
# what CI runs: all but test_asyncio.test_tasks (the longest); about 2 minutes per interpreter here
CI = [n for n in FULL if n != "test_asyncio.test_tasks"]

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


def summary(out):
    return [m.group(1).strip() for m in SUMMARY.finditer(out)]


def run(cmd, timeout):
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace", timeout=timeout)
        return p.returncode, p.stdout + p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return "timeout", out, time.monotonic() - t0


def check_trace(path):
    """'' if the trace is valid JSON with balanced slices, else what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        check_balanced(data["traceEvents"])
        return ""
    except Exception as exc:  # report, do not stop the other modules
        return f"bad trace: {exc!r}"[:300]
    finally:
        if os.path.exists(path):
            os.unlink(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="test modules (default: --set)")
    ap.add_argument("--set", choices=("full", "ci"), default="full")
    ap.add_argument("--modes", default="adaptive,precise")
    ap.add_argument("--threshold", type=int, default=500)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run")
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
    names = args.names or (FULL if args.set == "full" else CI)
    modes = [m for m in args.modes.split(",") if m]
    failures = []
    print(f"Python {sys.version.split()[0]}, threshold {args.threshold}, modes {', '.join(modes)}")
    with tempfile.TemporaryDirectory(prefix="ocular-stdlib-") as tmp:
        for spec in names:
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
                trace = os.path.join(tmp, f"{name}.{mode}.json")
                cmd = [py, "-m", "ocular", "--mode", mode, "--threshold", str(args.threshold), "-q",
                       "--no-report", "-o", trace, "-m", "test", name, *extra]
                rc, out, t = run(cmd, args.timeout)
                got = summary(out)
                problem = ""
                if rc != base_rc:
                    problem = f"exit status {rc} != {base_rc}"
                elif got != base_sum:
                    problem = f"summary {got} != {base_sum}"
                else:
                    problem = check_trace(trace)
                row.append(f"{mode} rc={rc} {t:.0f}s {'OK' if not problem else 'DIFFERS'}")
                if problem:
                    failures.append(f"{name} [{mode}]: {problem}\n{out[-3000:]}")
            print("  " + ", ".join(row) + f"  [{'; '.join(base_sum[-2:])}]", flush=True)
    for f in failures:
        print("\nFAIL " + f)
    print(f"\n{len(names) - len({f.split(':')[0].split(' [')[0] for f in failures})}/{len(names)} modules "
          f"pass identically with and without tracing")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
