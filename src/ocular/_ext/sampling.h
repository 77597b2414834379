/* sampling.h -- sampling windows in adaptive mode (sampling.c): while one is open (oc_now() < oc_win_end),
 * the
 * callbacks record de-instrumented sites' events instead of answering DISABLE.
 * Included through ocular.h (the record side's base: Python.h, render.h, hidden visibility), after
 * clock.h. */
#ifndef OCULAR_SAMPLING_H
#define OCULAR_SAMPLING_H
#ifndef OCULAR_H
#error "sampling.h is included through ocular.h"
#endif

extern uint64_t oc_win_end;              /* ticks; 0: no window was ever opened */
static inline int oc_in_window(uint64_t now) { return UNLIKELY(now < oc_win_end); }
int oc_sampling_init(PyObject *module);  /* adds _sampling_start */
void oc_sampling_stop(void);             /* GIL held: ends the timer thread; windows close */
void oc_sampling_reset(void);            /* a new session: forget the last one's windows */
void oc_sampling_fork_child(void);       /* the timer thread is the parent's */
void oc_sampling_kick_slow(void);
/* GIL held, about to answer DISABLE: the first de-instrumented site lets sampling windows open */
static inline void oc_sampling_kick(void) {
    extern atomic_int oc_sampling_kicked;
    if (UNLIKELY(!atomic_load_explicit(&oc_sampling_kicked, memory_order_relaxed)))
        oc_sampling_kick_slow();
}
/* recorder: a SAMPLING block payload (recording.h), malloc'd, or NULL: the windows not written yet
 * (all: every one), with the status (final: written even without new windows) */
void *oc_sampling_block(int all, int final, uint32_t *len);
int oc_sampling_new(void);               /* windows not written yet */

#endif
