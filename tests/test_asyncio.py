"""asyncio task steps (#34, first part): a step of a task -- from the event loop's resume of the task's
coroutine to its next await -- is a slice named by the task around its coroutine's, in the Chrome JSON
and in the .pftrace; the report lists the tasks (steps, running time, slowest step) and the loop stalls
(steps that held the loop 100 ms or more) with the stack each was in when it passed 100 ms."""

import collections
import json
import os
import re
import subprocess

import pytest

from conftest import SRC, python_cmd

PROGRAM = """
import asyncio, time

async def fetch(i):
    await asyncio.sleep(0.01 * i)
    s = 0
    for k in range(2000):
        s += k
    return s

async def blocker():
    await asyncio.sleep(0.005)
    time.sleep(0.15)   # holds the loop: a stall

async def failing():
    await asyncio.sleep(0.001)
    raise ValueError("boom")

async def main():
    async with asyncio.TaskGroup() as tg:
        for i in range(3):
            tg.create_task(fetch(i), name=f"fetch-{i}")
        tg.create_task(blocker(), name="blocker")
    await asyncio.gather(fetch(1), fetch(2))
    t = asyncio.create_task(asyncio.sleep(10), name="sleeper")
    await asyncio.sleep(0.01)
    t.cancel()
    try:
        await t
    except asyncio.CancelledError:
        pass
    f = asyncio.create_task(failing(), name="failing")
    try:
        await f
    except ValueError:
        pass

asyncio.run(main())
"""


