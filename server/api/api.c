/* api.c - request handlers: parse, validate, fingerprint, ask the registry,
 * answer. Each handler ends in exactly one reply, now or after a hand-off. */
#include "api.h"
#include "answer.h"
#include "backfill.h"
#include "workflow.h"
#include "clock.h"
#include "json.h"
#include "log.h"
#include "reply.h"
#include "replica.h"
#include "question.h"
#include "request.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/buffer.h>

#define LOOP_STALL_MS 10000 /* /healthz fails if a loop has not run for this long */
#define API_PASSAGES ND_REPLY_MAX_PASSAGES
#define API_ANCHOR_HITS ND_ANCHOR_HITS_MAX /* anchor-index hits: all a query can find */
/* Anchor candidates one check verifies, at most: those sharing two anchors
 * or more, and max_verify sharing one. */
#define API_ANCHOR_CANDIDATES (ND_ANCHOR_HITS_MAX / ND_VERDICT_MIN_SHARED + ND_VERIFY_MAX)

_Static_assert(ND_K_MAX == ND_INDEX_MAX_K, "k is checked against the index's bound");
_Static_assert(ND_ID_MAX >= ND_ID_MAX_UTF8, "the store must hold every valid id");

typedef struct api_worker {
    nd_api_scratch sh; /* reply buffer and parser (answer.c): first */
    nd_fp_scratch *fps;
    nd_sketcher *sk;     /* this worker's (immutable once made) */
    nd_sk_scratch *sks;  /* sketch of the text being checked, for passages */
    nd_sketch sketch[2]; /* the text's, in both modes (word, char) */
    nd_anchors anchors[2];
    uint32_t probe[2 * ND_ANCHORS_QUERY]; /* both modes' anchors */
    uint8_t enc[ND_SKETCH_ENCODED_MAX];
    nd_index_hit *hits;
    nd_match *matches;
    int64_t *keys;
    size_t cap;
    nd_anchor_hit ahits[API_ANCHOR_HITS];
} api_worker;

/* State of a /check-original or DELETE that waits for the store. */
typedef struct op_state {
    bool is_delete;
    /* The request as request.c parsed it (a DELETE: only its id), handed to
     * the registry as it is. Its text and id are borrowed from the body and
     * the worker's parser for a query, owned copies when on_heap (a
     * registration may be decided again after another request reused the
     * parser); its meta is owned. */
    nd_check_req rq;
    nd_check_res res;
    nd_reg_change *ch; /* set by the hand-off: a change to complete */
    int status;
    nd_match *own_matches; /* a queued answer's matches, out of the worker's scratch */
    nd_passage passages[API_PASSAGES];
    int sketched;    /* the text's sketch mode + 1 while the worker's scratch holds it, else 0 */
    bool on_heap;    /* waits for the store: allocated, freed by op_free() */
    char *journaled; /* the detection being written (issue 13) */
    bool no_record;  /* the caller may not record a detection: answered without */
    bool recorded;   /* the detection was written */
    /* Decided again after losing a race to another replica (issue 14). */
    unsigned stale_tries;
    /* Consistency "latest": runs once the replica caught up (issue 14). */
    void (*when_latest)(nd_req *r);
} op_state;

static api_worker *aw_of(nd_req *r)
{
    return nd_worker_user(r->worker);
}

int nd_api_worker_init(void *app, unsigned index, void **user)
{
    nd_api *api = app;
    (void)index;
    api_worker *aw = calloc(1, sizeof(*aw));
    if (!aw)
        return -ENOMEM;
    aw->cap = api->cfg->max_matches * 4 < 1024 ? 1024 : (size_t)api->cfg->max_matches * 4;
    aw->cap += API_ANCHOR_CANDIDATES;
    aw->hits = calloc(aw->cap, sizeof(*aw->hits));
    aw->matches = calloc(aw->cap, sizeof(*aw->matches));
    aw->keys = calloc(aw->cap, sizeof(*aw->keys));
    aw->sh.out = evbuffer_new();
    int rc = aw->hits && aw->matches && aw->keys && aw->sh.out ? nd_fp_scratch_create(&aw->fps)
                                                               : -ENOMEM;
    if (rc == 0)
        rc = nd_sketcher_create(&aw->sk);
    if (rc == 0)
        rc = nd_sk_scratch_create(&aw->sks);
    if (rc < 0) {
        nd_api_worker_finish(app, aw);
        return rc;
    }
    *user = aw;
    return 0;
}

void nd_api_worker_finish(void *app, void *user)
{
    (void)app;
    api_worker *aw = user;
    if (!aw)
        return;
    nd_fp_scratch_destroy(aw->fps);
    nd_sk_scratch_destroy(aw->sks);
    nd_sketcher_destroy(aw->sk);
    free(aw->hits);
    free(aw->matches);
    free(aw->keys);
    if (aw->sh.out)
        evbuffer_free(aw->sh.out);
    nd_request_parser_finish(&aw->sh.parser);
    free(aw);
}

bool nd_api_ready(const nd_api *api, const char **why)
{
    const char *w = NULL;
    if (api->http && nd_http_draining(api->http))
        w = "draining";
    else if (atomic_load(&api->load_failed))
        w = "load_failed";
    else if (!nd_registry_loaded(api->reg))
        w = "loading";
    else if (!nd_store_writable(api->store))
        w = "storage_unavailable";
    else if (api->replica)
        nd_replica_ready(api->replica, &w);
    if (why)
        *why = w;
    return w == NULL;
}

