/* fuzz_passages - copied passages on both sides (lib/passages.c) through
 * the pair of texts /compare compares (registry/pair.c), on arbitrary
 * bytes: the input is split at the first 0xFF byte (if any) into the
 * submitted text A and the source text B; the raw bytes are also parsed as
 * a /compare body.
 *
 * Invariants, besides "no crash, no sanitizer report":
 * - -EILSEQ exactly when A or B is not UTF-8 (independent validator), and
 *   it names A first;
 * - every pair within the texts: start < end <= A's code points,
 *   source_start < source_end <= B's; sorted by start; at most the cap
 *   written, the total counted beyond it;
 * - determinism: the same texts again (grown scratch) give the same pairs,
 *   and so does the source shingled alone (nd_pair_passages(): a listed
 *   match of a check);
 * - figures in [0, 1]; A compared with itself is identical with at least
 *   one pair when it has shingles;
 * - a /compare body parsed: text_a and exactly one of text_b / id_b. */
#include <errno.h>
#include <string.h>

#include "fuzz_util.h"
#include "pair.h"
#include "request.h"

static nd_fingerprinter *fp;
static nd_sketcher *sk;
static nd_fp_scratch *fps;
static nd_sk_scratch *sks;
static nd_pair_scratch *ps;
static nd_anchors anchors[2];
static nd_request_parser parser;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (nd_fingerprinter_create(&fp) < 0 || nd_sketcher_create(&sk) < 0 ||
        nd_fp_scratch_create(&fps) < 0 || nd_sk_scratch_create(&sks) < 0 ||
        nd_pair_scratch_create(&ps) < 0)
        abort();
    return 0;
}

static size_t count_cps(const uint8_t *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += (s[i] & 0xC0) != 0x80;
    return c;
}

static void check_pairs(const nd_pair *p, size_t acps, size_t bcps)
{
    size_t n = p->npairs < ND_PAIR_PASSAGES ? p->npairs : ND_PAIR_PASSAGES;
    for (size_t i = 0; i < n; i++) {
        const nd_passage_pair *x = &p->pairs[i];
        FUZZ_CHECK(x->start < x->end && x->end <= acps, "A span [%u, %u) of %zu", x->start, x->end,
                   acps);
        FUZZ_CHECK(x->source_start < x->source_end && x->source_end <= bcps,
                   "B span [%u, %u) of %zu", x->source_start, x->source_end, bcps);
        FUZZ_CHECK(i == 0 || x->start >= p->pairs[i - 1].start, "not sorted");
    }
    FUZZ_CHECK(p->e.resemblance >= 0 && p->e.resemblance <= 1 && p->e.containment >= 0 &&
                   p->e.containment <= 1 && p->e.containment_r >= 0 && p->e.containment_r <= 1,
               "figures");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nd_request_limits lim = {.max_batch = 4, .max_meta = 64, .max_text = 4096, .default_k = 3};
    nd_compare_request rq;
    nd_request_error err;
    if (nd_request_parse_compare(&parser, (const char *)data, size, &lim, &rq, &err) == 0)
        FUZZ_CHECK(rq.text_a && (rq.text_b != NULL) != (rq.id_b != NULL), "compare body");

    const uint8_t *cut = memchr(data, 0xFF, size);
    size_t an = cut ? (size_t)(cut - data) : size;
    const uint8_t *b = cut ? cut + 1 : data;
    size_t bn = cut ? size - an - 1 : size;
    bool avalid = fuzz_utf8_valid(data, an), bvalid = fuzz_utf8_valid(b, bn);
    nd_question_tools qt = {.fp = fp, .sk = sk, .fps = fps, .sks = sks, .anchors = anchors};
    nd_verdict_params vp;
    nd_verdict_params_default(&vp);
    static nd_pair p, again;
    int which;
    /* rewrites off: the passages are the copied ones, as a listed match's */
    int rc = nd_pair_compare(&qt, ps, (const char *)data, an, (const char *)b, bn, &vp, NULL, &p,
                             &which);
    if (!avalid || !bvalid) {
        FUZZ_CHECK(rc == -EILSEQ && which == (avalid ? 1 : 0), "rc %d which %d valid %d %d", rc,
                   which, avalid, bvalid);
        return 0;
    }
    FUZZ_CHECK(rc == 0, "rc %d", rc);
    check_pairs(&p, count_cps(data, an), count_cps(b, bn));
    /* a listed match's way (the source shingled alone) gives the same pairs */
    static nd_passage_pair listed[ND_PAIR_PASSAGES];
    size_t nlisted;
    rc = nd_pair_passages(&qt, ps, (const char *)b, bn, listed, ND_PAIR_PASSAGES, &nlisted);
    FUZZ_CHECK(rc == 0 && nlisted == p.npairs &&
                   memcmp(listed, p.pairs,
                          sizeof(nd_passage_pair) *
                              (p.npairs < ND_PAIR_PASSAGES ? p.npairs : ND_PAIR_PASSAGES)) == 0,
               "a listed match's pairs differ: %zu / %zu", nlisted, p.npairs);
    rc = nd_pair_compare(&qt, ps, (const char *)data, an, (const char *)b, bn, &vp, NULL, &again,
                         &which);
    FUZZ_CHECK(rc == 0 && again.npairs == p.npairs &&
                   memcmp(again.pairs, p.pairs,
                          sizeof(nd_passage_pair) *
                              (p.npairs < ND_PAIR_PASSAGES ? p.npairs : ND_PAIR_PASSAGES)) == 0,
               "not deterministic");
    rc = nd_pair_compare(&qt, ps, (const char *)data, an, (const char *)data, an, &vp, NULL, &again,
                         &which);
    FUZZ_CHECK(rc == 0 && again.kind == ND_MATCH_IDENTICAL, "itself: rc %d kind %d", rc,
               again.kind);
    FUZZ_CHECK(again.shingles_b == 0 || again.npairs >= 1, "itself: %zu pairs of %u shingles",
               again.npairs, again.shingles_b);
    check_pairs(&again, count_cps(data, an), count_cps(data, an));
    return 0;
}
