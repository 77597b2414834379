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
 * oldest are given back once more than sess.ring_bytes are kept; oc_recorder_dump() writes the kept window
 * (plus every live thread's partial chunk) as a complete recording, at stop or on demand (SIGUSR2).
 *
 * SIGTERM and SIGHUP (sigsave.c, when armed): the recorder sees the signal's note at its next turn (it
 * waits 20 ms at most), stops the session without the GIL, writes every thread's partial chunk, ends the
 * recording and hands it to oc_signals_finish(), which renders it and ends the process by the signal.
 *
 * A write that fails (a full disk) is told to the program at once (sess.hooks.recording_failed: a pending
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
    oc_chunk *ring_head, *ring_tail; /* ring mode: kept chunks, oldest first (guarded by sess.lock) */
    size_t ring_kept;
    int told;                 /* the program was told that a write failed (once a session) */
    int owncost_written;      /* the OWNCOST block is written (once a session) */
} rec_st;

/* After writes: the first failure of the session is told to the program. */
static inline void tell_failure(void) {
    if (UNLIKELY(rec_st.out.err) && !rec_st.told) {
        rec_st.told = 1;
        sess.hooks.recording_failed(rec_st.out.err);
    }
}

uint64_t oc_recorder_events(void) { return rec_st.events; }
uint64_t oc_recorder_bytes(void) { return rec_st.out.total; }
int oc_recorder_errno(void) { return rec_st.out.err; }

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
    const char *pn = sess.process_name_raw ? sess.process_name_raw : "python";
    uint32_t nlen = (uint32_t)strlen(pn);
    block(o, OC_BLK_HEADER, OC_HEADER_FIXED + nlen);
    oc_out_write(o, OC_REC_MAGIC, 8);
    put_u32(o, OC_REC_VERSION);
    put_u32(o, (sess.precise ? OC_REC_F_PRECISE : 0) | (sess.ring_bytes ? OC_REC_F_RING : 0) |
                   (sess.fn_threshold ? OC_REC_F_NEAR_ZERO : 0));
    put_u32(o, sess.threshold);
    put_u32(o, (uint32_t)sess.pid);
    put_u64(o, sess.tsc0);
    put_u64(o, sess.mono0_ns);
    double npt = sess.ns_per_tick;
    oc_out_write(o, (const char *)&npt, 8);
    char clock[24] = {0};
    snprintf(clock, sizeof clock, "%s", oc_clock_source());
    oc_out_write(o, clock, 24);
    oc_out_write(o, (const char *)sess.cache_entries, 256);
    put_u32(o, (uint32_t)PY_VERSION_HEX);
    put_u32(o, nlen);
    oc_out_write(o, pn, nlen);
    block(o, OC_BLK_OPTIONS, 8);
    put_u32(o, sess.stall_ms);
    put_u32(o, 0);
}

/* CALIB: the mapping known so far (docs/recording.md): the final rate is 0 until the final calibration */
static void write_calib(oc_out *o) {
    block(o, OC_BLK_CALIB, 40);
    put_u64(o, sess.tsc0);
    put_u64(o, sess.mono0_ns);
    double npt = sess.calibrated ? sess.ns_per_tick : 0.0, early = sess.early_npt;
    oc_out_write(o, (const char *)&npt, 8);
    oc_out_write(o, (const char *)&early, 8);
    put_u64(o, sess.knee_tsc);
}

/* OWNCOST: what one event costs, by kind (owncost.c), once it is measured */
static void write_owncost(oc_out *o) {
    block(o, OC_BLK_OWNCOST, 8 + 16 * 8);
    put_u32(o, 16);
    put_u32(o, 0);
    for (int k = 0; k < 16; k++)
        put_u64(o, sess.own_cost[k]);
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
    oc_thread *t = &sess.threads[idx];
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
    if (sess.nthreads > rec_st.cap_written) {
        uint32_t cap = sess.nthreads + 64;
        uint32_t *n = realloc(rec_st.thread_written, cap * sizeof *n);
        if (!n)
            return;
        memset(n + rec_st.cap_written, 0, (cap - rec_st.cap_written) * sizeof *n);
        rec_st.thread_written = n;
        rec_st.cap_written = cap;
    }
    for (uint32_t i = 0; i < sess.nthreads; i++) {
        uint32_t state = sess.threads[i].name_raw ? 2 : 1;
        if (rec_st.thread_written[i] < state && (state == 2 || final || !rec_st.thread_written[i])) {
            write_thread(o, i, 0);
            rec_st.thread_written[i] = state;
        }
    }
}

