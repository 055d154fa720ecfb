/* bench_store.c - throughput of the durable registry (server/store/store_lmdb.c).
 *
 *   bench_store [N[,N...] [SECONDS]]
 *
 * For each store size N (default 0,1000000,10000000), in a new store:
 * 1. Fills it with N records through nd_store_put with sync off: random
 *    ids (as clients choose them), increasing registered_at_us (the key, as
 *    the daemon's clock hands it out). Then measures the start-up path:
 *    open + one nd_store_scan over all records, first with data.mdb evicted
 *    from the page cache (posix_fadvise DONTNEED), then warm.
 * 2. Durable registrations/s into that store: 64 submitter threads, each
 *    waiting for its callback before submitting the next (like 64 HTTP
 *    clients), for SECONDS (default 5) with sync=true; then the same with
 *    sync=false as a same-run ceiling. Times come from one shared atomic
 *    counter above every stored time, as the daemon's clock; a submitter may
 *    still queue its time after a later one (the daemon does not: it takes
 *    the time and queues under one lock), so the share of puts that took
 *    the append path is reported, and the bytes the process wrote per
 *    commit (wchar of /proc/self/io: LMDB's page and meta writes), which
 *    does not depend on the disk's latency.
 * 3. The transitional nd_store_delete(id) (a walk over the records on the
 *    commit thread): the time of one delete of a middle id and of one
 *    missing id, during which no other change commits.
 * Before all that, the latency of a 4 KiB write + fdatasync in the bench
 * directory: an LMDB commit syncs twice (pages, then meta page), so with 64
 * submitters the durable rate cannot exceed about 64 / (2 x that).
 *
 * The store lives in a mkdtemp() directory under $ND_BENCH_DIR (default
 * /tmp) and is removed at the end. */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SUBMITTERS 64
#define T0_US 1700000000000000ll /* registered_at_us of record 0 */
#define LAT_BUCKET_US 10
#define LAT_BUCKETS 20000 /* 10 us resolution up to 200 ms */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

typedef struct rec_buf {
    char id[32];
    char meta[64];
    nd_record r;
} rec_buf;

/* Record number seq, registered at T0_US + seq; its id is random-looking. */
static void make_rec(rec_buf *b, uint64_t seq)
{
    uint64_t h = mix64(seq);
    memset(&b->r, 0, sizeof(b->r));
    snprintf(b->id, sizeof(b->id), "doc-%016llx", (unsigned long long)h);
    int n = snprintf(b->meta, sizeof(b->meta), "{\"source\":\"bench\",\"n\":%llu}",
                     (unsigned long long)seq);
    b->r.id = b->id;
    b->r.id_len = strlen(b->id);
    b->r.simhash = mix64(h);
    b->r.version = "simhash-v1";
    b->r.registered_at_us = T0_US + (int64_t)seq;
    b->r.chars = (uint32_t)(500 + seq % 5000);
    memcpy(b->r.text_hash, &h, 8);
    memcpy(b->r.text_hash + 8, &b->r.simhash, 8);
    b->r.meta = b->meta;
    b->r.meta_len = (size_t)n;
}

static nd_store *open_or_die(const char *dir, bool sync)
{
    nd_store_options o;
    nd_store *st;
    char err[256];
    nd_store_options_default(&o);
    o.sync = sync;
    int rc = nd_store_open(&st, dir, &o, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "bench_store: %s\n", err);
        exit(1);
    }
    return st;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb;
    (void)flag;
    (void)f;
    return remove(p);
}

/* ---- 1. fill and scan ------------------------------------------------------ */

typedef struct scan_sum {
    uint64_t n, x, bytes;
} scan_sum;

static int scan_visit(void *arg, const nd_record *r)
{
    scan_sum *s = arg;
    s->n++;
    s->x ^= r->simhash + r->chars + (uint64_t)r->registered_at_us;
    s->bytes += r->id_len + r->meta_len;
    return 0;
}

static void fill(const char *dir, uint64_t n)
{
    nd_store *st = open_or_die(dir, false);
    double t0 = now_s();
    for (uint64_t i = 0; i < n; i++) {
        rec_buf b;
        make_rec(&b, i);
        if (nd_store_put(st, &b.r, NULL, NULL)) {
            fprintf(stderr, "bench_store: put failed\n");
            exit(1);
        }
    }
    nd_store_close(st); /* commits the rest and flushes */
    double t = now_s() - t0;
    char p[600];
    struct stat sb;
    snprintf(p, sizeof(p), "%s/data.mdb", dir);
    stat(p, &sb);
    printf("fill   %10llu records in %7.2f s = %9.0f records/s  (sync=false, queued, "
           "data.mdb %.1f MiB, %.0f B/record)\n",
           (unsigned long long)n, t, (double)n / t, (double)sb.st_size / 1048576.0,
           (double)sb.st_size / (double)n);
}

