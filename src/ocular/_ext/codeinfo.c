/* codeinfo.c -- per-code metadata: the struct kept for each code object (in the code map, codemap.c) with the filter
 * verdict, the session id and the hit counters, and the session's code table that the recorder thread
 * writes into the recording without the GIL (names, a copy of the bytecode, the line table).
 *
 * Tracing never keeps a code object alive: the table holds a borrowed pointer (for the report's
 * disassembly at stop) that the code watcher clears when the code object dies, after copying its extra's
 * state into the table entry (the watcher runs with the GIL) and before the extra goes.  Excluded code
 * objects stay in the code map, to re-arm them at stop.  An entry's names, bytecode and line table are freed once the
 * recorder has written them (but for the flight recorder, which writes them again at every dump); the
 * renderer reads them back from the recording.
 *
 * Registration is the slow path: it runs once per code object per session, with the GIL held.
 * The table is paged: pages never move once allocated, so the writer can read an entry while the
 * program registers new ones (publication happens through the chunk hand-off, which takes a lock).
 */
#include "ocular.h"
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

static void free_extra(void *p) {
    oc_codeextra *ex = p;
    if (!ex)
        return;
    if (ex->gen == sess.gen && ex->id < sess.ncodes) { /* dying during (or after) the session that knew it */
        oc_codeent *e = oc_code_entry(ex->id);
        if (e->extra == ex) {
            e->flags = ex->flags;
            e->enters = ex->enters;
            e->extra = NULL;
            e->code_obj = NULL;
        }
    }
    free(ex->edge_hits);
    free(ex->insn_hits);
    free(ex->call_hits);
    free(ex->call_ticks);
    free(ex);
}

int oc_codeinfo_init(void) {
    return oc_codemap_init(&sess.codes, free_extra);
}


/* NUL-terminated copy of n bytes (the raw names the Perfetto sink writes). */
char *oc_dup_raw(const char *s, Py_ssize_t n) {
    char *out = malloc((size_t)n + 1);
    if (out) {
        memcpy(out, s, (size_t)n);
        out[n] = 0;
    }
    return out;
}

/* UTF-8 copy of a str that never fails on lone surrogates (non-UTF-8 file names). */
static PyObject *utf8_bytes(PyObject *s) {
    if (!s || !PyUnicode_Check(s))
        return PyBytes_FromString("?");
    return PyUnicode_AsEncodedString(s, "utf-8", "backslashreplace");
}

static int pattern_match(const char *pat, const char *name) {
    if (strpbrk(pat, "*?["))
        return fnmatch(pat, name, 0) == 0;
    return strstr(name, pat) != NULL;
}

static int is_excluded(const char *filename) {
    if (sess.calibrating) /* (owncost.c's functions, whatever the filters say) */
        return 0;
    if (sess.own_dir && strncmp(filename, sess.own_dir, strlen(sess.own_dir)) == 0)
        return 1;
    if (sess.include_only && sess.include_only[0]) {
        int any = 0;
        for (char **p = sess.include_only; *p; p++)
            if (pattern_match(*p, filename)) {
                any = 1;
                break;
            }
        if (!any)
            return 1;
    }
    if (sess.exclude)
        for (char **p = sess.exclude; *p; p++)
            if (pattern_match(*p, filename))
                return 1;
    return 0;
}

uint32_t *oc_code_counters(oc_codeextra *ex, int which) {
    uint32_t **slot = which == 2 ? &ex->call_hits : which ? &ex->insn_hits : &ex->edge_hits;
    if (!*slot && which == 2) { /* a C call site's times come with its counts */
        ex->call_ticks = calloc(3 * ((size_t)ex->nunits + 1), sizeof(uint64_t));
        if (!ex->call_ticks)
            return NULL;
    }
    if (!*slot)
        *slot = calloc(ex->nunits + 1, sizeof(uint32_t));
    return *slot;
}

/* The location table's varints (6 bits a byte, bit 6: more follow) at t[*i..n); past the end, *i > n. */
static uint32_t lt_varint(const uint8_t *t, size_t n, size_t *i) {
    uint32_t v = 0;
    for (unsigned shift = 0; *i < n && shift < 32; shift += 6) {
        uint8_t b = t[(*i)++];
        v |= (uint32_t)(b & 63) << shift;
        if (!(b & 64))
            return v;
    }
    *i = n + 1;
    return 0;
}

