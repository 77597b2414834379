/*
 * _ocular_floor -- the "floor" for the Ocular benchmarks.
 *
 * Job: provide the cheapest possible sys.monitoring callback, so that the
 * benchmark can measure what CPython itself charges for dispatching a PEP 669
 * event to a C callable, independent of any work a tracer does.  Whatever a
 * real tracer (Ocular included) costs above this floor is the tracer's own
 * cost; nothing registered through sys.monitoring can be cheaper than this.
 *
 * callback() returns a new FloorCallback.  Instances are called through their
 * own per-instance vectorcall slot (Py_TPFLAGS_HAVE_VECTORCALL +
 * tp_vectorcall_offset), which is exactly how sys.monitoring invokes
 * callbacks (PyObject_Vectorcall).  The vectorcall function ignores its
 * arguments and returns None: no argument parsing, no allocation, no state.
 *
 * clocked() returns the same callable but for one thing: it reads the clock
 * Ocular reads per event (the TSC on x86-64, else CLOCK_MONOTONIC), so the
 * floor of any tracer that timestamps every event can be measured too
 * (RDTSC is not free: ~9.6 ns on the 2-core benchmark VM).
 *
 * Two small helpers for the benchmark live here too, so that it needs only
 * one compiled module:
 *   counter()           a callable like the floor that also counts its calls
 *                       (attribute .count); the runner uses one per event to
 *                       count the events a workload produces.
 *   measured_call(f, x) returns f(x); its C function
 *                       ocular_floor_measured_call is the region that
 *                       bench/callgrind.py collects (--toggle-collect), so
 *                       interpreter start-up and tracer set-up are excluded.
 *
 * Built by bench/build_floor.py (no setuptools); C11, clean under
 * -Wall -Wextra -Werror.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
} FloorCallback;

static PyObject *
floor_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                 PyObject *kwnames)
{
    (void)callable;
    (void)args;
    (void)nargsf;
    (void)kwnames;
    Py_RETURN_NONE;
}

/* the last clock reading, so that the compiler keeps the read */
static volatile uint64_t last_clock;

static PyObject *
clocked_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                   PyObject *kwnames)
{
    (void)callable;
    (void)args;
    (void)nargsf;
    (void)kwnames;
#if defined(__x86_64__) || defined(__i386__)
    last_clock = __rdtsc();
#else
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    last_clock = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
#endif
    Py_RETURN_NONE;
}

static void
floor_dealloc(PyObject *self)
{
    PyObject_Free(self);
}

static PyTypeObject FloorCallback_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_ocular_floor.FloorCallback",
    .tp_doc = "No-op callable: the cheapest possible sys.monitoring callback.",
    .tp_basicsize = sizeof(FloorCallback),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(FloorCallback, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = floor_dealloc,
};

/* ---- counter: a floor callback that counts its calls ------------------ */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    unsigned long long count;
} CountingCallback;

static PyObject *
counting_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                    PyObject *kwnames)
{
    (void)args;
    (void)nargsf;
    (void)kwnames;
#ifdef Py_GIL_DISABLED
    __atomic_fetch_add(&((CountingCallback *)callable)->count, 1,
                       __ATOMIC_RELAXED);
#else
    /* Callbacks run with the GIL held, so a plain increment is exact. */
    ((CountingCallback *)callable)->count++;
#endif
    Py_RETURN_NONE;
}

static PyObject *
counting_get_count(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(((CountingCallback *)self)->count);
}

static int
counting_set_count(PyObject *self, PyObject *value, void *closure)
{
    (void)closure;
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "cannot delete count");
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        return -1;
    }
    ((CountingCallback *)self)->count = v;
    return 0;
}

static PyGetSetDef counting_getset[] = {
    {"count", counting_get_count, counting_set_count,
     "Number of calls so far.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CountingCallback_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_ocular_floor.CountingCallback",
    .tp_doc = "Floor-like callable that counts its calls (.count).",
    .tp_basicsize = sizeof(CountingCallback),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(CountingCallback, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = floor_dealloc,
    .tp_getset = counting_getset,
};

static PyObject *
floor_counter(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    CountingCallback *self =
        PyObject_New(CountingCallback, &CountingCallback_Type);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = counting_vectorcall;
    self->count = 0;
    return (PyObject *)self;
}

/* ---- measured_call: the callgrind collection boundary ----------------- */

/* Not static and never inlined, so the symbol name is stable for
 * valgrind --toggle-collect=ocular_floor_measured_call. */
__attribute__((noinline, visibility("default"))) PyObject *
ocular_floor_measured_call(PyObject *func, PyObject *arg)
{
    return PyObject_CallOneArg(func, arg);
}

static PyObject *
floor_measured_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError,
                        "measured_call(func, arg) takes exactly 2 arguments");
        return NULL;
    }
    return ocular_floor_measured_call(args[0], args[1]);
}

/* ---- module ----------------------------------------------------------- */

/* a FloorCallback calling f */
static PyObject *
new_callback(vectorcallfunc f)
{
    FloorCallback *self = PyObject_New(FloorCallback, &FloorCallback_Type);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = f;
    return (PyObject *)self;
}

static PyObject *
floor_callback(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return new_callback(floor_vectorcall);
}

static PyObject *
floor_clocked(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return new_callback(clocked_vectorcall);
}

static PyMethodDef floor_methods[] = {
    {"clocked", floor_clocked, METH_NOARGS,
     "clocked() -> FloorCallback\n\n"
     "Like callback(), but each call reads the clock Ocular reads per event."},
    {"callback", floor_callback, METH_NOARGS,
     "callback() -> FloorCallback\n\n"
     "Return a new no-op callable to register with "
     "sys.monitoring.register_callback."},
    {"counter", floor_counter, METH_NOARGS,
     "counter() -> CountingCallback\n\n"
     "Return a new no-op callable that counts its calls in .count."},
    {"measured_call", (PyCFunction)(void (*)(void))floor_measured_call,
     METH_FASTCALL,
     "measured_call(func, arg) -> func(arg)\n\n"
     "Call func(arg) inside the C function ocular_floor_measured_call, the\n"
     "region bench/callgrind.py measures."},
    {NULL, NULL, 0, NULL},
};

static int
floor_exec(PyObject *module)
{
    if (PyType_Ready(&FloorCallback_Type) < 0
        || PyType_Ready(&CountingCallback_Type) < 0) {
        return -1;
    }
    Py_INCREF(&FloorCallback_Type);
    if (PyModule_AddObject(module, "FloorCallback",
                           (PyObject *)&FloorCallback_Type) < 0) {
        Py_DECREF(&FloorCallback_Type);
        return -1;
    }
    Py_INCREF(&CountingCallback_Type);
    if (PyModule_AddObject(module, "CountingCallback",
                           (PyObject *)&CountingCallback_Type) < 0) {
        Py_DECREF(&CountingCallback_Type);
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot floor_slots[] = {
    {Py_mod_exec, (void *)floor_exec},
#if PY_VERSION_HEX >= 0x030D0000
    /* Stateless and thread-agnostic: fine without the GIL (3.13t). */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef floor_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_ocular_floor",
    .m_doc = "Cheapest possible sys.monitoring callback (benchmark floor)\n"
             "plus an event counter and a callgrind measurement boundary.",
    .m_size = 0,
    .m_methods = floor_methods,
    .m_slots = floor_slots,
};

PyMODINIT_FUNC
PyInit__ocular_floor(void)
{
    return PyModuleDef_Init(&floor_module);
}
