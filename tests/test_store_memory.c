/* test_store_memory.c - the store interface (server/store/store.h) through both
 * implementations: the memory store's contract (the LMDB store's statuses,
 * order, sketches), and claim fields, amend and the journals through both
 * (a real LMDB store in a mkdtemp() directory). */
#include "store.h"
#include "store_memory.h"
#include "text_pack.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

/* One queued change and what its done callback saw. */
typedef struct op {
    nd_store_change kind;
    unsigned i, v;
    _Atomic int status; /* 1: not done yet */
} op;

static void op_done(void *arg, int status)
{
    op *o = arg;
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
    for (unsigned i = 0; i < 3; i++) {
        o[i] = (op){.kind = ND_STORE_PUT, .i = 2 - i};
        CHECK(submit(st, &o[i]) == 0);
        CHECK(atomic_load(&o[i].status) == 0, "committed within the call");
    }
    o[3] = (op){.kind = ND_STORE_PUT, .i = 1, .v = 4};
    CHECK(submit(st, &o[3]) == 0 && atomic_load(&o[3].status) == -EEXIST);
    o[4] = (op){.kind = ND_STORE_REPLACE, .i = 5};
    CHECK(submit(st, &o[4]) == 0 && atomic_load(&o[4].status) == -ENOENT);
    o[5] = (op){.kind = ND_STORE_DELETE, .i = 6};
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
}

/* ---- the originality workflow: claim fields, amend, events, through both stores ---- */

typedef struct impl {
    const char *name;
    nd_store *(*open)(const char *tag, uint64_t copies_max);
} impl;

/* Audit retention of the stores the impls open next (0: none). */
static uint64_t audit_max_entries;
static int64_t audit_max_age_us;

static nd_store *open_memory(const char *tag, uint64_t copies_max)
{
    (void)tag;
    nd_store_options o;
    nd_store_options_default(&o);
    o.detections_max = copies_max;
    o.audit_max_entries = audit_max_entries;
    o.audit_max_age_us = audit_max_age_us;
    nd_store *st = NULL;
    return nd_store_memory_open_with(&st, &o) == 0 ? st : NULL;
}

static nd_store *open_lmdb(const char *tag, uint64_t copies_max)
{
    static unsigned seq;
    char dir[192], err[256];
    snprintf(dir, sizeof(dir), "%s/%s-%u", root, tag, seq++);
    nd_store_options o;
    nd_store_options_default(&o);
    o.sync = false;
    o.map_size = (size_t)64 << 20;
    o.detections_max = copies_max;
    o.audit_max_entries = audit_max_entries;
    o.audit_max_age_us = audit_max_age_us;
    nd_store *st = NULL;
    int rc = nd_store_open(&st, dir, &o, err, sizeof(err));
    if (rc)
        fprintf(stderr, "open %s: %s\n", dir, err);
    return rc ? NULL : st;
}

static const impl impls[] = {{"memory", open_memory}, {"lmdb", open_lmdb}};

/* Waits for a change's done callback (the memory store's ran already). */
typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls, status;
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

static int waited(waiter *w, int queued)
{
    if (queued == 0) {
        pthread_mutex_lock(&w->mu);
        while (w->calls == 0)
            pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
    }
    CHECK(w->calls == (queued == 0));
    return queued ? queued : w->status;
}

#define WAITER                                                                                     \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0                                  \
    }

static int put_w(nd_store *st, const nd_record *r)
{
    waiter w = WAITER;
    return waited(&w, nd_store_put(st, r, waiter_cb, &w));
}

static int replace_w(nd_store *st, const nd_record *r)
{
    waiter w = WAITER;
    return waited(&w, nd_store_replace(st, r, waiter_cb, &w));
}

static int amend_w(nd_store *st, const nd_record *r, const nd_store_event *audit)
{
    waiter w = WAITER;
    return waited(&w, nd_store_amend(st, r, audit, waiter_cb, &w));
}

static int event_w(nd_store *st, const nd_store_event *ev)
{
    waiter w = WAITER;
    return waited(&w, nd_store_event_put(st, ev, waiter_cb, &w));
}

/* What get hands out for the claim fields. */
typedef struct claim_seen {
    char account[ND_ACCOUNT_MAX + 1];
    bool has_account, has_policy;
    size_t account_len, policy_len;
    char *policy;
    uint8_t status;
    uint64_t simhash;
} claim_seen;

static int claim_visit(void *arg, const nd_record *r)
{
    claim_seen *c = arg;
    free(c->policy);
    memset(c, 0, sizeof(*c));
    c->has_account = r->account != NULL;
    c->account_len = r->account_len;
    CHECK(c->has_account == (r->account_len > 0));
    if (r->account) {
        CHECK(r->account[r->account_len] == '\0', "NUL-terminated");
        memcpy(c->account, r->account, r->account_len);
    }
    c->has_policy = r->policy != NULL;
    c->policy_len = r->policy_len;
    if (r->policy) {
        CHECK(r->policy[r->policy_len] == '\0', "NUL-terminated");
        c->policy = strdup(r->policy);
    }
    c->status = r->status;
    c->simhash = r->simhash;
    return 0;
}

/* nd_record's account, policy and status: kept, handed out by get and scan,
 * replaced, validated (-EINVAL, done not called) in put, replace, amend. */
