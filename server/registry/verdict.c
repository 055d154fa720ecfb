/* verdict.c - the registry's answer to a question: candidates from the
 * SimHash index and the anchor index, each verified against its sketch
 * (stage 2), the verdict and the action from the evidence among them; and
 * the documents a restored claim predates (the same comparison, the other
 * way). Reads the tables docs.c keeps (docs_internal.h). */
#include "verdict_internal.h"
#include "claim.h"
#include "memo.h"
#include "pair.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Final order: the evidence, then the other matches; in each, identical,
 * near duplicates, partial copies; each by resemblance (highest first),
 * containment, distance, time, id. */
static int match_cmp(const void *a, const void *b)
{
    const nd_match *x = a, *y = b;
    if (x->evidence != y->evidence)
        return x->evidence ? -1 : 1;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    if (x->resemblance != y->resemblance)
        return x->resemblance > y->resemblance ? -1 : 1;
    if (x->containment != y->containment)
        return x->containment > y->containment ? -1 : 1;
    if (x->distance != y->distance)
        return x->distance < y->distance ? -1 : 1;
    if (x->doc->registered_at_us != y->doc->registered_at_us)
        return x->doc->registered_at_us < y->doc->registered_at_us ? -1 : 1;
    size_t n = x->doc->id_len < y->doc->id_len ? x->doc->id_len : y->doc->id_len;
    int c = memcmp(nd_doc_id(x->doc), nd_doc_id(y->doc), n);
    return c ? c : (x->doc->id_len < y->doc->id_len ? -1 : x->doc->id_len > y->doc->id_len);
}

static int doc_ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const nd_match *)a)->doc, y = (uintptr_t)((const nd_match *)b)->doc;
    return x < y ? -1 : x > y;
}

/* Queries the index for every entry within k of simhash into res->hits, or,
 * when there are more than res->cap of them, into a heap array of all of
 * them (*heap, the caller frees; the rare path of a dense cluster: the
 * verdict must not depend on which hits a cut kept). Returns the
 * number of hits, or -errno. */
static long query_all(nd_registry *reg, uint64_t simhash, unsigned k, nd_check_res *res,
                      nd_index_hit **hits, nd_index_hit **heap)
{
    size_t found = 0, cap = res->cap;
    *hits = res->hits;
    *heap = NULL;
    for (;;) {
        int rc = nd_index_query(reg->index, simhash, k, *hits, cap, &found);
        if (rc == 0)
            return (long)found;
        if (rc != -E2BIG)
            return rc;
        cap = found + found / 4 + 64; /* entries come and go meanwhile */
        nd_index_hit *h = realloc(*heap, cap * sizeof(*h));
        if (!h)
            return -ENOMEM;
        *hits = *heap = h;
    }
}

#define MF_PENDING 1u /* waiting for its first commit: never evidence */
#define MF_DIRECT 2u  /* verified from its in-memory sketch, not the store's */
#define MF_GRAY 4u    /* a gray-zone candidate of the third stage (gray()) */

/* A candidate found by either stage-1 index: a match if live, not self and
 * registered before before_us. Adds it to m[*n] (a new reference).
 * Table locked (or writer held). */
static void add_candidate(nd_doc *d, const nd_doc *self, int64_t before_us, uint64_t simhash,
                          bool locked, nd_match *m, size_t *n)
{
    if (d == self || d->registered_at_us >= before_us)
        return;
    uint8_t flags = 0;
    if (atomic_load_explicit(&d->state, memory_order_acquire) == DOC_PENDING) {
        if (!locked)
            return; /* its extra may go at any moment; never evidence anyway */
        flags = MF_PENDING;
    }
    m[*n] = (nd_match){
        .doc = doc_ref(d), .distance = nd_simhash_distance(d->simhash, simhash), .flags = flags};
    m[*n].coverage = m[*n].spread = m[*n].gap = 0;
    m[*n].rank = (uint32_t)*n;
    (*n)++;
}

/* True when d's sketch size is known and rules out listing it for the
 * question q, sketched in qs (nd_sketch_reachable(): exact, so the answer
 * is the same as after a full comparison). A document with the question's
 * text is always verified. */
static bool cannot_match(const nd_verdict_params *bound, const nd_question *q,
                         const nd_question_scratch *qs, const nd_doc *d)
{
    uint32_t z = atomic_load_explicit(&d->sk_size, memory_order_relaxed);
    if (!(z & ND_DOC_SK_KNOWN) || memcmp(d->text_hash, q->text_hash, 16) == 0)
        return false;
    return !nd_sketch_reachable(&qs->sketch[(z >> 30) & 1], (z >> 16) & 31, z & 0xFFFF, bound);
}

/* d as a claim (claim.h); pointers borrowed from d. */
static inline nd_claim claim_of(const nd_doc *d)
{
    return (nd_claim){.registered_at_us = d->registered_at_us,
                      .account = nd_doc_account(d),
                      .account_len = d->account_len,
                      .policy = nd_doc_policy(d),
                      .policy_len = d->policy_len,
                      .status = d->status};
}

/* Whether d has the request's (non-empty) account: the claim rule's. */
static inline bool same_account(const nd_doc *d, const nd_check_req *rq)
{
    nd_claim c = claim_of(d);
    return nd_claim_same_account(&c, rq->account, rq->account_len);
}

/* Whether e and d have the same (non-empty) account: the claim rule's. */
static inline bool same_claimant(const nd_doc *e, const nd_doc *d)
{
    nd_claim c = claim_of(e);
    return nd_claim_same_account(&c, nd_doc_account(d), d->account_len);
}

/* Whether d, verified as a match, makes rq's article not original: the
 * claim rule's (nd_claim_is_evidence()). */
static inline bool is_evidence(const nd_doc *d, const nd_check_req *rq)
{
    nd_claim c = claim_of(d);
    return nd_claim_is_evidence(&c, rq->account, rq->account_len);
}

/* Most documents holding a single query anchor verified per anchor. */
#define SINGLE_PER_ANCHOR_MAX 4

/* Only the first candidates stage 1 found (SimHash hits, then the anchor
 * candidates best first) are compared far enough to be gray: the rest are
 * cut short at the listing thresholds (the sources' bound, share.h), as
 * without the third stage. */
#define ND_REWRITE_GRAY_FIRST 4

typedef struct verify_ctx {
    const nd_question *q;
    const nd_question_scratch *qs;
    const nd_verdict_params *params; /* the registry's */
    /* What a comparison is cut short by: the first candidates (rank below
     * ND_REWRITE_GRAY_FIRST) at the gray zone's bound when the third
     * stage is on (gray not NULL), every other at rest's: the sources'
     * (source_params(): down to the share a listed source holds) or,
     * with that rule off, params. */
    const nd_verdict_params *gray;
    const nd_verdict_params *rest;
    nd_check_res *res;
    nd_match *m;
} verify_ctx;

/* The bound candidate m is compared to (verify_ctx). */
static inline const nd_verdict_params *bound_of(const verify_ctx *v, const nd_match *m)
{
    return m->rank < ND_REWRITE_GRAY_FIRST && v->gray ? v->gray : v->rest;
}

/* The gray zone: candidates that stage 2 leaves below every threshold
 * but whose estimate shares at least this much with the query are
 * aligned (the third stage), at most ND_REWRITE_CANDIDATES per check. A
 * fifth of the words edited leaves about half of the word shingles and a
 * third of the character ones, two fifths a fifth and a tenth
 * (proto/align.md). */
