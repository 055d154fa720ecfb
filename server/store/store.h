/* store.h - where registered documents are kept: one interface, two
 * implementations.
 *
 * The interface (nd_store_put() .. nd_store_close() below) is what the
 * registry and the API use. Besides the records it
 * keeps each record's submitted text, packed, when the put gives one
 * (nd_record.text, nd_store_text()), and two journals of events (detections of copies per original, and the
 * audit log of changes of state: nd_store_event_put(), nd_store_events()),
 * written through the same queue and group commit. Each call dispatches
 * through the store's nd_store_ops:
 * - LMDB (store.c, nd_store_open()): durable, described below;
 * - memory (store_memory.c, nd_store_memory_open()): `neardupd --in-memory`;
 *   keeps records and sketches in memory and commits each change within the
 *   call that queues it (its done callback runs before that call returns).
 *
 * The rest of this comment describes the LMDB store.
 *
 * Owns the LMDB environment under the data directory and one commit thread.
 * Writes are asynchronous with group commit: nd_store_put() and
 * nd_store_delete_at() queue a change and return at once; the commit thread
 * gathers every change queued while the previous transaction was committing
 * into one write transaction, commits it (fsync), and then calls each
 * change's done callback with its status. A callback that reports 0 means
 * the change is durable.
 *
 * Callbacks run on the commit thread: they must be quick and must not call
 * back into the store; a server hands the result to its event loop.
 *
 * Reads (nd_store_scan, nd_store_get, nd_store_count) use LMDB read
 * transactions and may run on any thread concurrently with the commit thread.
 *
 * Files in the data directory: data.mdb and lock.mdb (LMDB's) and
 * neardup.lock, which the open store holds with flock(LOCK_EX) so that a
 * second neardupd on the same directory fails with -EBUSY.
 *
 * Keys. Each record is stored under its registered_at_us (8 bytes,
 * big-endian), which the caller must keep unique and should hand out in
 * increasing order (the server uses max(now, last + 1 us) from the greatest
 * time stored): then every insert appends at the right edge of the B-tree
 * and a durable commit writes few pages however large the store is. The id
 * is kept in the value (a compact binary layout whose first byte is the
 * layout version, see store.c); there is no index by id on disk, so the
 * caller keeps id -> registered_at_us in memory (from nd_store_scan at
 * start) and deletes with nd_store_delete_at(). A store written by an older
 * neardup (store format 1, keyed by id) is refused by nd_store_open(). */
#ifndef ND_STORE_H
#define ND_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store_values.h"

typedef struct nd_store nd_store;

typedef struct nd_store_stats nd_store_stats;
struct nd_event_rec; /* feed.h */

/* An implementation: the calls below, dispatched. */
typedef struct nd_store_ops {
    const char *name;     /* "lmdb", "memory" */
    bool durable;         /* survives a restart (false: neardup_in_memory 1) */
    bool commits_in_call; /* put, replace and delete_at commit before they
                           * return (done runs within the call); else done
                           * runs later, on another thread */
    int (*put)(nd_store *st, const nd_record *rec, const nd_store_event *audit,
               nd_store_done_fn done, void *arg);
    int (*replace)(nd_store *st, const nd_record *rec, nd_store_done_fn done, void *arg);
    int (*amend)(nd_store *st, const nd_record *rec, const nd_store_event *audit,
                 nd_store_done_fn done, void *arg);
    int (*event_put)(nd_store *st, const nd_store_event *ev, nd_store_done_fn done, void *arg);
    int (*list_events)(nd_store *st, nd_event_kind kind, int64_t owner_at, int64_t before_at,
                       size_t limit, int (*visit)(void *arg, const nd_store_event *ev), void *arg);
    int (*delete_at)(nd_store *st, const char *id, size_t id_len, int64_t registered_at_us,
                     uint64_t stream_seq, const nd_store_event *audit, nd_store_done_fn done,
                     void *arg);
    int (*list_audit)(nd_store *st, int64_t owner_at, const char *document, size_t document_len,
                      int64_t before_at, size_t limit,
                      int (*visit)(void *arg, const nd_store_event *ev), void *arg);
    int (*feed_scan)(nd_store *st, uint64_t from, bool descending,
                     int (*visit)(void *arg, const struct nd_event_rec *ev), void *arg);
    void (*feed_bounds)(nd_store *st, uint64_t *oldest, uint64_t *latest);
    void (*feed_hold)(nd_store *st, uint64_t seq);
    void (*prefetch)(nd_store *st); /* NULL: nothing to read ahead */
    void (*hurry)(nd_store *st);    /* NULL: nothing waits to be committed */
    int (*scan)(nd_store *st, int (*visit)(void *arg, const nd_record *rec), void *arg);
    int (*get)(nd_store *st, int64_t registered_at_us,
               int (*visit)(void *arg, const nd_record *rec), void *arg);
    int (*sketches)(nd_store *st, const int64_t *at, size_t n,
                    int (*visit)(void *arg, size_t i, const uint8_t *buf, size_t len), void *arg);
    int (*text)(nd_store *st, int64_t registered_at_us,
                int (*visit)(void *arg, const char *text, size_t text_len), void *arg);
    int64_t (*count)(nd_store *st);
    uint64_t (*stream_seq)(nd_store *st);
    bool (*writable)(const nd_store *st);
    void (*get_stats)(nd_store *st, nd_store_stats *out);
    void (*close)(nd_store *st);
} nd_store_ops;

