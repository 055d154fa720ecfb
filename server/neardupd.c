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
#include "fingerprint.h"
#include "hook_config.h"
#include "hook_feed.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "metrics.h"
#include "replica_metrics.h"
#include "store_metrics.h"
#include "registry.h"
#include "replica.h"
#include "replica_hooks.h"
#include "store.h"
#include "store_memory.h"
#include "webhooks.h"

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
    nd_store *store;     /* the local store, or the replica in front of it */
    nd_replica *replica; /* NULL: one node (no --nats) */
    nd_registry *reg;
    nd_http *http;
    nd_auth *auth;
    nd_backfill *backfill;     /* POST /import's one slot */
    nd_hook_config *hooks_cfg; /* read at start (--webhooks); the webhooks' once created */
    nd_webhooks *webhooks;     /* NULL: no subscriptions */
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

static void log_ready(daemon_t *d);

static void *loader_main(void *arg)
{
    daemon_t *d = arg;
    pthread_setname_np(pthread_self(), "nd-load");
    int64_t total = nd_store_count(d->store);
    atomic_store(&d->api.load_total, total > 0 ? (uint64_t)total : 0);
    load_progress(d, 0, total > 0 ? (uint64_t)total : 0, 0); /* a first line at once */
    d->load_rc = nd_registry_load(d->reg, load_progress, d, PROGRESS_MS, &d->stop_loading);
    if (d->load_rc == 0 && d->replica)
        d->load_rc = nd_replica_start(d->replica, d->reg); /* tails the stream from here */
    if (d->load_rc == 0)
        log_ready(d); /* here, not on the main loop: as soon as /readyz says 200 */
    event_active(d->loaded_ev, EV_READ, 0);
    return NULL;
}

static void begin_shutdown(daemon_t *d, const char *why, bool delay);

#define STALE_LISTED 8 /* versions named in the start-up warning */

/* Warns about the documents of other fingerprint versions found at load:
 * how many, and of which versions (fields "stale", "current", "versions":
 * {version: documents}). */
static void log_stale(const daemon_t *d, uint64_t stale)
{
    nd_registry_version_count v[STALE_LISTED];
    size_t n = nd_registry_stale_versions(d->reg, v, STALE_LISTED);
    /* A version is at most ND_VERSION_MAX bytes: 6 per byte escaped. */
    char fields[96 + STALE_LISTED * (ND_VERSION_MAX * 6 + 32)];
    char list[STALE_LISTED * (ND_VERSION_MAX + 32)];
    size_t pos = (size_t)snprintf(fields, sizeof(fields),
                                  ",\"stale\":%llu,\"current\":\"%s\",\"versions\":{",
                                  (unsigned long long)stale, ND_RECORD_VERSION);
    size_t lpos = 0;
    list[0] = '\0';
    for (size_t i = 0; i < n && i < STALE_LISTED; i++) {
        if (i)
            fields[pos++] = ',';
        nd_json_escape(fields, sizeof(fields), &pos, v[i].version, strlen(v[i].version));
        pos += (size_t)snprintf(fields + pos, sizeof(fields) - pos, ":%llu",
                                (unsigned long long)v[i].documents);
        int w = snprintf(list + lpos, sizeof(list) - lpos, "%s%s: %llu", i ? ", " : "",
                         v[i].version, (unsigned long long)v[i].documents);
        if (w > 0 && (size_t)w < sizeof(list) - lpos)
            lpos += (size_t)w;
    }
    snprintf(fields + pos, sizeof(fields) - pos, "}");
    nd_log_fields(ND_LOG_WARN, fields,
                  "%llu documents have another fingerprint version than %s (%s%s); they are "
                  "kept and served by id but never compared",
                  (unsigned long long)stale, ND_RECORD_VERSION, list,
                  n > STALE_LISTED ? ", ..." : "");
}

/* Logs "ready" (and what the load skipped); called on the thread that
 * finished loading, right as /readyz turns 200. */
