/* api_worker.h - a worker thread's scratch for the handlers of
 * server/api/ (made by nd_api_worker_init(), reused from request to
 * request, never shared between threads). Internal to server/api/. */
#ifndef ND_API_WORKER_H
#define ND_API_WORKER_H

#include "answer.h"
#include "fingerprint.h"
#include "sketch.h"

#define API_PASSAGES ND_REPLY_MAX_PASSAGES
#define API_ANCHOR_HITS ND_ANCHOR_HITS_MAX /* anchor-index hits: all a query can find */
/* Anchor candidates one check verifies, at most: those sharing two anchors
 * or more, and max_verify sharing one. */
#define API_ANCHOR_CANDIDATES (ND_ANCHOR_HITS_MAX / ND_VERDICT_MIN_SHARED + ND_VERIFY_MAX)

/* The listed matches of a check that carry their passages on both sides
 * (each read from its kept text): the first this many. */
#define API_PAIRED_MATCHES 16

/* One listed match's passages on both sides (check.c). */
typedef struct api_match_pairs {
    bool kept;    /* the document's text was kept: the passages are known */
    bool omitted; /* not paired: over the check's read budget (pair.h) */
    size_t n;     /* passages in all; p[0..min(n, ND_PAIR_PASSAGES)) */
    nd_passage_pair p[ND_PAIR_PASSAGES];
} api_match_pairs;

typedef struct api_worker {
    nd_api_scratch sh; /* reply buffer and parser (answer.c): first */
    nd_fp_scratch *fps;
    nd_sk_scratch *sks;  /* sketch of the text being checked, for passages */
    nd_sketch sketch[2]; /* the text's, in both modes (word, char) */
    nd_anchors anchors[2];
    nd_index_hit *hits;
    nd_match *matches;
    int64_t *keys;
    size_t cap;
    nd_memo *memo; /* a registration's first-pass figures (memo.h) */
    nd_anchor_hit ahits[API_ANCHOR_HITS];
    nd_pair_scratch *pair; /* the other text of a pair (compare.c, check.c) */
    nd_pair pair_out;      /* its figures (compare.c) */
    api_match_pairs match_pairs[API_PAIRED_MATCHES]; /* a check's listed matches' (check.c) */
} api_worker;

/* Answers the failure rc of fingerprinting field (fingerprint.c). */
void fingerprint_failed(nd_req *r, int rc, const char *field);

/* The calling worker's scratch (borrowed). */
static inline api_worker *aw_of(nd_req *r)
{
    return nd_worker_user(r->worker);
}

#endif
