"""The C sources' layout rules (#33), checked so that they stay true: every C file says its one job in a
header comment that names it; every compile-time difference between CPython versions is in compat.h (one
place to look when a new version comes); and the render side is a C library without the Python API --
each of its files compiles with no Python header on the include path, and none includes a record-side
header."""
import os
import re
import shutil
import subprocess

import pytest

EXT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "ocular", "_ext")


def _sources():
    return sorted(f for f in os.listdir(EXT) if f.endswith((".c", ".h")))


def test_every_c_file_starts_with_its_job():
    files = _sources()
    assert len(files) > 20, files
    for name in files:
        with open(os.path.join(EXT, name), encoding="utf-8") as f:
            first = f.readline()
        assert first.startswith(f"/* {name} -- ") and len(first) > len(name) + 20, (name, first)


def test_version_branches_are_in_compat_h_only():
    branch = re.compile(r"^\s*#\s*(if|elif)\b.*\bPY_VERSION_HEX\b", re.M)
    found = {name: len(branch.findall(open(os.path.join(EXT, name), encoding="utf-8").read())) for name in _sources()}
    assert found.pop("compat.h") >= 2  # (the rule is not checked against nothing)
    assert not {k: v for k, v in found.items() if v}, found


# the render side (render.h): the recording's reader and renderer, its statistics and estimates, the sinks and
# their output, and what both sides share (thread.c); results.c, the binding, turns its results into Python
RENDER_SIDE = ("render.c", "reader.c", "tasks.c", "live.c", "rtables.c", "stats.c", "attrib.c", "sink_json.c", "sink_perfetto.c", "sink_speedscope.c",
               "sink_tree.c", "pipe.c", "out.c", "deflate.c", "thread.c",
               "render.h", "render_int.h", "stats.h", "recording.h", "deflate.h", "thread.h")
# the record side's headers: ocular.h (the base) and one per unit, each declaring what its owner defines
UNIT_HEADERS = {"clock.h": ("clock.c",), "session.h": ("session.c",), "buffer.h": ("buffer.c",),
                "codeinfo.h": ("codeinfo.c",), "asyncio.h": ("asyncio.c",), "recorder.h": ("recorder.c",),
                "sigsave.h": ("sigsave.c",), "sampling.h": ("sampling.c",), "codemap.h": ("codemap.c",),
                "binding.h": ("monitor.c", "owncost.c", "results.c", "usdt.c")}
RECORD_SIDE_HEADERS = ("ocular.h", "compat.h", "usdt_sdt.h", "Python.h", *UNIT_HEADERS)


def test_the_render_side_includes_no_record_side_header():
    for name in RENDER_SIDE:
        src = open(os.path.join(EXT, name), encoding="utf-8").read()
        included = re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', src, re.M)
        assert not set(included) & set(RECORD_SIDE_HEADERS), (name, included)
    # (and every C file is on one side or the other: a new one is placed on purpose)
    record = {"session.c", "asyncio.c", "buffer.c", "clock.c", "codeinfo.c", "codemap.c", "module.c", "monitor.c",
              "owncost.c", "recorder.c", "sampling.c", "sigsave.c", "usdt.c", "results.c", "ocular.h",
              "compat.h", "usdt_sdt.h", *UNIT_HEADERS}
    assert set(_sources()) == set(RENDER_SIDE) | record, set(_sources()) ^ (set(RENDER_SIDE) | record)


@pytest.mark.skipif(not shutil.which("gcc"), reason="gcc not found (Debian package build-essential)")
def test_the_render_side_compiles_without_python_headers():
    for name in RENDER_SIDE:
        if name.endswith(".c"):
            p = subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE", "-fsyntax-only",
                                "-I" + EXT, os.path.join(EXT, name)],
                               capture_output=True, text=True, timeout=120)
            assert p.returncode == 0, (name, p.stderr[:2000])


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_every_c_file_is_warning_free_on_gcc_and_clang(cc):
    """C11 with -Wall -Wextra -Werror on both compilers (setup.py builds with the system's cc: gcc on Debian;
    clang's warnings differ, so it is checked here on every file)."""
    import sysconfig

    if not shutil.which(cc):
        pytest.fail(f"{cc} not found: .ci/run installs it (Debian packages build-essential and clang)")
    for name in _sources():
        if name.endswith(".c"):
            p = subprocess.run([cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE", "-fsyntax-only",
                                "-I" + EXT, "-I" + sysconfig.get_paths()["include"], os.path.join(EXT, name)],
                               capture_output=True, text=True, timeout=120)
            assert p.returncode == 0, (cc, name, p.stderr[:2000])


def test_the_tool_id_life_is_written_once():
    """Taking, registering on and freeing a sys.monitoring tool id is ocular/_toolid.py's alone: the tracer,
    the report's settling and the USDT poller (usdt.c, through the module) all go through it."""
    pkg = os.path.dirname(EXT)
    calls = re.compile(r"\.(use_tool_id|free_tool_id|clear_tool_id)\(|\"(use_tool_id|free_tool_id|clear_tool_id)\",")
    found = {}
    for root, _, files in os.walk(pkg):
        for f in files:
            if f.endswith((".py", ".c")):
                path = os.path.join(root, f)
                text = open(path, encoding="utf-8").read()
                if f.endswith(".py"):
                    text = re.sub(r"#[^\n]*", "", text)  # (comments name them)
                n = len(calls.findall(text))
                if n:
                    found[os.path.relpath(path, pkg)] = n
    assert found.pop("_toolid.py") >= 3  # (the rule is not checked against nothing)
    assert not found, found
    assert '"ocular._toolid"' in open(os.path.join(EXT, "usdt.c"), encoding="utf-8").read()