/* The head every implementation's object begins with (an nd_store * points
 * at it). */
typedef struct nd_store_base {
    const nd_store_ops *ops;
    uint64_t detections_max;    /* detections kept per owner_at (0: all) */
    uint64_t audit_max_entries; /* audit entries kept (0: all) */
    int64_t audit_max_age_us;   /* audit entries older than this are dropped (0: none) */
} nd_store_base;

static inline nd_store_base *nd_store_base_of(const nd_store *st)
{
    return (nd_store_base *)(void *)(uintptr_t)st;
}

/* The implementation's name ("lmdb", "memory"). */
static inline const char *nd_store_kind(const nd_store *st)
{
    return nd_store_base_of(st)->ops->name;
}

/* True when put, replace and delete_at commit (and call done) before they
 * return: the memory store. The LMDB store calls done later, from its
 * commit thread (possibly before the call returns: never rely on that). */
static inline bool nd_store_commits_in_call(const nd_store *st)
{
    return nd_store_base_of(st)->ops->commits_in_call;
}

/* True when what is committed survives a restart (LMDB); false for the
 * memory store. */
static inline bool nd_store_durable(const nd_store *st)
{
    return nd_store_base_of(st)->ops->durable;
}

typedef struct nd_store_options {
    size_t map_size;            /* LMDB map size in bytes (the storage limit) */
    unsigned max_batch;         /* most changes in one transaction */
    bool sync;                  /* fsync each commit (true except in tests) */
    bool shed;                  /* queue full: put, replace and delete_at return
                               * -EBUSY at once instead of waiting (callers
                               * that must not block: a server's loops) */
    uint64_t detections_max;    /* detections kept per original (owner_at): a
                          * new one beyond drops the oldest in the same
                          * transaction; 0: unbounded */
    unsigned gather_ms;         /* a bulk load's: the commit thread waits up to
                              * this long for max_batch changes before it
                              * commits (fewer, larger transactions, whose
                              * records lie side by side in the file);
                              * nd_store_hurry() ends a wait. 0: commits what
                              * is queued at once (a server's) */
    uint64_t audit_max_entries; /* audit entries kept: beyond, the oldest are
                                 * dropped by later commits (at most the
                                 * entries a commit adds plus 64 per commit:
                                 * retention never stalls a commit); 0: all */
    int64_t events_max_age_us;  /* feed events older than this (us) are dropped
                                 * by later commits once no one holds them
                                 * (nd_store_feed_hold()); 0: kept forever */
    int64_t audit_max_age_us;   /* audit entries older than this (us, by their
                                 * at_us against the wall clock) are dropped the same
                                 * way; 0: kept whatever their age */
} nd_store_options;

struct nd_json_scratch;

/* The document an audit value names: the string member "document" of the
 * JSON object value[0..len), decoded into *doc (pointing into value or
 * scratch, valid until its next use) and *doc_len. Returns 1, or 0 when
 * the value is not such an object or has no such member of 1..ND_ID_MAX
 * bytes (not indexed). Allocates only to grow scratch. */
int nd_store_audit_subject(const char *value, size_t len, struct nd_json_scratch *scratch,
                           const char **doc, size_t *doc_len);

