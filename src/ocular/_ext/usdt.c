/* usdt.c -- USDT (SystemTap SDT) probes in provider `ocular`, for bpftrace, gdb and other SDT consumers.
 *
 * One job: fire static probes for Python-level events, and cost nothing until a tracer attaches.
 * Each probe has its own semaphore (an unsigned short in section .probes that the tracer -- for
 * bpftrace the kernel, through uprobe reference counters -- increments while it is attached).  A poller thread reads the semaphores
 * every OCULAR_USDT_POLL_MS milliseconds (default 10) without the GIL; only when the set of attached
 * probes changes does it take the GIL and adjust a sys.monitoring tool of its own ("ocular-usdt"):
 * the tool id is acquired, the callbacks registered and exactly the needed events set while at least
 * one probe is attached, and everything is given back (events 0, callbacks unregistered, id freed)
 * when the last one detaches.  While nothing is attached no callback runs at all.  In a fork child the
 * poller also ends by itself once no thread but Ocular's own is left (a child forked from a non-main
 * thread has no interpreter exit to stop it), so it never keeps such a child alive.
 *
 * Probes and their arguments (stable; documented in docs/usdt.md and ocular.usdt):
 *   py_start  (qualname, filename, line, offset, tid)           PY_START; line = first line
 *   py_resume (qualname, filename, line, offset, tid)           PY_RESUME and PY_THROW
 *   py_return (qualname, filename, line, offset, tid)           PY_RETURN
 *   py_yield  (qualname, filename, line, offset, tid)           PY_YIELD
 *   py_unwind (qualname, filename, line, offset, tid)           PY_UNWIND
 *   call      (qualname, filename, line, offset, tid, callee)   CALL (the caller's location)
 *   line      (qualname, filename, line, offset, tid)           LINE
 *   raise     (qualname, filename, line, offset, tid, exctype)  RAISE
 * Strings are NUL-terminated UTF-8 (code strings encoded once per code object with backslashreplace,
 * so they never fail); line is the first line for py_start and the line of `offset` otherwise;
 * offset is the bytecode offset in bytes (-1 if unknown); tid is the kernel thread id (gettid).
 *
 * The probe path never allocates after the first event of a code object (the encoded names are kept in
 * a code map of our own, codemap.c), never calls repr() and never runs Python code.
 * The probe sites and their ELF notes come from Ocular's own macros (usdt_sdt.h) on x86-64 and aarch64
 * Linux, so every build there has the probes, with or without systemtap-sdt-dev; -DOCULAR_USDT_SYS_SDT
 * uses <sys/sdt.h> instead, and other Linux architectures use it when it is installed.  Without either
 * (or with -DOCULAR_NO_USDT) the probes are compiled out and ocular.usdt.available() is False with the
 * reason.
 */
#include "ocular.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "usdt_sdt.h"

#if defined(OCULAR_NO_USDT)
#elif defined(OC_SDT_OWN) && !defined(OCULAR_USDT_SYS_SDT)
#define OC_USDT 1
#define OC_USDT_HOW "Ocular's own SDT notes"
#define OC_PROBE5(name, ...) OC_SDT_PROBE5(ocular, name, ocular_##name##_semaphore, __VA_ARGS__)
#define OC_PROBE6(name, ...) OC_SDT_PROBE6(ocular, name, ocular_##name##_semaphore, __VA_ARGS__)
#elif defined(__linux__) && defined(__has_include)
#if __has_include(<sys/sdt.h>)
#define OC_USDT 1
#define OC_USDT_HOW "<sys/sdt.h>"
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#define OC_PROBE5(name, ...) STAP_PROBE5(ocular, name, __VA_ARGS__)
#define OC_PROBE6(name, ...) STAP_PROBE6(ocular, name, __VA_ARGS__)
#elif defined(OCULAR_USDT_SYS_SDT)
#error "-DOCULAR_USDT_SYS_SDT asks for <sys/sdt.h>, which is not installed (Debian: systemtap-sdt-dev)"
#endif
#endif

#define N_PROBES 8
static const char *const probe_names[N_PROBES] = {
    "py_start", "py_resume", "py_return", "py_yield", "py_unwind", "call", "line", "raise",
};

