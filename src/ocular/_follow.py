"""``python -m ocular --follow``: trace every Python process a program starts, then merge them into one trace.

The command line becomes a small supervisor: it runs the program as a child process (``python script.py``,
``python -m module`` or ``python -c code``, with this interpreter's flags), so the program sees exactly
what it would see run directly.  The child's environment carries the session's settings
(OCULAR_FOLLOW, JSON) and puts ``ocular/_boot`` first on PYTHONPATH, whose ``sitecustomize`` calls
``boot()`` below in every Python process started from there on: the program itself, ``subprocess``
children, ``multiprocessing`` spawn workers and its forkserver.  Forked processes (``os.fork``,
multiprocessing's fork method, forkserver workers) keep tracing through Ocular's fork handling.

Every process writes ``<pid><suffix>`` (fork children ``<parent pid>.<pid><suffix>``) into the parts
directory next to the output (``trace.json`` -> ``trace.procs/``), through Ocular's usual temporary
``.<pid>.tmp`` name.  When the program has exited, the supervisor waits (up to ``--follow-wait``
seconds) for the processes still writing, merges every part into the output (``_merge.py``: all share
CLOCK_MONOTONIC, so they are aligned as they are), says which processes did not finish their trace (a
SIGKILLed child loses only what it had not yet written), removes the parts unless asked to keep them,
and exits with the program's status.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

ENV = "OCULAR_FOLLOW"
ROOT_ENV = "OCULAR_FOLLOW_ROOT"
BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")
LOG = "follow.log"


def parts_dir(output):
    """Where the per-process traces of ``output`` go: ``trace.json`` -> ``trace.procs``."""
    return os.path.splitext(output)[0] + ".procs"


def _process_title():
    """A readable name for a followed process, from the command line it was started with."""
    argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    exe = os.path.basename(argv[0]) if argv else "python"
    joined = " ".join(argv[1:])
    if "--multiprocessing-fork" in argv:
        return f"{exe} (multiprocessing spawn worker)"
    if "multiprocessing.forkserver" in joined:
        return f"{exe} (multiprocessing forkserver)"
    if "multiprocessing.resource_tracker" in joined:
        return f"{exe} (multiprocessing resource tracker)"
    title = f"{exe} {joined}".strip()
    return title if len(title) <= 100 else title[:97] + "..."


def boot():
    """Start tracing in a followed process (called by ``ocular/_boot/sitecustomize.py``)."""
    import ocular

    cfg = json.loads(os.environ[ENV])
    root = os.environ.pop(ROOT_ENV, None) == "1"  # only the program itself, not what it starts
    out = os.path.join(cfg["dir"], f"{os.getpid()}{cfg['suffix']}")
    ocular._configure(title=_process_title(), follow_log=os.path.join(cfg["dir"], LOG))
    if root:  # the report's shape (--top, --sort, --all, --loops, --tree, --report FILE)
        ocular._configure(report_format=cfg.get("report_format") or {}, report_tree=cfg.get("report_tree", False),
                          report_file=cfg.get("report_file"))
    ocular.start_tracing(mode=cfg["mode"], deinstrument_threshold=cfg["threshold"], exclude=cfg["exclude"],
                         include_only=cfg["include"], output=out, tool_id=cfg["tool_id"], format=cfg["format"],
                         report=cfg["report"] if root else False, loops=cfg.get("loops"),
                         c_functions=cfg.get("c_functions"), sampling=cfg.get("sampling", True),
                         near_zero=cfg.get("near_zero", False), save_on_signals=True)
    # as in forked children: save before os._exit.  SIGTERM and SIGHUP save the part, then the process dies
    # of the signal as it would untraced; killed otherwise (SIGKILL) it leaves its unfinished part (a .tmp),
    # which the merge salvages.
    ocular._wrap_os_exit()
    if cfg.get("usdt"):
        import ocular.usdt

        ocular.usdt.enable()


_PART = re.compile(r"^\d+(?:\.\d+)*$")


def _scan(directory, suffix):
    """(finished, unfinished): {name: path} of the parts; unfinished are '<part>.<pid>.tmp' files."""
    finished, unfinished = {}, {}
    try:
        names = os.listdir(directory)
    except OSError:
        return finished, unfinished
    for name in names:
        path = os.path.join(directory, name)
        if name.endswith(".tmp"):
            base = name[:-4]
            part, _, pid = base.rpartition(".")
            if pid.isdigit() and part.endswith(suffix) and _PART.match(part[: len(part) - len(suffix)] or "x"):
                unfinished[part] = (path, int(pid))
        elif name.endswith(suffix) and _PART.match(name[: len(name) - len(suffix)] or "x"):
            finished[name] = path
    return finished, unfinished


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"  # a zombie has finished
    except (OSError, IndexError):
        return True


def _clean(directory, suffix):
    """Remove the parts of an earlier session (only files we name so) before a new one."""
    finished, unfinished = _scan(directory, suffix)
    for path in list(finished.values()) + [p for p, _ in unfinished.values()] + [os.path.join(directory, LOG)]:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _signal_name(sig):
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def run(ns, command, say, warn=None):
    """Run ``command`` (argv after the interpreter) followed; merge; return the exit status: the program's,
    or, if the program's is 0 but a process could not save its trace or the merge failed, the command
    line's TRACE_NOT_WRITTEN (74), said in a line "ocular: the program exited 0; ...".

    ns: the parsed command line (mode, threshold, include, exclude, output, format, tool_id, report
    flags, usdt, follow_wait, keep_parts, quiet).  say(msg): prints a line unless --quiet; warn(msg):
    prints a failure even then (default: say).
    """
    warn = warn or say
    import ocular
    from . import _merge

    if sys.flags.ignore_environment or sys.flags.isolated or sys.flags.no_site:
        raise ValueError("--follow needs the environment and the site module: do not run Python with -E, -I or -S")
    out = ocular._check_output(ns.output)
    if out.lower().endswith(".gz"):
        raise ValueError(f"--follow merges JSON or .pftrace traces: {ns.output!r} would be gzip-compressed, "
                         "which the merge does not write; trace to a .json and compress it afterwards")
    if out.endswith((".tmp", ".procs")):
        raise ValueError(f"--follow: the output name {ns.output!r} ends in .tmp or .procs, which name the "
                         "per-process files; choose another name")
    fmt = ocular._format_for(out, ns.format)
    suffix = os.path.splitext(out)[1] or (".pftrace" if fmt == "perfetto" else ".json")
    directory = parts_dir(out)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"ocular: cannot create the parts directory {directory!r}: {exc.strerror}") from None
    _clean(directory, suffix)
    report = False if ns.no_report else ("json" if ns.report_json else True)
    cfg = dict(dir=directory, suffix=suffix, format=fmt, mode=ns.mode, threshold=ns.threshold,
               include=ns.include, exclude=ns.exclude, tool_id=ns.tool_id, report=report, usdt=bool(ns.usdt),
               loops=ns.loop_events, c_functions=ns.c_functions, sampling=ns.sampling, near_zero=ns.near_zero,
               report_format=dict(ocular._run.report_format), report_tree=bool(ocular._run.report_tree),
               report_file=ocular._run.report_file)
    env = dict(os.environ)
    env[ENV] = json.dumps(cfg)
    env[ROOT_ENV] = "1"
    env["PYTHONPATH"] = BOOT_DIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    argv = [sys.executable] + subprocess._args_from_interpreter_flags() + command

    # The program shares our process group: what the terminal sends (^C, ^\\, hangup) reaches it directly,
    # so those are only noted here (a Python handler, not SIG_IGN, which the program would inherit).
    # TERM, USR1 and USR2 sent to ocular's pid are passed on.  Any of them ends the wait for the rest.
    forwarded = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
    noted = (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
    old = {s: signal.getsignal(s) for s in forwarded + noted}
    proc = None
    stop = []

    def forward(sig, frame):
        stop.append(sig)
        if sig in forwarded and proc is not None and proc.poll() is None:
            proc.send_signal(sig)

    try:
        for s in forwarded + noted:
            signal.signal(s, forward)
        try:  # close_fds=False: the program inherits every descriptor it would inherit run directly
            proc = subprocess.Popen(argv, env=env, close_fds=False)
        except OSError as exc:
            raise OSError(exc.errno, f"ocular: cannot start {sys.executable!r}: {exc.strerror}") from None
        rc = proc.wait()
        stop.clear()
        _wait_for_rest(directory, suffix, ns.follow_wait, say, stop)
    finally:
        for s, h in old.items():
            signal.signal(s, h)

    finished, unfinished = _scan(directory, suffix)
    running = {pid for _, pid in unfinished.values() if _alive(pid)}
    inputs = []
    for name, path in finished.items():
        inputs.append((path, _part_info(name[: len(name) - len(suffix)], proc.pid, rc, True, None)))
    for part, (path, pid) in unfinished.items():
        info = _part_info(part[: len(part) - len(suffix)], proc.pid, rc, False, pid)
        inputs.append((path, info))
    inputs.sort(key=lambda item: (not item[1]["root"], _ctime(item[0])))
    failed = 0
    for line in _log_lines(directory):
        if ": not saved: " in line:
            failed += 1
            warn(f"ocular: {line}")
        else:
            say(f"ocular: {line}")
    if not any(i["complete"] or os.path.getsize(p) >= len(_merge.JSON_HEADER) for p, i in inputs):
        why = "; ".join(f"pid {i['pid']}: {i['note']}" for _, i in inputs if not i["complete"])
        warn(f"ocular: no trace was written: no process finished its trace or wrote any event"
             f"{' (' + why + ')' if why else ''}")
        return _status(rc) or _not_written(failed, warn, "no trace was written")
    try:
        parts = _merge.merge([(p, i) for p, i in inputs], out, format=fmt, trusted=True, skip_bad=True)
    except (OSError, ValueError) as exc:
        warn(f"ocular: merging the per-process traces into {out!r} failed: {_text(exc)}; "
             f"they are kept in {directory}")
        return _status(rc) or _not_written(1, warn, f"merging the per-process traces failed: {_text(exc)}")
    size = os.path.getsize(out)
    events = sum(p["events"] or 0 for p in parts)
    what = (f"{events} events, {sum(p['dropped'] or 0 for p in parts)} dropped" if fmt == "json"
            else f"{sum(p['packets'] or 0 for p in parts)} packets")
    say(f"ocular: trace written to {out} ({len(parts)} process{'es' if len(parts) != 1 else ''}, "
        f"{size / 1e6:.1f} MB, {what})")
    if failed:
        warn(f"ocular: {failed} traced process{'es' if failed != 1 else ''} could not save "
             f"{'their' if failed != 1 else 'its'} trace (above): missing from {out}")
    for p in parts:
        if p.get("skipped"):
            say(f"ocular: left out: pid {p['pid']}: {p['note']}")
        elif not p["complete"]:
            say(f"ocular: incomplete: pid {p['pid']}: {p['note']} (what it had written is in the trace)")
    if ns.keep_parts:
        say(f"ocular: per-process traces kept in {directory}")
    elif running:  # their files are still open: leave them, and the directory, to those processes
        say(f"ocular: the parts of the processes still running are left in {directory}")
    else:
        for path in [p["path"] for p in parts] + [os.path.join(directory, LOG)]:
            try:
                os.unlink(path)
            except OSError:
                pass
        try:
            os.rmdir(directory)
        except OSError:
            pass
    return _status(rc) or _not_written(failed, warn, f"{failed} traced process{'es' if failed != 1 else ''} could "
                                                     f"not save {'their' if failed != 1 else 'its'} trace")


def _not_written(failed, warn, cause):
    """The status of a program that exited 0 when Ocular failed (failed > 0): the command line's own, said."""
    if not failed:
        return 0
    from . import _TRACE_NOT_WRITTEN

    warn(f"ocular: the program exited 0; the trace could not be written: {cause}")
    return _TRACE_NOT_WRITTEN