static int32_t lt_svarint(const uint8_t *t, size_t n, size_t *i) {
    uint32_t v = lt_varint(t, n, i);
    return (v & 1) ? -(int32_t)(v >> 1) : (int32_t)(v >> 1); /* (v >> 1 < 2^31) */
}

/* Line of every code unit read straight from co_linetable, the location table every CPython from 3.11
 * writes (Objects/locations.md): entries of 1-8 code units, each a header byte (bit 7 set, a 4-bit code,
 * the length - 1) and its line delta and columns.  Returns -1 if the table does not describe exactly
 * nunits units (another format): co_lines() is asked then.  A 3,000-line function's table is read in
 * ~60K instructions here, against ~6M through co_lines()'s tuples, which its first call paid. */
static int lines_from_table(PyCodeObject *co, uint32_t nunits, int32_t *lines) {
    PyObject *tab = PyObject_GetAttrString((PyObject *)co, "co_linetable");
    if (!tab || !PyBytes_Check(tab)) {
        Py_XDECREF(tab);
        PyErr_Clear();
        return -1;
    }
    const uint8_t *t = (const uint8_t *)PyBytes_AS_STRING(tab);
    size_t n = (size_t)PyBytes_GET_SIZE(tab), i = 0;
    int32_t line = co->co_firstlineno;
    uint32_t u = 0;
    int ok = 1;
    while (i < n) {
        uint8_t h = t[i++];
        unsigned code = (h >> 3) & 15, len = (h & 7) + 1u;
        int32_t ln = line;
        if (!(h & 128)) {
            ok = 0;
            break;
        }
        if (code == 15) { /* no location */
            ln = -1;
        } else if (code == 14) { /* long form: line delta, end line delta, column, end column */
            line = (int32_t)((uint32_t)line + (uint32_t)lt_svarint(t, n, &i)); /* (no signed overflow) */
            (void)lt_varint(t, n, &i);
            (void)lt_varint(t, n, &i);
            (void)lt_varint(t, n, &i);
            ln = line;
        } else if (code == 13) { /* no columns: line delta */
            line = (int32_t)((uint32_t)line + (uint32_t)lt_svarint(t, n, &i));
            ln = line;
        } else if (code >= 10) { /* one line: delta code - 10, two column bytes */
            line += (int32_t)code - 10;
            i += 2;
            ln = line;
        } else { /* short form: same line, one column byte */
            i += 1;
        }
        if (i > n || u + len > nunits) {
            ok = 0;
            break;
        }
        for (unsigned k = 0; k < len; k++)
            lines[u++] = ln;
    }
    Py_DECREF(tab);
    return ok && u == nunits ? 0 : -1;
}

/* Line of every code unit (-1: none; one more entry, -1, past the end): from the location table, or from
 * co_lines() (the same table, as dis reads it) if that cannot be read (*from_table says which). */
int32_t *oc_line_table(PyCodeObject *co, uint32_t nunits, int *from_table) {
    int32_t *lines = malloc(((size_t)nunits + 1) * sizeof(int32_t));
    if (!lines)
        return NULL;
    lines[nunits] = -1;
    *from_table = lines_from_table(co, nunits, lines) == 0;
    if (*from_table)
        return lines;
    for (uint32_t i = 0; i <= nunits; i++)
        lines[i] = -1;
    PyObject *it = PyObject_CallMethod((PyObject *)co, "co_lines", NULL);
    PyObject *iter = it ? PyObject_GetIter(it) : NULL;
    Py_XDECREF(it);
    if (!iter) {
        PyErr_Clear();
        return lines;
    }
    PyObject *item;
    while ((item = PyIter_Next(iter))) {
        long start, end;
        PyObject *line;
        if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 3) {
            start = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
            end = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
            line = PyTuple_GET_ITEM(item, 2);
            long ln = (line == Py_None) ? -1 : PyLong_AsLong(line);
            for (long u = start / 2; u < end / 2 && u < (long)nunits; u++)
                if (u >= 0)
                    lines[u] = (int32_t)ln;
        }
        Py_DECREF(item);
    }
    Py_DECREF(iter);
    PyErr_Clear();
    return lines;
}

/* Record the first internal failure; stop_tracing() reports it after saving the trace. */
void oc_internal_error(const char *msg) {
    if (!sess.internal_error) {
        sess.internal_error = 1;
        snprintf(sess.internal_msg, sizeof sess.internal_msg, "%s", msg);
    }
}

