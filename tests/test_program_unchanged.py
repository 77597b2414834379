"""What the traced program sees of its own process is what it would see without Ocular: the signals it
blocks stay its own, its file descriptors (0-2 closed at start, or every descriptor closed by a daemon)
are never Ocular's, and the trace survives both."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import SRC, check_balanced, load_trace, names, python_cmd

FIB = """
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
"""


def run(args, cwd, code=None, shell_redirect="", timeout=120):
    env = dict(os.environ, PYTHONPATH=SRC)
    cmd = [*python_cmd(), *args]
    if shell_redirect:  # (a descriptor closed before the interpreter starts: only a shell does that)
        cmd = ["sh", "-c", 'exec "$@" ' + shell_redirect, "sh", *cmd]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("output", ["t.json", "t.pftrace"])
def test_a_signal_the_program_blocks_waits_for_it(tmp_path, output):
    """The program blocks SIGUSR1 to sigwait() for it.  A process-directed signal goes to a thread that
    does not block it: Ocular's threads (recorder, renderer, sampling timer) must block every signal, or
    one of them takes it and its default action kills the process (exit -SIGUSR1, trace lost)."""
    (tmp_path / "s.py").write_text(FIB + textwrap.dedent("""
        import os, signal, sys
        import ocular
        ocular.start_tracing(output=sys.argv[1], report=False)  # its threads start here, SIGUSR1 not blocked
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        fib(18)
        os.kill(os.getpid(), signal.SIGUSR1)
        got = signal.sigwait({signal.SIGUSR1})
        ocular.stop_tracing()
        print("got", signal.Signals(got).name)
    """))
    p = run(["s.py", output], tmp_path)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert p.stdout.strip() == "got SIGUSR1"
    assert (tmp_path / output).stat().st_size > 0


def test_a_daemon_that_closes_every_descriptor_keeps_its_files_and_the_trace(tmp_path):
    """closerange(3, ...) closes the recording's descriptor (and the live renderer's); the program's
    next open() gets the same number.  Ocular must not write its recording into the program's file nor
    close it at stop, and the trace must still be whole (the recording is opened again by its name)."""
    (tmp_path / "d.py").write_text(FIB + textwrap.dedent("""
        import os
        fib(12)
        os.closerange(3, 1024)
        log = open("log.txt", "w", buffering=1)
        log.write("line 1\\n")
        fib(20)  # ~65,000 records: the recorder writes many times while the log is open
        log.write("line 2\\n")
        fib(12)
        log.close()
        print("done")
    """))
    p = run(["-m", "ocular", "--threshold", "0", "-q", "--no-report", "-o", "t.json", "d.py"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "done"
    assert "Bad file descriptor" not in p.stderr, p.stderr
    assert (tmp_path / "log.txt").read_bytes() == b"line 1\nline 2\n"
    events = load_trace(tmp_path / "t.json")["traceEvents"]
    check_balanced(events)
    assert names(events).count("fib") == 465 + 21891 + 465  # every call of fib(12), fib(20), fib(12)


@pytest.mark.parametrize("closed", ["1", "2"])
def test_started_with_stdout_or_stderr_closed_the_program_still_finds_them_closed(tmp_path, closed):
    """With fd 1 (or 2) closed at start, open() would give the recording that number: the program's
    writes to it would then succeed into the recording and destroy it."""
    (tmp_path / "w.py").write_text(FIB + textwrap.dedent(f"""
        import os
        fib(15)
        try:
            os.write({closed}, b"x" * 100)
            result = "written"
        except OSError as exc:
            result = exc.strerror
        fib(15)
        with open("result.txt", "w") as f:
            f.write(result)
    """))
    p = run(["-m", "ocular", "--threshold", "0", "-q", "--no-report", "-o", "t.json", "w.py"], tmp_path,
            shell_redirect=f"{closed}>&-")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "result.txt").read_text() == "Bad file descriptor"
    events = load_trace(tmp_path / "t.json")["traceEvents"]
    check_balanced(events)
    assert names(events).count("fib") == 2 * 1973


def test_the_script_sees_the_path_and_file_python_gives_it(tmp_path):
    """sys.path[0] is the script's directory with symbolic links resolved (a tool linked into ~/bin
    imports the modules beside its real file), nothing else is put before the program's own path (not
    the working directory that `-m ocular` added), __file__ is absolute (Python 3.9+), and with -P
    (PYTHONSAFEPATH) no directory is added at all."""
    (tmp_path / "real").mkdir()
    (tmp_path / "bin").mkdir()
    (tmp_path / "real" / "helper.py").write_text("WHERE = 'real'\n")
    (tmp_path / "real" / "tool.py").write_text(textwrap.dedent("""
        import json, os, sys
        import helper
        os.chdir("/")
        print(json.dumps({"path": sys.path, "file": __file__, "helper": helper.WHERE}))
    """))
    os.symlink(tmp_path / "real" / "tool.py", tmp_path / "bin" / "tool")
    plain = run([str(tmp_path / "bin" / "tool")], tmp_path)
    traced = run(["-m", "ocular", "-q", "--no-report", "-o", str(tmp_path / "t.json"), "bin/tool"], tmp_path)
    assert plain.returncode == 0 and traced.returncode == 0, (plain.stderr, traced.stderr)
    want, got = json.loads(plain.stdout), json.loads(traced.stdout)
    assert got["helper"] == "real" and got["path"][0] == want["path"][0] == str(tmp_path / "real")
    assert str(tmp_path) not in got["path"]  # (the working directory of `-m ocular`)
    assert got["file"] == want["file"] == str(tmp_path / "bin" / "tool")
    (tmp_path / "safe.py").write_text("import json, sys\nprint(json.dumps(sys.path))\n")
    plain = run(["-P", "safe.py"], tmp_path)
    traced = run(["-P", "-m", "ocular", "-q", "--no-report", "-o", "t.json", "safe.py"], tmp_path)
    assert str(tmp_path) not in json.loads(plain.stdout)
    assert str(tmp_path) not in json.loads(traced.stdout), traced.stdout


def test_a_directory_or_zip_sees_the_path_python_gives_it(tmp_path):
    """`python -m ocular DIR` and `python -m ocular APP.zip` as `python DIR`, `python APP.zip`: sys.path[0]
    is the directory or zip (absolute, as given otherwise: `./app/` stays `<cwd>/./app/`) in place of the
    runner's working directory, also with -P; the rest of sys.path, argv[0], __file__, __package__ and
    __spec__ are Python's.  (The working directory stayed on sys.path after the directory, so a module
    there was importable; a zip file was compiled as a script: SyntaxError.)"""
    import zipfile

    main = textwrap.dedent("""
        import json, sys
        def work():
            return sum(range(10))
        work()
        try:
            import shadow_in_cwd
            shadow = True
        except ImportError:
            shadow = False
        import beside
        print(json.dumps(dict(path=sys.path, argv0=sys.argv[0], file=__file__, package=__package__,
                              spec=__spec__.name, beside=beside.WHERE, shadow=shadow)))
    """)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text(main)
    (tmp_path / "app" / "beside.py").write_text("WHERE = 'app'\n")
    with zipfile.ZipFile(tmp_path / "app.zip", "w") as z:
        z.writestr("__main__.py", main)
        z.writestr("beside.py", "WHERE = 'zip'\n")
    (tmp_path / "shadow_in_cwd.py").write_text("")
    for target in ("app", "./app/", "app.zip", str(tmp_path / "app.zip")):
        for flags in ([], ["-P"]):
            plain = run([*flags, target], tmp_path)
            traced = run([*flags, "-m", "ocular", "-q", "--no-report", "-o", "t.json", target], tmp_path)
            assert plain.returncode == 0 and traced.returncode == 0, (target, plain.stderr, traced.stderr)
            want, got = json.loads(plain.stdout), json.loads(traced.stdout)
            assert got == want, (target, flags)
            assert want["path"][0] == os.path.join(str(tmp_path), target) and not want["shadow"]
            assert "work" in names(load_trace(tmp_path / "t.json")["traceEvents"])
    (tmp_path / "empty").mkdir()
    p = run(["-m", "ocular", "-q", "--no-report", "-o", "t.json", "empty"], tmp_path)
    assert p.returncode == 2 and p.stderr == f"python -m ocular: error: can't find '__main__' module in " \
        f"{str(tmp_path / 'empty')!r}\n", p.stderr


def test_an_uncaught_exception_sets_sys_last_exc(tmp_path):
    """Exit handlers that look at how the program ended (sys.last_exc, last_value, ...) see it."""
    (tmp_path / "e.py").write_text(textwrap.dedent("""
        import atexit, sys
        atexit.register(lambda: print("last", repr(sys.last_value), sys.last_exc is sys.last_value))
        raise ValueError("main failed")
    """))
    p = run(["-m", "ocular", "-q", "--no-report", "-o", "t.json", "e.py"], tmp_path)
    assert p.returncode == 1
    assert p.stdout.strip() == "last ValueError('main failed') True", p.stdout
    assert p.stderr.count("ValueError: main failed") == 1


def test_a_program_that_execs_keeps_its_trace(tmp_path):
    """os.execv() replaces the process: no exit handler runs.  The trace of what ran before is saved
    (it was lost, its recording left as a .tmp), and the new image runs as it would."""
    (tmp_path / "x.py").write_text(textwrap.dedent("""
        import os, sys
        def before_exec():
            return sum(range(1000))
        before_exec()
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-c", "print('new image')"])
    """))
    p = run(["-m", "ocular", "-q", "--no-report", "-o", "t.json", "x.py"], tmp_path)
    assert p.returncode == 0 and p.stdout == "new image\n", (p.stdout, p.stderr)
    events = load_trace(tmp_path / "t.json")["traceEvents"]
    check_balanced(events)
    assert "before_exec" in names(events)
    assert sorted(os.listdir(tmp_path)) == ["t.json", "x.py"]  # no recording left behind


def test_a_failed_exec_leaves_tracing_on(tmp_path):
    """os.execvp tries each PATH entry in turn: a try that fails (no such file) neither stops tracing nor
    prints the report; the program goes on traced and its trace is saved at exit."""
    (tmp_path / "y.py").write_text(textwrap.dedent("""
        import os, ocular
        try:
            os.execvp("ocular-no-such-program", ["ocular-no-such-program"])
        except FileNotFoundError:
            pass
        def after_failed_exec():
            return ocular.is_tracing()
        print(after_failed_exec())
    """))
    p = run(["-m", "ocular", "-q", "--no-report", "-o", "t.json", "y.py"], tmp_path)
    assert p.returncode == 0 and p.stdout == "True\n", (p.stdout, p.stderr)
    assert "after_failed_exec" in names(load_trace(tmp_path / "t.json")["traceEvents"])


def test_sys_last_exc_after_ctrl_c_is_the_programs_own(tmp_path):
    """An uncaught ^C: exit handlers see the program's KeyboardInterrupt (with its message), not a bare
    one raised to end the process by SIGINT."""
    (tmp_path / "k.py").write_text(textwrap.dedent("""
        import atexit, sys
        atexit.register(lambda: print("last", repr(sys.last_exc), flush=True))
        raise KeyboardInterrupt("the program's")
    """))
    p = run(["-m", "ocular", "-q", "--no-report", "-o", "t.json", "k.py"], tmp_path)
    assert p.returncode == -signal.SIGINT, p.stderr
    assert p.stdout.strip() == "last KeyboardInterrupt(\"the program's\")", p.stdout


WARN_ONCE = """
import os, sys, threading, time, warnings
def show(message, category, filename, lineno, file=None, line=None):
    sys.stdout.write(f"{'child' if os.getpid() != parent else 'parent'}: {category.__name__} {message} (line {lineno})\\n")
    sys.stdout.flush()