/* The similarity 1 - distance / 64 of each distance, as JSON numbers
 * (nd_reply_format_real()), made once. */
static char similarity_text[65][32];
static size_t similarity_len[65];
static pthread_once_t similarity_once = PTHREAD_ONCE_INIT;

static void similarity_init(void)
{
    for (unsigned d = 0; d <= 64; d++)
        similarity_len[d] = nd_reply_format_real(1.0 - (double)d / 64.0, similarity_text[d]);
}

static void add_similarity(nd_reply *w, unsigned distance)
{
    pthread_once(&similarity_once, similarity_init);
    unsigned d = distance > 64 ? 64 : distance;
    nd_reply_raw(w, similarity_text[d], similarity_len[d]);
}

/* ---- probes ---- */

/* Answers 200 {"status":status}. */
static void reply_status(nd_req *r, const char *status)
{
    nd_reply w;
    nd_reply_object(nd_api_body_begin(r, &w));
    nd_reply_key(&w, "status");
    nd_reply_plain(&w, status, strlen(status));
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 200);
}

static void handle_healthz(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    if (nd_http_loops_alive(api->http, LOOP_STALL_MS))
        reply_status(r, "ok");
    else
        nd_api_error(r, 503, "loop_stalled", "a worker loop has not run for %d ms", LOOP_STALL_MS);
}

static void handle_readyz(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    const char *why;
    if (nd_api_ready(api, &why)) {
        reply_status(r, "ready");
        return;
    }
    if (strcmp(why, "loading") == 0) {
        nd_api_loading(r);
        return;
    }
    nd_api_error(r, 503, why, "not ready: %s", why);
}

static void handle_metrics(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    if (!nd_api_authorized_read(r))
        return;
    nd_registry_stats st;
    nd_registry_stats_get(api->reg, &st);
    nd_store_stats sst;
    nd_store_get_stats(api->store, &sst);
    nd_metrics_gauges g = {
        .documents = st.documents,
        .index_entries = st.index_entries,
        .stale_documents = st.stale,
        .pending_changes = st.pending,
        .inflight = nd_http_inflight(api->http),
        .load_done = atomic_load(&api->load_done),
        .load_total = atomic_load(&api->load_total),
        .threads = api->cfg->threads,
        .ready = nd_api_ready(api, NULL),
        .draining = nd_http_draining(api->http),
        .loading = !nd_registry_loaded(api->reg),
        .store_writable = nd_store_writable(api->store),
        .in_memory = !nd_store_durable(api->store),
        .uptime_s = (double)(nd_clock_ns() - api->start_ns) / 1e9,
        .store = nd_store_durable(api->store) ? &sst : NULL, /* the memory store: none */
    };
    nd_metrics_replica mr;
    if (api->replica) {
        nd_replica_stats rs;
        nd_replica_stats_get(api->replica, &rs);
        mr = (nd_metrics_replica){.applied_seq = rs.applied_seq,
                                  .stream_seq = rs.stream_seq,
                                  .lag = rs.lag,
                                  .lag_seconds = rs.lag_seconds,
                                  .connected = rs.connected,
                                  .writable = rs.writable,
                                  .published = rs.published,
                                  .applied = rs.applied,
                                  .conflicts = rs.conflicts,
                                  .unavailable = rs.unavailable,
                                  .entries = rs.entries,
                                  .gap_fills = rs.gap_fills};
        g.replica = &mr;
    }
    api_worker *aw = aw_of(r);
    if (nd_metrics_render(api->metrics, &g, aw->sh.out) < 0) {
        evbuffer_drain(aw->sh.out, evbuffer_get_length(aw->sh.out));
        nd_api_error(r, 500, "internal", "out of memory");
        return;
    }
    nd_req_reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", aw->sh.out);
    evbuffer_drain(aw->sh.out, evbuffer_get_length(aw->sh.out));
}

/* ---- /replica (issue 14) ---- */

/* GET /replica: this node's place in the stream, and the digest of its
 * committed documents (kept by the registry as changes commit: O(1), so
 * any number of requests costs the loops nothing). An operator's read: the
 * token is asked for whenever one is configured. */
static void handle_replica(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    if (!nd_api_operator(r))
        return;
    uint64_t n = 0, digest = 0;
    if (nd_registry_digest(api->reg, &n, &digest) < 0) {
        nd_api_loading(r);
        return;
    }
    nd_reply w;
    nd_reply_object(nd_api_body_begin(r, &w));
    nd_reply_key(&w, "replicated");
    nd_reply_bool(&w, api->replica != NULL);
    if (api->replica) {
        nd_replica_stats rs;
        nd_replica_stats_get(api->replica, &rs);
        const char *why = NULL;
        nd_replica_ready(api->replica, &why);
        nd_reply_key(&w, "node");
        nd_reply_string(&w, rs.node, strlen(rs.node));
        nd_reply_key(&w, "stream");
        nd_reply_string(&w, rs.stream, strlen(rs.stream));
        nd_reply_key(&w, "applied_seq");
        nd_reply_u64(&w, rs.applied_seq);
        nd_reply_key(&w, "stored_seq");
        nd_reply_u64(&w, rs.stored_seq);
        nd_reply_key(&w, "stream_seq");
        nd_reply_u64(&w, rs.stream_seq);
        nd_reply_key(&w, "lag");
        nd_reply_u64(&w, rs.lag);
        nd_reply_key(&w, "connected");
        nd_reply_bool(&w, rs.connected);
        nd_reply_key(&w, "writable");
        nd_reply_bool(&w, rs.writable);
        nd_reply_key(&w, "state");
        const char *state = why ? why : "ready";
        nd_reply_string(&w, state, strlen(state));
        nd_reply_key(&w, "published");
        nd_reply_u64(&w, rs.published);
        nd_reply_key(&w, "applied");
        nd_reply_u64(&w, rs.applied);
        nd_reply_key(&w, "entries");
        nd_reply_u64(&w, rs.entries);
        nd_reply_key(&w, "conflicts");
        nd_reply_u64(&w, rs.conflicts);
    }
    nd_reply_key(&w, "documents");
    nd_reply_u64(&w, n);
    nd_reply_key(&w, "digest");
    nd_reply_simhash(&w, digest);
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 200);
}

