"""Bundled example for Ocular: a little of everything a timeline should show.

Recursive calls, a hot loop, a generator, an exception and a worker thread.
Run it traced with:  python -m ocular examples/primes.py
"""
import threading


def is_prime(n):
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True


def primes(limit):
    for n in range(limit):
        if is_prime(n):
            yield n


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def checked_div(a, b):
    try:
        return a / b
    except ZeroDivisionError:
        return float("inf")


def worker(out):
    out.append(sum(primes(3000)))


def main():
    out = []
    t = threading.Thread(target=worker, args=(out,), name="prime-worker")
    t.start()
    total = 0
    for i in range(20000):
        total += i * 2
    f = fib(18)
    d = checked_div(1, 0)
    t.join()
    print(f"primes sum={out[0]} loop total={total} fib(18)={f} div={d}")


if __name__ == "__main__":
    main()
