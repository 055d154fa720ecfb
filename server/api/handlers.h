/* handlers.h - the handlers the route table (routes.c) holds, one per
 * resource file. Each answers the request exactly once. The resource files
 * include this header, not routes.h: the table sits above them. Internal
 * to server/api/. */
#ifndef ND_HANDLERS_H
#define ND_HANDLERS_H

#include "http.h"

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
void handle_events(nd_req *r);      /* events.c */
void handle_webhooks(nd_req *r);    /* webhooks_api.c: GET /webhooks */
void handle_webhook(nd_req *r);     /* webhooks_api.c: POST /webhooks/{name}/resume */
void handle_compare(nd_req *r);     /* compare.c */
void handle_console(nd_req *r);     /* console.c */

#endif
