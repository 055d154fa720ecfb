/* test_fold.c - the folds that read a text as a reader sees it: Traditional
 * Han as Simplified, invisible and blank characters, look-alike letters
 * (of another script and within the Latin one), text under a directional
 * override; what must not fold (Russian, Greek, Ukrainian, Turkish, Ewe
 * text, emoji sequences, a Latin word in a Russian text), readings in
 * brackets after Han characters (dropped: 原(yuán)创(chuàng); kept: an
 * English word, an acronym, a formula, one gloss alone), and the integrity
 * counts. */
#include <stdlib.h>
#include <string.h>

#include "fingerprint.h"
#include "fold.h"
#include "normalizer.h"
#include "sketch.h"
#include "unit.h"
#include "utf8.h"

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

/* Reads b (with controls a that a reads without) as a, with lk
 * look-alikes and nothing else counted. */
static void expect_reads(const char *a, const char *b, uint32_t lk)
{
    read_out x = rd(a), y = rd(b);
    CHECK(same(&x, &y), "%s | %s read differently", a, b);
    CHECK(y.info.integrity.invisible == 0 && y.info.integrity.lookalike == lk &&
              y.info.integrity.traditional == 0,
          "%s: invisible %u lookalike %u traditional %u, want 0 %u 0", b,
          y.info.integrity.invisible, y.info.integrity.lookalike, y.info.integrity.traditional, lk);
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
    /* format characters that are not default-ignorable, and the null
     * notehead (audit G05): they rendered as nothing but split words */
    expect_same("hello world again and again", "hel\uFFF9lo wor\uFFFBld again and again", 2, 0, 0);
    expect_same("hello world again", "hel\U00013430lo wor\U00013437ld again", 2, 0, 0);
    expect_same("hello world again", "hel\U0001D159lo world again", 1, 0, 0);
    /* a visible format character (a prepended concatenation mark) stays */
    read_out an = rd("\u0600\u0661\u0662 \u0643\u062A\u0627\u0628"),
             a0 = rd("\u0661\u0662 \u0643\u062A\u0627\u0628");
    CHECK(an.info.code_points == 8 && an.info.integrity.invisible == 0,
          "Arabic number sign: %u code points, invisible %u", an.info.code_points,
          an.info.integrity.invisible);
    (void)a0;
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

/* Look-alikes within the Latin script (audit G05): small capitals, IPA
 * letters, dotless i; counted as look-alikes. */
static void test_within_script(void)
{
    expect_same("The cow saw us move a dozen boxes", "The ᴄoᴡ ꜱaᴡ ᴜꜱ ᴍᴏᴠe a ᴅᴏᴢᴇɴ ʙᴏxeꜱ", 0, 17, 0);
    expect_same("a big dog is singing again", "ɑ biɡ doɡ ıs sınɡınɡ ɑɡɑın", 0, 12, 0);
    expect_same("ᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘꞯʀꜱᴛᴜᴠᴡxʏᴢ",
                "abcdefghijklmnopqrstuvwxyz", 0, 0, 0);
    read_out sc = rd("ᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘꞯʀꜱᴛᴜᴠᴡxʏᴢ");
    CHECK(sc.info.integrity.lookalike == 25, "small capitals: lookalike %u",
          sc.info.integrity.lookalike);
    /* in a Russian word, a small capital reads as its Cyrillic twin */
    expect_same("Привет, сосед", "Привет, ᴄосед", 0, 1, 0);
    /* Turkish keeps its dotless i; Ewe its ɣ ʋ, Kabiye its ɩ */
    expect_plain("Kısa bir yolculuk için şehirden ayrıldık ve ılık bir rüzgâr esti.");
    read_out tr = rd("Kısa bir yolculuk için şehirden ayrıldık."),
             ti = rd("Kisa bir yolculuk için şehirden ayrildik.");
    CHECK(!same(&tr, &ti), "Turkish ı read as i");
    /* a Turkish name in English text: read as i, but no swap by itself */
    expect_same("Thanks to Olcay Yildirim and Anna.", "Thanks to Olcay Yıldırım and Anna.", 0, 0,
                0);
    expect_plain("Eʋegbe nye gbe si wodoa le Ghana kple Togo, eye ɣletia dze.");
    expect_plain("Kabɩyɛ tɔm.");
}

static const char *en_para = "The old ferry used to leave the north pier at seven every "
                             "morning, and on most days the same small crowd waited for it.";

/* The text reversed under a right-to-left override (U+202E ... U+202C):
 * a browser shows the original (audit G05). */
static char *rlo(const char *t)
{
    size_t len = strlen(t), o = 0;
    char *r = malloc(len + 7);
    if (!r)
        abort();
    memcpy(r, "\u202E", 3), o = 3;
    for (size_t end = len; end > 0;) {
        size_t start = end - 1;
        while (start > 0 && ((uint8_t)t[start] & 0xC0) == 0x80)
            start--;
        memcpy(r + o, t + start, end - start);
        o += end - start;
        end = start;
    }
    memcpy(r + o, "\u202C", 4);
    return r;
}

static void test_overrides(void)
{
    const char *zh = "老城区的渡口每天早上七点准时开船，几十年来几乎没有变过。";
    const char *texts[] = {en_para, zh, "Ünïcödé, 2026: naïve café — 12 km/h."};
    for (size_t i = 0; i < 3; i++) {
        char *r = rlo(texts[i]);
        expect_reads(texts[i], r, 0);
        free(r);
    }
    /* the run ends at its paragraph's end, or at the PDF that closes it */
    expect_reads("hello world\nand again", "\u202Edlrow olleh\nand again", 0);
    expect_reads("hello world and again", "\u202Edlrow olleh\u202C and again", 0);
    expect_reads("world hello and again", "\u202Eolleh \u202A\u202C dlrow\u202C and again", 0);
    /* right-to-left letters under RLO read as they are; under LRO, a
     * reversed Hebrew word reads as the word */
    expect_reads("שלום עולם and more", "\u202Eשלום עולם\u202C and more", 0);
    expect_reads("שלום עולם and more", "\u202Dםלוע םולש\u202C and more", 0);
    expect_reads("abc שלום def", "\u202Efed שלום cba\u202C", 0);
    /* an override with look-alikes in it */
    expect_reads("hello world", "\u202Edlrоw оlleh", 2);
}

/* integrity.reordered: the code points of the override runs read in
 * another order (G05 read them, but counted nothing). */
static uint32_t reordered(const char *t)
{
    nd_normalizer *n = NULL;
    if (nd_normalizer_create(&n) != 0) {
        CHECK(false, "normalizer");
        return UINT32_MAX;
    }
    char *buf = NULL;
    size_t cap = 0, olen;
    const char *o;
    uint32_t lk, an, ro = 0;
    CHECK(nd_fold_text(n, t, strlen(t), &buf, &cap, &o, &olen, &lk, &an, &ro) == 0, "fold");
    read_out r = rd(t);
    CHECK(r.info.integrity.reordered == ro, "%s: the sketch counts %u, the fold %u", t,
          r.info.integrity.reordered, ro);
    /* read again, nothing moves */
    char *once = strndup(o, olen);
    uint32_t ro2 = 1;
    CHECK(nd_fold_text(n, once, strlen(once), &buf, &cap, &o, &olen, &lk, &an, &ro2) == 0 &&
              ro2 == 0,
          "%s: read again, %u reordered", t, ro2);
    free(once);
    free(buf);
    nd_normalizer_destroy(n);
    return ro;
}

static void test_reordered(void)
{
    /* an RLO run: its code points, not the override nor the PDF */
    uint32_t c = reordered("\u202Edlrow olleh\u202C and again");
    CHECK(c == 11, "RLO run: %u", c);
    char *r = rlo(en_para);
    c = reordered(r);
    CHECK(c == strlen(en_para), "a reversed paragraph: %u", c);
    free(r);
    c = reordered("\u202Edlrow olleh\nand again\n\u202Eniaga\u202C");
    CHECK(c == 16, "two runs, to the paragraph's end and to the PDF: %u", c);
    /* the nested embedding moves with its run and counts */
    c = reordered("\u202Eolleh \u202A\u202C dlrow\u202C and again");
    CHECK(c == 14, "nested: %u", c);
    /* an LRO run with a reversed Hebrew word in it */
    c = reordered("\u202D\u05dd\u05dc\u05d5\u05e2 \u05dd\u05d5\u05dc\u05e9\u202C and more");
    CHECK(c == 9, "LRO: %u", c);
    /* nothing read in another order: plain text, right-to-left words under
     * an RLO (read as they are), embeddings and isolates (not overrides) */
    const char *zero[] = {
        en_para,
        "老城区的渡口每天早上七点准时开船，几十年来几乎没有变过。",
        "\u202E\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd\u202C and more",
        "\u202Bdlrow olleh\u202C and again",
        "\u2067dlrow olleh\u2069 and again",
        "\u202Adlrow olleh\u202C and \u2066again\u2069 \u2068more\u2069",
    };
    for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++) {
        c = reordered(zero[i]);
        CHECK(c == 0, "%s: %u reordered", zero[i], c);
    }
}

