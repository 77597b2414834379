/* sampling.c -- sampling windows: keeps de-instrumented functions measured in adaptive mode.
 *
 * After the threshold a cheap C call site (and, in near-zero mode, a function's PY_START) answers DISABLE,
 * and its later calls land in its caller's self time.  So from the first DISABLE on (timer_main has the
 * schedule: soon after it, then up to every `period`, each window recorded with the time it stands for,
 * which the renderer weighs it by) a timer thread
 * asks for a window: with Py_AddPendingCall (run by the main thread at its next eval-breaker check: on
 * 3.13+ at once while it runs Python code, on 3.12 once it takes the GIL again after releasing it), and,
 * if no window opened within 2 ms (the main thread sleeps, waits or is blocked in C; on 3.12, runs
 * Python code without releasing the GIL), by taking the GIL itself (PyGILState_Ensure; it runs no bytecode,
 * so it fires no event).  Whoever opens the window checks that no other sys.monitoring tool is
 * registered, calls sys.monitoring.restart_events() (the only way to re-arm a site that answered
 * DISABLE; set_local_events does not) and sets oc_win_end to `window` from now.  Until then the
 * callbacks record, on their DISABLE path only, what they would have disabled (function enters and
 * leaves, C calls), each sampled enter preceded by a K_MARK record; after it, each re-armed site answers
 * DISABLE again at its next event.  The renderer (attrib.c) reads the windows from the recording's
 * SAMPLING block and estimates what happened outside them.
 *
 * restart_events() re-arms every tool's disabled sites, so a window is opened only while no other tool
 * holds a tool id (checked at each window; a skipped window is counted, and the report says the split
 * is not estimated).  Why not the GIL at once: on 3.12 a thread waiting for it while the program releases
 * it briefly and often (asyncio's epoll with no timeout) waited up to 240 ms, slowing each of the
 * program's releases meanwhile.  The hot path at threshold
 * 0 is unchanged: the check sits behind the branches that answer DISABLE.
 */
#include "ocular.h"
#include "recording.h"
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>

uint64_t oc_win_end;
atomic_int oc_sampling_kicked; /* something was de-instrumented: windows may open */

typedef struct {
    uint64_t begin, end;
    uint64_t stands; /* the ticks of the run this window is a sample of: from its begin to the next one's */
} win;

static struct {
    pthread_t thread;
    int running;
    pthread_mutex_t lock;       /* guards stop and cond */
    pthread_cond_t cond;
    int stop;
    uint32_t gen;               /* the session the windows belong to */
    int tool_id;
    PyObject *get_tool, *restart;
    uint64_t period_ns, window_ns;
    uint64_t switch_ns;           /* sys.getswitchinterval() at start */
    uint64_t len_ns, stands_ns;   /* the next window: its length, and the time it stands for */
    _Atomic uint64_t asked_ns;    /* when the timer thread asked for the window being opened (0: not it) */
    _Atomic uint32_t seq, opened; /* windows asked for / the last one opened (or skipped) */
    atomic_int pending;           /* a pending call is queued */
    uint64_t rng;
    uint64_t kick_ticks;          /* when the first site was de-instrumented (0: not yet) */
    /* the windows, appended with the GIL held and wlock; the recorder copies them out under wlock */
    pthread_mutex_t wlock;
    win *wins;
    uint32_t n, cap, written, skipped, status;
    char other[32];
    /* the last window opened: its measured part in CLOCK_MONOTONIC ns (the timer thread reads the threads'
     * run delays at both ends), and the window sequence number it belongs to */
    uint64_t mbegin_ns, mend_ns;
    uint32_t mseq;
    /* run delays (rd_* below): inside the measured parts of windows, and in the time between them */
    double in_num, in_den, out_num, out_den;
    uint32_t in_n, out_n;
} samp_st = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .wlock = PTHREAD_MUTEX_INITIALIZER};

#define SAMPLING_HDR 48u
/* the SAMPLING block's windows are these as they are in memory (recording.h) */
_Static_assert(sizeof(win) == OC_SAMPLING_WIN_LEN, "a window is u64 begin, u64 end, u64 stands");

