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
 * Accumulation runs in the renderer (no GIL); export runs with the GIL after it finished.
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
static int failed;

/* loop stalls (oc_stats_stall), in the order they ended */
typedef struct {
    uint32_t task, n;
    uint64_t begin_ns, ticks;
    uint32_t codes[16];
} stall;
static stall *stalls;
static uint32_t nstalls, capstalls;
#define OC_STALLS_KEPT 1000 /* the rest are counted */
static uint64_t stalls_more;

void oc_stats_stall(uint32_t task, uint64_t begin_ns, uint64_t ticks, const uint32_t *codes, uint32_t n) {
    if (nstalls == OC_STALLS_KEPT) {
        stalls_more++;
        return;
    }
    if (nstalls == capstalls) {
        uint32_t cap = capstalls ? capstalls * 2 : 16;
        stall *s = realloc(stalls, cap * sizeof *s);
        if (!s) {
            failed = 1;
            return;
        }
        stalls = s;
        capstalls = cap;
    }
    stall *s = &stalls[nstalls++];
    s->task = task;
    s->begin_ns = begin_ns;
    s->ticks = ticks;
    s->n = n < 16 ? n : 16;
    memcpy(s->codes, codes, s->n * sizeof *codes);
}

/* asyncio tasks' entries, by code id: their first step's begin, their last step's end, and how many of their
 * tasks' coroutines returned, raised, were cancelled */
typedef struct {
    uint64_t first_ns, last_ns;
    uint64_t ended[4];
} task_life;
static task_life *lives;
static uint32_t nlives;

void oc_stats_task(uint32_t task, uint32_t coro, int started, int how, uint64_t begin_ns, uint64_t end_ns) {
    if (task >= oc_ncs)
        return;
    oc_code_stat *c = &oc_cs[task];
    if (!c->task_root)
        c->task_root = coro + 1;
    c->task_starts += started != 0;
    if (task >= nlives) {
        uint32_t n = task + 64;
        task_life *l = realloc(lives, (size_t)n * sizeof *l);
        if (!l) {
            failed = 1;
            return;
        }
        memset(l + nlives, 0, (size_t)(n - nlives) * sizeof *l);
        lives = l;
        nlives = n;
    }
    task_life *l = &lives[task];
    if (!l->last_ns || begin_ns < l->first_ns)
        l->first_ns = begin_ns;
    if (end_ns > l->last_ns)
        l->last_ns = end_ns;
    l->ended[how & 3]++;
}

/* [{"task": id, "begin_ns", "ticks", "stack": [(qualname, filename, firstlineno), ...]}], GIL held */
static PyObject *export_stalls(void) {
    PyObject *out = PyList_New(0);
    for (uint32_t i = 0; out && i < nstalls; i++) {
        stall *s = &stalls[i];
        PyObject *stack = PyList_New(0);
        for (uint32_t k = 0; stack && k < s->n; k++) {
            if (s->codes[k] == UINT32_MAX || s->codes[k] >= R.ncodes)
                continue;
            oc_codeent *e = oc_rcode(s->codes[k]);
            const char *q = e->qualname_raw ? e->qualname_raw : "?", *f = e->filename_raw ? e->filename_raw : "?";
            PyObject *fr = Py_BuildValue("(NNi)", PyUnicode_DecodeUTF8(q, (Py_ssize_t)strlen(q), "replace"),
                                         PyUnicode_DecodeUTF8(f, (Py_ssize_t)strlen(f), "replace"), e->firstlineno);
            if (!fr || PyList_Append(stack, fr) < 0)
                Py_CLEAR(stack);
            Py_XDECREF(fr);
        }
        PyObject *d = stack ? Py_BuildValue("{s:I,s:K,s:K,s:N}", "task", s->task, "begin_ns",
                                            (unsigned long long)s->begin_ns, "ticks", (unsigned long long)s->ticks,
                                            "stack", stack)
                            : NULL;
        if (!d || PyList_Append(out, d) < 0)
            Py_CLEAR(out);
        Py_XDECREF(d);
    }
    return out;
}


