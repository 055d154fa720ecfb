/* check.c - POST /check-original: parse, fingerprint and sketch the text
 * once, ask the registry (registering when asked), answer the verdict with
 * its matches, passages and action; a check with an id judged not original
 * is answered once its detection is durable (pending.c). */
#include "answer.h"
#include "api.h"
#include "api_worker.h"
#include "compare.h"
#include "json.h"
#include "log.h"
#include "pending.h"
#include "handlers.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The similarity 1 - distance / 64 of each distance, as JSON numbers
 * (nd_json_format_real()), made once. */
static char similarity_text[65][ND_JSON_REAL_MAX];
static size_t similarity_len[65];
static pthread_once_t similarity_once = PTHREAD_ONCE_INIT;

static void similarity_init(void)
{
    for (unsigned d = 0; d <= 64; d++)
        similarity_len[d] = nd_json_format_real(1.0 - (double)d / 64.0, similarity_text[d]);
}

static void add_similarity(nd_reply *w, unsigned distance)
{
    pthread_once(&similarity_once, similarity_init);
    unsigned d = distance > 64 ? 64 : distance;
    nd_reply_raw(w, similarity_text[d], similarity_len[d]);
}

static const char *verdict_name(int v)
{
    return nd_verdict_name(v); /* verdict.h: compilation and quotation too */
}

/* A match's "passages": its passages on both sides, when its text was
 * read (mp not NULL and kept); "passages_omitted": "read_budget" instead
 * when its text was over what the check may read (pair.h); else neither. */
static void add_match_pairs(nd_reply *w, const api_match_pairs *mp)
{
    if (mp && mp->omitted) {
        nd_reply_key(w, "passages_omitted");
        nd_reply_plain(w, "read_budget", strlen("read_budget"));
        return;
    }
    if (!mp || !mp->kept)
        return;
    nd_reply_key(w, "passages");
    nd_compare_write_pairs(w, mp->p, mp->n < ND_PAIR_PASSAGES ? mp->n : ND_PAIR_PASSAGES);
}

static void add_match(nd_reply *w, const nd_match *m, bool account_given, const api_match_pairs *mp)
{
    nd_corpus_doc view;
    const nd_corpus_doc *d = &view;
    nd_corpus_match_doc(m, &view);
    nd_reply_object(w);
    nd_reply_key(w, "id");
    nd_reply_string(w, d->id, d->id_len);
    nd_reply_key(w, "simhash");
    nd_reply_simhash(w, d->simhash);
    nd_reply_key(w, "distance");
    nd_reply_u64(w, m->distance);
    nd_reply_key(w, "similarity");
    add_similarity(w, m->distance);
    nd_reply_key(w, "resemblance");
    nd_reply_fraction(w, m->resemblance);
    nd_reply_key(w, "containment");
    nd_reply_fraction(w, m->containment);
    nd_reply_key(w, "kind");
    const char *kind = nd_verdict_kind_name(m->kind);
    nd_reply_plain(w, kind, strlen(kind));
    nd_reply_key(w, "registered_at");
    nd_reply_time(w, d->registered_at_us);
    nd_reply_key(w, "meta");
    nd_api_add_meta(w, d);
    nd_workflow_add_match(w, m, account_given);
    if (m->coverage > 0) { /* aligned by the third stage */
        nd_reply_key(w, "alignment");
        nd_reply_object(w);
        nd_reply_key(w, "coverage");
        nd_reply_fraction(w, m->coverage);
        nd_reply_key(w, "spread");
        nd_reply_fraction(w, m->spread);
        nd_reply_object_end(w);
    }
    add_match_pairs(w, mp);
    nd_reply_object_end(w);
}

/* The counter of neardup_checks_total a verdict (enum nd_verdict) adds to. */
static enum nd_event verdict_event(int verdict)
{
    switch (verdict) {
    case ND_VERDICT_DUPLICATE: return ND_EV_CHECK_DUPLICATE;
    case ND_VERDICT_PARTIAL: return ND_EV_CHECK_PARTIAL;
    case ND_VERDICT_COMPILATION: return ND_EV_CHECK_COMPILATION;
    case ND_VERDICT_QUOTATION: return ND_EV_CHECK_QUOTATION;
    default: return ND_EV_CHECK_ORIGINAL;
    }
}