#ifdef OC_USDT
/* The semaphores: the notes refer to them as <provider>_<name>_semaphore and record their addresses,
 * so tracers know what to increment. */
#define OC_SEMAPHORE(name) \
    __extension__ unsigned short ocular_##name##_semaphore __attribute__((used, section(".probes")))
OC_SEMAPHORE(py_start);
OC_SEMAPHORE(py_resume);
OC_SEMAPHORE(py_return);
OC_SEMAPHORE(py_yield);
OC_SEMAPHORE(py_unwind);
OC_SEMAPHORE(call);
OC_SEMAPHORE(line);
OC_SEMAPHORE(raise);
#define SEMA(name) (*(volatile unsigned short *)&ocular_##name##_semaphore)

static unsigned short *const semaphores[N_PROBES] = {
    &ocular_py_start_semaphore, &ocular_py_resume_semaphore, &ocular_py_return_semaphore,
    &ocular_py_yield_semaphore, &ocular_py_unwind_semaphore, &ocular_call_semaphore,
    &ocular_line_semaphore,     &ocular_raise_semaphore,
};
static const char unavailable_reason[] = "";
static const char probes_from[] = OC_USDT_HOW;
#elif defined(OCULAR_NO_USDT)
static const char unavailable_reason[] = "ocular was built with -DOCULAR_NO_USDT: the USDT probes are compiled out";
#elif !defined(__linux__)
static const char unavailable_reason[] = "USDT probes are only built on Linux";
#else
static const char unavailable_reason[] =
    "ocular was built without <sys/sdt.h> on an architecture other than x86-64 and aarch64 (where Ocular "
    "writes its own probe notes): install it (Debian/Ubuntu: apt-get install systemtap-sdt-dev; "
    "Fedora: systemtap-sdt-devel) and rebuild ocular";
#endif
#ifndef OC_USDT
static const char probes_from[] = "";
#endif

/* ---- state.  Fields marked (GIL) change only with the GIL held; the poller reads `applied` without it. */
static struct {
    int enabled;               /* (GIL) enable() was called and disable() was not */
    int running;               /* (GIL) the poller thread exists */
    unsigned poll_ms;          /* (GIL) */
    pthread_t thread;
    pthread_mutex_t mu;        /* guards stop and the condition variable */
    pthread_cond_t cv;
    int stop;
    int in_fork_child;         /* set before the poller starts: a fork child, where the poller watches for orphanhood */
    atomic_uint applied;       /* probe bitmask the sys.monitoring state corresponds to */
    unsigned failed;           /* (GIL) bitmask whose application failed; retried after a while */
    int tool_id;               /* (GIL) -1: no tool id held */
    long events;               /* (GIL) events set on tool_id */
    unsigned long changes;     /* (GIL) applied changes, for status() */
    char error[256];           /* (GIL) last failure, "" if none */
    PyObject *monitoring;      /* (GIL) sys.monitoring */
    PyObject *toolid;          /* (GIL) ocular._toolid: the tool id's life, shared with the tracer */
    long ev_bit[N_PROBES][2];  /* the sys.monitoring event bits each probe needs (probe_events) */
    PyObject *callbacks;       /* (GIL) {event name: callback} */
    int have_codes;            /* (GIL) `codes` is set up */
    oc_codemap codes;          /* (GIL) code object -> its name cache (us_code) */
} usdt_st = {.tool_id = -1};

#ifdef OC_USDT
/* sys.monitoring events a probe needs (names; the bits are looked up at enable time) */
static const char *const probe_events[N_PROBES][2] = {
    {"PY_START", NULL}, {"PY_RESUME", "PY_THROW"}, {"PY_RETURN", NULL}, {"PY_YIELD", NULL},
    {"PY_UNWIND", NULL}, {"CALL", NULL}, {"LINE", NULL}, {"RAISE", NULL},
};

#define TOOL_NAME "ocular-usdt"

/* ---- per-code cache: encoded names, one malloc per code object, freed with the code object ---- */
typedef struct {
    const char *name;          /* co_qualname: points into buf */
    const char *filename;      /* co_filename: points into buf */
    int firstlineno;
    char buf[];                /* qualname NUL filename NUL */
} us_code;

static const us_code unknown_code = {"?", "?", 0};

static void free_code_info(void *p) { free(p); }

