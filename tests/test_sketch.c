/* test_sketch.c - the sketch against proto/sketch_vectors.jsonl (bit for
 * bit), exact figures for small texts, the asymmetry of containment, passage
 * offsets checked against the text, anchors, encode/decode. */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fingerprint_tuning.h"
#include "hashflood.h"
#include "sketch.h"
#include "unit.h"
#include "utf8.h"

static nd_sketcher *sk;
static nd_sk_scratch *scr;

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static size_t unhex(const char *h, uint8_t *out, size_t cap)
{
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = (uint8_t)(hexval(h[2 * i]) << 4 | hexval(h[2 * i + 1]));
    return n;
}

static int sketch_str(const char *t, nd_sketch *s, nd_anchors *a, unsigned m)
{
    return nd_sketch_text(sk, scr, t, strlen(t), s, a, m, NULL);
}

/* The code points [start, end) of t, into buf. */
static const char *cp_slice(const char *t, uint32_t start, uint32_t end, char *buf, size_t cap)
{
    size_t len = strlen(t), b = len, e = len;
    uint32_t ci = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || ((uint8_t)t[i] & 0xC0) != 0x80) {
            if (ci == start)
                b = i;
            if (ci == end) {
                e = i;
                break;
            }
            ci++;
        }
    }
    size_t n = e > b ? e - b : 0;
    if (n >= cap)
        n = cap - 1;
    memcpy(buf, t + b, n);
    buf[n] = '\0';
    return buf;
}

static void test_vectors(void)
{
    const char *root = getenv("ND_SOURCE_ROOT");
    char path[4096];
    snprintf(path, sizeof(path), "%s/proto/sketch_vectors.jsonl", root ? root : ".");
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f)
        return;
    char *line = NULL;
    size_t cap = 0;
    int singles = 0, pairs = 0, errors = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t jerr;
        json_t *v = json_loads(line, JSON_ALLOW_NUL, &jerr);
        CHECK(v != NULL, "bad vector line: %s", jerr.text);
        if (!v)
            continue;
        const char *name = json_string_value(json_object_get(v, "name"));
        if (json_is_true(json_object_get(v, "pair"))) {
            json_t *ja = json_object_get(v, "a"), *jb = json_object_get(v, "b");
            static nd_sketch a[2], b;
            int rc = nd_sketch_text(sk, scr, json_string_value(jb), json_string_length(jb), &b,
                                    NULL, 0, NULL);
            int mode = nd_sketch_text_modes(sk, scr, json_string_value(ja), json_string_length(ja),
                                            a, NULL, 0, NULL);
            CHECK(rc == 0 && mode >= 0, "%s: sketch failed", name);
            nd_sketch_estimate e;
            nd_sketch_compare(nd_sketch_for(a, &b), &b, &e);
            CHECK(e.shared == json_integer_value(json_object_get(v, "shared")) &&
                      e.q_n == json_integer_value(json_object_get(v, "a_n")) &&
                      e.d_n == json_integer_value(json_object_get(v, "b_n")) &&
                      e.shift == json_integer_value(json_object_get(v, "shift")),
                  "%s: shared %u a_n %u b_n %u shift %u", name, e.shared, e.q_n, e.d_n, e.shift);
            nd_passage ps[64];
            size_t np = nd_sketch_passages(scr, &b, ps, 64);
            json_t *jp = json_object_get(v, "passages");
            int same = np == json_array_size(jp);
            for (size_t i = 0; same && i < np; i++)
                same = ps[i].start ==
                           json_integer_value(json_array_get(json_array_get(jp, i), 0)) &&
                       ps[i].end == json_integer_value(json_array_get(json_array_get(jp, i), 1));
            CHECK(same, "%s: passages differ (%zu)", name, np);
            pairs++;
        } else {
            json_t *jt = json_object_get(v, "text");
            uint8_t raw[8192];
            const char *t;
            size_t len;
            if (jt) {
                t = json_string_value(jt), len = json_string_length(jt);
            } else {
                len = unhex(json_string_value(json_object_get(v, "text_hex")), raw, sizeof(raw));
                t = (const char *)raw;
            }
            nd_sketch s;
            nd_anchors a;
            int rc = nd_sketch_text(sk, scr, t, len, &s, &a, 32, NULL);
            if (json_object_get(v, "error")) {
                CHECK(rc == -EILSEQ, "%s: rc %d, want -EILSEQ", name, rc);
                errors++;
            } else {
                uint8_t want[ND_SKETCH_ENCODED_MAX], got[ND_SKETCH_ENCODED_MAX];
                size_t wn = unhex(json_string_value(json_object_get(v, "sketch")), want,
                                  sizeof(want));
                size_t gn = nd_sketch_encode(&s, got, sizeof(got));
                CHECK(rc == 0 && wn == gn && memcmp(want, got, gn) == 0, "%s: sketch differs",
                      name);
                json_t *ja = json_object_get(v, "anchors");
                int same = a.n == json_array_size(ja);
                for (size_t i = 0; same && i < a.n; i++)
                    same = a.a[i] == (uint32_t)json_integer_value(json_array_get(ja, i));
                CHECK(same, "%s: anchors differ", name);
            }
            singles++;
        }
        json_decref(v);
    }
    free(line);
    fclose(f);
    CHECK(singles >= 80 && pairs >= 6 && errors >= 4, "only %d/%d/%d vectors", singles, pairs,
          errors);
}

/* Distinct words w0 .. w(n-1) from index `from`, space separated. */
static void words(char *buf, size_t cap, int from, int n)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%sword%d", i ? " " : "", from + i);
}

/* n Han characters, character from + i drawn from a fixed sequence (the
 * same i gives the same character): slices of one long text. */
static void hans(char *buf, size_t cap, int from, int n)
{
    size_t off = 0;
    for (int i = 0; i < n && off + 4 < cap; i++) {
        uint32_t x = (uint32_t)(from + i) * 2654435761u;
        uint32_t cp = 0x4E00 + (x >> 8) % 3000;
        buf[off++] = (char)(0xE0 | cp >> 12);
        buf[off++] = (char)(0x80 | (cp >> 6 & 0x3F));
        buf[off++] = (char)(0x80 | (cp & 0x3F));
    }
    buf[off] = '\0';
}

/* How many of a[0..na) are in b[0..nb). */
static unsigned shared_anchors(const uint32_t *a, unsigned na, const uint32_t *b, unsigned nb)
{
    unsigned n = 0;
    for (unsigned i = 0; i < na; i++)
        for (unsigned j = 0; j < nb; j++)
            if (a[i] == b[j]) {
                n++;
                break;
            }
    return n;
}

/* Anchors that grow with the text (ND_ANCHORS_SCALED): the count follows
 * the mode's shingles between ND_ANCHORS_STORE and ND_ANCHORS_MAX, they
 * are a prefix of the bottom-64, and a 10 % excerpt of a long text (its
 * query: its own mode scaled, nd_sketch_query()) shares several of the
 * anchors the whole text is stored under, where 16 of each share few. */
