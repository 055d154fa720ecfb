/* index.c - four 16-bit-key tables of copy-on-write sorted runs.
 *
 * Table t is keyed by block t = bits 16t..16t+15 of the simhash; an entry
 * holds the "remainder" rotr(h, 16t) >> 16, the other 48 bits, packed in 6
 * little-endian bytes, so an entry plus its bucket's key is the whole
 * simhash. Table 0 entries also carry the slot and are sorted by
 * (remainder, slot); tables 1..3 keep each distinct simhash once, sorted by
 * remainder. The layout, the probing and the concurrency scheme are
 * described in index.h.
 *
 * Uniqueness of hits: let d_b be the distance of a stored simhash x to the
 * query in block b and r_b the probe radius of table b (r_b < 0: table not
 * probed). Table b finds x iff d_b <= r_b, and x is reported only from the
 * first such table, checked by recomputing d_0..d_{b-1} from x. Such a
 * table exists whenever |x ^ q| <= k as long as sum(r_b + 1) = k + 1 (else
 * every d_b >= r_b + 1 and |x ^ q| >= k + 1); the standard radii and every
 * plan of plan_radii() satisfy this.
 *
 * Query path: plan the radii, list the buckets to probe, then per batch of
 * 16 prefetch their cells, their first lines, the rest of their runs, and
 * scan: the cache misses, not the popcounts, are what a query costs. */
#include "index.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define NTABLES 4
#define NKEYS 65536
#define MASK48 ((UINT64_C(1) << 48) - 1)
#define RUN_MAX 512                           /* a run that would grow past this is split */
#define RUN_MERGE (RUN_MAX / 2)               /* neighbours are merged when they fit */
#define EDIT_OBJS 3                           /* objects one bucket edit allocates/retires */
#define GATE_STRIPES 8                        /* reader counters per parity */
#define RETIRE_BATCH 64                       /* retired objects before a grace period */
#define RETIRE_MAX_BYTES ((size_t)64 << 20)   /* then the writer waits */
#define PREFETCH_LINES 48                     /* of one run: 3 KiB, RUN_MAX remainders */
#define PREFETCH_RUNS 6                       /* of one directory: those in its first line */
#define HUGE_MIN 4096                         /* entries of a bucket queries try to avoid */
#define HUGE_SLOTS 8                          /* huge buckets tracked per table */
#define PROBE_COST 32                         /* one probe's cache misses, in entries scanned */
#define PROBE_BATCH 16                        /* buckets whose misses are overlapped */
#define MAX_PROBES (NTABLES * (1 + 16 + 120)) /* radius 2 in every table */

/* x86-64 without -mpopcnt: the query loop is built twice, with and without
 * the popcnt instruction, and nd_index_create() picks one (no ifunc: it
 * breaks under TSan and on musl). */
#if defined(__x86_64__) && !defined(__POPCNT__) && defined(__GNUC__)
#define POPCNT_DISPATCH 1
#endif
/* Hot-path helpers, forced inline so that both builds get their own copy. */
#define HOT static inline __attribute__((always_inline))

/* An immutable sorted array of entries: b[] holds n 6-byte remainders, 2-5
 * zero pad bytes (a remainder is read with one 8-byte load), then for table 0
 * n 32-bit slots. */
typedef struct run {
    uint32_t n;
    uint32_t unused;
    unsigned char b[];
} run;

/* A bucket of more than one run: runs in key order, nruns >= 2, followed
 * by each run's last key (nruns remainders, then nruns slots) so that finding
 * a run reads only the directory. */
typedef struct dir {
    uint32_t nruns;
    uint32_t n; /* entries in all runs */
    run *runs[];
} dir;

/* Bucket cells hold 0 (empty), a run pointer, or a dir pointer | 1. */
typedef _Atomic(uintptr_t) cell;

/* Reader announcement counters; see gate_enter(). */
typedef struct gate {
    alignas(64) _Atomic uint64_t epoch;
    struct {
        alignas(64) _Atomic size_t n;
    } readers[2][GATE_STRIPES];
} gate;

/* Objects (tagged like cells) unlinked by the writer, not yet freed. */
typedef struct retire_list {
    uintptr_t *v;
    size_t n, cap, bytes;
} retire_list;

struct nd_index {
    cell *cells;             /* NTABLES * NKEYS */
    gate *gate;              /* separate: readers write it through a const index */
    _Atomic size_t count;    /* entries: (simhash, slot) pairs = table 0 */
    _Atomic size_t distinct; /* distinct simhashes = entries of tables 1..3 */
    /* Keys + 1 of buckets holding more than HUGE_MIN entries (0: unused),
     * a hint for plan_radii(); buckets past HUGE_SLOTS are not tracked. */
    _Atomic uint32_t huge[NTABLES][HUGE_SLOTS];
    _Atomic unsigned nhuge[NTABLES]; /* used huge[t] slots */
    retire_list retired;             /* since the last epoch flip */
    retire_list pending;             /* before it: freed once pending_parity is quiet */
    unsigned pending_parity;
    bool popcnt; /* the CPU has popcnt: use probe_all_popcnt() */
};

/* Sort key of an entry; slot is 0 in tables 1..3. */
typedef struct key {
    uint64_t rem;
    uint32_t slot;
} key;

/* ---- entries ------------------------------------------------------------ */

static inline uint64_t rotl64(uint64_t x, unsigned r)
{
    return r ? (x << r) | (x >> (64 - r)) : x;
}

static inline uint64_t rotr64(uint64_t x, unsigned r)
{
    return r ? (x >> r) | (x << (64 - r)) : x;
}

static inline uint32_t block_of(uint64_t h, unsigned t)
{
    return (uint32_t)(h >> (16 * t)) & 0xFFFF;
}

static inline uint64_t rem_of(uint64_t h, unsigned t)
{
    return rotr64(h, 16 * t) >> 16;
}

static inline uint64_t simhash_of(uint64_t rem, uint32_t block, unsigned t)
{
    return rotl64((rem << 16) | block, 16 * t);
}

static inline unsigned popcount64(uint64_t x)
{
    return (unsigned)__builtin_popcountll(x);
}

static inline uint64_t load48(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v & MASK48;
}

/* Two stores where the host's order is the stored one: the byte loop
 * was 12 % of the start-up's SimHash build at 10M. */
static inline void store48(unsigned char *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t lo = (uint32_t)v;
    uint16_t hi = (uint16_t)(v >> 32);
    memcpy(p, &lo, sizeof(lo));
    memcpy(p + 4, &hi, sizeof(hi));
#else
    for (int i = 0; i < 6; i++)
        p[i] = (unsigned char)(v >> (8 * i));
#endif
}

static inline int key_cmp(key a, key b)
{
    if (a.rem != b.rem)
        return a.rem < b.rem ? -1 : 1;
    return a.slot < b.slot ? -1 : a.slot > b.slot;
}

/* ---- runs --------------------------------------------------------------- */

static inline size_t rem_bytes(uint32_t n)
{
    return ((size_t)n * 6 + 2 + 3) & ~(size_t)3;
}

static inline size_t run_bytes(uint32_t n, bool slots)
{
    return sizeof(run) + rem_bytes(n) + (slots ? (size_t)n * 4 : 0);
}

static inline const uint32_t *run_slots(const run *r)
{
    return (const uint32_t *)(const void *)(r->b + rem_bytes(r->n));
}

static inline uint32_t *run_slots_mut(run *r)
{
    return (uint32_t *)(void *)(r->b + rem_bytes(r->n));
}

static inline key run_key(const run *r, uint32_t i, bool slots)
{
    key k = {load48(r->b + 6 * (size_t)i), slots ? run_slots(r)[i] : 0};
    return k;
}

