"""Helpers shared by every part of the benchmark suite.

Interpreters and the benchmark venv (``.venv-bench-X.Y``), the children's
environment, the floor module's build, running a timed child process, and
the formatting of numbers and markdown tables.  The sections of the suite
(bench/micro.py, bench/pyperf_suite.py, bench/e2e.py, bench/memory.py) and
bench/callgrind.py import from here; bench/run.py ties them together.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
CHILD_TIMEOUT = 300  # seconds per child; a hung tracer must not hang the suite


def log(msg: str = "") -> None:
    print(msg, file=sys.stderr, flush=True)


def print_and_write(report: str, output: str, tool: str) -> None:
    """Print a markdown report and write it to `output` ('-': nowhere), its directory made if needed."""
    print(report)
    if output != "-":
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(report)
        log("{}: wrote {}".format(tool, output))


class ChildError(RuntimeError):
    """A child process failed, timed out or wrote no result."""


# --------------------------------------------------------------------------
# Interpreters and environment


def resolve_python(spec: str | None) -> str:
    """--python value -> interpreter path (X.Y looks in pyenv, then $OCULAR_PYTHONS/X.Y, then PATH)."""
    if spec is None:
        return sys.executable
    if os.sep in spec or os.path.exists(spec):
        return os.path.abspath(spec)

    def patch(path):
        m = re.search(r"/versions/\d+\.\d+\.(\d+)/", path)
        return int(m.group(1)) if m else -1

    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    cands = sorted(glob.glob("{0}/versions/{1}.*/bin/python{1}".format(pyenv, spec)), key=patch)
    if cands:
        return cands[-1]
    # a prefix made by shared/tools/get-python.sh, where the Makefile looks too
    prefix = os.path.join(os.environ.get("OCULAR_PYTHONS") or "/opt/ocular-pythons", spec, "bin", "python" + spec)
    if os.path.exists(prefix):
        return prefix
    found = shutil.which("python" + spec)
    if found:
        return found
    raise SystemExit("no interpreter found for --python {}".format(spec))


def python_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    )
    return out.stdout.strip()


def child_python(base: str, setup: bool) -> tuple[str, str]:
    """Interpreter for the children: the bench venv if possible."""
    ver = python_version(base)
    venv = REPO / ".venv-bench-{}".format(ver)
    venv_py = venv / "bin" / "python"
    stamp = venv / ".bench-requirements.txt"
    reqs = (BENCH_DIR / "requirements.txt").read_text()
    fresh = venv_py.exists() and stamp.exists() and stamp.read_text() == reqs
    if not fresh and setup:
        log("bench: {} .venv-bench-{} (bench/setup_env.sh)...".format(
            "updating" if venv_py.exists() else "creating", ver))
        proc = subprocess.run(
            ["bash", str(BENCH_DIR / "setup_env.sh"), base],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        if proc.returncode != 0:
            log("bench: setup_env.sh failed (exit {}); using {} without the "
                "optional tracers:\n{}".format(proc.returncode, base, proc.stdout.strip()))
    if venv_py.exists():
        return str(venv_py), ver
    return base, ver


def ensure_gnuplot(setup: bool) -> str | None:
    """Path of gnuplot; when it is missing and setup is allowed, try
    ``bench/setup_env.sh --gnuplot`` (apt-get, as root) once."""
    found = shutil.which("gnuplot")
    if found or not setup:
        return found
    log("bench: gnuplot not found; trying bench/setup_env.sh --gnuplot ...")
    proc = subprocess.run(["bash", str(BENCH_DIR / "setup_env.sh"), "--gnuplot"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        log(proc.stdout.strip())
    return shutil.which("gnuplot")


def child_env(floor_dir: str | None) -> dict:
    env = dict(os.environ)
    # What the caller put on PYTHONPATH comes first (`make bench` sets src;
    # another Ocular build can be pointed at the same way), made absolute
    # because children run in a scratch directory; then the in-place build
    # in src/, the repository root (the bench package) and the floor module.
    paths = []
    for p in env.get("PYTHONPATH", "").split(os.pathsep):
        if p and os.path.abspath(p) not in paths:
            paths.append(os.path.abspath(p))
    for p in (str(REPO / "src"), str(REPO), floor_dir):
        if p and p not in paths:
            paths.append(p)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONHASHSEED"] = "0"
    env.pop("PYTHONSTARTUP", None)
    # as users run: the bytecode of every module (the standard library's, cProfile's, ours) cached, not
    # compiled again in every process (PYTHONDONTWRITEBYTECODE=1 in the caller's environment would
    # charge Ocular, whose modules are not precompiled in the source tree, ~10 ms per run)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def build_floor(python: str) -> tuple[str | None, str | None]:
    proc = subprocess.run(
        [python, str(BENCH_DIR / "build_floor.py")], capture_output=True, text=True
    )
    if proc.returncode != 0:
        return None, (proc.stderr.strip() or proc.stdout.strip() or "build failed")
    return proc.stdout.strip().splitlines()[-1], None


class Context:
    """What every section needs to start children: the interpreter, its
    environment, the optional CPU pin, and what the probe found."""

    __slots__ = ("python", "version", "env", "cpu", "quick", "setup", "probe")

    def __init__(self, python, version, env, cpu=None, quick=False, setup=True, probe=None):
        self.python = python
        self.version = version  # full "3.12.1"
        self.env = env
        self.cpu = cpu
        self.quick = quick
        self.setup = setup
        self.probe = probe or {}

    def prefix(self):
        """Command words before the interpreter (taskset when pinned)."""
        return ["taskset", "-c", str(self.cpu)] if self.cpu is not None else []

    def has(self, module):
        return bool(self.probe.get(module, {}).get("ok"))


def rotated(seq, r):
    """seq started at its (r mod len)th item: round r of an interleaved run starts with a different
    configuration each time, so no configuration always runs first (or right after the same one)."""
    k = r % len(seq)
    return seq[k:] + seq[:k]


class Proc:
    """Outcome of run_timed(): wall seconds, exit status, output, rusage."""

    __slots__ = ("wall", "status", "stdout", "stderr", "rusage")

    def __init__(self, wall, status, stdout, stderr, rusage):
        self.wall = wall
        self.status = status
        self.stdout = stdout
        self.stderr = stderr
        self.rusage = rusage


def run_timed(cmd, cwd, env, timeout=CHILD_TIMEOUT) -> Proc:
    """Run cmd to completion; wall time from just before the spawn to the
    reaping of the child (os.wait4, which also gives its rusage).  Output
    goes to files in cwd, so a chatty child never blocks on a pipe."""
    out_path = os.path.join(cwd, ".stdout")
    err_path = os.path.join(cwd, ".stderr")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, rusage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if wall >= timeout:
        raise ChildError("timed out after {} s: {}".format(timeout, " ".join(cmd)))
    with open(out_path, errors="replace") as f:
        stdout = f.read()
    with open(err_path, errors="replace") as f:
        stderr = f.read()
    return Proc(wall, proc.returncode, stdout, stderr, rusage)


def tail(text, n=12):
    return "\n    ".join(text.strip().splitlines()[-n:])


# --------------------------------------------------------------------------
# Statistics and formatting


def median(xs):
    return statistics.median(xs) if xs else None


def spread(xs):
    """±half the min-max range relative to the median, as text."""
    if len(xs) < 2:
        return "—"
    m = statistics.median(xs)
    return "±{:.1f}%".format(50 * (max(xs) - min(xs)) / m) if m else "—"


def fmt_s(x):
    return "—" if x is None else ("{:.4f}".format(x) if x < 10 else "{:.2f}".format(x))


def fmt_ratio(x):
    return "—" if x is None else "{:.2f}×".format(x)


def fmt_count(n):
    if n is None:
        return "—"
    if n >= 1e6:
        return "{:.2f}M".format(n / 1e6)
    if n >= 1e3:
        return "{:.1f}k".format(n / 1e3)
    return str(n)


def fmt_ns(x):
    return "—" if x is None else "{:.1f}".format(x)


def fmt_bytes(n):
    if n is None:
        return "—"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return "{:.1f} {}".format(n / size, unit)
    return "{} B".format(n)


def md_table(header, rows, left=2, align=None):
    """Markdown table; the first `left` columns left-aligned, the rest right,
    unless `align` gives one letter per column ("l" or "r")."""
    align = align or "l" * left + "r" * (len(header) - left)
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(lines)


def machine_info():
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "{} ({} cores), {}".format(cpu or "unknown CPU", os.cpu_count(), platform.platform())


def load_average():
    try:
        return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        return "unknown"


class Section:
    """What a section hands back to the runner.

    title: heading in results.md; markdown: its body; console: what is
    printed at the end; panels: (title, groups, series, {(group, series):
    ratio}) for bench/plot.py; failed: whether any run failed.
    """

    __slots__ = ("title", "markdown", "console", "panels", "failed")

    def __init__(self, title, markdown, console=None, panels=(), failed=False):
        self.title = title
        self.markdown = markdown
        self.console = markdown if console is None else console
        self.panels = list(panels)
        self.failed = failed
