/* claim.h - a document's claim to be the original (issue 13): its reprint
 * policy and the action a check's answer gives the submitting account.
 *
 * The policy is kept as compact JSON text with the document
 * ({"reprint":"allow"|"forbid","whitelist":[{"account":"..",
 * "may_modify":bool,"may_hide_source":bool},..]}, only the fields given;
 * none at all: no policy, NULL). nd_policy_parse() / nd_policy_serialize()
 * read and write it with jansson (off the hot path: requests that set a
 * policy, GET /documents); nd_policy_lookup() answers the one question a
 * check asks of it (the reprint rule and this account's whitelist entry)
 * by scanning the text, without allocating.
 *
 * The decision (nd_claim_decide(), pure):
 * - a verified match is evidence unless it has the request's (non-empty)
 *   account or its claim is revoked (a superseded claim is evidence);
 * - no evidence: publish;
 * - else the source is the evidence with the smallest registered_at (the
 *   earliest claim, not the most similar); its whitelist entry for the
 *   request's account gives publish_as_reprint with show_source =
 *   !may_hide_source and may_modify; else its reprint rule (or, unset, the
 *   server's default) gives publish_as_reprint (show_source true,
 *   may_modify false) when allow, block when forbid. A request without an
 *   account is on no whitelist. */
#ifndef ND_CLAIM_H
#define ND_CLAIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A policy's reprint rule (same values as request.h's
 * ND_REQUEST_REPRINT_*). */
enum nd_reprint {
    ND_REPRINT_UNSET = 0, /* not given: the server's default applies */
    ND_REPRINT_ALLOW = 1,
    ND_REPRINT_FORBID = 2,
};

/* A claim's status (the store's ND_CLAIM_ACTIVE / _REVOKED /
 * _SUPERSEDED). A superseded claim is a later original of a text whose
 * earlier claim was restored: still evidence, as an active one. */
enum nd_claim_status {
    ND_STATUS_ACTIVE = 0,
    ND_STATUS_REVOKED = 1,
    ND_STATUS_SUPERSEDED = 2,
};

/* What the submitting account may do with the article. */
enum nd_action {
    ND_ACTION_PUBLISH = 0, /* original */
    ND_ACTION_REPRINT = 1, /* publish_as_reprint, crediting the source */
    ND_ACTION_BLOCK = 2,   /* copies an original that forbids reprints */
};

#define ND_POLICY_WHITELIST_MAX 256    /* entries of a whitelist */
#define ND_POLICY_TEXT_MAX (64u << 10) /* a policy's compact JSON, bytes (ND_POLICY_MAX) */
#define ND_POLICY_ACCOUNT_MAX 1024     /* an account, bytes (ND_ACCOUNT_MAX) */

/* The names of the enums in answers: "allow"/"forbid" (unset: NULL),
 * "publish"/"publish_as_reprint"/"block", "active"/"revoked"/"superseded"
 * (any other status: "active"). */
const char *nd_reprint_name(int reprint);
const char *nd_action_name(int action);
const char *nd_status_name(int status);

/* One whitelist entry. */
typedef struct nd_policy_entry {
    char *account; /* NUL-terminated, account_len bytes (owned by the policy) */
    size_t account_len;
    bool may_modify;
    bool may_hide_source;
} nd_policy_entry;

/* A policy, parsed. Caller's storage: zero it (or nd_policy_parse() into
 * it), release with nd_policy_finish(). */
typedef struct nd_policy {
    int reprint;        /* enum nd_reprint */
    bool has_whitelist; /* "whitelist" given (it may be empty) */
    size_t n;           /* entries[0..n) */
    nd_policy_entry *entries;
} nd_policy;

/* Frees what p owns and zeroes it. NULL is allowed. */
void nd_policy_finish(nd_policy *p);

/* Adds an entry (account copied). Returns 0; -EEXIST when the account is
 * listed already; -E2BIG past ND_POLICY_WHITELIST_MAX entries; -EINVAL for
 * an account of 0 or over ND_POLICY_ACCOUNT_MAX bytes; -ENOMEM. Sets
 * has_whitelist. */
int nd_policy_add(nd_policy *p, const char *account, size_t account_len, bool may_modify,
                  bool may_hide_source);

