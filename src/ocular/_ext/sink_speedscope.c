/* sink_speedscope.c -- speedscope's file format (https://www.speedscope.app/file-format-schema.json):
 * one "evented" profile per thread, an open event ("O") at each frame's begin and a close event ("C")
 * at its end, times in nanoseconds.
 *
 * The renderer goes thread by thread and keeps every thread's begins and ends balanced, so a profile is
 * streamed as its thread is rendered: a thread change closes the previous profile (its start and end
 * values written after its events).  A frame's index in shared.frames is its code id; the frames are
 * written in the footer, the code table up to the highest id used (ids never seen are "<unknown
 * code>").  Close events name their frame, so the sink keeps its own stack of code ids.  Runs on the
 * renderer only.
 */
#include "render.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
    long tid;
    int open;            /* a profile is being written */
    int nprofiles;
    uint64_t nevents;    /* in the open profile */
    uint32_t nframes;    /* 1 + the highest code id used: the frames written */
    uint64_t first_ns, last_ns;
    uint32_t *stack;
    uint32_t depth, cap;
    int failed;
} SP;

static void put_u64(oc_out *o, uint64_t v) {
    char tmp[24];
    int i = 24;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    oc_out_write(o, tmp + i, (size_t)(24 - i));
}

#define LIT(o, s) oc_out_write((o), (s), sizeof(s) - 1)

static void ss_header(oc_out *o) {
    free(SP.stack);
    memset(&SP, 0, sizeof SP);
    LIT(o, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\"exporter\":\"ocular\",\"name\":\"");
    if (R.process_name)
        oc_out_write(o, R.process_name, strlen(R.process_name));
    LIT(o, "\",\"activeProfileIndex\":0,\"profiles\":[");
}

static void close_profile(oc_out *o) {
    if (!SP.open)
        return;
    LIT(o, "],\"startValue\":");
    put_u64(o, SP.first_ns);
    LIT(o, ",\"endValue\":");
    put_u64(o, SP.last_ns);
    LIT(o, "}");
    SP.open = 0;
}

static const char *thread_name(long tid) {
    for (uint32_t i = 0; i < R.nthreads; i++)
        if (R.threads[i].tid == tid && R.threads[i].name)
            return R.threads[i].name;
    return NULL;
}

static void open_profile(oc_out *o, long tid, uint64_t ts) {
    close_profile(o);
    if (SP.nprofiles++)
        LIT(o, ",");
    const char *name = thread_name(tid);
    LIT(o, "{\"type\":\"evented\",\"name\":\"");
    if (name && *name)
        oc_out_printf(o, "%.900s (%ld)", name, tid);
    else
        oc_out_printf(o, "thread %ld", tid);
    LIT(o, "\",\"unit\":\"nanoseconds\",\"events\":[");
    SP.open = 1;
    SP.tid = tid;
    SP.first_ns = SP.last_ns = ts;
    SP.depth = 0;
    SP.nevents = 0;
}

static void event(oc_out *o, char kind, uint64_t ts, uint32_t code_id) {
    int first = SP.nevents++ == 0;
    char buf[80];
    int n = snprintf(buf, sizeof buf, "%s{\"type\":\"%c\",\"frame\":%u,\"at\":", first ? "" : ",", kind, code_id);
    oc_out_write(o, buf, (size_t)n);
    put_u64(o, ts);
    LIT(o, "}");
    SP.last_ns = ts;
}

static void ss_begin(oc_out *o, long tid, uint64_t ts, uint32_t code_id) {
    if (!SP.open || SP.tid != tid)
        open_profile(o, tid, ts);
    if (SP.depth == SP.cap) {
        uint32_t cap = SP.cap ? SP.cap * 2 : 256;
        uint32_t *s = realloc(SP.stack, (size_t)cap * sizeof *s);
        if (!s) {
            SP.failed = 1; /* the file would be unbalanced: the footer marks it broken */
            return;
        }
        SP.stack = s;
        SP.cap = cap;
    }
    SP.stack[SP.depth++] = code_id;
    if (code_id >= SP.nframes)
        SP.nframes = code_id + 1;
    event(o, 'O', ts < SP.last_ns ? SP.last_ns : ts, code_id);
}

static void ss_end(oc_out *o, long tid, uint64_t ts) {
    if (!SP.open || SP.tid != tid || !SP.depth)
        return;
    uint32_t code_id = SP.stack[--SP.depth];
    event(o, 'C', ts < SP.last_ns ? SP.last_ns : ts, code_id);
}

static void ss_loop(oc_out *o, long tid, uint64_t ts, uint32_t code_id, int line, uint32_t offset, uint32_t insns,
                    uint64_t cycles, uint64_t ns) {
    (void)o, (void)tid, (void)ts, (void)code_id, (void)line, (void)offset, (void)insns, (void)cycles, (void)ns;
}

static void ss_footer(oc_out *o, const char *clock, int precise) {
    (void)clock, (void)precise;
    close_profile(o);
    LIT(o, "],\"shared\":{\"frames\":[");
    for (uint32_t i = 0; i < SP.nframes && i < R.ncodes; i++) {
        oc_codeent *e = &R.codes[i];
        if (i)
            LIT(o, ",");
        if (!e->qualname) {
            LIT(o, "{\"name\":\"<unknown code>\"}");
            continue;
        }
        LIT(o, "{\"name\":\"");
        oc_out_write(o, e->qualname, strlen(e->qualname));
        LIT(o, "\",\"file\":\"");
        oc_out_write(o, e->filename, strlen(e->filename));
        LIT(o, "\"");
        if (e->firstlineno > 0)
            oc_out_printf(o, ",\"line\":%d", e->firstlineno);
        LIT(o, "}");
    }
    LIT(o, "]}}\n");
    if (SP.failed && !o->err)
        o->err = 12; /* ENOMEM: the caller reports a write failure and leaves no file */
    free(SP.stack);
    SP.stack = NULL;
    SP.cap = SP.depth = 0;
}

const oc_sink oc_sink_speedscope = {"speedscope", ss_header, ss_begin, ss_end, ss_loop, ss_footer, NULL, NULL, NULL, NULL, NULL, NULL};
