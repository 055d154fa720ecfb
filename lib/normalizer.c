/* normalizer.c - the per-code-point normalization table (see normalizer.h). */
#include "normalizer.h"

#include <errno.h>
#include <opencc/opencc.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unicode/uchar.h>
#include <unicode/uscript.h>
#include <unicode/uspoof.h>
#include <utf8proc.h>

#include "utf8.h"

#define BMP_SIZE ND_NORM_BMP
#define POOL_MAX ND_NORM_POOL_MAX
/* Table entry for a BMP code point: either a single mapped entry inline
 * (bit 31 clear), or bit 31 set with the length in bits 24..30 and the
 * offset into the pool in bits 0..23. A dropped code point has length 0. */
#define MULTI_FLAG ND_NORM_MULTI

static bool in_range(uint32_t cp, uint32_t lo, uint32_t hi)
{
    return cp >= lo && cp <= hi;
}

/* Scripts written without spaces between words, and Hangul, whose syllables
 * are tokenized one by one (character n-grams) rather than as words. */
static bool is_cjk_script(uint32_t cp)
{
    return in_range(cp, 0x4E00, 0x9FFF)      /* CJK Unified Ideographs */
           || in_range(cp, 0x3400, 0x4DBF)   /* Extension A */
           || in_range(cp, 0x20000, 0x323AF) /* Extensions B..H */
           || in_range(cp, 0xF900, 0xFAFF)   /* Compatibility Ideographs */
           || in_range(cp, 0x2F800, 0x2FA1F) || in_range(cp, 0x3005, 0x3007) /* 々 〆 〇 */
           || in_range(cp, 0x3040, 0x30FF)                                 /* Hiragana, Katakana */
           || in_range(cp, 0x31F0, 0x31FF)                                 /* Katakana ext. */
           || in_range(cp, 0xAC00, 0xD7A3)                                 /* Hangul syllables */
           || in_range(cp, 0x1100, 0x11FF)                                 /* Hangul jamo */
           || in_range(cp, 0x3130, 0x318F) || in_range(cp, 0x0E00, 0x0EFF) /* Thai, Lao */
           || in_range(cp, 0x1000, 0x109F)                                 /* Myanmar */
           || in_range(cp, 0x1780, 0x17FF)                                 /* Khmer */
           || in_range(cp, 0x0F00, 0x0FFF);                                /* Tibetan */
}

enum nd_char_class nd_char_classify(uint32_t cp)
{
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    switch (p->category) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
    case UTF8PROC_CATEGORY_MC: return is_cjk_script(cp) ? ND_CHAR_CJK : ND_CHAR_WORD;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO: return ND_CHAR_PUNCT;
    default: return ND_CHAR_SPACE;
    }
}

/* Han ideographs (the HAN flag). */
static bool is_han(uint32_t cp)
{
    return in_range(cp, 0x4E00, 0x9FFF) || in_range(cp, 0x3400, 0x4DBF) ||
           in_range(cp, 0x20000, 0x323AF) || in_range(cp, 0xF900, 0xFAFF) ||
           in_range(cp, 0x2F800, 0x2FA1F);
}

/* The Braille Patterns block encodes its eight dots in the low 8 bits of
 * the code point: the pattern with no dot renders as a blank. */
#define BRAILLE_FIRST 0x2800u
#define BRAILLE_LAST 0x28FFu

static bool is_blank_braille(uint32_t cp)
{
    return in_range(cp, BRAILLE_FIRST, BRAILLE_LAST) && ((cp - BRAILLE_FIRST) & 0xFFu) == 0;
}

/* U+1D159 MUSICAL SYMBOL NULL NOTEHEAD: a symbol (So) that renders as
 * nothing, unlike its neighbours. */
#define NULL_NOTEHEAD 0x1D159u

bool nd_normalizer_invisible(uint32_t cp)
{
    if (u_hasBinaryProperty((UChar32)cp, UCHAR_DEFAULT_IGNORABLE_CODE_POINT) ||
        is_blank_braille(cp) || cp == NULL_NOTEHEAD)
        return true;
    /* format characters render as nothing, but for the prepended
     * concatenation marks (Arabic number signs, end of ayah...) */
    return u_charType((UChar32)cp) == U_FORMAT_CHAR &&
           !u_hasBinaryProperty((UChar32)cp, UCHAR_PREPENDED_CONCATENATION_MARK);
}

