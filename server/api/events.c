/* events.c - GET /events: the event feed (store/feed.h), paged by seq.
 *
 * Ascending (the consumer's way): ?after=SEQ&limit=N -> the events after
 * SEQ, oldest first, and "next_after" to send next. Descending (a
 * console's "newest first"): ?order=desc[&before=SEQ]&limit=N, and
 * "next_before". Filters: type= (an event type) and account=. An
 * operator sees every event; any other token those of the accounts it may
 * act for. A request reads at most EVENTS_SCAN_MAX events, so a filter
 * that matches little answers with fewer and a position to go on from; a
 * page stops before the event that would take its events over
 * EVENTS_PAGE_BYTES (it holds one event at least, whatever its size), so
 * a page of large events (policy.changed: up to 64 KiB) costs its bytes,
 * not limit times 64 KiB. Each event is written from its stored data as
 * it is (feed.h nd_event_json_head(), nd_event_data()): no JSON is parsed
 * or dumped per event. An ascending page after the latest event answers
 * 409 position_ahead on one node (the position came from another feed:
 * the store was restored from an older copy); on a replica, whose feed
 * may be behind another node's, it is an empty page. */
#include "answer.h"
#include "api.h"
#include "handlers.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#define EVENTS_LIMIT_DEFAULT 100
#define EVENTS_LIMIT_MAX 1000
#define EVENTS_SCAN_MAX 10000        /* events read per request at most */
#define EVENTS_PAGE_BYTES (1u << 20) /* a page's events stop before this many bytes */

/* A parsed GET /events. */
typedef struct events_req {
    bool descending;
    bool has_after, has_before;
    uint64_t after, before;
    unsigned limit;
    nd_feed_type type; /* ND_FEED_NONE: any */
    const char *account;
    size_t account_len;
} events_req;

/* Parses a decimal seq (1..20 digits, no sign). */
static bool parse_seq(const char *s, uint64_t *out)
{
    size_t n = strlen(s);
    if (n == 0 || n > 20 || strspn(s, "0123456789") != n)
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    *out = (uint64_t)v;
    return errno == 0;
}

/* Reads q into *er; on a bad parameter answers 400 and returns false. */
static bool parse_events_query(nd_req *r, struct evkeyvalq *q, events_req *er)
{
    *er = (events_req){.limit = EVENTS_LIMIT_DEFAULT};
    bool seen[6] = {false};
    static const char *const names[6] = {"after", "before", "limit", "order", "type", "account"};
    for (struct evkeyval *kv = q->tqh_first; kv; kv = kv->next.tqe_next) {
        int i = 0;
        while (i < 6 && strcmp(kv->key, names[i]) != 0)
            i++;
        if (i == 6)
            continue; /* unknown parameters are ignored, like unknown fields */
        if (seen[i]) {
            nd_api_invalid_field(r, names[i], "%s is given twice", names[i]);
            return false;
        }
        seen[i] = true;
        const char *v = kv->value;
        unsigned long lim;
        switch (i) {
        case 0:
        case 1:
            if (!parse_seq(v, i == 0 ? &er->after : &er->before)) {
                nd_api_invalid_field(r, names[i], "%s must be an event seq (a whole number)",
                                     names[i]);
                return false;
            }
            *(i == 0 ? &er->has_after : &er->has_before) = true;
            break;
        case 2:
            lim = strspn(v, "0123456789") == strlen(v) && strlen(v) && strlen(v) <= 7
                      ? strtoul(v, NULL, 10)
                      : 0;
            if (lim < 1 || lim > EVENTS_LIMIT_MAX) {
                nd_api_invalid_field(r, "limit", "limit must be an integer from 1 to %d",
                                     EVENTS_LIMIT_MAX);
                return false;
            }
            er->limit = (unsigned)lim;
            break;
        case 3:
            if (strcmp(v, "asc") != 0 && strcmp(v, "desc") != 0) {
                nd_api_invalid_field(r, "order", "order must be asc or desc");
                return false;
            }
            er->descending = v[0] == 'd';
            break;
        case 4:
            if ((er->type = nd_feed_type_parse(v, strlen(v))) == ND_FEED_NONE) {
                nd_api_invalid_field(r, "type",
                                     "type must be one of copy.detected, claim.revoked, "
                                     "claim.restored, policy.changed, document.deleted, "
                                     "import.finished");
                return false;
            }
            break;
        default:
            if (!*v || strlen(v) > ND_ACCOUNT_MAX) {
                nd_api_invalid_field(r, "account", "account must be 1 to %d bytes", ND_ACCOUNT_MAX);
                return false;
            }
            er->account = v;
            er->account_len = strlen(v);
        }
    }
    if (er->descending ? er->has_after : er->has_before) {
        nd_api_invalid_field(r, er->descending ? "after" : "before",
                             er->descending ? "after goes with order=asc (the default)"
                                            : "before goes with order=desc");
        return false;
    }
    return true;
}

