/* sink_perfetto.c -- the renderer's Perfetto protobuf encoding of the reconstructed events (format="perfetto").
 *
 * The file is a perfetto.protos.Trace: a stream of `repeated TracePacket packet = 1`.  Field numbers and
 * semantics come from Perfetto's published protos (protos/perfetto/trace/...); the names below follow
 * them.
 *
 * Output: the packets are collected into batches of about 256 KiB (the first of a session 16 KiB:
 * deflate.c codes each batch with the previous one's symbol counts), each compressed (deflate.c, zlib
 * format) into one TracePacket { bytes compressed_packets = 50 } -- which Perfetto's trace processor
 * expands in place, as it does for traces the tracing service compresses -- and written through
 * oc_out_write; the footer flushes the last batch.  OCULAR_PERFETTO_DEFLATE=0 in the environment
 * writes the batches' packets uncompressed.  Either way memory stays bounded.
 *
 * Layout:
 * - The renderer's own sequence (id B+1, B derived from the pid, below): a ClockSnapshot tying
 *   CLOCK_MONOTONIC (our timestamps) to BOOTTIME (Perfetto's default trace clock), then the process
 *   TrackDescriptor (pid, process name).
 * - One packet sequence per traced thread (trusted_packet_sequence_id B+2, B+3, ...), as Perfetto's own
 *   SDK does: the renderer delivers each thread's events in chunks, so the events of different threads
 *   arrive out of time order, and an incremental clock -- whose deltas cannot be negative -- can only
 *   be monotonic per thread.  The first packet of a thread's sequence sets
 *   SEQ_INCREMENTAL_STATE_CLEARED, first_packet_on_sequence and previous_packet_dropped (nothing was
 *   emitted on it before), TracePacketDefaults (timestamp_clock_id = 64, the sequence-scoped
 *   incremental clock, and track_uuid = the thread's track) and a ClockSnapshot defining clock 64
 *   against MONOTONIC.  Every later packet says SEQ_NEEDS_INCREMENTAL_STATE and carries only its
 *   timestamp delta (nanoseconds) and the TrackEvent.  The thread's TrackDescriptor (uuid, parent =
 *   the process track, pid, tid) follows at once; its name is only known at the end, so the footer
 *   emits the descriptor again with thread_name (the trace processor keeps the track and takes the
 *   name: a descriptor re-emitted with the same uuid/parent/pid/tid is the same track).
 * - A slice begin names its function by TrackEvent.name_iid and its place by source_location_iid: an
 *   interned SourceLocation (file_name, function_name = the qualname, line_number = the first line),
 *   which the trace processor shows as the slice's args source.file_name/function_name/line_number.
 *   A loop instant carries its figures as debug annotations (line, offset, instructions, cycles, ns).
 * - Interning per sequence: event names (function qualnames, "loop qualname:line"), source locations,
 *   the categories "python" and "loop" and the debug annotation names, each emitted in the
 *   InternedData of the first packet that uses it on that sequence.  Interning ids are global (a code
 *   object has the same name iid on every sequence, and the same number as its source location iid);
 *   each sequence keeps a bitmap of the ids it has emitted.
 *
 * Cost: the common packets are written straight into the batch from per-thread and per-code templates
 * (a slice end differs from the thread's last one only in its timestamp delta; a slice begin whose
 * name is already interned on its sequence is the code's cached TrackEvent bytes plus the delta; a
 * loop instant once its names are interned), with the timestamp last.  Everything else goes through
 * the small protobuf writer below.  Compression needs no search for the slice packets: the sink knows
 * what they repeat and hands deflate.c the LZ77 tokens itself -- a copy of the last packet with the
 * same thread, code and timestamp delta (rep_slot, end_rep), else of the last one of its kind followed
 * by the timestamp bytes as literals.  The copy of the last identical packet is nearly every slice packet
 * (fib: 99%) and is tested first; the other cases are out of line (begin_tokens, end_tokens).  A loop
 * instant is mostly a copy of its loop's last one on the thread (loop_rep: all but its cycles, ns and
 * timestamp values); the other loop instants and the protobuf writer's packets get their tokens from
 * deflate.c's matcher, a run at a time.
 *
 * Runs on the rendering thread only: no GIL, no Python API.  Memory failures set the output's error
 * (ENOMEM), which is reported like a failed write.
 */
#include "render.h"
#include "deflate.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- field numbers (Perfetto protos under protos/perfetto/trace/) ---- */
enum {
    TRACE_PACKET = 1, /* Trace.packet */

    TP_CLOCK_SNAPSHOT = 6, /* TracePacket */
    TP_TIMESTAMP = 8,
    TP_SEQUENCE_ID = 10, /* trusted_packet_sequence_id */
    TP_TRACK_EVENT = 11,
    TP_INTERNED_DATA = 12,
    TP_SEQUENCE_FLAGS = 13,
    TP_PREVIOUS_PACKET_DROPPED = 42,
    TP_TIMESTAMP_CLOCK_ID = 58,
    TP_DEFAULTS = 59,
    TP_TRACK_DESCRIPTOR = 60,
    TP_COMPRESSED_PACKETS = 50,
    TP_FIRST_PACKET_ON_SEQUENCE = 87,

    DEF_TRACK_EVENT_DEFAULTS = 11, /* TracePacketDefaults */
    DEF_TIMESTAMP_CLOCK_ID = 58,
    TED_TRACK_UUID = 11, /* TrackEventDefaults */

    CS_CLOCKS = 1,     /* ClockSnapshot */
    CLK_ID = 1,        /* ClockSnapshot.Clock */
    CLK_TIMESTAMP = 2,
    CLK_INCREMENTAL = 3,

    TD_UUID = 1, /* TrackDescriptor */
    TD_NAME = 2,
    TD_PROCESS = 3,
    TD_THREAD = 4,
    TD_PARENT_UUID = 5,
    PD_PID = 1, /* ProcessDescriptor */
    PD_PROCESS_NAME = 6,
    THD_PID = 1, /* ThreadDescriptor */
    THD_TID = 2,
    THD_THREAD_NAME = 5,

    TE_CATEGORY_IIDS = 3, /* TrackEvent */
    TE_DEBUG_ANNOTATIONS = 4,
    TE_TYPE = 9,
    TE_NAME_IID = 10,
    TE_SOURCE_LOCATION_IID = 34,
    TE_NAME = 23,
    TE_FLOW_IDS = 47,             /* (repeated fixed64) */
    TE_TERMINATING_FLOW_IDS = 48, /* (repeated fixed64) */
    DA_NAME_IID = 1, /* DebugAnnotation */
    DA_UINT_VALUE = 3,
    DA_INT_VALUE = 4,

    ID_EVENT_CATEGORIES = 1, /* InternedData */
    ID_EVENT_NAMES = 2,
    ID_DEBUG_ANNOTATION_NAMES = 3,
    ID_SOURCE_LOCATIONS = 4,
    IN_IID = 1, /* EventCategory, EventName, DebugAnnotationName */
    IN_NAME = 2,
    SL_IID = 1, /* SourceLocation */
    SL_FILE_NAME = 2,
    SL_FUNCTION_NAME = 3,
    SL_LINE_NUMBER = 4,
};
enum { SEQ_INCREMENTAL_STATE_CLEARED = 1, SEQ_NEEDS_INCREMENTAL_STATE = 2 };
enum { TYPE_SLICE_BEGIN = 1, TYPE_SLICE_END = 2, TYPE_INSTANT = 3 };
enum { CLOCK_MONOTONIC_ID = 3, CLOCK_BOOTTIME_ID = 6, CLOCK_INCREMENTAL_ID = 64 };
/* Sequence ids are unique across processes (the pid, below 2^22 on Linux, times 1024, plus 1 for the
 * renderer's own sequence and 2, 3, ... for threads), so the traces of several processes can be merged
 * by simply concatenating their packets (`python -m ocular merge`, `--follow`).  A process with more
 * than 1022 traced threads continues into the next pid's range. */
