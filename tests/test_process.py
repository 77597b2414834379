"""Process-level behaviour: threads (one tid each, thread names), process metadata, interpreter exit
without stop_tracing (atexit), fork (one file per process, no temporary files left) and a long
streamed trace.

Every program runs in a fresh interpreter; the trace path is sys.argv[1].  Programs that fork run in
their own session and process group, so a hang kills the whole group instead of leaving orphans.
"""

import collections
import glob
import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import SRC, check_balanced, load_trace, names, run_py

PRELUDE = """
import functools, json, os, sys, threading
import ocular
OUT = sys.argv[1]
start = functools.partial(ocular.start_tracing, output=OUT, deinstrument_threshold=0, report=False,
                          loops="iterations")
stop = ocular.stop_tracing
"""


def run_group(code, *args, timeout=60, env=None):
    """Run PRELUDE + code in its own process group; on timeout kill the group and fail."""
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(PRELUDE + code), *args], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"timed out after {timeout}s (hang)\nstdout:\n{out}\nstderr:\n{err}") from None
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # any forked child left behind
        except ProcessLookupError:
            pass
    return p.returncode, out, err


def run_ok(code, *args, timeout=60, env=None):
    rc, out, err = run_group(code, *args, timeout=timeout, env=env)
    assert rc == 0, f"exit {rc}\nstdout:\n{out}\nstderr:\n{err}"
    return out, err


def thread_names(events):
    return {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}


def tids_of(events, name):
    return {e["tid"] for e in events if e["ph"] == "B" and e["name"] == name}


def leftovers(directory):
    return sorted(glob.glob(os.path.join(directory, "*.tmp")) + glob.glob(os.path.join(directory, ".*.tmp")))


# ---------------------------------------------------------------------------------------------
# threads


def test_worker_threads_have_own_tids_and_names(trace_path):
    code = """
def helper(i):
    return i

def spin():
    t = 0
    for i in range(200):
        t += helper(i)
    return t

def work_0():
    return spin()

def work_1():
    return spin()

def work_2():
    return spin()

def work_3():
    return spin()

start()
ts = [threading.Thread(target=fn, name="worker-%d" % i) for i, fn in enumerate((work_0, work_1, work_2, work_3))]
for t in ts:
    t.start()
for t in ts:
    t.join()
stop()
print(json.dumps({"pid": os.getpid(), "main": threading.main_thread().native_id,
                  "natives": {t.name: t.native_id for t in ts}}))
"""
    out, _ = run_ok(code, trace_path)
    info = json.loads(out)
    events = load_trace(trace_path)["traceEvents"]
    slices = check_balanced(events)
    tnames = thread_names(events)
    pid = info["pid"]
    assert all(e["pid"] == pid for e in events)
    assert tnames[info["main"]] == "MainThread"
    assert info["main"] == pid
    workers = {tid: n for tid, n in tnames.items() if n.startswith("worker-")}
    assert sorted(workers.values()) == ["worker-0", "worker-1", "worker-2", "worker-3"]
    assert len(set(info["natives"].values())) == 4
    for i in range(4):
        tid = info["natives"][f"worker-{i}"]
        assert tnames[tid] == f"worker-{i}"
        assert tids_of(events, f"work_{i}") == {tid}
        per_thread = collections.Counter(s[0] for s in slices[(pid, tid)])
        assert per_thread[f"work_{i}"] == 1 and per_thread["spin"] == 1 and per_thread["helper"] == 200
    # every thread that has events is named
    assert {e["tid"] for e in events if e["ph"] in ("B", "E", "i")} <= set(tnames)
    assert tids_of(events, "helper") == set(info["natives"].values())


