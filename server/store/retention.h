/* retention.h - which detections an original's full copies list drops.
 *
 * When a new detection makes an original's list longer than its
 * detections_max, the list is cut to nd_retention_target(max) entries
 * (max less 1/64 of it: one pass over a full list of 10000 serves the
 * next 157 detections; exactly max below 64), each entry dropped being the
 * oldest of the account that holds the most entries at that point; of
 * accounts holding as many, the one whose newest entry is the newest (so
 * an account that just joined a full list with as few entries as the
 * others drops its own). One account flooding an original's list thus
 * only ever drops its own entries. The account of a detection is the
 * "account" member of its value (the compact JSON object the API writes,
 * check.c); entries without one (or whose value is not such an object)
 * form one group of their own.
 *
 * The LMDB and the memory store both use it, so they (and the replicas,
 * which apply the same events under the same detections_max) drop the same
 * entries. Pure: no I/O, no locks; a tally belongs to one caller. */
#ifndef ND_RETENTION_H
#define ND_RETENTION_H

#include <stddef.h>
#include <stdint.h>

typedef struct nd_retention nd_retention;

/* The length a list longer than max is cut to (max >= 1). */
uint64_t nd_retention_target(uint64_t max);

/* A new empty tally for about hint entries (free with nd_retention_free()),
 * or NULL when out of memory. */
nd_retention *nd_retention_new(size_t hint);

/* Counts one entry of the list, value[0..len) stored at at_us; entries are
 * added oldest first. value need not outlive the call. Returns 0 or
 * -ENOMEM. */
int nd_retention_add(nd_retention *t, const char *value, size_t len, int64_t at_us);

/* Picks the k entries to drop (see above), in the order the rule picks
 * them, into at[0..k): their at_us. Returns how many were picked (fewer
 * when fewer were added), or -ENOMEM. Call once. */
int64_t nd_retention_victims(nd_retention *t, size_t k, int64_t *at);

/* Frees t; NULL is allowed. */
void nd_retention_free(nd_retention *t);

/* Finds the "account" member of a detection's value[0..len) (a JSON object
 * whose members are strings, numbers, literals or nested values). Returns 0
 * with *account and *account_len its string's raw bytes (borrowed, escapes
 * as written), or -ENOENT when there is none or value is not an object. */
int nd_retention_account(const char *value, size_t len, const char **account, size_t *account_len);

#endif
