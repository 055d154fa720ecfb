/* test_store_memory.c - the store interface (server/store/store.h) through both
 * implementations: the memory store's contract (the LMDB store's statuses,
 * order, sketches), and the on-commit observer of both, through real commits
 * (a real LMDB store in a mkdtemp() directory): once per committed change,
 * none for a refused one, in commit order, before the change's done callback,
 * with the record as written; replaying what it saw rebuilds the store. */
#include "store.h"
#include "store_memory.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"

static char root[64];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

/* ---- records ---- */

typedef struct rec_buf {
    nd_record r;
    char id[32];
    char meta[64];
    uint8_t anchors[8];
    uint8_t sketch[12];
} rec_buf;

/* Record number i (id "d<i>", time 1000 + i), in variant v (a replace
 * writes another variant: other simhash, meta and sketch). */
static void make(rec_buf *b, unsigned i, unsigned v)
{
    memset(b, 0, sizeof(*b));
    snprintf(b->id, sizeof(b->id), "d%u", i);
    snprintf(b->meta, sizeof(b->meta), "{\"v\":%u}", v);
    for (unsigned k = 0; k < sizeof(b->anchors); k++)
        b->anchors[k] = (uint8_t)(i * 7 + k);
    for (unsigned k = 0; k < sizeof(b->sketch); k++)
        b->sketch[k] = (uint8_t)(i * 13 + v * 5 + k);
    b->r = (nd_record){.id = b->id,
                       .id_len = strlen(b->id),
                       .simhash = i * 1000003ull + v,
                       .version = "nd-test-1",
                       .registered_at_us = 1000 + (int64_t)i,
                       .chars = 300 + i,
                       .meta = b->meta,
                       .meta_len = strlen(b->meta),
                       .anchors = b->anchors,
                       .nanchors = 2,
                       .sketch = b->sketch,
                       .sketch_len = sizeof(b->sketch)};
    b->r.text_hash[0] = (uint8_t)i;
}

/* ---- the observer's log ---- */

#define LOG_MAX 20000

typedef struct entry {
    nd_store_change kind;
    int64_t at;
    char id[32];
    uint64_t simhash;
    char meta[64];
    uint8_t sketch[12];
    size_t sketch_len;
} entry;

typedef struct obs_log {
    entry e[LOG_MAX];
    _Atomic size_t n;
} obs_log;

static void observer(void *arg, nd_store_change kind, const nd_record *rec)
{
    obs_log *l = arg;
    size_t i = atomic_load(&l->n);
    if (i >= LOG_MAX)
        return;
    entry *e = &l->e[i];
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    e->at = rec->registered_at_us;
    memcpy(e->id, rec->id, rec->id_len < 31 ? rec->id_len : 31);
    e->simhash = rec->simhash;
    if (rec->meta)
        memcpy(e->meta, rec->meta, rec->meta_len < 63 ? rec->meta_len : 63);
    e->sketch_len = rec->sketch_len;
    if (rec->sketch)
        memcpy(e->sketch, rec->sketch, rec->sketch_len < 12 ? rec->sketch_len : 12);
    atomic_store(&l->n, i + 1); /* one committing thread at a time per store */
}

/* One queued change and what its done callback saw. */
typedef struct op {
    nd_store_change kind;
    unsigned i, v;
    _Atomic int status;    /* 1: not done yet */
    _Atomic long seen_log; /* log length when done ran */
    obs_log *log;
} op;

static void op_done(void *arg, int status)
{
    op *o = arg;
    atomic_store(&o->seen_log, (long)atomic_load(&o->log->n));
    atomic_store(&o->status, status);
}

static int submit(nd_store *st, op *o)
{
    rec_buf b;
    make(&b, o->i, o->v);
    atomic_store(&o->status, 1);
    switch (o->kind) {
    case ND_STORE_PUT: return nd_store_put(st, &b.r, op_done, o);
    case ND_STORE_REPLACE: return nd_store_replace(st, &b.r, op_done, o);
    default: return nd_store_delete_at(st, b.id, strlen(b.id), b.r.registered_at_us, op_done, o);
    }
}

static void wait_all(op *ops, size_t n)
{
    for (size_t k = 0; k < n; k++)
        while (atomic_load(&ops[k].status) == 1)
            usleep(100);
}

/* A mix over records 0..nrec: puts, puts of a time held (-EEXIST),
 * replaces and deletes of held and missing records (-ENOENT). */