def test_thread_started_before_tracing_is_traced(trace_path):
    code = """
go = threading.Event()

def late_fn():
    return 42

def body():
    go.wait()
    late_fn()

t = threading.Thread(target=body, name="early-bird")
t.start()
start()
go.set()
t.join()
stop()
print(json.dumps({"pid": os.getpid(), "tid": t.native_id}))
"""
    out, _ = run_ok(code, trace_path)
    info = json.loads(out)
    events = load_trace(trace_path)["traceEvents"]
    slices = check_balanced(events)
    assert tids_of(events, "late_fn") == {info["tid"]}
    assert thread_names(events)[info["tid"]] == "early-bird"
    # body() was already running: its return has no begin and is not shown
    assert "body" not in names(events)
    assert [s[0] for s in slices[(info["pid"], info["tid"])] if s[0] == "late_fn"] == ["late_fn"]


def test_short_lived_threads_are_named(trace_path):
    """The first traced event of a threading.Thread fires in _bootstrap, before threading registers
    it: the names of 20 short-lived threads must still be right."""
    code = """
def tiny(i):
    return i * 2

start()
natives = {}
for i in range(20):
    t = threading.Thread(target=tiny, args=(i,), name="short-%d" % i)
    t.start()
    t.join()
    natives[t.native_id] = t.name
stop()
print(json.dumps(natives))
"""
    out, _ = run_ok(code, trace_path)
    natives = {int(k): v for k, v in json.loads(out).items()}
    events = load_trace(trace_path)["traceEvents"]
    check_balanced(events)
    tnames = thread_names(events)
    traced = {tid for tid in natives if tid in tids_of(events, "tiny")}
    assert len(traced) == 20, "every thread ran tiny() while traced"
    wrong = {tid: (natives[tid], tnames.get(tid)) for tid in natives if tnames.get(tid) != natives[tid]}
    assert not wrong, f"{len(wrong)} of 20 threads misnamed: {sorted(wrong.values())[:5]}"


def test_an_ended_raw_thread_is_not_named_after_a_later_thread(trace_path):
    """A thread of _thread.start_new_thread (no threading.Thread, so no name) ends; a named thread started
    later gets the same ident.  The first keeps "Thread <tid>": its ident no longer says who it was."""
    code = """
import _thread, time
def raw():
    return sum(range(100))
began = threading.Event()
def forever():
    began.set()
    while True:
        time.sleep(0.001)
start()
done = threading.Event()
_thread.start_new_thread(lambda: (raw(), done.set()), ())
done.wait()
while _thread._count():  # (it has ended: its ident is free again)
    time.sleep(0.001)
time.sleep(0.01)
threading.Thread(target=forever, name="daemon-forever", daemon=True).start()
began.wait()
stop()
"""
    run_ok(code, trace_path)
    events = load_trace(trace_path)["traceEvents"]
    tnames = thread_names(events)
    (raw_tid,) = tids_of(events, "raw")
    (forever_tid,) = tids_of(events, "forever")
    assert tnames[forever_tid] == "daemon-forever"
    assert tnames[raw_tid] == f"Thread {raw_tid}", tnames


def test_process_name_metadata_has_real_pid(trace_path):
    code = """
def f():
    return 1

start()
f()
stop()
print(os.getpid())
"""
    out, _ = run_ok(code, trace_path)
    pid = int(out)
    events = load_trace(trace_path)["traceEvents"]
    check_balanced(events)
    pn = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert len(pn) == 1
    assert pn[0]["pid"] == pid
    assert pn[0]["args"]["name"].startswith(os.path.basename(sys.executable))
    assert all(e["pid"] == pid for e in events)
    assert thread_names(events) == {pid: "MainThread"}
    assert names(events) == ["f"]


def test_stop_while_another_thread_is_inside_traced_calls(trace_path):
    """stop_tracing while a worker sits inside two traced calls: its open slices are closed at the
    stop time (balanced, ending after everything else on that thread); nothing after stop shows."""
    code = """
inside = threading.Event()
release = threading.Event()

def blocked():
    inside.set()
    release.wait()
    return 1

def after_stop():
    return 2

def wmain():
    blocked()
    after_stop()

start()
t = threading.Thread(target=wmain, name="blocked-worker")
t.start()
inside.wait()
stop()
release.set()
t.join()
print(json.dumps({"pid": os.getpid(), "tid": t.native_id}))
"""
    out, _ = run_ok(code, trace_path)
    info = json.loads(out)
    events = load_trace(trace_path)["traceEvents"]
    slices = check_balanced(events)
    worker = slices[(info["pid"], info["tid"])]
    ends = {s[0]: s[2] for s in worker}
    last = max(e["ts"] for e in events if e["tid"] == info["tid"] and e["ph"] != "M")
    assert ends["blocked"] == ends["wmain"] == last
    assert "after_stop" not in names(events)
    assert thread_names(events)[info["tid"]] == "blocked-worker"


