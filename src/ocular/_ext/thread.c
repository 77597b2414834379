/* thread.c -- Ocular's own threads (the recorder, the renderers and their writers, timers, pollers): started
 * with every signal blocked (oc_thread_create, thread.h), and known as Ocular's by their kernel thread id, so
 * that the sampling windows' run-delay measure (sampling.c) leaves them out of the program's running
 * threads; and how many CPUs the process may run on (whether a second thread can render or encode beside it).
 * Shared by the record side and the render side; no Python API.
 */
#include "thread.h"
#include <errno.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Ocular's own threads (the recorder, the live renderer, writers: oc_thread_create), which are not the
 * program's running threads */
#define OWN_MAX 16
static _Atomic long own_tids[OWN_MAX];

static void own_mark(long tid, long was) {
    for (int i = 0; i < OWN_MAX; i++) {
        long e = was;
        if (atomic_compare_exchange_strong(&own_tids[i], &e, tid))
            return;
    }
}

/* What a new thread needs to start, on its creator's stack: the creator waits on `ready` until the thread
 * has copied it, named itself and marked itself as Ocular's.  So starting allocates nothing in the new
 * thread, and when oc_thread_create returns the thread is past its start-up: a fork() soon after cannot
 * copy into the child a lock that the half-started thread held, where every thread started later would
 * wait on it forever.  Seen once under ASan (CI, 3.14): a fork right after usdt.enable() left the
 * child's USDT poller and the program's next thread both stuck before their first line.  ASan's
 * allocator takes a process-wide lock at a thread's first malloc or free (to register its cache), and
 * its pthread_setname_np a lock on its thread list; without the C library's fork handlers for them, a
 * copy held at fork stays held in the child. */
typedef struct {
    void *(*fn)(void *);
    void *arg;
    const char *name;
    sem_t ready;
} own_start;

static void *own_thread_main(void *p) {
    own_start *st = p;
    void *(*fn)(void *) = st->fn;
    void *arg = st->arg;
    if (st->name) /* (a sanitizer's interceptor of it takes its thread list's lock: see own_start) */
        pthread_setname_np(pthread_self(), st->name);
    long tid = (long)syscall(SYS_gettid);
    own_mark(tid, 0);
    sem_post(&st->ready); /* (st is gone from here on) */
    void *r = fn(arg);
    own_mark(0, tid);
    return r;
}

int oc_thread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg,
                     const char *name) {
    own_start st = {.fn = fn, .arg = arg, .name = name};
    if (sem_init(&st.ready, 0, 0) != 0)
        return errno;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(th, attr, own_thread_main, &st);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        while (sem_wait(&st.ready) != 0 && errno == EINTR) {
        }
    sem_destroy(&st.ready);
    return rc;
}

int oc_is_own_thread(long tid) {
    for (int i = 0; i < OWN_MAX; i++)
        if (atomic_load_explicit(&own_tids[i], memory_order_relaxed) == tid)
            return 1;
    return 0;
}


void oc_own_threads_fork_child(void) {
    for (int i = 0; i < OWN_MAX; i++) /* (the parent's threads; the child's own mark themselves) */
        atomic_store(&own_tids[i], 0);
}

int oc_cpus_available(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
