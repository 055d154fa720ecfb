/* align.h - the verdict's third stage: how closely a submitted text A
 * follows a registered text B token by token, for a rewrite (洗稿) that
 * changed too many words for the shingle sets of stage 2 (sketch.h) but
 * kept the original's order, sentence after sentence.
 *
 * Input: the token hashes of both texts in one sketch mode
 * (nd_sketch_tokens(): words, or characters in character mode), in text
 * order. The algorithm (proto/align.md, version ND_ALIGN_VERSION):
 * - Seeds: the token bigrams (A[i], A[i+1]) that occur in B. B's bigrams
 *   go into a table of positions: per bucket grouped by bigram (a stable
 *   merge sort), ascending within one, so that a lookup finds exactly the
 *   bigram's positions however many bigrams share its bucket.
 * - Chains: A is walked left to right. A seed continues the current chain
 *   when it lies at most ND_ALIGN_GAP tokens after the chain's last seed in
 *   A, after it in B, and on a diagonal (j - i) within ND_ALIGN_DRIFT of
 *   the last seed's (an edit inserts or deletes a few tokens); of several,
 *   the nearest diagonal, then the earliest. Otherwise the seed may start
 *   a new chain: of the ND_ALIGN_START_CANDIDATES positions of the bigram
 *   around where the copy would go on (the last chain's diagonal; before
 *   any chain, i's share of B), the one whose exact run is the longest
 *   (ties: the nearest). While the current chain may still go on (its
 *   last seed at most ND_ALIGN_GAP tokens back), only a run of
 *   ND_ALIGN_HOLD tokens starts a new one: a chance seed off the diagonal
 *   is skipped.
 * - A chain of fewer than ND_ALIGN_MIN_SEEDS seeds is a chance match and
 *   is dropped. The tokens of the kept chains' seeds are the aligned
 *   tokens of each side.
 * - coverage: aligned tokens / tokens, per side. spread: each side cut
 *   into ND_ALIGN_WINDOWS equal windows, the coverage of the window at
 *   rank ND_ALIGN_SPREAD_RANK from the lowest (a rewrite is aligned all
 *   along both texts; two texts sharing a template or a licence are
 *   aligned densely in the shared blocks and not at all elsewhere).
 * - long gaps: the share of each side's tokens in unaligned runs of at
 *   least long_gap tokens (ND_ALIGN_LONG_GAP_WORD / _CHAR). A rewrite's
 *   edits are words and phrases, so its gaps are short; two pages of one
 *   template differ in whole sentences (their subjects), so theirs are
 *   long, however much of the template they align.
 *
 * Measured on the dev set (proto/align.md): a fifth of the tokens edited
 * leaves coverage >= 0.79 and spread >= 0.6; two fifths, spread >= 0.35
 * for 96 %; of 1,000 negative pairs (templates and licences among them)
 * none is a rewrite.
 *
 * Cost: O((|A| + |B|) log |B|): building sorts each bucket (O(|B| log |B|)
 * at worst); each step of the walk is a few binary searches and at most
 * 2 * ND_ALIGN_DRIFT + 1 or ND_ALIGN_START_CANDIDATES probes of
 * extensions of at most ND_ALIGN_RUN_MAX tokens, however often a bigram
 * repeats or however many bigrams share a bucket. Pure: no I/O, no globals; an nd_aligner is per-thread
 * scratch that grows to the largest texts seen (nd_align() allocates only
 * when it must grow). */
#ifndef ND_ALIGN_H
#define ND_ALIGN_H

#include <stddef.h>
#include <stdint.h>

/* The version of the algorithm and its constants (proto/align.md). */
#define ND_ALIGN_VERSION "nd-align-1"

