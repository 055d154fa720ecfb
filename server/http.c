/* http.c - listeners, worker loops, routing, replies, access log. */
#include "http.h"
#include "clock.h"
#include "fmt.h"
#include "framing.h"
#include "json.h"
#include "log.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http_struct.h> /* only for the HTTP version of a bad request */
#include <event2/keyvalq_struct.h>

#define TICK_MS 100         /* heartbeat, access-log flush, request deadlines */
#define LISTEN_BACKLOG 1024
/* Replies (issue 16, item 4). libevent reads no next request on a
 * connection until its reply is written, so a connection holds at most one
 * reply; but a client that does not read keeps it, and many such clients
 * added up without bound. A reply still unwritten after a tick stops the
 * connection's reading (its input may grow to PAUSED_INPUT, not to
 * max-body). A reply over SMALL_REPLY that would take the unwritten
 * replies of all connections over OUT_BUDGET is replaced by 503
 * "overloaded" (Retry-After: 1, Connection: close: the client's pipelined
 * requests are not worked on); while they are over half of it, a
 * connection whose reply made no progress for STALL_MS is closed. */
#define OUT_BUDGET (32u << 20)
#define SMALL_REPLY (16u << 10)
#define PAUSED_INPUT (16u << 10)
#define STALL_MS 1000

struct nd_worker {
    nd_http *h;
    unsigned index;
    pthread_t thread;
    bool running;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    int listen_fd;            /* handed to evhttp, which closes it */
    struct event *wake;       /* runs posted tasks */
    struct event *tick;       /* heartbeat, log flush */
    pthread_mutex_t qlock;
    nd_task *queue;           /* posted tasks, newest first */
    nd_task close_task;
    nd_task sync_task;        /* nd_http_refuse()'s barrier */
    nd_metrics_worker *metrics;
    void *user;
    nd_req *free_reqs;
    nd_req *unflushed;         /* replies being written (list) */
    uint64_t nrequests;
    _Atomic uint64_t inflight; /* dispatched, not answered; written by this thread only */
    _Atomic uint64_t writing;  /* answered, not yet written; idem */
    _Atomic uint64_t out_bytes; /* body bytes of those replies; idem */
    uint64_t shed;             /* connections closed for a stalled reply */
    int64_t shed_log_ms;
    _Atomic int64_t heartbeat_ms;
    /* Connections (see "connections" below); this thread only. */
    struct bufferevent **adopt; /* accepted, not yet adopted (each with a reference) */
    size_t nadopt, adopt_cap;
    struct event *adopt_ev;
    struct nd_conn **ctab;    /* evcon -> conn, open addressing, linear probing */
    size_t ctab_cap, ctab_n;
    struct nd_conn *waiting, *waiting_tail; /* waiting for a request, by deadline */
    struct evbuffer *scratch; /* framing_cut()'s temporary */
    int64_t refused_log_ms;   /* last "connection limit" warning */
    uint64_t refused;         /* connections refused since that warning */
    nd_log_batch log;          /* access-log lines not yet written */
};

struct nd_http {
    const nd_config *cfg;
    nd_http_hooks hooks;
    nd_metrics *metrics;
    unsigned nworkers;
    nd_worker *workers;
    uint16_t port;
    _Atomic bool draining;
    _Atomic unsigned nconns;  /* adopted connections, all workers */
    _Atomic bool closing;     /* listeners closed (or closing) */
    _Atomic bool refusing;    /* nd_http_refuse(): new requests get 503 */
    pthread_mutex_t sync_mu;  /* nd_http_refuse()'s barrier */
    pthread_cond_t sync_cv;
    unsigned sync_left;
};

static _Thread_local nd_worker *tls_worker;

static const char *method_name(enum evhttp_cmd_type m)
{
    switch (m) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE: return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    case EVHTTP_REQ_PATCH: return "PATCH";
    }
    return "?";
}

static void access_log(nd_worker *w, const char *rid, const char *method, const char *path,
                       int status, int64_t latency_ns, size_t in, size_t out)
{
    if (!w->h->cfg->access_log || !nd_log_enabled(ND_LOG_INFO))
        return;
    nd_log_access a = {.rid = rid, .method = method, .path = path, .status = status,
                       .latency_ns = latency_ns, .bytes_in = in, .bytes_out = out,
                       .worker = w->index};
    char line[ND_LOG_ACCESS_MAX];
    nd_log_batch_add(&w->log, line, nd_log_format_access(line, &a));
}

/* ---- tasks ---- */

void nd_worker_post(nd_worker *w, nd_task *task)
{
    pthread_mutex_lock(&w->qlock);
    bool was_empty = w->queue == NULL;
    task->next = w->queue;
    w->queue = task;
    pthread_mutex_unlock(&w->qlock);
    if (was_empty)
        event_active(w->wake, EV_READ, 0);
}

/* Runs the posted tasks, oldest first. Returns how many ran. */
static unsigned run_tasks(nd_worker *w)
{
    pthread_mutex_lock(&w->qlock);
    nd_task *t = w->queue;
    w->queue = NULL;
    pthread_mutex_unlock(&w->qlock);
    nd_task *fifo = NULL;
    while (t) {
        nd_task *next = t->next;
        t->next = fifo;
        fifo = t;
        t = next;
    }
    unsigned n = 0;
    while (fifo) {
        nd_task *next = fifo->next;
        fifo->fn(fifo);
        fifo = next;
        n++;
    }
    return n;
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    run_tasks(arg);
}

static void conn_expire(nd_worker *w);
static void out_check(nd_worker *w);

/* A connection's read high-water mark: room for a whole request plus a
 * read's worth (evhttp keeps a body in the bufferevent until it is
 * complete), never needed more to progress. */
static size_t input_watermark(const nd_config *cfg)
{
    return cfg->max_headers + cfg->max_body + 65536;
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    nd_worker *w = arg;
    atomic_store_explicit(&w->heartbeat_ms, nd_clock_ms(), memory_order_relaxed);
    nd_log_batch_flush(&w->log);
    conn_expire(w);
    out_check(w);
}

static void sync_task_fn(nd_task *t)
{
    nd_worker *w = (nd_worker *)((char *)t - offsetof(nd_worker, sync_task));
    nd_http *h = w->h;
    pthread_mutex_lock(&h->sync_mu);
    h->sync_left--;
    pthread_cond_broadcast(&h->sync_cv);
    pthread_mutex_unlock(&h->sync_mu);
}

