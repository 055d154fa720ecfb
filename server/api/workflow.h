/* workflow.h - the originality workflow's endpoints (issue 13) and its
 * parts of the check's and the document's answers (workflow.c). Internal
 * to server/api/. */
#ifndef ND_WORKFLOW_H
#define ND_WORKFLOW_H

#include <stdbool.h>
#include <stddef.h>

#include "http.h"
#include "registry.h"
#include "reply.h"
#include "request.h"
#include "store.h"

/* /documents/{id}/SUB: sub is "policy", "revoke", "restore" or "copies"
 * (nd_workflow_sub()), id_enc the percent-encoded id (id_enc_len bytes of
 * the path). Answers. */
void nd_workflow_document(nd_req *r, const char *sub, const char *id_enc, size_t id_enc_len);

/* When path (after "/documents/") names a sub-resource, returns its name
 * (static) and sets *id_len to the length of the encoded id before it;
 * else NULL. */
const char *nd_workflow_sub(const char *path, size_t *id_len);

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
 * ("policy", "revoke", "restore", "register", "delete", "import"), detail a
 * compact JSON object (or NULL: {}); id NULL: an entry about no one
 * document (an import), without "document". Returns the value (new,
 * caller frees) and fills *ev. */
char *nd_workflow_audit_event(nd_req *r, const char *action, const char *id, size_t id_len,
                              const char *detail, size_t detail_len, nd_store_event *ev);

/* The audit entry of a registration (an nd_check_req audit callback) or a
 * deletion (an nd_reg_audit_fn) of d by the nd_req req: {"client",
 * "action": "register" / "delete", "document", "detail": {"account",
 * "registered_at"}}. Returns the value (new, the caller frees) and fills
 * *ev. Any thread (reads req's client only). */
char *nd_workflow_register_audit(void *req, const struct nd_doc *d, struct nd_store_event *ev);
char *nd_workflow_delete_audit(void *req, const nd_doc *d, nd_store_event *ev);

/* Copies what buf holds into a new NUL-terminated string (the caller
 * frees; aborts when out of memory) and empties buf; *len set. */
char *take_text(struct evbuffer *buf, size_t *len);

/* A claim status's name (static). */
const char *status_name(int status);

/* {"reprint": effective, "explicit": bool, "whitelist": [...]} of the
 * policy text (NULL: none), as GET /documents shows it. */
void add_policy(nd_reply *w, const nd_config *cfg, const char *policy, size_t len);

#endif
