/* buffer.c -- per-thread record buffers and the chunk traffic between the program's threads and the
 * recorder thread.
 *
 * Each thread appends to its own 16 KiB chunk through a thread-local pointer: no lock, no allocation
 * per event.  A full chunk is queued for the recorder and a free one taken under one mutex (once per
 * 1024 events).  Every live thread always gets a chunk of its own (so any number of threads can hold
 * one: a bounded pool shared by all of them deadlocked once the threads outnumbered it); only the
 * queue is bounded: when OC_MAX_QUEUED full chunks wait for the recorder, i.e. when the disk cannot
 * keep up, the producer waits (it never needs the GIL to be released for that) and records the wait
 * as a pause (K_PAUSE, K_PAUSE_END), which the renderer shows as its own labelled slice.  Memory:
 * 16 KiB per live thread plus at most 16 MiB queued, plus freed chunks kept for reuse.
 *
 * The slow path also learns the thread's name: until `threading` has registered the thread, the
 * buffer's `end` is set a few records ahead so the lookup is retried every few events.
 * A thread that exits hands its partial chunk over from a pthread key destructor.
 */
#include "ocular.h"
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <xmmintrin.h> /* _mm_sfence */
#endif

OC_TLS __thread oc_tls_t oc_tls;
static pthread_key_t tkey;
static oc_tbuf *all_bufs;     /* every buffer ever made; guarded by sess.lock */
static uint32_t tgen = 1;     /* buffers of another generation are stale */

/* lock held */
void oc_chunk_put_free(oc_chunk *c) {
    c->next = sess.free_list;
    sess.free_list = c;
}

/* lock held */
oc_chunk *oc_chunk_get(void) {
    if (sess.free_list) {
        oc_chunk *c = sess.free_list;
        sess.free_list = c->next;
        return c;
    }
    oc_chunk *c = malloc(sizeof(oc_chunk));
    if (c)
        sess.nchunks++;
    return c;
}

/* lock held: the recorder is more than OC_MAX_QUEUED chunks behind; wait for it.  Returns the tick
 * the wait began, or 0 if there was none. */
static uint64_t wait_for_recorder(void) {
    if (LIKELY(sess.nqueued < sess.max_queued) || !sess.writer_started)
        return 0;
    uint64_t t0 = oc_now();
    if (sess.recorder_idle) {
        sess.recorder_idle = 0;
        pthread_cond_signal(&sess.cond_writer);
    }
    while (sess.nqueued >= sess.max_queued && sess.writer_started && !sess.stopping)
        pthread_cond_wait(&sess.cond_free, &sess.lock);
    sess.pauses++;
    return t0 ? t0 : 1;
}

/* lock held */
static void enqueue(oc_tbuf *b) {
    oc_chunk *c = b->chunk;
    if (!c)
        return;
#if defined(__x86_64__)
    _mm_sfence(); /* the records are non-temporal stores (monitor.c put_rec): visible before the chunk */
#endif
    c->n = (uint32_t)(b->pos - c->recs);
    c->next = NULL;
    if (c->n == 0 && !c->ended) {
        oc_chunk_put_free(c);
    } else {
        if (sess.q_tail)
            sess.q_tail->next = c;
        else
            sess.q_head = c;
        sess.q_tail = c;
        sess.nqueued++;
        /* wake the recorder only when it sleeps and a batch is ready: a wake-up per chunk cost the
         * program a preemption per chunk on two cores (it polls every 20 ms for a partial batch) */
        if (sess.recorder_idle && sess.nqueued >= OC_WAKE_BATCH) {
            sess.recorder_idle = 0;
            pthread_cond_signal(&sess.cond_writer);
        }
    }
    b->chunk = NULL;
    b->pos = b->end = b->limit = NULL;
}

