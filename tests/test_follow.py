"""`python -m ocular --follow` (subprocess, multiprocessing fork/spawn/forkserver, os.fork, a SIGKILLed
child) and `python -m ocular merge`, run as a user would: the CLI in a subprocess, the merged trace
parsed and checked process by process."""

import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import run_on_pty, SRC, check_balanced, load_trace, python_cmd, small_tmpfs

# The traced program: a pool of the given start method, a subprocess, an os.fork child; it prints what
# it sees of itself and exits 3.
PROGRAM = r'''
import multiprocessing as mp, os, subprocess, sys

def work(n):
    def fib(k): return k if k < 2 else fib(k - 1) + fib(k - 2)
    return os.getpid(), fib(n)

def in_subprocess():
    pass

if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    pool = ctx.Pool(2)
    res = pool.map(work, [9, 10, 11, 12])
    pool.close()  # the workers end by themselves (`with Pool` would SIGTERM them: see test_process.py)
    pool.join()
    sub = subprocess.run([sys.executable, "-c", "import os\ndef in_subprocess(): return os.getpid()\nprint(in_subprocess())"],
                         capture_output=True, text=True, check=True)
    pid = os.fork()
    if pid == 0:
        work(6)
        os._exit(0)
    os.waitpid(pid, 0)
    import json
    print(json.dumps(dict(argv=sys.argv, name=__name__, path0=sys.path[0], pid=os.getpid(),
                          workers=sorted({p for p, _ in res}), sub=int(sub.stdout), fork=pid)))
    sys.exit(3)
'''


def cli(args, cwd, env=None, timeout=180):
    e = dict(os.environ)
    e["PYTHONPATH"] = SRC + os.pathsep + e.get("PYTHONPATH", "")
    e.pop("OCULAR_FOLLOW", None)
    if env:
        e.update(env)
    return subprocess.run([*python_cmd(), "-m", "ocular", *args], cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=timeout)


def processes(events):
    """{pid: process name} from the metadata, and {pid: [B event names]}."""
    pnames = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    calls = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "B":
            calls[e["pid"]].append(e["name"].rpartition(".")[2])  # work.<locals>.fib -> fib
    return pnames, calls


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_follow_traces_every_process(tmp_path, method):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    p = cli(["--follow", "--no-report", "-o", "all.json", "prog.py", method], cwd=tmp_path)
    assert p.returncode == 3, p.stderr  # the program's exit status
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    # the program saw what it sees when run directly
    assert seen["argv"] == ["prog.py", method] and seen["name"] == "__main__"
    assert seen["path0"] == str(tmp_path)
    assert "trace written to" in p.stderr and "incomplete" not in p.stderr, p.stderr
    assert not (tmp_path / "all.procs").exists(), "the per-process files are removed after the merge"

    data = load_trace(tmp_path / "all.json")
    ev = data["traceEvents"]
    check_balanced(ev)
    pnames, calls = processes(ev)
    root = seen["pid"]
    assert "prog.py" in pnames[root]
    for w in seen["workers"]:  # each pool worker is its own process, with its fib calls
        assert w != root and "fib" in calls[w], (w, pnames)
    assert "in_subprocess" in calls[seen["sub"]] and "in_subprocess" not in calls[root]
    assert "fib" in calls[seen["fork"]] and "fork of" in pnames[seen["fork"]]
    # one clock: every child starts after the program, and those it waited for end before it does
    # (the forkserver outlives it: it leaves when the program's end closes its pipe)
    ts = collections.defaultdict(list)
    for e in ev:
        if e["ph"] in "BE":
            ts[e["pid"]].append(e["ts"])
    lo, hi = min(ts[root]), max(ts[root])
    for pid in seen["workers"] + [seen["sub"], seen["fork"]]:
        assert lo <= min(ts[pid]) and max(ts[pid]) <= hi, pid
    assert all(min(t) >= lo for t in ts.values())
    merged = data["otherData"]["merged"]
    assert merged[0]["pid"] == root and all(m["complete"] and m["dropped"] == 0 for m in merged)
    assert data["otherData"]["dropped"] == 0 and "0 dropped" in p.stderr
    assert len(merged) == len(pnames) >= 5