#define ND_ALIGN_GAP 8               /* most A tokens from a chain's last seed */
#define ND_ALIGN_DRIFT 4             /* most diagonal change within a chain */
#define ND_ALIGN_MIN_SEEDS 3         /* fewer: a chance match, dropped */
#define ND_ALIGN_START_CANDIDATES 16 /* B positions tried to start a chain */
#define ND_ALIGN_RUN_MAX 32          /* longest exact run measured at a start */
#define ND_ALIGN_HOLD 4              /* exact run that may break an open chain */
#define ND_ALIGN_SPLIT 3             /* unaligned tokens that split a segment */
#define ND_ALIGN_WINDOWS 10          /* windows per side for the spread */
#define ND_ALIGN_SPREAD_RANK 2       /* 0-based rank from the lowest window */

#define ND_ALIGN_LONG_GAP_WORD 6     /* a long gap: words */
#define ND_ALIGN_LONG_GAP_CHAR 10    /* a long gap: characters (character mode) */

/* The rewrite rule's defaults (nd_align_is_rewrite()). */
#define ND_ALIGN_MIN_COVERAGE 0.5
#define ND_ALIGN_MIN_SPREAD 0.35
#define ND_ALIGN_MAX_LONG_GAPS_A 0.12 /* the submitted text (a re-poster adds sentences) */
#define ND_ALIGN_MAX_LONG_GAPS_B 0.09 /* the registered text */
/* Across Chinese scripts (one text Traditional, the other Simplified) a
 * rewrite must cover this much: the zh-CN and zh-TW editions of one help
 * page, translated apart, align as a rewrite does (coverage up to 0.82 in
 * the dev corpus), and the platform judges such editions apart. */
#define ND_ALIGN_MIN_COVERAGE_XSCRIPT 0.85

/* An aligned stretch: a part of a kept chain without ND_ALIGN_SPLIT
 * unaligned tokens in a row on either side, tokens [a_start, a_end) of A
 * and [b_start, b_end) of B (its first seed to its last seed's second
 * token). */
typedef struct nd_align_segment {
    uint32_t a_start, a_end;
    uint32_t b_start, b_end;
} nd_align_segment;

/* The figures of an alignment: plain values. */
typedef struct nd_alignment {
    uint32_t na, nb;               /* tokens of each side */
    uint32_t aligned_a, aligned_b; /* aligned tokens of each side */
    double coverage_a, coverage_b; /* aligned / tokens (0 for no tokens) */
    double spread_a, spread_b;     /* see above; the coverage for a side of
                                    * fewer than 2 * ND_ALIGN_WINDOWS tokens */
    double long_gaps_a, long_gaps_b; /* share of tokens in long unaligned runs */
    uint32_t segments;             /* kept chains */
} nd_alignment;

typedef struct nd_aligner nd_aligner;

/* Creates scratch (free with nd_aligner_destroy()). Returns 0 or -ENOMEM. */
int nd_aligner_create(nd_aligner **out);

/* Frees it; NULL is allowed. */
void nd_aligner_destroy(nd_aligner *al);

/* Aligns a[0..na) with b[0..nb) into *out (long_gap: the shortest
 * unaligned run counted as a long gap); writes at most cap segments
 * (in A order) into seg (may be NULL with cap 0) and sets *total to how
 * many there are when total is not NULL. Returns 0, or -ENOMEM (the
 * scratch could not grow; *out zeroed) or -E2BIG (a side of more than
 * UINT32_MAX / 2 tokens). */
int nd_align(nd_aligner *al, const uint64_t *a, size_t na, const uint64_t *b, size_t nb,
             unsigned long_gap, nd_alignment *out, nd_align_segment *seg, size_t cap,
             size_t *total);

/* A's marks of the last nd_align() with al: mark[x] is 1 when A's token x
 * is aligned; *n gets A's token count (0 when a side had fewer than 2
 * tokens: nothing was aligned). Borrowed until the next call. */
const uint8_t *nd_align_marks(const nd_aligner *al, size_t *n);

/* The rewrite rule: A follows B all along both texts (coverage of A at
 * least min_coverage, the spread of both sides at least min_spread) with
 * few long gaps (at most max_long_gaps_a of A's tokens, max_long_gaps_b of
 * B's). Returns 1 or 0. */
int nd_align_is_rewrite(const nd_alignment *al, double min_coverage, double min_spread,
                        double max_long_gaps_a, double max_long_gaps_b);

#endif