/* UTF-8 of a str with backslashreplace (never fails on lone surrogates); NULs become '?'. */
static PyObject *encode(PyObject *s) {
    PyObject *b = (s && PyUnicode_Check(s)) ? PyUnicode_AsEncodedString(s, "utf-8", "backslashreplace")
                                            : PyBytes_FromString("?");
    if (b) {
        char *p = PyBytes_AS_STRING(b);
        for (Py_ssize_t i = 0; i < PyBytes_GET_SIZE(b); i++)
            if (p[i] == 0)
                p[i] = '?';
    }
    return b;
}

static __attribute__((noinline)) const us_code *code_info_slow(PyObject *code) {
    if (!usdt_st.have_codes || !PyCode_Check(code))
        return &unknown_code;
    PyObject *exc = PyErr_GetRaisedException();
    const us_code *res = &unknown_code;
    PyCodeObject *co = (PyCodeObject *)code;
    PyObject *q = encode(co->co_qualname);
    PyObject *f = q ? encode(co->co_filename) : NULL;
    if (f) {
        size_t nq = (size_t)PyBytes_GET_SIZE(q), nf = (size_t)PyBytes_GET_SIZE(f);
        us_code *c = malloc(sizeof *c + nq + nf + 2);
        if (c) {
            c->firstlineno = co->co_firstlineno;
            memcpy(c->buf, PyBytes_AS_STRING(q), nq + 1);
            memcpy(c->buf + nq + 1, PyBytes_AS_STRING(f), nf + 1);
            c->name = c->buf;
            c->filename = c->buf + nq + 1;
            if (oc_codemap_put(&usdt_st.codes, code, c) < 0)
                free(c);
            else
                res = c;
        }
    }
    Py_XDECREF(q);
    Py_XDECREF(f);
    PyErr_Clear();
    PyErr_SetRaisedException(exc);
    return res;
}

static inline const us_code *code_info(PyObject *code) {
    void *p = usdt_st.have_codes ? oc_codemap_get(&usdt_st.codes, code) : NULL;
    if (LIKELY(p != NULL))
        return p;
    return code_info_slow(code);
}

static OC_TLS __thread int tls_tid;

static void fork_child_tid(void) { tls_tid = 0; }

static inline int cur_tid(void) {
    int t = tls_tid;
    if (UNLIKELY(!t))
        t = tls_tid = (int)syscall(SYS_gettid);
    /* Launder it into a register: otherwise the compiler may hand the probe the TLS variable itself
     * as a memory operand (%fs:(%rax) at -O1), which bpftrace and gdb cannot evaluate. */
    __asm__("" : "+r"(t));
    return t;
}

static inline int as_int(PyObject *o) {
    if (LIKELY(PyLong_CheckExact(o)) && LIKELY(PyUnstable_Long_IsCompact((PyLongObject *)o)))
        return (int)PyUnstable_Long_CompactValue((PyLongObject *)o);
    return -1;
}

/* The line of a bytecode offset, from the code object's location table.  Not PyCode_Addr2Line: on
 * 3.14+ it answers from the LINE instrumentation's own table while LINE events are on, and that table
 * has -1 for offsets that are not an instruction's first code unit -- such as the offset a RAISE event
 * reports in the frame an exception propagates into. */
static inline int line_of(PyObject *code, int offset) {
    int line = -1, col, end_line, end_col;
    if (offset < 0 || !PyCode_Addr2Location((PyCodeObject *)code, offset, &line, &col, &end_line, &end_col))
        return -1;
    return line;
}

/* LINE callbacks get no offset: read it from the executing frame, if that frame runs `code`. */
static int current_offset(PyObject *code) {
    struct _PyInterpreterFrame *f = oc_current_iframe();
    if (!f)
        return -1;
    PyObject *fc = PyUnstable_InterpreterFrame_GetCode(f);
    int off = fc == code ? PyUnstable_InterpreterFrame_GetLasti(f) : -1;
    Py_XDECREF(fc);
    return off;
}

/* The callee's name for the call probe, without running any code: a Python function's __qualname__
 * (from its code object), a builtin's __name__, a class's tp_name, else the callable's type name. */
