/* sink_tree.c -- the aggregated call tree: a sink that folds the renderer's begin/end events into one
 * tree per thread, and its export to Python (`_ocular._calltree()`).
 *
 * A node is (parent node, code id) with its calls, total and self nanoseconds; one thread's nodes are
 * children of that thread's root node (code OC_TREE_ROOT).  Times are the timeline's: wall-clock
 * nanoseconds between a frame's begin and end, as the JSON and Perfetto outputs show them; self time is
 * total minus the totals of the frame's callees (the recorder's pauses are slices of their own, so a
 * pause is a child and never any function's self time).  Cost per event is constant: one hash lookup
 * of (parent, code) on begin, a few additions on end.  The pstats, folded, pprof, Firefox Profiler and
 * HTML outputs are written from this tree in Python (ocular._formats).
 *
 * Runs on the renderer (no GIL, no Python API) except oc_tree_export and oc_tree_release.
 */
#include "ocular.h"
#include <stdlib.h>
#include <string.h>

#define OC_TREE_ROOT UINT32_MAX
/* threads with a tree of their own; the threads rendered after them share one tree, "N threads (merged)"
 * (tid 0): the memory of a program that started 80,000 short threads is that of 1,000 (pstats sums the
 * threads anyway, so its figures are the same; the per-thread formats show the merged ones as one) */
#define OC_TREE_THREADS 1000

typedef struct {
    uint32_t parent, code;
    uint64_t calls, total, self;
} tnode;

typedef struct {
    uint32_t node;
    uint64_t begin_ns, child_ns;
} tframe;

typedef struct {
    long tid;
    uint32_t root;
    uint64_t first_ns, last_ns;
} tthread;

static struct {
    tnode *nodes;
    uint32_t n, cap;
    uint32_t *hash;  /* open addressing: 1 + node index, 0 = empty */
    uint32_t hcap;   /* a power of two */
    tframe *stack;
    uint32_t depth, scap;
    tthread *threads;
    uint32_t nthreads, tcap;
    uint32_t cur;     /* the thread being rendered (index in threads) */
    long cur_tid;
    uint32_t merged;  /* index of the merged threads' tree, UINT32_MAX: none yet */
    uint32_t nmerged; /* threads in it */
    int failed;       /* out of memory: the export says so */
} T;

static inline uint32_t hash_of(uint32_t parent, uint32_t code) {
    uint64_t k = ((uint64_t)parent << 32 | code) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k >> 32);
}

static int rehash(uint32_t cap) {
    uint32_t *h = calloc(cap, sizeof *h);
    if (!h)
        return -1;
    for (uint32_t i = 0; i < T.n; i++) {
        uint32_t s = hash_of(T.nodes[i].parent, T.nodes[i].code) & (cap - 1);
        while (h[s])
            s = (s + 1) & (cap - 1);
        h[s] = i + 1;
    }
    free(T.hash);
    T.hash = h;
    T.hcap = cap;
    return 0;
}

/* the node (parent, code), made if new; UINT32_MAX on memory failure */
static uint32_t child(uint32_t parent, uint32_t code) {
    if (T.hcap) {
        uint32_t s = hash_of(parent, code) & (T.hcap - 1);
        for (;;) {
            uint32_t v = T.hash[s];
            if (!v)
                break;
            tnode *nd = &T.nodes[v - 1];
            if (nd->parent == parent && nd->code == code)
                return v - 1;
            s = (s + 1) & (T.hcap - 1);
        }
    }
    if (T.n == T.cap) {
        uint32_t cap = T.cap ? T.cap * 2 : 1024;
        tnode *nn = realloc(T.nodes, (size_t)cap * sizeof *nn);
        if (!nn)
            return UINT32_MAX;
        T.nodes = nn;
        T.cap = cap;
    }
    if ((uint64_t)(T.n + 1) * 2 > T.hcap && rehash(T.hcap ? T.hcap * 2 : 2048) < 0)
        return UINT32_MAX;
    uint32_t i = T.n++;
    T.nodes[i] = (tnode){parent, code, 0, 0, 0};
    uint32_t s = hash_of(parent, code) & (T.hcap - 1);
    while (T.hash[s])
        s = (s + 1) & (T.hcap - 1);
    T.hash[s] = i + 1;
    return i;
}

static void tree_reset(void) {
    free(T.nodes);
    free(T.hash);
    free(T.stack);
    free(T.threads);
    memset(&T, 0, sizeof T);
    T.merged = UINT32_MAX;
}

static void tree_header(oc_out *o) {
    (void)o;
    tree_reset();
}

/* a thread entry with a root of its own, made current */
static tthread *new_thread(long tid, uint64_t ts) {
    if (T.nthreads == T.tcap) {
        uint32_t cap = T.tcap ? T.tcap * 2 : 16;
        tthread *t = realloc(T.threads, (size_t)cap * sizeof *t);
        if (!t)
            return NULL;
        T.threads = t;
        T.tcap = cap;
    }
    uint32_t root = child(OC_TREE_ROOT, (uint32_t)T.nthreads); /* roots: unique (no parent, index) */
    if (root == UINT32_MAX)
        return NULL;
    T.nodes[root].code = OC_TREE_ROOT;
    T.cur = T.nthreads;
    T.cur_tid = tid;
    tthread *t = &T.threads[T.nthreads++];
    *t = (tthread){tid, root, ts, ts};
    return t;
}

