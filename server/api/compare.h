/* compare.h - POST /compare (compare.c): what /check-original would say of
 * a submitted text against one other text or registered document, and the
 * one writer of that answer, which `neardup compare` prints too. */
#ifndef ND_COMPARE_H
#define ND_COMPARE_H

#include "pair.h"
#include "reply.h"

/* Writes the answer for p as a JSON object: "distance", "similarity",
 * "resemblance", "containment", "containment_reverse", "kind" (null when
 * not a match), "mode" ("word" / "character"), "simhash_a/b", "chars_a/b",
 * "shingles_a/b", "shared", "sampled_a/b", "shift", "core_found",
 * "core_n", "integrity_a/b", "passages" ([{start, end, source_start,
 * source_end}]) and "passages_truncated". Writes into w only. */
void nd_compare_write(nd_reply *w, const nd_pair *p);

#endif
