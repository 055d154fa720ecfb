/* normalizer.h - per-code-point text normalization for fingerprinting.
 *
 * Each input code point maps to zero or more output code points: the full
 * compatibility decomposition (NFKD) of its case folding, with default
 * ignorable code points and nonspacing/enclosing marks (Mn, Me) removed.
 * Precomposed Hangul syllables are kept whole, as NFKC keeps them. Because
 * canonical equivalents share one NFKD, texts that are canonically or
 * compatibly equivalent (NFC/NFD, full-/half-width, ligatures, case) map to
 * the same sequence, and since marks are dropped no reordering is needed.
 *
 * Reading as a reader sees (proto/fingerprint.md, "Folds"): a Traditional
 * Han character whose OpenCC t2s conversion is one other character reads as
 * that character; a default-ignorable code point (ICU), a format character
 * (Cf: U+FFF9..FFFB, the Egyptian hieroglyph format controls) other than the
 * visible prepended concatenation marks, and U+1D159 MUSICAL SYMBOL NULL
 * NOTEHEAD are dropped; the Hangul fillers and the blank Braille pattern
 * U+2800 read as a space.
 *
 * Every output code point carries a class that drives tokenization.
 * The table for the Basic Multilingual Plane is computed once, from utf8proc,
 * ICU and OpenCC, when the normalizer is created; other planes are mapped on
 * demand. */
#ifndef ND_NORMALIZER_H
#define ND_NORMALIZER_H

#include <stdbool.h>
#include <stdint.h>

/* Class of a normalized code point. */
enum nd_char_class {
    ND_CHAR_SPACE = 1, /* Z*, C*: white space, controls, unassigned */
    ND_CHAR_PUNCT = 2, /* P*, S*: punctuation, symbols, emoji */
    ND_CHAR_WORD = 3,  /* letters, numbers, Mc of space-separated scripts */
    ND_CHAR_CJK = 4,   /* Han, Kana, Hangul, Thai, Lao, Khmer, Myanmar... */
};

/* A normalized code point: class in bits 24..27, code point in bits 0..20,
 * what the reading changed in bits 21..23 (ND_NORM_F_*). */
#define ND_NORM_CP(e) ((e)&0x1FFFFFu)
#define ND_NORM_CLASS(e) ((e) >> 24)

/* Entry flags (a table entry, single or ND_NORM_MULTI, and a mapped entry):
 * INVISIBLE: the source code point renders as nothing (dropped: a length-0
 *   ND_NORM_MULTI entry) or as a blank (read as a space);
 * TRAD: a Traditional Han character read as its Simplified form;
 * HAN: a Han character (after the fold). */
#define ND_NORM_F_INVISIBLE (1u << 21)
#define ND_NORM_F_TRAD (1u << 22)
#define ND_NORM_F_HAN (1u << 23)

/* Longest output for one input code point (U+FDFA maps to 18). */
#define ND_NORM_MAX 32

#define ND_NORM_BMP 0x10000u
#define ND_NORM_POOL_MAX (64u * 1024u)
/* Table entry flag: bits 24..30 hold a length and 0..15 a pool offset
 * (bits 21..23 the ND_NORM_F_* flags of the source code point). */
#define ND_NORM_MULTI 0x80000000u

/* The look-alike tables cover code points below this (Latin, Greek,
 * Cyrillic, Armenian; lib/fold.h). */
#define ND_LK_END 0x0590u
/* Look-alike table entry: script in bits 0..2 (ND_LK_*), bit 3 set when the
 * letter has a twin in another script (confusable), bit 4 set for a
 * letter, mark or digit (continues a word), bit 5 (ND_LK_BASE) for a
 * look-alike of an ASCII letter within the Latin script. */