static void close_listener_task(nd_task *t)
{
    nd_worker *w = (nd_worker *)((char *)t - offsetof(nd_worker, close_task));
    if (w->bound) {
        evhttp_del_accept_socket(w->http, w->bound);
        w->bound = NULL;
    }
}

/* ---- connections ----
 *
 * libevent 2.1 neither limits connections nor bounds the time a request may
 * take to arrive (its timeout restarts at every byte: a client sending a
 * header byte a second is never cut off). Both are done here with public
 * calls only: evhttp_set_bevcb() lets us make each accepted connection's
 * bufferevent (with a read high-water mark, so that a client pipelining
 * without reading cannot grow our input buffer) and so learn of every new
 * connection; once evhttp has wrapped it (after the accept callback, in
 * adopt_cb) the bufferevent's callback argument is its evhttp_connection,
 * on which a close callback tells us when it goes. An adopted connection
 * over --max-connections is answered 503 and closed at once. A connection
 * waiting for a request (just accepted, or answered) has a deadline of
 * --request-timeout; the tick closes the ones past it. */

typedef struct nd_conn {
    struct evhttp_connection *evcon;
    nd_worker *w;
    int64_t deadline_ms;          /* while waiting for a request */
    bool waiting;                 /* in w->waiting */
    bool guard;                   /* framing_cb: our own change of the buffer */
    struct nd_conn *prev, *next;  /* in w->waiting */
    /* Framing check (see "framing" below); in is NULL when not checked. */
    struct evbuffer *in;
    struct evbuffer_cb_entry *in_cb;
    uint64_t consumed;            /* stream offset of in's first byte */
    uint32_t served;              /* requests answered or dispatched */
    nd_framing fr;
} nd_conn;

static size_t conn_slot(const nd_worker *w, const void *evcon)
{
    uint64_t x = (uint64_t)(uintptr_t)evcon;
    return (size_t)((x >> 4) * 0x9E3779B97F4A7C15ull >> 20) & (w->ctab_cap - 1);
}

static nd_conn *conn_find(const nd_worker *w, const struct evhttp_connection *evcon)
{
    if (!w->ctab_cap || !evcon)
        return NULL;
    for (size_t i = conn_slot(w, evcon);; i = (i + 1) & (w->ctab_cap - 1)) {
        nd_conn *c = w->ctab[i];
        if (!c || c->evcon == evcon)
            return c;
    }
}

static void conn_put(nd_worker *w, nd_conn *c)
{
    size_t i = conn_slot(w, c->evcon);
    while (w->ctab[i])
        i = (i + 1) & (w->ctab_cap - 1);
    w->ctab[i] = c;
}

static void conn_insert(nd_worker *w, nd_conn *c)
{
    if ((w->ctab_n + 1) * 2 > w->ctab_cap) {
        nd_conn **old = w->ctab;
        size_t old_cap = w->ctab_cap;
        w->ctab_cap = old_cap ? old_cap * 2 : 1024;
        w->ctab = calloc(w->ctab_cap, sizeof(*w->ctab));
        if (!w->ctab)
            nd_die_oom("conn_insert");
        for (size_t i = 0; i < old_cap; i++)
            if (old[i])
                conn_put(w, old[i]);
        free(old);
    }
    conn_put(w, c);
    w->ctab_n++;
}