static void check_claim_fields(const impl *im)
{
    nd_store *st = im->open("claim", 0);
    REQUIRE(st != NULL);
    rec_buf b[4];
    static const char *pol = "{\"reprint\":\"forbid\",\"whitelist\":[]}";
    for (unsigned i = 0; i < 4; i++)
        make(&b[i], i, 0);
    b[0].r.account = "acct-0";
    b[0].r.account_len = 6;
    b[0].r.policy = pol;
    b[0].r.policy_len = strlen(pol);
    b[0].r.status = ND_CLAIM_REVOKED;
    b[1].r.account = "acct-1";
    b[1].r.account_len = 6;
    b[2].r.policy = ""; /* present, empty */
    b[3].r.account = "ignored";
    b[3].r.account_len = 0; /* 0: none */
    for (unsigned i = 0; i < 4; i++)
        CHECK(put_w(st, &b[i].r) == 0);
    claim_seen c = {0};
    CHECK(nd_store_get(st, 1000, claim_visit, &c) == 0);
    CHECK(c.has_account && strcmp(c.account, "acct-0") == 0 && c.has_policy &&
          strcmp(c.policy, pol) == 0 && c.status == ND_CLAIM_REVOKED);
    CHECK(nd_store_get(st, 1001, claim_visit, &c) == 0);
    CHECK(c.has_account && strcmp(c.account, "acct-1") == 0 && !c.has_policy &&
          c.status == ND_CLAIM_ACTIVE);
    CHECK(nd_store_get(st, 1002, claim_visit, &c) == 0);
    CHECK(!c.has_account && c.has_policy && c.policy_len == 0 && c.policy[0] == '\0');
    CHECK(nd_store_get(st, 1003, claim_visit, &c) == 0);
    CHECK(!c.has_account && c.account_len == 0 && !c.has_policy && c.status == 0);
    /* replace changes them like any field. */
    b[1].r.account = NULL;
    b[1].r.account_len = 0;
    b[1].r.status = ND_CLAIM_REVOKED;
    CHECK(replace_w(st, &b[1].r) == 0);
    CHECK(nd_store_get(st, 1001, claim_visit, &c) == 0);
    CHECK(!c.has_account && c.status == ND_CLAIM_REVOKED);
    /* The longest account and policy are taken. */
    char *big = malloc(ND_POLICY_MAX + 2);
    memset(big, 'p', ND_POLICY_MAX + 1);
    big[ND_POLICY_MAX + 1] = '\0';
    b[2].r.account = big;
    b[2].r.account_len = ND_ACCOUNT_MAX;
    b[2].r.policy = big;
    b[2].r.policy_len = ND_POLICY_MAX;
    CHECK(replace_w(st, &b[2].r) == 0);
    CHECK(nd_store_get(st, 1002, claim_visit, &c) == 0);
    CHECK(c.account_len == ND_ACCOUNT_MAX && c.policy_len == ND_POLICY_MAX);
    /* Limits. */
    waiter w = WAITER;
    for (int k = 0; k < 5; k++) {
        nd_record r = b[3].r;
        r.registered_at_us = 1003;
        if (k == 0)
            r.account = big, r.account_len = ND_ACCOUNT_MAX + 1;
        else if (k == 1)
            r.account = NULL, r.account_len = 3;
        else if (k == 2)
            r.policy = big, r.policy_len = ND_POLICY_MAX + 1;
        else if (k == 3)
            r.policy = NULL, r.policy_len = 2;
        else
            r.status = 3; /* past ND_CLAIM_SUPERSEDED */
        CHECK(nd_store_replace(st, &r, waiter_cb, &w) == -EINVAL, "%d", k);
        CHECK(nd_store_amend(st, &r, NULL, waiter_cb, &w) == -EINVAL, "%d", k);
        r.registered_at_us = 1100;
        CHECK(nd_store_put(st, &r, waiter_cb, &w) == -EINVAL, "%d", k);
    }
    CHECK(w.calls == 0);
    CHECK(nd_store_count(st) == 4);
    int n = 0;
    CHECK(nd_store_scan(st, count_visit, &n) == 0 && n == 4);
    free(c.policy);
    free(big);
    nd_store_close(st);
}

static void test_claim_fields(void)
{
    for (size_t i = 0; i < 2; i++)
        check_claim_fields(&impls[i]);
}

/* Events seen by a visit, in order. */
typedef struct ev_list {
    size_t n, cap;
    int64_t *at, *owner;
    char **copy, **value;
} ev_list;

static int list_visit(void *arg, const nd_store_event *ev)
{
    ev_list *l = arg;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->at = realloc(l->at, l->cap * sizeof(*l->at));
        l->owner = realloc(l->owner, l->cap * sizeof(*l->owner));
        l->copy = realloc(l->copy, l->cap * sizeof(*l->copy));
        l->value = realloc(l->value, l->cap * sizeof(*l->value));
    }
    CHECK(ev->value != NULL && ev->value[ev->value_len] == '\0');
    l->at[l->n] = ev->at_us;
    l->owner[l->n] = ev->owner_at;
    l->copy[l->n] = ev->copy_id ? strndup(ev->copy_id, ev->copy_id_len) : NULL;
    l->value[l->n] = strndup(ev->value, ev->value_len);
    l->n++;
    return 0;
}

static void list_free(ev_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->copy[i]);
        free(l->value[i]);
    }
    free(l->at);
    free(l->owner);
    free(l->copy);
    free(l->value);
    memset(l, 0, sizeof(*l));
}

static nd_store_event audit_ev(int64_t at, const char *value)
{
    return (nd_store_event){
        .kind = ND_EVENT_AUDIT, .at_us = at, .value = value, .value_len = strlen(value)};
}

