/* claim.h - a document's claim to be the original: the claim rule and the
 * policy format. The one owner of both: the registry's verdict, the
 * handlers and the import call these, nothing else decides them.
 *
 * The policy format. A policy is kept as compact JSON text with the
 * document ({"reprint":"allow"|"forbid","whitelist":[{"account":"..",
 * "may_modify":bool,"may_hide_source":bool},..]}, only the fields given;
 * none at all: no policy, NULL). nd_policy_merge() makes it from a
 * request's fields (validated, over the stored one for a PATCH) with
 * jansson, off the hot path; nd_policy_lookup() answers the one question
 * a check asks of it (the reprint rule and this account's whitelist entry)
 * by scanning the text once, without allocating. The text is what the
 * store, the digest and the answers hold; a check reads it only for the
 * source of a verdict (one lookup per check with evidence), so it is not
 * kept parsed beside it (measured: 0.1 us for a reprint rule, 0.6 us for 3
 * whitelist entries, 52 us for the full 256, against ~60 us of CPU for a
 * whole check). The scan is its own reader, not core/json.c's: that one
 * reads the policy, then each entry again, and took 2.2 us for 3 entries
 * and 274 us for 256 (allocating past 4 KiB).
 *
 * The claim rule:
 * - a verified match is evidence unless it has the request's (non-empty)
 *   account or its claim is revoked (a superseded claim is evidence):
 *   nd_claim_is_evidence();
 * - no evidence: publish;
 * - else the source is the evidence with the smallest registered_at (the
 *   earliest claim, not the most similar); nd_claim_action(): its
 *   whitelist entry for the request's account gives publish_as_reprint
 *   with show_source = !may_hide_source and may_modify; else its reprint
 *   rule (or, unset, the server's default) gives publish_as_reprint
 *   (show_source true, may_modify false) when allow, block when forbid. A
 *   request without an account is on no whitelist. */
#ifndef ND_CLAIM_H
#define ND_CLAIM_H

#include "request.h"
#include "store_values.h" /* enum nd_claim_status (the store owns it) */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A policy's reprint rule (same values as request.h's
 * ND_REQUEST_REPRINT_*). */
enum nd_reprint {
    ND_REPRINT_UNSET = 0, /* not given: the server's default applies */
    ND_REPRINT_ALLOW = 1,
    ND_REPRINT_FORBID = 2,
};

/* What the submitting account may do with the article. */
enum nd_action {
    ND_ACTION_PUBLISH = 0, /* original */
    ND_ACTION_REPRINT = 1, /* publish_as_reprint, crediting the source */
    ND_ACTION_BLOCK = 2,   /* copies an original that forbids reprints */
};

#define ND_POLICY_WHITELIST_MAX ND_REQUEST_WHITELIST_MAX /* entries of a whitelist */
#define ND_POLICY_TEXT_MAX ND_REQUEST_POLICY_MAX         /* a policy's compact JSON, bytes */

/* The names of the enums in answers: "allow"/"forbid" (unset: NULL),
 * "publish"/"publish_as_reprint"/"block", "active"/"revoked"/"superseded"
 * (any other status: "active"). */
const char *nd_reprint_name(int reprint);
const char *nd_action_name(int action);
const char *nd_status_name(int status);

/* Makes the stored policy of a request's policy fields f applied over the
 * stored policy old[0..old_len) (NULL: none; a PATCH) or over nothing (old
 * NULL: a PUT, a registration): a field of f that is given replaces old's.
 * Each whitelist entry must be an object with a string "account" (a valid
 * id, listed once) and optional booleans "may_modify", "may_hide_source"
 * (default false); unknown members are dropped. Sets *out to the compact
 * JSON {"reprint":..,"whitelist":[{"account","may_modify",
 * "may_hide_source"}..]} with only the fields set (new, caller frees), or
 * NULL when none is. A wrong entry, more than ND_POLICY_WHITELIST_MAX
 * entries or a result over ND_POLICY_TEXT_MAX bytes: -1 with *err (400
 * invalid_field naming the field, e.g. "whitelist[3].account"); out of
 * memory: -1 with *err 500. A stored policy that does not parse counts as
 * none. Uses jansson (off the hot path: only requests that carry these
 * fields). */
int nd_policy_merge(const char *old, size_t old_len, const nd_policy_fields *f, char **out,
                    size_t *out_len, nd_request_error *err);

/* For a check with "reprint" or "whitelist" (every check: a query's are
 * validated and then ignored): sets out->policy to the policy made of
 * out->policy_in (nd_policy_merge() over nothing; new, the caller frees),
 * or NULL when neither is given. Returns 0, or -1 with *err set. */
int nd_policy_of_check(nd_check_req *out, nd_request_error *err);

/* A stored policy as an answer shows it. */
typedef struct nd_policy_desc {
    const char *reprint; /* the rule in effect: "allow" or "forbid" (static) */
    bool explicit_rule;  /* the policy sets it (else the server's default) */
    char *whitelist;     /* its whitelist as compact JSON (new, the caller
                          * frees), or NULL: none ("[]" in answers) */
} nd_policy_desc;

/* Describes the stored policy policy[0..len) (NULL: none) with the
 * server's default_reprint (enum nd_reprint; UNSET counts as allow) into
 * *out. A stored policy that does not parse counts as none. Uses jansson
 * (off the hot path: GET /documents and the answers of a change). Returns
 * 0, or -ENOMEM (out->whitelist then NULL). */
int nd_policy_describe(const char *policy, size_t len, int default_reprint, nd_policy_desc *out);

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
 * policy in its syntax or its members' types (then *out is as for no policy: the
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

/* The claim rule. True when claim c has the request's account (both
 * non-empty, equal bytes): the same account is no evidence. */
static inline bool nd_claim_same_account(const nd_claim *c, const char *account, size_t account_len)
{
    return account && account_len && c->account && c->account_len == account_len &&
           memcmp(c->account, account, account_len) == 0;
}

/* True when c, a verified match, makes the request's article not
 * original: not the same account and not revoked (a superseded claim is
 * evidence). The source of the decision is then the earliest evidence
 * (the smallest registered_at_us), and nd_claim_action() its action. */
static inline bool nd_claim_is_evidence(const nd_claim *c, const char *account, size_t account_len)
{
    return c->status != ND_CLAIM_REVOKED && !nd_claim_same_account(c, account, account_len);
}

/* The decision of a check. */
typedef struct nd_claim_decision {
    int action;       /* enum nd_action */
    bool show_source; /* publish_as_reprint only (else false) */
    bool may_modify;  /* publish_as_reprint only (else false) */
} nd_claim_decision;

/* The action for the source claim src (evidence) towards account: the
 * whitelist, else the reprint rule, else default_reprint (enum nd_reprint;
 * UNSET counts as allow). Sets out->action, show_source, may_modify
 * (out->source untouched). Does not allocate. */
void nd_claim_action(const nd_claim *src, const char *account, size_t account_len,
                     int default_reprint, nd_claim_decision *out);

#endif
