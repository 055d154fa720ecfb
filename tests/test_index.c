/* test_index.c - lib/index against a brute-force model.
 *
 * Every test keeps the stored (simhash, slot) pairs in a plain array and
 * compares each query's full output (slots, distances, order, count,
 * truncation) with a linear scan of that array. */
#include "index.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "unit.h"

/* Checks here are REQUIREs: a test stops at its first wrong answer (one
 * model mismatch would cascade into thousands). */

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static unsigned rng_below(uint64_t *s, unsigned n)
{
    return (unsigned)(rng_next(s) % n);
}

/* Flips exactly n distinct random bits of h. */
static uint64_t flip_bits(uint64_t *s, uint64_t h, unsigned n)
{
    uint64_t mask = 0;
    while ((unsigned)__builtin_popcountll(mask) < n)
        mask |= UINT64_C(1) << rng_below(s, 64);
    return h ^ mask;
}

/* Flips exactly n distinct random bits inside 16-bit block b of h. */
static uint64_t flip_in_block(uint64_t *s, uint64_t h, unsigned b, unsigned n)
{
    uint64_t mask = 0;
    while ((unsigned)__builtin_popcountll(mask) < n)
        mask |= UINT64_C(1) << (16 * b + rng_below(s, 16));
    return h ^ mask;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The model: what the index should hold. */
typedef struct model {
    uint64_t *fp;
    uint32_t *slot;
    size_t n, cap;
} model;

static void model_add(model *m, uint64_t fp, uint32_t slot)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 1024;
        m->fp = realloc(m->fp, m->cap * sizeof(*m->fp));
        m->slot = realloc(m->slot, m->cap * sizeof(*m->slot));
        if (!m->fp || !m->slot)
            abort();
    }
    m->fp[m->n] = fp;
    m->slot[m->n++] = slot;
}

static void model_del(model *m, size_t i)
{
    m->n--;
    m->fp[i] = m->fp[m->n];
    m->slot[i] = m->slot[m->n];
}

static void model_free(model *m)
{
    free(m->fp);
    free(m->slot);
}

static int hit_cmp(const void *a, const void *b)
{
    const nd_index_hit *x = a, *y = b;
    if (x->distance != y->distance)
        return x->distance < y->distance ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* Brute force: all model entries within k of q, sorted; returns the count. */
static size_t brute(const model *m, uint64_t q, unsigned k, nd_index_hit *out)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++) {
        unsigned d = (unsigned)__builtin_popcountll(m->fp[i] ^ q);
        if (d <= k)
            out[n++] = (nd_index_hit){m->slot[i], d};
    }
    qsort(out, n, sizeof(*out), hit_cmp);
    return n;
}

static nd_index_hit *want_buf, *got_buf;
static size_t buf_cap;

static void bufs_reserve(size_t n)
{
    if (n <= buf_cap)
        return;
    buf_cap = n;
    want_buf = realloc(want_buf, n * sizeof(*want_buf));
    got_buf = realloc(got_buf, n * sizeof(*got_buf));
    if (!want_buf || !got_buf)
        abort();
}

static size_t checked_queries, checked_hits; /* for the summary line */

/* Queries idx and the model with cap = cap_limit (or everything) and checks
 * the outputs are identical: count, return code, hits and their order. */
static void check_query(const nd_index *idx, const model *m, uint64_t q, unsigned k,
                        size_t cap_limit)
{
    bufs_reserve(m->n + 1);
    size_t want = brute(m, q, k, want_buf);
    size_t cap = cap_limit < m->n + 1 ? cap_limit : m->n + 1;
    size_t found = 12345;
    int rc = nd_index_query(idx, q, k, got_buf, cap, &found);
    checked_queries++;
    checked_hits += want;
    REQUIRE(found == want, "q=%016llx k=%u found %zu want %zu", (unsigned long long)q, k, found,
            want);
    REQUIRE(rc == (want > cap ? -E2BIG : 0), "q=%016llx k=%u rc %d", (unsigned long long)q, k, rc);
    size_t n = want < cap ? want : cap;
    for (size_t i = 0; i < n; i++)
        REQUIRE(got_buf[i].slot == want_buf[i].slot && got_buf[i].distance == want_buf[i].distance,
                "q=%016llx k=%u hit %zu: got (%u,%u) want (%u,%u)", (unsigned long long)q, k, i,
                got_buf[i].slot, got_buf[i].distance, want_buf[i].slot, want_buf[i].distance);
}

