/* store_metrics.c - the store's figures for GET /metrics: its commits,
 * changes, reopens, queue and commit-latency histogram (a durable store
 * only). A collector registered with nd_metrics_register(). */
#include "store_metrics.h"
#include "metrics.h"
#include "store.h"

#include <errno.h>

#include <event2/buffer.h>

int nd_store_metrics_collect(void *store, struct evbuffer *out)
{
    nd_store *s = store;
    if (!nd_store_durable(s)) /* the memory store: none */
        return 0;
    nd_store_stats sst;
    nd_store_get_stats(s, &sst);
    const nd_store_stats *st = &sst;
    int rc = 0;
    rc |= evbuffer_add_printf(out,
                              "# HELP neardup_store_commits_total Write transactions of the "
                              "store, by result.\n"
                              "# TYPE neardup_store_commits_total counter\n"
                              "neardup_store_commits_total{result=\"ok\"} %llu\n"
                              "neardup_store_commits_total{result=\"failed\"} %llu\n",
                              (unsigned long long)st->commits,
                              (unsigned long long)st->failed_commits) < 0;
    rc |= nd_metrics_counter(out, "neardup_store_changes_total",
                             "Registrations and deletions committed durably.", st->changes);
    rc |= nd_metrics_counter(out, "neardup_store_failed_changes_total",
                             "Changes the store refused (storage full, I/O error).",
                             st->failed_changes);
    rc |= nd_metrics_counter(out, "neardup_store_reopens_total",
                             "Times the store reopened its environment after a fatal error.",
                             st->reopens);
    rc |= nd_metrics_gauge(out, "neardup_store_queued_changes",
                           "Changes waiting for the commit thread.", (double)st->queued);
    rc |= nd_metrics_gauge(out, "neardup_store_max_batch_changes",
                           "Most changes committed in one transaction since start.",
                           (double)st->max_batch);
    rc |= evbuffer_add_printf(out, "# HELP neardup_store_commit_duration_seconds Time of a "
                                   "committed write transaction, fsync included.\n"
                                   "# TYPE neardup_store_commit_duration_seconds histogram\n") < 0;
    uint64_t run = 0;
    for (unsigned b = 0; b < ND_STORE_COMMIT_BUCKETS; b++) {
        run += st->commit_buckets[b];
        rc |= evbuffer_add_printf(out,
                                  "neardup_store_commit_duration_seconds_bucket{le=\"%g\"} "
                                  "%llu\n",
                                  (double)nd_store_commit_bucket_us[b] / 1e6,
                                  (unsigned long long)run) < 0;
    }
    run += st->commit_buckets[ND_STORE_COMMIT_BUCKETS];
    rc |= evbuffer_add_printf(out,
                              "neardup_store_commit_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
                              "neardup_store_commit_duration_seconds_sum %.6f\n"
                              "neardup_store_commit_duration_seconds_count %llu\n",
                              (unsigned long long)run, (double)st->commit_us_sum / 1e6,
                              (unsigned long long)run) < 0;
    return rc ? -ENOMEM : 0;
}
