/* webhooks.c - the delivery thread: an event_base driving libcurl's multi
 * interface (hiperfifo's pattern), one state machine per subscription. */
#include "webhooks.h"
#include "hook_sign.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include <curl/curl.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>

#include "clock.h"
#include "log.h"

#define POLL_MS 100 /* looks for new events this often without a wake-up */
#define FLUSH_MS 50 /* a delivered position is saved within this */
#define BATCH 256   /* events read per look */
#define ROUNDS 16   /* looks in one turn before the others' turn */
#define RETRY_AFTER_MAX_S 86400
#define BODY_HEAD 160 /* bytes of a failed answer kept for last_error */
/* An answer's body is read up to this, then the transfer is ended (a write
 * error from body_cb): its status alone decides, and a receiver that
 * streams an endless body costs one buffer, not timeout_ms of reading. */
#define BODY_MAX 4096
#define EVENT_ID_MAX 64

enum sub_state {
    ST_STARTING,
    ST_IDLE,
    ST_DELIVERING,
    ST_RETRYING,
    ST_PAUSED,
    ST_FAILED,
    ST_STANDBY /* another node of the cluster delivers */
};

static const char *const state_names[] = {"starting", "idle",   "delivering", "retrying",
                                          "paused",   "failed", "standby"};

typedef struct sub {
    nd_webhooks *wh;
    const nd_hook_sub_config *cfg;
    CURL *easy;
    struct curl_slist *headers; /* of the attempt in flight */
    struct event *retry_ev;
    enum sub_state state;
    uint64_t pos, saved; /* handled; kept by the positions */
    uint64_t cur_seq;    /* the event held (0: none) */
    char *cur_json;
    size_t cur_len, cur_cap;
    char cur_id[EVENT_ID_MAX];
    int64_t retry_after_s; /* of the last answer; -1: none */
    char errbuf[CURL_ERROR_SIZE];
    char body_head[BODY_HEAD + 1];
    size_t body_head_len;
    uint64_t body_len;     /* of the attempt's answer, as read */
    bool body_cut;         /* ended past BODY_MAX */
    bool held_back;        /* prereq_cb stopped the request: the lease was in doubt */
    uint64_t body_cuts;    /* answers cut since start (logged now and then) */
    uint64_t term;         /* wh->term when its position was last loaded */
    uint64_t ahead_logged; /* the position last logged as ahead of the feed (0: none) */
    _Atomic bool resume_req;
    nd_hook_status st; /* guarded by wh->lock */
} sub;

typedef struct sockinfo {
    struct event *ev;
} sockinfo;

struct nd_webhooks {
    nd_hook_config *cfg;
    nd_hook_source src;
    nd_hook_positions *pos;
    struct event_base *base;
    struct event *wake_ev, *poll_ev, *stop_ev, *resume_ev, *flush_ev, *curl_timer;
    CURLM *multi;
    pthread_t thread;
    bool running;
    pthread_mutex_t lock;
    _Atomic uint64_t latest;
    bool leading;  /* delivery thread: this process delivers (hook_position.h lead) */
    uint64_t term; /* delivery thread: times leading became true (the positions load again) */
    uint64_t rng;
    sub *subs;
    size_t nsubs;
};

/* ---- status (shared with the API's threads) ---- */

/* Copies the delivery thread's fields of s into its shown status. */
static void publish(sub *s)
{
    pthread_mutex_lock(&s->wh->lock);
    s->st.state = state_names[s->state];
    s->st.position = s->pos;
    s->st.latest = atomic_load(&s->wh->latest);
    s->st.inflight = s->state == ST_DELIVERING || s->state == ST_RETRYING || s->state == ST_PAUSED
                         ? s->cur_seq
                         : 0;
    pthread_mutex_unlock(&s->wh->lock);
}

size_t nd_webhooks_count(const nd_webhooks *wh)
{
    return wh ? wh->nsubs : 0;
}

void nd_webhooks_status(nd_webhooks *wh, size_t i, nd_hook_status *st)
{
    pthread_mutex_lock(&wh->lock);
    *st = wh->subs[i].st;
    st->latest = atomic_load(&wh->latest);
    pthread_mutex_unlock(&wh->lock);
}

/* ---- positions ---- */

static bool may_deliver(nd_webhooks *wh);
static void drop_lead(nd_webhooks *wh);
static void load_position(sub *s);

/* Saves s's position when it moved, only while this process delivers and
 * only from the term its position was loaded in: a node deposed while it
 * was stopped never writes over the holder's position (the cluster's
 * store also refuses it: -ESTALE, then this node stands by and loads
 * again when it leads). */
