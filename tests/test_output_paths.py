"""What the output may be: a regular file (created or replaced), or a symbolic link, which is followed (the
trace replaces the file it points to and the link stays).  A device (/dev/null), a FIFO or a socket is
refused before the program runs -- the trace is renamed over the output at the end, which would replace
it -- and an output that becomes one while tracing is left alone."""

import json
import os
import socket
import stat

import pytest

import ocular
from conftest import check_balanced, load_trace, names, run_py
from test_api import run_cli

PROG = "def traced_here(): pass\ntraced_here()\nopen('ran.out', 'w').close()\n"


def null_device(tmp_path):
    """A character device like /dev/null (1, 3) inside tmp_path: the real one must not be put at risk."""
    dev = tmp_path / "null"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError as exc:
        pytest.skip(f"cannot create a device node to test with (needs root): {exc}")
    return dev


def special_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    s.close()
    return {"FIFO": fifo, "socket": sock}


def test_cli_refuses_a_fifo_a_socket_and_a_device(tmp_path):
    files = special_files(tmp_path)
    for kind, path in files.items():
        p = run_cli("-o", str(path), "-c", PROG, cwd=tmp_path)
        assert p.returncode == 2, p.stderr
        assert f"is a {kind}, not a regular file" in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert not (tmp_path / "ran.out").exists(), "the program must not run"
    assert stat.S_ISFIFO(os.lstat(files["FIFO"]).st_mode) and stat.S_ISSOCK(os.lstat(files["socket"]).st_mode)
    dev = null_device(tmp_path)
    p = run_cli("-o", str(dev), "-c", PROG, cwd=tmp_path)
    assert p.returncode == 2 and "is a character device, not a regular file" in p.stderr, p.stderr
    assert "--no-trace-file" in p.stderr
    assert stat.S_ISCHR(os.lstat(dev).st_mode), "the device was replaced"
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


def test_dev_null_is_refused():
    """Checked without starting anything: a regression here must not put the real /dev/null at risk."""
    with pytest.raises(ValueError, match="character device, not a regular file"):
        ocular._check_output("/dev/null")


def test_api_refuses_a_fifo_and_merge_too(tmp_path):
    fifo = special_files(tmp_path)["FIFO"]
    with pytest.raises(ValueError, match="is a FIFO, not a regular file"):
        ocular.start_tracing(output=str(fifo))
    assert not ocular.is_tracing()
    src = tmp_path / "a.json"
    run_cli("-q", "--no-report", "-o", str(src), "-c", PROG, cwd=tmp_path)
    p = run_cli("merge", str(src), "-o", str(fifo), cwd=tmp_path)
    assert p.returncode == 1 and "is a FIFO, not a regular file" in p.stderr, p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("dangling", [False, True], ids=["existing", "dangling"])
def test_symlink_is_followed(tmp_path, dangling):
    """`-o latest.json` where latest.json -> runs/1.json: the trace lands in runs/1.json (created if the
    link dangles), the link stays a link, and no temporary file is left in either directory."""
    runs = tmp_path / "runs"
    runs.mkdir()
    target = runs / "1.json"
    if not dangling:
        target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(os.path.join("runs", "1.json"))
    p = run_cli("--no-report", "-o", str(link), "-c", PROG, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert os.path.islink(link) and os.readlink(link) == os.path.join("runs", "1.json")
    ev = load_trace(str(target))["traceEvents"]
    check_balanced(ev)
    assert "traced_here" in names(ev)
    assert str(target) in p.stderr  # "trace written to" names the file that holds it
    assert not [n for d in (tmp_path, runs) for n in os.listdir(d) if n.endswith(".tmp")]


def test_symlink_to_a_fifo_or_a_loop_is_refused(tmp_path):
    fifo = special_files(tmp_path)["FIFO"]
    (tmp_path / "to_fifo").symlink_to(fifo)
    p = run_cli("-o", str(tmp_path / "to_fifo"), "-c", PROG, cwd=tmp_path)
    assert p.returncode == 2 and "is a FIFO" in p.stderr, p.stderr
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    p = run_cli("-o", str(tmp_path / "loop"), "-c", PROG, cwd=tmp_path)
    assert p.returncode == 2 and "python -m ocular: error:" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "ran.out").exists()


