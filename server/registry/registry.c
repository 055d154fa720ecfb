/* registry.c - documents by id and by slot, the index, and the registration
 * path through the store. Locking is described in registry.h; loading at
 * start is in loader.c. */
#include "registry.h"
#include "registry_internal.h"
#include "fingerprint.h"
#include "utf8.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <xxhash.h>

typedef struct nd_waiter {
    struct nd_waiter *next;
    nd_registry_done_fn fn;
    void *arg;
} nd_waiter;

enum change_kind {
    CHANGE_PUT,     /* a registration */
    CHANGE_DELETE,  /* a deletion */
    CHANGE_UPGRADE, /* a document of another fingerprint version re-registered
                     * with the same text: doc replaces old, same time */
    CHANGE_AMEND,   /* a policy or status change: doc replaces old in place
                     * (same slot) once committed */
};

struct nd_reg_change {
    nd_registry *reg;
    uint32_t nanchors;                /* CHANGE_DELETE: the stored anchors of */
    uint32_t anchors[ND_ANCHORS_MAX]; /* doc, to unindex it once deleted */
    nd_doc *doc;                      /* a reference */
    nd_doc *old;                      /* CHANGE_UPGRADE, CHANGE_AMEND: the document
                                       * doc replaces (a reference) */
    enum change_kind kind;
    size_t inflight; /* CHANGE_PUT queued: its index in reg->inflight
                      * (SIZE_MAX: not there) */
    nd_registry_done_fn fn;
    void *arg;
    _Atomic int phase; /* enum change_phase: did the store commit within its call? */
    int status;        /* the store's status, when it did */
    /* CHANGE_AMEND, a restore: the live documents it supersedes
     * (references; DOC_AMENDING while it is in flight) and their
     * superseded copies (each holds the reference it is linked with). */
    nd_doc **sup_old, **sup_new;
    size_t nsup;
};

/* A store that commits a change within the call that queues it (the
 * memory store: nd_store_commits_in_call()) has it finished in place by the
 * caller, which answers at once. Any other store's done always hands the
 * change over (LMDB's commit thread may call it before the call returns). */
enum change_phase {
    PHASE_IN_CALL = 0,  /* the store call has not returned */
    PHASE_RETURNED = 1, /* it returned first: done hands the change over */
    PHASE_DONE = 2,     /* done ran within the call: its caller finishes it */
};

/* ---- documents ---- */

/* A new document with copies of id, meta, account and policy (NULL/0:
 * none) and status. Returns NULL when out of memory. */
static nd_doc *doc_new(const char *id, size_t id_len, const char *meta, size_t meta_len,
                       const char *account, size_t account_len, const char *policy,
                       size_t policy_len, int status)
{
    account_len = account ? account_len : 0;
    policy_len = policy ? policy_len : 0;
    nd_doc *d = malloc(sizeof(*d) + id_len + meta_len + doc_claim_size(account_len, policy_len));
    if (!d)
        return NULL;
    doc_init(d, id, id_len, meta, meta_len);
    doc_set_claim(d, account, account_len, policy, policy_len, status);
    return d;
}

static inline nd_doc *doc_ref(nd_doc *d)
{
    atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed);
    return d;
}

void nd_doc_release(nd_doc *d)
{
    if (d && atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) == 1 && !d->arena) {
        free(d->extra);
        free(d);
    }
}

/* ---- tables (writer held; table write-locked where they change) ---- */

/* The first document of id in its chain; with settled, the first that is
 * not waiting for its first commit: what a reader may be shown (an upgrade
 * in flight links its new document ahead of the old one, which stays the
 * durable answer until the commit). */
static nd_doc *chain_find(const nd_registry *reg, const char *id, size_t len, bool settled)
{
    nd_doc *d = reg->buckets[id_hash(id, len) & (reg->nbuckets - 1)];
    for (; d; d = d->next)
        if (d->id_len == len && memcmp(d->id, id, len) == 0 &&
            !(settled && d->state == DOC_PENDING))
            return d;
    return NULL;
}

static nd_doc *map_find(const nd_registry *reg, const char *id, size_t len)
{
    return chain_find(reg, id, len, false);
}

/* Grows the hash table so that extra more documents keep it at most 75%
 * full. Writer held, table unlocked. */
