/* test_passages.c - copied passages on both sides (lib/passages.h) on real
 * texts (tests/integration/texts): identical texts, an excerpt under a
 * header and above a footer, reordered paragraphs, Chinese, Traditional
 * against Simplified, look-alike letters, edits every few words, unrelated
 * texts, and adversarial inputs (one repeated token, 1 MiB) bounded in
 * time. Each pair found in a copy is checked against the texts: its two
 * spans, sketched again, read the same. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hashflood.h"
#include "passages.h"
#include "sketch.h"
#include "unit.h"

static nd_sketcher *sk;
static nd_sk_scratch *sa, *sb, *sx, *sy;
static nd_pairing *pg;

#define CAP 64

static char *read_text(const char *name)
{
    const char *root = getenv("ND_SOURCE_ROOT");
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/integration/texts/%s", root ? root : ".", name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

static char *cat3(const char *x, const char *y, const char *z)
{
    size_t a = strlen(x), b = strlen(y), c = strlen(z);
    char *s = malloc(a + b + c + 1);
    memcpy(s, x, a);
    memcpy(s + a, y, b);
    memcpy(s + a + b, z, c + 1);
    return s;
}

/* Code points of s[0..bytes). */
static uint32_t cps(const char *s, size_t bytes)
{
    uint32_t n = 0;
    for (size_t i = 0; i < bytes; i++)
        n += ((uint8_t)s[i] & 0xC0) != 0x80;
    return n;
}

/* Byte offset of code point cp in s. */
static size_t byte_at(const char *s, uint32_t cp)
{
    size_t i = 0;
    uint32_t c = 0;
    for (; s[i]; i++) {
        if (((uint8_t)s[i] & 0xC0) != 0x80) {
            if (c == cp)
                return i;
            c++;
        }
    }
    return i;
}

/* The pairs of a (submitted) found in b (source), compared in b's mode, as
 * the server pairs them: a sketched for a query (both modes), b for
 * registration (its own). Returns the total; *mode gets b's mode. */
static size_t pairs_of(const char *a, const char *b, nd_passage_pair *out, unsigned *mode)
{
    nd_sketch qa[2], db;
    nd_sketch_info info;
    int rc = nd_sketch_text_modes(sk, sa, a, strlen(a), qa, NULL, 0, NULL);
    CHECK(rc >= 0, "sketch a: %d", rc);
    rc = nd_sketch_text(sk, sb, b, strlen(b), &db, NULL, 0, &info);
    CHECK(rc == 0, "sketch b: %d", rc);
    const nd_shingle *ha, *hb;
    size_t na, nb, total = 0;
    CHECK(nd_sketch_shingles(sa, info.mode, &ha, &na) == 0);
    CHECK(nd_sketch_shingles(sb, info.mode, &hb, &nb) == 0);
    rc = nd_passage_pairs(pg, ha, na, hb, nb, info.mode, out, CAP, &total);
    CHECK(rc == 0, "pairs: %d", rc);
    *mode = info.mode;
    return total;
}

/* The shingle hashes of mode m of s's code points [start, end). */
static size_t span_shingles(nd_sk_scratch *scr, const char *s, uint32_t start, uint32_t end,
                            unsigned m, const nd_shingle **sh)
{
    size_t b = byte_at(s, start), e = byte_at(s, end), n = 0;
    nd_sketch two[2];
    if (nd_sketch_text_modes(sk, scr, s + b, e - b, two, NULL, 0, NULL) < 0 ||
        nd_sketch_shingles(scr, m, sh, &n) < 0)
        return 0;
    return n;
}

/* Whether a pair's two spans read the same (their shingles, sketched
 * again, are equal in mode m). */
static bool same_reading(const char *a, const char *b, const nd_passage_pair *p, unsigned m)
{
    const nd_shingle *x, *y;
    size_t nx = span_shingles(sx, a, p->start, p->end, m, &x);
    size_t ny = span_shingles(sy, b, p->source_start, p->source_end, m, &y);
    if (nx == 0 || nx != ny)
        return false;
    for (size_t i = 0; i < nx; i++)
        if (x[i].h != y[i].h)
            return false;
    return true;
}

