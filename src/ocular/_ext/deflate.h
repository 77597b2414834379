/* deflate.h -- the interface of deflate.c, the zlib-format encoder of the Perfetto sink's packet batches:
 * LZ77 tokens in (from the caller, or from oc_z_scan's matcher), one zlib stream per batch out.
 * No Python API; one renderer at a time. */
#ifndef OCULAR_DEFLATE_H
#define OCULAR_DEFLATE_H

#include <stddef.h>
#include <stdint.h>

/* A token: bit 31 set = a match (length 3..258 in bits 16..24, distance 1..32768 in bits 0..15), else
 * a literal byte.  The tokens of a batch describe its bytes in order, every byte exactly once. */
#define OC_TOK_MATCH 0x80000000u
#define OC_Z_WINDOW 32768u
#define OC_Z_MAX_MATCH 258u

typedef struct {
    uint32_t *tok;
    size_t ntok, cap;
} oc_ztokens;
extern oc_ztokens oc_zt;

/* room for n more tokens (0, or -1 on memory failure); the inline adders below never check */
int oc_z_reserve(size_t n);

/* The adders work on a copy of oc_zt that the caller keeps in locals (oc_ztokens z = oc_zt; ...;
 * oc_zt = z;): the batch's byte stores would otherwise make the compiler reload oc_zt after each. */
static inline void oc_z_lit(oc_ztokens *z, uint8_t b) { z->tok[z->ntok++] = b; }

/* A match of len (>= 3) bytes at distance dist (<= OC_Z_WINDOW); it joins the previous token when
 * that is a match at the same distance ending here. */
static inline void oc_z_match(oc_ztokens *z, uint32_t len, uint32_t dist) {
    uint32_t *last = z->tok + z->ntok - 1;
    if (z->ntok && (*last & (OC_TOK_MATCH | 0xffffu)) == (OC_TOK_MATCH | dist) &&
        ((*last >> 16) & 0x1ffu) + len <= OC_Z_MAX_MATCH) {
        *last += len << 16;
        return;
    }
    z->tok[z->ntok++] = OC_TOK_MATCH | len << 16 | dist;
}

/* Tokens for in[start..end) by searching earlier scanned bytes (hash chains, 32 KiB window).  The
 * bytes of one batch must be described in order: by oc_z_lit/oc_z_match, or by this. */
int oc_z_scan(const uint8_t *in, size_t start, size_t end);
/* The batch in[0..n) that the tokens describe, as one zlib stream at the start of *out (grown with
 * realloc; *out_cap its capacity); returns its size, or 0 on memory failure.  Starts the next batch. */
size_t oc_z_finish(const uint8_t *in, size_t n, uint8_t **out, size_t *out_cap);
void oc_z_start(void); /* forget the tokens so far: a new batch */
/* oc_z_scan over all of in[0..n), then oc_z_finish: a general-purpose compressor (bench/zcompare.c) */
size_t oc_deflate(const uint8_t *in, size_t n, uint8_t **out, size_t *out_cap);
void oc_z_free(void);

#endif