static const char *callee_name(PyObject *f) {
    for (int depth = 0; depth < 3; depth++) {
        if (PyFunction_Check(f))
            return code_info(PyFunction_GET_CODE(f))->name;
        if (PyCFunction_Check(f))
            return ((PyCFunctionObject *)f)->m_ml->ml_name;
        if (PyMethod_Check(f)) {
            f = PyMethod_GET_FUNCTION(f);
            continue;
        }
        if (PyType_Check(f))
            return ((PyTypeObject *)f)->tp_name;
        if (Py_IS_TYPE(f, &PyMethodDescr_Type) || Py_IS_TYPE(f, &PyClassMethodDescr_Type))
            return ((PyMethodDescrObject *)f)->d_method->ml_name;
        break;
    }
    return Py_TYPE(f)->tp_name;
}

/* ---- the callbacks: a C type carrying its own vectorcall pointer ---- */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vc;
    const char *event;
} us_cb;

static PyObject *cb_repr(PyObject *self) {
    return PyUnicode_FromFormat("<ocular usdt callback %s>", ((us_cb *)self)->event);
}

static PyTypeObject UsdtCallbackType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ocular._ocular.UsdtCallback",
    .tp_basicsize = sizeof(us_cb),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(us_cb, vc),
    .tp_call = PyVectorcall_Call,
    .tp_repr = cb_repr,
    .tp_doc = "A sys.monitoring callback that fires one of Ocular's USDT probes.",
};

#define CB_ARGS PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw
#define CB_GUARD(probe, nargs)                                                      \
    (void)self, (void)kw;                                                           \
    if (UNLIKELY(!SEMA(probe)) || UNLIKELY(PyVectorcall_NARGS(nargsf) < (nargs)))   \
        return Py_None; /* detached since the last poll; None is immortal: no incref */

/* the common five arguments, with the line of the offset */
#define FIRE5(fn, probe)                                                                         \
    static PyObject *cb_##fn(CB_ARGS) {                                                          \
        CB_GUARD(probe, 2)                                                                       \
        const us_code *c = code_info(args[0]);                                                   \
        int off = as_int(args[1]);                                                               \
        OC_PROBE5(probe, c->name, c->filename, line_of(args[0], off), off, cur_tid()); \
        return Py_None;                                                                          \
    }
FIRE5(py_resume, py_resume)
FIRE5(py_throw, py_resume)
FIRE5(py_return, py_return)
FIRE5(py_yield, py_yield)
FIRE5(py_unwind, py_unwind)

static PyObject *cb_py_start(CB_ARGS) {
    CB_GUARD(py_start, 2)
    const us_code *c = code_info(args[0]);
    OC_PROBE5(py_start, c->name, c->filename, c->firstlineno, as_int(args[1]), cur_tid());
    return Py_None;
}

/* CALL: (code, offset, callable, arg0) */
static PyObject *cb_call(CB_ARGS) {
    CB_GUARD(call, 3)
    const us_code *c = code_info(args[0]);
    int off = as_int(args[1]);
    const char *callee = callee_name(args[2]);
    OC_PROBE6(call, c->name, c->filename, line_of(args[0], off), off, cur_tid(), callee);
    return Py_None;
}

/* LINE: (code, line) */
static PyObject *cb_line(CB_ARGS) {
    CB_GUARD(line, 2)
    const us_code *c = code_info(args[0]);
    int line = as_int(args[1]);
    OC_PROBE5(line, c->name, c->filename, line, current_offset(args[0]), cur_tid());
    return Py_None;
}

/* RAISE: (code, offset, exception) */
static PyObject *cb_raise(CB_ARGS) {
    CB_GUARD(raise, 3)
    const us_code *c = code_info(args[0]);
    int off = as_int(args[1]);
    const char *exctype = Py_TYPE(args[2])->tp_name;
    OC_PROBE6(raise, c->name, c->filename, line_of(args[0], off), off, cur_tid(), exctype);
    return Py_None;
}

static const struct {
    const char *event;
    vectorcallfunc f;
} cb_table[] = {
    {"PY_START", (vectorcallfunc)cb_py_start},   {"PY_RESUME", (vectorcallfunc)cb_py_resume},
    {"PY_THROW", (vectorcallfunc)cb_py_throw},   {"PY_RETURN", (vectorcallfunc)cb_py_return},
    {"PY_YIELD", (vectorcallfunc)cb_py_yield},   {"PY_UNWIND", (vectorcallfunc)cb_py_unwind},
    {"CALL", (vectorcallfunc)cb_call},           {"LINE", (vectorcallfunc)cb_line},
    {"RAISE", (vectorcallfunc)cb_raise},
};
#define N_CB (sizeof cb_table / sizeof cb_table[0])

