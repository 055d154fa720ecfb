/* question.h - one step from a text to what the registry compares: the
 * text tokenized once for both stages (nd_sketch_query()), its SimHash
 * fingerprint from the same tokens, the "too short" refusal, and the
 * stage-2 fields of the check (both modes' anchors to probe, its own
 * mode's anchors to store, the sketches now or when the verdict needs
 * them, the encoded sketch a registration stores). /check-original
 * (api/check.c) and every import line (import.c: POST /import and
 * `neardup import`) prepare their checks here, so that a text gets the
 * same question whichever way it comes in.
 *
 * Two shapes: nd_question, what the registry compares, plain values
 * without a pointer (it could go over a wire to a shard), and
 * nd_question_scratch, beside it, the thread's sketches of the text (the
 * query sketch made lazily, the token positions for passages), pointers
 * into a worker's scratch. nd_check_req (request.h) is what was parsed.
 *
 * The tools are per thread (the caller's): nothing here allocates beyond
 * what the fingerprint and sketch scratches grow to once. */
#ifndef ND_QUESTION_H
#define ND_QUESTION_H

#include <stdbool.h>
#include <stdint.h>

#include "fingerprint.h"
#include "fold.h"
#include "request.h"
#include "sketch.h"

typedef struct nd_pair_scratch nd_pair_scratch; /* pair.h */

/* The version of a registered document: its fingerprint and its sketch
 * (anchors and verification signature), a question's. Records of any
 * other version are stale: kept, never compared, upgraded by
 * re-registering the same text. */
#define ND_RECORD_VERSION ND_FINGERPRINT_VERSION "+" ND_SKETCH_VERSION

/* A thread's tools for making questions: all borrowed from the caller,
 * who keeps them per thread. */
typedef struct nd_question_tools {
    const nd_fingerprinter *fp;
    const nd_sketcher *sk;
    nd_fp_scratch *fps;
    nd_sk_scratch *sks;    /* the text's tokens and sketch, until the next text */
    nd_anchors *anchors;   /* [2]: both modes' anchors of the text, likewise */
    nd_pair_scratch *pair; /* the third stage's scratch (pair.h); NULL: the
                            * questions made get no third stage */
} nd_question_tools;

/* Both modes' query anchors: its own mode's grow with its length
 * (ND_ANCHORS_SCALED, at most ND_ANCHORS_MAX), the other's ND_ANCHORS_QUERY. */
#define ND_QUESTION_PROBE_MAX (ND_ANCHORS_MAX + ND_ANCHORS_QUERY)

/* What the registry compares for one text: values only. Stage 1 (the
 * fingerprint, nd_question_make()) and stage 2 (the anchors and, for a
 * registration, the encoded sketch; nd_question_sketch()). The sketches
 * themselves stay in the scratch (nd_question_scratch). */
typedef struct nd_question {
    uint64_t simhash;
    uint32_t chars;         /* characters after normalization */
    uint8_t text_hash[16];  /* nd_request_text_hash() of the text: its identity */
    nd_integrity integrity; /* what was read differently from its characters */
    uint32_t nprobe;        /* both modes' anchors, probed in the anchor index */
    uint32_t probe[ND_QUESTION_PROBE_MAX];
    uint32_t nstore; /* its own mode's anchors, best first: stored (scaled) */
    uint32_t store[ND_ANCHORS_MAX];
    /* nd_sketch_encode() of its own mode's sketch, stored by a
     * registration; 0 bytes for a query. */
    uint32_t sketch_enc_len;
    uint8_t sketch_enc[ND_SKETCH_ENCODED_MAX];
} nd_question;

/* Beside a question, for the call that asks it: the text's sketches in
 * the asking thread's scratch (borrowed, valid until the thread sketches
 * another text). sketch NULL: no sketches, every SimHash hit within k
 * counts, unverified (kind near_duplicate, figures 0). When lazy is not
 * NULL the sketches are not made yet: nd_registry_check() calls
 * nd_sketch_query_finish(lazy, sketch) before reading them, only when
 * there are candidates to verify. passages: the scratch that sketched
 * the text (for passages), or NULL. */
typedef struct nd_question_scratch {
    nd_sketch *sketch; /* [2]: [word, char] (nd_sketch_text_modes()) */
    nd_sk_scratch *lazy;
    const nd_sk_scratch *passages;
    /* The third stage (align.h): the sketcher and the thread's pair
     * scratch, which tokenizes the candidates' kept texts; A's tokens are
     * passages' or, when that is NULL, text[0..text_len) (or, NULL, the
     * request's text) tokenized into the pair scratch. third NULL: no
     * third stage. */
    const nd_sketcher *sk;
    nd_pair_scratch *third;
    const char *text;
    size_t text_len;
} nd_question_scratch;

/* The answer of nd_question_make() for a text shorter than min_chars
 * (q->chars says how long it is): the check is not asked. */
#define ND_QUESTION_TOO_SHORT 1

/* Fingerprints rq->text[0..rq->text_len): tokenizes it once into
 * t->sks (t->anchors: both modes' anchors), sets q->simhash, q->chars and
 * q->text_hash, and *mode (the text's own sketch mode, for
 * nd_question_sketch()). Returns 0, ND_QUESTION_TOO_SHORT (fewer than
 * min_chars characters after normalization), -EILSEQ (not UTF-8) or
 * -ENOMEM. */
int nd_question_make(nd_question_tools *t, const nd_check_req *rq, nd_question *q,
                     unsigned min_chars, int *mode);

/* Gives q its stage-2 fields from the text nd_question_make() last
 * tokenized with t (mode: what it returned; -1: tokenize rq->text again,
 * as after a wait that let the tools serve other texts), and fills *qs
 * with sketch (the caller's [2], per thread or per line). The sketches
 * are made now when rq->do_register (a registration stores one, encoded
 * into q->sketch_enc) or when eager, else when the verdict finds
 * candidates (qs->lazy). qs->passages is t->sks unless no_passages.
 * Returns 0 or -errno (-EILSEQ, -ENOMEM). */
int nd_question_sketch(nd_question_tools *t, const nd_check_req *rq, nd_question *q, int mode,
                       bool eager, bool no_passages, nd_sketch *sketch, nd_question_scratch *qs);

#endif
