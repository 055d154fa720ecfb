/* neardupd.c - the neardup server: defaults -> flags/env -> init -> loop ->
 * shutdown. Everything else lives in the modules (config, log, metrics,
 * http, api; corpus/ composes the registry, the store, the replica and
 * webhook delivery; lib/ for fingerprints and the index).
 *
 * Threads: the main thread runs a small event loop for signals, start-up and
 * the drain timer; N worker threads serve HTTP (http.c); one loader thread
 * rebuilds the index from the store at start while the workers already
 * answer probes (/readyz is 503 until it is done); the store has its commit
 * thread. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "api.h"
#include "auth.h"
#include "backfill.h"
#include "clock.h"
#include "config.h"
#include "corpus_local.h"
#include "fingerprint.h"
#include "hook_config.h"
#include "http.h"
#include "log.h"
#include "metrics.h"

#define DRAIN_POLL_MS 20
#define PROGRESS_MS 1000

/* Read by jemalloc (meson's default allocator; another allocator ignores
 * it, and MALLOC_CONF in the environment still overrides it) when the
 * process starts. Freed memory is reused before fresh pages are touched:
 * jemalloc's default (lg_extent_max_active_fit:6) reuses a freed range
 * only for a request at least 1/64 of its size, and freed answers
 * coalesce into ranges of megabytes that libevent's 8-16 KiB buffer
 * chains then skipped, touching new pages instead. 200 clients that never
 * read their 1.6 MB answers (test_unread) raised the peak RSS by 96-171 MB
 * with it, by 39-49 MB with 1/1024 (ranges up to 16 MiB serve a 16 KiB
 * chain), while the live memory never passed 58 MB. */
const char *malloc_conf = "lg_extent_max_active_fit:10";

typedef struct daemon {
    nd_config cfg;
    nd_api api;
    nd_fingerprinter *fp;
    nd_sketcher *sk; /* one for every worker: immutable, and ~45 ms to build */
    nd_metrics *metrics;
    nd_corpus *corpus; /* the documents: registry, store, replica, webhooks (corpus_local.h) */
    nd_http *http;
    nd_auth *auth;
    nd_backfill *backfill;     /* POST /import's one slot */
    nd_hook_config *hooks_cfg; /* read at start (--webhooks); the corpus's once opened */
    struct event_base *base;
    struct event *sigterm, *sigint, *drain_timer, *loaded_ev, *delay_timer;
    pthread_t loader;
    bool loader_running;
    atomic_bool stop_loading;
    int load_rc;
    int64_t drain_deadline_ns;
    int exit_code;
    bool draining;
} daemon_t;

/* ---- start-up loading (loader thread) ---- */

static void load_progress(void *arg, uint64_t loaded, uint64_t total, uint64_t stale)
{
    daemon_t *d = arg;
    atomic_store(&d->api.load_done, loaded);
    double secs = (double)(nd_clock_ns() - d->api.start_ns) / 1e9;
    char fields[200];
    snprintf(fields, sizeof(fields), ",\"loaded\":%llu,\"total\":%llu,\"stale\":%llu,\"rate\":%.0f",
             (unsigned long long)loaded, (unsigned long long)total, (unsigned long long)stale,
             secs > 0 ? (double)loaded / secs : 0.0);
    nd_log_fields(ND_LOG_INFO, fields, "loading documents");
}

static void *loader_main(void *arg)
{
    daemon_t *d = arg;
    pthread_setname_np(pthread_self(), "nd-load");
    int64_t total = nd_corpus_local_count(d->corpus);
    atomic_store(&d->api.load_total, total > 0 ? (uint64_t)total : 0);
    load_progress(d, 0, total > 0 ? (uint64_t)total : 0, 0); /* a first line at once */
    d->load_rc =
        nd_corpus_local_load(d->corpus, load_progress, d, PROGRESS_MS, &d->stop_loading);
    if (d->load_rc == 0) /* here, not on the main loop: as soon as /readyz says 200 */
        nd_corpus_local_log_ready(d->corpus, d->api.start_ns);
    event_active(d->loaded_ev, EV_READ, 0);
    return NULL;
}

static void begin_shutdown(daemon_t *d, const char *why, bool delay);

static void loaded_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    daemon_t *d = arg;
    if (d->load_rc == -ECANCELED || d->load_rc >= 0)
        return;
    atomic_store(&d->api.load_failed, true);
    nd_log(ND_LOG_ERROR, "cannot load the store in %s: %s", d->cfg.data_dir,
           nd_corpus_local_load_error(d->load_rc));
    d->exit_code = 1;
    begin_shutdown(d, "load failed", false);
}

