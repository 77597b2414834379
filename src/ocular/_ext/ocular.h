/* ocular.h -- the record side's and the binding's base: Python.h (compat.h), the render side's declarations
 * (render.h), the macros and visibility every record-side file shares, then one header per unit, each
 * owned by the .c file of its name (binding.h: module.c's units).  A record-side file includes this.
 *
 * The engine is one session at a time, global to the process (CPython 3.12+ with the GIL; no
 * sub-interpreters).  Record, then render:
 *   callbacks (monitor.c) -> per-thread chunks of fixed-size records (buffer.c) -> recorder thread
 *   (recorder.c) -> the recording, a raw file of blocks (recording.h, docs/recording.md)
 *   ... after stop, or later in another process (`convert`):
 *   recording -> renderer (render.c: per-thread stack reconstruction, stats.c) -> sinks (sink_*.c); the
 *   render side has no Python API (render.h), results.c gives its results to Python
 * Per-code metadata lives on the code object (codeinfo.c); names and code bytes are copied into a
 * session table that the recorder writes into the recording.  Timing comes from clock.c.
 */
#ifndef OCULAR_H
#define OCULAR_H

#include "compat.h" /* (Python.h, and what differs between CPython versions) */
#include "render.h" /* (the render side: records, code table entries, the render, sinks, statistics) */
#include "codemap.h"
#include <pthread.h>
#include <signal.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdint.h>
#include <stddef.h>


#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#if defined(__x86_64__)
#include <x86intrin.h>
#endif
/* Everything declared below is defined in this extension (built with -fvisibility=hidden): saying so
 * lets the compiler address its globals directly instead of through the GOT (the hot path reads sess,
 * oc_fast_clock and the like on every event; 5 instructions per event of fib(20) at threshold 0).
 * OC_UNRESOLVED_OK: a file linked alone, its references to the rest left to the loader (tests). */
#ifndef OC_UNRESOLVED_OK
#pragma GCC visibility push(hidden)
#endif
#define OC_TLS __attribute__((tls_model("initial-exec")))

/* the record side's headers, one per unit, in the order they build on each other */
#include "clock.h"
#include "session.h"
#include "buffer.h"
#include "codeinfo.h"
#include "asyncio.h"
#include "recorder.h"
#include "sigsave.h"
#include "sampling.h"
#include "binding.h"

#ifndef OC_UNRESOLVED_OK
#pragma GCC visibility pop
#endif


#endif