static void save_position(sub *s)
{
    nd_webhooks *wh = s->wh;
    if (s->pos == s->saved || s->state == ST_FAILED)
        return;
    uint64_t term = wh->term;
    if (s->term != term || !may_deliver(wh) || wh->term != term)
        return; /* not delivering, or a new term: loaded again, not saved */
    int rc = nd_hook_positions_save(wh->pos, s->cfg->name, s->pos);
    if (rc == -ESTALE) {
        nd_log(ND_LOG_WARN,
               "webhook %s: its position (%" PRIu64 ") was moved by another node: standing by "
               "until the lease is confirmed, then loading it again",
               s->cfg->name, s->pos);
        drop_lead(wh);
        return;
    }
    if (rc < 0) {
        nd_log(ND_LOG_ERROR, "webhook %s: cannot save its position %" PRIu64 ": %s", s->cfg->name,
               s->pos, strerror(-rc));
        return; /* tried again at the next flush */
    }
    s->saved = s->pos;
}

/* Saves the positions that moved, then tells the source the lowest one
 * kept (what retention must keep). */
static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    nd_webhooks *wh = arg;
    uint64_t low = UINT64_MAX;
    for (size_t i = 0; i < wh->nsubs; i++) {
        sub *s = &wh->subs[i];
        save_position(s);
        if (s->state != ST_FAILED && s->state != ST_STARTING && s->saved < low)
            low = s->saved;
    }
    if (wh->src.hold && low != UINT64_MAX)
        wh->src.hold(wh->src.src, low);
}

static void advance(sub *s, uint64_t seq)
{
    s->pos = seq;
    if (!evtimer_pending(s->wh->flush_ev, NULL)) {
        struct timeval tv = {0, FLUSH_MS * 1000};
        evtimer_add(s->wh->flush_ev, &tv);
    }
}

/* ---- picking the next event ---- */

typedef struct pick {
    sub *s;
    uint64_t scanned;
    bool found;
    int rc;
} pick;

/* The event's "id" member (its idempotency key) into s->cur_id. */
static void take_id(sub *s, const char *json, size_t len, uint64_t seq)
{
    static const char head[] = "{\"id\":\"";
    if (len > sizeof(head) && memcmp(json, head, sizeof(head) - 1) == 0) {
        const char *start = json + sizeof(head) - 1;
        const char *end = memchr(start, '"', len - (sizeof(head) - 1));
        if (end && end > start && (size_t)(end - start) < EVENT_ID_MAX &&
            !memchr(start, '\\', (size_t)(end - start))) {
            memcpy(s->cur_id, start, (size_t)(end - start));
            s->cur_id[end - start] = 0;
            return;
        }
    }
    json_t *o = json_loadb(json, len, 0, NULL);
    const char *id = json_string_value(json_object_get(o, "id"));
    if (id && strlen(id) < EVENT_ID_MAX && !strpbrk(id, "\r\n"))
        snprintf(s->cur_id, sizeof(s->cur_id), "%s", id);
    else
        snprintf(s->cur_id, sizeof(s->cur_id), "evt_%016" PRIx64, seq);
    json_decref(o);
}

static int pick_visit(void *arg, const nd_hook_event *ev)
{
    pick *p = arg;
    sub *s = p->s;
    p->scanned = ev->seq;
    if (!nd_hook_config_wants(s->cfg, ev->type, ev->account, ev->account_len))
        return 0;
    if (ev->json_len + 1 > s->cur_cap) {
        char *n = realloc(s->cur_json, ev->json_len + 1);
        if (!n)
            return p->rc = -ENOMEM, 1;
        s->cur_json = n;
        s->cur_cap = ev->json_len + 1;
    }
    memcpy(s->cur_json, ev->json, ev->json_len);
    s->cur_json[ev->json_len] = 0;
    s->cur_len = ev->json_len;
    s->cur_seq = ev->seq;
    take_id(s, ev->json, ev->json_len, ev->seq);
    p->found = true;
    return 1;
}

static void send_current(sub *s);

/* An idle subscription: finds its next wanted event and sends it, or stays
 * idle when caught up. */
static void pump(sub *s)
{
    nd_webhooks *wh = s->wh;
    if (s->state == ST_IDLE && !may_deliver(wh)) { /* asked now, not cached */
        s->state = ST_STANDBY;
        publish(s);
    }
    if (s->state != ST_IDLE)
        return;
    if (s->term != wh->term) { /* it was busy when this node took the lead again */
        load_position(s);
        s->term = wh->term;
        if (s->state != ST_IDLE)
            return;
    }
    for (int round = 0; round < ROUNDS; round++) {
        pick p = {.s = s, .scanned = s->pos};
        int rc = wh->src.after(wh->src.src, s->pos, BATCH, pick_visit, &p);
        if (rc == 0)
            rc = p.rc;
        if (rc < 0) { /* looked at again at the next poll */
            nd_log(ND_LOG_WARN, "webhook %s: cannot read the events after %" PRIu64 ": %s",
                   s->cfg->name, s->pos, strerror(-rc));
            return;
        }
        if (p.found) {
            if (p.scanned > s->pos + 1) /* skipped the unwanted before it */
                advance(s, p.scanned - 1);
            send_current(s);
            return;
        }
        if (p.scanned == s->pos) { /* caught up */
            publish(s);
            return;
        }
        advance(s, p.scanned);
    }
    event_active(wh->wake_ev, EV_READ, 0); /* more to skip: after the others' turn */
    publish(s);
}

