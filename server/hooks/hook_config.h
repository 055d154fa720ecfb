/* hook_config.h - the webhook subscriptions, read from a JSON file
 * (--webhooks PATH or NEARDUP_WEBHOOKS) once at start-up and read-only
 * afterwards. A file, not the store or an endpoint: the secrets stay out of
 * the store, its backups, the replication stream and every answer.
 *
 * The file:
 *   {"subscriptions": [
 *     {"name": "review-queue",                 1..64 of [A-Za-z0-9._-], unique
 *      "url": "https://example.com/hook",      http or https
 *      "secret": "...", or "secret_file": PATH  16..4096 bytes (a file's last
 *                                               line end is dropped)
 *      "ca_file": PATH,                         optional: the CA certificates (PEM)
 *                                               an https receiver is verified with
 *                                               (default: the system's)
 *      "types": ["copy.detected"],             optional: only these types
 *      "accounts": ["acme"],                   optional: only these accounts
 *      "timeout_ms": 10000,                    one attempt's deadline
 *      "backoff_base_ms": 1000, "backoff_cap_ms": 300000,
 *      "pause_after_s": 86400,                 failing this long: paused
 *      "start": "latest" | "oldest"}]}         where a new subscription begins
 * Unknown members are refused (a typo never silently means a default). */
#ifndef ND_HOOK_CONFIG_H
#define ND_HOOK_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#define ND_HOOK_NAME_MAX 64     /* longest subscription name, bytes */
#define ND_HOOK_URL_MAX 2048    /* longest URL, bytes */
#define ND_HOOK_SECRET_MIN 16   /* shortest secret, bytes */
#define ND_HOOK_SECRET_MAX 4096 /* longest secret, bytes */
#define ND_HOOK_FILTER_MAX 64   /* most types or accounts in one filter */
#define ND_HOOK_SUBS_MAX 64     /* most subscriptions */

typedef struct nd_hook_sub_config {
    char name[ND_HOOK_NAME_MAX + 1];
    char *url;             /* owned */
    char *ca_file;         /* owned; NULL: the system's CA certificates */
    unsigned char *secret; /* owned; wiped when freed */
    size_t secret_len;
    char **types; /* owned; NULL with 0: every type */
    size_t ntypes;
    char **accounts; /* owned; NULL with 0: every account */
    size_t naccounts;
    unsigned timeout_ms;      /* one attempt's deadline (10000) */
    unsigned backoff_base_ms; /* first retry's upper bound (1000) */
    unsigned backoff_cap_ms;  /* largest retry delay (300000) */
    unsigned pause_after_s;   /* failing this long pauses it (86400) */
    bool start_oldest;        /* a new subscription begins at the oldest kept
                               * event (false: after the latest at start) */
} nd_hook_sub_config;

typedef struct nd_hook_config {
    nd_hook_sub_config *subs; /* owned */
    size_t nsubs;
} nd_hook_config;

/* Reads and validates the file at path. Returns 0 and a new configuration
 * in *out (free with nd_hook_config_destroy()), or -errno (-ENOENT,
 * -EACCES: the file; -EINVAL: its content; -ENOMEM) with a one-line reason
 * naming the file and the member in err[cap] (never a secret). */
int nd_hook_config_load(nd_hook_config **out, const char *path, char *err, size_t cap);

/* Frees c, wiping the secrets; NULL is allowed. */
void nd_hook_config_destroy(nd_hook_config *c);

/* True when a subscription's filters let an event of type (NUL-terminated)
 * about account (account_len bytes; NULL or 0: none) through. Does not
 * allocate. */
bool nd_hook_config_wants(const nd_hook_sub_config *s, const char *type, const char *account,
                          size_t account_len);

/* True for the event types an event may have (copy.detected, ...). */
bool nd_hook_config_type_known(const char *type);

#endif