static bool is_dropped_mark(uint32_t cp)
{
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_ME;
}

/* Computes the mapping of cp into out[ND_NORM_MAX]; returns its length.
 * What renders as nothing or as a blank (nd_normalizer_invisible()) is
 * dropped, unless it is a spacing letter (general category Lo: the Hangul
 * fillers), which renders as a blank and reads as a space, as does the
 * blank Braille pattern. */
unsigned nd_normalizer_map_slow(uint32_t cp, uint32_t out[ND_NORM_MAX])
{
    if (nd_normalizer_invisible(cp)) {
        if (is_blank_braille(cp) || u_charType((UChar32)cp) == U_OTHER_LETTER) {
            out[0] = ((uint32_t)ND_CHAR_SPACE << 24) | ND_NORM_F_INVISIBLE | ' ';
            return 1;
        }
        return 0;
    }
    utf8proc_int32_t dec[ND_NORM_MAX];
    int boundclass = UTF8PROC_BOUNDCLASS_START;
    utf8proc_ssize_t n;

    if (in_range(cp, 0xAC00, 0xD7A3)) { /* NFKC keeps Hangul syllables */
        out[0] = ((uint32_t)ND_CHAR_CJK << 24) | cp;
        return 1;
    }
    n = utf8proc_decompose_char(
        (utf8proc_int32_t)cp, dec, ND_NORM_MAX,
        UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT | UTF8PROC_CASEFOLD | UTF8PROC_IGNORE, &boundclass);
    if (n < 0) /* unassigned or invalid: treat as a separator */
        n = 0, dec[n++] = ' ';
    if (n > ND_NORM_MAX)
        n = ND_NORM_MAX;
    unsigned len = 0;
    for (utf8proc_ssize_t i = 0; i < n; i++) {
        uint32_t c = (uint32_t)dec[i];
        if (is_dropped_mark(c))
            continue;
        enum nd_char_class k = nd_char_classify(c);
        out[len++] = ((uint32_t)k << 24) | (k == ND_CHAR_CJK && is_han(c) ? ND_NORM_F_HAN : 0) | c;
    }
    return len;
}

/* The BMP Han blocks whose characters OpenCC's t2s table is asked about. */
static const uint32_t han_blocks[][2] = {{0x3400, 0x4DBF}, {0x4E00, 0x9FFF}, {0xF900, 0xFAFF}};

/* Traditional -> Simplified, character by character, from OpenCC's t2s
 * configuration: one string holding every BMP Han code point, each on its
 * own line (so that no phrase applies), is converted, and a code point
 * whose line comes back as one other code point maps to it. Chains are
 * followed (the fold is idempotent). Applied to every table entry that is
 * a single Han character. Returns 0, -ENOENT or -ENOMEM. */
/* An entry with the Traditional fold of the table: a BMP Han character
 * reads as the (single) entry of its table slot when that one is folded. */
static uint32_t fold_entry(const nd_normalizer *n, uint32_t e)
{
    uint32_t x = ND_NORM_CP(e);
    if (!(e & ND_NORM_F_HAN) || x >= ND_NORM_BMP)
        return e;
    uint32_t t = n->table[x];
    return !(t & ND_NORM_MULTI) && (t & ND_NORM_F_TRAD) ? t : e;
}

unsigned nd_normalizer_map_astral(const nd_normalizer *n, uint32_t cp, uint32_t buf[ND_NORM_MAX])
{
    unsigned len = nd_normalizer_map_slow(cp, buf);
    for (unsigned i = 0; i < len; i++)
        buf[i] = fold_entry(n, buf[i]);
    return len;
}

