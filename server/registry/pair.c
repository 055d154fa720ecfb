/* pair.c - two texts compared as a check compares them (pair.h). */
#include "pair.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct nd_pair_scratch {
    nd_sk_scratch *sks; /* B's tokens */
    nd_anchors anchors[2];
    nd_sketch sa[2], sb[2];
    nd_question qa, qb;
    nd_pairing *pg;
};

int nd_pair_scratch_create(nd_pair_scratch **out)
{
    nd_pair_scratch *s = calloc(1, sizeof(*s));
    if (!s || nd_sk_scratch_create(&s->sks) < 0 || nd_pairing_create(&s->pg) < 0) {
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
    nd_sk_scratch_destroy(s->sks);
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

int nd_pair_compare(nd_question_tools *t, nd_pair_scratch *s, const char *a, size_t la,
                    const char *b, size_t lb, const nd_verdict_params *p, nd_pair *out, int *which)
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
    return pairs_in(t->sks, s, (unsigned)mode, out->pairs, ND_PAIR_PASSAGES, &out->npairs);
}

int nd_pair_passages(const nd_question_tools *t, nd_pair_scratch *s, const char *b, size_t lb,
                     nd_passage_pair *out, size_t cap, size_t *total)
{
    nd_sketch_info info;
    *total = 0;
    int rc = nd_sketch_text(t->sk, s->sks, b, lb, &s->sb[0], NULL, 0, &info);
    if (rc < 0)
        return rc;
    return pairs_in(t->sks, s, info.mode, out, cap, total);
}
