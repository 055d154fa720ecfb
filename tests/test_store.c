/* test_store.c - unit tests for server/store/store_lmdb.c on real LMDB files.
 *
 * Every test works in its own directory under a mkdtemp() root in /tmp.
 * Tests that need a small or read-only filesystem mount a tmpfs there and
 * are skipped (with a message) where mount(2) is not permitted.
 *
 * Records are keyed by registered_at_us. make_rec() derives it from the id
 * (prefix, number), so a test can rebuild a record to compare it: each
 * prefix owns a block of 10^6 microseconds, in which numbers count up. */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <lmdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "unit.h"

static char root[64];

/* CHECK_RC(expr, want): expr (an int or -errno) equals want; a failure
 * names both and strerror of the result. */
#define CHECK_RC(expr, want)                                                                       \
    do {                                                                                           \
        long long got_ = (long long)(expr);                                                        \
        if (got_ != (long long)(want)) {                                                           \
            unit_failf(__FILE__, __LINE__, #expr, "%lld (%s), want %lld", got_,                    \
                       strerror((int)-got_), (long long)(want));                                   \
        } else {                                                                                   \
            unit_passed++;                                                                         \
        }                                                                                          \
    } while (0)

/* ---- helpers ------------------------------------------------------------- */

static void path_in(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", root, name);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb;
    (void)flag;
    (void)f;
    return remove(p);
}

static void rm_rf(const char *p)
{
    nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static nd_store_options opts_fast(void)
{
    nd_store_options o;
    nd_store_options_default(&o);
    o.sync = false;
    o.map_size = 64u << 20;
    return o;
}

static nd_store *open_ok(const char *dir, const nd_store_options *o)
{
    nd_store *st = NULL;
    char err[256] = "";
    int rc = nd_store_open(&st, dir, o, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "open %s: %d %s\n", dir, rc, err);
        exit(1);
    }
    return st;
}

/* A record with caller-owned buffers. */
typedef struct rec_buf {
    char id[ND_ID_MAX + 1];
    char version[ND_VERSION_MAX + 1];
    char *meta;
    char *account, *policy;         /* copy_visit's copies (free_rec frees) */
    char client[ND_CLIENT_MAX + 1]; /* copy_visit's copy */
    nd_record r;
} rec_buf;

/* The time block of a prefix (FNV-1a; the prefixes used here do not
 * collide: a collision would show as -EEXIST). */
static int64_t prefix_base(const char *prefix)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = prefix; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return 1700000000000000ll + (int64_t)(h % 1000000u) * 1000000;
}

static void make_rec(rec_buf *b, const char *prefix, unsigned i, size_t meta_len)
{
    memset(&b->r, 0, sizeof(b->r));
    snprintf(b->id, sizeof(b->id), "%s%06u", prefix, i);
    snprintf(b->version, sizeof(b->version), "simhash-v%u", 1 + i % 2);
    b->r.id = b->id;
    b->r.id_len = strlen(b->id);
    b->r.simhash = 0x9E3779B97F4A7C15ull * (i + 1);
    b->r.version = b->version;
    b->r.registered_at_us = prefix_base(prefix) + i;
    b->r.chars = 1000 + i;
    for (int k = 0; k < 16; k++)
        b->r.text_hash[k] = (uint8_t)(i * 7 + k);
    b->meta = b->account = b->policy = NULL;
    if (meta_len) {
        b->meta = malloc(meta_len + 1);
        int n = snprintf(b->meta, meta_len + 1, "{\"n\":%u,\"pad\":\"", i);
        for (size_t k = (size_t)n; k + 2 < meta_len; k++)
            b->meta[k] = (char)('a' + (k + i) % 26);
        if (meta_len >= 2) {
            b->meta[meta_len - 2] = '"';
            b->meta[meta_len - 1] = '}';
        }
        b->meta[meta_len] = '\0';
        b->r.meta = b->meta;
        b->r.meta_len = meta_len;
    }
}

static void free_rec(rec_buf *b)
{
    free(b->meta);
    free(b->account);
    free(b->policy);
    b->meta = b->account = b->policy = NULL;
}

static bool rec_equal(const nd_record *a, const nd_record *b)
{
    return a->id_len == b->id_len && memcmp(a->id, b->id, a->id_len) == 0 &&
           a->simhash == b->simhash && strcmp(a->version, b->version) == 0 &&
           a->registered_at_us == b->registered_at_us && a->chars == b->chars &&
           memcmp(a->text_hash, b->text_hash, 16) == 0 && (a->meta == NULL) == (b->meta == NULL) &&
           a->meta_len == b->meta_len &&
           (a->meta == NULL || memcmp(a->meta, b->meta, a->meta_len) == 0) &&
           a->account_len == b->account_len &&
           (a->account_len == 0 || memcmp(a->account, b->account, a->account_len) == 0) &&
           (a->policy == NULL) == (b->policy == NULL) && a->policy_len == b->policy_len &&
           (a->policy == NULL || memcmp(a->policy, b->policy, a->policy_len) == 0) &&
           a->status == b->status && a->client_len == b->client_len &&
           (a->client_len == 0 || memcmp(a->client, b->client, a->client_len) == 0);
}

/* The test's copy of a record (nd_store_get hands out borrowed pointers). */
typedef struct rec_copy {
    rec_buf b;
    int visits;
} rec_copy;

static int copy_visit(void *arg, const nd_record *r)
{
    rec_copy *c = arg;
    c->visits++;
    c->b.r = *r;
    memcpy(c->b.id, r->id, r->id_len);
    c->b.r.id = c->b.id;
    snprintf(c->b.version, sizeof(c->b.version), "%s", r->version);
    c->b.r.version = c->b.version;
    free(c->b.meta);
    c->b.meta = NULL;
    if (r->meta) {
        CHECK(r->meta[r->meta_len] == '\0');
        c->b.meta = malloc(r->meta_len + 1);
        memcpy(c->b.meta, r->meta, r->meta_len + 1);
        c->b.r.meta = c->b.meta;
    }
    free(c->b.account);
    free(c->b.policy);
    c->b.account = c->b.policy = NULL;
    CHECK((r->account == NULL) == (r->account_len == 0));
    if (r->account) {
        CHECK(r->account[r->account_len] == '\0');
        c->b.account = malloc(r->account_len + 1);
        memcpy(c->b.account, r->account, r->account_len + 1);
        c->b.r.account = c->b.account;
    }
    if (r->policy) {
        CHECK(r->policy[r->policy_len] == '\0');
        c->b.policy = malloc(r->policy_len + 1);
        memcpy(c->b.policy, r->policy, r->policy_len + 1);
        c->b.r.policy = c->b.policy;
    }
    CHECK((r->client == NULL) == (r->client_len == 0) && r->client_len <= ND_CLIENT_MAX);
    c->b.r.client = NULL;
    if (r->client && r->client_len <= ND_CLIENT_MAX) {
        CHECK(r->client[r->client_len] == '\0');
        memcpy(c->b.client, r->client, r->client_len + 1);
        c->b.r.client = c->b.client;
    }
    return 0;
}

/* Gets want's time and compares the record with want. */
static void check_stored(nd_store *st, const nd_record *want)
{
    rec_copy c = {0};
    int rc = nd_store_get(st, want->registered_at_us, copy_visit, &c);
    CHECK_RC(rc, 0);
    if (rc == 0) {
        CHECK(c.visits == 1);
        CHECK(rec_equal(&c.b.r, want));
    }
    free_rec(&c.b);
}

/* Synchronous put/delete: waits for the callback. */
typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    int status;
} waiter;

