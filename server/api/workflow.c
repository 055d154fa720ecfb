/* workflow.c - the originality workflow's endpoints (issue 13): a
 * document's reprint policy (PUT/PATCH /documents/{id}/policy), its claim's
 * appeals (POST /documents/{id}/revoke, /restore), the copies found of it
 * (GET /documents/{id}/copies), the audit log (GET /audit), and the parts
 * of the check's and the document's answers that say what to do.
 *
 * Writes go through the registry (which replaces the document and has the
 * store amend its record and append the audit entry in one transaction)
 * and are answered after their commit, like a registration. Reads of the
 * journals (copies, audit) are one read transaction of the store each. */
#include "workflow.h"
#include "answer.h"
#include "clock.h"
#include "log.h"

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
    char *id; /* decoded, NUL-terminated */
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
    nd_reg_change *ch;
    int done_status;
    unsigned stale_tries; /* decided again after another replica wrote first */
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

/* ---- policies as answers ---- */

/* {"reprint": effective, "explicit": bool, "whitelist": [...]} of the
 * stored policy text (NULL: none). */
static void add_policy(nd_reply *w, const nd_config *cfg, const char *policy, size_t len)
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

static const char *status_name(int status)
{
    return nd_status_name(status); /* claim.h: the same values as the store's */
}

/* The id of the record stored at a time (copied). */
typedef struct id_at {
    char id[ND_ID_MAX];
    size_t len;
} id_at;

static int visit_id(void *arg, const nd_record *rec)
{
    id_at *a = arg;
    if (rec->id_len <= sizeof(a->id)) {
        memcpy(a->id, rec->id, rec->id_len);
        a->len = rec->id_len;
    }
    return 0;
}

/* "superseded_by": {"id" (while that document is stored),
 * "registered_at"} of superseded document d: one store read. */
static void add_superseded_by(nd_req *r, nd_reply *w, const nd_doc *d)
{
    id_at a = {.len = 0};
    nd_reply_key(w, "superseded_by");
    nd_reply_object(w);
    if (nd_store_get(nd_api_of(r)->store, d->superseded_by_us, visit_id, &a) == 0 && a.len) {
        nd_reply_key(w, "id");
        nd_reply_string(w, a.id, a.len);
    }
    nd_reply_key(w, "registered_at");
    nd_reply_time(w, d->superseded_by_us);
    nd_reply_object_end(w);
}

/* Whether a document carries any of the workflow's state: answers about a
 * document without any (and requests without an account) keep the bytes
 * they had before issue 13. */
static bool has_claim_state(const nd_doc *d)
{
    return d->account || d->policy || d->status != ND_CLAIM_ACTIVE;
}

void nd_workflow_add_document(nd_req *r, nd_reply *w, const nd_doc *d)
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
    nd_reply_key(w, "action");
    const char *a = action_name(res->action);
    nd_reply_plain(w, a, strlen(a));
    if (res->action == ND_ACTION_PUBLISH || !res->source)
        return;
    const nd_doc *s = res->source;
    nd_reply_key(w, "source");
    nd_reply_object(w);
    nd_reply_key(w, "id");
    nd_reply_string(w, s->id, s->id_len);
    if (s->account) {
        nd_reply_key(w, "account");
        nd_reply_string(w, s->account, s->account_len);
    }
    nd_reply_key(w, "meta");
    nd_api_add_meta(w, s);
    nd_reply_key(w, "registered_at");
    nd_reply_time(w, s->registered_at_us);
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
    const nd_doc *d = m->doc;
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
static char *take_text(struct evbuffer *buf, size_t *len)
{
    *len = evbuffer_get_length(buf);
    char *text = malloc(*len + 1);
    if (!text)
        nd_die_oom(__func__);
    evbuffer_remove(buf, text, *len);
    text[*len] = 0;
    return text;
}