static void load_position(sub *s);

/* Asks whether this process delivers (a cluster elects one). Standing by,
 * idle subscriptions wait; elected, they load their positions again (the
 * previous deliverer moved them). */
static void follow_lead(nd_webhooks *wh)
{
    bool lead = nd_hook_positions_lead(wh->pos) == 1;
    if (lead == wh->leading)
        return;
    wh->leading = lead;
    if (lead)
        wh->term++;
    nd_log(ND_LOG_INFO, "webhooks: %s", lead ? "this node delivers" : "another node delivers");
    for (size_t i = 0; i < wh->nsubs; i++) {
        sub *s = &wh->subs[i];
        if (lead && (s->state == ST_STANDBY || s->state == ST_IDLE)) {
            load_position(s);
            s->term = wh->term;
        } else if (!lead && s->state == ST_IDLE)
            s->state = ST_STANDBY;
        publish(s);
    }
}

/* Whether this process may send or save now: the positions' lead, asked
 * now (a round trip at most once a second, a clock read otherwise, and 0
 * as soon as the lease's last renewal is too old), its changes followed. */
static bool may_deliver(nd_webhooks *wh)
{
    follow_lead(wh);
    return wh->leading;
}

/* Stops delivering until lead answers 1 again: then it is a new term, and
 * every subscription loads its position before it sends. */
static void drop_lead(nd_webhooks *wh)
{
    if (!wh->leading)
        return;
    wh->leading = false;
    nd_log(ND_LOG_INFO, "webhooks: standing by until this node's lease is confirmed");
    for (size_t i = 0; i < wh->nsubs; i++) {
        sub *s = &wh->subs[i];
        if (s->state == ST_IDLE) {
            s->state = ST_STANDBY;
            publish(s);
        }
    }
}

/* An idle subscription whose position is past the feed's latest event:
 * the feed is older than the position (data.mdb replaced by an older copy
 * without the data directory's events.seq, or the positions of another
 * store). One process (positions without a lead op) delivers from the
 * feed's end on: logged, the position moved back to latest (saved within
 * FLUSH_MS) and shown as last_error; instead of waiting, idle, for an
 * event it would never send. A cluster's deliverer may be a node whose
 * feed is still behind the stream: it waits for its feed (logged once). */
static void position_ahead(sub *s, uint64_t latest)
{
    nd_webhooks *wh = s->wh;
    if (wh->pos->ops->lead) {
        if (s->ahead_logged != s->pos)
            nd_log(ND_LOG_WARN,
                   "webhook %s: its position %" PRIu64
                   " is ahead of this node's feed (latest %" PRIu64
                   "): waiting for the feed to reach it",
                   s->cfg->name, s->pos, latest);
        s->ahead_logged = s->pos;
        return;
    }
    nd_log(ND_LOG_ERROR,
           "webhook %s: its position %" PRIu64 " is ahead of the feed (latest %" PRIu64
           "): the store is older than the position (restored without its events.seq?); "
           "delivering the events after %" PRIu64,
           s->cfg->name, s->pos, latest, latest);
    pthread_mutex_lock(&wh->lock);
    snprintf(s->st.last_error, sizeof(s->st.last_error),
             "position %" PRIu64 " was ahead of the feed (latest %" PRIu64 "): moved back to it",
             s->pos, latest);
    s->st.last_error_at_us = nd_log_now_us();
    pthread_mutex_unlock(&wh->lock);
    advance(s, latest);
    publish(s);
}

/* Every idle subscription behind the latest event looks for its next one
 * (one caught up costs no read: a poll is cheap); one ahead of it is
 * handled (position_ahead()). */
static void pump_all(nd_webhooks *wh)
{
    follow_lead(wh);
    uint64_t latest = wh->src.latest(wh->src.src);
    atomic_store(&wh->latest, latest);
    for (size_t i = 0; i < wh->nsubs; i++) {
        sub *s = &wh->subs[i];
        if (wh->leading && s->state == ST_IDLE && s->pos > latest)
            position_ahead(s, latest);
        if (!wh->leading || s->pos < latest) /* a standby: marked so by pump */
            pump(s);
    }
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    pump_all(arg);
}

