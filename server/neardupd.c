/* neardupd.c - the neardup server: defaults -> flags/env -> init -> loop ->
 * shutdown. Everything else lives in the modules (config, log, metrics,
 * registry, http, api; lib/ for fingerprints and the index; store for LMDB).
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
#include <time.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "api.h"
#include "config.h"
#include "fingerprint.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "registry.h"
#include "store.h"

#define DRAIN_POLL_MS 20
#define PROGRESS_MS 1000

typedef struct daemon {
    nd_config cfg;
    nd_api api;
    nd_fingerprinter *fp;
    nd_metrics *metrics;
    nd_store *store;
    nd_registry *reg;
    nd_http *http;
    struct event_base *base;
    struct event *sigterm, *sigint, *drain_timer, *loaded_ev;
    pthread_t loader;
    bool loader_running;
    atomic_bool stop_loading;
    int load_rc;
    int64_t drain_deadline_ns;
    int exit_code;
    bool draining;
} daemon_t;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- start-up loading (loader thread) ---- */

static void load_progress(void *arg, uint64_t loaded, uint64_t total, uint64_t stale)
{
    daemon_t *d = arg;
    atomic_store(&d->api.load_done, loaded);
    double secs = (double)(mono_ns() - d->api.start_ns) / 1e9;
    char fields[200];
    snprintf(fields, sizeof(fields),
             ",\"loaded\":%llu,\"total\":%llu,\"stale\":%llu,\"rate\":%.0f",
             (unsigned long long)loaded, (unsigned long long)total, (unsigned long long)stale,
             secs > 0 ? (double)loaded / secs : 0.0);
    nd_log_fields(ND_LOG_INFO, fields, "loading documents");
}

static void *loader_main(void *arg)
{
    daemon_t *d = arg;
    int64_t total = nd_store_count(d->store);
    atomic_store(&d->api.load_total, total > 0 ? (uint64_t)total : 0);
    d->load_rc = nd_registry_load(d->reg, load_progress, d, PROGRESS_MS, &d->stop_loading);
    event_active(d->loaded_ev, EV_READ, 0);
    return NULL;
}

static void begin_shutdown(daemon_t *d, const char *why);

static void loaded_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    daemon_t *d = arg;
    if (d->load_rc == -ECANCELED)
        return;
    if (d->load_rc < 0) {
        atomic_store(&d->api.load_failed, true);
        nd_log(ND_LOG_ERROR, "cannot load the store in %s: %s", d->cfg.data_dir,
               strerror(-d->load_rc));
        d->exit_code = 1;
        begin_shutdown(d, "load failed");
        return;
    }
    nd_registry_stats st;
    nd_registry_stats_get(d->reg, &st);
    double secs = (double)(mono_ns() - d->api.start_ns) / 1e9;
    char fields[200];
    snprintf(fields, sizeof(fields), ",\"documents\":%llu,\"indexed\":%llu,\"stale\":%llu,"
             "\"seconds\":%.3f",
             (unsigned long long)st.documents, (unsigned long long)st.index_entries,
             (unsigned long long)st.stale, secs);
    nd_log_fields(ND_LOG_INFO, fields, "ready");
    if (st.duplicates)
        nd_log(ND_LOG_WARN, "%llu stored records repeat an id stored earlier; skipped",
               (unsigned long long)st.duplicates);
    if (st.stale)
        nd_log(ND_LOG_WARN,
               "%llu documents have another fingerprint version than %s; they are kept but "
               "never compared",
               (unsigned long long)st.stale, ND_FINGERPRINT_VERSION);
}

/* ---- shutdown (main loop) ---- */

static void drain_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    daemon_t *d = arg;
    uint64_t inflight = nd_http_inflight(d->http);
    if (inflight == 0) {
        event_base_loopbreak(d->base);
    } else if (mono_ns() >= d->drain_deadline_ns) {
        nd_log(ND_LOG_WARN, "drain deadline of %u s passed with %llu requests in flight",
               d->cfg.drain_s, (unsigned long long)inflight);
        event_base_loopbreak(d->base);
    }
}

