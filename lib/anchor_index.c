/* anchor_index.c - anchor -> slots, bucketed sorted arrays of 5-byte
 * entries under striped reader-writer locks (see anchor_index.h). */
#include "anchor_index.h"

#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "sort.h"

#define BUCKET_BITS 20
#define NBUCKETS (1u << BUCKET_BITS)
#define NSTRIPES 4096u
/* The key: the anchor's bits that the bucket does not fix (bucket_of()
 * takes the top BUCKET_BITS, the key the low 12). */
#define KEY_FREE_BITS (32 - BUCKET_BITS)
#define KEY_FREE_MASK ((1u << KEY_FREE_BITS) - 1)
#define SLOT_BITS 28 /* ND_ANCHOR_SLOTS = 2^SLOT_BITS */
/* An entry: key << SLOT_BITS | slot, 40 bits, little-endian. */
#define ENTRY 5
/* A bulk load's staged entry (nd_anchor_loader): the anchor's low 16 bits,
 * which pick the bucket within a part as well, and the slot (LE). */
#define SENTRY 6
_Static_assert(KEY_FREE_BITS + SLOT_BITS == 8 * ENTRY, "an entry holds a key and a slot");
#define MALLOC_OVERHEAD 16

#define CARVED 0x80000000u /* in bucket.cap: e lies in a load region (not malloc'd) */
#define PAGE 4096u
#define CHUNK_PAGES 512u /* pages given back together: 2 MiB, a huge page */

typedef struct bucket {
    uint8_t *e;      /* n entries of ENTRY bytes, sorted by (key, slot) */
    uint32_t n, cap; /* cap | CARVED when e was carved from a region */
} bucket;

/* The memory a bulk load (nd_anchor_loader) carved its buckets from: one
 * mapping, exact arrays side by side. A carved bucket that grows moves to
 * a malloc'd array (and one emptied gives its place up); a chunk of
 * CHUNK_PAGES pages whose carved buckets have all left is returned to the
 * kernel in one call. (Page by page, after a restart at 10M documents the
 * first registrations moved a bucket each and gave back a page each: a
 * madvise, a huge page split and a TLB shootdown per page, ~10 % of an
 * import's time.) */
typedef struct region {
    struct region *next;
    uint8_t *base;
    size_t bytes;           /* of the mapping */
    _Atomic uint32_t *live; /* per PAGE: carved buckets on it */
    uint32_t *chunk_live;   /* per chunk: its pages with carved buckets (regions_mu) */
    uint32_t *chunk_held;   /* per chunk: its pages resident since the load's finish */
    _Atomic uint64_t held;  /* bytes of the chunks not given back */
} region;

/* A stripe's lock on a cache line of its own: a pthread_rwlock_t is 56
 * bytes, so in a plain array most of them straddle two lines, and a read
 * lock touches both (the reader count at its start, the flags at its end)
 * and shares them with a neighbour's readers on the other worker. */
typedef struct stripe_lock {
    alignas(64) pthread_rwlock_t rw;
} stripe_lock;

struct nd_anchor_index {
    bucket *b;
    unsigned cap;
    region *regions; /* changed only by a loader's finish (then read-only) */
    pthread_mutex_t regions_mu;
    stripe_lock locks[NSTRIPES];
};

static inline uint32_t cap_of(const bucket *bk)
{
    return bk->cap & ~CARVED;
}

/* The carved array of bk leaves its region (bucket lock held): each page
 * it spans loses one; a chunk none of whose pages holds a carved bucket any
 * more is given back. */
static void uncarve(nd_anchor_index *idx, const bucket *bk)
{
    uint8_t *e = bk->e;
    size_t len = (size_t)cap_of(bk) * ENTRY;
    pthread_mutex_lock(&idx->regions_mu);
    for (region *r = idx->regions; r; r = r->next) {
        if (e < r->base || e >= r->base + r->bytes)
            continue;
        size_t first = (size_t)(e - r->base) / PAGE, last = (size_t)(e + len - 1 - r->base) / PAGE;
        for (size_t pg = first; pg <= last; pg++) {
            if (atomic_fetch_sub_explicit(&r->live[pg], 1, memory_order_acq_rel) != 1)
                continue;
            size_t c = pg / CHUNK_PAGES;
            if (--r->chunk_live[c] == 0) {
                size_t at = c * CHUNK_PAGES * (size_t)PAGE;
                size_t n = r->bytes - at < CHUNK_PAGES * (size_t)PAGE ? r->bytes - at
                                                                      : CHUNK_PAGES * (size_t)PAGE;
                madvise(r->base + at, n, MADV_DONTNEED);
                atomic_fetch_sub_explicit(&r->held, (uint64_t)r->chunk_held[c] * PAGE,
                                          memory_order_relaxed);
            }
        }
        break;
    }
    pthread_mutex_unlock(&idx->regions_mu);
}

static inline uint32_t bucket_of(uint32_t a)
{
    return a >> (32 - BUCKET_BITS);
}
static inline uint16_t key_of(uint32_t a)
{
    return (uint16_t)(a & KEY_FREE_MASK);
}
static inline pthread_rwlock_t *lock_of(const nd_anchor_index *idx, uint32_t b)
{
    return (pthread_rwlock_t *)&idx->locks[b & (NSTRIPES - 1)].rw;
}

/* Entries are read and written as key << 32 | slot (the order of the
 * entries is that of these values). */
