/* memo.h - a check's figures against its candidates, kept between the two
 * passes of a registration (nd_registry_check()): the first runs without
 * the registry's writer, the second under it reuses what the first found
 * for every document still a candidate. A document's sketch and kept text
 * never change (an amendment is a new nd_doc), so its figures against one
 * question never do; the memo holds a reference to each document it
 * remembers, so that no other document can take its address meanwhile.
 * The caller's per-thread scratch, like nd_check_res's arrays: it
 * allocates only when made. */
#ifndef ND_MEMO_H
#define ND_MEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct nd_doc nd_doc; /* docs.h: references held, opaque here */

/* Stage 3's candidates at most (verdict.c's ND_REWRITE_CANDIDATES). */
#define ND_MEMO_THIRD_MAX 4

/* One candidate's stage-2 figures (nd_match's). */
typedef struct nd_memo_entry {
    nd_doc *doc; /* reference held */
    double resemblance, containment;
    float gap;
    uint8_t kind;
    float reach; /* the bound's min_containment it was compared down to
                  * (the listing's, a source's or the gray zone's) */
    bool gray;   /* a gray-zone candidate */
} nd_memo_entry;

/* Stage 3's outcome for one set of picked candidates, in order. */
typedef struct nd_memo_third {
    size_t npick;
    nd_doc *pick[ND_MEMO_THIRD_MAX]; /* references held */
    bool rewrite[ND_MEMO_THIRD_MAX];
    float coverage[ND_MEMO_THIRD_MAX], spread[ND_MEMO_THIRD_MAX];
    unsigned aligned;
} nd_memo_third;

enum nd_memo_mode {
    ND_MEMO_OFF = 0, /* neither kept nor used */
    ND_MEMO_RECORD,  /* the first pass: keep what is computed */
    ND_MEMO_USE,     /* the second: reuse it */
};

typedef struct nd_memo {
    int mode;         /* enum nd_memo_mode */
    nd_memo_entry *e; /* [cap], sorted by doc once recorded */
    size_t n, cap;
    bool have_third;
    nd_memo_third third;
} nd_memo;

/* Makes a memo of cap entries (more candidates than that are simply not
 * remembered). Returns NULL on allocation failure; free with
 * nd_memo_destroy(). */
nd_memo *nd_memo_create(size_t cap);
void nd_memo_destroy(nd_memo *memo);

/* Remembers d's figures (a new reference to d) when recording and not
 * full. */
void nd_memo_put(nd_memo *memo, nd_doc *d, double resemblance, double containment, float gap,
                 uint8_t kind, float reach, bool gray);

/* Ends the first pass: sorts the entries for nd_memo_get() and turns to
 * ND_MEMO_USE. */
void nd_memo_seal(nd_memo *memo);

/* d's entry when using and remembered, else NULL (borrowed). */
const nd_memo_entry *nd_memo_get(const nd_memo *memo, const nd_doc *d);

/* Keeps stage 3's outcome (new references to the picks) when recording. */
void nd_memo_put_third(nd_memo *memo, const nd_memo_third *third);

/* Stage 3's outcome for the picks pick[0..npick) in that order, when
 * using and the first pass picked the same ones; else NULL. */
const nd_memo_third *nd_memo_get_third(const nd_memo *memo, nd_doc *const *pick, size_t npick);

/* Releases every reference and empties the memo (mode off). */
void nd_memo_clear(nd_memo *memo);

#endif
