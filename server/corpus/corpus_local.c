/* corpus_local.c - the corpus of one node (corpus_local.h): the
 * composition of store, replica, registry, feed and webhook delivery, and
 * corpus.h's operations on them. */
#include "corpus_local.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "corpus_doc.h"
#include "hook_feed.h"
#include "hook_position.h"
#include "json.h"
#include "log.h"
#include "nats_auth.h"
#include "replica.h"
#include "replica_hooks.h"
#include "replica_metrics.h"
#include "store_memory.h"
#include "store_metrics.h"

typedef struct local {
    nd_corpus base;       /* first */
    const nd_config *cfg; /* borrowed; NULL: wrapped */
    nd_store *store;      /* the local store, or the replica in front of it */
    nd_replica *replica;  /* NULL: one node (no --nats) */
    nd_registry *reg;
    nd_webhooks *webhooks; /* NULL: no subscriptions */
    bool owned;            /* reg and store are the corpus's (not wrapped) */
} local;

static local *L(nd_corpus *c)
{
    return (local *)c;
}

static const local *CL(const nd_corpus *c)
{
    return (const local *)c;
}

/* ---- corpus.h's operations ---- */

static bool op_loaded(const nd_corpus *c)
{
    return nd_registry_loaded(CL(c)->reg);
}

static bool op_ready(const nd_corpus *c, const char **why)
{
    const local *l = CL(c);
    const char *w = NULL;
    if (!nd_registry_loaded(l->reg))
        w = "loading";
    else if (!nd_store_writable(l->store))
        w = "storage_unavailable";
    else if (l->replica)
        nd_replica_ready(l->replica, &w);
    if (why)
        *why = w;
    return w == NULL;
}

static bool op_writable(const nd_corpus *c)
{
    return nd_store_writable(CL(c)->store);
}

static bool op_durable(const nd_corpus *c)
{
    return nd_store_durable(CL(c)->store);
}

static bool op_replicated(const nd_corpus *c)
{
    return CL(c)->replica != NULL;
}

static int op_sync(nd_corpus *c, nd_store_done_fn done, void *arg)
{
    return nd_replica_sync(L(c)->replica, done, arg);
}

static bool op_replica(const nd_corpus *c, nd_corpus_replica *out)
{
    const local *l = CL(c);
    if (!l->replica)
        return false;
    nd_replica_stats rs;
    nd_replica_stats_get(l->replica, &rs);
    const char *why = NULL;
    nd_replica_ready(l->replica, &why);
    *out = (nd_corpus_replica){.node = rs.node,
                               .stream = rs.stream,
                               .state = why ? why : "ready",
                               .applied_seq = rs.applied_seq,
                               .stored_seq = rs.stored_seq,
                               .stream_seq = rs.stream_seq,
                               .lag = rs.lag,
                               .connected = rs.connected,
                               .writable = rs.writable,
                               .published = rs.published,
                               .applied = rs.applied,
                               .entries = rs.entries,
                               .conflicts = rs.conflicts};
    return true;
}

static void op_stats(const nd_corpus *c, nd_corpus_counts *out)
{
    nd_registry_stats st;
    nd_registry_stats_get(CL(c)->reg, &st);
    *out = (nd_corpus_counts){.documents = st.documents,
                              .index_entries = st.index_entries,
                              .stale = st.stale,
                              .pending = st.pending,
                              .duplicates = st.duplicates};
}

static int op_digest(nd_corpus *c, uint64_t *documents, uint64_t *digest)
{
    return nd_registry_digest(L(c)->reg, documents, digest);
}

/* A corpus audit callback behind the registry's (nd_reg_audit_fn and
 * nd_check_req's): called within the call that holds it. */
typedef struct audit_tramp {
    nd_corpus_audit_fn fn;
    void *arg;
} audit_tramp;

static char *audit_view(void *arg, const nd_doc *d, nd_store_event *ev)
{
    audit_tramp *t = arg;
    nd_corpus_doc v;
    nd_corpus_doc_view(d, NULL, NULL, &v);
    return t->fn(t->arg, &v, ev);
}

