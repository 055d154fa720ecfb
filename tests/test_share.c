/* test_share.c - lib/share.c: the union of passages against a brute force
 * over code points on random layouts, and the rule's kinds and thresholds
 * (compilation, quotation, quoted; pieces chosen greedily; eligibility;
 * sources at the bar; short passages; the rule off). */
#include "share.h"
#include "unit.h"

#include <stdlib.h>

#define TEXT_MAX 3000

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return n ? (uint32_t)(rng % n) : 0;
}

static int start_cmp(const void *a, const void *b)
{
    const nd_passage *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* n random spans in [0, len), sorted by start, overlapping at times. */
static size_t random_spans(nd_passage *p, size_t cap, uint32_t len)
{
    size_t n = rnd((uint32_t)cap + 1);
    for (size_t i = 0; i < n; i++) {
        uint32_t s = rnd(len), w = 1 + rnd(rnd(2) ? 40 : 400);
        p[i] = (nd_passage){s, s + w < len ? s + w : len};
    }
    qsort(p, n, sizeof(*p), start_cmp);
    return n;
}

static void test_union_brute_force(void)
{
    static nd_passage spans[ND_SHARE_SOURCES_MAX][ND_SHARE_SPANS_MAX];
    static unsigned char hit[TEXT_MAX];
    for (int round = 0; round < 3000; round++) {
        uint32_t len = 1 + rnd(TEXT_MAX);
        size_t n = rnd(ND_SHARE_SOURCES_MAX + 1), len_of[ND_SHARE_SOURCES_MAX];
        const nd_passage *lists[ND_SHARE_SOURCES_MAX];
        memset(hit, 0, len);
        for (size_t i = 0; i < n; i++) {
            len_of[i] = random_spans(spans[i], round % 2 ? 20 : ND_SHARE_SPANS_MAX, len);
            lists[i] = spans[i];
            for (size_t k = 0; k < len_of[i]; k++)
                memset(hit + spans[i][k].start, 1, spans[i][k].end - spans[i][k].start);
        }
        int64_t want = 0;
        size_t runs = 0;
        for (uint32_t x = 0; x < len; x++) {
            want += hit[x];
            runs += hit[x] && (x == 0 || !hit[x - 1]);
        }
        nd_passage out[ND_SHARE_SOURCES_MAX * ND_SHARE_SPANS_MAX];
        size_t nout = 0;
        int64_t got = nd_share_union(lists, len_of, n, out, sizeof(out) / sizeof(*out), &nout);
        CHECK(got == want, "round %d: %lld vs %lld", round, (long long)got, (long long)want);
        REQUIRE(nout == runs, "round %d: %zu runs vs %zu", round, nout, runs);
        for (size_t r = 0; r < nout; r++) {
            CHECK(hit[out[r].start] && hit[out[r].end - 1], "round %d run %zu inside", round, r);
            CHECK(out[r].start == 0 || !hit[out[r].start - 1], "round %d run %zu starts", round, r);
            CHECK(out[r].end == len || !hit[out[r].end], "round %d run %zu ends", round, r);
        }
    }
    size_t one = 1;
    const nd_passage *l[ND_SHARE_SOURCES_MAX + 1] = {0};
    size_t lens[ND_SHARE_SOURCES_MAX + 1] = {one};
    CHECK(nd_share_union(l, lens, ND_SHARE_SOURCES_MAX + 1, NULL, 0, NULL) < 0, "too many lists");
}

/* The shares nd_share_decide() gives, against a brute force counting only
 * passages of ND_SHARE_MIN_SPAN code points or more, and copied_share as
 * the union of the eligible sources. */
static void test_decide_shares_brute_force(void)
{
    static nd_passage spans[ND_SHARE_SOURCES_MAX][ND_SHARE_SPANS_MAX];
    static unsigned char own[ND_SHARE_SOURCES_MAX][TEXT_MAX], any[TEXT_MAX];
    nd_share_params p;
    nd_share_params_default(&p);
    for (int round = 0; round < 1000; round++) {
        uint32_t len = 100 + rnd(TEXT_MAX - 100);
        size_t n = 1 + rnd(ND_SHARE_SOURCES_MAX);
        nd_share_source s[ND_SHARE_SOURCES_MAX];
        memset(any, 0, len);
        for (size_t i = 0; i < n; i++) {
            size_t m = random_spans(spans[i], 12, len);
            s[i] = (nd_share_source){
                .p = spans[i], .n = m, .eligible = rnd(4) != 0, .above = rnd(5) == 0};
            memset(own[i], 0, len);
            for (size_t k = 0; k < m; k++)
                if (spans[i][k].end - spans[i][k].start >= ND_SHARE_MIN_SPAN)
                    memset(own[i] + spans[i][k].start, 1, spans[i][k].end - spans[i][k].start);
            for (uint32_t x = 0; s[i].eligible && x < len; x++)
                any[x] |= own[i][x];
        }
        nd_share_answer a;
        nd_share_decide(s, n, len, &p, &a);
        for (size_t i = 0; i < n; i++) {
            uint32_t c = 0;
            for (uint32_t x = 0; x < len; x++)
                c += own[i][x];
            CHECK(s[i].share == (double)c / len, "round %d source %zu: %g vs %u/%u", round, i,
                  s[i].share, c, len);
            CHECK(!s[i].above || s[i].kind == ND_SHARE_KIND_NONE, "an above source keeps its kind");
            CHECK(s[i].kind != ND_SHARE_KIND_COMPILED || s[i].eligible, "compiled: eligible");
            CHECK(s[i].kind == ND_SHARE_KIND_NONE || s[i].share >= p.min_source_share,
                  "listed from min_source_share");
        }
        uint32_t c = 0;
        for (uint32_t x = 0; x < len; x++)
            c += any[x];
        CHECK(a.copied_share == (double)c / len, "round %d copied %g vs %u/%u", round,
              a.copied_share, c, len);
    }
}

/* A source of [start, end) of a text of 1000 code points. */
static nd_share_source one_span(nd_passage *p, uint32_t start, uint32_t end, bool eligible)
{
    *p = (nd_passage){start, end};
    return (nd_share_source){.p = p, .n = 1, .eligible = eligible};
}

static void test_decide_kinds(void)
{
    nd_share_params p = {.min_source_share = 0.1, .min_quote_share = 0.3, .min_copied_share = 0.6};
    nd_passage sp[4];
    nd_share_source s[4];
    nd_share_answer a;

    /* a compilation: two pieces of 0.4 and 0.35 */
    s[0] = one_span(&sp[0], 0, 400, true);
    s[1] = one_span(&sp[1], 500, 850, true);
    nd_share_decide(s, 2, 1000, &p, &a);
    CHECK(a.verdict == ND_SHARE_COMPILATION, "compilation: %d", a.verdict);
    CHECK(s[0].kind == ND_SHARE_KIND_COMPILED && s[1].kind == ND_SHARE_KIND_COMPILED, "compiled");
    CHECK(a.copied_share == 0.75 && s[0].share == 0.4 && s[1].share == 0.35, "shares");
    /* below min_copied_share: the larger one a quotation, the other quoted */
    p.min_copied_share = 0.8;
    nd_share_decide(s, 2, 1000, &p, &a);
    CHECK(a.verdict == ND_SHARE_QUOTATION, "quotation: %d", a.verdict);
    CHECK(s[0].kind == ND_SHARE_KIND_QUOTATION && s[1].kind == ND_SHARE_KIND_QUOTATION,
          "both over the quote share");
    p.min_quote_share = 0.38;
    nd_share_decide(s, 2, 1000, &p, &a);
    CHECK(s[0].kind == ND_SHARE_KIND_QUOTATION && s[1].kind == ND_SHARE_KIND_QUOTED, "quoted");
    p.min_quote_share = 0.5;
    nd_share_decide(s, 2, 1000, &p, &a);
    CHECK(a.verdict == ND_SHARE_ORIGINAL, "original: %d", a.verdict);
    CHECK(s[0].kind == ND_SHARE_KIND_QUOTED && s[1].kind == ND_SHARE_KIND_QUOTED, "quoted");
    p = (nd_share_params){.min_source_share = 0.1, .min_quote_share = 0.3, .min_copied_share = 0.6};

    /* two versions of one source: one piece, no compilation */
    s[0] = one_span(&sp[0], 0, 500, true);
    s[1] = one_span(&sp[1], 10, 510, true);
    nd_share_decide(s, 2, 1000, &p, &a);
    CHECK(a.verdict == ND_SHARE_QUOTATION, "versions: a quotation, not a compilation: %d",
          a.verdict);
    CHECK(s[0].exclusive > 0 && s[1].exclusive == 0, "one piece");
    /* a third source completing them: a compilation of two pieces */
    s[2] = one_span(&sp[2], 520, 900, true);
    nd_share_decide(s, 3, 1000, &p, &a);
    CHECK(a.verdict == ND_SHARE_COMPILATION, "compilation: %d", a.verdict);
    CHECK(s[2].kind == ND_SHARE_KIND_COMPILED, "the third a piece");
    CHECK((s[0].kind == ND_SHARE_KIND_COMPILED) != (s[1].kind == ND_SHARE_KIND_COMPILED),
          "one version a piece, the other quoted");
    CHECK(a.copied_share == 0.890, "copied %g", a.copied_share);

    /* not eligible (same account, revoked): quoted, not counted */
    s[0] = one_span(&sp[0], 0, 400, false);
    s[1] = one_span(&sp[1], 500, 850, true);
    nd_share_decide(s, 2, 1000, &p, &a);
    CHECK(a.verdict == ND_SHARE_QUOTATION && s[0].kind == ND_SHARE_KIND_QUOTED &&
              s[1].kind == ND_SHARE_KIND_QUOTATION,
          "ineligible: %d %d %d", a.verdict, s[0].kind, s[1].kind);
    CHECK(a.copied_share == 0.35, "copied share: the eligible only (%g)", a.copied_share);

    /* at the bar: kind stands, counted in copied_share, no piece */
    s[0] = one_span(&sp[0], 0, 700, true);
    s[0].above = true;
    s[1] = one_span(&sp[1], 700, 850, true);
    nd_share_decide(s, 2, 1000, &p, &a);
    CHECK(a.bar_evidence && s[0].kind == ND_SHARE_KIND_NONE, "above");
    CHECK(s[1].kind == ND_SHARE_KIND_QUOTED && a.verdict == ND_SHARE_ORIGINAL, "one small source");
    CHECK(a.copied_share == 0.85, "copied %g", a.copied_share);

    /* below min_source_share: none; short passages count for nothing */
    s[0] = one_span(&sp[0], 0, 90, true);
    s[1] = one_span(&sp[1], 100, 100 + ND_SHARE_MIN_SPAN - 1, true);
    nd_share_decide(s, 2, 1000, &p, &a);
    CHECK(s[0].kind == ND_SHARE_KIND_NONE && s[1].kind == ND_SHARE_KIND_NONE, "none");
    CHECK(s[1].share == 0 && a.copied_share == 0.09, "short: %g %g", s[1].share, a.copied_share);

    /* the rule off: figures only */
    nd_share_params off = {0};
    s[0] = one_span(&sp[0], 0, 400, true);
    s[1] = one_span(&sp[1], 500, 850, true);
    nd_share_decide(s, 2, 1000, &off, &a);
    CHECK(a.verdict == ND_SHARE_ORIGINAL && s[0].kind == ND_SHARE_KIND_NONE &&
              s[1].kind == ND_SHARE_KIND_NONE && a.copied_share == 0.75,
          "off");
    /* an empty text */
    nd_share_decide(s, 2, 0, &p, &a);
    CHECK(a.copied_share == 0 && s[0].share == 0 && a.verdict == ND_SHARE_ORIGINAL, "empty text");
}

static void test_defaults(void)
{
    nd_share_params p;
    nd_share_params_default(&p);
    CHECK(nd_share_on(&p) && p.min_source_share == ND_SHARE_MIN_SOURCE &&
              p.min_quote_share == ND_SHARE_MIN_QUOTE && p.min_copied_share == ND_SHARE_MIN_COPIED,
          "defaults");
    nd_share_params off = {0};
    CHECK(!nd_share_on(&off) && !nd_share_on(NULL), "off");
}

int main(void)
{
    UNIT_RUN(test_union_brute_force);
    UNIT_RUN(test_decide_shares_brute_force);
    UNIT_RUN(test_decide_kinds);
    UNIT_RUN(test_defaults);
    return unit_summary("share");
}
