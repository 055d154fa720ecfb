/* hook_feed.c - the store's events feed as webhook delivery reads it.
 * (Until the feed lands: an empty journal.) */
#include "hook_feed.h"

static int feed_after(void *src, uint64_t after, size_t limit,
                      int (*visit)(void *arg, const nd_hook_event *ev), void *arg)
{
    (void)src, (void)after, (void)limit, (void)visit, (void)arg;
    return 0;
}

static uint64_t feed_latest(void *src)
{
    (void)src;
    return 0;
}

void nd_hook_feed_source(nd_store *st, nd_hook_source *src)
{
    *src = (nd_hook_source){.after = feed_after, .latest = feed_latest, .src = st};
}
