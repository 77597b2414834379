"""Build bench/floor.c into bench/_build/<cache-tag>/_ocular_floor<EXT_SUFFIX>.

No setuptools: the include directory and extension suffix come from
sysconfig and gcc is invoked directly.  The build is skipped when the shared
object is newer than floor.c (use --force to rebuild).

usage:
    python3.12 bench/build_floor.py [--force]
    python3.12 -m bench.build_floor [--force]

Prints the directory to put on sys.path to ``import _ocular_floor``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "floor.c"
MODULE = "_ocular_floor"

CFLAGS = ["-std=c11", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"]


def build_dir() -> Path:
    """Per-interpreter output directory, e.g. bench/_build/cpython-312."""
    tag = sys.implementation.cache_tag or "python{}{}".format(*sys.version_info[:2])
    return HERE / "_build" / tag


def target_path() -> Path:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return build_dir() / (MODULE + suffix)


def compiler() -> str:
    cc = os.environ.get("CC")
    if cc:
        return cc
    for name in ("gcc", "cc"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("no C compiler found (install gcc or set CC)")


def build(force: bool = False, verbose: bool = False) -> Path:
    """Build the floor module if needed; return the directory holding it."""
    out = target_path()
    if (
        not force
        and out.exists()
        and out.stat().st_mtime >= SOURCE.stat().st_mtime
        and out.stat().st_mtime >= Path(__file__).stat().st_mtime
    ):
        return out.parent
    out.parent.mkdir(parents=True, exist_ok=True)
    include = sysconfig.get_paths()["include"]
    # Compile to a temporary name and rename, so a concurrent importer never
    # sees a half-written shared object.
    tmp = str(out.parent / "{}.{}.so.tmp".format(MODULE, os.getpid()))
    cmd = shlex.split(compiler()) + CFLAGS + ["-I", include, str(SOURCE), "-o", tmp]
    if verbose:
        print("+", " ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(
                "building {} failed ({}):\n{}{}".format(
                    MODULE, " ".join(cmd), proc.stdout, proc.stderr
                )
            )
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = ap.parse_args(argv)
    try:
        print(build(force=args.force, verbose=True))
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