static void waiter_cb(void *arg, int status)
{
    waiter *w = arg;
    pthread_mutex_lock(&w->mu);
    w->calls++;
    w->status = status;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int waiter_finish(waiter *w, int queued)
{
    if (queued == 0) {
        pthread_mutex_lock(&w->mu);
        while (w->calls == 0)
            pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
        CHECK(w->calls == 1);
    } else {
        CHECK(w->calls == 0);
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    return queued ? queued : w->status;
}

static int put_sync(nd_store *st, const nd_record *r)
{
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    return waiter_finish(&w, nd_store_put(st, r, waiter_cb, &w));
}

/* Deletes the record stored at time t, which must have id id. */
static int del_at_sync(nd_store *st, const char *id, int64_t t)
{
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    return waiter_finish(&w, nd_store_delete_at(st, id, strlen(id), t, waiter_cb, &w));
}

static int replace_sync(nd_store *st, const nd_record *r)
{
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    return waiter_finish(&w, nd_store_replace(st, r, waiter_cb, &w));
}

static int del_rec_sync(nd_store *st, const nd_record *r)
{
    return del_at_sync(st, r->id, r->registered_at_us);
}

/* A change that writes nothing, to wait for everything queued before it. */
static void flush(nd_store *st)
{
    CHECK_RC(del_at_sync(st, "flush", 1), -ENOENT);
}

/* Asynchronous callbacks counted per change. */
typedef struct slot {
    atomic_int calls;
    atomic_int status;
} slot;

static atomic_long slot_total;

static void slot_cb(void *arg, int status)
{
    slot *s = arg;
    atomic_store(&s->status, status);
    atomic_fetch_add(&s->calls, 1);
    atomic_fetch_add(&slot_total, 1);
}

/* Checks that a scan visits records in registration order. */
typedef struct scan_state {
    int n;
    int64_t last;
    bool ordered;
    int64_t times[16]; /* the first 16 times seen */
} scan_state;

static int scan_order_visit(void *arg, const nd_record *r)
{
    scan_state *s = arg;
    if (s->n > 0 && r->registered_at_us <= s->last)
        s->ordered = false;
    s->last = r->registered_at_us;
    if (s->n < 16)
        s->times[s->n] = r->registered_at_us;
    s->n++;
    return 0;
}

/* ---- tests ---------------------------------------------------------------- */

static int stop_visit(void *arg, const nd_record *r)
{
    (void)r;
    return ++*(int *)arg == 2 ? 42 : 0;
}

static void test_basic(void)
{
    char dir[128];
    path_in(dir, sizeof(dir), "basic");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    CHECK(nd_store_writable(st));
    CHECK_RC(nd_store_count(st), 0);

    rec_buf b[3];
    make_rec(&b[0], "c-", 3, 0); /* no meta */
    make_rec(&b[1], "a-", 1, 40);
    make_rec(&b[2], "b-", 2, 1); /* one-byte meta */
    b[2].r.meta = "";            /* empty meta text is still "present" */
    b[2].r.meta_len = 0;
    for (int i = 0; i < 3; i++)
        CHECK_RC(put_sync(st, &b[i].r), 0);
    CHECK_RC(nd_store_count(st), 3);
    for (int i = 0; i < 3; i++)
        check_stored(st, &b[i].r);

    scan_state s = {.ordered = true};
    CHECK_RC(nd_store_scan(st, scan_order_visit, &s), 0);
    CHECK(s.n == 3);
    CHECK(s.ordered);
    int seen = 0;
    CHECK_RC(nd_store_scan(st, stop_visit, &seen), 42);
    CHECK(seen == 2);

    rec_copy c = {0};
    CHECK_RC(nd_store_get(st, b[0].r.registered_at_us + 1, copy_visit, &c), -ENOENT);
    CHECK(c.visits == 0);
    CHECK_RC(nd_store_get(st, -1, copy_visit, &c), -EINVAL);

    CHECK_RC(del_rec_sync(st, &b[1].r), 0);
    CHECK_RC(del_rec_sync(st, &b[1].r), -ENOENT);
    CHECK_RC(nd_store_count(st), 2);
    CHECK_RC(nd_store_get(st, b[1].r.registered_at_us, copy_visit, &c), -ENOENT);

    /* A put at a stored time is refused and changes nothing. */
    rec_buf r2;
    make_rec(&r2, "c-", 3, 100);
    r2.r.simhash = 77;
    snprintf(r2.version, sizeof(r2.version), "simhash-v9");
    CHECK_RC(put_sync(st, &r2.r), -EEXIST);
    CHECK_RC(nd_store_count(st), 2);
    check_stored(st, &b[0].r);

    /* Re-registration of an id, as the daemon does it: delete at the old
     * time, put at a new one. */
    CHECK_RC(del_rec_sync(st, &b[0].r), 0);
    r2.r.registered_at_us += 1000;
    CHECK_RC(put_sync(st, &r2.r), 0);
    CHECK_RC(nd_store_count(st), 2);
    check_stored(st, &r2.r);

    nd_store_stats stats;
    nd_store_get_stats(st, &stats);
    CHECK(stats.changes == 8 && stats.commits >= 1 && stats.failed_commits == 0);
    CHECK(stats.failed_changes == 1); /* the -EEXIST */
    nd_store_close(st);

    /* Reopen: everything persists (here with the default options). */
    st = open_ok(dir, NULL);
    CHECK_RC(nd_store_count(st), 2);
    check_stored(st, &r2.r);
    check_stored(st, &b[2].r);
    nd_store_close(st);
    for (int i = 0; i < 3; i++)
        free_rec(&b[i]);
    free_rec(&r2);
    nd_store_close(NULL);
}

static void test_invalid(void)
{
    char dir[128];
    path_in(dir, sizeof(dir), "invalid");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    rec_buf b;
    make_rec(&b, "x-", 1, 10);
    slot s = {0};
    char longid[ND_ID_MAX + 2];
    memset(longid, 'i', sizeof(longid));

    nd_record r = b.r;
    r.id_len = 0;
    CHECK_RC(nd_store_put(st, &r, slot_cb, &s), -EINVAL);
    r = b.r;
    r.id = longid;
    r.id_len = ND_ID_MAX + 1;
    CHECK_RC(nd_store_put(st, &r, slot_cb, &s), -EINVAL);
    r = b.r;
    r.version = NULL;
    CHECK_RC(nd_store_put(st, &r, slot_cb, &s), -EINVAL);
    r = b.r;
    r.version = "";
    CHECK_RC(nd_store_put(st, &r, slot_cb, &s), -EINVAL);
    r = b.r;
    r.version = "0123456789012345678901234567890123456789";
    CHECK_RC(nd_store_put(st, &r, slot_cb, &s), -EINVAL);
    r = b.r;
    r.meta = NULL;
    CHECK_RC(nd_store_put(st, &r, slot_cb, &s), -EINVAL);
    r = b.r;
    r.meta_len = (size_t)ND_META_MAX + 1;
    CHECK_RC(nd_store_put(st, &r, slot_cb, &s), -EINVAL);
    r = b.r;
    r.registered_at_us = -1;
    CHECK_RC(nd_store_put(st, &r, slot_cb, &s), -EINVAL);
    CHECK_RC(nd_store_delete_at(st, "", 0, 5, slot_cb, &s), -EINVAL);
    CHECK_RC(nd_store_delete_at(st, NULL, 3, 5, slot_cb, &s), -EINVAL);
    CHECK_RC(nd_store_delete_at(st, longid, ND_ID_MAX + 1, 5, slot_cb, &s), -EINVAL);
    CHECK_RC(nd_store_delete_at(st, "x", 1, -5, slot_cb, &s), -EINVAL);

    /* Longest valid id and version, NULL callback. */
    r = b.r;
    r.id = longid;
    r.id_len = ND_ID_MAX;
    r.version = "01234567890123456789012345678901";
    CHECK_RC(nd_store_put(st, &r, NULL, NULL), 0);
    nd_store_close(st);
    CHECK(atomic_load(&s.calls) == 0);
    st = open_ok(dir, &o);
    CHECK_RC(nd_store_count(st), 1);
    check_stored(st, &r);
    nd_store_close(st);
    free_rec(&b);
}

/* Changes queued without waiting are applied in order, each callback runs
 * exactly once, and close() commits what is still queued. */
static void test_order_and_close_drain(void)
{
    enum { N = 5000 };
    char dir[128];
    path_in(dir, sizeof(dir), "drain");
    nd_store_options o = opts_fast();
    o.max_batch = 1; /* one change per transaction: the queue bound */
    nd_store *st = open_ok(dir, &o);
    slot *s = calloc(N + 3, sizeof(*s));
    rec_buf a1, a2, b;
    make_rec(&a1, "order-", 1, 20);
    make_rec(&a2, "order-", 1, 30);
    a2.r.simhash = 1;
    make_rec(&b, "order-", 2, 0);
    /* a2 has a1's time: it is accepted only if a1's delete came first. */
    CHECK_RC(nd_store_put(st, &a1.r, slot_cb, &s[0]), 0);
    CHECK_RC(nd_store_delete_at(st, a1.id, a1.r.id_len, a1.r.registered_at_us, slot_cb, &s[1]), 0);
    CHECK_RC(nd_store_delete_at(st, b.id, b.r.id_len, b.r.registered_at_us, slot_cb, &s[2]),
             0); /* missing */
    CHECK_RC(nd_store_put(st, &a2.r, slot_cb, &s[3]), 0);
    for (unsigned i = 4; i < N + 3; i++) {
        rec_buf x;
        make_rec(&x, "drain-", i, 16);
        CHECK_RC(nd_store_put(st, &x.r, slot_cb, &s[i]), 0);
        free_rec(&x);
    }
    nd_store_stats stats;
    nd_store_get_stats(st, &stats);
    CHECK(stats.queued <= 1024);
    nd_store_close(st);
    int bad = 0;
    for (unsigned i = 0; i < N + 3; i++) {
        int want = i == 2 ? -ENOENT : 0;
        if (atomic_load(&s[i].calls) != 1 || atomic_load(&s[i].status) != want)
            bad++;
    }
    CHECK(bad == 0);
    st = open_ok(dir, &o);
    CHECK_RC(nd_store_count(st), N); /* N-1 drain records + order-000001 */
    check_stored(st, &a2.r);
    nd_store_get_stats(st, &stats);
    nd_store_close(st);
    free(s);
    free_rec(&a1);
    free_rec(&a2);
    free_rec(&b);
}

/* A batch holding deletes of missing records (no such time; a time whose
 * record has another id) still commits its puts. */
static void test_batch_mixed(void)
{
    enum { N = 200 };
    char dir[128];
    path_in(dir, sizeof(dir), "mixed");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    slot *s = calloc(2 * N, sizeof(*s));
    for (unsigned i = 0; i < N; i++) {
        rec_buf x;
        char id[32];
        make_rec(&x, "m-", i, 8);
        snprintf(id, sizeof(id), "missing-%u", i);
        int64_t t = i % 2 ? x.r.registered_at_us - 1 : x.r.registered_at_us + 1;
        CHECK_RC(nd_store_delete_at(st, id, strlen(id), t, slot_cb, &s[2 * i]), 0);
        CHECK_RC(nd_store_put(st, &x.r, slot_cb, &s[2 * i + 1]), 0);
        free_rec(&x);
    }
    nd_store_close(st);
    for (unsigned i = 0; i < N; i++) {
        CHECK(atomic_load(&s[2 * i].status) == -ENOENT);
        CHECK(atomic_load(&s[2 * i + 1].status) == 0);
    }
    st = open_ok(dir, &o);
    CHECK_RC(nd_store_count(st), N);
    nd_store_close(st);
    free(s);
}

/* Many submitters, each waiting for its callback (like HTTP clients), with
 * durable commits: transactions must be shared. Times come from one shared
 * counter, as the daemon's clock; two submitters may still queue theirs in
 * the other order, which the store must accept. */
typedef struct submitter {
    nd_store *st;
    unsigned t, n;
    int bad;
} submitter;

static _Atomic int64_t group_clock = 1700000000000000ll;

static void *submit_main(void *arg)
{
    submitter *sb = arg;
    for (unsigned i = 0; i < sb->n; i++) {
        rec_buf x;
        char prefix[16];
        snprintf(prefix, sizeof(prefix), "t%02u-", sb->t);
        make_rec(&x, prefix, i, 50);
        x.r.registered_at_us = atomic_fetch_add(&group_clock, 1);
        if (put_sync(sb->st, &x.r) != 0)
            sb->bad++;
        free_rec(&x);
    }
    return NULL;
}

static void test_group_commit(void)
{
    enum { T = 32, PER = 60 };
    char dir[128];
    path_in(dir, sizeof(dir), "group");
    nd_store_options o;
    nd_store_options_default(&o);
    o.map_size = 64u << 20; /* sync stays true */
    nd_store *st = open_ok(dir, &o);
    pthread_t th[T];
    submitter sb[T];
    for (unsigned t = 0; t < T; t++) {
        sb[t] = (submitter){st, t, PER, 0};
        pthread_create(&th[t], NULL, submit_main, &sb[t]);
    }
    int bad = 0;
    for (unsigned t = 0; t < T; t++) {
        pthread_join(th[t], NULL);
        bad += sb[t].bad;
    }
    CHECK(bad == 0);
    nd_store_stats stats;
    nd_store_get_stats(st, &stats);
    unit_note("group commit: %llu changes in %llu commits (avg %.1f, max %llu), %llu appended",
              (unsigned long long)stats.changes, (unsigned long long)stats.commits,
              (double)stats.changes / (double)(stats.commits ? stats.commits : 1),
              (unsigned long long)stats.max_batch, (unsigned long long)stats.appended);
    CHECK(stats.changes == T * PER);
    CHECK(stats.appended > T * PER / 2);
    CHECK(stats.commits * 3 <= stats.changes); /* average batch >= 3 */
    CHECK(stats.max_batch > 1);
    CHECK_RC(nd_store_count(st), T * PER);
    scan_state ss = {.ordered = true};
    CHECK_RC(nd_store_scan(st, scan_order_visit, &ss), 0);
    CHECK(ss.n == T * PER && ss.ordered);
    nd_store_close(st);
}

/* Readers on several threads while the commit thread writes (MDB_NOTLS). */
typedef struct reader {
    nd_store *st;
    int bad;
    atomic_bool *stop;
} reader;

static int count_visit(void *arg, const nd_record *r)
{
    (void)r;
    ++*(long *)arg;
    return 0;
}

static void *reader_main(void *arg)
{
    reader *rd = arg;
    unsigned i = 0;
    while (!atomic_load(rd->stop)) {
        rec_buf x;
        make_rec(&x, "pre-", i % 100, 0);
        rec_copy c = {0};
        if (nd_store_get(rd->st, x.r.registered_at_us, copy_visit, &c) != 0 ||
            !rec_equal(&c.b.r, &x.r))
            rd->bad++;
        free_rec(&c.b);
        if (i % 50 == 0) {
            long n = 0;
            if (nd_store_scan(rd->st, count_visit, &n) != 0 || n < 100 ||
                nd_store_count(rd->st) < 100)
                rd->bad++;
        }
        i++;
    }
    return NULL;
}

static void test_concurrent_reads(void)
{
    enum { R = 4 };
    char dir[128];
    path_in(dir, sizeof(dir), "readers");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    for (unsigned i = 0; i < 100; i++) {
        rec_buf x;
        make_rec(&x, "pre-", i, 0);
        CHECK_RC(nd_store_put(st, &x.r, NULL, NULL), 0);
    }
    flush(st);
    atomic_bool stop = false;
    pthread_t th[R];
    reader rd[R];
    for (int i = 0; i < R; i++) {
        rd[i] = (reader){st, 0, &stop};
        pthread_create(&th[i], NULL, reader_main, &rd[i]);
    }
    for (unsigned i = 0; i < 2000; i++) {
        rec_buf x;
        make_rec(&x, "new-", i, 30);
        CHECK_RC(put_sync(st, &x.r), 0);
        free_rec(&x);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < R; i++) {
        pthread_join(th[i], NULL);
        CHECK(rd[i].bad == 0);
    }
    CHECK_RC(nd_store_count(st), 2100);
    nd_store_close(st);
}

static void test_lock(void)
{
    char dir[128], err[256] = "";
    path_in(dir, sizeof(dir), "lock");
    nd_store_options o = opts_fast();
    nd_store *a = open_ok(dir, &o), *b = NULL;
    CHECK_RC(nd_store_open(&b, dir, &o, err, sizeof(err)), -EBUSY);
    CHECK(b == NULL);
    CHECK(strstr(err, "in use") && strstr(err, dir));
    unit_note("second open: %s", err);
    nd_store_close(a);

    /* Another process holds it. */
    int ready[2], done[2];
    CHECK(pipe(ready) == 0 && pipe(done) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        nd_store *c = NULL;
        char e[256];
        char x = nd_store_open(&c, dir, &o, e, sizeof(e)) == 0 ? 'y' : 'n';
        if (write(ready[1], &x, 1) != 1 || read(done[0], &x, 1) < 0)
            _exit(2);
        nd_store_close(c);
        _exit(0);
    }
    char x = 0;
    CHECK(read(ready[0], &x, 1) == 1 && x == 'y');
    CHECK_RC(nd_store_open(&b, dir, &o, err, sizeof(err)), -EBUSY);
    char pidtxt[32];
    snprintf(pidtxt, sizeof(pidtxt), "pid %ld", (long)pid);
    CHECK(strstr(err, pidtxt) != NULL);
    CHECK(write(done[1], "x", 1) == 1);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(ready[0]);
    close(ready[1]);
    close(done[0]);
    close(done[1]);
    /* Released by the holder's exit/close. */
    b = open_ok(dir, &o);
    nd_store_close(b);
}

static void test_dir_errors(void)
{
    char dir[192], file[128], err[256];
    nd_store *st = NULL;
    nd_store_options o = opts_fast();

    path_in(dir, sizeof(dir), "no/such/parent");
    CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), -ENOENT);
    CHECK(st == NULL && strstr(err, dir));
    unit_note("missing: %s", err);

    path_in(file, sizeof(file), "plainfile");
    FILE *f = fopen(file, "w");
    fputs("x", f);
    fclose(f);
    CHECK_RC(nd_store_open(&st, file, &o, err, sizeof(err)), -ENOTDIR);
    unit_note("file: %s", err);
    snprintf(dir, sizeof(dir), "%s/sub", file);
    CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), -ENOTDIR);
    unit_note("under a file: %s", err);
    CHECK_RC(nd_store_open(&st, "", &o, err, sizeof(err)), -EINVAL);

    /* A missing directory whose parent exists is created. */
    path_in(dir, sizeof(dir), "created");
    st = open_ok(dir, &o);
    nd_store_close(st);

    /* Read-only filesystem (needs mount(2)). */
    char mnt[128];
    path_in(mnt, sizeof(mnt), "romnt");
    mkdir(mnt, 0700);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m,mode=0700")) {
        unit_note("SKIP read-only filesystem: mount: %s", strerror(errno));
        return;
    }
    snprintf(dir, sizeof(dir), "%s/data", mnt);
    mkdir(dir, 0700);
    CHECK(mount("tmpfs", mnt, "tmpfs", MS_REMOUNT | MS_RDONLY, "size=1m") == 0);
    CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), -EROFS);
    unit_note("read-only: %s", err);
    snprintf(dir, sizeof(dir), "%s/data2", mnt);
    CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), -EROFS);
    umount2(mnt, MNT_DETACH);
}

static void corrupt_file(const char *dir, off_t off, size_t len, off_t truncate_to)
{
    char p[192];
    snprintf(p, sizeof(p), "%s/data.mdb", dir);
    int fd = open(p, O_RDWR);
    CHECK(fd >= 0);
    if (truncate_to >= 0) {
        CHECK(ftruncate(fd, truncate_to) == 0);
    } else {
        unsigned char *junk = malloc(len);
        for (size_t i = 0; i < len; i++)
            junk[i] = (unsigned char)(i * 131 + 17);
        CHECK(pwrite(fd, junk, len, off) == (ssize_t)len);
        free(junk);
    }
    close(fd);
}

static void make_store(const char *dir, unsigned n)
{
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    for (unsigned i = 0; i < n; i++) {
        rec_buf x;
        make_rec(&x, "k-", i, 64);
        CHECK_RC(nd_store_put(st, &x.r, NULL, NULL), 0);
        free_rec(&x);
    }
    nd_store_close(st);
}

static void test_corrupt(void)
{
    char dir[128], err[256];
    nd_store *st = NULL;
    nd_store_options o = opts_fast();

    path_in(dir, sizeof(dir), "garbage");
    make_store(dir, 500);
    corrupt_file(dir, 0, 16384, -1);
    CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), -EINVAL);
    CHECK(st == NULL && strstr(err, "corrupt"));
    unit_note("garbage: %s", err);

    path_in(dir, sizeof(dir), "truncated");
    make_store(dir, 2000);
    corrupt_file(dir, 0, 0, 3 * 4096);
    CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), -EINVAL);
    unit_note("truncated: %s", err);
    corrupt_file(dir, 0, 0, 0);
    CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), -EINVAL);
    unit_note("empty: %s", err);
    corrupt_file(dir, 0, 0, 100);
    CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), -EINVAL);
    unit_note("short: %s", err);

    /* An LMDB environment of some other program. */
    path_in(dir, sizeof(dir), "foreign");
    mkdir(dir, 0700);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {5, "hello"}, v = {5, "world"};
    CHECK(mdb_env_create(&env) == 0 && mdb_env_open(env, dir, 0, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 && mdb_dbi_open(txn, NULL, 0, &dbi) == 0);
    CHECK(mdb_put(txn, dbi, &k, &v, 0) == 0 && mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), -EINVAL);
    unit_note("foreign: %s", err);

    /* A value of an unknown layout: scan, get and delete report it, no
     * crash; so does a key that is not 8 bytes. */
    path_in(dir, sizeof(dir), "badvalue");
    make_store(dir, 10);
    rec_buf k0, k1;
    make_rec(&k0, "k-", 0, 64);
    make_rec(&k1, "k-", 1, 64);
    unsigned char key0[8];
    for (int i = 0; i < 8; i++)
        key0[i] = (unsigned char)((uint64_t)k0.r.registered_at_us >> (56 - 8 * i));
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 4) == 0 &&
          mdb_env_open(env, dir, 0, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 && mdb_dbi_open(txn, "records", 0, &dbi) == 0);
    MDB_val bk = {8, key0}, bv = {50, (char[50]){9}};
    CHECK(mdb_put(txn, dbi, &bk, &bv, 0) == 0 && mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    st = open_ok(dir, &o);
    long n = 0;
    CHECK_RC(nd_store_scan(st, count_visit, &n), -EBADMSG);
    rec_copy c = {0};
    CHECK_RC(nd_store_get(st, k0.r.registered_at_us, copy_visit, &c), -EBADMSG);
    CHECK_RC(nd_store_get(st, k1.r.registered_at_us, copy_visit, &c), 0);
    CHECK(c.visits == 1 && rec_equal(&c.b.r, &k1.r));
    CHECK_RC(del_rec_sync(st, &k0.r), -EBADMSG); /* cannot verify the id */
    CHECK_RC(del_rec_sync(st, &k1.r), 0);        /* its neighbour still goes */
    CHECK_RC(nd_store_count(st), 9);
    free_rec(&c.b);
    nd_store_close(st);

    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 4) == 0 &&
          mdb_env_open(env, dir, 0, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 && mdb_dbi_open(txn, "records", 0, &dbi) == 0);
    MDB_val sk = {7, "k-00000"}, sv = {k1.r.id_len, k1.id};
    CHECK(mdb_del(txn, dbi, &bk, NULL) == 0 && mdb_put(txn, dbi, &sk, &sv, 0) == 0 &&
          mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    st = open_ok(dir, &o);
    n = 0;
    CHECK_RC(nd_store_scan(st, count_visit, &n), -EBADMSG);
    CHECK(n == 8); /* the short key sorts after the times */
    nd_store_close(st);
    free_rec(&k0);
    free_rec(&k1);
}

