/* ocular.h -- shared declarations of the Ocular engine.
 *
 * The engine is one session at a time, global to the process (CPython 3.12+ with the GIL; no
 * sub-interpreters).  Record, then render:
 *   callbacks (monitor.c) -> per-thread chunks of fixed-size records (buffer.c) -> recorder thread
 *   (recorder.c) -> the recording, a raw file of blocks (recording.h, docs/recording.md)
 *   ... after stop, or later in another process (`convert`):
 *   recording -> renderer (render.c: per-thread stack reconstruction, stats.c) -> sinks (sink_*.c)
 * Per-code metadata lives on the code object (codeinfo.c); names and code bytes are copied into a
 * session table that the recorder writes into the recording.  Timing comes from clock.c.
 */
#ifndef OCULAR_H
#define OCULAR_H

#include "compat.h" /* (Python.h, and what differs between CPython versions) */
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

/* ---- records: 16 bytes, written by the hot path, read by the writer ---- */
enum oc_kind {
    K_NONE = 0,
    K_START = 1,   /* PY_START       payload: frame depth */
    K_RESUME = 2,  /* PY_RESUME      payload: frame depth */
    K_THROW = 3,   /* PY_THROW       payload: frame depth */
    K_RETURN = 4,  /* PY_RETURN      payload: frame depth */
    K_YIELD = 5,   /* PY_YIELD       payload: frame depth */
    K_UNWIND = 6,  /* PY_UNWIND      payload: frame depth */
    K_JUMP = 7,    /* JUMP/BRANCH    payload: src units (14 bits) | dest units (14 bits) */
    K_FARJUMP = 8, /* JUMP/BRANCH    payload: src units; the next record (K_EXT) holds dest units */
    K_EXT = 9,     /* continuation   payload: dest units */
    K_INSN = 10,   /* INSTRUCTION    payload: offset units */
    K_PAUSE = 11,  /* the thread waited for the recorder (disk) from this record's ts ... */
    K_PAUSE_END = 12, /* ... to this one's; code_id unused */
    K_CCALL = 13,  /* CALL of a C function      payload: frame depth of the caller; code_id: the C function */
    K_CRETURN = 14, /* C_RETURN or C_RAISE       payload: frame depth of the caller; code_id: the C function */
    K_MARK = 15,   /* code_id OC_NO_CODE, same ts as the next record; payload: OC_MARK_* */
};
/* K_MARK payloads.  OC_MARK_SAMPLED: the next record is an enter (PY_START, PY_RESUME, CALL of a C
 * function) recorded only because a sampling window is open: outside windows it is de-instrumented
 * (code_id OC_NO_CODE).  OC_MARK_CUT: a call site of the C function code_id in the thread's innermost
 * recorded frame was just de-instrumented (monitor.c ccall_keep): that frame's code holds the later
 * calls of that site in its self time. */
/* OC_MARK_TASK: the next record (an enter) begins a step of the asyncio task whose entry in the code table
 * (one per task name, filename "<asyncio task>") is code_id (asyncio.c). */
/* OC_MARK_CANCELLED: the next record (an unwind) ends the coroutine of a task's step by asyncio.CancelledError:
 * the task was cancelled (code_id OC_NO_CODE). */
/* OC_MARK_KEY: code_id is the key of the task the OC_MARK_TASK right after it names (its address / 16,
 * truncated to 32 bits: the same for a task all its life).  OC_MARK_WAKE: the running code (asyncio's
 * call_soon, just entered) scheduled a step of the task whose key is code_id: its creation (its first
 * step) or its wake-up (a future it awaited is done).  The ts of either is its own (not timed). */
enum { OC_MARK_SAMPLED = 1, OC_MARK_CUT = 2, OC_MARK_TASK = 3, OC_MARK_CANCELLED = 4, OC_MARK_KEY = 5,
       OC_MARK_WAKE = 6 };
#define OC_NO_CODE UINT32_MAX
/* K_INSN payload bit: the instruction at this offset is not recorded (its site answered DISABLE, and so
 * will every instruction of the code object): the gap before it is the previous instruction's, and no
 * instruction is running from here on. */