/* Returns a new run with room for n entries (pad zeroed), or NULL. */
static run *run_alloc(uint32_t n, bool slots)
{
    run *r = malloc(run_bytes(n, slots));
    if (!r)
        return NULL;
    r->n = n;
    r->unused = 0;
    memset(r->b + 6 * (size_t)n, 0, rem_bytes(n) - 6 * (size_t)n);
    return r;
}

/* Copies src entries [from, from + cnt) to dst at position at. */
static void run_copy(run *dst, uint32_t at, const run *src, uint32_t from, uint32_t cnt, bool slots)
{
    memcpy(dst->b + 6 * (size_t)at, src->b + 6 * (size_t)from, 6 * (size_t)cnt);
    if (slots)
        memcpy(run_slots_mut(dst) + at, run_slots(src) + from, 4 * (size_t)cnt);
}

/* Copies all of src but entry skip to dst at position at. */
static void run_copy_without(run *dst, uint32_t at, const run *src, uint32_t skip, bool slots)
{
    run_copy(dst, at, src, 0, skip, slots);
    run_copy(dst, at + skip, src, skip + 1, src->n - skip - 1, slots);
}

static void run_put(run *dst, uint32_t at, key k, bool slots)
{
    store48(dst->b + 6 * (size_t)at, k.rem);
    if (slots)
        run_slots_mut(dst)[at] = k.slot;
}

