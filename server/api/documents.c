/* documents.c - /documents/{id}: GET/HEAD (the stored record), DELETE
 * (after its commit), and the sub-resources: the reprint policy
 * (PUT/PATCH /documents/{id}/policy), the claim's appeals (POST /revoke,
 * /restore) and the copies found of it (GET /copies).
 *
 * Writes go through the registry (which replaces the document and has the
 * store amend its record and append the audit entry in one transaction)
 * and are answered after their commit, like a registration. */
#include "answer.h"
#include "api.h"
#include "audit.h"
#include "clock.h"
#include "log.h"
#include "pending.h"
#include "handlers.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>
#include <xxhash.h>

/* A policy change or a revoke/restore waiting for the store. What it
 * writes is decided by wf_decide_*() with the registry's writer held, on
 * the document as it is then (again after a wait or a replica's retry). */
typedef struct wf_op {
    nd_pending pend; /* first */
    char *id;        /* decoded, NUL-terminated */
    size_t id_len;
    /* A policy change: the fields sent (the whitelist copied), merged into
     * the current policy (PATCH) or replacing it (PUT). */
    bool patch;
    nd_policy_fields fields;
    char *policy; /* the new policy (compact JSON) or NULL */
    size_t policy_len;
    bool refused; /* the merge refused the fields: err says why */
    nd_request_error err;
    int status;   /* revoke/restore: the status asked for */
    char *reason; /* revoke/restore: the reason given, or NULL */
    size_t reason_len;
    char *predates; /* restore: the documents it predates (a JSON array) */
    bool predates_truncated;
    bool is_policy;
    char *audit_value;
    nd_store_event audit;
} wf_op;

static void wf_free(wf_op *op)
{
    if (!op)
        return;
    free(op->id);
    free((char *)op->fields.whitelist_raw);
    free(op->policy);
    free(op->reason);
    free(op->predates);
    free(op->audit_value);
    free(op);
}

/* ---- the sub-resources of /documents/{id} ---- */

static const char *const subs[] = {"policy", "revoke", "restore", "copies"};

const char *nd_workflow_sub(const char *path, size_t *id_len)
{
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return NULL;
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
        if (strcmp(slash + 1, subs[i]) == 0) {
            *id_len = (size_t)(slash - path);
            return subs[i];
        }
    return NULL;
}

static const char *method_text(enum evhttp_cmd_type m)
{
    switch (m) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_PATCH: return "PATCH";
    case EVHTTP_REQ_DELETE: return "DELETE";
    default: return "?";
    }
}

static void reply_method(nd_req *r, const char *allow)
{
    nd_req_add_header(r, "Allow", allow);
    nd_api_error(r, 405, "method_not_allowed", "%s is not allowed here; allowed: %s",
                 method_text(r->method), allow);
}

/* ---- policy, revoke, restore: changes through the registry ---- */

/* Whether the caller may change the document id holds now (true when none
 * does: the registry answers that); false once answered 403. Asked on
 * every run of a write: the document may have changed while it waited. */
static bool may_change_id(nd_req *r, const char *id, size_t id_len)
{
    nd_corpus_doc d;
    if (nd_corpus_get(nd_api_corpus(r), id, id_len, &d) != 0)
        return true;
    bool may = nd_api_may_change(r, &d); /* else answered 403 */
    nd_corpus_doc_release(nd_api_corpus(r), &d);
    return may;
}

/* Whether a change of id would be answered here from the document as this
 * node holds it, without a write: none held (404) or the caller may not
 * change it (403); nothing is answered. Loading: false (answered as such).
 * On a replica such an answer waits for the stream's latest state first
 * (ND_PENDING_LATEST): the document may be registered, deleted or given to
 * another account in entries this node has not applied yet. */
static bool decided_here(nd_req *r, const char *id, size_t id_len)
{
    nd_corpus_doc d;
    int rc = nd_corpus_get(nd_api_corpus(r), id, id_len, &d);
    if (rc < 0)
        return rc != -EAGAIN;
    bool owns = nd_api_owns(r, &d);
    nd_corpus_doc_release(nd_api_corpus(r), &d);
    return !owns;
}

