"""2. Two children of very different cost: costly() does ~40x the work of cheap() per call."""
import os
import sys
import time

SIZE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OCULAR_EXACT_SIZE", "short")
N = {"short": 4_000, "long": 50_000}[SIZE]


def cheap(i):
    s = 0
    for k in range(5):
        s += k * i
    return s


def costly(i):
    s = 0
    for k in range(200):
        s += k * i
    return s


def main():
    t = 0
    for i in range(N):
        t += cheap(i) + costly(i)
    return t


if __name__ == "__main__":
    _c0, _p0 = time.thread_time(), time.process_time()
    _t0 = time.perf_counter()
    main()
    _t1 = time.perf_counter()
    _c1, _p1 = time.thread_time(), time.process_time()
    print(f"exact: main took {_t1 - _t0!r} s, cpu {_c1 - _c0!r} s, process {_p1 - _p0!r} s")