/* ---- /fingerprint ---- */

/* Fingerprints text; returns 0, -EILSEQ or -ENOMEM. */
static int fingerprint(nd_req *r, const char *text, size_t len, nd_fingerprint_result *res)
{
    nd_api *api = nd_api_of(r);
    int rc = nd_fingerprint(api->fp, aw_of(r)->fps, text, len, res);
    if (rc == 0) {
        nd_metrics_event(api->metrics, ND_EV_FINGERPRINTS);
        nd_metrics_add(api->metrics, ND_EV_FINGERPRINT_BYTES, len);
    }
    return rc;
}

static void add_fingerprint(nd_reply *w, const nd_fingerprint_result *fr)
{
    nd_reply_object(w);
    nd_reply_key(w, "simhash");
    nd_reply_simhash(w, fr->simhash);
    nd_reply_key(w, "chars");
    nd_reply_u64(w, fr->chars);
    nd_reply_key(w, "features");
    nd_reply_u64(w, fr->features);
    nd_reply_key(w, "version");
    nd_reply_plain(w, ND_FINGERPRINT_VERSION, strlen(ND_FINGERPRINT_VERSION));
    nd_reply_object_end(w);
}

static void reply_fingerprint(nd_req *r, const nd_fingerprint_result *fr)
{
    nd_reply w;
    add_fingerprint(nd_api_body_begin(r, &w), fr);
    nd_api_body_send(r, &w, 200);
}

static void fingerprint_failed(nd_req *r, int rc, const char *field)
{
    if (rc == -EILSEQ)
        nd_api_invalid_field(r, field, "%s is not valid UTF-8", field);
    else
        nd_api_error(r, 500, "internal", "fingerprinting failed: %s", strerror(-rc));
}

/* Fingerprints a validated batch (nd_request_parse_fingerprint()). */
static void fingerprint_batch(nd_req *r, const nd_json_value *texts)
{
    api_worker *aw = aw_of(r);
    nd_json_iter it;
    nd_json_value t;
    size_t n = 0;
    nd_reply w;
    nd_reply_object(nd_api_body_begin(r, &w));
    nd_reply_key(&w, "results");
    nd_reply_array(&w);
    nd_json_iter_init(&it, texts, &aw->sh.parser.js);
    while (nd_json_iter_next(&it, &t)) {
        nd_fingerprint_result fr;
        int rc = fingerprint(r, t.str, t.str_len, &fr);
        if (rc < 0) {
            char field[32];
            snprintf(field, sizeof(field), "texts[%zu]", n);
            evbuffer_drain(aw->sh.out, evbuffer_get_length(aw->sh.out));
            fingerprint_failed(r, rc, field);
            return;
        }
        n++;
        add_fingerprint(&w, &fr);
    }
    nd_reply_array_end(&w);
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 200);
}

static void handle_fingerprint(nd_req *r)
{
    if (!nd_api_authorized_read(r))
        return;
    int kind = nd_api_content_kind(r, true);
    if (!kind)
        return;
    nd_request_limits lim = nd_api_limits(nd_req_config(r));
    nd_request_error e;
    nd_fingerprint_result fr;
    size_t len;
    const char *body = nd_req_body(r, &len);
    if (!body) {
        nd_api_error(r, 500, "internal", "out of memory");
        return;
    }
    if (kind == ND_BODY_TEXT) {
        if (nd_request_text_size(len, &lim, "text", &e) < 0) {
            nd_api_request_error(r, &e);
            return;
        }
        int rc = fingerprint(r, body, len, &fr);
        if (rc < 0)
            fingerprint_failed(r, rc, "text");
        else
            reply_fingerprint(r, &fr);
        return;
    }
    nd_fingerprint_request rq;
    if (nd_request_parse_fingerprint(&aw_of(r)->sh.parser, body, len, &lim, &rq, &e) < 0) {
        nd_api_request_error(r, &e);
    } else if (rq.texts) {
        fingerprint_batch(r, rq.texts);
    } else {
        int rc = fingerprint(r, rq.text, rq.text_len, &fr);
        if (rc < 0)
            fingerprint_failed(r, rc, "text");
        else
            reply_fingerprint(r, &fr);
    }
}

/* ---- /check-original ---- */

static void op_free(op_state *op)
{
    if (!op)
        return;
    nd_check_res_release(&op->res);
    free(op->rq.meta);
    free(op->rq.policy);
    free(op->own_matches);
    free(op->journaled);
    if (op->on_heap) {
        free((char *)op->rq.id);
        free((char *)op->rq.text);
        free((char *)op->rq.account);
        free(op);
    }
}