static PyObject *make_callbacks(void) {
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < N_CB; i++) {
        us_cb *cb = PyObject_New(us_cb, &UsdtCallbackType);
        if (!cb) {
            Py_CLEAR(d);
            break;
        }
        cb->vc = cb_table[i].f;
        cb->event = cb_table[i].event;
        if (PyDict_SetItemString(d, cb_table[i].event, (PyObject *)cb) < 0)
            Py_CLEAR(d);
        Py_DECREF(cb);
    }
    return d;
}

/* ---- semaphores ---- */
static unsigned attached_mask(void) {
    unsigned m = 0;
    for (int i = 0; i < N_PROBES; i++)
        if (*(volatile unsigned short *)semaphores[i])
            m |= 1u << i;
    return m;
}

/* ---- sys.monitoring, with the GIL ---- */
static PyObject *mon_call(const char *meth, const char *fmt, ...) {
    va_list va;
    va_start(va, fmt);
    PyObject *args = Py_VaBuildValue(fmt, va);
    va_end(va);
    if (!args)
        return NULL;
    PyObject *f = PyObject_GetAttrString(usdt_st.monitoring, meth);
    PyObject *r = f ? PyObject_CallObject(f, args) : NULL;
    Py_XDECREF(f);
    Py_DECREF(args);
    return r;
}

/* 1 if tool_id is held under our name, 0 if not, -1 on error */
static int tool_is_ours(int tool_id) {
    PyObject *name = mon_call("get_tool", "(i)", tool_id);
    if (!name)
        return -1;
    int ours = PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, TOOL_NAME) == 0;
    Py_DECREF(name);
    return ours;
}

static void set_error_from_exception(const char *what) {
    PyObject *exc = PyErr_GetRaisedException();
    PyObject *s = exc ? PyObject_Str(exc) : NULL;
    const char *m = s ? PyUnicode_AsUTF8(s) : NULL;
    snprintf(usdt_st.error, sizeof usdt_st.error, "%s: %s", what, m ? m : "unknown error");
    Py_XDECREF(s);
    Py_XDECREF(exc);
    PyErr_Clear();
}

/* Give the tool id back (ocular._toolid.release: events 0, callbacks unregistered, id freed; if another tool
 * holds the id now, only our callbacks are taken out and the id stays its own). */
static void release_tool(void) {
    if (usdt_st.tool_id < 0)
        return;
    int id = usdt_st.tool_id;
    usdt_st.tool_id = -1;
    usdt_st.events = 0;
    PyObject *r = PyObject_CallMethod(usdt_st.toolid, "release", "isO", id, TOOL_NAME, usdt_st.callbacks);
    if (!r)
        set_error_from_exception("releasing the sys.monitoring tool id");
    Py_XDECREF(r);
}

/* Hold a tool id with our callbacks registered (ocular._toolid.acquire and register: the first free of 3, 4
 * and 5, never 0-2); 0, or -1 with an exception set. */
static int acquire_tool(void) {
    if (usdt_st.tool_id >= 0) {
        int ours = tool_is_ours(usdt_st.tool_id);
        if (ours < 0)
            return -1;
        if (ours)
            return 0;
        usdt_st.tool_id = -1; /* somebody freed it behind our back */
        usdt_st.events = 0;
    }
    PyObject *r = PyObject_CallMethod(usdt_st.toolid, "acquire", "s", TOOL_NAME);
    long id = r ? PyLong_AsLong(r) : -1;
    Py_XDECREF(r);
    if (id < 0 || id > 5)
        return -1;
    usdt_st.tool_id = (int)id;
    r = PyObject_CallMethod(usdt_st.toolid, "register", "iO", usdt_st.tool_id, usdt_st.callbacks);
    Py_XDECREF(r);
    return r ? 0 : -1; /* (on failure the caller releases the id) */
}

