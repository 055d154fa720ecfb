/* fingerprint.h - the neardup SimHash: text in, 64-bit fingerprint out.
 *
 * The algorithm is specified in proto/fingerprint.md; proto/vectors.jsonl holds
 * test vectors. Any change that alters an output must bump ND_FINGERPRINT_VERSION.
 *
 * Threading: an nd_fingerprinter is immutable after nd_fingerprinter_create()
 * and may be shared by any number of threads. Each thread brings its own
 * nd_fp_scratch (per-call working memory, reused across calls so that the hot
 * path does not allocate once it has grown to the largest text seen). */
#ifndef ND_FINGERPRINT_H
#define ND_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

/* The algorithm's version; stored with every registered fingerprint. */
#define ND_FINGERPRINT_VERSION "nd-simhash-2"

typedef struct nd_fingerprinter nd_fingerprinter;
typedef struct nd_fp_scratch nd_fp_scratch;

typedef struct nd_fingerprint_result {
    uint64_t simhash;  /* the 64-bit fingerprint */
    uint32_t chars;    /* characters after normalization (see fingerprint.md) */
    uint32_t features; /* number of feature occurrences that were hashed */
} nd_fingerprint_result;

/* Builds the fingerprinter (the normalization tables with the folds, 30-50
 * ms). Returns 0 and sets *out to a new object the caller frees with
 * nd_fingerprinter_destroy(), -ENOMEM, or -ENOENT when OpenCC's t2s data or
 * ICU's confusables cannot be loaded. */
int nd_fingerprinter_create(nd_fingerprinter **out);

/* Frees a fingerprinter; NULL is allowed. */
void nd_fingerprinter_destroy(nd_fingerprinter *fp);

/* Creates per-thread scratch memory. Returns 0 and a new object (free with
 * nd_fp_scratch_destroy()), or -ENOMEM. */
int nd_fp_scratch_create(nd_fp_scratch **out);

/* Frees scratch memory; NULL is allowed. */
void nd_fp_scratch_destroy(nd_fp_scratch *scratch);

/* Fingerprints the UTF-8 text [text, text+len). The text need not be
 * NUL-terminated and may contain NUL bytes (they are control characters).
 * Returns 0 and fills *out; -EILSEQ if the text is not valid UTF-8 (then *out
 * is untouched); -ENOMEM if the scratch could not grow. Allocates only when
 * the scratch must grow. An empty text gives simhash 0, chars 0, features 0. */
int nd_fingerprint(const nd_fingerprinter *fp, nd_fp_scratch *scratch, const char *text, size_t len,
                   nd_fingerprint_result *out);

/* A text's tokens as steps 1..3 of fingerprint.md make them, in text order:
 * each word's hash (XXH3-64 of its normalized UTF-8, cut at 256 bytes) and
 * each CJK token's code point (after Hangul composition) with its hash
 * (XXH3-64 of its UTF-8). nd_fingerprint() and the sketch both read a text
 * through lib/tokenizer.h, so the sketch's word-mode tokens are exactly
 * these (nd_sketch_fp_tokens()): a text tokenized once gives both. */
typedef struct nd_fp_tokens {
    const uint64_t *hash; /* [n]: each token's hash */
    const uint32_t *cjk;  /* [n]: a CJK token's code point, 0 for a word */
    size_t n;
    uint32_t chars; /* characters after normalization (as nd_fingerprint_result) */
} nd_fp_tokens;

/* Fingerprints a text from its tokens: *out is exactly what nd_fingerprint()
 * gives for the text they came from. Returns 0; -ENOTSUP if fp does not skip
 * URLs and markup (a tuning parameter; the tokens skip them): then use
 * nd_fingerprint(); -ENOMEM if the scratch could not grow (*out untouched).
 * Allocates only when the scratch must grow. */
int nd_fingerprint_tokens(const nd_fingerprinter *fp, nd_fp_scratch *scratch,
                          const nd_fp_tokens *tokens, nd_fingerprint_result *out);

/* Writes the fingerprint as 16 lowercase hex digits plus NUL into buf[17]. */
void nd_simhash_format(uint64_t simhash, char buf[17]);

/* Parses exactly 16 hex digits (either case, no prefix) from str.
 * Returns 0 and sets *out, or -EINVAL. */
int nd_simhash_parse(const char *str, size_t len, uint64_t *out);

/* Hamming distance between two fingerprints. */
static inline unsigned nd_simhash_distance(uint64_t a, uint64_t b)
{
    return (unsigned)__builtin_popcountll(a ^ b);
}

#endif
