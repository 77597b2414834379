/* sigsave.c -- saving the trace on SIGTERM and SIGHUP: the signal handler, its hand-off to the recorder
 * thread, and the process's end by the same signal.
 *
 * start_tracing(save_on_signals=...) (the command line's default) arms a handler for each asked signal
 * whose disposition is the default (one the program ignores stays ignored; a Python handler it installed
 * before is chained in Python, ocular/__init__.py; a handler installed outside Python is left alone).
 * The handler does nothing but async-signal-safe work: it notes the signal in an atomic and returns, so
 * the program goes on (a thread in time.sleep() sleeps on, a long C call runs on).  The recorder thread
 * (recorder.c), which never needs the GIL, sees the note within 20 ms, stops recording (no thread takes a
 * new chunk), writes what is queued and every thread's partial chunk, ends the recording, renders what
 * needs no Python (Chrome JSON, .pftrace, speedscope) into the output or keeps the recording for
 * `python -m ocular convert` (the Python formats, gzip; said on stderr), and then the process dies of the
 * signal: its disposition back to the default, unblocked in the recorder thread, raised there.  The
 * parent sees the status it would see untraced.
 *
 * A signal that arrives while Python stops the session (stop_tracing(), at exit) is kept: the stop saves
 * everything as usual and oc_signals_disarm() raises it at the end.  A second signal while the first is
 * being saved is absorbed (a process group's signal and a forwarded one arrive together; SIGKILL is the
 * way to end a save that takes too long, and leaves the recording as <output>.<pid>.tmp).  In a process
 * forked before its session restarted (or between fork and exec) the handler ends the process at once,
 * as the default would.  The program wins: a handler it installs after tracing starts replaces ours.
 */
#include "ocular.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { PH_OFF, PH_ARMED, PH_STOPPING, PH_SIGNALED };

static const int supported[] = {SIGTERM, SIGHUP};
#define NSUP ((int)(sizeof supported / sizeof supported[0]))

static struct {
    atomic_int phase;
    atomic_int pending;       /* the first signal that arrived (0: none) */
    int armed[NSUP];          /* our handler was installed over the default */
    int render;               /* what the recorder does with the recording: OC_SIG_* or a render format */
    char *convert_args;       /* the outputs a kept recording renders into ("-o a.pstats -o b.html") */
    int verbose;              /* say where the trace was written */
} sig_st;

static int slot_of(int sig) {
    for (int i = 0; i < NSUP; i++)
        if (supported[i] == sig)
            return i;
    return -1;
}

/* async-signal-safe: the default disposition, unblocked, raised in this thread (the process ends) */
static void die_of(int sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
}

static void on_signal(int sig) {
    int saved = errno;
    /* no session (ours left installed), no recorder to hand the stop to (a fork child whose session did
     * not restart, or not yet; before exec): the default action, as untraced */
    int ph = atomic_load(&sig_st.phase);
    if (ph == PH_OFF || (long)getpid() != sess.pid || (ph == PH_ARMED && !sess.writer_started))
        die_of(sig);
    int none = 0;
    atomic_compare_exchange_strong(&sig_st.pending, &none, sig); /* (a second one is absorbed) */
    errno = saved;
}

int oc_signals_pending(void) { return atomic_load_explicit(&sig_st.pending, memory_order_relaxed); }

/* The recorder thread: take the pending signal over (1), unless Python is stopping the session (0). */
int oc_signals_take(void) {
    int armed = PH_ARMED;
    return atomic_load(&sig_st.pending) && atomic_compare_exchange_strong(&sig_st.phase, &armed, PH_SIGNALED);
}

static const char *sig_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "signal"; }

static int exists(const char *path) { return access(path, F_OK) == 0 || errno != ENOENT; }

/* The recorder thread, the recording complete (its descriptor closed): render it or keep it, then end
 * the process by the signal.  Never returns. */
