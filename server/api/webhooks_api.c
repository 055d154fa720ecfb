/* webhooks_api.c - the operator's view of webhook delivery: GET /webhooks
 * (every subscription's state, position, lag, last error, next attempt)
 * and POST /webhooks/{name}/resume. Both for operators (routes.c). */
#include "answer.h"
#include "api.h"
#include "handlers.h"
#include "webhooks.h"

#include <string.h>

static void add_time(nd_reply *w, const char *key, int64_t us)
{
    nd_reply_key(w, key);
    if (us)
        nd_reply_time(w, us);
    else
        nd_reply_null(w);
}

static void add_status(nd_reply *w, const nd_hook_status *st)
{
    nd_reply_object(w);
    nd_reply_key(w, "name");
    nd_reply_string(w, st->name, strlen(st->name));
    nd_reply_key(w, "url");
    nd_reply_string(w, st->url, strlen(st->url));
    nd_reply_key(w, "state");
    nd_reply_plain(w, st->state, strlen(st->state));
    nd_reply_key(w, "position");
    nd_reply_u64(w, st->position);
    nd_reply_key(w, "latest");
    nd_reply_u64(w, st->latest);
    nd_reply_key(w, "lag");
    nd_reply_u64(w, st->latest > st->position ? st->latest - st->position : 0);
    nd_reply_key(w, "in_flight");
    if (st->inflight)
        nd_reply_u64(w, st->inflight);
    else
        nd_reply_null(w);
    nd_reply_key(w, "attempts");
    nd_reply_u64(w, st->attempts);
    nd_reply_key(w, "delivered");
    nd_reply_u64(w, st->delivered);
    nd_reply_key(w, "failed");
    nd_reply_u64(w, st->failed);
    nd_reply_key(w, "retried");
    nd_reply_u64(w, st->retried);
    nd_reply_key(w, "last_error");
    if (st->last_error[0])
        nd_reply_string(w, st->last_error, strlen(st->last_error));
    else
        nd_reply_null(w);
    nd_reply_key(w, "last_status");
    if (st->last_status)
        nd_reply_u64(w, (uint64_t)st->last_status);
    else
        nd_reply_null(w);
    add_time(w, "last_error_at", st->last_error_at_us);
    add_time(w, "failing_since", st->failing_since_us);
    add_time(w, "next_attempt_at", st->next_attempt_us);
    add_time(w, "last_delivered_at", st->last_delivered_at_us);
    nd_reply_object_end(w);
}

void handle_webhooks(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    nd_reply w;
    nd_reply_object(nd_api_body_begin(r, &w));
    nd_reply_key(&w, "subscriptions");
    nd_reply_array(&w);
    for (size_t i = 0; i < nd_webhooks_count(api->webhooks); i++) {
        nd_hook_status st;
        nd_webhooks_status(api->webhooks, i, &st);
        add_status(&w, &st);
    }
    nd_reply_array_end(&w);
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 200);
}

void handle_webhook(nd_req *r)
{
    static const char prefix[] = "/webhooks/", suffix[] = "/resume";
    const char *name = r->path + sizeof(prefix) - 1;
    size_t len = strlen(name);
    if (len <= sizeof(suffix) - 1 || strcmp(name + len - (sizeof(suffix) - 1), suffix) != 0) {
        nd_api_error(r, 404, "not_found", "no such resource: POST /webhooks/{name}/resume");
        return;
    }
    len -= sizeof(suffix) - 1;
    nd_hook_status st;
    if (nd_webhooks_resume(nd_api_of(r)->webhooks, name, len, &st) < 0) {
        nd_api_error(r, 404, "subscription_not_found",
                     "no webhook subscription is named %.*s (see GET /webhooks)",
                     (int)(len > 64 ? 64 : len), name);
        return;
    }
    nd_reply w;
    nd_reply_object(nd_api_body_begin(r, &w));
    nd_reply_key(&w, "subscription");
    add_status(&w, &st);
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 202);
}