def test_thread_alive_across_two_sessions(tmp_path):
    """A thread traced in session 1 and again in session 2 is registered afresh in each session,
    under its own tid and name, with only that session's calls."""
    code = """
go1, done1, go2 = threading.Event(), threading.Event(), threading.Event()

def first_fn():
    return 1

def second_fn():
    return 2

def lived():
    go1.wait()
    first_fn()
    done1.set()
    go2.wait()
    second_fn()

t = threading.Thread(target=lived, name="long-lived")
t.start()
start(output=sys.argv[1])
go1.set()
done1.wait()
stop()
start(output=sys.argv[2])
go2.set()
t.join()
stop()
print(json.dumps({"tid": t.native_id}))
"""
    p1, p2 = str(tmp_path / "one.json"), str(tmp_path / "two.json")
    out, _ = run_ok(code, p1, p2)
    tid = json.loads(out)["tid"]
    one = load_trace(p1)["traceEvents"]
    two = load_trace(p2)["traceEvents"]
    check_balanced(one)
    check_balanced(two)
    assert tids_of(one, "first_fn") == {tid} and "second_fn" not in names(one)
    assert tids_of(two, "second_fn") == {tid} and "first_fn" not in names(two)
    assert thread_names(one)[tid] == "long-lived"
    assert thread_names(two)[tid] == "long-lived"


def test_thread_names_are_escaped(trace_path):
    """Quotes, backslashes and non-ASCII in a thread name survive JSON; control characters become spaces
    (names shown in viewers carry none, issue 17)."""
    name = 'w"\u00f6\\rk\ner\t\x01\u2603'
    code = """
def helper(i):
    return i

def busy():
    return sum(helper(i) for i in range(200))

start()
t = threading.Thread(target=busy, name=json.loads(sys.argv[2]))
t.start()
t.join()
stop()
print(t.native_id)
"""
    out, _ = run_ok(code, trace_path, json.dumps(name))
    tid = int(out)
    events = load_trace(trace_path)["traceEvents"]
    check_balanced(events)
    assert thread_names(events)[tid] == 'w"\u00f6\\rk er  \u2603'


# ---------------------------------------------------------------------------------------------
# interpreter exit without stop_tracing (atexit)


@pytest.mark.parametrize("how, status", [("return", 0), ("exit", 4), ("raise", 1)])
def test_exit_without_stop_saves_trace(how, status, tmp_path, trace_path):
    code = f"""
def bail():
    sys.exit(4)

def boom():
    raise RuntimeError("boom-distinctive")

def work():
    return 1

def main(how):
    work()
    if how == "exit":
        bail()
    if how == "raise":
        boom()

start()
main({how!r})
"""
    rc, out, err = run_group(code, trace_path)
    assert rc == status, err
    if how == "raise":
        assert "RuntimeError: boom-distinctive" in err
    assert "ocular:" not in err, err
    assert os.path.exists(trace_path)
    events = load_trace(trace_path)["traceEvents"]
    slices = check_balanced(events)
    got = collections.Counter(names(events))
    assert got["main"] == 1 and got["work"] == 1
    expected_leaf = {"exit": "bail", "raise": "boom"}.get(how)
    if expected_leaf:
        assert got[expected_leaf] == 1
        (main_slice,) = [s for v in slices.values() for s in v if s[0] == "main"]
        (leaf,) = [s for v in slices.values() for s in v if s[0] == expected_leaf]
        assert leaf[3] == main_slice[3] + 1 and main_slice[1] <= leaf[1] <= leaf[2] <= main_slice[2]
    assert leftovers(str(tmp_path)) == []
    assert sorted(os.listdir(tmp_path)) == ["trace.json"]