def _text(exc):
    """An exception's text without the 'ocular: ' our own errors start with (the line says it once)."""
    text = str(exc)
    if isinstance(exc, OSError) and isinstance(exc.strerror, str) and exc.strerror.startswith("ocular: "):
        text = exc.strerror  # (ours says what happened itself: no '[Errno N] ...: path' around it)
    return text[len("ocular: "):] if text.startswith("ocular: ") else text


def _part_info(stem, root_pid, rc, complete, tmp_pid):
    pids = [int(x) for x in stem.split(".")]
    pid = pids[-1]
    info = dict(pid=pid, complete=complete, root=pid == root_pid and len(pids) == 1)
    if len(pids) > 1:
        info["label"] = f"fork of {pids[-2]}"
    if not complete:
        if info["root"] and rc is not None and rc < 0:
            info["note"] = f"killed by {_signal_name(-rc)}"
        elif _alive(pid):
            info["note"] = "still running when the trace was merged"
        else:
            info["note"] = "ended without finishing its trace (killed by a signal?)"
    return info


def _ctime(path):
    try:
        return os.stat(path).st_ctime
    except OSError:
        return 0.0


def _wait_for_rest(directory, suffix, limit, say, stop):
    """Wait for the processes that are still writing a part (the program's children outlive it); a
    signal (``stop`` not empty) ends the wait."""
    start = time.monotonic()
    told = False
    while True:
        _, unfinished = _scan(directory, suffix)
        live = sorted(pid for _, pid in unfinished.values() if _alive(pid))
        if not live:
            return
        waited = time.monotonic() - start
        if waited >= limit or stop:
            why = f"after {limit:g} s" if not stop else f"at {_signal_name(stop[0])}"
            say(f"ocular: {len(live)} traced process{'es' if len(live) != 1 else ''} still running {why} "
                f"(pid {', '.join(map(str, live))}): merging what they wrote so far")
            return
        if not told and waited > 1.0:
            say(f"ocular: waiting for {len(live)} traced process{'es' if len(live) != 1 else ''} to finish "
                f"(pid {', '.join(map(str, live))}; at most {limit:g} s, --follow-wait)")
            told = True
        time.sleep(0.05)


def _log_lines(directory):
    try:
        with open(os.path.join(directory, LOG), encoding="utf-8", errors="replace") as f:
            return [f"pid {line.rstrip()}" for line in f if line.strip()]
    except OSError:
        return []


def _status(rc):
    """The program's exit status; a program killed by a signal makes us die of the same signal."""
    if rc >= 0:
        return rc
    sig = -rc
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        signal.signal(sig, signal.SIG_DFL)
    except (OSError, ValueError):
        pass  # SIGKILL and SIGSTOP cannot be caught anyway
    try:
        os.kill(os.getpid(), sig)
    except OSError:
        pass
    return 128 + sig