/* Index of the first entry >= k in [lo, hi), or hi. */
static uint32_t run_bsearch(const run *r, key k, bool slots, uint32_t lo, uint32_t hi)
{
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (key_cmp(run_key(r, mid, slots), k) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Index of the first entry >= k, or r->n. Remainders are close to uniform,
 * so it starts where k would sit if they were exactly so and gallops from
 * there: one or two cache lines instead of a binary search's eight. */
static uint32_t run_lower(const run *r, key k, bool slots)
{
    uint32_t n = r->n;
    uint32_t b = (uint32_t)(((k.rem >> 24) * n) >> 24); /* < n */
    uint32_t step = 1;
    if (key_cmp(run_key(r, b, slots), k) < 0) {
        while (b + step < n && key_cmp(run_key(r, b + step, slots), k) < 0) {
            b += step;
            step *= 2;
        }
        return run_bsearch(r, k, slots, b + 1, b + step < n ? b + step : n);
    }
    while (b >= step && key_cmp(run_key(r, b - step, slots), k) >= 0) {
        b -= step;
        step *= 2;
    }
    return run_bsearch(r, k, slots, b >= step ? b - step + 1 : 0, b);
}

/* ---- buckets ------------------------------------------------------------ */

static inline bool is_dir(uintptr_t v)
{
    return v & 1;
}

static inline size_t dir_bytes(uint32_t nruns)
{
    return sizeof(dir) + (size_t)nruns * (sizeof(run *) + 8 + 4);
}

static inline uint64_t *dir_last_rem(const dir *d)
{
    return (uint64_t *)(void *)((char *)(uintptr_t)d + sizeof(dir) + d->nruns * sizeof(run *));
}

static inline uint32_t *dir_last_slot(const dir *d)
{
    return (uint32_t *)(void *)(dir_last_rem(d) + d->nruns);
}

/* The runs of a bucket value as an array; one = storage for a lone run.
 * Borrowed: valid while the bucket value is. */
typedef struct bview {
    run *const *runs;
    uint32_t nruns;
    run *one;
    const dir *d; /* or NULL */
} bview;

static void bview_init(bview *bv, uintptr_t v)
{
    bv->one = NULL;
    bv->runs = NULL;
    bv->nruns = 0;
    bv->d = NULL;
    if (is_dir(v)) {
        const dir *d = (const dir *)(v & ~(uintptr_t)1);
        bv->d = d;
        bv->runs = d->runs;
        bv->nruns = d->nruns;
    } else if (v) {
        bv->one = (run *)v;
        bv->runs = &bv->one;
        bv->nruns = 1;
    }
}

/* The run where k is or would go: the first whose last key is >= k, else the
 * last run. bv must not be empty. */
static uint32_t bview_find(const bview *bv, key k, bool slots)
{
    if (!bv->d)
        return 0;
    const uint64_t *rem = dir_last_rem(bv->d);
    const uint32_t *slot = dir_last_slot(bv->d);
    uint32_t lo = 0, hi = bv->nruns - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        key last = {rem[mid], slots ? slot[mid] : 0};
        if (key_cmp(last, k) >= 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Number of entries in bucket value v. */
HOT uint32_t bucket_size(uintptr_t v)
{
    if (is_dir(v))
        return ((const dir *)(v & ~(uintptr_t)1))->n;
    return v ? ((const run *)v)->n : 0;
}

/* Number of table-0 entries with remainder rem in bucket v, counting up to
 * limit. */
static unsigned bucket_count_rem(uintptr_t v, uint64_t rem, unsigned limit)
{
    bview bv;
    bview_init(&bv, v);
    if (!bv.nruns)
        return 0;
    key k = {rem, 0};
    unsigned count = 0;
    uint32_t j = bview_find(&bv, k, true);
    uint32_t i = run_lower(bv.runs[j], k, true);
    for (; j < bv.nruns; j++, i = 0) {
        const run *r = bv.runs[j];
        for (; i < r->n; i++) {
            if (load48(r->b + 6 * (size_t)i) != rem || count == limit)
                return count;
            count++;
        }
    }
    return count;
}

/* Prefetches the first line of bucket value v: a run's or a dir's header. */
HOT void prefetch_head(uintptr_t v)
{
    if (v)
        __builtin_prefetch((const void *)(v & ~(uintptr_t)1));
}

/* Prefetches the rest of a lone run, up to PREFETCH_LINES lines, with its
 * slots or (for a scan) only its remainders; its size is in the first line,
 * best prefetched a while before. */
HOT void prefetch_rest(uintptr_t v, bool slots)
{
    if (!v || is_dir(v))
        return;
    size_t lines = (run_bytes(((const run *)v)->n, slots) + 63) / 64;
    for (size_t l = 1; l < lines && l < PREFETCH_LINES; l++)
        __builtin_prefetch((const char *)v + 64 * l);
}

/* For a directory: prefetches the first line (rest: the remainders) of its
 * first PREFETCH_RUNS runs. */
HOT void prefetch_dir_runs(uintptr_t v, bool rest)
{
    if (!is_dir(v))
        return;
    const dir *d = (const dir *)(v & ~(uintptr_t)1);
    for (uint32_t j = 0; j < d->nruns && j < PREFETCH_RUNS; j++) {
        if (rest)
            prefetch_rest((uintptr_t)d->runs[j], false);
        else
            prefetch_head((uintptr_t)d->runs[j]);
    }
}

/* Size of a retired object; runs are counted as if they had slots. */
static size_t obj_bytes(uintptr_t v)
{
    if (is_dir(v)) {
        const dir *d = (const dir *)(v & ~(uintptr_t)1);
        return dir_bytes(d->nruns);
    }
    return run_bytes(((const run *)v)->n, true);
}

static void obj_free(uintptr_t v)
{
    free((void *)(v & ~(uintptr_t)1));
}

/* Frees a bucket value and all its runs (no reader may see it). */
static void bucket_free(uintptr_t v)
{
    bview bv;
    bview_init(&bv, v);
    for (uint32_t j = 0; j < bv.nruns; j++)
        free(bv.runs[j]);
    if (is_dir(v))
        obj_free(v);
}

/* ---- bucket edits (writer) ---------------------------------------------- */

/* The next version of one bucket: built aside, then published or dropped. */
typedef struct edit {
    cell *where;
    uintptr_t newv;
    uintptr_t fresh[EDIT_OBJS]; /* allocated; freed if the edit is dropped */
    uintptr_t old[EDIT_OBJS];   /* replaced; retired when it is published */
    unsigned nfresh, nold;
} edit;

static void edit_drop(edit *e)
{
    for (unsigned i = 0; i < e->nfresh; i++)
        obj_free(e->fresh[i]);
    e->nfresh = 0;
}

/* Fills the last keys of new directory d, built from bv with runs
 * [j, j + nold) replaced by nparts new ones: copied from bv's directory
 * where it has them, read from the (fresh) new runs. */
static void dir_fences(dir *d, const bview *bv, uint32_t j, uint32_t nold, uint32_t nparts,
                       bool slots)
{
    uint64_t *rem = dir_last_rem(d);
    uint32_t *slot = dir_last_slot(d);
    uint32_t tail = d->nruns - j - nparts;
    if (j || tail) { /* there are unchanged runs, so bv is a directory */
        const uint64_t *orem = dir_last_rem(bv->d);
        const uint32_t *oslot = dir_last_slot(bv->d);
        memcpy(rem, orem, j * sizeof(*rem));
        memcpy(slot, oslot, j * sizeof(*slot));
        memcpy(rem + j + nparts, orem + j + nold, tail * sizeof(*rem));
        memcpy(slot + j + nparts, oslot + j + nold, tail * sizeof(*slot));
    }
    for (uint32_t i = j; i < j + nparts; i++) {
        key last = run_key(d->runs[i], d->runs[i]->n - 1, slots);
        rem[i] = last.rem;
        slot[i] = last.slot;
    }
}

/* Sets e->newv to the bucket bv (value cur) with runs [j, j + nold) replaced
 * by parts[0..nparts), which the caller has recorded as fresh, and which hold
 * delta entries more than the runs they replace. */
static int edit_replace(edit *e, const bview *bv, uintptr_t cur, uint32_t j, uint32_t nold,
                        run **parts, uint32_t nparts, int delta, bool slots)
{
    uint32_t n = bv->nruns - nold + nparts;
    if (n == 0) {
        e->newv = 0;
    } else if (n == 1) {
        const run *r = nparts ? parts[0] : bv->runs[j ? 0 : nold];
        e->newv = (uintptr_t)r;
    } else {
        dir *d = malloc(dir_bytes(n));
        if (!d)
            return -ENOMEM;
        d->nruns = n;
        d->n = (uint32_t)((int64_t)bucket_size(cur) + delta);
        memcpy(d->runs, bv->runs, j * sizeof(run *));
        memcpy(d->runs + j, parts, nparts * sizeof(run *));
        memcpy(d->runs + j + nparts, bv->runs + j + nold, (bv->nruns - j - nold) * sizeof(run *));
        dir_fences(d, bv, j, nold, nparts, slots);
        e->newv = (uintptr_t)d | 1;
        e->fresh[e->nfresh++] = e->newv;
    }
    for (uint32_t i = 0; i < nold; i++)
        e->old[e->nold++] = (uintptr_t)bv->runs[j + i];
    if (is_dir(cur))
        e->old[e->nold++] = cur;
    return 0;
}

/* Splits r into two new runs; returns 0 or -ENOMEM. */
static int run_split(const run *r, run **parts, bool slots)
{
    uint32_t h = r->n / 2;
    parts[0] = run_alloc(h, slots);
    parts[1] = run_alloc(r->n - h, slots);
    if (!parts[0] || !parts[1]) {
        free(parts[0]);
        free(parts[1]);
        return -ENOMEM;
    }
    run_copy(parts[0], 0, r, 0, h, slots);
    run_copy(parts[1], 0, r, h, r->n - h, slots);
    return 0;
}

/* Builds in e the bucket cur plus k. Returns 0, -EEXIST or -ENOMEM. */
static int edit_insert(edit *e, uintptr_t cur, key k, bool slots)
{
    bview bv;
    bview_init(&bv, cur);
    if (!bv.nruns) {
        run *r = run_alloc(1, slots);
        if (!r)
            return -ENOMEM;
        run_put(r, 0, k, slots);
        e->newv = (uintptr_t)r;
        e->fresh[e->nfresh++] = e->newv;
        return 0;
    }
    uint32_t j = bview_find(&bv, k, slots);
    const run *r = bv.runs[j];
    uint32_t pos = run_lower(r, k, slots);
    if (pos < r->n && key_cmp(run_key(r, pos, slots), k) == 0)
        return -EEXIST;
    run *nr = run_alloc(r->n + 1, slots);
    if (!nr)
        return -ENOMEM;
    run_copy(nr, 0, r, 0, pos, slots);
    run_put(nr, pos, k, slots);
    run_copy(nr, pos + 1, r, pos, r->n - pos, slots);
    run *parts[2] = {nr, NULL};
    uint32_t nparts = 1;
    if (nr->n > RUN_MAX) {
        int rc = run_split(nr, parts, slots);
        free(nr);
        if (rc < 0)
            return rc;
        nparts = 2;
    }
    for (uint32_t i = 0; i < nparts; i++)
        e->fresh[e->nfresh++] = (uintptr_t)parts[i];
    return edit_replace(e, &bv, cur, j, 1, parts, nparts, 1, slots);
}

/* Builds in e the bucket cur minus k, merging the shrunk run with a small
 * neighbour. Returns 0, -ENOENT or -ENOMEM. */
static int edit_remove(edit *e, uintptr_t cur, key k, bool slots)
{
    bview bv;
    bview_init(&bv, cur);
    if (!bv.nruns)
        return -ENOENT;
    uint32_t j = bview_find(&bv, k, slots);
    const run *r = bv.runs[j];
    uint32_t pos = run_lower(r, k, slots);
    if (pos == r->n || key_cmp(run_key(r, pos, slots), k) != 0)
        return -ENOENT;
    run *parts[1];
    uint32_t nparts = 0, first = j, nold = 1, left = r->n - 1;
    if (left) {
        const run *prev = NULL, *next = NULL;
        if (j + 1 < bv.nruns && bv.runs[j + 1]->n + left <= RUN_MERGE)
            next = bv.runs[j + 1];
        else if (j > 0 && bv.runs[j - 1]->n + left <= RUN_MERGE)
            prev = bv.runs[j - 1];
        uint32_t at = prev ? prev->n : 0;
        run *nr = run_alloc(left + at + (next ? next->n : 0), slots);
        if (!nr)
            return -ENOMEM;
        if (prev)
            run_copy(nr, 0, prev, 0, prev->n, slots);
        run_copy_without(nr, at, r, pos, slots);
        if (next)
            run_copy(nr, at + left, next, 0, next->n, slots);
        first = prev ? j - 1 : j;
        nold = (prev || next) ? 2 : 1;
        parts[0] = nr;
        nparts = 1;
        e->fresh[e->nfresh++] = (uintptr_t)nr;
    }
    return edit_replace(e, &bv, cur, first, nold, parts, nparts, -1, slots);
}

/* ---- reclamation -------------------------------------------------------- */

/* Reader side: announces a query in the current epoch's parity; returns the
 * parity to pass to gate_leave(). Dekker-style with the writer's epoch flip
 * (all seq_cst): either the writer's counter check sees this reader, or this
 * reader sees the new epoch and announces itself again. */
static unsigned gate_enter(gate *g, unsigned stripe)
{
    for (;;) {
        uint64_t e = atomic_load(&g->epoch);
        unsigned p = (unsigned)(e & 1);
        atomic_fetch_add(&g->readers[p][stripe].n, 1);
        if (atomic_load(&g->epoch) == e)
            return p;
        atomic_fetch_sub(&g->readers[p][stripe].n, 1);
    }
}

static void gate_leave(gate *g, unsigned parity, unsigned stripe)
{
    atomic_fetch_sub_explicit(&g->readers[parity][stripe].n, 1, memory_order_release);
}

/* Whether no reader of the given parity is inside a query. */
static bool gate_quiet(gate *g, unsigned parity)
{
    for (unsigned s = 0; s < GATE_STRIPES; s++)
        if (atomic_load(&g->readers[parity][s].n))
            return false;
    return true;
}

static void retire_free_all(retire_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        obj_free(l->v[i]);
    l->n = 0;
    l->bytes = 0;
}

/* Makes room to retire extra more objects. Returns 0 or -ENOMEM. */
static int retire_reserve(retire_list *l, size_t extra)
{
    if (l->n + extra <= l->cap)
        return 0;
    size_t cap = l->cap ? l->cap * 2 : 256;
    while (cap < l->n + extra)
        cap *= 2;
    uintptr_t *v = realloc(l->v, cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    l->v = v;
    l->cap = cap;
    return 0;
}

/* Starts a grace period: what was retired so far becomes pending. */
static void epoch_flip(nd_index *idx)
{
    uint64_t e = atomic_fetch_add(&idx->gate->epoch, 1);
    retire_list t = idx->pending;
    idx->pending = idx->retired;
    idx->retired = t;
    idx->pending_parity = (unsigned)(e & 1);
}

/* Frees pending objects if their readers are gone and starts the next grace
 * period; with wait, blocks until everything retired is freed. */
static void reclaim(nd_index *idx, bool wait)
{
    for (int round = 0; round < 2; round++) {
        if (idx->pending.n) {
            while (!gate_quiet(idx->gate, idx->pending_parity)) {
                if (!wait)
                    return;
                sched_yield();
            }
            retire_free_all(&idx->pending);
        }
        if (idx->retired.n < (wait ? 1 : RETIRE_BATCH))
            return;
        epoch_flip(idx);
    }
}

/* Keeps the huge-bucket hints of table t up to date after its bucket key
 * changed to size entries: listed from HUGE_MIN, delisted below half. */
static void huge_note(nd_index *idx, unsigned t, uint32_t key, uint32_t size)
{
    unsigned used = atomic_load_explicit(&idx->nhuge[t], memory_order_relaxed);
    if (size < HUGE_MIN && !used)
        return;
    int at = -1, unused = -1;
    for (int i = 0; i < HUGE_SLOTS; i++) {
        uint32_t h = atomic_load_explicit(&idx->huge[t][i], memory_order_relaxed);
        if (h == key + 1)
            at = i;
        else if (!h && unused < 0)
            unused = i;
    }
    if (size >= HUGE_MIN && at < 0 && unused >= 0) {
        atomic_store_explicit(&idx->huge[t][unused], key + 1, memory_order_relaxed);
        atomic_store_explicit(&idx->nhuge[t], used + 1, memory_order_relaxed);
    } else if (size < HUGE_MIN / 2 && at >= 0) {
        atomic_store_explicit(&idx->huge[t][at], 0, memory_order_relaxed);
        atomic_store_explicit(&idx->nhuge[t], used - 1, memory_order_relaxed);
    }
}

/* Publishes the edits, in order or (backwards) in reverse, and retires what
 * they replaced (room was reserved by the caller). */
static void edits_commit(nd_index *idx, edit *ed, unsigned ned, bool backwards)
{
    retire_list *l = &idx->retired;
    for (unsigned n = 0; n < ned; n++) {
        unsigned i = backwards ? ned - 1 - n : n;
        atomic_store_explicit(ed[i].where, ed[i].newv, memory_order_release);
        size_t at = (size_t)(ed[i].where - idx->cells);
        huge_note(idx, (unsigned)(at / NKEYS), (uint32_t)(at % NKEYS), bucket_size(ed[i].newv));
        for (unsigned o = 0; o < ed[i].nold; o++) {
            l->bytes += obj_bytes(ed[i].old[o]);
            l->v[l->n++] = ed[i].old[o];
        }
    }
    reclaim(idx, false);
    if (idx->retired.bytes + idx->pending.bytes > RETIRE_MAX_BYTES)
        reclaim(idx, true);
}

/* ---- public: lifetime and writer ---------------------------------------- */

int nd_index_create(nd_index **out)
{
    nd_index *idx = calloc(1, sizeof(*idx));
    if (!idx)
        return -ENOMEM;
    idx->cells = calloc((size_t)NTABLES * NKEYS, sizeof(cell));
    idx->gate = aligned_alloc(alignof(gate), sizeof(gate));
    if (!idx->cells || !idx->gate) {
        free(idx->cells);
        free(idx->gate);
        free(idx);
        return -ENOMEM;
    }
    atomic_init(&idx->gate->epoch, 0);
    for (unsigned p = 0; p < 2; p++)
        for (unsigned s = 0; s < GATE_STRIPES; s++)
            atomic_init(&idx->gate->readers[p][s].n, 0);
    atomic_init(&idx->count, 0);
    atomic_init(&idx->distinct, 0);
    for (unsigned t = 0; t < NTABLES; t++) {
        atomic_init(&idx->nhuge[t], 0);
        for (unsigned i = 0; i < HUGE_SLOTS; i++)
            atomic_init(&idx->huge[t][i], 0);
    }
#ifdef POPCNT_DISPATCH
    idx->popcnt = __builtin_cpu_supports("popcnt");
#endif
    *out = idx;
    return 0;
}

void nd_index_destroy(nd_index *idx)
{
    if (!idx)
        return;
    for (size_t i = 0; i < (size_t)NTABLES * NKEYS; i++)
        bucket_free(atomic_load_explicit(&idx->cells[i], memory_order_relaxed));
    retire_free_all(&idx->retired);
    retire_free_all(&idx->pending);
    free(idx->retired.v);
    free(idx->pending.v);
    free(idx->cells);
    free(idx->gate);
    free(idx);
}

static inline cell *cell_of(const nd_index *idx, unsigned t, uint64_t h)
{
    return &idx->cells[(size_t)t * NKEYS + block_of(h, t)];
}

/* Writer's view of a cell: only the writer stores, so relaxed is enough. */
static inline uintptr_t cell_get(const nd_index *idx, unsigned t, uint64_t h)
{
    return atomic_load_explicit(cell_of(idx, t, h), memory_order_relaxed);
}

/* The run of bucket v where k is or would go, as a cell value (0 if none). */
static uintptr_t target_run(uintptr_t v, key k, bool slots)
{
    if (!is_dir(v))
        return v;
    bview bv;
    bview_init(&bv, v);
    return (uintptr_t)bv.runs[bview_find(&bv, k, slots)];
}

/* Builds the edit of table t adding or removing h (with slot in table 0). */
static int edit_table(const nd_index *idx, edit *e, unsigned t, uint64_t h, uint32_t slot, bool add,
                      uintptr_t cur)
{
    key k = {rem_of(h, t), t == 0 ? slot : 0};
    memset(e, 0, sizeof(*e));
    e->where = cell_of(idx, t, h);
    return add ? edit_insert(e, cur, k, t == 0) : edit_remove(e, cur, k, t == 0);
}

/* Builds the edits adding (add) or removing (h, slot) and commits them:
 * table 0 first in, last out. Returns 0, -EEXIST, -ENOENT or -ENOMEM (unchanged). */
static int index_update(nd_index *idx, uint64_t h, uint32_t slot, bool add)
{
    int rc = retire_reserve(&idx->retired, NTABLES * EDIT_OBJS);
    if (rc < 0)
        return rc;
    /* The four buckets are cold: start all their cache misses at once. */
    uintptr_t cur[NTABLES], target[NTABLES];
    for (unsigned t = 0; t < NTABLES; t++)
        __builtin_prefetch(cell_of(idx, t, h));
    for (unsigned t = 0; t < NTABLES; t++)
        prefetch_head(cur[t] = cell_get(idx, t, h));
    for (unsigned t = 0; t < NTABLES; t++) {
        key k = {rem_of(h, t), t == 0 ? slot : 0};
        prefetch_head(target[t] = target_run(cur[t], k, t == 0));
    }
    for (unsigned t = 0; t < NTABLES; t++)
        prefetch_rest(target[t], t == 0);
    /* Tables 1..3 change only for the first or last copy of h. */
    unsigned copies = bucket_count_rem(cur[0], rem_of(h, 0), 2);
    bool all = add ? copies == 0 : copies == 1;
    edit ed[NTABLES]; /* by table; table 0 first, to fail early */
    unsigned ned = 0;
    for (unsigned t = 0; t < (all ? NTABLES : 1) && rc == 0; t++, ned++)
        rc = edit_table(idx, &ed[t], t, h, slot, add, cur[t]);
    if (rc < 0) {
        for (unsigned t = 0; t < ned; t++)
            edit_drop(&ed[t]);
        return rc;
    }
    edits_commit(idx, ed, ned, !add);
    size_t one = add ? 1 : (size_t)-1; /* wraps: adds or subtracts one */
    atomic_fetch_add_explicit(&idx->count, one, memory_order_relaxed);
    if (all)
        atomic_fetch_add_explicit(&idx->distinct, one, memory_order_relaxed);
    return 0;
}

int nd_index_insert(nd_index *idx, uint64_t simhash, uint32_t slot)
{
    return index_update(idx, simhash, slot, true);
}

int nd_index_remove(nd_index *idx, uint64_t simhash, uint32_t slot)
{
    return index_update(idx, simhash, slot, false);
}

size_t nd_index_count(const nd_index *idx)
{
    return atomic_load_explicit(&idx->count, memory_order_relaxed);
}

/* ---- bulk insertion (writer) -------------------------------------------- */

#define BULK_RUN                                                                                   \
    (RUN_MAX * 3 / 4) /* entries per run built by a bulk insert:
                                    * room for later inserts before a split */

/* An entry to add to one table: remainder and slot (0 in tables 1..3). */
typedef struct bkey {
    uint64_t rem;
    uint32_t slot;
} bkey;

static inline bool bkey_less(bkey a, bkey b)
{
    return a.rem < b.rem || (a.rem == b.rem && a.slot < b.slot);
}

static inline bool bkey_eq(bkey a, bkey b)
{
    return a.rem == b.rem && a.slot == b.slot;
}

static void bkey_isort(bkey *a, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        bkey x = a[i];
        size_t j = i;
        for (; j > 0 && bkey_less(x, a[j - 1]); j--)
            a[j] = a[j - 1];
        a[j] = x;
    }
}

static void bkey_sift(bkey *a, size_t n, size_t i)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && bkey_less(a[c], a[c + 1]))
            c++;
        if (!bkey_less(a[i], a[c]))
            return;
        bkey t = a[i];
        a[i] = a[c];
        a[c] = t;
        i = c;
    }
}

/* Introsort: quicksort (median of three), heapsort past the depth limit,
 * insertion sort for short ranges. Buckets of uniform fingerprints hold a
 * few hundred entries; a skewed one may hold millions. */
static void bkey_sort(bkey *a, size_t n, unsigned depth)
{
    while (n > 16) {
        if (depth-- == 0) {
            for (size_t i = n / 2; i-- > 0;)
                bkey_sift(a, n, i);
            for (size_t i = n - 1; i > 0; i--) {
                bkey t = a[0];
                a[0] = a[i];
                a[i] = t;
                bkey_sift(a, i, 0);
            }
            return;
        }
        bkey x = a[0], y = a[n / 2], z = a[n - 1];
        bkey p = bkey_less(x, y) ? (bkey_less(y, z)   ? y
                                    : bkey_less(x, z) ? z
                                                      : x)
                                 : (bkey_less(x, z)   ? x
                                    : bkey_less(y, z) ? z
                                                      : y);
        size_t i = 0, j = n - 1;
        for (;;) {
            while (bkey_less(a[i], p))
                i++;
            while (bkey_less(p, a[j]))
                j--;
            if (i >= j)
                break;
            bkey t = a[i];
            a[i++] = a[j];
            a[j--] = t;
        }
        /* [0, j] <= p <= [j + 1, n): recurse on the smaller part. */
        if (j + 1 < n - j - 1) {
            bkey_sort(a, j + 1, depth);
            a += j + 1;
            n -= j + 1;
        } else {
            bkey_sort(a + j + 1, n - j - 1, depth);
            n = j + 1;
        }
    }
    bkey_isort(a, n);
}

/* Scratch of one bulk insertion, per thread: thread i builds tables i,
 * i + nthreads, ... into the shared newv. */
typedef struct bulk {
    const nd_index *idx;
    const uint64_t *h;
    const uint32_t *slots;
    size_t n;
    unsigned first, step; /* its tables */
    int rc;
    bkey *keys;    /* the new entries of one table, by bucket */
    size_t *start; /* NKEYS + 1 bucket offsets into keys */
    bkey *merged;  /* one bucket: old and new entries, sorted */
    size_t merged_cap;
    bkey *sorted; /* one bucket's new entries, sorted */
    size_t sorted_cap;
    bkey *part; /* the scatter's copy of one high byte's stretch */
    size_t part_cap;
    uintptr_t *newv; /* NTABLES * NKEYS new bucket values (0: unchanged) */
    size_t added[NTABLES];
    size_t old_objs; /* objects the new values replace */
} bulk;

/* Returns a new bucket value holding the m sorted entries k[0..m) in runs
 * of about BULK_RUN entries (a directory if more than one), or 0. */
static uintptr_t bucket_build(const bkey *k, size_t m, bool slots)
{
    size_t nruns = m <= RUN_MAX ? 1 : (m + BULK_RUN - 1) / BULK_RUN;
    if (nruns > UINT32_MAX)
        return 0;
    dir *d = NULL;
    if (nruns > 1) {
        d = malloc(dir_bytes((uint32_t)nruns));
        if (!d)
            return 0;
        d->nruns = (uint32_t)nruns;
        d->n = (uint32_t)m;
    }
    size_t at = 0;
    for (size_t j = 0; j < nruns; j++) {
        uint32_t cnt = (uint32_t)((m - at) / (nruns - j)); /* even split */
        run *r = run_alloc(cnt, slots);
        if (!r) {
            if (d) {
                for (size_t i = 0; i < j; i++)
                    free(d->runs[i]);
                free(d);
            }
            return 0;
        }
        for (uint32_t i = 0; i < cnt; i++)
            run_put(r, i, (key){k[at + i].rem, k[at + i].slot}, slots);
        at += cnt;
        if (!d)
            return (uintptr_t)r;
        d->runs[j] = r;
        dir_last_rem(d)[j] = k[at - 1].rem;
        dir_last_slot(d)[j] = slots ? k[at - 1].slot : 0;
    }
    return (uintptr_t)d | 1;
}

/* Grows *buf to hold need entries. Returns 0 or -ENOMEM. */
static int bkeys_reserve(bkey **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    bkey *m = realloc(*buf, c * sizeof(*m));
    if (!m)
        return -ENOMEM;
    *buf = m;
    *cap = c;
    return 0;
}

static void bkey_sort_n(bkey *a, size_t n)
{
    unsigned depth = 2;
    for (size_t x = n; x > 1; x >>= 1)
        depth += 2;
    bkey_sort(a, n, depth);
}

/* Sorts k[0..n) into b->sorted: distributed by the top 8 bits of the
 * remainder, then each part sorted on its own. Remainders are close to
 * uniform, so the parts are tiny and this costs two passes; skewed ones
 * still sort in n log n. Returns 0 or -ENOMEM. */
static int bucket_sort(bulk *b, const bkey *k, size_t n)
{
    if (bkeys_reserve(&b->sorted, &b->sorted_cap, n) < 0)
        return -ENOMEM;
    size_t at[257] = {0};
    for (size_t i = 0; i < n; i++)
        at[(k[i].rem >> 40) + 1]++;
    for (unsigned d = 0; d < 256; d++)
        at[d + 1] += at[d];
    for (size_t i = 0; i < n; i++)
        b->sorted[at[k[i].rem >> 40]++] = k[i];
    size_t from = 0;
    for (unsigned d = 0; d < 256; d++) { /* at[d]: the end of part d now */
        if (at[d] - from > 1)
            bkey_sort_n(b->sorted + from, at[d] - from);
        from = at[d];
    }
    return 0;
}

/* Sorts the new entries k[0..n) of bucket value cur and merges them with
 * its entries without repeats, into b->merged, or in place in b->sorted
 * when cur is empty (as every bucket is at start-up); *where gets which.
 * Returns the merged count, or (size_t)-1 on -ENOMEM. */
static size_t bucket_merge(bulk *b, uintptr_t cur, const bkey *knew, size_t n, bool slots,
                           const bkey **where)
{
    size_t old = bucket_size(cur);
    if (bucket_sort(b, knew, n) < 0)
        return (size_t)-1;
    if (old == 0) {
        bkey *k = b->sorted;
        size_t m = n ? 1 : 0;
        for (size_t x = 1; x < n; x++)
            if (!bkey_eq(k[m - 1], k[x]))
                k[m++] = k[x];
        *where = k;
        return m;
    }
    if (bkeys_reserve(&b->merged, &b->merged_cap, old + n) < 0)
        return (size_t)-1;
    *where = b->merged;
    const bkey *k = b->sorted;
    bview bv;
    bview_init(&bv, cur);
    uint32_t j = 0, i = 0;
    size_t out = 0, x = 0;
    bkey *m = b->merged;
    for (;;) {
        while (j < bv.nruns && i == bv.runs[j]->n) {
            j++;
            i = 0;
        }
        bool have_old = j < bv.nruns, have_new = x < n;
        if (!have_old && !have_new)
            break;
        bkey next = {0, 0};
        if (have_old) {
            key o = run_key(bv.runs[j], i, slots);
            next = (bkey){o.rem, o.slot};
        }
        if (have_new && (!have_old || bkey_less(k[x], next)))
            next = k[x++];
        else
            i++;
        if (out == 0 || !bkey_eq(m[out - 1], next))
            m[out++] = next;
    }
    return out;
}

/* Builds the new buckets of table t from the n pairs. Returns 0 or
 * -ENOMEM (what was built stays in b->newv: nd_index_insert_many() frees
 * it). */
static int bulk_table(const nd_index *idx, bulk *b, unsigned t, const uint64_t *h,
                      const uint32_t *slots, size_t n)
{
    size_t *start = b->start;
    memset(start, 0, (NKEYS + 1) * sizeof(*start));
    for (size_t i = 0; i < n; i++)
        start[block_of(h[i], t) + 1]++;
    for (size_t k = 0; k < NKEYS; k++)
        start[k + 1] += start[k];
    /* Scatter in two stable passes, so that each writes to few places at
     * once: by the block's high byte into its 256 buckets' stretch (as the
     * whole rotated simhash), then each stretch, copied to b->part, by the
     * low byte into the buckets (one pass to 65536 places missed the caches
     * at nearly every write: 3/4 of the bulk build's time at 10M). Same
     * order as one pass: within a bucket, the pairs' order. */
    size_t hi_at[256];
    for (unsigned x = 0; x < 256; x++)
        hi_at[x] = start[x << 8];
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rotr64(h[i], 16 * t); /* rem << 16 | block */
        b->keys[hi_at[(r >> 8) & 0xFF]++] = (bkey){r, t == 0 ? slots[i] : 0};
    }
    for (unsigned x = 0; x < 256; x++) { /* start[k] ends at bucket k + 1's */
        size_t lo = start[x << 8], cnt = start[(x + 1) << 8] - lo;
        if (cnt == 0)
            continue;
        if (bkeys_reserve(&b->part, &b->part_cap, cnt) < 0)
            return -ENOMEM;
        memcpy(b->part, b->keys + lo, cnt * sizeof(*b->part));
        for (size_t i = 0; i < cnt; i++) {
            bkey e = b->part[i];
            b->keys[start[(x << 8) | (e.rem & 0xFF)]++] = (bkey){e.rem >> 16, e.slot};
        }
    }
    for (size_t k = NKEYS; k > 0; k--)
        start[k] = start[k - 1];
    start[0] = 0;
    bool with_slots = t == 0;
    for (uint32_t k = 0; k < NKEYS; k++) {
        size_t cnt = start[k + 1] - start[k];
        if (!cnt)
            continue;
        uintptr_t cur = atomic_load_explicit(&idx->cells[(size_t)t * NKEYS + k],
                                             memory_order_relaxed);
        const bkey *merged;
        size_t m = bucket_merge(b, cur, b->keys + start[k], cnt, with_slots, &merged);
        if (m == (size_t)-1)
            return -ENOMEM;
        if (m == bucket_size(cur))
            continue; /* nothing new */
        uintptr_t v = bucket_build(merged, m, with_slots);
        if (!v)
            return -ENOMEM;
        b->newv[(size_t)t * NKEYS + k] = v;
        b->added[t] += m - bucket_size(cur);
        if (cur) {
            bview bv;
            bview_init(&bv, cur);
            b->old_objs += bv.nruns + (is_dir(cur) ? 1 : 0);
        }
    }
    return 0;
}

