/* test_tokenizer.c - lib/tokenizer.c: one reading in three shapes.
 *
 * The fingerprint and the sketch read a text through nd_tokenize(); their
 * vectors (test_fingerprint, test_sketch) check the tokens end to end.
 * Here: the shapes agree with each other token for token (spans, list,
 * BMP CJK counted), spans and weights, skipped markup, Hangul composition,
 * refusal of invalid UTF-8, and no growth on a text read again. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tokenizer.h"
#include "unit.h"

static nd_tokenizer *tk;

static const char *const texts[] = {
    "Hello, world! The quick brown fox.",
    "今天天气很好，我们去公园散步吧。",
    "混合 mixed 文本 with 漢字 and 繁體字 和 English words 123",
    "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8 \xea\xb0\x80\xe1\x86\xa8 한국어 텍스트", /* jamo */
    "\xf0\xa0\x80\x80\xf0\xa0\x80\x81 astral \xf0\xa0\x80\x80 han",                /* U+20000 */
    "see https://example.com/a?b=c now ![img](http://x/y.png) and [link](target) end",
    "in\xe2\x80\x8bvisible zero\xe2\x80\x8dwidth \xef\xbc\xa6\xef\xbd\x95\xef\xbd\x8c\xef\xbd\x8c",
    "原(yuán)创(chuàng)文(wén)章(zhāng)的内容",
    "",
    "   ...   ",
};

/* Whether the token streams a and b hold the same hashes and code points. */
static int same_list(const nd_token_stream *a, const nd_token_stream *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->h[i] != b->h[i] || a->cjk[i] != b->cjk[i])
            return 0;
    return 1;
}

/* The shapes agree: the list is the spans' stream without spans; the
 * counted shape is the list without its BMP CJK tokens, which it counts
 * by code point in order of first occurrence. */
static void test_shapes_agree(void)
{
    nd_tokens sp, li, co;
    nd_tokens_init(&sp), nd_tokens_init(&li), nd_tokens_init(&co);
    for (size_t k = 0; k < sizeof(texts) / sizeof(texts[0]); k++) {
        const char *t = texts[k];
        size_t len = strlen(t);
        REQUIRE(nd_tokenize(tk, &sp, t, len, ND_TOKENIZE_SPANS | ND_TOKENIZE_CHARS) == 0, "%s", t);
        REQUIRE(nd_tokenize(tk, &li, t, len, 0) == 0, "%s", t);
        REQUIRE(nd_tokenize(tk, &co, t, len, ND_TOKENIZE_CJK_COUNTS) == 0, "%s", t);
        CHECK(same_list(&sp.word, &li.word), "spans and list differ: %s", t);
        CHECK(sp.stats.chars == li.stats.chars && li.stats.chars == co.stats.chars,
              "chars differ: %s", t);
        CHECK(sp.stats.code_points == li.stats.code_points, "code points differ: %s", t);
        size_t j = 0, bmp = 0, astral = 0, seen = 0;
        uint16_t tf[0x10000] = {0};
        int ok = 1;
        for (size_t i = 0; i < li.word.n; i++) {
            uint32_t cp = li.word.cjk[i];
            if (cp && cp < 0x10000) { /* counted, in order of first occurrence */
                bmp++;
                if (tf[cp]++ == 0)
                    ok &= seen < co.cjk.n && co.cjk.seen[seen++] == cp;
                continue;
            }
            astral += cp != 0;
            ok &= j < co.word.n && co.word.h[j] == li.word.h[i] && co.word.cjk[j] == cp;
            j++;
        }
        ok &= j == co.word.n && seen == co.cjk.n && co.cjk.occurrences == bmp &&
              co.cjk.listed == astral;
        for (size_t i = 0; i < co.cjk.n; i++) {
            ok &= co.cjk.tf[co.cjk.seen[i]] == tf[co.cjk.seen[i]];
            co.cjk.tf[co.cjk.seen[i]] = 0; /* the consumer's reset */
        }
        co.cjk.n = 0;
        CHECK(ok, "counted shape differs: %s", t);
    }
    nd_tokens_finish(&sp), nd_tokens_finish(&li), nd_tokens_finish(&co);
}

