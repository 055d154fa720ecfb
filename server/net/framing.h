/* framing.h - a strict, incremental check of HTTP/1.x request framing, run
 * over the raw bytes of a connection before libevent parses them.
 *
 * Why: a proxy in front of neardupd reuses connections, and any request
 * whose boundaries the proxy and libevent 2.1 read differently is a
 * smuggling hole. libevent is lenient where RFC 9112 wants a refusal: it
 * takes a bare LF as a line end, folds obs-fold lines into the previous
 * value, keeps "Content-Length : 5" as a header named "Content-Length "
 * (so: no body), treats any Transfer-Encoding but exactly "chunked" as
 * absent, never reads the body of a HEAD or TRACE request (so it runs as
 * the next request), accepts a chunk's data without its CRLF, and checks
 * no Host. This scanner accepts only requests that libevent frames
 * exactly as RFC 9112 does, and names the first one it refuses.
 *
 * The scanner never buffers: it keeps a few counters and at most 64 bytes
 * of the value of a framing header (Content-Length, Transfer-Encoding,
 * Host, Expect). A request it accepts costs a pass over its head and
 * O(1) per body or chunk.
 *
 * What it accepts (RFC 9112, strict): lines end in CRLF; a request line of
 * method SP target SP HTTP/1.0 or HTTP/1.1 with visible ASCII only; header
 * names that are tokens followed at once by ':'; values without NUL, and
 * without any other control character in Host, Content-Length,
 * Transfer-Encoding and Expect (HTAB allowed, but not in Content-Length and
 * Transfer-Encoding, whose leading HTAB libevent would keep); no obs-fold; exactly one Host in HTTP/1.1 (at most
 * one in 1.0); at most one Content-Length, all digits; Transfer-Encoding
 * only as one header whose value is "chunked", only in HTTP/1.1, never
 * with Content-Length; no body on HEAD or TRACE; with
 * "Expect: 100-continue", a Content-Length within the body limit; chunked
 * bodies with hex sizes (no extensions: libevent refuses them), CRLF after
 * each chunk's data, and well-formed trailer lines. */
#ifndef ND_FRAMING_H
#define ND_FRAMING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why a request was refused (nd_framing_message() has the text). */
enum nd_framing_why {
    ND_FR_OK = 0,
    ND_FR_REQUEST_LINE,     /* 400 */
    ND_FR_VERSION,          /* 505 */
    ND_FR_BARE_CR_LF,       /* 400 */
    ND_FR_CONTROL,          /* 400 */
    ND_FR_OBS_FOLD,         /* 400 */
    ND_FR_NAME,             /* 400 */
    ND_FR_HOST,             /* 400 */
    ND_FR_CL_DUP,           /* 400 */
    ND_FR_CL_BAD,           /* 400 */
    ND_FR_CL_HUGE,          /* 413 */
    ND_FR_TE_CODING,        /* 501 */
    ND_FR_TE_BAD,           /* 400 */
    ND_FR_TE_CL,            /* 400 */
    ND_FR_TE_10,            /* 400 */
    ND_FR_BODY_NOT_ALLOWED, /* 400 */
    ND_FR_EXPECT_TOO_LARGE, /* 413 */
    ND_FR_CHUNKED_BODY,     /* in the body: libevent's own 413 */
};

typedef struct nd_framing {
    uint64_t max_body;   /* for Expect: 100-continue */
    uint64_t off;        /* stream offset of the next byte */
    uint64_t line_start; /* stream offset of the current line (see refused) */
    uint64_t remaining;  /* body or chunk data still to skip */
    uint64_t cl;         /* Content-Length of the current head */
    uint64_t csize;      /* chunk size being read */
    uint32_t heads;      /* requests begun, the current one included */
    uint8_t state;
    uint8_t why; /* enum nd_framing_why once refused */
    bool cr;     /* the previous byte was a CR ending a line */
    /* the current head */
    uint8_t method;   /* see framing.c */
    uint8_t version;  /* 10, 11, or 0 */
    uint8_t spaces;   /* in the request line */
    uint8_t part_len; /* bytes of the current request-line part (capped) */
    uint8_t nhost, ncl, nte;
    bool cl_bad, cl_huge, te_bad, te_coding, expect;
    uint8_t te_chunked;
    uint8_t cdigits;
    uint8_t hid; /* which framing header the current line is */
    uint8_t nlen, vlen, vtrim;
    bool vstarted, vover, long_name;
    char part[12]; /* method or version */
    char name[20]; /* header name, lower case */
    char val[64];  /* value of a framing header */
} nd_framing;

/* Starts a connection's scan. */
void nd_framing_init(nd_framing *f, uint64_t max_body);

/* Scans the next n bytes of the connection's stream. Returns ND_FR_OK, or
 * the reason of the first refusal: then f->line_start is the stream offset
 * of the line at which the bytes must stop reaching libevent (nothing
 * before it belongs to the refused part), f->heads - 1 is the index of the
 * refused request (0 = the connection's first), and every later call
 * returns the same reason at once. */
int nd_framing_scan(nd_framing *f, const unsigned char *p, size_t n);

/* Skips up to n bytes of body or chunk data without looking at them (the
 * same as nd_framing_scan() over them); returns how many (0 when the scan
 * is not in a body). */
size_t nd_framing_skip(nd_framing *f, size_t n);

/* True while the scan is refused. */
static inline bool nd_framing_refused(const nd_framing *f)
{
    return f->why != ND_FR_OK;
}

/* The HTTP status for a refusal (0 for ND_FR_CHUNKED_BODY: libevent's). */
int nd_framing_status(int why);

/* The error code ("bad_request", ...) and a message for a refusal. */
const char *nd_framing_code(int why);
const char *nd_framing_message(int why);

#endif