static int fold_traditional(nd_normalizer *n)
{
    size_t count = 0;
    for (size_t b = 0; b < sizeof(han_blocks) / sizeof(han_blocks[0]); b++)
        count += han_blocks[b][1] - han_blocks[b][0] + 1;
    char *in = malloc(count * 4 + 1);
    uint16_t *to = calloc(ND_NORM_BMP, sizeof(*to));
    if (!in || !to) {
        free(in), free(to);
        return -ENOMEM;
    }
    size_t len = 0;
    for (size_t b = 0; b < sizeof(han_blocks) / sizeof(han_blocks[0]); b++)
        for (uint32_t cp = han_blocks[b][0]; cp <= han_blocks[b][1]; cp++) {
            len += nd_utf8_encode(cp, (uint8_t *)in + len);
            in[len++] = '\n';
        }
    in[len] = 0;
    opencc_t cc = opencc_open("t2s.json");
    if (cc == (opencc_t)-1) {
        free(in), free(to);
        return -ENOENT;
    }
    char *conv = opencc_convert_utf8(cc, in, len);
    opencc_close(cc);
    free(in);
    if (!conv) {
        free(to);
        return -ENOMEM;
    }
    /* Line i of the output is the conversion of the i-th code point. */
    size_t pos = 0, clen = strlen(conv);
    for (size_t b = 0; b < sizeof(han_blocks) / sizeof(han_blocks[0]); b++)
        for (uint32_t cp = han_blocks[b][0]; cp <= han_blocks[b][1] && pos < clen; cp++) {
            size_t eol = pos;
            while (eol < clen && conv[eol] != '\n')
                eol++;
            size_t p = pos;
            uint32_t t;
            if (nd_utf8_decode((const uint8_t *)conv, eol, &p, &t) == 0 && p == eol && t != cp &&
                t < ND_NORM_BMP)
                to[cp] = (uint16_t)t;
            pos = eol + 1;
        }
    opencc_convert_utf8_free(conv);
    /* Fold every entry that is one Han character with a Simplified form,
     * following chains (t2s is applied until nothing changes). */
    for (uint32_t cp = 0; cp < ND_NORM_BMP; cp++) {
        uint32_t e = n->table[cp];
        if ((e & ND_NORM_MULTI) || !(e & ND_NORM_F_HAN))
            continue;
        uint32_t x = ND_NORM_CP(e), steps = 0;
        while (x < ND_NORM_BMP && to[x] && steps++ < 8)
            x = to[x];
        if (x == ND_NORM_CP(e))
            continue;
        uint32_t tx = n->table[x]; /* the Simplified form's own entry */
        if ((tx & ND_NORM_MULTI) || !(tx & ND_NORM_F_HAN))
            continue;
        n->table[cp] = tx | ND_NORM_F_TRAD;
    }
    /* and the Han characters of longer mappings (U+337B SQUARE ERA NAME
     * HEISEI), whose table slots are folded now */
    for (uint32_t i = 0; i < n->pool_len; i++)
        n->pool[i] = fold_entry(n, n->pool[i]);
    free(to);
    return 0;
}

static uint8_t lk_script(uint32_t cp)
{
    UErrorCode st = U_ZERO_ERROR;
    switch (uscript_getScript((UChar32)cp, &st)) {
    case USCRIPT_LATIN: return ND_LK_LATIN;
    case USCRIPT_CYRILLIC: return ND_LK_CYRILLIC;
    case USCRIPT_GREEK: return ND_LK_GREEK;
    case USCRIPT_ARMENIAN: return ND_LK_ARMENIAN;
    default: return ND_LK_NONE;
    }
}

/* 0 lowercase, 1 uppercase, 2 neither (the twin keeps the case). */
static unsigned lk_case(uint32_t cp)
{
    return u_isULowercase((UChar32)cp) ? 0 : u_isUUppercase((UChar32)cp) ? 1 : 2;
}

#define SKEL_MAX 8

/* Letters whose skeleton is an ASCII letter that stay as written: those of
 * living orthographies, U+0196 U+0269 Ɩ ɩ (Kabiye), U+01C0 ǀ (Khoekhoe),
 * U+0263 ɣ and U+028B ʋ (Ewe); and the obsolete U+01A6 Ʀ (yr) and U+01BD ƽ
 * (tone five), which lib/fold.c's byte scan would find only by sending
 * Vietnamese text (ơ ư, from the same lead byte) down the slow path.
 * U+0131 ı (Turkic) is in the table: lib/fold.c reads it only outside
 * Turkic text. */
static bool base_kept(uint32_t cp)
{
    return cp == 0x0196 || cp == 0x0269 || cp == 0x01C0 || cp == 0x0263 || cp == 0x028B ||
           cp == 0x01A6 || cp == 0x01BD;
}

