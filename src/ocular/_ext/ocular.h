/* ocular.h -- the record side's and the binding's declarations (the render side's are render.h's, which
 * this includes).
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
 * lets the compiler address its globals directly instead of through the GOT (the hot path reads S,
 * oc_fast_clock and the like on every event; 5 instructions per event of fib(20) at threshold 0).
 * OC_UNRESOLVED_OK: a file linked alone, its references to the rest left to the loader (tests). */
#ifndef OC_UNRESOLVED_OK
#pragma GCC visibility push(hidden)
#endif
#define OC_TLS __attribute__((tls_model("initial-exec")))

/* ---- chunks and per-thread buffers (buffer.c) ---- */
#define OC_CHUNK_RECS 1024  /* 16 KiB: each live thread holds one */
#define OC_MAX_QUEUED 1024  /* 16 MiB of full chunks waiting for the recorder; beyond that the hot path
                               waits (a recorded pause): only when the disk cannot keep up */
#define OC_WAKE_BATCH 8     /* full chunks that wake a sleeping recorder (else it looks every 20 ms) */

typedef struct oc_chunk {
    struct oc_chunk *next;
    uint32_t thread_idx;
    uint32_t n;
    long tid;
    int ended;             /* the thread's last chunk (handed over as it exits): its end is recorded after it */
    oc_rec recs[OC_CHUNK_RECS];
} oc_chunk;

typedef struct oc_tbuf {
    oc_rec *pos, *end;     /* end may sit below limit while the thread's name is still unknown */
    oc_rec *limit;
    oc_chunk *chunk;
    uint32_t thread_idx;
    uint32_t gen;
    uint32_t name_tries;
    int alive;             /* owned by a live thread */
    int in_slow;           /* re-entrancy guard for the slow path */
    uint64_t *open;        /* threshold > 0: this thread's recorded activations not yet ended, innermost
                              last, each depth << 32 | code id (monitor.c) */
    uint32_t nopen, capopen;
    uint32_t step_depth;   /* asyncio.c: frame depth of the coroutine that began this thread's current
                              task step (0: none) */
    struct oc_tbuf *next_all;
} oc_tbuf;

typedef struct {
    oc_tbuf *buf;
    uint32_t gen;
    int muted;             /* this thread records nothing (the CLI's own frames, Ocular's own renders) */
    /* the last recorded C call, until its C_RETURN times it (monitor.c, the C call site rule) */
    void *ccall_ex;        /* its code's extra (NULL: none pending) */
    uint32_t ccall_unit;   /* its call site */
    uint64_t ccall_ts;     /* its start */
} oc_tls_t;
extern OC_TLS __thread oc_tls_t oc_tls;

typedef struct oc_codeextra {
    uint32_t gen;
    uint32_t id;
    uint32_t flags;
    uint32_t enters;
    uint32_t nunits;
    uint32_t sites_disabled; /* a jump or instruction site of this code answered DISABLE */
    uint32_t late_ends;      /* unrecorded ends seen while return sites were kept armed (capped) */
    uint32_t probe;          /* adaptive: 1 once an instruction probe was armed on this code (2: it failed) */
    uint32_t insn_done;      /* an instruction site passed the threshold: no more INSTRUCTION records */
    uint32_t back_jumps;     /* threshold 0 with probes: backward jumps seen, up to sess.probe_after */
    PyObject *code;          /* the code object this is the extra of (borrowed: it frees this) */
    uint32_t open;           /* threshold > 0: recorded activations not yet ended, on every thread */
    uint32_t calls;          /* C functions: 1 once CALL was armed on this code (a local event), 2 if it is
                                left unarmed (it names sys.setprofile: codeinfo.c arm_calls) */
    uint32_t *edge_hits;   /* per unit: JUMP/BRANCH hits at this source; lazily allocated */
    uint32_t *insn_hits;   /* per unit: INSTRUCTION hits; lazily allocated */
    uint32_t *call_hits;   /* per unit: CALL hits of C functions at this call site; lazily allocated */
    uint64_t *call_ticks;  /* per unit, 3 each: ticks of this site's timed C calls and how many, since its
                              last verdict, and the C function it calls (its id + 1; UINT64_MAX: several)
                              (allocated with call_hits) */
} oc_codeextra;

