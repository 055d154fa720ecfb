/* test_fold.c - the folds that read a text as a reader sees it: Traditional
 * Han as Simplified, invisible and blank characters, look-alike letters;
 * what must not fold (Russian, Greek, Ukrainian text, emoji sequences, a
 * Latin word in a Russian text), and the integrity counts. */
#include <stdlib.h>
#include <string.h>

#include "fingerprint.h"
#include "fold.h"
#include "normalizer.h"
#include "sketch.h"
#include "unit.h"

static nd_sketcher *sk;
static nd_sk_scratch *scr;
static nd_fingerprinter *fp;
static nd_fp_scratch *fs;

typedef struct read_out {
    nd_sketch s;
    nd_sketch_info info;
    uint64_t simhash;
} read_out;

static read_out rd(const char *t)
{
    read_out r;
    memset(&r, 0, sizeof(r));
    int rc = nd_sketch_text(sk, scr, t, strlen(t), &r.s, NULL, 0, &r.info);
    CHECK(rc == 0, "sketch %s: %d", t, rc);
    nd_fingerprint_result f;
    rc = nd_fingerprint(fp, fs, t, strlen(t), &f);
    CHECK(rc == 0, "fingerprint %s: %d", t, rc);
    r.simhash = f.simhash;
    return r;
}

static bool same(const read_out *a, const read_out *b)
{
    return a->simhash == b->simhash && a->s.n == b->s.n && a->s.shift == b->s.shift &&
           memcmp(a->s.values, b->s.values, a->s.n * sizeof(uint32_t)) == 0;
}

static double resemblance(const read_out *a, const read_out *b)
{
    nd_sketch_estimate e;
    nd_sketch_compare(&a->s, &b->s, &e);
    return e.resemblance;
}

/* Reads a and b the same, and b's integrity is as given. */
static void expect_same(const char *a, const char *b, uint32_t inv, uint32_t lk, uint32_t trad)
{
    read_out x = rd(a), y = rd(b);
    CHECK(same(&x, &y), "%s | %s read differently", a, b);
    CHECK(y.info.integrity.invisible == inv && y.info.integrity.lookalike == lk &&
              y.info.integrity.traditional == trad,
          "%s: invisible %u lookalike %u traditional %u, want %u %u %u", b,
          y.info.integrity.invisible, y.info.integrity.lookalike, y.info.integrity.traditional, inv,
          lk, trad);
    CHECK(x.info.code_points == y.info.code_points || inv, "%s: code points %u vs %u", b,
          x.info.code_points, y.info.code_points);
}

/* Reads t with nothing folded. */
static void expect_plain(const char *t)
{
    read_out x = rd(t);
    CHECK(x.info.integrity.invisible == 0 && x.info.integrity.lookalike == 0 &&
              x.info.integrity.traditional == 0,
          "%s: invisible %u lookalike %u traditional %u, want 0", t, x.info.integrity.invisible,
          x.info.integrity.lookalike, x.info.integrity.traditional);
}

static void test_traditional(void)
{
    expect_same("国家的历史与文化", "國家的歷史與文化", 0, 0, 3);
    read_out t = rd("國家的歷史與文化");
    CHECK(t.info.integrity.han == 8, "han %u", t.info.integrity.han);
    CHECK(t.info.integrity.traditional * 20 >= t.info.integrity.han, "judged traditional");
    read_out s = rd("国家的历史与文化");
    CHECK(s.info.integrity.traditional == 0 && s.info.integrity.han == 8, "simplified: %u %u",
          s.info.integrity.traditional, s.info.integrity.han);
    /* one code point in, one out: the spans keep the source's offsets */
    CHECK(t.info.code_points == 8, "code points %u", t.info.code_points);
    expect_same("软件开发", "軟件開發", 0, 0, 3);
}

static void test_invisible(void)
{
    expect_same("hello world again and again", "hel\u200Blo wor\u2060ld again and again", 2, 0, 0);
    expect_same("hello world again and again", "hello\u3164world again and again", 1, 0, 0);
    expect_same("hello world again and again", "hello\u2800world again and again", 1, 0, 0);
    expect_same("hello world again and again", "hel\xC2\xADlo world again and again", 1, 0, 0);
    expect_same("hello world again", "hel\U000E0041lo world again", 1, 0, 0); /* a tag */
    expect_same("中文的内容", "中\u200B文\uFEFF的内容", 2, 0, 0);
    /* what is not hidden: emoji sequences, a joiner in Persian */
    expect_plain(
        "We won 🎉! Family 👨\u200D👩\u200D👧 and love ❤\uFE0F, thumbs 👍🏽, flag "
        "🏴\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F, keycap "
        "1\uFE0F\u20E3 2\uFE0F\u20E3.");
    expect_plain("می\u200Cخواهم");
}

static const char *en = "The quick brown fox jumps over the lazy dog while the committee "
                        "reviews the annual report on water supply and public transport.";
/* the same with half of its look-alike letters Cyrillic or Greek */
static const char *en_swapped = "Thе quiсk brоwn fох jumрs оvеr thе lazу dоg whilе thе "
                                "соmmittee rеviews thе annuаl rероrt оn watеr suррly аnd рublic "
                                "trаnsроrt.";
static const char *ru = "Быстрая коричневая лиса прыгает через ленивую собаку, пока комитет "
                        "рассматривает годовой отчёт о водоснабжении и общественном транспорте.";
