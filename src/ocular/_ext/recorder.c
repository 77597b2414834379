/* recorder.c -- the recorder thread: moves full chunks into the recording and does nothing else.
 *
 * The recording (recording.h, docs/recording.md) is written as the program runs: before each chunk,
 * the code table entries and thread names published since the last one, then the chunk's records as
 * they are (16 bytes each: a plain copy costs under one instruction per event, where any encoding we
 * tried costs more than the whole budget; see docs/recording.md).  No stack is rebuilt and nothing
 * is formatted here: that is the renderer's job, after stop.  Output goes through our own 1 MiB
 * buffer and write(2); when the queue runs dry the buffer is flushed, so a process killed by SIGKILL
 * leaves a recording whose complete blocks all render.
 *
 * Ring mode (the flight recorder): chunks are not written but kept in memory, newest last, and the
 * oldest are given back once more than S.ring_bytes are kept; oc_recorder_dump() writes the kept window
 * (plus every live thread's partial chunk) as a complete recording, at stop or on demand (SIGUSR2).
 *
 * SIGTERM and SIGHUP (sigsave.c, when armed): the recorder sees the signal's note at its next turn (it
 * waits 20 ms at most), stops the session without the GIL, writes every thread's partial chunk, ends the
 * recording and hands it to oc_signals_finish(), which renders it and ends the process by the signal.
 *
 * A write that fails (a full disk) is told to the program at once (oc_notify_recording_failed: a pending
 * call, which needs no GIL); the later chunks are dropped, and what was written stays a valid recording
 * cut short, which stop_tracing() renders or keeps.
 *
 * Runs without the GIL and never touches the Python API otherwise.
 */
#include "ocular.h"
#include "recording.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static struct {
    oc_out out;
    long test_delay_us;       /* OCULAR_TEST_RECORDER_DELAY_US: a slow disk, for the pause tests */
    uint64_t events;
    uint64_t stop_ticks;
    uint64_t start_ns;
    uint32_t codes_written;
    uint32_t *thread_written; /* per thread_idx: its named THREAD block is written */
    uint32_t cap_written;
    oc_chunk *ring_head, *ring_tail; /* ring mode: kept chunks, oldest first (guarded by S.lock) */
    size_t ring_kept;
    int told;                 /* the program was told that a write failed (once a session) */
    int owncost_written;      /* the OWNCOST block is written (once a session) */
} RC;

/* After writes: the first failure of the session is told to the program. */
static inline void tell_failure(void) {
    if (UNLIKELY(RC.out.err) && !RC.told) {
        RC.told = 1;
        oc_notify_recording_failed(RC.out.err);
    }
}

uint64_t oc_recorder_events(void) { return RC.events; }
uint64_t oc_recorder_bytes(void) { return RC.out.total; }
int oc_recorder_errno(void) { return RC.out.err; }

static inline void put_u32(oc_out *o, uint32_t v) { oc_out_write(o, (const char *)&v, 4); }
static inline void put_u64(oc_out *o, uint64_t v) { oc_out_write(o, (const char *)&v, 8); }

/* Every block starts at a multiple of 8 bytes (records are read in place, 8-byte aligned): zeros pad
 * the previous block's payload. */
static void block(oc_out *o, uint32_t type, uint32_t len) {
    static const char zeros[8];
    size_t pos = (size_t)(o->total + o->len);
    if (pos & 7)
        oc_out_write(o, zeros, 8 - (pos & 7));
    put_u32(o, type);
    put_u32(o, len);
}

static void write_header(oc_out *o) {
    const char *pn = S.process_name_raw ? S.process_name_raw : "python";
    uint32_t nlen = (uint32_t)strlen(pn);
    block(o, OC_BLK_HEADER, OC_HEADER_FIXED + nlen);
    oc_out_write(o, OC_REC_MAGIC, 8);
    put_u32(o, OC_REC_VERSION);
    put_u32(o, (S.precise ? OC_REC_F_PRECISE : 0) | (S.ring_bytes ? OC_REC_F_RING : 0) |
                   (S.fn_threshold ? OC_REC_F_NEAR_ZERO : 0));
    put_u32(o, S.threshold);
    put_u32(o, (uint32_t)S.pid);
    put_u64(o, S.tsc0);
    put_u64(o, S.mono0_ns);
    double npt = S.ns_per_tick;
    oc_out_write(o, (const char *)&npt, 8);
    char clock[24] = {0};
    snprintf(clock, sizeof clock, "%s", oc_clock_source());
    oc_out_write(o, clock, 24);
    oc_out_write(o, (const char *)S.cache_entries, 256);
    put_u32(o, (uint32_t)PY_VERSION_HEX);
    put_u32(o, nlen);
    oc_out_write(o, pn, nlen);
    block(o, OC_BLK_OPTIONS, 8);
    put_u32(o, S.stall_ms);
    put_u32(o, 0);
}