/* Fills opts with the defaults: map_size 64 GiB on 64-bit hosts (1 GiB on
 * 32-bit; the file only grows as data is written), max_batch 4096 (at most
 * 65536 is used), sync true, detections_max 10000, audit retention off (0, 0). A map_size of 0 keeps the size recorded in an
 * existing store (the default for a new one); a map_size below the data
 * already stored is raised to it. */
void nd_store_options_default(nd_store_options *opts);

/* Called once per queued change after its transaction ended: status 0 when
 * durable, or -ENOSPC (storage full), -EIO, -EEXIST (put of a time already
 * stored), -ENOENT (delete of a missing record), -EBADMSG (delete of a
 * record whose stored value cannot be decoded), -ESHUTDOWN (store
 * closing) ... Runs on the commit thread, which takes the
 * next batch only after the callbacks of this one returned: a callback must
 * not wait for a lock that a caller of nd_store_put() may hold while the
 * queue is full, or both wait forever. */
/* Opens (creating if needed) the store in directory dir, which must exist or
 * be creatable (its parent must exist), and starts the commit thread.
 * Returns 0 and a new store (free with nd_store_close()), or -errno with a
 * human-readable reason naming the path written into err[errlen]: -ENOENT
 * (no such directory), -ENOTDIR, -EACCES / -EROFS (not writable), -EBUSY
 * (another neardupd, or another nd_store_open() in this process, holds it),
 * -EINVAL (corrupt, truncated or incompatible file), -ENOSPC, -ENOMEM.
 * An existing store opens even when its map or disk is full: reads work and
 * writes report -ENOSPC until space returns. */
int nd_store_open(nd_store **out, const char *dir, const nd_store_options *opts, char *err,
                  size_t errlen);

/* Queues the record for durable insertion under the key
 * rec->registered_at_us, with its text (nd_record.text, packed within this
 * call) in the same transaction when it has one; the record is copied
 * into one allocation. Nothing
 * is replaced: if a record with that registered_at_us is stored already
 * (a caller bug: times must be unique), done gets -EEXIST and the stored
 * record stays. Records with the same id are not detected (no id index):
 * the caller must not put an id that is stored. A time greater than every
 * stored one takes the fast path (MDB_APPEND, counted in stats.appended);
 * any other unused time is inserted normally, only slower. Returns 0 if
 * queued (done, unless NULL, will be called exactly once), or -errno
 * without queuing (done is not called): -EINVAL (bad record: id_len not
 * 1..ND_ID_MAX, registered_at_us negative, version NULL or not
 * 1..ND_VERSION_MAX bytes, meta_len over ND_META_MAX or set with meta
 * NULL, account_len over ND_ACCOUNT_MAX or set with account NULL (0: no
 * account, whatever account points at), policy_len over
 * ND_POLICY_MAX or set with policy NULL, status not ND_CLAIM_ACTIVE,
 * ND_CLAIM_REVOKED or ND_CLAIM_SUPERSEDED, text_len over ND_STORE_TEXT_MAX
 * or set with text NULL, a text_packed whose header nd_text_packed_len()
 * refuses), -ENOMEM, -ESHUTDOWN (nd_store_close() has begun).
 * The queue is bounded (max(4 x max_batch, 1024) changes and 64 MiB): when
 * it is full this call blocks until the commit thread takes a batch (about
 * one commit), so never call it from a done callback; with opts.shed it
 * returns -EBUSY instead (nothing queued, done not called). Changes are applied
 * in the order their calls returned. */
static inline int nd_store_put(nd_store *st, const nd_record *rec, nd_store_done_fn done, void *arg)
{
    return nd_store_base_of(st)->ops->put(st, rec, NULL, done, arg);
}

/* nd_store_put() with, when audit is not NULL (an ND_EVENT_AUDIT event
 * valid for nd_store_event_put), that audit entry written in the same
 * transaction as the record (both or neither; a refused put (-EEXIST)
 * writes no entry). -EINVAL also for an invalid audit. */
static inline int nd_store_put_audited(nd_store *st, const nd_record *rec,
                                       const nd_store_event *audit, nd_store_done_fn done,
                                       void *arg)
{
    return nd_store_base_of(st)->ops->put(st, rec, audit, done, arg);
}

