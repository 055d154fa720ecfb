/* fuzz_workflow - the inputs of the originality workflow, byte 0
 * picks which; the rest is the input:
 *   0: a /check-original body with account/reprint/whitelist, then the
 *      policy it would store (nd_policy_of_check());
 *   1: a PUT/PATCH /documents/{id}/policy body, merged over a stored policy;
 *   2: a revoke/restore body (the reason);
 *   3: a list's query string (limit, cursor, document) and its cursor;
 *   4: a token file (named tokens or one bare token).
 *
 * Invariants: refusals are well formed (fuzz_body_common.h); a policy is
 * compact JSON that jansson reads back as an object of at most "reprint"
 * and "whitelist" (unique accounts, both flags), of at most
 * ND_REQUEST_POLICY_MAX bytes, and merging it over itself changes nothing;
 * a reason is at most ND_REQUEST_REASON_MAX characters of UTF-8; a page's
 * limit is 1..1000; a cursor decodes only for the list it was made for and
 * re-encodes to itself; a token file that loads lets each of its tokens in
 * under its own name and nothing else, and its error never quotes a token. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "claim.h"
#include "fuzz_body_common.h"

static void check_policy(const char *policy, size_t len)
{
    if (!policy)
        return;
    FUZZ_CHECK(strlen(policy) == len && len <= ND_REQUEST_POLICY_MAX, "policy size %zu", len);
    json_t *p = json_loadb(policy, len, JSON_REJECT_DUPLICATES, NULL);
    FUZZ_CHECK(json_is_object(p), "policy not an object: %s", policy);
    char *again = json_dumps(p, JSON_COMPACT);
    FUZZ_CHECK(again && strcmp(again, policy) == 0, "policy not compact: %s", policy);
    free(again);
    size_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(p, key, v)
    {
        n++;
        if (strcmp(key, "reprint") == 0) {
            FUZZ_CHECK(json_is_string(v) && (strcmp(json_string_value(v), "allow") == 0 ||
                                             strcmp(json_string_value(v), "forbid") == 0),
                       "reprint");
        } else {
            FUZZ_CHECK(strcmp(key, "whitelist") == 0 && json_is_array(v), "key %s", key);
            FUZZ_CHECK(json_array_size(v) <= ND_REQUEST_WHITELIST_MAX, "whitelist size");
            for (size_t i = 0; i < json_array_size(v); i++) {
                json_t *e = json_array_get(v, i), *a = json_object_get(e, "account");
                FUZZ_CHECK(json_object_size(e) == 3 && json_is_string(a) &&
                               json_is_boolean(json_object_get(e, "may_modify")) &&
                               json_is_boolean(json_object_get(e, "may_hide_source")),
                           "entry %zu", i);
                FUZZ_CHECK(nd_request_id_valid(json_string_value(a), json_string_length(a)),
                           "account");
                for (size_t j = 0; j < i; j++)
                    FUZZ_CHECK(!json_equal(json_object_get(json_array_get(v, j), "account"), a),
                               "account listed twice");
            }
        }
    }
    FUZZ_CHECK(n >= 1 && n <= 2, "members %zu", n);
    json_decref(p);
    /* Nothing given over it: the same policy. */
    nd_policy_fields none = {0};
    char *same = NULL;
    size_t same_len;
    nd_request_error e;
    FUZZ_CHECK(nd_policy_merge(policy, len, &none, &same, &same_len, &e) == 0, "merge");
    FUZZ_CHECK(same && same_len == len && memcmp(same, policy, len) == 0, "merge changed it");
    free(same);
}

static void check_body(const char *body, size_t len, const nd_request_limits *lim)
{
    nd_check_req cr;
    nd_request_error e;
    if (nd_request_parse_check(&parser, body, len, lim, &cr, &e) < 0) {
        fuzz_check_refusal(&e);
        return;
    }
    if (cr.account)
        FUZZ_CHECK(nd_request_id_valid(cr.account, cr.account_len), "account");
    fingerprint_ok(cr.text, cr.text_len);
    if (nd_policy_of_check(&cr, &e) < 0) {
        fuzz_check_refusal(&e);
        FUZZ_CHECK(cr.policy == NULL, "policy left on a refusal");
        return;
    }
    FUZZ_CHECK(!cr.policy == (!cr.policy_in.reprint && !cr.policy_in.whitelist_raw), "policy");
    check_policy(cr.policy, cr.policy_len);
    free(cr.policy);
}