/* CALIB: the mapping known so far (docs/recording.md): the final rate is 0 until the final calibration */
static void write_calib(oc_out *o) {
    block(o, OC_BLK_CALIB, 40);
    put_u64(o, S.tsc0);
    put_u64(o, S.mono0_ns);
    double npt = S.calibrated ? S.ns_per_tick : 0.0, early = S.early_npt;
    oc_out_write(o, (const char *)&npt, 8);
    oc_out_write(o, (const char *)&early, 8);
    put_u64(o, S.knee_tsc);
}

/* OWNCOST: what one event costs, by kind (owncost.c), once it is measured */
static void write_owncost(oc_out *o) {
    block(o, OC_BLK_OWNCOST, 8 + 16 * 8);
    put_u32(o, 16);
    put_u32(o, 0);
    for (int k = 0; k < 16; k++)
        put_u64(o, S.own_cost[k]);
}

static void write_code(oc_out *o, uint32_t id) {
    oc_codeent *e = oc_code_entry(id);
    const char *q = e->qualname_raw ? e->qualname_raw : "?", *f = e->filename_raw ? e->filename_raw : "?";
    uint32_t ql = (uint32_t)strlen(q), fl = (uint32_t)strlen(f), nu = e->code ? e->nunits : 0;
    block(o, OC_BLK_CODE, 20 + ql + fl + nu * 2 + nu * 4);
    put_u32(o, id);
    put_u32(o, (uint32_t)e->firstlineno);
    put_u32(o, nu);
    put_u32(o, ql);
    put_u32(o, fl);
    oc_out_write(o, q, ql);
    oc_out_write(o, f, fl);
    if (nu) {
        oc_out_write(o, (const char *)e->code, (size_t)nu * 2);
        oc_out_write(o, (const char *)e->lines, (size_t)nu * 4);
    }
}

/* lock held (thread names and the table are published under it) */
static void write_thread(oc_out *o, uint32_t idx, uint32_t flags) {
    oc_thread *t = &S.threads[idx];
    const char *name = t->name_raw ? t->name_raw : "";
    uint32_t nl = (uint32_t)strlen(name);
    block(o, OC_BLK_THREAD, 28 + nl);
    put_u32(o, idx);
    put_u32(o, flags);
    put_u64(o, (uint64_t)t->tid);
    put_u64(o, (uint64_t)t->ident);
    put_u32(o, nl);
    oc_out_write(o, name, nl);
}

/* lock held: THREAD blocks for threads not yet written with their name (and unnamed new ones once) */
static void write_new_threads(oc_out *o, int final) {
    if (S.nthreads > RC.cap_written) {
        uint32_t cap = S.nthreads + 64;
        uint32_t *n = realloc(RC.thread_written, cap * sizeof *n);
        if (!n)
            return;
        memset(n + RC.cap_written, 0, (cap - RC.cap_written) * sizeof *n);
        RC.thread_written = n;
        RC.cap_written = cap;
    }
    for (uint32_t i = 0; i < S.nthreads; i++) {
        uint32_t state = S.threads[i].name_raw ? 2 : 1;
        if (RC.thread_written[i] < state && (state == 2 || final || !RC.thread_written[i])) {
            write_thread(o, i, 0);
            RC.thread_written[i] = state;
        }
    }
}

/* The entries below `upto` are complete (published under the lock by a thread holding the GIL) and
 * read by nobody else: once written, their strings are only needed again by a flight-recorder dump. */
/* Write the code table entries [codes_written, upto) and free what the recording now holds (names and
 * bytecode).  The freeing happens under S.lock (`locked`: the caller holds it): fork() takes that lock
 * first (atfork_prepare), so a fork child never inherits an entry freed but not yet cleared, which its
 * oc_codetable_clear() would free a second time. */