static void test_scaled_anchors(void)
{
    CHECK(nd_anchors_scaled(ND_SKETCH_MODE_WORD, 0) == ND_ANCHORS_STORE &&
              nd_anchors_scaled(ND_SKETCH_MODE_WORD, 16 * ND_ANCHORS_RATE_WORD) == 16 &&
              nd_anchors_scaled(ND_SKETCH_MODE_WORD, 16 * ND_ANCHORS_RATE_WORD + 1) == 17 &&
              nd_anchors_scaled(ND_SKETCH_MODE_WORD, 64 * ND_ANCHORS_RATE_WORD) == 64 &&
              nd_anchors_scaled(ND_SKETCH_MODE_WORD, (size_t)1 << 40) == ND_ANCHORS_MAX &&
              nd_anchors_scaled(ND_SKETCH_MODE_CHAR, 16 * ND_ANCHORS_RATE_CHAR) == 16 &&
              nd_anchors_scaled(ND_SKETCH_MODE_CHAR, 16 * ND_ANCHORS_RATE_CHAR + 1) == 17 &&
              nd_anchors_scaled(ND_SKETCH_MODE_CHAR, 40 * ND_ANCHORS_RATE_CHAR - 1) == 40,
          "nd_anchors_scaled()");
    static char big[120000], part[40000];
    nd_sketch s;
    nd_anchors a, all;
    /* Word mode: W words give W - 2 shingles. */
    static const int ws[] = {20, 100, 16 * ND_ANCHORS_RATE_WORD + 3, 300, 500, 700, 3000};
    for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) {
        words(big, sizeof(big), 0, ws[i]);
        CHECK(sketch_str(big, &s, &a, ND_ANCHORS_SCALED) == 0 &&
                  sketch_str(big, &s, &all, ND_ANCHORS_MAX) == 0,
              "sketch %d words", ws[i]);
        unsigned want = nd_anchors_scaled(ND_SKETCH_MODE_WORD, (size_t)ws[i] - 2);
        want = want < s.shingles ? want : s.shingles;
        CHECK(a.n == want && memcmp(a.a, all.a, a.n * sizeof(uint32_t)) == 0,
              "%d words: %u anchors (want %u), a prefix of the bottom-64", ws[i], a.n, want);
    }
    /* Character mode: one shingle per Han character (n - 4). */
    static const int cs[] = {100, 16 * ND_ANCHORS_RATE_CHAR + 5, 1500, 2500, 9000};
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) {
        hans(big, sizeof(big), 0, cs[i]);
        CHECK(sketch_str(big, &s, &a, ND_ANCHORS_SCALED) == 0 &&
                  sketch_str(big, &s, &all, ND_ANCHORS_MAX) == 0 && s.mode == ND_SKETCH_MODE_CHAR,
              "sketch %d characters", cs[i]);
        unsigned want = nd_anchors_scaled(ND_SKETCH_MODE_CHAR, (size_t)cs[i] - 4);
        CHECK(a.n == want && memcmp(a.a, all.a, a.n * sizeof(uint32_t)) == 0,
              "%d characters: %u anchors (want %u), a prefix of the bottom-64", cs[i], a.n, want);
    }
    /* A 10 % excerpt (the first, and one from the middle) of long texts of
     * both modes, against the whole one's stored anchors. */
    for (int mode = 0; mode < 2; mode++) {
        int n = mode == ND_SKETCH_MODE_CHAR ? 8000 : 2000;
        unsigned worst = ND_ANCHORS_MAX, worst16 = ND_ANCHORS_MAX, total = 0, count = 0;
        nd_anchors stored, stored16, q[2];
        if (mode == ND_SKETCH_MODE_CHAR)
            hans(big, sizeof(big), 0, n);
        else
            words(big, sizeof(big), 0, n);
        CHECK(sketch_str(big, &s, &stored, ND_ANCHORS_SCALED) == 0 &&
                  sketch_str(big, &s, &stored16, ND_ANCHORS_STORE) == 0 &&
                  stored.n == ND_ANCHORS_MAX && s.mode == mode,
              "mode %d: whole text stored under %u anchors", mode, stored.n);
        for (int from = 0; from < n - n / 10; from += n / 20) {
            if (mode == ND_SKETCH_MODE_CHAR)
                hans(part, sizeof(part), from, n / 10);
            else
                words(part, sizeof(part), from, n / 10);
            int m = nd_sketch_query(sk, scr, part, strlen(part), q, ND_ANCHORS_SCALED, NULL);
            CHECK(m == mode, "excerpt mode %d", m);
            if (m != mode)
                break;
            unsigned sh = shared_anchors(q[m].a, q[m].n, stored.a, stored.n);
            unsigned sh16 = shared_anchors(q[m].a, q[m].n < 16 ? q[m].n : 16, stored16.a, 16);
            worst = sh < worst ? sh : worst;
            total += sh, count++;
            worst16 = sh16 < worst16 ? sh16 : worst16;
        }
        /* about 6.4 expected per excerpt with 64 stored (1.6 with 16) */
        CHECK(worst >= 1 && total >= 4 * count,
              "mode %d: 10 %% excerpts share %u of the stored anchors in %u, %u at least", mode,
              total, count, worst);
        CHECK(worst16 == 0, "mode %d: with 16 anchors each, some excerpt shares none (%u)", mode,
              worst16);
    }
}

static void test_exact_small(void)
{
    char a[4096], b[4096];
    nd_sketch sa, sb;
    nd_sketch_estimate e, r;
    /* 40 words: 38 shingles; b = words 0..19: 18 shingles, all in a. */
    words(a, sizeof(a), 0, 40);
    words(b, sizeof(b), 0, 20);
    CHECK(sketch_str(a, &sa, NULL, 0) == 0 && sketch_str(b, &sb, NULL, 0) == 0, "sketch");
    CHECK(sa.shingles == 38 && sb.shingles == 18 && sa.shift == 0 && sb.shift == 0,
          "shingles %u %u shift %u %u", sa.shingles, sb.shingles, sa.shift, sb.shift);
    nd_sketch_compare(&sb, &sa, &e); /* the excerpt submitted */
    nd_sketch_compare(&sa, &sb, &r); /* the whole submitted */
    CHECK(e.shared == 18 && e.containment == 1.0 && e.containment_r == 18.0 / 38 &&
              e.resemblance == 18.0 / 38,
          "excerpt: shared %u C %f Cr %f R %f", e.shared, e.containment, e.containment_r,
          e.resemblance);
    /* Asymmetry: containment swaps, resemblance does not. */
    CHECK(r.containment == e.containment_r && r.containment_r == e.containment &&
              r.resemblance == e.resemblance,
          "reverse: C %f Cr %f", r.containment, r.containment_r);
    /* Han: 5-character shingles; 30 distinct ideographs: 26 shingles. */
    char zh[512] = "", zh2[512] = "";
    size_t off = 0, off2 = 0;
    for (int i = 0; i < 30; i++) {
        uint32_t cp = 0x4E00 + (uint32_t)i * 7;
        char u[4] = {(char)(0xE0 | cp >> 12), (char)(0x80 | ((cp >> 6) & 63)),
                     (char)(0x80 | (cp & 63))};
        memcpy(zh + off, u, 3), off += 3;
        if (i >= 10) /* the last 20 characters, then 10 new ones */
            memcpy(zh2 + off2, u, 3), off2 += 3;
    }
    for (int i = 0; i < 10; i++) {
        uint32_t cp = 0x5E00 + (uint32_t)i;
        char u[4] = {(char)(0xE0 | cp >> 12), (char)(0x80 | ((cp >> 6) & 63)),
                     (char)(0x80 | (cp & 63))};
        memcpy(zh2 + off2, u, 3), off2 += 3;
    }
    zh[off] = zh2[off2] = '\0';
    CHECK(sketch_str(zh, &sa, NULL, 0) == 0 && sketch_str(zh2, &sb, NULL, 0) == 0, "zh");
    nd_sketch_compare(&sb, &sa, &e);
    /* shared: shingles starting at characters 10..25 of zh: 16 of zh2's 26 */
    CHECK(sa.shingles == 26 && sb.shingles == 26 && e.shared == 16, "zh: %u %u shared %u",
          sa.shingles, sb.shingles, e.shared);
    /* Punctuation, width, case, markup and URLs do not matter. */
    nd_sketch s1, s2;
    sketch_str("Hello, World! This is the SAME text here.", &s1, NULL, 0);
    sketch_str("hello world ![image](https://cdn.example.com/x.png) this is the same text "
               "https://example.com/here here",
               &s2, NULL, 0);
    nd_sketch_compare(&s1, &s2, &e);
    CHECK(e.resemblance == 1.0 && s1.shingles == 6, "markup: R %f shingles %u", e.resemblance,
          s1.shingles);
    /* Short texts: below weight 15 one shingle of everything; none if empty. */
    sketch_str("two words", &s1, NULL, 0);
    sketch_str(" ,.!  ", &s2, NULL, 0);
    CHECK(s1.shingles == 1 && s1.n == 1 && s2.shingles == 0 && s2.n == 0, "short %u %u",
          s1.shingles, s2.shingles);
    nd_sketch_compare(&s2, &s2, &e);
    CHECK(e.resemblance == 0 && e.containment == 0 && e.shared == 0, "empty compare");
    CHECK(nd_sketch_text(sk, scr, "\xff\xfe", 2, &s1, NULL, 0, NULL) == -EILSEQ, "EILSEQ");
    CHECK(nd_sketch_passages(scr, &s2, NULL, 0) == 0, "no text after EILSEQ");
}

static void test_passages(void)
{
    /* submitted = 30 new words + 40 copied + 30 new; registered = the 40. */
    char pre[2048], mid[2048], post[2048], q[8192], d[4096], got[8192];
    words(pre, sizeof(pre), 1000, 30);
    words(mid, sizeof(mid), 0, 40);
    words(post, sizeof(post), 2000, 30);
    snprintf(q, sizeof(q), "%s. %s. %s", pre, mid, post);
    snprintf(d, sizeof(d), "Intro line.\n%s\nfin", mid);
    nd_sketch sq, sd;
    CHECK(sketch_str(d, &sd, NULL, 0) == 0 && sketch_str(q, &sq, NULL, 0) == 0, "sketch");
    nd_passage p[8];
    size_t n = nd_sketch_passages(scr, &sd, p, 8);
    CHECK(n == 1, "passages %zu", n);
    if (n == 1)
        CHECK(strcmp(cp_slice(q, p[0].start, p[0].end, got, sizeof(got)), mid) == 0,
              "passage [%u, %u) = '%s'", p[0].start, p[0].end, got);
    /* Two copied pieces with new text between: two passages, in order. */
    char m1[1024], m2[1024];
    words(m1, sizeof(m1), 0, 12);
    words(m2, sizeof(m2), 28, 12);
    snprintf(q, sizeof(q), "中文的开头部分。%s 完全不同的中间内容在这里出现了很多字 %s 结尾", m1,
             m2);
    /* Character mode (CJK >= 1/25): after nd_sketch_text() only that mode
     * is held, so no passages against a word-mode document... */
    sketch_str(q, &sq, NULL, 0);
    CHECK(sq.mode == ND_SKETCH_MODE_CHAR && sd.mode == ND_SKETCH_MODE_WORD, "modes %u %u", sq.mode,
          sd.mode);
    CHECK(nd_sketch_passages(scr, &sd, p, 8) == 0, "own mode only");
    /* ...but a query sketched in both modes has them. */
    static nd_sketch q2[2];
    CHECK(nd_sketch_text_modes(sk, scr, q, strlen(q), q2, NULL, 0, NULL) == ND_SKETCH_MODE_CHAR,
          "modes");
    nd_sketch_estimate e;
    nd_sketch_compare(nd_sketch_for(q2, &sd), &sd, &e);
    CHECK(e.shared == 20 && e.containment == 20.0 / e.q_n, "mixed: shared %u", e.shared);
    n = nd_sketch_passages(scr, &sd, p, 8);
    CHECK(n == 2, "two passages: %zu", n);
    if (n == 2) {
        CHECK(strcmp(cp_slice(q, p[0].start, p[0].end, got, sizeof(got)), m1) == 0, "first '%s'",
              got);
        CHECK(strcmp(cp_slice(q, p[1].start, p[1].end, got, sizeof(got)), m2) == 0, "second '%s'",
              got);
    }
    /* cap smaller than the count: the count is still returned. */
    CHECK(nd_sketch_passages(scr, &sd, p, 1) == 2 && p[0].start < p[0].end, "cap 1");
}