/* Removes c from the table (backward-shift deletion keeps probes intact). */
static void conn_remove(nd_worker *w, nd_conn *c)
{
    size_t mask = w->ctab_cap - 1, i = conn_slot(w, c->evcon);
    while (w->ctab[i] != c)
        i = (i + 1) & mask;
    for (size_t j = (i + 1) & mask; w->ctab[j]; j = (j + 1) & mask) {
        size_t home = conn_slot(w, w->ctab[j]->evcon);
        /* Move ctab[j] into the hole at i unless its home lies in (i, j]. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            w->ctab[i] = w->ctab[j];
            i = j;
        }
    }
    w->ctab[i] = NULL;
    w->ctab_n--;
}

static void conn_unlist(nd_worker *w, nd_conn *c)
{
    if (!c->waiting)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        w->waiting = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        w->waiting_tail = c->prev;
    c->prev = c->next = NULL;
    c->waiting = false;
}

/* c waits for its next request from now on (the list stays sorted: every
 * deadline is now + the same timeout). */
static void conn_wait(nd_worker *w, nd_conn *c)
{
    conn_unlist(w, c);
    c->deadline_ms = nd_clock_ms() + (int64_t)w->h->cfg->request_timeout_s * 1000;
    c->prev = w->waiting_tail;
    c->next = NULL;
    if (w->waiting_tail)
        w->waiting_tail->next = c;
    else
        w->waiting = c;
    w->waiting_tail = c;
    c->waiting = true;
}

/* Forgets c (the connection is gone or about to be freed). */
static void conn_forget(nd_worker *w, nd_conn *c)
{
    if (c->in_cb)
        evbuffer_remove_cb_entry(c->in, c->in_cb);
    conn_unlist(w, c);
    conn_remove(w, c);
    atomic_fetch_sub_explicit(&w->h->nconns, 1, memory_order_relaxed);
    free(c);
}

static void on_close(struct evhttp_connection *evcon, void *arg);
static void make_rid(nd_worker *w, const struct evkeyvalq *ih, char *rid);

/* ---- framing ----
 *
 * libevent 2.1 frames requests more leniently than RFC 9112 (framing.h
 * lists how), and a proxy in front that reads a request's boundaries
 * otherwise can smuggle a request past it. So every byte a connection
 * reads passes nd_framing_scan() first: an evbuffer callback on the
 * bufferevent's input buffer runs inside the read, before libevent's read
 * callback parses anything. Deletions (libevent consuming the buffer) only
 * advance c->consumed. At the first refusal the stream is cut at the start
 * of the offending line, which libevent has not consumed (it consumes whole
 * lines, and bodies by their length, on which both agree up to there), and
 * "!\r\n" is put in its place: a line no libevent state accepts (request
 * line, header, chunk size, trailer). libevent then fails the request, in
 * order after any pipelined request before it, and its error reply comes
 * to our evhttp_send_error(), which answers with the scanner's status and
 * reason and closes the connection. Bytes arriving later are dropped. */

/* Cuts in down to its first keep bytes (evbuffers only shrink at the front:
 * the kept part is moved aside and put back). */
static void framing_cut(nd_conn *c, struct evbuffer *in, size_t keep)
{
    size_t len = evbuffer_get_length(in);
    if (keep >= len)
        return;
    c->guard = true;
    if (keep > 0)
        evbuffer_remove_buffer(in, c->w->scratch, keep);
    evbuffer_drain(in, evbuffer_get_length(in));
    if (keep > 0)
        evbuffer_prepend_buffer(in, c->w->scratch);
    c->guard = false;
}

static void framing_refuse(nd_conn *c, struct evbuffer *in)
{
    uint64_t at = c->fr.line_start;
    size_t keep = at > c->consumed ? (size_t)(at - c->consumed) : 0;
    framing_cut(c, in, keep);
    c->guard = true;
    evbuffer_add(in, "!\r\n", 3);
    c->guard = false;
}

static void framing_cb(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
    nd_conn *c = arg;
    if (c->guard)
        return;
    c->consumed += info->n_deleted;
    if (!info->n_added)
        return;
    size_t len = evbuffer_get_length(in);
    size_t left = info->n_added;
    if (nd_framing_refused(&c->fr)) { /* nothing after a refusal reaches libevent */
        framing_cut(c, in, len - left);
        return;
    }
    left -= nd_framing_skip(&c->fr, left); /* a body: no need to look */
    if (!left)
        return;
    struct evbuffer_ptr ptr;
    if (evbuffer_ptr_set(in, &ptr, len - left, EVBUFFER_PTR_SET) < 0)
        return;
    while (left) {
        struct evbuffer_iovec vec[8];
        int nv = evbuffer_peek(in, (ev_ssize_t)left, &ptr, vec, 8);
        if (nv <= 0)
            return;
        for (int k = 0; k < nv && k < 8 && left; k++) {
            size_t take = vec[k].iov_len < left ? vec[k].iov_len : left;
            if (nd_framing_scan(&c->fr, vec[k].iov_base, take) != ND_FR_OK) {
                framing_refuse(c, in);
                return;
            }
            left -= take;
            evbuffer_ptr_set(in, &ptr, take, EVBUFFER_PTR_ADD);
        }
    }
}

/* Starts tracking evcon; it waits for a request when waiting is set. With
 * bev (evcon's, seen from the first byte), its framing is checked. */
static nd_conn *conn_track(nd_worker *w, struct evhttp_connection *evcon, bool waiting,
                           struct bufferevent *bev)
{
    nd_conn *c = calloc(1, sizeof(*c));
    if (!c)
        nd_die_oom("conn_track");
    c->evcon = evcon;
    c->w = w;
    conn_insert(w, c);
    atomic_fetch_add_explicit(&w->h->nconns, 1, memory_order_relaxed);
    evhttp_connection_set_closecb(evcon, on_close, c);
    if (waiting)
        conn_wait(w, c);
    if (bev) {
        nd_framing_init(&c->fr, w->h->cfg->max_body);
        c->in = bufferevent_get_input(bev);
        c->in_cb = evbuffer_add_cb(c->in, framing_cb, c);
        if (!c->in_cb)
            nd_die_oom("conn_track");
        size_t have = evbuffer_get_length(c->in); /* read before we were here */
        if (have) {
            struct evbuffer_cb_info info = {.orig_size = 0, .n_added = have, .n_deleted = 0};
            framing_cb(c->in, &info, c);
        }
    }
    return c;
}

/* Over the limit: a 503 straight to the socket (best effort: it is small
 * and the socket new), then the connection is freed. */
static void conn_refuse(nd_worker *w, struct evhttp_connection *evcon, struct bufferevent *bev)
{
    char msg[400], body[160], rid[40];
    unsigned cap = w->h->cfg->max_connections;
    make_rid(w, NULL, rid);
    int blen = snprintf(body, sizeof(body),
                        "{\"error\":{\"code\":\"too_many_connections\",\"message\":\"the server "
                        "holds its limit of %u connections; retry later\"}}\n", cap);
    int n = snprintf(msg, sizeof(msg),
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Content-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n"
                     "X-Request-Id: %s\r\n\r\n%s",
                     blen, rid, body);
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd >= 0 && n > 0)
        (void)!send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    evhttp_connection_free(evcon);
    nd_metrics_request(w->metrics, ND_ROUTE_OTHER, 503, 0, 0, (uint64_t)n);
    w->refused++;
    int64_t now = nd_clock_ms();
    if (now - w->refused_log_ms >= 1000) {
        char fields[96];
        snprintf(fields, sizeof(fields), ",\"max_connections\":%u,\"refused\":%llu", cap,
                 (unsigned long long)w->refused);
        nd_log_fields(ND_LOG_WARN, fields, "connection limit reached: refusing new connections");
        w->refused_log_ms = now;
        w->refused = 0;
    }
}

/* evhttp_set_bevcb(): makes the bufferevent of each accepted connection. */
static struct bufferevent *make_bev(struct event_base *base, void *arg)
{
    nd_worker *w = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!bev)
        return NULL; /* evhttp makes its own; the connection is tracked at dispatch */
    bufferevent_setwatermark(bev, EV_READ, 0, input_watermark(w->h->cfg));
    if (w->nadopt == w->adopt_cap) {
        size_t cap = w->adopt_cap ? w->adopt_cap * 2 : 64;
        struct bufferevent **a = realloc(w->adopt, cap * sizeof(*a));
        if (!a)
            nd_die_oom("make_bev");
        w->adopt = a;
        w->adopt_cap = cap;
    }
    bufferevent_incref(bev); /* so that it outlives adopt_cb even if evhttp frees it */
    w->adopt[w->nadopt++] = bev;
    if (w->nadopt == 1)
        event_active(w->adopt_ev, EV_READ, 0);
    return bev;
}

/* Runs right after the accept callback: tracks (or refuses) each new
 * connection. */
