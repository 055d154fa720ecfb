/* replica_hooks.c - webhook positions and the deliverer's lease in
 * JetStream key-value buckets (replica_hooks.h). */
#include "replica_hooks.h"
#include "hook_config.h"
#include "replica_internal.h"

#include <inttypes.h>

#define LEASE_MS 5000 /* a lease not renewed for this long expires */
#define RENEW_MS 1000 /* the holder renews (and the others try) this often */
#define LEASE_KEY "deliverer"
#define BUCKET_MAX 128

typedef struct kv_positions {
    nd_hook_positions head; /* first: the interface */
    nd_replica *r;
    kvStore *pos, *lease;
    uint64_t lease_rev; /* the revision this node wrote (0: not holding) */
    int64_t tried_ms;   /* the last lease round trip */
    int leading;
} kv_positions;

static kv_positions *kv_of(nd_hook_positions *p)
{
    return (kv_positions *)(void *)p;
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

static int kv_load(nd_hook_positions *p, const char *sub, uint64_t *seq)
{
    char key[ND_HOOK_NAME_MAX + 8];
    snprintf(key, sizeof(key), "pos.%s", sub);
    kvEntry *e = NULL;
    natsStatus s = kvStore_Get(&e, kv_of(p)->pos, key);
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
            rc = 0;
        }
    }
    kvEntry_Destroy(e);
    return rc;
}

static int kv_save(nd_hook_positions *p, const char *sub, uint64_t seq)
{
    char key[ND_HOOK_NAME_MAX + 8], val[24];
    snprintf(key, sizeof(key), "pos.%s", sub);
    int n = snprintf(val, sizeof(val), "%" PRIu64, seq);
    uint64_t rev = 0;
    return kv_errno(kvStore_Put(&rev, kv_of(p)->pos, key, val, n));
}

/* Renews the lease this node holds, or tries to take it; at most once per
 * RENEW_MS. */
static int kv_lead(nd_hook_positions *p)
{
    kv_positions *k = kv_of(p);
    int64_t now = nd_clock_ms();
    if (k->tried_ms && now - k->tried_ms < RENEW_MS)
        return k->leading;
    k->tried_ms = now;
    const char *node = k->r->origin;
    uint64_t rev = 0;
    natsStatus s = NATS_ERR;
    if (k->lease_rev)
        s = kvStore_Update(&rev, k->lease, LEASE_KEY, node, (int)strlen(node), k->lease_rev);
    if (s != NATS_OK) /* not holding, lost it, or it expired: take it if free */
        s = kvStore_Create(&rev, k->lease, LEASE_KEY, node, (int)strlen(node));
    int was = k->leading;
    k->leading = s == NATS_OK;
    k->lease_rev = k->leading ? rev : 0;
    if (was != k->leading)
        nd_log(ND_LOG_INFO, "replica %s: %s the webhook delivery lease", k->r->node,
               k->leading ? "took" : "does not hold");
    return k->leading;
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
