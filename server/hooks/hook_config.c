/* hook_config.c - the webhook subscriptions' file: read with jansson,
 * validated member by member, secrets read from their files. */
#include "hook_config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "log.h"

static const char *const known_types[] = {
    "copy.detected",  "claim.revoked",    "claim.restored",
    "policy.changed", "document.deleted", "import.finished",
};

bool nd_hook_config_type_known(const char *type)
{
    for (size_t i = 0; i < sizeof(known_types) / sizeof(known_types[0]); i++)
        if (strcmp(type, known_types[i]) == 0)
            return true;
    return false;
}

static bool in_list(char *const *list, size_t n, const char *s, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(list[i]) == len && memcmp(list[i], s, len) == 0)
            return true;
    return false;
}

bool nd_hook_config_wants(const nd_hook_sub_config *s, const char *type, const char *account,
                          size_t account_len)
{
    if (s->ntypes && !in_list(s->types, s->ntypes, type, strlen(type)))
        return false;
    if (s->naccounts &&
        (!account || !account_len || !in_list(s->accounts, s->naccounts, account, account_len)))
        return false;
    return true;
}

static void wipe_free(unsigned char *p, size_t n)
{
    if (p)
        explicit_bzero(p, n);
    free(p);
}

static void free_list(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

void nd_hook_config_destroy(nd_hook_config *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nsubs; i++) {
        nd_hook_sub_config *s = &c->subs[i];
        free(s->url);
        free(s->ca_file);
        wipe_free(s->secret, s->secret_len);
        free_list(s->types, s->ntypes);
        free_list(s->accounts, s->naccounts);
    }
    free(c->subs);
    free(c);
}

/* The reading's context: the file's name for every message. */
typedef struct reader {
    const char *path;
    char *err;
    size_t cap;
} reader;

__attribute__((format(printf, 2, 3))) static int fail(reader *rd, const char *fmt, ...)
{
    int n = snprintf(rd->err, rd->cap, "webhooks file %s: ", rd->path);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < rd->cap)
        vsnprintf(rd->err + n, rd->cap - (size_t)n, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > ND_HOOK_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
            return false;
    return s[0] != '.';
}

/* An http or https URL that libcurl parses, without credentials. */
static int check_url(reader *rd, const char *name, const char *url)
{
    if (strlen(url) > ND_HOOK_URL_MAX)
        return fail(rd, "subscription %s: url longer than %d bytes", name, ND_HOOK_URL_MAX);
    CURLU *u = curl_url();
    if (!u)
        return -ENOMEM;
    char *scheme = NULL, *host = NULL, *user = NULL;
    int rc = 0;
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK)
        rc = fail(rd, "subscription %s: url is not a valid absolute URL", name);
    else if (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0)
        rc = fail(rd, "subscription %s: url must be http or https, not %s", name, scheme);
    else if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK)
        rc = fail(rd, "subscription %s: url must not carry credentials", name);
    curl_free(scheme);
    curl_free(host);
    curl_free(user);
    curl_url_cleanup(u);
    return rc;
}

static int read_secret_file(reader *rd, nd_hook_sub_config *s, const char *file)
{
    FILE *f = fopen(file, "re");
    struct stat st;
    if (!f || fstat(fileno(f), &st) < 0) {
        int e = errno;
        if (f)
            fclose(f);
        fail(rd, "subscription %s: cannot open secret_file %s: %s", s->name, file, strerror(e));
        return -EINVAL;
    }
    unsigned char *buf = malloc(ND_HOOK_SECRET_MAX + 2);
    size_t n = buf && S_ISREG(st.st_mode) ? fread(buf, 1, ND_HOOK_SECRET_MAX + 2, f) : 0;
    fclose(f);
    if (!buf)
        return -ENOMEM;
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    if (n < ND_HOOK_SECRET_MIN || n > ND_HOOK_SECRET_MAX) {
        wipe_free(buf, ND_HOOK_SECRET_MAX + 2);
        return fail(rd, "subscription %s: secret_file %s must be a regular file of %d to %d bytes",
                    s->name, file, ND_HOOK_SECRET_MIN, ND_HOOK_SECRET_MAX);
    }
    if (st.st_mode & (S_IRGRP | S_IROTH))
        nd_log(ND_LOG_WARN, "the webhook secret file %s is readable by other users (chmod 600 it)",
               file);
    s->secret = buf;
    s->secret_len = n;
    return 0;
}

