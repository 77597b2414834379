"""Command line: ``python -m ocular [options] (script.py | -m module | -c code) [args...]``,
``python -m ocular convert RECORDING -o OUT``, ``python -m ocular merge TRACE... -o OUT`` and
``python -m ocular attach PID [options]``.

Runs the program as Python itself would (same sys.argv, __main__, sys.path[0] and exit status) with
tracing on, and saves the trace however the program ends (return, sys.exit, an uncaught exception, ^C,
SIGTERM and SIGHUP: saved, then the process dies of the signal as it would untraced).
If the trace cannot be written (a full disk), the exit status is still the program's when the program
failed; when only Ocular failed, it is 74 (TRACE_NOT_WRITTEN), with "ocular: the program exited 0; the
trace could not be written: <cause>".
Without --follow the program runs in this process; with --follow it runs as a child process and every
Python process it starts is traced too, then merged into one trace (``_follow.py``).
The commands are ``_cli/``'s, one module each.
"""
import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