static void test_identical(void)
{
    const char *names[] = {"en1.txt", "zh1.txt"};
    for (int k = 0; k < 2; k++) {
        char *t = read_text(names[k]);
        REQUIRE(t != NULL);
        nd_passage_pair p[CAP];
        unsigned m;
        size_t n = pairs_of(t, t, p, &m);
        CHECK(n == 1, "%s: %zu pairs", names[k], n);
        CHECK(p[0].start == p[0].source_start && p[0].end == p[0].source_end);
        /* From the first token to the last: all but the text's edges. */
        uint32_t all = cps(t, strlen(t));
        CHECK(p[0].start < 8 && p[0].end + 8 > all, "%s: [%u, %u) of %u", names[k], p[0].start,
              p[0].end, all);
        CHECK(same_reading(t, t, &p[0], m));
        free(t);
    }
}

/* A middle section of a long text under a header, above a footer: one
 * pair whose source span is where the section came from. */
static void test_excerpt(void)
{
    const char *names[] = {"long/en-long.txt", "long/zh-long.txt"};
    for (int k = 0; k < 2; k++) {
        char *src = read_text(names[k]);
        REQUIRE(src != NULL);
        size_t len = strlen(src), from = len / 3, to = len / 2;
        while (((uint8_t)src[from] & 0xC0) == 0x80)
            from++;
        while (((uint8_t)src[to] & 0xC0) == 0x80)
            to++;
        char saved = src[to];
        src[to] = 0;
        char *a = k ? cat3("转载自某某网站，作者匿名，阅读原文请点击这里\n\n", src + from,
                           "\n\n本文版权归原作者所有，如有侵权请联系删除，谢谢合作")
                    : cat3("Reposted from a blog of somebody we do not know at all\n\n", src + from,
                           "\n\nShare this post with your friends and follow us");
        src[to] = saved;
        nd_passage_pair p[CAP];
        unsigned m;
        size_t n = pairs_of(a, src, p, &m);
        CHECK(n == 1, "%s: %zu pairs", names[k], n);
        uint32_t hs = cps(a, strstr(a, "\n\n") - a + 2), at = cps(src, from),
                 sec = cps(src + from, to - from);
        /* the section's first and last tokens may be cut (a shingle at an
         * edge is not the source's): within a few code points */
        CHECK(p[0].start >= hs && p[0].start < hs + 12, "%s: start %u, section at %u", names[k],
              p[0].start, hs);
        CHECK(p[0].source_start >= at && p[0].source_start < at + 12, "%s: source %u, from %u",
              names[k], p[0].source_start, at);
        CHECK(p[0].source_end <= at + sec && p[0].source_end + 24 > at + sec,
              "%s: source end %u, section ends %u", names[k], p[0].source_end, at + sec);
        CHECK(same_reading(a, src, &p[0], m), "%s", names[k]);
        free(a);
        free(src);
    }
}

/* Paragraphs of a text in another order: a pair per paragraph moved, each
 * pointing at its own paragraph in the source. */
static void test_reordered(void)
{
    char *t[3] = {read_text("en1.txt"), read_text("en2.txt"), read_text("en3.txt")};
    REQUIRE(t[0] && t[1] && t[2]);
    char *b = cat3(t[0], "\n\n", t[1]), *b3 = cat3(b, "\n\n", t[2]);
    char *a = cat3(t[1], "\n\n", t[0]), *a3 = cat3(a, "\n\n", t[2]);
    nd_passage_pair p[CAP];
    unsigned m;
    size_t n = pairs_of(a3, b3, p, &m);
    CHECK(n == 3, "%zu pairs", n);
    uint32_t l0 = cps(t[0], strlen(t[0])), l1 = cps(t[1], strlen(t[1]));
    uint32_t l2 = cps(t[2], strlen(t[2]));
    /* A: t1 t0 t2; B: t0 t1 t2 */
    uint32_t want_src[3] = {l0 + 2, 0, l0 + l1 + 4};
    uint32_t want_len[3] = {l1, l0, l2};
    for (size_t i = 0; i < n && i < 3; i++) {
        CHECK(p[i].source_start >= want_src[i] && p[i].source_start < want_src[i] + 8,
              "pair %zu: source %u, paragraph at %u", i, p[i].source_start, want_src[i]);
        CHECK(p[i].end - p[i].start + 12 > want_len[i], "pair %zu: %u of %u", i,
              p[i].end - p[i].start, want_len[i]);
        CHECK(same_reading(a3, b3, &p[i], m), "pair %zu", i);
    }
    free(a), free(a3), free(b), free(b3);
    for (int i = 0; i < 3; i++)
        free(t[i]);
}