static void test_sampled(void)
{
    /* 2000 words: sampled; the first half of it is an excerpt. */
    static char big[40000], half[20000];
    words(big, sizeof(big), 0, 2000);
    words(half, sizeof(half), 0, 1000);
    nd_sketch sb, sh;
    nd_anchors ab, ah, ab16;
    CHECK(sketch_str(big, &sb, &ab, 32) == 0 && sketch_str(half, &sh, &ah, 32) == 0, "sketch");
    CHECK(sb.shift > 0 && sb.n <= ND_SKETCH_MAX && sb.n > ND_SKETCH_MAX / 4 && sb.shingles == 1998,
          "big: shift %u n %u", sb.shift, sb.n);
    nd_sketch_estimate e;
    nd_sketch_compare(&sh, &sb, &e);
    CHECK(e.containment == 1.0 && e.containment_r > 0.35 && e.containment_r < 0.65,
          "excerpt of a sampled text: C %f Cr %f", e.containment, e.containment_r);
    /* Anchors: a prefix of 16 is the bottom-16; the excerpt's bottom-32 holds
     * every anchor of the whole that it contains. */
    sketch_str(big, &sb, &ab16, 16);
    CHECK(ab16.n == 16 && memcmp(ab16.a, ab.a, 16 * 4) == 0, "anchor prefix");
    unsigned in_half = 0, found = 0;
    for (unsigned i = 0; i < ab.n; i++) {
        /* is anchor i of big among the excerpt's anchors? */
        int hit = 0;
        for (unsigned j = 0; j < ah.n; j++)
            hit |= ah.a[j] == ab.a[i];
        found += hit;
        in_half += hit;
    }
    CHECK(found >= 8 && found <= 24, "excerpt shares %u of 32 anchors", found);
    (void)in_half;
    /* Encode / decode round trip. */
    uint8_t buf[ND_SKETCH_ENCODED_MAX];
    size_t len = nd_sketch_encode(&sb, buf, sizeof(buf));
    nd_sketch back;
    CHECK(len == nd_sketch_encoded_size(&sb) && len == 8 + 4u * sb.n, "size %zu", len);
    CHECK(nd_sketch_decode(buf, len, &back) == 0 && back.n == sb.n && back.shift == sb.shift &&
              back.shingles == sb.shingles && memcmp(back.values, sb.values, 4u * sb.n) == 0,
          "round trip");
    CHECK(nd_sketch_encode(&sb, buf, len - 1) == 0, "short buffer");
    /* Corrupt encodings are rejected. */
    uint8_t bad[ND_SKETCH_ENCODED_MAX];
    memcpy(bad, buf, len);
    bad[0] = 2;
    CHECK(nd_sketch_decode(bad, len, &back) == -EINVAL, "format byte");
    CHECK(nd_sketch_decode(buf, len - 1, &back) == -EINVAL, "truncated");
    CHECK(nd_sketch_decode(buf, 7, &back) == -EINVAL, "no header");
    memcpy(bad, buf, len);
    bad[1] = 32;
    CHECK(nd_sketch_decode(bad, len, &back) == -EINVAL, "shift 32");
    bad[1] = (uint8_t)(sb.shift | 0x80); /* the other mode is valid */
    CHECK(nd_sketch_decode(bad, len, &back) == 0 && back.mode == 1, "mode bit");
    memcpy(bad, buf, len);
    bad[1] = (uint8_t)(sb.shift + 1); /* some values now below the shift */
    CHECK(nd_sketch_decode(bad, len, &back) == -EINVAL, "level below shift");
    memcpy(bad, buf, len);
    memcpy(bad + 8, buf + 12, 4); /* values[0] = values[1]: not ascending */
    CHECK(nd_sketch_decode(bad, len, &back) == -EINVAL, "not ascending");
    /* At every place (the decoder checks four values at a time, then the
     * tail one by one): a value equal to the one before, or one below the
     * shift, is rejected. */
    unsigned missed = 0;
    for (uint32_t k = 1; k < sb.n; k++) {
        memcpy(bad, buf, len);
        memcpy(bad + 8 + 4 * k, buf + 8 + 4 * (k - 1), 4);
        missed += nd_sketch_decode(bad, len, &back) != -EINVAL;
        if (sb.shift == 0)
            continue;
        memcpy(bad, buf, len);
        bad[8 + 4 * k] &= (uint8_t)~31u; /* level 0, below the shift */
        missed += nd_sketch_decode(bad, len, &back) != -EINVAL;
    }
    CHECK(sb.n > 9 && missed == 0, "%u corrupt values of %u accepted", missed, sb.n);
    memcpy(bad, buf, len);
    bad[4] = 1, bad[5] = bad[6] = bad[7] = 0; /* shingles < n */
    CHECK(nd_sketch_decode(bad, len, &back) == -EINVAL, "shingles < n");
    memcpy(bad, buf, len);
    bad[2] = 0x01, bad[3] = 0x02; /* n = 513 */
    CHECK(nd_sketch_decode(bad, len, &back) == -EINVAL, "n too big");
    /* Random byte flips: never accepted as something invalid. */
    for (int i = 0; i < 2000; i++) {
        memcpy(bad, buf, len);
        bad[unit_rng() % len] ^= (uint8_t)(1u << (unit_rng() % 8));
        if (nd_sketch_decode(bad, len, &back) == 0) {
            uint8_t again[ND_SKETCH_ENCODED_MAX];
            CHECK(nd_sketch_encode(&back, again, sizeof(again)) == len &&
                      memcmp(again, bad, len) == 0,
                  "accepted flip does not re-encode");
        }
    }
}

static void test_rules(void)
{
    nd_verdict_params p;
    nd_verdict_params_default(&p);
    nd_sketch_estimate e = {
        .resemblance = 0.9, .containment = 0.95, .containment_r = 0.95, .shared = 9};
    CHECK(nd_match_classify(&e, 1, &p) == ND_MATCH_IDENTICAL, "identical");
    CHECK(nd_match_classify(&e, 0, &p) == ND_MATCH_NEAR_DUPLICATE, "near");
    e.resemblance = 0.3, e.containment = 0.99, e.containment_r = 0.3;
    CHECK(nd_match_classify(&e, 0, &p) == ND_MATCH_PARTIAL_COPY, "partial");
    e.containment = 0.3, e.containment_r = 0.99;
    CHECK(nd_match_classify(&e, 0, &p) ==
              (p.min_containment_r <= 0.99 ? ND_MATCH_PARTIAL_COPY : ND_MATCH_NONE),
          "reverse");
    e.containment_r = 0.1;
    CHECK(nd_match_classify(&e, 0, &p) == ND_MATCH_NONE, "none");
    CHECK(strcmp(nd_match_kind_name(ND_MATCH_PARTIAL_COPY), "partial_copy") == 0, "name");

    /* A sampled containment names a copy only when sure: 9 of 15 sampled
     * values (0.6) of a 373-shingle text compared with a long document is
     * luck (the dev set's man page: truly 0.41); the same 0.6 from every
     * shingle (exact), or 44 of 44 sampled, is a copy. */
    nd_sketch_estimate s = {
        .resemblance = 0.03, .containment = 0.6, .shared = 9, .q_n = 15, .q_shingles = 373};
    CHECK(nd_match_classify(&s, 0, &p) == ND_MATCH_NONE, "0.6 of 15 sampled values");
    s.q_n = s.q_shingles = 15;
    CHECK(nd_match_classify(&s, 0, &p) == ND_MATCH_PARTIAL_COPY, "0.6 exact");
    s = (nd_sketch_estimate){
        .resemblance = 0.1, .containment = 1.0, .shared = 44, .q_n = 44, .q_shingles = 350};
    CHECK(nd_match_classify(&s, 0, &p) == ND_MATCH_PARTIAL_COPY, "44 of 44 sampled");
    s = (nd_sketch_estimate){
        .resemblance = 0.1, .containment = 0.75, .shared = 150, .q_n = 200, .q_shingles = 800};
    CHECK(nd_match_classify(&s, 0, &p) == ND_MATCH_PARTIAL_COPY, "0.75 of 200 sampled");
}