static void write_new_codes(oc_out *o, uint32_t upto, int locked) {
    uint32_t from = RC.codes_written;
    while (RC.codes_written < upto)
        write_code(o, RC.codes_written++);
    if (S.ring_bytes || from == upto)
        return;
    if (!locked)
        pthread_mutex_lock(&S.lock);
    for (uint32_t id = from; id < upto; id++) {
        oc_codeent *e = oc_code_entry(id);
        free(e->qualname_raw);
        free(e->filename_raw);
        free(e->code);
        free(e->lines);
        e->qualname_raw = e->filename_raw = NULL;
        e->code = NULL;
        e->lines = NULL;
    }
    if (!locked)
        pthread_mutex_unlock(&S.lock);
}

static void write_chunk(oc_out *o, const oc_chunk *c) {
    block(o, OC_BLK_CHUNK, 8 + c->n * (uint32_t)sizeof(oc_rec));
    put_u32(o, c->thread_idx);
    put_u32(o, c->n);
    oc_out_write(o, (const char *)c->recs, (size_t)c->n * sizeof(oc_rec));
}

/* lock held, GIL-free: the per-code state the renderer's report needs (oc_codetable_snapshot() took it
 * with the GIL at stop; a code object that died earlier left it in its entry) */
static void write_codestate(oc_out *o) {
    uint32_t n = S.ncodes;
    block(o, OC_BLK_CODESTATE, n * 12);
    for (uint32_t id = 0; id < n; id++) {
        oc_codeent *e = oc_code_entry(id);
        put_u32(o, id);
        put_u32(o, e->flags);
        put_u32(o, e->enters);
    }
}

/* the sampling windows (sampling.c) not written yet (all: every one), before the chunks recorded in
 * them; final: the status too, before the END block */
static void write_sampling(oc_out *o, int all, int final) {
    uint32_t len;
    void *p = oc_sampling_block(all, final, &len);
    if (!p)
        return;
    block(o, OC_BLK_SAMPLING_W, len);
    oc_out_write(o, p, len);
    free(p);
}

static void write_end(oc_out *o, uint64_t events) {
    block(o, OC_BLK_END, 32);
    put_u64(o, RC.stop_ticks);
    put_u64(o, events);
    put_u64(o, S.dropped);
    put_u64(o, S.pauses);
}

static uint64_t mono_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- ring mode ---- */

/* lock held: keep `c`, give back the oldest chunks beyond the window */
static void ring_keep(oc_chunk *c) {
    c->next = NULL;
    if (RC.ring_tail)
        RC.ring_tail->next = c;
    else
        RC.ring_head = c;
    RC.ring_tail = c;
    RC.ring_kept += sizeof(oc_chunk);
    while (RC.ring_kept > S.ring_bytes && RC.ring_head != RC.ring_tail) {
        oc_chunk *old = RC.ring_head;
        RC.ring_head = old->next;
        RC.ring_kept -= sizeof(oc_chunk);
        oc_chunk_put_free(old);
    }
}

static void ring_release(void) {
    while (RC.ring_head) {
        oc_chunk *c = RC.ring_head;
        RC.ring_head = c->next;
        oc_chunk_put_free(c);
    }
    RC.ring_tail = NULL;
    RC.ring_kept = 0;
}

/* Write the kept window as a complete recording (lock held by the caller; the GIL too when called
 * while the program runs, so no thread appends to its partial chunk meanwhile).  Returns 0 or errno. */
static int dump_locked(const char *path, uint64_t end_ticks) {
    int fd = oc_fd_above_std(open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd < 0)
        return errno;
    oc_out o = {.fd = fd, .cap = 1 << 20};
    oc_out_own(&o, path);
    o.buf = malloc(o.cap);
    if (!o.buf) {
        close(fd);
        return ENOMEM;
    }
    write_header(&o);
    write_calib(&o);
    if (atomic_load(&S.own_cost_set))
        write_owncost(&o);
    for (uint32_t id = 0; id < S.ncodes; id++)
        write_code(&o, id);
    for (uint32_t i = 0; i < S.nthreads; i++)
        write_thread(&o, i, 0);
    uint64_t first = UINT64_MAX, events = 0;
    for (oc_chunk *c = RC.ring_head; c; c = c->next)
        if (c->n && c->recs[0].ts < first)
            first = c->recs[0].ts;
    for (oc_chunk *c = S.q_head; c; c = c->next)
        if (c->n && c->recs[0].ts < first)
            first = c->recs[0].ts;
    block(&o, OC_BLK_WINDOW, 8);
    put_u64(&o, first);
    for (oc_chunk *c = RC.ring_head; c; c = c->next) {
        write_chunk(&o, c);
        if (c->ended && c->thread_idx < S.nthreads)
            write_thread(&o, c->thread_idx, OC_THREAD_ENDED);
        events += c->n;
    }
    for (oc_chunk *c = S.q_head; c; c = c->next) { /* full, not yet moved into the ring */
        write_chunk(&o, c);
        if (c->ended && c->thread_idx < S.nthreads)
            write_thread(&o, c->thread_idx, OC_THREAD_ENDED);
        events += c->n;
    }
    events += oc_buffer_write_partial(&o, write_chunk);
    write_codestate(&o);
    write_sampling(&o, 1, 1);
    uint64_t saved = RC.stop_ticks;
    RC.stop_ticks = end_ticks;
    write_end(&o, events);
    RC.stop_ticks = saved;
    oc_out_flush(&o);
    int err = o.err, cerr = oc_out_close(&o);
    if (cerr && !err)
        err = cerr;
    free(o.buf);
    return err;
}

