/* replica_metrics.h - the replica's collector for GET /metrics. */
#ifndef ND_REPLICA_METRICS_H
#define ND_REPLICA_METRICS_H

struct evbuffer;

/* An nd_metrics_collect_fn: appends the neardup_replica_* metrics of
 * replica (an nd_replica: stream sequences and lag, connection, published,
 * applied, conflicts) to out. Returns 0 or -ENOMEM. Any thread. */
int nd_replica_metrics_collect(void *replica, struct evbuffer *out);

#endif