/* A Latin word in Cyrillic text is not a swap, even when every letter has
 * a Cyrillic twin (audit G06); a word with letters of both is. */
static void test_swaps_counted(void)
{
    const char *brands = "Компании TOYOTA и PEPSICO, XEROX и COCA-COLA представили отчёты за год.";
    expect_plain(brands);
    read_out b = rd(brands);
    CHECK(b.info.integrity.lookalike == 0, "brands: lookalike %u", b.info.integrity.lookalike);
    read_out m = rd("Компании TОYOTA и PEPSICO представили отчёты за год.");
    CHECK(m.info.integrity.lookalike >= 1, "a Cyrillic О in TОYOTA: lookalike %u",
          m.info.integrity.lookalike);
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
    /* every look-alike within the Latin script is read (the byte scan
     * that decides whether a text is read at all catches each) */
    CHECK(n->lk_base_n >= 40, "%u look-alikes within Latin", n->lk_base_n);
    for (uint32_t i = 0; i < n->lk_base_n; i++) {
        /* alone (the scan's tail; ı alone counts nothing), and at each
         * offset of a long text (the scan's byte lanes) */
        char w[160] = "ab";
        size_t k = 2 + nd_utf8_encode(n->lk_base_cp[i], (uint8_t *)w + 2);
        memcpy(w + k, "cd", 3);
        bool dotless = n->lk_base_cp[i] == ND_LK_DOTLESS_I;
        CHECK(nd_fold_lookalikes(n, w, strlen(w), &buf, &cap, &o, &olen, &lk) == 0 && o != w &&
                  olen == 5 && o[2] == (char)n->lk_base_to[i] && lk == !dotless,
              "U+%04X not read as %c", n->lk_base_cp[i], n->lk_base_to[i]);
        for (size_t at = 0; at < 80; at++) {
            memset(w, 'x', sizeof(w));
            size_t e = at + nd_utf8_encode(n->lk_base_cp[i], (uint8_t *)w + at);
            w[sizeof(w) - 4] = '\0';
            CHECK(nd_fold_lookalikes(n, w, strlen(w), &buf, &cap, &o, &olen, &lk) == 0 && o != w &&
                      o[at] == (char)n->lk_base_to[i] && o[at + 1] == w[e],
                  "U+%04X at %zu not read as %c", n->lk_base_cp[i], at, n->lk_base_to[i]);
        }
    }
    /* overrides: the text in reading order, the override an embedding
     * (read again, nothing moves), counted nowhere */
    const char *ov = "\u202Eolleh\u202C \u202Dםולש\u202C";
    CHECK(nd_fold_lookalikes(n, ov, strlen(ov), &buf, &cap, &o, &olen, &lk) == 0 &&
              olen == strlen(ov) && memcmp(o, "\u202Bhello\u202C \u202Aשלום\u202C", olen) == 0 &&
              lk == 0,
          "override");
    once = strndup(o, olen);
    CHECK(nd_fold_lookalikes(n, once, strlen(once), &buf, &cap, &o, &olen, &lk) == 0 && o == once,
          "override: idempotent");
    free(once);
    /* a Latin name in a Russian text reads in Cyrillic, but is no swap */
    const char *brand = "Компания TOYOTA";
    CHECK(nd_fold_lookalikes(n, brand, strlen(brand), &buf, &cap, &o, &olen, &lk) == 0 &&
              o != brand && lk == 0,
          "brand: %u", lk);
    free(buf);
    nd_normalizer_destroy(n);
}