static const char *verdict_name(int v)
{
    return v == ND_VERDICT_DUPLICATE ? "duplicate"
           : v == ND_VERDICT_PARTIAL ? "partial_copy"
                                     : "original";
}

static void add_match(nd_reply *w, const nd_match *m, bool account_given)
{
    const nd_doc *d = m->doc;
    nd_reply_object(w);
    nd_reply_key(w, "id");
    nd_reply_string(w, d->id, d->id_len);
    nd_reply_key(w, "simhash");
    nd_reply_simhash(w, d->simhash);
    nd_reply_key(w, "distance");
    nd_reply_u64(w, m->distance);
    nd_reply_key(w, "similarity");
    add_similarity(w, m->distance);
    nd_reply_key(w, "resemblance");
    nd_reply_fraction(w, m->resemblance);
    nd_reply_key(w, "containment");
    nd_reply_fraction(w, m->containment);
    nd_reply_key(w, "kind");
    const char *kind = nd_match_kind_name((nd_match_kind)m->kind);
    nd_reply_plain(w, kind, strlen(kind));
    nd_reply_key(w, "registered_at");
    nd_reply_time(w, d->registered_at_us);
    nd_reply_key(w, "meta");
    nd_api_add_meta(w, d);
    nd_workflow_add_match(w, m, account_given);
    nd_reply_object_end(w);
}

/* The counter of neardup_checks_total a verdict (enum nd_verdict) adds to. */
static enum nd_event verdict_event(int verdict)
{
    switch (verdict) {
    case ND_VERDICT_DUPLICATE: return ND_EV_CHECK_DUPLICATE;
    case ND_VERDICT_PARTIAL: return ND_EV_CHECK_PARTIAL;
    default: return ND_EV_CHECK_ORIGINAL;
    }
}

static void reply_check(nd_req *r, op_state *op)
{
    nd_api *api = nd_api_of(r);
    nd_check_res *res = &op->res;
    const nd_check_req *rq = &op->rq;
    nd_reply w;
    nd_reply_object(nd_api_body_begin(r, &w));
    nd_reply_key(&w, "original");
    nd_reply_bool(&w, res->original);
    nd_reply_key(&w, "verdict");
    const char *verdict = verdict_name(res->verdict);
    nd_reply_plain(&w, verdict, strlen(verdict));
    nd_reply_key(&w, "simhash");
    nd_reply_simhash(&w, rq->simhash);
    nd_reply_key(&w, "chars");
    nd_reply_u64(&w, rq->chars);
    nd_reply_key(&w, "version");
    nd_reply_plain(&w, ND_RECORD_VERSION, strlen(ND_RECORD_VERSION));
    if (rq->id) {
        nd_reply_key(&w, "id");
        nd_reply_string(&w, rq->id, rq->id_len);
    }
    nd_reply_key(&w, "registered");
    nd_reply_bool(&w, res->registered);
    if (res->registered && res->doc) {
        nd_reply_key(&w, "registered_at");
        nd_reply_time(&w, res->doc->registered_at_us);
    }
    if (rq->id) {
        nd_reply_key(&w, "recorded");
        nd_reply_bool(&w, op->recorded);
    }
    nd_reply_key(&w, "matches");
    nd_reply_array(&w);
    for (size_t i = 0; i < res->nmatches; i++)
        add_match(&w, &res->matches[i], rq->account != NULL);
    nd_reply_array_end(&w);
    nd_reply_key(&w, "truncated");
    nd_reply_bool(&w, res->truncated);
    nd_reply_key(&w, "passages");
    nd_reply_array(&w);
    size_t np = res->npassages < API_PASSAGES ? res->npassages : API_PASSAGES;
    for (size_t i = 0; i < np; i++) {
        nd_reply_object(&w);
        nd_reply_key(&w, "start");
        nd_reply_u64(&w, res->passages[i].start);
        nd_reply_key(&w, "end");
        nd_reply_u64(&w, res->passages[i].end);
        nd_reply_object_end(&w);
    }
    nd_reply_array_end(&w);
    nd_workflow_add_action(&w, res);
    nd_reply_object_end(&w);
    nd_metrics_event(api->metrics, verdict_event(res->verdict));
    nd_api_body_send(r, &w, 200);
}

static void op_resume(nd_task *t);

/* ---- the detections (issue 13): a check with an id judged not original
 * is answered once its detection is durable ---- */

static void journal_resume(nd_task *t)
{
    nd_req *r = (nd_req *)((char *)t - offsetof(nd_req, task));
    op_state *op = r->op;
    r->op = NULL;
    if (op->status == 0) {
        op->recorded = true;
        reply_check(r, op);
    } else {
        nd_api_store_error(r, op->status, "the detection");
    }
    op_free(op);
}

/* From another thread: keeps status in r's op and runs resume on the
 * request's own loop. */
static void op_post(nd_req *r, int status, void (*resume)(nd_task *t))
{
    op_state *op = r->op;
    op->status = status;
    r->task.fn = resume;
    nd_worker_post(r->worker, &r->task);
}

/* The store's commit of the journal entry (its thread, or this one for the
 * memory store): back to the request's own loop. */
static void journal_done(void *arg, int status)
{
    op_post(arg, status, journal_resume);
}

/* Moves what a waiting answer needs out of the stack and the worker's
 * scratch: op itself (a query's lives on the handler's stack), its id and
 * account, its matches. Returns the op on the heap. */
