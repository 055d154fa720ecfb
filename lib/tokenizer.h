/* tokenizer.h - a text read as the fingerprint and the sketch read it: the
 * folds applied once, then a stream of tokens.
 *
 * Steps (proto/fingerprint.md steps 0..3, proto/sketch.md "Tokens"):
 *   0. the folds before the normalizer (lib/fold.h: overrides in reading
 *      order, readings in brackets dropped, look-alike letters read as
 *      their twin);
 *   1. URLs, markdown images and link targets skipped (lib/markup.h);
 *   2. each code point through the normalizer (lib/normalizer.h: NFKD of the
 *      case fold, marks and ignorables dropped, Traditional read as
 *      Simplified, invisibles dropped or blanked), and the characters that
 *      are not space counted;
 *   3. tokens: a maximal run of word characters is one word token (the
 *      XXH3-64 of its normalized UTF-8, cut at 256 bytes), each CJK
 *      character one CJK token (Hangul jamo composed; the XXH3-64 of its
 *      UTF-8); everything else separates.
 * This is the one place in lib/ where a text is folded and tokenized:
 * fingerprint.c sums the tokens into the SimHash, sketch.c shingles them.
 *
 * Threading: an nd_tokenizer is immutable after nd_tokenizer_create() and
 * may be shared by any number of threads; each thread brings its own
 * nd_tokens (caller storage, grown to the largest text seen, then reused:
 * nd_tokenize() does not allocate once it has grown). */
#ifndef ND_TOKENIZER_H
#define ND_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fold.h"

typedef struct nd_tokenizer nd_tokenizer;

/* A token's weight in a shingle (proto/sketch.md): a word 5, a CJK token
 * (or, in the character stream, any token) 3. */
#define ND_TOKEN_W_WORD 5
#define ND_TOKEN_W_CJK 3

/* A token stream, one array per field (the hashes of consecutive tokens
 * are contiguous, so a shingle hash reads them in place). start, end and w
 * are written only with ND_TOKENIZE_SPANS. */
typedef struct nd_token_stream {
    uint64_t *h;           /* [n]: each token's hash */
    uint32_t *start, *end; /* [n]: the source code points [start, end) it came from */
    /* [n] Word stream: a CJK token's code point, 0 for a word. Character
     * stream: a CJK token's index in the word stream + 1, 0 for a letter
     * or digit. */
    uint32_t *cjk;
    uint8_t *w; /* [n]: ND_TOKEN_W_* */
    size_t n, cap;
} nd_token_stream;

/* The CJK tokens of the Basic Multilingual Plane counted by code point
 * (ND_TOKENIZE_CJK_COUNTS): tf[cp] occurrences (saturating at 65535) of
 * each code point seen[0..n), in order of first occurrence. The arrays of
 * ND_NORM_BMP entries are allocated at the first such token; the consumer
 * resets tf[] of the code points seen to 0 (and n to 0) when done. */
typedef struct nd_cjk_counts {
    uint16_t *tf;
    uint16_t *seen;
    size_t n;
    uint32_t occurrences; /* the tokens counted (not saturating) */
    uint32_t listed;      /* the CJK tokens listed in the word stream instead (beyond the BMP) */
} nd_cjk_counts;

/* Allocates c's arrays (tf zeroed), once: at the first token counted.
 * Returns 0 or -ENOMEM (c unchanged). */
int nd_cjk_counts_ready(nd_cjk_counts *c);

/* What a text read gives beside its tokens. */
typedef struct nd_text_stats {
    uint32_t code_points; /* of the source text (spans are in these) */
    uint32_t chars;       /* normalized characters that are not space (fingerprint.md) */
    uint32_t cjk_cps;     /* CJK code points after normalization */
    uint32_t word_cps;    /* word code points (letters, digits) after normalization */
    nd_integrity integrity; /* what the folds read differently (ND_TOKENIZE_SPANS only) */
} nd_text_stats;

/* A thread's tokens of the last text read (caller storage). */
typedef struct nd_tokens {
    nd_token_stream word; /* every token, in text order */
    /* With ND_TOKENIZE_CHARS and a text that may hold CJK: every letter,
     * digit and CJK character a token of weight 3 (the sketch's character
     * mode); else empty (n 0). */
    nd_token_stream chr;
    nd_cjk_counts cjk; /* with ND_TOKENIZE_CJK_COUNTS */
    nd_text_stats stats;
    char *fold; /* the folds' copy of the text (lib/fold.h) */
    size_t fold_cap;
} nd_tokens;

/* nd_tokenize() flags. */
enum {
    /* Spans and weights of every token, and the integrity counts (the
     * sketch's reading). */
    ND_TOKENIZE_SPANS = 1,
    /* Also the character stream (with ND_TOKENIZE_SPANS). */
    ND_TOKENIZE_CHARS = 2,
    /* CJK tokens of the BMP are counted in tokens.cjk instead of listed in
     * the word stream (without ND_TOKENIZE_SPANS): for a consumer of
     * unigrams, to which their order does not matter. */
    ND_TOKENIZE_CJK_COUNTS = 4,
    /* URLs and link markup are read as text (step 1 off; a tuning
     * parameter of the fingerprint). */
    ND_TOKENIZE_KEEP_MARKUP = 8,
};

/* Builds the tokenizer (the normalizer's tables with the folds, 30-50 ms).
 * Returns 0 and sets *out to a new object (free with
 * nd_tokenizer_destroy()), -ENOMEM, or -ENOENT when OpenCC's t2s data or
 * ICU's confusables cannot be loaded. */
int nd_tokenizer_create(nd_tokenizer **out);

/* Frees a tokenizer; NULL is allowed. */
void nd_tokenizer_destroy(nd_tokenizer *tk);

/* Empties caller storage for nd_tokenize() (allocates nothing). */
void nd_tokens_init(nd_tokens *t);

/* Frees what nd_tokenize() allocated into t; t may then be reused after
 * nd_tokens_init(). */
void nd_tokens_finish(nd_tokens *t);

/* Reads the UTF-8 text [text, text+len) (not NUL-terminated; NUL is a
 * control character) into t: t->word (and t->chr, t->cjk by flags) and
 * t->stats. Returns 0; -EILSEQ if the text is not valid UTF-8 (t's tokens
 * are then partial); -ENOMEM if t could not grow. Allocates only when t
 * must grow. */
int nd_tokenize(const nd_tokenizer *tk, nd_tokens *t, const char *text, size_t len,
                unsigned flags);

#endif