/* Spans, weights, hashes, and the character stream of a mixed text. */
static void test_spans(void)
{
    nd_tokens t;
    nd_tokens_init(&t);
    const char *s = "Hello 世界";
    REQUIRE(nd_tokenize(tk, &t, s, strlen(s), ND_TOKENIZE_SPANS | ND_TOKENIZE_CHARS) == 0);
    const nd_token_stream *w = &t.word, *c = &t.chr;
    REQUIRE(w->n == 3, "%zu tokens", w->n);
    CHECK(w->h[0] == XXH3_64bits("hello", 5) && w->cjk[0] == 0 && w->start[0] == 0 &&
          w->end[0] == 5 && w->w[0] == ND_TOKEN_W_WORD);
    CHECK(w->h[1] == XXH3_64bits("世", 3) && w->cjk[1] == 0x4E16 && w->start[1] == 6 &&
          w->end[1] == 7 && w->w[1] == ND_TOKEN_W_CJK);
    CHECK(w->cjk[2] == 0x754C && w->start[2] == 7 && w->end[2] == 8);
    REQUIRE(c->n == 7, "%zu character tokens", c->n);
    CHECK(c->h[0] == XXH3_64bits("h", 1) && c->cjk[0] == 0 && c->start[4] == 4 && c->end[4] == 5);
    CHECK(c->cjk[5] == 2 && c->cjk[6] == 3 && c->w[6] == ND_TOKEN_W_CJK, "word-stream indexes");
    CHECK(t.stats.code_points == 8 && t.stats.chars == 7 && t.stats.cjk_cps == 2 &&
          t.stats.word_cps == 5);
    /* no CHARS: the character stream stays empty */
    REQUIRE(nd_tokenize(tk, &t, s, strlen(s), ND_TOKENIZE_SPANS) == 0);
    CHECK(t.chr.n == 0 && t.word.n == 3);
    nd_tokens_finish(&t);
}

/* URLs and link targets are skipped unless ND_TOKENIZE_KEEP_MARKUP. */
static void test_markup(void)
{
    nd_tokens t;
    nd_tokens_init(&t);
    const char *s = "see https://example.com/a now";
    REQUIRE(nd_tokenize(tk, &t, s, strlen(s), ND_TOKENIZE_SPANS) == 0);
    CHECK(t.word.n == 2 && t.word.h[1] == XXH3_64bits("now", 3) && t.word.start[1] == 26,
          "%zu tokens", t.word.n);
    REQUIRE(nd_tokenize(tk, &t, s, strlen(s), ND_TOKENIZE_KEEP_MARKUP) == 0);
    CHECK(t.word.n == 6 && t.word.h[1] == XXH3_64bits("https", 5), "%zu tokens", t.word.n);
    nd_tokens_finish(&t);
}

/* Conjoining jamo compose into one syllable token spanning them. */
static void test_hangul(void)
{
    nd_tokens t;
    nd_tokens_init(&t);
    const char *s = "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"; /* U+1100 U+1161 U+11A8 */
    REQUIRE(nd_tokenize(tk, &t, s, strlen(s), ND_TOKENIZE_SPANS) == 0);
    CHECK(t.word.n == 1 && t.word.cjk[0] == 0xAC01 && t.word.start[0] == 0 && t.word.end[0] == 3,
          "%zu tokens", t.word.n);
    nd_tokens_finish(&t);
}

/* Invalid UTF-8 is refused, in a skipped span too. */
static void test_invalid(void)
{
    nd_tokens t;
    nd_tokens_init(&t);
    const char bad[] = "ok \xc3\x28 no", url[] = "x http://a/\xff y";
    CHECK(nd_tokenize(tk, &t, bad, sizeof(bad) - 1, ND_TOKENIZE_SPANS) == -EILSEQ);
    CHECK(nd_tokenize(tk, &t, url, sizeof(url) - 1, ND_TOKENIZE_CJK_COUNTS) == -EILSEQ);
    nd_tokens_finish(&t);
}

/* A text read again does not grow the storage (the hot path does not
 * allocate once it has grown). */
static void test_no_growth(void)
{
    nd_tokens t;
    nd_tokens_init(&t);
    const char *s = texts[2];
    REQUIRE(nd_tokenize(tk, &t, s, strlen(s), ND_TOKENIZE_SPANS | ND_TOKENIZE_CHARS) == 0);
    uint64_t *h = t.word.h, *ch = t.chr.h;
    size_t cap = t.word.cap, ccap = t.chr.cap;
    for (int i = 0; i < 3; i++)
        REQUIRE(nd_tokenize(tk, &t, s, strlen(s), ND_TOKENIZE_SPANS | ND_TOKENIZE_CHARS) == 0);
    CHECK(t.word.h == h && t.chr.h == ch && t.word.cap == cap && t.chr.cap == ccap);
    nd_tokens_finish(&t);
    nd_tokens_finish(&t); /* finish leaves it empty: a second one is harmless */
}

int main(void)
{
    CHECK(nd_tokenizer_create(&tk) == 0, "create");
    if (!tk)
        return unit_summary("tokenizer");
    UNIT_RUN(test_shapes_agree);
    UNIT_RUN(test_spans);
    UNIT_RUN(test_markup);
    UNIT_RUN(test_hangul);
    UNIT_RUN(test_invalid);
    UNIT_RUN(test_no_growth);
    nd_tokenizer_destroy(tk);
    nd_tokenizer_destroy(NULL);
    return unit_summary("tokenizer");
}
