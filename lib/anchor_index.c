/* anchor_index.c - anchor -> slots, bucketed sorted arrays of 6-byte
 * entries under striped reader-writer locks (see anchor_index.h). */
#include "anchor_index.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BUCKET_BITS 20
#define NBUCKETS (1u << BUCKET_BITS)
#define NSTRIPES 4096u
#define ENTRY 6 /* bytes: anchor low 16 bits (LE), slot (LE) */
#define MALLOC_OVERHEAD 16

typedef struct bucket {
    uint8_t *e;   /* n entries of ENTRY bytes, sorted by (key, slot) */
    uint32_t n, cap;
} bucket;

struct nd_anchor_index {
    bucket *b;
    unsigned cap;
    pthread_rwlock_t locks[NSTRIPES];
};

static inline uint32_t bucket_of(uint32_t a) { return a >> (32 - BUCKET_BITS); }
static inline uint16_t key_of(uint32_t a) { return (uint16_t)a; }
static inline pthread_rwlock_t *lock_of(const nd_anchor_index *idx, uint32_t b)
{
    return (pthread_rwlock_t *)&idx->locks[b & (NSTRIPES - 1)];
}

static inline uint64_t entry_get(const uint8_t *p) /* key << 32 | slot */
{
    uint16_t k = (uint16_t)(p[0] | p[1] << 8);
    uint32_t s = (uint32_t)p[2] | (uint32_t)p[3] << 8 | (uint32_t)p[4] << 16 | (uint32_t)p[5] << 24;
    return (uint64_t)k << 32 | s;
}

static inline void entry_put(uint8_t *p, uint64_t v)
{
    uint16_t k = (uint16_t)(v >> 32);
    uint32_t s = (uint32_t)v;
    p[0] = (uint8_t)k, p[1] = (uint8_t)(k >> 8);
    p[2] = (uint8_t)s, p[3] = (uint8_t)(s >> 8), p[4] = (uint8_t)(s >> 16), p[5] = (uint8_t)(s >> 24);
}

/* First index whose entry is >= v. */
static uint32_t lower_bound(const bucket *bk, uint64_t v)
{
    uint32_t lo = 0, hi = bk->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (entry_get(bk->e + (size_t)mid * ENTRY) < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int nd_anchor_index_create(nd_anchor_index **out, unsigned posting_cap)
{
    if (posting_cap < 1 || posting_cap > ND_ANCHOR_CAP_MAX)
        return -EINVAL;
    nd_anchor_index *idx = calloc(1, sizeof(*idx));
    if (!idx)
        return -ENOMEM;
    idx->b = calloc(NBUCKETS, sizeof(bucket));
    if (!idx->b) {
        free(idx);
        return -ENOMEM;
    }
    idx->cap = posting_cap;
    for (unsigned i = 0; i < NSTRIPES; i++)
        pthread_rwlock_init(&idx->locks[i], NULL);
    *out = idx;
    return 0;
}

void nd_anchor_index_destroy(nd_anchor_index *idx)
{
    if (!idx)
        return;
    for (uint32_t i = 0; i < NBUCKETS; i++)
        free(idx->b[i].e);
    for (unsigned i = 0; i < NSTRIPES; i++)
        pthread_rwlock_destroy(&idx->locks[i]);
    free(idx->b);
    free(idx);
}

/* Capacity after growth: +1/8, at least 4 more. */
static uint32_t grown(uint32_t cap, uint32_t need)
{
    uint32_t c = cap + cap / 8 + 4;
    return c < need ? need : c;
}

/* Adds (a, slot) under the bucket's write lock. 1 added, 0 present, -ENOMEM. */
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
    } else {
        if (bk->n == bk->cap) {
            uint32_t c = grown(bk->cap, bk->n + 1);
            uint8_t *e = realloc(bk->e, (size_t)c * ENTRY);
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
            free(bk->e);
            bk->e = NULL, bk->cap = 0;
        }
    }
    pthread_rwlock_unlock(lock_of(idx, bi));
    return found;
}