static inline uint64_t entry_get(const uint8_t *p)
{
    uint64_t x = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
                 (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32;
    return (x >> SLOT_BITS) << 32 | (x & (ND_ANCHOR_SLOTS - 1));
}

static inline void entry_put(uint8_t *p, uint64_t v)
{
    uint64_t x = (v >> 32 & KEY_FREE_MASK) << SLOT_BITS | (v & (ND_ANCHOR_SLOTS - 1));
    p[0] = (uint8_t)x, p[1] = (uint8_t)(x >> 8), p[2] = (uint8_t)(x >> 16),
    p[3] = (uint8_t)(x >> 24), p[4] = (uint8_t)(x >> 32);
}

/* A staged entry (SENTRY bytes) as (anchor & 0xFFFF) << 32 | slot. */
static inline uint64_t staged_get(const uint8_t *p)
{
    uint16_t k = (uint16_t)(p[0] | p[1] << 8);
    uint32_t s = (uint32_t)p[2] | (uint32_t)p[3] << 8 | (uint32_t)p[4] << 16 | (uint32_t)p[5] << 24;
    return (uint64_t)k << 32 | s;
}

static inline void staged_put(uint8_t *p, uint64_t v)
{
    uint16_t k = (uint16_t)(v >> 32);
    uint32_t s = (uint32_t)v;
    p[0] = (uint8_t)k, p[1] = (uint8_t)(k >> 8);
    p[2] = (uint8_t)s, p[3] = (uint8_t)(s >> 8), p[4] = (uint8_t)(s >> 16),
    p[5] = (uint8_t)(s >> 24);
}

/* Where the entries of key k should begin in a bucket of n. The key's
 * bits are hash bits, uniform, so a bucket's keys spread evenly over its
 * array. (When the key also held bits that the bucket fixes, guessing
 * from all of them put the guess up to the whole bucket away, and the
 * gallop from there was a chain of dependent cache misses.) */
static inline uint32_t key_guess(uint16_t k, uint32_t n)
{
    return (uint32_t)(((uint64_t)(k & KEY_FREE_MASK) * n) >> KEY_FREE_BITS);
}

/* First index whose entry is >= v: from where v's key should be
 * (key_guess()), a gallop away from there, then a binary search between the
 * last two probes. It reads one or two cache lines of the bucket where a
 * binary search over the whole bucket reads ~8, each a miss in a 1 GB index
 * at 10M documents; on a bad guess (a long run of one key) it costs at most
 * twice that. Same result as the binary search. */
static uint32_t lower_bound(const bucket *bk, uint64_t v)
{
    uint32_t n = bk->n, lo, hi;
    if (n == 0)
        return 0;
    uint32_t g = key_guess((uint16_t)(v >> 32), n); /* < n */
    if (entry_get(bk->e + (size_t)g * ENTRY) < v) { /* the answer is in (g, n] */
        uint32_t step = 1, p = g + 1;
        lo = g + 1;
        while (p < n && entry_get(bk->e + (size_t)p * ENTRY) < v) {
            lo = p + 1;
            step *= 2;
            p = n - g > step ? g + step : n;
        }
        hi = p < n ? p : n;
    } else { /* in [0, g] */
        uint32_t step = 1;
        int64_t p = (int64_t)g - 1;
        hi = g;
        while (p >= 0 && entry_get(bk->e + (size_t)p * ENTRY) >= v) {
            hi = (uint32_t)p;
            step *= 2;
            p = (int64_t)g - step;
        }
        lo = p < 0 ? 0 : (uint32_t)p + 1;
    }
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (entry_get(bk->e + (size_t)mid * ENTRY) < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Fetches (hints: no lock, no access) what searching for anchors[0..n)
 * reads first: every bucket header and lock stripe, then the line of each
 * bucket array where its anchor's entries should be, so that the misses
 * overlap instead of following one another. The headers are read racily
 * with relaxed atomic loads: a stale value only prefetches the wrong line. */
static void prefetch_anchors(const nd_anchor_index *idx, const uint32_t *anchors, size_t n,
                             bool for_write)
{
    for (size_t i = 0; i < n; i++) {
        __builtin_prefetch(&idx->b[bucket_of(anchors[i])]);
        __builtin_prefetch(lock_of(idx, bucket_of(anchors[i])), 1);
    }
    for (size_t i = 0; i < n; i++) {
        const bucket *bk = &idx->b[bucket_of(anchors[i])];
        uint8_t *e = __atomic_load_n(&bk->e, __ATOMIC_RELAXED);
        uint32_t ne = __atomic_load_n(&bk->n, __ATOMIC_RELAXED);
        if (!e || !ne)
            continue;
        const uint8_t *line = e + (size_t)key_guess(key_of(anchors[i]), ne) * ENTRY;
        if (for_write)
            __builtin_prefetch(line, 1);
        else
            __builtin_prefetch(line, 0);
    }
}

int nd_anchor_index_create(nd_anchor_index **out, unsigned posting_cap)
{
    if (posting_cap < 1 || posting_cap > ND_ANCHOR_CAP_MAX)
        return -EINVAL;
    /* aligned for its locks (sizeof is a multiple of the alignment) */
    nd_anchor_index *idx = aligned_alloc(alignof(nd_anchor_index), sizeof(*idx));
    if (!idx)
        return -ENOMEM;
    memset(idx, 0, sizeof(*idx));
    idx->b = calloc(NBUCKETS, sizeof(bucket));
    if (!idx->b) {
        free(idx);
        return -ENOMEM;
    }
    idx->cap = posting_cap;
    pthread_mutex_init(&idx->regions_mu, NULL);
    for (unsigned i = 0; i < NSTRIPES; i++)
        pthread_rwlock_init(&idx->locks[i].rw, NULL);
    *out = idx;
    return 0;
}

void nd_anchor_index_destroy(nd_anchor_index *idx)
{
    if (!idx)
        return;
    for (uint32_t i = 0; i < NBUCKETS; i++)
        if (!(idx->b[i].cap & CARVED))
            free(idx->b[i].e);
    while (idx->regions) {
        region *r = idx->regions;
        idx->regions = r->next;
        munmap(r->base, r->bytes);
        free(r->live);
        free(r->chunk_live);
        free(r->chunk_held);
        free(r);
    }
    pthread_mutex_destroy(&idx->regions_mu);
    for (unsigned i = 0; i < NSTRIPES; i++)
        pthread_rwlock_destroy(&idx->locks[i].rw);
    free(idx->b);
    free(idx);
}

/* Capacity after growth: +1/8, at least 4 more. */
static uint32_t grown(uint32_t cap, uint32_t need)
{
    uint32_t c = cap + cap / 8 + 4;
    return c < need ? need : c;
}

/* Whether anchor a already holds idx->cap slots (bucket lock held): its
 * run starts at the lower bound of its key and is full when the entry
 * cap - 1 places on still has its key. */
static bool anchor_full(const nd_anchor_index *idx, const bucket *bk, uint32_t a)
{
    uint32_t lo = lower_bound(bk, (uint64_t)key_of(a) << 32), last = lo + idx->cap - 1;
    return last < bk->n && (uint16_t)(entry_get(bk->e + (size_t)last * ENTRY) >> 32) == key_of(a);
}

/* Adds (a, slot) under the bucket's write lock: 1 added, 0 present or the
 * anchor full (anchor_full()), -ENOMEM. */
static int add_one(nd_anchor_index *idx, uint32_t a, uint32_t slot)
{
    uint32_t bi = bucket_of(a);
    bucket *bk = &idx->b[bi];
    uint64_t v = (uint64_t)key_of(a) << 32 | slot;
    int rc = 1;
    pthread_rwlock_wrlock(lock_of(idx, bi));
    uint32_t at = lower_bound(bk, v);
    if (at < bk->n && entry_get(bk->e + (size_t)at * ENTRY) == v) {
        rc = 0;
    } else if (anchor_full(idx, bk, a)) {
        rc = 0; /* held by its first idx->cap documents: not indexed here */
    } else {
        if (bk->n == cap_of(bk)) {
            uint32_t c = grown(cap_of(bk), bk->n + 1);
            uint8_t *e;
            if (bk->cap & CARVED) { /* moves out of its region */
                if ((e = malloc((size_t)c * ENTRY)))
                    memcpy(e, bk->e, (size_t)bk->n * ENTRY), uncarve(idx, bk);
            } else {
                e = realloc(bk->e, (size_t)c * ENTRY);
            }
            if (!e)
                rc = -ENOMEM;
            else
                bk->e = e, bk->cap = c;
        }
        if (rc == 1) {
            memmove(bk->e + (size_t)(at + 1) * ENTRY, bk->e + (size_t)at * ENTRY,
                    (size_t)(bk->n - at) * ENTRY);
            entry_put(bk->e + (size_t)at * ENTRY, v);
            bk->n++;
        }
    }
    pthread_rwlock_unlock(lock_of(idx, bi));
    return rc;
}

static bool del_one(nd_anchor_index *idx, uint32_t a, uint32_t slot)
{
    uint32_t bi = bucket_of(a);
    bucket *bk = &idx->b[bi];
    uint64_t v = (uint64_t)key_of(a) << 32 | slot;
    bool found = false;
    pthread_rwlock_wrlock(lock_of(idx, bi));
    uint32_t at = lower_bound(bk, v);
    if (at < bk->n && entry_get(bk->e + (size_t)at * ENTRY) == v) {
        memmove(bk->e + (size_t)at * ENTRY, bk->e + (size_t)(at + 1) * ENTRY,
                (size_t)(bk->n - at - 1) * ENTRY);
        bk->n--;
        found = true;
        if (bk->n == 0) {
            if (bk->cap & CARVED)
                uncarve(idx, bk);
            else
                free(bk->e);
            bk->e = NULL, bk->cap = 0;
        }
    }
    pthread_rwlock_unlock(lock_of(idx, bi));
    return found;
}

int nd_anchor_index_insert(nd_anchor_index *idx, uint32_t slot, const uint32_t *anchors, size_t n)
{
    if (slot >= ND_ANCHOR_SLOTS)
        return -ERANGE;
    prefetch_anchors(idx, anchors, n, true);
    for (size_t i = 0; i < n; i++) {
        int rc = add_one(idx, anchors[i], slot);
        if (rc < 0) {
            /* Undo: remove what this call added (not what was there before:
             * the caller guarantees slot was not indexed). */
            for (size_t j = 0; j < i; j++)
                del_one(idx, anchors[j], slot);
            return rc;
        }
    }
    return 0;
}

size_t nd_anchor_index_remove(nd_anchor_index *idx, uint32_t slot, const uint32_t *anchors,
                              size_t n)
{
    size_t removed = 0;
    for (size_t i = 0; i < n; i++)
        removed += del_one(idx, anchors[i], slot);
    return removed;
}

/* One counting pass of a radix sort: src[0..n) into dst by the byte at
 * shift, stable. Returns false, moving nothing, when skip_uniform and every
 * value has the same byte there (already in order by it). */
static bool radix_pass(const uint64_t *src, uint64_t *dst, size_t n, unsigned shift,
                       bool skip_uniform)
{
    size_t count[257] = {0};
    for (size_t i = 0; i < n; i++)
        count[((src[i] >> shift) & 255) + 1]++;
    if (skip_uniform && count[((src[0] >> shift) & 255) + 1] == n)
        return false;
    for (unsigned b = 1; b < 257; b++)
        count[b] += count[b - 1];
    for (size_t i = 0; i < n; i++)
        dst[count[(src[i] >> shift) & 255]++] = src[i];
    return true;
}

/* Merges the sorted entries v[0..n) (key << 32 | slot) into bucket bi,
 * deduplicated, each key keeping its first idx->cap slots in slot order,
 * under its write lock. 0 or -ENOMEM. */
static int merge_bucket(nd_anchor_index *idx, uint32_t bi, const uint64_t *v, size_t n)
{
    bucket *bk = &idx->b[bi];
    int rc = 0;
    pthread_rwlock_wrlock(lock_of(idx, bi));
    uint32_t cap = bk->n + (uint32_t)n;
    uint8_t *e = malloc((size_t)cap * ENTRY);
    if (!e) {
        rc = -ENOMEM;
    } else {
        uint32_t a = 0, k = 0, run = 0;
        size_t b = 0;
        uint64_t last = UINT64_MAX;
        while (a < bk->n || b < n) {
            uint64_t va = a < bk->n ? entry_get(bk->e + (size_t)a * ENTRY) : UINT64_MAX;
            uint64_t x;
            if (a < bk->n && (b >= n || va <= v[b]))
                x = va, a++;
            else
                x = v[b++];
            if (x == last)
                continue;
            run = last != UINT64_MAX && last >> 32 == x >> 32 ? run + 1 : 1;
            last = x;
            if (run <= idx->cap) /* a key keeps its first idx->cap slots */
                entry_put(e + (size_t)k++ * ENTRY, x);
        }
        if (bk->cap & CARVED)
            uncarve(idx, bk);
        else
            free(bk->e);
        bk->e = e, bk->n = k, bk->cap = cap;
    }
    pthread_rwlock_unlock(lock_of(idx, bi));
    return rc;
}

/* ---- bulk load (nd_anchor_loader) ----
 *
 * Entries are placed as they come into 65536 parts by the anchor's top 16
 * bits, each part a fixed stretch of one mapping (sized for the expected
 * count plus six standard deviations; the rare excess goes to a per-part
 * spill array), as 6-byte staged entries (the anchor's low 16 bits and the
 * slot): a part is 16 buckets (bits 12-15 of the anchor pick one).
 * finish() sorts each part by those bits (stable: slots stay in the order
 * given, ascending at start-up) and writes it back as 5-byte entries,
 * compacted toward the start of its thread's range, where its buckets'
 * arrays stay: no second copy of the entries, no malloc per bucket, pages
 * left empty by the compaction given back. */
#define LPARTS (1u << 16)
#define GROUPS 256u /* first placement: by the anchor's top 8 bits */
#ifndef STAGE
#define STAGE 8192u /* entries staged per group before they are placed */
#endif

/* Entries written to a group's stage a cache line at a time: they gather
 * in a line of their own (all GROUPS lines: 16 KiB, cache-resident), which
 * goes to the stage whole, with non-temporal stores where there are any.
 * Written an entry at a time, each stage line was read from memory before
 * it was written (the stage is far larger than the caches): at 10M
 * documents the adds spent most of their time waiting for those reads. */
#define WC 8u /* entries in a line */
_Static_assert(STAGE % WC == 0, "whole lines");

typedef struct spill {
    uint32_t n, cap;
    uint64_t v[]; /* staged: (anchor & 0xFFFF) << 32 | slot */
} spill;

struct nd_anchor_loader {
    nd_anchor_index *idx;
    uint8_t *base; /* LPARTS parts of pcap entries */
    size_t bytes;  /* of the mapping */
    uint32_t pcap;
    uint32_t *fill; /* per part */
    spill **over;   /* per part, NULL until one spills */
    uint64_t added;
    uint32_t last_slot;
    bool ascending; /* slots were given in ascending order */
    /* Entries (anchor << 32 | slot) staged by group (16 MiB): placing a
     * group's STAGE entries at once writes ~32 entries per part within
     * 1/256 of the mapping; one entry at a time to 65536 places missed the
     * caches at nearly every write (about 2x the CPU time measured). */
    uint32_t sfill[GROUPS];
    uint64_t *stage;      /* GROUPS x STAGE, 64-byte aligned */
    uint64_t (*line)[WC]; /* per group, its stage's last line while it fills */
    pthread_t prefaulter; /* prefault_main(), while prefaulting */
    bool prefaulting;
};

/* Mappings from this size get their pages on a thread of their own. */
#define PREFAULT_MIN ((size_t)64 << 20)

/* The loader's mapping, written: the first placement of each group
 * touches every page of it (each part's first entries), so on a large
 * load the kernel zeroes ~1 GiB (10M documents) at once, and a thread
 * placing entries alone spent ~2.5 s in it while the scan feeding it
 * waited. This thread zeroes pages alongside it (each page once, by
 * whichever of the two touches it first). */
#ifdef MADV_POPULATE_WRITE
static void *prefault_main(void *arg)
{
    nd_anchor_loader *ld = arg;
    /* a huge page per call: one call holds the mapping lock, which a
     * thread mapping memory (an arena block, a thread's stack) waits for */
    const size_t step = (size_t)CHUNK_PAGES * PAGE;
    for (size_t off = 0; off < ld->bytes; off += step)
        madvise(ld->base + off, ld->bytes - off < step ? ld->bytes - off : step,
                MADV_POPULATE_WRITE); /* a hint: errors ignored */
    return NULL;
}
#endif

/* Waits for the prefault thread, if one runs. */
static void prefault_join(nd_anchor_loader *ld)
{
    if (ld->prefaulting)
        pthread_join(ld->prefaulter, NULL);
    ld->prefaulting = false;
}

int nd_anchor_loader_create(nd_anchor_loader **out, nd_anchor_index *idx, uint64_t expect)
{
    nd_anchor_loader *ld = calloc(1, sizeof(*ld));
    if (!ld)
        return -ENOMEM;
    uint64_t mean = expect / LPARTS, sd = 1;
    while (sd * sd < mean) /* about its square root (Poisson) */
        sd++;
    uint64_t pcap = mean + 6 * sd + 8;
    if (pcap > UINT32_MAX / 2 / LPARTS)
        pcap = UINT32_MAX / 2 / LPARTS;
    ld->idx = idx;
    ld->pcap = (uint32_t)pcap;
    ld->bytes = ((size_t)LPARTS * ld->pcap * SENTRY + ((size_t)2 << 20) - 1) &
                ~(((size_t)2 << 20) - 1);
    ld->ascending = true;
    ld->fill = calloc(LPARTS, sizeof(*ld->fill));
    ld->stage = aligned_alloc(64, (size_t)GROUPS * STAGE * sizeof(*ld->stage));
    ld->line = aligned_alloc(64, (size_t)GROUPS * sizeof(*ld->line));
    void *p = mmap(NULL, ld->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!ld->fill || !ld->stage || !ld->line || p == MAP_FAILED) {
        if (p != MAP_FAILED)
            munmap(p, ld->bytes);
        free(ld->fill);
        free(ld->stage);
        free(ld->line);
        free(ld);
        return -ENOMEM;
    }
    ld->base = p;
#ifdef MADV_HUGEPAGE
    madvise(p, ld->bytes, MADV_HUGEPAGE); /* a hint (fewer faults and TLB misses) */
#endif
#ifdef MADV_POPULATE_WRITE /* without it, the placing thread faults its pages in */
    if (ld->bytes >= PREFAULT_MIN)
        ld->prefaulting = pthread_create(&ld->prefaulter, NULL, prefault_main, ld) == 0;
#endif
    *out = ld;
    return 0;
}

void nd_anchor_loader_destroy(nd_anchor_loader *ld)
{
    if (!ld)
        return;
    prefault_join(ld); /* before the mapping goes */
    free(ld->stage);
    free(ld->line);
    if (ld->over) {
        for (uint32_t p = 0; p < LPARTS; p++)
            free(ld->over[p]);
        free(ld->over);
    }
    free(ld->fill);
    if (ld->base)
        munmap(ld->base, ld->bytes);
    free(ld);
}

static int spill_push(nd_anchor_loader *ld, uint32_t p, uint64_t v)
{
    if (!ld->over && !(ld->over = calloc(LPARTS, sizeof(*ld->over))))
        return -ENOMEM;
    spill *sp = ld->over[p];
    if (!sp || sp->n == sp->cap) {
        uint32_t cap = sp ? sp->cap * 2 : 64;
        spill *ns = realloc(sp, sizeof(*sp) + (size_t)cap * sizeof(uint64_t));
        if (!ns)
            return -ENOMEM;
        if (!sp)
            ns->n = 0;
        ns->cap = cap;
        ld->over[p] = sp = ns;
    }
    sp->v[sp->n++] = v;
    return 0;
}

/* Writes group g's full line to its stage (at `at`, a multiple of WC).
 * Streamed lines are weakly ordered: place_group() fences before reading
 * them on this thread, and another thread sees them after the adding
 * thread's next lock-prefixed instruction (a mutex taken or released,
 * which drains the write-combining buffers), as the loader is handed over
 * between threads only under a lock or by a join. */
static inline void line_out(nd_anchor_loader *ld, uint32_t g, uint32_t at)
{
    uint64_t *to = ld->stage + (size_t)g * STAGE + at;
#ifdef __SSE2__
    const __m128i *from = (const __m128i *)ld->line[g];
    for (unsigned k = 0; k < WC / 2; k++)
        _mm_stream_si128((__m128i *)to + k, _mm_load_si128(from + k));
#else
    memcpy(to, ld->line[g], sizeof(ld->line[g]));
#endif
}

/* Placing, the write of entry i + PLACE_AHEAD is announced (a prefetch
 * for writing at about where it goes: its part's fill then) while entry i
 * is placed: a group's entries go to 256 parts of a mapping far larger
 * than the caches, and each part's next line was a miss the placing
 * thread waited for. With the lines above, a 10M x 16 load
 * (bench_sketch) took 0.67x the time it took before. */
#define PLACE_AHEAD 16

/* Places the staged entries of group g in their parts (the ones still in
 * its line too). */
static int place_group(nd_anchor_loader *ld, uint32_t g)
{
    uint64_t *st = ld->stage + (size_t)g * STAGE;
    uint32_t n = ld->sfill[g];
    memcpy(st + (n & ~(WC - 1)), ld->line[g], (n % WC) * sizeof(uint64_t));
#ifdef __SSE2__
    _mm_sfence(); /* the streamed lines, before they are read */
#endif
    for (uint32_t i = 0; i < n; i++) {
        if (i + PLACE_AHEAD < n) { /* a hint: never faults */
            uint32_t q = (uint32_t)(st[i + PLACE_AHEAD] >> 48);
            __builtin_prefetch(ld->base + ((size_t)q * ld->pcap + ld->fill[q]) * SENTRY + SENTRY,
                               1);
        }
        uint32_t a = (uint32_t)(st[i] >> 32), p = a >> 16, f = ld->fill[p];
        uint64_t v = (uint64_t)(uint16_t)a << 32 | (uint32_t)st[i];
        if (f < ld->pcap) {
            staged_put(ld->base + ((size_t)p * ld->pcap + f) * SENTRY, v);
            ld->fill[p] = f + 1;
        } else if (spill_push(ld, p, v) < 0) {
            return -ENOMEM;
        }
    }
    ld->sfill[g] = 0;
    return 0;
}

int nd_anchor_loader_add(nd_anchor_loader *ld, uint32_t slot, const uint32_t *anchors, size_t n)
{
    if (slot >= ND_ANCHOR_SLOTS)
        return -ERANGE;
    if (ld->added && slot <= ld->last_slot)
        ld->ascending = false;
    ld->last_slot = slot;
    ld->added++;
    for (size_t i = 0; i < n; i++) {
        uint32_t g = anchors[i] >> 24;
        uint32_t f = ld->sfill[g]++;
        ld->line[g][f % WC] = (uint64_t)anchors[i] << 32 | slot;
        if (f % WC != WC - 1)
            continue;
        line_out(ld, g, f - (WC - 1));
        if (f + 1 == STAGE && place_group(ld, g) < 0)
            return -ENOMEM;
    }
    return 0;
}

typedef struct finish_job {
    nd_anchor_loader *ld;
    uint32_t lo, hi; /* parts [lo, hi) */
    uint64_t *v, *tmp;
    int rc;
} finish_job;

/* Mends the runs of equal keys in v[0..n) whose slots are out of order
 * (documents added in no slot order). */
static void mend_slot_order(uint64_t *v, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (v[i] < v[i - 1]) { /* same key, slots out of order */
            size_t a = i - 1, b = i + 1;
            while (a && v[a - 1] >> 32 == v[i] >> 32)
                a--;
            while (b < n && v[b] >> 32 == v[i] >> 32)
                b++;
            nd_insertion_sort_u64(v + a, b - a);
            i = b - 1;
        }
}

/* The staged part p's entries (its SENTRY-byte ones, then its spill's)
 * into v, sorted by their 16 key bits, in the order added within a key: an
 * LSD radix sort whose one counting pass counts both bytes and whose first
 * scatter reads the staged bytes (tmp: as many more). Returns their count. */
static size_t sort_part(const nd_anchor_loader *ld, uint32_t p, uint64_t *v, uint64_t *tmp)
{
    const uint8_t *in = ld->base + (size_t)p * ld->pcap * SENTRY;
    const spill *sp = ld->over ? ld->over[p] : NULL;
    size_t nin = ld->fill[p], nsp = sp ? sp->n : 0, n = nin + nsp;
    if (n <= 16) {
        for (size_t i = 0; i < nin; i++)
            v[i] = staged_get(in + i * SENTRY);
        for (size_t i = 0; i < nsp; i++)
            v[nin + i] = sp->v[i];
        nd_insertion_sort_u64(v, n);
        return n;
    }
    size_t lo[257] = {0}, hi[257] = {0};
    for (size_t i = 0; i < nin; i++)
        lo[in[i * SENTRY] + 1]++, hi[in[i * SENTRY + 1] + 1]++;
    for (size_t i = 0; i < nsp; i++)
        lo[(sp->v[i] >> 32 & 255) + 1]++, hi[(sp->v[i] >> 40 & 255) + 1]++;
    for (unsigned b = 1; b < 257; b++)
        lo[b] += lo[b - 1], hi[b] += hi[b - 1];
    for (size_t i = 0; i < nin; i++)
        tmp[lo[in[i * SENTRY]]++] = staged_get(in + i * SENTRY);
    for (size_t i = 0; i < nsp; i++)
        tmp[lo[sp->v[i] >> 32 & 255]++] = sp->v[i];
    for (size_t i = 0; i < n; i++)
        v[hi[tmp[i] >> 40 & 255]++] = tmp[i];
    return n;
}

/* Turns v[i..n), the sorted staged entries from one bucket's first, into
 * that bucket's entries in place (key << 32 | slot): its run (the same
 * bits 12-15 of the staged key) masked to the bucket's key bits, repeats
 * dropped, each key's first `cap` slots kept (the earliest documents when
 * slots ascend with registration). Returns how many it keeps (at v + i);
 * *end gets the index after the run. */
static size_t bucket_entries(uint64_t *v, size_t i, size_t n, unsigned cap, size_t *end)
{
    const uint64_t mask = (uint64_t)KEY_FREE_MASK << 32 | UINT32_MAX;
    uint32_t sub = (uint32_t)(v[i] >> (32 + KEY_FREE_BITS));
    uint64_t prev = UINT64_MAX;
    size_t j = i, k = 0, run = 0;
    for (; j < n && (uint32_t)(v[j] >> (32 + KEY_FREE_BITS)) == sub; j++) {
        uint64_t x = v[j] & mask;
        if (x == prev)
            continue;
        prev = x;
        run = k && v[i + k - 1] >> 32 == x >> 32 ? run + 1 : 1;
        if (run <= cap)
            v[i + k++] = x;
    }
    *end = j;
    return k;
}

/* Sorts each part of the job and carves its buckets at the write cursor. */
static void *finish_parts(void *arg)
{
    finish_job *jb = arg;
    nd_anchor_loader *ld = jb->ld;
    nd_anchor_index *idx = ld->idx;
    uint8_t *w = ld->base + (size_t)jb->lo * ld->pcap * SENTRY;
    for (uint32_t p = jb->lo; p < jb->hi; p++) {
        const uint8_t *in = ld->base + (size_t)p * ld->pcap * SENTRY;
        size_t n = sort_part(ld, p, jb->v, jb->tmp);
        if (!ld->ascending)
            mend_slot_order(jb->v, n);
        /* the 16 buckets of the part, in order: runs of bits 12-15 of the
         * staged anchor bits */
        for (size_t i = 0, j; i < n; i = j) {
            uint32_t bi = p << 4 | (uint32_t)(jb->v[i] >> (32 + KEY_FREE_BITS));
            size_t k = bucket_entries(jb->v, i, n, idx->cap, &j);
            bucket *bk = &idx->b[bi];
            /* Carved at the cursor while that stays within what was read
             * (the part's own stretch); a part that spilled may need more:
             * then its own array. */
            bool carve = w + k * ENTRY <= in + (size_t)ld->pcap * SENTRY;
            uint8_t *e = carve ? w : malloc(k * ENTRY);
            if (!e) {
                jb->rc = -ENOMEM;
                return NULL;
            }
            for (size_t x = 0; x < k; x++) /* not visible before it is published */
                entry_put(e + x * ENTRY, jb->v[i + x]);
            pthread_rwlock_wrlock(lock_of(idx, bi));
            bool empty = bk->n == 0;
            if (empty) {
                bk->e = e, bk->n = (uint32_t)k, bk->cap = (uint32_t)k | (carve ? CARVED : 0);
                if (carve)
                    w += k * ENTRY;
            }
            pthread_rwlock_unlock(lock_of(idx, bi));
            if (!empty && !carve)
                free(e);
            if (!empty && jb->rc == 0)
                jb->rc = merge_bucket(idx, bi, jb->v + i, k);
        }
    }
    return NULL;
}

int nd_anchor_loader_finish(nd_anchor_loader *ld, unsigned threads)
{
    prefault_join(ld); /* before pages are given back */
    for (uint32_t g = 0; g < GROUPS; g++)
        if (place_group(ld, g) < 0)
            return -ENOMEM;
    if (threads < 1)
        threads = 1;
    if (threads > ND_ANCHOR_LOAD_THREADS_MAX)
        threads = ND_ANCHOR_LOAD_THREADS_MAX;
    size_t npages = ld->bytes / PAGE, nchunks = (npages + CHUNK_PAGES - 1) / CHUNK_PAGES;
    region *r = calloc(1, sizeof(*r));
    _Atomic uint32_t *live = calloc(npages, sizeof(*live));
    uint32_t *chunk_live = calloc(nchunks + 1, sizeof(*chunk_live));
    uint32_t *chunk_held = calloc(nchunks + 1, sizeof(*chunk_held));
    finish_job jobs[ND_ANCHOR_LOAD_THREADS_MAX];
    int rc = r && live && chunk_live && chunk_held ? 0 : -ENOMEM;
    for (unsigned t = 0; t < threads; t++) {
        jobs[t] = (finish_job){.ld = ld,
                               .lo = (uint32_t)((uint64_t)LPARTS * t / threads),
                               .hi = (uint32_t)((uint64_t)LPARTS * (t + 1) / threads)};
        size_t most = 0;
        for (uint32_t p = jobs[t].lo; p < jobs[t].hi; p++) {
            size_t n = ld->fill[p] + (ld->over && ld->over[p] ? ld->over[p]->n : 0);
            most = n > most ? n : most;
        }
        jobs[t].v = malloc((most + 1) * sizeof(uint64_t));
        jobs[t].tmp = malloc((most + 1) * sizeof(uint64_t));
        if (!jobs[t].v || !jobs[t].tmp)
            rc = -ENOMEM;
    }
    if (rc == 0) {
        pthread_t th[ND_ANCHOR_LOAD_THREADS_MAX];
        bool started[ND_ANCHOR_LOAD_THREADS_MAX] = {false};
        for (unsigned t = 1; t < threads; t++)
            started[t] = pthread_create(&th[t], NULL, finish_parts, &jobs[t]) == 0;
        finish_parts(&jobs[0]);
        for (unsigned t = 1; t < threads; t++) {
            if (started[t])
                pthread_join(th[t], NULL);
            else
                finish_parts(&jobs[t]);
            if (jobs[t].rc < 0)
                rc = jobs[t].rc;
        }
        if (jobs[0].rc < 0)
            rc = jobs[0].rc;
    }
    for (unsigned t = 0; t < threads; t++)
        free(jobs[t].v), free(jobs[t].tmp);
    if (!r || !live || !chunk_live || !chunk_held) {
        free(r), free(live), free(chunk_live), free(chunk_held);
        return rc;
    }
    /* Count the carved buckets on each page; give back the pages without. */
    uint64_t held = 0;
    for (uint32_t bi = 0; bi < NBUCKETS; bi++) {
        const bucket *bk = &ld->idx->b[bi];
        if (!(bk->cap & CARVED) || bk->e < ld->base || bk->e >= ld->base + ld->bytes)
            continue;
        size_t first = (size_t)(bk->e - ld->base) / PAGE;
        size_t last = (size_t)(bk->e + (size_t)cap_of(bk) * ENTRY - 1 - ld->base) / PAGE;
        for (size_t pg = first; pg <= last; pg++)
            atomic_fetch_add_explicit(&live[pg], 1, memory_order_relaxed);
    }
    for (size_t pg = 0; pg < npages;) {
        size_t q = pg;
        while (q < npages && atomic_load_explicit(&live[q], memory_order_relaxed) == 0)
            q++;
        if (q > pg)
            madvise(ld->base + pg * PAGE, (q - pg) * PAGE, MADV_DONTNEED);
        for (pg = q; pg < npages && atomic_load_explicit(&live[pg], memory_order_relaxed); pg++) {
            held += PAGE;
            chunk_live[pg / CHUNK_PAGES]++;
            chunk_held[pg / CHUNK_PAGES]++;
        }
    }
    r->base = ld->base, r->bytes = ld->bytes, r->live = live;
    r->chunk_live = chunk_live, r->chunk_held = chunk_held;
    atomic_init(&r->held, held);
    pthread_mutex_lock(&ld->idx->regions_mu);
    r->next = ld->idx->regions;
    ld->idx->regions = r;
    pthread_mutex_unlock(&ld->idx->regions_mu);
    ld->base = NULL; /* the index's now */
    return rc;
}

int nd_anchor_index_insert_many(nd_anchor_index *idx, const uint32_t *slots,
                                const uint32_t *anchors, size_t ndocs, size_t m)
{
    return nd_anchor_index_insert_many_threads(idx, slots, anchors, ndocs, m, 1);
}

int nd_anchor_index_insert_many_threads(nd_anchor_index *idx, const uint32_t *slots,
                                        const uint32_t *anchors, size_t ndocs, size_t m,
                                        unsigned threads)
{
    if (ndocs * m == 0)
        return 0;
    nd_anchor_loader *ld = NULL;
    int rc = nd_anchor_loader_create(&ld, idx, (uint64_t)ndocs * m);
    for (size_t i = 0; i < ndocs && rc == 0; i++)
        rc = nd_anchor_loader_add(ld, slots[i], anchors + i * m, m);
    if (rc == 0)
        rc = nd_anchor_loader_finish(ld, threads);
    nd_anchor_loader_destroy(ld);
    return rc;
}

static inline uint16_t entry_key(const uint8_t *p)
{
    return (uint16_t)((p[3] | (uint32_t)p[4] << 8) >> (SLOT_BITS - 24));
}

/* Range [*lo, *hi) of the entries under anchor a in its bucket (lock held):
 * lower_bound() of the key, then a scan of the (short) run. */
static void anchor_range(const bucket *bk, uint32_t a, uint32_t *lo, uint32_t *hi)
{
    uint16_t k = key_of(a);
    uint32_t l = lower_bound(bk, (uint64_t)k << 32), h;
    uint32_t e = l;
    while (e < bk->n && e - l < 64 && entry_key(bk->e + (size_t)e * ENTRY) == k)
        e++;
    if (e - l == 64) { /* a long run (boilerplate): binary search its end */
        h = bk->n;
        while (e < h) {
            uint32_t mid = (e + h) / 2;
            if (entry_key(bk->e + (size_t)mid * ENTRY) <= k)
                e = mid + 1;
            else
                h = mid;
        }
    }
    *lo = l, *hi = e;
}

size_t nd_anchor_index_postings(const nd_anchor_index *idx, uint32_t anchor)
{
    uint32_t bi = bucket_of(anchor), lo, hi;
    pthread_rwlock_rdlock(lock_of(idx, bi));
    anchor_range(&idx->b[bi], anchor, &lo, &hi);
    pthread_rwlock_unlock(lock_of(idx, bi));
    return hi - lo;
}

size_t nd_anchor_index_guess_miss(const nd_anchor_index *idx, uint32_t anchor)
{
    uint32_t bi = bucket_of(anchor);
    const bucket *bk = &idx->b[bi];
    size_t miss = 0;
    pthread_rwlock_rdlock(lock_of(idx, bi));
    if (bk->n) {
        uint32_t g = key_guess(key_of(anchor), bk->n);
        uint32_t at = lower_bound(bk, (uint64_t)key_of(anchor) << 32);
        miss = g > at ? g - at : at - g;
    }
    pthread_rwlock_unlock(lock_of(idx, bi));
    return miss;
}

/* Sorts v[0..n) ascending by their low 40 bits (slot << 8 | anchor):
 * an insertion sort when short, else a radix sort of five 8-bit passes
 * through tmp (n more), a pass skipped when all share its byte. */
static void sort_postings(uint64_t *v, uint64_t *tmp, size_t n)
{
    if (n <= 32) {
        nd_insertion_sort_u64(v, n);
        return;
    }
    uint64_t *src = v, *dst = tmp;
    for (unsigned shift = 0; shift < 40; shift += 8) {
        if (!radix_pass(src, dst, n, shift, true))
            continue; /* one value of this byte: already in order */
        uint64_t *t = src;
        src = dst, dst = t;
    }
    if (src != v)
        memcpy(v, src, n * sizeof(*v));
}

size_t nd_anchor_index_query(const nd_anchor_index *idx, const uint32_t *anchors, size_t n,
                             nd_anchor_hit *hits, size_t cap, unsigned *full)
{
    uint32_t q[ND_ANCHOR_QUERY_MAX];
    uint8_t pos[ND_ANCHOR_QUERY_MAX];
    /* postings: slot << 8 | the anchor's place in anchors[] (40 KiB each) */
    uint64_t post[ND_ANCHOR_HITS_MAX], tmp[ND_ANCHOR_HITS_MAX];
    size_t np = 0;
    unsigned nfull = 0;
    if (n > ND_ANCHOR_QUERY_MAX)
        n = ND_ANCHOR_QUERY_MAX;
    prefetch_anchors(idx, anchors, n, false);
    for (size_t i = 0; i < n; i++) { /* sorted by insertion (n <= 80) */
        uint32_t x = anchors[i];
        size_t j = i;
        for (; j && q[j - 1] > x; j--)
            q[j] = q[j - 1], pos[j] = pos[j - 1];
        q[j] = x, pos[j] = (uint8_t)i;
    }
    /* Every posting: at most idx->cap per anchor, so all of them fit. A
     * repeated anchor counts once, under its first place. */
    for (size_t i = 0; i < n; i++) {
        if (i && q[i] == q[i - 1])
            continue;
        uint8_t first = pos[i];
        for (size_t k = i + 1; k < n && q[k] == q[i]; k++)
            first = pos[k] < first ? pos[k] : first;
        uint32_t bi = bucket_of(q[i]), lo, hi;
        const bucket *bk = &idx->b[bi];
        pthread_rwlock_rdlock(lock_of(idx, bi));
        anchor_range(bk, q[i], &lo, &hi);
        nfull += hi - lo >= idx->cap;
        for (uint32_t e = lo; e < hi && np < ND_ANCHOR_HITS_MAX; e++)
            post[np++] = (uint64_t)(uint32_t)entry_get(bk->e + (size_t)e * ENTRY) << 8 | first;
        pthread_rwlock_unlock(lock_of(idx, bi));
    }
    if (full)
        *full = nfull;
    sort_postings(post, tmp, np);
    /* Runs of equal slots are (slot, shared, first anchor): counted per
     * shared value, then placed best first (most shared; within one count
     * slots stay ascending), the first cap of them. */
    size_t at[ND_ANCHOR_QUERY_MAX + 2] = {0}, found = 0;
    for (size_t i = 0, j; i < np; i = j) {
        for (j = i + 1; j < np && post[j] >> 8 == post[i] >> 8; j++)
            ;
        at[j - i]++;
        found++;
    }
    for (size_t s = ND_ANCHOR_QUERY_MAX, sum = 0; s >= 1; s--) { /* -> first place of s */
        size_t c = at[s];
        at[s] = sum;
        sum += c;
    }
    for (size_t i = 0, j; i < np; i = j) {
        for (j = i + 1; j < np && post[j] >> 8 == post[i] >> 8; j++)
            ;
        size_t p = at[j - i]++;
        if (p < cap)
            hits[p] = (nd_anchor_hit){.slot = (uint32_t)(post[i] >> 8),
                                      .shared = (uint16_t)(j - i),
                                      .anchor = (uint16_t)(post[i] & 255)};
    }
    return found;
}

void nd_anchor_index_stats(const nd_anchor_index *idx, nd_anchor_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->bytes = sizeof(*idx) + (uint64_t)NBUCKETS * sizeof(bucket);
    for (uint32_t i = 0; i < NBUCKETS; i++) {
        pthread_rwlock_rdlock(lock_of(idx, i));
        const bucket *bk = &idx->b[i];
        if (bk->n) {
            out->buckets_used++;
            out->entries += bk->n;
        }
        if (bk->e && !(bk->cap & CARVED))
            out->bytes += (uint64_t)bk->cap * ENTRY + MALLOC_OVERHEAD;
        pthread_rwlock_unlock(lock_of(idx, i));
    }
    pthread_mutex_lock((pthread_mutex_t *)&idx->regions_mu);
    for (const region *r = idx->regions; r; r = r->next)
        out->bytes += atomic_load_explicit(&r->held, memory_order_relaxed) +
                      r->bytes / PAGE * sizeof(*r->live) +
                      2 * (r->bytes / PAGE / CHUNK_PAGES + 1) * sizeof(uint32_t);
    pthread_mutex_unlock((pthread_mutex_t *)&idx->regions_mu);
}
