"""8. Two worker threads and the main thread, each doing Python work.  With OCULAR_EXACT_SEQUENTIAL=1 the
same calls run one after the other in the main thread (the test's reference for time shares: cProfile's
single call stack mixes up threads)."""
import os
import sys
import threading
import time

SIZE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OCULAR_EXACT_SIZE", "short")
N = {"short": 20_000, "long": 200_000}[SIZE]
_yield = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))  # a C call that lets go of the GIL


def unit(i):
    s = 0
    for k in range(10):
        s += k ^ i
    return s


def work(n):
    t = 0
    for i in range(n):
        t += unit(i)
        if i % 200 == 199:
            # the GIL changes hands here, in a C call: a thread's wait for it is that call's, not unit's or
            # work's (a switch forced at a bytecode would charge the wait to whichever function was there)
            _yield()
    return t


def worker(n, out, slot):
    out[slot] = work(n)


def main():
    out = [0, 0]
    if os.environ.get("OCULAR_EXACT_SEQUENTIAL") == "1":
        for i in range(2):
            worker(N, out, i)
        return work(N) + sum(out)
    ts = [threading.Thread(target=worker, args=(N, out, i), name=f"worker-{i}") for i in range(2)]
    for t in ts:
        t.start()
    mine = work(N)
    for t in ts:
        t.join()
    return mine + sum(out)


if __name__ == "__main__":
    _c0, _p0 = time.thread_time(), time.process_time()
    _t0 = time.perf_counter()
    main()
    _t1 = time.perf_counter()
    _c1, _p1 = time.thread_time(), time.process_time()
    print(f"exact: main took {_t1 - _t0!r} s, cpu {_c1 - _c0!r} s, process {_p1 - _p0!r} s")