int nd_anchor_index_insert(nd_anchor_index *idx, uint32_t slot, const uint32_t *anchors, size_t n)
{
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

size_t nd_anchor_index_remove(nd_anchor_index *idx, uint32_t slot, const uint32_t *anchors, size_t n)
{
    size_t removed = 0;
    for (size_t i = 0; i < n; i++)
        removed += del_one(idx, anchors[i], slot);
    return removed;
}

static void insertion_sort(uint64_t *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        uint64_t x = v[i];
        size_t j = i;
        for (; j && v[j - 1] > x; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
}

/* Sorts v[0..n) (key << 32 | slot): a stable two-pass radix sort on the
 * 16-bit key (tmp: n more), then an insertion sort of any run of equal keys
 * whose slots are not ascending already (they are when the documents come in
 * slot order, as at start-up). */
static void sort_range(uint64_t *v, uint64_t *tmp, size_t n)
{
    if (n <= 16) {
        insertion_sort(v, n);
        return;
    }
    uint64_t *src = v, *dst = tmp;
    for (unsigned shift = 32; shift < 48; shift += 8) {
        size_t count[257] = {0};
        for (size_t i = 0; i < n; i++)
            count[((src[i] >> shift) & 255) + 1]++;
        for (unsigned b = 1; b < 257; b++)
            count[b] += count[b - 1];
        for (size_t i = 0; i < n; i++)
            dst[count[(src[i] >> shift) & 255]++] = src[i];
        uint64_t *t = src;
        src = dst, dst = t;
    }
    /* two passes: the result is back in v */
    for (size_t i = 1; i < n; i++)
        if (v[i] < v[i - 1]) { /* same key, slots out of order */
            size_t a = i - 1, b = i + 1;
            while (a && v[a - 1] >> 32 == v[i] >> 32)
                a--;
            while (b < n && v[b] >> 32 == v[i] >> 32)
                b++;
            insertion_sort(v + a, b - a);
            i = b - 1;
        }
}

/* Merges the sorted entries v[0..n) (key << 32 | slot) into bucket bi,
 * deduplicated, under its write lock. 0 or -ENOMEM. */
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
        uint32_t a = 0, k = 0;
        size_t b = 0;
        uint64_t last = UINT64_MAX;
        while (a < bk->n || b < n) {
            uint64_t va = a < bk->n ? entry_get(bk->e + (size_t)a * ENTRY) : UINT64_MAX;
            uint64_t x;
            if (a < bk->n && (b >= n || va <= v[b]))
                x = va, a++;
            else
                x = v[b++];
            if (x != last)
                entry_put(e + (size_t)k++ * ENTRY, x), last = x;
        }
        free(bk->e);
        bk->e = e, bk->n = k, bk->cap = cap;
    }
    pthread_rwlock_unlock(lock_of(idx, bi));
    return rc;
}

#define PART_BITS 10           /* first-level parts: the top 10 bits of an anchor */
#define NPARTS (1u << PART_BITS)
#define SUB_BITS (BUCKET_BITS - PART_BITS) /* buckets per part: 1024 */
/* Entries of first-level scratch per round: the parts are gathered a range
 * at a time (one more read of the anchors per round) so that the scratch,
 * whose first touch is what a bulk load mostly costs on a VM, stays small. */
#ifndef ROUND_ENTRIES /* (overridable for a test of many rounds) */
#define ROUND_ENTRIES (24u << 20)
#endif

typedef struct build_job {
    nd_anchor_index *idx;
    const uint64_t *part;  /* this round's entries (a << 32 | slot), by part */
    const size_t *pstart;  /* part p of the round: [pstart[p], pstart[p + 1]) */
    unsigned p0, from, step, to; /* parts from, from + step, ... < to (absolute) */
    uint64_t *sub, *tmp;   /* scratch: the largest part, twice */
    int rc;
} build_job;

/* Groups each of its parts by bucket, sorts each bucket's entries and
 * merges them into the index (one thread). */
static void *build_parts(void *arg)
{
    build_job *jb = arg;
    size_t cnt[(1u << SUB_BITS) + 1];
    for (unsigned p = jb->from; p < jb->to && jb->rc == 0; p += jb->step) {
        size_t lo = jb->pstart[p - jb->p0], hi = jb->pstart[p - jb->p0 + 1];
        if (lo == hi)
            continue;
        memset(cnt, 0, sizeof(cnt));
        for (size_t i = lo; i < hi; i++)
            cnt[((jb->part[i] >> (32 + 32 - BUCKET_BITS)) & ((1u << SUB_BITS) - 1)) + 1]++;
        for (unsigned b = 0; b < (1u << SUB_BITS); b++)
            cnt[b + 1] += cnt[b];
        for (size_t i = lo; i < hi; i++) {
            uint32_t a = (uint32_t)(jb->part[i] >> 32);
            jb->sub[cnt[bucket_of(a) & ((1u << SUB_BITS) - 1)]++] =
                (uint64_t)key_of(a) << 32 | (uint32_t)jb->part[i];
        }
        /* cnt[b] is now the end of bucket b of the part */
        for (unsigned b = 0; b < (1u << SUB_BITS) && jb->rc == 0; b++) {
            size_t i = b ? cnt[b - 1] : 0, j = cnt[b];
            if (i == j)
                continue;
            sort_range(jb->sub + i, jb->tmp, j - i);
            jb->rc = merge_bucket(jb->idx, p << SUB_BITS | b, jb->sub + i, j - i);
        }
    }
    return NULL;
}

