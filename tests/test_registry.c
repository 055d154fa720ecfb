/* test_registry.c - the registry (server/registry/registry.c) over the memory store:
 * changes that the store commits within its call are answered at once and
 * reach the store; and concurrency that HTTP
 * cannot reach in a bounded test.
 *
 * Slot reuse (suspected): a query reads the index without a lock;
 * if meanwhile document A is deleted and document B registered into A's
 * freed slot, the query may report the slot under A's fingerprint and under
 * B's. Both hits then resolve to B, and when B lies as near to the query as
 * A did the distance check passes for both: B was listed twice. One writer
 * swaps A and B (both at distance 1 from the query, found through different
 * index tables) as fast as it can while readers query; no answer may list a
 * document twice. */
#include "registry.h"
#include "store_memory.h"
#include "unit.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RUN_SECONDS 3.0
#define READERS 1

static const uint64_t Q = 0x0123456789abcdefull;
/* Both at distance 7 from Q. At k = 8 a query probes radius 2 in table 0
 * and radius 1 in tables 1..3 (16-bit blocks, low block first): A differs
 * only in block 3 and is found by the first probe, B differs in blocks 0..2
 * beyond those radii and is found only by the last table's: the time
 * between is most of a query, long enough for the writer to swap them. */
#define A_HASH (Q ^ (0x7full << 48))
#define B_HASH (Q ^ 0x7ull ^ (0x3ull << 16) ^ (0x3ull << 32))
static atomic_bool stop;
static _Atomic uint64_t queries, duplicates, swaps;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void never(void *arg, nd_reg_change *ch, int status)
{
    (void)arg, (void)ch, (void)status;
}

static int reg_doc(nd_registry *reg, const char *id, uint64_t simhash)
{
    nd_check_req rq = {.id = id, .id_len = strlen(id), .k = 0, .do_register = true};
    nd_question q = {.simhash = simhash, .chars = 500};
    memcpy(q.text_hash, id, strlen(id) < 16 ? strlen(id) : 16);
    static nd_index_hit hits[64];
    static nd_match matches[64];
    nd_check_res res = {.hits = hits, .matches = matches, .cap = 64};
    int rc = nd_registry_check(reg, &rq, &q, NULL, &res, never, NULL);
    nd_check_res_release(&res);
    return rc;
}

static void *writer_main(void *arg)
{
    nd_registry *reg = arg;
    uint64_t a = A_HASH, b = B_HASH;
    while (!atomic_load(&stop)) {
        nd_registry_delete(reg, "A", 1, NULL, NULL, never, NULL);
        reg_doc(reg, "B", b);
        nd_registry_delete(reg, "B", 1, NULL, NULL, never, NULL);
        reg_doc(reg, "A", a);
        atomic_fetch_add(&swaps, 1);
    }
    return NULL;
}

static void *reader_main(void *arg)
{
    nd_registry *reg = arg;
    static _Thread_local nd_index_hit hits[64];
    static _Thread_local nd_match matches[64];
    while (!atomic_load(&stop)) {
        nd_check_req rq = {.k = 8};
        nd_question q = {.simhash = Q, .chars = 500};
        nd_check_res res = {.hits = hits, .matches = matches, .cap = 64};
        if (nd_registry_check(reg, &rq, &q, NULL, &res, never, NULL) == 0) {
            for (size_t i = 0; i < res.nmatches; i++)
                for (size_t j = i + 1; j < res.nmatches; j++)
                    if (res.matches[i].doc == res.matches[j].doc)
                        atomic_fetch_add(&duplicates, 1);
        }
        nd_check_res_release(&res);
        atomic_fetch_add(&queries, 1);
    }
    return NULL;
}

/* A loaded registry (max_matches 10) over a new memory store: *reg and *st,
 * the caller's to destroy and close. False (nothing left open) when either
 * could not be made. */
static bool memory_registry(nd_registry **reg, nd_store **st)
{
    nd_registry_options o = {.max_matches = 10};
    *st = NULL;
    if (nd_store_memory_open(st) != 0)
        return false;
    if (nd_registry_create(reg, *st, &o) != 0) {
        nd_store_close(*st);
        return false;
    }
    nd_registry_set_loaded(*reg);
    return true;
}

static void slot_reuse_never_lists_twice(void)
{
    nd_registry *reg;
    nd_store *st;
    REQUIRE(memory_registry(&reg, &st), "a registry over a memory store");
    CHECK(reg_doc(reg, "A", A_HASH) == 0, "register A");
    pthread_t w, r[READERS];
    pthread_create(&w, NULL, writer_main, reg);
    for (int i = 0; i < READERS; i++)
        pthread_create(&r[i], NULL, reader_main, reg);
    double t0 = now_s();
    while (now_s() - t0 < RUN_SECONDS && atomic_load(&duplicates) == 0) {
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&stop, true);
    pthread_join(w, NULL);
    for (int i = 0; i < READERS; i++)
        pthread_join(r[i], NULL);
    unit_note("slot reuse: %llu queries, %llu swaps, %llu answers listing a document twice",
              (unsigned long long)queries, (unsigned long long)swaps,
              (unsigned long long)duplicates);
    CHECK(atomic_load(&duplicates) == 0, "a document was listed twice");
    CHECK(atomic_load(&queries) > 1000 && atomic_load(&swaps) > 1000, "too few rounds");
    nd_registry_destroy(reg);
    nd_store_close(st);
}

static int get_chars(nd_registry *reg, const char *id)
{
    nd_doc *d = NULL;
    int rc = nd_registry_get(reg, id, strlen(id), &d);
    int chars = rc == 0 ? (int)d->chars : rc;
    nd_doc_release(d);
    return chars;
}

/* Over the memory store (which commits within the call) a registration,
 * a repeat and a deletion are answered at once (0, never ND_REG_QUEUED),
 * nothing stays pending, and the documents are live at once. */
static void memory_store_answers_at_once(void)
{
    nd_registry *reg;
    nd_store *st;
    REQUIRE(memory_registry(&reg, &st), "a registry over a memory store");
    CHECK(reg_doc(reg, "A", A_HASH) == 0);
    CHECK(reg_doc(reg, "B", ~A_HASH) == 0);
    CHECK(get_chars(reg, "A") == 500 && get_chars(reg, "B") == 500, "live at once");
    CHECK(reg_doc(reg, "A", A_HASH) == 0, "the same id and text: existing");
    CHECK(nd_store_count(st) == 2);
    CHECK(nd_registry_delete(reg, "A", 1, NULL, NULL, never, NULL) == 0);
    CHECK(get_chars(reg, "A") == -ENOENT);
    CHECK(nd_registry_delete(reg, "A", 1, NULL, NULL, never, NULL) == -ENOENT);
    nd_registry_stats rs;
    nd_registry_stats_get(reg, &rs);
    CHECK(rs.documents == 1 && rs.pending == 0, "%llu %llu", (unsigned long long)rs.documents,
          (unsigned long long)rs.pending);
    CHECK(nd_store_count(st) == 1);
    nd_registry_destroy(reg);
    nd_store_close(st);
}

/* One registry holds at most ND_REG_DOCS_MAX documents (28-bit slots):
 * making room past it is refused with its own code and message, before
 * anything is allocated, and the registry goes on as before. */
static void documents_bounded(void)
{
    nd_registry *reg;
    nd_store *st;
    REQUIRE(memory_registry(&reg, &st), "a registry over a memory store");
    CHECK(reg_doc(reg, "A", A_HASH) == 0);
    CHECK(nd_registry_reserve(reg, ND_REG_DOCS_MAX) == ND_REG_TOO_MANY_DOCS, "one past the most");
    CHECK(nd_registry_reserve(reg, UINT64_MAX / 2) == ND_REG_TOO_MANY_DOCS, "far past");
    CHECK(strstr(nd_registry_load_error(ND_REG_TOO_MANY_DOCS), "268,435,455") != NULL, "%s",
          nd_registry_load_error(ND_REG_TOO_MANY_DOCS));
    CHECK(ND_REG_TOO_MANY_DOCS != ND_REG_TOO_MANY_VERSIONS);
    CHECK(nd_registry_reserve(reg, 1000) == 0, "within it");
    CHECK(reg_doc(reg, "B", ~A_HASH) == 0 && get_chars(reg, "A") == 500 &&
              get_chars(reg, "B") == 500,
          "registrations go on");
    nd_registry_destroy(reg);
    nd_store_close(st);
}