def test_follow_sigkilled_child_and_parent_trace_survives(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent(r'''
        import os, signal, subprocess, sys, time
        code = """
        import sys, time
        def spin(n):
            return n
        for i in range(400000):
            spin(i)
        open(sys.argv[1], "w").close()
        time.sleep(60)
        """
        mark = os.path.abspath("ready")
        proc = subprocess.Popen([sys.executable, "-c", code.replace("\\n        ", "\\n"), mark])
        while not os.path.exists(mark):
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        def after_the_kill():
            pass
        after_the_kill()
        print(proc.pid)
        '''))
    p = cli(["--follow", "--threshold", "0", "--no-report", "-o", "t.json", "prog.py"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    child = int(p.stdout.split()[-1])
    assert f"incomplete: pid {child}" in p.stderr, p.stderr
    data = load_trace(tmp_path / "t.json")
    ev = data["traceEvents"]
    check_balanced(ev)  # the killed child's open slices are closed where it stopped
    pnames, calls = processes(ev)
    (root,) = [q for q in pnames if q != child]
    assert "after_the_kill" in calls[root]
    assert calls[child].count("spin") > 1000, "what the child wrote before the kill is kept"
    labels = [e for e in ev if e["ph"] == "M" and e["name"] == "process_labels" and e["pid"] == child]
    assert labels and "incomplete" in labels[0]["args"]["labels"]
    info = {m["pid"]: m for m in data["otherData"]["merged"]}
    assert info[child]["complete"] is False and all(m["complete"] for q, m in info.items() if q != child)


def test_follow_program_killed_by_signal(tmp_path):
    # (the first program waits until its recording holds 64 KiB on disk, 4,096 records of 16 bytes; the
    # second kills itself before the recorder can have written anything)
    code = ("import os, signal, time\ndef f(): pass\nfor i in range({}): f()\n"
            "part = f't.procs/{{os.getpid()}}.json.{{os.getpid()}}.tmp'\nt0 = time.monotonic()\n"
            "while {} and os.path.getsize(part) < 65536 and time.monotonic() - t0 < 120: time.sleep(0.01)\n"
            "os.kill(os.getpid(), signal.SIGKILL)")
    p = cli(["--follow", "--threshold", "0", "--no-report", "-o", "t.json", "-c", code.format(20000, True)], cwd=tmp_path)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr)  # we die the way the program died
    assert "killed by SIGKILL" in p.stderr, p.stderr
    ev = load_trace(tmp_path / "t.json")["traceEvents"]
    check_balanced(ev)
    assert processes(ev)[1] and max(len(c) for c in processes(ev)[1].values()) > 1000
    # killed before anything reached the disk: no trace, said so, no traceback, the same status
    p = cli(["--follow", "--no-report", "-o", "u.json", "-c", code.format(1, False)], cwd=tmp_path)
    assert p.returncode == -signal.SIGKILL and "Traceback" not in p.stderr
    assert "no trace was written" in p.stderr or "trace written" in p.stderr, p.stderr


def test_follow_module_exception_and_stdin(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import sys\nprint(sys.argv, input())\nraise KeyError('boom')\n")
    e = dict(os.environ, PYTHONPATH=SRC)
    p = subprocess.run([*python_cmd(), "-m", "ocular", "--follow", "-q", "--no-report", "-o", "t.json", "-m", "pkg",
                        "x"], cwd=tmp_path, env=e, input="hello\n", capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert "KeyError: 'boom'" in p.stderr and "Traceback" in p.stderr
    assert p.stdout.strip() == f"[{str(pkg / '__main__.py')!r}, 'x'] hello"
    assert "trace written" not in p.stderr  # -q
    assert (tmp_path / "t.json").exists()


def test_follow_older_python_child_runs_untraced(tmp_path):
    old = shutil.which("python3.11") or shutil.which("python3")
    if not old or subprocess.run([old, "-c", "import sys; sys.exit(sys.version_info >= (3, 12))"]).returncode:
        pytest.skip("needs a Python older than 3.12 on PATH (Debian's python3 is 3.11)")
    p = cli(["--follow", "--no-report", "-o", "t.json", "-c",
             f"import subprocess; print(subprocess.run([{old!r}, '-c', 'print(6*7)'], capture_output=True, "
             f"text=True).stdout.strip())"], cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.strip() == "42", p.stderr
    assert "not traced: Python 3.11" in p.stderr, p.stderr


def test_follow_keeps_users_sitecustomize_and_parts(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE_RAN = True\n")
    p = cli(["--follow", "--keep-parts", "--no-report", "-o", "t.pftrace", "-c",
             "import subprocess, sys\nprint(USER_SITE_RAN)\n"
             "subprocess.run([sys.executable, '-c', 'print(USER_SITE_RAN)'], check=True)"],
            cwd=tmp_path, env={"PYTHONPATH": SRC + os.pathsep + str(site)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "True"]
    parts = sorted(os.listdir(tmp_path / "t.procs"))
    assert len(parts) == 2 and all(n.endswith(".pftrace") for n in parts), parts
    # protobuf: merged by concatenating packets; each process keeps its own sequence ids
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from test_perfetto import Decoded

    d = Decoded(str(tmp_path / "t.pftrace"))
    pids = {ds[-1][1].process.pid for ds in d.process_tracks().values()}
    assert len(pids) == 2
    seqs_by_pid = collections.defaultdict(set)
    for part in parts:
        for pkt in Decoded(str(tmp_path / "t.procs" / part)).packets:
            seqs_by_pid[part].add(pkt.trusted_packet_sequence_id)
    a, b = seqs_by_pid.values()
    assert not a & b
    assert pb  # the schema parsed every packet above


def test_follow_bad_options(tmp_path):
    (tmp_path / "s.py").write_text("pass\n")
    p = cli(["--follow", "--no-trace-file", "s.py"], cwd=tmp_path)
    assert p.returncode == 2 and "--no-trace-file" in p.stderr and "Traceback" not in p.stderr
    p = cli(["--follow", "--follow-wait", "nan", "s.py"], cwd=tmp_path)
    assert p.returncode == 2 and "--follow-wait" in p.stderr
    p = cli(["--follow", "-o", str(tmp_path / "missing" / "t.json"), "s.py"], cwd=tmp_path)
    assert p.returncode == 2 and "does not exist" in p.stderr
    (tmp_path / "r.py").write_text("open('ran.out', 'w').close()\n")
    p = cli(["--follow", "-q", "-o", "all.json.gz", "r.py"], cwd=tmp_path)  # the merge writes no gzip
    assert p.returncode == 2 and "gzip" in p.stderr and not (tmp_path / "ran.out").exists(), p.stderr


def test_follow_errors_say_ocular_once(tmp_path):
    """An output --follow cannot use: one line, 'python -m ocular: error: ...' with the prefix once (it said
    'python -m ocular: error: ocular: ...' and '[Errno 20] ocular: ...'); the parts directory's too."""
    (tmp_path / "s.py").write_text("pass\n")
    (tmp_path / "afile").write_text("")
    (tmp_path / "t.procs").write_text("")  # where the parts directory of t.json would go
    for out, said in [(str(tmp_path / "missing" / "t.json"), "does not exist"),
                      ("afile/t.json", "Not a directory"),
                      ("t.json", "cannot create the parts directory")]:
        p = cli(["--follow", "-o", out, "s.py"], cwd=tmp_path)
        assert p.returncode == 2 and said in p.stderr, p.stderr
        assert p.stderr.startswith("python -m ocular: error: ") and p.stderr.count("ocular:") == 1, p.stderr
        assert "[Errno" not in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    from ocular import _follow

    assert _follow._text(FileNotFoundError("ocular: the output directory 'd' does not exist")) == \
        "the output directory 'd' does not exist"
    assert _follow._text(OSError(28, "ocular: cannot write 'x': No space left on device")) == \
        "cannot write 'x': No space left on device"


def test_follow_fails_when_a_process_could_not_save(tmp_path):
    """A followed child's save fails (the parts directory is on a 2 MiB tmpfs that its trace outgrows):
    the command line names it, even with -q, says the merged trace lacks it, and exits 74 (Ocular's
    failure, not the program's: it exited 0).  (It said "trace written", status 0.)"""
    with small_tmpfs(tmp_path / "small", "2m") as small:
        (tmp_path / "fib.py").write_text("def fib(n): return n if n < 2 else fib(n-1) + fib(n-2)\nfib(20)\n")
        (tmp_path / "parent.py").write_text("import subprocess, sys\n"
                                            "subprocess.run([sys.executable, 'fib.py'], check=True)\n")
        p = cli(["--follow", "-q", "--no-report", "--threshold", "0", "-o", str(small / "all.json"), "parent.py"],
                cwd=tmp_path)
        assert p.returncode == 74, p.stderr  # (the program exited 0: Ocular's own status)
        assert "ocular: the program exited 0; the trace could not be written: 1 traced process could not save " \
               "its trace" in p.stderr, p.stderr
        assert "not saved: writing the" in p.stderr and "(No space left on device)" in p.stderr, p.stderr
        assert "1 traced process could not save its trace" in p.stderr, p.stderr


# ---- merge by hand --------------------------------------------------------------------------------

def traced(tmp_path, name, body):
    p = cli(["--threshold", "0", "--no-report", "-q", "-o", name, "-c", body], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    return tmp_path / name


def test_merge_by_hand_and_salvage(tmp_path):
    a = traced(tmp_path, "a.json", "def alpha(): pass\nfor i in range(50): alpha()")
    b = traced(tmp_path, "b.json", "def beta(): pass\nfor i in range(70): beta()")
    # a trace cut in the middle of an event, as a killed process leaves it
    raw = b.read_bytes()
    cut = raw[: raw.index(b'"name":"beta"', len(raw) // 2) + 5]
    (tmp_path / "c.json.999.tmp").write_bytes(cut)
    p = cli(["merge", "a.json", "b.json", "c.json.999.tmp", "-o", "m.json"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "merged 3 traces" in p.stderr and "incomplete: c.json.999.tmp" in p.stderr
    ev = load_trace(tmp_path / "m.json")["traceEvents"]
    pnames, calls = processes(ev)
    pid_a = load_trace(a)["traceEvents"][0]["pid"]
    pid_b = load_trace(b)["traceEvents"][0]["pid"]
    assert calls[pid_a].count("alpha") == 50
    assert 1 <= calls[pid_b].count("beta") - 70 < 70  # the salvaged copy shares b's pid
    check_balanced([e for e in ev if e["pid"] != pid_b])


def test_merge_errors(tmp_path):
    a = traced(tmp_path, "a.json", "def alpha(): pass\nalpha()")
    traced(tmp_path, "a.pftrace", "def alpha(): pass\nalpha()")
    (tmp_path / "junk.json").write_text('{"traceEvents":[\n{"ph":"B", broken\n')
    (tmp_path / "text.txt").write_text("hello")
    cases = {
        ("missing.json",): "does not exist",
        ("junk.json",): "junk.json",
        ("text.txt",): "neither Chrome trace JSON nor a Perfetto",
        ("a.json", "a.pftrace"): "one format",
        ("a.json", "m.json"): None,
    }
    for inputs, msg in cases.items():
        out = "m.json"
        if inputs == ("a.json", "m.json"):
            shutil.copy(a, tmp_path / "m.json")
            msg = "also an input"
        p = cli(["merge", *inputs, "-o", out], cwd=tmp_path)
        assert p.returncode == 1 and msg in p.stderr and "Traceback" not in p.stderr, (inputs, p.stderr)
    lines = a.read_text().splitlines(keepends=True)
    x = next(i for i, line in enumerate(lines) if '"ph":"X"' in line and '"name":"alpha"' in line)
    for field, msg in (("dur", "no duration"), ("ts", "no time stamp")):
        damaged = lines[:x] + [lines[x].replace(f'"{field}":', f'"{field[0]}x":', 1)] + lines[x + 1:]
        (tmp_path / "damaged.json").write_text("".join(damaged))
        p = cli(["merge", "damaged.json", "-o", "m2.json"], cwd=tmp_path)
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        assert "damaged.json" in p.stderr and f"line {x + 1}" in p.stderr and msg in p.stderr, p.stderr
        assert not (tmp_path / "m2.json").exists()
    p = cli(["merge", "-o", "x.json"], cwd=tmp_path)
    assert p.returncode == 2 and "usage" in p.stderr
    p = cli(["merge", "a.json", "-o", "/dev/full/x.json"], cwd=tmp_path)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    for out, kind in (("m.json.gz", "gzip-compressed JSON"), ("m.pstats", "pstats"), ("m.html", "html"),
                      ("m.pb.gz", "pprof"), ("m.ocular", "recording")):  # not written as JSON under that name
        p = cli(["merge", "a.json", "-o", out], cwd=tmp_path)
        assert p.returncode == 1 and f"names a {kind} output" in p.stderr, (out, p.stderr)
        assert not (tmp_path / out).exists()
    import gzip

    (tmp_path / "a.json.gz").write_bytes(gzip.compress(a.read_bytes()))
    p = cli(["merge", "a.json.gz", "-o", "m3.json"], cwd=tmp_path)
    assert p.returncode == 1 and "is gzip-compressed" in p.stderr, p.stderr


def test_merge_fuzzed_inputs_never_crash(tmp_path):
    """Random damage to a JSON and a protobuf trace: merge either succeeds with a valid trace or says
    which file is wrong; it never raises a traceback and never leaves a half-written output."""
    a = traced(tmp_path, "a.json", "def alpha(): pass\nfor i in range(30): alpha()")
    pa = traced(tmp_path, "a.pftrace", "def alpha(): pass\nfor i in range(30): alpha()")
    rng = random.Random(int(os.environ.get("OCULAR_FUZZ_SEED", "1234")))
    for i in range(60):
        src = a if i % 2 else pa
        data = bytearray(src.read_bytes())
        for _ in range(rng.randint(1, 4)):
            if not data:
                break
            kind = rng.random()
            pos = rng.randrange(len(data))
            if kind < 0.4:
                data[pos] = rng.randrange(256)
            elif kind < 0.7:
                del data[pos: pos + rng.randint(1, 50)]
            else:
                data = data[:pos]
        bad = tmp_path / f"bad{i}{src.suffix}"
        bad.write_bytes(bytes(data))
        out = tmp_path / f"out{i}{src.suffix}"
        p = cli(["merge", "-q", bad.name, "-o", out.name], cwd=tmp_path, timeout=60)
        assert "Traceback" not in p.stderr, p.stderr
        if p.returncode == 0:
            if src.suffix == ".json":
                load_trace(out)
        else:
            assert p.returncode == 1 and bad.name in p.stderr, p.stderr
            assert not out.exists()
        assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_fork_warning_is_not_ours(tmp_path):
    """A single-threaded program that forks does not warn (or fail under -W error) because of the
    writer thread; sys.monitoring tracing must not change what the program does."""
    e = dict(os.environ, PYTHONPATH=SRC)
    p = subprocess.run([*python_cmd(), "-W", "error", "-m", "ocular", "--no-report", "-q", "-o", "t.json", "-c",
                        "import os\npid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0)\nprint('ok')"],
                       cwd=tmp_path, env=e, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
    assert "multi-threaded" not in p.stderr


def test_merge_progress_on_a_terminal_only(tmp_path):
    """A large merge redraws a progress line on a terminal; piped, stderr only gets the summary."""
    big = traced(tmp_path, "big.json", "def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)\nfib(23)")
    assert big.stat().st_size > 8 << 20
    e = dict(os.environ, PYTHONPATH=SRC)
    cmd = [*python_cmd(), "-m", "ocular", "merge", "big.json", "-o", "m.json"]
    piped = subprocess.run(cmd, cwd=tmp_path, env=e, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and "%" not in piped.stderr and "merged 1 trace" in piped.stderr
    rc, text = run_on_pty(cmd, tmp_path, e)
    assert rc == 0, text
    assert "\rocular: merging 1 traces: " in text and "% (" in text and "merged 1 trace" in text, text


def test_follow_signals_fds_and_exit_paths(tmp_path):
    """The program keeps the default ^C handler and inherited descriptors; a SIGTERM sent to ocular
    reaches it, its trace is saved (save_on_signals, tests/test_signals.py) and it dies of it as it would
    untraced; a subprocess leaving by os._exit is complete."""
    import time

    r, w = os.pipe()
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(f'''
        import os, signal, subprocess, sys, time
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, signal.getsignal(signal.SIGINT)
        os.write({w}, b"fd-ok")
        subprocess.run([sys.executable, "-c", "import os\\ndef quick(): pass\\nquick()\\nos._exit(0)"], check=True)
        def busy():
            pass
        for i in range(6000):
            busy()
        part = f"t.procs/{{os.getpid()}}.json.{{os.getpid()}}.tmp"
        while b"busy" not in open(part, "rb").read():  # until the writer has written what it was handed
            time.sleep(0.01)
        open("started", "w").close()
        while True:
            busy()
            time.sleep(0.001)
        '''))
    e = dict(os.environ, PYTHONPATH=SRC)
    p = subprocess.Popen([*python_cmd(), "-m", "ocular", "--follow", "--no-report", "--threshold", "0", "-o", "t.json",
                          "prog.py"],
                         cwd=tmp_path, env=e, pass_fds=(w,), stderr=subprocess.PIPE, text=True,
                         # as from a terminal, even when the tests run in the background with ^C ignored
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(w)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(signal.SIGTERM)  # to ocular only: passed on to the program
    err = p.communicate(timeout=120)[1]
    assert os.read(r, 100) == b"fd-ok"
    os.close(r)
    assert p.returncode == -signal.SIGTERM, err  # the program died of it, and so does ocular
    ev = load_trace(tmp_path / "t.json")["traceEvents"]
    check_balanced(ev)
    pnames, calls = processes(ev)
    assert any("busy" in c for c in calls.values()), "the program's trace was saved at SIGTERM"
    assert any("quick" in c for c in calls.values()), "the os._exit child saved its trace"
    assert "incomplete" not in err, err  # (saved whole, not salvaged from a .tmp)


def test_follow_output_names_and_old_python_noise(tmp_path):
    p = cli(["--follow", "-o", "x.tmp", "-c", "pass"], cwd=tmp_path)
    assert p.returncode == 2 and ".tmp" in p.stderr and "Traceback" not in p.stderr
    odd = os.fsdecode(b"t\xff.json")  # a non-UTF-8 name
    p = cli(["--follow", "--no-report", "-o", odd, "-c", "def f(): pass\nf()"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert os.path.exists(os.path.join(os.fsencode(tmp_path), b"t\xff.json"))
    import glob

    py2 = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/2.*/bin/python2")))
    if not py2:
        pytest.skip("no Python 2 under ~/.pyenv to check that the start-up hook stays silent in it")
    p = cli(["--follow", "--no-report", "-o", "t.json", "-c",
             f"import subprocess; subprocess.run([{py2[-1]!r}, '-c', 'print(42)'], check=True)"], cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.strip() == "42", p.stderr
    assert "sitecustomize" not in p.stderr and "not traced: Python 2.7" in p.stderr, p.stderr


def test_fork_warning_of_a_threaded_program_is_still_given(tmp_path):
    e = dict(os.environ, PYTHONPATH=SRC)
    code = ("import os, threading, time\nt = threading.Thread(target=time.sleep, args=(0.5,)); t.start()\n"
            "pid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0)\n")
    p = subprocess.run([*python_cmd(), "-W", "always", "-m", "ocular", "--no-report", "-q", "-o", "t.json", "-c",
                        code], cwd=tmp_path, env=e, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "multi-threaded" in p.stderr and "<string>:3" in p.stderr and "ocular" not in p.stderr, p.stderr
