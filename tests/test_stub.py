"""src/ocular/_ocular.pyi, the C extension's types, matches the extension: the same names, and for each
function whose docstring begins with its signature (``_start(*, precise, threshold, ...)``), the same
parameters in the same order, keyword-only where the docstring says so.  (mypy's stubtest skips private
names, which all of these are, and C functions without a text signature.)"""

import ast
import os
import re

from conftest import ROOT, SRC, run_py


def _stub():
    with open(os.path.join(SRC, "ocular", "_ocular.pyi"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            a = node.args
            out[node.name] = ([p.arg for p in a.posonlyargs + a.args], [p.arg for p in a.kwonlyargs])
        elif isinstance(node, ast.ClassDef):
            out[node.name] = None
    return out


def test_the_stub_names_what_the_extension_has():
    p = run_py("""
        import json
        from ocular import _ocular
        print(json.dumps({n: (getattr(_ocular, n).__doc__ or "") for n in dir(_ocular) if not n.startswith("__")}))
    """)
    runtime = __import__("json").loads(p.stdout)
    stub = _stub()
    assert sorted(stub) == sorted(runtime), (sorted(set(stub) ^ set(runtime)))
    checked = 0
    for name, doc in runtime.items():
        m = re.match(rf"{re.escape(name)}\(([^)]*)\)", doc.replace("\n", " "))
        if not m or stub[name] is None:
            continue
        params = [x.strip() for x in re.sub(r"[\[\]]", "", m.group(1)).split(",") if x.strip()]
        if "*" in params:
            k = params.index("*")
            pos, kw = params[:k], params[k + 1:]
        else:
            pos, kw = params, []
        names = lambda xs: [x.split("=")[0].strip() for x in xs]  # noqa: E731
        assert (names(pos), names(kw)) == stub[name], (name, doc.splitlines()[0], stub[name])
        checked += 1
    assert checked >= 15, checked


def test_start_takes_the_keywords_the_binding_parses():
    """_start's keywords in the stub are the binding's own list (module.c, py_start's kw[]), in its order:
    the docstring could fall behind the parser (stall_ms did), the list cannot.  (The C sources are the
    tree's: an installed wheel holds none.)"""
    with open(os.path.join(ROOT, "src", "ocular", "_ext", "module.c"), encoding="utf-8") as f:
        src = f.read()
    kw = re.search(r"py_start\(.*?static char \*kw\[\] = \{(.*?)NULL\}", src, re.S).group(1)
    assert _stub()["_start"] == ([], re.findall(r'"(\w+)"', kw))
