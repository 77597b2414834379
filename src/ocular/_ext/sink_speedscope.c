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
} spd_st;

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
    free(spd_st.stack);
    memset(&spd_st, 0, sizeof spd_st);
    LIT(o, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\"exporter\":\"ocular\",\"name\":\"");
    if (rmeta.process_name)
        oc_out_write(o, rmeta.process_name, strlen(rmeta.process_name));
    LIT(o, "\",\"activeProfileIndex\":0,\"profiles\":[");
}

static void close_profile(oc_out *o) {
    if (!spd_st.open)
        return;
    LIT(o, "],\"startValue\":");
    put_u64(o, spd_st.first_ns);
    LIT(o, ",\"endValue\":");
    put_u64(o, spd_st.last_ns);
    LIT(o, "}");
    spd_st.open = 0;
}

static const char *thread_name(long tid) {
    for (uint32_t i = 0; i < rmeta.nthreads; i++)
        if (oc_render_thread_tid(i) == tid && rmeta.threads[i].name)
            return rmeta.threads[i].name;
    return NULL;
}

static void open_profile(oc_out *o, long tid, uint64_t ts) {
    close_profile(o);
    if (spd_st.nprofiles++)
        LIT(o, ",");
    const char *name = thread_name(tid);
    LIT(o, "{\"type\":\"evented\",\"name\":\"");
    if (name && *name)
        oc_out_printf(o, "%.900s (%ld)", name, tid);
    else
        oc_out_printf(o, "thread %ld", tid);
    LIT(o, "\",\"unit\":\"nanoseconds\",\"events\":[");
    spd_st.open = 1;
    spd_st.tid = tid;
    spd_st.first_ns = spd_st.last_ns = ts;
    spd_st.depth = 0;
    spd_st.nevents = 0;
}

static void event(oc_out *o, char kind, uint64_t ts, uint32_t code_id) {
    int first = spd_st.nevents++ == 0;
    char buf[80];
    int n = snprintf(buf, sizeof buf, "%s{\"type\":\"%c\",\"frame\":%u,\"at\":", first ? "" : ",", kind, code_id);
    oc_out_write(o, buf, (size_t)n);
    put_u64(o, ts);
    LIT(o, "}");
    spd_st.last_ns = ts;
}

static void ss_begin(oc_out *o, long tid, uint64_t ts, uint32_t code_id) {
    if (!spd_st.open || spd_st.tid != tid)
        open_profile(o, tid, ts);
    if (spd_st.depth == spd_st.cap) {
        uint32_t cap = spd_st.cap ? spd_st.cap * 2 : 256;
        uint32_t *s = realloc(spd_st.stack, (size_t)cap * sizeof *s);
        if (!s) {
            spd_st.failed = 1; /* the file would be unbalanced: the footer marks it broken */
            return;
        }
        spd_st.stack = s;
        spd_st.cap = cap;
    }
    spd_st.stack[spd_st.depth++] = code_id;
    if (code_id >= spd_st.nframes)
        spd_st.nframes = code_id + 1;
    event(o, 'O', ts < spd_st.last_ns ? spd_st.last_ns : ts, code_id);
}

static void ss_end(oc_out *o, long tid, uint64_t ts) {
    if (!spd_st.open || spd_st.tid != tid || !spd_st.depth)
        return;
    uint32_t code_id = spd_st.stack[--spd_st.depth];
    event(o, 'C', ts < spd_st.last_ns ? spd_st.last_ns : ts, code_id);
}

static void ss_loop(oc_out *o, long tid, uint64_t ts, uint32_t code_id, int line, uint32_t offset, uint32_t insns,
                    uint64_t cycles, uint64_t ns) {
    (void)o, (void)tid, (void)ts, (void)code_id, (void)line, (void)offset, (void)insns, (void)cycles, (void)ns;
}

static void ss_footer(oc_out *o, const char *clock, int precise) {
    (void)clock, (void)precise;
    close_profile(o);
    LIT(o, "],\"shared\":{\"frames\":[");
    for (uint32_t i = 0; i < spd_st.nframes && i < rmeta.ncodes; i++) {
        oc_codeent *e = &rmeta.codes[i];
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
    if (spd_st.failed && !o->err)
        o->err = 12; /* ENOMEM: the caller reports a write failure and leaves no file */
    free(spd_st.stack);
    spd_st.stack = NULL;
    spd_st.cap = spd_st.depth = 0;
}

const oc_sink oc_sink_speedscope = {"speedscope", ss_header, ss_begin, ss_end, ss_loop, ss_footer, NULL, NULL, NULL, NULL, NULL, NULL};