warnings.showwarning = show
parent = os.getpid()
def warn():
    warnings.warn("shown once per location", UserWarning)  # action "default"
    warnings.warn("shown once", RuntimeWarning)  # action "once" (set below)
warnings.simplefilter("once", RuntimeWarning)
warn()
for threaded in (False, True):
    if threaded:  # the program's own thread: CPython's fork warning is given (once, from the fork's line)
        t = threading.Thread(target=time.sleep, args=(0.5,))
        t.start()
    pid = os.fork()
    warn()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
t.join()
warn()
print("done")
"""


def test_fork_keeps_the_warning_registries(tmp_path):
    """Each os.fork() under Ocular emptied every warning registry (its fork wrapper used catch_warnings(),
    which declares the filters changed), so "once"/"default" warnings given before a fork were given again
    after it, in the parent and in each child.  Traced, the program prints what it prints untraced."""
    (tmp_path / "w.py").write_text(WARN_ONCE)
    plain = run(["w.py"], tmp_path)
    traced = run(["-m", "ocular", "-q", "--no-report", "-o", "t.json", "w.py"], tmp_path)
    assert plain.returncode == 0 and traced.returncode == 0, (plain.stderr, traced.stderr)
    assert plain.stdout.count("shown once") == 2 and "multi-threaded" in plain.stdout, plain.stdout
    assert re.sub(r"pid=\d+", "pid=N", traced.stdout) == re.sub(r"pid=\d+", "pid=N", plain.stdout), traced.stdout


SUPPORTS = """
import os
for s in ("supports_fd", "supports_dir_fd", "supports_effective_ids", "supports_follow_symlinks", "supports_bytes_environ"):
    value = getattr(os, s)
    if isinstance(value, set):  # the functions os has now that are in the set
        print(s, len(value), sorted(n for n in dir(os) if callable(getattr(os, n)) and getattr(os, n) in value))
    else:
        print(s, value)