/* GIL held: another tool holds an id (its name in samp_st.other), 1; none, 0; -1 on error (cleared) */
static int other_tool(void) {
    for (int i = 0; i < 6; i++) {
        if (i == samp_st.tool_id)
            continue;
        PyObject *r = PyObject_CallFunction(samp_st.get_tool, "i", i);
        if (!r)
            return -1;
        if (r != Py_None) {
            const char *s = PyUnicode_Check(r) ? PyUnicode_AsUTF8(r) : NULL;
            memset(samp_st.other, 0, sizeof samp_st.other);
            snprintf(samp_st.other, sizeof samp_st.other, "%s", s ? s : "?");
            PyErr_Clear();
            Py_DECREF(r);
            return 1;
        }
        Py_DECREF(r);
    }
    return 0;
}

static int add_window(uint64_t b, uint64_t e, uint64_t stands) {
    int rc = 0;
    pthread_mutex_lock(&samp_st.wlock);
    if (samp_st.n == samp_st.cap) {
        uint32_t cap = samp_st.cap ? samp_st.cap * 2 : 64;
        win *nw = realloc(samp_st.wins, (size_t)cap * sizeof(win));
        if (!nw) {
            rc = -1;
            goto out;
        }
        samp_st.wins = nw;
        samp_st.cap = cap;
    }
    samp_st.wins[samp_st.n++] = (win){b, e, stands};
out:
    pthread_mutex_unlock(&samp_st.wlock);
    return rc;
}

/* ticks in `ns` nanoseconds, from the clock's rate since the session started */
static uint64_t ticks_for(uint64_t ns) {
    if (!oc_use_tsc)
        return ns;
    uint64_t t, m;
    oc_clock_sample(&t, &m);
    if (t <= sess.tsc0 || m <= sess.mono0_ns)
        return ns * 3; /* no rate yet: about 3 GHz */
    return (uint64_t)((double)ns * (double)(t - sess.tsc0) / (double)(m - sess.mono0_ns));
}

static uint64_t rnd(void) {
    samp_st.rng ^= samp_st.rng << 13;
    samp_st.rng ^= samp_st.rng >> 7;
    samp_st.rng ^= samp_st.rng << 17;
    return samp_st.rng;
}

static int wait_ns(uint64_t ns);

static uint64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Run delays: a window is opened when the program's thread runs (a pending call, a GIL release), so its
 * measured part holds less time waiting for a CPU than the rest of the run on a loaded machine, and calls
 * counted in windows, scaled by wall time, come out too many (2x with a busy process on the same CPU).
 * The timer thread reads every other thread's schedstat (CPU time, time runnable but waiting for a CPU)
 * at both ends of each window's measured part: the stretches inside windows, and those between one
 * window's end and the next one's begin (from the start for the first) outside them; the renderer
 * (attrib.c) scales estimated calls by (1 - waiting share outside) / (1 - waiting share inside).  A thread's waiting share in a stretch is weighted by the CPU time it had there, so
 * threads that sleep (the recorder, idle workers) count for nothing.  RD_MAX threads at most. */
#define RD_MAX 256
typedef struct {
    int n;
    long tid[RD_MAX];
    uint64_t cpu[RD_MAX], delay[RD_MAX];
    uint64_t at;
} rd_snap;

