"""Memory by output: peak RSS against events, threads ever started and functions, for every output.

    python -m bench.memory_profile [--quick] [--python PY] [--src DIR] [--tables events,threads,functions]
    python -m bench --memory-profile          (the same, as a section of the suite)

Three tables, each cell the peak RSS (ru_maxrss) of one run of ``python -m ocular`` at threshold 0, taken by
a small wrapper process (ru_maxrss of a child of a big process counts that process's RSS at the fork):

- events: fib(N), one thread, rendered to each output while recording and at stop (``.ocular``: the
  recording kept, nothing rendered), and ``convert`` of the ``.ocular`` to ``.pftrace``; the trace's
  length grows, the memory should not;
- threads: N short threads started one after the other (each calls a few functions), the same outputs;
  the threads ever started grow, the threads alive at once do not, nor should the memory;
- functions: N distinct functions each called once (``exec``), ``--no-trace-file --no-report``: what the
  stop adds per code object.

Untraced runs give each row's base.  JSON of the largest thread count writes ~330 MB of trace: the files
go to a temporary directory, removed after each run.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")

WRAPPER = """
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(p.stderr)
print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""

FIB = """
import sys
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
fib(int(sys.argv[1]))
"""

THREADS = """
import sys, threading
def leaf(x):
    return x + 1
def mid(x):
    return leaf(x) * 2
def work():
    for i in range(3):
        mid(i)
for i in range(int(sys.argv[1])):
    t = threading.Thread(target=work)
    t.start()
    t.join()
"""

EXECS = """
import sys
for i in range(int(sys.argv[1])):
    exec(f"def f{i}(): return {i}\\nf{i}()")
"""

OUTPUTS = ("untraced", ".ocular", ".json", ".pftrace", ".pstats", "convert .pftrace")
SIZES = {"events": (24, 27, 30), "threads": (1000, 5000, 20000), "functions": (30000, 100000, 300000)}
QUICK = {"events": (22, 25), "threads": (500, 2000), "functions": (10000, 30000)}


def measure(python, env, args, cwd):
    """(peak RSS bytes, stderr) of `python *args`, or (None, why)"""
    p = subprocess.run([python, "-c", WRAPPER, python, *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=1800)
    try:
        status, kb = map(int, p.stdout.split()[-2:])
    except ValueError:
        return None, p.stderr[-300:]
    if status != 0:
        return None, p.stderr.strip().splitlines()[-1:] or ["exit {}".format(status)]
    return kb * 1024, p.stderr


def events_of(err):
    m = re.search(r"([\d,]+) events", err or "")
    return int(m.group(1).replace(",", "")) if m else None


def row(python, env, tmp, prog, n, outputs):
    cells, events = {}, None
    for out in outputs:
        args = [prog, str(n)]
        if out == "untraced":
            pass
        elif out == "no-trace-file":
            args = ["-m", "ocular", "--no-trace-file", "--no-report"] + args
        elif out == "convert .pftrace":
            rec = os.path.join(tmp, "k.ocular")
            r, _ = measure(python, env, ["-m", "ocular", "--threshold", "0", "--no-report", "-o", rec] + args, tmp)
            if r is None:
                cells[out] = None
                continue
            args = ["-m", "ocular", "convert", rec, "-o", os.path.join(tmp, "c.pftrace")]
        else:
            args = ["-m", "ocular", "--threshold", "0", "--no-report", "-o", os.path.join(tmp, "t" + out)] + args
        rss, err = measure(python, env, args, tmp)
        cells[out] = rss
        events = events or events_of(err)
        for f in os.listdir(tmp):
            if f.startswith(("t.", "c.", "k.")):
                os.unlink(os.path.join(tmp, f))
    return cells, events


def mb(x):
    return "—" if x is None else "{:.0f} MB".format(x / (1 << 20))


def table(python, env, kind, sizes, log):
    prog_text = {"events": FIB, "threads": THREADS, "functions": EXECS}[kind]
    outputs = ("untraced", "no-trace-file") if kind == "functions" else OUTPUTS
    head = {"events": "fib(N): events", "threads": "threads started", "functions": "functions"}[kind]
    lines = ["| {} | {} |".format(head, " | ".join(outputs)), "|---:|" + "---:|" * len(outputs)]
    with tempfile.TemporaryDirectory(prefix="ocular-memprof-") as tmp:
        prog = os.path.join(tmp, kind + ".py")
        with open(prog, "w") as f:
            f.write(prog_text)
        for n in sizes:
            t0 = time.perf_counter()
            cells, events = row(python, env, tmp, prog, n, outputs)
            label = "fib({}): {:,}".format(n, events) if kind == "events" and events else "{:,}".format(n)
            lines.append("| {} | {} |".format(label, " | ".join(mb(cells[o]) for o in outputs)))
            log("bench: memory profile {} {}: {} ({:.0f} s)".format(
                kind, n, ", ".join("{} {}".format(o, mb(cells[o])) for o in outputs), time.perf_counter() - t0))
    return "\n".join(lines)


def report(python, env, quick=False, kinds=("events", "threads", "functions"), log=print):
    sizes = QUICK if quick else SIZES
    out = []
    for k in kinds:
        out.append("**{}** (peak RSS, threshold 0)\n".format(k))
        out.append(table(python, env, k, sizes[k], log))
        out.append("")
    out.append("Each cell: ru_maxrss of one `python -m ocular` run (or `convert` of its `.ocular`) from a small "
               "wrapper; untraced: the program alone.  Command: `python -m bench.memory_profile`.")
    return "\n".join(out)


def run(ctx):
    """the section of `python -m bench --memory-profile`"""
    from bench.common import Section, log

    title = "Memory by output: peak RSS against events, threads ever started and functions"
    if not ctx.has("ocular"):
        return Section(title, "Skipped: ocular not importable")
    env = dict(ctx.env)
    text = report(ctx.python, env, ctx.quick, log=log)
    return Section(title, text, text)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.memory_profile", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke test)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter to measure (default: this one)")
    ap.add_argument("--tables", default="events,threads,functions", help="which tables (comma-separated)")
    ap.add_argument("--src", default=SRC, help="the Ocular to measure (a src/ directory, extension built in place; "
                                               "default: this checkout's)")
    a = ap.parse_args(argv)
    env = dict(os.environ)
    env["PYTHONPATH"] = a.src + os.pathsep + env.get("PYTHONPATH", "")
    print(report(a.python, env, a.quick, tuple(a.tables.split(",")), log=lambda m: print(m, file=sys.stderr)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
