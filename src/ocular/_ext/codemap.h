/* codemap.h -- per-code data kept beside the code objects, not in them: an open-addressing hash map from
 * a code object's address to a pointer of ours, whose entries a code watcher removes (and hands to the map's
 * free function) when the code object is destroyed.  See codemap.c for why not co_extra. */
#ifndef OCULAR_CODEMAP_H
#define OCULAR_CODEMAP_H

#include <Python.h>
#include <stdint.h>

typedef struct {
    PyObject *key; /* the code object (borrowed: the watcher removes the entry before it goes); NULL: free */
    void *val;
} oc_cmslot;

typedef struct oc_codemap {
    oc_cmslot *slots;
    size_t mask;             /* capacity - 1 (a power of two) */
    size_t count;
    unsigned shift;          /* 64 - log2(capacity): the hash's top bits index the table */
    void (*free_val)(void *val); /* called (GIL held) for the value of a code object being destroyed */
    struct oc_codemap *next; /* the maps the watcher serves */
} oc_codemap;

/* Fibonacci hashing of the address: multiply, keep the top bits. */
static inline size_t oc_codemap_home(const oc_codemap *m, const PyObject *key) {
    return (size_t)(((uint64_t)(uintptr_t)key * UINT64_C(0x9E3779B97F4A7C15)) >> m->shift);
}

/* The value kept for `key`, or NULL.  GIL held (every write happens with it). */
static inline void *oc_codemap_get(const oc_codemap *m, const PyObject *key) {
    size_t i = oc_codemap_home(m, key);
    for (;;) {
        const oc_cmslot *s = &m->slots[i];
        if (__builtin_expect(s->key == key, 1))
            return s->val;
        if (!s->key)
            return NULL;
        i = (i + 1) & m->mask;
    }
}

/* Make `m` a map (empty) served by the code watcher (added on the first call); -1 with an exception set. */
int oc_codemap_init(oc_codemap *m, void (*free_val)(void *));
/* Keep `val` for `key` (replacing any value, which is not freed); -1 on out-of-memory (no exception). */
int oc_codemap_put(oc_codemap *m, PyObject *key, void *val);

#endif
