/* monitor.c -- the sys.monitoring callbacks: the hot path.
 *
 * Each callback is an instance of a small C type that carries its own vectorcall function pointer
 * (cheaper to call than a METH_FASTCALL builtin).  Per event: read the code object's extra slot,
 * check the filter verdict and the hit counter, read the clock, append one 16-byte record to this
 * thread's chunk (with non-temporal stores on x86-64, see put_rec).  Nothing allocates, nothing locks,
 * nothing raises: failures set a flag reported by stop_tracing(), and the slow paths keep any exception
 * in flight intact.
 *
 * What is exact: by default every function event is recorded (sess.fn_threshold 0): every activation is
 * counted and timed, in every thread.  The threshold de-instruments what is statistical by nature: jump
 * sites, instruction probes, and C call sites whose calls are cheap (ccall_keep: a site whose calls
 * average OC_CCALL_KEEP_NS or more stays armed).
 * Near-zero mode (sess.fn_threshold = threshold, opt-in): after `threshold` enters a function's
 * PY_START/PY_RESUME answer DISABLE, and every C call site goes after `threshold` calls; its
 * PY_RETURN/PY_YIELD sites stay armed until no recorded activation is open, so every recorded begin gets
 * its real end, then answer DISABLE -- for at most 4096 unrecorded ends (recursion, or other threads'
 * calls), after which the renderer infers the remaining ends.  Which activations are recorded and open:
 * each thread keeps a stack of them (code id and frame depth; oc_tbuf.open), so that a return ends one
 * only if it is that thread's innermost at that depth, at any depth; the code's count of them on every
 * thread (ex->open) says when its return sites may go.  (Outside near-zero mode no function is
 * de-instrumented and none of this is kept.)  JUMP/BRANCH/INSTRUCTION sites have one counter per location.
 * INSTRUCTION (precise mode, or an adaptive-mode probe armed when a loop's back edge passes the
 * threshold, see arm_probe): once one instruction site of a code object passes the threshold, that
 * code's instruction recording ends (an end record), and its other sites answer DISABLE unrecorded.
 * CALL sites record C functions only (K_CCALL, then K_CRETURN from C_RETURN/C_RAISE), with a counter
 * per site like jumps; a site calling anything else is disabled at its first event.
 * PY_THROW and PY_UNWIND cannot be disabled and never get DISABLE.  Counters persist for the
 * session, so a restart_events() by another tool is answered by disabling again.
 * Sampling windows (sampling.c): while one is open, function enters/leaves and C calls that would
 * answer DISABLE are recorded instead (an enter after a K_MARK record); jumps and instructions are not.
 *
 * Fast paths: PY_START/PY_RESUME/PY_RETURN/PY_YIELD and (at threshold 0) JUMP/BRANCH first try the usual
 * case with no call but the thread state's (enter_fast, leave_fast, cb_jump), so that they save no or
 * one register; any other case is handed, unchanged, to the full callback (on_enter, on_leave,
 * jump_full), which defines what an event does.  fib(20) at threshold 0: 99 instructions per event
 * above the floor before, 74 with them (callgrind, 3.12).
 */
#include "ocular.h"
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h> /* _mm_stream_si64 */
#endif

typedef struct {
    PyObject_HEAD
    vectorcallfunc vc;
    const char *name;
} oc_cb;

static PyObject *cb_repr(PyObject *self) {
    return PyUnicode_FromFormat("<ocular callback %s>", ((oc_cb *)self)->name);
}

static PyTypeObject CallbackType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ocular._ocular.Callback",
    .tp_basicsize = sizeof(oc_cb),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(oc_cb, vc),
    .tp_call = PyVectorcall_Call,
    .tp_repr = cb_repr,
    .tp_doc = "A sys.monitoring callback implemented in C by Ocular.",
};

static __attribute__((noinline)) oc_codeextra *lookup_slow(PyObject *code) {
    if (!sess.active || !PyCode_Check(code))
        return NULL;
    PyObject *exc = PyErr_GetRaisedException();
    oc_codeextra *ex = oc_code_register((PyCodeObject *)code);
    PyErr_Clear();
    PyErr_SetRaisedException(exc);
    return ex;
}

/* the code object's extra when it is this session's (from the code map); else NULL */
static inline oc_codeextra *lookup_fast(PyObject *code) {
    oc_codeextra *ex = oc_codemap_get(&sess.codes, code);
    return LIKELY(ex != NULL && ex->gen == sess.gen) ? ex : NULL;
}