/* ---- one attempt ---- */

static size_t header_cb(char *buf, size_t size, size_t n, void *arg)
{
    sub *s = arg;
    size_t len = size * n;
    static const char name[] = "retry-after:";
    if (len > sizeof(name) - 1 && strncasecmp(buf, name, sizeof(name) - 1) == 0) {
        char v[128];
        size_t vl = len - (sizeof(name) - 1);
        if (vl >= sizeof(v))
            vl = sizeof(v) - 1;
        memcpy(v, buf + sizeof(name) - 1, vl);
        v[vl] = 0;
        char *p = v + strspn(v, " \t");
        p[strcspn(p, "\r\n")] = 0;
        char *end;
        errno = 0;
        long long secs = strtoll(p, &end, 10);
        if (*p >= '0' && *p <= '9' && !*end && !errno) {
            s->retry_after_s = secs;
        } else {
            time_t t = curl_getdate(p, NULL);
            if (t != -1)
                s->retry_after_s = t > time(NULL) ? (int64_t)(t - time(NULL)) : 0;
        }
        if (s->retry_after_s > RETRY_AFTER_MAX_S)
            s->retry_after_s = RETRY_AFTER_MAX_S;
    }
    return len;
}

static size_t body_cb(char *buf, size_t size, size_t n, void *arg)
{
    sub *s = arg;
    size_t len = size * n;
    size_t room = BODY_HEAD - s->body_head_len;
    size_t take = len < room ? len : room;
    memcpy(s->body_head + s->body_head_len, buf, take);
    s->body_head_len += take;
    s->body_head[s->body_head_len] = 0;
    s->body_len += len;
    if (s->body_len > BODY_MAX) {
        s->body_cut = true;
        return 0; /* CURLE_WRITE_ERROR: the transfer ends, its status stands */
    }
    return len;
}

/* Called by libcurl once connected, right before the request is written:
 * the last point where a node that lost its lease (stopped, starved) can
 * hold the event back. No I/O here: a lease in doubt stops the attempt,
 * attempt_done() stands by, and the lease is asked again. */
static int prereq_cb(void *arg, char *primary_ip, char *local_ip, int primary_port, int local_port)
{
    (void)primary_ip, (void)local_ip, (void)primary_port, (void)local_port;
    sub *s = arg;
    if (s->wh->leading && s->term == s->wh->term && nd_hook_positions_held(s->wh->pos))
        return CURL_PREREQFUNC_OK;
    s->held_back = true;
    return CURL_PREREQFUNC_ABORT;
}

static void fail_attempt(sub *s, int status, const char *why);

/* Sends the held event (s->cur_*) once, signed now. */
static void send_current(sub *s)
{
    nd_webhooks *wh = s->wh;
    if (!wh->leading || !nd_hook_positions_held(wh->pos)) { /* a clock read, no I/O */
        drop_lead(wh);
        s->state = ST_STANDBY; /* the deliverer sends it, same id */
        publish(s);
        return;
    }
    if (s->term != wh->term) { /* a retry from before this node led again */
        evtimer_del(s->retry_ev);
        load_position(s);
        s->term = wh->term;
        pump(s);
        return;
    }
    char sig[ND_HOOK_SIGNATURE_MAX];
    int rc = nd_hook_sign(s->cfg->secret, s->cfg->secret_len, (int64_t)time(NULL), s->cur_json,
                          s->cur_len, sig);
    char h_id[EVENT_ID_MAX + 32], h_sig[ND_HOOK_SIGNATURE_MAX + 32];
    snprintf(h_id, sizeof(h_id), "Neardup-Event-Id: %s", s->cur_id);
    snprintf(h_sig, sizeof(h_sig), "Neardup-Signature: %s", sig);
    curl_slist_free_all(s->headers);
    s->headers = NULL;
    const char *lines[] = {"Content-Type: application/json", h_id, h_sig,
                           "Expect:", /* no 100-continue round trip */
                           "User-Agent: neardup-webhooks/" ND_PROGRAM_VERSION};
    for (size_t i = 0; rc == 0 && i < sizeof(lines) / sizeof(lines[0]); i++) {
        struct curl_slist *n = curl_slist_append(s->headers, lines[i]);
        if (!n)
            rc = -ENOMEM;
        else
            s->headers = n;
    }
    s->state = ST_DELIVERING;
    s->retry_after_s = -1;
    s->errbuf[0] = 0;
    s->body_head_len = 0;
    s->body_head[0] = 0;
    s->body_len = 0;
    s->body_cut = false;
    s->held_back = false;
    CURL *e = s->easy;
    if (rc == 0) {
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, s->headers);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, s->cur_json);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)s->cur_len);
        if (curl_multi_add_handle(wh->multi, e) != CURLM_OK)
            rc = -ENOMEM;
    }
    publish(s);
    if (rc < 0)
        fail_attempt(s, 0, rc == -ENOMEM ? "out of memory" : "cannot sign (OpenSSL)");
}

