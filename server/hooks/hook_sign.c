/* hook_sign.c - HMAC-SHA256 of "<t>.<body>" with OpenSSL's EVP_MAC, fed in
 * pieces (the body is not copied). */
#include "hook_sign.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

int nd_hook_sign(const unsigned char *secret, size_t secret_len, int64_t t, const char *body,
                 size_t len, char out[ND_HOOK_SIGNATURE_MAX])
{
    out[0] = 0;
    char ts[24];
    int tn = snprintf(ts, sizeof(ts), "%" PRId64 ".", t);
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    if (!ctx) {
        EVP_MAC_free(mac);
        return -ENOMEM;
    }
    char digest_name[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
        OSSL_PARAM_construct_end(),
    };
    unsigned char md[EVP_MAX_MD_SIZE];
    size_t mdlen = 0;
    int ok = EVP_MAC_init(ctx, secret, secret_len, params) &&
             EVP_MAC_update(ctx, (const unsigned char *)ts, (size_t)tn) &&
             EVP_MAC_update(ctx, (const unsigned char *)body, len) &&
             EVP_MAC_final(ctx, md, &mdlen, sizeof(md)) && mdlen == 32;
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    if (!ok)
        return -EIO;
    int pos = snprintf(out, ND_HOOK_SIGNATURE_MAX, "t=%" PRId64 ",v1=", t);
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < mdlen; i++) {
        out[pos++] = hex[md[i] >> 4];
        out[pos++] = hex[md[i] & 15];
    }
    out[pos] = 0;
    return 0;
}
