/* conn.h - a worker's client connections: the table of open connections, the
 * connection limit, the strict framing check of every byte read, and the
 * deadline of a connection waiting for its next request (slow clients).
 *
 * libevent 2.1 neither limits connections nor bounds the time a request may
 * take to arrive (its timeout restarts at every byte: a client sending a
 * header byte a second is never cut off). Both are done here with public
 * calls only: nd_conns_attach() makes evhttp build each accepted
 * connection's bufferevent here (with a read high-water mark, so a client
 * that pipelines without reading cannot grow our input buffer) and so learn
 * of every new connection; once evhttp has wrapped it (right after its
 * accept callback) the bufferevent's callback argument is its
 * evhttp_connection, on which a close callback tells us when it goes. A
 * connection over --max-connections is answered 503 and closed at once. A
 * connection waiting for a request (just accepted, or answered) has a
 * deadline of --request-timeout; nd_conns_expire() closes the ones past it.
 * The header and body limits are evhttp's own (set by http.c); the framing
 * check (framing.h, see conn.c) refuses what libevent would frame loosely.
 *
 * Threads: an nd_conns belongs to one worker and is used on its thread only;
 * the count of open connections over all workers (*total) is atomic.
 * Memory: nd_conns is the caller's storage (_init/_finish); each tracked
 * connection's record is allocated at accept and freed when it closes
 * (never on the request path); an out-of-memory aborts (nd_die_oom). */
#ifndef ND_CONN_H
#define ND_CONN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "metrics.h"
#include "worker.h"

struct evhttp;
struct evhttp_connection;
struct bufferevent;
struct evbuffer;
struct event;
typedef struct nd_conn nd_conn;

/* Called when a tracked connection closes (before it is freed). */
typedef void (*nd_conns_closed_fn)(void *arg, struct evhttp_connection *evcon);

typedef struct nd_conns {
    /* Private to conn.c. */
    nd_worker *w;
    const nd_config *cfg;
    _Atomic unsigned *total; /* open connections, all workers */
    nd_metrics_worker *metrics;
    nd_conns_closed_fn closed;
    void *closed_arg;
    struct bufferevent **adopt; /* accepted, not yet adopted (each with a reference) */
    size_t nadopt, adopt_cap;
    struct event *adopt_ev;
    nd_conn **tab; /* evcon -> conn, open addressing, linear probing */
    size_t cap, n;
    nd_conn *waiting, *waiting_tail; /* waiting for a request, by deadline */
    struct evbuffer *scratch;        /* the framing cut's temporary */
    int64_t refused_log_ms;          /* last "connection limit" warning */
    uint64_t refused;                /* connections refused since that warning */
} nd_conns;

/* Prepares cs for worker w (its base must exist). total is the shared count
 * of open connections; closed (may be NULL) is called with closed_arg when a
 * connection goes. cfg, total and metrics are borrowed. Returns 0 or -ENOMEM;
 * nd_conns_finish() frees what was made either way. */
int nd_conns_init(nd_conns *cs, nd_worker *w, const nd_config *cfg, _Atomic unsigned *total,
                  nd_metrics_worker *metrics, nd_conns_closed_fn closed, void *closed_arg);

/* Makes http's accepted connections go through cs (evhttp_set_bevcb). */
void nd_conns_attach(nd_conns *cs, struct evhttp *http);

/* Frees cs's records; after evhttp_free() (which closes the connections). */
void nd_conns_finish(nd_conns *cs);

/* A request arrived on evcon: it has no deadline while it is served; a
 * connection not seen at accept is tracked from now on. */
void nd_conns_request_begins(nd_conns *cs, struct evhttp_connection *evcon);

/* The answer on evcon was written: its next request's deadline starts now. */
void nd_conns_request_ends(nd_conns *cs, struct evhttp_connection *evcon);

/* libevent answers a request on evcon itself (an error): counts it as served
 * and returns the framing check's refusal (enum nd_framing_why) when the
 * check refused exactly this request, else 0. NULL evcon: 0. */
int nd_conns_error_answer(nd_conns *cs, struct evhttp_connection *evcon);

/* Tick: closes the connections whose next request did not arrive in time. */
void nd_conns_expire(nd_conns *cs);

/* The read high-water mark of a connection: room for a whole request plus a
 * read's worth (evhttp keeps a body in the bufferevent until it is
 * complete), never needed more to progress. */
size_t nd_conn_input_watermark(const nd_config *cfg);

#endif