/* A store of format 1 (keyed by id, written before registration-time keys)
 * or of an unknown format is refused with a clear reason. */
static void make_format(const char *dir, uint32_t format)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi info, recs;
    unsigned char fmt[8] = {'n', 'd', 's', 't', (unsigned char)format, (unsigned char)(format >> 8),
                            0,   0};
    MDB_val k = {6, "format"}, v = {8, fmt};
    MDB_val rk = {8, "doc-0001"}, rv = {50, (char[50]){1}};
    mkdir(dir, 0700);
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 4) == 0 &&
          mdb_env_open(env, dir, 0, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 &&
          mdb_dbi_open(txn, "info", MDB_CREATE, &info) == 0 &&
          mdb_dbi_open(txn, "records", MDB_CREATE, &recs) == 0 &&
          mdb_put(txn, info, &k, &v, 0) == 0 && mdb_put(txn, recs, &rk, &rv, 0) == 0 &&
          mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
}

static void test_old_format(void)
{
    char dir[128], err[512];
    nd_store *st = NULL;
    nd_store_options o = opts_fast();
    path_in(dir, sizeof(dir), "format1");
    make_format(dir, 1);
    CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), -EINVAL);
    CHECK(st == NULL && strstr(err, "store format 1") && strstr(err, "older neardup") &&
          strstr(err, dir));
    unit_note("format 1: %s", err);
    /* Refused again: nothing was changed by the first attempt. */
    CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), -EINVAL);

    path_in(dir, sizeof(dir), "format3");
    make_format(dir, 3);
    CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "format 3") && strstr(err, "newer neardup"));
    unit_note("format 3: %s", err);

    /* What this build writes. */
    path_in(dir, sizeof(dir), "format2");
    nd_store_close(open_ok(dir, &o));
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi info;
    MDB_val k = {6, "format"}, v;
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 4) == 0 &&
          mdb_env_open(env, dir, MDB_RDONLY, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0 &&
          mdb_dbi_open(txn, "info", 0, &info) == 0 && mdb_get(txn, info, &k, &v) == 0);
    CHECK(v.mv_size == 8 && memcmp(v.mv_data, "ndst\2\0\0\0", 8) == 0);
    mdb_txn_abort(txn);
    mdb_env_close(env);
}

/* The layout on disk: the key is registered_at_us, 8 bytes big-endian;
 * the value starts with format byte 3 and a fixed 38-byte header (byte 3:
 * the number of anchors), then the id, version, meta and anchors: a record
 * without account, policy and revoked status is written in layout 3, so
 * that the build before layout 4 still reads it. */
static void test_layout(void)
{
    char dir[128];
    path_in(dir, sizeof(dir), "layout");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    rec_buf x;
    make_rec(&x, "L-", 5, 20);
    x.r.registered_at_us = 0x0102030405060708ll;
    CHECK_RC(put_sync(st, &x.r), 0);
    nd_store_close(st);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {8, "\1\2\3\4\5\6\7\x08"}, v;
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 4) == 0 &&
          mdb_env_open(env, dir, MDB_RDONLY, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0 &&
          mdb_dbi_open(txn, "records", 0, &dbi) == 0 && mdb_get(txn, dbi, &k, &v) == 0);
    const unsigned char *p = v.mv_data;
    size_t vlen = strlen(x.version), ilen = x.r.id_len;
    CHECK(v.mv_size == 38 + ilen + vlen + 1 + 20 + 1);
    CHECK(p[0] == 3 && p[1] == 1 && p[2] == vlen && p[3] == 0);
    CHECK(p[4] == ilen && p[5] == 0);
    CHECK(p[6] == (x.r.chars & 0xff) && p[7] == ((x.r.chars >> 8) & 0xff));
    CHECK(p[10] == (x.r.simhash & 0xff) && p[17] == (x.r.simhash >> 56));
    CHECK(memcmp(p + 18, x.r.text_hash, 16) == 0 && p[34] == 20 && p[35] == 0);
    CHECK(memcmp(p + 38, x.id, ilen) == 0);
    CHECK(memcmp(p + 38 + ilen, x.version, vlen + 1) == 0);
    CHECK(memcmp(p + 39 + ilen + vlen, x.meta, 21) == 0);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    free_rec(&x);
}

typedef struct sketch_seen {
    size_t calls;
    size_t len[4];
    uint8_t first[4];
} sketch_seen;

static int sketch_visit(void *arg, size_t i, const uint8_t *buf, size_t len)
{
    sketch_seen *s = arg;
    s->calls++;
    if (i < 4) {
        s->len[i] = len;
        s->first[i] = buf && len ? buf[0] : 0;
    }
    return 0;
}

typedef struct anchors_seen {
    uint32_t n;
    uint8_t bytes[16];
} anchors_seen;

static int anchors_visit(void *arg, const nd_record *r)
{
    anchors_seen *a = arg;
    a->n = r->nanchors;
    if (r->nanchors && r->nanchors <= 4)
        memcpy(a->bytes, r->anchors, 4 * r->nanchors);
    return r->sketch == NULL && r->sketch_len == 0 ? 0 : -1;
}

/* Visits of nd_store_sketches(), in order: index, length and first
 * byte of each; stop_at makes that visit fail. */
typedef struct sketch_walk {
    size_t calls, stop_at;
    size_t i[32], len[32];
    int first[32];
} sketch_walk;

static int sketch_walk_visit(void *arg, size_t i, const uint8_t *buf, size_t len)
{
    sketch_walk *w = arg;
    if (w->calls < 32) {
        w->i[w->calls] = i;
        w->len[w->calls] = len;
        w->first[w->calls] = buf && len ? buf[0] : -1;
    }
    w->calls++;
    return w->calls == w->stop_at ? -EIO : 0;
}

/* Many keys, as a registration's candidates give: every index visited
 * once, in order, with its own sketch (or none: not stored, no key, never
 * registered), at every count from 0 to 20; a visit's error ends the walk
 * there and is returned. */
static void test_sketches_many(void)
{
    char dir[128];
    path_in(dir, sizeof(dir), "sketches-many");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    int64_t keys[20];
    int want[20];
    for (unsigned i = 0; i < 20; i++) {
        rec_buf b;
        make_rec(&b, "SA-", i, 0);
        uint8_t sk[40] = {0};
        sk[0] = (uint8_t)(0x40 + i);
        if (i % 5 != 3) { /* every fifth without a sketch */
            b.r.sketch = sk;
            b.r.sketch_len = 8 + i;
        }
        keys[i] = b.r.registered_at_us;
        want[i] = i % 5 != 3 ? 0x40 + (int)i : -1;
        if (i % 7 == 6) { /* no key, or a key never written */
            keys[i] = i % 2 ? -1 : b.r.registered_at_us + 1000000;
            want[i] = -1;
        } else {
            CHECK_RC(put_sync(st, &b.r), 0);
        }
    }
    for (size_t n = 0; n <= 20; n++) {
        sketch_walk w = {0};
        CHECK_RC(nd_store_sketches(st, keys, n, sketch_walk_visit, &w), 0);
        CHECK(w.calls == n);
        for (size_t k = 0; k < n; k++) {
            CHECK(w.i[k] == k && w.first[k] == want[k]);
            CHECK(w.len[k] == (want[k] < 0 ? 0 : 8 + k));
        }
    }
    for (size_t stop = 1; stop <= 20; stop += 6) {
        sketch_walk w = {.stop_at = stop};
        CHECK_RC(nd_store_sketches(st, keys, 20, sketch_walk_visit, &w), -EIO);
        CHECK(w.calls == stop && w.i[stop - 1] == stop - 1);
    }
    nd_store_close(st);
}

/* Anchors in the record, the sketch in its own database under the same key:
 * written with the record (put, replace), gone with it (delete, or a
 * replace without one); a layout-2 value (no anchors) still reads. */
static void test_sketches(void)
{
    char dir[128];
    path_in(dir, sizeof(dir), "sketches");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    rec_buf a, b;
    make_rec(&a, "S-", 1, 10);
    make_rec(&b, "S-", 2, 0);
    uint8_t anchors[8] = {1, 2, 3, 4, 5, 6, 7, 8}, sk1[12] = {0xA1, 9}, sk2[20] = {0xB2};
    a.r.anchors = anchors;
    a.r.nanchors = 2;
    a.r.sketch = sk1;
    a.r.sketch_len = sizeof(sk1);
    CHECK_RC(put_sync(st, &a.r), 0);
    CHECK_RC(put_sync(st, &b.r), 0); /* no anchors, no sketch */
    int64_t keys[3] = {a.r.registered_at_us, b.r.registered_at_us, -1};
    sketch_seen seen = {0};
    CHECK_RC(nd_store_sketches(st, keys, 3, sketch_visit, &seen), 0);
    CHECK(seen.calls == 3 && seen.len[0] == sizeof(sk1) && seen.first[0] == 0xA1 &&
          seen.len[1] == 0 && seen.len[2] == 0);
    anchors_seen an = {0};
    CHECK_RC(nd_store_get(st, a.r.registered_at_us, anchors_visit, &an), 0);
    CHECK(an.n == 2 && memcmp(an.bytes, anchors, 8) == 0);
    check_stored(st, &a.r);
    /* Replace: another sketch; then none (removed). */
    a.r.sketch = sk2;
    a.r.sketch_len = sizeof(sk2);
    a.r.nanchors = 1;
    CHECK_RC(replace_sync(st, &a.r), 0);
    memset(&seen, 0, sizeof(seen));
    CHECK_RC(nd_store_sketches(st, keys, 1, sketch_visit, &seen), 0);
    CHECK(seen.len[0] == sizeof(sk2) && seen.first[0] == 0xB2);
    CHECK_RC(nd_store_get(st, a.r.registered_at_us, anchors_visit, &an), 0);
    CHECK(an.n == 1);
    a.r.sketch = NULL;
    a.r.sketch_len = 0;
    CHECK_RC(replace_sync(st, &a.r), 0);
    memset(&seen, 0, sizeof(seen));
    CHECK_RC(nd_store_sketches(st, keys, 1, sketch_visit, &seen), 0);
    CHECK(seen.calls == 1 && seen.len[0] == 0);
    /* Delete takes the sketch with the record. */
    a.r.sketch = sk1;
    a.r.sketch_len = sizeof(sk1);
    CHECK_RC(replace_sync(st, &a.r), 0);
    CHECK_RC(del_rec_sync(st, &a.r), 0);
    memset(&seen, 0, sizeof(seen));
    CHECK_RC(nd_store_sketches(st, keys, 1, sketch_visit, &seen), 0);
    CHECK(seen.calls == 1 && seen.len[0] == 0);
    /* Bad sizes are refused. */
    a.r.sketch_len = ND_STORE_SKETCH_MAX + 1;
    CHECK_RC(nd_store_put(st, &a.r, NULL, NULL), -EINVAL);
    a.r.sketch_len = 0;
    a.r.anchors = NULL;
    a.r.nanchors = 3;
    CHECK_RC(nd_store_put(st, &a.r, NULL, NULL), -EINVAL);
    nd_store_close(st);
    /* A layout-2 value written by the previous release reads (no anchors). */
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 4) == 0 &&
          mdb_env_open(env, dir, 0, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 && mdb_dbi_open(txn, "records", 0, &dbi) == 0);
    unsigned char key[8] = {0, 0, 0, 0, 0, 0, 0, 9};
    unsigned char val[38 + 2 + 3] = {2, 0, 2, 0, 2, 0};
    memcpy(val + 38, "v2", 2);
    memcpy(val + 40, "x1", 3);
    MDB_val k = {8, key}, v = {sizeof(val), val};
    CHECK(mdb_put(txn, dbi, &k, &v, 0) == 0 && mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    st = open_ok(dir, &o);
    memset(&an, 0, sizeof(an));
    an.n = 99;
    CHECK_RC(nd_store_get(st, 9, anchors_visit, &an), 0);
    CHECK(an.n == 0);
    nd_store_close(st);
    free_rec(&a);
    free_rec(&b);
}

/* Fills the store until the map is full: -ENOSPC, nothing lost, reads work,
 * and writes resume after a restart with a larger map. */
static void test_map_full(void)
{
    char dir[128], err[256];
    path_in(dir, sizeof(dir), "mapfull");
    nd_store_options o;
    nd_store_options_default(&o); /* durable */
    o.map_size = 128u << 10;
    nd_store *st = open_ok(dir, &o);
    unsigned acked = 0;
    int rc;
    for (;;) {
        rec_buf x;
        make_rec(&x, "f-", acked, 300);
        rc = put_sync(st, &x.r);
        free_rec(&x);
        if (rc)
            break;
        acked++;
    }
    CHECK_RC(rc, -ENOSPC);
    CHECK(acked > 20);
    unit_note("map full after %u records", acked);
    CHECK(!nd_store_writable(st));

    /* A batch of many changes at a full map: each gets -ENOSPC, once. */
    enum { B = 40 };
    slot s[B] = {0};
    atomic_store(&slot_total, 0);
    for (unsigned i = 0; i < B; i++) {
        rec_buf x;
        make_rec(&x, "g-", i, 300);
        CHECK_RC(nd_store_put(st, &x.r, slot_cb, &s[i]), 0);
        free_rec(&x);
    }
    flush(st); /* writes nothing: commits */
    CHECK(!nd_store_writable(st));
    for (unsigned i = 0; i < B; i++)
        CHECK(atomic_load(&s[i].calls) == 1 && atomic_load(&s[i].status) == -ENOSPC);

    /* Reads keep working; every acknowledged record is intact. */
    CHECK_RC(nd_store_count(st), acked);
    for (unsigned i = 0; i < acked; i++) {
        rec_buf x;
        make_rec(&x, "f-", i, 300);
        check_stored(st, &x.r);
        free_rec(&x);
    }
    nd_store_stats stats;
    nd_store_get_stats(st, &stats);
    CHECK(stats.failed_changes >= B + 1);
    nd_store_close(st);

    /* Restart with the same small map: opens, reads, still full. */
    st = open_ok(dir, &o);
    CHECK_RC(nd_store_count(st), acked);
    rec_buf y;
    make_rec(&y, "h-", 0, 300);
    CHECK_RC(put_sync(st, &y.r), -ENOSPC);
    nd_store_close(st);

    /* A map_size below the data in use is raised to it. */
    o.map_size = 8192;
    st = open_ok(dir, &o);
    CHECK_RC(nd_store_count(st), acked);
    nd_store_close(st);

    /* Operator raises the map size and restarts: writes work again. */
    o.map_size = 1u << 20;
    CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), 0);
    CHECK(nd_store_writable(st));
    CHECK_RC(put_sync(st, &y.r), 0);
    CHECK(nd_store_writable(st));
    CHECK_RC(nd_store_count(st), acked + 1);
    for (unsigned i = 0; i < acked; i += 7) {
        rec_buf x;
        make_rec(&x, "f-", i, 300);
        check_stored(st, &x.r);
        free_rec(&x);
    }
    nd_store_close(st);
    free_rec(&y);
}

/* Fills a small filesystem (tmpfs) under a large map: -ENOSPC, and writes
 * resume without restart when space is freed. */