/* Queues the deletion of the record stored under registered_at_us, which
 * must have id id (id_len bytes), with its sketch, its kept text and
 * every detection of it (owner_at registered_at_us) in the same
 * transaction (at a full map a deletion that does not fit otherwise is
 * retried without those, which then stay): done gets 0 (deleted, durable), -ENOENT
 * (no record under that time, or its id differs: nothing is deleted),
 * -EBADMSG (the stored value cannot be decoded: nothing is deleted) or an
 * error as for put. One B-tree lookup. Returns 0 if queued, or -EINVAL (id
 * not 1..ND_ID_MAX bytes, registered_at_us negative), -ENOMEM, -ESHUTDOWN;
 * blocks like put when the queue is full. */
static inline int nd_store_delete_at(nd_store *st, const char *id, size_t id_len,
                                     int64_t registered_at_us, nd_store_done_fn done, void *arg)
{
    return nd_store_base_of(st)->ops->delete_at(st, id, id_len, registered_at_us, 0, NULL, done,
                                                arg);
}

/* nd_store_delete_at() of a change that is the replication stream's entry
 * stream_seq (> 0; 0: as nd_store_delete_at()): the sequence is written in
 * the same transaction, as a record's stream_seq is. */
static inline int nd_store_delete_at_seq(nd_store *st, const char *id, size_t id_len,
                                         int64_t registered_at_us, uint64_t stream_seq,
                                         nd_store_done_fn done, void *arg)
{
    return nd_store_base_of(st)->ops->delete_at(st, id, id_len, registered_at_us, stream_seq, NULL,
                                                done, arg);
}

/* nd_store_delete_at_seq() with, when audit is not NULL (as for
 * nd_store_put_audited()), that audit entry written in the deletion's
 * transaction (none when the deletion finds nothing: -ENOENT). */
static inline int nd_store_delete_audited(nd_store *st, const char *id, size_t id_len,
                                          int64_t registered_at_us, uint64_t stream_seq,
                                          const nd_store_event *audit, nd_store_done_fn done,
                                          void *arg)
{
    return nd_store_base_of(st)->ops->delete_at(st, id, id_len, registered_at_us, stream_seq, audit,
                                                done, arg);
}

/* Queues the replacement of the record stored under rec->registered_at_us,
 * which must have rec's id, by rec (another fingerprint, version, meta...:
 * how a document of an older fingerprint version is brought up to date
 * without losing its registration time); rec's text (nd_record.text)
 * replaces the kept one, or removes it when rec has none. done gets 0
 * (replaced, durable),
 * -ENOENT (no record under that time, or its id differs: nothing written),
 * -EBADMSG (the stored value cannot be decoded: nothing written) or an
 * error as for put. Returns as nd_store_put() does, and blocks as it does
 * when the queue is full. */
static inline int nd_store_replace(nd_store *st, const nd_record *rec, nd_store_done_fn done,
                                   void *arg)
{
    return nd_store_base_of(st)->ops->replace(st, rec, done, arg);
}

/* Queues the amendment of the record stored under rec->registered_at_us,
 * which must have rec's id: as nd_store_replace(), except that the stored
 * sketch and kept text are left as they are (rec->sketch, rec->text and
 * rec->text_packed are ignored), and,
 * when audit is not NULL, the audit event is written in the same
 * transaction (both or neither: a crash never keeps one without the
 * other), and so are the records rec->supersede names. How a document's
 * policy, account or status changes. done gets 0
 * (both durable), -ENOENT (no record under that time, or its id differs:
 * nothing written, no audit), -EBADMSG, or an error as for put. Returns 0
 * if queued, or -EINVAL (bad record as for put, rec->supersede over
 * ND_STORE_SUPERSEDE_MAX or naming an id not 1..ND_ID_MAX bytes, or audit not an
 * ND_EVENT_AUDIT event valid for nd_store_event_put), -ENOMEM, -ESHUTDOWN;
 * blocks like put when the queue is full. */
static inline int nd_store_amend(nd_store *st, const nd_record *rec, const nd_store_event *audit,
                                 nd_store_done_fn done, void *arg)
{
    return nd_store_base_of(st)->ops->amend(st, rec, audit, done, arg);
}