/* Parses and validates the policy text json[0..len) into *out (zeroed
 * first). NULL or len 0: no policy (out stays empty). An object whose
 * "reprint", if present, is "allow" or "forbid" and whose "whitelist", if
 * present, is an array of at most ND_POLICY_WHITELIST_MAX objects, each
 * with a string "account" (1..ND_POLICY_ACCOUNT_MAX bytes, no NUL) and
 * optional booleans "may_modify", "may_hide_source" (default false);
 * unknown members ignored. Returns 0, or -EINVAL (bad JSON or a field
 * wrong: why in err[0..errcap), naming the field, e.g.
 * "whitelist[3].account"), -EEXIST (an account listed twice; err names
 * it), -E2BIG (too many entries), -ENOMEM. On error *out is empty. */
int nd_policy_parse(const char *json, size_t len, nd_policy *out, char *err, size_t errcap);

/* Writes p as compact JSON: {"reprint":..} and/or {"whitelist":[..]}, in
 * that order, each entry {"account","may_modify","may_hide_source"}, only
 * the fields set. *out gets a new NUL-terminated string (caller frees) of
 * *out_len bytes, or NULL with 0 when p sets nothing (no policy). Returns
 * 0, -E2BIG (over ND_POLICY_TEXT_MAX bytes), -ENOMEM. */
int nd_policy_serialize(const nd_policy *p, char **out, size_t *out_len);

/* What a check needs of a stored policy, for one account. */
typedef struct nd_policy_view {
    int reprint;     /* enum nd_reprint as stored (UNSET: not given) */
    bool listed;     /* the account has a whitelist entry */
    bool may_modify; /* its entry's flags (false when not listed) */
    bool may_hide_source;
} nd_policy_view;

/* Reads the reprint rule of policy[0..len) (NULL: none) and the whitelist
 * entry of account[0..account_len) (NULL or 0: anonymous, never listed)
 * into *out, scanning the text once; strings with escapes are compared
 * decoded. Does not allocate. Returns 0, or -EINVAL when the text is not a
 * policy as nd_policy_parse() takes it (then *out is as for no policy: the
 * decision falls back to the default; a stored policy was validated when
 * written, so this means corruption). */
int nd_policy_lookup(const char *policy, size_t len, const char *account, size_t account_len,
                     nd_policy_view *out);

/* One verified match, as a claim. Pointers borrowed. */
typedef struct nd_claim {
    int64_t registered_at_us; /* the claim's time (unique) */
    const char *account;      /* the document's account, NULL/0: none */
    size_t account_len;
    const char *policy; /* its policy text, NULL/0: none */
    size_t policy_len;
    int status; /* enum nd_claim_status */
} nd_claim;

/* True when claim c has the request's account (both non-empty, equal
 * bytes). */
bool nd_claim_same_account(const nd_claim *c, const char *account, size_t account_len);

/* True when c makes the request's article not original: not the same
 * account and not revoked. */
bool nd_claim_is_evidence(const nd_claim *c, const char *account, size_t account_len);

/* The decision of a check. */
typedef struct nd_claim_decision {
    int action;       /* enum nd_action */
    size_t source;    /* index of the source claim; SIZE_MAX with publish */
    bool show_source; /* publish_as_reprint only (else false) */
    bool may_modify;  /* publish_as_reprint only (else false) */
} nd_claim_decision;

/* The action for the source claim src (evidence) towards account: the
 * whitelist, else the reprint rule, else default_reprint (enum nd_reprint;
 * UNSET counts as allow). Sets out->action, show_source, may_modify
 * (out->source untouched). Does not allocate. */
void nd_claim_action(const nd_claim *src, const char *account, size_t account_len,
                     int default_reprint, nd_claim_decision *out);

/* Decides a check from its verified matches claims[0..n) (any order) for
 * the request's account (NULL/0: anonymous) and the server's
 * default_reprint: publish when none is evidence, else the action of the
 * earliest evidence (nd_claim_action()). Pure; does not allocate. */
void nd_claim_decide(const nd_claim *claims, size_t n, const char *account, size_t account_len,
                     int default_reprint, nd_claim_decision *out);

#endif