/* ---- readings in brackets ---- */

static const char *zh = "原创文章的作者是谁，我们需要知道。这篇文章讲的是软件开发的历史与文化";

/* The code points of s[0, len) into cps (at most max); returns how many. */
static size_t decode_all(const char *s, size_t len, uint32_t *cps, size_t max)
{
    size_t n = 0;
    for (size_t pos = 0; pos < len && n < max;)
        if (nd_utf8_decode((const uint8_t *)s, len, &pos, &cps[n++]) < 0)
            return 0;
    return n;
}

/* Reads b as a, with `count` readings dropped and nothing else counted;
 * b's folded text keeps its code points where they were, each code point
 * of a reading one U+0300 (a mark step 2 drops), and folds to itself. */
static void expect_dropped(const char *a, const char *b, uint32_t count)
{
    read_out x = rd(a), y = rd(b);
    CHECK(same(&x, &y), "%s | %s read differently", a, b);
    CHECK(y.info.integrity.annotation == count && y.info.integrity.invisible == 0 &&
              y.info.integrity.lookalike == 0 && y.info.integrity.traditional == 0,
          "%s: annotation %u (want %u) invisible %u lookalike %u traditional %u", b,
          y.info.integrity.annotation, count, y.info.integrity.invisible,
          y.info.integrity.lookalike, y.info.integrity.traditional);
    nd_normalizer *n = NULL;
    REQUIRE(nd_normalizer_create(&n) == 0);
    char *buf = NULL, *buf2 = NULL;
    size_t cap = 0, cap2 = 0, olen, alen;
    const char *o, *again;
    uint32_t lk, an, lk2, an2, ro;
    CHECK(nd_fold_text(n, b, strlen(b), &buf, &cap, &o, &olen, &lk, &an, &ro) == 0 && an == count &&
              lk == 0,
          "%s: fold %u", b, an);
    static uint32_t in[4096], out[4096];
    size_t ni = decode_all(b, strlen(b), in, 4096), no = decode_all(o, olen, out, 4096);
    CHECK(ni == no && ni == y.info.code_points, "%s: %zu code points, folded %zu", b, ni, no);
    size_t kept = 0;
    for (size_t i = 0; i < ni && i < no; i++) {
        CHECK(out[i] == in[i] || out[i] == 0x0300, "%s: U+%04X at %zu became U+%04X", b, in[i], i,
              out[i]);
        kept += out[i] == in[i] && out[i] != 0x0300;
    }
    uint32_t ca[4096];
    CHECK(kept == decode_all(a, strlen(a), ca, 4096), "%s: %zu code points kept", b, kept);
    CHECK(nd_fold_text(n, o, olen, &buf2, &cap2, &again, &alen, &lk2, &an2, &ro) == 0 &&
              again == o && an2 == 0 && lk2 == 0,
          "%s: not idempotent (%u more)", b, an2);
    free(buf);
    free(buf2);
    nd_normalizer_destroy(n);
}

