/* utf8.c - strict UTF-8 validation and encoding. */
#include "utf8.h"

#include <errno.h>

_Static_assert(EILSEQ == 84, "nd_utf8_decode spells -EILSEQ as -84");

int nd_utf8_validate(const char *s, size_t len, size_t *bad_offset)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t pos = 0;
    uint32_t cp;
    while (pos < len) {
        if (u[pos] < 0x80) {
            pos++;
            continue;
        }
        if (nd_utf8_decode(u, len, &pos, &cp) != 0) {
            if (bad_offset)
                *bad_offset = pos;
            return -EILSEQ;
        }
    }
    return 0;
}

size_t nd_utf8_encode(uint32_t cp, uint8_t out[4])
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}
