/* bench_sketch.c - the cost of the two-stage verdict's new parts.
 *
 *   bench_sketch [--corpus CORPUS.jsonl[.gz]] [--passes N] [--docs N] [--m M]
 *                [--load-threads T] [--limit DOCS_PER_LANGUAGE]
 *
 * 1. Per language of the evaluation corpus (default
 *    ../shared/eval/data/corpus.jsonl.gz beside the source tree): best-of-N
 *    seconds over every document for nd_fingerprint() (today's per-document
 *    work), nd_sketch_text() (registration: own mode + 16 anchors),
 *    nd_sketch_text_modes() (query: both modes + 32 anchors each) and
 *    nd_sketch_query() (a query that finds no candidate: anchors only), next to
 *    XXH3-64 of each document in the same run. MB/s, us/doc, ratios.
 * 2. nd_sketch_compare() of corpus sketches (as decoded from the store):
 *    ns per comparison.
 * 3. The anchor index with --docs documents (default 10,000,000) of --m
 *    (16) uniformly random anchors each, loaded with insert_many (as
 *    start-up does): load time, the process RSS increase per document and
 *    the index's own byte count per document; then queries of 2 *
 *    ND_ANCHORS_QUERY anchors (half of one stored document's, half random):
 *    us per query; then single
 *    inserts and removes: us each; then the attacker's queries, every
 *    anchor hot (held by 1000 decoys, or by 200 different documents each):
 *    us per query. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "anchor_index.h"
#include "fingerprint.h"
#include "sketch.h"

typedef struct doc_set {
    char **text;
    size_t *len;
    size_t n, cap, bytes;
} doc_set;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%lu %lu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "bench_sketch: out of memory\n");
        exit(1);
    }
    return p;
}

static void doc_set_add(doc_set *d, const char *text, size_t len)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 1024;
        d->text = realloc(d->text, d->cap * sizeof(*d->text));
        d->len = realloc(d->len, d->cap * sizeof(*d->len));
        if (!d->text || !d->len)
            exit(1);
    }
    d->text[d->n] = xmalloc(len ? len : 1);
    memcpy(d->text[d->n], text, len);
    d->len[d->n++] = len;
    d->bytes += len;
}

static size_t load_limit = (size_t)-1; /* --limit: documents per language */

static int load(const char *path, doc_set *zh, doc_set *en)
{
    size_t n = strlen(path);
    int is_pipe = n > 3 && strcmp(path + n - 3, ".gz") == 0;
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "gzip -dc '%s'", path);
    FILE *f = is_pipe ? popen(cmd, "r") : fopen(path, "r");
    if (!f)
        return -errno;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        const char *lang = json_string_value(json_object_get(o, "lang"));
        json_t *text = json_object_get(o, "text");
        doc_set *to = lang && strcmp(lang, "zh") == 0 ? zh : en;
        if (lang && json_is_string(text) && to->n < load_limit)
            doc_set_add(strcmp(lang, "zh") == 0 ? zh : en, json_string_value(text),
                        json_string_length(text));
        json_decref(o);
    }
    free(line);
    is_pipe ? pclose(f) : fclose(f);
    return 0;
}

enum what { W_XXH3, W_FP, W_SKETCH, W_QUERY, W_LAZY };

typedef struct tools {
    nd_fingerprinter *fp;
    nd_fp_scratch *fps;
    nd_sketcher *sk;
    nd_sk_scratch *sks;
} tools;

static double time_pass(const doc_set *d, tools *t, enum what w, int passes, uint64_t *sink)
{
    static nd_sketch s[2];
    static nd_anchors a[2];
    double best = 1e30;
    for (int p = 0; p < passes; p++) {
        double t0 = now();
        for (size_t i = 0; i < d->n; i++) {
            nd_fingerprint_result r;
            switch (w) {
            case W_XXH3: *sink ^= XXH3_64bits(d->text[i], d->len[i]); break;
            case W_FP:
                if (nd_fingerprint(t->fp, t->fps, d->text[i], d->len[i], &r) == 0)
                    *sink ^= r.simhash;
                break;
            case W_SKETCH:
                if (nd_sketch_text(t->sk, t->sks, d->text[i], d->len[i], s, a, 16, NULL) == 0)
                    *sink ^= s[0].values[0];
                break;
            case W_QUERY:
                if (nd_sketch_text_modes(t->sk, t->sks, d->text[i], d->len[i], s, a, 32, NULL) >= 0)
                    *sink ^= s[1].values[0];
                break;
            case W_LAZY: /* a query that finds no candidate: anchors only */
                if (nd_sketch_query(t->sk, t->sks, d->text[i], d->len[i], a, 32, NULL) >= 0)
                    *sink ^= a[0].a[0];
                break;
            }
        }
        double el = now() - t0;
        if (el < best)
            best = el;
    }
    return best;
}