/* Publishes b's new buckets, table 0 first, and retires what they
 * replace (room reserved). */
static void bulk_commit(nd_index *idx, bulk *b)
{
    retire_list *l = &idx->retired;
    for (unsigned t = 0; t < NTABLES; t++) {
        for (uint32_t k = 0; k < NKEYS; k++) {
            size_t at = (size_t)t * NKEYS + k;
            uintptr_t v = b->newv[at];
            if (!v)
                continue;
            uintptr_t cur = atomic_load_explicit(&idx->cells[at], memory_order_relaxed);
            atomic_store_explicit(&idx->cells[at], v, memory_order_release);
            huge_note(idx, t, k, bucket_size(v));
            bview bv;
            bview_init(&bv, cur);
            for (uint32_t j = 0; j < bv.nruns; j++) {
                l->bytes += obj_bytes((uintptr_t)bv.runs[j]);
                l->v[l->n++] = (uintptr_t)bv.runs[j];
            }
            if (is_dir(cur)) {
                l->bytes += obj_bytes(cur);
                l->v[l->n++] = cur;
            }
        }
        if (t == 0)
            atomic_fetch_add_explicit(&idx->count, b->added[0], memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&idx->distinct, b->added[1], memory_order_relaxed);
    reclaim(idx, false);
    if (idx->retired.bytes + idx->pending.bytes > RETIRE_MAX_BYTES)
        reclaim(idx, true);
}

/* Builds b's tables; a thread's body. */
static void *bulk_main(void *arg)
{
    bulk *b = arg;
    size_t kbytes = b->n * sizeof(*b->keys);
    void *k = mmap(NULL, kbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    b->keys = k == MAP_FAILED ? NULL : k;
    /* Mapped in one call (a fault per page costs on a virtual machine), on
     * small pages: at 10M documents asking for huge ones made the build
     * ~25 % slower (1.3 s vs 0.85-1.0 s paired), the kernel zeroing a fresh
     * huge page slower than small pages it had at hand. A hint. */
    if (b->keys) {
#ifdef MADV_POPULATE_WRITE
        madvise(k, kbytes, MADV_POPULATE_WRITE);
#endif
    }
    b->start = malloc((NKEYS + 1) * sizeof(*b->start));
    b->rc = b->keys && b->start ? 0 : -ENOMEM;
    for (unsigned t = b->first; t < NTABLES && b->rc == 0; t += b->step)
        b->rc = bulk_table(b->idx, b, t, b->h, b->slots, b->n);
    if (b->keys)
        munmap(b->keys, kbytes);
    free(b->start);
    free(b->merged);
    free(b->sorted);
    free(b->part);
    return NULL;
}

int nd_index_insert_many(nd_index *idx, const uint64_t *simhash, const uint32_t *slots, size_t n,
                         unsigned threads)
{
    if (n == 0)
        return 0;
    unsigned nt = threads < 1 ? 1 : threads > NTABLES ? NTABLES : threads;
    uintptr_t *newv = calloc((size_t)NTABLES * NKEYS, sizeof(*newv));
    if (!newv)
        return -ENOMEM;
    bulk b[NTABLES];
    pthread_t tid[NTABLES];
    bool started[NTABLES] = {false};
    for (unsigned i = 0; i < nt; i++) {
        b[i] = (bulk){
            .idx = idx, .h = simhash, .slots = slots, .n = n, .first = i, .step = nt, .newv = newv};
        started[i] = i > 0 && pthread_create(&tid[i], NULL, bulk_main, &b[i]) == 0;
    }
    for (unsigned i = 0; i < nt; i++)
        if (!started[i])
            bulk_main(&b[i]); /* this thread's share, or a failed start */
    int rc = 0;
    bulk all = {.newv = newv};
    for (unsigned i = 0; i < nt; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        rc = rc ? rc : b[i].rc;
        all.old_objs += b[i].old_objs;
        for (unsigned t = 0; t < NTABLES; t++)
            all.added[t] += b[i].added[t];
    }
    if (rc == 0)
        rc = retire_reserve(&idx->retired, all.old_objs);
    if (rc == 0)
        bulk_commit(idx, &all);
    else
        for (size_t i = 0; i < (size_t)NTABLES * NKEYS; i++)
            if (newv[i])
                bucket_free(newv[i]);
    free(newv);
    return rc;
}

/* ---- queries ------------------------------------------------------------ */

/* Per-query state, on the caller's stack. */
typedef struct qctx {
    const cell *cells;
    uint64_t q;
    unsigned k;
    int radius[NTABLES];    /* probe radius per table; < 0: not probed */
    uint64_t qrem[NTABLES]; /* the query's remainder per table */
    nd_index_hit *hits;
    size_t cap, n, found;
    bool heap; /* hits[0..n) is a max-heap (output full) */
} qctx;

static inline bool hit_less(nd_index_hit a, nd_index_hit b)
{
    return a.distance != b.distance ? a.distance < b.distance : a.slot < b.slot;
}

static void sift_down(nd_index_hit *h, size_t n, size_t i)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && hit_less(h[c], h[c + 1]))
            c++;
        if (!hit_less(h[i], h[c]))
            return;
        nd_index_hit t = h[i];
        h[i] = h[c];
        h[c] = t;
        i = c;
    }
}