/* Replaces every occurrence of from by to in s (new string). */
static char *replace_all(const char *s, const char *from, const char *to)
{
    size_t lf = strlen(from), lt = strlen(to), n = 0;
    for (const char *p = s; (p = strstr(p, from)); p += lf)
        n++;
    char *out = malloc(strlen(s) + n * (lt > lf ? lt - lf : 0) + 1), *w = out;
    for (const char *p = s;;) {
        const char *q = strstr(p, from);
        if (!q) {
            strcpy(w, p);
            break;
        }
        memcpy(w, p, (size_t)(q - p));
        w += q - p;
        memcpy(w, to, lt);
        w += lt;
        p = q + lf;
    }
    return out;
}

/* A Chinese text in Traditional characters against its Simplified source,
 * and an English one with Cyrillic look-alikes and zero-width spaces: the
 * folds read both alike, so the copy is one pair over the whole text. */
static void test_evasions(void)
{
    static const char *t2s[][2] = {
        {"们", "們"}, {"为", "為"}, {"过", "過"}, {"软", "軟"}, {"个", "個"}, {"发", "發"},
        {"这", "這"}, {"时", "時"}, {"对", "對"}, {"会", "會"}, {"还", "還"}, {"经", "經"},
        {"开", "開"}, {"级", "級"}, {"编", "編"}, {"库", "庫"}, {"务", "務"}, {"译", "譯"},
    };
    char *src = read_text("zh2.txt");
    REQUIRE(src != NULL);
    char *a = strdup(src);
    size_t changed = 0;
    for (size_t i = 0; i < sizeof(t2s) / sizeof(t2s[0]); i++) {
        char *next = replace_all(a, t2s[i][0], t2s[i][1]);
        changed += strcmp(next, a) != 0;
        free(a);
        a = next;
    }
    CHECK(changed >= 6, "%zu characters converted", changed);
    nd_passage_pair p[CAP];
    unsigned m;
    size_t n = pairs_of(a, src, p, &m);
    uint32_t all = cps(src, strlen(src));
    CHECK(n == 1 && m == ND_SKETCH_MODE_CHAR, "traditional: %zu pairs, mode %u", n, m);
    CHECK(p[0].end - p[0].start + 16 > all && p[0].source_end - p[0].source_start + 16 > all,
          "traditional: [%u, %u) of %u", p[0].start, p[0].end, all);
    CHECK(same_reading(a, src, &p[0], m));
    free(a);
    free(src);

    src = read_text("en2.txt");
    REQUIRE(src != NULL);
    char *x = replace_all(src, "a", "\xd0\xb0"); /* Cyrillic a */
    char *y = replace_all(x, "o", "\xd0\xbe");   /* Cyrillic o */
    a = replace_all(y, " the ",
                    " th\xe2\x80\x8b"
                    "e ");
    n = pairs_of(a, src, p, &m);
    all = cps(src, strlen(src));
    CHECK(n == 1 && m == ND_SKETCH_MODE_WORD, "look-alikes: %zu pairs", n);
    CHECK(p[0].source_end - p[0].source_start + 16 > all, "look-alikes: [%u, %u) of %u",
          p[0].source_start, p[0].source_end, all);
    CHECK(same_reading(a, src, &p[0], m));
    free(x), free(y), free(a), free(src);
}

/* A word replaced every 25 words: the runs between the edits merge into
 * one passage over the whole text. */
static void test_edits(void)
{
    char *src = read_text("en5.txt");
    REQUIRE(src != NULL);
    char *a = strdup(src);
    int words = 0;
    for (char *p = a; *p; p++)
        if (*p == ' ' && ++words % 25 == 0 && p[1] >= 'a' && p[1] <= 'z')
            p[1] = 'q';
    nd_passage_pair p[CAP];
    unsigned m;
    size_t n = pairs_of(a, src, p, &m);
    uint32_t all = cps(src, strlen(src));
    CHECK(n == 1, "%zu pairs", n);
    CHECK(p[0].end - p[0].start + 16 > all, "[%u, %u) of %u", p[0].start, p[0].end, all);
    free(a);
    free(src);
}

/* Texts that share no passage: no pair (the English texts share function
 * words, the Chinese ones common words, by chance). */