"""


def test_the_supports_sets_are_unchanged(tmp_path):
    """Ocular replaces os.execv and os.execve (to save the trace before an exec): the replacements must
    still be in os.supports_fd (a set of os's functions, built at import), which code tests before
    calling os.execve(fd, ...); every supports_* set reads as it does untraced."""
    (tmp_path / "s.py").write_text(SUPPORTS)
    plain = run(["s.py"], tmp_path)
    traced = run(["-m", "ocular", "-q", "--no-report", "-o", "t.json", "s.py"], tmp_path)
    assert plain.returncode == 0 and traced.returncode == 0, (plain.stderr, traced.stderr)
    assert "'execve'" in plain.stdout.split("supports_fd")[1].splitlines()[0], plain.stdout
    assert traced.stdout == plain.stdout


@pytest.mark.skipif(os.execve not in os.supports_fd, reason="no fexecve here")
def test_a_program_that_execs_a_descriptor_keeps_its_trace(tmp_path):
    """os.execve(fd, argv, env) (fexecve) failed under Ocular (TypeError: the exec wrapper called
    os.access on the descriptor).  It runs the new image, and the trace of what ran before is saved as
    with a path."""
    (tmp_path / "x.py").write_text(textwrap.dedent("""
        import os, sys
        def before_exec():
            return sum(range(1000))
        before_exec()
        fd = os.open(sys.executable, os.O_RDONLY)
        sys.stdout.flush()
        os.execve(fd, [sys.executable, "-c", "print('new image')"], dict(os.environ))
    """))
    p = run(["-m", "ocular", "-q", "--no-report", "-o", "t.json", "x.py"], tmp_path)
    assert p.returncode == 0 and p.stdout == "new image\n", (p.stdout, p.stderr)
    events = load_trace(tmp_path / "t.json")["traceEvents"]
    check_balanced(events)
    assert "before_exec" in names(events)
    assert sorted(os.listdir(tmp_path)) == ["t.json", "x.py"]  # no recording left behind
