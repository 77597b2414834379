/* reader.c -- the recording's reader: indexes a recording's blocks (header, code table, thread names,
 * calibration, options, each thread's chunks in order and every chunk in the recording's order) into the
 * render state, checks the clock, and reports damage; the driver (render.c) renders what it indexed. */
#include "render_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- reading the recording ---- */

static inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* A CALIB block (docs/recording.md): 24 bytes (one rate) or 40 (a final rate, 0 until known, the early
 * rate and the knee).  Returns 1 once the final rate is known. */
static int read_calib(const uint8_t *p, uint32_t len) {
    rmeta.tsc0 = rd64(p);
    rmeta.mono0_ns = rd64(p + 8);
    double npt;
    memcpy(&npt, p + 16, 8);
    if (len < 40) {
        rmeta.ns_per_tick = rmeta.early_npt = npt;
        rmeta.knee_tsc = rmeta.knee_ns = UINT64_MAX;
        return 1;
    }
    memcpy(&rmeta.early_npt, p + 24, 8);
    rmeta.knee_tsc = rd64(p + 32);
    rmeta.knee_ns = UINT64_MAX; /* (check_clock: the knee at the early rate, once the rates are known good) */
    rmeta.ns_per_tick = npt > 0 ? npt : rmeta.early_npt;
    return npt > 0;
}

/* ---- a damaged recording ----
 * Every time written must be finite and every thread's times must rise: the clock's mapping is checked
 * once its blocks are read (check_clock), and a record whose time goes back or leaps is clamped as it
 * is rendered (clamp_rec), so a child slice never begins before its parent nor ends after it. */
#define NS_MAX ((uint64_t)1 << 62) /* ~146 years: every time written is below it */

static int rate_ok(double r) { return r >= 1e-6 && r <= 1e6; } /* (false for NaN) */

/* ticks from `from` while at `rate` the time stays at most NS_MAX (from `base` ns), at most 2^62 ticks */
static uint64_t ticks_until_max(uint64_t from, uint64_t base, double rate) {
    double d = base >= NS_MAX ? 0 : (double)(NS_MAX - base) / rate;
    uint64_t span = d >= (double)NS_MAX ? NS_MAX : (uint64_t)d;
    return from > UINT64_MAX - 1 - span ? UINT64_MAX - 1 : from + span;
}

/* The clock's mapping (header and CALIB blocks) made safe: rates finite and plausible, the start and
 * the knee where they map into [0, NS_MAX]; rstate.ts_lo and rstate.ts_hi bound the ticks it maps there, monotonically.
 * What had to be replaced is noted as damage. */
void check_clock(void) {
    if (!rate_ok(rmeta.early_npt) || !rate_ok(rmeta.ns_per_tick)) {
        double bad = !rate_ok(rmeta.early_npt) ? rmeta.early_npt : rmeta.ns_per_tick;
        double good = rate_ok(rmeta.ns_per_tick) ? rmeta.ns_per_tick : rate_ok(rmeta.early_npt) ? rmeta.early_npt : 1.0;
        if (!rate_ok(rmeta.early_npt))
            rmeta.early_npt = good;
        if (!rate_ok(rmeta.ns_per_tick))
            rmeta.ns_per_tick = good;
        if (!(rmeta.damage & OC_DAMAGE_RATE)) {
            rmeta.bad_rate = bad;
            rmeta.used_rate = good;
        }
        rmeta.damage |= OC_DAMAGE_RATE;
    }
    if (rmeta.mono0_ns > NS_MAX) {
        rmeta.mono0_ns = 0;
        rmeta.damage |= OC_DAMAGE_START;
    }
    if (rmeta.knee_tsc != UINT64_MAX) {
        if (rmeta.knee_tsc < rmeta.tsc0 || rmeta.knee_tsc - rmeta.tsc0 > NS_MAX ||
            (double)rmeta.mono0_ns + (double)(rmeta.knee_tsc - rmeta.tsc0) * rmeta.early_npt > (double)NS_MAX) {
            rmeta.knee_tsc = rmeta.knee_ns = UINT64_MAX; /* the early rate throughout */
            rmeta.damage |= OC_DAMAGE_START;
        } else {
            rmeta.knee_ns = rmeta.mono0_ns + (uint64_t)(int64_t)((double)(int64_t)(rmeta.knee_tsc - rmeta.tsc0) * rmeta.early_npt);
        }
    } else {
        rmeta.knee_ns = UINT64_MAX;
    }
    double back = (double)rmeta.mono0_ns / rmeta.early_npt; /* ticks before tsc0 down to time 0 */
    uint64_t before = back >= (double)NS_MAX ? NS_MAX : (uint64_t)back;
    rstate.ts_lo = rmeta.tsc0 > before ? rmeta.tsc0 - before : 0;
    rstate.ts_hi = rmeta.knee_tsc != UINT64_MAX ? ticks_until_max(rmeta.knee_tsc, rmeta.knee_ns, rmeta.ns_per_tick)
                                       : ticks_until_max(rmeta.tsc0, rmeta.mono0_ns, rmeta.early_npt);
    if (rstate.ts_hi < rstate.ts_lo)
        rstate.ts_hi = rstate.ts_lo;
}

