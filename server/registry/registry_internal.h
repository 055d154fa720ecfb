/* registry_internal.h - what the change state machine (registry.c) shares
 * with the start-up loader (loader.c) beyond the registry's state
 * (docs_internal.h): the digest kept as changes commit and the clock
 * raised by the times loaded. Not for other modules: they see registry.h.
 * Same locking rules as registry.h describes. */
#ifndef ND_REGISTRY_INTERNAL_H
#define ND_REGISTRY_INTERNAL_H

#include "docs_internal.h"
#include "registry.h"

#include <pthread.h>

/* Adds the committed document add and takes away sub (either NULL) in the
 * digest. Writer held. */
static inline void digest_change(nd_registry *reg, const nd_doc *add, const nd_doc *sub)
{
    uint64_t plus = add ? doc_digest(add) : 0, minus = sub ? doc_digest(sub) : 0;
    pthread_mutex_lock(&reg->digest_mu);
    reg->digest_sum += plus - minus;
    reg->digest_docs += (add != NULL) - (uint64_t)(sub != NULL);
    pthread_mutex_unlock(&reg->digest_mu);
}

/* Notes a registration time loaded, applied or given: later clock times
 * come after it, but the clock never moves beyond the wall clock +
 * ND_REGISTRY_AHEAD_US (a time stored beyond it is skipped when the clock
 * reaches it instead). Writer held or the loader. (registry.c) */
void nd_reg_clock_raise(nd_registry *reg, int64_t at);

#endif
