/* claim.c - reprint policies (parse, serialize, the check's scan) and the
 * action rule. See claim.h. */
#include "claim.h"
#include "request.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
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
    return status == ND_STATUS_REVOKED      ? "revoked"
           : status == ND_STATUS_SUPERSEDED ? "superseded"
                                            : "active";
}

/* ---- the parsed policy ---- */

void nd_policy_finish(nd_policy *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->entries[i].account);
    free(p->entries);
    memset(p, 0, sizeof(*p));
}

int nd_policy_add(nd_policy *p, const char *account, size_t account_len, bool may_modify,
                  bool may_hide_source)
{
    if (!account || account_len == 0 || account_len > ND_POLICY_ACCOUNT_MAX)
        return -EINVAL;
    for (size_t i = 0; i < p->n; i++)
        if (p->entries[i].account_len == account_len &&
            memcmp(p->entries[i].account, account, account_len) == 0)
            return -EEXIST;
    if (p->n == ND_POLICY_WHITELIST_MAX)
        return -E2BIG;
    /* Grown by doubling: at most 9 reallocations for a full list. */
    if ((p->n & (p->n - 1)) == 0) {
        size_t cap = p->n ? p->n * 2 : 4;
        nd_policy_entry *e = realloc(p->entries, cap * sizeof(*e));
        if (!e)
            return -ENOMEM;
        p->entries = e;
    }
    char *a = malloc(account_len + 1);
    if (!a)
        return -ENOMEM;
    memcpy(a, account, account_len);
    a[account_len] = '\0';
    p->entries[p->n++] = (nd_policy_entry){.account = a,
                                           .account_len = account_len,
                                           .may_modify = may_modify,
                                           .may_hide_source = may_hide_source};
    p->has_whitelist = true;
    return 0;
}

__attribute__((format(printf, 4, 5))) static int fail(int rc, char *err, size_t errcap,
                                                      const char *fmt, ...)
{
    if (err && errcap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errcap, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static int parse_entry(nd_policy *out, json_t *e, size_t i, char *err, size_t errcap)
{
    if (!json_is_object(e))
        return fail(-EINVAL, err, errcap, "whitelist[%zu] must be an object", i);
    json_t *a = json_object_get(e, "account");
    if (!json_is_string(a))
        return fail(-EINVAL, err, errcap, "whitelist[%zu].account must be a string", i);
    const char *s = json_string_value(a);
    size_t len = json_string_length(a);
    if (len > ND_POLICY_ACCOUNT_MAX || memchr(s, '\0', len) || !nd_request_id_valid(s, len))
        return fail(-EINVAL, err, errcap,
                    "whitelist[%zu].account must be 1 to %d characters without control "
                    "characters",
                    i, ND_ID_MAX_CHARS);
    bool flag[2] = {false, false};
    static const char *const names[2] = {"may_modify", "may_hide_source"};
    for (int k = 0; k < 2; k++) {
        json_t *b = json_object_get(e, names[k]);
        if (b && !json_is_boolean(b))
            return fail(-EINVAL, err, errcap, "whitelist[%zu].%s must be true or false", i,
                        names[k]);
        flag[k] = b && json_is_true(b);
    }
    int rc = nd_policy_add(out, s, len, flag[0], flag[1]);
    if (rc == -EEXIST)
        return fail(rc, err, errcap, "whitelist[%zu].account is listed twice", i);
    return rc;
}

int nd_policy_parse(const char *json, size_t len, nd_policy *out, char *err, size_t errcap)
{
    memset(out, 0, sizeof(*out));
    if (err && errcap)
        err[0] = '\0';
    if (!json || len == 0)
        return 0;
    if (len > ND_POLICY_TEXT_MAX)
        return fail(-E2BIG, err, errcap, "policy over %u bytes", ND_POLICY_TEXT_MAX);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return fail(-EINVAL, err, errcap, "policy: %s", je.text);
    int rc = 0;
    json_t *r = json_object_get(root, "reprint"), *w = json_object_get(root, "whitelist");
    if (!json_is_object(root)) {
        rc = fail(-EINVAL, err, errcap, "policy must be an object");
    } else if (r) {
        const char *v = json_is_string(r) ? json_string_value(r) : "";
        if (strcmp(v, "allow") == 0 && json_string_length(r) == 5)
            out->reprint = ND_REPRINT_ALLOW;
        else if (strcmp(v, "forbid") == 0 && json_string_length(r) == 6)
            out->reprint = ND_REPRINT_FORBID;
        else
            rc = fail(-EINVAL, err, errcap, "reprint must be \"allow\" or \"forbid\"");
    }
    if (rc == 0 && w) {
        if (!json_is_array(w))
            rc = fail(-EINVAL, err, errcap, "whitelist must be an array");
        else if (json_array_size(w) > ND_POLICY_WHITELIST_MAX)
            rc = fail(-E2BIG, err, errcap, "whitelist has more than %d entries",
                      ND_POLICY_WHITELIST_MAX);
        out->has_whitelist = true;
        for (size_t i = 0; rc == 0 && i < json_array_size(w); i++)
            rc = parse_entry(out, json_array_get(w, i), i, err, errcap);
    }
    json_decref(root);
    if (rc < 0)
        nd_policy_finish(out);
    return rc;
}

int nd_policy_serialize(const nd_policy *p, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (p->reprint == ND_REPRINT_UNSET && !p->has_whitelist)
        return 0;
    json_t *root = json_object();
    int bad = !root;
    if (!bad && p->reprint != ND_REPRINT_UNSET)
        bad |= json_object_set_new(root, "reprint", json_string(nd_reprint_name(p->reprint)));
    if (!bad && p->has_whitelist) {
        json_t *w = json_array();
        bad |= json_object_set_new(root, "whitelist", w);
        for (size_t i = 0; !bad && i < p->n; i++) {
            const nd_policy_entry *e = &p->entries[i];
            json_t *o = json_object();
            bad |= json_array_append_new(w, o);
            if (!bad)
                bad |= json_object_set_new(o, "account", json_stringn(e->account, e->account_len)) |
                       json_object_set_new(o, "may_modify", json_boolean(e->may_modify)) |
                       json_object_set_new(o, "may_hide_source", json_boolean(e->may_hide_source));
        }
    }
    char *s = bad ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!s)
        return -ENOMEM;
    size_t n = strlen(s);
    if (n > ND_POLICY_TEXT_MAX) {
        free(s);
        return -E2BIG;
    }
    *out = s;
    *out_len = n;
    return 0;
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

bool nd_claim_same_account(const nd_claim *c, const char *account, size_t account_len)
{
    return account && account_len && c->account && c->account_len == account_len &&
           memcmp(c->account, account, account_len) == 0;
}

bool nd_claim_is_evidence(const nd_claim *c, const char *account, size_t account_len)
{
    return c->status != ND_STATUS_REVOKED && !nd_claim_same_account(c, account, account_len);
}

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

void nd_claim_decide(const nd_claim *claims, size_t n, const char *account, size_t account_len,
                     int default_reprint, nd_claim_decision *out)
{
    *out = (nd_claim_decision){.action = ND_ACTION_PUBLISH, .source = SIZE_MAX};
    for (size_t i = 0; i < n; i++)
        if (nd_claim_is_evidence(&claims[i], account, account_len) &&
            (out->source == SIZE_MAX ||
             claims[i].registered_at_us < claims[out->source].registered_at_us))
            out->source = i;
    if (out->source != SIZE_MAX)
        nd_claim_action(&claims[out->source], account, account_len, default_reprint, out);
}