/* Reads t as it is: no reading dropped, the fold returns t itself. */
static void expect_kept(const char *t)
{
    read_out x = rd(t);
    CHECK(x.info.integrity.annotation == 0, "%s: annotation %u", t, x.info.integrity.annotation);
    nd_normalizer *n = NULL;
    REQUIRE(nd_normalizer_create(&n) == 0);
    char *buf = NULL;
    size_t cap = 0, olen;
    const char *o;
    uint32_t lk, an, ro;
    CHECK(nd_fold_text(n, t, strlen(t), &buf, &cap, &o, &olen, &lk, &an, &ro) == 0 && o == t &&
              an == 0,
          "%s: folded (%u)", t, an);
    free(buf);
    nd_normalizer_destroy(n);
}

static void test_annotation_dropped(void)
{
    /* a reading with tone marks after most characters, as found on the web */
    expect_dropped(
        zh,
        "原(yuán)创(chuàng)文(wén)章(zhāng)的(de)作者是(shì)谁，我(wǒ)们需(xū)要知(zhī)"
        "道(dào)。这篇(piān)文章讲(jiǎng)的是软(ruǎn)件开(kāi)发的历(lì)史与(yǔ)文化(huà)",
        17);
    /* fullwidth brackets, square brackets, a pair mixed by a width edit */
    expect_dropped(
        zh,
        "原（yuán）创（chuàng）文章的作者是谁，我们需要知道。这篇文章讲的是软件开发的历史与文化",
        2);
    expect_dropped(
        zh,
        "原[yuán]"
        "创［chuàng］文章的作者是谁，我们需要知道。这篇文章讲的是软件开发的历史与【wén】文化",
        3);
    expect_dropped(
        zh, "原(yuán）创（chuàng)文章的作者是谁，我们需要知道。这篇文章讲的是软件开发的历史与文化",
        2);
    /* toneless, 8 of them: read as readings too */
    expect_dropped(zh,
                   "原[yuan]创[chuang]文[wen]章[zhang]的[de]作[zuo]者[zhe]是[shi]谁，我们需要知道。"
                   "这篇文章讲的是软件开发的历史与文化",
                   8);
    /* tone digits; a run over a word, with a space or an apostrophe, or
     * none; decomposed tone marks; ü as ü, v and u + U+0308; ɑ ɡ */
    expect_dropped(zh,
                   "原(yuan2)创(chuang4)文章(wen2 zhang1)的作者是谁，我们需要知道。这篇文章讲的是"
                   "软件(ruǎnjiàn)开发(kāi'fā)的历史与文化",
                   5);
    expect_dropped(zh,
                   "原(yua\u0301n)创(chua\u0300ng)"
                   "文章的作者是谁，我们需要知道。这篇文章讲的是软件开发的历史与文化",
                   2);
    expect_dropped("绿女略和女", "绿(lǜ)女(nv3)略(lu\u0308e\u0300)和女(nü)", 4);
    expect_dropped(zh,
                   "原(yuán)创(chuàng)"
                   "文章的作者是谁，我们需要知道。这篇文章讲的是软件开发的历史与文(wén)化(huɑ̀)",
                   4);
    /* at a sentence's end, before punctuation or a space, at the text's
     * end; a toned reading before Latin text; the interjection ń */
    expect_dropped("知道。嗯 好rpm包的", "知(zhī)道(dào)。嗯(ń) 好(hǎo)rpm包(bāo)的(de)", 6);
    /* a reading's span is one code point each: offsets as in the copy */
    const char *copy = "原(yuán)创(chuàng)文(wén)章(zhāng)的作者是谁，我们需要知道。";
    read_out c = rd(copy);
    const nd_shingle *sh;
    size_t nsh;
    CHECK(nd_sketch_shingles(scr, c.info.mode, &sh, &nsh) == 0 && nsh > 0, "shingles");
    uint32_t cps[256];
    size_t ncp = decode_all(copy, strlen(copy), cps, 256);
    for (size_t i = 0; i < nsh; i++)
        CHECK(sh[i].start < sh[i].end && sh[i].end <= ncp && cps[sh[i].start] >= 0x4E00 &&
                  cps[sh[i].end - 1] >= 0x4E00,
              "shingle %zu: [%u, %u) not on Han characters", i, sh[i].start, sh[i].end);
    CHECK(nsh && sh[0].start == 0 && cps[sh[nsh - 1].end] == 0x3002, "spans [%u, %u)",
          nsh ? sh[0].start : 0, nsh ? sh[nsh - 1].end : 0);
}

