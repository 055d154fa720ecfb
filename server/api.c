/* api.c - request handlers: parse, validate, fingerprint, ask the registry,
 * answer. Each handler ends in exactly one reply, now or after a hand-off. */
#include "api.h"
#include "json.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/buffer.h>

#define LOOP_STALL_MS 10000 /* /healthz fails if a loop has not run for this long */
#define MAX_MEMBERS 32      /* fields of a request object */

typedef struct api_worker {
    nd_fp_scratch *fps;
    nd_index_hit *hits;
    nd_match *matches;
    size_t cap;
    struct evbuffer *out; /* reply buffer, emptied by every send */
    nd_json_scratch js;   /* decoded request strings */
    nd_json_member members[MAX_MEMBERS];
} api_worker;

/* State of a /check-original or DELETE that waits for the store. */
typedef struct op_state {
    bool is_delete;
    nd_check_req rq;
    nd_check_res res;
    uint32_t features;
    nd_reg_change *ch; /* set by the hand-off: a change to complete */
    int status;
    char *id;          /* owned copies */
    size_t id_len;
    char *meta;
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
    aw->hits = calloc(aw->cap, sizeof(*aw->hits));
    aw->matches = calloc(aw->cap, sizeof(*aw->matches));
    aw->out = evbuffer_new();
    int rc = aw->hits && aw->matches && aw->out ? nd_fp_scratch_create(&aw->fps) : -ENOMEM;
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
    free(aw->hits);
    free(aw->matches);
    if (aw->out)
        evbuffer_free(aw->out);
    nd_json_scratch_finish(&aw->js);
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
    const char *why = rc == -ENOSPC ? "storage is full" : rc == -ESHUTDOWN ? "server is stopping"
                                                                            : strerror(-rc);
    nd_log(ND_LOG_WARN, "%s failed (request %s): %s", what, r->rid, why);
    nd_req_reply_error(r, 503, "storage_unavailable", NULL, "%s could not be stored: %s", what,
                       why);
}

static void reply_loading(nd_req *r)
{
    nd_api *api = api_of(r);
    nd_req_add_header(r, "Retry-After", "1");
    nd_req_reply_error(r, 503, "loading", NULL, "the index is being loaded (%llu of %llu documents)",
                       (unsigned long long)atomic_load(&api->load_done),
                       (unsigned long long)atomic_load(&api->load_total));
}

/* Accepts application/json (and, when plain_ok, text/plain), with an
 * optional charset that must be UTF-8. Returns 1 for JSON, 2 for text, or 0
 * after answering 415. */
static int content_kind(nd_req *r, bool plain_ok)
{
    const char *ct = nd_req_header(r, "Content-Type");
    int kind = 0;
    if (ct) {
        while (*ct == ' ' || *ct == '\t')
            ct++;
        size_t n = strcspn(ct, "; \t");
        if (n == 16 && strncasecmp(ct, "application/json", n) == 0)
            kind = 1;
        else if (plain_ok && n == 10 && strncasecmp(ct, "text/plain", n) == 0)
            kind = 2;
        const char *cs = strcasestr(ct + n, "charset=");
        if (kind && cs) {
            cs += 8;
            if (*cs == '"')
                cs++;
            if (strncasecmp(cs, "utf-8", 5) != 0 && strncasecmp(cs, "utf8", 4) != 0)
                kind = 0;
        }
    }
    if (!kind)
        nd_req_reply_error(r, 415, "unsupported_media_type", NULL,
                           "Content-Type must be application/json%s (UTF-8)",
                           plain_ok ? " or text/plain" : "");
    return kind;
}

/* Reads the body as a JSON object. Returns its members (borrowed from the
 * worker, valid until the next request) and sets *n, or NULL after answering
 * 400 invalid_json. */
