/* sink_perfetto.c -- native Perfetto protobuf trace encoding (work in progress: see issue 4).
 * Until the encoder lands, the Python layer refuses format="perfetto" before reaching this sink. */
#include "ocular.h"

static void nop_header(oc_out *o) { (void)o; }
static void nop_begin(oc_out *o, long tid, uint64_t ts, uint32_t id) { (void)o, (void)tid, (void)ts, (void)id; }
static void nop_end(oc_out *o, long tid, uint64_t ts) { (void)o, (void)tid, (void)ts; }
static void nop_loop(oc_out *o, long tid, uint64_t ts, uint32_t id, int line, uint32_t off, uint32_t n,
                     uint64_t c, uint64_t ns) {
    (void)o, (void)tid, (void)ts, (void)id, (void)line, (void)off, (void)n, (void)c, (void)ns;
}
static void nop_footer(oc_out *o, const char *clock, int precise) { (void)o, (void)clock, (void)precise; }

const oc_sink oc_sink_perfetto = {"perfetto", nop_header, nop_begin, nop_end, nop_loop, nop_footer};
