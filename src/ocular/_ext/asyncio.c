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
 */
#include "ocular.h"

#define OC_TASK_NAMES 10000

static PyObject *current_task; /* _asyncio.current_task (a strong reference), once asyncio was imported */
static PyObject *names;        /* task name -> its entry's code id (a dict) */
static PyObject *unnamed;      /* a coroutine's code id -> the entry of its unnamed tasks (a dict) */
static uint32_t other_id = UINT32_MAX;
static PyTypeObject *get_name_type; /* the last task type seen, and its get_name if that is a C method */
static PyObject *get_name_meth;

void oc_tasks_reset(void) {
    Py_CLEAR(current_task);
    Py_CLEAR(names);
    Py_CLEAR(unnamed);
    Py_CLEAR(get_name_meth);
    get_name_type = NULL;
    other_id = UINT32_MAX;
}

/* _asyncio.current_task, looked up until the program imports asyncio (NULL: not yet) */
static PyObject *current_task_fn(void) {
    if (!current_task) {
        PyObject *key = PyUnicode_FromString("_asyncio");
        PyObject *mod = key ? PyImport_GetModule(key) : NULL; /* (imports nothing) */
        Py_XDECREF(key);
        if (mod) {
            current_task = PyObject_GetAttrString(mod, "current_task");
            Py_DECREF(mod);
        }
        PyErr_Clear();
    }
    return current_task;
}

/* A task's name without running any of the program's Python code: Task.get_name when it is the C
 * method (asyncio's own tasks, uvloop's), else the `_name` attribute asyncio's Python Task keeps (read
 * without __getattr__); NULL if neither (a new reference otherwise). */
static PyObject *name_of(PyObject *task) {
    if (Py_TYPE(task) != get_name_type) { /* (one task type in nearly every program: looked up once) */
        Py_CLEAR(get_name_meth);
        get_name_type = Py_TYPE(task);
        PyObject *meth = PyObject_GetAttrString((PyObject *)get_name_type, "get_name");
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
    PyObject *table = names, *key = name, *owned = NULL;
    if (default_name(name)) {
        if (!unnamed && !(unnamed = PyDict_New()))
            return UINT32_MAX;
        table = unnamed;
        key = owned = PyLong_FromUnsignedLong(coro->id);
        PyObject *q = ((PyCodeObject *)coro->code)->co_qualname;
        name = q && PyUnicode_Check(q) ? PyUnicode_FromFormat("Task (%U)", q) : PyUnicode_FromString("Task");
        if (!key || !name) {
            Py_XDECREF(owned);
            Py_XDECREF(name);
            return UINT32_MAX;
        }
    } else {
        if (!names && !(names = PyDict_New()))
            return UINT32_MAX;
        table = names;
        Py_INCREF(name);
    }
    uint32_t id = UINT32_MAX;
    PyObject *v = PyDict_GetItemWithError(table, key); /* (borrowed) */
    if (v) {
        id = (uint32_t)PyLong_AsUnsignedLong(v);
    } else if (!PyErr_Occurred()) {
        id = new_entry(table, key, name);
    }
    Py_XDECREF(owned);
    Py_DECREF(name);
    return id;
}

/* a new entry for tasks named `name`, under `key` in `table` */
static uint32_t new_entry(PyObject *table, PyObject *key, PyObject *name) {
    if (PyDict_GET_SIZE(table) >= OC_TASK_NAMES) {
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
    PyObject *idobj = PyLong_FromUnsignedLong(id);
    if (!idobj || PyDict_SetItem(table, key, idobj) < 0) {
        Py_XDECREF(idobj);
        return UINT32_MAX;
    }
    Py_DECREF(idobj);
    return id;
}

/* the code id of the current task's entry, or UINT32_MAX (no running loop, no task, no asyncio) */
static uint32_t current_task_id(oc_codeextra *coro) {
    PyObject *fn = current_task_fn();
    if (!fn)
        return UINT32_MAX;
    PyObject *task = PyObject_CallNoArgs(fn); /* (C: no Python code runs; RuntimeError without a loop) */
    uint32_t id = UINT32_MAX;
    if (task && task != Py_None) {
        PyObject *name = name_of(task);
        if (name) {
            id = id_of(name, coro);
            Py_DECREF(name);
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
    uint32_t id = current_task_id(coro);
    PyErr_SetRaisedException(exc);
    if (id == UINT32_MAX)
        return 0;
    oc_rec *r = oc_reserve_rec();
    if (!r)
        return 0;
    r->ts = oc_now();
    r->code_id = id;
    r->info = OC_INFO(K_MARK, OC_MARK_TASK);
    return 1;
}
