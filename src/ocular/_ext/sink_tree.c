/* sink_tree.c -- the aggregated call tree: a sink that folds the renderer's begin/end events into one
 * tree per thread, which results.c exports to Python (`_ocular._calltree()`).
 *
 * A node is (parent node, code id) with its calls, total and self nanoseconds; one thread's nodes are
 * children of that thread's root node (code OC_TREE_ROOT).  Times are the timeline's: wall-clock
 * nanoseconds between a frame's begin and end, as the JSON and Perfetto outputs show them; self time is
 * total minus the totals of the frame's callees (the recorder's pauses are slices of their own, so a
 * pause is a child and never any function's self time).  Cost per event is constant: one hash lookup
 * of (parent, code) on begin, a few additions on end.  The pstats, folded, pprof, Firefox Profiler and
 * HTML outputs are written from this tree in Python (ocular._formats).
 *
 * Runs on the renderer (no GIL, no Python API); results.c exports the tree to Python (oc_tree_view_get).
 */
#include "render.h"
#include <stdlib.h>
#include <string.h>



typedef struct {
    uint32_t node;
    uint64_t begin_ns, child_ns;
} tframe;


static struct {
    oc_tree_node *nodes;
    uint32_t n, cap;
    uint32_t *hash;  /* open addressing: 1 + node index, 0 = empty */
    uint32_t hcap;   /* a power of two */
    tframe *stack;
    uint32_t depth, scap;
    oc_tree_thread *threads;
    uint32_t nthreads, tcap;
    uint32_t cur;     /* the thread being rendered (index in threads) */
    long cur_tid;
    uint32_t merged;  /* index of the merged threads' tree, UINT32_MAX: none yet */
    uint32_t nmerged; /* threads in it */
    int failed;       /* out of memory: the export says so */
} tree_st;

static inline uint32_t hash_of(uint32_t parent, uint32_t code) {
    uint64_t k = ((uint64_t)parent << 32 | code) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k >> 32);
}

static int rehash(uint32_t cap) {
    uint32_t *h = calloc(cap, sizeof *h);
    if (!h)
        return -1;
    for (uint32_t i = 0; i < tree_st.n; i++) {
        uint32_t s = hash_of(tree_st.nodes[i].parent, tree_st.nodes[i].code) & (cap - 1);
        while (h[s])
            s = (s + 1) & (cap - 1);
        h[s] = i + 1;
    }
    free(tree_st.hash);
    tree_st.hash = h;
    tree_st.hcap = cap;
    return 0;
}

/* the node (parent, code), made if new; UINT32_MAX on memory failure */
static uint32_t child(uint32_t parent, uint32_t code) {
    if (tree_st.hcap) {
        uint32_t s = hash_of(parent, code) & (tree_st.hcap - 1);
        for (;;) {
            uint32_t v = tree_st.hash[s];
            if (!v)
                break;
            oc_tree_node *nd = &tree_st.nodes[v - 1];
            if (nd->parent == parent && nd->code == code)
                return v - 1;
            s = (s + 1) & (tree_st.hcap - 1);
        }
    }
    if (tree_st.n == tree_st.cap) {
        uint32_t cap = tree_st.cap ? tree_st.cap * 2 : 1024;
        oc_tree_node *nn = realloc(tree_st.nodes, (size_t)cap * sizeof *nn);
        if (!nn)
            return UINT32_MAX;
        tree_st.nodes = nn;
        tree_st.cap = cap;
    }
    if ((uint64_t)(tree_st.n + 1) * 2 > tree_st.hcap && rehash(tree_st.hcap ? tree_st.hcap * 2 : 2048) < 0)
        return UINT32_MAX;
    uint32_t i = tree_st.n++;
    tree_st.nodes[i] = (oc_tree_node){parent, code, 0, 0, 0};
    uint32_t s = hash_of(parent, code) & (tree_st.hcap - 1);
    while (tree_st.hash[s])
        s = (s + 1) & (tree_st.hcap - 1);
    tree_st.hash[s] = i + 1;
    return i;
}

static void tree_reset(void) {
    free(tree_st.nodes);
    free(tree_st.hash);
    free(tree_st.stack);
    free(tree_st.threads);
    memset(&tree_st, 0, sizeof tree_st);
    tree_st.merged = UINT32_MAX;
}

static void tree_header(oc_out *o) {
    (void)o;
    tree_reset();
}