static void report(const char *lang, const doc_set *d, tools *t, int passes)
{
    uint64_t sink = 0;
    time_pass(d, t, W_QUERY, 1, &sink); /* warm scratch and caches */
    double tb = time_pass(d, t, W_XXH3, passes, &sink);
    double tf = time_pass(d, t, W_FP, passes, &sink);
    double ts = time_pass(d, t, W_SKETCH, passes, &sink);
    double tq = time_pass(d, t, W_QUERY, passes, &sink);
    double tl = time_pass(d, t, W_LAZY, passes, &sink);
    double mb = (double)d->bytes / 1e6, nd = (double)d->n;
    printf("%s: docs=%zu avg_bytes=%.0f | xxh3 %.0f MB/s | fingerprint %.1f MB/s %.2f us/doc | "
           "sketch (register) %.1f MB/s %.2f us/doc = %.2fx fingerprint | sketch both modes "
           "(query) %.1f MB/s %.2f us/doc = %.2fx fingerprint | query without candidates "
           "(nd_sketch_query: anchors only) %.1f MB/s %.2f us/doc = %.2fx fingerprint "
           "(sink %llx)\n",
           lang, d->n, (double)d->bytes / nd, mb / tb, mb / tf, tf * 1e6 / nd, mb / ts,
           ts * 1e6 / nd, ts / tf, mb / tq, tq * 1e6 / nd, tq / tf, mb / tl, tl * 1e6 / nd, tl / tf,
           (unsigned long long)sink);
}

static void bench_compare(const doc_set *d, tools *t)
{
    size_t n = d->n < 2000 ? d->n : 2000;
    nd_sketch *s = xmalloc(n * sizeof(*s));
    for (size_t i = 0; i < n; i++)
        nd_sketch_text(t->sk, t->sks, d->text[i], d->len[i], &s[i], NULL, 0, NULL);
    double sink = 0, t0 = now();
    size_t cmps = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < 64; j++, cmps++) {
            nd_sketch_estimate e;
            nd_sketch_compare(&s[i], &s[(i + j * 31 + 1) % n], &e);
            sink += e.resemblance;
        }
    double el = now() - t0;
    printf("compare: %.0f ns per nd_sketch_compare (%zu comparisons of en corpus sketches; "
           "sink %.1f)\n",
           el * 1e9 / (double)cmps, cmps, sink);
    /* What a registration does per candidate: decode its stored sketch,
     * then the bounded comparison at the default thresholds and at the
     * third stage's gray zone (containment 0.05). */
    uint8_t *enc = xmalloc(n * ND_SKETCH_ENCODED_MAX);
    size_t *len = xmalloc(n * sizeof(*len));
    for (size_t i = 0; i < n; i++)
        len[i] = nd_sketch_encode(&s[i], enc + i * ND_SKETCH_ENCODED_MAX, ND_SKETCH_ENCODED_MAX);
    nd_verdict_params p[2];
    nd_verdict_params_default(&p[0]);
    p[1] = p[0];
    p[1].min_containment = p[1].min_resemblance = 0.05;
    static nd_sketch dsk;
    for (int k = 0; k < 2; k++) {
        double best = 0;
        for (int pass = 0; pass < 3; pass++) {
            t0 = now();
            cmps = 0;
            for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < 64; j++, cmps++) {
                    size_t o = (i + j * 31 + 1) % n;
                    nd_sketch_estimate e;
                    if (nd_sketch_decode(enc + o * ND_SKETCH_ENCODED_MAX, len[o], &dsk) == 0)
                        sink += nd_sketch_compare_bounded(&s[i], &dsk, &p[k], &e);
                }
            el = now() - t0;
            best = pass == 0 || el < best ? el : best;
        }
        printf("verify: %.0f ns per decode + nd_sketch_compare_bounded at %s (best of 3, %zu "
               "pairs; sink %.1f)\n",
               best * 1e9 / (double)cmps, k ? "the gray zone's bound" : "the default thresholds",
               cmps, sink);
    }
    free(enc);
    free(len);
    free(s);
}