static void heap_build(nd_index_hit *h, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(h, n, i);
}

/* Sorts ascending; h is already a max-heap if is_heap. No allocation. */
static void hits_sort(nd_index_hit *h, size_t n, bool is_heap)
{
    if (!is_heap && n <= 16) {
        for (size_t i = 1; i < n; i++) {
            nd_index_hit x = h[i];
            size_t j = i;
            for (; j > 0 && hit_less(x, h[j - 1]); j--)
                h[j] = h[j - 1];
            h[j] = x;
        }
        return;
    }
    if (!is_heap)
        heap_build(h, n);
    for (size_t end = n; end > 1; end--) {
        nd_index_hit t = h[0];
        h[0] = h[end - 1];
        h[end - 1] = t;
        sift_down(h, end - 1, 0);
    }
}

/* Counts a hit and keeps it if it is among the cap nearest. */
static void emit(qctx *c, uint32_t slot, unsigned dist)
{
    nd_index_hit h = {slot, dist};
    c->found++;
    if (c->n < c->cap) {
        c->hits[c->n++] = h;
        return;
    }
    if (!c->cap)
        return;
    if (!c->heap) {
        heap_build(c->hits, c->n);
        c->heap = true;
    }
    if (hit_less(h, c->hits[0])) {
        c->hits[0] = h;
        sift_down(c->hits, c->n, 0);
    }
}