/* The entries below `upto` are complete (published under the lock by a thread holding the GIL) and
 * read by nobody else: once written, their strings are only needed again by a flight-recorder dump. */
/* Write the code table entries [codes_written, upto) and free what the recording now holds (names and
 * bytecode).  The freeing happens under sess.lock (`locked`: the caller holds it): fork() takes that lock
 * first (atfork_prepare), so a fork child never inherits an entry freed but not yet cleared, which its
 * oc_codetable_clear() would free a second time. */
static void write_new_codes(oc_out *o, uint32_t upto, int locked) {
    uint32_t from = rec_st.codes_written;
    while (rec_st.codes_written < upto)
        write_code(o, rec_st.codes_written++);
    if (sess.ring_bytes || from == upto)
        return;
    if (!locked)
        pthread_mutex_lock(&sess.lock);
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
        pthread_mutex_unlock(&sess.lock);
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
    uint32_t n = sess.ncodes;
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
    put_u64(o, rec_st.stop_ticks);
    put_u64(o, events);
    put_u64(o, sess.dropped);
    put_u64(o, sess.pauses);
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
    if (rec_st.ring_tail)
        rec_st.ring_tail->next = c;
    else
        rec_st.ring_head = c;
    rec_st.ring_tail = c;
    rec_st.ring_kept += sizeof(oc_chunk);
    while (rec_st.ring_kept > sess.ring_bytes && rec_st.ring_head != rec_st.ring_tail) {
        oc_chunk *old = rec_st.ring_head;
        rec_st.ring_head = old->next;
        rec_st.ring_kept -= sizeof(oc_chunk);
        oc_chunk_put_free(old);
    }
}

static void ring_release(void) {
    while (rec_st.ring_head) {
        oc_chunk *c = rec_st.ring_head;
        rec_st.ring_head = c->next;
        oc_chunk_put_free(c);
    }
    rec_st.ring_tail = NULL;
    rec_st.ring_kept = 0;
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
    if (atomic_load(&sess.own_cost_set))
        write_owncost(&o);
    for (uint32_t id = 0; id < sess.ncodes; id++)
        write_code(&o, id);
    for (uint32_t i = 0; i < sess.nthreads; i++)
        write_thread(&o, i, 0);
    uint64_t first = UINT64_MAX, events = 0;
    for (oc_chunk *c = rec_st.ring_head; c; c = c->next)
        if (c->n && c->recs[0].ts < first)
            first = c->recs[0].ts;
    for (oc_chunk *c = sess.q_head; c; c = c->next)
        if (c->n && c->recs[0].ts < first)
            first = c->recs[0].ts;
    block(&o, OC_BLK_WINDOW, 8);
    put_u64(&o, first);
    for (oc_chunk *c = rec_st.ring_head; c; c = c->next) {
        write_chunk(&o, c);
        if (c->ended && c->thread_idx < sess.nthreads)
            write_thread(&o, c->thread_idx, OC_THREAD_ENDED);
        events += c->n;
    }
    for (oc_chunk *c = sess.q_head; c; c = c->next) { /* full, not yet moved into the ring */
        write_chunk(&o, c);
        if (c->ended && c->thread_idx < sess.nthreads)
            write_thread(&o, c->thread_idx, OC_THREAD_ENDED);
        events += c->n;
    }
    events += oc_buffer_write_partial(&o, write_chunk);
    write_codestate(&o);
    write_sampling(&o, 1, 1);
    uint64_t saved = rec_st.stop_ticks;
    rec_st.stop_ticks = end_ticks;
    write_end(&o, events);
    rec_st.stop_ticks = saved;
    oc_out_flush(&o);
    int err = o.err, cerr = oc_out_close(&o);
    if (cerr && !err)
        err = cerr;
    free(o.buf);
    return err;
}

int oc_recorder_dump(const char *path) {
    uint64_t now = oc_now();
    pthread_mutex_lock(&sess.lock);
    int err = dump_locked(path, now);
    pthread_mutex_unlock(&sess.lock);
    return err;
}

/* ---- orphaned fork children (see oc_only_helper_threads_left) ---- */

/* A child forked from a non-main thread ends when that thread returns: no interpreter exit, no atexit,
 * and without us the process would end with its last thread.  So in a fork child the idle recorder
 * looks every 200 ms whether only Ocular's own threads are left (itself and the USDT poller); if so
 * nobody can stop the session any more: it finishes the recording, renders the trace, gives it its
 * final name and ends the process with status 0, as the last thread's exit would have. */
