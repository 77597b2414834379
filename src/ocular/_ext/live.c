/* live.c -- rendering while recording: a thread that renders the recording as the recorder appends it,
 * whose state the render at stop takes over (render.c). */
#include "render_int.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- rendering while recording ----
 * With a second CPU, a thread renders the recording as the recorder appends it, in the order a render
 * at stop takes (the trace formats: every chunk as recorded; speedscope: the first thread's), once the
 * clock's calibration is in the recording; it runs at a lower priority than the program, reads the recording
 * through a shared read-only mapping (reserved large, filled as the file grows), and never makes
 * anyone wait.  It waits 5 ms only after a step that found nothing new: a step that rendered
 * something is followed by another at once (the recorder wrote more meanwhile).  Pausing after every
 * step left 20-50% of the generator workload's events for stop; now 0-45%, as the scheduler shares
 * the second CPU between the recorder and the renderer (it is full there), and of fib(27) 0-20%.  At stop,
 * oc_render_file takes its state over and renders the rest, so the output is the one a render from
 * scratch makes.  What it cannot render early (a recorded pause, whose made-up
 * code id comes after the whole code table; sampling windows, whose estimates need the code states
 * written at the end) makes it give up: the render at stop starts over. */
static struct {
    int on;                  /* a live render was started and not yet taken over or discarded */
    pthread_t thread;
    pthread_mutex_t lock;    /* with cond: the thread's wait between steps, cut short by stop */
    pthread_cond_t cond;
    int stop;                /* __atomic: asked to stop */
    int failed, opened;
    char *rec_path, *out_path;
    int format, loops;
    int fd;
    dev_t dev;               /* the recording behind fd (the program may close fd and reuse its number) */
    ino_t ino;
    uint8_t *map;
    size_t reserve;
    size_t off;              /* blocks indexed up to here */
    uint32_t done;           /* spans of thread 0 rendered */
    long progress;           /* __atomic: done after the last step, -1 once failed (oc_render_live_progress) */
    uint32_t known;          /* code ids below this all have their table entry */
    oc_render_result res;
} live_st = {.fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* live_st.fd is still the recording (the program may have closed it and reused its number). */
static int live_fd_ours(struct stat *st) {
    return fstat(live_st.fd, st) == 0 && st->st_dev == live_st.dev && st->st_ino == live_st.ino;
}

/* The recording's size, through live_st.fd if that is still the recording; -1 if not (or too large). */
static int64_t live_size(void) {
    struct stat st;
    if (!live_fd_ours(&st) || (uint64_t)st.st_size > live_st.reserve)
        return -1;
    return (int64_t)st.st_size;
}

static uint32_t live_step(void) {
    int64_t size = live_size();
    if (size < 0 || rstate.out.err) { /* (a write error: the render at stop starts over, and says it if it fails too) */
        live_st.failed = 1;
        return 0;
    }
    if (index_recording(live_st.map, (size_t)size, &live_st.off, &live_st.res) < 0) {
        live_st.failed = 1;
        return 0;
    }
    if (oc_attr_on) { /* sampling windows: their estimates need the code states, known at the end */
        live_st.failed = 1;
        return 0;
    }
    if (!rstate.have_header || !rstate.calibrated || !rstate.norder)
        return 0;
    check_clock();
    if (grow_code_arrays() < 0) {
        live_st.failed = 1;
        return 0;
    }
    if (!live_st.opened) {
        if (open_output(live_st.format, live_st.out_path, live_st.loops, &live_st.res) < 0) {
            live_st.failed = 1;
            return 0;
        }
        live_st.opened = 1;
        rstate.pause_code = rstate.life_code = rstate.stall_code = UINT32_MAX;
    }
    while (live_st.known < rmeta.ncodes && rmeta.codes[live_st.known].qualname)
        live_st.known++;
    uint32_t done0 = live_st.done, avail = rstate.file_order ? rstate.norder : rstate.ix[0].nspans;
    while (live_st.done < avail && !__atomic_load_n(&live_st.stop, __ATOMIC_RELAXED)) {
        /* the code table entries a chunk needs are usually written before it, but not always (a
         * thread's last chunk, handed over as it exits, comes before the codes it registered): a chunk
         * naming a code not in the table yet waits, if need be for the render at stop */
        span_ref ref = next_ref(live_st.done);
        if (ref.span == UINT32_MAX) { /* a thread's end */
            end_thread(ref.thread);
            live_st.done++;
            continue;
        }
        const span *sp = &rstate.ix[ref.thread].spans[ref.span];
        uint32_t top = 0;
        for (uint32_t i = 0; i < sp->n; i++) {
            uint32_t k = OC_KIND(sp->recs[i].info), id = sp->recs[i].code_id;
            if (k != K_NONE && k != K_PAUSE && k != K_PAUSE_END && k != K_MARK && id > top)
                top = id;
        }
        if (top >= live_st.known)
            break;
        /* a chunk reaching past the clock's knee waits for the final calibration (~20 ms in) */
        if (!rstate.calib_final && sp->n && sp->recs[sp->n - 1].ts >= rmeta.knee_tsc)
            break;
        render_ref(ref.thread, ref.span, 1);
        if (rstate.live_failed) {
            live_st.failed = 1;
            return 0;
        }
        live_st.done++;
    }
    return live_st.done - done0;
}

static void *live_main(void *arg) {
    (void)arg;
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10); /* the program comes first */
    pthread_mutex_lock(&live_st.lock);
    while (!live_st.stop) {
        pthread_mutex_unlock(&live_st.lock);
        uint32_t rendered = live_step();
        __atomic_store_n(&live_st.progress, live_st.failed ? -1L : (long)live_st.done, __ATOMIC_RELAXED);
        pthread_mutex_lock(&live_st.lock);
        if (live_st.failed)
            break;
        if (rendered)
            continue; /* behind: the recorder wrote more meanwhile, as a rule; look again at once */
        /* nothing new: 5 ms (the recorder writes in 1 MiB pieces), or until stop asks for the rest */
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += 5000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        if (!live_st.stop)
            pthread_cond_timedwait(&live_st.cond, &live_st.lock, &dl);
    }
    pthread_mutex_unlock(&live_st.lock);
    return NULL;
}

static void live_join(void) {
    if (live_st.on == 1) {
        pthread_mutex_lock(&live_st.lock);
        __atomic_store_n(&live_st.stop, 1, __ATOMIC_RELEASE);
        pthread_cond_signal(&live_st.cond);
        pthread_mutex_unlock(&live_st.lock);
        pthread_join(live_st.thread, NULL);
        live_st.on = 2; /* joined, state kept */
    }
}

static void live_free(void) {
    if (live_st.map)
        munmap(live_st.map, live_st.reserve);
    struct stat st;
    if (live_st.fd >= 0 && live_fd_ours(&st))
        close(live_st.fd);
    free(live_st.rec_path);
    free(live_st.out_path);
    live_st.map = NULL;
    live_st.fd = -1;
    live_st.rec_path = live_st.out_path = NULL;
    live_st.on = 0;
}

/* Stop a live render and forget it (its partial output is removed). */
static void live_discard(void) {
    if (!live_st.on)
        return;
    live_join();
    if (live_st.opened) {
        oc_out_close(&rstate.out);
        free(rstate.out.buf);
        rstate.out.buf = NULL;
        if (live_st.out_path && !rstate.anon)
            unlink(live_st.out_path);
    }
    live_free();
    reset_render();
}

static int live_takeover(const char *rec_path, int format, const char *out_path, int loops);
static int live_resume(const uint8_t **base, size_t *size, size_t *off, uint32_t *done);

/* what the driver asks of a live render (render_int.h): registered when one starts */
static const oc_live_ops live_ops = {live_takeover, live_resume, live_free, live_discard};

void oc_render_live_start(const char *rec_path, int format, const char *out_path, int loops) {
    oc_live = &live_ops;
    live_discard();
    const char *env = getenv("OCULAR_LIVE_RENDER"); /* 0: never; 1: even on one CPU */
    int want = env && *env ? strcmp(env, "0") != 0 : 1;
    if (!want || !out_path || (oc_cpus_available() < 2 && !(env && strcmp(env, "1") == 0)))
        return;
    live_st.fd = oc_fd_above_std(open(rec_path, O_RDONLY | O_CLOEXEC));
    struct stat st;
    if (live_st.fd < 0)
        return;
    if (fstat(live_st.fd, &st) != 0) {
        close(live_st.fd);
        live_st.fd = -1;
        return;
    }
    live_st.dev = st.st_dev;
    live_st.ino = st.st_ino;
    for (live_st.reserve = (size_t)1 << 38; live_st.reserve >= ((size_t)1 << 30); live_st.reserve >>= 2) {
        void *m = mmap(NULL, live_st.reserve, PROT_READ, MAP_SHARED | MAP_NORESERVE, live_st.fd, 0);
        if (m != MAP_FAILED) {
            live_st.map = m;
            break;
        }
    }
    live_st.rec_path = strdup(rec_path);
    live_st.out_path = strdup(out_path);
    if (!live_st.map || !live_st.rec_path || !live_st.out_path) {
        live_free();
        return;
    }
    reset_render();
    live_st.format = format;
    live_st.loops = loops;
    live_st.stop = 0;
    live_st.failed = live_st.opened = 0;
    live_st.off = 0;
    live_st.done = live_st.known = 0;
    live_st.progress = 0;
    memset(&live_st.res, 0, sizeof live_st.res);
    if (oc_thread_create(&live_st.thread, NULL, live_main, NULL, OC_RENDER_THREAD_NAME) != 0) {
        live_free();
        return;
    }
    live_st.on = 1;
}

int oc_render_live_running(void) { return live_st.on == 1; }

long oc_render_live_progress(void) {
    return live_st.on == 1 ? __atomic_load_n(&live_st.progress, __ATOMIC_RELAXED) : -1;
}

/* In a fork child: the live thread does not exist here, and its state may be mid-update; forget it. */
void oc_render_live_fork_child(void) {
    rstate.out.async = NULL; /* the parent's writer thread (rendering at stop) does not exist here */
    pthread_mutex_init(&live_st.lock, NULL); /* the parent's thread may have held it at fork */
    pthread_cond_init(&live_st.cond, NULL);
    if (!live_st.on)
        return;
    oc_out_close(&rstate.out); /* the parent's output */
    memset(&rstate, 0, sizeof rstate);
    rstate.out.fd = -1;
    memset(&rmeta, 0, sizeof rmeta);
    na_abandon();
    oc_stats_abandon();
    live_st.rec_path = live_st.out_path = NULL; /* a one-time leak: they may be in use */
    live_free();
}

/* 1: the live render of this very output is taken over (joined; rstate and rmeta hold its state). */
static int live_takeover(const char *rec_path, int format, const char *out_path, int loops) {
    if (!live_st.on)
        return 0;
    live_join();
    if (live_st.failed || !live_st.opened || format != live_st.format || loops != live_st.loops || !out_path ||
        strcmp(rec_path, live_st.rec_path) != 0 || strcmp(out_path, live_st.out_path) != 0) {
        live_discard();
        return 0;
    }
    return 1;
}

/* The render taken over (live_takeover) goes on from where the thread left it: its mapping of the recording,
 * the recording's size now, the offset indexed up to and the spans of thread 0 rendered; -1 (the live render
 * discarded) if the recording or the output is no longer the program's (closed by the program). */
static int live_resume(const uint8_t **base, size_t *size, size_t *off, uint32_t *done) {
    int64_t lsize = live_size();
    if (lsize < 0 || rstate.out.fd < 0 || !oc_out_is_ours(&rstate.out)) {
        live_discard();
        return -1;
    }
    *base = live_st.map;
    *size = (size_t)lsize;
    *off = live_st.off;
    *done = live_st.done;
    return 0;
}
