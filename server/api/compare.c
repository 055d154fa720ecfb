/* compare.c - POST /compare: a submitted text against another text or a
 * registered document, with the figures /check-original would give the
 * pair and the copied passages on both sides (registry/pair.h). */
#include "compare.h"
#include "answer.h"
#include "api.h"
#include "api_worker.h"
#include "handlers.h"
#include "json.h"

#include <errno.h>
#include <string.h>

void nd_compare_write_integrity(nd_reply *w, const nd_integrity *in)
{
    nd_reply_object(w);
    nd_reply_key(w, "invisible");
    nd_reply_u64(w, in->invisible);
    nd_reply_key(w, "lookalike");
    nd_reply_u64(w, in->lookalike);
    nd_reply_key(w, "annotation");
    nd_reply_u64(w, in->annotation);
    nd_reply_key(w, "reordered");
    nd_reply_u64(w, in->reordered);
    nd_reply_key(w, "traditional");
    nd_reply_u64(w, in->traditional);
    nd_reply_key(w, "script");
    const char *script = nd_integrity_script(in);
    if (script)
        nd_reply_plain(w, script, strlen(script));
    else
        nd_reply_null(w);
    nd_reply_object_end(w);
}

void nd_compare_write_alignment(nd_reply *w, const nd_alignment *al)
{
    nd_reply_object(w);
    nd_reply_key(w, "coverage_a");
    nd_reply_fraction(w, al->coverage_a);
    nd_reply_key(w, "coverage_b");
    nd_reply_fraction(w, al->coverage_b);
    nd_reply_key(w, "spread_a");
    nd_reply_fraction(w, al->spread_a);
    nd_reply_key(w, "spread_b");
    nd_reply_fraction(w, al->spread_b);
    nd_reply_key(w, "long_gaps_a");
    nd_reply_fraction(w, al->long_gaps_a);
    nd_reply_key(w, "long_gaps_b");
    nd_reply_fraction(w, al->long_gaps_b);
    nd_reply_key(w, "tokens_a");
    nd_reply_u64(w, al->na);
    nd_reply_key(w, "tokens_b");
    nd_reply_u64(w, al->nb);
    nd_reply_key(w, "segments");
    nd_reply_u64(w, al->segments);
    nd_reply_object_end(w);
}

void nd_compare_write_pairs(nd_reply *w, const nd_passage_pair *p, size_t n)
{
    nd_reply_array(w);
    for (size_t i = 0; i < n; i++) {
        nd_reply_object(w);
        nd_reply_key(w, "start");
        nd_reply_u64(w, p[i].start);
        nd_reply_key(w, "end");
        nd_reply_u64(w, p[i].end);
        nd_reply_key(w, "source_start");
        nd_reply_u64(w, p[i].source_start);
        nd_reply_key(w, "source_end");
        nd_reply_u64(w, p[i].source_end);
        nd_reply_object_end(w);
    }
    nd_reply_array_end(w);
}

void nd_compare_write(nd_reply *w, const nd_pair *p)
{
    char real[ND_JSON_REAL_MAX];
    nd_reply_object(w);
    nd_reply_key(w, "distance");
    nd_reply_u64(w, p->distance);
    nd_reply_key(w, "similarity");
    nd_reply_raw(w, real, nd_json_format_real(1.0 - (double)p->distance / 64.0, real));
    nd_reply_key(w, "resemblance");
    nd_reply_fraction(w, p->e.resemblance);
    nd_reply_key(w, "containment");
    nd_reply_fraction(w, p->e.containment);
    nd_reply_key(w, "containment_reverse");
    nd_reply_fraction(w, p->e.containment_r);
    nd_reply_key(w, "copied_share");
    nd_reply_fraction(w, p->copied_share);
    nd_reply_key(w, "kind");
    if (p->kind == ND_MATCH_NONE) {
        nd_reply_null(w);
    } else {
        const char *kind = nd_match_kind_name(p->kind);
        nd_reply_plain(w, kind, strlen(kind));
    }
    nd_reply_key(w, "mode");
    const char *mode = p->mode == ND_SKETCH_MODE_CHAR ? "character" : "word";
    nd_reply_plain(w, mode, strlen(mode));
    nd_reply_key(w, "simhash_a");
    nd_reply_simhash(w, p->simhash_a);
    nd_reply_key(w, "simhash_b");
    nd_reply_simhash(w, p->simhash_b);
    /* the counts, in the answer's order */
    const struct {
        const char *key;
        uint64_t v;
    } counts[] = {
        {"chars_a", p->chars_a},       {"chars_b", p->chars_b}, {"shingles_a", p->shingles_a},
        {"shingles_b", p->shingles_b}, {"shared", p->e.shared}, {"sampled_a", p->e.q_n},
        {"sampled_b", p->e.d_n},       {"shift", p->e.shift},   {"core_found", p->e.core_found},
        {"core_n", p->e.core_n},       {"max_gap", p->max_gap},
    };
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        nd_reply_key(w, counts[i].key);
        nd_reply_u64(w, counts[i].v);
    }
    nd_reply_key(w, "alignment");
    nd_compare_write_alignment(w, &p->align);
    nd_reply_key(w, "integrity_a");
    nd_compare_write_integrity(w, &p->integrity_a);
    nd_reply_key(w, "integrity_b");
    nd_compare_write_integrity(w, &p->integrity_b);
    nd_reply_key(w, "passages");
    nd_compare_write_pairs(w, p->pairs,
                           p->npairs < ND_PAIR_PASSAGES ? p->npairs : ND_PAIR_PASSAGES);
    nd_reply_key(w, "passages_truncated");
    nd_reply_bool(w, p->npairs > ND_PAIR_PASSAGES);
    nd_reply_object_end(w);
}

