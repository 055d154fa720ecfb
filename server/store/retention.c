/* retention.c - the detection a full copies list drops (retention.h). */
#include "retention.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

typedef struct group {
    const char *account; /* NULL: the entries without one */
    size_t len;
    uint64_t count;
    int64_t first_at, last_at;
    bool used;
} group;

struct nd_retention {
    group *g;
    size_t cap; /* power of two */
    size_t n;
};

nd_retention *nd_retention_new(size_t hint)
{
    nd_retention *t = calloc(1, sizeof(*t));
    size_t cap = 16;
    while (cap < 2 * hint && cap < ((size_t)1 << 30))
        cap *= 2;
    if (t && !(t->g = calloc(cap, sizeof(group)))) {
        free(t);
        return NULL;
    }
    if (t)
        t->cap = cap;
    return t;
}

void nd_retention_free(nd_retention *t)
{
    if (!t)
        return;
    free(t->g);
    free(t);
}

/* The end of the JSON string whose opening quote is at s[i] (the index
 * after its closing quote), or 0 when it does not end. */
static size_t string_end(const char *s, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == '"')
            return i + 1;
    }
    return 0;
}

/* The end of the JSON value at s[i] (strings, nested objects and arrays,
 * scalars), or 0 when it does not end. */
static size_t value_end(const char *s, size_t n, size_t i)
{
    if (i < n && s[i] == '"')
        return string_end(s, n, i);
    unsigned depth = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (c == '"') {
            size_t e = string_end(s, n, i);
            if (!e)
                return 0;
            i = e - 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth == 0)
                return i;
            depth--;
        } else if (c == ',' && depth == 0) {
            return i;
        }
    }
    return 0;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

int nd_retention_account(const char *s, size_t n, const char **account, size_t *account_len)
{
    size_t i = 0;
    while (i < n && is_ws(s[i]))
        i++;
    if (i >= n || s[i] != '{')
        return -ENOENT;
    for (i++; i < n;) {
        while (i < n && (is_ws(s[i]) || s[i] == ','))
            i++;
        if (i >= n || s[i] != '"')
            return -ENOENT; /* the end '}', or not an object we read */
        size_t ke = string_end(s, n, i);
        if (!ke)
            return -ENOENT;
        bool is_account = ke - i == 9 && memcmp(s + i, "\"account\"", 9) == 0;
        i = ke;
        while (i < n && is_ws(s[i]))
            i++;
        if (i >= n || s[i] != ':')
            return -ENOENT;
        i++;
        while (i < n && is_ws(s[i]))
            i++;
        size_t ve = value_end(s, n, i);
        if (!ve)
            return -ENOENT;
        if (is_account && s[i] == '"') {
            *account = s + i + 1;
            *account_len = ve - i - 2;
            return 0;
        }
        i = ve;
    }
    return -ENOENT;
}

/* Doubles t's table. Returns 0 or -ENOMEM. */
static int grow(nd_retention *t)
{
    size_t cap = t->cap * 2;
    group *g = calloc(cap, sizeof(group));
    if (!g)
        return -ENOMEM;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->g[i].used)
            continue;
        size_t k = (size_t)XXH3_64bits(t->g[i].account, t->g[i].len) & (cap - 1);
        while (g[k].used)
            k = (k + 1) & (cap - 1);
        g[k] = t->g[i];
    }
    free(t->g);
    t->g = g;
    t->cap = cap;
    return 0;
}

int nd_retention_add(nd_retention *t, const char *value, size_t len, int64_t at_us)
{
    const char *acc = NULL;
    size_t acc_len = 0;
    if (nd_retention_account(value, len, &acc, &acc_len) < 0)
        acc = NULL;
    if (2 * (t->n + 1) > t->cap && grow(t) < 0)
        return -ENOMEM;
    size_t k = (size_t)XXH3_64bits(acc, acc ? acc_len : 0) & (t->cap - 1);
    for (;; k = (k + 1) & (t->cap - 1)) {
        group *g = &t->g[k];
        if (!g->used) {
            *g = (group){acc, acc ? acc_len : 0, 1, at_us, at_us, true};
            t->n++;
            return 0;
        }
        if ((g->account == NULL) == (acc == NULL) && g->len == (acc ? acc_len : 0) &&
            (!acc || memcmp(g->account, acc, acc_len) == 0)) {
            g->count++;
            g->last_at = at_us;
            return 0;
        }
    }
}

int64_t nd_retention_pick(const nd_retention *t)
{
    const group *best = NULL;
    for (size_t i = 0; i < t->cap; i++) {
        const group *g = &t->g[i];
        if (g->used && (!best || g->count > best->count ||
                        (g->count == best->count && g->last_at > best->last_at)))
            best = g;
    }
    return best ? best->first_at : -1;
}