static inline oc_codeextra *lookup(PyObject *code) {
    oc_codeextra *ex = lookup_fast(code);
    return LIKELY(ex != NULL) ? ex : lookup_slow(code);
}

static inline oc_rec *reserve(void) { return oc_reserve_rec(); }

/* Write a record.  On x86-64 with non-temporal stores: the program never reads its records again and
 * the recorder reads them on another CPU, so a store that fetched the line first (its previous chunk
 * was last read by the recorder) only cost the program time: fib(26) at threshold 0 was faster in 99
 * of 159 interleaved rounds (five runs; per-round median ratio 0.94-1.006).  The stores are weakly
 * ordered: the chunk's owner fences before it hands the chunk over (buffer.c enqueue); another thread
 * only ever reads a chunk after its owner released the GIL (a locked instruction, which drains them). */
static inline __attribute__((always_inline)) void put_rec(oc_rec *r, uint64_t ts, uint32_t code, uint32_t info) {
#if defined(__x86_64__)
    _mm_stream_si64((long long *)(void *)&r->ts, (long long)ts);
    _mm_stream_si64((long long *)(void *)&r->code_id, (long long)((uint64_t)info << 32 | code));
#else
    r->ts = ts;
    r->code_id = code;
    r->info = info;
#endif
}

static inline PyThreadState *tstate(void) { return oc_tstate_unchecked(); }

static inline uint32_t depth_of(PyThreadState *ts) {
    return oc_depth(ts) & OC_PAYLOAD_MAX;
}

static inline uint32_t frame_depth(void) { return depth_of(tstate()); }

/* An instruction offset (a non-negative int) that is a compact int: its one digit, as
 * PyUnstable_Long_CompactValue reads it but without its sign (never negative here; 0's digit is 0). */
static inline uint32_t compact_offset(PyObject *o) { return (uint32_t)((PyLongObject *)o)->long_value.ob_digit[0]; }

static inline uint32_t small_int(PyObject *o) {
    if (LIKELY(PyUnstable_Long_IsCompact((PyLongObject *)o)))
        return compact_offset(o);
    return (uint32_t)PyLong_AsUnsignedLongMask(o);
}

#define LATE_ENDS_MAX 4096u

/* ---- the thread's recorded activations not yet ended (threshold > 0) ---- */
static inline uint64_t open_key(uint32_t id, uint32_t depth) { return (uint64_t)depth << 32 | id; }

/* A stale entry is dropped: its code's count goes down (if the code object is still alive). */
static void open_drop(uint64_t key) {
    uint32_t id = (uint32_t)key;
    if (id < sess.ncodes) {
        oc_codeextra *x = oc_code_entry(id)->extra;
        if (x && x->open)
            x->open--;
    }
}

/* open_push's rare case: entries at this depth or deeper are stale (those frames ended unseen: their
 * ends were no longer reported), and the stack may have to grow.  Without memory the activation is
 * counted but not kept: the code's return sites then stay armed up to LATE_ENDS_MAX. */
static __attribute__((noinline)) void open_push_slow(oc_tbuf *b, oc_codeextra *ex, uint32_t depth) {
    uint32_t n = b->nopen;
    while (n && (uint32_t)(b->open[n - 1] >> 32) >= depth)
        open_drop(b->open[--n]);
    b->nopen = n;
    ex->open++;
    if (n == b->capopen) {
        uint32_t cap = b->capopen ? b->capopen * 2 : 64;
        uint64_t *a = cap > b->capopen ? realloc(b->open, cap * sizeof *a) : NULL;
        if (!a)
            return;
        b->open = a;
        b->capopen = cap;
    }
    b->open[b->nopen++] = open_key(ex->id, depth);
}

/* A recorded enter of ex at `depth` on this thread. */
static inline void open_push(oc_tbuf *b, oc_codeextra *ex, uint32_t depth) {
    uint32_t n = b->nopen;
    if (LIKELY(n < b->capopen && (n == 0 || (uint32_t)(b->open[n - 1] >> 32) < depth))) {
        b->open[n] = open_key(ex->id, depth);
        b->nopen = n + 1;
        ex->open++;
        return;
    }
    open_push_slow(b, ex, depth);
}