/* Answers a change that is done: the policy as GET /documents shows it, or
 * {"id","status"}. */
static void wf_reply(nd_req *r, wf_op *op)
{
    nd_reply w;
    nd_api_body_begin(r, &w);
    if (op->is_policy) {
        add_policy(&w, nd_api_of(r)->cfg, op->policy, op->policy_len);
    } else {
        nd_reply_object(&w);
        nd_reply_key(&w, "id");
        nd_reply_string(&w, op->id, op->id_len);
        nd_reply_key(&w, "status");
        const char *s = status_name(op->status);
        nd_reply_plain(&w, s, strlen(s));
        if (op->status == ND_CLAIM_ACTIVE) { /* a restore */
            nd_reply_key(&w, "predates");
            if (op->predates)
                nd_reply_raw(&w, op->predates, strlen(op->predates));
            else
                nd_reply_raw(&w, "[]", 2);
            nd_reply_key(&w, "predates_truncated");
            nd_reply_bool(&w, op->predates_truncated);
        }
        nd_reply_object_end(&w);
    }
    nd_api_body_send(r, &w, 200);
}

/* ---- what a change writes, decided on the current document ---- */

/* A policy in an audit entry's detail: its text, or when omitted (the
 * entry would be over ND_EVENT_VALUE_MAX) {"omitted":true,"bytes":N,
 * "xxh3_128":"<32 hex digits>"} (the digest of its text). */
static void audit_policy(nd_reply *w, const char *p, size_t len, bool omit)
{
    if (!p) {
        nd_reply_null(w);
        return;
    }
    if (!omit) {
        nd_reply_raw(w, p, len);
        return;
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(p, len));
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", c.digest[i]);
    nd_reply_object(w);
    nd_reply_key(w, "omitted");
    nd_reply_bool(w, true);
    nd_reply_key(w, "bytes");
    nd_reply_u64(w, len);
    nd_reply_key(w, "xxh3_128");
    nd_reply_plain(w, hex, 32);
    nd_reply_object_end(w);
}

/* Builds op's audit entry (action, detail as written into buf); frees
 * buf. Returns whether it fits the store (ND_EVENT_VALUE_MAX); when not,
 * nothing is kept. */
static bool audit_fits(nd_req *r, wf_op *op, const char *action, struct evbuffer *buf)
{
    size_t dlen;
    char *detail = take_text(buf, &dlen);
    evbuffer_free(buf);
    free(op->audit_value);
    op->audit_value = nd_workflow_audit_event(r, action, op->id, op->id_len, detail, dlen,
                                              &op->audit);
    free(detail);
    if (op->audit.value_len <= ND_EVENT_VALUE_MAX)
        return true;
    free(op->audit_value);
    op->audit_value = NULL;
    return false;
}

static struct evbuffer *detail_begin(nd_reply *w)
{
    struct evbuffer *buf = nd_text_begin(w);
    nd_reply_object(w);
    return buf;
}

/* A policy change: op's fields over the current policy (PATCH) or in its
 * place (PUT); the audit entry's detail holds the policy replaced and the
 * new one, the larger first given as its digest when both do not fit. */
static int wf_decide_policy(void *arg, nd_corpus_claim_change *c)
{
    nd_req *r = arg;
    wf_op *op = r->op;
    const nd_corpus_doc *d = &c->doc;
    free(op->policy);
    if (nd_policy_merge(op->patch ? d->policy : NULL, op->patch ? d->policy_len : 0, &op->fields,
                        &op->policy, &op->policy_len, &op->err) < 0) {
        op->refused = true;
        return -EPROTO;
    }
    for (int omit = 0;; omit++) { /* 0: both; 1: the previous one digested; 2: both */
        nd_reply w;
        struct evbuffer *buf = detail_begin(&w);
        nd_reply_key(&w, "method");
        nd_reply_plain(&w, op->patch ? "PATCH" : "PUT", op->patch ? 5 : 3);
        nd_reply_key(&w, "previous");
        audit_policy(&w, d->policy, d->policy_len, omit >= 1);
        nd_reply_key(&w, "policy");
        audit_policy(&w, op->policy, op->policy_len, omit >= 2);
        nd_reply_object_end(&w);
        if (w.failed)
            nd_die_oom(__func__);
        if (audit_fits(r, op, "policy", buf))
            break;
        if (omit == 2)
            return -EMSGSIZE; /* an id and a client name never take 64 KiB */
    }
    c->policy = op->policy;
    c->policy_len = op->policy_len;
    c->audit = &op->audit;
    return 0;
}