static int op_check(nd_corpus *c, const nd_check_req *rq, nd_corpus_audit_fn audit, void *audit_arg,
                    const nd_question *q, const nd_question_scratch *qs, nd_check_res *res,
                    nd_registry_done_fn done, void *arg)
{
    if (!audit) {
        if (!rq->audit)
            return nd_registry_check(L(c)->reg, rq, q, qs, res, done, arg);
        nd_check_req plain = *rq;
        plain.audit = NULL;
        plain.audit_arg = NULL;
        return nd_registry_check(L(c)->reg, &plain, q, qs, res, done, arg);
    }
    audit_tramp t = {audit, audit_arg};
    nd_check_req with = *rq; /* a value copy: the registry borrows rq for the call */
    with.audit = audit_view;
    with.audit_arg = &t;
    return nd_registry_check(L(c)->reg, &with, q, qs, res, done, arg);
}

static int op_complete(nd_corpus *c, nd_reg_change *ch, int status)
{
    return nd_registry_complete(L(c)->reg, ch, status);
}

static int op_get(nd_corpus *c, const char *id, size_t id_len, nd_corpus_doc *out)
{
    nd_doc *d = NULL;
    int rc = nd_registry_get(L(c)->reg, id, id_len, &d);
    if (rc < 0 || !d) {
        nd_doc_release(d);
        *out = (nd_corpus_doc){0};
        return rc < 0 ? rc : -ENOENT;
    }
    nd_corpus_doc_view(d, nd_registry_doc_version(L(c)->reg, d), d, out);
    return 0;
}

static void op_doc_release(nd_corpus *c, nd_corpus_doc *d)
{
    (void)c;
    nd_doc_release(d->ref);
    d->ref = NULL;
}

static int op_remove(nd_corpus *c, const char *id, size_t id_len, nd_corpus_audit_fn audit,
                     void *audit_arg, nd_registry_done_fn done, void *arg)
{
    audit_tramp t = {audit, audit_arg};
    return nd_registry_delete(L(c)->reg, id, id_len, audit ? audit_view : NULL, &t, done, arg);
}

/* A corpus decide callback behind the registry's: the change's documents
 * as views (a restore's predated ones in an array allocated for the
 * call), its outputs copied back. */
typedef struct decide_tramp {
    nd_corpus_decide_fn fn;
    void *arg;
} decide_tramp;

static int decide_view(void *arg, nd_claim_change *c)
{
    decide_tramp *t = arg;
    nd_corpus_claim_change v = {.npredated = c->npredated,
                                .predated_truncated = c->predated_truncated};
    nd_corpus_doc_view(c->doc, NULL, NULL, &v.doc);
    nd_corpus_doc *pre = NULL;
    if (c->npredated) {
        if (!(pre = calloc(c->npredated, sizeof(*pre))))
            return -ENOMEM;
        for (size_t i = 0; i < c->npredated; i++)
            nd_corpus_doc_view(c->predated[i], NULL, NULL, &pre[i]);
    }
    v.predated = pre;
    int rc = t->fn(t->arg, &v);
    free(pre);
    c->policy = v.policy;
    c->policy_len = v.policy_len;
    c->audit = v.audit;
    return rc;
}

static int op_change_policy(nd_corpus *c, const char *id, size_t id_len, nd_corpus_decide_fn decide,
                            void *decide_arg, nd_registry_done_fn done, void *arg)
{
    decide_tramp t = {decide, decide_arg};
    return nd_registry_change_policy(L(c)->reg, id, id_len, decide_view, &t, done, arg);
}

static int op_change_status(nd_corpus *c, const char *id, size_t id_len, int status, unsigned k,
                            const nd_verdict_params *params, nd_corpus_decide_fn decide,
                            void *decide_arg, nd_registry_done_fn done, void *arg)
{
    decide_tramp t = {decide, decide_arg};
    return nd_registry_change_status(L(c)->reg, id, id_len, status, k, params, decide_view, &t,
                                     done, arg);
}

static int op_import(nd_corpus *c, const char *buf, size_t len, const nd_import_params *p,
                     nd_import_report_fn report, void *arg, nd_import_summary *out)
{
    return nd_import_run(L(c)->reg, L(c)->store, buf, len, p, report, arg, out);
}

/* nd_store_get() visitor: whether the record's client is the name in arg. */
typedef struct client_match {
    const char *name;
    size_t len;
    bool same;
} client_match;