/* The answer's "integrity": what of the text was read differently from its
 * characters (lib/fold.h), so that a moderator sees an evasion itself; and
 * one count per kind the text carried in neardup_check_integrity_total. */
static void add_integrity(nd_reply *w, nd_metrics *metrics, const nd_integrity *in)
{
    nd_reply_key(w, "integrity");
    nd_compare_write_integrity(w, in);
    if (in->invisible)
        nd_metrics_event(metrics, ND_EV_INTEGRITY_INVISIBLE);
    if (in->lookalike)
        nd_metrics_event(metrics, ND_EV_INTEGRITY_LOOKALIKE);
    if (in->annotation)
        nd_metrics_event(metrics, ND_EV_INTEGRITY_ANNOTATION);
    if (in->reordered)
        nd_metrics_event(metrics, ND_EV_INTEGRITY_REORDERED);
    if (in->traditional)
        nd_metrics_event(metrics, ND_EV_INTEGRITY_SCRIPT);
}

static void reply_check(nd_req *r, op_state *op)
{
    nd_api *api = nd_api_of(r);
    nd_check_res *res = &op->res;
    const nd_check_req *rq = &op->rq;
    nd_reply w;
    nd_reply_object(nd_api_body_begin(r, &w));
    nd_reply_key(&w, "original");
    nd_reply_bool(&w, res->original);
    nd_reply_key(&w, "verdict");
    const char *verdict = verdict_name(res->verdict);
    nd_reply_plain(&w, verdict, strlen(verdict));
    nd_reply_key(&w, "simhash");
    nd_reply_simhash(&w, op->q.simhash);
    nd_reply_key(&w, "chars");
    nd_reply_u64(&w, op->q.chars);
    nd_reply_key(&w, "version");
    nd_reply_plain(&w, ND_RECORD_VERSION, strlen(ND_RECORD_VERSION));
    if (rq->id) {
        nd_reply_key(&w, "id");
        nd_reply_string(&w, rq->id, rq->id_len);
    }
    nd_reply_key(&w, "registered");
    nd_reply_bool(&w, res->registered);
    nd_corpus_doc held;
    if (res->registered && nd_corpus_registered_doc(res, &held)) {
        nd_reply_key(&w, "registered_at");
        nd_reply_time(&w, held.registered_at_us);
    }
    if (rq->id) {
        nd_reply_key(&w, "recorded");
        nd_reply_bool(&w, op->recorded);
    }
    nd_reply_key(&w, "matches");
    nd_reply_array(&w);
    for (size_t i = 0; i < res->nmatches; i++)
        add_match(&w, &res->matches[i], rq->account != NULL,
                  i < op->npaired ? &op->pairs[i] : NULL);
    nd_reply_array_end(&w);
    nd_reply_key(&w, "truncated");
    nd_reply_bool(&w, res->truncated);
    if (res->review) {
        nd_reply_key(&w, "review");
        nd_reply_bool(&w, true);
    }
    nd_reply_key(&w, "passages");
    nd_reply_array(&w);
    size_t np = res->npassages < API_PASSAGES ? res->npassages : API_PASSAGES;
    for (size_t i = 0; i < np; i++) {
        nd_reply_object(&w);
        nd_reply_key(&w, "start");
        nd_reply_u64(&w, res->passages[i].start);
        nd_reply_key(&w, "end");
        nd_reply_u64(&w, res->passages[i].end);
        nd_reply_object_end(&w);
    }
    nd_reply_array_end(&w);
    add_integrity(&w, api->metrics, &op->q.integrity);
    nd_workflow_add_action(&w, res);
    nd_reply_object_end(&w);
    nd_metrics_event(api->metrics, verdict_event(res->verdict));
    if (res->share_counted)
        nd_metrics_event(api->metrics, ND_EV_SHARE_CHECKS);
    if (res->aligned) {
        nd_metrics_event(api->metrics, ND_EV_THIRD_CHECKS);
        nd_metrics_add(api->metrics, ND_EV_THIRD_ALIGNED, res->aligned);
    }
    for (size_t i = 0; i < res->nmatches; i++)
        if (res->matches[i].kind == ND_MATCH_REWRITE) {
            nd_metrics_event(api->metrics, ND_EV_REWRITES);
            break;
        }
    nd_api_body_send(r, &w, 200);
}

