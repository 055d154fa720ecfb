/* request.c - request bodies and paths: parse, validate, or say why not. */
#include "request.h"
#include "json.h"
#include "utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/http.h>
#include <jansson.h>
#include <xxhash.h>

/* Messages are ASCII but for what the formats add, which is validated
 * UTF-8 (field names, jansson's error text), so a cut at the buffer's end is
 * moved back to a character boundary. */
int nd_request_refuse(nd_request_error *err, int status, const char *code, const char *field,
                      const char *fmt, ...)
{
    memset(err, 0, sizeof(*err));
    err->status = status;
    err->code = code;
    if (field)
        snprintf(err->field, sizeof(err->field), "%s", field);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof(err->message)) {
        size_t len = sizeof(err->message) - 1, lead = len;
        while (lead > 0 && ((unsigned char)err->message[lead - 1] & 0xC0) == 0x80)
            lead--;
        if (lead > 0) {
            unsigned char c = (unsigned char)err->message[lead - 1];
            size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
            if (lead - 1 + need > len) /* the last sequence was cut */
                err->message[lead - 1] = 0;
        }
    }
    return -1;
}

#define refuse nd_request_refuse
#define invalid_field(err, field, ...) refuse((err), 400, "invalid_field", (field), __VA_ARGS__)

bool nd_request_id_valid(const char *id, size_t len)
{
    if (len == 0 || len > ND_ID_MAX_UTF8)
        return false;
    size_t chars = 0;
    for (size_t pos = 0; pos < len; chars++) {
        uint32_t cp;
        if (nd_utf8_decode((const uint8_t *)id, len, &pos, &cp) < 0)
            return false;
        if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0))
            return false;
    }
    return chars <= ND_ID_MAX_CHARS;
}

void nd_request_text_hash(const char *text, size_t len, uint8_t out[16])
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(text, len));
    memcpy(out, c.digest, 16);
}

void nd_request_parser_finish(nd_request_parser *p)
{
    nd_json_scratch_finish(&p->js);
}

/* The media type's length at ct (after leading blanks, *ct moved there),
 * or 0 when a charset parameter names anything but UTF-8. */
static size_t media_type(const char **ct)
{
    const char *t = *ct;
    while (*t == ' ' || *t == '\t')
        t++;
    *ct = t;
    size_t n = strcspn(t, "; \t");
    const char *cs = strcasestr(t + n, "charset=");
    if (cs) {
        cs += 8;
        if (*cs == '"')
            cs++;
        if (strncasecmp(cs, "utf-8", 5) != 0 && strncasecmp(cs, "utf8", 4) != 0)
            return 0;
    }
    return n;
}

static bool media_is(const char *ct, size_t n, const char *name)
{
    return n == strlen(name) && strncasecmp(ct, name, n) == 0;
}

int nd_request_content_kind(const char *ct, bool plain_ok, nd_request_error *err)
{
    int kind = 0;
    if (ct) {
        size_t n = media_type(&ct);
        if (media_is(ct, n, "application/json"))
            kind = ND_BODY_JSON;
        else if (plain_ok && media_is(ct, n, "text/plain"))
            kind = ND_BODY_TEXT;
    }
    if (!kind)
        refuse(err, 415, "unsupported_media_type", NULL,
               "Content-Type must be application/json%s (UTF-8)", plain_ok ? " or text/plain" : "");
    return kind;
}

int nd_request_lines_kind(const char *ct, nd_request_error *err)
{
    if (ct) {
        size_t n = media_type(&ct);
        if (media_is(ct, n, "application/x-ndjson") || media_is(ct, n, "application/jsonl") ||
            media_is(ct, n, "application/json"))
            return ND_BODY_LINES;
    }
    refuse(err, 415, "unsupported_media_type", NULL,
           "Content-Type must be application/x-ndjson (JSON lines, UTF-8)");
    return 0;
}

