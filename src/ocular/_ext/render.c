/* render.c -- the renderer: reads a recording (recording.h) and rebuilds each thread's call stack from
 * its records, feeding the statistics (stats.c) and one sink (Chrome JSON, Perfetto protobuf, or none).
 *
 * It runs after the program stopped recording (at stop_tracing(), or in another process by
 * `python -m ocular convert`), without the GIL and without the Python API; with a second CPU it starts
 * while the program records (see "rendering while recording" below) and finishes at stop.  The
 * recording is mapped read-only; a first pass indexes its blocks (code table, thread names, calibration, each thread's
 * chunks in order, and every chunk in the recording's order), then the chunks are rendered: for the
 * trace formats and the statistics in the recording's order, the threads interleaved as they were
 * recorded (each thread's stream in its own order; the one table keyed by code id that belongs to a
 * thread, same_top, is handed over at a switch), for speedscope and the call tree thread by thread.
 *
 * Stack reconstruction is keyed by frame depth (carried in every enter/leave record): an end that
 * matches no open begin at its depth is ignored (code that was running before tracing started, or a
 * function already de-instrumented), and an event at depth d closes any deeper frame whose end was
 * never seen.  Slices still open at the end are closed at the stop time (or, for a recording cut short,
 * at the thread's last record), so the timeline is always balanced.  In a flight-recorder window the
 * frames that were already open when the window begins are known from their ends: they are opened at
 * the thread's first kept record and marked as cut.
 *
 * Cost per event is constant: the frame of the nearest activation of the same code (for recursion) is
 * linked from each frame, not searched for, and a loop's static instruction count is a difference of
 * two prefix counts, not a walk over its body.
 *
 * Loop iterations: a backward jump in a frame marks the end of one iteration of the loop it closes;
 * the first iteration of each run has no start time and is not reported, and an outer loop's
 * backward jump starts new runs of the loops inside it.
 */
#include "render.h"
#include "recording.h"
#include "stats.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

oc_rmeta rmeta;

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
    uint64_t stall_at;      /* ticks at which the step holds the loop for rstate.stall_ticks (0: no step, or
                             * its stall already seen) */
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

static struct {
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
} rstate;

/* Task tracks made at most: a sink keeps a sequence per track (the .pftrace: its interning state, a bitmap
 * over the code ids) and looks a track up among them, so a program with 10,000 named tasks would cost a
 * trace 10,000 of them; past this many, a task's steps stay on its thread's track (still named by it). */
#define OC_TASK_TRACKS_MAX 256

/* the track of task `task`'s steps on thread `tid`: its tid (made on first use); tid itself if none can be */
static long task_track(long tid, uint32_t task) {
    uint64_t h = ((uint64_t)tid * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)task * 0xC2B2AE3D27D4EB4Full);
    if (rstate.ntt * 2 >= rstate.tt_cap) { /* (grow: at most half full) */
        uint32_t cap = rstate.tt_cap ? rstate.tt_cap * 2 : 64;
        uint32_t *nh = calloc(cap, sizeof *nh);
        if (!nh)
            return tid;
        for (uint32_t k = 0; k < rstate.ntt; k++) {
            uint64_t g = ((uint64_t)rstate.tt[k].tid * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)rstate.tt[k].task * 0xC2B2AE3D27D4EB4Full);
            uint32_t j = (uint32_t)(g >> 32) & (cap - 1);
            while (nh[j])
                j = (j + 1) & (cap - 1);
            nh[j] = k + 1;
        }
        free(rstate.tt_hash);
        rstate.tt_hash = nh;
        rstate.tt_cap = cap;
    }
    uint32_t j = (uint32_t)(h >> 32) & (rstate.tt_cap - 1);
    for (; rstate.tt_hash[j]; j = (j + 1) & (rstate.tt_cap - 1)) {
        uint32_t k = rstate.tt_hash[j] - 1;
        if (rstate.tt[k].tid == tid && rstate.tt[k].task == task)
            return OC_TASK_TID_BASE + (long)k;
    }
    if (rstate.ntt >= OC_TASK_TRACKS_MAX)
        return tid;
    if (rstate.ntt == rstate.captt) {
        uint32_t cap = rstate.captt ? rstate.captt * 2 : 16;
        void *n = realloc(rstate.tt, cap * sizeof *rstate.tt);
        if (!n)
            return tid;
        rstate.tt = n;
        rstate.captt = cap;
    }
    memset(&rstate.tt[rstate.ntt], 0, sizeof rstate.tt[rstate.ntt]);
    rstate.tt[rstate.ntt].tid = tid;
    rstate.tt[rstate.ntt].task = task;
    rstate.tt_hash[j] = ++rstate.ntt;
    return OC_TASK_TID_BASE + (long)(rstate.ntt - 1);
}

int oc_render_task_track(long otid, long *tid, uint32_t *task) {
    if (otid < OC_TASK_TID_BASE || otid - OC_TASK_TID_BASE >= (long)rstate.ntt)
        return 0;
    *tid = rstate.tt[otid - OC_TASK_TID_BASE].tid;
    *task = rstate.tt[otid - OC_TASK_TID_BASE].task;
    return 1;
}

uint32_t oc_render_task_tracks(void) { return rstate.ntt; }

static oc_codeent unknown_code = {.qualname = "<unknown code>", .filename = "?", .qualname_raw = "<unknown code>",
                                  .filename_raw = "?"};

oc_codeent *oc_rcode(uint32_t id) {
    if (id < rmeta.ncodes && rmeta.codes[id].qualname)
        return &rmeta.codes[id];
    return &unknown_code;
}

/* Functions whose recorded calls are a part of their calls: their start (near-zero mode) or one of
 * their C call sites was de-instrumented (CF_START_DISABLED in the recording's code states). */
uint32_t oc_render_partial(void) {
    uint32_t n = 0;
    for (uint32_t id = 0; id < rmeta.ncodes; id++)
        n += rmeta.codes[id].qualname && (rmeta.codes[id].flags & CF_START_DISABLED);
    return n;
}

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

static uint64_t mono_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void show_progress(int last) {
    uint64_t now = mono_now_ns();
    if (!last && now < rstate.progress_next_ns)
        return;
    if (now - rstate.progress_start_ns < rstate.progress_after_ns) { /* only renders that take over a second */
        rstate.progress_next_ns = now + 100000000ull;
        return;
    }
    rstate.progress_next_ns = now + 250000000ull;
    char line[512];
    int n = snprintf(line, sizeof line, "\rocular: rendering %.300s: %3u%%%s", rstate.progress_name,
                     (unsigned)(rstate.total ? rstate.done * 100 / rstate.total : 100), last ? "\n" : "");
    if (n > 0 && write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0)
        rstate.progress = 0;
}

/* A loop's run begins (its first back jump: no iteration timed yet): counted for the statistics, out of the
 * record loop's way (its registers) */
static __attribute__((noinline, cold)) void run_start(uint32_t code_id, uint32_t src, uint32_t dest) {
    if (!rstate.nostats)
        oc_stats_loop_start(code_id, src, dest);
}

/* A loop run is over (its loop finished, another took its slot, or its frame ended). */
static void end_run(rthread *t, frame *f, loop_slot *l) {
    if (l->run_iters && rstate.loops == OC_LOOPS_RUNS && rstate.sink->loop_run) {
        oc_codeent *e = oc_rcode(f->code_id);
        int line = e->lines && l->dest < e->nunits ? e->lines[l->dest] : -1;
        rstate.sink->loop_run(&rstate.out, t->otid, to_ns(l->run_first_ts), to_ns(l->last_ts), f->code_id, line, l->dest * 2,
                         l->run_iters, l->run_cycles);
    }
    l->run_iters = 0;
    l->run_cycles = 0;
}

/* The record loop's specializations, constants where it is inlined.  LEAN: the recording has no sampling
 * windows (oc_attr_on 0) and is not precise, so those tests are left out (whether loops are shown as
 * runs is one test per slice end, in every copy).
 * SLICE: the sink takes whole slices (1) or begins and ends (0); -1: either, tested per event.
 * NOSTATS: the trace alone (a render asked for no statistics, of a recording that is not precise): a
 * frame keeps what the trace shows (its code, depth, start and loops), and nothing else is counted --
 * no self time, no recursion links, no basic blocks, no sampling estimates.  The trace is the same
 * bytes either way (tests/test_perfetto.py, test_the_trace_alone_is_the_same_trace). */
#define SLICE_ANY (-1)
static inline int sink_slices(int slice) { return slice == SLICE_ANY ? rstate.sink->slice != NULL : slice; }

/* ---- asyncio task steps (asyncio.c) ----
 * An OC_MARK_TASK record says the next enter begins a step of that task: the frame it opens is the
 * step's (step_at).  The step is a slice of the task's code (one per task name) around that frame, on
 * the same track -- begun before the frame's own, ended after it -- and a slice of it in the statistics
 * (calls: steps; inclusive: the time the task ran; self: none), its frame's caller there.  A step that
 * holds the thread rstate.stall_ticks or more is a loop stall: the stack when it reached that (from the step's
 * frame up) and its whole length go to the statistics (oc_stats_stall). */
#define OC_STALL_MS 100 /* asyncio's debug mode's slow_callback_duration; the recording may say otherwise */

/* ---- which task woke which (trace formats): flows, and tasks' lives ----
 * OC_MARK_WAKE: asyncio's call_soon, running on this thread, scheduled a step of the task with that key.
 * The scheduling begins a flow in the slice open there (call_soon's, inside the waking task's step or
 * the loop's callback), which the task's next step ends.  A task's first scheduling is its creation: its
 * life, from then to the end of its last step, is a slice ("task life") on its track, when the track
 * has no other life open and no step since (a track shared by tasks of one name or one coroutine shows
 * the first of overlapping lives only; the report counts them all).  Keys are tasks' addresses: one is
 * forgotten when its task ends, so that a new task at the same address is a new one. */
static inline uint32_t wake_slot(uint32_t key, uint32_t cap) { return (key * 0x9E3779B1u) >> 7 & (cap - 1); }

/* the task `key`'s entry (added: made if missing; NULL without memory) */
static wake_ent *wake_find(rthread *t, uint32_t key, int add) {
    if (add && (t->wk_n + 1) * 2 > t->wk_cap) {
        uint32_t cap = t->wk_cap ? t->wk_cap * 2 : 64;
        wake_ent *n = cap <= (1u << 24) ? calloc(cap, sizeof *n) : NULL;
        if (!n)
            return NULL;
        for (uint32_t i = 0; i < t->wk_cap; i++)
            if (t->wk[i].used) {
                uint32_t j = wake_slot(t->wk[i].key, cap);
                while (n[j].used)
                    j = (j + 1) & (cap - 1);
                n[j] = t->wk[i];
            }
        free(t->wk);
        t->wk = n;
        t->wk_cap = cap;
    }
    if (!t->wk_cap)
        return NULL;
    uint32_t j = wake_slot(key, t->wk_cap);
    for (; t->wk[j].used; j = (j + 1) & (t->wk_cap - 1))
        if (t->wk[j].key == key)
            return &t->wk[j];
    if (!add)
        return NULL;
    t->wk[j] = (wake_ent){.key = key, .used = 1};
    t->wk_n++;
    return &t->wk[j];
}

/* forget an entry (linear probing: the entries after it that would not be found move up) */
static void wake_del(rthread *t, wake_ent *e) {
    uint32_t m = t->wk_cap - 1, i = (uint32_t)(e - t->wk), j = i;
    for (;;) {
        j = (j + 1) & m;
        if (!t->wk[j].used)
            break;
        uint32_t h = wake_slot(t->wk[j].key, t->wk_cap);
        if (((j - h) & m) >= ((j - i) & m)) { /* (its home is not between i and j: it may move to i) */
            t->wk[i] = t->wk[j];
            i = j;
        }
    }
    t->wk[i].used = 0;
    t->wk_n--;
}

static __attribute__((noinline, cold)) void task_wake(rthread *t, uint32_t key, uint64_t ts) {
    wake_ent *e = wake_find(t, key, 1);
    if (!e)
        return;
    if (!e->started && !e->created)
        e->created = ts ? ts : 1;
    if (rstate.sink->flow) { /* (ids unique across the processes a merged trace holds: the pid's low 20 bits above the
                         * count; below 2^53, so that a JSON reader's doubles keep them whole) */
        e->flow = (uint64_t)((uint32_t)rmeta.pid & 0xFFFFFu) << 32 | (uint32_t)++rstate.flows;
        rstate.sink->flow(&rstate.out, t->otid, to_ns(ts), e->flow, 0);
    }
}

static void life_end(uint32_t k, uint64_t ts) {
    rstate.tt[k].life_open = 0;
    long track = OC_TASK_TID_BASE + (long)k;
    if (rstate.sink->slice)
        rstate.sink->slice(&rstate.out, track, to_ns(rstate.tt[k].life_begin), to_ns(ts), rstate.life_code, 0);
    else
        rstate.sink->end(&rstate.out, track, to_ns(ts));
}

/* the step about to begin on task track `otid` is keyed: its life begins (before the step's slice), and its
 * scheduling's flow ends in it (after) -- step_begin */
static __attribute__((noinline, cold)) wake_ent *step_keyed(rthread *t, int slice) {
    wake_ent *e = wake_find(t, t->step_key, 1);
    if (!e || e->started)
        return e;
    e->started = 1;
    if (e->created && t->otid != t->tid && rstate.life_code != UINT32_MAX) {
        uint32_t k = (uint32_t)(t->otid - OC_TASK_TID_BASE);
        if (!rstate.tt[k].life_open && rstate.tt[k].last_end <= e->created) {
            rstate.tt[k].life_open = 1;
            rstate.tt[k].life_key = t->step_key;
            rstate.tt[k].life_begin = e->created;
            if (!sink_slices(slice))
                rstate.sink->begin(&rstate.out, t->otid, to_ns(e->created), rstate.life_code);
        }
    }
    return e;
}

/* the time a step or callback that began at ts is a loop stall from */
static uint64_t stall_from(uint64_t ts) {
    if (!rstate.stall_ticks) {
        double npt = rmeta.ns_per_tick > 0 ? rmeta.ns_per_tick : 1.0;
        rstate.stall_ticks = (uint64_t)((rmeta.stall_ms ? rmeta.stall_ms : OC_STALL_MS) * 1e6 / npt);
        rstate.stall_ticks += !rstate.stall_ticks;
    }
    return ts + rstate.stall_ticks;
}