/* ---- the originality workflow: accounts, reprint policies, revoke/restore, given times ----
 *
 * Through the memory store and the LMDB store (real files in a mkdtemp()
 * directory; changes complete through done -> nd_registry_complete() on
 * this thread, as the server's workers do). Documents are checked without
 * sketches: every SimHash hit within k is a match (near_duplicate), so the
 * cases are set by fingerprints: Q is the query, documents lie at
 * distance 1, 2, 3 from it and register with k = 0 (each original), and
 * queries use k = 3 (all of them) or k = 0 (one). */

typedef struct world {
    nd_store *st;
    nd_registry *reg;
    bool lmdb;
    char dir[64]; /* LMDB: the store's directory */
    int default_reprint;
} world;

/* Waits for the done of a change or a wait. */
typedef struct done_box {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool fired;
    nd_reg_change *ch;
    int status;
} done_box;

static void box_done(void *arg, nd_reg_change *ch, int status)
{
    done_box *b = arg;
    pthread_mutex_lock(&b->mu);
    b->fired = true;
    b->ch = ch;
    b->status = status;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void box_wait(done_box *b)
{
    pthread_mutex_lock(&b->mu);
    while (!b->fired)
        pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
}

#define BOX_INIT                                                                                   \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, NULL, 0                        \
    }

/* Settles the result of a registry call made with box_done: a queued
 * change is completed here (its result returned), a wait returns
 * ND_REG_WAIT (the caller asks again). */
static int settle(world *w, int rc, done_box *b)
{
    if (rc != ND_REG_QUEUED && rc != ND_REG_WAIT)
        return rc;
    box_wait(b);
    if (rc == ND_REG_WAIT)
        return ND_REG_WAIT;
    return nd_registry_complete(w->reg, b->ch, b->status);
}

static void world_open_registry(world *w)
{
    /* the server's verdict defaults (used by checks that bring sketches) */
    nd_registry_options o = {.max_matches = 10,
                             .default_reprint = w->default_reprint,
                             .max_verify = ND_VERDICT_MAX_VERIFY};
    nd_verdict_params_default(&o.params);
    REQUIRE(nd_registry_create(&w->reg, w->st, &o) == 0);
    REQUIRE(nd_registry_load(w->reg, NULL, NULL, 1000, NULL) == 0);
}

static void world_open_store(world *w)
{
    if (!w->lmdb) {
        REQUIRE(nd_store_memory_open(&w->st) == 0);
        return;
    }
    nd_store_options o;
    nd_store_options_default(&o);
    o.sync = false;
    o.map_size = 64u << 20;
    char err[256] = "";
    int rc = nd_store_open(&w->st, w->dir, &o, err, sizeof(err));
    REQUIRE(rc == 0, "open %s: %d %s", w->dir, rc, err);
}

static void world_open(world *w, bool lmdb, int default_reprint)
{
    memset(w, 0, sizeof(*w));
    w->lmdb = lmdb;
    w->default_reprint = default_reprint;
    if (lmdb) {
        snprintf(w->dir, sizeof(w->dir), "/tmp/nd-test-registry-XXXXXX");
        REQUIRE(mkdtemp(w->dir) != NULL);
    }
    world_open_store(w);
    world_open_registry(w);
}

static void world_close(world *w, bool keep_files)
{
    nd_registry_destroy(w->reg);
    w->reg = NULL;
    nd_store_close(w->st);
    w->st = NULL;
    if (w->lmdb && !keep_files) {
        char p[128];
        const char *files[] = {"data.mdb", "lock.mdb", "neardup.lock"};
        for (int i = 0; i < 3; i++) {
            snprintf(p, sizeof(p), "%s/%s", w->dir, files[i]);
            unlink(p);
        }
        rmdir(w->dir);
    }
}

/* A restart: the registry and the store closed, reopened, loaded. */
static void world_restart(world *w)
{
    world_close(w, true);
    world_open_store(w);
    world_open_registry(w);
}

typedef struct answer {
    nd_index_hit hits[32];
    nd_match matches[32];
    int64_t keys[32];
    nd_check_res res;
} answer;

/* A check (a registration when do_register) of the document id with
 * fingerprint h (its text identified by its id) for account (NULL: none),
 * policy (NULL: none), at a given time (0: the clock's), within k; waits
 * and retries as a server's worker would. Returns the result; a->res holds
 * the answer (release it). */
static int check(world *w, answer *a, const char *id, uint64_t h, unsigned k, bool do_register,
                 const char *account, const char *policy, int64_t at)
{
    nd_check_req rq = {.id = id,
                       .id_len = id ? strlen(id) : 0,
                       .k = k,
                       .do_register = do_register,
                       .account = account,
                       .account_len = account ? strlen(account) : 0,
                       .policy = (char *)policy,
                       .policy_len = policy ? strlen(policy) : 0,
                       .registered_at_us = at};
    nd_question q = {.simhash = h, .chars = 500};
    if (id)
        memcpy(q.text_hash, id, strlen(id) < 16 ? strlen(id) : 16);
    else
        memcpy(q.text_hash, "?query", 6);
    int rc;
    do {
        a->res = (nd_check_res){.hits = a->hits, .matches = a->matches, .keys = a->keys, .cap = 32};
        done_box b = BOX_INIT;
        rc = settle(w, nd_registry_check(w->reg, &rq, &q, NULL, &a->res, box_done, &b), &b);
    } while (rc == ND_REG_WAIT);
    return rc;
}

/* Registers (k = 0); returns its registered_at, or -errno. */
static int64_t put_doc(world *w, const char *id, uint64_t h, const char *account,
                       const char *policy, int64_t at)
{
    answer a;
    int rc = check(w, &a, id, h, 0, true, account, policy, at);
    int64_t t = rc == 0 && a.res.registered && a.res.doc ? a.res.doc->registered_at_us
                : rc                                     ? rc
                                                         : -1;
    nd_check_res_release(&a.res);
    return t;
}

static int set_policy(world *w, const char *id, const char *policy, const nd_store_event *audit)
{
    int rc;
    do {
        done_box b = BOX_INIT;
        rc = settle(w,
                    nd_registry_set_policy(w->reg, id, strlen(id), policy,
                                           policy ? strlen(policy) : 0, audit, box_done, &b),
                    &b);
    } while (rc == ND_REG_WAIT);
    return rc;
}

static int set_status(world *w, const char *id, int status, const nd_store_event *audit)
{
    int rc;
    do {
        done_box b = BOX_INIT;
        rc = settle(w, nd_registry_set_status(w->reg, id, strlen(id), status, audit, box_done, &b),
                    &b);
    } while (rc == ND_REG_WAIT);
    return rc;
}

static bool is_id(const nd_doc *d, const char *id)
{
    return d && d->id_len == strlen(id) && memcmp(nd_doc_id(d), id, d->id_len) == 0;
}

/* The action for account of a query at fingerprint h within k; *source
 * gets the source's id ("" when none). */
static int action_of(world *w, uint64_t h, unsigned k, const char *account, char *source,
                     bool *show_source, bool *may_modify)
{
    answer a;
    int rc = check(w, &a, NULL, h, k, false, account, NULL, 0);
    if (rc)
        return -1000 + rc;
    snprintf(source, 32, "%.*s", a.res.source ? (int)a.res.source->id_len : 0,
             a.res.source ? nd_doc_id(a.res.source) : "");
    if (show_source)
        *show_source = a.res.show_source;
    if (may_modify)
        *may_modify = a.res.may_modify;
    int action = a.res.action;
    bool consistent = a.res.original == (action == ND_ACTION_PUBLISH) &&
                      (action == ND_ACTION_PUBLISH) == (a.res.source == NULL);
    nd_check_res_release(&a.res);
    return consistent ? action : -2000;
}

