/* readahead.h - reads one LMDB database's leaf pages into the page cache
 * ahead of a scan that would otherwise fault them in one read at a time.
 *
 * Why. A store's "records" and "sketches" databases are written in the
 * same transactions, so their pages interleave in data.mdb (10M documents:
 * 1.9 GB of record leaves among 8.2 GB of sketch leaves). The start-up scan
 * reads only the records, but each of its page faults on a cold cache read
 * the kernel's whole read-around window (8 MB on the machines measured),
 * so a cold start read all of data.mdb, and read it while the scan waited.
 * The read-ahead asks the kernel for exactly the record leaves, ahead of
 * the scan and on its own thread, and turns read-around off while it runs.
 *
 * How. LMDB's API has no call that lists a tree's pages, so the walk reads
 * LMDB 0.9's page format itself (mdb.c, unchanged since 0.9.0): a page
 * starts with its number (8 bytes), a pad and its flags (u16 each: 1
 * branch, 2 leaf), then the u16 bounds `lower` and `upper`; node offsets
 * (u16) follow the 16-byte header, and a branch node starts with its
 * child's page number as u16 lo, u16 hi, u16 top (bits 32-47). The root of
 * a named database is in its 48-byte record in the main database
 * (md_root, the last 8 bytes), which mdb_get() returns. Every page read is
 * checked (its own number, its flags, its bounds, the child inside the
 * file) and the walk stops at the first one that does not fit. It is only
 * a hint: nothing read here decides anything, and the scan itself goes
 * through LMDB's API, so another format costs speed, never correctness. */
#ifndef ND_READAHEAD_H
#define ND_READAHEAD_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef struct nd_readahead nd_readahead;

/* Walks the branch pages of database dbi (named name) in txn level by
 * level, each level asked for as a whole before it is read (1 page in 225
 * at 10M records), listing the leaf pages without reading them; then asks
 * the kernel to read the leaves, in key order, a POSIX_FADV_WILLNEED on
 * data.mdb for each run of adjacent ones (leaves already in the page cache
 * cost a lookup: 0.2 s for 10M records, against 2.4 s for mincore() over
 * the map to skip them). Stops early once *cancel is true (cancel may be
 * NULL). Returns the number of leaf pages asked for (0: a tree without
 * branch pages, whose one leaf the first access reads), or -errno:
 * -ENOTSUP for an LMDB other than 0.9 or a database record of another
 * size, -EBADMSG at a page that does not look like one (no leaf asked for
 * then), -ENOMEM, -ECANCELED. Allocates the lists (8 bytes a page) and
 * frees them; reads pages of the map, which txn keeps valid. */
long long nd_readahead_leaves(MDB_env *env, MDB_txn *txn, MDB_dbi dbi, const char *name,
                              const atomic_bool *cancel);

/* Starts nd_readahead_leaves() on a new thread ("nd-readahead") for a
 * scan of the database *dbi of environment *env to come, in a read
 * transaction of its own. The thread reads *env and *dbi, and uses the
 * environment, with env_lock held shared (unless env_lock is NULL), so
 * that an owner that replaces the environment under the lock held
 * exclusively (a reopen) is never raced; *env NULL: nothing to do. The
 * map's read-around is off (MADV_RANDOM) from the walk's start until
 * nd_readahead_stop(), so that the scan's faults read one page, not a
 * window of pages it skips. Once it has asked for the leaves, the thread
 * also maps them into the process, in key order (MADV_POPULATE_READ,
 * waiting for their reads), so that the scan following behind takes no
 * page fault for them (at 10M records a warm start's scan spent ~0.4 s in
 * those). name is borrowed: it must stay valid until
 * then. Returns the new read-ahead, or NULL (no memory, no thread): the
 * scan works without it. */
nd_readahead *nd_readahead_start(MDB_env *const *env, const MDB_dbi *dbi, const char *name,
                                 pthread_rwlock_t *env_lock);

/* Cancels the walk if it is still running, joins its thread, puts the
 * map's default access advice back and frees ra. Returns what
 * nd_readahead_leaves() returned (-ECANCELED when cut short). ra may be
 * NULL (returns 0). */
long long nd_readahead_stop(nd_readahead *ra);

#endif
