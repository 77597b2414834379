"""Start-up cost in instructions (callgrind): an empty script run untraced, under `python -m cProfile` and under
`python -m ocular` (its defaults: `.pftrace` trace, report), each with its bytecode caches written first.

    PYTHONPATH=src python -m bench.startup [--python PYTHON] [--runs N] [--output PATH]

Prints a table (instructions, and above the empty script; Ocular's ÷ cProfile's, the issue's target
≤ 0.8) and the modules each run leaves in the program's sys.modules.  Instruction counts are
stable where seconds are not; the minimum of --runs runs is kept.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile

from bench.callgrind import read_totals, valgrind_cmd
from bench.common import REPO, md_table, print_and_write, resolve_python

MODULES = "import sys; print(len(sys.modules))"


def _env():
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # users' installs have their .pyc files
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    return env


def _instructions(cmd, env, tmp):
    out = os.path.join(tmp, "cg.out")
    p = subprocess.run(valgrind_cmd("valgrind", out) + cmd, env=env, capture_output=True, text=True, cwd=tmp,
                       timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {p.returncode}\n{p.stderr[-2000:]}")
    return read_totals(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=None, help="interpreter: a path or X.Y (default: this one)")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--output", default="-", help="also write the markdown here ('-': only print it)")
    a = ap.parse_args(argv)
    a.python = resolve_python(a.python)
    env = _env()
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "empty.py")
        with open(script, "w") as f:
            f.write("")
        mods = os.path.join(tmp, "mods.py")
        with open(mods, "w") as f:
            f.write(MODULES + "\n")
        configs = {
            "empty script": [a.python, script],
            "python -m cProfile": [a.python, "-m", "cProfile", script],
            "python -m ocular": [a.python, "-m", "ocular", "-q", "-o", os.path.join(tmp, "t.pftrace"), script],
        }
        counts, modules = {}, {}
        for name, cmd in configs.items():
            subprocess.run(cmd, env=env, capture_output=True, cwd=tmp, timeout=300)  # .pyc files written
            m = subprocess.run(cmd[:-1] + [mods], env=env, capture_output=True, text=True, cwd=tmp, timeout=300)
            modules[name] = (m.stdout.split() or ["?"])[0]
        for _ in range(a.runs):  # interleaved
            for name, cmd in configs.items():
                n = _instructions(cmd, env, tmp)
                counts[name] = min(counts.get(name, n), n)
    base = counts["empty script"]
    rows = [(name, f"{n:,}", f"{n - base:,}", modules[name]) for name, n in counts.items()]
    ratio = (counts["python -m ocular"] - base) / max(1, counts["python -m cProfile"] - base)
    version = subprocess.run([a.python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                             text=True).stdout.strip()
    report = (f"# Start-up on an empty script (callgrind, CPython {version}, minimum of {a.runs} runs)\n\n"
              + md_table(("run", "instructions", "above the empty script", "modules in the program's sys.modules"),
                         rows, left=1) + f"\n\nOcular ÷ cProfile, above the empty script: **{ratio:.2f}** (target ≤ 0.8)\n")
    print_and_write(report, a.output, "bench.startup")


if __name__ == "__main__":
    main()
