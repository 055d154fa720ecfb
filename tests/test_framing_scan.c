/* test_framing_scan.c - server/net/framing.c: a connection's bytes arrive in any
 * segments, so the scan must give the same verdict, refused request and
 * cut position however the stream is split (whole, byte by byte, random
 * pieces); and the verdicts of a few streams are as RFC 9112 wants. */
#include "framing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

typedef struct {
    int why;
    uint32_t heads;
    uint64_t line_start;
    uint64_t off;
} result;

static result scan_split(const char *s, size_t n, unsigned seed, int mode)
{
    nd_framing f;
    nd_framing_init(&f, 1000);
    size_t i = 0;
    int why = ND_FR_OK;
    srand(seed);
    while (i < n && why == ND_FR_OK) {
        size_t take = mode == 0 ? n - i : mode == 1 ? 1 : 1 + (size_t)rand() % 7;
        if (take > n - i)
            take = n - i;
        /* Half the time a body segment goes through the skip first, as
         * http.c does. */
        size_t skipped = (mode == 2 && rand() % 2) ? nd_framing_skip(&f, take) : 0;
        if (take > skipped)
            why = nd_framing_scan(&f, (const unsigned char *)s + i + skipped, take - skipped);
        i += take;
    }
    result r = {why, f.heads, why ? f.line_start : 0, why ? 0 : f.off};
    return r;
}

struct tcase {
    const char *name;
    const char *data;
    int why;        /* expected */
    uint32_t heads; /* requests begun */
};

#define H "Host: x\r\n"

static const struct tcase cases[] = {
    {"two gets", "GET / HTTP/1.1\r\n" H "\r\nGET /a HTTP/1.1\r\n" H "\r\n", ND_FR_OK, 2},
    {"post cl", "POST / HTTP/1.1\r\n" H "Content-Length: 5\r\n\r\nabcdeGET / HTTP/1.1\r\n" H "\r\n",
     ND_FR_OK, 2},
    {"chunked",
     "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"
     "A\r\n0123456789\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\r\n" H "\r\n",
     ND_FR_OK, 2},
    {"head body", "HEAD / HTTP/1.1\r\n" H "Content-Length: 3\r\n\r\nabc", ND_FR_BODY_NOT_ALLOWED,
     1},
    {"space colon", "POST / HTTP/1.1\r\n" H "Content-Length : 3\r\n\r\nabc", ND_FR_NAME, 1},
    {"cl dup", "POST / HTTP/1.1\r\n" H "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
     ND_FR_CL_DUP, 1},
    {"cl te", "POST / HTTP/1.1\r\n" H "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
     ND_FR_TE_CL, 1},
    {"xchunked", "POST / HTTP/1.1\r\n" H "Transfer-Encoding: xchunked\r\n\r\n", ND_FR_TE_CODING, 1},
    {"gzip chunked", "POST / HTTP/1.1\r\n" H "Transfer-Encoding: gzip, chunked\r\n\r\n",
     ND_FR_TE_CODING, 1},
    {"te tab", "POST / HTTP/1.1\r\n" H "Transfer-Encoding:\tchunked\r\n\r\n", ND_FR_TE_BAD, 1},
    {"no host", "GET / HTTP/1.1\r\n\r\n", ND_FR_HOST, 1},
    {"two hosts", "GET / HTTP/1.1\r\n" H H "\r\n", ND_FR_HOST, 1},
    {"1.0 no host", "GET / HTTP/1.0\r\n\r\n", ND_FR_OK, 1},
    {"obs fold", "GET / HTTP/1.1\r\n" H "X: a\r\n b\r\n\r\n", ND_FR_OBS_FOLD, 1},
    {"bare lf", "GET / HTTP/1.1\n" H "\r\n", ND_FR_BARE_CR_LF, 1},
    {"bare cr", "GET / HTTP/1.1\r\n" H "X: a\rb\r\n\r\n", ND_FR_BARE_CR_LF, 1},
    {"nul", "GET / HTTP/1.1\r\n" H "X: a\0b\r\n\r\n", ND_FR_CONTROL, 1},
    {"expect over", "POST / HTTP/1.1\r\n" H "Expect: 100-continue\r\nContent-Length: 1001\r\n\r\n",
     ND_FR_EXPECT_TOO_LARGE, 1},
    {"expect within",
     "POST / HTTP/1.1\r\n" H "Expect: 100-continue\r\nContent-Length: 3\r\n\r\n"
     "abc",
     ND_FR_OK, 1},
    {"chunk no crlf", "POST / HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n3\r\nabcX",
     ND_FR_CHUNKED_BODY, 1},
    {"second refused", "GET / HTTP/1.1\r\n" H "\r\nGET / HTTP/1.1\r\n" H "X\r\n\r\n", ND_FR_NAME,
     2},
    {"http/2.0", "GET / HTTP/2.0\r\n" H "\r\n", ND_FR_VERSION, 1},
};

int main(void)
{
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const struct tcase *c = &cases[k];
        size_t n = strlen(c->data);
        if (c->why == ND_FR_CONTROL) /* "a\0b": strlen stops at the NUL */
            n = strlen(c->data) + 1 + strlen(c->data + strlen(c->data) + 1);
        result whole = scan_split(c->data, n, 0, 0);
        CHECK(whole.why == c->why, "%s: why %d, wanted %d", c->name, whole.why, c->why);
        CHECK(whole.heads == c->heads, "%s: heads %u, wanted %u", c->name, whole.heads, c->heads);
        for (int mode = 1; mode <= 2; mode++) {
            for (unsigned seed = 1; seed <= (mode == 2 ? 200u : 1u); seed++) {
                result r = scan_split(c->data, n, seed, mode);
                CHECK(r.why == whole.why && r.heads == whole.heads &&
                          r.line_start == whole.line_start && r.off == whole.off,
                      "%s: split mode %d seed %u: why %d heads %u cut %llu, whole: %d %u %llu",
                      c->name, mode, seed, r.why, r.heads, (unsigned long long)r.line_start,
                      whole.why, whole.heads, (unsigned long long)whole.line_start);
            }
        }
    }
    /* The cut is at the start of the offending line, never before it. */
    const char *s = "GET / HTTP/1.1\r\n" H "\r\nPOST / HTTP/1.1\r\n" H "Content-Length: 1\r\n"
                    "Content-Length: 1\r\n\r\nx";
    result r = scan_split(s, strlen(s), 0, 0);
    const char *empty = strstr(s + 30, "\r\n\r\n");
    CHECK(r.why == ND_FR_CL_DUP && r.line_start == (uint64_t)(empty + 2 - s),
          "cut at %llu, the empty line is at %ld", (unsigned long long)r.line_start,
          (long)(empty + 2 - s));
    return unit_summary("framing_scan");
}