/* Make sys.monitoring match the attached probes `want`.  GIL held.  Returns 0 or -1 (usdt_st.error set). */
static int apply(unsigned want) {
    long events = 0;
    for (int i = 0; i < N_PROBES; i++)
        if (want & (1u << i))
            events |= usdt_st.ev_bit[i][0] | usdt_st.ev_bit[i][1];
    if (events == 0) {
        release_tool();
    } else {
        PyObject *r = NULL;
        if (acquire_tool() == 0) {
            r = mon_call("set_events", "(il)", usdt_st.tool_id, events);
            Py_XDECREF(r);
        }
        if (!r) {
            char before[sizeof usdt_st.error];
            memcpy(before, usdt_st.error, sizeof before);
            set_error_from_exception("cannot enable the probes");
            if (strcmp(before, usdt_st.error) != 0) /* say it once, not at every retry */
                fprintf(stderr, "ocular.usdt: %s\n", usdt_st.error);
            release_tool();
            return -1;
        }
        usdt_st.events = events;
    }
    usdt_st.changes++;
    usdt_st.error[0] = 0;
    return 0;
}

/* ---- the poller ---- */
static int finalizing(void) { return oc_is_finalizing(); }

/* A child forked from a non-main thread ends when that thread returns: no interpreter exit, no atexit,
 * so nobody calls disable(), and the process ends only with its last thread.  Without care the poller
 * would be that thread and keep the child alive forever (the writer had the same problem, see
 * writer.c).  So in a fork child the poller looks, every ORPHAN_CHECK_MS, whether any thread is left
 * besides Ocular's own (itself, named "ocular-usdt", and the trace writer, "ocular-writer"); if none
 * is, no Python code can run again and the poller simply ends.  If it was the last thread the process
 * ends with status 0, as it would have without Ocular; if the writer is still there, it then finds
 * itself alone, saves the trace and ends the process. */
#define ORPHAN_CHECK_MS 200
/* The same ending, found when a probe is attached before the next orphan check (bpftrace
 * attaching elsewhere bumps this library's semaphores in every process that maps it): the last Python thread
 * is gone, so the poller ends instead of making a thread state -- one made while the interpreter has none
 * reuses the main thread's built-in one, which on 3.12 fork left marked in use: "Fatal Python error:
 * init_threadstate: thread state already initialized" (CI).  (The thread list is read without its lock:
 * a thread that ends between the read and PyGILState_Ensure is a window of a few instructions.) */

static void *poller_main(void *arg) {
    (void)arg; /* (every signal blocked and named since its creation: oc_thread_create) */
    unsigned retry = 0;
    uint64_t next_orphan_check = 0;
    pthread_mutex_lock(&usdt_st.mu);
    while (!usdt_st.stop) {
        unsigned want = attached_mask();
        if (want != atomic_load_explicit(&usdt_st.applied, memory_order_relaxed) && (want != usdt_st.failed || !retry)) {
            pthread_mutex_unlock(&usdt_st.mu);
            if (finalizing())
                return NULL;
            if (usdt_st.in_fork_child && !PyInterpreterState_ThreadHead(PyInterpreterState_Main()))
                return NULL; /* no Python thread left (see ORPHAN_CHECK_MS) */
            PyGILState_STATE g = PyGILState_Ensure();
            if (usdt_st.enabled) {
                if (apply(want) == 0) {
                    atomic_store(&usdt_st.applied, want);
                    usdt_st.failed = 0;
                } else {
                    usdt_st.failed = want;
                    retry = 100; /* polls before trying the same set again */
                }
            }
            PyGILState_Release(g);
            pthread_mutex_lock(&usdt_st.mu);
            continue; /* re-check at once: probes are often attached one after the other */
        }
        if (retry)
            retry--;
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        uint64_t now = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
        unsigned wait_ms = usdt_st.poll_ms;
        if (usdt_st.in_fork_child) {
            if (now >= next_orphan_check) {
                pthread_mutex_unlock(&usdt_st.mu);
                int orphan = oc_only_helper_threads_left();
                pthread_mutex_lock(&usdt_st.mu);
                if (orphan)
                    break;
                next_orphan_check = now + ORPHAN_CHECK_MS * 1000000ull;
            }
            if (wait_ms > ORPHAN_CHECK_MS)
                wait_ms = ORPHAN_CHECK_MS;
        }
        uint64_t ns = (uint64_t)t.tv_nsec + (uint64_t)wait_ms * 1000000u;
        t.tv_sec += (time_t)(ns / 1000000000u);
        t.tv_nsec = (long)(ns % 1000000000u);
        while (!usdt_st.stop && pthread_cond_timedwait(&usdt_st.cv, &usdt_st.mu, &t) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&usdt_st.mu);
    return NULL;
}

static void init_sync(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&usdt_st.cv, &a);
    pthread_condattr_destroy(&a);
    pthread_mutex_init(&usdt_st.mu, NULL);
}

