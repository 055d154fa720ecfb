/* lmdb_feed.h - the LMDB store's event feed (private to server/store/):
 * the "events" database (seq, 8 bytes big-endian -> feed.h's value),
 * appended in the transaction of the journal write it shows, pruned by
 * age behind the hold, and read in order. Used by lmdb_journals.c
 * (appends), lmdb_commit.c (the sequence across a transaction, pruning),
 * lmdb_open.c (the sequence at open) and store_lmdb.c (reads). */
#ifndef ND_LMDB_FEED_H
#define ND_LMDB_FEED_H

#include "lmdb_env.h"

/* Appends the feed's event of the journal write encoded at e (len bytes,
 * as encode_event, its at_us final) in txn, if the feed shows it, under
 * st->feed_next (then advanced). subject: the record it concerns (NULL: a
 * detection's original is read here; an audit entry's none). Returns 0 or
 * the LMDB error (ENOMEM). */
int lmdb_feed_append(nd_store *st, MDB_txn *txn, const unsigned char *e, size_t len,
                     const nd_record *subject);

/* Drops, in txn, at most budget events older than events_max_age_us and
 * not held (nd_store_feed_hold()). Returns 0 or the LMDB error. */
int lmdb_feed_trim(nd_store *st, MDB_txn *txn, size_t budget);

/* Writes info/feed_seq = st->feed_next - 1 in txn when this transaction
 * appended, after the data directory's mark (events.seq, see
 * lmdb_feed.c) says these seqs are handed out (one node's store; fsynced
 * once per reservation of 256 with --sync). Returns 0, an errno of the
 * mark (the transaction must then not commit) or the LMDB error. */
int lmdb_feed_note(nd_store *st, MDB_txn *txn);

/* The greatest seq handed out in the store, at open: info/feed_seq or the
 * last key, and (one node's store, not a replica's) never below the data
 * directory's mark (events.seq: what it handed out before data.mdb was
 * replaced by an older copy); a floor from the mark is logged and written
 * into info in txn (a write transaction), and the mark is rewritten. */
uint64_t lmdb_feed_read_seq(MDB_txn *txn, MDB_dbi info, MDB_dbi events);

/* The ops table's feed calls (store.h). */
int lmdb_feed_scan(nd_store *st, uint64_t from, bool descending,
                   int (*visit)(void *arg, const nd_event_rec *ev), void *arg);
void lmdb_feed_bounds(nd_store *st, uint64_t *oldest, uint64_t *latest);
void lmdb_feed_hold(nd_store *st, uint64_t seq);

#endif
