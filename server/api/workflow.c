/* workflow.c - the parts of the check's and the document's answers that
 * say what to do (policy, status, action, the match's account) and the
 * journals' values (detections, audit entries). */
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

/* ---- policies as answers ---- */

/* {"reprint": effective, "explicit": bool, "whitelist": [...]} of the
 * stored policy text (NULL: none). */
void add_policy(nd_reply *w, const nd_config *cfg, const char *policy, size_t len)
{
    json_t *p = policy ? json_loadb(policy, len, JSON_ALLOW_NUL, NULL) : NULL;
    json_t *rp = json_object_get(p, "reprint");
    json_t *wl = json_object_get(p, "whitelist");
    bool explicit_rule = json_is_string(rp);
    const char *reprint = explicit_rule                                      ? json_string_value(rp)
                          : cfg->default_reprint == ND_CONFIG_REPRINT_FORBID ? "forbid"
                                                                             : "allow";
    nd_reply_object(w);
    nd_reply_key(w, "reprint");
    nd_reply_string(w, reprint, strlen(reprint));
    nd_reply_key(w, "explicit");
    nd_reply_bool(w, explicit_rule);
    nd_reply_key(w, "whitelist");
    char *text = json_is_array(wl) ? json_dumps(wl, JSON_COMPACT) : NULL;
    if (text)
        nd_reply_raw(w, text, strlen(text));
    else
        nd_reply_raw(w, "[]", 2);
    free(text);
    nd_reply_object_end(w);
    json_decref(p);
}

const char *status_name(int status)
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
    return action == ND_ACTION_REPRINT ? "publish_as_reprint"
           : action == ND_ACTION_BLOCK ? "block"
                                       : "publish";
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
