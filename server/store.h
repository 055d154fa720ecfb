/* store.h - the durable registry of documents, on LMDB.
 *
 * Owns the LMDB environment under the data directory and one commit thread.
 * Writes are asynchronous with group commit: nd_store_put()/nd_store_delete()
 * queue a change and return at once; the commit thread gathers every change
 * queued while the previous transaction was committing into one write
 * transaction, commits it (fsync), and then calls each change's done callback
 * with its status. A callback that reports 0 means the change is durable.
 *
 * Callbacks run on the commit thread: they must be quick and must not call
 * back into the store; a server hands the result to its event loop.
 *
 * Reads (nd_store_scan, nd_store_get) use LMDB read transactions and may run
 * on any thread concurrently with the commit thread. */
#ifndef ND_STORE_H
#define ND_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct nd_store nd_store;

#define ND_ID_MAX 256         /* longest document id, bytes */
#define ND_VERSION_MAX 32     /* longest fingerprint version string, bytes */

/* One registered document. In calls that take a record, every pointer is
 * borrowed for the duration of the call (the store copies what it keeps). */
typedef struct nd_record {
    const char *id;           /* document id, id_len bytes, 1..ND_ID_MAX */
    size_t id_len;
    uint64_t simhash;
    const char *version;      /* fingerprint algorithm version, NUL-terminated */
    int64_t registered_at_us; /* server clock, UTC microseconds since the epoch */
    uint32_t chars;           /* characters after normalization */
    uint8_t text_hash[16];    /* XXH3-128 of the submitted text (idempotency) */
    const char *meta;         /* compact JSON object text, or NULL */
    size_t meta_len;
} nd_record;

typedef struct nd_store_options {
    size_t map_size;          /* LMDB map size in bytes (the storage limit) */
    unsigned max_batch;       /* most changes in one transaction */
    bool sync;                /* fsync each commit (true except in tests) */
} nd_store_options;

/* Fills opts with the defaults. */
void nd_store_options_default(nd_store_options *opts);

/* Called once per queued change after its transaction ended: status 0 when
 * durable, or -ENOSPC (storage full), -EIO, -ENOENT (delete of a missing id),
 * -ESHUTDOWN (store closing) ... */
typedef void (*nd_store_done_fn)(void *arg, int status);

/* Opens (creating if needed) the store in directory dir, which must exist or
 * be creatable, and starts the commit thread. Returns 0 and a new store, or
 * -errno with a human-readable reason written into err[errlen]: -ENOENT /
 * -EACCES (directory), -EBUSY (another process holds it), -EINVAL (corrupt
 * or incompatible file), -ENOMEM. */
int nd_store_open(nd_store **out, const char *dir, const nd_store_options *opts,
                  char *err, size_t errlen);

/* Queues the record for durable insertion (replacing a record with the same
 * id). Returns 0 if queued (done will be called exactly once), or -errno
 * without queuing (done is not called): -EINVAL (bad record), -ESHUTDOWN. */
int nd_store_put(nd_store *st, const nd_record *rec, nd_store_done_fn done, void *arg);

/* Queues the deletion of id; done gets 0 or -ENOENT. Same returns as put. */
int nd_store_delete(nd_store *st, const char *id, size_t id_len,
                    nd_store_done_fn done, void *arg);

/* Calls visit for every stored record in id order, in one read transaction
 * (a consistent snapshot). The record's pointers are valid only during the
 * call. Stops early and returns visit's value if it returns non-zero.
 * Returns 0, or -errno. */
int nd_store_scan(nd_store *st, int (*visit)(void *arg, const nd_record *rec), void *arg);

/* Number of stored records (from a read transaction), or -errno. */
int64_t nd_store_count(nd_store *st);

/* Writes a consistent copy of the store into directory dir (created if
 * missing, must not hold a store) while the store is in use.
 * Returns 0 or -errno with a reason in err[errlen]. */
int nd_store_backup(nd_store *st, const char *dir, char *err, size_t errlen);

/* True while the last commit succeeded (storage writable). */
bool nd_store_writable(const nd_store *st);

/* Commits every queued change (their callbacks run), stops the commit
 * thread and closes the environment. NULL is allowed. */
void nd_store_close(nd_store *st);

#endif
