/* swar.h - eight ASCII bytes at a time (SIMD within a register), for the
 * tokenizers' word scans (fingerprint.c, sketch.c): the one definition of
 * which bytes are ASCII letters and digits.
 *
 * Header-only (static inline), pure. Little-endian only: the first byte in
 * memory is the low byte of the word (ND_SWAR is 0 elsewhere, and the
 * callers keep their byte-at-a-time loops). */
#ifndef ND_SWAR_H
#define ND_SWAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* Copies the ASCII letters and digits at s[0..room) to w, letters lowered,
 * eight bytes at a time while eight fit in room (w receives whole groups of
 * eight, so up to seven bytes past the count, within room). Returns how
 * many it took; *ended: a byte that is neither came within the groups read
 * (false: the rest, fewer than eight, is the caller's). */
static inline size_t nd_swar_word_copy(const uint8_t *s, size_t room, uint8_t *w, bool *ended)
{
    const uint64_t high = 0x8080808080808080ull;
    size_t done = 0;
    *ended = false;
    for (; done + 8 <= room; done += 8) {
        uint64_t x, m;
        memcpy(&x, s + done, 8);
        m = nd_swar_alnum(x);
        x |= m >> 2; /* 0x20: lower case; digits have it already */
        memcpy(w + done, &x, 8);
        if (~m & high) {
            *ended = true;
            return done + (size_t)__builtin_ctzll(~m & high) / 8;
        }
    }
    return done;
}

#endif
