/* answer.c - what every handler of server/api/ answers with
 * (answer.h): the body in the worker's reply buffer, the errors, the
 * token checks and the common refusals. */
#include "answer.h"
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

/* The worker's answer scratch: the first member of its api state. */
static nd_api_scratch *scratch_of(nd_req *r)
{
    return nd_worker_user(r->worker);
}

nd_api *nd_api_of(nd_req *r)
{
    return nd_http_app(r);
}

nd_request_parser *nd_api_parser(nd_req *r)
{
    return &scratch_of(r)->parser;
}

void nd_api_error(nd_req *r, int status, const char *code, const char *fmt, ...)
{
    nd_reply w;
    va_list ap;
    va_start(ap, fmt);
    nd_reply_error_beginv(nd_api_body_begin(r, &w), code, fmt, ap);
    va_end(ap);
    nd_api_error_send(r, &w, status);
}

nd_reply *nd_api_error_begin(nd_req *r, nd_reply *w, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    nd_reply_error_beginv(nd_api_body_begin(r, w), code, fmt, ap);
    va_end(ap);
    return w;
}

void nd_api_invalid_field(nd_req *r, const char *field, const char *fmt, ...)
{
    nd_reply w;
    va_list ap;
    va_start(ap, fmt);
    nd_reply_error_beginv(nd_api_body_begin(r, &w), "invalid_field", fmt, ap);
    va_end(ap);
    nd_reply_key(&w, "field");
    nd_reply_string(&w, field, strlen(field));
    nd_api_error_send(r, &w, 400);
}

bool nd_api_json_body(nd_req *r)
{
    return nd_api_content_kind(r, false) != 0;
}

/* Starts a body in the worker's reply buffer (empty between answers). */
nd_reply *nd_api_body_begin(nd_req *r, nd_reply *w)
{
    nd_reply_init(w, scratch_of(r)->out);
    return w;
}

/* Sends the body written with w (closing "\n" added) and leaves the
 * buffer empty for the next answer, sent or not. */
void nd_api_body_send(nd_req *r, nd_reply *w, int status)
{
    if (nd_reply_finish(w) < 0)
        nd_die_oom("reply");
    nd_req_reply(r, status, "application/json", w->out);
    evbuffer_drain(w->out, evbuffer_get_length(w->out));
}

void nd_api_error_send(nd_req *r, nd_reply *w, int status)
{
    nd_reply_error_end(w);
    nd_api_body_send(r, w, status);
}

/* Answers an error whose extra member is the document id. */
void nd_api_id_error(nd_req *r, int status, const char *code, const char *id, size_t id_len,
                     const char *message)
{
    nd_reply w;
    nd_api_error_begin(r, &w, code, "%s", message);
    nd_reply_key(&w, "id");
    nd_reply_string(&w, id, id_len);
    nd_api_error_send(r, &w, status);
}

void nd_api_latest_error(nd_req *r, int rc)
{
    nd_req_add_header(r, "Retry-After", "1");
    if (rc == -ESHUTDOWN)
        nd_api_error(r, 503, "shutting_down", "the server is stopping; retry");
    else if (rc == -ETIMEDOUT)
        nd_api_error(r, 503, "replica_behind",
                     "this replica did not catch up with the stream in time; retry, or ask "
                     "with consistency \"local\"");
    else if (rc == -ENOMEM)
        nd_api_error(r, 500, "internal", "out of memory");
    else
        nd_api_error(r, 503, "replication_unavailable",
                     "this replica cannot reach the stream to read its latest state; retry, "
                     "or ask with consistency \"local\"");
}

const char *nd_api_query(nd_req *r)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(r->ev);
    return uri ? evhttp_uri_get_query(uri) : NULL;
}

void nd_api_store_error(nd_req *r, int rc, const char *what)
{
    if (rc == -EBUSY) { /* the store's queue is full: shed, do not wait */
        nd_req_add_header(r, "Retry-After", "1");
        nd_api_error(r, 503, "storage_unavailable",
                     "%s was not queued: the store is behind (slow disk); retry", what);
        return;
    }
    if (rc == -ESHUTDOWN) { /* a request that waited behind a change, at shutdown */
        nd_req_add_header(r, "Retry-After", "1");
        nd_api_error(r, 503, "shutting_down", "%s was not done: the server is stopping; retry",
                     what);
        return;
    }
    if (rc == -ENOTCONN || rc == -ETIMEDOUT) { /* a replica cut off from NATS (issue 14) */
        nd_req_add_header(r, "Retry-After", "1");
        nd_api_error(r, 503, "replication_unavailable",
                     rc == -ENOTCONN
                         ? "%s was not done: this replica cannot reach the stream; retry"
                         : "%s may not have been done: the stream did not answer in "
                           "time; retry (the same request is safe to repeat)",
                     what);
        return;
    }
    if (rc == -ESTALE) { /* lost the race to other replicas ND_API_STALE_TRIES times */
        nd_req_add_header(r, "Retry-After", "1");
        nd_api_error(r, 503, "replication_contention",
                     "%s was not done: other replicas kept writing first; retry", what);
        return;
    }
    const char *why = rc == -ENOSPC ? "storage is full" : strerror(-rc);
    nd_log(ND_LOG_WARN, "%s failed (request %s): %s", what, r->rid, why);
    nd_api_error(r, 503, "storage_unavailable", "%s could not be stored: %s", what, why);
}

/* True when the request may go on (no token configured, or the right one
 * sent); otherwise answers 401 with WWW-Authenticate and returns false. */
