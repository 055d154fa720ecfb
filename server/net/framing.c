/* framing.c - strict incremental HTTP/1.x request framing check (framing.h). */
#include "framing.h"

#include <string.h>
#include <strings.h>

enum {
    ST_START,  /* before a request's first byte */
    ST_RLINE,  /* request line */
    ST_HSTART, /* start of a header line (or the empty line) */
    ST_HNAME,
    ST_HVALUE,
    ST_BODY,  /* Content-Length body */
    ST_CSIZE, /* chunk-size line */
    ST_CDATA,
    ST_CCR,    /* CRLF after chunk data */
    ST_TSTART, /* trailer lines */
    ST_TNAME,
    ST_TVALUE,
    ST_REFUSED,
};

enum { M_BODY, M_NOBODY, M_UNKNOWN };
enum { H_OTHER, H_HOST, H_CL, H_TE, H_EXPECT };

/* RFC 9110 tchar. */
static const unsigned char tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1,  ['~'] = 1, ['0'] = 1,
    ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1,  ['7'] = 1, ['8'] = 1,
    ['9'] = 1, ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1,  ['F'] = 1, ['G'] = 1,
    ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1,  ['N'] = 1, ['O'] = 1,
    ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1,  ['V'] = 1, ['W'] = 1,
    ['X'] = 1, ['Y'] = 1, ['Z'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1,  ['d'] = 1, ['e'] = 1,
    ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1,  ['l'] = 1, ['m'] = 1,
    ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1,  ['t'] = 1, ['u'] = 1,
    ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

static const struct {
    short status;
    const char *code;
    const char *msg;
} reasons[] = {
    [ND_FR_OK] = {0, "", ""},
    [ND_FR_REQUEST_LINE] = {400, "bad_request",
                            "malformed request line (method SP target SP HTTP/1.x, visible "
                            "ASCII)"},
    [ND_FR_VERSION] = {505, "http_version_not_supported", "only HTTP/1.0 and HTTP/1.1"},
    [ND_FR_BARE_CR_LF] = {400, "bad_request", "a bare CR or LF: lines end with CRLF"},
    [ND_FR_CONTROL] = {400, "bad_request", "a control character in the request head"},
    [ND_FR_OBS_FOLD] = {400, "bad_request",
                        "a header line starts with whitespace (obsolete line folding)"},
    [ND_FR_NAME] = {400, "bad_request",
                    "malformed header name (a token followed at once by a colon)"},
    [ND_FR_HOST] = {400, "bad_request",
                    "an HTTP/1.1 request needs exactly one Host header (1.0: at most one)"},
    [ND_FR_CL_DUP] = {400, "bad_request", "more than one Content-Length header"},
    [ND_FR_CL_BAD] = {400, "bad_request", "Content-Length is not a number"},
    [ND_FR_CL_HUGE] = {413, "body_too_large", "Content-Length exceeds the body limit"},
    [ND_FR_TE_CODING] = {501, "not_implemented",
                         "unsupported transfer coding: only chunked is implemented"},
    [ND_FR_TE_BAD] = {400, "bad_request",
                      "malformed Transfer-Encoding (one header, the value chunked)"},
    [ND_FR_TE_CL] = {400, "bad_request", "both Transfer-Encoding and Content-Length"},
    [ND_FR_TE_10] = {400, "bad_request", "Transfer-Encoding in an HTTP/1.0 request"},
    [ND_FR_BODY_NOT_ALLOWED] = {400, "bad_request", "a HEAD or TRACE request has no body"},
    [ND_FR_EXPECT_TOO_LARGE] = {413, "body_too_large",
                                "Expect: 100-continue with a Content-Length over the body "
                                "limit"},
    [ND_FR_CHUNKED_BODY] = {0, "body_too_large", "malformed chunked body"},
};

int nd_framing_status(int why)
{
    return why > 0 && why <= ND_FR_CHUNKED_BODY ? reasons[why].status : 0;
}

const char *nd_framing_code(int why)
{
    return why > 0 && why <= ND_FR_CHUNKED_BODY ? reasons[why].code : "bad_request";
}

const char *nd_framing_message(int why)
{
    return why > 0 && why <= ND_FR_CHUNKED_BODY ? reasons[why].msg : "malformed request";
}

void nd_framing_init(nd_framing *f, uint64_t max_body)
{
    memset(f, 0, sizeof(*f));
    f->max_body = max_body;
    f->state = ST_START;
}

static int refuse(nd_framing *f, int why)
{
    f->why = (uint8_t)why;
    f->state = ST_REFUSED;
    return why;
}

static void new_head(nd_framing *f)
{
    f->heads++;
    f->line_start = f->off;
    f->method = M_UNKNOWN;
    f->version = 0;
    f->spaces = 0;
    f->part_len = 0;
    f->nhost = f->ncl = f->nte = 0;
    f->cl_bad = f->cl_huge = f->te_bad = f->te_coding = f->expect = false;
    f->te_chunked = 0;
    f->cl = 0;
    f->state = ST_RLINE;
}

/* The request line ended (part holds the version). */
static int end_request_line(nd_framing *f)
{
    if (f->spaces != 2 || f->part_len == 0)
        return refuse(f, ND_FR_REQUEST_LINE);
    if (f->part_len == 8 && memcmp(f->part, "HTTP/1.1", 8) == 0)
        f->version = 11;
    else if (f->part_len == 8 && memcmp(f->part, "HTTP/1.0", 8) == 0)
        f->version = 10;
    else if (f->part_len == 8 && memcmp(f->part, "HTTP/", 5) == 0 && f->part[5] >= '0' &&
             f->part[5] <= '9' && f->part[6] == '.' && f->part[7] >= '0' && f->part[7] <= '9')
        return refuse(f, ND_FR_VERSION);
    else
        return refuse(f, ND_FR_REQUEST_LINE);
    f->state = ST_HSTART;
    return ND_FR_OK;
}

/* The method (part, part_len bytes) is complete. */
static void set_method(nd_framing *f)
{
    static const char *const body[] = {"GET",     "POST",    "PUT",  "DELETE",
                                       "OPTIONS", "CONNECT", "PATCH"};
    f->method = M_UNKNOWN;
    if ((f->part_len == 4 && memcmp(f->part, "HEAD", 4) == 0) ||
        (f->part_len == 5 && memcmp(f->part, "TRACE", 5) == 0)) {
        f->method = M_NOBODY;
        return;
    }
    for (size_t i = 0; i < sizeof(body) / sizeof(body[0]); i++)
        if (strlen(body[i]) == f->part_len && memcmp(f->part, body[i], f->part_len) == 0)
            f->method = M_BODY;
}

static void name_done(nd_framing *f)
{
    f->hid = H_OTHER;
    if (!f->long_name) {
        if (f->nlen == 4 && memcmp(f->name, "host", 4) == 0)
            f->hid = H_HOST;
        else if (f->nlen == 14 && memcmp(f->name, "content-length", 14) == 0)
            f->hid = H_CL;
        else if (f->nlen == 17 && memcmp(f->name, "transfer-encoding", 17) == 0)
            f->hid = H_TE;
        else if (f->nlen == 6 && memcmp(f->name, "expect", 6) == 0)
            f->hid = H_EXPECT;
    }
    f->vlen = f->vtrim = 0;
    f->vstarted = f->vover = false;
}

/* A framing header's line ended: its value is val[0, vtrim), without the
 * OWS around it (vover: it was longer than val). */
static void header_done(nd_framing *f)
{
    bool over = f->vover;
    size_t n = f->vtrim;
    switch (f->hid) {
    case H_HOST: f->nhost++; break;
    case H_CL:
        f->ncl++;
        if (n == 0)
            f->cl_bad = true;
        for (size_t i = 0; i < n; i++)
            if (f->val[i] < '0' || f->val[i] > '9')
                f->cl_bad = true;
        if (!f->cl_bad) {
            if (n > 18 || over) {
                f->cl_huge = true;
            } else {
                uint64_t v = 0;
                for (size_t i = 0; i < n; i++)
                    v = v * 10 + (uint64_t)(f->val[i] - '0');
                f->cl = v;
            }
        }
        break;
    case H_TE: {
        f->nte++;
        if (over) {
            f->te_bad = true;
            break;
        }
        /* A list of codings: exactly "chunked" is what libevent reads as
         * chunked; any other coding is unknown to us (501); empty elements
         * or a repeated chunked are malformed. */
        size_t i = 0;
        for (;;) {
            size_t s = i;
            while (i < n && f->val[i] != ',')
                i++;
            size_t a = s, b = i;
            while (a < b && f->val[a] == ' ')
                a++;
            while (b > a && f->val[b - 1] == ' ')
                b--;
            if (a == b)
                f->te_bad = true;
            else if (b - a == 7 && strncasecmp(f->val + a, "chunked", 7) == 0)
                f->te_chunked++;
            else
                f->te_coding = true;
            if (i >= n)
                break;
            i++;
        }
        break;
    }
    case H_EXPECT:
        if (!over && n == 12 && strncasecmp(f->val, "100-continue", 12) == 0)
            f->expect = true;
        break;
    default: break;
    }
}

/* The head ended (empty line): decide, and set up the body. */
static int end_head(nd_framing *f)
{
    if (f->version == 11 ? f->nhost != 1 : f->nhost > 1)
        return refuse(f, ND_FR_HOST);
    if (f->ncl > 1)
        return refuse(f, ND_FR_CL_DUP);
    if (f->ncl && f->cl_bad)
        return refuse(f, ND_FR_CL_BAD);
    if (f->nte) {
        if (f->te_coding)
            return refuse(f, ND_FR_TE_CODING);
        if (f->te_bad || f->te_chunked != 1 || f->nte > 1)
            return refuse(f, ND_FR_TE_BAD);
        if (f->ncl)
            return refuse(f, ND_FR_TE_CL);
        if (f->version != 11)
            return refuse(f, ND_FR_TE_10);
    }
    if (f->method == M_NOBODY && (f->nte || (f->ncl && (f->cl > 0 || f->cl_huge))))
        return refuse(f, ND_FR_BODY_NOT_ALLOWED);
    if (f->ncl && f->cl_huge)
        return refuse(f, ND_FR_CL_HUGE);
    if (f->expect && f->version == 11 && f->ncl && f->cl > f->max_body)
        return refuse(f, ND_FR_EXPECT_TOO_LARGE);
    if (f->nte) {
        f->state = ST_CSIZE;
        f->csize = 0;
        f->cdigits = 0;
    } else if (f->ncl && f->cl > 0 && f->method == M_BODY) {
        f->state = ST_BODY;
        f->remaining = f->cl;
    } else {
        /* No body. An unknown method: libevent answers 501 and closes. */
        f->state = ST_START;
    }
    return ND_FR_OK;
}

/* A byte allowed in a field value: HTAB, SP, VCHAR, obs-text. */
static inline bool value_byte(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

size_t nd_framing_skip(nd_framing *f, size_t n)
{
    if (f->state != ST_BODY && f->state != ST_CDATA)
        return 0;
    size_t take = n < f->remaining ? n : (size_t)f->remaining;
    f->off += take;
    f->remaining -= take;
    if (f->remaining == 0) {
        f->state = f->state == ST_BODY ? ST_START : ST_CCR;
        f->line_start = f->off;
    }
    return take;
}

int nd_framing_scan(nd_framing *f, const unsigned char *p, size_t n)
{
    if (f->state == ST_REFUSED)
        return f->why;
    size_t i = 0;
    while (i < n) {
        /* Bulk skips first: body and chunk data. */
        if (f->state == ST_BODY || f->state == ST_CDATA) {
            uint64_t take = n - i < f->remaining ? n - i : f->remaining;
            i += take;
            f->off += take;
            f->remaining -= take;
            if (f->remaining == 0) {
                f->state = f->state == ST_BODY ? ST_START : ST_CCR;
                f->line_start = f->off;
            }
            continue;
        }
        if (f->state == ST_START)
            new_head(f);
        unsigned char c = p[i];
        /* Line ends, in every line state: CRLF only. */
        if (f->cr) {
            if (c != '\n')
                return refuse(f, f->state >= ST_CSIZE ? ND_FR_CHUNKED_BODY : ND_FR_BARE_CR_LF);
            f->cr = false;
            f->off++;
            i++;
            int rc = ND_FR_OK;
            switch (f->state) {
            case ST_RLINE: rc = end_request_line(f); break;
            case ST_HSTART: rc = end_head(f); break;
            case ST_HVALUE:
                header_done(f);
                f->state = ST_HSTART;
                break;
            case ST_CSIZE:
                if (f->cdigits == 0)
                    return refuse(f, ND_FR_CHUNKED_BODY);
                if (f->csize == 0) {
                    f->state = ST_TSTART;
                } else {
                    f->state = ST_CDATA;
                    f->remaining = f->csize;
                }
                break;
            case ST_CCR:
                f->state = ST_CSIZE;
                f->csize = 0;
                f->cdigits = 0;
                break;
            case ST_TSTART:
                f->state = ST_START; /* the message ends */
                break;
            case ST_TVALUE: f->state = ST_TSTART; break;
            default: return refuse(f, ND_FR_CHUNKED_BODY);
            }
            if (rc != ND_FR_OK)
                return rc;
            f->line_start = f->off;
            continue;
        }
        if (c == '\r' && f->state != ST_HNAME && f->state != ST_TNAME) {
            f->cr = true;
            f->off++;
            i++;
            continue;
        }
        if (c == '\n')
            return refuse(f, f->state >= ST_CSIZE ? ND_FR_CHUNKED_BODY : ND_FR_BARE_CR_LF);
        switch (f->state) {
        case ST_RLINE:
            if (c == ' ') {
                if (f->part_len == 0 || f->spaces == 2)
                    return refuse(f, ND_FR_REQUEST_LINE);
                if (f->spaces == 0)
                    set_method(f);
                f->spaces++;
                f->part_len = 0;
            } else if (c > 0x20 && c < 0x7f) {
                if (f->spaces != 1 && f->part_len < sizeof(f->part))
                    f->part[f->part_len] = (char)c;
                if (f->part_len < 255)
                    f->part_len++;
                if (f->spaces != 1 && f->part_len > sizeof(f->part))
                    f->part_len = sizeof(f->part); /* too long: matches nothing */
            } else {
                return refuse(f, ND_FR_REQUEST_LINE);
            }
            break;
        case ST_HSTART:
        case ST_TSTART:
            if (c == ' ' || c == '\t')
                return refuse(f, f->state == ST_TSTART ? ND_FR_CHUNKED_BODY : ND_FR_OBS_FOLD);
            if (!tchar[c])
                return refuse(f, f->state == ST_TSTART ? ND_FR_CHUNKED_BODY : ND_FR_NAME);
            f->nlen = 0;
            f->long_name = false;
            f->state = f->state == ST_TSTART ? ST_TNAME : ST_HNAME;
            /* fall through */
        case ST_HNAME:
        case ST_TNAME:
            if (c == ':') {
                if (f->state == ST_HNAME) {
                    name_done(f);
                    f->state = ST_HVALUE;
                } else {
                    f->state = ST_TVALUE;
                }
            } else if (tchar[c]) {
                if (f->nlen < sizeof(f->name))
                    f->name[f->nlen++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
                else
                    f->long_name = true;
            } else {
                return refuse(f, f->state == ST_TNAME ? ND_FR_CHUNKED_BODY : ND_FR_NAME);
            }
            break;
        case ST_HVALUE:
        case ST_TVALUE:
            /* NUL never (RFC 9110 5.5: invalid and dangerous); other
             * control characters only where no framing depends on them
             * (5.5 lets a recipient keep them in a safe context). */
            if (c == 0 || (!value_byte(c) && (f->state == ST_TVALUE || f->hid != H_OTHER)))
                return refuse(f, f->state == ST_TVALUE ? ND_FR_CHUNKED_BODY : ND_FR_CONTROL);
            if (f->state == ST_HVALUE && f->hid != H_OTHER) {
                bool ows = c == ' ' || c == '\t';
                if (c == '\t' && (f->hid == H_CL || f->hid == H_TE))
                    return refuse(f, f->hid == H_CL ? ND_FR_CL_BAD : ND_FR_TE_BAD);
                if (!ows)
                    f->vstarted = true;
                if (f->vstarted) {
                    if (f->vlen < sizeof(f->val)) {
                        f->val[f->vlen++] = (char)c;
                        if (!ows)
                            f->vtrim = f->vlen;
                    } else if (!ows) {
                        f->vover = true;
                    }
                }
            }
            break;
        case ST_CSIZE: {
            int v = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (v < 0 || f->cdigits >= 15)
                return refuse(f, ND_FR_CHUNKED_BODY);
            f->csize = f->csize * 16 + (uint64_t)v;
            f->cdigits++;
            break;
        }
        default: /* ST_CCR without its CR */ return refuse(f, ND_FR_CHUNKED_BODY);
        }
        f->off++;
        i++;
    }
    return ND_FR_OK;
}
