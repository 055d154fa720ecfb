/* store_tool.c - writes records straight into a neardup store (data
 * directory), for the tests and benchmarks that need a store neardupd did
 * not write: records of another fingerprint version, or millions of them.
 *
 *   store_tool put DIR            JSON lines on stdin, one record each:
 *       {"id": "a-1", "simhash": "0123456789abcdef", "version": "nd-simhash-0",
 *        "registered_at_us": 1700000000000000, "chars": 812,
 *        "text": "...", "meta": {...}, "account": "acct-1",
 *        "policy": {"reprint": "forbid"}, "status": "revoked"}
 *     version defaults to the current one, chars to 500, text (hashed: the
 *     text hash that makes re-registering the same text idempotent; and,
 *     for a record of the current version, sketched: its anchors and
 *     sketch are stored as neardupd stores them, "sketch": false leaves
 *     them out) to "", meta, account and policy to none, status to
 *     "active" (the originality workflow's claim fields: stored in value layout 4). The simhash is taken as given (tests
 *     place documents at chosen distances). Prints "put N" and exits 0, or
 *     1 with a message.
 *   store_tool fill DIR N [VERSION]
 *     N realistic records (ids and meta like a publishing platform's,
 *     random fingerprints and anchors, no sketches: a start-up never reads
 *     them) of VERSION (default the current one), as fast
 *     as the store takes them (no fsync; the close flushes), registered at
 *     increasing times ending about now. Prints the rate.
 *
 * The store must not be held by a running neardupd (nd_store_open refuses). */
#include "clock.h"
#include "fingerprint.h"
#include "registry.h"
#include "sketch.h"
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

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

/* The text hash neardupd stores (nd_registry_text_hash): XXH3-128,
 * canonical byte order. */
static void text_hash(const char *text, size_t len, uint8_t out[16])
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(text, len));
    memcpy(out, c.digest, 16);
}

static nd_store *open_store(const char *dir)
{
    nd_store_options o;
    nd_store *st = NULL;
    char err[512];
    nd_store_options_default(&o);
    o.sync = false; /* nd_store_close() flushes */
    o.max_batch = 16384;
    int rc = nd_store_open(&st, dir, &o, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "store_tool: %s\n", err);
        exit(1);
    }
    return st;
}

static _Atomic int put_failures;

static void put_done(void *arg, int status)
{
    (void)arg;
    if (status) {
        fprintf(stderr, "store_tool: a put failed: %s\n", strerror(-status));
        put_failures++;
    }
}

/* ---- put ---- */

static int parse_hex64(const char *s, uint64_t *out)
{
    char *end;
    if (!s || strlen(s) != 16)
        return -1;
    errno = 0;
    *out = strtoull(s, &end, 16);
    return errno || *end ? -1 : 0;
}

static nd_sketcher *sketcher;
static nd_sk_scratch *sk_scratch;

/* Fills r's anchors and sketch from the text, as neardupd does. */
static int sketch_record(nd_record *r, const char *text, size_t len, uint8_t *abuf, uint8_t *enc)
{
    static nd_sketch sk;
    static nd_anchors an;
    if ((!sketcher && nd_sketcher_create(&sketcher)) ||
        (!sk_scratch && nd_sk_scratch_create(&sk_scratch)))
        return -ENOMEM;
    int rc = nd_sketch_text(sketcher, sk_scratch, text, len, &sk, &an, ND_ANCHORS_STORE, NULL);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < an.n; i++)
        for (int b = 0; b < 4; b++)
            abuf[4 * i + b] = (uint8_t)(an.a[i] >> (8 * b));
    r->anchors = an.n ? abuf : NULL;
    r->nanchors = an.n;
    r->sketch_len = nd_sketch_encode(&sk, enc, ND_SKETCH_ENCODED_MAX);
    r->sketch = r->sketch_len ? enc : NULL;
    return 0;
}

static int put_line(nd_store *st, const char *line, unsigned long lineno)
{
    uint8_t abuf[4 * ND_ANCHORS_MAX], enc[ND_SKETCH_ENCODED_MAX];
    json_error_t jerr;
    json_t *o = json_loads(line, 0, &jerr);
    nd_record r = {0};
    char *meta = NULL, *policy = NULL;
    int rc = -1;
    if (!json_is_object(o)) {
        fprintf(stderr, "store_tool: line %lu: not a JSON object: %s\n", lineno, jerr.text);
        goto out;
    }
    json_t *id = json_object_get(o, "id"), *text = json_object_get(o, "text");
    json_t *m = json_object_get(o, "meta");
    const char *version = json_string_value(json_object_get(o, "version"));
    json_t *at = json_object_get(o, "registered_at_us"), *chars = json_object_get(o, "chars");
    if (!json_is_string(id) || !json_is_integer(at) ||
        parse_hex64(json_string_value(json_object_get(o, "simhash")), &r.simhash)) {
        fprintf(stderr,
                "store_tool: line %lu: needs id, simhash (16 hex digits), "
                "registered_at_us\n",
                lineno);
        goto out;
    }
    r.id = json_string_value(id);
    r.id_len = json_string_length(id);
    r.version = version ? version : ND_RECORD_VERSION;
    r.registered_at_us = (int64_t)json_integer_value(at);
    r.chars = chars ? (uint32_t)json_integer_value(chars) : 500;
    const char *t = json_is_string(text) ? json_string_value(text) : "";
    text_hash(t, json_is_string(text) ? json_string_length(text) : 0, r.text_hash);
    if (strcmp(r.version, ND_RECORD_VERSION) == 0 && json_is_string(text) &&
        !json_is_false(json_object_get(o, "sketch")) &&
        sketch_record(&r, t, json_string_length(text), abuf, enc)) {
        fprintf(stderr, "store_tool: line %lu: cannot sketch the text\n", lineno);
        goto out;
    }
    if (json_is_object(m)) {
        meta = json_dumps(m, JSON_COMPACT);
        r.meta = meta;
        r.meta_len = meta ? strlen(meta) : 0;
    }
    json_t *acc = json_object_get(o, "account"), *pol = json_object_get(o, "policy");
    const char *status = json_string_value(json_object_get(o, "status"));
    if (json_is_string(acc)) {
        r.account = json_string_value(acc);
        r.account_len = json_string_length(acc);
    }
    if (json_is_object(pol)) {
        policy = json_dumps(pol, JSON_COMPACT);
        r.policy = policy;
        r.policy_len = policy ? strlen(policy) : 0;
    }
    r.status = status && strcmp(status, "revoked") == 0 ? ND_CLAIM_REVOKED : ND_CLAIM_ACTIVE;
    rc = nd_store_put(st, &r, put_done, NULL);
    if (rc)
        fprintf(stderr, "store_tool: line %lu: %s\n", lineno, strerror(-rc));
out:
    free(meta);
    free(policy);
    json_decref(o);
    return rc;
}

