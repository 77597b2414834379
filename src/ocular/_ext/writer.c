/* writer.c -- the background writer thread: drains chunks, rebuilds each thread's call stack from the
 * records and drives the sink (Chrome JSON), streaming to a temporary file.
 *
 * Runs without the GIL and never touches the Python API.  Stack reconstruction is keyed by frame
 * depth (carried in every enter/leave record): an end that matches no open begin at its depth is
 * ignored (code that was running before tracing started, or a function already de-instrumented),
 * and an event at depth d closes any deeper frame whose end was never seen.  Slices still open at
 * stop are closed at the stop time, so the timeline is always balanced.
 *
 * Loop iterations: a backward jump in a frame marks the end of one iteration of the loop it closes;
 * the first iteration of each run has no start time and is not reported, and an outer loop's
 * backward jump starts new runs of the loops inside it.
 */
#include "ocular.h"
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NLOOPS 4

typedef struct {
    uint32_t src, dest;     /* units; src == UINT32_MAX: free slot */
    uint64_t last_ts;
    uint64_t insn_mark;
    uint64_t self_mark;
} loop_slot;

typedef struct {
    uint32_t code_id;
    uint32_t depth;
    uint64_t insns;         /* INSTRUCTION records seen in this activation (precise mode) */
    uint64_t begin_ts;
    uint64_t self;          /* compensated ticks spent in this frame itself */
    uint64_t child;         /* compensated inclusive ticks of its callees */
    uint64_t same;          /* inclusive ticks of nested activations of the same code already counted */
    int is_call;            /* began with PY_START (not a resume) */
    uint32_t blk_start;     /* adaptive: unit where the current basic block began, or UINT32_MAX */
    uint64_t blk_self;
    uint32_t insn_unit;     /* precise: the instruction being executed, or UINT32_MAX */
    uint64_t insn_self;
    loop_slot loops[NLOOPS];
} frame;

typedef struct {
    long tid;
    uint64_t prev_ts;
    int have_prev;
    frame *stack;
    uint32_t n, cap;
    uint32_t far_src;       /* pending K_FARJUMP */
    uint64_t far_ts;
    uint32_t far_code;
    int far_pending;
} wthread;

static struct {
    oc_out out;
    const oc_sink *sink;
    wthread *threads;
    uint32_t nthreads;
    uint64_t events;
    uint64_t stop_ticks;
    uint64_t start_ns;
} W;

uint64_t oc_writer_events(void) { return W.events; }

static inline uint64_t to_ns(uint64_t ticks) {
    int64_t d = (int64_t)(ticks - S.tsc0);
    return S.mono0_ns + (uint64_t)((double)d * S.ns_per_tick);
}

static wthread *get_thread(uint32_t idx, long tid) {
    if (idx >= W.nthreads) {
        uint32_t n = idx + 16;
        wthread *t = realloc(W.threads, n * sizeof(wthread));
        if (!t)
            return NULL;
        memset(t + W.nthreads, 0, (n - W.nthreads) * sizeof(wthread));
        W.threads = t;
        W.nthreads = n;
    }
    W.threads[idx].tid = tid;
    return &W.threads[idx];
}

/* Close frames above `keep`.  `matched`: the top one got its real end (others were inferred). */
static void pop_to(wthread *t, uint32_t keep, uint64_t ts, int matched) {
    while (t->n > keep) {
        frame *f = &t->stack[--t->n];
        uint64_t incl = f->self + f->child;
        frame *same = NULL; /* nearest activation of the same code below (recursion) */
        for (uint32_t i = t->n; i-- > 0;)
            if (t->stack[i].code_id == f->code_id) {
                same = &t->stack[i];
                break;
            }
        int counted = matched && t->n == keep;
        /* total time counts each recursion tree once: a counted activation adds what its counted
         * same-code descendants did not already add; an uncounted one passes theirs down */
        oc_stats_slice(f->code_id, f->is_call, incl, f->self, incl - f->same, !counted);
        if (same)
            same->same += counted ? incl : f->same;
        if (t->n > 0)
            t->stack[t->n - 1].child += incl;
        W.sink->end(&W.out, t->tid, to_ns(ts));
    }
}

static uint32_t static_insns(oc_codeent *e, uint32_t dest, uint32_t src) {
    uint32_t n = 0;
    for (uint32_t u = dest; u <= src && u < e->nunits;) {
        n++;
        u += 1 + S.cache_entries[e->code[2 * u]];
    }
    return n;
}

