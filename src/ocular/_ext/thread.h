/* thread.h -- Ocular's own threads (thread.c): how they are started, and their names.  No Python API. */
#ifndef OCULAR_THREAD_H
#define OCULAR_THREAD_H

#include <pthread.h>

#define OC_WRITER_THREAD_NAME "ocular-writer" /* OS thread names of Ocular's helper threads */
#define OC_USDT_THREAD_NAME "ocular-usdt"
#define OC_ENCODE_THREAD_NAME "ocular-encode"
#define OC_RENDER_THREAD_NAME "ocular-render"
#define OC_REMOVE_THREAD_NAME "ocular-remove"

#ifndef OC_UNRESOLVED_OK
#pragma GCC visibility push(hidden)
#endif
/* Start one of Ocular's own threads (recorder, renderers, timers, pollers) with every signal blocked in
 * it: a thread inherits the mask of the one that creates it, so the mask is set around pthread_create,
 * not by the new thread (a signal could land in it before it blocks them).  Signals stay with the
 * program's threads, and a signal the program blocks to sigwait() for it, or to hold it over a
 * critical section, is never taken (and its default action run) by a thread of ours.  The thread is
 * given its OS name `name` (NULL: none; at most 15 bytes) before `fn` runs.  Returns pthread_create's
 * code (an errno) once the new thread runs, named and marked as Ocular's: a fork() right after finds no
 * thread of ours half-started (see thread.c). */
int oc_thread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg,
                     const char *name);
int oc_is_own_thread(long tid);          /* tid is one of Ocular's threads, running */
int oc_cpus_available(void);             /* the CPUs this process may run on (its affinity mask) */
void oc_own_threads_fork_child(void);    /* a fork child: the parent's threads are not its own */
#ifndef OC_UNRESOLVED_OK
#pragma GCC visibility pop
#endif
#endif