def _run(tmp_path, out, *extra, program=PROGRAM):
    (tmp_path / "prog.py").write_text(program)
    env = dict(os.environ, PYTHONPATH=SRC)
    p = subprocess.run([*python_cmd(), "-m", "ocular", "-o", out, "--report-json", *extra, "prog.py"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    text = p.stdout + p.stderr
    return json.JSONDecoder().raw_decode(text[text.index("{"):])[0]


def test_each_task_step_is_a_slice_named_by_its_task_around_its_coroutine(tmp_path):
    rep = _run(tmp_path, "t.json")
    ev = json.loads((tmp_path / "t.json").read_text())
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    xs = [e for e in ev if e.get("ph") == "X"]
    steps = [e for e in xs if e["args"].get("file") == "<asyncio task>"]
    count = collections.Counter(e["name"] for e in steps)
    # a task that awaits once: two steps (up to the await, and after it to its end)
    for name in ("fetch-0", "fetch-1", "fetch-2", "blocker", "failing"):
        assert count[name] == 2, count
    assert count["sleeper"] >= 2, count  # (its first step, and the one the cancellation throws into)
    assert count["Task (main)"] >= 4, count  # main: the TaskGroup, gather, the two tasks awaited
    # (asyncio.run's and gather's tasks, which the program did not name: one entry per coroutine)
    assert count["Task (fetch)"] == 4 and not [n for n in count if n.startswith("Task-")], count
    # each step wraps its task's coroutine: a slice of the coroutine with the same span on the same track
    spans = collections.defaultdict(set)
    for e in xs:
        if e["args"].get("file") != "<asyncio task>":
            spans[(e["tid"], e["ts"], e["dur"])].add(e["name"])
    coro = {"fetch-0": "fetch", "fetch-1": "fetch", "blocker": "blocker", "failing": "failing", "Task (main)": "main",
            "Task (fetch)": "fetch", "sleeper": "sleep"}
    for e in steps:
        if e["name"] in coro:
            assert coro[e["name"]] in spans[(e["tid"], e["ts"], e["dur"])], e
    # the report: the same steps and times, tasks by name, asyncio's unnamed ones by coroutine
    tasks = {t["name"]: t for t in rep["tasks"]}
    assert tasks["blocker"]["steps"] == 2 and tasks["blocker"]["coroutine"] == "blocker"
    assert tasks["blocker"]["slowest_step_ns"] >= 140e6
    assert tasks["Task (fetch)"]["coroutine"] == "fetch", tasks
    assert tasks["Task (fetch)"]["tasks"] == 2 and tasks["Task (fetch)"]["steps"] == 4, tasks
    assert tasks["fetch-0"]["tasks"] == 1 and tasks["Task (main)"]["tasks"] == 1, tasks
    total_steps = sum(t["steps"] for t in rep["tasks"])
    assert total_steps == len(steps)
    running = sum(t["running_ns"] for t in rep["tasks"])
    traced = sum(e["dur"] for e in steps) * 1e3
    assert abs(running - traced) <= 0.01 * traced, (running, traced)
    # task rows are not functions
    assert not [f for f in rep["functions"] if f["file"] == "<asyncio task>"]


def test_a_step_that_holds_the_loop_is_a_stall_with_its_stack(tmp_path):
    rep = _run(tmp_path, "t.json")
    # (a loaded machine may make another step pass 100 ms too: the blocker's is the one this is about)
    (stall,) = [s for s in rep["stalls"] if s["task"] == "blocker"]
    assert 140e6 <= stall["held_ns"] <= 1e9, stall
    names = [f["name"] for f in stall["stack"]]
    assert names[0] == "blocker" and names[-1] == "<built-in method time.sleep>", names


def test_the_text_report_lists_tasks_and_stalls(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    p = subprocess.run([*python_cmd(), "-m", "ocular", "-o", "t.json", "prog.py"], cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=SRC), capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    text = p.stderr
    assert "asyncio tasks (by running time" in text, text
    row = next(ln for ln in text.splitlines() if ln.rstrip().endswith("blocker (blocker)"))
    assert row.split()[:2] == ["1", "2"], row  # one task, two steps
    row = next(ln for ln in text.splitlines() if ln.rstrip().endswith("Task (fetch)"))
    assert row.split()[:2] == ["2", "4"], row
    assert re.search(r"Loop stalls: \d+ steps? held the event loop 100 ms or more", text), text
    stall = next(ln for ln in text.splitlines() if "blocker: blocker" in ln)
    assert stall.rstrip().endswith("<built-in method time.sleep>"), stall


def test_the_pftrace_has_the_same_task_slices(tmp_path):
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2",
                             reason="the perfetto package (tests/requirements.txt) decodes the .pftrace")
    del pb
    from test_perfetto import Decoded

    _run(tmp_path, "t.pftrace")
    d = Decoded(str(tmp_path / "t.pftrace"))
    names = collections.Counter(name for slices in d.slices().values() for name, *_ in slices)
    for name in ("fetch-0", "fetch-1", "fetch-2", "sleeper"):
        assert names[name] == 2, {k: names[k] for k in ("fetch-0", "fetch-1", "fetch-2", "sleeper")}
    # (these tasks are named as their coroutines: two steps, each around a slice of the coroutine)
    assert names["blocker"] == names["failing"] == 4, (names["blocker"], names["failing"])


def test_coroutines_outside_asyncio_make_no_tasks(tmp_path):
    """A coroutine driven by hand (send) with no event loop: no task, no step, no section."""
    (tmp_path / "prog.py").write_text("""
import types

@types.coroutine
def tick():
    yield 1

async def work(n):
    for _ in range(n):
        await tick()

c = work(1000)
try:
    while True:
        c.send(None)
except StopIteration:
    pass
""")
    p = subprocess.run([*python_cmd(), "-m", "ocular", "-o", "t.json", "--report-json", "prog.py"], cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=SRC), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    text = p.stdout + p.stderr
    rep = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]
    assert rep["tasks"] == [] and rep["stalls"] == []
    work = next(f for f in rep["functions"] if f["name"] == "work")
    assert work["calls"] == 1 and work["segments"] == 1001, work


def test_long_lived_tasks_keep_their_names_step_after_step(tmp_path):
    """Two named tasks and one unnamed, interleaved over 50 awaits each: every step under its own task
    (a task's later steps are found by the task itself, not by its name: get_name once per task)."""
    rep = _run(tmp_path, "t.json", program="""
import asyncio

async def ping(n):
    for _ in range(n):
        await asyncio.sleep(0)

async def main():
    await asyncio.gather(asyncio.create_task(ping(50), name="alpha"),
                         asyncio.create_task(ping(50), name="beta"), ping(50))

asyncio.run(main())
""")
    ev = json.loads((tmp_path / "t.json").read_text())
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    steps = sorted((e for e in ev if e.get("ph") == "X" and e["args"].get("file") == "<asyncio task>"),
                   key=lambda e: e["ts"])
    count = collections.Counter(e["name"] for e in steps)
    assert count["alpha"] == count["beta"] == count["Task (ping)"] == 51, count
    order = [e["name"] for e in steps if e["name"] in ("alpha", "beta", "Task (ping)")]
    assert order[:6] == ["alpha", "beta", "Task (ping)"] * 2, order[:6]  # (round robin: the loop's order)
    tasks = {t["name"]: t for t in rep["tasks"]}
    assert tasks["alpha"]["tasks"] == tasks["beta"]["tasks"] == tasks["Task (ping)"]["tasks"] == 1, tasks