static void begin_shutdown(daemon_t *d, const char *why)
{
    if (d->draining)
        return;
    d->draining = true;
    nd_log(ND_LOG_INFO, "draining (%s): not ready, listeners closing, %llu requests in flight",
           why, (unsigned long long)nd_http_inflight(d->http));
    /* From now on the default action: a second signal ends the process at once. */
    evsignal_del(d->sigterm);
    evsignal_del(d->sigint);
    atomic_store(&d->stop_loading, true);
    nd_http_stop_accepting(d->http);
    d->drain_deadline_ns = mono_ns() + (int64_t)d->cfg.drain_s * 1000000000;
    struct timeval tv = {0, DRAIN_POLL_MS * 1000};
    event_add(d->drain_timer, &tv);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    begin_shutdown(arg, sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---- init / teardown ---- */

static int open_store(daemon_t *d)
{
    if (d->cfg.in_memory)
        return 0;
    nd_store_options opts;
    nd_store_options_default(&opts);
    if (d->cfg.map_size)
        opts.map_size = d->cfg.map_size;
    opts.sync = d->cfg.sync;
    char err[512] = "";
    int rc = nd_store_open(&d->store, d->cfg.data_dir, &opts, err, sizeof(err));
    if (rc < 0)
        nd_log(ND_LOG_ERROR, "cannot open the store: %s", err[0] ? err : strerror(-rc));
    return rc;
}

static int init(daemon_t *d)
{
    int rc;
    nd_registry_options ropts = {.max_matches = d->cfg.max_matches};
    if ((rc = nd_fingerprinter_create(&d->fp)) < 0 ||
        (rc = nd_metrics_create(&d->metrics, d->cfg.threads)) < 0) {
        nd_log(ND_LOG_ERROR, "cannot initialise: %s", strerror(-rc));
        return rc;
    }
    if ((rc = open_store(d)) < 0)
        return rc;
    if ((rc = nd_registry_create(&d->reg, d->store, &ropts)) < 0) {
        nd_log(ND_LOG_ERROR, "cannot create the registry: %s", strerror(-rc));
        return rc;
    }
    d->api = (nd_api){.cfg = &d->cfg, .fp = d->fp, .reg = d->reg, .store = d->store,
                      .metrics = d->metrics, .start_ns = mono_ns()};
    nd_http_hooks hooks = {.routes = nd_api_routes, .app = &d->api,
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
    if (!d->sigterm || !d->sigint || !d->drain_timer || !d->loaded_ev ||
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
    if (!d->store) {
        nd_registry_set_loaded(d->reg);
        event_active(d->loaded_ev, EV_READ, 0);
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

/* Stop workers, finish loading, flush the store (its callbacks hand the last
 * results to the workers' queues), answer what is left, free in reverse. */
static void teardown(daemon_t *d)
{
    nd_http_stop(d->http);
    if (d->loader_running)
        pthread_join(d->loader, NULL);
    nd_store_close(d->store);
    d->store = NULL;
    if (d->http) {
        uint64_t left = nd_http_finish(d->http);
        if (left)
            nd_log(ND_LOG_WARN, "%llu requests were never answered", (unsigned long long)left);
    }
    nd_http_destroy(d->http);
    nd_registry_destroy(d->reg);
    nd_metrics_destroy(d->metrics);
    nd_fingerprinter_destroy(d->fp);
    if (d->sigterm)
        event_free(d->sigterm);
    if (d->sigint)
        event_free(d->sigint);
    if (d->drain_timer)
        event_free(d->drain_timer);
    if (d->loaded_ev)
        event_free(d->loaded_ev);
    if (d->base)
        event_base_free(d->base);
}

int main(int argc, char **argv)
{
    static daemon_t d;
    nd_config_defaults(&d.cfg);
    int rc = nd_config_parse(&d.cfg, argc, argv, stdout, stderr);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    nd_log_set_level(d.cfg.log_level);
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