#define ND_REWRITE_GRAY 0.05
/* A rewrite follows the whole text: the values it shares with the query
 * lie all along the query (no run of more than this share of the query's
 * sampled values, in text order, without a found one: the estimate's
 * max_gap; rewrites of the dev set reach 0.27, documents sharing one of
 * four paragraphs 0.21 at the 5th percentile and 0.44 at the median),
 * and it is of a comparable size (its distinct shingles within this
 * factor of the query's either way). */
#define ND_REWRITE_GRAY_GAP 0.25
#define ND_REWRITE_GRAY_SIZE 2.5

/* Whether stage 2's estimate e of q against d makes d a gray-zone
 * candidate; *gap gets its max gap (nd_sketch_max_gap()) when it does. */
static bool gray(const nd_sketch *q, const nd_sketch *d, const nd_sketch_estimate *e, uint32_t *gap)
{
    if (e->containment < ND_REWRITE_GRAY || e->q_n == 0 || !e->q_shingles || !d->shingles)
        return false;
    double size = (double)d->shingles / (double)e->q_shingles;
    if (size > ND_REWRITE_GRAY_SIZE || size < 1.0 / ND_REWRITE_GRAY_SIZE)
        return false;
    *gap = nd_sketch_max_gap(q, d, e);
    return (double)*gap <= ND_REWRITE_GRAY_GAP * (double)e->q_n;
}

/* Verifies candidate i against its encoded sketch (NULL: none stored). */
static void verify_one(verify_ctx *v, size_t i, const uint8_t *buf, size_t len)
{
    nd_match *m = &v->m[i];
    const nd_question_scratch *qs = v->qs;
    bool same = memcmp(m->doc->text_hash, v->q->text_hash, 16) == 0;
    nd_sketch dsk;
    nd_sketch_estimate e = {0};
    bool have = buf && nd_sketch_decode(buf, len, &dsk) == 0;
    const nd_verdict_params *bound = bound_of(v, m);
    if (have && !(atomic_load_explicit(&m->doc->sk_size, memory_order_relaxed) & ND_DOC_SK_KNOWN))
        atomic_store_explicit(&m->doc->sk_size, sk_size_pack(dsk.mode, dsk.shift, dsk.n),
                              memory_order_relaxed); /* a loaded document's, first read */
    if (have && same)
        nd_sketch_compare(nd_sketch_for(qs->sketch, &dsk), &dsk, &e);
    else if (have) /* cut short when it cannot be listed: then kind none */
        nd_sketch_compare_bounded(nd_sketch_for(qs->sketch, &dsk), &dsk, bound, &e);
    else if (same)
        e.resemblance = e.containment = e.containment_r = 1.0;
    m->kind = have || same ? (uint8_t)nd_match_classify(&e, same, v->params) : ND_MATCH_NONE;
    uint32_t gap;
    if (have && m->kind == ND_MATCH_NONE && bound == v->gray &&
        gray(nd_sketch_for(qs->sketch, &dsk), &dsk, &e, &gap)) {
        m->flags |= MF_GRAY;
        m->gap = e.q_n ? (float)gap / (float)e.q_n : 1.0f;
    }
    m->resemblance = e.resemblance;
    m->containment = e.containment;
    /* Kept for a registration's second pass: what a committed document
     * read gives (a pending one's extra, or a record not found, may
     * change by then). */
    if (v->res->memo && (have || same) && !(m->flags & MF_PENDING))
        nd_memo_put(v->res->memo, m->doc, e.resemblance, e.containment, m->gap, m->kind,
                    (float)bound->min_containment, m->flags & MF_GRAY);
}

/* m's stage-2 figures from the first pass of a registration when kept
 * there and compared at least as far as bound asks (m then needs no
 * read). gray: the gray zone's bound, or NULL. */
static bool verify_from_memo(const nd_memo *memo, nd_match *m, const nd_verdict_params *bound,
                             const nd_verdict_params *gray)
{
    const nd_memo_entry *me = memo && !(m->flags & MF_PENDING) ? nd_memo_get(memo, m->doc) : NULL;
    if (!me || me->reach > (float)bound->min_containment)
        return false;
    m->kind = me->kind;
    m->resemblance = me->resemblance;
    m->containment = me->containment;
    if (me->gray && bound == gray) {
        m->flags |= MF_GRAY;
        m->gap = me->gap;
    }
    return true;
}

static int verify_visit(void *arg, size_t i, const uint8_t *buf, size_t len)
{
    verify_ctx *v = arg;
    if (!(v->m[i].flags & MF_DIRECT))
        verify_one(v, i, buf, len);
    return 0;
}

/* Stage 2: verifies m[0..n) in place (kind ND_MATCH_NONE: not a match).
 * A document's sketch is read from its extra (memory mode; pending ones,
 * writer held), from res->memo (a registration's first pass), or, in
 * one read transaction, from the store. */
static int verify_all(nd_registry *reg, const nd_question *q, const nd_question_scratch *qs,
                      nd_check_res *res, nd_match *m, int64_t *keys, size_t n,
                      const nd_verdict_params *gray, const nd_verdict_params *rest)
{
    verify_ctx v = {.q = q,
                    .qs = qs,
                    .params = &reg->opts.params,
                    .gray = gray,
                    .rest = rest,
                    .res = res,
                    .m = m};
    size_t from_store = 0;
    for (size_t i = 0; i < n; i++) {
        nd_doc *d = m[i].doc;
        const nd_verdict_params *b = bound_of(&v, &m[i]);
        if (verify_from_memo(res->memo, &m[i], b, gray)) {
            m[i].flags |= MF_DIRECT;
            keys[i] = -1;
        } else if (cannot_match(b, q, qs, d)) {
            /* its size alone rules it out: not read */
            m[i].flags |= MF_DIRECT;
            m[i].kind = ND_MATCH_NONE;
            keys[i] = -1;
        } else if (m[i].flags & MF_PENDING) {
            m[i].flags |= MF_DIRECT;
            keys[i] = -1;
            const nd_doc_extra *x = doc_extra(d);
            verify_one(&v, i, nd_doc_extra_sketch(x), x ? x->sketch_len : 0);
        } else {
            keys[i] = d->registered_at_us;
            from_store++;
        }
    }
    if (!from_store)
        return 0;
    return nd_store_sketches(reg->store, keys, n, verify_visit, &v);
}

#define ND_REWRITE_CANDIDATES 4
/* Of those, the ones aligned to look for a rewrite (the most evenly shared
 * first); the others are aligned only when one is found, for its
 * boilerplate discount. */
#define ND_REWRITE_TRIES 1
/* Another aligned document marking this share of a rewrite's aligned
 * tokens is another version of its text, not a document sharing a part. */
#define ND_REWRITE_VERSION 0.8
/* What a rewrite's document must explain of the query on its own, as a
 * share of the coverage the rule asks (nd_rewrite_min_coverage(): 0.5, so
 * 0.35 of the query): tokens that two other aligned documents explain too
 * are boilerplate. */
#define ND_REWRITE_OWN 0.7

/* The registry's thresholds with the gray zone's containment: a bounded
 * comparison then runs far enough to give a gray candidate its figures. */
static nd_verdict_params gray_params(const nd_verdict_params *p)
{
    nd_verdict_params g = *p;
    g.min_containment = ND_REWRITE_GRAY;
    if (g.min_resemblance > ND_REWRITE_GRAY)
        g.min_resemblance = ND_REWRITE_GRAY;
    return g;
}

/* The registry's thresholds with a listed source's containment (share.h):
 * a bounded comparison then runs far enough to give a source holding
 * that share of the query its figures. The rule off: p itself. */