/* A query point: a stored fingerprint with 0..10 bits flipped, or random. */
static uint64_t pick_query(uint64_t *s, const model *m)
{
    if (!m->n || rng_below(s, 4) == 0)
        return rng_next(s);
    return flip_bits(s, m->fp[rng_below(s, (unsigned)m->n)], rng_below(s, 11));
}

static void check_many(const nd_index *idx, const model *m, uint64_t *s, unsigned nq)
{
    for (unsigned i = 0; i < nq && !unit_test_failed(); i++) {
        uint64_t q = pick_query(s, m);
        for (unsigned k = 0; k <= ND_INDEX_MAX_K && !unit_test_failed(); k++)
            check_query(idx, m, q, k, SIZE_MAX);
    }
}

static nd_index *new_index(void)
{
    nd_index *idx = NULL;
    if (nd_index_create(&idx) < 0)
        abort();
    return idx;
}

static void insert_both(nd_index *idx, model *m, uint64_t fp, uint32_t slot)
{
    int rc = nd_index_insert(idx, fp, slot);
    if (rc < 0) {
        fprintf(stderr, "insert: %d\n", rc);
        abort();
    }
    model_add(m, fp, slot);
}

/* ---- tests -------------------------------------------------------------- */

static void test_api_errors(void)
{
    nd_index *idx = new_index();
    nd_index_hit hits[4];
    size_t found = 99;
    REQUIRE(nd_index_query(idx, 0, 0, hits, 4, &found) == 0 && found == 0, "empty");
    REQUIRE(nd_index_query(idx, 0, ND_INDEX_MAX_K + 1, hits, 4, &found) == -EINVAL, "k > max");
    REQUIRE(found == 0, "found on EINVAL");
    REQUIRE(nd_index_remove(idx, 1, 1) == -ENOENT, "remove from empty");
    REQUIRE(nd_index_insert(idx, 42, 7) == 0, "insert");
    REQUIRE(nd_index_insert(idx, 42, 7) == -EEXIST, "same pair twice");
    REQUIRE(nd_index_insert(idx, 42, 8) == 0, "same fp, other slot");
    REQUIRE(nd_index_count(idx) == 2, "count");
    REQUIRE(nd_index_remove(idx, 42, 9) == -ENOENT, "wrong slot");
    REQUIRE(nd_index_remove(idx, 43, 7) == -ENOENT, "wrong fp");
    REQUIRE(nd_index_query(idx, 42, 0, NULL, 0, &found) == -E2BIG && found == 2, "cap 0 counts");
    REQUIRE(nd_index_remove(idx, 42, 7) == 0 && nd_index_remove(idx, 42, 8) == 0, "remove both");
    REQUIRE(nd_index_count(idx) == 0, "count after removes");
    REQUIRE(nd_index_query(idx, 42, 8, hits, 4, &found) == 0 && found == 0, "empty again");
    nd_index_destroy(idx);
    nd_index_destroy(NULL);
}

/* Uniform random fingerprints, every k, queries near stored points. */
static void test_random(void)
{
    uint64_t s = 1;
    nd_index *idx = new_index();
    model m = {0};
    for (uint32_t i = 0; i < 30000; i++)
        insert_both(idx, &m, rng_next(&s), i * 7 + 3);
    check_many(idx, &m, &s, 400);
    nd_index_destroy(idx);
    model_free(&m);
}

/* Clusters of near-identical fingerprints and exact duplicates: many hits
 * per query, many collisions in every table. */
static void test_clustered(void)
{
    uint64_t s = 2;
    nd_index *idx = new_index();
    model m = {0};
    uint64_t centers[40];
    for (int c = 0; c < 40; c++)
        centers[c] = rng_next(&s);
    for (uint32_t i = 0; i < 20000; i++) {
        uint64_t c = centers[rng_below(&s, 40)];
        uint64_t fp = rng_below(&s, 5) == 0 ? c : flip_bits(&s, c, rng_below(&s, 9));
        insert_both(idx, &m, fp, i);
    }
    check_many(idx, &m, &s, 300);
    for (int c = 0; c < 40 && !unit_test_failed(); c++)
        for (unsigned k = 0; k <= ND_INDEX_MAX_K; k++)
            check_query(idx, &m, centers[c], k, SIZE_MAX);
    nd_index_destroy(idx);
    model_free(&m);
}

