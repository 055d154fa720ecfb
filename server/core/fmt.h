/* fmt.h - the server's one number formatter: decimal digits written
 * straight into a caller's buffer, for the per-request paths (replies, the
 * access log, log timestamps) where snprintf and evbuffer_add_printf are a
 * visible cost. Header only; no state, any thread, never allocates. */
#ifndef ND_FMT_H
#define ND_FMT_H

#include <stddef.h>
#include <stdint.h>

#define ND_FMT_U64_MAX 20 /* digits of UINT64_MAX */

/* Writes v in decimal at out (no sign, no NUL); out needs ND_FMT_U64_MAX
 * bytes. Returns the number of digits written (1..20). */
static inline size_t nd_fmt_u64(char *out, uint64_t v)
{
    char tmp[ND_FMT_U64_MAX];
    size_t n = sizeof(tmp);
    do {
        tmp[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    size_t len = sizeof(tmp) - n;
    for (size_t i = 0; i < len; i++)
        out[i] = tmp[n + i];
    return len;
}

/* Writes exactly width decimal digits of v at out, zero-padded on the left
 * (the low width digits when v has more; no NUL). */
static inline void nd_fmt_fixed(char *out, uint64_t v, unsigned width)
{
    for (unsigned i = width; i-- > 0;) {
        out[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

#endif
