/* test_anchor_index.c - the anchor index: shared counts and ranking,
 * removal, the posting cap (an anchor keeps its first documents), bulk load
 * equal to inserts, memory
 * figures, and queries running while a writer inserts and removes. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anchor_index.h"
#include "unit.h"

static void test_basic(void)
{
    nd_anchor_index *idx;
    CHECK(nd_anchor_index_create(&idx, 0) == -EINVAL, "cap 0");
    CHECK(nd_anchor_index_create(&idx, ND_ANCHOR_CAP_MAX + 1) == -EINVAL, "cap too big");
    CHECK(nd_anchor_index_create(&idx, 4) == 0, "create");
    uint32_t a1[] = {1, 2, 3, 4, 0xFFFFFFFF, 0x12345678};
    uint32_t a2[] = {3, 4, 5, 0x12345678};
    uint32_t a3[] = {0x12345679, 0x00010003}; /* same bucket/low bits as others, differ */
    CHECK(nd_anchor_index_insert(idx, 10, a1, 6) == 0, "insert 10");
    CHECK(nd_anchor_index_insert(idx, 20, a2, 4) == 0, "insert 20");
    CHECK(nd_anchor_index_insert(idx, 30, a3, 2) == 0, "insert 30");
    uint32_t q[] = {3, 4, 0x12345678, 99, 4};
    nd_anchor_hit h[4];
    unsigned skipped = 7;
    size_t n = nd_anchor_index_query(idx, q, 5, h, 4, &skipped);
    CHECK(n == 2 && skipped == 0, "found %zu skipped %u", n, skipped);
    CHECK(h[0].slot == 10 && h[0].shared == 3 && h[1].slot == 20 && h[1].shared == 3,
          "ties by slot: %u/%u %u/%u", h[0].slot, h[0].shared, h[1].slot, h[1].shared);
    uint32_t q2[] = {1, 5};
    n = nd_anchor_index_query(idx, q2, 2, h, 1, NULL);
    CHECK(n == 2 && h[0].slot == 10 && h[0].shared == 1, "cap 1 keeps the best: %u", h[0].slot);
    CHECK(nd_anchor_index_postings(idx, 0x12345678) == 2 &&
              nd_anchor_index_postings(idx, 0x12345679) == 1,
          "postings");
    /* Remove: only the given anchors, only that slot. */
    CHECK(nd_anchor_index_remove(idx, 10, a1, 6) == 6, "remove 10");
    CHECK(nd_anchor_index_remove(idx, 10, a1, 6) == 0, "remove again");
    n = nd_anchor_index_query(idx, q, 5, h, 4, NULL);
    CHECK(n == 1 && h[0].slot == 20 && h[0].shared == 3, "after remove");
    /* Cap: an anchor holds its first 4 slots; a fifth is not indexed under
     * it, and the query still yields the 4 (reported full). */
    uint32_t common[] = {777};
    for (uint32_t s = 100; s < 105; s++)
        CHECK(nd_anchor_index_insert(idx, s, common, 1) == 0, "insert %u", s);
    unsigned full = 9;
    n = nd_anchor_index_query(idx, common, 1, h, 4, &full);
    CHECK(n == 4 && full == 1 && h[0].slot == 100 && h[3].slot == 103,
          "a full anchor yields its first: %zu %u %u..%u", n, full, h[0].slot, h[3].slot);
    CHECK(nd_anchor_index_postings(idx, 777) == 4, "held 4");
    CHECK(nd_anchor_index_remove(idx, 104, common, 1) == 0, "104 was never indexed there");
    CHECK(nd_anchor_index_remove(idx, 100, common, 1) == 1, "remove 100");
    n = nd_anchor_index_query(idx, common, 1, h, 4, &full);
    CHECK(n == 3 && full == 0, "a removal frees a place: %zu %u", n, full);
    CHECK(nd_anchor_index_insert(idx, 105, common, 1) == 0 &&
              nd_anchor_index_postings(idx, 777) == 4,
          "the next insert takes it");
    nd_anchor_stats st;
    nd_anchor_index_stats(idx, &st);
    CHECK(st.entries == 4 + 2 + 4, "entries %llu", (unsigned long long)st.entries);
    nd_anchor_index_destroy(idx);
    /* A long posting run (the 64-entry scan, then a search of its end)
     * between neighbours of the same bucket: held to the cap, counted
     * exactly, and the neighbours stay apart. */
    CHECK(nd_anchor_index_create(&idx, ND_ANCHOR_CAP_MAX) == 0, "create");
    uint32_t lo[] = {0xABC00010}, mid[] = {0xABC00011}, hi[] = {0xABC00012};
    nd_anchor_index_insert(idx, 5000, lo, 1);
    nd_anchor_index_insert(idx, 5001, hi, 1);
    for (uint32_t sl = 6000; sl < 6300; sl++)
        nd_anchor_index_insert(idx, sl, mid, 1);
    CHECK(nd_anchor_index_postings(idx, mid[0]) == ND_ANCHOR_CAP_MAX &&
              nd_anchor_index_postings(idx, lo[0]) == 1 &&
              nd_anchor_index_postings(idx, hi[0]) == 1,
          "long run: %zu", nd_anchor_index_postings(idx, mid[0]));
    uint32_t three[] = {lo[0], mid[0], hi[0]};
    nd_anchor_hit hl[ND_ANCHOR_CAP_MAX + 2];
    n = nd_anchor_index_query(idx, three, 3, hl, ND_ANCHOR_CAP_MAX + 2, &full);
    CHECK(n == ND_ANCHOR_CAP_MAX + 2 && full == 1 && hl[0].slot == 5000 && hl[1].slot == 5001 &&
              hl[2].slot == 6000 && hl[n - 1].slot == 6000 + ND_ANCHOR_CAP_MAX - 1,
          "long run held to its first, neighbours found: %zu %u", n, full);
    nd_anchor_index_destroy(idx);
}

