/* answer.h - what every handler of server/api/ (probes.c, fingerprint.c,
 * check.c, documents.c, audit.c, backfill.c) answers with: answers and errors written into the worker's
 * reply buffer, the token checks, the common refusals. Internal to
 * server/api/. Every answering function answers the request (or, for the
 * checks, answers it when it returns false); none allocates beyond the
 * reply buffer's growth. */
#ifndef ND_ANSWER_H
#define ND_ANSWER_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "corpus.h" /* and, through it, the values the corpus takes */
#include "http.h"
#include "reply.h"
#include "request.h"

/* api.h's (not included: api.h is the server's view of server/api/). */
typedef struct nd_api nd_api;

/* What every answer uses of its worker: the reply buffer (empty between
 * answers) and the request parser (scratch reused from request to request).
 * The first member of the worker's state (nd_api_worker_init()). */
typedef struct nd_api_scratch {
    struct evbuffer *out;
    nd_request_parser parser;
} nd_api_scratch;

/* The nd_api of a request. */
nd_api *nd_api_of(nd_req *r);

/* The corpus a request reads and changes (borrowed): picked here, once per
 * request, and used for every step of it. Today the server's one corpus;
 * a namespace picks its own here. */
nd_corpus *nd_api_corpus(nd_req *r);

/* The worker's request parser (scratch reused from request to request). */
nd_request_parser *nd_api_parser(nd_req *r);

/* Starts a body in the worker's reply buffer; returns w. */
nd_reply *nd_api_body_begin(nd_req *r, nd_reply *w);

/* Sends the body written with w with status (closing "\n" added) and
 * leaves the buffer empty for the next answer. */
void nd_api_body_send(nd_req *r, nd_reply *w, int status);

/* Closes an error body opened with error_begin() (below) and sends it. */
void nd_api_error_send(nd_req *r, nd_reply *w, int status);

/* Opens an error body {"error":{"code","message"} in the worker's buffer,
 * the message formatted (cut at 511 bytes), leaving the "error" object open
 * for extra members (nd_reply_key() + value); nd_api_error_send() closes
 * and sends it. Returns w. */
