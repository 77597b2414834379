/* sampling.c -- sampling windows: keeps de-instrumented functions measured in adaptive mode.
 *
 * After the threshold a cheap C call site (and, in near-zero mode, a function's PY_START) answers DISABLE,
 * and its later calls land in its caller's self time.  So about every `period` from the start (jittered:
 * no aliasing with a periodic program; evenly over the whole run, since the ratio a window measures is
 * applied to all of a caller's self time) a timer thread
 * asks for a window: on 3.13+ with Py_AddPendingCall (run by the main thread at its next eval-breaker
 * check, at once while it runs Python code), and, if no window opened within 2 ms (the main thread
 * sleeps, waits or is blocked in C), by taking the GIL itself (PyGILState_Ensure; it runs no bytecode,
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
 * is not estimated).  Why not Py_AddPendingCall: on 3.12 a pending call added from a thread other than
 * the main one does not set the eval breaker, so it waits until the main thread happens to switch the
 * GIL (never, in a pure-Python loop); and it runs only in the main thread.  The hot path at threshold
 * 0 is unchanged: the check sits behind the branches that answer DISABLE.
 */
#include "ocular.h"
#include "recording.h"
#include <string.h>
#include <time.h>

uint64_t oc_win_end;

typedef struct {
    uint64_t begin, end;
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
    _Atomic uint32_t seq, opened; /* windows asked for / the last one opened (or skipped) */
    atomic_int pending;           /* a pending call is queued */
    uint64_t rng;
    /* the windows, appended with the GIL held and wlock; the recorder copies them out under wlock */
    pthread_mutex_t wlock;
    win *wins;
    uint32_t n, cap, written, skipped, status;
    char other[32];
} SW = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .wlock = PTHREAD_MUTEX_INITIALIZER};

#define SAMPLING_HDR 48u

/* GIL held: another tool holds an id (its name in SW.other), 1; none, 0; -1 on error (cleared) */
static int other_tool(void) {
    for (int i = 0; i < 6; i++) {
        if (i == SW.tool_id)
            continue;
        PyObject *r = PyObject_CallFunction(SW.get_tool, "i", i);
        if (!r)
            return -1;
        if (r != Py_None) {
            const char *s = PyUnicode_Check(r) ? PyUnicode_AsUTF8(r) : NULL;
            memset(SW.other, 0, sizeof SW.other);
            snprintf(SW.other, sizeof SW.other, "%s", s ? s : "?");
            PyErr_Clear();
            Py_DECREF(r);
            return 1;
        }
        Py_DECREF(r);
    }
    return 0;
}

static int add_window(uint64_t b, uint64_t e) {
    int rc = 0;
    pthread_mutex_lock(&SW.wlock);
    if (SW.n == SW.cap) {
        uint32_t cap = SW.cap ? SW.cap * 2 : 64;
        win *nw = realloc(SW.wins, (size_t)cap * sizeof(win));
        if (!nw) {
            rc = -1;
            goto out;
        }
        SW.wins = nw;
        SW.cap = cap;
    }
    SW.wins[SW.n++] = (win){b, e};
out:
    pthread_mutex_unlock(&SW.wlock);
    return rc;
}

/* ticks in `ns` nanoseconds, from the clock's rate since the session started */
static uint64_t ticks_for(uint64_t ns) {
    if (!oc_use_tsc)
        return ns;
    uint64_t t, m;
    oc_clock_sample(&t, &m);
    if (t <= S.tsc0 || m <= S.mono0_ns)
        return ns * 3; /* no rate yet: about 3 GHz */
    return (uint64_t)((double)ns * (double)(t - S.tsc0) / (double)(m - S.mono0_ns));
}

static uint64_t rnd(void) {
    SW.rng ^= SW.rng << 13;
    SW.rng ^= SW.rng >> 7;
    SW.rng ^= SW.rng << 17;
    return SW.rng;
}

/* GIL held (the main thread's pending call, or the timer thread).  Never fails: errors are cleared
 * (nothing is reported but the missing window).
 * The window measured is [now + d, now + d + window) with d random in [0, window): recording starts
 * now (the frames begun meanwhile are known when it is measured), and the measured part does not begin
 * where the program happened to let us in (a GIL release, an eval-breaker check), which would
 * over-sample what follows those points. */
static void open_window(uint32_t seq) {
    if (!S.active || SW.gen != S.gen || !SW.restart || atomic_load(&SW.opened) == seq)
        return;
    atomic_store(&SW.opened, seq);
    PyObject *exc = PyErr_GetRaisedException();
    int other = other_tool();
    if (other != 0) {
        if (other > 0)
            SW.skipped++;
        PyErr_Clear();
        PyErr_SetRaisedException(exc);
        return;
    }
    PyObject *r = PyObject_CallNoArgs(SW.restart);
    if (!r) {
        PyErr_Clear();
        PyErr_SetRaisedException(exc);
        return;
    }
    Py_DECREF(r);
    uint64_t len = ticks_for(SW.window_ns);
    uint64_t now = oc_now(), begin = now + rnd() % (len ? len : 1);
    if (add_window(begin, begin + len) == 0)
        oc_win_end = begin + len;
    PyErr_SetRaisedException(exc);
}

#if OC_PENDING_CALLS_FROM_ANY_THREAD
static int pending_open(void *arg) {
    atomic_store(&SW.pending, 0);
    open_window((uint32_t)(uintptr_t)arg);
    return 0;
}
#endif

/* lock held: wait until `ns` from now or stop; returns SW.stop */
static int wait_ns(uint64_t ns) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)(ns / 1000000000ull);
    dl.tv_nsec += (long)(ns % 1000000000ull);
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    while (!SW.stop && pthread_cond_timedwait(&SW.cond, &SW.lock, &dl) == 0)
        ;
    return SW.stop;
}