/* a loop callback that is not a task's step (asyncio's Handle._run outside a step) began: a stall too if
 * it holds the loop (stall_seen), ended by cb_end */
static __attribute__((noinline, cold)) void cb_begin(rthread *t, uint64_t ts) {
    t->cb_at = t->n;
    t->stall_at = stall_from(ts);
    t->stall_n = 0;
}

static __attribute__((noinline, cold)) void cb_end(rthread *t, const frame *f, uint64_t ts, int nostats) {
    t->cb_at = 0;
    t->stall_at = 0;
    if (t->stall_n && !nostats) {
        uint64_t at = to_ns(f->begin_ts), zero = to_ns(rmeta.tsc0);
        oc_stats_stall(UINT32_MAX, at > zero ? at - zero : 0, ts > f->begin_ts ? ts - f->begin_ts : 0,
                       t->stall_codes, t->stall_n);
    }
    t->stall_n = 0;
}

static __attribute__((noinline, cold)) void step_begin(rthread *t, uint64_t ts, int slice, int started,
                                                       uint32_t task) {
    int keyed = t->key_pending;
    t->key_pending = 0;
    if (t->step_at) /* (a step inside a step: a nested event loop; the outer one goes on) */
        return;
    t->cb_at = 0; /* (the callback that runs the step: the step is the stall, if any) */
    t->step_at = t->n;
    t->step_started = started;
    t->step_how = 0;
    t->cancel_mark = 0;
    t->step_task = task;
    t->step_keyed = (uint8_t)keyed;
    t->step_key = t->key_mark;
    t->stall_at = stall_from(ts);
    t->stall_n = 0;
    if (!sink_slices(slice)) /* (the step on the thread's track) */
        rstate.sink->begin(&rstate.out, t->otid, to_ns(ts), t->step_task);
    if (rstate.task_tracks) { /* ...and on the task's, with the coroutine's stack */
        t->otid = task_track(t->tid, t->step_task);
        wake_ent *e = keyed ? step_keyed(t, slice) : NULL;
        if (t->otid != t->tid && !sink_slices(slice))
            rstate.sink->begin(&rstate.out, t->otid, to_ns(ts), t->step_task);
        if (e && e->flow && rstate.sink->flow) {
            rstate.sink->flow(&rstate.out, t->otid, to_ns(ts), e->flow, 1);
            e->flow = 0;
        }
    }
}

static __attribute__((noinline, cold)) void stall_seen(rthread *t) {
    uint64_t at = t->stall_at;
    t->stall_at = 0;
    if (rstate.sink->instant && rstate.stall_code != UINT32_MAX) { /* marked in the timeline where it passed the limit */
        rstate.sink->instant(&rstate.out, t->tid, to_ns(at), rstate.stall_code);
        if (t->otid != t->tid)
            rstate.sink->instant(&rstate.out, t->otid, to_ns(at), rstate.stall_code);
    }
    uint32_t from = t->step_at ? t->step_at - 1 : t->cb_at ? t->cb_at - 1 : t->n, k = 0;
    for (uint32_t i = from; i < t->n && k < OC_STALL_DEPTH; i++)
        t->stall_codes[k++] = t->stack[i].code_id;
    t->stall_n = k ? k : 1; /* (1 with nothing kept: a stall all the same) */
    if (!k)
        t->stall_codes[0] = UINT32_MAX;
}

/* the step's slice in the trace: whole before its frame's (a slice sink: written first, the enclosing one of two
 * slices alike), or its end after the frame's */
static __attribute__((noinline, cold)) void step_slice(rthread *t, const frame *f, uint64_t ts, int whole) {
    if (whole)
        rstate.sink->slice(&rstate.out, t->otid, to_ns(f->begin_ts), to_ns(ts), t->step_task, f->cut);
    else
        rstate.sink->end(&rstate.out, t->otid, to_ns(ts));
}

static __attribute__((noinline, cold)) void step_end(rthread *t, const frame *f, uint64_t ts, int counted,
                                                     int nostats) {
    uint32_t task = t->step_task;
    uint64_t incl = ts > f->begin_ts ? ts - f->begin_ts : 0;
    t->step_at = 0;
    t->stall_at = 0;
    if (t->otid != t->tid) {
        uint32_t k = (uint32_t)(t->otid - OC_TASK_TID_BASE);
        rstate.tt[k].last_end = ts;
        if (t->step_how && t->step_keyed && rstate.tt[k].life_open && rstate.tt[k].life_key == t->step_key)
            life_end(k, ts); /* (the task is done) */
    }
    if (t->step_how && t->step_keyed && t->wk_cap) {
        wake_ent *e = wake_find(t, t->step_key, 0);
        if (e)
            wake_del(t, e);
    }
    if (t->otid != t->tid) { /* back on the thread's track, which has the step as one slice */
        t->otid = t->tid;
        if (rstate.sink->slice)
            rstate.sink->slice(&rstate.out, t->otid, to_ns(f->begin_ts), to_ns(ts), task, f->cut);
        else
            rstate.sink->end(&rstate.out, t->otid, to_ns(ts));
    }
    if (nostats)
        return;
    oc_stats_slice(task, 1, incl, 0, incl, !counted, t->n > 0 ? t->stack[t->n - 1].code_id : UINT32_MAX);
    uint64_t zero = to_ns(rmeta.tsc0), b = to_ns(f->begin_ts), e = to_ns(ts);
    oc_stats_task(task, f->code_id, t->step_started, t->step_how, b > zero ? b - zero : 0, e > zero ? e - zero : 0);
    if (t->stall_n) {
        uint64_t at = to_ns(f->begin_ts), zero = to_ns(rmeta.tsc0);
        oc_stats_stall(task, at > zero ? at - zero : 0, incl, t->stall_codes, t->stall_n);
        t->stall_n = 0;
    }
}

/* The popped frame f's slice to the sink (whole, or its end), and, when it began a task's step, the step's
 * slice around it (written first: the enclosing one of two alike) and the step's end. */
static inline __attribute__((always_inline)) void emit_pop(rthread *t, const frame *f, uint64_t ts, int counted,
                                                           int slice, int nostats) {
    int step = UNLIKELY(t->step_at == t->n + 1);
    if (sink_slices(slice)) {
        if (step)
            step_slice(t, f, ts, 1);
        rstate.sink->slice(&rstate.out, t->otid, to_ns(f->begin_ts), to_ns(ts), f->code_id, f->cut);
    } else {
        rstate.sink->end(&rstate.out, t->otid, to_ns(ts));
        if (step)
            step_slice(t, f, ts, 0);
    }
    if (step)
        step_end(t, f, ts, counted, nostats);
    if (UNLIKELY(t->cb_at == t->n + 1))
        cb_end(t, f, ts, nostats);
}

/* Close the top frame; `counted`: it got its real end (an inferred one is counted as truncated). */
static inline __attribute__((always_inline)) void pop_frame_k(rthread *t, uint64_t ts, int counted,
                                                              int slice, int nostats) {
    frame *f = &t->stack[t->n - 1];
    if (UNLIKELY(rstate.loops == OC_LOOPS_RUNS) && f->loops_on)
        for (int i = 0; i < NLOOPS; i++)
            if (f->loops[i].src != UINT32_MAX)
                end_run(t, f, &f->loops[i]);
    t->n--;
    if (nostats) {
        emit_pop(t, f, ts, counted, slice, 1);
        return;
    }
    uint64_t incl = f->self + f->child;
    rstate.same_top[f->code_id] = f->prev_same;
    if (f->loops_on)
        oc_stats_looped(f->code_id, f->self);
    /* total time counts each recursion tree once: a counted activation adds what its counted
     * same-code descendants did not already add; an uncounted one passes theirs down */
    oc_stats_slice(f->code_id, f->is_call, incl, f->self, incl - f->same, !counted,
                   UNLIKELY(t->step_at == t->n + 1) ? t->step_task : t->n > 0 ? f[-1].code_id : UINT32_MAX);
    if (UNLIKELY(f->hidden))
        oc_attr_pop(&t->attr, f->anchor, f->code_id, f->head == f->code_id, f->prev_same != 0, f->win_mark, incl);
    if (f->prev_same) { /* recursion: the nearest activation of the same code below */
        frame *same = &t->stack[f->prev_same - 1];
        same->same += counted ? incl : f->same;
    }
    if (t->n > 0)
        f[-1].child += incl;
    emit_pop(t, f, ts, counted, slice, 0);
}

static __attribute__((noinline)) void pop_frame(rthread *t, uint64_t ts, int counted) {
    if (rstate.nostats)
        pop_frame_k(t, ts, counted, SLICE_ANY, 1);
    else
        pop_frame_k(t, ts, counted, SLICE_ANY, 0);
}

/* Close frames above `keep`.  `matched`: the top one got its real end (others were inferred). */
static void pop_to(rthread *t, uint32_t keep, uint64_t ts, int matched) {
    while (t->n > keep)
        pop_frame(t, ts, matched && t->n == keep + 1);
}

/* A jump of a code below the top of the stack: the frames above its nearest activation ended unseen (near-
 * zero mode: their return sites were disabled after LATE_ENDS_MAX unrecorded ends, monitor.c) -- they are
 * ended at the thread's last record, so the time from there on is the jumping frame's, not a stale
 * frame's.  A code with no activation on the stack (it began before tracing did) changes nothing. */
static __attribute__((noinline)) void unstale(rthread *t, uint32_t code_id) {
    uint32_t k = t->n;
    while (k > 0 && t->stack[k - 1].code_id != code_id)
        k--;
    if (k > 0 && t->have_prev)
        pop_to(t, k, t->prev_ts, 0);
}

/* An enter at `depth` with frames at that depth or deeper (at: 1), or a leave at `depth` with deeper
 * frames (at: 0): their ends were not seen (near-zero mode: return sites disabled after LATE_ENDS_MAX
 * unrecorded ends; a lost record).  They end at the thread's last record, as unstale's do, so the gap
 * before this record is the frame below's (which made the call or returns), not a frame already gone.
 * Before the first record of the thread (no last record) the caller ends them at this one's time. */
static __attribute__((noinline)) void pop_stale(rthread *t, uint32_t depth, int at) {
    if (!t->have_prev)
        return;
    uint32_t keep = t->n;
    while (keep > 0 && t->stack[keep - 1].depth + (uint32_t)at > depth)
        keep--;
    pop_to(t, keep, t->prev_ts, 0);
}

/* Per code, lazily: prefix counts of instructions and of block-ending instructions (jumps and branches,
 * bit 7 of the recorded cache table) starting before each unit; NULL without bytecode or memory. */
static uint32_t *prefixes(uint32_t id, oc_codeent *e) {
    if (!e->code || id >= rstate.ncodes_alloc)
        return NULL;
    uint32_t *p = rstate.insn_prefix[id];
    if (p)
        return p;
    size_t n2 = (size_t)e->nunits + 2;
    p = malloc(2 * n2 * sizeof *p);
    if (!p)
        return NULL;
    uint32_t *br = p + n2, n = 0, nb = 0, next = 0;
    for (uint32_t u = 0; u <= e->nunits; u++) {
        p[u] = n;
        br[u] = nb;
        if (u == next && u < e->nunits) {
            uint8_t info = rmeta.cache_entries[e->code[2 * u]];
            n++;
            nb += info >> 7;
            next = u + 1 + (info & 0x7F);
        }
    }
    p[e->nunits + 1] = n;
    br[e->nunits + 1] = nb;
    rstate.insn_prefix[id] = p;
    return p;
}

/* instructions in units [dest, src] of code `id`: a difference of prefix counts */
static uint32_t static_insns(uint32_t id, uint32_t dest, uint32_t src) {
    oc_codeent *e = oc_rcode(id);
    uint32_t *p = prefixes(id, e);
    if (!p || !e->nunits)
        return 0;
    if (src >= e->nunits)
        src = e->nunits - 1;
    if (dest > src)
        return 0;
    return p[src + 1] - p[dest];
}

/* A span between two recorded jumps is one basic block only if no jump or branch lies before its end:
 * one inside means its site was de-instrumented, and the span holds several blocks' time. */
static inline int one_block(uint32_t id, uint32_t start, uint32_t end) {
    uint32_t *p = rstate.insn_prefix[id]; /* (id < rstate.ncodes_alloc: the records' ids are checked) */
    oc_codeent *e;
    if (LIKELY(p != NULL)) { /* built: the code has an entry with bytecode */
        e = &rmeta.codes[id];
    } else {
        e = oc_rcode(id);
        p = prefixes(id, e);
    }
    if (!p || end >= e->nunits || start > end)
        return 1; /* no bytecode (or an old recording): as before */
    uint32_t *br = p + e->nunits + 2;
    return br[end] - br[start] == 0;
}