int nd_request_text_size(size_t len, const nd_request_limits *lim, const char *field,
                         nd_request_error *err)
{
    if (len <= lim->max_text)
        return 0;
    return invalid_field(err, field, "%s is %zu bytes; the limit is %zu", field, len,
                         lim->max_text);
}

/* Reads the body as a JSON object into p->members; sets *n. */
static int read_members(nd_request_parser *p, const char *body, size_t len, size_t *n,
                        nd_request_error *err)
{
    nd_json_error jerr = {0};
    int rc = nd_json_read_object(body, len, &p->js, p->members, ND_REQUEST_MAX_MEMBERS, n, &jerr);
    if (rc == 0)
        return 0;
    if (rc == -EINVAL) {
        refuse(err, 400, "invalid_json", NULL, "invalid JSON at line %u, column %u: %s", jerr.line,
               jerr.column, jerr.text);
        err->line = jerr.line;
        err->column = jerr.column;
        return -1;
    }
    if (rc == -E2BIG)
        return refuse(err, 400, "invalid_json", NULL, "more than %d fields in the object",
                      ND_REQUEST_MAX_MEMBERS);
    return refuse(err, 500, "internal", NULL, "out of memory");
}

/* The member key if present (null included: a null is a value of the wrong
 * type for every field, never "absent"), else NULL. */
static const nd_json_value *field(const nd_request_parser *p, size_t n, const char *key)
{
    const nd_json_member *f = nd_json_find(p->members, n, key);
    return f ? &f->value : NULL;
}

/* Checks every item of a batch: at most max_batch strings within max_text. */
static int check_batch(nd_request_parser *p, const nd_json_value *texts,
                       const nd_request_limits *lim, size_t *count, nd_request_error *err)
{
    nd_json_iter it;
    nd_json_value t;
    size_t n = 0;
    nd_json_iter_init(&it, texts, &p->js);
    while (nd_json_iter_next(&it, &t)) {
        char name[32];
        snprintf(name, sizeof(name), "texts[%zu]", n);
        if (n == lim->max_batch)
            return invalid_field(err, "texts", "texts holds more than %u items", lim->max_batch);
        if (t.type != ND_JSON_STRING)
            return invalid_field(err, name, "%s must be a string", name);
        if (nd_request_text_size(t.str_len, lim, name, err) < 0)
            return -1;
        n++;
    }
    *count = n;
    return 0;
}

int nd_request_parse_fingerprint(nd_request_parser *p, const char *body, size_t len,
                                 const nd_request_limits *lim, nd_fingerprint_request *out,
                                 nd_request_error *err)
{
    memset(out, 0, sizeof(*out));
    size_t n;
    if (read_members(p, body, len, &n, err) < 0)
        return -1;
    const nd_json_value *text = field(p, n, "text");
    const nd_json_value *texts = field(p, n, "texts");
    if (text && texts)
        return invalid_field(err, "texts", "give either text or texts, not both");
    if (texts) {
        if (texts->type != ND_JSON_ARRAY)
            return invalid_field(err, "texts", "texts must be an array of strings");
        out->texts = texts;
        return check_batch(p, texts, lim, &out->ntexts, err);
    }
    if (!text || text->type != ND_JSON_STRING)
        return invalid_field(err, "text", "text must be a string (or texts an array of strings)");
    if (nd_request_text_size(text->str_len, lim, "text", err) < 0)
        return -1;
    out->text = text->str;
    out->text_len = text->str_len;
    return 0;
}

/* A text member of a /compare body: a string within the limit. */
static int compare_text(const nd_json_value *v, const char *name, const nd_request_limits *lim,
                        const char **text, size_t *len, nd_request_error *err)
{
    if (v->type != ND_JSON_STRING)
        return invalid_field(err, name, "%s must be a string", name);
    if (nd_request_text_size(v->str_len, lim, name, err) < 0)
        return -1;
    *text = v->str;
    *len = v->str_len;
    return 0;
}