/* Scratch for the bulk load: anonymous memory asking for huge pages, so that
 * first touching it is few page faults. NULL on failure. */
static void *big_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

static void big_free(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
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
    size_t total = ndocs * m;
    if (total == 0)
        return 0;
    if (threads < 1)
        threads = 1;
    if (threads > ND_ANCHOR_LOAD_THREADS_MAX)
        threads = ND_ANCHOR_LOAD_THREADS_MAX;
    /* Entries grouped by part (top 10 bits of the anchor) a range of parts
     * at a time; each part then by bucket (the next 10 bits, 1024 write
     * streams, in a scratch the size of one part), each bucket's few
     * entries sorted by (key, slot) and merged in. */
    size_t *pcount = calloc(NPARTS + 1, sizeof(size_t));
    size_t *pstart = calloc(NPARTS + 1, sizeof(size_t));
    if (!pcount || !pstart) {
        free(pcount), free(pstart);
        return -ENOMEM;
    }
    for (size_t i = 0; i < total; i++)
        pcount[anchors[i] >> (32 - PART_BITS)]++;
    size_t most_part = 0, most_round = 0;
    {
        size_t r = 0;
        for (unsigned p = 0; p < NPARTS; p++) {
            if (pcount[p] > most_part)
                most_part = pcount[p];
            if (r && r + pcount[p] > ROUND_ENTRIES)
                r = 0;
            r += pcount[p];
            if (r > most_round)
                most_round = r;
        }
    }
    size_t pbytes = most_round * sizeof(uint64_t);
    uint64_t *part = big_alloc(pbytes);
    build_job jobs[ND_ANCHOR_LOAD_THREADS_MAX];
    int rc = part ? 0 : -ENOMEM;
    for (unsigned t = 0; t < threads; t++) {
        jobs[t] = (build_job){.idx = idx, .part = part, .pstart = pstart};
        jobs[t].sub = malloc(most_part * sizeof(uint64_t));
        jobs[t].tmp = malloc(most_part * sizeof(uint64_t));
        if (!jobs[t].sub || !jobs[t].tmp)
            rc = -ENOMEM;
    }
    for (unsigned p0 = 0; p0 < NPARTS && rc == 0;) {
        /* This round: parts [p0, p1) (as many as fit, at least one). */
        unsigned p1 = p0;
        size_t n = 0;
        while (p1 < NPARTS && (p1 == p0 || n + pcount[p1] <= ROUND_ENTRIES))
            n += pcount[p1++];
        pstart[0] = 0;
        for (unsigned p = p0; p < p1; p++)
            pstart[p - p0 + 1] = pstart[p - p0] + pcount[p];
        /* at[p - p0]: next write position of part p (pcount reused) */
        size_t *at = pcount + p0;
        for (unsigned p = p0; p < p1; p++)
            at[p - p0] = pstart[p - p0];
        for (size_t i = 0; i < ndocs; i++)
            for (size_t j = 0; j < m; j++) {
                uint32_t a = anchors[i * m + j];
                unsigned p = a >> (32 - PART_BITS);
                if (p - p0 < p1 - p0)
                    part[at[p - p0]++] = (uint64_t)a << 32 | slots[i];
            }
        pthread_t th[ND_ANCHOR_LOAD_THREADS_MAX];
        bool started[ND_ANCHOR_LOAD_THREADS_MAX] = {false};
        for (unsigned t = 0; t < threads; t++) {
            jobs[t].p0 = p0, jobs[t].from = p0 + t, jobs[t].step = threads, jobs[t].to = p1;
            jobs[t].rc = 0;
        }
        for (unsigned t = 1; t < threads; t++)
            started[t] = pthread_create(&th[t], NULL, build_parts, &jobs[t]) == 0;
        build_parts(&jobs[0]);
        for (unsigned t = 1; t < threads; t++) {
            if (started[t])
                pthread_join(th[t], NULL);
            else
                build_parts(&jobs[t]); /* could not start: do it here */
        }
        for (unsigned t = 0; t < threads; t++)
            if (jobs[t].rc < 0)
                rc = jobs[t].rc;
        p0 = p1;
    }
    for (unsigned t = 0; t < threads; t++)
        free(jobs[t].sub), free(jobs[t].tmp);
    big_free(part, pbytes);
    free(pcount);
    free(pstart);
    return rc;
}

