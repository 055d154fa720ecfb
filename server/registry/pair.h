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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "align.h"
#include "passages.h"
#include "question.h"
#include "registry_options.h"
#include "sketch.h"

/* Most passage pairs an answer carries. */
#define ND_PAIR_PASSAGES 64

/* The figures of a pair: plain values. */
typedef struct nd_pair {
    uint64_t simhash_a, simhash_b;
    uint32_t chars_a, chars_b; /* characters after normalization */
    unsigned distance;         /* SimHash distance */
    nd_sketch_estimate e;      /* A (in B's mode) against B */
    uint32_t max_gap;          /* nd_sketch_max_gap() of the pair */
    nd_match_kind kind;        /* ND_MATCH_NONE: not a match */
    uint8_t mode;              /* B's own mode: the one compared in */
    uint32_t shingles_a, shingles_b;
    nd_integrity integrity_a, integrity_b;
    nd_alignment align; /* the third stage: A's tokens against B's (align.h) */
    double copied_share; /* A's part inside the passages (a rewrite's: at
                          * least align.coverage_a), as a match's share */
    /* passages in all; pairs[0..min(npairs, ND_PAIR_PASSAGES)): for kind
     * rewrite the aligned stretches, else the copied passages */
    size_t npairs;
    nd_passage_pair pairs[ND_PAIR_PASSAGES];
} nd_pair;

typedef struct nd_pair_scratch nd_pair_scratch;

/* Creates B's scratch (free with nd_pair_scratch_destroy()). Returns 0 or
 * -ENOMEM. */
int nd_pair_scratch_create(nd_pair_scratch **out);

/* Frees it; NULL is allowed. */
void nd_pair_scratch_destroy(nd_pair_scratch *s);

/* The defaults: ND_ALIGN_MIN_COVERAGE, ND_ALIGN_MIN_SPREAD. */
void nd_rewrite_params_default(nd_rewrite_params *p);

/* Whether an alignment is a rewrite under p, for texts A and B with what
 * the folds read in each (their scripts: across Traditional and
 * Simplified, min_coverage_xscript holds). */
bool nd_rewrite_is(const nd_alignment *al, const nd_rewrite_params *p, const nd_integrity *a,
                   const nd_integrity *b);

/* The coverage that rule asks of texts A and B (min_coverage, or across
 * scripts min_coverage_xscript). */
double nd_rewrite_min_coverage(const nd_rewrite_params *p, const nd_integrity *a,
                               const nd_integrity *b);

/* Compares a[0..la) (submitted) with b[0..lb) (registered) under params p
 * (rw: the third stage's; NULL: off) into *out: kind rewrite when stage 2
 * lists nothing and the alignment is a rewrite. Returns 0, or -EILSEQ (*which: 0 for a, 1 for b: not valid
 * UTF-8) or -ENOMEM. Allocates only when the scratches grow. */
int nd_pair_compare(nd_question_tools *t, nd_pair_scratch *s, const char *a, size_t la,
                    const char *b, size_t lb, const nd_verdict_params *p,
                    const nd_rewrite_params *rw, nd_pair *out, int *which);

/* The third stage for one candidate: the registered text b[0..lb),
 * tokenized by s in its own mode, aligned with A's tokens of that mode,
 * read from a (a scratch that sketched A with both modes, as a check's
 * question does) or, when a is NULL, from A as nd_pair_hold_a() last
 * tokenized it. *al gets the figures, *integrity_b (when not NULL) what
 * the folds read in b; at most cap aligned stretches (code
 * points on both sides) go into out (may be NULL with cap 0), *total (not
 * NULL) gets how many there are. Returns 0, -EILSEQ (b is not UTF-8),
 * -EINVAL (no A) or -ENOMEM. Allocates only when the scratch grows. */
int nd_pair_align(nd_pair_scratch *s, const nd_sketcher *sk, const nd_sk_scratch *a, const char *b,
                  size_t lb, nd_alignment *al, nd_integrity *integrity_b, nd_passage_pair *out,
                  size_t cap, size_t *total);

/* The third stage's discount of what other registered documents explain
 * (verdict.c): up to ND_PAIR_MARK_SLOTS candidates' marks of A's tokens,
 * kept per check. */
