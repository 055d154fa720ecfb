/* docs.c - the registry's documents and the tables that find them: a
 * document's memory and references, the id map (hash chains), the slot
 * table, linking into and unlinking from the SimHash and anchor indexes,
 * the fingerprint versions loaded, and the document of a stored record.
 * The registry's state and the document helpers are docs_internal.h's,
 * shared with registry.c (changes), verdict.c (checks) and the loader;
 * locking as registry.h describes. */
#include "docs_internal.h"
#include "registry.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- documents ---- */

/* A document is 63 bytes before its strings (proto/scale.md): a field
 * added or moved so that padding appears fails here, not in a bench. */
_Static_assert(sizeof(void *) != 8 || ND_DOC_HEAD == 63, "nd_doc is laid out without padding");
_Static_assert(ND_META_MAX < (1u << 25) && ND_POLICY_MAX < (1u << 17) && ND_ID_MAX < (1u << 11) &&
                   ND_ACCOUNT_MAX < (1u << 11),
               "nd_doc's length fields hold their limits");
_Static_assert(ND_CLAIM_ACTIVE < 4 && ND_CLAIM_REVOKED < 4 && ND_CLAIM_SUPERSEDED < 4,
               "nd_doc.status holds every claim status");
_Static_assert(ND_REG_DOCS_MAX <= ND_DOC_NO_SLOT && ND_DOC_NO_SLOT < (1u << 28),
               "nd_doc.slot holds every slot and the unlinked mark");
_Static_assert(ND_REG_DOCS_MAX == 268435455, "ND_REG_DOCS_MAX_TEXT words ND_REG_DOCS_MAX");

/* A new document with copies of id, meta, account and policy (NULL/0:
 * none) and status. Returns NULL when out of memory. */
nd_doc *nd_reg_doc_new(const char *id, size_t id_len, const char *meta, size_t meta_len,
                       const char *account, size_t account_len, const char *policy,
                       size_t policy_len, int status)
{
    account_len = account ? account_len : 0;
    policy_len = policy ? policy_len : 0;
    /* its extra's pointer first (doc_extra()), then the document */
    char *p = malloc(sizeof(nd_doc_extra *) + ND_DOC_HEAD + id_len + meta_len +
                     doc_claim_size(account_len, policy_len, status));
    if (!p)
        return NULL;
    nd_doc *d = (nd_doc *)(void *)(p + sizeof(nd_doc_extra *));
    doc_init(d, id, id_len, meta, meta_len);
    doc_set_extra(d, NULL);
    doc_set_claim(d, account, account_len, policy, policy_len, status);
    return d;
}

void nd_doc_release(nd_doc *d)
{
    if (d && atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) == 1 && !d->arena) {
        free(doc_extra(d));
        free((char *)d - sizeof(nd_doc_extra *));
    }
}

/* ---- tables (writer held; table write-locked where they change) ---- */

/* The first document of id in its chain; with settled, the first that is
 * not waiting for its first commit: what a reader may be shown (an upgrade
 * in flight links its new document ahead of the old one, which stays the
 * durable answer until the commit). */
nd_doc *nd_reg_chain_find(const nd_registry *reg, const char *id, size_t len, bool settled)
{
    nd_doc *d = doc_at(reg, reg->buckets[id_hash(id, len) & (reg->nbuckets - 1)]);
    for (; d; d = doc_at(reg, d->next))
        if (d->id_len == len && memcmp(nd_doc_id(d), id, len) == 0 &&
            !(settled && d->state == DOC_PENDING))
            return d;
    return NULL;
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
    uint32_t *b = calloc(nb, sizeof(*b));
    if (!b)
        return -ENOMEM;
    prefault(b, nb * sizeof(*b));
    pthread_rwlock_wrlock(&reg->table);
    for (size_t i = 0; i < reg->nbuckets; i++) {
        uint32_t link = reg->buckets[i];
        while (link) {
            nd_doc *d = doc_at(reg, link);
            uint32_t next = d->next;
            size_t h = id_hash(nd_doc_id(d), d->id_len) & (nb - 1);
            d->next = b[h];
            b[h] = link;
            link = next;
        }
    }
    free(reg->buckets);
    reg->buckets = b;
    reg->nbuckets = nb;
    pthread_rwlock_unlock(&reg->table);
    return 0;
}

