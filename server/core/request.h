/* request.h - request bodies and paths parsed and validated without HTTP.
 *
 * The handlers in api.c and the fuzz targets in tests/fuzz/ call the same
 * functions: bytes in, a request struct or an error out, ready to become an
 * HTTP answer. Nothing here touches the network, logs or reads globals.
 *
 * Pointers handed out (texts, ids, batch arrays, the raw "meta") are
 * borrowed from the body or from the parser's scratch, valid until the next
 * call with the same parser or until the body changes; the compact "meta"
 * of nd_request_check_meta() is a new string.
 *
 * null is never taken as "absent": a field given as null is refused like
 * any other value of the wrong type (400 invalid_field naming it). */
#ifndef ND_REQUEST_H
#define ND_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bounds.h"
#include "json.h"

/* The limits a body is validated against (from nd_config). */
typedef struct nd_request_limits {
    unsigned max_batch; /* most texts in one /fingerprint batch */
    size_t max_meta;    /* largest "meta" as compact JSON, bytes */
    size_t max_text;    /* longest single text, bytes of UTF-8 */
    unsigned default_k; /* k when the request gives none */
} nd_request_limits;

/* Why a request was refused. */
typedef struct nd_request_error {
    int status;            /* 400, 404, 415 or 500 */
    const char *code;      /* "invalid_json", "invalid_field", ... (static) */
    char field[32];        /* invalid_field: the field at fault ("texts[3]"), else "" */
    unsigned line, column; /* invalid_json at a position: 1-based; else 0 */
    char message[256];     /* for people; valid UTF-8 */
} nd_request_error;

/* The policy fields of a request as sent: "reprint" and "whitelist", on
 * /check-original (and an import line) and on PUT/PATCH
 * /documents/{id}/policy. What they make (the policy format) is claim.h's. */
enum nd_request_reprint {
    ND_REQUEST_REPRINT_NONE = 0, /* not given */
    ND_REQUEST_REPRINT_ALLOW = 1,
    ND_REQUEST_REPRINT_FORBID = 2,
};

#define ND_REQUEST_WHITELIST_MAX 256 /* entries of a whitelist */
#define ND_REQUEST_POLICY_MAX 65536  /* a policy as compact JSON, bytes (ND_POLICY_MAX) */
#define ND_REQUEST_REASON_MAX 1024   /* characters of a revoke/restore "reason" */

/* What a valid id or account is, for messages (with ND_ID_MAX_CHARS). */
#define ND_REQUEST_ID_RULE "1 to %d characters without control characters"

typedef struct nd_policy_fields {
    int reprint;               /* enum nd_request_reprint */
    const char *whitelist_raw; /* the "whitelist" array as sent (borrowed), NULL: not given */
    size_t whitelist_raw_len;
} nd_policy_fields;

/* Per-thread parsing state (the caller's storage, zero-initialised). */
typedef struct nd_request_parser {
    nd_json_scratch js;
    nd_json_member members[ND_REQUEST_MAX_MEMBERS];
} nd_request_parser;

/* Frees the parser's memory (the struct is the caller's). */
void nd_request_parser_finish(nd_request_parser *p);

enum nd_body_kind {
    ND_BODY_JSON = 1,
    ND_BODY_TEXT = 2,
    ND_BODY_LINES = 3, /* JSON lines (POST /import) */
};

/* Classifies a Content-Type header value (NULL when absent): application/json,
 * or text/plain when plain_ok, with an optional charset that must be UTF-8.
 * Returns an nd_body_kind, or 0 with *err set to 415. */
int nd_request_content_kind(const char *content_type, bool plain_ok, nd_request_error *err);

/* The same for a body of JSON lines: application/x-ndjson,
 * application/jsonl or application/json. Returns ND_BODY_LINES, or 0 with
 * *err set to 415. */
int nd_request_lines_kind(const char *content_type, nd_request_error *err);

/* Checks that a text of len bytes is within lim->max_text; field names it.
 * Returns 0, or -1 with *err set (400 invalid_field). */
