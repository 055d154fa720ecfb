/* json.c - strict one-pass JSON reader for request objects; string writer;
 * the writer of reals. */
#include "json.h"
#include "bounds.h"
#include "utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <endian.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#define MAX_DEPTH ND_REQUEST_MAX_DEPTH

typedef struct reader {
    const char *s;
    size_t n, i;
    char *out; /* next free byte of the scratch (NULL: validate only) */
    nd_json_error *err;
    unsigned depth;
} reader;

static int fail(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(reader *r, const char *fmt, ...)
{
    if (r->err) {
        unsigned line = 1, col = 1;
        for (size_t k = 0; k < r->i && k < r->n; k++) {
            if (r->s[k] == '\n') {
                line++;
                col = 1;
            } else if (((unsigned char)r->s[k] & 0xC0) != 0x80) {
                col++;
            }
        }
        r->err->line = line;
        r->err->column = col;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err->text, sizeof(r->err->text), fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static inline void skip_ws(reader *r)
{
    while (r->i < r->n) {
        char c = r->s[r->i];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t')
            break;
        r->i++;
    }
}

static int hex4(reader *r, unsigned *out)
{
    if (r->n - r->i < 4)
        return fail(r, "truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = r->s[r->i++];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return fail(r, "invalid \\u escape");
    }
    *out = v;
    return 0;
}

/* One escape after the backslash; appends its UTF-8 to *o (if o). */
static int escape(reader *r, char **o)
{
    if (r->i >= r->n)
        return fail(r, "truncated escape");
    char c = r->s[r->i++];
    char lit;
    switch (c) {
    case '"': lit = '"'; break;
    case '\\': lit = '\\'; break;
    case '/': lit = '/'; break;
    case 'b': lit = '\b'; break;
    case 'f': lit = '\f'; break;
    case 'n': lit = '\n'; break;
    case 'r': lit = '\r'; break;
    case 't': lit = '\t'; break;
    case 'u': {
        unsigned cp, lo;
        if (hex4(r, &cp) < 0)
            return -EINVAL;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            return fail(r, "lone low surrogate \\u%04X", cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (r->n - r->i < 2 || r->s[r->i] != '\\' || r->s[r->i + 1] != 'u')
                return fail(r, "high surrogate \\u%04X without its pair", cp);
            r->i += 2;
            if (hex4(r, &lo) < 0)
                return -EINVAL;
            if (lo < 0xDC00 || lo > 0xDFFF)
                return fail(r, "high surrogate \\u%04X without its pair", cp);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (o) {
            uint8_t enc[4];
            size_t k = nd_utf8_encode(cp, enc);
            memcpy(*o, enc, k);
            *o += k;
        }
        return 0;
    }
    default: return fail(r, "invalid escape \\%c", c >= 0x20 && c < 0x7f ? c : '?');
    }
    if (o)
        *(*o)++ = lit;
    return 0;
}

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* Whether any of the 8 bytes in w needs a look of its own in a string: a
 * quote, a backslash, a control character or a non-ASCII byte (the usual
 * SWAR tests; each is exact for "is there such a byte"). */
static inline bool has_special(uint64_t w)
{
    uint64_t quote = w ^ (ONES * '"'), bslash = w ^ (ONES * '\\');
    uint64_t zero_q = (quote - ONES) & ~quote;
    uint64_t zero_b = (bslash - ONES) & ~bslash;
    uint64_t control = (w - ONES * 0x20) & ~w;
    return ((zero_q | zero_b | control) & HIGHS) | (w & HIGHS);
}

/* Lead bytes that plain_3byte() accepts: E1..EC and EE..EF. */
static inline bool plain_lead(unsigned c)
{
    return c - 0xE1u < 15u && c != 0xED;
}

/* Whether s[i..n) starts with a three-byte sequence that needs no further
 * check: lead bytes E1..EC and EE..EF accept any continuation bytes (most
 * CJK text). */
static inline bool plain_3byte(const unsigned char *s, size_t i, size_t n)
{
    return plain_lead(s[i]) && n - i > 2 && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80;
}

/* Skips the run of plain_3byte() sequences at s[i..n), two at a time while
 * 8 bytes can be read (continuation bytes checked in one mask). Returns the
 * index after the run. */
static size_t skip_3byte_run(const unsigned char *s, size_t i, size_t n)
{
    while (n - i >= 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        w = le64toh(w);
        if ((w & 0x0000C0C000C0C000ull) != 0x0000808000808000ull || !plain_lead(s[i]) ||
            !plain_lead(s[i + 3]))
            break;
        i += 6;
    }
    while (i < n && plain_3byte(s, i, n))
        i += 3;
    return i;
}

/* A string starting at the opening quote. Sets v (str only when decode). */
static int string(reader *r, nd_json_value *v, bool decode)
{
    const unsigned char *s = (const unsigned char *)r->s;
    size_t start = ++r->i;
    char *o = NULL;     /* decoding into the scratch once an escape is met */
    size_t run = start; /* start of the bytes not yet copied */
    while (1) {
        while (r->n - r->i >= 8) { /* runs of plain ASCII, 8 bytes a step */
            uint64_t w;
            memcpy(&w, s + r->i, 8);
            if (has_special(w))
                break;
            r->i += 8;
        }
        if (r->i >= r->n)
            return fail(r, "unterminated string");
        unsigned c = s[r->i];
        if (c == '"')
            break;
        if (c < 0x20)
            return fail(r, "control character U+%04X in a string", c);
        if (c == '\\') {
            if (decode && !o) {
                o = r->out;
            }
            if (o) {
                memcpy(o, r->s + run, r->i - run);
                o += r->i - run;
            }
            r->i++;
            if (escape(r, o ? &o : NULL) < 0)
                return -EINVAL;
            run = r->i;
            continue;
        }
        if (c < 0x80) {
            r->i++;
            continue;
        }
        if (plain_3byte(s, r->i, r->n)) { /* runs of CJK text */
            r->i = skip_3byte_run(s, r->i, r->n);
            continue;
        }
        uint32_t cp;
        if (nd_utf8_decode(s, r->n, &r->i, &cp) < 0)
            return fail(r, "invalid UTF-8 in a string");
    }
    if (v) {
        v->type = ND_JSON_STRING;
        if (o) {
            memcpy(o, r->s + run, r->i - run);
            o += r->i - run;
            v->str = r->out;
            v->str_len = (size_t)(o - r->out);
            r->out = o;
        } else {
            v->str = r->s + start;
            v->str_len = r->i - start;
        }
    }
    r->i++; /* closing quote */
    return 0;
}

static int number(reader *r, nd_json_value *v)
{
    size_t start = r->i;
    const char *s = r->s;
    bool neg = false, integral = true;
    if (s[r->i] == '-') {
        neg = true;
        r->i++;
    }
    if (r->i >= r->n || s[r->i] < '0' || s[r->i] > '9')
        return fail(r, "invalid number");
    if (s[r->i] == '0') {
        r->i++;
    } else {
        while (r->i < r->n && s[r->i] >= '0' && s[r->i] <= '9')
            r->i++;
    }
    if (r->i < r->n && s[r->i] == '.') {
        integral = false;
        r->i++;
        if (r->i >= r->n || s[r->i] < '0' || s[r->i] > '9')
            return fail(r, "invalid number");
        while (r->i < r->n && s[r->i] >= '0' && s[r->i] <= '9')
            r->i++;
    }
    if (r->i < r->n && (s[r->i] == 'e' || s[r->i] == 'E')) {
        integral = false;
        r->i++;
        if (r->i < r->n && (s[r->i] == '+' || s[r->i] == '-'))
            r->i++;
        if (r->i >= r->n || s[r->i] < '0' || s[r->i] > '9')
            return fail(r, "invalid number");
        while (r->i < r->n && s[r->i] >= '0' && s[r->i] <= '9')
            r->i++;
    }
    if (v) {
        v->type = ND_JSON_NUMBER;
        v->is_int = false;
        if (integral) {
            uint64_t acc = 0;
            bool ok = true;
            for (size_t k = start + neg; ok && k < r->i; k++)
                ok = !__builtin_mul_overflow(acc, 10, &acc) &&
                     !__builtin_add_overflow(acc, (uint64_t)(s[k] - '0'), &acc);
            if (ok && acc <= (uint64_t)INT64_MAX + neg) {
                v->is_int = true;
                v->i = neg ? (int64_t)(0 - acc) : (int64_t)acc;
            }
        }
    }
    return 0;
}

static int literal(reader *r, const char *word, enum nd_json_type t, nd_json_value *v)
{
    size_t k = strlen(word);
    if (r->n - r->i < k || memcmp(r->s + r->i, word, k) != 0)
        return fail(r, "invalid token");
    r->i += k;
    if (v)
        v->type = t;
    return 0;
}

static int value(reader *r, nd_json_value *v, bool decode);

static int array(reader *r, nd_json_value *v)
{
    if (++r->depth > MAX_DEPTH)
        return fail(r, "nesting too deep");
    r->i++;
    skip_ws(r);
    if (r->i < r->n && r->s[r->i] == ']') {
        r->i++;
    } else {
        while (1) {
            if (value(r, NULL, false) < 0)
                return -EINVAL;
            skip_ws(r);
            if (r->i < r->n && r->s[r->i] == ',') {
                r->i++;
                continue;
            }
            if (r->i < r->n && r->s[r->i] == ']') {
                r->i++;
                break;
            }
            return fail(r, "expected ',' or ']'");
        }
    }
    r->depth--;
    if (v)
        v->type = ND_JSON_ARRAY;
    return 0;
}

static int object(reader *r, nd_json_value *v)
{
    if (++r->depth > MAX_DEPTH)
        return fail(r, "nesting too deep");
    r->i++;
    skip_ws(r);
    if (r->i < r->n && r->s[r->i] == '}') {
        r->i++;
    } else {
        while (1) {
            skip_ws(r);
            if (r->i >= r->n || r->s[r->i] != '"')
                return fail(r, "expected a string as key");
            if (string(r, NULL, false) < 0)
                return -EINVAL;
            skip_ws(r);
            if (r->i >= r->n || r->s[r->i] != ':')
                return fail(r, "expected ':'");
            r->i++;
            if (value(r, NULL, false) < 0)
                return -EINVAL;
            skip_ws(r);
            if (r->i < r->n && r->s[r->i] == ',') {
                r->i++;
                continue;
            }
            if (r->i < r->n && r->s[r->i] == '}') {
                r->i++;
                break;
            }
            return fail(r, "expected ',' or '}'");
        }
    }
    r->depth--;
    if (v)
        v->type = ND_JSON_OBJECT;
    return 0;
}

static int value(reader *r, nd_json_value *v, bool decode)
{
    skip_ws(r);
    if (r->i >= r->n)
        return fail(r, "unexpected end of input");
    size_t start = r->i;
    int rc;
    switch (r->s[r->i]) {
    case '"': rc = string(r, v, decode); break;
    case '{': rc = object(r, v); break;
    case '[': rc = array(r, v); break;
    case 't': rc = literal(r, "true", ND_JSON_TRUE, v); break;
    case 'f': rc = literal(r, "false", ND_JSON_FALSE, v); break;
    case 'n': rc = literal(r, "null", ND_JSON_NULL, v); break;
    default: rc = number(r, v); break;
    }
    if (rc == 0 && v) {
        v->raw = r->s + start;
        v->raw_len = r->i - start;
    }
    return rc;
}

void nd_json_scratch_finish(nd_json_scratch *s)
{
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

int nd_json_read_object(const char *buf, size_t len, nd_json_scratch *scratch,
                        nd_json_member *members, size_t cap, size_t *n, nd_json_error *err)
{
    /* Decoded text is never longer than its source: one reservation. */
    if (scratch->cap < len + 1) {
        char *b = realloc(scratch->buf, len + 1);
        if (!b)
            return -ENOMEM;
        scratch->buf = b;
        scratch->cap = len + 1;
    }
    reader r = {.s = buf, .n = len, .out = scratch->buf, .err = err};
    *n = 0;
    skip_ws(&r);
    if (r.i >= r.n || buf[r.i] != '{')
        return fail(&r, r.i >= r.n ? "empty body" : "the body must be a JSON object");
    r.i++;
    r.depth = 1;
    skip_ws(&r);
    if (r.i < r.n && buf[r.i] == '}') {
        r.i++;
    } else {
        while (1) {
            skip_ws(&r);
            if (r.i >= r.n || buf[r.i] != '"')
                return fail(&r, "expected a string as key");
            nd_json_value key;
            size_t key_at = r.i;
            if (string(&r, &key, true) < 0)
                return -EINVAL;
            for (size_t k = 0; k < *n; k++) {
                if (members[k].key_len == key.str_len &&
                    memcmp(members[k].key, key.str, key.str_len) == 0) {
                    r.i = key_at;
                    return fail(&r, "duplicate object key");
                }
            }
            skip_ws(&r);
            if (r.i >= r.n || buf[r.i] != ':')
                return fail(&r, "expected ':'");
            r.i++;
            if (*n == cap)
                return -E2BIG;
            nd_json_member *m = &members[*n];
            m->key = key.str;
            m->key_len = key.str_len;
            if (value(&r, &m->value, true) < 0)
                return -EINVAL;
            (*n)++;
            skip_ws(&r);
            if (r.i < r.n && buf[r.i] == ',') {
                r.i++;
                continue;
            }
            if (r.i < r.n && buf[r.i] == '}') {
                r.i++;
                break;
            }
            return fail(&r, "expected ',' or '}'");
        }
    }
    skip_ws(&r);
    if (r.i != r.n)
        return fail(&r, "end of file expected");
    return 0;
}

const nd_json_member *nd_json_find(const nd_json_member *members, size_t n, const char *key)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < n; i++)
        if (members[i].key_len == kl && memcmp(members[i].key, key, kl) == 0)
            return &members[i];
    return NULL;
}

void nd_json_iter_init(nd_json_iter *it, const nd_json_value *array, nd_json_scratch *scratch)
{
    it->p = array->raw + 1;
    it->end = array->raw + array->raw_len - 1;
    /* Decoded element strings go after everything decoded so far: the
     * scratch was reserved for the whole body, so the tail has room. */
    it->out = scratch->buf + scratch->cap - (size_t)(array->raw_len);
    it->done = false;
}

int nd_json_iter_next(nd_json_iter *it, nd_json_value *v)
{
    if (it->done)
        return 0;
    reader r = {.s = it->p, .n = (size_t)(it->end - it->p), .out = it->out};
    skip_ws(&r);
    if (r.i >= r.n || r.s[r.i] == ',') {
        if (r.i < r.n)
            r.i++; /* ',' between elements */
        skip_ws(&r);
        if (r.i >= r.n) {
            it->done = true;
            return 0;
        }
    }
    /* The array was validated: this cannot fail. */
    if (value(&r, v, true) < 0) {
        it->done = true;
        return 0;
    }
    it->p += r.i;
    it->out = r.out;
    return 1;
}

/* ---- the writer: the server's one JSON string escaper ----
 * '"', '\\', \n, \r and \t get their short escapes; the other control
 * characters and DEL get \u00XX; a byte that does not start a valid UTF-8
 * sequence becomes U+FFFD; everything else is copied, in runs. */

/* The end of the bytes from s[i] on that are copied as they are: printable
 * ASCII other than '"' and '\\', and valid UTF-8 sequences. */
static inline size_t plain_run(const unsigned char *s, size_t len, size_t i)
{
    while (i < len) {
        unsigned c = s[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            i++;
            continue;
        }
        size_t at = i;
        uint32_t cp;
        if (c < 0x80 || nd_utf8_decode(s, len, &at, &cp) < 0)
            break;
        i = at;
    }
    return i;
}

/* Writes the escape of c, a byte that ended a plain run, at esc; returns its
 * length. */
static size_t escape_byte(unsigned c, char esc[6])
{
    static const char hex[] = "0123456789abcdef";
    if (c >= 0x80) { /* not UTF-8 */
        memcpy(esc, "\xef\xbf\xbd", 3);
        return 3;
    }
    esc[0] = '\\';
    if (c == '"' || c == '\\')
        esc[1] = (char)c;
    else if (c == '\n')
        esc[1] = 'n';
    else if (c == '\r')
        esc[1] = 'r';
    else if (c == '\t')
        esc[1] = 't';
    else {
        memcpy(esc + 1, "u00", 3);
        esc[4] = hex[c >> 4], esc[5] = hex[c & 15];
        return 6;
    }
    return 2;
}

/* Copies n bytes to buf[*pos..cap); false (filled to cap) if they did not fit. */
static bool put_capped(char *buf, size_t cap, size_t *pos, const char *s, size_t n)
{
    if (n > cap - *pos) {
        memcpy(buf + *pos, s, cap - *pos);
        *pos = cap;
        return false;
    }
    memcpy(buf + *pos, s, n);
    *pos += n;
    return true;
}

bool nd_json_escape(char *buf, size_t cap, size_t *pos, const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    if (*pos > cap || !put_capped(buf, cap, pos, "\"", 1))
        return false;
    for (size_t i = 0; i < len;) {
        size_t end = plain_run(s, len, i);
        if (!put_capped(buf, cap, pos, str + i, end - i))
            return false;
        if (end == len)
            break;
        char esc[6];
        if (!put_capped(buf, cap, pos, esc, escape_byte(s[end], esc)))
            return false;
        i = end + 1;
    }
    return put_capped(buf, cap, pos, "\"", 1);
}

int nd_json_write_string(struct evbuffer *out, const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    int rc = evbuffer_add(out, "\"", 1);
    for (size_t i = 0; i < len;) {
        size_t end = plain_run(s, len, i);
        rc |= evbuffer_add(out, str + i, end - i);
        if (end == len)
            break;
        char esc[6];
        rc |= evbuffer_add(out, esc, escape_byte(s[end], esc));
        i = end + 1;
    }
    rc |= evbuffer_add(out, "\"", 1);
    return rc ? -ENOMEM : 0;
}

/* ---- the writer of reals: the shortest decimal that reads back ---- */

/* Rewrites the exponent of out[0..n) as jansson does (no '+', no leading
 * zeros: 1e+22 is 1e22, 1e-05 is 1e-5), or appends ".0" when the text
 * would read as an integer. Returns the new length. */
static size_t jansson_form(char *out, size_t n)
{
    char *e = strchr(out, 'e');
    if (e) {
        char *d = e + 1, *from = d;
        if (*from == '+')
            from++;
        else if (*from == '-')
            d++, from++;
        while (*from == '0' && from[1])
            from++;
        memmove(d, from, strlen(from) + 1);
        return strlen(out);
    }
    if (!strpbrk(out, ".in") && n + 2 < ND_JSON_REAL_MAX) {
        memcpy(out + n, ".0", 3);
        n += 2;
    }
    return n;
}

size_t nd_json_format_real(double x, char out[ND_JSON_REAL_MAX])
{
    /* 17 significant digits always read back (jansson's form); fewer often
     * do. Of the fewest that do, the shorter of "%g"'s form and jansson's:
     * -5.322147822446094e16 is longer than -53221478224460944.0. */
    char full[ND_JSON_REAL_MAX];
    int nf = snprintf(full, sizeof(full), "%.17g", x);
    if (nf < 0 || nf >= ND_JSON_REAL_MAX) {
        out[0] = 0;
        return 0;
    }
    size_t lf = jansson_form(full, (size_t)nf);
    for (int prec = 1; prec < 17; prec++) {
        int n = snprintf(out, ND_JSON_REAL_MAX, "%.*g", prec, x);
        if (n > 0 && n < ND_JSON_REAL_MAX && strtod(out, NULL) == x) {
            size_t len = jansson_form(out, (size_t)n);
            if (len <= lf)
                return len;
            break;
        }
    }
    memcpy(out, full, lf + 1);
    return lf;
}

/* The end of the string literal starting at s[i] (its opening quote). */
static size_t skip_literal(const char *s, size_t i)
{
    for (i++; s[i] && s[i] != '"'; i++)
        if (s[i] == '\\' && s[i + 1])
            i++;
    return s[i] ? i + 1 : i;
}

char *nd_json_dumps(const struct json_t *j, size_t flags)
{
    char *s = json_dumps(j, flags);
    if (!s)
        return NULL;
    /* Outside string literals, a token of digits, '-', '+', '.', 'e' is a
     * number; jansson writes an integer without '.' or 'e'. Each real
     * becomes its shortest form, which is never longer: rewritten in place. */
    size_t r = 0, w = 0;
    while (s[r]) {
        if (s[r] == '"') {
            size_t end = skip_literal(s, r);
            memmove(s + w, s + r, end - r);
            w += end - r, r = end;
            continue;
        }
        size_t len = s[r] == '-' || (s[r] >= '0' && s[r] <= '9')
                         ? strspn(s + r, "0123456789+-.eE")
                         : 0;
        if (!len) {
            s[w++] = s[r++];
            continue;
        }
        char num[ND_JSON_REAL_MAX];
        size_t n = 0;
        if (len < sizeof(num) && strcspn(s + r, ".eE") < len) {
            char *end;
            double x = strtod(s + r, &end);
            if (end == s + r + len)
                n = nd_json_format_real(x, num);
        }
        if (n && n <= len)
            memcpy(s + w, num, n);
        else
            memmove(s + w, s + r, n = len);
        w += n, r += len;
    }
    s[w] = 0;
    return s;
}
