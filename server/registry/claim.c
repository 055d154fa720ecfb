/* claim.c - the claim rule and the policy format: a request's policy
 * fields made into the stored policy (validated, merged, compact JSON), the
 * check's read of a stored policy, and the action rule. See claim.h. */
#include "claim.h"
#include "request.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *nd_reprint_name(int reprint)
{
    return reprint == ND_REPRINT_ALLOW ? "allow" : reprint == ND_REPRINT_FORBID ? "forbid" : NULL;
}

const char *nd_action_name(int action)
{
    return action == ND_ACTION_BLOCK     ? "block"
           : action == ND_ACTION_REPRINT ? "publish_as_reprint"
                                         : "publish";
}

const char *nd_status_name(int status)
{
    return status == ND_CLAIM_REVOKED      ? "revoked"
           : status == ND_CLAIM_SUPERSEDED ? "superseded"
                                           : "active";
}

/* ---- the policy format: a request's fields made into a stored policy ---- */

#define refuse nd_request_refuse
#define invalid_field(err, field, ...) refuse((err), 400, "invalid_field", (field), __VA_ARGS__)
#define ID_RULE ND_REQUEST_ID_RULE

/* Validates one whitelist (raw JSON array) into a new normalized jansson
 * array of {"account","may_modify","may_hide_source"}; NULL with *err. */
static json_t *whitelist_normalize(const char *raw, size_t len, nd_request_error *err)
{
    if (nd_request_compact_bound(raw, len, ND_REQUEST_POLICY_MAX) > ND_REQUEST_POLICY_MAX) {
        invalid_field(err, "whitelist", "whitelist is over %d bytes as compact JSON",
                      ND_REQUEST_POLICY_MAX);
        return NULL;
    }
    json_error_t jerr;
    json_t *in = json_loadb(raw, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!in || !json_is_array(in)) {
        json_decref(in);
        invalid_field(err, "whitelist", "whitelist is not valid: %s",
                      in ? "not an array" : jerr.text);
        return NULL;
    }
    size_t n = json_array_size(in);
    json_t *out = n <= ND_REQUEST_WHITELIST_MAX ? json_array() : NULL;
    if (n > ND_REQUEST_WHITELIST_MAX)
        invalid_field(err, "whitelist", "whitelist holds more than %d entries",
                      ND_REQUEST_WHITELIST_MAX);
    else if (!out)
        refuse(err, 500, "internal", NULL, "out of memory");
    for (size_t i = 0; out && i < n; i++) {
        json_t *e = json_array_get(in, i);
        json_t *acc = json_object_get(e, "account");
        json_t *mm = json_object_get(e, "may_modify");
        json_t *mh = json_object_get(e, "may_hide_source");
        char name[64];
        const char *bad = NULL;
        if (!json_is_object(e))
            bad = "";
        else if (!json_is_string(acc) ||
                 !nd_request_id_valid(json_string_value(acc), json_string_length(acc)))
            bad = ".account";
        else if (mm && !json_is_boolean(mm))
            bad = ".may_modify";
        else if (mh && !json_is_boolean(mh))
            bad = ".may_hide_source";
        for (size_t j = 0; !bad && j < i; j++) {
            json_t *other = json_object_get(json_array_get(out, j), "account");
            if (json_string_length(other) == json_string_length(acc) &&
                memcmp(json_string_value(other), json_string_value(acc), json_string_length(acc)) ==
                    0)
                bad = ".account";
        }
        if (bad) {
            snprintf(name, sizeof(name), "whitelist[%zu]%s", i, bad);
            if (!*bad)
                invalid_field(err, name, "%s must be an object with an account", name);
            else if (bad[1] == 'a')
                invalid_field(err, name,
                              "%s must be a string of " ID_RULE ", listed once in the whitelist",
                              name, ND_ID_MAX_CHARS);
            else
                invalid_field(err, name, "%s must be true or false", name);
            json_decref(out);
            out = NULL;
            break;
        }
        json_t *o = json_object();
        if (!o || json_object_set(o, "account", acc) ||
            json_object_set_new(o, "may_modify", json_boolean(json_is_true(mm))) ||
            json_object_set_new(o, "may_hide_source", json_boolean(json_is_true(mh))) ||
            json_array_append_new(out, o)) {
            refuse(err, 500, "internal", NULL, "out of memory");
            json_decref(out);
            out = NULL;
        }
    }
    json_decref(in);
    return out;
}

