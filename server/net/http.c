/* http.c - the HTTP front: listeners, a worker per thread (worker.h) with its
 * evhttp and connections (conn.h), routing, replies and their budget, the
 * access log's call, and libevent's own error answers (evhttp_send_error). */
#include "http.h"
#include "clock.h"
#include "conn.h"
#include "fmt.h"
#include "framing.h"
#include "json.h"
#include "log.h"
#include "reply.h"

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

#define TICK_MS 100 /* heartbeat, access-log flush, request deadlines */
#define LISTEN_BACKLOG 1024
/* Replies. libevent reads no next request on a
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

/* A worker of the HTTP front: the loop (worker.h) and what serves HTTP on it. */
typedef struct http_worker {
    nd_worker w; /* first: nd_req.worker points here */
    nd_http *h;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    int listen_fd;  /* handed to evhttp, which closes it */
    nd_conns conns; /* its connections (conn.h) */
    nd_task close_task;
    nd_task sync_task; /* nd_http_refuse()'s barrier */
    nd_metrics_worker *metrics;
    nd_req *free_reqs;
    nd_req *unflushed;          /* replies being written (list) */
    _Atomic uint64_t inflight;  /* dispatched, not answered; written by this thread only */
    _Atomic uint64_t writing;   /* answered, not yet written; idem */
    _Atomic uint64_t out_bytes; /* body bytes of those replies; idem */
    uint64_t shed;              /* connections closed for a stalled reply */
    int64_t shed_log_ms;
    nd_log_batch log; /* access-log lines not yet written */
} http_worker;

struct nd_http {
    const nd_config *cfg;
    nd_http_hooks hooks;
    nd_metrics *metrics;
    unsigned nworkers;
    http_worker *workers;
    uint16_t port;
    _Atomic bool draining;
    _Atomic unsigned nconns; /* open connections, all workers (conn.h) */
    _Atomic bool closing;    /* listeners closed (or closing) */
    _Atomic bool refusing;   /* nd_http_refuse(): new requests get 503 */
    pthread_mutex_t sync_mu; /* nd_http_refuse()'s barrier */
    pthread_cond_t sync_cv;
    unsigned sync_left;
};

/* The http_worker around w (nd_worker is its first member). */
static inline http_worker *hw_of(nd_worker *w)
{
    return (http_worker *)w;
}

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

static void access_log(http_worker *w, const char *rid, const char *method, const char *path,
                       const char *client, int status, int64_t latency_ns, size_t in, size_t out)
{
    if (!w->h->cfg->access_log || !nd_log_enabled(ND_LOG_INFO))
        return;
    nd_log_access a = {.rid = rid,
                       .method = method,
                       .path = path,
                       .client = client,
                       .status = status,
                       .latency_ns = latency_ns,
                       .bytes_in = in,
                       .bytes_out = out,
                       .worker = w->w.index};
    char line[ND_LOG_ACCESS_MAX];
    nd_log_batch_add(&w->log, line, nd_log_format_access(line, &a));
}

/* ---- the worker's tick and tasks ---- */

static void out_check(http_worker *w);

static void on_tick(nd_worker *nw)
{
    http_worker *w = hw_of(nw);
    nd_log_batch_flush(&w->log);
    nd_conns_expire(&w->conns);
    out_check(w);
}

static void on_exit_loop(nd_worker *nw)
{
    nd_log_batch_flush(&hw_of(nw)->log);
}

static void sync_task_fn(nd_task *t)
{
    http_worker *w = (http_worker *)((char *)t - offsetof(http_worker, sync_task));
    nd_http *h = w->h;
    pthread_mutex_lock(&h->sync_mu);
    h->sync_left--;
    pthread_cond_broadcast(&h->sync_cv);
    pthread_mutex_unlock(&h->sync_mu);
}

static void close_listener_task(nd_task *t)
{
    http_worker *w = (http_worker *)((char *)t - offsetof(http_worker, close_task));
    if (w->bound) {
        evhttp_del_accept_socket(w->http, w->bound);
        w->bound = NULL;
    }
}