#define OC_PAGE_BITS 10
#define OC_PAGE_SIZE (1u << OC_PAGE_BITS)
#define OC_MAX_PAGES 4096

/* ---- the session ---- */
typedef struct {
    int active;
    uint32_t gen;
    int precise;
    uint32_t threshold;    /* hits of a jump, instruction or C call site before it answers DISABLE (0: never) */
    uint32_t stall_ms;     /* an asyncio task step this long is a loop stall (the OPTIONS block; 0: default) */
    uint32_t fn_threshold; /* enters of a function before its start answers DISABLE: the threshold in
                              near-zero mode, else 0 (function events are never disabled) */
    uint64_t ccall_keep_ticks; /* a C call site whose timed calls average this long stays instrumented */
    int calibrating;       /* owncost.c runs its functions: the filters let them in */
    uint64_t own_cost[16]; /* owncost.c: ticks one event costs, by the kind of the record after it */
    atomic_int own_cost_set; /* own_cost is measured (the recorder writes it once: OC_BLK_OWNCOST) */
    int write_json;        /* a trace file is written (either format) */
    int format;            /* OC_FORMAT_JSON or OC_FORMAT_PERFETTO */
    PyObject *disable;     /* sys.monitoring.DISABLE */
    oc_codemap codes;      /* code object -> its oc_codeextra (codemap.c); excluded ones included */

    /* filters: NULL-terminated arrays of UTF-8 strings */
    char **include_only;
    char **exclude;
    char *own_dir;         /* Ocular's own package directory, always excluded */
    uint8_t cache_entries[256];

    /* code table */
    oc_codeent *pages[OC_MAX_PAGES];
    uint32_t ncodes;

    /* threads */
    oc_thread *threads;    /* grown under the registry lock; writer reads it only after the final flush */
    uint32_t nthreads, cap_threads;
    unsigned long main_ident;

    /* clock */
    uint64_t tsc0, mono0_ns;
    double ns_per_tick;    /* the rate from knee_tsc on: set by the final calibration (~20 ms in) */
    int calibrated;        /* the final calibration is done */
    double early_npt;      /* the rate before knee_tsc: set by the early calibration (~2 ms in) */
    uint64_t knee_tsc;     /* where early_npt gives way to ns_per_tick (UINT64_MAX: one rate throughout) */
    int early_calibrated;  /* the early calibration is done: timestamps before knee_tsc are final */

    /* output */
    char *out_path, *tmp_path;
    char *process_name;    /* JSON-escaped */
    char *process_name_raw;
    long pid;

    /* writer and chunk traffic: guarded by lock */
    pthread_mutex_t lock;
    pthread_cond_t cond_writer;   /* writer waits for work */
    pthread_cond_t cond_free;     /* producers wait for the queue to shrink */
    oc_chunk *q_head, *q_tail;
    oc_chunk *free_list;
    uint32_t nchunks;             /* allocated: live threads' chunks + queued + free */
    uint32_t nqueued;
    uint32_t max_queued;          /* OC_MAX_QUEUED (OCULAR_TEST_RECORDER_QUEUE in tests) */
    int recorder_idle;            /* the recorder waits for work (lock held to read or write) */
    uint32_t nfree;
    uint32_t ncodes_pub;          /* code table entries published to the recorder (set under lock
                                     by a thread holding the GIL) */
    uint64_t pauses;              /* times a thread waited for the recorder */
    uint32_t threads_named;       /* bumped (under lock) whenever a thread gets its name */
    uint32_t threads_named_seen;  /* the recorder's copy */
    char *rec_path;               /* the recording being written (output.pid.rec, or the .ocular tmp) */
    size_t ring_bytes;            /* flight recorder: keep only this much of the newest chunks (0: all) */
    int loops;                    /* OC_LOOPS_*: what an orphaned fork child's render shows of loops */
    int c_functions;              /* CALL/C_RETURN/C_RAISE are monitored */
    PyObject *set_local_events;   /* adaptive mode with a threshold: sys.monitoring.set_local_events, for
                                     instruction probes (NULL: none) */
    int tool_id;
    unsigned long insn_event;     /* sys.monitoring.events.INSTRUCTION */
    PyObject *arm_calls;          /* C functions: sys.monitoring.set_local_events, for CALL on each code
                                     object as it registers (NULL: C functions are not recorded) */
    unsigned long call_event;     /* sys.monitoring.events.CALL */
    uint32_t probe_after;         /* threshold 0 with probes: back jumps of a code before its probe (0: off) */
    uint32_t insn_limit;          /* executions of an instruction site recorded (0: all): the threshold, or
                                     OC_PROBE_LEN for threshold-0 probes */
    int stopping;
    pthread_t writer;
    int writer_started;

    /* results */
    atomic_uint_fast64_t nevents;
    uint64_t dropped;
    int internal_error;           /* set by the hot path on failures it cannot report */
    char internal_msg[256];
    int write_errno;              /* set by the writer */
    uint64_t bytes_written;
    /* What the record side asks of the renderer and of the binding, set by the binding (module.c, oc_hooks_set)
     * before the recorder starts: the recorder and the signal save call these, never the renderer itself. */
    struct {
        void (*recording_failed)(int err); /* from the recorder thread, once a session: a write failed (errno
                                            * err); the main thread says so at its next bytecode (a pending
                                            * call to ocular._recording_failed) */
        int (*render)(const char *rec_path, int format, const char *out_path, int progress, int loops, int stats,
                      oc_render_result *res); /* the recording into an output (oc_render_file) */
        void (*live_start)(const char *rec_path, int format, const char *out_path, int loops); /* if one can */
    } hooks;
} oc_session;