/* {"id","account"?,"registered_at"} of docs[0..n). */
static void write_predates(nd_reply *w, const nd_corpus_doc *docs, size_t n)
{
    nd_reply_array(w);
    for (size_t i = 0; i < n; i++) {
        nd_reply_object(w);
        nd_reply_key(w, "id");
        nd_reply_string(w, docs[i].id, docs[i].id_len);
        if (docs[i].account) {
            nd_reply_key(w, "account");
            nd_reply_string(w, docs[i].account, docs[i].account_len);
        }
        nd_reply_key(w, "registered_at");
        nd_reply_time(w, docs[i].registered_at_us);
        nd_reply_object_end(w);
    }
    nd_reply_array_end(w);
}

/* A revoke or restore: the audit entry's detail holds the status, the
 * reason, "previous": "superseded" when the claim was, and (a restore) the
 * documents it now predates, as many as fit. */
static int wf_decide_status(void *arg, nd_corpus_claim_change *c)
{
    nd_req *r = arg;
    wf_op *op = r->op;
    bool restore = op->status == ND_CLAIM_ACTIVE;
    free(op->predates);
    op->predates = NULL;
    op->predates_truncated = c->predated_truncated;
    if (restore) {
        nd_reply w;
        struct evbuffer *buf = nd_text_begin(&w);
        write_predates(&w, c->predated, c->npredated);
        size_t len;
        op->predates = nd_text_done(&w, buf, &len);
    }
    for (size_t keep = c->npredated;; keep /= 2) {
        nd_reply w;
        struct evbuffer *buf = detail_begin(&w);
        nd_reply_key(&w, "status");
        nd_reply_plain(&w, restore ? "active" : "revoked", restore ? 6 : 7);
        if (c->doc.status == ND_CLAIM_SUPERSEDED) { /* else implied by the change */
            nd_reply_key(&w, "previous");
            nd_reply_plain(&w, "superseded", 10);
        }
        if (op->reason) {
            nd_reply_key(&w, "reason");
            nd_reply_string(&w, op->reason, op->reason_len);
        }
        if (restore && c->npredated) {
            nd_reply_key(&w, "predates");
            write_predates(&w, c->predated, keep);
            nd_reply_key(&w, "predates_truncated");
            nd_reply_bool(&w, keep < c->npredated || c->predated_truncated);
        }
        nd_reply_object_end(&w);
        if (w.failed)
            nd_die_oom(__func__);
        if (audit_fits(r, op, restore ? "restore" : "revoke", buf))
            break;
        if (keep == 0)
            return -EMSGSIZE; /* a reason is at most 1024 characters */
    }
    c->audit = &op->audit;
    return 0;
}

/* A policy change's or a revoke/restore's ask: who may change the
 * document is asked on every run (it may have changed while this change
 * waited behind another). */