static uint64_t next_random(nd_webhooks *wh)
{
    uint64_t x = wh->rng; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return wh->rng = x;
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    sub *s = arg;
    if (s->state != ST_RETRYING)
        return;
    if (!may_deliver(s->wh)) { /* the new deliverer sends it again, same id */
        s->state = ST_STANDBY;
        publish(s);
        return;
    }
    send_current(s);
}

/* A failed attempt: pauses the subscription after pause_after_s of
 * failures, else schedules the retry. */
static void fail_attempt(sub *s, int status, const char *why)
{
    nd_webhooks *wh = s->wh;
    int64_t now = nd_log_now_us();
    pthread_mutex_lock(&wh->lock);
    nd_hook_status *st = &s->st;
    st->failed++;
    st->attempts++;
    st->last_status = status;
    snprintf(st->last_error, sizeof(st->last_error), "%s", why);
    st->last_error_at_us = now;
    if (!st->failing_since_us)
        st->failing_since_us = now;
    bool pause = now - st->failing_since_us >= (int64_t)s->cfg->pause_after_s * 1000000;
    unsigned attempts = st->attempts;
    int64_t delay_ms = 0;
    if (!pause) {
        uint64_t ceiling = s->cfg->backoff_base_ms;
        for (unsigned i = 1; i < attempts && ceiling < s->cfg->backoff_cap_ms; i++)
            ceiling *= 2;
        if (ceiling > s->cfg->backoff_cap_ms)
            ceiling = s->cfg->backoff_cap_ms;
        delay_ms = (int64_t)(next_random(wh) % (ceiling + 1)); /* full jitter */
        if (s->retry_after_s >= 0 && s->retry_after_s * 1000 > delay_ms)
            delay_ms = s->retry_after_s * 1000;
        st->retried++;
        st->next_attempt_us = now + delay_ms * 1000;
    } else {
        st->next_attempt_us = 0;
    }
    pthread_mutex_unlock(&wh->lock);
    if (pause) {
        s->state = ST_PAUSED;
        nd_log(ND_LOG_ERROR,
               "webhook %s: paused after failing for %u s (%u attempts at event %s, last: %s); "
               "POST /webhooks/%s/resume to retry",
               s->cfg->name, s->cfg->pause_after_s, attempts, s->cur_id, why, s->cfg->name);
    } else {
        s->state = ST_RETRYING;
        struct timeval tv = {(time_t)(delay_ms / 1000), (suseconds_t)(delay_ms % 1000) * 1000};
        evtimer_add(s->retry_ev, &tv);
        if (attempts == 1 || attempts % 10 == 0)
            nd_log(ND_LOG_WARN,
                   "webhook %s: event %s failed (attempt %u: %s), retry in %" PRId64 " ms",
                   s->cfg->name, s->cur_id, attempts, why, delay_ms);
    }
    publish(s);
}

/* An attempt that ended: delivered on a 2xx status, else failed; held back
 * (never written: the lease was in doubt), it stands by.
 *
 * The status decides, whatever happens after it: a 2xx answer whose body
 * is cut past BODY_MAX (curl's CURLE_WRITE_ERROR, from body_cb), times out
 * or breaks off delivered its event all the same (libcurl keeps the status
 * it read, CURLINFO_RESPONSE_CODE; 0 when none came): the receiver said it
 * took it, and sending it again would only repeat it, timeout_ms at a
 * time. */
static void attempt_done(sub *s, CURLcode res)
{
    nd_webhooks *wh = s->wh;
    long status = 0;
    curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &status);
    if (res == CURLE_ABORTED_BY_CALLBACK && s->held_back) {
        nd_log(ND_LOG_WARN, "webhook %s: event %s held back: this node's lease is in doubt",
               s->cfg->name, s->cur_id);
        drop_lead(wh);
        s->state = ST_STANDBY;
        publish(s);
        return;
    }
    if (s->body_cut && (++s->body_cuts == 1 || s->body_cuts % 1000 == 0))
        nd_log(ND_LOG_WARN,
               "webhook %s: the answer to event %s (HTTP %ld) was cut after %d bytes of its body "
               "(%" PRIu64 " answers cut since start)",
               s->cfg->name, s->cur_id, status, BODY_MAX, s->body_cuts);
    if (status >= 200 && status < 300) {
        int64_t now = nd_log_now_us();
        pthread_mutex_lock(&s->wh->lock);
        s->st.delivered++;
        s->st.attempts = 0;
        s->st.failing_since_us = 0;
        s->st.next_attempt_us = 0;
        s->st.last_error[0] = 0;
        s->st.last_status = 0;
        s->st.last_delivered_at_us = now;
        pthread_mutex_unlock(&s->wh->lock);
        advance(s, s->cur_seq);
        s->state = ST_IDLE;
        pump(s); /* asks the lease first: a node deposed meanwhile stands by */
        publish(s);
        return;
    }
    bool answered = res == CURLE_OK || s->body_cut; /* a status and (the head of) a body */
    char why[256];
    if (!answered)
        snprintf(why, sizeof(why), "%s", s->errbuf[0] ? s->errbuf : curl_easy_strerror(res));
    else
        snprintf(why, sizeof(why), "HTTP %ld%s%.160s", status, s->body_head_len ? ": " : "",
                 s->body_head);
    for (char *c = why; *c; c++) /* one line in the log and the answer */
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    fail_attempt(s, answered ? (int)status : 0, why);
}