/* Every split of the flips over the four blocks, at k = d - 1, d, d + 1:
 * the corner cases of the pigeonhole and multi-index probing. */
static void test_block_patterns(void)
{
    uint64_t s = 3;
    nd_index *idx = new_index();
    model m = {0};
    for (uint32_t i = 0; i < 5000; i++)
        insert_both(idx, &m, rng_next(&s), i);
    unsigned c[4];
    for (c[0] = 0; c[0] <= 9; c[0]++)
        for (c[1] = 0; c[0] + c[1] <= 9; c[1]++)
            for (c[2] = 0; c[0] + c[1] + c[2] <= 9; c[2]++)
                for (c[3] = 0; c[0] + c[1] + c[2] + c[3] <= 9; c[3]++) {
                    uint64_t q = m.fp[rng_below(&s, (unsigned)m.n)];
                    for (unsigned b = 0; b < 4; b++)
                        q = flip_in_block(&s, q, b, c[b]);
                    unsigned d = c[0] + c[1] + c[2] + c[3];
                    for (unsigned k = d ? d - 1 : 0; k <= d + 1; k++)
                        if (k <= ND_INDEX_MAX_K && !unit_test_failed())
                            check_query(idx, &m, q, k, SIZE_MAX);
                }
    nd_index_destroy(idx);
    model_free(&m);
}

/* Inserts and removes interleaved with queries; removed slots come back
 * under other fingerprints, duplicates come and go. */
static void test_interleaved(void)
{
    uint64_t s = 4;
    nd_index *idx = new_index();
    model m = {0};
    uint32_t next_slot = 0;
    uint64_t centers[8];
    for (int c = 0; c < 8; c++)
        centers[c] = rng_next(&s);
    for (int round = 0; round < 60 && !unit_test_failed(); round++) {
        for (int op = 0; op < 400; op++) {
            unsigned what = rng_below(&s, 10);
            if (what < 4 && m.n) {
                size_t i = rng_below(&s, (unsigned)m.n);
                REQUIRE(nd_index_remove(idx, m.fp[i], m.slot[i]) == 0, "remove");
                REQUIRE(nd_index_remove(idx, m.fp[i], m.slot[i]) == -ENOENT, "remove twice");
                model_del(&m, i);
            } else if (what < 6 && m.n) {
                insert_both(idx, &m, m.fp[rng_below(&s, (unsigned)m.n)], next_slot++);
            } else if (what < 8) {
                uint64_t c = centers[rng_below(&s, 8)];
                insert_both(idx, &m, flip_bits(&s, c, rng_below(&s, 6)), next_slot++);
            } else if (what < 9) { /* one bucket of table 1 grows past a run */
                uint64_t fp = (rng_next(&s) & ~UINT64_C(0xFFFF0000)) | 0x5A5A0000;
                insert_both(idx, &m, fp, next_slot++);
            } else {
                insert_both(idx, &m, rng_next(&s), next_slot++);
            }
        }
        REQUIRE(nd_index_count(idx) == m.n, "count %zu want %zu", nd_index_count(idx), m.n);
        check_many(idx, &m, &s, 20);
        for (unsigned k = 0; k <= ND_INDEX_MAX_K && !unit_test_failed(); k++) {
            check_query(idx, &m, centers[round % 8], k, SIZE_MAX);
            check_query(idx, &m, (rng_next(&s) & ~UINT64_C(0xFFFF0000)) | 0x5A5A0000, k, SIZE_MAX);
        }
    }
    /* Drain completely, checking along the way. */
    while (m.n && !unit_test_failed()) {
        size_t i = rng_below(&s, (unsigned)m.n);
        REQUIRE(nd_index_remove(idx, m.fp[i], m.slot[i]) == 0, "drain");
        model_del(&m, i);
        if (m.n % 1000 == 0)
            check_many(idx, &m, &s, 5);
    }
    REQUIRE(nd_index_count(idx) == 0, "drained");
    nd_index_destroy(idx);
    model_free(&m);
}

/* Huge buckets: thousands of fingerprints sharing one block (in each table
 * in turn) and thousands of copies of one fingerprint, so buckets become
 * directories, split, merge and shrink back while being checked. */
