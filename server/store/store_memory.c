/* store_memory.c - the memory store (see store_memory.h). */
#include "store_memory.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* One record: rec's pointers point into data (id, version, meta, anchors,
 * sketch; version and meta NUL-terminated as the LMDB store gives them). */
typedef struct mem_rec {
    struct mem_rec *next; /* hash chain */
    nd_record rec;
    unsigned char data[];
} mem_rec;

typedef struct mem_store {
    nd_store_base base; /* first: the interface */
    pthread_rwlock_t lock;
    mem_rec **buckets;
    size_t nbuckets; /* power of two */
    size_t count;
    _Atomic uint64_t commits, failed;
} mem_store;

static mem_store *ms_of(const nd_store *st)
{
    return (mem_store *)(void *)nd_store_base_of(st);
}

static size_t bucket_of(const mem_store *ms, int64_t at)
{
    uint64_t h = (uint64_t)at * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (ms->nbuckets - 1);
}

/* The record at time at, and the link that points at it. Lock held. */
static mem_rec **find(mem_store *ms, int64_t at)
{
    mem_rec **pp = &ms->buckets[bucket_of(ms, at)];
    while (*pp && (*pp)->rec.registered_at_us != at)
        pp = &(*pp)->next;
    return pp;
}

/* Doubles the table when it is 3/4 full. Write lock held. A failed growth
 * only leaves the chains longer. */
static void grow(mem_store *ms)
{
    if (ms->count * 4 < ms->nbuckets * 3)
        return;
    size_t nb = ms->nbuckets * 2;
    mem_rec **b = calloc(nb, sizeof(*b));
    if (!b)
        return;
    for (size_t i = 0; i < ms->nbuckets; i++)
        for (mem_rec *r = ms->buckets[i], *next; r; r = next) {
            next = r->next;
            uint64_t h = (uint64_t)r->rec.registered_at_us * 0x9E3779B97F4A7C15ull;
            size_t j = (size_t)(h >> 32) & (nb - 1);
            r->next = b[j];
            b[j] = r;
        }
    free(ms->buckets);
    ms->buckets = b;
    ms->nbuckets = nb;
}

/* The checks of the LMDB store's record_ok(). */
static bool record_ok(const nd_record *r)
{
    if (!r || !r->id || r->id_len == 0 || r->id_len > ND_ID_MAX || !r->version ||
        r->registered_at_us < 0)
        return false;
    size_t vlen = strnlen(r->version, ND_VERSION_MAX + 1);
    return vlen > 0 && vlen <= ND_VERSION_MAX && r->meta_len <= ND_META_MAX &&
           (r->meta || !r->meta_len) && r->nanchors <= ND_STORE_ANCHORS_MAX &&
           (r->anchors || !r->nanchors) && r->sketch_len <= ND_STORE_SKETCH_MAX &&
           (r->sketch || !r->sketch_len);
}

/* A copy of r in one allocation, or NULL. */
static mem_rec *rec_copy(const nd_record *r)
{
    size_t vlen = strlen(r->version);
    size_t alen = 4 * (size_t)r->nanchors;
    size_t size = r->id_len + vlen + 1 + (r->meta ? r->meta_len + 1 : 0) + alen + r->sketch_len;
    mem_rec *m = malloc(sizeof(*m) + size);
    if (!m)
        return NULL;
    m->next = NULL;
    m->rec = *r;
    unsigned char *p = m->data;
    memcpy(p, r->id, r->id_len);
    m->rec.id = (const char *)p;
    p += r->id_len;
    memcpy(p, r->version, vlen + 1);
    m->rec.version = (const char *)p;
    p += vlen + 1;
    if (r->meta) {
        if (r->meta_len)
            memcpy(p, r->meta, r->meta_len);
        p[r->meta_len] = '\0';
        m->rec.meta = (const char *)p;
        p += r->meta_len + 1;
    }
    if (alen)
        memcpy(p, r->anchors, alen);
    m->rec.anchors = alen ? p : NULL;
    p += alen;
    if (r->sketch_len)
        memcpy(p, r->sketch, r->sketch_len);
    m->rec.sketch = r->sketch_len ? p : NULL;
    return m;
}

