"""The command line's contract: what it refuses before the program runs (one 'error:' line naming the
cause, never a traceback or a temporary file's name), that no file it writes replaces another it reads or
writes, and that the program's arguments are split from ours as argparse reads ours."""

import json
import os
import subprocess
import sys

import pytest

import ocular
from conftest import run_py
from test_api import SRC, run_cli

PROG = "def traced_here():\n    return sum(range(50))\ntraced_here()\nopen('ran.out', 'w').close()\n"


def script(tmp_path, text=PROG, name="prog.py"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def refused(p, *words, status=2):
    """Exit status 2 (a bad option; convert's outputs: 1), one error line with `words`, no traceback, no
    temporary file named."""
    assert p.returncode == status, (p.returncode, p.stderr)
    assert "error:" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert ".tmp" not in p.stderr, p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    p = run_cli("-q", "--no-report", "-o", str(d / "r.ocular"), script(d), cwd=d)
    assert p.returncode == 0, p.stderr
    return d / "r.ocular"


def test_the_report_file_is_never_a_trace(tmp_path):
    p = run_cli("--report", "d.json", "-o", "d.json", script(tmp_path), cwd=tmp_path)
    refused(p, "--report 'd.json' is also the output 'd.json'")
    assert not (tmp_path / "ran.out").exists(), "the program must not run"
    os.symlink("d2.json", tmp_path / "link.txt")  # the same file through a link
    p = run_cli("--report", "link.txt", "-o", "x.json", "-o", "d2.json", script(tmp_path), cwd=tmp_path)
    refused(p, "is also the output 'd2.json'")


def test_convert_never_writes_over_its_recording(tmp_path, recording):
    rec = tmp_path / "r.ocular"
    rec.write_bytes(recording.read_bytes())
    before = rec.read_bytes()
    for args in (["--report-file", "r.ocular", "-o", "a.json"],  # the report over the recording
                 ["--report-file", "b.json", "-o", "b.json"]):  # the report over the trace
        refused(run_cli("convert", "r.ocular", *args, cwd=tmp_path), "--report-file", "is also the")
    # the output is the recording through a symbolic link, either way round, or a hard link
    os.symlink("r.ocular", tmp_path / "via.json")
    refused(run_cli("convert", "via.json", "-o", "r.ocular", cwd=tmp_path), "is the recording itself", status=1)
    refused(run_cli("convert", "r.ocular", "-o", "via.json", cwd=tmp_path), "is the recording itself", status=1)
    os.link(rec, tmp_path / "hard.json")
    refused(run_cli("convert", "r.ocular", "-o", "hard.json", cwd=tmp_path), "is the recording itself", status=1)
    with pytest.raises(ValueError, match="is the recording itself"):
        ocular.convert(str(tmp_path / "r.ocular"), str(tmp_path / "hard.json"))
    assert rec.read_bytes() == before, "the recording was replaced"
    with pytest.raises(ValueError, match="report must be True, False, 'text' or 'json'"):
        ocular.convert(str(rec), str(tmp_path / "c.json"), report="xml")


@pytest.mark.parametrize("args, words", [
    (["-o", "x.folded.gz"], ["only Chrome JSON is written gzip-compressed"]),
    (["-o", "x.ocular"], ["--follow merges timelines"]),
    (["--format", "recording", "-o", "x.json"], ["--follow merges timelines"]),
], ids=["folded.gz", "ocular", "format-recording"])
def test_follow_refuses_what_it_cannot_merge_before_the_program_runs(tmp_path, args, words):
    refused(run_cli("--follow", *args, script(tmp_path), cwd=tmp_path), *words)
    assert not (tmp_path / "ran.out").exists()


def test_conflicting_options_are_refused(tmp_path, recording):
    prog = script(tmp_path)
    refused(run_cli("--no-trace-file", "-o", "x.pstats", prog, cwd=tmp_path), "--no-trace-file")
    refused(run_cli("--tree", "--report-json", prog, cwd=tmp_path), "--tree", "--report-json")
    refused(run_cli("convert", str(recording), "-o", "t.json", "--tree", "--report-json", cwd=tmp_path), "--tree")
    for outs in (["-o", "x.pftrace"], ["-o", "x.json", "-o", "x.pftrace"]):
        refused(run_cli("--loop-events", "runs", *outs, prog, cwd=tmp_path), "--loop-events runs", "'x.pftrace'",
                "Perfetto")
    assert not (tmp_path / "ran.out").exists()
    p = run_cli("convert", str(recording), "--loop-events", "runs", "-o", "c.pftrace", cwd=tmp_path)
    assert p.returncode == 1 and "JSON traces only" in p.stderr and not (tmp_path / "c.pftrace").exists(), p.stderr
    with pytest.raises(ValueError, match="JSON traces only"):
        ocular.start_tracing(output=str(tmp_path / "api.pftrace"), loops="runs")
    assert not ocular.is_tracing()
    # --format recording: said to be a recording, whatever its name
    p = run_cli("--no-report", "--format", "recording", "-o", "r.json", prog, cwd=tmp_path)
    assert p.returncode == 0 and "recording written to" in p.stderr and "ocular convert" in p.stderr, p.stderr


def test_errors_name_the_output_not_its_temporary_files(tmp_path):
    prog = script(tmp_path)
    long_name = "a" * 245 + ".json"
    for args in (["-o", long_name], ["-o", "x1.json", "-o", long_name]):
        refused(run_cli(*args, prog, cwd=tmp_path), "too long")
    assert not (tmp_path / "ran.out").exists()
    p = run_cli("-q", "--no-report", "-o", "m.json", prog, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    p = run_cli("merge", "m.json", "-o", long_name, cwd=tmp_path)
    assert p.returncode == 1 and "too long" in p.stderr and "[Errno" not in p.stderr and ".tmp" not in p.stderr
    with pytest.raises(OSError, match="too long") as e:
        ocular.start_tracing(output=str(tmp_path / long_name))
    assert ".tmp" not in str(e.value)
    assert not ocular.is_tracing()
    p = run_cli("merge", "m.json", "-o", "", cwd=tmp_path)
    assert p.returncode == 1 and "must not be empty" in p.stderr, p.stderr
    p = run_cli("merge", "m.json", "-o", "/dev/null", cwd=tmp_path)
    assert p.returncode == 1 and "not a regular file" in p.stderr and "--no-trace-file" not in p.stderr, p.stderr
    assert "ocular: ocular:" not in p.stderr and "error: ocular:" not in p.stderr


REMOVES_ITS_DIRECTORY = "import shutil, sys\ndef f():\n    return 1\nf()\nshutil.rmtree(sys.argv[1])\n"


@pytest.mark.parametrize("outs", [["t.json"], ["t.json", "t.pstats"]], ids=["one", "several"])
def test_an_output_directory_the_program_removes(tmp_path, outs):
    prog = script(tmp_path, REMOVES_ITS_DIRECTORY)
    d = tmp_path / "out"
    d.mkdir()
    args = [a for o in outs for a in ("-o", str(d / o))]
    p = run_cli("--no-report", *args, prog, str(d), cwd=tmp_path)
    assert p.returncode == 74, p.stderr  # (the program exited 0: Ocular's failure, with its own status)
    assert "ocular: the program exited 0; the trace could not be written: " in p.stderr, p.stderr
    assert f"the output directory {str(d)!r} was removed while tracing" in p.stderr, p.stderr
    assert "[Errno" not in p.stderr and ".tmp" not in p.stderr and ".ocular" not in p.stderr, p.stderr


ARGV = "import json, sys\njson.dump(sys.argv, open('argv.out', 'w'))\n"


def argv_of(tmp_path):
    return json.loads((tmp_path / "argv.out").read_text())


def test_the_programs_arguments_are_split_as_argparse_reads_ours(tmp_path):
    prog = script(tmp_path, ARGV)
    p = run_cli("-q", "--no-report", "--thres", "0", "--out", "ab.json", prog, "x", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert argv_of(tmp_path) == [prog, "x"] and (tmp_path / "ab.json").exists()
    p = run_cli("-q", "--no-report", "-c" + ARGV, "a", "b", cwd=tmp_path)  # -cCODE, as Python takes it
    assert p.returncode == 0, p.stderr
    assert argv_of(tmp_path) == ["-c", "a", "b"]
    p = run_cli("-q", "--no-report", "-mjson.tool", "--help", cwd=tmp_path)  # the module's --help, not ours
    assert p.returncode == 0 and "python -m ocular" not in p.stdout and "json" in p.stdout.lower(), p.stdout
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "ocular", "-q", "--no-report", "-o", "stdin.json", "-", "a", "b"],
                       input=ARGV + "def from_stdin():\n    pass\nfrom_stdin()\n", text=True, cwd=tmp_path, env=env,
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert argv_of(tmp_path) == ["-", "a", "b"]
    assert "from_stdin" in (tmp_path / "stdin.json").read_text()
    refused(run_cli("--t", "0", prog, cwd=tmp_path), "ambiguous option: --t")


def package(tmp_path, name, init, **modules):
    d = tmp_path / name
    d.mkdir()
    (d / "__init__.py").write_text(init)
    for mod, text in modules.items():
        (d / f"{mod}.py").write_text(text)


def begun(path):
    return [e["name"] for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") in ("B", "X")]


def test_dash_m_traces_the_packages_it_imports_first(tmp_path):
    """python -m pkg.sub imports pkg first (and python -m pkg runs pkg/__init__ before pkg/__main__): that is
    the program's code, traced, and its errors and exits are the program's (the trace is saved)."""
    sub = "import sys, json\ndef sub_work():\n    json.dump(sys.argv, open('argv.out', 'w'))\nsub_work()\n"
    package(tmp_path, "heavy", "def init_work():\n    return 1\ninit_work()\n", sub=sub, __main__=sub)
    for target in ("heavy.sub", "heavy"):
        p = run_cli("-q", "--no-report", "-o", "t.json", "-m", target, "a", cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        names = begun(tmp_path / "t.json")
        assert "init_work" in names and "sub_work" in names and names.index("init_work") < names.index("sub_work")
        main = "sub" if target == "heavy.sub" else "__main__"
        assert argv_of(tmp_path) == [str(tmp_path / "heavy" / f"{main}.py"), "a"]
    package(tmp_path, "bad", "def failing():\n    raise ValueError('boom')\nfailing()\n", sub="print('never')\n")
    p = run_cli("-q", "--no-report", "-o", "b.json", "-m", "bad.sub", cwd=tmp_path)
    assert p.returncode == 1 and "ValueError: boom" in p.stderr and "never" not in p.stdout, p.stderr
    # (the runner's frames are not the program's: the command line is ocular/__main__.py and ocular/_cli/)
    assert "__main__.py" not in p.stderr and os.sep + "_cli" + os.sep not in p.stderr, p.stderr
    assert "failing" in begun(tmp_path / "b.json")
    package(tmp_path, "ex", "def leaving():\n    raise SystemExit('bye')\nleaving()\n", sub="print('never')\n")
    p = run_cli("-q", "--no-report", "-o", "e.json", "-m", "ex.sub", cwd=tmp_path)
    assert p.returncode == 1 and p.stderr.strip() == "bye", p.stderr
    assert "leaving" in begun(tmp_path / "e.json")
    # the module is still found before anything runs: not found, or an output that would replace it
    refused(run_cli("-o", "x.json", "-m", "heavy.nothing", cwd=tmp_path), "heavy.nothing")
    refused(run_cli("-o", "heavy/sub.py", "-m", "heavy.sub", cwd=tmp_path), "is the source of module 'heavy.sub'")
    assert "def sub_work" in (tmp_path / "heavy" / "sub.py").read_text()


def test_follow_passes_every_recording_option_and_refuses_ring(tmp_path):
    prog = script(tmp_path, "def f():\n    t = 0\n    for i in range(300):\n        t += len('ab')\n    return t\nf()\n")

    def kinds(*opts):
        p = run_cli("--follow", "-q", "--no-report", "--threshold", "0", *opts, "-o", "t.json", prog, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        ev = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
        return (sum(1 for e in ev if e.get("args", {}).get("file") == "~"), sum(1 for e in ev if e.get("cat") == "loop"))

    c_calls, loops = kinds()
    assert c_calls >= 300 and loops >= 1, (c_calls, loops)
    assert kinds("--no-c-functions", "--loop-events", "off") == (0, 0)
    p = run_cli("--follow", "--report", "rep.txt", "--top", "1", "-o", "t.json", prog, cwd=tmp_path)
    assert p.returncode == 0 and "Your code" in (tmp_path / "rep.txt").read_text(), p.stderr
    refused(run_cli("--follow", "--ring", "1M", "-o", "t.json", prog, cwd=tmp_path), "--ring", "--follow")


RING_STOPS = """\
import atexit, os, signal, sys
import ocular
atexit.register(lambda: os.kill(os.getpid(), signal.SIGUSR2))  # (runs after Ocular's own stop at exit)
ocular.start_tracing(output=sys.argv[1], ring="1M")
assert signal.getsignal(signal.SIGUSR2) not in (signal.SIG_DFL, signal.SIG_IGN)
if sys.argv[2] == "stop":
    ocular.stop_tracing()
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL  # the program's default again
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
print("ended")
"""


@pytest.mark.parametrize("how", ["stop", "exit"])
def test_a_ring_session_gives_sigusr2_back(tmp_path, how):
    """After stop_tracing() SIGUSR2 does the default again; at exit, once the trace is saved, a SIGUSR2
    (a snapshot asked for too late) no longer kills a process that is ending well."""
    p = run_py(RING_STOPS, str(tmp_path / "r.json"), how, cwd=tmp_path, check=False)
    assert p.returncode == 0 and p.stdout == "ended\n", (p.returncode, p.stderr)
    assert json.loads((tmp_path / "r.json").read_text())["traceEvents"]


def test_a_damaged_name_in_a_recording_still_renders_valid_outputs(tmp_path, recording):
    data = bytearray(recording.read_bytes())
    i = data.find(b"traced_here")
    assert i > 0
    data[i + 2] = 0xFF  # not UTF-8
    data[i + 4] = 0xC3  # a lead byte without its continuation
    bad = tmp_path / "bad.ocular"
    bad.write_bytes(bytes(data))
    for out in ("b.json", "b.speedscope.json", "b.folded", "b.html"):
        p = run_cli("convert", str(bad), "-o", out, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        text = (tmp_path / out).read_bytes().decode("utf-8")  # valid UTF-8
        if out.endswith(".json"):
            json.loads(text)
        assert "tr\ufffdc\ufffdd_here" in text or "tr\\ufffdc\\ufffdd_here" in text, out
