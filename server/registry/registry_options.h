/* registry_options.h - the registry's settings (nd_registry_options): the
 * matches returned, the default reprint rule and the verdict's thresholds,
 * the same for every check. Read by the verdict (verdict.c), kept in the
 * registry's state (docs_internal.h), filled from the configuration by
 * nd_registry_options_from_config() (registry.h). No .c of its own. */
#ifndef ND_REGISTRY_OPTIONS_H
#define ND_REGISTRY_OPTIONS_H

#include <stdbool.h>

#include "sketch.h"

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
} nd_registry_options;

#endif
