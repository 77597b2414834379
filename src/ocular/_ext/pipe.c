/* pipe.c -- rendering on two CPUs: the sink's work handed to a second thread.
 *
 * Rendering is two halves of about equal cost: rebuilding the stacks and the statistics (render.c),
 * and encoding the trace (a sink: JSON formatting, or .pftrace's packets and compression).  Where a
 * second CPU is free (at stop, after the program; in `convert`), oc_pipe_start puts a queueing sink in
 * the renderer's place: each sink call becomes an operation of a few words in a block, full blocks go
 * to a thread (ocular-encode) that makes the real calls, in order.  The output is the one the sink makes when called
 * directly; the two halves run side by side, so rendering takes the longer half's time instead of the
 * sum.  Only the sink thread touches the output (oc_out) until oc_pipe_end has joined it.
 *
 * Blocks are handed over under a mutex (one lock per block of operations); the renderer waits only when
 * all QNB blocks are full, the sink thread only when none is.
 */
#include "render.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { Q_TID, Q_BEGIN, Q_END, Q_SLICE, Q_LOOP, Q_LOOP_RUN, Q_BEGIN_CUT, Q_THREAD_END, Q_FLOW, Q_INSTANT };

/* An operation is 2-6 words: the first holds the kind (low 8 bits), the code id (bits 8-39) and a
 * slice's cut flag (bit 40); times and figures follow.  The thread id is an operation of its own,
 * written when it changes: 16 bytes for a slice's begin or end, 24 for a whole slice. */
#define QBLOCK 131072 /* words per block (1 MiB; OCULAR_TEST_PIPE_BLOCK: fewer, for tests) */
#define QNB 4        /* blocks */
#define QMAX 6       /* words of the longest operation */

static struct {
    const oc_sink *real;
    oc_out *out;
    oc_sink sink;          /* the queueing sink the renderer calls meanwhile */
    uint64_t *ring;        /* QNB blocks of `block` words */
    uint32_t block;
    uint32_t fill[QNB];    /* words in each published block */
    uint32_t blk;          /* the renderer's block */
    uint64_t *wp;          /* the renderer's next word in it */
    uint64_t *wlim;        /* an operation starting past this may not fit; NULL: the thread op is due */
    long tid;              /* the thread of the renderer's last operation */
    uint32_t cons;         /* the block the sink thread takes next */
    uint32_t ready;        /* blocks published and not yet done by the sink thread */
    int done;
    pthread_mutex_t lock;
    pthread_cond_t more, room;
    pthread_t thread;
} pipe_st;

static long run_block(const uint64_t *w, uint32_t n, long tid) {
    const oc_sink *s = pipe_st.real;
    oc_out *o = pipe_st.out;
    for (const uint64_t *end = w + n; w < end;) {
        uint64_t h = *w++;
        uint32_t code = (uint32_t)(h >> 8);
        switch ((uint8_t)h) {
        case Q_TID:
            tid = (long)*w++;
            break;
        case Q_BEGIN:
            s->begin(o, tid, *w++, code);
            break;
        case Q_END:
            s->end(o, tid, *w++);
            break;
        case Q_SLICE:
            s->slice(o, tid, w[0], w[1], code, (int)(h >> 40) & 1);
            w += 2;
            break;
        case Q_LOOP:
            s->loop(o, tid, w[0], code, (int)(int32_t)w[1], (uint32_t)(w[1] >> 32), (uint32_t)w[2], w[3], w[4]);
            w += 5;
            break;
        case Q_LOOP_RUN:
            s->loop_run(o, tid, w[0], w[1], code, (int)(int32_t)w[2], (uint32_t)(w[2] >> 32), w[3], w[4]);
            w += 5;
            break;
        case Q_BEGIN_CUT:
            s->begin_cut(o, tid, *w++, code);
            break;
        case Q_THREAD_END:
            s->thread_end(o, tid);
            break;
        case Q_FLOW:
            s->flow(o, tid, w[0], w[1], (int)(h >> 40) & 1);
            w += 2;
            break;
        case Q_INSTANT:
            s->instant(o, tid, *w++, code);
            break;
        }
    }
    return tid;
}