static void test_disk_full(void)
{
    char mnt[128], dir[192], filler[192];
    path_in(mnt, sizeof(mnt), "fullmnt");
    mkdir(mnt, 0700);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=512k,mode=0700")) {
        unit_note("SKIP disk full: mount: %s", strerror(errno));
        return;
    }
    static char block[4096];
    char err[256];
    nd_store *st = NULL;
    nd_store_options o;
    nd_store_options_default(&o);
    o.map_size = 64u << 20;
    snprintf(dir, sizeof(dir), "%s/data", mnt);

    /* Creating a store on a full disk fails cleanly and leaves no stub:
     * once at lock.mdb, once (its space reserved beforehand) at data.mdb. */
    char lockmdb[256], datamdb[256];
    snprintf(lockmdb, sizeof(lockmdb), "%s/lock.mdb", dir);
    snprintf(datamdb, sizeof(datamdb), "%s/data.mdb", dir);
    snprintf(filler, sizeof(filler), "%s/filler", mnt);
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            mkdir(dir, 0700);
            int fd = open(lockmdb, O_RDWR | O_CREAT, 0600);
            CHECK(fd >= 0 && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 64 << 10) == 0);
            close(fd);
        }
        FILE *f = fopen(filler, "w");
        while (fwrite(block, 1, sizeof(block), f) == sizeof(block) && fflush(f) == 0) {
        }
        fclose(f);
        CHECK_RC(nd_store_open(&st, dir, &o, err, sizeof(err)), -ENOSPC);
        unit_note("new store, disk full: %s", err);
        CHECK(access(datamdb, F_OK) != 0);
        unlink(filler);
    }

    /* A store that fills the disk. */
    FILE *f = fopen(filler, "w");
    for (int i = 0; i < 48; i++)
        fwrite(block, 1, sizeof(block), f);
    fclose(f);
    st = open_ok(dir, &o);
    unsigned acked = 0;
    int rc;
    for (;;) {
        rec_buf x;
        make_rec(&x, "d-", acked, 1000);
        rc = put_sync(st, &x.r);
        free_rec(&x);
        if (rc)
            break;
        acked++;
    }
    CHECK_RC(rc, -ENOSPC);
    unit_note("disk full after %u records", acked);
    CHECK(!nd_store_writable(st));
    CHECK_RC(nd_store_count(st), acked);
    for (unsigned i = 0; i < acked; i++) {
        rec_buf x;
        make_rec(&x, "d-", i, 1000);
        check_stored(st, &x.r);
        free_rec(&x);
    }
    /* Restart while the disk is still full: opens, reads, refuses writes;
     * the probe at open tells it is not writable before any write. */
    nd_store_close(st);
    st = open_ok(dir, &o);
    CHECK(!nd_store_writable(st));
    CHECK_RC(nd_store_count(st), acked);
    rec_buf z;
    make_rec(&z, "z-", 0, 1000);
    CHECK_RC(put_sync(st, &z.r), -ENOSPC);
    free_rec(&z);

    /* Space returns: the idle store finds out by itself (probe), and writes
     * work, no restart needed. */
    nd_store_stats before, after;
    nd_store_get_stats(st, &before);
    unlink(filler);
    for (int i = 0; i < 300 && !nd_store_writable(st); i++)
        usleep(10000);
    CHECK(nd_store_writable(st));
    nd_store_get_stats(st, &after);
    CHECK(after.probes > before.probes && after.commits == before.commits);
    CHECK_RC(nd_store_count(st), acked);
    rec_buf y;
    make_rec(&y, "d-", acked, 1000);
    CHECK_RC(put_sync(st, &y.r), 0);
    CHECK(nd_store_writable(st));
    nd_store_close(st);
    st = open_ok(dir, &o);
    CHECK_RC(nd_store_count(st), acked + 1);
    check_stored(st, &y.r);
    nd_store_close(st);
    free_rec(&y);
    umount2(mnt, MNT_DETACH);
}

typedef struct cmp_state {
    nd_store *other;
    long n, bad;
} cmp_state;

static int cmp_visit(void *arg, const nd_record *r)
{
    cmp_state *s = arg;
    rec_copy c = {0};
    s->n++;
    if (nd_store_get(s->other, r->registered_at_us, copy_visit, &c) != 0 || !rec_equal(&c.b.r, r))
        s->bad++;
    free_rec(&c.b);
    return 0;
}

/* Checks that every record of a is in b, equal; returns a's count. */
static long check_subset(nd_store *a, nd_store *b)
{
    cmp_state s = {b, 0, 0};
    CHECK_RC(nd_store_scan(a, cmp_visit, &s), 0);
    CHECK(s.bad == 0);
    CHECK(s.n == nd_store_count(a));
    return s.n;
}

typedef struct writer {
    nd_store *st;
    atomic_bool *stop;
    unsigned n;
} writer;

static void *writer_main(void *arg)
{
    writer *w = arg;
    while (!atomic_load(w->stop)) {
        rec_buf x;
        make_rec(&x, "w-", w->n++, 80);
        put_sync(w->st, &x.r);
        free_rec(&x);
    }
    return NULL;
}

static void test_backup(void)
{
    char dir[128], dst[128], dst2[128], err[256];
    path_in(dir, sizeof(dir), "bsrc");
    path_in(dst, sizeof(dst), "bdst");
    path_in(dst2, sizeof(dst2), "bdst2");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    for (unsigned i = 0; i < 3000; i++) {
        rec_buf x;
        make_rec(&x, "b-", i, i % 3 ? 120 : 0);
        CHECK_RC(nd_store_put(st, &x.r, NULL, NULL), 0);
        free_rec(&x);
    }
    for (unsigned i = 0; i < 3000; i += 5) {
        rec_buf x;
        make_rec(&x, "b-", i, 0);
        CHECK_RC(nd_store_delete_at(st, x.id, x.r.id_len, x.r.registered_at_us, NULL, NULL), 0);
    }
    flush(st); /* the changes above were queued without waiting for them */
    /* Backup while another thread writes. */
    atomic_bool stop = false;
    writer w = {st, &stop, 0};
    pthread_t th;
    pthread_create(&th, NULL, writer_main, &w);
    CHECK_RC(nd_store_backup(st, dst, err, sizeof(err)), 0);
    atomic_store(&stop, true);
    pthread_join(th, NULL);
    CHECK_RC(nd_store_backup(st, dst, err, sizeof(err)), -EEXIST);
    unit_note("again: %s", err);
    nd_store *bk = open_ok(dst, &o);
    int64_t nb = nd_store_count(bk);
    CHECK(nb >= 2400 && nb <= 2400 + (int64_t)w.n);
    check_subset(bk, st); /* every backed-up record is current in st */
    for (unsigned i = 1; i < 3000; i += 5) {
        rec_buf x;
        make_rec(&x, "b-", i, i % 3 ? 120 : 0);
        check_stored(bk, &x.r);
        free_rec(&x);
    }
    nd_store_close(bk);
    nd_store_close(st);

    /* backup_path while another process holds and writes the store. */
    int ready[2], done[2];
    CHECK(pipe(ready) == 0 && pipe(done) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        nd_store *c = NULL;
        char e[256], x = 'n';
        if (nd_store_open(&c, dir, &o, e, sizeof(e)) == 0)
            x = 'y';
        if (write(ready[1], &x, 1) != 1)
            _exit(2);
        for (unsigned i = 0; x == 'y'; i++) { /* write until told */
            rec_buf r;
            make_rec(&r, "child-", i, 50);
            put_sync(c, &r.r);
            free_rec(&r);
            struct timeval tv = {0, 0};
            fd_set fds;
            FD_ZERO(&fds);
            FD_SET(done[0], &fds);
            if (select(done[0] + 1, &fds, NULL, NULL, &tv) > 0)
                break;
        }
        nd_store_close(c);
        _exit(0);
    }
    char x = 0;
    CHECK(read(ready[0], &x, 1) == 1 && x == 'y');
    CHECK_RC(nd_store_backup_path(dir, dst2, err, sizeof(err)), 0);
    if (err[0])
        unit_note("backup_path: %s", err);
    CHECK(write(done[1], "x", 1) == 1);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(ready[0]);
    close(ready[1]);
    close(done[0]);
    close(done[1]);

    st = open_ok(dir, &o);
    bk = open_ok(dst2, &o);
    CHECK(check_subset(bk, st) >= 2400 + (long)w.n);
    nd_store_close(bk);
    nd_store_close(st);

    /* backup_path of a closed store, and of a directory without one. */
    path_in(dst2, sizeof(dst2), "bdst3");
    CHECK_RC(nd_store_backup_path(dir, dst2, err, sizeof(err)), 0);
    path_in(dst, sizeof(dst), "bdst4");
    CHECK_RC(nd_store_backup_path(dst2 /* has a store */, dst, err, sizeof(err)), 0);
    path_in(dir, sizeof(dir), "nostore");
    mkdir(dir, 0700);
    CHECK_RC(nd_store_backup_path(dir, dst2, err, sizeof(err)), -ENOENT);
    unit_note("no store: %s", err);
    st = open_ok(dst, &o);
    bk = open_ok(dst2, &o);
    CHECK(check_subset(st, bk) == check_subset(bk, st));
    nd_store_close(bk);
    nd_store_close(st);
    /* No temporary file is left behind. */
    char p[192];
    snprintf(p, sizeof(p), "%s/data.mdb", dst);
    struct stat sb;
    CHECK(stat(p, &sb) == 0 && sb.st_size > 0);
}

/* ---- keyed by registration time ---------------------------------------------- */

/* Opens the store in dir with LMDB directly, read-only, and its records
 * database in a read transaction (close with close_records()). */
static void open_records(const char *dir, MDB_env **env, MDB_txn **txn, MDB_dbi *dbi)
{
    CHECK(mdb_env_create(env) == 0 && mdb_env_set_maxdbs(*env, 8) == 0 &&
          mdb_env_open(*env, dir, MDB_RDONLY, 0600) == 0);
    CHECK(mdb_txn_begin(*env, NULL, MDB_RDONLY, txn) == 0 &&
          mdb_dbi_open(*txn, "records", 0, dbi) == 0);
}

static void close_records(MDB_env *env, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    mdb_env_close(env);
}

/* Leaf pages of the records database, read with LMDB directly. */
static size_t leaf_pages(const char *dir)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_stat ms = {0};
    open_records(dir, &env, &txn, &dbi);
    CHECK(mdb_stat(txn, dbi, &ms) == 0);
    close_records(env, txn);
    return ms.ms_leaf_pages;
}

/* Puts in increasing time take the append path, in one batch or many, and
 * fill leaf pages; the hint survives a reopen. */
static void test_append(void)
{
    enum { N = 3000 };
    char dir[128], rev[128];
    path_in(dir, sizeof(dir), "append");
    path_in(rev, sizeof(rev), "append-rev");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    for (unsigned i = 0; i < N; i++) {
        rec_buf x;
        make_rec(&x, "ap-", i, 60);
        if (i % 100 == 0)
            CHECK_RC(put_sync(st, &x.r), 0); /* also one per commit */
        else
            CHECK_RC(nd_store_put(st, &x.r, NULL, NULL), 0);
        free_rec(&x);
    }
    flush(st);
    nd_store_stats stats;
    nd_store_get_stats(st, &stats);
    CHECK(stats.appended == N);
    nd_store_close(st);

    /* The same records in decreasing time: none appended, and leaf pages
     * split in half, so about twice as many. */
    st = open_ok(rev, &o);
    for (unsigned i = N; i-- > 0;) {
        rec_buf x;
        make_rec(&x, "ap-", i, 60);
        CHECK_RC(nd_store_put(st, &x.r, NULL, NULL), 0);
        free_rec(&x);
    }
    flush(st);
    nd_store_get_stats(st, &stats);
    CHECK(stats.appended == 1); /* the first, into an empty tree */
    nd_store_close(st);
    size_t la = leaf_pages(dir), lr = leaf_pages(rev);
    unit_note("leaf pages: %zu appended, %zu in reverse order", la, lr);
    CHECK(la * 3 < lr * 2);

    /* After a reopen the next time is appended again; an earlier unused
     * time is not (but works). */
    st = open_ok(dir, &o);
    rec_buf x;
    make_rec(&x, "ap-", N, 60);
    CHECK_RC(put_sync(st, &x.r), 0);
    x.r.registered_at_us = prefix_base("ap-") - 5;
    CHECK_RC(put_sync(st, &x.r), 0);
    nd_store_get_stats(st, &stats);
    CHECK(stats.appended == 1);
    CHECK_RC(nd_store_count(st), N + 2);
    scan_state s = {.ordered = true};
    CHECK_RC(nd_store_scan(st, scan_order_visit, &s), 0);
    CHECK(s.n == N + 2 && s.ordered && s.times[0] == prefix_base("ap-") - 5);
    nd_store_close(st);
    free_rec(&x);
}

/* The record leaves of the store in dir: how many, and in how many runs
 * of adjacent page numbers. Reads data.mdb's pages itself (LMDB 0.9: page
 * number u64, pad u16, flags u16 (2: leaf), lower u16; the first node at
 * the offset after the 16-byte header: data size lo|hi<<16, flags, key
 * size): a leaf is a record leaf when its first node has an 8-byte key and
 * a value of record_size bytes. */
static void record_leaf_runs(const char *dir, size_t record_size, size_t *leaves, size_t *runs)
{
    char p[192];
    snprintf(p, sizeof(p), "%s/data.mdb", dir);
    FILE *f = fopen(p, "rb");
    CHECK(f != NULL);
    unsigned char pg[4096];
    uint64_t last = UINT64_MAX;
    *leaves = *runs = 0;
    for (uint64_t no = 0; f && fread(pg, 1, sizeof(pg), f) == sizeof(pg); no++) {
        uint16_t flags = (uint16_t)(pg[10] | pg[11] << 8), lower = (uint16_t)(pg[12] | pg[13] << 8);
        if (flags != 2 || lower < 18)
            continue;
        unsigned off = (unsigned)(pg[16] | pg[17] << 8);
        if (off + 8 > sizeof(pg))
            continue;
        const unsigned char *n = pg + off;
        size_t dsize = (size_t)(n[0] | n[1] << 8) | (size_t)(n[2] | n[3] << 8) << 16;
        unsigned ksize = (unsigned)(n[6] | n[7] << 8);
        if (ksize != 8 || dsize != record_size)
            continue;
        ++*leaves;
        if (last == UINT64_MAX || no != last + 1)
            ++*runs;
        last = no;
    }
    if (f)
        fclose(f);
}

/* The value size of the first record in dir, read with LMDB directly. */
static size_t first_record_size(const char *dir)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *cur;
    MDB_val k, v = {0, NULL};
    open_records(dir, &env, &txn, &dbi);
    CHECK(mdb_cursor_open(txn, dbi, &cur) == 0);
    CHECK(mdb_cursor_get(cur, &k, &v, MDB_FIRST) == 0);
    mdb_cursor_close(cur);
    close_records(env, txn);
    return v.mv_size;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits up to limit_s seconds for total callbacks; returns those seen. */
static long wait_slots(long total, double limit_s)
{
    double end = now_s() + limit_s;
    while (atomic_load(&slot_total) < total && now_s() < end)
        usleep(2000);
    return atomic_load(&slot_total);
}

/* A bulk load's store (gather_ms): the commit thread holds what is queued
 * until a full batch, nd_store_hurry() or close; the records of one
 * transaction lie side by side in data.mdb, their sketches after them. */