/* Moves the matches' passages out of the worker's scratch (an answer that
 * waits while the worker serves others). */
static void keep_pairs(op_state *op)
{
    if (!op->npaired || op->own_pairs)
        return;
    api_match_pairs *own = malloc(op->npaired * sizeof(*own));
    if (!own)
        nd_die_oom(__func__);
    memcpy(own, op->pairs, op->npaired * sizeof(*own));
    op->pairs = own;
    op->own_pairs = true;
}

/* Moves what a waiting answer needs out of the stack and the worker's
 * scratch: op itself (a query's lives on the handler's stack), its id and
 * account, its matches and their passages. Returns the op on the heap. */
static op_state *op_keep(op_state *op)
{
    if (!op->on_heap) {
        op_state *h = malloc(sizeof(*h));
        char *id = op->rq.id ? malloc(op->rq.id_len + 1) : NULL;
        char *account = op->rq.account ? malloc(op->rq.account_len + 1) : NULL;
        if (!h || (op->rq.id && !id) || (op->rq.account && !account))
            nd_die_oom(__func__);
        *h = *op;
        h->on_heap = true;
        if (id) {
            memcpy(id, op->rq.id, op->rq.id_len);
            id[op->rq.id_len] = 0;
        }
        if (account) {
            memcpy(account, op->rq.account, op->rq.account_len);
            account[op->rq.account_len] = 0;
        }
        h->rq.id = id;
        h->rq.account = account;
        h->rq.text = NULL; /* answered without it */
        h->res.passages = h->passages;
        op = h;
    }
    if (op->res.nmatches && op->res.matches != op->own_matches) {
        if (!(op->own_matches = malloc(op->res.nmatches * sizeof(nd_match))))
            nd_die_oom(__func__);
        memcpy(op->own_matches, op->res.matches, op->res.nmatches * sizeof(nd_match));
        op->res.matches = op->own_matches;
    }
    keep_pairs(op);
    op->res.hits = NULL;
    op->res.keys = NULL;
    op->res.ahits = NULL;
    op->res.memo = NULL;
    return op;
}

/* A check with an id judged not original is answered once its detection
 * is durable: the store's commit of it, back on the request's loop. */
static void journal_resume(nd_req *r, int status)
{
    op_state *op = r->op;
    r->op = NULL;
    if (status == 0) {
        op->recorded = true;
        reply_check(r, op);
    } else {
        nd_api_store_error(r, status, "the detection");
    }
    op_free(op);
}

/* Answers a decided check (op is taken): at once, or, for a check with an
 * id judged not original, once its detection is durable. */
static void answer_check(nd_req *r, op_state *op)
{
    nd_store_event ev;
    char *value = op->no_record ? NULL : nd_workflow_detection(&op->rq, &op->res, &ev);
    if (!value) {
        reply_check(r, op);
        op_free(op);
        return;
    }
    op = op_keep(op);
    op->journaled = value;
    op->pend.next = journal_resume;
    r->op = op;
    int rc = nd_corpus_event_put(nd_api_corpus(r), &ev, nd_pending_after, r);
    if (rc < 0) {
        r->op = NULL;
        nd_api_store_error(r, rc, "the detection");
        op_free(op);
    }
}

/* The worker's tools for making a question (question.h). */
static nd_question_tools question_tools(nd_api *api, api_worker *aw)
{
    return (nd_question_tools){
        .fp = api->fp, .sk = api->sk, .fps = aw->fps, .sks = aw->sks, .anchors = aw->anchors,
        .pair = aw->pair};
}

/* Gives the question its stage-2 fields and sketches the text into the
 * worker's scratch, described in *qs (valid until this worker sketches
 * another text). Returns 0 or -errno. */
