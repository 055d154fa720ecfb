/* routes.c - the route table: each path's handler, methods and metric
 * label (http.c dispatches by it). */
#include "api.h"
#include "audit.h"
#include "backfill.h"
#include "routes.h"
#include "workflow.h"

#define GET_HEAD (EVHTTP_REQ_GET | EVHTTP_REQ_HEAD)

const nd_route_def nd_api_routes[] = {
    {"/healthz", false, ND_ROUTE_HEALTHZ, GET_HEAD, "GET, HEAD", handle_healthz},
    {"/readyz", false, ND_ROUTE_READYZ, GET_HEAD, "GET, HEAD", handle_readyz},
    {"/metrics", false, ND_ROUTE_METRICS, GET_HEAD, "GET, HEAD", handle_metrics},
    {"/replica", false, ND_ROUTE_METRICS, GET_HEAD, "GET, HEAD", handle_replica},
    {"/fingerprint", false, ND_ROUTE_FINGERPRINT, EVHTTP_REQ_POST, "POST", handle_fingerprint},
    {"/check-original", false, ND_ROUTE_CHECK, EVHTTP_REQ_POST, "POST", handle_check},
    {"/documents/", true, ND_ROUTE_DOCUMENTS,
     DOCUMENT_METHODS | EVHTTP_REQ_PUT | EVHTTP_REQ_PATCH | EVHTTP_REQ_POST, DOCUMENT_ALLOW,
     handle_document},
    {"/audit", false, ND_ROUTE_DOCUMENTS, GET_HEAD, "GET, HEAD", nd_workflow_audit},
    {"/import", false, ND_ROUTE_DOCUMENTS, EVHTTP_REQ_POST, "POST", nd_backfill_handle},
    {NULL, false, ND_ROUTE_OTHER, 0, NULL, NULL},
};
