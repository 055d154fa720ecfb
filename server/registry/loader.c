/* loader.c - nd_registry_load(): the start-up scan of the store into the
 * registry's tables (documents carved from large arena blocks, linked a
 * batch per hold of the locks; for a large store the blocks are prefaulted
 * and the anchors placed on two helper threads) and the bulk build of the
 * fingerprint and anchor indexes. Shares the registry's state through
 * docs_internal.h and registry_internal.h. */
#include "registry.h"
#include "registry_internal.h"
#include "clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define LOAD_BATCH 4096                /* records linked per hold of the locks */
#define LOAD_AHEAD 32                  /* records built before they are linked */
#define LOAD_THREADS 2                 /* threads building the index at load */
#define ARENA_BLOCK ((size_t)64 << 20) /* largest arena block (loaded documents) */
#define ARENA_PER_DOC 384              /* arena bytes a loaded document takes, about */
#define FEED_MIN_DOCS 65536            /* smaller stores load without a helper */
#define HUGE_PAGE ((size_t)2 << 20)

/* Maps a new arena block of size bytes (a multiple of HUGE_PAGE) and
 * prefaults it. Returns it, or NULL when out of memory. */
static arena_block *block_map(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    prefault_pages(p, size); /* written in order, read a document at a time */
    arena_block *b = p;
    b->size = size;
    b->used = (sizeof(*b) + 7) & ~(size_t)7;
    return b;
}

/* Prepares arena blocks on a helper thread while the loader fills the
 * current one: the kernel zeroes every new page, a large share of a big
 * load (10M documents: 3 GiB, about 5 s of one core on the virtual
 * machine measured), and that can run on another core. */
#define FEED_DEPTH 2 /* blocks prepared ahead */

typedef struct block_feed {
    size_t block_size; /* of the blocks it prepares: a multiple of HUGE_PAGE */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    arena_block *ready[FEED_DEPTH];
    unsigned nready;
    bool stop, failed;
    bool running;
    pthread_t thread;
} block_feed;

