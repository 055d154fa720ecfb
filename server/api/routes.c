/* routes.c - the route table: each row's path (or prefix), methods, auth
 * level, metric label and handler. http.c finds the row and answers 404 and
 * 405 itself; nd_api_admit() asks for what the row's auth level needs before
 * the handler runs. */
#include "answer.h"
#include "api.h"
#include "audit.h"
#include "backfill.h"
#include "handlers.h"
#include "routes.h"

#include <stdio.h>

#define GET_HEAD (EVHTTP_REQ_GET | EVHTTP_REQ_HEAD)
#define DOCUMENTS_ALL (DOCUMENT_METHODS | EVHTTP_REQ_PUT | EVHTTP_REQ_PATCH | EVHTTP_REQ_POST)

/* clang-format off */
const nd_route_def nd_api_routes[] = {
    /* path, prefix, metric label, methods, Allow, auth level, handler */
    {"/healthz", false, ND_ROUTE_HEALTHZ, GET_HEAD, "GET, HEAD", ND_API_AUTH_NONE, handle_healthz},
    {"/readyz", false, ND_ROUTE_READYZ, GET_HEAD, "GET, HEAD", ND_API_AUTH_NONE, handle_readyz},
    {"/metrics", false, ND_ROUTE_METRICS, GET_HEAD, "GET, HEAD", ND_API_AUTH_READ, handle_metrics},
    {"/replica", false, ND_ROUTE_REPLICA, GET_HEAD, "GET, HEAD", ND_API_AUTH_OPERATOR,
     handle_replica},
    {"/fingerprint", false, ND_ROUTE_FINGERPRINT, EVHTTP_REQ_POST, "POST", ND_API_AUTH_READ,
     handle_fingerprint},
    {"/compare", false, ND_ROUTE_COMPARE, EVHTTP_REQ_POST, "POST", ND_API_AUTH_READ,
     handle_compare},
    {"/check-original", false, ND_ROUTE_CHECK, EVHTTP_REQ_POST, "POST", ND_API_AUTH_ACCOUNT,
     handle_check},
    {"/documents/", true, ND_ROUTE_DOCUMENTS, DOCUMENTS_ALL, DOCUMENT_ALLOW, ND_API_AUTH_ACCOUNT,
     handle_document},
    {"/audit", false, ND_ROUTE_AUDIT, GET_HEAD, "GET, HEAD", ND_API_AUTH_TOKEN, nd_workflow_audit},
    {"/events", false, ND_ROUTE_EVENTS, GET_HEAD, "GET, HEAD", ND_API_AUTH_TOKEN, handle_events},
    {"/import", false, ND_ROUTE_IMPORT, EVHTTP_REQ_POST, "POST", ND_API_AUTH_TOKEN,
     nd_backfill_handle},
    {"/webhooks", false, ND_ROUTE_WEBHOOKS, GET_HEAD, "GET, HEAD", ND_API_AUTH_OPERATOR,
     handle_webhooks},
    {"/webhooks/", true, ND_ROUTE_WEBHOOKS, EVHTTP_REQ_POST, "POST", ND_API_AUTH_OPERATOR,
     handle_webhook},
    /* The review console: a static page (its API calls carry the token). */
    {"/console/", true, ND_ROUTE_CONSOLE, GET_HEAD, "GET, HEAD", ND_API_AUTH_NONE, handle_console},
    {"/console", false, ND_ROUTE_CONSOLE, GET_HEAD, "GET, HEAD", ND_API_AUTH_NONE, handle_console},
    {NULL, false, ND_ROUTE_OTHER, 0, NULL, ND_API_AUTH_NONE, NULL},
};
/* clang-format on */

/* "read": anyone, or any valid token with --auth-all (ND_API_AUTH_READ);
 * "owner": an operator, a token of the document's account, or the client
 * that registered it. */
const nd_api_endpoint nd_api_endpoints[] = {
    {"POST", "/check-original", "read; to register or name an account: a token acting for it"},
    {"POST", "/fingerprint", "read"},
    {"POST", "/compare", "read"},
    {"GET", "/documents/{id}", "read"},
    {"DELETE", "/documents/{id}", "owner"},
    {"PUT", "/documents/{id}/policy", "owner"},
    {"PATCH", "/documents/{id}/policy", "owner"},
    {"POST", "/documents/{id}/revoke", "owner"},
    {"POST", "/documents/{id}/restore", "owner"},
    {"GET", "/documents/{id}/copies", "read"},
    {"GET", "/audit", "a token: an operator all, others their documents' and their own"},
    {"GET", "/events", "a token: an account token only its accounts' events"},
    {"POST", "/import", "an operator or a client"},
    {"GET", "/webhooks", "an operator"},
    {"POST", "/webhooks/{name}/resume", "an operator"},
    {"GET", "/replica", "an operator"},
    {"GET", "/metrics", "read"},
    {"GET", "/healthz", "anyone"},
    {"GET", "/readyz", "anyone"},
    {"GET", "/console/", "anyone (the page's own calls carry the token)"},
    {"GET", "/console", "anyone: a redirect to /console/"},
    {NULL, NULL, NULL},
};

void nd_api_usage(FILE *out)
{
    fprintf(out, "\nEndpoints (GET also answers HEAD). Who may call each once a token is\n"
                 "configured: read = anyone (a valid token with --auth-all); owner = an\n"
                 "operator, a token of the document's account, or the client that registered it.\n");
    for (const nd_api_endpoint *e = nd_api_endpoints; e->method; e++)
        fprintf(out, "  %-6s %-24s %s\n", e->method, e->path, e->who);
}

bool nd_api_admit(nd_req *r)
{
    switch (r->route->auth) {
    case ND_API_AUTH_READ: return nd_api_authorized_read(r);
    case ND_API_AUTH_TOKEN: return nd_api_authorized(r);
    case ND_API_AUTH_OPERATOR: return nd_api_operator(r);
    default: /* none; account: the handler asks, knowing the account */ return true;
    }
}