static int events_seen(void *arg, const nd_store_event *ev)
{
    (void)ev;
    (*(int *)arg)++;
    return 0;
}

static int audit_count(world *w)
{
    int n = 0;
    int rc = nd_store_events(w->st, ND_EVENT_AUDIT, 0, -1, 0, events_seen, &n);
    return rc ? rc : n;
}

static nd_store_event audit_event(const char *what)
{
    static char value[128];
    snprintf(value, sizeof(value), "{\"action\":\"%s\"}", what);
    return (nd_store_event){.kind = ND_EVENT_AUDIT,
                            .owner_at = 0,
                            .at_us = 1,
                            .value = value,
                            .value_len = strlen(value)};
}

#define FORBID "{\"reprint\":\"forbid\"}"
#define ALLOW "{\"reprint\":\"allow\"}"
#define WL_DAVE                                                                                    \
    "{\"reprint\":\"forbid\",\"whitelist\":[{\"account\":\"dave\",\"may_modify\":true,"            \
    "\"may_hide_source\":true}]}"

/* Every action, the earliest claim deciding, own re-posts, revoke/restore,
 * a policy change seen by the next check; then (LMDB) a restart keeps
 * account, policy and status. */
static void claims_through(bool lmdb)
{
    world w;
    world_open(&w, lmdb, ND_REPRINT_ALLOW);
    if (!w.reg)
        return;
    /* A (alice, forbid) earliest, then B (bob, allow), then C (carol, no
     * policy): distances 1, 2, 3 from Q. */
    int64_t ta = put_doc(&w, "A", Q ^ 1, "alice", FORBID, 0);
    int64_t tb = put_doc(&w, "B", Q ^ 6, "bob", ALLOW, 0);
    int64_t tc = put_doc(&w, "C", Q ^ 0x70, "carol", NULL, 0);
    REQUIRE(ta > 0 && tb > ta && tc > tb, "%lld %lld %lld", (long long)ta, (long long)tb,
            (long long)tc);
    char src[32];
    bool show = false, mod = true;

    /* dave copies all three: the earliest (A) decides, not the later ones
     * that allow. */
    CHECK(action_of(&w, Q, 3, "dave", src, &show, &mod) == ND_ACTION_BLOCK &&
              strcmp(src, "A") == 0 && !show && !mod,
          "src %s", src);
    /* Anonymous: the same. */
    CHECK(action_of(&w, Q, 3, NULL, src, NULL, NULL) == ND_ACTION_BLOCK && strcmp(src, "A") == 0);
    /* B alone: allow -> publish_as_reprint with the source shown. */
    CHECK(action_of(&w, Q ^ 6, 0, "dave", src, &show, &mod) == ND_ACTION_REPRINT &&
          strcmp(src, "B") == 0 && show && !mod);
    /* C alone: no policy, the server's default (allow). */
    CHECK(action_of(&w, Q ^ 0x70, 0, "dave", src, &show, NULL) == ND_ACTION_REPRINT &&
          strcmp(src, "C") == 0 && show);

    /* alice's own article: A is not evidence (listed after, same_account);
     * B is the earliest evidence. */
    answer a;
    REQUIRE(check(&w, &a, NULL, Q, 3, false, "alice", NULL, 0) == 0);
    CHECK(!a.res.original && a.res.action == ND_ACTION_REPRINT && is_id(a.res.source, "B") &&
          a.res.verdict == ND_VERDICT_DUPLICATE);
    CHECK(a.res.nmatches == 3 && a.res.matches[0].evidence && a.res.matches[1].evidence &&
              !a.res.matches[2].evidence && a.res.matches[2].same_account &&
              is_id(a.res.matches[2].doc, "A") && !a.res.matches[0].same_account,
          "evidence first, own match last (%zu)", a.res.nmatches);
    nd_check_res_release(&a.res);
    /* Only A within reach: publish, A still listed. */
    REQUIRE(check(&w, &a, NULL, Q ^ 1, 0, false, "alice", NULL, 0) == 0);
    CHECK(a.res.original && a.res.verdict == ND_VERDICT_ORIGINAL &&
          a.res.action == ND_ACTION_PUBLISH && !a.res.source && a.res.nmatches == 1 &&
          a.res.matches[0].same_account && !a.res.matches[0].evidence);
    nd_check_res_release(&a.res);

    /* The whitelist beats forbid; may_hide_source; a policy change is seen
     * by the next check. */
    int n0 = audit_count(&w);
    nd_store_event ev = audit_event("policy");
    CHECK(set_policy(&w, "A", WL_DAVE, &ev) == 0);
    CHECK(audit_count(&w) == n0 + 1, "the policy change's audit entry: %d -> %d", n0,
          audit_count(&w));
    CHECK(action_of(&w, Q, 3, "dave", src, &show, &mod) == ND_ACTION_REPRINT &&
              strcmp(src, "A") == 0 && !show && mod,
          "whitelisted dave");
    CHECK(action_of(&w, Q, 3, "eve", src, &show, &mod) == ND_ACTION_BLOCK && strcmp(src, "A") == 0);
    nd_doc *d = NULL;
    REQUIRE(nd_registry_get(w.reg, "A", 1, &d) == 0);
    CHECK(d->registered_at_us == ta && d->policy_len == strlen(WL_DAVE) &&
          memcmp(nd_doc_policy(d), WL_DAVE, d->policy_len) == 0 && d->account_len == 5 &&
          memcmp(nd_doc_account(d), "alice", 5) == 0 && d->status == ND_CLAIM_ACTIVE);
    nd_doc_release(d);
    CHECK(set_policy(&w, "A", ALLOW, NULL) == 0);
    CHECK(action_of(&w, Q, 3, "eve", src, &show, &mod) == ND_ACTION_REPRINT &&
              strcmp(src, "A") == 0 && show && !mod,
          "A allows now");
    CHECK(set_policy(&w, "A", FORBID, NULL) == 0);
    CHECK(set_policy(&w, "nope", FORBID, NULL) == -ENOENT);

    /* Revoke A: a later copy is judged on B (then publish_as_reprint); A is
     * listed with its status but is not evidence. Alone, A gives publish. */
    n0 = audit_count(&w);
    ev = audit_event("revoke");
    CHECK(set_status(&w, "A", ND_CLAIM_REVOKED, &ev) == 0);
    CHECK(audit_count(&w) == n0 + 1);
    CHECK(set_status(&w, "A", ND_CLAIM_REVOKED, &ev) == 0, "revoking a revoked claim: 0");
    CHECK(audit_count(&w) == n0 + 1, "and no audit entry");
    CHECK(action_of(&w, Q, 3, "dave", src, NULL, NULL) == ND_ACTION_REPRINT &&
          strcmp(src, "B") == 0);
    REQUIRE(check(&w, &a, "copy-1", Q ^ 1, 0, false, "dave", NULL, 0) == 0);
    CHECK(a.res.original && a.res.action == ND_ACTION_PUBLISH && a.res.nmatches == 1,
          "revoked: publish (%zu matches)", a.res.nmatches);
    for (size_t i = 0; i < a.res.nmatches; i++)
        CHECK(!a.res.matches[i].evidence &&
              (is_id(a.res.matches[i].doc, "A") ? a.res.matches[i].doc->status == ND_CLAIM_REVOKED
                                                : !a.res.matches[i].same_account));
    nd_check_res_release(&a.res);
    /* Restore: blocked again. */
    CHECK(set_status(&w, "A", ND_CLAIM_ACTIVE, NULL) == 0);
    CHECK(action_of(&w, Q ^ 1, 0, "dave", src, NULL, NULL) == ND_ACTION_BLOCK &&
              strcmp(src, "A") == 0,
          "restored: block");
    CHECK(set_status(&w, "A", 7, NULL) == -EINVAL);
    CHECK(set_status(&w, "nope", ND_CLAIM_REVOKED, NULL) == -ENOENT);
    /* B revoked, kept over the restart. */
    CHECK(set_status(&w, "B", ND_CLAIM_REVOKED, NULL) == 0);
    /* ... so alice's re-post registers (an author's own re-post), with
     * her account and no policy. */
    int64_t ta2 = put_doc(&w, "A2", Q ^ 1, "alice", NULL, 0);
    CHECK(ta2 > tc, "own re-post registered: %lld", (long long)ta2);
    /* and bob's copy of A does not. */
    CHECK(put_doc(&w, "Bcopy", Q ^ 1, "bob", NULL, 0) == -1, "bob's copy of A: not original");

    nd_registry_stats rs;
    nd_registry_stats_get(w.reg, &rs);
    CHECK(rs.pending == 0 && rs.documents == 4, "%llu docs", (unsigned long long)rs.documents);
    if (lmdb) {
        world_restart(&w);
        REQUIRE(nd_registry_get(w.reg, "A", 1, &d) == 0);
        CHECK(d->registered_at_us == ta && d->policy_len == strlen(FORBID) &&
                  memcmp(nd_doc_policy(d), FORBID, d->policy_len) == 0 && d->account_len == 5 &&
                  memcmp(nd_doc_account(d), "alice", 5) == 0 && d->status == ND_CLAIM_ACTIVE,
              "A after a restart");
        nd_doc_release(d);
        REQUIRE(nd_registry_get(w.reg, "B", 1, &d) == 0);
        CHECK(d->status == ND_CLAIM_REVOKED && d->account_len == 3 &&
                  d->policy_len == strlen(ALLOW),
              "B after a restart");
        nd_doc_release(d);
        REQUIRE(nd_registry_get(w.reg, "C", 1, &d) == 0);
        CHECK(nd_doc_policy(d) == NULL && d->policy_len == 0 && d->account_len == 5);
        nd_doc_release(d);
        CHECK(action_of(&w, Q, 3, "dave", src, NULL, NULL) == ND_ACTION_BLOCK &&
              strcmp(src, "A") == 0);
        CHECK(action_of(&w, Q ^ 6, 0, "dave", src, NULL, NULL) == ND_ACTION_PUBLISH,
              "B revoked after the restart");
        /* Changes after the restart, on loaded (arena) documents, and
         * another restart. */
        CHECK(set_status(&w, "B", ND_CLAIM_ACTIVE, NULL) == 0);
        CHECK(set_policy(&w, "C", FORBID, NULL) == 0);
        CHECK(action_of(&w, Q ^ 0x70, 0, "dave", src, NULL, NULL) == ND_ACTION_BLOCK);
        world_restart(&w);
        CHECK(action_of(&w, Q ^ 6, 0, "dave", src, NULL, NULL) == ND_ACTION_REPRINT &&
              strcmp(src, "B") == 0);
        CHECK(action_of(&w, Q ^ 0x70, 0, "dave", src, NULL, NULL) == ND_ACTION_BLOCK);
    }
    world_close(&w, false);
}

