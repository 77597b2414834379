/* clock.c -- the time source: invariant TSC on x86-64, the virtual counter on aarch64, clock_gettime
 * elsewhere, and the calibration of ticks to nanoseconds against CLOCK_MONOTONIC.
 *
 * Calibration never pauses the program: start_tracing samples (ticks, monotonic) once, and the writer
 * thread takes the second sample ~20 ms later (or at stop, if sooner).  The rate is then fixed for the
 * session, so converted timestamps stay monotonic per thread.  A test mode replaces the counter with
 * one that advances by exactly one tick per read (deterministic reports in tests).
 */
#include "ocular.h"
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

int oc_use_tsc = 0;
int oc_test_clock = 0;
uint64_t oc_test_ticks = 0;
static const char *source = "clock_gettime";

static uint64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
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
    return oc_use_tsc;
}

const char *oc_clock_source(void) { return oc_test_clock ? "test" : source; }

void oc_clock_set_test(int on) {
    oc_test_clock = on;
    oc_test_ticks = 0;
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

void oc_clock_calibrate(void) {
    if (S.calibrated)
        return;
    if (oc_test_clock) {
        S.ns_per_tick = 1.0; /* one tick is one nanosecond in test mode */
    } else if (!oc_use_tsc) {
        S.ns_per_tick = 1.0;
    } else {
        uint64_t t, m;
        oc_clock_sample(&t, &m);
        if (t > S.tsc0 && m > S.mono0_ns)
            S.ns_per_tick = (double)(m - S.mono0_ns) / (double)(t - S.tsc0);
        else
            S.ns_per_tick = 1.0;
    }
    S.calibrated = 1;
}