/* open_pop's rare case: deeper entries are stale (dropped), then the innermost is tested again. */
static __attribute__((noinline)) int open_pop_slow(oc_tbuf *b, oc_codeextra *ex, uint32_t depth) {
    uint32_t n = b->nopen;
    while (n && (uint32_t)(b->open[n - 1] >> 32) > depth)
        open_drop(b->open[--n]);
    b->nopen = n;
    if (n && b->open[n - 1] == open_key(ex->id, depth)) {
        b->nopen = n - 1;
        ex->open -= ex->open != 0;
        return 1;
    }
    return 0;
}

/* A leave of ex at `depth` on this thread: 1 if it ends a recorded activation (then no longer open). */
static inline int open_pop(oc_tbuf *b, oc_codeextra *ex, uint32_t depth) {
    uint32_t n = b->nopen;
    if (UNLIKELY(!n))
        return 0;
    uint64_t top = b->open[n - 1];
    if (LIKELY(top == open_key(ex->id, depth))) {
        b->nopen = n - 1;
        ex->open -= ex->open != 0;
        return 1;
    }
    return (uint32_t)(top >> 32) > depth ? open_pop_slow(b, ex, depth) : 0;
}

/* This thread's buffer when it belongs to the running session (its open stack is this session's). */
static inline oc_tbuf *session_buf(void) { return oc_tls.gen == sess.gen ? oc_tls.buf : NULL; }
#define RETURN_NONE return Py_None /* None is immortal on 3.12+: no reference to take */
#define RETURN_DISABLE return Py_NewRef(sess.disable)

/* a sampling window is open (never reads the clock when none was ever opened: the test clock) */
static inline int window_open(void) { return UNLIKELY(oc_win_end != 0) && oc_in_window(oc_now()); }

/* A de-instrumented site while a sampling window is open (sampling.c): the enter is recorded after a
 * K_MARK record that says so (the renderer's estimate needs to know it would not be recorded outside
 * windows).  Off the hot path: only reached where the answer would otherwise be DISABLE. */
static __attribute__((noinline)) int record_sampled(uint32_t code_id, uint32_t info, uint64_t ts) {
    oc_rec *r = reserve();
    if (UNLIKELY(!r))
        return 0;
    put_rec(r, ts, OC_NO_CODE, OC_INFO(K_MARK, OC_MARK_SAMPLED));
    put_rec(oc_tls.buf->pos++, ts, code_id, info); /* reserve() always leaves one spare record */
    return 1;
}

static __attribute__((noinline)) PyObject *enter_sampled(oc_codeextra *ex, uint32_t kind) {
    if (LIKELY(!oc_win_end)) {
        oc_sampling_kick();
        RETURN_DISABLE;
    }
    uint64_t now = oc_now();
    if (!oc_in_window(now))
        RETURN_DISABLE;
    uint32_t depth = frame_depth();
    if (record_sampled(ex->id, OC_INFO(kind, depth), now))
        open_push(oc_tls.buf, ex, depth); /* (near-zero mode: only then are functions de-instrumented) */
    RETURN_NONE;
}

static inline PyObject *on_enter(PyObject *const *args, uint32_t kind) {
    if (UNLIKELY(oc_tls.muted)) /* (Ocular's own render in this thread: its calls count toward no threshold;
                                 * a muted thread never takes enter_fast, its chunk's end is pulled back) */
        RETURN_NONE;
    oc_codeextra *ex = lookup(args[0]);
    if (UNLIKELY(!ex))
        RETURN_NONE;
    if (UNLIKELY(ex->flags & ~CF_ASYNCIO)) {
        if (kind == K_THROW) {
            if (ex->flags & CF_EXCLUDED)
                RETURN_NONE;
        } else {
            if (ex->flags & CF_EXCLUDED)
                RETURN_DISABLE;
            return enter_sampled(ex, kind);
        }
    } else if (sess.fn_threshold && kind != K_THROW && UNLIKELY(++ex->enters > sess.fn_threshold)) {
        ex->flags |= CF_START_DISABLED;
        return enter_sampled(ex, kind);
    }
    uint32_t depth = frame_depth();
    if (UNLIKELY(ex->flags & CF_CORO)) { /* (a coroutine: it may begin an asyncio task's step) */
        oc_tbuf *b = session_buf();
        if (b)
            oc_task_enter(b, depth, ex);
    }
    oc_rec *r = reserve();
    if (LIKELY(r != NULL)) {
        put_rec(r, oc_now(), ex->id, OC_INFO(kind, depth));
        if (sess.fn_threshold)
            open_push(oc_tls.buf, ex, depth);
        if (UNLIKELY(ex->flags & CF_WAKE) && kind == K_START) /* (asyncio's call_soon: a task scheduled?) */
            oc_task_wake();
    }
    RETURN_NONE;
}