/* amend: the record changes, the sketch stays (whatever rec->sketch says);
 * the audit event is written with it, and not when the amend is refused. */
static void check_amend(const impl *im)
{
    nd_store *st = im->open("amend", 0);
    REQUIRE(st != NULL);
    rec_buf b, a;
    make(&b, 1, 0);
    CHECK(put_w(st, &b.r) == 0);
    make(&a, 1, 3); /* other simhash, meta, sketch */
    a.r.policy = "{\"reprint\":\"forbid\"}";
    a.r.policy_len = strlen(a.r.policy);
    a.r.status = ND_CLAIM_REVOKED;
    nd_store_event au = audit_ev(5000, "{\"action\":\"revoke\"}");
    CHECK(amend_w(st, &a.r, &au) == 0);
    claim_seen c = {0};
    CHECK(nd_store_get(st, 1001, claim_visit, &c) == 0);
    CHECK(c.status == ND_CLAIM_REVOKED && c.has_policy && c.simhash == a.r.simhash);
    int64_t at = 1001;
    int got = 0;
    CHECK(nd_store_sketches(st, &at, 1, sketch_visit, &got) == 0);
    CHECK(got == 12000 + b.sketch[0], "the sketch put first stays: %d", got);
    a.r.sketch = NULL; /* ignored too */
    a.r.sketch_len = 0;
    a.r.status = ND_CLAIM_ACTIVE;
    CHECK(amend_w(st, &a.r, NULL) == 0);
    CHECK(nd_store_sketches(st, &at, 1, sketch_visit, &got) == 0 && got == 12000 + b.sketch[0]);
    CHECK(nd_store_get(st, 1001, claim_visit, &c) == 0 && c.status == ND_CLAIM_ACTIVE);
    /* Refused: another id at the time, or no record there: no audit. */
    rec_buf x;
    make(&x, 2, 0);
    x.r.registered_at_us = 1001;
    nd_store_event au2 = audit_ev(6000, "{\"action\":\"restore\"}");
    CHECK(amend_w(st, &x.r, &au2) == -ENOENT);
    make(&x, 7, 0);
    CHECK(amend_w(st, &x.r, &au2) == -ENOENT);
    ev_list l = {0};
    CHECK(nd_store_events(st, ND_EVENT_AUDIT, 0, -1, 0, list_visit, &l) == 0);
    CHECK(l.n == 1 && l.at[0] == 5000 && strcmp(l.value[0], "{\"action\":\"revoke\"}") == 0, "%zu",
          l.n);
    list_free(&l);
    /* A bad audit event is refused before anything is queued. */
    waiter w = WAITER;
    nd_store_event bad = au;
    bad.kind = ND_EVENT_DETECTION;
    bad.copy_id = "c";
    bad.copy_id_len = 1;
    CHECK(nd_store_amend(st, &a.r, &bad, waiter_cb, &w) == -EINVAL);
    bad = au;
    bad.copy_id = "c";
    bad.copy_id_len = 1;
    CHECK(nd_store_amend(st, &a.r, &bad, waiter_cb, &w) == -EINVAL);
    bad = au;
    bad.at_us = -1;
    CHECK(nd_store_amend(st, &a.r, &bad, waiter_cb, &w) == -EINVAL);
    CHECK(w.calls == 0);
    free(c.policy);
    nd_store_close(st);
}

static void test_amend(void)
{
    for (size_t i = 0; i < 2; i++)
        check_amend(&impls[i]);
}

static nd_store_event det_ev(int64_t owner, int64_t at, const char *copy, const char *value)
{
    return (nd_store_event){.kind = ND_EVENT_DETECTION,
                            .owner_at = owner,
                            .at_us = at,
                            .copy_id = copy,
                            .copy_id_len = strlen(copy),
                            .value = value,
                            .value_len = value ? strlen(value) : 0};
}

/* Pages through the detections of owner, limit per page, into all (newest
 * first); returns the number of pages. */
static int page_all(nd_store *st, nd_event_kind kind, int64_t owner, size_t limit, ev_list *all,
                    int64_t before)
{
    int pages = 0;
    for (;;) {
        ev_list l = {0};
        CHECK(nd_store_events(st, kind, owner, before, limit, list_visit, &l) == 0);
        CHECK(l.n <= limit);
        for (size_t i = 0; i < l.n; i++) {
            list_visit(all, &(nd_store_event){.kind = kind,
                                              .owner_at = l.owner[i],
                                              .at_us = l.at[i],
                                              .copy_id = l.copy[i],
                                              .copy_id_len = l.copy[i] ? strlen(l.copy[i]) : 0,
                                              .value = l.value[i],
                                              .value_len = strlen(l.value[i])});
        }
        size_t n = l.n;
        if (n)
            before = l.at[n - 1];
        list_free(&l);
        if (n == 0)
            break;
        pages++;
    }
    return pages;
}

static int stop_at_3(void *arg, const nd_store_event *ev)
{
    (void)ev;
    return ++*(int *)arg == 3 ? 99 : 0;
}

/* 1,500 detections of one original (colliding and out-of-order times,
 * neighbours on both sides) page newest first with no gap or repeat, also
 * while newer ones arrive between pages. */