int nd_reg_map_reserve(nd_registry *reg, uint64_t extra)
{
    uint64_t n = atomic_load_explicit(&reg->ndocs, memory_order_relaxed) + extra;
    if (n * 4 <= reg->nbuckets * 3)
        return 0;
    size_t nb = reg->nbuckets * 2;
    while (n * 4 > nb * 3)
        nb *= 2;
    nd_doc **b = calloc(nb, sizeof(*b));
    if (!b)
        return -ENOMEM;
    prefault(b, nb * sizeof(*b));
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

/* Grows the slot table so that extra more slots can be handed out without
 * reusing freed ones. Writer held, table unlocked. Returns 0, -ENOSPC or
 * -ENOMEM. */
int nd_reg_slots_reserve(nd_registry *reg, uint64_t extra)
{
    uint64_t need = (uint64_t)reg->next_slot + extra;
    if (need >= UINT32_MAX)
        return -ENOSPC;
    if (need > reg->nslots) {
        uint64_t n = reg->nslots ? (uint64_t)reg->nslots * 2 : 1024;
        if (n < need)
            n = need;
        if (n >= UINT32_MAX)
            n = UINT32_MAX - 1;
        nd_doc **s = calloc(n, sizeof(*s));
        uint32_t *f = realloc(reg->free_slots, n * sizeof(*f));
        if (!s || !f) {
            free(s);
            if (f)
                reg->free_slots = f;
            return -ENOMEM;
        }
        reg->free_slots = f;
        prefault(s, need * sizeof(*s));
        pthread_rwlock_wrlock(&reg->table);
        if (reg->nslots)
            memcpy(s, reg->slots, reg->nslots * sizeof(*s));
        free(reg->slots);
        reg->slots = s;
        reg->nslots = (uint32_t)n;
        pthread_rwlock_unlock(&reg->table);
    }
    return 0;
}

/* Picks a free slot, growing the slot table if needed. Writer held. */
static int slot_alloc(nd_registry *reg, uint32_t *out)
{
    if (reg->nfree) {
        *out = reg->free_slots[--reg->nfree];
        return 0;
    }
    int rc = nd_reg_slots_reserve(reg, 1);
    if (rc < 0)
        return rc;
    *out = reg->next_slot++;
    return 0;
}

/* Makes d visible: slot, index (unless stale), id map. Takes over the
 * caller's reference as the registry's own. Writer held. */
static int link_doc(nd_registry *reg, nd_doc *d)
{
    uint32_t slot = 0;
    int rc = nd_reg_map_reserve(reg, 1);
    if (rc == 0)
        rc = slot_alloc(reg, &slot);
    if (rc < 0)
        return rc;
    if (!d->stale) {
        rc = nd_index_insert(reg->index, d->simhash, slot);
        if (rc == 0 && d->extra && d->nanchors &&
            (rc = nd_anchor_index_insert(reg->anchors, slot, d->extra, d->nanchors)) < 0)
            nd_index_remove(reg->index, d->simhash, slot);
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

/* Removes d from the indexes and the tables and drops the registry's
 * reference. Its anchors: d->extra's, else anchors[0..nanchors) (read from
 * its stored record). Writer held. */
static void unlink_doc_anchors(nd_registry *reg, nd_doc *d, const uint32_t *anchors,
                               size_t nanchors)
{
    if (!d->stale) {
        nd_index_remove(reg->index, d->simhash, d->slot);
        if (d->extra)
            nd_anchor_index_remove(reg->anchors, d->slot, d->extra, d->nanchors);
        else if (nanchors)
            nd_anchor_index_remove(reg->anchors, d->slot, anchors, nanchors);
    }
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

static void unlink_doc(nd_registry *reg, nd_doc *d)
{
    unlink_doc_anchors(reg, d, NULL, 0);
}

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void nd_reg_clock_raise(nd_registry *reg, int64_t at)
{
    if (at > reg->beyond_us)
        reg->beyond_us = at;
    if (at <= reg->last_us)
        return;
    int64_t cap = wall_us() + ND_REGISTRY_AHEAD_US;
    reg->last_us = at < cap ? at : cap;
}

static int first_free(nd_registry *reg, int64_t at, int64_t *out);

static int64_t clock_next(nd_registry *reg)
{
    int64_t now = wall_us();
    if (now <= reg->last_us)
        now = reg->last_us + 1; /* the clock went back, or two in one µs */
    int64_t free_at;
    if (now <= reg->beyond_us && first_free(reg, now, &free_at) == 0)
        now = free_at; /* a time stored ahead of the clock is not handed out again */
    reg->last_us = now;
    return now;
}

/* Registrations queued and not completed: their changes (reg->inflight,
 * with reg->inflight_at their times), so that a given time never takes
 * the time of one (the store does not see it yet). Writer held. */
static int inflight_add(nd_registry *reg, nd_reg_change *ch)
{
    if (reg->ninflight == reg->inflight_cap) {
        size_t cap = reg->inflight_cap ? reg->inflight_cap * 2 : 64;
        int64_t *at = realloc(reg->inflight_at, cap * sizeof(*at));
        if (at)
            reg->inflight_at = at;
        nd_reg_change **c = realloc(reg->inflight, cap * sizeof(*c));
        if (c)
            reg->inflight = c;
        if (!at || !c)
            return -ENOMEM;
        reg->inflight_cap = cap;
    }
    ch->inflight = reg->ninflight;
    reg->inflight[reg->ninflight] = ch;
    reg->inflight_at[reg->ninflight++] = ch->doc->registered_at_us;
    return 0;
}

static void inflight_remove(nd_registry *reg, nd_reg_change *ch)
{
    size_t i = ch->inflight;
    if (i == SIZE_MAX)
        return;
    size_t last = --reg->ninflight;
    reg->inflight[i] = reg->inflight[last];
    reg->inflight_at[i] = reg->inflight_at[last];
    reg->inflight[i]->inflight = i;
    ch->inflight = SIZE_MAX;
}

static int visit_none(void *arg, const nd_record *rec)
{
    (void)arg, (void)rec;
    return 0;
}

/* The first time from at on that no stored record nor registration in
 * flight holds. Writer held. Returns 0 and *out, or the store's -errno. */
static int first_free(nd_registry *reg, int64_t at, int64_t *out)
{
    int64_t taken_max = reg->last_us > reg->beyond_us ? reg->last_us : reg->beyond_us;
    for (; at <= taken_max; at++) { /* later than every time handed out: free */
        bool taken = false;
        for (size_t i = 0; i < reg->ninflight && !taken; i++)
            taken = reg->inflight_at[i] == at;
        if (taken)
            continue;
        int rc = nd_store_get(reg->store, at, visit_none, NULL);
        if (rc == -ENOENT)
            break;
        if (rc < 0)
            return rc;
    }
    *out = at;
    return 0;
}

/* The time for a registration given at (an import): at, raised by 1 us
 * while a stored record or a registration in flight holds it. Lines of an
 * archive often share one time: the walk for at starts after the time
 * last handed out for it (given_memo), so that each costs one step, not
 * one per line before it (the times it skips were taken when handed out;
 * one freed since is simply not reused). Writer held. Returns 0 and *out,
 * or the store's -errno. */
static int given_time(nd_registry *reg, int64_t at, int64_t *out)
{
    size_t slot = (size_t)(((uint64_t)at * 0x9E3779B97F4A7C15ull) >> 58);
    int64_t from = at;
    if (reg->given_memo[slot].at == at && reg->given_memo[slot].next > at)
        from = reg->given_memo[slot].next;
    int rc = first_free(reg, from, out);
    if (rc == 0 && *out < INT64_MAX) {
        reg->given_memo[slot].at = at;
        reg->given_memo[slot].next = *out + 1;
    }
    return rc;
}

/* registry_internal.h (the loader's, and stream changes') */
const char *nd_reg_version_intern(nd_registry *reg, const char *v)
{
    for (size_t i = 0; i < reg->nversions; i++)
        if (strcmp(reg->versions[i].version, v) == 0) {
            reg->versions[i].documents++;
            return reg->versions[i].version;
        }
    if (reg->nversions == reg->versions_cap) {
        size_t cap = reg->versions_cap ? reg->versions_cap * 2 : 4;
        nd_registry_version_count *nv = realloc(reg->versions, cap * sizeof(*nv));
        if (!nv)
            return NULL;
        reg->versions = nv;
        reg->versions_cap = cap;
    }
    char *copy = strdup(v);
    if (!copy)
        return NULL;
    reg->versions[reg->nversions++] = (nd_registry_version_count){copy, 1};
    return copy;
}

/* ---- life cycle ---- */

int nd_registry_create(nd_registry **out, nd_store *store, const nd_registry_options *opts)
{
    if (!store)
        return -EINVAL;
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
    if (rc == 0 && (rc = nd_anchor_index_create(&reg->anchors, ND_VERDICT_POSTING_CAP)) < 0)
        nd_index_destroy(reg->index);
    if (rc < 0) {
        free(reg->buckets);
        free(reg);
        return rc;
    }
    pthread_mutex_init(&reg->writer, NULL);
    pthread_rwlock_init(&reg->table, NULL);
    pthread_mutex_init(&reg->digest_mu, NULL);
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
    nd_anchor_index_destroy(reg->anchors);
    free(reg->buckets);
    free(reg->slots);
    free(reg->free_slots);
    while (reg->arena) {
        arena_block *next = reg->arena->next;
        munmap(reg->arena, reg->arena->size);
        reg->arena = next;
    }
    for (size_t i = 0; i < reg->nversions; i++)
        free((char *)reg->versions[i].version);
    free(reg->versions);
    free(reg->inflight);
    free(reg->inflight_at);
    pthread_rwlock_destroy(&reg->table);
    pthread_mutex_destroy(&reg->writer);
    pthread_mutex_destroy(&reg->digest_mu);
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

void nd_registry_shutdown(nd_registry *reg)
{
    atomic_store(&reg->shutdown, true);
}

int nd_registry_digest(nd_registry *reg, uint64_t *documents, uint64_t *digest)
{
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    pthread_mutex_lock(&reg->digest_mu);
    uint64_t v[2] = {reg->digest_sum, reg->digest_docs};
    pthread_mutex_unlock(&reg->digest_mu);
    *documents = v[1];
    *digest = XXH3_64bits(v, sizeof(v));
    return 0;
}

void nd_registry_stats_get(const nd_registry *reg, nd_registry_stats *out)
{
    out->documents = atomic_load_explicit(&reg->ndocs, memory_order_relaxed);
    out->stale = atomic_load_explicit(&reg->nstale, memory_order_relaxed);
    out->pending = atomic_load_explicit(&reg->npending, memory_order_relaxed);
    out->duplicates = atomic_load_explicit(&reg->nduplicates, memory_order_relaxed);
    out->index_entries = nd_index_count(reg->index);
}

/* ---- checking ---- */

/* Final order: the evidence, then the other matches; in each, identical,
 * near duplicates, partial copies; each by resemblance (highest first),
 * containment, distance, time, id. */
static int match_cmp(const void *a, const void *b)
{
    const nd_match *x = a, *y = b;
    if (x->evidence != y->evidence)
        return x->evidence ? -1 : 1;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    if (x->resemblance != y->resemblance)
        return x->resemblance > y->resemblance ? -1 : 1;
    if (x->containment != y->containment)
        return x->containment > y->containment ? -1 : 1;
    if (x->distance != y->distance)
        return x->distance < y->distance ? -1 : 1;
    if (x->doc->registered_at_us != y->doc->registered_at_us)
        return x->doc->registered_at_us < y->doc->registered_at_us ? -1 : 1;
    size_t n = x->doc->id_len < y->doc->id_len ? x->doc->id_len : y->doc->id_len;
    int c = memcmp(x->doc->id, y->doc->id, n);
    return c ? c : (x->doc->id_len < y->doc->id_len ? -1 : x->doc->id_len > y->doc->id_len);
}

static int doc_ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const nd_match *)a)->doc, y = (uintptr_t)((const nd_match *)b)->doc;
    return x < y ? -1 : x > y;
}

/* Queries the index for every entry within k of simhash into res->hits, or,
 * when there are more than res->cap of them, into a heap array of all of
 * them (*heap, the caller frees; the rare path of a dense cluster: the
 * verdict must not depend on which hits a cut kept, issue 16). Returns the
 * number of hits, or -errno. */
static long query_all(nd_registry *reg, uint64_t simhash, unsigned k, nd_check_res *res,
                      nd_index_hit **hits, nd_index_hit **heap)
{
    size_t found = 0, cap = res->cap;
    *hits = res->hits;
    *heap = NULL;
    for (;;) {
        int rc = nd_index_query(reg->index, simhash, k, *hits, cap, &found);
        if (rc == 0)
            return (long)found;
        if (rc != -E2BIG)
            return rc;
        cap = found + found / 4 + 64; /* entries come and go meanwhile */
        nd_index_hit *h = realloc(*heap, cap * sizeof(*h));
        if (!h)
            return -ENOMEM;
        *hits = *heap = h;
    }
}

#define MF_PENDING 1u /* waiting for its first commit: never evidence */
#define MF_DIRECT 2u  /* verified from its in-memory sketch, not the store's */

/* A candidate found by either stage-1 index: a match if live, not self and
 * registered before before_us. Adds it to m[*n] (a new reference).
 * Table locked (or writer held). */
static void add_candidate(nd_doc *d, const nd_doc *self, int64_t before_us, uint64_t simhash,
                          bool locked, nd_match *m, size_t *n)
{
    if (d == self || d->registered_at_us >= before_us)
        return;
    uint8_t flags = 0;
    if (atomic_load_explicit(&d->state, memory_order_acquire) == DOC_PENDING) {
        if (!locked)
            return; /* its extra may go at any moment; never evidence anyway */
        flags = MF_PENDING;
    }
    m[*n] = (nd_match){
        .doc = doc_ref(d), .distance = nd_simhash_distance(d->simhash, simhash), .flags = flags};
    (*n)++;
}

/* The nd_doc.sk_size word of a sketch of mode, shift and n values. */
static uint32_t sk_size_pack(unsigned mode, unsigned shift, unsigned n)
{
    return ND_DOC_SK_KNOWN | (uint32_t)(mode & 1) << 30 | (uint32_t)(shift & 31) << 16 |
           (n & 0xFFFF);
}

/* True when d's sketch size is known and rules out listing it for rq
 * (nd_sketch_reachable(): exact, so the answer is the same as after a full
 * comparison). A document with the query's text is always verified. */
static bool cannot_match(const nd_check_req *rq, const nd_doc *d)
{
    uint32_t z = atomic_load_explicit(&d->sk_size, memory_order_relaxed);
    if (!(z & ND_DOC_SK_KNOWN) || memcmp(d->text_hash, rq->text_hash, 16) == 0)
        return false;
    return !nd_sketch_reachable(&rq->sketch[(z >> 30) & 1], (z >> 16) & 31, z & 0xFFFF,
                                &rq->params);
}

/* Whether d has the request's (non-empty) account (claim.h's rule). */
static inline bool same_account(const nd_doc *d, const nd_check_req *rq)
{
    return rq->account_len && d->account_len == rq->account_len &&
           memcmp(d->account, rq->account, rq->account_len) == 0;
}

/* Whether d, verified as a match, makes rq's article not original: not the
 * same account, claim not revoked (nd_claim_is_evidence()). */
static inline bool is_evidence(const nd_doc *d, const nd_check_req *rq)
{
    return d->status != ND_CLAIM_REVOKED && !same_account(d, rq);
}

/* Most documents holding a single query anchor verified per anchor. */
#define SINGLE_PER_ANCHOR_MAX 4

typedef struct verify_ctx {
    const nd_check_req *rq;
    nd_check_res *res;
    nd_match *m;
    double best_partial; /* containment of the match the passages come from */
    int64_t best_at;     /* and its registration time (ties: the earliest) */
} verify_ctx;

/* Verifies candidate i against its encoded sketch (NULL: none stored). */
static void verify_one(verify_ctx *v, size_t i, const uint8_t *buf, size_t len)
{
    nd_match *m = &v->m[i];
    const nd_check_req *rq = v->rq;
    bool same = memcmp(m->doc->text_hash, rq->text_hash, 16) == 0;
    nd_sketch dsk;
    nd_sketch_estimate e = {0};
    bool have = buf && nd_sketch_decode(buf, len, &dsk) == 0;
    if (have && !(atomic_load_explicit(&m->doc->sk_size, memory_order_relaxed) & ND_DOC_SK_KNOWN))
        atomic_store_explicit(&m->doc->sk_size, sk_size_pack(dsk.mode, dsk.shift, dsk.n),
                              memory_order_relaxed); /* a loaded document's, first read */
    if (have && same)
        nd_sketch_compare(nd_sketch_for(rq->sketch, &dsk), &dsk, &e);
    else if (have) /* cut short when it cannot be listed: then kind none */
        nd_sketch_compare_bounded(nd_sketch_for(rq->sketch, &dsk), &dsk, &rq->params, &e);
    else if (same)
        e.resemblance = e.containment = e.containment_r = 1.0;
    m->kind = have || same ? (uint8_t)nd_match_classify(&e, same, &rq->params) : ND_MATCH_NONE;
    m->resemblance = e.resemblance;
    m->containment = e.containment;
    if (m->kind == ND_MATCH_PARTIAL_COPY && have && rq->scratch && !(m->flags & MF_PENDING) &&
        is_evidence(m->doc, rq) &&
        (e.containment > v->best_partial ||
         (e.containment == v->best_partial && m->doc->registered_at_us < v->best_at))) {
        /* The most contained, then the earliest: not the order of the
         * candidates (their addresses), so that passages are reproducible. */
        v->best_partial = e.containment;
        v->best_at = m->doc->registered_at_us;
        v->res->npassages = nd_sketch_passages(rq->scratch, &dsk, v->res->passages,
                                               v->res->passages_cap);
    }
}

static int verify_visit(void *arg, size_t i, const uint8_t *buf, size_t len)
{
    verify_ctx *v = arg;
    if (!(v->m[i].flags & MF_DIRECT))
        verify_one(v, i, buf, len);
    return 0;
}

/* Stage 2: verifies m[0..n) in place (kind ND_MATCH_NONE: not a match).
 * A document's sketch is read from its extra (memory mode; pending ones,
 * writer held) or, in one read transaction, from the store. */
static int verify_all(nd_registry *reg, const nd_check_req *rq, nd_check_res *res, nd_match *m,
                      int64_t *keys, size_t n)
{
    verify_ctx v = {.rq = rq, .res = res, .m = m, .best_partial = -1.0, .best_at = INT64_MAX};
    size_t from_store = 0;
    for (size_t i = 0; i < n; i++) {
        nd_doc *d = m[i].doc;
        if (cannot_match(rq, d)) { /* its size alone rules it out: not read */
            m[i].flags |= MF_DIRECT;
            m[i].kind = ND_MATCH_NONE;
            keys[i] = -1;
        } else if (m[i].flags & MF_PENDING) {
            m[i].flags |= MF_DIRECT;
            keys[i] = -1;
            verify_one(&v, i,
                       d->extra && d->sketch_len ? (const uint8_t *)(d->extra + d->nanchors) : NULL,
                       d->sketch_len);
        } else {
            keys[i] = d->registered_at_us;
            from_store++;
        }
    }
    if (!from_store)
        return 0;
    return nd_store_sketches(reg->store, keys, n, verify_visit, &v);
}

/* The action for rq's account given the source (the earliest evidence, or
 * NULL: original), with a new reference to it in res->source. */
static void decide(const nd_registry *reg, const nd_check_req *rq, nd_doc *source,
                   nd_check_res *res)
{
    res->action = ND_ACTION_PUBLISH;
    res->show_source = res->may_modify = false;
    res->source = NULL;
    if (!source)
        return;
    nd_claim c = {.registered_at_us = source->registered_at_us,
                  .account = source->account,
                  .account_len = source->account_len,
                  .policy = source->policy,
                  .policy_len = source->policy_len,
                  .status = source->status};
    nd_claim_decision dec;
    nd_claim_action(&c, rq->account, rq->account_len, reg->opts.default_reprint, &dec);
    res->action = dec.action;
    res->show_source = dec.show_source;
    res->may_modify = dec.may_modify;
    res->source = doc_ref(source);
}

/* Answers a check: candidates from the SimHash index within k and from the
 * anchor index, each verified with the sketches (stage 2); res->matches
 * gets the verified documents: live ones (a document waiting for its first
 * commit is never listed, issue 16), except self and anything registered
 * at or after before_us (INT64_MAX: none). Each is marked same_account /
 * evidence (issue 13); the evidence comes first, and the verdict, original
 * and the action (with its source, the earliest evidence) come from the
 * evidence only. Sorted and cut to max_matches (then truncated is set); the
 * verdict and the source are exact whatever the cut (every SimHash hit is
 * verified, however many). locked: the caller holds the writer (then the
 * tables are stable without the read lock). When wait_on is not NULL and no
 * evidence was found but a pending document verified as one, *wait_on gets
 * it (a borrowed pointer, valid while the writer is held): the caller
 * waits for its commit and decides again. */
static int find_matches(nd_registry *reg, const nd_check_req *rq, const nd_doc *self,
                        int64_t before_us, nd_check_res *res, bool locked, nd_doc **wait_on)
{
    uint64_t simhash = rq->simhash;
    nd_index_hit *hits, *heap_hits;
    long nh = query_all(reg, simhash, rq->k, res, &hits, &heap_hits);
    if (nh < 0)
        return (int)nh;
    size_t nhits = (size_t)nh, nah = 0, nmulti = 0, q = 0;
    bool verify = rq->sketch != NULL;
    if (verify && rq->anchors && rq->nanchors_query && res->ahits && rq->max_verify) {
        q = rq->nanchors_query < ND_ANCHOR_QUERY_MAX ? rq->nanchors_query : ND_ANCHOR_QUERY_MAX;
        nah = nd_anchor_index_query(reg->anchors, rq->anchors, q, res->ahits, res->acap, NULL);
        nah = nah < res->acap ? nah : res->acap;
        while (nmulti < nah && res->ahits[nmulti].shared >= ND_VERDICT_MIN_SHARED)
            nmulti++; /* best first: these lead */
    }
    /* Candidates from the anchors: every document holding at least
     * ND_VERDICT_MIN_SHARED of the query's anchors, and of those holding
     * one, the `per` registered first under each anchor (max_verify in all,
     * at least one per anchor): documents added later cannot push an
     * earlier one out, nor can one anchor's holders crowd out another's. */
    size_t per = q ? (rq->max_verify < ND_VERIFY_MAX ? rq->max_verify : ND_VERIFY_MAX) / q : 0;
    per = q && per < 1 ? 1 : per > SINGLE_PER_ANCHOR_MAX ? SINGLE_PER_ANCHOR_MAX : per;
    size_t nsingle = nah - nmulti < q * per ? nah - nmulti : q * per;
    nd_match *m = res->matches, *heap_m = NULL;
    int64_t *keys = res->keys, *heap_keys = NULL;
    if (nhits + nmulti + nsingle > res->cap) {
        heap_m = malloc((nhits + nmulti + nsingle) * sizeof(*heap_m));
        heap_keys = malloc((nhits + nmulti + nsingle) * sizeof(*heap_keys));
        if (!heap_m || !heap_keys) {
            free(heap_m);
            free(heap_keys);
            free(heap_hits);
            return -ENOMEM;
        }
        m = heap_m;
        keys = heap_keys;
    }
    size_t n = 0;
    if (!locked)
        pthread_rwlock_rdlock(&reg->table);
    for (size_t i = 0; i < nhits; i++) {
        uint32_t slot = hits[i].slot;
        nd_doc *d = slot < reg->nslots ? reg->slots[slot] : NULL;
        /* A slot freed and reused since the lock-free query: skip it unless
         * its new document is as near (then it is a real hit, possibly
         * reported twice: duplicates are dropped below). */
        if (d && nd_simhash_distance(d->simhash, simhash) == hits[i].distance)
            add_candidate(d, self, before_us, simhash, locked, m, &n);
    }
    for (size_t i = 0; i < nmulti; i++) {
        uint32_t slot = res->ahits[i].slot;
        nd_doc *d = slot < reg->nslots ? reg->slots[slot] : NULL;
        if (d && !d->stale)
            add_candidate(d, self, before_us, simhash, locked, m, &n);
    }
    /* The single-anchor ones: the earliest per under each anchor (insertion
     * into pick[anchor], earliest first). */
    nd_doc *pick[ND_ANCHOR_QUERY_MAX][SINGLE_PER_ANCHOR_MAX];
    uint8_t npick[ND_ANCHOR_QUERY_MAX] = {0};
    for (size_t i = nmulti; i < nah && nsingle; i++) {
        uint32_t slot = res->ahits[i].slot, a = res->ahits[i].anchor;
        nd_doc *d = slot < reg->nslots ? reg->slots[slot] : NULL;
        if (!d || d->stale || d == self || d->registered_at_us >= before_us || a >= q)
            continue;
        nd_doc **p = pick[a];
        if (npick[a] == per && d->registered_at_us >= p[per - 1]->registered_at_us)
            continue;
        size_t at = npick[a] < per ? npick[a]++ : per - 1;
        for (; at && d->registered_at_us < p[at - 1]->registered_at_us; at--)
            p[at] = p[at - 1];
        p[at] = d;
    }
    for (size_t a = 0; a < q && nsingle; a++)
        for (size_t k = 0; k < npick[a]; k++)
            add_candidate(pick[a][k], self, before_us, simhash, locked, m, &n);
    if (!locked)
        pthread_rwlock_unlock(&reg->table);
    free(heap_hits);
    /* The same document twice (both indexes, or a reused slot): once. */
    qsort(m, n, sizeof(nd_match), doc_ptr_cmp);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u && m[u - 1].doc == m[i].doc) {
            nd_doc_release(m[i].doc);
            continue;
        }
        m[u++] = m[i];
    }
    n = u;
    res->npassages = 0;
    int rc = 0;
    if (verify && n && rq->sketch_lazy) /* the query's sketches: needed now */
        rc = nd_sketch_query_finish(rq->sketch_lazy, rq->sketch_out);
    if (verify)
        rc = rc ? rc : verify_all(reg, rq, res, m, keys, n);
    else
        for (size_t i = 0; i < n; i++)
            m[i].kind = ND_MATCH_NEAR_DUPLICATE;
    /* Keep the verified matches, marked; note a pending document that
     * would be evidence. */
    nd_doc *pending = NULL, *source = NULL;
    size_t nev = 0;
    u = 0;
    for (size_t i = 0; i < n; i++) {
        nd_doc *d = m[i].doc;
        bool verified = rc == 0 && m[i].kind != ND_MATCH_NONE;
        bool evidence = verified && is_evidence(d, rq);
        if (evidence && (m[i].flags & MF_PENDING) && !pending)
            pending = d; /* the registry's reference keeps it (writer held) */
        if (!verified || (m[i].flags & MF_PENDING)) {
            nd_doc_release(d);
            continue;
        }
        m[i].same_account = same_account(d, rq);
        m[i].evidence = evidence;
        if (evidence) {
            nev++;
            if (!source || d->registered_at_us < source->registered_at_us)
                source = d; /* the earliest claim decides */
        }
        m[u++] = m[i];
    }
    n = u;
    free(heap_keys);
    if (rc < 0) {
        free(heap_m);
        res->npassages = 0;
        return rc;
    }
    qsort(m, n, sizeof(nd_match), match_cmp);
    res->verdict = ND_VERDICT_ORIGINAL;
    if (nev)
        res->verdict = m[0].kind == ND_MATCH_PARTIAL_COPY ? ND_VERDICT_PARTIAL
                                                          : ND_VERDICT_DUPLICATE;
    decide(reg, rq, source, res);
    if (res->verdict != ND_VERDICT_PARTIAL)
        res->npassages = 0;
    res->truncated = false;
    if (n > reg->opts.max_matches) {
        for (size_t i = reg->opts.max_matches; i < n; i++)
            nd_doc_release(m[i].doc);
        n = reg->opts.max_matches;
        res->truncated = true;
    }
    if (heap_m) {
        memcpy(res->matches, heap_m, n * sizeof(*heap_m));
        free(heap_m);
    }
    res->nmatches = n;
    res->original = nev == 0;
    if (wait_on)
        *wait_on = nev == 0 ? pending : NULL;
    return 0;
}

