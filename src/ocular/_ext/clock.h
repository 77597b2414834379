/* clock.h -- the clock's declarations (clock.c): its source and calibration, and the inline oc_now() the hot
 * path reads.
 * Included through ocular.h (the record side's base: Python.h, render.h, hidden visibility). */
#ifndef OCULAR_CLOCK_H
#define OCULAR_CLOCK_H
#ifndef OCULAR_H
#error "clock.h is included through ocular.h"
#endif

int oc_clock_init(void);                 /* chooses the source; returns 1 if TSC */
const char *oc_clock_source(void);
void oc_clock_set_test(int on);
extern int oc_test_clock;
extern uint64_t oc_test_ticks;
void oc_clock_sample(uint64_t *ticks, uint64_t *mono_ns);
void oc_clock_calibrate_early(void);     /* ~2 ms in: early_npt and knee_tsc (non-TSC clocks: final) */
void oc_clock_calibrate(void);           /* from (tsc0, mono0) to now; sets ns_per_tick */
/* A C call site that passed the threshold stays instrumented while its calls average this long or more:
 * recording a C call costs two events, about 50 ns (callgrind, 3.12: 811 instructions a call of `len`,
 * against 707 for the whole untraced loop iteration around it), so a kept site adds ~5% at most */
#define OC_CCALL_KEEP_NS 1000.0
uint64_t oc_ccall_keep_ticks(void);      /* OC_CCALL_KEEP_NS in ticks (monitor.c's C call site rule) */
/* A timed C call counts at most this many times OC_CCALL_KEEP_NS in the rule's average (sess.ccall_cap_ticks,
 * set at the early calibration): a call preempted for a time slice (milliseconds), or held by a chunk's
 * hand-over, does not keep a cheap site armed.  On deltablue, writing a trace file beside the program kept
 * str.rstrip's and str.join's sites armed in one run of two (25,000 and 12,000 more calls recorded). */
#define OC_CCALL_CAP 100


/* the hot path's clock, inline */
extern int oc_use_tsc;
extern int oc_fast_clock;            /* the hardware counter, and no test clock: oc_now() reads it inline */
uint64_t oc_now_slow(void);          /* the test clock, or clock_gettime (clock.c) */
/* the hardware counter itself: only where oc_fast_clock says it is the clock (else 0) */
static inline uint64_t oc_fast_now(void) {
#if defined(__x86_64__)
    return __rdtsc();
#elif defined(__aarch64__)
    uint64_t v;
    __asm__ volatile("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
    return 0;
#endif
}
static inline uint64_t oc_now(void) { return LIKELY(oc_fast_clock) ? oc_fast_now() : oc_now_slow(); }

#endif