static void check_events_paging(const impl *im)
{
    enum { N = 1500 };
    nd_store *st = im->open("paging", 0);
    REQUIRE(st != NULL);
    char copy[32], val[64];
    for (unsigned i = 0; i < N; i++) {
        snprintf(copy, sizeof(copy), "copy-%u", i);
        snprintf(val, sizeof(val), "{\"i\":%u}", i);
        int64_t at = i % 7 == 0 ? 5000 + i : 10000 + i / 3; /* collisions: bumped */
        nd_store_event ev = det_ev(7777, at, copy, val);
        CHECK(nd_store_event_put(st, &ev, NULL, NULL) == 0);
        if (i % 150 == 0) {
            ev = det_ev(7776, at, copy, val);
            CHECK(nd_store_event_put(st, &ev, NULL, NULL) == 0);
            ev = det_ev(7778, at, copy, val);
            CHECK(nd_store_event_put(st, &ev, NULL, NULL) == 0);
        }
    }
    nd_store_event last = det_ev(7777, 1, "copy-0", "{}"); /* wait for the queue */
    CHECK(event_w(st, &last) == 0);                        /* replaces copy-0 */
    ev_list all = {0}, one = {0};
    int pages = page_all(st, ND_EVENT_DETECTION, 7777, 97, &all, -1);
    CHECK(all.n == N && pages == (N + 96) / 97, "%zu in %d pages", all.n, pages);
    CHECK(nd_store_events(st, ND_EVENT_DETECTION, 7777, -1, 0, list_visit, &one) == 0);
    CHECK(one.n == N);
    char *seen = calloc(N, 1);
    bool ordered = true, same = one.n == all.n, owners = true;
    for (size_t i = 0; i < all.n; i++) {
        unsigned k = 0;
        CHECK(sscanf(all.copy[i], "copy-%u", &k) == 1 && k < N);
        if (k < N)
            seen[k]++;
        if (i && all.at[i] >= all.at[i - 1])
            ordered = false;
        if (all.owner[i] != 7777)
            owners = false;
        if (same && (one.at[i] != all.at[i] || strcmp(one.copy[i], all.copy[i])))
            same = false;
    }
    size_t once = 0;
    for (unsigned k = 0; k < N; k++)
        once += seen[k] == 1;
    CHECK(once == N && ordered && owners && same, "%zu once, ordered %d", once, ordered);
    CHECK(all.n && strcmp(all.copy[all.n - 1], "copy-0") == 0,
          "copy-0, detected again, stays the oldest");
    /* Paging while newer detections arrive: the rest is exactly the older part. */
    ev_list first = {0}, rest = {0};
    CHECK(nd_store_events(st, ND_EVENT_DETECTION, 7777, -1, 500, list_visit, &first) == 0);
    for (unsigned i = 0; i < 100; i++) {
        snprintf(copy, sizeof(copy), "new-%u", i);
        nd_store_event ev = det_ev(7777, 900000 + i, copy, NULL);
        CHECK(event_w(st, &ev) == 0);
    }
    page_all(st, ND_EVENT_DETECTION, 7777, 250, &rest, first.at[first.n - 1]);
    CHECK(first.n == 500 && rest.n == N - 500, "%zu", rest.n);
    CHECK(rest.n == N - 500 && rest.at[0] == all.at[500] &&
          strcmp(rest.copy[0], all.copy[500]) == 0);
    /* Neighbours, other kinds, stop early, bad calls. */
    ev_list nb = {0};
    CHECK(nd_store_events(st, ND_EVENT_DETECTION, 7776, -1, 0, list_visit, &nb) == 0 && nb.n == 10);
    CHECK(nd_store_events(st, ND_EVENT_DETECTION, 7778, nb.at[4], 0, list_visit, &nb) == 0 &&
          nb.n == 15);
    CHECK(nd_store_events(st, ND_EVENT_AUDIT, 7777, -1, 0, list_visit, &nb) == 0 && nb.n == 15);
    CHECK(nd_store_events(st, ND_EVENT_DETECTION, 1, -1, 0, list_visit, &nb) == 0 && nb.n == 15);
    CHECK(nd_store_events(st, ND_EVENT_DETECTION, 7777, 0, 0, list_visit, &nb) == 0 && nb.n == 15);
    int calls = 0;
    CHECK(nd_store_events(st, ND_EVENT_DETECTION, 7777, -1, 0, stop_at_3, &calls) == 99);
    CHECK(nd_store_events(st, 3, 7777, -1, 0, list_visit, &nb) == -EINVAL);
    CHECK(nd_store_events(st, ND_EVENT_AUDIT, -1, -1, 0, list_visit, &nb) == -EINVAL);
    free(seen);
    list_free(&all);
    list_free(&one);
    list_free(&first);
    list_free(&rest);
    list_free(&nb);
    nd_store_close(st);
}

static void test_events_paging(void)
{
    for (size_t i = 0; i < 2; i++)
        check_events_paging(&impls[i]);
}

/* The copies of owner, newest first, as "c1,c3,...". */
static void copies_of(nd_store *st, int64_t owner, char *out, size_t n)
{
    ev_list l = {0};
    CHECK(nd_store_events(st, ND_EVENT_DETECTION, owner, -1, 0, list_visit, &l) == 0);
    out[0] = '\0';
    for (size_t i = 0; i < l.n; i++)
        snprintf(out + strlen(out), n - strlen(out), "%s%s", i ? "," : "", l.copy[i]);
    list_free(&l);
}

/* A detection of the same (owner, copy id) updates the earlier one in
 * place (one entry, at its first time, with its new value); retention drops
 * the oldest beyond copies_max in the same change; audit is not bounded
 * (no audit retention set). */