static void on_backjump(rthread *t, frame *f, uint32_t src, uint32_t dest, uint64_t ts) {
    /* A loop is known by its header (the jump target): `continue` edges of one loop share it.  Other
     * loops whose header lies inside this iteration's span are inner loops (their next iteration
     * starts a new run); loops entirely before or after this one are finished: free their slots. */
    loop_slot *hit = NULL, *freeslot = NULL, *oldest = NULL;
    if (!f->loops_on) { /* free slots (a slot's run starts when it is taken) */
        for (int k = 0; k < NLOOPS; k++)
            f->loops[k].src = UINT32_MAX;
        f->loops_on = 1;
    }
    for (int i = 0; i < NLOOPS; i++) {
        loop_slot *l = &f->loops[i];
        if (l->src != UINT32_MAX) {
            if (l->dest == dest) {
                hit = l;
            } else if ((l->dest > dest && l->dest <= src) || l->src < dest || l->dest > src) {
                end_run(t, f, l);
                l->src = UINT32_MAX;
            }
        }
        if (l->src == UINT32_MAX) {
            if (!freeslot)
                freeslot = l;
        } else if (l != hit && (!oldest || l->last_ts < oldest->last_ts)) {
            oldest = l;
        }
    }
    if (hit) {
        oc_codeent *e = oc_rcode(f->code_id);
        /* (precise mode: counted, unless the code's instruction recording has ended; adaptive mode: an
         * iteration with instruction records ran under a threshold-0 probe, slower: not timed) */
        int probed = f->insns != hit->insn_mark;
        uint32_t insns = rmeta.precise && probed ? (uint32_t)(f->insns - hit->insn_mark)
                                             : static_insns(f->code_id, dest, src);
        uint64_t self_cycles = f->self - hit->self_mark;
        /* An iteration carried over a yield (resume_loops): the wall time since its last backward jump holds
         * the time the generator was suspended; its own is its self time.  It is counted, with no instant
         * (one per resume would double a chain's events) and in no run (it began in another segment). */
        int carried = hit->resumed;
        uint64_t cycles = carried ? self_cycles : ts - hit->last_ts;
        if (!rstate.nostats)
            oc_stats_loop(f->code_id, src, dest, cycles, self_cycles, insns, rmeta.precise || !probed);
        if (rstate.loops == OC_LOOPS_ITERATIONS && !carried) {
            int line = e->lines && dest < e->nunits ? e->lines[dest] : -1;
            rstate.sink->loop(&rstate.out, t->otid, to_ns(ts), f->code_id, line, dest * 2, insns, cycles,
                         dur_ns(cycles, ts));
        }
        if (!carried) {
            if (!hit->run_iters++)
                hit->run_first_ts = hit->last_ts;
            hit->run_cycles += cycles;
        }
        hit->resumed = 0; /* (its next iterations in this segment are the segment's own) */
        if (src > hit->src)
            hit->src = src;
    } else {
        run_start(f->code_id, src, dest);
        hit = freeslot ? freeslot : oldest ? oldest : &f->loops[NLOOPS - 1];
        if (hit->src != UINT32_MAX)
            end_run(t, f, hit);
        hit->src = src;
        hit->dest = dest;
        hit->run_iters = hit->run_cycles = 0;
        hit->resumed = 0;
    }
    hit->last_ts = ts;
    hit->insn_mark = f->insns;
    hit->self_mark = f->self;
}

/* A generator's frame yields with loop slots: keep what its next resume needs of them (which loops, and
 * the frame's figures since each one's last backward jump), for the next resume of its code on this
 * thread. */
static __attribute__((noinline)) void suspend_loops(rthread *t, const frame *f) {
    suspended_loops *s = NULL, *freed = NULL;
    for (uint32_t i = 0; i < t->nsusp && !s; i++)
        if (t->susp[i].code_id == f->code_id)
            s = &t->susp[i];
        else if (t->susp[i].code_id == UINT32_MAX && !freed)
            freed = &t->susp[i];
    if (!s)
        s = freed;
    if (!s) /* a new entry, else the one after the last taken (the oldest, round robin) */
        s = &t->susp[t->nsusp < NSUSPENDED ? t->nsusp++ : t->susp_next++ % NSUSPENDED];
    s->code_id = f->code_id;
    t->susp_mask |= 1ull << (f->code_id & 63);
    for (int k = 0; k < NLOOPS; k++) {
        const loop_slot *l = &f->loops[k];
        s->loops[k].src = l->src;
        if (l->src != UINT32_MAX)
            s->loops[k] = (carried_loop){l->src, l->dest, f->self - l->self_mark, f->insns - l->insn_mark};
    }
}

/* A generator of this code ended (returned or unwound): its loops are not carried to another one. */
static __attribute__((noinline)) void forget_loops(rthread *t, uint32_t code_id) {
    uint64_t mask = 0;
    for (uint32_t i = 0; i < t->nsusp; i++) {
        if (t->susp[i].code_id == code_id)
            t->susp[i].code_id = UINT32_MAX;
        else if (t->susp[i].code_id != UINT32_MAX)
            mask |= 1ull << (t->susp[i].code_id & 63);
    }
    t->susp_mask = mask;
}

/* code_id may have loops suspended on this thread (t->nsusp: some code has had) */
static inline int maybe_suspended(const rthread *t, uint32_t code_id) { return (t->susp_mask >> (code_id & 63)) & 1; }

/* A resume of code that yielded with loop slots on this thread: they go on in the new frame, their
 * last backward jump as if at the resume, their next iteration marked as carried over (on_backjump). */
static __attribute__((noinline)) void resume_loops(rthread *t, frame *f, uint64_t ts) {
    for (uint32_t i = 0; i < t->nsusp; i++) {
        suspended_loops *s = &t->susp[i];
        if (s->code_id != f->code_id)
            continue;
        for (int k = 0; k < NLOOPS; k++) {
            const carried_loop *c = &s->loops[k];
            loop_slot *l = &f->loops[k];
            l->src = c->src;
            if (c->src == UINT32_MAX)
                continue;
            l->dest = c->dest;
            l->self_mark = f->self - c->self_since; /* (modulo 2^64: the frame's figures start at 0) */
            l->insn_mark = f->insns - c->insns_since;
            l->last_ts = ts;
            l->run_iters = l->run_cycles = 0;
            l->resumed = 1;
        }
        f->loops_on = 1;
        return;
    }
}

static __attribute__((noinline)) int grow_stack(rthread *t) {
    uint32_t cap = t->cap ? t->cap * 2 : 64;
    frame *s = realloc(t->stack, cap * sizeof(frame));
    if (!s)
        return -1;
    t->stack = s;
    t->cap = cap;
    return 0;
}

static inline __attribute__((always_inline)) frame *push(rthread *t, uint32_t code_id, uint32_t depth, uint64_t ts,
                                                         int is_call, int lean, int nostats) {
    if (UNLIKELY(t->n == t->cap) && grow_stack(t) < 0)
        return NULL;
    frame *f = &t->stack[t->n++];
    f->code_id = code_id;
    f->depth = depth;
    if (nostats) { /* (self and insns stay 0: a generator's carried loops read them) */
        f->begin_ts = ts;
        f->is_call = is_call;
        f->cut = 0;
        f->loops_on = 0;
        f->self = 0;
        f->insns = 0;
        f->prev_same = 0;
        return f;
    }
    f->prev_same = rstate.same_top[code_id];
    rstate.same_top[code_id] = t->n;
    f->insns = 0;
    f->begin_ts = ts;
    f->self = f->child = f->same = 0;
    f->is_call = is_call;
    f->cut = 0;
    f->blk_start = is_call ? 0 : UINT32_MAX; /* a call starts a block at offset 0 */
    f->blk_self = 0;
    f->blk_insns = 0;
    f->insn_unit = UINT32_MAX;
    f->loops_on = 0;
    f->hidden = t->sampled;
    if (UNLIKELY(f->hidden || (!lean && oc_attr_on))) { /* (only sampling windows read these) */
        frame *up = t->n > 1 ? f - 1 : NULL;
        f->anchor = !f->hidden ? code_id : !up ? OC_NO_CODE : up->hidden ? up->anchor : up->code_id;
        /* (a caller whose begin was not recorded -- a window opened inside it -- leaves a depth gap
         * under the first hidden frame: that one is not the visible frame's own callee) */
        f->head = f->hidden && up && up->hidden ? up->head
                  : up && depth > up->depth + 2 ? OC_NO_CODE : code_id;
        f->win_mark = t->attr.win_total;
        if (f->hidden && is_call) /* (calls are activations: a generator's resumes are not calls) */
            oc_attr_call(&t->attr, f->anchor, code_id, ts);
    }
    return f;
}

static inline int valid_code(uint32_t id) { return id < rstate.ncodes_alloc; }

/* Depths in the renderer: 2d for a Python frame at frame depth d, 2d+1 for a C function called from it
 * (so it nests inside its caller, and the Python functions it calls back, at 2d+2, nest inside it). */
static inline int is_enter(uint32_t k) { return k == K_START || k == K_RESUME || k == K_THROW || k == K_CCALL; }
static inline int is_leave(uint32_t k) { return k == K_RETURN || k == K_YIELD || k == K_UNWIND || k == K_CRETURN; }
static inline uint32_t rdepth(uint32_t k, uint32_t p) { return k >= K_CCALL ? 2 * p + 1 : 2 * p; }

/* The gap since the thread's previous timed record goes to the running frame's self time.  `steady`
 * (a constant where it is inlined): the thread has a previous record and the calibration has seen
 * all its gaps, so neither is tested. */
static inline __attribute__((always_inline)) void tick(rthread *t, const oc_rec *r, int steady, int lean,
                                                      int nostats) {
    uint64_t ts = r->ts;
    if (UNLIKELY(t->stall_at) && ts >= t->stall_at)
        stall_seen(t);
    if (nostats) { /* (the thread's last time: where a recording cut short closes its slices) */
        t->prev_ts = ts;
        return;
    }
    if (steady || LIKELY(t->have_prev)) {
        uint64_t delta = ts > t->prev_ts ? ts - t->prev_ts : 0;
        /* own-cost calibration: only gaps between two records of one code object (a few
         * bytecodes apart); other gaps may hold untraced code (--include, excluded callees) */
        if (!steady && r->code_id == t->prev_code)
            oc_stats_gap(delta);
        if (LIKELY(t->n > 0)) {
            frame *top = &t->stack[t->n - 1];
            uint64_t net = oc_stats_net(delta, OC_KIND(r->info));
            top->self += net;
            if (!lean && UNLIKELY(oc_attr_on))
                if (!oc_attr_gap_fast(&t->attr, ts, net, top->code_id, top->hidden))
                    oc_attr_gap(&t->attr, t->prev_ts, ts, net, top->code_id, top->hidden, top->anchor, top->head);
        }
    }
    t->prev_ts = ts;
    if (!steady) { /* (steady: both are already what they would be set to, or no longer read) */
        t->prev_code = r->code_id;
        t->have_prev = 1;
    }
    t->mark = 0; /* a sampling mark is for the record right after it */
}

/* One record.  Code ids are checked where a record names a code (enter, leave, jump, instruction);
 * every record but K_EXT and K_PAUSE_END is timed (tick), first thing in its case. */
static inline __attribute__((always_inline)) void process_rec(rthread *t, const oc_rec *r, int steady, int lean,
                                                              int slice, int nostats) {
    uint32_t kind = OC_KIND(r->info), p = OC_PAYLOAD(r->info);
    switch (kind) {
    case K_START:
    case K_RESUME:
    case K_THROW:
    case K_CCALL: {
        uint32_t task_mark = t->task_mark; /* (an asyncio task's step begins here: consumed by this enter) */
        t->task_mark = 0;
        t->sampled = t->mark; /* recorded only because a sampling window was open (push reads it) */
        if (UNLIKELY(t->n > 0 && t->stack[t->n - 1].depth >= rdepth(kind, p)) && valid_code(r->code_id))
            pop_stale(t, rdepth(kind, p), 1);
        tick(t, r, steady, lean, nostats);
        if (UNLIKELY(!valid_code(r->code_id)))
            break;
        p = rdepth(kind, p);
        if (UNLIKELY(t->n > 0 && t->stack[t->n - 1].depth >= p)) { /* ends never seen: inferred */
            uint32_t keep = t->n;
            while (keep > 0 && t->stack[keep - 1].depth >= p)
                keep--;
            pop_to(t, keep, r->ts, 0);
        }
        frame *nf = push(t, r->code_id, p, r->ts, kind == K_START || kind == K_CCALL, lean, nostats);
        if (LIKELY(nf != NULL)) {
            if (UNLIKELY(task_mark))
                step_begin(t, r->ts, slice, kind == K_START, task_mark - 1);
            else if (UNLIKELY(r->code_id + 1 == rstate.handle_run1) && !t->step_at && !t->cb_at)
                cb_begin(t, r->ts);
            if (UNLIKELY(t->nsusp) && (kind == K_RESUME || kind == K_THROW) && maybe_suspended(t, nf->code_id))
                resume_loops(t, nf, r->ts);
            if (!sink_slices(slice))
                rstate.sink->begin(&rstate.out, t->otid, to_ns(r->ts), r->code_id);
        }
        break;
    }
    case K_RETURN:
    case K_YIELD:
    case K_UNWIND:
    case K_CRETURN: {
        if (UNLIKELY(t->n > 0 && t->stack[t->n - 1].depth > rdepth(kind, p)) && valid_code(r->code_id))
            pop_stale(t, rdepth(kind, p), 0);
        tick(t, r, steady, lean, nostats);
        if (UNLIKELY(!valid_code(r->code_id)))
            break;
        p = rdepth(kind, p);
        if (UNLIKELY(t->n > 0 && t->stack[t->n - 1].depth > p)) { /* deeper frames: ends inferred */
            uint32_t keep = t->n;
            while (keep > 0 && t->stack[keep - 1].depth > p)
                keep--;
            pop_to(t, keep, r->ts, 0);
        }
        if (LIKELY(t->n > 0) && t->stack[t->n - 1].depth == p) {
            if (UNLIKELY(t->step_at == t->n)) /* (the step's coroutine: how the task goes on) */
                t->step_how = kind == K_RETURN ? 1 : kind == K_UNWIND ? 2 + t->cancel_mark : 0;
            if (kind == K_YIELD && t->stack[t->n - 1].loops_on && t->stack[t->n - 1].code_id == r->code_id)
                suspend_loops(t, &t->stack[t->n - 1]);
            else if (UNLIKELY(t->nsusp) && kind != K_YIELD && maybe_suspended(t, r->code_id))
                forget_loops(t, r->code_id); /* (a generator that ended: the next one starts afresh) */
            pop_frame_k(t, r->ts, t->stack[t->n - 1].code_id == r->code_id, slice, nostats);
        }
        else if (!lean && UNLIKELY(oc_attr_on)) /* (direct: its caller is the top frame) */
            oc_attr_unmatched_leave(&t->attr, r->code_id, kind == K_CRETURN,
                                    t->n > 0 && t->stack[t->n - 1].depth + (kind == K_CRETURN ? 1 : 2) == p);
        break;
    }
    case K_JUMP:
    case K_EXT: {
        if (kind == K_JUMP) {
            if (UNLIKELY(t->n > 0 && t->stack[t->n - 1].code_id != r->code_id))
                unstale(t, r->code_id);
            tick(t, r, steady, lean, nostats);
        }
        if (UNLIKELY(!valid_code(r->code_id)))
            break;
        uint32_t src, dest;
        if (kind == K_JUMP) {
            src = p >> OC_NEAR_BITS;
            dest = p & OC_NEAR_MAX;
        } else {
            if (!t->far_pending || t->far_code != r->code_id)
                break;
            src = t->far_src;
            dest = p;
            t->far_pending = 0;
        }
        if (t->n == 0 || t->stack[t->n - 1].code_id != r->code_id)
            break;
        frame *f = &t->stack[t->n - 1];
        if (!nostats && (lean || !rmeta.precise)) { /* (a block an instruction probe ran in is not timed: the probe slowed it) */
            if (f->blk_start != UINT32_MAX && f->blk_insns == f->insns && one_block(f->code_id, f->blk_start, src))
                oc_stats_block(f->code_id, f->blk_start, src, f->self - f->blk_self);
            f->blk_start = dest;
            f->blk_self = f->self;
            f->blk_insns = f->insns;
        }
        if (dest < src)
            on_backjump(t, f, src, dest, r->ts);
        break;
    }
    case K_FARJUMP:
        if (UNLIKELY(t->n > 0 && t->stack[t->n - 1].code_id != r->code_id))
            unstale(t, r->code_id);
        tick(t, r, steady, lean, nostats);
        if (UNLIKELY(!valid_code(r->code_id)))
            break;
        t->far_pending = 1;
        t->far_src = p;
        t->far_code = r->code_id;
        break;
    case K_INSN: /* precise mode, or an adaptive-mode probe: per-instruction statistics only */
        tick(t, r, steady, lean, nostats);
        if (!nostats && valid_code(r->code_id) && t->n > 0 && t->stack[t->n - 1].code_id == r->code_id) {
            frame *f = &t->stack[t->n - 1];
            if (f->insn_unit != UINT32_MAX)
                oc_stats_insn(f->code_id, f->insn_unit, f->self - f->insn_self, !rmeta.precise);
            if (p & OC_INSN_END) { /* the code's instruction recording ends: nothing runs on record */
                f->insn_unit = UINT32_MAX;
            } else {
                f->insns++;
                f->insn_unit = p;
                f->insn_self = f->self;
            }
        }
        break;
    case K_PAUSE:
        tick(t, r, steady, lean, nostats);
        t->pause_begin = r->ts;
        break;
    case K_PAUSE_END:
        /* the wait is its own slice, and not the running function's time */
        if (UNLIKELY(rstate.pause_code == UINT32_MAX)) { /* rendering while recording: no pause code yet */
            rstate.live_failed = 1;
            break;
        }
        if (t->pause_begin) {
            uint64_t d = r->ts > t->pause_begin ? r->ts - t->pause_begin : 0;
            if (rstate.sink->slice) {
                rstate.sink->slice(&rstate.out, t->otid, to_ns(t->pause_begin), to_ns(r->ts), rstate.pause_code, 0);
            } else {
                rstate.sink->begin(&rstate.out, t->otid, to_ns(t->pause_begin), rstate.pause_code);
                rstate.sink->end(&rstate.out, t->otid, to_ns(r->ts));
            }
            if (t->n > 0 && !nostats) {
                frame *f = &t->stack[t->n - 1];
                f->self = f->self > d ? f->self - d : 0;
                f->child += d; /* keeps the parent's inclusive time whole */
            }
            t->prev_ts = r->ts;
            t->pause_begin = 0;
        }
        break;
    case K_MARK: /* not timed: it has the next record's time */
        t->mark = p == OC_MARK_SAMPLED;
        if (p == OC_MARK_TASK && valid_code(r->code_id))
            t->task_mark = r->code_id + 1;
        else if (p == OC_MARK_CANCELLED)
            t->cancel_mark = 1;
        else if (p == OC_MARK_KEY) {
            t->key_mark = r->code_id;
            t->key_pending = 1;
        } else if (p == OC_MARK_WAKE && rstate.task_tracks)
            task_wake(t, r->code_id, r->ts);
        if (p == OC_MARK_CUT && t->n > 0 && !nostats && !rmeta.near_zero) /* (near-zero: that frame may not be the caller) */
            oc_stats_cut(t->stack[t->n - 1].code_id, r->code_id);
        break;
    default: /* K_NONE, or a kind this renderer does not know: timed, nothing else */
        tick(t, r, steady, lean, nostats);
        break;
    }
}

