/* owncost.c -- measures, at start, what recording one event costs the program, per event kind, so that
 * the renderer takes it off the gap before each record (instead of the smallest gap it happens to see).
 *
 * Each gap between two records of a thread holds the program's own work plus Ocular's: the end of the
 * callback that wrote the first record, CPython's way back to the bytecode and into the next callback,
 * and that callback up to its clock read.  start_tracing runs three tiny functions of known shape twice:
 * untraced, before the callbacks are registered (py_owncost_baseline: the program's own cost of each
 * statement), and traced, right after (py_owncost_measure), with this thread's records going to a
 * scratch buffer that never reaches the recording.  Both sides take the least time per statement over
 * the repetitions (noise only ever adds time; the least is the most repeatable on a shared machine):
 *   calls():  16 x `f()` of an empty f:  a statement's traced time less its untraced time is a call's
 *             two events; START f -> RETURN f holds no program work: the leave's part (the median gap),
 *             the rest is the enter's;
 *   ccalls(x): 16 x `len(x)`:  the C call's pair cost (CCALL, CRETURN), split as the Python pair's;
 *   loop():   16 iterations of `pass`:  the jump records' cost per record.
 * The result, ticks per kind of the record that ends the gap (OC_BLK_OWNCOST, recording.h), is written
 * into the recording by the recorder.  Nothing here runs on the hot path; with the test clock nothing is
 * measured (reports stay deterministic) and the renderer keeps its smallest-gap rule.
 */
#include "ocular.h"
#include <stdlib.h>
#include <string.h>

#define REPS 31             /* repetitions of each function (odd: one median) */
#define STMTS 16            /* statements (or iterations) in each function */
#define SCRATCH 4096        /* records: more than REPS x the records of the longest repetition */

static uint64_t base_calls, base_ccalls, base_loop; /* untraced ticks per statement (least) */

/* the records one repetition left in the scratch buffer: [from, to) */
typedef struct {
    const oc_rec *from, *to;
} span_t;
static int have_base;

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, uint32_t n) {
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_u64);
    return v[n / 2];
}

/* ticks of one call of fn (no arguments, or x), or UINT64_MAX if it raised (cleared) */
static uint64_t timed_call(PyObject *fn, PyObject *x) {
    uint64_t t0 = oc_now();
    PyObject *r = x ? PyObject_CallOneArg(fn, x) : PyObject_CallNoArgs(fn);
    uint64_t t1 = oc_now();
    if (!r) {
        PyErr_Clear();
        return UINT64_MAX;
    }
    Py_DECREF(r);
    return t1 - t0;
}

static uint64_t untraced(PyObject *fn, PyObject *x) {
    uint64_t least = UINT64_MAX;
    for (int i = 0; i < REPS; i++) {
        uint64_t t = timed_call(fn, x);
        if (t == UINT64_MAX)
            return UINT64_MAX;
        least = t < least ? t : least;
    }
    return least / STMTS;
}

/* the least ticks per statement over the repetitions: the first and last records of `kind` in each (and
 * of `code` if not UINT32_MAX) span their count - 1 statements, each `per` records of that kind */
static uint64_t least_per_stmt(const span_t *sp, int n, uint32_t kind, uint32_t code, double per) {
    double least = -1;
    for (int i = 0; i < n; i++) {
        const oc_rec *first = NULL, *last = NULL;
        uint32_t cnt = 0;
        for (const oc_rec *r = sp[i].from; r < sp[i].to; r++)
            if (OC_KIND(r->info) == kind && (code == UINT32_MAX || r->code_id == code)) {
                if (!first)
                    first = r;
                last = r;
                cnt++;
            }
        if (cnt >= 2) {
            double t = (double)(last->ts - first->ts) / ((double)(cnt - 1) / per);
            least = least < 0 || t < least ? t : least;
        }
    }
    return least < 0 ? 0 : (uint64_t)least;
}

PyDoc_STRVAR(baseline_doc, "_owncost_baseline(calls, ccalls, loop, x)\n\n"
                           "Before the callbacks are registered: time the calibration functions untraced.");

static PyObject *py_owncost_baseline(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *calls, *ccalls, *loop, *x;
    if (!PyArg_ParseTuple(args, "OOOO:_owncost_baseline", &calls, &ccalls, &loop, &x))
        return NULL;
    have_base = 0;
    if (oc_test_clock)
        Py_RETURN_NONE;
    oc_clock_init(); /* (the clock _start will use: its ticks) */
    base_calls = untraced(calls, NULL);
    base_ccalls = untraced(ccalls, x);
    base_loop = untraced(loop, NULL);
    have_base = base_calls != UINT64_MAX && base_ccalls != UINT64_MAX && base_loop != UINT64_MAX;
    Py_RETURN_NONE;
}


static oc_tbuf scratch;
static oc_rec scratch_recs[SCRATCH];

/* run fn(x) REPS times with this thread's records going to the scratch buffer; spans[i]: repetition i's
 * records.  Returns the repetitions run (fewer if the buffer ran short or fn raised). */
static int traced(PyObject *fn, PyObject *x, span_t *spans) {
    int n = 0;
    for (; n < REPS; n++) {
        if (scratch.end - scratch.pos < 64)
            break;
        spans[n].from = scratch.pos;
        if (timed_call(fn, x) == UINT64_MAX)
            break;
        spans[n].to = scratch.pos;
    }
    return n;
}

/* calls(): a call's two events (a statement's traced time less its untraced time); the leave's part is
 * the median START f -> RETURN f gap (no program work in it), the enter's the rest */