static void check_events_replace(const impl *im)
{
    nd_store *st = im->open("replace", 3);
    REQUIRE(st != NULL);
    char got[256];
    nd_store_event e;
    const char *ids[] = {"c1", "c2", "c3"};
    for (int i = 0; i < 3; i++) {
        e = det_ev(42, 100 + i, ids[i], "{\"v\":1}");
        CHECK(event_w(st, &e) == 0);
    }
    e = det_ev(43, 100, "c1", "{}"); /* another original: its own journal */
    CHECK(event_w(st, &e) == 0);
    e = det_ev(42, 200, "c1", "{\"v\":2}"); /* a retry of c1 */
    CHECK(event_w(st, &e) == 0);
    copies_of(st, 42, got, sizeof(got));
    CHECK(strcmp(got, "c3,c2,c1") == 0, "%s", got);
    ev_list l = {0};
    CHECK(nd_store_events(st, ND_EVENT_DETECTION, 42, 101, 1, list_visit, &l) == 0);
    CHECK(l.n == 1 && l.at[0] == 100 && strcmp(l.value[0], "{\"v\":2}") == 0);
    list_free(&l);
    e = det_ev(42, 300, "c4", NULL); /* 4 > copies_max: c1, the oldest, goes */
    CHECK(event_w(st, &e) == 0);
    copies_of(st, 42, got, sizeof(got));
    CHECK(strcmp(got, "c4,c3,c2") == 0, "%s", got);
    e = det_ev(42, 250, "c1", NULL); /* c1 again: a new one; c2 is the oldest now */
    CHECK(event_w(st, &e) == 0);
    copies_of(st, 42, got, sizeof(got));
    CHECK(strcmp(got, "c4,c1,c3") == 0, "%s", got);
    e = det_ev(42, 900, "c3", NULL); /* a retry of c3: stays at 102 */
    CHECK(event_w(st, &e) == 0);
    copies_of(st, 42, got, sizeof(got));
    CHECK(strcmp(got, "c4,c1,c3") == 0, "%s", got);
    copies_of(st, 43, got, sizeof(got));
    CHECK(strcmp(got, "c1") == 0, "%s", got);
    /* Many: only the newest copies_max stay. */
    char copy[16];
    for (unsigned i = 0; i < 100; i++) {
        snprintf(copy, sizeof(copy), "m%u", i);
        e = det_ev(44, 1000 + i, copy, NULL);
        CHECK(event_w(st, &e) == 0);
        nd_store_event a = audit_ev(1000 + i, "{}");
        CHECK(event_w(st, &a) == 0);
    }
    copies_of(st, 44, got, sizeof(got));
    CHECK(strcmp(got, "m99,m98,m97") == 0, "%s", got);
    CHECK(nd_store_events(st, ND_EVENT_AUDIT, 0, -1, 0, list_visit, &l) == 0 && l.n == 100);
    list_free(&l);
    /* Bad events: refused, done not called. */
    waiter w = WAITER;
    char longid[ND_ID_MAX + 1];
    memset(longid, 'x', sizeof(longid));
    nd_store_event bad[8];
    for (int i = 0; i < 8; i++)
        bad[i] = det_ev(1, 1, "c", "{}");
    bad[0].kind = 3;
    bad[1].owner_at = -1;
    bad[2].at_us = -1;
    bad[3].copy_id = NULL;
    bad[4].copy_id_len = 0;
    bad[5].copy_id = longid;
    bad[5].copy_id_len = ND_ID_MAX + 1;
    bad[6].value = NULL;
    bad[7].kind = ND_EVENT_AUDIT; /* with a copy id */
    for (int i = 0; i < 8; i++)
        CHECK(nd_store_event_put(st, &bad[i], waiter_cb, &w) == -EINVAL, "%d", i);
    e = det_ev(1, ND_EVENT_AT_MAX + 1, "c", NULL);
    CHECK(nd_store_event_put(st, &e, waiter_cb, &w) == -EINVAL);
    e.value_len = ND_EVENT_VALUE_MAX + 1;
    e.value = longid;
    e.at_us = 1;
    CHECK(nd_store_event_put(st, &e, waiter_cb, &w) == -EINVAL);
    CHECK(w.calls == 0);
    nd_store_close(st);
}

static void test_events_replace(void)
{
    for (size_t i = 0; i < 2; i++)
        check_events_replace(&impls[i]);
}

/* An audit entry about document doc (NULL: none) at at. */
static nd_store_event audit_about(int64_t at, const char *doc, char *buf, size_t cap)
{
    if (doc)
        snprintf(buf, cap, "{\"client\":\"c\",\"action\":\"x\",\"document\":\"%s\"}", doc);
    else
        snprintf(buf, cap, "{\"client\":\"c\",\"action\":\"import\"}");
    return (nd_store_event){
        .kind = ND_EVENT_AUDIT, .owner_at = 0, .at_us = at, .value = buf, .value_len = strlen(buf)};
}

static int put_audited_w(nd_store *st, const nd_record *r, const nd_store_event *audit)
{
    waiter w = WAITER;
    return waited(&w, nd_store_put_audited(st, r, audit, waiter_cb, &w));
}

static int delete_audited_w(nd_store *st, const nd_record *r, const nd_store_event *audit)
{
    waiter w = WAITER;
    return waited(&w, nd_store_delete_audited(st, r->id, r->id_len, r->registered_at_us, 0, audit,
                                              waiter_cb, &w));
}