static void test_unrelated(void)
{
    const char *en[] = {"en1.txt", "en2.txt", "en3.txt", "en4.txt", "en5.txt"};
    const char *zh[] = {"zh1.txt", "zh2.txt", "zh3.txt", "zh4.txt", "zh5.txt"};
    for (int set = 0; set < 2; set++) {
        const char **names = set ? zh : en;
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 5; j++) {
                if (i == j)
                    continue;
                char *a = read_text(names[i]), *b = read_text(names[j]);
                REQUIRE(a && b);
                nd_passage_pair p[CAP];
                unsigned m;
                size_t n = pairs_of(a, b, p, &m);
                CHECK(n == 0, "%s in %s: %zu pairs, first [%u, %u) <- [%u, %u)", names[i], names[j],
                      n, p[0].start, p[0].end, p[0].source_start, p[0].source_end);
                free(a);
                free(b);
            }
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static char *repeat(const char *unit, size_t bytes)
{
    size_t u = strlen(unit), n = bytes / u;
    char *s = malloc(n * u + 1);
    for (size_t i = 0; i < n; i++)
        memcpy(s + i * u, unit, u);
    s[n * u] = 0;
    return s;
}

/* One token repeated over 1 MiB on both sides, and a 1 MiB text against
 * a text of two alternating tokens: bounded (linear) work and output. */
static void test_adversarial(void)
{
    const char *units[][2] = {{"spam ", "spam "},
                              {"\xe5\x95\x8a", "\xe5\x95\x8a"},
                              {"spam ", "spam eggs "},
                              {"a b ", "b a "}};
    for (size_t k = 0; k < sizeof(units) / sizeof(units[0]); k++) {
        char *a = repeat(units[k][0], 1 << 20), *b = repeat(units[k][1], 1 << 20);
        nd_passage_pair p[CAP];
        unsigned m;
        double t0 = now_s();
        size_t n = pairs_of(a, b, p, &m);
        double dt = now_s() - t0;
        unit_note("%s / %s: %zu pairs in %.3f s", k == 1 ? "han" : units[k][0],
                  k == 1 ? "han" : units[k][1], n, dt);
        CHECK(dt < 5.0, "%zu: %.2f s", k, dt);
        if (k < 2) /* the same text: one pair */
            CHECK(n == 1 && p[0].start == 0, "%zu: %zu pairs", k, n);
        free(a);
        free(b);
    }
}

/* Best of 3: seconds of nd_passage_pairs() of a's shingles in b's (both
 * Han: character mode); *n and out[0] the pairs. */
static double time_pairs(const char *a, size_t la, const char *b, size_t lb, nd_passage_pair *out,
                         size_t *n)
{
    const nd_shingle *ha, *hb;
    size_t na = 0, nb = 0;
    nd_sketch_info ia, ib;
    CHECK(nd_sketch_shingle_text(sk, sx, a, la, &ia) == 0 &&
          nd_sketch_shingle_text(sk, sy, b, lb, &ib) == 0 && ia.mode == ND_SKETCH_MODE_CHAR &&
          ib.mode == ND_SKETCH_MODE_CHAR);
    CHECK(nd_sketch_shingles(sx, ND_SKETCH_MODE_CHAR, &ha, &na) == 0 &&
          nd_sketch_shingles(sy, ND_SKETCH_MODE_CHAR, &hb, &nb) == 0);
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        int rc = nd_passage_pairs(pg, ha, na, hb, nb, ND_SKETCH_MODE_CHAR, out, CAP, n);
        double dt = now_s() - t0;
        CHECK(rc == 0, "rc %d", rc);
        best = dt < best ? dt : best;
    }
    return best;
}

/* Audit G01, hash flooding: a source whose shingle hashes all fall into
 * the first 4096 cells of the table's old layout (tests/hashflood.h) is
 * paired in about the time of a random text of the same length (the old
 * table walked the cluster at every insertion and lookup: ~500x at 20,000
 * characters), with the same passages: the whole text against itself,
 * and the crafted part of a random text followed by it. */
