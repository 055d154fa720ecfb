/* question.c - a text made into what the registry compares (question.h). */
#include "question.h"

#include <errno.h>
#include <string.h>

int nd_question_make(nd_question_tools *t, nd_check_req *rq, unsigned min_chars, int *mode)
{
    *mode = nd_sketch_query(t->sk, t->sks, rq->text, rq->text_len, t->anchors, ND_ANCHORS_QUERY,
                            NULL);
    if (*mode < 0)
        return *mode;
    nd_fingerprint_result fr;
    nd_fp_tokens tk;
    int rc = nd_sketch_fp_tokens(t->sks, &tk);
    if (rc == 0)
        rc = nd_fingerprint_tokens(t->fp, t->fps, &tk, &fr);
    if (rc == -ENOTSUP) /* a tuned fingerprinter that keeps URLs: from the text */
        rc = nd_fingerprint(t->fp, t->fps, rq->text, rq->text_len, &fr);
    if (rc < 0)
        return rc;
    rq->chars = fr.chars;
    if (fr.chars < min_chars)
        return ND_QUESTION_TOO_SHORT;
    rq->simhash = fr.simhash;
    return 0;
}

int nd_question_sketch(nd_question_tools *t, nd_check_req *rq, int mode, bool eager,
                       bool no_passages, const nd_question_room *room)
{
    if (mode < 0)
        mode = nd_sketch_query(t->sk, t->sks, rq->text, rq->text_len, t->anchors, ND_ANCHORS_QUERY,
                               NULL);
    if (mode < 0)
        return mode;
    rq->sketch = room->sketch;
    rq->sketch_lazy = NULL;
    rq->sketch_out = NULL;
    if (rq->do_register || eager) {
        int rc = nd_sketch_query_finish(t->sks, room->sketch);
        if (rc < 0)
            return rc;
    } else {
        rq->sketch_lazy = t->sks;
        rq->sketch_out = room->sketch;
    }
    uint32_t n = 0; /* both modes' anchors: a document of either mode is found */
    for (int m = 0; m < 2; m++)
        for (uint32_t i = 0; i < t->anchors[m].n && i < ND_ANCHORS_QUERY; i++)
            room->probe[n++] = t->anchors[m].a[i];
    rq->anchors = room->probe;
    rq->nanchors_query = n;
    const nd_anchors *own = &t->anchors[mode];
    uint32_t ns = own->n < ND_ANCHORS_STORE ? own->n : ND_ANCHORS_STORE;
    if (room->store_anchors)
        memcpy(room->store_anchors, own->a, ns * sizeof(uint32_t));
    rq->store_anchors = room->store_anchors ? room->store_anchors : own->a;
    rq->nanchors_store = ns;
    rq->scratch = no_passages ? NULL : t->sks;
    rq->sketch_enc = NULL;
    rq->sketch_enc_len = 0;
    if (rq->do_register) {
        rq->sketch_enc_len = nd_sketch_encode(&room->sketch[mode], room->enc,
                                              ND_SKETCH_ENCODED_MAX);
        rq->sketch_enc = rq->sketch_enc_len ? room->enc : NULL;
    }
    return 0;
}
