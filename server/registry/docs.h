/* docs.h - the registry's documents (docs.c): the document and its
 * references, the registry's handle, looking a document up by id, the
 * digest and the counts of the documents held, the fingerprint versions
 * loaded. Public through registry.h, which includes it; the tables behind
 * these (the registry's state) are docs_internal.h's. */
#ifndef ND_DOCS_H
#define ND_DOCS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fingerprint.h"
#include "question.h" /* ND_RECORD_VERSION */
#include "sketch.h"
#include "store.h" /* ND_CLAIM_* */

typedef struct nd_registry nd_registry;

/* What a document registered by this process keeps until its first
 * commit: its stored anchors, then its encoded sketch (sketch_len bytes
 * after anchors[nanchors]). One allocation (doc_extra_new()). */
typedef struct nd_doc_extra {
    uint16_t sketch_len;
    uint8_t nanchors;
    uint32_t anchors[];
} nd_doc_extra;

/* Its encoded sketch; NULL: none. */
static inline const uint8_t *nd_doc_extra_sketch(const nd_doc_extra *x)
{
    return x && x->sketch_len ? (const uint8_t *)(x->anchors + x->nanchors) : NULL;
}

/* One registered document, followed in its own memory by its id, meta,
 * account and policy, and when superseded by the time of the document that
 * superseded it (doc_init() and doc_set_claim() place them; read them with
 * nd_doc_id(), nd_doc_meta(), nd_doc_account(), nd_doc_policy(),
 * nd_doc_superseded_by()): a loaded document is one carving of the arena.
 * Public: simhash, registered_at_us, text_hash, the lengths, chars and
 * status, immutable once the document is visible, so a reference holder
 * may read them without locks; the other fields are the registry's. Laid out
 * without padding: the strings begin 63 bytes in on 64-bit hosts (docs.c
 * asserts it; ND_DOC_HEAD; proto/scale.md counts it per document). The
 * lengths, the slot, the status and the arena flag are bit-fields, written
 * only before the document is visible. A document made by this process
 * (nd_reg_doc_new()) has a pointer to its nd_doc_extra in the 8 bytes
 * before it (doc_extra(): loaded documents, the most, have none). */
typedef struct nd_doc {
    uint64_t simhash;
    int64_t registered_at_us; /* server clock, UTC microseconds since the epoch */
    uint8_t text_hash[16];    /* XXH3-128 of the text, canonical byte order */
    /* Lengths as wide as their limits (store.h: ND_META_MAX 2^24, ND_POLICY_MAX
     * 2^16, ND_ID_MAX and ND_ACCOUNT_MAX 2^10, each inclusive). */
    uint64_t meta_len : 25;    /* compact JSON object; 0: none */
    uint64_t policy_len : 17;  /* 0: no policy (the server's default applies) */
    uint64_t id_len : 11;      /* 1..ND_ID_MAX */
    uint64_t account_len : 11; /* 0: no account */
    uint32_t chars;
    _Atomic unsigned refs;
    /* The size of its stored sketch once known (set at registration, or
     * when the sketch is first read; 0: unknown): ND_DOC_SK_KNOWN | mode <<
     * 30 | shift << 16 | n. Candidates whose size rules out a match are
     * skipped before their sketch is read (nd_sketch_reachable()). Any
     * thread may set it (always to the same value). */
    _Atomic uint32_t sk_size;
    uint32_t next;      /* hash chain: the next document's slot + 1 (0: none) */
    uint32_t slot : 28; /* < ND_REG_DOCS_MAX; ND_DOC_NO_SLOT until linked */
    /* The claim: ND_CLAIM_ACTIVE, ND_CLAIM_REVOKED (revoked: never
     * evidence) or ND_CLAIM_SUPERSEDED (evidence as an active one). A
     * policy change or a revoke/restore replaces the whole nd_doc by a new
     * one with the same id, slot and registered_at: a reference holder
     * sees one consistent version. */
    uint32_t status : 2;
    uint32_t arena : 1; /* loaded at start: in the registry's arena */
    /* 0: ND_RECORD_VERSION; i: the registry's i-th other fingerprint
     * version (stale; nd_registry_doc_version()) */
    uint8_t version_ix;
    bool waited;           /* the registry's waiters name it (registry.c); writer held */
    _Atomic uint8_t state; /* pending, live, deleting (enum doc_state) */
    /* id, meta, account, policy: id_len + meta_len + account_len +
     * policy_len bytes, none NUL-terminated; then, when superseded, 8
     * bytes of superseded_by */
    char bytes[];
} nd_doc;