int nd_request_text_size(size_t len, const nd_request_limits *lim, const char *field,
                         nd_request_error *err);

/* POST /fingerprint as JSON: {"text": "..."} or {"texts": ["...", ...]}. */
typedef struct nd_fingerprint_request {
    const char *text; /* the single text (borrowed), or NULL for a batch */
    size_t text_len;
    const nd_json_value *texts; /* the batch (borrowed from the parser), or NULL */
    size_t ntexts;              /* items in the batch, all strings within the limits */
} nd_fingerprint_request;

/* Parses and validates a /fingerprint JSON body. Returns 0 and fills *out, or
 * -1 with *err set (400 invalid_json / invalid_field, 500 out of memory).
 * Iterate a batch with nd_json_iter_init(&it, out->texts, &p->js). Allocates
 * only to grow the parser's scratch. */
int nd_request_parse_fingerprint(nd_request_parser *p, const char *body, size_t len,
                                 const nd_request_limits *lim, nd_fingerprint_request *out,
                                 nd_request_error *err);

/* POST /compare as JSON: {"text_a": "...", "text_b": "..."} (two texts) or
 * {"text_a": "...", "id_b": "..."} (a text and a registered document). */
typedef struct nd_compare_request {
    const char *text_a; /* borrowed, like the others */
    size_t text_a_len;
    const char *text_b; /* NULL when id_b is given */
    size_t text_b_len;
    const char *id_b; /* NULL when text_b is given */
    size_t id_b_len;
} nd_compare_request;

/* Parses and validates a /compare JSON body: text_a a string within
 * lim->max_text, and exactly one of text_b (likewise) and id_b (a valid
 * id); other members are ignored. Returns 0 and fills *out, or -1 with
 * *err set (400 invalid_json / invalid_field naming the member, 500 out of
 * memory). Allocates only to grow the parser's scratch. */
int nd_request_parse_compare(nd_request_parser *p, const char *body, size_t len,
                             const nd_request_limits *lim, nd_compare_request *out,
                             nd_request_error *err);

/* POST /check-original: what was parsed from the body (or an import
 * line), handed to the registry as it is beside the question made of its
 * text (registry/question.h: the fingerprint, the anchors, the encoded
 * sketch) and the verdict's settings (the registry's options). Pointers
 * are borrowed (from the body, the parser's scratch or the handler's)
 * unless said otherwise; a request that outlives its body (a registration
 * waiting for the store) points them at copies of its own. */
struct nd_doc;         /* registry.h */
struct nd_store_event; /* store.h */

typedef struct nd_check_req {
    /* The body (nd_request_parse_check()). */
    const char *text;
    size_t text_len;
    const char *id; /* NULL when the request has no id */
    size_t id_len;
    bool do_register;     /* register when original (needs an id) */
    bool latest;          /* "consistency": "latest": decide on the stream's
                           * latest state (a replica catches up first) */
    unsigned k;           /* 0..ND_K_MAX */
    const char *meta_raw; /* the "meta" object as sent, or NULL */
    size_t meta_raw_len;
    char *meta; /* compact JSON of "meta" (new, the caller frees;
                               * nd_request_check_meta() only), or NULL; kept
                               * if registered */
    size_t meta_len;
    /* The submitting account (borrowed; NULL: none, an anonymous
     * account), the policy fields as sent, and the policy as compact JSON
     * {"reprint"?,"whitelist"?} (new, the caller frees;
     * nd_policy_of_check() only; NULL when neither field is given),
     * stored with a registration. registered_at_us: 0 = the server's clock
     * (an import sets it). */
    const char *account;
    size_t account_len;
    nd_policy_fields policy_in;
    char *policy;
    size_t policy_len;
    int64_t registered_at_us;
    /* With registered_at_us: judge against every document, as a live check
     * does (a backdated line never outranks a stored document it copies),
     * instead of only those registered before it (an archive's backfill). */
    bool judge_live;
    /* The registering client (the name of a token without a role; set by
     * the handler, borrowed from the server's tokens), stored with a
     * registration; NULL with 0: none. */
    const char *client;
    size_t client_len;
    /* A registration's audit entry: when not NULL, called once the new
     * document d holds its time (writer held, before the store write):
     * fills *ev (an ND_EVENT_AUDIT event) and returns its value (new, the
     * registry frees it once queued), or NULL for none. The store writes
     * the entry in the registration's transaction. */
    char *(*audit)(void *audit_arg, const struct nd_doc *d, struct nd_store_event *ev);
    void *audit_arg;
    /* The text already packed for the store (text_pack.h; an import packs
     * each line's on its preparing threads, as its text is gone by the
     * time the line registers), borrowed; NULL: a registration keeps
     * text[0..text_len) (packed by the store). */
    const uint8_t *text_packed;
    size_t text_packed_len;
} nd_check_req;