/* ---- requests ---- */

static nd_req *req_get(http_worker *w)
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
    r->worker = &w->w;
    return r;
}

static void req_put(http_worker *w, nd_req *r)
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
static void out_check(http_worker *w)
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
            evhttp_connection_free(r->evcon); /* conn_closed(): writing_done(r) */
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
static void writing_done(http_worker *w, nd_req *r)
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
    http_worker *w = hw_of(r->worker);
    nd_conns_request_ends(&w->conns, r->evcon); /* the next request's deadline starts now */
    if (r->paused) {                            /* written: read again */
        struct bufferevent *bev = evhttp_connection_get_bufferevent(r->evcon);
        if (bev)
            bufferevent_setwatermark(bev, EV_READ, 0, nd_conn_input_watermark(w->h->cfg));
    }
    writing_done(w, r);
}

/* conn.h: a connection closed; a reply still being written on it never
 * completes. (libevent serves one request at a time per connection, so at
 * most one.) */
static void conn_closed(void *arg, struct evhttp_connection *evcon)
{
    http_worker *w = arg;
    for (nd_req *r = w->unflushed; r; r = r->next) {
        if (r->evcon == evcon) {
            writing_done(w, r);
            return;
        }
    }
}

void *nd_http_app(const nd_req *r)
{
    return hw_of(r->worker)->h->hooks.app;
}