/* A record out of its thread's time order (a damaged recording; never in a sound one): rendered as a
 * copy whose time is clamped to [the thread's last time, rstate.ts_hi], and counted.  A lone leap -- a time past
 * the next record's (`next`: the thread's record after it, or NULL), which is not itself before the last --
 * is brought down to the next record's time, so that one damaged record does not hold the rest of the
 * thread at its time. */
static const oc_rec *in_order(rthread *t, const oc_rec *r, const oc_rec *next, oc_rec *tmp) {
    uint64_t lo = t->prev_ts, ts = r->ts;
    if (next && ts > next->ts && next->ts >= lo)
        ts = next->ts;
    if (ts > rstate.ts_hi)
        ts = rstate.ts_hi;
    if (ts < lo)
        ts = lo;
    if (ts == r->ts)
        return r;
    rmeta.clamped++;
    *tmp = *r;
    tmp->ts = ts;
    return tmp;
}

/* Records [r, rend) of thread t, in the specialization given (LEAN, SLICE: above pop_frame_k).  Their
 * times are in order (span_in_order). */
static inline __attribute__((always_inline)) void process_block(rthread *t, const oc_rec *r, const oc_rec *rend,
                                                                int lean, int slice, int nostats) {
    if (nostats) { /* (no calibration: no self time) */
        for (; r < rend; r++)
            process_rec(t, r, 1, 1, slice, 1);
        return;
    }
    while (r < rend) {
        if (t->have_prev && oc_stats_gaps_seen >= OC_CALIBRATION_GAPS) { /* steady: the loop's copy */
            for (; r < rend; r++)                                        /* without those tests */
                process_rec(t, r, 1, lean, slice, 0);
            break;
        }
        const oc_rec *stop = rend - r > 256 ? r + 256 : rend; /* (looked at again every 256) */
        for (; r < stop; r++)
            process_rec(t, r, 0, lean, slice, 0);
    }
}

/* The records' times rise from the thread's last one and stay within the clock's range: a sound
 * recording's always do, and its spans are rendered with no test per record (a pass over the times
 * costs a few instructions a record; a test in the record loop cost 11). */
static int span_in_order(const rthread *t, const oc_rec *r, uint32_t n, const oc_rec *after) {
    if (!n)
        return 1;
    if (r[0].ts < t->prev_ts || r[n - 1].ts > rstate.ts_hi || (after && r[n - 1].ts > after->ts))
        return 0;
    const oc_rec *p = r + 1, *end = r + n;
    uint64_t prev = r[0].ts;
    for (; end - p >= 4; p += 4) { /* (four at a time: one branch) */
        uint64_t a = p[0].ts, b = p[1].ts, c = p[2].ts, d = p[3].ts;
        if ((a < prev) | (b < a) | (c < b) | (d < c))
            return 0;
        prev = d;
    }
    for (; p < end; p++) {
        if (p->ts < prev)
            return 0;
        prev = p->ts;
    }
    return 1;
}

/* A span of a damaged recording: each record through in_order, in the record loop's general copy (the
 * tests the specializations leave out are made at run time: the same result). */
static __attribute__((noinline)) void process_unordered(rthread *t, const oc_rec *r, const oc_rec *send,
                                                        const oc_rec *after) {
    oc_rec tmp;
    for (; r < send; r++) {
        const oc_rec *rr = in_order(t, r, r + 1 < send ? r + 1 : after, &tmp);
        if (rstate.nostats)
            process_rec(t, rr, 1, 1, SLICE_ANY, 1);
        else
            process_rec(t, rr, 0, 0, SLICE_ANY, 0);
    }
}

/* The records of one span (`after`: the thread's next record, in its next span, or NULL).  Progress is
 * shown between blocks of 64K records; the record loop itself tests nothing but what each record needs. */
static void process_recs(rthread *t, const oc_rec *recs, uint32_t n, const oc_rec *after) {
    rstate.events += n;
    int lean = !oc_attr_on && !rmeta.precise;
    if (UNLIKELY(!span_in_order(t, recs, n, after))) { /* a damaged recording */
        process_unordered(t, recs, recs + n, after);
        if (UNLIKELY(rstate.progress)) {
            rstate.done += n;
            show_progress(0);
        }
        return;
    }
    for (uint32_t blk = 0; blk < n; blk += 0x10000) {
        const oc_rec *r = recs + blk, *rend = recs + (n - blk > 0x10000 ? blk + 0x10000 : n);
        if (rstate.nostats)
            rstate.sink->slice ? process_block(t, r, rend, 1, 1, 1) : process_block(t, r, rend, 1, 0, 1);
        else if (!lean)
            process_block(t, r, rend, 0, SLICE_ANY, 0);
        else if (rstate.sink->slice)
            process_block(t, r, rend, 1, 1, 0);
        else
            process_block(t, r, rend, 1, 0, 0);
        if (UNLIKELY(rstate.progress)) {
            rstate.done += 0x10000;
            show_progress(0);
        }
    }
}

/* Flight-recorder window: the frames already open at the thread's first kept record, outermost
 * first, from the ends that match nothing before them; opened at that record's time, marked cut. */
static void open_cut_frames(rthread *t) {
    const tindex *x = &rstate.ix[t->slot];
    if (!x->nspans)
        return;
    uint32_t cap = 64, n = 0, sp = 0, spcap = 64;
    uint32_t(*ends)[2] = malloc(cap * sizeof *ends);
    uint32_t *depths = malloc(spcap * sizeof *depths);
    if (!ends || !depths) {
        free(ends);
        free(depths);
        return;
    }
    uint64_t first_ts = x->spans[0].n ? x->spans[0].recs[0].ts : 0;
    if (x->spans[0].n > 1 && x->spans[0].recs[1].ts < first_ts) /* (a damaged first time: clamp_rec's) */
        first_ts = x->spans[0].recs[1].ts;
    first_ts = first_ts < t->prev_ts ? t->prev_ts : first_ts > rstate.ts_hi ? rstate.ts_hi : first_ts;
    t->prev_ts = first_ts;
    for (uint32_t s = 0; s < x->nspans; s++)
        for (uint32_t i = 0; i < x->spans[s].n; i++) {
            const oc_rec *r = &x->spans[s].recs[i];
            uint32_t kind = OC_KIND(r->info), p = rdepth(OC_KIND(r->info), OC_PAYLOAD(r->info));
            if (is_enter(kind)) {
                while (sp > 0 && depths[sp - 1] >= p)
                    sp--;
                if (sp == spcap) {
                    uint32_t *d = realloc(depths, (spcap *= 2) * sizeof *d);
                    if (!d)
                        goto done;
                    depths = d;
                }
                depths[sp++] = p;
            } else if (is_leave(kind)) {
                while (sp > 0 && depths[sp - 1] > p)
                    sp--;
                if (sp > 0 && depths[sp - 1] == p) {
                    sp--;
                } else if (sp == 0 && valid_code(r->code_id) && (n == 0 || p < ends[n - 1][1])) {
                    if (n == cap) {
                        uint32_t(*e)[2] = realloc(ends, (cap *= 2) * sizeof *ends);
                        if (!e)
                            goto done;
                        ends = e;
                    }
                    ends[n][0] = r->code_id;
                    ends[n][1] = p;
                    n++;
                }
            }
        }
done:
    for (uint32_t k = n; k-- > 0;)
        if (push(t, ends[k][0], ends[k][1], first_ts, 1, 0, 0)) {
            t->stack[t->n - 1].cut = 1;
            if (rstate.sink->slice)
                continue; /* (given whole at its end) */
            if (rstate.sink->begin_cut)
                rstate.sink->begin_cut(&rstate.out, t->otid, to_ns(first_ts), ends[k][0]);
            else
                rstate.sink->begin(&rstate.out, t->otid, to_ns(first_ts), ends[k][0]);
        }
    free(ends);
    free(depths);
}

/* ---- reading the recording ---- */

static inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* A CALIB block (docs/recording.md): 24 bytes (one rate) or 40 (a final rate, 0 until known, the early
 * rate and the knee).  Returns 1 once the final rate is known. */
static int read_calib(const uint8_t *p, uint32_t len) {
    rmeta.tsc0 = rd64(p);
    rmeta.mono0_ns = rd64(p + 8);
    double npt;
    memcpy(&npt, p + 16, 8);
    if (len < 40) {
        rmeta.ns_per_tick = rmeta.early_npt = npt;
        rmeta.knee_tsc = rmeta.knee_ns = UINT64_MAX;
        return 1;
    }
    memcpy(&rmeta.early_npt, p + 24, 8);
    rmeta.knee_tsc = rd64(p + 32);
    rmeta.knee_ns = UINT64_MAX; /* (check_clock: the knee at the early rate, once the rates are known good) */
    rmeta.ns_per_tick = npt > 0 ? npt : rmeta.early_npt;
    return npt > 0;
}

/* ---- a damaged recording ----
 * Every time written must be finite and every thread's times must rise: the clock's mapping is checked
 * once its blocks are read (check_clock), and a record whose time goes back or leaps is clamped as it
 * is rendered (clamp_rec), so a child slice never begins before its parent nor ends after it. */
#define NS_MAX ((uint64_t)1 << 62) /* ~146 years: every time written is below it */

static int rate_ok(double r) { return r >= 1e-6 && r <= 1e6; } /* (false for NaN) */

/* ticks from `from` while at `rate` the time stays at most NS_MAX (from `base` ns), at most 2^62 ticks */
static uint64_t ticks_until_max(uint64_t from, uint64_t base, double rate) {
    double d = base >= NS_MAX ? 0 : (double)(NS_MAX - base) / rate;
    uint64_t span = d >= (double)NS_MAX ? NS_MAX : (uint64_t)d;
    return from > UINT64_MAX - 1 - span ? UINT64_MAX - 1 : from + span;
}

/* The clock's mapping (header and CALIB blocks) made safe: rates finite and plausible, the start and
 * the knee where they map into [0, NS_MAX]; rstate.ts_lo and rstate.ts_hi bound the ticks it maps there, monotonically.
 * What had to be replaced is noted as damage. */
