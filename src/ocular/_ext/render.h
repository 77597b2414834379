/* render.h -- the render side's declarations: the records as the renderer reads them, the code and thread
 * tables it rebuilds from a recording, the render (render.c), its output (out.c), sinks (sink_*.c, pipe.c)
 * and formats, statistics (stats.c) and estimates (attrib.c).  No Python.h: the render side is a C library
 * that the binding calls (module.c; results.c turns its results into Python objects for the report), and
 * `python -m ocular convert` runs without the program.  ocular.h (the record side and the binding) includes
 * this; a render-side file includes this and never ocular.h (tests/test_layout.py). */
#ifndef OCULAR_RENDER_H
#define OCULAR_RENDER_H

#include "recording.h"
#include "thread.h"
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#ifndef LIKELY
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#endif
#ifndef OC_UNRESOLVED_OK /* (defined in this extension: see ocular.h) */
#pragma GCC visibility push(hidden)
#endif

typedef struct oc_out oc_out; /* out.c: an output file and its buffer */

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
/* Room for more kinds: the 4-bit kind field is full, so a new kind of record is a new OC_MARK_* (the payload
 * has room for 2^28 of them), its data in code_id (32 bits) and, if it needs more, in K_EXT records after
 * it.  A renderer passes over a mark it does not know (process_rec), so a new one needs no version change
 * (tests/test_handmade_recordings.py: unknown marks leave the outputs byte for byte as they were). */
enum { OC_MARK_SAMPLED = 1, OC_MARK_CUT = 2, OC_MARK_TASK = 3, OC_MARK_CANCELLED = 4, OC_MARK_KEY = 5,
       OC_MARK_WAKE = 6, OC_MARK_LAST = OC_MARK_WAKE };
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
_Static_assert(OC_MARK_LAST < (1u << OC_PAYLOAD_BITS), "mark kinds fit a record's payload");
_Static_assert(2 * OC_NEAR_BITS <= OC_PAYLOAD_BITS, "a near jump's two offsets fit the payload");

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
    struct _object *code_obj; /* (a PyObject *) the code object (borrowed; NULL once the code watcher saw it die): the
                              report's disassembly at stop */
    struct oc_codeextra *extra; /* its per-code data (record side); NULL once the code object is gone */
    uint32_t flags;        /* renderer side: CF_* at stop (from the recording) */
    uint32_t enters;       /* renderer side: PY_START/PY_RESUME hits at stop */
} oc_codeent;

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
long oc_render_live_progress(void);      /* chunks (and thread ends) it has rendered; -1: none running, or failed */

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
extern oc_rmeta rmeta;
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
/* the tid of the thread in slot `slot` (of rmeta.threads) that its slices carry: its kernel thread id, or, for a
 * thread whose THREAD block is missing (a killed process's recording), its thread index in the recording */
long oc_render_thread_tid(uint32_t slot);
extern oc_codeent oc_unknown_code; /* (rtables.c) */
/* code id `id`'s entry; never NULL: an unknown id gives a placeholder entry */
static inline oc_codeent *oc_rcode(uint32_t id) {
    return id < rmeta.ncodes && rmeta.codes[id].qualname ? &rmeta.codes[id] : &oc_unknown_code;
}

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
/* a JSON string body of n bytes: " and \ escaped, control characters as \u00XX (malloc'd; NULL: no memory) */
char *oc_json_escape(const char *s, size_t n);
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
void oc_tree_release(void);
/* the last tree render's call tree (sink_tree.c), for results.c: nodes (parent, code: OC_TREE_ROOT for a
 * thread's root), the threads' roots; past OC_TREE_THREADS threads the others share one tree, "N threads
 * (merged)" (index `merged`; UINT32_MAX: none) -- the memory of a program that started 80,000 short threads
 * is that of 1,000 (pstats sums the threads anyway; the per-thread formats show the merged ones as one) */
#define OC_TREE_ROOT UINT32_MAX
#define OC_TREE_THREADS 1000
typedef struct {
    uint32_t parent, code;
    uint64_t calls, total, self;
} oc_tree_node;
typedef struct {
    long tid;
    uint32_t root;
    uint64_t first_ns, last_ns;
} oc_tree_thread;
typedef struct {
    const oc_tree_node *nodes;
    uint32_t n;
    const oc_tree_thread *threads;
    uint32_t nthreads, merged, nmerged;
    int failed; /* out of memory while building it */
} oc_tree_view;
void oc_tree_view_get(oc_tree_view *v);
const char *oc_tree_thread_name(long tid); /* the recorded name of thread tid ("" if none) */



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
            if (!oc_stats_own_measured && !rmeta.test_clock)
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
void oc_stats_cut(uint32_t caller, uint32_t callee); /* a C call site of caller's was de-instrumented */
void oc_stats_finish(void); /* after rendering: callers of de-instrumented callees (their self holds later calls) */