/* Grows the slot table so that extra more slots can be handed out without
 * reusing freed ones. Writer held, table unlocked. Returns 0,
 * ND_REG_TOO_MANY_DOCS or -ENOMEM. */
int nd_reg_slots_reserve(nd_registry *reg, uint64_t extra)
{
    uint64_t need = (uint64_t)reg->next_slot + extra;
    if (need > ND_REG_DOCS_MAX)
        return ND_REG_TOO_MANY_DOCS;
    if (need > reg->nslots) {
        uint64_t n = reg->nslots ? (uint64_t)reg->nslots * 2 : 1024;
        if (n < need)
            n = need;
        if (n > ND_REG_DOCS_MAX)
            n = ND_REG_DOCS_MAX;
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
int nd_reg_link_doc(nd_registry *reg, nd_doc *d)
{
    uint32_t slot = 0;
    int rc = nd_reg_map_reserve(reg, 1);
    if (rc == 0)
        rc = slot_alloc(reg, &slot);
    if (rc < 0)
        return rc;
    if (!nd_doc_stale(d)) {
        rc = nd_index_insert(reg->index, d->simhash, slot);
        const nd_doc_extra *x = doc_extra(d);
        if (rc == 0 && x && x->nanchors &&
            (rc = nd_anchor_index_insert(reg->anchors, slot, x->anchors, x->nanchors)) < 0)
            nd_index_remove(reg->index, d->simhash, slot);
        if (rc < 0) {
            reg->free_slots[reg->nfree++] = slot;
            return rc;
        }
    }
    d->slot = slot;
    size_t h = id_hash(nd_doc_id(d), d->id_len) & (reg->nbuckets - 1);
    pthread_rwlock_wrlock(&reg->table);
    reg->slots[slot] = d;
    d->next = reg->buckets[h];
    reg->buckets[h] = slot + 1;
    pthread_rwlock_unlock(&reg->table);
    atomic_fetch_add_explicit(&reg->ndocs, 1, memory_order_relaxed);
    if (nd_doc_stale(d))
        atomic_fetch_add_explicit(&reg->nstale, 1, memory_order_relaxed);
    return 0;
}

/* Removes d from the indexes and the tables and drops the registry's
 * reference. Its anchors: doc_extra(d)'s, else anchors[0..nanchors) (read from
 * its stored record). Writer held. */
void nd_reg_unlink_doc_anchors(nd_registry *reg, nd_doc *d, const uint32_t *anchors,
                               size_t nanchors)
{
    if (!nd_doc_stale(d)) {
        nd_index_remove(reg->index, d->simhash, d->slot);
        const nd_doc_extra *x = doc_extra(d);
        if (x)
            nd_anchor_index_remove(reg->anchors, d->slot, x->anchors, x->nanchors);
        else if (nanchors)
            nd_anchor_index_remove(reg->anchors, d->slot, anchors, nanchors);
    }
    size_t h = id_hash(nd_doc_id(d), d->id_len) & (reg->nbuckets - 1);
    pthread_rwlock_wrlock(&reg->table);
    uint32_t *pp = &reg->buckets[h];
    while (*pp && *pp != (uint32_t)d->slot + 1)
        pp = &doc_at(reg, *pp)->next;
    if (*pp)
        *pp = d->next;
    reg->slots[d->slot] = NULL;
    pthread_rwlock_unlock(&reg->table);
    /* free_slots has room for every slot ever allocated. */
    reg->free_slots[reg->nfree++] = d->slot;
    d->state = DOC_GONE;
    d->next = 0;
    atomic_fetch_sub_explicit(&reg->ndocs, 1, memory_order_relaxed);
    if (nd_doc_stale(d))
        atomic_fetch_sub_explicit(&reg->nstale, 1, memory_order_relaxed);
    nd_doc_release(d);
}

/* Gives amended copy nd (made by nd_reg_doc_new() with the new claim) the fields
 * of d that a claim change keeps; it stays unlinked (pending). */
void nd_reg_amended_from(nd_doc *nd, const nd_doc *d)
{
    nd->simhash = d->simhash;
    nd->registered_at_us = d->registered_at_us;
    nd->chars = d->chars;
    memcpy(nd->text_hash, d->text_hash, 16);
    nd->version_ix = d->version_ix;
    atomic_init(&nd->sk_size, atomic_load_explicit(&d->sk_size, memory_order_relaxed));
    nd->state = DOC_PENDING; /* not linked until committed */
}

bool nd_registry_loaded(const nd_registry *reg)
{
    return atomic_load(&reg->loaded);
}

int nd_registry_get(nd_registry *reg, const char *id, size_t id_len, nd_doc **out)
{
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    pthread_rwlock_rdlock(&reg->table);
    nd_doc *d = nd_reg_chain_find(reg, id, id_len, true);
    if (d)
        doc_ref(d);
    pthread_rwlock_unlock(&reg->table);
    *out = d;
    return d ? 0 : -ENOENT;
}

/* ---- counts ---- */

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

/* ---- fingerprint versions ---- */

int nd_reg_version_intern(nd_registry *reg, const char *v)
{
    for (size_t i = 0; i < reg->nversions; i++)
        if (strcmp(reg->versions[i].version, v) == 0) {
            reg->versions[i].documents++;
            return (int)i + 1;
        }
    if (reg->nversions == ND_REG_VERSIONS_MAX)
        return -ENOSPC;
    char *copy = strdup(v);
    if (!copy)
        return -ENOMEM;
    reg->versions[reg->nversions++] = (nd_registry_version_count){copy, 1};
    return (int)reg->nversions;
}

const char *nd_registry_doc_version(const nd_registry *reg, const nd_doc *d)
{
    return d->version_ix ? reg->versions[d->version_ix - 1].version : ND_RECORD_VERSION;
}

/* The document of a stream record, pending, its anchors and sketch kept
 * in extra until committed (as a registration's). NULL: out of memory,
 * or a record of one fingerprint version more than the registry holds
 * (ND_REG_VERSIONS_MAX). */
nd_doc *nd_reg_doc_of_record(nd_registry *reg, const nd_record *rec)
{
    nd_doc *d = nd_reg_doc_new(rec->id, rec->id_len, rec->meta, rec->meta ? rec->meta_len : 0,
                               rec->account, rec->account_len, rec->policy, rec->policy_len,
                               rec->status);
    if (!d)
        return NULL;
    if (rec->status == ND_CLAIM_SUPERSEDED)
        doc_set_superseded_by(d, rec->superseded_by_us);
    d->simhash = rec->simhash;
    d->chars = rec->chars;
    memcpy(d->text_hash, rec->text_hash, 16);
    d->registered_at_us = rec->registered_at_us;
    bool stale = strcmp(rec->version, ND_RECORD_VERSION) != 0;
    int ix = stale ? nd_reg_version_intern(reg, rec->version) : 0;
    if (ix < 0) {
        nd_doc_release(d);
        return NULL;
    }
    d->version_ix = (uint8_t)ix;
    unsigned na = rec->anchors ? rec->nanchors : 0;
    na = na < ND_ANCHORS_MAX ? na : ND_ANCHORS_MAX;
    size_t sk = rec->sketch ? rec->sketch_len : 0;
    if (na || sk) {
        nd_doc_extra *x = doc_extra_new(NULL, na, rec->sketch, sk);
        if (!x) {
            nd_doc_release(d);
            return NULL;
        }
        for (unsigned i = 0; i < na; i++) {
            const uint8_t *b = rec->anchors + 4 * i;
            x->anchors[i] = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                            (uint32_t)b[3] << 24;
        }
        doc_set_extra(d, x);
        if (sk >= 8) {
            const uint8_t *e = rec->sketch; /* nd_sketch_encode()'s header */
            atomic_init(&d->sk_size,
                        sk_size_pack(e[1] >> 7, e[1] & 0x7F, (unsigned)e[2] | (unsigned)e[3] << 8));
        }
    }
    d->state = DOC_PENDING;
    return d;
}
