/* deflate.c -- a zlib-format (RFC 1950/1951) encoder for the Perfetto sink's compressed_packets batches.
 *
 * One batch is one complete zlib stream: a 2-byte header, a single deflate block with dynamic Huffman
 * codes, and the Adler-32 of the input.  The LZ77 tokens (literals and matches, deflate.h) come from
 * two places: the caller, which knows where the packet it just wrote repeats an earlier one (a slice
 * end differs from the thread's previous one only in its timestamp) and says so without any search;
 * and, for everything else, oc_z_scan's matcher over a region of the batch -- hash chains over a
 * 32 KiB window (bounded depth, one step of lazy evaluation).  Encoding is one pass (deflate.h): the
 * batch's codes come from the previous batch's symbol counts, so every token is written as it comes.
 * Code lengths are limited to 15 (7 for the code-length alphabet) by halving the frequencies until
 * the Huffman tree fits.
 *
 * Written from the RFCs for Ocular; no Python API.  Not thread-safe: one static context, used by one
 * renderer at a time.
 */
#include "deflate.h"
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define OC_ADLER_AVX2 1
#endif

#define WSIZE 32768u
#define HBITS 15
#define HSIZE (1u << HBITS)
#define MIN_MATCH 3
#define MAX_MATCH 258
#ifndef CHAIN_DEPTH
#define CHAIN_DEPTH 4
#endif
#ifndef NICE_MATCH
#define NICE_MATCH 64
#endif
/* Positions inside a match longer than this are not added to the hash chains (as zlib's fast
 * levels do): inserting every byte cost more than the matching itself, and trace packets repeat
 * whole, so the positions where matches start are the ones worth finding again. */
#ifndef MAX_INSERT
#define MAX_INSERT 8
#endif


static const uint16_t len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                      31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t dist_base[30] = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,
                                       33,  49,  65,  97,  129, 193,  257,  385,  513,  769,
                                       1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6,
                                       6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
static const uint8_t cl_order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};

oc_ztokens oc_zt;
oc_zcodes oc_zc;

static struct {
    int32_t head[HSIZE];
    int32_t prev[WSIZE];
    int heads_clear;                /* head[] has no position of the current batch */
    int tables;                     /* oc_zc's length and distance symbol tables are made */
    int begun;                      /* the batch's header and codes are written */
    uint8_t *buf;                   /* the batch's zlib stream so far (oc_zt.o points into it) */
    size_t cap;
    size_t per_batch;               /* input bytes a batch may hold beyond a scanned region (oc_z_reserve) */
} zst;

static void init_tables(void) {
    for (int s = 0; s < 29; s++) {
        int top = s == 28 ? MAX_MATCH : len_base[s] + (1 << len_extra[s]) - 1;
        for (int l = len_base[s]; l <= top && l <= MAX_MATCH; l++)
            oc_zc.len_sym[l] = (uint8_t)s;
    }
    oc_zc.len_sym[MAX_MATCH] = 28; /* 258 has its own symbol, not 227 + 31 */
    for (int s = 0; s < 30; s++)
        for (int d = dist_base[s]; d < dist_base[s] + (1 << dist_extra[s]) && d <= 32768; d++) {
            if (d - 1 < 256)
                oc_zc.dist_lo[d - 1] = (uint8_t)s;
            else
                oc_zc.dist_hi[(d - 1) >> 7] = (uint8_t)s;
        }
    zst.tables = 1;
}


static inline uint32_t hash3(const uint8_t *p) {
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
    return (v * 2654435761u) >> (32 - HBITS);
}

/* ---- LZ77 ---- */
static inline void insert(const uint8_t *in, size_t i) {
    uint32_t h = hash3(in + i);
    zst.prev[i & (WSIZE - 1)] = zst.head[h];
    zst.head[h] = (int32_t)i;
}