static bool same_id(const nd_record *r, const char *id, size_t id_len)
{
    return r->id_len == id_len && memcmp(r->id, id, id_len) == 0;
}

/* Ends a change: counts it and, when it committed, tells the observer
 * (write lock held: commit order). */
static void committed(mem_store *ms, int status, nd_store_change kind, const nd_record *rec)
{
    if (status == 0) {
        atomic_fetch_add_explicit(&ms->commits, 1, memory_order_relaxed);
        if (ms->base.observer)
            ms->base.observer(ms->base.observer_arg, kind, rec);
    } else if (status != -ENOENT) {
        atomic_fetch_add_explicit(&ms->failed, 1, memory_order_relaxed);
    }
}

/* put (replace false) or replace (true). */
static int mem_write(nd_store *st, const nd_record *r, bool replace, nd_store_done_fn done,
                     void *arg)
{
    mem_store *ms = ms_of(st);
    if (!record_ok(r))
        return -EINVAL;
    mem_rec *m = rec_copy(r);
    if (!m)
        return -ENOMEM;
    pthread_rwlock_wrlock(&ms->lock);
    mem_rec **pp = find(ms, r->registered_at_us);
    int status = 0;
    if (!replace && *pp) {
        status = -EEXIST;
    } else if (replace && (!*pp || !same_id(&(*pp)->rec, r->id, r->id_len))) {
        status = -ENOENT;
    } else if (replace) {
        mem_rec *old = *pp;
        m->next = old->next;
        *pp = m;
        free(old);
    } else {
        m->next = ms->buckets[bucket_of(ms, r->registered_at_us)];
        ms->buckets[bucket_of(ms, r->registered_at_us)] = m;
        ms->count++;
        grow(ms);
    }
    committed(ms, status, replace ? ND_STORE_REPLACE : ND_STORE_PUT, &m->rec);
    pthread_rwlock_unlock(&ms->lock);
    if (status)
        free(m);
    if (done)
        done(arg, status);
    return 0;
}

static int mem_put(nd_store *st, const nd_record *rec, nd_store_done_fn done, void *arg)
{
    return mem_write(st, rec, false, done, arg);
}

static int mem_replace(nd_store *st, const nd_record *rec, nd_store_done_fn done, void *arg)
{
    return mem_write(st, rec, true, done, arg);
}

static int mem_delete_at(nd_store *st, const char *id, size_t id_len, int64_t at,
                         nd_store_done_fn done, void *arg)
{
    mem_store *ms = ms_of(st);
    if (!id || id_len == 0 || id_len > ND_ID_MAX || at < 0)
        return -EINVAL;
    pthread_rwlock_wrlock(&ms->lock);
    mem_rec **pp = find(ms, at), *gone = NULL;
    int status = -ENOENT;
    if (*pp && same_id(&(*pp)->rec, id, id_len)) {
        gone = *pp;
        *pp = gone->next;
        ms->count--;
        status = 0;
    }
    nd_record rec = {.id = id, .id_len = id_len, .registered_at_us = at};
    committed(ms, status, ND_STORE_DELETE, &rec);
    pthread_rwlock_unlock(&ms->lock);
    free(gone);
    if (done)
        done(arg, status);
    return 0;
}

static int at_cmp(const void *a, const void *b)
{
    int64_t x = (*(mem_rec *const *)a)->rec.registered_at_us;
    int64_t y = (*(mem_rec *const *)b)->rec.registered_at_us;
    return x < y ? -1 : x > y;
}