#define OC_INSN_END (1u << 27)

/* threshold-0 instruction probes (monitor.c arm_probe): after this many back jumps of a code object,
 * for this many executions of its hottest instruction */
#define OC_PROBE_AFTER 64
#define OC_PROBE_LEN 256

#define OC_PAYLOAD_BITS 28
#define OC_PAYLOAD_MAX ((1u << OC_PAYLOAD_BITS) - 1)
#define OC_NEAR_BITS 14
#define OC_NEAR_MAX ((1u << OC_NEAR_BITS) - 1)
#define OC_INFO(kind, payload) (((uint32_t)(payload) << 4) | (uint32_t)(kind))
#define OC_KIND(info) ((info) & 15u)
#define OC_PAYLOAD(info) ((info) >> 4)

typedef struct {
    uint64_t ts;
    uint32_t code_id;
    uint32_t info;
} oc_rec;
/* the recording's CHUNK blocks hold these as they are in memory (docs/recording.md) */
_Static_assert(sizeof(oc_rec) == 16 && offsetof(oc_rec, code_id) == 8 && offsetof(oc_rec, info) == 12,
               "a record is 16 bytes: u64 ts, u32 code_id, u32 info");
_Static_assert(K_MARK < 16, "record kinds fit the 4-bit kind field");
_Static_assert(2 * OC_NEAR_BITS <= OC_PAYLOAD_BITS, "a near jump's two offsets fit the payload");

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

/* per-thread metadata, indexed by thread_idx; read by the writer at the end */
typedef struct {
    long tid;                 /* kernel thread id (gettid) */
    unsigned long ident;      /* threading.get_ident() */
    char *name;               /* JSON-escaped, malloc'd; NULL until known */
    char *name_raw;           /* the same name as raw UTF-8 (Perfetto protobuf); set with name */
    int exited;               /* the thread ended: its ident may be another thread's now (no lookup by it) */
} oc_thread;

/* ---- per-code data ---- */
/* CF_CORO: a coroutine's code (asyncio.c): its enters and leaves take the callbacks' slow path, which
 * follows asyncio task steps.  CF_WAKE: asyncio's BaseEventLoop.call_soon, whose start takes the slow path
 * to see which task it schedules (asyncio.c, oc_task_wake).  Neither is a state the recording keeps
 * (CODESTATE leaves them out): CF_ASYNCIO is both. */
enum { CF_EXCLUDED = 1, CF_START_DISABLED = 2, CF_CORO = 4, CF_WAKE = 8 };
#define CF_ASYNCIO ((uint32_t)(CF_CORO | CF_WAKE))

typedef struct {
    uint32_t gen;
    uint32_t id;
    uint32_t flags;
    uint32_t enters;
    uint32_t nunits;
    uint32_t sites_disabled; /* a jump or instruction site of this code answered DISABLE */
    uint32_t late_ends;      /* unrecorded ends seen while return sites were kept armed (capped) */
    uint32_t probe;          /* adaptive: 1 once an instruction probe was armed on this code (2: it failed) */
    uint32_t insn_done;      /* an instruction site passed the threshold: no more INSTRUCTION records */
    uint32_t back_jumps;     /* threshold 0 with probes: backward jumps seen, up to S.probe_after */
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

/* session table entry: everything the writer needs about a code object, immutable once published */
typedef struct {
    char *qualname;        /* JSON-escaped UTF-8 */
    char *filename;        /* JSON-escaped UTF-8 */
    char *qualname_raw;    /* raw UTF-8 (Perfetto protobuf) */
    char *filename_raw;    /* raw UTF-8 */
    int firstlineno;
    uint32_t nunits;
    uint8_t *code;         /* de-instrumented bytecode copy, 2*nunits bytes */
    int32_t *lines;        /* line number per code unit (-1: none) */
    PyObject *code_obj;    /* the code object (borrowed; NULL once the code watcher saw it die): the
                              report's disassembly at stop */
    oc_codeextra *extra;   /* its per-code data; NULL once the code object is gone */
    uint32_t flags;        /* renderer side: CF_* at stop (from the recording) */
    uint32_t enters;       /* renderer side: PY_START/PY_RESUME hits at stop */
} oc_codeent;

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
} oc_session;