# ---------------------------------------------------------------------------------------------
# fork

FORK_CODE = """
def before_fork_fn():
    return 0

def parent_fn():
    return 1

def child_fn():
    return 2

start()
if WARM:
    before_fork_fn()
pid = os.fork()
if pid == 0:
    child_fn()
    if HOW == "stop":
        ocular.stop_tracing()
        os._exit(0)
    elif HOW == "sys.exit":
        sys.exit(3)
    elif HOW == "os._exit":
        os._exit(5)
_, status = os.waitpid(pid, 0)
parent_fn()
stop()
print(json.dumps({"parent": os.getpid(), "child": pid, "status": os.waitstatus_to_exitcode(status)}))
"""


def _fork(tmp_path, trace_path, warm, how):
    out, err = run_ok(f"WARM = {warm!r}\nHOW = {how!r}\n" + FORK_CODE, trace_path)
    info = json.loads(out.strip().splitlines()[-1])
    child_path = str(tmp_path / f"trace.{info['child']}.json")
    return info, child_path, err


@pytest.mark.parametrize("warm", [False, True], ids=["fork-first", "traced-before-fork"])
def test_fork_child_stop_and_os_exit(warm, tmp_path, trace_path):
    info, child_path, _ = _fork(tmp_path, trace_path, warm, "stop")
    assert info["status"] == 0
    parent = load_trace(trace_path)["traceEvents"]
    check_balanced(parent)
    pnames = set(names(parent))
    assert "parent_fn" in pnames and "child_fn" not in pnames
    assert ("before_fork_fn" in pnames) == warm
    assert {e["pid"] for e in parent} == {info["parent"]}

    assert os.path.exists(child_path)
    child = load_trace(child_path)["traceEvents"]
    check_balanced(child)
    cnames = set(names(child))
    assert "child_fn" in cnames
    assert "parent_fn" not in cnames and "before_fork_fn" not in cnames  # parent's pending events dropped
    assert {e["pid"] for e in child} == {info["child"]}
    assert {e["tid"] for e in child if e["ph"] != "M"} == {info["child"]}
    pn = [e for e in child if e["ph"] == "M" and e["name"] == "process_name"]
    assert len(pn) == 1 and pn[0]["pid"] == info["child"]
    assert leftovers(str(tmp_path)) == []
    assert sorted(os.listdir(tmp_path)) == sorted(["trace.json", os.path.basename(child_path)])


def test_fork_child_sys_exit_writes_its_file_at_exit(tmp_path, trace_path):
    info, child_path, _ = _fork(tmp_path, trace_path, True, "sys.exit")
    assert info["status"] == 3
    parent = load_trace(trace_path)["traceEvents"]
    check_balanced(parent)
    assert "child_fn" not in names(parent)
    child = load_trace(child_path)["traceEvents"]
    check_balanced(child)
    assert "child_fn" in names(child) and "parent_fn" not in names(child)
    assert {e["pid"] for e in child} == {info["child"]}
    assert leftovers(str(tmp_path)) == []
    assert sorted(os.listdir(tmp_path)) == sorted(["trace.json", os.path.basename(child_path)])


def test_fork_child_os_exit_without_stop_is_saved(tmp_path, trace_path):
    """Documented: a child forked while tracing has os._exit wrapped so that its trace is saved."""
    info, child_path, _ = _fork(tmp_path, trace_path, True, "os._exit")
    assert info["status"] == 5
    child = load_trace(child_path)["traceEvents"]
    check_balanced(child)
    assert "child_fn" in names(child)
    assert {e["pid"] for e in child} == {info["child"]}
    assert leftovers(str(tmp_path)) == []