static void adopt_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    nd_worker *w = arg;
    unsigned cap = w->h->cfg->max_connections;
    for (size_t i = 0; i < w->nadopt; i++) {
        struct bufferevent *bev = w->adopt[i];
        bufferevent_data_cb rcb, wcb;
        bufferevent_event_cb ecb;
        void *cbarg = NULL;
        bufferevent_getcb(bev, &rcb, &wcb, &ecb, &cbarg);
        struct evhttp_connection *evcon = cbarg;
        /* Still evhttp's (it may have freed it already: callbacks cleared). */
        if (ecb && evcon && evhttp_connection_get_bufferevent(evcon) == bev &&
            !conn_find(w, evcon)) {
            if (atomic_load_explicit(&w->h->nconns, memory_order_relaxed) >= cap)
                conn_refuse(w, evcon, bev);
            else
                conn_track(w, evcon, true, bev);
        }
        bufferevent_decref(bev);
    }
    w->nadopt = 0;
}

/* Closes the connections whose request did not arrive in time. */
static void conn_expire(nd_worker *w)
{
    int64_t now = nd_clock_ms();
    while (w->waiting && w->waiting->deadline_ms <= now) {
        nd_conn *c = w->waiting;
        struct evhttp_connection *evcon = c->evcon;
        conn_forget(w, c);
        evhttp_connection_set_closecb(evcon, NULL, NULL);
        evhttp_connection_free(evcon);
    }
}

uint64_t nd_http_connections(const nd_http *h)
{
    return atomic_load_explicit(&h->nconns, memory_order_relaxed);
}

/* ---- requests ---- */

static nd_req *req_get(nd_worker *w)
{
    nd_req *r = w->free_reqs;
    if (r) {
        w->free_reqs = r->next;
    } else {
        r = malloc(sizeof(*r));
        if (!r)
            nd_die_oom("req_get");
    }
    memset(r, 0, sizeof(*r));
    r->worker = w;
    return r;
}

static void req_put(nd_worker *w, nd_req *r)
{
    r->next = w->free_reqs;
    w->free_reqs = r;
}

static inline void counter_add(_Atomic uint64_t *c, int64_t d)
{
    /* One writer (the worker's thread): no locked instruction needed. */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + (uint64_t)d,
                          memory_order_relaxed);
}

/* Body bytes of the replies not yet written, all workers. */
static uint64_t out_total(const nd_http *h)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < h->nworkers; i++)
        n += atomic_load_explicit(&h->workers[i].out_bytes, memory_order_relaxed);
    return n;
}

/* Tick: stops reading on connections whose reply is still unwritten, and
 * while over OUT_BUDGET closes those whose reply made no progress for
 * STALL_MS (see OUT_BUDGET). */
static void out_check(nd_worker *w)
{
    if (!w->unflushed)
        return;
    int64_t now = nd_clock_ms();
    bool over = out_total(w->h) > OUT_BUDGET / 2;
    for (nd_req *r = w->unflushed, *next; r; r = next) {
        next = r->next;
        struct bufferevent *bev = evhttp_connection_get_bufferevent(r->evcon);
        if (!bev)
            continue;
        size_t len = evbuffer_get_length(bufferevent_get_output(bev));
        if (len < r->out_last) {
            r->out_last = len;
            r->out_progress_ms = now;
        }
        if (!r->paused && len > 0) {
            bufferevent_setwatermark(bev, EV_READ, 0, PAUSED_INPUT);
            r->paused = true;
        }
        if (over && len > 0 && now - r->out_progress_ms >= STALL_MS) {
            /* An abortive close (RST): the kernel drops what it still holds
             * of the reply too, instead of keeping it for a client that does
             * not read (a graceful close queues the FIN behind it). */
            evutil_socket_t fd = bufferevent_getfd(bev);
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            if (fd >= 0)
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            w->shed++;
            evhttp_connection_free(r->evcon); /* on_close: writing_done(r) */
        }
    }
    if (w->shed && now - w->shed_log_ms >= 1000) {
        char fields[96];
        snprintf(fields, sizeof(fields), ",\"closed\":%llu,\"budget\":%u",
                 (unsigned long long)w->shed, OUT_BUDGET);
        nd_log_fields(ND_LOG_WARN, fields,
                      "unwritten replies over their budget: closed connections that do not "
                      "read");
        w->shed_log_ms = now;
        w->shed = 0;
    }
}

/* The reply of r has been written, or its connection is gone. */
static void writing_done(nd_worker *w, nd_req *r)
{
    counter_add(&w->out_bytes, -(int64_t)r->out_size);
    if (r->prev)
        r->prev->next = r->next;
    else
        w->unflushed = r->next;
    if (r->next)
        r->next->prev = r->prev;
    counter_add(&w->writing, -1);
    req_put(w, r);
}

static void on_complete(struct evhttp_request *ev, void *arg)
{
    (void)ev;
    nd_req *r = arg;
    nd_worker *w = r->worker;
    nd_conn *c = conn_find(w, r->evcon);
    if (c) /* the next request's deadline starts now */
        conn_wait(w, c);
    if (r->paused) { /* written: read again */
        struct bufferevent *bev = evhttp_connection_get_bufferevent(r->evcon);
        if (bev)
            bufferevent_setwatermark(bev, EV_READ, 0, input_watermark(w->h->cfg));
    }
    writing_done(w, r);
}

/* A connection closes: a reply still being written on it never completes.
 * (libevent serves one request at a time per connection, so at most one.) */
static void on_close(struct evhttp_connection *evcon, void *arg)
{
    nd_conn *c = arg;
    nd_worker *w = c->w;
    evhttp_connection_set_closecb(evcon, NULL, NULL); /* once only */
    conn_forget(w, c);
    for (nd_req *r = w->unflushed; r; r = r->next) {
        if (r->evcon == evcon) {
            writing_done(w, r);
            return;
        }
    }
}

void *nd_worker_user(const nd_worker *w)
{
    return w->user;
}

void *nd_http_app(const nd_req *r)
{
    return r->worker->h->hooks.app;
}

const nd_config *nd_req_config(const nd_req *r)
{
    return r->worker->h->cfg;
}

const char *nd_req_body(nd_req *r, size_t *len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(r->ev);
    *len = evbuffer_get_length(in);
    if (*len == 0)
        return "";
    return (const char *)evbuffer_pullup(in, -1);
}

const char *nd_req_header(const nd_req *r, const char *name)
{
    return evhttp_find_header(evhttp_request_get_input_headers(r->ev), name);
}

void nd_req_add_header(nd_req *r, const char *name, const char *value)
{
    evhttp_add_header(evhttp_request_get_output_headers(r->ev), name, value);
}