void nd_check_res_release(nd_check_res *res)
{
    for (size_t i = 0; i < res->nmatches; i++)
        nd_doc_release(res->matches[i].doc);
    res->nmatches = 0;
    nd_doc_release(res->doc);
    res->doc = NULL;
    nd_doc_release(res->source);
    res->source = NULL;
}

static void res_clear(nd_check_res *res)
{
    res->original = res->registered = res->existing = res->truncated = false;
    res->nmatches = 0;
    res->npassages = 0;
    res->verdict = ND_VERDICT_ORIGINAL;
    res->doc = NULL;
    res->action = ND_ACTION_PUBLISH;
    res->source = NULL;
    res->show_source = res->may_modify = false;
    res->wait_at_us = 0;
}

static void store_done(void *arg, int status)
{
    nd_reg_change *ch = arg;
    int phase = PHASE_IN_CALL;
    ch->status = status;
    if (atomic_compare_exchange_strong(&ch->phase, &phase, PHASE_DONE))
        return; /* committed within the store call: finish_in_call() */
    ch->fn(ch->arg, ch, status);
}

/* Before the store call that queues ch: whether done may finish it in
 * place. */
static void phase_begin(nd_registry *reg, nd_reg_change *ch)
{
    atomic_init(&ch->phase, nd_store_commits_in_call(reg->store) ? PHASE_IN_CALL : PHASE_RETURNED);
}