static void rd_read(rd_snap *s) {
    static _Thread_local long self;
    if (!self)
        self = (long)syscall(SYS_gettid);
    s->n = 0;
    s->at = mono_ns();
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return;
    struct dirent *e;
    while (s->n < RD_MAX && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[64], buf[96];
        long tid = atol(e->d_name);
        if (tid == self)
            continue; /* (the timer thread itself: it runs when it reads) */
        snprintf(path, sizeof path, "/proc/self/task/%ld/schedstat", tid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t k = read(fd, buf, sizeof buf - 1);
        close(fd);
        unsigned long long cpu, delay;
        if (k <= 0)
            continue;
        buf[k] = 0;
        if (sscanf(buf, "%llu %llu", &cpu, &delay) != 2)
            continue;
        s->tid[s->n] = tid;
        s->cpu[s->n] = cpu;
        s->delay[s->n] = delay;
        s->n++;
    }
    closedir(d);
}

/* the stretch from a to b: sum over threads of cpu * (delay / length), and of cpu */
static void rd_add(const rd_snap *a, const rd_snap *b, double *num, double *den, uint32_t *n) {
    double len = b->at > a->at ? (double)(b->at - a->at) : 0.0;
    if (len <= 0)
        return;
    for (int i = 0; i < b->n; i++)
        for (int j = 0; j < a->n; j++)
            if (a->tid[j] == b->tid[i]) {
                double cpu = (double)(b->cpu[i] - a->cpu[j]), delay = (double)(b->delay[i] - a->delay[j]);
                if (cpu > 0 && b->cpu[i] >= a->cpu[j] && b->delay[i] >= a->delay[j]) {
                    *num += cpu * (delay > len ? 1.0 : delay / len);
                    *den += cpu;
                }
                break;
            }
    (*n)++;
}

/* timer thread, samp_st.lock held: sleep (the lock released) until the monotonic time `t`, or stop: samp_st.stop */
static int wait_until(uint64_t t) {
    uint64_t now = mono_ns();
    return t > now ? wait_ns(t - now) : samp_st.stop;
}

/* GIL held (the main thread's pending call, or the timer thread).  Never fails: errors are cleared
 * (nothing is reported but the missing window).
 * The window measured is [now + d, now + d + window) with d random in [0, window): recording starts
 * now (the frames begun meanwhile are known when it is measured), and the measured part does not begin
 * where the program happened to let us in (a GIL release, an eval-breaker check), which would
 * over-sample what follows those points. */
static void open_window(uint32_t seq) {
    if (!sess.active || !samp_st.running || samp_st.gen != sess.gen || !samp_st.restart ||
        atomic_load(&samp_st.opened) == seq)
        return;
    atomic_store(&samp_st.opened, seq);
    PyObject *exc = PyErr_GetRaisedException();
    int other = other_tool();
    if (other != 0) {
        if (other > 0)
            samp_st.skipped++;
        PyErr_Clear();
        PyErr_SetRaisedException(exc);
        return;
    }
    PyObject *r = PyObject_CallNoArgs(samp_st.restart);
    if (!r) {
        PyErr_Clear();
        PyErr_SetRaisedException(exc);
        return;
    }
    Py_DECREF(r);
    /* it stands for the planned gap after it, and for the time the next one will take to open after it
     * is asked for, which this one took (on 3.12 a pure-Python loop opens them 5-9 ms late: without it
     * the early windows were under-weighted and a callee of a program's first 40 ms had half its share) */
    uint64_t m = mono_ns(), asked = atomic_load(&samp_st.asked_ns), late = asked && m > asked ? m - asked : 0;
    uint64_t len = ticks_for(samp_st.len_ns), stands = ticks_for(samp_st.stands_ns + late);
    uint64_t d = rnd() % (len ? len : 1), now = oc_now(), begin = now + d;
    if (add_window(begin, begin + len, stands) == 0) {
        oc_win_end = begin + len;
        uint64_t dn = len ? (uint64_t)((double)d * (double)samp_st.len_ns / (double)len) : 0;
        samp_st.mbegin_ns = m + dn;
        samp_st.mend_ns = m + dn + samp_st.len_ns;
        pthread_mutex_lock(&samp_st.lock); /* (the timer thread waits for it: wait_opened) */
        samp_st.mseq = seq;
        pthread_cond_broadcast(&samp_st.cond);
        pthread_mutex_unlock(&samp_st.lock);
    }
    PyErr_SetRaisedException(exc);
}

static int pending_open(void *arg) {
    atomic_store(&samp_st.pending, 0);
    open_window((uint32_t)(uintptr_t)arg);
    return 0;
}

/* window `seq` asked for with a pending call, unless one is queued already */
static void queue_open(uint32_t seq) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&samp_st.pending, &expected, 1) &&
        Py_AddPendingCall(pending_open, (void *)(uintptr_t)seq) != 0)
        atomic_store(&samp_st.pending, 0);
}

