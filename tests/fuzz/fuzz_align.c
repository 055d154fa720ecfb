/* fuzz_align - the third stage's token alignment (lib/align.c) on
 * arbitrary token sequences. The input: byte 0 the long gap (0..19), byte 1
 * the segment cap (0..39; 0xF0 and above: seg NULL, cap 0), byte 2 the
 * alphabet (1..24 tokens, so that bigrams match often; 0xF0 and above: all
 * 256 byte values); the rest split at its first 0xFF (else in the middle)
 * into A and B, one token per byte (the byte modulo the alphabet, hashed).
 *
 * Invariants, besides "no crash, no sanitizer report":
 * - returns 0; na, nb as given; coverage = aligned / tokens, all figures
 *   in [0, 1]; aligned 0 or at least 4 tokens a side (a kept chain has
 *   ND_ALIGN_MIN_SEEDS seeds); is_rewrite 0 or 1;
 * - segments: total = the figures' count >= the number written; each
 *   within both texts, at least a bigram, in A order, beginning and ending
 *   on an exact bigram of both sides;
 * - marks: A's token count, as many 1s as aligned_a, each inside a
 *   segment (when all are written), a segment's first and last marked;
 * - determinism: the same call again on the same scratch, with seg NULL,
 *   and on a fresh scratch (after the shared one served other sizes) give
 *   the same figures and segments;
 * - A against itself: all of A aligned, one segment (from 4 tokens). */
#include <errno.h>
#include <string.h>

#include "align.h"
#include "fuzz_util.h"

#define MAX_SEG 40

static nd_aligner *shared;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (nd_aligner_create(&shared) < 0)
        abort();
    return 0;
}

static uint64_t token(uint8_t c, unsigned alpha)
{
    uint64_t x = (uint64_t)(c % alpha) + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void check_figures(const nd_alignment *f, size_t na, size_t nb, size_t total)
{
    FUZZ_CHECK(f->na == na && f->nb == nb, "na %u/%zu nb %u/%zu", f->na, na, f->nb, nb);
    FUZZ_CHECK(f->aligned_a <= na && f->aligned_b <= nb, "aligned %u %u", f->aligned_a,
               f->aligned_b);
    FUZZ_CHECK((f->aligned_a == 0) == (f->aligned_b == 0) &&
                   (f->aligned_a == 0 || (f->aligned_a >= 4 && f->aligned_b >= 4)),
               "aligned %u / %u", f->aligned_a, f->aligned_b);
    FUZZ_CHECK((f->segments == 0) == (f->aligned_a == 0), "%u segments, %u aligned", f->segments,
               f->aligned_a);
    FUZZ_CHECK(f->coverage_a == (na >= 2 && nb >= 2 ? (double)f->aligned_a / (double)na : 0) &&
                   f->coverage_b == (na >= 2 && nb >= 2 ? (double)f->aligned_b / (double)nb : 0),
               "coverage %f %f", f->coverage_a, f->coverage_b);
    const double v[] = {f->coverage_a, f->coverage_b,  f->spread_a,
                        f->spread_b,   f->long_gaps_a, f->long_gaps_b};
    for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++)
        FUZZ_CHECK(v[k] >= 0 && v[k] <= 1, "figure %zu: %f", k, v[k]);
    FUZZ_CHECK(f->segments == total, "segments %u, total %zu", f->segments, total);
    int r = nd_align_is_rewrite(f, ND_ALIGN_MIN_COVERAGE, ND_ALIGN_MIN_SPREAD,
                                ND_ALIGN_MAX_LONG_GAPS_A, ND_ALIGN_MAX_LONG_GAPS_B);
    FUZZ_CHECK(r == 0 || r == 1, "is_rewrite %d", r);
}

static void check_segments(const uint64_t *a, size_t na, const uint64_t *b, size_t nb,
                           const nd_align_segment *seg, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        const nd_align_segment *g = &seg[k];
        FUZZ_CHECK(g->a_start + 2 <= g->a_end && g->a_end <= na && g->b_start + 2 <= g->b_end &&
                       g->b_end <= nb,
                   "segment %zu: [%u, %u) <- [%u, %u) of %zu, %zu", k, g->a_start, g->a_end,
                   g->b_start, g->b_end, na, nb);
        FUZZ_CHECK(k == 0 || g->a_start > seg[k - 1].a_start, "segment %zu out of order", k);
        FUZZ_CHECK(a[g->a_start] == b[g->b_start] && a[g->a_start + 1] == b[g->b_start + 1] &&
                       a[g->a_end - 2] == b[g->b_end - 2] && a[g->a_end - 1] == b[g->b_end - 1],
                   "segment %zu: its end seeds are not bigrams of both", k);
    }
}