enum { SEQS_PER_PROCESS_BITS = 10 };
/* raw bytes per compressed_packets batch: Perfetto asks for compressed packets under 512 KiB */
#define BATCH (256u * 1024u)
/* The first batch of a session is smaller: deflate.c codes each batch with the counts of the one
 * before, and the first has none (all symbols alike); a short first batch soon gives the next ones
 * codes fitted to the trace. */
#define FIRST_BATCH (16u * 1024u)
/* room past BATCH that a template packet may use without a check (the largest is under 48 bytes) */
#define BATCH_SLACK 256u

/* one-byte protobuf tags (fields 1..15): field << 3 | wire type (0 varint, 2 length-delimited) */
#define TAG_VARINT(f) ((uint8_t)((f) << 3))
#define TAG_LEN(f) ((uint8_t)((f) << 3 | 2))

/* fixed interned ids */
enum { CAT_PYTHON = 1, CAT_LOOP = 2, CAT_ASYNCIO = 3 };
static const char *const cat_names[] = {NULL, "python", "loop", "asyncio"};
enum { AN_INSTRUCTIONS = 1, AN_CYCLES, AN_NS, AN_LINE, AN_OFFSET, AN_COUNT };
static const char *const ann_names[] = {NULL, "instructions", "cycles", "ns", "line", "offset"};

/* ---- a small protobuf writer: one packet at a time into a growable buffer ---- */
#define PB_DEPTH 8
typedef struct {
    uint8_t *b;
    size_t n, cap;
    size_t open[PB_DEPTH]; /* offset of the 1-byte length placeholder of each open message */
    int depth;
    int oom;
} pbw;

static __attribute__((noinline)) int pb_grow(pbw *w, size_t k) {
    if (w->oom)
        return 0;
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < w->n + k)
        cap *= 2;
    uint8_t *nb = realloc(w->b, cap);
    if (!nb) {
        w->oom = 1;
        return 0;
    }
    w->b = nb;
    w->cap = cap;
    return 1;
}

static inline int pb_reserve(pbw *w, size_t k) {
    if (LIKELY(w->n + k <= w->cap))
        return 1;
    return pb_grow(w, k);
}

static inline int varint_size(uint64_t v) {
    int k = 1;
    while (v >= 0x80) {
        v >>= 7;
        k++;
    }
    return k;
}

static inline uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline void pb_varint(pbw *w, uint64_t v) {
    if (!pb_reserve(w, 10))
        return;
    w->n = (size_t)(put_varint(w->b + w->n, v) - w->b);
}

static inline void pb_uint(pbw *w, uint32_t field, uint64_t v) {
    pb_varint(w, (uint64_t)field << 3);
    pb_varint(w, v);
}

/* int32/int64 fields: two's complement as a varint (not zigzag) */
static inline void pb_int(pbw *w, uint32_t field, int64_t v) { pb_uint(w, field, (uint64_t)v); }

static void pb_raw(pbw *w, const void *s, size_t n) {
    if (!pb_reserve(w, n))
        return;
    memcpy(w->b + w->n, s, n);
    w->n += n;
}

static void pb_bytes(pbw *w, uint32_t field, const char *s, size_t n) {
    pb_varint(w, ((uint64_t)field << 3) | 2);
    pb_varint(w, n);
    pb_raw(w, s, n);
}

static void pb_str(pbw *w, uint32_t field, const char *s) { pb_bytes(w, field, s ? s : "", s ? strlen(s) : 0); }

/* Nested message: a 1-byte length placeholder, widened at close if the body reached 128 bytes. */
static void pb_open(pbw *w, uint32_t field) {
    pb_varint(w, ((uint64_t)field << 3) | 2);
    if (w->depth >= PB_DEPTH || !pb_reserve(w, 1)) {
        w->oom = 1;
        return;
    }
    w->open[w->depth++] = w->n;
    w->b[w->n++] = 0;
}

static void pb_close(pbw *w) {
    if (w->depth <= 0) {
        w->oom = 1;
        return;
    }
    size_t at = w->open[--w->depth];
    if (w->oom)
        return;
    size_t len = w->n - at - 1;
    int k = varint_size(len);
    if (k > 1) {
        if (!pb_reserve(w, (size_t)k - 1))
            return;
        memmove(w->b + at + k, w->b + at + 1, len);
        w->n += (size_t)k - 1;
    }
    put_varint(w->b + at, len);
}

/* ---- sink state ---- */
/* Where the thread's last slice end with timestamp delta `delta` was written (a stream offset, see
 * pf_st.base; 0: never): a slice end with that delta is the same bytes, a copy for deflate found without a
 * search or a hash.  A table per thread, direct-mapped by the delta's low bits, 2 KiB (16 entries missed
 * a fifth of fib(22)'s ends, 128 miss 1.5%: its .pftrace 4.6% smaller, 6 instructions an event fewer). */
typedef struct {
    uint64_t delta, at;
} end_rep;
#define END_REPS 128u

typedef struct {
    long tid;
    uint32_t num;          /* the sequence's number among the trace's (from 1): who wrote c->th, lr->th */
    uint32_t seq;          /* trusted_packet_sequence_id */
    uint64_t uuid;         /* its thread track */
    uint64_t last_ns;      /* value of the sequence's incremental clock */
    uint32_t cats, anns;   /* bit i: fixed interned id i emitted on this sequence */
    uint8_t *names;        /* bitmap by event name iid (a code's name and its source location) */
    uint32_t names_cap;    /* in bits */
    /* templates: {seq id, sequence flags} (zero-padded to 8 bytes); a slice end's TrackEvent follows
     * in end[] (zero-padded to 24 bytes, then the timestamp tag) */
    uint8_t hdr_len, end_len;
    uint8_t end[24];
    /* where this sequence's packets were written (stream offsets, see pf_st.base; 0: never): the last one,
     * and the last slice end by the length of its timestamp varint (that makes its length byte) */
    uint64_t last_at, end_at[11];   /* end_at[0]: the last slice end of any length */
    end_rep ends[END_REPS];         /* by timestamp delta */
} pf_thread;

/* a code object's slice-begin TrackEvent, ready to copy: {type, category, name_iid,
 * source_location_iid} as one length-delimited field 11, zero-padded to 24 bytes */
#define MAX_IID ((1u << 28) - 1) /* 4-byte varints: the cached TrackEvent stays within te[] */
typedef struct {
    uint8_t te[24];
    uint64_t at, te_at;    /* its last slice begin: stream offsets of the packet and of te[] in it */
    uint32_t iid;          /* its event name and source location iid; 0: not assigned yet */
    uint32_t th;           /* that packet's thread (index + 1) */
    uint8_t len, tsl;      /* te[]'s length; that packet's timestamp varint length */
} code_te;

typedef struct {
    uint64_t key;          /* code_id << 32 | (uint32_t)line, +1 so that 0 means empty */
    uint32_t iid;
} loop_slot;

/* The last loop instant of a loop (code, line) on a thread: its name iid (no lookup in pf_st.loops), and
 * where it was written with its layout, the offsets of its cycles and ns annotations and of its
 * timestamp.  The next iteration's packet has the same bytes but for those values: a copy of the rest
 * for deflate, found without a search.  Direct-mapped by a hash of (code, line, thread). */
#define LREP_BITS 10
typedef struct {
    uint64_t key;          /* (code_id << 32 | line) + 1, 0: empty */
    uint64_t at;           /* stream offset of the packet (see pf_st.base), 0: none */
    uint32_t th, iid;
    uint32_t layout;       /* bytes: packet length, offsets of the cycles and ns annotations, of the timestamp */
} loop_rep;