static inline PyObject *on_leave(PyObject *const *args, uint32_t kind) {
    oc_codeextra *ex = lookup(args[0]);
    if (UNLIKELY(!ex))
        RETURN_NONE;
    if (UNLIKELY(ex->flags & CF_EXCLUDED)) {
        if (kind == K_UNWIND)
            RETURN_NONE;
        RETURN_DISABLE;
    }
    uint32_t depth = frame_depth();
    oc_tbuf *b = sess.fn_threshold ? session_buf() : NULL;
    int begun = b ? open_pop(b, ex, depth) : 0;
    if (UNLIKELY(ex->flags & CF_START_DISABLED)) {
        /* The start is de-instrumented.  Keep the end sites armed while recorded activations are
         * still open (their ends matter); ends of unrecorded activations are not recorded. */
        if (!begun && !window_open()) {
            /* (inside a sampling window the end of an unrecorded activation is recorded: it tells the
             * renderer that the time just before it was that call's, not its caller's) ...
             * ...but not forever: in recursive code the outermost recorded call stays open while
             * every nested one returns here.  After LATE_ENDS_MAX such ends the sites are disabled
             * and the writer closes the still-open recorded calls at the next event of an enclosing
             * frame (or at stop). */
            if (ex->open && kind != K_UNWIND && ex->late_ends < LATE_ENDS_MAX) {
                ex->late_ends++;
                RETURN_NONE;
            }
            if (kind == K_UNWIND)
                RETURN_NONE;
            RETURN_DISABLE;
        }
    }
    if (UNLIKELY(ex->flags & CF_CORO) && kind == K_UNWIND) /* (a task's coroutine ends by an exception: cancelled?) */
        oc_task_unwind(session_buf(), depth, args[2]);
    oc_rec *r = reserve();
    if (LIKELY(r != NULL))
        put_rec(r, oc_now(), ex->id, OC_INFO(kind, depth));
    if (UNLIKELY(ex->flags & CF_CORO))
        oc_task_leave(session_buf(), depth);
    if (UNLIKELY(ex->flags & CF_START_DISABLED) && kind != K_UNWIND && !ex->open && !window_open())
        RETURN_DISABLE;
    RETURN_NONE;
}

static __attribute__((noinline)) PyObject *enter_full(PyObject *const *args, uint32_t kind) {
    return on_enter(args, kind);
}
static __attribute__((noinline)) PyObject *leave_full(PyObject *const *args, uint32_t kind) {
    return on_leave(args, kind);
}

/* The usual start or resume (of a code object of this session without flags, under its threshold, a
 * record free in the chunk, the hardware clock), recorded as on_enter would with nothing but the
 * thread state's call in between; anything else goes to on_enter before anything is changed. */
static inline __attribute__((always_inline)) PyObject *enter_fast(PyObject *const *args, uint32_t kind) {
    PyThreadState *ts = tstate();
    oc_codeextra *ex = lookup_fast(args[0]);
    if (LIKELY(ex != NULL && !ex->flags && oc_fast_clock && (!sess.fn_threshold || ex->enters < sess.fn_threshold))) {
        oc_tbuf *b = oc_tls.buf;
        if (LIKELY(oc_tls.gen == sess.gen && b->pos < b->end)) {
            uint32_t depth = depth_of(ts);
            if (sess.fn_threshold) {
                ex->enters++;
                open_push(b, ex, depth);
            }
            put_rec(b->pos++, oc_fast_now(), ex->id, OC_INFO(kind, depth));
            RETURN_NONE;
        }
    }
    return enter_full(args, kind);
}

/* The usual return or yield (a code object of this session without flags: its start is not
 * de-instrumented), recorded as on_leave would; anything else goes to on_leave before anything is
 * changed. */
static inline __attribute__((always_inline)) PyObject *leave_fast(PyObject *const *args, uint32_t kind) {
    PyThreadState *ts = tstate();
    oc_codeextra *ex = lookup_fast(args[0]);
    if (LIKELY(ex != NULL && !ex->flags && oc_fast_clock)) {
        oc_tbuf *b = oc_tls.buf;
        if (LIKELY(oc_tls.gen == sess.gen && b->pos < b->end)) {
            uint32_t depth = depth_of(ts);
            if (sess.fn_threshold)
                open_pop(b, ex, depth);
            put_rec(b->pos++, oc_fast_now(), ex->id, OC_INFO(kind, depth));
            RETURN_NONE;
        }
    }
    return leave_full(args, kind);
}