/* Queues the durable append of ev to its journal (detections or audit, in
 * their own databases, committed with the record changes: same group
 * commit, same done protocol, same queue). The key is (kind, owner_at,
 * at_us); at_us is raised by 1 us while that key is taken. A DETECTION
 * of a (owner_at, copy_id) detected before updates that entry in place:
 * its value becomes ev's, its at_us stays the first detection's (retries
 * of one check leave one entry, which never moves: a walk by before_at
 * lists it once); a DETECTION that
 * makes more than detections_max of its owner_at drops the oldest ones in the
 * same transaction. An AUDIT beyond audit_max_entries or audit_max_age_us
 * has the oldest entries dropped by this and later commits (see
 * nd_store_options). done gets 0 (durable) or an error as for put. Returns
 * 0 if queued, or -EINVAL (kind unknown, owner_at negative, at_us not
 * 0..ND_EVENT_AT_MAX,
 * DETECTION without a copy_id of 1..ND_ID_MAX bytes, AUDIT with one,
 * value_len over ND_EVENT_VALUE_MAX or set with value NULL), -ENOMEM,
 * -ESHUTDOWN; blocks like put when the queue is full (-EBUSY with shed).
 * The detections of a deleted record go with it (nd_store_delete_at). */
static inline int nd_store_event_put(nd_store *st, const nd_store_event *ev, nd_store_done_fn done,
                                     void *arg)
{
    return nd_store_base_of(st)->ops->event_put(st, ev, done, arg);
}

/* Calls visit for the events of kind of owner_at, newest first (at_us
 * descending), starting strictly before at_us before_at when before_at >=
 * 0 (from the newest when negative), at most limit of them (0: no limit),
 * in one read transaction. Paging: pass the last at_us seen as before_at:
 * no entry is skipped or seen twice, as entries are only added at later
 * times. ev's pointers are valid only during the call. Stops early and
 * returns visit's value if it returns non-zero. Returns 0, or -EINVAL
 * (kind unknown, owner_at negative), -EBADMSG (an entry that cannot be
 * decoded), -EAGAIN, -EIO. Sees committed events only. Any thread. */
static inline int nd_store_events(nd_store *st, nd_event_kind kind, int64_t owner_at,
                                  int64_t before_at, size_t limit,
                                  int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    return nd_store_base_of(st)->ops->list_events(st, kind, owner_at, before_at, limit, visit, arg);
}

/* Calls visit for the audit events of owner_at whose value names document
 * (document_len bytes) as its "document" member, as nd_store_events() does
 * for a journal (newest first, before_at, limit, paging, errors): through
 * the index by document, so a page costs its entries, not the log. -EINVAL
 * also for a document of 0 or over ND_ID_MAX bytes. */
static inline int nd_store_audit_of(nd_store *st, int64_t owner_at, const char *document,
                                    size_t document_len, int64_t before_at, size_t limit,
                                    int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    return nd_store_base_of(st)->ops->list_audit(st, owner_at, document, document_len, before_at,
                                                 limit, visit, arg);
}

/* A hint that nd_store_scan() follows soon: the LMDB store starts reading
 * the records into the page cache on a thread of its own (the scan, or
 * nd_store_close, stops it), so that a start on a cold cache reads while
 * the caller prepares its tables. Changes nothing a call returns; the
 * memory store ignores it. Returns at once; allocates a little. */
static inline void nd_store_prefetch(nd_store *st)
{
    if (nd_store_base_of(st)->ops->prefetch)
        nd_store_base_of(st)->ops->prefetch(st);
}

/* Ends the commit thread's wait for a full batch (options.gather_ms): what
 * is queued now is committed without waiting for more. For a bulk loader
 * about to wait for one of its own changes. Returns at once. */
static inline void nd_store_hurry(nd_store *st)
{
    if (nd_store_base_of(st)->ops->hurry)
        nd_store_base_of(st)->ops->hurry(st);
}

/* Calls visit for every stored record in registration order
 * (registered_at_us ascending; the daemon relies on this order, e.g. to
 * find the greatest time so far), in one read transaction (a consistent
 * snapshot), one cursor pass over the file. The record's pointers point
 * into the map and are valid only during the call;
 * version and meta are NUL-terminated, id is not. Records of any
 * fingerprint version are visited. visit may call nd_store_get/count but
 * not put/delete (they may block). Stops early and returns visit's value if
 * it returns non-zero. Returns 0, or -errno: -EBADMSG (a stored value that
 * cannot be decoded: corrupt, or written by a newer layout), -EAGAIN (more
 * than 256 read transactions at once), -EIO. */