static void check_clock(void) {
    if (!rate_ok(rmeta.early_npt) || !rate_ok(rmeta.ns_per_tick)) {
        double bad = !rate_ok(rmeta.early_npt) ? rmeta.early_npt : rmeta.ns_per_tick;
        double good = rate_ok(rmeta.ns_per_tick) ? rmeta.ns_per_tick : rate_ok(rmeta.early_npt) ? rmeta.early_npt : 1.0;
        if (!rate_ok(rmeta.early_npt))
            rmeta.early_npt = good;
        if (!rate_ok(rmeta.ns_per_tick))
            rmeta.ns_per_tick = good;
        if (!(rmeta.damage & OC_DAMAGE_RATE)) {
            rmeta.bad_rate = bad;
            rmeta.used_rate = good;
        }
        rmeta.damage |= OC_DAMAGE_RATE;
    }
    if (rmeta.mono0_ns > NS_MAX) {
        rmeta.mono0_ns = 0;
        rmeta.damage |= OC_DAMAGE_START;
    }
    if (rmeta.knee_tsc != UINT64_MAX) {
        if (rmeta.knee_tsc < rmeta.tsc0 || rmeta.knee_tsc - rmeta.tsc0 > NS_MAX ||
            (double)rmeta.mono0_ns + (double)(rmeta.knee_tsc - rmeta.tsc0) * rmeta.early_npt > (double)NS_MAX) {
            rmeta.knee_tsc = rmeta.knee_ns = UINT64_MAX; /* the early rate throughout */
            rmeta.damage |= OC_DAMAGE_START;
        } else {
            rmeta.knee_ns = rmeta.mono0_ns + (uint64_t)(int64_t)((double)(int64_t)(rmeta.knee_tsc - rmeta.tsc0) * rmeta.early_npt);
        }
    } else {
        rmeta.knee_ns = UINT64_MAX;
    }
    double back = (double)rmeta.mono0_ns / rmeta.early_npt; /* ticks before tsc0 down to time 0 */
    uint64_t before = back >= (double)NS_MAX ? NS_MAX : (uint64_t)back;
    rstate.ts_lo = rmeta.tsc0 > before ? rmeta.tsc0 - before : 0;
    rstate.ts_hi = rmeta.knee_tsc != UINT64_MAX ? ticks_until_max(rmeta.knee_tsc, rmeta.knee_ns, rmeta.ns_per_tick)
                                       : ticks_until_max(rmeta.tsc0, rmeta.mono0_ns, rmeta.early_npt);
    if (rstate.ts_hi < rstate.ts_lo)
        rstate.ts_hi = rstate.ts_lo;
}

int oc_render_damage(char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    if (!rmeta.clamped && !rmeta.damage)
        return 0;
#define ADD(...) (k < n ? (void)(k += (size_t)snprintf(buf + k, n - k, __VA_ARGS__)) : (void)0)
    ADD("the recording is damaged:");
    const char *sep = " ";
    if (rmeta.clamped) {
        ADD("%s%llu record%s clamped (time out of order in its thread)", sep, (unsigned long long)rmeta.clamped,
            rmeta.clamped == 1 ? "" : "s");
        sep = "; ";
    }
    if (rmeta.damage & OC_DAMAGE_RATE) {
        ADD("%sthe clock rate %g ns per tick is impossible: %g used", sep, rmeta.bad_rate, rmeta.used_rate);
        sep = "; ";
    }
    if (rmeta.damage & OC_DAMAGE_START) {
        ADD("%sthe clock calibration's start or knee is out of range: replaced", sep);
        sep = "; ";
    }
    if (rmeta.damage & OC_DAMAGE_CODES)
        ADD("%s%u code block%s with an id far out of sequence skipped (their calls render as <unknown code>)",
            sep, rmeta.bad_codes, rmeta.bad_codes == 1 ? "" : "s");
#undef ADD
    return buf[0] != 0;
}

/* Length of the valid UTF-8 sequence at p[0..n) (n > 0), or 0 if it is not one. */
static unsigned utf8_seq(const uint8_t *p, uint32_t n) {
    uint8_t c = p[0];
    if (c < 0x80)
        return 1;
    unsigned len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || len > n)
        return 0;
    uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (unsigned k = 2; k < len; k++)
        if ((p[k] & 0xC0) != 0x80)
            return 0;
    return len;
}

/* The code table's names, bytecode and line tables (rmeta.codes): allocated from blocks of NA_BLOCK bytes, freed
 * together (free_meta).  A malloc per string took 24-32 bytes for the usual short name, four strings and
 * two arrays per code, with a name's JSON-escaped form a copy of it as a rule: 300,000 codes held ~150 MB
 * at stop.  Now a name's escaped form is the name itself when escaping changes nothing, and a file name
 * the same as the last code's is shared. */
#define NA_BLOCK ((size_t)1 << 20)
static struct {
    char *blk;        /* the current block; its first 8 bytes link the previous one */
    size_t used, cap;
    const char *last_fn, *last_fn_esc; /* the last code's file name (raw, escaped) */
    size_t last_fn_len;
} name_arena;

static void *na_alloc(size_t n) {
    n = (n + 7) & ~(size_t)7;
    if (!name_arena.blk || name_arena.used + n > name_arena.cap) {
        size_t cap = n + 8 > NA_BLOCK ? n + 8 : NA_BLOCK;
        char *b = malloc(cap);
        if (!b)
            return NULL;
        memcpy(b, &name_arena.blk, sizeof name_arena.blk);
        name_arena.blk = b;
        name_arena.used = 8;
        name_arena.cap = cap;
    }
    void *r = name_arena.blk + name_arena.used;
    name_arena.used += n;
    return r;
}

static char *na_strdup(const char *s, size_t n) {
    char *r = na_alloc(n + 1);
    if (r) {
        memcpy(r, s, n);
        r[n] = 0;
    }
    return r;
}

static void na_free(void) {
    while (name_arena.blk) {
        char *prev;
        memcpy(&prev, name_arena.blk, sizeof prev);
        free(name_arena.blk);
        name_arena.blk = prev;
    }
    memset(&name_arena, 0, sizeof name_arena);
}

/* A name of the code table: raw (valid UTF-8) and JSON-escaped, in the arena (the escaped one is the raw
 * one when nothing needed escaping); 0, or -1 (no memory). */
static char *utf8_name(const uint8_t *p, uint32_t n, uint32_t *outn);
static int na_name(const uint8_t *p, uint32_t n, const char **raw, const char **esc) {
    uint32_t rn = 0;
    char *r = utf8_name(p, n, &rn);
    char *e = r ? oc_json_escape(r, rn) : NULL;
    int rc = -1;
    if (e) {
        *raw = na_strdup(r, rn);
        *esc = strcmp(e, r) == 0 ? *raw : na_strdup(e, strlen(e));
        rc = *raw && *esc ? 0 : -1;
    }
    free(r);
    free(e);
    return rc;
}

/* A name as the recording holds it, made valid UTF-8 (a damaged recording's bytes: each invalid byte
 * becomes U+FFFD, so every output stays valid JSON and protobuf strings); NUL-terminated, its length in
 * *outn.  A healthy recording's names are valid already (recorded with backslashreplace). */
