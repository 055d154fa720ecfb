/* replica_hooks.c - webhook positions and the deliverer's lease in
 * JetStream key-value buckets (replica_hooks.h). */
#include "replica_hooks.h"
#include "hook_config.h"
#include "replica_internal.h"

#include <inttypes.h>

#define LEASE_MS 5000 /* a lease not renewed for this long expires */
#define RENEW_MS 1000 /* the holder renews (and the others try) this often */
/* A holder sends and saves only while its last renewal is younger than
 * LEASE_MS - MARGIN_MS: what it sends then reaches the receiver before
 * another node can take the lease (the NATS servers count the lease from
 * when they stored the renewal, after the time taken here before asking),
 * with MARGIN_MS for the request's way there and the servers' clocks. */
#define MARGIN_MS 2000
#define LEASE_KEY "deliverer"
#define BUCKET_MAX 128

/* A position key as this node last saw it. */
typedef struct kv_key {
    char sub[ND_HOOK_NAME_MAX + 1];
    uint64_t rev; /* the revision this node last read or wrote; 0: none, load first */
    bool absent;  /* its last load found none: the next save creates it */
} kv_key;

typedef struct kv_positions {
    nd_hook_positions head; /* first: the interface */
    nd_replica *r;
    kvStore *pos, *lease;
    uint64_t lease_rev; /* the revision this node wrote (0: not holding) */
    int64_t tried_ms;   /* the last lease round trip began (lease_ms()) */
    int64_t renewed_ms; /* the last successful one began */
    int leading;
    size_t nkeys;
    kv_key keys[ND_HOOK_SUBS_MAX];
} kv_positions;

static kv_positions *kv_of(nd_hook_positions *p)
{
    return (kv_positions *)(void *)p;
}

/* The lease's clock: monotonic, and counting a suspend too (CLOCK_BOOTTIME),
 * which CLOCK_MONOTONIC does not: a node suspended for a minute must not
 * believe its lease is a second old. */
static int64_t lease_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int kv_errno(natsStatus s)
{
    switch (s) {
    case NATS_OK: return 0;
    case NATS_NOT_FOUND: return -ENOENT;
    case NATS_TIMEOUT: return -ETIMEDOUT;
    case NATS_NO_MEMORY: return -ENOMEM;
    case NATS_NOT_PERMITTED: return -EACCES;
    default: return -EIO;
    }
}

/* sub's key record, added when new; NULL when the table is full. */
static kv_key *key_of(kv_positions *k, const char *sub)
{
    for (size_t i = 0; i < k->nkeys; i++)
        if (strcmp(k->keys[i].sub, sub) == 0)
            return &k->keys[i];
    if (k->nkeys == ND_HOOK_SUBS_MAX)
        return NULL;
    kv_key *kk = &k->keys[k->nkeys++];
    snprintf(kk->sub, sizeof(kk->sub), "%s", sub);
    kk->rev = 0;
    kk->absent = false;
    return kk;
}

/* Reads sub's position: 0 with *seq and *rev, or -errno (-ENOENT: none). */
static int read_key(kv_positions *k, const char *sub, uint64_t *seq, uint64_t *rev)
{
    char key[ND_HOOK_NAME_MAX + 8];
    snprintf(key, sizeof(key), "pos.%s", sub);
    kvEntry *e = NULL;
    natsStatus s = kvStore_Get(&e, k->pos, key);
    if (s != NATS_OK)
        return kv_errno(s);
    char buf[24];
    int n = kvEntry_ValueLen(e);
    int rc = -EBADMSG;
    if (n > 0 && n < (int)sizeof(buf)) {
        memcpy(buf, kvEntry_Value(e), (size_t)n);
        buf[n] = 0;
        char *end;
        unsigned long long v = strtoull(buf, &end, 10);
        if (*end == 0) {
            *seq = (uint64_t)v;
            *rev = kvEntry_Revision(e);
            rc = 0;
        }
    }
    kvEntry_Destroy(e);
    return rc;
}

static int kv_load(nd_hook_positions *p, const char *sub, uint64_t *seq)
{
    kv_positions *k = kv_of(p);
    kv_key *kk = key_of(k, sub);
    if (!kk)
        return -ENOSPC;
    uint64_t rev = 0;
    int rc = read_key(k, sub, seq, &rev);
    kk->rev = rc == 0 ? rev : 0;
    kk->absent = rc == -ENOENT;
    return rc;
}

/* Saves with a compare-and-set on the revision this node last read or
 * wrote, so that a node deposed without knowing it (stopped past its lease)
 * cannot write over the holder's position: a mismatch writes nothing,
 * forgets the revision (the next save is -ESTALE too, until a load) and
 * makes the next lead call ask the lease again. */