static nd_verdict_params source_params(const nd_verdict_params *p, const nd_share_params *share)
{
    nd_verdict_params s = *p;
    if (nd_share_on(share) && share->min_source_share < s.min_containment)
        s.min_containment = share->min_source_share;
    return s;
}

typedef struct third_ctx {
    nd_pair_scratch *pair;
    const nd_sketcher *sk;
    const nd_sk_scratch *a;
    nd_alignment al;
    nd_integrity integrity_b;
    int rc;
} third_ctx;

/* nd_store_text()'s visit: the candidate's kept text aligned with A. */
static int third_visit(void *arg, const char *text, size_t len)
{
    third_ctx *c = arg;
    size_t total;
    c->rc = nd_pair_align(c->pair, c->sk, c->a, text, len, &c->al, &c->integrity_b, NULL, 0,
                          &total);
    return 0;
}

/* Order of the gray candidates: the most contained, then the earliest. */
static bool gray_before(const nd_match *x, const nd_match *y)
{
    if (x->containment != y->containment)
        return x->containment > y->containment;
    return x->doc->registered_at_us < y->doc->registered_at_us;
}

_Static_assert(ND_REWRITE_CANDIDATES <= ND_MEMO_THIRD_MAX, "the memo keeps every pick");

/* Stage 3's outcome from a registration's first pass when it picked the
 * same candidates (picked[0..np), m[pick[k]]'s documents) in the same
 * order: nothing read or aligned again. */
static bool third_from_memo(const nd_memo *memo, nd_check_res *res, nd_match *m, const size_t *pick,
                            nd_doc *const *picked, size_t np)
{
    const nd_memo_third *t = nd_memo_get_third(memo, picked, np);
    if (!t)
        return false;
    for (size_t k = 0; k < np; k++) {
        m[pick[k]].coverage = t->coverage[k];
        m[pick[k]].spread = t->spread[k];
        if (t->rewrite[k])
            m[pick[k]].kind = ND_MATCH_REWRITE;
    }
    res->aligned = t->aligned;
    return true;
}

/* Keeps stage 3's outcome for the picks (as third_from_memo() reads it)
 * when this is a registration's first pass. */
static void third_to_memo(nd_memo *memo, const nd_check_res *res, const nd_match *m,
                          const size_t *pick, nd_doc *const *picked, size_t np)
{
    nd_memo_third t = {.npick = np, .aligned = res->aligned};
    for (size_t k = 0; k < np; k++) {
        t.pick[k] = picked[k];
        t.rewrite[k] = m[pick[k]].kind == ND_MATCH_REWRITE;
        t.coverage[k] = m[pick[k]].coverage;
        t.spread[k] = m[pick[k]].spread;
    }
    nd_memo_put_third(memo, &t);
}

/* The query's text and its length: the request's, or (an import line,
 * whose request gave its text up) the scratch's. */
static const char *query_text(const nd_check_req *rq, const nd_question_scratch *qs, size_t *len)
{
    *len = rq->text ? rq->text_len : qs->text_len;
    return rq->text ? rq->text : qs->text;
}

/* Gives qs the query's tokens for passages when it has none (an import
 * line: its tokens went with its batch): its text tokenized again into
 * the third stage's scratch, once per check and only when a stage needs
 * them. Returns 0 (qs->passages still NULL without a third stage's
 * scratch) or -EILSEQ / -ENOMEM. */
static int query_tokens(const nd_check_req *rq, nd_question_scratch *qs)
{
    if (qs->passages || !qs->third || !qs->sk)
        return 0;
    size_t len;
    const char *text = query_text(rq, qs, &len);
    return nd_pair_hold_a(qs->third, qs->sk, text, len, &qs->passages);
}

/* Stage 3: the best ND_REWRITE_CANDIDATES gray candidates of m[0..n)
 * (kind none, committed, gray(): MF_GRAY) read from their
 * kept texts and aligned with the query. A candidate that the rule calls
 * a rewrite (nd_rewrite_is()) becomes kind ND_MATCH_REWRITE when it still
 * covers enough of the query without the tokens that another aligned
 * candidate, not a rewrite itself, explains too: what several registered
 * documents share (a template, a licence, a page's furniture) counts for
 * none of them, while two registered copies of one original (both
 * rewrites) still count for each. A text not kept (or not readable) is
 * left as it was. Sets res->aligned. Returns 0 or -ENOMEM. */
static int third_stage(nd_registry *reg, const nd_check_req *rq, const nd_question *q,
                       nd_question_scratch *qs, nd_check_res *res, nd_match *m, size_t n)
{
    size_t pick[ND_REWRITE_CANDIDATES], np = 0;
    for (size_t i = 0; i < n; i++) {
        if (m[i].kind != ND_MATCH_NONE || (m[i].flags & MF_PENDING) || !(m[i].flags & MF_GRAY))
            continue;
        size_t at = np < ND_REWRITE_CANDIDATES ? np++ : ND_REWRITE_CANDIDATES;
        if (at == ND_REWRITE_CANDIDATES && !gray_before(&m[i], &m[pick[at - 1]]))
            continue;
        if (at == ND_REWRITE_CANDIDATES)
            at--;
        for (; at && gray_before(&m[i], &m[pick[at - 1]]); at--)
            pick[at] = pick[at - 1];
        pick[at] = i;
    }
    if (!np)
        return 0;
    nd_doc *picked[ND_REWRITE_CANDIDATES];
    for (size_t k = 0; k < np; k++)
        picked[k] = m[pick[k]].doc;
    if (res->memo && third_from_memo(res->memo, res, m, pick, picked, np))
        return 0;
    int hold = query_tokens(rq, qs);
    if (hold < 0)
        return hold == -ENOMEM ? hold : 0;
    third_ctx c = {.pair = qs->third, .sk = qs->sk, .a = qs->passages};
    /* The order of the tries: the most evenly shared first (the smallest
     * max gap), then as picked. */
    size_t order[ND_REWRITE_CANDIDATES];
    for (size_t k = 0; k < np; k++) {
        size_t at = k;
        for (; at && m[pick[order[at - 1]]].gap > m[pick[k]].gap; at--)
            order[at] = order[at - 1];
        order[at] = k;
    }
    bool rewrite[ND_REWRITE_CANDIDATES] = {false}, other[ND_REWRITE_CANDIDATES] = {false};
    double need[ND_REWRITE_CANDIDATES];
    size_t found = 0;
    for (size_t t = 0; t < np; t++) {
        /* The first ND_REWRITE_TRIES look for a rewrite; the rest are
         * aligned only for the discount of one found. */
        if (t == ND_REWRITE_TRIES && !found)
            break;
        size_t k = order[t];
        nd_match *x = &m[pick[k]];
        c.rc = -ENOENT;
        int rc = nd_store_text(reg->store, x->doc->registered_at_us, third_visit, &c);
        if (rc == -ENOMEM || c.rc == -ENOMEM)
            return -ENOMEM;
        if (rc < 0 || c.rc < 0)
            continue; /* no text kept: stage 2's answer stands */
        if ((rc = nd_pair_keep_marks(qs->third, (unsigned)k)) < 0)
            return rc;
        res->aligned++;
        double spread = c.al.spread_a < c.al.spread_b ? c.al.spread_a : c.al.spread_b;
        x->coverage = (float)c.al.coverage_a;
        x->spread = (float)spread;
        const nd_rewrite_params *rp = &reg->opts.rewrite_params;
        rewrite[k] = nd_rewrite_is(&c.al, rp, &q->integrity, &c.integrity_b);
        other[k] = !rewrite[k];
        found += rewrite[k];
        need[k] = nd_rewrite_min_coverage(rp, &q->integrity, &c.integrity_b);
    }
    for (size_t k = 0; k < np; k++) {
        if (!rewrite[k])
            continue;
        /* Another version of k's text (aligned on nearly all of k's
         * tokens) explains nothing away: only documents sharing a part. */
        bool part[ND_REWRITE_CANDIDATES] = {false};
        size_t mine = nd_pair_marks_overlap(qs->third, (unsigned)k, (unsigned)k);
        for (size_t j = 0; j < np; j++)
            part[j] = other[j] &&
                      (double)nd_pair_marks_overlap(qs->third, (unsigned)k, (unsigned)j) <
                          ND_REWRITE_VERSION * (double)mine;
        size_t na, own = nd_pair_unique_marks(qs->third, (unsigned)k, part, (unsigned)np, &na);
        if (na && (double)own >= ND_REWRITE_OWN * need[k] * (double)na)
            m[pick[k]].kind = ND_MATCH_REWRITE;
    }
    if (res->memo)
        third_to_memo(res->memo, res, m, pick, picked, np);
    return 0;
}