static int sketch_check(nd_api *api, api_worker *aw, op_state *op, nd_question_scratch *qs)
{
    /* The anchors now; the sketches when stage 1 finds candidates (most
     * queries find none), or now for a registration, which stores one. */
    int mode = op->sketched - 1; /* -1: tokenized again (question.h) */
    op->sketched = 0;            /* a run after a wait sketches again */
    nd_question_tools qt = question_tools(api, aw);
    return nd_question_sketch(&qt, &op->rq, &op->q, mode, false, false, aw->sketch, qs);
}

typedef struct pair_ctx {
    const nd_question_tools *qt;
    nd_pair_scratch *ps;
    api_match_pairs *mp;
    nd_pair_budget *budget; /* the check's, for all its matches */
    bool rewrite;           /* the match is a rewrite: its aligned stretches */
} pair_ctx;

/* nd_store_text()'s visit: the match's kept text against the checked one:
 * the copied passages, or a rewrite's aligned stretches; nothing (the
 * match's passages omitted) when the text is over the check's budget. */
static int pair_visit(void *arg, const char *text, size_t len)
{
    pair_ctx *c = arg;
    nd_alignment al;
    if (!nd_pair_budget_take(c->budget, len)) {
        c->mp->omitted = true;
        return 0;
    }
    if (c->rewrite)
        return nd_pair_align(c->ps, c->qt->sk, c->qt->sks, text, len, &al, NULL, c->mp->p,
                             ND_PAIR_PASSAGES, &c->mp->n);
    return nd_pair_passages(c->qt, c->ps, text, len, c->mp->p, ND_PAIR_PASSAGES, &c->mp->n);
}

/* The passages on both sides of the first API_PAIRED_MATCHES listed
 * matches, each read from its kept text (an identical match's from the
 * checked text itself), against the checked text (still in the worker's
 * scratch: the ask has just sketched it). Only a check that lists matches
 * reads anything, and only within its read budget (pair.h: 16 times its
 * own bytes plus 256 KiB for all its matches, in the order listed): a
 * document whose text is over what is left is not paired (its "passages_
 * omitted"), and one whose characters already are is not even read. The
 * verdict is decided before (nd_registry_check()): passages are shown,
 * they decide nothing. A text not kept, or not read, gives a match
 * without "passages". */
static void pair_matches(nd_req *r, op_state *op)
{
    nd_api *api = nd_api_of(r);
    api_worker *aw = aw_of(r);
    op->pairs = aw->match_pairs;
    op->own_pairs = false;
    op->npaired = op->res.nmatches < API_PAIRED_MATCHES ? op->res.nmatches : API_PAIRED_MATCHES;
    nd_question_tools qt = question_tools(api, aw);
    nd_pair_budget budget;
    nd_pair_budget_init(&budget, op->rq.text_len);
    for (size_t i = 0; i < op->npaired; i++) {
        api_match_pairs *mp = &aw->match_pairs[i];
        const nd_match *m = &op->res.matches[i];
        pair_ctx c = {.qt = &qt,
                      .ps = aw->pair,
                      .mp = mp,
                      .budget = &budget,
                      .rewrite = m->kind == ND_MATCH_REWRITE};
        mp->n = 0;
        mp->omitted = false;
        int rc = 0;
        nd_corpus_doc d;
        nd_corpus_match_doc(m, &d);
        if (m->kind == ND_MATCH_QUOTED) { /* listed, never evidence: its share, nothing read */
            mp->kept = false;
            continue;
        }
        if (m->kind == ND_MATCH_IDENTICAL) /* the text's own passages: nothing to read */
            rc = nd_pair_passages_same(&qt, aw->pair, mp->p, ND_PAIR_PASSAGES, &mp->n);
        else if (!nd_pair_budget_may_read(&budget, d.chars))
            mp->omitted = true; /* too long already by its characters: not read */
        else
            rc = nd_corpus_text(nd_api_corpus(r), d.registered_at_us, pair_visit, &c);
        mp->kept = rc == 0 && !mp->omitted;
        if (rc < 0 && rc != -ENOENT)
            nd_log(ND_LOG_WARN,
                   "a match's text could not be read for its passages (request %s): %s", r->rid,
                   strerror(-rc));
    }
}

