/* usdt_sdt.h -- Ocular's own USDT probe macros: SystemTap SDT notes without <sys/sdt.h>.
 *
 * One job: emit, at a probe site, the `nop` a tracer replaces with a breakpoint and the ELF note that
 * tells the tracer where it is, so that every build of Ocular on x86-64 and aarch64 Linux has its probes
 * whether or not systemtap-sdt-dev is installed.  The format, as SystemTap documents it
 * ("UserSpaceProbeImplementation", version 3 notes), which bpftrace, libbpf, gdb, perf and readelf read:
 *
 *   section .note.stapsdt (SHT_NOTE), one note per probe site:
 *       namesz, descsz, type = 3 (NT_STAPSDT)     three 4-byte words
 *       name "stapsdt\0", padded to 4 bytes
 *       desc: pc of the probe's nop              address-sized (8 bytes here)
 *             address of _.stapsdt.base          (lets tools undo prelink's relocation of the object)
 *             address of the semaphore, or 0     (a 16-bit counter tracers increment while attached)
 *             provider "\0" name "\0" arguments "\0", then padding to 4 bytes
 *   section .stapsdt.base (allocated, one byte, a COMDAT group so there is one per linked object):
 *       the symbol _.stapsdt.base
 *   arguments: space-separated "SIZE@OPERAND", SIZE in bytes, negative for a signed value, OPERAND in
 *       the assembler's own syntax (%rax, 8(%rsp), $5 on x86-64; x1, [sp, 8] on aarch64).
 *
 * The arguments are asm operands with constraint "r": each is in a register at the probe, which every
 * consumer evaluates.  Every argument is widened to 8 bytes: integers are signed (-8), pointers
 * unsigned (8); a consumer reading it as an integer sees the same value as with a narrower type, and
 * aarch64 never needs a w-register name, which not every consumer parses.  The note's section is not
 * allocated, so the pc and semaphore addresses are resolved when the object is linked.
 *
 * OC_SDT_PROBE5/6(provider, name, semaphore, a1..a6) fire the probe; the semaphore is the name of a global
 * `unsigned short` of the caller's in section ".probes" (the section name tracers expect), written into
 * the note by name, so it must keep its C name as its symbol (it does on Linux).  -DOCULAR_USDT_SYS_SDT
 * makes usdt.c use <sys/sdt.h> instead (to compare the two); other architectures use it when present.
 */
#ifndef OCULAR_USDT_SDT_H
#define OCULAR_USDT_SDT_H

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
#define OC_SDT_OWN 1

#include <stdint.h>

/* size of an argument in the note: 8, negative for signed integers */
#define OC_SDT_SIZE(x) _Generic((x), char *: 8, const char *: 8, void *: 8, const void *: 8, default: -8)
/* the value in a 64-bit register */
#define OC_SDT_VAL(x)                                                                                   \
    _Generic((x), char *: (uint64_t)(uintptr_t)(x), const char *: (uint64_t)(uintptr_t)(x),            \
             void *: (uint64_t)(uintptr_t)(x), const void *: (uint64_t)(uintptr_t)(x), default: (uint64_t)(int64_t)(x))

/* The note, after the probe's nop.  Numeric local labels (990-994) make every expansion independent, so
 * the compiler may inline or duplicate a probe site: each copy gets its own note. */
#define OC_SDT_NOTE(provider, name, sem, args)                                                               \
    "990:\tnop\n"                                                                                       \
    "\t.pushsection .note.stapsdt,\"\",\"note\"\n"                                                      \
    "\t.balign 4\n"                                                                                     \
    "\t.4byte 992f-991f, 994f-993f, 3\n"                                                                \
    "991:\t.asciz \"stapsdt\"\n"                                                                        \
    "992:\t.balign 4\n"                                                                                 \
    "993:\t.8byte 990b\n"                                                                               \
    "\t.8byte _.stapsdt.base\n"                                                                         \
    "\t.8byte " #sem "\n"                                                                               \
    "\t.asciz \"" #provider "\"\n"                                                                      \
    "\t.asciz \"" #name "\"\n"                                                                          \
    "\t.asciz \"" args "\"\n"                                                                           \
    "994:\t.balign 4\n"                                                                                 \
    "\t.popsection\n"                                                                                   \
    "\t.ifndef _.stapsdt.base\n"                                                                        \
    "\t.pushsection .stapsdt.base,\"aG\",\"progbits\",.stapsdt.base,comdat\n"                           \
    "\t.weak _.stapsdt.base\n"                                                                          \
    "\t.hidden _.stapsdt.base\n"                                                                        \
    "_.stapsdt.base:\n"                                                                                 \
    "\t.space 1\n"                                                                                      \
    "\t.size _.stapsdt.base, 1\n"                                                                       \
    "\t.popsection\n"                                                                                   \
    "\t.endif\n"

#define OC_SDT_ARG(i) "%c[s" #i "]@%[a" #i "]"
#define OC_SDT_IN(i, x) [s##i] "n"(OC_SDT_SIZE(x)), [a##i] "r"(OC_SDT_VAL(x))

#define OC_SDT_PROBE5(provider, name, sem, x1, x2, x3, x4, x5)                                          \
    __asm__ __volatile__(OC_SDT_NOTE(provider, name, sem,                                                   \
                                     OC_SDT_ARG(1) " " OC_SDT_ARG(2) " " OC_SDT_ARG(3) " " OC_SDT_ARG(4) \
                                     " " OC_SDT_ARG(5))                                                 \
                         :                                                                              \
                         : OC_SDT_IN(1, x1), OC_SDT_IN(2, x2), OC_SDT_IN(3, x3),     \
                           OC_SDT_IN(4, x4), OC_SDT_IN(5, x5))

#define OC_SDT_PROBE6(provider, name, sem, x1, x2, x3, x4, x5, x6)                                      \
    __asm__ __volatile__(OC_SDT_NOTE(provider, name, sem,                                                   \
                                     OC_SDT_ARG(1) " " OC_SDT_ARG(2) " " OC_SDT_ARG(3) " " OC_SDT_ARG(4) \
                                     " " OC_SDT_ARG(5) " " OC_SDT_ARG(6))                               \
                         :                                                                              \
                         : OC_SDT_IN(1, x1), OC_SDT_IN(2, x2), OC_SDT_IN(3, x3),     \
                           OC_SDT_IN(4, x4), OC_SDT_IN(5, x5), OC_SDT_IN(6, x6))

#endif /* x86-64 or aarch64 Linux */
#endif /* OCULAR_USDT_SDT_H */
