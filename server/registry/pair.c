/* pair.c - two texts compared as a check compares them (pair.h). */
#include "pair.h"
#include "share.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct nd_pair_scratch {
    nd_sk_scratch *sks; /* B's tokens */
    nd_sk_scratch *ska; /* A's, for nd_pair_hold_a() (created on first use) */
    nd_anchors ska_anchors[2];
    nd_sketch ska_sketch[2];
    bool holds_a;
    nd_aligner *al;
    nd_align_segment seg[ND_PAIR_PASSAGES];
    uint8_t *marks[ND_PAIR_MARK_SLOTS]; /* nd_pair_keep_marks() */
    size_t marks_cap[ND_PAIR_MARK_SLOTS], marks_n[ND_PAIR_MARK_SLOTS];
    uint8_t marks_mode[ND_PAIR_MARK_SLOTS]; /* the sketch mode A's tokens were in */
    uint8_t last_mode;                      /* of the last alignment */
    nd_anchors anchors[2];
    nd_sketch sa[2], sb[2];
    nd_question qa, qb;
    nd_pairing *pg;
};

int nd_pair_scratch_create(nd_pair_scratch **out)
{
    nd_pair_scratch *s = calloc(1, sizeof(*s));
    if (!s || nd_sk_scratch_create(&s->sks) < 0 || nd_pairing_create(&s->pg) < 0 ||
        nd_aligner_create(&s->al) < 0) {
        nd_pair_scratch_destroy(s);
        return -ENOMEM;
    }
    *out = s;
    return 0;
}

void nd_pair_scratch_destroy(nd_pair_scratch *s)
{
    if (!s)
        return;
    nd_pairing_destroy(s->pg);
    nd_aligner_destroy(s->al);
    nd_sk_scratch_destroy(s->sks);
    nd_sk_scratch_destroy(s->ska);
    for (unsigned k = 0; k < ND_PAIR_MARK_SLOTS; k++)
        free(s->marks[k]);
    free(s);
}

/* The question of text[0..len) with t, both modes' sketches into sk[2].
 * Returns the text's own mode or -errno. */
static int ask(nd_question_tools *t, const char *text, size_t len, nd_question *q, nd_sketch *sk)
{
    nd_check_req rq = {.text = text, .text_len = len};
    int mode;
    int rc = nd_question_make(t, &rq, q, 0, &mode);
    if (rc < 0)
        return rc;
    nd_question_scratch qs;
    rc = nd_question_sketch(t, &rq, q, mode, true, true, sk, &qs);
    return rc < 0 ? rc : mode;
}

/* The passages of A (t->sks) in B (s->sks), both of mode `mode`. */
static int pairs_in(const nd_sk_scratch *a, nd_pair_scratch *s, unsigned mode, nd_passage_pair *out,
                    size_t cap, size_t *total)
{
    const nd_shingle *ha, *hb;
    size_t na, nb;
    *total = 0;
    if (nd_sketch_shingles(a, mode, &ha, &na) < 0 || nd_sketch_shingles(s->sks, mode, &hb, &nb) < 0)
        return 0;
    return nd_passage_pairs(s->pg, ha, na, hb, nb, mode, out, cap, total);
}

void nd_rewrite_params_default(nd_rewrite_params *p)
{
    p->min_coverage = ND_ALIGN_MIN_COVERAGE;
    p->min_spread = ND_ALIGN_MIN_SPREAD;
    p->max_long_gaps_a = ND_ALIGN_MAX_LONG_GAPS_A;
    p->max_long_gaps_b = ND_ALIGN_MAX_LONG_GAPS_B;
    p->min_coverage_xscript = ND_ALIGN_MIN_COVERAGE_XSCRIPT;
}

double nd_rewrite_min_coverage(const nd_rewrite_params *p, const nd_integrity *a,
                               const nd_integrity *b)
{
    const char *sa = nd_integrity_script(a), *sb = nd_integrity_script(b);
    return sa && sb && strcmp(sa, sb) != 0 && p->min_coverage_xscript > p->min_coverage
               ? p->min_coverage_xscript
               : p->min_coverage;
}

bool nd_rewrite_is(const nd_alignment *al, const nd_rewrite_params *p, const nd_integrity *a,
                   const nd_integrity *b)
{
    double cover = nd_rewrite_min_coverage(p, a, b);
    return nd_align_is_rewrite(al, cover, p->min_spread, p->max_long_gaps_a, p->max_long_gaps_b);
}

/* A's tokens (scratch a) aligned with B's (s->sks), both of mode `mode`:
 * the figures into *al, the kept stretches as code-point pairs into
 * out[0..cap), *total of them. */