bool nd_api_authorized(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    if (!api->auth)
        return true;
    int rc = nd_auth_check_identity(api->auth, nd_req_header(r, "Authorization"), &r->who);
    r->client = r->who ? r->who->name : NULL;
    if (rc == ND_AUTH_OK)
        return true;
    bool invalid = rc == ND_AUTH_INVALID;
    nd_req_add_header(r, "WWW-Authenticate",
                      invalid ? "Bearer realm=\"neardup\", error=\"invalid_token\""
                              : "Bearer realm=\"neardup\"");
    nd_api_error(r, 401, "unauthorized", "%s",
                 invalid ? "the bearer token is not valid"
                         : "this request needs \"Authorization: Bearer <token>\"");
    return false;
}

void nd_api_identify(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    if (api->auth && !r->who &&
        nd_auth_check_identity(api->auth, nd_req_header(r, "Authorization"), &r->who) == ND_AUTH_OK)
        r->client = r->who->name;
}

bool nd_api_may_act_for(nd_req *r, const char *account, size_t len)
{
    return !nd_api_of(r)->auth || nd_auth_may_act_for(r->who, account, len);
}

bool nd_api_is_operator(nd_req *r)
{
    return !nd_api_of(r)->auth || (r->who && r->who->is_operator);
}

bool nd_api_is_client(nd_req *r)
{
    return nd_api_of(r)->auth && r->who && r->who->is_client;
}

bool nd_api_may_name(nd_req *r, const char *account, size_t len)
{
    return nd_api_is_client(r) || nd_api_may_act_for(r, account, len);
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

bool nd_api_registered(nd_req *r, const nd_doc *d)
{
    if (!nd_api_is_client(r))
        return false;
    client_match m = {r->who->name, strlen(r->who->name), false};
    return nd_store_get(nd_api_of(r)->store, d->registered_at_us, match_client, &m) == 0 && m.same;
}

bool nd_api_owns(nd_req *r, const nd_doc *d)
{
    if (nd_api_is_operator(r))
        return true;
    if (nd_api_is_client(r))
        return nd_api_registered(r, d);
    return d->account && nd_api_may_act_for(r, d->account, d->account_len);
}

void nd_api_forbidden(nd_req *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    nd_api_error(r, 403, "forbidden", "%s", msg);
}

bool nd_api_operator(nd_req *r)
{
    if (!nd_api_authorized(r))
        return false;
    if (nd_api_is_operator(r))
        return true;
    nd_api_forbidden(r, "this call is for operators; the token \"%s\" is %s", r->client,
                     nd_api_is_client(r) ? "a client" : "an account token");
    return false;
}

bool nd_api_may_change(nd_req *r, const nd_doc *d)
{
    if (nd_api_owns(r, d))
        return true;
    nd_reply w;
    if (nd_api_is_client(r))
        nd_api_error_begin(r, &w, "forbidden",
                           "the client \"%s\" did not register this document: only the client "
                           "that did, a token of its account or an operator may change it",
                           r->client);
    else if (d->account)
        nd_api_error_begin(r, &w, "forbidden",
                           "the token \"%s\" does not act for the account of this document",
                           r->client ? r->client : "");
    else
        nd_api_error_begin(r, &w, "forbidden",
                           "this document has no account: only an operator may change it");
    nd_reply_key(&w, "id");
    nd_reply_string(&w, d->id, d->id_len);
    nd_api_error_send(r, &w, 403);
    return false;
}

/* Reads (fingerprints, checks, documents, metrics) are open unless
 * --auth-all; answers 401 like nd_api_authorized() when not. */
bool nd_api_authorized_read(nd_req *r)
{
    return !nd_api_of(r)->cfg->auth_all || nd_api_authorized(r);
}

void nd_api_loading(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    nd_req_add_header(r, "Retry-After", "1");
    nd_api_error(r, 503, "loading", "the index is being loaded (%llu of %llu documents)",
                 (unsigned long long)atomic_load(&api->load_done),
                 (unsigned long long)atomic_load(&api->load_total));
}

nd_request_limits nd_api_limits(const nd_config *cfg)
{
    return (nd_request_limits){.max_batch = cfg->max_batch,
                               .max_meta = cfg->max_meta,
                               .max_text = cfg->max_text,
                               .default_k = cfg->k};
}

/* Answers a refused request with its error. */
void nd_api_request_error(nd_req *r, const nd_request_error *e)
{
    nd_reply w;
    nd_api_error_begin(r, &w, e->code, "%s", e->message);
    if (e->field[0]) {
        nd_reply_key(&w, "field");
        nd_reply_string(&w, e->field, strlen(e->field));
    } else if (e->line) {
        nd_reply_key(&w, "line");
        nd_reply_u64(&w, e->line);
        nd_reply_key(&w, "column");
        nd_reply_u64(&w, e->column);
    }
    nd_api_error_send(r, &w, e->status);
}

/* Accepts application/json (and, when plain_ok, text/plain). Returns an
 * nd_body_kind, or 0 after answering 415. */
int nd_api_content_kind(nd_req *r, bool plain_ok)
{
    nd_request_error e;
    int kind = nd_request_content_kind(nd_req_header(r, "Content-Type"), plain_ok, &e);
    if (!kind)
        nd_api_request_error(r, &e);
    return kind;
}

/* A document's "meta": stored as compact JSON written by jansson
 * (nd_request_check_meta()), embedded as it is; null without one. */
void nd_api_add_meta(nd_reply *w, const nd_doc *d)
{
    if (d->meta)
        nd_reply_raw(w, d->meta, d->meta_len);
    else
        nd_reply_null(w);
}