static void thread_exit(void *p) {
    oc_tbuf *b = p;
    pthread_mutex_lock(&sess.lock);
    if (b->gen == tgen && sess.active) {
        /* its last chunk says the thread ended (the recorder writes that after it): an empty one if need be */
        if (!b->chunk && (b->chunk = oc_chunk_get()) != NULL) {
            b->chunk->thread_idx = b->thread_idx;
            b->chunk->tid = b->thread_idx < sess.nthreads ? sess.threads[b->thread_idx].tid : 0;
            b->pos = b->chunk->recs;
        }
        if (b->chunk)
            b->chunk->ended = 1;
        enqueue(b);
        if (b->thread_idx < sess.nthreads)
            sess.threads[b->thread_idx].exited = 1;
    }
    b->alive = 0;
    b->gen = 0;
    pthread_mutex_unlock(&sess.lock);
    free(b->open); /* (only ever touched by its own thread) */
    b->open = NULL;
    b->nopen = b->capopen = 0;
}

int oc_buffer_init(void) {
    if (pthread_key_create(&tkey, thread_exit) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "ocular: pthread_key_create failed");
        return -1;
    }
    return 0;
}

/* New session: make every existing buffer stale. */
void oc_buffer_reset(void) { tgen++; }

static char *fallback_name(long tid) {
    char tmp[64];
    snprintf(tmp, sizeof tmp, "Thread %ld", tid);
    return strdup(tmp);
}

/* Look the thread up in threading._active; returns 1 once the name is known. */
static int resolve_name(oc_tbuf *b) {
    uint32_t idx = b->thread_idx;
    unsigned long ident = sess.threads[idx].ident;
    if (sess.threads[idx].name)
        return 1;
    if (ident == sess.main_ident) {
        pthread_mutex_lock(&sess.lock);
        sess.threads[idx].name = strdup("MainThread");
        sess.threads[idx].name_raw = strdup("MainThread");
        sess.threads_named++;
        pthread_mutex_unlock(&sess.lock);
        return 1;
    }
    int found = 0;
    PyObject *exc = PyErr_GetRaisedException();
    PyObject *modname = PyUnicode_FromString("threading");
    PyObject *mod = modname ? PyImport_GetModule(modname) : NULL;
    Py_XDECREF(modname);
    if (mod) {
        PyObject *active = PyObject_GetAttrString(mod, "_active");
        if (active && PyDict_Check(active)) {
            PyObject *key = PyLong_FromUnsignedLong(ident);
            PyObject *th = key ? PyDict_GetItemWithError(active, key) : NULL;
            if (!th && key) {
                /* not in _active yet: a starting thread sits in _limbo once it knows its ident */
                PyObject *limbo = PyObject_GetAttrString(mod, "_limbo");
                if (limbo && PyDict_Check(limbo)) {
                    Py_ssize_t pos = 0;
                    PyObject *k, *v;
                    while (!th && PyDict_Next(limbo, &pos, &k, &v)) {
                        PyObject *vid = PyObject_GetAttrString(v, "_ident");
                        if (vid && PyLong_Check(vid) && PyLong_AsUnsignedLong(vid) == ident)
                            th = v;
                        Py_XDECREF(vid);
                        PyErr_Clear();
                    }
                }
                Py_XDECREF(limbo);
                PyErr_Clear();
            }
            Py_XDECREF(key);
            if (th) {
                Py_INCREF(th);
                PyObject *name = PyObject_GetAttrString(th, "_name");
                if (name && PyUnicode_Check(name)) {
                    PyObject *u = PyUnicode_AsEncodedString(name, "utf-8", "backslashreplace");
                    if (u) {
                        char *s = oc_json_escape(PyBytes_AS_STRING(u), PyBytes_GET_SIZE(u));
                        if (s) {
                            pthread_mutex_lock(&sess.lock);
                            if (!sess.threads[idx].name) {
                                sess.threads[idx].name = s;
                                sess.threads[idx].name_raw = oc_dup_raw(PyBytes_AS_STRING(u), PyBytes_GET_SIZE(u));
                                sess.threads_named++;
                            } else {
                                free(s);
                            }
                            pthread_mutex_unlock(&sess.lock);
                            found = 1;
                        }
                        Py_DECREF(u);
                    }
                }
                Py_XDECREF(name);
                Py_DECREF(th);
            }
        }
        Py_XDECREF(active);
        Py_DECREF(mod);
    }
    PyErr_Clear();
    PyErr_SetRaisedException(exc);
    return found;
}