int nd_request_parse_compare(nd_request_parser *p, const char *body, size_t len,
                             const nd_request_limits *lim, nd_compare_request *out,
                             nd_request_error *err)
{
    memset(out, 0, sizeof(*out));
    size_t n;
    if (read_members(p, body, len, &n, err) < 0)
        return -1;
    const nd_json_value *a = field(p, n, "text_a"), *b = field(p, n, "text_b");
    const nd_json_value *id = field(p, n, "id_b");
    if (!a)
        return invalid_field(err, "text_a", "text_a (the submitted text) is missing");
    if (compare_text(a, "text_a", lim, &out->text_a, &out->text_a_len, err) < 0)
        return -1;
    if (b && id)
        return invalid_field(err, "id_b", "give either text_b or id_b, not both");
    if (!b && !id)
        return invalid_field(err, "text_b",
                             "text_b (a text) or id_b (a registered document's id) is missing");
    if (b)
        return compare_text(b, "text_b", lim, &out->text_b, &out->text_b_len, err);
    if (id->type != ND_JSON_STRING || !nd_request_id_valid(id->str, id->str_len))
        return invalid_field(err, "id_b", "id_b must be a string of " ND_REQUEST_ID_RULE,
                             ND_ID_MAX_CHARS);
    out->id_b = id->str;
    out->id_b_len = id->str_len;
    return 0;
}

static bool number_char(char c)
{
    return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
}

size_t nd_request_compact_bound(const char *raw, size_t len, size_t stop)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n <= stop; i++) {
        char c = raw[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
            continue;
        n++;
        if (c == '"') { /* a string: each byte 1, each escape 1 (it writes >= 1) */
            for (i++; i < len && raw[i] != '"'; i++) {
                if (raw[i] == '\\' && i + 1 < len)
                    i += raw[i + 1] == 'u' ? 5 : 1;
                n++;
            }
            n++;                                         /* the closing quote */
        } else if (c == '-' || (c >= '0' && c <= '9')) { /* a number: >= 1 byte */
            while (i + 1 < len && number_char(raw[i + 1]))
                i++;
        }
    }
    return n;
}

int nd_request_check_meta(nd_check_req *out, const nd_request_limits *lim, nd_request_error *err)
{
    out->meta = NULL;
    out->meta_len = 0;
    if (!out->meta_raw)
        return 0;
    /* Bounded before parsing: jansson builds a node per value, some 100
     * bytes each, so an unbounded meta of empty objects would turn a 4 MiB
     * body into hundreds of MB and a second of CPU. */
    size_t bound = nd_request_compact_bound(out->meta_raw, out->meta_raw_len, lim->max_meta);
    if (bound > lim->max_meta)
        return invalid_field(err, "meta",
                             "meta is over %zu bytes as compact JSON; the limit is %zu",
                             lim->max_meta, lim->max_meta);
    json_error_t jerr;
    json_t *obj = json_loadb(out->meta_raw, out->meta_raw_len,
                             JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!obj)
        return invalid_field(err, "meta", "meta is not valid: %s", jerr.text);
    char *text = nd_json_dumps(obj, JSON_COMPACT); /* reals as the answers write them */
    json_decref(obj);
    if (!text)
        return refuse(err, 500, "internal", NULL, "out of memory");
    size_t n = strlen(text);
    if (n > lim->max_meta) {
        free(text);
        return invalid_field(err, "meta", "meta is %zu bytes as compact JSON; the limit is %zu", n,
                             lim->max_meta);
    }
    out->meta = text;
    out->meta_len = n;
    return 0;
}

/* Whether the JSON number raw[0..len) has an integer value from lo to hi
 * (JSON Schema's "integer": 3, 3.0, 30e-1 and 0.3e1 all are), exactly, in
 * decimal; sets *out. A number with more than 40 significant digits
 * (trailing zeros not counted) is taken as out of range. */
