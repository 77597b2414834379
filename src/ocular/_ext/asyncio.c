/* asyncio.c -- asyncio task steps, on the record side: which task a coroutine's resume belongs to.
 *
 * A code object with CO_COROUTINE or CO_ITERABLE_COROUTINE carries CF_CORO (codeinfo.c), so that its
 * starts, resumes and throws leave the callbacks' fast path for on_enter (monitor.c), which calls
 * oc_task_enter before recording the enter.  A coroutine entered with no coroutine of a step below it
 * on this thread's stack (the thread's step depth is 0, or not above its frame depth) begins a step of
 * a task: the event loop resumed the task's coroutine.  asyncio.current_task() names that task (the C
 * builtin of the _asyncio module, called once per step, never per event, and only once the program has
 * imported asyncio); the step's enter record is preceded by a K_MARK record, OC_MARK_TASK, whose code id
 * is the task's entry in the code table (filename "<asyncio task>"), so its name reaches the recording as
 * a code's does, and the renderer gives the step its slice and its statistics under that entry
 * (render.c).  One entry per task name; asyncio's own names ("Task-<n>": a task the program did not
 * name) one entry per coroutine instead, "Task (<its qualname>)": a program that makes 50,000 tasks of
 * one coroutine gets one entry, not 50,000.  The step ends where the coroutine that began it leaves at
 * the same depth (oc_task_leave).  A task renamed later keeps its first name; past OC_TASK_NAMES
 * distinct names, further ones are all "(other tasks)".  Not in near-zero mode, where function starts
 * are de-instrumented and a step's enter may go unrecorded.
 *
 * Who scheduled a step: asyncio's BaseEventLoop.call_soon carries CF_WAKE (codeinfo.c), so its start takes
 * the slow path too, which calls oc_task_wake after recording the enter: when its `callback` argument is a
 * task's step or wake-up (a bound method or builtin of a Task, or _asyncio's TaskStepMethWrapper), an
 * OC_MARK_WAKE record names the task by its key (its address / 16), as the OC_MARK_KEY before each step's
 * OC_MARK_TASK does; the renderer joins the two into a flow and a task's first scheduling into its life.
 */
#include "ocular.h"
#include <string.h>

#define OC_TASK_NAMES 10000

static PyObject *current_task; /* _asyncio.current_task (a strong reference), once asyncio was imported */
static PyObject *names;        /* task name -> its entry's code id (a dict) */
static uint32_t *unnamed;      /* by a coroutine's code id: 1 + the entry of its unnamed tasks (0: none yet) */
static uint32_t nunnamed;
static uint32_t other_id = UINT32_MAX;
static PyObject *get_name_type; /* the last task type seen (held), and its get_name if that is a C method */
static PyObject *get_name_meth;
static uint32_t entries;       /* entries made this session */
static PyObject *cancelled_error; /* asyncio.CancelledError, once asyncio.exceptions was imported */
static PyObject *task_type;       /* asyncio.tasks.Task, once it was imported */
static PyObject *str_callback, *str_self; /* "callback", "__self__" (interned once: made per call, they cost
                                           * a third of a scheduling's instructions) */
/* task -> its entry, for the tasks seen last (direct-mapped by address; a weak reference tells a live task
 * from a new one at a dead one's address): a task's later steps skip get_name, which formats asyncio's
 * default names anew at each call (1,700 instructions on 3.12) */
#define OC_TASK_CACHE 1024
static struct {
    PyObject *ref;
    uint32_t id;
} cache[OC_TASK_CACHE];

static PyObject *cache_get(PyObject *task, uint32_t *id) {
    size_t slot = ((uintptr_t)task >> 4) & (OC_TASK_CACHE - 1);
    if (!cache[slot].ref || !oc_weakref_is(cache[slot].ref, task)) /* (the task is alive: the caller holds it) */
        return NULL;
    *id = cache[slot].id;
    return task;
}

static void cache_put(PyObject *task, uint32_t id) {
    size_t slot = ((uintptr_t)task >> 4) & (OC_TASK_CACHE - 1);
    PyObject *ref = PyWeakref_NewRef(task, NULL);
    if (!ref) {
        PyErr_Clear();
        return;
    }
    Py_XSETREF(cache[slot].ref, ref);
    cache[slot].id = id;
}

void oc_tasks_reset(void) {
    Py_CLEAR(current_task);
    Py_CLEAR(names);
    free(unnamed);
    unnamed = NULL;
    nunnamed = 0;
    Py_CLEAR(get_name_meth);
    Py_CLEAR(get_name_type);
    Py_CLEAR(cancelled_error);
    Py_CLEAR(task_type);
    other_id = UINT32_MAX;
    entries = 0;
    for (size_t i = 0; i < OC_TASK_CACHE; i++)
        Py_CLEAR(cache[i].ref);
}

/* module.name if the program has imported that module (a new reference), else NULL; imports nothing,
 * and leaves no exception set (the one in flight, if any, is kept) */