static int cmp_hit(const void *a, const void *b)
{
    const nd_anchor_hit *x = a, *y = b;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

static void test_bulk_equals_inserts(void)
{
    enum { DOCS = 3000, M = 8 };
    static uint32_t slots[DOCS], anchors[DOCS * M];
    unit_rng_state = 42;
    for (int i = 0; i < DOCS; i++) {
        /* slots out of order (the bulk load must not rely on it) */
        slots[i] = (uint32_t)((i * 7919) % DOCS) * 3 + 1;
        for (int j = 0; j < M; j++) /* small alphabet: many shared anchors; */
            anchors[i * M + j] = j < 2 ? 0xABC00000u | (uint32_t)(unit_rng() % 300) /* one bucket */
                                       : (uint32_t)(unit_rng() % 5000) * 0x9E3779B1u;
    }
    nd_anchor_index *a, *b;
    CHECK(nd_anchor_index_create(&a, 64) == 0 && nd_anchor_index_create(&b, 64) == 0, "create");
    for (int i = 0; i < DOCS; i++)
        CHECK(nd_anchor_index_insert(a, slots[i], anchors + i * M, M) == 0, "insert");
    /* bulk in two halves: merging into existing buckets too */
    CHECK(nd_anchor_index_insert_many(b, slots, anchors, DOCS / 2, M) == 0, "bulk 1");
    CHECK(nd_anchor_index_insert_many_threads(b, slots + DOCS / 2, anchors + DOCS / 2 * M,
                                              DOCS - DOCS / 2, M, 3) == 0,
          "bulk 2 (3 threads)");
    nd_anchor_stats sa, sb;
    nd_anchor_index_stats(a, &sa);
    nd_anchor_index_stats(b, &sb);
    CHECK(sa.entries == sb.entries && sa.entries > DOCS * M * 9 / 10, "entries %llu %llu",
          (unsigned long long)sa.entries, (unsigned long long)sb.entries);
    int same = 1;
    for (int i = 0; i < 300 && same; i++) {
        nd_anchor_hit ha[256], hb[256];
        size_t na = nd_anchor_index_query(a, anchors + i * M, M, ha, 256, NULL);
        size_t nb = nd_anchor_index_query(b, anchors + i * M, M, hb, 256, NULL);
        same = na == nb && na >= 1;
        if (same && na <= 256) {
            qsort(ha, na, sizeof(*ha), cmp_hit);
            qsort(hb, nb, sizeof(*hb), cmp_hit);
            same = memcmp(ha, hb, na * sizeof(*ha)) == 0;
        }
    }
    CHECK(same, "bulk and inserts answer alike");
    /* Removal finds every bulk-loaded entry: (key, slot) order is exact. */
    size_t ra = 0, rb = 0;
    for (int i = 0; i < DOCS; i++) {
        ra += nd_anchor_index_remove(a, slots[i], anchors + i * M, M);
        rb += nd_anchor_index_remove(b, slots[i], anchors + i * M, M);
    }
    nd_anchor_index_stats(a, &sa);
    nd_anchor_index_stats(b, &sb);
    CHECK(ra == rb && sa.entries == 0 && sb.entries == 0, "removed %zu %zu, left %llu %llu", ra, rb,
          (unsigned long long)sa.entries, (unsigned long long)sb.entries);
    nd_anchor_index_destroy(a);
    nd_anchor_index_destroy(b);
}

/* The start-up load (nd_anchor_loader: slots ascending, parts sized for the
 * expected count; here also too small, so that parts spill) gives the index
 * one-by-one inserts give: the same postings under every anchor, the same
 * answers, the same removals; a loaded bucket then grows (moved out of the
 * load's mapping) and empties like any other, and the mapping's pages are
 * given back as its buckets leave. */
static void test_loader_equals_inserts(void)
{
    enum { DOCS = 20000, M = 16, EXTRA = 2000 };
    static uint32_t anchors[(DOCS + EXTRA) * M];
    unit_rng_state = 7;
    for (int i = 0; i < (DOCS + EXTRA) * M; i++) {
        uint32_t r = (uint32_t)unit_rng();
        /* a third in 64 parts (spills when sized small), some repeats */
        anchors[i] = i % 3 == 0 ? (r & 0x003FFFFFu) : i % 17 == 0 ? anchors[i - 1] : r;
    }
    for (int round = 0; round < 3; round++) {
        /* 1: parts spill; 12M: a mapping of ~100 MiB, whose pages a thread
         * of the loader's prefaults while the entries come in */
        uint64_t expect = round == 0 ? (uint64_t)DOCS * M : round == 1 ? 1 : 12000000;
        nd_anchor_index *a, *b;
        nd_anchor_loader *ld;
        REQUIRE(nd_anchor_index_create(&a, 64) == 0 && nd_anchor_index_create(&b, 64) == 0);
        for (uint32_t i = 0; i < DOCS; i++)
            CHECK(nd_anchor_index_insert(a, i, anchors + i * M, M) == 0);
        REQUIRE(nd_anchor_loader_create(&ld, b, expect) == 0);
        for (uint32_t i = 0; i < DOCS; i++)
            CHECK(nd_anchor_loader_add(ld, i, anchors + i * M, M) == 0);
        CHECK(nd_anchor_loader_finish(ld, 1 + round) == 0, "finish");
        nd_anchor_loader_destroy(ld);
        nd_anchor_stats sa, sb, sb_loaded;
        nd_anchor_index_stats(a, &sa);
        nd_anchor_index_stats(b, &sb_loaded);
        CHECK(sa.entries == sb_loaded.entries && sa.buckets_used == sb_loaded.buckets_used,
              "round %d: entries %llu %llu", round, (unsigned long long)sa.entries,
              (unsigned long long)sb_loaded.entries);
        int same = 1;
        for (int i = 0; i < (DOCS + EXTRA) * M && same; i++)
            same = nd_anchor_index_postings(a, anchors[i]) ==
                   nd_anchor_index_postings(b, anchors[i]);
        CHECK(same, "round %d: postings alike", round);
        same = 1;
        for (int i = 0; i < DOCS && same; i += 7) {
            nd_anchor_hit ha[64], hb[64];
            size_t na = nd_anchor_index_query(a, anchors + i * M, M, ha, 64, NULL);
            size_t nb = nd_anchor_index_query(b, anchors + i * M, M, hb, 64, NULL);
            same = na == nb && na >= 1 && memcmp(ha, hb, (na < 64 ? na : 64) * sizeof(*ha)) == 0;
        }
        CHECK(same, "round %d: answers alike (ranked)", round);
        /* Later registrations grow loaded buckets; then everything goes. */
        for (uint32_t i = DOCS; i < DOCS + EXTRA; i++) {
            CHECK(nd_anchor_index_insert(a, i, anchors + i * M, M) == 0);
            CHECK(nd_anchor_index_insert(b, i, anchors + i * M, M) == 0);
        }
        nd_anchor_index_stats(a, &sa);
        nd_anchor_index_stats(b, &sb);
        CHECK(sa.entries == sb.entries, "round %d: after inserts", round);
        size_t ra = 0, rb = 0;
        for (uint32_t i = 0; i < DOCS + EXTRA; i++) {
            ra += nd_anchor_index_remove(a, i, anchors + i * M, M);
            rb += nd_anchor_index_remove(b, i, anchors + i * M, M);
        }
        nd_anchor_index_stats(b, &sb);
        CHECK(ra == rb && sb.entries == 0, "round %d: removed %zu %zu", round, ra, rb);
        /* the carved entries' pages were given back (only the directory, the
         * locks and the page counts stay) */
        CHECK(sb.bytes + sb_loaded.entries * 5 * 9 / 10 < sb_loaded.bytes,
              "round %d: bytes %llu after, %llu loaded", round, (unsigned long long)sb.bytes,
              (unsigned long long)sb_loaded.bytes);
        nd_anchor_index_destroy(a);
        nd_anchor_index_destroy(b);
    }
}

/* A loader destroyed (or finished) while its thread still prefaults a
 * large mapping waits for it first: no fault on an unmapped page, no
 * thread left behind (AddressSanitizer and the exit tell). */
static void test_loader_stopped_while_prefaulting(void)
{
    uint32_t anchors[16];
    for (int i = 0; i < 16; i++)
        anchors[i] = (uint32_t)i * 0x10001u;
    for (int round = 0; round < 2; round++) {
        nd_anchor_index *idx;
        nd_anchor_loader *ld;
        REQUIRE(nd_anchor_index_create(&idx, 64) == 0);
        REQUIRE(nd_anchor_loader_create(&ld, idx, 40000000) == 0, "round %d", round);
        if (round == 1) { /* finished at once: one document indexed */
            CHECK(nd_anchor_loader_add(ld, 5, anchors, 16) == 0);
            CHECK(nd_anchor_loader_finish(ld, 2) == 0);
        }
        nd_anchor_loader_destroy(ld);
        nd_anchor_stats st;
        nd_anchor_index_stats(idx, &st);
        CHECK(st.entries == (round == 1 ? 16u : 0u), "round %d: %llu entries", round,
              (unsigned long long)st.entries);
        nd_anchor_index_destroy(idx);
    }
}

/* Readers query stable documents while a writer inserts and removes others:
 * the stable ones are always found with their full shared count. */
typedef struct race {
    nd_anchor_index *idx;
    atomic_int stop;
    atomic_long queries, bad;
} race;

static void *reader(void *arg)
{
    race *r = arg;
    while (!atomic_load(&r->stop)) {
        for (uint32_t d = 0; d < 50; d++) {
            uint32_t an[4] = {d * 4 + 1, d * 4 + 2, d * 4 + 3, d * 4 + 4};
            nd_anchor_hit h[8];
            size_t n = nd_anchor_index_query(r->idx, an, 4, h, 8, NULL);
            int ok = n >= 1 && h[0].slot == d && h[0].shared == 4;
            if (!ok)
                atomic_fetch_add(&r->bad, 1);
            atomic_fetch_add(&r->queries, 1);
        }
    }
    return NULL;
}

static void test_concurrent(void)
{
    race r = {0};
    CHECK(nd_anchor_index_create(&r.idx, 64) == 0, "create");
    for (uint32_t d = 0; d < 50; d++) {
        uint32_t an[4] = {d * 4 + 1, d * 4 + 2, d * 4 + 3, d * 4 + 4};
        nd_anchor_index_insert(r.idx, d, an, 4);
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, reader, &r);
    unit_rng_state = 7;
    for (int round = 0; round < 20000; round++) {
        uint32_t slot = 1000 + (uint32_t)(round % 500);
        /* churn: also under the stable documents' anchors (the shared
         * count of a stable slot must not change) */
        uint32_t an[3] = {(uint32_t)(unit_rng() % 200) + 1, (uint32_t)unit_rng(),
                          (uint32_t)unit_rng()};
        nd_anchor_index_insert(r.idx, slot, an, 3);
        nd_anchor_index_remove(r.idx, slot, an, 3);
    }
    atomic_store(&r.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK(atomic_load(&r.bad) == 0 && atomic_load(&r.queries) > 0, "bad %ld of %ld",
          atomic_load(&r.bad), atomic_load(&r.queries));
    nd_anchor_stats st;
    nd_anchor_index_stats(r.idx, &st);
    CHECK(st.entries == 200, "entries %llu", (unsigned long long)st.entries);
    nd_anchor_index_destroy(r.idx);
}

/* The searches inside a bucket start at a guess from the key (keys are
 * hash bits, spread evenly): checked against a plain model on crowded
 * buckets whose keys are anything but even (all low, all high, runs of one
 * key past the cap, keys next to each other), through inserts, repeats,
 * removals and queries. */
typedef struct model_pair {
    uint32_t anchor, slot;
    int live;
} model_pair;

static uint32_t model_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(*s >> 33);
}

static size_t model_postings(const model_pair *m, size_t n, uint32_t a)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += m[i].live && m[i].anchor == a;
    return c;
}

