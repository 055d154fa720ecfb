/* retention.c - the detections a full copies list drops (retention.h). */
#include "retention.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

typedef struct slot {
    XXH128_hash_t h; /* of the account's raw bytes; entries without one: of "" with used 2 */
    uint32_t group;  /* index into the groups' arrays */
    uint8_t used;    /* 0 free, 1 an account, 2 no account */
} slot;

struct nd_retention {
    slot *table;
    size_t cap; /* power of two */
    size_t ngroups;
    /* per group */
    uint32_t *count;
    int64_t *last_at;
    size_t gcap;
    /* per entry, oldest first */
    int64_t *at;
    uint32_t *group;
    size_t n, ecap;
};

uint64_t nd_retention_target(uint64_t max)
{
    return max - max / 64;
}

nd_retention *nd_retention_new(size_t hint)
{
    nd_retention *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->cap = 64;
    t->gcap = 16;
    t->ecap = hint ? hint : 16;
    t->table = calloc(t->cap, sizeof(slot));
    t->count = malloc(t->gcap * sizeof(uint32_t));
    t->last_at = malloc(t->gcap * sizeof(int64_t));
    t->at = malloc(t->ecap * sizeof(int64_t));
    t->group = malloc(t->ecap * sizeof(uint32_t));
    if (!t->table || !t->count || !t->last_at || !t->at || !t->group) {
        nd_retention_free(t);
        return NULL;
    }
    return t;
}

void nd_retention_free(nd_retention *t)
{
    if (!t)
        return;
    free(t->table);
    free(t->count);
    free(t->last_at);
    free(t->at);
    free(t->group);
    free(t);
}

/* The end of the JSON string whose opening quote is at s[i] (the index
 * after its closing quote), or 0 when it does not end. */
static size_t string_end(const char *s, size_t n, size_t i)
{
    for (i++; i < n;) {
        const char *q = memchr(s + i, '"', n - i);
        if (!q)
            return 0;
        size_t at = (size_t)(q - s), bs = 0;
        while (at - bs > i && s[at - bs - 1] == '\\')
            bs++;
        if (bs % 2 == 0)
            return at + 1;
        i = at + 1;
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

static size_t slot_of(const slot *table, size_t cap, XXH128_hash_t h, uint8_t used)
{
    size_t k = (size_t)h.low64 & (cap - 1);
    while (table[k].used &&
           !(table[k].used == used && table[k].h.low64 == h.low64 && table[k].h.high64 == h.high64))
        k = (k + 1) & (cap - 1);
    return k;
}

/* Doubles t's table. Returns 0 or -ENOMEM. */
static int grow_table(nd_retention *t)
{
    size_t cap = t->cap * 2;
    slot *table = calloc(cap, sizeof(slot));
    if (!table)
        return -ENOMEM;
    for (size_t i = 0; i < t->cap; i++)
        if (t->table[i].used)
            table[slot_of(table, cap, t->table[i].h, t->table[i].used)] = t->table[i];
    free(t->table);
    t->table = table;
    t->cap = cap;
    return 0;
}

static int grow(void **p, size_t *cap, size_t size)
{
    void *q = realloc(*p, *cap * 2 * size);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap *= 2;
    return 0;
}

int nd_retention_add(nd_retention *t, const char *value, size_t len, int64_t at_us)
{
    const char *acc = NULL;
    size_t acc_len = 0;
    uint8_t used = nd_retention_account(value, len, &acc, &acc_len) == 0 ? 1 : 2;
    XXH128_hash_t h = used == 1 ? XXH3_128bits(acc, acc_len) : XXH3_128bits("", 0);
    if (2 * (t->ngroups + 1) > t->cap && grow_table(t) < 0)
        return -ENOMEM;
    if (t->n == t->ecap) {
        size_t ecap = t->ecap;
        if (grow((void **)&t->at, &ecap, sizeof(int64_t)) < 0 ||
            grow((void **)&t->group, &t->ecap, sizeof(uint32_t)) < 0)
            return -ENOMEM;
    }
    size_t k = slot_of(t->table, t->cap, h, used);
    if (!t->table[k].used) {
        if (t->ngroups == t->gcap) {
            size_t gcap = t->gcap;
            if (grow((void **)&t->count, &gcap, sizeof(uint32_t)) < 0 ||
                grow((void **)&t->last_at, &t->gcap, sizeof(int64_t)) < 0)
                return -ENOMEM;
        }
        t->table[k] = (slot){h, (uint32_t)t->ngroups, used};
        t->count[t->ngroups++] = 0;
    }
    uint32_t g = t->table[k].group;
    t->count[g]++;
    t->last_at[g] = at_us;
    t->at[t->n] = at_us;
    t->group[t->n++] = g;
    return 0;
}

int64_t nd_retention_victims(nd_retention *t, size_t k, int64_t *at)
{
    if (k > t->n)
        k = t->n;
    if (k == 0)
        return 0;
    /* Each group's entries, oldest first: a counting sort of the entries
     * by group (head: the group's next entry to drop). */
    size_t G = t->ngroups;
    size_t *head = malloc((G + 1) * sizeof(size_t));
    uint32_t *order = malloc(t->n * sizeof(uint32_t));
    if (!head || !order) {
        free(head);
        free(order);
        return -ENOMEM;
    }
    head[0] = 0;
    for (size_t g = 0; g < G; g++)
        head[g + 1] = head[g] + t->count[g];
    for (size_t i = 0; i < t->n; i++)
        order[head[t->group[i]]++] = (uint32_t)i;
    for (size_t g = 0; g < G; g++) /* back to each group's start */
        head[g] -= t->count[g];
    size_t out = 0;
    for (; out < k; out++) {
        size_t best = G;
        for (size_t g = 0; g < G; g++)
            if (t->count[g] &&
                (best == G || t->count[g] > t->count[best] ||
                 (t->count[g] == t->count[best] && t->last_at[g] > t->last_at[best])))
                best = g;
        if (best == G)
            break;
        at[out] = t->at[order[head[best]++]];
        t->count[best]--;
    }
    free(head);
    free(order);
    return (int64_t)out;
}