static void again_check(nd_req *r);
static int may_register_id(nd_req *r, op_state *op);

/* The check's ask: the registry decides (and registers when asked). */
static int ask_check(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    op_state *op = r->op;
    api_worker *aw = aw_of(r);
    op->res.hits = aw->hits;
    op->res.matches = aw->matches;
    op->res.keys = aw->keys;
    op->res.cap = aw->cap;
    op->res.memo = aw->memo;
    op->res.ahits = aw->ahits;
    op->res.acap = API_ANCHOR_HITS;
    op->res.passages = op->passages;
    op->res.passages_cap = API_PASSAGES;
    int rc = may_register_id(r, op);
    if (rc != 0)
        return rc;
    nd_question_scratch qs;
    rc = sketch_check(api, aw, op, &qs);
    if (rc == 0)
        rc = nd_corpus_check(nd_api_corpus(r), &op->rq, op->audit, r, &op->q, &qs, &op->res,
                             nd_pending_done, r);
    /* A registration answered without a write (a replica's store never
     * commits within the call): the id registered already (existing, or
     * 409 for another text), or judged not original on the documents held
     * here. No expected-sequence check fences it, and the evidence may be
     * deleted or revoked in entries not applied here yet: a replica decides
     * it again on the stream's latest state (pending.h). */
    if (op->rq.do_register && (rc == 0 || rc == -EEXIST) && !nd_pending_at_latest(r)) {
        again_check(r);
        return ND_PENDING_LATEST;
    }
    op->npaired = 0;
    if ((rc == 0 || rc == ND_REG_QUEUED) && op->res.nmatches)
        pair_matches(r, op);
    if (rc == ND_REG_QUEUED)
        keep_pairs(op);
    if (rc == ND_REG_QUEUED && op->res.nmatches) {
        /* Answered after the commit: keep the matches out of the worker's
         * scratch, which the requests meanwhile reuse. */
        if (!(op->own_matches = malloc(op->res.nmatches * sizeof(nd_match))))
            nd_die_oom(__func__);
        memcpy(op->own_matches, op->res.matches, op->res.nmatches * sizeof(nd_match));
        op->res.matches = op->own_matches;
    }
    return rc;
}

/* Drops the last answer before the registry is asked again. */
static void again_check(nd_req *r)
{
    op_state *op = r->op;
    nd_check_res_release(&op->res);
    free(op->own_matches);
    op->own_matches = NULL;
    if (op->own_pairs)
        free(op->pairs);
    op->pairs = NULL;
    op->npaired = 0;
    op->own_pairs = false;
}

static void check_answer(nd_req *r, void *state, int rc, bool completed)
{
    nd_api *api = nd_api_of(r);
    op_state *op = state;
    if (completed) {
        nd_metrics_event(api->metrics, rc == 0 ? ND_EV_REGISTERED : ND_EV_REGISTER_FAILED);
        if (rc == 0) {
            answer_check(r, op);
            return;
        }
        nd_api_store_error(r, rc, "the registration");
    } else if (rc == 0) {
        answer_check(r, op);
        return;
    } else if (rc == -EEXIST) { /* another text, or a registration's account or meta */
        nd_metrics_event(api->metrics, ND_EV_ID_CONFLICT);
        nd_reply w;
        nd_api_error_begin(r, &w, "id_conflict", "%s", nd_conflict_message(op->res.conflict));
        nd_reply_key(&w, "id");
        nd_reply_string(&w, op->rq.id, op->rq.id_len);
        const char *field = nd_conflict_field(op->res.conflict);
        if (field) {
            nd_reply_key(&w, "field");
            nd_reply_plain(&w, field, strlen(field));
        }
        nd_api_error_send(r, &w, 409);
    } else if (rc == -EAGAIN) {
        nd_api_loading(r);
    } else if (rc == -ENOMEM) {
        nd_api_error(r, 500, "internal", "out of memory");
    } else {
        nd_api_store_error(r, rc, "the registration");
    }
    op_free(op);
}

static const nd_pending_steps nd_check_steps = {ask_check, again_check, check_answer};

/* Asks the registry for the check in r->op and answers, now or after the
 * commit (pending.c). */