static void test_skew(void)
{
    uint64_t s = 5;
    for (unsigned b = 0; b < 4 && !unit_test_failed(); b++) {
        nd_index *idx = new_index();
        model m = {0};
        uint64_t shared = rng_next(&s) & (UINT64_C(0xFFFF) << (16 * b));
        uint64_t keep = ~(UINT64_C(0xFFFF) << (16 * b));
        uint64_t twin = rng_next(&s);
        uint32_t slot = 0;
        for (int i = 0; i < 6000; i++) {
            uint64_t fp = (rng_next(&s) & keep) | shared;
            if (i % 3 == 0 && m.n) /* a near neighbour of an earlier one */
                fp = (flip_bits(&s, m.fp[rng_below(&s, (unsigned)m.n)], 2) & keep) | shared;
            insert_both(idx, &m, fp, slot++);
            if (i % 2 == 0)
                insert_both(idx, &m, twin, (slot++) ^ 0x80000000u);
        }
        check_many(idx, &m, &s, 60);
        for (unsigned k = 0; k <= ND_INDEX_MAX_K && !unit_test_failed(); k++) {
            check_query(idx, &m, twin, k, SIZE_MAX);
            check_query(idx, &m, flip_bits(&s, twin, k), k, 100);
            check_query(idx, &m, shared | (rng_next(&s) & keep), k, SIZE_MAX);
        }
        /* Remove most, in random order, to force merges and un-splitting. */
        while (m.n > 50 && !unit_test_failed()) {
            size_t i = rng_below(&s, (unsigned)m.n);
            REQUIRE(nd_index_remove(idx, m.fp[i], m.slot[i]) == 0, "remove");
            model_del(&m, i);
            if (m.n % 1500 == 0) {
                check_many(idx, &m, &s, 10);
                check_query(idx, &m, twin, 0, SIZE_MAX);
            }
        }
        check_many(idx, &m, &s, 30);
        nd_index_destroy(idx);
        model_free(&m);
    }
}

/* Output truncated to cap: the cap nearest in order, total count, -E2BIG. */
static void test_truncation(void)
{
    uint64_t s = 6;
    nd_index *idx = new_index();
    model m = {0};
    uint64_t c = rng_next(&s);
    for (uint32_t i = 0; i < 3000; i++)
        insert_both(idx, &m, flip_bits(&s, c, rng_below(&s, 7)), 5000 - i);
    for (unsigned k = 0; k <= ND_INDEX_MAX_K && !unit_test_failed(); k++)
        for (size_t cap = 0; cap < 40 && !unit_test_failed(); cap += 3) {
            check_query(idx, &m, c, k, cap);
            check_query(idx, &m, flip_bits(&s, c, 2), k, cap);
        }
    nd_index_destroy(idx);
    model_free(&m);
}

/* ---- concurrency -------------------------------------------------------- */

/* Stable entries are inserted before the readers start and never removed;
 * churn entries (slot >= CHURN_BASE, simhash a function of the slot) are
 * inserted and removed by the writer the whole time. Readers check that every
 * stable entry within k is found, the output is strictly sorted (so no
 * duplicates) and every hit's distance is right. */
#define STABLE_N 9000
#define CHURN_BASE 1000000u
#define CHURN_N 4000

typedef struct shared {
    nd_index *idx;
    uint64_t stable[STABLE_N];
    uint64_t anchor[8]; /* churn fingerprints are derived from these */
    atomic_bool stop;
    atomic_ulong queries, writes;
    atomic_int errors;
} shared;

/* A fingerprint sharing block 1 with 3600 stable ones: with the churn, that
 * bucket of table 1 crosses the "huge" size back and forth. */
static uint64_t in_huge(uint64_t *s)
{
    return (rng_next(s) & ~UINT64_C(0xFFFF0000)) | 0x5A5A0000;
}

static uint64_t churn_fp(const shared *sh, uint32_t slot)
{
    uint64_t s = slot;
    uint64_t a = sh->anchor[slot % 8];
    switch (slot % 4) {
    case 0: return a; /* copies of a stable fingerprint */
    case 1: return flip_bits(&s, a, 1 + rng_below(&s, 4));
    case 2: return in_huge(&s);
    default: return (a & 0xFFFF) | (rng_next(&s) << 16); /* a big bucket */
    }
}