static PyObject *cb_start(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw) {
    (void)self, (void)nargsf, (void)kw;
    return enter_fast(args, K_START);
}
static PyObject *cb_resume(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw) {
    (void)self, (void)nargsf, (void)kw;
    return enter_fast(args, K_RESUME);
}
static PyObject *cb_throw(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw) {
    (void)self, (void)nargsf, (void)kw;
    return on_enter(args, K_THROW);
}
static PyObject *cb_return(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw) {
    (void)self, (void)nargsf, (void)kw;
    return leave_fast(args, K_RETURN);
}
static PyObject *cb_yield(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw) {
    (void)self, (void)nargsf, (void)kw;
    return leave_fast(args, K_YIELD);
}
static PyObject *cb_unwind(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw) {
    (void)self, (void)nargsf, (void)kw;
    return on_leave(args, K_UNWIND);
}

/* The per-site threshold shared by jumps, instructions and C calls (which: 0, 1, 2 as in
 * oc_code_counters; limit: sess.threshold, or sess.insn_limit for instructions, 0 for none): SITE_RECORD,
 * SITE_DISABLE after `limit` hits (the site answers DISABLE), or
 * SITE_SKIP when its counters cannot be allocated (nothing recorded, the failure reported at stop). */
enum { SITE_RECORD, SITE_DISABLE, SITE_SKIP };
static inline int site_verdict(oc_codeextra *ex, int which, uint32_t unit, uint32_t limit) {
    static const char *const oom[] = {"out of memory for jump counters", "out of memory for instruction counters",
                                      "out of memory for call counters"};
    if (!limit)
        return SITE_RECORD;
    uint32_t *hits = which == 2 ? ex->call_hits : which ? ex->insn_hits : ex->edge_hits;
    if (UNLIKELY(!hits)) {
        hits = oc_code_counters(ex, which);
        if (!hits) {
            oc_internal_error(oom[which]);
            return SITE_SKIP;
        }
    }
    if (LIKELY(unit < ex->nunits) && UNLIKELY(++hits[unit] > limit)) {
        ex->sites_disabled = 1;
        return SITE_DISABLE;
    }
    return SITE_RECORD;
}

/* Adaptive mode: a loop's back edge has just passed the threshold, so its blocks' cycles are known from
 * the first `threshold` iterations, but not how each block's cycles divide among its instructions (a
 * large allocation in a long block).  Arm INSTRUCTION events on this code object (set_local_events, once
 * per code): its instructions are then recorded until one of them passes sess.insn_limit (cb_insn), and
 * the renderer splits each block's cycles in proportion to its instructions' cycles in this probe.
 * At threshold 0 (nothing is ever disabled) the probe starts after sess.probe_after back jumps of the
 * code instead, and lasts OC_PROBE_LEN executions of its hottest instruction; the renderer leaves the
 * blocks and iterations it overlaps out of their figures.  Costs one call into sys.monitoring per hot
 * loop; the probe's events are bounded by its length times the instructions per iteration. */
static __attribute__((noinline)) void arm_probe(oc_codeextra *ex) {
    ex->probe = 1; /* (its local events: INSTRUCTION, with CALL if armed) */
    PyObject *exc = PyErr_GetRaisedException();
    PyObject *r = PyObject_CallFunction(sess.set_local_events, "iOk", sess.tool_id, ex->code, oc_local_events(ex));
    if (r) {
        Py_DECREF(r);
    } else {
        ex->probe = 2;
        PyErr_Clear(); /* (a code object sys.monitoring refuses: no probe, the blocks stay even) */
    }
    PyErr_SetRaisedException(exc);
}

/* threshold 0 (no site is ever disabled): a code object's probe starts after a warm-up of back jumps */
static __attribute__((noinline)) void count_back_jump(oc_codeextra *ex) {
    if (!ex->probe && ++ex->back_jumps >= sess.probe_after)
        arm_probe(ex);
}