char *nd_workflow_detection(const nd_check_req *rq, const nd_check_res *res, nd_store_event *ev)
{
    if (!rq->id || res->original || !res->source)
        return NULL;
    const nd_match *m = NULL;
    for (size_t i = 0; i < res->nmatches && !m; i++)
        if (res->matches[i].doc == res->source)
            m = &res->matches[i];
    struct evbuffer *buf = evbuffer_new();
    if (!buf)
        nd_die_oom(__func__);
    nd_reply w;
    nd_reply_init(&w, buf);
    nd_reply_object(&w);
    nd_reply_key(&w, "id");
    nd_reply_string(&w, rq->id, rq->id_len);
    if (rq->account) {
        nd_reply_key(&w, "account");
        nd_reply_string(&w, rq->account, rq->account_len);
    }
    const char *kind = m ? nd_match_kind_name((nd_match_kind)m->kind) : "near_duplicate";
    nd_reply_key(&w, "kind");
    nd_reply_plain(&w, kind, strlen(kind));
    nd_reply_key(&w, "resemblance");
    nd_reply_fraction(&w, m ? m->resemblance : 0);
    nd_reply_key(&w, "containment");
    nd_reply_fraction(&w, m ? m->containment : 0);
    nd_reply_key(&w, "distance");
    nd_reply_u64(&w, m ? m->distance : 0);
    nd_reply_object_end(&w);
    if (w.failed)
        nd_die_oom(__func__);
    size_t len;
    char *value = take_text(buf, &len);
    evbuffer_free(buf);
    *ev = (nd_store_event){.kind = ND_EVENT_DETECTION,
                           .owner_at = res->source->registered_at_us,
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
    struct evbuffer *buf = evbuffer_new();
    if (!buf)
        nd_die_oom(__func__);
    nd_reply w;
    nd_reply_init(&w, buf);
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
    if (w.failed)
        nd_die_oom(__func__);
    size_t len;
    char *value = take_text(buf, &len);
    evbuffer_free(buf);
    *ev = (nd_store_event){.kind = ND_EVENT_AUDIT,
                           .owner_at = 0,
                           .at_us = nd_log_now_us(),
                           .value = value,
                           .value_len = len};
    return value;
}

/* The audit entry of a registration or deletion of d by request r: its
 * detail is d's account (or null) and registered_at. */
static char *doc_audit(nd_req *r, const char *action, const nd_doc *d, nd_store_event *ev)
{
    struct evbuffer *buf = evbuffer_new();
    if (!buf)
        nd_die_oom(__func__);
    nd_reply w;
    nd_reply_init(&w, buf);
    nd_reply_object(&w);
    nd_reply_key(&w, "account");
    if (d->account)
        nd_reply_string(&w, d->account, d->account_len);
    else
        nd_reply_null(&w);
    nd_reply_key(&w, "registered_at");
    nd_reply_time(&w, d->registered_at_us);
    nd_reply_object_end(&w);
    if (w.failed)
        nd_die_oom(__func__);
    size_t dlen;
    char *detail = take_text(buf, &dlen);
    evbuffer_free(buf);
    char *value = nd_workflow_audit_event(r, action, d->id, d->id_len, detail, dlen, ev);
    free(detail);
    return value;
}

char *nd_workflow_register_audit(void *req, const struct nd_doc *d, struct nd_store_event *ev)
{
    return doc_audit(req, "register", d, ev);
}

char *nd_workflow_delete_audit(void *req, const nd_doc *d, nd_store_event *ev)
{
    return doc_audit(req, "delete", d, ev);
}

/* ---- policy, revoke, restore: changes through the registry ---- */

static void wf_resume(nd_task *t);

static void wf_done(void *arg, nd_reg_change *ch, int status)
{
    nd_req *r = arg;
    wf_op *op = r->op;
    op->ch = ch;
    op->done_status = status;
    r->task.fn = wf_resume;
    nd_worker_post(r->worker, &r->task);
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
    struct evbuffer *buf = evbuffer_new();
    if (!buf)
        nd_die_oom(__func__);
    nd_reply_init(w, buf);
    nd_reply_object(w);
    return buf;
}

/* A policy change: op's fields over the current policy (PATCH) or in its
 * place (PUT); the audit entry's detail holds the policy replaced and the
 * new one, the larger first given as its digest when both do not fit. */
static int wf_decide_policy(void *arg, nd_claim_change *c)
{
    nd_req *r = arg;
    wf_op *op = r->op;
    const nd_doc *d = c->doc;
    free(op->policy);
    if (nd_policy_merge(op->patch ? d->policy : NULL, op->patch ? d->policy_len : 0,
                        &op->fields, &op->policy, &op->policy_len, &op->err) < 0) {
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
static void write_predates(nd_reply *w, nd_doc *const *docs, size_t n)
{
    nd_reply_array(w);
    for (size_t i = 0; i < n; i++) {
        nd_reply_object(w);
        nd_reply_key(w, "id");
        nd_reply_string(w, docs[i]->id, docs[i]->id_len);
        if (docs[i]->account) {
            nd_reply_key(w, "account");
            nd_reply_string(w, docs[i]->account, docs[i]->account_len);
        }
        nd_reply_key(w, "registered_at");
        nd_reply_time(w, docs[i]->registered_at_us);
        nd_reply_object_end(w);
    }
    nd_reply_array_end(w);
}

/* A revoke or restore: the audit entry's detail holds the status, the
 * reason, "previous": "superseded" when the claim was, and (a restore) the
 * documents it now predates, as many as fit. */
static int wf_decide_status(void *arg, nd_claim_change *c)
{
    nd_req *r = arg;
    wf_op *op = r->op;
    bool restore = op->status == ND_CLAIM_ACTIVE;
    free(op->predates);
    op->predates = NULL;
    op->predates_truncated = c->predated_truncated;
    if (restore) {
        nd_reply w;
        struct evbuffer *buf = evbuffer_new();
        if (!buf)
            nd_die_oom(__func__);
        nd_reply_init(&w, buf);
        write_predates(&w, c->predated, c->npredated);
        if (w.failed)
            nd_die_oom(__func__);
        size_t len;
        op->predates = take_text(buf, &len);
        evbuffer_free(buf);
    }
    for (size_t keep = c->npredated;; keep /= 2) {
        nd_reply w;
        struct evbuffer *buf = detail_begin(&w);
        nd_reply_key(&w, "status");
        nd_reply_plain(&w, restore ? "active" : "revoked", restore ? 6 : 7);
        if (c->doc->status == ND_CLAIM_SUPERSEDED) { /* else implied by the change */
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

static void wf_run(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    wf_op *op = r->op;
    /* Asked again on every run: the document may have changed while this
     * change waited behind another. */
    nd_doc *d = NULL;
    if (nd_registry_get(api->reg, op->id, op->id_len, &d) == 0) {
        bool may = nd_api_may_change(r, d); /* else answered 403 */
        nd_doc_release(d);
        if (!may) {
            r->op = NULL;
            wf_free(op);
            return;
        }
    }
    nd_verdict_params params;
    nd_verdict_params_default(&params);
    params.min_resemblance = api->cfg->min_resemblance;
    params.min_containment = api->cfg->min_containment;
    op->refused = false;
    int rc = op->is_policy
                 ? nd_registry_change_policy(api->reg, op->id, op->id_len, wf_decide_policy, r,
                                             wf_done, r)
                 : nd_registry_change_status(api->reg, op->id, op->id_len, op->status, api->cfg->k,
                                             &params, wf_decide_status, r, wf_done, r);
    if (rc == ND_REG_QUEUED || rc == ND_REG_WAIT)
        return; /* wf_resume() answers */
    r->op = NULL;
    if (op->refused)
        nd_api_request_error(r, &op->err);
    else if (rc == 0)
        wf_reply(r, op);
    else if (rc == -ENOENT)
        nd_api_id_error(r, 404, "not_found", op->id, op->id_len, "no document with this id");
    else if (rc == -EAGAIN)
        nd_api_loading(r);
    else if (rc == -ENOMEM)
        nd_api_error(r, 500, "internal", "out of memory");
    else
        nd_api_store_error(r, rc, op->is_policy ? "the policy change" : "the status change");
    wf_free(op);
}

static void wf_resume(nd_task *t)
{
    nd_req *r = (nd_req *)((char *)t - offsetof(nd_req, task));
    wf_op *op = r->op;
    if (!op->ch) { /* waited behind another change of this id: ask again */
        wf_run(r);
        return;
    }
    int rc = nd_registry_complete(nd_api_of(r)->reg, op->ch, op->done_status);
    op->ch = NULL;
    if (rc == -ESTALE && op->stale_tries++ < ND_API_STALE_TRIES) {
        wf_run(r); /* another replica wrote first: again, on the newer state */
        return;
    }
    r->op = NULL;
    if (rc == 0)
        wf_reply(r, op);
    else if (rc == -ENOENT) /* deleted meanwhile */
        nd_api_id_error(r, 404, "not_found", op->id, op->id_len, "no document with this id");
    else
        nd_api_store_error(r, rc, op->is_policy ? "the policy change" : "the status change");
    wf_free(op);
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

static void handle_policy(nd_req *r, wf_op *op)
{
    if (!nd_api_json_body(r)) {
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
    nd_doc *d = NULL;
    int rc = nd_registry_get(nd_api_of(r)->reg, op->id, op->id_len, &d);
    if (rc < 0) {
        if (rc == -EAGAIN)
            nd_api_loading(r);
        else
            nd_api_id_error(r, 404, "not_found", op->id, op->id_len, "no document with this id");
        wf_free(op);
        return;
    }
    bool may = nd_api_may_change(r, d); /* else answered 403 */
    nd_doc_release(d);
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

/* ---- lists: copies and the audit log ---- */

typedef struct page_walk {
    nd_reply *w;
    size_t limit, seen;
    int64_t last_at;      /* the last entry written */
    bool more;            /* one more entry than the limit exists */
    const char *document; /* audit: only entries of this document (NULL: all) */
    size_t document_len;
    nd_request_parser *parser;
    nd_req *viewer; /* audit: only entries this caller may see (NULL: all) */
} page_walk;

/* Whether the caller of pw may see the audit entry whose members are
 * mem[0..n): one it made itself (its client), or one about a document of
 * an account it acts for (the document's account now), or, for a client,
 * one about a document it registered (read from the store). */
static bool entry_visible(page_walk *pw, const nd_json_member *mem, size_t n)
{
    nd_req *r = pw->viewer;
    const nd_json_member *client = nd_json_find(mem, n, "client");
    if (client && client->value.type == ND_JSON_STRING && r->client &&
        client->value.str_len == strlen(r->client) &&
        memcmp(client->value.str, r->client, client->value.str_len) == 0)
        return true;
    const nd_json_member *doc = nd_json_find(mem, n, "document");
    nd_doc *d = NULL;
    if (!doc || doc->value.type != ND_JSON_STRING ||
        nd_registry_get(nd_api_of(r)->reg, doc->value.str, doc->value.str_len, &d) < 0)
        return false;
    bool visible = nd_api_is_client(r)
                       ? nd_api_registered(r, d)
                       : d->account && nd_api_may_act_for(r, d->account, d->account_len);
    nd_doc_release(d);
    return visible;
}

/* Writes one stored value (a compact JSON object) with its time member
 * first (audit: "at") or last (copies: "detected_at"). */
static int visit_entry(void *arg, const nd_store_event *ev)
{
    page_walk *pw = arg;
    if (ev->value_len < 2 || ev->value[0] != '{' || ev->value[ev->value_len - 1] != '}')
        return 0; /* not written by this server: skipped */
    if (pw->document || pw->viewer) {
        size_t n;
        nd_json_member *mem = pw->parser->members;
        nd_json_error jerr;
        if (nd_json_read_object(ev->value, ev->value_len, &pw->parser->js, mem,
                                ND_REQUEST_MAX_MEMBERS, &n, &jerr) < 0)
            return 0;
        const nd_json_member *doc = nd_json_find(mem, n, "document");
        if (pw->document &&
            (!doc || doc->value.type != ND_JSON_STRING || doc->value.str_len != pw->document_len ||
             memcmp(doc->value.str, pw->document, pw->document_len) != 0))
            return 0;
        if (pw->viewer && !entry_visible(pw, mem, n))
            return 0;
    }
    if (pw->seen == pw->limit) {
        pw->more = true;
        return 1;
    }
    pw->seen++;
    pw->last_at = ev->at_us;
    nd_reply *w = pw->w;
    bool empty = ev->value_len == 2;
    if (ev->kind == ND_EVENT_AUDIT) {
        nd_reply_object(w);
        nd_reply_key(w, "at");
        nd_reply_time(w, ev->at_us);
        if (!empty) /* its members, after a comma the writer places */
            nd_reply_raw(w, ev->value + 1, ev->value_len - 2);
        nd_reply_object_end(w);
    } else {
        nd_reply_raw(w, ev->value, ev->value_len - 1); /* without its '}' */
        w->comma = !empty;
        nd_reply_key(w, "detected_at");
        nd_reply_time(w, ev->at_us);
        nd_reply_object_end(w);
    }
    return 0;
}

/* Writes the list of kind of owner as {"<name>":[...],"next_cursor":..}. */
static void reply_page(nd_req *r, const char *name, nd_event_kind kind, int64_t owner,
                       const nd_page_req *pg)
{
    nd_api *api = nd_api_of(r);
    nd_request_error e;
    int64_t before = -1;
    int ck = kind == ND_EVENT_AUDIT ? ND_CURSOR_AUDIT : ND_CURSOR_COPIES;
    if (pg->has_cursor && nd_request_cursor_decode(pg->cursor, ck, owner, &before, &e) < 0) {
        nd_api_request_error(r, &e);
        return;
    }
    nd_reply w;
    nd_api_body_begin(r, &w);
    nd_reply_object(&w);
    nd_reply_key(&w, name);
    nd_reply_array(&w);
    page_walk pw = {.w = &w,
                    .limit = pg->limit,
                    .document = pg->document,
                    .document_len = pg->document_len,
                    .parser = nd_api_parser(r),
                    .viewer = kind == ND_EVENT_AUDIT && !nd_api_is_operator(r) ? r : NULL};
    /* One more than asked, to know whether a next page exists; a filter
     * (document=) reads the audit log's index by document; a caller who
     * sees only some entries reads on until it has them. */
    size_t want = pw.viewer ? 0 : pg->limit + 1;
    int rc = pg->document
                 ? nd_store_audit_of(api->store, owner, pg->document, pg->document_len, before,
                                     want, visit_entry, &pw)
                 : nd_store_events(api->store, kind, owner, before, want, visit_entry, &pw);
    nd_reply_array_end(&w);
    if (rc < 0) {
        struct evbuffer *out = w.out; /* drop what was written */
        evbuffer_drain(out, evbuffer_get_length(out));
        nd_api_store_error(r, rc == -EAGAIN ? -EIO : rc, "reading the journal");
        return;
    }
    nd_reply_key(&w, "next_cursor");
    if (pw.more) {
        char cur[ND_CURSOR_TEXT_MAX];
        nd_request_cursor_encode(ck, owner, pw.last_at, cur);
        nd_reply_plain(&w, cur, strlen(cur));
    } else {
        nd_reply_null(&w);
    }
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 200);
}

static void handle_copies(nd_req *r, wf_op *op)
{
    nd_api *api = nd_api_of(r);
    nd_page_req pg;
    nd_request_error e;
    if (nd_request_parse_page(nd_api_query(r), false, &pg, &e) < 0) {
        nd_api_request_error(r, &e);
        wf_free(op);
        return;
    }
    nd_doc *d = NULL;
    int rc = nd_registry_get(api->reg, op->id, op->id_len, &d);
    if (rc == 0)
        reply_page(r, "copies", ND_EVENT_DETECTION, d->registered_at_us, &pg);
    else if (rc == -EAGAIN)
        nd_api_loading(r);
    else
        nd_api_id_error(r, 404, "not_found", op->id, op->id_len, "no document with this id");
    nd_doc_release(d);
    wf_free(op);
}

void nd_workflow_audit(nd_req *r)
{
    /* Guarded whenever a token is set: it names clients. An operator sees
     * every entry, an account token those about documents of its accounts,
     * a client those about documents it registered, and both those they
     * made (reply_page()). */
    if (!nd_api_authorized(r))
        return;
    nd_page_req pg;
    nd_request_error e;
    if (nd_request_parse_page(nd_api_query(r), true, &pg, &e) < 0) {
        nd_api_request_error(r, &e);
        return;
    }
    reply_page(r, "entries", ND_EVENT_AUDIT, 0, &pg);
    free(pg.document);
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
