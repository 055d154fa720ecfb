/* corpus_local.h - the corpus of one node (corpus.h's implementation
 * "local"): the registry over the store (LMDB in the data directory, or
 * memory with --in-memory), the replica in front of the store (--nats),
 * the store's events feed and webhook delivery reading it (--webhooks).
 * What neardupd.c composed before; the daemon now opens, loads, starts and
 * closes it through the calls below and hands the API its nd_corpus.
 *
 * Start-up: nd_corpus_local_open() -> nd_corpus_local_start() (webhook
 * thread) -> nd_corpus_local_load() (the loader thread, or inline for
 * memory) -> nd_corpus_local_log_ready(). Shutdown, interleaved with the
 * HTTP server's (neardupd.c's teardown()): nd_corpus_local_shutdown() (no
 * new change) -> nd_corpus_local_close() (delivery stopped, store
 * committed and closed) -> nd_corpus_local_destroy(). */
#ifndef ND_CORPUS_LOCAL_H
#define ND_CORPUS_LOCAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "corpus.h"
#include "hook_config.h"
#include "metrics.h"
#include "registry.h"
#include "store.h"
#include "webhooks.h"

/* Opens the corpus of cfg (borrowed; outlives the corpus): the store, the
 * replica when cfg->nats is set, the registry over them (not loaded yet),
 * webhook delivery of hooks (stolen, freed on failure too; NULL: none, no
 * thread), and registers the store's, the replica's and the webhooks'
 * figures with metrics (in that order). Logs what fails. Returns 0 and a
 * new corpus (nd_corpus_local_destroy()), or -errno with *out NULL and
 * everything opened closed again. */
int nd_corpus_local_open(nd_corpus **out, const nd_config *cfg, nd_hook_config *hooks,
                         nd_metrics *metrics);

/* A corpus over a registry and a store the caller made and keeps (both
 * borrowed; no replica, no webhooks): the in-process tests. Returns 0 and a
 * new corpus (nd_corpus_local_destroy() frees only the corpus), or
 * -ENOMEM. */
int nd_corpus_local_wrap(nd_corpus **out, nd_registry *reg, nd_store *store);

/* True when the documents must be read back from the store at start (a
 * durable store): run nd_corpus_local_load() on a thread of its own. */
bool nd_corpus_local_needs_load(const nd_corpus *c);

/* Records the store holds (a hint for the load's progress; -errno). */
int64_t nd_corpus_local_count(nd_corpus *c);

/* Loads the documents (nd_registry_load(): progress every progress_ms,
 * stops when *stop) or, for memory, marks them loaded; then starts the
 * replica, which tails the stream from there. Returns 0, -ECANCELED, or a
 * load's or the replica's -errno (nd_corpus_local_load_error()). */
int nd_corpus_local_load(nd_corpus *c, nd_registry_progress_fn progress, void *arg,
                         unsigned progress_ms, const atomic_bool *stop);

/* What a failed nd_corpus_local_load() met, for a log line (static). */
const char *nd_corpus_local_load_error(int rc);

/* Logs "ready" with the counts (start_ns: CLOCK_MONOTONIC at start), and
 * what the load skipped (repeated ids, other fingerprint versions). */
void nd_corpus_local_log_ready(nd_corpus *c, int64_t start_ns);

/* The webhook delivery (borrowed; NULL: no subscriptions). */
nd_webhooks *nd_corpus_local_webhooks(nd_corpus *c);

/* Starts webhook delivery's thread (none: 0). Logs a failure; -errno. */
int nd_corpus_local_start(nd_corpus *c);

/* From now on changes are refused with -ESHUTDOWN without touching the
 * store (nd_registry_shutdown()); queued ones still complete. NULL is
 * allowed. */
void nd_corpus_local_shutdown(nd_corpus *c);

/* Stops webhook delivery, then commits the store's queue and closes it
 * (each queued change's done runs). NULL is allowed. */
void nd_corpus_local_close(nd_corpus *c);

/* Frees the registry, webhook delivery and the corpus (after
 * nd_corpus_local_close()). NULL is allowed. */
void nd_corpus_local_destroy(nd_corpus *c);

#endif