static void run_check(nd_req *r)
{
    nd_pending_start(r, &nd_check_steps);
}

static void reply_too_short(nd_req *r, uint32_t chars)
{
    nd_api *api = nd_api_of(r);
    nd_metrics_event(api->metrics, ND_EV_TOO_SHORT);
    nd_reply w;
    nd_api_error_begin(r, &w, "text_too_short",
                       "the text has %u characters after normalization; at least %u are needed to "
                       "judge it",
                       chars, api->cfg->min_chars);
    nd_reply_key(&w, "chars");
    nd_reply_u64(&w, chars);
    nd_reply_key(&w, "min_chars");
    nd_reply_u64(&w, api->cfg->min_chars);
    nd_api_error_send(r, &w, 422);
}

/* Makes the question of the text (question.h): tokenized once for both
 * stages, the anchors in the worker's scratch (op->sketched, for
 * sketch_check()) and the fingerprint from the same tokens. Returns 0,
 * ND_QUESTION_TOO_SHORT, -EILSEQ or -ENOMEM. */
static int fingerprint_check(nd_req *r, op_state *op)
{
    nd_api *api = nd_api_of(r);
    api_worker *aw = aw_of(r);
    nd_question_tools qt = question_tools(api, aw);
    int mode;
    int rc = nd_question_make(&qt, &op->rq, &op->q, api->cfg->min_chars, &mode);
    if (rc < 0)
        return rc;
    nd_metrics_event(api->metrics, ND_EV_FINGERPRINTS);
    nd_metrics_add(api->metrics, ND_EV_FINGERPRINT_BYTES, op->rq.text_len);
    op->sketched = mode + 1;
    return rc;
}

/* What the caller of a check may write (answer.h): a registration needs
 * the right to name its account (403 forbidden), a detection is recorded
 * only when the caller may name the check's account (else *no_record).
 * An account the caller may not name is not evidence of anything: the
 * check is judged as if it named none. A client (a token without a role)
 * names any account, and its registrations are stored with its name: it
 * owns them. A write without an account from a token that acts for
 * exactly one account is that account's; from a token of several, a
 * registration is refused (400 invalid_field account) and a detection not
 * recorded. Registering an id that exists needs the right to change that
 * document (may_register_id(), on every run of the registration). Without
 * a token configured every caller may do everything. Returns false once
 * answered. */
static bool check_rights(nd_req *r, nd_check_req *rq, bool *no_record)
{
    nd_api_identify(r);
    *no_record = false;
    const nd_auth_identity *who = r->who;
    if (!rq->account && (rq->do_register || rq->id) && who && who->naccounts) {
        size_t len;
        const char *account = nd_auth_account(who, 0, &len);
        if (who->naccounts == 1) {
            rq->account = account;
            rq->account_len = len;
        } else if (rq->do_register) {
            nd_api_invalid_field(r, "account",
                                 "the token \"%s\" acts for %u accounts: name the one this "
                                 "document is registered for in account",
                                 who->name, who->naccounts);
            return false;
        }
    }
    if (rq->account && !nd_api_may_name(r, rq->account, rq->account_len)) {
        if (rq->do_register) {
            nd_api_forbidden(r, "the token \"%s\" does not act for this account", r->client);
            return false;
        }
        rq->account = NULL; /* judged as a check without an account */
        rq->account_len = 0;
    }
    if (rq->id && !(rq->account ? nd_api_may_name(r, rq->account, rq->account_len)
                                : nd_api_is_operator(r) || nd_api_is_client(r)))
        *no_record = true;
    if (rq->do_register && nd_api_is_client(r)) {
        rq->client = who->name;
        rq->client_len = strlen(who->name);
    }
    return true; /* an id registered already: may_register_id() */
}

/* Registering an id that is registered already writes to that document
 * (an upgrade in place takes the request's meta): it needs the right to
 * change that document, asked on every run of the registration. Returns
 * 0 (it may, or no document holds the id), ND_PENDING_LATEST (a replica
 * would answer 403 on the document as it holds it: the document may have
 * been deleted, or registered for the caller, in entries not applied here
 * yet, so that is decided on the stream's latest state), or
 * ND_PENDING_ANSWERED once answered 403 (op freed). */
