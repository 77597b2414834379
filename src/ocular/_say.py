"""Saying a line on stderr without harming the traced program: a closed or broken stderr is not the
program's error, and with no stderr at all nothing is printed (not on stdout, the program's own output)."""
import sys


def _print_err(text):
    """Print to sys.stderr; a closed or broken stderr is not an error of the traced program's (and with
    no stderr at all, sys.stderr None, nothing is printed: print() would fall back to stdout, the
    program's own output)."""
    if sys.stderr is None:
        return
    try:  # one write, line and newline together: a signal handler's line (SIGUSR2) cannot cut into it
        sys.stderr.write(f"{text}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
