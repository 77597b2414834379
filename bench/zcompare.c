/* zcompare.c -- compares deflate implementations on an uncompressed Perfetto packet stream, the way the
 * Perfetto sink compresses it: cut into batches of about 256 KiB at packet boundaries, each batch one
 * zlib stream.  Prints the compressed bytes; instructions come from running it under callgrind
 * (bench/zcompare.sh does both and prints the table).
 *
 *   zcompare FILE zlib LEVEL        zlib's compress2 (deflateInit once, deflateReset per batch)
 *   zcompare FILE libdeflate LEVEL  libdeflate_zlib_compress
 *   zcompare FILE ocular 0          deflate.c's oc_deflate, when built with -DWITH_OCULAR
 *   zcompare FILE none 0            only the reading and the cutting (the baseline to subtract)
 *
 * Build (bench/zcompare.sh): cc -O2 zcompare.c -lz -ldeflate
 * An uncompressed stream: OCULAR_PERFETTO_DEFLATE=0 python -m ocular convert REC -o raw.pftrace
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#ifdef WITH_LIBDEFLATE
#include <libdeflate.h>
#endif
#ifdef WITH_OCULAR
size_t oc_deflate(const uint8_t *in, size_t n, uint8_t **out, size_t *out_cap);
#endif

#define BATCH (256u * 1024u)

/* one top-level Trace.packet field starting at p: its total size (tag, length, body), or 0 */
static size_t packet_size(const uint8_t *p, size_t n) {
    if (n < 2 || p[0] != 0x0a)
        return 0;
    uint64_t len = 0;
    size_t k = 1;
    for (int shift = 0; k < n && shift < 64; shift += 7) {
        uint8_t b = p[k++];
        len |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return k + len <= n ? k + (size_t)len : 0;
    }
    return 0;
}

static z_stream zs;
static int zs_ready;

static size_t z_compress(const uint8_t *in, size_t n, uint8_t *out, size_t cap, int level) {
    if (!zs_ready) {
        if (deflateInit(&zs, level) != Z_OK)
            exit(2);
        const char *tune = getenv("ZTUNE"); /* good_length,max_lazy,nice_length,max_chain */
        int g, l, nl, c;
        if (tune && sscanf(tune, "%d,%d,%d,%d", &g, &l, &nl, &c) == 4)
            deflateTune(&zs, g, l, nl, c);
        zs_ready = 1;
    } else {
        deflateReset(&zs);
    }
    zs.next_in = (uint8_t *)in;
    zs.avail_in = (uInt)n;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    if (deflate(&zs, Z_FINISH) != Z_STREAM_END)
        exit(3);
    return cap - zs.avail_out;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: zcompare FILE zlib|libdeflate|ocular|none LEVEL\n");
        return 1;
    }
    const char *method = argv[2];
    int level = atoi(argv[3]);
    FILE *f = fopen(argv[1], "rb");
    if (!f)
        return 1;
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc(n);
    if (!data || fread(data, 1, n, f) != n)
        return 1;
    fclose(f);
    size_t cap = 2 * BATCH + 65536;
    uint8_t *out = malloc(cap);
#ifdef WITH_LIBDEFLATE
    struct libdeflate_compressor *ld = strcmp(method, "libdeflate") == 0 ? libdeflate_alloc_compressor(level) : NULL;
#endif
    size_t total = 0, batches = 0;
    for (size_t at = 0; at < n;) {
        size_t end = at;
        while (end < n && end - at < BATCH) {
            size_t k = packet_size(data + end, n - end);
            if (!k) {
                fprintf(stderr, "not a packet stream at %zu\n", end);
                return 1;
            }
            end += k;
        }
        size_t zn = 0;
        if (strcmp(method, "zlib") == 0) {
            zn = z_compress(data + at, end - at, out, cap, level);
#ifdef WITH_LIBDEFLATE
        } else if (ld) {
            zn = libdeflate_zlib_compress(ld, data + at, end - at, out, cap);
#endif
#ifdef WITH_OCULAR
        } else if (strcmp(method, "ocular") == 0) {
            zn = oc_deflate(data + at, end - at, &out, &cap);
#endif
        } else if (strcmp(method, "none") != 0) {
            fprintf(stderr, "unknown method %s\n", method);
            return 1;
        }
        total += zn;
        batches++;
        at = end;
    }
    printf("%zu %zu %zu\n", n, total, batches);
    return 0;
}
