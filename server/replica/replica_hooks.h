/* replica_hooks.h - where a replicated cluster keeps its webhook
 * positions, and which node delivers: JetStream key-value buckets next to
 * the stream (hook_position.h's ops, the cluster's implementation).
 *
 * Every node holds the same event feed (detections travel in the stream),
 * so any node can deliver; exactly one does at a time. The deliverer
 * holds a lease: the key "deliverer" of the bucket <stream>_hooks_lease,
 * whose entries expire LEASE_MS after they are written (the bucket's TTL,
 * the NATS servers' clock). It is taken with a create (only when no live
 * entry exists) and renewed every RENEW_MS with an update expecting the
 * revision it wrote; a node that fails to renew stops delivering at once.
 * The holder sends and saves only while its last successful renewal began
 * less than LEASE_MS - MARGIN_MS ago (a clock that counts a suspend, read
 * before every send and save): a node stopped or starved past that (a
 * SIGSTOP, a VM pause, swapping) stops on its own when it runs again,
 * before it asks NATS, and comes back only by taking the lease anew as a
 * new term, after loading the positions again.
 * A node killed holds it until it expires; then another node takes it,
 * loads the positions and sends what was in flight again (same event id).
 * Positions live in the bucket <stream>_hooks, key "pos.<subscription>",
 * replicated like the stream, written with a compare-and-set on the
 * revision this node last read or wrote (kvStore_Update): a write from a
 * node whose view is older than the bucket's is refused (the save is
 * -ESTALE, delivery stops until a load), so a position never moves back. */
#ifndef ND_REPLICA_HOOKS_H
#define ND_REPLICA_HOOKS_H

#include <stddef.h>

#include "hook_position.h"
#include "replica.h"

/* Opens (creating if needed) the two buckets for r's stream. The object
 * borrows r's NATS connection: close it before r's store. Returns 0 and a
 * new object in *out (free with nd_hook_positions_close()), or -errno with
 * a reason in err[cap]: -ETIMEDOUT, -EACCES (NATS refused), -ENOMEM. */
int nd_replica_hook_positions(nd_replica *r, nd_hook_positions **out, char *err, size_t cap);

#endif