static const nd_json_member *read_members(nd_req *r, size_t *n)
{
    api_worker *aw = aw_of(r);
    size_t len;
    const char *body = nd_req_body(r, &len);
    nd_json_error err = {0};
    int rc = body ? nd_json_read_object(body, len, &aw->js, aw->members, MAX_MEMBERS, n, &err)
                  : -ENOMEM;
    if (rc == 0)
        return aw->members;
    if (rc == -EINVAL)
        nd_req_reply_error(r, 400, "invalid_json",
                           json_pack("{s:i,s:i}", "line", err.line, "column", err.column),
                           "invalid JSON at line %u, column %u: %s", err.line, err.column,
                           err.text);
    else if (rc == -E2BIG)
        nd_req_reply_error(r, 400, "invalid_json", NULL, "more than %d fields in the object",
                           MAX_MEMBERS);
    else
        nd_req_reply_error(r, 500, "internal", NULL, "out of memory");
    return NULL;
}

/* The member key if present and not null, else NULL. */
static const nd_json_value *field(const nd_json_member *m, size_t n, const char *key)
{
    const nd_json_member *f = nd_json_find(m, n, key);
    return f && f->value.type != ND_JSON_NULL ? &f->value : NULL;
}

static void add_simhash(struct evbuffer *o, const char *name, uint64_t h)
{
    char hex[17];
    nd_simhash_format(h, hex);
    evbuffer_add_printf(o, "\"%s\":\"%s\"", name, hex);
}

static void add_time(struct evbuffer *o, const char *name, int64_t us)
{
    char ts[32];
    nd_log_format_time(us, ts);
    evbuffer_add_printf(o, "\"%s\":\"%s\"", name, ts);
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
    json_t *m = d->meta ? json_loadb(d->meta, d->meta_len, 0, NULL) : NULL;
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
    nd_registry_stats st;
    nd_registry_stats_get(api->reg, &st);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
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
    if (rc == 0)
        nd_metrics_event(api->metrics, ND_EV_FINGERPRINTS);
    return rc;
}

