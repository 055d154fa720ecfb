/* pair.h - two texts compared as /check-original compares a submitted
 * text A with a registered document B: each text made into its question
 * (question.h: the same tokenization, fingerprint and folds), A's sketch
 * in B's mode against B's own sketch (nd_sketch_compare()), the kind by
 * the verdict's rules (nd_match_classify(); same text: identical), what
 * the folds read in each, and the copied passages on both sides
 * (lib/passages.h). POST /compare and `neardup compare` both call
 * nd_pair_compare() and write its answer with nd_compare_write()
 * (api/compare.h), so they give the same figures.
 *
 * The caller brings A's tools (nd_question_tools, per thread: A's tokens
 * stay in t->sks afterwards) and an nd_pair_scratch for B (per thread). */
#ifndef ND_PAIR_H
#define ND_PAIR_H

#include <stddef.h>
#include <stdint.h>

#include "passages.h"
#include "question.h"
#include "sketch.h"

/* Most passage pairs an answer carries. */
#define ND_PAIR_PASSAGES 64

/* The figures of a pair: plain values. */
typedef struct nd_pair {
    uint64_t simhash_a, simhash_b;
    uint32_t chars_a, chars_b; /* characters after normalization */
    unsigned distance;         /* SimHash distance */
    nd_sketch_estimate e;      /* A (in B's mode) against B */
    nd_match_kind kind;        /* ND_MATCH_NONE: not a match */
    uint8_t mode;              /* B's own mode: the one compared in */
    uint32_t shingles_a, shingles_b;
    nd_integrity integrity_a, integrity_b;
    size_t npairs; /* passages in all; pairs[0..min(npairs, ND_PAIR_PASSAGES)) */
    nd_passage_pair pairs[ND_PAIR_PASSAGES];
} nd_pair;

typedef struct nd_pair_scratch nd_pair_scratch;

/* Creates B's scratch (free with nd_pair_scratch_destroy()). Returns 0 or
 * -ENOMEM. */
int nd_pair_scratch_create(nd_pair_scratch **out);

/* Frees it; NULL is allowed. */
void nd_pair_scratch_destroy(nd_pair_scratch *s);

/* Compares a[0..la) (submitted) with b[0..lb) (registered) under params p
 * into *out. Returns 0, or -EILSEQ (*which: 0 for a, 1 for b: not valid
 * UTF-8) or -ENOMEM. Allocates only when the scratches grow. */
int nd_pair_compare(nd_question_tools *t, nd_pair_scratch *s, const char *a, size_t la,
                    const char *b, size_t lb, const nd_verdict_params *p, nd_pair *out, int *which);

/* The passages of the text A last asked with t (its tokens in t->sks,
 * both modes: nd_question_make()) found in the registered text b[0..lb),
 * which s sketches in its own mode: writes at most cap into out, sets
 * *total. For a listed match of a check. Returns 0, -EILSEQ or -ENOMEM. */
int nd_pair_passages(const nd_question_tools *t, nd_pair_scratch *s, const char *b, size_t lb,
                     nd_passage_pair *out, size_t cap, size_t *total);

#endif
