"""Thousands of live threads (issue 16, item 1): every live thread holds a chunk of its own, so a pool
shared by all threads can no longer run dry and deadlock the program (257 threads did before).  The
program finishes, with every event recorded and nothing dropped (every call: functions are never
de-instrumented by default), in both formats and at both thresholds; a thread pool with more workers than the old pool had chunks finishes too."""

import json

import pytest

from conftest import check_balanced, load_trace, run_py

MANY = """
import sys, threading, ocular
n, threshold, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
threading.stack_size(256 * 1024)
ocular.start_tracing(output=out, deinstrument_threshold=threshold, report=False, exclude=["threading.py"],
                     sampling=False)  # exact counts at the threshold: no sampled calls
go = threading.Event()
ready = threading.Semaphore(0)
def f(i):
    return i
def body(i):
    f(i)
    ready.release()
    go.wait()          # every thread alive at once, each with a partly filled chunk
    f(i)
threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
for _ in threads:
    ready.acquire()
go.set()
for t in threads:
    t.join()
r = ocular.stop_tracing()
print(json.dumps({"events": r.events, "dropped": r.dropped, "threads": r.threads}))
""".replace("import sys,", "import json, sys,")


@pytest.mark.parametrize("n", [1000, 5000])
@pytest.mark.parametrize("threshold", [0, 500])
@pytest.mark.parametrize("suffix", ["json", "pftrace"])
def test_thousands_of_live_threads_finish_with_every_event(tmp_path, n, threshold, suffix):
    out = tmp_path / f"t.{suffix}"
    p = run_py(MANY, str(n), str(threshold), str(out), timeout=600)
    res = json.loads(p.stdout.splitlines()[-1])
    assert res["dropped"] == 0
    # every thread is in the trace: function events are never de-instrumented (but in near-zero mode)
    assert res["threads"] >= n + 1
    if suffix == "json":
        data = load_trace(out)
        slices = check_balanced(data["traceEvents"])
        f_calls = sum(1 for sl in slices.values() for s in sl if s[0] == "f")
        # both calls of every thread, whatever the threshold
        assert f_calls == 2 * n
        named = [e for e in data["traceEvents"] if e.get("name") == "thread_name"]
        assert len(named) == res["threads"]
    else:
        assert out.stat().st_size > 0
    # 2 calls x (start + return) per thread, plus the bodies' own events
    assert res["events"] >= 4 * n


def test_thread_pool_larger_than_the_old_chunk_pool(tmp_path):
    out = tmp_path / "pool.json"
    run_py("""
        import sys, threading, ocular
        from concurrent.futures import ThreadPoolExecutor
        ocular.start_tracing(output=sys.argv[1], deinstrument_threshold=0, report=False)
        barrier = threading.Barrier(300)
        def task(i):
            barrier.wait()   # 300 workers busy at once
            return i * i
        with ThreadPoolExecutor(max_workers=300) as ex:
            assert sum(ex.map(task, range(300))) == sum(i * i for i in range(300))
        ocular.stop_tracing()
    """, str(out), timeout=600)
    data = load_trace(out)
    slices = check_balanced(data["traceEvents"])
    assert sum(1 for sl in slices.values() for s in sl if s[0] == "task") == 300