/* The core rule: a middle quarter of a long article framed by a header and
 * a footer of its own (~43 % of the copy, so containment ~0.57 < 0.6) is
 * named a partial copy, whichever call sketched it (positions travel with
 * the sketch), and not once its positions are unknown (a decoded sketch:
 * today's rule); a text that shares one paragraph among many, or half its
 * text in pieces spread between its own (a sparse core), is not. */
static void core_case(const char *what, const char *article, const char *copy, int want)
{
    static nd_sketch d, q2[2], q1, back;
    nd_verdict_params p;
    nd_verdict_params_default(&p);
    CHECK(sketch_str(article, &d, NULL, 0) == 0, "%s: article", what);
    nd_sketch_estimate e;
    /* the query's sketches of both modes (a check, an import) */
    int mode = nd_sketch_text_modes(sk, scr, copy, strlen(copy), q2, NULL, 0, NULL);
    CHECK(mode >= 0, "%s: query", what);
    nd_sketch_compare(nd_sketch_for(q2, &d), &d, &e);
    nd_match_kind k = nd_match_classify(&e, 0, &p);
    unit_note("%s: containment %.3f (%u of %u, %u shingles), core %u of %u: %s", what,
              e.containment, e.shared, e.q_n, e.q_shingles, e.core_found, e.core_n,
              nd_match_kind_name(k));
    CHECK((int)k == want, "%s: %s", what, nd_match_kind_name(k));
    /* bounded: the same */
    nd_sketch_estimate bd;
    int done = nd_sketch_compare_bounded(nd_sketch_for(q2, &d), &d, &p, &bd);
    CHECK((int)(done ? nd_match_classify(&bd, 0, &p) : ND_MATCH_NONE) == want &&
              nd_sketch_reachable(nd_sketch_for(q2, &d), d.shift, d.n, &p),
          "%s: bounded", what);
    /* nd_sketch_text() of the copy: the same figures */
    CHECK(sketch_str(copy, &q1, NULL, 0) == 0, "%s: text", what);
    if (q1.mode == d.mode) {
        nd_sketch_estimate e1;
        nd_sketch_compare(&q1, &d, &e1);
        CHECK(e1.core_n == e.core_n && e1.core_found == e.core_found &&
                  nd_match_classify(&e1, 0, &p) == k,
              "%s: nd_sketch_text differs", what);
    }
    /* decoded: no positions, today's rule (containment >= 0.6) */
    uint8_t buf[ND_SKETCH_ENCODED_MAX];
    size_t len = nd_sketch_encode(nd_sketch_for(q2, &d), buf, sizeof(buf));
    CHECK(nd_sketch_decode(buf, len, &back) == 0 && !back.positioned, "%s: decode", what);
    nd_sketch_compare(&back, &d, &e);
    CHECK(e.core_n == 0 && e.core_found == 0, "%s: decoded core", what);
    CHECK(nd_match_classify(&e, 0, &p) == (e.containment >= p.min_containment ? k : ND_MATCH_NONE),
          "%s: decoded sketch", what);
    /* the rule off */
    p.min_core = 0;
    nd_sketch_compare(nd_sketch_for(q2, &d), &d, &e);
    CHECK(e.containment >= p.min_containment || nd_match_classify(&e, 0, &p) == ND_MATCH_NONE,
          "%s: rule off", what);
}

/* copy = a header of `head` generated units from `at_head`, `sep`, the
 * body (`body` units from `at_body`, the copied part), `sep`, a footer of
 * `foot` units from `at_foot`; gen is words() or hans(). */
static void framed(char *copy, size_t cap, void (*gen)(char *, size_t, int, int), const char *sep,
                   int at_head, int head, int at_body, int body, int at_foot, int foot)
{
    static char part[40000];
    gen(part, sizeof(part), at_head, head);
    size_t off = (size_t)snprintf(copy, cap, "%s%s", part, sep);
    gen(copy + off, cap - off, at_body, body);
    off = strlen(copy);
    gen(part, sizeof(part), at_foot, foot);
    snprintf(copy + off, cap - off, "%s%s", sep, part);
}

static void test_core(void)
{
    static char art[80000], copy[60000];
    /* English: 4000 words; the copy: 300 words of header, words
     * 1500..2499, 450 words of footer */
    words(art, sizeof(art), 0, 4000);
    framed(copy, sizeof(copy), words, "\n\n", 100000, 300, 1500, 1000, 200000, 450);
    core_case("en middle quarter + chrome", art, copy, ND_MATCH_PARTIAL_COPY);
    /* the same, short enough to be exact (shift 0): 400 words, 100 of them
     * copied under 40 + 40 of chrome */
    words(art, sizeof(art), 0, 400);
    framed(copy, sizeof(copy), words, "\n\n", 100000, 40, 150, 100, 200000, 40);
    core_case("en exact middle + chrome", art, copy, ND_MATCH_PARTIAL_COPY);
    /* Chinese: 4000 characters; 1000 of them under 300 + 450 of chrome */
    hans(art, sizeof(art), 0, 4000);
    framed(copy, sizeof(copy), hans, "。\n", 50000, 300, 1500, 1000, 90000, 450);
    core_case("zh middle quarter + chrome", art, copy, ND_MATCH_PARTIAL_COPY);
    size_t off;
    /* one paragraph of ten copied: not a copy */
    words(art, sizeof(art), 0, 4000);
    off = 0;
    for (int i = 0; i < 10; i++) {
        words(copy + off, sizeof(copy) - off, i == 4 ? 1500 : 300000 + 200 * i, 150);
        off = strlen(copy);
        off += (size_t)snprintf(copy + off, sizeof(copy) - off, "\n\n");
    }
    core_case("en one paragraph of ten", art, copy, ND_MATCH_NONE);
    /* half of the text copied in pieces between its own: a sparse core */
    off = 0;
    for (int i = 0; i < 10; i++) {
        words(copy + off, sizeof(copy) - off, i % 2 ? 400000 + 100 * i : 1500 + 300 * i, 100);
        off = strlen(copy);
        off += (size_t)snprintf(copy + off, sizeof(copy) - off, "\n\n");
    }
    core_case("en half in pieces", art, copy, ND_MATCH_NONE);
}

/* A sketch of the hash set h[0..n) by the rule of sketch.h (levels,
 * smallest shift leaving <= ND_SKETCH_MAX values), for tests that need
 * sketches of chosen sizes and overlaps. */
static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* h[i] is the text's i-th shingle: its position (nd_sketch.pos) is
 * 256 * i / n. */
static void sketch_of_hashes(const uint64_t *h, size_t n, nd_sketch *out)
{
    static uint64_t vp[8192];
    static uint32_t v[8192];
    static uint8_t pos[8192];
    size_t m = 0;
    for (size_t i = 0; i < n && m < 8192; i++) {
        unsigned level = h[i] ? (unsigned)__builtin_ctzll(h[i]) : 31;
        level = level > 31 ? 31 : level;
        vp[m++] = (uint64_t)((uint32_t)(h[i] >> 37) << 5 | level) << 8 | ((i << 8) / n);
    }
    qsort(vp, m, sizeof(*vp), u64_cmp);
    size_t u = 0;
    for (size_t i = 0; i < m; i++)
        if (!u || v[u - 1] != (uint32_t)(vp[i] >> 8))
            pos[u] = (uint8_t)vp[i], v[u++] = (uint32_t)(vp[i] >> 8);
    unsigned shift = 0;
    for (;; shift++) {
        size_t c = 0;
        for (size_t i = 0; i < u; i++)
            c += (v[i] & 31) >= shift;
        if (c <= ND_SKETCH_MAX)
            break;
    }
    memset(out, 0, sizeof(*out));
    out->shift = (uint8_t)shift;
    out->shingles = (uint32_t)n;
    for (size_t i = 0; i < u; i++)
        if ((v[i] & 31) >= shift)
            out->pos[out->n] = pos[i], out->values[out->n++] = v[i];
    out->positioned = 1;
}

/* Set sizes that give every shift from 0 to a few, and small sets whose
 * figures land exactly on thresholds (3 of 5 = 0.6). */
static size_t random_size(void)
{
    switch (unit_rng() % 4) {
    case 0: return unit_rng() % 12;
    case 1: return unit_rng() % 600;
    case 2: return 400 + unit_rng() % 2000;
    default: return unit_rng() % 6000;
    }
}

/* nd_sketch_compare_bounded() and nd_sketch_reachable() never drop a pair
 * that the full comparison lists, and a bounded comparison that finishes
 * gives the full comparison's figures bit for bit. */