static void test_gather(void)
{
    enum { N = 3000, BATCH = 4096, SKETCH = 700 };
    char dir[128];
    path_in(dir, sizeof(dir), "gather");
    nd_store_options o = opts_fast();
    o.gather_ms = 60000; /* longer than the test: only a full batch, a hurry
                          * or close commits */
    o.max_batch = BATCH;
    nd_store *st = open_ok(dir, &o);
    static uint8_t sketch[SKETCH];
    memset(sketch, 0xA7, sizeof(sketch));
    static slot slots[N + BATCH + 1];
    atomic_store(&slot_total, 0);
    nd_store_stats s0, s1;
    nd_store_get_stats(st, &s0);
    for (unsigned i = 0; i < N; i++) {
        rec_buf x;
        make_rec(&x, "G-", i, 60);
        x.r.sketch = sketch;
        x.r.sketch_len = sizeof(sketch);
        CHECK_RC(nd_store_put(st, &x.r, slot_cb, &slots[i]), 0);
        free_rec(&x);
    }
    usleep(300 * 1000);
    CHECK(atomic_load(&slot_total) == 0); /* held: no full batch yet */
    double t0 = now_s();
    nd_store_hurry(st);
    CHECK(wait_slots(N, 20) == N);
    unit_note("hurry: %d changes committed %.3f s after it", N, now_s() - t0);
    nd_store_get_stats(st, &s1);
    CHECK(s1.commits - s0.commits == 1 && s1.max_batch == N);
    for (unsigned i = 0; i < N; i++)
        CHECK(atomic_load(&slots[i].status) == 0 && atomic_load(&slots[i].calls) == 1);

    /* A full batch commits without a hurry. */
    for (unsigned i = 0; i < BATCH; i++) {
        rec_buf x;
        make_rec(&x, "G-", N + i, 60);
        CHECK_RC(nd_store_put(st, &x.r, slot_cb, &slots[N + i]), 0);
        free_rec(&x);
    }
    CHECK(wait_slots(N + BATCH, 20) == N + BATCH);
    nd_store_get_stats(st, &s0);
    CHECK(s0.commits - s1.commits == 1);

    /* Close commits what waits, at once. */
    rec_buf x;
    make_rec(&x, "G-", N + BATCH, 60);
    CHECK_RC(nd_store_put(st, &x.r, slot_cb, &slots[N + BATCH]), 0);
    free_rec(&x);
    t0 = now_s();
    nd_store_close(st);
    CHECK(now_s() - t0 < 10);
    CHECK(atomic_load(&slots[N + BATCH].calls) == 1 && atomic_load(&slots[N + BATCH].status) == 0);
    st = open_ok(dir, &o);
    CHECK_RC(nd_store_count(st), N + BATCH + 1);
    nd_store_close(st);

    /* The first transaction's record leaves: side by side, not one run
     * each between the sketches' pages (about 6 sketch pages per record
     * leaf here). */
    size_t leaves, runs;
    record_leaf_runs(dir, first_record_size(dir), &leaves, &runs);
    unit_note("record leaves: %zu in %zu runs of adjacent pages", leaves, runs);
    CHECK(leaves >= 100);
    CHECK(runs * 10 <= leaves);
}

/* Used bytes of the store in dir: (last page + 1) * page size. */
static unsigned long long used_bytes(const char *dir)
{
    MDB_env *env;
    MDB_envinfo info = {0};
    MDB_stat est = {0};
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 4) == 0 &&
          mdb_env_open(env, dir, MDB_RDONLY, 0600) == 0);
    CHECK(mdb_env_info(env, &info) == 0 && mdb_env_stat(env, &est) == 0);
    mdb_env_close(env);
    return ((unsigned long long)info.me_last_pgno + 1) * est.ms_psize;
}

static unsigned long long file_bytes(const char *dir)
{
    char path[256];
    struct stat sb = {0};
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    CHECK(stat(path, &sb) == 0);
    return (unsigned long long)sb.st_size;
}

/* The commit thread keeps zeros past LMDB's last page (so that appends do
 * not grow the file at every commit): at least half of 1 MiB after each
 * commit, all of it zeros, never more than the map; records are intact
 * after a reopen, and a store whose pages reach into the zeros grows on. */
static void test_headroom(void)
{
    char dir[128];
    path_in(dir, sizeof(dir), "headroom");
    nd_store_options o = opts_fast();
    o.map_size = 8u << 20;
    nd_store *st = open_ok(dir, &o);
    unsigned n = 0;
    for (int round = 0; round < 3; round++) {
        for (unsigned i = 0; i < 2000; i++, n++) {
            rec_buf x;
            make_rec(&x, "hr-", n, 200);
            CHECK_RC(i + 1 == 2000 ? put_sync(st, &x.r) : nd_store_put(st, &x.r, NULL, NULL), 0);
            free_rec(&x);
        }
        flush(st);
        /* The headroom is topped up after the callbacks: wait for it. */
        unsigned long long used = used_bytes(dir), size = 0;
        for (int k = 0; k < 200 && (size = file_bytes(dir)) < used + (512u << 10); k++)
            usleep(10000);
        unit_note("%u records: %llu bytes used, file %llu", n, used, size);
        CHECK(size >= used + (512u << 10));
        CHECK(size <= (8u << 20));
        /* Everything past the used pages reads as zeros. */
        char path[256];
        snprintf(path, sizeof(path), "%s/data.mdb", dir);
        FILE *f = fopen(path, "rb");
        CHECK(f && fseeko(f, (off_t)used, SEEK_SET) == 0);
        unsigned long long nonzero = 0;
        int c;
        while (f && (c = fgetc(f)) != EOF)
            nonzero += c != 0;
        if (f)
            fclose(f);
        CHECK(nonzero == 0);
    }
    nd_store_close(st);
    st = open_ok(dir, &o);
    CHECK_RC(nd_store_count(st), n);
    nd_store_close(st);
}

/* Puts out of order are stored (the normal path) and scanned in time
 * order; a batch that mixes both paths too. */
static void test_out_of_order(void)
{
    static const int64_t t[] = {100, 300, 200, 50, 400, 350, 1000, 999};
    enum { N = sizeof(t) / sizeof(t[0]) };
    char dir[128];
    path_in(dir, sizeof(dir), "outoforder");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    rec_buf x[N];
    for (unsigned i = 0; i < N; i++) {
        make_rec(&x[i], "oo-", i, i % 2 ? 30 : 0);
        x[i].r.registered_at_us = t[i];
    }
    for (unsigned i = 0; i < 4; i++) /* one commit each */
        CHECK_RC(put_sync(st, &x[i].r), 0);
    slot sl[N] = {0};
    for (unsigned i = 4; i < N; i++) /* one batch */
        CHECK_RC(nd_store_put(st, &x[i].r, slot_cb, &sl[i]), 0);
    flush(st);
    for (unsigned i = 4; i < N; i++)
        CHECK(atomic_load(&sl[i].calls) == 1 && atomic_load(&sl[i].status) == 0);
    nd_store_stats stats;
    nd_store_get_stats(st, &stats);
    CHECK(stats.appended == 4); /* 100, 300, 400, 1000 */
    CHECK(stats.failed_changes == 0);
    CHECK_RC(nd_store_count(st), N);
    for (unsigned i = 0; i < N; i++)
        check_stored(st, &x[i].r);
    scan_state s = {.ordered = true};
    CHECK_RC(nd_store_scan(st, scan_order_visit, &s), 0);
    static const int64_t sorted[] = {50, 100, 200, 300, 350, 400, 999, 1000};
    CHECK(s.n == N && s.ordered && memcmp(s.times, sorted, sizeof(sorted)) == 0);
    nd_store_close(st);
    st = open_ok(dir, &o);
    for (unsigned i = 0; i < N; i++) {
        check_stored(st, &x[i].r);
        free_rec(&x[i]);
    }
    nd_store_close(st);
}

/* A put at a time already stored is a caller bug: -EEXIST, nothing
 * replaced, other changes of the batch unaffected. */
static void test_duplicate_key(void)
{
    char dir[128];
    path_in(dir, sizeof(dir), "dupkey");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    rec_buf a, b, c, d;
    make_rec(&a, "du-", 10, 20);
    make_rec(&b, "dv-", 1, 40);                  /* another id ... */
    b.r.registered_at_us = a.r.registered_at_us; /* ... at a's time */
    make_rec(&c, "du-", 5, 0);                   /* earlier than a */
    make_rec(&d, "du-", 20, 0);
    CHECK_RC(put_sync(st, &a.r), 0);
    CHECK_RC(put_sync(st, &b.r), -EEXIST); /* the last key (append path) */
    CHECK_RC(put_sync(st, &c.r), 0);
    CHECK_RC(put_sync(st, &c.r), -EEXIST); /* a key inside the tree */
    check_stored(st, &a.r);
    check_stored(st, &c.r);

    /* In one batch: put d, put d again, put b at a's time, delete c. */
    slot s[4] = {0};
    CHECK_RC(nd_store_put(st, &d.r, slot_cb, &s[0]), 0);
    CHECK_RC(nd_store_put(st, &d.r, slot_cb, &s[1]), 0);
    CHECK_RC(nd_store_put(st, &b.r, slot_cb, &s[2]), 0);
    CHECK_RC(nd_store_delete_at(st, c.id, c.r.id_len, c.r.registered_at_us, slot_cb, &s[3]), 0);
    flush(st);
    static const int want[4] = {0, -EEXIST, -EEXIST, 0};
    for (int i = 0; i < 4; i++)
        CHECK(atomic_load(&s[i].calls) == 1 && atomic_load(&s[i].status) == want[i]);
    CHECK_RC(nd_store_count(st), 2);
    check_stored(st, &a.r);
    check_stored(st, &d.r);
    nd_store_stats stats;
    nd_store_get_stats(st, &stats);
    CHECK(stats.failed_changes == 4 && stats.failed_commits == 0);
    CHECK(nd_store_writable(st));
    nd_store_close(st);

    /* After a reopen too (the last key is read at open). */
    st = open_ok(dir, &o);
    CHECK_RC(put_sync(st, &d.r), -EEXIST);
    CHECK_RC(put_sync(st, &b.r), -EEXIST);
    check_stored(st, &a.r);
    check_stored(st, &d.r);
    nd_store_close(st);
    free_rec(&a);
    free_rec(&b);
    free_rec(&c);
    free_rec(&d);
}

/* Opens a new store in root/name (into dir) holding n records made with
 * prefix into x[] (10-byte meta), version overriding make_rec's if set. */
static nd_store *store_with(char dir[128], const char *name, const nd_store_options *o,
                            const char *prefix, rec_buf *x, unsigned n, const char *version)
{
    path_in(dir, 128, name);
    nd_store *st = open_ok(dir, o);
    for (unsigned i = 0; i < n; i++) {
        make_rec(&x[i], prefix, i, 10);
        if (version)
            snprintf(x[i].version, sizeof(x[i].version), "%s", version);
        CHECK_RC(put_sync(st, &x[i].r), 0);
    }
    return st;
}

/* delete_at deletes only the record at that time with that id. */
static void test_delete_at(void)
{
    char dir[128];
    nd_store_options o = opts_fast();
    rec_buf x[5];
    nd_store *st = store_with(dir, "deleteat", &o, "de-", x, 5, NULL);
    /* Wrong id at a stored time: -ENOENT, record kept. */
    CHECK_RC(del_at_sync(st, x[1].id, x[2].r.registered_at_us), -ENOENT);
    CHECK_RC(del_at_sync(st, "de-00000", x[2].r.registered_at_us), -ENOENT);   /* prefix */
    CHECK_RC(del_at_sync(st, "de-0000021", x[2].r.registered_at_us), -ENOENT); /* longer */
    check_stored(st, &x[2].r);
    /* No record at that time. */
    CHECK_RC(del_at_sync(st, x[2].id, x[2].r.registered_at_us + 100), -ENOENT);
    CHECK_RC(nd_store_count(st), 5);
    nd_store_stats stats;
    nd_store_get_stats(st, &stats);
    CHECK(stats.failed_changes == 0); /* -ENOENT is not a failure */

    /* The right pair; then the last record, after which a later time is
     * still appended. */
    CHECK_RC(del_rec_sync(st, &x[2].r), 0);
    CHECK_RC(del_rec_sync(st, &x[4].r), 0);
    CHECK_RC(del_rec_sync(st, &x[4].r), -ENOENT);
    CHECK_RC(nd_store_count(st), 3);
    rec_copy c = {0};
    CHECK_RC(nd_store_get(st, x[2].r.registered_at_us, copy_visit, &c), -ENOENT);
    nd_store_get_stats(st, &stats);
    uint64_t before = stats.appended;
    rec_buf y;
    make_rec(&y, "de-", 7, 10);
    CHECK_RC(put_sync(st, &y.r), 0);
    nd_store_get_stats(st, &stats);
    CHECK(stats.appended == before + 1);
    /* x[4]'s time is free again and can be reused (normal path). */
    CHECK_RC(put_sync(st, &x[4].r), 0);
    nd_store_close(st);

    st = open_ok(dir, &o);
    CHECK_RC(nd_store_count(st), 5);
    check_stored(st, &x[0].r);
    check_stored(st, &x[1].r);
    check_stored(st, &x[3].r);
    check_stored(st, &x[4].r);
    check_stored(st, &y.r);
    nd_store_close(st);
    for (unsigned i = 0; i < 5; i++)
        free_rec(&x[i]);
    free_rec(&y);
}

/* replace: only the record at that time with that id, whole, durable; the
 * other fields (fingerprint, version, chars, meta) are the new record's. */
static void test_replace(void)
{
    char dir[128];
    nd_store_options o = opts_fast();
    rec_buf x[3];
    nd_store *st = store_with(dir, "replace", &o, "rp-", x, 3, "nd-simhash-0");
    /* The new form of x[1]: same id and time, all else different. */
    rec_buf n;
    make_rec(&n, "rp-", 1, 300);
    n.r.registered_at_us = x[1].r.registered_at_us;
    n.r.simhash = ~x[1].r.simhash;
    n.r.chars = x[1].r.chars + 7;
    n.r.text_hash[0] ^= 0xff;
    CHECK(strcmp(n.r.version, x[1].r.version) != 0);
    CHECK_RC(replace_sync(st, &n.r), 0);
    check_stored(st, &n.r);
    check_stored(st, &x[0].r);
    check_stored(st, &x[2].r);
    CHECK_RC(nd_store_count(st), 3);
    /* Wrong id at a stored time, or no record at the time: -ENOENT, kept. */
    rec_buf w;
    make_rec(&w, "rp-", 2, 0);
    w.r.registered_at_us = x[0].r.registered_at_us;
    CHECK_RC(replace_sync(st, &w.r), -ENOENT);
    check_stored(st, &x[0].r);
    make_rec(&w, "rp-", 2, 0);
    w.r.registered_at_us = x[2].r.registered_at_us + 1;
    CHECK_RC(replace_sync(st, &w.r), -ENOENT);
    CHECK_RC(nd_store_count(st), 3);
    /* Invalid records are refused at once. */
    rec_buf bad;
    make_rec(&bad, "rp-", 0, 0);
    bad.r.version = NULL;
    CHECK_RC(nd_store_replace(st, &bad.r, NULL, NULL), -EINVAL);
    bad.r.version = bad.version;
    bad.r.registered_at_us = -1;
    CHECK_RC(nd_store_replace(st, &bad.r, NULL, NULL), -EINVAL);
    nd_store_stats stats;
    nd_store_get_stats(st, &stats);
    CHECK(stats.failed_changes == 0); /* -ENOENT is not a failure */
    /* Back to the shorter form, then a reopen sees the last one. */
    CHECK_RC(replace_sync(st, &x[1].r), 0);
    CHECK_RC(replace_sync(st, &n.r), 0);
    nd_store_close(st);
    st = open_ok(dir, &o);
    check_stored(st, &n.r);
    check_stored(st, &x[0].r);
    check_stored(st, &x[2].r);
    CHECK_RC(nd_store_count(st), 3);
    nd_store_close(st);
    for (unsigned i = 0; i < 3; i++)
        free_rec(&x[i]);
    free_rec(&n);
    free_rec(&w);
    free_rec(&bad);
}

/* ---- the originality workflow: layout 4 (account, policy, status), amend ---------------- */

/* A record with account, policy and status REVOKED: flags bits 1-3 and the
 * tail (u16 account_len, account, NUL, u32 policy_len, policy, NUL). */