/* JUMP and BRANCH: (code, offset, destination); every case (cb_jump takes the usual one itself) */
static __attribute__((noinline)) PyObject *jump_full(PyObject *const *args, size_t nargsf) {
    if (UNLIKELY(PyVectorcall_NARGS(nargsf) < 3 || oc_tls.muted))
        RETURN_NONE;
    oc_codeextra *ex = lookup(args[0]);
    if (UNLIKELY(!ex))
        RETURN_NONE;
    if (UNLIKELY(ex->flags & CF_EXCLUDED))
        RETURN_DISABLE;
    uint32_t src = small_int(args[1]) >> 1, dest = small_int(args[2]) >> 1;
    int verdict = site_verdict(ex, 0, src, sess.threshold);
    if (UNLIKELY(verdict != SITE_RECORD)) {
        if (verdict == SITE_DISABLE) {
            if (dest < src && !ex->probe && sess.set_local_events)
                arm_probe(ex);
            RETURN_DISABLE;
        }
        RETURN_NONE;
    }
    if (UNLIKELY(dest < src) && UNLIKELY(sess.probe_after))
        count_back_jump(ex);
    oc_rec *r = reserve();
    if (UNLIKELY(!r))
        RETURN_NONE;
    uint64_t ts = oc_now();
    if (LIKELY(src <= OC_NEAR_MAX && dest <= OC_NEAR_MAX)) {
        put_rec(r, ts, ex->id, OC_INFO(K_JUMP, (src << OC_NEAR_BITS) | dest));
    } else {
        put_rec(r, ts, ex->id, OC_INFO(K_FARJUMP, src & OC_PAYLOAD_MAX));
        /* the slow path always leaves one spare record */
        put_rec(oc_tls.buf->pos++, ts, ex->id, OC_INFO(K_EXT, dest & OC_PAYLOAD_MAX));
    }
    RETURN_NONE;
}

/* JUMP and BRANCH.  The usual event needs no call: a code object of this session, two small offsets, a
 * record free in the chunk, the hardware clock, and under a threshold a site whose counter is allocated
 * and below it (site_verdict's count, kept here), at threshold 0 no instruction probe to arm.  It is
 * recorded here exactly as jump_full would, with no register saved; every other case (the site's last
 * hit, which disables it and may arm a probe, among them) is a tail call to jump_full, taken before
 * anything is changed. */
static PyObject *cb_jump(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw) {
    (void)self, (void)kw;
    oc_codeextra *ex;
    if (LIKELY(oc_fast_clock && PyVectorcall_NARGS(nargsf) >= 3) &&
        LIKELY((ex = lookup_fast(args[0])) != NULL && !(ex->flags & CF_EXCLUDED))) {
        oc_tbuf *b = oc_tls.buf;
        if (LIKELY(PyUnstable_Long_IsCompact((PyLongObject *)args[1]) &&
                   PyUnstable_Long_IsCompact((PyLongObject *)args[2]) && oc_tls.gen == sess.gen && b->pos < b->end)) {
            uint32_t src = compact_offset(args[1]) >> 1, dest = compact_offset(args[2]) >> 1;
            if (LIKELY((src | dest) <= OC_NEAR_MAX)) {
                if (sess.threshold) {
                    uint32_t *hits = ex->edge_hits;
                    if (UNLIKELY(!hits || src >= ex->nunits || hits[src] >= sess.threshold))
                        return jump_full(args, nargsf);
                    hits[src]++;
                } else if (UNLIKELY(dest < src) && sess.probe_after && !ex->probe) {
                    if (ex->back_jumps + 1 >= sess.probe_after)
                        return jump_full(args, nargsf); /* (it arms the probe) */
                    ex->back_jumps++;
                }
                put_rec(b->pos++, oc_fast_now(), ex->id, OC_INFO(K_JUMP, (src << OC_NEAR_BITS) | dest));
                RETURN_NONE;
            }
        }
    }
    return jump_full(args, nargsf);
}

static inline int is_cfunc(PyObject *callable) {
    return PyCFunction_Check(callable) || Py_IS_TYPE(callable, &PyMethodDescr_Type);
}

/* one K_CCALL or K_CRETURN record of C function `id`; its time stamp (0: not recorded) */
static inline uint64_t record_cfunc_id(uint32_t id, uint32_t kind) {
    if (UNLIKELY(id == UINT32_MAX))
        return 0;
    oc_rec *r = reserve();
    if (UNLIKELY(r == NULL))
        return 0;
    uint64_t ts = oc_now();
    put_rec(r, ts, id, OC_INFO(kind, frame_depth()));
    return ts;
}