static int match_client(void *arg, const nd_record *rec)
{
    client_match *m = arg;
    m->same = rec->client && rec->client_len == m->len && memcmp(rec->client, m->name, m->len) == 0;
    return 0;
}

static int op_registered_by(nd_corpus *c, int64_t registered_at_us, const char *client,
                            size_t client_len, bool *same)
{
    client_match m = {client, client_len, false};
    int rc = nd_store_get(L(c)->store, registered_at_us, match_client, &m);
    if (rc == 0)
        *same = m.same;
    return rc;
}

/* The id of the record stored at a time (copied). */
typedef struct id_at {
    char *id; /* ND_ID_MAX bytes */
    size_t *len;
} id_at;

static int visit_id(void *arg, const nd_record *rec)
{
    id_at *a = arg;
    if (rec->id_len <= ND_ID_MAX) {
        memcpy(a->id, rec->id, rec->id_len);
        *a->len = rec->id_len;
    }
    return 0;
}

static int op_id_at(nd_corpus *c, int64_t registered_at_us, char *id, size_t *id_len)
{
    id_at a = {id, id_len};
    return nd_store_get(L(c)->store, registered_at_us, visit_id, &a);
}

static int op_text(nd_corpus *c, int64_t registered_at_us,
                   int (*visit)(void *arg, const char *text, size_t text_len), void *arg)
{
    return nd_store_text(L(c)->store, registered_at_us, visit, arg);
}

static int op_event_put(nd_corpus *c, const nd_store_event *ev, nd_store_done_fn done, void *arg)
{
    return nd_store_event_put(L(c)->store, ev, done, arg);
}

static int op_events(nd_corpus *c, nd_event_kind kind, int64_t owner_at, int64_t before_at,
                     size_t limit, int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    return nd_store_events(L(c)->store, kind, owner_at, before_at, limit, visit, arg);
}

static int op_audit_of(nd_corpus *c, int64_t owner_at, const char *document, size_t document_len,
                       int64_t before_at, size_t limit,
                       int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    return nd_store_audit_of(L(c)->store, owner_at, document, document_len, before_at, limit,
                             visit, arg);
}

static void op_feed_bounds(nd_corpus *c, uint64_t *oldest, uint64_t *latest)
{
    nd_store_feed_bounds(L(c)->store, oldest, latest);
}

static int op_feed_scan(nd_corpus *c, uint64_t from, bool descending,
                        int (*visit)(void *arg, const nd_event_rec *ev), void *arg)
{
    return nd_store_feed_scan(L(c)->store, from, descending, visit, arg);
}

static const nd_corpus_ops local_ops = {
    .name = "local",
    .loaded = op_loaded,
    .ready = op_ready,
    .writable = op_writable,
    .durable = op_durable,
    .replicated = op_replicated,
    .sync = op_sync,
    .replica = op_replica,
    .stats = op_stats,
    .digest = op_digest,
    .check = op_check,
    .complete = op_complete,
    .get = op_get,
    .doc_release = op_doc_release,
    .remove = op_remove,
    .change_policy = op_change_policy,
    .change_status = op_change_status,
    .import = op_import,
    .registered_by = op_registered_by,
    .id_at = op_id_at,
    .text = op_text,
    .event_put = op_event_put,
    .events = op_events,
    .audit_of = op_audit_of,
    .feed_bounds = op_feed_bounds,
    .feed_scan = op_feed_scan,
};

/* ---- composition ---- */

/* Puts the replica (--nats) in front of the local store l->store. */
static int open_replica(local *l)
{
    static char shown[sizeof(l->cfg->nats)];
    nd_config_redact_urls(l->cfg->nats, shown, sizeof(shown));
    nd_replica_options o = {.servers = l->cfg->nats,
                            .servers_shown = shown,
                            .stream = l->cfg->stream,
                            .stream_replicas = l->cfg->stream_replicas,
                            .node_name = l->cfg->node_name,
                            .max_lag = l->cfg->max_lag,
                            .timeout_ms = l->cfg->nats_timeout_ms};
    char err[768] = "";
    char *password = calloc(1, NATS_SECRET_MAX), *token = calloc(1, NATS_SECRET_MAX);
    int rc = password && token ? nd_nats_auth(l->cfg, &o, password, token, err, sizeof(err))
                               : -ENOMEM;
    if (rc == 0)
        rc = nd_replica_open(&l->replica, l->store, &o, err, sizeof(err));
    else
        nd_store_close(l->store);
    l->store = NULL; /* the replica's now (closed by it on failure too) */
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
    l->store = nd_replica_store(l->replica);
    return 0;
}