static void test_skewed_buckets_match_model(void)
{
    nd_anchor_index *idx;
    REQUIRE(nd_anchor_index_create(&idx, ND_ANCHOR_CAP_MAX) == 0, "create");
    enum { NPAIRS = 6000 };
    model_pair *m = calloc(NPAIRS, sizeof(*m));
    REQUIRE(m, "alloc");
    uint64_t seed = 42;
    /* 4 buckets (top 20 bits), each with its own key shape */
    const uint32_t base[4] = {0x00000000u, 0x7FFFF000u, 0xABCDE000u, 0xFFFFF000u};
    for (size_t i = 0; i < NPAIRS; i++) {
        uint32_t r = model_rand(&seed), b = base[i % 4] & 0xFFFFF000u, key;
        switch (i % 4) {
        case 0: key = r % 40; break;                           /* all low keys */
        case 1: key = 0xFFFF - r % 40; break;                  /* all high */
        case 2: key = r % 3 == 0 ? 0x8000 : r & 0xFFFF; break; /* a run of 500 + spread */
        default: key = 0x4000 + r % 7; break;                  /* 7 adjacent keys */
        }
        m[i].anchor = b | key;
        m[i].slot = i;
        /* held while the anchor has room (it keeps its first ones) */
        m[i].live = model_postings(m, i, m[i].anchor) < ND_ANCHOR_CAP_MAX;
        CHECK(nd_anchor_index_insert(idx, m[i].slot, &m[i].anchor, 1) == 0, "insert %zu", i);
        /* an anchor a document already has: no second entry */
        if (i % 97 == 0)
            CHECK(nd_anchor_index_insert(idx, m[i].slot, &m[i].anchor, 1) == 0, "repeat");
    }
    for (size_t i = 0; i < NPAIRS; i += 3) { /* remove a third */
        CHECK(nd_anchor_index_remove(idx, m[i].slot, &m[i].anchor, 1) == (size_t)m[i].live,
              "remove %zu", i);
        m[i].live = 0;
    }
    size_t bad = 0;
    for (size_t i = 0; i < NPAIRS; i++) {
        uint32_t a = m[i].anchor;
        if (nd_anchor_index_postings(idx, a) != model_postings(m, NPAIRS, a))
            bad++;
        uint32_t miss = a ^ 0x1; /* a neighbour key, maybe absent */
        if (nd_anchor_index_postings(idx, miss) != model_postings(m, NPAIRS, miss))
            bad++;
    }
    CHECK(bad == 0, "%zu postings differ from the model", bad);
    /* queries: every hit's shared count is the model's */
    nd_anchor_hit h[64];
    size_t qbad = 0;
    for (size_t t = 0; t < 200; t++) {
        uint32_t q[8];
        for (int j = 0; j < 8; j++)
            q[j] = m[model_rand(&seed) % NPAIRS].anchor ^ (j == 7 ? 0x100u : 0u);
        unsigned full;
        size_t n = nd_anchor_index_query(idx, q, 8, h, 64, &full);
        unsigned want_full = 0;
        for (int j = 0; j < 8; j++) {
            int seen = 0;
            for (int k = 0; k < j; k++)
                seen |= q[k] == q[j];
            if (!seen && model_postings(m, NPAIRS, q[j]) >= ND_ANCHOR_CAP_MAX)
                want_full++;
        }
        if (full != want_full)
            qbad++;
        for (size_t k = 0; k < n && k < 64; k++) {
            uint32_t shared = 0;
            for (int j = 0; j < 8; j++) {
                int seen = 0;
                for (int x = 0; x < j; x++)
                    seen |= q[x] == q[j];
                if (seen)
                    continue;
                for (size_t i = 0; i < NPAIRS; i++)
                    if (m[i].live && m[i].anchor == q[j] && m[i].slot == h[k].slot)
                        shared++;
            }
            if (shared != h[k].shared)
                qbad++;
        }
    }
    CHECK(qbad == 0, "%zu query results differ from the model", qbad);
    free(m);
    nd_anchor_index_destroy(idx);
}