static void on_backjump(wthread *t, frame *f, uint32_t src, uint32_t dest, uint64_t ts) {
    /* A loop is known by its header (the jump target): `continue` edges of one loop share it.  Other
     * loops whose header lies inside this iteration's span are inner loops (their next iteration
     * starts a new run); loops entirely before or after this one are finished: free their slots. */
    loop_slot *hit = NULL, *freeslot = NULL, *oldest = NULL;
    for (int i = 0; i < NLOOPS; i++) {
        loop_slot *l = &f->loops[i];
        if (l->src != UINT32_MAX) {
            if (l->dest == dest)
                hit = l;
            else if ((l->dest > dest && l->dest <= src) || l->src < dest || l->dest > src)
                l->src = UINT32_MAX;
        }
        if (l->src == UINT32_MAX) {
            if (!freeslot)
                freeslot = l;
        } else if (l != hit && (!oldest || l->last_ts < oldest->last_ts)) {
            oldest = l;
        }
    }
    if (hit) {
        oc_codeent *e = oc_code_entry(f->code_id);
        uint32_t insns = S.precise ? (uint32_t)(f->insns - hit->insn_mark) : static_insns(e, dest, src);
        uint64_t cycles = ts - hit->last_ts;
        oc_stats_loop(f->code_id, src, dest, cycles, f->self - hit->self_mark, insns);
        int line = dest < e->nunits ? e->lines[dest] : -1;
        W.sink->loop(&W.out, t->tid, to_ns(ts), f->code_id, line, dest * 2, insns, cycles,
                     (uint64_t)((double)cycles * S.ns_per_tick));
        if (src > hit->src)
            hit->src = src;
    } else {
        hit = freeslot ? freeslot : oldest ? oldest : &f->loops[NLOOPS - 1];
        hit->src = src;
        hit->dest = dest;
    }
    hit->last_ts = ts;
    hit->insn_mark = f->insns;
    hit->self_mark = f->self;
}

static void process_chunk(oc_chunk *c) {
    wthread *t = get_thread(c->thread_idx, c->tid);
    if (!t)
        return;
    W.events += c->n;
    for (uint32_t i = 0; i < c->n; i++) {
        oc_rec *r = &c->recs[i];
        uint32_t kind = OC_KIND(r->info), p = OC_PAYLOAD(r->info);
        if (kind != K_EXT) {
            if (t->have_prev) {
                uint64_t delta = r->ts > t->prev_ts ? r->ts - t->prev_ts : 0;
                oc_stats_gap(delta);
                if (t->n > 0)
                    t->stack[t->n - 1].self += oc_stats_net(delta);
            }
            t->prev_ts = r->ts;
            t->have_prev = 1;
        }
        switch (kind) {
        case K_START:
        case K_RESUME:
        case K_THROW: {
            uint32_t keep = t->n;
            while (keep > 0 && t->stack[keep - 1].depth >= p)
                keep--;
            pop_to(t, keep, r->ts, 0);
            if (t->n == t->cap) {
                uint32_t cap = t->cap ? t->cap * 2 : 64;
                frame *s = realloc(t->stack, cap * sizeof(frame));
                if (!s)
                    break;
                t->stack = s;
                t->cap = cap;
            }
            frame *f = &t->stack[t->n++];
            f->code_id = r->code_id;
            f->depth = p;
            f->insns = 0;
            f->begin_ts = r->ts;
            f->self = f->child = f->same = 0;
            f->is_call = kind == K_START;
            f->blk_start = kind == K_START ? 0 : UINT32_MAX; /* a call starts a block at offset 0 */
            f->blk_self = 0;
            f->insn_unit = UINT32_MAX;
            for (int k = 0; k < NLOOPS; k++)
                f->loops[k].src = UINT32_MAX;
            W.sink->begin(&W.out, t->tid, to_ns(r->ts), r->code_id);
            break;
        }
        case K_RETURN:
        case K_YIELD:
        case K_UNWIND: {
            uint32_t keep = t->n;
            while (keep > 0 && t->stack[keep - 1].depth > p)
                keep--;
            pop_to(t, keep, r->ts, 0);
            if (t->n > 0 && t->stack[t->n - 1].depth == p)
                pop_to(t, t->n - 1, r->ts, t->stack[t->n - 1].code_id == r->code_id);
            break;
        }
        case K_JUMP:
        case K_EXT: {
            uint32_t src, dest;
            if (kind == K_JUMP) {
                src = p >> OC_NEAR_BITS;
                dest = p & OC_NEAR_MAX;
            } else {
                if (!t->far_pending || t->far_code != r->code_id)
                    break;
                src = t->far_src;
                dest = p;
                t->far_pending = 0;
            }
            if (t->n == 0 || t->stack[t->n - 1].code_id != r->code_id)
                break;
            frame *f = &t->stack[t->n - 1];
            if (!S.precise) {
                if (f->blk_start != UINT32_MAX)
                    oc_stats_block(f->code_id, f->blk_start, src, f->self - f->blk_self);
                f->blk_start = dest;
                f->blk_self = f->self;
            }
            if (dest < src)
                on_backjump(t, f, src, dest, r->ts);
            break;
        }
        case K_FARJUMP:
            t->far_pending = 1;
            t->far_src = p;
            t->far_code = r->code_id;
            break;
        case K_INSN:
            if (t->n > 0 && t->stack[t->n - 1].code_id == r->code_id) {
                frame *f = &t->stack[t->n - 1];
                f->insns++;
                if (f->insn_unit != UINT32_MAX)
                    oc_stats_insn(f->code_id, f->insn_unit, f->self - f->insn_self);
                f->insn_unit = p;
                f->insn_self = f->self;
            }
            break;
        default:
            break;
        }
    }
}