static inline int nd_store_scan(nd_store *st, int (*visit)(void *arg, const nd_record *rec),
                                void *arg)
{
    return nd_store_base_of(st)->ops->scan(st, visit, arg);
}

/* Looks up the record stored under registered_at_us and calls visit once
 * with it (pointers valid only during the call, as for nd_store_scan).
 * Returns visit's value, or -ENOENT (no record at that time; visit not
 * called), -EINVAL (negative time), -EBADMSG, -EIO. Sees committed changes
 * only. */
static inline int nd_store_get(nd_store *st, int64_t registered_at_us,
                               int (*visit)(void *arg, const nd_record *rec), void *arg)
{
    return nd_store_base_of(st)->ops->get(st, registered_at_us, visit, arg);
}

/* Reads the text kept with the record stored under registered_at_us
 * (nd_record.text of its put or latest replace), unpacks it into a buffer
 * of its own and calls visit once with it: text_len bytes, NUL-terminated
 * after them (the text may hold NUL bytes itself); the buffer is freed
 * when visit returns (copy what you keep). Returns visit's value, or
 * -ENOENT (no text kept under that time: no such record, one registered
 * with keeping off (--keep-text=false) or before texts were kept; visit
 * not called), -EINVAL (negative time), -EBADMSG (the stored bytes cannot
 * be unpacked), -ENOMEM, -EAGAIN, -EIO. Sees committed changes only. Any
 * thread; one read transaction (LMDB), or the read lock (memory). */
static inline int nd_store_text(nd_store *st, int64_t registered_at_us,
                                int (*visit)(void *arg, const char *text, size_t text_len),
                                void *arg)
{
    return nd_store_base_of(st)->ops->text(st, registered_at_us, visit, arg);
}

/* Reads the sketches stored with the records under at[0..n) (one read
 * transaction): calls visit(arg, i, bytes, len) for each i in order, with
 * NULL, 0 when the record has none (or at[i] is negative: skipped). The
 * bytes point into the map and are valid only during the call. Stops early
 * and returns visit's value if it returns non-zero. Returns 0 or -errno.
 * Sees committed changes only. Any thread. */
static inline int
nd_store_sketches(nd_store *st, const int64_t *at, size_t n,
                  int (*visit)(void *arg, size_t i, const uint8_t *buf, size_t len), void *arg)
{
    return nd_store_base_of(st)->ops->sketches(st, at, n, visit, arg);
}

/* The greatest replication stream sequence committed with a change
 * (nd_record.stream_seq, nd_store_delete_at_seq()), 0 when none: where a
 * replica resumes tailing the stream after a restart. A
 * backup carries it. Any thread; does not allocate. */
static inline uint64_t nd_store_stream_seq(nd_store *st)
{
    return nd_store_base_of(st)->ops->stream_seq(st);
}

/* Number of stored records (from a read transaction), or -errno. */
static inline int64_t nd_store_count(nd_store *st)
{
    return nd_store_base_of(st)->ops->count(st);
}

/* Writes a consistent copy of the store into directory dir (created if
 * missing, must not hold a store) while the store is in use: a compacted
 * data.mdb, written under a temporary name, fsynced, then linked into place,
 * so dir never holds a partial data.mdb. Writers are not blocked.
 * Returns 0 or -errno with a reason in err[errlen]: -EEXIST (dir holds a
 * store already), -ENOENT/-ENOTDIR/-EACCES (dir), -ENOSPC, -EIO. */
int nd_store_backup(nd_store *st, const char *dir, char *err, size_t errlen);

/* The same for the store in data directory src_dir, which another process
 * (a running neardupd) may hold: opens the environment read-only without
 * taking neardup.lock, copies, closes. Do not call it on a directory this
 * process has open with nd_store_open() (LMDB forbids opening one
 * environment twice in a process); use nd_store_backup() there. Returns 0
 * or -errno with a reason in err: also -ENOENT (no store in src_dir),
 * -EINVAL (corrupt file). */
int nd_store_backup_path(const char *src_dir, const char *dst_dir, char *err, size_t errlen);

