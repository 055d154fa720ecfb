/* answer.c - what every handler of server/api/ answers with
 * (answer.h): the body in the worker's reply buffer, the errors, the
 * token checks and the common refusals; the parts of the check's and the
 * document's answers that say what to do (policy, status, action, a
 * match's account); the journals' values (detections, audit entries). */
#include "answer.h"
#include "api.h"
#include "clock.h"
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>
#include <xxhash.h>

/* The worker's answer scratch: the first member of its api state. */
static nd_api_scratch *scratch_of(nd_req *r)
{
    return nd_worker_user(r->worker);
}

nd_api *nd_api_of(nd_req *r)
{
    return nd_http_app(r);
}

nd_corpus *nd_api_corpus(nd_req *r)
{
    return nd_api_of(r)->corpus;
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
    if (rc == -ENOTCONN || rc == -ETIMEDOUT) { /* a replica cut off from NATS */
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
    const char *why = rc == -ENOSPC                ? "storage is full"
                      : rc == ND_REG_TOO_MANY_DOCS ? "this server holds its most documents "
                                                     "(" ND_REG_DOCS_MAX_TEXT
                                                     "; delete some or split them "
                                                     "over servers)"
                                                   : strerror(-rc);
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

bool nd_api_registered(nd_req *r, const nd_corpus_doc *d)
{
    if (!nd_api_is_client(r))
        return false;
    bool same = false;
    return nd_corpus_registered_by(nd_api_corpus(r), d->registered_at_us, r->who->name,
                                   strlen(r->who->name), &same) == 0 &&
           same;
}

bool nd_api_owns(nd_req *r, const nd_corpus_doc *d)
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

bool nd_api_may_change(nd_req *r, const nd_corpus_doc *d)
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
void nd_api_add_meta(nd_reply *w, const nd_corpus_doc *d)
{
    if (d->meta)
        nd_reply_raw(w, d->meta, d->meta_len);
    else
        nd_reply_null(w);
}

/* ---- policies as answers ---- */

/* {"reprint": effective, "explicit": bool, "whitelist": [...]} of the
 * stored policy text (NULL: none). */
void add_policy(nd_reply *w, const nd_config *cfg, const char *policy, size_t len)
{
    nd_policy_desc pd;
    nd_policy_describe(policy, len,
                       cfg->default_reprint == ND_CONFIG_REPRINT_FORBID ? ND_REPRINT_FORBID
                                                                        : ND_REPRINT_ALLOW,
                       &pd);
    nd_reply_object(w);
    nd_reply_key(w, "reprint");
    nd_reply_string(w, pd.reprint, strlen(pd.reprint));
    nd_reply_key(w, "explicit");
    nd_reply_bool(w, pd.explicit_rule);
    nd_reply_key(w, "whitelist");
    if (pd.whitelist)
        nd_reply_raw(w, pd.whitelist, strlen(pd.whitelist));
    else
        nd_reply_raw(w, "[]", 2);
    free(pd.whitelist);
    nd_reply_object_end(w);
}

const char *status_name(int status)
{
    return nd_status_name(status); /* claim.h: the same values as the store's */
}

/* "superseded_by": {"id" (while that document is stored),
 * "registered_at"} of superseded document d: one store read. */
static void add_superseded_by(nd_req *r, nd_reply *w, const nd_corpus_doc *d)
{
    char id[ND_ID_MAX];
    size_t id_len = 0;
    nd_reply_key(w, "superseded_by");
    nd_reply_object(w);
    if (nd_corpus_id_at(nd_api_corpus(r), d->superseded_by_us, id, &id_len) == 0 && id_len) {
        nd_reply_key(w, "id");
        nd_reply_string(w, id, id_len);
    }
    nd_reply_key(w, "registered_at");
    nd_reply_time(w, d->superseded_by_us);
    nd_reply_object_end(w);
}

/* Whether a document carries any of the workflow's state: answers about a
 * document without any (and requests without an account) keep the bytes
 * they had before the workflow's members. */
static bool has_claim_state(const nd_corpus_doc *d)
{
    return d->account || d->policy || d->status != ND_CLAIM_ACTIVE;
}

void nd_workflow_add_document(nd_req *r, nd_reply *w, const nd_corpus_doc *d)
{
    if (!has_claim_state(d))
        return;
    if (d->account) {
        nd_reply_key(w, "account");
        nd_reply_string(w, d->account, d->account_len);
    }
    nd_reply_key(w, "policy");
    add_policy(w, nd_api_of(r)->cfg, d->policy, d->policy_len);
    nd_reply_key(w, "status");
    const char *s = status_name(d->status);
    nd_reply_plain(w, s, strlen(s));
    if (d->status == ND_CLAIM_SUPERSEDED)
        add_superseded_by(r, w, d);
}

static const char *action_name(int action)
{
    return nd_action_name(action); /* claim.h */
}

void nd_workflow_add_action(nd_reply *w, const nd_check_res *res)
{
    nd_reply_key(w, "copied_share");
    nd_reply_fraction(w, res->copied_share);
    nd_reply_key(w, "share_estimated");
    nd_reply_bool(w, res->share_estimated);
    nd_reply_key(w, "action");
    const char *a = action_name(res->action);
    nd_reply_plain(w, a, strlen(a));
    nd_corpus_doc s;
    if (res->action == ND_ACTION_PUBLISH || !nd_corpus_source_doc(res, &s))
        return;
    nd_reply_key(w, "source");
    nd_reply_object(w);
    nd_reply_key(w, "id");
    nd_reply_string(w, s.id, s.id_len);
    if (s.account) {
        nd_reply_key(w, "account");
        nd_reply_string(w, s.account, s.account_len);
    }
    nd_reply_key(w, "meta");
    nd_api_add_meta(w, &s);
    nd_reply_key(w, "registered_at");
    nd_reply_time(w, s.registered_at_us);
    nd_reply_object_end(w);
    if (res->action == ND_ACTION_REPRINT) {
        nd_reply_key(w, "show_source");
        nd_reply_bool(w, res->show_source);
        nd_reply_key(w, "may_modify");
        nd_reply_bool(w, res->may_modify);
    }
}

void nd_workflow_add_match(nd_reply *w, const nd_match *m, bool account_given)
{
    nd_corpus_doc view;
    const nd_corpus_doc *d = &view;
    nd_corpus_match_doc(m, &view);
    if (m->share >= 0) {
        nd_reply_key(w, "share");
        nd_reply_fraction(w, m->share);
    }
    if (m->evidence) {
        nd_reply_key(w, "action");
        const char *a = action_name(m->action);
        nd_reply_plain(w, a, strlen(a));
        if (m->action == ND_ACTION_REPRINT) {
            nd_reply_key(w, "show_source");
            nd_reply_bool(w, m->show_source);
            nd_reply_key(w, "may_modify");
            nd_reply_bool(w, m->may_modify);
        }
    }
    if (!account_given && !has_claim_state(d))
        return;
    if (d->account) {
        nd_reply_key(w, "account");
        nd_reply_string(w, d->account, d->account_len);
    }
    nd_reply_key(w, "same_account");
    nd_reply_bool(w, m->same_account);
    nd_reply_key(w, "status");
    const char *s = status_name(d->status);
    nd_reply_plain(w, s, strlen(s));
}

/* ---- journal values ---- */

/* Copies what w wrote into out (a new NUL-terminated string); *len set. */
char *take_text(struct evbuffer *buf, size_t *len)
{
    *len = evbuffer_get_length(buf);
    char *text = malloc(*len + 1);
    if (!text)
        nd_die_oom(__func__);
    evbuffer_remove(buf, text, *len);
    text[*len] = 0;
    return text;
}

struct evbuffer *nd_text_begin(nd_reply *w)
{
    struct evbuffer *buf = evbuffer_new();
    if (!buf)
        nd_die_oom(__func__);
    nd_reply_init(w, buf);
    return buf;
}

char *nd_text_done(nd_reply *w, struct evbuffer *buf, size_t *len)
{
    if (w->failed)
        nd_die_oom(__func__);
    char *text = take_text(buf, len);
    evbuffer_free(buf);
    return text;
}

char *nd_workflow_detection(const nd_check_req *rq, const nd_check_res *res, nd_store_event *ev)
{
    nd_corpus_doc source;
    if (!rq->id || res->original || !nd_corpus_source_doc(res, &source))
        return NULL;
    const nd_match *m = NULL;
    for (size_t i = 0; i < res->nmatches && !m; i++)
        if (nd_corpus_is_source(res, &res->matches[i]))
            m = &res->matches[i];
    nd_reply w;
    struct evbuffer *buf = nd_text_begin(&w);
    nd_reply_object(&w);
    nd_reply_key(&w, "id");
    nd_reply_string(&w, rq->id, rq->id_len);
    if (rq->account) {
        nd_reply_key(&w, "account");
        nd_reply_string(&w, rq->account, rq->account_len);
    }
    const char *kind = m ? nd_verdict_kind_name(m->kind) : "near_duplicate";
    nd_reply_key(&w, "kind");
    nd_reply_plain(&w, kind, strlen(kind));
    nd_reply_key(&w, "resemblance");
    nd_reply_fraction(&w, m ? m->resemblance : 0);
    nd_reply_key(&w, "containment");
    nd_reply_fraction(&w, m ? m->containment : 0);
    nd_reply_key(&w, "distance");
    nd_reply_u64(&w, m ? m->distance : 0);
    nd_reply_object_end(&w);
    size_t len;
    char *value = nd_text_done(&w, buf, &len);
    *ev = (nd_store_event){.kind = ND_EVENT_DETECTION,
                           .owner_at = source.registered_at_us,
                           .at_us = nd_log_now_us(),
                           .copy_id = rq->id,
                           .copy_id_len = rq->id_len,
                           .value = value,
                           .value_len = len};
    return value;
}

char *nd_workflow_audit_event(nd_req *r, const char *action, const char *id, size_t id_len,
                              const char *detail, size_t detail_len, nd_store_event *ev)
{
    nd_reply w;
    struct evbuffer *buf = nd_text_begin(&w);
    nd_reply_object(&w);
    nd_reply_key(&w, "client");
    if (r->client)
        nd_reply_string(&w, r->client, strlen(r->client));
    else
        nd_reply_null(&w);
    nd_reply_key(&w, "action");
    nd_reply_plain(&w, action, strlen(action));
    if (id) {
        nd_reply_key(&w, "document");
        nd_reply_string(&w, id, id_len);
    }
    nd_reply_key(&w, "detail");
    if (detail)
        nd_reply_raw(&w, detail, detail_len);
    else
        nd_reply_raw(&w, "{}", 2);
    nd_reply_object_end(&w);
    size_t len;
    char *value = nd_text_done(&w, buf, &len);
    *ev = (nd_store_event){.kind = ND_EVENT_AUDIT,
                           .owner_at = 0,
                           .at_us = nd_log_now_us(),
                           .value = value,
                           .value_len = len};
    return value;
}

/* The audit entry of a registration or deletion of d by request r: its
 * detail is d's account (or null) and registered_at. */
static char *doc_audit(nd_req *r, const char *action, const nd_corpus_doc *d, nd_store_event *ev)
{
    nd_reply w;
    struct evbuffer *buf = nd_text_begin(&w);
    nd_reply_object(&w);
    nd_reply_key(&w, "account");
    if (d->account)
        nd_reply_string(&w, d->account, d->account_len);
    else
        nd_reply_null(&w);
    nd_reply_key(&w, "registered_at");
    nd_reply_time(&w, d->registered_at_us);
    nd_reply_object_end(&w);
    size_t dlen;
    char *detail = nd_text_done(&w, buf, &dlen);
    char *value = nd_workflow_audit_event(r, action, d->id, d->id_len, detail, dlen, ev);
    free(detail);
    return value;
}

char *nd_workflow_register_audit(void *req, const nd_corpus_doc *d, nd_store_event *ev)
{
    return doc_audit(req, "register", d, ev);
}

char *nd_workflow_delete_audit(void *req, const nd_corpus_doc *d, nd_store_event *ev)
{
    return doc_audit(req, "delete", d, ev);
}