int oc_recorder_dump(const char *path) {
    uint64_t now = oc_now();
    pthread_mutex_lock(&S.lock);
    int err = dump_locked(path, now);
    pthread_mutex_unlock(&S.lock);
    return err;
}

/* ---- orphaned fork children (see oc_only_helper_threads_left) ---- */

/* A child forked from a non-main thread ends when that thread returns: no interpreter exit, no atexit,
 * and without us the process would end with its last thread.  So in a fork child the idle recorder
 * looks every 200 ms whether only Ocular's own threads are left (itself and the USDT poller); if so
 * nobody can stop the session any more: it finishes the recording, renders the trace, gives it its
 * final name and ends the process with status 0, as the last thread's exit would have. */
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
        if (strcmp(comm, OC_USDT_THREAD_NAME) != 0 && strcmp(comm, OC_WRITER_THREAD_NAME) != 0 &&
            strcmp(comm, OC_REMOVE_THREAD_NAME) != 0 &&
            strcmp(comm, OC_RENDER_THREAD_NAME) != 0)
            others = 1;
    }
    closedir(d);
    return seen > 0 && !others;
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

/* Close the recording's descriptor (RC.out.fd) if it is still ours (the program may have closed it and
 * opened a file of its own under the number; out.c then wrote on through another); 0 or errno. */
static int close_recording(void) { return oc_out_close(&RC.out); }

/* lock held: everything after the last chunk; the recording is complete after this.  partials: the
 * program's threads still run (a signal, sigsave.c): their partial chunks are written as they are (up
 * to each one's position when read; stop_tracing() hands them over instead, with the GIL) */
static void finish_locked(int partials) {
    if (S.ring_bytes) {
        close_recording();
        int err = dump_locked(S.rec_path, RC.stop_ticks);
        if (err && !RC.out.err)
            RC.out.err = err;
        ring_release();
        return;
    }
    write_new_codes(&RC.out, S.ncodes, 1);
    write_new_threads(&RC.out, 1);
    if (partials) {
        for (oc_chunk *c = S.q_head; c; c = c->next) { /* (queued by a slow path that began before the stop) */
            write_chunk(&RC.out, c);
            RC.events += c->n;
        }
        RC.events += oc_buffer_write_partial(&RC.out, write_chunk);
    }
    write_calib(&RC.out);
    write_codestate(&RC.out);
    write_sampling(&RC.out, 0, 1);
    write_end(&RC.out, RC.events);
    oc_out_flush(&RC.out);
}

static void finish_orphan(void) {
    int err = RC.out.err;
    int cerr = close_recording();
    if (cerr && !err)
        err = cerr;
    if (!err && S.out_path && S.tmp_path) {
        oc_render_result res;
        size_t n = strlen(S.out_path);
        int gz = n >= 3 && strcasecmp(S.out_path + n - 3, ".gz") == 0; /* (gzip is Python's: kept, below) */
        if (S.write_json && !gz) {
            if (oc_render_file(S.rec_path, S.format, S.tmp_path, 0, S.loops, 1, &res) == 0 && !res.write_errno &&
                rename(S.tmp_path, S.out_path) == 0)
                unlink(S.rec_path);
            else
                unlink(S.tmp_path);
        } else if (n >= 7 && strcasecmp(S.out_path + n - 7, ".ocular") == 0) {
            rename(S.rec_path, S.out_path); /* the recording is the output */
        } else { /* a profile format or gzip, done by Python code: the recording is kept for `convert` */
            unlink(S.tmp_path); /* (a render while recording may have begun it) */
            char *kept = malloc(n + 8);
            if (kept) {
                memcpy(kept, S.out_path, n);
                memcpy(kept + n, ".ocular", 8);
                if (rename(S.rec_path, kept) == 0)
                    dprintf(2, "ocular: process %ld ended without its interpreter (forked from a thread), which "
                               "writes this format; its recording is kept in %s: render it with "
                               "python -m ocular convert %s -o %s\n", (long)getpid(), kept, kept, S.out_path);
                free(kept);
            }
        }
    }
    exit(0);
}