static op_state *op_keep(op_state *op)
{
    if (!op->on_heap) {
        op_state *h = malloc(sizeof(*h));
        char *id = op->rq.id ? malloc(op->rq.id_len + 1) : NULL;
        char *account = op->rq.account ? malloc(op->rq.account_len + 1) : NULL;
        if (!h || (op->rq.id && !id) || (op->rq.account && !account))
            nd_die_oom(__func__);
        *h = *op;
        h->on_heap = true;
        if (id) {
            memcpy(id, op->rq.id, op->rq.id_len);
            id[op->rq.id_len] = 0;
        }
        if (account) {
            memcpy(account, op->rq.account, op->rq.account_len);
            account[op->rq.account_len] = 0;
        }
        h->rq.id = id;
        h->rq.account = account;
        h->rq.text = NULL; /* answered without it */
        h->res.passages = h->passages;
        op = h;
    }
    if (op->res.nmatches && op->res.matches != op->own_matches) {
        if (!(op->own_matches = malloc(op->res.nmatches * sizeof(nd_match))))
            nd_die_oom(__func__);
        memcpy(op->own_matches, op->res.matches, op->res.nmatches * sizeof(nd_match));
        op->res.matches = op->own_matches;
    }
    op->res.hits = NULL;
    op->res.keys = NULL;
    op->res.ahits = NULL;
    return op;
}

/* Answers a decided check (op is taken): at once, or, for a check with an
 * id judged not original, once its detection is durable. */
static void answer_check(nd_req *r, op_state *op)
{
    nd_store_event ev;
    char *value = op->no_record ? NULL : nd_workflow_detection(&op->rq, &op->res, &ev);
    if (!value) {
        reply_check(r, op);
        op_free(op);
        return;
    }
    op = op_keep(op);
    op->journaled = value;
    r->op = op;
    int rc = nd_store_event_put(nd_api_of(r)->store, &ev, journal_done, r);
    if (rc < 0) {
        r->op = NULL;
        nd_api_store_error(r, rc, "the detection");
        op_free(op);
    }
}

/* Registry hand-off (another thread): back to the request's own loop. */
static void op_done(void *arg, nd_reg_change *ch, int status)
{
    nd_req *r = arg;
    op_state *op = r->op;
    op->ch = ch;
    op->status = status;
    r->task.fn = op_resume;
    nd_worker_post(r->worker, &r->task);
}

/* The worker's tools for making a question (question.h). */
static nd_question_tools question_tools(nd_api *api, api_worker *aw)
{
    return (nd_question_tools){
        .fp = api->fp, .sk = aw->sk, .fps = aw->fps, .sks = aw->sks, .anchors = aw->anchors};
}

/* Sketches the text into the worker's scratch and points the question's
 * stage-2 fields at it (valid until this worker sketches another text).
 * Returns 0 or -errno. */
static int sketch_check(nd_api *api, api_worker *aw, op_state *op)
{
    /* The anchors now; the sketches when stage 1 finds candidates (most
     * queries find none), or now for a registration, which stores one. */
    int mode = op->sketched - 1; /* -1: tokenized again (question.h) */
    op->sketched = 0;            /* a run after a wait sketches again */
    nd_question_tools qt = question_tools(api, aw);
    nd_question_room room = {.sketch = aw->sketch, .probe = aw->probe, .enc = aw->enc};
    return nd_question_sketch(&qt, &op->rq, mode, false, false, &room);
}

static void run_check(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    op_state *op = r->op;
    api_worker *aw = aw_of(r);
    op->res.hits = aw->hits;
    op->res.matches = aw->matches;
    op->res.keys = aw->keys;
    op->res.cap = aw->cap;
    op->res.ahits = aw->ahits;
    op->res.acap = API_ANCHOR_HITS;
    op->res.passages = op->passages;
    op->res.passages_cap = API_PASSAGES;
    int rc = sketch_check(api, aw, op);
    if (rc == 0)
        rc = nd_registry_check(api->reg, &op->rq, &op->res, op_done, r);
    if (rc == ND_REG_QUEUED && op->res.nmatches) {
        /* Answered after the commit: keep the matches out of the worker's
         * scratch, which the requests meanwhile reuse. */
        if (!(op->own_matches = malloc(op->res.nmatches * sizeof(nd_match))))
            nd_die_oom(__func__);
        memcpy(op->own_matches, op->res.matches, op->res.nmatches * sizeof(nd_match));
        op->res.matches = op->own_matches;
    }
    if (rc == ND_REG_QUEUED || rc == ND_REG_WAIT)
        return; /* op_resume() answers */
    r->op = NULL;
    if (rc == 0) {
        answer_check(r, op);
        return;
    } else if (rc == -EEXIST) {
        nd_metrics_event(api->metrics, ND_EV_ID_CONFLICT);
        nd_api_id_error(r, 409, "id_conflict", op->rq.id, op->rq.id_len,
                        "this id is registered with a different text");
    } else if (rc == -EAGAIN) {
        nd_api_loading(r);
    } else if (rc == -ENOMEM) {
        nd_api_error(r, 500, "internal", "out of memory");
    } else {
        nd_api_store_error(r, rc, "the registration");
    }
    op_free(op);
}

static void run_delete(nd_req *r);

/* ---- consistency "latest" (issue 14): a read waits until this replica
 * has applied the stream's last entry ---- */

static void latest_resume(nd_task *t)
{
    nd_req *r = (nd_req *)((char *)t - offsetof(nd_req, task));
    op_state *op = r->op;
    if (op->status == 0) {
        op->when_latest(r);
        return;
    }
    r->op = NULL;
    nd_api_latest_error(r, op->status);
    op_free(op);
}