static void test_layout_claims(void)
{
    char dir[128];
    path_in(dir, sizeof(dir), "layout4");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    rec_buf x;
    make_rec(&x, "L4-", 5, 0);
    x.r.registered_at_us = 0x0102030405060709ll;
    x.r.account = "acct-xyz";
    x.r.account_len = 8;
    x.r.policy = "{\"reprint\":\"allow\"}";
    x.r.policy_len = strlen(x.r.policy);
    x.r.status = ND_CLAIM_REVOKED;
    CHECK_RC(put_sync(st, &x.r), 0);
    check_stored(st, &x.r);
    nd_store_close(st);
    st = open_ok(dir, &o);
    check_stored(st, &x.r); /* after a reopen */
    nd_store_close(st);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {8, "\1\2\3\4\5\6\7\x09"}, v;
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 8) == 0 &&
          mdb_env_open(env, dir, MDB_RDONLY, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0 &&
          mdb_dbi_open(txn, "records", 0, &dbi) == 0 && mdb_get(txn, dbi, &k, &v) == 0);
    const unsigned char *p = v.mv_data;
    size_t vlen = strlen(x.version), ilen = x.r.id_len, base = 38 + ilen + vlen + 1;
    size_t plen = x.r.policy_len;
    CHECK(v.mv_size == base + 2 + 8 + 1 + 4 + plen + 1, "%zu", v.mv_size);
    CHECK(p[0] == 4 && p[1] == (2 | 4 | 8));
    CHECK(p[base] == 8 && p[base + 1] == 0 && memcmp(p + base + 2, "acct-xyz", 9) == 0);
    CHECK(p[base + 11] == plen && p[base + 12] == 0 && p[base + 14] == 0);
    CHECK(memcmp(p + base + 15, x.r.policy, plen + 1) == 0);
    /* Revoked alone: layout 4, no tail. */
    mdb_txn_abort(txn);
    mdb_env_close(env);
    st = open_ok(dir, &o);
    rec_buf y;
    make_rec(&y, "L4-", 6, 0);
    y.r.registered_at_us = 0x010203040506070All;
    y.r.status = ND_CLAIM_REVOKED;
    CHECK_RC(put_sync(st, &y.r), 0);
    check_stored(st, &y.r);
    nd_store_close(st);
    MDB_val k2 = {8, "\1\2\3\4\5\6\7\x0a"}, v2;
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 8) == 0 &&
          mdb_env_open(env, dir, MDB_RDONLY, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0 &&
          mdb_dbi_open(txn, "records", 0, &dbi) == 0 && mdb_get(txn, dbi, &k2, &v2) == 0);
    p = v2.mv_data;
    CHECK(p[0] == 4 && p[1] == 8 && v2.mv_size == 38 + y.r.id_len + strlen(y.version) + 1);
    free_rec(&y);
    unit_note("layout 4: +0 B per record without account and policy (flags bits), "
              "+3 B + account, +5 B + policy; this one %zu B vs %zu B",
              v.mv_size, base);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    free_rec(&x);
}

/* Reads the raw value under the 8-byte key key of the store in dir into
 * out[cap]; returns its size (0 when absent). */
static size_t raw_value(const char *dir, const char *key, unsigned char *out, size_t cap)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {8, (void *)key}, v = {0, NULL};
    size_t n = 0;
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 8) == 0 &&
          mdb_env_open(env, dir, MDB_RDONLY, 0600) == 0);
    if (mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0) {
        if (mdb_dbi_open(txn, "records", 0, &dbi) == 0 && mdb_get(txn, dbi, &k, &v) == 0 &&
            v.mv_size <= cap) {
            memcpy(out, v.mv_data, v.mv_size);
            n = v.mv_size;
        }
        mdb_txn_abort(txn);
    }
    mdb_env_close(env);
    return n;
}

/* The registering client: an optional trailing field (flag bit 7, u8
 * client_len, the name, NUL) after the account and the policy; a record
 * without one is the bytes of before. It survives a reopen and an amend
 * that carries it; a value with a bad client tail, or an unknown flag
 * bit, is refused. */
static void test_layout_client(void)
{
    char dir[128];
    path_in(dir, sizeof(dir), "layoutcl");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    rec_buf x, y;
    make_rec(&x, "LC-", 1, 0);
    x.r.registered_at_us = 0x0102030405060801ll;
    x.r.account = "alice";
    x.r.account_len = 5;
    x.r.policy = "{\"reprint\":\"forbid\"}";
    x.r.policy_len = strlen(x.r.policy);
    x.r.client = "alice-cms";
    x.r.client_len = 9;
    make_rec(&y, "LC-", 2, 0); /* a client alone: layout 4, flag bit 7 only */
    y.r.registered_at_us = 0x0102030405060802ll;
    y.r.client = "bob-cms";
    y.r.client_len = 7;
    CHECK_RC(put_sync(st, &x.r), 0);
    CHECK_RC(put_sync(st, &y.r), 0);
    check_stored(st, &x.r);
    check_stored(st, &y.r);
    nd_store_close(st);
    st = open_ok(dir, &o);
    check_stored(st, &x.r); /* after a reopen */
    check_stored(st, &y.r);
    nd_store_close(st);
    unsigned char v[8192];
    size_t n = raw_value(dir, "\1\2\3\4\5\6\x08\x01", v, sizeof(v));
    size_t base = 38 + x.r.id_len + strlen(x.version) + 1, plen = x.r.policy_len;
    size_t tail = base + 2 + 5 + 1 + 4 + plen + 1; /* where the client begins */
    CHECK(n == tail + 1 + 9 + 1, "%zu", n);
    CHECK(v[0] == 4 && v[1] == (0x80 | 2 | 4));
    CHECK(v[tail] == 9 && memcmp(v + tail + 1, "alice-cms", 10) == 0);
    n = raw_value(dir, "\1\2\3\4\5\6\x08\x02", v, sizeof(v));
    base = 38 + y.r.id_len + strlen(y.version) + 1;
    CHECK(n == base + 1 + 7 + 1 && v[0] == 4 && v[1] == 0x80, "%zu %u", n, v[1]);
    CHECK(v[base] == 7 && memcmp(v + base + 1, "bob-cms", 8) == 0);
    unit_note("registering client: +2 B + name per record that has one (here %zu B), "
              "+0 B without",
              (size_t)9 + 2);

    /* An amend writes what it is given: the registry passes the stored
     * client along, so the claim changes and the client stays. */
    st = open_ok(dir, &o);
    rec_buf a = x;
    a.r.status = ND_CLAIM_REVOKED;
    a.r.policy = NULL;
    a.r.policy_len = 0;
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    CHECK_RC(waiter_finish(&w, nd_store_amend(st, &a.r, NULL, waiter_cb, &w)), 0);
    check_stored(st, &a.r);
    nd_store_close(st);

    /* Bad client tails and an unknown flag bit: refused as -EBADMSG. */
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    n = raw_value(dir, "\1\2\3\4\5\6\x08\x02", v, sizeof(v));
    struct {
        const char *what;
        size_t at;
        unsigned char byte;
        size_t size;
    } bad[] = {
        {"client_len 0", base, 0, n},
        {"client_len past the end", base, 9, n},
        {"client_len over ND_CLIENT_MAX", base, ND_CLIENT_MAX + 1, n},
        {"no NUL after the name", base + 8, 'x', n},
        {"cut", 0, 4, n - 1},
        {"flag bit 4", 1, 0x90, n},
    };
    char key[8] = {1, 2, 3, 4, 5, 6, 9, 0};
    for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        unsigned char b[8192];
        memcpy(b, v, n);
        b[bad[i].at] = bad[i].byte;
        key[7] = (char)i;
        MDB_val k = {8, key}, bv = {bad[i].size, b};
        CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 8) == 0 &&
              mdb_env_open(env, dir, 0, 0600) == 0);
        CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 &&
              mdb_dbi_open(txn, "records", 0, &dbi) == 0 && mdb_put(txn, dbi, &k, &bv, 0) == 0 &&
              mdb_txn_commit(txn) == 0);
        mdb_env_close(env);
        st = open_ok(dir, &o);
        rec_copy c = {0};
        int64_t at = 0;
        for (int j = 0; j < 8; j++)
            at = at << 8 | (unsigned char)key[j];
        CHECK(nd_store_get(st, at, copy_visit, &c) == -EBADMSG, "%s", bad[i].what);
        free_rec(&c.b);
        /* Its id reads: deleting it still works (the next case writes its own). */
        w = (waiter){PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
        CHECK_RC(waiter_finish(&w, nd_store_delete_at(st, y.r.id, y.r.id_len, at, waiter_cb, &w)),
                 0);
        nd_store_close(st);
    }
    free_rec(&x);
    free_rec(&y);
}

/* The value encoder of ec95674 (layout 3), byte for byte, to write a store
 * as the build before layout 4 did. */
static size_t old_encode_v3(unsigned char *p, const nd_record *r)
{
    size_t vlen = strlen(r->version);
    p[0] = 3;
    p[1] = r->meta ? 1 : 0;
    p[2] = (unsigned char)vlen;
    p[3] = (unsigned char)r->nanchors;
    p[4] = (unsigned char)r->id_len;
    p[5] = (unsigned char)(r->id_len >> 8);
    for (int i = 0; i < 4; i++)
        p[6 + i] = (unsigned char)(r->chars >> (8 * i));
    for (int i = 0; i < 8; i++)
        p[10 + i] = (unsigned char)(r->simhash >> (8 * i));
    memcpy(p + 18, r->text_hash, 16);
    uint32_t ml = r->meta ? (uint32_t)r->meta_len : 0;
    for (int i = 0; i < 4; i++)
        p[34 + i] = (unsigned char)(ml >> (8 * i));
    unsigned char *q = p + 38;
    memcpy(q, r->id, r->id_len);
    q += r->id_len;
    memcpy(q, r->version, vlen + 1);
    q += vlen + 1;
    if (r->meta) {
        memcpy(q, r->meta, r->meta_len);
        q[r->meta_len] = '\0';
        q += r->meta_len + 1;
    }
    memcpy(q, r->anchors, 4 * (size_t)r->nanchors);
    return (size_t)(q - p) + 4 * (size_t)r->nanchors;
}

/* A store as ec95674 wrote it: info (format 2), records (layout 3 values,
 * and one layout-2 value), sketches; no journal databases. Opens, reads
 * back right (no account, no policy, active), takes amend, replace,
 * delete and events, and reopens. */
static void test_old_layout(void)
{
    enum { N = 40 };
    char dir[128];
    path_in(dir, sizeof(dir), "oldlayout");
    mkdir(dir, 0700);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi info, recs, sk;
    unsigned char fmt[8] = {'n', 'd', 's', 't', 2, 0, 0, 0};
    MDB_val fk = {6, "format"}, fv = {8, fmt};
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 4) == 0 &&
          mdb_env_open(env, dir, 0, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 &&
          mdb_dbi_open(txn, "info", MDB_CREATE, &info) == 0 &&
          mdb_dbi_open(txn, "records", MDB_CREATE, &recs) == 0 &&
          mdb_dbi_open(txn, "sketches", MDB_CREATE, &sk) == 0 &&
          mdb_put(txn, info, &fk, &fv, 0) == 0);
    rec_buf x[N];
    uint8_t anchors[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    unsigned char val[4096], key[8];
    for (unsigned i = 0; i < N; i++) {
        make_rec(&x[i], "old-", i, i % 3 ? 60 : 0);
        x[i].r.anchors = anchors;
        x[i].r.nanchors = i % 5;
        size_t n = old_encode_v3(val, &x[i].r);
        for (int b = 0; b < 8; b++)
            key[b] = (unsigned char)((uint64_t)x[i].r.registered_at_us >> (56 - 8 * b));
        MDB_val k = {8, key}, v = {n, val}, s = {3, "sk!"};
        CHECK(mdb_put(txn, recs, &k, &v, 0) == 0 && mdb_put(txn, sk, &k, &s, 0) == 0);
    }
    unsigned char key2[8] = {0, 0, 0, 0, 0, 0, 0, 9};
    unsigned char v2[38 + 2 + 3] = {2, 0, 2, 0, 2, 0}; /* layout 2: id "v2", version "x1" */
    memcpy(v2 + 38, "v2", 2);
    memcpy(v2 + 40, "x1", 3);
    MDB_val k2 = {8, key2}, vv2 = {sizeof(v2), v2};
    CHECK(mdb_put(txn, recs, &k2, &vv2, 0) == 0 && mdb_txn_commit(txn) == 0);
    mdb_env_close(env);

    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    CHECK_RC(nd_store_count(st), N + 1);
    long n = 0;
    CHECK_RC(nd_store_scan(st, count_visit, &n), 0);
    CHECK(n == N + 1);
    for (unsigned i = 0; i < N; i++)
        check_stored(st, &x[i].r); /* rec_equal: account NULL, policy NULL, active */
    anchors_seen an = {0};
    CHECK_RC(nd_store_get(st, x[7].r.registered_at_us, anchors_visit, &an), 0);
    CHECK(an.n == 2 && memcmp(an.bytes, anchors, 8) == 0);
    rec_copy c = {0};
    CHECK_RC(nd_store_get(st, 9, copy_visit, &c), 0);
    CHECK(c.b.r.id_len == 2 && memcmp(c.b.r.id, "v2", 2) == 0 && !c.b.r.account && !c.b.r.policy &&
          c.b.r.status == ND_CLAIM_ACTIVE);
    free_rec(&c.b);
    /* amend an old record: policy and revoked; its sketch stays */
    rec_buf a = x[3];
    a.meta = NULL;
    a.r.policy = "{\"reprint\":\"forbid\"}";
    a.r.policy_len = strlen(a.r.policy);
    a.r.status = ND_CLAIM_REVOKED;
    a.r.nanchors = 0;
    a.r.anchors = NULL;
    nd_store_event au = {.kind = ND_EVENT_AUDIT, .at_us = 77, .value = "{}", .value_len = 2};
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    CHECK_RC(waiter_finish(&w, nd_store_amend(st, &a.r, &au, waiter_cb, &w)), 0);
    check_stored(st, &a.r);
    int64_t at = a.r.registered_at_us;
    sketch_seen seen = {0};
    CHECK_RC(nd_store_sketches(st, &at, 1, sketch_visit, &seen), 0);
    CHECK(seen.len[0] == 3 && seen.first[0] == 's');
    CHECK_RC(replace_sync(st, &x[4].r), 0);
    CHECK_RC(del_rec_sync(st, &x[5].r), 0);
    nd_store_close(st);
    st = open_ok(dir, &o);
    check_stored(st, &a.r);
    check_stored(st, &x[4].r);
    CHECK_RC(nd_store_count(st), N);
    /* The old store takes a record with a registering client next to its
     * records without one, and reads both after a reopen. */
    rec_buf cl;
    make_rec(&cl, "old-client-", 1, 0);
    cl.r.client = "alice-cms";
    cl.r.client_len = 9;
    CHECK_RC(put_sync(st, &cl.r), 0);
    nd_store_close(st);
    st = open_ok(dir, &o);
    check_stored(st, &cl.r);
    check_stored(st, &x[6].r); /* no client */
    CHECK_RC(nd_store_count(st), N + 1);
    nd_store_close(st);
    free_rec(&cl);
    for (unsigned i = 0; i < N; i++)
        free_rec(&x[i]);
}

/* An amendment supersedes the records it names that are stored with that
 * id and active, in its transaction: their status and superseded_by come
 * back (after a reopen too); a revoked one, another id at the time, a time
 * without a record are left; a superseded record amended to active loses
 * superseded_by. */