static int start_poller(void) {
    usdt_st.stop = 0;
    int err = oc_thread_create(&usdt_st.thread, NULL, poller_main, NULL, OC_USDT_THREAD_NAME);
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    usdt_st.running = 1;
    return 0;
}

static void stop_poller(void) {
    if (!usdt_st.running)
        return;
    pthread_mutex_lock(&usdt_st.mu);
    usdt_st.stop = 1;
    pthread_cond_signal(&usdt_st.cv);
    pthread_mutex_unlock(&usdt_st.mu);
    Py_BEGIN_ALLOW_THREADS /* the poller may be waiting for the GIL */
    pthread_join(usdt_st.thread, NULL);
    Py_END_ALLOW_THREADS
    usdt_st.running = 0;
}

static int setup_once(void) {
    if (usdt_st.callbacks)
        return 0;
    if (PyType_Ready(&UsdtCallbackType) < 0)
        return -1;
    if (!usdt_st.have_codes) {
        if (oc_codemap_init(&usdt_st.codes, free_code_info) < 0)
            return -1;
        usdt_st.have_codes = 1;
    }
    PyObject *sys = PyImport_ImportModule("sys");
    PyObject *mon = sys ? PyObject_GetAttrString(sys, "monitoring") : NULL;
    Py_XDECREF(sys);
    PyObject *events = mon ? PyObject_GetAttrString(mon, "events") : NULL;
    for (int i = 0; events && i < N_PROBES; i++)
        for (int j = 0; j < 2; j++) {
            usdt_st.ev_bit[i][j] = 0;
            if (!probe_events[i][j])
                continue;
            PyObject *v = PyObject_GetAttrString(events, probe_events[i][j]);
            usdt_st.ev_bit[i][j] = v ? PyLong_AsLong(v) : -1;
            Py_XDECREF(v);
            if (usdt_st.ev_bit[i][j] == -1 && PyErr_Occurred()) {
                Py_CLEAR(events);
                break;
            }
        }
    PyObject *cbs = events ? make_callbacks() : NULL;
    Py_XDECREF(events);
    if (!cbs) {
        Py_XDECREF(mon);
        return -1;
    }
    PyObject *toolid = PyImport_ImportModule("ocular._toolid");
    if (!toolid) {
        Py_DECREF(cbs);
        Py_XDECREF(mon);
        return -1;
    }
    usdt_st.monitoring = mon;
    usdt_st.toolid = toolid;
    usdt_st.callbacks = cbs;
    pthread_atfork(NULL, NULL, fork_child_tid);
    return 0;
}
#endif /* OC_USDT */

/* ---- the Python-facing functions (ocular.usdt wraps them) ---- */
PyDoc_STRVAR(usdt_enable_doc, "_usdt_enable(poll_ms)\n\nStart the poller (idempotent; a second call only "
                              "changes the interval).  Raises RuntimeError if the probes are compiled out.");