int oc_render_damage(char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    if (!rmeta.clamped && !rmeta.damage)
        return 0;
#define ADD(...) (k < n ? (void)(k += (size_t)snprintf(buf + k, n - k, __VA_ARGS__)) : (void)0)
    ADD("the recording is damaged:");
    const char *sep = " ";
    if (rmeta.clamped) {
        ADD("%s%llu record%s clamped (time out of order in its thread)", sep, (unsigned long long)rmeta.clamped,
            rmeta.clamped == 1 ? "" : "s");
        sep = "; ";
    }
    if (rmeta.damage & OC_DAMAGE_RATE) {
        ADD("%sthe clock rate %g ns per tick is impossible: %g used", sep, rmeta.bad_rate, rmeta.used_rate);
        sep = "; ";
    }
    if (rmeta.damage & OC_DAMAGE_START) {
        ADD("%sthe clock calibration's start or knee is out of range: replaced", sep);
        sep = "; ";
    }
    if (rmeta.damage & OC_DAMAGE_CODES)
        ADD("%s%u code block%s with an id far out of sequence skipped (their calls render as <unknown code>)",
            sep, rmeta.bad_codes, rmeta.bad_codes == 1 ? "" : "s");
#undef ADD
    return buf[0] != 0;
}

/* Length of the valid UTF-8 sequence at p[0..n) (n > 0), or 0 if it is not one. */
static unsigned utf8_seq(const uint8_t *p, uint32_t n) {
    uint8_t c = p[0];
    if (c < 0x80)
        return 1;
    unsigned len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || len > n)
        return 0;
    uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (unsigned k = 2; k < len; k++)
        if ((p[k] & 0xC0) != 0x80)
            return 0;
    return len;
}

/* The code table's names, bytecode and line tables (rmeta.codes): allocated from blocks of NA_BLOCK bytes, freed
 * together (free_meta).  A malloc per string took 24-32 bytes for the usual short name, four strings and
 * two arrays per code, with a name's JSON-escaped form a copy of it as a rule: 300,000 codes held ~150 MB
 * at stop.  Now a name's escaped form is the name itself when escaping changes nothing, and a file name
 * the same as the last code's is shared. */
#define NA_BLOCK ((size_t)1 << 20)
static struct {
    char *blk;        /* the current block; its first 8 bytes link the previous one */
    size_t used, cap;
    const char *last_fn, *last_fn_esc; /* the last code's file name (raw, escaped) */
    size_t last_fn_len;
} name_arena;

static void *na_alloc(size_t n) {
    n = (n + 7) & ~(size_t)7;
    if (!name_arena.blk || name_arena.used + n > name_arena.cap) {
        size_t cap = n + 8 > NA_BLOCK ? n + 8 : NA_BLOCK;
        char *b = malloc(cap);
        if (!b)
            return NULL;
        memcpy(b, &name_arena.blk, sizeof name_arena.blk);
        name_arena.blk = b;
        name_arena.used = 8;
        name_arena.cap = cap;
    }
    void *r = name_arena.blk + name_arena.used;
    name_arena.used += n;
    return r;
}

char *na_strdup(const char *s, size_t n) {
    char *r = na_alloc(n + 1);
    if (r) {
        memcpy(r, s, n);
        r[n] = 0;
    }
    return r;
}

/* In a fork child: the arena's blocks may be in use by the parent's live render's state; forget them. */
void na_abandon(void) { memset(&name_arena, 0, sizeof name_arena); }