static void claims_memory(void)
{
    claims_through(false);
}

static void claims_lmdb(void)
{
    claims_through(true);
}

/* The server's default for documents without a rule: forbid. */
static void default_forbid(void)
{
    world w;
    world_open(&w, false, ND_REPRINT_FORBID);
    REQUIRE(w.reg);
    CHECK(put_doc(&w, "C", Q ^ 1, "carol", NULL, 0) > 0);
    CHECK(put_doc(&w, "D", Q ^ 6, "dan", ALLOW, 0) > 0);
    char src[32];
    CHECK(action_of(&w, Q ^ 1, 0, "x", src, NULL, NULL) == ND_ACTION_BLOCK);
    CHECK(action_of(&w, Q ^ 6, 0, "x", src, NULL, NULL) == ND_ACTION_REPRINT);
    world_close(&w, false);
}

/* Given registration times (an import): an earlier given time wins the
 * claim over a document registered before by the clock; a taken time is
 * raised by 1 us (also one held by a registration still in flight). */
static void given_times_through(bool lmdb)
{
    world w;
    world_open(&w, lmdb, ND_REPRINT_ALLOW);
    REQUIRE(w.reg);
    int64_t tl = put_doc(&w, "late", Q ^ 1, "bob", ALLOW, 0);
    REQUIRE(tl > 1000000);
    /* An archive's document, claimed before "late": registers (late is
     * not evidence against an earlier claim) and then decides. */
    int64_t te = put_doc(&w, "early", Q ^ 6, "alice", FORBID, tl - 1000);
    CHECK(te == tl - 1000, "given time kept: %lld", (long long)te);
    char src[32];
    CHECK(action_of(&w, Q, 3, "dave", src, NULL, NULL) == ND_ACTION_BLOCK &&
              strcmp(src, "early") == 0,
          "the earlier given time wins: %s", src);
    /* A copy of "early" given a time after it: not original. */
    CHECK(put_doc(&w, "copy", Q ^ 6, "carol", NULL, te + 10) == -1);
    /* Taken times are raised. */
    CHECK(put_doc(&w, "same-time", ~Q, "x", NULL, tl) == tl + 1);
    CHECK(put_doc(&w, "same-time-2", ~Q ^ 0xff00, "x", NULL, tl) == tl + 2);
    /* A time ahead of the clock by less than its skew: later clock
     * registrations come after it. Further ahead: refused, nothing moved. */
    int64_t ahead = tl + 60 * 1000000LL;
    CHECK(put_doc(&w, "ahead", ~Q ^ 0xff0000, "x", NULL, ahead) == ahead);
    CHECK(put_doc(&w, "after", ~Q ^ 0xff000000, "x", NULL, 0) > ahead);
    int64_t far = tl + ND_REGISTRY_AHEAD_US + 3600 * 1000000LL;
    CHECK(put_doc(&w, "far", ~Q ^ 0xff00ff00, "x", NULL, far) == -ERANGE);
    CHECK(put_doc(&w, "far", ~Q ^ 0xff00ff00, "x", NULL, INT64_MAX - 1) == -ERANGE);
    int64_t t2 = put_doc(&w, "after-far", ~Q ^ 0xf0f0f0f0, "x", NULL, 0);
    CHECK(t2 > ahead && t2 < tl + ND_REGISTRY_AHEAD_US, "%lld", (long long)t2);
    if (lmdb) {
        /* A registration in flight holds its time. */
        answer a;
        nd_check_req rq = {.id = "flight", .id_len = 6, .do_register = true};
        nd_question q = {.simhash = Q ^ 0xf000f000, .chars = 500};
        memcpy(q.text_hash, "flight", 6);
        a.res = (nd_check_res){.hits = a.hits, .matches = a.matches, .keys = a.keys, .cap = 32};
        done_box b = BOX_INIT;
        int rc = nd_registry_check(w.reg, &rq, &q, NULL, &a.res, box_done, &b);
        REQUIRE(rc == ND_REG_QUEUED, "%d", rc);
        int64_t tf = a.res.doc->registered_at_us;
        int64_t tg = put_doc(&w, "given-flight", Q ^ 0x0f0f0f0f00, "y", NULL, tf);
        CHECK(tg == tf + 1, "in flight %lld, given %lld", (long long)tf, (long long)tg);
        box_wait(&b);
        CHECK(nd_registry_complete(w.reg, b.ch, b.status) == 0);
        nd_check_res_release(&a.res);
        world_restart(&w);
        nd_doc *d;
        REQUIRE(nd_registry_get(w.reg, "early", 5, &d) == 0);
        CHECK(d->registered_at_us == te);
        nd_doc_release(d);
        CHECK(action_of(&w, Q, 3, "dave", src, NULL, NULL) == ND_ACTION_BLOCK &&
              strcmp(src, "early") == 0);
    }
    world_close(&w, false);
}

static void given_times_memory(void)
{
    given_times_through(false);
}

