/* hook_feed.h - webhook delivery's events (webhooks.h's nd_hook_source)
 * read from the store's events feed (feed.h). Internal to server/corpus/:
 * corpus_local.c hands it to the delivery it composes. */
#ifndef ND_HOOK_FEED_H
#define ND_HOOK_FEED_H

#include "store.h"
#include "webhooks.h"

/* Fills *src with the feed of st (borrowed: it must outlive the delivery
 * thread). Does not allocate. */
void nd_hook_feed_source(nd_store *st, nd_hook_source *src);

#endif