/* lock held: wait until `ns` from now or stop; returns samp_st.stop */
static int wait_ns(uint64_t ns) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)(ns / 1000000000ull);
    dl.tv_nsec += (long)(ns % 1000000000ull);
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    while (!samp_st.stop && pthread_cond_timedwait(&samp_st.cond, &samp_st.lock, &dl) == 0)
        ;
    return samp_st.stop;
}

/* lock held: wait up to `ns` for window `seq` to open (or stop); returns samp_st.stop */
static int wait_opened(uint32_t seq, uint64_t ns) {
    uint64_t until = mono_ns() + ns;
    while (!samp_st.stop && samp_st.mseq != seq) {
        uint64_t now = mono_ns();
        if (now >= until)
            break;
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        uint64_t left = until - now;
        dl.tv_sec += (time_t)(left / 1000000000ull);
        dl.tv_nsec += (long)(left % 1000000000ull);
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&samp_st.cond, &samp_st.lock, &dl);
    }
    return samp_st.stop;
}

static rd_snap rd_snaps[3]; /* (the timer thread's) */
static rd_snap *rd_last = &rd_snaps[0]; /* read at the end of the last measured window, or at the start */

/* lock held: the run delays of window `seq`'s measured part, if it opened and at least half of it is
 * still ahead, and of the time outside windows since the last one measured; returns samp_st.stop */
static int measure_window(uint32_t seq) {
    if (samp_st.mseq != seq)
        return samp_st.stop;
    uint64_t b = samp_st.mbegin_ns, e = samp_st.mend_ns;
    if (mono_ns() > b + (e - b) / 2)
        return samp_st.stop;
    if (wait_until(b))
        return 1;
    long li = rd_last - rd_snaps; /* (the two snapshots other than the last) */
    rd_snap *a = &rd_snaps[(li + 1) % 3], *z = &rd_snaps[(li + 2) % 3];
    rd_read(a);
    rd_add(rd_last, a, &samp_st.out_num, &samp_st.out_den, &samp_st.out_n);
    if (wait_until(e)) {
        rd_last = a;
        return 1;
    }
    rd_read(z);
    rd_add(a, z, &samp_st.in_num, &samp_st.in_den, &samp_st.in_n);
    rd_last = z;
    return 0;
}

/* the program's threads that ran at least 5 % of the time since snapshot `a` (read now into `b`) */
static int running_threads(const rd_snap *a, rd_snap *b) {
    rd_read(b);
    double len = b->at > a->at ? (double)(b->at - a->at) : 0.0;
    int n = 0;
    for (int i = 0; len > 0 && i < b->n; i++)
        for (int j = 0; j < a->n; j++)
            if (a->tid[j] == b->tid[i]) {
                if (b->cpu[i] >= a->cpu[j] && (double)(b->cpu[i] - a->cpu[j]) >= 0.05 * len && !oc_is_own_thread(b->tid[i]))
                    n++;
                break;
            }
    return n;
}

/* lock held: ask for window `seq` -- a pending call, run by the main thread at its next eval-breaker
 * check (on 3.12 only once it takes the GIL again: after a sleep, I/O, a poll), else after 2 ms the GIL
 * taken by this thread -- and measure its run delays; returns samp_st.stop.  (On 3.12 the GIL at once made a
 * program that releases it briefly and often wait: asyncio's epoll with no timeout, 240 ms while this
 * thread waited for it, poll's share 6-17 % instead of 2 %.) */
static int ask_window_now(uint32_t seq) {
    if (atomic_load(&samp_st.opened) != seq)
        queue_open(seq);
    if (wait_opened(seq, 2000000))
        return 1;
    if (atomic_load(&samp_st.opened) == seq)
        return measure_window(seq);
    pthread_mutex_unlock(&samp_st.lock);
    if (oc_is_finalizing()) {
        pthread_mutex_lock(&samp_st.lock);
        return 1;
    }
    PyGILState_STATE g = PyGILState_Ensure(); /* stop_tracing releases the GIL while it joins us */
    pthread_mutex_lock(&samp_st.lock);
    int stop = samp_st.stop;
    pthread_mutex_unlock(&samp_st.lock);
    if (!stop)
        open_window(seq);
    PyGILState_Release(g);
    pthread_mutex_lock(&samp_st.lock);
    return measure_window(seq);
}

