"""Shared test helpers: run Python snippets in a subprocess with Ocular importable, load and check traces."""

import collections
import json
import os
import shlex
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the directory holding the `ocular` package the subprocesses import; `make test-asan` points it at a copy
# of the package built with the sanitizers
SRC = os.environ.get("OCULAR_TEST_SRC") or os.path.join(ROOT, "src")


def python_cmd():
    """The command that starts a test interpreter: this one, under $OCULAR_TEST_WRAPPER when it is set
    (`make test-valgrind` runs the traced programs under valgrind that way)."""
    return shlex.split(os.environ.get("OCULAR_TEST_WRAPPER", "")) + [sys.executable]


def run_py(code, *args, cwd=None, env=None, timeout=120, check=True):
    """Run `code` (dedented) in a fresh interpreter (this one) with src/ on sys.path."""
    e = dict(os.environ)
    e["PYTHONPATH"] = SRC + os.pathsep + e.get("PYTHONPATH", "")
    if env:
        e.update(env)
    p = subprocess.run([*python_cmd(), "-c", textwrap.dedent(code), *args], cwd=cwd, env=e,
                       capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def load_trace(path):
    """Parse a Chrome trace JSON file written by Ocular and check its envelope."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    assert isinstance(data, dict)
    assert data["displayTimeUnit"] == "ns"
    assert isinstance(data["traceEvents"], list)
    return data


def check_balanced(events):
    """Every B has an E on the same (pid, tid), properly nested, timestamps monotonic per thread.

    Returns {(pid, tid): [(name, begin_ts, end_ts, depth), ...]} of the reconstructed slices.
    """
    stacks = collections.defaultdict(list)
    last_ts = {}
    slices = collections.defaultdict(list)
    for e in events:
        if e["ph"] not in ("B", "E", "i"):
            continue
        key = (e["pid"], e["tid"])
        ts = e["ts"]
        assert ts >= last_ts.get(key, float("-inf")), f"time goes backwards on {key}: {e}"
        last_ts[key] = ts
        if e["ph"] == "B":
            stacks[key].append(e)
        elif e["ph"] == "E":
            assert stacks[key], f"end without begin on {key} at {ts}"
            b = stacks[key].pop()
            slices[key].append((b["name"], b["ts"], ts, len(stacks[key])))
    for key, st in stacks.items():
        assert not st, f"begins without end on {key}: {[b['name'] for b in st]}"
    return slices


def names(events, ph="B"):
    return [e["name"] for e in events if e["ph"] == ph]


@pytest.fixture
def trace_path(tmp_path):
    return str(tmp_path / "trace.json")