/* ---- shutdown (main loop) ---- */

static void drain_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    daemon_t *d = arg;
    uint64_t inflight = nd_http_inflight(d->http);
    if (inflight == 0) {
        event_base_loopbreak(d->base);
    } else if (nd_clock_ns() >= d->drain_deadline_ns) {
        nd_log(ND_LOG_WARN, "drain deadline of %u s passed with %llu requests in flight",
               d->cfg.drain_s, (unsigned long long)inflight);
        event_base_loopbreak(d->base);
    }
}

/* Closes the listeners and waits (drain_cb) for the requests in flight, at
 * most drain_s seconds. */
static void close_listeners(daemon_t *d)
{
    nd_http_stop_accepting(d->http);
    d->drain_deadline_ns = nd_clock_ns() + (int64_t)d->cfg.drain_s * 1000000000;
    struct timeval tv = {0, DRAIN_POLL_MS * 1000};
    event_add(d->drain_timer, &tv);
}

static void delay_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    daemon_t *d = arg;
    char fields[64];
    snprintf(fields, sizeof(fields), ",\"inflight\":%llu",
             (unsigned long long)nd_http_inflight(d->http));
    nd_log_fields(ND_LOG_INFO, fields, "drain delay over: listeners closing");
    close_listeners(d);
}

/* The drain: /readyz turns 503 at once; with a drain delay, new requests are
 * still served for drain_delay_s seconds (a load balancer's health check
 * sees the 503 and stops sending) before the listeners close; then the
 * requests in flight get drain_s seconds. delay is false when no load
 * balancer can be sending (start-up failed). */
static void begin_shutdown(daemon_t *d, const char *why, bool delay)
{
    if (d->draining)
        return;
    d->draining = true;
    unsigned delay_s = delay ? d->cfg.drain_delay_s : 0;
    char fields[160];
    snprintf(fields, sizeof(fields),
             ",\"reason\":\"%s\",\"inflight\":%llu,\"drain_delay\":%u,\"drain_timeout\":%u", why,
             (unsigned long long)nd_http_inflight(d->http), delay_s, d->cfg.drain_s);
    if (delay_s)
        nd_log_fields(ND_LOG_INFO, fields,
                      "draining (%s): not ready, still serving for %u s, then listeners close", why,
                      delay_s);
    else
        nd_log_fields(ND_LOG_INFO, fields,
                      "draining (%s): not ready, listeners closing, %llu requests in flight", why,
                      (unsigned long long)nd_http_inflight(d->http));
    /* From now on the default action: a second signal ends the process at once. */
    evsignal_del(d->sigterm);
    evsignal_del(d->sigint);
    atomic_store(&d->stop_loading, true);
    nd_http_drain(d->http);
    if (delay_s) {
        struct timeval tv = {(time_t)delay_s, 0};
        event_add(d->delay_timer, &tv);
    } else {
        close_listeners(d);
    }
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    daemon_t *d = arg;
    /* Still loading: /readyz never said 200, so no balancer is sending. */
    begin_shutdown(d, sig == SIGTERM ? "SIGTERM" : "SIGINT", nd_corpus_loaded(d->corpus));
}

/* ---- init / teardown ---- */

/* Overwrites, in argv itself, the secret of every userinfo of a --nats
 * value with '*': /proc/PID/cmdline, and so ps, no longer show it once the
 * configuration is read (the value was copied). */
static void mask_nats_argv(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--nats") == 0 && i + 1 < argc)
            nd_config_mask_urls(argv[++i]);
        else if (strncmp(argv[i], "--nats=", 7) == 0)
            nd_config_mask_urls(argv[i] + 7);
    }
}

/* Loads the bearer token (file or NEARDUP_TOKEN); logs what is guarded. */
static int load_auth(daemon_t *d)
{
    char err[512] = "";
    bool loose = false;
    int rc = nd_auth_create(&d->auth, d->cfg.token_file, getenv("NEARDUP_TOKEN"), &loose, err,
                            sizeof(err));
    if (rc < 0) {
        nd_log(ND_LOG_ERROR, "cannot load the bearer token: %s", err);
        return rc;
    }
    if (!d->auth && d->cfg.auth_all) {
        nd_log(ND_LOG_ERROR, "--auth-all needs a token (--token-file or NEARDUP_TOKEN)");
        return -EINVAL;
    }
    if (loose)
        nd_log(ND_LOG_WARN, "the token file %s is readable by other users", d->cfg.token_file);
    char fields[64];
    snprintf(fields, sizeof(fields), ",\"auth\":\"%s\"",
             !d->auth          ? "off"
             : d->cfg.auth_all ? "all"
                               : "writes");
    nd_log_fields(ND_LOG_INFO, fields, "%s",
                  !d->auth          ? "no bearer token: every endpoint is open"
                  : d->cfg.auth_all ? "bearer token required on every endpoint but the probes"
                                    : "bearer token required to register, delete and administer");
    return 0;
}

