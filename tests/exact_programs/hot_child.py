"""1. A hot child in a loop: child() is called 100k times (short) or 1M times (long)."""
import os
import sys
import time

SIZE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OCULAR_EXACT_SIZE", "short")
N = {"short": 100_000, "long": 1_000_000}[SIZE]


def child(x):
    a = (x * 31 + 7) % 1000003
    b = (x ^ 0x5A5A) % 97
    c = (a * b + x) & 0xFFFF
    return a + b + c - (c >> 3) + (a % 13) * (b % 7)


def main():
    t = 0
    for i in range(N):
        t += child(i)
        t ^= i & 0xFF
    return t


if __name__ == "__main__":
    _c0, _p0 = time.thread_time(), time.process_time()
    _t0 = time.perf_counter()
    main()
    _t1 = time.perf_counter()
    _c1, _p1 = time.thread_time(), time.process_time()
    print(f"exact: main took {_t1 - _t0!r} s, cpu {_c1 - _c0!r} s, process {_p1 - _p0!r} s")
