"""The user's program first (issue 17): `python -m ocular` records from the program's first line (its
runner's frames never appear), the report ranks the user's code and folds the standard library,
frozen importlib, site-packages and Ocular into one line each, and the command line behaves as a shell
user expects (--version, ^C, missing modules, the script as output, closed pipes, clean names)."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, SRC, check_balanced, is_ocular_file, load_trace, python_cmd

SCRIPT = """
import json, re
def parse(n):
    t = 0
    for i in range(n):
        t += len(re.findall(r"[0-9]+", f"a{i}b{i * 2}"))
    return t
def main():
    for _ in range(3):
        parse(300)
    json.dumps({"a": list(range(100))})
main()
"""


def cli(args, cwd, env=None, **kw):
    e = env or dict(os.environ, PYTHONPATH=SRC)
    return subprocess.run([*python_cmd(), "-m", "ocular", *args], cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=120, **kw)


@pytest.fixture
def script(tmp_path):
    p = tmp_path / "prog.py"
    p.write_text(SCRIPT)
    return p


def test_the_runner_is_never_recorded(tmp_path):
    (tmp_path / "hello.py").write_text("print('hello')\n")
    p = cli(["--threshold", "0", "-o", "t.json", "hello.py"], tmp_path)
    assert p.returncode == 0 and p.stdout == "hello\n", p.stderr
    ev = load_trace(tmp_path / "t.json")["traceEvents"]
    files = {e["args"]["file"] for e in ev if e["ph"] == "B"}
    assert files == {str(tmp_path / "hello.py"), "~"}, files  # no runpy, pkgutil, importlib, typing: the program (and print)
    # -m and -c too
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "tool.py").write_text("import sys\ndef go():\n    print(__name__, sys.argv[1:])\ngo()\n")
    p = cli(["--threshold", "0", "-o", "m.json", "-m", "pkg.tool", "x"], tmp_path)
    assert p.returncode == 0 and p.stdout == "__main__ ['x']\n", p.stderr
    ev = [e for e in load_trace(tmp_path / "m.json")["traceEvents"] if e["ph"] == "B"]
    # the package's import is the program's (python -m imports it first): its __init__, through importlib as
    # an import in the program shows; runpy's lookup is not
    pkg_files = {str(tmp_path / "pkg" / "__init__.py"), str(tmp_path / "pkg" / "tool.py")}
    assert [e["name"] for e in ev if e["args"]["file"] in pkg_files] == ["<module>", "<module>", "go"], ev
    files = {e["args"]["file"] for e in ev}
    assert "<frozen importlib._bootstrap>" in files and not [f for f in files if "runpy" in os.path.basename(f) or is_ocular_file(f)], files
    p = cli(["--threshold", "0", "-o", "c.json", "-c", "def f(): pass\nf()"], tmp_path)
    assert [e["name"] for e in load_trace(tmp_path / "c.json")["traceEvents"] if e["ph"] == "B"] == ["<module>", "f"]
    # C functions are their own slices, named as cProfile names them
    p = cli(["--threshold", "0", "-o", "b.json", "-c", "import time\ndef f(): time.sleep(0.001); len('ab')\nf()"],
            tmp_path)
    names = [e["name"] for e in load_trace(tmp_path / "b.json")["traceEvents"] if e["ph"] == "B"]
    assert names == ["<module>", "f", "<built-in method time.sleep>", "<built-in method builtins.len>"], names
    p = cli(["--threshold", "0", "--no-c-functions", "-o", "n.json", "-c", "import time\ndef f(): time.sleep(0)\nf()"],
            tmp_path)
    assert [e["name"] for e in load_trace(tmp_path / "n.json")["traceEvents"] if e["ph"] == "B"] == ["<module>", "f"]


def test_report_ranks_the_users_code_and_folds_the_rest(tmp_path, script):
    p = cli(["-o", "t.json", str(script)], tmp_path)
    assert p.returncode == 0, p.stderr
    err = p.stderr
    head, _, rest = err.partition("Your code")
    assert "events" in head and "dropped" in head and "traced " in head
    rows = rest.split("\n\n")[0].splitlines()[2:]
    user_rows = [r for r in rows if "prog.py" in r]
    assert user_rows and rows[0] == user_rows[0]  # the user's functions come first
    assert not any("re/__init__.py" in r for r in rows)
    # where the rest goes: one line per kind of code, the biggest packages named
    where = head.split("Where the time goes (self time)\n", 1)[1].split("\n\n")[0].splitlines()
    assert any("standard library (" in r and "%" in r for r in where) and any("your code (" in r for r in where), where
    loops = re.findall(r"^Hot loop (\S+) at (\S+)", err, re.M)
    assert loops and "prog.py:" in loops[0][1], loops  # the user's own loops first
    assert 0 < len(loops) <= 3 * 2
    # --all ranks everything; --top and --sort change the table; --report writes a file
    p = cli(["-o", "t.json", "--all", "--top", "3", "--sort", "calls", "--loops", "1", "--report", "rep.txt",
             str(script)], tmp_path)
    assert p.returncode == 0 and "Hot loop" not in p.stderr
    rep = (tmp_path / "rep.txt").read_text()
    assert "Functions (by calls)" in rep and "folded" not in rep
    table = rep.split("Functions (by calls)")[1].split("\n\n")[0].splitlines()[2:]
    # (a row's notes, "^ ...", follow it when sampling windows moved time: not rows)
    calls = [int(r.split()[0].replace(",", "").lstrip("~>")) for r in table if r.strip() and not r.strip().startswith(("...", "^", "("))]
    assert len(calls) == 3 and calls == sorted(calls, reverse=True)
    assert len(re.findall(r"^Hot loop ", rep, re.M)) <= 2


def test_version_and_command_line_errors(tmp_path, script):
    import ocular

    p = cli(["--version"], tmp_path)
    assert p.returncode == 0 and p.stdout.startswith(f"ocular {ocular.__version__} ")
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        assert f'version = "{ocular.__version__}"' in f.read()
    # a module or script that cannot be found: the error line and nothing else
    for args, what in ((["-m", "no_such_module_xyz"], "no_such_module_xyz"), (["missing.py"], "missing.py")):
        p = cli(args, tmp_path)
        assert p.returncode == 2 and p.stdout == "", p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and what in lines[0] and lines[0].count("ocular:") == 1, p.stderr
    # -o naming the script itself is refused before the script runs
    p = cli(["-o", str(script), str(script)], tmp_path)
    assert p.returncode == 2 and "is the script being run" in p.stderr
    assert script.read_text() == SCRIPT
    # one ocular: prefix, naming the user's path
    p = cli(["-o", "nodir/t.json", str(script)], tmp_path)
    assert p.returncode == 2 and p.stderr.count("ocular:") == 1 and "nodir" in p.stderr, p.stderr
    assert ".tmp" not in p.stderr


def test_ctrl_c_dies_of_sigint_after_saving(tmp_path):
    """As Python ends a program interrupted by ^C: killed by SIGINT once finalized (a shell loop running
    it stops; an exit status of 130 would let it go on), after the trace is saved."""
    import signal

    (tmp_path / "k.py").write_text("def spin():\n    raise KeyboardInterrupt\nspin()\n")
    p = cli(["--threshold", "0", "-o", "t.json", "k.py"], tmp_path)
    assert p.returncode == -signal.SIGINT, p.stderr
    assert p.stderr.count("\nKeyboardInterrupt\n") == 1, p.stderr  # reported once
    assert "KeyboardInterrupt" in p.stderr
    names = [e["name"] for e in load_trace(tmp_path / "t.json")["traceEvents"] if e["ph"] == "B"]
    assert "spin" in names


def test_trace_saved_when_stderr_is_a_closed_pipe(tmp_path, script):
    e = dict(os.environ, PYTHONPATH=SRC)
    cmd = " ".join([*python_cmd(), "-m", "ocular", "-o", "t.json", str(script)])
    p = subprocess.run(f"{cmd} 2>&1 | head -1", shell=True, cwd=tmp_path, env=e, capture_output=True, text=True,
                       timeout=120)
    assert p.stdout.startswith("ocular report")
    data = load_trace(tmp_path / "t.json")
    check_balanced(data["traceEvents"])
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_process_and_thread_names_have_no_control_characters(tmp_path):
    code = "import threading\ndef f(): pass\nt = threading.Thread(target=f, name='a\\nb\\tc')\nt.start(); t.join()\nf()"
    p = cli(["--threshold", "0", "-o", "t.json", "-c", code, "x\ny"], tmp_path)
    assert p.returncode == 0, p.stderr
    meta = [e for e in load_trace(tmp_path / "t.json")["traceEvents"] if e["ph"] == "M"]
    names = [e["args"]["name"] for e in meta if e["name"] in ("process_name", "thread_name")]
    assert names and all(not any(ord(ch) < 32 for ch in n) for n in names), names
    assert "a b c" in names


def test_tree_shows_the_call_tree_with_totals(tmp_path, script):
    p = cli(["--tree", "--loops", "0", "-o", "t.json", str(script)], tmp_path)
    assert p.returncode == 0, p.stderr
    tree = p.stderr.split("Call tree\n", 1)[1].splitlines()
    mod = next(i for i, ln in enumerate(tree) if ln.strip().endswith("prog.py:1)") and "<module>" in ln)
    main = next(i for i, ln in enumerate(tree) if " main  (" in ln and "prog.py" in ln)
    parse = next(i for i, ln in enumerate(tree) if " parse  (" in ln and "prog.py" in ln)
    indent = lambda ln: len(ln) - len(ln.lstrip())
    assert mod < main < parse and indent(tree[mod]) < indent(tree[main]) < indent(tree[parse])
    assert tree[parse].split()[2] == "3"  # parse was called 3 times


def test_tree_goes_with_the_report_into_its_file(tmp_path, script):
    """--report FILE takes the call tree too (it went to stderr, the report into the file)."""
    p = cli(["--tree", "--report", "r.txt", "-o", "t.json", str(script)], tmp_path)
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "r.txt").read_text()
    assert "Call tree" not in p.stderr, p.stderr
    assert text.index("parse") < text.index("Call tree\n")  # the report first, then its tree
    assert any(" parse  (" in ln for ln in text.split("Call tree\n", 1)[1].splitlines())


def test_convert_shapes_its_report_as_the_runner_does(tmp_path, script):
    """A kept recording gets the report a run would have printed: --top, --sort, --tree and a file
    (--report-file); a .ocular output with report options says that it makes no report."""
    p = cli(["-q", "-o", "r.ocular", "--report-json", "--report", "ignored.json", str(script)], tmp_path)
    assert p.returncode == 0 and "no report is made" in p.stderr, p.stderr
    assert not (tmp_path / "ignored.json").exists()
    p = cli(["convert", "r.ocular", "-q", "-o", "t.json", "--top", "1", "--sort", "calls", "--tree",
             "--report-file", "rep.txt"], tmp_path)
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "rep.txt").read_text()
    assert "Your code (by calls)" in text and "Call tree\n" in text, text
    mine = text.split("Your code (by calls)", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert mine[0].split()[0] == "3" and " parse  prog.py:" in mine[0], mine  # the one row asked for: parse, 3 calls
    assert " main  prog.py" not in text.split("Hot loops", 1)[0] and "--top N shows more" in text, text


def test_several_outputs_report_the_specialized_instructions(tmp_path, script):
    """Several -o: the session keeps a recording and renders it into each output once the program is
    done, in the same process: the report's hot loops still show the specialized instructions and their
    arguments (names, jump targets), as a single output's report at stop does -- not the recorded base
    opcodes and raw arguments that a recording rendered elsewhere shows."""
    def loops(*outputs):
        args = [a for o in outputs for a in ("-o", o)]
        p = cli(["-q", *args, "--report-json", "--report", "rep.json", str(script)], tmp_path)
        assert p.returncode == 0, p.stderr
        rep = json.loads((tmp_path / "rep.json").read_text())
        mine = [lp for lp in rep["loops"] if lp["file"] == str(script)]  # (the program's: the same each run)
        return {(lp["function"], lp["offset"]): [(r["offset"], r["base"], r["arg"]) for r in lp["rows"]]
                for lp in mine}, mine

    one, _ = loops("one.json")
    several, raw = loops("a.json", "a.pftrace")
    assert several == one and len(one) == 2, (several, one)  # (parse's loop and main's)
    rows = [r for lp in raw for r in lp["rows"]]
    assert any(r["specialized"] != r["base"] for r in rows), rows  # (specialized forms, from the live code)
    assert any(r["arg"].startswith("to ") for r in rows) and any(r["arg"] == "i" for r in rows), rows


def test_a_recording_converted_in_another_process_reports_specialized_instructions(tmp_path, script):
    """-o run.ocular, then convert in another process: the recording keeps, after its END, the specialized
    bytecode and argument names of the live code objects with loops (an ADAPTIVE block), so the report's
    hot loops have the rows a report at stop has: offsets, lines, base and specialized instructions,
    arguments.  Without the block (cut off) they are the recorded base opcodes and raw arguments."""
    from ocular import _adaptive

    def rows(rep):
        mine = [lp for lp in rep["loops"] if lp["file"] == str(script)]
        return {(lp["function"], lp["offset"]): [(r["offset"], r["line"], r["base"], r["specialized"], r["arg"])
                                                 for r in lp["rows"]] for lp in mine}

    # (two runs compared: without sampling windows, whose restart_events() re-instruments the code and
    # sends its specialized instructions back through warm-up, so that a run's last window decides
    # whether a CALL is CALL_PY_EXACT_ARGS at stop)
    e = dict(os.environ, PYTHONPATH=SRC, OCULAR_SAMPLING="0")
    p = cli(["-q", "-o", "t.json", "--report-json", "--report", "live.json", str(script)], tmp_path, env=e)
    assert p.returncode == 0, p.stderr
    live = rows(json.loads((tmp_path / "live.json").read_text()))
    p = cli(["-q", "-o", "run.ocular", str(script)], tmp_path, env=e)
    assert p.returncode == 0, p.stderr
    assert _adaptive.block_offset(tmp_path / "run.ocular") is not None
    p = cli(["convert", "run.ocular", "-q", "-o", "c.json", "--report-json", "--report-file", "conv.json"], tmp_path)
    assert p.returncode == 0, p.stderr
    conv = rows(json.loads((tmp_path / "conv.json").read_text()))
    assert conv == live and len(live) == 2, (conv, live)
    flat = [r for lp in conv.values() for r in lp]
    assert any(r[2] != r[3] for r in flat) and any(r[4] == "i" for r in flat), flat
    # the same recording without its ADAPTIVE block: the recorded base opcodes, raw arguments
    data = (tmp_path / "run.ocular").read_bytes()
    (tmp_path / "cut.ocular").write_bytes(data[:_adaptive.block_offset(tmp_path / "run.ocular")])
    p = cli(["convert", "cut.ocular", "-q", "-o", "d.json", "--report-json", "--report-file", "cut.json"], tmp_path)
    assert p.returncode == 0, p.stderr
    cut = rows(json.loads((tmp_path / "cut.json").read_text()))
    assert cut.keys() == live.keys()
    flat = [r for lp in cut.values() for r in lp]
    assert all(r[2] == r[3] for r in flat) and not any(r[4] == "i" for r in flat), flat
    assert {k: [r[:3] for r in lp] for k, lp in cut.items()} == {k: [r[:3] for r in lp] for k, lp in live.items()}


LIVE = """
import json, os, shutil, sys
import ocular
def parse(n):
    t = 0
    for i in range(n):
        t += len(str(i))
    return t