static size_t plan(op *ops, size_t cap, unsigned nrec, unsigned seed, obs_log *log)
{
    size_t n = 0;
    unit_rng_state = 0x9E3779B97F4A7C15ull ^ seed;
    for (unsigned i = 0; i < nrec && n < cap; i++) {
        ops[n++] = (op){.kind = ND_STORE_PUT, .i = i, .log = log};
        if (unit_rng() % 5 == 0 && n < cap)
            ops[n++] = (op){.kind = ND_STORE_PUT, .i = i, .v = 9, .log = log}; /* -EEXIST */
        if (i > 3 && unit_rng() % 3 == 0 && n < cap)
            ops[n++] = (op){.kind = ND_STORE_REPLACE,
                            .i = (unsigned)(unit_rng() % (i + 5)),
                            .v = 1 + (unsigned)(unit_rng() % 7),
                            .log = log};
        if (i > 3 && unit_rng() % 4 == 0 && n < cap)
            ops[n++] = (op){
                .kind = ND_STORE_DELETE, .i = (unsigned)(unit_rng() % (i + 5)), .log = log};
    }
    return n;
}

/* Replays log into a fresh memory store: the state a follower would have. */
static nd_store *replay(const obs_log *log)
{
    nd_store *m = NULL;
    if (nd_store_memory_open(&m) < 0)
        return NULL;
    for (size_t k = 0; k < atomic_load(&log->n); k++) {
        const entry *e = &log->e[k];
        unsigned i = (unsigned)(e->at - 1000);
        rec_buf b;
        make(&b, i, 0);
        b.r.simhash = e->simhash;
        memcpy(b.meta, e->meta, sizeof(b.meta));
        b.r.meta_len = strlen(b.meta);
        memcpy(b.sketch, e->sketch, sizeof(b.sketch));
        int rc = e->kind == ND_STORE_PUT ? nd_store_put(m, &b.r, NULL, NULL)
                 : e->kind == ND_STORE_REPLACE
                     ? nd_store_replace(m, &b.r, NULL, NULL)
                     : nd_store_delete_at(m, e->id, strlen(e->id), e->at, NULL, NULL);
        CHECK(rc == 0);
    }
    return m;
}

/* A store's content as text: one line per record, in scan order, with its
 * sketch. */
typedef struct dump {
    char *buf;
    size_t len, cap;
    nd_store *st;
} dump;

static int dump_sketch(void *arg, size_t i, const uint8_t *buf, size_t len)
{
    dump *d = arg;
    (void)i;
    for (size_t k = 0; k < len && d->len + 3 < d->cap; k++)
        d->len += (size_t)snprintf(d->buf + d->len, d->cap - d->len, "%02x", buf[k]);
    return 0;
}

static int dump_one(void *arg, const nd_record *r)
{
    dump *d = arg;
    if (d->cap - d->len < 256)
        return -ENOSPC;
    d->len += (size_t)snprintf(d->buf + d->len, d->cap - d->len, "%lld %.*s %llx %s %s %u ",
                               (long long)r->registered_at_us, (int)r->id_len, r->id,
                               (unsigned long long)r->simhash, r->version, r->meta ? r->meta : "-",
                               r->nanchors);
    int64_t at = r->registered_at_us;
    int rc = nd_store_sketches(d->st, &at, 1, dump_sketch, d);
    d->buf[d->len++] = '\n';
    d->buf[d->len] = '\0';
    return rc;
}

static char *dump_store(nd_store *st)
{
    dump d = {.cap = 1 << 20, .st = st};
    d.buf = calloc(1, d.cap);
    if (d.buf && nd_store_scan(st, dump_one, &d) != 0) {
        free(d.buf);
        return NULL;
    }
    return d.buf;
}

/* ---- tests ---- */

static int count_visit(void *arg, const nd_record *r)
{
    (void)r;
    (*(int *)arg)++;
    return 0;
}

static int get_visit(void *arg, const nd_record *r)
{
    rec_buf *b = arg;
    CHECK(r->id_len == b->r.id_len && memcmp(r->id, b->r.id, r->id_len) == 0);
    CHECK(r->simhash == b->r.simhash && r->chars == b->r.chars);
    CHECK(strcmp(r->version, "nd-test-1") == 0 && r->meta && strcmp(r->meta, b->meta) == 0);
    CHECK(r->nanchors == 2 && memcmp(r->anchors, b->anchors, 8) == 0);
    CHECK(r->text_hash[0] == b->r.text_hash[0]);
    CHECK(r->sketch == NULL, "get never hands out the sketch (as LMDB's)");
    return 7;
}

static int sketch_visit(void *arg, size_t i, const uint8_t *buf, size_t len)
{
    int *got = arg;
    got[i] = buf ? (int)len * 1000 + buf[0] : -1;
    return 0;
}

