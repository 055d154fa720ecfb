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
#define ND_NORM_CP(e) ((e) & 0x1FFFFFu)
#define ND_NORM_CLASS(e) ((e) >> 24)

/* Longest output for one input code point (U+FDFA maps to 18). */
#define ND_NORM_MAX 32

typedef struct nd_normalizer nd_normalizer;

/* Builds the tables. Returns 0 and a new normalizer (free with
 * nd_normalizer_destroy()), or -ENOMEM. Takes a few milliseconds. */
int nd_normalizer_create(nd_normalizer **out);

/* Frees a normalizer; NULL is allowed. */
void nd_normalizer_destroy(nd_normalizer *n);

/* Maps cp. Returns the number of output entries (0 when cp is dropped) and
 * sets *seq to them: borrowed from the normalizer, or written into buf when
 * cp is outside the BMP. Never allocates; safe from any thread. */
unsigned nd_normalizer_map(const nd_normalizer *n, uint32_t cp,
                           uint32_t buf[ND_NORM_MAX], const uint32_t **seq);

/* The class an already-normalized code point belongs to. */
enum nd_char_class nd_char_classify(uint32_t cp);

#endif