/* The search in a bucket starts where the key should be: near its entries
 * (within a few standard deviations of a uniform spread), whatever the
 * bucket. A bucket is the anchor's top 20 bits and shares the key's top 4
 * bits: a guess made from all 16 key bits started up to the whole bucket
 * away (a chain of cache misses at 10M documents). */
static void test_search_starts_near(void)
{
    static const uint32_t buckets[] = {0x00000, 0xABCDE, 0x12340, 0xFFFFF};
    for (size_t b = 0; b < sizeof(buckets) / sizeof(buckets[0]); b++) {
        nd_anchor_index *idx;
        REQUIRE(nd_anchor_index_create(&idx, 64) == 0, "create");
        uint64_t s = 99 + b;
        const uint32_t n = 4096;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t a = buckets[b] << 12 | (model_rand(&s) & 0xFFF);
            REQUIRE(nd_anchor_index_insert(idx, i, &a, 1) == 0, "insert");
        }
        size_t sum = 0, most = 0, probes = 500;
        for (size_t i = 0; i < probes; i++) {
            size_t m = nd_anchor_index_guess_miss(idx, buckets[b] << 12 | (model_rand(&s) & 0xFFF));
            sum += m;
            most = m > most ? m : most;
        }
        /* a key's place among n uniform keys: standard deviation <= 32 */
        CHECK(sum / probes <= 64 && most <= 256, "bucket %05x: mean miss %zu, most %zu of %u",
              buckets[b], sum / probes, most, n);
        nd_anchor_index_destroy(idx);
    }
}