/* The audit entries of doc, newest first, as "at,at,...". */
static void audit_of_text(nd_store *st, const char *doc, int64_t before, size_t limit, char *out,
                          size_t n)
{
    ev_list l = {0};
    CHECK(nd_store_audit_of(st, 0, doc, strlen(doc), before, limit, list_visit, &l) == 0);
    out[0] = '\0';
    for (size_t i = 0; i < l.n; i++)
        snprintf(out + strlen(out), n - strlen(out), "%s%lld", i ? "," : "", (long long)l.at[i]);
    list_free(&l);
}

static size_t events_count(nd_store *st, nd_event_kind kind, int64_t owner)
{
    ev_list l = {0};
    CHECK(nd_store_events(st, kind, owner, -1, 0, list_visit, &l) == 0);
    size_t n = l.n;
    list_free(&l);
    return n;
}

/* A registration's and a deletion's audit entries are written with them
 * (none for a refused put or a deletion that finds nothing); a deletion
 * takes the original's detections with it, so a record later stored at
 * its time has none. */
static void check_journals_with_records(const impl *im)
{
    nd_store *st = im->open("withrec", 10);
    REQUIRE(st != NULL);
    rec_buf b;
    char v1[128], v2[128], got[256];
    make(&b, 1, 0);
    nd_store_event a = audit_about(10, "d1", v1, sizeof(v1));
    CHECK(put_audited_w(st, &b.r, &a) == 0);
    CHECK(put_audited_w(st, &b.r, &a) == -EEXIST);
    CHECK(events_count(st, ND_EVENT_AUDIT, 0) == 1, "a refused put wrote its entry");
    nd_store_event bad = a;
    bad.kind = ND_EVENT_DETECTION;
    CHECK(nd_store_put_audited(st, &b.r, &bad, NULL, NULL) == -EINVAL);
    nd_store_event d = det_ev(b.r.registered_at_us, 20, "c1", "{}");
    CHECK(event_w(st, &d) == 0);
    d = det_ev(b.r.registered_at_us, 21, "c2", "{}");
    CHECK(event_w(st, &d) == 0);
    d = det_ev(b.r.registered_at_us + 1, 22, "c3", "{}"); /* another original's */
    CHECK(event_w(st, &d) == 0);
    CHECK(events_count(st, ND_EVENT_DETECTION, b.r.registered_at_us) == 2);
    a = audit_about(30, "d1", v2, sizeof(v2));
    CHECK(delete_audited_w(st, &b.r, &a) == 0);
    CHECK(events_count(st, ND_EVENT_DETECTION, b.r.registered_at_us) == 0,
          "the deleted original's detections stay");
    CHECK(events_count(st, ND_EVENT_DETECTION, b.r.registered_at_us + 1) == 1);
    audit_of_text(st, "d1", -1, 0, got, sizeof(got));
    CHECK(strcmp(got, "30,10") == 0, "%s", got);
    CHECK(delete_audited_w(st, &b.r, &a) == -ENOENT);
    CHECK(events_count(st, ND_EVENT_AUDIT, 0) == 2, "a deletion of nothing wrote its entry");
    /* Another record at the freed time: no copies of its own. */
    rec_buf y;
    make(&y, 1, 1);
    snprintf(y.id, sizeof(y.id), "y");
    y.r.id_len = 1;
    CHECK(put_w(st, &y.r) == 0);
    CHECK(events_count(st, ND_EVENT_DETECTION, y.r.registered_at_us) == 0);
    /* A retry after that: a new detection, counted from zero. */
    d = det_ev(y.r.registered_at_us, 40, "c1", "{}");
    CHECK(event_w(st, &d) == 0);
    CHECK(events_count(st, ND_EVENT_DETECTION, y.r.registered_at_us) == 1);
    audit_of_text(st, "d2", -1, 0, got, sizeof(got));
    CHECK(strcmp(got, "") == 0, "%s", got);
    CHECK(nd_store_audit_of(st, 0, "", 0, -1, 0, list_visit, NULL) == -EINVAL);
    CHECK(nd_store_audit_of(st, -1, "d1", 2, -1, 0, list_visit, NULL) == -EINVAL);
    nd_store_close(st);
}

static void test_journals_with_records(void)
{
    for (size_t i = 0; i < 2; i++)
        check_journals_with_records(&impls[i]);
}

/* The audit log by document pages like a journal; retention by count and
 * by age drops the oldest entries (and their index entries). */
