/* webhooks.h - signed webhook delivery: every subscription of the
 * configuration (hook_config.h) is sent the events of a journal, one POST
 * per event, in sequence order, at least once.
 *
 * One thread of its own runs an event_base that drives libcurl's multi
 * interface (curl_multi_socket_action with CURLMOPT_SOCKETFUNCTION and
 * CURLMOPT_TIMERFUNCTION on libevent events, as libcurl's hiperfifo
 * example), so a slow or dead receiver never holds a worker or the store.
 *
 * Per subscription: one event in flight; a 2xx answer delivers it (the
 * position advances; the status decides: the body is read up to 4 KiB,
 * then the transfer is ended, and a 2xx whose body is longer, times out or
 * breaks off still delivers); anything else (a status, a refused
 * connection, the timeout) is retried after an exponential backoff with full jitter
 * (uniform in [0, min(cap, base * 2^(attempt-1))]), or after the answer's
 * Retry-After (seconds or an HTTP date) when that is later; failing for
 * pause_after_s pauses the subscription (logged) until
 * nd_webhooks_resume(). Events its filters do not want are skipped. The
 * position is saved through an nd_hook_positions (hook_position.h), within
 * ~50 ms of a delivery and at stop: after a crash the events since the
 * last save are sent again, with the same Neardup-Event-Id.
 *
 * With positions that elect a deliverer (a lead op: a cluster's lease),
 * the lead is asked before every send and save, not cached, and checked
 * again without I/O (the held op) right before libcurl writes a request; a
 * save refused as -ESTALE, or a lead lost and taken again, starts a new
 * term: every subscription loads its position again before it sends.
 *
 * Each POST: the event's JSON as the body; Content-Type: application/json,
 * Neardup-Event-Id: <the event's id>, Neardup-Signature: t=..,v1=..
 * (hook_sign.h), signed again at each attempt. */
#ifndef ND_WEBHOOKS_H
#define ND_WEBHOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hook_config.h"
#include "hook_position.h"

struct evbuffer;

/* One event as the journal hands it to a visit: pointers valid only
 * during the call. */
typedef struct nd_hook_event {
    uint64_t seq;     /* increasing, never reused */
    const char *type; /* NUL-terminated: "copy.detected", ... */
    const char *json; /* the whole event object, compact, json_len bytes */
    size_t json_len;
    const char *account; /* the account it concerns, account_len bytes; NULL, 0: none */
    size_t account_len;
} nd_hook_event;

/* Where the events come from (the store's events journal). Both calls are
 * made on the delivery thread. */
typedef struct nd_hook_source {
    /* Calls visit for the events after seq after, ascending, at most limit;
     * visit returns non-zero to stop. Returns 0 or -errno. */
    int (*after)(void *src, uint64_t after, size_t limit,
                 int (*visit)(void *arg, const nd_hook_event *ev), void *arg);
    /* The greatest sequence written (0: none). */
    uint64_t (*latest)(void *src);
    /* Optional (NULL: none): the events after seq are still wanted (the
     * lowest position of the subscriptions, kept): retention keeps them. */
    void (*hold)(void *src, uint64_t seq);
    void *src;
} nd_hook_source;

/* What GET /webhooks shows of one subscription (a copy). */
typedef struct nd_hook_status {
    char name[ND_HOOK_NAME_MAX + 1];
    const char *url;                     /* borrowed from the configuration */
    const char *state;                   /* static: "starting", "idle", "delivering", "retrying",
                        * "paused", "resuming", "failed" (its position unreadable) */
    uint64_t position;                   /* the last event delivered or skipped */
    uint64_t latest;                     /* the journal's latest event, as last seen */
    uint64_t delivered, failed, retried; /* since start: deliveries, failed
                                          * attempts, retries scheduled */
    uint64_t inflight;                   /* the sequence of the event being delivered (0: none) */
    unsigned attempts;                   /* failed attempts of that event */
    int last_status;                     /* HTTP status of the last failed attempt; 0: none
                              * or no answer (last_error says) */
    char last_error[256];                /* "" when none since the last delivery */
    int64_t last_error_at_us, failing_since_us, next_attempt_us, last_delivered_at_us;
    /* UTC microseconds; 0: none */
} nd_hook_status;

typedef struct nd_webhooks nd_webhooks;

/* Creates the delivery of cfg's subscriptions (cfg is stolen, freed by
 * nd_webhooks_destroy(); on error too) from src (copied; src->src is
 * borrowed and must outlive the delivery thread) keeping positions in pos
 * (stolen). Calls curl_global_init(): call it before any other thread uses
 * libcurl. Returns 0 and a new object, or -errno with a reason in err. */
int nd_webhooks_create(nd_webhooks **out, nd_hook_config *cfg, const nd_hook_source *src,
                       nd_hook_positions *pos, char *err, size_t cap);

/* Loads each subscription's position (on the calling thread: the source
 * holds the events after the lowest from then on), then starts the
 * delivery thread. Needs evthread_use_pthreads() called before
 * nd_webhooks_create(). Returns 0 or -errno (the thread: a subscription
 * whose position cannot be read is "failed", not an error here). */
int nd_webhooks_start(nd_webhooks *wh);

/* Tells the delivery thread that events were committed (it also looks
 * every 100 ms). Any thread; does not block or allocate. NULL is allowed. */
void nd_webhooks_wake(nd_webhooks *wh);

/* Asks the delivery thread to retry subscription name (len bytes) now if
 * it is paused or waiting for a retry (its failure time restarts). Any
 * thread. Fills *st (if not NULL) with its status as it is. Returns 0, or
 * -ENOENT (no such subscription). */
int nd_webhooks_resume(nd_webhooks *wh, const char *name, size_t len, nd_hook_status *st);

/* Number of subscriptions. */
size_t nd_webhooks_count(const nd_webhooks *wh);

/* Copies subscription i's status (i < nd_webhooks_count()). Any thread. */
void nd_webhooks_status(nd_webhooks *wh, size_t i, nd_hook_status *st);

/* A metrics collector (metrics.h): neardup_webhook_delivered_total,
 * _failed_total, _retried_total, neardup_webhook_lag_events and
 * neardup_webhook_paused, by subscription. Returns 0 or -ENOMEM. */
int nd_webhooks_metrics_collect(void *wh, struct evbuffer *out);

/* Stops the delivery thread: the positions reached are saved, an attempt
 * in flight is abandoned (sent again at the next start). NULL is allowed;
 * safe to call twice. */
void nd_webhooks_stop(nd_webhooks *wh);

/* Stops (if running) and frees; NULL is allowed. */
void nd_webhooks_destroy(nd_webhooks *wh);

#endif
