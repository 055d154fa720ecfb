/* api.c - request handlers: parse, validate, fingerprint, ask the registry,
 * answer. Each handler ends in exactly one reply, now or after a hand-off. */
#include "api.h"
#include "json.h"
#include "log.h"
#include "request.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/buffer.h>

#define LOOP_STALL_MS 10000 /* /healthz fails if a loop has not run for this long */
#define API_PASSAGES 64     /* most passages listed in one answer */
#define API_ANCHOR_HITS 64  /* anchor-index candidates asked for, at most */

typedef struct api_worker {
    nd_fp_scratch *fps;
    nd_sketcher *sk;        /* this worker's (immutable once made) */
    nd_sk_scratch *sks;     /* sketch of the text being checked, for passages */
    nd_sketch sketch[2];    /* the text's, in both modes (word, char) */
    nd_anchors anchors[2];
    uint32_t probe[2 * ND_ANCHORS_QUERY]; /* both modes' anchors */
    uint8_t enc[ND_SKETCH_ENCODED_MAX];
    nd_index_hit *hits;
    nd_match *matches;
    int64_t *keys;
    size_t cap;
    nd_anchor_hit ahits[API_ANCHOR_HITS];
    struct evbuffer *out; /* reply buffer, emptied by every send */
    nd_request_parser parser; /* decoded request strings and members */
} api_worker;

/* State of a /check-original or DELETE that waits for the store. */
typedef struct op_state {
    bool is_delete;
    nd_check_req rq;
    nd_check_res res;
    uint32_t features;
    nd_reg_change *ch; /* set by the hand-off: a change to complete */
    int status;
    const char *text;  /* the submitted text: borrowed (a query) or owned
                        * (a registration, which may be decided again later) */
    size_t text_len;
    nd_match *own_matches; /* a queued answer's matches, out of the worker's scratch */
    nd_passage passages[API_PASSAGES];
    char *id;          /* an owned copy when on_heap, else borrowed from the
                        * worker's request parser (valid until its reply) */
    size_t id_len;
    char *meta;        /* owned */
    bool on_heap;      /* waits for the store: allocated, freed by op_free() */
} op_state;

static nd_api *api_of(nd_req *r)
{
    return nd_http_app(r);
}

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
    aw->cap += API_ANCHOR_HITS;
    aw->hits = calloc(aw->cap, sizeof(*aw->hits));
    aw->matches = calloc(aw->cap, sizeof(*aw->matches));
    aw->keys = calloc(aw->cap, sizeof(*aw->keys));
    aw->out = evbuffer_new();
    int rc = aw->hits && aw->matches && aw->keys && aw->out ? nd_fp_scratch_create(&aw->fps)
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
    if (aw->out)
        evbuffer_free(aw->out);
    nd_request_parser_finish(&aw->parser);
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
    else if (api->store && !nd_store_writable(api->store))
        w = "storage_unavailable";
    if (why)
        *why = w;
    return w == NULL;
}

/* ---- small helpers ---- */

static void reply_static(nd_req *r, int status, const char *ctype, const char *body)
{
    api_worker *aw = aw_of(r);
    evbuffer_add_reference(aw->out, body, strlen(body), NULL, NULL);
    nd_req_reply(r, status, ctype, aw->out);
    evbuffer_drain(aw->out, evbuffer_get_length(aw->out));
}

static json_t *field_extra(const char *field)
{
    return json_pack("{s:s}", "field", field);
}

#define invalid_field(r, field, ...) \
    nd_req_reply_error((r), 400, "invalid_field", field_extra(field), __VA_ARGS__)

static void reply_store_error(nd_req *r, int rc, const char *what)
{
    if (rc == -EBUSY) { /* the store's queue is full: shed, do not wait */
        nd_req_add_header(r, "Retry-After", "1");
        nd_req_reply_error(r, 503, "storage_unavailable", NULL,
                           "%s was not queued: the store is behind (slow disk); retry", what);
        return;
    }
    if (rc == -ESHUTDOWN) { /* a request that waited behind a change, at shutdown */
        nd_req_add_header(r, "Retry-After", "1");
        nd_req_reply_error(r, 503, "shutting_down", NULL,
                           "%s was not done: the server is stopping; retry", what);
        return;
    }
    const char *why = rc == -ENOSPC ? "storage is full" : strerror(-rc);
    nd_log(ND_LOG_WARN, "%s failed (request %s): %s", what, r->rid, why);
    nd_req_reply_error(r, 503, "storage_unavailable", NULL, "%s could not be stored: %s", what,
                       why);
}