/* The replica's thread: back to the request's own loop. */
static void latest_done(void *arg, int status)
{
    op_post(arg, status, latest_resume);
}

/* Runs then(r) on r->op (on the heap) once this node holds the stream's
 * latest state: now on a single node, after the catch-up on a replica;
 * answers the error if the replica cannot. */
static void when_latest(nd_req *r, op_state *op, void (*then)(nd_req *r))
{
    nd_api *api = nd_api_of(r);
    r->op = op;
    if (!api->replica) {
        then(r);
        return;
    }
    op->when_latest = then;
    int rc = nd_replica_sync(api->replica, latest_done, r);
    if (rc < 0) {
        r->op = NULL;
        nd_api_latest_error(r, rc);
        op_free(op);
    }
}

/* Answers 200 {"id":id,"deleted":true}. */
static void reply_deleted(nd_req *r, const op_state *op)
{
    nd_reply w;
    nd_reply_object(nd_api_body_begin(r, &w));
    nd_reply_key(&w, "id");
    nd_reply_string(&w, op->rq.id, op->rq.id_len);
    nd_reply_key(&w, "deleted");
    nd_reply_bool(&w, true);
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 200);
}

/* Drops the last answer and asks the registry again. */
static void op_again(nd_req *r, op_state *op)
{
    nd_check_res_release(&op->res);
    free(op->own_matches);
    op->own_matches = NULL;
    if (op->is_delete)
        run_delete(r);
    else
        run_check(r);
}

static void op_resume(nd_task *t)
{
    nd_req *r = (nd_req *)((char *)t - offsetof(nd_req, task));
    nd_api *api = nd_api_of(r);
    op_state *op = r->op;
    if (!op->ch) { /* waited behind another change of this id: ask again */
        op_again(r, op);
        return;
    }
    int rc = nd_registry_complete(api->reg, op->ch, op->status);
    op->ch = NULL;
    if (rc == -ESTALE && op->stale_tries++ < ND_API_STALE_TRIES) {
        op_again(r, op); /* another replica wrote first: on the newer state */
        return;
    }
    r->op = NULL;
    if (op->is_delete) {
        nd_metrics_event(api->metrics, rc == 0 ? ND_EV_DELETED : ND_EV_DELETE_FAILED);
        if (rc == 0)
            reply_deleted(r, op);
        else
            nd_api_store_error(r, rc, "the deletion");
    } else {
        nd_metrics_event(api->metrics, rc == 0 ? ND_EV_REGISTERED : ND_EV_REGISTER_FAILED);
        if (rc == 0) {
            answer_check(r, op);
            return;
        }
        nd_api_store_error(r, rc, "the registration");
    }
    op_free(op);
}

static void reply_too_short(nd_req *r, uint32_t chars)
{
    nd_api *api = nd_api_of(r);
    nd_metrics_event(api->metrics, ND_EV_TOO_SHORT);
    nd_reply w;
    nd_api_error_begin(r, &w, "text_too_short",
                       "the text has %u characters after normalization; at least %u are needed to "
                       "judge it",
                       chars, api->cfg->min_chars);
    nd_reply_key(&w, "chars");
    nd_reply_u64(&w, chars);
    nd_reply_key(&w, "min_chars");
    nd_reply_u64(&w, api->cfg->min_chars);
    nd_api_error_send(r, &w, 422);
}

/* Makes the question of the text (question.h): tokenized once for both
 * stages, the anchors in the worker's scratch (op->sketched, for
 * sketch_check()) and the fingerprint from the same tokens. Returns 0,
 * ND_QUESTION_TOO_SHORT, -EILSEQ or -ENOMEM. */
static int fingerprint_check(nd_req *r, op_state *op)
{
    nd_api *api = nd_api_of(r);
    api_worker *aw = aw_of(r);
    nd_question_tools qt = question_tools(api, aw);
    int mode;
    int rc = nd_question_make(&qt, &op->rq, api->cfg->min_chars, &mode);
    if (rc < 0)
        return rc;
    nd_metrics_event(api->metrics, ND_EV_FINGERPRINTS);
    nd_metrics_add(api->metrics, ND_EV_FINGERPRINT_BYTES, op->rq.text_len);
    op->sketched = mode + 1;
    return rc;
}

/* What the caller of a check may write (answer.h): a registration needs
 * the right to name its account (403 forbidden), a detection is recorded
 * only when the caller may name the check's account (else *no_record).
 * An account the caller may not name is not evidence of anything: the
 * check is judged as if it named none. A client (a token without a role)
 * names any account, and its registrations are stored with its name: it
 * owns them. A write without an account from a token that acts for
 * exactly one account is that account's; from a token of several, a
 * registration is refused (400 invalid_field account) and a detection not
 * recorded. Registering an id that exists needs the right to change that
 * document. Without a token configured every caller may do everything.
 * Returns false once answered. */
