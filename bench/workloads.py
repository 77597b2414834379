"""Benchmark workloads for the Ocular tracer.

Each workload is a plain function taking one integer ``size`` and returning a
value derived from its work (so the work cannot be skipped).  They are
deterministic: the same size produces the same sequence of monitoring events
on every run, which lets the runner count events once per workload and reuse
the count for ns-per-event figures.

``WORKLOADS`` maps a name to a :class:`Workload` with the default and
``--quick`` sizes.  The defaults run for roughly 30-60 ms untraced on the
2-core reference machine (loop: 3M iterations, ~0.4 s), keeping
``python -m bench`` (all configurations, 5 rounds) under about three minutes.
"""

from __future__ import annotations

import threading


# --------------------------------------------------------------------------
# fib: recursive, call heavy.  fib(n) makes 2*F(n+1) - 1 calls.


def _fib(n):
    if n < 2:
        return n
    return _fib(n - 1) + _fib(n - 2)


def fib(size):
    """Recursive Fibonacci: one Python call per node of the call tree."""
    return _fib(size)


def fib_calls(n: int) -> int:
    """Number of calls to _fib made by fib(n): 2*F(n+1) - 1."""
    a, b = 0, 1
    for _ in range(n + 1):
        a, b = b, a + b
    return 2 * a - 1


# --------------------------------------------------------------------------
# loop: tight arithmetic loop, no calls: only JUMP/BRANCH (and INSTRUCTION).


def loop(size):
    """``for i in range(size): total += i * 2``: branch/jump heavy, call free."""
    total = 0
    for i in range(size):
        total += i * 2
    return total


# --------------------------------------------------------------------------
# loop_ccalls: the loop with two C calls per iteration (a builtin function and
# a method of a built-in type): JUMP/BRANCH plus two cheap C call sites.


def loop_ccalls(size):
    """``for i in range(size): total += abs(i - half) + word.count("a")``: two C calls per iteration
    (``abs``, ``str.count``), cheap enough for a tracer to de-instrument their sites."""
    total = 0
    half = size // 2
    word = "banana"
    for i in range(size):
        total += abs(i - half) + word.count("a")
    return total


# --------------------------------------------------------------------------
# generators: PY_START/PY_YIELD/PY_RESUME/PY_RETURN heavy.


def _naturals(n):
    i = 0
    while i < n:
        yield i
        i += 1


def _evens(it):
    for x in it:
        if x % 2 == 0:
            yield x


def _squares(it):
    for x in it:
        yield x * x


def _chunks(it, k):
    chunk = []
    for x in it:
        chunk.append(x)
        if len(chunk) == k:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _delegating(n):
    yield from _squares(_evens(_naturals(n)))


def generators(size):
    """Chained generators, ``yield from`` and a generator expression."""
    total = 0
    for chunk in _chunks(_delegating(size), 7):
        total += sum(x % 1000 for x in chunk)
    return total


# --------------------------------------------------------------------------
# exceptions: RAISE/PY_UNWIND/PY_THROW/EXCEPTION_HANDLED territory.


class _BenchError(Exception):
    pass


def _check(i):
    if i % 3 == 0:
        raise _BenchError(i)
    return i


def _deep(i, depth):
    # Unwinds through `depth` frames before being caught.
    if depth == 0:
        return _check(i)
    return _deep(i, depth - 1)


def _catcher():
    caught = 0
    while True:
        try:
            yield caught
        except _BenchError:
            caught += 1


def exceptions(size):
    """Raise/catch across frames, try/finally, and generator.throw()."""
    caught = 0
    gen = _catcher()
    next(gen)
    for i in range(size):
        try:
            _deep(i, 3)
        except _BenchError:
            caught += 1
        try:
            try:
                if i % 5 == 0:
                    raise KeyError(i)
            finally:
                caught += 0
        except KeyError:
            caught += 1
        if i % 7 == 0:
            caught += gen.throw(_BenchError(i)) & 1
    gen.close()
    return caught


# --------------------------------------------------------------------------
# strings_dicts: mostly C-level work (str/dict methods) driven from Python.

_WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi "
    "omicron pi rho sigma tau upsilon phi chi psi omega"
).split()


def _sentence(i):
    w = _WORDS
    n = len(w)
    return "{} {} {}-{} {}".format(w[i % n], w[(i * 7) % n], w[(i * 3) % n], i % 97, w[(i + 5) % n])