nd_reply *nd_api_error_begin(nd_req *r, nd_reply *w, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Answers 400 invalid_field naming field. */
void nd_api_invalid_field(nd_req *r, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

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

/* Answers a read with consistency "latest" that the replica could not bring
 * to the stream's latest state (nd_replica_sync(): -ENOTCONN, -ETIMEDOUT,
 * -ESHUTDOWN, -ENOMEM): 503 with Retry-After. */
void nd_api_latest_error(nd_req *r, int rc);

/* The request's query string (borrowed, without '?'), or NULL. */
const char *nd_api_query(nd_req *r);

/* The token checks: true when the request may go on, else answered 401.
 * authorized: guarded endpoints (a token configured); authorized_read:
 * reads, guarded only with --auth-all. Both set r->client on success with
 * a token. */
bool nd_api_authorized(nd_req *r);
bool nd_api_authorized_read(nd_req *r);

/* The rights of the token a request carried (auth.h: operator, or the
 * accounts it acts for). Without a token configured every caller is an
 * operator.
 * identify: sets r->client and r->who when a valid token was sent (a
 * request that needs none); answers nothing, an absent or wrong token
 * leaves the request anonymous.
 * may_act_for: true when the caller may write for account[0..len) (call
 * after authorized or identify; an anonymous caller may not).
 * is_operator: true when the caller is an operator (no answer).
 * operator: nd_api_authorized(), then true for an operator, else answers
 * 403 forbidden and returns false (admin calls).
 * is_client: true when the caller's token is a client (a named token
 * without a role, auth.h).
 * may_name: true when the caller may name account[0..len) in a check or a
 * registration: may_act_for, or a client (any account: the platform
 * vouches for its authors).
 * registered: true when the caller is the client that registered d (read
 * from the store: memory does not keep it).
 * owns: true when the caller may change document d: an operator, a token
 * of its account, or the client that registered it (no answer).
 * may_change: owns, else answers 403 forbidden naming the id and returns
 * false.
 * forbidden: answers 403 {"error":{"code":"forbidden","message"}}. */
void nd_api_identify(nd_req *r);
bool nd_api_may_act_for(nd_req *r, const char *account, size_t len);
bool nd_api_is_operator(nd_req *r);
bool nd_api_is_client(nd_req *r);
bool nd_api_may_name(nd_req *r, const char *account, size_t len);
bool nd_api_registered(nd_req *r, const nd_corpus_doc *d);
bool nd_api_owns(nd_req *r, const nd_corpus_doc *d);
bool nd_api_operator(nd_req *r);
bool nd_api_may_change(nd_req *r, const nd_corpus_doc *d);
void nd_api_forbidden(nd_req *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Accepts application/json; else answers 415 and returns false. */
bool nd_api_json_body(nd_req *r);

/* Accepts application/json (and, when plain_ok, text/plain). Returns an
 * nd_body_kind, or 0 after answering 415. */
int nd_api_content_kind(nd_req *r, bool plain_ok);

/* The request limits of a configuration. */
nd_request_limits nd_api_limits(const nd_config *cfg);

/* A document's "meta" (raw compact JSON) or null. */
void nd_api_add_meta(nd_reply *w, const nd_corpus_doc *d);

/* Times a replica decides a change again after another node wrote first
 * (a replica's store: -ESTALE), before it answers 503. */
#define ND_API_STALE_TRIES 50

/* ---- the parts of the check's and the document's answers that say
 * what to do, and the journals' values (detections, audit entries) ---- */

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
 * bytes it had before the workflow's members). */
void nd_workflow_add_document(nd_req *r, nd_reply *w, const nd_corpus_doc *d);

/* A check's added members (after "passages"): "copied_share" and
 * "share_estimated" (lib/share.h), "action", "source", "show_source",
 * "may_modify". */
void nd_workflow_add_action(nd_reply *w, const nd_check_res *res);

/* A match's added members: "share" (its own share of the text, when
 * counted), "action" (with "show_source", "may_modify" for
 * publish_as_reprint) when it is evidence; then "account" (when any),
 * "same_account", "status", none of these three when the request names
 * no account (account_given false) and the document has no workflow state
 * (as for nd_workflow_add_document()). */
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

/* The audit entry of a registration (nd_corpus_check()'s audit callback)
 * or a deletion (nd_corpus_delete()'s; both nd_corpus_audit_fn) of d by
 * the nd_req req: {"client",
 * "action": "register" / "delete", "document", "detail": {"account",
 * "registered_at"}}. Returns the value (new, the caller frees) and fills
 * *ev. Any thread (reads req's client only). */
char *nd_workflow_register_audit(void *req, const nd_corpus_doc *d, nd_store_event *ev);
char *nd_workflow_delete_audit(void *req, const nd_corpus_doc *d, nd_store_event *ev);

/* Copies what buf holds into a new NUL-terminated string (the caller
 * frees; aborts when out of memory) and empties buf; *len set. */
char *take_text(struct evbuffer *buf, size_t *len);

/* Starts a JSON value (an audit or journal value) in a new buffer that *w
 * writes into; nd_text_done() takes it. Aborts on out of memory. */
struct evbuffer *nd_text_begin(nd_reply *w);

/* The value w wrote into buf (from nd_text_begin()): returns a new
 * NUL-terminated string (the caller frees it) with *len set, and frees
 * buf. Aborts on out of memory (w->failed). */
char *nd_text_done(nd_reply *w, struct evbuffer *buf, size_t *len);

/* A claim status's name (static). */
const char *status_name(int status);

/* {"reprint": effective, "explicit": bool, "whitelist": [...]} of the
 * policy text (NULL: none), as GET /documents shows it. */
void add_policy(nd_reply *w, const nd_config *cfg, const char *policy, size_t len);

#endif