/* ---- C functions: CALL is a local event ----
 * CALL (with the C_RETURN and C_RAISE it brings) is set on each code object of the session as it
 * registers -- at its first event, a PY_START or PY_RESUME before any of its calls run -- rather than
 * globally, so that a code object can be left out.  One is: a code object that names sys.setprofile
 * or sys._setprofileallthreads (`sys.setprofile(f)`, threading's `_sys.setprofile(_profile_hook)`).
 * CPython runs a setprofile user on sys.monitoring, and it delivers C_RETURN to every tool armed at a
 * call site when the call returns, when the call was dispatched as an instrumented CALL (because any
 * tool monitored CALL there).  The call that installs the profile function is such a call where we
 * armed CALL: the profile function then gets a c_return for sys.setprofile with no c_call before it,
 * which the pure-Python `profile` module stops on ("Bad return").  Switching our events off when the
 * `sys.setprofile` audit event fires comes too late: the call is already dispatched.  So that code's
 * calls are not armed (its own C calls are not recorded; those of the functions it calls are).
 * Excluded code objects (Ocular's own, filters) are never armed: no CALL events reach us from them. */
static int names_setprofile(PyCodeObject *co) {
    PyObject *names = co->co_names;
    if (!names || !PyTuple_Check(names))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *n = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_Check(n))
            continue;
        Py_ssize_t len = PyUnicode_GET_LENGTH(n);
        if ((len == 10 && PyUnicode_CompareWithASCIIString(n, "setprofile") == 0) ||
            (len == 21 && PyUnicode_CompareWithASCIIString(n, "_setprofileallthreads") == 0))
            return 1;
    }
    return 0;
}

unsigned long oc_local_events(const oc_codeextra *ex) {
    return (ex->probe == 1 ? sess.insn_event : 0) | (ex->calls == 1 ? sess.call_event : 0);
}

/* Arm CALL on a registered code object of this session (once; the caller keeps any exception in flight). */
static void arm_calls(oc_codeextra *ex) {
    if (!sess.arm_calls || ex->calls || (ex->flags & CF_EXCLUDED))
        return;
    if (names_setprofile((PyCodeObject *)ex->code)) {
        ex->calls = 2;
        return;
    }
    ex->calls = 1;
    PyObject *r = PyObject_CallFunction(sess.arm_calls, "iOk", sess.tool_id, ex->code, oc_local_events(ex));
    if (r) {
        Py_DECREF(r);
    } else {
        ex->calls = 0; /* (a code object sys.monitoring refuses: its C calls are not recorded) */
        PyErr_Clear();
    }
}

/* asyncio's BaseEventLoop.call_soon (asyncio/base_events.py), through which asyncio schedules every task's
 * steps: its creation's and its wake-ups' (asyncio.c, oc_task_wake) */
static int is_call_soon(PyCodeObject *co) {
    if (!PyUnicode_Check(co->co_name) || PyUnicode_CompareWithASCIIString(co->co_name, "call_soon") != 0 ||
        !PyUnicode_Check(co->co_qualname) ||
        PyUnicode_CompareWithASCIIString(co->co_qualname, "BaseEventLoop.call_soon") != 0)
        return 0;
    Py_ssize_t n;
    const char *f = PyUnicode_Check(co->co_filename) ? PyUnicode_AsUTF8AndSize(co->co_filename, &n) : NULL;
    if (!f) {
        PyErr_Clear();
        return 0;
    }
    static const char tail[] = "base_events.py", dir[] = "asyncio";
    size_t t = sizeof tail - 1, d = sizeof dir - 1;
    return (size_t)n > t + d + 1 && memcmp(f + n - t, tail, t) == 0 && memcmp(f + n - t - d - 1, dir, d) == 0;
}