/* ---- libcurl on libevent (hiperfifo) ---- */

static void check_done(nd_webhooks *wh)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(wh->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        CURL *e = msg->easy_handle;
        CURLcode res = msg->data.result;
        sub *s = NULL;
        curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&s);
        curl_multi_remove_handle(wh->multi, e);
        if (s)
            attempt_done(s, res);
    }
}

static void socket_event_cb(evutil_socket_t fd, short what, void *arg)
{
    nd_webhooks *wh = arg;
    int action = ((what & EV_READ) ? CURL_CSELECT_IN : 0) |
                 ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(wh->multi, fd, action, &running);
    check_done(wh);
}

static void curl_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    nd_webhooks *wh = arg;
    int running;
    curl_multi_socket_action(wh->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(wh);
}

static int multi_socket_cb(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)e;
    nd_webhooks *wh = userp;
    sockinfo *si = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (si) {
            event_free(si->ev);
            free(si);
            curl_multi_assign(wh->multi, fd, NULL);
        }
        return 0;
    }
    short kind = (short)(((what & CURL_POLL_IN) ? EV_READ : 0) |
                         ((what & CURL_POLL_OUT) ? EV_WRITE : 0) | EV_PERSIST);
    if (!si) {
        if (!(si = calloc(1, sizeof(*si))))
            return -1;
        curl_multi_assign(wh->multi, fd, si);
    } else {
        event_free(si->ev);
    }
    si->ev = event_new(wh->base, fd, kind, socket_event_cb, wh);
    if (!si->ev || event_add(si->ev, NULL) < 0)
        return -1;
    return 0;
}

static int multi_timer_cb(CURLM *m, long timeout_ms, void *userp)
{
    (void)m;
    nd_webhooks *wh = userp;
    if (timeout_ms < 0) {
        evtimer_del(wh->curl_timer);
        return 0;
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    return evtimer_add(wh->curl_timer, &tv) < 0 ? -1 : 0;
}

/* ---- resume, stop ---- */

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    nd_webhooks *wh = arg;
    for (size_t i = 0; i < wh->nsubs; i++) {
        sub *s = &wh->subs[i];
        if (!atomic_exchange(&s->resume_req, false))
            continue;
        if (s->state != ST_PAUSED && s->state != ST_RETRYING) {
            publish(s);
            continue;
        }
        evtimer_del(s->retry_ev);
        pthread_mutex_lock(&wh->lock);
        s->st.failing_since_us = 0;
        s->st.attempts = 0;
        s->st.next_attempt_us = 0;
        pthread_mutex_unlock(&wh->lock);
        nd_log(ND_LOG_INFO, "webhook %s: resumed at event %s", s->cfg->name, s->cur_id);
        send_current(s);
    }
}

int nd_webhooks_resume(nd_webhooks *wh, const char *name, size_t len, nd_hook_status *st)
{
    for (size_t i = 0; wh && i < wh->nsubs; i++) {
        sub *s = &wh->subs[i];
        if (strlen(s->cfg->name) != len || memcmp(s->cfg->name, name, len) != 0)
            continue;
        pthread_mutex_lock(&wh->lock);
        if (s->st.state == state_names[ST_PAUSED] || s->st.state == state_names[ST_RETRYING])
            s->st.state = "resuming";
        if (st)
            *st = s->st;
        pthread_mutex_unlock(&wh->lock);
        atomic_store(&s->resume_req, true);
        event_active(wh->resume_ev, EV_READ, 0);
        return 0;
    }
    return -ENOENT;
}

void nd_webhooks_wake(nd_webhooks *wh)
{
    if (wh && wh->wake_ev)
        event_active(wh->wake_ev, EV_READ, 0);
}

