"""The tests' watchdog (tests/watchdog.py, wired in by conftest.py): a hung child process or a hung test
is reported with the native backtraces of every thread, so the CI log alone diagnoses it."""

import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

HANGS = """
import subprocess, sys, time
def test_child_hangs():
    subprocess.run([sys.executable, "-c", "import time\\ndef stuck_in_child(): time.sleep(300)\\nstuck_in_child()"],
                   timeout=3)
def test_itself_hangs():
    time.sleep(300)
"""


@pytest.fixture
def hanging_tests(tmp_path):
    if not shutil.which("gdb"):
        pytest.skip("gdb is not installed: the watchdog prints no backtraces without it")
    (tmp_path / "test_hangs.py").write_text(HANGS)
    return tmp_path


def run_pytest(tmp_path, k, **env):
    e = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
                           "-k", k, "test_hangs.py"], cwd=tmp_path, env=e, capture_output=True, text=True,
                          timeout=300)


def test_hung_child_process_gets_native_backtraces(hanging_tests):
    p = run_pytest(hanging_tests, "child")
    out = p.stdout + p.stderr
    assert p.returncode == 1 and "TimeoutExpired" in out, out
    assert "===== watchdog:" in out and "still running after 3 s" in out, out
    assert "Thread 1 (" in out and "clock_nanosleep" in out, out  # gdb's "thread apply all bt"


def test_hung_test_gets_native_backtraces_and_ends(hanging_tests):
    p = run_pytest(hanging_tests, "itself", OCULAR_TEST_TIMEOUT_TEST="3")
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "test_itself_hangs still running after its time limit" in out and "Thread 1 (" in out, out
    assert "clock_nanosleep" in out and "test_hangs.py" in out, out  # native, then Python (faulthandler)
