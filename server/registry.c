/* registry.c - documents by id and by slot, the index, and the registration
 * path through the store. Locking is described in registry.h. */
#include "registry.h"
#include "fingerprint.h"
#include "utf8.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

enum doc_state {
    DOC_PENDING = 1,  /* registered in memory, store write in flight */
    DOC_LIVE = 2,     /* durable (or in-memory registry) */
    DOC_DELETING = 3, /* store deletion in flight */
    DOC_GONE = 4,     /* unlinked; only references keep it */
};

typedef struct nd_waiter {
    struct nd_waiter *next;
    nd_registry_done_fn fn;
    void *arg;
} nd_waiter;

enum change_kind { CHANGE_PUT, CHANGE_DELETE };

struct nd_reg_change {
    nd_registry *reg;
    nd_doc *doc; /* a reference */
    enum change_kind kind;
    nd_registry_done_fn fn;
    void *arg;
};

struct nd_registry {
    nd_store *store; /* borrowed; NULL: in memory */
    nd_registry_options opts;
    nd_index *index;

    pthread_mutex_t writer; /* serialises every change (see registry.h) */
    pthread_rwlock_t table; /* guards buckets/slots for lock-free-index readers */

    nd_doc **buckets; /* id hash chains */
    size_t nbuckets;  /* power of two */
    nd_doc **slots;   /* slot -> document */
    uint32_t nslots;  /* allocated entries of slots */
    uint32_t next_slot;
    uint32_t *free_slots;
    uint32_t nfree;

    int64_t last_us; /* registered_at of the last registration (monotonic) */

    _Atomic bool loaded;
    _Atomic uint64_t ndocs, nstale, npending, nduplicates;
};

/* ---- documents ---- */

static nd_doc *doc_new(const char *id, size_t id_len, const char *meta, size_t meta_len)
{
    nd_doc *d = malloc(sizeof(*d) + id_len + meta_len);
    if (!d)
        return NULL;
    memset(d, 0, sizeof(*d));
    char *p = (char *)(d + 1);
    memcpy(p, id, id_len);
    d->id = p;
    d->id_len = id_len;
    if (meta && meta_len) {
        memcpy(p + id_len, meta, meta_len);
        d->meta = p + id_len;
        d->meta_len = meta_len;
    }
    atomic_init(&d->refs, 1);
    d->slot = UINT32_MAX;
    return d;
}

static inline nd_doc *doc_ref(nd_doc *d)
{
    atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed);
    return d;
}

void nd_doc_release(nd_doc *d)
{
    if (d && atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) == 1)
        free(d);
}

static uint64_t id_hash(const char *id, size_t len)
{
    return XXH3_64bits(id, len);
}

/* ---- tables (writer held; table write-locked where they change) ---- */

static nd_doc *map_find(const nd_registry *reg, const char *id, size_t len)
{
    nd_doc *d = reg->buckets[id_hash(id, len) & (reg->nbuckets - 1)];
    for (; d; d = d->next)
        if (d->id_len == len && memcmp(d->id, id, len) == 0)
            return d;
    return NULL;
}

/* Grows the hash table when it is 75% full. Writer held, table unlocked. */
static int map_reserve(nd_registry *reg)
{
    uint64_t n = atomic_load_explicit(&reg->ndocs, memory_order_relaxed) + 1;
    if (n * 4 <= reg->nbuckets * 3)
        return 0;
    size_t nb = reg->nbuckets * 2;
    nd_doc **b = calloc(nb, sizeof(*b));
    if (!b)
        return -ENOMEM;
    pthread_rwlock_wrlock(&reg->table);
    for (size_t i = 0; i < reg->nbuckets; i++) {
        nd_doc *d = reg->buckets[i];
        while (d) {
            nd_doc *next = d->next;
            size_t h = id_hash(d->id, d->id_len) & (nb - 1);
            d->next = b[h];
            b[h] = d;
            d = next;
        }
    }
    free(reg->buckets);
    reg->buckets = b;
    reg->nbuckets = nb;
    pthread_rwlock_unlock(&reg->table);
    return 0;
}