/* length of the common prefix of a and b, at most limit: 8 bytes at a time */
static inline uint32_t match_len(const uint8_t *a, const uint8_t *b, uint32_t limit) {
    uint32_t l = 0;
    while (l + 8 <= limit) {
        uint64_t x, y;
        memcpy(&x, a + l, 8);
        memcpy(&y, b + l, 8);
        if (x != y)
            return l + (uint32_t)(__builtin_ctzll(x ^ y) >> 3); /* little-endian: first differing byte */
        l += 8;
    }
    while (l < limit && a[l] == b[l])
        l++;
    return l;
}

static uint32_t longest(const uint8_t *in, size_t n, size_t i, uint32_t *dist) {
    uint32_t best = 0;
    size_t limit = n - i < MAX_MATCH ? n - i : MAX_MATCH;
    if (limit < MIN_MATCH)
        return 0;
    int32_t cand = zst.head[hash3(in + i)];
    for (int depth = 0; cand >= 0 && depth < CHAIN_DEPTH; depth++) {
        size_t c = (size_t)cand;
        if (i - c > WSIZE)
            break;
        if (in[c + best] == in[i + best] && in[c] == in[i]) {
            uint32_t l = match_len(in + c, in + i, (uint32_t)limit);
            if (l > best) {
                best = l;
                *dist = (uint32_t)(i - c);
                if (l >= NICE_MATCH || l == limit)
                    break;
            }
        }
        int32_t nx = zst.prev[c & (WSIZE - 1)];
        if (nx >= cand)
            break; /* the slot was reused by a newer position: the chain ends here */
        cand = nx;
    }
    return best >= MIN_MATCH ? best : 0;
}

static void begin_batch(void);

/* Room in zst.buf past oc_zt.o for the encoding of n input bytes (a token of 3 or more bytes takes at
 * most 48 bits, a literal 15), plus the trailer; the batch's codes are written first if need be. */
static int room(size_t n) {
    size_t used = oc_zt.o ? (size_t)(oc_zt.o - zst.buf) : 0, need = used + 2 * n + 2048;
    if (need > zst.cap) {
        size_t cap = zst.cap ? zst.cap : 65536;
        while (cap < need)
            cap *= 2;
        uint8_t *b = realloc(zst.buf, cap);
        if (!b)
            return -1;
        zst.buf = b;
        zst.cap = cap;
        oc_zt.o = b + used;
    }
    if (!zst.begun)
        begin_batch();
    return 0;
}

int oc_z_reserve(size_t n) {
    if (n > zst.per_batch)
        zst.per_batch = n;
    return room(n);
}

/* LZ77 over in[start..end): matches may reach back into any earlier region that was scanned too. */
int oc_z_scan(const uint8_t *in, size_t start, size_t end) {
    if (room(end - start + zst.per_batch) < 0)
        return -1;
    if (!zst.heads_clear) {
        for (uint32_t h = 0; h < HSIZE; h++)
            zst.head[h] = -1;
        zst.heads_clear = 1;
    }
    size_t n = end, i = start;
    oc_ztokens z = oc_zt;
    uint32_t lazy_len = 0, lazy_dist = 0; /* a match found at i-1, held for one step (lazy) */
    while (i < n) {
        uint32_t dist = 0, len = 0;
        if (i + MIN_MATCH <= n) {
            len = longest(in, n, i, &dist);
            insert(in, i);
        }
        if (lazy_len) {
            if (len > lazy_len) { /* better match one byte later: emit the byte as a literal */
                oc_z_lit(&z, in[i - 1]);
                lazy_len = len;
                lazy_dist = dist;
                i++;
                continue;
            }
            oc_z_match(&z, lazy_len, lazy_dist);
            size_t e = i - 1 + lazy_len; /* the match covered i-1 .. e-1; i is already inserted */
            if (lazy_len <= MAX_INSERT)
                for (size_t k = i + 1; k < e; k++)
                    if (k + MIN_MATCH <= n)
                        insert(in, k);
            i = e;
            lazy_len = 0;
            continue;
        }
        if (len) {
            if (len >= NICE_MATCH) { /* long enough: no lazy look */
                oc_z_match(&z, len, dist);
                i += len;
            } else {
                lazy_len = len;
                lazy_dist = dist;
                i++;
            }
        } else {
            oc_z_lit(&z, in[i++]);
        }
    }
    if (lazy_len)
        oc_z_match(&z, lazy_len, lazy_dist);
    oc_zt = z;
    return 0;
}