static int wf_ask(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    wf_op *op = r->op;
    bool latest = nd_pending_at_latest(r);
    if (!latest && decided_here(r, op->id, op->id_len))
        return ND_PENDING_LATEST;
    if (!may_change_id(r, op->id, op->id_len)) {
        r->op = NULL;
        wf_free(op);
        return ND_PENDING_ANSWERED;
    }
    nd_verdict_params params;
    nd_verdict_params_default(&params);
    params.min_resemblance = api->cfg->min_resemblance;
    params.min_containment = api->cfg->min_containment;
    op->refused = false;
    int rc = op->is_policy
                 ? nd_corpus_change_policy(nd_api_corpus(r), op->id, op->id_len, wf_decide_policy, r,
                                             nd_pending_done, r)
                 : nd_corpus_change_status(nd_api_corpus(r), op->id, op->id_len, op->status,
                                             api->cfg->k, &params, wf_decide_status, r,
                                             nd_pending_done, r);
    /* Nothing written, so no expected-sequence check fenced the decision:
     * a restore or revoke that changes nothing (0: a replica's store never
     * commits within the call), no such id, a merge refused on the policy
     * held here. A replica decides it again on the stream's latest state. */
    if (!latest && (rc == 0 || rc == -ENOENT || op->refused)) {
        op->refused = false;
        return ND_PENDING_LATEST;
    }
    return rc;
}

static void wf_answer(nd_req *r, void *state, int rc, bool completed)
{
    wf_op *op = state;
    if (!completed && op->refused)
        nd_api_request_error(r, &op->err);
    else if (rc == 0)
        wf_reply(r, op);
    else if (rc == -ENOENT) /* completed: deleted meanwhile */
        nd_api_id_error(r, 404, "not_found", op->id, op->id_len, "no document with this id");
    else if (!completed && rc == -EAGAIN)
        nd_api_loading(r);
    else if (!completed && rc == -ENOMEM)
        nd_api_error(r, 500, "internal", "out of memory");
    else
        nd_api_store_error(r, rc, op->is_policy ? "the policy change" : "the status change");
    wf_free(op);
}

static const nd_pending_steps wf_steps = {wf_ask, NULL, wf_answer};

/* Asks the registry for the change in r->op and answers, now or after the
 * commit (pending.c). */
static void wf_run(nd_req *r)
{
    nd_pending_start(r, &wf_steps);
}

/* Decodes the id of /documents/{id}/SUB; answers and returns NULL on error. */
static wf_op *wf_op_new(nd_req *r, const char *id_enc, size_t id_enc_len)
{
    char enc[3 * ND_ID_MAX_UTF8 + 1];
    if (id_enc_len >= sizeof(enc)) {
        nd_api_error(r, 400, "invalid_field", "the id is too long");
        return NULL;
    }
    memcpy(enc, id_enc, id_enc_len);
    enc[id_enc_len] = 0;
    wf_op *op = calloc(1, sizeof(*op));
    if (!op)
        nd_die_oom(__func__);
    nd_request_error e;
    if (nd_request_parse_document_id(enc, &op->id, &op->id_len, &e) < 0) {
        nd_api_request_error(r, &e);
        wf_free(op);
        return NULL;
    }
    return op;
}

static void policy_body(nd_req *r, int status);

static void handle_policy(nd_req *r, wf_op *op)
{
    if (!nd_api_json_body(r)) {
        wf_free(op);
        return;
    }
    r->op = op;
    /* A 404 or 403 decided here: on a replica, on the latest state. */
    if (!nd_pending_at_latest(r) && decided_here(r, op->id, op->id_len))
        nd_pending_catch_up(r, policy_body);
    else
        policy_body(r, 0);
}

/* The policy change in r->op, once the document's holder and owner were
 * asked (status: the catch-up's, 0 when none was needed). */
