/* sigsave.h -- saving the trace on SIGTERM/SIGHUP (sigsave.c): the recorder renders, then the process dies of
 * the signal.
 * Included through ocular.h (the record side's base: Python.h, render.h, hidden visibility). */
#ifndef OCULAR_SIGSAVE_H
#define OCULAR_SIGSAVE_H
#ifndef OCULAR_H
#error "sigsave.h is included through ocular.h"
#endif

#define OC_SIG_KEEP (-1)    /* keep the recording for `convert` (a format written by Python code) */
#define OC_SIG_INSTALL (-2) /* the recording is the output (.ocular) */
int oc_signals_arm(const int *sigs, int n, int render, const char *convert_args, int verbose);
int oc_signals_pending(void);   /* a signal arrived (any thread, no lock) */
int oc_signals_take(void);      /* the recorder takes it over: 1, unless Python is stopping */
void oc_signals_finish(void);   /* the recorder, the recording complete: render or keep, die; no return */
int oc_signals_stopping(void);  /* Python stops the session: signals wait for oc_signals_disarm() */
void oc_signals_disarm(void);   /* the default disposition again; a signal that arrived meanwhile is raised */
void oc_signals_fork_child(void);
int oc_signals_armed(void);

#endif
