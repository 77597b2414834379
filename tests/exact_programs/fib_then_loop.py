"""3. Recursion (fib) followed by the caller's own loop.

With OCULAR_EXACT_TRUTH=1 (run untraced) the program times main's call of fib itself and prints its share of
main's time (tests/test_exact.py: cProfile's own cost per call lifts fib's share)."""
import os
import sys
import time

SIZE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OCULAR_EXACT_SIZE", "short")
FIB, LOOP = {"short": (20, 600_000), "long": (25, 6_000_000)}[SIZE]


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def main():
    t = fib(FIB)
    for i in range(LOOP):
        t += i & 7
    return t


if __name__ == "__main__" and os.environ.get("OCULAR_EXACT_TRUTH") == "1":
    _spent = [0.0]

    def main():  # (main as above, timing its call of fib)
        t0 = time.perf_counter()
        t = fib(FIB)
        _spent[0] = time.perf_counter() - t0
        for i in range(LOOP):
            t += i & 7
        return t


if __name__ == "__main__":
    _c0, _p0 = time.thread_time(), time.process_time()
    _t0 = time.perf_counter()
    main()
    _t1 = time.perf_counter()
    _c1, _p1 = time.thread_time(), time.process_time()
    print(f"exact: main took {_t1 - _t0!r} s, cpu {_c1 - _c0!r} s, process {_p1 - _p0!r} s")
    if os.environ.get("OCULAR_EXACT_TRUTH") == "1":
        print(f"exact: truth fib {_spent[0] / (_t1 - _t0)!r}")
