/* api_internal.h - what the handlers of api.c share with workflow.c (the
 * originality workflow's endpoints, issue 13): writing answers and errors
 * into the worker's reply buffer, the token checks, the common refusals.
 * Internal to server/api/. Every function answers the request (or, for the
 * checks, answers it when it returns false); none allocates beyond the
 * reply buffer's growth. */
#ifndef ND_API_INTERNAL_H
#define ND_API_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "api.h"
#include "reply.h"
#include "request.h"

/* The nd_api of a request. */
nd_api *nd_api_of(nd_req *r);

/* The worker's request parser (scratch reused from request to request). */
nd_request_parser *nd_api_parser(nd_req *r);

/* Starts a body in the worker's reply buffer; returns w. */
nd_reply *nd_api_body_begin(nd_req *r, nd_reply *w);

/* Sends the body written with w with status. */
void nd_api_body_send(nd_req *r, nd_reply *w, int status);

/* Answers {"error":{"code","message"}} with status. */
void nd_api_error(nd_req *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Answers an error whose extra member is the document id. */
void nd_api_id_error(nd_req *r, int status, const char *code, const char *id, size_t id_len,
                     const char *message);

/* Answers a refused request (request.h) with its error. */
void nd_api_request_error(nd_req *r, const nd_request_error *e);

/* Answers a store failure (-EBUSY, -ESHUTDOWN: 503 with Retry-After; others
 * 503 storage_unavailable, logged). what: "the policy change", ... */
void nd_api_store_error(nd_req *r, int rc, const char *what);

/* 503 loading. */
void nd_api_loading(nd_req *r);

/* The token checks: true when the request may go on, else answered 401.
 * authorized: guarded endpoints (a token configured); authorized_read:
 * reads, guarded only with --auth-all. Both set r->client on success with
 * a token. */
bool nd_api_authorized(nd_req *r);
bool nd_api_authorized_read(nd_req *r);

/* Accepts application/json; else answers 415 and returns false. */
bool nd_api_json_body(nd_req *r);

/* A document's "meta" (raw compact JSON) or null. */
void nd_api_add_meta(nd_reply *w, const nd_doc *d);

/* ---- workflow.c ---- */

/* /documents/{id}/SUB: sub is "policy", "revoke", "restore" or "copies"
 * (nd_workflow_sub()), id_enc the percent-encoded id (id_enc_len bytes of
 * the path). Answers. */
void nd_workflow_document(nd_req *r, const char *sub, const char *id_enc, size_t id_enc_len);

/* When path (after "/documents/") names a sub-resource, returns its name
 * (static) and sets *id_len to the length of the encoded id before it;
 * else NULL. */
const char *nd_workflow_sub(const char *path, size_t *id_len);

/* GET /audit. */
void nd_workflow_audit(nd_req *r);

/* GET /documents/{id}'s added members: "account" (when any), "policy"
 * ({"reprint","explicit","whitelist"}) and "status"; none for a document
 * without an account, a policy or a revoked claim (its answer keeps the
 * bytes it had before issue 13). */
void nd_workflow_add_document(nd_req *r, nd_reply *w, const nd_doc *d);

/* A check's added members (after "passages"): "action", "source",
 * "show_source", "may_modify". */
void nd_workflow_add_action(nd_reply *w, const nd_check_res *res);

/* A match's added members: "account" (when any), "same_account", "status";
 * none when the request names no account (account_given false) and the
 * document has no workflow state (as for nd_workflow_add_document()). */
void nd_workflow_add_match(nd_reply *w, const nd_match *m, bool account_given);

/* The detection of a check with an id judged not original, as the
 * journal's compact JSON value (new, caller frees; *len set), or NULL when
 * none is to be written (no id, original, no source). Fills *ev (pointing
 * into the returned value and rq). */
char *nd_workflow_detection(const nd_check_req *rq, const nd_check_res *res, nd_store_event *ev);

/* An audit event for document id by the request's client: action
 * ("policy", "revoke", "restore"), detail a compact JSON object
 * (or NULL: {}). Returns the value (new, caller frees) and fills *ev. */
char *nd_workflow_audit_event(nd_req *r, const char *action, const char *id, size_t id_len,
                              const char *detail, size_t detail_len, nd_store_event *ev);

#endif
