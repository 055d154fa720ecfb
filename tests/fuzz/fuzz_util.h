/* fuzz_util.h - shared helpers of the libFuzzer targets: an invariant check
 * that aborts (libFuzzer then saves the input), and a UTF-8 validator written
 * independently of lib/utf8.h, from the table of well-formed byte sequences
 * in RFC 3629 section 4 / Unicode 15 table 3-7, to judge it against. */
#ifndef ND_FUZZ_UTIL_H
#define ND_FUZZ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s: ", __FILE__, __LINE__, #cond);           \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* True if s[0..n) is well-formed UTF-8. */
static inline bool fuzz_utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        uint8_t lo = 0x80, hi = 0xBF; /* range of the second byte */
        size_t more;
        if (b <= 0x7F) {
            i++;
            continue;
        } else if (b >= 0xC2 && b <= 0xDF) {
            more = 1;
        } else if (b == 0xE0) {
            more = 2, lo = 0xA0;
        } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
            more = 2;
        } else if (b == 0xED) {
            more = 2, hi = 0x9F;
        } else if (b == 0xF0) {
            more = 3, lo = 0x90;
        } else if (b >= 0xF1 && b <= 0xF3) {
            more = 3;
        } else if (b == 0xF4) {
            more = 3, hi = 0x8F;
        } else {
            return false;
        }
        if (n - i <= more)
            return false;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t k = 2; k <= more; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return false;
        i += more + 1;
    }
    return true;
}

/* A NUL-terminated copy of data[0..n) (caller frees). */
static inline char *fuzz_strndup(const uint8_t *data, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        abort();
    for (size_t i = 0; i < n; i++)
        s[i] = (char)data[i];
    s[n] = 0;
    return s;
}

#endif