static void *recorder_main(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), OC_WRITER_THREAD_NAME);
    int orphaned = 0, signaled = 0, idle_polls = 0;
    pthread_mutex_lock(&S.lock);
    for (;;) {
        if (UNLIKELY(oc_signals_pending()) && !signaled && oc_signals_take()) {
            /* SIGTERM or SIGHUP (sigsave.c): stop recording, write what is queued, end the recording */
            signaled = 1;
            RC.stop_ticks = oc_now();
            S.active = 0; /* no thread takes a new chunk: each writes at most to the end of its own */
            S.stopping = 1;
            pthread_cond_broadcast(&S.cond_free);
        }
        if (!S.calibrated) { /* (chunks wait for the early calibration: ~2 ms) */
            uint64_t since = mono_now_ns() - RC.start_ns;
            if (!S.early_calibrated) {
                if (!S.stopping && since < 2000000ull) {
                    wait_writer_ms(1);
                    continue;
                }
                oc_clock_calibrate_early();
                if (!S.ring_bytes)
                    write_calib(&RC.out);
            }
            if (!S.calibrated && (S.stopping || since >= 20000000ull)) {
                oc_clock_calibrate();
                if (!S.ring_bytes)
                    write_calib(&RC.out);
            }
        }
        if (!RC.owncost_written && !S.ring_bytes && atomic_load(&S.own_cost_set)) {
            write_owncost(&RC.out);
            RC.owncost_written = 1;
        }
        oc_chunk *c = S.q_head;
        if (!c) {
            if (S.stopping)
                break;
            if (RC.out.len) { /* idle: put what is recorded on disk, so a killed process loses less */
                pthread_mutex_unlock(&S.lock);
                oc_out_flush(&RC.out);
                tell_failure();
                pthread_mutex_lock(&S.lock);
                continue;
            }
            if (in_fork_child) { /* (20 ms waits, for a signal's note; the threads are looked at every 200 ms) */
                if (wait_writer_ms(20) == ETIMEDOUT && ++idle_polls >= 10) {
                    idle_polls = 0;
                    if (!S.q_head && !S.stopping && oc_only_helper_threads_left()) {
                        orphaned = 1;
                        RC.stop_ticks = oc_now();
                        break;
                    }
                }
                continue;
            }
            S.recorder_idle = 1;
            /* woken by a batch of chunks, by stop, or by the clock (the final calibration's time) */
            uint64_t since = mono_now_ns() - RC.start_ns;
            wait_writer_ms(!S.calibrated && since < 20000000ull ? (int)((20000000ull - since) / 1000000ull) + 1 : 20);
            S.recorder_idle = 0;
            continue;
        }
        S.q_head = c->next;
        if (!S.q_head)
            S.q_tail = NULL;
        S.nqueued--;
        pthread_cond_broadcast(&S.cond_free);
        RC.events += c->n;
        if (S.ring_bytes) {
            ring_keep(c);
            continue;
        }
        uint32_t upto = S.ncodes_pub;
        if (RC.codes_written < upto || S.threads_named != S.threads_named_seen) {
            S.threads_named_seen = S.threads_named;
            write_new_threads(&RC.out, 0);
            pthread_mutex_unlock(&S.lock);
            write_new_codes(&RC.out, upto, 0);
        } else {
            pthread_mutex_unlock(&S.lock);
        }
        if (UNLIKELY(oc_sampling_new()))
            write_sampling(&RC.out, 0, 0);
        write_chunk(&RC.out, c);
        tell_failure();
        if (UNLIKELY(RC.test_delay_us))
            usleep((useconds_t)RC.test_delay_us);
        pthread_mutex_lock(&S.lock);
        if (c->ended && c->thread_idx < S.nthreads) /* (the thread table is published under the lock) */
            write_thread(&RC.out, c->thread_idx, OC_THREAD_ENDED);
        oc_chunk_put_free(c);
    }
    if (signaled) {
        /* a slow path already past its check of S.active ends its hand-over (microseconds), and the
         * records below each thread's position reach memory (x86's non-temporal stores are ordered by
         * the next interrupt or locked instruction of their CPU at the latest): then partial chunks are read */
        pthread_mutex_unlock(&S.lock);
        usleep(2000);
        pthread_mutex_lock(&S.lock);
        atomic_thread_fence(memory_order_acquire);
    }
    finish_locked(signaled);
    pthread_mutex_unlock(&S.lock);
    if (orphaned)
        finish_orphan();
    if (signaled) {
        oc_out_flush(&RC.out);
        close_recording();
        oc_signals_finish(); /* (does not return: the process ends by the signal) */
    }
    return NULL;
}