oc_codeextra *oc_code_register(PyCodeObject *co) {
    oc_codeextra *ex = oc_codemap_get(&sess.codes, (PyObject *)co);
    if (ex && ex->gen == sess.gen)
        return ex;
    if (!ex) {
        ex = calloc(1, sizeof *ex);
        if (!ex) {
            oc_internal_error("out of memory registering a code object");
            return NULL;
        }
        if (oc_codemap_put(&sess.codes, (PyObject *)co, ex) < 0) {
            free(ex);
            oc_internal_error("out of memory registering a code object");
            return NULL;
        }
    }
    free(ex->edge_hits);
    free(ex->insn_hits);
    free(ex->call_hits);
    free(ex->call_ticks);
    memset(ex, 0, sizeof *ex);
    ex->gen = sess.gen;
    ex->id = UINT32_MAX;
    ex->code = (PyObject *)co;

    PyObject *fname = utf8_bytes(co->co_filename);
    if (!fname) {
        PyErr_Clear();
        ex->flags = CF_EXCLUDED;
        oc_internal_error("could not encode a file name");
        return ex;
    }
    /* filters see the file name's original bytes (surrogateescape), like the patterns they are
     * compared with; the trace shows it with backslash escapes */
    PyObject *mname = PyUnicode_Check(co->co_filename)
                          ? PyUnicode_AsEncodedString(co->co_filename, "utf-8", "surrogateescape")
                          : NULL;
    if (!mname)
        PyErr_Clear();
    const char *match_name = mname ? PyBytes_AS_STRING(mname) : PyBytes_AS_STRING(fname);
    if (is_excluded(match_name)) {
        ex->flags = CF_EXCLUDED; /* found at stop in the code map, to re-arm it */
        Py_XDECREF(mname);
        Py_DECREF(fname);
        return ex;
    }
    Py_XDECREF(mname);
    if (sess.ncodes >= (uint32_t)OC_MAX_PAGES * OC_PAGE_SIZE) {
        ex->flags = CF_EXCLUDED;
        Py_DECREF(fname);
        oc_internal_error("more than 4 million code objects: the rest are not traced");
        return ex;
    }
    uint32_t id = sess.ncodes;
    uint32_t page = id >> OC_PAGE_BITS;
    if (!sess.pages[page]) {
        sess.pages[page] = calloc(OC_PAGE_SIZE, sizeof(oc_codeent));
        if (!sess.pages[page]) {
            Py_DECREF(fname);
            ex->flags = CF_EXCLUDED;
            oc_internal_error("out of memory growing the code table");
            return ex;
        }
    }
    oc_codeent *e = oc_code_entry(id);
    PyObject *qn = utf8_bytes(co->co_qualname);
    PyObject *bc = PyCode_GetCode(co);
    if (!qn || !bc || !PyBytes_Check(bc)) {
        PyErr_Clear();
        Py_XDECREF(qn);
        Py_XDECREF(bc);
        Py_DECREF(fname);
        ex->flags = CF_EXCLUDED;
        oc_internal_error("could not read a code object's name or bytecode");
        return ex;
    }
    e->qualname_raw = oc_dup_raw(PyBytes_AS_STRING(qn), PyBytes_GET_SIZE(qn));
    e->filename_raw = oc_dup_raw(PyBytes_AS_STRING(fname), PyBytes_GET_SIZE(fname));
    e->firstlineno = co->co_firstlineno;
    e->nunits = (uint32_t)(PyBytes_GET_SIZE(bc) / 2);
    e->code = malloc((size_t)e->nunits * 2 + 1);
    if (e->code)
        memcpy(e->code, PyBytes_AS_STRING(bc), (size_t)e->nunits * 2);
    Py_DECREF(qn);
    Py_DECREF(bc);
    Py_DECREF(fname);
    int from_table;
    e->lines = oc_line_table(co, e->nunits, &from_table);
    if (!e->qualname_raw || !e->filename_raw || !e->code || !e->lines) {
        free(e->qualname_raw);
        free(e->filename_raw);
        free(e->code);
        free(e->lines);
        memset(e, 0, sizeof *e);
        ex->flags = CF_EXCLUDED;
        oc_internal_error("out of memory registering a code object");
        return ex;
    }
    e->code_obj = (PyObject *)co;
    e->extra = ex;
    ex->nunits = e->nunits;
    ex->id = id;
    sess.ncodes = id + 1;
    if ((co->co_flags & (CO_COROUTINE | CO_ITERABLE_COROUTINE)) && !sess.fn_threshold)
        ex->flags |= CF_CORO; /* (asyncio task steps, asyncio.c; not in near-zero mode) */
    else if (!sess.fn_threshold && is_call_soon(co))
        ex->flags |= CF_WAKE; /* (which task a step is scheduled for: flows in the trace) */
    arm_calls(ex);
    return ex;
}

/* ---- C functions ---- */

/* PyMethodDef* -> code id, open addressing; cleared with the code table.  A PyMethodDef lives as long as
 * its module or type, which for builtins and loaded extensions is the process. */