static void test_supersede(void)
{
    char dir[512];
    path_in(dir, sizeof(dir), "supersede");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    rec_buf x[4];
    for (unsigned i = 0; i < 4; i++) {
        make_rec(&x[i], "sup-", i, 0);
        x[i].r.status = i == 2 ? ND_CLAIM_REVOKED : ND_CLAIM_ACTIVE;
        CHECK_RC(put_sync(st, &x[i].r), 0);
    }
    nd_record_ref refs[] = {
        {x[1].r.registered_at_us, x[1].r.id, x[1].r.id_len},
        {x[2].r.registered_at_us, x[2].r.id, x[2].r.id_len}, /* revoked: left */
        {x[3].r.registered_at_us, "other", 5},               /* another id: left */
        {x[3].r.registered_at_us + 1000, "gone", 4},         /* no record: left */
    };
    nd_record a = x[0].r;
    a.supersede = refs;
    a.nsupersede = 4;
    nd_store_event au = {.kind = ND_EVENT_AUDIT, .at_us = 78, .value = "{}", .value_len = 2};
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    CHECK_RC(waiter_finish(&w, nd_store_amend(st, &a, &au, waiter_cb, &w)), 0);
    for (int round = 0; round < 2; round++) {
        if (round) {
            nd_store_close(st);
            st = open_ok(dir, &o);
        }
        rec_copy c = {0};
        CHECK_RC(nd_store_get(st, x[1].r.registered_at_us, copy_visit, &c), 0);
        CHECK(c.b.r.status == ND_CLAIM_SUPERSEDED &&
                  c.b.r.superseded_by_us == x[0].r.registered_at_us && !c.b.r.supersede,
              "round %d: %d %lld", round, c.b.r.status, (long long)c.b.r.superseded_by_us);
        x[1].r.status = ND_CLAIM_SUPERSEDED;
        CHECK(rec_equal(&c.b.r, &x[1].r));
        free_rec(&c.b);
        check_stored(st, &x[0].r);
        check_stored(st, &x[2].r);
        check_stored(st, &x[3].r);
    }
    nd_record b = x[1].r; /* superseded -> active */
    b.status = ND_CLAIM_ACTIVE;
    w = (waiter){PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    CHECK_RC(waiter_finish(&w, nd_store_amend(st, &b, NULL, waiter_cb, &w)), 0);
    rec_copy c = {0};
    CHECK_RC(nd_store_get(st, b.registered_at_us, copy_visit, &c), 0);
    CHECK(c.b.r.status == ND_CLAIM_ACTIVE && c.b.r.superseded_by_us == 0);
    free_rec(&c.b);
    a.nsupersede = ND_STORE_SUPERSEDE_MAX + 1;
    CHECK_RC(nd_store_amend(st, &a, NULL, waiter_cb, &w), -EINVAL);
    nd_store_close(st);
    for (unsigned i = 0; i < 4; i++)
        free_rec(&x[i]);
}

/* ---- the originality workflow: events on disk --------------------------------------------- */

static int event_sync(nd_store *st, const nd_store_event *ev)
{
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    return waiter_finish(&w, nd_store_event_put(st, ev, waiter_cb, &w));
}

static nd_store_event det(int64_t owner, int64_t at, const char *copy)
{
    return (nd_store_event){.kind = ND_EVENT_DETECTION,
                            .owner_at = owner,
                            .at_us = at,
                            .copy_id = copy,
                            .copy_id_len = strlen(copy),
                            .value = "{\"kind\":\"near_duplicate\"}",
                            .value_len = 25};
}

/* "copy@at,..." of owner's detections (or the audit values), newest first. */
typedef struct ev_text {
    char s[4096];
    size_t n;
} ev_text;

static int ev_text_visit(void *arg, const nd_store_event *ev)
{
    ev_text *t = arg;
    if (ev->kind == ND_EVENT_DETECTION)
        snprintf(t->s + strlen(t->s), sizeof(t->s) - strlen(t->s), "%s%.*s@%lld", t->n ? "," : "",
                 (int)ev->copy_id_len, ev->copy_id, (long long)ev->at_us);
    else
        snprintf(t->s + strlen(t->s), sizeof(t->s) - strlen(t->s), "%s%s@%lld", t->n ? "," : "",
                 ev->value, (long long)ev->at_us);
    t->n++;
    return 0;
}

static const char *events_text(nd_store *st, nd_event_kind kind, int64_t owner, ev_text *t)
{
    memset(t, 0, sizeof(*t));
    CHECK_RC(nd_store_events(st, kind, owner, -1, 0, ev_text_visit, t), 0);
    return t->s;
}

/* Entries of the named database of the (closed) store in dir, read with
 * LMDB itself; drop: deletes the database first (a store written before
 * it existed). Returns the count, or -1 when it does not exist. */
static long raw_db_entries(const char *dir, const char *name, bool drop)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_stat ms;
    long n = -1;
    CHECK_RC(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 16);
    CHECK_RC(mdb_env_open(env, dir, 0, 0600), 0);
    CHECK_RC(mdb_txn_begin(env, NULL, 0, &txn), 0);
    if (mdb_dbi_open(txn, name, 0, &dbi) == 0) {
        if (drop)
            CHECK_RC(mdb_drop(txn, dbi, 1), 0);
        else if (mdb_stat(txn, dbi, &ms) == 0)
            n = (long)ms.ms_entries;
    }
    CHECK_RC(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    return n;
}

static int audit_count_visit(void *arg, const nd_store_event *ev)
{
    (void)ev;
    (*(int *)arg)++;
    return 0;
}

/* The audit log's index by document: written with each entry, dropped
 * with it by retention, and built from the log when a store written
 * before it opens (the upgrade); a deletion leaves no detection nor
 * detection_ids entry of the deleted record. */
static void test_audit_index_upgrade(void)
{
    char dir[128];
    path_in(dir, sizeof(dir), "auditidx");
    nd_store_options o = opts_fast();
    o.audit_max_entries = 6;
    nd_store *st = open_ok(dir, &o);
    char vals[10][96];
    for (int i = 0; i < 10; i++) {
        snprintf(vals[i], sizeof(vals[i]), "{\"action\":\"x\",\"document\":\"doc-%d\"}", i % 2);
        nd_store_event a = {.kind = ND_EVENT_AUDIT,
                            .at_us = 100 + i,
                            .value = vals[i],
                            .value_len = strlen(vals[i])};
        CHECK_RC(event_sync(st, &a), 0);
    }
    nd_store_event none = {.kind = ND_EVENT_AUDIT, .at_us = 200, .value = "{}", .value_len = 2};
    CHECK_RC(event_sync(st, &none), 0);
    rec_buf x;
    make_rec(&x, "gone", 1, 0);
    CHECK_RC(put_sync(st, &x.r), 0);
    for (int i = 0; i < 5; i++) {
        char copy[16];
        snprintf(copy, sizeof(copy), "c%d", i);
        nd_store_event e = det(x.r.registered_at_us, 6000 + i, copy);
        CHECK_RC(event_sync(st, &e), 0);
    }
    CHECK_RC(del_at_sync(st, x.id, x.r.registered_at_us), 0);
    nd_store_close(st);
    CHECK(raw_db_entries(dir, "audit", false) == 6);
    CHECK(raw_db_entries(dir, "audit_documents", false) == 5, "the index kept trimmed entries");
    CHECK(raw_db_entries(dir, "detections", false) == 0);
    CHECK(raw_db_entries(dir, "detection_ids", false) == 0, "a deleted record's index stayed");
    /* The upgrade: a store without the index gets it at open. */
    raw_db_entries(dir, "audit_documents", true);
    CHECK(raw_db_entries(dir, "audit_documents", false) == -1);
    o.audit_max_entries = 0;
    st = open_ok(dir, &o);
    int n0 = 0, n1 = 0;
    CHECK_RC(nd_store_audit_of(st, 0, "doc-0", 5, -1, 0, audit_count_visit, &n0), 0);
    CHECK_RC(nd_store_audit_of(st, 0, "doc-1", 5, -1, 0, audit_count_visit, &n1), 0);
    CHECK(n0 == 2 && n1 == 3, "%d %d", n0, n1);
    nd_store_close(st);
    CHECK(raw_db_entries(dir, "audit_documents", false) == 5);
    free_rec(&x);
}

/* The journals, the copy-id index and the per-owner count survive a
 * reopen: a retry after it still replaces, retention still counts, and a
 * lower copies_max trims at the next detection. */
static void test_events_durable(void)
{
    char dir[128];
    path_in(dir, sizeof(dir), "events");
    nd_store_options o = opts_fast();
    o.detections_max = 3;
    nd_store *st = open_ok(dir, &o);
    ev_text t;
    nd_store_event e;
    CHECK_RC(event_sync(st, (e = det(10, 100, "a"), &e)), 0);
    CHECK_RC(event_sync(st, (e = det(10, 101, "b"), &e)), 0);
    CHECK_RC(event_sync(st, (e = det(10, 101, "c"), &e)), 0); /* bumped to 102 */
    nd_store_event au = {.kind = ND_EVENT_AUDIT, .at_us = 5, .value = "{}", .value_len = 2};
    CHECK_RC(event_sync(st, &au), 0);
    nd_store_close(st);
    st = open_ok(dir, &o);
    CHECK(strcmp(events_text(st, ND_EVENT_DETECTION, 10, &t), "c@102,b@101,a@100") == 0, "%s", t.s);
    CHECK_RC(event_sync(st, (e = det(10, 200, "a"), &e)), 0); /* updates a in place */
    CHECK(strcmp(events_text(st, ND_EVENT_DETECTION, 10, &t), "c@102,b@101,a@100") == 0, "%s", t.s);
    CHECK(strcmp(events_text(st, ND_EVENT_AUDIT, 0, &t), "{}@5") == 0, "%s", t.s);
    nd_store_close(st);
    o.detections_max = 2;
    st = open_ok(dir, &o);
    CHECK_RC(event_sync(st, (e = det(10, 300, "d"), &e)), 0);
    CHECK(strcmp(events_text(st, ND_EVENT_DETECTION, 10, &t), "d@300,c@102") == 0, "%s", t.s);
    CHECK_RC(event_sync(st, (e = det(10, 301, "b"), &e)), 0); /* b went: a new one */
    CHECK(strcmp(events_text(st, ND_EVENT_DETECTION, 10, &t), "b@301,d@300") == 0, "%s", t.s);
    nd_store_close(st);
    /* The index and count agree with the journal (read with LMDB). */
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi idx, dets;
    MDB_stat si, sd;
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 8) == 0 &&
          mdb_env_open(env, dir, MDB_RDONLY, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0 &&
          mdb_dbi_open(txn, "detection_ids", 0, &idx) == 0 &&
          mdb_dbi_open(txn, "detections", 0, &dets) == 0 && mdb_stat(txn, idx, &si) == 0 &&
          mdb_stat(txn, dets, &sd) == 0);
    CHECK(sd.ms_entries == 2 && si.ms_entries == 3, "%zu detections, %zu index entries",
          (size_t)sd.ms_entries, (size_t)si.ms_entries); /* 2 ids + the count */
    unsigned char ck[8] = {0, 0, 0, 0, 0, 0, 0, 10};
    MDB_val k = {8, ck}, v;
    CHECK(mdb_get(txn, idx, &k, &v) == 0 && v.mv_size == 8 && ((unsigned char *)v.mv_data)[0] == 2);
    mdb_txn_abort(txn);
    mdb_env_close(env);
}

static int amended_visit(void *arg, const nd_record *r)
{
    char *amended = arg;
    unsigned i = 0;
    if (sscanf(r->id, "crash-%u", &i) == 1 && i < 400)
        amended[i] = r->policy != NULL ? 1 : 0;
    return 0;
}

static int audit_visit(void *arg, const nd_store_event *ev)
{
    char *audited = arg;
    unsigned i = 0;
    if (sscanf(ev->value, "{\"i\":%u}", &i) == 1 && i < 400)
        audited[i]++;
    return 0;
}

static int ack_fd = -1;
static _Atomic int acks;

static void crash_done(void *arg, int status)
{
    unsigned i = (unsigned)(uintptr_t)arg;
    if (status == 0 && write(ack_fd, &i, sizeof(i)) != sizeof(i))
        _exit(3);
    if (++acks == 150)
        kill(getpid(), SIGKILL); /* from the commit thread, between callbacks */
}

/* The crash tests' parent: reads the indices the child acknowledged
 * (crash_done) from fd until the child is killed, marks them in acked[0..n)
 * and checks that the child died of SIGKILL. Returns how many distinct. */
static size_t read_acks(int fd, pid_t pid, char *acked, unsigned n)
{
    unsigned i;
    size_t nack = 0;
    while (read(fd, &i, sizeof(i)) == sizeof(i))
        if (i < n && !acked[i]++)
            nack++;
    close(fd);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %d", status);
    return nack;
}

/* An amend and its audit event are one transaction: a process killed (-9)
 * with amends in flight leaves, after a reopen, every acknowledged amend
 * with its audit entry, and no amend without its entry or entry without
 * its amend. */