static void policy_body(nd_req *r, int status)
{
    wf_op *op = r->op;
    r->op = NULL;
    if (status < 0) {
        nd_api_store_error(r, status, "the policy change");
        wf_free(op);
        return;
    }
    size_t len;
    const char *body = nd_req_body(r, &len);
    nd_policy_fields f;
    nd_request_error e;
    if (!body) {
        nd_api_error(r, 500, "internal", "out of memory");
        wf_free(op);
        return;
    }
    /* Who may change it before what it says: a caller without the right
     * learns nothing from the body's checks. */
    nd_corpus_doc d;
    int rc = nd_corpus_get(nd_api_corpus(r), op->id, op->id_len, &d);
    if (rc < 0) {
        if (rc == -EAGAIN)
            nd_api_loading(r);
        else
            nd_api_id_error(r, 404, "not_found", op->id, op->id_len, "no document with this id");
        wf_free(op);
        return;
    }
    bool may = nd_api_may_change(r, &d); /* else answered 403 */
    nd_corpus_doc_release(nd_api_corpus(r), &d);
    if (!may) {
        wf_free(op);
        return;
    }
    if (nd_request_parse_policy(nd_api_parser(r), body, len, &f, &e) < 0) {
        nd_api_request_error(r, &e);
        wf_free(op);
        return;
    }
    /* PUT replaces the policy (a field absent is unset), PATCH changes the
     * fields given: merged under the registry's writer, on the policy
     * current then (wf_decide_policy()). */
    op->patch = r->method == EVHTTP_REQ_PATCH;
    op->fields = f;
    if (f.whitelist_raw) {
        char *wl = malloc(f.whitelist_raw_len + 1);
        if (!wl)
            nd_die_oom(__func__);
        memcpy(wl, f.whitelist_raw, f.whitelist_raw_len);
        wl[f.whitelist_raw_len] = 0;
        op->fields.whitelist_raw = wl;
    }
    op->is_policy = true;
    r->op = op;
    wf_run(r);
}

static void handle_status(nd_req *r, wf_op *op, bool revoke)
{
    size_t len = 0;
    const char *body = nd_req_body(r, &len);
    const char *reason = NULL;
    size_t reason_len = 0;
    nd_request_error e;
    if (!body) {
        nd_api_error(r, 500, "internal", "out of memory");
        wf_free(op);
        return;
    }
    /* The body is optional: a Content-Type is needed only with one. */
    bool empty = true;
    for (size_t i = 0; i < len && empty; i++)
        empty = body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n';
    if ((!empty && !nd_api_json_body(r)) ||
        (nd_request_parse_reason(nd_api_parser(r), body, len, &reason, &reason_len, &e) < 0 &&
         (nd_api_request_error(r, &e), true))) {
        wf_free(op);
        return;
    }
    if (reason) {
        if (!(op->reason = malloc(reason_len + 1)))
            nd_die_oom(__func__);
        memcpy(op->reason, reason, reason_len);
        op->reason[reason_len] = 0;
        op->reason_len = reason_len;
    }
    op->status = revoke ? ND_CLAIM_REVOKED : ND_CLAIM_ACTIVE;
    r->op = op;
    wf_run(r);
}

static void handle_copies(nd_req *r, wf_op *op)
{
    nd_page_req pg;
    nd_request_error e;
    if (nd_request_parse_page(nd_api_query(r), false, &pg, &e) < 0) {
        nd_api_request_error(r, &e);
        wf_free(op);
        return;
    }
    nd_corpus_doc d;
    int rc = nd_corpus_get(nd_api_corpus(r), op->id, op->id_len, &d);
    if (rc == 0)
        nd_audit_page(r, "copies", ND_EVENT_DETECTION, d.registered_at_us, &pg);
    else if (rc == -EAGAIN)
        nd_api_loading(r);
    else
        nd_api_id_error(r, 404, "not_found", op->id, op->id_len, "no document with this id");
    nd_corpus_doc_release(nd_api_corpus(r), &d);
    wf_free(op);
}

void nd_workflow_document(nd_req *r, const char *sub, const char *id_enc, size_t id_enc_len)
{
    const char *allow = sub[0] == 'p' ? "PUT, PATCH" : sub[0] == 'c' ? "GET, HEAD" : "POST";
    int want = sub[0] == 'p'   ? (EVHTTP_REQ_PUT | EVHTTP_REQ_PATCH)
               : sub[0] == 'c' ? (EVHTTP_REQ_GET | EVHTTP_REQ_HEAD)
                               : EVHTTP_REQ_POST;
    if (!((int)r->method & want)) {
        reply_method(r, allow);
        return;
    }
    if (!(sub[0] == 'c' ? nd_api_authorized_read(r) : nd_api_authorized(r)))
        return;
    wf_op *op = wf_op_new(r, id_enc, id_enc_len);
    if (!op)
        return;
    if (sub[0] == 'p')
        handle_policy(r, op);
    else if (sub[0] == 'c')
        handle_copies(r, op);
    else
        handle_status(r, op, strcmp(sub, "revoke") == 0);
}

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

