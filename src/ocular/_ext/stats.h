/* stats.h -- the statistics' per-code table (stats.c) and the accumulators the renderer calls for every
 * slice and every basic block, inline: they run once or twice per event, and a call into stats.c cost
 * more than the additions themselves.  The rare cases (a code id beyond the table, a truncated slice,
 * a code's first block) go to stats.c.  Renderer thread only; no Python API.
 */
#ifndef OCULAR_STATS_H
#define OCULAR_STATS_H

#include "render.h"

/* callers kept per code: their self times name it when its start is de-instrumented (near-zero mode).  A
 * library's helper has more than 4 (importlib's _call_with_frames_removed: find_spec, exec_module,
 * source_to_code, ...); the search runs only for a call from neither of the first two. */
#define OC_CALLERS 16

typedef struct {
    uint32_t src, dest;
    uint64_t iterations, cycles, self_cycles, insns;
    uint64_t timed; /* iterations whose cycles are counted (not those an instruction probe slowed) */
    uint64_t jumps; /* back jumps recorded, each run's first too: `threshold` of them, its site was disabled */
} oc_loop_stat;

typedef struct {
    uint64_t calls, segments, truncated;
    uint64_t incl, self;        /* ticks, compensated; incl counts each recursion tree once */
    uint64_t incl_all;          /* sum of every segment's inclusive ticks (for the mean) */
    uint64_t looped_self;       /* self ticks of its segments in which a loop recorded a back jump */
    double sq;                  /* sum of squares of per-segment inclusive ticks */
    uint64_t min, max;          /* min: UINT64_MAX until the first segment */
    uint64_t *unit_cycles;      /* per unit: block (adaptive) or instruction (precise) self ticks */
    uint64_t *unit_count;       /* per unit: executions */
    uint32_t *block_end;        /* adaptive: last unit of the block starting here */
    uint64_t *probe_cycles;     /* adaptive: per unit, an instruction probe's self ticks and executions
                                   (2u, 2u+1); NULL without a probe */
    uint32_t nunits;            /* of the code, once unit_cycles is allocated */
    oc_loop_stat *loops;
    uint32_t nloops, caploops;
    uint32_t *callees_deinst;   /* callees de-instrumented after the threshold: their later calls are in
                                   this function's self time, unmeasured */
    uint32_t ncallees, capcallees;
    /* 1 + the code ids of the first OC_CALLERS functions that called this one, 0: free; the first two here,
     * the others in callers_more (allocated at a third caller: most functions never have one) */
    uint32_t callers[2];
    uint32_t *callers_more;
    uint32_t caller_last;       /* 1 + the last caller oc_stats_caller looked up (0: none): a third caller
                                 * that calls again is not looked up again */
    uint32_t task_root;         /* an asyncio task's entry: 1 + the code id of its steps' coroutine (the first) */
    uint64_t task_starts;       /* ...and its steps that started that coroutine: its tasks */
} oc_code_stat;

/* the k-th (< OC_CALLERS) caller kept, 1 + its code id, or 0 */
static inline uint32_t oc_stats_caller_at(const oc_code_stat *c, uint32_t k) {
    return k < 2 ? c->callers[k] : c->callers_more ? c->callers_more[k - 2] : 0;
}

extern oc_code_stat *oc_cs; /* by code id */
extern int oc_stats_failed; /* out of memory: the statistics are incomplete */
/* loop stalls (oc_stats_stall), in the order they ended: the first OC_STALLS_KEPT, the others counted */
typedef struct {
    uint32_t task, n;
    uint64_t begin_ns, ticks;
    uint32_t codes[16];
} oc_stall;
extern oc_stall *oc_stats_stalls;
extern uint32_t oc_stats_nstalls;
extern uint64_t oc_stats_stalls_more;
/* asyncio tasks' entries, by code id: their first step's begin, their last step's end, and how many of their
 * tasks' coroutines returned, raised, were cancelled */
typedef struct {
    uint64_t first_ns, last_ns;
    uint64_t ended[4];
} oc_task_life;
extern oc_task_life *oc_stats_lives;
extern uint32_t oc_stats_nlives;
extern uint32_t oc_ncs;

void oc_stats_slice_slow(uint32_t id, int is_call, uint64_t incl, uint64_t self, uint64_t total_add, int truncated,
                         uint32_t caller);
void oc_stats_caller(oc_code_stat *c, uint32_t caller);
void oc_stats_loop_start(uint32_t id, uint32_t src, uint32_t dest);
void oc_stats_looped(uint32_t id, uint64_t self);
void oc_stats_block_slow(uint32_t id, uint32_t start, uint32_t end, uint64_t cycles);
/* an asyncio task's step that held its thread's loop (render.c): the task's code id, when it began (ns),
 * its length (ticks), and the stack when it passed the limit (code ids from the step's frame up;
 * UINT32_MAX: not known) */
/* an asyncio task's step ended (render.c): its coroutine, whether the step started it, how the coroutine
 * left (0 suspended, 1 returned, 2 raised, 3 cancelled), and the step's begin and end (ns from the start) */
void oc_stats_task(uint32_t task, uint32_t coro, int started, int how, uint64_t begin_ns, uint64_t end_ns);
void oc_stats_stall(uint32_t task, uint64_t begin_ns, uint64_t ticks, const uint32_t *codes, uint32_t n);

static inline void oc_stats_add(oc_code_stat *c, int is_call, uint64_t incl, uint64_t self, uint64_t total_add) {
    c->calls += is_call != 0;
    c->segments++;
    c->self += self;
    c->incl += total_add;
    c->incl_all += incl;
    double d = (double)(int64_t)incl; /* (one instruction where uint64_t needs a test: incl < 2^63) */
    c->sq += d * d;
    c->min = incl < c->min ? incl : c->min;
    c->max = incl > c->max ? incl : c->max;
}

/* One closed slice (a segment) of code `id`: its inclusive and self ticks, and what it adds to the
 * code's total (recursion counted once); a truncated one (its end inferred) adds its times, and counts
 * apart (truncated), not among the calls and segments.  caller:
 * the calling frame's code id (UINT32_MAX: none), kept among the code's first OC_CALLERS callers. */
static inline void oc_stats_slice(uint32_t id, int is_call, uint64_t incl, uint64_t self, uint64_t total_add,
                                  int truncated, uint32_t caller) {
    if (UNLIKELY(id >= oc_ncs || truncated)) {
        oc_stats_slice_slow(id, is_call, incl, self, total_add, truncated, caller);
        return;
    }
    oc_code_stat *c = &oc_cs[id];
    if (UNLIKELY(is_call && c->callers[0] != caller + 1 && c->callers[1] != caller + 1 && c->caller_last != caller + 1))
        oc_stats_caller(c, caller);
    oc_stats_add(c, is_call, incl, self, total_add);
}

/* One execution of the basic block of code `id` spanning units [start, end], with its self ticks. */
static inline void oc_stats_block(uint32_t id, uint32_t start, uint32_t end, uint64_t cycles) {
    oc_code_stat *c;
    if (UNLIKELY(id >= oc_ncs || !(c = &oc_cs[id])->unit_cycles)) {
        oc_stats_block_slow(id, start, end, cycles);
        return;
    }
    if (start >= c->nunits || end < start)
        return;
    c->unit_cycles[start] += cycles;
    c->unit_count[start]++;
    if (end > c->block_end[start])
        c->block_end[start] = end;
}

#endif