static void test_bounds(void)
{
    static uint64_t qh[8192], dh[8192];
    static nd_sketch q, d;
    nd_verdict_params ps[6];
    nd_verdict_params_default(&ps[0]);
    ps[1] = (nd_verdict_params){0.5, 0.6, 0.8, 0.0, 0.0};
    ps[2] = (nd_verdict_params){0.0, 0.0, 2.0, 0.0, 0.0};
    ps[3] = (nd_verdict_params){1.0, 1.0, 1.0, 0.8, 0.2};
    ps[4] = (nd_verdict_params){0.9, 0.3, 2.0, 0.9, 0.1};
    unsigned long pairs = 0, wrong_cut = 0, wrong_skip = 0, differ = 0, cut = 0, skipped = 0,
                  listed = 0;
    for (int it = 0; it < 6000; it++) {
        size_t nc = random_size(), nq = random_size(), nd = random_size();
        if (unit_rng() % 3 == 0)
            nq = nd = 0; /* pure copies / excerpts: mostly common */
        if (nc + nq > 6000 || nc + nd > 6000)
            continue;
        for (size_t i = 0; i < nc; i++)
            qh[i] = dh[i] = unit_rng();
        for (size_t i = 0; i < nq; i++)
            qh[nc + i] = unit_rng();
        for (size_t i = 0; i < nd; i++)
            dh[nc + i] = unit_rng();
        sketch_of_hashes(qh, nc + nq, &q);
        sketch_of_hashes(dh, nc + nd, &d);
        /* positions known (a sketched text) or not (a decoded one) */
        q.positioned = unit_rng() % 4 != 0;
        d.positioned = unit_rng() % 4 != 0;
        ps[5] = (nd_verdict_params){
            (double)(unit_rng() % 1100) / 1000, (double)(unit_rng() % 1100) / 1000,
            (double)(unit_rng() % 2200) / 1000, (double)(unit_rng() % 1100) / 1000,
            (double)(unit_rng() % 1100) / 1000};
        for (int k = 0; k < 6; k++) {
            for (int dir = 0; dir < 2; dir++) {
                const nd_sketch *a = dir ? &d : &q, *b = dir ? &q : &d;
                nd_sketch_estimate full, bd;
                nd_sketch_compare(a, b, &full);
                bool list = nd_match_classify(&full, 0, &ps[k]) != ND_MATCH_NONE;
                int done = nd_sketch_compare_bounded(a, b, &ps[k], &bd);
                int reach = nd_sketch_reachable(a, b->shift, b->n, &ps[k]);
                pairs++;
                listed += list;
                cut += !done;
                skipped += !reach;
                if (!done && list)
                    wrong_cut++;
                if (!reach && list)
                    wrong_skip++;
                if (done && (bd.shared != full.shared || bd.q_n != full.q_n || bd.d_n != full.d_n ||
                             bd.shift != full.shift ||
                             memcmp(&bd.resemblance, &full.resemblance, sizeof(double)) ||
                             memcmp(&bd.containment, &full.containment, sizeof(double)) ||
                             memcmp(&bd.containment_r, &full.containment_r, sizeof(double)) ||
                             bd.core_found != full.core_found || bd.core_n != full.core_n))
                    differ++;
            }
        }
    }
    unit_note("bounds: %lu pairs, %lu listed, %lu cut short, %lu skipped by size", pairs, listed,
              cut, skipped);
    CHECK(wrong_cut == 0, "%lu listed pairs cut short", wrong_cut);
    CHECK(wrong_skip == 0, "%lu listed pairs skipped by size", wrong_skip);
    CHECK(differ == 0, "%lu finished bounded comparisons differ from the full one", differ);
    /* Not vacuous: both bounds drop pairs, and many pairs are listed. */
    CHECK(cut > pairs / 10 && skipped > pairs / 50 && listed > pairs / 10,
          "cut %lu skipped %lu listed %lu of %lu", cut, skipped, listed, pairs);
}

/* nd_sketch_query() + nd_sketch_query_finish() give exactly what
 * nd_sketch_text_modes() gives (sketches, anchors, info, passages), for
 * Chinese, English, mixed, Hangul, markup and sampled texts; no passages
 * before the finish; a finish without a query is refused. */
static void query_matches_modes(const char *t, const nd_sketch *d, const char *what)
{
    static nd_sketch want[2], got[2];
    nd_anchors wa[2], ga[2];
    nd_sketch_info wi, gi;
    nd_passage wp[16], gp[16];
    memset(got, 0xA5, sizeof(got));
    memset(ga, 0xA5, sizeof(ga));
    int wm = nd_sketch_text_modes(sk, scr, t, strlen(t), want, wa, 24, &wi);
    size_t wn = nd_sketch_passages(scr, d, wp, 16);
    int gm = nd_sketch_query(sk, scr, t, strlen(t), ga, 24, &gi);
    CHECK(nd_sketch_passages(scr, d, gp, 16) == 0, "%s: passages before the finish", what);
    int rc = nd_sketch_query_finish(scr, got);
    size_t gn = nd_sketch_passages(scr, d, gp, 16);
    CHECK(wm >= 0 && gm == wm && rc == 0, "%s: mode %d / %d, finish %d", what, wm, gm, rc);
    for (int m = 0; m < 2; m++) {
        CHECK(got[m].shift == want[m].shift && got[m].mode == want[m].mode &&
                  got[m].n == want[m].n && got[m].shingles == want[m].shingles &&
                  memcmp(got[m].values, want[m].values, 4 * (size_t)want[m].n) == 0,
              "%s: mode %d sketch differs", what, m);
        CHECK(ga[m].n == wa[m].n && memcmp(ga[m].a, wa[m].a, 4 * (size_t)wa[m].n) == 0,
              "%s: mode %d anchors differ", what, m);
    }
    CHECK(gi.tokens == wi.tokens && gi.shingles == wi.shingles &&
              gi.code_points == wi.code_points && gi.mode == wi.mode,
          "%s: info", what);
    CHECK(gn == wn && memcmp(gp, wp, sizeof(nd_passage) * (wn < 16 ? wn : 16)) == 0,
          "%s: passages %zu / %zu", what, gn, wn);
    /* Again: the same sketches. */
    static nd_sketch again[2];
    CHECK(nd_sketch_query_finish(scr, again) == 0 && again[0].n == got[0].n &&
              again[1].n == got[1].n &&
              memcmp(again[0].values, got[0].values, 4 * (size_t)got[0].n) == 0,
          "%s: second finish", what);
}

static void test_query_lazy(void)
{
    static char en[40000], zh[20000], mix[40000];
    words(en, sizeof(en), 0, 2000); /* sampled (shift > 0) */
    size_t n = 0;
    for (int i = 0; i < 1500 && n + 8 < sizeof(zh); i++) {
        unsigned cp = 0x4E00 + (unsigned)(i * 37 % 3000);
        zh[n++] = (char)(0xE0 | cp >> 12), zh[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
        zh[n++] = (char)(0x80 | (cp & 0x3F));
        if (i % 17 == 16)
            memcpy(zh + n, "\xEF\xBC\x8C", 3), n += 3; /* ， */
    }
    zh[n] = 0;
    snprintf(mix, sizeof(mix),
             "%.3000s http://example.com/x ![i](a.png) %.3000s "
             "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8 \xEA\xB0\x80\xE1\x86\xA8 ﬁne Ⅻ ①",
             zh, en);
    nd_sketch de, dz;
    CHECK(sketch_str(en + 2000, &de, NULL, 0) == 0 && sketch_str(zh + 600, &dz, NULL, 0) == 0,
          "documents");
    const char *texts[] = {
        en, zh, mix, "short", "", "한국어 텍스트 입니다 그리고 더", "a b c d e f g"};
    const char *names[] = {"en", "zh", "mix", "short", "empty", "hangul", "letters"};
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        query_matches_modes(texts[i], &de, names[i]);
        query_matches_modes(texts[i], &dz, names[i]);
    }
    nd_sketch one;
    static nd_sketch two[2];
    CHECK(sketch_str(zh, &one, NULL, 0) == 0 && nd_sketch_query_finish(scr, two) == -EINVAL,
          "finish after nd_sketch_text()");
    CHECK(nd_sketch_query(sk, scr, "\xFF", 1, NULL, 0, NULL) == -EILSEQ &&
              nd_sketch_query_finish(scr, two) == -EINVAL,
          "finish after a refused text");
}

/* A random text of n pieces that exercise the tokenizer's paths: Han (the
 * 3-byte run and its in-place hash), Katakana and a compatibility
 * ideograph (the table), fullwidth letters, Hangul jamo that compose,
 * astral CJK, words, digits, punctuation, space and markup. */
static size_t random_pieces(char *buf, size_t cap, unsigned n, uint64_t *rng, unsigned han_share)
{
    static const char *other[] = {"，",
                                  "。",
                                  " ",
                                  "\n",
                                  "ab",
                                  "x",
                                  "Hello",
                                  "2026",
                                  "ＡＢ",
                                  "カ",
                                  "\xEF\xA4\x80",
                                  "\xE1\x84\x80",
                                  "\xE1\x85\xA1",
                                  "\xE1\x86\xA8",
                                  "가",
                                  "\xF0\xA0\x80\x80",
                                  "http://a.b/c ",
                                  "![i](p.png)",
                                  "-",
                                  "Ⅻ"};
    size_t len = 0;
    for (unsigned i = 0; i < n && len + 16 < cap; i++) {
        *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
        if (*rng % 100 < han_share) {
            unsigned cp = 0x4E00 + (unsigned)(*rng >> 20) % 300;
            buf[len++] = (char)(0xE0 | cp >> 12), buf[len++] = (char)(0x80 | (cp >> 6 & 0x3F));
            buf[len++] = (char)(0x80 | (cp & 0x3F));
        } else {
            const char *p = other[(*rng >> 24) % (sizeof(other) / sizeof(other[0]))];
            memcpy(buf + len, p, strlen(p)), len += strlen(p);
        }
    }
    buf[len] = '\0';
    return len;
}