static int in_fork_child;

/* The process's thread count (the Threads: line of /proc/self/status), or -1 if unreadable.  Read piece
 * by piece: the Groups: line before it can be long. */
static int threads_now(void) {
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[4096];
    size_t keep = 0;
    int count = -1;
    for (;;) {
        ssize_t n = read(fd, buf + keep, sizeof buf - 1 - keep);
        if (n <= 0)
            break;
        size_t len = keep + (size_t)n;
        buf[len] = 0;
        const char *p = strstr(buf, "\nThreads:");
        if (p && strchr(p + 1, '\n')) {
            count = atoi(p + 9);
            break;
        }
        keep = len < 64 ? len : 64; /* a line begun at the end of this piece: the line is shorter than that */
        memmove(buf, buf + len - keep, keep);
    }
    close(fd);
    return count;
}

/* One look at the threads for oc_only_helper_threads_left.  A listing of /proc/self/task ends early when
 * the thread it stands on exits meanwhile (Linux: readdir goes from thread to thread, and stops at one
 * that has gone), so live threads listed after it would be missed; it counts only if it read as many
 * threads as the process has, before and after (where /proc gives no count, the listing alone). */
static int helpers_only_once(void) {
    int before = threads_now();
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
    return seen > 0 && !others && (before < 0 || (seen == before && threads_now() == before));
}

/* 1 if every live thread of this process is one of Ocular's helpers, 0 otherwise (or if unsure).  Two
 * looks, one after the other, must agree: threads begun and ended during one look could make up the
 * count for a live thread its listing missed, not the same way twice. */
int oc_only_helper_threads_left(void) { return helpers_only_once() && helpers_only_once(); }

/* Wait on cond_writer (lock held) for at most `ms` milliseconds; returns pthread_cond_timedwait's code. */
static int wait_writer_ms(long ms) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += ms * 1000000L;
    while (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(&sess.cond_writer, &sess.lock, &dl);
}

/* Close the recording's descriptor (rec_st.out.fd) if it is still ours (the program may have closed it and
 * opened a file of its own under the number; out.c then wrote on through another); 0 or errno. */
static int close_recording(void) { return oc_out_close(&rec_st.out); }

/* lock held: everything after the last chunk; the recording is complete after this.  partials: the
 * program's threads still run (a signal, sigsave.c): their partial chunks are written as they are (up
 * to each one's position when read; stop_tracing() hands them over instead, with the GIL) */
static void finish_locked(int partials) {
    if (sess.ring_bytes) {
        close_recording();
        int err = dump_locked(sess.rec_path, rec_st.stop_ticks);
        if (err && !rec_st.out.err)
            rec_st.out.err = err;
        ring_release();
        return;
    }
    write_new_codes(&rec_st.out, sess.ncodes, 1);
    write_new_threads(&rec_st.out, 1);
    if (partials) {
        for (oc_chunk *c = sess.q_head; c; c = c->next) { /* (queued by a slow path that began before the stop) */
            write_chunk(&rec_st.out, c);
            rec_st.events += c->n;
        }
        rec_st.events += oc_buffer_write_partial(&rec_st.out, write_chunk);
    }
    write_calib(&rec_st.out);
    write_codestate(&rec_st.out);
    write_sampling(&rec_st.out, 0, 1);
    write_end(&rec_st.out, rec_st.events);
    oc_out_flush(&rec_st.out);
}

static void finish_orphan(void) {
    int err = rec_st.out.err;
    int cerr = close_recording();
    if (cerr && !err)
        err = cerr;
    if (!err && sess.out_path && sess.tmp_path) {
        oc_render_result res;
        size_t n = strlen(sess.out_path);
        int gz = n >= 3 && strcasecmp(sess.out_path + n - 3, ".gz") == 0; /* (gzip is Python's: kept, below) */
        if (sess.write_json && !gz) {
            if (sess.hooks.render(sess.rec_path, sess.format, sess.tmp_path, 0, sess.loops, 1, &res) == 0 && !res.write_errno &&
                rename(sess.tmp_path, sess.out_path) == 0)
                unlink(sess.rec_path);
            else
                unlink(sess.tmp_path);
        } else if (n >= 7 && strcasecmp(sess.out_path + n - 7, ".ocular") == 0) {
            rename(sess.rec_path, sess.out_path); /* the recording is the output */
        } else { /* a profile format or gzip, done by Python code: the recording is kept for `convert` */
            unlink(sess.tmp_path); /* (a render while recording may have begun it) */
            char *kept = malloc(n + 8);
            if (kept) {
                memcpy(kept, sess.out_path, n);
                memcpy(kept + n, ".ocular", 8);
                if (rename(sess.rec_path, kept) == 0)
                    dprintf(2, "ocular: process %ld ended without its interpreter (forked from a thread), which "
                               "writes this format; its recording is kept in %s: render it with "
                               "python -m ocular convert %s -o %s\n", (long)getpid(), kept, kept, sess.out_path);
                free(kept);
            }
        }
    }
    exit(0);
}

