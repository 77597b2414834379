/* sink_json.c -- Chrome Trace Event (JSON object format) encoding, streamed through a raw fd.
 *
 * Runs on the renderer only: no GIL, no Python API.  Numbers are formatted by hand (printf costs
 * several hundred ns an event).  Every event line ends with ",\n"; the footer writes the metadata
 * events last, so the array never ends with a dangling comma.  Output goes through oc_out (out.c).
 */
#include "render.h"
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

/* Writer-side caches: the constant tail of each code object's begin event, and the pid/tid prefix
 * of the thread being encoded (chunks come one thread at a time). */
typedef struct {
    char *s;
    size_t n;
} frag;
static frag *tails;
static uint32_t ntails;
static char pfx[64];
static size_t npfx;
static long pfx_tid = -1;
static char pfx_x[96]; /* {"ph":"X","pid":P,"tid":T,"ts": */
static size_t npfx_x;

/* the common case inline (constant sizes become plain moves); oc_out_write handles a full buffer */
static inline __attribute__((always_inline)) void put(oc_out *o, const char *s, size_t n) {
    if (LIKELY(o->len + n <= o->cap)) {
        memcpy(o->buf + o->len, s, n);
        o->len += n;
    } else {
        oc_out_write(o, s, n);
    }
}

#define LIT(o, s) put((o), (s), sizeof(s) - 1)

static inline void put_str(oc_out *o, const char *s) { put(o, s, strlen(s)); }

static inline void put_u64(oc_out *o, uint64_t v) {
    char tmp[24];
    int i = 24;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(o, tmp + i, (size_t)(24 - i));
}

static inline void put_i64(oc_out *o, int64_t v) {
    if (v < 0) {
        LIT(o, "-");
        put_u64(o, (uint64_t)(-(v + 1)) + 1);
    } else {
        put_u64(o, (uint64_t)v);
    }
}

static const char digits2[201] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                 "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                 "8081828384858687888990919293949596979899";

/* A duration (or a time below one millisecond) in microseconds with three decimals, from nanoseconds:
 * the plain form, all digits formatted here. */
static inline void put_dur(oc_out *o, uint64_t ns) {
    char t[32];
    int i = 28;
    unsigned f = (unsigned)(ns % 1000);
    uint64_t us = ns / 1000;
    t[28] = '.';
    t[29] = (char)('0' + f / 100);
    memcpy(t + 30, digits2 + 2 * (f % 100), 2);
    do {
        t[--i] = (char)('0' + us % 10);
        us /= 10;
    } while (us);
    put(o, t + i, (size_t)(32 - i));
}

/* Timestamps: microseconds with three decimals from integer nanoseconds.  A thread's timestamps rise
 * slowly, so the digits above the millisecond are formatted once per millisecond and kept; each event
 * then writes that prefix and six digits from a two-digit table. */
static uint64_t ms_cached = UINT64_MAX;
static char ms_str[24];
static size_t ms_len;