int nd_policy_merge(const char *old, size_t old_len, const nd_policy_fields *f, char **out,
                    size_t *out_len, nd_request_error *err)
{
    *out = NULL;
    *out_len = 0;
    json_t *prev = old ? json_loadb(old, old_len, JSON_ALLOW_NUL, NULL) : NULL;
    const char *reprint = f->reprint == ND_REQUEST_REPRINT_ALLOW    ? "allow"
                          : f->reprint == ND_REQUEST_REPRINT_FORBID ? "forbid"
                                                                    : NULL;
    json_t *wl = NULL;
    if (!reprint && json_is_string(json_object_get(prev, "reprint")))
        reprint = json_string_value(json_object_get(prev, "reprint"));
    if (f->whitelist_raw) {
        if (!(wl = whitelist_normalize(f->whitelist_raw, f->whitelist_raw_len, err))) {
            json_decref(prev);
            return -1;
        }
    } else if (json_is_array(json_object_get(prev, "whitelist"))) {
        wl = json_incref(json_object_get(prev, "whitelist"));
    }
    int rc = 0;
    json_t *o = (reprint || wl) ? json_object() : NULL;
    if ((reprint || wl) &&
        (!o || (reprint && json_object_set_new(o, "reprint", json_string(reprint))) ||
         (wl && json_object_set(o, "whitelist", wl))))
        rc = refuse(err, 500, "internal", NULL, "out of memory");
    if (rc == 0 && o) {
        char *text = json_dumps(o, JSON_COMPACT);
        size_t n = text ? strlen(text) : 0;
        if (!text)
            rc = refuse(err, 500, "internal", NULL, "out of memory");
        else if (n > ND_REQUEST_POLICY_MAX)
            rc = invalid_field(err, "whitelist",
                               "the policy (reprint and whitelist) is %zu bytes as compact "
                               "JSON; the limit is %d",
                               n, ND_REQUEST_POLICY_MAX);
        if (rc == 0) {
            *out = text;
            *out_len = n;
        } else {
            free(text);
        }
    }
    json_decref(o);
    json_decref(wl);
    json_decref(prev);
    return rc;
}

int nd_policy_of_check(nd_check_req *out, nd_request_error *err)
{
    out->policy = NULL;
    out->policy_len = 0;
    if (!out->policy_in.reprint && !out->policy_in.whitelist_raw)
        return 0;
    return nd_policy_merge(NULL, 0, &out->policy_in, &out->policy, &out->policy_len, err);
}

int nd_policy_describe(const char *policy, size_t len, int default_reprint, nd_policy_desc *out)
{
    json_t *p = policy ? json_loadb(policy, len, JSON_ALLOW_NUL, NULL) : NULL;
    json_t *rp = json_object_get(p, "reprint");
    json_t *wl = json_object_get(p, "whitelist");
    const char *rule = json_is_string(rp) ? json_string_value(rp) : NULL;
    out->explicit_rule = rule && (strcmp(rule, "allow") == 0 || strcmp(rule, "forbid") == 0);
    out->reprint = out->explicit_rule
                       ? nd_reprint_name(rule[0] == 'f' ? ND_REPRINT_FORBID : ND_REPRINT_ALLOW)
                   : default_reprint == ND_REPRINT_FORBID ? "forbid"
                                                          : "allow";
    out->whitelist = json_is_array(wl) ? json_dumps(wl, JSON_COMPACT) : NULL;
    int rc = json_is_array(wl) && !out->whitelist ? -ENOMEM : 0;
    json_decref(p);
    return rc;
}