static void *sink_main(void *arg) {
    (void)arg;
    long tid = 0;
    pthread_mutex_lock(&pipe_st.lock);
    for (;;) {
        while (!pipe_st.ready && !pipe_st.done)
            pthread_cond_wait(&pipe_st.more, &pipe_st.lock);
        if (!pipe_st.ready)
            break;
        uint32_t b = pipe_st.cons;
        pthread_mutex_unlock(&pipe_st.lock);
        tid = run_block(pipe_st.ring + (size_t)b * pipe_st.block, pipe_st.fill[b], tid);
        pthread_mutex_lock(&pipe_st.lock);
        pipe_st.cons = (b + 1) % QNB;
        pipe_st.ready--;
        pthread_cond_signal(&pipe_st.room);
    }
    pthread_mutex_unlock(&pipe_st.lock);
    return NULL;
}

static inline uint64_t *block_start(uint32_t b) { return pipe_st.ring + (size_t)b * pipe_st.block; }

/* The renderer's block is full: publish it and take the next free one (waiting while none is). */
static void publish(void) {
    pthread_mutex_lock(&pipe_st.lock);
    pipe_st.fill[pipe_st.blk] = (uint32_t)(pipe_st.wp - block_start(pipe_st.blk));
    pipe_st.ready++;
    pthread_cond_signal(&pipe_st.more);
    while (pipe_st.ready == QNB)
        pthread_cond_wait(&pipe_st.room, &pipe_st.lock);
    pthread_mutex_unlock(&pipe_st.lock);
    pipe_st.blk = (pipe_st.blk + 1) % QNB;
    pipe_st.wp = block_start(pipe_st.blk);
}

/* next_op's rare case: the block is full, or the thread changed (its operation first). */
static __attribute__((noinline)) uint64_t *op_slow(long tid) {
    uint64_t *lim = block_start(pipe_st.blk) + pipe_st.block - 2 - QMAX;
    if (pipe_st.wp > lim) {
        publish();
        lim = block_start(pipe_st.blk) + pipe_st.block - 2 - QMAX;
    }
    if (tid != pipe_st.tid || !pipe_st.wlim) {
        pipe_st.wp[0] = Q_TID;
        pipe_st.wp[1] = (uint64_t)tid;
        pipe_st.wp += 2;
        pipe_st.tid = tid;
    }
    pipe_st.wlim = lim;
    return pipe_st.wp;
}

/* Where an operation of thread `tid` goes (the caller writes it and moves pipe_st.wp past it). */
static inline uint64_t *next_op(long tid) {
    uint64_t *w = pipe_st.wp;
    if (UNLIKELY(w > pipe_st.wlim || tid != pipe_st.tid))
        return op_slow(tid);
    return w;
}

/* an operation of two words: its head (kind, code id) and a time */
static inline void op2(long tid, uint64_t head, uint64_t ts_ns) {
    uint64_t *w = next_op(tid);
    w[0] = head;
    w[1] = ts_ns;
    pipe_st.wp = w + 2;
}

static void q_begin(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id) {
    (void)o;
    op2(tid, Q_BEGIN | (uint64_t)code_id << 8, ts_ns);
}

static void q_begin_cut(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id) {
    (void)o;
    op2(tid, Q_BEGIN_CUT | (uint64_t)code_id << 8, ts_ns);
}

static void q_end(oc_out *o, long tid, uint64_t ts_ns) {
    (void)o;
    op2(tid, Q_END, ts_ns);
}

static void q_slice(oc_out *o, long tid, uint64_t begin_ns, uint64_t end_ns, uint32_t code_id, int cut) {
    (void)o;
    uint64_t *w = next_op(tid);
    w[0] = Q_SLICE | (uint64_t)code_id << 8 | (uint64_t)(cut != 0) << 40;
    w[1] = begin_ns;
    w[2] = end_ns;
    pipe_st.wp = w + 3;
}

static void q_loop(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id, int line, uint32_t offset, uint32_t insns,
                   uint64_t cycles, uint64_t ns) {
    (void)o;
    uint64_t *w = next_op(tid);
    w[0] = Q_LOOP | (uint64_t)code_id << 8;
    w[1] = ts_ns;
    w[2] = (uint32_t)line | (uint64_t)offset << 32;
    w[3] = insns;
    w[4] = cycles;
    w[5] = ns;
    pipe_st.wp = w + 6;
}