/* After a store call that queued ch returned: true when the change was
 * committed (or refused) within it, so that the caller finishes it now.
 * For any other store ch is not touched: its done may already have handed
 * it over. */
static bool done_in_call(nd_registry *reg, nd_reg_change *ch)
{
    return nd_store_commits_in_call(reg->store) &&
           atomic_exchange(&ch->phase, PHASE_RETURNED) == PHASE_DONE;
}

static int complete_locked(nd_registry *reg, nd_reg_change *ch, int status, nd_waiter **woken);
static void change_free(nd_reg_change *ch);
static void wake(nd_waiter *w);

/* Finishes a change the store completed within its call, writer held (as
 * nd_registry_complete() would, without the queue's round trip). Returns
 * 0 when it took effect, else the store's status (the change is undone). */
static int finish_in_call(nd_registry *reg, nd_reg_change *ch)
{
    nd_waiter *w = NULL;
    int rc = complete_locked(reg, ch, ch->status, &w);
    wake(w); /* none can wait on a change that never left the writer; and
              * waking only hands the waiters over to their threads */
    change_free(ch);
    return rc;
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
    *ch = (nd_reg_change){
        .reg = reg, .doc = doc_ref(d), .kind = kind, .fn = fn, .arg = arg, .inflight = SIZE_MAX};
    return ch;
}

/* The registering client of a stored record (nd_record.client): the
 * documents in memory do not keep it, so a write that rewrites a record
 * (an upgrade, an amendment) reads it back first. */
typedef struct stored_client {
    char name[ND_CLIENT_MAX];
    size_t len; /* 0: none */
} stored_client;

/* Copies rec's client into *sc. Returns 0. */
static int copy_client(stored_client *sc, const nd_record *rec)
{
    sc->len = rec->client && rec->client_len <= ND_CLIENT_MAX ? rec->client_len : 0;
    if (sc->len)
        memcpy(sc->name, rec->client, sc->len);
    return 0;
}

/* nd_store_get() visitor of copy_client(). */
static int get_client(void *arg, const nd_record *rec)
{
    return copy_client(arg, rec);
}

/* The store record of d; abuf (4 * ND_ANCHORS_MAX bytes) receives its
 * anchors in the store's byte order. */
static void record_of(const nd_doc *d, nd_record *rec, uint8_t *abuf)
{
    *rec = (nd_record){.id = d->id,
                       .id_len = d->id_len,
                       .simhash = d->simhash,
                       .version = d->version,
                       .registered_at_us = d->registered_at_us,
                       .chars = d->chars,
                       .meta = d->meta,
                       .meta_len = d->meta_len,
                       .account = d->account,
                       .account_len = d->account_len,
                       .policy = d->policy,
                       .policy_len = d->policy_len,
                       .status = d->status,
                       .superseded_by_us = d->superseded_by_us};
    memcpy(rec->text_hash, d->text_hash, 16);
    if (d->extra) {
        for (unsigned i = 0; i < d->nanchors; i++) {
            uint32_t a = d->extra[i];
            abuf[4 * i] = (uint8_t)a;
            abuf[4 * i + 1] = (uint8_t)(a >> 8);
            abuf[4 * i + 2] = (uint8_t)(a >> 16);
            abuf[4 * i + 3] = (uint8_t)(a >> 24);
        }
        rec->anchors = d->nanchors ? abuf : NULL;
        rec->nanchors = d->nanchors;
        rec->sketch = d->sketch_len ? (const uint8_t *)(d->extra + d->nanchors) : NULL;
        rec->sketch_len = d->sketch_len;
    }
}

/* Makes the document of rq (meta_len bytes of meta, the claim of like
 * (the request's own when NULL: its account and policy, active),
 * registered at at), pending when there is a store, and links it. Writer
 * held. Returns 0 and the document in *out (the registry's reference), or
 * -errno. */
static int link_request_doc(nd_registry *reg, const nd_check_req *rq, const char *meta,
                            size_t meta_len, const nd_doc *like, int64_t at, nd_doc **out)
{
    nd_doc *d = like ? doc_new(rq->id, rq->id_len, meta, meta ? meta_len : 0, like->account,
                               like->account_len, like->policy, like->policy_len, like->status)
                     : doc_new(rq->id, rq->id_len, meta, meta ? meta_len : 0, rq->account,
                               rq->account_len, rq->policy, rq->policy_len, ND_CLAIM_ACTIVE);
    if (!d)
        return -ENOMEM;
    if (like)
        d->superseded_by_us = like->superseded_by_us;
    d->simhash = rq->simhash;
    d->chars = rq->chars;
    memcpy(d->text_hash, rq->text_hash, 16);
    d->registered_at_us = at;
    if (rq->sketch_enc && rq->sketch_enc_len <= ND_STORE_SKETCH_MAX) {
        unsigned na = rq->store_anchors ? rq->nanchors_store : 0;
        na = na < ND_ANCHORS_MAX ? na : ND_ANCHORS_MAX;
        d->extra = malloc(4 * (size_t)na + rq->sketch_enc_len);
        if (!d->extra) {
            nd_doc_release(d);
            return -ENOMEM;
        }
        if (na)
            memcpy(d->extra, rq->store_anchors, 4 * (size_t)na);
        memcpy(d->extra + na, rq->sketch_enc, rq->sketch_enc_len);
        d->nanchors = (uint8_t)na;
        d->sketch_len = (uint16_t)rq->sketch_enc_len;
        const uint8_t *e = rq->sketch_enc; /* nd_sketch_encode()'s header */
        if (rq->sketch_enc_len >= 8)
            atomic_init(&d->sk_size,
                        sk_size_pack(e[1] >> 7, e[1] & 0x7F, (unsigned)e[2] | (unsigned)e[3] << 8));
    }
    d->state = DOC_PENDING; /* until the store commits it (maybe within its call) */
    int rc = link_doc(reg, d);
    if (rc < 0) {
        nd_doc_release(d);
        return rc;
    }
    *out = d;
    return 0;
}