static int cmd_put(const char *dir)
{
    nd_store *st = open_store(dir);
    char *line = NULL;
    size_t cap = 0;
    unsigned long n = 0, lineno = 0;
    int rc = 0;
    while (getline(&line, &cap, stdin) > 0) {
        lineno++;
        if (line[strspn(line, " \t\r\n")] == '\0')
            continue;
        if ((rc = put_line(st, line, lineno)) != 0)
            break;
        n++;
    }
    free(line);
    nd_store_close(st);
    nd_sk_scratch_destroy(sk_scratch);
    nd_sketcher_destroy(sketcher);
    if (rc || put_failures)
        return 1;
    printf("put %lu\n", n);
    return 0;
}

/* ---- fill ---- */

static const char *const WORDS[] = {
    "market", "policy", "river",  "winter", "school",  "energy",  "city",   "report", "family",
    "music",  "health", "review", "travel", "science", "history", "garden", "budget", "story",
};
#define NWORDS (sizeof(WORDS) / sizeof(WORDS[0]))

typedef struct fill_rec {
    char id[64];
    char meta[256];
    uint8_t anchors[4 * ND_ANCHORS_STORE];
    nd_record r;
} fill_rec;

/* Record seq of a store of n: an id like a CMS's, a meta like the one the
 * platform sends (author, title, url), times 100 us apart ending at end_us. */
static void make_fill(fill_rec *b, uint64_t seq, uint64_t n, int64_t end_us, const char *version)
{
    uint64_t h = mix64(seq + 1);
    unsigned site = (unsigned)(h % 500);
    int idn = snprintf(b->id, sizeof(b->id), "site%u/%u/%02u/article-%" PRIu64, site,
                       2015 + (unsigned)(h >> 8) % 10, 1 + (unsigned)(h >> 12) % 12, seq + 1000000);
    int mn = snprintf(b->meta, sizeof(b->meta),
                      "{\"author\":\"author-%u\",\"title\":\"The %s of %s and %s\","
                      "\"url\":\"https://site%u.example.com/%s/%010" PRIu64 ".html\"}",
                      (unsigned)(h >> 40) % 100000, WORDS[h % NWORDS], WORDS[(h >> 8) % NWORDS],
                      WORDS[(h >> 24) % NWORDS], site, WORDS[(h >> 32) % NWORDS],
                      (uint64_t)((h >> 16) % 10000000000ull));
    memset(&b->r, 0, sizeof(b->r));
    b->r.id = b->id;
    b->r.id_len = (size_t)idn;
    b->r.simhash = mix64(h);
    b->r.version = version;
    b->r.registered_at_us = end_us - (int64_t)(n - seq) * 100;
    b->r.chars = (uint32_t)(300 + (h >> 20) % 20000);
    memcpy(b->r.text_hash, &h, 8);
    memcpy(b->r.text_hash + 8, &b->r.simhash, 8);
    b->r.meta = b->meta;
    b->r.meta_len = (size_t)mn;
    uint64_t a = h;
    for (unsigned i = 0; i < ND_ANCHORS_STORE; i++) {
        a = mix64(a);
        memcpy(b->anchors + 4 * i, &a, 4);
    }
    b->r.anchors = b->anchors;
    b->r.nanchors = ND_ANCHORS_STORE;
}

static int cmd_fill(const char *dir, const char *count, const char *version)
{
    char *end;
    uint64_t n = strtoull(count, &end, 10);
    if (*end || n == 0) {
        fprintf(stderr, "store_tool: N must be a positive integer\n");
        return 2;
    }
    nd_store *st = open_store(dir);
    int64_t end_us = nd_clock_wall_us() - 1000000;
    double t0 = now_s();
    for (uint64_t i = 0; i < n; i++) {
        fill_rec b;
        make_fill(&b, i, n, end_us, version);
        int rc = nd_store_put(st, &b.r, put_done, NULL);
        if (rc) {
            fprintf(stderr, "store_tool: put %" PRIu64 ": %s\n", i, strerror(-rc));
            nd_store_close(st);
            return 1;
        }
    }
    nd_store_close(st);
    double t = now_s() - t0;
    if (put_failures)
        return 1;
    printf("fill: %" PRIu64 " records in %.1f s (%.0f records/s)\n", n, t, (double)n / t);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "put") == 0)
        return cmd_put(argv[2]);
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "fill") == 0)
        return cmd_fill(argv[2], argv[3], argc == 5 ? argv[4] : ND_RECORD_VERSION);
    fprintf(stderr, "usage: store_tool put DIR < records.jsonl\n"
                    "       store_tool fill DIR N [VERSION]\n");
    return 2;
}
