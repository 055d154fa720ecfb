/* docs_internal.h - the registry's state (struct nd_registry: the tables
 * of documents, the indexes, the clock, the changes in flight, the digest)
 * and what its rooms share about documents: the document states, the
 * arena, a document's memory (doc_init(), doc_set_claim()), its
 * references, its hash in the digest, the id map and the slot table
 * (docs.c). Shared by docs.c, verdict.c, registry.c (the change state
 * machine, through registry_internal.h) and the loader. Not for other
 * modules: they see registry.h. Same locking rules as registry.h
 * describes. */
#ifndef ND_DOCS_INTERNAL_H
#define ND_DOCS_INTERNAL_H

#include "anchor_index.h"
#include "docs.h"
#include "index.h"
#include "registry_options.h"
#include "store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifndef XXH_STATIC_LINKING_ONLY
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: doc_digest() */
#endif
#include <xxhash.h>

enum doc_state {
    DOC_PENDING = 1,  /* registered in memory, store write in flight */
    DOC_LIVE = 2,     /* durable (or in-memory registry) */
    DOC_DELETING = 3, /* store deletion in flight */
    DOC_GONE = 4,     /* unlinked; only references keep it */
    DOC_AMENDING = 5, /* live, its replacement (a policy or status change)
                       * waiting for the store: readers still see it, other
                       * changes of its id wait */
};

/* A block of memory for documents loaded at start (mmap, huge pages if the
 * kernel gives them: a 10M-document load otherwise spends much of its time
 * in page faults and malloc). Never freed before nd_registry_destroy(). */
/* The most fingerprint versions other than the current one a registry
 * holds documents of (nd_doc.version_ix is 8 bits). */
#define ND_REG_VERSIONS_MAX 255

typedef struct arena_block {
    struct arena_block *next;
    size_t size; /* of the mapping */
    size_t used; /* bytes handed out, header included */
} arena_block;

struct nd_registry {
    nd_store *store; /* borrowed: LMDB, or the memory store of --in-memory */
    nd_registry_options opts;
    nd_index *index;
    nd_anchor_index *anchors; /* anchor -> slots (partial-copy candidates) */

    pthread_mutex_t writer; /* serialises every change (see registry.h) */
    pthread_rwlock_t table; /* guards buckets/slots for lock-free-index readers */

    /* Requests waiting for changes in flight (registry.c's nd_waiter, each
     * naming the document whose change it waits for; that document is
     * marked waited). Writer held. */
    struct nd_waiter *waiters;

    uint32_t *buckets; /* id hash chains: the first document's slot + 1 (0:
                        * empty); each document's next links on */
    size_t nbuckets;   /* power of two */
    nd_doc **slots;    /* slot -> document */
    uint32_t nslots;   /* allocated entries of slots */
    uint32_t next_slot;
    uint32_t *free_slots;
    uint32_t nfree;

    /* registered_at of the last registration (monotonic), never set
     * beyond the wall clock + ND_REGISTRY_AHEAD_US */
    int64_t last_us;
    /* the greatest registered_at loaded, applied or given (it may lie
     * beyond last_us: stored data dated ahead of the clock) */
    int64_t beyond_us;
    /* given_time()'s memory: for a given time at, the time after the last
     * one it handed out (a small direct-mapped table) */
    struct {
        int64_t at, next;
    } given_memo[64];
    struct nd_reg_change **inflight; /* registrations waiting for the store */
    int64_t *inflight_at;            /* and their times (a given time must not
                               * take one): registry.c */
    size_t ninflight, inflight_cap;

    arena_block *arena; /* loader, then only freed */
    /* Other fingerprint versions loaded, names owned; a stale document's
     * version_ix - 1 indexes them. Appended only (under the writer or by
     * the loader), never moved: any thread reads an entry a document
     * names. */
    nd_registry_version_count versions[ND_REG_VERSIONS_MAX];
    size_t nversions;

