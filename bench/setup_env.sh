#!/usr/bin/env bash
# Create (or refresh) the benchmark venv .venv-bench-<X.Y> at the repo root and
# install bench/requirements.txt into it.
#
# usage: bench/setup_env.sh [X.Y | /path/to/python]      (default 3.12)
#
# For X.Y the interpreter is looked up as $PYENV_ROOT/versions/X.Y.*/bin/pythonX.Y
# ($PYENV_ROOT defaults to ~/.pyenv; newest patch release wins), falling back to
# pythonX.Y on PATH.
set -euo pipefail

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
