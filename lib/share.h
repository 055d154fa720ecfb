/* share.h - how much of a text is someone else's: the copied share (the
 * union of the passages every source holds, in the text's own code
 * points), each source's own share, and the verdicts WeChat's rules name
 * for sources that stay below the partial-copy bar: a compilation
 * (整合/拼凑: several sources, none large, together much of the text) and
 * a quotation (大篇幅引用: one large quotation). Pure functions over values
 * (spans per source in, figures and kinds out): no registry memory, no
 * allocation, so that a shard router merging S shards' answers runs the
 * same step (proto/sketch.md section 8 has the rule and its measurement).
 * Pure (lib/): returns values, never logs or allocates.
 *
 * The rule (nd_share_decide()), for the sources below the bar that the
 * claim rule lets be evidence (another account, not revoked), each
 * holding at least min_source_share of the text:
 * - compilation: two or more pieces together cover at least
 *   min_copied_share: each is `compiled` (evidence). The pieces are
 *   chosen greedily: the source adding the most to the pieces' union so
 *   far, while it adds at least min_source_share (several versions of one
 *   page, or pages sharing a template, hold the same part: the first is
 *   a piece, the others add nothing);
 * - else quotation: each holding at least min_quote_share is a `quotation`
 *   (evidence);
 * - the others are `quoted`: listed, never evidence.
 * The sources at or above the bar (identical, near duplicate, partial
 * copy, rewrite) keep their kinds; the text's verdict is theirs when any
 * is evidence. */
#ifndef ND_SHARE_H
#define ND_SHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sketch.h"

/* Sources whose passages one check counts (the most contained first);
 * passages counted per source (more: that source's share is a lower
 * bound, and the answer says the shares are estimated). */
#define ND_SHARE_SOURCES_MAX 8
#define ND_SHARE_SPANS_MAX 64

/* A passage shorter than this many code points is not counted (a
 * section heading or a phrase two texts share by chance: "SYNOPSIS",
 * "See also"). */
#define ND_SHARE_MIN_SPAN 32

/* Defaults, measured on the dev set (proto/sketch.md section 8). */
#define ND_SHARE_MIN_SOURCE 0.10
#define ND_SHARE_MIN_QUOTE 1.0
#define ND_SHARE_MIN_COPIED 0.95

/* The thresholds. min_source_share 0 (or below): the rule is off (no
 * source below the bar is listed, no verdict of this module's). */
typedef struct nd_share_params {
    double min_source_share; /* a source is listed from this own share */
    double min_quote_share;  /* one source from this share: a quotation */
    double min_copied_share; /* sources together from this share: a compilation */
} nd_share_params;

/* Fills the defaults above. */
void nd_share_params_default(nd_share_params *p);

/* Whether the rule is on in p. */
static inline bool nd_share_on(const nd_share_params *p)
{
    return p && p->min_source_share > 0.0;
}

/* A source's role below the bar (nd_share_decide()). */
enum nd_share_kind {
    ND_SHARE_KIND_NONE = 0,  /* below min_source_share, or at/above the bar */
    ND_SHARE_KIND_QUOTED,    /* listed, not evidence */
    ND_SHARE_KIND_QUOTATION, /* one large quotation: evidence */
    ND_SHARE_KIND_COMPILED,  /* part of a compilation: evidence */
};

/* The text's verdict from the sources below the bar. */
enum nd_share_verdict {
    ND_SHARE_ORIGINAL = 0, /* none (the bar's verdict, if any, stands) */
    ND_SHARE_QUOTATION,
    ND_SHARE_COMPILATION,
};

/* One source of the text: its passages (code-point spans of the text,
 * sorted by start; they may overlap) and what the caller knows of it. */
typedef struct nd_share_source {
    const nd_passage *p;
    size_t n;
    bool eligible; /* the claim rule lets it be evidence (another
                    * account, not revoked): counted in copied_share and
                    * in the rule */
    bool above;    /* at or above the bar (its kind stands) */
    /* Out. */
    double share;     /* its passages' code points / the text's, at most 1 */
    double exclusive; /* a piece's part of the text that the pieces chosen
                       * before it did not hold (0: not a piece) */
    uint8_t kind;     /* enum nd_share_kind (NONE when above) */
} nd_share_source;

/* The text's figures. */
typedef struct nd_share_answer {
    double copied_share; /* the union of the eligible sources' passages */
    int verdict;         /* enum nd_share_verdict */
    bool bar_evidence;   /* an eligible source is at or above the bar */
} nd_share_answer;

/* Code points covered by the union of n span lists (lists[i][0..len[i]),
 * each sorted by start, spans [start, end) possibly overlapping), at most
 * ND_SHARE_SOURCES_MAX lists (more: -E2BIG). When out is not NULL, the
 * union's disjoint spans, in order, go to out[0..cap) and *nout gets how
 * many there are in all (may exceed cap). Returns the covered code points
 * (>= 0). Pure, no allocation, O(total spans * n). */
int64_t nd_share_union(const nd_passage *const *lists, const size_t *len, size_t n, nd_passage *out,
                       size_t cap, size_t *nout);

/* Decides the sources s[0..n) (at most ND_SHARE_SOURCES_MAX: more, the
 * rest are ignored; at most ND_SHARE_SPANS_MAX passages each) of a text
 * of text_cp code points under p: each source's share and kind, and the
 * text's copied share and verdict (see the top of this file). Passages
 * shorter than ND_SHARE_MIN_SPAN count for nothing. p off: kinds NONE, verdict ORIGINAL,
 * the shares and the copied share still computed. Pure, no allocation
 * (a few KiB of stack). */
void nd_share_decide(nd_share_source *s, size_t n, uint32_t text_cp, const nd_share_params *p,
                     nd_share_answer *out);

#endif
