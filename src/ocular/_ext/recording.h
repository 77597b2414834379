/* recording.h -- the recording's on-disk format: the contract between the recorder (recorder.c), which
 * writes it while the program runs, and the renderer (render.c), which reads it at stop or later in
 * another process (`python -m ocular convert`).  docs/recording.md describes the same layout in prose.
 *
 * A recording is a sequence of blocks, each an 8-byte header {u32 type, u32 length} followed by
 * `length` payload bytes, then zeros up to the next multiple of 8 bytes (every block starts 8-byte
 * aligned, so records are read in place); all integers little-endian, fixed width.  The first block is OC_BLK_HEADER.
 * A renderer skips block types it does not know, so new block types need no version change; a change
 * to an existing payload bumps OC_REC_VERSION.  A recording that ends without OC_BLK_END was cut short
 * (the process was killed): every complete block before the cut is still valid.
 */
#ifndef OCULAR_RECORDING_H
#define OCULAR_RECORDING_H

#include <stdint.h>

#define OC_REC_MAGIC "OCULARRC"  /* the HEADER block's payload starts with these 8 bytes */
#define OC_REC_VERSION 2

enum oc_block {
    /* magic[8], u32 version, u32 flags (OC_REC_F_*), u32 threshold, u32 pid, u64 tsc0, u64 mono0_ns,
     * f64 ns_per_tick, char clock[24] (NUL-padded), u8 cache_entries[256], u32 python_hex,
     * u32 name_len, process name (raw UTF-8) */
    OC_BLK_HEADER = 1,
    /* u32 id, i32 firstlineno, u32 nunits, u32 qualname_len, u32 filename_len, qualname, filename
     * (raw UTF-8), u8 code[2*nunits] (de-instrumented bytecode), i32 lines[nunits] (line per code unit,
     * -1: none) */
    OC_BLK_CODE = 2,
    /* u32 thread_idx, u32 flags (OC_THREAD_ENDED), i64 tid, u64 ident, u32 name_len, name (raw UTF-8) */
    OC_BLK_THREAD = 3,
    /* u32 thread_idx, u32 n, then n records of 16 bytes: {u64 ts (clock ticks), u32 code_id, u32 info
     * (kind in the low 4 bits, payload above: see enum oc_kind in render.h)} */
    OC_BLK_CHUNK = 4,
    /* u64 tsc0, u64 mono0_ns, f64 ns_per_tick (the final rate), then f64 early_ns_per_tick, u64 knee_tsc (40 bytes;
     * 24 in older recordings: one rate): the clock calibration (the last one wins) */
    OC_BLK_CALIB = 5,
    /* n x {u32 code_id, u32 flags (CF_*), u32 enters}: per-code state at stop (de-instrumentation) */
    OC_BLK_CODESTATE = 6,
    /* u64 stop_ticks, u64 events, u64 dropped, u64 pauses: the session ended normally */
    OC_BLK_END = 7,
    /* u64 first_ticks: ring mode, the kept window starts here (slices open before it are cut) */
    OC_BLK_WINDOW = 8,
    /* u32 status (OC_SAMPLING_*), u32 n, u32 skipped (windows not opened: another tool was active),
     * u32 0, char other[32] (NUL-padded: the tool that stopped the last skipped window), then
     * n x {u64 begin_ticks, u64 end_ticks}: sampling windows (adaptive mode), in order.  Written as
     * windows open, before the chunks recorded in them, and once more before END with the final status:
     * a reader appends every block's windows and keeps the last status.  The final block may end with the
     * run delays (sampling.c), OC_SAMPLING_RD_LEN bytes after the windows: u32 OC_SAMPLING_RD_MAGIC,
     * u32 stretches measured inside windows, u32 outside, u32 0, then f64 inside sum of cpu * waiting
     * share, f64 inside sum of cpu, the same two outside (a reader that does not know them ignores them).
     * Any block may end (after the run delays, if there) with OC_SAMPLING_KICK_LEN bytes: u32
     * OC_SAMPLING_KICK_MAGIC, u32 0, u64 ticks of the first de-instrumentation (what the windows are a
     * sample of starts there) */
    OC_BLK_SAMPLING = 9,
    /* UTF-8 JSON, written by the Python layer at stop after END into a recording kept for later
     * (_adaptive.py): the specialized bytecode and argument names of the live code objects with loops,
     * for reports rendered in another process */
    OC_BLK_ADAPTIVE = 10,
    /* u32 n (16), u32 0, then n x u64: ticks one recorded event costs the program, by the kind of the
     * record that ends the gap (owncost.c, measured at start); the renderer takes it off each gap.  Written
     * once, early; without it the renderer takes off the smallest gap it sees */
    OC_BLK_OWNCOST = 11,
    /* SAMPLING with weighted windows: the same payload, but each window is n x {u64 begin_ticks, u64
     * end_ticks, u64 stands_ticks}: the time of the run it is a sample of (from its begin to the next
     * window's, as scheduled; the renderer weighs the window's ticks by stands / (end - begin)).  What
     * the recorder writes since windows are spaced unevenly (sampling.c); a reader that does not know it
     * sees no windows (no estimates) */
    OC_BLK_SAMPLING_W = 12,
    /* u32 stall_ms (an asyncio task step this long is a loop stall; 0: the renderer's default, 100), u32 0:
     * the session's render options, written after the header (a renderer that does not know it uses its
     * defaults) */
    OC_BLK_OPTIONS = 13,
};
enum { OC_SAMPLING_OFF = 0, OC_SAMPLING_ON = 1 };
#define OC_SAMPLING_RD_MAGIC 0x594C4452u /* "RDLY" */
#define OC_SAMPLING_RD_LEN 48u
#define OC_SAMPLING_KICK_MAGIC 0x4B43494Bu /* "KICK" */
#define OC_SAMPLING_KICK_LEN 16u
#define OC_SAMPLING_WIN_LEN 24u /* a window in OC_BLK_SAMPLING_W (16 in OC_BLK_SAMPLING) */
/* THREAD block flags.  OC_THREAD_ENDED: the thread ended; written after its last CHUNK block (no chunk of
 * its index follows), so a renderer frees what it kept for the thread there (0 in older recordings) */
enum { OC_THREAD_ENDED = 1 };

/* OC_REC_F_NEAR_ZERO: function starts were de-instrumented after the threshold too (near-zero mode):
 * the function figures past it are samples and estimates */
enum { OC_REC_F_PRECISE = 1, OC_REC_F_RING = 2, OC_REC_F_NEAR_ZERO = 4 };

#define OC_BLK_HDR 8u
#define OC_HEADER_FIXED (8 + 4 * 4 + 8 * 3 + 24 + 256 + 4 + 4)

#endif