static void given_times_lmdb(void)
{
    given_times_through(true);
}

/* Many registrations given one time: consecutive microseconds from it, on
 * and after a restart (the memory of the time handed out is gone then: the
 * stored records are walked once). */
static void given_same_time(void)
{
    world w;
    world_open(&w, true, ND_REPRINT_ALLOW);
    REQUIRE(w.reg);
    const int64_t at = 1600000000LL * 1000000; /* 2020-09-13 */
    char id[32];
    for (int i = 0; i < 300; i++) {
        snprintf(id, sizeof(id), "same-%d", i);
        int64_t t = put_doc(&w, id, Q ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull), "x", NULL, at);
        CHECK(t == at + i, "%d: %lld", i, (long long)(t - at));
    }
    CHECK(put_doc(&w, "other", Q ^ 0x1234567, "x", NULL, at + 100) == at + 300);
    world_restart(&w);
    CHECK(put_doc(&w, "same-again", Q ^ 0x7654321, "x", NULL, at) == at + 301);
    CHECK(put_doc(&w, "same-again-2", Q ^ 0x7654322, "x", NULL, at) == at + 302);
    world_close(&w, false);
}

static void store_put_done(void *arg, int status)
{
    atomic_store((_Atomic int *)arg, status == 0 ? 1 : -1);
}

/* A record stored ahead of the clock (written before times were bounded,
 * or by a node with a clock ahead): the clock does not jump to it on load;
 * later registrations keep the wall clock's time, and never take its. */
static void stored_future_time_bounded(void)
{
    world w;
    world_open(&w, true, ND_REPRINT_ALLOW);
    REQUIRE(w.reg);
    int64_t t0 = put_doc(&w, "now", Q, "x", NULL, 0);
    REQUIRE(t0 > 0);
    int64_t far = t0 + 3650LL * 86400 * 1000000; /* ten years on */
    uint8_t hash[16] = "future";
    nd_record rec = {.id = "future",
                     .id_len = 6,
                     .simhash = ~Q,
                     .version = "v-future",
                     .registered_at_us = far,
                     .chars = 500};
    memcpy(rec.text_hash, hash, 16);
    _Atomic int done = 0;
    REQUIRE(nd_store_put(w.st, &rec, store_put_done, (void *)&done) == 0);
    nd_store_hurry(w.st);
    for (int i = 0; i < 5000 && !atomic_load(&done); i++)
        usleep(1000);
    REQUIRE(atomic_load(&done) == 1);
    world_restart(&w);
    int64_t t1 = put_doc(&w, "later", Q ^ 0xff, "x", NULL, 0);
    CHECK(t1 > t0 && t1 < t0 + ND_REGISTRY_AHEAD_US + 60 * 1000000LL, "%lld after",
          (long long)(t1 - t0));
    int64_t t2 = put_doc(&w, "later-2", Q ^ 0xff00, "x", NULL, 0);
    CHECK(t2 > t1 && t2 < far);
    world_close(&w, false);
}

/* Stores one record of fingerprint version `version` under id (no sketch:
 * a stale document is never compared) and waits for it. */
static void store_versioned(world *w, const char *id, const char *version, int64_t at)
{
    nd_record rec = {.id = id,
                     .id_len = strlen(id),
                     .simhash = (uint64_t)at * 0x9E3779B97F4A7C15ull,
                     .version = version,
                     .registered_at_us = at,
                     .chars = 500};
    memcpy(rec.text_hash, "versioned-text-h", 16);
    _Atomic int done = 0;
    REQUIRE(nd_store_put(w->st, &rec, store_put_done, (void *)&done) == 0);
    nd_store_hurry(w->st);
    for (int i = 0; i < 5000 && !atomic_load(&done); i++)
        usleep(1000);
    REQUIRE(atomic_load(&done) == 1);
}

/* A document keeps its fingerprint version as an 8-bit index into the
 * registry's table of other versions: a store of 255 other versions loads,
 * each document reporting its own; one more fails the load with -ENOSPC
 * (never a wrong version). */
static void stale_versions_bounded(void)
{
    world w;
    world_open(&w, true, ND_REPRINT_ALLOW);
    REQUIRE(w.reg);
    const int64_t t0 = 1700000000000000;
    char id[32], version[32];
    for (int i = 0; i < 255; i++) {
        snprintf(id, sizeof(id), "old-%d", i);
        snprintf(version, sizeof(version), "nd-simhash-old-%d", i);
        store_versioned(&w, id, version, t0 + i);
    }
    store_versioned(&w, "old-again", "nd-simhash-old-7", t0 + 300);
    world_restart(&w);
    nd_registry_version_count vc[300];
    CHECK(nd_registry_stale_versions(w.reg, vc, 300) == 255);
    for (int i = 0; i < 255; i += 127) {
        snprintf(id, sizeof(id), "old-%d", i);
        snprintf(version, sizeof(version), "nd-simhash-old-%d", i);
        nd_doc *d = NULL;
        REQUIRE(nd_registry_get(w.reg, id, strlen(id), &d) == 0);
        CHECK(nd_doc_stale(d) && strcmp(nd_registry_doc_version(w.reg, d), version) == 0, "%s: %s",
              id, nd_registry_doc_version(w.reg, d));
        nd_doc_release(d);
    }
    nd_doc *d = NULL;
    REQUIRE(nd_registry_get(w.reg, "old-again", 9, &d) == 0);
    CHECK(strcmp(nd_registry_doc_version(w.reg, d), "nd-simhash-old-7") == 0);
    nd_doc_release(d);
    store_versioned(&w, "one-too-many", "nd-simhash-old-255", t0 + 400);
    nd_registry_destroy(w.reg);
    w.reg = NULL;
    nd_store_close(w.st);
    world_open_store(&w);
    nd_registry_options o = {.max_matches = 10, .max_verify = ND_VERDICT_MAX_VERIFY};
    nd_verdict_params_default(&o.params);
    REQUIRE(nd_registry_create(&w.reg, w.st, &o) == 0);
    int rc = nd_registry_load(w.reg, NULL, NULL, 1000, NULL);
    CHECK(rc == ND_REG_TOO_MANY_VERSIONS && strstr(nd_registry_load_error(rc), "255 fingerprint"),
          "%d %s", rc, nd_registry_load_error(rc));
    world_close(&w, false);
}

/* Bad claims are refused before anything is written. */
static void claim_bounds(void)
{
    world w;
    world_open(&w, false, ND_REPRINT_ALLOW);
    REQUIRE(w.reg);
    answer a;
    CHECK(check(&w, &a, "neg", Q, 0, true, NULL, NULL, -5) == -EINVAL);
    static char big[ND_ACCOUNT_MAX + 2];
    memset(big, 'a', sizeof(big) - 1);
    CHECK(check(&w, &a, "big", Q, 0, true, big, NULL, 0) == -EINVAL);
    big[ND_ACCOUNT_MAX] = '\0';
    CHECK(check(&w, &a, "big", Q, 0, true, big, NULL, 0) == 0 && a.res.registered);
    nd_check_res_release(&a.res);
    world_close(&w, false);
}

/* A registration whose only evidence waits for its commit: ND_REG_WAIT
 * with nothing held in the answer and the time it was judged at (what
 * neardup import needs to set it aside); after the commit, asked again, it
 * is not original, with that document as its source. A wait on the id's
 * own change in flight gives no time. */