static void q_loop_run(oc_out *o, long tid, uint64_t first_ns, uint64_t last_ns, uint32_t code_id, int line,
                       uint32_t offset, uint64_t iterations, uint64_t cycles) {
    (void)o;
    uint64_t *w = next_op(tid);
    w[0] = Q_LOOP_RUN | (uint64_t)code_id << 8;
    w[1] = first_ns;
    w[2] = last_ns;
    w[3] = (uint32_t)line | (uint64_t)offset << 32;
    w[4] = iterations;
    w[5] = cycles;
    pipe_st.wp = w + 6;
}

static void q_thread_end(oc_out *o, long tid) {
    (void)o;
    uint64_t *w = next_op(tid);
    w[0] = Q_THREAD_END;
    pipe_st.wp = w + 1;
}

static void q_flow(oc_out *o, long tid, uint64_t ts_ns, uint64_t id, int end) {
    (void)o;
    uint64_t *w = next_op(tid);
    w[0] = Q_FLOW | (uint64_t)(end != 0) << 40;
    w[1] = ts_ns;
    w[2] = id;
    pipe_st.wp = w + 3;
}

static void q_instant(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id) {
    (void)o;
    op2(tid, Q_INSTANT | (uint64_t)code_id << 8, ts_ns);
}

static void q_header(oc_out *o) { (void)o; }
static void q_footer(oc_out *o, const char *clock, int precise) { (void)o, (void)clock, (void)precise; }

/* (the thread is gone, or was never started) */
static void release(void) {
    pthread_mutex_destroy(&pipe_st.lock);
    pthread_cond_destroy(&pipe_st.more);
    pthread_cond_destroy(&pipe_st.room);
    free(pipe_st.ring);
    pipe_st.ring = NULL;
    pipe_st.real = NULL;
}

int oc_pipe_start(const oc_sink **sink, oc_out *out) {
    if (pipe_st.real)
        return -1;
    const char *env = getenv("OCULAR_TEST_PIPE_BLOCK");
    pipe_st.block = env && *env ? (uint32_t)strtoul(env, NULL, 10) : QBLOCK;
    if (pipe_st.block < 2 + QMAX + 1 || pipe_st.block > QBLOCK)
        pipe_st.block = QBLOCK;
    pipe_st.ring = malloc(sizeof(uint64_t) * pipe_st.block * QNB);
    if (!pipe_st.ring)
        return -1;
    const oc_sink *s = *sink;
    /* the same optional parts as the real sink: the renderer chooses its calls by them */
    pipe_st.sink = (oc_sink){.name = s->name, .header = q_header, .footer = q_footer, .begin = q_begin, .end = q_end,
                       .loop = q_loop, .begin_cut = s->begin_cut ? q_begin_cut : NULL,
                       .loop_run = s->loop_run ? q_loop_run : NULL, .slice = s->slice ? q_slice : NULL,
                       .thread_end = s->thread_end ? q_thread_end : NULL, .flow = s->flow ? q_flow : NULL,
                       .instant = s->instant ? q_instant : NULL};
    pipe_st.real = s;
    pipe_st.out = out;
    pipe_st.blk = pipe_st.cons = pipe_st.ready = 0;
    pipe_st.wp = pipe_st.ring;
    pipe_st.wlim = NULL; /* the first operation writes the thread's */
    pipe_st.done = 0;
    pthread_mutex_init(&pipe_st.lock, NULL);
    pthread_cond_init(&pipe_st.more, NULL);
    pthread_cond_init(&pipe_st.room, NULL);
    int rc = oc_thread_create(&pipe_st.thread, NULL, sink_main, NULL, OC_ENCODE_THREAD_NAME);
    if (rc != 0) {
        release();
        return -1;
    }
    *sink = &pipe_st.sink;
    return 0;
}

void oc_pipe_end(const oc_sink **sink) {
    if (!pipe_st.real)
        return;
    pthread_mutex_lock(&pipe_st.lock);
    if (pipe_st.wp != block_start(pipe_st.blk)) { /* the last block, partly filled (there is room: the renderer held it) */
        pipe_st.fill[pipe_st.blk] = (uint32_t)(pipe_st.wp - block_start(pipe_st.blk));
        pipe_st.ready++;
    }
    pipe_st.done = 1;
    pthread_cond_signal(&pipe_st.more);
    pthread_mutex_unlock(&pipe_st.lock);
    pthread_join(pipe_st.thread, NULL);
    *sink = pipe_st.real;
    release();
}