static char *utf8_name(const uint8_t *p, uint32_t n, uint32_t *outn) {
    char *out = malloc((size_t)n * 3 + 1), *o = out;
    if (!out)
        return NULL;
    for (uint32_t i = 0; i < n;) {
        unsigned k = utf8_seq(p + i, n - i);
        if (k) {
            memcpy(o, p + i, k);
            o += k;
            i += k;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    *o = 0;
    *outn = (uint32_t)(o - out);
    return out;
}

/* Names shown in viewers carry no control characters (a `python -c` command line holds newlines). */
static char *clean_name(const uint8_t *p, uint32_t n, uint32_t *outn) {
    char *s = utf8_name(p, n, outn);
    if (s)
        for (uint32_t i = 0; i < *outn; i++)
            if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
                s[i] = ' ';
    return s;
}

static void free_meta(void) {
    free(rmeta.codes); /* (their names, bytecode and lines are in the arena) */
    na_free();
    for (uint32_t i = 0; i < rmeta.nthreads; i++) {
        if (rmeta.threads[i].name != rmeta.threads[i].name_raw) /* (the same string when nothing needed escaping) */
            free(rmeta.threads[i].name);
        free(rmeta.threads[i].name_raw);
    }
    free(rmeta.threads);
    rmeta.threads = NULL;
    free(rmeta.process_name);
    free(rmeta.process_name_raw);
    free(rmeta.adaptive);
    rmeta.adaptive = NULL;
    rmeta.adaptive_len = 0;
    memset(&rmeta, 0, sizeof rmeta);
}

/* A thread's render state, and its indexed chunks, are gone (its end was rendered; or the render's). */
static void free_thread(uint32_t i) {
    rthread *t = rstate.threads[i];
    if (t) {
        if (rstate.cur == i + 1)
            rstate.cur = 0; /* (its frames are popped: none links same_top) */
        free(t->stack);
        free(t->wk);
        free(t);
        rstate.threads[i] = NULL;
    }
    free(rstate.ix[i].spans);
    rstate.ix[i].spans = NULL;
    rstate.ix[i].nspans = rstate.ix[i].capspans = 0;
}

static void free_render_state(void) {
    free(rstate.tt);
    free(rstate.tt_hash);
    rstate.tt = NULL;
    rstate.tt_hash = NULL;
    rstate.ntt = rstate.captt = rstate.tt_cap = 0;
    for (uint32_t i = 0; i < rstate.nthreads; i++) {
        if (rstate.threads[i]) {
            free(rstate.threads[i]->stack);
            free(rstate.threads[i]->wk);
            free(rstate.threads[i]);
        }
        free(rstate.ix[i].spans);
    }
    free(rstate.threads);
    free(rstate.ix);
    rstate.ix = NULL;
    free(rstate.order);
    rstate.order = NULL;
    rstate.norder = rstate.caporder = 0;
    for (uint32_t i = 0; i < rstate.ncodes_alloc; i++)
        free(rstate.insn_prefix[i]);
    free(rstate.insn_prefix);
    free(rstate.same_top);
    free(rstate.th_keys);
    free(rstate.th_slots);
    rstate.th_keys = rstate.th_slots = NULL;
    rstate.th_cap = 0;
    rstate.threads = NULL;
    rstate.nthreads = 0;
    rstate.insn_prefix = NULL;
    rstate.same_top = NULL;
    rstate.ncodes_alloc = 0;
}

/* A new slot for thread index idx (not in the table), or -1 (no memory).  rmeta.nthreads: the slots in use;
 * rstate.nthreads: the capacity of rstate.threads, rstate.ix and rmeta.threads. */
static int64_t add_slot(uint32_t idx) {
    uint32_t slot = rmeta.nthreads;
    if (slot >= rstate.nthreads) {
        uint32_t n = rstate.nthreads ? rstate.nthreads * 2 : 16;
        rthread **t = realloc(rstate.threads, n * sizeof *t);
        if (!t)
            return -1;
        memset(t + rstate.nthreads, 0, (n - rstate.nthreads) * sizeof *t);
        rstate.threads = t;
        tindex *x = realloc(rstate.ix, n * sizeof *x);
        if (!x)
            return -1;
        memset(x + rstate.nthreads, 0, (n - rstate.nthreads) * sizeof *x);
        rstate.ix = x;
        oc_thread *th = realloc(rmeta.threads, n * sizeof *th);
        if (!th)
            return -1;
        memset(th + rstate.nthreads, 0, (n - rstate.nthreads) * sizeof *th);
        rmeta.threads = th;
        rstate.nthreads = n;
    }
    rstate.ix[slot].idx = idx;
    rmeta.nthreads = slot + 1;
    return slot;
}

/* The slot of thread index `idx` in rstate.threads and rmeta.threads, a new one for an index not seen before, or -1
 * (no memory).  Slots are given in the order threads first appear: a thread's state exists only for
 * threads in the recording, whatever their index (a damaged one may be any 32-bit number). */
static int64_t thread_slot(uint32_t idx) {
    uint32_t mask = rstate.th_cap - 1, h = (idx * 2654435761u) & mask;
    if (rstate.th_cap)
        for (; rstate.th_slots[h]; h = (h + 1) & mask)
            if (rstate.th_keys[h] == idx)
                return rstate.th_slots[h] - 1;
    if (rmeta.nthreads >= UINT32_MAX - 1)
        return -1;
    if ((uint64_t)(rmeta.nthreads + 1) * 2 > rstate.th_cap) { /* (at most half full) */
        uint32_t cap = rstate.th_cap ? rstate.th_cap * 2 : 64;
        uint32_t *k = calloc(cap, sizeof *k), *v = calloc(cap, sizeof *v);
        if (!k || !v) {
            free(k);
            free(v);
            return -1;
        }
        for (uint32_t i = 0; i < rstate.th_cap; i++)
            if (rstate.th_slots[i]) {
                uint32_t j = (rstate.th_keys[i] * 2654435761u) & (cap - 1);
                while (v[j])
                    j = (j + 1) & (cap - 1);
                k[j] = rstate.th_keys[i];
                v[j] = rstate.th_slots[i];
            }
        free(rstate.th_keys);
        free(rstate.th_slots);
        rstate.th_keys = k;
        rstate.th_slots = v;
        rstate.th_cap = cap;
        mask = cap - 1;
        for (h = (idx * 2654435761u) & mask; rstate.th_slots[h];)
            h = (h + 1) & mask;
    }
    int64_t slot = add_slot(idx);
    if (slot < 0)
        return -1;
    rstate.th_keys[h] = idx;
    rstate.th_slots[h] = (uint32_t)slot + 1;
    return slot;
}

/* A chunk of thread index `idx` after the end of the thread that had it, slot `old` (a damaged
 * recording): a new slot for the index from now on, with that thread's ids. */
static int64_t thread_reslot(uint32_t idx, uint32_t old) {
    if (rmeta.nthreads >= UINT32_MAX - 1)
        return -1;
    int64_t slot = add_slot(idx);
    if (slot < 0)
        return -1;
    uint32_t mask = rstate.th_cap - 1, h = (idx * 2654435761u) & mask;
    while (rstate.th_keys[h] != idx || !rstate.th_slots[h])
        h = (h + 1) & mask;
    rstate.th_slots[h] = (uint32_t)slot + 1;
    rmeta.threads[slot].tid = rmeta.threads[old].tid;
    rmeta.threads[slot].ident = rmeta.threads[old].ident;
    return slot;
}

/* asyncio's Handle._run (asyncio/events.py), which runs each loop callback: qualname q (ql bytes), file name f */
static int is_handle_run(const char *q, uint32_t ql, const char *f) {
    static const char name[] = "Handle._run", tail[] = "asyncio/events.py";
    size_t n = f ? strlen(f) : 0;
    return ql == sizeof name - 1 && memcmp(q, name, ql) == 0 && n >= sizeof tail - 1 &&
           memcmp(f + n - (sizeof tail - 1), tail, sizeof tail - 1) == 0;
}

static int grow_codes(uint32_t id) {
    if (id < rmeta.ncodes)
        return 0;
    if (id > 64u * 1024 * 1024)
        return -1;
    uint32_t n = id + 1024;
    oc_codeent *c = realloc(rmeta.codes, n * sizeof *c);
    if (!c)
        return -1;
    memset(c + rmeta.ncodes, 0, (n - rmeta.ncodes) * sizeof *c);
    rmeta.codes = c;
    rmeta.ncodes = n;
    return 0;
}

#define BAD(msg)                                                                                        \
    do {                                                                                                \
        snprintf(res->error, sizeof res->error, "%s at byte %zu", (msg), off);                         \
        return -1;                                                                                      \
    } while (0)

/* Index the complete blocks in [*offp, size); *offp moves past them (a block cut short waits for more). */
static int index_recording(const uint8_t *base, size_t size, size_t *offp, oc_render_result *res) {
    size_t off = *offp;
    while (off + OC_BLK_HDR <= size) {
        uint32_t type = rd32(base + off), len = rd32(base + off + 4);
        if ((uint64_t)len > size - off - OC_BLK_HDR)
            break; /* cut short: every complete block before it counts */
        const uint8_t *p = base + off + OC_BLK_HDR;
        if (!rstate.have_header && type != OC_BLK_HEADER)
            BAD("not an Ocular recording (no header block)");
        switch (type) {
        case OC_BLK_HEADER: {
            if (len < OC_HEADER_FIXED || memcmp(p, OC_REC_MAGIC, 8) != 0)
                BAD("not an Ocular recording (bad magic)");
            if (rd32(p + 8) != OC_REC_VERSION) {
                snprintf(res->error, sizeof res->error,
                         "recording format version %u is not supported (this Ocular reads version %u)",
                         rd32(p + 8), OC_REC_VERSION);
                return -1;
            }
            uint32_t flags = rd32(p + 12);
            rmeta.precise = (flags & OC_REC_F_PRECISE) != 0;
            rmeta.ring = (flags & OC_REC_F_RING) != 0;
            rmeta.near_zero = (flags & OC_REC_F_NEAR_ZERO) != 0;
            rmeta.threshold = rd32(p + 16);
            rmeta.pid = (long)rd32(p + 20);
            rmeta.tsc0 = rd64(p + 24);
            rmeta.mono0_ns = rd64(p + 32);
            memcpy(&rmeta.ns_per_tick, p + 40, 8); /* (a CALIB block follows with the mapping) */
            rmeta.early_npt = rmeta.ns_per_tick;
            rmeta.knee_tsc = rmeta.knee_ns = UINT64_MAX;
            memcpy(rmeta.clock, p + 48, 23);
            rmeta.clock[23] = 0;
            for (char *c = rmeta.clock; *c; c++) /* (a clock's name is ASCII: anything else is damage) */
                if (*c < 0x20 || *c > 0x7e)
                    *c = '?';
            rmeta.test_clock = strcmp(rmeta.clock, "test") == 0;
            memcpy(rmeta.cache_entries, p + 72, 256);
            rmeta.python_hex = rd32(p + 328);
            uint32_t nl = rd32(p + 332);
            if (nl > len - OC_HEADER_FIXED)
                BAD("corrupt header block");
            char *raw = clean_name(p + OC_HEADER_FIXED, nl, &nl);
            free(rmeta.process_name);
            free(rmeta.process_name_raw);
            rmeta.process_name = raw ? oc_json_escape(raw, nl) : NULL;
            rmeta.process_name_raw = raw;
            rstate.have_header = 1;
            break;
        }
        case OC_BLK_CODE: {
            if (len < 20)
                BAD("corrupt code block");
            uint32_t id = rd32(p), nu = rd32(p + 8), ql = rd32(p + 12), fl = rd32(p + 16);
            if ((uint64_t)20 + ql + fl + (uint64_t)nu * 6 != len)
                BAD("corrupt code block");
            /* ids are given in order and each is written once, nearly in order: an id far past the blocks
             * seen is damage, skipped (the table is indexed by id: it would take that much memory) */
            if ((uint64_t)id > 2 * (uint64_t)rstate.codes_seen + 65536) {
                rmeta.bad_codes++;
                rmeta.damage |= OC_DAMAGE_CODES;
                break;
            }
            rstate.codes_seen++;
            if (grow_codes(id) < 0)
                BAD("code id out of range");
            oc_codeent *e = &rmeta.codes[id];
            if (e->qualname)
                break; /* written twice: the first one holds */
            const char *q = (const char *)p + 20, *f = q + ql;
            const char *qr = NULL, *qe = NULL, *fr = NULL, *fe = NULL;
            if (name_arena.last_fn && name_arena.last_fn_len == fl && memcmp(name_arena.last_fn, f, fl) == 0) {
                fr = name_arena.last_fn; /* (the same file as the last code's, as a rule; valid UTF-8 as it is) */
                fe = name_arena.last_fn_esc;
            } else if (na_name((const uint8_t *)f, fl, &fr, &fe) == 0) {
                name_arena.last_fn = fr;
                name_arena.last_fn_esc = fe;
                name_arena.last_fn_len = strlen(fr);
            }
            if (!fr || na_name((const uint8_t *)q, ql, &qr, &qe) < 0)
                BAD("out of memory reading the code table");
            e->qualname_raw = (char *)qr;
            e->qualname = (char *)qe;
            e->filename_raw = (char *)fr;
            e->filename = (char *)fe;
            e->firstlineno = (int)rd32(p + 4);
            e->nunits = nu;
            if (!rstate.handle_run1 && is_handle_run(q, ql, fr))
                rstate.handle_run1 = id + 1;
            if (nu) {
                e->code = na_alloc((size_t)nu * 2 + 1);
                e->lines = na_alloc(((size_t)nu + 1) * 4);
                if (!e->code || !e->lines) {
                    e->code = NULL;
                    e->lines = NULL;
                    e->nunits = 0;
                    BAD("out of memory reading the code table");
                }
                memcpy(e->code, f + fl, (size_t)nu * 2);
                memcpy(e->lines, f + fl + (size_t)nu * 2, (size_t)nu * 4);
                e->lines[nu] = -1;
            }
            break;
        }
        case OC_BLK_THREAD: {
            if (len < 28)
                BAD("corrupt thread block");
            uint32_t nl = rd32(p + 24);
            int64_t idx = nl == len - 28 ? thread_slot(rd32(p)) : -1;
            if (idx < 0)
                BAD("corrupt thread block");
            oc_thread *th = &rmeta.threads[idx];
            th->tid = (long)rd64(p + 8);
            th->ident = (unsigned long)rd64(p + 16);
            if (rstate.threads[idx])
                set_otid(rstate.threads[idx], th->tid);
            if (nl && !th->name_raw) {
                th->name_raw = clean_name(p + 28, nl, &nl);
                th->name = th->name_raw ? oc_json_escape(th->name_raw, nl) : NULL;
                if (th->name && strcmp(th->name, th->name_raw) == 0) { /* (one copy: it stays to the end) */
                    free(th->name);
                    th->name = th->name_raw;
                }
            }
            if ((rd32(p + 4) & OC_THREAD_ENDED) && !rstate.ix[idx].ended) {
                /* the thread ended: when rendering reaches this point its state is freed (end_thread) */
                if (rstate.norder == rstate.caporder) {
                    uint32_t cap = rstate.caporder ? rstate.caporder * 2 : 256;
                    span_ref *o = realloc(rstate.order, cap * sizeof *o);
                    if (!o)
                        BAD("out of memory indexing the recording");
                    rstate.order = o;
                    rstate.caporder = cap;
                }
                rstate.order[rstate.norder++] = (span_ref){(uint32_t)idx, UINT32_MAX};
                rstate.ix[idx].ended = 1;
            }
            break;
        }
        case OC_BLK_CHUNK: {
            if (len < 8)
                BAD("corrupt chunk block");
            uint32_t n = rd32(p + 4);
            int64_t slot = (uint64_t)n * sizeof(oc_rec) == (uint64_t)len - 8 ? thread_slot(rd32(p)) : -1;
            if (slot >= 0 && rstate.ix[slot].ended)
                slot = thread_reslot(rd32(p), (uint32_t)slot);
            if (slot < 0)
                BAD("corrupt chunk block");
            uint32_t idx = (uint32_t)slot;
            tindex *t = &rstate.ix[idx];
            if (n && rd64(p + 8 + (size_t)(n - 1) * sizeof(oc_rec)) > rstate.last_ts) /* (a recording cut short ends there) */
                rstate.last_ts = rd64(p + 8 + (size_t)(n - 1) * sizeof(oc_rec));
            if (t->nspans == t->capspans) {
                uint32_t cap = t->capspans ? t->capspans * 2 : 2;
                span *s = realloc(t->spans, cap * sizeof *s);
                if (!s)
                    BAD("out of memory indexing the recording");
                t->spans = s;
                t->capspans = cap;
            }
            if (rstate.norder == rstate.caporder) {
                uint32_t cap = rstate.caporder ? rstate.caporder * 2 : 256;
                span_ref *o = realloc(rstate.order, cap * sizeof *o);
                if (!o)
                    BAD("out of memory indexing the recording");
                rstate.order = o;
                rstate.caporder = cap;
            }
            rstate.order[rstate.norder++] = (span_ref){idx, t->nspans};
            t->spans[t->nspans++] = (span){(const oc_rec *)(const void *)(p + 8), n};
            rstate.total += n;
            break;
        }
        case OC_BLK_OPTIONS:
            if (len >= 4)
                rmeta.stall_ms = rd32(p);
            break;
        case OC_BLK_OWNCOST:
            if (len >= 8) {
                uint32_t n = rd32(p);
                uint64_t t[16] = {0};
                for (uint32_t k = 0; k < n && k < 16 && 8 + 8 * (k + 1) <= len; k++)
                    t[k] = rd64(p + 8 + 8 * k);
                oc_stats_own_cost(t, n < 16 ? n : 16);
            }
            break;
        case OC_BLK_CALIB:
            if (len >= 24) {
                rstate.calib_final = read_calib(p, len);
                rstate.calibrated = 1;
            }
            break;
        case OC_BLK_CODESTATE:
            for (uint32_t k = 0; k + 12 <= len; k += 12) {
                uint32_t id = rd32(p + k);
                if (id < rmeta.ncodes) {
                    rmeta.codes[id].flags = rd32(p + k + 4);
                    rmeta.codes[id].enters = rd32(p + k + 8);
                }
            }
            break;
        case OC_BLK_END:
            if (len >= 32) {
                rstate.stop_ticks = rd64(p);
                rmeta.dropped = rd64(p + 16);
                res->pauses = rd64(p + 24);
                rstate.complete = 1;
            }
            break;
        case OC_BLK_WINDOW:
            if (len >= 8)
                rstate.window_ticks = rd64(p);
            break;
        case OC_BLK_ADAPTIVE: /* (kept for the report; the last one wins) */
            free(rmeta.adaptive);
            rmeta.adaptive = malloc((size_t)len + 1);
            rmeta.adaptive_len = rmeta.adaptive ? len : 0;
            if (rmeta.adaptive)
                memcpy(rmeta.adaptive, p, len);
            break;
        case OC_BLK_SAMPLING:
        case OC_BLK_SAMPLING_W:
            oc_attr_block(p, len, type == OC_BLK_SAMPLING_W ? OC_SAMPLING_WIN_LEN : 16);
            break;
        default:
            break; /* a newer block type: skip it */
        }
        off += OC_BLK_HDR + len;
        off = (off + 7) & ~(size_t)7; /* blocks start at multiples of 8 */
        *offp = off;
        if (UNLIKELY(off - rstate.index_dropped >= OC_DROP_STEP)) {
            /* indexed: these pages out of the resident set, OC_DROP_STEP at a time (rendering reads them again,
             * from the page cache; a long recording would otherwise be resident whole before rendering) */
            uintptr_t lo = ((uintptr_t)(base + rstate.index_dropped) + 4095) & ~(uintptr_t)4095;
            uintptr_t hi = ((uintptr_t)(base + off)) & ~(uintptr_t)4095;
            if (hi > lo)
                madvise((void *)lo, hi - lo, MADV_DONTNEED);
            rstate.index_dropped = off;
        }
    }
    return 0;
}

static void none_header(oc_out *o) { (void)o; }
static void none_begin(oc_out *o, long tid, uint64_t ts, uint32_t code_id) { (void)o, (void)tid, (void)ts, (void)code_id; }
static void none_end(oc_out *o, long tid, uint64_t ts) { (void)o, (void)tid, (void)ts; }
static void none_loop(oc_out *o, long tid, uint64_t ts, uint32_t code_id, int line, uint32_t offset, uint32_t insns,
                      uint64_t cycles, uint64_t ns) {
    (void)o, (void)tid, (void)ts, (void)code_id, (void)line, (void)offset, (void)insns, (void)cycles, (void)ns;
}
static void none_footer(oc_out *o, const char *clock, int precise) { (void)o, (void)clock, (void)precise; }
const oc_sink oc_sink_none = {"none", none_header, none_begin, none_end, none_loop, none_footer, NULL, NULL, NULL, NULL, NULL, NULL};

/* ---- the driver ---- */

static void reset_render(void) {
    free_render_state();
    free_meta();
    memset(&rstate, 0, sizeof rstate);
    rstate.out.fd = -1;
    oc_stats_reset();
}

/* same_top and insn_prefix cover every code id indexed so far (the code table grows while recording) */
static int grow_code_arrays(void) {
    if (rstate.ncodes_alloc >= rmeta.ncodes)
        return 0;
    size_t n = (size_t)rmeta.ncodes + 1, old = rstate.same_top ? (size_t)rstate.ncodes_alloc + 1 : 0;
    uint32_t *st = realloc(rstate.same_top, n * sizeof *st);
    if (!st)
        return -1;
    rstate.same_top = st;
    uint32_t **ip = realloc(rstate.insn_prefix, n * sizeof *ip);
    if (!ip)
        return -1;
    rstate.insn_prefix = ip;
    memset(st + old, 0, (n - old) * sizeof *st);
    memset(ip + old, 0, (n - old) * sizeof *ip);
    rstate.ncodes_alloc = rmeta.ncodes;
    return 0;
}

/* ---- the formats (OC_FORMAT_*, ocular.h): each one's sink and capabilities ---- */
static const struct {
    int code;
    const oc_sink *sink;
    unsigned caps;
} formats[] = {
    {OC_FORMAT_JSON, &oc_sink_json, OC_CAP_TRACE | OC_CAP_FILE | OC_CAP_FILE_ORDER | OC_CAP_MANY_WRITES},
    {OC_FORMAT_PERFETTO, &oc_sink_perfetto, OC_CAP_TRACE | OC_CAP_FILE | OC_CAP_FILE_ORDER},
    {OC_FORMAT_STATS, &oc_sink_none, OC_CAP_FILE_ORDER},
    /* (speedscope streams one thread's profile at a time, and the call tree folds one thread at a time) */
    {OC_FORMAT_TREE, &oc_sink_tree, 0},
    {OC_FORMAT_SPEEDSCOPE, &oc_sink_speedscope, OC_CAP_FILE},
};

static int format_row(int format) {
    for (int i = 0; i < (int)(sizeof formats / sizeof formats[0]); i++)
        if (formats[i].code == format)
            return i;
    return -1;
}

unsigned oc_format_caps(int format) {
    int i = format_row(format);
    return i < 0 ? 0 : formats[i].caps;
}

int oc_format_known(int format) { return format_row(format) >= 0; }

static int open_output(int format, const char *out_path, int loops, oc_render_result *res) {
    rstate.out.cap = 1 << 20;
    rstate.out.buf = malloc(rstate.out.cap);
    if (!rstate.out.buf) {
        snprintf(res->error, sizeof res->error, "out of memory");
        return -1;
    }
    rstate.loops = loops;
    int row = format_row(format);
    unsigned caps = oc_format_caps(format);
    rstate.file_order = (caps & OC_CAP_FILE_ORDER) != 0;
    rstate.task_tracks = (caps & OC_CAP_TRACE) != 0;
    rstate.sink = row >= 0 ? formats[row].sink : &oc_sink_none;
    if (out_path) {
        /* A file with no name until it is complete (linked at the end): a process killed while
         * rendering, or while rendering as it records, leaves no partial output behind. */
        rstate.anon = 0;
#ifdef O_TMPFILE
        if (access("/proc/thread-self/fd", X_OK) == 0) { /* thread-self: /proc/self/fd is gone once the
                                                        * main thread has exited (a thread-forked child) */
            char dir[4096];
            const char *slash = strrchr(out_path, '/');
            size_t n = slash ? (size_t)(slash - out_path) : 0;
            if (n < sizeof dir) {
                if (!slash)
                    strcpy(dir, ".");
                else if (!n)
                    strcpy(dir, "/");
                else {
                    memcpy(dir, out_path, n);
                    dir[n] = 0;
                }
                rstate.out.fd = oc_fd_above_std(open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644));
                rstate.anon = rstate.out.fd >= 0;
            }
        }
#endif
        if (rstate.out.fd < 0)
            rstate.out.fd = oc_fd_above_std(open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (rstate.out.fd < 0) {
            snprintf(res->error, sizeof res->error, "cannot create %.200s: %s", out_path, strerror(errno));
            return -1;
        }
        oc_out_own(&rstate.out, rstate.anon ? NULL : out_path);
        oc_out_preallocate(&rstate.out);
    }
    rstate.sink->header(&rstate.out);
    return 0;
}

/* The output is complete: give the unnamed file its name; errno on failure, else 0. */
static int name_output(const char *out_path) {
    if (!rstate.anon || rstate.out.fd < 0)
        return 0;
    if (!oc_out_is_ours(&rstate.out))
        return EBADF; /* (the program closed it: an unnamed file cannot be found again) */
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/thread-self/fd/%d", rstate.out.fd);
    if (unlink(out_path) != 0 && errno != ENOENT)
        return errno;
    return linkat(AT_FDCWD, proc, AT_FDCWD, out_path, AT_SYMLINK_FOLLOW) == 0 ? 0 : errno;
}

/* A code id made up after every recorded one, named `name` (UINT32_MAX without memory) */
static uint32_t made_up_code(const char *name) {
    uint32_t id = rmeta.ncodes;
    if (grow_codes(id) < 0)
        return UINT32_MAX;
    oc_codeent *e = &rmeta.codes[id];
    e->qualname = e->qualname_raw = na_strdup(name, strlen(name));
    e->filename = e->filename_raw = na_strdup("<ocular>", 8);
    return e->qualname && e->filename ? id : UINT32_MAX;
}

/* The recorded pauses are slices of a made-up code, and so are asyncio tasks' lives and loop stalls. */
static int add_pause_code(void) {
    char stall[64];
    snprintf(stall, sizeof stall, "loop stall (held the event loop %u ms)", rmeta.stall_ms ? rmeta.stall_ms : OC_STALL_MS);
    rstate.pause_code = made_up_code(OC_PAUSE_NAME);
    rstate.life_code = made_up_code("task life");
    rstate.stall_code = made_up_code(stall);
    return rstate.pause_code != UINT32_MAX && rstate.life_code != UINT32_MAX && rstate.stall_code != UINT32_MAX ? 0 : -1;
}

static inline void set_tid(uint32_t i) {
    set_otid(rstate.threads[i], i < rmeta.nthreads && rmeta.threads[i].tid ? rmeta.threads[i].tid : (long)rstate.ix[i].idx);
}

/* same_top links the frames of one thread, the one being rendered: another thread's chunk unlinks
 * them (top down, as pops would) and links its own (bottom up, as pushes did).  Rendering in the
 * recording's order, that costs the two stacks' depths once per chunk of another thread. */
static void switch_thread(uint32_t i) {
    if (rstate.cur == i + 1 || rstate.nostats)
        return;
    if (rstate.cur) {
        const rthread *o = rstate.threads[rstate.cur - 1];
        for (uint32_t k = o->n; k-- > 0;)
            rstate.same_top[o->stack[k].code_id] = o->stack[k].prev_same;
    }
    const rthread *t = rstate.threads[i];
    for (uint32_t k = 0; k < t->n; k++)
        rstate.same_top[t->stack[k].code_id] = k + 1;
    rstate.cur = i + 1;
}

static void render_span(rthread *t, uint32_t s, int drop) {
    const tindex *x = &rstate.ix[t->slot];
    /* (the thread's next record, if indexed: a damaged last time is known by it) */
    const oc_rec *after = s + 1 < x->nspans && x->spans[s + 1].n ? x->spans[s + 1].recs : NULL;
    const oc_rec *recs = x->spans[s].recs;
    uint32_t n = x->spans[s].n;
    process_recs(t, recs, n, after);
    if (!drop)
        return;
    /* done with these pages: out of the resident set (a long recording is mapped whole), OC_DROP_STEP at a
     * time from the first page not dropped yet -- every madvise is a system call and a TLB shootdown on
     * the CPUs of the process's other threads (the program's, while recording; pipe.c's or out.c's
     * writer's after it).  Rendering thread by thread goes back in the file: the step starts again
     * there (a page dropped before its time is read again).  The pages stay in the file: nothing is lost. */
    uintptr_t lo = ((uintptr_t)recs + 4095) & ~(uintptr_t)4095;
    uintptr_t hi = ((uintptr_t)(recs + n)) & ~(uintptr_t)4095;
    if (!rstate.drop_from || lo < rstate.drop_from)
        rstate.drop_from = lo;
    if (hi >= rstate.drop_from + OC_DROP_STEP) {
        madvise((void *)rstate.drop_from, hi - rstate.drop_from, MADV_DONTNEED);
        rstate.drop_from = hi;
    }
}

/* Thread slot i's render state, made at its first rendered chunk (NULL: no memory) */
static rthread *rthread_of(uint32_t i) {
    rthread *t = rstate.threads[i];
    if (LIKELY(t != NULL))
        return t;
    t = calloc(1, sizeof *t);
    if (t)
        t->slot = i;
    return rstate.threads[i] = t;
}

/* Chunk s of thread i; a thread's first chunk sets its tid and, in a flight-recorder window, opens the
 * frames already running when the window began. */
static void render_ref(uint32_t i, uint32_t s, int drop) {
    rthread *t = rthread_of(i);
    if (!t) {
        rstate.out.err = rstate.out.err ? rstate.out.err : ENOMEM;
        return;
    }
    switch_thread(i);
    if (!t->started) {
        t->started = 1;
        set_tid(i);
        t->prev_ts = rstate.ts_lo; /* (its records' times start there: in_order) */
        if (rmeta.ring)
            open_cut_frames(t);
    }
    render_span(t, s, drop);
}

/* Slices still open at the end close at the stop (a recording cut short, or a thread that ended: at the
 * thread's last record). */
static void close_thread(uint32_t i, int ended) {
    rthread *t = rstate.threads[i];
    if (!t)
        return;
    uint64_t end = rstate.complete && !ended ? rstate.stop_ticks : t->prev_ts;
    end = end > t->prev_ts ? end : t->prev_ts;
    if (t->n) {
        switch_thread(i);
        pop_to(t, 0, end, 0);
    }
    for (uint32_t k = 0; k < rstate.ntt; k++) /* (tasks still alive: their lives too) */
        if (rstate.tt[k].life_open && rstate.tt[k].tid == t->tid)
            life_end(k, end);
}

/* The end of thread slot i is rendered (its THREAD block says it ended): its open slices close, and all
 * its state but its name and ids (rmeta.threads) is freed -- what a render keeps depends on the threads
 * alive at once, not on the threads ever seen. */
static void end_thread(uint32_t i) {
    rthread *t = rstate.threads[i];
    if (t) {
        close_thread(i, 1);
        if (rstate.sink->thread_end && t->started)
            rstate.sink->thread_end(&rstate.out, t->tid);
    }
    free_thread(i);
}

/* An entry of rstate.order: a chunk, or a thread's end */
static inline void render_order(uint32_t k) {
    if (rstate.order[k].span == UINT32_MAX)
        end_thread(rstate.order[k].thread);
    else
        render_ref(rstate.order[k].thread, rstate.order[k].span, 1);
}

/* the k-th chunk to render: in the recording's order (file_order), else thread 0's first */
static inline span_ref next_ref(uint32_t k) { return rstate.file_order ? rstate.order[k] : (span_ref){0, k}; }

/* ---- rendering while recording ----
 * With a second CPU, a thread renders the recording as the recorder appends it, in the order a render
 * at stop takes (the trace formats: every chunk as recorded; speedscope: the first thread's), once the
 * clock's calibration is in the recording; it runs at a lower priority than the program, reads the recording
 * through a shared read-only mapping (reserved large, filled as the file grows), and never makes
 * anyone wait.  It waits 5 ms only after a step that found nothing new: a step that rendered
 * something is followed by another at once (the recorder wrote more meanwhile).  Pausing after every
 * step left 20-50% of the generator workload's events for stop; now 0-45%, as the scheduler shares
 * the second CPU between the recorder and the renderer (it is full there), and of fib(27) 0-20%.  At stop,
 * oc_render_file takes its state over and renders the rest, so the output is the one a render from
 * scratch makes.  What it cannot render early (a recorded pause, whose made-up
 * code id comes after the whole code table; sampling windows, whose estimates need the code states
 * written at the end) makes it give up: the render at stop starts over. */
static struct {
    int on;                  /* a live render was started and not yet taken over or discarded */
    pthread_t thread;
    pthread_mutex_t lock;    /* with cond: the thread's wait between steps, cut short by stop */
    pthread_cond_t cond;
    int stop;                /* __atomic: asked to stop */
    int failed, opened;
    char *rec_path, *out_path;
    int format, loops;
    int fd;
    dev_t dev;               /* the recording behind fd (the program may close fd and reuse its number) */
    ino_t ino;
    uint8_t *map;
    size_t reserve;
    size_t off;              /* blocks indexed up to here */
    uint32_t done;           /* spans of thread 0 rendered */
    uint32_t known;          /* code ids below this all have their table entry */
    oc_render_result res;
} live_st = {.fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* live_st.fd is still the recording (the program may have closed it and reused its number). */
static int live_fd_ours(struct stat *st) {
    return fstat(live_st.fd, st) == 0 && st->st_dev == live_st.dev && st->st_ino == live_st.ino;
}

/* The recording's size, through live_st.fd if that is still the recording; -1 if not (or too large). */
static int64_t live_size(void) {
    struct stat st;
    if (!live_fd_ours(&st) || (uint64_t)st.st_size > live_st.reserve)
        return -1;
    return (int64_t)st.st_size;
}

static uint32_t live_step(void) {
    int64_t size = live_size();
    if (size < 0 || rstate.out.err) { /* (a write error: the render at stop starts over, and says it if it fails too) */
        live_st.failed = 1;
        return 0;
    }
    if (index_recording(live_st.map, (size_t)size, &live_st.off, &live_st.res) < 0) {
        live_st.failed = 1;
        return 0;
    }
    if (oc_attr_on) { /* sampling windows: their estimates need the code states, known at the end */
        live_st.failed = 1;
        return 0;
    }
    if (!rstate.have_header || !rstate.calibrated || !rstate.norder)
        return 0;
    check_clock();
    if (grow_code_arrays() < 0) {
        live_st.failed = 1;
        return 0;
    }
    if (!live_st.opened) {
        if (open_output(live_st.format, live_st.out_path, live_st.loops, &live_st.res) < 0) {
            live_st.failed = 1;
            return 0;
        }
        live_st.opened = 1;
        rstate.pause_code = rstate.life_code = rstate.stall_code = UINT32_MAX;
    }
    while (live_st.known < rmeta.ncodes && rmeta.codes[live_st.known].qualname)
        live_st.known++;
    uint32_t done0 = live_st.done, avail = rstate.file_order ? rstate.norder : rstate.ix[0].nspans;
    while (live_st.done < avail && !__atomic_load_n(&live_st.stop, __ATOMIC_RELAXED)) {
        /* the code table entries a chunk needs are usually written before it, but not always (a
         * thread's last chunk, handed over as it exits, comes before the codes it registered): a chunk
         * naming a code not in the table yet waits, if need be for the render at stop */
        span_ref ref = next_ref(live_st.done);
        if (ref.span == UINT32_MAX) { /* a thread's end */
            end_thread(ref.thread);
            live_st.done++;
            continue;
        }
        const span *sp = &rstate.ix[ref.thread].spans[ref.span];
        uint32_t top = 0;
        for (uint32_t i = 0; i < sp->n; i++) {
            uint32_t k = OC_KIND(sp->recs[i].info), id = sp->recs[i].code_id;
            if (k != K_NONE && k != K_PAUSE && k != K_PAUSE_END && k != K_MARK && id > top)
                top = id;
        }
        if (top >= live_st.known)
            break;
        /* a chunk reaching past the clock's knee waits for the final calibration (~20 ms in) */
        if (!rstate.calib_final && sp->n && sp->recs[sp->n - 1].ts >= rmeta.knee_tsc)
            break;
        render_ref(ref.thread, ref.span, 1);
        if (rstate.live_failed) {
            live_st.failed = 1;
            return 0;
        }
        live_st.done++;
    }
    return live_st.done - done0;
}

static void *live_main(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), OC_RENDER_THREAD_NAME);
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10); /* the program comes first */
    pthread_mutex_lock(&live_st.lock);
    while (!live_st.stop) {
        pthread_mutex_unlock(&live_st.lock);
        uint32_t rendered = live_step();
        pthread_mutex_lock(&live_st.lock);
        if (live_st.failed)
            break;
        if (rendered)
            continue; /* behind: the recorder wrote more meanwhile, as a rule; look again at once */
        /* nothing new: 5 ms (the recorder writes in 1 MiB pieces), or until stop asks for the rest */
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += 5000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        if (!live_st.stop)
            pthread_cond_timedwait(&live_st.cond, &live_st.lock, &dl);
    }
    pthread_mutex_unlock(&live_st.lock);
    return NULL;
}

