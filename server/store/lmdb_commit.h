/* lmdb_commit.h - the LMDB store's writes (private to server/store/):
 * lmdb_commit.c owns the queue of writes (write_op), the group-commit
 * thread, space probing and headroom. Used by store_lmdb.c (the ops table
 * and open). */
#ifndef ND_LMDB_COMMIT_H
#define ND_LMDB_COMMIT_H

#include "lmdb_env.h"

/* The commit thread (arg: the store). Returns NULL at close. */
void *lmdb_commit_main(void *arg);

/* Finds out whether the store can take writes (open, and the idle commit
 * thread while not writable); sets st->writable. */
void lmdb_probe_space(nd_store *st);

/* The ops table's writes (store.h: put, replace, amend, delete_at,
 * event_put, hurry): each queues a write_op. Return 0 (queued), -EINVAL,
 * -ENOMEM, -EBUSY (shed) or -ESHUTDOWN. */
int lmdb_put(nd_store *st, const nd_record *rec, const nd_store_event *audit, nd_store_done_fn done,
             void *arg);
int lmdb_replace(nd_store *st, const nd_record *rec, nd_store_done_fn done, void *arg);
int lmdb_amend(nd_store *st, const nd_record *rec, const nd_store_event *audit,
               nd_store_done_fn done, void *arg);
int lmdb_delete_at(nd_store *st, const char *id, size_t id_len, int64_t registered_at_us,
                   uint64_t stream_seq, const nd_store_event *audit, nd_store_done_fn done,
                   void *arg);
int lmdb_event_put(nd_store *st, const nd_store_event *ev, nd_store_done_fn done, void *arg);
void lmdb_hurry(nd_store *st);

#endif
