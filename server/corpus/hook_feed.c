/* hook_feed.c - the store's events feed (feed.h) as webhook delivery reads
 * it: each event handed over with its JSON form (nd_event_json()), and the
 * lowest position not yet delivered held back from the feed's retention. */
#include "hook_feed.h"
#include "feed.h"

#include <errno.h>
#include <stdlib.h>

typedef struct feed_walk {
    int (*visit)(void *arg, const nd_hook_event *ev);
    void *arg;
    int rc;
} feed_walk;

static int feed_visit(void *arg, const nd_event_rec *ev)
{
    feed_walk *w = arg;
    const char *type = nd_feed_type_name(ev->type);
    if (!type)
        return 0; /* not one the feed shows */
    size_t len = 0;
    char *json = nd_event_json(ev, &len);
    if (!json)
        return w->rc = -ENOMEM, 1;
    nd_hook_event he = {.seq = ev->seq,
                        .type = type,
                        .json = json,
                        .json_len = len,
                        .account = ev->account,
                        .account_len = ev->account_len};
    int rc = w->visit(w->arg, &he);
    free(json);
    return rc;
}

static int feed_after(void *src, uint64_t after, size_t limit,
                      int (*visit)(void *arg, const nd_hook_event *ev), void *arg)
{
    feed_walk w = {visit, arg, 0};
    int rc = nd_store_events_after(src, after, limit, feed_visit, &w);
    return w.rc < 0 ? w.rc : rc < 0 ? rc : 0;
}

static uint64_t feed_latest(void *src)
{
    return nd_store_events_latest(src);
}

static void feed_hold(void *src, uint64_t seq)
{
    nd_store_feed_hold(src, seq);
}

void nd_hook_feed_source(nd_store *st, nd_hook_source *src)
{
    *src = (nd_hook_source){
        .after = feed_after, .latest = feed_latest, .hold = feed_hold, .src = st};
}
