"""File filters: include_only / exclude (substring or fnmatch glob against the whole file name),
Ocular's own package always excluded, excluded code switched off rather than filtered per event, and
file / function names that are not valid UTF-8 or need JSON escaping.

Each scenario runs in a fresh interpreter (run_py) that imports small modules written to tmp_path.
Test names avoid the substrings "mod_a"/"mod_b" because the pytest tmp_path contains the test name
and substring patterns match against the whole path.
"""

import json
import os
import textwrap

import pytest

from conftest import SRC, check_balanced, load_trace, names, run_py

OCULAR_DIR = os.path.join(SRC, "ocular") + os.sep

MODULES = {
    "mod_a.py": """
        def alpha_main():
            return alpha_leaf(1) + alpha_leaf(2)

        def alpha_leaf(x):
            return x * 2

        def alpha_from_beta(x):
            return x + 1

        def alpha_drive(n):
            import mod_b
            t = 0
            for i in range(n):
                t += mod_b.beta_hot(i)
            return t
        """,
    "mod_b.py": """
        import mod_a

        def beta_main():
            return beta_leaf(3)

        def beta_leaf(x):
            return x - 1

        def beta_calls_alpha():
            return mod_a.alpha_from_beta(5) + beta_leaf(1)

        def beta_hot(i):
            return i & 7

        def beta_loop(n):
            t = 0
            for i in range(n):
                t += beta_hot(i)
            return t
        """,
    "mod_cc.py": """
        def gamma_main():
            return gamma_leaf(4)

        def gamma_leaf(x):
            return x
        """,
}

ALPHA = {"alpha_main", "alpha_leaf", "alpha_from_beta"}
BETA = {"beta_main", "beta_leaf", "beta_calls_alpha"}
GAMMA = {"gamma_main", "gamma_leaf"}

DRIVER = """
    import json, sys
    import ocular
    moddir, out, kwargs, hot, drive = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    sys.path.insert(0, moddir)
    import mod_a, mod_b, mod_cc
    ocular.start_tracing(output=out, **kwargs)
    mod_a.alpha_main()
    mod_b.beta_main()
    mod_cc.gamma_main()
    json.dumps({"k": [1, 2]})  # some standard library code
    mod_b.beta_calls_alpha()
    if hot:
        mod_b.beta_loop(hot)
    if drive:
        mod_a.alpha_drive(drive)
    res = ocular.stop_tracing()
    print(json.dumps({k: res[k] for k in ("events", "dropped", "internal_error")}))
"""


@pytest.fixture
def moddir(tmp_path):
    d = tmp_path / "mods"
    d.mkdir()
    for name, src in MODULES.items():
        (d / name).write_text(textwrap.dedent(src))
    return str(d)


def run_traced(moddir, tmp_path, hot=0, drive=0, **kwargs):
    out = str(tmp_path / "trace.json")
    p = run_py(DRIVER, moddir, out, json.dumps(kwargs), str(hot), str(drive))
    res = json.loads(p.stdout.strip().splitlines()[-1])
    data = load_trace(out)
    check_balanced(data["traceEvents"])
    return data["traceEvents"], res


def traced_files(events):
    return {e["args"]["file"] for e in events if e["ph"] in ("B", "i") and "args" in e}


def assert_no_ocular_code(events):
    for e in events:
        if e["ph"] in ("B", "i"):
            f = e.get("args", {}).get("file", "")
            assert not f.startswith(OCULAR_DIR), f"ocular's own code was traced: {e}"
    assert not {"start_tracing", "stop_tracing", "_release_tool", "_register", "is_tracing"} & set(names(events))


def test_no_filter_traces_everything_but_ocular(moddir, tmp_path):
    events, res = run_traced(moddir, tmp_path)
    got = set(names(events))
    assert ALPHA | BETA | GAMMA <= got
    assert "dumps" in got  # the standard library is traced by default
    assert res["events"] > 0
    assert_no_ocular_code(events)


def test_include_only_substring(moddir, tmp_path):
    events, res = run_traced(moddir, tmp_path, include_only=["mod_a"])
    got = set(names(events))
    assert got == ALPHA  # alpha_from_beta is reached through excluded mod_b code
    files = traced_files(events)
    assert files == {os.path.join(moddir, "mod_a.py")}
    assert_no_ocular_code(events)