/* True when the request may go on (no token configured, or the right one
 * sent); otherwise answers 401 with WWW-Authenticate and returns false. */
static bool authorized(nd_req *r)
{
    nd_api *api = api_of(r);
    if (!api->auth)
        return true;
    int rc = nd_auth_check(api->auth, nd_req_header(r, "Authorization"));
    if (rc == ND_AUTH_OK)
        return true;
    bool invalid = rc == ND_AUTH_INVALID;
    nd_req_add_header(r, "WWW-Authenticate",
                      invalid ? "Bearer realm=\"neardup\", error=\"invalid_token\""
                              : "Bearer realm=\"neardup\"");
    nd_req_reply_error(r, 401, "unauthorized", NULL, "%s",
                       invalid ? "the bearer token is not valid"
                               : "this request needs \"Authorization: Bearer <token>\"");
    return false;
}

/* Reads (fingerprints, checks, documents, metrics) are open unless
 * --auth-all; answers 401 like authorized() when not. */
static bool authorized_read(nd_req *r)
{
    return !api_of(r)->cfg->auth_all || authorized(r);
}

static void reply_loading(nd_req *r)
{
    nd_api *api = api_of(r);
    nd_req_add_header(r, "Retry-After", "1");
    nd_req_reply_error(r, 503, "loading", NULL, "the index is being loaded (%llu of %llu documents)",
                       (unsigned long long)atomic_load(&api->load_done),
                       (unsigned long long)atomic_load(&api->load_total));
}

static nd_request_limits limits_of(const nd_config *cfg)
{
    return (nd_request_limits){.max_batch = cfg->max_batch, .max_meta = cfg->max_meta,
                               .max_text = cfg->max_text, .default_k = cfg->k};
}

/* Answers a refused request with its error. */
static void reply_request_error(nd_req *r, const nd_request_error *e)
{
    json_t *extra = NULL;
    if (e->field[0])
        extra = field_extra(e->field);
    else if (e->line)
        extra = json_pack("{s:i,s:i}", "line", (json_int_t)e->line, "column",
                          (json_int_t)e->column);
    nd_req_reply_error(r, e->status, e->code, extra, "%s", e->message);
}

/* Accepts application/json (and, when plain_ok, text/plain). Returns an
 * nd_body_kind, or 0 after answering 415. */
static int content_kind(nd_req *r, bool plain_ok)
{
    nd_request_error e;
    int kind = nd_request_content_kind(nd_req_header(r, "Content-Type"), plain_ok, &e);
    if (!kind)
        reply_request_error(r, &e);
    return kind;
}

/* Reply formatting on the per-request path: literals and digits written
 * straight into the buffer (evbuffer_add_printf is a visible cost there). */
#define ADD_LIT(o, lit) evbuffer_add((o), (lit), sizeof(lit) - 1)

