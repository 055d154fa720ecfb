/* anchor_index.h - in-memory index of document anchors (sketch.h): 32-bit
 * anchor -> the slots of the documents indexed under it. Stage 1 of the
 * verdict for partial copies: a query probes its own anchors and gets the
 * documents sharing the most of them.
 *
 * Layout (compact: about 5.1 bytes per (anchor, slot) entry, so ~82 B per
 * document at 16 anchors; tests/bench/bench_sketch measures it at 10M):
 * 2^20 buckets chosen by the anchor's top 20 bits; a bucket is one array of
 * 5-byte entries {the anchor's other 12 bits, 28-bit slot}, sorted by
 * (anchor, slot), grown by about 1/8 at a time. Slots are therefore below
 * ND_ANCHOR_SLOTS (2^28: 268M documents in one index). The directory (16 MiB) is
 * allocated zeroed and touched lazily. A bulk load (nd_anchor_loader) carves
 * exact arrays side by side from one mapping; a carved bucket that grows is
 * copied to an array of its own, and the mapping's pages are given back as
 * their buckets leave.
 *
 * Hot anchors: an anchor holds at most posting_cap documents, the first ones
 * indexed under it (a bulk load keeps the smallest slots: the earliest
 * documents, as start-up gives slots in registration order). A later
 * document is not indexed under a full anchor (it still is under its other
 * anchors); a removal frees a place for the next insert. So documents added
 * later can never push an earlier one out of an anchor, and a query reads at
 * most posting_cap postings per anchor: every document it finds is counted
 * with every query anchor that holds it, whatever else shares them.
 *
 * Concurrency: every function may be called from any number of threads at
 * once (queries, inserts and removes alike). Buckets are guarded by 4096
 * striped reader-writer locks inside the index: a query read-locks the stripe
 * of each anchor it probes, one at a time; an insert or remove write-locks
 * the stripe of each anchor it changes, one at a time. A query running while
 * a document is inserted or removed may therefore see some of its anchors and
 * not others (its shared count is between the old and new value). The caller
 * must not insert a slot that is still indexed, nor remove anchors under a
 * slot that did not insert them. Only nd_anchor_index_destroy() needs
 * exclusive access.
 *
 * Pure: no I/O, no globals. */
#ifndef ND_ANCHOR_INDEX_H
#define ND_ANCHOR_INDEX_H

#include <stddef.h>
#include <stdint.h>

/* Most anchors one query may probe (a long text's own mode's 64 and the
 * other mode's 16, sketch.h ND_ANCHORS_SCALED), the largest posting cap,
 * and so the most postings (distinct slots) one query can find. */
#define ND_ANCHOR_QUERY_MAX 80
#define ND_ANCHOR_CAP_MAX 64
#define ND_ANCHOR_HITS_MAX (ND_ANCHOR_QUERY_MAX * ND_ANCHOR_CAP_MAX)

/* Slots are below this: an entry keeps 28 bits of its slot. */
#define ND_ANCHOR_SLOTS (1u << 28)

typedef struct nd_anchor_index nd_anchor_index;

typedef struct nd_anchor_hit {
    uint32_t slot;   /* the slot given to insert */
    uint16_t shared; /* how many of the query's anchors the slot is indexed under */
    uint16_t anchor; /* the first of them: its place in the query's anchors[] */
} nd_anchor_hit;

typedef struct nd_anchor_stats {
    uint64_t entries;      /* (anchor, slot) pairs stored */
    uint64_t buckets_used; /* non-empty buckets */
    uint64_t bytes;        /* memory held: directory + entry arrays (capacity)
                            * + 16 bytes of allocator overhead per array + locks */
} nd_anchor_stats;

/* Creates an empty index. posting_cap: 1..ND_ANCHOR_CAP_MAX, the most
 * documents one anchor holds (its first ones). Returns 0 and a new object (free with
 * nd_anchor_index_destroy()), -EINVAL (cap out of range) or -ENOMEM. */
int nd_anchor_index_create(nd_anchor_index **out, unsigned posting_cap);

/* Frees the index; NULL is allowed. Nothing else may be using it. */
void nd_anchor_index_destroy(nd_anchor_index *idx);

/* Indexes slot under anchors[0..n) (duplicates in the array are stored
 * once; an anchor that holds posting_cap slots already is left as it is).
 * Returns 0, -ERANGE (slot >= ND_ANCHOR_SLOTS: nothing added), or -ENOMEM:
 * then the anchors added so far are removed again and the index is as
 * before. Allocates (bucket growth). */
int nd_anchor_index_insert(nd_anchor_index *idx, uint32_t slot, const uint32_t *anchors, size_t n);

/* Bulk load for start-up: slot slots[i] under anchors[i*m .. i*m + m) for
 * i < ndocs. Every document gives exactly m anchors: pad one that has fewer
 * with repeats of its last anchor (repeats are stored once); leave documents
 * without anchors out. Every bucket is rebuilt once, so this costs a sort of
 * the entries, not the O(entries * bucket size) of repeated inserts. Safe
 * against concurrent queries (they see each bucket before or after) and
 * other writers. A bulk load through nd_anchor_loader (below). Returns 0,
 * -ERANGE (a slot >= ND_ANCHOR_SLOTS: nothing indexed) or -ENOMEM (then
 * some documents may be indexed and others not: destroy the index). */