static void check_audit_index_retention(const impl *im)
{
    char buf[64][128], got[512];
    audit_max_entries = 0;
    audit_max_age_us = 0;
    nd_store *st = im->open("auditidx", 10);
    REQUIRE(st != NULL);
    for (int i = 0; i < 12; i++) {
        nd_store_event a = audit_about(100 + i, i % 3 ? "other" : "p", buf[i], sizeof(buf[i]));
        CHECK(event_w(st, &a) == 0);
    }
    nd_store_event a = audit_about(200, NULL, buf[12], sizeof(buf[12])); /* names none */
    CHECK(event_w(st, &a) == 0);
    audit_of_text(st, "p", -1, 0, got, sizeof(got));
    CHECK(strcmp(got, "109,106,103,100") == 0, "%s", got);
    audit_of_text(st, "p", -1, 3, got, sizeof(got));
    CHECK(strcmp(got, "109,106,103") == 0, "%s", got);
    audit_of_text(st, "p", 103, 3, got, sizeof(got));
    CHECK(strcmp(got, "100") == 0, "%s", got);
    nd_store_close(st);

    audit_max_entries = 5;
    st = im->open("auditmax", 10);
    REQUIRE(st != NULL);
    for (int i = 0; i < 12; i++) {
        a = audit_about(100 + i, i % 3 ? "other" : "p", buf[i], sizeof(buf[i]));
        CHECK(event_w(st, &a) == 0);
        CHECK(events_count(st, ND_EVENT_AUDIT, 0) <= 5);
    }
    CHECK(events_count(st, ND_EVENT_AUDIT, 0) == 5);
    audit_of_text(st, "p", -1, 0, got, sizeof(got));
    CHECK(strcmp(got, "109") == 0, "%s", got);
    nd_store_close(st);

    audit_max_entries = 0;
    audit_max_age_us = 60 * 1000000ll; /* a minute */
    st = im->open("auditage", 10);
    REQUIRE(st != NULL);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    for (int i = 0; i < 3; i++) {
        a = audit_about(now - 3600 * 1000000ll + i, "p", buf[i], sizeof(buf[i])); /* an hour ago */
        CHECK(event_w(st, &a) == 0);
    }
    a = audit_about(now, "p", buf[3], sizeof(buf[3]));
    CHECK(event_w(st, &a) == 0);
    CHECK(events_count(st, ND_EVENT_AUDIT, 0) == 1, "old entries kept");
    audit_of_text(st, "p", -1, 0, got, sizeof(got));
    CHECK(strtoll(got, NULL, 10) == now && !strchr(got, ','), "%s", got);
    nd_store_close(st);
    audit_max_age_us = 0;
}

/* Entries inserted out of order, at taken times, over many documents and
 * with retention: each document's read is the log filtered by document. */
static void check_audit_index_random(const impl *im)
{
    audit_max_entries = 50;
    nd_store *st = im->open("auditrand", 10);
    REQUIRE(st != NULL);
    unsigned seed = 12345;
    char buf[128];
    for (int i = 0; i < 400; i++) {
        seed = seed * 1103515245u + 12345u;
        char doc[16];
        snprintf(doc, sizeof(doc), "d%u", (seed >> 16) % 17);
        int64_t at = 1000 + i * 3 - (int64_t)((seed >> 8) % 40); /* sometimes earlier, or taken */
        nd_store_event a = audit_about(at, (seed >> 4) % 9 ? doc : NULL, buf, sizeof(buf));
        CHECK(event_w(st, &a) == 0);
    }
    ev_list all = {0};
    CHECK(nd_store_events(st, ND_EVENT_AUDIT, 0, -1, 0, list_visit, &all) == 0);
    CHECK(all.n == 50, "%zu", all.n);
    for (unsigned k = 0; k < 17; k++) {
        char doc[16], want[1024] = "", got[1024];
        snprintf(doc, sizeof(doc), "d%u", k);
        char needle[32];
        snprintf(needle, sizeof(needle), "\"document\":\"%s\"", doc);
        for (size_t i = 0; i < all.n; i++)
            if (strstr(all.value[i], needle))
                snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%lld",
                         want[0] ? "," : "", (long long)all.at[i]);
        audit_of_text(st, doc, -1, 0, got, sizeof(got));
        CHECK(strcmp(got, want) == 0, "%s: %s, the log has %s", doc, got, want);
    }
    list_free(&all);
    nd_store_close(st);
    audit_max_entries = 0;
}

static void test_audit_index_retention(void)
{
    for (size_t i = 0; i < 2; i++)
        check_audit_index_random(&impls[i]);
    for (size_t i = 0; i < 2; i++)
        check_audit_index_retention(&impls[i]);
}

/* ---- kept texts ---- */

/* A text read back: its copy, or the visit's count. */
typedef struct text_seen {
    char *text;
    size_t len;
    int visits;
} text_seen;

static int text_visit(void *arg, const char *text, size_t len)
{
    text_seen *t = arg;
    CHECK(text != NULL && text[len] == '\0', "handed out NUL-terminated");
    free(t->text);
    t->text = malloc(len + 1);
    memcpy(t->text, text, len + 1);
    t->len = len;
    t->visits++;
    return 5;
}

/* The text kept under at equals want[0..len) (want NULL: none kept). */
static void check_text(nd_store *st, int64_t at, const char *want, size_t len, const char *what)
{
    text_seen t = {0};
    int rc = nd_store_text(st, at, text_visit, &t);
    if (!want) {
        CHECK(rc == -ENOENT && t.visits == 0, "%s: %d, want -ENOENT", what, rc);
    } else {
        CHECK(rc == 5 && t.visits == 1, "%s: %d (visit's value 5)", what, rc);
        CHECK(t.len == len && t.text && memcmp(t.text, want, len) == 0, "%s: %zu bytes, want %zu",
              what, t.len, len);
    }
    free(t.text);
}

static int no_text_visit(void *arg, const nd_record *r)
{
    (void)arg;
    CHECK(r->text == NULL && r->text_len == 0 && r->text_packed == NULL && r->text_packed_len == 0,
          "scans and gets never hand out the text");
    return 0;
}

static int delete_w(nd_store *st, const nd_record *r)
{
    waiter w = WAITER;
    return waited(&w, nd_store_delete_at(st, r->id, r->id_len, r->registered_at_us, waiter_cb, &w));
}

/* Each store keeps a record's text with it: put, replace (with another
 * text, or none), amend (left), delete (gone); any bytes, 1 MiB; packed
 * by the caller (a replica's entry) or by the store; refused shapes. */
