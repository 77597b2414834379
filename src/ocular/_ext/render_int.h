/* render_int.h -- the renderer's own types and state, shared by its units and by nothing else: render.c
 * (the driver: stacks, loops, slices), reader.c (the recording's index), tasks.c (asyncio's tasks, flows and
 * stalls) and live.c (rendering while recording). */
#ifndef OCULAR_RENDER_INT_H
#define OCULAR_RENDER_INT_H
#include "render.h"
#include "recording.h"
#include "stats.h"
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#define NLOOPS 4
#define OC_STALL_DEPTH 16 /* frames of a loop stall's stack kept (from the task step's coroutine up) */
/* The recording's pages, once indexed and once rendered, leave the resident set this many bytes at a
 * time (madvise MADV_DONTNEED: a system call, and a TLB shootdown on the process's other CPUs, per step).
 * 4 MiB: a rendered output's resident memory within twice the recording run's, whatever its length
 * (16 MiB: fib(30)'s .pftrace 55 MB against 20 MB for .ocular). */
#define OC_DROP_STEP (4u << 20)

typedef struct {
    uint32_t src, dest;     /* units; src == UINT32_MAX: free slot */
    uint64_t last_ts;
    uint64_t insn_mark;
    uint64_t self_mark;
    uint64_t run_first_ts;  /* the current run: end of its first iteration, iterations and cycles since */
    uint64_t run_iters, run_cycles;
    int resumed;            /* its next iteration spans a yield (below): counted, timed by self time, no run */
} loop_slot;

/* A generator's or coroutine's loops over its suspensions: a loop whose body yields has one backward
 * jump per activation segment, so its iterations are counted only if the segment that yields hands its
 * loop slots to the next resume of the same code on the thread (self marks relative to the frame's
 * self time, which starts again at 0).  Keyed by code: instances of one generator interleaved on a
 * thread share them (each backward jump is still one iteration of that loop). */
#define NSUSPENDED 8
typedef struct {
    uint32_t src, dest;     /* src == UINT32_MAX: free */
    uint64_t self_since, insns_since; /* the frame's self ticks and instructions since the last backward jump */
} carried_loop;
typedef struct {
    uint32_t code_id;
    carried_loop loops[NLOOPS];
} suspended_loops;

typedef struct {
    uint32_t code_id;
    uint32_t depth;
    uint32_t prev_same;     /* 1 + index of the nearest frame below with the same code, or 0 */
    uint64_t insns;         /* INSTRUCTION records seen in this activation (precise mode) */
    uint64_t begin_ts;
    uint64_t self;          /* compensated ticks spent in this frame itself */
    uint64_t child;         /* compensated inclusive ticks of its callees */
    uint64_t same;          /* inclusive ticks of nested activations of the same code already counted */
    uint8_t is_call;        /* began with PY_START (not a resume) */
    uint8_t cut;            /* began before the flight-recorder window (opened at its edge) */
    uint8_t loops_on;       /* loops[] is initialized (at the frame's first backward jump) */
    uint32_t blk_start;     /* adaptive: unit where the current basic block began, or UINT32_MAX */
    uint64_t blk_self;
    uint64_t blk_insns;     /* adaptive: `insns` when the block began (instruction records: a probe) */
    uint32_t insn_unit;     /* precise: the instruction being executed, or UINT32_MAX */
    uint64_t insn_self;
    loop_slot loops[NLOOPS];
    int hidden;             /* recorded only because a sampling window was open (attrib.c) */
    uint32_t anchor, head;  /* hidden: the nearest visible frame's code and the outermost hidden one's
                             * (OC_NO_CODE if that one's caller was not recorded) */
    uint64_t win_mark;      /* the thread's window ticks when it began (attrib.c) */
} frame;

typedef struct {
    const oc_rec *recs;
    uint32_t n;
} span;

typedef struct {
    uint32_t thread, span; /* a chunk of the recording: its thread and its index among the thread's */
} span_ref;

