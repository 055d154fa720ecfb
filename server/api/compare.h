/* compare.h - POST /compare (compare.c): what /check-original would say of
 * a submitted text against one other text or registered document, and the
 * one writer of that answer, which `neardup compare` prints too. */
#ifndef ND_COMPARE_H
#define ND_COMPARE_H

#include "corpus.h"
#include "reply.h"

/* Writes the answer for p as a JSON object: "distance", "similarity",
 * "resemblance", "containment", "containment_reverse", "kind" (null when
 * not a match), "copied_share" (A's part inside the passages, as a
 * match's share in /check-original), "mode" ("word" / "character"), "simhash_a/b", "chars_a/b",
 * "shingles_a/b", "shared", "sampled_a/b", "shift", "core_found",
 * "core_n", "max_gap" (nd_sketch_max_gap()), "alignment" (the third
 * stage's figures, see
 * nd_compare_write_alignment()), "integrity_a/b", "passages" ([{start, end,
 * source_start, source_end}]: for kind rewrite the aligned stretches, else
 * the copied passages) and "passages_truncated". Writes into w only. */
void nd_compare_write(nd_reply *w, const nd_pair *p);

/* Parts of it that /check-original writes too: what the folds read in a
 * text ({"invisible", "lookalike", "annotation", "reordered", "traditional",
 * "script"}), and n passages on both sides as an array. Write into w only. */
void nd_compare_write_integrity(nd_reply *w, const nd_integrity *in);
void nd_compare_write_pairs(nd_reply *w, const nd_passage_pair *p, size_t n);

/* The third stage's figures as an object: "coverage_a/b", "spread_a/b",
 * "long_gaps_a/b", "tokens_a/b", "segments" (align.h). Writes into w
 * only. */
void nd_compare_write_alignment(nd_reply *w, const nd_alignment *al);

#endif