def test_include_only_several_patterns(moddir, tmp_path):
    events, _ = run_traced(moddir, tmp_path, include_only=["mod_cc", "mod_a.py"])
    assert set(names(events)) == ALPHA | GAMMA


def test_exclude_substring(moddir, tmp_path):
    events, _ = run_traced(moddir, tmp_path, exclude=["mod_b"])
    got = set(names(events))
    assert not any(n.startswith("beta") for n in got)
    assert not any(f.endswith("mod_b.py") for f in traced_files(events))
    # everything else still traced, including the mod_a function that excluded code calls
    assert ALPHA | GAMMA <= got
    assert "dumps" in got
    assert_no_ocular_code(events)


def test_excluded_caller_included_callee(moddir, tmp_path):
    events, _ = run_traced(moddir, tmp_path, exclude=["mod_b"])
    # beta_calls_alpha (excluded) -> alpha_from_beta (included): exactly one slice, properly closed
    assert names(events).count("alpha_from_beta") == 1
    assert names(events, "B").count("alpha_from_beta") == 1
    slices = [s for th in check_balanced(events).values() for s in th if s[0] == "alpha_from_beta"]
    assert len(slices) == 1 and slices[0][2] >= slices[0][1]


def test_include_and_exclude_combined(moddir, tmp_path):
    events, _ = run_traced(moddir, tmp_path, include_only=["*mod_?.py"], exclude=["mod_b"])
    assert set(names(events)) == ALPHA


def test_glob_include(moddir, tmp_path):
    events, _ = run_traced(moddir, tmp_path, include_only=["*mod_?.py"])
    got = set(names(events))
    assert got == ALPHA | BETA  # mod_cc.py does not match mod_?.py; stdlib and <string> do not either
    assert traced_files(events) == {os.path.join(moddir, "mod_a.py"), os.path.join(moddir, "mod_b.py")}


def test_glob_matches_whole_name(moddir, tmp_path):
    # a glob is matched with fnmatch against the whole file name, not searched for as a substring
    events, res = run_traced(moddir, tmp_path, include_only=["mod_?.py"])
    assert names(events) == []
    events, res = run_traced(moddir, tmp_path, include_only=[os.path.join(moddir, "mod_[a].py")])
    assert set(names(events)) == ALPHA


def test_glob_exclude(moddir, tmp_path):
    events, _ = run_traced(moddir, tmp_path, exclude=["*/mod_?.py"])
    got = set(names(events))
    assert not (ALPHA | BETA) & got
    assert GAMMA <= got and "dumps" in got


@pytest.mark.parametrize("include", [["ocular"], [OCULAR_DIR], ["*ocular*"], ["*"]])
def test_ocular_never_traced_even_when_included(moddir, tmp_path, include):
    events, _ = run_traced(moddir, tmp_path, include_only=include, mode="precise", deinstrument_threshold=0)
    assert_no_ocular_code(events)
    if include == ["*"]:
        assert ALPHA | BETA | GAMMA <= set(names(events))


def test_ocular_not_traced_from_cli(moddir, tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {moddir!r})\n"
        "import mod_a\n"
        "def prog_main():\n    return mod_a.alpha_main()\n"
        "prog_main()\n")
    out = tmp_path / "cli.json"
    run_py("import runpy, sys; sys.argv[0] = 'ocular'; runpy.run_module('ocular', run_name='__main__')",
           "--threshold", "0", "-o", str(out), str(script))
    events = load_trace(str(out))["traceEvents"]
    check_balanced(events)
    assert {"prog_main", "alpha_main", "alpha_leaf"} <= set(names(events))
    assert_no_ocular_code(events)
    assert "main" not in names(events)  # ocular.__main__.main is on the stack the whole time


def test_excluded_hot_function_costs_no_events(moddir, tmp_path):
    # 100000 calls of an excluded function from an excluded loop: no event at all for them
    events, res = run_traced(moddir, tmp_path, hot=100_000, exclude=["mod_b"])
    assert "beta_hot" not in names(events)
    assert "beta_loop" not in names(events)
    assert names(events).count("alpha_from_beta") == 1
    assert res["events"] < 1000, res
    assert res["dropped"] == 0