void oc_stats_reset(void) {
    free(lives);
    lives = NULL;
    nlives = 0;
    free(stalls);
    stalls = NULL;
    nstalls = capstalls = 0;
    stalls_more = 0;
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
    failed = 0;
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
            failed = 1;
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
    return R.test_clock || oc_stats_min_gap == UINT64_MAX ? 0 : oc_stats_min_gap;
}

/* The recording's measured own cost (OWNCOST block): the table from now on (not with the test clock,
 * whose ticks count clock reads) */
void oc_stats_own_cost(const uint64_t *ticks, uint32_t n) {
    if (R.test_clock)
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
    if (truncated) {
        c->truncated++;
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
        failed = 1;
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
            failed = 1;
            return;
        }
        c->callees_deinst = n;
        c->capcallees = cap;
    }
    c->callees_deinst[c->ncallees++] = callee;
}

/* A call site of C function `callee` in `caller` was de-instrumented (an OC_MARK_CUT record). */
void oc_stats_cut(uint32_t caller, uint32_t callee) {
    if (caller < R.ncodes && callee < R.ncodes)
        deinst_callee(caller, callee);
}

/* Rendering is over and the recording's final code states are known: a callee whose start was
 * de-instrumented has later calls that sit, unmeasured, in its callers' self time. */