static uint64_t rng_state = 88172645463325252ull;
static uint32_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static unsigned load_threads = 2;

/* Hits asked per query: as many as the registry asks (every hit the index
 * can give; an older index without that bound: its candidate budget). */
#ifdef ND_ANCHOR_HITS_MAX
#define BENCH_HITS ND_ANCHOR_HITS_MAX
#else
#define BENCH_HITS ND_VERDICT_MAX_VERIFY
#endif

static void bench_anchor_index(size_t docs, size_t m)
{
    uint32_t *slots = xmalloc(docs * sizeof(uint32_t));
    uint32_t *anchors = xmalloc(docs * m * sizeof(uint32_t));
    for (size_t i = 0; i < docs; i++) {
        slots[i] = (uint32_t)i;
        for (size_t j = 0; j < m; j++)
            anchors[i * m + j] = rng();
    }
    nd_anchor_index *idx;
    if (nd_anchor_index_create(&idx, ND_VERDICT_POSTING_CAP) < 0)
        exit(1);
    double rss0 = rss_bytes(), t0 = now();
    if (nd_anchor_index_insert_many_threads(idx, slots, anchors, docs, m, load_threads) < 0) {
        fprintf(stderr, "insert_many: out of memory\n");
        exit(1);
    }
    double load = now() - t0, rss1 = rss_bytes();
    nd_anchor_stats st;
    nd_anchor_index_stats(idx, &st);
    printf("anchor index: docs=%zu m=%zu load (insert_many, %u threads) %.2f s | RSS +%.1f MB = "
           "%.1f B/doc | "
           "index bytes %.1f B/doc (%llu entries, %llu buckets used)\n",
           docs, m, load_threads, load, (rss1 - rss0) / 1e6, (rss1 - rss0) / (double)docs,
           (double)st.bytes / (double)docs, (unsigned long long)st.entries,
           (unsigned long long)st.buckets_used);
    /* Queries: 2 * ND_ANCHORS_QUERY anchors (both modes): the first half of a
     * stored document's (as a copy has), the rest random. */
    /* Best of 5 rounds of 40,000 (the machine is shared). */
    size_t nq = 40000, found = 0, nprobe = 2 * ND_ANCHORS_QUERY;
    uint32_t q[2 * ND_ANCHORS_QUERY];
    static nd_anchor_hit hits[BENCH_HITS];
    double tq = 1e9;
    for (int round = 0; round < 5; round++) {
        t0 = now();
        for (size_t i = 0; i < nq; i++) {
            size_t d = rng() % docs;
            for (size_t j = 0; j < nprobe; j++)
                q[j] = j < nprobe / 2 && j < m ? anchors[d * m + j] : rng();
            size_t n = nd_anchor_index_query(idx, q, nprobe, hits, BENCH_HITS, NULL);
            found += n && hits[0].slot == d;
        }
        tq = now() - t0 < tq ? now() - t0 : tq;
    }
    printf("anchor query (%zu anchors): %.2f us/query, best of 5 (%zu of %zu found their "
           "document first)\n",
           nprobe, tq * 1e6 / (double)nq, found, 5 * nq);
    /* Single inserts / removes (registrations and deletes). */
    size_t nw = 100000;
    double ti = 1e9, tr = 1e9;
    for (int round = 0; round < 5; round++) { /* best of 5 rounds of nw / 5 */
        t0 = now();
        for (size_t i = round * nw / 5; i < (round + 1) * nw / 5; i++) {
            uint32_t a[16];
            for (size_t j = 0; j < 16; j++)
                a[j] = rng();
            nd_anchor_index_insert(idx, (uint32_t)(docs + i), a, 16);
        }
        ti = now() - t0 < ti ? now() - t0 : ti;
        t0 = now();
        for (size_t i = round * nw / 5; i < (round + 1) * nw / 5; i++)
            nd_anchor_index_remove(idx, slots[i], anchors + i * m, m);
        tr = now() - t0 < tr ? now() - t0 : tr;
    }
    printf("anchor insert (16 anchors): %.2f us; remove: %.2f us (best of 5)\n",
           ti * 1e6 / (double)(nw / 5), tr * 1e6 / (double)(nw / 5));
    /* The attacker's queries: every one of a query's 2 * ND_ANCHORS_QUERY
     * anchors is hot. "same": 1000 decoys, each under all of them; "distinct":
     * 200 documents under each anchor, each under that one only (the most
     * postings a query can read). */
    uint32_t hq[2 * ND_ANCHORS_QUERY];
    for (size_t j = 0; j < nprobe; j++)
        hq[j] = rng();
    uint32_t hslot = (uint32_t)(docs + 2 * nw);
    for (size_t k = 0; k < 1000; k++)
        nd_anchor_index_insert(idx, hslot++, hq, nprobe);
    size_t nh = 4000, hn = 0;
    double th_same = 1e9, th_dist = 1e9;
    for (int round = 0; round < 5; round++) {
        t0 = now();
        for (size_t i = 0; i < nh; i++)
            hn += nd_anchor_index_query(idx, hq, nprobe, hits, BENCH_HITS, NULL);
        th_same = now() - t0 < th_same ? now() - t0 : th_same;
    }
    size_t found_same = hn / nh / 5;
    for (size_t j = 0; j < nprobe; j++)
        hq[j] = rng();
    for (size_t j = 0; j < nprobe; j++)
        for (size_t k = 0; k < 200; k++)
            nd_anchor_index_insert(idx, hslot++, &hq[j], 1);
    hn = 0;
    for (int round = 0; round < 5; round++) {
        t0 = now();
        for (size_t i = 0; i < nh; i++)
            hn += nd_anchor_index_query(idx, hq, nprobe, hits, BENCH_HITS, NULL);
        th_dist = now() - t0 < th_dist ? now() - t0 : th_dist;
    }
    printf("hot anchor query (%zu anchors, hits asked %d), best of 5: same 1000 decoys %.2f us "
           "(%zu found); 200 distinct per anchor %.2f us (%zu found)\n",
           nprobe, BENCH_HITS, th_same * 1e6 / (double)nh, found_same, th_dist * 1e6 / (double)nh,
           hn / nh / 5);
    nd_anchor_index_destroy(idx);
    free(slots);
    free(anchors);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int passes = 3;
    size_t docs = 10000000, m = ND_ANCHORS_STORE;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--passes") == 0 && i + 1 < argc)
            passes = atoi(argv[++i]);
        else if (strcmp(argv[i], "--docs") == 0 && i + 1 < argc)
            docs = (size_t)atoll(argv[++i]);
        else if (strcmp(argv[i], "--m") == 0 && i + 1 < argc)
            m = (size_t)atoll(argv[++i]);
        else if (strcmp(argv[i], "--load-threads") == 0 && i + 1 < argc)
            load_threads = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc)
            load_limit = (size_t)atoll(argv[++i]);
        else if (strcmp(argv[i], "--corpus") == 0 && i + 1 < argc)
            path = argv[++i];
        else {
            fprintf(stderr, "usage: bench_sketch [--corpus F] [--passes N] [--docs N] [--m M] "
                            "[--load-threads T] [--limit DOCS_PER_LANGUAGE]\n");
            return 2;
        }
    }
    char def[4096];
    if (!path) {
        const char *root = getenv("ND_SOURCE_ROOT");
        snprintf(def, sizeof(def), "%s/../shared/eval/data/corpus.jsonl.gz", root ? root : ".");
        path = def;
    }
    tools t;
    if (nd_fingerprinter_create(&t.fp) < 0 || nd_fp_scratch_create(&t.fps) < 0 ||
        nd_sketcher_create(&t.sk) < 0 || nd_sk_scratch_create(&t.sks) < 0)
        return 1;
    doc_set zh = {0}, en = {0};
    if (passes > 0) {
        if (load(path, &zh, &en) < 0 || zh.n + en.n == 0) {
            fprintf(stderr, "bench_sketch: cannot read %s (skipping the text part)\n", path);
        } else {
            report("zh", &zh, &t, passes);
            report("en", &en, &t, passes);
            bench_compare(&en, &t);
        }
    }
    if (docs)
        bench_anchor_index(docs, m);
    return 0;
}