static void add_fingerprint(struct evbuffer *o, const nd_fingerprint_result *fr)
{
    evbuffer_add(o, "{", 1);
    add_simhash(o, "simhash", fr->simhash);
    evbuffer_add_printf(o, ",\"chars\":%u,\"features\":%u,\"version\":\"%s\"}", fr->chars,
                        fr->features, ND_FINGERPRINT_VERSION);
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

static void fingerprint_batch(nd_req *r, const nd_json_value *texts)
{
    const nd_config *cfg = nd_req_config(r);
    api_worker *aw = aw_of(r);
    nd_json_iter it;
    nd_json_value t;
    size_t n = 0;
    nd_json_iter_init(&it, texts, &aw->js);
    while (nd_json_iter_next(&it, &t)) {
        char field[32];
        snprintf(field, sizeof(field), "texts[%zu]", n);
        if (n == cfg->max_batch) {
            evbuffer_drain(aw->out, evbuffer_get_length(aw->out));
            invalid_field(r, "texts", "texts holds more than %u items", cfg->max_batch);
            return;
        }
        if (t.type != ND_JSON_STRING) {
            evbuffer_drain(aw->out, evbuffer_get_length(aw->out));
            invalid_field(r, field, "%s must be a string", field);
            return;
        }
        nd_fingerprint_result fr;
        int rc = fingerprint(r, t.str, t.str_len, &fr);
        if (rc < 0) {
            evbuffer_drain(aw->out, evbuffer_get_length(aw->out));
            fingerprint_failed(r, rc, field);
            return;
        }
        evbuffer_add(aw->out, n ? "," : "{\"results\":[", n ? 1 : 12);
        add_fingerprint(aw->out, &fr);
        n++;
    }
    if (n == 0)
        evbuffer_add(aw->out, "{\"results\":[", 12);
    evbuffer_add(aw->out, "]}\n", 3);
    nd_req_reply(r, 200, "application/json", aw->out);
}

static void handle_fingerprint(nd_req *r)
{
    int kind = content_kind(r, true);
    if (!kind)
        return;
    nd_fingerprint_result fr;
    if (kind == 2) {
        size_t len;
        const char *body = nd_req_body(r, &len);
        int rc = body ? fingerprint(r, body, len, &fr) : -ENOMEM;
        if (rc < 0)
            fingerprint_failed(r, rc, "text");
        else
            reply_fingerprint(r, &fr);
        return;
    }
    size_t n;
    const nd_json_member *m = read_members(r, &n);
    if (!m)
        return;
    const nd_json_value *text = field(m, n, "text");
    const nd_json_value *texts = field(m, n, "texts");
    if (text && texts) {
        invalid_field(r, "texts", "give either text or texts, not both");
    } else if (texts) {
        if (texts->type == ND_JSON_ARRAY)
            fingerprint_batch(r, texts);
        else
            invalid_field(r, "texts", "texts must be an array of strings");
    } else if (!text || text->type != ND_JSON_STRING) {
        invalid_field(r, "text", "text must be a string (or texts an array of strings)");
    } else {
        int rc = fingerprint(r, text->str, text->str_len, &fr);
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
    free(op->id);
    free(op->meta);
    free(op);
}

static void add_meta(struct evbuffer *o, const nd_doc *d)
{
    /* Stored as compact JSON written by jansson: embedded as it is. */
    if (d->meta)
        evbuffer_add(o, d->meta, d->meta_len);
    else
        evbuffer_add(o, "null", 4);
}

static void add_match(struct evbuffer *o, const nd_match *m)
{
    const nd_doc *d = m->doc;
    char sim[32];
    double s = 1.0 - (double)m->distance / 64.0;
    snprintf(sim, sizeof(sim), "%.17g", s);
    if (!strpbrk(sim, ".e"))
        strcat(sim, ".0");
    evbuffer_add(o, "{\"id\":", 6);
    nd_json_write_string(o, d->id, d->id_len);
    evbuffer_add(o, ",", 1);
    add_simhash(o, "simhash", d->simhash);
    evbuffer_add_printf(o, ",\"distance\":%u,\"similarity\":%s,", m->distance, sim);
    add_time(o, "registered_at", d->registered_at_us);
    evbuffer_add(o, ",\"meta\":", 8);
    add_meta(o, d);
    evbuffer_add(o, "}", 1);
}

static void reply_check(nd_req *r, op_state *op)
{
    nd_api *api = api_of(r);
    nd_check_res *res = &op->res;
    struct evbuffer *o = aw_of(r)->out;
    evbuffer_add_printf(o, "{\"original\":%s,", res->original ? "true" : "false");
    add_simhash(o, "simhash", op->rq.simhash);
    evbuffer_add_printf(o, ",\"chars\":%u,\"version\":\"%s\"", op->rq.chars,
                        ND_FINGERPRINT_VERSION);
    if (op->id) {
        evbuffer_add(o, ",\"id\":", 6);
        nd_json_write_string(o, op->id, op->id_len);
    }
    evbuffer_add_printf(o, ",\"registered\":%s", res->registered ? "true" : "false");
    if (res->registered && res->doc) {
        evbuffer_add(o, ",", 1);
        add_time(o, "registered_at", res->doc->registered_at_us);
    }
    evbuffer_add(o, ",\"matches\":[", 12);
    for (size_t i = 0; i < res->nmatches; i++) {
        if (i)
            evbuffer_add(o, ",", 1);
        add_match(o, &res->matches[i]);
    }
    evbuffer_add_printf(o, "],\"truncated\":%s}\n", res->truncated ? "true" : "false");
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

static void run_check(nd_req *r)
{
    nd_api *api = api_of(r);
    op_state *op = r->op;
    api_worker *aw = aw_of(r);
    op->res.hits = aw->hits;
    op->res.matches = aw->matches;
    op->res.cap = aw->cap;
    int rc = nd_registry_check(api->reg, &op->rq, &op->res, op_done, r);
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

/* Compact JSON of a "meta" object (new string), or NULL after answering. */
static char *meta_compact(nd_req *r, const nd_json_value *meta)
{
    const nd_config *cfg = nd_req_config(r);
    if (meta->type != ND_JSON_OBJECT) {
        invalid_field(r, "meta", "meta must be an object");
        return NULL;
    }
    json_error_t jerr;
    json_t *obj = json_loadb(meta->raw, meta->raw_len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
                             &jerr);
    if (!obj) {
        invalid_field(r, "meta", "meta is not valid: %s", jerr.text);
        return NULL;
    }
    char *text = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    size_t n = text ? strlen(text) : 0;
    if (!text || n > cfg->max_meta) {
        free(text);
        invalid_field(r, "meta", "meta is %zu bytes as compact JSON; the limit is %zu", n,
                      cfg->max_meta);
        return NULL;
    }
    return text;
}

/* Reads the optional fields of a check; answers 400 and returns -1 on error. */
static int check_fields(nd_req *r, const nd_json_member *m, size_t n, op_state *op)
{
    const nd_config *cfg = nd_req_config(r);
    const nd_json_value *id = field(m, n, "id");
    const nd_json_value *reg = field(m, n, "register");
    const nd_json_value *k = field(m, n, "k");
    const nd_json_value *meta = field(m, n, "meta");
    if (id) {
        if (id->type != ND_JSON_STRING || nd_registry_id_valid(id->str, id->str_len) < 0) {
            invalid_field(r, "id", "id must be a string of 1 to %d bytes of UTF-8 without "
                          "control characters", ND_ID_MAX);
            return -1;
        }
        op->id_len = id->str_len;
        op->id = malloc(op->id_len + 1);
        if (!op->id)
            nd_die_oom(__func__);
        memcpy(op->id, id->str, op->id_len);
        op->id[op->id_len] = 0;
    }
    if (reg && reg->type != ND_JSON_TRUE && reg->type != ND_JSON_FALSE) {
        invalid_field(r, "register", "register must be true or false");
        return -1;
    }
    op->rq.do_register = reg && reg->type == ND_JSON_TRUE;
    if (op->rq.do_register && !op->id) {
        invalid_field(r, "id", "registering needs an id");
        return -1;
    }
    op->rq.k = cfg->k;
    if (k) {
        if (k->type != ND_JSON_NUMBER || !k->is_int || k->i < 0 || k->i > ND_INDEX_MAX_K) {
            invalid_field(r, "k", "k must be an integer from 0 to %d", ND_INDEX_MAX_K);
            return -1;
        }
        op->rq.k = (unsigned)k->i;
    }
    if (meta && !(op->meta = meta_compact(r, meta)))
        return -1;
    return 0;
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
    if (!content_kind(r, false))
        return;
    size_t n;
    const nd_json_member *m = read_members(r, &n);
    if (!m)
        return;
    op_state *op = calloc(1, sizeof(*op));
    if (!op)
        nd_die_oom(__func__);
    const nd_json_value *text = field(m, n, "text");
    nd_fingerprint_result fr;
    int rc;
    if (!text || text->type != ND_JSON_STRING) {
        invalid_field(r, "text", "text must be a string");
    } else if (check_fields(r, m, n, op) == 0) {
        rc = fingerprint(r, text->str, text->str_len, &fr);
        if (rc < 0) {
            fingerprint_failed(r, rc, "text");
        } else if (fr.chars < api->cfg->min_chars) {
            reply_too_short(r, fr.chars);
        } else {
            op->rq.id = op->id;
            op->rq.id_len = op->id_len;
            op->rq.simhash = fr.simhash;
            op->rq.chars = fr.chars;
            op->rq.meta = op->meta;
            op->rq.meta_len = op->meta ? strlen(op->meta) : 0;
            op->features = fr.features;
            nd_registry_text_hash(text->str, text->str_len, op->rq.text_hash);
            r->op = op;
            run_check(r);
            return;
        }
    }
    op_free(op);
}

/* ---- /documents/{id} ---- */

/* Decodes the id from the path into op; answers and returns -1 on error. */
static int document_id(nd_req *r, op_state *op)
{
    const char *enc = r->path + strlen("/documents/");
    size_t len = 0;
    char *id = *enc ? evhttp_uridecode(enc, 0, &len) : NULL;
    if (!id || nd_registry_id_valid(id, len) < 0) {
        free(id);
        if (!*enc)
            nd_req_reply_error(r, 404, "not_found", NULL, "no document id in the path");
        else
            invalid_field(r, "id", "the id must be 1 to %d bytes of UTF-8 without control "
                          "characters (percent-encoded in the path)", ND_ID_MAX);
        return -1;
    }
    op->id = id;
    op->id_len = len;
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
    op_state *op = calloc(1, sizeof(*op));
    if (!op)
        nd_die_oom(__func__);
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
