"""Standalone generator script for the end-to-end benchmark (bench/e2e.py).

    python generators.py [N]     (default 100000)

The same chained pipeline as the ``generators`` workload of bench/workloads.py
(kept separate so that this file runs on its own): a generator of naturals,
a filter, a map, ``yield from`` delegation, chunking, and a generator
expression per chunk.  Every item resumes and suspends several generator
frames (PY_RESUME/PY_YIELD events).  Prints the result.
"""

import sys


def naturals(n):
    i = 0
    while i < n:
        yield i
        i += 1


def evens(it):
    for x in it:
        if x % 2 == 0:
            yield x


def squares(it):
    for x in it:
        yield x * x


def chunks(it, k):
    chunk = []
    for x in it:
        chunk.append(x)
        if len(chunk) == k:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def delegating(n):
    yield from squares(evens(naturals(n)))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    total = 0
    for chunk in chunks(delegating(n), 7):
        total += sum(x % 1000 for x in chunk)
    print(total)


if __name__ == "__main__":
    main()