static void pending_evidence_waits_with_its_time(void)
{
    world w;
    world_open(&w, true, ND_REPRINT_ALLOW);
    REQUIRE(w.reg);
    const int64_t t = 1700000000000000;
    nd_check_req rq = {.id = "src",
                       .id_len = 3,
                       .do_register = true,
                       .account = "alice",
                       .account_len = 5,
                       .registered_at_us = t};
    nd_question q = {.simhash = Q, .chars = 500};
    memcpy(q.text_hash, "src", 3);
    answer src;
    src.res = (nd_check_res){.hits = src.hits, .matches = src.matches, .keys = src.keys, .cap = 32};
    done_box bs = BOX_INIT;
    REQUIRE(nd_registry_check(w.reg, &rq, &q, NULL, &src.res, box_done, &bs) == ND_REG_QUEUED);
    box_wait(&bs); /* committed by the store; pending until completed here */

    nd_check_req cp = rq;
    cp.id = "copy", cp.id_len = 4, cp.account = "bob", cp.account_len = 3;
    cp.registered_at_us = t + 10;
    nd_question cq = q;
    memset(cq.text_hash, 0, 16);
    memcpy(cq.text_hash, "copy", 4);
    answer a;
    a.res = (nd_check_res){.hits = a.hits, .matches = a.matches, .keys = a.keys, .cap = 32};
    done_box bc = BOX_INIT;
    CHECK(nd_registry_check(w.reg, &cp, &cq, NULL, &a.res, box_done, &bc) == ND_REG_WAIT);
    CHECK(a.res.wait_at_us == t + 10, "%lld", (long long)a.res.wait_at_us);
    CHECK(a.res.nmatches == 0 && !a.res.doc && !a.res.source && !a.res.registered);
    nd_check_req clock = cp; /* the clock's time: any later document could be seen */
    clock.registered_at_us = 0;
    answer c;
    c.res = (nd_check_res){.hits = c.hits, .matches = c.matches, .keys = c.keys, .cap = 32};
    done_box bk = BOX_INIT;
    CHECK(nd_registry_check(w.reg, &clock, &cq, NULL, &c.res, box_done, &bk) == ND_REG_WAIT);
    CHECK(c.res.wait_at_us == INT64_MAX, "%lld", (long long)c.res.wait_at_us);
    nd_check_req again = rq; /* the id's own registration in flight */
    answer g;
    g.res = (nd_check_res){.hits = g.hits, .matches = g.matches, .keys = g.keys, .cap = 32};
    done_box bg = BOX_INIT;
    CHECK(nd_registry_check(w.reg, &again, &q, NULL, &g.res, box_done, &bg) == ND_REG_WAIT);
    CHECK(g.res.wait_at_us == 0, "%lld", (long long)g.res.wait_at_us);

    CHECK(nd_registry_complete(w.reg, bs.ch, bs.status) == 0);
    nd_check_res_release(&src.res);
    box_wait(&bc);
    box_wait(&bk);
    box_wait(&bg);
    CHECK(check(&w, &a, "copy", Q, 0, true, "bob", NULL, t + 10) == 0);
    CHECK(!a.res.original && !a.res.registered && is_id(a.res.source, "src"));
    CHECK(a.res.wait_at_us == 0);
    nd_check_res_release(&a.res);
    world_close(&w, false);
}

static int delete_doc(world *w, const char *id)
{
    int rc;
    do {
        done_box b = BOX_INIT;
        rc = settle(w, nd_registry_delete(w->reg, id, strlen(id), NULL, NULL, box_done, &b), &b);
    } while (rc == ND_REG_WAIT);
    return rc;
}

/* Brings a world to one state: documents at given times, registered in
 * the order asked (reverse: the other way round), a long policy (over the
 * hash's one-call buffer), a revocation, a deletion. */
static void digest_world(world *w, int64_t t0, bool reverse)
{
    static char long_policy[2100];
    if (!long_policy[0]) {
        size_t n = (size_t)snprintf(long_policy, sizeof(long_policy),
                                    "{\"reprint\":\"forbid\",\"note\":\"");
        memset(long_policy + n, 'x', 2000);
        memcpy(long_policy + n + 2000, "\"}", 3);
    }
    const char *ids[4] = {"d-a", "d-b", "d-c", "d-d"};
    for (int j = 0; j < 4; j++) {
        int i = reverse ? 3 - j : j;
        CHECK(put_doc(w, ids[i], Q ^ ((uint64_t)0xff << (8 * i)), i & 1 ? "alice" : NULL,
                      i == 2 ? FORBID : NULL, t0 + i) == t0 + i);
    }
    CHECK(set_policy(w, "d-b", long_policy, NULL) == 0);
    CHECK(set_status(w, "d-c", ND_CLAIM_REVOKED, NULL) == 0);
    CHECK(delete_doc(w, reverse ? "d-d" : "d-a") == 0);
    CHECK(delete_doc(w, reverse ? "d-a" : "d-d") == 0);
}

/* The digest of the committed documents: kept as changes commit, equal to
 * the one a load computes from the store, independent of the order of the
 * changes, different for a different state; -EAGAIN before the load. */
static void digest_follows_commits(void)
{
    world w, v;
    uint64_t n = 0, dg = 0, n2 = 0, dg2 = 0, n0 = 0, dg0 = 0;
    nd_registry *unloaded;
    nd_registry_options o = {.max_matches = 10};
    REQUIRE(nd_store_memory_open(&v.st) == 0);
    REQUIRE(nd_registry_create(&unloaded, v.st, &o) == 0);
    CHECK(nd_registry_digest(unloaded, &n, &dg) == -EAGAIN);
    nd_registry_destroy(unloaded);
    nd_store_close(v.st);

    world_open(&w, true, ND_REPRINT_ALLOW);
    REQUIRE(nd_registry_digest(w.reg, &n0, &dg0) == 0);
    CHECK(n0 == 0);
    int64_t t0 = 1700000000000000;
    digest_world(&w, t0, false);
    REQUIRE(nd_registry_digest(w.reg, &n, &dg) == 0);
    CHECK(n == 2, "%llu documents", (unsigned long long)n);
    CHECK(dg != dg0);
    world_restart(&w); /* the loader's sum */
    REQUIRE(nd_registry_digest(w.reg, &n2, &dg2) == 0);
    CHECK(n2 == n && dg2 == dg, "after a restart %016llx, before %016llx", (unsigned long long)dg2,
          (unsigned long long)dg);

    world_open(&v, false, ND_REPRINT_ALLOW); /* the same state, the other way round */
    digest_world(&v, t0, true);
    REQUIRE(nd_registry_digest(v.reg, &n2, &dg2) == 0);
    CHECK(n2 == n && dg2 == dg, "other order %016llx, %016llx", (unsigned long long)dg2,
          (unsigned long long)dg);
    /* Any field of a document changes it: a policy back, a restore. */
    CHECK(set_policy(&v, "d-b", FORBID, NULL) == 0);
    REQUIRE(nd_registry_digest(v.reg, &n2, &dg2) == 0);
    CHECK(n2 == n && dg2 != dg);
    uint64_t dg3 = 0;
    CHECK(set_status(&v, "d-c", ND_CLAIM_ACTIVE, NULL) == 0);
    REQUIRE(nd_registry_digest(v.reg, &n2, &dg3) == 0);
    CHECK(dg3 != dg2 && dg3 != dg);
    world_close(&v, false);
    world_close(&w, false);
}

/* A decide callback that records what it saw and sets a policy. */
typedef struct decider {
    char saw[64];       /* the current policy it was called on ("" none) */
    const char *policy; /* what it sets */
    int calls;
    int fail; /* returned instead when not 0 */
    nd_store_event ev;
    char predated[8][32];
    size_t npredated;
    bool truncated;
} decider;

static int decide_rec(void *arg, nd_claim_change *c)
{
    decider *dc = arg;
    dc->calls++;
    snprintf(dc->saw, sizeof(dc->saw), "%.*s", nd_doc_policy(c->doc) ? (int)c->doc->policy_len : 0,
             nd_doc_policy(c->doc) ? nd_doc_policy(c->doc) : "");
    dc->npredated = 0;
    for (size_t i = 0; i < c->npredated && i < 8; i++, dc->npredated++)
        snprintf(dc->predated[i], sizeof(dc->predated[i]), "%.*s", (int)c->predated[i]->id_len,
                 nd_doc_id(c->predated[i]));
    dc->truncated = c->predated_truncated;
    if (dc->fail)
        return dc->fail;
    dc->ev = audit_event("change");
    c->policy = dc->policy;
    c->policy_len = dc->policy ? strlen(dc->policy) : 0;
    c->audit = &dc->ev;
    return 0;
}