/* A list of 1..ND_HOOK_FILTER_MAX non-empty strings into *list, *n. */
static int read_list(reader *rd, const char *name, const char *key, json_t *v, char ***list,
                     size_t *n)
{
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > ND_HOOK_FILTER_MAX)
        return fail(rd, "subscription %s: %s must be an array of 1 to %d strings", name, key,
                    ND_HOOK_FILTER_MAX);
    *list = calloc(json_array_size(v), sizeof(char *));
    if (!*list)
        return -ENOMEM;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        const char *str = json_string_value(e);
        if (!str || !str[0] || strlen(str) > 256)
            return fail(rd, "subscription %s: %s[%zu] must be a string of 1 to 256 bytes", name,
                        key, i);
        if (strcmp(key, "types") == 0 && !nd_hook_config_type_known(str))
            return fail(rd,
                        "subscription %s: types[%zu] \"%s\" is not an event type (copy.detected, "
                        "claim.revoked, claim.restored, policy.changed, document.deleted, "
                        "import.finished)",
                        name, i, str);
        if (!((*list)[i] = strdup(str)))
            return -ENOMEM;
        (*n)++;
    }
    return 0;
}

static int read_uint(reader *rd, const char *name, const char *key, json_t *v, unsigned min,
                     unsigned max, unsigned *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return fail(rd, "subscription %s: %s must be an integer from %u to %u", name, key, min,
                    max);
    *out = (unsigned)json_integer_value(v);
    return 0;
}

static int read_sub(reader *rd, json_t *o, size_t index, nd_hook_sub_config *s)
{
    if (!json_is_object(o))
        return fail(rd, "subscriptions[%zu] must be an object", index);
    json_t *jname = json_object_get(o, "name");
    const char *name = json_string_value(jname);
    if (!name || !name_ok(name))
        return fail(rd,
                    "subscriptions[%zu]: name must be 1 to %d characters of A-Z a-z 0-9 . _ - "
                    "(not starting with '.')",
                    index, ND_HOOK_NAME_MAX);
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->timeout_ms = 10000;
    s->backoff_base_ms = 1000;
    s->backoff_cap_ms = 300000;
    s->pause_after_s = 86400;
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(o, key, v)
    {
        if (strcmp(key, "name") == 0)
            continue;
        if (strcmp(key, "url") == 0) {
            if (!json_is_string(v))
                return fail(rd, "subscription %s: url must be a string", name);
            if ((rc = check_url(rd, name, json_string_value(v))) < 0)
                return rc;
            if (!(s->url = strdup(json_string_value(v))))
                return -ENOMEM;
        } else if (strcmp(key, "secret") == 0) {
            size_t n = json_string_length(v);
            if (!json_is_string(v) || n < ND_HOOK_SECRET_MIN || n > ND_HOOK_SECRET_MAX)
                return fail(rd, "subscription %s: secret must be a string of %d to %d bytes", name,
                            ND_HOOK_SECRET_MIN, ND_HOOK_SECRET_MAX);
            if (s->secret)
                return fail(rd, "subscription %s: give secret or secret_file, not both", name);
            if (!(s->secret = malloc(n)))
                return -ENOMEM;
            memcpy(s->secret, json_string_value(v), n);
            s->secret_len = n;
        } else if (strcmp(key, "secret_file") == 0) {
            if (!json_is_string(v) || !json_string_length(v))
                return fail(rd, "subscription %s: secret_file must be a path", name);
            if (s->secret)
                return fail(rd, "subscription %s: give secret or secret_file, not both", name);
            if ((rc = read_secret_file(rd, s, json_string_value(v))) < 0)
                return rc;
        } else if (strcmp(key, "ca_file") == 0) {
            const char *ca = json_string_value(v);
            if (!ca || !ca[0])
                return fail(rd, "subscription %s: ca_file must be a path", name);
            if (access(ca, R_OK) < 0)
                return fail(rd, "subscription %s: cannot read ca_file %s: %s", name, ca,
                            strerror(errno));
            if (!(s->ca_file = strdup(ca)))
                return -ENOMEM;
        } else if (strcmp(key, "types") == 0) {
            if ((rc = read_list(rd, name, key, v, &s->types, &s->ntypes)) < 0)
                return rc;
        } else if (strcmp(key, "accounts") == 0) {
            if ((rc = read_list(rd, name, key, v, &s->accounts, &s->naccounts)) < 0)
                return rc;
        } else if (strcmp(key, "timeout_ms") == 0) {
            if ((rc = read_uint(rd, name, key, v, 100, 600000, &s->timeout_ms)) < 0)
                return rc;
        } else if (strcmp(key, "backoff_base_ms") == 0) {
            if ((rc = read_uint(rd, name, key, v, 1, 3600000, &s->backoff_base_ms)) < 0)
                return rc;
        } else if (strcmp(key, "backoff_cap_ms") == 0) {
            if ((rc = read_uint(rd, name, key, v, 1, 86400000, &s->backoff_cap_ms)) < 0)
                return rc;
        } else if (strcmp(key, "pause_after_s") == 0) {
            if ((rc = read_uint(rd, name, key, v, 1, 30 * 86400, &s->pause_after_s)) < 0)
                return rc;
        } else if (strcmp(key, "start") == 0) {
            const char *st = json_string_value(v);
            if (!st || (strcmp(st, "latest") != 0 && strcmp(st, "oldest") != 0))
                return fail(rd, "subscription %s: start must be \"latest\" or \"oldest\"", name);
            s->start_oldest = strcmp(st, "oldest") == 0;
        } else {
            return fail(rd, "subscription %s: unknown member \"%s\"", name, key);
        }
    }
    if (!s->url)
        return fail(rd, "subscription %s: url is missing", name);
    if (!s->secret)
        return fail(rd, "subscription %s: secret or secret_file is missing", name);
    if (s->backoff_cap_ms < s->backoff_base_ms)
        return fail(rd, "subscription %s: backoff_cap_ms is below backoff_base_ms", name);
    return 0;
}