/* Where the bytes {cycles value, ns annotation} of a loop instant with these values were written
 * (the cycles annotation's value; a stream offset, see pf_st.base): iterations often take the same cycles.
 * Direct-mapped by a hash of the values. */
#define LVAL_BITS 12
typedef struct {
    uint64_t cycles, ns, at;
} loop_val;

/* Where the last slice begin of a code on a thread with a given timestamp delta was written: a packet
 * with the same key is the same bytes.  Direct-mapped by a hash of the key (slice ends: end_rep). */
#define REP_BITS 12
typedef struct {
    uint64_t kind, delta, at;
} rep_slot;

static struct {
    int active;
    pbw w;
    uint64_t process_uuid;
    uint64_t mono0;            /* MONOTONIC at the header */
    pf_thread *th;
    pf_thread *cur;            /* the thread of the last packet while the sink is writing, else NULL */
    uint32_t nth, cap_th;
    uint32_t next_num;         /* a thread's num: unique among the sequences of the trace */
    uint64_t ended_ns;         /* the latest timestamp of the threads that ended (and left pf_st.th) */
    uint32_t own_seq;          /* the renderer's own sequence; threads follow it */
    uint32_t next_seq;
    code_te *codes;            /* by code id */
    uint32_t code_cap;
    uint32_t next_name_iid;
    loop_slot *loops;
    uint32_t loops_cap, loops_n;
    int deflate;               /* batch packets into TracePacket.compressed_packets */
    uint8_t *raw, *z;          /* the batch being collected, its compressed form */
    size_t raw_n, raw_cap, z_cap;
    uint64_t base;             /* stream offset of raw[0]: all bytes of earlier batches, plus 1 */
    size_t batch_limit;        /* raw bytes that end a batch: FIRST_BATCH, then BATCH */
    size_t unscanned;          /* raw[unscanned..raw_n): packets with no tokens yet (see scan_pending) */
    rep_slot reps[1u << REP_BITS];
    loop_rep lreps[1u << LREP_BITS];
    loop_val lvals[1u << LVAL_BITS];
} pf_st;

static void fail(oc_out *o) {
    if (!o->err)
        o->err = ENOMEM;
    pf_st.active = 0;
    pf_st.cur = NULL;
}

