"""Imported at interpreter startup when tests/test_exact.py puts this directory on PYTHONPATH: imports the
modules named in $OCULAR_EXACT_PRELOAD (comma-separated) before the profiler and the program start.

cProfile and Ocular each import modules of their own before the program runs (cProfile: optparse, pstats,
dataclasses, inspect, ...; Ocular: threading, ...), so a module the program imports may be imported, its
module code and class bodies run and its functions called, under one profiler and not under the other.
The test preloads the union of both profilers' modules and the programs' own imports in both runs, so the
two profiles count the same calls; the program itself is unchanged.
"""
import importlib
import importlib.machinery
import importlib.util
import os
import sys

for _name in filter(None, os.environ.get("OCULAR_EXACT_PRELOAD", "").split(",")):
    try:
        importlib.import_module(_name)
    except Exception:  # a module that cannot be imported on its own here: the profiles show it
        pass

# another sitecustomize later on the path (a virtualenv's, coverage's) still runs
_here = os.path.dirname(os.path.abspath(__file__))
_rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