static void measure_calls(const span_t *sp, int n, uint64_t *enter, uint64_t *leave) {
    static uint64_t g1[REPS * STMTS];
    uint32_t n1 = 0;
    uint32_t f = UINT32_MAX; /* f's code id: the code of the records between the outer call's */
    for (int i = 0; i < n; i++)
        for (const oc_rec *r = sp[i].from; r + 1 < sp[i].to; r++) {
            if (OC_KIND(r->info) == K_START && OC_KIND(r[1].info) == K_RETURN && r->code_id == r[1].code_id &&
                n1 < REPS * STMTS) {
                g1[n1++] = r[1].ts - r->ts;
                f = r->code_id;
            }
        }
    uint64_t pair = least_per_stmt(sp, n, K_START, f, 1.0);
    pair = pair > base_calls ? pair - base_calls : 0;
    uint64_t m1 = median(g1, n1);
    *leave = m1 < pair ? m1 : pair;
    *enter = pair - *leave;
}

/* ccalls(x): a C call's two events (CCALL -> CRETURN -> CCALL), less the statement's untraced cost */
static uint64_t measure_ccalls(const span_t *sp, int n) {
    uint64_t t = least_per_stmt(sp, n, K_CCALL, UINT32_MAX, 1.0);
    return t > base_ccalls ? t - base_ccalls : 0;
}

/* loop(): one jump record's cost (one or two a loop iteration, by version), less the iteration's
 * untraced cost shared among them */
static uint64_t measure_loop(const span_t *sp, int n) {
    uint32_t jumps = 0;
    for (const oc_rec *r = n ? sp[0].from : NULL; r && r < sp[0].to; r++)
        jumps += OC_KIND(r->info) == K_JUMP;
    double per = jumps >= STMTS ? (double)jumps / STMTS : 1.0; /* records per iteration */
    uint64_t t = least_per_stmt(sp, n, K_JUMP, UINT32_MAX, per); /* ticks per iteration */
    return t > base_loop ? (uint64_t)((double)(t - base_loop) / per) : 0;
}

PyDoc_STRVAR(measure_doc, "_owncost_measure(calls, ccalls, loop, x) -> dict or None\n\n"
                          "Right after the callbacks are registered (before probes and sampling windows): run the\n"
                          "calibration functions traced, into a scratch buffer, and set the session's own cost per\n"
                          "event kind (ticks) for the recording.  None with the test clock or without a baseline.");

static PyObject *py_owncost_measure(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *calls, *ccalls, *loop, *x;
    if (!PyArg_ParseTuple(args, "OOOO:_owncost_measure", &calls, &ccalls, &loop, &x))
        return NULL;
    if (!sess.active || !have_base || oc_test_clock)
        Py_RETURN_NONE;
    /* this thread records into the scratch buffer, unmuted, with nothing de-instrumented meanwhile */
    oc_tbuf *buf = oc_tls.buf;
    uint32_t gen = oc_tls.gen, thr = sess.threshold, fthr = sess.fn_threshold;
    int muted = oc_tls.muted;
    memset(&scratch, 0, sizeof scratch);
    scratch.pos = scratch_recs;
    scratch.end = scratch.limit = scratch_recs + SCRATCH - 1; /* (reserve() keeps one spare record) */
    scratch.gen = sess.gen;
    scratch.alive = 1;
    oc_tls.buf = &scratch;
    oc_tls.gen = sess.gen;
    oc_tls.muted = 0;
    sess.threshold = sess.fn_threshold = 0;
    sess.calibrating = 1;
    static span_t sc[REPS], scc[REPS], sl[REPS];
    int nc = traced(calls, NULL, sc), ncc = sess.c_functions ? traced(ccalls, x, scc) : 0, nl = traced(loop, NULL, sl);
    sess.calibrating = 0;
    sess.threshold = thr;
    sess.fn_threshold = fthr;
    oc_tls.buf = buf;
    oc_tls.gen = gen;
    oc_tls.muted = muted;
    uint64_t enter, leave, jump = measure_loop(sl, nl), cpair = ncc ? measure_ccalls(scc, ncc) : 0;
    measure_calls(sc, nc, &enter, &leave);
    if (nc < 3 || !leave)
        Py_RETURN_NONE; /* (nothing recorded: the renderer keeps its smallest-gap rule) */
    /* a C call's pair splits as a Python call's does between its enter and its leave */
    double share = enter + leave ? (double)leave / (double)(enter + leave) : 0.5;
    uint64_t creturn = (uint64_t)((double)cpair * share), ccall = cpair - creturn;
    if (!ncc)
        ccall = enter, creturn = leave;
    uint64_t *c = sess.own_cost;
    memset(c, 0, sizeof sess.own_cost);
    c[K_START] = c[K_RESUME] = c[K_THROW] = enter;
    c[K_RETURN] = c[K_YIELD] = c[K_UNWIND] = leave;
    c[K_JUMP] = c[K_FARJUMP] = c[K_INSN] = nl ? jump : enter;
    c[K_CCALL] = ccall;
    c[K_CRETURN] = creturn;
    atomic_store(&sess.own_cost_set, 1);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K}", "enter", (unsigned long long)enter, "leave",
                         (unsigned long long)leave, "jump", (unsigned long long)c[K_JUMP], "ccall",
                         (unsigned long long)ccall, "creturn", (unsigned long long)creturn);
}

static PyMethodDef owncost_methods[] = {
    {"_owncost_baseline", py_owncost_baseline, METH_VARARGS, baseline_doc},
    {"_owncost_measure", py_owncost_measure, METH_VARARGS, measure_doc},
    {NULL, NULL, 0, NULL},
};

int oc_owncost_init(PyObject *module) { return PyModule_AddFunctions(module, owncost_methods); }