static void na_free(void) {
    while (name_arena.blk) {
        char *prev;
        memcpy(&prev, name_arena.blk, sizeof prev);
        free(name_arena.blk);
        name_arena.blk = prev;
    }
    memset(&name_arena, 0, sizeof name_arena);
}

/* A name of the code table: raw (valid UTF-8) and JSON-escaped, in the arena (the escaped one is the raw
 * one when nothing needed escaping); 0, or -1 (no memory). */
static char *utf8_name(const uint8_t *p, uint32_t n, uint32_t *outn);
static int na_name(const uint8_t *p, uint32_t n, const char **raw, const char **esc) {
    uint32_t rn = 0;
    char *r = utf8_name(p, n, &rn);
    char *e = r ? oc_json_escape(r, rn) : NULL;
    int rc = -1;
    if (e) {
        *raw = na_strdup(r, rn);
        *esc = strcmp(e, r) == 0 ? *raw : na_strdup(e, strlen(e));
        rc = *raw && *esc ? 0 : -1;
    }
    free(r);
    free(e);
    return rc;
}

/* A name as the recording holds it, made valid UTF-8 (a damaged recording's bytes: each invalid byte
 * becomes U+FFFD, so every output stays valid JSON and protobuf strings); NUL-terminated, its length in
 * *outn.  A healthy recording's names are valid already (recorded with backslashreplace). */
