/* passages.h - copied passages on both sides: the stretches two texts
 * share, as pairs of code-point spans, one in the submitted text A and one
 * in the source text B.
 *
 * Both texts are shingled as the sketch shingles them (sketch.h: the same
 * folds, tokens and weights, in ONE mode, the source's: a text is compared
 * in the registered document's mode), so a pair's two spans read the same
 * after folding: Traditional read as Simplified, look-alike letters, width,
 * case and invisible characters as the sketch reads them.
 *
 * The algorithm, on the two shingle sequences (hashes in text order):
 * - B's shingles go into a table from hash to their positions (a chain per
 *   hash, in text order).
 * - A is walked left to right. At A's shingle i the candidates are the
 *   position in B right after the last run (a copy goes on where it was)
 *   and the first ND_PAIRING_CANDIDATES positions of the hash's chain; each
 *   is extended while the hashes of A and B agree, the longest kept (ties:
 *   the continuation, then the earliest). A run found, i jumps past it;
 *   none, i moves by one. Each step costs at most CANDIDATES + 1 extensions
 *   no longer than the run it keeps, so the walk is O(|A| + |B|) however
 *   often one shingle repeats.
 * - Runs that follow each other in A and go on forward in B within a small
 *   gap (an edited word breaks a shingle width of shingles) are merged into
 *   one passage; a passage of fewer shingles than a chance match makes
 *   (ND_PAIRING_MIN_WORD / _CHAR) is dropped unless it covers a whole text.
 * - Each passage: [start, end) in A from its first shingle's start to its
 *   last one's end; [source_start, source_end) likewise in B.
 *
 * Pairs come out sorted by start in A. The A spans of two pairs may
 * overlap by less than a shingle where the copy's order changes; their B
 * spans may be anywhere (a paragraph moved, or copied twice).
 *
 * Pure: no I/O, no globals. An nd_pairing is per thread scratch that grows
 * to the largest source seen; nd_passage_pairs() allocates only when it
 * must grow. */
#ifndef ND_PASSAGES_H
#define ND_PASSAGES_H

#include <stddef.h>
#include <stdint.h>

#include "sketch.h"

/* Candidate positions in B tried per step (beyond the continuation). */
#define ND_PAIRING_CANDIDATES 16
/* Most shingles between two runs, on either side, for them to merge. */
#define ND_PAIRING_GAP 12
/* Fewest shingles a passage must match, unless it covers a text: word
 * mode 5 shingles (7 words), character mode 12 (16 characters). Shorter
 * runs are common phrases ("which can be used to", "Debian 软件" between
 * unrelated texts of tests/integration/texts; in character mode, where a
 * Latin letter is a token, single English words and phrases such as
 * "Documentation" or "the following" between unrelated dev pairs). */
#define ND_PAIRING_MIN_WORD 5
#define ND_PAIRING_MIN_CHAR 12

/* A copied passage on both sides: code points [start, end) of A and
 * [source_start, source_end) of B, each of its text as submitted. */
typedef struct nd_passage_pair {
    uint32_t start, end;
    uint32_t source_start, source_end;
} nd_passage_pair;

typedef struct nd_pairing nd_pairing;

/* Creates scratch (free with nd_pairing_destroy()). Returns 0 or -ENOMEM. */
int nd_pairing_create(nd_pairing **out);

/* Frees scratch; NULL is allowed. */
void nd_pairing_destroy(nd_pairing *p);

/* The passages of a[0..na) found in b[0..nb) (both of mode `mode`,
 * ND_SKETCH_MODE_WORD or _CHAR, e.g. from nd_sketch_shingles()): writes at
 * most cap of them into out (sorted by start) and sets *total to how many
 * there are (may exceed cap). Returns 0, or -ENOMEM (when the scratch
 * could not grow; *total 0). */
int nd_passage_pairs(nd_pairing *p, const nd_shingle *a, size_t na, const nd_shingle *b, size_t nb,
                     unsigned mode, nd_passage_pair *out, size_t cap, size_t *total);

#endif
