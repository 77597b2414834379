/* stats.c -- statistics the writer accumulates from the reconstructed stream, for the report:
 * per function (calls, inclusive and self time, spread), per loop (iterations, cycles, instructions),
 * per basic block (adaptive mode) and per instruction (precise mode), plus the calibration of
 * Ocular's own per-event cost.
 *
 * Calibration: the smallest gap between two consecutive records of one thread and one code object (so
 * that no untraced code can sit in it), over the first 64K such gaps, is the cost of one event
 * (callback, dispatch and record) with no user work in between.  Every gap charged to a frame's self time has that cost subtracted (clamped at zero), so
 * self times and cycles per instruction/block are not inflated by our callbacks.  With the test clock
 * the calibration is off and every figure counts clock reads (deterministic, for golden tests).
 *
 * Accumulation runs in the renderer (no GIL, no Python API); results.c exports the tables with the GIL after
 * it finished.
 */
#include "stats.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

oc_code_stat *oc_cs;
uint32_t oc_ncs;
uint64_t oc_stats_gaps_seen;
uint64_t oc_stats_min_gap = UINT64_MAX;
uint64_t oc_stats_net_off[16];
int oc_stats_own_measured;
int oc_stats_failed;

oc_stall *oc_stats_stalls; /* loop stalls (oc_stats_stall), in the order they ended */
uint32_t oc_stats_nstalls;
static uint32_t capstalls;
#define OC_STALLS_KEPT 1000 /* the rest are counted */
uint64_t oc_stats_stalls_more;

void oc_stats_stall(uint32_t task, uint64_t begin_ns, uint64_t ticks, const uint32_t *codes, uint32_t n) {
    if (oc_stats_nstalls == OC_STALLS_KEPT) {
        oc_stats_stalls_more++;
        return;
    }
    if (oc_stats_nstalls == capstalls) {
        uint32_t cap = capstalls ? capstalls * 2 : 16;
        oc_stall *s = realloc(oc_stats_stalls, cap * sizeof *s);
        if (!s) {
            oc_stats_failed = 1;
            return;
        }
        oc_stats_stalls = s;
        capstalls = cap;
    }
    oc_stall *s = &oc_stats_stalls[oc_stats_nstalls++];
    s->task = task;
    s->begin_ns = begin_ns;
    s->ticks = ticks;
    s->n = n < 16 ? n : 16;
    memcpy(s->codes, codes, s->n * sizeof *codes);
}

oc_task_life *oc_stats_lives; /* asyncio tasks' entries, by code id */
uint32_t oc_stats_nlives;

void oc_stats_task(uint32_t task, uint32_t coro, int started, int how, uint64_t begin_ns, uint64_t end_ns) {
    if (task >= oc_ncs)
        return;
    oc_code_stat *c = &oc_cs[task];
    if (!c->task_root)
        c->task_root = coro + 1;
    c->task_starts += started != 0;
    if (task >= oc_stats_nlives) {
        uint32_t n = task + 64;
        oc_task_life *l = realloc(oc_stats_lives, (size_t)n * sizeof *l);
        if (!l) {
            oc_stats_failed = 1;
            return;
        }
        memset(l + oc_stats_nlives, 0, (size_t)(n - oc_stats_nlives) * sizeof *l);
        oc_stats_lives = l;
        oc_stats_nlives = n;
    }
    oc_task_life *l = &oc_stats_lives[task];
    if (!l->last_ns || begin_ns < l->first_ns)
        l->first_ns = begin_ns;
    if (end_ns > l->last_ns)
        l->last_ns = end_ns;
    l->ended[how & 3]++;
}

void oc_stats_reset(void) {
    free(oc_stats_lives);
    oc_stats_lives = NULL;
    oc_stats_nlives = 0;
    free(oc_stats_stalls);
    oc_stats_stalls = NULL;
    oc_stats_nstalls = capstalls = 0;
    oc_stats_stalls_more = 0;
    for (uint32_t i = 0; i < oc_ncs; i++) {
        free(oc_cs[i].unit_cycles);
        free(oc_cs[i].unit_count);
        free(oc_cs[i].probe_cycles);
        free(oc_cs[i].block_end);
        free(oc_cs[i].loops);
        free(oc_cs[i].callees_deinst);
        free(oc_cs[i].callers_more);
    }
    free(oc_cs);
    oc_cs = NULL;
    oc_ncs = 0;
    oc_stats_gaps_seen = 0;
    oc_stats_min_gap = UINT64_MAX;
    memset(oc_stats_net_off, 0, sizeof oc_stats_net_off);
    oc_stats_own_measured = 0;
    oc_stats_failed = 0;
    oc_attr_reset();
}

