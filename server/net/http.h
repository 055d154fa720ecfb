/* http.h - the HTTP front: listening sockets, a worker per thread (worker.h)
 * serving HTTP on its own loop, routing, replies (always JSON for errors)
 * and the budget of replies not yet written.
 *
 * The modules under it: worker.h (threads, event loops, the task queue that
 * brings work done elsewhere back to a request's loop), conn.h (the
 * connection table, the connection limit, the framing check, deadlines of
 * slow clients), log.h (the access-log line), framing.h (the RFC 9112 scan).
 *
 * Threads: nd_http_start() starts one worker per configured thread; each runs
 * its own event_base and evhttp, and answers only the requests it accepted
 * (an evhttp request must be answered on its own base's thread). Work done
 * elsewhere (the store's commit thread) comes back with nd_worker_post().
 *
 * Accepting: with ND_ACCEPT_REUSEPORT each worker has its own listening
 * socket on the same port (SO_REUSEPORT; the kernel spreads connections);
 * with ND_ACCEPT_SHARED all workers accept from one socket. libevent 2.1 has
 * no public call to hand an accepted socket to another thread's evhttp, so a
 * single accept thread is not an option without its internals.
 *
 * Memory: a request's nd_req comes from its worker's free list (allocated
 * once, reused: the request path does not allocate for it) and goes back
 * when its reply is written or its connection closed.
 *
 * Every request gets exactly one reply: a handler either calls one of the
 * nd_req_reply*() functions before returning, or keeps the nd_req and calls
 * one later on the same worker thread (after a nd_worker_post() hand-off). */
#ifndef ND_HTTP_H
#define ND_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/http.h>

#include "config.h"
#include "metrics.h"
#include "worker.h"

typedef struct nd_http nd_http;
typedef struct nd_req nd_req;

typedef void (*nd_handler_fn)(nd_req *r);

/* One route: an exact path, or a prefix ("/documents/") when prefix is set. */
typedef struct nd_route_def {
    const char *path;
    bool prefix;
    enum nd_route label; /* metrics label */
    uint16_t methods;    /* EVHTTP_REQ_* bits accepted */
    const char *allow;   /* the Allow header of the 405 answer */
    unsigned auth;       /* the application's auth level (nd_http_hooks.admit) */
    nd_handler_fn handler;
} nd_route_def;

/* A request in flight. Owned by its worker; valid until its reply is sent. */
struct nd_req {
    struct evhttp_request *ev;
    nd_worker *worker; /* the worker that accepted it (worker.h) */
    const nd_route_def *route;
    enum evhttp_cmd_type method;
    const char *path;     /* request path, still percent-encoded (borrowed from ev) */
    int64_t start_ns;     /* CLOCK_MONOTONIC at dispatch */
    char rid[ND_RID_MAX]; /* request id: X-Request-Id or generated */
    nd_task task;         /* for hand-offs back to this worker */
    void *op;             /* the handler's state while the reply waits */
    const char *client;   /* the client named by its token once authorized (borrowed
                           * from the nd_auth), else NULL: the access log's "client" */
    /* That token's identity (auth.h), else NULL. */
    const struct nd_auth_identity *who;
    bool replied;
    /* Private to http.c: a reply being written, until libevent reports it
     * complete or the connection closes (drain waits for these too). */
    struct evhttp_connection *evcon;
    struct nd_req *prev, *next;
    size_t out_size;         /* its body bytes */
    size_t out_last;         /* output buffered at the last look */
    int64_t out_progress_ms; /* when that went down last (or the reply began) */
    bool paused;             /* its connection's reading was stopped */
};

/* Hooks from the application (api.c). */
typedef struct nd_http_hooks {
    const nd_route_def *routes; /* table ending with a NULL path */
    void *app;                  /* passed back by nd_http_app() */
    /* Creates per-worker state (returned by nd_worker_user(), worker.h); 0 or
     * -errno. */
    int (*worker_init)(void *app, unsigned index, void **user);
    /* Frees per-worker state; called after the worker stopped. */
    void (*worker_finish)(void *app, void *user);
    /* Asked before a route's handler (the method accepted): true lets the
     * handler run; false once it answered (401, 403). NULL: all admitted. */
    bool (*admit)(nd_req *r);
} nd_http_hooks;

