/* index.h - in-memory Hamming-space index of 64-bit fingerprints.
 *
 * Four tables keyed by the four 16-bit blocks of a fingerprint (pigeonhole);
 * queries are exact for every k from 0 to ND_INDEX_MAX_K: k <= 3 probes the
 * exact block in tables 0..k; k = 4s + a >= 4 probes every key within radius
 * s of the block in tables 0..a and within radius s - 1 in the others
 * (multi-index hashing, Norouzi, Punjani, Fleet 2012). Never approximate.
 * Each stored document is named by a caller-chosen 32-bit slot; the caller
 * maps slots to its own records. Several documents may share a fingerprint;
 * all of them are returned.
 *
 * Layout: a table is 65,536 bucket pointers. A bucket is an immutable sorted
 * array ("run") of entries holding the 48 fingerprint bits that the key does
 * not, packed in 6 bytes; buckets above 512 entries become a directory of
 * runs, so one update copies at most one run plus the directory. Table 0
 * holds every (simhash, slot) pair (10 bytes each); tables 1..3 hold each
 * distinct simhash once (6 bytes each) and a hit found there is turned into
 * its slots by a lookup in table 0. About 31 bytes per document at 10M
 * (process RSS; tests/bench/bench_index measures it).
 *
 * Skew: a bucket above 4096 entries is "huge". A query whose probes would
 * scan one picks other radii that are just as exact (any radii r_t with
 * sum(r_t + 1) = k + 1 are), e.g. for k = 3 radius 1, 0, 0 in the other
 * three tables, and so avoids it. 8 huge buckets per table are tracked;
 * more are still answered exactly, by scanning.
 *
 * Concurrency: any number of threads may call nd_index_query() and
 * nd_index_count() at the same time as each other and as ONE writer
 * (nd_index_insert() / nd_index_remove(); the caller serialises writers).
 * - Copy-on-write: the writer never changes memory a reader can see. It
 *   builds the new version of each affected bucket aside and publishes it
 *   with one atomic release store of the bucket pointer; readers load bucket
 *   pointers with acquire and only read immutable runs. So a reader sees each
 *   bucket either before or after an update, never a torn entry, and never
 *   waits for the writer or retries a bucket: readers are not blocked at all
 *   (entering a query re-announces itself, a few instructions, only if the
 *   epoch flips at that very moment).
 * - Order: an insert publishes table 0 before tables 1..3, a remove
 *   unpublishes tables 3..1 before table 0. An entry stored before a query
 *   starts and not removed until it ends is always found; one inserted or
 *   removed during the query may or may not be.
 * - Reclamation: replaced runs are freed only after a grace period. A query
 *   announces itself in a striped reader counter of the current epoch's
 *   parity (two seq_cst atomics in, one out); the writer flips the epoch and
 *   frees what it retired before the flip once the old parity's counters
 *   read zero. The writer checks without waiting after each update and only
 *   waits (sched_yield) if more than 64 MiB is awaiting reclamation, which
 *   takes no longer than the queries already running.
 * - Each query reports a given (simhash, slot) at most once. If the caller
 *   moves a slot to another simhash (remove + insert) during a query, that
 *   query may report the slot under the old, the new, both or neither. */
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

/* Creates an empty index (about 2 MiB of bucket pointers, touched lazily).
 * Returns 0 and a new object (free with nd_index_destroy()), or -ENOMEM. */
int nd_index_create(nd_index **out);

/* Frees the index and everything it holds; NULL is allowed. No reader or
 * writer may be running. */
void nd_index_destroy(nd_index *idx);

/* Stores (simhash, slot). The caller guarantees slot is not stored already;
 * storing the same (simhash, slot) pair twice is detected and returns
 * -EEXIST, the same slot under two fingerprints is not detected (it would be
 * reported under both). Writer side: one writer at a time. Allocates the new
 * bucket versions. Returns 0, -EEXIST, or -ENOMEM (index unchanged). */
int nd_index_insert(nd_index *idx, uint64_t simhash, uint32_t slot);

/* Stores the n pairs (simhash[i], slots[i]) at once, for loading many
 * documents: every bucket that gains entries is rebuilt once (its runs
 * filled to 3/4), instead of once per entry as n calls of nd_index_insert()
 * would, which copy a run each. Pairs already stored, or repeated in the
 * arrays, are stored once (no -EEXIST). The four tables are built by up to
 * `threads` threads (this one and threads - 1 it starts and joins; 1: none
 * started). Writer side like nd_index_insert(), with readers allowed
 * meanwhile: they see each bucket before or after, table 0 published before
 * tables 1..3. Allocates about 16 bytes per pair of scratch per thread,
 * freed before returning. Returns 0, or -ENOMEM (index unchanged). */
int nd_index_insert_many(nd_index *idx, const uint64_t *simhash, const uint32_t *slots, size_t n,
                         unsigned threads);

/* Removes the entry (simhash, slot). Writer side. Returns 0, or -ENOENT if no
 * such entry is stored. Copy-on-write means removal also allocates (the
 * shrunk bucket copy): under memory exhaustion it returns -ENOMEM and leaves
 * the index unchanged. */
int nd_index_remove(nd_index *idx, uint64_t simhash, uint32_t slot);

/* Finds every stored entry within Hamming distance k (0..ND_INDEX_MAX_K) of
 * simhash, each exactly once, sorted by distance then slot. Writes at most cap
 * hits into hits[] and the total number found into *found (which may exceed
 * cap: then the output holds the cap nearest, sorted, and the call returns
 * -E2BIG). hits may be NULL when cap is 0. Returns 0, -E2BIG (truncated), or
 * -EINVAL (k out of range; *found is then 0). Does not allocate. Safe to run
 * concurrently with other queries and one writer (see above). */
int nd_index_query(const nd_index *idx, uint64_t simhash, unsigned k, nd_index_hit *hits,
                   size_t cap, size_t *found);

/* Number of entries (simhash, slot) stored. Safe from any thread. */
size_t nd_index_count(const nd_index *idx);

#endif
