"""Recorder-thread cost of one traced run, in a fresh interpreter (bench/e2e.py).

usage: python -m bench._encode_child RESULT_FILE OUTPUT THRESHOLD SCRIPT [ARGS...]

Runs SCRIPT as ``__main__`` (runpy, like ``python -m ocular`` does) between
``ocular.start_tracing(output=OUTPUT, deinstrument_threshold=THRESHOLD,
report=False)`` and ``ocular.stop_tracing()``, and measures the CPU time of
Ocular's recorder thread without looking inside the engine:

    recorder CPU = (process CPU time) - (main thread CPU time)

both taken just before start_tracing() and just after stop_tracing() returns
(``time.process_time()`` counts every thread of the process, including
threads that have ended, such as the recorder joined by stop_tracing();
``time.thread_time()`` counts the calling thread only).  The scripts run
here start no threads of their own, and stop_tracing() renders the
recording on the calling thread, so the difference is the recorder's:
copying chunks of records into the recording and its write(2) calls.  Its
waits cost no CPU.

The result (a Python literal) has events, bytes, dropped from
stop_tracing(), the writer's CPU seconds, the main thread's CPU seconds,
the wall time of the script and of stop_tracing().
"""

from __future__ import annotations

import os
import runpy
import sys
import time


def main(argv):
    if len(argv) < 4:
        raise SystemExit(__doc__)
    result_path, output, threshold, script = argv[0], argv[1], int(argv[2]), argv[3]
    import ocular

    sys.argv = [script] + argv[4:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    p0, m0 = time.process_time(), time.thread_time()
    w0 = time.perf_counter()
    ocular.start_tracing(output=output, deinstrument_threshold=threshold, report=False)
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        w1 = time.perf_counter()
        res = ocular.stop_tracing()
        w2 = time.perf_counter()
        p1, m1 = time.process_time(), time.thread_time()
    out = {
        "events": res["events"],
        "bytes": res["bytes"],
        "dropped": res["dropped"],
        "writer_cpu_s": (p1 - p0) - (m1 - m0),  # the recorder's (the key predates it)
        "main_cpu_s": m1 - m0,
        "work_s": w1 - w0,
        "stop_s": w2 - w1,
    }
    with open(result_path, "w") as f:
        f.write(repr(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
