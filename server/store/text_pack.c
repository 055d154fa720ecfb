/* text_pack.c - a kept text's stored form (text_pack.h): zstd. */
#include "text_pack.h"

#include <errno.h>
#include <stdlib.h>
#include <zstd.h>
#include <zstd_errors.h>

int nd_text_pack(const char *text, size_t len, uint8_t **out, size_t *out_len)
{
    if (len > ND_STORE_TEXT_MAX || (!text && len))
        return -EINVAL;
    size_t cap = 1 + ZSTD_compressBound(len);
    uint8_t *buf = malloc(cap);
    if (!buf)
        return -ENOMEM;
    buf[0] = ND_TEXT_PACK_ZSTD;
    /* ZSTD_compress() writes the content size into the frame header. */
    size_t n = ZSTD_compress(buf + 1, cap - 1, text ? text : "", len, ND_TEXT_PACK_LEVEL);
    if (ZSTD_isError(n)) {
        free(buf);
        return ZSTD_getErrorCode(n) == ZSTD_error_memory_allocation ? -ENOMEM : -EINVAL;
    }
    uint8_t *fit = realloc(buf, 1 + n); /* shrink: the bound is larger than the result */
    *out = fit ? fit : buf;
    *out_len = 1 + n;
    return 0;
}

int nd_text_packed_len(const uint8_t *p, size_t n, size_t *len)
{
    if (!p || n < 2 || p[0] != ND_TEXT_PACK_ZSTD)
        return -EBADMSG;
    unsigned long long size = ZSTD_getFrameContentSize(p + 1, n - 1);
    if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR ||
        size > ND_STORE_TEXT_MAX)
        return -EBADMSG;
    *len = (size_t)size;
    return 0;
}

int nd_text_unpack(const uint8_t *p, size_t n, char **out, size_t *len)
{
    size_t size;
    int rc = nd_text_packed_len(p, n, &size);
    if (rc)
        return rc;
    char *buf = malloc(size + 1);
    if (!buf)
        return -ENOMEM;
    size_t got = ZSTD_decompress(buf, size, p + 1, n - 1);
    if (ZSTD_isError(got) || got != size) {
        free(buf);
        return ZSTD_isError(got) && ZSTD_getErrorCode(got) == ZSTD_error_memory_allocation
                   ? -ENOMEM
                   : -EBADMSG;
    }
    buf[size] = '\0';
    *out = buf;
    *len = size;
    return 0;
}

int nd_text_pack_record(const nd_record *rec, const uint8_t **p, size_t *n, uint8_t **owned)
{
    size_t len;
    *p = NULL;
    *n = 0;
    *owned = NULL;
    if (rec->text_packed) {
        if (nd_text_packed_len(rec->text_packed, rec->text_packed_len, &len))
            return -EINVAL;
        *p = rec->text_packed;
        *n = rec->text_packed_len;
        return 0;
    }
    if (!rec->text)
        return rec->text_len ? -EINVAL : 0;
    int rc = nd_text_pack(rec->text, rec->text_len, owned, n);
    if (rc == 0)
        *p = *owned;
    return rc;
}