/* The C call site rule: a site that reached the threshold stays instrumented if its calls are expensive
 * next to what recording one costs -- timed calls (a C_RETURN right after its CALL, nothing recorded
 * between; each counted at most OC_CCALL_CAP times the limit) averaging sess.ccall_keep_ticks or more, or
 * mostly untimed ones (they ran other recorded calls: a key function, a callback), or calls of several C functions (a dispatch: de-instrumented, the others'
 * calls would be lost unmarked, only the one at hand is known) -- and is judged again after as many
 * calls; otherwise it answers DISABLE from now on (its later calls' time is its caller's self time,
 * which the sampling windows estimate).  1: keep it. */
static __attribute__((noinline)) int ccall_keep(oc_codeextra *ex, uint32_t unit) {
    uint64_t *t = ex->call_ticks + 3 * (size_t)unit;
    uint64_t calls = ex->call_hits[unit] - 1; /* (the hit that passed the threshold is not in t) */
    int keep = t[2] == UINT64_MAX || t[1] * 2 < calls || t[0] >= t[1] * oc_ccall_keep_ticks();
    if (keep) {
        ex->call_hits[unit] = 1;
        t[0] = t[1] = 0;
    }
    return keep;
}

/* a C call site past its threshold: recorded (marked as sampled) only inside a sampling window */
static __attribute__((noinline)) PyObject *call_sampled(PyObject *callable) {
    if (LIKELY(!oc_win_end)) {
        oc_sampling_kick();
        RETURN_DISABLE;
    }
    uint64_t now = oc_now();
    if (!oc_in_window(now))
        RETURN_DISABLE;
    uint32_t id = oc_cfunc_id(callable);
    if (id != UINT32_MAX)
        record_sampled(id, OC_INFO(K_CCALL, frame_depth()), now);
    RETURN_NONE;
}

/* A C call site is de-instrumented (once): the C function's calls are partial from now on (its entry's
 * flag), and an OC_MARK_CUT record tells the renderer which frame's self time holds its later calls. */
static __attribute__((noinline)) void ccall_cut(PyObject *callable) {
    oc_cfunc_mark_cut(callable);
    uint32_t id = oc_cfunc_id(callable);
    oc_rec *r = id != UINT32_MAX ? reserve() : NULL;
    if (r)
        put_rec(r, oc_now(), id, OC_INFO(K_MARK, OC_MARK_CUT));
}

/* CALL: (code, offset, callable, arg0).  Only C functions are recorded (a Python callee has its own
 * PY_START): a call site whose callable is anything else answers DISABLE at once, and a C call site
 * after `threshold` hits, like a jump. */
static PyObject *cb_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw) {
    (void)self, (void)kw;
    if (UNLIKELY(PyVectorcall_NARGS(nargsf) < 3))
        RETURN_NONE;
    oc_codeextra *ex = lookup(args[0]);
    if (UNLIKELY(!ex))
        RETURN_NONE;
    if (UNLIKELY(ex->flags & CF_EXCLUDED))
        RETURN_DISABLE;
    PyObject *callable = args[2];
    if (!is_cfunc(callable))
        RETURN_DISABLE;
    uint32_t off = small_int(args[1]) >> 1;
    int verdict = site_verdict(ex, 2, off, sess.threshold);
    if (UNLIKELY(verdict != SITE_RECORD)) {
        if (verdict == SITE_SKIP)
            RETURN_NONE;
        /* (near-zero mode: every site goes, as function starts do -- a kept site's calls would be
         * recorded under unrecorded frames, which the sampling estimates cannot place) */
        if (sess.fn_threshold || ex->call_hits[off] != sess.threshold + 1 || !ccall_keep(ex, off)) {
            if (ex->call_hits[off] == sess.threshold + 1)
                ccall_cut(callable);
            ex->sites_disabled = 1;
            return call_sampled(callable);
        }
    }
    uint32_t id = oc_cfunc_id(callable);
    uint64_t ts = record_cfunc_id(id, K_CCALL);
    if (sess.threshold && ts && off < ex->nunits && ex->call_ticks) { /* (its C_RETURN times it) */
        oc_tls.ccall_ex = ex;
        oc_tls.ccall_unit = off;
        oc_tls.ccall_ts = ts;
        uint64_t *who = &ex->call_ticks[3 * (size_t)off + 2];
        if (UNLIKELY(*who != (uint64_t)id + 1))
            *who = *who ? UINT64_MAX : (uint64_t)id + 1;
    }
    RETURN_NONE;
}

/* C_RETURN and C_RAISE: (code, offset, callable, arg0); delivered only where CALL is armed.  They
 * cannot answer DISABLE (a ValueError in the program). */