static inline uint16_t entry_key(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* Range [*lo, *hi) of the entries under anchor a in its bucket (lock held):
 * a binary search on the 16-bit keys, then a scan of the (short) run. */
static void anchor_range(const bucket *bk, uint32_t a, uint32_t *lo, uint32_t *hi)
{
    uint16_t k = key_of(a);
    uint32_t l = 0, h = bk->n;
    while (l < h) {
        uint32_t mid = (l + h) / 2;
        if (entry_key(bk->e + (size_t)mid * ENTRY) < k)
            l = mid + 1;
        else
            h = mid;
    }
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

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Best first: more shared, then smaller slot. */
static bool hit_better(nd_anchor_hit a, nd_anchor_hit b)
{
    return a.shared > b.shared || (a.shared == b.shared && a.slot < b.slot);
}

size_t nd_anchor_index_query(const nd_anchor_index *idx, const uint32_t *anchors, size_t n,
                             nd_anchor_hit *hits, size_t cap, unsigned *skipped)
{
    uint32_t q[ND_ANCHOR_QUERY_MAX];
    uint32_t slots[ND_ANCHOR_QUERY_MAX * ND_ANCHOR_CAP_MAX / 4]; /* 16 KiB */
    const size_t slots_max = sizeof(slots) / sizeof(slots[0]);
    size_t ns = 0;
    unsigned skip = 0;
    if (n > ND_ANCHOR_QUERY_MAX)
        n = ND_ANCHOR_QUERY_MAX;
    /* Sorted by insertion (n <= 64), and every bucket and lock stripe
     * touched is fetched before the first is read: 32 cache misses into a
     * 16 MiB bucket array overlap instead of following one another. */
    for (size_t i = 0; i < n; i++) {
        uint32_t x = anchors[i];
        size_t j = i;
        for (; j && q[j - 1] > x; j--)
            q[j] = q[j - 1];
        q[j] = x;
        __builtin_prefetch(&idx->b[bucket_of(x)]);
        __builtin_prefetch(lock_of(idx, bucket_of(x)), 1);
    }
    for (size_t i = 0; i < n; i++) {
        if (i && q[i] == q[i - 1])
            continue;
        uint32_t bi = bucket_of(q[i]), lo, hi;
        const bucket *bk = &idx->b[bi];
        pthread_rwlock_rdlock(lock_of(idx, bi));
        anchor_range(bk, q[i], &lo, &hi);
        if (hi - lo > idx->cap) {
            skip++;
        } else {
            for (uint32_t e = lo; e < hi && ns < slots_max; e++)
                slots[ns++] = (uint32_t)entry_get(bk->e + (size_t)e * ENTRY);
        }
        pthread_rwlock_unlock(lock_of(idx, bi));
    }
    if (skipped)
        *skipped = skip;
    qsort(slots, ns, sizeof(uint32_t), cmp_u32);
    /* Runs of equal slots -> (slot, shared); keep the best cap by insertion. */
    size_t found = 0, kept = 0;
    for (size_t i = 0; i < ns;) {
        size_t j = i;
        while (j < ns && slots[j] == slots[i])
            j++;
        nd_anchor_hit h = {slots[i], (uint32_t)(j - i)};
        found++;
        if (cap && (kept < cap || hit_better(h, hits[kept - 1]))) {
            size_t at = kept < cap ? kept++ : cap - 1;
            while (at && hit_better(h, hits[at - 1])) {
                hits[at] = hits[at - 1];
                at--;
            }
            hits[at] = h;
        }
        i = j;
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
        if (bk->e)
            out->bytes += (uint64_t)bk->cap * ENTRY + MALLOC_OVERHEAD;
        pthread_rwlock_unlock(lock_of(idx, i));
    }
}
