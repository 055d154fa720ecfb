/* store_metrics.h - the store's collector for GET /metrics. */
#ifndef ND_STORE_METRICS_H
#define ND_STORE_METRICS_H

struct evbuffer;

/* An nd_metrics_collect_fn: appends the store's metrics (neardup_store_*:
 * commits, changes, reopens, queued and batch gauges, the commit-duration
 * histogram) to out when store (an nd_store) is durable, nothing for the
 * memory store. Returns 0 or -ENOMEM. Any thread; does not lock the
 * store's writer. */
int nd_store_metrics_collect(void *store, struct evbuffer *out);

#endif
