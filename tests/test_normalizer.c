/* test_normalizer.c - the per-code-point normalization table, and the
 * look-alike tables it holds for lib/fold.c. */
#include <stdlib.h>

#include "normalizer.h"
#include "unit.h"

static const nd_normalizer *norm;

/* Maps cp; returns the count and copies the entries into out. */
static unsigned map(uint32_t cp, uint32_t out[ND_NORM_MAX])
{
    uint32_t buf[ND_NORM_MAX];
    const uint32_t *seq;
    unsigned n = nd_normalizer_map(norm, cp, buf, &seq);
    for (unsigned i = 0; i < n; i++)
        out[i] = seq[i];
    return n;
}

static void expect_one(uint32_t cp, uint32_t want, enum nd_char_class cls)
{
    uint32_t out[ND_NORM_MAX];
    unsigned n = map(cp, out);
    CHECK(n == 1 && ND_NORM_CP(out[0]) == want && ND_NORM_CLASS(out[0]) == (uint32_t)cls,
          "U+%04X -> n=%u U+%04X class %u, want U+%04X class %d", cp, n, n ? ND_NORM_CP(out[0]) : 0,
          n ? ND_NORM_CLASS(out[0]) : 0, want, cls);
}

static void expect_dropped(uint32_t cp)
{
    uint32_t out[ND_NORM_MAX];
    CHECK(map(cp, out) == 0, "U+%04X not dropped", cp);
}

