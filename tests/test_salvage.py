"""Salvaging unfinished traces with ``python -m ocular merge``: the recording a killed process leaves
(``x.<pid>.tmp``) and a protobuf trace cut in the middle keep every complete event, and the slices left
open are closed."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import SRC, check_balanced, load_trace, python_cmd

KILLED = r"""
import os, sys, time
import ocular
out = sys.argv[1]
ocular.start_tracing(output=out, deinstrument_threshold=0, report=False)
tmp = ocular._tmp_name(os.path.abspath(out))
def leaf(i):
    return i
def rec(n):
    if n == 0:
        for i in range(30000):  # enough events that the writer has written the frames' begins
            leaf(i)
        while os.path.getsize(tmp) < int(sys.argv[2]):
            time.sleep(0.01)
        print("ready", flush=True)
        time.sleep(600)
    rec(n - 1)
rec(10)
"""


def killed_trace(tmp_path, name, min_size, env=None):
    """Run KILLED, SIGKILL it once its .tmp holds the begins of rec()'s 11 frames; return the .tmp."""
    out = tmp_path / name
    e = dict(os.environ, PYTHONPATH=SRC, **(env or {}))
    p = subprocess.Popen([*python_cmd(), "-c", KILLED, str(out), str(min_size)], env=e, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n", p.stderr.read()
    finally:
        p.kill()
        p.communicate(timeout=60)
    return str(tmp_path / f"{name}.{p.pid}.tmp")


def merge(inp, out):
    p = subprocess.run([sys.executable, "-m", "ocular", "merge", inp, "-o", out], env=dict(os.environ, PYTHONPATH=SRC),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "incomplete" in p.stderr, p.stderr
    return out


def test_salvaged_json_closes_open_slices(tmp_path):
    tmp = killed_trace(tmp_path, "k.json", 200_000)
    ev = load_trace(merge(tmp, str(tmp_path / "m.json")))["traceEvents"]
    check_balanced(ev)
    assert [e["name"] for e in ev if e["ph"] == "B"].count("rec") == 11


TORN = r"""
import sys
import ocular
ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=0, report=False)
def leaf(i):
    return i
def rec(n):
    if n == 0:
        for i in range(30000):
            leaf(i)
        return
    rec(n - 1)
rec(10)
ocular.stop_tracing()
"""


def test_torn_pftrace_gets_its_open_slices_closed(tmp_path):
    """A protobuf trace cut in the middle (its writer died while writing it) has rec()'s 11 frames open on
    its thread's sequence: merge salvages it, ends them at that sequence's last time stamp, and every
    track is balanced (they were left open)."""
    from test_perfetto import Decoded

    full = tmp_path / "full.pftrace"
    p = subprocess.run([*python_cmd(), "-c", TORN, str(full)], env=dict(os.environ, PYTHONPATH=SRC,
                       OCULAR_PERFETTO_DEFLATE="0"), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    data = full.read_bytes()
    torn = tmp_path / "torn.pftrace.4242.tmp"
    torn.write_bytes(data[: len(data) // 2 + 3])  # mid-packet: the torn last packet is dropped
    d = Decoded(merge(str(torn), str(tmp_path / "m.pftrace")))
    slices = d.slices()  # asserts that every track is balanced
    recs = [s for track in slices.values() for s in track if s[0] == "rec"]
    assert len(recs) == 11, recs
    last = max(e["ts"] for e in d.events)
    assert all(end <= last for _, _, end, _, _ in recs)