def test_several_forked_children_with_threads(tmp_path, trace_path):
    """Three children forked from a process with a traced worker thread: one file per child, each
    with only the forking thread (tid == child pid); the parent's file keeps its worker thread."""
    code = """
def in_worker():
    return 7

def child_work(k):
    return k

go = threading.Event()
def worker():
    go.wait()
    in_worker()

start()
t = threading.Thread(target=worker, name="bg-worker")
t.start()
children = []
for k in range(3):
    pid = os.fork()
    if pid == 0:
        child_work(k)
        ocular.stop_tracing()
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
go.set()
t.join()
stop()
print(json.dumps({"parent": os.getpid(), "children": children, "worker": t.native_id}))
"""
    out, _ = run_ok(code, trace_path)
    info = json.loads(out.strip().splitlines()[-1])
    parent = load_trace(trace_path)["traceEvents"]
    check_balanced(parent)
    assert "child_work" not in names(parent)
    assert tids_of(parent, "in_worker") == {info["worker"]}
    assert thread_names(parent)[info["worker"]] == "bg-worker"
    for pid in info["children"]:
        child = load_trace(str(tmp_path / f"trace.{pid}.json"))["traceEvents"]
        check_balanced(child)
        assert names(child).count("child_work") == 1
        assert "in_worker" not in names(child)
        assert {e["pid"] for e in child} == {pid}
        assert {e["tid"] for e in child} == {pid}
    expected = ["trace.json"] + [f"trace.{pid}.json" for pid in info["children"]]
    assert sorted(os.listdir(tmp_path)) == sorted(expected)


# ---------------------------------------------------------------------------------------------
# a long trace streams


def test_long_trace_streams(tmp_path, trace_path):
    """Over 3 million records (calls, returns, branches, back edges) with threshold 0: the writer
    streams them (far more than the chunks in flight) and the file is valid and balanced."""
    body = "".join(f"    if x & {1 << k}:\n        x += 1\n" for k in range(16))
    code = f"""
def f(x):
{body}    return x

def main():
    for i in range(56000):
        f(i)
        f(i + 1)
        f(i + 2)

start()
main()
res = stop()
print(json.dumps({{"events": res["events"], "dropped": res["dropped"]}}))
"""
    out, _ = run_ok(code, trace_path, timeout=120)
    res = json.loads(out)
    assert res["events"] > 3_000_000
    assert res["dropped"] == 0
    events = load_trace(trace_path)["traceEvents"]
    slices = check_balanced(events)
    count = collections.Counter(s[0] for v in slices.values() for s in v)
    assert count["f"] == 3 * 56000 and count["main"] == 1
    assert len([e for e in events if e["ph"] == "i"]) == 56000 - 1
    assert leftovers(str(tmp_path)) == []


SIGTERM_IN_C = """
import itertools, signal, time
def warm(n):
    return n
for i in range(3000):  # enough events that the writer gets whole chunks before the child is killed
    warm(i)
start()
for i in range(3000):
    warm(i)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    for i in range(6000):
        warm(i)
    tmp = ocular._current.recording
    while b"warm" not in open(tmp, "rb").read():  # until the writer has written what it was handed
        time.sleep(0.01)
    os.write(w, b"1" if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL else b"0")
    sum(itertools.repeat(1, 10 ** 15))  # busy in C: no Python code runs until the process ends
    os._exit(0)
os.close(w)
print("child SIGTERM disposition default:", os.read(r, 1) == b"1", flush=True)
os.kill(pid, signal.SIGTERM)
_, status = os.waitpid(pid, 0)  # blocks until the child is gone (the test's timeout catches a hang)
print("child died of SIGTERM:", os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, flush=True)
stop()
print("CHILD", pid, "PARENT", os.getpid())
"""


def private_dir(tmp_path):
    """An XDG_RUNTIME_DIR of the test's own: forked children keep their recordings under <it>/ocular."""
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700, exist_ok=True)
    return xdg


def runs_in(xdg):
    """{run directory name: sorted file names} under <XDG_RUNTIME_DIR>/ocular."""
    root = xdg / "ocular"
    return {d: sorted(os.listdir(root / d)) for d in os.listdir(root)} if root.exists() else {}