/* the renderer goes thread by thread: a new tid starts a new root (past OC_TREE_THREADS, the merged one) */
static tthread *thread_for(long tid, uint64_t ts) {
    if (T.nthreads && T.cur_tid == tid)
        return &T.threads[T.cur];
    T.depth = 0;
    if (T.nthreads - (T.merged != UINT32_MAX) < OC_TREE_THREADS)
        return new_thread(tid, ts);
    if (T.merged == UINT32_MAX) {
        if (!new_thread(0, ts))
            return NULL;
        T.merged = T.cur;
    }
    tthread *m = &T.threads[T.merged];
    T.nmerged++;
    T.cur = T.merged;
    T.cur_tid = tid;
    if (ts < m->first_ns)
        m->first_ns = ts;
    return m;
}

static void tree_begin(oc_out *o, long tid, uint64_t ts, uint32_t code_id) {
    (void)o;
    tthread *t = thread_for(tid, ts);
    if (!t) {
        T.failed = 1;
        return;
    }
    if (T.depth == T.scap) {
        uint32_t cap = T.scap ? T.scap * 2 : 256;
        tframe *s = realloc(T.stack, (size_t)cap * sizeof *s);
        if (!s) {
            T.failed = 1;
            return;
        }
        T.stack = s;
        T.scap = cap;
    }
    uint32_t parent = T.depth ? T.stack[T.depth - 1].node : t->root;
    uint32_t nd = parent == UINT32_MAX ? UINT32_MAX : child(parent, code_id);
    if (nd == UINT32_MAX)
        T.failed = 1; /* still pushed (as nothing), so the ends stay paired */
    T.stack[T.depth++] = (tframe){nd, ts, 0};
}

static void tree_end(oc_out *o, long tid, uint64_t ts) {
    (void)o, (void)tid;
    if (!T.depth)
        return;
    tframe *f = &T.stack[--T.depth];
    uint64_t d = ts > f->begin_ns ? ts - f->begin_ns : 0;
    if (f->node != UINT32_MAX) {
        tnode *nd = &T.nodes[f->node];
        nd->calls++;
        nd->total += d;
        nd->self += d > f->child_ns ? d - f->child_ns : 0;
    }
    if (T.depth)
        T.stack[T.depth - 1].child_ns += d;
    else if (T.nthreads) {
        tthread *t = &T.threads[T.cur];
        T.nodes[t->root].total += d;
        if (ts > t->last_ns)
            t->last_ns = ts;
    }
}

static void tree_loop(oc_out *o, long tid, uint64_t ts, uint32_t code_id, int line, uint32_t offset, uint32_t insns,
                      uint64_t cycles, uint64_t ns) {
    (void)o, (void)tid, (void)ts, (void)code_id, (void)line, (void)offset, (void)insns, (void)cycles, (void)ns;
}

static void tree_footer(oc_out *o, const char *clock, int precise) { (void)o, (void)clock, (void)precise; }

const oc_sink oc_sink_tree = {"tree", tree_header, tree_begin, tree_end, tree_loop, tree_footer, NULL, NULL, NULL, NULL, NULL, NULL};

void oc_tree_release(void) { tree_reset(); }

static const char *thread_name(long tid) {
    for (uint32_t i = 0; i < R.nthreads; i++)
        if (R.threads[i].tid == tid && R.threads[i].name_raw)
            return R.threads[i].name_raw;
    return "";
}

static PyObject *str_or_none(const char *s) {
    if (!s)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

/* {"nodes": [(parent, code, calls, total_ns, self_ns)], "threads": [(tid, name, root, first_ns, last_ns)],
 *  "codes": [(qualname, filename, firstlineno) or None by code id, up to the highest id used]};
 * parent and code -1 for a root */
PyObject *oc_tree_export(void) {
    if (T.failed) {
        PyErr_SetString(PyExc_MemoryError, "ocular: out of memory building the call tree");
        return NULL;
    }
    uint32_t ncodes = 0; /* the code table up to the highest id used */
    for (uint32_t i = 0; i < T.n; i++)
        if (T.nodes[i].code != OC_TREE_ROOT && T.nodes[i].code >= ncodes)
            ncodes = T.nodes[i].code + 1;
    if (ncodes > R.ncodes)
        ncodes = R.ncodes;
    PyObject *nodes = PyList_New(T.n), *threads = PyList_New(T.nthreads), *codes = PyList_New(ncodes);
    PyObject *d = NULL;
    if (!nodes || !threads || !codes)
        goto fail;
    for (uint32_t i = 0; i < T.n; i++) {
        tnode *nd = &T.nodes[i];
        PyObject *tup = Py_BuildValue("(llKKK)", nd->parent == OC_TREE_ROOT ? -1L : (long)nd->parent,
                                      nd->code == OC_TREE_ROOT ? -1L : (long)nd->code, (unsigned long long)nd->calls,
                                      (unsigned long long)nd->total, (unsigned long long)nd->self);
        if (!tup)
            goto fail;
        PyList_SET_ITEM(nodes, i, tup);
    }
    for (uint32_t i = 0; i < T.nthreads; i++) {
        tthread *t = &T.threads[i];
        PyObject *name = i == T.merged ? PyUnicode_FromFormat("%u threads (merged: past the first %d)", T.nmerged,
                                                              OC_TREE_THREADS)
                                       : str_or_none(thread_name(t->tid));
        if (!name)
            goto fail;
        PyObject *tup = Py_BuildValue("(lNlKK)", t->tid, name, (long)t->root, (unsigned long long)t->first_ns,
                                      (unsigned long long)t->last_ns);
        if (!tup)
            goto fail;
        PyList_SET_ITEM(threads, i, tup);
    }
    for (uint32_t i = 0; i < ncodes; i++) {
        oc_codeent *e = &R.codes[i];
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