/* Documents indexed later never push an earlier one out of its anchors:
 * 1000 decoys under all 16 anchors of an original X (some on smaller,
 * reused slots) leave X under every one of them, found with its full shared
 * count by X's anchors and with 8 by a partial copy's; a start-up load of
 * the same documents keeps the smallest slots (the earliest: slots ascend
 * with registration there); and a query whose 64 anchors are all full
 * counts every posting. */
static void test_hot_anchor_keeps_first(void)
{
    enum { M = 16, DECOYS = 1000 };
    nd_anchor_index *idx;
    REQUIRE(nd_anchor_index_create(&idx, 64) == 0, "create");
    uint32_t x[M], copy[M], d[M + 4];
    for (uint32_t i = 0; i < M; i++)
        x[i] = 0x9E3779B1u * (i + 1);
    for (uint32_t i = 0; i < M; i++) /* half of X's, half its own */
        copy[i] = i < 8 ? x[2 * i] : 0x85EBCA6Bu * (i + 100);
    CHECK(nd_anchor_index_insert(idx, 500, x, M) == 0, "X");
    for (uint32_t k = 0; k < DECOYS; k++) {
        memcpy(d, x, sizeof(x));
        for (uint32_t j = 0; j < 4; j++)
            d[M + j] = 0xC2B2AE35u * (k * 4 + j + 7); /* its own, and the copy's */
        if (k % 2)
            memcpy(d + M, copy + 8, 4 * sizeof(*d));
        uint32_t slot = k < 100 ? k : 1000 + k; /* the first 100 below X's slot */
        CHECK(nd_anchor_index_insert(idx, slot, d, M + 4) == 0, "decoy %u", k);
    }
    int held = 1;
    for (uint32_t i = 0; i < M; i++)
        held &= nd_anchor_index_postings(idx, x[i]) == 64;
    CHECK(held, "every anchor of X holds 64");
    static nd_anchor_hit h[ND_ANCHOR_HITS_MAX];
    unsigned full = 0;
    size_t n = nd_anchor_index_query(idx, x, M, h, ND_ANCHOR_HITS_MAX, &full);
    size_t at = n;
    for (size_t i = 0; i < n; i++)
        if (h[i].slot == 500)
            at = i;
    CHECK(full == M && n == 64 && at < n && h[at].shared == M,
          "X found under its full anchors: found %zu, full %u, X at %zu", n, full, at);
    n = nd_anchor_index_query(idx, copy, M, h, ND_ANCHOR_HITS_MAX, &full);
    at = n;
    for (size_t i = 0; i < n; i++)
        if (h[i].slot == 500)
            at = i;
    CHECK(at < n && h[at].shared == 8, "the partial copy finds X: %zu of %zu", at, n);
    /* the same documents loaded at start-up, X first */
    nd_anchor_index *ld_idx;
    nd_anchor_loader *ld;
    REQUIRE(nd_anchor_index_create(&ld_idx, 64) == 0 &&
                nd_anchor_loader_create(&ld, ld_idx, 1000) == 0,
            "loader");
    CHECK(nd_anchor_loader_add(ld, 0, x, M) == 0, "X at slot 0");
    for (uint32_t k = 0; k < DECOYS; k++) {
        memcpy(d, x, sizeof(x));
        CHECK(nd_anchor_loader_add(ld, 1 + k, d, M) == 0, "decoy");
    }
    CHECK(nd_anchor_loader_finish(ld, 2) == 0, "finish");
    nd_anchor_loader_destroy(ld);
    n = nd_anchor_index_query(ld_idx, copy, M, h, ND_ANCHOR_HITS_MAX, &full);
    CHECK(n == 64 && h[0].slot == 0 && h[0].shared == 8 && h[63].slot == 63,
          "a load keeps the smallest slots: %zu, %u/%u .. %u", n, h[0].slot, h[0].shared,
          h[63].slot);
    /* loading into an index that has entries: the merge keeps the first 64 too */
    REQUIRE(nd_anchor_loader_create(&ld, ld_idx, 1000) == 0, "loader 2");
    for (uint32_t k = 0; k < 10; k++)
        CHECK(nd_anchor_loader_add(ld, 5000 + k, x, M) == 0, "later");
    CHECK(nd_anchor_loader_finish(ld, 1) == 0, "finish 2");
    nd_anchor_loader_destroy(ld);
    CHECK(nd_anchor_index_postings(ld_idx, x[3]) == 64, "merged to the cap");
    nd_anchor_index_destroy(ld_idx);
    nd_anchor_index_destroy(idx);

    /* 64 full anchors of 64 documents each, one document under all: every
     * posting counted, best first, then slots ascending. */
    REQUIRE(nd_anchor_index_create(&idx, 64) == 0, "create");
    uint32_t q[ND_ANCHOR_QUERY_MAX];
    for (uint32_t i = 0; i < ND_ANCHOR_QUERY_MAX; i++)
        q[i] = 0x27D4EB2Fu * (i + 1);
    CHECK(nd_anchor_index_insert(idx, 7, q, ND_ANCHOR_QUERY_MAX) == 0, "the common one");
    for (uint32_t i = 0; i < ND_ANCHOR_QUERY_MAX; i++)
        for (uint32_t k = 0; k < 70; k++)
            nd_anchor_index_insert(idx, 100 + i * 100 + k, &q[i], 1);
    n = nd_anchor_index_query(idx, q, ND_ANCHOR_QUERY_MAX, h, ND_ANCHOR_HITS_MAX, &full);
    int order = 1;
    for (size_t i = 2; i < n && i < ND_ANCHOR_HITS_MAX; i++)
        order &= h[i].shared == 1 && h[i].slot > h[i - 1].slot;
    CHECK(n == 1 + ND_ANCHOR_QUERY_MAX * 63 && full == ND_ANCHOR_QUERY_MAX && h[0].slot == 7 &&
              h[0].shared == ND_ANCHOR_QUERY_MAX && h[1].slot == 100 && order,
          "all postings: %zu, full %u, first %u/%u", n, full, h[0].slot, h[0].shared);
    nd_anchor_hit few[3];
    CHECK(nd_anchor_index_query(idx, q, ND_ANCHOR_QUERY_MAX, few, 3, NULL) == n &&
              few[0].slot == 7 && few[1].slot == 100 && few[2].slot == 101,
          "a short hits array holds the best");
    nd_anchor_index_destroy(idx);
}