/* Parses and validates a /check-original body without building any tree:
 * "meta" is only checked to be an object (the reader validated its
 * grammar and nesting) and handed out raw. Returns 0 and fills the body's
 * fields of *out (out->meta NULL, the rest zero), or
 * -1 with *err set (400, or 500 out of memory). Allocates only to grow the
 * parser's scratch. */
int nd_request_parse_check(nd_request_parser *p, const char *body, size_t len,
                           const nd_request_limits *lim, nd_check_req *out, nd_request_error *err);

/* For a request that registers, once it is authorized: checks out->meta_raw
 * against lim->max_meta and sets out->meta to its compact JSON (new; the
 * caller frees it). The size is first bounded from the raw bytes (a lower
 * bound of the compact size, counted in one pass without allocating), so
 * that jansson never reads a meta larger than the limit into a tree; the
 * compact form is then checked exactly. Does nothing without a meta.
 * Returns 0, or -1 with *err set (400 invalid_field "meta": over the limit,
 * or a duplicate key, or a NUL in a key; 500 out of memory), out->meta then
 * NULL. */
int nd_request_check_meta(nd_check_req *out, const nd_request_limits *lim, nd_request_error *err);

/* PUT/PATCH /documents/{id}/policy: {"reprint"?: "allow"|"forbid",
 * "whitelist"?: [...]} (at least an object; unknown fields ignored). Reads
 * the two fields' types only, as a check body's: the whitelist's entries
 * and the policy they make are the policy format's (nd_policy_merge(),
 * claim.h). Returns 0 and fills *out (whitelist borrowed from the body), or
 * -1 with *err set (400 invalid_json / invalid_field). */
int nd_request_parse_policy(nd_request_parser *p, const char *body, size_t len,
                            nd_policy_fields *out, nd_request_error *err);

/* Fills *err with status, code (static), field (NULL: none) and the
 * message made of fmt; returns -1. For the modules that validate what a
 * request carries beyond its shape (the policy format, claim.c). */
