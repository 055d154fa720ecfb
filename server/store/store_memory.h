/* store_memory.h - the memory store: the store interface of store.h kept in
 * this process's memory (`neardupd --in-memory`; tests).
 *
 * Records (and their sketches) live in a hash table by registered_at_us,
 * guarded by a read-write lock: any number of threads may read (scan, get,
 * sketches, count) while one changes it. Each change commits within the call
 * that queues it: put, replace and delete_at apply it under the lock and
 * then call the done callback, all before they return 0. Nothing survives the process (nd_store_durable()
 * is false). The statuses are the LMDB store's: -EEXIST for a put of a time
 * already held, -ENOENT for a replace or delete whose time is not held or
 * holds another id; -EINVAL (bad record, as for LMDB; done not called).
 * Events (detections, audit) are kept per (kind, owner_at) in arrays by
 * at_us under the same lock; an amend's audit event is inserted in the
 * same critical section as its record; -ENOMEM there is returned before
 * anything changed (done not called). */
#ifndef ND_STORE_MEMORY_H
#define ND_STORE_MEMORY_H

#include "store.h"

/* Creates an empty memory store, with the default options (detections_max
 * 10000). Returns 0 and the store (free with nd_store_close()), or -ENOMEM. */
int nd_store_memory_open(nd_store **out);

/* The same with opts (NULL: the defaults): only detections_max is used. */
int nd_store_memory_open_with(nd_store **out, const nd_store_options *opts);

#endif