    /* The digest of the committed documents (nd_registry_digest()): the
     * sum of doc_digest() over them, and their number. Changed with the
     * writer held, when a change commits (complete_locked()) and as the
     * loader links; read by any thread; both under digest_mu. */
    pthread_mutex_t digest_mu;
    uint64_t digest_sum;
    uint64_t digest_docs;

    _Atomic bool loaded;
    _Atomic bool shutdown; /* nd_registry_shutdown() was called */
    _Atomic uint64_t ndocs, nstale, npending, nduplicates;
};

/* Prefaults [p, p + len) for writing on small pages (MADV_POPULATE_WRITE,
 * Linux 5.14+): one call instead of a page fault per 4 KiB page, which
 * costs tens of microseconds on some virtual machines (measured here:
 * 1 GiB by faults 3-6 s, by this 0.3 s). For memory written in order and
 * read a few places at a time (the loader's arena blocks): no huge page is
 * asked for, as the kernel may compact memory to make one (THP defrag
 * "madvise") in the faulting thread; at 10M documents, on a machine whose
 * free memory the page cache had fragmented, that was 4-8 s of system time
 * against 2-3 s on small pages. A hint; errors are ignored. */
static inline void prefault_pages(void *p, size_t len)
{
#ifdef MADV_POPULATE_WRITE
    uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
    uintptr_t e = ((uintptr_t)p + len) & ~(uintptr_t)4095;
    if (e > a)
        madvise((void *)a, e - a, MADV_POPULATE_WRITE);
#else
    (void)p, (void)len;
#endif
}

/* Prefaults [p, p + len) as prefault_pages() does, asking first for huge
 * pages (MADV_HUGEPAGE) from PREFAULT_HUGE_MIN bytes: for tables read at
 * random for as long as the server runs, where a huge page spares a TLB
 * miss per read. */
#define PREFAULT_HUGE_MIN ((uintptr_t)2 << 20) /* one huge page */
static inline void prefault(void *p, size_t len)
{
    uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
    uintptr_t e = ((uintptr_t)p + len) & ~(uintptr_t)4095;
    if (e <= a)
        return;
    if (e - a >= PREFAULT_HUGE_MIN)
        madvise((void *)a, e - a, MADV_HUGEPAGE);
    prefault_pages(p, len);
}

/* Fills the document at d (ND_DOC_HEAD + id_len + meta_len bytes) with
 * copies of id and meta, one reference, the current version. */
static inline nd_doc *doc_init(nd_doc *d, const char *id, size_t id_len, const char *meta,
                               size_t meta_len)
{
    memset(d, 0, ND_DOC_HEAD);
    memcpy(d->bytes, id, id_len);
    d->id_len = (uint16_t)id_len;
    if (meta && meta_len) {
        memcpy(d->bytes + id_len, meta, meta_len);
        d->meta_len = (uint32_t)meta_len;
    }
    atomic_init(&d->refs, 1);
    d->slot = ND_DOC_NO_SLOT;
    return d;
}

/* Sets the time of the document that superseded d when d's status is
 * ND_CLAIM_SUPERSEDED (its memory then has room for it: doc_claim_size());
 * any other status keeps none, and this does nothing. */
static inline void doc_set_superseded_by(nd_doc *d, int64_t us)
{
    if (d->status == ND_CLAIM_SUPERSEDED)
        memcpy((char *)nd_doc_tail(d), &us, sizeof(us));
}

/* A new nd_doc_extra of na anchors (their values copied from anchors,
 * unless NULL: the caller fills them) and the encoded sketch sk[0..sk_len)
 * (NULL/0: none). Returns NULL when out of memory; free() frees it. */
static inline nd_doc_extra *doc_extra_new(const uint32_t *anchors, unsigned na, const uint8_t *sk,
                                          size_t sk_len)
{
    nd_doc_extra *x = malloc(sizeof(*x) + 4 * (size_t)na + sk_len);
    if (!x)
        return NULL;
    x->nanchors = (uint8_t)na;
    x->sketch_len = (uint16_t)sk_len;
    if (anchors && na)
        memcpy(x->anchors, anchors, 4 * (size_t)na);
    if (sk_len)
        memcpy(x->anchors + na, sk, sk_len);
    return x;
}