void oc_stats_finish(void) {
    uint32_t n = oc_ncs < R.ncodes ? oc_ncs : R.ncodes;
    for (uint32_t id = 0; id < n; id++)
        if (R.codes[id].flags & CF_START_DISABLED)
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
        failed = 1;
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
                failed = 1;
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
                failed = 1;
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

static uint64_t loop_cycles(const oc_code_stat *c) {
    uint64_t m = 0;
    for (uint32_t i = 0; i < c->nloops; i++)
        if (c->loops[i].cycles > m)
            m = c->loops[i].cycles;
    return m;
}

static int by_key_desc(const void *a, const void *b) {
    const uint64_t *x = a, *y = b; /* {key, id} pairs */
    return x[0] < y[0] ? 1 : x[0] > y[0] ? -1 : (x[1] > y[1]) - (x[1] < y[1]);
}

/* Mark (in keep) the `limit` code ids with the largest key; returns -1 on memory failure. */
static int mark_top(uint8_t *keep, uint32_t n, uint32_t limit, int loops) {
    uint64_t(*k)[2] = malloc((size_t)n * sizeof *k);
    if (!k)
        return -1;
    uint32_t m = 0;
    for (uint32_t id = 0; id < n; id++) {
        const oc_code_stat *c = &oc_cs[id];
        if (loops ? c->nloops != 0 : (c->segments || c->truncated)) {
            k[m][0] = loops ? loop_cycles(c) : c->self;
            k[m][1] = id;
            m++;
        }
    }
    if (m > limit)
        qsort(k, m, sizeof *k, by_key_desc);
    for (uint32_t i = 0; i < m && i < limit; i++)
        keep[k[i][1]] = 1;
    free(k);
    return 0;
}

/* A dict of `n` items: keys[i] -> vals[i] (new references, taken; NULL if one could not be made, and then
 * NULL).  The keys are interned once per call site in `cache` (Py_BuildValue's "{s:...}" made, hashed and
 * freed a fresh str per key per function: 9,000 instructions a function, most of the export; the module
 * is single-phase, one interpreter, so the cached keys are this interpreter's). */
static PyObject *dict_of(PyObject **cache, const char *const *keys, PyObject **vals, int n) {
    PyObject *d = NULL;
    for (int i = 0; i < n; i++)
        if (!vals[i] || (!cache[i] && !(cache[i] = PyUnicode_InternFromString(keys[i]))))
            goto done;
    d = PyDict_New();
    for (int i = 0; d && i < n; i++)
        if (PyDict_SetItem(d, cache[i], vals[i]) < 0)
            Py_CLEAR(d);
done:
    for (int i = 0; i < n; i++)
        Py_XDECREF(vals[i]);
    return d;
}

#define ULL(v) PyLong_FromUnsignedLongLong((unsigned long long)(v))

static const char *const LOOP_KEYS[] = {"src", "dest", "iterations", "jumps", "timed_iterations", "cycles",
                                        "self_cycles", "instructions"};
static PyObject *loop_keys[8];
static const char *const FUNC_KEYS[] = {"untraced_callees", "code", "bytecode", "lines", "id", "name", "file",
                                        "firstlineno", "calls", "segments", "truncated", "incl", "self",
                                        "looped_self", "mean", "stddev", "min", "max", "deinstrumented", "enters",
                                        "loops", "units", "callers"};
static PyObject *func_keys[23];
_Static_assert(sizeof LOOP_KEYS / sizeof *LOOP_KEYS == sizeof loop_keys / sizeof *loop_keys, "loop keys");
_Static_assert(sizeof FUNC_KEYS / sizeof *FUNC_KEYS == sizeof func_keys / sizeof *func_keys, "function keys");

/* an asyncio task's entry: "coroutine" (its steps' coroutine's qualname) and "tasks" (the steps that
 * started it) */
static int export_task(PyObject *d, const oc_code_stat *c, uint32_t id) {
    oc_codeent *e = c->task_root - 1 < R.ncodes ? oc_rcode(c->task_root - 1) : NULL;
    const char *q = e && e->qualname_raw ? e->qualname_raw : "?";
    static const task_life none;
    const task_life *l = id < nlives ? &lives[id] : &none;
    PyObject *life = Py_BuildValue("{s:N,s:K,s:K,s:K,s:K,s:K,s:K}", "coroutine",
                                   PyUnicode_DecodeUTF8(q, (Py_ssize_t)strlen(q), "replace"), "tasks",
                                   (unsigned long long)c->task_starts, "first_ns", (unsigned long long)l->first_ns,
                                   "last_ns", (unsigned long long)l->last_ns, "returned",
                                   (unsigned long long)l->ended[1], "raised", (unsigned long long)l->ended[2],
                                   "cancelled", (unsigned long long)l->ended[3]);
    int rc = life ? PyDict_Update(d, life) : -1;
    Py_XDECREF(life);
    return rc;
}

/* GIL held, renderer finished.  One dict per code object that has any figure, at most `limit` by self
 * time and `limit` by loop cycles (0: all).  with_code_objects: the recording is this process's last
 * session, whose code table (same ids) still holds the code objects. */
PyObject *oc_stats_export(int with_code_objects, uint32_t limit) {
    uint32_t n = oc_ncs < R.ncodes ? oc_ncs : R.ncodes, total = 0;
    uint8_t *keep = NULL;
    for (uint32_t id = 0; id < n; id++)
        if (oc_cs[id].segments || oc_cs[id].truncated)
            total++;
    if (limit && total > limit) {
        keep = calloc(n + 1, 1);
        if (!keep || mark_top(keep, n, limit, 0) < 0 || mark_top(keep, n, limit, 1) < 0) {
            free(keep);
            return PyErr_NoMemory();
        }
        for (uint32_t id = 0; id < n; id++) /* (asyncio tasks: no self time, every one kept) */
            if (R.codes[id].filename_raw && !strcmp(R.codes[id].filename_raw, "<asyncio task>"))
                keep[id] = 1;
    }
    PyObject *funcs = PyList_New(0);
    if (!funcs) {
        free(keep);
        return NULL;
    }
    for (uint32_t id = 0; id < n; id++) {
        oc_code_stat *c = &oc_cs[id];
        oc_codeent *e = oc_rcode(id);
        if (!c->segments && !c->truncated && !c->nloops && !c->unit_cycles)
            continue;
        if (!R.codes[id].qualname_raw || (keep && !keep[id]))
            continue;
        double mean = c->segments ? (double)c->incl_all / (double)c->segments : 0.0;
        double segmean = 0.0, var = 0.0;
        if (c->segments) {
            double s1 = 0.0;
            /* the spread is over per-segment inclusive times (incl counts outermost only; use sq) */
            s1 = c->sq / (double)c->segments;
            segmean = mean;
            var = s1 - segmean * segmean;
            if (var < 0)
                var = 0;
        }
        PyObject *loops = PyList_New(0);
        if (!loops)
            goto fail;
        for (uint32_t i = 0; i < c->nloops; i++) {
            oc_loop_stat *l = &c->loops[i];
            if (!l->iterations) /* (only runs of one iteration: nothing timed) */
                continue;
            PyObject *lv[] = {ULL(l->src * 2), ULL(l->dest * 2), ULL(l->iterations), ULL(l->jumps), ULL(l->timed),
                              ULL(l->cycles), ULL(l->self_cycles), ULL(l->insns)};
            PyObject *t = dict_of(loop_keys, LOOP_KEYS, lv, 8);
            if (!t || PyList_Append(loops, t) < 0) {
                Py_XDECREF(t);
                Py_DECREF(loops);
                goto fail;
            }
            Py_DECREF(t);
        }
        PyObject *unitd = PyDict_New();
        if (!unitd) {
            Py_DECREF(loops);
            goto fail;
        }
        if (c->unit_cycles && c->nloops) { /* the report shows blocks only inside loops */
            /* offset -> (executions, ticks, block end, probe executions, probe ticks) */
            uint64_t *pr = c->probe_cycles;
            for (uint32_t u = 0; u < e->nunits && u < c->nunits; u++) {
                if (!c->unit_count[u] && !(pr && pr[2 * u + 1]))
                    continue;
                PyObject *v = Py_BuildValue("(KKIKK)", (unsigned long long)c->unit_count[u],
                                            (unsigned long long)c->unit_cycles[u], c->block_end[u] * 2,
                                            (unsigned long long)(pr ? pr[2 * u + 1] : 0),
                                            (unsigned long long)(pr ? pr[2 * u] : 0));
                PyObject *k = PyLong_FromUnsignedLong(u * 2);
                int rc = (v && k) ? PyDict_SetItem(unitd, k, v) : -1;
                Py_XDECREF(v);
                Py_XDECREF(k);
                if (rc < 0) {
                    Py_DECREF(loops);
                    Py_DECREF(unitd);
                    goto fail;
                }
            }
        }
        PyObject *untraced = PyList_New(0);
        for (uint32_t i = 0; untraced && i < c->ncallees; i++) {
            oc_codeent *ce = oc_rcode(c->callees_deinst[i]);
            PyObject *nm = PyUnicode_DecodeUTF8(ce->qualname_raw ? ce->qualname_raw : "?",
                                                (Py_ssize_t)strlen(ce->qualname_raw ? ce->qualname_raw : "?"), "replace");
            if (!nm || PyList_Append(untraced, nm) < 0)
                Py_CLEAR(untraced);
            Py_XDECREF(nm);
        }
        if (!untraced) {
            Py_DECREF(loops);
            Py_DECREF(unitd);
            goto fail;
        }
        PyObject *code_obj = with_code_objects && id < S.ncodes ? oc_code_object(oc_code_entry(id)) : NULL;
        PyObject *bytecode = Py_NewRef(Py_None), *lines = Py_NewRef(Py_None);
        if (!code_obj) {
            code_obj = Py_NewRef(Py_None);
            if (c->nloops && e->code && e->lines) { /* dead, or another process's: the recorded bytecode */
                Py_SETREF(bytecode, PyBytes_FromStringAndSize((const char *)e->code, (Py_ssize_t)e->nunits * 2));
                Py_SETREF(lines, PyBytes_FromStringAndSize((const char *)e->lines, (Py_ssize_t)e->nunits * 4));
                if (!bytecode || !lines) {
                    Py_XDECREF(bytecode);
                    Py_XDECREF(lines);
                    Py_DECREF(untraced);
                    Py_DECREF(code_obj);
                    Py_DECREF(loops);
                    Py_DECREF(unitd);
                    goto fail;
                }
            }
        }
        uint32_t ncallers = 0; /* the code ids of its first OC_CALLERS callers */
        while (ncallers < OC_CALLERS && oc_stats_caller_at(c, ncallers))
            ncallers++;
        PyObject *callers = PyTuple_New(ncallers);
        for (uint32_t k = 0; callers && k < ncallers; k++) {
            PyObject *v = PyLong_FromUnsignedLong(oc_stats_caller_at(c, k) - 1);
            if (!v) {
                Py_CLEAR(callers);
                break;
            }
            PyTuple_SET_ITEM(callers, k, v);
        }
        PyObject *fv[] = {untraced, code_obj, bytecode, lines, PyLong_FromUnsignedLong(id),
                          PyUnicode_DecodeUTF8(e->qualname_raw, (Py_ssize_t)strlen(e->qualname_raw), "replace"),
                          PyUnicode_DecodeUTF8(e->filename_raw, (Py_ssize_t)strlen(e->filename_raw), "replace"),
                          PyLong_FromLong(e->firstlineno), ULL(c->calls), ULL(c->segments), ULL(c->truncated),
                          ULL(c->incl), ULL(c->self), ULL(c->looped_self), PyFloat_FromDouble(mean),
                          PyFloat_FromDouble(sqrt(var)), ULL(c->segments ? c->min : 0), ULL(c->max),
                          Py_NewRef((e->flags & CF_START_DISABLED) ? Py_True : Py_False),
                          PyLong_FromUnsignedLong(e->enters), loops, unitd, callers};
        PyObject *d = dict_of(func_keys, FUNC_KEYS, fv, 23);
        if (d && c->task_root && export_task(d, c, id) < 0)
            Py_CLEAR(d);
        if (!d || oc_attr_export(d, id) < 0 || PyList_Append(funcs, d) < 0) {
            Py_XDECREF(d);
            goto fail;
        }
        Py_DECREF(d);
    }
    PyObject *own = oc_stats_own_measured
                        ? Py_BuildValue("{s:K,s:K,s:K,s:K,s:K}", "enter", (unsigned long long)oc_stats_net_off[K_START],
                                        "leave", (unsigned long long)oc_stats_net_off[K_RETURN], "jump",
                                        (unsigned long long)oc_stats_net_off[K_JUMP], "ccall",
                                        (unsigned long long)oc_stats_net_off[K_CCALL], "creturn",
                                        (unsigned long long)oc_stats_net_off[K_CRETURN])
                        : Py_NewRef(Py_None);
    if (!own)
        goto fail;
    free(keep);
    PyObject *st = export_stalls();
    if (!st) {
        Py_DECREF(own);
        Py_DECREF(funcs);
        return NULL;
    }
    return Py_BuildValue("{s:K,s:K,s:d,s:I,s:y#,s:N,s:K,s:d,s:i,s:O,s:I,s:i,s:I,s:N,s:N,s:N,s:N,s:K,s:I}", "events",
                         (unsigned long long)R.events, "dropped", (unsigned long long)R.dropped, "wall_ns", R.wall_ns,
                         "python_hex", R.python_hex, "cache_entries", (const char *)R.cache_entries,
                         (Py_ssize_t)sizeof R.cache_entries, "functions", funcs, "overhead_ticks",
                         (unsigned long long)oc_stats_overhead(), "ns_per_tick", R.ns_per_tick, "precise",
                         R.precise, "stats_incomplete", failed ? Py_True : Py_False, "threshold", R.threshold,
                         "near_zero", R.near_zero, "functions_total", total, "sampling", oc_attr_summary(), "adaptive",
                         R.adaptive ? PyBytes_FromStringAndSize(R.adaptive, R.adaptive_len) : Py_NewRef(Py_None),
                         "own_cost", own, "stalls", st, "stalls_more", (unsigned long long)stalls_more,
                         "stall_ms", R.stall_ms ? R.stall_ms : 100u);
fail:
    free(keep);
    Py_DECREF(funcs);
    return NULL;
}
