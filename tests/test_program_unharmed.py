"""What a traced program sees of CPython stays as untraced: Ocular keeps its per-code data beside the code
objects (codemap.c), not in co_extra and not through weak references.

- A program's own co_extra index (PyUnstable_Eval_RequestCodeExtraIndex, as CPython's test_code and JITs
  use) has its free function called for what the program set, and only that: CPython calls every index's
  free function for every code object whose extra block exists, so per-code data in co_extra made the
  program's function run (with NULL) for each code object Ocular touched -- and a ctypes thunk, freed at
  shutdown, then crashed the interpreter at exit (139).
- No code object gains a weak reference (a GC object each: CPython's test_descr counts objects).
"""

import pytest

from conftest import run_py

CO_EXTRA = r'''
import ctypes, gc, sys
FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
freed = []
free = FREE(lambda p: freed.append(p))
req = ctypes.pythonapi.PyUnstable_Eval_RequestCodeExtraIndex
req.restype = ctypes.c_ssize_t
req.argtypes = [FREE]
index = req(free)
set_extra = ctypes.pythonapi.PyUnstable_Code_SetExtra
set_extra.argtypes = [ctypes.py_object, ctypes.c_ssize_t, ctypes.c_void_p]
ns = {}
for i in range(50):
    exec(f"def g{i}(): return {i}", ns)
    ns[f"g{i}"]()
exec("def mine(): return 1", ns)
ns["mine"]()
set_extra(ns["mine"].__code__, index, 100)
ns.clear()
gc.collect()
print("freed", freed)
'''


def _tracing(body, **opts):
    args = ", ".join(f"{k}={v!r}" for k, v in opts.items())
    return ("import ocular, os, sys\n"
            f"ocular.start_tracing({args})\n"
            + body +
            "ocular.stop_tracing()\n")


def test_a_programs_co_extra_free_function_sees_only_its_own_data(tmp_path):
    p = run_py(_tracing(CO_EXTRA, output=str(tmp_path / "t.json"), report=False), check=False)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stderr[-3000:]}"
    assert "freed [100]\n" in p.stdout, p.stdout[-2000:]


def test_runner_with_a_programs_co_extra_exits_cleanly(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(CO_EXTRA)
    p = run_py("import runpy, sys; sys.argv[:] = ['ocular', '-q', '-o', sys.argv[1], sys.argv[2]]; "
               "runpy.run_module('ocular', run_name='__main__')", str(tmp_path / "t.json"), str(prog), check=False)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stderr[-3000:]}"
    assert "freed [100]\n" in p.stdout


def test_no_weak_reference_on_traced_code(tmp_path):
    code = _tracing("""
import weakref
def f(): return 1
for _ in range(1000): f()
import json; json.dumps({"a": 1})
print("weakrefs", weakref.getweakrefcount(f.__code__), weakref.getweakrefcount(json.dumps.__code__))
""", output=str(tmp_path / "t.json"), report=False)
    p = run_py(code)
    assert "weakrefs 0 0\n" in p.stdout, p.stdout