/* ask_window_now, noting when (open_window: the time to open a window counts in what it stands for) */
static int ask_window(uint32_t seq) {
    atomic_store(&samp_st.asked_ns, mono_ns());
    return ask_window_now(seq);
}

/* the gap after the first window: two windows' length, doubling after each up to the period */
static uint64_t first_gap(void) { return 2 * samp_st.window_ns; }

/* The schedule.  No window opens before something is de-instrumented (nothing to estimate: the
 * estimates cover the time from the first window on); then the first opens at once (a program of a
 * few tens of milliseconds gets several on 3.13+), and the gap after each doubles from first_gap() up
 * to the period (each jittered +-50%: no aliasing with a periodic program).  A window is a sample of
 * the time from its begin to the next one's begin, which it records (`stands`; the renderer weighs its
 * ticks by it).  With several running threads (a GIL hands over every switch interval) a window lasts
 * one switch interval per running thread, up to 16 windows' length, so that it sees each of them, and
 * the gaps grow by the square root of that factor. */
static void *timer_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&samp_st.lock);
    while (!samp_st.stop && !atomic_load(&oc_sampling_kicked))
        pthread_cond_wait(&samp_st.cond, &samp_st.lock);
    rd_read(rd_last);
    static rd_snap probe;
    uint64_t step = first_gap();
    while (!samp_st.stop) {
        int n = atomic_load(&samp_st.seq) ? running_threads(rd_last, &probe) : 1; /* (the first: oc_sampling_kick_slow) */
        uint64_t len = samp_st.window_ns;
        if (n >= 2 && (uint64_t)n * samp_st.switch_ns > len)
            len = (uint64_t)n * samp_st.switch_ns < 16 * samp_st.window_ns ? (uint64_t)n * samp_st.switch_ns : 16 * samp_st.window_ns;
        uint64_t g = step < samp_st.period_ns ? step : samp_st.period_ns;
        uint64_t f = len / samp_st.window_ns, r = 1;
        while ((r + 1) * (r + 1) <= f)
            r++; /* (the square root, rounded down: 1 to 4) */
        g = (g / 2 + rnd() % (g ? g : 1)) * r;
        step *= 2;
        samp_st.len_ns = len;
        /* (the next window's measured part begins half a window in, on average; open_window adds the
         * time it takes to open) */
        samp_st.stands_ns = len + len / 2 + g;
        uint32_t seq = atomic_load(&samp_st.seq) + 1;
        atomic_store(&samp_st.seq, seq);
        if (ask_window(seq) || wait_ns(g))
            break;
    }
    pthread_mutex_unlock(&samp_st.lock);
    return NULL;
}

/* GIL held (a callback about to answer DISABLE): the first de-instrumented site lets windows open.
 * The first window is asked for here too, with a pending call, run at the main thread's next
 * eval-breaker check: the timer thread, woken, may not run for milliseconds on a loaded machine, and
 * on 3.12 it would then wait for the GIL up to a switch interval (5 ms: a short program's whole run).
 * Its length and weight are the defaults the timer thread gives the first window. */
static void ask_first(void) {
    if (samp_st.running)
        queue_open(1);
}

/* The first window is asked for before the timer thread is woken: woken first, it could queue its own
 * pending call, and this thread's would then find one queued and add none.  On 3.12 a call queued by
 * another thread does not stop the running main thread (only the main thread's own does), so it ran
 * after the program: CI, a 2 ms program with no window in 3 runs of 3; 10 % of runs beside the suite. */
void oc_sampling_kick_slow(void) {
    uint64_t now = oc_now();
    pthread_mutex_lock(&samp_st.wlock);
    if (!samp_st.kick_ticks)
        samp_st.kick_ticks = now;
    pthread_mutex_unlock(&samp_st.wlock);
    ask_first();
    pthread_mutex_lock(&samp_st.lock);
    atomic_store(&oc_sampling_kicked, 1);
    pthread_cond_broadcast(&samp_st.cond);
    pthread_mutex_unlock(&samp_st.lock);
}

