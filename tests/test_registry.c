/* test_registry.c - the registry (server/registry/registry.c) over the memory store:
 * changes that the store commits within its call are answered at once and
 * reach the store's on-commit observer in order; and concurrency that HTTP
 * cannot reach in a bounded test.
 *
 * Slot reuse (issue 16, suspected): a query reads the index without a lock;
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
#include <string.h>
#include <time.h>

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
    nd_check_req rq = {.id = id,
                       .id_len = strlen(id),
                       .simhash = simhash,
                       .chars = 500,
                       .k = 0,
                       .do_register = true};
    memset(rq.text_hash, 0, 16);
    memcpy(rq.text_hash, id, strlen(id) < 16 ? strlen(id) : 16);
    static nd_index_hit hits[64];
    static nd_match matches[64];
    nd_check_res res = {.hits = hits, .matches = matches, .cap = 64};
    int rc = nd_registry_check(reg, &rq, &res, never, NULL);
    nd_check_res_release(&res);
    return rc;
}

static void *writer_main(void *arg)
{
    nd_registry *reg = arg;
    uint64_t a = A_HASH, b = B_HASH;
    while (!atomic_load(&stop)) {
        nd_registry_delete(reg, "A", 1, never, NULL);
        reg_doc(reg, "B", b);
        nd_registry_delete(reg, "B", 1, never, NULL);
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
        nd_check_req rq = {.simhash = Q, .chars = 500, .k = 8};
        nd_check_res res = {.hits = hits, .matches = matches, .cap = 64};
        if (nd_registry_check(reg, &rq, &res, never, NULL) == 0) {
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

static void slot_reuse_never_lists_twice(void)
{
    nd_registry *reg;
    nd_store *st = NULL;
    nd_registry_options o = {.max_matches = 10};
    REQUIRE(nd_store_memory_open(&st) == 0);
    REQUIRE(nd_registry_create(&reg, st, &o) == 0, "create");
    nd_registry_set_loaded(reg);
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

/* What the store's on-commit observer saw. */
typedef struct seen {
    int n;
    nd_store_change kind[16];
    char id[16][8];
} seen;

static void observe(void *arg, nd_store_change kind, const nd_record *rec)
{
    seen *s = arg;
    if (s->n < 16) {
        s->kind[s->n] = kind;
        snprintf(s->id[s->n], sizeof(s->id[0]), "%.*s", (int)rec->id_len, rec->id);
        s->n++;
    }
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
 * nothing stays pending, the documents are live at once, and the observer
 * saw each committed change once, in order. */
static void memory_store_answers_at_once(void)
{
    nd_registry *reg;
    nd_store *st = NULL;
    nd_registry_options o = {.max_matches = 10};
    seen s = {0};
    REQUIRE(nd_store_memory_open(&st) == 0);
    nd_store_set_observer(st, observe, &s);
    REQUIRE(nd_registry_create(&reg, st, &o) == 0);
    nd_registry_set_loaded(reg);
    CHECK(reg_doc(reg, "A", A_HASH) == 0);
    CHECK(reg_doc(reg, "B", ~A_HASH) == 0);
    CHECK(get_chars(reg, "A") == 500 && get_chars(reg, "B") == 500, "live at once");
    CHECK(reg_doc(reg, "A", A_HASH) == 0, "the same id and text: existing");
    CHECK(nd_store_count(st) == 2);
    CHECK(nd_registry_delete(reg, "A", 1, never, NULL) == 0);
    CHECK(get_chars(reg, "A") == -ENOENT);
    CHECK(nd_registry_delete(reg, "A", 1, never, NULL) == -ENOENT);
    nd_registry_stats rs;
    nd_registry_stats_get(reg, &rs);
    CHECK(rs.documents == 1 && rs.pending == 0, "%llu %llu", (unsigned long long)rs.documents,
          (unsigned long long)rs.pending);
    CHECK(nd_store_count(st) == 1);
    CHECK(s.n == 3 && s.kind[0] == ND_STORE_PUT && strcmp(s.id[0], "A") == 0 &&
              s.kind[1] == ND_STORE_PUT && strcmp(s.id[1], "B") == 0 &&
              s.kind[2] == ND_STORE_DELETE && strcmp(s.id[2], "A") == 0,
          "observer saw %d changes", s.n);
    nd_registry_destroy(reg);
    nd_store_close(st);
}

int main(void)
{
    UNIT_RUN(memory_store_answers_at_once);
    UNIT_RUN(slot_reuse_never_lists_twice);
    return unit_summary("registry");
}
