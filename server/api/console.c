/* console.c - GET/HEAD /console/...: the review console, a static page, its
 * style and its script, served from the binary (console.h) with headers that
 * keep the page to its own files: a strict Content-Security-Policy (no
 * inline script or style, no framing, no other origin), nosniff, no
 * Referer. Open to anyone: the page holds no data; its API calls carry the
 * token the user typed. Off with --console=false (then 404 like any unknown
 * path). */
#include "answer.h"
#include "console.h"
#include "handlers.h"
#include "log.h"

#include <string.h>

#include <event2/buffer.h>

#define CONSOLE_PREFIX "/console/"

/* The page's own files only: script, style, images, fetch() to this origin. */
#define CONSOLE_CSP                                                                                \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "                    \
    "connect-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; "             \
    "form-action 'self'"

const nd_console_asset *nd_console_find(const char *name, size_t len)
{
    for (const nd_console_asset *a = nd_console_assets; a->name; a++)
        if (strlen(a->name) == len && memcmp(a->name, name, len) == 0)
            return a;
    return NULL;
}

/* True when If-None-Match (a list of ETags, or "*") names etag. */
static bool etag_matches(const char *header, const char *etag)
{
    if (!header)
        return false;
    size_t n = strlen(etag);
    for (const char *p = header; *p;) {
        p += strspn(p, " \t,");
        if (!*p)
            break;
        size_t len = strcspn(p, ",");
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if ((len == 1 && *p == '*') || (len == n && memcmp(p, etag, n) == 0) ||
            (len == n + 2 && memcmp(p, "W/", 2) == 0 && memcmp(p + 2, etag, n) == 0))
            return true;
        p += strcspn(p, ",");
    }
    return false;
}

static void add_page_headers(nd_req *r, const nd_console_asset *a)
{
    nd_req_add_header(r, "Content-Security-Policy", CONSOLE_CSP);
    nd_req_add_header(r, "X-Content-Type-Options", "nosniff");
    nd_req_add_header(r, "Referrer-Policy", "no-referrer");
    nd_req_add_header(r, "X-Frame-Options", "DENY");
    nd_req_add_header(r, "Cross-Origin-Opener-Policy", "same-origin");
    nd_req_add_header(r, "Cache-Control", "no-cache"); /* revalidated: 304 by ETag */
    nd_req_add_header(r, "ETag", a->etag);
}

void handle_console(nd_req *r)
{
    if (!nd_req_config(r)->console) {
        nd_api_error(r, 404, "not_found", "no such endpoint; the console is off (--console)");
        return;
    }
    if (strcmp(r->path, "/console") == 0) { /* the exact route: to the page's folder */
        nd_req_add_header(r, "Location", CONSOLE_PREFIX);
        nd_req_reply(r, 301, NULL, NULL);
        return;
    }
    const char *name = r->path + strlen(CONSOLE_PREFIX);
    size_t len = strlen(name);
    const nd_console_asset *a = len ? nd_console_find(name, len)
                                    : nd_console_find("index.html", 10);
    if (!a) {
        nd_api_error(r, 404, "not_found", "no such file of the console");
        return;
    }
    add_page_headers(r, a);
    if (etag_matches(nd_req_header(r, "If-None-Match"), a->etag)) {
        nd_req_reply(r, 304, NULL, NULL);
        return;
    }
    struct evbuffer *body = evbuffer_new();
    if (!body || evbuffer_add_reference(body, a->data, a->len, NULL, NULL) < 0)
        nd_die_oom("console reply");
    nd_req_reply(r, 200, a->type, body);
    evbuffer_free(body);
}
