"""9. An OO program: classes with properties, methods, a class method, operators and super()."""
import os
import sys
import time

SIZE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OCULAR_EXACT_SIZE", "short")
N = {"short": 60_000, "long": 600_000}[SIZE]


class Vec:
    __slots__ = ("_x", "_y")

    def __init__(self, x, y):
        self._x = x
        self._y = y

    @property
    def x(self):
        return self._x

    @property
    def y(self):
        return self._y

    @x.setter
    def x(self, v):
        self._x = v

    def __add__(self, other):
        return Vec(self._x + other.x, self._y + other.y)

    def norm2(self):
        return self.x * self.x + self.y * self.y

    @classmethod
    def unit(cls):
        return cls(1, 0)


class Body:
    def __init__(self, i):
        self.pos = Vec(i, -i)
        self.vel = Vec.unit()

    def step(self):
        self.pos = self.pos + self.vel
        return self.energy()

    def energy(self):
        return self.vel.norm2()


class Heavy(Body):
    def energy(self):
        return 2 * super().energy() + self.pos.norm2() % 3


def main():
    bodies = [Body(i) if i % 2 else Heavy(i) for i in range(20)]
    t = 0
    for r in range(N // 20):
        for b in bodies:
            t += b.step()
        bodies[r % 20].pos.x = r
    return t


if __name__ == "__main__":
    _c0, _p0 = time.thread_time(), time.process_time()
    _t0 = time.perf_counter()
    main()
    _t1 = time.perf_counter()
    _c1, _p1 = time.thread_time(), time.process_time()
    print(f"exact: main took {_t1 - _t0!r} s, cpu {_c1 - _c0!r} s, process {_p1 - _p0!r} s")