static PyObject *imported_attr(const char *module, const char *name) {
    PyObject *saved = PyErr_GetRaisedException();
    PyObject *key = PyUnicode_FromString(module), *v = NULL;
    PyObject *mod = key ? PyImport_GetModule(key) : NULL;
    Py_XDECREF(key);
    if (mod) {
        v = PyObject_GetAttrString(mod, name);
        Py_DECREF(mod);
    }
    PyErr_Clear();
    PyErr_SetRaisedException(saved);
    return v;
}

/* *slot: module.name if it is a type the program has imported (kept), looked up until then; NULL: not yet */
static PyObject *imported_type(PyObject **slot, const char *module, const char *name) {
    if (!*slot) {
        *slot = imported_attr(module, name);
        if (*slot && !PyType_Check(*slot))
            Py_CLEAR(*slot);
    }
    return *slot;
}

/* a K_MARK record of this thread (OC_MARK_* payload); 0 if none could be reserved */
static int put_mark(uint64_t ts, uint32_t code_id, uint32_t payload) {
    oc_rec *r = oc_reserve_rec();
    if (!r)
        return 0;
    r->ts = ts;
    r->code_id = code_id;
    r->info = OC_INFO(K_MARK, payload);
    return 1;
}

/* _asyncio.current_task, looked up until the program imports asyncio (NULL: not yet) */
static PyObject *current_task_fn(void) {
    if (!current_task)
        current_task = imported_attr("_asyncio", "current_task");
    return current_task;
}

/* A task's name without running any of the program's Python code: Task.get_name when it is the C
 * method (asyncio's own tasks, uvloop's), else the `_name` attribute asyncio's Python Task keeps (read
 * without __getattr__); NULL if neither (a new reference otherwise). */
static PyObject *name_of(PyObject *task) {
    if ((PyObject *)Py_TYPE(task) != get_name_type) { /* (one task type in nearly every program: looked up once) */
        Py_CLEAR(get_name_meth);
        Py_XSETREF(get_name_type, Py_NewRef((PyObject *)Py_TYPE(task)));
        PyObject *meth = PyObject_GetAttrString(get_name_type, "get_name");
        if (meth && Py_IS_TYPE(meth, &PyMethodDescr_Type))
            get_name_meth = meth;
        else
            Py_XDECREF(meth);
        PyErr_Clear();
    }
    PyObject *name = NULL;
    if (get_name_meth) {
        name = PyObject_CallOneArg(get_name_meth, task);
    } else {
        PyObject *key = PyUnicode_FromString("_name");
        name = key ? PyObject_GenericGetAttr(task, key) : NULL;
        Py_XDECREF(key);
    }
    if (name && !PyUnicode_Check(name))
        Py_CLEAR(name);
    PyErr_Clear();
    return name;
}

static uint32_t new_entry(PyObject *table, PyObject *key, PyObject *name);