static bool check_rights(nd_req *r, nd_check_req *rq, bool *no_record)
{
    nd_api_identify(r);
    *no_record = false;
    const nd_auth_identity *who = r->who;
    if (!rq->account && (rq->do_register || rq->id) && who && who->naccounts) {
        size_t len;
        const char *account = nd_auth_account(who, 0, &len);
        if (who->naccounts == 1) {
            rq->account = account;
            rq->account_len = len;
        } else if (rq->do_register) {
            nd_api_invalid_field(r, "account",
                                 "the token \"%s\" acts for %u accounts: name the one this "
                                 "document is registered for in account",
                                 who->name, who->naccounts);
            return false;
        }
    }
    if (rq->account && !nd_api_may_name(r, rq->account, rq->account_len)) {
        if (rq->do_register) {
            nd_api_forbidden(r, "the token \"%s\" does not act for this account", r->client);
            return false;
        }
        rq->account = NULL; /* judged as a check without an account */
        rq->account_len = 0;
    }
    if (rq->id && !(rq->account ? nd_api_may_name(r, rq->account, rq->account_len)
                                : nd_api_is_operator(r) || nd_api_is_client(r)))
        *no_record = true;
    if (rq->do_register && nd_api_is_client(r)) {
        rq->client = who->name;
        rq->client_len = strlen(who->name);
    }
    /* Registering an id that is registered already writes to that
     * document (an upgrade in place takes the request's meta): its
     * account's right too. */
    nd_doc *d = NULL;
    if (rq->do_register && rq->id &&
        nd_registry_get(nd_api_of(r)->reg, rq->id, rq->id_len, &d) == 0) {
        bool may = nd_api_may_change(r, d); /* else answered 403 */
        nd_doc_release(d);
        return may;
    }
    return true;
}

static void handle_check(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    if (!nd_api_authorized_read(r) || !nd_api_content_kind(r, false))
        return;
    size_t len;
    const char *body = nd_req_body(r, &len);
    if (!body) {
        nd_api_error(r, 500, "internal", "out of memory");
        return;
    }
    nd_request_limits lim = nd_api_limits(api->cfg);
    nd_request_error e;
    /* The request is parsed into its one shape, which goes to the registry
     * as it is. Only a registration can wait for the store and outlive this
     * call; a query is answered now, from state on the stack (no
     * allocation). */
    op_state query = {0}, *op = &query;
    nd_check_req *rq = &query.rq;
    if (nd_request_parse_check(&aw_of(r)->sh.parser, body, len, &lim, rq, &e) < 0) {
        nd_api_request_error(r, &e);
        return;
    }
    if (rq->do_register && !nd_api_authorized(r)) /* before any work is done */
        return;
    if (!check_rights(r, rq, &query.no_record))
        return;
    /* meta is read into a tree only for an authorized registration (and
     * bounded before that); a query ignores it. */
    if (rq->do_register && nd_request_check_meta(rq, &lim, &e) < 0) {
        nd_api_request_error(r, &e);
        return;
    }
    /* reprint/whitelist: validated on every check, kept by a registration
     * (only requests that carry them pay for it). */
    if ((rq->policy_in.reprint || rq->policy_in.whitelist_raw) &&
        nd_policy_of_check(rq, &e) < 0) {
        free(rq->meta);
        nd_api_request_error(r, &e);
        return;
    }
    bool wait_latest = rq->latest && !rq->do_register && api->replica;
    if (rq->do_register || wait_latest) {
        /* It may be decided again once the worker's parser has served other
         * requests (a query waits for the replica to catch up): its own
         * copies of the text and the id. */
        char *id = NULL, *text;
        if (!(op = calloc(1, sizeof(*op))) || (rq->id && !(id = malloc(rq->id_len + 1))) ||
            !(text = malloc(rq->text_len + 1)))
            nd_die_oom(__func__);
        *op = query; /* the meta and the policy are op's from here */
        op->on_heap = true;
        if (id) {
            memcpy(id, rq->id, rq->id_len);
            id[rq->id_len] = 0;
        }
        memcpy(text, rq->text, rq->text_len);
        op->rq.id = id;
        op->rq.text = text;
        if (rq->do_register) { /* its audit entry, in its transaction */
            op->rq.audit = nd_workflow_register_audit;
            op->rq.audit_arg = r;
        }
        if (rq->account) {
            char *account = malloc(rq->account_len + 1);
            if (!account)
                nd_die_oom(__func__);
            memcpy(account, rq->account, rq->account_len);
            account[rq->account_len] = 0;
            op->rq.account = account;
        }
    }
    int rc = fingerprint_check(r, op);
    if (rc < 0) {
        fingerprint_failed(r, rc, "text");
    } else if (rc == ND_QUESTION_TOO_SHORT) {
        reply_too_short(r, op->rq.chars);
    } else {
        if (wait_latest) {
            op->sketched = 0; /* the worker's scratch serves others meanwhile */
            when_latest(r, op, run_check);
            return;
        }
        r->op = op;
        run_check(r);
        return;
    }
    op_free(op);
}

/* ---- /documents/{id} ---- */

/* Decodes the id from the path into op; answers and returns -1 on error. */
static int document_id(nd_req *r, op_state *op)
{
    nd_request_error e;
    char *id;
    if (nd_request_parse_document_id(r->path + strlen("/documents/"), &id, &op->rq.id_len, &e) <
        0) {
        nd_api_request_error(r, &e);
        return -1;
    }
    op->rq.id = id; /* owned (op is on the heap) */
    return 0;
}