#define ND_PAIR_MARK_SLOTS 4
/* A token aligned with this many other documents is shared (boilerplate). */
#define ND_PAIR_SHARED_BY 2

/* Keeps A's marks of the last nd_pair_align() in slot (0..
 * ND_PAIR_MARK_SLOTS-1). Returns 0, -EINVAL (no alignment made or a bad
 * slot) or -ENOMEM. */
int nd_pair_keep_marks(nd_pair_scratch *s, unsigned slot);

/* Of A's tokens marked in slot, those marked in fewer than
 * ND_PAIR_SHARED_BY slots j with others[j] true (j < nslots): how many;
 * *na gets A's tokens. */
size_t nd_pair_unique_marks(const nd_pair_scratch *s, unsigned slot, const bool *others,
                            unsigned nslots, size_t *na);

/* How many of A's tokens slots i and j both mark (0 when they were kept
 * for different texts or modes). */
size_t nd_pair_marks_overlap(const nd_pair_scratch *s, unsigned i, unsigned j);

/* Tokenizes A's text a[0..la) with both modes into s's own A scratch and
 * sketches it, as a check's question does, for a caller whose scratch no
 * longer holds A (an import line judged after its batch was sketched):
 * *out gets that scratch (borrowed from s, valid until s holds another A),
 * ready for nd_pair_align(), nd_pair_passages() and nd_sketch_passages();
 * nd_pair_align(a = NULL) reads it too. Returns 0, -EILSEQ or -ENOMEM. */
int nd_pair_hold_a(nd_pair_scratch *s, const nd_sketcher *sk, const char *a, size_t la,
                   const nd_sk_scratch **out);

/* The passages of the text A last asked with t (its tokens in t->sks,
 * both modes: nd_question_make()) found in the registered text b[0..lb),
 * which s sketches in its own mode: writes at most cap into out, sets
 * *total. For a listed match of a check. Returns 0, -EILSEQ or -ENOMEM. */
int nd_pair_passages(const nd_question_tools *t, nd_pair_scratch *s, const char *b, size_t lb,
                     nd_passage_pair *out, size_t cap, size_t *total);

/* What one request may read of registered texts to pair them with a
 * submitted text (a check's listed matches, POST /compare's id_b), in
 * bytes of kept text: ND_PAIR_READ_FACTOR times the submitted text's bytes
 * plus ND_PAIR_READ_BASE, for all the sources of the request together. A
 * source that does not fit in what is left is not paired (its passages
 * are omitted), so that a short request never reads and re-shingles many
 * large kept texts (audit G02: 16 kept texts of 1 MiB behind a 495-byte
 * check). As the third stage bounds its reads (verdict.c: at most 4 texts
 * of at most 2.5 times the query), this bounds what a request costs by its
 * own size; any document of the dev corpus (at most 50 KB) fits. */
#define ND_PAIR_READ_FACTOR 16
#define ND_PAIR_READ_BASE (256u * 1024u)

/* A request's read budget (caller storage, nd_pair_budget_init()). */
typedef struct nd_pair_budget {
    size_t left; /* bytes of kept text the request may still pair */
} nd_pair_budget;

/* Sets *b to the budget of a submitted text of len bytes. */
void nd_pair_budget_init(nd_pair_budget *b, size_t len);

/* Whether a source of at least `at_least` bytes may fit in what is left:
 * asked before its text is read, with what is known of it (a registered
 * document's characters after normalization). Takes nothing. */
bool nd_pair_budget_may_read(const nd_pair_budget *b, size_t at_least);

/* Takes len bytes (a source's text once read) from *b. Returns true when
 * they fit, then the source is paired; else false and nothing is left (its
 * reading was paid: the sources after it are not read). */
bool nd_pair_budget_take(nd_pair_budget *b, size_t len);

/* The passages of the text A last asked with t against itself: for a
 * registered document with A's very text (an identical match), whose text
 * need not be read. Returns 0, -EINVAL (t->sks holds no text) or -ENOMEM. */
int nd_pair_passages_same(const nd_question_tools *t, nd_pair_scratch *s, nd_passage_pair *out,
                          size_t cap, size_t *total);

#endif
