/* auth.h - the bearer token: loading it, and checking an Authorization header
 * against it in constant time.
 *
 * The token comes from a file (--token-file / NEARDUP_TOKEN_FILE) or from the
 * environment (NEARDUP_TOKEN), never from a flag, whose value ps would show.
 * It is 16 to 256 characters of RFC 6750's b64token set
 * (A-Z a-z 0-9 - . _ ~ + / then optional trailing '='); a file may end in
 * white space (a newline), which is dropped.
 *
 * Which requests need it is the API's business (api.c): registering, DELETE
 * and admin endpoints; with --auth-all everything but /healthz and /readyz.
 *
 * The object is immutable after nd_auth_create() and may be shared by any
 * number of threads. */
#ifndef ND_AUTH_H
#define ND_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#define ND_AUTH_TOKEN_MIN 16
#define ND_AUTH_TOKEN_MAX 256

typedef struct nd_auth nd_auth;

enum nd_auth_result {
    ND_AUTH_OK = 0,      /* the right token */
    ND_AUTH_MISSING = 1, /* no Authorization header, or not the Bearer scheme */
    ND_AUTH_INVALID = 2, /* a bearer token, but not the right one */
};

/* Loads the token from the file at path (when path is not empty) or from
 * env_token (the value of NEARDUP_TOKEN, NULL when unset). Returns 0 with *out
 * a new object (free with nd_auth_destroy()), or with *out NULL when neither
 * is given (no authentication). Returns -EINVAL when both are given or the
 * token is malformed, or -errno when the file cannot be read; err[cap] then
 * says why (without the token). Sets *others_can_read when the file is
 * readable by other users: its group or everyone (mode bits 0040 or 0004). */
int nd_auth_create(nd_auth **out, const char *path, const char *env_token, bool *others_can_read,
                   char *err, size_t cap);

/* Wipes and frees the token; NULL is allowed. */
void nd_auth_destroy(nd_auth *a);

/* Checks the value of an Authorization header (NULL when absent):
 * "Bearer <token>", the scheme in any case. Returns an nd_auth_result. The
 * time taken does not depend on the token's contents or length, only on the
 * length of what was sent. Does not allocate. */
int nd_auth_check(const nd_auth *a, const char *authorization);

/* Compares a[0..n) with b[0..n) in time that depends on n only (no early
 * exit). Returns 1 when equal, else 0. */
int nd_auth_equal(const void *a, const void *b, size_t n);

#endif
