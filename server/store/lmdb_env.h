/* lmdb_env.h - the LMDB store's shared lower piece (private to
 * server/store/): what every file of the LMDB store uses and owns none of
 * the store's behaviour. It owns the constants of the databases and the
 * write queue, the queued write (write_op), struct nd_store, the result of
 * a write transaction (txn_result), the byte helpers, the LMDB error maps,
 * the key and event codecs of a queued write (over record.h's value
 * layouts) and, in lmdb_env.c, the environment's small helpers: read
 * transactions, paths, open errors, the size check, the lock file claim.
 *
 * The files of the LMDB store, from the top down (each uses only those
 * below it):
 *   store_lmdb.c     the store's face: open, reads, scans, backup, stats,
 *                    close, the ops table
 *   lmdb_commit.c    the queued writes and the group-commit thread
 *                    (lmdb_commit.h)
 *   lmdb_open.c      opening and reopening the environment (lmdb_open.h)
 *   lmdb_journals.c  the journals: detections (index, retention), the
 *                    audit log (its index by document, retention)
 *                    (lmdb_journals.h)
 *   lmdb_env.c       this header's helpers
 * store_lmdb.c describes the store (files, keys, databases, concurrency,
 * space, headroom); record.c the value layouts. */
#ifndef ND_LMDB_ENV_H
#define ND_LMDB_ENV_H

#include "store.h"
#include "record.h"
#include "retention.h"
#include "readahead.h"
#include "feed.h"
#include "clock.h"
#include "json.h"
#include "text_pack.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define ND_STORE_FORMAT 2u /* store format in info/format */
#define KEY_SIZE 8u        /* big-endian registered_at_us */
#define EV_PREFIX 17u      /* an event in a write: kind byte, key (16) */
#define EV_KEY 16u         /* owner_at, at_us: big-endian */
#define IDX_KEY 24u        /* detection_ids: owner_at, XXH3-128 of the copy id */
#define AIDX_KEY 32u       /* audit_documents: XXH3-128 of the document, owner_at, at_us */
#define TRIM_SLACK 64u     /* audit entries a commit may drop beyond those it adds */
#define SUBJECT_MEMBERS 16 /* members read of an audit value for its document */

#define DB_INFO "info"
#define DB_RECORDS "records"
#define DB_SKETCHES "sketches"
#define DB_DETECTIONS "detections"
#define DB_DETECTION_IDS "detection_ids"
#define DB_AUDIT "audit"
#define DB_AUDIT_DOCS "audit_documents"
#define DB_EVENTS "events" /* the feed: seq -> feed.h value */
#define DB_TEXTS "texts"
#define TEXT_KEY 12u /* texts: registered_at_us (8), chunk number (4): big-endian */
/* Bytes of a packed text per chunk. A value over ~2 KB of a 4 KiB page
 * goes to overflow pages of whole pages, which cost the dev corpus's kept
 * texts 32 % over their packed bytes; chunks of 2018 bytes (two a leaf)
 * 21 %, 998 (four) 15 %, 658 (six: 8 + 12 + 658 + 2 = 680 bytes a node, six
 * fill the 4080 bytes of a leaf) 13 % (proto/scale.md "Kept texts"). */
#define TEXT_CHUNK 658u
#define MAX_DBS 16 /* 9 used: room for databases added later */
#define INFO_KEY "format"
#define SEQ_KEY "stream_seq" /* info: the greatest stream sequence applied (8 bytes, BE) */
#define INFO_MAGIC "ndst"

#define LOCK_NAME "neardup.lock"
#define DATA_NAME "data.mdb"
#define FILE_MODE 0600
#define MAX_READERS 256u
#define MAX_BATCH 65536u         /* max_batch is clamped to this */
#define QUEUE_MIN 1024u          /* queued writes allowed at least */
#define QUEUE_BYTES (64u << 20)  /* queued bytes allowed (one write always) */
#define FULL_SLACK (1u << 20)    /* a filesystem with less available is full */
#define PROBE_KEY "probe"        /* info key written by lmdb_probe_space() */
#define PROBE_BYTES (64u << 10)  /* room a probe needs: a large record with its kept text
                                  * and the pages of the trees it touches */
#define PROBE_MS 1000            /* probe interval while not writable and idle */
#define HEADROOM_MIN (1u << 20)  /* zeroed bytes kept past the last page, at least */
#define HEADROOM_MAX (64u << 20) /* ... and at most (else 1/16 of the file) */
#define ZERO_CHUNK (1u << 20)    /* bytes of zeros written by one pwrite */