static int mem_scan(nd_store *st, int (*visit)(void *arg, const nd_record *rec), void *arg)
{
    mem_store *ms = ms_of(st);
    pthread_rwlock_rdlock(&ms->lock);
    mem_rec **all = malloc((ms->count ? ms->count : 1) * sizeof(*all));
    int rc = all ? 0 : -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; all && i < ms->nbuckets; i++)
        for (mem_rec *r = ms->buckets[i]; r; r = r->next)
            all[n++] = r;
    if (all)
        qsort(all, n, sizeof(*all), at_cmp); /* registration order */
    for (size_t i = 0; i < n && rc == 0; i++) {
        nd_record r = all[i]->rec;
        r.sketch = NULL; /* as a scan of the LMDB store: never the sketch */
        r.sketch_len = 0;
        rc = visit(arg, &r);
    }
    pthread_rwlock_unlock(&ms->lock);
    free(all);
    return rc;
}

static int mem_get(nd_store *st, int64_t at, int (*visit)(void *arg, const nd_record *rec),
                   void *arg)
{
    mem_store *ms = ms_of(st);
    if (at < 0)
        return -EINVAL;
    pthread_rwlock_rdlock(&ms->lock);
    mem_rec *m = *find(ms, at);
    int rc = -ENOENT;
    if (m) {
        nd_record r = m->rec;
        r.sketch = NULL;
        r.sketch_len = 0;
        rc = visit(arg, &r);
    }
    pthread_rwlock_unlock(&ms->lock);
    return rc;
}

static int mem_sketches(nd_store *st, const int64_t *at, size_t n,
                        int (*visit)(void *arg, size_t i, const uint8_t *buf, size_t len),
                        void *arg)
{
    mem_store *ms = ms_of(st);
    int rc = 0;
    pthread_rwlock_rdlock(&ms->lock);
    for (size_t i = 0; i < n && rc == 0; i++) {
        mem_rec *m = at[i] < 0 ? NULL : *find(ms, at[i]);
        rc = m ? visit(arg, i, m->rec.sketch, m->rec.sketch_len) : visit(arg, i, NULL, 0);
    }
    pthread_rwlock_unlock(&ms->lock);
    return rc;
}

static int64_t mem_count(nd_store *st)
{
    mem_store *ms = ms_of(st);
    pthread_rwlock_rdlock(&ms->lock);
    int64_t n = (int64_t)ms->count;
    pthread_rwlock_unlock(&ms->lock);
    return n;
}

static bool mem_writable(const nd_store *st)
{
    (void)st;
    return true;
}

/* One committed change per transaction: commits and changes count them. */
static void mem_get_stats(nd_store *st, nd_store_stats *out)
{
    mem_store *ms = ms_of(st);
    memset(out, 0, sizeof(*out));
    out->commits = out->changes = atomic_load(&ms->commits);
    out->failed_changes = atomic_load(&ms->failed);
    out->max_batch = out->commits ? 1 : 0;
    out->commit_buckets[0] = out->commits;
}

static void mem_close(nd_store *st)
{
    mem_store *ms = ms_of(st);
    for (size_t i = 0; i < ms->nbuckets; i++)
        for (mem_rec *r = ms->buckets[i], *next; r; r = next) {
            next = r->next;
            free(r);
        }
    free(ms->buckets);
    pthread_rwlock_destroy(&ms->lock);
    free(ms);
}

static const nd_store_ops mem_ops = {
    .name = "memory",
    .durable = false,
    .commits_in_call = true,
    .put = mem_put,
    .replace = mem_replace,
    .delete_at = mem_delete_at,
    .scan = mem_scan,
    .get = mem_get,
    .sketches = mem_sketches,
    .count = mem_count,
    .writable = mem_writable,
    .get_stats = mem_get_stats,
    .close = mem_close,
};

int nd_store_memory_open(nd_store **out)
{
    mem_store *ms = calloc(1, sizeof(*ms));
    if (!ms || !(ms->buckets = calloc(1024, sizeof(*ms->buckets)))) {
        free(ms);
        return -ENOMEM;
    }
    ms->nbuckets = 1024;
    ms->base.ops = &mem_ops;
    pthread_rwlock_init(&ms->lock, NULL);
    *out = (nd_store *)(void *)ms;
    return 0;
}
