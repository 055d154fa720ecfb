/* api.h - the HTTP API of neardupd as the server sees it: the route table
 * (routes.c: path, methods, auth level, metric label, handler) and the
 * workers' scratch. The handlers live by resource: probes.c (/healthz,
 * /readyz, /metrics, /replica), fingerprint.c, check.c (/check-original),
 * documents.c (/documents/{id} and its policy, revoke, restore, copies),
 * audit.c (/audit), backfill.c (/import); a request that waits goes
 * through pending.c. The contract is proto/openapi.yaml.
 *
 * Handlers run on the worker threads of http.c; the state they share lives in
 * one nd_api, filled by neardupd.c before the workers start and read-only
 * afterwards except for the atomic start-up progress fields. The documents
 * are reached only through the corpus (server/corpus/corpus.h), picked once
 * per request by nd_api_corpus() (answer.h). */
#ifndef ND_API_H
#define ND_API_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "auth.h"
#include "config.h"
#include "fingerprint.h"
#include "http.h"
#include "corpus.h"
#include "metrics.h"
#include "sketch.h"

typedef struct nd_api {
    const nd_config *cfg;         /* borrowed */
    nd_fingerprinter *fp;         /* borrowed; shared by all workers */
    const nd_sketcher *sk;        /* borrowed; shared by all workers */
    nd_corpus *corpus;            /* borrowed: the documents (corpus.h); a request
                                   * reaches it through nd_api_corpus() */
    nd_metrics *metrics;          /* borrowed */
    nd_http *http;                /* borrowed; set before nd_http_start() */
    const nd_auth *auth;          /* borrowed; NULL: no token, nothing guarded */
    struct nd_backfill *backfill; /* borrowed: POST /import's one slot (backfill.h) */
    struct nd_webhooks *webhooks; /* borrowed; NULL: no subscriptions (webhooks.h) */
    int64_t start_ns;             /* CLOCK_MONOTONIC at start */
    _Atomic uint64_t load_done, load_total;
    _Atomic bool load_failed; /* the store could not be read: never ready */
} nd_api;

/* The route table (ends with a NULL path), for nd_http_hooks.routes. */
extern const nd_route_def nd_api_routes[];

/* Writes the endpoints (nd_api_endpoints, routes.c) for --help: a heading,
 * then "  METHOD PATH  who may call it" a line. */
void nd_api_usage(FILE *out);

/* nd_http_hooks.admit: asks for what the route's auth level needs (routes.h).
 * Returns true to run the handler, false once answered 401 or 403. */
bool nd_api_admit(nd_req *r);

/* nd_http_hooks.worker_init: creates a worker's scratch (fingerprint scratch,
 * match arrays, reply buffer). app is the nd_api. Returns 0 or -ENOMEM. */
int nd_api_worker_init(void *app, unsigned index, void **user);

/* nd_http_hooks.worker_finish: frees what nd_api_worker_init() made. */
void nd_api_worker_finish(void *app, void *user);

/* True when /readyz answers 200; otherwise *why (static) names the reason:
 * "loading", "load_failed", "draining", "storage_unavailable", or a
 * replica's "replication_unavailable", "replica_behind", "replica_failed". */
bool nd_api_ready(const nd_api *api, const char **why);

#endif