/* asyncio's name for a task the program did not name: "Task-" and digits */
static int default_name(PyObject *name) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(name, &n);
    if (!s || n < 6 || memcmp(s, "Task-", 5) != 0) {
        PyErr_Clear();
        return 0;
    }
    for (Py_ssize_t i = 5; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

/* the code id of the entry of tasks named `name`, or of the unnamed tasks of coroutine `coro` (made on
 * first sight); UINT32_MAX on failure */
static uint32_t id_of(PyObject *name, oc_codeextra *coro) {
    if (default_name(name)) { /* (by the coroutine's code id: an array, no object made) */
        uint32_t c = coro->id;
        if (c < nunnamed && unnamed[c])
            return unnamed[c] - 1;
        if (c >= nunnamed) {
            uint32_t n = c + 256;
            uint32_t *u = realloc(unnamed, (size_t)n * sizeof *u);
            if (!u)
                return UINT32_MAX;
            memset(u + nunnamed, 0, (size_t)(n - nunnamed) * sizeof *u);
            unnamed = u;
            nunnamed = n;
        }
        PyObject *q = ((PyCodeObject *)coro->code)->co_qualname;
        PyObject *label = q && PyUnicode_Check(q) ? PyUnicode_FromFormat("Task (%U)", q) : PyUnicode_FromString("Task");
        uint32_t id = label ? new_entry(NULL, NULL, label) : UINT32_MAX;
        Py_XDECREF(label);
        if (id != UINT32_MAX && id != other_id)
            unnamed[c] = id + 1;
        return id;
    }
    if (!names && !(names = PyDict_New()))
        return UINT32_MAX;
    PyObject *v = PyDict_GetItemWithError(names, name); /* (borrowed) */
    if (v)
        return (uint32_t)PyLong_AsUnsignedLong(v);
    return PyErr_Occurred() ? UINT32_MAX : new_entry(names, name, name);
}

/* a new entry for tasks named `name` (a str), under `key` in `table` (a dict; NULL: none) */
static uint32_t new_entry(PyObject *table, PyObject *key, PyObject *name) {
    if (entries >= OC_TASK_NAMES) {
        if (other_id == UINT32_MAX)
            other_id = oc_code_add_named("(other tasks)", "<asyncio task>");
        return other_id;
    }
    Py_ssize_t n;
    const char *raw = PyUnicode_AsUTF8AndSize(name, &n);
    if (!raw)
        return UINT32_MAX;
    char buf[256];
    snprintf(buf, sizeof buf, "%.*s", (int)(n < 255 ? n : 255), raw);
    uint32_t id = oc_code_add_named(buf, "<asyncio task>");
    if (id == UINT32_MAX)
        return id;
    entries++;
    if (!table)
        return id;
    PyObject *idobj = PyLong_FromUnsignedLong(id);
    if (!idobj || PyDict_SetItem(table, key, idobj) < 0) {
        Py_XDECREF(idobj);
        return UINT32_MAX;
    }
    Py_DECREF(idobj);
    return id;
}

/* a task's key in the recording: its address / 16, 32 bits of it (OC_MARK_KEY) */
static uint32_t key_of(PyObject *task) { return (uint32_t)((uintptr_t)task >> 4); }

/* the code id of the current task's entry, or UINT32_MAX (no running loop, no task, no asyncio); *key
 * its key */
static uint32_t current_task_id(oc_codeextra *coro, uint32_t *key) {
    PyObject *fn = current_task_fn();
    if (!fn)
        return UINT32_MAX;
    PyObject *task = PyObject_CallNoArgs(fn); /* (C: no Python code runs; RuntimeError without a loop) */
    uint32_t id = UINT32_MAX;
    if (task)
        *key = key_of(task);
    if (task && task != Py_None && !cache_get(task, &id)) {
        PyObject *name = name_of(task);
        if (name) {
            id = id_of(name, coro);
            Py_DECREF(name);
            if (id != UINT32_MAX)
                cache_put(task, id);
        }
    }
    Py_XDECREF(task);
    PyErr_Clear();
    return id;
}

int oc_task_enter(oc_tbuf *b, uint32_t depth, oc_codeextra *coro) {
    if (b->step_depth && depth > b->step_depth)
        return 0; /* inside the thread's current step: awaited by its coroutine */
    b->step_depth = depth;
    PyObject *exc = PyErr_GetRaisedException(); /* (PY_THROW: the exception being thrown in is kept) */
    uint32_t key = 0, id = current_task_id(coro, &key);
    PyErr_SetRaisedException(exc);
    if (id == UINT32_MAX)
        return 0;
    uint64_t now = oc_now();
    /* (a key mark alone names nothing) */
    return put_mark(now, key, OC_MARK_KEY) && put_mark(now, id, OC_MARK_TASK);
}

/* The task whose step callback `cb` is, when call_soon is given one (a new reference), else NULL: asyncio's
 * C tasks schedule a bound builtin (task_wakeup) or a TaskStepMethWrapper (which has __self__), Python tasks
 * bound methods (__step, __wakeup).  Reads no attribute that runs Python code. */
static PyObject *task_of_callback(PyObject *cb) {
    PyObject *self = NULL;
    if (PyCFunction_Check(cb))
        self = Py_XNewRef(PyCFunction_GET_SELF(cb));
    else if (PyMethod_Check(cb))
        self = Py_NewRef(PyMethod_GET_SELF(cb));
    else if (strcmp(Py_TYPE(cb)->tp_name, "_asyncio.TaskStepMethWrapper") == 0 &&
             (str_self || (str_self = PyUnicode_InternFromString("__self__"))))
        self = PyObject_GetAttr(cb, str_self); /* (a C getter) */
    PyObject *type = imported_type(&task_type, "asyncio.tasks", "Task"); /* (the type asyncio's tasks are) */
    if (self && (!type || !PyObject_TypeCheck(self, (PyTypeObject *)type)))
        Py_CLEAR(self);
    return self;
}

void oc_task_wake(void) {
    PyObject *exc = PyErr_GetRaisedException();
    PyFrameObject *f = PyEval_GetFrame(); /* (call_soon's, borrowed: its start is this event) */
    if (!str_callback)
        str_callback = PyUnicode_InternFromString("callback");
    PyObject *cb = f && str_callback ? PyFrame_GetVar(f, str_callback) : NULL;
    PyObject *task = cb ? task_of_callback(cb) : NULL;
    Py_XDECREF(cb);
    PyErr_Clear();
    PyErr_SetRaisedException(exc);
    if (!task)
        return;
    uint32_t key = key_of(task);
    Py_DECREF(task);
    put_mark(oc_now(), key, OC_MARK_WAKE);
}

void oc_task_unwind(oc_tbuf *b, uint32_t depth, PyObject *exc) {
    if (!b || b->step_depth != depth || !exc)
        return;
    PyObject *cancelled = imported_type(&cancelled_error, "asyncio.exceptions", "CancelledError");
    if (cancelled && PyObject_TypeCheck(exc, (PyTypeObject *)cancelled))
        put_mark(oc_now(), OC_NO_CODE, OC_MARK_CANCELLED);
}
