/* routes.h - what the route table (routes.c) says of a route beyond its
 * path and handler: the auth level nd_api_admit() asks for before the
 * handler runs. The handlers themselves are in handlers.h. Internal to
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

/* One endpoint as `neardupd --help` lists it (nd_api_usage()): the method
 * (GET also answers HEAD), the path with its parameters in braces, and who
 * may call it once a token is configured. The route table above dispatches
 * by path or prefix; this one names every method and path a client uses
 * (test_api checks that the two agree, test_help that it is
 * openapi.yaml's paths and methods). */
typedef struct nd_api_endpoint {
    const char *method;
    const char *path;
    const char *who;
} nd_api_endpoint;

/* Every endpoint, in --help's order; ends with a NULL method. */
extern const nd_api_endpoint nd_api_endpoints[];

#endif