typedef struct passages_ctx {
    const nd_question_scratch *qs;
    nd_check_res *res;
} passages_ctx;

static int passages_visit(void *arg, size_t i, const uint8_t *buf, size_t len)
{
    passages_ctx *c = arg;
    nd_sketch dsk;
    (void)i;
    if (buf && nd_sketch_decode(buf, len, &dsk) == 0)
        c->res->npassages = nd_sketch_passages(c->qs->passages, &dsk, c->res->passages,
                                               c->res->passages_cap);
    return 0;
}

/* A partial copy's passages: the query's spans found in its best partial
 * evidence among m[0..n) (the most contained, then the earliest: not the
 * order of the candidates, so that passages are reproducible), from its
 * stored sketch, read again (one read, and only for this verdict).
 * Returns 0 or a store read's -errno. */
static int best_passages(nd_registry *reg, const nd_question_scratch *qs, nd_check_res *res,
                         const nd_match *m, size_t n)
{
    const nd_match *best = NULL;
    for (size_t i = 0; i < n; i++)
        if (m[i].kind == ND_MATCH_PARTIAL_COPY && m[i].evidence &&
            (!best || m[i].containment > best->containment ||
             (m[i].containment == best->containment &&
              m[i].doc->registered_at_us < best->doc->registered_at_us)))
            best = &m[i];
    if (!best)
        return 0;
    int64_t key = best->doc->registered_at_us;
    passages_ctx c = {.qs = qs, .res = res};
    return nd_store_sketches(reg->store, &key, 1, passages_visit, &c);
}

/* ---- the share step (share.h) ---- */

typedef struct share_ctx {
    const nd_question_scratch *qs;
    nd_passage (*spans)[ND_SHARE_SPANS_MAX];
    size_t *nspans;
    const size_t *source_of; /* a read's index -> its source's */
    bool *sampled;           /* [source]: its passages from a sample */
} share_ctx;

/* nd_store_sketches()'s visit: a source's passages in the query, from its
 * stored sketch (nd_sketch_passages()). */
static int share_visit(void *arg, size_t i, const uint8_t *buf, size_t len)
{
    share_ctx *c = arg;
    size_t k = c->source_of[i];
    nd_sketch dsk;
    c->nspans[k] = 0;
    if (!buf || nd_sketch_decode(buf, len, &dsk) < 0) {
        c->sampled[k] = true; /* nothing to count it with */
        return 0;
    }
    size_t np = nd_sketch_passages(c->qs->passages, &dsk, c->spans[k], ND_SHARE_SPANS_MAX);
    if (np > ND_SHARE_SPANS_MAX || dsk.shift || nd_sketch_for(c->qs->sketch, &dsk)->shift)
        c->sampled[k] = true; /* a sample of the shingles, or more passages than counted */
    c->nspans[k] = np < ND_SHARE_SPANS_MAX ? np : ND_SHARE_SPANS_MAX;
    return 0;
}

/* Sources below the bar whose passages come from their kept texts (the
 * most contained first; the others' from their sketches), within the
 * request's read budget (pair.h). */
#define ND_SHARE_EXACT_MAX 4
/* Listed matches whose sketches are read for their passages (the most
 * contained), of which ND_SHARE_SOURCES_MAX are counted. */
#define ND_SHARE_READ_MAX 96

typedef struct exact_ctx {
    nd_question_tools qt;
    nd_pair_scratch *ps;
    nd_pair_budget *budget;
    nd_passage_pair pairs[ND_PAIR_PASSAGES];
    size_t npairs;
    bool paired;
} exact_ctx;

/* nd_store_text()'s visit: a source's exact passages in the query. */
static int exact_visit(void *arg, const char *text, size_t len)
{
    exact_ctx *c = arg;
    c->paired = false;
    if (!nd_pair_budget_take(c->budget, len))
        return 0;
    int rc = nd_pair_passages(&c->qt, c->ps, text, len, c->pairs, ND_PAIR_PASSAGES, &c->npairs);
    c->paired = rc == 0 && c->npairs <= ND_PAIR_PASSAGES;
    return rc == -ENOMEM ? rc : 0;
}

/* The exact passages of the sources below the bar among picks
 * m[pick[0..np)) (at most ND_SHARE_EXACT_MAX, within the request's read
 * budget) into spans/nspans, in place of their sketches'; exact[k] set
 * for those. Only when the rule may turn on them (two such sources, or a
 * quotation share below 1): else a listed source's share is its
 * sketch's. Returns 0 or -ENOMEM. */
static int exact_passages(nd_registry *reg, const nd_check_req *rq, const nd_question_scratch *qs,
                          const nd_match *m, const size_t *pick, size_t np,
                          nd_passage (*spans)[ND_SHARE_SPANS_MAX], size_t *nspans, bool *exact)
{
    if (!qs->third || !qs->sk || !qs->passages || !reg->opts.keep_text)
        return 0;
    /* Only when the verdict may turn on them: two sources below the bar
     * that could be evidence (a compilation), or quotations judged. */
    size_t below = 0;
    for (size_t k = 0; k < np; k++)
        below += m[pick[k]].kind == ND_MATCH_QUOTED && is_evidence(m[pick[k]].doc, rq);
    if (below < 2 && !(below && reg->opts.share.min_quote_share < 1.0))
        return 0;
    nd_pair_budget budget;
    size_t text_len;
    query_text(rq, qs, &text_len);
    nd_pair_budget_init(&budget, text_len);
    exact_ctx c = {.qt = {.sk = qs->sk, .sks = (nd_sk_scratch *)qs->passages, .pair = qs->third},
                   .ps = qs->third,
                   .budget = &budget};
    for (size_t k = 0, done = 0; k < np && done < ND_SHARE_EXACT_MAX; k++) {
        if (m[pick[k]].kind != ND_MATCH_QUOTED)
            continue;
        done++;
        c.paired = false;
        int rc = nd_store_text(reg->store, m[pick[k]].doc->registered_at_us, exact_visit, &c);
        if (rc == -ENOMEM)
            return rc;
        if (rc < 0 || !c.paired)
            continue; /* no text kept, or over the budget: its sketch's */
        size_t n = 0;
        for (size_t j = 0; j < c.npairs && n < ND_SHARE_SPANS_MAX; j++)
            spans[k][n++] = (nd_passage){c.pairs[j].start, c.pairs[j].end};
        nspans[k] = n;
        exact[k] = true;
    }
    return 0;
}

/* The code points of text[0..len) (valid UTF-8: the sketch read it). */
static uint32_t code_points(const char *text, size_t len)
{
    uint32_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)text[i] & 0xC0) != 0x80;
    return n;
}