static void *writer_main(void *arg)
{
    shared *sh = arg;
    uint64_t s = 77;
    bool in[CHURN_N] = {false};
    while (!atomic_load(&sh->stop)) {
        uint32_t i = rng_below(&s, CHURN_N), slot = CHURN_BASE + i;
        int rc = in[i] ? nd_index_remove(sh->idx, churn_fp(sh, slot), slot)
                       : nd_index_insert(sh->idx, churn_fp(sh, slot), slot);
        if (rc < 0) {
            fprintf(stderr, "writer: %d\n", rc);
            atomic_fetch_add(&sh->errors, 1);
        }
        in[i] = !in[i];
        atomic_fetch_add(&sh->writes, 1);
    }
    for (uint32_t i = 0; i < CHURN_N; i++)
        if (in[i])
            nd_index_remove(sh->idx, churn_fp(sh, CHURN_BASE + i), CHURN_BASE + i);
    return NULL;
}

static bool reader_check(shared *sh, uint64_t q, unsigned k, nd_index_hit *hits, size_t cap)
{
    size_t found;
    int rc = nd_index_query(sh->idx, q, k, hits, cap, &found);
    if (rc < 0)
        return false;
    size_t nstable = 0;
    for (size_t i = 0; i < found; i++) {
        if (i && hit_cmp(&hits[i - 1], &hits[i]) >= 0)
            return false;
        uint32_t slot = hits[i].slot;
        uint64_t fp = slot < STABLE_N ? sh->stable[slot] : churn_fp(sh, slot);
        if ((unsigned)__builtin_popcountll(fp ^ q) != hits[i].distance)
            return false;
        nstable += slot < STABLE_N;
    }
    size_t want = 0;
    for (size_t i = 0; i < STABLE_N; i++)
        want += (unsigned)__builtin_popcountll(sh->stable[i] ^ q) <= k;
    return nstable == want;
}

static void *reader_main(void *arg)
{
    shared *sh = arg;
    uint64_t s = (uint64_t)(uintptr_t)&s;
    static _Thread_local nd_index_hit hits[STABLE_N + CHURN_N];
    while (!atomic_load(&sh->stop)) {
        uint64_t base = rng_below(&s, 2) ? sh->anchor[rng_below(&s, 8)]
                                         : sh->stable[rng_below(&s, STABLE_N)];
        unsigned k = rng_below(&s, ND_INDEX_MAX_K + 1);
        uint64_t q = flip_bits(&s, base, rng_below(&s, k + 1));
        if (!reader_check(sh, q, k, hits, STABLE_N + CHURN_N)) {
            fprintf(stderr, "reader: wrong answer q=%016llx k=%u\n", (unsigned long long)q, k);
            atomic_fetch_add(&sh->errors, 1);
        }
        atomic_fetch_add(&sh->queries, 1);
    }
    return NULL;
}

static void test_concurrent(void)
{
    shared *sh = calloc(1, sizeof(*sh));
    if (!sh)
        abort();
    sh->idx = new_index();
    uint64_t s = 8;
    for (int a = 0; a < 8; a++)
        sh->anchor[a] = rng_next(&s);
    for (uint32_t i = 0; i < STABLE_N; i++) {
        uint64_t a = sh->anchor[i % 8];
        uint64_t fp = i % 5 == 0   ? rng_next(&s)
                      : i % 5 == 1 ? flip_bits(&s, a, rng_below(&s, 6))
                      : i % 5 == 4 ? (a & 0xFFFF) | (rng_next(&s) << 16)
                                   : in_huge(&s);
        if (i < 8)
            fp = a; /* the anchors themselves, copied by churn */
        sh->stable[i] = fp;
        REQUIRE(nd_index_insert(sh->idx, fp, i) == 0, "stable insert");
    }
    pthread_t w, r[3];
    pthread_create(&w, NULL, writer_main, sh);
    for (int i = 0; i < 3; i++)
        pthread_create(&r[i], NULL, reader_main, sh);
    double t0 = now_s();
    while (now_s() - t0 < 1.5 && !atomic_load(&sh->errors)) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&sh->stop, true);
    pthread_join(w, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(r[i], NULL);
    unsigned long nq = atomic_load(&sh->queries), nw = atomic_load(&sh->writes);
    unit_note("concurrent: %lu queries by 3 readers, %lu writes", nq, nw);
    REQUIRE(!atomic_load(&sh->errors), "%d errors", atomic_load(&sh->errors));
    REQUIRE(nq > 100 && nw > 100, "threads did not run");
    REQUIRE(nd_index_count(sh->idx) == STABLE_N, "count %zu", nd_index_count(sh->idx));
    nd_index_destroy(sh->idx);
    free(sh);
}

/* ---- main --------------------------------------------------------------- */