static void live_join(void) {
    if (live_st.on == 1) {
        pthread_mutex_lock(&live_st.lock);
        __atomic_store_n(&live_st.stop, 1, __ATOMIC_RELEASE);
        pthread_cond_signal(&live_st.cond);
        pthread_mutex_unlock(&live_st.lock);
        pthread_join(live_st.thread, NULL);
        live_st.on = 2; /* joined, state kept */
    }
}

static void live_free(void) {
    if (live_st.map)
        munmap(live_st.map, live_st.reserve);
    struct stat st;
    if (live_st.fd >= 0 && live_fd_ours(&st))
        close(live_st.fd);
    free(live_st.rec_path);
    free(live_st.out_path);
    live_st.map = NULL;
    live_st.fd = -1;
    live_st.rec_path = live_st.out_path = NULL;
    live_st.on = 0;
}

/* Stop a live render and forget it (its partial output is removed). */
static void live_discard(void) {
    if (!live_st.on)
        return;
    live_join();
    if (live_st.opened) {
        oc_out_close(&rstate.out);
        free(rstate.out.buf);
        rstate.out.buf = NULL;
        if (live_st.out_path && !rstate.anon)
            unlink(live_st.out_path);
    }
    live_free();
    reset_render();
}

static int cpus_available(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void oc_render_live_start(const char *rec_path, int format, const char *out_path, int loops) {
    live_discard();
    const char *env = getenv("OCULAR_LIVE_RENDER"); /* 0: never; 1: even on one CPU */
    int want = env && *env ? strcmp(env, "0") != 0 : 1;
    if (!want || !out_path || (cpus_available() < 2 && !(env && strcmp(env, "1") == 0)))
        return;
    live_st.fd = oc_fd_above_std(open(rec_path, O_RDONLY | O_CLOEXEC));
    struct stat st;
    if (live_st.fd < 0)
        return;
    if (fstat(live_st.fd, &st) != 0) {
        close(live_st.fd);
        live_st.fd = -1;
        return;
    }
    live_st.dev = st.st_dev;
    live_st.ino = st.st_ino;
    for (live_st.reserve = (size_t)1 << 38; live_st.reserve >= ((size_t)1 << 30); live_st.reserve >>= 2) {
        void *m = mmap(NULL, live_st.reserve, PROT_READ, MAP_SHARED | MAP_NORESERVE, live_st.fd, 0);
        if (m != MAP_FAILED) {
            live_st.map = m;
            break;
        }
    }
    live_st.rec_path = strdup(rec_path);
    live_st.out_path = strdup(out_path);
    if (!live_st.map || !live_st.rec_path || !live_st.out_path) {
        live_free();
        return;
    }
    reset_render();
    live_st.format = format;
    live_st.loops = loops;
    live_st.stop = 0;
    live_st.failed = live_st.opened = 0;
    live_st.off = 0;
    live_st.done = live_st.known = 0;
    memset(&live_st.res, 0, sizeof live_st.res);
    if (oc_thread_create(&live_st.thread, NULL, live_main, NULL) != 0) {
        live_free();
        return;
    }
    live_st.on = 1;
}

int oc_render_live_running(void) { return live_st.on == 1; }

/* In a fork child: the live thread does not exist here, and its state may be mid-update; forget it. */
void oc_render_live_fork_child(void) {
    rstate.out.async = NULL; /* the parent's writer thread (rendering at stop) does not exist here */
    pthread_mutex_init(&live_st.lock, NULL); /* the parent's thread may have held it at fork */
    pthread_cond_init(&live_st.cond, NULL);
    if (!live_st.on)
        return;
    oc_out_close(&rstate.out); /* the parent's output */
    memset(&rstate, 0, sizeof rstate);
    rstate.out.fd = -1;
    memset(&rmeta, 0, sizeof rmeta);
    memset(&name_arena, 0, sizeof name_arena);
    oc_stats_abandon();
    live_st.rec_path = live_st.out_path = NULL; /* a one-time leak: they may be in use */
    live_free();
}

/* 1: the live render of this very output is taken over (joined; W and R hold its state). */
static int live_takeover(const char *rec_path, int format, const char *out_path, int loops) {
    if (!live_st.on)
        return 0;
    live_join();
    if (live_st.failed || !live_st.opened || format != live_st.format || loops != live_st.loops || !out_path ||
        strcmp(rec_path, live_st.rec_path) != 0 || strcmp(out_path, live_st.out_path) != 0) {
        live_discard();
        return 0;
    }
    return 1;
}

/* Encode the trace on a second thread (pipe.c) while this one rebuilds the stacks: for JSON and .pftrace,
 * where a second CPU is free and at least 256K records (~12 ms) are left to render (OCULAR_RENDER_PIPE: 0 never,
 * 1 always, any format).  `convert` of fib(27) (1.9 M records) and of the generator workload (1.7 M), wall
 * time: .pftrace x0.76 both, JSON x0.93 and x0.78; for 20-30 more instructions an event (the hand-over). */
static int pipe_wanted(int format, const char *out_path, int two_cpus) {
    const char *env = getenv("OCULAR_RENDER_PIPE"); /* (_env.py let only these, or blank for unset, through) */
    if (env && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0))
        return env[0] == '1';
    return out_path && (oc_format_caps(format) & OC_CAP_TRACE) && rstate.total - rstate.events >= 262144 &&
           two_cpus;
}