/* Whether x is counted before y: the most contained, then the earliest. */
static bool share_before(const nd_match *x, const nd_match *y)
{
    if (x->containment != y->containment)
        return x->containment > y->containment;
    return x->doc->registered_at_us < y->doc->registered_at_us;
}

/* The share step: the passages of the listed matches m[0..n) (the
 * ND_SHARE_READ_MAX most contained; an identical one's are the whole
 * query, the others' from their stored sketches, one read; of those, the
 * ND_SHARE_SOURCES_MAX counted: the ones at the bar, then those adding
 * most to the union, their passages exact from their kept texts when the
 * rule may turn on them) give each its share, res->copied_share, and the
 * kinds of those below the bar
 * (ND_MATCH_QUOTED so far): compiled or quotation (evidence), or quoted.
 * When no evidence reaches the bar (bar false) and the sources below it
 * make a compilation or a quotation, res->passages gets the union of
 * their passages. Returns 0 or a store read's -errno. */
static int share_step(nd_registry *reg, const nd_check_req *rq, const nd_question_scratch *qs,
                      nd_check_res *res, nd_match *m, size_t n, bool bar)
{
    /* The candidates: the ND_SHARE_READ_MAX most contained, each with its
     * sketch's passages (one read). */
    size_t cand[ND_SHARE_READ_MAX], nc = 0;
    for (size_t i = 0; i < n; i++) {
        size_t at = nc < ND_SHARE_READ_MAX ? nc++ : ND_SHARE_READ_MAX;
        if (at == ND_SHARE_READ_MAX) {
            res->share_estimated = true; /* more sources than counted */
            if (!share_before(&m[i], &m[cand[at - 1]]))
                continue;
            at--;
        }
        for (; at && share_before(&m[i], &m[cand[at - 1]]); at--)
            cand[at] = cand[at - 1];
        cand[at] = i;
    }
    size_t text_len;
    const char *text = query_text(rq, qs, &text_len);
    uint32_t cp = text ? code_points(text, text_len) : 0;
    nd_passage cspans[ND_SHARE_READ_MAX][ND_SHARE_SPANS_MAX];
    size_t ncspans[ND_SHARE_READ_MAX] = {0}, source_of[ND_SHARE_READ_MAX], nread = 0;
    int64_t keys[ND_SHARE_READ_MAX];
    bool sampled[ND_SHARE_READ_MAX] = {false};
    for (size_t k = 0; k < nc; k++) {
        const nd_match *x = &m[cand[k]];
        if (x->kind == ND_MATCH_IDENTICAL) {
            cspans[k][0] = (nd_passage){0, cp};
            ncspans[k] = 1;
            continue;
        }
        if (x->kind == ND_MATCH_REWRITE)
            res->share_estimated = true; /* reworded: few shingles shared */
        keys[nread] = x->doc->registered_at_us;
        source_of[nread++] = k;
    }
    share_ctx c = {
        .qs = qs, .spans = cspans, .nspans = ncspans, .source_of = source_of, .sampled = sampled};
    int rc = nread ? nd_store_sketches(reg->store, keys, nread, share_visit, &c) : 0;
    if (rc < 0)
        return rc;
    res->share_counted = true;
    /* The sources counted: those at the bar, then greedily the one adding
     * the most to their union (versions of one text, or pages sharing a
     * template, add nothing: they do not crowd the others out). */
    size_t pick[ND_SHARE_SOURCES_MAX], from[ND_SHARE_SOURCES_MAX], np = 0;
    bool chosen[ND_SHARE_READ_MAX] = {false};
    const nd_passage *lists[ND_SHARE_SOURCES_MAX + 1] = {NULL};
    size_t len[ND_SHARE_SOURCES_MAX + 1] = {0};
    for (size_t k = 0; k < nc && np < ND_SHARE_SOURCES_MAX; k++)
        if (m[cand[k]].kind != ND_MATCH_QUOTED) {
            chosen[k] = true;
            lists[np] = cspans[k];
            len[np] = ncspans[k];
            from[np] = k;
            pick[np++] = cand[k];
        }
    int64_t own[ND_SHARE_READ_MAX]; /* what each holds: a bound on what it adds */
    for (size_t k = 0; k < nc; k++) {
        const nd_passage *one = cspans[k];
        own[k] = nd_share_union(&one, &ncspans[k], 1, NULL, 0, NULL);
    }
    while (np < ND_SHARE_SOURCES_MAX) {
        int64_t base = nd_share_union(lists, len, np, NULL, 0, NULL), gain = 0;
        size_t best = nc;
        for (size_t k = 0; k < nc; k++) {
            if (chosen[k] || own[k] <= gain)
                continue;
            lists[np] = cspans[k];
            len[np] = ncspans[k];
            int64_t g = nd_share_union(lists, len, np + 1, NULL, 0, NULL) - base;
            if (g > gain)
                gain = g, best = k;
        }
        if (best == nc)
            break;
        chosen[best] = true;
        lists[np] = cspans[best];
        len[np] = ncspans[best];
        from[np] = best;
        pick[np++] = cand[best];
    }
    nd_passage spans[ND_SHARE_SOURCES_MAX][ND_SHARE_SPANS_MAX];
    size_t nspans[ND_SHARE_SOURCES_MAX];
    bool exact[ND_SHARE_SOURCES_MAX] = {false};
    for (size_t k = 0; k < np; k++) {
        memcpy(spans[k], cspans[from[k]], ncspans[from[k]] * sizeof(nd_passage));
        nspans[k] = ncspans[from[k]];
    }
    if (nd_share_on(&reg->opts.share) &&
        (rc = exact_passages(reg, rq, qs, m, pick, np, spans, nspans, exact)) < 0)
        return rc;
    for (size_t k = 0; k < np; k++)
        res->share_estimated |= sampled[from[k]] && !exact[k];
    nd_share_source src[ND_SHARE_SOURCES_MAX];
    for (size_t k = 0; k < np; k++) {
        const nd_match *x = &m[pick[k]];
        src[k] = (nd_share_source){.p = spans[k],
                                   .n = nspans[k],
                                   .eligible = is_evidence(x->doc, rq),
                                   .above = x->kind != ND_MATCH_QUOTED};
    }
    nd_share_answer ans;
    nd_share_decide(src, np, cp, &reg->opts.share, &ans);
    res->copied_share = ans.copied_share;
    for (size_t k = 0; k < np; k++) {
        /* a rewrite shares few shingles: its part is what the third stage
         * aligned (estimated) */
        const nd_match *x = &m[pick[k]];
        if (x->kind == ND_MATCH_REWRITE && src[k].share < x->coverage) {
            src[k].share = x->coverage;
            if (src[k].eligible && res->copied_share < src[k].share)
                res->copied_share = src[k].share;
        }
    }
    /* The candidates not counted (nothing to add): their own shares, from
     * their sketches; quoted. */
    for (size_t k = 0; k < nc; k++) {
        if (chosen[k])
            continue;
        nd_share_source one = {.p = cspans[k], .n = ncspans[k]};
        nd_share_answer a1;
        nd_share_decide(&one, 1, cp, NULL, &a1);
        m[cand[k]].share = (float)one.share;
        res->share_estimated |= sampled[k];
    }
    size_t nl = 0;
    for (size_t k = 0; k < np; k++) {
        nd_match *x = &m[pick[k]];
        x->share = (float)src[k].share;
        if (x->kind != ND_MATCH_QUOTED)
            continue;
        x->kind = src[k].kind == ND_SHARE_KIND_COMPILED    ? ND_MATCH_COMPILED
                  : src[k].kind == ND_SHARE_KIND_QUOTATION ? ND_MATCH_QUOTATION
                                                           : ND_MATCH_QUOTED;
        x->evidence = x->kind != ND_MATCH_QUOTED;
        if (x->evidence) {
            lists[nl] = src[k].p;
            len[nl++] = src[k].n;
        }
    }
    if (!bar && nl && res->passages) {
        size_t total = 0;
        nd_share_union(lists, len, nl, res->passages, res->passages_cap, &total);
        res->npassages = total;
    }
    return 0;
}