/* A text's anchors are the m smallest distinct rank keys of its own mode's
 * shingles (rotl32 of each hash; an anchor is a key's low half), ascending:
 * worked out here from nd_sketch_shingles() by sorting every key, against
 * the filtered sort the sketcher does (lib/sketch.c bottom_keys()). On
 * random texts; on periods repeated (the filter widens, up to every key);
 * and on 12,000 shingles of 50 distinct values (more keys than one counting
 * pass takes: the widest filter sorts them another way). */
static void test_anchor_keys(void)
{
    static char t[60000];
    static uint64_t keys[20000];
    static nd_sketch one;
    nd_anchors a;
    uint64_t rng = 0xD1B54A32D192ED03ull;
    unsigned agree = 0, total = 0;
    for (int i = 0; i < 300; i++) {
        size_t n;
        if (i < 200) {
            n = random_pieces(t, sizeof(t), 1 + (unsigned)(rng >> 33) % 4000, &rng,
                              i % 4 ? 90 : 50);
        } else { /* a period of Han characters, repeated */
            unsigned p = 1 + (unsigned)(i < 290 ? i % 70 : 50), reps = i < 290 ? 900 : 12004;
            n = 0;
            for (unsigned k = 0; n + 4 < sizeof(t) && k < reps; k++) {
                unsigned cp = 0x6000 + (k % p) * 11 + (unsigned)i;
                t[n++] = (char)(0xE0 | cp >> 12), t[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
                t[n++] = (char)(0x80 | (cp & 0x3F));
            }
            t[n] = '\0';
        }
        unsigned m = 1 + (unsigned)(rng >> 40) % ND_ANCHORS_MAX;
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        nd_sketch_info info;
        const nd_shingle *sh;
        size_t nsh;
        if (nd_sketch_text(sk, scr, t, n, &one, &a, m, &info) != 0 ||
            nd_sketch_shingles(scr, info.mode, &sh, &nsh) != 0 || nsh > 20000) {
            CHECK(0, "text %d: not sketched (%zu shingles)", i, n);
            continue;
        }
        for (size_t k = 0; k < nsh; k++)
            keys[k] = sh[k].h << 32 | sh[k].h >> 32;
        qsort(keys, nsh, sizeof(keys[0]), u64_cmp);
        unsigned want = 0;
        bool same = true;
        for (size_t k = 0; k < nsh && want < m; k++) {
            if (k && keys[k] == keys[k - 1])
                continue;
            same &= want < a.n && a.a[want] == (uint32_t)keys[k];
            want++;
        }
        same &= a.n == want;
        CHECK(same, "text %d (%zu shingles, m %u): %u anchors, %u expected", i, nsh, m, a.n, want);
        agree += same;
        total += i >= 290 && nsh >= 12000;
    }
    CHECK(agree == 300 && total == 10, "%u of 300 agree, %u of 10 long periods", agree, total);
}

/* The tokenizer's and the query's shortcuts give what the plain paths give.
 * - nd_sketch_query() copies a character-mode shingle of five CJK tokens
 *   adjacent in the word mode from the word mode; nd_sketch_text() hashes
 *   every one. Their sketches and anchors of the text's own mode agree on
 *   random texts (most of them in character mode).
 * - The anchors come from a filter that widens when repeats leave fewer
 *   than m distinct keys below it. On texts of at most 64 distinct
 *   shingles repeated many times, 64 anchors are all of them (one per
 *   value of the unsampled sketch, whose top 27 bits they share), and the
 *   anchors asked with m' < 64 are their first m'.
 * - ASCII words are scanned eight bytes at a time: a text of words (see
 *   below) is one passage against itself, from its first code point to its
 *   last, so the first and last words' spans are whole. */
static void test_shortcuts(void)
{
    static char t[40000];
    static nd_sketch one, two[2];
    nd_anchors a1, a2[2];
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    unsigned char_mode = 0, agree = 0;
    for (int i = 0; i < 400; i++) {
        unsigned m = 1 + (unsigned)(rng >> 40) % ND_ANCHORS_MAX;
        size_t n = random_pieces(t, sizeof(t), 1 + (unsigned)(rng >> 33) % 4000, &rng,
                                 i % 4 ? 90 : 50);
        nd_sketch_info info;
        int rc = nd_sketch_text(sk, scr, t, n, &one, &a1, m, &info);
        int mode = nd_sketch_text_modes(sk, scr, t, n, two, a2, m, NULL);
        CHECK(rc == 0 && mode == info.mode, "text %d: rc %d, mode %d / %d", i, rc, mode, info.mode);
        if (rc != 0 || mode != info.mode)
            continue;
        char_mode += mode == ND_SKETCH_MODE_CHAR;
        const nd_sketch *q = &two[mode];
        bool same = q->n == one.n && q->shift == one.shift && q->shingles == one.shingles &&
                    memcmp(q->values, one.values, 4 * (size_t)one.n) == 0 && a2[mode].n == a1.n &&
                    memcmp(a2[mode].a, a1.a, 4 * (size_t)a1.n) == 0;
        CHECK(same, "text %d (mode %d, m %u): the query's sketch or anchors differ", i, mode, m);
        agree += same;
    }
    CHECK(char_mode > 250 && agree == 400, "%u of 400 in character mode, %u agree", char_mode,
          agree);

    unsigned checked = 0;
    for (int i = 0; i < 60; i++) {
        /* a period of p Han characters (p distinct shingles) repeated */
        unsigned p = 1 + (unsigned)i % 64;
        size_t len = 0;
        for (unsigned k = 0; len + 4 < sizeof(t) && k < 3000; k++) {
            unsigned cp = 0x5000 + (k % p) * 7 + (unsigned)i;
            t[len++] = (char)(0xE0 | cp >> 12), t[len++] = (char)(0x80 | (cp >> 6 & 0x3F));
            t[len++] = (char)(0x80 | (cp & 0x3F));
        }
        t[len] = '\0';
        nd_anchors all, few;
        CHECK(nd_sketch_text(sk, scr, t, len, &one, &all, ND_ANCHORS_MAX, NULL) == 0, "period %u",
              p);
        bool ok = one.shift == 0 && one.shingles == p && all.n == p && one.n == p;
        for (unsigned k = 0; ok && k < all.n; k++) {
            bool found = false;
            for (unsigned v = 0; v < one.n; v++)
                found |= one.values[v] >> 5 == all.a[k] >> 5;
            ok = found;
        }
        for (unsigned mm = 1; ok && mm < ND_ANCHORS_MAX; mm += 5) {
            ok = nd_sketch_text(sk, scr, t, len, &one, &few, mm, NULL) == 0 &&
                 few.n == (mm < p ? mm : p) && memcmp(few.a, all.a, 4 * (size_t)few.n) == 0;
        }
        CHECK(ok, "period %u: %u shingles, %u anchors, shift %u", p, one.shingles, all.n,
              one.shift);
        checked += ok;
    }
    CHECK(checked == 60, "%u of 60 repeated texts", checked);

    /* Word spans (the eight-at-a-time word scan): a text of ASCII words of
     * 1..300 letters and digits in either case (a word is hashed up to 256
     * bytes, its span is all of it), separated by spaces, punctuation or
     * Han, is one passage against its own sketch, from its first code point
     * to its last. */
    unsigned whole = 0;
    for (int i = 0; i < 200; i++) {
        size_t len = 0;
        unsigned nw = 8 + (unsigned)i % 60;
        for (unsigned k = 0; k < nw; k++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            unsigned wl = 1 + (unsigned)(rng >> 8) % (k % 7 ? 12 : 300);
            if (k)
                len += (size_t)snprintf(t + len, 8, "%s",
                                        (rng >> 40) % 5 == 0   ? "中"
                                        : (rng >> 40) % 5 == 1 ? ", "
                                                               : " ");
            for (unsigned c = 0; c < wl; c++)
                t[len++] =
                    "abcdefghijklmnopqrstuvwxyzABCDEFGHXYZ0123456789"[(rng >> (c % 50)) % 47];
        }
        t[len] = '\0';
        nd_sketch_info info;
        nd_passage p[4];
        CHECK(nd_sketch_text(sk, scr, t, len, &one, NULL, 0, &info) == 0, "words %d", i);
        size_t np = nd_sketch_passages(scr, &one, p, 4);
        bool ok = one.shift == 0 && np == 1 && p[0].start == 0 && p[0].end == info.code_points;
        CHECK(ok, "words %d: shift %u, %zu passages, [%u, %u) of %u code points", i, one.shift, np,
              np ? p[0].start : 0, np ? p[0].end : 0, info.code_points);
        whole += ok;
    }
    CHECK(whole == 200, "%u of 200 word texts", whole);
}

/* The fingerprint from the sketch's tokens (nd_sketch_fp_tokens() +
 * nd_fingerprint_tokens(), the server's /check-original path) equals
 * nd_fingerprint() on the fingerprint vectors and on random texts made of
 * pieces that exercise every rule of steps 1..3 (URLs and link markup at and
 * off word starts, Hangul jamo and syllables that compose, astral CJK,
 * multi-code-point and dropped mappings, words cut at 256 bytes, invalid
 * UTF-8), after either sketching call; with the default parameters and with
 * n-grams (the general loop); a fingerprinter that keeps URLs refuses. */
static void fp_tokens_agree(nd_fingerprinter *fp, nd_fp_scratch *fs, const char *t, size_t n,
                            const char *what, int *checked)
{
    nd_fingerprint_result want, got[2];
    nd_anchors a[2];
    nd_sketch one;
    int wrc = nd_fingerprint(fp, fs, t, n, &want);
    for (int q = 0; q < 2; q++) {
        int rc = q ? nd_sketch_query(sk, scr, t, n, a, ND_ANCHORS_QUERY, NULL)
                   : nd_sketch_text(sk, scr, t, n, &one, a, ND_ANCHORS_STORE, NULL);
        nd_fp_tokens tk;
        if (rc >= 0)
            rc = nd_sketch_fp_tokens(scr, &tk);
        else
            CHECK(nd_sketch_fp_tokens(scr, &tk) == -EINVAL, "%s: tokens of a refused text", what);
        if (rc >= 0)
            rc = nd_fingerprint_tokens(fp, fs, &tk, &got[q]);
        CHECK(rc == (wrc < 0 ? wrc : 0), "%s: rc %d, nd_fingerprint %d", what, rc, wrc);
        if (rc == 0 && wrc == 0) {
            CHECK(got[q].simhash == want.simhash && got[q].chars == want.chars &&
                      got[q].features == want.features,
                  "%s (%s): %016llx %u %u, nd_fingerprint %016llx %u %u", what,
                  q ? "query" : "text", (unsigned long long)got[q].simhash, got[q].chars,
                  got[q].features, (unsigned long long)want.simhash, want.chars, want.features);
            ++*checked;
        }
    }
}

static void test_fp_tokens(void)
{
    nd_fingerprinter *fp, *ngram, *keep_urls;
    nd_fp_scratch *fs;
    nd_fp_params p;
    REQUIRE(nd_fingerprinter_create(&fp) == 0 && nd_fp_scratch_create(&fs) == 0);
    nd_fp_params_default(&p);
    p.w_word[2] = 0.5f, p.w_cjk[2] = 0.25f;
    REQUIRE(nd_fingerprinter_create_tuned(&ngram, &p) == 0);
    nd_fp_params_default(&p);
    p.strip_urls = 0;
    REQUIRE(nd_fingerprinter_create_tuned(&keep_urls, &p) == 0);
    int checked = 0, vectors = 0;
    const char *root = getenv("ND_SOURCE_ROOT");
    char path[4096];
    snprintf(path, sizeof(path), "%s/proto/vectors.jsonl", root ? root : ".");
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    char *line = NULL;
    size_t cap = 0;
    while (f && getline(&line, &cap, f) > 0) {
        json_error_t jerr;
        json_t *v = json_loads(line, JSON_ALLOW_NUL, &jerr);
        json_t *text = json_object_get(v, "text");
        if (json_is_string(text)) {
            const char *name = json_string_value(json_object_get(v, "name"));
            fp_tokens_agree(fp, fs, json_string_value(text), json_string_length(text),
                            name ? name : "vector", &checked);
            fp_tokens_agree(ngram, fs, json_string_value(text), json_string_length(text),
                            name ? name : "vector", &checked);
            vectors++;
        }
        json_decref(v);
    }
    free(line);
    if (f)
        fclose(f);
    CHECK(vectors >= 70, "%d fingerprint vectors", vectors);
    static const char *pieces[] = {"http://x.com/a?b=1",
                                   "www.Example.org",
                                   "HTTPS://A.B",
                                   "ftp://f",
                                   "![\xE5\x9B\xBE](http://i/1.png)",
                                   "[link](http://t/\xC3\xA9)",
                                   "](x)",
                                   "![a](b",
                                   "!",
                                   "]",
                                   "(",
                                   ")",
                                   "h",
                                   "w",
                                   "f",
                                   "www",
                                   "\xE1\x84\x80",
                                   "\xE1\x85\xA1",
                                   "\xE1\x86\xA8",
                                   "\xEA\xB0\x80",
                                   "\xEA\xB0\x81",
                                   "\xED\x95\x9C\xEA\xB5\xAD",
                                   "\xE4\xB8\xAD\xE6\x96\x87",
                                   "\xE3\x81\x82\xE3\x82\xA2",
                                   "\xEF\xBD\x86\xEF\xBD\x95",
                                   "\xEF\xAC\x81",
                                   "\xEF\xB7\xBA",
                                   "e\xCC\x81",
                                   "\xC3\xA9",
                                   "\xC2\xAD",
                                   "\xE2\x80\x8B",
                                   "\xF0\xA0\x80\x80",
                                   "\xF0\x9D\x94\x98",
                                   "\xF0\x9F\x98\x80",
                                   "\xEF\xBC\x8C",
                                   "\xE3\x80\x82",
                                   "\xE3\x80\x80",
                                   "\xE3\x80\x85",
                                   "\xE2\xBC\x80",
                                   "\xE0\xB9\x84\xE0\xB8\x97\xE0\xB8\xA2",
                                   "Stra\xC3\x9F"
                                   "e",
                                   "\xC4\xB0",
                                   "ABC",
                                   "abc123",
                                   "x",
                                   "1",
                                   " ",
                                   "  ",
                                   "\n",
                                   "\t",
                                   "-",
                                   "_",
                                   "'",
                                   "\"",
                                   "\xEF\xBB\xBF",
                                   "\xE3\x84\xB1",
                                   "\xE0\xA4\x95\xE0\xA4\xBF"};
    const size_t npieces = sizeof(pieces) / sizeof(pieces[0]);
    static char text[8192];
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (int k = 0; k < 6000; k++) {
        size_t n = 0;
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        unsigned count = (unsigned)(rng >> 58);
        for (unsigned j = 0; j < count; j++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const char *pc = pieces[(rng >> 33) % npieces];
            size_t pl = strlen(pc);
            if ((rng >> 20 & 63) == 0) { /* a long word: cut at 256 bytes */
                for (unsigned r = 0; r < 300 && n + 2 < sizeof(text); r++)
                    text[n++] = (rng >> 27 & 1) ? 'a' : '\xC3',
                    text[n++] = (rng >> 27 & 1) ? 'b' : '\xA9';
                continue;
            }
            if (n + pl < sizeof(text))
                memcpy(text + n, pc, pl), n += pl;
        }
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        if (k % 10 == 9 && n) /* invalid UTF-8: a stray, cut or overlong sequence */
            text[(rng >> 33) % n] = (char)((const char[]){'\xFF', '\xC0', '\xED',
                                                          '\x80'})[rng >> 62];
        fp_tokens_agree(k % 3 ? fp : ngram, fs, text, n, "random", &checked);
    }
    nd_fp_tokens tk;
    nd_fingerprint_result r;
    CHECK(nd_sketch_text(sk, scr, "see http://x.y now", 18, &(nd_sketch){0}, NULL, 0, NULL) == 0 &&
              nd_sketch_fp_tokens(scr, &tk) == 0 &&
              nd_fingerprint_tokens(keep_urls, fs, &tk, &r) == -ENOTSUP,
          "a fingerprinter that keeps URLs refuses");
    unit_note("%d fingerprints from tokens equal nd_fingerprint()'s (%d vectors)", checked,
              vectors);
    nd_fingerprinter_destroy(keep_urls);
    nd_fingerprinter_destroy(ngram);
    nd_fingerprinter_destroy(fp);
    nd_fp_scratch_destroy(fs);
}

/* The tokenizer checks UTF-8 as it goes (the check's cost: no separate pass):
 * a text is refused (-EILSEQ, no tokens, no passages) exactly when
 * nd_utf8_validate() refuses it: truncated, overlong, surrogate, stray
 * continuation and out-of-range sequences in Chinese runs, ASCII runs, link
 * targets that are skipped, and at the end of the text; and random byte
 * edits of mixed texts. */
static void test_invalid_utf8(void)
{
    static const char *bad[] = {"\xFF",
                                "\x80",
                                "\xC0\xAF",
                                "\xC3",
                                "\xE4\xB8",
                                "\xE0\x80\x80",
                                "\xE0\x9F\xBF",
                                "\xED\xA0\x80",
                                "\xED\xBF\xBF",
                                "\xF4\x90\x80\x80",
                                "\xF0\x8F\xBF\xBF",
                                "\xF0\x9F\x98",
                                "\xE4\x41\x41",
                                "\xE4\xB8\xC0"};
    static const char *around[][2] = {{"", ""},
                                      {"\xE4\xB8\xAD\xE6\x96\x87\xE5\xAD\x97", ""},
                                      {"", "\xE4\xB8\xAD\xE6\x96\x87"},
                                      {"word ", " more"},
                                      {"see [a](http://x/", ") now"},
                                      {"![i](", ")"},
                                      {"http://x.y/", ""},
                                      {"\xE1\x84\x80", "\xE1\x85\xA1"}};
    nd_sketch one;
    static nd_sketch two[2];
    nd_anchors a[2];
    nd_passage p[4];
    char t[256];
    int refused = 0;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        for (size_t j = 0; j < sizeof(around) / sizeof(around[0]); j++) {
            int n = snprintf(t, sizeof(t), "%s%s%s", around[j][0], bad[i], around[j][1]);
            CHECK(nd_utf8_validate(t, (size_t)n, NULL) < 0, "case %zu/%zu is invalid", i, j);
            nd_fp_tokens tk;
            CHECK(nd_sketch_text(sk, scr, t, (size_t)n, &one, a, 16, NULL) == -EILSEQ &&
                      nd_sketch_fp_tokens(scr, &tk) == -EINVAL &&
                      nd_sketch_passages(scr, &one, p, 4) == 0,
                  "text %zu/%zu", i, j);
            CHECK(nd_sketch_query(sk, scr, t, (size_t)n, a, 16, NULL) == -EILSEQ &&
                      nd_sketch_query_finish(scr, two) == -EINVAL,
                  "query %zu/%zu", i, j);
            refused++;
        }
    }
    static char text[4096];
    uint64_t rng = 12345;
    int agree = 0;
    for (int k = 0; k < 20000; k++) {
        int n = snprintf(text, sizeof(text),
                         "\xE4\xB8\xAD\xE6\x96\x87 word%d \xE3\x80\x82 [x](http://h/\xC3\xA9) "
                         "\xEA\xB0\x80\xE1\x86\xA8 \xF0\x9F\x98\x80 Stra\xC3\x9F"
                         "e %d",
                         k, k * 7);
        for (int e = 0; e < 2; e++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            text[(rng >> 33) % (uint64_t)n] = (char)(rng >> 56);
        }
        bool valid = nd_utf8_validate(text, (size_t)n, NULL) == 0;
        int rc = nd_sketch_query(sk, scr, text, (size_t)n, a, 16, NULL);
        int rt = nd_sketch_text(sk, scr, text, (size_t)n, &one, a, 16, NULL);
        CHECK(valid ? rc >= 0 && rt == 0 : rc == -EILSEQ && rt == -EILSEQ,
              "edit %d: valid %d, query %d, text %d", k, valid, rc, rt);
        agree += !valid;
    }
    unit_note("%d invalid cases refused; %d of 20000 random edits invalid, all refused", refused,
              agree);
}

