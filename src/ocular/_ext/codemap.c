/* codemap.c -- per-code data beside the code objects: the hash map of codemap.h and the one code watcher
 * (PyCode_AddWatcher, CPython 3.12+) that removes a destroyed code object's entries from every map.
 *
 * Why not co_extra (PyUnstable_Code_SetExtra): CPython sizes a code object's extra block for every index
 * registered so far and, when the code object dies, calls every index's free function -- with NULL for the
 * indexes nobody set.  So hanging our data on each code object made CPython call a program's own co_extra
 * free function for every code object we touched; a free function that is a ctypes thunk, freed at shutdown
 * before the last code objects, then crashed the interpreter at exit (CPython's test_code does this).  A
 * watcher also lets the code table keep borrowed pointers instead of one weak reference (a GC object) per
 * code object.
 *
 * The map: linear probing, at most half full, backward-shift deletion (no tombstones).  Reads and writes
 * happen with the GIL held: the callbacks, registration and the watcher all run with it. */
#include "codemap.h"
#include <stdlib.h>

#define MIN_BITS 10

static oc_codemap *maps;  /* the maps the watcher serves */
static int watcher_id = -1;

static int alloc_slots(oc_codemap *m, unsigned bits) {
    oc_cmslot *s = calloc((size_t)1 << bits, sizeof *s);
    if (!s)
        return -1;
    m->slots = s;
    m->mask = ((size_t)1 << bits) - 1;
    m->shift = 64 - bits;
    m->count = 0;
    return 0;
}

static void insert_new(oc_codemap *m, PyObject *key, void *val) {
    size_t i = oc_codemap_home(m, key);
    while (m->slots[i].key)
        i = (i + 1) & m->mask;
    m->slots[i].key = key;
    m->slots[i].val = val;
    m->count++;
}

static int grow(oc_codemap *m) {
    oc_cmslot *old = m->slots;
    size_t n = m->mask + 1;
    if (alloc_slots(m, 64 - m->shift + 1) < 0) {
        m->slots = old;
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (old[i].key)
            insert_new(m, old[i].key, old[i].val);
    free(old);
    return 0;
}

int oc_codemap_put(oc_codemap *m, PyObject *key, void *val) {
    size_t i = oc_codemap_home(m, key);
    for (; m->slots[i].key; i = (i + 1) & m->mask)
        if (m->slots[i].key == key) {
            m->slots[i].val = val;
            return 0;
        }
    if ((m->count + 1) * 2 > m->mask + 1) {
        if (grow(m) < 0)
            return -1;
    }
    insert_new(m, key, val);
    return 0;
}

/* Remove `key`; returns its value (NULL: it had none). */
static void *take(oc_codemap *m, const PyObject *key) {
    size_t i = oc_codemap_home(m, key);
    while (m->slots[i].key != key) {
        if (!m->slots[i].key)
            return NULL;
        i = (i + 1) & m->mask;
    }
    void *val = m->slots[i].val;
    /* backward shift: move up each later entry of the run whose home is not in (i, j] */
    for (size_t j = i;;) {
        j = (j + 1) & m->mask;
        PyObject *k = m->slots[j].key;
        if (!k)
            break;
        size_t h = oc_codemap_home(m, k);
        int stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
        if (!stays) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i].key = NULL;
    m->slots[i].val = NULL;
    m->count--;
    return val;
}

static int on_code_event(PyCodeEvent event, PyCodeObject *co) {
    if (event != PY_CODE_EVENT_DESTROY)
        return 0;
    for (oc_codemap *m = maps; m; m = m->next) {
        void *val = take(m, (PyObject *)co);
        if (val && m->free_val)
            m->free_val(val);
    }
    return 0;
}

int oc_codemap_init(oc_codemap *m, void (*free_val)(void *)) {
    if (watcher_id < 0) {
        watcher_id = PyCode_AddWatcher(on_code_event);
        if (watcher_id < 0) {
            PyErr_Clear();
            PyErr_SetString(PyExc_RuntimeError,
                            "ocular: no code watcher slot left (CPython allows 8 per interpreter, all in use): "
                            "Ocular needs one to learn when code objects are destroyed");
            return -1;
        }
    }
    if (alloc_slots(m, MIN_BITS) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    m->free_val = free_val;
    m->next = maps;
    maps = m;
    return 0;
}