/* ---- Huffman codes ---- */
static void sift_down(uint64_t *a, int i, int n) {
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && a[c + 1] > a[c])
            c++;
        if (a[i] >= a[c])
            return;
        uint64_t t = a[i];
        a[i] = a[c];
        a[c] = t;
        i = c;
    }
}

static void heapsort_u64(uint64_t *a, int n) {
    for (int i = n / 2 - 1; i >= 0; i--)
        sift_down(a, i, n);
    for (int end = n - 1; end > 0; end--) {
        uint64_t t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift_down(a, 0, end);
    }
}

/* Optimal code lengths for `n` symbols with frequencies f (0 = unused), all lengths <= maxbits.
 * At least two symbols must be used. */
static void code_lengths(const uint32_t *f, int n, int maxbits, uint8_t *len) {
    uint32_t w[2 * 288];
    int sym[288], parent[2 * 288], depth[2 * 288];
    /* the leaves sorted by weight once: keys weight << 9 | symbol, heapsorted (n <= 288); a retry
     * scales the weights down, which keeps them in order */
    uint64_t key[288];
    int m = 0;
    for (int s = 0; s < n; s++)
        if (f[s])
            key[m++] = (uint64_t)f[s] << 9 | (uint64_t)s;
    heapsort_u64(key, m);
    for (int k = 0; k < m; k++)
        sym[k] = (int)(key[k] & 511);
    for (uint32_t scale = 0;; scale++) {
        for (int k = 0; k < m; k++) {
            uint32_t v = (uint32_t)(key[k] >> 9) >> scale;
            w[k] = v ? v : 1;
        }
        /* two-queue construction: leaves 0..m-1, internal nodes m.. in non-decreasing weight */
        int li = 0, ii = m, next = m;
        for (int k = 0; k < m - 1; k++) {
            int pick[2];
            for (int j = 0; j < 2; j++) {
                if (li < m && (ii >= next || w[li] <= w[ii]))
                    pick[j] = li++;
                else
                    pick[j] = ii++;
            }
            w[next] = w[pick[0]] + w[pick[1]];
            parent[pick[0]] = parent[pick[1]] = next;
            next++;
        }
        int root = next - 1, maxd = 0;
        depth[root] = 0;
        for (int k = root - 1; k >= 0; k--) {
            depth[k] = depth[parent[k]] + 1;
            if (k < m && depth[k] > maxd)
                maxd = depth[k];
        }
        if (maxd <= maxbits) {
            memset(len, 0, (size_t)n);
            for (int k = 0; k < m; k++)
                len[sym[k]] = (uint8_t)depth[k];
            return;
        }
        /* flatten the distribution and try again */
    }
}

/* Canonical codes (RFC 1951 3.2.2), bit-reversed for LSB-first output. */
static void canonical(const uint8_t *len, int n, uint16_t *code) {
    static uint8_t rev8[256];
    if (!rev8[1])
        for (int b = 0; b < 256; b++) {
            int r = 0;
            for (int k = 0; k < 8; k++)
                r |= ((b >> k) & 1) << (7 - k);
            rev8[b] = (uint8_t)r;
        }
    uint16_t count[16] = {0}, next[16];
    for (int s = 0; s < n; s++)
        count[len[s]]++;
    count[0] = 0;
    uint16_t c = 0;
    for (int b = 1; b < 16; b++) {
        c = (uint16_t)((c + count[b - 1]) << 1);
        next[b] = c;
    }
    for (int s = 0; s < n; s++) {
        int l = len[s];
        if (!l) {
            code[s] = 0;
            continue;
        }
        uint32_t v = next[l]++, r = (uint32_t)rev8[v & 0xff] << 8 | rev8[(v >> 8) & 0xff]; /* 16 bits reversed */
        code[s] = (uint16_t)(r >> (16 - l));
    }
}