/* m's action towards rq's account (m evidence): its claim's
 * (nd_claim_action()), as the source's is decided. */
static void match_action(const nd_registry *reg, const nd_check_req *rq, nd_match *m)
{
    nd_claim c = claim_of(m->doc);
    nd_claim_decision dec;
    nd_claim_action(&c, rq->account, rq->account_len, reg->opts.default_reprint, &dec);
    m->action = (uint8_t)dec.action;
    m->show_source = dec.show_source;
    m->may_modify = dec.may_modify;
}

const char *nd_verdict_kind_name(unsigned kind)
{
    switch (kind) {
    case ND_MATCH_COMPILED: return "compiled";
    case ND_MATCH_QUOTATION: return "quotation";
    case ND_MATCH_QUOTED: return "quoted";
    default: return nd_match_kind_name((nd_match_kind)kind);
    }
}

nd_doc *nd_match_source(const nd_match *m, size_t n)
{
    nd_doc *source = NULL;
    for (size_t i = 0; i < n; i++)
        if (m[i].evidence && (!source || m[i].doc->registered_at_us < source->registered_at_us))
            source = m[i].doc;
    return source;
}

const char *nd_verdict_name(int verdict)
{
    switch (verdict) {
    case ND_VERDICT_DUPLICATE: return "duplicate";
    case ND_VERDICT_PARTIAL: return "partial_copy";
    case ND_VERDICT_COMPILATION: return "compilation";
    case ND_VERDICT_QUOTATION: return "quotation";
    default: return "original";
    }
}

const char *nd_conflict_field(int conflict)
{
    switch (conflict) {
    case ND_CONFLICT_TEXT: return "text";
    case ND_CONFLICT_ACCOUNT: return "account";
    case ND_CONFLICT_META: return "meta";
    default: return NULL;
    }
}

const char *nd_conflict_message(int conflict)
{
    switch (conflict) {
    case ND_CONFLICT_ACCOUNT: return "this id is registered with the same text under another account";
    case ND_CONFLICT_META: return "this id is registered with the same text and other meta";
    default: return "this id is registered with a different text";
    }
}

/* The action for rq's account given the source (the earliest evidence, or
 * NULL: original), with a new reference to it in res->source. */
static void decide(const nd_registry *reg, const nd_check_req *rq, nd_doc *source,
                   nd_check_res *res)
{
    res->action = ND_ACTION_PUBLISH;
    res->show_source = res->may_modify = false;
    res->source = NULL;
    if (!source)
        return;
    nd_claim c = claim_of(source);
    nd_claim_decision dec;
    nd_claim_action(&c, rq->account, rq->account_len, reg->opts.default_reprint, &dec);
    res->action = dec.action;
    res->show_source = dec.show_source;
    res->may_modify = dec.may_modify;
    res->source = doc_ref(source);
}

/* Whether stages 2 and 3 leave x below the bar holding a source's share
 * (share.h: --min-source-share). */
static bool below_bar(const nd_registry *reg, const nd_match *x)
{
    return nd_share_on(&reg->opts.share) && x->kind == ND_MATCH_NONE &&
           x->containment >= reg->opts.share.min_source_share;
}

/* A containment (the query's shingles, sampled) may understate the share
 * its passages give (code points, short gaps bridged): the sources below
 * the bar are taken as pieces from this part of a share's threshold. */
#define PIECE_SLACK 0.5

/* Whether the sources below the bar among m[0..n) (pending ones too)
 * that could be evidence may make a compilation or a quotation: the sum
 * of their containments (a bound on their union) reaches min_copied_share,
 * or one reaches min_quote_share, each times PIECE_SLACK. */
static bool may_piece(const nd_registry *reg, const nd_check_req *rq, const nd_match *m, size_t n)
{
    const nd_share_params *p = &reg->opts.share;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (!below_bar(reg, &m[i]) || !is_evidence(m[i].doc, rq))
            continue;
        if (m[i].containment >= PIECE_SLACK * p->min_quote_share)
            return true;
        sum += m[i].containment;
    }
    return sum >= PIECE_SLACK * p->min_copied_share;
}

/* Answers a check: candidates from the SimHash index within k and from the
 * anchor index, each verified with the sketches (stage 2); res->matches
 * gets the verified documents: live ones (a document waiting for its first
 * commit is never listed), except self and anything registered
 * at or after before_us (INT64_MAX: none). Each is marked same_account /
 * evidence (the claim rule); the evidence comes first, and the verdict, original
 * and the action (with its source, the earliest evidence) come from the
 * evidence only. Sorted and cut to max_matches (then truncated is set); the
 * verdict and the source are exact whatever the cut (every SimHash hit is
 * verified, however many). locked: the caller holds the writer (then the
 * tables are stable without the read lock). When wait_on is not NULL and no
 * evidence was found but a pending document verified as one (or is a
 * gray-zone candidate of the third stage, whose text is not committed
 * yet), *wait_on gets
 * it (a borrowed pointer, valid while the writer is held): the caller
 * waits for its commit and decides again. */