/* a thread entry with a root of its own, made current */
static oc_tree_thread *new_thread(long tid, uint64_t ts) {
    if (tree_st.nthreads == tree_st.tcap) {
        uint32_t cap = tree_st.tcap ? tree_st.tcap * 2 : 16;
        oc_tree_thread *t = realloc(tree_st.threads, (size_t)cap * sizeof *t);
        if (!t)
            return NULL;
        tree_st.threads = t;
        tree_st.tcap = cap;
    }
    uint32_t root = child(OC_TREE_ROOT, (uint32_t)tree_st.nthreads); /* roots: unique (no parent, index) */
    if (root == UINT32_MAX)
        return NULL;
    tree_st.nodes[root].code = OC_TREE_ROOT;
    tree_st.cur = tree_st.nthreads;
    tree_st.cur_tid = tid;
    oc_tree_thread *t = &tree_st.threads[tree_st.nthreads++];
    *t = (oc_tree_thread){tid, root, ts, ts};
    return t;
}

/* the renderer goes thread by thread: a new tid starts a new root (past OC_TREE_THREADS, the merged one) */
static oc_tree_thread *thread_for(long tid, uint64_t ts) {
    if (tree_st.nthreads && tree_st.cur_tid == tid)
        return &tree_st.threads[tree_st.cur];
    tree_st.depth = 0;
    if (tree_st.nthreads - (tree_st.merged != UINT32_MAX) < OC_TREE_THREADS)
        return new_thread(tid, ts);
    if (tree_st.merged == UINT32_MAX) {
        if (!new_thread(0, ts))
            return NULL;
        tree_st.merged = tree_st.cur;
    }
    oc_tree_thread *m = &tree_st.threads[tree_st.merged];
    tree_st.nmerged++;
    tree_st.cur = tree_st.merged;
    tree_st.cur_tid = tid;
    if (ts < m->first_ns)
        m->first_ns = ts;
    return m;
}

static void tree_begin(oc_out *o, long tid, uint64_t ts, uint32_t code_id) {
    (void)o;
    oc_tree_thread *t = thread_for(tid, ts);
    if (!t) {
        tree_st.failed = 1;
        return;
    }
    if (tree_st.depth == tree_st.scap) {
        uint32_t cap = tree_st.scap ? tree_st.scap * 2 : 256;
        tframe *s = realloc(tree_st.stack, (size_t)cap * sizeof *s);
        if (!s) {
            tree_st.failed = 1;
            return;
        }
        tree_st.stack = s;
        tree_st.scap = cap;
    }
    uint32_t parent = tree_st.depth ? tree_st.stack[tree_st.depth - 1].node : t->root;
    uint32_t nd = parent == UINT32_MAX ? UINT32_MAX : child(parent, code_id);
    if (nd == UINT32_MAX)
        tree_st.failed = 1; /* still pushed (as nothing), so the ends stay paired */
    tree_st.stack[tree_st.depth++] = (tframe){nd, ts, 0};
}

static void tree_end(oc_out *o, long tid, uint64_t ts) {
    (void)o, (void)tid;
    if (!tree_st.depth)
        return;
    tframe *f = &tree_st.stack[--tree_st.depth];
    uint64_t d = ts > f->begin_ns ? ts - f->begin_ns : 0;
    if (f->node != UINT32_MAX) {
        oc_tree_node *nd = &tree_st.nodes[f->node];
        nd->calls++;
        nd->total += d;
        nd->self += d > f->child_ns ? d - f->child_ns : 0;
    }
    if (tree_st.depth)
        tree_st.stack[tree_st.depth - 1].child_ns += d;
    else if (tree_st.nthreads) {
        oc_tree_thread *t = &tree_st.threads[tree_st.cur];
        tree_st.nodes[t->root].total += d;
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

const char *oc_tree_thread_name(long tid) {
    for (uint32_t i = 0; i < rmeta.nthreads; i++)
        if (oc_render_thread_tid(i) == tid && rmeta.threads[i].name_raw)
            return rmeta.threads[i].name_raw;
    return "";
}

void oc_tree_view_get(oc_tree_view *v) {
    *v = (oc_tree_view){.nodes = tree_st.nodes, .n = tree_st.n, .threads = tree_st.threads, .nthreads = tree_st.nthreads,
                        .merged = tree_st.merged, .nmerged = tree_st.nmerged, .failed = tree_st.failed};
}