/* The walk over the feed: filters, writes, counts. */
typedef struct events_walk {
    nd_req *r;
    nd_reply *w;
    const events_req *er;
    bool operator;
    unsigned written;
    unsigned scanned;
    size_t bytes;  /* of the events written */
    uint64_t last; /* the last seq read (0: none) */
    bool full;     /* stopped: the page is full or the scan bound reached */
    int error;
} events_walk;

static bool event_visible(events_walk *ew, const nd_event_rec *ev)
{
    const events_req *er = ew->er;
    if (er->type != ND_FEED_NONE && ev->type != er->type)
        return false;
    if (er->account && (ev->account_len != er->account_len ||
                        memcmp(ev->account, er->account, er->account_len) != 0))
        return false;
    return ew->operator||(ev->account_len &&
                          nd_api_may_act_for(ew->r, ev->account, ev->account_len));
}

static int visit_event(void *arg, const nd_event_rec *ev)
{
    events_walk *ew = arg;
    if (ew->written == ew->er->limit || ew->scanned == EVENTS_SCAN_MAX) {
        ew->full = true;
        return 1;
    }
    if (!event_visible(ew, ev)) {
        ew->scanned++;
        ew->last = ev->seq;
        return 0;
    }
    char head[ND_EVENT_HEAD_MAX];
    size_t hlen = nd_event_json_head(ev, head);
    const char *data;
    size_t dlen;
    nd_event_data(ev, &data, &dlen);
    size_t size = hlen + dlen + 2; /* the comma, the closing brace */
    if (ew->written && ew->bytes + size > EVENTS_PAGE_BYTES) {
        ew->full = true; /* the next page begins with it */
        return 1;
    }
    ew->scanned++;
    ew->last = ev->seq;
    nd_reply_raw(ew->w, head, hlen);
    if (evbuffer_add(ew->w->out, data, dlen) < 0 || evbuffer_add(ew->w->out, "}", 1) < 0) {
        ew->error = -ENOMEM;
        return 1;
    }
    ew->bytes += size;
    ew->written++;
    return 0;
}

/* Answers the page of er. */
static void events_page(nd_req *r, const events_req *er)
{
    uint64_t oldest, latest;
    nd_corpus_feed_bounds(nd_api_corpus(r), &oldest, &latest);
    if (!er->descending && er->has_after && oldest > 1 && er->after + 1 < oldest) {
        nd_api_error(r, 410, "position_too_old",
                     "events after %llu were pruned: the oldest kept is %llu (start again from "
                     "after=%llu, or without after)",
                     (unsigned long long)er->after, (unsigned long long)oldest,
                     (unsigned long long)(oldest - 1));
        return;
    }
    if (!er->descending && er->has_after && er->after > latest && !nd_corpus_replicated(nd_api_corpus(r))) {
        nd_reply w;
        nd_api_error_begin(r, &w, "position_ahead",
                           "after %llu is ahead of the feed: the latest event is %llu (this "
                           "position came from another copy of the store, e.g. before a "
                           "restore; seqs are never reused: start again from after=%llu)",
                           (unsigned long long)er->after, (unsigned long long)latest,
                           (unsigned long long)latest);
        nd_reply_key(&w, "latest");
        nd_reply_u64(&w, latest);
        nd_api_error_send(r, &w, 409);
        return;
    }
    nd_reply w;
    nd_api_body_begin(r, &w);
    nd_reply_object(&w);
    nd_reply_key(&w, "events");
    nd_reply_array(&w);
    events_walk ew = {.r = r, .w = &w, .er = er, .operator= nd_api_is_operator(r)};
    uint64_t from = er->descending ? (er->has_before ? er->before : 0) : er->after;
    int rc = er->descending && er->has_before && er->before <= 1
                 ? 0
                 : nd_corpus_feed_scan(nd_api_corpus(r), from, er->descending, visit_event, &ew);
    nd_reply_array_end(&w);
    if (rc < 0 || ew.error) {
        struct evbuffer *out = w.out; /* drop what was written */
        evbuffer_drain(out, evbuffer_get_length(out));
        nd_api_store_error(r,
                           ew.error        ? ew.error
                           : rc == -EAGAIN ? -EIO
                                           : rc,
                           "reading the event feed");
        return;
    }
    if (er->descending) {
        nd_reply_key(&w, "next_before");
        if (ew.full && ew.last)
            nd_reply_u64(&w, ew.last);
        else
            nd_reply_null(&w);
    } else {
        nd_reply_key(&w, "next_after");
        nd_reply_u64(&w, ew.last ? ew.last : er->after);
    }
    nd_reply_key(&w, "oldest");
    nd_reply_u64(&w, oldest);
    nd_reply_key(&w, "latest");
    nd_reply_u64(&w, latest);
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 200);
}

void handle_events(nd_req *r)
{
    struct evkeyvalq q;
    TAILQ_INIT(&q);
    const char *query = nd_api_query(r);
    if (query && *query && evhttp_parse_query_str(query, &q) != 0) {
        evhttp_clear_headers(&q);
        nd_api_invalid_field(r, "query", "the query string cannot be decoded");
        return;
    }
    events_req er;
    if (parse_events_query(r, &q, &er))
        events_page(r, &er);
    evhttp_clear_headers(&q);
}