static int open_store(local *l)
{
    const nd_config *cfg = l->cfg;
    if (cfg->in_memory) { /* registrations kept in this process only */
        nd_store_options mopts;
        nd_store_options_default(&mopts);
        mopts.detections_max = cfg->copies_max;
        mopts.audit_max_entries = cfg->audit_max_entries;
        mopts.audit_max_age_us = (int64_t)cfg->audit_max_age_s * 1000000;
        mopts.events_max_age_us = (int64_t)cfg->events_max_age_s * 1000000;
        int rc = nd_store_memory_open_with(&l->store, &mopts);
        if (rc < 0)
            nd_log(ND_LOG_ERROR, "cannot create the memory store: %s", strerror(-rc));
        return rc < 0 || !cfg->nats[0] ? rc : open_replica(l);
    }
    nd_store_options opts;
    nd_store_options_default(&opts);
    if (cfg->map_size)
        opts.map_size = cfg->map_size;
    opts.sync = cfg->sync;
    opts.shed = true; /* a full queue (slow disk) answers 503, never stalls a loop */
    opts.detections_max = cfg->copies_max;           /* detections kept per original */
    opts.audit_max_entries = cfg->audit_max_entries; /* audit retention */
    opts.audit_max_age_us = (int64_t)cfg->audit_max_age_s * 1000000;
    opts.events_max_age_us = (int64_t)cfg->events_max_age_s * 1000000;
    char err[512] = "";
    int rc = nd_store_open(&l->store, cfg->data_dir, &opts, err, sizeof(err));
    if (rc < 0)
        nd_log(ND_LOG_ERROR, "cannot open the store: %s", err[0] ? err : strerror(-rc));
    return rc < 0 || !cfg->nats[0] ? rc : open_replica(l);
}

/* Sets up webhook delivery of the subscriptions read at start (hooks,
 * stolen; NULL: none, no thread): positions kept in DATA/webhooks/ (in
 * memory with --in-memory; the cluster's in JetStream with a replica),
 * events read from the store's feed. Started by nd_corpus_local_start(). */
static int open_webhooks(local *l, nd_hook_config *hooks)
{
    if (!hooks)
        return 0;
    nd_hook_positions *pos = NULL;
    char err[512] = "";
    int rc;
    if (l->replica) { /* the cluster's: one deliverer, positions in JetStream */
        rc = nd_replica_hook_positions(l->replica, &pos, err, sizeof(err));
    } else if (l->cfg->in_memory) {
        rc = nd_hook_positions_memory_open(&pos);
    } else {
        char dir[sizeof(l->cfg->data_dir) + 16];
        snprintf(dir, sizeof(dir), "%s/webhooks", l->cfg->data_dir);
        rc = nd_hook_positions_file_open(&pos, dir, err, sizeof(err));
    }
    if (rc == 0) {
        nd_hook_source src;
        nd_hook_feed_source(l->store, &src);
        rc = nd_webhooks_create(&l->webhooks, hooks, &src, pos, err, sizeof(err));
    } else {
        nd_hook_config_destroy(hooks);
    }
    if (rc < 0)
        nd_log(ND_LOG_ERROR, "cannot start webhook delivery: %s", err[0] ? err : strerror(-rc));
    return rc;
}

static int open_all(local *l, nd_hook_config *hooks, nd_metrics *metrics)
{
    nd_registry_options ropts;
    nd_registry_options_from_config(&ropts, l->cfg);
    int rc = open_store(l);
    if (rc < 0) {
        nd_hook_config_destroy(hooks);
        return rc;
    }
    if ((rc = nd_registry_create(&l->reg, l->store, &ropts)) < 0) {
        nd_log(ND_LOG_ERROR, "cannot create the registry: %s", strerror(-rc));
        nd_hook_config_destroy(hooks);
        return rc;
    }
    if ((rc = open_webhooks(l, hooks)) < 0)
        return rc;
    /* The subsystems' figures on /metrics, in this order after the gauges. */
    if ((rc = nd_metrics_register(metrics, nd_store_metrics_collect, l->store)) < 0 ||
        (l->replica &&
         (rc = nd_metrics_register(metrics, nd_replica_metrics_collect, l->replica)) < 0) ||
        (l->webhooks &&
         (rc = nd_metrics_register(metrics, nd_webhooks_metrics_collect, l->webhooks)) < 0))
        return rc;
    return 0;
}