/* Emits every slot stored in table 0 under simhash x. */
static void emit_slots(qctx *c, uint64_t x, unsigned dist)
{
    uintptr_t v = atomic_load_explicit(&c->cells[block_of(x, 0)], memory_order_acquire);
    bview bv;
    bview_init(&bv, v);
    if (!bv.nruns)
        return;
    key k = {rem_of(x, 0), 0};
    uint32_t j = bview_find(&bv, k, true);
    uint32_t i = run_lower(bv.runs[j], k, true);
    for (; j < bv.nruns; j++, i = 0) {
        const run *r = bv.runs[j];
        for (; i < r->n; i++) {
            if (load48(r->b + 6 * (size_t)i) != k.rem)
                return;
            emit(c, run_slots(r)[i], dist);
        }
    }
}

/* Entry i of run r in bucket (t, key) is within k: report it unless an
 * earlier table's probe also covers it. */
static void candidate(qctx *c, unsigned t, uint32_t key, const run *r, uint32_t i, unsigned dist)
{
    uint64_t x = simhash_of(load48(r->b + 6 * (size_t)i), key, t);
    uint64_t xq = x ^ c->q;
    for (unsigned b = 0; b < t; b++)
        if ((int)popcount64(xq >> (16 * b) & 0xFFFF) <= c->radius[b])
            return;
    if (t == 0)
        emit(c, run_slots(r)[i], dist);
    else
        emit_slots(c, x, dist);
}