static void run_delete(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    op_state *op = r->op;
    nd_doc *d = NULL;
    if (nd_registry_get(api->reg, op->rq.id, op->rq.id_len, &d) == 0) {
        bool may = nd_api_may_change(r, d); /* else answered 403 */
        nd_doc_release(d);
        if (!may) {
            r->op = NULL;
            op_free(op);
            return;
        }
    }
    int rc = nd_registry_delete(api->reg, op->rq.id, op->rq.id_len, nd_workflow_delete_audit, r,
                                op_done, r);
    if (rc == ND_REG_QUEUED || rc == ND_REG_WAIT)
        return;
    r->op = NULL;
    if (rc == 0) {
        nd_metrics_event(api->metrics, ND_EV_DELETED);
        reply_deleted(r, op);
    } else if (rc == -ENOENT) {
        nd_api_id_error(r, 404, "not_found", op->rq.id, op->rq.id_len, "no document with this id");
    } else if (rc == -EAGAIN) {
        nd_api_loading(r);
    } else {
        nd_api_store_error(r, rc, "the deletion");
    }
    op_free(op);
}

/* Answers 200 with the stored record of d. */
static void reply_document(nd_req *r, const nd_doc *d)
{
    nd_reply w;
    nd_reply_object(nd_api_body_begin(r, &w));
    nd_reply_key(&w, "id");
    nd_reply_string(&w, d->id, d->id_len);
    nd_reply_key(&w, "simhash");
    nd_reply_simhash(&w, d->simhash);
    nd_reply_key(&w, "chars");
    nd_reply_u64(&w, d->chars);
    nd_reply_key(&w, "version");
    nd_reply_string(&w, d->version, strlen(d->version));
    nd_reply_key(&w, "registered_at");
    nd_reply_time(&w, d->registered_at_us);
    nd_reply_key(&w, "meta");
    nd_api_add_meta(&w, d);
    nd_workflow_add_document(r, &w, d);
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 200);
}

/* GET /documents/{id}: answers from the registry. */
static void run_get(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    op_state *op = r->op;
    r->op = NULL;
    nd_doc *d = NULL;
    int rc = nd_registry_get(api->reg, op->rq.id, op->rq.id_len, &d);
    if (rc == 0)
        reply_document(r, d);
    else if (rc == -EAGAIN)
        nd_api_loading(r);
    else
        nd_api_id_error(r, 404, "not_found", op->rq.id, op->rq.id_len, "no document with this id");
    nd_doc_release(d);
    op_free(op);
}

#define DOCUMENT_METHODS (EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_DELETE)
#define DOCUMENT_ALLOW "GET, HEAD, DELETE"

static void handle_document(nd_req *r)
{
    /* /documents/{id}/policy, /revoke, /restore, /copies (issue 13). */
    const char *rest = r->path + strlen("/documents/");
    size_t id_enc_len;
    const char *sub = nd_workflow_sub(rest, &id_enc_len);
    if (sub) {
        nd_workflow_document(r, sub, rest, id_enc_len);
        return;
    }
    if (!(r->method & DOCUMENT_METHODS)) { /* the route also takes the sub-resources' */
        nd_req_add_header(r, "Allow", DOCUMENT_ALLOW);
        nd_api_error(r, 405, "method_not_allowed", "%s is not allowed here; allowed: %s",
                     r->method == EVHTTP_REQ_PUT     ? "PUT"
                     : r->method == EVHTTP_REQ_PATCH ? "PATCH"
                                                     : "POST",
                     DOCUMENT_ALLOW);
        return;
    }
    if (!(r->method == EVHTTP_REQ_DELETE ? nd_api_authorized(r) : nd_api_authorized_read(r)))
        return;
    op_state *op = calloc(1, sizeof(*op));
    if (!op)
        nd_die_oom(__func__);
    op->on_heap = true;
    if (document_id(r, op) < 0) {
        op_free(op);
        return;
    }
    if (r->method == EVHTTP_REQ_DELETE) {
        op->is_delete = true;
        r->op = op;
        run_delete(r);
        return;
    }
    bool latest;
    nd_request_error e;
    if (nd_request_query_consistency(nd_api_query(r), &latest, &e) < 0) {
        nd_api_request_error(r, &e);
        op_free(op);
        return;
    }
    if (latest) {
        when_latest(r, op, run_get);
        return;
    }
    r->op = op;
    run_get(r);
}

#define GET_HEAD (EVHTTP_REQ_GET | EVHTTP_REQ_HEAD)

const nd_route_def nd_api_routes[] = {
    {"/healthz", false, ND_ROUTE_HEALTHZ, GET_HEAD, "GET, HEAD", handle_healthz},
    {"/readyz", false, ND_ROUTE_READYZ, GET_HEAD, "GET, HEAD", handle_readyz},
    {"/metrics", false, ND_ROUTE_METRICS, GET_HEAD, "GET, HEAD", handle_metrics},
    {"/replica", false, ND_ROUTE_METRICS, GET_HEAD, "GET, HEAD", handle_replica},
    {"/fingerprint", false, ND_ROUTE_FINGERPRINT, EVHTTP_REQ_POST, "POST", handle_fingerprint},
    {"/check-original", false, ND_ROUTE_CHECK, EVHTTP_REQ_POST, "POST", handle_check},
    {"/documents/", true, ND_ROUTE_DOCUMENTS,
     DOCUMENT_METHODS | EVHTTP_REQ_PUT | EVHTTP_REQ_PATCH | EVHTTP_REQ_POST, DOCUMENT_ALLOW,
     handle_document},
    {"/audit", false, ND_ROUTE_DOCUMENTS, GET_HEAD, "GET, HEAD", nd_workflow_audit},
    {"/import", false, ND_ROUTE_DOCUMENTS, EVHTTP_REQ_POST, "POST", nd_backfill_handle},
    {NULL, false, ND_ROUTE_OTHER, 0, NULL, NULL},
};