extern oc_session S;

oc_tbuf *oc_buffer_slow(void);
/* a free record of this thread's chunk for the running session (the chunk handed over and a new one
 * taken when full), or NULL; leaves one spare record after it */
static inline oc_rec *oc_reserve_rec(void) {
    oc_tbuf *b = oc_tls.buf;
    if (__builtin_expect(oc_tls.gen != S.gen || b->pos >= b->end, 0)) {
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
    return &S.pages[id >> OC_PAGE_BITS][id & (OC_PAGE_SIZE - 1)];
}
char *oc_json_escape(const char *s, Py_ssize_t n);
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
typedef struct oc_out oc_out;
/* lock and GIL held: pass every live thread's partial chunk to fn; returns the records passed */
uint64_t oc_buffer_write_partial(oc_out *o, void (*fn)(oc_out *, const oc_chunk *));

/* recorder.c: the thread that moves full chunks into the recording */
int oc_recorder_start(void);             /* opens the recording and starts the thread; -1 with exception */
void oc_recorder_stop(uint64_t stop_ticks); /* joins it and finishes the recording; GIL released */
void oc_recorder_fork_child(void);       /* forget the parent's recorder state */
uint64_t oc_recorder_events(void);
uint64_t oc_recorder_bytes(void);
int oc_recorder_errno(void);
/* module.c: from the recorder thread (no GIL needed), once a session: its recording could not be written
 * (errno err); the program's main thread prints it at its next bytecode (ocular._recording_failed) */
void oc_notify_recording_failed(int err);
int oc_recorder_dump(const char *path);  /* ring mode: write the kept window as a recording; errno */
#define OC_WRITER_THREAD_NAME "ocular-writer" /* OS thread names of Ocular's helper threads */
#define OC_USDT_THREAD_NAME "ocular-usdt"
#define OC_RENDER_THREAD_NAME "ocular-render"
#define OC_REMOVE_THREAD_NAME "ocular-remove"
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

/* render.c: a recording -> stack reconstruction -> statistics and one sink */
typedef struct {
    uint64_t events, bytes, dropped, pauses;
    uint64_t live_events; /* of events, those rendered while the program was still recording */
    int complete;        /* the recording has its END block */
    int write_errno;     /* output write failure */
    char error[256];     /* a malformed or unreadable recording; empty if fine */
} oc_render_result;
/* Render `rec_path` into `out_path` with `format` (OC_FORMAT_*; OC_FORMAT_STATS: statistics only).
 * stats 0: a trace format renders the trace alone, and no statistics are kept (the report has none).
 * Returns 0, or -1 with res->error set.  No GIL, no Python API. */
int oc_render_file(const char *rec_path, int format, const char *out_path, int progress, int loops, int stats,
                   oc_render_result *res);
void oc_render_release(void);            /* free what the last render kept for the report */
/* Start rendering the recording being written to rec_path into out_path while it is recorded (with a
 * second CPU; OCULAR_LIVE_RENDER=0 never, 1 even on one CPU); oc_render_file with the same arguments
 * takes it over.  Nothing is reported if it cannot start: the render at stop does it all. */
void oc_render_live_start(const char *rec_path, int format, const char *out_path, int loops);
void oc_render_live_fork_child(void);    /* forget the parent's live render */
int oc_render_live_running(void);        /* the render while recording is running (its statistics with it) */

/* What a renderer knows of the recorded session: read from the recording (render.c), used by the
 * sinks and statistics. */
typedef struct {
    long pid;
    int precise;
    uint32_t threshold;
    uint64_t dropped;
    double ns_per_tick;      /* ticks -> ns from knee_tsc on (durations: the session's rate) */
    uint64_t tsc0, mono0_ns;
    double early_npt;        /* ticks -> ns before knee_tsc */
    uint64_t knee_tsc, knee_ns; /* UINT64_MAX: one rate throughout */
    char clock[24];
    char *process_name;      /* JSON-escaped */
    char *process_name_raw;  /* as recorded (control characters made spaces) */
    oc_thread *threads;
    uint32_t nthreads;
    oc_codeent *codes;       /* by code id; entries never seen have qualname NULL */
    uint32_t ncodes;
    uint8_t cache_entries[256];
    int ring;                /* the recording is a flight-recorder window */
    int near_zero;           /* function starts were de-instrumented after the threshold (OC_REC_F_NEAR_ZERO) */
    uint32_t stall_ms;       /* an asyncio task step this long is a loop stall (OPTIONS block; 0: none read) */
    int test_clock;          /* recorded with the test clock: figures count clock reads, no calibration */
    uint32_t python_hex;     /* PY_VERSION_HEX of the recorded interpreter (its opcode numbers) */
    char *adaptive;          /* the ADAPTIVE block's payload (malloc'd), or NULL */
    uint32_t adaptive_len;
    uint64_t events;         /* records rendered */
    double wall_ns;          /* from the start of the session (or window) to its stop */
    /* a damaged recording (render.c, check_clock and clamp_rec): what was repaired to render it */
    uint64_t clamped;        /* records whose time went back (or leapt past the next) in their thread */
    uint32_t damage;         /* OC_DAMAGE_* */
    double bad_rate;         /* OC_DAMAGE_RATE: the recorded rate, and the one used */
    double used_rate;
    uint32_t bad_codes;      /* OC_DAMAGE_CODES: CODE blocks whose id is far out of sequence, skipped */
} oc_rmeta;
enum { OC_DAMAGE_RATE = 1, OC_DAMAGE_START = 2, OC_DAMAGE_CODES = 4 };
/* What the render repaired in a damaged recording, one line ("the recording is damaged: ..."), or 0
 * (buf empty) for a recording with no damage seen. */
int oc_render_damage(char *buf, size_t n);
extern oc_rmeta R;
extern uint64_t oc_stats_gaps_seen, oc_stats_min_gap; /* stats.c: the calibration */
/* what oc_stats_net takes off each gap, by the kind of the record that ends it: the recording's measured
 * own cost (OWNCOST block, owncost.c), else the smallest gap so far for every kind, 0 before the first or
 * with the test clock (oc_stats_gap keeps it current, so that the per-event path tests nothing) */
extern uint64_t oc_stats_net_off[16];
extern int oc_stats_own_measured;  /* the table is the recording's OWNCOST */
void oc_stats_own_cost(const uint64_t *ticks, uint32_t n); /* an OWNCOST block */
/* ticks of a gap after taking off one event's cost */
static inline uint64_t oc_stats_net(uint64_t delta, uint32_t kind) {
    uint64_t o = oc_stats_net_off[kind & 15];
    return delta > o ? delta - o : 0;
}
uint32_t oc_render_partial(void);   /* functions with only part of their calls recorded (de-instrumented) */
oc_codeent *oc_rcode(uint32_t id);   /* never NULL: an unknown id gives a placeholder entry */

/* out.c */
struct oc_writer;
struct oc_out {
    int fd;
    char *buf;
    size_t len, cap;
    int err;
    uint64_t total;     /* bytes written: the file offset (written from 0, in order) */
    uint64_t reserved;  /* the file's blocks are allocated up to here (oc_out_preallocate) */
    int prealloc;       /* allocate ahead of the writes (fallocate) */
    struct oc_writer *async; /* a writer thread writes the full buffers (oc_out_async_start), or NULL */
    int owned;          /* dev and ino identify the file opened (oc_out_own): checked before each write */
    dev_t dev;
    ino_t ino;
    const char *path;   /* where to open it again if the program closed o->fd (NULL: nowhere) */
};
/* An fd of Ocular's own not among 0-2 (a program started with stdout or stderr closed would otherwise
 * have its writes to them land in our files): fd itself, or a duplicate at 3 or above (fd closed). */
int oc_fd_above_std(int fd);
/* o->fd was just opened: remember which file it is.  A program may close every descriptor it did not
 * open (a daemon's closerange(3, ...)) and open its own under the same number: before each write the
 * file is checked, opened again by `path` (kept by the caller) if it is no longer behind o->fd, and the
 * program's descriptor is never written, truncated or closed; with no path the write fails (EBADF). */
void oc_out_own(oc_out *o, const char *path);
int oc_out_is_ours(oc_out *o);   /* o->fd (>= 0) still names the file it was opened on */
int oc_out_close(oc_out *o);     /* close o->fd if it is still ours; 0 or errno; o->fd = -1 */
void oc_out_write(oc_out *o, const char *s, size_t n);
void oc_out_flush(oc_out *o);
/* Allocate the file's blocks ahead of the writes from now on (o->fd set, nothing written yet), and
 * give back what was allocated past the end: oc_out_trim, before the file is closed (0 or errno). */
void oc_out_preallocate(oc_out *o);
int oc_out_trim(oc_out *o);
/* From now on a writer thread writes the full buffers while the next fills (no-op when it cannot be
 * started); oc_out_async_end hands over what is left and joins it, before the final flush. */
void oc_out_async_start(oc_out *o);
void oc_out_async_end(oc_out *o);
void oc_out_printf(oc_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A sink turns the writer's reconstructed events into bytes.  All calls come from the writer thread.
 * A sink with `slice` gets each slice whole when it ends (begin, end, begin_cut are then never called:
 * NULL); the others get a begin and an end, in time order. */
typedef struct {
    const char *name;
    void (*header)(oc_out *o);
    void (*begin)(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id);
    void (*end)(oc_out *o, long tid, uint64_t ts_ns);
    void (*loop)(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id, int line, uint32_t offset,
                 uint32_t insns, uint64_t cycles, uint64_t ns);
    void (*footer)(oc_out *o, const char *clock, int precise);
    /* optional: a slice already running when a flight-recorder window begins (else begin) */
    void (*begin_cut)(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id);
    /* optional: one run of a loop (OC_LOOPS_RUNS), from the end of its first iteration to its last */
    void (*loop_run)(oc_out *o, long tid, uint64_t first_ns, uint64_t last_ns, uint32_t code_id, int line,
                     uint32_t offset, uint64_t iterations, uint64_t cycles);
    /* optional: a slice, at its end; cut: it began before a flight-recorder window (begin_ns is the
     * window's edge) */
    void (*slice)(oc_out *o, long tid, uint64_t begin_ns, uint64_t end_ns, uint32_t code_id, int cut);
    /* optional: the thread ended (its last event was given): what the sink keeps for it may go (a thread
     * of the same tid that comes later is a new one) */
    void (*thread_end)(oc_out *o, long tid);
    /* optional: a flow (an arrow between two slices): `id` begins (end 0) in the slice open on track `tid`
     * at ts_ns, or ends (end 1) in the slice that begins there (an asyncio task's step: render.c) */
    void (*flow)(oc_out *o, long tid, uint64_t ts_ns, uint64_t id, int end);
    /* optional: an instant named by code_id on track `tid` (an asyncio loop stall: render.c) */
    void (*instant)(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id);
} oc_sink;
/* what a trace shows of loops: every iteration (an instant each), one slice per run, or nothing */
enum { OC_LOOPS_ITERATIONS = 0, OC_LOOPS_RUNS = 1, OC_LOOPS_OFF = 2 };
#define OC_PAUSE_NAME "ocular: waiting for the disk"
/* render.c: asyncio task tracks -- a trace's slices of task `task`'s steps on thread `tid` go to the track
 * OC_TASK_TID_BASE + k (above any kernel tid), which the sinks name after the task and put under the thread */
#define OC_TASK_TID_BASE (1L << 30)
int oc_render_task_track(long otid, long *tid, uint32_t *task); /* 1: otid is a task's track (*tid, *task) */
uint32_t oc_render_task_tracks(void);                           /* how many (their tids: BASE + 0, 1, ...) */
extern const oc_sink oc_sink_json;
extern const oc_sink oc_sink_perfetto; /* sink_perfetto.c */
extern const oc_sink oc_sink_none;     /* render.c: statistics only */
/* pipe.c: the sink's calls made by a second thread, in order.  oc_pipe_start puts a queueing sink in
 * *sink's place (0; -1: no thread, nothing changed); oc_pipe_end waits for the last call and puts the
 * real sink back.  The output is touched only by that thread in between. */
int oc_pipe_start(const oc_sink **sink, oc_out *out);
void oc_pipe_end(const oc_sink **sink);
extern const oc_sink oc_sink_tree;     /* sink_tree.c: the aggregated call tree (no output file) */
extern const oc_sink oc_sink_speedscope; /* sink_speedscope.c */
/* The formats the renderer makes (their codes are the Python format table's render codes, _formats/__init__.py),
 * one row each in render.c's table: its sink and what it can do (OC_CAP_*), which the code tests instead
 * of names.  OC_CAP_TRACE: a timeline -- the threads' events interleaved in the recording's order, asyncio
 * task tracks, the trace alone without statistics, rendered while recording and on a second CPU (pipe.c).
 * OC_CAP_FILE: the sink writes the whole output file (a signal's save can write it from C).
 * OC_CAP_FILE_ORDER: takes the threads' events interleaved (the others: one thread at a time).
 * OC_CAP_MANY_WRITES: small writes that a writer thread takes over on two CPUs (out.c). */
enum { OC_FORMAT_JSON = 0, OC_FORMAT_PERFETTO = 1, OC_FORMAT_STATS = 2, OC_FORMAT_TREE = 3, OC_FORMAT_SPEEDSCOPE = 4 };
enum { OC_CAP_TRACE = 1, OC_CAP_FILE = 2, OC_CAP_FILE_ORDER = 4, OC_CAP_MANY_WRITES = 8 };
unsigned oc_format_caps(int format); /* 0 for a code that is no format (no format has no capability: STATS has FILE_ORDER) */
int oc_format_known(int format);
PyObject *oc_tree_export(void); /* sink_tree.c: the last tree render's call tree (GIL held) */
void oc_tree_release(void);



/* stats.c (writer thread, except export) */
void oc_stats_reset(void);
void oc_stats_abandon(void);
#define OC_CALIBRATION_GAPS 65536
/* every gap between two records of a thread: the smallest of the first 64K is one event's cost */
static inline void oc_stats_gap(uint64_t delta) {
    if (UNLIKELY(oc_stats_gaps_seen < OC_CALIBRATION_GAPS)) {
        oc_stats_gaps_seen++;
        if (delta < oc_stats_min_gap) {
            oc_stats_min_gap = delta;
            if (!oc_stats_own_measured && !R.test_clock)
                for (int k = 0; k < 16; k++)
                    oc_stats_net_off[k] = delta;
        }
    }
}
uint64_t oc_stats_overhead(void);
/* oc_stats_slice, oc_stats_block: stats.h (inline, the renderer's per-event accumulators) */
void oc_stats_insn(uint32_t id, uint32_t unit, uint64_t cycles, int probe);
void oc_stats_loop(uint32_t id, uint32_t src, uint32_t dest, uint64_t cycles, uint64_t self_cycles,
                   uint64_t insns, int timed);
PyObject *oc_stats_export(int with_code_objects, uint32_t limit);
void oc_stats_cut(uint32_t caller, uint32_t callee); /* a C call site of caller's was de-instrumented */
void oc_stats_finish(void); /* after rendering: callers of de-instrumented callees (their self holds later calls) */

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

/* attrib.c (renderer): honest attribution of de-instrumented callees from the sampling windows */
typedef struct {
    uint32_t wcur;          /* first window that does not end before the thread's current time */
    uint32_t last_code;     /* the visible frame whose window time the last gap added to (tails) */
    uint64_t last_in;       /* that window time, ticks */
    uint64_t win_total;     /* window ticks of every gap so far (a frame's share: the difference) */
    uint64_t next_begin;    /* the begin of window wcur (UINT64_MAX: none), as of windows generation wgen */
    uint32_t wgen;
} oc_attr_thread;
void oc_attr_reset(void);
void oc_attr_abandon(void);                         /* fork child: forget without freeing */
/* a SAMPLING block (windows of `wlen` bytes: 16, or 24 with their weights): its windows are appended */
void oc_attr_block(const uint8_t *p, uint32_t len, uint32_t wlen);
extern int oc_attr_on;                               /* the recording has sampling windows */
extern uint32_t oc_attr_wgen;                        /* bumped when windows are appended */
extern uint64_t *oc_attr_outside;                    /* by code: visible self ticks outside windows */
extern uint64_t oc_attr_from;                        /* the first window's begin: outside ticks count from there */
extern uint32_t oc_attr_noutside;
/* the usual gap (render.c tick): a visible top frame, no window begun before its end -- its ticks are
 * that code's own outside windows; 0: oc_attr_gap must take it */
static inline int oc_attr_gap_fast(oc_attr_thread *a, uint64_t t1, uint64_t net, uint32_t top, int hidden) {
    if (hidden || t1 > a->next_begin || a->wgen != oc_attr_wgen || top >= oc_attr_noutside)
        return 0;
    if (t1 > oc_attr_from) /* (before the first window: time no window stands for) */
        oc_attr_outside[top] += net;
    a->last_in = 0;
    return 1;
}
/* one gap [t0, t1) charged to the top frame: `net` compensated ticks; `hidden`: the top frame was
 * recorded only because of a window, `anchor`: the nearest visible frame's code */
void oc_attr_gap(oc_attr_thread *a, uint64_t t0, uint64_t t1, uint64_t net, uint32_t top, int hidden,
                 uint32_t anchor, uint32_t head);
/* a hidden frame began at ts (counted if inside the measured part of a window) */
void oc_attr_call(oc_attr_thread *a, uint32_t anchor, uint32_t code, uint64_t ts);
/* a hidden frame ended: `incl` ticks in all, of which win_total - win_mark inside windows; `direct`:
 * its caller is the anchor; `nested`: an activation of the same code is below it on the stack (its
 * inclusive time is already that one's) */
void oc_attr_pop(oc_attr_thread *a, uint32_t anchor, uint32_t code, int direct, int nested, uint64_t win_mark,
                 uint64_t incl);
/* a leave with no recorded begin, of a de-instrumented function or a C function (`c`): the window part
 * of the last gap was the tail of that unrecorded call, not its caller's own time; `direct`: the call
 * was made by the frame the gap was charged to (else by unrecorded frames above it) */
void oc_attr_unmatched_leave(oc_attr_thread *a, uint32_t code, int c, int direct);
int oc_attr_export(PyObject *func, uint32_t id);     /* GIL: adds the estimate fields to a report row */
PyObject *oc_attr_summary(void);                     /* GIL: the sampling figures of the session */

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

/* Start one of Ocular's own threads (recorder, renderers, timers, pollers) with every signal blocked in
 * it: a thread inherits the mask of the one that creates it, so the mask is set around pthread_create,
 * not by the new thread (a signal could land in it before it blocks them).  Signals stay with the
 * program's threads, and a signal the program blocks to sigwait() for it, or to hold it over a
 * critical section, is never taken (and its default action run) by a thread of ours. */
void *oc_own_thread_main(void *start);                         /* sampling.c: marks the thread as Ocular's */
void *oc_own_thread_arg(void *(*fn)(void *), void *arg);         /* its argument, malloc'd (NULL: no memory) */
static inline int oc_thread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    void *st = oc_own_thread_arg(fn, arg);
    if (!st)
        return ENOMEM; /* (an errno, as pthread_create's: callers say strerror of it) */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(th, attr, oc_own_thread_main, st);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        free(st);
    return rc;
}

#endif