def test_no_module_writes_another_modules_globals():
    """The command line and --follow's boot set what they need through ocular._configure() (its settings
    object), never by assigning to or mutating ocular's module globals."""
    pkg = os.path.dirname(EXT)
    write = re.compile(r"\bocular\._\w+(\.\w+)*\s*(=(?!=)|\+=|-=)|\bocular\._\w+\.(add|update|append|extend|clear)\(")
    found = {}
    for f in sorted(os.listdir(pkg)):
        if f.endswith(".py") and f != "__init__.py":
            hits = [ln.strip() for ln in open(os.path.join(pkg, f), encoding="utf-8") if write.search(ln)]
            if hits:
                found[f] = hits
    assert not found, found


UTILITIES = ("out.c", "thread.c", "deflate.c")  # (shared by both sides: the output file, own threads, deflate)


def _objects(tmp_path):
    """[(C file, symbols its object defines, symbols it leaves undefined)] (nm)."""
    import sysconfig
    from concurrent.futures import ThreadPoolExecutor

    def compile_one(name):
        obj = tmp_path / (name[:-2] + ".o")
        p = subprocess.run(["gcc", "-std=c11", "-O2", "-D_GNU_SOURCE", "-fvisibility=hidden", "-c", "-I" + EXT,
                            "-I" + sysconfig.get_paths()["include"], os.path.join(EXT, name), "-o", str(obj)],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, (name, p.stderr[:2000])
        out = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
        defined, used = set(), set()
        for ln in out.splitlines():
            parts = ln.split()
            if len(parts) >= 2 and parts[-2] == "U":
                used.add(parts[-1])
            elif len(parts) == 3 and parts[1] in "TDBRCVW":
                defined.add(parts[2])
        return name, defined, used

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        return list(ex.map(compile_one, [f for f in _sources() if f.endswith(".c")]))


@pytest.fixture(scope="module")
def c_objects(tmp_path_factory):
    """_objects, built once for the tests of this module that read the objects' symbols."""
    return _objects(tmp_path_factory.mktemp("objects"))


def _symbol_graph(objs):
    """{file: {file it uses a symbol of: [symbols]}} from each C file's object (_objects); symbols that no
    file of ours defines (libc, libpython) are left out."""
    owner = {sym: name for name, defined, _ in objs for sym in defined}
    graph = {}
    for name, _, used in objs:
        edges = graph.setdefault(name, {})
        for sym in sorted(used):
            if sym in owner and owner[sym] != name:
                edges.setdefault(owner[sym], []).append(sym)
    return graph


@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("nm")), reason="gcc and nm (Debian: build-essential)")
def test_the_c_files_depend_on_each_other_without_a_cycle(c_objects):
    """By the symbols each C file's object uses from the others: no cycle (the driver calls the live render
    through what it registers, the recorder asks the renderer through the session's hooks, and the shared
    state -- sess, rmeta, rstate -- lives in leaf files); no render-side file uses a record-side one; and the
    record side reaches the render side only from the binding (module.c, results.c) and through utilities."""
    graph = _symbol_graph(c_objects)
    assert len(graph) > 25 and sum(map(len, graph.values())) > 60, graph  # (the rule is not checked against nothing)
    # Tarjan's strongly connected components: any of more than one file is a cycle
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            sccs.append(scc)

    for v in graph:
        if v not in index:
            visit(v)
    cycles = [sorted(s) for s in sccs if len(s) > 1]
    assert not cycles, {tuple(c): {a: {b: s[:4] for b, s in graph[a].items() if b in c} for a in c} for c in cycles}
    render = {f for f in RENDER_SIDE if f.endswith(".c")}
    upward = {a: {b: s[:4] for b, s in graph[a].items() if b not in render}
              for a in render if any(b not in render for b in graph[a])}
    assert not upward, upward
    into_render = {a: sorted(b for b in graph[a] if b in render and b not in UTILITIES)
                   for a in graph if a not in render}
    assert {a: b for a, b in into_render.items() if b} .keys() <= {"module.c", "results.c"}, into_render


@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("nm")), reason="gcc and nm (Debian: build-essential)")
def test_each_record_side_header_declares_what_its_unit_defines(c_objects):
    """Headers by owner: every function and variable a unit header declares (not the static inline ones) is
    defined by the C file of its name (binding.h: module.c's units), and each is included through ocular.h."""
    defined = {name: d for name, d, _ in c_objects}
    decl = re.compile(r"^(?!static|typedef|#|\s|/\*|\})[^;(]*?\b(oc_\w+|sess)\s*(\(|;|\[)", re.M)
    wrong, counted = {}, 0
    for header, owners in UNIT_HEADERS.items():
        src = open(os.path.join(EXT, header), encoding="utf-8").read()
        if header != "codemap.h":
            assert '#error "' + header + ' is included through ocular.h"' in src, header
        names = {m[0] for m in decl.findall(src)}
        counted += len(names)
        home = set().union(*(defined[o] for o in owners))
        stray = sorted(n for n in names if n not in home)
        if stray:
            wrong[header] = {n: [f for f, d in defined.items() if n in d] for n in stray}
    assert counted > 60, counted  # (the rule is not checked against nothing)
    assert not wrong, wrong