static inline __attribute__((always_inline)) void put_ts(oc_out *o, uint64_t ns) {
    uint64_t ms = ns / 1000000;
    if (UNLIKELY(ms != ms_cached)) {
        if (ms == 0) { /* no leading zeros in a JSON number: the plain form */
            put_dur(o, ns);
            return;
        }
        char tmp[24];
        int i = 24;
        uint64_t v = ms;
        do {
            tmp[--i] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        ms_len = (size_t)(24 - i);
        memcpy(ms_str, tmp + i, ms_len);
        ms_cached = ms;
    }
    unsigned rem = (unsigned)(ns - ms * 1000000); /* < 1e6: three integer digits, '.', three decimals */
    unsigned hi = rem / 1000, lo = rem % 1000;
    char t[32];
    char *p = o->len + 32 <= o->cap ? o->buf + o->len : t; /* straight into the buffer when it has room */
    memcpy(p, ms_str, 24);
    char *q = p + ms_len;
    q[0] = (char)('0' + hi / 100);
    memcpy(q + 1, digits2 + 2 * (hi % 100), 2);
    q[3] = '.';
    q[4] = (char)('0' + lo / 100);
    memcpy(q + 5, digits2 + 2 * (lo % 100), 2);
    if (p == t)
        put(o, t, ms_len + 7);
    else
        o->len += ms_len + 7;
}

static inline void set_tid(long tid) {
    if (UNLIKELY(tid != pfx_tid)) {
        npfx = (size_t)snprintf(pfx, sizeof pfx, "\"pid\":%ld,\"tid\":%ld", rmeta.pid, tid);
        if (npfx >= sizeof pfx)
            npfx = sizeof pfx - 1;
        pfx_tid = tid;
        npfx_x = (size_t)snprintf(pfx_x, sizeof pfx_x, "{\"ph\":\"X\",%s,\"ts\":", pfx);
    }
}

static inline void put_pid_tid(oc_out *o, long tid) {
    set_tid(tid);
    put(o, pfx, npfx);
}

/* ",\"cat\":...,\"args\":{...}},\n" of a code object's begin events, built once */
static frag *begin_tail(uint32_t code_id) {
    if (code_id >= ntails) {
        uint32_t n = code_id + 1024;
        frag *t = realloc(tails, n * sizeof(frag));
        if (!t)
            return NULL;
        memset(t + ntails, 0, (n - ntails) * sizeof(frag));
        tails = t;
        ntails = n;
    }
    frag *f = &tails[code_id];
    if (!f->s) {
        oc_codeent *e = oc_rcode(code_id);
        size_t cap = strlen(e->qualname) + strlen(e->filename) + 96;
        f->s = malloc(cap);
        if (!f->s)
            return NULL;
        int n = snprintf(f->s, cap, ",\"cat\":\"python\",\"name\":\"%s\",\"args\":{\"file\":\"%s\",\"line\":%d}},\n",
                         e->qualname, e->filename, e->firstlineno);
        f->n = n < 0 ? 0 : ((size_t)n < cap ? (size_t)n : cap - 1);
    }
    return f;
}

static void free_tails(void) {
    for (uint32_t i = 0; i < ntails; i++)
        free(tails[i].s);
    free(tails);
    tails = NULL;
    ntails = 0;
    pfx_tid = -1;
}

static void json_header(oc_out *o) {
    tails = NULL; /* a fork child may inherit a half-updated cache: start a new one */
    ntails = 0;
    pfx_tid = -1;
    ms_cached = UINT64_MAX;
    LIT(o, "{\"traceEvents\":[\n");
}

/* One slice as a complete event ("X": begin and duration), written when it ends: half the events of
 * a begin and an end each, and a fifth fewer bytes.  The file is thus in order of the slices' ends;
 * the format does not ask for time order (viewers sort).  Two slices of one thread begin at the same
 * time only where one encloses the other (the frames open at a flight-recorder window's edge, which
 * end apart): viewers nest equal begins by duration. */
static void json_slice(oc_out *o, long tid, uint64_t begin_ns, uint64_t end_ns, uint32_t code_id, int cut) {
    frag *f = begin_tail(code_id);
    if (!f)
        return;
    set_tid(tid);
    put(o, pfx_x, npfx_x);
    put_ts(o, begin_ns);
    LIT(o, ",\"dur\":");
    put_dur(o, end_ns > begin_ns ? end_ns - begin_ns : 0);
    if (LIKELY(!cut)) {
        put(o, f->s, f->n);
    } else { /* the tail's "}},\n" becomes ,"cut":true}},\n */
        put(o, f->s, f->n - 4);
        LIT(o, ",\"cut\":true}},\n");
    }
}

static void json_loop(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id, int line, uint32_t offset,
                  uint32_t insns, uint64_t cycles, uint64_t ns) {
    oc_codeent *e = oc_rcode(code_id);
    LIT(o, "{\"ph\":\"i\",\"s\":\"t\",");
    put_pid_tid(o, tid);
    LIT(o, ",\"ts\":");
    put_ts(o, ts_ns);
    LIT(o, ",\"cat\":\"loop\",\"name\":\"loop ");
    put_str(o, e->qualname);
    LIT(o, ":");
    put_i64(o, line);
    LIT(o, "\",\"args\":{\"line\":");
    put_i64(o, line);
    LIT(o, ",\"offset\":");
    put_u64(o, offset);
    LIT(o, ",\"instructions\":");
    put_u64(o, insns);
    LIT(o, ",\"cycles\":");
    put_u64(o, cycles);
    (void)ns; /* cycles x otherData.ns_per_tick; kept out of every instant to keep them short */
    LIT(o, "}},\n");
}

/* one run of a loop: a complete slice from the end of its first iteration to the end of its last */
static void json_loop_run(oc_out *o, long tid, uint64_t first_ns, uint64_t last_ns, uint32_t code_id, int line,
                          uint32_t offset, uint64_t iterations, uint64_t cycles) {
    oc_codeent *e = oc_rcode(code_id);
    LIT(o, "{\"ph\":\"X\",");
    put_pid_tid(o, tid);
    LIT(o, ",\"ts\":");
    put_ts(o, first_ns);
    LIT(o, ",\"dur\":");
    put_dur(o, last_ns > first_ns ? last_ns - first_ns : 0);
    LIT(o, ",\"cat\":\"loop\",\"name\":\"loop ");
    put_str(o, e->qualname);
    LIT(o, ":");
    put_i64(o, line);
    LIT(o, "\",\"args\":{\"line\":");
    put_i64(o, line);
    LIT(o, ",\"offset\":");
    put_u64(o, offset);
    LIT(o, ",\"iterations\":");
    put_u64(o, iterations);
    LIT(o, ",\"cycles\":");
    put_u64(o, cycles);
    LIT(o, "}},\n");
}

static void json_footer(oc_out *o, const char *clock, int precise) {
    LIT(o, "{\"ph\":\"M\",\"name\":\"process_name\",");
    put_pid_tid(o, rmeta.pid);
    LIT(o, ",\"args\":{\"name\":\"");
    put_str(o, rmeta.process_name ? rmeta.process_name : "python");
    LIT(o, "\"}}");
    for (uint32_t i = 0; i < rmeta.nthreads; i++) {
        LIT(o, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",");
        put_pid_tid(o, oc_render_thread_tid(i));
        LIT(o, ",\"args\":{\"name\":\"");
        put_str(o, rmeta.threads[i].name ? rmeta.threads[i].name : "thread");
        LIT(o, "\"}}");
    }
    for (uint32_t k = 0; k < oc_render_task_tracks(); k++) { /* asyncio tasks' tracks (render.c) */
        long tid;
        uint32_t task;
        if (!oc_render_task_track(OC_TASK_TID_BASE + (long)k, &tid, &task))
            continue;
        LIT(o, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",");
        put_pid_tid(o, OC_TASK_TID_BASE + (long)k);
        LIT(o, ",\"args\":{\"name\":\"task ");
        put_str(o, oc_rcode(task)->qualname ? oc_rcode(task)->qualname : "?");
        LIT(o, "\"}}");
    }
    LIT(o, "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"tracer\":\"ocular\",\"mode\":\"");
    put_str(o, precise ? "precise" : "adaptive");
    LIT(o, "\",\"clock\":\"");
    for (const char *c = clock; *c; c++) { /* (render.c made it printable ASCII) */
        if (*c == '"' || *c == '\\')
            LIT(o, "\\");
        put(o, c, 1);
    }
    LIT(o, "\",\"ns_per_tick\":");
    oc_out_printf(o, "%.9g", rmeta.ns_per_tick);
    LIT(o, ",\"threshold\":");
    put_u64(o, rmeta.threshold);
    LIT(o, ",\"dropped\":");
    put_u64(o, rmeta.dropped);
    /* what is exact: every function call unless near-zero mode; functions with a part of their calls */
    uint32_t partial = oc_render_partial();
    LIT(o, ",\"near_zero\":");
    put_str(o, rmeta.near_zero ? "true" : "false");
    LIT(o, ",\"partial_functions\":");
    put_u64(o, partial);
    if (partial) {
        LIT(o, ",\"note\":\"");
        put_str(o, rmeta.near_zero ? "near-zero mode: functions de-instrumented after the threshold have only their first "
                                 "calls as slices"
                               : "C call sites de-instrumented after the threshold: their later calls are not slices "
                                 "(their time is in the caller's)");
        LIT(o, "\"");
    }
    char damage[512]; /* a damaged recording: what was repaired to render it (render.c) */
    if (oc_render_damage(damage, sizeof damage)) {
        LIT(o, ",\"damaged\":true,\"clamped_records\":");
        put_u64(o, rmeta.clamped);
        LIT(o, ",\"damage\":\"");
        put_str(o, damage); /* (plain ASCII, no quote or backslash) */
        LIT(o, "\"");
    }
    LIT(o, "}}\n");
    free_tails();
}

/* A flow's end (Trace Event Format's flow events): "s" binds to the slice open on the track at ts_ns,
 * "f" to the next slice that begins there (an asyncio task's scheduling, and the step it scheduled).  The
 * "f" is written 1 ns before the step begins: Perfetto's importer takes the complete events of a timestamp
 * before its flow events, so an "f" at the step's own time would bind to the next slice after it (seen in
 * the Perfetto UI: 22 of 24 flows on the step's grandchildren, 2 lost) */
static void json_flow(oc_out *o, long tid, uint64_t ts_ns, uint64_t id, int end) {
    if (end && ts_ns)
        ts_ns--;
    if (end)
        LIT(o, "{\"ph\":\"f\",\"id\":");
    else
        LIT(o, "{\"ph\":\"s\",\"id\":");
    put_u64(o, id);
    LIT(o, ",");
    put_pid_tid(o, tid);
    LIT(o, ",\"ts\":");
    put_ts(o, ts_ns);
    LIT(o, ",\"cat\":\"asyncio\",\"name\":\"wake\"},\n");
}

/* an instant on a thread's track, named by a code (an asyncio loop stall) */
static void json_instant(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id) {
    LIT(o, "{\"ph\":\"i\",\"s\":\"t\",");
    put_pid_tid(o, tid);
    LIT(o, ",\"ts\":");
    put_ts(o, ts_ns);
    LIT(o, ",\"cat\":\"asyncio\",\"name\":\"");
    put_str(o, oc_rcode(code_id)->qualname);
    LIT(o, "\"},\n");
}

const oc_sink oc_sink_json = {
    .name = "json",
    .header = json_header,
    .loop = json_loop,
    .footer = json_footer,
    .loop_run = json_loop_run,
    .slice = json_slice,
    .flow = json_flow,
    .instant = json_instant,
};