/* True while the last commit succeeded (storage writable). Becomes false
 * when a commit fails (map or disk full, I/O error) and true again at the
 * next commit that succeeds and wrote something (deletes of missing records
 * and refused duplicate puts prove nothing). To find out without waiting
 * for a change, the store probes: at open, and every second while it is
 * not writable and no change is queued, it commits 16 KiB of new pages
 * into its info database and deletes them again; writable follows the
 * probe's result (stats.probes counts them). */
static inline bool nd_store_writable(const nd_store *st)
{
    return nd_store_base_of(st)->ops->writable(st);
}

#define ND_STORE_COMMIT_BUCKETS 14 /* bounds of the commit-latency histogram */

/* Upper bounds, in microseconds and increasing, of the buckets of
 * nd_store_stats.commit_buckets. */
extern const uint64_t nd_store_commit_bucket_us[ND_STORE_COMMIT_BUCKETS];

struct nd_store_stats {
    uint64_t commits;        /* write transactions committed */
    uint64_t changes;        /* changes in those transactions */
    uint64_t failed_commits; /* write transactions that failed */
    uint64_t failed_changes; /* changes whose callback got an error other
                              * than -ENOENT */
    uint64_t max_batch;      /* most changes in one committed transaction */
    uint64_t queued;         /* changes waiting for the commit thread now */
    uint64_t reopens;        /* environment reopened after a fatal error */
    uint64_t appended;       /* committed puts that took the append path
                              * (time above every stored one) */
    uint64_t probes;         /* writability probes run (see nd_store_writable) */
    uint64_t commit_us_sum;  /* time spent in committed write transactions
                              * (begin, apply, commit with fsync), in us */
    uint64_t commit_buckets[ND_STORE_COMMIT_BUCKETS + 1];
    /* committed transactions by duration: [i]
                              * counts those <= nd_store_commit_bucket_us[i]
                              * and above the previous bound (not
                              * cumulative); the last counts the rest */
};

/* Copies the counters since open into *out. Does not allocate. */
static inline void nd_store_get_stats(nd_store *st, nd_store_stats *out)
{
    nd_store_base_of(st)->ops->get_stats(st, out);
}

/* Commits every queued change (their callbacks run; -ESHUTDOWN only for a
 * change that cannot be committed because the environment is gone), stops
 * the commit thread, flushes (also with sync false), closes the environment
 * and releases neardup.lock. NULL is allowed. No other call on st may be
 * running or follow. */
static inline void nd_store_close(nd_store *st)
{
    if (st)
        nd_store_base_of(st)->ops->close(st);
}

/* ---- the event feed (feed.h) ---- */

/* Visits the feed's events in order from from: ascending, those after seq
 * from; descending, those before seq from (from 0: from the newest),
 * until visit returns non-zero (the event it was handed is valid only
 * during the call). A read transaction; any thread. Returns 0, the visit's
 * non-zero value, or -errno. */
static inline int nd_store_feed_scan(nd_store *st, uint64_t from, bool descending,
                                     int (*visit)(void *arg, const struct nd_event_rec *ev),
                                     void *arg)
{
    return nd_store_base_of(st)->ops->feed_scan(st, from, descending, visit, arg);
}

/* The oldest and the newest seq the feed holds (both 0: none ever; when
 * every event was pruned, oldest is latest + 1). Any thread. */
static inline void nd_store_feed_bounds(nd_store *st, uint64_t *oldest, uint64_t *latest)
{
    nd_store_base_of(st)->ops->feed_bounds(st, oldest, latest);
}

/* The events after seq (ascending), at most limit of them: the consumer's
 * call (webhooks). Returns as nd_store_feed_scan(). */
int nd_store_events_after(nd_store *st, uint64_t after, size_t limit,
                          int (*visit)(void *arg, const struct nd_event_rec *ev), void *arg);

/* The newest event's seq (0: none). Any thread; no transaction. */
static inline uint64_t nd_store_events_latest(nd_store *st)
{
    uint64_t oldest, latest;
    nd_store_feed_bounds(st, &oldest, &latest);
    return latest;
}

/* Keeps the events after seq from age retention (the lowest position not
 * yet delivered everywhere; UINT64_MAX, the default: none held). Any
 * thread. */
static inline void nd_store_feed_hold(nd_store *st, uint64_t seq)
{
    nd_store_base_of(st)->ops->feed_hold(st, seq);
}

#endif
