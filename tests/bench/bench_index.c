/* bench_index.c - lib/index against a linear scan, in one run.
 *
 * For each N (1M and 10M by default, 100M with --100m): build the index from
 * uniform random fingerprints (insert rate, bytes per document = RSS increase
 * / N), then at k = 3 and k = 6 measure queries/s for near queries (a stored
 * fingerprint with 1-3 bits flipped) and random queries, the same near
 * queries through a linear xor+popcount scan, and recall against that scan.
 * A skew run stores 1M fingerprints sharing block 0 (one huge bucket). Each
 * scenario runs in a forked child so that its RSS is measured from a clean
 * process. The last line is the N = 10M, k = 3 summary.
 *
 * Usage: bench_index [--100m] [--quick] [--seconds S]
 *   --quick   N = 100k and 1M only, skew 100k (a smoke run)
 *   --seconds time spent per qps figure (default 1.0) */
#include "index.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NQUERIES 200000 /* pre-generated queries per kind */
#define HITS_CAP 4096
#define RECALL_NEAR 100 /* queries checked against brute force, per k */
#define RECALL_OTHER 20 /* random, and in-big-bucket for the skew run */

typedef struct summary {
    double qps, scan_qps, bytes_per_doc, recall;
    int ok;    /* the scenario ran */
    int exact; /* every recall check matched the scan exactly */
} summary;

static double opt_seconds = 1.0;

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static double now_s(void)
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
        fprintf(stderr, "bench_index: out of memory\n");
        exit(1);
    }
    return p;
}

/* A stored fingerprint with 1..3 distinct bits flipped. */
static uint64_t near_query(uint64_t *s, const uint64_t *fps, size_t n)
{
    uint64_t h = fps[rng_next(s) % n];
    unsigned flips = 1 + (unsigned)(rng_next(s) % 3);
    uint64_t mask = 0;
    while ((unsigned)__builtin_popcountll(mask) < flips)
        mask |= UINT64_C(1) << (rng_next(s) % 64);
    return h ^ mask;
}

/* ---- the linear-scan baseline ------------------------------------------- */

#define SCAN_BODY                                                                                  \
    size_t found = 0;                                                                              \
    for (size_t i = 0; i < n; i++) {                                                               \
        unsigned d = (unsigned)__builtin_popcountll(fps[i] ^ q);                                   \
        if (d <= k) {                                                                              \
            if (found < cap)                                                                       \
                out[found] = (nd_index_hit){(uint32_t)i, d};                                       \
            found++;                                                                               \
        }                                                                                          \
    }                                                                                              \
    return found;

/* All i with |fps[i] ^ q| <= k, slot = i, in slot order (unsorted by
 * distance); returns the count. Same popcount instruction as the index. */
#if defined(__x86_64__) && !defined(__POPCNT__) && defined(__GNUC__)
__attribute__((target("popcnt"))) static size_t
scan_popcnt(const uint64_t *fps, size_t n, uint64_t q, unsigned k, nd_index_hit *out, size_t cap)
{
    SCAN_BODY
}
#define HAVE_SCAN_POPCNT 1
#endif

static size_t scan_plain(const uint64_t *fps, size_t n, uint64_t q, unsigned k, nd_index_hit *out,
                         size_t cap)
{
    SCAN_BODY
}

static size_t scan(const uint64_t *fps, size_t n, uint64_t q, unsigned k, nd_index_hit *out,
                   size_t cap)
{
#ifdef HAVE_SCAN_POPCNT
    if (__builtin_cpu_supports("popcnt"))
        return scan_popcnt(fps, n, q, k, out, cap);
#endif
    return scan_plain(fps, n, q, k, out, cap);
}