static void test_annotation_kept(void)
{
    /* an English word with spaces around it, an acronym, code, formulas */
    expect_kept("我们使用 (Python) 来写这个程序，然后用 (go) 来部署它，再用(rust)重写");
    expect_kept("世界卫生组织(WHO)发布了报告，联合国(UN)和欧盟(EU)也表示支持，北京(Beijing)");
    expect_kept("调用函数f(x)的值，函数(x)和(y)以及数组[i]与[n]的和，记作(m)，单位(n)，距离(km)");
    expect_kept("执行printf(\"%d\")时，用ls(1)查看，见(a)和(b)，见图(1)");
    /* English words that happen to spell syllables, without tones */
    expect_kept("区域设置(locale)和区域(locale)以及(locale)，确保(ensure)命名(name)挂起(hang)");
    /* one gloss alone, or one word with accents: text */
    expect_kept("在中国做生意要讲关系(guānxì)，这很重要。");
    expect_kept("请把你的简历(résumé)发给我们，谢谢。");
    /* toneless, but fewer than 8, or followed by a letter or digit */
    expect_kept("原[yuan]创[chuang]文[wen]章[zhang]的[de]作[zuo]者[zhe]是谁");
    expect_kept("原[yuan]x创[chuang]x文[wen]x章[zhang]x的[de]x作[zuo]x者[zhe]x是[shi]x谁[shei]3");
    /* not after a Han character, not closed, uppercase, a space inside */
    expect_kept("原 (yuán) 创 (chuàng) 文章");
    expect_kept("原(yuán创(chuàng文章");
    expect_kept("原(Yuán)创(Chuàng)文章");
    expect_kept("原( yuán )创(chuàng  chuàng)文章");
    expect_kept("(yuán)(chuàng) yes (yuán) no");
    /* no bracket at all: the text itself, after the byte scan */
    expect_kept(zh);
    expect_kept(en);
}

