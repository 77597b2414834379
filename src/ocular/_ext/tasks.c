/* tasks.c -- the renderer's asyncio tasks: each task's track, its steps around their coroutines, who woke
 * whom (flows), each task's life, and the loop stalls of steps and callbacks (recorded by asyncio.c). */
#include "render_int.h"
#include <stdlib.h>
#include <string.h>

/* Task tracks made at most: a sink keeps a sequence per track (the .pftrace: its interning state, a bitmap
 * over the code ids) and looks a track up among them, so a program with 10,000 named tasks would cost a
 * trace 10,000 of them; past this many, a task's steps stay on its thread's track (still named by it). */
#define OC_TASK_TRACKS_MAX 256

/* a task track's home slot in rstate.tt_hash (cap: a power of two) */
static uint32_t tt_slot(long tid, uint32_t task, uint32_t cap) {
    uint64_t h = ((uint64_t)tid * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)task * 0xC2B2AE3D27D4EB4Full);
    return (uint32_t)(h >> 32) & (cap - 1);
}

/* the track of task `task`'s steps on thread `tid`: its tid (made on first use); tid itself if none can be */
static long task_track(long tid, uint32_t task) {
    if (rstate.ntt * 2 >= rstate.tt_cap) { /* (grow: at most half full) */
        uint32_t cap = rstate.tt_cap ? rstate.tt_cap * 2 : 64;
        uint32_t *nh = calloc(cap, sizeof *nh);
        if (!nh)
            return tid;
        for (uint32_t k = 0; k < rstate.ntt; k++) {
            uint32_t j = tt_slot(rstate.tt[k].tid, rstate.tt[k].task, cap);
            while (nh[j])
                j = (j + 1) & (cap - 1);
            nh[j] = k + 1;
        }
        free(rstate.tt_hash);
        rstate.tt_hash = nh;
        rstate.tt_cap = cap;
    }
    uint32_t j = tt_slot(tid, task, rstate.tt_cap);
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

/* ---- asyncio task steps (asyncio.c) ----
 * An OC_MARK_TASK record says the next enter begins a step of that task: the frame it opens is the
 * step's (step_at).  The step is a slice of the task's code (one per task name) around that frame, on
 * the same track -- begun before the frame's own, ended after it -- and a slice of it in the statistics
 * (calls: steps; inclusive: the time the task ran; self: none), its frame's caller there.  A step that
 * holds the thread rstate.stall_ticks or more is a loop stall: the stack when it reached that (from the step's
 * frame up) and its whole length go to the statistics (oc_stats_stall). */

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

__attribute__((noinline, cold)) void task_wake(rthread *t, uint32_t key, uint64_t ts) {
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

void life_end(uint32_t k, uint64_t ts) {
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
__attribute__((noinline, cold)) void cb_begin(rthread *t, uint64_t ts) {
    t->cb_at = t->n;
    t->stall_at = stall_from(ts);
    t->stall_n = 0;
}

__attribute__((noinline, cold)) void cb_end(rthread *t, const frame *f, uint64_t ts, int nostats) {
    t->cb_at = 0;
    t->stall_at = NO_STALL;
    if (t->stall_n && !nostats) {
        uint64_t at = to_ns(f->begin_ts), zero = to_ns(rmeta.tsc0);
        oc_stats_stall(UINT32_MAX, at > zero ? at - zero : 0, ts > f->begin_ts ? ts - f->begin_ts : 0,
                       t->stall_codes, t->stall_n);
    }
    t->stall_n = 0;
}

__attribute__((noinline, cold)) void step_begin(rthread *t, uint64_t ts, int slice, int started,
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

__attribute__((noinline, cold)) void stall_seen(rthread *t) {
    uint64_t at = t->stall_at;
    t->stall_at = NO_STALL;
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
__attribute__((noinline, cold)) void step_slice(rthread *t, const frame *f, uint64_t ts, int whole) {
    if (whole)
        rstate.sink->slice(&rstate.out, t->otid, to_ns(f->begin_ts), to_ns(ts), t->step_task, f->cut);
    else
        rstate.sink->end(&rstate.out, t->otid, to_ns(ts));
}

__attribute__((noinline, cold)) void step_end(rthread *t, const frame *f, uint64_t ts, int counted,
                                                     int nostats) {
    uint32_t task = t->step_task;
    uint64_t incl = ts > f->begin_ts ? ts - f->begin_ts : 0;
    t->step_at = 0;
    t->stall_at = NO_STALL;
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

