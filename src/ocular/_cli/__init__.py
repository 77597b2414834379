"""The command line: ``python -m ocular [options] (script.py | -m module | -c code) [args...]`` (run.py),
``python -m ocular convert RECORDING -o OUT`` (convert.py), ``python -m ocular merge TRACE... -o OUT``
(merge.py) and ``python -m ocular attach PID [options]`` (attach.py): one module per command, what they
share in common.py.  A command's module is imported only when it runs (start-up stays lean)."""
import importlib
import sys

COMMANDS = ("convert", "merge", "attach")


def main(argv=None):
    """The `ocular` command and `python -m ocular`: a command's main, or running a program; its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in COMMANDS:
        return getattr(importlib.import_module(f"{__name__}.{argv[0]}"), f"{argv[0]}_main")(argv[1:])
    from . import run

    return run.main(argv)