/* The hot loop: entries of r within k - dkey of the query's remainder. */
HOT void scan_run(qctx *c, unsigned t, uint32_t key, const run *r, unsigned dkey)
{
    const unsigned char *p = r->b;
    uint64_t qr = c->qrem[t];
    unsigned bound = c->k - dkey;
    for (uint32_t i = 0, n = r->n; i < n; i++) {
        uint64_t x;
        memcpy(&x, p + 6 * (size_t)i, sizeof(x));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        x = __builtin_bswap64(x);
#endif
        unsigned d = popcount64((x ^ qr) & MASK48);
        if (d <= bound)
            candidate(c, t, key, r, i, dkey + d);
    }
}

HOT void scan_bucket(qctx *c, unsigned t, uint32_t key, uintptr_t v, unsigned dkey)
{
    if (!is_dir(v)) {
        scan_run(c, t, key, (const run *)v, dkey);
        return;
    }
    const dir *d = (const dir *)(v & ~(uintptr_t)1);
    for (uint32_t j = 0; j < d->nruns; j++)
        scan_run(c, t, key, d->runs[j], dkey);
}

/* One bucket to scan: cell = t * NKEYS + key, at distance dkey from the
 * query's block t. */
typedef struct probe_req {
    uint32_t cell;
    uint32_t dkey;
} probe_req;

