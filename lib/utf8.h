/* utf8.h - strict UTF-8 decoding (RFC 3629): no overlong forms, no
 * surrogates, nothing above U+10FFFF. */
#ifndef ND_UTF8_H
#define ND_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes one code point from s[*pos .. len). On success stores it in *cp,
 * advances *pos and returns 0; on malformed or truncated input returns
 * -EILSEQ and leaves *pos unchanged. *pos must be < len. */
static inline int nd_utf8_decode(const uint8_t *s, size_t len, size_t *pos, uint32_t *cp)
{
    size_t i = *pos;
    uint32_t c = s[i];
    if (c < 0x80) {
        *cp = c;
        *pos = i + 1;
        return 0;
    }
    size_t need;
    uint32_t min;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1, min = 0x80, c &= 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2, min = 0x800, c &= 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3, min = 0x10000, c &= 0x07;
    } else {
        return -84; /* -EILSEQ, spelled out so this header needs no errno.h */
    }
    if (len - i <= need)
        return -84;
    for (size_t k = 1; k <= need; k++) {
        uint32_t b = s[i + k];
        if ((b & 0xC0) != 0x80)
            return -84;
        c = (c << 6) | (b & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return -84;
    *cp = c;
    *pos = i + need + 1;
    return 0;
}

/* Returns 0 if s[0..len) is valid UTF-8, else -EILSEQ and, when bad_offset is
 * not NULL, the byte offset of the first malformed sequence. */
int nd_utf8_validate(const char *s, size_t len, size_t *bad_offset);

/* Encodes cp (a valid scalar value) into out[4]; returns the byte count. */
size_t nd_utf8_encode(uint32_t cp, uint8_t out[4]);

#endif
