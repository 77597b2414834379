"""7. asyncio: several tasks, each awaiting a coroutine of its own and asyncio.sleep(0) in a loop.

With OCULAR_EXACT_TRUTH=1 (run untraced) the program times crunch() itself and prints its share of main's
time: the event loop makes many small calls per crunch(), and a profiler's own cost on them (cProfile's
most) shrinks crunch's share, so the test takes this share as the reference for crunch's row."""
import asyncio
import os
import sys
import time

SIZE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OCULAR_EXACT_SIZE", "short")
ROUNDS = {"short": 400, "long": 4_000}[SIZE]


def crunch(k):
    s = 0
    for i in range(160 + 80 * k):
        s += i * k
    return s


async def step(k):
    return crunch(k)


async def worker(k):
    t = 0
    for _ in range(ROUNDS):
        t += await step(k)
        await asyncio.sleep(0)
    return t


async def amain():
    return sum(await asyncio.gather(*(worker(k) for k in range(4))))


def main():
    return asyncio.run(amain())


if __name__ == "__main__" and os.environ.get("OCULAR_EXACT_TRUTH") == "1":
    _crunch, _spent = crunch, [0.0]

    def crunch(k):
        t0 = time.perf_counter()
        r = _crunch(k)
        _spent[0] += time.perf_counter() - t0
        return r

if __name__ == "__main__":
    _c0, _p0 = time.thread_time(), time.process_time()
    _t0 = time.perf_counter()
    main()
    _t1 = time.perf_counter()
    _c1, _p1 = time.thread_time(), time.process_time()
    print(f"exact: main took {_t1 - _t0!r} s, cpu {_c1 - _c0!r} s, process {_p1 - _p0!r} s")
    if os.environ.get("OCULAR_EXACT_TRUTH") == "1":
        print(f"exact: truth crunch {_spent[0] / (_t1 - _t0)!r}")