int oc_recorder_start(void) {
    RC.events = 0;
    RC.told = 0;
    RC.owncost_written = 0;
    RC.codes_written = 0;
    free(RC.thread_written);
    RC.thread_written = NULL;
    RC.cap_written = 0;
    RC.ring_head = RC.ring_tail = NULL;
    RC.ring_kept = 0;
    RC.start_ns = mono_now_ns();
    const char *delay = getenv("OCULAR_TEST_RECORDER_DELAY_US");
    RC.test_delay_us = delay ? strtol(delay, NULL, 10) : 0;
    if (RC.test_delay_us < 0 || RC.test_delay_us > 1000000)
        RC.test_delay_us = 0;
    const char *queue = getenv("OCULAR_TEST_RECORDER_QUEUE");
    long q = queue ? strtol(queue, NULL, 10) : 0;
    S.max_queued = q > 0 && q <= OC_MAX_QUEUED ? (uint32_t)q : OC_MAX_QUEUED;
    RC.out.fd = -1;
    RC.out.err = 0;
    RC.out.total = 0;
    RC.out.len = 0;
    if (!RC.out.buf) {
        RC.out.cap = 1 << 20;
        RC.out.buf = malloc(RC.out.cap);
        if (!RC.out.buf) {
            PyErr_NoMemory();
            return -1;
        }
    }
    if (!S.ring_bytes) {
        RC.out.fd = oc_fd_above_std(open(S.rec_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (RC.out.fd < 0) {
            PyErr_SetFromErrnoWithFilename(PyExc_OSError, S.rec_path);
            return -1;
        }
        oc_out_own(&RC.out, S.rec_path);
        write_header(&RC.out);
    }
    S.stopping = 0;
    int rc = oc_thread_create(&S.writer, NULL, recorder_main, NULL);
    if (rc != 0) {
        if (RC.out.fd >= 0)
            unlink(S.rec_path);
        close_recording();
        PyErr_Format(PyExc_RuntimeError, "ocular: cannot start the recorder thread: %s", strerror(rc));
        return -1;
    }
    S.writer_started = 1;
    if (!S.ring_bytes && S.write_json && S.tmp_path && (oc_format_caps(S.format) & OC_CAP_TRACE))
        oc_render_live_start(S.rec_path, S.format, S.tmp_path, S.loops);
    return 0;
}

void oc_recorder_stop(uint64_t stop_ticks) {
    if (!S.writer_started)
        return;
    pthread_mutex_lock(&S.lock);
    RC.stop_ticks = stop_ticks;
    S.stopping = 1;
    pthread_cond_broadcast(&S.cond_writer);
    pthread_mutex_unlock(&S.lock);
    pthread_join(S.writer, NULL);
    S.writer_started = 0;
    int cerr = close_recording();
    if (cerr && !RC.out.err)
        RC.out.err = cerr;
    S.write_errno = RC.out.err;
    S.bytes_written = RC.out.total;
}

/* In a fork child: the recorder thread does not exist here and its fd belongs to the parent. */
void oc_recorder_fork_child(void) {
    in_fork_child = 1;
    S.writer_started = 0;
    close_recording(); /* our copy only; the parent keeps writing its own */
    RC.out.len = 0;
    /* the parent's ring chunks were copied into this process: forget them (a one-time leak) */
    RC.ring_head = RC.ring_tail = NULL;
    RC.ring_kept = 0;
    RC.thread_written = NULL;
    RC.cap_written = 0;
}