/* Picks a free slot, growing the slot table if needed. Writer held. */
static int slot_alloc(nd_registry *reg, uint32_t *out)
{
    if (reg->nfree) {
        *out = reg->free_slots[--reg->nfree];
        return 0;
    }
    if (reg->next_slot == UINT32_MAX)
        return -ENOSPC;
    if (reg->next_slot == reg->nslots) {
        uint32_t n = reg->nslots ? reg->nslots * 2 : 1024;
        nd_doc **s = calloc(n, sizeof(*s));
        uint32_t *f = realloc(reg->free_slots, n * sizeof(*f));
        if (!s || !f) {
            free(s);
            if (f)
                reg->free_slots = f;
            return -ENOMEM;
        }
        reg->free_slots = f;
        pthread_rwlock_wrlock(&reg->table);
        if (reg->nslots)
            memcpy(s, reg->slots, reg->nslots * sizeof(*s));
        free(reg->slots);
        reg->slots = s;
        reg->nslots = n;
        pthread_rwlock_unlock(&reg->table);
    }
    *out = reg->next_slot++;
    return 0;
}

/* Makes d visible: slot, index (unless stale), id map. Takes over the
 * caller's reference as the registry's own. Writer held. */
static int link_doc(nd_registry *reg, nd_doc *d)
{
    uint32_t slot;
    int rc = map_reserve(reg);
    if (rc == 0)
        rc = slot_alloc(reg, &slot);
    if (rc < 0)
        return rc;
    if (!d->stale) {
        rc = nd_index_insert(reg->index, d->simhash, slot);
        if (rc < 0) {
            reg->free_slots[reg->nfree++] = slot;
            return rc;
        }
    }
    d->slot = slot;
    size_t h = id_hash(d->id, d->id_len) & (reg->nbuckets - 1);
    pthread_rwlock_wrlock(&reg->table);
    reg->slots[slot] = d;
    d->next = reg->buckets[h];
    reg->buckets[h] = d;
    pthread_rwlock_unlock(&reg->table);
    atomic_fetch_add_explicit(&reg->ndocs, 1, memory_order_relaxed);
    if (d->stale)
        atomic_fetch_add_explicit(&reg->nstale, 1, memory_order_relaxed);
    return 0;
}

/* Removes d from the index and the tables and drops the registry's
 * reference. Writer held. */
static void unlink_doc(nd_registry *reg, nd_doc *d)
{
    if (!d->stale)
        nd_index_remove(reg->index, d->simhash, d->slot);
    size_t h = id_hash(d->id, d->id_len) & (reg->nbuckets - 1);
    pthread_rwlock_wrlock(&reg->table);
    nd_doc **pp = &reg->buckets[h];
    while (*pp && *pp != d)
        pp = &(*pp)->next;
    if (*pp)
        *pp = d->next;
    reg->slots[d->slot] = NULL;
    pthread_rwlock_unlock(&reg->table);
    /* free_slots has room for every slot ever allocated. */
    reg->free_slots[reg->nfree++] = d->slot;
    d->state = DOC_GONE;
    d->next = NULL;
    atomic_fetch_sub_explicit(&reg->ndocs, 1, memory_order_relaxed);
    if (d->stale)
        atomic_fetch_sub_explicit(&reg->nstale, 1, memory_order_relaxed);
    nd_doc_release(d);
}

static int64_t clock_next(nd_registry *reg)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    if (now <= reg->last_us)
        now = reg->last_us + 1; /* the clock went back, or two in one µs */
    reg->last_us = now;
    return now;
}

/* ---- life cycle ---- */

int nd_registry_create(nd_registry **out, nd_store *store, const nd_registry_options *opts)
{
    nd_registry *reg = calloc(1, sizeof(*reg));
    if (!reg)
        return -ENOMEM;
    reg->store = store;
    reg->opts = *opts;
    if (reg->opts.max_matches == 0)
        reg->opts.max_matches = 100;
    reg->nbuckets = 1024;
    reg->buckets = calloc(reg->nbuckets, sizeof(*reg->buckets));
    int rc = reg->buckets ? nd_index_create(&reg->index) : -ENOMEM;
    if (rc < 0) {
        free(reg->buckets);
        free(reg);
        return rc;
    }
    pthread_mutex_init(&reg->writer, NULL);
    pthread_rwlock_init(&reg->table, NULL);
    *out = reg;
    return 0;
}