/* attrib.c (renderer): honest attribution of de-instrumented callees from the sampling windows */
typedef struct {
    uint32_t wcur;          /* first window that does not end before the thread's current time */
    uint32_t last_code;     /* the visible frame whose window time the last gap added to (tails) */
    uint64_t last_in;       /* that window time, ticks */
    uint64_t last_silent;   /* the part of last_in after windows that opened during the gap (oc_attr_gap) */
    uint64_t win_total;     /* window ticks of every gap so far (a frame's share: the difference) */
    uint64_t next_begin;    /* the begin of window wcur (UINT64_MAX: none), as of windows generation wgen */
    uint32_t wgen;
    /* 1 + the code of a leave that showed unrecorded frames running above the top frame (its caller is
     * deeper than the top: a window opened inside a de-instrumented chain, a recursion), until a record
     * of the top frame's own; 0: none.  The window part of a gap then is theirs (oc_attr_gap). */
    uint32_t unk_code1;
} oc_attr_thread;
void oc_attr_reset(void);
void oc_attr_abandon(void);                         /* fork child: forget without freeing */
/* a SAMPLING block (windows of `wlen` bytes: 16, or 24 with their weights): its windows are appended */
void oc_attr_block(const uint8_t *p, uint32_t len, uint32_t wlen);
extern int oc_attr_on;                               /* the recording has sampling windows */
extern uint32_t oc_attr_wgen;                        /* bumped when windows are appended */
extern uint64_t *oc_attr_outside;                    /* by code: visible self ticks outside windows */
/* outside ticks count from oc_attr_from: the first de-instrumentation, else (an older recording) the first
 * window's begin */
extern uint64_t oc_attr_from;
extern uint32_t oc_attr_noutside;
/* the usual gap [t0, t1) (render.c tick): a visible top frame, no window begun before its end -- its
 * ticks are that code's own outside windows; 0: oc_attr_gap must take it (also a gap across
 * oc_attr_from, whose part after it counts) */
static inline int oc_attr_gap_fast(oc_attr_thread *a, uint64_t t0, uint64_t t1, uint64_t net, uint32_t top,
                                   int hidden) {
    if (hidden || t1 > a->next_begin || a->wgen != oc_attr_wgen || top >= oc_attr_noutside)
        return 0;
    if (t0 >= oc_attr_from)
        oc_attr_outside[top] += net;
    else if (t1 > oc_attr_from) /* (before it: time no window stands for) */
        return 0;
    a->last_in = a->last_silent = 0;
    return 1;
}
/* one gap [t0, t1) charged to the top frame: `net` compensated ticks; `hidden`: the top frame was
 * recorded only because of a window, `anchor`: the nearest visible frame's code */
void oc_attr_gap(oc_attr_thread *a, uint64_t t0, uint64_t t1, uint64_t net, uint32_t top, int hidden,
                 uint32_t anchor, uint32_t head);
/* a hidden frame began at ts (counted if inside the measured part of a window); `c`: a C function */
void oc_attr_call(oc_attr_thread *a, uint32_t anchor, uint32_t code, uint64_t ts, int c);
/* a hidden frame ended: `incl` ticks in all, of which win_total - win_mark inside windows; `direct`:
 * its caller is the anchor; `nested`: an activation of the same code is below it on the stack (its
 * inclusive time is already that one's); `c`: a C function */
void oc_attr_pop(oc_attr_thread *a, uint32_t anchor, uint32_t code, int direct, int nested, uint64_t win_mark,
                 uint64_t incl, int c);
/* a leave with no recorded begin, of a de-instrumented function or a C function (`c`): the window part
 * of the last gap was the tail of that unrecorded call, not its caller's own time; `direct`: the call
 * was made by the frame the gap was charged to (else by unrecorded frames above it) */
void oc_attr_unmatched_leave(oc_attr_thread *a, uint32_t code, int c, int direct);
/* what the windows estimate for a function: extra calls and ticks as a de-instrumented callee, outside
 * windows; ticks taken out of its own self time; its self ticks inside and outside windows */
typedef struct {
    double calls, self, incl, removed;
    uint64_t window_self, outside_self;
    uint32_t npairs; /* (bounds its callees) */
} oc_attr_est;
/* ...and for each hidden function it calls directly: its estimated share, and what the windows saw */
typedef struct {
    uint32_t code;
    double incl, self, calls;
    uint64_t window_calls, window_incl;
} oc_attr_callee_est;
int oc_attr_estimate(uint32_t id, oc_attr_est *e);                                /* 1: *e; 0: none */
uint32_t oc_attr_callees(uint32_t id, oc_attr_callee_est *out, uint32_t max);     /* how many */
/* the session's sampling: windows opened and skipped (another tool active: `other` stopped the last),
 * their ticks, and the run delays inside and outside them (rd_inside < 0: none measured) */
typedef struct {
    int on, failed;
    uint32_t windows, skipped, rd_inside_n, rd_outside_n;
    uint64_t window_ticks;
    const char *other;
    double rd_inside, rd_outside, calls_factor;
} oc_attr_sum;
void oc_attr_summary_get(oc_attr_sum *m);

#ifndef OC_UNRESOLVED_OK
#pragma GCC visibility pop
#endif
#endif