/* (hash, first position) of a shingle, for ref_sample(). */
typedef struct first_at {
    uint64_t h;
    size_t i;
} first_at;

static int first_at_cmp(const void *a, const void *b)
{
    const first_at *x = a, *y = b;
    if (x->h != y->h)
        return x->h < y->h ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

static int first_pos_cmp(const void *a, const void *b)
{
    const first_at *x = a, *y = b;
    return (x->i > y->i) - (x->i < y->i);
}

static unsigned ref_level(uint64_t h)
{
    unsigned z = h ? (unsigned)__builtin_ctzll(h) : 31;
    return z > 31 ? 31 : z;
}

/* The sketch of shingles sh[0..n) as proto/sketch.md defines it, by qsort
 * alone (no table): the distinct hashes in order of first occurrence, the
 * smallest shift leaving at most ND_SKETCH_MAX, their values sorted with
 * the first position of each. */
static void ref_sample(const nd_shingle *sh, size_t n, nd_sketch *out)
{
    first_at *f = malloc((n ? n : 1) * sizeof(*f));
    for (size_t i = 0; i < n; i++)
        f[i] = (first_at){sh[i].h, i};
    qsort(f, n, sizeof(*f), first_at_cmp);
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        if (d == 0 || f[i].h != f[d - 1].h)
            f[d++] = f[i];
    qsort(f, d, sizeof(*f), first_pos_cmp);
    uint32_t hist[32] = {0}, above = (uint32_t)d;
    for (size_t i = 0; i < d; i++)
        hist[ref_level(f[i].h)]++;
    unsigned shift = 0;
    while (shift < 31 && above > ND_SKETCH_MAX)
        above -= hist[shift++];
    out->shift = (uint8_t)shift, out->shingles = (uint32_t)d, out->n = 0;
    for (size_t i = 0; i < d && out->n < ND_SKETCH_MAX; i++) {
        if (ref_level(f[i].h) < shift)
            continue;
        uint32_t v = (uint32_t)((f[i].h >> 37) << 5) | ref_level(f[i].h);
        uint8_t pos = (uint8_t)(((uint64_t)f[i].i << 8) / n);
        uint16_t k = out->n++;
        for (; k && out->values[k - 1] > v; k--) /* stable: the first position first */
            out->values[k] = out->values[k - 1], out->pos[k] = out->pos[k - 1];
        if (k && out->values[k - 1] == v) { /* one value: the earlier position */
            memmove(out->values + k, out->values + k + 1, (out->n - 1 - k) * sizeof(uint32_t));
            memmove(out->pos + k, out->pos + k + 1, out->n - 1 - k);
            out->n--;
            continue;
        }
        out->values[k] = v, out->pos[k] = pos;
    }
    free(f);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best of 3: seconds of nd_sketch_text_modes() (a query: both modes, each
 * with its distinct set) on t, and its sketches. */
static double time_query(const char *t, size_t len, nd_sketch out[2])
{
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        nd_anchors a[2];
        double t0 = now_s();
        int rc = nd_sketch_text_modes(sk, scr, t, len, out, a, ND_ANCHORS_SCALED, NULL);
        double dt = now_s() - t0;
        CHECK(rc == ND_SKETCH_MODE_CHAR, "rc %d", rc);
        best = dt < best ? dt : best;
    }
    return best;
}

/* Audit G01, hash flooding: a CJK text whose shingle hashes all fall into
 * the first 4096 cells of the distinct set's old layout (tests/hashflood.h)
 * is sketched in about the time of a random text of the same length (the
 * old set walked the cluster at every insertion: ~200x at 20,000
 * characters), and its sketches are those proto/sketch.md defines
 * (ref_sample()), as are a random text's. */
static void test_hash_flooding(void)
{
    static hf_alphabet al;
    REQUIRE(hf_alphabet_init(sk, scr, &al) == 0, "alphabet");
    enum { N = 20000 };
    size_t bytes = 3 * (N + 4);
    char *crafted = malloc(bytes), *plain = malloc(bytes);
    uint64_t *th = malloc((N + 4) * sizeof(uint64_t)), seed = 88172645463325252ull;
    REQUIRE(crafted && plain && th);
    size_t missed = hf_text(&al, N, 4096, false, &seed, crafted, th);
    hf_text(&al, N, SIZE_MAX, false, &seed, plain, th);
    /* the attack holds: the text's shingles do crowd into the window */
    nd_sketch d;
    const nd_shingle *sh;
    size_t nsh = 0, in = 0;
    REQUIRE(nd_sketch_text(sk, scr, crafted, bytes, &d, NULL, 0, NULL) == 0 &&
            nd_sketch_shingles(scr, ND_SKETCH_MODE_CHAR, &sh, &nsh) == 0 && nsh == N);
    for (size_t i = 0; i < nsh; i++)
        in += hf_cell(sh[i].h, hf_table_size(nsh)) < 4096;
    CHECK(missed < N / 100 && in > nsh - nsh / 50, "%zu of %zu shingles in the window", in, nsh);
    double tc = time_query(crafted, bytes, (nd_sketch[2]){0});
    double tr = time_query(plain, bytes, (nd_sketch[2]){0});
    unit_note("nd_sketch_text_modes, %d characters: crafted %.4f s, random %.4f s (%.1fx)", N + 4,
              tc, tr, tc / tr);
    CHECK(tc < 10 * tr + 0.01, "crafted %.4f s, random %.4f s", tc, tr);
    /* the same sketches as the definition, in both modes, for both texts */
    const char *texts[2] = {crafted, plain};
    for (int k = 0; k < 2; k++) {
        nd_sketch q[2], ref;
        REQUIRE(nd_sketch_text_modes(sk, scr, texts[k], bytes, q, NULL, 0, NULL) >= 0);
        for (unsigned mode = 0; mode < 2; mode++) {
            REQUIRE(nd_sketch_shingles(scr, mode, &sh, &nsh) == 0);
            ref_sample(sh, nsh, &ref);
            CHECK(q[mode].shift == ref.shift && q[mode].shingles == ref.shingles &&
                      q[mode].n == ref.n &&
                      memcmp(q[mode].values, ref.values, ref.n * sizeof(uint32_t)) == 0 &&
                      memcmp(q[mode].pos, ref.pos, ref.n) == 0,
                  "text %d mode %u: shift %u/%u shingles %u/%u n %u/%u", k, mode, q[mode].shift,
                  ref.shift, q[mode].shingles, ref.shingles, q[mode].n, ref.n);
        }
    }
    free(crafted);
    free(plain);
    free(th);
}

int main(void)
{
    if (nd_sketcher_create(&sk) < 0 || nd_sk_scratch_create(&scr) < 0) {
        fprintf(stderr, "create failed\n");
        return 1;
    }
    UNIT_RUN(test_vectors);
    UNIT_RUN(test_exact_small);
    UNIT_RUN(test_passages);
    UNIT_RUN(test_sampled);
    UNIT_RUN(test_scaled_anchors);
    UNIT_RUN(test_rules);
    UNIT_RUN(test_core);
    UNIT_RUN(test_bounds);
    UNIT_RUN(test_query_lazy);
    UNIT_RUN(test_shortcuts);
    UNIT_RUN(test_anchor_keys);
    UNIT_RUN(test_fp_tokens);
    UNIT_RUN(test_invalid_utf8);
    UNIT_RUN(test_hash_flooding);
    nd_sk_scratch_destroy(scr);
    nd_sketcher_destroy(sk);
    return unit_summary("sketch");
}