static int align_in(const nd_sk_scratch *a, nd_pair_scratch *s, unsigned mode, nd_alignment *al,
                    nd_passage_pair *out, size_t cap, size_t *total)
{
    const uint64_t *ha, *hb;
    const uint32_t *sa, *ea, *sb, *eb;
    size_t na, nb, nseg = 0;
    *total = 0;
    memset(al, 0, sizeof(*al));
    if (nd_sketch_tokens(a, mode, &ha, &sa, &ea, &na) < 0 ||
        nd_sketch_tokens(s->sks, mode, &hb, &sb, &eb, &nb) < 0)
        return -EINVAL;
    size_t want = cap < ND_PAIR_PASSAGES ? cap : ND_PAIR_PASSAGES;
    unsigned long_gap = mode == ND_SKETCH_MODE_CHAR ? ND_ALIGN_LONG_GAP_CHAR
                                                    : ND_ALIGN_LONG_GAP_WORD;
    s->last_mode = (uint8_t)mode;
    int rc = nd_align(s->al, ha, na, hb, nb, long_gap, al, s->seg, want, &nseg);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < nseg && i < want; i++) {
        const nd_align_segment *g = &s->seg[i];
        out[i] = (nd_passage_pair){.start = sa[g->a_start],
                                   .end = ea[g->a_end - 1],
                                   .source_start = sb[g->b_start],
                                   .source_end = eb[g->b_end - 1]};
    }
    *total = nseg;
    return 0;
}

int nd_pair_keep_marks(nd_pair_scratch *s, unsigned slot)
{
    size_t n;
    const uint8_t *m = nd_align_marks(s->al, &n);
    if (slot >= ND_PAIR_MARK_SLOTS)
        return -EINVAL;
    if (n > s->marks_cap[slot]) {
        uint8_t *g = realloc(s->marks[slot], n);
        if (!g)
            return -ENOMEM;
        s->marks[slot] = g;
        s->marks_cap[slot] = n;
    }
    if (n)
        memcpy(s->marks[slot], m, n);
    s->marks_n[slot] = n;
    s->marks_mode[slot] = s->last_mode;
    return 0;
}

size_t nd_pair_unique_marks(const nd_pair_scratch *s, unsigned slot, const bool *others,
                            unsigned nslots, size_t *na)
{
    size_t n = slot < ND_PAIR_MARK_SLOTS ? s->marks_n[slot] : 0, c = 0;
    *na = n;
    for (size_t x = 0; x < n; x++) {
        if (!s->marks[slot][x])
            continue;
        unsigned held = 0;
        for (unsigned j = 0; j < nslots && j < ND_PAIR_MARK_SLOTS; j++)
            held += j != slot && others[j] && s->marks_n[j] == n &&
                    s->marks_mode[j] == s->marks_mode[slot] && s->marks[j][x];
        c += held < ND_PAIR_SHARED_BY;
    }
    return c;
}

size_t nd_pair_marks_overlap(const nd_pair_scratch *s, unsigned i, unsigned j)
{
    if (i >= ND_PAIR_MARK_SLOTS || j >= ND_PAIR_MARK_SLOTS || s->marks_n[i] != s->marks_n[j] ||
        s->marks_mode[i] != s->marks_mode[j])
        return 0;
    size_t c = 0;
    for (size_t x = 0; x < s->marks_n[i]; x++)
        c += s->marks[i][x] & s->marks[j][x];
    return c;
}

int nd_pair_hold_a(nd_pair_scratch *s, const nd_sketcher *sk, const char *a, size_t la,
                   const nd_sk_scratch **out)
{
    s->holds_a = false;
    if (!s->ska && nd_sk_scratch_create(&s->ska) < 0)
        return -ENOMEM;
    int rc = nd_sketch_query(sk, s->ska, a, la, s->ska_anchors, ND_ANCHORS_QUERY, NULL);
    if (rc >= 0) /* readies its passages (nd_sketch_passages()) */
        rc = nd_sketch_query_finish(s->ska, s->ska_sketch);
    if (rc < 0)
        return rc;
    s->holds_a = true;
    *out = s->ska;
    return 0;
}

int nd_pair_align(nd_pair_scratch *s, const nd_sketcher *sk, const nd_sk_scratch *a, const char *b,
                  size_t lb, nd_alignment *al, nd_integrity *integrity_b, nd_passage_pair *out,
                  size_t cap, size_t *total)
{
    *total = 0;
    memset(al, 0, sizeof(*al));
    if (!a && !s->holds_a)
        return -EINVAL;
    nd_sketch_info info;
    int rc = nd_sketch_shingle_text(sk, s->sks, b, lb, &info);
    if (rc < 0)
        return rc;
    if (integrity_b)
        *integrity_b = info.integrity;
    return align_in(a ? a : s->ska, s, info.mode, al, out, cap, total);
}

static int passage_cmp(const void *x, const void *y)
{
    const nd_passage *a = x, *b = y;
    return a->start < b->start ? -1 : a->start > b->start;
}

/* out->copied_share: A's code points (a[0..la), valid UTF-8) inside the
 * pair's passages, as /check-original counts a match's share (share.h:
 * a passage under ND_SHARE_MIN_SPAN code points counts for nothing); a
 * rewrite's is at least its alignment's coverage of A. */
