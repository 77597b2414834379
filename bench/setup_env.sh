#!/usr/bin/env bash
# Create (or refresh) the benchmark venv .venv-bench-<X.Y> at the repo root and
# install bench/requirements.txt into it; make sure gnuplot is there for the plot.
#
# usage: bench/setup_env.sh [X.Y | /path/to/python]      (default 3.12)
#        bench/setup_env.sh --gnuplot                     (only the gnuplot step)
#
# gnuplot (Debian's gnuplot-nox) draws bench/results.png.  When it is missing and
# we are root with apt-get, it is installed; otherwise a note is printed and the
# benchmark skips the plot.  A failure here never fails the script.
#
# For X.Y the interpreter is looked up as $PYENV_ROOT/versions/X.Y.*/bin/pythonX.Y
# ($PYENV_ROOT defaults to ~/.pyenv; newest patch release wins), then $OCULAR_PYTHONS/X.Y/bin/pythonX.Y
# (default /opt/ocular-pythons, made by shared/tools/get-python.sh), falling back to
# pythonX.Y on PATH.
set -euo pipefail

ensure_gnuplot() {
    if command -v gnuplot >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "setup_env.sh: gnuplot not found and cannot be installed here (needs root and apt-get):" \
             "install gnuplot-nox for the plot" >&2
        return 0
    fi
    echo "setup_env.sh: installing gnuplot-nox (apt-get)"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q gnuplot-nox >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q gnuplot-nox >/dev/null 2>&1 ||
            echo "setup_env.sh: apt-get install gnuplot-nox failed: no plot" >&2
    fi
    return 0
}

if [ "${1:-}" = "--gnuplot" ]; then
    ensure_gnuplot
    exit 0
fi
ensure_gnuplot

arg="${1:-3.12}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"

py=""
if [[ "$arg" == */* ]]; then
    py="$arg"
else
    for cand in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$arg".*/bin/python"$arg" 2>/dev/null | sort -V); do
        py="$cand"
    done
    if [ -z "$py" ] && [ -x "${OCULAR_PYTHONS:-/opt/ocular-pythons}/$arg/bin/python$arg" ]; then
        py="${OCULAR_PYTHONS:-/opt/ocular-pythons}/$arg/bin/python$arg"   # made by shared/tools/get-python.sh
    fi
    if [ -z "$py" ]; then
        py="$(command -v "python$arg" || true)"
    fi
fi
if [ -z "$py" ] || ! "$py" -c 'pass' 2>/dev/null; then
    echo "setup_env.sh: no usable interpreter for '$arg'" >&2
    exit 1
fi
ver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
venv="$root/.venv-bench-$ver"

if [ ! -x "$venv/bin/python" ]; then
    echo "setup_env.sh: creating $venv with $py"
    "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$here/requirements.txt"
# Stamp: bench/run.py re-runs this script when requirements.txt changes.
cp "$here/requirements.txt" "$venv/.bench-requirements.txt"
echo "setup_env.sh: ready: $venv/bin/python"