/* nd_index_insert_many: into an empty index, then on top of entries
 * (single and bulk), with repeated and already stored pairs, a skewed batch
 * (one bucket of thousands: a directory of runs), and single inserts and
 * removes afterwards; answers identical to the brute force throughout. */
static void test_insert_many(void)
{
    uint64_t s = 11;
    nd_index *idx = new_index();
    model m = {0};
    enum { N = 20000 };
    uint64_t *fp = malloc((N + 100) * sizeof(*fp));
    uint32_t *slot = malloc((N + 100) * sizeof(*slot));
    if (!fp || !slot)
        abort();
    REQUIRE(nd_index_insert_many(idx, fp, slot, 0, 1) == 0, "empty batch");
    size_t n = 0;
    for (uint32_t i = 0; i < N; i++, n++) {
        fp[n] = i % 10 == 0 && n ? fp[rng_below(&s, (unsigned)n)] : rng_next(&s);
        slot[n] = i;
        model_add(&m, fp[n], slot[n]);
    }
    for (int i = 0; i < 100; i++, n++) { /* repeated pairs: stored once */
        size_t j = rng_below(&s, N);
        fp[n] = fp[j];
        slot[n] = slot[j];
    }
    REQUIRE(nd_index_insert_many(idx, fp, slot, n, 2) == 0, "bulk into empty");
    REQUIRE(nd_index_count(idx) == N, "count %zu", nd_index_count(idx));
    check_many(idx, &m, &s, 150);

    /* On top: single inserts, then a batch with stored pairs and a skewed
     * part sharing block 2. */
    for (uint32_t i = 0; i < 2000; i++)
        insert_both(idx, &m, rng_next(&s), N + i);
    uint64_t shared = rng_next(&s) & (UINT64_C(0xFFFF) << 32);
    n = 0;
    for (uint32_t i = 0; i < N; i++, n++) {
        fp[n] = i < 3000 ? (rng_next(&s) & ~(UINT64_C(0xFFFF) << 32)) | shared : rng_next(&s);
        slot[n] = 2 * N + i;
        model_add(&m, fp[n], slot[n]);
    }
    for (int i = 0; i < 100; i++, n++) {
        size_t j = rng_below(&s, (unsigned)(m.n - N));
        fp[n] = m.fp[j];
        slot[n] = m.slot[j];
    }
    REQUIRE(nd_index_insert_many(idx, fp, slot, n, 1) == 0, "bulk on top");
    REQUIRE(nd_index_count(idx) == m.n, "count %zu, want %zu", nd_index_count(idx), m.n);
    check_many(idx, &m, &s, 150);
    for (unsigned k = 0; k <= ND_INDEX_MAX_K && !unit_test_failed(); k++)
        check_query(idx, &m, shared | (rng_next(&s) & ~(UINT64_C(0xFFFF) << 32)), k, SIZE_MAX);

    /* Single updates on bulk-built buckets. */
    for (uint32_t i = 0; i < 3000; i++)
        insert_both(idx, &m, i % 2 ? rng_next(&s) : m.fp[rng_below(&s, (unsigned)m.n)], 3 * N + i);
    while (m.n > 1000 && !unit_test_failed()) {
        size_t i = rng_below(&s, (unsigned)m.n);
        REQUIRE(nd_index_remove(idx, m.fp[i], m.slot[i]) == 0, "remove");
        model_del(&m, i);
        if (m.n % 10000 == 0)
            check_many(idx, &m, &s, 20);
    }
    check_many(idx, &m, &s, 100);
    REQUIRE(nd_index_count(idx) == m.n, "count after removes");
    free(fp);
    free(slot);
    nd_index_destroy(idx);
    model_free(&m);
}

typedef struct test {
    const char *name;
    void (*fn)(void);
} test;

int main(void)
{
    static const test tests[] = {
        {"api_errors", test_api_errors},   {"random", test_random},
        {"clustered", test_clustered},     {"block_patterns", test_block_patterns},
        {"interleaved", test_interleaved}, {"skew", test_skew},
        {"truncation", test_truncation},   {"concurrent", test_concurrent},
        {"insert_many", test_insert_many},
    };
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        checked_queries = checked_hits = 0;
        double t0 = now_s();
        unit_run(tests[i].name, tests[i].fn);
        unit_note("%s: %.2f s, %zu queries / %zu hits checked", tests[i].name, now_s() - t0,
                  checked_queries, checked_hits);
    }
    free(want_buf);
    free(got_buf);
    return unit_summary("index");
}
