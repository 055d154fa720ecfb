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
 * Every output code point carries a class that drives tokenization.
 * The table for the Basic Multilingual Plane is computed once, from utf8proc,
 * when the normalizer is created; other planes are mapped on demand. */
#ifndef ND_NORMALIZER_H
#define ND_NORMALIZER_H

#include <stdint.h>

/* Class of a normalized code point. */
enum nd_char_class {
    ND_CHAR_SPACE = 1, /* Z*, C*: white space, controls, unassigned */
    ND_CHAR_PUNCT = 2, /* P*, S*: punctuation, symbols, emoji */
    ND_CHAR_WORD = 3,  /* letters, numbers, Mc of space-separated scripts */
    ND_CHAR_CJK = 4,   /* Han, Kana, Hangul, Thai, Lao, Khmer, Myanmar... */
};

/* A normalized code point: class in bits 24..27, code point in bits 0..20. */
#define ND_NORM_CP(e) ((e)&0x1FFFFFu)
#define ND_NORM_CLASS(e) ((e) >> 24)

/* Longest output for one input code point (U+FDFA maps to 18). */
#define ND_NORM_MAX 32

#define ND_NORM_BMP 0x10000u
#define ND_NORM_POOL_MAX (64u * 1024u)
/* Table entry flag: bits 24..30 hold a length and 0..23 a pool offset. */
#define ND_NORM_MULTI 0x80000000u

/* Read-only after nd_normalizer_create(); the layout is public only so that
 * nd_normalizer_map() can be inlined on the hot path. */
typedef struct nd_normalizer {
    uint32_t table[ND_NORM_BMP]; /* one entry inline, or ND_NORM_MULTI */
    uint32_t pool_len;
    uint32_t pool[ND_NORM_POOL_MAX];
} nd_normalizer;

/* Maps a code point outside the BMP (computed with utf8proc) into buf. */
unsigned nd_normalizer_map_slow(uint32_t cp, uint32_t buf[ND_NORM_MAX]);

/* Builds the tables. Returns 0 and a new normalizer (free with
 * nd_normalizer_destroy()), or -ENOMEM. Takes a few milliseconds. */
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
        *seq = &n->pool[*e & 0xFFFFFFu];
        return (*e >> 24) & 0x7Fu;
    }
    *seq = buf;
    return nd_normalizer_map_slow(cp, buf);
}

/* The class an already-normalized code point belongs to. */
enum nd_char_class nd_char_classify(uint32_t cp);

#endif
