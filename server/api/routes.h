/* routes.h - the handlers the route table (routes.c) holds, one per
 * resource file. Each answers the request exactly once. Internal to
 * server/api/. */
#ifndef ND_ROUTES_H
#define ND_ROUTES_H

#include "http.h"

/* A route's auth level (nd_route_def.auth), asked by nd_api_admit() before
 * its handler runs. With no token configured every level admits all. */
enum nd_api_auth {
    ND_API_AUTH_NONE,     /* anyone (the probes) */
    ND_API_AUTH_READ,     /* anyone, unless --auth-all: then a valid token */
    ND_API_AUTH_TOKEN,    /* a valid token; the handler narrows by role (audit, import) */
    ND_API_AUTH_ACCOUNT,  /* reads as READ, writes need the right to act for the
                           * account or document: the handler asks once it
                           * knows which (check, documents) */
    ND_API_AUTH_OPERATOR, /* an operator's token (401 without one, 403 with another) */
};

/* The methods of /documents/{id} itself (its sub-resources take others). */
#define DOCUMENT_METHODS (EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_DELETE)
#define DOCUMENT_ALLOW "GET, HEAD, DELETE"

void handle_healthz(nd_req *r);     /* probes.c */
void handle_readyz(nd_req *r);      /* probes.c */
void handle_metrics(nd_req *r);     /* probes.c */
void handle_replica(nd_req *r);     /* probes.c */
void handle_fingerprint(nd_req *r); /* fingerprint.c */
void handle_check(nd_req *r);       /* check.c */
void handle_document(nd_req *r);    /* documents.c */

#endif