void nd_registry_destroy(nd_registry *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->nbuckets; i++) {
        nd_doc *d = reg->buckets[i];
        while (d) {
            nd_doc *next = d->next;
            nd_waiter *w = d->waiters;
            while (w) {
                nd_waiter *wn = w->next;
                free(w);
                w = wn;
            }
            nd_doc_release(d);
            d = next;
        }
    }
    nd_index_destroy(reg->index);
    free(reg->buckets);
    free(reg->slots);
    free(reg->free_slots);
    pthread_rwlock_destroy(&reg->table);
    pthread_mutex_destroy(&reg->writer);
    free(reg);
}

void nd_registry_set_loaded(nd_registry *reg)
{
    atomic_store(&reg->loaded, true);
}

bool nd_registry_loaded(const nd_registry *reg)
{
    return atomic_load(&reg->loaded);
}

void nd_registry_stats_get(const nd_registry *reg, nd_registry_stats *out)
{
    out->documents = atomic_load_explicit(&reg->ndocs, memory_order_relaxed);
    out->stale = atomic_load_explicit(&reg->nstale, memory_order_relaxed);
    out->pending = atomic_load_explicit(&reg->npending, memory_order_relaxed);
    out->duplicates = atomic_load_explicit(&reg->nduplicates, memory_order_relaxed);
    out->index_entries = nd_index_count(reg->index);
}

/* ---- loading ---- */

typedef struct load_ctx {
    nd_registry *reg;
    nd_registry_progress_fn progress;
    void *arg;
    unsigned progress_ms;
    const atomic_bool *stop;
    uint64_t loaded, total;
    struct timespec last;
} load_ctx;

static int64_t ms_since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - t->tv_sec) * 1000 + (now.tv_nsec - t->tv_nsec) / 1000000;
}

static int load_one(void *arg, const nd_record *rec)
{
    load_ctx *lc = arg;
    nd_registry *reg = lc->reg;
    if (lc->stop && atomic_load_explicit(lc->stop, memory_order_relaxed))
        return -ECANCELED;
    if (rec->id_len == 0 || rec->id_len > ND_ID_MAX)
        return -EINVAL;
    nd_doc *d = doc_new(rec->id, rec->id_len, rec->meta, rec->meta ? rec->meta_len : 0);
    if (!d)
        return -ENOMEM;
    d->simhash = rec->simhash;
    d->registered_at_us = rec->registered_at_us;
    d->chars = rec->chars;
    memcpy(d->text_hash, rec->text_hash, 16);
    snprintf(d->version, sizeof(d->version), "%s", rec->version ? rec->version : "");
    d->stale = strcmp(d->version, ND_FINGERPRINT_VERSION) != 0;
    d->state = DOC_LIVE;
    pthread_mutex_lock(&reg->writer);
    /* Records come in registration order; an id stored twice (which the
     * registry never writes) keeps its first registration. */
    bool dup = map_find(reg, d->id, d->id_len) != NULL;
    int rc = dup ? 0 : link_doc(reg, d);
    if (d->registered_at_us > reg->last_us)
        reg->last_us = d->registered_at_us;
    pthread_mutex_unlock(&reg->writer);
    if (dup) {
        nd_doc_release(d);
        atomic_fetch_add_explicit(&reg->nduplicates, 1, memory_order_relaxed);
        return 0;
    }
    if (rc < 0) {
        nd_doc_release(d);
        return rc;
    }
    lc->loaded++;
    if (lc->progress && ms_since(&lc->last) >= (int64_t)lc->progress_ms) {
        clock_gettime(CLOCK_MONOTONIC, &lc->last);
        lc->progress(lc->arg, lc->loaded, lc->total,
                     atomic_load_explicit(&reg->nstale, memory_order_relaxed));
    }
    return 0;
}