/* A policy change is decided on the policy current when it is made: a
 * second change queued behind a first one in flight waits (its decide is
 * not called), and asked again it sees the first one's policy; a decide
 * that refuses changes nothing. */
static void change_decided_on_current_policy(void)
{
    world w;
    world_open(&w, true, ND_REPRINT_ALLOW);
    REQUIRE(w.reg);
    REQUIRE(put_doc(&w, "P", Q, "alice", ALLOW, 0) > 0);
    decider d1 = {.policy = FORBID}, d2 = {.policy = WL_DAVE};
    done_box b1 = BOX_INIT, b2 = BOX_INIT;
    int rc1 = nd_registry_change_policy(w.reg, "P", 1, decide_rec, &d1, box_done, &b1);
    REQUIRE(rc1 == ND_REG_QUEUED, "%d", rc1);
    CHECK(d1.calls == 1 && strcmp(d1.saw, ALLOW) == 0, "%s", d1.saw);
    CHECK(nd_registry_change_policy(w.reg, "P", 1, decide_rec, &d2, box_done, &b2) == ND_REG_WAIT);
    CHECK(d2.calls == 0);
    CHECK(settle(&w, rc1, &b1) == 0);
    box_wait(&b2); /* woken */
    done_box b3 = BOX_INIT;
    CHECK(settle(&w, nd_registry_change_policy(w.reg, "P", 1, decide_rec, &d2, box_done, &b3),
                 &b3) == 0);
    CHECK(d2.calls == 1 && strcmp(d2.saw, FORBID) == 0, "the second saw %s", d2.saw);
    nd_doc *d = NULL;
    REQUIRE(nd_registry_get(w.reg, "P", 1, &d) == 0);
    CHECK(d->policy_len == strlen(WL_DAVE) &&
          memcmp(nd_doc_policy(d), WL_DAVE, d->policy_len) == 0);
    nd_doc_release(d);
    int n0 = audit_count(&w);
    decider bad = {.policy = FORBID, .fail = -EPROTO};
    CHECK(nd_registry_change_policy(w.reg, "P", 1, decide_rec, &bad, box_done, &b3) == -EPROTO);
    static char big[ND_POLICY_MAX + 2];
    memset(big, ' ', sizeof(big) - 1);
    decider over = {.policy = big};
    CHECK(nd_registry_change_policy(w.reg, "P", 1, decide_rec, &over, box_done, &b3) == -EINVAL);
    CHECK(audit_count(&w) == n0);
    REQUIRE(nd_registry_get(w.reg, "P", 1, &d) == 0);
    CHECK(d->policy_len == strlen(WL_DAVE), "unchanged");
    nd_doc_release(d);
    decider none = {.policy = FORBID};
    CHECK(nd_registry_change_policy(w.reg, "nope", 4, decide_rec, &none, box_done, &b3) ==
              -ENOENT &&
          none.calls == 0);
    world_close(&w, false);
}

/* Restores id (status ACTIVE, k 3) with dc; returns its result. */
static int restore_with(world *w, const char *id, decider *dc)
{
    done_box b = BOX_INIT;
    return settle(w,
                  nd_registry_change_status(w->reg, id, strlen(id), ND_CLAIM_ACTIVE, 3, NULL,
                                            decide_rec, dc, box_done, &b),
                  &b);
}

/* The status of id and whom it is superseded by (its registered_at, 0:
 * none); -1 when not found. */
static int status_of(world *w, const char *id, int64_t *by)
{
    nd_doc *d = NULL;
    if (nd_registry_get(w->reg, id, strlen(id), &d) < 0)
        return -1;
    int st = d->status;
    *by = nd_doc_superseded_by(d);
    nd_doc_release(d);
    return st;
}

/* A restore of a revoked claim is given the documents it now predates:
 * active, of another account, registered after it, a match (here: the
 * same text, the tests' documents have no sketches); not itself, not the
 * same account, not a revoked one, not one registered before it, not
 * another text within k. A revoke and a restore of an active claim are
 * given none. The restore makes the ones it predates superseded (by it),
 * in its store transaction (kept across a restart); they are still
 * evidence; a second restore of an earlier claim leaves them superseded
 * by the first; revoking the restored claim again changes none; a
 * superseded claim is restored to active explicitly (audit F12). */
static void restore_supersedes(bool lmdb)
{
    world w;
    world_open(&w, lmdb, ND_REPRINT_ALLOW);
    REQUIRE(w.reg);
    /* Ids sharing their first 16 bytes have the same text here. */
    REQUIRE(put_doc(&w, "same-text-000000-early", Q ^ 1, "erin", NULL, 0) > 0);
    int64_t ta = put_doc(&w, "same-text-000000-A", Q ^ 1, "erin", NULL, 0); /* own re-post */
    REQUIRE(ta > 0);
    REQUIRE(set_status(&w, "same-text-000000-A", ND_CLAIM_REVOKED, NULL) == 0);
    decider rv = {0};
    done_box b = BOX_INIT;
    CHECK(settle(&w,
                 nd_registry_change_status(w.reg, "same-text-000000-early", 22, ND_CLAIM_REVOKED, 3,
                                           NULL, decide_rec, &rv, box_done, &b),
                 &b) == 0);
    CHECK(rv.calls == 1 && rv.npredated == 0);
    REQUIRE(put_doc(&w, "same-text-000000-B", Q ^ 1, "bob", NULL, 0) > 0);
    REQUIRE(put_doc(&w, "same-text-000000-B2", Q ^ 1, "bob", NULL, 0) > 0); /* bob's own */
    REQUIRE(set_status(&w, "same-text-000000-B2", ND_CLAIM_REVOKED, NULL) == 0);
    REQUIRE(put_doc(&w, "other-text", Q ^ 3, "dan", NULL, 0) > 0);
    int n0 = audit_count(&w);
    decider ra = {0}, re = {0}, rb = {0}, again = {0}, rb2 = {0};
    CHECK(restore_with(&w, "same-text-000000-A", &ra) == 0);
    CHECK(ra.calls == 1 && ra.npredated == 1 && strcmp(ra.predated[0], "same-text-000000-B") == 0 &&
              !ra.truncated,
          "%zu: %s", ra.npredated, ra.npredated ? ra.predated[0] : "");
    CHECK(audit_count(&w) == n0 + 1, "one audit entry");
    int64_t by = 0;
    for (int round = 0; round < (lmdb ? 2 : 1); round++) {
        if (round)
            world_restart(&w);
        CHECK(status_of(&w, "same-text-000000-B", &by) == ND_CLAIM_SUPERSEDED && by == ta,
              "round %d: B superseded by A", round);
        CHECK(status_of(&w, "same-text-000000-A", &by) == ND_CLAIM_ACTIVE && by == 0);
        CHECK(status_of(&w, "same-text-000000-B2", &by) == ND_CLAIM_REVOKED);
        CHECK(status_of(&w, "other-text", &by) == ND_CLAIM_ACTIVE);
        /* B is still evidence: a third account's check names the earliest
         * active claim (A; "early" is revoked) as its source. */
        answer an;
        CHECK(check(&w, &an, "same-text-000000-C", Q ^ 1, 3, 0, "carol", NULL, 0) == 0);
        CHECK(!an.res.original && is_id(an.res.source, "same-text-000000-A"));
        for (size_t i = 0; i < an.res.nmatches; i++)
            if (is_id(an.res.matches[i].doc, "same-text-000000-B"))
                CHECK(an.res.matches[i].evidence, "a superseded claim is evidence");
        nd_check_res_release(&an.res);
    }
    CHECK(restore_with(&w, "same-text-000000-early", &re) == 0);
    CHECK(re.calls == 1 && re.npredated == 0, "%zu: B is superseded already", re.npredated);
    CHECK(status_of(&w, "same-text-000000-B", &by) == ND_CLAIM_SUPERSEDED && by == ta);
    CHECK(restore_with(&w, "same-text-000000-B2", &rb) == 0);
    CHECK(rb.calls == 1 && rb.npredated == 0, "%zu", rb.npredated);
    CHECK(restore_with(&w, "same-text-000000-A", &again) == 0 && again.calls == 0);
    /* Revoking A again leaves B superseded. */
    CHECK(set_status(&w, "same-text-000000-A", ND_CLAIM_REVOKED, NULL) == 0);
    CHECK(status_of(&w, "same-text-000000-B", &by) == ND_CLAIM_SUPERSEDED && by == ta);
    /* B restored explicitly: active again, audited. */
    int n1 = audit_count(&w);
    CHECK(restore_with(&w, "same-text-000000-B", &rb2) == 0 && rb2.calls == 1);
    CHECK(audit_count(&w) == n1 + 1);
    CHECK(status_of(&w, "same-text-000000-B", &by) == ND_CLAIM_ACTIVE && by == 0);
    if (lmdb) {
        world_restart(&w);
        CHECK(status_of(&w, "same-text-000000-B", &by) == ND_CLAIM_ACTIVE && by == 0);
    }
    world_close(&w, false);
}

