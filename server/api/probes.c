/* probes.c - the node's own state: GET /healthz (the loops run), /readyz
 * (nd_api_ready()), /metrics (Prometheus text) and /replica (this node's
 * place in the stream). */
#include "answer.h"
#include "api.h"
#include "api_worker.h"
#include "clock.h"
#include "handlers.h"

#include <string.h>

#include <event2/buffer.h>

#define LOOP_STALL_MS 10000 /* /healthz fails if a loop has not run for this long */

/* Answers 200 {"status":status}. */
static void reply_status(nd_req *r, const char *status)
{
    nd_reply w;
    nd_reply_object(nd_api_body_begin(r, &w));
    nd_reply_key(&w, "status");
    nd_reply_plain(&w, status, strlen(status));
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 200);
}

bool nd_api_ready(const nd_api *api, const char **why)
{
    const char *w = NULL;
    if (api->http && nd_http_draining(api->http))
        w = "draining";
    else if (atomic_load(&api->load_failed))
        w = "load_failed";
    else
        nd_corpus_ready(api->corpus, &w); /* loading, storage, replica */
    if (why)
        *why = w;
    return w == NULL;
}

void handle_healthz(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    if (nd_http_loops_alive(api->http, LOOP_STALL_MS))
        reply_status(r, "ok");
    else
        nd_api_error(r, 503, "loop_stalled", "a worker loop has not run for %d ms", LOOP_STALL_MS);
}

void handle_readyz(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    const char *why;
    if (nd_api_ready(api, &why)) {
        reply_status(r, "ready");
        return;
    }
    if (strcmp(why, "loading") == 0) {
        nd_api_loading(r);
        return;
    }
    nd_api_error(r, 503, why, "not ready: %s", why);
}

void handle_metrics(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    nd_corpus *corpus = nd_api_corpus(r);
    nd_corpus_counts st;
    nd_corpus_stats(corpus, &st);
    nd_metrics_gauges g = {
        .documents = st.documents,
        .index_entries = st.index_entries,
        .stale_documents = st.stale,
        .pending_changes = st.pending,
        .inflight = nd_http_inflight(api->http),
        .load_done = atomic_load(&api->load_done),
        .load_total = atomic_load(&api->load_total),
        .threads = api->cfg->threads,
        .ready = nd_api_ready(api, NULL),
        .draining = nd_http_draining(api->http),
        .loading = !nd_corpus_loaded(corpus),
        .store_writable = nd_corpus_writable(corpus),
        .in_memory = !nd_corpus_durable(corpus),
        .uptime_s = (double)(nd_clock_ns() - api->start_ns) / 1e9,
    };
    api_worker *aw = aw_of(r);
    if (nd_metrics_render(api->metrics, &g, aw->sh.out) < 0) {
        evbuffer_drain(aw->sh.out, evbuffer_get_length(aw->sh.out));
        nd_api_error(r, 500, "internal", "out of memory");
        return;
    }
    nd_req_reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", aw->sh.out);
    evbuffer_drain(aw->sh.out, evbuffer_get_length(aw->sh.out));
}

/* ---- /replica ---- */

/* GET /replica: this node's place in the stream, and the digest of its
 * committed documents (kept by the registry as changes commit: O(1), so
 * any number of requests costs the loops nothing). An operator's read: the
 * token is asked for whenever one is configured. */
void handle_replica(nd_req *r)
{
    nd_corpus *corpus = nd_api_corpus(r);
    uint64_t n = 0, digest = 0;
    if (nd_corpus_digest(corpus, &n, &digest) < 0) {
        nd_api_loading(r);
        return;
    }
    nd_reply w;
    nd_reply_object(nd_api_body_begin(r, &w));
    nd_reply_key(&w, "replicated");
    nd_corpus_replica rs;
    bool replicated = nd_corpus_replica_get(corpus, &rs);
    nd_reply_bool(&w, replicated);
    if (replicated) {
        nd_reply_key(&w, "node");
        nd_reply_string(&w, rs.node, strlen(rs.node));
        nd_reply_key(&w, "stream");
        nd_reply_string(&w, rs.stream, strlen(rs.stream));
        nd_reply_key(&w, "applied_seq");
        nd_reply_u64(&w, rs.applied_seq);
        nd_reply_key(&w, "stored_seq");
        nd_reply_u64(&w, rs.stored_seq);
        nd_reply_key(&w, "stream_seq");
        nd_reply_u64(&w, rs.stream_seq);
        nd_reply_key(&w, "lag");
        nd_reply_u64(&w, rs.lag);
        nd_reply_key(&w, "connected");
        nd_reply_bool(&w, rs.connected);
        nd_reply_key(&w, "writable");
        nd_reply_bool(&w, rs.writable);
        nd_reply_key(&w, "state");
        nd_reply_string(&w, rs.state, strlen(rs.state));
        nd_reply_key(&w, "published");
        nd_reply_u64(&w, rs.published);
        nd_reply_key(&w, "applied");
        nd_reply_u64(&w, rs.applied);
        nd_reply_key(&w, "entries");
        nd_reply_u64(&w, rs.entries);
        nd_reply_key(&w, "conflicts");
        nd_reply_u64(&w, rs.conflicts);
    }
    nd_reply_key(&w, "documents");
    nd_reply_u64(&w, n);
    nd_reply_key(&w, "digest");
    nd_reply_simhash(&w, digest);
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 200);
}
