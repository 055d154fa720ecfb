/* replica_metrics.c - a replicated node's figures for GET /metrics: its
 * place in the stream, the connection, what it published and applied. A
 * collector registered with nd_metrics_register() when the node has a
 * replica. */
#include "replica_metrics.h"
#include "metrics.h"
#include "replica.h"

#include <errno.h>

#include <event2/buffer.h>

int nd_replica_metrics_collect(void *replica, struct evbuffer *out)
{
    nd_replica_stats rs;
    nd_replica_stats_get(replica, &rs);
    const nd_replica_stats *r = &rs;
    int rc = 0;
    rc |= nd_metrics_gauge(out, "neardup_replica_applied_seq",
                           "Last stream entry applied on this node.", (double)r->applied_seq);
    rc |= nd_metrics_gauge(out, "neardup_replica_stream_seq",
                           "Last stream entry known on this node.", (double)r->stream_seq);
    rc |= nd_metrics_gauge(out, "neardup_replica_lag",
                           "Stream entries not yet applied on this node.", (double)r->lag);
    rc |= nd_metrics_gauge(out, "neardup_replica_lag_seconds",
                           "Seconds from publication to application of the last entry applied.",
                           r->lag_seconds);
    rc |= nd_metrics_gauge(out, "neardup_replica_connected", "1 while the NATS connection is up.",
                           r->connected);
    rc |= nd_metrics_gauge(out, "neardup_replica_writable",
                           "1 while the stream answers (writes taken).", r->writable);
    rc |= nd_metrics_counter(out, "neardup_replica_published_total", "Changes this node published.",
                             r->published);
    rc |= nd_metrics_counter(out, "neardup_replica_entries_total",
                             "Stream entries this node published (each holds one or more changes).",
                             r->entries);
    rc |= nd_metrics_counter(
        out, "neardup_replica_gap_fills_total",
        "Entries read directly from the stream because the subscription lagged.", r->gap_fills);
    rc |= nd_metrics_counter(out, "neardup_replica_applied_total", "Entries applied on this node.",
                             r->applied);
    rc |= nd_metrics_counter(
        out, "neardup_replica_conflicts_total",
        "Local changes refused because another node wrote first (asked again).", r->conflicts);
    rc |= nd_metrics_counter(out, "neardup_replica_unavailable_total",
                             "Local changes refused because the stream did not answer.",
                             r->unavailable);
    return rc ? -ENOMEM : 0;
}