static void test_annotation_counted(void)
{
    /* with look-alike letters: each fold counts its own; pinyin's ɑ is a
     * reading's letter, not a swap */
    read_out r = rd("原(yuán)创(chuàng)文章(wénzhɑ̄ng)的 pаypal 账户");
    CHECK(r.info.integrity.annotation == 3 && r.info.integrity.lookalike == 1,
          "annotation %u lookalike %u", r.info.integrity.annotation, r.info.integrity.lookalike);
    /* a reading written with look-alike letters (Cyrillic а, a small
     * capital) is read as the look-alike fold reads its letters: dropped,
     * so that the text folded once more holds no reading */
    read_out l = rd("原(yuаn)创(chuàng)文(ᴡén)章"), p = rd("原创文章");
    CHECK(same(&l, &p) && l.info.integrity.annotation == 3 && l.info.integrity.lookalike == 0,
          "look-alikes in readings: annotation %u lookalike %u", l.info.integrity.annotation,
          l.info.integrity.lookalike);
    /* a text with Traditional characters: readings after them too */
    read_out t = rd("顯(xiǎn)示一(yī)個日(rì)曆"), s = rd("显示一个日历");
    CHECK(same(&t, &s) && t.info.integrity.annotation == 3 && t.info.integrity.traditional == 3,
          "traditional: annotation %u traditional %u", t.info.integrity.annotation,
          t.info.integrity.traditional);
    /* at every byte offset of the scan's lanes */
    nd_normalizer *n = NULL;
    REQUIRE(nd_normalizer_create(&n) == 0);
    char *buf = NULL;
    size_t cap = 0, olen;
    const char *o;
    uint32_t lk, an, ro;
    for (size_t at = 0; at < 140; at++) {
        char w[256];
        memset(w, 'x', at);
        strcpy(w + at, "原(yuán)创（chuàng）文【wén】xx");
        CHECK(nd_fold_text(n, w, strlen(w), &buf, &cap, &o, &olen, &lk, &an, &ro) == 0 && an == 3 &&
                  olen == strlen(w) + 8, /* 7 + 13 + 10 bytes, 6 + 8 + 5 code points */
              "at %zu: %u readings, %zu bytes", at, an, olen);
    }
    /* invalid UTF-8: returned as is */
    const char bad[] = "原(yuán)创(chuàng)\xFF";
    CHECK(nd_fold_text(n, bad, sizeof(bad) - 1, &buf, &cap, &o, &olen, &lk, &an, &ro) == 0 &&
              o == bad && an == 0,
          "invalid");
    /* nd_fold_lookalikes() leaves readings alone */
    const char *two = "原(yuán)创(chuàng)";
    CHECK(nd_fold_lookalikes(n, two, strlen(two), &buf, &cap, &o, &olen, &lk) == 0 && o == two,
          "lookalikes only");
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
    UNIT_RUN(test_within_script);
    UNIT_RUN(test_overrides);
    UNIT_RUN(test_reordered);
    UNIT_RUN(test_swaps_counted);
    UNIT_RUN(test_not_folded);
    UNIT_RUN(test_fold_api);
    UNIT_RUN(test_annotation_dropped);
    UNIT_RUN(test_annotation_kept);
    UNIT_RUN(test_annotation_counted);
    nd_sketcher_destroy(sk);
    nd_sk_scratch_destroy(scr);
    nd_fingerprinter_destroy(fp);
    nd_fp_scratch_destroy(fs);
    return unit_summary("fold");
}