/* What a document registered by this process keeps until its first commit
 * (its stored anchors and encoded sketch): the pointer nd_reg_doc_new()
 * places just before the document; NULL for a loaded (arena) one. Changed
 * and read under the writer only; nd_doc_release() frees it. */
static inline nd_doc_extra *doc_extra(const nd_doc *d)
{
    return d->arena ? NULL : ((nd_doc_extra *const *)(const void *)d)[-1];
}

/* Sets d's extra (d made by nd_reg_doc_new(); the previous one is the
 * caller's to free). Writer held, or d not visible yet. */
static inline void doc_set_extra(nd_doc *d, nd_doc_extra *x)
{
    ((nd_doc_extra **)(void *)d)[-1] = x;
}

/* The document of hash chain link `link` (a slot + 1; 0: none), NULL at
 * the chain's end. Table locked (or writer held). */
static inline nd_doc *doc_at(const nd_registry *reg, uint32_t link)
{
    return link ? reg->slots[link - 1] : NULL;
}

/* The bytes doc_set_claim() appends after id and meta: account, policy,
 * and superseded_by when superseded. */
static inline size_t doc_claim_size(size_t account_len, size_t policy_len, int status)
{
    return account_len + policy_len + (status == ND_CLAIM_SUPERSEDED ? sizeof(int64_t) : 0);
}

/* Sets d's claim (account, policy, status): copies of account and policy placed after its
 * id and meta (room for doc_claim_size() bytes there), and status. NULL or
 * 0 lengths: none. */
static inline void doc_set_claim(nd_doc *d, const char *account, size_t account_len,
                                 const char *policy, size_t policy_len, int status)
{
    char *p = d->bytes + d->id_len + d->meta_len;
    d->account_len = 0;
    d->policy_len = 0;
    if (account && account_len) {
        memcpy(p, account, account_len);
        d->account_len = (uint16_t)account_len;
        p += account_len;
    }
    if (policy && policy_len) {
        memcpy(p, policy, policy_len);
        d->policy_len = (uint32_t)policy_len;
    }
    d->status = (uint8_t)status;
    if (status == ND_CLAIM_SUPERSEDED)
        doc_set_superseded_by(d, 0); /* the caller sets it */
}

/* The hash of one committed document in the registry's digest: XXH3-64
 * over its id's length, registered_at, SimHash, status, account and policy
 * lengths (4 x 8 bytes, host order), then its id, text hash, account and
 * policy. Documents are summed (mod 2^64), so the digest does not depend
 * on the order they were committed in. */
#define DOC_DIGEST_BUF 512
static inline uint64_t doc_digest(const nd_doc *d)
{
    uint64_t head[4] = {d->id_len, (uint64_t)d->registered_at_us, d->simhash,
                        (uint64_t)d->status << 48 | (uint64_t)d->account_len << 24 | d->policy_len};
    size_t n = sizeof(head) + d->id_len + 16 + d->account_len + d->policy_len;
    if (n <= DOC_DIGEST_BUF) { /* the usual document: one call */
        unsigned char buf[DOC_DIGEST_BUF], *p = buf;
        memcpy(p, head, sizeof(head));
        p += sizeof(head);
        memcpy(p, nd_doc_id(d), d->id_len);
        p += d->id_len;
        memcpy(p, d->text_hash, 16);
        p += 16;
        if (d->account_len)
            memcpy(p, nd_doc_account(d), d->account_len);
        p += d->account_len;
        if (d->policy_len)
            memcpy(p, nd_doc_policy(d), d->policy_len);
        return XXH3_64bits(buf, n);
    }
    XXH3_state_t st; /* the same bytes, streamed */
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, head, sizeof(head));
    XXH3_64bits_update(&st, nd_doc_id(d), d->id_len);
    XXH3_64bits_update(&st, d->text_hash, 16);
    if (d->account_len)
        XXH3_64bits_update(&st, nd_doc_account(d), d->account_len);
    if (d->policy_len)
        XXH3_64bits_update(&st, nd_doc_policy(d), d->policy_len);
    return XXH3_64bits_digest(&st);
}