/* ---- the check's scan of a stored policy (no allocation) ---- */

typedef struct scan {
    const char *p, *end;
} scan;

static void ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static bool eat(scan *s, char c)
{
    ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return true;
    }
    return false;
}

static bool word(scan *s, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n) != 0)
        return false;
    s->p += n;
    return true;
}

/* A string token: its raw content (between the quotes) in *raw, *raw_len. */
static bool string_tok(scan *s, const char **raw, size_t *raw_len)
{
    if (!eat(s, '"'))
        return false;
    const char *b = s->p;
    while (s->p < s->end && *s->p != '"') {
        if ((unsigned char)*s->p < 0x20)
            return false;
        if (*s->p == '\\')
            s->p++;
        s->p++;
    }
    if (s->p >= s->end)
        return false;
    *raw = b;
    *raw_len = (size_t)(s->p - b);
    s->p++;
    return true;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v << 4 | d;
    }
    return v;
}

/* Decodes the next character of raw string content at raw[*i..n) into
 * out (UTF-8 bytes). Returns their count, or -1 when malformed. */
static int next_char(const char *raw, size_t n, size_t *i, char out[4])
{
    char c = raw[(*i)++];
    if (c != '\\') {
        out[0] = c;
        return 1;
    }
    if (*i >= n)
        return -1;
    c = raw[(*i)++];
    switch (c) {
    case '"':
    case '\\':
    case '/': out[0] = c; return 1;
    case 'b': out[0] = '\b'; return 1;
    case 'f': out[0] = '\f'; return 1;
    case 'n': out[0] = '\n'; return 1;
    case 'r': out[0] = '\r'; return 1;
    case 't': out[0] = '\t'; return 1;
    case 'u': break;
    default: return -1;
    }
    if (n - *i < 4)
        return -1;
    int u = hex4(raw + *i);
    *i += 4;
    if (u < 0)
        return -1;
    uint32_t cp = (uint32_t)u;
    if (cp >= 0xD800 && cp < 0xDC00) {
        if (n - *i < 6 || raw[*i] != '\\' || raw[*i + 1] != 'u')
            return -1;
        int lo = hex4(raw + *i + 2);
        if (lo < 0xDC00 || lo >= 0xE000)
            return -1;
        *i += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp < 0xE000) {
        return -1;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Whether raw string content raw[0..n) decodes to want[0..wn). -1:
 * malformed. */
static int string_eq(const char *raw, size_t n, const char *want, size_t wn)
{
    if (!memchr(raw, '\\', n))
        return n == wn && memcmp(raw, want, n) == 0;
    size_t i = 0, w = 0;
    int eq = 1;
    while (i < n) {
        char buf[4];
        int k = next_char(raw, n, &i, buf);
        if (k < 0)
            return -1;
        if (eq && (wn - w < (size_t)k || memcmp(want + w, buf, (size_t)k) != 0))
            eq = 0;
        w += (size_t)k;
    }
    return eq && w == wn;
}

static bool skip_value(scan *s, int depth)
{
    ws(s);
    if (s->p >= s->end || depth > 64)
        return false;
    const char *raw;
    size_t n;
    switch (*s->p) {
    case '"': return string_tok(s, &raw, &n);
    case 't': return word(s, "true");
    case 'f': return word(s, "false");
    case 'n': return word(s, "null");
    case '{':
    case '[': {
        char close = *s->p == '{' ? '}' : ']';
        bool obj = close == '}';
        s->p++;
        if (eat(s, close))
            return true;
        do {
            if (obj && (!string_tok(s, &raw, &n) || !eat(s, ':')))
                return false;
            if (!skip_value(s, depth + 1))
                return false;
        } while (eat(s, ','));
        return eat(s, close);
    }
    default: {
        const char *b = s->p;
        while (s->p < s->end && strchr("+-0123456789.eE", *s->p))
            s->p++;
        return s->p > b;
    }
    }
}

static bool bool_tok(scan *s, bool *out)
{
    ws(s);
    if (word(s, "true"))
        return *out = true, true;
    if (word(s, "false"))
        return *out = false, true;
    return false;
}

static int key_is(const char *raw, size_t n, const char *name)
{
    return string_eq(raw, n, name, strlen(name)) == 1;
}

/* One whitelist entry: listed in *out when it is account's. */
static bool scan_entry(scan *s, const char *account, size_t account_len, nd_policy_view *out)
{
    const char *raw, *acc = NULL;
    size_t n, acc_len = 0;
    bool mm = false, mh = false;
    if (!eat(s, '{'))
        return false;
    if (!eat(s, '}')) {
        do {
            if (!string_tok(s, &raw, &n) || !eat(s, ':'))
                return false;
            bool ok;
            if (key_is(raw, n, "account"))
                ok = string_tok(s, &acc, &acc_len);
            else if (key_is(raw, n, "may_modify"))
                ok = bool_tok(s, &mm);
            else if (key_is(raw, n, "may_hide_source"))
                ok = bool_tok(s, &mh);
            else
                ok = skip_value(s, 1);
            if (!ok)
                return false;
        } while (eat(s, ','));
        if (!eat(s, '}'))
            return false;
    }
    if (!acc)
        return false;
    int eq = account && account_len ? string_eq(acc, acc_len, account, account_len) : 0;
    if (eq < 0)
        return false;
    if (eq && !out->listed) {
        out->listed = true;
        out->may_modify = mm;
        out->may_hide_source = mh;
    }
    return true;
}

static bool scan_policy(scan *s, const char *account, size_t account_len, nd_policy_view *out)
{
    const char *raw;
    size_t n;
    if (!eat(s, '{'))
        return false;
    if (eat(s, '}'))
        return true;
    do {
        if (!string_tok(s, &raw, &n) || !eat(s, ':'))
            return false;
        if (key_is(raw, n, "reprint")) {
            if (!string_tok(s, &raw, &n))
                return false;
            if (n == 5 && memcmp(raw, "allow", 5) == 0)
                out->reprint = ND_REPRINT_ALLOW;
            else if (n == 6 && memcmp(raw, "forbid", 6) == 0)
                out->reprint = ND_REPRINT_FORBID;
            else
                return false;
        } else if (key_is(raw, n, "whitelist")) {
            if (!eat(s, '['))
                return false;
            if (!eat(s, ']')) {
                do {
                    if (!scan_entry(s, account, account_len, out))
                        return false;
                } while (eat(s, ','));
                if (!eat(s, ']'))
                    return false;
            }
        } else if (!skip_value(s, 1)) {
            return false;
        }
    } while (eat(s, ','));
    return eat(s, '}');
}

int nd_policy_lookup(const char *policy, size_t len, const char *account, size_t account_len,
                     nd_policy_view *out)
{
    memset(out, 0, sizeof(*out));
    if (!policy || len == 0)
        return 0;
    scan s = {policy, policy + len};
    if (scan_policy(&s, account, account_len, out)) {
        ws(&s);
        if (s.p == s.end)
            return 0;
    }
    memset(out, 0, sizeof(*out));
    return -EINVAL;
}

/* ---- the decision ---- */

void nd_claim_action(const nd_claim *src, const char *account, size_t account_len,
                     int default_reprint, nd_claim_decision *out)
{
    nd_policy_view v;
    nd_policy_lookup(src->policy, src->policy_len, account, account_len, &v);
    out->show_source = out->may_modify = false;
    if (v.listed) {
        out->action = ND_ACTION_REPRINT;
        out->show_source = !v.may_hide_source;
        out->may_modify = v.may_modify;
        return;
    }
    int r = v.reprint != ND_REPRINT_UNSET ? v.reprint : default_reprint;
    if (r == ND_REPRINT_FORBID) {
        out->action = ND_ACTION_BLOCK;
    } else {
        out->action = ND_ACTION_REPRINT;
        out->show_source = true;
    }
}
