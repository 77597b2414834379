"""One memory/throughput measurement in a fresh interpreter (bench/memory.py).

usage: python -m bench._memory_child RESULT_FILE (untraced|traced|ring) REPS OUTPUT [FORMAT [RING]]

traced: the whole recording goes to a file, rendered into OUTPUT at stop;
ring: the flight recorder, ``start_tracing(ring=RING)`` (default "64M"): only
the newest part of the recording is kept, in memory, and rendered at stop.

The workload, repeated REPS times: recursive fib(20) (21,891 calls: PY_START,
PY_RETURN and one BRANCH each) and a 10,000-iteration loop (a JUMP and a
BRANCH per iteration), about 85,700 events per repetition at threshold 0.

Peak RSS: this process forks a worker that runs the workload (and, traced,
imports Ocular and traces with ``deinstrument_threshold=0`` into OUTPUT),
then reaps it with ``os.wait4`` and takes the worker's ``ru_maxrss``.  The
extra process is needed because Linux carries a process's RSS high-water
mark across fork and exec: a child spawned by the runner (a bigger Python
process) reports at least the runner's own RSS as its ru_maxrss.  A worker
forked from this small process starts from this process's RSS, the same
for both modes.  The worker also reads its own ``VmHWM`` from
/proc/self/status at the end, as a cross-check, and this process samples
the worker's RssAnon and RssFile every 10 ms while it runs (their peaks):
the renderer maps the recording file, whose pages count in RSS as
file-backed page cache, not as memory the process allocated.

Traced, the worker also reports what stop_tracing() returns (events, bytes,
dropped, pauses) and the recorder thread's CPU time, measured as process CPU minus
main-thread CPU over the session (as in bench/_encode_child.py).
"""

from __future__ import annotations

import os
import sys
import time

LOOP = 10_000


def _fib(n):
    if n < 2:
        return n
    return _fib(n - 1) + _fib(n - 2)


def workload(reps):
    total = 0
    for _ in range(reps):
        total += _fib(20)
        for i in range(LOOP):
            total += i & 7
    return total


def vm_hwm_bytes():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def worker(mode, reps, output, fmt, ring):
    out = {"mode": mode, "reps": reps}
    if mode in ("traced", "ring"):
        import ocular

        p0, m0 = time.process_time(), time.thread_time()
        w0 = time.perf_counter()
        ocular.start_tracing(output=output, deinstrument_threshold=0, report=False,
                             format=fmt, ring=ring if mode == "ring" else None)
        c0 = time.thread_time()
        out["result"] = workload(reps)
        out["work_cpu_s"] = time.thread_time() - c0
        w1 = time.perf_counter()
        res = ocular.stop_tracing()
        w2 = time.perf_counter()
        p1, m1 = time.process_time(), time.thread_time()
        out.update(events=res["events"], bytes=res["bytes"], dropped=res["dropped"],
                   pauses=res.get("pauses"), recording_bytes=res.get("recording_bytes"),
                   threads=res["threads"], work_s=w1 - w0, stop_s=w2 - w1,
                   writer_cpu_s=(p1 - p0) - (m1 - m0), main_cpu_s=m1 - m0,
                   file_bytes=os.path.getsize(output))
    else:
        w0 = time.perf_counter()
        c0 = time.thread_time()
        out["result"] = workload(reps)
        out["work_cpu_s"] = time.thread_time() - c0
        out["work_s"] = time.perf_counter() - w0
    out["vm_hwm"] = vm_hwm_bytes()
    return out


def main(argv):
    if len(argv) not in (4, 5, 6):
        raise SystemExit(__doc__)
    result_path, mode, reps, output = argv[0], argv[1], int(argv[2]), argv[3]
    fmt = argv[4] if len(argv) >= 5 else "perfetto"
    ring = argv[5] if len(argv) == 6 else "64M"
    if mode not in ("untraced", "traced", "ring"):
        raise SystemExit("mode must be untraced, traced or ring")
    part = result_path + ".worker"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            with open(part, "w") as f:
                f.write(repr(worker(mode, reps, output, fmt, ring)))
            status = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    # While the worker runs, sample its resident memory by kind from /proc (this process is
    # another process: the worker's GIL and its C code holding it do not stop the sampling).
    # File-backed pages (RssFile) are the mapped recording the renderer reads at stop: page cache
    # the kernel can reclaim; anonymous pages (RssAnon) are what the process itself allocated.
    peak = {"RssAnon": 0, "RssFile": 0}
    while True:
        done, status, rusage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        try:
            with open("/proc/{}/status".format(pid)) as f:
                for line in f:
                    key = line.split(":", 1)[0]
                    if key in peak:
                        peak[key] = max(peak[key], int(line.split()[1]) * 1024)
        except (OSError, ValueError, IndexError):
            pass
        time.sleep(0.01)
    code = os.waitstatus_to_exitcode(status)
    if code != 0 or not os.path.exists(part):
        print("worker failed with status {}".format(code), file=sys.stderr)
        return 1
    import ast  # after the fork: the worker's memory does not include it

    with open(part) as f:
        out = ast.literal_eval(f.read())
    os.unlink(part)
    out["ru_maxrss"] = rusage.ru_maxrss * 1024  # KiB on Linux
    out["peak_anon"], out["peak_file"] = peak["RssAnon"], peak["RssFile"]  # sampled every 10 ms
    out["parent_hwm"] = vm_hwm_bytes()
    with open(result_path, "w") as f:
        f.write(repr(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
