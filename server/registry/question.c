/* question.c - a text made into what the registry compares (question.h). */
#include "question.h"

#include <errno.h>
#include <string.h>

int nd_question_make(nd_question_tools *t, const nd_check_req *rq, nd_question *q,
                     unsigned min_chars, int *mode)
{
    nd_sketch_info info;
    *mode = nd_sketch_query(t->sk, t->sks, rq->text, rq->text_len, t->anchors, ND_ANCHORS_SCALED,
                            &info);
    if (*mode < 0)
        return *mode;
    q->integrity = info.integrity;
    nd_fingerprint_result fr;
    nd_fp_tokens tk;
    int rc = nd_sketch_fp_tokens(t->sks, &tk);
    if (rc == 0)
        rc = nd_fingerprint_tokens(t->fp, t->fps, &tk, &fr);
    if (rc == -ENOTSUP) /* a tuned fingerprinter that keeps URLs: from the text */
        rc = nd_fingerprint(t->fp, t->fps, rq->text, rq->text_len, &fr);
    if (rc < 0)
        return rc;
    q->chars = fr.chars;
    if (fr.chars < min_chars)
        return ND_QUESTION_TOO_SHORT;
    q->simhash = fr.simhash;
    nd_request_text_hash(rq->text, rq->text_len, q->text_hash);
    return 0;
}

int nd_question_sketch(nd_question_tools *t, const nd_check_req *rq, nd_question *q, int mode,
                       bool eager, bool no_passages, nd_sketch *sketch, nd_question_scratch *qs)
{
    if (mode < 0)
        mode = nd_sketch_query(t->sk, t->sks, rq->text, rq->text_len, t->anchors, ND_ANCHORS_SCALED,
                               NULL);
    if (mode < 0)
        return mode;
    qs->sketch = sketch;
    qs->lazy = NULL;
    if (rq->do_register || eager) {
        int rc = nd_sketch_query_finish(t->sks, sketch);
        if (rc < 0)
            return rc;
    } else {
        qs->lazy = t->sks;
    }
    /* Both modes' anchors, so that a document of either mode is found: all
     * of its own mode's (as many as a document of its length is stored
     * under), the other mode's first ND_ANCHORS_QUERY (a bottom-m prefix). */
    uint32_t n = 0;
    for (int m = 0; m < 2; m++) {
        uint32_t want = m == mode ? ND_ANCHORS_MAX : ND_ANCHORS_QUERY;
        for (uint32_t i = 0; i < t->anchors[m].n && i < want; i++)
            q->probe[n++] = t->anchors[m].a[i];
    }
    q->nprobe = n;
    const nd_anchors *own = &t->anchors[mode];
    uint32_t ns = own->n < ND_ANCHORS_MAX ? own->n : ND_ANCHORS_MAX;
    memcpy(q->store, own->a, ns * sizeof(uint32_t));
    q->nstore = ns;
    qs->passages = no_passages ? NULL : t->sks;
    qs->sk = t->sk;
    qs->third = t->pair;
    qs->text = NULL;
    qs->text_len = 0;
    q->sketch_enc_len = 0;
    if (rq->do_register)
        q->sketch_enc_len = (uint32_t)nd_sketch_encode(&sketch[mode], q->sketch_enc,
                                                       ND_SKETCH_ENCODED_MAX);
    return 0;
}
