/* results.c -- the render's results as Python objects, for the report: the binding's side of the renderer
 * (which has no Python API: render.h).  The statistics (stats.c: `_ocular._report_data`), the sampling
 * windows' estimates (attrib.c) and the call tree (sink_tree.c: `_ocular._calltree`), read through their
 * tables and getters after the render has finished, with the GIL held.
 */
#include "ocular.h"
#include "stats.h"
#include <string.h>

/* ---- the call tree (sink_tree.c) ---- */

static PyObject *str_or_none(const char *s) {
    if (!s)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

/* {"nodes": [(parent, code, calls, total_ns, self_ns)], "threads": [(tid, name, root, first_ns, last_ns)],
 *  "codes": [(qualname, filename, firstlineno) or None by code id, up to the highest id used]};
 * parent and code -1 for a root */
PyObject *oc_tree_export(void) {
    oc_tree_view T;
    oc_tree_view_get(&T);
    if (T.failed) {
        PyErr_SetString(PyExc_MemoryError, "ocular: out of memory building the call tree");
        return NULL;
    }
    uint32_t ncodes = 0; /* the code table up to the highest id used */
    for (uint32_t i = 0; i < T.n; i++)
        if (T.nodes[i].code != OC_TREE_ROOT && T.nodes[i].code >= ncodes)
            ncodes = T.nodes[i].code + 1;
    if (ncodes > rmeta.ncodes)
        ncodes = rmeta.ncodes;
    PyObject *nodes = PyList_New(T.n), *threads = PyList_New(T.nthreads), *codes = PyList_New(ncodes);
    PyObject *d = NULL;
    if (!nodes || !threads || !codes)
        goto fail;
    for (uint32_t i = 0; i < T.n; i++) {
        const oc_tree_node *nd = &T.nodes[i];
        PyObject *tup = Py_BuildValue("(llKKK)", nd->parent == OC_TREE_ROOT ? -1L : (long)nd->parent,
                                      nd->code == OC_TREE_ROOT ? -1L : (long)nd->code, (unsigned long long)nd->calls,
                                      (unsigned long long)nd->total, (unsigned long long)nd->self);
        if (!tup)
            goto fail;
        PyList_SET_ITEM(nodes, i, tup);
    }
    for (uint32_t i = 0; i < T.nthreads; i++) {
        const oc_tree_thread *t = &T.threads[i];
        PyObject *name = i == T.merged ? PyUnicode_FromFormat("%u threads (merged: past the first %d)", T.nmerged,
                                                              OC_TREE_THREADS)
                                       : str_or_none(oc_tree_thread_name(t->tid));
        if (!name)
            goto fail;
        PyObject *tup = Py_BuildValue("(lNlKK)", t->tid, name, (long)t->root, (unsigned long long)t->first_ns,
                                      (unsigned long long)t->last_ns);
        if (!tup)
            goto fail;
        PyList_SET_ITEM(threads, i, tup);
    }
    for (uint32_t i = 0; i < ncodes; i++) {
        oc_codeent *e = &rmeta.codes[i];
        PyObject *v;
        if (!e->qualname_raw) {
            v = Py_None;
            Py_INCREF(v);
        } else {
            PyObject *q = str_or_none(e->qualname_raw), *f = q ? str_or_none(e->filename_raw) : NULL;
            v = f ? Py_BuildValue("(NNi)", q, f, e->firstlineno) : NULL;
            if (!f)
                Py_XDECREF(q);
            if (!v)
                goto fail;
        }
        PyList_SET_ITEM(codes, i, v);
    }
    d = Py_BuildValue("{sOsOsO}", "nodes", nodes, "threads", threads, "codes", codes);
fail:
    Py_XDECREF(nodes);
    Py_XDECREF(threads);
    Py_XDECREF(codes);
    return d;
}

/* ---- estimates from the sampling windows (attrib.c) ---- */

/* A dict of `n` items: keys[i] -> vals[i] (new references, taken; NULL if one could not be made, and then
 * NULL).  The keys are interned once per call site in `cache` (Py_BuildValue's "{s:...}" made, hashed and
 * freed a fresh str per key per function: 9,000 instructions a function, most of the export; the module
 * is single-phase, one interpreter, so the cached keys are this interpreter's), and each dict is a copy of
 * the call site's template, `*tmpl` (every key, values None), whose values are then replaced: inserting 23
 * keys into an empty dict resized it three times (the export of deltablue's 1,377 functions: 25.0 M -> 22.9 M
 * instructions). */
static PyObject *dict_of(PyObject **cache, PyObject **tmpl, const char *const *keys, PyObject **vals, int n) {
    PyObject *d = NULL;
    for (int i = 0; i < n; i++)
        if (!vals[i] || (!cache[i] && !(cache[i] = PyUnicode_InternFromString(keys[i]))))
            goto done;
    if (!*tmpl) {
        PyObject *t = PyDict_New();
        for (int i = 0; t && i < n; i++)
            if (PyDict_SetItem(t, cache[i], Py_None) < 0)
                Py_CLEAR(t);
        if (!t)
            goto done;
        *tmpl = t;
    }
    d = PyDict_Copy(*tmpl);
    for (int i = 0; d && i < n; i++)
        if (PyDict_SetItem(d, cache[i], vals[i]) < 0)
            Py_CLEAR(d);
done:
    for (int i = 0; i < n; i++)
        Py_XDECREF(vals[i]);
    return d;
}

static PyObject *name_of(uint32_t id) {
    oc_codeent *e = oc_rcode(id);
    const char *q = e->qualname_raw ? e->qualname_raw : "?";
    return PyUnicode_DecodeUTF8(q, (Py_ssize_t)strlen(q), "replace");
}

static const char *const EST_KEYS[] = {"calls", "self", "incl", "removed", "callees", "window_self", "outside_self"};
static PyObject *est_keys[7], *est_tmpl, *est_key;
static const char *const CALLEE_KEYS[] = {"name", "incl", "self", "calls", "window_calls", "window_incl"};
static PyObject *callee_keys[6], *callee_tmpl;

/* adds to one function's row "estimate": None, or {"calls", "self", "incl": estimated extra calls and ticks
 * as a de-instrumented callee, outside windows; "removed": ticks taken out of its own self time;
 * "callees": [{"name", "incl", "self", "calls", ...}] the estimated share of each hidden function it calls
 * directly} (attrib.c) */
int oc_attr_export(PyObject *func, uint32_t id) {
    oc_attr_est est;
    if (!est_key && !(est_key = PyUnicode_InternFromString("estimate")))
        return -1;
    if (!oc_attr_estimate(id, &est))
        return PyDict_SetItem(func, est_key, Py_None);
    oc_attr_callee_est *ce = est.npairs ? malloc(est.npairs * sizeof *ce) : NULL;
    if (est.npairs && !ce) {
        PyErr_NoMemory();
        return -1;
    }
    uint32_t n = ce ? oc_attr_callees(id, ce, est.npairs) : 0;
    PyObject *callees = PyList_New(0);
    for (uint32_t i = 0; callees && i < n; i++) {
        PyObject *cv[] = {name_of(ce[i].code), PyFloat_FromDouble(ce[i].incl), PyFloat_FromDouble(ce[i].self),
                          PyFloat_FromDouble(ce[i].calls), PyLong_FromUnsignedLongLong(ce[i].window_calls),
                          PyLong_FromUnsignedLongLong(ce[i].window_incl)};
        PyObject *d = dict_of(callee_keys, &callee_tmpl, CALLEE_KEYS, cv, 6);
        if (!d || PyList_Append(callees, d) < 0)
            Py_CLEAR(callees);
        Py_XDECREF(d);
    }
    free(ce);
    if (!callees)
        return -1;
    PyObject *ev[] = {PyFloat_FromDouble(est.calls), PyFloat_FromDouble(est.self), PyFloat_FromDouble(est.incl),
                      PyFloat_FromDouble(est.removed), callees, PyLong_FromUnsignedLongLong(est.window_self),
                      PyLong_FromUnsignedLongLong(est.outside_self)};
    PyObject *e = dict_of(est_keys, &est_tmpl, EST_KEYS, ev, 7);
    if (!e)
        return -1;
    int rc = PyDict_SetItem(func, est_key, e);
    Py_DECREF(e);
    return rc;
}

/* {"status": "on"|"off", "windows", "window_ticks", "skipped", "other_tool", "incomplete", "run_delay"} */
PyObject *oc_attr_summary(void) {
    oc_attr_sum m;
    oc_attr_summary_get(&m);
    /* (read from the recording: a damaged one may hold any bytes there) */
    PyObject *other = PyUnicode_DecodeUTF8(m.other, (Py_ssize_t)strlen(m.other), "replace");
    if (!other)
        return NULL;
    PyObject *rd = m.rd_inside < 0 ? Py_NewRef(Py_None)
                                   : Py_BuildValue("{s:d,s:d,s:d,s:I,s:I}", "inside", m.rd_inside, "outside",
                                                   m.rd_outside, "calls_factor", m.calls_factor, "inside_stretches",
                                                   m.rd_inside_n, "outside_stretches", m.rd_outside_n);
    if (!rd) {
        Py_DECREF(other);
        return NULL;
    }
    return Py_BuildValue("{s:s,s:I,s:K,s:I,s:N,s:O,s:N}", "status", m.on ? "on" : "off", "windows", m.windows,
                         "window_ticks", (unsigned long long)m.window_ticks, "skipped", m.skipped, "other_tool",
                         other, "incomplete", m.failed ? Py_True : Py_False, "run_delay", rd);
}

/* ---- the statistics (stats.c) ---- */

/* [{"task": id, "begin_ns", "ticks", "stack": [(qualname, filename, firstlineno), ...]}], GIL held */
static PyObject *export_stalls(void) {
    PyObject *out = PyList_New(0);
    for (uint32_t i = 0; out && i < oc_stats_nstalls; i++) {
        oc_stall *s = &oc_stats_stalls[i];
        PyObject *stack = PyList_New(0);
        for (uint32_t k = 0; stack && k < s->n; k++) {
            if (s->codes[k] == UINT32_MAX || s->codes[k] >= rmeta.ncodes)
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

#define ULL(v) PyLong_FromUnsignedLongLong((unsigned long long)(v))

/* The statistics are data without cycles (numbers, strings, code objects, and lists, tuples and dicts of
 * them), kept by the report that last_report() returns until the process ends: the cyclic collector need not
 * walk them.  A function's containers are taken off its lists once built (as CPython itself leaves a dict or
 * tuple of atomic values untracked), which took ~13 M instructions of collections at exit and after the
 * report off deltablue's stop (1,377 functions: ~6,000 containers). */
static void untrack(PyObject *o) {
    if (o && PyObject_IS_GC(o) && PyObject_GC_IsTracked(o))
        PyObject_GC_UnTrack(o);
}

static const char *const LOOP_KEYS[] = {"src", "dest", "iterations", "jumps", "timed_iterations", "cycles",
                                        "self_cycles", "instructions"};
static PyObject *loop_keys[8], *loop_tmpl;
static const char *const FUNC_KEYS[] = {"untraced_callees", "code", "bytecode", "lines", "id", "name", "file",
                                        "firstlineno", "calls", "segments", "truncated", "incl", "self",
                                        "looped_self", "mean", "stddev", "min", "max", "deinstrumented", "enters",
                                        "loops", "units", "callers"};
static PyObject *func_keys[23], *func_tmpl;
_Static_assert(sizeof LOOP_KEYS / sizeof *LOOP_KEYS == sizeof loop_keys / sizeof *loop_keys, "loop keys");
_Static_assert(sizeof FUNC_KEYS / sizeof *FUNC_KEYS == sizeof func_keys / sizeof *func_keys, "function keys");

/* an asyncio task's entry: "coroutine" (its steps' coroutine's qualname) and "tasks" (the steps that
 * started it) */
static int export_task(PyObject *d, const oc_code_stat *c, uint32_t id) {
    oc_codeent *e = c->task_root - 1 < rmeta.ncodes ? oc_rcode(c->task_root - 1) : NULL;
    const char *q = e && e->qualname_raw ? e->qualname_raw : "?";
    static const oc_task_life none;
    const oc_task_life *l = id < oc_stats_nlives ? &oc_stats_lives[id] : &none;
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
    uint32_t n = oc_ncs < rmeta.ncodes ? oc_ncs : rmeta.ncodes, total = 0;
    oc_attr_est est;
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
            if (rmeta.codes[id].filename_raw && !strcmp(rmeta.codes[id].filename_raw, "<asyncio task>"))
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
        if (!c->segments && !c->truncated && !c->nloops && !c->unit_cycles && !oc_attr_estimate(id, &est))
            continue; /* (estimates only: windows saw only ends of its calls, their time is its) */
        if (!rmeta.codes[id].qualname_raw || (keep && !keep[id]))
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
            PyObject *t = dict_of(loop_keys, &loop_tmpl, LOOP_KEYS, lv, 8);
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
                untrack(v);
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
        PyObject *code_obj = with_code_objects && id < sess.ncodes ? oc_code_object(oc_code_entry(id)) : NULL;
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
        PyObject *d = dict_of(func_keys, &func_tmpl, FUNC_KEYS, fv, 23);
        if (d && c->task_root && export_task(d, c, id) < 0)
            Py_CLEAR(d);
        if (!d || oc_attr_export(d, id) < 0 || PyList_Append(funcs, d) < 0) {
            Py_XDECREF(d);
            goto fail;
        }
        untrack(loops); /* (borrowed: d holds them) */
        untrack(unitd);
        untrack(untraced);
        untrack(callers);
        untrack(d);
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
                         (unsigned long long)rmeta.events, "dropped", (unsigned long long)rmeta.dropped, "wall_ns", rmeta.wall_ns,
                         "python_hex", rmeta.python_hex, "cache_entries", (const char *)rmeta.cache_entries,
                         (Py_ssize_t)sizeof rmeta.cache_entries, "functions", funcs, "overhead_ticks",
                         (unsigned long long)oc_stats_overhead(), "ns_per_tick", rmeta.ns_per_tick, "precise",
                         rmeta.precise, "stats_incomplete", oc_stats_failed ? Py_True : Py_False, "threshold", rmeta.threshold,
                         "near_zero", rmeta.near_zero, "functions_total", total, "sampling", oc_attr_summary(), "adaptive",
                         rmeta.adaptive ? PyBytes_FromStringAndSize(rmeta.adaptive, rmeta.adaptive_len) : Py_NewRef(Py_None),
                         "own_cost", own, "stalls", st, "stalls_more", (unsigned long long)oc_stats_stalls_more,
                         "stall_ms", rmeta.stall_ms ? rmeta.stall_ms : 100u);
fail:
    free(keep);
    Py_DECREF(funcs);
    return NULL;
}
