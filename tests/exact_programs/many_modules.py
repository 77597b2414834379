"""10. Many generated modules: 300 modules written to a temporary directory and imported, each with
functions called a few times (the module names and their files' names are the same on every run)."""
import importlib
import os
import shutil
import sys
import tempfile
import time

SIZE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OCULAR_EXACT_SIZE", "short")
MODULES, CALLS, WORK = {"short": (300, 3, 150), "long": (300, 6, 3000)}[SIZE]

SOURCE = '''
def leaf_{i}(n):
    s = 0
    for k in range(n):
        s += k % {m}
    return s


def entry_{i}(n):
    return leaf_{i}(n) + leaf_{i}(n // 2)
'''


def main():
    sys.dont_write_bytecode = True
    # in memory where there is a tmpfs: the time of writing 300 files is then the program's, not the disk's
    d = tempfile.mkdtemp(prefix="ocular_exact_mods_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    sys.path.insert(0, d)
    try:
        for i in range(MODULES):
            with open(os.path.join(d, f"exact_gen_{i:03d}.py"), "w") as f:
                f.write(SOURCE.format(i=i, m=i % 13 + 2))
        importlib.invalidate_caches()
        mods = [importlib.import_module(f"exact_gen_{i:03d}") for i in range(MODULES)]
        t = 0
        for c in range(CALLS):
            for i, m in enumerate(mods):
                t += getattr(m, f"entry_{i}")(WORK + c)
        return t
    finally:
        sys.path.remove(d)
        shutil.rmtree(d)


if __name__ == "__main__":
    _c0, _p0 = time.thread_time(), time.process_time()
    _t0 = time.perf_counter()
    main()
    _t1 = time.perf_counter()
    _c1, _p1 = time.thread_time(), time.process_time()
    print(f"exact: main took {_t1 - _t0!r} s, cpu {_c1 - _c0!r} s, process {_p1 - _p0!r} s")