/* Compares the parsed texts and answers. */
static void answer_pair(nd_req *r, const char *a, size_t la, const char *b, size_t lb)
{
    nd_api *api = nd_api_of(r);
    api_worker *aw = aw_of(r);
    nd_question_tools qt = {
        .fp = api->fp, .sk = api->sk, .fps = aw->fps, .sks = aw->sks, .anchors = aw->anchors};
    nd_registry_options o;
    nd_registry_options_from_config(&o, api->cfg);
    int which;
    int rc = nd_pair_compare(&qt, aw->pair, a, la, b, lb, &o.params,
                             o.rewrite != ND_REWRITE_IGNORE ? &o.rewrite_params : NULL,
                             &aw->pair_out, &which);
    if (rc < 0) {
        fingerprint_failed(r, rc, which == 1 ? "text_b" : "text_a");
        return;
    }
    nd_metrics_event(api->metrics, ND_EV_FINGERPRINTS);
    nd_metrics_add(api->metrics, ND_EV_FINGERPRINT_BYTES, la + lb);
    nd_reply w;
    nd_compare_write(nd_api_body_begin(r, &w), &aw->pair_out);
    nd_api_body_send(r, &w, 200);
}

typedef struct registered_pair {
    nd_req *r;
    const nd_compare_request *rq;
    nd_pair_budget budget; /* what text_a may have read (pair.h) */
} registered_pair;

/* 409 source_too_large: id_b's text is over text_a's read budget. */
static void source_too_large(nd_req *r, const nd_compare_request *rq)
{
    nd_reply w;
    nd_api_error_begin(r, &w, "source_too_large",
                       "the document's text is longer than a compare may read for a text_a of "
                       "%zu bytes (%u times its bytes plus %u): compare with text_b",
                       rq->text_a_len, ND_PAIR_READ_FACTOR, ND_PAIR_READ_BASE);
    nd_reply_key(&w, "id");
    nd_reply_string(&w, rq->id_b, rq->id_b_len);
    nd_api_error_send(r, &w, 409);
}

/* nd_store_text()'s visit: B is the kept text (borrowed for the call),
 * compared when within text_a's budget. */
static int compare_kept(void *arg, const char *text, size_t len)
{
    registered_pair *rp = arg;
    if (!nd_pair_budget_take(&rp->budget, len))
        source_too_large(rp->r, rp->rq);
    else
        answer_pair(rp->r, rp->rq->text_a, rp->rq->text_a_len, text, len);
    return 0;
}

/* id_b: compared with the registered document's kept text, or the reason
 * there is none (404 no such document, 409 text_not_kept, 409
 * source_too_large: longer than text_a's read budget, pair.h, as a check
 * omits the passages of such a match; known from its characters before it
 * is read, or from its bytes once read). */
static void answer_registered(nd_req *r, const nd_compare_request *rq)
{
    nd_corpus_doc d;
    int rc = nd_corpus_get(nd_api_corpus(r), rq->id_b, rq->id_b_len, &d);
    if (rc == -EAGAIN) {
        nd_api_loading(r);
        return;
    }
    if (rc < 0) {
        nd_api_id_error(r, 404, "not_found", rq->id_b, rq->id_b_len, "no document with this id");
        return;
    }
    int64_t at = d.registered_at_us;
    size_t chars = d.chars;
    nd_corpus_doc_release(nd_api_corpus(r), &d);
    registered_pair rp = {.r = r, .rq = rq};
    nd_pair_budget_init(&rp.budget, rq->text_a_len);
    if (!nd_pair_budget_may_read(&rp.budget, chars)) {
        source_too_large(r, rq);
        return;
    }
    rc = nd_corpus_text(nd_api_corpus(r), at, compare_kept, &rp);
    if (rc == -ENOENT)
        nd_api_id_error(r, 409, "text_not_kept", rq->id_b, rq->id_b_len,
                        "the store keeps no text for this document (registered with "
                        "--keep-text=false or before texts were kept): compare with text_b");
    else if (rc == -ENOMEM)
        nd_api_error(r, 500, "internal", "out of memory");
    else if (rc < 0)
        nd_api_store_error(r, rc, "the document's text");
}

void handle_compare(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    if (!nd_api_content_kind(r, false))
        return;
    size_t len;
    const char *body = nd_req_body(r, &len);
    if (!body) {
        nd_api_error(r, 500, "internal", "out of memory");
        return;
    }
    nd_request_limits lim = nd_api_limits(api->cfg);
    nd_request_error e;
    nd_compare_request rq;
    if (nd_request_parse_compare(&aw_of(r)->sh.parser, body, len, &lim, &rq, &e) < 0) {
        nd_api_request_error(r, &e);
        return;
    }
    if (rq.id_b)
        answer_registered(r, &rq);
    else
        answer_pair(r, rq.text_a, rq.text_a_len, rq.text_b, rq.text_b_len);
}