def loops_of(rep):
    return [lp for lp in rep.to_dict()["loops"] if lp["function"] == "parse"]
def specialized(result):
    rep = result["report"]
    assert loops_of(rep), "parse's loop is missing"
    return any(r["specialized"] != r["base"] for lp in loops_of(rep) for r in lp["rows"])
out = {}
ocular.start_tracing(output="a.ocular", report=False)
parse(3000)
ocular.stop_tracing()
shutil.copyfile("a.ocular", "copy.ocular")
out["copy"] = specialized(ocular.convert("copy.ocular", "copy.json"))  # (another file: not the session's)
out["same"] = specialized(ocular.convert("a.ocular", "a.json"))
out["again"] = specialized(ocular.convert("a.ocular", "a2.json"))  # (the first convert freed the table)
ocular.start_tracing(output="b.ocular", report=False)
parse(3000)
ocular.stop_tracing()
os.replace("copy.ocular", "b.ocular")  # (the file at that path is not the one the session wrote)
out["replaced"] = specialized(ocular.convert("b.ocular", "b.json"))
with open("a.ocular", "rb") as f:  # without the ADAPTIVE block: only the live code objects have them
    data = f.read()
from ocular import _adaptive
with open("cut.ocular", "wb") as f:
    f.write(data[:_adaptive.block_offset("a.ocular")])