static void *recorder_main(void *arg) {
    (void)arg;
    int orphaned = 0, signaled = 0, idle_polls = 0;
    pthread_mutex_lock(&sess.lock);
    for (;;) {
        if (UNLIKELY(oc_signals_pending()) && !signaled && oc_signals_take()) {
            /* SIGTERM or SIGHUP (sigsave.c): stop recording, write what is queued, end the recording */
            signaled = 1;
            rec_st.stop_ticks = oc_now();
            sess.active = 0; /* no thread takes a new chunk: each writes at most to the end of its own */
            sess.stopping = 1;
            pthread_cond_broadcast(&sess.cond_free);
        }
        if (!sess.calibrated) { /* (chunks wait for the early calibration: ~2 ms) */
            uint64_t since = mono_now_ns() - rec_st.start_ns;
            if (!sess.early_calibrated) {
                if (!sess.stopping && since < 2000000ull) {
                    wait_writer_ms(1);
                    continue;
                }
                oc_clock_calibrate_early();
                if (!sess.ring_bytes)
                    write_calib(&rec_st.out);
            }
            if (!sess.calibrated && (sess.stopping || since >= 20000000ull)) {
                oc_clock_calibrate();
                if (!sess.ring_bytes)
                    write_calib(&rec_st.out);
            }
        }
        if (!rec_st.owncost_written && !sess.ring_bytes && atomic_load(&sess.own_cost_set)) {
            write_owncost(&rec_st.out);
            rec_st.owncost_written = 1;
        }
        oc_chunk *c = sess.q_head;
        if (!c) {
            if (sess.stopping)
                break;
            if (rec_st.out.len) { /* idle: put what is recorded on disk, so a killed process loses less */
                pthread_mutex_unlock(&sess.lock);
                oc_out_flush(&rec_st.out);
                tell_failure();
                pthread_mutex_lock(&sess.lock);
                continue;
            }
            if (in_fork_child) { /* (20 ms waits, for a signal's note; the threads are looked at every 200 ms) */
                if (wait_writer_ms(20) == ETIMEDOUT && ++idle_polls >= 10) {
                    idle_polls = 0;
                    if (!sess.q_head && !sess.stopping && oc_only_helper_threads_left()) {
                        orphaned = 1;
                        rec_st.stop_ticks = oc_now();
                        break;
                    }
                }
                continue;
            }
            sess.recorder_idle = 1;
            /* woken by a batch of chunks, by stop, or by the clock (the final calibration's time) */
            uint64_t since = mono_now_ns() - rec_st.start_ns;
            wait_writer_ms(!sess.calibrated && since < 20000000ull ? (int)((20000000ull - since) / 1000000ull) + 1 : 20);
            sess.recorder_idle = 0;
            continue;
        }
        sess.q_head = c->next;
        if (!sess.q_head)
            sess.q_tail = NULL;
        sess.nqueued--;
        pthread_cond_broadcast(&sess.cond_free);
        rec_st.events += c->n;
        if (sess.ring_bytes) {
            ring_keep(c);
            continue;
        }
        uint32_t upto = sess.ncodes_pub;
        if (rec_st.codes_written < upto || sess.threads_named != sess.threads_named_seen) {
            sess.threads_named_seen = sess.threads_named;
            write_new_threads(&rec_st.out, 0);
            pthread_mutex_unlock(&sess.lock);
            write_new_codes(&rec_st.out, upto, 0);
        } else {
            pthread_mutex_unlock(&sess.lock);
        }
        if (UNLIKELY(oc_sampling_new()))
            write_sampling(&rec_st.out, 0, 0);
        write_chunk(&rec_st.out, c);
        tell_failure();
        if (UNLIKELY(rec_st.test_delay_us))
            usleep((useconds_t)rec_st.test_delay_us);
        pthread_mutex_lock(&sess.lock);
        if (c->ended && c->thread_idx < sess.nthreads) /* (the thread table is published under the lock) */
            write_thread(&rec_st.out, c->thread_idx, OC_THREAD_ENDED);
        oc_chunk_put_free(c);
    }
    if (signaled) {
        /* a slow path already past its check of sess.active ends its hand-over (microseconds), and the
         * records below each thread's position reach memory (x86's non-temporal stores are ordered by
         * the next interrupt or locked instruction of their CPU at the latest): then partial chunks are read */
        pthread_mutex_unlock(&sess.lock);
        usleep(2000);
        pthread_mutex_lock(&sess.lock);
        atomic_thread_fence(memory_order_acquire);
    }
    finish_locked(signaled);
    pthread_mutex_unlock(&sess.lock);
    if (orphaned)
        finish_orphan();
    if (signaled) {
        oc_out_flush(&rec_st.out);
        close_recording();
        oc_signals_finish(); /* (does not return: the process ends by the signal) */
    }
    return NULL;
}