/* Slots up to ND_ANCHOR_SLOTS - 1 keep every bit through an insert, a bulk
 * load and a query (an entry holds 28 of them, next to the anchor's low 12
 * bits); a slot at or above the limit is refused, and nothing is added. */
static void test_slot_range(void)
{
    nd_anchor_index *idx, *bulk;
    CHECK(nd_anchor_index_create(&idx, 8) == 0 && nd_anchor_index_create(&bulk, 8) == 0, "create");
    const uint32_t slots[] = {0, 1, 0x0800000u, 0x0FFFFFFEu, ND_ANCHOR_SLOTS - 1};
    const uint32_t anchors[] = {0x00000FFFu, 0xFFFFFFFFu, 0x12345000u, 0xABCDEFFFu};
    for (size_t i = 0; i < 5; i++)
        CHECK(nd_anchor_index_insert(idx, slots[i], anchors, 4) == 0, "insert %u", slots[i]);
    uint32_t all[5 * 4];
    for (size_t i = 0; i < 5; i++)
        memcpy(all + i * 4, anchors, sizeof(anchors));
    CHECK(nd_anchor_index_insert_many(bulk, slots, all, 5, 4) == 0, "bulk");
    CHECK(nd_anchor_index_insert(idx, ND_ANCHOR_SLOTS, anchors, 4) == -ERANGE, "slot 2^28");
    CHECK(nd_anchor_index_insert(idx, UINT32_MAX, anchors, 4) == -ERANGE, "slot 2^32 - 1");
    const uint32_t too_big[] = {ND_ANCHOR_SLOTS};
    CHECK(nd_anchor_index_insert_many(bulk, too_big, anchors, 1, 4) == -ERANGE, "bulk 2^28");
    for (int which = 0; which < 2; which++) {
        nd_anchor_index *x = which ? bulk : idx;
        nd_anchor_hit h[8];
        size_t n = nd_anchor_index_query(x, anchors, 4, h, 8, NULL);
        int ok = n == 5;
        for (size_t i = 0; i < n && ok; i++)
            ok = h[i].slot == slots[i] && h[i].shared == 4;
        CHECK(ok, "%s: every slot back whole: %zu hits", which ? "bulk" : "inserts", n);
        for (size_t i = 0; i < 4; i++)
            CHECK(nd_anchor_index_postings(x, anchors[i]) == 5, "postings of %08x", anchors[i]);
        /* an anchor differing in one bit of the key or the bucket finds none */
        const uint32_t near[] = {0x00000FFEu, 0x7FFFFFFFu, 0x12344000u, 0xABCDEFF7u};
        CHECK(nd_anchor_index_query(x, near, 4, h, 8, NULL) == 0, "near anchors: none");
        for (size_t i = 0; i < 5; i++)
            CHECK(nd_anchor_index_remove(x, slots[i], anchors, 4) == 4, "remove %u", slots[i]);
    }
    nd_anchor_index_destroy(idx);
    nd_anchor_index_destroy(bulk);
}

int main(void)
{
    UNIT_RUN(test_basic);
    UNIT_RUN(test_bulk_equals_inserts);
    UNIT_RUN(test_loader_equals_inserts);
    UNIT_RUN(test_loader_stopped_while_prefaulting);
    UNIT_RUN(test_concurrent);
    UNIT_RUN(test_skewed_buckets_match_model);
    UNIT_RUN(test_search_starts_near);
    UNIT_RUN(test_hot_anchor_keeps_first);
    UNIT_RUN(test_slot_range);
    return unit_summary("anchor_index");
}