static PyObject *usdt_enable(PyObject *mod, PyObject *arg) {
    (void)mod;
    unsigned long ms = PyLong_AsUnsignedLong(arg);
    if (ms == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    if (ms < 1 || ms > 60000) {
        PyErr_Format(PyExc_ValueError, "poll_ms must be from 1 to 60000, got %lu", ms);
        return NULL;
    }
#ifdef OC_USDT
    if (setup_once() < 0)
        return NULL;
    usdt_st.poll_ms = (unsigned)ms;
    if (usdt_st.enabled)
        Py_RETURN_NONE;
    usdt_st.error[0] = 0;
    usdt_st.failed = 0;
    usdt_st.enabled = 1;
    if (start_poller() < 0) {
        usdt_st.enabled = 0;
        return NULL;
    }
    Py_RETURN_NONE;
#else
    PyErr_Format(PyExc_RuntimeError, "ocular.usdt: %s", unavailable_reason);
    return NULL;
#endif
}

static PyObject *usdt_disable(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
#ifdef OC_USDT
    if (!usdt_st.enabled)
        Py_RETURN_NONE;
    usdt_st.enabled = 0; /* before the join: a poller waiting for the GIL then does nothing */
    stop_poller();
    release_tool();
    atomic_store(&usdt_st.applied, 0);
    usdt_st.failed = 0;
#endif
    Py_RETURN_NONE;
}

PyDoc_STRVAR(usdt_after_fork_child_doc,
             "_usdt_after_fork_child()\n\nIn a fork child: the poller thread did not survive fork(); start "
             "a new one if the probes were enabled.");

static PyObject *usdt_after_fork_child(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
#ifdef OC_USDT
    init_sync(); /* the parent's copies may have been held by its poller across fork() */
    usdt_st.running = 0;
    usdt_st.in_fork_child = 1;
    if (usdt_st.enabled && start_poller() < 0) {
        usdt_st.enabled = 0;
        return NULL;
    }
#endif
    Py_RETURN_NONE;
}

static int append_str(PyObject *list, const char *s) {
    PyObject *o = PyUnicode_FromString(s);
    int r = o ? PyList_Append(list, o) : -1;
    Py_XDECREF(o);
    return r;
}

static PyObject *usdt_info(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    PyObject *sem = PyDict_New();
    PyObject *attached = PyList_New(0);
    for (int i = 0; sem && attached && i < N_PROBES; i++) {
#ifdef OC_USDT
        unsigned v = *(volatile unsigned short *)semaphores[i];
#else
        unsigned v = 0;
#endif
        PyObject *n = PyLong_FromUnsignedLong(v);
        if (!n || PyDict_SetItemString(sem, probe_names[i], n) < 0 ||
            (v && append_str(attached, probe_names[i]) < 0)) {
            Py_XDECREF(n);
            Py_CLEAR(sem);
            break;
        }
        Py_DECREF(n);
    }
    if (!sem || !attached) {
        Py_XDECREF(sem);
        Py_XDECREF(attached);
        return NULL;
    }
#ifdef OC_USDT
    int available = 1;
    unsigned applied = atomic_load(&usdt_st.applied);
#else
    int available = 0;
    unsigned applied = 0;
#endif
    PyObject *applied_list = PyList_New(0);
    for (int i = 0; applied_list && i < N_PROBES; i++)
        if ((applied & (1u << i)) && append_str(applied_list, probe_names[i]) < 0)
            Py_CLEAR(applied_list);
    return Py_BuildValue("{s:O,s:s,s:s,s:O,s:I,s:N,s:N,s:N,s:N,s:l,s:k,s:s}",
                         "available", available ? Py_True : Py_False,
                         "reason", unavailable_reason,
                         "probes_from", probes_from,
                         "enabled", usdt_st.enabled ? Py_True : Py_False,
                         "poll_ms", usdt_st.poll_ms,
                         "semaphores", sem,
                         "attached", attached,
                         "applied", applied_list,
                         "tool_id", usdt_st.tool_id >= 0 ? PyLong_FromLong(usdt_st.tool_id) : Py_NewRef(Py_None),
                         "events", usdt_st.events,
                         "changes", usdt_st.changes,
                         "error", usdt_st.error);
}

static PyMethodDef usdt_methods[] = {
    {"_usdt_enable", usdt_enable, METH_O, usdt_enable_doc},
    {"_usdt_disable", usdt_disable, METH_NOARGS, "Stop the poller and give the sys.monitoring tool id back."},
    {"_usdt_after_fork_child", usdt_after_fork_child, METH_NOARGS, usdt_after_fork_child_doc},
    {"_usdt_info", usdt_info, METH_NOARGS, "State of the USDT probes: semaphores, tool id, events, poller."},
    {NULL, NULL, 0, NULL},
};

int oc_usdt_init(PyObject *module) {
#ifdef OC_USDT
    static int once = 0;
    if (!once) {
        init_sync();
        once = 1;
    }
#endif
    return PyModule_AddFunctions(module, usdt_methods);
}