void nd_req_reply(nd_req *r, int status, const char *content_type, struct evbuffer *body)
{
    nd_worker *w = r->worker;
    assert(!r->replied);
    r->replied = true;
    struct evkeyvalq *oh = evhttp_request_get_output_headers(r->ev);
    if (body && evbuffer_get_length(body) > SMALL_REPLY &&
        out_total(w->h) + evbuffer_get_length(body) > OUT_BUDGET) {
        /* Too many replies unwritten (clients that do not read): shed. */
        evhttp_clear_headers(oh);
        evbuffer_drain(body, evbuffer_get_length(body));
        evbuffer_add_printf(body, "{\"error\":{\"code\":\"overloaded\",\"message\":\"the "
                                  "server holds too many unread replies; retry\"}}\n");
        evhttp_add_header(oh, "Retry-After", "1");
        evhttp_add_header(oh, "Connection", "close");
        status = 503;
        content_type = "application/json";
    }
    if (content_type)
        evhttp_add_header(oh, "Content-Type", content_type);
    evhttp_add_header(oh, "X-Request-Id", r->rid);
    if (atomic_load_explicit(&w->h->draining, memory_order_relaxed) &&
        !evhttp_find_header(oh, "Connection"))
        evhttp_add_header(oh, "Connection", "close");
    size_t in = evbuffer_get_length(evhttp_request_get_input_buffer(r->ev));
    size_t out = body ? evbuffer_get_length(body) : 0;
    if (r->method == EVHTTP_REQ_HEAD && body) {
        /* The length a GET would have, and no body (libevent 2.1 would send
         * it and no Content-Length). */
        char cl[ND_FMT_U64_MAX + 1];
        cl[nd_fmt_u64(cl, out)] = 0;
        evhttp_add_header(oh, "Content-Length", cl);
        evbuffer_drain(body, out);
        out = 0;
    }
    int64_t latency = nd_clock_ns() - r->start_ns;
    /* Log before sending: the path belongs to the request, freed by the send. */
    access_log(w, r->rid, method_name(r->method), r->path, status, latency, in, out);
    nd_metrics_request(w->metrics, r->route ? r->route->label : ND_ROUTE_OTHER, status,
                       (uint64_t)(latency / 1000), in, out);
    counter_add(&w->inflight, -1);
    r->evcon = evhttp_request_get_connection(r->ev);
    if (r->evcon) {
        /* Track the write until it completes (or the connection closes). */
        r->prev = NULL;
        r->next = w->unflushed;
        if (r->next)
            r->next->prev = r;
        w->unflushed = r;
        counter_add(&w->writing, 1);
        r->out_size = out;
        counter_add(&w->out_bytes, (int64_t)out);
        r->out_last = SIZE_MAX;
        r->out_progress_ms = nd_clock_ms();
        evhttp_request_set_on_complete_cb(r->ev, on_complete, r);
        evhttp_send_reply(r->ev, status, NULL, body);
    } else {
        /* The client left while we worked: libevent frees the request. */
        evhttp_send_reply(r->ev, status, NULL, body);
        req_put(w, r);
    }
}

static int dump_to_evbuffer(const char *buf, size_t size, void *data)
{
    return evbuffer_add(data, buf, size);
}

void nd_req_reply_json(nd_req *r, int status, json_t *body)
{
    struct evbuffer *out = evbuffer_new();
    if (!out || json_dump_callback(body, dump_to_evbuffer, out, JSON_COMPACT) < 0)
        nd_die_oom("nd_req_reply_json");
    evbuffer_add(out, "\n", 1);
    json_decref(body);
    nd_req_reply(r, status, "application/json", out);
    evbuffer_free(out);
}

void nd_req_reply_error(nd_req *r, int status, const char *code, json_t *extra,
                        const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *e = json_object();
    json_object_set_new(e, "code", json_string(code));
    json_object_set_new(e, "message", json_string(msg));
    if (extra) {
        json_object_update(e, extra);
        json_decref(extra);
    }
    json_t *body = json_object();
    json_object_set_new(body, "error", e);
    nd_req_reply_json(r, status, body);
}

static void reply_not_found(nd_req *r)
{
    nd_req_reply_error(r, 404, "not_found", NULL, "no such endpoint; see proto/openapi.yaml");
}

static void reply_method(nd_req *r, const nd_route_def *route)
{
    nd_req_add_header(r, "Allow", route->allow);
    nd_req_reply_error(r, 405, "method_not_allowed", NULL, "%s is not allowed here; allowed: %s",
                       method_name(r->method), route->allow);
}

/* The request id: the client's X-Request-Id if it is sane, else
 * generated. rid has 40 bytes. */
static void make_rid(nd_worker *w, const struct evkeyvalq *ih, char *rid)
{
    const char *given = ih ? evhttp_find_header(ih, "X-Request-Id") : NULL;
    if (given) {
        size_t n = strlen(given);
        bool ok = n > 0 && n < 40;
        for (size_t i = 0; ok && i < n; i++) {
            char c = given[i];
            ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 c == '-' || c == '_' || c == '.' || c == ':';
        }
        if (ok) {
            memcpy(rid, given, n + 1);
            return;
        }
    }
    /* "<worker>-<counter>", both in hex. */
    static const char hex[] = "0123456789abcdef";
    char tmp[40];
    size_t n = 0, pos = 0;
    uint64_t v = ++w->nrequests;
    do {
        tmp[n++] = hex[v & 15];
        v >>= 4;
    } while (v);
    unsigned wi = w->index;
    char wtmp[8];
    size_t wn = 0;
    do {
        wtmp[wn++] = hex[wi & 15];
        wi >>= 4;
    } while (wi);
    while (wn)
        rid[pos++] = wtmp[--wn];
    rid[pos++] = '-';
    while (n)
        rid[pos++] = tmp[--n];
    rid[pos] = 0;
}

static void set_rid(nd_req *r, nd_worker *w)
{
    make_rid(w, evhttp_request_get_input_headers(r->ev), r->rid);
}

/* True when two Content-Length headers disagree: libevent framed the body by
 * the first, another reader (a proxy) may have used the other. */
static bool conflicting_length(struct evhttp_request *ev)
{
    const char *first = NULL;
    const struct evkeyvalq *ih = evhttp_request_get_input_headers(ev);
    for (const struct evkeyval *kv = ih->tqh_first; kv; kv = kv->next.tqe_next) {
        if (strcasecmp(kv->key, "Content-Length") != 0)
            continue;
        if (first && strcmp(first, kv->value) != 0)
            return true;
        first = kv->value;
    }
    return false;
}

