/* sink_json.c -- Chrome Trace Event (JSON object format) encoding, streamed through a raw fd.
 *
 * Runs on the writer thread only: no GIL, no Python API.  Numbers are formatted by hand (printf costs
 * several hundred ns an event).  Every event line ends with ",\n"; the footer writes the metadata
 * events last, so the array never ends with a dangling comma.  Output goes through write(2) from our
 * own buffer, never stdio, so a forked child's exit cannot flush half of it a second time.
 */
#include "ocular.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void oc_out_flush(oc_out *o) {
    size_t off = 0;
    if (o->fd < 0 || o->err) {
        o->len = 0;
        return;
    }
    while (off < o->len) {
        ssize_t w = write(o->fd, o->buf + off, o->len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            o->err = errno;
            break;
        }
        if (w == 0) {
            o->err = EIO;
            break;
        }
        off += (size_t)w;
        o->total += (uint64_t)w;
    }
    o->len = 0;
}

static inline void reserve(oc_out *o, size_t n) {
    if (o->len + n > o->cap)
        oc_out_flush(o);
}

void oc_out_write(oc_out *o, const char *s, size_t n) {
    if (o->fd < 0)
        return;
    while (n) {
        reserve(o, 1);
        size_t room = o->cap - o->len;
        size_t k = n < room ? n : room;
        memcpy(o->buf + o->len, s, k);
        o->len += k;
        s += k;
        n -= k;
    }
}

void oc_out_printf(oc_out *o, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        oc_out_write(o, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

#define LIT(o, s) oc_out_write((o), (s), sizeof(s) - 1)

static inline void put_str(oc_out *o, const char *s) { oc_out_write(o, s, strlen(s)); }

static inline void put_u64(oc_out *o, uint64_t v) {
    char tmp[24];
    int i = 24;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    oc_out_write(o, tmp + i, (size_t)(24 - i));
}

static inline void put_i64(oc_out *o, int64_t v) {
    if (v < 0) {
        LIT(o, "-");
        put_u64(o, (uint64_t)(-(v + 1)) + 1);
    } else {
        put_u64(o, (uint64_t)v);
    }
}

/* microseconds with three decimals from integer nanoseconds */
static inline void put_ts(oc_out *o, uint64_t ns) {
    char tmp[4];
    put_u64(o, ns / 1000);
    unsigned f = (unsigned)(ns % 1000);
    tmp[0] = '.';
    tmp[1] = (char)('0' + f / 100);
    tmp[2] = (char)('0' + f / 10 % 10);
    tmp[3] = (char)('0' + f % 10);
    oc_out_write(o, tmp, 4);
}

static inline void put_pid_tid(oc_out *o, long tid) {
    LIT(o, "\"pid\":");
    put_i64(o, S.pid);
    LIT(o, ",\"tid\":");
    put_i64(o, tid);
}

void oc_json_header(oc_out *o) { LIT(o, "{\"traceEvents\":[\n"); }

void oc_json_begin(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id) {
    oc_codeent *e = oc_code_entry(code_id);
    LIT(o, "{\"ph\":\"B\",");
    put_pid_tid(o, tid);
    LIT(o, ",\"ts\":");
    put_ts(o, ts_ns);
    LIT(o, ",\"cat\":\"python\",\"name\":\"");
    put_str(o, e->qualname);
    LIT(o, "\",\"args\":{\"file\":\"");
    put_str(o, e->filename);
    LIT(o, "\",\"line\":");
    put_i64(o, e->firstlineno);
    LIT(o, "}},\n");
}

void oc_json_end(oc_out *o, long tid, uint64_t ts_ns) {
    LIT(o, "{\"ph\":\"E\",");
    put_pid_tid(o, tid);
    LIT(o, ",\"ts\":");
    put_ts(o, ts_ns);
    LIT(o, "},\n");
}

void oc_json_loop(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id, int line, uint32_t offset,
                  uint32_t insns, uint64_t cycles, uint64_t ns) {
    oc_codeent *e = oc_code_entry(code_id);
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

void oc_json_footer(oc_out *o, const char *clock, int precise) {
    LIT(o, "{\"ph\":\"M\",\"name\":\"process_name\",");
    put_pid_tid(o, S.pid);
    LIT(o, ",\"args\":{\"name\":\"");
    put_str(o, S.process_name ? S.process_name : "python");
    LIT(o, "\"}}");
    for (uint32_t i = 0; i < S.nthreads; i++) {
        LIT(o, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",");
        put_pid_tid(o, S.threads[i].tid);
        LIT(o, ",\"args\":{\"name\":\"");
        put_str(o, S.threads[i].name ? S.threads[i].name : "thread");
        LIT(o, "\"}}");
    }
    LIT(o, "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"tracer\":\"ocular\",\"mode\":\"");
    put_str(o, precise ? "precise" : "adaptive");
    LIT(o, "\",\"clock\":\"");
    put_str(o, clock);
    LIT(o, "\",\"ns_per_tick\":");
    oc_out_printf(o, "%.9g", S.ns_per_tick);
    LIT(o, ",\"threshold\":");
    put_u64(o, S.threshold);
    LIT(o, "}}\n");
}

const oc_sink oc_sink_json = {
    .name = "json",
    .header = oc_json_header,
    .begin = oc_json_begin,
    .end = oc_json_end,
    .loop = oc_json_loop,
    .footer = oc_json_footer,
};