static void check_texts(const impl *im)
{
    nd_store *st = im->open("texts", 0);
    REQUIRE(st != NULL);
    const char zh[] = "原创内容：这是一段中文文本，包含标点符号。", en[] = "An English text.",
               emoji[] = "emoji 👩\u200d👩\u200d👧 \U0001F600 and a NUL \0 inside";
    size_t big_len = 1u << 20;
    char *big = malloc(big_len);
    REQUIRE(big != NULL);
    uint64_t x = 0x9E3779B97F4A7C15ull; /* words drawn from a small vocabulary: compressible */
    for (size_t k = 0; k < big_len; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        big[k] = (k % 7 == 6) ? ' ' : (char)('a' + (x >> 59) % 12);
    }
    struct {
        const char *text;
        size_t len;
    } texts[] = {{zh, sizeof(zh) - 1},
                 {en, sizeof(en) - 1},
                 {emoji, sizeof(emoji) - 1},
                 {"", 0},
                 {big, big_len}};
    rec_buf b[6];
    for (unsigned i = 0; i < 5; i++) {
        make(&b[i], i, 0);
        b[i].r.text = texts[i].text;
        b[i].r.text_len = texts[i].len;
        CHECK(put_w(st, &b[i].r) == 0, "%s: put %u", im->name, i);
    }
    make(&b[5], 5, 0); /* kept nothing */
    CHECK(put_w(st, &b[5].r) == 0);
    for (unsigned i = 0; i < 5; i++)
        check_text(st, b[i].r.registered_at_us, texts[i].text, texts[i].len, im->name);
    check_text(st, b[5].r.registered_at_us, NULL, 0, "a record put without a text");
    check_text(st, 999999, NULL, 0, "no record at that time");
    CHECK(nd_store_text(st, -1, text_visit, NULL) == -EINVAL);
    CHECK(nd_store_scan(st, no_text_visit, NULL) == 0);
    CHECK(nd_store_get(st, b[0].r.registered_at_us, no_text_visit, NULL) == 0);

    /* Packed by the caller: kept as they are. */
    uint8_t *packed;
    size_t plen, tl;
    REQUIRE(nd_text_pack(en, sizeof(en) - 1, &packed, &plen) == 0);
    CHECK(nd_text_packed_len(packed, plen, &tl) == 0 && tl == sizeof(en) - 1);
    rec_buf p;
    make(&p, 6, 0);
    p.r.text_packed = packed;
    p.r.text_packed_len = plen;
    p.r.text = zh; /* text_packed wins */
    p.r.text_len = sizeof(zh) - 1;
    CHECK(put_w(st, &p.r) == 0);
    check_text(st, p.r.registered_at_us, en, sizeof(en) - 1, "packed by the caller");
    /* Refused at once: a length without its text, a packed text of an
     * unknown codec or cut short. */
    make(&p, 7, 0);
    p.r.text_len = 3;
    CHECK(nd_store_put(st, &p.r, NULL, NULL) == -EINVAL);
    p.r.text_len = 0;
    uint8_t bad[8] = {9, 1, 2, 3};
    p.r.text_packed = bad;
    p.r.text_packed_len = sizeof(bad);
    CHECK(nd_store_put(st, &p.r, NULL, NULL) == -EINVAL);
    p.r.text_packed = packed;
    p.r.text_packed_len = 3;
    CHECK(nd_store_put(st, &p.r, NULL, NULL) == -EINVAL);
    free(packed);
    check_text(st, p.r.registered_at_us, NULL, 0, "a refused put keeps nothing");

    /* A replace replaces the text (or, without one, removes it); an amend
     * leaves it; a delete takes it. */
    rec_buf r;
    make(&r, 1, 1);
    r.r.text = zh;
    r.r.text_len = sizeof(zh) - 1;
    CHECK(replace_w(st, &r.r) == 0);
    check_text(st, r.r.registered_at_us, zh, sizeof(zh) - 1, "replaced");
    make(&r, 0, 1);
    CHECK(replace_w(st, &r.r) == 0);
    check_text(st, r.r.registered_at_us, NULL, 0, "replaced without a text");
    make(&r, 2, 2);
    r.r.text = en; /* an amend ignores it */
    r.r.text_len = sizeof(en) - 1;
    CHECK(amend_w(st, &r.r, NULL) == 0);
    check_text(st, r.r.registered_at_us, emoji, sizeof(emoji) - 1, "amended: left");
    CHECK(delete_w(st, &b[4].r) == 0);
    check_text(st, b[4].r.registered_at_us, NULL, 0, "deleted with its record");
    /* A wrong id deletes nothing, the text stays. */
    rec_buf w;
    make(&w, 9, 0);
    w.r.registered_at_us = b[3].r.registered_at_us;
    CHECK(delete_w(st, &w.r) == -ENOENT);
    check_text(st, b[3].r.registered_at_us, "", 0, "an empty text is kept (not none)");
    nd_store_close(st);
    free(big);
}

static void test_texts(void)
{
    for (size_t i = 0; i < 2; i++)
        check_texts(&impls[i]);
}

int main(void)
{
    snprintf(root, sizeof(root), "/tmp/nd-store-mem-XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    UNIT_RUN(test_memory_contract);
    UNIT_RUN(test_claim_fields);
    UNIT_RUN(test_amend);
    UNIT_RUN(test_events_paging);
    UNIT_RUN(test_events_replace);
    UNIT_RUN(test_journals_with_records);
    UNIT_RUN(test_audit_index_retention);
    UNIT_RUN(test_texts);
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return unit_summary("store_memory");
}