def test_fork_child_busy_in_c_dies_of_sigterm_and_its_trace_is_salvaged(tmp_path, trace_path):
    """Ocular installs no signal handler in a forked child: the child keeps SIGTERM's default action and
    dies of it at once even while busy in C code (a Python-level handler would wait for the C call to
    return, forever here).  Its unfinished recording is left, not in the output's directory but in the
    session's private one (docs/fork.md), mode 0700, where convert and merge salvage it."""
    xdg = private_dir(tmp_path)
    out, err = run_ok(SIGTERM_IN_C, trace_path, env={"XDG_RUNTIME_DIR": str(xdg)})
    assert "child SIGTERM disposition default: True" in out, out + err
    assert "child died of SIGTERM: True" in out, out + err
    child = int(out.split("CHILD")[1].split()[0])
    check_balanced(load_trace(trace_path)["traceEvents"])
    assert leftovers(str(tmp_path)) == [], os.listdir(tmp_path)
    runs = runs_in(xdg)
    assert len(runs) == 1 and list(runs.values()) == [[f"trace.{child}.json.{child}.tmp"]], runs
    run = xdg / "ocular" / next(iter(runs))
    assert next(iter(runs)).startswith(f"run-{int(out.split('PARENT')[1].split()[0])}-"), runs
    assert (run.stat().st_mode & 0o777) == 0o700 and ((xdg / "ocular").stat().st_mode & 0o777) == 0o700
    left = str(run / f"trace.{child}.json.{child}.tmp")
    e = dict(os.environ, PYTHONPATH=SRC)
    merged = str(tmp_path / "merged.json")
    p = subprocess.run([sys.executable, "-m", "ocular", "merge", left, "-o", merged],
                       env=e, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "incomplete" in p.stderr, p.stderr
    ev = load_trace(merged)["traceEvents"]
    check_balanced(ev)
    assert "warm" in names(ev), "the child's events handed to the writer before SIGTERM are salvaged"
    p = subprocess.run([sys.executable, "-m", "ocular", "convert", left, "-o", str(tmp_path / "c.json")],
                       env=e, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "warm" in names(load_trace(tmp_path / "c.json")["traceEvents"])


PREEXEC = """
import subprocess
def in_parent():
    return subprocess.run([sys.executable, "-c", "print('child ran')"], preexec_fn=lambda: None,
                          capture_output=True, text=True, check=True).stdout
start()
outs = [in_parent() for i in range(3)]
pid = os.fork()  # a child that saves its trace, next to the parent's
if pid == 0:
    in_parent()
    os._exit(0)
os.waitpid(pid, 0)
stop()
print(outs.count("child ran\\n"), "FORKED", pid)
"""


def test_a_preexec_fn_subprocess_leaves_nothing(tmp_path, trace_path):
    """subprocess with preexec_fn forks a child that runs CPython's at-fork hooks (Ocular started a
    recording there), then preexec_fn, then execs from C: every call left <out>.<pid>.json.<pid>.tmp in the
    output's directory.  Such a child is not traced and writes nothing; a child forked by os.fork still
    saves its own trace beside the parent's, and the private directory of the session is removed."""
    xdg = private_dir(tmp_path)
    out, err = run_ok(PREEXEC, trace_path, env={"XDG_RUNTIME_DIR": str(xdg)})
    assert out.split("FORKED")[0].strip() == "3", out + err
    child = int(out.split("FORKED")[1])
    assert sorted(os.listdir(tmp_path)) == sorted(["trace.json", f"trace.{child}.json", "xdg"]), os.listdir(tmp_path)
    assert runs_in(xdg) == {}
    assert "in_parent" in names(load_trace(tmp_path / f"trace.{child}.json")["traceEvents"])


def test_the_next_session_that_forks_removes_runs_over_a_day_old(tmp_path, trace_path):
    """The partial recordings of killed children are kept for salvage; a later session that forks removes
    the runs whose processes are all gone once their files are more than a day old, and no other."""
    import time

    xdg = private_dir(tmp_path)
    root = xdg / "ocular"
    root.mkdir(mode=0o700)
    reaped = subprocess.Popen(["true"])
    reaped.wait()
    gone = reaped.pid  # (no process has this pid now)
    runs = {}
    for name, age in (("old", 2 * 86400), ("recent", 3600), ("alive", 2 * 86400)):
        owner = os.getpid() if name == "alive" else gone
        d = root / f"run-{owner}-{name}"
        d.mkdir(mode=0o700)
        f = d / f"trace.{gone}.json.{gone}.tmp"
        f.write_bytes(b"x")
        for path in (f, d):
            os.utime(path, (time.time() - age, time.time() - age))
        runs[d.name] = [f.name]
    out, err = run_ok(PREEXEC, trace_path, env={"XDG_RUNTIME_DIR": str(xdg)})
    del runs[f"run-{gone}-old"]
    assert runs_in(xdg) == runs


POOL_TERMINATE = """
import itertools, multiprocessing, sys
def busy(_):
    sum(itertools.repeat(1, 10 ** 15))  # busy in C
if __name__ == "__main__":
    ctx = multiprocessing.get_context("fork")
    with ctx.Manager() as m:
        pass
    pool = ctx.Pool(2)
    started = ctx.Event()
    res = pool.map_async(busy, range(2))
    import time
    while not all(p.pid for p in pool._pool):
        time.sleep(0.01)
    time.sleep(0.2)
    pool.terminate()  # SIGTERM to each worker, then joins them
    print("workers exit codes:", sorted(p.exitcode for p in pool._pool), flush=True)
"""


@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
def test_pool_terminate_ends_workers_busy_in_c(traced, tmp_path):
    """multiprocessing.Pool.terminate() kills fork workers busy in C code with SIGTERM and joins them:
    it returns, traced as untraced (it hung for good when Ocular caught SIGTERM in the workers in Python);
    each worker saves its trace first (save_on_signals, which the runner turns on)."""
    prog = tmp_path / "pool.py"
    prog.write_text(POOL_TERMINATE)
    cmd = [sys.executable] + (["-m", "ocular", "--no-report", "-q", "-o", str(tmp_path / "t.json")] if traced else [])
    p = subprocess.Popen(cmd + [str(prog)], env=dict(os.environ, PYTHONPATH=SRC, XDG_RUNTIME_DIR=str(private_dir(tmp_path))),
                         cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=120)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert p.returncode == 0, err
    assert f"workers exit codes: [{-signal.SIGTERM}, {-signal.SIGTERM}]" in out, out + err
    if traced:  # save_on_signals: the SIGTERMed workers saved their traces (t.<pid>.json), left no recording
        assert leftovers(str(tmp_path)) == [], os.listdir(tmp_path)
        assert all(not files for files in runs_in(tmp_path / "xdg").values()), runs_in(tmp_path / "xdg")
        workers = [f for f in os.listdir(tmp_path) if re.fullmatch(r"t\.\d+\.json", f)]
        assert len(workers) >= 2, os.listdir(tmp_path)  # (the two workers, and any other process forked)
        for f in workers:
            load_trace(tmp_path / f)


POSIX_EXEC = """
import posix
def before_exec():
    return 1
start()
pid = os.fork()
if pid == 0:
    before_exec()
    posix.execv(sys.executable, [sys.executable, "-c", "pass"])  # os's own function, as test_posix calls it
_, status = os.waitpid(pid, 0)
stop()
print("EXEC", pid, status)
"""


def test_a_fork_child_that_execs_through_posix_saves_its_trace(tmp_path, trace_path):
    """posix.execv is the function os.execv names: a child that calls it directly saves its trace before
    the exec as with os.execv (it left its recording, unsaved, in the private directory)."""
    xdg = private_dir(tmp_path)
    out, err = run_ok(POSIX_EXEC, trace_path, env={"XDG_RUNTIME_DIR": str(xdg)})
    pid, status = map(int, out.split("EXEC")[1].split())
    assert status == 0, out + err
    assert "before_exec" in names(load_trace(tmp_path / f"trace.{pid}.json")["traceEvents"])
    assert runs_in(xdg) == {} and leftovers(str(tmp_path)) == []