int nd_verdict_find(nd_registry *reg, const nd_check_req *rq, const nd_question *q,
                    const nd_question_scratch *qs, const nd_doc *self, int64_t before_us,
                    nd_check_res *res, bool locked, nd_doc **wait_on)
{
    uint64_t simhash = q->simhash;
    unsigned max_verify = reg->opts.max_verify;
    /* qs, given the query's tokens when a stage needs them (query_tokens()) */
    nd_question_scratch own = qs ? *qs : (nd_question_scratch){.sketch = NULL};
    nd_index_hit *hits, *heap_hits;
    long nh = query_all(reg, simhash, rq->k, res, &hits, &heap_hits);
    if (nh < 0)
        return (int)nh;
    size_t nhits = (size_t)nh, nah = 0, nmulti = 0, nq = 0;
    bool verify = qs && qs->sketch;
    if (verify && q->nprobe && res->ahits && max_verify) {
        nq = q->nprobe < ND_ANCHOR_QUERY_MAX ? q->nprobe : ND_ANCHOR_QUERY_MAX;
        nah = nd_anchor_index_query(reg->anchors, q->probe, nq, res->ahits, res->acap, NULL);
        nah = nah < res->acap ? nah : res->acap;
        while (nmulti < nah && res->ahits[nmulti].shared >= ND_VERDICT_MIN_SHARED)
            nmulti++; /* best first: these lead */
    }
    /* Candidates from the anchors: every document holding at least
     * ND_VERDICT_MIN_SHARED of the query's anchors, and of those holding
     * one, the `per` registered first under each anchor (max_verify in all,
     * at least one per anchor): documents added later cannot push an
     * earlier one out, nor can one anchor's holders crowd out another's. */
    size_t per = nq ? (max_verify < ND_VERIFY_MAX ? max_verify : ND_VERIFY_MAX) / nq : 0;
    per = nq && per < 1 ? 1 : per > SINGLE_PER_ANCHOR_MAX ? SINGLE_PER_ANCHOR_MAX : per;
    size_t nsingle = nah - nmulti < nq * per ? nah - nmulti : nq * per;
    nd_match *m = res->matches, *heap_m = NULL;
    int64_t *keys = res->keys, *heap_keys = NULL;
    if (nhits + nmulti + nsingle > res->cap) {
        heap_m = malloc((nhits + nmulti + nsingle) * sizeof(*heap_m));
        heap_keys = malloc((nhits + nmulti + nsingle) * sizeof(*heap_keys));
        if (!heap_m || !heap_keys) {
            free(heap_m);
            free(heap_keys);
            free(heap_hits);
            return -ENOMEM;
        }
        m = heap_m;
        keys = heap_keys;
    }
    size_t n = 0;
    /* The slots of the hits are read under the table lock; a question with
     * no hit (most originals) has none to read and leaves the lock's
     * cache line alone (every reader writes it). */
    bool read_slots = !locked && (nhits || nah);
    if (read_slots)
        pthread_rwlock_rdlock(&reg->table);
    for (size_t i = 0; i < nhits; i++) {
        uint32_t slot = hits[i].slot;
        nd_doc *d = slot < reg->nslots ? reg->slots[slot] : NULL;
        /* A slot freed and reused since the lock-free query: skip it unless
         * its new document is as near (then it is a real hit, possibly
         * reported twice: duplicates are dropped below). */
        if (d && nd_simhash_distance(d->simhash, simhash) == hits[i].distance)
            add_candidate(d, self, before_us, simhash, locked, m, &n);
    }
    for (size_t i = 0; i < nmulti; i++) {
        uint32_t slot = res->ahits[i].slot;
        nd_doc *d = slot < reg->nslots ? reg->slots[slot] : NULL;
        if (d && !nd_doc_stale(d))
            add_candidate(d, self, before_us, simhash, locked, m, &n);
    }
    /* The single-anchor ones: the earliest per under each anchor (insertion
     * into pick[anchor], earliest first). */
    nd_doc *pick[ND_ANCHOR_QUERY_MAX][SINGLE_PER_ANCHOR_MAX];
    uint8_t npick[ND_ANCHOR_QUERY_MAX] = {0};
    for (size_t i = nmulti; i < nah && nsingle; i++) {
        uint32_t slot = res->ahits[i].slot, a = res->ahits[i].anchor;
        nd_doc *d = slot < reg->nslots ? reg->slots[slot] : NULL;
        if (!d || nd_doc_stale(d) || d == self || d->registered_at_us >= before_us || a >= nq)
            continue;
        nd_doc **p = pick[a];
        if (npick[a] == per && d->registered_at_us >= p[per - 1]->registered_at_us)
            continue;
        size_t at = npick[a] < per ? npick[a]++ : per - 1;
        for (; at && d->registered_at_us < p[at - 1]->registered_at_us; at--)
            p[at] = p[at - 1];
        p[at] = d;
    }
    for (size_t a = 0; a < nq && nsingle; a++)
        for (size_t k = 0; k < npick[a]; k++)
            add_candidate(pick[a][k], self, before_us, simhash, locked, m, &n);
    if (read_slots)
        pthread_rwlock_unlock(&reg->table);
    free(heap_hits);
    /* The same document twice (both indexes, or a reused slot): once. */
    qsort(m, n, sizeof(nd_match), doc_ptr_cmp);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u && m[u - 1].doc == m[i].doc) {
            if (m[i].rank < m[u - 1].rank)
                m[u - 1].rank = m[i].rank; /* its best place in stage 1 */
            nd_doc_release(m[i].doc);
            continue;
        }
        m[u++] = m[i];
    }
    n = u;
    res->npassages = 0;
    int rc = 0;
    if (verify && n && qs->lazy) /* the query's sketches: needed now */
        rc = nd_sketch_query_finish(qs->lazy, qs->sketch);
    bool third = verify && qs->third && reg->opts.rewrite != ND_REWRITE_IGNORE;
    nd_verdict_params gray = gray_params(&reg->opts.params);
    nd_verdict_params rest = source_params(&reg->opts.params, &reg->opts.share);
    res->aligned = 0;
    res->review = false;
    if (verify)
        rc = rc ? rc : verify_all(reg, q, qs, res, m, keys, n, third ? &gray : NULL, &rest);
    if (third && rc == 0)
        rc = third_stage(reg, rq, q, &own, res, m, n);
    else if (!verify)
        for (size_t i = 0; i < n; i++)
            m[i].kind = ND_MATCH_NEAR_DUPLICATE;
    /* What stages 2 and 3 leave below the bar holding a source's share:
     * listed for now (the share step decides its kind). */
    bool pieces = verify && rc == 0 && may_piece(reg, rq, m, n);
    if (verify && rc == 0)
        for (size_t i = 0; i < n; i++)
            if (below_bar(reg, &m[i]) && !(m[i].flags & MF_PENDING))
                m[i].kind = ND_MATCH_QUOTED;
    /* Keep the verified matches, marked; note a pending document that
     * would be evidence. */
    nd_doc *pending = NULL;
    size_t nev = 0;
    u = 0;
    for (size_t i = 0; i < n; i++) {
        nd_doc *d = m[i].doc;
        bool verified = rc == 0 && m[i].kind != ND_MATCH_NONE;
        bool evidence = verified && m[i].kind != ND_MATCH_QUOTED && is_evidence(d, rq);
        if (evidence && m[i].kind == ND_MATCH_REWRITE && reg->opts.rewrite == ND_REWRITE_REVIEW) {
            evidence = false; /* listed for a human to confirm */
            res->review = true;
        }
        if (evidence && (m[i].flags & MF_PENDING) && !pending)
            pending = d; /* the registry's reference keeps it (writer held) */
        /* A gray-zone candidate waiting for its first commit has no kept
         * text to align yet: wait for it too, as for pending evidence. */
        if (third && rc == 0 && !pending && (m[i].flags & MF_PENDING) && (m[i].flags & MF_GRAY) &&
            is_evidence(d, rq))
            pending = d;
        /* And for a source below the bar when those could make a
         * compilation or a quotation: the share step counts committed ones
         * only (an import's splice judged right behind its sources). */
        if (pieces && !pending && (m[i].flags & MF_PENDING) && below_bar(reg, &m[i]) &&
            is_evidence(d, rq))
            pending = d;
        if (!verified || (m[i].flags & MF_PENDING)) {
            nd_doc_release(d);
            continue;
        }
        m[i].same_account = same_account(d, rq);
        m[i].evidence = evidence;
        m[i].share = -1.0f;
        m[i].action = ND_ACTION_PUBLISH;
        m[i].show_source = m[i].may_modify = false;
        nev += evidence;
        m[u++] = m[i];
    }
    n = u;
    free(heap_keys);
    res->copied_share = 0;
    res->share_estimated = res->share_counted = false;
    if (rc == 0 && n && qs && qs->sketch && (rc = query_tokens(rq, &own)) == 0 && own.passages)
        rc = share_step(reg, rq, &own, res, m, n, nev > 0);
    if (rc < 0) {
        for (size_t i = 0; i < n; i++) /* kept ones (the share step failed) */
            nd_doc_release(m[i].doc);
        free(heap_m);
        res->npassages = 0;
        return rc;
    }
    for (size_t i = 0; i < n; i++) /* the share step's evidence */
        nev += m[i].evidence && (m[i].kind == ND_MATCH_COMPILED || m[i].kind == ND_MATCH_QUOTATION);
    nd_doc *source = nd_match_source(m, n); /* the earliest claim decides */
    qsort(m, n, sizeof(nd_match), match_cmp);
    res->verdict = ND_VERDICT_ORIGINAL;
    if (nev)
        res->verdict = m[0].kind == ND_MATCH_PARTIAL_COPY ? ND_VERDICT_PARTIAL
                       : m[0].kind == ND_MATCH_COMPILED   ? ND_VERDICT_COMPILATION
                       : m[0].kind == ND_MATCH_QUOTATION  ? ND_VERDICT_QUOTATION
                                                          : ND_VERDICT_DUPLICATE;
    if (res->verdict == ND_VERDICT_PARTIAL && qs && qs->passages &&
        (rc = best_passages(reg, qs, res, m, n)) < 0) {
        for (size_t i = 0; i < n; i++)
            nd_doc_release(m[i].doc);
        free(heap_m);
        return rc;
    }
    decide(reg, rq, source, res);
    for (size_t i = 0; i < n; i++)
        if (m[i].evidence)
            match_action(reg, rq, &m[i]);
    res->truncated = false;
    if (n > reg->opts.max_matches) {
        for (size_t i = reg->opts.max_matches; i < n; i++)
            nd_doc_release(m[i].doc);
        n = reg->opts.max_matches;
        res->truncated = true;
    }
    if (heap_m) {
        memcpy(res->matches, heap_m, n * sizeof(*heap_m));
        free(heap_m);
    }
    res->nmatches = n;
    res->original = nev == 0;
    if (wait_on)
        *wait_on = nev == 0 ? pending : NULL;
    return 0;
}