static void log_ready(daemon_t *d)
{
    nd_registry_stats st;
    nd_registry_stats_get(d->reg, &st);
    double secs = (double)(nd_clock_ns() - d->api.start_ns) / 1e9;
    char fields[200];
    snprintf(fields, sizeof(fields),
             ",\"documents\":%llu,\"indexed\":%llu,\"stale\":%llu,"
             "\"seconds\":%.3f",
             (unsigned long long)st.documents, (unsigned long long)st.index_entries,
             (unsigned long long)st.stale, secs);
    nd_log_fields(ND_LOG_INFO, fields, "ready");
    if (st.duplicates)
        nd_log(ND_LOG_WARN, "%llu stored records repeat an id stored earlier; skipped",
               (unsigned long long)st.duplicates);
    if (st.stale)
        log_stale(d, st.stale);
}

static void loaded_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    daemon_t *d = arg;
    if (d->load_rc == -ECANCELED || d->load_rc >= 0)
        return;
    atomic_store(&d->api.load_failed, true);
    nd_log(ND_LOG_ERROR, "cannot load the store in %s: %s", d->cfg.data_dir,
           nd_registry_load_error(d->load_rc));
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
    begin_shutdown(d, sig == SIGTERM ? "SIGTERM" : "SIGINT", nd_registry_loaded(d->reg));
}

/* ---- init / teardown ---- */

#define NATS_SECRET_MAX 4096 /* longest NATS password or token, bytes */

/* Reads the NATS secret what (a password or a token) from the file path
 * into buf[NATS_SECRET_MAX], without its trailing line end; a file readable
 * by its group or others is warned about. Returns 0, or -errno with a
 * reason in err (never the secret). */
