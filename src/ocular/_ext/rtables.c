/* rtables.c -- the renderer's two tables, shared by its files: the recording's (rmeta: its header, code table
 * and threads, as the reader indexed them) and the render in progress (rstate), with the lookups the sinks and
 * the statistics make in them.  It uses no other file of ours: every render-side file may depend on it. */
#include "render_int.h"

oc_rmeta rmeta;
oc_rstate rstate;

const oc_live_ops *oc_live; /* (render_int.h) */

oc_codeent oc_unknown_code = {.qualname = "<unknown code>", .filename = "?", .qualname_raw = "<unknown code>",
                              .filename_raw = "?"};

/* Functions whose recorded calls are a part of their calls: their start (near-zero mode) or one of
 * their C call sites was de-instrumented (CF_START_DISABLED in the recording's code states). */
uint32_t oc_render_partial(void) {
    uint32_t n = 0;
    for (uint32_t id = 0; id < rmeta.ncodes; id++)
        n += rmeta.codes[id].qualname && (rmeta.codes[id].flags & CF_START_DISABLED);
    return n;
}

/* (render.h) */
long oc_render_thread_tid(uint32_t slot) {
    if (slot < rmeta.nthreads && rmeta.threads[slot].tid)
        return rmeta.threads[slot].tid;
    return rstate.ix && slot < rstate.nthreads ? (long)rstate.ix[slot].idx : 0;
}