def test_output_that_becomes_a_fifo_while_tracing_is_left_alone(tmp_path):
    """The program turns the output into a FIFO while it is traced: stop_tracing() raises OSError naming
    the temporary file that holds the trace, and the FIFO is still a FIFO."""
    out = tmp_path / "t.json"
    p = run_py(f"""
        import os, ocular
        ocular.start_tracing(output={str(out)!r}, report=False)
        os.mkfifo({str(out)!r})
        try:
            ocular.stop_tracing()
        except OSError as exc:
            print("refused:", exc)
        """)
    assert "became a FIFO while tracing" in p.stdout, p.stdout + p.stderr
    assert stat.S_ISFIFO(os.lstat(out).st_mode)
    kept = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert len(kept) == 1 and kept[0] in p.stdout
    check_balanced(load_trace(str(tmp_path / kept[0]))["traceEvents"])


def test_existing_output_is_replaced_and_nothing_is_left(tmp_path):
    """An existing output is replaced as os.replace would (names exchanged, then the old file removed,
    so ext4 does not write the new trace back at once): the output holds the new trace, another hard
    link to the old file keeps the old content, and no temporary file stays, for a trace, a converted
    recording and a merge."""
    out = tmp_path / "t.json"
    out.write_text("old trace")
    os.link(out, tmp_path / "keep.json")
    p = run_cli("-q", "--no-report", "-o", str(out), "-c", PROG, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "traced_here" in names(load_trace(str(out))["traceEvents"])
    assert (tmp_path / "keep.json").read_text() == "old trace"
    rec = tmp_path / "r.ocular"
    assert run_cli("-q", "-o", str(rec), "-c", PROG, cwd=tmp_path).returncode == 0
    pf, j2 = tmp_path / "t.pftrace", tmp_path / "r.json"
    for _ in range(2):  # the second convert and merge replace the first's outputs
        for conv in (pf, j2):
            p = run_cli("convert", str(rec), "-o", str(conv), cwd=tmp_path)
            assert p.returncode == 0 and conv.stat().st_size > 0, p.stderr
        p = run_cli("merge", str(out), str(j2), "-o", str(tmp_path / "m.json"), cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        check_balanced(load_trace(str(tmp_path / "m.json"))["traceEvents"])
    assert sorted(os.listdir(tmp_path)) == ["keep.json", "m.json", "r.json", "r.ocular", "ran.out",
                                          "t.json", "t.pftrace"]


@pytest.mark.parametrize("name", ["t.json", "t.pftrace", "t.pstats", "t.ocular"])
def test_a_replaced_output_keeps_its_permissions(tmp_path, name):
    """A trace written over an existing one keeps that file's mode (a private 0600 trace stays private),
    as writing it over in place would; a new one gets the umask's."""
    out = tmp_path / name
    out.write_text("old")
    os.chmod(out, 0o600)
    p = run_cli("-q", "--no-report", "-o", str(out), "-c", PROG, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() != b"old"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    os.chmod(out, 0o640)
    p = run_cli("-q", "--no-report", "-o", str(out), "-c", PROG, cwd=tmp_path)
    assert p.returncode == 0 and stat.S_IMODE(out.stat().st_mode) == 0o640


def test_convert_into_several_outputs_goes_on_past_one_that_fails(tmp_path):
    """convert -o A -o B: A failing (a full disk) does not stop B, and the error names A plainly."""
    from conftest import small_tmpfs

    rec = tmp_path / "r.ocular"
    prog = "def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)\nfib(19)\n"
    assert run_cli("-q", "--threshold", "0", "-o", str(rec), "-c", prog, cwd=tmp_path).returncode == 0
    with small_tmpfs(tmp_path / "full", "300k") as full:
        p = run_cli("convert", str(rec), "-o", str(full / "big.json"), "-o", str(full / "small.pstats"), cwd=tmp_path)
        assert p.returncode == 1, p.stderr
        assert "1 of 2 outputs not written" in p.stderr and "No space left on device" in p.stderr, p.stderr
        assert "[Errno" not in p.stderr, p.stderr
        assert not (full / "big.json").exists()
        assert (full / "small.pstats").stat().st_size > 0
        assert sorted(os.listdir(full)) == ["small.pstats"]


def test_dev_stdout_on_a_pipe_is_refused_as_a_fifo(tmp_path):
    """-o /dev/stdout with stdout a pipe (`... | cat`): refused as the FIFO it is, not as a file named
    after the pipe's /proc link ('/proc/PID/fd/pipe:[N].tmp: No such file or directory')."""
    p = run_cli("-q", "-o", "/dev/stdout", "-c", PROG, cwd=tmp_path)  # (run_cli's stdout is a pipe)
    assert p.returncode == 2 and "is a FIFO, not a regular file" in p.stderr and "pipe:" not in p.stderr, p.stderr
    assert not (tmp_path / "ran.out").exists()


def test_replace_file_edge_cases(tmp_path):
    """ocular._replace_file: creates a missing destination, never swaps a directory in, and names both
    paths in its error."""
    a, b, d = tmp_path / "a", tmp_path / "b", tmp_path / "dir"
    a.write_text("new")
    ocular._replace_file(str(a), str(b))
    assert b.read_text() == "new" and not a.exists()
    a.write_text("newer")
    ocular._replace_file(a, b)  # os.PathLike too
    assert b.read_text() == "newer" and not a.exists()
    d.mkdir()
    (d / "inside").write_text("x")
    a.write_text("x")
    with pytest.raises(IsADirectoryError) as info:
        ocular._replace_file(str(a), str(d))
    assert str(a) in str(info.value) and str(d) in str(info.value)
    assert (d / "inside").read_text() == "x" and a.read_text() == "x"
    with pytest.raises(FileNotFoundError):
        ocular._replace_file(str(tmp_path / "missing"), str(b))
    assert b.read_text() == "newer"


def test_no_blocks_stay_allocated_past_the_end(tmp_path):
    """The renderer allocates its output's blocks ahead of its writes (4 MiB first) and gives back what
    it did not fill: a small trace, rendered at stop or converted, takes no more disk than its size."""
    rec, out, conv = tmp_path / "r.ocular", tmp_path / "t.json", tmp_path / "c.json"
    for args in (("-o", str(out)), ("-o", str(rec))):
        p = run_cli("-q", "--no-report", *args, "-c", PROG, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
    p = run_cli("convert", str(rec), "-o", str(conv), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    for f in (out, conv):
        st = f.stat()
        assert 0 < st.st_size < 1 << 20
        assert st.st_blocks * 512 <= st.st_size + 65536, (f, st.st_size, st.st_blocks)
        assert "traced_here" in names(load_trace(str(f))["traceEvents"])


def test_remove_frees_the_file_on_another_thread(tmp_path):
    """_ocular._remove: the name goes at once (OSError naming the path as unlink gives), and the file's
    last reference, a descriptor a short-lived thread closes, goes soon after: no descriptor of this
    process is left on the deleted file."""
    import time

    from ocular import _ocular

    big = tmp_path / "big.json"
    big.write_bytes(b"x" * (8 << 20))
    _ocular._remove(str(big))
    assert not big.exists()
    with pytest.raises(FileNotFoundError) as info:
        _ocular._remove(str(big))
    assert str(big) in str(info.value)

    def held():
        out = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(str(big)):
                out.append(target)
        return out

    deadline = time.monotonic() + 10
    while held() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held() == []


def test_the_program_itself_is_never_the_output(tmp_path):
    """The trace (or --report) would replace the program's source: `-o mod.py -m mod`, an output that is a
    symbolic link to the script, `--report script.py script.py`.  Expect: status 2 before the program runs,
    the source untouched."""
    src = PROG
    (tmp_path / "mod.py").write_text(src)
    (tmp_path / "script.py").write_text(src)
    os.symlink("script.py", tmp_path / "alias.py")
    cases = [(["-o", "mod.py", "-m", "mod"], "mod.py", "the source of module 'mod'"),
             (["-o", "alias.py", "script.py"], "script.py", "is the script being run"),
             (["-o", "t.json", "--report", "script.py", "script.py"], "script.py", "is the script being run"),
             (["-o", "t.json", "-o", "script.py", "script.py"], "script.py", "is the script being run")]
    for args, victim, said in cases:
        p = run_cli(*args, cwd=tmp_path)
        assert p.returncode == 2 and said in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
        assert (tmp_path / victim).read_text() == src, args
        assert not (tmp_path / "ran.out").exists(), args


def test_an_output_ending_in_a_slash_names_a_directory(tmp_path):
    """`-o notes/` where notes is a file, or where nothing is: refused (the slash is not dropped, which
    would replace the file `notes` or create one)."""
    (tmp_path / "notes").write_text("precious")
    for out in ("notes/", "outdir/"):
        p = run_cli("-o", out, "-c", PROG, cwd=tmp_path)
        assert p.returncode == 2 and "names a directory" in p.stderr, p.stderr
    assert (tmp_path / "notes").read_text() == "precious"
    assert not (tmp_path / "outdir").exists() and not (tmp_path / "ran.out").exists()
    with pytest.raises(ValueError, match="names a directory"):
        ocular.start_tracing(output=str(tmp_path / "notes") + "/")
    assert not ocular.is_tracing()


def test_several_outputs_are_all_checked_before_the_program_runs(tmp_path):
    """With several -o, every output is checked up front (not only the first): a directory, a missing
    directory, a bad setting for a .pftrace.  A .ocular among them gets the recording itself."""
    (tmp_path / "dd").mkdir()
    for args in (["-o", "a.json", "-o", "dd"], ["-o", "a.json", "-o", str(tmp_path / "missing" / "x.json")]):
        p = run_cli(*args, "-c", PROG, cwd=tmp_path)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert not (tmp_path / "ran.out").exists() and not (tmp_path / "a.json").exists()
    env_before = os.environ.get("OCULAR_PERFETTO_DEFLATE")
    os.environ["OCULAR_PERFETTO_DEFLATE"] = "yes"
    try:
        p = run_cli("-o", "a.json", "-o", "b.pftrace", "-c", PROG, cwd=tmp_path)
    finally:
        if env_before is None:
            del os.environ["OCULAR_PERFETTO_DEFLATE"]
        else:
            os.environ["OCULAR_PERFETTO_DEFLATE"] = env_before
    assert p.returncode == 2 and "OCULAR_PERFETTO_DEFLATE" in p.stderr, p.stderr
    assert not (tmp_path / "ran.out").exists()
    p = run_cli("-q", "--no-report", "-o", "rec.ocular", "-o", "t.json", "-c", PROG, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "traced_here" in names(load_trace(str(tmp_path / "t.json"))["traceEvents"])
    res = ocular.convert(str(tmp_path / "rec.ocular"), str(tmp_path / "again.json"))
    assert "traced_here" in names(load_trace(res.output)["traceEvents"])
    assert sorted(n for n in os.listdir(tmp_path) if n.endswith((".tmp", ".ocular"))) == ["rec.ocular"]


def test_several_outputs_when_the_program_stops_tracing_itself(tmp_path):
    """The program calls ocular.stop_tracing() itself (it gets the recording of the several -o): the
    outputs are still rendered at exit, and nothing is left behind."""
    prog = "import ocular\n" + PROG + "ocular.stop_tracing()\n"
    p = run_cli("-q", "--no-report", "-o", "a.json", "-o", "a.pstats", "-c", prog, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "traced_here" in names(load_trace(str(tmp_path / "a.json"))["traceEvents"])
    assert (tmp_path / "a.pstats").stat().st_size > 0
    assert [n for n in os.listdir(tmp_path) if n.endswith((".tmp", ".ocular"))] == []


def test_no_stderr_means_nothing_in_the_programs_stdout(tmp_path):
    """stderr closed (sys.stderr is None): Ocular's lines and the report are not printed into stdout,
    the program's own output (print() falls back to stdout when its file is None)."""
    import subprocess
    import sys

    from test_api import SRC

    env = dict(os.environ, PYTHONPATH=SRC)
    for cmd in ([sys.executable, "-m", "ocular", "-o", "t.json", "-c", "print('DATA')"],
                [sys.executable, "-c", "import ocular\nocular.start_tracing(output='t2.json')\nprint('DATA')\n"
                                       "ocular.stop_tracing()\n"]):
        p = subprocess.run(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True, timeout=60, close_fds=True, pass_fds=(), preexec_fn=lambda: os.close(2))
        assert p.returncode == 0 and p.stdout == "DATA\n", (cmd, p.stdout)
    assert (tmp_path / "t.json").exists() and (tmp_path / "t2.json").exists()


def test_report_to_a_fifo_nobody_reads_does_not_hang(tmp_path):
    """--report FIFO with no reader: the report is not written (said so), the run ends, the trace is saved.
    A directory, or a missing directory, is refused before the program runs."""
    os.mkfifo(tmp_path / "ff")
    p = run_cli("-o", "t.json", "--report", "ff", "-c", PROG, cwd=tmp_path, timeout=60)
    assert p.returncode == 0 and "a FIFO that nobody reads" in p.stderr, p.stderr
    assert "traced_here" in names(load_trace(str(tmp_path / "t.json"))["traceEvents"])
    (tmp_path / "dd").mkdir()
    for bad in ("dd", str(tmp_path / "missing" / "r.txt")):
        p = run_cli("-o", "t2.json", "--report", bad, "-c", PROG, cwd=tmp_path)
        assert p.returncode == 2 and "--report" in p.stderr, p.stderr
        assert not (tmp_path / "t2.json").exists()


def test_convert_names_what_the_recording_path_is(tmp_path):
    """convert of a directory or a FIFO says what it is (not 'does not exist'); thread_roots is a bool."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        ocular.convert(str(tmp_path / "dir"), str(tmp_path / "o.json"))
    with pytest.raises(ValueError, match="is not a regular file"):
        ocular.convert(str(tmp_path / "fifo"), str(tmp_path / "o.json"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ocular.convert(str(tmp_path / "none.ocular"), str(tmp_path / "o.json"))
    with pytest.raises(TypeError, match="thread_roots"):
        ocular.convert(str(tmp_path / "none.ocular"), str(tmp_path / "o.json"), thread_roots="yes")
    with pytest.raises(TypeError, match="thread_roots"):
        ocular.start_tracing(output=str(tmp_path / "t.json"), thread_roots="yes")
    assert not ocular.is_tracing()


def test_an_uncaught_exception_shows_the_programs_frames_only(tmp_path):
    """As `python script.py` reports it: the traceback starts at the script (none of the runner's frames
    above it), status 1, the trace saved; a program's own sys.excepthook is the one called."""
    (tmp_path / "boom.py").write_text("def traced_here():\n    raise ValueError('boom')\ntraced_here()\n")
    p = run_cli("-q", "--no-report", "-o", "t.json", "boom.py", cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    tb = p.stderr[p.stderr.index("Traceback"):]
    assert tb.splitlines()[1].strip().startswith(f'File "{tmp_path / "boom.py"}", line 3'), tb  # (absolute, as Python's)
    assert "ocular" not in tb and tb.rstrip().endswith("ValueError: boom"), tb
    assert "traced_here" in names(load_trace(str(tmp_path / "t.json"))["traceEvents"])
    (tmp_path / "hook.py").write_text("import sys\n"
                                      "sys.excepthook = lambda t, v, tb: print('HOOK', t.__name__, file=sys.stderr)\n"
                                      "raise KeyError(1)\n")
    p = run_cli("-q", "--no-report", "-o", "t2.json", "hook.py", cwd=tmp_path)
    assert p.returncode == 1 and "HOOK KeyError" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_several_outputs_with_a_forked_child_and_a_restarted_session(tmp_path):
    """Several -o: a child forked by the program returns through the runner too, and renders its own
    recording into its own outputs (t.<pid>.json ...), not over the parent's; a program that stops the
    session and traces into a file of its own keeps that file, and the outputs get the runner's recording."""
    prog = ("import os, ocular\n"
            "def parent_work(): pass\n"
            "def child_work(): pass\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    child_work()\n"
            "else:\n"
            "    os.waitpid(pid, 0)\n"
            "    parent_work()\n"
            "    print(pid)\n")
    p = run_cli("-q", "--no-report", "-o", "t.json", "-o", "t.pstats", "-c", prog, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    child = int(p.stdout.split()[-1])
    parent_names = names(load_trace(str(tmp_path / "t.json"))["traceEvents"])
    assert "parent_work" in parent_names and "child_work" not in parent_names, parent_names
    child_names = names(load_trace(str(tmp_path / f"t.{child}.json"))["traceEvents"])
    assert "child_work" in child_names and "parent_work" not in child_names, child_names
    assert (tmp_path / f"t.{child}.pstats").exists()
    assert [n for n in os.listdir(tmp_path) if n.endswith((".tmp", ".ocular"))] == []
    prog = ("import ocular\n" + PROG + "ocular.stop_tracing()\n"
            "ocular.start_tracing(output='mine.json', report=False)\n"
            "def mine(): pass\nmine()\n")
    p = run_cli("-q", "--no-report", "-o", "a.json", "-o", "a.pstats", "-c", prog, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "traced_here" in names(load_trace(str(tmp_path / "a.json"))["traceEvents"])
    assert "mine" in names(load_trace(str(tmp_path / "mine.json"))["traceEvents"])
    assert [n for n in os.listdir(tmp_path) if n.endswith((".tmp", ".ocular"))] == []


def test_a_session_without_an_output_keeps_its_recording_in_the_temporary_directory(tmp_path):
    """The report only (perfetto=False): the recording is a new file of its own in TMPDIR (tempfile's order of
    directories, or tempfile.tempdir if the program set it), made without importing tempfile, and removed at
    stop; with no directory to write in, start_tracing says so and nothing runs traced."""
    rec_dir, other = tmp_path / "rec", tmp_path / "other"
    rec_dir.mkdir()
    other.mkdir()
    p = run_py("""
        import os, sys, json, ocular
        ocular.start_tracing(perfetto=False, report=False)
        during = sorted(os.listdir(os.environ["TMPDIR"]))
        imported = "tempfile" in sys.modules
        ocular.stop_tracing()
        import tempfile
        tempfile.tempdir = sys.argv[1]
        ocular.start_tracing(perfetto=False, report=False)
        there = sorted(os.listdir(sys.argv[1]))
        ocular.stop_tracing()
        print(json.dumps(dict(during=during, imported=imported, there=there, after=sorted(os.listdir(os.environ["TMPDIR"])),
                              after_there=sorted(os.listdir(sys.argv[1])), calls=ocular.last_report().functions_total)))
    """, str(other), env={"TMPDIR": str(rec_dir)})
    res = json.loads(p.stdout)
    assert len(res["during"]) == 1 and res["during"][0].startswith("ocular-") and res["during"][0].endswith(".rec")
    assert not res["imported"], "start_tracing imported tempfile"
    assert len(res["there"]) == 1 and res["there"][0].endswith(".rec"), res
    assert res["after"] == [] and res["after_there"] == [], res
    p = run_py("""
        import errno, os, ocular
        def refused(*a, **k):
            raise PermissionError(errno.EACCES, "Permission denied")
        os.open = refused  # (every directory refuses: the session cannot start)
        try:
            ocular.start_tracing(perfetto=False, report=False)
        except PermissionError as exc:  # (the last directory's error, by its errno)
            print(exc, ocular.is_tracing())
    """, env={"TMPDIR": str(rec_dir)})
    assert f"no temporary directory to write the recording in (tried {rec_dir}, /tmp" in p.stdout, p.stdout
    assert "Permission denied); set TMPDIR or give an output file False" in p.stdout, p.stdout