/* Lists every bucket to probe: the keys of table t within radius[t] of the
 * query's block t. Returns the count (<= MAX_PROBES). */
static unsigned probes_plan(const qctx *c, probe_req *p)
{
    unsigned n = 0;
    for (unsigned t = 0; t < NTABLES; t++) {
        uint32_t base = t * NKEYS, qk = block_of(c->q, t);
        int r = c->radius[t];
        if (r < 0)
            continue;
        p[n++] = (probe_req){base + qk, 0};
        for (unsigned i = 0; r >= 1 && i < 16; i++) {
            p[n++] = (probe_req){base + (qk ^ (1u << i)), 1};
            for (unsigned j = i + 1; r >= 2 && j < 16; j++)
                p[n++] = (probe_req){base + (qk ^ (1u << i) ^ (1u << j)), 2};
        }
    }
    return n;
}

/* Scans a batch of buckets. To overlap their cache misses it first
 * prefetches all their cells, then the first line of each run or directory,
 * then (sizes now known) the rest of each run and the first line of each
 * directory's runs, then the rest of those, and only then scans. */
HOT void probe_batch(qctx *c, const probe_req *p, unsigned n)
{
    uintptr_t v[PROBE_BATCH];
    for (unsigned i = 0; i < n; i++)
        __builtin_prefetch(&c->cells[p[i].cell]);
    for (unsigned i = 0; i < n; i++) {
        v[i] = atomic_load_explicit(&c->cells[p[i].cell], memory_order_acquire);
        prefetch_head(v[i]);
    }
    for (unsigned i = 0; i < n; i++) {
        prefetch_rest(v[i], false);
        prefetch_dir_runs(v[i], false);
    }
    for (unsigned i = 0; i < n; i++)
        prefetch_dir_runs(v[i], true);
    for (unsigned i = 0; i < n; i++)
        if (v[i])
            scan_bucket(c, p[i].cell / NKEYS, p[i].cell % NKEYS, v[i], p[i].dkey);
}

/* Work, in entries scanned, of probing table t at radius r (-1..2): the huge
 * buckets in reach, and mean-sized ones plus PROBE_COST for every key. */
static double plan_cost(const double *huge_size, const unsigned *huge_dist, double mean, int r)
{
    static const unsigned keys[] = {0, 1, 1 + 16, 1 + 16 + 120};
    double cost = keys[r + 1] * (mean + PROBE_COST);
    for (unsigned i = 0; i < HUGE_SLOTS; i++)
        if ((int)huge_dist[i] <= r)
            cost += huge_size[i];
    return cost;
}

/* Replaces c->radius by the cheapest radii in -1..2 covering k. */
static void plan_around_huge(qctx *c, const nd_index *idx)
{
    double size[NTABLES][HUGE_SLOTS], mean[NTABLES], cost[NTABLES][4];
    unsigned dist[NTABLES][HUGE_SLOTS];
    mean[0] = (double)atomic_load_explicit(&idx->count, memory_order_relaxed) / NKEYS;
    mean[1] = mean[2] = mean[3] =
        (double)atomic_load_explicit(&idx->distinct, memory_order_relaxed) / NKEYS;
    for (unsigned t = 0; t < NTABLES; t++) {
        for (unsigned i = 0; i < HUGE_SLOTS; i++) {
            uint32_t h = atomic_load_explicit(&idx->huge[t][i], memory_order_relaxed);
            dist[t][i] = h ? popcount64((h - 1) ^ block_of(c->q, t)) : 16;
            size[t][i] = h ? bucket_size(atomic_load_explicit(&c->cells[t * NKEYS + h - 1],
                                                              memory_order_acquire))
                           : 0;
        }
        for (int r = -1; r <= 2; r++)
            cost[t][r + 1] = plan_cost(size[t], dist[t], mean[t], r);
    }
    double best = 0;
    for (unsigned t = 0; t < NTABLES; t++)
        best += cost[t][c->radius[t] + 1];
    for (unsigned code = 0; code < 256; code++) {
        int r[NTABLES], cover = 0;
        double sum = 0;
        for (unsigned t = 0; t < NTABLES; t++) {
            r[t] = (int)((code >> (2 * t)) & 3) - 1;
            cover += r[t] + 1;
            sum += cost[t][r[t] + 1];
        }
        if (cover == (int)c->k + 1 && sum < best) {
            best = sum;
            memcpy(c->radius, r, sizeof(r));
        }
    }
}

/* Chooses each table's probe radius. Any radii with sum(r_t + 1) = k + 1
 * are exact (if every d_t > r_t then |x ^ q| >= k + 1). The standard ones
 * (index.h) are kept unless a huge bucket (see huge_note()) lies within them;
 * then the radii in -1..2 of least expected work are taken: for k = 3, say,
 * radii 1, 0, 0 in the three other tables instead of scanning that bucket. */
static void plan_radii(qctx *c, const nd_index *idx)
{
    unsigned s = c->k / 4, a = c->k % 4;
    bool huge = false;
    for (unsigned t = 0; t < NTABLES; t++) {
        c->radius[t] = t <= a ? (int)s : (int)s - 1;
        if (!atomic_load_explicit(&idx->nhuge[t], memory_order_relaxed))
            continue;
        for (unsigned i = 0; i < HUGE_SLOTS; i++) {
            uint32_t h = atomic_load_explicit(&idx->huge[t][i], memory_order_relaxed);
            huge |= h && (int)popcount64((h - 1) ^ block_of(c->q, t)) <= c->radius[t];
        }
    }
    if (huge)
        plan_around_huge(c, idx);
}

HOT void probe_all_body(qctx *c)
{
    probe_req p[MAX_PROBES];
    unsigned n = probes_plan(c, p);
    for (unsigned i = 0; i < n; i += PROBE_BATCH)
        probe_batch(c, p + i, n - i < PROBE_BATCH ? n - i : PROBE_BATCH);
}

static void probe_all(qctx *c)
{
    probe_all_body(c);
}

#ifdef POPCNT_DISPATCH
__attribute__((target("popcnt"))) static void probe_all_popcnt(qctx *c)
{
    probe_all_body(c);
}
#endif

int nd_index_query(const nd_index *idx, uint64_t simhash, unsigned k, nd_index_hit *hits,
                   size_t cap, size_t *found)
{
    *found = 0;
    if (k > ND_INDEX_MAX_K)
        return -EINVAL;
    qctx c = {.cells = idx->cells, .q = simhash, .k = k, .hits = hits, .cap = cap};
    for (unsigned t = 0; t < NTABLES; t++)
        c.qrem[t] = rem_of(simhash, t);
    /* Threads have distinct stacks: spread them over the counters. */
    uint64_t sh = ((uint64_t)(uintptr_t)&c >> 12) * UINT64_C(0x9E3779B97F4A7C15);
    unsigned stripe = (unsigned)((sh >> 32) % GATE_STRIPES);
    unsigned parity = gate_enter(idx->gate, stripe);
    plan_radii(&c, idx);
#ifdef POPCNT_DISPATCH
    if (idx->popcnt)
        probe_all_popcnt(&c);
    else
#endif
        probe_all(&c);
    gate_leave(idx->gate, parity, stripe);
    hits_sort(hits, c.n, c.heap);
    *found = c.found;
    return c.found > c.n ? -E2BIG : 0;
}