static int kv_save(nd_hook_positions *p, const char *sub, uint64_t seq)
{
    kv_positions *k = kv_of(p);
    kv_key *kk = key_of(k, sub);
    if (!kk)
        return -ENOSPC;
    char key[ND_HOOK_NAME_MAX + 8], val[24];
    snprintf(key, sizeof(key), "pos.%s", sub);
    int n = snprintf(val, sizeof(val), "%" PRIu64, seq);
    uint64_t rev = 0;
    natsStatus s;
    if (kk->absent) { /* a new subscription's start */
        s = kvStore_Create(&rev, k->pos, key, val, n);
        if (s == NATS_OK || s == NATS_TIMEOUT) {
            kk->absent = s != NATS_OK;
            kk->rev = rev;
            return kv_errno(s);
        }
        /* Another node created it first: its start stands, this node loads
         * it before its first save (a new deliverer always loads). */
        kk->absent = false;
        kk->rev = 0;
        return 0;
    }
    if (!kk->rev)
        return -ESTALE;
    s = kvStore_Update(&rev, k->pos, key, val, n, kk->rev);
    if (s == NATS_OK) {
        kk->rev = rev;
        return 0;
    }
    if (s == NATS_TIMEOUT) /* perhaps written: then the next save mismatches */
        return -ETIMEDOUT;
    uint64_t now_seq = 0, now_rev = 0;
    int rc = read_key(k, sub, &now_seq, &now_rev);
    if (rc < 0 && rc != -ENOENT)
        return rc;
    if (rc == 0 && now_rev == kk->rev)
        return kv_errno(s); /* not a mismatch: tried again at the next flush */
    nd_log(ND_LOG_WARN,
           "replica %s: webhook %s's position was written by another node (now %s%" PRIu64
           ", revision %" PRIu64 "; this node had revision %" PRIu64 " and would write %" PRIu64
           "): not written, delivery stops until the lease is confirmed and it is loaded again",
           k->r->node, sub, rc == 0 ? "" : "deleted, was ", now_seq, now_rev, kk->rev, seq);
    kk->rev = 0;
    k->tried_ms = 0; /* the next lead call asks the lease at once */
    return -ESTALE;
}

/* 1 while the lease this node holds was last renewed recently enough. */
static int kv_held(nd_hook_positions *p)
{
    kv_positions *k = kv_of(p);
    return k->leading && lease_ms() - k->renewed_ms < LEASE_MS - MARGIN_MS;
}

/* Renews the lease this node holds, or tries to take it; a round trip at
 * most once per RENEW_MS, a clock read otherwise. A holder whose renewal
 * fails (another node holds it, or it expired) stands down for this round:
 * when it takes the lease again later, it is a new term (webhooks.c loads
 * the positions again), never the old one continued. */
static int kv_lead(nd_hook_positions *p)
{
    kv_positions *k = kv_of(p);
    int64_t now = lease_ms();
    if (k->tried_ms && now - k->tried_ms < RENEW_MS)
        return kv_held(p);
    k->tried_ms = now;
    const char *node = k->r->origin;
    uint64_t rev = 0;
    natsStatus s;
    bool renewing = k->lease_rev != 0;
    if (renewing)
        s = kvStore_Update(&rev, k->lease, LEASE_KEY, node, (int)strlen(node), k->lease_rev);
    else /* not holding: take it if free (none, or expired) */
        s = kvStore_Create(&rev, k->lease, LEASE_KEY, node, (int)strlen(node));
    int was = k->leading;
    k->leading = s == NATS_OK;
    if (k->leading)
        k->renewed_ms = now;
    /* A renewal that timed out may have been written: the revision is kept
     * for the next try (a mismatch then, if another node took it). */
    if (s != NATS_TIMEOUT || !renewing)
        k->lease_rev = k->leading ? rev : 0;
    if (was != k->leading)
        nd_log(ND_LOG_INFO, "replica %s: %s the webhook delivery lease", k->r->node,
               k->leading ? "took" : "does not hold");
    return kv_held(p);
}

static void kv_close(nd_hook_positions *p)
{
    kv_positions *k = kv_of(p);
    /* The lease is left to expire (LEASE_MS): a delete marker would make
     * the next node's create read it back, a path of libnats 3.4 that
     * leaks that message (LeakSanitizer, test_webhooks_replicas). */
    kvStore_Destroy(k->pos);
    kvStore_Destroy(k->lease);
    free(k);
}

static const nd_hook_positions_ops kv_ops = {
    .name = "jetstream",
    .load = kv_load,
    .save = kv_save,
    .lead = kv_lead,
    .held = kv_held,
    .close = kv_close,
};

/* Binds to bucket name, creating it (replicas, ttl_ms; 0: none) when it
 * does not exist. */
static natsStatus bucket(nd_replica *r, const char *name, int64_t ttl_ms, kvStore **out)
{
    natsStatus s = js_KeyValue(out, r->js, name);
    if (s != NATS_NOT_FOUND)
        return s;
    kvConfig cfg;
    kvConfig_Init(&cfg);
    cfg.Bucket = name;
    cfg.History = 1;
    cfg.TTL = ttl_ms * 1000000; /* libnats passes it as the stream's MaxAge: nanoseconds */
    cfg.Replicas = (int)r->stream_replicas;
    cfg.StorageType = js_FileStorage;
    return js_CreateKeyValue(out, r->js, &cfg);
}

int nd_replica_hook_positions(nd_replica *r, nd_hook_positions **out, char *err, size_t cap)
{
    kv_positions *k = calloc(1, sizeof(*k));
    if (!k)
        return -ENOMEM;
    k->head.ops = &kv_ops;
    k->r = r;
    char pos_name[BUCKET_MAX], lease_name[BUCKET_MAX];
    snprintf(pos_name, sizeof(pos_name), "%s_hooks", r->stream);
    snprintf(lease_name, sizeof(lease_name), "%s_hooks_lease", r->stream);
    natsStatus s = bucket(r, pos_name, 0, &k->pos);
    if (s == NATS_OK)
        s = bucket(r, lease_name, LEASE_MS, &k->lease);
    if (s != NATS_OK) {
        snprintf(err, cap, "cannot open the JetStream buckets %s and %s: %s (%s)", pos_name,
                 lease_name, natsStatus_GetText(s), nats_GetLastError(NULL));
        kvStore_Destroy(k->pos);
        kvStore_Destroy(k->lease);
        free(k);
        return kv_errno(s);
    }
    *out = &k->head;
    return 0;
}
