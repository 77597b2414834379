/* render.c -- the renderer's driver: rebuilds each thread's call stack from the records of a recording
 * (recording.h) indexed by reader.c, feeding the statistics (stats.c) and one sink (Chrome JSON, Perfetto
 * protobuf, speedscope, the call tree, or none); asyncio's tasks are tasks.c's, rendering while recording live.c's.
 *
 * It runs after the program stopped recording (at stop_tracing(), or in another process by
 * `python -m ocular convert`), without the GIL and without the Python API; with a second CPU it starts
 * while the program records (live.c) and finishes at stop.  The
 * recording is mapped read-only; a first pass indexes its blocks (code table, thread names, calibration, each thread's
 * chunks in order, and every chunk in the recording's order), then the chunks are rendered: for the
 * trace formats and the statistics in the recording's order, the threads interleaved as they were
 * recorded (each thread's stream in its own order; the one table keyed by code id that belongs to a
 * thread, same_top, is handed over at a switch), for speedscope and the call tree thread by thread.
 *
 * Stack reconstruction is keyed by frame depth (carried in every enter/leave record): an end that
 * matches no open begin at its depth is ignored (code that was running before tracing started, or a
 * function already de-instrumented); an enter at depth d closes the frames at depth d or deeper, and a leave
 * at depth d the deeper ones, whose ends were never seen -- at the thread's previous record (pop_stale).  Slices still open at the end are closed at the stop time (or, for a recording cut short,
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
#include "render_int.h"
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
        if (slice != SLICE_NONE)
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
    /* total time counts each recursion tree once: an activation adds what its same-code descendants did
     * not already add (one whose end was inferred too: its time is the code's, stats.h) */
    oc_stats_slice(f->code_id, f->is_call, incl, f->self, incl - f->same, !counted,
                   UNLIKELY(t->step_at == t->n + 1) ? t->step_task : t->n > 0 ? f[-1].code_id : UINT32_MAX);
    if (UNLIKELY(f->hidden))
        oc_attr_pop(&t->attr, f->anchor, f->code_id, f->head == f->code_id, f->prev_same != 0, f->win_mark, incl,
                    (int)(f->depth & 1));
    if (f->prev_same) { /* recursion: the nearest activation of the same code below */
        frame *same = &t->stack[f->prev_same - 1];
        same->same += incl;
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
    /* (only sampling windows read these, and anchor, head and win_mark only a hidden frame's) */
    if (UNLIKELY(f->hidden)) {
        frame *up = t->n > 1 ? f - 1 : NULL;
        f->anchor = !up ? OC_NO_CODE : up->hidden ? up->anchor : up->code_id;
        /* (a caller whose begin was not recorded -- a window opened inside it -- leaves a depth gap
         * under the first hidden frame: that one is not the visible frame's own callee) */
        f->head = up && up->hidden ? up->head : up && depth > up->depth + 2 ? OC_NO_CODE : code_id;
        f->win_mark = t->attr.win_total;
        t->attr.unk_code1 = 0; /* (the frame that runs now is this one) */
        if (is_call) /* (calls are activations: a generator's resumes are not calls) */
            oc_attr_call(&t->attr, f->anchor, code_id, ts, (int)(depth & 1));
    } else if (!lean && oc_attr_on) {
        t->attr.unk_code1 = 0;
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
    if (UNLIKELY(ts >= t->stall_at))
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
                if (!oc_attr_gap_fast(&t->attr, t->prev_ts, ts, net, top->code_id, top->hidden))
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
        /* (deeper: tested once; the test after tick is for frames pop_stale left, rare) */
        int deeper = t->n > 0 && t->stack[t->n - 1].depth >= rdepth(kind, p);
        if (UNLIKELY(deeper) && valid_code(r->code_id))
            pop_stale(t, rdepth(kind, p), 1);
        tick(t, r, steady, lean, nostats);
        if (UNLIKELY(!valid_code(r->code_id)))
            break;
        p = rdepth(kind, p);
        if (UNLIKELY(deeper) && t->n > 0 && t->stack[t->n - 1].depth >= p) { /* ends never seen: inferred */
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
            if (!sink_slices(slice) && slice != SLICE_NONE)
                rstate.sink->begin(&rstate.out, t->otid, to_ns(r->ts), r->code_id);
        }
        break;
    }
    case K_RETURN:
    case K_YIELD:
    case K_UNWIND:
    case K_CRETURN: {
        int deeper = t->n > 0 && t->stack[t->n - 1].depth > rdepth(kind, p); /* (as for an enter) */
        if (UNLIKELY(deeper) && valid_code(r->code_id))
            pop_stale(t, rdepth(kind, p), 0);
        tick(t, r, steady, lean, nostats);
        if (UNLIKELY(!valid_code(r->code_id)))
            break;
        p = rdepth(kind, p);
        if (UNLIKELY(deeper) && t->n > 0 && t->stack[t->n - 1].depth > p) { /* deeper frames: ends inferred */
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
        if (!lean && UNLIKELY(oc_attr_on)) /* (its caller runs now, deeper than the top frame: an unrecorded one,
                                            * de-instrumented if this code is -- a frame begun before the
                                            * session is not a callee to estimate) */
            t->attr.unk_code1 = t->n > 0 && p >= 2 && p - (kind == K_CRETURN ? 1 : 2) > t->stack[t->n - 1].depth &&
                                        ((r->code_id < rmeta.ncodes && rmeta.codes[r->code_id].flags & CF_START_DISABLED) ||
                                         (kind == K_CRETURN && rmeta.near_zero))
                                    ? r->code_id + 1 : 0;
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
        t->attr.unk_code1 = 0; /* (the top frame's own jump: it runs) */
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
        else if (rstate.sink == &oc_sink_none) /* (the statistics alone: no sink call) */
            lean ? process_block(t, r, rend, 1, SLICE_NONE, 0) : process_block(t, r, rend, 0, SLICE_NONE, 0);
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
    uint32_t s0 = 0; /* the first chunk with a record (an empty one may come first in a damaged recording) */
    while (s0 + 1 < x->nspans && !x->spans[s0].n)
        s0++;
    const span *first = &x->spans[s0];
    uint64_t first_ts = first->n ? first->recs[0].ts : 0;
    if (first->n > 1 && first->recs[1].ts < first_ts) /* (a damaged first time: clamp_rec's) */
        first_ts = first->recs[1].ts;
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

void reset_render(void) {
    free_render_state();
    free_meta();
    memset(&rstate, 0, sizeof rstate);
    rstate.out.fd = -1;
    oc_stats_reset();
}

/* same_top and insn_prefix cover every code id indexed so far (the code table grows while recording) */
int grow_code_arrays(void) {
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

/* ---- the formats (OC_FORMAT_*, render.h): each one's sink and capabilities ---- */
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

int open_output(int format, const char *out_path, int loops, oc_render_result *res) {
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

static inline void set_tid(uint32_t i) { set_otid(rstate.threads[i], oc_render_thread_tid(i)); }

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
    if (t) {
        t->slot = i;
        t->stall_at = NO_STALL;
    }
    return rstate.threads[i] = t;
}

/* Chunk s of thread i; a thread's first chunk sets its tid and, in a flight-recorder window, opens the
 * frames already running when the window began. */
void render_ref(uint32_t i, uint32_t s, int drop) {
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
void end_thread(uint32_t i) {
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
    int cont = oc_live && oc_live->takeover(rec_path, format, out_path, loops);
    int rc = -1;
    size_t off = 0, size = 0;
    const uint8_t *base = NULL;
    void *map = MAP_FAILED;
    uint32_t first0 = 0;
    if (cont) {
        if (oc_live->resume(&base, &size, &off, &first0) < 0)
            cont = 0;
        else
            rstate.live_events = rstate.events;
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
    int two_cpus = oc_cpus_available() >= 2;
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
        oc_live->free();
    else
        munmap(map, size);
    for (uint32_t i = 0; i < rmeta.nthreads; i++) { /* the spans pointed into the mapping */
        free(rstate.ix[i].spans);
        rstate.ix[i].spans = NULL;
        rstate.ix[i].nspans = rstate.ix[i].capspans = 0;
    }
    return rc;
}

/* The renderer's figures stay until the next render (the report reads rmeta and the statistics) or this. */
void oc_render_release(void) {
    if (oc_live)
        oc_live->discard();
    free_render_state();
    free_meta();
    oc_stats_reset();
}