/* the same with its look-alike letters Latin */
static const char *ru_latin = "Быcтpaя кopичнeвaя лиca пpыгaeт чepeз лeнивyю coбaкy, пoкa кoмитeт "
                              "paccмaтpивaeт гoдoвoй oтчёт o вoдocнaбжeнии и oбщecтвeннoм "
                              "тpaнcпopтe.";

static void test_lookalike(void)
{
    read_out a = rd(en), b = rd(en_swapped);
    CHECK(same(&a, &b), "swapped English reads as the original");
    CHECK(b.info.integrity.lookalike >= 25, "lookalike %u", b.info.integrity.lookalike);
    CHECK(a.info.integrity.lookalike == 0, "original: lookalike %u", a.info.integrity.lookalike);
    expect_same("hello", "hеllo", 0, 1, 0); /* Cyrillic е in a Latin text */
    expect_same("Hello world", "Hеllо wоrld", 0, 3, 0);
    read_out r = rd(ru), rl = rd(ru_latin);
    CHECK(same(&r, &rl), "Russian with Latin look-alikes reads as the original");
    CHECK(r.info.integrity.lookalike == 0, "Russian: lookalike %u", r.info.integrity.lookalike);
    CHECK(rl.info.integrity.lookalike > 40, "Latin twin: lookalike %u",
          rl.info.integrity.lookalike);
    /* Russian is not read as Latin: neither it nor its twin is near English */
    CHECK(resemblance(&r, &a) < 0.1 && resemblance(&rl, &a) < 0.1, "Russian vs English %.3f %.3f",
          resemblance(&r, &a), resemblance(&rl, &a));
    /* a Russian article still matches its own copies */
    read_out re = rd("Быстрая коричневая лиса прыгает через ленивую собаку, пока комитет "
                     "рассматривает годовой отчёт о водоснабжении и общественном транспорте!"),
             rq = rd("Быстрая коричневая лиса прыгает через ленивую собаку, пока комитет "
                     "изучает годовой отчёт о водоснабжении и общественном транспорте.");
    CHECK(same(&r, &re), "Russian with other punctuation reads the same");
    CHECK(resemblance(&r, &rq) >= 0.5 && resemblance(&rl, &rq) >= 0.5,
          "Russian vs a copy with one word changed %.3f, its twin %.3f", resemblance(&r, &rq),
          resemblance(&rl, &rq));
    /* a Russian word with one Latin letter reads as Russian */
    expect_same("Привет, сосед", "Привет, cосед", 0, 1, 0);
}

static void test_not_folded(void)
{
    expect_plain(ru);
    expect_plain("Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο, και ο σκύλος κοιμάται.");
    expect_plain("Швидка руда лисиця перестрибує через ледачого собаку і їсть хліб.");
    expect_plain("Компания Microsoft выпустила Windows, а Google ответил.");
    expect_plain("Ալեքսանդրը գնաց տուն, and Anna went home.");
    expect_plain(en);
    expect_plain("国家的历史与文化");
}

static void test_fold_api(void)
{
    nd_normalizer *n = NULL;
    REQUIRE(nd_normalizer_create(&n) == 0);
    char *buf = NULL;
    size_t cap = 0, olen;
    const char *o;
    uint32_t lk;
    /* pure Latin, pure CJK, pure Cyrillic: the text itself */
    const char *pure[] = {"plain English", "中文", "только русский"};
    for (size_t i = 0; i < 3; i++) {
        CHECK(nd_fold_lookalikes(n, pure[i], strlen(pure[i]), &buf, &cap, &o, &olen, &lk) == 0 &&
                  o == pure[i] && lk == 0,
              "%s", pure[i]);
    }
    /* code points replaced one for one; idempotent */
    const char *t = "pаypаl account: Оплатить cчёт";
    CHECK(nd_fold_lookalikes(n, t, strlen(t), &buf, &cap, &o, &olen, &lk) == 0, "fold");
    char *once = strndup(o, olen);
    CHECK(strcmp(once, "paypal account: Оплатить счёт") == 0 && lk == 3, "%s (%u)", once, lk);
    CHECK(nd_fold_lookalikes(n, once, strlen(once), &buf, &cap, &o, &olen, &lk) == 0 && o == once &&
              lk == 0,
          "idempotent");
    /* invalid UTF-8: returned as is */
    const char bad[] = "p\xD0\xB0y\xFF";
    CHECK(nd_fold_lookalikes(n, bad, sizeof(bad) - 1, &buf, &cap, &o, &olen, &lk) == 0 && o == bad,
          "invalid");
    free(once);
    free(buf);
    nd_normalizer_destroy(n);
}

int main(void)
{
    if (nd_sketcher_create(&sk) < 0 || nd_sk_scratch_create(&scr) < 0 ||
        nd_fingerprinter_create(&fp) < 0 || nd_fp_scratch_create(&fs) < 0) {
        CHECK(0, "create");
        return unit_summary("fold");
    }
    UNIT_RUN(test_traditional);
    UNIT_RUN(test_invisible);
    UNIT_RUN(test_lookalike);
    UNIT_RUN(test_not_folded);
    UNIT_RUN(test_fold_api);
    nd_sketcher_destroy(sk);
    nd_sk_scratch_destroy(scr);
    nd_fingerprinter_destroy(fp);
    nd_fp_scratch_destroy(fs);
    return unit_summary("fold");
}