static void dispatch(struct evhttp_request *ev, void *arg)
{
    nd_worker *w = arg;
    nd_req *r = req_get(w);
    r->ev = ev;
    r->start_ns = nd_clock_ns();
    r->method = evhttp_request_get_command(ev);
    counter_add(&w->inflight, 1);
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(ev);
    r->path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!r->path)
        r->path = "";
    struct evhttp_connection *evcon = evhttp_request_get_connection(ev);
    nd_conn *c = conn_find(w, evcon);
    if (c)
        conn_unlist(w, c); /* no deadline while the request is served */
    else if (evcon)
        c = conn_track(w, evcon, false, NULL); /* not seen at accept (out of memory there) */
    if (c)
        c->served++;
    set_rid(r, w);
    if (atomic_load_explicit(&w->h->refusing, memory_order_relaxed)) {
        /* Shutting down: the store may be closing; nothing may reach it. */
        nd_req_add_header(r, "Retry-After", "1");
        nd_req_reply_error(r, 503, "shutting_down", NULL, "the server is stopping; retry");
        return;
    }
    const nd_route_def *route = NULL;
    for (const nd_route_def *d = w->h->hooks.routes; d->path; d++) {
        if (d->prefix ? strncmp(r->path, d->path, strlen(d->path)) == 0
                      : strcmp(r->path, d->path) == 0) {
            route = d;
            break;
        }
    }
    r->route = route;
    if (conflicting_length(ev)) { /* the framing is in doubt: answer and close */
        nd_req_add_header(r, "Connection", "close");
        nd_req_reply_error(r, 400, "bad_request", NULL, "conflicting Content-Length headers");
    } else if (!route)
        reply_not_found(r);
    else if (!(route->methods & r->method))
        reply_method(r, route);
    else
        route->handler(r);
}

/* libevent 2.1 answers some requests itself, before any callback of ours runs:
 * a body over evhttp_set_max_body_size() (413), headers over the limit, a
 * malformed request line (400), "Expect" it does not know (417). It does so
 * with evhttp_send_error(), whose body is a fixed HTML page. To keep every
 * error JSON, neardupd defines evhttp_send_error() itself: the dynamic linker
 * binds libevent's own calls to this definition (symbol interposition), and
 * the answer keeps libevent's status with our JSON error body. neardupd never
 * calls it; tests/integration/test_errors.py checks the 413 and 400 bodies,
 * so a libevent built without interposition (-Bsymbolic) would be noticed.
 * A request the framing check refused (see "framing") arrives here too, as
 * libevent's 400 or 413: it gets the check's status and reason instead.
 * Every such answer has an X-Request-Id and closes the connection. */
void evhttp_send_error(struct evhttp_request *req, int error, const char *reason)
{
    nd_worker *w = tls_worker;
    const char *code = "bad_request";
    const char *msg = "malformed HTTP request";
    char buf[256];
    const struct evkeyvalq *ih = evhttp_request_get_input_headers(req);
    if (error == 413) {
        bool body = evhttp_find_header(ih, "Content-Length") ||
                    evhttp_find_header(ih, "Transfer-Encoding");
        code = "body_too_large";
        if (evhttp_find_header(ih, "Transfer-Encoding")) /* libevent says 413 for both */
            snprintf(buf, sizeof(buf),
                     "the chunked body is malformed or exceeds the limit of %zu bytes",
                     w ? w->h->cfg->max_body : (size_t)0);
        else if (body)
            snprintf(buf, sizeof(buf), "the request body exceeds the limit of %zu bytes",
                     w ? w->h->cfg->max_body : (size_t)0);
        else
            snprintf(buf, sizeof(buf), "the request headers exceed the limit of %zu bytes",
                     w ? w->h->cfg->max_headers : (size_t)0);
        msg = buf;
    } else if (error == 400) {
        snprintf(buf, sizeof(buf), "malformed HTTP request (or headers over %zu bytes)",
                 w ? w->h->cfg->max_headers : (size_t)0);
        msg = buf;
    } else if (error == 501) {
        code = "not_implemented";
        msg = "unknown HTTP method";
    } else if (error == 417) {
        code = "expectation_failed";
        msg = "only 'Expect: 100-continue' is supported"; /* no quote: not escaped */
    } else if (error == 404) {
        code = "not_found";
        msg = "no such endpoint";
    } else if (error == 405) {
        code = "method_not_allowed";
        msg = "method not allowed";
    } else if (error >= 500) {
        code = "internal";
        msg = "internal error";
    }
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    nd_conn *c = w && evcon ? conn_find(w, evcon) : NULL;
    if (c && c->in && nd_framing_refused(&c->fr) && c->served + 1 == c->fr.heads &&
        nd_framing_status(c->fr.why)) {
        error = nd_framing_status(c->fr.why);
        code = nd_framing_code(c->fr.why);
        msg = nd_framing_message(c->fr.why);
        reason = NULL;
        if (error == 413) {
            snprintf(buf, sizeof(buf), "%s of %zu bytes", msg, w->h->cfg->max_body);
            msg = buf;
        }
    }
    if (c)
        c->served++;
    char rid[40];
    if (w)
        make_rid(w, ih, rid);
    else
        memcpy(rid, "-", 2);
    struct evbuffer *b = evbuffer_new();
    if (!b)
        nd_die_oom("evhttp_send_error");
    evbuffer_add_printf(b, "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}\n", code, msg);
    /* A request line that did not parse leaves the version at 0.0, which
     * libevent's own page fixes up the same way. */
    if (req->major == 0 && req->minor == 0)
        req->major = 1, req->minor = 1;
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    evhttp_clear_headers(oh);
    evhttp_add_header(oh, "Content-Type", "application/json");
    evhttp_add_header(oh, "Connection", "close");
    evhttp_add_header(oh, "X-Request-Id", rid);
    size_t out = evbuffer_get_length(b);
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        char cl[24];
        snprintf(cl, sizeof(cl), "%zu", out);
        evhttp_add_header(oh, "Content-Length", cl);
        evbuffer_drain(b, out);
        out = 0;
    }
    if (w) {
        access_log(w, rid, method_name(evhttp_request_get_command(req)),
                   evhttp_request_get_uri(req), error, 0, 0, out);
        nd_metrics_request(w->metrics, ND_ROUTE_OTHER, error, 0, 0, out);
    }
    evhttp_send_reply(req, error, reason, b);
    evbuffer_free(b);
}

