"""Standalone empty script for the end-to-end benchmark (bench/e2e.py).

    python empty.py [N]      (N is ignored)

Does nothing: run under each tool's command line, it measures the tool's
fixed cost (its imports, start, stop, writing an empty trace) on top of
the interpreter's own start-up.
"""

if __name__ == "__main__":
    pass
