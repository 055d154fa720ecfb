/* lmdb_open.h - opening the LMDB store's environment (private to
 * server/store/): lmdb_open.c owns the databases' opening and creation,
 * the store format check, the one-time index of an older store's audit log
 * and the reopen after MDB_PANIC. Used by store_lmdb.c (open) and
 * lmdb_commit.c (reopen). */
#ifndef ND_LMDB_OPEN_H
#define ND_LMDB_OPEN_H

#include "lmdb_env.h"

/* Opens st->env and its databases (creating them in a new store) and sets
 * st->last_key and st->stream_seq. Returns 0 or -errno with err set. */
int lmdb_env_open(nd_store *st, char *err, size_t errlen);

/* Commit thread: closes and reopens the environment after MDB_PANIC.
 * Returns 0 or -errno (st->env NULL then). */
int lmdb_env_reopen(nd_store *st);

#endif
