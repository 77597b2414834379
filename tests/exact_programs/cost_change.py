"""11. A function whose cost changes after its first 1,000 calls: work() loops 4 times per call at first,
then 60 times."""
import os
import sys
import time

SIZE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OCULAR_EXACT_SIZE", "short")
N = {"short": 10_000, "long": 100_000}[SIZE]


def work(i, calls=[0]):
    calls[0] += 1
    s = 0
    for k in range(4 if calls[0] <= 1000 else 60):
        s += k ^ i
    return s


def main():
    t = 0
    for i in range(N):
        t += work(i)
        t &= 0xFFFF
    return t


if __name__ == "__main__":
    _c0, _p0 = time.thread_time(), time.process_time()
    _t0 = time.perf_counter()
    main()
    _t1 = time.perf_counter()
    _c1, _p1 = time.thread_time(), time.process_time()
    print(f"exact: main took {_t1 - _t0!r} s, cpu {_c1 - _c0!r} s, process {_p1 - _p0!r} s")
