/* change.h - how a registry call that changes documents answers, without
 * the registry: its results besides 0 and -errno (a store write queued, a
 * wait behind another change), the callback that hands a queued change
 * back (nd_reg_change, opaque: completed by nd_registry_complete()), and
 * the limit on the documents held with its error. Public through
 * registry.h, which includes it; a caller that only passes a change on
 * (the corpus's interface) includes this alone. */
#ifndef ND_CHANGE_H
#define ND_CHANGE_H

#include <errno.h>

#include "anchor_index.h" /* ND_ANCHOR_SLOTS */

typedef struct nd_reg_change nd_reg_change;

/* nd_registry_check() and nd_registry_delete() results besides 0 and -errno. */
#define ND_REG_QUEUED 1 /* a store write was queued: done(arg, change, status) follows */
#define ND_REG_WAIT                                                                                \
    2 /* the id has a change in flight, or the verdict of a
                         * registration depends on a document waiting for its
                         * commit: done(arg, NULL, 0) follows; then ask again */

/* Called once per ND_REG_QUEUED or ND_REG_WAIT, on another thread (see top).
 * For a queued change, ch is non-NULL and status is the store's result; the
 * receiver must pass both to nd_registry_complete() exactly once. For a wait,
 * ch is NULL: repeat the call that returned ND_REG_WAIT. */
typedef void (*nd_registry_done_fn)(void *arg, nd_reg_change *ch, int status);

/* The most documents one registry holds at once (a slot each; slots are
 * 28 bits, in the anchor index and in nd_doc, the last one marking "not
 * linked": 268,435,455; deleted documents' slots are reused). A
 * registration past it fails with ND_REG_TOO_MANY_DOCS, and so does a load
 * of a store holding more. */
#define ND_REG_DOCS_MAX (ND_ANCHOR_SLOTS - 1)
#define ND_REG_DOCS_MAX_TEXT "268,435,455" /* ND_REG_DOCS_MAX, for messages */
#define ND_REG_TOO_MANY_DOCS (-EOVERFLOW)

#endif