/* The deletion's ask: who may change the document is asked on every run
 * (it may have changed while this waited behind another change). */
static int ask_delete(nd_req *r)
{
    op_state *op = r->op;
    bool latest = nd_pending_at_latest(r);
    if (!latest && decided_here(r, op->rq.id, op->rq.id_len))
        return ND_PENDING_LATEST; /* a 404 or 403: on the latest state */
    if (!may_change_id(r, op->rq.id, op->rq.id_len)) {
        r->op = NULL;
        op_free(op);
        return ND_PENDING_ANSWERED;
    }
    int rc = nd_corpus_delete(nd_api_corpus(r), op->rq.id, op->rq.id_len, nd_workflow_delete_audit, r,
                                nd_pending_done, r);
    return !latest && rc == -ENOENT ? ND_PENDING_LATEST : rc;
}

static void delete_answer(nd_req *r, void *state, int rc, bool completed)
{
    nd_api *api = nd_api_of(r);
    op_state *op = state;
    if (completed) {
        nd_metrics_event(api->metrics, rc == 0 ? ND_EV_DELETED : ND_EV_DELETE_FAILED);
        if (rc == 0)
            reply_deleted(r, op);
        else
            nd_api_store_error(r, rc, "the deletion");
    } else if (rc == 0) {
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

static const nd_pending_steps nd_delete_steps = {ask_delete, NULL, delete_answer};

/* The kept text of a document, read for its answer: the bytes copied
 * into the reply as they are visited. */
static int write_text(void *arg, const char *text, size_t len)
{
    nd_reply *w = arg;
    nd_reply_key(w, "text");
    nd_reply_string(w, text, len);
    nd_reply_key(w, "text_kept");
    nd_reply_bool(w, true);
    return 0;
}

/* Answers 200 with the stored record of d and, with want_text, its kept
 * text ("text": the text as submitted, "text_kept": true) or that none is
 * kept ("text": null, "text_kept": false: registered with --keep-text=false,
 * before texts were kept, or carried by no replica entry); an unreadable
 * text is a 500. */
static void reply_document(nd_req *r, const nd_corpus_doc *d, bool want_text)
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
    if (want_text) {
        int rc = nd_corpus_text(nd_api_corpus(r), d->registered_at_us, write_text, &w);
        if (rc == -ENOENT) {
            nd_reply_key(&w, "text");
            nd_reply_null(&w);
            nd_reply_key(&w, "text_kept");
            nd_reply_bool(&w, false);
        } else if (rc < 0) {
            evbuffer_drain(w.out, evbuffer_get_length(w.out)); /* the body begun: not sent */
            nd_api_store_error(r, rc, "reading the kept text");
            return;
        }
    }
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 200);
}

/* GET /documents/{id}: answers from the registry. */
static void run_get(nd_req *r)
{
    op_state *op = r->op;
    r->op = NULL;
    nd_corpus_doc d;
    int rc = nd_corpus_get(nd_api_corpus(r), op->rq.id, op->rq.id_len, &d);
    if (rc == 0)
        reply_document(r, &d, op->want_text);
    else if (rc == -EAGAIN)
        nd_api_loading(r);
    else
        nd_api_id_error(r, 404, "not_found", op->rq.id, op->rq.id_len, "no document with this id");
    nd_corpus_doc_release(nd_api_corpus(r), &d);
    op_free(op);
}

void handle_document(nd_req *r)
{
    /* /documents/{id}/policy, /revoke, /restore, /copies. */
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
        nd_pending_start(r, &nd_delete_steps);
        return;
    }
    bool latest;
    nd_request_error e;
    if (nd_request_query_consistency(nd_api_query(r), &latest, &e) < 0 ||
        nd_request_query_switch(nd_api_query(r), "text", &op->want_text, &e) < 0) {
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