/* The memory store answers as the LMDB store does. */
static void test_memory_contract(void)
{
    nd_store *st = NULL;
    REQUIRE(nd_store_memory_open(&st) == 0);
    CHECK(!nd_store_durable(st) && strcmp(nd_store_kind(st), "memory") == 0);
    CHECK(nd_store_writable(st));
    op o[8];
    obs_log *log = calloc(1, sizeof(*log));
    for (unsigned i = 0; i < 3; i++) {
        o[i] = (op){.kind = ND_STORE_PUT, .i = 2 - i, .log = log};
        CHECK(submit(st, &o[i]) == 0);
        CHECK(atomic_load(&o[i].status) == 0, "committed within the call");
    }
    o[3] = (op){.kind = ND_STORE_PUT, .i = 1, .v = 4, .log = log};
    CHECK(submit(st, &o[3]) == 0 && atomic_load(&o[3].status) == -EEXIST);
    o[4] = (op){.kind = ND_STORE_REPLACE, .i = 5, .log = log};
    CHECK(submit(st, &o[4]) == 0 && atomic_load(&o[4].status) == -ENOENT);
    o[5] = (op){.kind = ND_STORE_DELETE, .i = 6, .log = log};
    CHECK(submit(st, &o[5]) == 0 && atomic_load(&o[5].status) == -ENOENT);
    rec_buf b;
    make(&b, 1, 0);
    b.r.id = "other";
    b.r.id_len = 5;
    CHECK(nd_store_delete_at(st, "other", 5, 1001, NULL, NULL) == 0);
    CHECK(nd_store_count(st) == 3, "a delete under another id deletes nothing");
    b.r.version = NULL;
    CHECK(nd_store_put(st, &b.r, NULL, NULL) == -EINVAL);
    CHECK(nd_store_get(st, -1, get_visit, &b) == -EINVAL);

    make(&b, 1, 0);
    CHECK(nd_store_get(st, 1001, get_visit, &b) == 7);
    CHECK(nd_store_get(st, 1009, get_visit, &b) == -ENOENT);
    int64_t at[4] = {1002, -1, 1009, 1000};
    int got[4];
    CHECK(nd_store_sketches(st, at, 4, sketch_visit, got) == 0);
    rec_buf b2, b0;
    make(&b2, 2, 0);
    make(&b0, 0, 0);
    CHECK(got[0] == 12000 + b2.sketch[0] && got[1] == -1 && got[2] == -1 &&
              got[3] == 12000 + b0.sketch[0],
          "%d %d %d %d", got[0], got[1], got[2], got[3]);
    char *s = dump_store(st);
    REQUIRE(s != NULL);
    CHECK(strncmp(s, "1000 d0", 7) == 0 && strstr(s, "\n1001 d1") && strstr(s, "\n1002 d2"),
          "scan in registration order: %s", s);
    free(s);
    nd_store_stats stt;
    nd_store_get_stats(st, &stt);
    CHECK(stt.commits == 3 && stt.changes == 3, "%llu", (unsigned long long)stt.commits);
    int n = 0;
    CHECK(nd_store_scan(st, count_visit, &n) == 0 && n == 3);
    /* Grows past its first table. */
    for (unsigned i = 10; i < 5000; i++) {
        make(&b, i, 0);
        CHECK(nd_store_put(st, &b.r, NULL, NULL) == 0);
    }
    CHECK(nd_store_count(st) == 4993);
    make(&b, 4000, 0);
    CHECK(nd_store_get(st, 5000, get_visit, &b) == 7);
    nd_store_close(st);
    free(log);
}

/* The observer of store st (open, empty) through nops changes from nthreads
 * threads, each submitting its part of the plan in order. */
typedef struct feeder {
    nd_store *st;
    op *ops;
    size_t n;
} feeder;

static void *feed(void *arg)
{
    feeder *f = arg;
    for (size_t k = 0; k < f->n; k++) {
        int rc;
        while ((rc = submit(f->st, &f->ops[k])) == -EBUSY)
            usleep(200);
        CHECK(rc == 0, "%d", rc);
        if (rc)
            atomic_store(&f->ops[k].status, -1000);
    }
    return NULL;
}