static void stop_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    nd_webhooks *wh = arg;
    flush_cb(-1, 0, wh);
    event_base_loopbreak(wh->base);
}

/* ---- the thread ---- */

/* Loads s's position, or begins a new subscription (and keeps where at
 * once, so a crash before its first delivery does not move it). */
static void load_position(sub *s)
{
    nd_webhooks *wh = s->wh;
    uint64_t seq = 0;
    int rc = nd_hook_positions_load(wh->pos, s->cfg->name, &seq);
    if (rc == -ENOENT) {
        seq = s->cfg->start_oldest ? 0 : wh->src.latest(wh->src.src);
        rc = nd_hook_positions_save(wh->pos, s->cfg->name, seq);
        if (rc == 0)
            nd_log(ND_LOG_INFO,
                   "webhook %s: new subscription, delivering the events after %" PRIu64,
                   s->cfg->name, seq);
    }
    if (rc < 0) {
        nd_log(ND_LOG_ERROR, "webhook %s: cannot read or keep its position (%s): not delivering",
               s->cfg->name, strerror(-rc));
        s->state = ST_FAILED;
        pthread_mutex_lock(&wh->lock);
        snprintf(s->st.last_error, sizeof(s->st.last_error), "position store: %s", strerror(-rc));
        pthread_mutex_unlock(&wh->lock);
    } else {
        s->pos = s->saved = seq;
        s->state = ST_IDLE;
    }
    publish(s);
}

static void *delivery_main(void *arg)
{
    nd_webhooks *wh = arg;
    pthread_setname_np(pthread_self(), "nd-hooks");
    pump_all(wh);
    event_base_loop(wh->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

/* The positions are loaded, and held from the source's retention, on the
 * caller's thread before delivery starts: nothing undelivered is pruned
 * meanwhile. */
int nd_webhooks_start(nd_webhooks *wh)
{
    atomic_store(&wh->latest, wh->src.latest(wh->src.src));
    for (size_t i = 0; i < wh->nsubs; i++)
        load_position(&wh->subs[i]);
    flush_cb(-1, 0, wh); /* the hold, from the positions loaded */
    int rc = pthread_create(&wh->thread, NULL, delivery_main, wh);
    if (rc != 0)
        return -rc;
    wh->running = true;
    return 0;
}

void nd_webhooks_stop(nd_webhooks *wh)
{
    if (!wh || !wh->running)
        return;
    event_active(wh->stop_ev, EV_READ, 0);
    pthread_join(wh->thread, NULL);
    wh->running = false;
}

/* ---- create / destroy ---- */

static int sub_init(nd_webhooks *wh, sub *s, const nd_hook_sub_config *c)
{
    s->wh = wh;
    s->cfg = c;
    s->state = ST_STARTING;
    snprintf(s->st.name, sizeof(s->st.name), "%s", c->name);
    s->st.url = c->url;
    s->st.state = state_names[ST_STARTING];
    s->retry_ev = evtimer_new(wh->base, retry_cb, s);
    CURL *e = s->easy = curl_easy_init();
    if (!s->retry_ev || !e)
        return -ENOMEM;
    long connect_ms = c->timeout_ms < 10000 ? (long)c->timeout_ms : 10000;
    if (curl_easy_setopt(e, CURLOPT_URL, c->url) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK)
        return -EINVAL;
    if (c->ca_file && curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file) != CURLE_OK)
        return -EINVAL;
    curl_easy_setopt(e, CURLOPT_PRIVATE, s);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, s->errbuf);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, body_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, prereq_cb);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, s);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    return 0;
}

