/* compat.h -- every difference between the CPython versions Ocular builds for (3.12-3.15) that the C code
 * must know at compile time, and every read of an interpreter-internal field, in one place.  What can be
 * read at run time is read there instead (event numbers from sys.monitoring.events, opcode names and
 * inline cache sizes from dis/opcode: ocular/__init__.py, _adaptive.py).
 *
 * Internal reads, each checked by the tests on every version:
 *   - oc_depth: the frame depth from PyThreadState's py_recursion_limit - py_recursion_remaining (the
 *     record's payload that pairs a return with its call: tests/test_timeline.py, test_stress.py);
 *   - oc_current_iframe: the executing _PyInterpreterFrame (3.12: through ts->cframe; 3.13+: ts->current_frame),
 *     for the USDT line probe's offset (tests/test_usdt.py).
 */
#ifndef OCULAR_COMPAT_H
#define OCULAR_COMPAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if PY_VERSION_HEX < 0x030C0000
#error "Ocular needs CPython 3.12 or newer (sys.monitoring)"
#endif
#ifdef Py_GIL_DISABLED
#error "Ocular needs the GIL: the free-threaded build is not supported yet"
#endif

/* 3.13 made these public under new names */
#if PY_VERSION_HEX >= 0x030D0000
#define oc_tstate_unchecked() PyThreadState_GetUnchecked()
#define oc_is_finalizing() Py_IsFinalizing()
#else
#define oc_tstate_unchecked() _PyThreadState_UncheckedGet()
#define oc_is_finalizing() _Py_IsFinalizing()
#endif

/* the weak reference `ref` refers to `obj` (alive: the caller holds it); 3.13 deprecated
 * PyWeakref_GetObject for PyWeakref_GetRef, which returns a new reference */
static inline int oc_weakref_is(PyObject *ref, PyObject *obj) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *o = NULL;
    if (PyWeakref_GetRef(ref, &o) < 0)
        PyErr_Clear();
    Py_XDECREF(o); /* (only compared) */
    return o == obj;
#else
    return PyWeakref_GetObject(ref) == obj;
#endif
}

/* the Python frame depth of a thread (internal fields of PyThreadState) */
static inline uint32_t oc_depth(const PyThreadState *ts) {
    return (uint32_t)(ts->py_recursion_limit - ts->py_recursion_remaining);
}

/* the executing interpreter frame of this thread, or NULL (internal fields) */
static inline struct _PyInterpreterFrame *oc_current_iframe(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return PyThreadState_GetUnchecked()->current_frame;
#else
    PyThreadState *ts = _PyThreadState_UncheckedGet();
    return ts->cframe ? ts->cframe->current_frame : NULL;
#endif
}

#endif
