/* fuzz_sketch - lib/sketch.c on arbitrary bytes: the text is split at the
 * first 0xFF byte (if any) into a "document" and a "query".
 *
 * Invariants, besides "no crash, no sanitizer report":
 * - -EILSEQ exactly when the bytes are not UTF-8 (independent validator);
 * - determinism and scratch reuse: a grown scratch gives the same sketch and
 *   anchors as a fresh one;
 * - nd_sketch_text() equals nd_sketch_text_modes()'s own-mode half;
 * - the sketch is valid (n <= max, sorted, levels >= shift), encodes, and
 *   decodes back to itself; the anchors are a prefix-consistent bottom-m;
 * - compare: figures in [0, 1], resemblance symmetric, containment swaps,
 *   a sketch compared with itself is 1 (when it has values);
 * - passages: sorted, disjoint, non-empty, within the query's code points;
 * - nd_sketch_decode() of the raw input bytes never crashes, and accepts only
 *   what re-encodes to the same bytes. */
#include <errno.h>
#include <string.h>

#include "fuzz_util.h"
#include "sketch.h"

static nd_sketcher *sk;
static nd_sk_scratch *reused;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (nd_sketcher_create(&sk) < 0 || nd_sk_scratch_create(&reused) < 0)
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

static void check_sketch(const nd_sketch *s)
{
    FUZZ_CHECK(s->n <= ND_SKETCH_MAX && s->n <= s->shingles && s->shift <= 31 && s->mode <= 1,
               "header n %u shingles %u shift %u", s->n, s->shingles, s->shift);
    for (unsigned i = 0; i < s->n; i++) {
        FUZZ_CHECK((s->values[i] & 31) >= s->shift, "level below shift");
        FUZZ_CHECK(i == 0 || s->values[i] > s->values[i - 1], "not ascending");
    }
    uint8_t buf[ND_SKETCH_ENCODED_MAX];
    size_t len = nd_sketch_encode(s, buf, sizeof(buf));
    FUZZ_CHECK(len == 8 + 4u * s->n, "encode %zu", len);
    static nd_sketch back;
    FUZZ_CHECK(nd_sketch_decode(buf, len, &back) == 0 && back.n == s->n && back.shift == s->shift &&
                   back.mode == s->mode && back.shingles == s->shingles &&
                   memcmp(back.values, s->values, 4u * s->n) == 0,
               "round trip");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Raw bytes as an encoded sketch. */
    static nd_sketch raw;
    if (nd_sketch_decode(data, size, &raw) == 0) {
        uint8_t again[ND_SKETCH_ENCODED_MAX];
        FUZZ_CHECK(nd_sketch_encode(&raw, again, sizeof(again)) == size &&
                       memcmp(again, data, size) == 0,
                   "accepted encoding does not re-encode");
    }

    const uint8_t *cut = memchr(data, 0xFF, size);
    size_t dn = cut ? (size_t)(cut - data) : size;
    const uint8_t *q = cut ? cut + 1 : data;
    size_t qn = cut ? size - dn - 1 : size;
    bool dvalid = fuzz_utf8_valid(data, dn), qvalid = fuzz_utf8_valid(q, qn);

    static nd_sketch d, d2, qs[2], own;
    static nd_anchors da, da2, qa[2], oa;
    int rc = nd_sketch_text(sk, reused, (const char *)data, dn, &d, &da, 32, NULL);
    FUZZ_CHECK(dvalid ? rc == 0 : rc == -EILSEQ, "document rc %d valid %d", rc, dvalid);
    if (rc == 0) {
        nd_sk_scratch *fresh;
        if (nd_sk_scratch_create(&fresh) < 0)
            abort();
        FUZZ_CHECK(nd_sketch_text(sk, fresh, (const char *)data, dn, &d2, &da2, 16, NULL) == 0,
                   "fresh");
        nd_sk_scratch_destroy(fresh);
        FUZZ_CHECK(d2.n == d.n && d2.shift == d.shift && d2.mode == d.mode &&
                       d2.shingles == d.shingles && memcmp(d2.values, d.values, 4u * d.n) == 0,
                   "scratch reuse changes the sketch");
        FUZZ_CHECK(da2.n == (da.n < 16 ? da.n : 16) && memcmp(da2.a, da.a, 4u * da2.n) == 0,
                   "anchors: 16 are not the prefix of 32");
        FUZZ_CHECK(da.n == (d.shingles < 32 ? d.shingles : 32), "anchors %u of %u", da.n,
                   d.shingles);
        check_sketch(&d);
    }
    int mode = nd_sketch_text_modes(sk, reused, (const char *)q, qn, qs, qa, 32, NULL);
    FUZZ_CHECK(qvalid ? (mode == 0 || mode == 1) : mode == -EILSEQ, "query rc %d", mode);
    if (mode < 0)
        return 0;
    check_sketch(&qs[0]);
    check_sketch(&qs[1]);
    FUZZ_CHECK(qs[0].mode == 0 && qs[1].mode == 1, "modes");
    if (rc == 0) {
        nd_sketch_estimate e, r, self;
        const nd_sketch *qq = nd_sketch_for(qs, &d);
        nd_sketch_compare(qq, &d, &e);
        nd_sketch_compare(&d, qq, &r);
        FUZZ_CHECK(e.resemblance >= 0 && e.resemblance <= 1 && e.containment >= 0 &&
                       e.containment <= 1 && e.containment_r >= 0 && e.containment_r <= 1,
                   "ranges");
        FUZZ_CHECK(e.resemblance == r.resemblance && e.containment == r.containment_r &&
                       e.containment_r == r.containment && e.shared == r.shared,
                   "symmetry");
        FUZZ_CHECK(e.resemblance <= e.containment && e.resemblance <= e.containment_r,
                   "J above a containment");
        nd_sketch_compare(&d, &d, &self);
        FUZZ_CHECK(d.n == 0 || (self.resemblance == 1.0 && self.containment == 1.0), "self");
        nd_passage p[16];
        size_t np = nd_sketch_passages(reused, &d, p, 16);
        size_t ncp = count_cps(q, qn);
        for (size_t i = 0; i < np && i < 16; i++) {
            FUZZ_CHECK(p[i].start < p[i].end && p[i].end <= ncp, "passage [%u, %u) of %zu",
                       p[i].start, p[i].end, ncp);
            FUZZ_CHECK(i == 0 || p[i].start > p[i - 1].end, "passages overlap or touch");
        }
        FUZZ_CHECK(e.shared > 0 || np == 0, "passages without shared values");
    }
    /* The own-mode half equals nd_sketch_text(). */
    FUZZ_CHECK(nd_sketch_text(sk, reused, (const char *)q, qn, &own, &oa, 32, NULL) == 0, "own");
    FUZZ_CHECK(own.mode == mode && own.n == qs[mode].n && own.shift == qs[mode].shift &&
                   memcmp(own.values, qs[mode].values, 4u * own.n) == 0 && oa.n == qa[mode].n &&
                   memcmp(oa.a, qa[mode].a, 4u * oa.n) == 0,
               "nd_sketch_text differs from its mode of nd_sketch_text_modes");
    return 0;
}