/* What the index keeps of a thread (by slot, for every thread in the recording): its chunks not yet
 * rendered.  A thread's render state (rthread, below) exists only from its first rendered chunk until its
 * end is rendered (the THREAD block that says it ended, or the end of the recording). */
typedef struct {
    span *spans;            /* this thread's chunks, in order (freed once the thread's end is rendered) */
    uint32_t nspans, capspans;
    uint32_t idx;           /* its thread index in the recording (the slot is rstate.threads' own: thread_slot) */
    uint8_t ended;          /* its end was indexed: a later chunk of its index is another thread's */
} tindex;

/* An asyncio task this thread's loop scheduled (OC_MARK_WAKE) or ran (OC_MARK_KEY), by its key: the flow
 * its last scheduling began, which its next step ends, and when it was made (until its first step). */
typedef struct {
    uint32_t key;
    uint8_t used, started;  /* started: it has begun a step (a later scheduling is a wake-up) */
    uint64_t flow;          /* 0: none pending */
    uint64_t created;       /* ticks of its first scheduling, 0 if not seen */
} wake_ent;

typedef struct {
    long tid;
    long otid;              /* the track its slices go to: tid, or during an asyncio task's step (trace
                             * formats) that task's track on this thread (oc_render_task_track) */
    uint32_t slot;          /* its slot in rstate.threads, rstate.ix and rmeta.threads */
    uint64_t prev_ts;
    int have_prev;
    frame *stack;
    uint32_t n, cap;
    uint32_t far_src;       /* pending K_FARJUMP */
    uint64_t far_ts;
    uint32_t far_code;
    int far_pending;
    uint64_t pause_begin;   /* pending K_PAUSE */
    uint32_t prev_code;     /* code id of the previous record */
    uint8_t started;        /* its first chunk was rendered (its tid set, its cut frames opened) */
    oc_attr_thread attr;    /* sampling windows: this thread's cursor (attrib.c) */
    int mark, sampled;      /* a K_MARK record came before this one */
    suspended_loops susp[NSUSPENDED]; /* (suspend_loops, resume_loops) */
    uint64_t susp_mask;     /* bit (code id % 64) of each code in susp: a leave or resume of another code
                             * looks at none of them (may hold bits of entries since reused) */
    uint32_t nsusp;         /* entries ever used (0: no resume looks) */
    uint32_t susp_next;     /* the entry to take next once all are used */
    /* asyncio task steps (asyncio.c): */
    uint32_t task_mark;     /* an OC_MARK_TASK came before this record: the task's code id + 1 (0: none) */
    uint32_t step_at;       /* the frame that began the current step: its index + 1 (0: no step) */
    uint32_t step_task;     /* the current step's task (its code id) */
    int step_started;       /* the step's enter started its coroutine (PY_START): the task's first step */
    int step_how;           /* how the step's coroutine left: 0 suspended (or unseen), 1 returned, 2 raised,
                             * 3 cancelled (an OC_MARK_CANCELLED came before its unwind) */
    int cancel_mark;
    uint64_t stall_at;      /* ticks at which the step holds the loop for rstate.stall_ticks (NO_STALL: no
                             * step, or its stall already seen: one compare per record) */
    uint32_t stall_n;       /* the stack (codes from the step's frame up) when it did, and how deep */
    uint32_t stall_codes[OC_STALL_DEPTH];
    uint32_t cb_at;         /* the frame of asyncio's Handle._run running a loop callback outside any step:
                             * its index + 1 (0: none) -- a callback that holds the loop is a stall too */
    uint32_t key_mark;      /* an OC_MARK_KEY came before the OC_MARK_TASK of the next enter: its task's key */
    uint8_t key_pending;
    uint8_t step_keyed;     /* the current step's task key is known: step_key */
    uint32_t step_key;
    wake_ent *wk;           /* this thread's tasks by key, from their first scheduling to their end (task_wake) */
    uint32_t wk_cap, wk_n;
} rthread;

/* the thread's tid is known: its slices' track too, unless a task's step is on its own track now */
static inline void set_otid(rthread *t, long tid) {
    if (t->otid == t->tid || !t->step_at)
        t->otid = tid;
    t->tid = tid;
}

