/* clock.c -- the time source: invariant TSC on x86-64, the virtual counter on aarch64, clock_gettime
 * elsewhere, and the calibration of ticks to nanoseconds against CLOCK_MONOTONIC.
 *
 * Calibration never pauses the program: start_tracing samples (ticks, monotonic) once, and the recorder
 * thread calibrates twice.  ~2 ms in, an early rate and a knee ~20 ms after the start: ticks before the
 * knee convert at the early rate (so a renderer can convert them at once, while the program runs).
 * ~20 ms in (or at stop, if sooner), the final rate over the whole 20 ms, for ticks from the knee on,
 * continuing from where the early rate put the knee: the mapping is continuous and increasing, so
 * timestamps stay monotonic per thread; the early rate's error (a few ppm over 2 ms) can misplace the
 * first 20 ms by well under a microsecond, and later timestamps by that much at most, while durations
 * after the knee get the final rate's accuracy.  A test mode replaces the counter with one that advances
 * by exactly one tick per read (deterministic reports in tests).
 */
#include "ocular.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

int oc_use_tsc = 0;
int oc_test_clock = 0;
int oc_fast_clock = 0; /* oc_use_tsc && !oc_test_clock: one test on the hot path */
uint64_t oc_test_ticks = 0;
static const char *source = "clock_gettime";

static uint64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* oc_now() without the hardware counter: out of line, so that the callbacks keep no stack frame for it */
__attribute__((noinline)) uint64_t oc_now_slow(void) {
    if (UNLIKELY(oc_test_clock))
        return ++oc_test_ticks;
    return mono_ns();
}

int oc_clock_init(void) {
    oc_use_tsc = 0;
    source = "clock_gettime";
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000007u) {
        __get_cpuid(0x80000007u, &a, &b, &c, &d);
        if (d & (1u << 8)) { /* invariant TSC */
            oc_use_tsc = 1;
            source = "tsc";
        }
    }
#elif defined(__aarch64__)
    oc_use_tsc = 1;
    source = "cntvct";
#endif
    if (getenv("OCULAR_CLOCK") && strcmp(getenv("OCULAR_CLOCK"), "monotonic") == 0) {
        oc_use_tsc = 0;
        source = "clock_gettime";
    }
    oc_fast_clock = oc_use_tsc && !oc_test_clock;
    return oc_use_tsc;
}

const char *oc_clock_source(void) { return oc_test_clock ? "test" : source; }

void oc_clock_set_test(int on) {
    oc_test_clock = on;
    oc_test_ticks = 0;
    oc_fast_clock = oc_use_tsc && !oc_test_clock;
}

/* A (ticks, monotonic) pair taken as close together as we can: the tightest of three tries. */
void oc_clock_sample(uint64_t *ticks, uint64_t *mono) {
    if (oc_test_clock) {
        *ticks = oc_test_ticks;
        *mono = 0;
        return;
    }
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 3; i++) {
        uint64_t t0 = oc_now();
        uint64_t m = mono_ns();
        uint64_t t1 = oc_now();
        if (t1 - t0 < best) {
            best = t1 - t0;
            *ticks = t0 + (t1 - t0) / 2;
            *mono = m;
        }
    }
}

/* ticks per ns from (tsc0, mono0) to now, or 1.0 (clock_gettime and the test clock: ticks are ns) */
static double rate_now(uint64_t *ticks) {
    *ticks = 0;
    if (oc_test_clock || !oc_use_tsc)
        return 1.0;
    uint64_t t, m;
    oc_clock_sample(&t, &m);
    *ticks = t;
    if (t > sess.tsc0 && m > sess.mono0_ns)
        return (double)(m - sess.mono0_ns) / (double)(t - sess.tsc0);
    return 1.0;
}

static void set_ccall_cap(void) {
    atomic_store_explicit(&sess.ccall_cap_ticks, OC_CCALL_CAP * oc_ccall_keep_ticks(), memory_order_relaxed);
}

void oc_clock_calibrate_early(void) {
    if (sess.early_calibrated)
        return;
    uint64_t t;
    double r = rate_now(&t);
    sess.early_npt = r;
    sess.early_calibrated = 1;
    set_ccall_cap();
    if (!t) { /* ticks are nanoseconds: nothing to refine */
        sess.ns_per_tick = r;
        sess.knee_tsc = UINT64_MAX;
        sess.calibrated = 1;
        return;
    }
    sess.knee_tsc = sess.tsc0 + (uint64_t)(20e6 / r); /* ~20 ms after the start, by the early rate */
}

void oc_clock_calibrate(void) {
    if (sess.calibrated)
        return;
    uint64_t t;
    double r = rate_now(&t);
    if (!sess.early_calibrated) { /* stop came first: one rate throughout */
        sess.early_npt = r;
        sess.knee_tsc = UINT64_MAX;
        sess.early_calibrated = 1;
        set_ccall_cap();
    } /* (else the early rate and knee are published already: they stay; if stop came before the knee,
       * every timestamp converts at the early rate, and durations at this one) */
    sess.ns_per_tick = r;
    sess.calibrated = 1;
}

/* The C call site rule's limit (monitor.c ccall_keep) in ticks, by the best rate known now: a site whose
 * timed calls average OC_CCALL_KEEP_NS (or OCULAR_CCALL_KEEP_NS: benchmarks under valgrind, whose clock
 * runs ~100x slow against the program) or more stays instrumented.  Rare (once per site per threshold
 * calls); kept once the early calibration is done. */
uint64_t oc_ccall_keep_ticks(void) {
    if (sess.ccall_keep_ticks)
        return sess.ccall_keep_ticks;
    double npt = 1.0; /* (clock_gettime and the test clock: ticks are ns) */
    if (oc_use_tsc && !oc_test_clock) {
        uint64_t t;
        npt = sess.early_calibrated ? sess.early_npt : rate_now(&t);
        if (!(npt > 0.01 && npt < 100.0))
            npt = 1.0;
    }
    const char *env = getenv("OCULAR_CCALL_KEEP_NS"); /* (checked by start_tracing: digits, or blank) */
    double keep_ns = env && *env && strspn(env, " ") != strlen(env) ? strtod(env, NULL) : OC_CCALL_KEEP_NS;
    uint64_t ticks = (uint64_t)(keep_ns / npt) + 1;
    if (sess.early_calibrated || !oc_use_tsc || oc_test_clock)
        sess.ccall_keep_ticks = ticks;
    return ticks;
}