/* fork child: forget the parent's arrays without freeing them (they may be mid-update) */
void oc_stats_abandon(void) {
    oc_cs = NULL;
    oc_ncs = 0;
    oc_attr_abandon();
}

static inline oc_code_stat *get(uint32_t id) {
    if (UNLIKELY(id >= oc_ncs)) {
        uint32_t n = id + 256;
        oc_code_stat *c = realloc(oc_cs, (size_t)n * sizeof *c);
        if (!c) {
            oc_stats_failed = 1;
            return NULL;
        }
        memset(c + oc_ncs, 0, (size_t)(n - oc_ncs) * sizeof *c);
        for (uint32_t i = oc_ncs; i < n; i++)
            c[i].min = UINT64_MAX; /* no segment yet (the accumulator takes the smaller) */
        oc_cs = c;
        oc_ncs = n;
    }
    return &oc_cs[id];
}

uint64_t oc_stats_overhead(void) {
    if (oc_stats_own_measured) /* (a call's two events: what a call costs the program, per event) */
        return (oc_stats_net_off[K_START] + oc_stats_net_off[K_RETURN]) / 2;
    return rmeta.test_clock || oc_stats_min_gap == UINT64_MAX ? 0 : oc_stats_min_gap;
}

/* The recording's measured own cost (OWNCOST block): the table from now on (not with the test clock,
 * whose ticks count clock reads) */
void oc_stats_own_cost(const uint64_t *ticks, uint32_t n) {
    if (rmeta.test_clock)
        return;
    for (uint32_t k = 0; k < 16; k++)
        oc_stats_net_off[k] = k < n ? ticks[k] : 0;
    oc_stats_net_off[K_PAUSE] = oc_stats_net_off[K_PAUSE_END] = 0; /* (a pause is the recorder's, measured) */
    oc_stats_own_measured = 1;
}

/* stats.h's oc_stats_slice when the table must grow first, for a truncated slice, or for a caller not
 * yet in the code's list */
void oc_stats_slice_slow(uint32_t id, int is_call, uint64_t incl, uint64_t self, uint64_t total_add, int truncated,
                         uint32_t caller) {
    oc_code_stat *c = get(id);
    if (!c)
        return;
    if (is_call)
        oc_stats_caller(c, caller);
    if (truncated) { /* a call, but not a whole one: its time up to its last record is the code's (no row
                      * loses it), its count and duration are not (calls, mean, min, max: whole calls only) */
        c->truncated++;
        c->self += self;
        c->incl += total_add;
        return;
    }
    oc_stats_add(c, is_call, incl, self, total_add);
}

void oc_stats_caller(oc_code_stat *c, uint32_t caller) {
    if (caller == UINT32_MAX)
        return;
    c->caller_last = caller + 1; /* (kept below, or already, or past OC_CALLERS: nothing to do next time) */
    uint32_t k = 0;
    while (k < OC_CALLERS && oc_stats_caller_at(c, k) && oc_stats_caller_at(c, k) != caller + 1)
        k++;
    if (k >= OC_CALLERS || oc_stats_caller_at(c, k))
        return;
    if (k < 2) {
        c->callers[k] = caller + 1;
        return;
    }
    if (!c->callers_more && !(c->callers_more = calloc(OC_CALLERS - 2, sizeof *c->callers_more))) {
        oc_stats_failed = 1;
        return;
    }
    c->callers_more[k - 2] = caller + 1;
}

static void deinst_callee(uint32_t caller, uint32_t callee) {
    oc_code_stat *c = get(caller);
    if (!c)
        return;
    for (uint32_t i = 0; i < c->ncallees; i++)
        if (c->callees_deinst[i] == callee)
            return;
    if (c->ncallees == c->capcallees) {
        uint32_t cap = c->capcallees ? c->capcallees * 2 : 4;
        uint32_t *n = realloc(c->callees_deinst, cap * sizeof *n);
        if (!n) {
            oc_stats_failed = 1;
            return;
        }
        c->callees_deinst = n;
        c->capcallees = cap;
    }
    c->callees_deinst[c->ncallees++] = callee;
}

/* A call site of C function `callee` in `caller` was de-instrumented (an OC_MARK_CUT record). */
void oc_stats_cut(uint32_t caller, uint32_t callee) {
    if (caller < rmeta.ncodes && callee < rmeta.ncodes)
        deinst_callee(caller, callee);
}

/* Rendering is over and the recording's final code states are known: a callee whose start was
 * de-instrumented has later calls that sit, unmeasured, in its callers' self time. */