static int register_thread(oc_tbuf *b) {
    pthread_mutex_lock(&sess.lock);
    if (sess.nthreads == sess.cap_threads) {
        uint32_t cap = sess.cap_threads ? sess.cap_threads * 2 : 16;
        oc_thread *n = realloc(sess.threads, cap * sizeof(oc_thread));
        if (!n) {
            pthread_mutex_unlock(&sess.lock);
            return -1;
        }
        sess.threads = n;
        sess.cap_threads = cap;
    }
    b->thread_idx = sess.nthreads++;
    oc_thread *t = &sess.threads[b->thread_idx];
    t->tid = (long)syscall(SYS_gettid);
    t->ident = PyThread_get_thread_ident();
    t->name = NULL;
    t->name_raw = NULL;
    t->exited = 0;
    pthread_mutex_unlock(&sess.lock);
    b->name_tries = 0;
    return 0;
}

/* Muting costs the hot path nothing: `end` is pulled back to `pos`, so the next event takes the slow
 * path, which records nothing while the flag is set. */
int oc_buffer_mute(int on) {
    oc_tbuf *b = oc_tls.buf;
    int was = oc_tls.muted;
    oc_tls.muted = on;
    if (!b)
        return was; /* (no buffer yet: the slow path, where every event of this thread goes, checks) */
    if (on)
        b->end = b->pos;
    else if (b->chunk && b->gen == tgen)
        b->end = b->limit;
    return was;
}

oc_tbuf *oc_buffer_slow(void) {
    if (!sess.active)
        return NULL;
    oc_tbuf *b = oc_tls.buf;
    if (UNLIKELY(oc_tls.muted || (b && b->in_slow)))
        return NULL;
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b) {
            oc_internal_error("out of memory for a thread buffer");
            return NULL;
        }
        b->alive = 1;
        pthread_setspecific(tkey, b);
        pthread_mutex_lock(&sess.lock);
        b->next_all = all_bufs;
        all_bufs = b;
        pthread_mutex_unlock(&sess.lock);
        oc_tls.buf = b;
    }
    b->in_slow = 1;
    if (oc_tls.gen != sess.gen || b->gen != tgen) {
        b->chunk = NULL;
        b->pos = b->end = b->limit = NULL;
        b->nopen = 0;
        b->step_depth = 0;
        if (register_thread(b) < 0) {
            oc_internal_error("out of memory for the thread table");
            b->in_slow = 0;
            return NULL;
        }
        b->gen = tgen;
        oc_tls.gen = sess.gen;
    }
    if (!b->chunk || b->pos >= b->limit) {
        pthread_mutex_lock(&sess.lock);
        enqueue(b);
        sess.ncodes_pub = sess.ncodes; /* we hold the GIL: every registration so far is complete */
        uint64_t paused = wait_for_recorder();
        oc_chunk *c = oc_chunk_get();
        pthread_mutex_unlock(&sess.lock);
        if (!c) {
            sess.dropped++;
            oc_internal_error("out of memory for trace chunks: events were dropped");
            b->in_slow = 0;
            return NULL;
        }
        c->thread_idx = b->thread_idx;
        c->tid = sess.threads[b->thread_idx].tid;
        c->n = 0;
        c->ended = 0;
        b->chunk = c;
        b->pos = c->recs;
        b->limit = c->recs + OC_CHUNK_RECS - 1; /* one record kept for a two-record event */
        b->end = b->limit;
        if (UNLIKELY(paused)) {
            b->pos[0] = (oc_rec){.ts = paused, .code_id = OC_NO_CODE, .info = OC_INFO(K_PAUSE, 0)};
            b->pos[1] = (oc_rec){.ts = oc_now(), .code_id = OC_NO_CODE, .info = OC_INFO(K_PAUSE_END, 0)};
            b->pos += 2;
        }
    }
    if (!sess.threads[b->thread_idx].name) {
        if (!resolve_name(b)) {
            b->name_tries++;
            if (b->name_tries > 48) {
                pthread_mutex_lock(&sess.lock);
                sess.threads[b->thread_idx].name = fallback_name(sess.threads[b->thread_idx].tid);
                sess.threads[b->thread_idx].name_raw = fallback_name(sess.threads[b->thread_idx].tid);
                sess.threads_named++;
                pthread_mutex_unlock(&sess.lock);
            } else {
                /* every 2 events for a while (a short thread is in _active only briefly), then sparser */
                size_t ahead = b->name_tries < 32 ? 2 : (size_t)2 << (b->name_tries - 31);
                if ((size_t)(b->limit - b->pos) > ahead)
                    b->end = b->pos + ahead;
                else
                    b->end = b->limit;
                b->in_slow = 0;
                return b;
            }
        }
        b->end = b->limit;
    }
    b->in_slow = 0;
    return b;
}