/* The documents a restore of d now predates (nd_claim_change.predated):
 * the SimHash hits within k of d that are live, active, of another
 * account than d's, registered after d and verified as matches of d
 * (their stored sketch compared with d's as a check of their text would,
 * or the same text). Writer held. *out gets new references (the caller
 * releases each and frees the array), earliest first, at most
 * max_matches (more: *truncated). Returns 0 or -errno. */
typedef struct predate_ctx {
    nd_doc *const *cand; /* cand[0]: d */
    const nd_verdict_params *params;
    bool *listed;
    nd_sketch self;
    bool have_self;
} predate_ctx;

static int predate_visit(void *arg, size_t i, const uint8_t *buf, size_t len)
{
    predate_ctx *pc = arg;
    if (i == 0) {
        pc->have_self = buf && nd_sketch_decode(buf, len, &pc->self) == 0;
        return 0;
    }
    if (memcmp(pc->cand[i]->text_hash, pc->cand[0]->text_hash, 16) == 0) {
        pc->listed[i] = true;
        return 0;
    }
    nd_sketch q;
    if (!pc->have_self || !buf || nd_sketch_decode(buf, len, &q) < 0 || q.mode != pc->self.mode)
        return 0; /* nothing to verify with: not listed */
    nd_sketch_estimate e;
    nd_sketch_compare(&q, &pc->self, &e);
    pc->listed[i] = nd_match_classify(&e, 0, pc->params) != ND_MATCH_NONE;
    return 0;
}

static int registered_cmp(const void *a, const void *b)
{
    const nd_doc *x = *(nd_doc *const *)a, *y = *(nd_doc *const *)b;
    return x->registered_at_us < y->registered_at_us ? -1
                                                     : x->registered_at_us > y->registered_at_us;
}

static int doc_addr_cmp(const void *a, const void *b)
{
    const nd_doc *x = *(nd_doc *const *)a, *y = *(nd_doc *const *)b;
    return (uintptr_t)x < (uintptr_t)y ? -1 : (uintptr_t)x > (uintptr_t)y;
}

int nd_verdict_find_predated(nd_registry *reg, nd_doc *d, unsigned k,
                             const nd_verdict_params *params, nd_doc ***out, size_t *nout,
                             bool *truncated)
{
    *out = NULL;
    *nout = 0;
    *truncated = false;
    if (nd_doc_stale(d)) /* not in the index */
        return 0;
    nd_verdict_params def;
    if (!params) {
        nd_verdict_params_default(&def);
        params = &def;
    }
    size_t cap = 64, found = 0;
    nd_index_hit *hits = NULL;
    int rc;
    for (;;) {
        nd_index_hit *h = realloc(hits, cap * sizeof(*h));
        if (!h) {
            free(hits);
            return -ENOMEM;
        }
        hits = h;
        if ((rc = nd_index_query(reg->index, d->simhash, k, hits, cap, &found)) != -E2BIG)
            break;
        cap = found + found / 4 + 64;
    }
    nd_doc **cand = rc == 0 ? malloc((found + 1) * sizeof(*cand)) : NULL;
    int64_t *keys = rc == 0 ? malloc((found + 1) * sizeof(*keys)) : NULL;
    bool *listed = rc == 0 ? calloc(found + 1, sizeof(*listed)) : NULL;
    if (rc == 0 && (!cand || !keys || !listed))
        rc = -ENOMEM;
    size_t n = 0;
    if (rc == 0) {
        cand[n++] = d;
        for (size_t i = 0; i < found; i++) {
            nd_doc *e = hits[i].slot < reg->nslots ? reg->slots[hits[i].slot] : NULL;
            int st = e ? atomic_load(&e->state) : DOC_GONE;
            if (!e || e == d || (st != DOC_LIVE && st != DOC_AMENDING) || nd_doc_stale(e) ||
                e->status != ND_CLAIM_ACTIVE || e->registered_at_us <= d->registered_at_us ||
                same_claimant(e, d))
                continue;
            cand[n++] = e;
        }
        /* The same document twice (a reused slot): once. */
        qsort(cand + 1, n - 1, sizeof(*cand), doc_addr_cmp);
        size_t u = 1;
        for (size_t i = 1; i < n; i++)
            if (cand[i] != cand[u - 1])
                cand[u++] = cand[i];
        n = u;
        for (size_t i = 0; i < n; i++)
            keys[i] = cand[i]->registered_at_us;
        predate_ctx pc = {.cand = cand, .params = params, .listed = listed};
        if (n > 1)
            rc = nd_store_sketches(reg->store, keys, n, predate_visit, &pc);
    }
    size_t u = 0;
    for (size_t i = 1; rc == 0 && i < n; i++)
        if (listed[i])
            cand[u++] = doc_ref(cand[i]);
    if (u) {
        qsort(cand, u, sizeof(*cand), registered_cmp);
        if (u > ND_STORE_SUPERSEDE_MAX) {
            for (size_t i = ND_STORE_SUPERSEDE_MAX; i < u; i++)
                nd_doc_release(cand[i]);
            u = ND_STORE_SUPERSEDE_MAX;
            *truncated = true;
        }
        *out = cand;
        *nout = u;
        cand = NULL;
    }
    free(cand);
    free(keys);
    free(listed);
    free(hits);
    return rc;
}

void nd_check_res_release(nd_check_res *res)
{
    for (size_t i = 0; i < res->nmatches; i++)
        nd_doc_release(res->matches[i].doc);
    res->nmatches = 0;
    nd_doc_release(res->doc);
    res->doc = NULL;
    nd_doc_release(res->source);
    res->source = NULL;
}

void nd_verdict_clear(nd_check_res *res)
{
    res->original = res->registered = res->existing = res->truncated = false;
    res->review = false;
    res->aligned = 0;
    res->nmatches = 0;
    res->npassages = 0;
    res->copied_share = 0;
    res->share_estimated = res->share_counted = false;
    res->verdict = ND_VERDICT_ORIGINAL;
    res->doc = NULL;
    res->action = ND_ACTION_PUBLISH;
    res->source = NULL;
    res->show_source = res->may_modify = false;
    res->wait_at_us = 0;
    res->conflict = ND_CONFLICT_NONE;
}
