/* question.h - one step from a text to what the registry compares: the
 * text tokenized once for both stages (nd_sketch_query()), its SimHash
 * fingerprint from the same tokens, the "too short" refusal, and the
 * stage-2 fields of the check (both modes' anchors to probe, its own
 * mode's anchors to store, the sketches now or when the verdict needs
 * them, the encoded sketch a registration stores). /check-original (api.c)
 * and every import line (import.c: POST /import and `neardup import`)
 * prepare their checks here, so that a text gets the same question
 * whichever way it comes in.
 *
 * The tools are per thread (the caller's): nothing here allocates beyond
 * what the fingerprint and sketch scratches grow to once. */
#ifndef ND_QUESTION_H
#define ND_QUESTION_H

#include "fingerprint.h"
#include "request.h"
#include "sketch.h"

/* A thread's tools for making questions: all borrowed from the caller,
 * who keeps them per thread. */
typedef struct nd_question_tools {
    const nd_fingerprinter *fp;
    const nd_sketcher *sk;
    nd_fp_scratch *fps;
    nd_sk_scratch *sks;  /* the text's tokens and sketch, until the next text */
    nd_anchors *anchors; /* [2]: both modes' anchors of the text, likewise */
} nd_question_tools;

/* Where the stage-2 fields of a question go (caller's storage, pointed at
 * by the check): sketch[2], probe[2 * ND_ANCHORS_QUERY],
 * enc[ND_SKETCH_ENCODED_MAX]; store_anchors[ND_ANCHORS_MAX] to copy the
 * stored anchors into, or NULL to point the check at the tools' anchors
 * (then valid until the tools make another question). */
typedef struct nd_question_room {
    nd_sketch *sketch;
    uint32_t *probe;
    uint32_t *store_anchors;
    uint8_t *enc;
} nd_question_room;

/* The answer of nd_question_make() for a text shorter than min_chars
 * (rq->chars says how long it is): the check is not asked. */
#define ND_QUESTION_TOO_SHORT 1

/* Fingerprints rq->text[0..rq->text_len): tokenizes it once into
 * t->sks (t->anchors: both modes' anchors), sets rq->simhash and rq->chars
 * and *mode (the text's own sketch mode, for nd_question_sketch()).
 * Returns 0, ND_QUESTION_TOO_SHORT (fewer than min_chars characters after
 * normalization), -EILSEQ (not UTF-8) or -ENOMEM. */
int nd_question_make(nd_question_tools *t, nd_check_req *rq, unsigned min_chars, int *mode);

/* Gives rq its stage-2 fields from the text nd_question_make() last
 * tokenized with t (mode: what it returned; -1: tokenize rq->text again,
 * as after a wait that let the tools serve other texts), in room. The
 * sketches are made now when rq->do_register (a registration stores one,
 * encoded into room->enc) or when eager, else when the verdict finds
 * candidates (rq->sketch_lazy). rq->scratch is set to t->sks (passages)
 * unless no_passages. Returns 0 or -errno (-EILSEQ, -ENOMEM). */
int nd_question_sketch(nd_question_tools *t, nd_check_req *rq, int mode, bool eager,
                       bool no_passages, const nd_question_room *room);

#endif