int main(void)
{
    nd_normalizer *n = NULL;
    CHECK(nd_normalizer_create(&n) == 0, "create");
    if (!n)
        return unit_summary("normalizer");
    norm = n;

    expect_one('A', 'a', ND_CHAR_WORD);          /* case fold */
    expect_one(0xFF21, 'a', ND_CHAR_WORD);       /* full-width A */
    expect_one(0xFF11, '1', ND_CHAR_WORD);       /* full-width 1 */
    expect_one(0x3000, ' ', ND_CHAR_SPACE);      /* ideographic space */
    expect_one(0xFF0C, ',', ND_CHAR_PUNCT);      /* full-width comma */
    expect_one(0x3002, 0x3002, ND_CHAR_PUNCT);   /* ideographic full stop */
    expect_one(0x00E9, 'e', ND_CHAR_WORD);       /* é: decomposed, mark dropped */
    expect_one(0x4E2D, 0x4E2D, ND_CHAR_CJK);     /* 中 */
    expect_one(0xF900, 0x5C82, ND_CHAR_CJK);     /* compatibility ideograph 豈, t2s 岂 */
    expect_one(0x570B, 0x56FD, ND_CHAR_CJK);     /* 國 -> 国 (OpenCC t2s) */
    expect_one(0x56FD, 0x56FD, ND_CHAR_CJK);     /* 国 stays */
    expect_one(0x3164, 0x20, ND_CHAR_SPACE);     /* Hangul filler: a blank */
    expect_one(0x2800, 0x20, ND_CHAR_SPACE);     /* Braille blank */
    expect_one(0xFFA0, 0x20, ND_CHAR_SPACE);     /* half-width Hangul filler */
    expect_dropped(0x200B);                      /* zero width space */
    expect_dropped(0xFE0F);                      /* variation selector */
    expect_dropped(0xE0041);                     /* tag A */
    expect_dropped(0xE0100);                     /* variation selector 17 */
    expect_one(0x30AB, 0x30AB, ND_CHAR_CJK);     /* katakana KA */
    expect_one(0xFF76, 0x30AB, ND_CHAR_CJK);     /* half-width katakana KA */
    expect_one(0xD55C, 0xD55C, ND_CHAR_CJK);     /* Hangul syllable kept whole */
    expect_one(0x0E2A, 0x0E2A, ND_CHAR_CJK);     /* Thai */
    expect_one(0x0416, 0x0436, ND_CHAR_WORD);    /* Cyrillic Ж -> ж */
    expect_one(0x1F600, 0x1F600, ND_CHAR_PUNCT); /* emoji: a symbol */
    expect_one(0x20000, 0x20000, ND_CHAR_CJK);   /* CJK extension B */
    expect_one('\n', '\n', ND_CHAR_SPACE);
    expect_one(0, 0, ND_CHAR_SPACE); /* NUL is a control */
    expect_dropped(0x0301);          /* combining acute */
    expect_dropped(0x200B);          /* zero width space */
    expect_dropped(0x00AD);          /* soft hyphen */
    expect_dropped(0xFE0F);          /* variation selector */

    /* format characters that are not default-ignorable render as nothing
     * too, and so does U+1D159; the prepended concatenation marks are
     * visible (audit G05) */
    expect_dropped(0xFFF9);  /* interlinear annotation anchor */
    expect_dropped(0xFFFB);  /* interlinear annotation terminator */
    expect_dropped(0x13430); /* Egyptian hieroglyph vertical joiner */
    expect_dropped(0x1343F); /* Egyptian hieroglyph end walled enclosure */
    expect_dropped(0x1D159); /* musical symbol null notehead */
    CHECK(nd_normalizer_invisible(0xFFF9) && nd_normalizer_invisible(0x13430) &&
              nd_normalizer_invisible(0x1D159),
          "format characters invisible");
    CHECK(!nd_normalizer_invisible(0x0600) && !nd_normalizer_invisible(0x06DD) &&
              !nd_normalizer_invisible(0x110BD) && !nd_normalizer_invisible(0x1D158),
          "number signs, end of ayah, a visible notehead");
    expect_one(0x0600, 0x0600, ND_CHAR_SPACE);   /* Arabic number sign: kept */
    expect_one(0x1D158, 0x1D158, ND_CHAR_PUNCT); /* closed notehead: a symbol */
    CHECK((norm->table[0xFFF9] & ND_NORM_F_INVISIBLE) != 0, "U+FFF9 flagged invisible");

    /* look-alikes within the Latin script (lib/fold.h): small capitals,
     * IPA letters, dotless i; not the letters of living orthographies */
    static const struct {
        uint32_t cp;
        char to;
    } base[] = {{0x1D04, 'c'}, {0x1D0F, 'o'}, {0xA731, 's'}, {0x1D1C, 'u'}, {0x1D20, 'v'},
                {0x1D21, 'w'}, {0x1D22, 'z'}, {0x0251, 'a'}, {0x0261, 'g'}, {0x0131, 'i'},
                {0x0299, 'b'}, {0x026A, 'i'}, {0xA7AF, 'q'}, {0x1D00, 'a'}};
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) {
        char got = 0;
        for (uint32_t j = 0; j < norm->lk_base_n; j++)
            if (norm->lk_base_cp[j] == base[i].cp)
                got = (char)norm->lk_base_to[j];
        CHECK(got == base[i].to, "U+%04X reads as %c, want %c", base[i].cp, got ? got : '-',
              base[i].to);
    }
    static const uint32_t kept[] = {0x0263, 0x028B, 0x0269, 0x0196, 0x01C0, 0x025B,
                                    0x0254, 0x014B, 0x0259, 0x017F, 0xFF41, 'a'};
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
        for (uint32_t j = 0; j < norm->lk_base_n; j++)
            CHECK(norm->lk_base_cp[j] != kept[i], "U+%04X read as %c", kept[i],
                  norm->lk_base_to[j]);
    for (uint32_t j = 1; j < norm->lk_base_n; j++)
        CHECK(norm->lk_base_cp[j - 1] < norm->lk_base_cp[j], "look-alikes in order");
    CHECK((norm->lk[0x0131] & ND_LK_BASE) && (norm->lk[0x0251] & ND_LK_BASE) &&
              !(norm->lk['a'] & ND_LK_BASE),
          "ND_LK_BASE flags");

    uint32_t out[ND_NORM_MAX];
    unsigned k = map(0xFB01, out); /* ﬁ ligature -> f i */
    CHECK(k == 2 && ND_NORM_CP(out[0]) == 'f' && ND_NORM_CP(out[1]) == 'i', "fi: %u", k);
    k = map(0x00DF, out); /* ß -> ss */
    CHECK(k == 2 && ND_NORM_CP(out[0]) == 's' && ND_NORM_CP(out[1]) == 's', "sharp s: %u", k);
    k = map(0xFDFA, out); /* the longest expansion */
    CHECK(k == 18, "U+FDFA: %u", k);

    nd_normalizer_destroy(n);
    nd_normalizer_destroy(NULL);
    return unit_summary("normalizer");
}