/* ---- listeners ---- */

static int open_listener(const nd_config *cfg, uint16_t port, bool reuseport, bool do_listen,
                         uint16_t *bound)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%u", port);
    int rc = getaddrinfo(cfg->listen_host, portstr, &hints, &ai);
    if (rc != 0) {
        nd_log(ND_LOG_ERROR, "cannot resolve listen address %s: %s", cfg->listen_host,
               gai_strerror(rc));
        return -EINVAL;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
        (do_listen && listen(fd, LISTEN_BACKLOG) < 0)) {
        rc = -errno;
        nd_log(ND_LOG_ERROR, "cannot listen on %s:%u: %s", cfg->listen_host, port, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return rc;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

static int open_listeners(nd_http *h)
{
    bool reuse = h->cfg->accept_mode == ND_ACCEPT_REUSEPORT;
    uint16_t port = h->cfg->listen_port;
    if (reuse) {
        /* SO_REUSEPORT would let a second server (same user) share the port
         * and half the traffic silently. A plain bind first fails if anyone
         * listens there, and picks the port when 0 was asked for. */
        int probe = open_listener(h->cfg, port, false, false, &port);
        if (probe < 0)
            return probe;
        close(probe);
    }
    for (unsigned i = 0; i < h->nworkers; i++) {
        int fd;
        if (i > 0 && !reuse)
            fd = fcntl(h->workers[0].listen_fd, F_DUPFD_CLOEXEC, 0);
        else
            fd = open_listener(h->cfg, port, reuse, true, &port);
        if (fd < 0)
            return fd;
        h->workers[i].listen_fd = fd;
    }
    h->port = port;
    return 0;
}

/* ---- workers ---- */

/* A worker's event base. With SO_REUSEPORT (the default) no descriptor a
 * worker watches is a dup() of another, so epoll's changelist is safe: it
 * folds the disable/enable pairs that evhttp makes around every request into
 * at most one epoll_ctl per loop turn (libevent's documented caveat is dup'ed
 * descriptors, which the shared-listener mode has). Returns NULL on failure. */
static struct event_base *new_base(const nd_config *cfg)
{
    struct event_config *ec = event_config_new();
    if (!ec)
        return NULL;
    if (cfg->accept_mode == ND_ACCEPT_REUSEPORT)
        event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    struct event_base *base = event_base_new_with_config(ec);
    event_config_free(ec);
    return base;
}

static int worker_init(nd_http *h, nd_worker *w, unsigned index)
{
    const nd_config *cfg = h->cfg;
    w->h = h;
    w->index = index;
    w->listen_fd = -1;
    w->metrics = nd_metrics_worker_get(h->metrics, index);
    pthread_mutex_init(&w->qlock, NULL);
    w->close_task.fn = close_listener_task;
    w->sync_task.fn = sync_task_fn;
    w->base = new_base(cfg);
    if (!w->base)
        return -ENOMEM;
    w->http = evhttp_new(w->base);
    w->wake = event_new(w->base, -1, EV_PERSIST, wake_cb, w);
    w->tick = event_new(w->base, -1, EV_PERSIST, tick_cb, w);
    w->adopt_ev = event_new(w->base, -1, 0, adopt_cb, w);
    w->scratch = evbuffer_new();
    if (!w->http || !w->wake || !w->tick || !w->adopt_ev || !w->scratch)
        return -ENOMEM;
    struct timeval tv = {0, TICK_MS * 1000};
    event_add(w->tick, &tv);
    atomic_store(&w->heartbeat_ms, nd_clock_ms());
    evhttp_set_gencb(w->http, dispatch, w);
    evhttp_set_bevcb(w->http, make_bev, w);
    evhttp_set_allowed_methods(w->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_max_body_size(w->http, (ev_ssize_t)cfg->max_body);
    evhttp_set_max_headers_size(w->http, (ev_ssize_t)cfg->max_headers);
    evhttp_set_timeout(w->http, (int)cfg->timeout_s);
    /* Over-limit bodies are read and dropped before the 413, so that a client
     * still sending sees the answer instead of a reset. */
    evhttp_set_flags(w->http, EVHTTP_SERVER_LINGERING_CLOSE);
    if (h->hooks.worker_init)
        return h->hooks.worker_init(h->hooks.app, index, &w->user);
    return 0;
}

static void *worker_main(void *arg)
{
    nd_worker *w = arg;
    char name[16]; /* the kernel's limit, NUL included: top -H, perf, gdb */
    snprintf(name, sizeof(name), "nd-worker-%u", w->index);
    pthread_setname_np(pthread_self(), name);
    tls_worker = w;
    event_base_loop(w->base, EVLOOP_NO_EXIT_ON_EMPTY);
    nd_log_batch_flush(&w->log);
    return NULL;
}

int nd_http_create(nd_http **out, const nd_config *cfg, const nd_http_hooks *hooks,
                   nd_metrics *metrics)
{
    nd_http *h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->cfg = cfg;
    h->hooks = *hooks;
    h->metrics = metrics;
    h->nworkers = cfg->threads;
    pthread_mutex_init(&h->sync_mu, NULL);
    pthread_cond_init(&h->sync_cv, NULL);
    void *mem = NULL;
    if (posix_memalign(&mem, 64, sizeof(nd_worker) * h->nworkers) != 0)
        mem = NULL;
    h->workers = mem;
    if (!h->workers) {
        free(h);
        return -ENOMEM;
    }
    memset(h->workers, 0, sizeof(nd_worker) * h->nworkers);
    for (unsigned i = 0; i < h->nworkers; i++) {
        int rc = worker_init(h, &h->workers[i], i);
        if (rc < 0) {
            h->nworkers = i + 1;
            nd_http_destroy(h);
            return rc;
        }
    }
    *out = h;
    return 0;
}

int nd_http_start(nd_http *h)
{
    int rc = open_listeners(h);
    if (rc < 0)
        return rc;
    for (unsigned i = 0; i < h->nworkers; i++) {
        nd_worker *w = &h->workers[i];
        w->bound = evhttp_accept_socket_with_handle(w->http, w->listen_fd);
        if (!w->bound) {
            nd_log(ND_LOG_ERROR, "evhttp cannot accept on its socket");
            return -EIO;
        }
        w->listen_fd = -1; /* evhttp owns and closes it now */
    }
    for (unsigned i = 0; i < h->nworkers; i++) {
        nd_worker *w = &h->workers[i];
        rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            nd_log(ND_LOG_ERROR, "cannot start worker thread: %s", strerror(rc));
            return -rc;
        }
        w->running = true;
    }
    char fields[400];
    size_t pos = (size_t)snprintf(fields, sizeof(fields), ",\"host\":");
    nd_json_escape(fields, sizeof(fields) - 100, &pos, h->cfg->listen_host,
                       strlen(h->cfg->listen_host));
    snprintf(fields + pos, sizeof(fields) - pos, ",\"port\":%u,\"threads\":%u,\"accept\":\"%s\"",
             h->port, h->nworkers,
             h->cfg->accept_mode == ND_ACCEPT_SHARED ? "shared" : "reuseport");
    nd_log_fields(ND_LOG_INFO, fields, "listening");
    return 0;
}

uint16_t nd_http_port(const nd_http *h)
{
    return h->port;
}

void nd_http_drain(nd_http *h)
{
    atomic_store(&h->draining, true);
}

void nd_http_stop_accepting(nd_http *h)
{
    atomic_store(&h->draining, true);
    if (atomic_exchange(&h->closing, true))
        return;
    for (unsigned i = 0; i < h->nworkers; i++)
        if (h->workers[i].running)
            nd_worker_post(&h->workers[i], &h->workers[i].close_task);
}

void nd_http_refuse(nd_http *h)
{
    atomic_store(&h->draining, true);
    atomic_store(&h->refusing, true);
    unsigned n = 0;
    pthread_mutex_lock(&h->sync_mu);
    for (unsigned i = 0; i < h->nworkers; i++)
        n += h->workers[i].running;
    h->sync_left = n;
    pthread_mutex_unlock(&h->sync_mu);
    for (unsigned i = 0; i < h->nworkers; i++)
        if (h->workers[i].running)
            nd_worker_post(&h->workers[i], &h->workers[i].sync_task);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&h->sync_mu);
    int rc = 0;
    while (h->sync_left && rc == 0)
        rc = pthread_cond_timedwait(&h->sync_cv, &h->sync_mu, &until);
    unsigned left = h->sync_left;
    pthread_mutex_unlock(&h->sync_mu);
    if (left)
        nd_log(ND_LOG_ERROR, "%u worker loops did not answer within 10 s at shutdown", left);
}

bool nd_http_wait_idle(const nd_http *h, unsigned max_ms)
{
    int64_t until = nd_clock_ns() + (int64_t)max_ms * 1000000;
    while (nd_http_inflight(h) > 0) {
        if (nd_clock_ns() >= until)
            return false;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return true;
}

bool nd_http_draining(const nd_http *h)
{
    return atomic_load(&h->draining);
}

uint64_t nd_http_inflight(const nd_http *h)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < h->nworkers; i++)
        n += atomic_load_explicit(&h->workers[i].inflight, memory_order_relaxed) +
             atomic_load_explicit(&h->workers[i].writing, memory_order_relaxed);
    return n;
}