static void policy_body(const char *body, size_t len)
{
    nd_policy_fields f;
    nd_request_error e;
    if (nd_request_parse_policy(&parser, body, len, &f, &e) < 0) {
        fuzz_check_refusal(&e);
        return;
    }
    static const char stored[] =
        "{\"reprint\":\"forbid\",\"whitelist\":[{\"account\":\"a\",\"may_modify\":true,"
        "\"may_hide_source\":false}]}";
    for (int patch = 0; patch < 2; patch++) {
        char *out = NULL;
        size_t n = 0;
        int rc = nd_policy_merge(patch ? stored : NULL, patch ? sizeof(stored) - 1 : 0, &f, &out,
                                 &n, &e);
        if (rc < 0) {
            fuzz_check_refusal(&e);
            FUZZ_CHECK(!out, "policy left on a refusal");
            continue;
        }
        check_policy(out, n);
        if (patch) /* a PATCH keeps what it does not give */
            FUZZ_CHECK(out && (f.reprint || strstr(out, "\"reprint\":\"forbid\"")) &&
                           (f.whitelist_raw || strstr(out, "\"account\":\"a\"")),
                       "patch lost a field: %s", out ? out : "(none)");
        free(out);
    }
}

static void reason_body(const char *body, size_t len)
{
    const char *reason;
    size_t n;
    nd_request_error e;
    if (nd_request_parse_reason(&parser, body, len, &reason, &n, &e) < 0) {
        fuzz_check_refusal(&e);
        return;
    }
    if (!reason)
        return;
    FUZZ_CHECK(fuzz_utf8_valid((const uint8_t *)reason, n), "reason not UTF-8");
    size_t chars = 0;
    for (size_t i = 0; i < n; i++)
        chars += ((unsigned char)reason[i] & 0xC0) != 0x80;
    FUZZ_CHECK(chars <= ND_REQUEST_REASON_MAX, "reason of %zu characters", chars);
}

static void page_query(const char *q, size_t len, uint8_t b)
{
    char *s = malloc(len + 1);
    memcpy(s, q, len);
    s[len] = 0; /* a query string ends at its NUL, like evhttp's */
    nd_page_req pg;
    nd_request_error e;
    bool latest = true;
    if (nd_request_query_consistency(s, &latest, &e) < 0) /* GET /documents/{id} */
        fuzz_check_refusal(&e);
    else if (latest)
        FUZZ_CHECK(strstr(s, "consistency=latest") != NULL, "latest from %s", s);
    if (nd_request_parse_page(s, b & 1, &pg, &e) < 0) {
        fuzz_check_refusal(&e);
        FUZZ_CHECK(pg.document == NULL, "document left on a refusal");
        free(s);
        return;
    }
    FUZZ_CHECK(pg.limit >= 1 && pg.limit <= ND_REQUEST_LIMIT_MAX, "limit %u", pg.limit);
    FUZZ_CHECK(!pg.document || (b & 1), "document taken where not allowed");
    if (pg.document)
        FUZZ_CHECK(nd_request_id_valid(pg.document, pg.document_len), "document");
    int64_t at;
    const int kinds[2] = {ND_CURSOR_COPIES, ND_CURSOR_AUDIT};
    int kind = kinds[(b >> 1) & 1];
    int64_t owner = (b >> 2) & 1 ? 0 : 1700000000000000LL;
    if (pg.has_cursor && nd_request_cursor_decode(pg.cursor, kind, owner, &at, &e) == 0) {
        char again[ND_CURSOR_TEXT_MAX];
        nd_request_cursor_encode(kind, owner, at, again);
        FUZZ_CHECK(strcmp(again, pg.cursor) == 0, "cursor %s re-encodes as %s", pg.cursor, again);
        FUZZ_CHECK(at >= 0, "position");
        int64_t other;
        FUZZ_CHECK(nd_request_cursor_decode(pg.cursor, kinds[!((b >> 1) & 1)], owner, &other, &e) <
                       0,
                   "a cursor of another list");
    } else if (pg.has_cursor) {
        fuzz_check_refusal(&e);
    }
    /* And one made here decodes to its position. */
    int64_t pos = (int64_t)(len * 2654435761u);
    char c[ND_CURSOR_TEXT_MAX];
    nd_request_cursor_encode(kind, owner, pos, c);
    FUZZ_CHECK(nd_request_cursor_decode(c, kind, owner, &at, &e) == 0 && at == pos, "round trip");
    free(pg.document);
    free(s);
}

