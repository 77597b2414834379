/* buffer.h -- the per-thread buffers (buffer.c): chunks of records, each thread's buffer and thread-local
 * state, and the inline oc_reserve_rec() every callback writes through.
 * Included through ocular.h (the record side's base: Python.h, render.h, hidden visibility), after
 * session.h. */
#ifndef OCULAR_BUFFER_H
#define OCULAR_BUFFER_H
#ifndef OCULAR_H
#error "buffer.h is included through ocular.h"
#endif

#define OC_CHUNK_RECS 1024  /* 16 KiB: each live thread holds one */
#define OC_MAX_QUEUED 1024  /* 16 MiB of full chunks waiting for the recorder; beyond that the hot path
                               waits (a recorded pause): only when the disk cannot keep up */
#define OC_WAKE_BATCH 8     /* full chunks that wake a sleeping recorder (else it looks every 20 ms) */

typedef struct oc_chunk {
    struct oc_chunk *next;
    uint32_t thread_idx;
    uint32_t n;
    long tid;
    int ended;             /* the thread's last chunk (handed over as it exits): its end is recorded after it */
    oc_rec recs[OC_CHUNK_RECS];
} oc_chunk;

typedef struct oc_tbuf {
    oc_rec *pos, *end;     /* end may sit below limit while the thread's name is still unknown */
    oc_rec *limit;
    oc_chunk *chunk;
    uint32_t thread_idx;
    uint32_t gen;
    uint32_t name_tries;
    int alive;             /* owned by a live thread */
    int in_slow;           /* re-entrancy guard for the slow path */
    uint64_t *open;        /* threshold > 0: this thread's recorded activations not yet ended, innermost
                              last, each depth << 32 | code id (monitor.c) */
    uint32_t nopen, capopen;
    uint32_t step_depth;   /* asyncio.c: frame depth of the coroutine that began this thread's current
                              task step (0: none) */
    struct oc_tbuf *next_all;
} oc_tbuf;

typedef struct {
    oc_tbuf *buf;
    uint32_t gen;
    int muted;             /* this thread records nothing (the CLI's own frames, Ocular's own renders) */
    /* the last recorded C call, until its C_RETURN times it (monitor.c, the C call site rule) */
    void *ccall_ex;        /* its code's extra (NULL: none pending) */
    uint32_t ccall_unit;   /* its call site */
    uint64_t ccall_ts;     /* its start */
} oc_tls_t;
extern OC_TLS __thread oc_tls_t oc_tls;


oc_tbuf *oc_buffer_slow(void);
/* a free record of this thread's chunk for the running session (the chunk handed over and a new one
 * taken when full), or NULL; leaves one spare record after it */
static inline oc_rec *oc_reserve_rec(void) {
    oc_tbuf *b = oc_tls.buf;
    if (__builtin_expect(oc_tls.gen != sess.gen || b->pos >= b->end, 0)) {
        b = oc_buffer_slow();
        if (!b)
            return NULL;
    }
    return b->pos++;
}

void oc_buffer_flush_all(void);          /* stop: hand every thread's partial chunk to the writer */
int oc_buffer_init(void);
void oc_buffer_fork_child(void);
void oc_buffer_reset(void);
int oc_buffer_mute(int on);              /* GIL held: this thread records nothing while muted; was it */
oc_chunk *oc_chunk_get(void);            /* lock held by caller */
void oc_chunk_put_free(oc_chunk *c);     /* lock held by caller */
/* lock and GIL held: pass every live thread's partial chunk to fn; returns the records passed */
uint64_t oc_buffer_write_partial(oc_out *o, void (*fn)(oc_out *, const oc_chunk *));

#endif