int nd_webhooks_create(nd_webhooks **out, nd_hook_config *cfg, const nd_hook_source *src,
                       nd_hook_positions *pos, char *err, size_t cap)
{
    *out = NULL;
    nd_webhooks *wh = calloc(1, sizeof(*wh));
    if (!wh) {
        nd_hook_config_destroy(cfg);
        nd_hook_positions_close(pos);
        return -ENOMEM;
    }
    wh->cfg = cfg;
    wh->src = *src;
    wh->pos = pos;
    pthread_mutex_init(&wh->lock, NULL);
    if (getrandom(&wh->rng, sizeof(wh->rng), 0) != sizeof(wh->rng) || wh->rng == 0)
        wh->rng = (uint64_t)nd_clock_ns() | 1;
    int rc = 0;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, cap, "cannot initialise libcurl");
        nd_webhooks_destroy(wh);
        return -EIO;
    }
    wh->base = event_base_new();
    wh->multi = curl_multi_init();
    wh->subs = calloc(cfg->nsubs ? cfg->nsubs : 1, sizeof(sub));
    if (!wh->base || !wh->multi || !wh->subs) {
        rc = -ENOMEM;
        goto fail;
    }
    wh->wake_ev = event_new(wh->base, -1, 0, wake_cb, wh);
    wh->poll_ev = event_new(wh->base, -1, EV_PERSIST, wake_cb, wh);
    wh->stop_ev = event_new(wh->base, -1, 0, stop_cb, wh);
    wh->resume_ev = event_new(wh->base, -1, 0, resume_cb, wh);
    wh->flush_ev = evtimer_new(wh->base, flush_cb, wh);
    wh->curl_timer = evtimer_new(wh->base, curl_timer_cb, wh);
    struct timeval poll = {0, POLL_MS * 1000};
    if (!wh->wake_ev || !wh->poll_ev || !wh->stop_ev || !wh->resume_ev || !wh->flush_ev ||
        !wh->curl_timer || event_add(wh->poll_ev, &poll) < 0) {
        rc = -ENOMEM;
        goto fail;
    }
    curl_multi_setopt(wh->multi, CURLMOPT_SOCKETFUNCTION, multi_socket_cb);
    curl_multi_setopt(wh->multi, CURLMOPT_SOCKETDATA, wh);
    curl_multi_setopt(wh->multi, CURLMOPT_TIMERFUNCTION, multi_timer_cb);
    curl_multi_setopt(wh->multi, CURLMOPT_TIMERDATA, wh);
    for (size_t i = 0; i < cfg->nsubs; i++) {
        wh->nsubs = i + 1;
        if ((rc = sub_init(wh, &wh->subs[i], &cfg->subs[i])) < 0)
            goto fail;
    }
    *out = wh;
    return 0;
fail:
    snprintf(err, cap, "cannot set up webhook delivery: %s", strerror(-rc));
    nd_webhooks_destroy(wh);
    return rc;
}

void nd_webhooks_destroy(nd_webhooks *wh)
{
    if (!wh)
        return;
    nd_webhooks_stop(wh);
    for (size_t i = 0; i < wh->nsubs; i++) {
        sub *s = &wh->subs[i];
        if (s->easy) {
            if (wh->multi)
                curl_multi_remove_handle(wh->multi, s->easy); /* an attempt in flight */
            curl_easy_cleanup(s->easy);
        }
        curl_slist_free_all(s->headers);
        if (s->retry_ev)
            event_free(s->retry_ev);
        free(s->cur_json);
    }
    if (wh->multi)
        curl_multi_cleanup(wh->multi); /* frees the sockets' events via CURL_POLL_REMOVE */
    struct event *evs[] = {wh->wake_ev,   wh->poll_ev,  wh->stop_ev,
                           wh->resume_ev, wh->flush_ev, wh->curl_timer};
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        if (evs[i])
            event_free(evs[i]);
    if (wh->base)
        event_base_free(wh->base);
    free(wh->subs);
    nd_hook_positions_close(wh->pos);
    nd_hook_config_destroy(wh->cfg);
    pthread_mutex_destroy(&wh->lock);
    curl_global_cleanup();
    free(wh);
}

/* ---- metrics ---- */

static int family(struct evbuffer *out, nd_webhooks *wh, const char *name, const char *type,
                  const char *help, int which)
{
    int rc = evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type) < 0;
    for (size_t i = 0; i < wh->nsubs; i++) {
        nd_hook_status st;
        nd_webhooks_status(wh, i, &st);
        uint64_t v = which == 0   ? st.delivered
                     : which == 1 ? st.failed
                     : which == 2 ? st.retried
                     : which == 3 ? (st.latest > st.position ? st.latest - st.position : 0)
                                  : strcmp(st.state, "paused") == 0;
        rc |= evbuffer_add_printf(out, "%s{subscription=\"%s\"} %" PRIu64 "\n", name, st.name, v) <
              0;
    }
    return rc;
}

int nd_webhooks_metrics_collect(void *arg, struct evbuffer *out)
{
    nd_webhooks *wh = arg;
    if (!wh->nsubs)
        return 0;
    int rc = 0;
    rc |= family(out, wh, "neardup_webhook_delivered_total", "counter",
                 "Events delivered (answered 2xx) since start, by subscription.", 0);
    rc |= family(out, wh, "neardup_webhook_failed_total", "counter",
                 "Delivery attempts that failed (status, refused, timeout), by subscription.", 1);
    rc |= family(out, wh, "neardup_webhook_retried_total", "counter",
                 "Retries scheduled after a failed attempt, by subscription.", 2);
    rc |= family(out, wh, "neardup_webhook_lag_events", "gauge",
                 "Events written after the subscription's position.", 3);
    rc |= family(out, wh, "neardup_webhook_paused", "gauge",
                 "1 while the subscription is paused after failing too long.", 4);
    return rc ? -ENOMEM : 0;
}