/* Queues the store write of pending document d: a put, or with old the
 * replacement of old's record (an upgrade), with the registering client
 * client[0..client_len) (NULL: none; only the store keeps it). Writer
 * held. Returns ND_REG_QUEUED; 0 when the store committed it within the call (d is live,
 * *finished set); -errno with *finished set when the store refused it
 * within the call (d is undone); or -errno with nothing queued (the caller
 * undoes d). */
static int queue_write(nd_registry *reg, nd_doc *d, nd_doc *old, uint64_t seq, const char *client,
                       size_t client_len, const nd_store_event *audit, nd_registry_done_fn fn,
                       void *arg, bool *finished)
{
    *finished = false;
    nd_reg_change *ch = change_new(reg, d, old ? CHANGE_UPGRADE : CHANGE_PUT, fn, arg);
    if (!ch)
        return -ENOMEM;
    ch->old = old ? doc_ref(old) : NULL;
    nd_record rec;
    uint8_t abuf[4 * ND_ANCHORS_MAX];
    record_of(d, &rec, abuf);
    rec.stream_seq = seq;
    rec.client = client_len ? client : NULL;
    rec.client_len = client_len;
    /* Its time is taken from now on (until complete): a given time must
     * not take it. The commit thread's done cannot complete it before the
     * writer is released. */
    if (!old && !nd_store_commits_in_call(reg->store) && inflight_add(reg, ch) < 0) {
        change_free(ch);
        return -ENOMEM;
    }
    phase_begin(reg, ch);
    int rc = old ? nd_store_replace(reg->store, &rec, store_done, ch)
                 : nd_store_put_audited(reg->store, &rec, audit, store_done, ch);
    if (rc < 0) {
        inflight_remove(reg, ch);
        change_free(ch);
        return rc;
    }
    if (done_in_call(reg, ch)) {
        *finished = true;
        return finish_in_call(reg, ch);
    }
    atomic_fetch_add_explicit(&reg->npending, 1, memory_order_relaxed);
    return ND_REG_QUEUED;
}

/* Registers a new original document, at the time given (given_time()) or,
 * when at is 0, the clock's. Writer held. */
static int do_register(nd_registry *reg, const nd_check_req *rq, int64_t at, nd_check_res *res,
                       nd_registry_done_fn fn, void *arg)
{
    nd_doc *d;
    nd_reg_clock_raise(reg, at); /* later clock times come after it */
    int rc = link_request_doc(reg, rq, rq->meta, rq->meta_len, NULL, at ? at : clock_next(reg), &d);
    if (rc < 0)
        return rc;
    res->registered = true;
    res->doc = doc_ref(d);
    bool finished;
    nd_store_event ev;
    char *audit = rq->audit ? rq->audit(rq->audit_arg, d, &ev) : NULL;
    rc = queue_write(reg, d, NULL, 0, rq->client, rq->client_len, audit ? &ev : NULL, fn, arg,
                     &finished);
    free(audit); /* the store copied it */
    if (rc < 0) {
        nd_doc_release(res->doc);
        res->doc = NULL;
        res->registered = false;
        if (!finished)
            unlink_doc(reg, d);
    }
    return rc;
}

/* The id is registered already. Writer held (locked: a registration, which
 * waits for a pending document its verdict would depend on) or a reference
 * held (a query). */
static int answer_existing(nd_registry *reg, nd_doc *d, const nd_check_req *rq, nd_check_res *res,
                           bool locked, nd_registry_done_fn fn, void *arg)
{
    if (memcmp(d->text_hash, rq->text_hash, 16) != 0)
        return -EEXIST;
    nd_doc *wait_on = NULL;
    int rc = find_matches(reg, rq, d, d->registered_at_us, res, locked, locked ? &wait_on : NULL);
    if (rc == 0 && wait_on) {
        nd_check_res_release(res);
        res_clear(res);
        return add_waiter(wait_on, fn, arg);
    }
    if (rc < 0) {
        nd_check_res_release(res);
        return rc;
    }
    res->doc = doc_ref(d);
    res->existing = true;
    res->registered = true;
    return 0;
}

/* The id holds a document of another fingerprint version (old, live) with
 * the same text: registers the text's current fingerprint in its place,
 * keeping its registration time (the claim) and its meta unless the
 * request brings one. The new document is linked at once, ahead of old
 * (which stays what readers get until the commit, and is unlinked then);
 * the answer is as for an existing document. Writer held. */
static int do_upgrade(nd_registry *reg, nd_doc *old, const nd_check_req *rq, nd_check_res *res,
                      nd_registry_done_fn fn, void *arg)
{
    const char *meta = rq->meta ? rq->meta : old->meta;
    size_t meta_len = rq->meta ? rq->meta_len : old->meta_len;
    nd_doc *d;
    int rc = link_request_doc(reg, rq, meta, meta_len, old, old->registered_at_us, &d);
    if (rc < 0)
        return rc;
    nd_doc *wait_on = NULL;
    if ((rc = find_matches(reg, rq, d, d->registered_at_us, res, true, &wait_on)) < 0 || wait_on) {
        unlink_doc(reg, d);
        if (rc == 0) { /* its verdict depends on a pending document */
            nd_check_res_release(res);
            res_clear(res);
            rc = add_waiter(wait_on, fn, arg);
        }
        return rc;
    }
    res->doc = doc_ref(d);
    res->existing = true;
    res->registered = true;
    bool finished;
    /* The document keeps the client that registered it. */
    stored_client sc = {.len = 0};
    if (nd_store_get(reg->store, old->registered_at_us, get_client, &sc) < 0)
        sc.len = 0;
    rc = queue_write(reg, d, old, 0, sc.name, sc.len, NULL, fn, arg, &finished);
    if (rc < 0) {
        nd_check_res_release(res);
        res_clear(res);
        if (!finished)
            unlink_doc(reg, d);
    }
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
    } else if (d && d->stale && memcmp(d->text_hash, rq->text_hash, 16) == 0) {
        rc = do_upgrade(reg, d, rq, res, fn, arg);
    } else if (d) {
        rc = answer_existing(reg, d, rq, res, true, fn, arg);
    } else {
        nd_doc *wait_on = NULL;
        int64_t at = 0; /* the clock's */
        rc = rq->registered_at_us > 0 ? given_time(reg, rq->registered_at_us, &at) : 0;
        /* evidence: registered before it, or (the clock's time, or judged
         * live) every document */
        int64_t before = at && !rq->judge_live ? at : INT64_MAX;
        if (rc == 0)
            rc = find_matches(reg, rq, NULL, before, res, true, &wait_on);
        if (rc == 0 && wait_on) {
            /* original unless the pending one commits: asked again then */
            nd_check_res_release(res);
            res_clear(res);
            res->wait_at_us = before;
            rc = add_waiter(wait_on, fn, arg);
        } else if (rc == 0 && res->original) {
            rc = do_register(reg, rq, at, res, fn, arg);
        }
    }
    pthread_mutex_unlock(&reg->writer);
    return rc;
}

int nd_registry_check(nd_registry *reg, const nd_check_req *rq, nd_check_res *res,
                      nd_registry_done_fn fn, void *arg)
{
    res_clear(res);
    if (atomic_load(&reg->shutdown)) /* the store may be gone */
        return -ESHUTDOWN;
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    if (rq->k > ND_INDEX_MAX_K || (rq->do_register && !rq->id) || rq->registered_at_us < 0 ||
        rq->account_len > ND_ACCOUNT_MAX || rq->policy_len > ND_POLICY_MAX ||
        (rq->account_len && !rq->account) || (rq->policy_len && !rq->policy))
        return -EINVAL;
    if (rq->registered_at_us > wall_us() + ND_REGISTRY_AHEAD_US)
        return -ERANGE;
    if (rq->do_register)
        return check_register(reg, rq, res, fn, arg);
    if (rq->id) {
        /* Only asking: a document waiting for its first commit does not
         * exist yet (an upgrade in flight answers with the old one); a
         * deleting one does until its deletion commits. */
        nd_doc *d = NULL;
        pthread_rwlock_rdlock(&reg->table);
        d = chain_find(reg, rq->id, rq->id_len, true);
        if (d)
            d = doc_ref(d);
        pthread_rwlock_unlock(&reg->table);
        if (d) {
            int rc = answer_existing(reg, d, rq, res, false, NULL, NULL);
            nd_doc_release(d);
            return rc;
        }
    }
    return find_matches(reg, rq, NULL, INT64_MAX, res, false, NULL);
}

/* Puts d (an amended copy of old, unlinked, with the reference it takes
 * over as the registry's) in old's place: same slot (so the indexes stay as
 * they are), same place in its id chain; old is unlinked and the
 * registry's reference on it dropped. Writer held. */
