/* replica.h - a node of a replicated neardup: the registry's
 * store, in front of the local store, with every change going through one
 * NATS JetStream stream.
 *
 * Owns the NATS connection, five threads (publisher, applier, prober,
 * completer, syncer) and the local store it was given (LMDB, or the memory
 * store), which it closes.
 *
 * How a change travels. The registry decides a change under its writer
 * (store.h's interface: nd_store_put() etc. on nd_replica_store()). A local
 * change (nd_record.stream_seq 0) is not written here: it is encoded and
 * queued for the publisher, with the stream sequence the decision was
 * based on (the last entry applied here). The publisher publishes one at a
 * time, expecting the stream's last sequence to be the last one this node
 * knows (applied, or its own last entry): JetStream refuses the entry when
 * another node wrote in between, and so does the publisher itself when an
 * entry of another node was seen after the decision's base. A refused
 * change ends with -ESTALE (the registry undoes it; the API asks again on
 * the newer state). An accepted one waits for the applier, which reads
 * every entry of the stream in order: its own entries are written to the
 * local store with their sequence (then the registry's done callback
 * runs: the client is answered after the quorum's acknowledgement and the
 * local commit); the others are applied through nd_registry_apply(). The
 * local store keeps the last applied sequence in the same transaction as
 * the records, so a restart resumes from there.
 *
 * Of two near-duplicates registered at once on two nodes exactly one is
 * original: both decisions were based on the same sequence, and only one
 * entry can follow it.
 *
 * Journal writes (nd_store_event_put(): detections, an import's audit
 * entry) travel the same way, unfenced: decided on no state, an entry
 * refused for the stream's end is published again, never refused to its
 * caller; so every node holds the same journals and event feed. Reads
 * (scan, get, sketches, count, events, the feed) are the local store's. */
#ifndef ND_REPLICA_H
#define ND_REPLICA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "registry.h"
#include "store.h"

typedef struct nd_replica nd_replica;

typedef struct nd_replica_options {
    const char *servers;      /* comma-separated NATS URLs (required) */
    const char *stream;       /* stream name; its subject is "<stream>.changes" */
    unsigned stream_replicas; /* replicas when this node creates the stream */
    const char *node_name;    /* shown in logs and GET /replica */
    uint64_t max_lag;         /* entries behind beyond which it is not ready */
    unsigned timeout_ms;      /* wait for a JetStream answer */
    /* What the logs show of servers (its credentials redacted:
     * nd_config_redact_urls()); NULL: servers itself. */
    const char *servers_shown;
    /* Authentication to NATS, all borrowed for the call (libnats keeps its
     * own copies); NULL: not used. At most one of user (with password),
     * token, creds_file. */
    const char *user, *password;
    const char *token;
    const char *creds_file; /* user JWT and nkey seed */
    const char *tls_ca;     /* CA certificates, PEM: TLS on, servers verified */
    const char *tls_cert;   /* client certificate chain, PEM (with tls_key) */
    const char *tls_key;
} nd_replica_options;

/* Connects to NATS, finds or creates the stream and checks that this
 * store's last applied sequence is still in it. local is taken over (closed
 * by nd_store_close() of the replica's store, also on failure here).
 * Returns 0 and a new replica, or -errno with a reason in err: -EINVAL
 * (options), -ECONNREFUSED (no NATS server answered), -EACCES (NATS
 * refused this node's credentials, or a TLS file cannot be used), -ETIMEDOUT
 * (JetStream did not answer), -ERANGE (the stream no longer holds the
 * entries after this store's sequence: restore a newer backup), -ENOMEM. */
int nd_replica_open(nd_replica **out, nd_store *local, const nd_replica_options *opts, char *err,
                    size_t errlen);

/* The store the registry and the API use (store.h's interface). Close it
 * with nd_store_close(), which stops the threads, closes NATS and the
 * local store, and frees the replica. */
nd_store *nd_replica_store(nd_replica *r);

/* Starts the publisher and the applier once the registry has loaded the
 * local store (the applier tails the stream from the local store's
 * sequence + 1). Returns 0 or -errno. Changes queued before it wait. */
int nd_replica_start(nd_replica *r, nd_registry *reg);

/* True when this node may take writes and serve reads: NATS answered the
 * last probe, it is at most max_lag entries behind, and applying did not
 * fail. Otherwise *why (when not NULL) is "replication_unavailable",
 * "replica_behind" or "replica_failed". Any thread. */
bool nd_replica_ready(const nd_replica *r, const char **why);

/* A read at the stream's latest state (consistency "latest"): one stream
 * probe (shared by the reads that arrive meanwhile) finds the stream's last
 * entry; done(arg, status) runs, on the replica's thread, once this node
 * has applied it and completed (committed) every other node's change up to
 * it (status 0: the local state now holds every change acknowledged
 * anywhere before the call), or with -ENOTCONN (the stream
 * did not answer, or the replica failed), -ETIMEDOUT (not applied within
 * --nats-timeout-ms) or -ESHUTDOWN. Returns 0 (done will run), or -ENOTCONN
 * (not connected: done is not called), -ESHUTDOWN, -ENOMEM. Any thread. */
int nd_replica_sync(nd_replica *r, nd_store_done_fn done, void *arg);

typedef struct nd_replica_stats {
    const char *node;     /* borrowed */
    const char *stream;   /* borrowed */
    uint64_t applied_seq; /* last entry applied here (in memory) */
    uint64_t stream_seq;  /* last entry of the stream known here */
    uint64_t stored_seq;  /* entry of the last change committed to the local
                           * store (a restart reads from there) */
    uint64_t lag;         /* stream_seq - applied_seq */
    double lag_seconds;   /* publication to application of the last entry
                           * applied here (the replication delay) */
    bool connected;       /* the NATS connection is up */
    bool writable;        /* the last probe of the stream was answered */
    bool failed;          /* applying an entry failed: restart the node */
    uint64_t published;   /* changes this node published */
    uint64_t entries;     /* stream entries they took (several changes each
                           * under load: one publish round trip for all) */
    uint64_t gap_fills;   /* entries read directly: the subscription lagged */
    uint64_t applied;     /* entries applied (own and others') */
    uint64_t conflicts;   /* local changes refused: another node wrote first */
    uint64_t unavailable; /* local changes refused: NATS did not answer */
} nd_replica_stats;

/* Fills *out. Does not allocate. Any thread. */
void nd_replica_stats_get(const nd_replica *r, nd_replica_stats *out);

#endif