extern oc_session sess;

oc_tbuf *oc_buffer_slow(void);
/* a free record of this thread's chunk for the running session (the chunk handed over and a new one
 * taken when full), or NULL; leaves one spare record after it */
static inline oc_rec *oc_reserve_rec(void) {
    oc_tbuf *b = oc_tls.buf;
    if (__builtin_expect(oc_tls.gen != sess.gen || b->pos >= b->end, 0)) {
        b = oc_buffer_slow();
        if (!b)
            return NULL;
    }
    return b->pos++;
}

/* clock.c */
int oc_clock_init(void);                 /* chooses the source; returns 1 if TSC */
const char *oc_clock_source(void);
void oc_clock_set_test(int on);
extern int oc_test_clock;
extern uint64_t oc_test_ticks;
void oc_clock_sample(uint64_t *ticks, uint64_t *mono_ns);
void oc_clock_calibrate_early(void);     /* ~2 ms in: early_npt and knee_tsc (non-TSC clocks: final) */
void oc_clock_calibrate(void);           /* from (tsc0, mono0) to now; sets ns_per_tick */
/* A C call site that passed the threshold stays instrumented while its calls average this long or more:
 * recording a C call costs two events, about 50 ns (callgrind, 3.12: 811 instructions a call of `len`,
 * against 707 for the whole untraced loop iteration around it), so a kept site adds ~5% at most */
#define OC_CCALL_KEEP_NS 1000.0
uint64_t oc_ccall_keep_ticks(void);      /* OC_CCALL_KEEP_NS in ticks (monitor.c's C call site rule) */
static inline uint64_t oc_now(void);