int nd_corpus_local_open(nd_corpus **out, const nd_config *cfg, nd_hook_config *hooks,
                         nd_metrics *metrics)
{
    *out = NULL;
    local *l = calloc(1, sizeof(*l));
    if (!l) {
        nd_hook_config_destroy(hooks);
        nd_log(ND_LOG_ERROR, "cannot initialise: %s", strerror(ENOMEM));
        return -ENOMEM;
    }
    l->base.ops = &local_ops;
    l->cfg = cfg;
    l->owned = true;
    int rc = open_all(l, hooks, metrics);
    if (rc < 0) {
        nd_corpus_local_close(&l->base);
        nd_corpus_local_destroy(&l->base);
        return rc;
    }
    *out = &l->base;
    return 0;
}

int nd_corpus_local_wrap(nd_corpus **out, nd_registry *reg, nd_store *store)
{
    local *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->base.ops = &local_ops;
    l->reg = reg;
    l->store = store;
    *out = &l->base;
    return 0;
}

bool nd_corpus_local_needs_load(const nd_corpus *c)
{
    return nd_store_durable(CL(c)->store);
}

int64_t nd_corpus_local_count(nd_corpus *c)
{
    return nd_store_count(L(c)->store);
}

int nd_corpus_local_load(nd_corpus *c, nd_registry_progress_fn progress, void *arg,
                         unsigned progress_ms, const atomic_bool *stop)
{
    local *l = L(c);
    int rc = 0;
    if (!nd_store_durable(l->store)) /* the memory store: nothing to load */
        nd_registry_set_loaded(l->reg);
    else
        rc = nd_registry_load(l->reg, progress, arg, progress_ms, stop);
    if (rc == 0 && l->replica)
        rc = nd_replica_start(l->replica, l->reg); /* tails the stream from here */
    return rc;
}

const char *nd_corpus_local_load_error(int rc)
{
    return nd_registry_load_error(rc);
}

#define STALE_LISTED 8 /* versions named in the start-up warning */

/* Warns about the documents of other fingerprint versions found at load:
 * how many, and of which versions (fields "stale", "current", "versions":
 * {version: documents}). */
static void log_stale(const local *l, uint64_t stale)
{
    nd_registry_version_count v[STALE_LISTED];
    size_t n = nd_registry_stale_versions(l->reg, v, STALE_LISTED);
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

void nd_corpus_local_log_ready(nd_corpus *c, int64_t start_ns)
{
    local *l = L(c);
    nd_registry_stats st;
    nd_registry_stats_get(l->reg, &st);
    double secs = (double)(nd_clock_ns() - start_ns) / 1e9;
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
        log_stale(l, st.stale);
}

nd_webhooks *nd_corpus_local_webhooks(nd_corpus *c)
{
    return L(c)->webhooks;
}

int nd_corpus_local_start(nd_corpus *c)
{
    local *l = L(c);
    int rc = 0;
    if (l->webhooks && (rc = nd_webhooks_start(l->webhooks)) < 0)
        nd_log(ND_LOG_ERROR, "cannot start the webhook thread: %s", strerror(-rc));
    return rc;
}

void nd_corpus_local_shutdown(nd_corpus *c)
{
    if (c && L(c)->reg)
        nd_registry_shutdown(L(c)->reg);
}

void nd_corpus_local_close(nd_corpus *c)
{
    if (!c)
        return;
    local *l = L(c);
    nd_webhooks_stop(l->webhooks); /* it reads the store: before the store closes */
    if (l->owned)
        nd_store_close(l->store);
    l->store = NULL;
}

void nd_corpus_local_destroy(nd_corpus *c)
{
    if (!c)
        return;
    local *l = L(c);
    if (l->owned)
        nd_registry_destroy(l->reg);
    nd_webhooks_destroy(l->webhooks);
    free(l);
}
