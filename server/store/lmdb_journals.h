/* lmdb_journals.h - the LMDB store's journals (private to server/store/):
 * lmdb_journals.c owns the detections (their index by copy id, their count
 * and retention) and the audit log (its index by document and retention):
 * writing an event in a commit's transaction and reading the journals.
 * Used by lmdb_commit.c (writes), lmdb_open.c (indexing an older store's
 * audit log) and store_lmdb.c (the ops table's reads). */
#ifndef ND_LMDB_JOURNALS_H
#define ND_LMDB_JOURNALS_H

#include "lmdb_env.h"

/* Writes the event encoded at e (len bytes, encode_event) into its journal
 * in txn, with its index, count and retention, and a new entry's event
 * into the feed (subject: the record it concerns, see lmdb_feed_append()).
 * Returns 0 or the LMDB error. */
int lmdb_apply_event(nd_store *st, MDB_txn *txn, unsigned char *e, size_t len,
                     const nd_record *subject, txn_result *res);

/* Drops the detections of owner (its 8 key bytes) with their index
 * entries and count, in txn. Returns 0 or the LMDB error. */
int lmdb_detections_drop(nd_store *st, MDB_txn *txn, const unsigned char *owner);

/* Drops audit entries beyond the audit limits, at most budget, in txn.
 * Returns 0 or the LMDB error. */
int lmdb_audit_trim(nd_store *st, MDB_txn *txn, size_t budget);

/* Indexes every stored audit entry by its document (a store opened without
 * audit_documents). Returns 0 or the LMDB error. */
int lmdb_audit_index_all(nd_store *st, MDB_txn *txn);

/* The ops table's journal reads (store.h: list_events, list_audit). Return
 * 0, a visit's non-zero value, or -errno. */
int lmdb_events(nd_store *st, nd_event_kind kind, int64_t owner_at, int64_t before_at, size_t limit,
                int (*visit)(void *arg, const nd_store_event *ev), void *arg);
int lmdb_audit_of(nd_store *st, int64_t owner_at, const char *doc, size_t len, int64_t before_at,
                  size_t limit, int (*visit)(void *arg, const nd_store_event *ev), void *arg);

#endif