static char *utf8_name(const uint8_t *p, uint32_t n, uint32_t *outn) {
    char *out = malloc((size_t)n * 3 + 1), *o = out;
    if (!out)
        return NULL;
    for (uint32_t i = 0; i < n;) {
        unsigned k = utf8_seq(p + i, n - i);
        if (k) {
            memcpy(o, p + i, k);
            o += k;
            i += k;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    *o = 0;
    *outn = (uint32_t)(o - out);
    return out;
}

/* Names shown in viewers carry no control characters (a `python -c` command line holds newlines). */
static char *clean_name(const uint8_t *p, uint32_t n, uint32_t *outn) {
    char *s = utf8_name(p, n, outn);
    if (s)
        for (uint32_t i = 0; i < *outn; i++)
            if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
                s[i] = ' ';
    return s;
}

void free_meta(void) {
    free(rmeta.codes); /* (their names, bytecode and lines are in the arena) */
    na_free();
    for (uint32_t i = 0; i < rmeta.nthreads; i++) {
        if (rmeta.threads[i].name != rmeta.threads[i].name_raw) /* (the same string when nothing needed escaping) */
            free(rmeta.threads[i].name);
        free(rmeta.threads[i].name_raw);
    }
    free(rmeta.threads);
    rmeta.threads = NULL;
    free(rmeta.process_name);
    free(rmeta.process_name_raw);
    free(rmeta.adaptive);
    rmeta.adaptive = NULL;
    rmeta.adaptive_len = 0;
    memset(&rmeta, 0, sizeof rmeta);
}

/* A thread's render state, and its indexed chunks, are gone (its end was rendered; or the render's). */
void free_thread(uint32_t i) {
    rthread *t = rstate.threads[i];
    if (t) {
        if (rstate.cur == i + 1)
            rstate.cur = 0; /* (its frames are popped: none links same_top) */
        free(t->stack);
        free(t->wk);
        free(t);
        rstate.threads[i] = NULL;
    }
    free(rstate.ix[i].spans);
    rstate.ix[i].spans = NULL;
    rstate.ix[i].nspans = rstate.ix[i].capspans = 0;
}

void free_render_state(void) {
    free(rstate.tt);
    free(rstate.tt_hash);
    rstate.tt = NULL;
    rstate.tt_hash = NULL;
    rstate.ntt = rstate.captt = rstate.tt_cap = 0;
    for (uint32_t i = 0; i < rstate.nthreads; i++) {
        if (rstate.threads[i]) {
            free(rstate.threads[i]->stack);
            free(rstate.threads[i]->wk);
            free(rstate.threads[i]);
        }
        free(rstate.ix[i].spans);
    }
    free(rstate.threads);
    free(rstate.ix);
    rstate.ix = NULL;
    free(rstate.order);
    rstate.order = NULL;
    rstate.norder = rstate.caporder = 0;
    for (uint32_t i = 0; i < rstate.ncodes_alloc; i++)
        free(rstate.insn_prefix[i]);
    free(rstate.insn_prefix);
    free(rstate.same_top);
    free(rstate.th_keys);
    free(rstate.th_slots);
    rstate.th_keys = rstate.th_slots = NULL;
    rstate.th_cap = 0;
    rstate.threads = NULL;
    rstate.nthreads = 0;
    rstate.insn_prefix = NULL;
    rstate.same_top = NULL;
    rstate.ncodes_alloc = 0;
}

/* A new slot for thread index idx (not in the table), or -1 (no memory).  rmeta.nthreads: the slots in use;
 * rstate.nthreads: the capacity of rstate.threads, rstate.ix and rmeta.threads. */
static int64_t add_slot(uint32_t idx) {
    uint32_t slot = rmeta.nthreads;
    if (slot >= rstate.nthreads) {
        uint32_t n = rstate.nthreads ? rstate.nthreads * 2 : 16;
        rthread **t = realloc(rstate.threads, n * sizeof *t);
        if (!t)
            return -1;
        memset(t + rstate.nthreads, 0, (n - rstate.nthreads) * sizeof *t);
        rstate.threads = t;
        tindex *x = realloc(rstate.ix, n * sizeof *x);
        if (!x)
            return -1;
        memset(x + rstate.nthreads, 0, (n - rstate.nthreads) * sizeof *x);
        rstate.ix = x;
        oc_thread *th = realloc(rmeta.threads, n * sizeof *th);
        if (!th)
            return -1;
        memset(th + rstate.nthreads, 0, (n - rstate.nthreads) * sizeof *th);
        rmeta.threads = th;
        rstate.nthreads = n;
    }
    rstate.ix[slot].idx = idx;
    rmeta.nthreads = slot + 1;
    return slot;
}

/* The slot of thread index `idx` in rstate.threads and rmeta.threads, a new one for an index not seen before, or -1
 * (no memory).  Slots are given in the order threads first appear: a thread's state exists only for
 * threads in the recording, whatever their index (a damaged one may be any 32-bit number). */
static int64_t thread_slot(uint32_t idx) {
    uint32_t mask = rstate.th_cap - 1, h = (idx * 2654435761u) & mask;
    if (rstate.th_cap)
        for (; rstate.th_slots[h]; h = (h + 1) & mask)
            if (rstate.th_keys[h] == idx)
                return rstate.th_slots[h] - 1;
    if (rmeta.nthreads >= UINT32_MAX - 1)
        return -1;
    if ((uint64_t)(rmeta.nthreads + 1) * 2 > rstate.th_cap) { /* (at most half full) */
        uint32_t cap = rstate.th_cap ? rstate.th_cap * 2 : 64;
        uint32_t *k = calloc(cap, sizeof *k), *v = calloc(cap, sizeof *v);
        if (!k || !v) {
            free(k);
            free(v);
            return -1;
        }
        for (uint32_t i = 0; i < rstate.th_cap; i++)
            if (rstate.th_slots[i]) {
                uint32_t j = (rstate.th_keys[i] * 2654435761u) & (cap - 1);
                while (v[j])
                    j = (j + 1) & (cap - 1);
                k[j] = rstate.th_keys[i];
                v[j] = rstate.th_slots[i];
            }
        free(rstate.th_keys);
        free(rstate.th_slots);
        rstate.th_keys = k;
        rstate.th_slots = v;
        rstate.th_cap = cap;
        mask = cap - 1;
        for (h = (idx * 2654435761u) & mask; rstate.th_slots[h];)
            h = (h + 1) & mask;
    }
    int64_t slot = add_slot(idx);
    if (slot < 0)
        return -1;
    rstate.th_keys[h] = idx;
    rstate.th_slots[h] = (uint32_t)slot + 1;
    return slot;
}

/* A chunk of thread index `idx` after the end of the thread that had it, slot `old` (a damaged
 * recording): a new slot for the index from now on, with that thread's ids. */
static int64_t thread_reslot(uint32_t idx, uint32_t old) {
    if (rmeta.nthreads >= UINT32_MAX - 1)
        return -1;
    int64_t slot = add_slot(idx);
    if (slot < 0)
        return -1;
    uint32_t mask = rstate.th_cap - 1, h = (idx * 2654435761u) & mask;
    while (rstate.th_keys[h] != idx || !rstate.th_slots[h])
        h = (h + 1) & mask;
    rstate.th_slots[h] = (uint32_t)slot + 1;
    rmeta.threads[slot].tid = rmeta.threads[old].tid;
    rmeta.threads[slot].ident = rmeta.threads[old].ident;
    return slot;
}

/* asyncio's Handle._run (asyncio/events.py), which runs each loop callback: qualname q (ql bytes), file name f */
static int is_handle_run(const char *q, uint32_t ql, const char *f) {
    static const char name[] = "Handle._run", tail[] = "asyncio/events.py";
    size_t n = f ? strlen(f) : 0;
    return ql == sizeof name - 1 && memcmp(q, name, ql) == 0 && n >= sizeof tail - 1 &&
           memcmp(f + n - (sizeof tail - 1), tail, sizeof tail - 1) == 0;
}

/* a chunk, or a thread's end, appended to the recording's order (rstate.order); -1 without memory */
static int order_push(span_ref r) {
    if (rstate.norder == rstate.caporder) {
        uint32_t cap = rstate.caporder ? rstate.caporder * 2 : 256;
        span_ref *o = realloc(rstate.order, cap * sizeof *o);
        if (!o)
            return -1;
        rstate.order = o;
        rstate.caporder = cap;
    }
    rstate.order[rstate.norder++] = r;
    return 0;
}

int grow_codes(uint32_t id) {
    if (id < rmeta.ncodes)
        return 0;
    if (id > 64u * 1024 * 1024)
        return -1;
    uint32_t n = id + 1024;
    oc_codeent *c = realloc(rmeta.codes, n * sizeof *c);
    if (!c)
        return -1;
    memset(c + rmeta.ncodes, 0, (n - rmeta.ncodes) * sizeof *c);
    rmeta.codes = c;
    rmeta.ncodes = n;
    return 0;
}

#define BAD(msg)                                                                                        \
    do {                                                                                                \
        snprintf(res->error, sizeof res->error, "%s at byte %zu", (msg), off);                         \
        return -1;                                                                                      \
    } while (0)

/* Index the complete blocks in [*offp, size); *offp moves past them (a block cut short waits for more). */
int index_recording(const uint8_t *base, size_t size, size_t *offp, oc_render_result *res) {
    size_t off = *offp;
    while (off + OC_BLK_HDR <= size) {
        uint32_t type = rd32(base + off), len = rd32(base + off + 4);
        if ((uint64_t)len > size - off - OC_BLK_HDR)
            break; /* cut short: every complete block before it counts */
        const uint8_t *p = base + off + OC_BLK_HDR;
        if (!rstate.have_header && type != OC_BLK_HEADER)
            BAD("not an Ocular recording (no header block)");
        switch (type) {
        case OC_BLK_HEADER: {
            if (len < 8 || memcmp(p, OC_REC_MAGIC, 8) != 0)
                BAD("not an Ocular recording (bad magic)");
            if (len < OC_HEADER_FIXED)
                BAD("damaged recording (its header block is too short)");
            if (rd32(p + 8) != OC_REC_VERSION) {
                snprintf(res->error, sizeof res->error,
                         "recording format version %u is not supported (this Ocular reads version %u)",
                         rd32(p + 8), OC_REC_VERSION);
                return -1;
            }
            uint32_t flags = rd32(p + 12);
            rmeta.precise = (flags & OC_REC_F_PRECISE) != 0;
            rmeta.ring = (flags & OC_REC_F_RING) != 0;
            rmeta.near_zero = (flags & OC_REC_F_NEAR_ZERO) != 0;
            rmeta.threshold = rd32(p + 16);
            rmeta.pid = (long)rd32(p + 20);
            rmeta.tsc0 = rd64(p + 24);
            rmeta.mono0_ns = rd64(p + 32);
            memcpy(&rmeta.ns_per_tick, p + 40, 8); /* (a CALIB block follows with the mapping) */
            rmeta.early_npt = rmeta.ns_per_tick;
            rmeta.knee_tsc = rmeta.knee_ns = UINT64_MAX;
            memcpy(rmeta.clock, p + 48, 23);
            rmeta.clock[23] = 0;
            for (char *c = rmeta.clock; *c; c++) /* (a clock's name is ASCII: anything else is damage) */
                if (*c < 0x20 || *c > 0x7e)
                    *c = '?';
            rmeta.test_clock = strcmp(rmeta.clock, "test") == 0;
            memcpy(rmeta.cache_entries, p + 72, 256);
            rmeta.python_hex = rd32(p + 328);
            uint32_t nl = rd32(p + 332);
            if (nl > len - OC_HEADER_FIXED)
                BAD("corrupt header block");
            char *raw = clean_name(p + OC_HEADER_FIXED, nl, &nl);
            free(rmeta.process_name);
            free(rmeta.process_name_raw);
            rmeta.process_name = raw ? oc_json_escape(raw, nl) : NULL;
            rmeta.process_name_raw = raw;
            rstate.have_header = 1;
            break;
        }
        case OC_BLK_CODE: {
            if (len < 20)
                BAD("corrupt code block");
            uint32_t id = rd32(p), nu = rd32(p + 8), ql = rd32(p + 12), fl = rd32(p + 16);
            if ((uint64_t)20 + ql + fl + (uint64_t)nu * 6 != len)
                BAD("corrupt code block");
            /* ids are given in order and each is written once, nearly in order: an id far past the blocks
             * seen is damage, skipped (the table is indexed by id: it would take that much memory) */
            if ((uint64_t)id > 2 * (uint64_t)rstate.codes_seen + 65536) {
                rmeta.bad_codes++;
                rmeta.damage |= OC_DAMAGE_CODES;
                break;
            }
            rstate.codes_seen++;
            if (grow_codes(id) < 0)
                BAD("code id out of range");
            oc_codeent *e = &rmeta.codes[id];
            if (e->qualname)
                break; /* written twice: the first one holds */
            const char *q = (const char *)p + 20, *f = q + ql;
            const char *qr = NULL, *qe = NULL, *fr = NULL, *fe = NULL;
            if (name_arena.last_fn && name_arena.last_fn_len == fl && memcmp(name_arena.last_fn, f, fl) == 0) {
                fr = name_arena.last_fn; /* (the same file as the last code's, as a rule; valid UTF-8 as it is) */
                fe = name_arena.last_fn_esc;
            } else if (na_name((const uint8_t *)f, fl, &fr, &fe) == 0) {
                name_arena.last_fn = fr;
                name_arena.last_fn_esc = fe;
                name_arena.last_fn_len = strlen(fr);
            }
            if (!fr || na_name((const uint8_t *)q, ql, &qr, &qe) < 0)
                BAD("out of memory reading the code table");
            e->qualname_raw = (char *)qr;
            e->qualname = (char *)qe;
            e->filename_raw = (char *)fr;
            e->filename = (char *)fe;
            e->firstlineno = (int)rd32(p + 4);
            e->nunits = nu;
            if (!rstate.handle_run1 && is_handle_run(q, ql, fr))
                rstate.handle_run1 = id + 1;
            if (nu) {
                e->code = na_alloc((size_t)nu * 2 + 1);
                e->lines = na_alloc(((size_t)nu + 1) * 4);
                if (!e->code || !e->lines) {
                    e->code = NULL;
                    e->lines = NULL;
                    e->nunits = 0;
                    BAD("out of memory reading the code table");
                }
                memcpy(e->code, f + fl, (size_t)nu * 2);
                memcpy(e->lines, f + fl + (size_t)nu * 2, (size_t)nu * 4);
                e->lines[nu] = -1;
            }
            break;
        }
        case OC_BLK_THREAD: {
            if (len < 28)
                BAD("corrupt thread block");
            uint32_t nl = rd32(p + 24);
            int64_t idx = nl == len - 28 ? thread_slot(rd32(p)) : -1;
            if (idx < 0)
                BAD("corrupt thread block");
            oc_thread *th = &rmeta.threads[idx];
            th->tid = (long)rd64(p + 8);
            th->ident = (unsigned long)rd64(p + 16);
            if (rstate.threads[idx])
                set_otid(rstate.threads[idx], th->tid);
            if (nl && !th->name_raw) {
                th->name_raw = clean_name(p + 28, nl, &nl);
                th->name = th->name_raw ? oc_json_escape(th->name_raw, nl) : NULL;
                if (th->name && strcmp(th->name, th->name_raw) == 0) { /* (one copy: it stays to the end) */
                    free(th->name);
                    th->name = th->name_raw;
                }
            }
            if ((rd32(p + 4) & OC_THREAD_ENDED) && !rstate.ix[idx].ended) {
                /* the thread ended: when rendering reaches this point its state is freed (end_thread) */
                if (order_push((span_ref){(uint32_t)idx, UINT32_MAX}) < 0)
                    BAD("out of memory indexing the recording");
                rstate.ix[idx].ended = 1;
            }
            break;
        }
        case OC_BLK_CHUNK: {
            if (len < 8)
                BAD("corrupt chunk block");
            uint32_t n = rd32(p + 4);
            int64_t slot = (uint64_t)n * sizeof(oc_rec) == (uint64_t)len - 8 ? thread_slot(rd32(p)) : -1;
            if (slot >= 0 && rstate.ix[slot].ended)
                slot = thread_reslot(rd32(p), (uint32_t)slot);
            if (slot < 0)
                BAD("corrupt chunk block");
            uint32_t idx = (uint32_t)slot;
            tindex *t = &rstate.ix[idx];
            if (n && rd64(p + 8 + (size_t)(n - 1) * sizeof(oc_rec)) > rstate.last_ts) /* (a recording cut short ends there) */
                rstate.last_ts = rd64(p + 8 + (size_t)(n - 1) * sizeof(oc_rec));
            if (t->nspans == t->capspans) {
                uint32_t cap = t->capspans ? t->capspans * 2 : 2;
                span *s = realloc(t->spans, cap * sizeof *s);
                if (!s)
                    BAD("out of memory indexing the recording");
                t->spans = s;
                t->capspans = cap;
            }
            if (order_push((span_ref){idx, t->nspans}) < 0)
                BAD("out of memory indexing the recording");
            t->spans[t->nspans++] = (span){(const oc_rec *)(const void *)(p + 8), n};
            rstate.total += n;
            break;
        }
        case OC_BLK_OPTIONS:
            if (len >= 4)
                rmeta.stall_ms = rd32(p);
            break;
        case OC_BLK_OWNCOST:
            if (len >= 8) {
                uint32_t n = rd32(p);
                uint64_t t[16] = {0};
                for (uint32_t k = 0; k < n && k < 16 && 8 + 8 * (k + 1) <= len; k++)
                    t[k] = rd64(p + 8 + 8 * k);
                oc_stats_own_cost(t, n < 16 ? n : 16);
            }
            break;
        case OC_BLK_CALIB:
            if (len >= 24) {
                rstate.calib_final = read_calib(p, len);
                rstate.calibrated = 1;
            }
            break;
        case OC_BLK_CODESTATE:
            for (uint32_t k = 0; k + 12 <= len; k += 12) {
                uint32_t id = rd32(p + k);
                if (id < rmeta.ncodes) {
                    rmeta.codes[id].flags = rd32(p + k + 4);
                    rmeta.codes[id].enters = rd32(p + k + 8);
                }
            }
            break;
        case OC_BLK_END:
            if (len >= 32) {
                rstate.stop_ticks = rd64(p);
                rmeta.dropped = rd64(p + 16);
                res->pauses = rd64(p + 24);
                rstate.complete = 1;
            }
            break;
        case OC_BLK_WINDOW:
            if (len >= 8)
                rstate.window_ticks = rd64(p);
            break;
        case OC_BLK_ADAPTIVE: /* (kept for the report; the last one wins) */
            free(rmeta.adaptive);
            rmeta.adaptive = malloc((size_t)len + 1);
            rmeta.adaptive_len = rmeta.adaptive ? len : 0;
            if (rmeta.adaptive)
                memcpy(rmeta.adaptive, p, len);
            break;
        case OC_BLK_SAMPLING:
        case OC_BLK_SAMPLING_W:
            oc_attr_block(p, len, type == OC_BLK_SAMPLING_W ? OC_SAMPLING_WIN_LEN : 16);
            break;
        default:
            break; /* a newer block type: skip it */
        }
        off += OC_BLK_HDR + len;
        off = (off + 7) & ~(size_t)7; /* blocks start at multiples of 8 */
        *offp = off;
        if (UNLIKELY(off - rstate.index_dropped >= OC_DROP_STEP)) {
            /* indexed: these pages out of the resident set, OC_DROP_STEP at a time (rendering reads them again,
             * from the page cache; a long recording would otherwise be resident whole before rendering) */
            uintptr_t lo = ((uintptr_t)(base + rstate.index_dropped) + 4095) & ~(uintptr_t)4095;
            uintptr_t hi = ((uintptr_t)(base + off)) & ~(uintptr_t)4095;
            if (hi > lo)
                madvise((void *)lo, hi - lo, MADV_DONTNEED);
            rstate.index_dropped = off;
        }
    }
    return 0;
}