static void swap_doc(nd_registry *reg, nd_doc *old, nd_doc *d)
{
    d->slot = old->slot;
    d->state = DOC_LIVE;
    size_t h = id_hash(old->id, old->id_len) & (reg->nbuckets - 1);
    pthread_rwlock_wrlock(&reg->table);
    nd_doc **pp = &reg->buckets[h];
    while (*pp && *pp != old)
        pp = &(*pp)->next;
    if (*pp) {
        d->next = old->next;
        *pp = d;
    }
    reg->slots[old->slot] = d;
    pthread_rwlock_unlock(&reg->table);
    old->state = DOC_GONE;
    old->next = NULL;
    nd_doc_release(old);
}

static void change_free(nd_reg_change *ch)
{
    nd_doc_release(ch->doc);
    nd_doc_release(ch->old);
    for (size_t i = 0; i < ch->nsup; i++) {
        nd_doc_release(ch->sup_old[i]);
        nd_doc_release(ch->sup_new[i]); /* not linked: the change failed */
    }
    free(ch->sup_old);
    free(ch->sup_new);
    free(ch);
}

/* Appends the waiters of d to *list. */
static void take_waiters(nd_doc *d, nd_waiter **list)
{
    while (*list)
        list = &(*list)->next;
    *list = d->waiters;
    d->waiters = NULL;
}

/* Makes ch take effect or undoes it; the waiters of its document go to
 * *woken (to wake once the writer is released). Writer held. Returns 0
 * when it took effect, else status. */
static int complete_locked(nd_registry *reg, nd_reg_change *ch, int status, nd_waiter **woken)
{
    nd_doc *d = ch->doc;
    int rc = status;
    if (ch->kind == CHANGE_PUT || ch->kind == CHANGE_UPGRADE) {
        inflight_remove(reg, ch);
        if (status == 0) {
            d->state = DOC_LIVE;
            /* The store has its anchors and sketch now; readers without
             * the writer never read a stored document's extra. */
            free(d->extra);
            d->extra = NULL;
            digest_change(reg, d, ch->old);
        } else {
            unlink_doc(reg, d);
        }
        /* An upgrade's old document goes once the new one is durable; if
         * that failed, it stays (its record was not touched). */
        if (status == 0 && ch->old)
            unlink_doc(reg, ch->old);
    } else if (ch->kind == CHANGE_AMEND) {
        nd_doc *old = ch->old;
        if (status == 0) {
            digest_change(reg, d, old);
            swap_doc(reg, old, d);
        } else {
            old->state = DOC_LIVE; /* its record was not touched */
            nd_doc_release(d);     /* the reference it would have linked with */
        }
        *woken = old->waiters;
        old->waiters = NULL;
        for (size_t i = 0; i < ch->nsup; i++) { /* in the same transaction */
            if (status == 0) {
                digest_change(reg, ch->sup_new[i], ch->sup_old[i]);
                swap_doc(reg, ch->sup_old[i], ch->sup_new[i]);
                ch->sup_new[i] = NULL; /* linked */
            } else {
                ch->sup_old[i]->state = DOC_LIVE;
            }
            take_waiters(ch->sup_old[i], woken);
        }
        return rc;
    } else if (status == 0 || status == -ENOENT) {
        digest_change(reg, NULL, d);
        unlink_doc_anchors(reg, d, ch->anchors, ch->nanchors);
        rc = 0;
    } else {
        d->state = DOC_LIVE;
    }
    *woken = d->waiters;
    d->waiters = NULL;
    return rc;
}

int nd_registry_reserve(nd_registry *reg, uint64_t extra)
{
    pthread_mutex_lock(&reg->writer);
    int rc = nd_reg_map_reserve(reg, extra);
    if (rc == 0)
        rc = nd_reg_slots_reserve(reg, extra);
    pthread_mutex_unlock(&reg->writer);
    return rc;
}

int nd_registry_complete(nd_registry *reg, nd_reg_change *ch, int status)
{
    nd_waiter *w = NULL;
    pthread_mutex_lock(&reg->writer);
    int rc = complete_locked(reg, ch, status, &w);
    atomic_fetch_sub_explicit(&reg->npending, 1, memory_order_relaxed);
    pthread_mutex_unlock(&reg->writer);
    wake(w);
    change_free(ch);
    return rc;
}

/* nd_store_get() visitor: copies the record's anchors into the change. */
static int read_anchors(void *arg, const nd_record *rec)
{
    nd_reg_change *ch = arg;
    unsigned n = rec->nanchors < ND_ANCHORS_MAX ? rec->nanchors : ND_ANCHORS_MAX;
    for (unsigned i = 0; i < n; i++) {
        const uint8_t *b = rec->anchors + 4 * i;
        ch->anchors[i] = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                         (uint32_t)b[3] << 24;
    }
    ch->nanchors = n;
    return 0;
}

/* Queues the deletion of live document d (seq: its stream entry, 0 for a
 * local change). Writer held. Returns as nd_registry_delete(). */
static int delete_live(nd_registry *reg, nd_doc *d, uint64_t seq, const nd_store_event *audit,
                       nd_registry_done_fn fn, void *arg)
{
    nd_reg_change *ch = change_new(reg, d, CHANGE_DELETE, fn, arg);
    if (!ch)
        return -ENOMEM;
    if (!d->extra && !d->stale) /* its anchors, to unindex it */
        nd_store_get(reg->store, d->registered_at_us, read_anchors, ch);
    phase_begin(reg, ch);
    int rc = nd_store_delete_audited(reg->store, d->id, d->id_len, d->registered_at_us, seq, audit,
                                     store_done, ch);
    if (rc < 0) {
        change_free(ch);
        return rc;
    }
    d->state = DOC_DELETING;
    if (done_in_call(reg, ch))
        return finish_in_call(reg, ch); /* deleted (0) or kept */
    atomic_fetch_add_explicit(&reg->npending, 1, memory_order_relaxed);
    return ND_REG_QUEUED;
}

int nd_registry_delete(nd_registry *reg, const char *id, size_t id_len, nd_reg_audit_fn audit,
                       void *audit_arg, nd_registry_done_fn fn, void *arg)
{
    if (atomic_load(&reg->shutdown)) /* the store may be gone */
        return -ESHUTDOWN;
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    pthread_mutex_lock(&reg->writer);
    int rc = 0;
    nd_doc *d = map_find(reg, id, id_len);
    if (!d)
        rc = -ENOENT;
    else if (d->state != DOC_LIVE)
        rc = add_waiter(d, fn, arg);
    else {
        nd_store_event ev;
        char *value = audit ? audit(audit_arg, d, &ev) : NULL;
        rc = delete_live(reg, d, 0, value ? &ev : NULL, fn, arg);
        free(value); /* the store copied it */
    }
    pthread_mutex_unlock(&reg->writer);
    return rc;
}

/* nd_store_get() visitor: the stored record's anchors, as stored. */
typedef struct stored_anchors {
    uint8_t bytes[4 * ND_STORE_ANCHORS_MAX];
    size_t n;
    stored_client client; /* kept by the amendment */
} stored_anchors;

static int copy_anchors(void *arg, const nd_record *rec)
{
    stored_anchors *sa = arg;
    sa->n = rec->anchors && rec->nanchors <= ND_STORE_ANCHORS_MAX ? rec->nanchors : 0;
    if (sa->n)
        memcpy(sa->bytes, rec->anchors, 4 * sa->n);
    return copy_client(&sa->client, rec);
}

/* Gives amended copy nd (made by doc_new() with the new claim) the fields
 * of d that a claim change keeps; it stays unlinked (pending). */
static void amended_from(nd_doc *nd, const nd_doc *d)
{
    nd->simhash = d->simhash;
    nd->registered_at_us = d->registered_at_us;
    nd->chars = d->chars;
    memcpy(nd->text_hash, d->text_hash, 16);
    nd->stale = d->stale;
    nd->version = d->version;
    atomic_init(&nd->sk_size, atomic_load_explicit(&d->sk_size, memory_order_relaxed));
    nd->state = DOC_PENDING; /* not linked until committed */
}

/* Makes amendment ch (of the document registered at by_us) supersede the
 * live active documents docs[0..n): their superseded copies are made here
 * and linked when it commits. Writer held. Returns 0 or -ENOMEM (ch then
 * supersedes none). */
static int change_supersede(nd_reg_change *ch, nd_doc *const *docs, size_t n, int64_t by_us)
{
    if (!n)
        return 0;
    ch->sup_old = calloc(n, sizeof(*ch->sup_old));
    ch->sup_new = calloc(n, sizeof(*ch->sup_new));
    int rc = ch->sup_old && ch->sup_new ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const nd_doc *b = docs[i];
        nd_doc *nb = doc_new(b->id, b->id_len, b->meta, b->meta_len, b->account, b->account_len,
                             b->policy, b->policy_len, ND_CLAIM_SUPERSEDED);
        if (!nb) {
            rc = -ENOMEM;
            break;
        }
        amended_from(nb, b);
        nb->superseded_by_us = by_us;
        ch->sup_old[i] = doc_ref(docs[i]);
        ch->sup_new[i] = nb;
        ch->nsup = i + 1;
    }
    if (rc < 0) {
        for (size_t i = 0; i < ch->nsup; i++) {
            nd_doc_release(ch->sup_old[i]);
            nd_doc_release(ch->sup_new[i]);
        }
        free(ch->sup_old);
        free(ch->sup_new);
        ch->sup_old = ch->sup_new = NULL;
        ch->nsup = 0;
    }
    return rc;
}

/* Queues the amendment ch of live document d (ch->doc: its amended copy,
 * unlinked, with the new claim; seq: its stream entry, 0 for a local
 * change), with the documents ch supersedes (change_supersede()) in the
 * same store transaction. Writer held. Returns as nd_registry_set_policy(); on an error
 * ch and its document are freed. */