static struct {
    const void **keys;
    uint32_t *ids;
    uint32_t cap, n;
} cflag_st;

void oc_cfunc_reset(void) {
    free(cflag_st.keys);
    free(cflag_st.ids);
    memset(&cflag_st, 0, sizeof cflag_st);
}

static inline uint32_t cf_slot(const void *key, uint32_t cap) {
    uintptr_t h = (uintptr_t)key;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & (cap - 1);
}

static int cf_grow(void) {
    uint32_t cap = cflag_st.cap ? cflag_st.cap * 2 : 256;
    const void **keys = calloc(cap, sizeof *keys);
    uint32_t *ids = calloc(cap, sizeof *ids);
    if (!keys || !ids) {
        free(keys);
        free(ids);
        return -1;
    }
    for (uint32_t i = 0; i < cflag_st.cap; i++)
        if (cflag_st.keys[i]) {
            uint32_t j = cf_slot(cflag_st.keys[i], cap);
            while (keys[j])
                j = (j + 1) & (cap - 1);
            keys[j] = cflag_st.keys[i];
            ids[j] = cflag_st.ids[i];
        }
    free(cflag_st.keys);
    free(cflag_st.ids);
    cflag_st.keys = keys;
    cflag_st.ids = ids;
    cflag_st.cap = cap;
    return 0;
}

/* The type that defines the method `name` found on instances of `tp` (its MRO's first dict holding the
 * name): a method descriptor's own type, as its repr names it, or NULL (not found, or not a C method's
 * descriptor: a class method called on its class looks in the metaclass).  Reads the dicts only: no
 * descriptor or __repr__ of the program's runs. */
static PyTypeObject *defining_type(PyTypeObject *tp, const char *name) {
    PyObject *mro = tp->tp_mro, *key = PyUnicode_FromString(name);
    PyTypeObject *found = NULL;
    if (!key || !mro || !PyTuple_Check(mro)) {
        Py_XDECREF(key);
        PyErr_Clear();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        PyObject *t = PyTuple_GET_ITEM(mro, i);
        if (!PyType_Check(t))
            continue;
        PyObject *dict = PyType_GetDict((PyTypeObject *)t);
        PyObject *v = dict ? PyDict_GetItemWithError(dict, key) : NULL; /* (borrowed: the dict is held) */
        if (v) {
            if (Py_IS_TYPE(v, &PyMethodDescr_Type) || Py_IS_TYPE(v, &PyClassMethodDescr_Type))
                found = PyDescr_TYPE(v);
            Py_DECREF(dict);
            break;
        }
        Py_XDECREF(dict);
    }
    Py_DECREF(key);
    PyErr_Clear();
    return found;
}

/* cProfile's names: "<built-in method builtins.len>", "<method 'append' of 'list' objects>" (named after
 * the type that defines the method, whatever the receiver's type: the same name for every call of it),
 * "<built-in method fromkeys>" (a class method called on its class).  Built with snprintf from C strings,
 * so it cannot fail on an odd object (a module name that is not a str). */
static void cfunc_name(PyObject *callable, PyMethodDef *ml, char *buf, size_t cap) {
    const char *name = ml && ml->ml_name ? ml->ml_name : "?";
    if (PyCFunction_Check(callable)) {
        PyObject *self = PyCFunction_GET_SELF(callable);
        if (self && !PyModule_Check(self)) {
            PyTypeObject *def = defining_type(Py_TYPE(self), name);
            if (def) {
                snprintf(buf, cap, "<method '%s' of '%s' objects>", name, def->tp_name ? def->tp_name : "?");
                return;
            }
        }
        PyObject *mod = ((PyCFunctionObject *)callable)->m_module;
        const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
        if (!m)
            PyErr_Clear();
        if (m)
            snprintf(buf, cap, "<built-in method %s.%s>", m, name);
        else
            snprintf(buf, cap, "<built-in method %s>", name);
        return;
    }
    PyTypeObject *t = PyDescr_TYPE(callable);
    snprintf(buf, cap, "<method '%s' of '%s' objects>", name, t && t->tp_name ? t->tp_name : "?");
}

