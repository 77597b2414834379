"""A sys.monitoring tool that does nothing, to show what any tool changes in a program (CPython's own tests):

    python tests/noop_tool.py [--mode adaptive|precise] [--threshold N] [--tool-id ID] [--no-c-functions]
                              -m MODULE [args...]
    python tests/noop_tool.py --mode precise -m test test_opcache     # e.g.

It takes tool id ID (default: the first free of 2, 3, 4, 5, 1, 0; stdlib_compare.py passes the id Ocular
takes by default, which some tests see), asks for the events Ocular asks for in
MODE (PY_START, PY_RESUME, PY_THROW, PY_RETURN, PY_YIELD, PY_UNWIND, JUMP, BRANCH -- BRANCH_LEFT/RIGHT on
3.14+ -- INSTRUCTION in precise mode, and CALL, C_RETURN, C_RAISE unless --no-c-functions, as Ocular's
C-function slices, on by default) with callbacks that record nothing, and, like Ocular's
threshold, answers DISABLE at a location's N-th hit (default 500; 0 = never).  Then it runs MODULE as
``python -m MODULE`` would and exits with its status.  Nothing of Ocular is imported.

tests/stdlib_compare.py compares Ocular with this tool for the test modules whose results differ under
any sys.monitoring tool (docs/stdlib-differences.md): Ocular must do no worse than doing nothing.
"""

import argparse
import runpy
import sys

mon = sys.monitoring
ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--mode", choices=("adaptive", "precise"), default="adaptive")
ap.add_argument("--threshold", type=int, default=500)
ap.add_argument("--tool-id", type=int, default=None)
ap.add_argument("--no-c-functions", action="store_false", dest="c_functions")
ap.add_argument("-m", dest="module", required=True)
argv = sys.argv[1:]
cut = argv.index("-m") + 2 if "-m" in argv else len(argv)  # what follows the module is the module's
ns, rest = ap.parse_args(argv[:cut]), argv[cut:]

tool = ns.tool_id if ns.tool_id is not None else next(i for i in (2, 3, 4, 5, 1, 0) if mon.get_tool(i) is None)
mon.use_tool_id(tool, "noop")
E = mon.events
names = ["PY_START", "PY_RESUME", "PY_THROW", "PY_RETURN", "PY_YIELD", "PY_UNWIND", "JUMP"]
names += ["BRANCH_LEFT", "BRANCH_RIGHT"] if hasattr(E, "BRANCH_LEFT") else ["BRANCH"]
names += ["INSTRUCTION"] if ns.mode == "precise" else []
names += ["CALL", "C_RETURN", "C_RAISE"] if ns.c_functions else []
LOCAL = {"PY_START", "PY_RESUME", "PY_RETURN", "PY_YIELD", "JUMP", "BRANCH", "BRANCH_LEFT", "BRANCH_RIGHT",
         "INSTRUCTION", "CALL"}  # the events DISABLE works for
hits = {}
limit = ns.threshold


def local(code, offset, *rest):
    if limit:
        key = (code, offset)
        n = hits.get(key, 0) + 1
        hits[key] = n
        if n >= limit:
            return mon.DISABLE
    return None


def other(*args):
    return None


mask = 0
for name in names:
    mon.register_callback(tool, getattr(E, name), local if name in LOCAL else other)
    mask |= getattr(E, name)
mon.set_events(tool, mask)
sys.argv = [ns.module] + rest
runpy.run_module(ns.module, run_name="__main__", alter_sys=True)
