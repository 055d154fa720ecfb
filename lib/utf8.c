/* utf8.c - strict UTF-8 validation and encoding. */
#include "utf8.h"

#include <errno.h>
#include <string.h>

_Static_assert(EILSEQ == 84, "nd_utf8_decode spells -EILSEQ as -84");

int nd_utf8_validate(const char *s, size_t len, size_t *bad_offset)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t pos = 0;
    uint32_t cp;
    while (pos < len) {
        if (u[pos] < 0x80) {
            pos++;
            /* ASCII text: 8 bytes at a time */
            while (pos + 8 <= len) {
                uint64_t x;
                memcpy(&x, u + pos, 8);
                if (x & 0x8080808080808080ull)
                    break;
                pos += 8;
            }
            continue;
        }
        /* E1..EC and EE..EF with two continuation bytes: always a scalar
         * value (no overlong form, no surrogate); most CJK text */
        if (pos + 3 <= len && u[pos] >= 0xE1 && u[pos] <= 0xEF && u[pos] != 0xED &&
            ((u[pos + 1] & 0xC0) | (u[pos + 2] & 0xC0) << 8) == 0x8080) {
            pos += 3;
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