static void restore_supersedes_memory(void)
{
    restore_supersedes(false);
}

static void restore_supersedes_lmdb(void)
{
    restore_supersedes(true);
}

/* Stored anchors beyond the first 16 (a long text has up to ND_ANCHORS_MAX,
 * sketch.h ND_ANCHORS_SCALED): a document's anchor i, for i = 16, 39 ...,
 * still finds it after a restart (the record carries them all and the
 * loader indexes them all), a document stored under 16 (a record written
 * before anchors grew) loads as before, and a delete after the restart
 * unindexes every one of them. `many` documents in all, each with 16..64
 * anchors: at least FEED_MIN_DOCS (65536) exercises the loader's helper
 * thread and its anchor chunks. */
static uint32_t anchor_of(uint32_t doc, uint32_t i)
{
    uint64_t x = ((uint64_t)doc << 8 | i) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 32);
}

static unsigned anchors_of_doc(uint32_t doc)
{
    return doc == 0 ? 16 : 16 + doc % (ND_ANCHORS_MAX - 15); /* doc 0: an old record */
}

static int anchor_check(world *w, answer *a, const char *id, uint64_t h, bool do_register,
                        uint32_t doc, const uint32_t *probe, uint32_t nprobe)
{
    static nd_anchor_hit ahits[ND_ANCHOR_HITS_MAX];
    nd_sketch sk[2] = {{.mode = 0, .n = 40, .shingles = 40}, {.mode = 1}};
    for (uint32_t i = 0; i < 40; i++)
        sk[0].values[i] = (i + 1) << 5; /* one sketch for all: a match when verified */
    nd_check_req rq = {.id = id, .id_len = strlen(id), .k = 0, .do_register = do_register};
    static nd_question q;
    memset(&q, 0, sizeof(q));
    q.simhash = h, q.chars = 500;
    snprintf((char *)q.text_hash, sizeof(q.text_hash), "%s", id);
    unsigned na = anchors_of_doc(doc);
    q.nstore = do_register ? na : 0;
    for (uint32_t i = 0; i < q.nstore; i++)
        q.store[i] = anchor_of(doc, i);
    q.nprobe = nprobe;
    if (nprobe)
        memcpy(q.probe, probe, nprobe * sizeof(uint32_t));
    q.sketch_enc_len = (uint32_t)nd_sketch_encode(&sk[0], q.sketch_enc, sizeof(q.sketch_enc));
    nd_question_scratch qs = {.sketch = sk};
    int rc;
    do {
        a->res = (nd_check_res){.hits = a->hits,
                                .matches = a->matches,
                                .keys = a->keys,
                                .cap = 32,
                                .ahits = ahits,
                                .acap = ND_ANCHOR_HITS_MAX};
        done_box b = BOX_INIT;
        rc = settle(w, nd_registry_check(w->reg, &rq, &q, &qs, &a->res, box_done, &b), &b);
    } while (rc == ND_REG_WAIT);
    return rc;
}

/* Whether probing anchor i of doc finds doc (id "d-<doc>") among the matches. */
static bool anchor_finds(world *w, uint32_t doc, uint32_t i)
{
    answer a;
    uint32_t probe = anchor_of(doc, i);
    char want[32];
    snprintf(want, sizeof(want), "d-%u", doc);
    int rc = anchor_check(w, &a, "query", 0x5555555555555555ull, false, 0, &probe, 1);
    bool found = false;
    for (size_t m = 0; rc == 0 && m < a.res.nmatches; m++)
        found |= a.res.matches[m].doc && a.res.matches[m].doc->id_len == strlen(want) &&
                 memcmp(nd_doc_id(a.res.matches[m].doc), want, strlen(want)) == 0;
    nd_check_res_release(&a.res);
    return found;
}

static void anchors_beyond_16_through(uint32_t many)
{
    world w;
    world_open(&w, true, ND_REPRINT_ALLOW);
    REQUIRE(w.reg);
    for (uint32_t d = 0; d < many; d++) {
        char id[32];
        snprintf(id, sizeof(id), "d-%u", d);
        answer a;
        int rc = anchor_check(&w, &a, id, (uint64_t)d * 0x9E3779B97F4A7C15ull ^ 0xABCDEFull, true,
                              d, NULL, 0);
        bool ok = rc == 0 && a.res.registered;
        nd_check_res_release(&a.res);
        REQUIRE(ok, "register %s: %d", id, rc);
    }
    const uint32_t docs[] = {0, 1, 24, 48, many / 2, many - 1};
    for (int pass = 0; pass < 2; pass++) {
        for (size_t k = 0; k < sizeof(docs) / sizeof(docs[0]); k++) {
            uint32_t d = docs[k], na = anchors_of_doc(d);
            CHECK(anchor_finds(&w, d, 0) && anchor_finds(&w, d, na - 1),
                  "%s: doc %u found by its anchors 0 and %u", pass ? "after restart" : "before", d,
                  na - 1);
            CHECK(!anchor_finds(&w, d, na), "doc %u is not under an anchor %u", d, na);
        }
        if (pass == 0)
            world_restart(&w);
    }
    /* A delete after the restart unindexes the anchors its record lists. */
    uint32_t d = 48, na = anchors_of_doc(d);
    done_box b = BOX_INIT;
    CHECK(settle(&w, nd_registry_delete(w.reg, "d-48", 4, NULL, NULL, box_done, &b), &b) == 0,
          "delete");
    CHECK(!anchor_finds(&w, d, na - 1) && !anchor_finds(&w, d, 0), "deleted: not found");
    world_close(&w, false);
}

static void anchors_beyond_16(void)
{
    anchors_beyond_16_through(100);
}

static void anchors_beyond_16_loader_thread(void)
{
    anchors_beyond_16_through(70000);
}

int main(void)
{
    UNIT_RUN(memory_store_answers_at_once);
    UNIT_RUN(documents_bounded);
    UNIT_RUN(slot_reuse_never_lists_twice);
    UNIT_RUN(claims_memory);
    UNIT_RUN(claims_lmdb);
    UNIT_RUN(default_forbid);
    UNIT_RUN(given_times_memory);
    UNIT_RUN(given_times_lmdb);
    UNIT_RUN(given_same_time);
    UNIT_RUN(stored_future_time_bounded);
    UNIT_RUN(stale_versions_bounded);
    UNIT_RUN(claim_bounds);
    UNIT_RUN(pending_evidence_waits_with_its_time);
    UNIT_RUN(digest_follows_commits);

    UNIT_RUN(change_decided_on_current_policy);
    UNIT_RUN(restore_supersedes_memory);
    UNIT_RUN(restore_supersedes_lmdb);
    UNIT_RUN(anchors_beyond_16);
    UNIT_RUN(anchors_beyond_16_loader_thread);
    return unit_summary("registry");
}