static int read_config(reader *rd, json_t *root, nd_hook_config *c)
{
    if (!json_is_object(root))
        return fail(rd, "the top level must be an object {\"subscriptions\": [...]}");
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "subscriptions") != 0)
            return fail(rd, "unknown member \"%s\" (only \"subscriptions\")", key);
    }
    json_t *subs = json_object_get(root, "subscriptions");
    if (!json_is_array(subs) || json_array_size(subs) > ND_HOOK_SUBS_MAX)
        return fail(rd, "\"subscriptions\" must be an array of at most %d subscriptions",
                    ND_HOOK_SUBS_MAX);
    size_t n = json_array_size(subs);
    if (n && !(c->subs = calloc(n, sizeof(*c->subs))))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        c->nsubs = i + 1; /* what destroy frees */
        int rc = read_sub(rd, json_array_get(subs, i), i, &c->subs[i]);
        if (rc < 0)
            return rc;
        for (size_t j = 0; j < i; j++)
            if (strcmp(c->subs[j].name, c->subs[i].name) == 0)
                return fail(rd, "two subscriptions are named %s", c->subs[i].name);
    }
    return 0;
}

int nd_hook_config_load(nd_hook_config **out, const char *path, char *err, size_t cap)
{
    *out = NULL;
    reader rd = {.path = path, .err = err, .cap = cap};
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        int rc = jerr.position == 0 && jerr.line <= 1 && strstr(jerr.text, "unable to open")
                     ? -ENOENT
                     : -EINVAL;
        snprintf(err, cap, "webhooks file %s: %s (line %d, column %d)", path, jerr.text, jerr.line,
                 jerr.column);
        return rc;
    }
    nd_hook_config *c = calloc(1, sizeof(*c));
    int rc = c ? read_config(&rd, root, c) : -ENOMEM;
    json_decref(root);
    if (rc < 0) {
        if (rc == -ENOMEM)
            snprintf(err, cap, "webhooks file %s: out of memory", path);
        nd_hook_config_destroy(c);
        return rc;
    }
    *out = c;
    return 0;
}
