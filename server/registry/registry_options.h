/* registry_options.h - the registry's settings (nd_registry_options): the
 * matches returned, the default reprint rule and the verdict's thresholds,
 * the same for every check. Read by the verdict (verdict.c), kept in the
 * registry's state (docs_internal.h), filled from the configuration by
 * nd_registry_options_from_config() (registry.c). */
#ifndef ND_REGISTRY_OPTIONS_H
#define ND_REGISTRY_OPTIONS_H

#include <stdbool.h>

#include "config.h"
#include "share.h"
#include "sketch.h"

/* What a rewrite (the third stage's kind, align.h) does to a verdict. */
enum nd_rewrite_verdict {
    ND_REWRITE_IGNORE = 0,    /* the third stage is off (zeroed options) */
    ND_REWRITE_DUPLICATE = 1, /* evidence like a near duplicate (the server's default) */
    ND_REWRITE_REVIEW = 2,    /* listed, not evidence; the answer asks for review */
};

/* The third stage's rule: a rewrite when the alignment covers at least
 * min_coverage of the submitted text, its spread on both sides is at
 * least min_spread and its long gaps at most max_long_gaps_a of the
 * submitted text's tokens and max_long_gaps_b of the registered one's
 * (nd_align_is_rewrite()). Off is options.rewrite ND_REWRITE_IGNORE. */
typedef struct nd_rewrite_params {
    double min_coverage, min_spread, max_long_gaps_a, max_long_gaps_b;
    double min_coverage_xscript; /* one text Traditional, the other Simplified */
} nd_rewrite_params;

typedef struct nd_registry_options {
    unsigned max_matches; /* most matches returned (more sets truncated) */
    int default_reprint;  /* enum nd_reprint (claim.h) for documents whose
                           * policy has no rule; ND_REPRINT_UNSET (0) = allow */
    /* The verdict's settings, the same for every check: the thresholds a
     * verified match must reach, and the anchor candidates verified per
     * check (0: the anchor index is not asked). */
    nd_verdict_params params;
    unsigned max_verify;
    /* Keep each registered text in the store (nd_record.text: a put's or
     * an upgrade's, and those the replication stream carries); false:
     * none kept. */
    bool keep_text;
    /* The third stage (enum nd_rewrite_verdict) and its rule. It reads
     * the kept texts of gray-zone candidates: without keep_text, documents
     * registered since have none and are never aligned. */
    int rewrite;
    nd_rewrite_params rewrite_params;
    /* Sources below the partial-copy bar (share.h): listed from
     * share.min_source_share (0: off, as in zeroed options), and the
     * compilation and quotation verdicts. */
    nd_share_params share;
} nd_registry_options;

/* The options of the server's configuration cfg (max_matches,
 * default_reprint, the verdict's thresholds and max_verify). */
void nd_registry_options_from_config(nd_registry_options *o, const nd_config *cfg);

#endif