int nd_registry_load(nd_registry *reg, nd_registry_progress_fn progress, void *arg,
                     unsigned progress_ms, const atomic_bool *stop)
{
    load_ctx lc = {.reg = reg, .progress = progress, .arg = arg, .progress_ms = progress_ms,
                   .stop = stop};
    clock_gettime(CLOCK_MONOTONIC, &lc.last);
    if (reg->store) {
        int64_t total = nd_store_count(reg->store);
        if (total < 0)
            return (int)total;
        lc.total = (uint64_t)total;
        int rc = nd_store_scan(reg->store, load_one, &lc);
        if (rc != 0)
            return rc < 0 ? rc : -EIO;
    }
    if (progress)
        progress(arg, lc.loaded, lc.total, atomic_load(&reg->nstale));
    nd_registry_set_loaded(reg);
    return 0;
}

/* ---- checking ---- */

int nd_registry_id_valid(const char *id, size_t len)
{
    if (len == 0 || len > ND_ID_MAX)
        return -EINVAL;
    const uint8_t *s = (const uint8_t *)id;
    for (size_t pos = 0; pos < len;) {
        uint32_t cp;
        if (nd_utf8_decode(s, len, &pos, &cp) < 0)
            return -EINVAL;
        if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0))
            return -EINVAL;
    }
    return 0;
}

void nd_registry_text_hash(const char *text, size_t len, uint8_t out[16])
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(text, len));
    memcpy(out, c.digest, 16);
}

static int match_cmp(const void *a, const void *b)
{
    const nd_match *x = a, *y = b;
    if (x->distance != y->distance)
        return x->distance < y->distance ? -1 : 1;
    if (x->doc->registered_at_us != y->doc->registered_at_us)
        return x->doc->registered_at_us < y->doc->registered_at_us ? -1 : 1;
    size_t n = x->doc->id_len < y->doc->id_len ? x->doc->id_len : y->doc->id_len;
    int c = memcmp(x->doc->id, y->doc->id, n);
    return c ? c : (x->doc->id_len < y->doc->id_len ? -1 : x->doc->id_len > y->doc->id_len);
}

/* Queries the index and fills res->matches with the documents within k,
 * except self and (when self is set) anything registered after it. Sorted and
 * cut to max_matches. locked: the caller holds the writer (then the tables
 * are stable without the read lock). */
static int find_matches(nd_registry *reg, uint64_t simhash, unsigned k, const nd_doc *self,
                        nd_check_res *res, bool locked)
{
    size_t found = 0;
    int rc = nd_index_query(reg->index, simhash, k, res->hits, res->cap, &found);
    if (rc < 0 && rc != -E2BIG)
        return rc;
    size_t nhits = found < res->cap ? found : res->cap;
    res->truncated = rc == -E2BIG;
    size_t n = 0;
    if (!locked)
        pthread_rwlock_rdlock(&reg->table);
    for (size_t i = 0; i < nhits; i++) {
        uint32_t slot = res->hits[i].slot;
        nd_doc *d = slot < reg->nslots ? reg->slots[slot] : NULL;
        /* A slot freed and reused since the lock-free query: skip it. */
        if (!d || nd_simhash_distance(d->simhash, simhash) != res->hits[i].distance)
            continue;
        if (d == self || (self && d->registered_at_us >= self->registered_at_us))
            continue;
        res->matches[n].doc = doc_ref(d);
        res->matches[n].distance = res->hits[i].distance;
        n++;
    }
    if (!locked)
        pthread_rwlock_unlock(&reg->table);
    qsort(res->matches, n, sizeof(nd_match), match_cmp);
    if (n > reg->opts.max_matches) {
        for (size_t i = reg->opts.max_matches; i < n; i++)
            nd_doc_release(res->matches[i].doc);
        n = reg->opts.max_matches;
        res->truncated = true;
    }
    res->nmatches = n;
    res->original = n == 0;
    return 0;
}

