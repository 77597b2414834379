"""12. Exceptions raised and caught in a loop: raised by a callee, and unwound through an intermediate
frame."""
import os
import sys
import time

SIZE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OCULAR_EXACT_SIZE", "short")
N = {"short": 40_000, "long": 400_000}[SIZE]


class Odd(Exception):
    pass


def check(i):
    s = i
    for k in range(6):
        s ^= k
    if i % 3 == 0:
        raise ValueError(s)
    return s


def inner(i):
    s = i
    for k in range(6):
        s ^= k
    if i & 1:
        raise Odd(s)
    return s


def middle(i):
    s = i
    for k in range(6):
        s += k
    return inner(s) + 1


def main():
    t = 0
    for i in range(N):
        try:
            t += check(i)
        except ValueError:
            t -= 1
        try:
            t += middle(i)
        except Odd:
            t += 2
    return t


if __name__ == "__main__":
    _c0, _p0 = time.thread_time(), time.process_time()
    _t0 = time.perf_counter()
    main()
    _t1 = time.perf_counter()
    _c1, _p1 = time.thread_time(), time.process_time()
    print(f"exact: main took {_t1 - _t0!r} s, cpu {_c1 - _c0!r} s, process {_p1 - _p0!r} s")