def test_excluded_hot_function_called_from_included_loop(moddir, tmp_path):
    # the loop is in included code (its jumps are de-instrumented after the threshold); the
    # 100000 calls go to excluded code and must not produce events
    events, res = run_traced(moddir, tmp_path, drive=100_000, exclude=["mod_b"], deinstrument_threshold=100)
    assert "beta_hot" not in names(events)
    assert names(events).count("alpha_drive") == 1
    # 100 iterations' jumps, then the loop's instruction probe (100 more of each of its ~10 instructions);
    # 100,000 excluded calls would be far more
    assert res["events"] < 2000, res


def test_excluded_with_threshold_zero(moddir, tmp_path):
    # threshold 0 (trace everything, never de-instrument) still never traces excluded code
    events, res = run_traced(moddir, tmp_path, hot=100_000, exclude=["mod_b"], deinstrument_threshold=0,
                             mode="precise")
    assert not any(n.startswith("beta") for n in names(events))
    assert not any(f.endswith("mod_b.py") for f in traced_files(events))
    assert res["events"] < 5000, res


WEIRD = r"""
    import json, os, sys
    import ocular
    out, incl = sys.argv[1], json.loads(sys.argv[2])
    fname = os.path.join(os.path.dirname(out), b"\xff\xfe.py".decode("utf-8", "surrogateescape"))
    src = "def weird_func(x):\n    return x * 2\n\ndef odd_named(x):\n    return x + 1\n"
    ns = {}
    exec(compile(src, fname, "exec"), ns)
    # JSON-hostile names: quote, backslash, control characters, a lone surrogate
    odd = ns["odd_named"]
    odd.__code__ = odd.__code__.replace(co_qualname='q"uo\\te\n\t\x01\x7f\udcff',
                                        co_filename=fname[:-3] + '"\\\n.py')
    ocular.start_tracing(output=out, include_only=incl or None, deinstrument_threshold=0)
    for i in range(3):
        ns["weird_func"](i)
        odd(i)
    res = ocular.stop_tracing()
    print(json.dumps({"events": res.events, "internal_error": res.get("internal_error")}))
"""


def test_non_utf8_file_name_and_odd_names(tmp_path):
    out = tmp_path / "trace.json"
    p = run_py(WEIRD, str(out), "[]")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["events"] > 0
    assert not res["internal_error"], res
    assert "Traceback" not in p.stderr and "ocular: " not in p.stderr, p.stderr
    with open(out, "rb") as f:
        raw = f.read()
    raw.decode("utf-8")  # strictly valid UTF-8
    data = load_trace(str(out))  # and valid JSON
    events = data["traceEvents"]
    check_balanced(events)
    assert names(events).count("weird_func") == 3
    weird = [e for e in events if e["ph"] == "B" and e["name"] == "weird_func"]
    assert all(e["args"]["file"].startswith(str(tmp_path)) and e["args"]["file"].endswith(".py") for e in weird)
    odd = [e for e in events if e["ph"] == "B" and e["name"].startswith('q"uo\\te\n\t\x01\x7f')]
    assert len(odd) == 3, names(events)
    assert all(e["args"]["file"].endswith('"\\\n.py') for e in odd)


def test_non_utf8_file_name_glob_filter(tmp_path):
    out = tmp_path / "trace.json"
    run_py(WEIRD, str(out), json.dumps([os.path.join(str(tmp_path), "*.py")]))
    events = load_trace(str(out))["traceEvents"]
    check_balanced(events)
    assert names(events).count("weird_func") == 3


def test_non_utf8_file_name_pattern_matches(tmp_path):
    out = tmp_path / "trace.json"
    pattern = b"\xff\xfe".decode("utf-8", "surrogateescape")
    run_py(WEIRD, str(out), json.dumps([pattern]))
    events = load_trace(str(out))["traceEvents"]
    assert names(events).count("weird_func") == 3


def test_code_excluded_in_one_session_is_traced_in_the_next(moddir, tmp_path):
    code = """
        import json, sys
        import ocular
        sys.path.insert(0, sys.argv[1])
        import mod_b
        out = sys.argv[2]
        ocular.start_tracing(output=out + ".1.json", exclude=["mod_b"])
        mod_b.beta_main()
        ocular.stop_tracing()
        ocular.start_tracing(output=out + ".2.json")
        mod_b.beta_main()
        ocular.stop_tracing()
    """
    out = str(tmp_path / "t")
    run_py(code, moddir, out)
    assert "beta_main" not in names(load_trace(out + ".1.json")["traceEvents"])
    assert {"beta_main", "beta_leaf"} <= set(names(load_trace(out + ".2.json")["traceEvents"]))