static void check_marks(const nd_alignment *f, size_t na, size_t nb, const nd_align_segment *seg,
                        size_t n, size_t total)
{
    size_t mn = 0;
    const uint8_t *m = nd_align_marks(shared, &mn);
    if (na < 2 || nb < 2) {
        FUZZ_CHECK(mn == 0 || mn == na, "marks of %zu, na %zu", mn, na);
        return;
    }
    FUZZ_CHECK(mn == na, "marks of %zu, na %zu", mn, na);
    size_t ones = 0, s = 0;
    for (size_t x = 0; x < mn; x++) {
        FUZZ_CHECK(m[x] <= 1, "mark %u", m[x]);
        ones += m[x];
        if (!m[x] || n < total)
            continue;
        while (s < n && seg[s].a_end <= x)
            s++;
        int in = (s < n && seg[s].a_start <= x) ||
                 (s + 1 < n && seg[s + 1].a_start <= x && x < seg[s + 1].a_end);
        FUZZ_CHECK(in, "marked token %zu outside the segments", x);
    }
    FUZZ_CHECK(ones == f->aligned_a, "%zu marks, aligned %u", ones, f->aligned_a);
    for (size_t k = 0; k < n; k++)
        FUZZ_CHECK(m[seg[k].a_start] && m[seg[k].a_end - 1], "segment %zu ends unmarked", k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    unsigned long_gap = data[0] % 20;
    bool no_seg = data[1] >= 0xF0;
    size_t cap = no_seg ? 0 : data[1] % MAX_SEG;
    unsigned alpha = data[2] >= 0xF0 ? 256 : 1 + data[2] % 24;
    const uint8_t *body = data + 3;
    size_t n = size - 3;
    const uint8_t *cut = memchr(body, 0xFF, n);
    size_t na = cut ? (size_t)(cut - body) : n / 2;
    size_t nb = cut ? n - na - 1 : n - na;
    const uint8_t *bb = cut ? cut + 1 : body + na;
    uint64_t *a = malloc((na + 1) * sizeof(*a)), *b = malloc((nb + 1) * sizeof(*b));
    if (!a || !b)
        abort();
    for (size_t i = 0; i < na; i++)
        a[i] = token(body[i], alpha);
    for (size_t i = 0; i < nb; i++)
        b[i] = token(bb[i], alpha);

    static nd_align_segment seg[MAX_SEG], again[MAX_SEG];
    nd_alignment f, g;
    size_t total = 99, t2 = 99;
    int rc = nd_align(shared, a, na, b, nb, long_gap, &f, no_seg ? NULL : seg, cap, &total);
    FUZZ_CHECK(rc == 0, "rc %d", rc);
    size_t written = total < cap ? total : cap;
    check_figures(&f, na, nb, total);
    check_segments(a, na, b, nb, seg, written);
    check_marks(&f, na, nb, seg, written, total);

    /* again, on the same scratch */
    rc = nd_align(shared, a, na, b, nb, long_gap, &g, no_seg ? NULL : again, cap, &t2);
    FUZZ_CHECK(rc == 0 && memcmp(&f, &g, sizeof(f)) == 0 && t2 == total &&
                   memcmp(seg, again, written * sizeof(*seg)) == 0,
               "again: not the same");
    /* seg NULL: the same figures and count */
    rc = nd_align(shared, a, na, b, nb, long_gap, &g, NULL, 0, &t2);
    FUZZ_CHECK(rc == 0 && memcmp(&f, &g, sizeof(f)) == 0 && t2 == total, "seg NULL: not the same");
    /* a fresh scratch */
    nd_aligner *fresh;
    if (nd_aligner_create(&fresh) < 0)
        abort();
    rc = nd_align(fresh, a, na, b, nb, long_gap, &g, no_seg ? NULL : again, cap, &t2);
    FUZZ_CHECK(rc == 0 && memcmp(&f, &g, sizeof(f)) == 0 && t2 == total &&
                   memcmp(seg, again, written * sizeof(*seg)) == 0,
               "fresh scratch: not the same");
    nd_aligner_destroy(fresh);

    /* A against itself: the diagonal, all of it */
    rc = nd_align(shared, a, na, a, na, long_gap, &g, again, MAX_SEG, &t2);
    FUZZ_CHECK(rc == 0, "itself: rc %d", rc);
    check_figures(&g, na, na, t2);
    if (na >= 4)
        FUZZ_CHECK(g.aligned_a == na && g.aligned_b == na && t2 == 1 && again[0].a_start == 0 &&
                       again[0].a_end == na && again[0].b_start == 0 && again[0].b_end == na,
                   "itself: %u of %zu aligned, %zu segments", g.aligned_a, na, t2);
    free(a);
    free(b);
    return 0;
}