static void *timer_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&SW.lock);
    while (!SW.stop) {
        if (wait_ns(SW.period_ns / 2 + rnd() % (SW.period_ns ? SW.period_ns : 1))) /* period +- 50% */
            break;
        uint32_t seq = atomic_load(&SW.seq) + 1;
        atomic_store(&SW.seq, seq);
#if OC_PENDING_CALLS_FROM_ANY_THREAD
        int expected = 0;
        if (atomic_compare_exchange_strong(&SW.pending, &expected, 1) &&
            Py_AddPendingCall(pending_open, (void *)(uintptr_t)seq) != 0)
            atomic_store(&SW.pending, 0);
        if (wait_ns(2000000))
            break;
        if (atomic_load(&SW.opened) == seq)
            continue;
#endif
        pthread_mutex_unlock(&SW.lock);
        if (oc_is_finalizing())
            return NULL;
        PyGILState_STATE g = PyGILState_Ensure(); /* stop_tracing releases the GIL while it joins us */
        pthread_mutex_lock(&SW.lock);
        int stop = SW.stop;
        pthread_mutex_unlock(&SW.lock);
        if (!stop)
            open_window(seq);
        PyGILState_Release(g);
        pthread_mutex_lock(&SW.lock);
    }
    pthread_mutex_unlock(&SW.lock);
    return NULL;
}

void oc_sampling_reset(void) {
    oc_win_end = 0;
    pthread_mutex_lock(&SW.wlock);
    SW.n = SW.written = SW.skipped = 0;
    pthread_mutex_unlock(&SW.wlock);
    SW.status = OC_SAMPLING_OFF;
    memset(SW.other, 0, sizeof SW.other);
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
    if (!S.active) {
        PyErr_SetString(PyExc_RuntimeError, "ocular: tracing is not running");
        return NULL;
    }
    if (SW.running || !S.threshold || oc_test_clock || !period_us || !window_us || window_us >= period_us)
        Py_RETURN_FALSE;
    Py_XSETREF(SW.get_tool, Py_NewRef(get_tool));
    Py_XSETREF(SW.restart, Py_NewRef(restart));
    SW.tool_id = tool_id;
    SW.period_ns = (uint64_t)period_us * 1000u;
    SW.window_ns = (uint64_t)window_us * 1000u;
    SW.gen = S.gen;
    SW.stop = 0;
    SW.rng = oc_now() | 1;
    atomic_store(&SW.pending, 0);
    atomic_store(&SW.opened, 0);
    atomic_store(&SW.seq, 0);
    if (oc_thread_create(&SW.thread, NULL, timer_main, NULL) != 0)
        Py_RETURN_FALSE;
    SW.running = 1;
    SW.status = OC_SAMPLING_ON;
    Py_RETURN_TRUE;
}

void oc_sampling_stop(void) {
    oc_win_end = 0; /* the windows close with the session */
    if (!SW.running)
        return;
    pthread_mutex_lock(&SW.lock);
    SW.stop = 1;
    pthread_cond_broadcast(&SW.cond);
    pthread_mutex_unlock(&SW.lock);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(SW.thread, NULL);
    Py_END_ALLOW_THREADS
    SW.running = 0;
    Py_CLEAR(SW.get_tool);
    Py_CLEAR(SW.restart);
}

void oc_sampling_fork_child(void) {
    SW.running = 0; /* the thread stayed in the parent; the child opens no windows */
    SW.stop = 0;
    oc_win_end = 0;
    pthread_mutex_init(&SW.lock, NULL);
    pthread_mutex_init(&SW.wlock, NULL);
    SW.n = SW.written = 0; /* the parent's windows are in the parent's recording */
    pthread_cond_init(&SW.cond, NULL);
}

/* Recorder (no GIL): a SAMPLING block's payload, malloc'd (NULL: nothing to write, or no memory):
 * the status and the windows not written yet (all: every window, for a flight-recorder dump; final:
 * even without new windows, the status at stop).  Windows are written before the chunks recorded in
 * them, so a renderer reading the recording while it grows knows them in time. */
void *oc_sampling_block(int all, int final, uint32_t *len) {
    pthread_mutex_lock(&SW.wlock);
    uint32_t from = all ? 0 : SW.written, n = SW.n - from, zero = 0;
    uint8_t *b = NULL;
    if (n || final) {
        b = malloc(SAMPLING_HDR + (size_t)n * sizeof(win));
        if (b) {
            memcpy(b, &SW.status, 4);
            memcpy(b + 4, &n, 4);
            memcpy(b + 8, &SW.skipped, 4);
            memcpy(b + 12, &zero, 4);
            memcpy(b + 16, SW.other, 32);
            if (n)
                memcpy(b + SAMPLING_HDR, SW.wins + from, (size_t)n * sizeof(win));
            *len = SAMPLING_HDR + n * (uint32_t)sizeof(win);
            if (!all)
                SW.written = SW.n;
        }
    }
    pthread_mutex_unlock(&SW.wlock);
    return b;
}

/* Recorder: new windows since the last block (a plain read first: no lock while nothing is new) */
int oc_sampling_new(void) { return __atomic_load_n(&SW.n, __ATOMIC_RELAXED) != __atomic_load_n(&SW.written, __ATOMIC_RELAXED); }

static PyMethodDef sampling_methods[] = {
    {"_sampling_start", py_sampling_start, METH_VARARGS,
     "_sampling_start(tool_id, get_tool, restart_events, period_us, window_us) -> bool\n\n"
     "Open a sampling window every period_us for window_us (adaptive mode, threshold > 0)."},
    {NULL, NULL, 0, NULL},
};

int oc_sampling_init(PyObject *module) { return PyModule_AddFunctions(module, sampling_methods); }