static int queue_amend(nd_registry *reg, nd_doc *d, nd_reg_change *ch, const nd_store_event *audit,
                       uint64_t seq)
{
    nd_doc *nd = ch->doc;
    amended_from(nd, d);
    ch->old = doc_ref(d);
    /* The record as stored, with the new claim: its anchors are read
     * back (a loaded document does not keep them); its sketch stays. */
    stored_anchors sa = {.n = 0};
    int rc = nd_store_get(reg->store, d->registered_at_us, copy_anchors, &sa);
    nd_record rec;
    record_of(nd, &rec, NULL);
    rec.anchors = sa.n ? sa.bytes : NULL;
    rec.nanchors = (unsigned)sa.n;
    rec.client = sa.client.len ? sa.client.name : NULL; /* its registering client stays */
    rec.client_len = sa.client.len;
    rec.stream_seq = seq;
    size_t nsup = ch->nsup;
    nd_record_ref *refs = nsup ? malloc(nsup * sizeof(*refs)) : NULL;
    if (nsup && !refs && (rc == 0 || rc == -ENOENT))
        rc = -ENOMEM;
    for (size_t i = 0; refs && i < nsup; i++)
        refs[i] = (nd_record_ref){.registered_at_us = ch->sup_old[i]->registered_at_us,
                                  .id = ch->sup_old[i]->id,
                                  .id_len = ch->sup_old[i]->id_len};
    rec.supersede = refs;
    rec.nsupersede = nsup;
    if (rc == 0 || rc == -ENOENT) { /* -ENOENT: the amend says so */
        phase_begin(reg, ch);
        rc = nd_store_amend(reg->store, &rec, audit, store_done, ch);
    }
    free(refs); /* the store keeps its copy */
    if (rc < 0) {
        change_free(ch);
        nd_doc_release(nd); /* the reference it would have linked with */
        return rc;
    }
    d->state = DOC_AMENDING;
    /* ch is not completed before the writer is released (or by
     * finish_in_call() below): its documents stay readable here. */
    for (size_t i = 0; i < nsup; i++)
        ch->sup_old[i]->state = DOC_AMENDING;
    if (done_in_call(reg, ch))
        return finish_in_call(reg, ch); /* amended (0) or kept */
    atomic_fetch_add_explicit(&reg->npending, 1, memory_order_relaxed);
    return ND_REG_QUEUED;
}

/* The documents a restore of d now predates (nd_claim_change.predated):
 * the SimHash hits within k of d that are live, active, of another
 * account than d's, registered after d and verified as matches of d
 * (their stored sketch compared with d's as a check of their text would,
 * or the same text). Writer held. *out gets new references (the caller
 * releases each and frees the array), earliest first, at most
 * max_matches (more: *truncated). Returns 0 or -errno. */
typedef struct predate_ctx {
    nd_doc *const *cand; /* cand[0]: d */
    const nd_verdict_params *params;
    bool *listed;
    nd_sketch self;
    bool have_self;
} predate_ctx;

static int predate_visit(void *arg, size_t i, const uint8_t *buf, size_t len)
{
    predate_ctx *pc = arg;
    if (i == 0) {
        pc->have_self = buf && nd_sketch_decode(buf, len, &pc->self) == 0;
        return 0;
    }
    if (memcmp(pc->cand[i]->text_hash, pc->cand[0]->text_hash, 16) == 0) {
        pc->listed[i] = true;
        return 0;
    }
    nd_sketch q;
    if (!pc->have_self || !buf || nd_sketch_decode(buf, len, &q) < 0 || q.mode != pc->self.mode)
        return 0; /* nothing to verify with: not listed */
    nd_sketch_estimate e;
    nd_sketch_compare(&q, &pc->self, &e);
    pc->listed[i] = nd_match_classify(&e, 0, pc->params) != ND_MATCH_NONE;
    return 0;
}

static int registered_cmp(const void *a, const void *b)
{
    const nd_doc *x = *(nd_doc *const *)a, *y = *(nd_doc *const *)b;
    return x->registered_at_us < y->registered_at_us ? -1
                                                     : x->registered_at_us > y->registered_at_us;
}

static int doc_addr_cmp(const void *a, const void *b)
{
    const nd_doc *x = *(nd_doc *const *)a, *y = *(nd_doc *const *)b;
    return (uintptr_t)x < (uintptr_t)y ? -1 : (uintptr_t)x > (uintptr_t)y;
}

static int find_predated(nd_registry *reg, nd_doc *d, unsigned k, const nd_verdict_params *params,
                         nd_doc ***out, size_t *nout, bool *truncated)
{
    *out = NULL;
    *nout = 0;
    *truncated = false;
    if (d->stale) /* not in the index */
        return 0;
    nd_verdict_params def;
    if (!params) {
        nd_verdict_params_default(&def);
        params = &def;
    }
    size_t cap = 64, found = 0;
    nd_index_hit *hits = NULL;
    int rc;
    for (;;) {
        nd_index_hit *h = realloc(hits, cap * sizeof(*h));
        if (!h) {
            free(hits);
            return -ENOMEM;
        }
        hits = h;
        if ((rc = nd_index_query(reg->index, d->simhash, k, hits, cap, &found)) != -E2BIG)
            break;
        cap = found + found / 4 + 64;
    }
    nd_doc **cand = rc == 0 ? malloc((found + 1) * sizeof(*cand)) : NULL;
    int64_t *keys = rc == 0 ? malloc((found + 1) * sizeof(*keys)) : NULL;
    bool *listed = rc == 0 ? calloc(found + 1, sizeof(*listed)) : NULL;
    if (rc == 0 && (!cand || !keys || !listed))
        rc = -ENOMEM;
    size_t n = 0;
    if (rc == 0) {
        cand[n++] = d;
        for (size_t i = 0; i < found; i++) {
            nd_doc *e = hits[i].slot < reg->nslots ? reg->slots[hits[i].slot] : NULL;
            int st = e ? atomic_load(&e->state) : DOC_GONE;
            if (!e || e == d || (st != DOC_LIVE && st != DOC_AMENDING) || e->stale ||
                e->status != ND_CLAIM_ACTIVE || e->registered_at_us <= d->registered_at_us ||
                (e->account_len && e->account_len == d->account_len &&
                 memcmp(e->account, d->account, d->account_len) == 0))
                continue;
            cand[n++] = e;
        }
        /* The same document twice (a reused slot): once. */
        qsort(cand + 1, n - 1, sizeof(*cand), doc_addr_cmp);
        size_t u = 1;
        for (size_t i = 1; i < n; i++)
            if (cand[i] != cand[u - 1])
                cand[u++] = cand[i];
        n = u;
        for (size_t i = 0; i < n; i++)
            keys[i] = cand[i]->registered_at_us;
        predate_ctx pc = {.cand = cand, .params = params, .listed = listed};
        if (n > 1)
            rc = nd_store_sketches(reg->store, keys, n, predate_visit, &pc);
    }
    size_t u = 0;
    for (size_t i = 1; rc == 0 && i < n; i++)
        if (listed[i])
            cand[u++] = doc_ref(cand[i]);
    if (u) {
        qsort(cand, u, sizeof(*cand), registered_cmp);
        if (u > ND_STORE_SUPERSEDE_MAX) {
            for (size_t i = ND_STORE_SUPERSEDE_MAX; i < u; i++)
                nd_doc_release(cand[i]);
            u = ND_STORE_SUPERSEDE_MAX;
            *truncated = true;
        }
        *out = cand;
        *nout = u;
        cand = NULL;
    }
    free(cand);
    free(keys);
    free(listed);
    free(hits);
    return rc;
}

/* A policy or status change of id (see nd_registry_change_policy()): the
 * amended copy of the live document, as decide makes it on the document
 * as it is now, is written with nd_store_amend() and put in its place by
 * complete_locked(). Writer taken here. */
static int amend(nd_registry *reg, const char *id, size_t id_len, bool set_policy, int status,
                 unsigned k, const nd_verdict_params *params, nd_claim_decide_fn decide,
                 void *decide_arg, nd_registry_done_fn fn, void *arg)
{
    if (atomic_load(&reg->shutdown)) /* the store may be gone */
        return -ESHUTDOWN;
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    if (!set_policy && status != ND_CLAIM_ACTIVE && status != ND_CLAIM_REVOKED)
        return -EINVAL;
    pthread_mutex_lock(&reg->writer);
    int rc = 0;
    nd_doc *d = map_find(reg, id, id_len), *nd = NULL;
    nd_reg_change *ch = NULL;
    nd_claim_change c = {.doc = d};
    if (!d) {
        rc = -ENOENT;
    } else if (d->state != DOC_LIVE) {
        rc = add_waiter(d, fn, arg);
    } else if (!set_policy && d->status == status) {
        rc = 0; /* unchanged: nothing written */
    } else {
        nd_doc **pre = NULL;
        size_t npre = 0;
        bool more = false;
        if (!set_policy && status == ND_CLAIM_ACTIVE)
            rc = find_predated(reg, d, k, params, &pre, &npre, &more);
        /* A document it supersedes with a change in flight: after it. */
        for (size_t i = 0; rc == 0 && i < npre; i++)
            if (pre[i]->state != DOC_LIVE)
                rc = add_waiter(pre[i], fn, arg);
        c.predated = pre;
        c.npredated = npre < reg->opts.max_matches ? npre : reg->opts.max_matches;
        c.predated_truncated = more || npre > c.npredated;
        if (rc == 0)
            rc = decide(decide_arg, &c);
        if (rc == 0 && set_policy && (c.policy_len > ND_POLICY_MAX || (c.policy_len && !c.policy)))
            rc = -EINVAL;
        if (rc == 0) {
            nd = doc_new(d->id, d->id_len, d->meta, d->meta_len, d->account, d->account_len,
                         set_policy ? c.policy : d->policy,
                         set_policy ? (c.policy ? c.policy_len : 0) : d->policy_len,
                         set_policy ? d->status : status);
            if (nd && set_policy)
                nd->superseded_by_us = d->superseded_by_us;
            ch = nd ? change_new(reg, nd, CHANGE_AMEND, fn, arg) : NULL;
            rc = ch ? change_supersede(ch, pre, npre, d->registered_at_us) : -ENOMEM;
            if (rc < 0 && ch) {
                change_free(ch);
                ch = NULL;
            }
        }
        for (size_t i = 0; i < npre; i++)
            nd_doc_release(pre[i]);
        free(pre);
    }
    if (ch)
        rc = queue_amend(reg, d, ch, c.audit, 0);
    else if (nd)
        nd_doc_release(nd);
    pthread_mutex_unlock(&reg->writer);
    return rc;
}