void oc_signals_finish(void) {
    int sig = atomic_load(&sig_st.pending);
    const char *name = sig_name(sig);
    const char *out = sess.out_path;
    if (!out) { /* statistics only (no trace file): the report needs Python */
        unlink(sess.rec_path);
        if (sig_st.verbose)
            dprintf(2, "ocular: %s: no trace file was asked for, and the report needs Python: nothing is saved\n",
                    name);
    } else if (sig_st.render == OC_SIG_INSTALL) { /* the recording is the output */
        if (rename(sess.rec_path, out) == 0) {
            if (sig_st.convert_args)
                dprintf(2, "ocular: %s: the recording is kept in %s: render it with python -m ocular convert %s %s\n",
                        name, out, out, sig_st.convert_args);
            else if (sig_st.verbose)
                dprintf(2, "ocular: %s: recording written to %s\n", name, out);
        } else {
            dprintf(2, "ocular: %s: the recording could not be named %s (%s); it is left in %s\n", name, out,
                    strerror(errno), sess.rec_path);
        }
    } else if (sig_st.render >= 0) {
        oc_render_result res;
        int rc = sess.hooks.render(sess.rec_path, sig_st.render, sess.tmp_path, 0, sess.loops, 0, &res);
        if (rc == 0 && !res.write_errno && rename(sess.tmp_path, out) == 0) {
            unlink(sess.rec_path);
            if (sig_st.verbose)
                dprintf(2, "ocular: %s: trace written to %s (%llu events, %llu dropped)\n", name, out,
                        (unsigned long long)res.events, (unsigned long long)res.dropped);
        } else {
            unlink(sess.tmp_path);
            dprintf(2, "ocular: %s: the trace %s could not be written (%s); the recording is left in %s: render it "
                       "with python -m ocular convert %s -o %s\n", name, out,
                    rc < 0 ? res.error : strerror(res.write_errno ? res.write_errno : errno), sess.rec_path, sess.rec_path,
                    out);
        }
    } else { /* a format written by Python code, or gzip: the recording is kept for `convert` */
        unlink(sess.tmp_path); /* (a render while recording may have begun it) */
        size_t n = strlen(out);
        char *kept = malloc(n + 40);
        if (kept) {
            snprintf(kept, n + 40, "%s.ocular", out);
            if (exists(kept))
                snprintf(kept, n + 40, "%s.%ld.ocular", out, (long)getpid());
            if (!exists(kept) && rename(sess.rec_path, kept) == 0)
                dprintf(2, "ocular: %s: the recording is kept in %s: render it with python -m ocular convert %s %s\n",
                        name, kept, kept, sig_st.convert_args ? sig_st.convert_args : "-o OUTPUT");
            else
                dprintf(2, "ocular: %s: the recording is left in %s: render it with python -m ocular convert %s %s\n",
                        name, sess.rec_path, sess.rec_path, sig_st.convert_args ? sig_st.convert_args : "-o OUTPUT");
            free(kept);
        }
    }
    die_of(sig);
    _exit(128 + sig); /* (not reached) */
}

/* Session start (GIL): arm the handler for each signal of `sigs` whose disposition is the default.
 * Returns a bit per supported signal armed, or -1 with an exception. */
int oc_signals_arm(const int *sigs, int n, int render, const char *convert_args, int verbose) {
    char *args = NULL;
    if (convert_args && !(args = strdup(convert_args))) {
        PyErr_NoMemory();
        return -1;
    }
    free(sig_st.convert_args);
    sig_st.convert_args = args;
    sig_st.render = render;
    sig_st.verbose = verbose;
    atomic_store(&sig_st.pending, 0);
    atomic_store(&sig_st.phase, PH_ARMED);
    int bits = 0;
    for (int k = 0; k < n; k++) {
        int i = slot_of(sigs[k]);
        if (i < 0) {
            PyErr_Format(PyExc_ValueError, "ocular: cannot save on signal %d (only SIGTERM and SIGHUP)", sigs[k]);
            return -1;
        }
        if (sig_st.armed[i])
            continue;
        struct sigaction cur;
        if (sigaction(supported[i], NULL, &cur) != 0 || (cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL)
            continue; /* ignored, or the program's own handler: left as it is */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART; /* (the program's system calls go on, as they would have) */
        if (sigaction(supported[i], &sa, NULL) != 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        sig_st.armed[i] = 1;
        bits |= 1 << i;
    }
    return bits;
}

/* Python stops the session (GIL): from now on a signal waits for the end of the stop (disarm).  0 if the
 * recorder has taken a signal over already (the process is about to end by it). */
int oc_signals_stopping(void) {
    int armed = PH_ARMED;
    if (atomic_compare_exchange_strong(&sig_st.phase, &armed, PH_STOPPING))
        return 1;
    return atomic_load(&sig_st.phase) != PH_SIGNALED;
}

/* After the stop (GIL): the default disposition again where our handler is still installed; a signal
 * that arrived meanwhile ends the process now, by itself. */
void oc_signals_disarm(void) {
    for (int i = 0; i < NSUP; i++) {
        if (!sig_st.armed[i])
            continue;
        sig_st.armed[i] = 0;
        struct sigaction cur;
        if (sigaction(supported[i], NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == on_signal) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = SIG_DFL;
            sigemptyset(&sa.sa_mask);
            sigaction(supported[i], &sa, NULL);
        }
    }
    int armed = PH_ARMED, stopping = PH_STOPPING;
    if (!atomic_compare_exchange_strong(&sig_st.phase, &armed, PH_OFF))
        atomic_compare_exchange_strong(&sig_st.phase, &stopping, PH_OFF);
    int sig = atomic_exchange(&sig_st.pending, 0);
    if (sig) {
        fflush(stdout);
        fflush(stderr);
        die_of(sig);
    }
}

/* In a fork child whose session goes on: a signal of the parent's is not this process's. */
void oc_signals_fork_child(void) {
    atomic_store(&sig_st.pending, 0);
    int ph = atomic_load(&sig_st.phase);
    if (ph == PH_SIGNALED || ph == PH_STOPPING)
        atomic_store(&sig_st.phase, PH_ARMED);
}

int oc_signals_armed(void) {
    int bits = 0;
    for (int i = 0; i < NSUP; i++)
        bits |= sig_st.armed[i] << i;
    return bits;
}