ocular.start_tracing(output="c.ocular", report=False)
parse(3000)
ocular.stop_tracing()
os.replace("cut.ocular", "c2.ocular")
out["cut"] = specialized(ocular.convert("c2.ocular", "c2.json"))
print(json.dumps(out))
"""


def test_a_recording_converted_in_its_own_process_reports_specialized_instructions(tmp_path):
    """start_tracing(output="x.ocular") then convert() of that file in the same process: the report's loops
    show specialized instructions, from the live code objects (the session's code table is kept for the
    first convert, before another session starts) or from the recording's ADAPTIVE block (a copy, a second
    convert, another file at the same path); a recording without the block, and not the session's own, has
    the recorded base opcodes."""
    prog = tmp_path / "live.py"
    prog.write_text(LIVE)
    p = subprocess.run([*python_cmd(), str(prog)], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=SRC),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {"copy": True, "same": True, "again": True, "replaced": True, "cut": False}, (got, p.stderr)


def _other_python():
    """An interpreter of another feature release than this one that imports Ocular from SRC (the repository's
    .venv-3.X, as `make build` makes them), or None."""
    for minor in (12, 13, 14, 15):
        if minor == sys.version_info[1]:
            continue
        exe = os.path.join(ROOT, f".venv-3.{minor}", "bin", "python")
        if os.path.exists(exe) and subprocess.run([exe, "-c", "import ocular._ocular"], env=dict(os.environ, PYTHONPATH=SRC),
                                                  capture_output=True, timeout=60).returncode == 0:
            return exe, minor
    return None


def test_convert_report_of_another_pythons_recording(tmp_path):
    """A recording made by another CPython version, converted with --report: its loops' rows are the recorded
    instructions (stepped with the recording's own cache sizes: the same offsets as that version's report), with
    their lines, no opcode name or argument (this interpreter's would be wrong), no block split, and a note saying
    why.  (They were stepped with this interpreter's cache sizes, or unit by unit as 'op93' rows.)"""
    from ocular import _report

    other = _other_python()
    if other is None:
        pytest.skip("no other CPython (3.12-3.15) with Ocular built, in the repository's .venv-3.X, to record with")
    exe, minor = other
    (tmp_path / "loop.py").write_text(textwrap.dedent("""
        def work(n):
            total = 0
            for i in range(n):
                if i % 3:
                    total += i * 2
                else:
                    total -= len(str(i))
            return total
        work(200000)
    """))
    env = dict(os.environ, PYTHONPATH=SRC)
    p = subprocess.run([exe, "-m", "ocular", "-q", "--no-report", "-o", "r.ocular", "loop.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    reports = {}
    for who, py in (("theirs", exe), ("ours", sys.executable)):
        p = subprocess.run([py, "-m", "ocular", "convert", "r.ocular", "-q", "-o", f"{who}.json", "--report-json",
                            "--report-file", f"{who}.rep"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        reports[who] = json.loads((tmp_path / f"{who}.rep").read_text())
    theirs = next(lp for lp in reports["theirs"]["loops"] if lp["function"] == "work")
    ours = next(lp for lp in reports["ours"]["loops"] if lp["function"] == "work")
    assert theirs["note"] is None and all(r["base"] for r in theirs["rows"]), theirs["rows"]
    assert any(r["base"] == "FOR_ITER" for r in theirs["rows"])
    assert [(r["offset"], r["line"]) for r in ours["rows"]] == [(r["offset"], r["line"]) for r in theirs["rows"]]
    assert all(r["base"] == r["specialized"] == r["arg"] == "" for r in ours["rows"]), ours["rows"]
    assert ours["note"].startswith(f"recorded on Python 3.{minor}, read by 3.{sys.version_info[1]}"), ours["note"]
    assert ours["iterations"] == theirs["iterations"]
    p = subprocess.run([sys.executable, "-m", "ocular", "convert", "r.ocular", "-q", "-o", "t.json", "--report"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert f"  note: recorded on Python 3.{minor}, read by " in p.stderr, p.stderr
    # which versions' bytecode is this interpreter's
    assert _report._same_bytecode(0x030C01F0, 0x030C05F0) and not _report._same_bytecode(0x030C01F0, 0x030E00F0)
    assert not _report._same_bytecode(0x030F00A1, 0x030F00A2) and _report._same_bytecode(0x030F00C1, 0x030F00F0)
    assert _report._version(0x030C01F0) == "3.12" and _report._version(0x030F00A2) == "3.15.0a2"


@pytest.mark.quiet  # (self times compared: another test's load beside it failed it at load average 7-13)
@pytest.mark.parametrize("mode", ["adaptive", "precise"])
def test_a_slow_call_in_a_loop_is_its_own_row_not_the_loops(tmp_path, mode):
    """Ground truth: the loop's time sits in one call (time.sleep, a C function). The report puts it on that
    call's row; no instruction or block of the loop is charged with it."""
    import ocular  # noqa: F401  (the package the subprocess runs must import)

    (tmp_path / "s.py").write_text(textwrap.dedent("""
        import time
        def work():
            t = 0
            big = [0] * 200000  # a costly way into the loop (~1 ms): its block ends at the loop header
            for i in range(30):
                t += i
                time.sleep(0.002)
                t -= 1
            return t
        work()
    """))
    # (a row is a mean over 30 iterations: one preemption of a few ms in an instruction, on a loaded machine,
    # lifts it past the bound; a run is tried up to three times, the sleeps' placement holds in every one)
    for attempt in range(3):
        p = cli(["--mode", mode, "--threshold", "0", "--report-json", "-o", "t.json", "s.py"], tmp_path)
        assert p.returncode == 0, p.stderr
        rep = json.loads(p.stderr[p.stderr.index("{"):p.stderr.rindex("}") + 1])
        f = {r["name"]: r for r in rep["functions"]}
        sleep, work = f["<built-in method time.sleep>"], f["work"]
        assert sleep["calls"] == 30 and sleep["self_ns"] >= 30 * 2e6 * 0.9
        (lp,) = [lp for lp in rep["loops"] if lp["function"] == "work"]
        per_iteration_sleep = sleep["self_ns"] / 30
        header = next(r for r in lp["rows"] if r["base"] == "FOR_ITER")
        if work["self_ns"] < 0.5 * sleep["self_ns"] and \
                all(r["ns"] is None or r["ns"] < 0.1 * per_iteration_sleep for r in lp["rows"]) and \
                (header["ns"] is None or header["ns"] < 0.05 * per_iteration_sleep):
            break
    # the loop's own time (and the list) excludes the call: were the sleeps in it, it would hold 60 ms or more
    # (a bound of half that: an 8 MB list's page faults took 27 ms on a machine busy reclaiming memory)
    assert work["self_ns"] < 0.5 * sleep["self_ns"], (work["self_ns"], sleep["self_ns"])
    assert all(r["ns"] is None or r["ns"] < 0.1 * per_iteration_sleep for r in lp["rows"]), \
        [(r["offset"], r["base"], r["ns"]) for r in lp["rows"]]
    # the loop header is charged with its own block, not with the way into the loop
    assert header["ns"] is None or header["ns"] < 0.05 * per_iteration_sleep, (header, per_iteration_sleep)


ALLOC = """
def work():
    t = 0
    for i in range(600):
        t += i
        if i % 7 == 0:
            t += 3
        big = [i] * 200000  # the cost: a large list built, and the previous one freed
        t -= len(big)
    t += 1
    return t
work()
"""


@pytest.mark.quiet  # (an instruction's cycles compared with the others': a preemption beside it moves them)
@pytest.mark.parametrize("mode,threshold", [("adaptive", 100), ("adaptive", 0), ("precise", 100)])
def test_a_large_allocation_in_a_loop_is_charged_to_its_line_and_instruction(tmp_path, mode, threshold):
    """Ground truth: the loop's time is in one line's instructions, none of them a call: building a
    200,000-element list (BINARY_OP) and freeing the previous one (STORE_FAST).  In adaptive mode its
    block's cycles must be split among its instructions (the instruction probe after the threshold, or
    at threshold 0 after a warm-up, whose iterations are then left out of the timings), not spread
    evenly; in precise mode no instruction is charged with the iterations that ran after the
    code's instruction recording ended (the last recorded JUMP_BACKWARD was).  Jump targets are offsets,
    specialized forms too."""
    (tmp_path / "a.py").write_text(ALLOC)
    line = ALLOC.splitlines().index(next(x for x in ALLOC.splitlines() if "big = [i]" in x)) + 1
    # (threshold 100: 100 iterations measure the blocks, the next 100 the instructions; the program runs
    # without a render thread beside it, so that a preemption is less likely to land in a cheap block)
    p = cli(["--mode", mode, "--threshold", str(threshold), "--report-json", "-o", "t.json", "a.py"], tmp_path,
            env=dict(os.environ, PYTHONPATH=SRC, OCULAR_LIVE_RENDER="0"))
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stderr[p.stderr.index("{"):p.stderr.rindex("}") + 1])
    (lp,) = [lp for lp in rep["loops"] if lp["function"] == "work"]
    assert lp["split"] == ("instructions" if mode == "precise" else "probe"), lp
    rows = [r for r in lp["rows"] if r["cycles"] is not None]
    hottest = max(rows, key=lambda r: r["cycles"])
    assert hottest["line"] == line and hottest["base"] in ("BINARY_OP", "STORE_FAST"), (hottest, lp["rows"])
    # the two instructions hold most of the loop's cycles (spread evenly over their block of 12, they
    # would hold 2/12 of it; the margin is for a preemption that lands in another instruction)
    cost = sum(r["cycles"] for r in rows if r["line"] == line and r["base"] in ("BINARY_OP", "STORE_FAST"))
    assert cost > 0.6 * sum(r["cycles"] for r in rows), lp["rows"]
    # nothing that runs every iteration is charged with the iterations after recording ended (the 500 of
    # them would add 5 iterations' cycles to one instruction; the rare `t += 3` is left out, as one
    # preemption in its ~15 executions can weigh as much)
    rare = line - 1
    assert all(r["cycles"] < 3 * lp["cycles_per_iteration"] for r in rows if r["line"] != rare), (
        lp["cycles_per_iteration"], lp["rows"])
    jumps = [r for r in lp["rows"] if r["base"] in ("FOR_ITER", "JUMP_BACKWARD")]
    assert len(jumps) == 2 and all(re.fullmatch(r"to \d+", r["arg"]) for r in jumps), jumps


def test_the_loop_header_is_not_charged_with_the_way_into_the_loop(tmp_path):
    """The block that enters a loop ends at its header too; the header's row shows its own block only
    (the bundled example's generator loop showed FOR_ITER at ~2,600 cycles in a 940-cycle iteration)."""
    p = cli(["--report-json", "-o", "t.json", os.path.join(ROOT, "examples", "primes.py")], tmp_path)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stderr[p.stderr.index("{"):p.stderr.rindex("}") + 1])
    (lp,) = [lp for lp in rep["loops"] if lp["function"] == "primes"]
    header = next(r for r in lp["rows"] if r["base"] == "FOR_ITER")
    assert header["cycles"] is not None and header["cycles"] < lp["cycles_per_iteration"], (header, lp)


def test_a_callers_self_time_names_its_deinstrumented_callees(tmp_path):
    """After the threshold a callee's calls are no longer measured and land in its caller's self time: the
    report says so, naming the callee, instead of passing it off as the caller's own work."""
    (tmp_path / "m.py").write_text(textwrap.dedent("""
        def child():
            return sum(range(50))
        def main():
            for _ in range(2000):
                child()
        main()
    """))
    p = cli(["--near-zero", "--threshold", "100", "--report-json", "-o", "t.json", "m.py"], tmp_path)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stderr[p.stderr.index("{"):p.stderr.rindex("}") + 1])
    f = {r["name"]: r for r in rep["functions"]}
    assert f["child"]["deinstrumented"] and [n for n in f["main"]["untraced_callees"] if not n.startswith("<")] == ["child"]
    # (without windows: with them, the first opening as soon as child is de-instrumented, the line gives
    # the estimate instead, "main's self time excludes ~... estimated as de-instrumented calls to child")
    p = cli(["--near-zero", "--threshold", "100", "--no-sampling", "-o", "t.json", "m.py"], tmp_path)
    assert "main's self time also holds the unmeasured calls it made to child" in p.stderr
    p = cli(["--threshold", "0", "--report-json", "-o", "t.json", "m.py"], tmp_path)
    rep = json.loads(p.stderr[p.stderr.index("{"):p.stderr.rindex("}") + 1])
    assert all(not r["untraced_callees"] for r in rep["functions"])  # nothing de-instrumented: nothing said
