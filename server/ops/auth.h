/* auth.h - the bearer token: loading it, and checking an Authorization header
 * against it in constant time.
 *
 * The token comes from a file (--token-file / NEARDUP_TOKEN_FILE) or from the
 * environment (NEARDUP_TOKEN), never from a flag, whose value ps would show.
 * It is 16 to 256 characters of RFC 6750's b64token set
 * (A-Z a-z 0-9 - . _ ~ + / then optional trailing '='); a file may end in
 * white space (a newline), which is dropped.
 *
 * Named tokens: a token file may instead hold up to
 * ND_AUTH_TOKENS_MAX lines "NAME TOKEN" (NAME: 1 to 64 of A-Z a-z 0-9 - . _;
 * blank lines and lines starting with '#' are skipped; names and tokens
 * unique). A file of one bare token (and NEARDUP_TOKEN) is the client named
 * "default". The name of the token a request carried is its client, kept in
 * the audit log and the access log; a token is never logged.
 *
 * Roles: a named line may end in a third field, the token's role:
 *   NAME TOKEN                     a client (the tenant model): names any
 *                                  account in its checks and registrations,
 *                                  changes only the documents it registered
 *                                  (the API keeps the registering client
 *                                  with the stored record)
 *   NAME TOKEN operator            an operator: acts for every account, and
 *                                  may use the admin calls
 *   NAME TOKEN accounts=A[,B...]   acts for the accounts listed only (1 to
 *                                  ND_AUTH_ACCOUNTS_MAX, each 1 to
 *                                  ND_AUTH_ACCOUNT_MAX bytes without white
 *                                  space, ',' or control characters; unique;
 *                                  the list at most ND_AUTH_ACCOUNTS_TEXT_MAX)
 * A bare token (and NEARDUP_TOKEN) is the operator "default".
 *
 * Which requests need which right is the API's business (its routes table,
 * routes.c, and answer.c); with --auth-all every request but /healthz and
 * /readyz needs a token.
 *
 * The object is immutable after nd_auth_create() and may be shared by any
 * number of threads. */
#ifndef ND_AUTH_H
#define ND_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ND_AUTH_TOKEN_MIN 16
#define ND_AUTH_TOKEN_MAX 256
#define ND_AUTH_NAME_MAX 64            /* longest client name */
#define ND_AUTH_TOKENS_MAX 64          /* most named tokens in one file */
#define ND_AUTH_ACCOUNTS_MAX 32        /* most accounts one token acts for */
#define ND_AUTH_ACCOUNT_MAX 256        /* longest account in a token file, bytes */
#define ND_AUTH_ACCOUNTS_TEXT_MAX 1024 /* longest "A,B,..." list of one token */

typedef struct nd_auth nd_auth;

/* Who a token is: its client name and its role. Lives inside its nd_auth
 * (borrowed, valid for the nd_auth's life). */
typedef struct nd_auth_identity {
    char name[ND_AUTH_NAME_MAX + 1];
    bool is_operator;   /* acts for every account, may use admin calls */
    bool is_client;     /* a named token without a role: owns what it registers */
    unsigned naccounts; /* an account token: the accounts listed (>= 1); else 0 */
    uint16_t account_off[ND_AUTH_ACCOUNTS_MAX], account_len[ND_AUTH_ACCOUNTS_MAX];
    char accounts[ND_AUTH_ACCOUNTS_TEXT_MAX]; /* the list as given; off/len index it */
} nd_auth_identity;

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

/* Parses the contents of a token file, text[0..len) (see above), into *out
 * (new; free with nd_auth_destroy()). where names the source in messages.
 * Returns 0, -EINVAL with err[cap] saying why (never quoting a token), or
 * -ENOMEM. For nd_auth_create() and the fuzz target. */
int nd_auth_parse(nd_auth **out, const char *text, size_t len, const char *where, char *err,
                  size_t cap);

/* The number of tokens, and the name of the i-th (borrowed, NUL-terminated). */
size_t nd_auth_count(const nd_auth *a);
const char *nd_auth_name(const nd_auth *a, size_t i);

/* The roles a token file's line may give, as --help lists them: one line
 * "  ROLE  what it may do" each (the role field as written: "operator",
 * "accounts=A[,B...]", and "(none)" for a named line without one), after a
 * heading. Test_auth_roles parses each role listed. */
void nd_auth_usage(FILE *out);

/* Wipes and frees the token; NULL is allowed. */
void nd_auth_destroy(nd_auth *a);

/* Checks the value of an Authorization header (NULL when absent):
 * "Bearer <token>", the scheme in any case. Returns an nd_auth_result. The
 * time taken does not depend on the token's contents or length, only on the
 * length of what was sent. Does not allocate. */
int nd_auth_check(const nd_auth *a, const char *authorization);

/* nd_auth_check() that also reports which token matched: on ND_AUTH_OK,
 * *name (when name is not NULL) is that token's client name (borrowed from
 * a, valid for its life); otherwise NULL. Every token is compared (the time
 * depends on how many there are, not on which one matched). */
int nd_auth_check_named(const nd_auth *a, const char *authorization, const char **name);

/* nd_auth_check_named() that reports the whole identity of the token that
 * matched: on ND_AUTH_OK, *who (when who is not NULL) is it (borrowed from
 * a); otherwise NULL. Constant time over the tokens as above. */
int nd_auth_check_identity(const nd_auth *a, const char *authorization,
                           const nd_auth_identity **who);

/* The identity of the i-th token (borrowed), or NULL past the last. */
const nd_auth_identity *nd_auth_identity_at(const nd_auth *a, size_t i);

/* True when who may act for account[0..len): an operator for every
 * account, an account token for the accounts it lists; a client for none
 * (it changes the documents it registered only). who NULL: false. */
bool nd_auth_may_act_for(const nd_auth_identity *who, const char *account, size_t len);

/* The i-th account of who (borrowed, not NUL-terminated; *len set), or NULL
 * past the last (and for an operator or a client). */
const char *nd_auth_account(const nd_auth_identity *who, unsigned i, size_t *len);

/* Compares a[0..n) with b[0..n) in time that depends on n only (no early
 * exit). Returns 1 when equal, else 0. */
int nd_auth_equal(const void *a, const void *b, size_t n);

#endif
