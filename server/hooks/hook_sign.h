/* hook_sign.h - the signature of a webhook delivery: the header
 *   Neardup-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
 * (the scheme Stripe uses: the timestamp inside the MAC lets a receiver
 * refuse replays older than its tolerance). OpenSSL's EVP_MAC. */
#ifndef ND_HOOK_SIGN_H
#define ND_HOOK_SIGN_H

#include <stddef.h>
#include <stdint.h>

/* "t=" 20 digits ",v1=" 64 hex digits and the NUL. */
#define ND_HOOK_SIGNATURE_MAX 96

/* Writes the header's value for body (len bytes) signed with secret at
 * unix time t into out[ND_HOOK_SIGNATURE_MAX], NUL-terminated. Returns 0,
 * or -ENOMEM / -EIO (OpenSSL failed: out is ""). Any thread. */
int nd_hook_sign(const unsigned char *secret, size_t secret_len, int64_t t, const char *body,
                 size_t len, char out[ND_HOOK_SIGNATURE_MAX]);

#endif