/* The ASCII letter a Latin letter cp reads as, or 0: the one code point of
 * its UTS #39 skeleton when that is an ASCII letter, or X for "LATIN LETTER
 * SMALL CAPITAL X" (a reader reads small capitals as letters). */
static uint8_t base_letter(USpoofChecker *sc, uint32_t cp)
{
    UChar id[1] = {(UChar)cp}, sk[SKEL_MAX];
    UErrorCode e = U_ZERO_ERROR;
    int32_t k = uspoof_getSkeleton(sc, 0, id, 1, sk, SKEL_MAX, &e);
    if (U_SUCCESS(e) && k == 1 && sk[0] < 0x80 && (unsigned)((sk[0] | 0x20) - 'a') < 26u)
        return (uint8_t)sk[0];
    static const char prefix[] = "LATIN LETTER SMALL CAPITAL ";
    char name[64];
    e = U_ZERO_ERROR;
    int32_t len = u_charName((UChar32)cp, U_UNICODE_CHAR_NAME, name, sizeof(name), &e);
    if (U_SUCCESS(e) && len == (int32_t)sizeof(prefix) &&
        memcmp(name, prefix, sizeof(prefix) - 1) == 0 && name[len - 1] >= 'A' &&
        name[len - 1] <= 'Z')
        return (uint8_t)(name[len - 1] | 0x20);
    return 0;
}

/* Look-alikes within the Latin script (lib/fold.h): every BMP letter (L*)
 * of the Latin script that reads as an ASCII letter (base_letter()), but
 * for base_kept(), whose step-2 mapping is not already that of an ASCII
 * letter (fullwidth, ſ, the Kelvin sign). Returns 0 or -ENOMEM (no room:
 * cannot happen with ICU 72). */
static int build_base(nd_normalizer *n, USpoofChecker *sc)
{
    n->lk_base_n = 0;
    for (uint32_t cp = 0x80; cp < ND_NORM_BMP; cp++) {
        int8_t t = u_charType((UChar32)cp);
        UErrorCode st = U_ZERO_ERROR;
        if (t != U_UPPERCASE_LETTER && t != U_LOWERCASE_LETTER && t != U_TITLECASE_LETTER &&
            t != U_OTHER_LETTER && t != U_MODIFIER_LETTER)
            continue;
        if (uscript_getScript((UChar32)cp, &st) != USCRIPT_LATIN || base_kept(cp))
            continue;
        uint32_t e = n->table[cp];
        if (!(e & ND_NORM_MULTI) && ND_NORM_CP(e) < 0x80)
            continue; /* already read as ASCII */
        uint8_t to = base_letter(sc, cp);
        if (!to)
            continue;
        if (n->lk_base_n == ND_LK_BASE_MAX)
            return -ENOMEM;
        if (cp < ND_LK_END)
            n->lk[cp] |= ND_LK_BASE;
        n->lk_base_cp[n->lk_base_n] = (uint16_t)cp;
        n->lk_base_to[n->lk_base_n++] = to;
    }
    return 0;
}

/* Look-alike letters (UTS #39, ICU's uspoof skeletons): below ND_LK_END,
 * each letter (general category Lu, Ll, Lt, Lo) of the Latin, Cyrillic,
 * Greek or Armenian script whose skeleton equals that of a letter of
 * another of these scripts and of the same case (lowercase, uppercase or
 * neither, ICU's Lowercase / Uppercase properties) is confusable; its twin
 * in script T is the lowest such code point of T. Returns 0, -ENOENT or
 * -ENOMEM. */
