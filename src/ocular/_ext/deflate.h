/* deflate.h -- the interface of deflate.c, the zlib-format encoder of the Perfetto sink's packet batches:
 * LZ77 tokens in (from the caller, or from oc_z_scan's matcher), one zlib stream per batch out.
 * No Python API; one renderer at a time.
 *
 * One pass: a batch's Huffman codes are made when the batch starts, from the symbol counts of the
 * batch before (every symbol counted once more, so that every symbol has a code; the first batch of
 * a session: all symbols alike), and written into the block header at once; every token is then
 * encoded as it is added, and counted for the next batch's codes.  Trace batches resemble the one
 * before, so the codes are nearly those the batch's own counts would give, and no token is stored,
 * counted and read back. */
#ifndef OCULAR_DEFLATE_H
#define OCULAR_DEFLATE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define OC_Z_WINDOW 32768u
#define OC_Z_MAX_MATCH 258u

/* The bit writer of the batch being encoded, and a match held back (it may still grow: a match at
 * the same distance that continues it joins it). */
typedef struct {
    uint8_t *o;     /* next output byte (room reserved: oc_z_reserve) */
    uint64_t acc;   /* bits not yet stored, least significant first; fewer than 32 between tokens */
    uint32_t bits;
    uint32_t pend;  /* the held match: length << 16 | distance, or 0 */
} oc_ztokens;
extern oc_ztokens oc_zt;

/* The batch's codes (made at its start) and its symbol counts (the next batch's codes). */
typedef struct {
    uint32_t lit[256];           /* literal byte: code */
    uint32_t len[259];           /* match length 3..258: code with its extra bits */
    uint32_t dadd[30];           /* distance symbol: code - (base << code length), mod 2^32 */
    uint8_t litn[256], lenn[259], dl[30], dn[30]; /* bits of each; dl: the distance code's own */
    uint8_t len_sym[259];        /* length -> length symbol - 257 */
    uint8_t dist_lo[256];        /* distance - 1 < 256 -> distance symbol */
    uint8_t dist_hi[256];        /* (distance - 1) >> 7 -> distance symbol */
    uint32_t lit_eob;             /* the end-of-block code */
    uint8_t lit_eobn;
    uint32_t lf[286], df[30];    /* this batch's counts */
} oc_zcodes;
extern oc_zcodes oc_zc;

/* room for the encoding of n more input bytes per batch (0, or -1 on memory failure); the inline
 * adders below never check */
int oc_z_reserve(size_t n);

static inline void oc_z_put(oc_ztokens *z, uint32_t v, uint32_t nb) {
    z->acc |= (uint64_t)v << z->bits;
    z->bits += nb;
    if (z->bits >= 32) {
        uint32_t w = (uint32_t)z->acc;
        uint8_t b[4] = {(uint8_t)w, (uint8_t)(w >> 8), (uint8_t)(w >> 16), (uint8_t)(w >> 24)};
        memcpy(z->o, b, 4); /* little-endian on any machine: one store where it is */
        z->o += 4;
        z->acc >>= 32;
        z->bits -= 32;
    }
}

static inline __attribute__((always_inline)) void oc_z_put_match(oc_ztokens *z, uint32_t m) {
    oc_zcodes *c = &oc_zc;
    uint32_t len = m >> 16, dist = m & 0xffffu;
    uint32_t ds = dist <= 256 ? c->dist_lo[dist - 1] : c->dist_hi[(dist - 1) >> 7];
    c->lf[257 + c->len_sym[len]]++;
    c->df[ds]++;
    oc_z_put(z, c->len[len], c->lenn[len]);
    oc_z_put(z, c->dadd[ds] + (dist << c->dl[ds]), c->dn[ds]);
}

/* The adders work on a copy of oc_zt that the caller keeps in locals (oc_ztokens z = oc_zt; ...;
 * oc_zt = z;): the batch's byte stores would otherwise make the compiler reload oc_zt after each. */
static inline void oc_z_lit(oc_ztokens *z, uint8_t b) {
    if (z->pend) {
        oc_z_put_match(z, z->pend);
        z->pend = 0;
    }
    oc_zc.lf[b]++;
    oc_z_put(z, oc_zc.lit[b], oc_zc.litn[b]);
}

/* A match of len (>= 3) bytes at distance dist (<= OC_Z_WINDOW); it joins the held one when that
 * is at the same distance and ends here. */
static inline __attribute__((always_inline)) void oc_z_match(oc_ztokens *z, uint32_t len, uint32_t dist) {
    uint32_t p = z->pend;
    if ((p & 0xffffu) == dist && (p >> 16) + len <= OC_Z_MAX_MATCH) {
        z->pend = p + (len << 16);
        return;
    }
    if (p)
        oc_z_put_match(z, p);
    z->pend = len << 16 | dist;
}

/* Tokens for in[start..end) by searching earlier scanned bytes (hash chains, 32 KiB window).  The
 * bytes of one batch must be described in order: by oc_z_lit/oc_z_match, or by this. */
int oc_z_scan(const uint8_t *in, size_t start, size_t end);
/* The batch in[0..n) that the tokens describe, as one zlib stream at the start of *out (grown with
 * realloc; *out_cap its capacity); returns its size, or 0 on memory failure.  Starts the next batch. */
size_t oc_z_finish(const uint8_t *in, size_t n, uint8_t **out, size_t *out_cap);
void oc_z_start(void); /* a new session: forget the counts and the tokens so far */
/* in[0..n) as one zlib stream (oc_z_scan, then oc_z_finish), coded with the counts of the previous
 * call's input as consecutive sink batches are (the first call: all symbols alike): bench/zcompare.c
 * compresses a raw trace this way, a batch at a time */
size_t oc_deflate(const uint8_t *in, size_t n, uint8_t **out, size_t *out_cap);
void oc_z_free(void);

#endif