static int read_nats_secret(const char *path, const char *what, char *buf, char *err, size_t cap)
{
    FILE *f = fopen(path, "re");
    struct stat st;
    if (!f || fstat(fileno(f), &st) < 0) {
        int e = errno;
        snprintf(err, cap, "cannot open the NATS %s file %s: %s", what, path, strerror(e));
        if (f)
            fclose(f);
        return -e;
    }
    size_t n = S_ISREG(st.st_mode) ? fread(buf, 1, NATS_SECRET_MAX, f) : NATS_SECRET_MAX;
    fclose(f);
    while (n > 0 && n < NATS_SECRET_MAX && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    if (n == 0 || n >= NATS_SECRET_MAX || memchr(buf, 0, n) || memchr(buf, '\n', n)) {
        snprintf(err, cap,
                 "the NATS %s file %s must be a regular file holding one line of 1 to %d bytes",
                 what, path, NATS_SECRET_MAX - 1);
        explicit_bzero(buf, NATS_SECRET_MAX);
        return -EINVAL;
    }
    buf[n] = 0;
    if (st.st_mode & (S_IRGRP | S_IROTH))
        nd_log(ND_LOG_WARN, "the NATS %s file %s is readable by other users (chmod 600 it)", what,
               path);
    return 0;
}

/* The NATS authentication of the configuration into o: user and password
 * (--nats-user, --nats-password-file or NEARDUP_NATS_PASSWORD), a token
 * (--nats-token-file or NEARDUP_NATS_TOKEN) or a credentials file, TLS
 * files; credentials inside the --nats URLs are refused with any of these
 * and warned about otherwise (ps shows a flag). The secrets go to
 * password[] and token[]. Returns 0, or -EINVAL with a reason in err. */
static int nats_auth(daemon_t *d, nd_replica_options *o, char *password, char *token, char *err,
                     size_t cap)
{
    const nd_config *c = &d->cfg;
    const char *env_password = getenv("NEARDUP_NATS_PASSWORD");
    const char *env_token = getenv("NEARDUP_NATS_TOKEN");
    int rc = 0;
    if (c->nats_password_file[0] && env_password)
        return snprintf(err, cap,
                        "give the NATS password either in a file "
                        "(--nats-password-file) or in NEARDUP_NATS_PASSWORD, not both"),
               -EINVAL;
    if (c->nats_token_file[0] && env_token)
        return snprintf(err, cap,
                        "give the NATS token either in a file (--nats-token-file) or "
                        "in NEARDUP_NATS_TOKEN, not both"),
               -EINVAL;
    bool has_password = c->nats_password_file[0] || env_password;
    bool has_token = c->nats_token_file[0] || env_token;
    if (has_password != (c->nats_user[0] != 0))
        return snprintf(err, cap, "%s",
                        has_password ? "a NATS password needs --nats-user"
                                     : "--nats-user needs its password (--nats-password-file or "
                                       "NEARDUP_NATS_PASSWORD)"),
               -EINVAL;
    if ((c->nats_user[0] != 0) + has_token + (c->nats_creds[0] != 0) > 1)
        return snprintf(err, cap,
                        "give NATS one way to authenticate: --nats-user with its "
                        "password, a token, or --nats-creds"),
               -EINVAL;
    if (c->nats_tls_key[0] && !c->nats_tls_cert[0])
        return snprintf(err, cap, "--nats-tls-key needs --nats-tls-cert"), -EINVAL;
    if (c->nats_tls_cert[0] && !c->nats_tls_key[0])
        return snprintf(err, cap, "--nats-tls-cert needs --nats-tls-key"), -EINVAL;
    char shown[sizeof(c->nats)];
    unsigned in_url = nd_config_redact_urls(c->nats, shown, sizeof(shown));
    if (in_url && (c->nats_user[0] || has_token || c->nats_creds[0]))
        return snprintf(err, cap,
                        "the --nats URLs carry credentials and so do --nats-user, a "
                        "token or --nats-creds: give them once"),
               -EINVAL;
    if (in_url)
        nd_log(ND_LOG_WARN,
               "%u --nats URL(s) carry credentials, which ps and the environment show: give "
               "them with --nats-user and --nats-password-file, --nats-token-file or "
               "--nats-creds instead",
               in_url);
    if (c->nats_password_file[0])
        rc = read_nats_secret(c->nats_password_file, "password", password, err, cap);
    else if (env_password && strlen(env_password) < NATS_SECRET_MAX && *env_password)
        snprintf(password, NATS_SECRET_MAX, "%s", env_password);
    else if (env_password)
        return snprintf(err, cap, "NEARDUP_NATS_PASSWORD must hold 1 to %d bytes",
                        NATS_SECRET_MAX - 1),
               -EINVAL;
    if (rc == 0 && c->nats_token_file[0])
        rc = read_nats_secret(c->nats_token_file, "token", token, err, cap);
    else if (rc == 0 && env_token && strlen(env_token) < NATS_SECRET_MAX && *env_token)
        snprintf(token, NATS_SECRET_MAX, "%s", env_token);
    else if (rc == 0 && env_token)
        return snprintf(err, cap, "NEARDUP_NATS_TOKEN must hold 1 to %d bytes",
                        NATS_SECRET_MAX - 1),
               -EINVAL;
    if (rc < 0)
        return rc;
    o->user = c->nats_user[0] ? c->nats_user : NULL;
    o->password = has_password ? password : NULL;
    o->token = has_token ? token : NULL;
    o->creds_file = c->nats_creds[0] ? c->nats_creds : NULL;
    o->tls_ca = c->nats_tls_ca[0] ? c->nats_tls_ca : NULL;
    o->tls_cert = c->nats_tls_cert[0] ? c->nats_tls_cert : NULL;
    o->tls_key = c->nats_tls_key[0] ? c->nats_tls_key : NULL;
    nd_log(ND_LOG_INFO, "replica: NATS authentication: %s%s",
           o->user         ? "user and password"
           : o->token      ? "token"
           : o->creds_file ? "credentials file"
           : in_url        ? "credentials in the URL"
                           : "none",
           o->tls_ca || o->tls_cert ? ", TLS" : "");
    return 0;
}

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

/* Puts the replica (--nats) in front of the local store d->store. */
static int open_replica(daemon_t *d)
{
    static char shown[sizeof(d->cfg.nats)];
    nd_config_redact_urls(d->cfg.nats, shown, sizeof(shown));
    nd_replica_options o = {.servers = d->cfg.nats,
                            .servers_shown = shown,
                            .stream = d->cfg.stream,
                            .stream_replicas = d->cfg.stream_replicas,
                            .node_name = d->cfg.node_name,
                            .max_lag = d->cfg.max_lag,
                            .timeout_ms = d->cfg.nats_timeout_ms};
    char err[768] = "";
    char *password = calloc(1, NATS_SECRET_MAX), *token = calloc(1, NATS_SECRET_MAX);
    int rc = password && token ? nats_auth(d, &o, password, token, err, sizeof(err)) : -ENOMEM;
    if (rc == 0)
        rc = nd_replica_open(&d->replica, d->store, &o, err, sizeof(err));
    else
        nd_store_close(d->store);
    d->store = NULL; /* the replica's now (closed by it on failure too) */
    if (password)
        explicit_bzero(password, NATS_SECRET_MAX); /* libnats keeps its own copy */
    if (token)
        explicit_bzero(token, NATS_SECRET_MAX);
    free(password);
    free(token);
    if (rc < 0) {
        nd_log(ND_LOG_ERROR, "cannot start the replica: %s", err[0] ? err : strerror(-rc));
        return rc;
    }
    d->store = nd_replica_store(d->replica);
    return 0;
}

static int open_store(daemon_t *d)
{
    if (d->cfg.in_memory) { /* registrations kept in this process only */
        nd_store_options mopts;
        nd_store_options_default(&mopts);
        mopts.detections_max = d->cfg.copies_max;
        mopts.audit_max_entries = d->cfg.audit_max_entries;
        mopts.audit_max_age_us = (int64_t)d->cfg.audit_max_age_s * 1000000;
        mopts.events_max_age_us = (int64_t)d->cfg.events_max_age_s * 1000000;
        int rc = nd_store_memory_open_with(&d->store, &mopts);
        if (rc < 0)
            nd_log(ND_LOG_ERROR, "cannot create the memory store: %s", strerror(-rc));
        return rc < 0 || !d->cfg.nats[0] ? rc : open_replica(d);
    }
    nd_store_options opts;
    nd_store_options_default(&opts);
    if (d->cfg.map_size)
        opts.map_size = d->cfg.map_size;
    opts.sync = d->cfg.sync;
    opts.shed = true; /* a full queue (slow disk) answers 503, never stalls a loop */
    opts.detections_max = d->cfg.copies_max;           /* detections kept per original */
    opts.audit_max_entries = d->cfg.audit_max_entries; /* audit retention */
    opts.audit_max_age_us = (int64_t)d->cfg.audit_max_age_s * 1000000;
    opts.events_max_age_us = (int64_t)d->cfg.events_max_age_s * 1000000;
    char err[512] = "";
    int rc = nd_store_open(&d->store, d->cfg.data_dir, &opts, err, sizeof(err));
    if (rc < 0)
        nd_log(ND_LOG_ERROR, "cannot open the store: %s", err[0] ? err : strerror(-rc));
    return rc < 0 || !d->cfg.nats[0] ? rc : open_replica(d);
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

/* Sets up webhook delivery of the subscriptions read at start (none: no
 * thread): positions kept in DATA/webhooks/ (in memory with --in-memory),
 * events read from the store's feed. Started by start(). */
static int open_webhooks(daemon_t *d)
{
    if (!d->hooks_cfg)
        return 0;
    nd_hook_positions *pos = NULL;
    char err[512] = "";
    int rc;
    if (d->replica) { /* the cluster's: one deliverer, positions in JetStream */
        rc = nd_replica_hook_positions(d->replica, &pos, err, sizeof(err));
    } else if (d->cfg.in_memory) {
        rc = nd_hook_positions_memory_open(&pos);
    } else {
        char dir[sizeof(d->cfg.data_dir) + 16];
        snprintf(dir, sizeof(dir), "%s/webhooks", d->cfg.data_dir);
        rc = nd_hook_positions_file_open(&pos, dir, err, sizeof(err));
    }
    if (rc == 0) {
        nd_hook_source src;
        nd_hook_feed_source(d->store, &src);
        rc = nd_webhooks_create(&d->webhooks, d->hooks_cfg, &src, pos, err, sizeof(err));
    } else {
        nd_hook_config_destroy(d->hooks_cfg);
    }
    d->hooks_cfg = NULL; /* the webhooks' now, or freed */
    if (rc < 0)
        nd_log(ND_LOG_ERROR, "cannot start webhook delivery: %s", err[0] ? err : strerror(-rc));
    return rc;
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
    nd_registry_options ropts;
    nd_registry_options_from_config(&ropts, &d->cfg);
    if ((rc = nd_fingerprinter_create(&d->fp)) < 0 || (rc = nd_sketcher_create(&d->sk)) < 0 ||
        (rc = nd_metrics_create(&d->metrics, d->cfg.threads)) < 0 ||
        (rc = nd_backfill_create(&d->backfill)) < 0) {
        nd_log(ND_LOG_ERROR, "cannot initialise: %s", strerror(-rc));
        return rc;
    }
    if ((rc = open_store(d)) < 0)
        return rc;
    if ((rc = nd_registry_create(&d->reg, d->store, &ropts)) < 0) {
        nd_log(ND_LOG_ERROR, "cannot create the registry: %s", strerror(-rc));
        return rc;
    }
    d->api = (nd_api){.cfg = &d->cfg,
                      .fp = d->fp,
                      .sk = d->sk,
                      .reg = d->reg,
                      .store = d->store,
                      .metrics = d->metrics,
                      .auth = d->auth,
                      .backfill = d->backfill,
                      .replica = d->replica,
                      .start_ns = nd_clock_ns()};
    if ((rc = open_webhooks(d)) < 0)
        return rc;
    d->api.webhooks = d->webhooks;
    /* The subsystems' figures on /metrics, in this order after the gauges. */
    if ((rc = nd_metrics_register(d->metrics, nd_store_metrics_collect, d->store)) < 0 ||
        (d->replica &&
         (rc = nd_metrics_register(d->metrics, nd_replica_metrics_collect, d->replica)) < 0) ||
        (d->webhooks &&
         (rc = nd_metrics_register(d->metrics, nd_webhooks_metrics_collect, d->webhooks)) < 0))
        return rc;
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
    if (d->webhooks && (rc = nd_webhooks_start(d->webhooks)) < 0) {
        nd_log(ND_LOG_ERROR, "cannot start the webhook thread: %s", strerror(-rc));
        return rc;
    }
    if (!nd_store_durable(d->store)) { /* the memory store: nothing to load */
        nd_registry_set_loaded(d->reg);
        if (d->replica && (rc = nd_replica_start(d->replica, d->reg)) < 0)
            return rc;
        log_ready(d);
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
    if (d->reg)
        nd_registry_shutdown(d->reg);
    nd_backfill_stop(d->backfill);
    if (d->loader_running)
        pthread_join(d->loader, NULL);
    nd_webhooks_stop(d->webhooks); /* it reads the store: before the store closes */
    nd_store_close(d->store);
    d->store = NULL;
    d->api.store = NULL;
    if (d->http) {
        nd_http_wait_idle(d->http, SETTLE_MS);
        nd_http_stop(d->http);
        uint64_t left = nd_http_finish(d->http);
        if (left)
            nd_log(ND_LOG_WARN, "%llu requests were never answered", (unsigned long long)left);
    }
    nd_http_destroy(d->http);
    nd_registry_destroy(d->reg);
    nd_metrics_destroy(d->metrics);
    nd_fingerprinter_destroy(d->fp);
    nd_sketcher_destroy(d->sk);
    nd_auth_destroy(d->auth);
    nd_backfill_destroy(d->backfill);
    nd_webhooks_destroy(d->webhooks);
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