static void evict(const char *dir)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/data.mdb", dir);
    int fd = open(p, O_RDONLY);
    if (fd < 0)
        return;
    fdatasync(fd);
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (rc)
        printf("  (posix_fadvise: %s; the cold scan may be warm)\n", strerror(rc));
    close(fd);
}

static void scan_bench(const char *dir, uint64_t n)
{
    evict(dir);
    double t0 = now_s();
    nd_store *st = open_or_die(dir, true);
    double t1 = now_s();
    scan_sum s = {0};
    int rc = nd_store_scan(st, scan_visit, &s);
    double t2 = now_s();
    if (rc || s.n != n) {
        fprintf(stderr, "bench_store: scan returned %d with %llu records\n", rc,
                (unsigned long long)s.n);
        exit(1);
    }
    printf("scan   %10llu records in %7.2f s = %9.0f records/s  (cold: open %.3f s + "
           "scan, page cache evicted)\n",
           (unsigned long long)s.n, t2 - t0, (double)s.n / (t2 - t0), t1 - t0);
    scan_sum w = {0};
    t0 = now_s();
    nd_store_scan(st, scan_visit, &w);
    t1 = now_s();
    printf("scan   %10llu records in %7.2f s = %9.0f records/s  (warm)\n", (unsigned long long)w.n,
           t1 - t0, (double)w.n / (t1 - t0));
    t0 = now_s();
    int64_t c = nd_store_count(st);
    t1 = now_s();
    printf("count  %10lld records in %7.1f us\n", (long long)c, (t1 - t0) * 1e6);
    nd_store_close(st);
}

/* ---- 2. concurrent durable registrations ------------------------------------ */

typedef struct submitter {
    pthread_t thread;
    nd_store *st;
    unsigned index;
    sem_t done;
    int status;
    uint64_t puts, errors;
    uint32_t *lat; /* LAT_BUCKETS counters */
} submitter;

static atomic_bool stop_flag;
static _Atomic uint64_t next_seq; /* the shared clock: record numbers */

static void submit_done(void *arg, int status)
{
    submitter *s = arg;
    s->status = status;
    sem_post(&s->done);
}

static void *submit_main(void *arg)
{
    submitter *s = arg;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        rec_buf b;
        make_rec(&b, atomic_fetch_add(&next_seq, 1));
        double t0 = now_s();
        if (nd_store_put(s->st, &b.r, submit_done, s)) {
            s->errors++;
            break;
        }
        while (sem_wait(&s->done) && errno == EINTR) {
        }
        double us = (now_s() - t0) * 1e6;
        size_t k = (size_t)(us / LAT_BUCKET_US);
        s->lat[k < LAT_BUCKETS ? k : LAT_BUCKETS - 1]++;
        if (s->status)
            s->errors++;
        else
            s->puts++;
    }
    return NULL;
}

static double percentile(const uint64_t *hist, uint64_t total, double q)
{
    uint64_t want = (uint64_t)(q * (double)total), acc = 0;
    for (size_t k = 0; k < LAT_BUCKETS; k++) {
        acc += hist[k];
        if (acc > want)
            return (double)(k * LAT_BUCKET_US + LAT_BUCKET_US / 2) / 1000.0;
    }
    return (double)(LAT_BUCKETS * LAT_BUCKET_US) / 1000.0;
}

/* Bytes this process passed to write calls so far (0 if unknown). */
static uint64_t write_bytes(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    char line[128];
    unsigned long long v = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "wchar: %llu", &v) == 1)
            break;
    fclose(f);
    return v;
}