void oc_sampling_reset(void) {
    oc_win_end = 0;
    pthread_mutex_lock(&samp_st.wlock);
    samp_st.n = samp_st.written = samp_st.skipped = 0;
    samp_st.in_num = samp_st.in_den = samp_st.out_num = samp_st.out_den = 0;
    samp_st.in_n = samp_st.out_n = 0;
    samp_st.kick_ticks = 0;
    pthread_mutex_unlock(&samp_st.wlock);
    samp_st.mseq = 0;
    atomic_store(&oc_sampling_kicked, 0);
    samp_st.status = OC_SAMPLING_OFF;
    memset(samp_st.other, 0, sizeof samp_st.other);
}

/* _sampling_start(tool_id, get_tool, restart_events, period_us, window_us): after the callbacks are
 * registered.  A no-op without a threshold, or with the test clock. */
static PyObject *py_sampling_start(PyObject *mod, PyObject *args) {
    (void)mod;
    int tool_id;
    unsigned long period_us, window_us;
    PyObject *get_tool, *restart;
    if (!PyArg_ParseTuple(args, "iOOkk:_sampling_start", &tool_id, &get_tool, &restart, &period_us, &window_us))
        return NULL;
    if (!sess.active) {
        PyErr_SetString(PyExc_RuntimeError, "ocular: tracing is not running");
        return NULL;
    }
    if (samp_st.running || !sess.threshold || oc_test_clock || !period_us || !window_us || window_us >= period_us)
        Py_RETURN_FALSE;
    Py_XSETREF(samp_st.get_tool, Py_NewRef(get_tool));
    Py_XSETREF(samp_st.restart, Py_NewRef(restart));
    samp_st.tool_id = tool_id;
    samp_st.period_ns = (uint64_t)period_us * 1000u;
    samp_st.window_ns = (uint64_t)window_us * 1000u;
    atomic_store(&samp_st.asked_ns, 0);
    samp_st.len_ns = samp_st.window_ns; /* (the first window's: timer_main) */
    samp_st.stands_ns = samp_st.window_ns + samp_st.window_ns / 2 + first_gap();
    samp_st.switch_ns = 5000000;
    PyObject *sw = PySys_GetObject("getswitchinterval"); /* (borrowed) */
    PyObject *swv = sw ? PyObject_CallNoArgs(sw) : NULL;
    double swd = swv ? PyFloat_AsDouble(swv) : -1.0;
    Py_XDECREF(swv);
    PyErr_Clear();
    if (swd > 0 && swd < 1)
        samp_st.switch_ns = (uint64_t)(swd * 1e9);
    samp_st.gen = sess.gen;
    samp_st.stop = 0;
    samp_st.rng = oc_now() | 1;
    atomic_store(&samp_st.pending, 0);
    atomic_store(&samp_st.opened, 0);
    atomic_store(&samp_st.seq, 0);
    /* something was de-instrumented before (the own-cost calibration's functions at a low threshold):
     * the first window is asked for from here, start_tracing's thread, and before the timer thread
     * exists (see oc_sampling_kick_slow: on 3.12 the timer thread's pending call would wait for the main
     * thread to release the GIL, and its GIL, a switch interval: a CI run of a 2 ms program got no
     * window).  It opens only once samp_st.running says the timer thread started. */
    if (atomic_load(&oc_sampling_kicked))
        queue_open(1);
    if (oc_thread_create(&samp_st.thread, NULL, timer_main, NULL, NULL) != 0)
        Py_RETURN_FALSE;
    samp_st.running = 1;
    samp_st.status = OC_SAMPLING_ON;
    Py_RETURN_TRUE;
}

