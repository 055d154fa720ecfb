/* fuzz_headers - what neardupd reads from the request line and headers
 * itself: Content-Type (server/core/request.c), Authorization and the token's own
 * syntax (server/ops/auth.c), and the percent-encoded document id of
 * /documents/{id} (server/core/request.c). Byte 0 picks which; the rest is the
 * value.
 *
 * Invariants: Content-Type gives a kind or a well-formed 415; a token is
 * accepted exactly when its syntax is right (an independent check); an
 * Authorization header is accepted only when it carries the token, and
 * "Bearer <token>" always is; nd_auth_equal() agrees with memcmp(); a decoded
 * id is 1..256 characters (at most 1024 bytes) of UTF-8 without control
 * characters. */
#include <errno.h>
#include <string.h>

#include "auth.h"
#include "fuzz_util.h"
#include "request.h"

#define TOKEN "s3cr3t-t0ken_for.fuzzing~0123456789+/=="

static nd_auth *auth;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    char err[256];
    bool loose;
    if (nd_auth_create(&auth, "", TOKEN, &loose, err, sizeof(err)) < 0 || !auth)
        abort();
    return 0;
}

static bool token_syntax(const char *s, size_t n)
{
    if (n < ND_AUTH_TOKEN_MIN || n > ND_AUTH_TOKEN_MAX)
        return false;
    size_t i = 0;
    while (i < n &&
           (strchr("-._~+/", s[i]) || (s[i] >= '0' && s[i] <= '9') ||
            (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')) &&
           s[i])
        i++;
    if (i == 0)
        return false;
    while (i < n && s[i] == '=')
        i++;
    return i == n;
}

static void content_type(const char *v)
{
    for (int plain = 0; plain < 2; plain++) {
        nd_request_error e;
        int kind = nd_request_content_kind(v, plain, &e);
        FUZZ_CHECK(kind == 0 || kind == ND_BODY_JSON || (plain && kind == ND_BODY_TEXT), "kind %d",
                   kind);
        if (!kind)
            FUZZ_CHECK(e.status == 415 && !strcmp(e.code, "unsupported_media_type"), "415");
    }
}

static void authorization(const char *v, size_t n)
{
    int rc = nd_auth_check(auth, v);
    FUZZ_CHECK(rc == ND_AUTH_OK || rc == ND_AUTH_MISSING || rc == ND_AUTH_INVALID, "rc %d", rc);
    if (rc == ND_AUTH_OK)
        FUZZ_CHECK(strstr(v, TOKEN) && n >= 7 + strlen(TOKEN), "accepted without the token");
    /* The value as a token of its own: loaded iff well formed. */
    nd_auth *other = NULL;
    char err[256];
    bool loose;
    int lrc = nd_auth_create(&other, "", v, &loose, err, sizeof(err));
    FUZZ_CHECK((lrc == 0) == token_syntax(v, n), "token syntax: %d", lrc);
    if (other) {
        char hdr[ND_AUTH_TOKEN_MAX + 16];
        snprintf(hdr, sizeof(hdr), "bEaReR \t%s ", v);
        FUZZ_CHECK(nd_auth_check(other, hdr) == ND_AUTH_OK, "own token refused");
        FUZZ_CHECK(nd_auth_check(other, TOKEN) == ND_AUTH_MISSING, "no scheme");
        nd_auth_destroy(other);
    }
}

static void equal(const uint8_t *d, size_t n)
{
    size_t half = n / 2;
    FUZZ_CHECK(nd_auth_equal(d, d + half, half) == (memcmp(d, d + half, half) == 0), "equal");
    FUZZ_CHECK(nd_auth_equal(d, d, n) == 1, "equal to itself");
}

static void document_id(const char *v)
{
    char *id = NULL;
    size_t len = 0;
    nd_request_error e;
    if (nd_request_parse_document_id(v, &id, &len, &e) < 0) {
        FUZZ_CHECK(!id && (e.status == 404 || e.status == 400 || e.status == 500), "refusal");
        FUZZ_CHECK(e.status != 404 || !*v, "404 for a non-empty id");
        return;
    }
    size_t chars = 0;
    for (size_t i = 0; i < len; i++)
        chars += ((unsigned char)id[i] & 0xC0) != 0x80;
    FUZZ_CHECK(len >= 1 && len <= 1024 && chars <= 256 && strlen(id) == len, "id length %zu", len);
    FUZZ_CHECK(fuzz_utf8_valid((const uint8_t *)id, len), "id not UTF-8");
    for (size_t i = 0; i < len; i++)
        FUZZ_CHECK((unsigned char)id[i] >= 0x20 && id[i] != 0x7f, "control character");
    free(id);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *v = fuzz_strndup(data + 1, size - 1);
    size_t n = strlen(v); /* headers end at NUL, as libevent's do */
    switch (data[0] & 3) {
    case 0: content_type(v); break;
    case 1: authorization(v, n); break;
    case 2: equal(data + 1, size - 1); break;
    case 3: document_id(v); break;
    }
    free(v);
    return 0;
}