void oc_stats_finish(void) {
    uint32_t n = oc_ncs < rmeta.ncodes ? oc_ncs : rmeta.ncodes;
    for (uint32_t id = 0; id < n; id++)
        if (rmeta.codes[id].flags & CF_START_DISABLED)
            for (uint32_t k = 0; k < OC_CALLERS && oc_stats_caller_at(&oc_cs[id], k); k++)
                deinst_callee(oc_stats_caller_at(&oc_cs[id], k) - 1, id); /* (may move oc_cs: get) */
}

static int units(oc_code_stat *c, uint32_t id) {
    if (LIKELY(c->unit_cycles != NULL))
        return 0;
    c->nunits = oc_rcode(id)->nunits;
    uint32_t n = c->nunits + 1;
    c->unit_cycles = calloc(n, sizeof(uint64_t));
    c->unit_count = calloc(n, sizeof(uint64_t));
    c->block_end = calloc(n, sizeof(uint32_t));
    if (!c->unit_cycles || !c->unit_count || !c->block_end) {
        free(c->unit_cycles); /* all or none: the accumulators test unit_cycles alone */
        free(c->unit_count);
        free(c->block_end);
        c->unit_cycles = NULL;
        c->unit_count = NULL;
        c->block_end = NULL;
        oc_stats_failed = 1;
        return -1;
    }
    return 0;
}

/* stats.h's oc_stats_block when the table must grow or the code's per-unit arrays be allocated first */
void oc_stats_block_slow(uint32_t id, uint32_t start, uint32_t end, uint64_t cycles) {
    oc_code_stat *c = get(id);
    if (!c || units(c, id) < 0)
        return;
    oc_stats_block(id, start, end, cycles);
}

/* One execution of an instruction with its self ticks: precise mode's per-unit figures, or (probe) an
 * adaptive-mode probe's, kept apart from the blocks'. */
void oc_stats_insn(uint32_t id, uint32_t unit, uint64_t cycles, int probe) {
    oc_code_stat *c = get(id);
    if (!c || units(c, id) < 0 || unit >= c->nunits)
        return;
    if (probe) {
        if (!c->probe_cycles) {
            c->probe_cycles = calloc(2 * (size_t)c->nunits, sizeof(uint64_t));
            if (!c->probe_cycles) {
                oc_stats_failed = 1;
                return;
            }
        }
        c->probe_cycles[2 * unit] += cycles;
        c->probe_cycles[2 * unit + 1]++;
        return;
    }
    c->unit_cycles[unit] += cycles;
    c->unit_count[unit]++;
}

/* the loop of code stat c whose header is dest (created; NULL: out of memory) */
static inline __attribute__((always_inline)) oc_loop_stat *loop_of(oc_code_stat *c, uint32_t src, uint32_t dest) {
    oc_loop_stat *l = NULL;
    for (uint32_t i = 0; i < c->nloops; i++)
        if (c->loops[i].dest == dest) { /* one loop per header; continue edges included */
            l = &c->loops[i];
            if (src > l->src)
                l->src = src;
            break;
        }
    if (!l) {
        if (c->nloops == c->caploops) {
            uint32_t cap = c->caploops ? c->caploops * 2 : 4;
            oc_loop_stat *n = realloc(c->loops, cap * sizeof *n);
            if (!n) {
                oc_stats_failed = 1;
                return NULL;
            }
            c->loops = n;
            c->caploops = cap;
        }
        l = &c->loops[c->nloops++];
        memset(l, 0, sizeof *l);
        l->src = src;
        l->dest = dest;
    }
    return l;
}

/* A back jump that starts a run of the loop (the run's first iteration has no start: not counted) */
void oc_stats_loop_start(uint32_t id, uint32_t src, uint32_t dest) {
    oc_code_stat *c = get(id);
    oc_loop_stat *l = c ? loop_of(c, src, dest) : NULL;
    if (l)
        l->jumps++;
}

/* The frames of code `id` in which a loop recorded a back jump: their self ticks (the loops' share of
 * the function's self time in them extends to its unrecorded iterations, see _report.py's _loop) */
void oc_stats_looped(uint32_t id, uint64_t self) {
    oc_code_stat *c = get(id);
    if (c)
        c->looped_self += self;
}

void oc_stats_loop(uint32_t id, uint32_t src, uint32_t dest, uint64_t cycles, uint64_t self_cycles,
                   uint64_t insns, int timed) {
    oc_code_stat *c = get(id);
    oc_loop_stat *l = c ? loop_of(c, src, dest) : NULL;
    if (!l)
        return;
    l->jumps++;
    l->iterations++;
    l->insns += insns;
    if (!timed)
        return;
    l->timed++;
    l->cycles += cycles;
    l->self_cycles += self_cycles;
}