enum write_kind {
    OP_PUT,        /* data: key (KEY_SIZE bytes), value, the packed text
                        * (text_len bytes, 0: none), sketch, then
                        * the audit event (ev_len bytes, 0: none) */
    OP_DELETE_AT,  /* data: key, the id, then the audit event (ev_len) */
    OP_REPLACE_AT, /* data: key, then value, text, sketch (as OP_PUT) */
    OP_AMEND,      /* data: key, value, the records it supersedes
                        * (sup_len bytes: each key, u16 id_len, id), then
                        * the audit event (ev_len bytes, 0: none); the
                        * sketch stays (keep_sketch) */
    OP_EVENT,      /* data: the event (ev_len == len) */
};

typedef struct write_op {
    struct write_op *next;
    nd_store_done_fn done;
    void *arg;
    int status;
    enum write_kind kind;
    uint32_t len;        /* bytes of data (key, value, sketch) */
    uint32_t sketch_len; /* put / replace: the last bytes of data are
                                 * the sketch (0: none) */
    uint32_t text_len;   /* put / replace: the packed text's bytes,
                          * after the value (0: none) */
    bool keep_sketch;    /* delete: leave the sketch and the text (see
                          * apply_one); amend: always */
    uint32_t ev_len;     /* the last bytes of data are an event (encoded
                                 * by encode_event; 0: none); a put's sketch
                                 * comes before it */
    uint32_t sup_len;    /* amend: the bytes before the event naming the
                          * records it supersedes (0: none) */
    uint64_t stream_seq; /* the replication stream's entry (0: none) */
    size_t size;         /* bytes charged to the queue */
    unsigned char data[];
} write_op;

struct nd_store {
    nd_store_base base; /* first: the interface (store.h) */
    char *dir;
    nd_store_options opts;
    int lock_fd;

    pthread_rwlock_t env_lock; /* shared: any env use off the commit
                                 * thread; exclusive: reopening env */
    MDB_env *env;              /* NULL after a failed reopen */
    MDB_dbi dbi;
    MDB_dbi sketch_dbi;                     /* registered_at_us -> encoded sketch */
    MDB_dbi text_dbi;                       /* registered_at_us -> packed text */
    MDB_dbi det_dbi, detidx_dbi, audit_dbi; /* the journals (see the top) */
    MDB_dbi auditdoc_dbi;                   /* the audit log by document */
    nd_json_scratch js;                     /* commit thread (and open): audit subjects */
    MDB_dbi info_dbi;
    MDB_dbi feed_dbi;            /* the event feed (lmdb_feed.c) */
    _Atomic uint64_t feed_seq;   /* the greatest feed seq committed */
    uint64_t feed_next;          /* commit thread: the seq the next event takes */
    _Atomic uint64_t feed_hold;  /* events after this are kept whatever their age */
    pthread_mutex_t readahead_mu;  /* guards readahead */
    nd_readahead *readahead;       /* reading the records ahead of a scan (or NULL) */
    _Atomic uint64_t stream_seq;   /* info/stream_seq as last committed */
    int64_t last_key;              /* commit thread: the greatest key known to be
                                 * stored (-1: none), the MDB_APPEND hint */
    unsigned long long zeroed_end; /* commit thread: data.mdb is at least this
                                 * long (bytes; 0: not known yet) */
    void *zeros;                   /* ZERO_CHUNK zero bytes, made on first use */

    pthread_mutex_t mu;   /* guards the fields down to `closing` */
    pthread_cond_t work;  /* commit thread: writes queued / closing */
    pthread_cond_t space; /* submitters: queue has room / closing */
    write_op *head, *tail;
    size_t queued, queued_bytes, queue_max;
    bool gathering; /* commit thread: waiting for a full batch (gather_ms) */
    bool hurry;     /* nd_store_hurry(): commit what is queued now */
    bool closing;
    bool thread_started;
    pthread_t thread;

    atomic_bool writable;
    _Atomic uint64_t commits, writes, failed_commits, failed_writes;
    _Atomic uint64_t max_batch, reopens, appended, probes;
    _Atomic uint64_t commit_us_sum, commit_buckets[ND_STORE_COMMIT_BUCKETS + 1];
};

/* Writes the formatted reason into err (if any) and returns rc. */
static inline int __attribute__((format(printf, 4, 5)))
set_err(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* The byte helpers of record.h, by the names this store's code uses:
 * little-endian values, big-endian keys. */
static inline void wr32(unsigned char *p, uint32_t v)
{
    nd_le_put(p, v, 4);
}

static inline void wr64(unsigned char *p, uint64_t v)
{
    nd_le_put(p, v, 8);
}

static inline uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)nd_le_get(p, 4);
}

static inline uint64_t rd64(const unsigned char *p)
{
    return nd_le_get(p, 8);
}

static inline uint16_t rd16(const unsigned char *p)
{
    return (uint16_t)nd_le_get(p, 2);
}