def strings_dicts(size):
    """Format, split, join, and count words in a dict; dict comprehension."""
    counts = {}
    lengths = {}
    for i in range(size):
        s = _sentence(i)
        for word in s.upper().split():
            counts[word] = counts.get(word, 0) + 1
        key = "-".join(sorted(s.split()[:2]))
        lengths[key] = len(s)
    top = {k: v for k, v in counts.items() if v > size // 50}
    return len(top) + sum(lengths.values()) % 100003


# --------------------------------------------------------------------------
# objects: a small OO simulation (methods, properties, inheritance, super()).


class _Vec:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y

    def __add__(self, other):
        return _Vec(self.x + other.x, self.y + other.y)

    def scale(self, k):
        return _Vec(self.x * k, self.y * k)

    def norm1(self):
        return abs(self.x) + abs(self.y)


class _Body:
    def __init__(self, pos, vel, mass):
        self.pos = pos
        self.vel = vel
        self.mass = mass

    @property
    def momentum(self):
        return self.vel.scale(self.mass).norm1()

    def step(self, dt):
        self.pos = self.pos + self.vel.scale(dt)

    def bounce(self, box):
        if abs(self.pos.x) > box:
            self.vel = _Vec(-self.vel.x, self.vel.y)
        if abs(self.pos.y) > box:
            self.vel = _Vec(self.vel.x, -self.vel.y)


class _Heavy(_Body):
    def step(self, dt):
        super().step(dt * 0.5)


class _World:
    def __init__(self, n):
        self.bodies = []
        for i in range(n):
            cls = _Heavy if i % 4 == 0 else _Body
            self.bodies.append(cls(_Vec(i, -i), _Vec((i % 5) - 2, (i % 3) - 1), 1 + i % 3))

    def tick(self, dt):
        for b in self.bodies:
            b.step(dt)
            b.bounce(50)

    def momentum(self):
        return sum(b.momentum for b in self.bodies)


def objects(size):
    """``size`` ticks of a 50-body world: many small method calls."""
    world = _World(50)
    for _ in range(size):
        world.tick(0.1)
    return round(world.momentum(), 6)


# --------------------------------------------------------------------------
# threads: 4 threads each computing fib(size).


def threads(size):
    """Four threads each running recursive fib(size) (GIL bound)."""
    results = [None] * 4

    def work(k):
        results[k] = _fib(size)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(results)


# --------------------------------------------------------------------------
# aio_loopback: an asyncio server and its clients on 127.0.0.1 (asyncio's streams).


async def _aio_serve(reader, writer):
    while line := await reader.readline():
        writer.write(line.upper())
        await writer.drain()
    writer.close()


async def _aio_client(port, n):
    import asyncio

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = 0
    for i in range(n):
        writer.write(b"request %d\n" % i)
        await writer.drain()
        got += len(await reader.readline())
    writer.close()
    await writer.wait_closed()
    return got


async def _aio_main(size, clients):
    import asyncio

    server = await asyncio.start_server(_aio_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        got = await asyncio.gather(*(_aio_client(port, size // clients) for _ in range(clients)))
    return sum(got)


def aio_loopback(size):
    """An asyncio echo server and 20 clients on loopback, ``size`` request lines in all: each a
    client task's write, the server task's read and reply, the client's read (asyncio's streams)."""
    import asyncio

    return asyncio.run(_aio_main(size, 20))


# --------------------------------------------------------------------------


class Workload:
    """A workload: its function, default and --quick sizes, one-line doc.

    (A plain class: dataclasses/typing would add ~20 ms to every child's
    start-up, outside the timed region but not outside the suite's wall time.)
    """

    __slots__ = ("name", "func", "size", "quick_size", "doc")

    def __init__(self, name, func, size, quick_size, doc):
        self.name = name
        self.func = func
        self.size = size
        self.quick_size = quick_size
        self.doc = doc


WORKLOADS = {
    w.name: w
    for w in (
        Workload("fib", fib, 26, 20, "recursive fib(n), call heavy"),
        Workload("loop", loop, 3_000_000, 300_000, "tight arithmetic loop, branches only"),
        Workload("loop_ccalls", loop_ccalls, 1_000_000, 100_000,
                 "loop with two C calls per iteration (abs, str.count)"),
        Workload("generators", generators, 80_000, 8_000, "chained generators, yield from"),
        Workload("exceptions", exceptions, 25_000, 2_500, "raise/catch across frames, gen.throw"),
        Workload("strings_dicts", strings_dicts, 12_000, 1_200, "str formatting/splitting, dict counting"),
        Workload("objects", objects, 250, 25, "small OO simulation, 50 bodies"),
        Workload("threads", threads, 23, 18, "4 threads of fib(n)"),
        Workload("aio_loopback", aio_loopback, 2_000, 200, "asyncio echo server and 20 clients on loopback"),
    )
}
