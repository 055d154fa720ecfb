/* verdict_internal.h - how the registry finds the answer to a question
 * (verdict.c): candidates from the SimHash index and the anchor index,
 * each verified against its sketch, the verdict and the action that follow
 * from the evidence among them; the documents a restored claim predates.
 * Internal to the registry (registry.c calls it with the tables as
 * docs_internal.h describes); other modules ask through
 * nd_registry_check(). */
#ifndef ND_VERDICT_INTERNAL_H
#define ND_VERDICT_INTERNAL_H

#include "docs_internal.h"
#include "question.h"
#include "request.h"
#include "verdict.h"

/* Answers the check rq asking the question q: candidates from the SimHash
 * index within rq->k and from the anchor index (q's probe anchors), each
 * verified with the sketches in qs (stage 2; qs NULL or without sketches:
 * unverified);
 * res->matches gets the verified documents (new references, released by
 * nd_check_res_release()): live ones (a document waiting for its first
 * commit is never listed), except self and anything registered at or
 * after before_us (INT64_MAX: none). Each is marked same_account /
 * evidence (the claim rule); the evidence comes first, and the verdict,
 * original and the action (with its source, the earliest evidence, a new
 * reference) come from the evidence only. Sorted and cut to max_matches
 * (then truncated is set); the verdict and the source are exact whatever
 * the cut (every SimHash hit is verified, however many). locked: the
 * caller holds the writer (then the tables are stable without the read
 * lock). When wait_on is not NULL and no evidence was found but a pending
 * document verified as one, *wait_on gets it (a borrowed pointer, valid
 * while the writer is held): the caller waits for its commit and decides
 * again. Allocates only when the candidates outgrow res's arrays. Returns
 * 0 or -errno (-ENOMEM, a store read error). */
int nd_verdict_find(nd_registry *reg, const nd_check_req *rq, const nd_question *q,
                    const nd_question_scratch *qs, const nd_doc *self, int64_t before_us,
                    nd_check_res *res, bool locked, nd_doc **wait_on);

/* The documents a restore of d now predates (nd_claim_change.predated):
 * the SimHash hits within k of d that are live, active, of another
 * account than d's, registered after d and verified as matches of d
 * (their stored sketch compared with d's as a check of their text would,
 * or the same text); params NULL: the defaults. Writer held. *out gets
 * new references (the caller releases each and frees the array), earliest
 * first, at most ND_STORE_SUPERSEDE_MAX (more: *truncated). Returns 0 or
 * -errno. */
int nd_verdict_find_predated(nd_registry *reg, nd_doc *d, unsigned k,
                             const nd_verdict_params *params, nd_doc ***out, size_t *nout,
                             bool *truncated);

/* Empties the answer res (no matches, no documents, original, publish)
 * without releasing anything: for an answer not yet given, or released. */
void nd_verdict_clear(nd_check_res *res);

#endif