/* Raises the soft RLIMIT_NOFILE to the hard limit and keeps max_connections
 * below it (a listener out of descriptors spins on accept errors). */
static void raise_nofile(daemon_t *d)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    rlim_t was = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            rl.rlim_cur = was;
    }
    /* Reserve: listeners, store, logs, worker wake-ups, and the connections
     * a worker accepts before it sees the limit (one accept batch each). */
    rlim_t reserve = 256 + (rlim_t)d->cfg.threads * 16;
    rlim_t usable = rl.rlim_cur > reserve ? rl.rlim_cur - reserve : 1;
    char fields[160];
    snprintf(fields, sizeof(fields), ",\"nofile\":%llu,\"nofile_was\":%llu,\"nofile_max\":%llu",
             (unsigned long long)rl.rlim_cur, (unsigned long long)was,
             (unsigned long long)rl.rlim_max);
    nd_log_fields(ND_LOG_INFO, fields, "open file limit %llu", (unsigned long long)rl.rlim_cur);
    if (d->cfg.max_connections > usable) {
        nd_log(ND_LOG_WARN, "--max-connections %u lowered to %llu to fit the open file limit",
               d->cfg.max_connections, (unsigned long long)usable);
        d->cfg.max_connections = (unsigned)usable;
    }
}

static int init(daemon_t *d)
{
    int rc;
    raise_nofile(d);
    if ((rc = load_auth(d)) < 0)
        return rc;
    if ((rc = nd_fingerprinter_create(&d->fp)) < 0 || (rc = nd_sketcher_create(&d->sk)) < 0 ||
        (rc = nd_metrics_create(&d->metrics, d->cfg.threads)) < 0 ||
        (rc = nd_backfill_create(&d->backfill)) < 0) {
        nd_log(ND_LOG_ERROR, "cannot initialise: %s", strerror(-rc));
        return rc;
    }
    /* The store (and replica), the registry, webhook delivery, and their
     * figures on /metrics after the gauges. */
    nd_hook_config *subs = d->hooks_cfg;
    d->hooks_cfg = NULL; /* the corpus's now, or freed */
    if ((rc = nd_corpus_local_open(&d->corpus, &d->cfg, subs, d->metrics)) < 0)
        return rc;
    d->api = (nd_api){.cfg = &d->cfg,
                      .fp = d->fp,
                      .sk = d->sk,
                      .corpus = d->corpus,
                      .metrics = d->metrics,
                      .auth = d->auth,
                      .backfill = d->backfill,
                      .webhooks = nd_corpus_local_webhooks(d->corpus),
                      .start_ns = nd_clock_ns()};
    nd_http_hooks hooks = {.routes = nd_api_routes,
                           .admit = nd_api_admit,
                           .app = &d->api,
                           .worker_init = nd_api_worker_init,
                           .worker_finish = nd_api_worker_finish};
    if ((rc = nd_http_create(&d->http, &d->cfg, &hooks, d->metrics)) < 0) {
        nd_log(ND_LOG_ERROR, "cannot create the HTTP server: %s", strerror(-rc));
        return rc;
    }
    d->api.http = d->http;
    d->base = event_base_new();
    if (!d->base)
        return -ENOMEM;
    d->sigterm = evsignal_new(d->base, SIGTERM, signal_cb, d);
    d->sigint = evsignal_new(d->base, SIGINT, signal_cb, d);
    d->drain_timer = event_new(d->base, -1, EV_PERSIST, drain_cb, d);
    d->loaded_ev = event_new(d->base, -1, 0, loaded_cb, d);
    d->delay_timer = evtimer_new(d->base, delay_cb, d);
    if (!d->sigterm || !d->sigint || !d->drain_timer || !d->loaded_ev || !d->delay_timer ||
        evsignal_add(d->sigterm, NULL) < 0 || evsignal_add(d->sigint, NULL) < 0)
        return -ENOMEM;
    return 0;
}