int oc_render_file(const char *rec_path, int format, const char *out_path, int progress, int loops, int stats,
                   oc_render_result *res) {
    memset(res, 0, sizeof *res);
    int cont = live_takeover(rec_path, format, out_path, loops);
    int rc = -1;
    size_t off = 0, size = 0;
    const uint8_t *base = NULL;
    void *map = MAP_FAILED;
    uint32_t first0 = 0;
    if (cont) {
        int64_t lsize = live_size();
        if (lsize < 0 || rstate.out.fd < 0 || !oc_out_is_ours(&rstate.out)) { /* (its output closed by the program) */
            live_discard();
            cont = 0;
        } else {
            base = live_st.map;
            size = (size_t)lsize;
            off = live_st.off;
            first0 = live_st.done;
            rstate.live_events = rstate.events;
        }
    }
    if (!cont) {
        reset_render();
        int fd = oc_fd_above_std(open(rec_path, O_RDONLY | O_CLOEXEC));
        if (fd < 0) {
            snprintf(res->error, sizeof res->error, "cannot open the recording: %s", strerror(errno));
            return -1;
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            snprintf(res->error, sizeof res->error, "the recording is not a regular file");
            return -1;
        }
        size = (size_t)st.st_size;
        map = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
        close(fd);
        if (map == MAP_FAILED) {
            snprintf(res->error, sizeof res->error, size ? "cannot map the recording: %s" : "%s",
                     size ? strerror(errno) : "the recording is empty");
            return -1;
        }
        madvise(map, size, MADV_SEQUENTIAL);
        base = map;
    }
    if (index_recording(base, size, &off, res) < 0)
        goto out;
    if (!rstate.have_header) {
        snprintf(res->error, sizeof res->error, "not an Ocular recording (empty or no header block)");
        goto out;
    }
    check_clock();
    /* the trace alone (NOSTATS): a trace format asked for no statistics; a precise recording's loops
     * count their instructions from its records, which only the full record loop follows */
    if (!cont)
        rstate.nostats = !stats && !rmeta.precise && (oc_format_caps(format) & OC_CAP_TRACE);
    if (add_pause_code() < 0 || grow_code_arrays() < 0) {
        snprintf(res->error, sizeof res->error, "out of memory");
        goto out;
    }
    if (!cont && open_output(format, out_path, loops, res) < 0)
        goto out;
    /* After the program a CPU is free.  With enough left to render, the sink runs there (pipe.c), and
     * writes too; else JSON's system calls (~45 bytes an event) go to a writer thread, measured 5% faster
     * in `convert` (.pftrace's ~1.5 bytes: 1% slower) */
    int two_cpus = cpus_available() >= 2;
    int piped = pipe_wanted(format, out_path, two_cpus) && oc_pipe_start(&rstate.sink, &rstate.out) == 0;
    if (!piped && out_path && (oc_format_caps(format) & OC_CAP_MANY_WRITES) && two_cpus)
        oc_out_async_start(&rstate.out);
    if (!rstate.complete && rstate.last_ts > rstate.stop_ticks) /* cut short: end where the last record of any thread is */
        rstate.stop_ticks = rstate.last_ts;
    rstate.stop_ticks = rstate.stop_ticks < rstate.ts_lo ? rstate.ts_lo : rstate.stop_ticks > rstate.ts_hi ? rstate.ts_hi : rstate.stop_ticks;
    rstate.progress = progress && isatty(2);
    rstate.progress_name = out_path ? out_path : rec_path;
    rstate.progress_start_ns = mono_now_ns();
    rstate.done = rstate.events;
    const char *after = getenv("OCULAR_TEST_PROGRESS_AFTER_MS"); /* tests: show it at once */
    rstate.progress_after_ns = after && *after ? (uint64_t)strtoul(after, NULL, 10) * 1000000ull : 1000000000ull;
    if (rstate.file_order) { /* the threads' chunks interleaved, as recorded (what rendering while recording did) */
        for (uint32_t k = first0; k < rstate.norder; k++)
            render_order(k);
        for (uint32_t i = 0; i < rmeta.nthreads; i++)
            close_thread(i, 0);
    } else { /* thread by thread (each one's state freed once it is rendered) */
        for (uint32_t i = 0; i < rmeta.nthreads; i++) {
            for (uint32_t s = i == 0 ? first0 : 0; s < rstate.ix[i].nspans; s++)
                render_ref(i, s, 1);
            close_thread(i, rstate.ix[i].ended);
            if (rstate.sink->thread_end && rstate.threads[i] && rstate.threads[i]->started)
                rstate.sink->thread_end(&rstate.out, rstate.threads[i]->tid);
            free_thread(i);
        }
    }
    if (piped)
        oc_pipe_end(&rstate.sink);
    rstate.drop_from = 0;
    rstate.sink->footer(&rstate.out, rmeta.clock, rmeta.precise);
    oc_out_flush(&rstate.out);
    oc_out_async_end(&rstate.out);
    if (!rstate.out.err) {
        int err = oc_out_trim(&rstate.out);
        if (err)
            rstate.out.err = err;
    }
    if (out_path && !rstate.out.err) {
        int err = name_output(out_path);
        if (err)
            rstate.out.err = err;
    }
    oc_stats_finish();
    if (rstate.progress) {
        rstate.done = rstate.total;
        show_progress(1);
    }
    int cerr = oc_out_close(&rstate.out);
    if (cerr && !rstate.out.err)
        rstate.out.err = cerr;
    res->events = rmeta.events = rstate.events;
    res->live_events = rstate.live_events;
    uint64_t from = rmeta.ring && rstate.window_ticks ? rstate.window_ticks : rmeta.tsc0;
    from = from < rstate.ts_lo ? rstate.ts_lo : from > rstate.ts_hi ? rstate.ts_hi : from;
    rmeta.wall_ns = (double)(int64_t)(to_ns(rstate.stop_ticks) - to_ns(from));
    if (rmeta.wall_ns < 0)
        rmeta.wall_ns = 0;
    res->bytes = rstate.out.total;
    res->dropped = rmeta.dropped;
    res->complete = rstate.complete;
    res->write_errno = rstate.out.err;
    rc = 0;
out:
    rstate.out.len = 0; /* (an error: nothing more is written) */
    oc_out_async_end(&rstate.out);
    oc_out_close(&rstate.out);
    free(rstate.out.buf);
    rstate.out.buf = NULL;
    if (cont)
        live_free();
    else
        munmap(map, size);
    for (uint32_t i = 0; i < rmeta.nthreads; i++) { /* the spans pointed into the mapping */
        free(rstate.ix[i].spans);
        rstate.ix[i].spans = NULL;
        rstate.ix[i].nspans = rstate.ix[i].capspans = 0;
    }
    return rc;
}

/* The renderer's figures stay until the next render (the report reads R and the statistics) or this. */
void oc_render_release(void) {
    live_discard();
    free_render_state();
    free_meta();
    oc_stats_reset();
}
