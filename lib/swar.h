/* swar.h - eight ASCII bytes at a time (SIMD within a register), for the
 * tokenizers' word scans (fingerprint.c, sketch.c): the one definition of
 * which bytes are ASCII letters and digits.
 *
 * Header-only (static inline), pure. Little-endian only: the first byte in
 * memory is the low byte of the word (ND_SWAR is 0 elsewhere, and the
 * callers keep their byte-at-a-time loops). */
#ifndef ND_SWAR_H
#define ND_SWAR_H

#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ND_SWAR 1
#else
#define ND_SWAR 0
#endif

/* 0x80 in each byte of x that is an ASCII letter or digit, else 0. */
static inline uint64_t nd_swar_alnum(uint64_t x)
{
    const uint64_t k = 0x0101010101010101ull, high = 0x80 * k;
    uint64_t low7 = x & ~high, folded = low7 | 0x20 * k;
    /* byte b >= lo iff b + 0x80 - lo has its top bit set (b < 0x80) */
    uint64_t digit = (low7 + (0x80 - '0') * k) & ~(low7 + (0x80 - '9' - 1) * k);
    uint64_t alpha = (folded + (0x80 - 'a') * k) & ~(folded + (0x80 - 'z' - 1) * k);
    return (digit | alpha) & ~x & high;
}

#endif