static void test_amend_crash(void)
{
    enum { N = 400 };
    char dir[128];
    path_in(dir, sizeof(dir), "amendcrash");
    nd_store_options o = opts_fast();
    o.sync = true;
    o.max_batch = 16;
    nd_store *st = open_ok(dir, &o);
    rec_buf x[N];
    for (unsigned i = 0; i < N; i++) {
        make_rec(&x[i], "crash-", i, 0);
        CHECK_RC(nd_store_put(st, &x[i].r, NULL, NULL), 0);
    }
    flush(st);
    nd_store_close(st);
    int pfd[2];
    REQUIRE(pipe(pfd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        ack_fd = pfd[1];
        nd_store *c = NULL;
        char e[256];
        if (nd_store_open(&c, dir, &o, e, sizeof(e)))
            _exit(2);
        for (unsigned i = 0; i < N; i++) {
            char val[32];
            snprintf(val, sizeof(val), "{\"i\":%u}", i);
            nd_record r = x[i].r;
            r.policy = "{\"reprint\":\"forbid\"}";
            r.policy_len = strlen(r.policy);
            nd_store_event au = {
                .kind = ND_EVENT_AUDIT, .at_us = 1000 + i, .value = val, .value_len = strlen(val)};
            if (nd_store_amend(c, &r, &au, crash_done, (void *)(uintptr_t)i))
                _exit(4);
        }
        for (;;)
            pause();
    }
    close(pfd[1]);
    char acked[N] = {0}, amended[N] = {0}, audited[N] = {0};
    unsigned i;
    size_t nack = read_acks(pfd[0], pid, acked, N);
    st = open_ok(dir, &o);
    CHECK_RC(nd_store_scan(st, amended_visit, amended), 0);
    CHECK_RC(nd_store_events(st, ND_EVENT_AUDIT, 0, -1, 0, audit_visit, audited), 0);
    size_t lost = 0, torn = 0, namended = 0;
    for (i = 0; i < N; i++) {
        lost += acked[i] && !amended[i];
        torn += amended[i] != audited[i];
        namended += amended[i];
    }
    CHECK(nack >= 150 && lost == 0 && torn == 0, "%zu acked, %zu lost, %zu torn", nack, lost, torn);
    unit_note("amend + audit killed in flight: %zu acknowledged, %zu amended on disk, "
              "0 lost, 0 without their audit entry",
              nack, namended);
    nd_store_close(st);
    for (i = 0; i < N; i++)
        free_rec(&x[i]);
}

static int text_len_visit(void *arg, const char *text, size_t len)
{
    (void)text;
    *(size_t *)arg = len;
    return 0;
}

/* A packed text over a chunk (658 bytes, lmdb_env.h) is kept in chunks
 * under (time, chunk number): neighbours' texts stay apart, a replace by a shorter text
 * leaves none of the old chunks, a chunk missing is -EBADMSG (not a text
 * cut short), a record of another time is not read. */
static void test_text_chunks(void)
{
    char dir[128];
    path_in(dir, sizeof(dir), "textchunks");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    size_t big_len = 300000;
    char *big = malloc(big_len);
    REQUIRE(big != NULL);
    uint64_t x = 88172645463325252ull; /* random letters: ~0.6 of a byte each, packed */
    for (size_t k = 0; k < big_len; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        big[k] = (char)('a' + x % 26);
    }
    rec_buf r[3];
    const char *small[3] = {"first", NULL, "third"};
    for (unsigned i = 0; i < 3; i++) {
        make_rec(&r[i], "chunk-", i, 0);
        r[i].r.text = i == 1 ? big : small[i];
        r[i].r.text_len = i == 1 ? big_len : strlen(small[i]);
        CHECK_RC(put_sync(st, &r[i].r), 0);
    }
    size_t len = 0;
    CHECK_RC(nd_store_text(st, r[1].r.registered_at_us, text_len_visit, &len), 0);
    CHECK(len == big_len, "%zu", len);
    CHECK_RC(nd_store_text(st, r[0].r.registered_at_us, text_len_visit, &len), 0);
    CHECK(len == 5);
    CHECK_RC(nd_store_text(st, r[2].r.registered_at_us, text_len_visit, &len), 0);
    CHECK(len == 5);
    /* Replaced by a short text, then by the long one again. */
    r[1].r.text = "short";
    r[1].r.text_len = 5;
    CHECK_RC(replace_sync(st, &r[1].r), 0);
    CHECK_RC(nd_store_text(st, r[1].r.registered_at_us, text_len_visit, &len), 0);
    CHECK(len == 5, "%zu: the old chunks stayed", len);
    r[1].r.text = big;
    r[1].r.text_len = big_len;
    CHECK_RC(replace_sync(st, &r[1].r), 0);
    nd_store_close(st);
    /* Count the chunks, then take out the second one by hand. */
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_stat ms;
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 16) == 0 &&
          mdb_env_open(env, dir, 0, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0 && mdb_dbi_open(txn, "texts", 0, &dbi) == 0);
    CHECK(mdb_stat(txn, dbi, &ms) == 0);
    size_t chunks = ms.ms_entries;
    CHECK(chunks > 20 && ms.ms_overflow_pages == 0,
          "%zu chunks, %zu overflow pages: chunks stay in their leaves", chunks,
          (size_t)ms.ms_overflow_pages);
    unsigned char key[12];
    for (int i = 0; i < 8; i++)
        key[i] = (unsigned char)((uint64_t)r[1].r.registered_at_us >> (56 - 8 * i));
    key[8] = key[9] = key[10] = 0;
    key[11] = 1;
    MDB_val k = {12, key};
    CHECK(mdb_del(txn, dbi, &k, NULL) == 0 && mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    unit_note("a text of %zu bytes packed in %zu chunks (of at most 658 bytes), no overflow page",
              big_len, chunks - 2);
    st = open_ok(dir, &o);
    CHECK_RC(nd_store_text(st, r[1].r.registered_at_us, text_len_visit, &len), -EBADMSG);
    CHECK_RC(nd_store_text(st, r[2].r.registered_at_us, text_len_visit, &len), 0);
    CHECK_RC(nd_store_text(st, r[1].r.registered_at_us + 5, text_len_visit, &len), -ENOENT);
    /* A deletion takes every chunk left. */
    CHECK_RC(del_rec_sync(st, &r[1].r), 0);
    nd_store_close(st);
    CHECK(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 16) == 0 &&
          mdb_env_open(env, dir, MDB_RDONLY, 0600) == 0);
    CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0 &&
          mdb_dbi_open(txn, "texts", 0, &dbi) == 0 && mdb_stat(txn, dbi, &ms) == 0);
    CHECK(ms.ms_entries == 2, "%zu chunks left: the two small texts'", (size_t)ms.ms_entries);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    for (unsigned i = 0; i < 3; i++)
        free_rec(&r[i]);
    free(big);
}

/* The text of record i of the text crash test: its id repeated, so a text
 * kept under another record's time would show. */
static size_t crash_text(unsigned i, char *buf, size_t cap)
{
    size_t n = 0;
    for (unsigned k = 0; k < 40 + i % 50 && n + 32 < cap; k++)
        n += (size_t)snprintf(buf + n, cap - n, "原文 %u text %u. ", i, k);
    return n;
}

static int text_equal_visit(void *arg, const char *text, size_t len)
{
    char want[4096];
    size_t n = crash_text((unsigned)(uintptr_t)arg, want, sizeof(want));
    return len == n && memcmp(text, want, n) == 0 ? 1 : 2;
}

static int present_visit(void *arg, const nd_record *r)
{
    char *present = arg;
    unsigned i;
    if (sscanf(r->id, "crash-text-%6u", &i) == 1 && i < 400)
        present[i] = 1;
    return 0;
}

/* A record and its kept text are one transaction: a process killed (-9)
 * with puts in flight leaves, after a reopen, every acknowledged record
 * with its text, and no record without its text or text without its
 * record. */
static void test_text_crash(void)
{
    enum { N = 400 };
    char dir[128];
    path_in(dir, sizeof(dir), "textcrash");
    nd_store_options o = opts_fast();
    o.sync = true;
    o.max_batch = 16;
    rec_buf x[N];
    for (unsigned i = 0; i < N; i++)
        make_rec(&x[i], "crash-text-", i, 0);
    int pfd[2];
    REQUIRE(pipe(pfd) == 0);
    acks = 0;
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        ack_fd = pfd[1];
        nd_store *c = NULL;
        char e[256], text[4096];
        if (nd_store_open(&c, dir, &o, e, sizeof(e)))
            _exit(2);
        for (unsigned i = 0; i < N; i++) {
            nd_record r = x[i].r;
            r.text = text;
            r.text_len = crash_text(i, text, sizeof(text));
            if (nd_store_put(c, &r, crash_done, (void *)(uintptr_t)i))
                _exit(4);
        }
        for (;;)
            pause();
    }
    close(pfd[1]);
    char acked[N] = {0}, present[N] = {0};
    unsigned i;
    size_t nack = read_acks(pfd[0], pid, acked, N);
    nd_store *st = open_ok(dir, &o);
    CHECK_RC(nd_store_scan(st, present_visit, present), 0);
    size_t lost = 0, torn = 0, wrong = 0, stored = 0;
    for (i = 0; i < N; i++) {
        int rc = nd_store_text(st, x[i].r.registered_at_us, text_equal_visit, (void *)(uintptr_t)i);
        lost += acked[i] && !present[i];
        torn += present[i] != (rc != -ENOENT);
        wrong += rc == 2 || (rc != 1 && rc != -ENOENT);
        stored += present[i];
    }
    CHECK(nack >= 150 && lost == 0 && torn == 0 && wrong == 0,
          "%zu acked, %zu lost, %zu torn, %zu wrong", nack, lost, torn, wrong);
    unit_note("puts with texts killed in flight: %zu acknowledged, %zu on disk, 0 lost, "
              "0 records without their text or texts without their record",
              nack, stored);
    nd_store_close(st);
    for (i = 0; i < N; i++)
        free_rec(&x[i]);
}

/* A backup carries the journals and the index (a retry in the copy still
 * replaces), and the amended claim fields. */
static void test_backup_events(void)
{
    char dir[128], dst[128], dst2[128], err[256];
    path_in(dir, sizeof(dir), "bevsrc");
    path_in(dst, sizeof(dst), "bevdst");
    path_in(dst2, sizeof(dst2), "bevdst2");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    rec_buf x;
    make_rec(&x, "bev-", 1, 0);
    CHECK_RC(put_sync(st, &x.r), 0);
    x.r.account = "acct";
    x.r.account_len = 4;
    x.r.status = ND_CLAIM_REVOKED;
    nd_store_event au = {.kind = ND_EVENT_AUDIT, .at_us = 7, .value = "{\"a\":1}", .value_len = 7};
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    CHECK_RC(waiter_finish(&w, nd_store_amend(st, &x.r, &au, waiter_cb, &w)), 0);
    char copy[16];
    for (unsigned i = 0; i < 1200; i++) {
        snprintf(copy, sizeof(copy), "k%u", i);
        nd_store_event e = det(x.r.registered_at_us, 1000 + i, copy);
        CHECK_RC(nd_store_event_put(st, &e, NULL, NULL), 0);
    }
    flush(st);
    CHECK_RC(nd_store_backup(st, dst, err, sizeof(err)), 0);
    nd_store_close(st);
    CHECK_RC(nd_store_backup_path(dir, dst2, err, sizeof(err)), 0);
    const char *dirs[2] = {dst, dst2};
    for (int d = 0; d < 2; d++) {
        nd_store *bk = open_ok(dirs[d], &o);
        check_stored(bk, &x.r);
        ev_text t;
        CHECK(strcmp(events_text(bk, ND_EVENT_AUDIT, 0, &t), "{\"a\":1}@7") == 0, "%s", t.s);
        events_text(bk, ND_EVENT_DETECTION, x.r.registered_at_us, &t);
        CHECK(t.n == 1200 && strncmp(t.s, "k1199@2199,k1198@2198", 21) == 0);
        nd_store_event e = det(x.r.registered_at_us, 5000, "k0");
        CHECK_RC(event_sync(bk, &e), 0);
        events_text(bk, ND_EVENT_DETECTION, x.r.registered_at_us, &t);
        CHECK(t.n == 1200 && strncmp(t.s, "k1199@2199,k1198@2198", 21) == 0, "%s", t.s);
        ev_text oldest; /* k0 updated in place, at its first time */
        memset(&oldest, 0, sizeof(oldest));
        CHECK_RC(nd_store_events(bk, ND_EVENT_DETECTION, x.r.registered_at_us, 1001, 0,
                                 ev_text_visit, &oldest),
                 0);
        CHECK(strcmp(oldest.s, "k0@1000") == 0, "%s", oldest.s);
        nd_store_close(bk);
    }
    free_rec(&x);
}

/* Replicas: the replication stream's sequence is written with the changes
 * that carry one (put, replace, amend, delete_at_seq), in the same
 * transaction; it survives a reopen and a backup, and never goes back. */
static void test_stream_seq(void)
{
    char dir[128], dst[128], err[256];
    path_in(dir, sizeof(dir), "seq");
    path_in(dst, sizeof(dst), "seqbk");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    CHECK_RC((int)nd_store_stream_seq(st), 0);
    rec_buf a, b;
    make_rec(&a, "sq-", 1, 0);
    make_rec(&b, "sq-", 2, 0);
    a.r.stream_seq = 5;
    CHECK_RC(nd_store_put(st, &a.r, NULL, NULL), 0);
    b.r.stream_seq = 0; /* a local change: the sequence stays */
    CHECK_RC(nd_store_put(st, &b.r, NULL, NULL), 0);
    flush(st);
    CHECK_RC((int)nd_store_stream_seq(st), 5);
    a.r.stream_seq = 9; /* a replace carries its entry */
    a.r.chars = 77;
    CHECK_RC(nd_store_replace(st, &a.r, NULL, NULL), 0);
    CHECK_RC(nd_store_delete_at_seq(st, b.id, b.r.id_len, b.r.registered_at_us, 12, NULL, NULL), 0);
    flush(st);
    CHECK_RC((int)nd_store_stream_seq(st), 12);
    /* An entry that changes nothing (a delete of a missing record) still
     * counts as applied; an older sequence never lowers it. */
    CHECK_RC(nd_store_delete_at_seq(st, "nope", 4, 1, 14, NULL, NULL), 0);
    a.r.stream_seq = 3;
    CHECK_RC(nd_store_replace(st, &a.r, NULL, NULL), 0);
    flush(st);
    CHECK_RC((int)nd_store_stream_seq(st), 14);
    CHECK_RC(nd_store_backup(st, dst, err, sizeof(err)), 0);
    nd_store_close(st);
    st = open_ok(dir, &o);
    CHECK_RC((int)nd_store_stream_seq(st), 14);
    CHECK_RC((int)nd_store_count(st), 1);
    nd_store_close(st);
    st = open_ok(dst, &o); /* a backup carries the sequence it had applied */
    CHECK_RC((int)nd_store_stream_seq(st), 14);
    nd_store_close(st);
    free_rec(&a);
    free_rec(&b);
}

/* nd_store_prefetch(): the records' read-ahead (store/readahead.c) runs
 * beside scans, writes and a close, and changes nothing a scan returns. */
typedef struct scanner {
    nd_store *st;
    scan_state s;
    int rc;
} scanner;

static void *scanner_main(void *arg)
{
    scanner *sc = arg;
    nd_store_prefetch(sc->st);
    sc->rc = nd_store_scan(sc->st, scan_order_visit, &sc->s);
    return NULL;
}

static void test_prefetch(void)
{
    enum { N = 3000, THREADS = 3 };
    char dir[128];
    path_in(dir, sizeof(dir), "prefetch");
    nd_store_options o = opts_fast();
    nd_store *st = open_ok(dir, &o);
    nd_store_prefetch(st); /* an empty store: nothing to walk */
    for (unsigned i = 0; i < N; i++) {
        rec_buf x;
        make_rec(&x, "pf-", i, 30);
        CHECK_RC(nd_store_put(st, &x.r, NULL, NULL), 0);
        if (i == N / 2)
            nd_store_prefetch(st); /* while the commit thread writes */
        free_rec(&x);
    }
    flush(st);
    scan_state s = {.ordered = true};
    nd_store_prefetch(st);
    nd_store_prefetch(st); /* one runs; the second call finds it */
    CHECK_RC(nd_store_scan(st, scan_order_visit, &s), 0);
    CHECK(s.n == N && s.ordered, "%d records, ordered %d", s.n, s.ordered);
    pthread_t th[THREADS];
    scanner sc[THREADS];
    for (int i = 0; i < THREADS; i++) {
        sc[i] = (scanner){st, {.ordered = true}, -1};
        pthread_create(&th[i], NULL, scanner_main, &sc[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK(sc[i].rc == 0 && sc[i].s.n == N && sc[i].s.ordered, "scanner %d: rc %d, %d records",
              i, sc[i].rc, sc[i].s.n);
    }
    nd_store_prefetch(st); /* left running: the close stops it */
    nd_store_close(st);
    st = open_ok(dir, &o);
    s = (scan_state){.ordered = true};
    CHECK_RC(nd_store_scan(st, scan_order_visit, &s), 0);
    CHECK(s.n == N && s.ordered);
    nd_store_close(st);
}

int main(void)
{
    snprintf(root, sizeof(root), "/tmp/nd-test-store-XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"basic", test_basic},
        {"invalid", test_invalid},
        {"replace", test_replace},
        {"order_and_close_drain", test_order_and_close_drain},
        {"batch_mixed", test_batch_mixed},
        {"group_commit", test_group_commit},
        {"concurrent_reads", test_concurrent_reads},
        {"prefetch", test_prefetch},
        {"lock", test_lock},
        {"dir_errors", test_dir_errors},
        {"corrupt", test_corrupt},
        {"layout", test_layout},
        {"sketches", test_sketches},
        {"sketches_many", test_sketches_many},
        {"map_full", test_map_full},
        {"disk_full", test_disk_full},
        {"backup", test_backup},
        {"stream_seq", test_stream_seq},
        {"old_format", test_old_format},
        {"append", test_append},
        {"gather", test_gather},
        {"headroom", test_headroom},
        {"out_of_order", test_out_of_order},
        {"duplicate_key", test_duplicate_key},
        {"delete_at", test_delete_at},
        {"layout_claims", test_layout_claims},
        {"old_layout", test_old_layout},
        {"layout_client", test_layout_client},
        {"events_durable", test_events_durable},
        {"audit_index_upgrade", test_audit_index_upgrade},
        {"amend_crash", test_amend_crash},
        {"text_crash", test_text_crash},
        {"text_chunks", test_text_chunks},
        {"supersede", test_supersede},
        {"backup_events", test_backup_events},
    };
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
        unit_run(tests[i].name, tests[i].fn);
    rm_rf(root);
    return unit_summary("store");
}