/* Adler-32 (RFC 1950).  With SSE2, 16 bytes at a time: the byte sums by _mm_sad_epu8, the sums
 * weighted 16..1 by _mm_madd_epi16, and the running sum before each block, which every byte of later
 * blocks adds to b once per byte, gathered in s1acc; 32-bit lanes hold at most NMAX bytes' worth.
 * Where the CPU has AVX2, 32 bytes at a time first (adler32_avx2), the rest as above. */
#define NMAX 5552 /* the most bytes before b can overflow 32 bits (zlib's bound) */
#ifdef OC_ADLER_AVX2
/* The same with AVX2, 32 bytes at a time: the byte sums by _mm256_sad_epu8, the weighted sums (32..1)
 * by _mm256_maddubs_epi16 then _mm256_madd_epi16 with ones, the running sum before each block in
 * s1acc.  Continues (a, b) over p[0..n), n a multiple of 32; a and b come back reduced mod 65521.
 * 0.45 instructions per byte against the SSE2 loop's 1.0 (callgrind, a fib(27) .pftrace's batches). */
__attribute__((target("avx2"))) static void adler32_avx2(const uint8_t *p, size_t n, uint64_t *pa, uint64_t *pb) {
    uint64_t a = *pa, b = *pb;
    const __m256i zero = _mm256_setzero_si256(), ones = _mm256_set1_epi16(1);
    const __m256i w = _mm256_setr_epi8(32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14,
                                       13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
    while (n >= 32) {
        size_t blocks = n / 32 < NMAX / 32 ? n / 32 : NMAX / 32;
        n -= blocks * 32;
        __m256i s1 = zero, s1acc = zero, s2 = zero;
        for (size_t k = 0; k < blocks; k++, p += 32) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)p);
            s1acc = _mm256_add_epi32(s1acc, s1);
            s1 = _mm256_add_epi32(s1, _mm256_sad_epu8(x, zero));
            s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), ones));
        }
        uint32_t v1[8], va[8], v2[8];
        _mm256_storeu_si256((__m256i *)(void *)v1, s1);
        _mm256_storeu_si256((__m256i *)(void *)va, s1acc);
        _mm256_storeu_si256((__m256i *)(void *)v2, s2);
        uint64_t t1 = 0, ta = 0, t2 = 0;
        for (int i = 0; i < 8; i++)
            t1 += v1[i], ta += va[i], t2 += v2[i];
        b += 32 * blocks * a + 32 * ta + t2;
        a += t1;
        a %= 65521;
        b %= 65521;
    }
    *pa = a;
    *pb = b;
}
#endif

