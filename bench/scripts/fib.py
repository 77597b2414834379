"""Standalone call-heavy script for the end-to-end benchmark (bench/e2e.py).

    python fib.py [N]        (default 27)

Recursive Fibonacci: fib(N) makes 2*F(N+1) - 1 Python calls (635,621 for
N=27).  Prints the result so the work cannot be skipped.  Imports nothing,
so that process start-up is the interpreter's own.
"""

import sys


def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 27
    print(fib(n))


if __name__ == "__main__":
    main()