static void add_u32(struct evbuffer *o, uint32_t v)
{
    char tmp[10];
    size_t n = sizeof(tmp);
    do {
        tmp[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    evbuffer_add(o, tmp + n, sizeof(tmp) - n);
}

static void add_bool(struct evbuffer *o, bool v)
{
    if (v)
        ADD_LIT(o, "true");
    else
        ADD_LIT(o, "false");
}

/* Adds "name":"value" for a value that needs no escaping (len < 64). */
static void add_plain_member(struct evbuffer *o, const char *name, const char *value, size_t len)
{
    char buf[128];
    size_t n = strlen(name), pos = 0;
    buf[pos++] = '"';
    memcpy(buf + pos, name, n);
    pos += n;
    memcpy(buf + pos, "\":\"", 3);
    pos += 3;
    memcpy(buf + pos, value, len);
    pos += len;
    buf[pos++] = '"';
    evbuffer_add(o, buf, pos);
}

/* Adds "name":"<16 hex digits>". */
static void add_simhash(struct evbuffer *o, const char *name, uint64_t h)
{
    char hex[17];
    nd_simhash_format(h, hex);
    add_plain_member(o, name, hex, 16);
}

/* Adds "name":"<RFC 3339 time>". */
static void add_time(struct evbuffer *o, const char *name, int64_t us)
{
    char ts[32];
    nd_log_format_time(us, ts);
    add_plain_member(o, name, ts, strlen(ts));
}

/* The similarity 1 - distance / 64 of each distance, as JSON numbers
 * ("%.17g", with ".0" when that reads as an integer). */
static char similarity_text[65][32];
static pthread_once_t similarity_once = PTHREAD_ONCE_INIT;

static void similarity_init(void)
{
    for (unsigned d = 0; d <= 64; d++) {
        char *sim = similarity_text[d];
        snprintf(sim, sizeof(similarity_text[d]), "%.17g", 1.0 - (double)d / 64.0);
        if (!strpbrk(sim, ".e"))
            strcat(sim, ".0");
    }
}

static void add_similarity(struct evbuffer *o, unsigned distance)
{
    pthread_once(&similarity_once, similarity_init);
    const char *sim = similarity_text[distance > 64 ? 64 : distance];
    evbuffer_add(o, sim, strlen(sim));
}

static json_t *simhash_json(uint64_t h)
{
    char hex[17];
    nd_simhash_format(h, hex);
    return json_stringn(hex, 16);
}

static json_t *time_json(int64_t us)
{
    char ts[32];
    nd_log_format_time(us, ts);
    return json_string(ts);
}

static json_t *meta_json(const nd_doc *d)
{
    json_t *m = d->meta ? json_loadb(d->meta, d->meta_len, JSON_ALLOW_NUL, NULL) : NULL;
    return m ? m : json_null();
}

static json_t *doc_json(const nd_doc *d)
{
    return json_pack("{s:s%,s:o,s:i,s:s,s:o,s:o}", "id", d->id, d->id_len, "simhash",
                     simhash_json(d->simhash), "chars", (json_int_t)d->chars, "version",
                     d->version, "registered_at", time_json(d->registered_at_us), "meta",
                     meta_json(d));
}

/* ---- probes ---- */

static void handle_healthz(nd_req *r)
{
    nd_api *api = api_of(r);
    if (nd_http_loops_alive(api->http, LOOP_STALL_MS))
        reply_static(r, 200, "application/json", "{\"status\":\"ok\"}\n");
    else
        nd_req_reply_error(r, 503, "loop_stalled", NULL, "a worker loop has not run for %d ms",
                           LOOP_STALL_MS);
}

static void handle_readyz(nd_req *r)
{
    nd_api *api = api_of(r);
    const char *why;
    if (nd_api_ready(api, &why)) {
        reply_static(r, 200, "application/json", "{\"status\":\"ready\"}\n");
        return;
    }
    if (strcmp(why, "loading") == 0) {
        reply_loading(r);
        return;
    }
    nd_req_reply_error(r, 503, why, NULL, "not ready: %s", why);
}

static void handle_metrics(nd_req *r)
{
    nd_api *api = api_of(r);
    if (!authorized_read(r))
        return;
    nd_registry_stats st;
    nd_registry_stats_get(api->reg, &st);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
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
        .store_writable = api->store ? nd_store_writable(api->store) : true,
        .in_memory = api->store == NULL,
        .uptime_s = (double)((int64_t)now.tv_sec * 1000000000 + now.tv_nsec - api->start_ns) / 1e9,
        .store = api->store ? &sst : NULL,
    };
    api_worker *aw = aw_of(r);
    if (nd_metrics_render(api->metrics, &g, aw->out) < 0) {
        evbuffer_drain(aw->out, evbuffer_get_length(aw->out));
        nd_req_reply_error(r, 500, "internal", NULL, "out of memory");
        return;
    }
    nd_req_reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", aw->out);
}

/* ---- /fingerprint ---- */

/* Fingerprints text; returns 0, -EILSEQ or -ENOMEM. */
static int fingerprint(nd_req *r, const char *text, size_t len, nd_fingerprint_result *res)
{
    nd_api *api = api_of(r);
    int rc = nd_fingerprint(api->fp, aw_of(r)->fps, text, len, res);
    if (rc == 0) {
        nd_metrics_event(api->metrics, ND_EV_FINGERPRINTS);
        nd_metrics_add(api->metrics, ND_EV_FINGERPRINT_BYTES, len);
    }
    return rc;
}

static void add_fingerprint(struct evbuffer *o, const nd_fingerprint_result *fr)
{
    evbuffer_add(o, "{", 1);
    add_simhash(o, "simhash", fr->simhash);
    ADD_LIT(o, ",\"chars\":");
    add_u32(o, fr->chars);
    ADD_LIT(o, ",\"features\":");
    add_u32(o, fr->features);
    ADD_LIT(o, ",\"version\":\"" ND_FINGERPRINT_VERSION "\"}");
}

static void reply_fingerprint(nd_req *r, const nd_fingerprint_result *fr)
{
    api_worker *aw = aw_of(r);
    add_fingerprint(aw->out, fr);
    evbuffer_add(aw->out, "\n", 1);
    nd_req_reply(r, 200, "application/json", aw->out);
}

static void fingerprint_failed(nd_req *r, int rc, const char *field)
{
    if (rc == -EILSEQ)
        invalid_field(r, field, "%s is not valid UTF-8", field);
    else
        nd_req_reply_error(r, 500, "internal", NULL, "fingerprinting failed: %s", strerror(-rc));
}

/* Fingerprints a validated batch (nd_request_parse_fingerprint()). */
static void fingerprint_batch(nd_req *r, const nd_json_value *texts)
{
    api_worker *aw = aw_of(r);
    nd_json_iter it;
    nd_json_value t;
    size_t n = 0;
    evbuffer_add(aw->out, "{\"results\":[", 12);
    nd_json_iter_init(&it, texts, &aw->parser.js);
    while (nd_json_iter_next(&it, &t)) {
        nd_fingerprint_result fr;
        int rc = fingerprint(r, t.str, t.str_len, &fr);
        if (rc < 0) {
            char field[32];
            snprintf(field, sizeof(field), "texts[%zu]", n);
            evbuffer_drain(aw->out, evbuffer_get_length(aw->out));
            fingerprint_failed(r, rc, field);
            return;
        }
        if (n++)
            evbuffer_add(aw->out, ",", 1);
        add_fingerprint(aw->out, &fr);
    }
    evbuffer_add(aw->out, "]}\n", 3);
    nd_req_reply(r, 200, "application/json", aw->out);
}

static void handle_fingerprint(nd_req *r)
{
    if (!authorized_read(r))
        return;
    int kind = content_kind(r, true);
    if (!kind)
        return;
    nd_request_limits lim = limits_of(nd_req_config(r));
    nd_request_error e;
    nd_fingerprint_result fr;
    size_t len;
    const char *body = nd_req_body(r, &len);
    if (!body) {
        nd_req_reply_error(r, 500, "internal", NULL, "out of memory");
        return;
    }
    if (kind == ND_BODY_TEXT) {
        if (nd_request_text_size(len, &lim, "text", &e) < 0) {
            reply_request_error(r, &e);
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
    if (nd_request_parse_fingerprint(&aw_of(r)->parser, body, len, &lim, &rq, &e) < 0) {
        reply_request_error(r, &e);
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
    free(op->meta);
    free(op->own_matches);
    if (op->on_heap) {
        free(op->id);
        free((char *)op->text);
        free(op);
    }
}

static void add_meta(struct evbuffer *o, const nd_doc *d)
{
    /* Stored as compact JSON written by jansson: embedded as it is. */
    if (d->meta)
        evbuffer_add(o, d->meta, d->meta_len);
    else
        evbuffer_add(o, "null", 4);
}

/* Adds a fraction in [0, 1] with at most 4 decimals ("0.8125", "1.0"). */
static void add_fraction(struct evbuffer *o, double x)
{
    char buf[8];
    long v = x <= 0 ? 0 : x >= 1 ? 10000 : (long)(x * 10000 + 0.5);
    if (v >= 10000) {
        ADD_LIT(o, "1.0");
        return;
    }
    buf[0] = '0';
    buf[1] = '.';
    for (int i = 5; i >= 2; i--, v /= 10)
        buf[i] = (char)('0' + v % 10);
    size_t n = 6;
    while (n > 3 && buf[n - 1] == '0')
        n--;
    evbuffer_add(o, buf, n);
}

static const char *verdict_name(int v)
{
    return v == ND_VERDICT_DUPLICATE ? "duplicate" : v == ND_VERDICT_PARTIAL ? "partial_copy"
                                                                          : "original";
}

static void add_match(struct evbuffer *o, const nd_match *m)
{
    const nd_doc *d = m->doc;
    ADD_LIT(o, "{\"id\":");
    nd_json_write_string(o, d->id, d->id_len);
    ADD_LIT(o, ",");
    add_simhash(o, "simhash", d->simhash);
    ADD_LIT(o, ",\"distance\":");
    add_u32(o, m->distance);
    ADD_LIT(o, ",\"similarity\":");
    add_similarity(o, m->distance);
    ADD_LIT(o, ",\"resemblance\":");
    add_fraction(o, m->resemblance);
    ADD_LIT(o, ",\"containment\":");
    add_fraction(o, m->containment);
    ADD_LIT(o, ",\"kind\":\"");
    const char *kind = nd_match_kind_name((nd_match_kind)m->kind);
    evbuffer_add(o, kind, strlen(kind));
    ADD_LIT(o, "\",");
    add_time(o, "registered_at", d->registered_at_us);
    ADD_LIT(o, ",\"meta\":");
    add_meta(o, d);
    ADD_LIT(o, "}");
}

static void reply_check(nd_req *r, op_state *op)
{
    nd_api *api = api_of(r);
    nd_check_res *res = &op->res;
    struct evbuffer *o = aw_of(r)->out;
    ADD_LIT(o, "{\"original\":");
    add_bool(o, res->original);
    ADD_LIT(o, ",\"verdict\":\"");
    const char *verdict = verdict_name(res->verdict);
    evbuffer_add(o, verdict, strlen(verdict));
    ADD_LIT(o, "\",");
    add_simhash(o, "simhash", op->rq.simhash);
    ADD_LIT(o, ",\"chars\":");
    add_u32(o, op->rq.chars);
    ADD_LIT(o, ",\"version\":\"" ND_RECORD_VERSION "\"");
    if (op->id) {
        ADD_LIT(o, ",\"id\":");
        nd_json_write_string(o, op->id, op->id_len);
    }
    ADD_LIT(o, ",\"registered\":");
    add_bool(o, res->registered);
    if (res->registered && res->doc) {
        ADD_LIT(o, ",");
        add_time(o, "registered_at", res->doc->registered_at_us);
    }
    ADD_LIT(o, ",\"matches\":[");
    for (size_t i = 0; i < res->nmatches; i++) {
        if (i)
            ADD_LIT(o, ",");
        add_match(o, &res->matches[i]);
    }
    ADD_LIT(o, "],\"truncated\":");
    add_bool(o, res->truncated);
    ADD_LIT(o, ",\"passages\":[");
    size_t np = res->npassages < API_PASSAGES ? res->npassages : API_PASSAGES;
    for (size_t i = 0; i < np; i++) {
        ADD_LIT(o, "{\"start\":");
        add_u32(o, res->passages[i].start);
        ADD_LIT(o, ",\"end\":");
        add_u32(o, res->passages[i].end);
        ADD_LIT(o, "}");
        if (i + 1 < np)
            ADD_LIT(o, ",");
    }
    ADD_LIT(o, "]}\n");
    nd_metrics_event(api->metrics, res->original ? ND_EV_CHECK_ORIGINAL : ND_EV_CHECK_DUPLICATE);
    nd_req_reply(r, 200, "application/json", o);
}

static void op_resume(nd_task *t);

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

/* Sketches the text into the worker's scratch and points the question's
 * stage-2 fields at it (valid until this worker sketches another text).
 * Returns 0 or -errno. */
static int sketch_check(nd_api *api, api_worker *aw, op_state *op)
{
    int mode = nd_sketch_text_modes(aw->sk, aw->sks, op->text, op->text_len, aw->sketch,
                                    aw->anchors, ND_ANCHORS_QUERY, NULL);
    if (mode < 0)
        return mode;
    nd_check_req *rq = &op->rq;
    rq->sketch = aw->sketch;
    uint32_t n = 0; /* both modes' anchors: a document of either mode is found */
    for (int m = 0; m < 2; m++)
        for (uint32_t i = 0; i < aw->anchors[m].n && i < ND_ANCHORS_QUERY; i++)
            aw->probe[n++] = aw->anchors[m].a[i];
    rq->anchors = aw->probe;
    rq->nanchors_query = n;
    const nd_anchors *own = &aw->anchors[mode];
    rq->store_anchors = own->a;
    rq->nanchors_store = own->n < ND_ANCHORS_STORE ? own->n : ND_ANCHORS_STORE;
    rq->scratch = aw->sks;
    rq->sketch_enc = NULL;
    rq->sketch_enc_len = 0;
    if (rq->do_register) {
        rq->sketch_enc_len = nd_sketch_encode(&aw->sketch[mode], aw->enc, sizeof(aw->enc));
        rq->sketch_enc = rq->sketch_enc_len ? aw->enc : NULL;
    }
    nd_verdict_params_default(&rq->params);
    rq->params.min_resemblance = api->cfg->min_resemblance;
    rq->params.min_containment = api->cfg->min_containment;
    rq->max_verify = api->cfg->max_verify;
    return 0;
}

static void run_check(nd_req *r)
{
    nd_api *api = api_of(r);
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
        reply_check(r, op);
    } else if (rc == -EEXIST) {
        nd_metrics_event(api->metrics, ND_EV_ID_CONFLICT);
        nd_req_reply_error(r, 409, "id_conflict", json_pack("{s:s%}", "id", op->id, op->id_len),
                           "this id is registered with a different text");
    } else if (rc == -EAGAIN) {
        reply_loading(r);
    } else if (rc == -ENOMEM) {
        nd_req_reply_error(r, 500, "internal", NULL, "out of memory");
    } else {
        reply_store_error(r, rc, "the registration");
    }
    op_free(op);
}

static void run_delete(nd_req *r);

static void op_resume(nd_task *t)
{
    nd_req *r = (nd_req *)((char *)t - offsetof(nd_req, task));
    nd_api *api = api_of(r);
    op_state *op = r->op;
    if (!op->ch) { /* waited behind another change of this id: ask again */
        nd_check_res_release(&op->res);
        free(op->own_matches);
        op->own_matches = NULL;
        if (op->is_delete)
            run_delete(r);
        else
            run_check(r);
        return;
    }
    int rc = nd_registry_complete(api->reg, op->ch, op->status);
    op->ch = NULL;
    r->op = NULL;
    if (op->is_delete) {
        nd_metrics_event(api->metrics, rc == 0 ? ND_EV_DELETED : ND_EV_DELETE_FAILED);
        if (rc == 0)
            nd_req_reply_json(r, 200, json_pack("{s:s%,s:b}", "id", op->id, op->id_len,
                                                "deleted", 1));
        else
            reply_store_error(r, rc, "the deletion");
    } else {
        nd_metrics_event(api->metrics, rc == 0 ? ND_EV_REGISTERED : ND_EV_REGISTER_FAILED);
        if (rc == 0)
            reply_check(r, op);
        else
            reply_store_error(r, rc, "the registration");
    }
    op_free(op);
}

static void reply_too_short(nd_req *r, uint32_t chars)
{
    nd_api *api = api_of(r);
    nd_metrics_event(api->metrics, ND_EV_TOO_SHORT);
    nd_req_reply_error(r, 422, "text_too_short",
                       json_pack("{s:i,s:i}", "chars", (json_int_t)chars, "min_chars",
                                 (json_int_t)api->cfg->min_chars),
                       "the text has %u characters after normalization; at least %u are "
                       "needed to judge it",
                       chars, api->cfg->min_chars);
}

static void handle_check(nd_req *r)
{
    nd_api *api = api_of(r);
    if (!authorized_read(r) || !content_kind(r, false))
        return;
    size_t len;
    const char *body = nd_req_body(r, &len);
    if (!body) {
        nd_req_reply_error(r, 500, "internal", NULL, "out of memory");
        return;
    }
    nd_request_limits lim = limits_of(api->cfg);
    nd_request_error e;
    nd_check_request cr;
    if (nd_request_parse_check(&aw_of(r)->parser, body, len, &lim, &cr, &e) < 0) {
        reply_request_error(r, &e);
        return;
    }
    if (cr.do_register && !authorized(r)) /* before any work is done */
        return;
    /* meta is read into a tree only for an authorized registration (and
     * bounded before that); a query ignores it. */
    if (cr.do_register && nd_request_check_meta(&cr, &lim, &e) < 0) {
        reply_request_error(r, &e);
        return;
    }
    /* Only a registration can wait for the store and outlive this call; a
     * query is answered now, from state on the stack (no allocation). */
    op_state query = {0}, *op = &query;
    if (cr.do_register) {
        char *text;
        if (!(op = calloc(1, sizeof(*op))) || !(op->id = malloc(cr.id_len + 1))
            || !(text = malloc(cr.text_len + 1)))
            nd_die_oom(__func__);
        op->on_heap = true;
        memcpy(op->id, cr.id, cr.id_len);
        op->id[cr.id_len] = 0;
        memcpy(text, cr.text, cr.text_len);
        op->text = text;
    } else {
        op->id = (char *)cr.id;
        op->text = cr.text;
    }
    op->text_len = cr.text_len;
    op->id_len = cr.id ? cr.id_len : 0;
    op->meta = cr.meta; /* owned by op from here */
    nd_fingerprint_result fr;
    int rc = fingerprint(r, cr.text, cr.text_len, &fr);
    if (rc < 0) {
        fingerprint_failed(r, rc, "text");
    } else if (fr.chars < api->cfg->min_chars) {
        reply_too_short(r, fr.chars);
    } else {
        op->rq.do_register = cr.do_register;
        op->rq.k = cr.k;
        op->rq.id = op->id;
        op->rq.id_len = op->id_len;
        op->rq.simhash = fr.simhash;
        op->rq.chars = fr.chars;
        op->rq.meta = op->meta;
        op->rq.meta_len = cr.meta_len;
        op->features = fr.features;
        nd_registry_text_hash(cr.text, cr.text_len, op->rq.text_hash);
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
    if (nd_request_parse_document_id(r->path + strlen("/documents/"), &op->id, &op->id_len,
                                     &e) < 0) {
        reply_request_error(r, &e);
        return -1;
    }
    return 0;
}

static void run_delete(nd_req *r)
{
    nd_api *api = api_of(r);
    op_state *op = r->op;
    int rc = nd_registry_delete(api->reg, op->id, op->id_len, op_done, r);
    if (rc == ND_REG_QUEUED || rc == ND_REG_WAIT)
        return;
    r->op = NULL;
    if (rc == 0) {
        nd_metrics_event(api->metrics, ND_EV_DELETED);
        nd_req_reply_json(r, 200, json_pack("{s:s%,s:b}", "id", op->id, op->id_len, "deleted", 1));
    } else if (rc == -ENOENT) {
        nd_req_reply_error(r, 404, "not_found", json_pack("{s:s%}", "id", op->id, op->id_len),
                           "no document with this id");
    } else if (rc == -EAGAIN) {
        reply_loading(r);
    } else {
        reply_store_error(r, rc, "the deletion");
    }
    op_free(op);
}

static void handle_document(nd_req *r)
{
    nd_api *api = api_of(r);
    if (!(r->method == EVHTTP_REQ_DELETE ? authorized(r) : authorized_read(r)))
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
    nd_doc *d = NULL;
    int rc = nd_registry_get(api->reg, op->id, op->id_len, &d);
    if (rc == 0)
        nd_req_reply_json(r, 200, doc_json(d));
    else if (rc == -EAGAIN)
        reply_loading(r);
    else
        nd_req_reply_error(r, 404, "not_found", json_pack("{s:s%}", "id", op->id, op->id_len),
                           "no document with this id");
    nd_doc_release(d);
    op_free(op);
}

#define GET_HEAD (EVHTTP_REQ_GET | EVHTTP_REQ_HEAD)

const nd_route_def nd_api_routes[] = {
    {"/healthz", false, ND_ROUTE_HEALTHZ, GET_HEAD, "GET, HEAD", handle_healthz},
    {"/readyz", false, ND_ROUTE_READYZ, GET_HEAD, "GET, HEAD", handle_readyz},
    {"/metrics", false, ND_ROUTE_METRICS, GET_HEAD, "GET, HEAD", handle_metrics},
    {"/fingerprint", false, ND_ROUTE_FINGERPRINT, EVHTTP_REQ_POST, "POST", handle_fingerprint},
    {"/check-original", false, ND_ROUTE_CHECK, EVHTTP_REQ_POST, "POST", handle_check},
    {"/documents/", true, ND_ROUTE_DOCUMENTS, GET_HEAD | EVHTTP_REQ_DELETE, "GET, HEAD, DELETE",
     handle_document},
    {NULL, false, ND_ROUTE_OTHER, 0, NULL, NULL},
};