int oc_recorder_start(void) {
    rec_st.events = 0;
    rec_st.told = 0;
    rec_st.owncost_written = 0;
    rec_st.codes_written = 0;
    free(rec_st.thread_written);
    rec_st.thread_written = NULL;
    rec_st.cap_written = 0;
    rec_st.ring_head = rec_st.ring_tail = NULL;
    rec_st.ring_kept = 0;
    rec_st.start_ns = mono_now_ns();
    const char *delay = getenv("OCULAR_TEST_RECORDER_DELAY_US");
    rec_st.test_delay_us = delay ? strtol(delay, NULL, 10) : 0;
    if (rec_st.test_delay_us < 0 || rec_st.test_delay_us > 1000000)
        rec_st.test_delay_us = 0;
    const char *queue = getenv("OCULAR_TEST_RECORDER_QUEUE");
    long q = queue ? strtol(queue, NULL, 10) : 0;
    sess.max_queued = q > 0 && q <= OC_MAX_QUEUED ? (uint32_t)q : OC_MAX_QUEUED;
    rec_st.out.fd = -1;
    rec_st.out.err = 0;
    rec_st.out.total = 0;
    rec_st.out.len = 0;
    if (!rec_st.out.buf) {
        rec_st.out.cap = 1 << 20;
        rec_st.out.buf = malloc(rec_st.out.cap);
        if (!rec_st.out.buf) {
            PyErr_NoMemory();
            return -1;
        }
    }
    if (!sess.ring_bytes) {
        rec_st.out.fd = oc_fd_above_std(open(sess.rec_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (rec_st.out.fd < 0) {
            PyErr_SetFromErrnoWithFilename(PyExc_OSError, sess.rec_path);
            return -1;
        }
        oc_out_own(&rec_st.out, sess.rec_path);
        write_header(&rec_st.out);
    }
    sess.stopping = 0;
    int rc = oc_thread_create(&sess.writer, NULL, recorder_main, NULL, OC_WRITER_THREAD_NAME);
    if (rc != 0) {
        if (rec_st.out.fd >= 0)
            unlink(sess.rec_path);
        close_recording();
        PyErr_Format(PyExc_RuntimeError, "ocular: cannot start the recorder thread: %s", strerror(rc));
        return -1;
    }
    sess.writer_started = 1;
    if (!sess.ring_bytes && sess.write_json && sess.tmp_path)
        sess.hooks.live_start(sess.rec_path, sess.format, sess.tmp_path, sess.loops);
    return 0;
}

void oc_recorder_stop(uint64_t stop_ticks) {
    if (!sess.writer_started)
        return;
    pthread_mutex_lock(&sess.lock);
    rec_st.stop_ticks = stop_ticks;
    sess.stopping = 1;
    pthread_cond_broadcast(&sess.cond_writer);
    pthread_mutex_unlock(&sess.lock);
    pthread_join(sess.writer, NULL);
    sess.writer_started = 0;
    int cerr = close_recording();
    if (cerr && !rec_st.out.err)
        rec_st.out.err = cerr;
    sess.write_errno = rec_st.out.err;
    sess.bytes_written = rec_st.out.total;
}

/* In a fork child: the recorder thread does not exist here and its fd belongs to the parent. */
void oc_recorder_fork_child(void) {
    in_fork_child = 1;
    sess.writer_started = 0;
    close_recording(); /* our copy only; the parent keeps writing its own */
    rec_st.out.len = 0;
    /* the parent's ring chunks were copied into this process: forget them (a one-time leak) */
    rec_st.ring_head = rec_st.ring_tail = NULL;
    rec_st.ring_kept = 0;
    rec_st.thread_written = NULL;
    rec_st.cap_written = 0;
}