typedef struct {
    oc_out out;
    const oc_sink *sink;
    rthread **threads;       /* by slot: a thread's render state while it is rendered, else NULL */
    tindex *ix;              /* by slot: every thread's indexed chunks */
    uint32_t nthreads;       /* the capacity of threads, ix and rmeta.threads */
    uint64_t events, total, done;
    uint64_t stop_ticks;
    int complete;
    uint64_t window_ticks;
    uint32_t *same_top;      /* by code id: 1 + index of the topmost frame of that code (thread `cur`) */
    uint32_t cur;            /* 1 + the thread whose frames same_top links; 0: none */
    span_ref *order;         /* every chunk, in the recording's order (the order file-order sinks render) */
    uint32_t norder, caporder;
    int file_order;          /* the sink takes the threads' events interleaved: render in `order` */
    uint32_t **insn_prefix;  /* by code id: instructions starting before each unit (lazily built) */
    uint32_t ncodes_alloc;
    uint32_t pause_code;     /* a code id made up for the recorded pauses */
    int loops;               /* OC_LOOPS_*: what the trace shows of loops */
    int nostats;             /* the trace only: no statistics are kept (NOSTATS below) */
    int have_header;         /* the header block was indexed */
    int calibrated;          /* a calibration block was indexed: ticks before its knee convert finally */
    int calib_final;         /* ...and the final rate, after the knee, is known too */
    int live_failed;         /* rendering while recording met what it cannot render early (a pause) */
    int anon;                /* the output is an unnamed file (O_TMPFILE), named when complete */
    uint64_t live_events;    /* records rendered while the program was recording */
    uintptr_t drop_from;     /* the first page of the mapping not yet dropped from the resident set, or 0
                                (reset with the mapping: reset_render, and after a render) */
    int progress;
    uint64_t progress_next_ns, progress_start_ns, progress_after_ns;
    const char *progress_name;
    uint32_t *th_keys, *th_slots; /* thread index -> 1 + its slot (open addressing; th_slots 0: free) */
    uint32_t th_cap;
    uint64_t ts_lo, ts_hi;   /* ticks the calibration maps to times in [0, 2^62] ns (check_clock) */
    uint32_t codes_seen;     /* CODE blocks indexed (a damaged id is one far out of their sequence) */
    uint64_t last_ts;        /* the latest last record of a chunk indexed */
    size_t index_dropped;    /* the recording's pages below this offset were dropped after indexing */
    int task_tracks;         /* a trace format: an asyncio task's steps go to a track of the task's own */
    struct {
        long tid;
        uint32_t task;
        uint32_t life_key;   /* the task whose life is open on the track (life_open) */
        uint8_t life_open;
        uint64_t life_begin; /* ticks: when that task was made */
        uint64_t last_end;   /* ticks: the end of the track's latest step */
    } *tt;                   /* task tracks, by index: OC_TASK_TID_BASE + index is the track's tid */
    uint64_t flows;          /* flows begun (task_wake numbers them) */
    uint32_t life_code;      /* a code id made up for tasks' lives ("task life"); UINT32_MAX: none */
    uint32_t stall_code;     /* ...and for loop stalls' instants; UINT32_MAX: none */
    uint32_t handle_run1;    /* asyncio's Handle._run (a loop callback's run): its code id + 1 (0: not seen) */
    uint64_t stall_ticks;    /* a step this long is a loop stall (rmeta.stall_ns in ticks, at the first step) */
    uint32_t ntt, captt;
    uint32_t *tt_hash;       /* (thread tid, task) -> 1 + index, open addressing (0: free) */
    uint32_t tt_cap;
} oc_rstate;
extern oc_rstate rstate; /* the render in progress (rtables.c) */


/* (through int64_t: the same value for any product below 2^63 ns, and one instruction where a
 * conversion to uint64_t needs a test for the upper half) */