enum { ND_LK_NONE = 0, ND_LK_LATIN = 1, ND_LK_CYRILLIC = 2, ND_LK_GREEK = 3, ND_LK_ARMENIAN = 4 };
#define ND_LK_SCRIPTS 5
#define ND_LK_CONFUSABLE 8u
#define ND_LK_WORD 16u
/* Look-alike table entry bit 5: a look-alike within the Latin script
 * (nd_normalizer.lk_base_cp). */
#define ND_LK_BASE 32u
/* Room for the look-alikes within the Latin script (50 with ICU 72). */
#define ND_LK_BASE_MAX 128
/* U+0131 LATIN SMALL LETTER DOTLESS I: a look-alike of i except in Turkic
 * text (lib/fold.h). */
#define ND_LK_DOTLESS_I 0x0131u

/* Read-only after nd_normalizer_create(); the layout is public only so that
 * nd_normalizer_map() can be inlined on the hot path. */
typedef struct nd_normalizer {
    uint32_t table[ND_NORM_BMP]; /* one entry inline, or ND_NORM_MULTI */
    uint32_t pool_len;
    uint32_t pool[ND_NORM_POOL_MAX];
    uint8_t lk[ND_LK_END]; /* look-alike class of each code point */
    /* A confusable letter's twin in each script (0: none): the letter of
     * that script with the same UTS #39 skeleton, of the same case if any. */
    uint16_t lk_twin[ND_LK_END][ND_LK_SCRIPTS];
    /* Look-alikes within the Latin script (lib/fold.h): lk_base_cp[i], in
     * ascending order, reads as the ASCII letter lk_base_to[i]. */
    uint32_t lk_base_n;
    uint16_t lk_base_cp[ND_LK_BASE_MAX];
    uint8_t lk_base_to[ND_LK_BASE_MAX];
} nd_normalizer;

/* Maps a code point (computed with utf8proc and ICU) into buf, without the
 * Traditional fold. */
unsigned nd_normalizer_map_slow(uint32_t cp, uint32_t buf[ND_NORM_MAX]);

/* Maps a code point outside the BMP into buf: nd_normalizer_map_slow() with
 * the Traditional fold applied to its BMP Han outputs. */
unsigned nd_normalizer_map_astral(const struct nd_normalizer *n, uint32_t cp,
                                  uint32_t buf[ND_NORM_MAX]);

/* Whether cp renders as nothing or as a blank (a default-ignorable code
 * point, a format character (Cf) that is not a prepended concatenation
 * mark, U+1D159 MUSICAL SYMBOL NULL NOTEHEAD, or the blank Braille
 * pattern): what the INVISIBLE flag marks. */
bool nd_normalizer_invisible(uint32_t cp);

/* Builds the tables. Returns 0 and a new normalizer (free with
 * nd_normalizer_destroy()), -ENOMEM, or -ENOENT when OpenCC's t2s.json or
 * ICU's confusables cannot be loaded. Takes a few tens of milliseconds. */
int nd_normalizer_create(nd_normalizer **out);

/* Frees a normalizer; NULL is allowed. */
void nd_normalizer_destroy(nd_normalizer *n);

/* Maps cp. Returns the number of output entries (0 when cp is dropped) and
 * sets *seq to them: borrowed from the normalizer, or written into buf when
 * cp is outside the BMP. Never allocates; safe from any thread. */
static inline unsigned nd_normalizer_map(const nd_normalizer *n, uint32_t cp,
                                         uint32_t buf[ND_NORM_MAX], const uint32_t **seq)
{
    if (cp < ND_NORM_BMP) {
        const uint32_t *e = &n->table[cp];
        if (!(*e & ND_NORM_MULTI)) {
            *seq = e;
            return 1;
        }
        *seq = &n->pool[*e & 0xFFFFu];
        return (*e >> 24) & 0x7Fu;
    }
    *seq = buf;
    return nd_normalizer_map_astral(n, cp, buf);
}

/* The class an already-normalized code point belongs to. */
enum nd_char_class nd_char_classify(uint32_t cp);

#endif