/* The bytes of a document before its strings: allocate ND_DOC_HEAD + the
 * strings (sizeof(nd_doc) is larger: its tail padding). */
#define ND_DOC_HEAD offsetof(nd_doc, bytes)
/* A document's slot before it is linked (never a linked one's). */
#define ND_DOC_NO_SLOT ((1u << 28) - 1)

/* True when its fingerprint version is not this build's (stale: kept, not
 * in the indexes, never compared). */
static inline bool nd_doc_stale(const nd_doc *d)
{
    return d->version_ix != 0;
}

/* The document's id: id_len bytes, not NUL-terminated. */
static inline const char *nd_doc_id(const nd_doc *d)
{
    return d->bytes;
}

/* Its meta (compact JSON, meta_len bytes, not NUL-terminated); NULL: none. */
static inline const char *nd_doc_meta(const nd_doc *d)
{
    return d->meta_len ? d->bytes + d->id_len : NULL;
}

/* The registering account (account_len bytes, not NUL-terminated); NULL:
 * none. */
static inline const char *nd_doc_account(const nd_doc *d)
{
    return d->account_len ? d->bytes + d->id_len + d->meta_len : NULL;
}

/* The reprint policy (compact JSON, policy_len bytes, not NUL-terminated;
 * claim.h reads it); NULL: none, the server's default applies. */
static inline const char *nd_doc_policy(const nd_doc *d)
{
    return d->policy_len ? d->bytes + d->id_len + d->meta_len + d->account_len : NULL;
}

/* Where its strings end: a superseded document's superseded_by is kept
 * there (nd_doc_superseded_by(), doc_set_superseded_by()). */
static inline const char *nd_doc_tail(const nd_doc *d)
{
    return d->bytes + d->id_len + d->meta_len + d->account_len + d->policy_len;
}

/* ND_CLAIM_SUPERSEDED: the registered_at_us of the document whose restore
 * superseded it; 0 otherwise. */
static inline int64_t nd_doc_superseded_by(const nd_doc *d)
{
    int64_t us = 0;
    if (d->status == ND_CLAIM_SUPERSEDED)
        memcpy(&us, nd_doc_tail(d), sizeof(us));
    return us;
}

#define ND_DOC_SK_KNOWN 0x80000000u

/* The fingerprint version of d (ND_RECORD_VERSION unless stale),
 * NUL-terminated; borrowed from the registry, valid while it is. Any
 * thread. */
const char *nd_registry_doc_version(const nd_registry *reg, const nd_doc *d);

/* Releases a reference; NULL is allowed. Any thread. */
void nd_doc_release(nd_doc *doc);

/* True once loading has finished. */
bool nd_registry_loaded(const nd_registry *reg);

/* Looks up id. Returns 0 and a new reference in *out, -ENOENT, or -EAGAIN
 * while loading. A registration still waiting for its commit is not found. */
int nd_registry_get(nd_registry *reg, const char *id, size_t id_len, nd_doc **out);

typedef struct nd_registry_stats {
    uint64_t documents;     /* ids held, pending ones included (an upgrade
                             * in flight counts its id twice) */
    uint64_t index_entries; /* fingerprints in the index */
    uint64_t stale;         /* documents of another fingerprint version */
    uint64_t pending;       /* changes waiting for the store */
    uint64_t duplicates;    /* records skipped at load: id stored twice */
} nd_registry_stats;

/* The digest of the committed documents (the records the store holds):
 * XXH3-64 of (the sum mod 2^64 of each document's hash, their number),
 * each document's hash covering its id, registered_at, SimHash, text hash,
 * status, account and policy (docs_internal.h, doc_digest()). It does
 * not depend on the order of commits: two registries holding the same
 * documents have the same digest. Kept as changes commit, so this is O(1):
 * takes one short lock, does not allocate; any thread. Returns 0 with
 * *documents and *digest, or -EAGAIN while loading. */
int nd_registry_digest(nd_registry *reg, uint64_t *documents, uint64_t *digest);

/* Reads the counts (a snapshot; no lock). */
void nd_registry_stats_get(const nd_registry *reg, nd_registry_stats *out);

/* Documents of another fingerprint version found by nd_registry_load(). */
typedef struct nd_registry_version_count {
    const char *version; /* borrowed, valid while the registry is */
    uint64_t documents;  /* loaded with this version */
} nd_registry_version_count;

#endif