static uint64_t mono_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A child forked from a non-main thread ends when that thread returns: no interpreter exit, no atexit,
 * and without us the process would end with its last thread.  So in a fork child the idle writer looks
 * every 200 ms whether only Ocular's own threads are left (itself and the USDT poller); if so nobody
 * can stop the session any more: it finishes the trace, gives it its final name and ends the process
 * with status 0, as the last thread's exit would have. */
static int in_fork_child;

/* 1 if every live thread of this process is one of Ocular's helpers, 0 otherwise (or if unsure). */
int oc_only_helper_threads_left(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    int others = 0, seen = 0;
    struct dirent *e;
    while (!others && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[64], buf[256];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (n <= 0)
            continue; /* gone since readdir */
        buf[n] = 0;
        seen++;
        /* "tid (comm) S ...": comm may itself hold ')' or spaces, the state follows the last ')' */
        char *open_paren = strchr(buf, '('), *close_paren = strrchr(buf, ')');
        if (!open_paren || !close_paren || close_paren < open_paren || close_paren[1] != ' ') {
            others = 1; /* unreadable: assume a thread that matters */
            break;
        }
        char st = close_paren[2];
        if (st == 'Z' || st == 'X') /* exited, its process lives on */
            continue;
        *close_paren = 0;
        const char *comm = open_paren + 1;
        if (strcmp(comm, OC_USDT_THREAD_NAME) != 0 && strcmp(comm, OC_WRITER_THREAD_NAME) != 0)
            others = 1;
    }
    closedir(d);
    return seen > 0 && !others;
}

static void finish_orphan(void) {
    int err = W.out.err;
    if (W.out.fd >= 0 && close(W.out.fd) != 0 && !err)
        err = errno;
    if (S.tmp_path && S.out_path && (err || rename(S.tmp_path, S.out_path) != 0))
        unlink(S.tmp_path);
    exit(0);
}

/* Wait on cond_writer (lock held) for at most `ms` milliseconds; returns pthread_cond_timedwait's code. */
static int wait_writer_ms(long ms) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += ms * 1000000L;
    while (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(&S.cond_writer, &S.lock, &dl);
}

static void *writer_main(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), OC_WRITER_THREAD_NAME);
    int orphaned = 0;
    pthread_mutex_lock(&S.lock);
    for (;;) {
        if (!S.calibrated) {
            if (S.stopping || mono_now_ns() - W.start_ns >= 50000000ull) {
                oc_clock_calibrate();
            } else {
                wait_writer_ms(10);
                continue;
            }
        }
        oc_chunk *c = S.q_head;
        if (!c) {
            if (S.stopping)
                break;
            if (W.out.len) { /* idle: put what is encoded on disk, so a killed process loses less */
                pthread_mutex_unlock(&S.lock);
                oc_out_flush(&W.out);
                pthread_mutex_lock(&S.lock);
                continue;
            }
            if (in_fork_child) {
                if (wait_writer_ms(200) == ETIMEDOUT && !S.q_head &&
                    !S.stopping && oc_only_helper_threads_left()) {
                    orphaned = 1;
                    W.stop_ticks = oc_now();
                    break;
                }
                continue;
            }
            pthread_cond_wait(&S.cond_writer, &S.lock);
            continue;
        }
        S.q_head = c->next;
        if (!S.q_head)
            S.q_tail = NULL;
        pthread_mutex_unlock(&S.lock);
        process_chunk(c);
        pthread_mutex_lock(&S.lock);
        oc_chunk_put_free(c);
        pthread_cond_broadcast(&S.cond_free);
    }
    pthread_mutex_unlock(&S.lock);
    /* close what is still open, at the stop time */
    for (uint32_t i = 0; i < W.nthreads; i++)
        if (W.threads[i].n)
            pop_to(&W.threads[i], 0, W.stop_ticks, 0);
    pthread_mutex_lock(&S.lock); /* thread names were published under the lock */
    W.sink->footer(&W.out, oc_clock_source(), S.precise);
    pthread_mutex_unlock(&S.lock);
    oc_out_flush(&W.out);
    if (orphaned)
        finish_orphan();
    return NULL;
}