/* codeinfo.c */
int oc_codeinfo_init(void);
PyObject *oc_code_object(oc_codeent *e); /* new reference to the live code object, or NULL (no error) */
void oc_codetable_snapshot(void);        /* GIL held: every entry's flags/enters from its extra */
oc_codeextra *oc_code_register(PyCodeObject *co);   /* slow path; NULL on failure */
unsigned long oc_local_events(const oc_codeextra *ex); /* the local events Ocular set on its code object */
int32_t *oc_line_table(PyCodeObject *co, uint32_t nunits, int *from_table); /* malloc'd; NULL: no memory */
void oc_codetable_clear(void);
static inline oc_codeent *oc_code_entry(uint32_t id) {
    return &sess.pages[id >> OC_PAGE_BITS][id & (OC_PAGE_SIZE - 1)];
}
char *oc_dup_raw(const char *s, Py_ssize_t n);     /* NUL-terminated copy of n bytes */
void oc_internal_error(const char *msg);           /* first failure wins; reported at stop */
uint32_t *oc_code_counters(oc_codeextra *ex, int which); /* 0 edges, 1 instructions, 2 calls; lazily
                                                            allocated; NULL on failure */
/* C functions (builtins, extension functions) get code table entries of their own, one per PyMethodDef,
 * named as cProfile names them, file "~", line 0 */
/* a code table entry that is not a code object (qualname, filename: C strings); its id, or UINT32_MAX */
uint32_t oc_code_add_named(const char *qualname, const char *filename);
uint32_t oc_cfunc_id(PyObject *callable);   /* UINT32_MAX: not a C function we record (or no memory) */
void oc_cfunc_mark_cut(PyObject *callable); /* a call site of it was de-instrumented: its calls are partial */
void oc_cfunc_reset(void);

/* buffer.c */
/* oc_buffer_slow (above): returns a buffer with room for at least 2 records, or NULL */
/* asyncio.c: a coroutine's enter at `depth` (GIL held, before its record): 1 if it begins a task step
 * (an OC_MARK_TASK record was written); its leave at `depth` ends the step it began */
int oc_task_enter(oc_tbuf *b, uint32_t depth, oc_codeextra *coro);
static inline void oc_task_leave(oc_tbuf *b, uint32_t depth) {
    if (b && b->step_depth == depth)
        b->step_depth = 0;
}
void oc_tasks_reset(void);                /* GIL held: at stop */
/* asyncio's call_soon was entered (its enter recorded): an OC_MARK_WAKE record if its callback runs a
 * step of a task */
void oc_task_wake(void);
/* a coroutine's unwind at `depth` by `exc`: an OC_MARK_CANCELLED record first if it is the step's coroutine
 * and `exc` an asyncio.CancelledError */
void oc_task_unwind(oc_tbuf *b, uint32_t depth, PyObject *exc);
void oc_buffer_flush_all(void);          /* stop: hand every thread's partial chunk to the writer */
int oc_buffer_init(void);
void oc_buffer_fork_child(void);
void oc_buffer_reset(void);
int oc_buffer_mute(int on);              /* GIL held: this thread records nothing while muted; was it */
oc_chunk *oc_chunk_get(void);            /* lock held by caller */
void oc_chunk_put_free(oc_chunk *c);     /* lock held by caller */
/* lock and GIL held: pass every live thread's partial chunk to fn; returns the records passed */
uint64_t oc_buffer_write_partial(oc_out *o, void (*fn)(oc_out *, const oc_chunk *));