static int may_register_id(nd_req *r, op_state *op)
{
    nd_corpus_doc d;
    if (!op->rq.do_register || !op->rq.id ||
        nd_corpus_get(nd_api_corpus(r), op->rq.id, op->rq.id_len, &d) != 0)
        return 0;
    bool owns = nd_api_owns(r, &d);
    if (!owns && !nd_pending_at_latest(r)) {
        nd_corpus_doc_release(nd_api_corpus(r), &d);
        return ND_PENDING_LATEST;
    }
    bool may = owns || nd_api_may_change(r, &d); /* else answered 403 */
    nd_corpus_doc_release(nd_api_corpus(r), &d);
    if (may)
        return 0;
    r->op = NULL;
    op_free(op);
    return ND_PENDING_ANSWERED;
}

void handle_check(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    if (!nd_api_authorized_read(r) || !nd_api_content_kind(r, false))
        return;
    size_t len;
    const char *body = nd_req_body(r, &len);
    if (!body) {
        nd_api_error(r, 500, "internal", "out of memory");
        return;
    }
    nd_request_limits lim = nd_api_limits(api->cfg);
    nd_request_error e;
    /* The request is parsed into its one shape, which goes to the registry
     * as it is. Only a registration can wait for the store and outlive this
     * call; a query is answered now, from state on the stack (no
     * allocation). */
    op_state query = {0}, *op = &query;
    nd_check_req *rq = &query.rq;
    if (nd_request_parse_check(&aw_of(r)->sh.parser, body, len, &lim, rq, &e) < 0) {
        nd_api_request_error(r, &e);
        return;
    }
    if (rq->do_register && !nd_api_authorized(r)) /* before any work is done */
        return;
    if (!check_rights(r, rq, &query.no_record))
        return;
    /* meta is read into a tree only for an authorized registration (and
     * bounded before that); a query ignores it. */
    if (rq->do_register && nd_request_check_meta(rq, &lim, &e) < 0) {
        nd_api_request_error(r, &e);
        return;
    }
    /* reprint/whitelist: validated on every check, kept by a registration
     * (only requests that carry them pay for it). */
    if ((rq->policy_in.reprint || rq->policy_in.whitelist_raw) && nd_policy_of_check(rq, &e) < 0) {
        free(rq->meta);
        nd_api_request_error(r, &e);
        return;
    }
    bool wait_latest = rq->latest && !rq->do_register && nd_corpus_replicated(nd_api_corpus(r));
    if (rq->do_register || wait_latest) {
        /* It may be decided again once the worker's parser has served other
         * requests (a query waits for the replica to catch up): its own
         * copies of the text and the id. */
        char *id = NULL, *text;
        if (!(op = calloc(1, sizeof(*op))) || (rq->id && !(id = malloc(rq->id_len + 1))) ||
            !(text = malloc(rq->text_len + 1)))
            nd_die_oom(__func__);
        *op = query; /* the meta and the policy are op's from here */
        op->on_heap = true;
        if (id) {
            memcpy(id, rq->id, rq->id_len);
            id[rq->id_len] = 0;
        }
        memcpy(text, rq->text, rq->text_len);
        op->rq.id = id;
        op->rq.text = text;
        if (rq->do_register) { /* its audit entry, in its transaction */
            op->audit = nd_workflow_register_audit;
        }
        if (rq->account) {
            char *account = malloc(rq->account_len + 1);
            if (!account)
                nd_die_oom(__func__);
            memcpy(account, rq->account, rq->account_len);
            account[rq->account_len] = 0;
            op->rq.account = account;
        }
    }
    int rc = fingerprint_check(r, op);
    if (rc < 0) {
        fingerprint_failed(r, rc, "text");
    } else if (rc == ND_QUESTION_TOO_SHORT) {
        reply_too_short(r, op->q.chars);
    } else {
        if (wait_latest) {
            op->sketched = 0; /* the worker's scratch serves others meanwhile */
            when_latest(r, op, run_check);
            return;
        }
        r->op = op;
        run_check(r);
        return;
    }
    op_free(op);
}
