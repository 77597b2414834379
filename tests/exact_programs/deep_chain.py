"""4. A deep call chain: main -> d00 -> d01 -> ... -> d23, each level with a little work of its own."""
import os
import sys
import time

SIZE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OCULAR_EXACT_SIZE", "short")
N = {"short": 5_000, "long": 50_000}[SIZE]


def d00(x):
    s = x + 0
    for k in range(4):
        s += k
    return d01(s)


def d01(x):
    s = x + 1
    for k in range(5):
        s += k
    return d02(s)


def d02(x):
    s = x + 2
    for k in range(6):
        s += k
    return d03(s)


def d03(x):
    s = x + 3
    for k in range(4):
        s += k
    return d04(s)


def d04(x):
    s = x + 4
    for k in range(5):
        s += k
    return d05(s)


def d05(x):
    s = x + 5
    for k in range(6):
        s += k
    return d06(s)


def d06(x):
    s = x + 6
    for k in range(4):
        s += k
    return d07(s)


def d07(x):
    s = x + 7
    for k in range(5):
        s += k
    return d08(s)


def d08(x):
    s = x + 8
    for k in range(6):
        s += k
    return d09(s)


def d09(x):
    s = x + 9
    for k in range(4):
        s += k
    return d10(s)


def d10(x):
    s = x + 10
    for k in range(5):
        s += k
    return d11(s)


def d11(x):
    s = x + 11
    for k in range(6):
        s += k
    return d12(s)


def d12(x):
    s = x + 12
    for k in range(4):
        s += k
    return d13(s)


def d13(x):
    s = x + 13
    for k in range(5):
        s += k
    return d14(s)


def d14(x):
    s = x + 14
    for k in range(6):
        s += k
    return d15(s)


def d15(x):
    s = x + 15
    for k in range(4):
        s += k
    return d16(s)


def d16(x):
    s = x + 16
    for k in range(5):
        s += k
    return d17(s)


def d17(x):
    s = x + 17
    for k in range(6):
        s += k
    return d18(s)


def d18(x):
    s = x + 18
    for k in range(4):
        s += k
    return d19(s)


def d19(x):
    s = x + 19
    for k in range(5):
        s += k
    return d20(s)


def d20(x):
    s = x + 20
    for k in range(6):
        s += k
    return d21(s)


def d21(x):
    s = x + 21
    for k in range(4):
        s += k
    return d22(s)


def d22(x):
    s = x + 22
    for k in range(5):
        s += k
    return d23(s)


def d23(x):
    s = x + 23
    for k in range(6):
        s += k
    return s


def main():
    t = 0
    for i in range(N):
        t += d00(i)
    return t


if __name__ == "__main__":
    _c0, _p0 = time.thread_time(), time.process_time()
    _t0 = time.perf_counter()
    main()
    _t1 = time.perf_counter()
    _c1, _p1 = time.thread_time(), time.process_time()
    print(f"exact: main took {_t1 - _t0!r} s, cpu {_c1 - _c0!r} s, process {_p1 - _p0!r} s")