uint64_t oc_buffer_write_partial(oc_out *o, void (*fn)(oc_out *, const oc_chunk *)) {
    uint64_t n = 0;
    for (oc_tbuf *b = all_bufs; b; b = b->next_all)
        if (b->gen == tgen && b->chunk && b->pos > b->chunk->recs) {
            b->chunk->n = (uint32_t)(b->pos - b->chunk->recs);
            fn(o, b->chunk);
            n += b->chunk->n;
        }
    return n;
}

/* Stop (GIL held): hand every live buffer's partial chunk to the recorder; name threads still unnamed. */
void oc_buffer_flush_all(void) {
    pthread_mutex_lock(&sess.lock);
    for (oc_tbuf *b = all_bufs; b; b = b->next_all)
        if (b->gen == tgen)
            enqueue(b);
    pthread_mutex_unlock(&sess.lock);
    for (uint32_t i = 0; i < sess.nthreads; i++) {
        if (!sess.threads[i].name) {
            oc_tbuf tmp = {.thread_idx = i};
            /* (an ended thread's ident may belong to a thread started since: it keeps its number) */
            if (sess.threads[i].exited || !resolve_name(&tmp)) {
                pthread_mutex_lock(&sess.lock);
                if (!sess.threads[i].name) {
                    sess.threads[i].name = fallback_name(sess.threads[i].tid);
                    sess.threads[i].name_raw = fallback_name(sess.threads[i].tid);
                    sess.threads_named++;
                }
                pthread_mutex_unlock(&sess.lock);
            }
        }
    }
    pthread_mutex_lock(&sess.lock);
    sess.ncodes_pub = sess.ncodes;
    pthread_mutex_unlock(&sess.lock);
    tgen++;
}

/* In a fork child (lock re-initialised by the caller): drop everything that belongs to the parent. */
void oc_buffer_fork_child(void) {
    oc_chunk *c = sess.q_head;
    while (c) {
        oc_chunk *n = c->next;
        free(c);
        c = n;
    }
    sess.q_head = sess.q_tail = NULL;
    sess.nqueued = 0;
    uint32_t kept = 0;
    for (oc_chunk *f = sess.free_list; f; f = f->next)
        kept++;
    for (oc_tbuf *b = all_bufs; b; b = b->next_all) {
        if (b->chunk)
            free(b->chunk);
        b->chunk = NULL;
        b->pos = b->end = b->limit = NULL;
        if (b != oc_tls.buf)
            b->alive = 0;
        b->gen = 0;
    }
    sess.nchunks = kept;
    for (uint32_t i = 0; i < sess.nthreads; i++) {
        free(sess.threads[i].name);
        free(sess.threads[i].name_raw);
    }
    sess.nthreads = 0;
    sess.threads_named = sess.threads_named_seen = 0;
    tgen++;
}