int nd_request_refuse(nd_request_error *err, int status, const char *code, const char *field,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* POST /documents/{id}/revoke|restore: an empty body, or {"reason"?: "..."}
 * of at most ND_REQUEST_REASON_MAX characters. Sets *reason (borrowed, NULL
 * when none) and *reason_len. Returns 0 or -1 with *err set. */
int nd_request_parse_reason(nd_request_parser *p, const char *body, size_t len, const char **reason,
                            size_t *reason_len, nd_request_error *err);

/* A page of a list (GET /documents/{id}/copies, GET /audit), from the query
 * string: limit=1..1000 (default 100), cursor=<opaque> (from the previous
 * page's next_cursor), and for /audit document=<id>. */
enum nd_cursor_kind {
    ND_CURSOR_COPIES = 'c',
    ND_CURSOR_AUDIT = 'a',
};

#define ND_REQUEST_LIMIT_DEFAULT 100
#define ND_REQUEST_LIMIT_MAX 1000
#define ND_CURSOR_TEXT_MAX 40 /* an encoded cursor, with its NUL */

typedef struct nd_page_req {
    unsigned limit;
    bool has_cursor;                 /* false: the first page */
    char cursor[ND_CURSOR_TEXT_MAX]; /* as sent, NUL-terminated */
    char *document;                  /* document=, decoded (new, caller frees), NULL: none */
    size_t document_len;
} nd_page_req;

/* Parses query (NULL or "": defaults). allow_document: whether document=
 * is taken (else ignored like any unknown parameter). A parameter given
 * twice, a limit out of range, a malformed document id, a cursor that
 * cannot be one (too long): -1 with *err (400 invalid_field naming it). The
 * cursor is checked later against the list it must point into
 * (nd_request_cursor_decode()). Returns 0 and fills *out
 * (the caller frees out->document), or -1. */
int nd_request_parse_page(const char *query, bool allow_document, nd_page_req *out,
                          nd_request_error *err);

/* Encodes a position in a list as an opaque cursor: base64url of (kind,
 * owner, at, a check), NUL-terminated, into out[ND_CURSOR_TEXT_MAX]. */
void nd_request_cursor_encode(int kind, int64_t owner, int64_t at, char out[ND_CURSOR_TEXT_MAX]);

/* Decodes a cursor made by nd_request_cursor_encode() for this kind and
 * owner into *at. Returns 0, or -1 with *err (400 invalid_field "cursor")
 * when it is malformed, altered, or made for another list. */
int nd_request_cursor_decode(const char *cursor, int kind, int64_t owner, int64_t *at,
                             nd_request_error *err);

/* A lower bound of the size of the compact JSON that jansson writes for
 * the valid JSON value raw[0..len): white space outside strings is not
 * counted, an escape sequence and a number count 1 byte each, everything
 * else 1 byte per byte. Stops counting past stop. */
size_t nd_request_compact_bound(const char *raw, size_t len, size_t stop);

/* Reads a "consistency" value (a replica's read): "local" (*latest = false) or
 * "latest" (true). s NULL: not a string. Returns 0, or -1 with *err set
 * (400 invalid_field "consistency"). */
int nd_request_consistency(const char *s, size_t len, bool *latest, nd_request_error *err);

/* The next value of parameter name in *query (a query string; NULL:
 * none), not decoded: returns it (borrowed from the query, *len bytes) and
 * moves *query past it, or returns NULL when there is no more. Does not
 * allocate. */
const char *nd_request_query_next(const char **query, const char *name, size_t *len);

/* Reads "consistency=local|latest" from a query string (NULL: none; other
 * parameters are ignored). Returns 0 with *latest set (false when absent),
 * or -1 with *err set (400 invalid_field "consistency"). */
int nd_request_query_consistency(const char *query, bool *latest, nd_request_error *err);

/* Reads the switch "name=true|false" from a query string (NULL: none;
 * other parameters are ignored; the last one given wins). Returns 0 with
 * *on set (false when absent), or -1 with *err set (400 invalid_field
 * name: another value). Does not allocate. */
int nd_request_query_switch(const char *query, const char *name, bool *on, nd_request_error *err);

/* Decodes the percent-encoded id after "/documents/". Returns 0 with *id a
 * new NUL-terminated string (caller frees) of *len bytes, or -1 with *err
 * set: 404 when encoded is empty, 400 invalid_field "id" when the decoded id
 * is not valid. */
int nd_request_parse_document_id(const char *encoded, char **id, size_t *len,
                                 nd_request_error *err);

/* Whether id[0..len) is a valid document id: 1 to ND_ID_MAX_CHARS
 * characters of valid UTF-8, none of them a control character (C0, DEL,
 * C1). Does not allocate. */
bool nd_request_id_valid(const char *id, size_t len);

/* The text's identity, stored with a registration: XXH3-128 of
 * text[0..len) in canonical (big-endian) byte order into out[16]. */
void nd_request_text_hash(const char *text, size_t len, uint8_t out[16]);

#endif
