/* index.h - in-memory Hamming-space index of 64-bit fingerprints.
 *
 * Four tables keyed by the four 16-bit blocks of a fingerprint (pigeonhole);
 * queries are exact for every k from 0 to ND_INDEX_MAX_K (k >= 4 by
 * multi-index probing, Norouzi et al. 2012). Each stored document is named by
 * a caller-chosen 32-bit slot; the caller maps slots to its own records.
 *
 * Concurrency: see the comment block in index.c summarised here once the
 * implementation is settled: any number of concurrent readers
 * (nd_index_query) with one writer at a time (insert/remove, serialised by
 * the caller). */
#ifndef ND_INDEX_H
#define ND_INDEX_H

#include <stddef.h>
#include <stdint.h>

#define ND_INDEX_MAX_K 8

typedef struct nd_index nd_index;

typedef struct nd_index_hit {
    uint32_t slot;     /* the slot given to nd_index_insert() */
    uint32_t distance; /* Hamming distance to the query, 0..k */
} nd_index_hit;

/* Creates an empty index. Returns 0 and a new object (free with
 * nd_index_destroy()), or -ENOMEM. */
int nd_index_create(nd_index **out);

/* Frees the index; NULL is allowed. No reader may be running. */
void nd_index_destroy(nd_index *idx);

/* Stores (simhash, slot). The caller guarantees slot is not stored already.
 * Writer side: one writer at a time. Returns 0 or -ENOMEM (index unchanged). */
int nd_index_insert(nd_index *idx, uint64_t simhash, uint32_t slot);

/* Removes the entry (simhash, slot). Writer side. Returns 0, or -ENOENT if no
 * such entry is stored. */
int nd_index_remove(nd_index *idx, uint64_t simhash, uint32_t slot);

/* Finds every stored entry within Hamming distance k (0..ND_INDEX_MAX_K) of
 * simhash, each exactly once, sorted by distance then slot. Writes at most cap
 * hits into hits[] and the total number found into *found (which may exceed
 * cap: then the output holds the cap nearest and the call returns -E2BIG).
 * Returns 0, -E2BIG (truncated), or -EINVAL (k out of range). Does not
 * allocate. Safe to run concurrently with other queries and one writer. */
int nd_index_query(const nd_index *idx, uint64_t simhash, unsigned k,
                   nd_index_hit *hits, size_t cap, size_t *found);

/* Number of entries stored. */
size_t nd_index_count(const nd_index *idx);

#endif