/* Creates the server (no sockets, no threads yet). cfg, hooks and metrics are
 * borrowed for the server's life. Returns 0 and a new server (free with
 * nd_http_destroy()), or -errno. */
int nd_http_create(nd_http **out, const nd_config *cfg, const nd_http_hooks *hooks,
                   nd_metrics *metrics);

/* Opens the listening sockets and starts the worker threads. Logs one line
 * "listening" with the bound address and port. Returns 0, or -errno after
 * logging why (address in use, bad address, ...). */
int nd_http_start(nd_http *h);

/* The bound port (useful with port 0). */
uint16_t nd_http_port(const nd_http *h);

/* Starts draining without closing the listeners: nd_http_draining() turns
 * true (so /readyz answers 503) and every reply from now on carries
 * "Connection: close", while new connections are still accepted. Any
 * thread; idempotent. */
void nd_http_drain(nd_http *h);

/* nd_http_drain(), and each worker closes its listening socket. Any thread;
 * idempotent. */
void nd_http_stop_accepting(nd_http *h);

/* Shutdown, with the worker loops still running: from now on every new
 * request is answered 503 "shutting_down" (with Connection: close) before
 * any handler runs, and this returns once every worker has finished what
 * it was doing (a barrier; at most 10 s, then logged): no handler is
 * running afterwards, only tasks (replies of requests already in flight).
 * Main thread; once. */
void nd_http_refuse(nd_http *h);

/* Waits until no request is in flight (answered and written), at most
 * max_ms; returns true if none is. Any thread but a worker's. */
bool nd_http_wait_idle(const nd_http *h, unsigned max_ms);

/* True once nd_http_drain() or nd_http_stop_accepting() was called. */
bool nd_http_draining(const nd_http *h);

/* Requests accepted and not yet answered or whose answer is still being
 * written, over all workers. Shutdown drains until this is 0. */
uint64_t nd_http_inflight(const nd_http *h);

/* Open client connections, over all workers (at most --max-connections:
 * more are answered 503 and closed). Any thread. */
uint64_t nd_http_connections(const nd_http *h);

/* True if every worker loop ran within the last max_ms milliseconds. */
bool nd_http_loops_alive(const nd_http *h, unsigned max_ms);

/* Stops the worker loops and joins the threads (NULL is allowed). Requests
 * still waiting stay
 * queued; run nd_http_finish() after whatever completes them (the store's
 * close) to answer them. */
void nd_http_stop(nd_http *h);

/* After nd_http_stop(): runs the tasks still posted to the workers (on the
 * calling thread) so that every waiting request gets its reply. Returns how
 * many requests were still unanswered afterwards (should be 0). */
uint64_t nd_http_finish(nd_http *h);

/* Frees everything (closing connections); NULL is allowed. */
void nd_http_destroy(nd_http *h);

/* The application pointer given in the hooks. */
void *nd_http_app(const nd_req *r);

/* The configuration (borrowed). */
const nd_config *nd_req_config(const nd_req *r);

/* The request body as one contiguous block (borrowed, valid until the reply;
 * may be pulled up in place). Sets *len. Returns NULL only on -ENOMEM. */
const char *nd_req_body(nd_req *r, size_t *len);

/* A request header (borrowed), or NULL. */
const char *nd_req_header(const nd_req *r, const char *name);

/* Sends the reply: status, Content-Type, and the body, whose contents are
 * moved out of body (the caller still frees the evbuffer; NULL for none).
 * Adds X-Request-Id, and Connection: close while draining. Logs the request
 * and counts it. The nd_req is invalid afterwards. */
void nd_req_reply(nd_req *r, int status, const char *content_type, struct evbuffer *body);

/* Sends {"error":{"code":code,"message":<fmt...>}} with status (written
 * with reply.h; the message is cut at 511 bytes). An error with more
 * members is written with nd_reply_error_begin() and sent with
 * nd_req_reply(). */
void nd_req_reply_error(nd_req *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Adds a response header before the reply. */
void nd_req_add_header(nd_req *r, const char *name, const char *value);

#endif