/* Listens first, then loads, so that probes see "loading" meanwhile. */
static int start(daemon_t *d)
{
    int rc = nd_http_start(d->http);
    if (rc < 0)
        return rc;
    if ((rc = nd_corpus_local_start(d->corpus)) < 0)
        return rc;
    if (!nd_corpus_local_needs_load(d->corpus)) { /* the memory store: nothing to load */
        if ((rc = nd_corpus_local_load(d->corpus, NULL, NULL, 0, &d->stop_loading)) < 0)
            return rc;
        nd_corpus_local_log_ready(d->corpus, d->api.start_ns);
        return 0;
    }
    rc = pthread_create(&d->loader, NULL, loader_main, d);
    if (rc != 0) {
        nd_log(ND_LOG_ERROR, "cannot start the loader thread: %s", strerror(rc));
        return -rc;
    }
    d->loader_running = true;
    return 0;
}

#define SETTLE_MS 2000 /* after the store's close, for its last replies to be written */

/* The order keeps every object alive while anything can reach it
 * (the store was once freed while a request that waited
 * behind a change retried into it):
 * 1. new requests are refused (503 shutting_down) and no handler is
 *    running any more (nd_http_refuse()'s barrier), the worker loops still
 *    run: only replies of requests in flight are left;
 * 2. the registry refuses every new change without touching the store: a
 *    request that waited behind a change and retries now answers 503
 *    shutting_down; a running import (POST /import) stops and its thread
 *    has posted its answer;
 * 3. the loader has stopped, the store commits its queue and closes: each
 *    queued change's request gets its result, written by its running loop;
 * 4. the loops stop once those replies are written (at most SETTLE_MS),
 *    the tasks still queued run here (nd_http_finish(): nothing in them
 *    reaches the store), and everything is freed in reverse. */
static void teardown(daemon_t *d)
{
    if (d->http)
        nd_http_refuse(d->http);
    nd_corpus_local_shutdown(d->corpus);
    nd_backfill_stop(d->backfill);
    if (d->loader_running)
        pthread_join(d->loader, NULL);
    nd_corpus_local_close(d->corpus); /* webhook delivery, then the store */
    if (d->http) {
        nd_http_wait_idle(d->http, SETTLE_MS);
        nd_http_stop(d->http);
        uint64_t left = nd_http_finish(d->http);
        if (left)
            nd_log(ND_LOG_WARN, "%llu requests were never answered", (unsigned long long)left);
    }
    nd_http_destroy(d->http);
    nd_corpus_local_destroy(d->corpus);
    nd_metrics_destroy(d->metrics);
    nd_fingerprinter_destroy(d->fp);
    nd_sketcher_destroy(d->sk);
    nd_auth_destroy(d->auth);
    nd_backfill_destroy(d->backfill);
    nd_hook_config_destroy(d->hooks_cfg);
    if (d->sigterm)
        event_free(d->sigterm);
    if (d->sigint)
        event_free(d->sigint);
    if (d->drain_timer)
        event_free(d->drain_timer);
    if (d->loaded_ev)
        event_free(d->loaded_ev);
    if (d->delay_timer)
        event_free(d->delay_timer);
    if (d->base)
        event_base_free(d->base);
}

int main(int argc, char **argv)
{
    static daemon_t d;
    nd_config_defaults(&d.cfg);
    int rc = nd_config_parse(&d.cfg, argc, argv, stdout, stderr);
    if (rc == ND_CONFIG_HELP)
        nd_api_usage(stdout); /* the options, then the endpoints */
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    mask_nats_argv(argc, argv);
    nd_log_set_level(d.cfg.log_level);
    if (d.cfg.webhooks[0]) { /* a bad file is a bad configuration: exit 2 */
        char err[1024];
        if (nd_hook_config_load(&d.hooks_cfg, d.cfg.webhooks, err, sizeof(err)) < 0) {
            fprintf(stderr, "neardupd: %s\n", err);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    evthread_use_pthreads();

    char desc[2048];
    char fields[2300];
    nd_config_describe(&d.cfg, desc, sizeof(desc));
    snprintf(fields, sizeof(fields), ",\"version\":\"%s\",\"fingerprint\":\"%s\",\"config\":%s",
             ND_PROGRAM_VERSION, ND_FINGERPRINT_VERSION, desc);
    nd_log_fields(ND_LOG_INFO, fields, "starting neardupd");

    if (init(&d) < 0 || start(&d) < 0) {
        d.exit_code = 1;
        if (d.http)
            nd_http_stop_accepting(d.http);
        atomic_store(&d.stop_loading, true);
    } else {
        event_base_loop(d.base, EVLOOP_NO_EXIT_ON_EMPTY);
    }
    teardown(&d);
    nd_log(ND_LOG_INFO, "stopped (exit %d)", d.exit_code);
    return d.exit_code;
}