void nd_check_res_release(nd_check_res *res)
{
    for (size_t i = 0; i < res->nmatches; i++)
        nd_doc_release(res->matches[i].doc);
    res->nmatches = 0;
    nd_doc_release(res->doc);
    res->doc = NULL;
}

static void res_clear(nd_check_res *res)
{
    res->original = res->registered = res->existing = res->truncated = false;
    res->nmatches = 0;
    res->doc = NULL;
}

static void store_done(void *arg, int status)
{
    nd_reg_change *ch = arg;
    ch->fn(ch->arg, ch, status);
}

static int add_waiter(nd_doc *d, nd_registry_done_fn fn, void *arg)
{
    nd_waiter *w = malloc(sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->fn = fn;
    w->arg = arg;
    w->next = d->waiters;
    d->waiters = w;
    return ND_REG_WAIT;
}

static void wake(nd_waiter *w)
{
    while (w) {
        nd_waiter *next = w->next;
        w->fn(w->arg, NULL, 0);
        free(w);
        w = next;
    }
}

static nd_reg_change *change_new(nd_registry *reg, nd_doc *d, enum change_kind kind,
                                 nd_registry_done_fn fn, void *arg)
{
    nd_reg_change *ch = malloc(sizeof(*ch));
    if (!ch)
        return NULL;
    *ch = (nd_reg_change){.reg = reg, .doc = doc_ref(d), .kind = kind, .fn = fn, .arg = arg};
    return ch;
}

static void record_of(const nd_doc *d, nd_record *rec)
{
    *rec = (nd_record){.id = d->id, .id_len = d->id_len, .simhash = d->simhash,
                       .version = d->version, .registered_at_us = d->registered_at_us,
                       .chars = d->chars, .meta = d->meta, .meta_len = d->meta_len};
    memcpy(rec->text_hash, d->text_hash, 16);
}

/* Registers a new original document. Writer held. */
static int do_register(nd_registry *reg, const nd_check_req *rq, nd_check_res *res,
                       nd_registry_done_fn fn, void *arg)
{
    nd_doc *d = doc_new(rq->id, rq->id_len, rq->meta, rq->meta ? rq->meta_len : 0);
    if (!d)
        return -ENOMEM;
    d->simhash = rq->simhash;
    d->chars = rq->chars;
    memcpy(d->text_hash, rq->text_hash, 16);
    snprintf(d->version, sizeof(d->version), "%s", ND_FINGERPRINT_VERSION);
    d->registered_at_us = clock_next(reg);
    d->state = reg->store ? DOC_PENDING : DOC_LIVE;
    int rc = link_doc(reg, d);
    if (rc < 0) {
        nd_doc_release(d);
        return rc;
    }
    res->registered = true;
    res->doc = doc_ref(d);
    if (!reg->store)
        return 0;
    nd_reg_change *ch = change_new(reg, d, CHANGE_PUT, fn, arg);
    nd_record rec;
    record_of(d, &rec);
    rc = ch ? nd_store_put(reg->store, &rec, store_done, ch) : -ENOMEM;
    if (rc < 0) {
        if (ch) {
            nd_doc_release(ch->doc);
            free(ch);
        }
        nd_doc_release(res->doc);
        res->doc = NULL;
        res->registered = false;
        unlink_doc(reg, d);
        return rc;
    }
    atomic_fetch_add_explicit(&reg->npending, 1, memory_order_relaxed);
    return ND_REG_QUEUED;
}

/* The id is registered already. Writer held (register) or table read-locked. */
static int answer_existing(nd_registry *reg, nd_doc *d, const nd_check_req *rq,
                           nd_check_res *res, bool locked)
{
    if (memcmp(d->text_hash, rq->text_hash, 16) != 0)
        return -EEXIST;
    res->doc = doc_ref(d);
    res->existing = true;
    res->registered = true;
    int rc = find_matches(reg, rq->simhash, rq->k, d, res, locked);
    if (rc < 0)
        nd_check_res_release(res);
    return rc;
}

static int check_register(nd_registry *reg, const nd_check_req *rq, nd_check_res *res,
                          nd_registry_done_fn fn, void *arg)
{
    pthread_mutex_lock(&reg->writer);
    int rc;
    nd_doc *d = map_find(reg, rq->id, rq->id_len);
    if (d && d->state != DOC_LIVE) {
        rc = add_waiter(d, fn, arg);
    } else if (d) {
        rc = answer_existing(reg, d, rq, res, true);
    } else {
        rc = find_matches(reg, rq->simhash, rq->k, NULL, res, true);
        if (rc == 0 && res->original)
            rc = do_register(reg, rq, res, fn, arg);
    }
    pthread_mutex_unlock(&reg->writer);
    return rc;
}

int nd_registry_check(nd_registry *reg, const nd_check_req *rq, nd_check_res *res,
                      nd_registry_done_fn fn, void *arg)
{
    res_clear(res);
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    if (rq->k > ND_INDEX_MAX_K || (rq->do_register && !rq->id))
        return -EINVAL;
    if (rq->do_register)
        return check_register(reg, rq, res, fn, arg);
    if (rq->id) {
        /* Only asking: a pending or deleting document is answered as it is. */
        nd_doc *d = NULL;
        pthread_rwlock_rdlock(&reg->table);
        d = map_find(reg, rq->id, rq->id_len);
        if (d)
            d = doc_ref(d);
        pthread_rwlock_unlock(&reg->table);
        if (d) {
            int rc = answer_existing(reg, d, rq, res, false);
            nd_doc_release(d);
            return rc;
        }
    }
    return find_matches(reg, rq->simhash, rq->k, NULL, res, false);
}

int nd_registry_complete(nd_registry *reg, nd_reg_change *ch, int status)
{
    nd_doc *d = ch->doc;
    int rc = status;
    pthread_mutex_lock(&reg->writer);
    if (ch->kind == CHANGE_PUT) {
        if (status == 0)
            d->state = DOC_LIVE;
        else
            unlink_doc(reg, d);
    } else if (status == 0 || status == -ENOENT) {
        unlink_doc(reg, d);
        rc = 0;
    } else {
        d->state = DOC_LIVE;
    }
    nd_waiter *w = d->waiters;
    d->waiters = NULL;
    atomic_fetch_sub_explicit(&reg->npending, 1, memory_order_relaxed);
    pthread_mutex_unlock(&reg->writer);
    wake(w);
    nd_doc_release(d);
    free(ch);
    return rc;
}

int nd_registry_delete(nd_registry *reg, const char *id, size_t id_len,
                       nd_registry_done_fn fn, void *arg)
{
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    pthread_mutex_lock(&reg->writer);
    int rc = 0;
    nd_doc *d = map_find(reg, id, id_len);
    if (!d) {
        rc = -ENOENT;
    } else if (d->state != DOC_LIVE) {
        rc = add_waiter(d, fn, arg);
    } else if (!reg->store) {
        unlink_doc(reg, d);
    } else {
        nd_reg_change *ch = change_new(reg, d, CHANGE_DELETE, fn, arg);
        rc = ch ? nd_store_delete_at(reg->store, id, id_len, d->registered_at_us, store_done, ch)
                 : -ENOMEM;
        if (rc == 0) {
            d->state = DOC_DELETING;
            atomic_fetch_add_explicit(&reg->npending, 1, memory_order_relaxed);
            rc = ND_REG_QUEUED;
        } else if (ch) {
            nd_doc_release(ch->doc);
            free(ch);
        }
    }
    pthread_mutex_unlock(&reg->writer);
    return rc;
}

int nd_registry_get(nd_registry *reg, const char *id, size_t id_len, nd_doc **out)
{
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    pthread_rwlock_rdlock(&reg->table);
    nd_doc *d = map_find(reg, id, id_len);
    if (d && d->state == DOC_PENDING)
        d = NULL;
    if (d)
        doc_ref(d);
    pthread_rwlock_unlock(&reg->table);
    *out = d;
    return d ? 0 : -ENOENT;
}