void oc_sampling_stop(void) {
    oc_win_end = 0; /* the windows close with the session */
    if (!samp_st.running)
        return;
    pthread_mutex_lock(&samp_st.lock);
    samp_st.stop = 1;
    pthread_cond_broadcast(&samp_st.cond);
    pthread_mutex_unlock(&samp_st.lock);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(samp_st.thread, NULL);
    Py_END_ALLOW_THREADS
    samp_st.running = 0;
    Py_CLEAR(samp_st.get_tool);
    Py_CLEAR(samp_st.restart);
}

void oc_sampling_fork_child(void) {
    oc_own_threads_fork_child();
    samp_st.running = 0; /* the thread stayed in the parent; the child opens no windows */
    samp_st.stop = 0;
    oc_win_end = 0;
    pthread_mutex_init(&samp_st.lock, NULL);
    pthread_mutex_init(&samp_st.wlock, NULL);
    samp_st.n = samp_st.written = 0; /* the parent's windows are in the parent's recording */
    pthread_cond_init(&samp_st.cond, NULL);
}

/* Recorder (no GIL): a SAMPLING block's payload, malloc'd (NULL: nothing to write, or no memory):
 * the status and the windows not written yet (all: every window, for a flight-recorder dump; final:
 * even without new windows, the status at stop).  Windows are written before the chunks recorded in
 * them, so a renderer reading the recording while it grows knows them in time. */
void *oc_sampling_block(int all, int final, uint32_t *len) {
    pthread_mutex_lock(&samp_st.wlock);
    uint32_t from = all ? 0 : samp_st.written, n = samp_st.n - from, zero = 0;
    uint8_t *b = NULL;
    if (n || final) {
        b = malloc(SAMPLING_HDR + (size_t)n * sizeof(win) + OC_SAMPLING_RD_LEN + OC_SAMPLING_KICK_LEN);
        if (b) {
            memcpy(b, &samp_st.status, 4);
            memcpy(b + 4, &n, 4);
            memcpy(b + 8, &samp_st.skipped, 4);
            memcpy(b + 12, &zero, 4);
            memcpy(b + 16, samp_st.other, 32);
            if (n)
                memcpy(b + SAMPLING_HDR, samp_st.wins + from, (size_t)n * sizeof(win));
            *len = SAMPLING_HDR + n * (uint32_t)sizeof(win);
            if (final && samp_st.running == 0) { /* the run delays, after the windows (the timer thread has ended) */
                uint8_t *t = b + *len;
                uint32_t magic = OC_SAMPLING_RD_MAGIC;
                double v[4] = {samp_st.in_num, samp_st.in_den, samp_st.out_num, samp_st.out_den};
                memcpy(t, &magic, 4);
                memcpy(t + 4, &samp_st.in_n, 4);
                memcpy(t + 8, &samp_st.out_n, 4);
                memcpy(t + 12, &zero, 4);
                memcpy(t + 16, v, 32);
                *len += OC_SAMPLING_RD_LEN;
            }
            if (samp_st.kick_ticks) { /* (last: a reader that knows only the run delays finds them) */
                uint8_t *t = b + *len;
                uint32_t magic = OC_SAMPLING_KICK_MAGIC;
                memcpy(t, &magic, 4);
                memcpy(t + 4, &zero, 4);
                memcpy(t + 8, &samp_st.kick_ticks, 8);
                *len += OC_SAMPLING_KICK_LEN;
            }
            if (!all)
                samp_st.written = samp_st.n;
        }
    }
    pthread_mutex_unlock(&samp_st.wlock);
    return b;
}

/* Recorder: new windows since the last block (a plain read first: no lock while nothing is new) */
int oc_sampling_new(void) { return __atomic_load_n(&samp_st.n, __ATOMIC_RELAXED) != __atomic_load_n(&samp_st.written, __ATOMIC_RELAXED); }

static PyMethodDef sampling_methods[] = {
    {"_sampling_start", py_sampling_start, METH_VARARGS,
     "_sampling_start(tool_id, get_tool, restart_events, period_us, window_us) -> bool\n\n"
     "Open a sampling window every period_us for window_us (adaptive mode, threshold > 0)."},
    {NULL, NULL, 0, NULL},
};

int oc_sampling_init(PyObject *module) { return PyModule_AddFunctions(module, sampling_methods); }