static inline uint64_t id_hash(const char *id, size_t len)
{
    return XXH3_64bits(id, len);
}

static inline nd_doc *doc_ref(nd_doc *d)
{
    atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed);
    return d;
}

/* The nd_doc.sk_size word of a sketch of mode, shift and n values. */
static inline uint32_t sk_size_pack(unsigned mode, unsigned shift, unsigned n)
{
    return ND_DOC_SK_KNOWN | (uint32_t)(mode & 1) << 30 | (uint32_t)(shift & 31) << 16 |
           (n & 0xFFFF);
}

/* ---- documents and tables (docs.c) ---- */

/* A new document with copies of id, meta, account and policy (NULL/0:
 * none) and status, one reference. Returns NULL when out of memory. */
nd_doc *nd_reg_doc_new(const char *id, size_t id_len, const char *meta, size_t meta_len,
                       const char *account, size_t account_len, const char *policy,
                       size_t policy_len, int status);

/* The first document of id in its chain (borrowed); with settled, the
 * first that is not waiting for its first commit: what a reader may be
 * shown. NULL: none. Writer held or table read-locked. */
nd_doc *nd_reg_chain_find(const nd_registry *reg, const char *id, size_t len, bool settled);

static inline nd_doc *map_find(const nd_registry *reg, const char *id, size_t len)
{
    return nd_reg_chain_find(reg, id, len, false);
}

/* Makes d visible: slot, index (unless stale), id map. Takes over the
 * caller's reference as the registry's own. Writer held. Returns 0,
 * -ENOSPC or -ENOMEM (d then untouched). */
int nd_reg_link_doc(nd_registry *reg, nd_doc *d);

/* Removes d from the indexes and the tables and drops the registry's
 * reference. Its anchors: doc_extra(d)'s, else anchors[0..nanchors) (read from
 * its stored record). Writer held. */
void nd_reg_unlink_doc_anchors(nd_registry *reg, nd_doc *d, const uint32_t *anchors,
                               size_t nanchors);

static inline void unlink_doc(nd_registry *reg, nd_doc *d)
{
    nd_reg_unlink_doc_anchors(reg, d, NULL, 0);
}

/* Gives amended copy nd (made by nd_reg_doc_new() with the new claim) the
 * fields of d that a claim change keeps; it stays unlinked (pending). */
void nd_reg_amended_from(nd_doc *nd, const nd_doc *d);

/* The document of a stream record (new, one reference), pending, its
 * anchors and sketch kept in extra until committed (as a registration's).
 * NULL: out of memory. */
nd_doc *nd_reg_doc_of_record(nd_registry *reg, const nd_record *rec);

/* Grows the hash table so that extra more documents keep it at most 75%
 * full. Writer held, table unlocked. Returns 0 or -ENOMEM. */
int nd_reg_map_reserve(nd_registry *reg, uint64_t extra);

/* The index (1..ND_REG_VERSIONS_MAX) of the registry's copy of fingerprint
 * version v (not the current one), counted once more
 * (nd_registry_stale_versions()): a stale document's version_ix. The
 * loader, or the writer held. Returns it, -ENOMEM, or -ENOSPC when the
 * registry holds ND_REG_VERSIONS_MAX other versions already. (docs.c) */
int nd_reg_version_intern(nd_registry *reg, const char *v);

/* Grows the slot table so that extra more slots can be handed out without
 * reusing freed ones. Writer held, table unlocked. Returns 0,
 * ND_REG_TOO_MANY_DOCS (past ND_REG_DOCS_MAX) or -ENOMEM. */
int nd_reg_slots_reserve(nd_registry *reg, uint64_t extra);

#endif