static inline void wr_key(unsigned char *p, int64_t t)
{
    nd_key_put(p, t);
}

static inline int64_t rd_key(const unsigned char *p)
{
    return nd_key_get(p);
}

/* The key of chunk i of the text kept with the record at time t. */
static inline void wr_text_key(unsigned char p[TEXT_KEY], int64_t t, uint32_t i)
{
    nd_key_put(p, t);
    p[8] = (unsigned char)(i >> 24);
    p[9] = (unsigned char)(i >> 16);
    p[10] = (unsigned char)(i >> 8);
    p[11] = (unsigned char)i;
}

static inline bool is_space_error(int rc)
{
    return rc == MDB_MAP_FULL || rc == MDB_TXN_FULL || rc == ENOSPC || rc == EDQUOT || rc == EFBIG;
}

static inline bool is_corrupt_error(int rc)
{
    return rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED ||
           rc == MDB_PAGE_NOTFOUND || rc == MDB_INCOMPATIBLE || rc == MDB_BAD_VALSIZE;
}

/* Maps an LMDB or system error code to -errno. */
static inline int mdb_errno(int rc)
{
    if (rc == 0)
        return 0;
    if (rc == MDB_NOTFOUND)
        return -ENOENT;
    if (is_space_error(rc))
        return -ENOSPC;
    if (rc == MDB_READERS_FULL || rc == MDB_MAP_RESIZED)
        return -EAGAIN;
    if (rc > 0)
        return -rc;
    return -EIO; /* MDB_PANIC, corruption, ... */
}

/* Fills r from the value v stored under key k (pointers into v). Returns
 * 0 or -EBADMSG. */
static inline int decode_value(const MDB_val *k, const MDB_val *v, nd_record *r)
{
    if (k->mv_size != KEY_SIZE)
        return -EBADMSG;
    return nd_record_value_decode(nd_key_get(k->mv_data), v->mv_data, v->mv_size, r);
}

/* Points *id at the id inside value v. Returns its length, or 0 (see
 * nd_record_value_id()). */
static inline size_t value_id(const MDB_val *v, const unsigned char **id)
{
    return nd_record_value_id(v->mv_data, v->mv_size, id);
}

/* Bytes encode_event() writes for ev. */
static inline size_t event_size(const nd_store_event *ev)
{
    return EV_PREFIX + nd_event_value_size(ev);
}

/* An event in a queued write: its kind (1 byte), its key (owner_at, at_us,
 * 16 bytes big-endian), then its value as stored (record.h). */
static inline void encode_event(unsigned char *p, const nd_store_event *ev)
{
    p[0] = (unsigned char)ev->kind;
    wr_key(p + 1, ev->owner_at);
    wr_key(p + 9, ev->at_us);
    nd_event_value_encode(p + EV_PREFIX, ev);
}

/* Fills ev from a stored key and value (pointers into them). Returns 0 or
 * -EBADMSG. */
static inline int decode_event(nd_event_kind kind, const MDB_val *k, const MDB_val *v,
                               nd_store_event *ev)
{
    if (k->mv_size != EV_KEY)
        return -EBADMSG;
    const unsigned char *key = k->mv_data;
    return nd_event_value_decode(kind, rd_key(key), rd_key(key + 8), v->mv_data, v->mv_size, ev);
}

/* What one write transaction did, for the counters. */
typedef struct txn_result {
    bool wrote;      /* some write modified the database */
    size_t appended; /* puts that took the MDB_APPEND path */
    size_t audits;   /* audit entries written (retention may drop as many) */
} txn_result;

/* ---- lmdb_env.c ---- */

/* Begins a read transaction with env_lock held shared; the caller ends it
 * with lmdb_read_end(). Returns 0 or -errno (lock released). */
int lmdb_read_begin(nd_store *st, MDB_txn **txn);

/* Ends a read transaction of lmdb_read_begin(). */
void lmdb_read_end(nd_store *st, MDB_txn *txn);

/* dir/name in a new string (caller frees), or NULL when out of memory. */
char *lmdb_path_join(const char *dir, const char *name);

/* Refuses a data.mdb in dir shorter than the pages its meta page
 * references. Returns 0, or -EIO / -EINVAL with err set. */
int lmdb_check_size(MDB_env *env, const char *dir, char *err, size_t errlen);

/* Describes the LMDB or system error rc of step in opening the store in dir
 * into err. Returns the -errno it maps to. */
int lmdb_open_err(int rc, const char *dir, const char *step, char *err, size_t errlen);

/* Reserves the blocks of dir/lock.mdb before LMDB maps it. Returns 0 or
 * -ENOMEM / -ENOSPC with err set. */
int lmdb_claim_lock_file(const char *dir, char *err, size_t errlen);

#endif