static uint64_t mix64(uint64_t x) { /* splitmix64 finalizer */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t thread_uuid(long tid) {
    uint64_t u = mix64(pf_st.process_uuid ^ mix64((uint64_t)tid + 1));
    return u && u != pf_st.process_uuid ? u : u + 2;
}

static uint64_t clock_ns(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* The raw name of a JSON-escaped string produced by oc_json_escape (\" \\ \u00XX; malloc'd). */
static char *json_unescape(const char *s) {
    size_t n = strlen(s);
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n) {
            char c = s[++i];
            if (c == 'u' && i + 4 < n) {
                unsigned v = 0;
                for (int k = 1; k <= 4; k++) {
                    char h = s[i + k];
                    v = v * 16 + (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
                }
                *o++ = (char)v; /* oc_json_escape only escapes bytes below 0x80 this way */
                i += 4;
            } else {
                *o++ = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
            }
        } else {
            *o++ = s[i];
        }
    }
    *o = 0;
    return out;
}

/* ---- batches ---- */
/* Packets built by the protobuf writer get their tokens from deflate.c's matcher, a run of them at a
 * time (so that a match can span several loop instants): before a template packet adds its own
 * tokens, and before a batch is compressed. */
static int scan_pending(void) {
    int rc = 0;
    if (pf_st.unscanned < pf_st.raw_n)
        rc = oc_z_scan(pf_st.raw, pf_st.unscanned, pf_st.raw_n);
    pf_st.unscanned = SIZE_MAX;
    return rc;
}

/* Compress the collected packets into one TracePacket { compressed_packets = 50 } and write it (or,
 * uncompressed, write the packets themselves). */
static __attribute__((noinline)) void flush_batch(oc_out *o) {
    if (pf_st.deflate ? scan_pending() < 0 : (pf_st.unscanned = SIZE_MAX, 0))
        fail(o);
    size_t n = pf_st.raw_n;
    pf_st.raw_n = 0;
    pf_st.base += n;
    pf_st.batch_limit = BATCH;
    if (!n)
        return;
    if (!pf_st.deflate) {
        oc_out_write(o, (const char *)pf_st.raw, n);
        if (o->err)
            pf_st.active = 0, pf_st.cur = NULL;
        return;
    }
    size_t zn = oc_z_finish(pf_st.raw, n, &pf_st.z, &pf_st.z_cap);
    if (!zn) {
        fail(o);
        return;
    }
    uint8_t hdr[24], *h = hdr;
    const uint64_t ztag = (uint64_t)TP_COMPRESSED_PACKETS << 3 | 2;
    size_t inner = (size_t)varint_size(ztag) + (size_t)varint_size(zn) + zn;
    h = put_varint(h, TAG_LEN(TRACE_PACKET));
    h = put_varint(h, inner);
    h = put_varint(h, ztag);
    h = put_varint(h, zn);
    oc_out_write(o, (const char *)hdr, (size_t)(h - hdr));
    oc_out_write(o, (const char *)pf_st.z, zn);
    if (o->err)
        pf_st.active = 0, pf_st.cur = NULL;
}

/* pos (a stream offset, 0: none) is earlier in this batch and within deflate's window of cur */
static inline int near(uint64_t pos, uint64_t cur) { return pos >= pf_st.base && cur - pos <= OC_Z_WINDOW; }

static inline void lits(oc_ztokens *z, const uint8_t *p, size_t n) {
    for (size_t k = 0; k < n; k++)
        oc_z_lit(z, p[k]);
}

static inline rep_slot *rep_slot_of(uint64_t kind, uint64_t delta) {
    return &pf_st.reps[((kind ^ delta << 20) * 0x9E3779B97F4A7C15ull) >> (64 - REP_BITS)];
}

static inline loop_val *loop_val_of(uint64_t cycles, uint64_t ns) {
    return &pf_st.lvals[((cycles * 0x9E3779B97F4A7C15ull) ^ ns) * 0xD6E8FEB86659FD93ull >> (64 - LVAL_BITS)];
}

/* After every packet: a full batch goes out, so that BATCH_SLACK bytes past raw_n are always free. */
static inline void batch_done(oc_out *o) {
    if (UNLIKELY(pf_st.raw_n >= pf_st.batch_limit))
        flush_batch(o);
}

/* ---- packets built by the protobuf writer ---- */
static pbw *pkt_start(void) {
    pbw *w = &pf_st.w;
    w->n = 0;
    w->depth = 0;
    pb_open(w, TRACE_PACKET);
    return w;
}

static void pkt_end(oc_out *o) {
    pbw *w = &pf_st.w;
    pb_close(w);
    if (w->oom || w->depth) {
        w->oom = 0;
        fail(o);
        return;
    }
    if (pf_st.raw_n + w->n + BATCH_SLACK > pf_st.raw_cap) {
        size_t cap = pf_st.raw_cap;
        while (cap < pf_st.raw_n + w->n + BATCH_SLACK)
            cap *= 2;
        uint8_t *r = realloc(pf_st.raw, cap);
        if (!r) {
            fail(o);
            return;
        }
        pf_st.raw = r;
        pf_st.raw_cap = cap;
    }
    memcpy(pf_st.raw + pf_st.raw_n, w->b, w->n);
    if (pf_st.unscanned == SIZE_MAX)
        pf_st.unscanned = pf_st.raw_n;
    pf_st.raw_n += w->n;
    batch_done(o);
}

static inline int bit_test(const uint8_t *bm, uint32_t cap, uint32_t i) {
    return i < cap && (bm[i >> 3] >> (i & 7)) & 1;
}

static int bit_set(uint8_t **bm, uint32_t *cap, uint32_t i) {
    if (i >= *cap) {
        uint32_t ncap = *cap ? *cap : 1024;
        while (ncap <= i)
            ncap *= 2;
        uint8_t *n = realloc(*bm, ncap / 8);
        if (!n)
            return -1;
        memset(n + *cap / 8, 0, (ncap - *cap) / 8);
        *bm = n;
        *cap = ncap;
    }
    (*bm)[i >> 3] |= (uint8_t)(1u << (i & 7));
    return 0;
}

/* ---- global interning ids ---- */
/* The code's iid and its cached slice-begin TrackEvent (NULL on memory failure). */
static code_te *code_entry(uint32_t code_id) {
    if (code_id >= pf_st.code_cap) {
        uint32_t cap = pf_st.code_cap ? pf_st.code_cap : 1024;
        while (cap <= code_id)
            cap *= 2;
        code_te *a = realloc(pf_st.codes, cap * sizeof(code_te));
        if (!a)
            return NULL;
        memset(a + pf_st.code_cap, 0, (cap - pf_st.code_cap) * sizeof(code_te));
        pf_st.codes = a;
        pf_st.code_cap = cap;
    }
    code_te *c = &pf_st.codes[code_id];
    if (!c->iid) {
        if (pf_st.next_name_iid >= MAX_IID)
            return NULL;
        c->iid = ++pf_st.next_name_iid;
        uint8_t *p = c->te + 2;
        *p++ = TAG_VARINT(TE_TYPE);
        *p++ = TYPE_SLICE_BEGIN;
        *p++ = TAG_VARINT(TE_CATEGORY_IIDS);
        *p++ = CAT_PYTHON;
        *p++ = TAG_VARINT(TE_NAME_IID);
        p = put_varint(p, c->iid);
        p = put_varint(p, (uint64_t)TE_SOURCE_LOCATION_IID << 3);
        p = put_varint(p, c->iid);
        c->te[0] = TAG_LEN(TP_TRACK_EVENT);
        c->te[1] = (uint8_t)(p - c->te - 2);
        c->len = (uint8_t)(p - c->te);

    }
    return c;
}

static uint32_t loop_iid(uint32_t code_id, int line) {
    if (pf_st.loops_n * 2 >= pf_st.loops_cap) {
        uint32_t cap = pf_st.loops_cap ? pf_st.loops_cap * 2 : 256;
        loop_slot *t = calloc(cap, sizeof(loop_slot));
        if (!t)
            return 0;
        for (uint32_t i = 0; i < pf_st.loops_cap; i++)
            if (pf_st.loops[i].key) {
                uint32_t j = (uint32_t)mix64(pf_st.loops[i].key) & (cap - 1);
                while (t[j].key)
                    j = (j + 1) & (cap - 1);
                t[j] = pf_st.loops[i];
            }
        free(pf_st.loops);
        pf_st.loops = t;
        pf_st.loops_cap = cap;
    }
    uint64_t key = (((uint64_t)code_id << 32) | (uint32_t)line) + 1;
    uint32_t j = (uint32_t)mix64(key) & (pf_st.loops_cap - 1);
    while (pf_st.loops[j].key) {
        if (pf_st.loops[j].key == key)
            return pf_st.loops[j].iid;
        j = (j + 1) & (pf_st.loops_cap - 1);
    }
    pf_st.loops[j].key = key;
    pf_st.loops[j].iid = ++pf_st.next_name_iid;
    pf_st.loops_n++;
    return pf_st.loops[j].iid;
}

/* ---- per-thread sequences ---- */
static void put_clock(pbw *w, uint32_t id, uint64_t ts, int incremental) {
    pb_open(w, CS_CLOCKS);
    pb_uint(w, CLK_ID, id);
    pb_uint(w, CLK_TIMESTAMP, ts);
    if (incremental)
        pb_uint(w, CLK_INCREMENTAL, 1);
    pb_close(w);
}

static void put_thread_descriptor(pbw *w, pf_thread *t, const char *name) {
    long tid;
    uint32_t task;
    if (oc_render_task_track(t->tid, &tid, &task)) { /* an asyncio task's steps: a track under its thread's */
        oc_codeent *e = oc_rcode(task);
        pb_open(w, TP_TRACK_DESCRIPTOR);
        pb_uint(w, TD_UUID, t->uuid);
        pb_uint(w, TD_PARENT_UUID, thread_uuid(tid));
        pb_str(w, TD_NAME, e->qualname_raw ? e->qualname_raw : "task");
        pb_close(w);
        return;
    }
    pb_open(w, TP_TRACK_DESCRIPTOR);
    pb_uint(w, TD_UUID, t->uuid);
    pb_uint(w, TD_PARENT_UUID, pf_st.process_uuid);
    pb_open(w, TD_THREAD);
    pb_int(w, THD_PID, rmeta.pid);
    pb_int(w, THD_TID, t->tid);
    if (name)
        pb_str(w, THD_THREAD_NAME, name);
    pb_close(w);
    pb_close(w);
}

/* Timestamp of a packet on t's sequence, last in the packet: a delta on the incremental clock, or
 * (never expected: a thread's events are in time order) an absolute MONOTONIC time that leaves the
 * clock alone. */
static inline void put_ts(pbw *w, pf_thread *t, uint64_t ts) {
    if (LIKELY(ts >= t->last_ns)) {
        pb_uint(w, TP_TIMESTAMP, ts - t->last_ns);
        t->last_ns = ts;
    } else {
        pb_uint(w, TP_TIMESTAMP_CLOCK_ID, CLOCK_MONOTONIC_ID);
        pb_uint(w, TP_TIMESTAMP, ts);
    }
}

/* {trusted_packet_sequence_id, sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE}, as the template has it */
static void seq_header(pbw *w, pf_thread *t) { pb_raw(w, t->end, t->hdr_len); }

/* A new thread: open its sequence (defaults + incremental clock at ts) and announce its track. */
static pf_thread *new_thread(oc_out *o, long tid, uint64_t ts) {
    if (pf_st.nth == pf_st.cap_th) {
        uint32_t cap = pf_st.cap_th ? pf_st.cap_th * 2 : 16;
        pf_thread *n = realloc(pf_st.th, cap * sizeof(pf_thread));
        if (!n) {
            fail(o);
            return NULL;
        }
        pf_st.th = n;
        pf_st.cap_th = cap;
    }
    pf_thread *t = &pf_st.th[pf_st.nth++];
    memset(t, 0, sizeof *t);
    t->tid = tid;
    t->num = ++pf_st.next_num; /* (not its index: an ended thread's entry is given to the next thread) */
    t->seq = pf_st.next_seq++;
    t->uuid = thread_uuid(tid);
    t->last_ns = ts;
    uint8_t *p = t->end;
    *p++ = TAG_VARINT(TP_SEQUENCE_ID);
    p = put_varint(p, t->seq);
    *p++ = TAG_VARINT(TP_SEQUENCE_FLAGS);
    *p++ = SEQ_NEEDS_INCREMENTAL_STATE;
    t->hdr_len = (uint8_t)(p - t->end);
    *p++ = TAG_LEN(TP_TRACK_EVENT);
    *p++ = 2;
    *p++ = TAG_VARINT(TE_TYPE);
    *p++ = TYPE_SLICE_END;
    *p++ = TAG_VARINT(TP_TIMESTAMP);
    t->end_len = (uint8_t)(p - t->end);

    pbw *w = pkt_start();
    pb_uint(w, TP_SEQUENCE_ID, t->seq);
    pb_uint(w, TP_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
    pb_uint(w, TP_FIRST_PACKET_ON_SEQUENCE, 1);
    pb_uint(w, TP_PREVIOUS_PACKET_DROPPED, 1); /* "set on the first packet of a sequence" */
    pb_open(w, TP_DEFAULTS);
    pb_uint(w, DEF_TIMESTAMP_CLOCK_ID, CLOCK_INCREMENTAL_ID);
    pb_open(w, DEF_TRACK_EVENT_DEFAULTS);
    pb_uint(w, TED_TRACK_UUID, t->uuid);
    pb_close(w);
    pb_close(w);
    pb_open(w, TP_CLOCK_SNAPSHOT);
    put_clock(w, CLOCK_MONOTONIC_ID, ts, 0);
    put_clock(w, CLOCK_INCREMENTAL_ID, ts, 1);
    pb_close(w);
    pkt_end(o);

    w = pkt_start();
    seq_header(w, t);
    put_thread_descriptor(w, t, NULL);
    put_ts(w, t, ts);
    pkt_end(o);
    return t;
}

/* The sink is writing: it has an output, and no write has failed (flush_batch and fail() clear
 * pf_st.active on an error). */
static inline int ready(oc_out *o) {
    (void)o;
    return pf_st.active;
}

/* thread_for's slow path: not the last packet's thread, or not writing (NULL) */
static __attribute__((noinline)) pf_thread *thread_slow(oc_out *o, long tid, uint64_t ts) {
    if (!ready(o))
        return NULL;
    pf_thread *t = NULL;
    for (uint32_t i = 0; i < pf_st.nth && !t; i++)
        if (pf_st.th[i].tid == tid)
            t = &pf_st.th[i];
    if (!t)
        t = new_thread(o, tid, ts);
    pf_st.cur = pf_st.active ? t : NULL;
    return t;
}

/* The thread's state, or NULL when the sink is not writing (pf_st.cur is only set while it is, so the
 * common path tests one pointer and one tid). */
static inline pf_thread *thread_for(oc_out *o, long tid, uint64_t ts) {
    pf_thread *t = pf_st.cur;
    if (LIKELY(t != NULL && t->tid == tid))
        return t;
    return thread_slow(o, tid, ts);
}

/* The thread ended: its entry goes (the last one takes its place), so that pf_st.th holds the threads alive at
 * once; its descriptor is named at the footer on the renderer's own sequence.  A thread of the same tid
 * later on gets a new sequence on the same track. */
static void pf_thread_end(oc_out *o, long tid) {
    (void)o;
    for (uint32_t i = 0; i < pf_st.nth; i++)
        if (pf_st.th[i].tid == tid) {
            if (pf_st.th[i].last_ns > pf_st.ended_ns)
                pf_st.ended_ns = pf_st.th[i].last_ns;
            free(pf_st.th[i].names);
            pf_st.th[i] = pf_st.th[--pf_st.nth];
            pf_st.cur = NULL;
            break;
        }
}

/* ---- interned data of one packet ---- */
typedef struct {
    int open;
} interning;

static void intern_begin(pbw *w, interning *in) {
    if (!in->open) {
        pb_open(w, TP_INTERNED_DATA);
        in->open = 1;
    }
}

static void intern_entry(pbw *w, interning *in, uint32_t field, uint32_t iid, const char *s) {
    intern_begin(w, in);
    pb_open(w, field);
    pb_uint(w, IN_IID, iid);
    pb_str(w, IN_NAME, s);
    pb_close(w);
}

static void intern_category(pbw *w, interning *in, pf_thread *t, uint32_t cat) {
    if (!(t->cats & (1u << cat))) {
        intern_entry(w, in, ID_EVENT_CATEGORIES, cat, cat_names[cat]);
        t->cats |= 1u << cat;
    }
}

static void intern_ann(pbw *w, interning *in, pf_thread *t, uint32_t an) {
    if (!(t->anns & (1u << an))) {
        intern_entry(w, in, ID_DEBUG_ANNOTATION_NAMES, an, ann_names[an]);
        t->anns |= 1u << an;
    }
}

static void intern_end(pbw *w, interning *in) {
    if (in->open)
        pb_close(w);
}

static void put_annotation_uint(pbw *w, uint32_t an, uint64_t v) {
    pb_open(w, TE_DEBUG_ANNOTATIONS);
    pb_uint(w, DA_NAME_IID, an);
    pb_uint(w, DA_UINT_VALUE, v);
    pb_close(w);
}

static void put_annotation_int(pbw *w, uint32_t an, int64_t v) {
    pb_open(w, TE_DEBUG_ANNOTATIONS);
    pb_uint(w, DA_NAME_IID, an);
    pb_int(w, DA_INT_VALUE, v);
    pb_close(w);
}

/* ---- the sink ---- */
static void pf_header(oc_out *o) {
    /* A forked child inherits the parent's tables in whatever state the parent had them: forget them
     * (never free: they may be mid-update).  A normal session ends with a clean state. */
    memset(&pf_st, 0, sizeof pf_st);
    pf_st.own_seq = (((uint32_t)rmeta.pid & 0x3FFFFFu) << SEQS_PER_PROCESS_BITS) | 1u;
    pf_st.next_seq = pf_st.own_seq + 1;
    const char *env = getenv("OCULAR_PERFETTO_DEFLATE");
    pf_st.deflate = !(env && strcmp(env, "0") == 0);
    pf_st.raw_cap = BATCH + 4096;
    pf_st.base = 1;
    pf_st.batch_limit = FIRST_BATCH;
    pf_st.unscanned = SIZE_MAX;
    oc_z_start(); /* (a forked child's copy of the parent's stream buffer, if any, is simply reused) */
    if (!(pf_st.raw = malloc(pf_st.raw_cap)) || (pf_st.deflate && oc_z_reserve(BATCH + BATCH_SLACK) < 0)) {
        fail(o);
        return;
    }
    pf_st.active = o->fd >= 0 && !o->err;
    /* MONOTONIC read on both sides of BOOTTIME: the midpoint is the best estimate of the pair */
    uint64_t m1 = clock_ns(CLOCK_MONOTONIC), boot = clock_ns(CLOCK_BOOTTIME), m2 = clock_ns(CLOCK_MONOTONIC);
    uint64_t mono = m1 + (m2 - m1) / 2;
    pf_st.mono0 = mono;
    pf_st.process_uuid = mix64(((uint64_t)rmeta.pid << 32) ^ mono) | 1;

    pbw *w = pkt_start();
    pb_uint(w, TP_SEQUENCE_ID, pf_st.own_seq);
    pb_uint(w, TP_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
    pb_uint(w, TP_FIRST_PACKET_ON_SEQUENCE, 1);
    pb_uint(w, TP_PREVIOUS_PACKET_DROPPED, 1);
    pb_open(w, TP_CLOCK_SNAPSHOT);
    put_clock(w, CLOCK_BOOTTIME_ID, boot, 0);
    put_clock(w, CLOCK_MONOTONIC_ID, mono, 0);
    pb_close(w);
    pkt_end(o);

    char *pname = json_unescape(rmeta.process_name ? rmeta.process_name : "python");
    w = pkt_start();
    pb_uint(w, TP_TIMESTAMP, mono);
    pb_uint(w, TP_TIMESTAMP_CLOCK_ID, CLOCK_MONOTONIC_ID);
    pb_uint(w, TP_SEQUENCE_ID, pf_st.own_seq);
    pb_open(w, TP_TRACK_DESCRIPTOR);
    pb_uint(w, TD_UUID, pf_st.process_uuid);
    pb_open(w, TD_PROCESS);
    pb_int(w, PD_PID, rmeta.pid);
    pb_str(w, PD_PROCESS_NAME, pname ? pname : "python");
    pb_close(w);
    pb_close(w);
    pkt_end(o);
    free(pname);
}

/* A begin that interns its name and source location on the sequence first (or goes back in time). */
static __attribute__((noinline)) void begin_slow(oc_out *o, pf_thread *t, uint64_t ts_ns, uint32_t code_id) {
    code_te *c = code_entry(code_id);
    if (!c) {
        fail(o);
        return;
    }
    oc_codeent *e = oc_rcode(code_id);
    pbw *w = pkt_start();
    seq_header(w, t);
    interning in = {0};
    intern_category(w, &in, t, CAT_PYTHON);
    if (!bit_test(t->names, t->names_cap, c->iid)) {
        if (bit_set(&t->names, &t->names_cap, c->iid) < 0)
            w->oom = 1;
        const char *qn = e->qualname_raw ? e->qualname_raw : "?";
        intern_entry(w, &in, ID_EVENT_NAMES, c->iid, qn);
        pb_open(w, ID_SOURCE_LOCATIONS);
        pb_uint(w, SL_IID, c->iid);
        pb_str(w, SL_FILE_NAME, e->filename_raw ? e->filename_raw : "?");
        pb_str(w, SL_FUNCTION_NAME, qn);
        pb_uint(w, SL_LINE_NUMBER, (uint32_t)e->firstlineno);
        pb_close(w);
    }
    intern_end(w, &in);
    pb_raw(w, c->te, c->len);
    put_ts(w, t, ts_ns);
    pkt_end(o);
}

/* A slice begin's tokens when it is not a copy of the last identical packet (or the matcher has
 * packets pending): a copy of the code's last begin on the thread and the timestamp as literals, or
 * piecewise (sequence header and TrackEvent copied from where they last were). */
static __attribute__((noinline)) void begin_tokens(oc_out *o, pf_thread *t, code_te *c, const uint8_t *p,
                                                   uint32_t pre, uint32_t tsl, uint64_t delta, rep_slot *r,
                                                   uint64_t cur) {
    if (UNLIKELY(pf_st.unscanned != SIZE_MAX) && scan_pending() < 0)
        fail(o);
    oc_ztokens z = oc_zt;
    const uint8_t *ts = p + pre;
    uint32_t th = t->num, te = 2u + t->hdr_len;
    uint64_t kind = (uint64_t)c->iid << 32 | th;
    if (r->kind == kind && r->delta == delta && near(r->at, cur)) {
        oc_z_match(&z, pre + tsl, (uint32_t)(cur - r->at));
    } else {
        if (near(c->at, cur) && c->th == th && c->tsl == tsl) {
            oc_z_match(&z, pre, (uint32_t)(cur - c->at));
        } else {
            lits(&z, p, 2);
            if (near(t->last_at, cur))
                oc_z_match(&z, t->hdr_len, (uint32_t)(cur - t->last_at));
            else
                lits(&z, p + 2, t->hdr_len);
            if (near(c->te_at, cur + te))
                oc_z_match(&z, pre - te, (uint32_t)(cur + te - c->te_at));
            else
                lits(&z, p + te, pre - te);
        }
        lits(&z, ts, tsl);
        r->kind = kind;
        r->delta = delta;
    }
    r->at = cur;
    oc_zt = z;
    c->at = cur;
    c->te_at = cur + te;
    c->th = th;
    c->tsl = (uint8_t)tsl;
    t->last_at = cur;
}

static void pf_begin(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id) {
    pf_thread *t = thread_for(o, tid, ts_ns);
    if (UNLIKELY(!t))
        return;
    code_te *c;
    /* c->th == t->num: the code's last begin was on this thread's sequence, so its names are interned
     * there (maintained with deflate only; else the bitmap says) */
    if (LIKELY(code_id < pf_st.code_cap &&
               ((c = &pf_st.codes[code_id])->th == t->num || (c->iid && bit_test(t->names, t->names_cap, c->iid))) &&
               ts_ns >= t->last_ns)) {
        uint8_t *p = pf_st.raw + pf_st.raw_n, *b = p + 2;
        memcpy(b, t->end, 8);
        b += t->hdr_len;
        memcpy(b, c->te, sizeof c->te);
        b += c->len;
        *b++ = TAG_VARINT(TP_TIMESTAMP);
        uint8_t *ts = b;
        uint64_t last = t->last_ns;
        b = put_varint(b, ts_ns - last);
        t->last_ns = ts_ns;
        p[0] = TAG_LEN(TRACE_PACKET);
        p[1] = (uint8_t)(b - p - 2);
        if (pf_st.deflate) { /* as LZ77 tokens: mostly a copy of the last identical packet (same code, thread
                          * and timestamp delta), found without a search; else begin_tokens */
            uint64_t cur = pf_st.base + pf_st.raw_n, delta = ts_ns - last;
            uint32_t tsl = (uint32_t)(b - ts), th = t->num;
            uint64_t kind = (uint64_t)c->iid << 32 | th;
            rep_slot *r = rep_slot_of(kind, delta);
            if (LIKELY(r->kind == kind && r->delta == delta && near(r->at, cur) && pf_st.unscanned == SIZE_MAX)) {
                oc_ztokens z = oc_zt;
                oc_z_match(&z, (uint32_t)(b - p), (uint32_t)(cur - r->at));
                oc_zt = z;
                r->at = cur;
                c->at = cur;
                c->te_at = cur + 2u + t->hdr_len;
                c->th = th;
                c->tsl = (uint8_t)tsl;
                t->last_at = cur;
            } else {
                begin_tokens(o, t, c, p, (uint32_t)(ts - p), tsl, delta, r, cur);
            }
        }
        pf_st.raw_n = (size_t)(b - pf_st.raw);
        batch_done(o);
        return;
    }
    begin_slow(o, t, ts_ns, code_id);
}

static __attribute__((noinline)) void end_slow(oc_out *o, pf_thread *t, uint64_t ts_ns) {
    pbw *w = pkt_start();
    pb_raw(w, t->end, (size_t)t->end_len - 1u);
    put_ts(w, t, ts_ns);
    pkt_end(o);
}

/* A slice end's tokens when it is not a copy of the last identical packet (or the matcher has
 * packets pending): a copy of the thread's last end and the timestamp as literals, or piecewise. */
static __attribute__((noinline)) void end_tokens(oc_out *o, pf_thread *t, const uint8_t *p, uint32_t tsl,
                                                 uint64_t delta, uint64_t cur) {
    if (UNLIKELY(pf_st.unscanned != SIZE_MAX) && scan_pending() < 0)
        fail(o);
    oc_ztokens z = oc_zt;
    uint32_t pre = 2u + t->end_len;
    const uint8_t *ts = p + pre;
    end_rep *r = &t->ends[delta & (END_REPS - 1)];
    if (r->delta == delta && near(r->at, cur)) {
        oc_z_match(&z, pre + tsl, (uint32_t)(cur - r->at));
    } else {
        if (near(t->end_at[tsl], cur)) {
            oc_z_match(&z, pre, (uint32_t)(cur - t->end_at[tsl]));
        } else if (near(t->end_at[0], cur)) { /* any end: the same but for the length byte */
            lits(&z, p, 2);
            oc_z_match(&z, pre - 2, (uint32_t)(cur - t->end_at[0]));
        } else if (near(t->last_at, cur)) { /* any packet of the thread: the same sequence header */
            lits(&z, p, 2);
            oc_z_match(&z, t->hdr_len, (uint32_t)(cur - t->last_at));
            lits(&z, p + 2 + t->hdr_len, pre - 2u - t->hdr_len);
        } else {
            lits(&z, p, pre);
        }
        lits(&z, ts, tsl);
        r->delta = delta;
    }
    r->at = cur;
    oc_zt = z;
    t->end_at[tsl] = t->end_at[0] = t->last_at = cur;
}

static void pf_end(oc_out *o, long tid, uint64_t ts_ns) {
    pf_thread *t = thread_for(o, tid, ts_ns);
    if (UNLIKELY(!t))
        return;
    if (UNLIKELY(ts_ns < t->last_ns)) {
        end_slow(o, t, ts_ns);
        return;
    }
    uint8_t *p = pf_st.raw + pf_st.raw_n, *b = p + 2;
    memcpy(b, t->end, sizeof t->end);
    b += t->end_len;
    uint8_t *ts = b;
    uint64_t delta = ts_ns - t->last_ns;
    b = put_varint(b, delta);
    t->last_ns = ts_ns;
    uint32_t n = (uint32_t)(b - p), tsl = (uint32_t)(b - ts);
    p[0] = TAG_LEN(TRACE_PACKET);
    p[1] = (uint8_t)(n - 2);
    if (pf_st.deflate) { /* as LZ77 tokens: nearly always a copy of the last identical packet (same thread
                      * and timestamp delta), found without a search; else end_tokens */
        uint64_t cur = pf_st.base + pf_st.raw_n;
        end_rep *r = &t->ends[delta & (END_REPS - 1)];
        if (LIKELY(r->delta == delta && near(r->at, cur) && pf_st.unscanned == SIZE_MAX)) {
            oc_ztokens z = oc_zt;
            oc_z_match(&z, n, (uint32_t)(cur - r->at));
            oc_zt = z;
            r->at = cur;
            t->end_at[tsl] = t->end_at[0] = t->last_at = cur;
        } else {
            end_tokens(o, t, p, tsl, delta, cur);
        }
    }
    pf_st.raw_n += n;
    batch_done(o);
}

/* one DebugAnnotation {name_iid, value (field: 3 uint, 4 int)} of a loop instant, hand-written: a
 * header of ANN_HDR bytes (tag, length, name iid, value tag), then the value's varint */
#define ANN_HDR 5
static inline uint8_t *put_ann(uint8_t *b, uint32_t an, uint32_t field, uint64_t v) {
    uint8_t *len = b + 1;
    b[0] = TAG_LEN(TE_DEBUG_ANNOTATIONS);
    b[2] = TAG_VARINT(DA_NAME_IID);
    b[3] = (uint8_t)an;
    b[4] = (uint8_t)(field << 3);
    b = put_varint(b + ANN_HDR, v);
    *len = (uint8_t)(b - len - 1);
    return b;
}

#define LOOP_ANNS (((1u << AN_COUNT) - 1) & ~1u)

static __attribute__((noinline)) void loop_slow(oc_out *o, pf_thread *t, uint64_t ts_ns, uint32_t code_id, int line,
                                                uint32_t offset, uint32_t insns, uint64_t cycles, uint64_t ns,
                                                uint32_t name) {
    pbw *w = pkt_start();
    seq_header(w, t);
    interning in = {0};
    intern_category(w, &in, t, CAT_LOOP);
    for (uint32_t an = 1; an < AN_COUNT; an++)
        intern_ann(w, &in, t, an);
    if (!bit_test(t->names, t->names_cap, name)) {
        oc_codeent *e = oc_rcode(code_id);
        const char *qn = e->qualname_raw ? e->qualname_raw : "?";
        size_t n = strlen(qn) + 32;
        char *s = malloc(n);
        if (!s || bit_set(&t->names, &t->names_cap, name) < 0)
            w->oom = 1;
        else
            intern_entry(w, &in, ID_EVENT_NAMES, name, (snprintf(s, n, "loop %s:%d", qn, line), s));
        free(s);
    }
    intern_end(w, &in);
    pb_open(w, TP_TRACK_EVENT);
    pb_uint(w, TE_TYPE, TYPE_INSTANT);
    pb_uint(w, TE_CATEGORY_IIDS, CAT_LOOP);
    pb_uint(w, TE_NAME_IID, name);
    put_annotation_int(w, AN_LINE, line);
    put_annotation_uint(w, AN_OFFSET, offset);
    put_annotation_uint(w, AN_INSTRUCTIONS, insns);
    put_annotation_uint(w, AN_CYCLES, cycles);
    put_annotation_uint(w, AN_NS, ns);
    pb_close(w);
    put_ts(w, t, ts_ns);
    pkt_end(o);
}

/* A loop instant: {type, category, name_iid, debug annotations line, offset (the same every iteration,
 * first), instructions, cycles, ns}.  Hand-written into the batch when everything it names is
 * interned on the sequence.  Its tokens: a copy of the loop's last instant on the thread but for the
 * cycles, ns and timestamp values where that one has the same layout (loop_rep), else the matcher's,
 * with the other such packets. */
static void pf_loop(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id, int line, uint32_t offset,
                    uint32_t insns, uint64_t cycles, uint64_t ns) {
    if (UNLIKELY(!ready(o)))
        return;
    pf_thread *t = thread_for(o, tid, ts_ns);
    if (!t) {
        fail(o);
        return;
    }
    uint64_t key = (((uint64_t)code_id << 32) | (uint32_t)line) + 1;
    loop_rep *lr = &pf_st.lreps[((key ^ (uint64_t)t->num << 40) * 0x9E3779B97F4A7C15ull) >> (64 - LREP_BITS)];
    uint32_t name = lr->iid;
    if (UNLIKELY(lr->key != key || lr->th != t->num)) {
        name = loop_iid(code_id, line);
        if (!name) {
            fail(o);
            return;
        }
        *lr = (loop_rep){.key = key, .th = t->num, .iid = name};
    }
    if (LIKELY((t->cats & (1u << CAT_LOOP)) && (t->anns & LOOP_ANNS) == LOOP_ANNS &&
               bit_test(t->names, t->names_cap, name) && ts_ns >= t->last_ns)) {
        uint8_t *p = pf_st.raw + pf_st.raw_n, *b = p + 2;
        memcpy(b, t->end, 8);
        b += t->hdr_len;
        uint8_t *te = b;
        b[0] = TAG_LEN(TP_TRACK_EVENT);
        b[2] = TAG_VARINT(TE_TYPE);
        b[3] = TYPE_INSTANT;
        b[4] = TAG_VARINT(TE_CATEGORY_IIDS);
        b[5] = CAT_LOOP;
        b[6] = TAG_VARINT(TE_NAME_IID);
        b = put_varint(b + 7, name);
        b = put_ann(b, AN_LINE, DA_INT_VALUE, (uint64_t)(int64_t)line);
        b = put_ann(b, AN_OFFSET, DA_UINT_VALUE, offset);
        b = put_ann(b, AN_INSTRUCTIONS, DA_UINT_VALUE, insns);
        uint32_t cyc = (uint32_t)(b - p);
        b = put_ann(b, AN_CYCLES, DA_UINT_VALUE, cycles);
        uint32_t nsa = (uint32_t)(b - p);
        b = put_ann(b, AN_NS, DA_UINT_VALUE, ns);
        size_t tl = (size_t)(b - te) - 2;
        uint32_t tsa = (uint32_t)(b - p);
        *b++ = TAG_VARINT(TP_TIMESTAMP);
        b = put_varint(b, ts_ns - t->last_ns);
        uint32_t n = (uint32_t)(b - p);
        if (LIKELY(tl < 128 && n - 2 < 128)) { /* one-byte lengths (else: the writer) */
            te[1] = (uint8_t)tl;
            p[0] = TAG_LEN(TRACE_PACKET);
            p[1] = (uint8_t)(n - 2);
            t->last_ns = ts_ns;
            uint64_t cur = pf_st.base + pf_st.raw_n;
            /* As tokens: the loop's last instant again but for the cycles, ns and timestamp values, where
             * it has the same layout (the same offsets, hence the same lengths in the headers before
             * them) and is not the packet right before (a run of one loop's instants: the matcher codes
             * it best, as long copies reaching over several instants). */
            uint32_t layout = n | cyc << 8 | nsa << 16 | tsa << 24, val = cyc + ANN_HDR;
            if (lr->layout == layout && lr->at + n != cur && pf_st.deflate && near(lr->at, cur) &&
                memcmp(p, pf_st.raw + (lr->at - pf_st.base), val) == 0) {
                if (UNLIKELY(pf_st.unscanned != SIZE_MAX) && scan_pending() < 0)
                    fail(o);
                oc_ztokens z = oc_zt;
                uint32_t dist = (uint32_t)(cur - lr->at);
                oc_z_match(&z, val, dist);
                loop_val *v = loop_val_of(cycles, ns);
                if (v->cycles == cycles && v->ns == ns && near(v->at, cur + val)) { /* these values, written before */
                    oc_z_match(&z, tsa - val, (uint32_t)(cur + val - v->at));
                } else {
                    lits(&z, p + val, nsa - val);
                    oc_z_match(&z, ANN_HDR, dist);
                    lits(&z, p + nsa + ANN_HDR, tsa - nsa - ANN_HDR);
                }
                lits(&z, p + tsa, n - tsa);
                oc_zt = z;
                *v = (loop_val){cycles, ns, cur + val};
            } else if (pf_st.unscanned == SIZE_MAX) {
                pf_st.unscanned = pf_st.raw_n; /* deflate.c's matcher finds its tokens */
            }
            lr->at = cur;
            lr->layout = layout;
            pf_st.raw_n += n;
            batch_done(o);
            return;
        }
    }
    loop_slow(o, t, ts_ns, code_id, line, offset, insns, cycles, ns, name);
}

static void free_state(void) {
    for (uint32_t i = 0; i < pf_st.nth; i++)
        free(pf_st.th[i].names);
    free(pf_st.th);
    free(pf_st.codes);
    free(pf_st.loops);
    free(pf_st.w.b);
    free(pf_st.raw);
    free(pf_st.z);
    oc_z_free();
    memset(&pf_st, 0, sizeof pf_st);
}

/* The thread names are final: re-emit each thread's descriptor, named (and the process's, saying what was
 * repaired, for a damaged recording). */
static void pf_footer(oc_out *o, const char *clock, int precise) {
    (void)clock, (void)precise;
    if (pf_st.active && !o->err) {
        uint64_t max_ns = pf_st.mono0 > pf_st.ended_ns ? pf_st.mono0 : pf_st.ended_ns; /* the latest timestamp written */
        for (uint32_t k = 0; k < pf_st.nth; k++)
            if (pf_st.th[k].last_ns > max_ns)
                max_ns = pf_st.th[k].last_ns;
        for (uint32_t i = 0; i < rmeta.nthreads; i++) {
            oc_thread *th = &rmeta.threads[i];
            long tid = oc_render_thread_tid(i);
            char *unescaped = NULL;
            const char *name = th->name_raw;
            if (!name && th->name)
                name = unescaped = json_unescape(th->name);
            pf_thread *t = NULL;
            for (uint32_t k = 0; k < pf_st.nth; k++)
                if (pf_st.th[k].tid == tid)
                    t = &pf_st.th[k];
            pbw *w = pkt_start();
            if (t) { /* on its own sequence, at its last event */
                seq_header(w, t);
                put_thread_descriptor(w, t, name ? name : "thread");
                put_ts(w, t, t->last_ns);
            } else { /* a thread without events: on the renderer's own sequence */
                pf_thread tmp = {.tid = tid, .uuid = thread_uuid(tid)};
                pb_uint(w, TP_TIMESTAMP, max_ns);
                pb_uint(w, TP_TIMESTAMP_CLOCK_ID, CLOCK_MONOTONIC_ID);
                pb_uint(w, TP_SEQUENCE_ID, pf_st.own_seq);
                put_thread_descriptor(w, &tmp, name ? name : "thread");
            }
            pkt_end(o);
            free(unescaped);
        }
        char damage[512]; /* a damaged recording: the process track says what was repaired (render.c) */
        if (oc_render_damage(damage, sizeof damage)) {
            char *pname = json_unescape(rmeta.process_name ? rmeta.process_name : "python");
            size_t n = strlen(pname ? pname : "python") + strlen(damage) + 8;
            char *named = malloc(n);
            if (named) {
                snprintf(named, n, "%s [%s]", pname ? pname : "python", damage);
                pbw *w = pkt_start();
                pb_uint(w, TP_TIMESTAMP, max_ns);
                pb_uint(w, TP_TIMESTAMP_CLOCK_ID, CLOCK_MONOTONIC_ID);
                pb_uint(w, TP_SEQUENCE_ID, pf_st.own_seq);
                pb_open(w, TP_TRACK_DESCRIPTOR);
                pb_uint(w, TD_UUID, pf_st.process_uuid);
                pb_open(w, TD_PROCESS);
                pb_int(w, PD_PID, rmeta.pid);
                pb_str(w, PD_PROCESS_NAME, named);
                pb_close(w);
                pb_close(w);
                pkt_end(o);
            }
            free(named);
            free(pname);
        }
        flush_batch(o);
    }
    free_state();
}

/* An instant `name` (category asyncio) in the slice open on the track; with a flow id, one of the flow's ends
 * (flow_ids: the flow begins there; or terminating_flow_ids: it ends there) -- an asyncio task's scheduling,
 * and the step it scheduled */
static void asyncio_instant(oc_out *o, long tid, uint64_t ts_ns, const char *name, uint64_t id, int end) {
    pf_thread *t = thread_for(o, tid, ts_ns);
    if (!t)
        return;
    pbw *w = pkt_start();
    seq_header(w, t);
    interning in = {0};
    intern_category(w, &in, t, CAT_ASYNCIO);
    intern_end(w, &in);
    pb_open(w, TP_TRACK_EVENT);
    pb_uint(w, TE_TYPE, TYPE_INSTANT);
    pb_uint(w, TE_CATEGORY_IIDS, CAT_ASYNCIO);
    pb_str(w, TE_NAME, name);
    if (!id) {
        pb_close(w);
        put_ts(w, t, ts_ns);
        pkt_end(o);
        return;
    }
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(id >> (8 * i));
    pb_varint(w, (uint64_t)(end ? TE_TERMINATING_FLOW_IDS : TE_FLOW_IDS) << 3 | 1); /* (wire type 1: fixed64) */
    pb_raw(w, b, 8);
    pb_close(w);
    put_ts(w, t, ts_ns);
    pkt_end(o);
}

static void pf_flow(oc_out *o, long tid, uint64_t ts_ns, uint64_t id, int end) {
    asyncio_instant(o, tid, ts_ns, "wake", id, end);
}

/* an instant named by a code (an asyncio loop stall) */
static void pf_instant(oc_out *o, long tid, uint64_t ts_ns, uint32_t code_id) {
    oc_codeent *e = oc_rcode(code_id);
    asyncio_instant(o, tid, ts_ns, e->qualname_raw ? e->qualname_raw : "?", 0, 0);
}

const oc_sink oc_sink_perfetto = {
    .name = "perfetto",
    .header = pf_header,
    .begin = pf_begin,
    .end = pf_end,
    .loop = pf_loop,
    .footer = pf_footer,
    .begin_cut = NULL,
    .loop_run = NULL,
    .thread_end = pf_thread_end,
    .flow = pf_flow,
    .instant = pf_instant,
};
