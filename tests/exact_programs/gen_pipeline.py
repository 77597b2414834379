"""6. A generator pipeline: numbers() feeds squares(), which feeds evens(), consumed by main's loop."""
import os
import sys
import time

SIZE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OCULAR_EXACT_SIZE", "short")
N = {"short": 400_000, "long": 4_000_000}[SIZE]


def numbers(n):
    for i in range(n):
        yield i


def squares(src):
    for v in src:
        yield v * v


def evens(src):
    for v in src:
        if v % 2 == 0:
            yield v


def main():
    t = 0
    for v in evens(squares(numbers(N))):
        t += v % 1000
    return t


if __name__ == "__main__":
    _c0, _p0 = time.thread_time(), time.process_time()
    _t0 = time.perf_counter()
    main()
    _t1 = time.perf_counter()
    _c1, _p1 = time.thread_time(), time.process_time()
    print(f"exact: main took {_t1 - _t0!r} s, cpu {_c1 - _c0!r} s, process {_p1 - _p0!r} s")