static PyObject *cb_creturn(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw) {
    (void)self, (void)kw;
    if (UNLIKELY(PyVectorcall_NARGS(nargsf) < 3))
        RETURN_NONE;
    oc_codeextra *ex = lookup(args[0]);
    if (UNLIKELY(!ex || (ex->flags & CF_EXCLUDED)))
        RETURN_NONE;
    if (!is_cfunc(args[2]))
        RETURN_NONE;
    uint64_t ts = record_cfunc_id(oc_cfunc_id(args[2]), K_CRETURN);
    if (oc_tls.ccall_ex == ex) { /* the return of the last recorded C call, if at its site: timed */
        uint32_t unit = small_int(args[1]) >> 1;
        if (ts && unit == oc_tls.ccall_unit && unit < ex->nunits && ex->call_ticks) {
            uint64_t dt = ts - oc_tls.ccall_ts, cap = atomic_load_explicit(&sess.ccall_cap_ticks, memory_order_relaxed);
            ex->call_ticks[3 * (size_t)unit] += dt < cap ? dt : cap;
            ex->call_ticks[3 * (size_t)unit + 1]++;
        }
    }
    oc_tls.ccall_ex = NULL;
    RETURN_NONE;
}

/* INSTRUCTION: (code, offset) */
static PyObject *cb_insn(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw) {
    (void)self, (void)nargsf, (void)kw;
    oc_codeextra *ex = lookup(args[0]);
    if (UNLIKELY(!ex))
        RETURN_NONE;
    if (UNLIKELY(ex->flags & CF_EXCLUDED))
        RETURN_DISABLE;
    if (UNLIKELY(ex->insn_done))
        RETURN_DISABLE;
    uint32_t off = (small_int(args[1]) >> 1) & (OC_INSN_END - 1);
    int verdict = site_verdict(ex, 1, off, sess.insn_limit);
    if (UNLIKELY(verdict != SITE_RECORD)) {
        if (verdict != SITE_DISABLE)
            RETURN_NONE;
        /* The first site past the threshold ends instruction recording for the whole code object: a
         * recorded instruction followed by unrecorded ones would be charged with their time.  The end
         * is recorded, so the instruction before it gets its own time. */
        ex->insn_done = 1;
        off |= OC_INSN_END;
    }
    oc_rec *r = reserve();
    if (LIKELY(r != NULL))
        put_rec(r, oc_now(), ex->id, OC_INFO(K_INSN, off));
    if (UNLIKELY(off & OC_INSN_END))
        RETURN_DISABLE;
    RETURN_NONE;
}

static PyObject *make_cb(vectorcallfunc f, const char *name) {
    oc_cb *cb = PyObject_New(oc_cb, &CallbackType);
    if (!cb)
        return NULL;
    cb->vc = f;
    cb->name = name;
    return (PyObject *)cb;
}

/* {event name: callback}; the Python layer registers them with sys.monitoring and sets the mode's
 * events (INSTRUCTION: every instruction in precise mode; in adaptive mode only probes' local events). */
PyObject *oc_make_callbacks(int c_functions) {
    static const struct {
        const char *name;
        vectorcallfunc f;
    } table[] = {
        {"PY_START", (vectorcallfunc)cb_start}, {"PY_RESUME", (vectorcallfunc)cb_resume},
        {"PY_THROW", (vectorcallfunc)cb_throw}, {"PY_RETURN", (vectorcallfunc)cb_return},
        {"PY_YIELD", (vectorcallfunc)cb_yield}, {"PY_UNWIND", (vectorcallfunc)cb_unwind},
        {"JUMP", (vectorcallfunc)cb_jump},      {"BRANCH", (vectorcallfunc)cb_jump},
        {"INSTRUCTION", (vectorcallfunc)cb_insn}, {"CALL", (vectorcallfunc)cb_call},
        {"C_RETURN", (vectorcallfunc)cb_creturn}, {"C_RAISE", (vectorcallfunc)cb_creturn},
    };
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (!c_functions && (strcmp(table[i].name, "CALL") == 0 || strncmp(table[i].name, "C_", 2) == 0))
            continue;
        PyObject *cb = make_cb(table[i].f, table[i].name);
        if (!cb || PyDict_SetItemString(d, table[i].name, cb) < 0) {
            Py_XDECREF(cb);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(cb);
    }
    return d;
}

int oc_monitor_init(PyObject *module) {
    if (PyType_Ready(&CallbackType) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "Callback", (PyObject *)&CallbackType) < 0)
        return -1;
    return 0;
}