/* recorder.c: the thread that moves full chunks into the recording */
int oc_recorder_start(void);             /* opens the recording and starts the thread; -1 with exception */
void oc_recorder_stop(uint64_t stop_ticks); /* joins it and finishes the recording; GIL released */
void oc_recorder_fork_child(void);       /* forget the parent's recorder state */
uint64_t oc_recorder_events(void);
uint64_t oc_recorder_bytes(void);
int oc_recorder_errno(void);
int oc_recorder_dump(const char *path);  /* ring mode: write the kept window as a recording; errno */
/* sigsave.c: saving the trace on SIGTERM/SIGHUP (the recorder renders, then the process dies of it) */
#define OC_SIG_KEEP (-1)    /* keep the recording for `convert` (a format written by Python code) */
#define OC_SIG_INSTALL (-2) /* the recording is the output (.ocular) */
int oc_signals_arm(const int *sigs, int n, int render, const char *convert_args, int verbose);
int oc_signals_pending(void);   /* a signal arrived (any thread, no lock) */
int oc_signals_take(void);      /* the recorder takes it over: 1, unless Python is stopping */
void oc_signals_finish(void);   /* the recorder, the recording complete: render or keep, die; no return */
int oc_signals_stopping(void);  /* Python stops the session: signals wait for oc_signals_disarm() */
void oc_signals_disarm(void);   /* the default disposition again; a signal that arrived meanwhile is raised */
void oc_signals_fork_child(void);
int oc_signals_armed(void);
int oc_only_helper_threads_left(void); /* recorder.c: no thread but those two is alive (fork children) */

/* sampling.c: sampling windows in adaptive mode.  While a window is open (oc_now() < oc_win_end), the
 * callbacks record de-instrumented functions' enters and leaves instead of answering DISABLE. */
extern uint64_t oc_win_end;              /* ticks; 0: no window was ever opened */
static inline int oc_in_window(uint64_t now) { return UNLIKELY(now < oc_win_end); }
int oc_owncost_init(PyObject *module);   /* owncost.c: adds _owncost_baseline, _owncost_measure */
int oc_sampling_init(PyObject *module);  /* adds _sampling_start */
void oc_sampling_stop(void);             /* GIL held: ends the timer thread; windows close */
void oc_sampling_reset(void);            /* a new session: forget the last one's windows */
void oc_sampling_fork_child(void);       /* the timer thread is the parent's */
void oc_sampling_kick_slow(void);
/* GIL held, about to answer DISABLE: the first de-instrumented site lets sampling windows open */
static inline void oc_sampling_kick(void) {
    extern atomic_int oc_sampling_kicked;
    if (UNLIKELY(!atomic_load_explicit(&oc_sampling_kicked, memory_order_relaxed)))
        oc_sampling_kick_slow();
}
/* recorder: a SAMPLING block payload (recording.h), malloc'd, or NULL: the windows not written yet
 * (all: every one), with the status (final: written even without new windows) */
void *oc_sampling_block(int all, int final, uint32_t *len);
int oc_sampling_new(void);               /* windows not written yet */

/* results.c (the binding, GIL held): the render's results as Python objects for the report */
PyObject *oc_tree_export(void);                      /* the last tree render's call tree */
PyObject *oc_stats_export(int with_code_objects, uint32_t limit); /* the statistics (_report_data) */
int oc_attr_export(PyObject *func, uint32_t id);     /* adds the estimate fields to a report row */
PyObject *oc_attr_summary(void);                     /* the sampling figures of the session */

/* monitor.c */
int oc_monitor_init(PyObject *module);
PyObject *oc_make_callbacks(int c_functions);

/* usdt.c: USDT probes (provider "ocular") with their own sys.monitoring tool; adds _usdt_* functions */
int oc_usdt_init(PyObject *module);

/* hot-path clock, inline */
extern int oc_use_tsc;
extern int oc_fast_clock;            /* the hardware counter, and no test clock: oc_now() reads it inline */
uint64_t oc_now_slow(void);          /* the test clock, or clock_gettime (clock.c) */
/* the hardware counter itself: only where oc_fast_clock says it is the clock (else 0) */
static inline uint64_t oc_fast_now(void) {
#if defined(__x86_64__)
    return __rdtsc();
#elif defined(__aarch64__)
    uint64_t v;
    __asm__ volatile("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
    return 0;
#endif
}
static inline uint64_t oc_now(void) { return LIKELY(oc_fast_clock) ? oc_fast_now() : oc_now_slow(); }

#ifndef OC_UNRESOLVED_OK
#pragma GCC visibility pop
#endif


#endif
