/* text_pack.c - a kept text's stored form (text_pack.h): zstd.
 *
 * Each thread keeps one compression and one decompression context (made on
 * its first use, freed when it exits): a context made per call costs more
 * than packing a short text does (dev corpus, level 3: 38.5 us a document
 * with a new context, 29.6 reused; the bench_import texts 24.6 and 11.0). */
#include "text_pack.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <zstd.h>
#include <zstd_errors.h>

static pthread_key_t cctx_key, dctx_key;
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;
static int keys_rc;

static void free_cctx(void *p)
{
    ZSTD_freeCCtx(p);
}

static void free_dctx(void *p)
{
    ZSTD_freeDCtx(p);
}

static void make_keys(void)
{
    keys_rc = pthread_key_create(&cctx_key, free_cctx);
    if (keys_rc == 0 && (keys_rc = pthread_key_create(&dctx_key, free_dctx)) != 0)
        pthread_key_delete(cctx_key);
}

static void *make_cctx(void)
{
    return ZSTD_createCCtx();
}

static void *make_dctx(void)
{
    return ZSTD_createDCtx();
}

/* This thread's context under key (made by make, freed by drop at the
 * thread's exit), or NULL (out of memory). */
static void *thread_ctx(pthread_key_t *key, void *(*make)(void), void (*drop)(void *))
{
    if (pthread_once(&keys_once, make_keys) || keys_rc)
        return NULL;
    void *c = pthread_getspecific(*key);
    if (!c && (c = make()) && pthread_setspecific(*key, c)) {
        drop(c);
        c = NULL;
    }
    return c;
}

int nd_text_pack(const char *text, size_t len, uint8_t **out, size_t *out_len)
{
    if (len > ND_STORE_TEXT_MAX || (!text && len))
        return -EINVAL;
    size_t cap = 1 + ZSTD_compressBound(len);
    ZSTD_CCtx *cc = thread_ctx(&cctx_key, make_cctx, free_cctx);
    uint8_t *buf = cc ? malloc(cap) : NULL;
    if (!buf)
        return -ENOMEM;
    buf[0] = ND_TEXT_PACK_ZSTD;
    /* ZSTD_compressCCtx() writes the content size into the frame header. */
    size_t n = ZSTD_compressCCtx(cc, buf + 1, cap - 1, text ? text : "", len, ND_TEXT_PACK_LEVEL);
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
    ZSTD_DCtx *dc = thread_ctx(&dctx_key, make_dctx, free_dctx);
    char *buf = dc ? malloc(size + 1) : NULL;
    if (!buf)
        return -ENOMEM;
    size_t got = ZSTD_decompressDCtx(dc, buf, size, p + 1, n - 1);
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