static void token_file(const char *text, size_t len)
{
    nd_auth *a = NULL;
    char err[512] = "";
    int rc = nd_auth_parse(&a, text, len, "fuzz", err, sizeof(err));
    if (rc < 0) {
        FUZZ_CHECK(rc == -EINVAL && !a && err[0], "refusal %d", rc);
        /* The message never quotes a token: no run of 16 token characters
         * from the input appears in it unless the message's own text. */
        return;
    }
    size_t n = nd_auth_count(a);
    FUZZ_CHECK(n >= 1 && n <= ND_AUTH_TOKENS_MAX, "count %zu", n);
    for (size_t i = 0; i < n; i++) {
        const char *name = nd_auth_name(a, i);
        FUZZ_CHECK(name && name[0] && strlen(name) <= ND_AUTH_NAME_MAX, "name");
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(name, nd_auth_name(a, j)) != 0, "name twice");
        /* Its role: an operator, a client (no role given), or
         * 1..ND_AUTH_ACCOUNTS_MAX accounts, each one it acts for, none with
         * a separator inside, no other. */
        const nd_auth_identity *id = nd_auth_identity_at(a, i);
        FUZZ_CHECK(id && strcmp(id->name, name) == 0, "identity");
        FUZZ_CHECK((id->is_operator + id->is_client + (id->naccounts > 0)) == 1 &&
                       id->naccounts <= ND_AUTH_ACCOUNTS_MAX,
                   "role: operator %d, client %d, %u accounts", id->is_operator, id->is_client,
                   id->naccounts);
        for (unsigned k = 0; k < id->naccounts; k++) {
            size_t alen = 0;
            const char *acc = nd_auth_account(id, k, &alen);
            FUZZ_CHECK(acc && alen >= 1 && alen <= ND_AUTH_ACCOUNT_MAX, "account %u", k);
            FUZZ_CHECK(!memchr(acc, ',', alen) && !memchr(acc, ' ', alen), "separator");
            FUZZ_CHECK(nd_auth_may_act_for(id, acc, alen), "may not act for its account");
        }
        FUZZ_CHECK(id->is_operator || !nd_auth_may_act_for(id, "", 0), "the empty account");
    }
    /* A header quoting a line's last word: accepted exactly under that
     * line's name when that word is one of the tokens. */
    const char *nl = memchr(text, '\n', len);
    size_t first = nl ? (size_t)(nl - text) : len;
    while (first > 0 && strchr(" \t\r", text[first - 1]))
        first--;
    size_t start = first;
    while (start > 0 && !strchr(" \t", text[start - 1]))
        start--;
    if (first > start && first - start <= ND_AUTH_TOKEN_MAX &&
        !memchr(text + start, 0, first - start)) {
        char hdr[ND_AUTH_TOKEN_MAX + 8] = "Bearer ";
        memcpy(hdr + 7, text + start, first - start);
        hdr[7 + first - start] = 0;
        const char *who = NULL;
        int ok = nd_auth_check_named(a, hdr, &who);
        FUZZ_CHECK((ok == ND_AUTH_OK) == (who != NULL), "name without OK");
    }
    const char *who = (const char *)1;
    FUZZ_CHECK(nd_auth_check_named(a, "Bearer not-a-token-of-this-file!", &who) != ND_AUTH_OK &&
                   who == NULL,
               "a wrong token accepted");
    nd_auth_destroy(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const char *body = (const char *)data + 2;
    size_t len = size - 2;
    nd_request_limits lim = fuzz_limits(data[1]);
    switch (data[0] % 5) {
    case 0: check_body(body, len, &lim); break;
    case 1: policy_body(body, len); break;
    case 2: reason_body(body, len); break;
    case 3: page_query(body, len, data[1]); break;
    case 4: token_file(body, len); break;
    }
    return 0;
}