static void pair_share(nd_pair *out, const char *a, size_t la)
{
    uint32_t cp = 0;
    for (size_t i = 0; i < la; i++)
        cp += ((unsigned char)a[i] & 0xC0) != 0x80;
    nd_passage spans[ND_PAIR_PASSAGES];
    size_t n = out->npairs < ND_PAIR_PASSAGES ? out->npairs : ND_PAIR_PASSAGES;
    for (size_t i = 0; i < n; i++)
        spans[i] = (nd_passage){out->pairs[i].start, out->pairs[i].end};
    qsort(spans, n, sizeof(*spans), passage_cmp);
    nd_share_source one = {.p = spans, .n = n, .eligible = true};
    nd_share_answer ans;
    nd_share_decide(&one, 1, cp, NULL, &ans);
    out->copied_share = ans.copied_share;
    if (out->kind == ND_MATCH_REWRITE && out->copied_share < out->align.coverage_a)
        out->copied_share = out->align.coverage_a;
}

int nd_pair_compare(nd_question_tools *t, nd_pair_scratch *s, const char *a, size_t la,
                    const char *b, size_t lb, const nd_verdict_params *p,
                    const nd_rewrite_params *rw, nd_pair *out, int *which)
{
    nd_question_tools tb = *t;
    tb.sks = s->sks;
    tb.anchors = s->anchors;
    *which = 0;
    int mode_a = ask(t, a, la, &s->qa, s->sa);
    if (mode_a < 0)
        return mode_a;
    *which = 1;
    int mode = ask(&tb, b, lb, &s->qb, s->sb);
    if (mode < 0)
        return mode;
    const nd_sketch *d = &s->sb[mode], *q = nd_sketch_for(s->sa, d);
    memset(out, 0, offsetof(nd_pair, pairs));
    nd_sketch_compare(q, d, &out->e);
    out->max_gap = nd_sketch_max_gap(q, d, &out->e);
    int same = memcmp(s->qa.text_hash, s->qb.text_hash, 16) == 0;
    out->kind = nd_match_classify(&out->e, same, p);
    out->simhash_a = s->qa.simhash;
    out->simhash_b = s->qb.simhash;
    out->chars_a = s->qa.chars;
    out->chars_b = s->qb.chars;
    out->distance = nd_simhash_distance(s->qa.simhash, s->qb.simhash);
    out->mode = (uint8_t)mode;
    out->shingles_a = q->shingles;
    out->shingles_b = d->shingles;
    out->integrity_a = s->qa.integrity;
    out->integrity_b = s->qb.integrity;
    *which = -1;
    int rc = align_in(t->sks, s, (unsigned)mode, &out->align, out->pairs, ND_PAIR_PASSAGES,
                      &out->npairs);
    if (rc < 0)
        return rc;
    if (out->kind == ND_MATCH_NONE && rw &&
        nd_rewrite_is(&out->align, rw, &out->integrity_a, &out->integrity_b)) {
        out->kind = ND_MATCH_REWRITE; /* its evidence: the aligned stretches */
        pair_share(out, a, la);
        return 0;
    }
    rc = pairs_in(t->sks, s, (unsigned)mode, out->pairs, ND_PAIR_PASSAGES, &out->npairs);
    if (rc == 0)
        pair_share(out, a, la);
    return rc;
}

int nd_pair_passages_same(const nd_question_tools *t, nd_pair_scratch *s, nd_passage_pair *out,
                          size_t cap, size_t *total)
{
    const nd_shingle *ha;
    size_t na;
    int mode = nd_sketch_own_mode(t->sks);
    *total = 0;
    if (mode < 0 || nd_sketch_shingles(t->sks, (unsigned)mode, &ha, &na) < 0)
        return -EINVAL;
    return nd_passage_pairs(s->pg, ha, na, ha, na, (unsigned)mode, out, cap, total);
}

int nd_pair_passages(const nd_question_tools *t, nd_pair_scratch *s, const char *b, size_t lb,
                     nd_passage_pair *out, size_t cap, size_t *total)
{
    nd_sketch_info info;
    *total = 0;
    int rc = nd_sketch_shingle_text(t->sk, s->sks, b, lb, &info);
    if (rc < 0)
        return rc;
    return pairs_in(t->sks, s, info.mode, out, cap, total);
}

void nd_pair_budget_init(nd_pair_budget *b, size_t len)
{
    size_t max = ((size_t)-1 - ND_PAIR_READ_BASE) / ND_PAIR_READ_FACTOR;
    b->left = (len < max ? len : max) * ND_PAIR_READ_FACTOR + ND_PAIR_READ_BASE;
}

bool nd_pair_budget_may_read(const nd_pair_budget *b, size_t at_least)
{
    return at_least <= b->left;
}

bool nd_pair_budget_take(nd_pair_budget *b, size_t len)
{
    if (len > b->left) {
        b->left = 0;
        return false;
    }
    b->left -= len;
    return true;
}
