"""Recursion (fib) followed by a call: main calls fib(N), then work(), and has no loop of its own (the
near-zero test of tests/test_exact.py: after fib is de-instrumented mid-recursion, the activations left open
must not take the time with them)."""
import os
import sys
import time

SIZE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OCULAR_EXACT_SIZE", "short")
FIB, LOOP = {"short": (22, 50_000), "long": (25, 200_000)}[SIZE]


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def work():
    s = 0
    for i in range(LOOP):
        s += i & 7
    return s


def main():
    t = fib(FIB)
    return t + work()


if __name__ == "__main__":
    _c0, _p0 = time.thread_time(), time.process_time()
    _t0 = time.perf_counter()
    main()
    _t1 = time.perf_counter()
    _c1, _p1 = time.thread_time(), time.process_time()
    print(f"exact: main took {_t1 - _t0!r} s, cpu {_c1 - _c0!r} s, process {_p1 - _p0!r} s")
