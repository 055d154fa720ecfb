/* conn.c - a worker's connections: table, limit, framing check, deadlines. */
#include "conn.h"
#include "clock.h"
#include "framing.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

struct nd_conn {
    struct evhttp_connection *evcon;
    nd_conns *cs;
    int64_t deadline_ms;         /* while waiting for a request */
    bool waiting;                /* in cs->waiting */
    bool guard;                  /* framing_cb: our own change of the buffer */
    struct nd_conn *prev, *next; /* in cs->waiting */
    /* Framing check (see "framing" below); in is NULL when not checked. */
    struct evbuffer *in;
    struct evbuffer_cb_entry *in_cb;
    uint64_t consumed; /* stream offset of in's first byte */
    uint32_t served;   /* requests answered or dispatched */
    nd_framing fr;
};

size_t nd_conn_input_watermark(const nd_config *cfg)
{
    return cfg->max_headers + cfg->max_body + 65536;
}

/* ---- the table: evcon -> nd_conn ---- */

static size_t conn_slot(const nd_conns *cs, const void *evcon)
{
    uint64_t x = (uint64_t)(uintptr_t)evcon;
    return (size_t)((x >> 4) * 0x9E3779B97F4A7C15ull >> 20) & (cs->cap - 1);
}

static nd_conn *conn_find(const nd_conns *cs, const struct evhttp_connection *evcon)
{
    if (!cs->cap || !evcon)
        return NULL;
    for (size_t i = conn_slot(cs, evcon);; i = (i + 1) & (cs->cap - 1)) {
        nd_conn *c = cs->tab[i];
        if (!c || c->evcon == evcon)
            return c;
    }
}

static void conn_put(nd_conns *cs, nd_conn *c)
{
    size_t i = conn_slot(cs, c->evcon);
    while (cs->tab[i])
        i = (i + 1) & (cs->cap - 1);
    cs->tab[i] = c;
}

static void conn_insert(nd_conns *cs, nd_conn *c)
{
    if ((cs->n + 1) * 2 > cs->cap) {
        nd_conn **old = cs->tab;
        size_t old_cap = cs->cap;
        cs->cap = old_cap ? old_cap * 2 : 1024;
        cs->tab = calloc(cs->cap, sizeof(*cs->tab));
        if (!cs->tab)
            nd_die_oom("conn_insert");
        for (size_t i = 0; i < old_cap; i++)
            if (old[i])
                conn_put(cs, old[i]);
        free(old);
    }
    conn_put(cs, c);
    cs->n++;
}