const nd_config *nd_req_config(const nd_req *r)
{
    return hw_of(r->worker)->h->cfg;
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

/* When body would take the unwritten replies over OUT_BUDGET: replaces it by
 * 503 "overloaded" (clients that do not read) and returns true. */
static bool shed_over_budget(http_worker *w, struct evkeyvalq *oh, struct evbuffer *body)
{
    size_t len = body ? evbuffer_get_length(body) : 0;
    if (len <= SMALL_REPLY || out_total(w->h) + len <= OUT_BUDGET)
        return false;
    evhttp_clear_headers(oh);
    evbuffer_drain(body, len);
    evbuffer_add_printf(body, "{\"error\":{\"code\":\"overloaded\",\"message\":\"the "
                              "server holds too many unread replies; retry\"}}\n");
    evhttp_add_header(oh, "Retry-After", "1");
    evhttp_add_header(oh, "Connection", "close");
    return true;
}

/* Tracks r's reply until libevent has written it (on_complete) or its
 * connection closes (conn_closed); out is its body's length. */
static void track_write(http_worker *w, nd_req *r, size_t out)
{
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
}

void nd_req_reply(nd_req *r, int status, const char *content_type, struct evbuffer *body)
{
    http_worker *w = hw_of(r->worker);
    assert(!r->replied);
    r->replied = true;
    struct evkeyvalq *oh = evhttp_request_get_output_headers(r->ev);
    if (shed_over_budget(w, oh, body)) {
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
    access_log(w, r->rid, method_name(r->method), r->path, r->client, status, latency, in, out);
    nd_metrics_request(w->metrics, r->route ? r->route->label : ND_ROUTE_OTHER, status,
                       (uint64_t)(latency / 1000), in, out);
    counter_add(&w->inflight, -1);
    r->evcon = evhttp_request_get_connection(r->ev);
    bool tracked = r->evcon != NULL; /* else the client left while we worked */
    if (tracked)
        track_write(w, r, out);
    evhttp_send_reply(r->ev, status, NULL, body); /* r may be written (and reused) now */
    if (!tracked)                                 /* libevent frees the request */
        req_put(w, r);
}

void nd_req_reply_error(nd_req *r, int status, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct evbuffer *out = evbuffer_new();
    if (!out)
        nd_die_oom("nd_req_reply_error");
    nd_reply w;
    nd_reply_init(&w, out);
    nd_reply_error_begin(&w, code, "%s", msg);
    nd_reply_error_end(&w);
    if (nd_reply_finish(&w) < 0)
        nd_die_oom("nd_req_reply_error");
    nd_req_reply(r, status, "application/json", out);
    evbuffer_free(out);
}

static void reply_not_found(nd_req *r)
{
    nd_req_reply_error(r, 404, "not_found", "no such endpoint; see proto/openapi.yaml");
}

static void reply_method(nd_req *r, const nd_route_def *route)
{
    nd_req_add_header(r, "Allow", route->allow);
    nd_req_reply_error(r, 405, "method_not_allowed", "%s is not allowed here; allowed: %s",
                       method_name(r->method), route->allow);
}

/* The request id: the client's X-Request-Id if it is sane, else
 * generated (worker.h). */
static void make_rid(nd_worker *w, const struct evkeyvalq *ih, char rid[ND_RID_MAX])
{
    const char *given = ih ? evhttp_find_header(ih, "X-Request-Id") : NULL;
    if (given) {
        size_t n = strlen(given);
        bool ok = n > 0 && n < ND_RID_MAX;
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
    nd_worker_new_rid(w, rid);
}

static void set_rid(nd_req *r)
{
    make_rid(r->worker, evhttp_request_get_input_headers(r->ev), r->rid);
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
    http_worker *w = arg;
    nd_req *r = req_get(w);
    r->ev = ev;
    r->start_ns = nd_clock_ns();
    r->method = evhttp_request_get_command(ev);
    counter_add(&w->inflight, 1);
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(ev);
    r->path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!r->path)
        r->path = "";
    nd_conns_request_begins(&w->conns, evhttp_request_get_connection(ev));
    set_rid(r);
    if (atomic_load_explicit(&w->h->refusing, memory_order_relaxed)) {
        /* Shutting down: the store may be closing; nothing may reach it. */
        nd_req_add_header(r, "Retry-After", "1");
        nd_req_reply_error(r, 503, "shutting_down", "the server is stopping; retry");
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
        nd_req_reply_error(r, 400, "bad_request", "conflicting Content-Length headers");
    } else if (!route)
        reply_not_found(r);
    else if (!(route->methods & r->method))
        reply_method(r, route);
    else if (!w->h->hooks.admit || w->h->hooks.admit(r))
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
 * A request the framing check refused (conn.c, "framing") arrives here too, as
 * libevent's 400 or 413: it gets the check's status and reason instead.
 * Every such answer has an X-Request-Id and closes the connection. */
/* The code and message of an error libevent answers itself: returns the
 * message (buf holds it when it has figures); cfg may be NULL (no worker). */
static const char *libevent_error_text(int error, const struct evkeyvalq *ih, const nd_config *cfg,
                                       char buf[256], const char **code)
{
    size_t max_body = cfg ? cfg->max_body : 0, max_headers = cfg ? cfg->max_headers : 0;
    *code = "bad_request";
    switch (error) {
    case 413:
        *code = "body_too_large";
        if (evhttp_find_header(ih, "Transfer-Encoding")) /* libevent says 413 for both */
            snprintf(buf, 256, "the chunked body is malformed or exceeds the limit of %zu bytes",
                     max_body);
        else if (evhttp_find_header(ih, "Content-Length"))
            snprintf(buf, 256, "the request body exceeds the limit of %zu bytes", max_body);
        else
            snprintf(buf, 256, "the request headers exceed the limit of %zu bytes", max_headers);
        return buf;
    case 400:
        snprintf(buf, 256, "malformed HTTP request (or headers over %zu bytes)", max_headers);
        return buf;
    case 501: *code = "not_implemented"; return "unknown HTTP method";
    case 417:
        *code = "expectation_failed";
        return "only 'Expect: 100-continue' is supported"; /* no quote: not escaped */
    case 404: *code = "not_found"; return "no such endpoint";
    case 405: *code = "method_not_allowed"; return "method not allowed";
    }
    if (error >= 500) {
        *code = "internal";
        return "internal error";
    }
    return "malformed HTTP request";
}

void evhttp_send_error(struct evhttp_request *req, int error, const char *reason)
{
    nd_worker *cur = nd_worker_current();
    http_worker *w = cur ? hw_of(cur) : NULL;
    char buf[256];
    const char *code;
    const struct evkeyvalq *ih = evhttp_request_get_input_headers(req);
    const char *msg = libevent_error_text(error, ih, w ? w->h->cfg : NULL, buf, &code);
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    int why = w && evcon ? nd_conns_error_answer(&w->conns, evcon) : 0;
    if (why) { /* refused by the framing check (conn.h): its status and reason */
        error = nd_framing_status(why);
        code = nd_framing_code(why);
        msg = nd_framing_message(why);
        reason = NULL;
        if (error == 413) {
            snprintf(buf, sizeof(buf), "%s of %zu bytes", msg, w->h->cfg->max_body);
            msg = buf;
        }
    }
    char rid[ND_RID_MAX];
    if (w)
        make_rid(&w->w, ih, rid);
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
        char cl[ND_FMT_U64_MAX + 1];
        cl[nd_fmt_u64(cl, out)] = 0;
        evhttp_add_header(oh, "Content-Length", cl);
        evbuffer_drain(b, out);
        out = 0;
    }
    if (w) {
        access_log(w, rid, method_name(evhttp_request_get_command(req)),
                   evhttp_request_get_uri(req), NULL, error, 0, 0, out);
        nd_metrics_request(w->metrics, ND_ROUTE_OTHER, error, 0, 0, out);
    }
    evhttp_send_reply(req, error, reason, b);
    evbuffer_free(b);
}

/* ---- listeners ---- */

static int open_listener(const nd_config *cfg, uint16_t port, bool reuseport, bool do_listen,
                         uint16_t *bound)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
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

/* Sets up w: its loop (worker.h; epoll's changelist with SO_REUSEPORT only,
 * where no watched descriptor is a dup() of another), its evhttp with the
 * limits, its connections (conn.h) and the application's state. */
static int worker_init(nd_http *h, http_worker *w, unsigned index)
{
    const nd_config *cfg = h->cfg;
    w->h = h;
    w->listen_fd = -1;
    w->metrics = nd_metrics_worker_get(h->metrics, index);
    w->close_task.fn = close_listener_task;
    w->sync_task.fn = sync_task_fn;
    int rc = nd_worker_init(&w->w, index, cfg->accept_mode == ND_ACCEPT_REUSEPORT, TICK_MS, on_tick,
                            on_exit_loop);
    if (rc < 0)
        return rc;
    w->http = evhttp_new(w->w.base);
    if (!w->http)
        return -ENOMEM;
    rc = nd_conns_init(&w->conns, &w->w, cfg, &h->nconns, w->metrics, conn_closed, w);
    if (rc < 0)
        return rc;
    evhttp_set_gencb(w->http, dispatch, w);
    nd_conns_attach(&w->conns, w->http);
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
        return h->hooks.worker_init(h->hooks.app, index, &w->w.user);
    return 0;
}

/* Frees what worker_init() made, in reverse order (the worker has stopped). */
static void worker_finish(nd_http *h, http_worker *w)
{
    if (w->bound)
        evhttp_del_accept_socket(w->http, w->bound);
    if (w->listen_fd >= 0)
        close(w->listen_fd);
    if (w->http)
        evhttp_free(w->http); /* closes the connections: conn_closed() for each */
    nd_conns_finish(&w->conns);
    if (h->hooks.worker_finish && w->w.user)
        h->hooks.worker_finish(h->hooks.app, w->w.user);
    nd_worker_finish(&w->w);
    nd_log_batch_flush(&w->log);
    while (w->unflushed) /* only if libevent freed a connection silently */
        writing_done(w, w->unflushed);
    while (w->free_reqs) {
        nd_req *r = w->free_reqs;
        w->free_reqs = r->next;
        free(r);
    }
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
    if (posix_memalign(&mem, 64, sizeof(http_worker) * h->nworkers) != 0)
        mem = NULL;
    h->workers = mem;
    if (!h->workers) {
        free(h);
        return -ENOMEM;
    }
    memset(h->workers, 0, sizeof(http_worker) * h->nworkers);
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

/* Logs the "listening" line. */
static void log_listening(const nd_http *h)
{
    char fields[400];
    size_t pos = (size_t)snprintf(fields, sizeof(fields), ",\"host\":");
    nd_json_escape(fields, sizeof(fields) - 100, &pos, h->cfg->listen_host,
                   strlen(h->cfg->listen_host));
    snprintf(fields + pos, sizeof(fields) - pos, ",\"port\":%u,\"threads\":%u,\"accept\":\"%s\"",
             h->port, h->nworkers,
             h->cfg->accept_mode == ND_ACCEPT_SHARED ? "shared" : "reuseport");
    nd_log_fields(ND_LOG_INFO, fields, "listening");
}

int nd_http_start(nd_http *h)
{
    int rc = open_listeners(h);
    if (rc < 0)
        return rc;
    for (unsigned i = 0; i < h->nworkers; i++) {
        http_worker *w = &h->workers[i];
        w->bound = evhttp_accept_socket_with_handle(w->http, w->listen_fd);
        if (!w->bound) {
            nd_log(ND_LOG_ERROR, "evhttp cannot accept on its socket");
            return -EIO;
        }
        w->listen_fd = -1; /* evhttp owns and closes it now */
    }
    for (unsigned i = 0; i < h->nworkers; i++) {
        rc = nd_worker_start(&h->workers[i].w);
        if (rc < 0) {
            nd_log(ND_LOG_ERROR, "cannot start worker thread: %s", strerror(-rc));
            return rc;
        }
    }
    log_listening(h);
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
        if (nd_worker_running(&h->workers[i].w))
            nd_worker_post(&h->workers[i].w, &h->workers[i].close_task);
}

void nd_http_refuse(nd_http *h)
{
    atomic_store(&h->draining, true);
    atomic_store(&h->refusing, true);
    unsigned n = 0;
    pthread_mutex_lock(&h->sync_mu);
    for (unsigned i = 0; i < h->nworkers; i++)
        n += nd_worker_running(&h->workers[i].w);
    h->sync_left = n;
    pthread_mutex_unlock(&h->sync_mu);
    for (unsigned i = 0; i < h->nworkers; i++)
        if (nd_worker_running(&h->workers[i].w))
            nd_worker_post(&h->workers[i].w, &h->workers[i].sync_task);
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

uint64_t nd_http_connections(const nd_http *h)
{
    return atomic_load_explicit(&h->nconns, memory_order_relaxed);
}

bool nd_http_loops_alive(const nd_http *h, unsigned max_ms)
{
    for (unsigned i = 0; i < h->nworkers; i++)
        if (!nd_worker_alive(&h->workers[i].w, max_ms))
            return false;
    return true;
}

void nd_http_stop(nd_http *h)
{
    if (!h)
        return;
    for (unsigned i = 0; i < h->nworkers; i++)
        nd_worker_break(&h->workers[i].w);
    for (unsigned i = 0; i < h->nworkers; i++)
        nd_worker_join(&h->workers[i].w);
}

uint64_t nd_http_finish(nd_http *h)
{
    unsigned ran;
    do {
        ran = 0;
        for (unsigned i = 0; i < h->nworkers; i++) {
            nd_worker_set_current(&h->workers[i].w);
            ran += nd_worker_run_tasks(&h->workers[i].w);
            nd_log_batch_flush(&h->workers[i].log);
        }
        nd_worker_set_current(NULL);
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
    for (unsigned i = 0; i < h->nworkers; i++)
        worker_finish(h, &h->workers[i]);
    free(h->workers);
    pthread_mutex_destroy(&h->sync_mu);
    pthread_cond_destroy(&h->sync_cv);
    free(h);
}