/* Runs the submitters against the store in dir; returns registrations/s. */
static double durable_bench(const char *dir, bool sync, double seconds)
{
    nd_store *st = open_or_die(dir, sync);
    submitter *subs = calloc(SUBMITTERS, sizeof(*subs));
    atomic_store(&stop_flag, false);
    int64_t before = nd_store_count(st);
    uint64_t w0 = write_bytes();
    double t0 = now_s();
    for (unsigned i = 0; i < SUBMITTERS; i++) {
        subs[i].st = st;
        subs[i].index = i;
        subs[i].lat = calloc(LAT_BUCKETS, sizeof(uint32_t));
        sem_init(&subs[i].done, 0, 0);
        pthread_create(&subs[i].thread, NULL, submit_main, &subs[i]);
    }
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&stop_flag, true);
    uint64_t puts = 0, errors = 0, total = 0;
    uint64_t *hist = calloc(LAT_BUCKETS, sizeof(uint64_t));
    for (unsigned i = 0; i < SUBMITTERS; i++) {
        pthread_join(subs[i].thread, NULL);
        puts += subs[i].puts;
        errors += subs[i].errors;
        for (size_t k = 0; k < LAT_BUCKETS; k++)
            hist[k] += subs[i].lat[k];
        free(subs[i].lat);
        sem_destroy(&subs[i].done);
    }
    double t = now_s() - t0;
    for (size_t k = 0; k < LAT_BUCKETS; k++)
        total += hist[k];
    nd_store_stats stats;
    nd_store_get_stats(st, &stats);
    double written = (double)(write_bytes() - w0);
    nd_store_close(st);
    printf("%s, store of %llu, %d submitters, %.1f s: %llu registrations = %.0f/s; "
           "%llu commits, avg batch %.1f, max %llu; appended %.1f%%; written %.1f KiB/commit; "
           "latency p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms; errors %llu\n",
           sync ? "durable (sync=true) " : "ceiling (sync=false)", (unsigned long long)before,
           SUBMITTERS, t, (unsigned long long)puts, (double)puts / t,
           (unsigned long long)stats.commits,
           (double)stats.changes / (double)(stats.commits ? stats.commits : 1),
           (unsigned long long)stats.max_batch,
           100.0 * (double)stats.appended / (double)(stats.changes ? stats.changes : 1),
           written / 1024.0 / (double)(stats.commits ? stats.commits : 1),
           percentile(hist, total, 0.5), percentile(hist, total, 0.99),
           percentile(hist, total, 0.999), (unsigned long long)errors);
    fflush(stdout);
    free(hist);
    free(subs);
    return (double)puts / t;
}

/* Median latency of a 4 KiB pwrite + fdatasync in dir, in ms. */
static double sync_probe(const char *dir)
{
    enum { K = 200 };
    char p[600];
    static char block[4096];
    double lat[K];
    snprintf(p, sizeof(p), "%s/sync-probe", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    for (int i = 0; i < K; i++) {
        double t0 = now_s();
        if (pwrite(fd, block, sizeof(block), (off_t)(i % 16) * 4096) != (ssize_t)sizeof(block) ||
            fdatasync(fd))
            break;
        lat[i] = (now_s() - t0) * 1e3;
    }
    close(fd);
    unlink(p);
    for (int i = 1; i < K; i++) /* insertion sort: K is small */
        for (int j = i; j > 0 && lat[j] < lat[j - 1]; j--) {
            double x = lat[j];
            lat[j] = lat[j - 1];
            lat[j - 1] = x;
        }
    return lat[K / 2];
}

/* One store size: fill, scan, durable and ceiling rates. */
static void bench_size(const char *base, uint64_t n, double seconds)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/nd-bench-store-XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    printf("-- store of %llu records, in %s\n", (unsigned long long)n, dir);
    fflush(stdout);
    if (n) {
        fill(dir, n);
        scan_bench(dir, n);
    }
    atomic_store(&next_seq, n + 1);
    durable_bench(dir, true, seconds);
    durable_bench(dir, false, seconds);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int main(int argc, char **argv)
{
    const char *sizes = argc > 1 ? argv[1] : "0,1000000,10000000";
    double seconds = argc > 2 ? strtod(argv[2], NULL) : 5.0;
    const char *base = getenv("ND_BENCH_DIR");
    if (!base || !*base)
        base = "/tmp";
    printf("bench_store: sizes %s, %d submitters x %.1f s, under %s\n", sizes, SUBMITTERS, seconds,
           base);
    printf("fdatasync of 4 KiB: median %.3f ms (a durable commit syncs twice)\n", sync_probe(base));
    fflush(stdout);
    for (const char *p = sizes; *p;) {
        char *end;
        uint64_t n = strtoull(p, &end, 10);
        if (end == p) {
            fprintf(stderr, "bench_store: bad size list %s\n", sizes);
            return 2;
        }
        bench_size(base, n, seconds);
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}