uint32_t oc_code_add_named(const char *qualname, const char *filename) {
    if (sess.ncodes >= (uint32_t)OC_MAX_PAGES * OC_PAGE_SIZE)
        return UINT32_MAX;
    uint32_t page = sess.ncodes >> OC_PAGE_BITS;
    if (!sess.pages[page] && !(sess.pages[page] = calloc(OC_PAGE_SIZE, sizeof(oc_codeent))))
        return UINT32_MAX;
    uint32_t id = sess.ncodes;
    oc_codeent *e = oc_code_entry(id);
    e->qualname_raw = oc_dup_raw(qualname, (Py_ssize_t)strlen(qualname));
    e->filename_raw = oc_dup_raw(filename, (Py_ssize_t)strlen(filename));
    if (!e->qualname_raw || !e->filename_raw) {
        free(e->qualname_raw);
        free(e->filename_raw);
        memset(e, 0, sizeof *e);
        return UINT32_MAX;
    }
    sess.ncodes = id + 1;
    return id;
}

static uint32_t cfunc_register(PyObject *callable, PyMethodDef *ml) {
    if (sess.ncodes >= (uint32_t)OC_MAX_PAGES * OC_PAGE_SIZE || ((cflag_st.n + 1) * 2 > cflag_st.cap && cf_grow() < 0))
        return UINT32_MAX;
    PyObject *exc = PyErr_GetRaisedException();
    char name[512];
    cfunc_name(callable, ml, name, sizeof name);
    uint32_t id = oc_code_add_named(name, "~");
    if (id != UINT32_MAX) {
        uint32_t j = cf_slot(ml, cflag_st.cap);
        while (cflag_st.keys[j])
            j = (j + 1) & (cflag_st.cap - 1);
        cflag_st.keys[j] = ml;
        cflag_st.ids[j] = id;
        cflag_st.n++;
    }
    PyErr_Clear();
    PyErr_SetRaisedException(exc);
    if (id == UINT32_MAX)
        oc_internal_error("out of memory registering a C function");
    return id;
}

uint32_t oc_cfunc_id(PyObject *callable) {
    PyMethodDef *ml;
    if (PyCFunction_Check(callable))
        ml = ((PyCFunctionObject *)callable)->m_ml;
    else if (Py_IS_TYPE(callable, &PyMethodDescr_Type))
        ml = ((PyMethodDescrObject *)callable)->d_method;
    else
        return UINT32_MAX;
    if (LIKELY(cflag_st.cap != 0)) {
        uint32_t j = cf_slot(ml, cflag_st.cap);
        while (cflag_st.keys[j]) {
            if (cflag_st.keys[j] == ml)
                return cflag_st.ids[j];
            j = (j + 1) & (cflag_st.cap - 1);
        }
    }
    return cfunc_register(callable, ml);
}

/* A call site of this C function was de-instrumented (monitor.c ccall_keep): its recorded calls are
 * a part of its calls, which the recording's code states say (CF_START_DISABLED on its entry, as for a
 * function whose start was de-instrumented: the renderer names it among its callers' unmeasured
 * callees).  C functions' entries have no extra, so the snapshot at stop leaves the flag alone. */
void oc_cfunc_mark_cut(PyObject *callable) {
    uint32_t id = oc_cfunc_id(callable);
    if (id != UINT32_MAX && id < sess.ncodes)
        oc_code_entry(id)->flags |= CF_START_DISABLED;
}

PyObject *oc_code_object(oc_codeent *e) {
    return e->code_obj ? Py_NewRef(e->code_obj) : NULL;
}

void oc_codetable_snapshot(void) {
    for (uint32_t id = 0; id < sess.ncodes; id++) {
        oc_codeent *e = oc_code_entry(id);
        if (e->extra) {
            e->flags = e->extra->flags & ~CF_ASYNCIO;
            e->enters = e->extra->enters;
        }
    }
}

/* After the recorder has finished: free the table (GIL held). */
void oc_codetable_clear(void) {
    for (uint32_t pg = 0; pg < OC_MAX_PAGES; pg++) {
        oc_codeent *page = sess.pages[pg];
        if (!page)
            continue;
        for (uint32_t i = 0; i < OC_PAGE_SIZE; i++) {
            oc_codeent *e = &page[i];
            free(e->qualname);
            free(e->filename);
            free(e->qualname_raw);
            free(e->filename_raw);
            free(e->code);
            free(e->lines);
            if (e->extra && e->extra->gen == sess.gen)
                e->extra->id = UINT32_MAX; /* its entry is gone */
        }
        free(page);
        sess.pages[pg] = NULL;
    }
    sess.ncodes = 0;
    oc_cfunc_reset();
}