static void *feed_main(void *arg)
{
    block_feed *f = arg;
    pthread_setname_np(pthread_self(), "nd-load-feed");
    pthread_mutex_lock(&f->mu);
    while (!f->stop && !f->failed) {
        if (f->nready == FEED_DEPTH) {
            pthread_cond_wait(&f->cv, &f->mu);
            continue;
        }
        pthread_mutex_unlock(&f->mu);
        arena_block *b = block_map(f->block_size);
        pthread_mutex_lock(&f->mu);
        if (b)
            f->ready[f->nready++] = b;
        else
            f->failed = true; /* the loader maps (and reports) itself */
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* Sizes the blocks for a load of total documents (a few per store, at most
 * ARENA_BLOCK) and, for a large store, starts the helper; without it the
 * loader maps its blocks itself. */
static void feed_start(block_feed *f, uint64_t total)
{
    memset(f, 0, sizeof(*f));
    uint64_t want = total * ARENA_PER_DOC / 4;
    want = want < HUGE_PAGE ? HUGE_PAGE : want > ARENA_BLOCK ? ARENA_BLOCK : want;
    f->block_size = ((size_t)want + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (total >= FEED_MIN_DOCS)
        f->running = pthread_create(&f->thread, NULL, feed_main, f) == 0;
}

/* A prepared block of feed->block_size bytes, waiting for the helper if it
 * is busy; NULL when the helper is not running or failed. */
static arena_block *feed_take(block_feed *f)
{
    arena_block *b = NULL;
    if (!f->running)
        return NULL;
    pthread_mutex_lock(&f->mu);
    while (!f->nready && !f->failed)
        pthread_cond_wait(&f->cv, &f->mu);
    if (f->nready) {
        b = f->ready[0];
        memmove(f->ready, f->ready + 1, --f->nready * sizeof(*f->ready));
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    return b;
}

/* Stops the helper and unmaps the blocks it prepared in vain. */
static void feed_stop(block_feed *f)
{
    if (f->running) {
        pthread_mutex_lock(&f->mu);
        f->stop = true;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->thread, NULL);
    }
    for (unsigned i = 0; i < f->nready; i++)
        munmap(f->ready[i], f->ready[i]->size);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
}

/* Places the loaded documents' anchors in the anchor index's loader on a
 * helper thread while the scan goes on: the scatter into the loader's
 * groups is about a third of the scan's own time at 10M documents (a cache
 * miss per anchor), and it needs nothing of the scan but (slot, anchors).
 * The scan fills a chunk of entries, hands it over whole (a lock per
 * ANCHOR_CHUNK documents), and takes an empty one back. */
#define ANCHOR_CHUNK 4096 /* documents per hand-over */
/* Chunks in flight (~300 KiB each): with 4, the scan and the helper each
 * waited out the other's slower stretches (10M documents, paired: scan
 * 5.1-5.6 s with 4, 4.2-5.1 s with 16; 64 was no better). */
#define ANCHOR_DEPTH 16

typedef struct anchor_entry {
    uint32_t slot, n; /* its n anchors follow the previous entry's in a[] */
} anchor_entry;

/* A document holds 16 to 64 anchors (sketch.h ND_ANCHORS_SCALED): the
 * chunk's anchors are one pool sized for ND_ANCHORS_STORE per document, and
 * a chunk whose pool cannot take another document's is handed over early. */
#define ANCHOR_POOL (ANCHOR_CHUNK * ND_ANCHORS_STORE)

typedef struct anchor_chunk {
    anchor_entry e[ANCHOR_CHUNK];
    uint32_t a[ANCHOR_POOL];
    unsigned n, na; /* entries, anchors */
} anchor_chunk;

typedef struct anchor_feed {
    nd_anchor_loader *ld;
    anchor_chunk *chunks; /* ANCHOR_DEPTH of them */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned filled;  /* chunks handed over, in order */
    unsigned placed;  /* chunks the helper has placed */
    unsigned writing; /* the chunk the scan fills: chunks[writing % DEPTH] */
    bool inited, stop, running;
    int rc; /* the helper's first error */
    pthread_t thread;
} anchor_feed;

static void *anchor_feed_main(void *arg)
{
    anchor_feed *f = arg;
    pthread_setname_np(pthread_self(), "nd-load-anchors");
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (f->placed == f->filled && !f->stop)
            pthread_cond_wait(&f->cv, &f->mu);
        if (f->placed == f->filled)
            break; /* stopped, and everything handed over is placed */
        anchor_chunk *c = &f->chunks[f->placed % ANCHOR_DEPTH];
        int rc = f->rc;
        pthread_mutex_unlock(&f->mu);
        for (unsigned i = 0, at = 0; i < c->n && rc == 0; at += c->e[i++].n)
            rc = nd_anchor_loader_add(f->ld, c->e[i].slot, c->a + at, c->e[i].n);
        pthread_mutex_lock(&f->mu);
        if (rc < 0 && f->rc == 0)
            f->rc = rc;
        f->placed++;
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* Starts the helper for loader ld; without it (a small store, or no
 * thread) anchor_feed_add() places the anchors itself. */
static void anchor_feed_start(anchor_feed *f, nd_anchor_loader *ld, uint64_t total)
{
    memset(f, 0, sizeof(*f));
    f->ld = ld;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->inited = true;
    if (!ld || total < FEED_MIN_DOCS || !(f->chunks = malloc(ANCHOR_DEPTH * sizeof(*f->chunks))))
        return;
    f->chunks[0].n = f->chunks[0].na = 0;
    f->running = pthread_create(&f->thread, NULL, anchor_feed_main, f) == 0;
    if (!f->running) {
        free(f->chunks);
        f->chunks = NULL;
    }
}

/* Hands the chunk being filled over and waits for a free one. Returns the
 * helper's error, if it had one. */
static int anchor_feed_flush(anchor_feed *f)
{
    pthread_mutex_lock(&f->mu);
    f->filled++;
    pthread_cond_broadcast(&f->cv);
    while (f->filled - f->placed == ANCHOR_DEPTH)
        pthread_cond_wait(&f->cv, &f->mu);
    int rc = f->rc;
    pthread_mutex_unlock(&f->mu);
    f->writing++;
    f->chunks[f->writing % ANCHOR_DEPTH].n = f->chunks[f->writing % ANCHOR_DEPTH].na = 0;
    return rc;
}

/* The anchors of a linked document: queued for the helper (which places
 * them in its own loader, the same ld), or placed in ld now. */
static int anchor_feed_add(anchor_feed *f, nd_anchor_loader *ld, uint32_t slot, const uint32_t *a,
                           unsigned n)
{
    if (!f->running)
        return nd_anchor_loader_add(ld, slot, a, n);
    anchor_chunk *c = &f->chunks[f->writing % ANCHOR_DEPTH];
    if (c->na + n > ANCHOR_POOL) { /* n <= ND_ANCHORS_MAX: an empty one takes it */
        int rc = anchor_feed_flush(f);
        if (rc < 0)
            return rc;
        c = &f->chunks[f->writing % ANCHOR_DEPTH];
    }
    anchor_entry *e = &c->e[c->n++];
    e->slot = slot;
    e->n = n;
    memcpy(c->a + c->na, a, n * sizeof(*a));
    c->na += n;
    return c->n == ANCHOR_CHUNK ? anchor_feed_flush(f) : 0;
}

/* Hands over what is left, waits until the helper has placed everything,
 * and stops it. Returns its first error, or 0. */
static int anchor_feed_stop(anchor_feed *f)
{
    int rc = 0;
    if (!f->inited)
        return 0;
    if (f->running) {
        pthread_mutex_lock(&f->mu);
        if (f->chunks[f->writing % ANCHOR_DEPTH].n)
            f->filled++;
        f->stop = true;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->thread, NULL);
        f->running = false;
        rc = f->rc;
    }
    free(f->chunks);
    f->chunks = NULL;
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    f->inited = false;
    return rc;
}

/* Carves size bytes (8-aligned) from the arena, taking a new block from
 * feed (or mapping one) when the current one is full. Loader only.
 * Returns NULL when out of memory. */
static void *arena_alloc(nd_registry *reg, block_feed *feed, size_t size)
{
    size = (size + 7) & ~(size_t)7;
    arena_block *b = reg->arena;
    if (!b || b->size - b->used < size) {
        size_t hdr = (sizeof(*b) + 7) & ~(size_t)7;
        b = hdr + size <= feed->block_size ? feed_take(feed) : NULL;
        if (!b) {
            size_t want = hdr + size > feed->block_size ? hdr + size : feed->block_size;
            b = block_map((want + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
        }
        if (!b)
            return NULL;
        b->next = reg->arena;
        reg->arena = b;
    }
    void *out = (char *)b + b->used;
    b->used += size;
    return out;
}

/* Counts one document less for interned version ix (a duplicate skipped). */
static void version_uncount(nd_registry *reg, unsigned ix)
{
    reg->versions[ix - 1].documents--;
}

size_t nd_registry_stale_versions(const nd_registry *reg, nd_registry_version_count *out,
                                  size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < reg->nversions; i++) {
        if (reg->versions[i].documents == 0)
            continue; /* only in records skipped as repeated ids */
        if (n < cap)
            out[n] = reg->versions[i];
        n++;
    }
    return n;
}

typedef struct load_ctx {
    nd_registry *reg;
    nd_registry_progress_fn progress;
    void *arg;
    unsigned progress_ms;
    const atomic_bool *stop;
    uint64_t loaded, total;
    int64_t last_ms;   /* nd_clock_ms() of the last progress call */
    bool locked;       /* writer and table held for the current batch */
    unsigned in_batch; /* records of the current batch */
    uint64_t batch_docs, batch_stale;
    uint64_t batch_digest; /* the sum of doc_digest() over the batch's documents */
    uint64_t *fps;         /* (fps[i], fslots[i]): what the index gets */
    uint32_t *fslots;
    size_t nfp, capfp;
    nd_anchor_loader *anchors; /* the anchor index, filled as documents link */
    /* Per id-table bucket, one bit (of 16, from the id hash's top bits) for
     * each document this load linked there: a document whose bit is clear
     * cannot repeat an id, so its chain is not walked (the walk reads an
     * older document's id: a cache and TLB miss per document, a third of
     * the scan's own time at 10M). NULL: every chain is walked (a table
     * that held documents before, or grew during the load). */
    uint16_t *tags;
    size_t tags_bytes, tags_nbuckets;
    /* Documents built but not linked yet, oldest first: the id table is
     * far larger than the caches, so its cells and chains are prefetched
     * LOAD_AHEAD records before they are needed. */
    nd_doc *ahead[LOAD_AHEAD];
    size_t ahead_h[LOAD_AHEAD];
    uint16_t ahead_tag[LOAD_AHEAD];                 /* their bit in tags */
    uint32_t ahead_anc[LOAD_AHEAD][ND_ANCHORS_MAX]; /* their anchors */
    uint8_t ahead_nanc[LOAD_AHEAD];
    unsigned nahead, ahead_first;
    block_feed feed;   /* arena blocks, prepared on another thread */
    anchor_feed afeed; /* anchors placed on another thread */
} load_ctx;

static int64_t ms_since(int64_t t_ms)
{
    return nd_clock_ms() - t_ms;
}

/* Makes room for LOAD_BATCH more documents (id table, slots, index pairs)
 * and takes the writer and the table lock for them. */
static int load_batch_begin(load_ctx *lc)
{
    nd_registry *reg = lc->reg;
    if (lc->stop && atomic_load_explicit(lc->stop, memory_order_relaxed))
        return -ECANCELED;
    pthread_mutex_lock(&reg->writer);
    int rc = nd_reg_map_reserve(reg, LOAD_BATCH);
    /* the batch's slots, up to the registry's most (load_link() stops there) */
    uint64_t room = ND_REG_DOCS_MAX - (uint64_t)reg->next_slot;
    if (rc == 0)
        rc = nd_reg_slots_reserve(reg, room < LOAD_BATCH ? room : LOAD_BATCH);
    if (rc == 0 && lc->nfp + LOAD_BATCH > lc->capfp) {
        size_t cap = lc->capfp * 2 > lc->nfp + LOAD_BATCH ? lc->capfp * 2 : lc->nfp + LOAD_BATCH;
        uint64_t *f = realloc(lc->fps, cap * sizeof(*f));
        if (f)
            lc->fps = f;
        uint32_t *s = realloc(lc->fslots, cap * sizeof(*s));
        if (s)
            lc->fslots = s;
        if (f && s)
            lc->capfp = cap;
        else
            rc = -ENOMEM;
    }
    if (rc < 0) {
        pthread_mutex_unlock(&reg->writer);
        return rc;
    }
    if (lc->tags && reg->nbuckets != lc->tags_nbuckets) { /* rehashed */
        munmap(lc->tags, lc->tags_bytes);
        lc->tags = NULL;
    }
    pthread_rwlock_wrlock(&reg->table);
    lc->locked = true;
    return 0;
}

/* Links a built document: skipped if its id was loaded before (records
 * come in registration order; an id stored twice, which the registry never
 * writes, keeps its first registration), else given a slot and linked by
 * id; its fingerprint goes to the index at the end. Batch locks held. */
static int load_link(load_ctx *lc, nd_doc *d, size_t h, unsigned ai)
{
    nd_registry *reg = lc->reg;
    uint16_t tag = lc->ahead_tag[ai];
    bool maybe = !lc->tags || (lc->tags[h] & tag);
    for (nd_doc *o = maybe ? doc_at(reg, reg->buckets[h]) : NULL; o; o = doc_at(reg, o->next))
        if (o->id_len == d->id_len && memcmp(nd_doc_id(o), nd_doc_id(d), d->id_len) == 0) {
            atomic_fetch_add_explicit(&reg->nduplicates, 1, memory_order_relaxed);
            if (nd_doc_stale(d))
                version_uncount(reg, d->version_ix);
            return 0; /* its arena bytes stay unused */
        }
    if (reg->next_slot >= reg->nslots) /* only at ND_REG_DOCS_MAX: load_batch_begin() */
        return ND_REG_TOO_MANY_DOCS;
    d->slot = reg->next_slot++; /* reserved by load_batch_begin() */
    reg->slots[d->slot] = d;
    d->next = reg->buckets[h];
    reg->buckets[h] = d->slot + 1;
    if (lc->tags)
        lc->tags[h] |= tag;
    if (!nd_doc_stale(d)) {
        lc->fps[lc->nfp] = d->simhash;
        lc->fslots[lc->nfp++] = d->slot;
        if (lc->ahead_nanc[ai]) {
            int rc = 0;
            if (!lc->anchors) /* a store counted empty: sized as it comes */
                rc = nd_anchor_loader_create(&lc->anchors, reg->anchors, 0);
            if (rc == 0)
                rc = anchor_feed_add(&lc->afeed, lc->anchors, d->slot, lc->ahead_anc[ai],
                                     lc->ahead_nanc[ai]);
            if (rc < 0)
                return rc;
        }
    }
    lc->batch_docs++;
    lc->batch_stale += nd_doc_stale(d);
    lc->batch_digest += doc_digest(d);
    lc->loaded++;
    return 0;
}

/* Links the oldest document waiting in lc->ahead. */
static int load_link_first(load_ctx *lc)
{
    unsigned i = lc->ahead_first;
    lc->ahead_first = (i + 1) % LOAD_AHEAD;
    lc->nahead--;
    return load_link(lc, lc->ahead[i], lc->ahead_h[i], i);
}

/* Links what waits, publishes the batch's counts, releases the locks,
 * reports progress. */
static int load_batch_end(load_ctx *lc)
{
    nd_registry *reg = lc->reg;
    int rc = 0;
    while (lc->nahead && rc == 0)
        rc = load_link_first(lc);
    lc->nahead = 0;
    atomic_fetch_add_explicit(&reg->ndocs, lc->batch_docs, memory_order_relaxed);
    atomic_fetch_add_explicit(&reg->nstale, lc->batch_stale, memory_order_relaxed);
    pthread_mutex_lock(&reg->digest_mu);
    reg->digest_sum += lc->batch_digest;
    reg->digest_docs += lc->batch_docs;
    pthread_mutex_unlock(&reg->digest_mu);
    pthread_rwlock_unlock(&reg->table);
    pthread_mutex_unlock(&reg->writer);
    lc->locked = false;
    lc->in_batch = 0;
    lc->batch_docs = lc->batch_stale = lc->batch_digest = 0;
    if (lc->progress && ms_since(lc->last_ms) >= (int64_t)lc->progress_ms) {
        lc->last_ms = nd_clock_ms();
        lc->progress(lc->arg, lc->loaded, lc->total,
                     atomic_load_explicit(&reg->nstale, memory_order_relaxed));
    }
    return rc;
}

/* Builds the document of one stored record in the arena and queues it in
 * lc->ahead, prefetching its id table cell now and, half-way, the head of
 * that cell's chain. Batch locks held. */
static int load_build(load_ctx *lc, const nd_record *rec)
{
    nd_registry *reg = lc->reg;
    if (rec->id_len == 0 || rec->id_len > ND_ID_MAX || !rec->version)
        return -EINVAL;
    if (rec->registered_at_us > reg->last_us)
        reg->last_us = rec->registered_at_us;
    size_t meta_len = rec->meta ? rec->meta_len : 0;
    /* The claim (account, policy, status) after id and meta. */
    size_t account_len = rec->account && rec->account_len <= ND_ACCOUNT_MAX ? rec->account_len : 0;
    size_t policy_len = rec->policy && rec->policy_len <= ND_POLICY_MAX ? rec->policy_len : 0;
    nd_doc *d = arena_alloc(reg, &lc->feed,
                            ND_DOC_HEAD + rec->id_len + meta_len +
                                doc_claim_size(account_len, policy_len, rec->status));
    if (!d)
        return -ENOMEM;
    doc_init(d, rec->id, rec->id_len, rec->meta, meta_len);
    doc_set_claim(d, rec->account, account_len, rec->policy, policy_len, rec->status);
    if (rec->status == ND_CLAIM_SUPERSEDED)
        doc_set_superseded_by(d, rec->superseded_by_us);
    d->arena = true;
    d->simhash = rec->simhash;
    d->registered_at_us = rec->registered_at_us;
    d->chars = rec->chars;
    memcpy(d->text_hash, rec->text_hash, 16);
    bool stale = strcmp(rec->version, ND_RECORD_VERSION) != 0;
    int ix = stale ? nd_reg_version_intern(reg, rec->version) : 0;
    if (ix < 0)
        return ix;
    d->version_ix = (uint8_t)ix;
    /* Not visible to other threads before the batch locks are released: no
     * fence (a seq_cst store per record stalls the prefetches). */
    atomic_store_explicit(&d->state, DOC_LIVE, memory_order_relaxed);
    uint64_t hash = id_hash(nd_doc_id(d), d->id_len);
    size_t h = hash & (reg->nbuckets - 1);
    __builtin_prefetch(&reg->buckets[h]);
    if (lc->tags)
        __builtin_prefetch(&lc->tags[h]);
    int rc = lc->nahead == LOAD_AHEAD ? load_link_first(lc) : 0;
    unsigned at = (lc->ahead_first + lc->nahead++) % LOAD_AHEAD;
    lc->ahead[at] = d;
    lc->ahead_h[at] = h;
    lc->ahead_tag[at] = (uint16_t)(1u << (hash >> 60));
    unsigned na = rec->nanchors < ND_ANCHORS_MAX ? rec->nanchors : ND_ANCHORS_MAX;
    for (unsigned j = 0; j < na; j++) {
        const uint8_t *b = rec->anchors + 4 * j;
        lc->ahead_anc[at][j] = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                               (uint32_t)b[3] << 24;
    }
    lc->ahead_nanc[at] = (uint8_t)na;
    if (lc->nahead > LOAD_AHEAD / 2) {
        unsigned mid = (lc->ahead_first + lc->nahead - 1 - LOAD_AHEAD / 2) % LOAD_AHEAD;
        bool maybe = !lc->tags || (lc->tags[lc->ahead_h[mid]] & lc->ahead_tag[mid]);
        nd_doc *head = maybe ? doc_at(reg, reg->buckets[lc->ahead_h[mid]]) : NULL;
        if (head) {
            __builtin_prefetch(head);
            __builtin_prefetch(nd_doc_id(head));
        }
    }
    return rc;
}

static int load_one(void *arg, const nd_record *rec)
{
    load_ctx *lc = arg;
    int rc = lc->locked ? 0 : load_batch_begin(lc);
    if (rc == 0)
        rc = load_build(lc, rec);
    if (lc->locked && (rc < 0 || ++lc->in_batch == LOAD_BATCH)) {
        int end = load_batch_end(lc);
        rc = rc ? rc : end;
    }
    return rc;
}

/* The anchor loader's estimate of the entries to come: a document holds
 * 16..64 anchors (sketch.h ND_ANCHORS_SCALED, more the longer it is), so
 * the first ANCHOR_SAMPLE records give the mean, plus 1/16 for the
 * sample's error. An estimate too small still loads (the loader spills
 * beyond it, at more memory); one too large maps more than it fills (the
 * pages left empty are given back by the finish). */
#define ANCHOR_SAMPLE 4096

typedef struct anchor_sample {
    uint64_t n, anchors;
} anchor_sample;

static int sample_anchors(void *arg, const nd_record *rec)
{
    anchor_sample *a = arg;
    a->anchors += rec->anchors ? (rec->nanchors < ND_ANCHORS_MAX ? rec->nanchors : ND_ANCHORS_MAX)
                               : 0;
    return ++a->n == ANCHOR_SAMPLE;
}

static uint64_t anchors_expected(nd_registry *reg, uint64_t total)
{
    anchor_sample a = {0, 0};
    if (nd_store_scan(reg->store, sample_anchors, &a) < 0 || a.n == 0)
        return total * ND_ANCHORS_STORE;
    uint64_t mean16 = (a.anchors * 16 + a.n - 1) / a.n; /* in 1/16 anchors */
    return total * (mean16 + mean16 / 16) / 16;
}

/* Scans the store into the tables and the anchor index's loader (entries
 * placed as documents link), then builds the fingerprint index in one go
 * and finishes the anchor index (sorted per part, in place). */
static int load_store(nd_registry *reg, load_ctx *lc)
{
    int64_t total = nd_store_count(reg->store);
    if (total < 0)
        return (int)total;
    lc->total = (uint64_t)total;
    nd_store_prefetch(reg->store);    /* reads while the tables are made */
    pthread_mutex_lock(&reg->writer); /* size the tables once */
    int rc = nd_reg_map_reserve(reg, lc->total);
    if (rc == 0)
        rc = nd_reg_slots_reserve(reg, lc->total);
    pthread_mutex_unlock(&reg->writer);
    lc->capfp = lc->total + LOAD_BATCH;
    lc->fps = malloc(lc->capfp * sizeof(*lc->fps));
    lc->fslots = malloc(lc->capfp * sizeof(*lc->fslots));
    if (!lc->fps || !lc->fslots)
        lc->capfp = 0; /* load_batch_begin() tries again */
    else {
        prefault(lc->fps, lc->capfp * sizeof(*lc->fps)); /* the bulk build sorts them */
        prefault(lc->fslots, lc->capfp * sizeof(*lc->fslots));
    }
    if (rc == 0 && lc->total)
        rc = nd_anchor_loader_create(&lc->anchors, reg->anchors, anchors_expected(reg, lc->total));
    if (rc == 0 && lc->total && reg->next_slot == 0 &&
        atomic_load_explicit(&reg->ndocs, memory_order_relaxed) == 0) {
        lc->tags_nbuckets = reg->nbuckets;
        lc->tags_bytes = reg->nbuckets * sizeof(*lc->tags);
        void *t = mmap(NULL, lc->tags_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        lc->tags = t == MAP_FAILED ? NULL : t; /* without: chains walked */
        if (lc->tags)
            madvise(t, lc->tags_bytes, MADV_HUGEPAGE);
    }
    if (rc == 0) {
        feed_start(&lc->feed, lc->total);
        anchor_feed_start(&lc->afeed, lc->anchors, lc->total);
        rc = nd_store_scan(reg->store, load_one, lc);
        feed_stop(&lc->feed);
    }
    if (lc->locked) {
        int end = load_batch_end(lc);
        rc = rc ? rc : end;
    }
    int placed = anchor_feed_stop(&lc->afeed); /* before the loader goes */
    rc = rc ? rc : placed;
    if (rc == 0 && lc->progress) /* scanned; the index build follows */
        lc->progress(lc->arg, lc->loaded, lc->total,
                     atomic_load_explicit(&reg->nstale, memory_order_relaxed));
    if (rc == 0) {
        pthread_mutex_lock(&reg->writer);
        rc = nd_index_insert_many(reg->index, lc->fps, lc->fslots, lc->nfp, LOAD_THREADS);
        if (rc == 0 && lc->anchors)
            rc = nd_anchor_loader_finish(lc->anchors, LOAD_THREADS);
        pthread_mutex_unlock(&reg->writer);
    }
    nd_anchor_loader_destroy(lc->anchors);
    if (lc->tags)
        munmap(lc->tags, lc->tags_bytes);
    free(lc->fps);
    free(lc->fslots);
    return rc > 0 ? -EIO : rc;
}

const char *nd_registry_load_error(int rc)
{
    if (rc == ND_REG_TOO_MANY_VERSIONS)
        return "records of more than 255 fingerprint versions other than this build's (re-register "
               "or delete the documents of the oldest)";
    if (rc == ND_REG_TOO_MANY_DOCS)
        return "more records than one server holds (" ND_REG_DOCS_MAX_TEXT
               "; split the documents over "
               "servers by id)";
    return strerror(-rc);
}

int nd_registry_load(nd_registry *reg, nd_registry_progress_fn progress, void *arg,
                     unsigned progress_ms, const atomic_bool *stop)
{
    load_ctx lc = {
        .reg = reg, .progress = progress, .arg = arg, .progress_ms = progress_ms, .stop = stop};
    lc.last_ms = nd_clock_ms();
    int rc = load_store(reg, &lc);
    if (rc < 0)
        return rc;
    if (progress)
        progress(arg, lc.loaded, lc.total, atomic_load(&reg->nstale));
    int64_t greatest = reg->last_us;
    reg->last_us = 0;
    nd_reg_clock_raise(reg, greatest); /* not beyond the clock + its skew */
    nd_registry_set_loaded(reg);
    return 0;
}