static int build_lookalikes(nd_normalizer *n)
{
    UErrorCode st = U_ZERO_ERROR;
    USpoofChecker *sc = uspoof_open(&st);
    if (U_FAILURE(st))
        return -ENOENT;
    UChar(*skel)[SKEL_MAX] = calloc(ND_LK_END, sizeof(*skel));
    uint8_t *slen = calloc(ND_LK_END, 1);
    if (!skel || !slen) {
        uspoof_close(sc);
        free(skel), free(slen);
        return -ENOMEM;
    }
    memset(n->lk, 0, sizeof(n->lk));
    memset(n->lk_twin, 0, sizeof(n->lk_twin));
    for (uint32_t cp = 0; cp < ND_LK_END; cp++) {
        int8_t t = u_charType((UChar32)cp);
        bool letter = t == U_UPPERCASE_LETTER || t == U_LOWERCASE_LETTER ||
                      t == U_TITLECASE_LETTER || t == U_OTHER_LETTER;
        bool word = letter || t == U_MODIFIER_LETTER || t == U_NON_SPACING_MARK ||
                    t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK ||
                    t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
        uint8_t script = letter ? lk_script(cp) : ND_LK_NONE;
        n->lk[cp] = (uint8_t)(script | (word ? ND_LK_WORD : 0));
        if (script == ND_LK_NONE)
            continue;
        UChar id[1] = {(UChar)cp};
        UErrorCode e = U_ZERO_ERROR;
        int32_t k = uspoof_getSkeleton(sc, 0, id, 1, skel[cp], SKEL_MAX, &e);
        slen[cp] = U_SUCCESS(e) && k > 0 && k <= SKEL_MAX ? (uint8_t)k : 0;
    }
    int rc = build_base(n, sc);
    uspoof_close(sc);
    if (rc < 0) {
        free(skel), free(slen);
        return rc;
    }
    for (uint32_t a = 0; a < ND_LK_END; a++) {
        unsigned sa = n->lk[a] & 7u;
        if (sa == ND_LK_NONE || slen[a] == 0)
            continue;
        for (uint32_t b = 0; b < ND_LK_END; b++) {
            unsigned sb = n->lk[b] & 7u;
            if (sb == ND_LK_NONE || sb == sa || slen[b] != slen[a] ||
                memcmp(skel[a], skel[b], slen[a] * sizeof(UChar)) != 0)
                continue;
            if (lk_case(b) != lk_case(a))
                continue;
            n->lk[a] |= ND_LK_CONFUSABLE;
            if (n->lk_twin[a][sb] == 0) /* the lowest (b ascends) */
                n->lk_twin[a][sb] = (uint16_t)b;
        }
    }
    /* A twin is never a look-alike within the Latin script (н: ʜ), but the
     * ASCII letter that one reads as (h), when that is confusable too; else
     * there is none (в: ʙ, b is unambiguous). So the fold is idempotent:
     * read again, no letter changes its class. */
    for (uint32_t a = 0; a < ND_LK_END; a++) {
        uint32_t t = n->lk_twin[a][ND_LK_LATIN];
        if (t == 0 || !(n->lk[t] & ND_LK_BASE))
            continue;
        uint32_t x = 0;
        for (uint32_t i = 0; i < n->lk_base_n; i++)
            if (n->lk_base_cp[i] == t)
                x = n->lk_base_to[i];
        n->lk_twin[a][ND_LK_LATIN] = (uint16_t)(n->lk[x] & ND_LK_CONFUSABLE ? x : 0);
    }
    free(skel), free(slen);
    return 0;
}

int nd_normalizer_create(nd_normalizer **out)
{
    nd_normalizer *n = malloc(sizeof(*n));
    if (!n)
        return -ENOMEM;
    n->pool_len = 0;
    for (uint32_t cp = 0; cp < BMP_SIZE; cp++) {
        uint32_t seq[ND_NORM_MAX];
        unsigned len = (cp >= 0xD800 && cp <= 0xDFFF) ? 0 : nd_normalizer_map_slow(cp, seq);
        if (len == 1) {
            n->table[cp] = seq[0];
            continue;
        }
        uint32_t flags = len == 0 && nd_normalizer_invisible(cp) ? ND_NORM_F_INVISIBLE : 0;
        if (n->pool_len + len > POOL_MAX) { /* cannot happen with Unicode 15 */
            free(n);
            return -ENOMEM;
        }
        n->table[cp] = MULTI_FLAG | (len << 24) | flags | n->pool_len;
        for (unsigned i = 0; i < len; i++)
            n->pool[n->pool_len++] = seq[i];
    }
    int rc = fold_traditional(n);
    if (rc == 0)
        rc = build_lookalikes(n);
    if (rc < 0) {
        free(n);
        return rc;
    }
    *out = n;
    return 0;
}

void nd_normalizer_destroy(nd_normalizer *n)
{
    free(n);
}
