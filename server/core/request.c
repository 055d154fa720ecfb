/* request.c - request bodies and paths: parse, validate, or say why not. */
#include "request.h"
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

static int refuse(nd_request_error *err, int status, const char *code, const char *field,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Fills *err; returns -1. Messages are ASCII but for what the formats add,
 * which is validated UTF-8 (field names, jansson's error text), so a cut at
 * the buffer's end is moved back to a character boundary. */
static int refuse(nd_request_error *err, int status, const char *code, const char *field,
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

int nd_request_content_kind(const char *ct, bool plain_ok, nd_request_error *err)
{
    int kind = 0;
    if (ct) {
        while (*ct == ' ' || *ct == '\t')
            ct++;
        size_t n = strcspn(ct, "; \t");
        if (n == 16 && strncasecmp(ct, "application/json", n) == 0)
            kind = ND_BODY_JSON;
        else if (plain_ok && n == 10 && strncasecmp(ct, "text/plain", n) == 0)
            kind = ND_BODY_TEXT;
        const char *cs = strcasestr(ct + n, "charset=");
        if (kind && cs) {
            cs += 8;
            if (*cs == '"')
                cs++;
            if (strncasecmp(cs, "utf-8", 5) != 0 && strncasecmp(cs, "utf8", 4) != 0)
                kind = 0;
        }
    }
    if (!kind)
        refuse(err, 415, "unsupported_media_type", NULL,
               "Content-Type must be application/json%s (UTF-8)", plain_ok ? " or text/plain" : "");
    return kind;
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
    char *text = json_dumps(obj, JSON_COMPACT);
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

/* The optional fields of a check: id, register, k, meta. */
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
    return 0;
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
    nd_request_text_hash(out->text, out->text_len, out->text_hash);
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