bool nd_http_loops_alive(const nd_http *h, unsigned max_ms)
{
    int64_t now = nd_clock_ms();
    for (unsigned i = 0; i < h->nworkers; i++)
        if (now - atomic_load_explicit(&h->workers[i].heartbeat_ms, memory_order_relaxed) >
            (int64_t)max_ms)
            return false;
    return true;
}

void nd_http_stop(nd_http *h)
{
    if (!h)
        return;
    for (unsigned i = 0; i < h->nworkers; i++)
        if (h->workers[i].running)
            event_base_loopbreak(h->workers[i].base);
    for (unsigned i = 0; i < h->nworkers; i++) {
        if (h->workers[i].running) {
            pthread_join(h->workers[i].thread, NULL);
            h->workers[i].running = false;
        }
    }
}

uint64_t nd_http_finish(nd_http *h)
{
    unsigned ran;
    do {
        ran = 0;
        for (unsigned i = 0; i < h->nworkers; i++) {
            tls_worker = &h->workers[i];
            ran += run_tasks(&h->workers[i]);
            nd_log_batch_flush(&h->workers[i].log);
        }
        tls_worker = NULL;
    } while (ran);
    uint64_t n = 0;
    for (unsigned i = 0; i < h->nworkers; i++)
        n += atomic_load_explicit(&h->workers[i].inflight, memory_order_relaxed);
    return n;
}

void nd_http_destroy(nd_http *h)
{
    if (!h)
        return;
    nd_http_stop(h);
    for (unsigned i = 0; i < h->nworkers; i++) {
        nd_worker *w = &h->workers[i];
        if (w->bound)
            evhttp_del_accept_socket(w->http, w->bound);
        if (w->listen_fd >= 0)
            close(w->listen_fd);
        if (w->http)
            evhttp_free(w->http); /* closes the connections: on_close forgets them */
        for (size_t k = 0; k < w->nadopt; k++)
            bufferevent_decref(w->adopt[k]);
        free(w->adopt);
        for (size_t k = 0; k < w->ctab_cap; k++) /* only if libevent freed one silently */
            free(w->ctab[k]);
        free(w->ctab);
        if (w->adopt_ev)
            event_free(w->adopt_ev);
        if (w->scratch)
            evbuffer_free(w->scratch);
        if (h->hooks.worker_finish && w->user)
            h->hooks.worker_finish(h->hooks.app, w->user);
        if (w->wake)
            event_free(w->wake);
        if (w->tick)
            event_free(w->tick);
        if (w->base)
            event_base_free(w->base);
        nd_log_batch_flush(&w->log);
        while (w->unflushed) /* only if libevent freed a connection silently */
            writing_done(w, w->unflushed);
        while (w->free_reqs) {
            nd_req *r = w->free_reqs;
            w->free_reqs = r->next;
            free(r);
        }
        pthread_mutex_destroy(&w->qlock);
    }
    free(h->workers);
    pthread_mutex_destroy(&h->sync_mu);
    pthread_cond_destroy(&h->sync_cv);
    free(h);
}