static void test_hash_flooding(void)
{
    static hf_alphabet al;
    REQUIRE(hf_alphabet_init(sk, sa, &al) == 0, "alphabet");
    enum { N = 20000 };
    size_t bytes = 3 * (N + 4);
    char *crafted = malloc(bytes), *plain = malloc(2 * bytes);
    uint64_t *th = malloc((N + 4) * sizeof(uint64_t)), seed = 2463534242ull;
    REQUIRE(crafted && plain && th);
    size_t missed = hf_text(&al, N, 4096, false, &seed, crafted, th);
    hf_text(&al, N, SIZE_MAX, false, &seed, plain, th);
    CHECK(missed < N / 100, "%zu shingles outside the window", missed);
    nd_passage_pair p[CAP];
    size_t nc = 0, nr = 0, nm = 0;
    double tc = time_pairs(crafted, bytes, crafted, bytes, p, &nc);
    CHECK(nc == 1 && p[0].start == 0 && p[0].end == N + 4 && p[0].source_start == 0 &&
              p[0].source_end == N + 4,
          "crafted: %zu pairs, [%u, %u) <- [%u, %u)", nc, p[0].start, p[0].end, p[0].source_start,
          p[0].source_end);
    double tr = time_pairs(plain, bytes, plain, bytes, p, &nr);
    CHECK(nr == 1 && p[0].start == 0 && p[0].end == N + 4, "random: %zu pairs", nr);
    unit_note("nd_passage_pairs, %d characters against themselves: crafted %.4f s, random %.4f s "
              "(%.1fx)",
              N + 4, tc, tr, tc / tr);
    CHECK(tc < 10 * tr + 0.01, "crafted %.4f s, random %.4f s", tc, tr);
    /* random then crafted, against the crafted text: its second half */
    memcpy(plain + bytes, crafted, bytes);
    double tm = time_pairs(plain, 2 * bytes, crafted, bytes, p, &nm);
    CHECK(nm == 1 && p[0].start == N + 4 && p[0].end == 2 * (N + 4) && p[0].source_start == 0 &&
              p[0].source_end == N + 4,
          "mixed: %zu pairs, [%u, %u) <- [%u, %u)", nm, p[0].start, p[0].end, p[0].source_start,
          p[0].source_end);
    CHECK(tm < 20 * tr + 0.01, "mixed %.4f s, random %.4f s", tm, tr);
    free(crafted);
    free(plain);
    free(th);
}

/* nd_sketch_shingle_text() (what a source is read with) holds the same
 * shingles as nd_sketch_text() in the text's own mode. */
static void test_shingle_text(void)
{
    const char *names[] = {"en1.txt", "zh1.txt", "long/zh-long.txt"};
    for (int k = 0; k < 3; k++) {
        char *t = read_text(names[k]);
        REQUIRE(t != NULL);
        nd_sketch d;
        nd_sketch_info i1, i2;
        const nd_shingle *x, *y;
        size_t nx = 0, ny = 0;
        CHECK(nd_sketch_text(sk, sa, t, strlen(t), &d, NULL, 0, &i1) == 0);
        CHECK(nd_sketch_shingle_text(sk, sb, t, strlen(t), &i2) == 0);
        CHECK(i1.mode == i2.mode && i1.shingles == i2.shingles && i1.code_points == i2.code_points);
        CHECK(nd_sketch_shingles(sa, i1.mode, &x, &nx) == 0 &&
              nd_sketch_shingles(sb, i2.mode, &y, &ny) == 0);
        CHECK(nx == ny && nx > 0 && memcmp(x, y, nx * sizeof(*x)) == 0, "%s: %zu / %zu", names[k],
              nx, ny);
        free(t);
    }
}

int main(void)
{
    if (nd_sketcher_create(&sk) < 0 || nd_sk_scratch_create(&sa) < 0 ||
        nd_sk_scratch_create(&sb) < 0 || nd_sk_scratch_create(&sx) < 0 ||
        nd_sk_scratch_create(&sy) < 0 || nd_pairing_create(&pg) < 0) {
        printf("Bail out! sketcher\n");
        return 1;
    }
    UNIT_RUN(test_identical);
    UNIT_RUN(test_excerpt);
    UNIT_RUN(test_reordered);
    UNIT_RUN(test_evasions);
    UNIT_RUN(test_edits);
    UNIT_RUN(test_unrelated);
    UNIT_RUN(test_adversarial);
    UNIT_RUN(test_shingle_text);
    UNIT_RUN(test_hash_flooding);
    nd_pairing_destroy(pg);
    nd_sk_scratch_destroy(sa);
    nd_sk_scratch_destroy(sb);
    nd_sk_scratch_destroy(sx);
    nd_sk_scratch_destroy(sy);
    nd_sketcher_destroy(sk);
    return unit_summary("passages");
}
