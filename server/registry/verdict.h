/* verdict.h - the answer to a check (verdict.c): the documents that match
 * a question, verified by their sketches (nd_match), the verdict, and the
 * answer with the action that follows from the evidence among them
 * (nd_check_res), with the caller's scratch for computing it. Public
 * through registry.h, which includes it; how the registry finds the
 * answer is verdict_internal.h's. */
#ifndef ND_VERDICT_H
#define ND_VERDICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anchor_index.h"
#include "index.h"
#include "share.h"
#include "sketch.h"

/* A registered document (docs.h): a check's answer holds references to
 * them; opaque to whoever includes only this. */
typedef struct nd_doc nd_doc;

/* The kinds of a source below the partial-copy bar (share.h), beyond the
 * sketch's nd_match_kind: part of a compilation and one large quotation
 * (both evidence), and a smaller quotation (listed, never evidence). */
#define ND_MATCH_COMPILED 5
#define ND_MATCH_QUOTATION 6
#define ND_MATCH_QUOTED 7

/* A match kind's name: nd_match_kind_name()'s, or "compiled",
 * "quotation", "quoted" (static). */
const char *nd_verdict_kind_name(unsigned kind);

/* A document found near the query and verified. */
typedef struct nd_match {
    nd_doc *doc;        /* new reference */
    unsigned distance;  /* SimHash distance to the query (may exceed k: a
                         * candidate found through the anchor index) */
    double resemblance; /* estimated Jaccard of the shingle sets */
    double containment; /* estimated share of the query's shingles in doc */
    float coverage;     /* the third stage's (align.h): the query's share */
    float spread;       /* aligned, and the lower spread of the two sides;
                         * 0 and 0 when not aligned */
    float gap;          /* a gray-zone candidate's max gap / sampled values */
    uint8_t kind;       /* nd_match_kind */
    uint8_t flags;      /* private to the registry */
    uint32_t rank;      /* private: the order stage 1 found it in */
    bool same_account;  /* doc has the request's (non-empty) account */
    bool evidence;      /* makes the article not original: not the same
                         * account and doc->status active (the claim rule) */
    /* The action its claim gives the request's account when it is
     * evidence (nd_claim_action(); enum nd_action), else publish. */
    uint8_t action;
    bool show_source, may_modify;
    float share; /* its own share of the query's code points (share.h); -1:
                  * not counted (beyond ND_SHARE_SOURCES_MAX) */
} nd_match;

/* The verdict of a check. */
enum nd_verdict {
    ND_VERDICT_ORIGINAL = 0,  /* no verified match registered earlier */
    ND_VERDICT_DUPLICATE = 1, /* an identical or near-duplicate one */
    ND_VERDICT_PARTIAL = 2,   /* only partial copies (the query is mostly in one) */
    /* No source reaches the partial-copy bar (share.h): */
    ND_VERDICT_COMPILATION = 3, /* several together hold much of the query */
    ND_VERDICT_QUOTATION = 4,   /* one holds a large part of it */
};

/* The source among m[0..n): the earliest claim (the smallest
 * registered_at_us) of the matches marked evidence (claim.h's rule), or
 * NULL when none is. Borrowed (m's reference); does not allocate. */
nd_doc *nd_match_source(const nd_match *m, size_t n);

/* "original", "duplicate", "partial_copy", "compilation", "quotation". */
const char *nd_verdict_name(int verdict);

/* What the document under a registration's id differs from it in, when
 * nothing is registered (nd_check_res.conflict with -EEXIST). The same
 * text, account and meta again is no conflict: the first answer again. */
enum nd_conflict {
    ND_CONFLICT_NONE = 0,
    ND_CONFLICT_TEXT = 1,    /* another text (registering or not) */
    ND_CONFLICT_ACCOUNT = 2, /* the same text under another account, or
                              * with an account where there was none, or
                              * none where there was one */
    ND_CONFLICT_META = 3,    /* the same text and account, and a meta
                              * that is not the document's (none is {});
                              * a registration without meta brings none */
};

/* What differs, as the answers name it: "text", "account", "meta" (NULL
 * for none); and the sentence that says it ("this id is registered with a
 * different text", ...). Static strings. */
const char *nd_conflict_field(int conflict);
const char *nd_conflict_message(int conflict);

/* The answer, and the caller's scratch for computing it. */
typedef struct nd_check_res {
    /* Scratch, provided by the caller (per thread): hits, matches and keys
     * of cap entries (cap >= max_matches + max_verify; more anchor
     * candidates than fit are held in a heap copy), anchor hits of acap
     * (ND_ANCHOR_HITS_MAX: every hit a query can find; fewer: only the
     * best acap are considered), passages of passages_cap. */
    nd_index_hit *hits;
    nd_match *matches;
    int64_t *keys;
    size_t cap;
    nd_anchor_hit *ahits;
    size_t acap;
    nd_passage *passages;
    size_t passages_cap;
    /* The figures of a registration's first pass, reused by its second
     * (memo.h): scratch, or NULL (every candidate verified under the
     * registry's writer). */
    struct nd_memo *memo;
    /* Answer. */
    bool original;    /* no evidence: no verified match registered earlier
                       * with another account and an active claim */
    bool registered;  /* the id holds this text now (just or earlier) */
    bool existing;    /* the id held this text before this call */
    bool truncated;   /* more matches than returned */
    bool review;      /* a rewrite was found and the registry's rewrite
                       * verdict is review: listed, not evidence; a human
                       * should look */
    unsigned aligned; /* candidates the third stage aligned (0..
                       * ND_REWRITE_CANDIDATES) */
    size_t nmatches;  /* matches[0..nmatches): the evidence first, then
                         * the other matches (same account, revoked); each
                         * group identical, then near duplicates, then
                         * partial copies; each by resemblance (highest
                         * first), distance, time */
    int verdict;      /* enum nd_verdict, from the evidence only; original
                         * == (verdict == ORIGINAL) */
    size_t npassages; /* partial copy: the query's spans found in the best
                         * partial match (passages[0..min(npassages, cap)));
                         * compilation, quotation: the union of the
                         * evidence's spans */
    /* How much of the query is someone else's (share.h): the union of the
     * passages of the listed sources the claim rule lets be evidence, in
     * the query's code points; estimated when a source's passages come
     * from a sampled sketch (a sketch holds every shingle only up to 512)
     * or a rewrite's (its reworded stretches share few shingles).
     * share_counted: the union was computed (some source listed). */
    double copied_share;
    bool share_estimated;
    bool share_counted;
    nd_doc *doc; /* the document under this id (new reference) or NULL */
    /* The action for the request's account (claim.h's rule):
     * publish when original; else source is the earliest evidence (new
     * reference; it may lie beyond the matches returned), and show_source /
     * may_modify are set with ND_ACTION_REPRINT (false otherwise). */
    int action; /* enum nd_action */
    nd_doc *source;
    bool show_source;
    bool may_modify;
    /* With ND_REG_WAIT for a new document whose verdict waits on a pending
     * one (no document holds the id): the time it was judged at, so that
     * only documents registered before it could be evidence (INT64_MAX:
     * the clock's, any). 0 for any other wait (the id's change in flight). */
    int64_t wait_at_us;
    /* With -EEXIST: what the id's document differs in (enum nd_conflict). */
    int conflict;
} nd_check_res;

/* Releases the references held by res and empties it (the scratch stays). */
void nd_check_res_release(nd_check_res *res);

#endif