static inline uint64_t to_ns(uint64_t ticks) {
    if (LIKELY(ticks >= rmeta.knee_tsc)) /* (clock.c: the early rate before the knee, the final one after) */
        return rmeta.knee_ns + (uint64_t)(int64_t)((double)(int64_t)(ticks - rmeta.knee_tsc) * rmeta.ns_per_tick);
    int64_t d = (int64_t)(ticks - rmeta.tsc0);
    return rmeta.mono0_ns + (uint64_t)(int64_t)((double)d * rmeta.early_npt);
}

/* a duration of `ticks` ending at `at`, at the rate of the mapping there */
static inline uint64_t dur_ns(uint64_t ticks, uint64_t at) {
    return (uint64_t)((double)ticks * (at >= rmeta.knee_tsc ? rmeta.ns_per_tick : rmeta.early_npt));
}

/* The record loop's specializations, constants where it is inlined.  LEAN: the recording has no sampling
 * windows (oc_attr_on 0) and is not precise, so those tests are left out (whether loops are shown as
 * runs is one test per slice end, in every copy).
 * SLICE: the sink takes whole slices (1) or begins and ends (0); -1: either, tested per event; 2: the
 * statistics alone (oc_sink_none), so neither is called.
 * NOSTATS: the trace alone (a render asked for no statistics, of a recording that is not precise): a
 * frame keeps what the trace shows (its code, depth, start and loops), and nothing else is counted --
 * no self time, no recursion links, no basic blocks, no sampling estimates.  The trace is the same
 * bytes either way (tests/test_perfetto.py, test_the_trace_alone_is_the_same_trace). */
#define NO_STALL UINT64_MAX /* rthread.stall_at */
#define SLICE_ANY (-1)
#define SLICE_NONE 2
static inline int sink_slices(int slice) {
    return slice == SLICE_ANY ? rstate.sink->slice != NULL : slice == SLICE_NONE ? 0 : slice;
}

/* render.c: the driver */
void reset_render(void);
int grow_code_arrays(void);
int open_output(int format, const char *out_path, int loops, oc_render_result *res);
void render_ref(uint32_t i, uint32_t s, int drop);
void end_thread(uint32_t i);
/* the k-th chunk to render: in the recording's order (file_order), else thread 0's first */
static inline span_ref next_ref(uint32_t k) { return rstate.file_order ? rstate.order[k] : (span_ref){0, k}; }

/* reader.c: the recording's index */
int index_recording(const uint8_t *base, size_t size, size_t *offp, oc_render_result *res);
void check_clock(void);
int grow_codes(uint32_t id);
char *na_strdup(const char *s, size_t n);
void na_abandon(void);
void free_thread(uint32_t i);
void free_meta(void);
void free_render_state(void);

/* tasks.c: asyncio's tasks (out of the record loop's way: cold, not inlined) */
#define OC_STALL_MS 100 /* asyncio's debug mode's slow_callback_duration; the recording may say otherwise */
__attribute__((cold)) void task_wake(rthread *t, uint32_t key, uint64_t ts);
__attribute__((cold)) void step_begin(rthread *t, uint64_t ts, int slice, int started, uint32_t task);
__attribute__((cold)) void step_slice(rthread *t, const frame *f, uint64_t ts, int whole);
__attribute__((cold)) void step_end(rthread *t, const frame *f, uint64_t ts, int counted, int nostats);
__attribute__((cold)) void stall_seen(rthread *t);
__attribute__((cold)) void cb_begin(rthread *t, uint64_t ts);
__attribute__((cold)) void cb_end(rthread *t, const frame *f, uint64_t ts, int nostats);
void life_end(uint32_t k, uint64_t ts);

/* live.c: rendering while recording.  The driver calls none of live.c: a live render, when it starts,
 * registers what the driver asks of it at stop (oc_live: NULL until one started; rtables.c) */
typedef struct {
    int (*takeover)(const char *rec_path, int format, const char *out_path, int loops); /* 1: this output's */
    int (*resume)(const uint8_t **base, size_t *size, size_t *off, uint32_t *done);   /* where it got to */
    void (*free)(void);
    void (*discard)(void);
} oc_live_ops;
extern const oc_live_ops *oc_live;

#endif