static void free_state(void) {
    for (uint32_t i = 0; i < W.nthreads; i++)
        free(W.threads[i].stack);
    free(W.threads);
    W.threads = NULL;
    W.nthreads = 0;
}

/* perfetto=False: statistics only, nothing encoded */
static void none_header(oc_out *o) { (void)o; }
static void none_begin(oc_out *o, long tid, uint64_t ts, uint32_t code_id) { (void)o, (void)tid, (void)ts, (void)code_id; }
static void none_end(oc_out *o, long tid, uint64_t ts) { (void)o, (void)tid, (void)ts; }
static void none_loop(oc_out *o, long tid, uint64_t ts, uint32_t code_id, int line, uint32_t offset, uint32_t insns,
                      uint64_t cycles, uint64_t ns) {
    (void)o, (void)tid, (void)ts, (void)code_id, (void)line, (void)offset, (void)insns, (void)cycles, (void)ns;
}
static void none_footer(oc_out *o, const char *clock, int precise) { (void)o, (void)clock, (void)precise; }
static const oc_sink sink_none = {"none", none_header, none_begin, none_end, none_loop, none_footer};

int oc_writer_start(void) {
    free_state();
    W.events = 0;
    oc_stats_reset();
    W.sink = !S.write_json ? &sink_none : S.format == OC_FORMAT_PERFETTO ? &oc_sink_perfetto : &oc_sink_json;
    W.start_ns = mono_now_ns();
    W.out.fd = -1;
    W.out.err = 0;
    W.out.total = 0;
    W.out.len = 0;
    if (!W.out.buf) {
        W.out.cap = 1 << 20;
        W.out.buf = malloc(W.out.cap);
        if (!W.out.buf) {
            PyErr_NoMemory();
            return -1;
        }
    }
    if (S.write_json) {
        W.out.fd = open(S.tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (W.out.fd < 0) {
            PyErr_SetFromErrnoWithFilename(PyExc_OSError, S.tmp_path);
            return -1;
        }
        W.sink->header(&W.out);
    }
    S.stopping = 0;
    int rc = pthread_create(&S.writer, NULL, writer_main, NULL);
    if (rc != 0) {
        if (W.out.fd >= 0) {
            close(W.out.fd);
            unlink(S.tmp_path);
            W.out.fd = -1;
        }
        PyErr_Format(PyExc_RuntimeError, "ocular: cannot start the writer thread: %s", strerror(rc));
        return -1;
    }
    S.writer_started = 1;
    return 0;
}

void oc_writer_stop(uint64_t stop_ticks) {
    if (!S.writer_started)
        return;
    pthread_mutex_lock(&S.lock);
    W.stop_ticks = stop_ticks;
    S.stopping = 1;
    pthread_cond_broadcast(&S.cond_writer);
    pthread_mutex_unlock(&S.lock);
    pthread_join(S.writer, NULL);
    S.writer_started = 0;
    if (W.out.fd >= 0) {
        if (close(W.out.fd) != 0 && !W.out.err)
            W.out.err = errno;
        W.out.fd = -1;
    }
    S.write_errno = W.out.err;
    S.bytes_written = W.out.total;
    free_state();
}

/* In a fork child: the writer thread does not exist here and its fd belongs to the parent. */
void oc_writer_fork_child(void) {
    in_fork_child = 1;
    S.writer_started = 0;
    if (W.out.fd >= 0)
        close(W.out.fd); /* our copy only; the parent keeps writing its own */
    W.out.fd = -1;
    W.out.len = 0;
    /* The parent's writer may have been half-way through updating its state when fork() copied it:
     * abandon that state (a one-time leak in the child) rather than free what may be inconsistent. */
    W.threads = NULL;
    W.nthreads = 0;
    oc_stats_abandon();
}