/* Removes c from the table (backward-shift deletion keeps probes intact). */
static void conn_remove(nd_conns *cs, nd_conn *c)
{
    size_t mask = cs->cap - 1, i = conn_slot(cs, c->evcon);
    while (cs->tab[i] != c)
        i = (i + 1) & mask;
    for (size_t j = (i + 1) & mask; cs->tab[j]; j = (j + 1) & mask) {
        size_t home = conn_slot(cs, cs->tab[j]->evcon);
        /* Move tab[j] into the hole at i unless its home lies in (i, j]. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            cs->tab[i] = cs->tab[j];
            i = j;
        }
    }
    cs->tab[i] = NULL;
    cs->n--;
}

/* ---- deadlines: the list of connections waiting for a request ---- */

static void conn_unlist(nd_conns *cs, nd_conn *c)
{
    if (!c->waiting)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        cs->waiting = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        cs->waiting_tail = c->prev;
    c->prev = c->next = NULL;
    c->waiting = false;
}

/* c waits for its next request from now on (the list stays sorted: every
 * deadline is now + the same timeout). */
static void conn_wait(nd_conns *cs, nd_conn *c)
{
    conn_unlist(cs, c);
    c->deadline_ms = nd_clock_ms() + (int64_t)cs->cfg->request_timeout_s * 1000;
    c->prev = cs->waiting_tail;
    c->next = NULL;
    if (cs->waiting_tail)
        cs->waiting_tail->next = c;
    else
        cs->waiting = c;
    cs->waiting_tail = c;
    c->waiting = true;
}

/* Forgets c (the connection is gone or about to be freed). */
static void conn_forget(nd_conns *cs, nd_conn *c)
{
    if (c->in_cb)
        evbuffer_remove_cb_entry(c->in, c->in_cb);
    conn_unlist(cs, c);
    conn_remove(cs, c);
    atomic_fetch_sub_explicit(cs->total, 1, memory_order_relaxed);
    free(c);
}

void nd_conns_expire(nd_conns *cs)
{
    int64_t now = nd_clock_ms();
    while (cs->waiting && cs->waiting->deadline_ms <= now) {
        nd_conn *c = cs->waiting;
        struct evhttp_connection *evcon = c->evcon;
        conn_forget(cs, c);
        evhttp_connection_set_closecb(evcon, NULL, NULL);
        evhttp_connection_free(evcon);
    }
}

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
 * to http.c's evhttp_send_error(), which asks nd_conns_error_answer() and
 * answers with the scanner's status and reason and closes the connection.
 * Bytes arriving later are dropped. */

/* Cuts in down to its first keep bytes (evbuffers only shrink at the front:
 * the kept part is moved aside and put back). */
static void framing_cut(nd_conn *c, struct evbuffer *in, size_t keep)
{
    size_t len = evbuffer_get_length(in);
    if (keep >= len)
        return;
    c->guard = true;
    if (keep > 0)
        evbuffer_remove_buffer(in, c->cs->scratch, keep);
    evbuffer_drain(in, evbuffer_get_length(in));
    if (keep > 0)
        evbuffer_prepend_buffer(in, c->cs->scratch);
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

/* Starts checking the framing of everything c reads through bev. */
static void framing_attach(nd_conn *c, struct bufferevent *bev)
{
    nd_framing_init(&c->fr, c->cs->cfg->max_body);
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

int nd_conns_error_answer(nd_conns *cs, struct evhttp_connection *evcon)
{
    nd_conn *c = conn_find(cs, evcon);
    if (!c)
        return 0;
    int why = 0;
    if (c->in && nd_framing_refused(&c->fr) && c->served + 1 == c->fr.heads &&
        nd_framing_status(c->fr.why))
        why = c->fr.why;
    c->served++;
    return why;
}

/* ---- accepting: tracking or refusing each new connection ---- */

/* A connection closes: forget it, and tell the owner (a reply still being
 * written on it never completes). */
static void on_close(struct evhttp_connection *evcon, void *arg)
{
    nd_conn *c = arg;
    nd_conns *cs = c->cs;
    evhttp_connection_set_closecb(evcon, NULL, NULL); /* once only */
    conn_forget(cs, c);
    if (cs->closed)
        cs->closed(cs->closed_arg, evcon);
}

/* Starts tracking evcon; it waits for a request when waiting is set. With
 * bev (evcon's, seen from the first byte), its framing is checked. */
static nd_conn *conn_track(nd_conns *cs, struct evhttp_connection *evcon, bool waiting,
                           struct bufferevent *bev)
{
    nd_conn *c = calloc(1, sizeof(*c));
    if (!c)
        nd_die_oom("conn_track");
    c->evcon = evcon;
    c->cs = cs;
    conn_insert(cs, c);
    atomic_fetch_add_explicit(cs->total, 1, memory_order_relaxed);
    evhttp_connection_set_closecb(evcon, on_close, c);
    if (waiting)
        conn_wait(cs, c);
    if (bev)
        framing_attach(c, bev);
    return c;
}

/* Logs the refusals at most once a second. */
static void refused_note(nd_conns *cs)
{
    cs->refused++;
    int64_t now = nd_clock_ms();
    if (now - cs->refused_log_ms < 1000)
        return;
    char fields[96];
    snprintf(fields, sizeof(fields), ",\"max_connections\":%u,\"refused\":%llu",
             cs->cfg->max_connections, (unsigned long long)cs->refused);
    nd_log_fields(ND_LOG_WARN, fields, "connection limit reached: refusing new connections");
    cs->refused_log_ms = now;
    cs->refused = 0;
}

/* Over the limit: a 503 straight to the socket (best effort: it is small
 * and the socket new), then the connection is freed. */
static void conn_refuse(nd_conns *cs, struct evhttp_connection *evcon, struct bufferevent *bev)
{
    char msg[400], body[160], rid[ND_RID_MAX];
    unsigned cap = cs->cfg->max_connections;
    nd_worker_new_rid(cs->w, rid);
    int blen = snprintf(body, sizeof(body),
                        "{\"error\":{\"code\":\"too_many_connections\",\"message\":\"the server "
                        "holds its limit of %u connections; retry later\"}}\n",
                        cap);
    int n = snprintf(msg, sizeof(msg),
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Content-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n"
                     "X-Request-Id: %s\r\n\r\n%s",
                     blen, rid, body);
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd >= 0 && n > 0)
        (void)!send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    evhttp_connection_free(evcon);
    nd_metrics_request(cs->metrics, ND_ROUTE_OTHER, 503, 0, 0, (uint64_t)n);
    refused_note(cs);
}

/* evhttp_set_bevcb(): makes the bufferevent of each accepted connection. */
static struct bufferevent *make_bev(struct event_base *base, void *arg)
{
    nd_conns *cs = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!bev)
        return NULL; /* evhttp makes its own; the connection is tracked at dispatch */
    bufferevent_setwatermark(bev, EV_READ, 0, nd_conn_input_watermark(cs->cfg));
    if (cs->nadopt == cs->adopt_cap) {
        size_t cap = cs->adopt_cap ? cs->adopt_cap * 2 : 64;
        struct bufferevent **a = realloc(cs->adopt, cap * sizeof(*a));
        if (!a)
            nd_die_oom("make_bev");
        cs->adopt = a;
        cs->adopt_cap = cap;
    }
    bufferevent_incref(bev); /* so that it outlives adopt_cb even if evhttp frees it */
    cs->adopt[cs->nadopt++] = bev;
    if (cs->nadopt == 1)
        event_active(cs->adopt_ev, EV_READ, 0);
    return bev;
}

/* Runs right after the accept callback: tracks (or refuses) each new
 * connection. */
static void adopt_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    nd_conns *cs = arg;
    unsigned cap = cs->cfg->max_connections;
    for (size_t i = 0; i < cs->nadopt; i++) {
        struct bufferevent *bev = cs->adopt[i];
        bufferevent_data_cb rcb, wcb;
        bufferevent_event_cb ecb;
        void *cbarg = NULL;
        bufferevent_getcb(bev, &rcb, &wcb, &ecb, &cbarg);
        struct evhttp_connection *evcon = cbarg;
        /* Still evhttp's (it may have freed it already: callbacks cleared). */
        if (ecb && evcon && evhttp_connection_get_bufferevent(evcon) == bev &&
            !conn_find(cs, evcon)) {
            if (atomic_load_explicit(cs->total, memory_order_relaxed) >= cap)
                conn_refuse(cs, evcon, bev);
            else
                conn_track(cs, evcon, true, bev);
        }
        bufferevent_decref(bev);
    }
    cs->nadopt = 0;
}

/* ---- requests ---- */

void nd_conns_request_begins(nd_conns *cs, struct evhttp_connection *evcon)
{
    nd_conn *c = conn_find(cs, evcon);
    if (c)
        conn_unlist(cs, c); /* no deadline while the request is served */
    else if (evcon)
        c = conn_track(cs, evcon, false, NULL); /* not seen at accept (out of memory there) */
    if (c)
        c->served++;
}

void nd_conns_request_ends(nd_conns *cs, struct evhttp_connection *evcon)
{
    nd_conn *c = conn_find(cs, evcon);
    if (c)
        conn_wait(cs, c);
}

/* ---- life ---- */

int nd_conns_init(nd_conns *cs, nd_worker *w, const nd_config *cfg, _Atomic unsigned *total,
                  nd_metrics_worker *metrics, nd_conns_closed_fn closed, void *closed_arg)
{
    *cs = (nd_conns){.w = w,
                     .cfg = cfg,
                     .total = total,
                     .metrics = metrics,
                     .closed = closed,
                     .closed_arg = closed_arg};
    cs->adopt_ev = event_new(w->base, -1, 0, adopt_cb, cs);
    cs->scratch = evbuffer_new();
    return cs->adopt_ev && cs->scratch ? 0 : -ENOMEM;
}

void nd_conns_attach(nd_conns *cs, struct evhttp *http)
{
    evhttp_set_bevcb(http, make_bev, cs);
}

void nd_conns_finish(nd_conns *cs)
{
    for (size_t k = 0; k < cs->nadopt; k++)
        bufferevent_decref(cs->adopt[k]);
    free(cs->adopt);
    for (size_t k = 0; k < cs->cap; k++) /* only if libevent freed one silently */
        free(cs->tab[k]);
    free(cs->tab);
    if (cs->adopt_ev)
        event_free(cs->adopt_ev);
    if (cs->scratch)
        evbuffer_free(cs->scratch);
    *cs = (nd_conns){.w = NULL};
}