int nd_anchor_index_insert_many(nd_anchor_index *idx, const uint32_t *slots,
                                const uint32_t *anchors, size_t ndocs, size_t m);

/* Most threads nd_anchor_index_insert_many_threads() uses. */
#define ND_ANCHOR_LOAD_THREADS_MAX 16

/* nd_anchor_index_insert_many() with the per-bucket sorting and merging split
 * over `threads` threads (this one and threads - 1 it starts and joins; 1:
 * none started; at most ND_ANCHOR_LOAD_THREADS_MAX). Same contract. */
int nd_anchor_index_insert_many_threads(nd_anchor_index *idx, const uint32_t *slots,
                                        const uint32_t *anchors, size_t ndocs, size_t m,
                                        unsigned threads);

/* A bulk load in three steps, for start-up: create, add every document as
 * it is read, finish. The entries go straight into their final place (one
 * mapping of 6 bytes per staged entry, parts by the anchor's top 16 bits,
 * sorted and compacted by finish, which carves the buckets' arrays from it):
 * no staging copy of the anchors, no allocation per bucket. A carved
 * bucket that later grows moves to its own array; a page of the mapping
 * whose buckets all moved is given back to the kernel. */
typedef struct nd_anchor_loader nd_anchor_loader;

/* Starts a bulk load into idx of about `expect` entries (documents x
 * anchors; the mapping is sized for it, more still fit). Returns 0 and a
 * loader (free with nd_anchor_loader_destroy()) or -ENOMEM. For a large
 * load (a mapping of 64 MiB or more), a thread it starts prefaults the
 * mapping meanwhile; finish and destroy wait for it. */
int nd_anchor_loader_create(nd_anchor_loader **out, nd_anchor_index *idx, uint64_t expect);

/* Queues slot under anchors[0..n) (repeats stored once). Nothing is visible
 * in the index before finish, which keeps under each anchor its posting_cap
 * smallest slots (those of the index first, when it had some). Cheapest
 * with slots in ascending order (as a start-up gives them); any order is
 * correct. One thread at a time per loader, handed over between threads
 * under a lock or by a join (a lock's lock-prefixed instruction orders the
 * streaming stores it makes). Returns 0, -ERANGE (slot >= ND_ANCHOR_SLOTS)
 * or -ENOMEM (then destroy the loader: nothing indexed). */
int nd_anchor_loader_add(nd_anchor_loader *ld, uint32_t slot, const uint32_t *anchors, size_t n);

/* Indexes everything added, with `threads` threads (this one and threads - 1
 * it starts; at most ND_ANCHOR_LOAD_THREADS_MAX). Same index as
 * nd_anchor_index_insert() of each document. Safe against concurrent
 * queries and writers as insert_many. Returns 0 or -ENOMEM (then some
 * documents may be indexed and others not: destroy the index). Destroy the
 * loader afterwards either way. */
int nd_anchor_loader_finish(nd_anchor_loader *ld, unsigned threads);

/* Frees the loader (NULL allowed); what finish indexed stays. */
void nd_anchor_loader_destroy(nd_anchor_loader *ld);

/* Removes slot from anchors[0..n) (anchors it is not under are ignored).
 * Returns how many entries were removed. Never allocates: arrays do not
 * shrink, except that an emptied bucket's array is freed. */
size_t nd_anchor_index_remove(nd_anchor_index *idx, uint32_t slot, const uint32_t *anchors,
                              size_t n);

/* Probes anchors[0..n) (n <= ND_ANCHOR_QUERY_MAX; repeats count once) and
 * writes the slots indexed under at least one of them into hits[0..cap),
 * best first: most shared anchors, then smallest slot. Every posting of
 * every probed anchor counts (at most posting_cap each, so at most
 * ND_ANCHOR_HITS_MAX slots: hits of that size hold them all); *full (may be
 * NULL) gets how many probed anchors hold posting_cap slots (later
 * documents are not indexed under them). Returns the number of distinct
 * slots found (may exceed cap; then hits holds the best cap). Does not
 * allocate (works in ~65 KiB of stack); O(postings read). */
size_t nd_anchor_index_query(const nd_anchor_index *idx, const uint32_t *anchors, size_t n,
                             nd_anchor_hit *hits, size_t cap, unsigned *full);

/* Number of slots under one anchor (for tests and diagnostics). */
size_t nd_anchor_index_postings(const nd_anchor_index *idx, uint32_t anchor);

/* How many entries away from anchor's place in its bucket the search for
 * it starts (its first probe against its answer): a few times the square
 * root of the bucket's size when the guess works as it should. For tests
 * and diagnostics of the layout; takes the bucket's lock. */
size_t nd_anchor_index_guess_miss(const nd_anchor_index *idx, uint32_t anchor);

/* Memory and size figures. Takes each stripe lock in turn. */
void nd_anchor_index_stats(const nd_anchor_index *idx, nd_anchor_stats *out);

#endif