/* The fixed outputs of nd_registry_set_policy() / _set_status(). */
typedef struct fixed_claim {
    const char *policy;
    size_t policy_len;
    const nd_store_event *audit;
} fixed_claim;

static int decide_fixed(void *arg, nd_claim_change *c)
{
    const fixed_claim *f = arg;
    c->policy = f->policy;
    c->policy_len = f->policy_len;
    c->audit = f->audit;
    return 0;
}

int nd_registry_set_policy(nd_registry *reg, const char *id, size_t id_len, const char *policy,
                           size_t policy_len, const nd_store_event *audit, nd_registry_done_fn done,
                           void *arg)
{
    fixed_claim f = {.policy = policy, .policy_len = policy ? policy_len : 0, .audit = audit};
    if (f.policy_len > ND_POLICY_MAX || (policy_len && !policy))
        return -EINVAL;
    return amend(reg, id, id_len, true, 0, 0, NULL, decide_fixed, &f, done, arg);
}

int nd_registry_set_status(nd_registry *reg, const char *id, size_t id_len, int status,
                           const nd_store_event *audit, nd_registry_done_fn done, void *arg)
{
    fixed_claim f = {.audit = audit};
    return amend(reg, id, id_len, false, status, 0, NULL, decide_fixed, &f, done, arg);
}

int nd_registry_change_policy(nd_registry *reg, const char *id, size_t id_len,
                              nd_claim_decide_fn decide, void *decide_arg, nd_registry_done_fn done,
                              void *arg)
{
    return amend(reg, id, id_len, true, 0, 0, NULL, decide, decide_arg, done, arg);
}

int nd_registry_change_status(nd_registry *reg, const char *id, size_t id_len, int status,
                              unsigned k, const nd_verdict_params *params,
                              nd_claim_decide_fn decide, void *decide_arg, nd_registry_done_fn done,
                              void *arg)
{
    return amend(reg, id, id_len, false, status, k, params, decide, decide_arg, done, arg);
}

int nd_registry_get(nd_registry *reg, const char *id, size_t id_len, nd_doc **out)
{
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    pthread_rwlock_rdlock(&reg->table);
    nd_doc *d = chain_find(reg, id, id_len, true);
    if (d)
        doc_ref(d);
    pthread_rwlock_unlock(&reg->table);
    *out = d;
    return d ? 0 : -ENOENT;
}

/* ---- changes read from the replication stream (issue 14) ---- */

/* The document of a stream record, pending, its anchors and sketch kept
 * in extra until committed (as a registration's). NULL: out of memory. */
static nd_doc *doc_of_record(nd_registry *reg, const nd_record *rec)
{
    nd_doc *d = doc_new(rec->id, rec->id_len, rec->meta, rec->meta ? rec->meta_len : 0,
                        rec->account, rec->account_len, rec->policy, rec->policy_len, rec->status);
    if (!d)
        return NULL;
    if (rec->status == ND_CLAIM_SUPERSEDED)
        d->superseded_by_us = rec->superseded_by_us;
    d->simhash = rec->simhash;
    d->chars = rec->chars;
    memcpy(d->text_hash, rec->text_hash, 16);
    d->registered_at_us = rec->registered_at_us;
    d->stale = strcmp(rec->version, ND_RECORD_VERSION) != 0;
    if (d->stale && !(d->version = nd_reg_version_intern(reg, rec->version))) {
        nd_doc_release(d);
        return NULL;
    }
    unsigned na = rec->anchors ? rec->nanchors : 0;
    na = na < ND_ANCHORS_MAX ? na : ND_ANCHORS_MAX;
    size_t sk = rec->sketch ? rec->sketch_len : 0;
    if (na || sk) {
        if (!(d->extra = malloc(4 * (size_t)na + sk))) {
            nd_doc_release(d);
            return NULL;
        }
        for (unsigned i = 0; i < na; i++) {
            const uint8_t *b = rec->anchors + 4 * i;
            d->extra[i] = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                          (uint32_t)b[3] << 24;
        }
        if (sk)
            memcpy(d->extra + na, rec->sketch, sk);
        d->nanchors = (uint8_t)na;
        d->sketch_len = (uint16_t)sk;
        if (sk >= 8) {
            const uint8_t *e = rec->sketch; /* nd_sketch_encode()'s header */
            atomic_init(&d->sk_size,
                        sk_size_pack(e[1] >> 7, e[1] & 0x7F, (unsigned)e[2] | (unsigned)e[3] << 8));
        }
    }
    d->state = DOC_PENDING;
    return d;
}

/* A registration (old NULL) or an upgrade of old from the stream. Writer
 * held. */
static int apply_put(nd_registry *reg, nd_doc *old, const nd_record *rec,
                     const nd_store_event *audit, nd_registry_done_fn fn, void *arg)
{
    nd_doc *d = doc_of_record(reg, rec);
    if (!d)
        return -ENOMEM;
    if (!old) /* later clock times come after it (not beyond the clock + its skew) */
        nd_reg_clock_raise(reg, rec->registered_at_us);
    int rc = link_doc(reg, d);
    if (rc < 0) {
        nd_doc_release(d);
        return rc;
    }
    bool finished;
    rc = queue_write(reg, d, old, rec->stream_seq, rec->client, rec->client_len, old ? NULL : audit,
                     fn, arg, &finished);
    if (rc < 0 && !finished)
        unlink_doc(reg, d);
    return rc;
}

/* A policy or status change of live document d from the stream: its claim
 * becomes rec's. Writer held. */
static int apply_amend(nd_registry *reg, nd_doc *d, const nd_record *rec,
                       const nd_store_event *audit, nd_registry_done_fn fn, void *arg)
{
    /* The documents it supersedes: those held here with the id and time
     * named, and active (as the store decides on the records). */
    size_t nsup = rec->supersede ? rec->nsupersede : 0, n = 0;
    if (nsup > ND_STORE_SUPERSEDE_MAX)
        return -EINVAL;
    nd_doc **sup = nsup ? malloc(nsup * sizeof(*sup)) : NULL;
    if (nsup && !sup)
        return -ENOMEM;
    for (size_t i = 0; i < nsup; i++) {
        const nd_record_ref *ref = &rec->supersede[i];
        nd_doc *b = ref->id ? map_find(reg, ref->id, ref->id_len) : NULL;
        if (!b || b == d || b->registered_at_us != ref->registered_at_us)
            continue;
        if (b->state != DOC_LIVE) { /* a local change of it in flight */
            free(sup);
            return add_waiter(b, fn, arg);
        }
        if (b->status == ND_CLAIM_ACTIVE)
            sup[n++] = b;
    }
    nd_doc *nd = doc_new(d->id, d->id_len, d->meta, d->meta_len, rec->account, rec->account_len,
                         rec->policy, rec->policy_len, rec->status);
    if (nd && rec->status == ND_CLAIM_SUPERSEDED)
        nd->superseded_by_us = rec->superseded_by_us;
    nd_reg_change *ch = nd ? change_new(reg, nd, CHANGE_AMEND, fn, arg) : NULL;
    int rc = ch ? change_supersede(ch, sup, n, d->registered_at_us) : -ENOMEM;
    free(sup);
    if (rc < 0) {
        if (ch)
            change_free(ch);
        nd_doc_release(nd);
        return rc;
    }
    return queue_amend(reg, d, ch, audit, rec->stream_seq);
}

static bool same_record(const nd_doc *d, const nd_record *rec)
{
    return d->registered_at_us == rec->registered_at_us &&
           memcmp(d->text_hash, rec->text_hash, 16) == 0;
}

int nd_registry_apply(nd_registry *reg, nd_store_change kind, const nd_record *rec,
                      const nd_store_event *audit, nd_registry_done_fn fn, void *arg)
{
    if (atomic_load(&reg->shutdown))
        return -ESHUTDOWN;
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    if (!rec || !rec->stream_seq || !rec->id || !rec->id_len || rec->id_len > ND_ID_MAX ||
        !rec->version || rec->account_len > ND_ACCOUNT_MAX || rec->policy_len > ND_POLICY_MAX)
        return -EINVAL;
    pthread_mutex_lock(&reg->writer);
    int rc;
    nd_doc *d = map_find(reg, rec->id, rec->id_len);
    if (d && d->state != DOC_LIVE) {
        rc = add_waiter(d, fn, arg); /* a local change of the id in flight */
    } else if (kind == ND_STORE_PUT) {
        rc = !d ? apply_put(reg, NULL, rec, audit, fn, arg) : same_record(d, rec) ? 0 : -EEXIST;
    } else if (kind == ND_STORE_REPLACE) {
        rc = d && d->registered_at_us == rec->registered_at_us
                 ? apply_put(reg, d, rec, NULL, fn, arg)
                 : -ENOENT;
    } else if (kind == ND_STORE_DELETE) {
        rc = d && d->registered_at_us == rec->registered_at_us
                 ? delete_live(reg, d, rec->stream_seq, audit, fn, arg)
                 : 0; /* gone already */
    } else if (kind == ND_STORE_AMEND) {
        rc = d && d->registered_at_us == rec->registered_at_us
                 ? apply_amend(reg, d, rec, audit, fn, arg)
                 : -ENOENT;
    } else {
        rc = -EINVAL;
    }
    pthread_mutex_unlock(&reg->writer);
    return rc;
}