static bool integer_in(const char *raw, size_t len, long lo, long hi, long *out)
{
    size_t i = 0;
    bool neg = len > 0 && raw[0] == '-';
    char dig[40];
    size_t nd = 0, zeros = 0; /* zeros: after the last non-zero digit */
    long frac = 0, e = 0;
    i += neg;
    for (bool in_frac = false; i < len && (raw[i] == '.' || (raw[i] >= '0' && raw[i] <= '9'));
         i++) {
        if (raw[i] == '.') {
            in_frac = true;
            continue;
        }
        frac += in_frac;
        if (raw[i] == '0') {
            zeros += nd > 0; /* leading zeros do not count */
            continue;
        }
        if (nd + zeros + 1 > sizeof(dig))
            return false;
        for (; zeros > 0; zeros--)
            dig[nd++] = '0';
        dig[nd++] = raw[i];
    }
    if (i < len && (raw[i] == 'e' || raw[i] == 'E')) {
        bool eneg = ++i < len && raw[i] == '-';
        i += i < len && (raw[i] == '-' || raw[i] == '+');
        for (; i < len; i++)
            if (e < 1000000)
                e = e * 10 + (raw[i] - '0');
        e = eneg ? -e : e;
    }
    long shift = e + (long)zeros - frac, v = 0; /* trailing zeros into the exponent */
    if (nd > 0 && (shift < 0 || (long)nd + shift > 6))
        return false; /* a fraction, or |v| >= 10^6 */
    for (size_t k = 0; k < nd; k++)
        v = v * 10 + (dig[k] - '0');
    for (long k = 0; nd > 0 && k < shift; k++)
        v *= 10;
    v = neg ? -v : v;
    if (v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* "reprint" and "whitelist" of a check or a policy body, checked for type
 * (the whitelist's items by nd_policy_merge(), claim.c). */
static int policy_fields(nd_request_parser *p, size_t n, nd_policy_fields *out,
                         nd_request_error *err)
{
    const nd_json_value *reprint = field(p, n, "reprint");
    const nd_json_value *wl = field(p, n, "whitelist");
    memset(out, 0, sizeof(*out));
    if (reprint) {
        if (reprint->type == ND_JSON_STRING && reprint->str_len == 5 &&
            memcmp(reprint->str, "allow", 5) == 0)
            out->reprint = ND_REQUEST_REPRINT_ALLOW;
        else if (reprint->type == ND_JSON_STRING && reprint->str_len == 6 &&
                 memcmp(reprint->str, "forbid", 6) == 0)
            out->reprint = ND_REQUEST_REPRINT_FORBID;
        else
            return invalid_field(err, "reprint", "reprint must be \"allow\" or \"forbid\"");
    }
    if (wl) {
        if (wl->type != ND_JSON_ARRAY)
            return invalid_field(err, "whitelist",
                                 "whitelist must be an array of {\"account\", \"may_modify\", "
                                 "\"may_hide_source\"}");
        out->whitelist_raw = wl->raw;
        out->whitelist_raw_len = wl->raw_len;
    }
    return 0;
}

#define ID_RULE ND_REQUEST_ID_RULE

int nd_request_consistency(const char *s, size_t len, bool *latest, nd_request_error *err)
{
    if (s && len == 5 && memcmp(s, "local", 5) == 0)
        *latest = false;
    else if (s && len == 6 && memcmp(s, "latest", 6) == 0)
        *latest = true;
    else
        return invalid_field(err, "consistency", "consistency must be \"local\" or \"latest\"");
    return 0;
}

/* The optional fields of a check: id, register, k, meta, account, reprint,
 * whitelist. */
static int check_fields(nd_request_parser *p, size_t n, const nd_request_limits *lim,
                        nd_check_req *out, nd_request_error *err)
{
    const nd_json_value *id = field(p, n, "id");
    const nd_json_value *reg = field(p, n, "register");
    const nd_json_value *k = field(p, n, "k");
    const nd_json_value *meta = field(p, n, "meta");
    if (id) {
        if (id->type != ND_JSON_STRING || !nd_request_id_valid(id->str, id->str_len))
            return invalid_field(err, "id",
                                 "id must be a string of 1 to %d characters without "
                                 "control characters",
                                 ND_ID_MAX_CHARS);
        out->id = id->str;
        out->id_len = id->str_len;
    }
    if (reg && reg->type != ND_JSON_TRUE && reg->type != ND_JSON_FALSE)
        return invalid_field(err, "register", "register must be true or false");
    out->do_register = reg && reg->type == ND_JSON_TRUE;
    if (out->do_register && !out->id)
        return invalid_field(err, "id", "registering needs an id");
    const nd_json_value *consistency = field(p, n, "consistency");
    if (consistency) {
        bool is_str = consistency->type == ND_JSON_STRING;
        if (nd_request_consistency(is_str ? consistency->str : NULL,
                                   is_str ? consistency->str_len : 0, &out->latest, err) < 0)
            return -1;
    }
    out->k = lim->default_k;
    if (k) {
        long v;
        if (k->type != ND_JSON_NUMBER || !integer_in(k->raw, k->raw_len, 0, ND_K_MAX, &v))
            return invalid_field(err, "k", "k must be an integer from 0 to %d", ND_K_MAX);
        out->k = (unsigned)v;
    }
    if (meta) {
        if (meta->type != ND_JSON_OBJECT)
            return invalid_field(err, "meta", "meta must be an object");
        out->meta_raw = meta->raw;
        out->meta_raw_len = meta->raw_len;
    }
    const nd_json_value *account = field(p, n, "account");
    if (account) {
        if (account->type != ND_JSON_STRING || !nd_request_id_valid(account->str, account->str_len))
            return invalid_field(err, "account", "account must be a string of " ID_RULE,
                                 ND_ID_MAX_CHARS);
        out->account = account->str;
        out->account_len = account->str_len;
    }
    return policy_fields(p, n, &out->policy_in, err);
}

int nd_request_parse_check(nd_request_parser *p, const char *body, size_t len,
                           const nd_request_limits *lim, nd_check_req *out, nd_request_error *err)
{
    memset(out, 0, sizeof(*out));
    size_t n;
    if (read_members(p, body, len, &n, err) < 0)
        return -1;
    const nd_json_value *text = field(p, n, "text");
    if (!text || text->type != ND_JSON_STRING)
        return invalid_field(err, "text", "text must be a string");
    if (check_fields(p, n, lim, out, err) < 0 ||
        nd_request_text_size(text->str_len, lim, "text", err) < 0)
        return -1;
    out->text = text->str;
    out->text_len = text->str_len;
    return 0;
}

int nd_request_parse_document_id(const char *encoded, char **id, size_t *len, nd_request_error *err)
{
    *id = NULL;
    *len = 0;
    if (!*encoded)
        return refuse(err, 404, "not_found", NULL, "no document id in the path");
    size_t n = 0;
    char *dec = evhttp_uridecode(encoded, 0, &n);
    if (!dec)
        return refuse(err, 500, "internal", NULL, "out of memory");
    if (!nd_request_id_valid(dec, n)) {
        free(dec);
        return invalid_field(err, "id",
                             "the id must be 1 to %d characters of UTF-8 without control "
                             "characters (percent-encoded in the path)",
                             ND_ID_MAX_CHARS);
    }
    *id = dec;
    *len = n;
    return 0;
}

/* ---- policy bodies, reasons, pages and cursors ---- */

int nd_request_parse_policy(nd_request_parser *p, const char *body, size_t len,
                            nd_policy_fields *out, nd_request_error *err)
{
    memset(out, 0, sizeof(*out));
    size_t n;
    if (read_members(p, body, len, &n, err) < 0)
        return -1;
    return policy_fields(p, n, out, err);
}

static bool blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

int nd_request_parse_reason(nd_request_parser *p, const char *body, size_t len, const char **reason,
                            size_t *reason_len, nd_request_error *err)
{
    *reason = NULL;
    *reason_len = 0;
    if (!body || blank(body, len))
        return 0;
    size_t n;
    if (read_members(p, body, len, &n, err) < 0)
        return -1;
    const nd_json_value *r = field(p, n, "reason");
    if (!r)
        return 0;
    size_t chars = 0;
    if (r->type == ND_JSON_STRING)
        for (size_t i = 0; i < r->str_len; i++)
            chars += ((unsigned char)r->str[i] & 0xC0) != 0x80;
    if (r->type != ND_JSON_STRING || chars > ND_REQUEST_REASON_MAX)
        return invalid_field(err, "reason", "reason must be a string of at most %d characters",
                             ND_REQUEST_REASON_MAX);
    *reason = r->str;
    *reason_len = r->str_len;
    return 0;
}

/* Decodes value[0..len) of a query parameter (percent escapes, '+' as a
 * space) into a new string; NULL on -ENOMEM. */
static char *query_value(const char *value, size_t len, size_t *out_len)
{
    char *tmp = malloc(len + 1);
    if (!tmp)
        return NULL;
    memcpy(tmp, value, len);
    tmp[len] = 0;
    char *dec = evhttp_uridecode(tmp, 1, out_len);
    free(tmp);
    return dec;
}

const char *nd_request_query_next(const char **query, const char *name, size_t *len)
{
    size_t nlen = strlen(name);
    for (const char *q = *query ? *query : ""; *q;) {
        size_t seg = strcspn(q, "&");
        size_t klen = strcspn(q, "=&");
        bool ours = klen == nlen && memcmp(q, name, nlen) == 0;
        const char *v = q + klen + (klen < seg);
        *len = seg - klen - (klen < seg);
        q += seg + (q[seg] == '&');
        if (ours) {
            *query = q;
            return v;
        }
    }
    *query = NULL;
    return NULL;
}

int nd_request_query_consistency(const char *query, bool *latest, nd_request_error *err)
{
    *latest = false;
    const char *v;
    size_t vlen;
    while ((v = nd_request_query_next(&query, "consistency", &vlen)))
        if (nd_request_consistency(v, vlen, latest, err) < 0)
            return -1;
    return 0;
}

int nd_request_query_switch(const char *query, const char *name, bool *on, nd_request_error *err)
{
    *on = false;
    const char *v;
    size_t vlen;
    while ((v = nd_request_query_next(&query, name, &vlen))) {
        if (vlen == 4 && memcmp(v, "true", 4) == 0)
            *on = true;
        else if (vlen == 5 && memcmp(v, "false", 5) == 0)
            *on = false;
        else
            return invalid_field(err, name, "%s must be true or false", name);
    }
    return 0;
}

int nd_request_parse_page(const char *query, bool allow_document, nd_page_req *out,
                          nd_request_error *err)
{
    memset(out, 0, sizeof(*out));
    out->limit = ND_REQUEST_LIMIT_DEFAULT;
    bool have_limit = false;
    for (const char *q = query ? query : ""; *q;) {
        size_t seg = strcspn(q, "&");
        size_t klen = strcspn(q, "=&");
        const char *v = q + klen + (klen < seg);
        size_t vlen = seg - klen - (klen < seg);
        const char *key = NULL;
        if (klen == 5 && memcmp(q, "limit", 5) == 0)
            key = "limit";
        else if (klen == 6 && memcmp(q, "cursor", 6) == 0)
            key = "cursor";
        else if (allow_document && klen == 8 && memcmp(q, "document", 8) == 0)
            key = "document";
        q += seg + (q[seg] == '&');
        if (!key)
            continue; /* unknown parameters are ignored, like unknown fields */
        size_t dlen;
        char *dec = query_value(v, vlen, &dlen);
        if (!dec) {
            free(out->document);
            out->document = NULL;
            return refuse(err, 500, "internal", NULL, "out of memory");
        }
        int rc = 0;
        bool twice = key[0] == 'l' ? have_limit : key[0] == 'c' ? out->has_cursor : !!out->document;
        if (twice) {
            rc = invalid_field(err, key, "%s is given twice", key);
        } else if (key[0] == 'l') {
            unsigned long lim = 0;
            bool ok = dlen > 0 && dlen <= 7 && strspn(dec, "0123456789") == dlen;
            if (ok)
                lim = strtoul(dec, NULL, 10);
            if (!ok || lim < 1 || lim > ND_REQUEST_LIMIT_MAX)
                rc = invalid_field(err, "limit", "limit must be an integer from 1 to %d",
                                   ND_REQUEST_LIMIT_MAX);
            out->limit = (unsigned)lim;
            have_limit = true;
        } else if (key[0] == 'c') {
            if (dlen == 0 || dlen >= ND_CURSOR_TEXT_MAX || strlen(dec) != dlen)
                rc = invalid_field(err, "cursor",
                                   "cursor is not one this server gave (use next_cursor as it is)");
            else
                memcpy(out->cursor, dec, dlen + 1);
            out->has_cursor = true;
        } else {
            if (!nd_request_id_valid(dec, dlen))
                rc = invalid_field(err, "document", "document must be an id of " ID_RULE,
                                   ND_ID_MAX_CHARS);
            else {
                out->document = dec;
                out->document_len = dlen;
                dec = NULL;
            }
        }
        free(dec);
        if (rc < 0) {
            free(out->document);
            out->document = NULL;
            return rc;
        }
    }
    return 0;
}

#define CURSOR_BYTES 21 /* kind, owner (8), at (8), check (4) */

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static uint32_t cursor_check(const uint8_t *b)
{
    return (uint32_t)XXH3_64bits_withSeed(b, CURSOR_BYTES - 4, 0x6e64637572736f72ULL);
}

void nd_request_cursor_encode(int kind, int64_t owner, int64_t at, char out[ND_CURSOR_TEXT_MAX])
{
    uint8_t b[CURSOR_BYTES];
    b[0] = (uint8_t)kind;
    for (int i = 0; i < 8; i++) {
        b[1 + i] = (uint8_t)((uint64_t)owner >> (56 - 8 * i));
        b[9 + i] = (uint8_t)((uint64_t)at >> (56 - 8 * i));
    }
    uint32_t c = cursor_check(b);
    for (int i = 0; i < 4; i++)
        b[17 + i] = (uint8_t)(c >> (24 - 8 * i));
    size_t o = 0;
    for (size_t i = 0; i < CURSOR_BYTES; i += 3) { /* 21 bytes: 7 whole groups, 28 chars */
        uint32_t v = (uint32_t)b[i] << 16 | (uint32_t)b[i + 1] << 8 | b[i + 2];
        for (int k = 3; k >= 0; k--)
            out[o++] = b64url[(v >> (6 * k)) & 63];
    }
    out[o] = 0;
}

int nd_request_cursor_decode(const char *cursor, int kind, int64_t owner, int64_t *at,
                             nd_request_error *err)
{
    uint8_t b[CURSOR_BYTES];
    bool ok = cursor && strlen(cursor) == CURSOR_BYTES / 3 * 4;
    for (size_t i = 0; ok && i < CURSOR_BYTES / 3; i++) {
        uint32_t v = 0;
        for (int k = 0; k < 4 && ok; k++) {
            const char *pos = cursor[4 * i + k] ? strchr(b64url, cursor[4 * i + k]) : NULL;
            ok = pos != NULL;
            v = v << 6 | (uint32_t)(pos ? pos - b64url : 0);
        }
        b[3 * i] = (uint8_t)(v >> 16);
        b[3 * i + 1] = (uint8_t)(v >> 8);
        b[3 * i + 2] = (uint8_t)v;
    }
    uint64_t o = 0, a = 0;
    uint32_t c = 0;
    for (int i = 0; ok && i < 8; i++) {
        o = o << 8 | b[1 + i];
        a = a << 8 | b[9 + i];
    }
    for (int i = 0; ok && i < 4; i++)
        c = c << 8 | b[17 + i];
    if (!ok || b[0] != (uint8_t)kind || (int64_t)o != owner || c != cursor_check(b) ||
        (int64_t)a < 0)
        return invalid_field(err, "cursor",
                             "cursor is not one this server gave for this list (use next_cursor "
                             "as it is)");
    *at = (int64_t)a;
    return 0;
}