static int hit_cmp(const void *a, const void *b)
{
    const nd_index_hit *x = a, *y = b;
    if (x->distance != y->distance)
        return x->distance < y->distance ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* ---- measurements ------------------------------------------------------- */

typedef struct ctx {
    nd_index *idx;
    const uint64_t *fps;
    size_t n;
    const uint64_t *near, *random, *worst; /* NQUERIES each (worst optional) */
    nd_index_hit *hits;
} ctx;

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs queries qs[from..from+n) through the index or the scan; returns the
 * number of hits. */
static size_t run_queries(const ctx *c, const uint64_t *qs, unsigned k, bool use_scan, size_t from,
                          size_t n)
{
    size_t hits = 0, found;
    for (size_t i = from; i < from + n; i++) {
        uint64_t q = qs[i % NQUERIES];
        if (use_scan)
            found = scan(c->fps, c->n, q, k, c->hits, HITS_CAP);
        else
            nd_index_query(c->idx, q, k, c->hits, HITS_CAP, &found);
        hits += found;
    }
    return hits;
}

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Queries/s of the index (or the scan) over qs: the median of SLICES
 * slices of opt_seconds / SLICES each, every slice timed in this thread's
 * CPU time so that time lost to other processes on this shared machine is
 * not counted. Also sets *hits_per_q and *wall (queries/s in wall time). */
#define SLICES 10
static double qps(const ctx *c, const uint64_t *qs, unsigned k, bool use_scan, double *hits_per_q,
                  double *wall)
{
    double rate[SLICES], w0 = now_s();
    size_t done = 0, hits = 0, batch = use_scan ? 1 : 200;
    for (int sl = 0; sl < SLICES; sl++) {
        size_t n = 0;
        double c0 = cpu_s(), dt;
        do {
            hits += run_queries(c, qs, k, use_scan, done + n, batch);
            n += batch;
            dt = cpu_s() - c0;
        } while (dt < opt_seconds / SLICES || n < 2);
        done += n;
        rate[sl] = (double)n / dt;
    }
    *wall = (double)done / (now_s() - w0);
    *hits_per_q = (double)hits / (double)done;
    qsort(rate, SLICES, sizeof(rate[0]), dbl_cmp);
    return (rate[SLICES / 2 - 1] + rate[SLICES / 2]) / 2;
}

/* Compares index output with the scan for some queries: returns recall
 * (found / expected) and counts wrong extra hits in *extra. */
static double recall(const ctx *c, unsigned k, size_t *extra, size_t *expected)
{
    static nd_index_hit want[HITS_CAP];
    size_t want_total = 0, matched = 0;
    *extra = 0;
    for (int i = 0; i < RECALL_NEAR + 2 * RECALL_OTHER; i++) {
        uint64_t q = i < RECALL_NEAR                  ? c->near[i]
                     : i < RECALL_NEAR + RECALL_OTHER ? c->random[i]
                     : c->worst                       ? c->worst[i]
                                                      : c->random[i];
        size_t nw = scan(c->fps, c->n, q, k, want, HITS_CAP), got;
        nw = nw < HITS_CAP ? nw : HITS_CAP;
        qsort(want, nw, sizeof(*want), hit_cmp);
        nd_index_query(c->idx, q, k, c->hits, HITS_CAP, &got);
        got = got < HITS_CAP ? got : HITS_CAP;
        size_t a = 0, b = 0;
        while (a < nw && b < got) {
            int cmp = hit_cmp(&want[a], &c->hits[b]);
            matched += cmp == 0;
            *extra += cmp > 0;
            a += cmp <= 0;
            b += cmp >= 0;
        }
        *extra += got - b;
        want_total += nw;
    }
    *expected = want_total;
    return want_total ? (double)matched / (double)want_total : 1.0;
}

/* Measures one k and prints one line; fills s for k = 3. */
static void measure_k(const ctx *c, const char *label, unsigned k, summary *s)
{
    double near_hits, rand_hits, worst_hits, scan_hits, wall[4], worst = 0;
    double near = qps(c, c->near, k, false, &near_hits, &wall[0]);
    double rnd = qps(c, c->random, k, false, &rand_hits, &wall[1]);
    if (c->worst)
        worst = qps(c, c->worst, k, false, &worst_hits, &wall[2]);
    double sq = qps(c, c->near, k, true, &scan_hits, &wall[3]);
    size_t extra, expected;
    double r = recall(c, k, &extra, &expected);
    printf("%s k=%u near: qps=%.0f (%.2f us, %.2f hits/q, wall %.0f) random: "
           "qps=%.0f (%.2f hits/q)",
           label, k, near, 1e6 / near, near_hits, wall[0], rnd, rand_hits);
    if (c->worst)
        printf(" in-big-bucket: qps=%.0f (%.1f us)", worst, 1e6 / worst);
    printf(" | scan_qps=%.1f (wall %.1f) speedup=%.0fx | recall=%.3f "
           "(%zu hits, %zu extra)\n",
           sq, wall[3], near / sq, r, expected, extra);
    fflush(stdout);
    if (s && k == 3) {
        s->qps = near;
        s->scan_qps = sq;
        s->recall = r;
    }
    if (s && (extra || expected == 0 || r != 1.0))
        s->exact = 0;
}

/* Readers query while one writer inserts: aggregate figures (2 cores). */
typedef struct mt {
    const ctx *c;
    atomic_bool stop;
    atomic_size_t queries;
} mt;

static void *mt_reader(void *arg)
{
    mt *m = arg;
    nd_index_hit hits[64];
    size_t i = (size_t)(uintptr_t)&hits % NQUERIES, local = 0;
    while (!atomic_load_explicit(&m->stop, memory_order_relaxed)) {
        size_t found;
        nd_index_query(m->c->idx, m->c->near[i++ % NQUERIES], 3, hits, 64, &found);
        local++;
    }
    atomic_fetch_add(&m->queries, local);
    return NULL;
}

static void measure_concurrent(const ctx *c, const char *label)
{
    mt m = {.c = c};
    pthread_t r[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&r[i], NULL, mt_reader, &m);
    uint64_t s = 99;
    size_t writes = 0;
    double t0 = now_s(), t = t0;
    while (t - t0 < opt_seconds) {
        for (int b = 0; b < 1000; b++, writes++)
            nd_index_insert(c->idx, rng_next(&s), (uint32_t)(c->n + writes));
        t = now_s();
    }
    atomic_store(&m.stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(r[i], NULL);
    printf("%s concurrent, 2 readers + 1 writer: k=3 near qps=%.0f total while "
           "inserting %.0f/s\n",
           label, (double)atomic_load(&m.queries) / (t - t0), (double)writes / (t - t0));
    fflush(stdout);
}

/* ---- scenarios ---------------------------------------------------------- */

/* Builds and measures one index of n fingerprints; skew: all share block 0. */
static summary run(size_t n, bool skew)
{
    summary sum = {.exact = 1};
    char label[64];
    snprintf(label, sizeof(label), "%sN=%zu", skew ? "skew " : "", n);
    uint64_t s = 1 + n + skew;
    uint64_t *fps = xmalloc(n * sizeof(*fps));
    for (size_t i = 0; i < n; i++)
        fps[i] = skew ? (rng_next(&s) & ~UINT64_C(0xFFFF)) | 0xABCD : rng_next(&s);

    nd_index *idx = NULL;
    if (nd_index_create(&idx) < 0)
        exit(1);
    double rss0 = rss_bytes(), t0 = now_s();
    for (size_t i = 0; i < n; i++)
        if (nd_index_insert(idx, fps[i], (uint32_t)i) < 0) {
            fprintf(stderr, "insert failed\n");
            exit(1);
        }
    double build = now_s() - t0, rss1 = rss_bytes();
    sum.bytes_per_doc = (rss1 - rss0) / (double)n;
    printf("%s build: %.2f s, inserts/s=%.0f, index rss=%.1f MB, "
           "bytes_per_doc=%.2f\n",
           label, build, (double)n / build, (rss1 - rss0) / 1e6, sum.bytes_per_doc);
    fflush(stdout);

    uint64_t *near = xmalloc(NQUERIES * sizeof(*near));
    uint64_t *rnd = xmalloc(NQUERIES * sizeof(*rnd));
    uint64_t *worst = skew ? xmalloc(NQUERIES * sizeof(*worst)) : NULL;
    for (size_t i = 0; i < NQUERIES; i++) {
        near[i] = near_query(&s, fps, n);
        rnd[i] = rng_next(&s);
        if (worst)
            worst[i] = (rng_next(&s) & ~UINT64_C(0xFFFF)) | 0xABCD;
    }
    ctx c = {idx, fps, n, near, rnd, worst, xmalloc(HITS_CAP * sizeof(nd_index_hit))};
    measure_k(&c, label, 3, &sum);
    measure_k(&c, label, 6, NULL);
    if (!skew && n <= 1000000)
        measure_concurrent(&c, label);
    sum.ok = 1;
    nd_index_destroy(idx);
    free(fps);
    free(near);
    free(rnd);
    free(worst);
    free(c.hits);
    return sum;
}

/* Runs a scenario in a child process; returns its summary. */
static summary run_forked(size_t n, bool skew)
{
    summary sum = {0};
    int fd[2];
    fflush(stdout);
    if (pipe(fd) < 0)
        return sum;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        sum = run(n, skew);
        if (write(fd[1], &sum, sizeof(sum)) != (ssize_t)sizeof(sum))
            _exit(1);
        _exit(0);
    }
    close(fd[1]);
    if (pid < 0 || read(fd[0], &sum, sizeof(sum)) != (ssize_t)sizeof(sum))
        sum.ok = 0;
    close(fd[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return sum;
}

int main(int argc, char **argv)
{
    bool big = false, quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--100m"))
            big = true;
        else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            opt_seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--100m] [--quick] [--seconds S]\n", argv[0]);
            return 2;
        }
    }
    bool popcnt = true;
#if defined(__x86_64__)
    popcnt = __builtin_cpu_supports("popcnt");
#endif
    printf("bench_index: one thread unless stated, %ld cpus, popcnt=%d; qps = "
           "median of %d slices over %.1f s of thread CPU time; scan = "
           "xor+popcount over a uint64 array\n",
           sysconf(_SC_NPROCESSORS_ONLN), popcnt, SLICES, opt_seconds);
    size_t small = quick ? 100000 : 1000000, main_n = quick ? 1000000 : 10000000;
    summary r[4] = {run_forked(small, false),
                    run_forked(small, true),
                    run_forked(main_n, false),
                    {.ok = 1, .exact = 1}};
    if (big)
        r[3] = run_forked(100000000, false);
    int bad = 0;
    for (int i = 0; i < 4; i++)
        bad += !r[i].ok || !r[i].exact;
    if (bad)
        fprintf(stderr, "bench_index: %d scenario(s) failed or were not exact\n", bad);
    summary m = r[2];
    printf("index: N=%zu k=3 qps=%.0f scan_qps=%.1f bytes_per_doc=%.2f "
           "recall=%.3f\n",
           main_n, m.qps, m.scan_qps, m.bytes_per_doc, m.recall);
    return bad ? 1 : 0;
}