static uint32_t adler32(const uint8_t *p, size_t n) {
    uint64_t a = 1, b = 0;
#ifdef OC_ADLER_AVX2
    static int avx2 = -1;
    if (avx2 < 0)
        avx2 = __builtin_cpu_supports("avx2") != 0;
    if (avx2 && n >= 32) {
        size_t k = n & ~(size_t)31;
        adler32_avx2(p, k, &a, &b);
        p += k;
        n -= k;
    }
#endif
#ifdef __SSE2__
    const __m128i zero = _mm_setzero_si128();
    const __m128i w_lo = _mm_setr_epi16(16, 15, 14, 13, 12, 11, 10, 9), w_hi = _mm_setr_epi16(8, 7, 6, 5, 4, 3, 2, 1);
    while (n >= 16) {
        size_t blocks = n / 16 < NMAX / 16 ? n / 16 : NMAX / 16;
        n -= blocks * 16;
        __m128i s1 = zero, s1acc = zero, s2 = zero;
        for (size_t k = 0; k < blocks; k++, p += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
            s1acc = _mm_add_epi32(s1acc, s1);
            s1 = _mm_add_epi32(s1, _mm_sad_epu8(x, zero));
            s2 = _mm_add_epi32(s2, _mm_add_epi32(_mm_madd_epi16(_mm_unpacklo_epi8(x, zero), w_lo),
                                                 _mm_madd_epi16(_mm_unpackhi_epi8(x, zero), w_hi)));
        }
        uint32_t v1[4], va[4], v2[4];
        _mm_storeu_si128((__m128i *)(void *)v1, s1);
        _mm_storeu_si128((__m128i *)(void *)va, s1acc);
        _mm_storeu_si128((__m128i *)(void *)v2, s2);
        b += 16 * blocks * a + 16 * ((uint64_t)va[0] + va[1] + va[2] + va[3]) + v2[0] + v2[1] + v2[2] + v2[3];
        a += (uint64_t)v1[0] + v1[1] + v1[2] + v1[3];
        a %= 65521;
        b %= 65521;
    }
#endif
    while (n) {
        size_t k = n < NMAX ? n : NMAX;
        n -= k;
        while (k--) {
            a += *p++;
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    return (uint32_t)(b << 16 | a);
}

/* Start a batch: its codes from the previous batch's counts (each plus one), written into zst.buf
 * with the zlib and block headers; the counts start again.  zst.buf has the room (room()). */
static void begin_batch(void) {
    if (!zst.tables)
        init_tables();
    oc_zcodes *c = &oc_zc;
    uint32_t lf[286], df[30];
    for (int k = 0; k < 286; k++)
        lf[k] = c->lf[k] + 1;
    for (int k = 0; k < 30; k++)
        df[k] = c->df[k] + 1;
    memset(c->lf, 0, sizeof c->lf);
    memset(c->df, 0, sizeof c->df);
    uint8_t ll[286], dl[30];
    uint16_t lc[286], dc[30];
    code_lengths(lf, 286, 15, ll);
    code_lengths(df, 30, 15, dl);
    canonical(ll, 286, lc);
    canonical(dl, 30, dc);
    int hlit = 286, hdist = 30; /* every symbol has a code */

    /* run-length encode the code lengths: sym | extra << 8 */
    uint8_t all[316];
    memcpy(all, ll, (size_t)hlit);
    memcpy(all + hlit, dl, (size_t)hdist);
    int total = hlit + hdist, nrle = 0;
    uint16_t rle[316];
    uint32_t cf[19] = {0};
    for (int k = 0; k < total;) {
        int v = all[k], run = 1;
        while (k + run < total && all[k + run] == v)
            run++;
        if (v == 0 && run >= 3) {
            int r = run > 138 ? 138 : run;
            rle[nrle++] = r >= 11 ? (uint16_t)(18 | (r - 11) << 8) : (uint16_t)(17 | (r - 3) << 8);
            cf[r >= 11 ? 18 : 17]++;
            k += r;
        } else if (v != 0 && run >= 4) {
            rle[nrle++] = (uint16_t)v; /* the length once, then repeats of it */
            cf[v]++;
            int r = run - 1 > 6 ? 6 : run - 1;
            rle[nrle++] = (uint16_t)(16 | (r - 3) << 8);
            cf[16]++;
            k += 1 + r;
        } else {
            rle[nrle++] = (uint16_t)v;
            cf[v]++;
            k++;
        }
    }
    int cused = 0;
    for (int s = 0; s < 19; s++)
        cused += cf[s] != 0;
    for (int s = 0; cused < 2 && s < 19; s++)
        if (!cf[s]) {
            cf[s] = 1;
            cused++;
        }
    uint8_t cl[19];
    uint16_t cc[19];
    code_lengths(cf, 19, 7, cl);
    canonical(cl, 19, cc);
    int hclen = 19;
    while (hclen > 4 && !cl[cl_order[hclen - 1]])
        hclen--;

    oc_ztokens z = {.o = zst.buf};
    uint8_t zh[2] = {0x78, 0x01}; /* CM 8 (deflate), 32 KiB window; no dictionary, 0x7801 % 31 == 0 */
    memcpy(z.o, zh, 2);
    z.o += 2;
    oc_z_put(&z, 1, 1); /* BFINAL */
    oc_z_put(&z, 2, 2); /* BTYPE 10: dynamic Huffman */
    oc_z_put(&z, (uint32_t)(hlit - 257), 5);
    oc_z_put(&z, (uint32_t)(hdist - 1), 5);
    oc_z_put(&z, (uint32_t)(hclen - 4), 4);
    for (int k = 0; k < hclen; k++)
        oc_z_put(&z, cl[cl_order[k]], 3);
    for (int k = 0; k < nrle; k++) {
        int s = rle[k] & 0xff, x = rle[k] >> 8;
        oc_z_put(&z, cc[s], cl[s]);
        if (s == 16)
            oc_z_put(&z, (uint32_t)x, 2);
        else if (s == 17)
            oc_z_put(&z, (uint32_t)x, 3);
        else if (s == 18)
            oc_z_put(&z, (uint32_t)x, 7);
    }
    /* the batch's codes: a literal; a length with its extra bits (at most 15 + 5 bits); a distance
     * symbol's code less its base shifted past the code, so that dadd + (d << dl) is distance d's
     * code with its extra bits (at most 15 + 13) */
    for (int b = 0; b < 256; b++) {
        c->lit[b] = lc[b];
        c->litn[b] = ll[b];
    }
    for (uint32_t l = MIN_MATCH; l <= MAX_MATCH; l++) {
        int ls = c->len_sym[l];
        c->len[l] = lc[257 + ls] | (l - len_base[ls]) << ll[257 + ls];
        c->lenn[l] = (uint8_t)(ll[257 + ls] + len_extra[ls]);
    }
    for (int ds = 0; ds < 30; ds++) {
        c->dadd[ds] = (uint32_t)dc[ds] - ((uint32_t)dist_base[ds] << dl[ds]);
        c->dl[ds] = dl[ds];
        c->dn[ds] = (uint8_t)(dl[ds] + dist_extra[ds]);
    }
    c->lit_eob = lc[256];
    c->lit_eobn = ll[256];
    oc_zt = z;
    zst.begun = 1;
    zst.heads_clear = 0;
}

void oc_z_start(void) {
    memset(oc_zc.lf, 0, sizeof oc_zc.lf);
    memset(oc_zc.df, 0, sizeof oc_zc.df);
    oc_zt = (oc_ztokens){0};
    zst.begun = 0;
    zst.heads_clear = 0;
}

/* The batch in[0..n) that the tokens describe, completed (end of block, Adler-32) and copied to the
 * start of *out (grown as needed; *out_cap its capacity).  Returns the compressed size, or 0 on memory
 * failure.  The next batch starts, with codes from this one's counts. */
size_t oc_z_finish(const uint8_t *in, size_t n, uint8_t **out, size_t *out_cap) {
    if (room(0) < 0)
        return 0;
    oc_ztokens z = oc_zt;
    if (z.pend)
        oc_z_put_match(&z, z.pend);
    oc_z_put(&z, oc_zc.lit_eob, oc_zc.lit_eobn);
    while (z.bits > 0) { /* to a byte boundary */
        *z.o++ = (uint8_t)z.acc;
        z.acc >>= 8;
        z.bits = z.bits > 8 ? z.bits - 8 : 0;
    }
    uint32_t ad = adler32(in, n);
    uint8_t t[4] = {(uint8_t)(ad >> 24), (uint8_t)(ad >> 16), (uint8_t)(ad >> 8), (uint8_t)ad};
    memcpy(z.o, t, 4);
    z.o += 4;
    size_t zn = (size_t)(z.o - zst.buf);
    if (zn > *out_cap) {
        uint8_t *b = realloc(*out, zn);
        if (!b)
            return 0;
        *out = b;
        *out_cap = zn;
    }
    memcpy(*out, zst.buf, zn);
    oc_zt = (oc_ztokens){.o = zst.buf};
    begin_batch();
    return zn;
}

size_t oc_deflate(const uint8_t *in, size_t n, uint8_t **out, size_t *out_cap) {
    if (oc_z_reserve(n) < 0 || oc_z_scan(in, 0, n) < 0)
        return 0;
    return oc_z_finish(in, n, out, out_cap);
}

/* Release the stream buffer (the tables are static). */
void oc_z_free(void) {
    free(zst.buf);
    zst.buf = NULL;
    zst.cap = 0;
    zst.per_batch = 0;
    oc_z_start();
}
