/* api_worker.c - the handlers' state per worker thread (api_worker.h): made
 * when a worker starts (nd_api_worker_init()), freed when it stops. */
#include "api.h"
#include "answer.h"
#include "api_worker.h"
#include "clock.h"
#include "json.h"
#include "log.h"
#include "reply.h"
#include "request.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/buffer.h>

_Static_assert(ND_K_MAX == ND_INDEX_MAX_K, "k is checked against the index's bound");
_Static_assert(ND_ID_MAX >= ND_ID_MAX_UTF8, "the store must hold every valid id");

int nd_api_worker_init(void *app, unsigned index, void **user)
{
    nd_api *api = app;
    (void)index;
    api_worker *aw = calloc(1, sizeof(*aw));
    if (!aw)
        return -ENOMEM;
    aw->cap = api->cfg->max_matches * 4 < 1024 ? 1024 : (size_t)api->cfg->max_matches * 4;
    aw->cap += API_ANCHOR_CANDIDATES;
    aw->hits = calloc(aw->cap, sizeof(*aw->hits));
    aw->matches = calloc(aw->cap, sizeof(*aw->matches));
    aw->keys = calloc(aw->cap, sizeof(*aw->keys));
    aw->memo = nd_memo_create(aw->cap);
    aw->sh.out = evbuffer_new();
    int rc = aw->hits && aw->matches && aw->keys && aw->memo && aw->sh.out
                 ? nd_fp_scratch_create(&aw->fps)
                 : -ENOMEM;
    if (rc == 0)
        rc = nd_sk_scratch_create(&aw->sks);
    if (rc == 0)
        rc = nd_pair_scratch_create(&aw->pair);
    if (rc < 0) {
        nd_api_worker_finish(app, aw);
        return rc;
    }
    *user = aw;
    return 0;
}

void nd_api_worker_finish(void *app, void *user)
{
    (void)app;
    api_worker *aw = user;
    if (!aw)
        return;
    nd_fp_scratch_destroy(aw->fps);
    nd_sk_scratch_destroy(aw->sks);
    nd_pair_scratch_destroy(aw->pair);
    free(aw->hits);
    free(aw->matches);
    free(aw->keys);
    nd_memo_destroy(aw->memo);
    if (aw->sh.out)
        evbuffer_free(aw->sh.out);
    nd_request_parser_finish(&aw->sh.parser);
    free(aw);
}