static void check_observer(nd_store *st, unsigned nthreads, const char *what)
{
    enum { PER = 700 };
    obs_log *log = calloc(1, sizeof(*log));
    op *ops = calloc((size_t)nthreads * PER * 3, sizeof(*ops));
    REQUIRE(log && ops);
    nd_store_set_observer(st, observer, log);
    feeder f[8];
    pthread_t th[8];
    size_t total = 0;
    for (unsigned t = 0; t < nthreads; t++) {
        /* Thread t owns records t*100000 + ..., so its own order is the
         * only order among its changes. */
        op *mine = ops + total;
        size_t n = plan(mine, (size_t)PER * 3, PER, t + 1, log);
        for (size_t k = 0; k < n; k++)
            mine[k].i += t * 100000;
        f[t] = (feeder){st, mine, n};
        total += n;
    }
    for (unsigned t = 0; t < nthreads; t++)
        pthread_create(&th[t], NULL, feed, &f[t]);
    for (unsigned t = 0; t < nthreads; t++)
        pthread_join(th[t], NULL);
    wait_all(ops, total);

    /* Exactly once: one entry per change whose done got 0, none for others;
     * each change's entry was in the log before its done ran; per thread,
     * the entries come in the order of its submissions (a change's entry
     * is found after the previous committed change's). */
    size_t committed = 0, refused = 0, bad_order = 0, missing = 0, late = 0;
    size_t nlog = atomic_load(&log->n);
    char *used = calloc(nlog ? nlog : 1, 1);
    for (unsigned t = 0; t < nthreads; t++) {
        size_t pos = 0; /* where the previous committed change of t was found */
        bool first = true;
        for (size_t k = 0; k < f[t].n; k++) {
            op *o = &f[t].ops[k];
            int status = atomic_load(&o->status);
            if (status != 0) {
                refused++;
                continue;
            }
            committed++;
            rec_buf b;
            make(&b, o->i, o->v);
            size_t at = first ? 0 : pos + 1, found = SIZE_MAX;
            for (size_t j = at; j < nlog; j++) {
                const entry *e = &log->e[j];
                if (!used[j] && e->kind == o->kind && e->at == b.r.registered_at_us &&
                    strcmp(e->id, b.id) == 0 &&
                    (o->kind == ND_STORE_DELETE ||
                     (e->simhash == b.r.simhash && strcmp(e->meta, b.meta) == 0 &&
                      e->sketch_len == 12 && memcmp(e->sketch, b.sketch, 12) == 0))) {
                    found = j;
                    break;
                }
            }
            if (found == SIZE_MAX) {
                /* Earlier than the previous one of this thread, or absent. */
                bool anywhere = false;
                for (size_t j = 0; j < nlog && !anywhere; j++)
                    anywhere = !used[j] && log->e[j].kind == o->kind &&
                               log->e[j].at == b.r.registered_at_us;
                if (anywhere)
                    bad_order++;
                else
                    missing++;
                continue;
            }
            used[found] = 1;
            if ((long)found >= atomic_load(&o->seen_log))
                late++; /* done ran before the observer saw it */
            pos = found;
            first = false;
        }
    }
    CHECK(committed == nlog, "%s: %zu committed changes, %zu observed", what, committed, nlog);
    CHECK(missing == 0 && bad_order == 0 && late == 0,
          "%s: missing %zu, out of order %zu, observed after done %zu", what, missing, bad_order,
          late);
    CHECK(refused > 50 && committed > 500, "%s: refused %zu committed %zu (a real mix)", what,
          refused, committed);
    unit_note("%s, %u threads: %zu changes, %zu committed and observed once each, %zu refused",
              what, nthreads, total, committed, refused);

    /* What the observer saw, replayed, is the store. */
    nd_store *copy = replay(log);
    char *a = dump_store(st), *b = copy ? dump_store(copy) : NULL;
    CHECK(a && b && strcmp(a, b) == 0, "%s: replaying the observer's log gives another store",
          what);
    free(a);
    free(b);
    nd_store_close(copy);
    nd_store_set_observer(st, NULL, NULL);
    free(used);
    free(ops);
    free(log);
}

static void test_observer_memory(void)
{
    nd_store *st = NULL;
    REQUIRE(nd_store_memory_open(&st) == 0);
    check_observer(st, 1, "memory");
    nd_store_close(st);
    REQUIRE(nd_store_memory_open(&st) == 0);
    check_observer(st, 4, "memory");
    nd_store_close(st);
}

static void test_observer_lmdb(void)
{
    for (unsigned threads = 1; threads <= 4; threads += 3) {
        char dir[128];
        snprintf(dir, sizeof(dir), "%s/lmdb-%u", root, threads);
        nd_store_options o;
        nd_store_options_default(&o);
        o.sync = false;
        o.map_size = (size_t)64 << 20;
        o.max_batch = 64; /* many group commits */
        char err[256];
        nd_store *st = NULL;
        REQUIRE(nd_store_open(&st, dir, &o, err, sizeof(err)) == 0, "%s", err);
        CHECK(nd_store_durable(st) && strcmp(nd_store_kind(st), "lmdb") == 0);
        check_observer(st, threads, threads == 1 ? "lmdb" : "lmdb, concurrent");
        nd_store_close(st);
    }
}

int main(void)
{
    snprintf(root, sizeof(root), "/tmp/nd-store-mem-XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    UNIT_RUN(test_memory_contract);
    UNIT_RUN(test_observer_memory);
    UNIT_RUN(test_observer_lmdb);
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return unit_summary("store_memory");
}
