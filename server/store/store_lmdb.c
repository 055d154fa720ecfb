/* store.c - the durable registry of documents, on LMDB: the LMDB
 * implementation of store.h's interface (lmdb_ops; nd_store_open()), and
 * its on-commit observer, called from the commit thread (see store.h).
 *
 * Files. dir/data.mdb and dir/lock.mdb belong to LMDB. dir/neardup.lock is
 * ours: the open store holds flock(LOCK_EX) on it (and writes its pid into
 * it), because LMDB itself lets any number of processes write one
 * environment. The environment holds named databases: "info" (one key,
 * "format": "ndst" + u32 store format, now 2), "records", "sketches" and
 * the journals "detections", "detection_ids", "audit" and
 * "audit_documents" (below).
 * Before LMDB maps lock.mdb its blocks are reserved (claim_lock_file), so a
 * full disk gives -ENOSPC instead of SIGBUS; a first open that fails removes
 * the data.mdb it created; a data.mdb shorter than its pages is refused.
 *
 * Keys (store format 2). A record's key is its registered_at_us as 8 bytes
 * big-endian, so LMDB's bytewise order is time order and, because the
 * server hands out strictly increasing times, every insert lands at the
 * right edge of the B-tree: a commit dirties the rightmost path only, and
 * MDB_APPEND fills leaf pages completely instead of splitting them in half.
 * Store format 1 (keyed by id, value layout 1) is refused at open. There is
 * no id index on disk: the daemon keeps id -> record in memory.
 *
 * Values. A record's value is in value layout 4 (3 and 2 read too), an
 * event's in event value layout 1: both are described and coded in
 * record.c, with the checks every record and event passes first.
 *
 * Events (nd_store_event_put) live in their own databases, keyed by
 * owner_at then at_us (8 bytes big-endian each): "detections" and "audit".
 * Their value: event value layout 1 (record.c). "detection_ids" indexes detections: the key owner_at
 * (8) + XXH3-128 of the copy id (16) -> its at_us (8, big-endian); the
 * 8-byte key owner_at alone -> the number of detections of that owner
 * (u64), which retention (detections_max) reads. A detection of a copy id
 * detected before overwrites that entry's value under its key (its first
 * time stays); a deleted record's detections, index entries and count go
 * in the deletion's transaction. "audit_documents" indexes the audit log
 * by the "document" member of its values: the key XXH3-128 of the document
 * (16), owner_at (8), at_us (8) -> nothing; retention (audit_max_entries,
 * audit_max_age_us) drops the oldest entries of "audit" with their index
 * keys, at most the entries a commit adds + TRIM_SLACK per commit. All are
 * created when a store without them opens (audit_documents is then built
 * from the log, once); they are written in the transactions of the changes
 * (a detection; a put's, delete's or amend's audit event) that make them.
 * A registration's audit entry and its index key cost ~270 bytes of
 * data.mdb (+20 % over 1000 registrations of ~2 KB texts) and 4 more dirty
 * pages in a commit of one registration (the index key's leaf lies at a
 * random place); measured on 2 shared cores against the build before them:
 * latency 1.01x (one client), durable registrations/s 1.00x (loadgen).
 * The "sketches" database holds each record's encoded sketch (sketch.h;
 * read only for the candidates of a query, so start-up scans stay small)
 * under the record's key, written and deleted in the record's transaction.
 *
 * Concurrency. One mutex (mu) guards the FIFO of queued changes; submitters
 * append and signal `work`; the commit thread takes up to max_batch changes
 * at once (everything that arrived while it was committing; with
 * opts.gather_ms, a bulk load's, it first waits that long for a full batch
 * unless nd_store_hurry() or closing ends the wait), applies them in
 * one write transaction, commits (fsync unless sync is false), then runs the
 * callbacks with no lock held. The queue is bounded by count and bytes;
 * submitters wait on `space` when it is full. Reads use their own read
 * transactions (MDB_NOTLS: any thread, several per thread) under env_lock
 * held shared; the commit thread takes env_lock exclusively only to close
 * and reopen the environment after LMDB reports a fatal error (MDB_PANIC,
 * left by a failed meta-page write), so that service resumes once the disk
 * recovers.
 *
 * Space. A write that finds the map or the disk full makes LMDB fail the
 * transaction; it is aborted, so nothing of it is visible or half-written.
 * A failed batch of several changes is retried one change per transaction,
 * so the changes that still fit are committed and only the rest get
 * -ENOSPC. Every later batch tries again, so writes resume by themselves
 * when space is freed (deleted records, finished readers, disk space), or
 * after a restart with a larger map_size; while no change comes, a probe
 * on the idle commit thread (probe_space) finds out, so that readiness
 * returns by itself. LMDB reports a write that the
 * filesystem cut short (it filled up during the write: likely with appends,
 * whose new pages are contiguous and go out in one pwritev) as EIO, like a
 * device error; a commit failing with EIO while the filesystem has almost
 * nothing available is treated as full (commit_error).
 *
 * Headroom. Appends would grow data.mdb by a page or two per commit, and on
 * ext4 (and most filesystems) an fdatasync that follows a size change must
 * also commit the filesystem journal: about twice the time and CPU of one
 * that only flushes overwritten blocks (measured on this project's CI
 * machines: 770 vs 600 us and 176 vs 100 us of CPU per commit). So the
 * commit thread keeps real zeros (written, not fallocated: unwritten
 * extents would need the same journal commit when LMDB first writes them)
 * ahead of LMDB's last page: 1/16 of the file, 1 to 64 MiB, topped up
 * between transactions (keep_headroom) while the filesystem has room to
 * spare. LMDB never reads past its last page, so the zeros are invisible to
 * it, to readers and to backups (mdb_env_copy copies used pages only). */
#include "store.h"
#include "record.h"
#include "retention.h"
#include "readahead.h"
#include "clock.h"
#include "json.h"

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
#define EV_PREFIX 17u         /* an event in a change: kind byte, key (16) */
#define EV_KEY 16u            /* owner_at, at_us: big-endian */
#define IDX_KEY 24u           /* detection_ids: owner_at, XXH3-128 of the copy id */
#define AIDX_KEY 32u          /* audit_documents: XXH3-128 of the document, owner_at, at_us */
#define TRIM_SLACK 64u        /* audit entries a commit may drop beyond those it adds */
#define SUBJECT_MEMBERS 16    /* members read of an audit value for its document */

#define DB_INFO "info"
#define DB_RECORDS "records"
#define DB_SKETCHES "sketches"
#define DB_DETECTIONS "detections"
#define DB_DETECTION_IDS "detection_ids"
#define DB_AUDIT "audit"
#define DB_AUDIT_DOCS "audit_documents"
#define MAX_DBS 8
#define INFO_KEY "format"
#define SEQ_KEY "stream_seq" /* info: the greatest stream sequence applied (8 bytes, BE) */
#define INFO_MAGIC "ndst"

#define LOCK_NAME "neardup.lock"
#define DATA_NAME "data.mdb"
#define FILE_MODE 0600
#define MAX_READERS 256u
#define MAX_BATCH 65536u         /* max_batch is clamped to this */
#define QUEUE_MIN 1024u          /* queued changes allowed at least */
#define QUEUE_BYTES (64u << 20)  /* queued bytes allowed (one change always) */
#define FULL_SLACK (1u << 20)    /* a filesystem with less available is full */
#define PROBE_KEY "probe"        /* info key written by probe_space() */
#define PROBE_BYTES (16u << 10)  /* room a probe needs: a large record */
#define PROBE_MS 1000            /* probe interval while not writable and idle */
#define HEADROOM_MIN (1u << 20)  /* zeroed bytes kept past the last page, at least */
#define HEADROOM_MAX (64u << 20) /* ... and at most (else 1/16 of the file) */
#define ZERO_CHUNK (1u << 20)    /* bytes of zeros written by one pwrite */

enum change_kind {
    CHANGE_PUT,        /* data: key (KEY_SIZE bytes), value, sketch, then
                        * the audit event (ev_len bytes, 0: none) */
    CHANGE_DELETE_AT,  /* data: key, the id, then the audit event (ev_len) */
    CHANGE_REPLACE_AT, /* data: key, then value (as CHANGE_PUT) */
    CHANGE_AMEND,      /* data: key, value, the records it supersedes
                        * (sup_len bytes: each key, u16 id_len, id), then
                        * the audit event (ev_len bytes, 0: none); the
                        * sketch stays (keep_sketch) */
    CHANGE_EVENT,      /* data: the event (ev_len == len) */
};

typedef struct change {
    struct change *next;
    nd_store_done_fn done;
    void *arg;
    int status;
    enum change_kind kind;
    uint32_t len;        /* bytes of data (key, value, sketch) */
    uint32_t sketch_len; /* put / replace: the last bytes of data are
                                 * the sketch (0: none) */
    bool keep_sketch;    /* delete: leave the sketch (see apply_one);
                                 * amend: always */
    uint32_t ev_len;     /* the last bytes of data are an event (encoded
                                 * by encode_event; 0: none); a put's sketch
                                 * comes before it */
    uint32_t sup_len;    /* amend: the bytes before the event naming the
                          * records it supersedes (0: none) */
    uint64_t stream_seq; /* the replication stream's entry (0: none) */
    size_t size;         /* bytes charged to the queue */
    unsigned char data[];
} change;

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
    MDB_dbi det_dbi, detidx_dbi, audit_dbi; /* the journals (see the top) */
    MDB_dbi auditdoc_dbi;                   /* the audit log by document */
    nd_json_scratch js;                     /* commit thread (and open): audit subjects */
    MDB_dbi info_dbi;
    pthread_mutex_t readahead_mu;  /* guards readahead */
    nd_readahead *readahead;       /* reading the records ahead of a scan (or NULL) */
    _Atomic uint64_t stream_seq;   /* info/stream_seq as last committed */
    int64_t last_key;              /* commit thread: the greatest key known to be
                                 * stored (-1: none), the MDB_APPEND hint */
    unsigned long long zeroed_end; /* commit thread: data.mdb is at least this
                                 * long (bytes; 0: not known yet) */
    void *zeros;                   /* ZERO_CHUNK zero bytes, made on first use */

    pthread_mutex_t mu;   /* guards the fields down to `closing` */
    pthread_cond_t work;  /* commit thread: changes queued / closing */
    pthread_cond_t space; /* submitters: queue has room / closing */
    change *head, *tail;
    size_t queued, queued_bytes, queue_max;
    bool gathering; /* commit thread: waiting for a full batch (gather_ms) */
    bool hurry;     /* nd_store_hurry(): commit what is queued now */
    bool closing;
    bool thread_started;
    pthread_t thread;

    atomic_bool writable;
    _Atomic uint64_t commits, changes, failed_commits, failed_changes;
    _Atomic uint64_t max_batch, reopens, appended, probes;
    _Atomic uint64_t commit_us_sum, commit_buckets[ND_STORE_COMMIT_BUCKETS + 1];
};

const uint64_t nd_store_commit_bucket_us[ND_STORE_COMMIT_BUCKETS] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 5000000,
};

/* Counts one committed transaction of us microseconds (commit thread). */
static void count_commit_time(nd_store *st, uint64_t us)
{
    unsigned b = 0;
    while (b < ND_STORE_COMMIT_BUCKETS && us > nd_store_commit_bucket_us[b])
        b++;
    atomic_fetch_add(&st->commit_buckets[b], 1);
    atomic_fetch_add(&st->commit_us_sum, us);
}

/* ---- helpers ------------------------------------------------------------ */

/* Writes the formatted reason into err (if any) and returns rc. */
static int __attribute__((format(printf, 4, 5)))
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

static void wr32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void wr64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static uint16_t rd16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* Keys are big-endian so that LMDB's bytewise order is numeric order. */
static void wr_key(unsigned char *p, int64_t t)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)((uint64_t)t >> (56 - 8 * i));
}

static int64_t rd_key(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

static bool is_space_error(int rc)
{
    return rc == MDB_MAP_FULL || rc == MDB_TXN_FULL || rc == ENOSPC || rc == EDQUOT || rc == EFBIG;
}

static bool is_corrupt_error(int rc)
{
    return rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED ||
           rc == MDB_PAGE_NOTFOUND || rc == MDB_INCOMPATIBLE || rc == MDB_BAD_VALSIZE;
}

/* Maps an LMDB or system error code to -errno. */
static int mdb_errno(int rc)
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

/* fsyncs a directory so that entries created in it are durable. */
static int sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + 1 + strlen(name) + 1;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Makes sure dir is a directory, creating it (one level) if missing.
 * *created tells whether it did. Returns 0 or -errno with err set. */
static int ensure_dir(const char *dir, const char *what, bool *created, char *err, size_t errlen)
{
    struct stat sb;
    *created = false;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return set_err(err, errlen, -ENOTDIR, "%s %s is not a directory", what, dir);
        return 0;
    }
    if (errno != ENOENT) {
        int e = errno;
        return set_err(err, errlen, -e, "%s %s: %s", what, dir, strerror(e));
    }
    if (mkdir(dir, 0700) == 0) {
        *created = true;
        return 0;
    }
    int e = errno;
    if (e == EEXIST)
        return 0;
    return set_err(err, errlen, -e, "%s %s does not exist and cannot be created: %s", what, dir,
                   strerror(e));
}

static int dir_parent_sync(const char *dir)
{
    char *copy = strdup(dir);
    if (!copy)
        return -ENOMEM;
    char *slash = strrchr(copy, '/');
    int rc;
    if (!slash)
        rc = sync_dir(".");
    else {
        if (slash == copy)
            slash[1] = '\0';
        else
            *slash = '\0';
        rc = sync_dir(copy);
    }
    free(copy);
    return rc;
}

/* ---- value layout -------------------------------------------------------- */

/* Fills r from the value v stored under key k (pointers into v). Returns
 * 0 or -EBADMSG. */
static int decode_value(const MDB_val *k, const MDB_val *v, nd_record *r)
{
    if (k->mv_size != KEY_SIZE)
        return -EBADMSG;
    return nd_record_value_decode(nd_key_get(k->mv_data), v->mv_data, v->mv_size, r);
}

/* Points *id at the id inside value v. Returns its length, or 0 (see
 * nd_record_value_id()). */
static size_t value_id(const MDB_val *v, const unsigned char **id)
{
    return nd_record_value_id(v->mv_data, v->mv_size, id);
}

/* ---- events ----------------------------------------------------------------- */

/* Bytes encode_event() writes for ev. */
static size_t event_size(const nd_store_event *ev)
{
    return EV_PREFIX + nd_event_value_size(ev);
}

/* An event in a queued write: its kind (1 byte), its key (owner_at, at_us,
 * 16 bytes big-endian), then its value as stored (record.h). */
static void encode_event(unsigned char *p, const nd_store_event *ev)
{
    p[0] = (unsigned char)ev->kind;
    wr_key(p + 1, ev->owner_at);
    wr_key(p + 9, ev->at_us);
    nd_event_value_encode(p + EV_PREFIX, ev);
}

/* Fills ev from a stored key and value (pointers into them). Returns 0 or
 * -EBADMSG. */
static int decode_event(nd_event_kind kind, const MDB_val *k, const MDB_val *v, nd_store_event *ev)
{
    if (k->mv_size != EV_KEY)
        return -EBADMSG;
    const unsigned char *key = k->mv_data;
    return nd_event_value_decode(kind, rd_key(key), rd_key(key + 8), v->mv_data, v->mv_size, ev);
}

int nd_store_audit_subject(const char *value, size_t len, nd_json_scratch *scratch,
                           const char **doc, size_t *doc_len)
{
    nd_json_member m[SUBJECT_MEMBERS];
    nd_json_error jerr;
    size_t n;
    if (!value || len < 2 || value[0] != '{' ||
        nd_json_read_object(value, len, scratch, m, SUBJECT_MEMBERS, &n, &jerr) < 0)
        return 0;
    const nd_json_member *d = nd_json_find(m, n, "document");
    if (!d || d->value.type != ND_JSON_STRING || d->value.str_len == 0 ||
        d->value.str_len > ND_ID_MAX)
        return 0;
    *doc = d->value.str;
    *doc_len = d->value.str_len;
    return 1;
}

/* audit_documents key of an audit entry of document doc at (owner, at):
 * XXH3-128 of the document, then owner and at big-endian. */
static void audit_doc_key(unsigned char *k, const char *doc, size_t len, int64_t owner, int64_t at)
{
    XXH128_canonical_t h;
    XXH128_canonicalFromHash(&h, XXH3_128bits(doc, len));
    memcpy(k, h.digest, 16);
    wr_key(k + 16, owner);
    wr_key(k + 24, at);
}

/* Indexes (put true) or unindexes the audit entry stored under key k (16
 * bytes) with value v by its document, if it names one. Returns 0 or the
 * LMDB error. */
static int audit_doc_index(nd_store *st, MDB_txn *txn, const unsigned char *k, const MDB_val *v,
                           bool put)
{
    MDB_val key = {EV_KEY, (void *)k};
    nd_store_event ev;
    const char *doc;
    size_t dlen;
    unsigned char ak[AIDX_KEY];
    if (decode_event(ND_EVENT_AUDIT, &key, v, &ev) ||
        !nd_store_audit_subject(ev.value, ev.value_len, &st->js, &doc, &dlen))
        return 0; /* names no document: not indexed */
    audit_doc_key(ak, doc, dlen, ev.owner_at, ev.at_us);
    MDB_val ik = {AIDX_KEY, ak}, iv = {0, NULL};
    int rc = put ? mdb_put(txn, st->auditdoc_dbi, &ik, &iv, 0)
                 : mdb_del(txn, st->auditdoc_dbi, &ik, NULL);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* ---- environment ---------------------------------------------------------- */

/* Refuses a data.mdb shorter than the pages its meta page references (a
 * truncated copy would otherwise crash with SIGBUS on first access). */
static int check_size(MDB_env *env, const char *dir, char *err, size_t errlen)
{
    MDB_envinfo info;
    MDB_stat est;
    struct stat sb;
    int fd;
    if (mdb_env_info(env, &info) || mdb_env_stat(env, &est) || mdb_env_get_fd(env, &fd) ||
        fstat(fd, &sb))
        return set_err(err, errlen, -EIO, "cannot inspect %s/" DATA_NAME, dir);
    unsigned long long need = ((unsigned long long)info.me_last_pgno + 1) * est.ms_psize;
    if ((unsigned long long)sb.st_size < need)
        return set_err(err, errlen, -EINVAL,
                       "%s/" DATA_NAME " is truncated (%lld bytes, its pages need %llu)", dir,
                       (long long)sb.st_size, need);
    return 0;
}

static int open_err(int rc, const char *dir, const char *step, char *err, size_t errlen)
{
    if (is_corrupt_error(rc))
        return set_err(err, errlen, -EINVAL,
                       "%s/" DATA_NAME " is corrupt or not a neardup store (%s: %s)", dir, step,
                       mdb_strerror(rc));
    if (is_space_error(rc))
        return set_err(err, errlen, -ENOSPC, "no space for the store in %s (%s: %s)", dir, step,
                       mdb_strerror(rc));
    if (rc == EACCES || rc == EPERM || rc == EROFS)
        return set_err(err, errlen, rc == EROFS ? -EROFS : -EACCES,
                       "data directory %s is not writable (%s: %s)", dir, step, mdb_strerror(rc));
    if (rc == ENOMEM)
        return set_err(err, errlen, -ENOMEM, "cannot map the store in %s (%s: %s); lower map_size?",
                       dir, step, mdb_strerror(rc));
    return set_err(err, errlen, mdb_errno(rc), "cannot open the store in %s (%s: %s)", dir, step,
                   mdb_strerror(rc));
}

/* Reserves the blocks of lock.mdb before LMDB maps it. LMDB creates the
 * file sparse and writes its header and reader slots through a shared
 * mapping; touching a hole on a full disk raises SIGBUS. fallocate with
 * KEEP_SIZE reserves the space without changing the file's size, which
 * other processes that have it mapped rely on. Returns 0 or -ENOSPC. */
static int claim_lock_file(const char *dir, char *err, size_t errlen)
{
    char *path = path_join(dir, "lock.mdb");
    if (!path)
        return set_err(err, errlen, -ENOMEM, "out of memory");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, FILE_MODE);
    free(path);
    if (fd < 0)
        return 0; /* read-only directory: LMDB runs without it */
    struct stat sb;
    off_t want = (off_t)MAX_READERS * 64 + 4096; /* slots + header, rounded up */
    int rc = 0;
    if (fstat(fd, &sb) == 0 && sb.st_size > want)
        want = sb.st_size;
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, want))
        rc = errno;
    close(fd);
    if (rc == ENOSPC || rc == EDQUOT)
        return set_err(err, errlen, -ENOSPC, "no space for %s/lock.mdb: %s", dir, strerror(rc));
    return 0; /* EOPNOTSUPP etc.: nothing more to do */
}

/* Indexes every stored audit entry by its document (the upgrade of a store
 * without audit_documents). Returns 0 or the LMDB error. */
static int audit_index_all(nd_store *st, MDB_txn *txn)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = mdb_cursor_open(txn, st->audit_dbi, &cur);
    if (rc)
        return rc;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        if (k.mv_size == EV_KEY && (rc = audit_doc_index(st, txn, k.mv_data, &v, true)))
            break;
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Opens (creating them if missing) the databases added after records:
 * sketches (issue 12), detections, detection_ids and audit (issue 13), and
 * audit_documents (built from the audit log when it is missing). */
static int open_added_dbs(MDB_txn *txn, nd_store *st, const char *dir, char *err, size_t errlen)
{
    int rc = mdb_dbi_open(txn, DB_SKETCHES, MDB_CREATE, &st->sketch_dbi);
    if (rc == 0)
        rc = mdb_dbi_open(txn, DB_DETECTIONS, MDB_CREATE, &st->det_dbi);
    if (rc == 0)
        rc = mdb_dbi_open(txn, DB_DETECTION_IDS, MDB_CREATE, &st->detidx_dbi);
    if (rc == 0)
        rc = mdb_dbi_open(txn, DB_AUDIT, MDB_CREATE, &st->audit_dbi);
    if (rc == 0 && (rc = mdb_dbi_open(txn, DB_AUDIT_DOCS, 0, &st->auditdoc_dbi)) == MDB_NOTFOUND) {
        /* A store written before the index: index its audit log now, once. */
        rc = mdb_dbi_open(txn, DB_AUDIT_DOCS, MDB_CREATE, &st->auditdoc_dbi);
        if (rc == 0)
            rc = audit_index_all(st, txn);
    }
    return rc ? open_err(rc, dir, "journal databases", err, errlen) : 0;
}

/* Checks info/format, or creates info and records in a new environment;
 * then opens the added databases into st. */
static int open_dbs(MDB_txn *txn, nd_store *st, const char *dir, char *err, size_t errlen)
{
    MDB_dbi *records = &st->dbi;
    MDB_dbi info;
    MDB_val k = {sizeof(INFO_KEY) - 1, INFO_KEY}, v;
    unsigned char fmt[8];
    int rc = mdb_dbi_open(txn, DB_INFO, 0, &info);
    if (rc == MDB_NOTFOUND) {
        MDB_dbi main;
        MDB_stat ms;
        if ((rc = mdb_dbi_open(txn, NULL, 0, &main)) || (rc = mdb_stat(txn, main, &ms)))
            return open_err(rc, dir, "main database", err, errlen);
        if (ms.ms_entries)
            return set_err(err, errlen, -EINVAL,
                           "%s/" DATA_NAME " is an LMDB file but not a neardup store", dir);
        memcpy(fmt, INFO_MAGIC, 4);
        wr32(fmt + 4, ND_STORE_FORMAT);
        v.mv_size = sizeof(fmt);
        v.mv_data = fmt;
        if ((rc = mdb_dbi_open(txn, DB_INFO, MDB_CREATE, &info)) ||
            (rc = mdb_put(txn, info, &k, &v, 0)) ||
            (rc = mdb_dbi_open(txn, DB_RECORDS, MDB_CREATE, records)))
            return open_err(rc, dir, "create", err, errlen);
        st->info_dbi = info;
        return open_added_dbs(txn, st, dir, err, errlen);
    }
    if (rc)
        return open_err(rc, dir, "info database", err, errlen);
    rc = mdb_get(txn, info, &k, &v);
    if (rc || v.mv_size != 8 || memcmp(v.mv_data, INFO_MAGIC, 4))
        return set_err(err, errlen, -EINVAL, "%s/" DATA_NAME " has no valid format marker", dir);
    uint32_t f = rd32((const unsigned char *)v.mv_data + 4);
    if (f == 1)
        return set_err(err, errlen, -EINVAL,
                       "%s/" DATA_NAME " has store format 1 (records keyed by id), created"
                       " by an older neardup; this build reads format %u (keyed by"
                       " registration time) and does not convert it: move the directory"
                       " away and register the documents again",
                       dir, ND_STORE_FORMAT);
    if (f != ND_STORE_FORMAT)
        return set_err(err, errlen, -EINVAL,
                       "%s/" DATA_NAME " has store format %u%s; this build reads format %u", dir, f,
                       f > ND_STORE_FORMAT ? ", created by a newer neardup" : "", ND_STORE_FORMAT);
    rc = mdb_dbi_open(txn, DB_RECORDS, 0, records);
    if (rc)
        return open_err(rc, dir, "records database", err, errlen);
    st->info_dbi = info;
    /* Created in a store that has none. */
    return open_added_dbs(txn, st, dir, err, errlen);
}

/* info/stream_seq, or 0 when it is not there. */
static uint64_t read_stream_seq(MDB_txn *txn, MDB_dbi info)
{
    MDB_val k = {sizeof(SEQ_KEY) - 1, SEQ_KEY}, v;
    if (mdb_get(txn, info, &k, &v) || v.mv_size != 8)
        return 0;
    return (uint64_t)rd_key(v.mv_data);
}

/* The greatest key in records, or -1 when it is empty (or its last key is
 * not a time: then MDB_APPEND is simply tried and LMDB decides). */
static int64_t read_last_key(MDB_txn *txn, MDB_dbi dbi)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int64_t last = -1;
    if (mdb_cursor_open(txn, dbi, &cur))
        return -1;
    if (mdb_cursor_get(cur, &k, &v, MDB_LAST) == 0 && k.mv_size == KEY_SIZE)
        last = rd_key(k.mv_data);
    mdb_cursor_close(cur);
    return last < 0 ? -1 : last;
}

/* Opens st->env and st->dbi and sets st->last_key. Returns 0 or -errno with
 * err set. */
static int env_open(nd_store *st, char *err, size_t errlen)
{
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    int rc = mdb_env_create(&env);
    if (rc)
        return open_err(rc, st->dir, "mdb_env_create", err, errlen);
    mdb_env_set_maxdbs(env, MAX_DBS);
    mdb_env_set_maxreaders(env, MAX_READERS);
    if (st->opts.map_size)
        mdb_env_set_mapsize(env, st->opts.map_size);
    unsigned flags = MDB_NOTLS | (st->opts.sync ? 0 : MDB_NOSYNC);
    if ((rc = claim_lock_file(st->dir, err, errlen)))
        goto fail;
    rc = mdb_env_open(env, st->dir, flags, FILE_MODE);
    if (rc) {
        rc = open_err(rc, st->dir, "mdb_env_open", err, errlen);
        goto fail;
    }
    if ((rc = check_size(env, st->dir, err, errlen)))
        goto fail;
    int dead = 0;
    mdb_reader_check(env, &dead); /* slots of crashed readers pin pages */
    if ((rc = mdb_txn_begin(env, NULL, 0, &txn))) {
        rc = open_err(rc, st->dir, "mdb_txn_begin", err, errlen);
        goto fail;
    }
    if ((rc = open_dbs(txn, st, st->dir, err, errlen))) {
        mdb_txn_abort(txn);
        goto fail;
    }
    st->last_key = read_last_key(txn, st->dbi);
    atomic_store(&st->stream_seq, read_stream_seq(txn, st->info_dbi));
    if ((rc = mdb_txn_commit(txn))) {
        rc = open_err(rc, st->dir, "mdb_txn_commit", err, errlen);
        goto fail;
    }
    st->env = env;
    return 0;
fail:
    mdb_env_close(env);
    return rc;
}

/* Commit thread only: replaces an environment left unusable (MDB_PANIC). */
static int env_reopen(nd_store *st)
{
    char err[256];
    pthread_rwlock_wrlock(&st->env_lock);
    if (st->env)
        mdb_env_close(st->env);
    st->env = NULL;
    int rc = env_open(st, err, sizeof(err));
    pthread_rwlock_unlock(&st->env_lock);
    if (rc == 0)
        atomic_fetch_add(&st->reopens, 1);
    return rc;
}

/* Takes neardup.lock in dir (flock, non-blocking). Returns the fd or -errno. */
static int take_lock(const char *dir, char *err, size_t errlen)
{
    char *path = path_join(dir, LOCK_NAME);
    if (!path)
        return set_err(err, errlen, -ENOMEM, "out of memory");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, FILE_MODE);
    if (fd < 0) {
        int e = errno;
        free(path);
        if (e == EACCES || e == EPERM || e == EROFS)
            return set_err(err, errlen, e == EROFS ? -EROFS : -EACCES,
                           "data directory %s is not writable: %s", dir, strerror(e));
        return set_err(err, errlen, -e, "cannot create %s/" LOCK_NAME ": %s", dir, strerror(e));
    }
    free(path);
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        close(fd);
        if (e == EWOULDBLOCK)
            return set_err(err, errlen, -EBUSY,
                           "data directory %s is in use by another neardupd (pid %s)", dir,
                           pid[0] ? pid : "unknown");
        return set_err(err, errlen, -e, "cannot lock %s/" LOCK_NAME ": %s", dir, strerror(e));
    }
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) == 0) {
        ssize_t w = pwrite(fd, pid, (size_t)n, 0); /* informative only */
        (void)w;
    }
    return fd;
}

/* 0 if dir/data.mdb is absent (*exists false) or non-empty, else -EINVAL. */
static int check_data_file(const char *dir, bool *exists, char *err, size_t errlen)
{
    char *path = path_join(dir, DATA_NAME);
    struct stat sb;
    if (!path)
        return set_err(err, errlen, -ENOMEM, "out of memory");
    int rc = stat(path, &sb);
    int e = errno;
    free(path);
    *exists = rc == 0;
    if (rc && e != ENOENT)
        return set_err(err, errlen, -e, "%s/" DATA_NAME ": %s", dir, strerror(e));
    if (rc == 0 && !S_ISREG(sb.st_mode))
        return set_err(err, errlen, -EINVAL, "%s/" DATA_NAME " is not a regular file", dir);
    if (rc == 0 && sb.st_size == 0)
        return set_err(err, errlen, -EINVAL,
                       "%s/" DATA_NAME " is empty (truncated?); move it away to start"
                       " a new store",
                       dir);
    return 0;
}

/* Removes the data.mdb a failed first open left behind (we hold the lock,
 * and the file did not exist before), so that a later open starts afresh
 * instead of finding an empty or half-initialised file. */
static void remove_new_data(const char *dir)
{
    char *path = path_join(dir, DATA_NAME);
    if (path)
        unlink(path);
    free(path);
}

/* ---- commit thread ------------------------------------------------------- */

/* The length of a record change's value (after the key, before the
 * sketch or the event). */
static size_t change_value_len(const change *c)
{
    return c->len - KEY_SIZE - c->sketch_len - c->ev_len - c->sup_len;
}

/* A put's or replace's sketch (sketch_len bytes, before the event). */
static unsigned char *change_sketch(const change *c)
{
    return (unsigned char *)c->data + c->len - c->ev_len - c->sketch_len;
}

/* What one write transaction did, for the counters. */
typedef struct txn_result {
    bool wrote;      /* some change modified the database */
    size_t appended; /* puts that took the MDB_APPEND path */
    size_t audits;   /* audit entries written (retention may drop as many) */
} txn_result;

static int apply_event(nd_store *st, MDB_txn *txn, unsigned char *e, size_t len, txn_result *res);

/* Inserts a record. The key is tried with MDB_APPEND when it is above the
 * last_key hint; LMDB then checks it against the real last key and answers
 * MDB_KEYEXIST when it is not greater (out of order, or a duplicate), and
 * the put is retried as an ordinary insert, which tells the two apart.
 * A duplicate key gives the change -EEXIST and leaves the stored record. */
static int apply_put(nd_store *st, MDB_txn *txn, change *c, int64_t *last, txn_result *res)
{
    MDB_val k = {KEY_SIZE, c->data};
    size_t vsize = change_value_len(c);
    MDB_val v = {vsize, c->data + KEY_SIZE};
    int64_t key = rd_key(c->data);
    int rc = MDB_KEYEXIST;
    if (key > *last) {
        rc = mdb_put(txn, st->dbi, &k, &v, MDB_APPEND | MDB_NOOVERWRITE);
        if (rc == 0)
            res->appended++;
    }
    if (rc == MDB_KEYEXIST) {
        v = (MDB_val){vsize, c->data + KEY_SIZE};
        rc = mdb_put(txn, st->dbi, &k, &v, MDB_NOOVERWRITE);
    }
    if (rc == MDB_KEYEXIST) {
        c->status = -EEXIST;
        return 0;
    }
    if (rc)
        return rc;
    c->status = 0;
    res->wrote = true;
    if (key > *last)
        *last = key;
    return 0;
}

/* Puts the sketches, then the audit events, of the records that the puts
 * from first up to (not including) stop inserted (apply_put: status 0).
 * Sketches are tried with MDB_APPEND first, like the records, so that the
 * sketches' leaves fill too. */
static int put_sketches(nd_store *st, MDB_txn *txn, change *first, const change *stop,
                        txn_result *res)
{
    for (change *c = first; c != stop; c = c->next) {
        if (c->kind != CHANGE_PUT || c->status != 0 || !c->sketch_len)
            continue;
        MDB_val k = {KEY_SIZE, c->data};
        MDB_val sv = {c->sketch_len, change_sketch(c)};
        int rc = mdb_put(txn, st->sketch_dbi, &k, &sv, MDB_APPEND);
        if (rc == MDB_KEYEXIST) {
            sv = (MDB_val){c->sketch_len, change_sketch(c)};
            rc = mdb_put(txn, st->sketch_dbi, &k, &sv, 0);
        }
        if (rc)
            return rc;
    }
    for (change *c = first; c != stop; c = c->next) {
        if (c->kind != CHANGE_PUT || c->status != 0 || !c->ev_len)
            continue;
        int rc = apply_event(st, txn, c->data + c->len - c->ev_len, c->ev_len, res);
        if (rc)
            return rc;
    }
    return 0;
}

/* The id a change at a key names: a deletion's own, or the replacing
 * value's. Returns its length (0: none). */
static size_t change_id(change *c, const unsigned char **id)
{
    if (c->kind == CHANGE_DELETE_AT) {
        *id = c->data + KEY_SIZE;
        return c->len - KEY_SIZE - c->ev_len;
    }
    MDB_val nv = {change_value_len(c), c->data + KEY_SIZE};
    return value_id(&nv, id);
}

/* Deletes, or replaces with the change's value, the record under the
 * change's key if its id is the change's id. Else the change's status is
 * -ENOENT (no record there, or another id) or -EBADMSG (the stored value
 * cannot be decoded: left as it is), and nothing is written. */
static int apply_at_key(nd_store *st, MDB_txn *txn, MDB_cursor *cur, change *c, txn_result *res)
{
    MDB_val k = {KEY_SIZE, c->data}, v;
    const unsigned char *id = NULL, *vid = NULL;
    size_t id_len = change_id(c, &id);
    int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_KEY);
    c->status = -ENOENT;
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    size_t n = value_id(&v, &vid);
    if (n == 0) {
        c->status = -EBADMSG;
        return 0;
    }
    if (n != id_len || memcmp(vid, id, n) != 0)
        return 0;
    if (c->kind == CHANGE_DELETE_AT) {
        rc = mdb_cursor_del(cur, 0);
    } else {
        MDB_val nv = {change_value_len(c), c->data + KEY_SIZE};
        k = (MDB_val){KEY_SIZE, c->data};
        rc = mdb_cursor_put(cur, &k, &nv, MDB_CURRENT);
    }
    /* The record's sketch goes (or is replaced) with it. */
    k = (MDB_val){KEY_SIZE, c->data};
    if (rc == 0 && c->kind == CHANGE_REPLACE_AT && c->sketch_len) {
        MDB_val sv = {c->sketch_len, change_sketch(c)};
        rc = mdb_put(txn, st->sketch_dbi, &k, &sv, 0);
    } else if (rc == 0 && !c->keep_sketch) {
        rc = mdb_del(txn, st->sketch_dbi, &k, NULL);
        rc = rc == MDB_NOTFOUND ? 0 : rc;
    }
    if (rc)
        return rc;
    c->status = 0;
    res->wrote = true;
    return 0;
}

/* detection_ids key of a copy id of owner (owner's key bytes). */
static void index_key(unsigned char *ikey, const unsigned char *owner, const void *id, size_t len)
{
    XXH128_canonical_t h;
    XXH128_canonicalFromHash(&h, XXH3_128bits(id, len));
    memcpy(ikey, owner, 8);
    memcpy(ikey + 8, h.digest, 16);
}

/* The copy id of the detection stored under key k (16 bytes), or 0. */
static size_t stored_copy_id(MDB_txn *txn, MDB_dbi dbi, const unsigned char *k,
                             const unsigned char **id)
{
    MDB_val key = {EV_KEY, (void *)k}, v;
    nd_store_event ev;
    if (mdb_get(txn, dbi, &key, &v) || decode_event(ND_EVENT_DETECTION, &key, &v, &ev))
        return 0;
    *id = (const unsigned char *)ev.copy_id;
    return ev.copy_id_len;
}

/* Finds the detection the index names for ikey if it is of the copy id
 * (id, len): *found tells whether there is one, dk (16 bytes) gets its
 * key. Returns 0 or the LMDB error. */
static int detection_find(nd_store *st, MDB_txn *txn, const unsigned char *ikey, const void *id,
                          size_t len, unsigned char *dk, bool *found)
{
    MDB_val k = {IDX_KEY, (void *)ikey}, v;
    const unsigned char *sid = NULL;
    *found = false;
    int rc = mdb_get(txn, st->detidx_dbi, &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc || v.mv_size != 8)
        return rc;
    memcpy(dk, ikey, 8);
    memcpy(dk + 8, v.mv_data, 8);
    size_t n = stored_copy_id(txn, st->det_dbi, dk, &sid);
    *found = n == len && memcmp(sid, id, n) == 0; /* else gone, or another id of that hash */
    return 0;
}

/* Deletes every key of dbi that begins with the 8 bytes owner. Returns 0
 * or the LMDB error. */
static int drop_prefix(MDB_txn *txn, MDB_dbi dbi, const unsigned char *owner)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, dbi, &cur);
    if (rc)
        return rc;
    for (;;) { /* a fresh seek after each deletion, as detection_retain() */
        MDB_val k = {8, (void *)owner}, v;
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        if (rc || k.mv_size < 8 || memcmp(k.mv_data, owner, 8) != 0 ||
            (rc = mdb_cursor_del(cur, 0)))
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Deletes every detection of owner (8 key bytes: a deleted record's key),
 * with their index entries and count. Returns 0 or the LMDB error. */
static int detections_drop(nd_store *st, MDB_txn *txn, const unsigned char *owner)
{
    int rc = drop_prefix(txn, st->det_dbi, owner);
    return rc ? rc : drop_prefix(txn, st->detidx_dbi, owner);
}

/* Wall-clock time in us (the clock of audit times: nd_log_now_us()). */
static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Drops the oldest audit entries while there are more than
 * audit_max_entries or the oldest is older than audit_max_age_us, at most
 * budget of them, with their index entries. Returns 0 or the LMDB error. */
static int audit_trim(nd_store *st, MDB_txn *txn, size_t budget)
{
    uint64_t max = st->base.audit_max_entries;
    int64_t age = st->base.audit_max_age_us;
    if (!max && !age)
        return 0;
    MDB_stat ms;
    MDB_cursor *cur;
    int rc = mdb_stat(txn, st->audit_dbi, &ms);
    if (rc || (rc = mdb_cursor_open(txn, st->audit_dbi, &cur)))
        return rc;
    uint64_t n = ms.ms_entries;
    int64_t cutoff = age ? wall_us() - age : INT64_MIN;
    MDB_val k, v;
    for (; budget > 0; budget--) {
        if ((rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST)))
            break;
        bool old = k.mv_size == EV_KEY && rd_key((const unsigned char *)k.mv_data + 8) < cutoff;
        if (!(max && n > max) && !old)
            break;
        if ((rc = audit_doc_index(st, txn, k.mv_data, &v, false)) || (rc = mdb_cursor_del(cur, 0)))
            break;
        n--;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Deletes the detection of owner at cursor cur (positioned on it, key k,
 * value v) and its detection_ids entry; *count follows. */
static int detection_drop(nd_store *st, MDB_txn *txn, MDB_cursor *cur, const unsigned char *owner,
                          const MDB_val *k, const MDB_val *v, uint64_t *count)
{
    nd_store_event ev;
    unsigned char ikey[IDX_KEY];
    MDB_val iv;
    int rc = 0;
    if (decode_event(ND_EVENT_DETECTION, k, v, &ev) == 0 && ev.copy_id_len) {
        index_key(ikey, owner, ev.copy_id, ev.copy_id_len);
        MDB_val ik = {IDX_KEY, ikey};
        if (mdb_get(txn, st->detidx_dbi, &ik, &iv) == 0 && iv.mv_size == 8 &&
            memcmp(iv.mv_data, (const unsigned char *)k->mv_data + 8, 8) == 0)
            rc = mdb_del(txn, st->detidx_dbi, &ik, NULL);
    }
    if (rc == 0 && (rc = mdb_cursor_del(cur, 0)) == 0)
        (*count)--;
    return rc;
}

/* The detections of owner to drop (retention.h): one pass over its list
 * (*listed: how many it holds) into a tally, then those beyond target
 * picked into *at (new; free it); *n how many. Returns 0, ENOMEM or the
 * LMDB error (positive, as LMDB's). */
static int detection_victims(MDB_cursor *cur, const unsigned char *owner, uint64_t count,
                             uint64_t target, uint64_t *listed, int64_t **at, size_t *n)
{
    *n = 0;
    *listed = 0;
    *at = NULL;
    nd_retention *t = nd_retention_new(count);
    if (!t)
        return ENOMEM;
    unsigned char first[EV_KEY] = {0};
    memcpy(first, owner, 8);
    MDB_val key = {EV_KEY, first}, v;
    int rc = mdb_cursor_get(cur, &key, &v, MDB_SET_RANGE);
    while (rc == 0 && key.mv_size == EV_KEY && memcmp(key.mv_data, owner, 8) == 0) {
        nd_store_event ev;
        bool ok = decode_event(ND_EVENT_DETECTION, &key, &v, &ev) == 0;
        if (nd_retention_add(t, ok ? ev.value : "", ok ? ev.value_len : 0,
                             rd_key((const unsigned char *)key.mv_data + 8)) < 0)
            rc = ENOMEM;
        if (rc == 0) {
            (*listed)++;
            rc = mdb_cursor_get(cur, &key, &v, MDB_NEXT);
        }
    }
    if (rc == MDB_NOTFOUND)
        rc = 0;
    size_t k = rc == 0 && *listed > target ? (size_t)(*listed - target) : 0;
    if (k && !(*at = malloc(k * sizeof(int64_t))))
        rc = ENOMEM;
    int64_t got = rc == 0 && k ? nd_retention_victims(t, k, *at) : 0;
    nd_retention_free(t);
    if (got < 0)
        return ENOMEM;
    *n = (size_t)got;
    return rc;
}

/* Cuts the detections of owner (8 key bytes) to nd_retention_target()
 * once it has more than detections_max, dropping the ones retention.h
 * picks; *count follows (set to what the list holds). */
static int detection_retain(nd_store *st, MDB_txn *txn, const unsigned char *owner, uint64_t *count)
{
    uint64_t max = st->base.detections_max;
    MDB_cursor *cur;
    int rc = 0;
    if (max == 0 || *count <= max)
        return 0;
    if ((rc = mdb_cursor_open(txn, st->det_dbi, &cur)))
        return rc;
    int64_t *at = NULL;
    size_t n = 0;
    rc = detection_victims(cur, owner, *count, nd_retention_target(max), count, &at, &n);
    unsigned char dk[EV_KEY];
    memcpy(dk, owner, 8);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        wr_key(dk + 8, at[i]);
        MDB_val key = {EV_KEY, dk}, v;
        rc = mdb_cursor_get(cur, &key, &v, MDB_SET_KEY);
        if (rc == 0)
            rc = detection_drop(st, txn, cur, owner, &key, &v, count);
    }
    free(at);
    mdb_cursor_close(cur);
    return rc;
}

/* Writes the event encoded at e (len bytes: see encode_event) into its
 * journal: raises its at_us (in e) while the key is taken; a detection
 * replaces the one of the same copy id, is indexed, counted, and the
 * oldest go beyond detections_max. Returns 0 or the LMDB error. */
static int apply_event(nd_store *st, MDB_txn *txn, unsigned char *e, size_t len, txn_result *res)
{
    bool det = e[0] == ND_EVENT_DETECTION, found = false;
    MDB_dbi dbi = det ? st->det_dbi : st->audit_dbi;
    const unsigned char *val = e + EV_PREFIX, *id = val + ND_EVENT_VALUE_HDR;
    size_t id_len = rd16(val + 1);
    unsigned char ikey[IDX_KEY], dk[EV_KEY];
    int rc = 0;
    if (det) {
        index_key(ikey, e + 1, id, id_len);
        rc = detection_find(st, txn, ikey, id, id_len, dk, &found);
    }
    if (rc == 0 && found) { /* detected before: updated in place, its time kept */
        memcpy(e + 9, dk + 8, 8);
        MDB_val k = {EV_KEY, e + 1}, v = {len - EV_PREFIX, e + EV_PREFIX};
        if ((rc = mdb_put(txn, dbi, &k, &v, 0)) == 0)
            res->wrote = true;
        return rc;
    }
    for (; rc == 0;) {
        MDB_val k = {EV_KEY, e + 1}, v = {len - EV_PREFIX, e + EV_PREFIX};
        rc = mdb_put(txn, dbi, &k, &v, MDB_NOOVERWRITE);
        if (rc != MDB_KEYEXIST)
            break;
        wr_key(e + 9, rd_key(e + 9) + 1); /* at_us is at most ND_EVENT_AT_MAX */
        rc = 0;
    }
    if (rc)
        return rc;
    res->wrote = true;
    if (!det) {
        MDB_val v = {len - EV_PREFIX, e + EV_PREFIX};
        res->audits++;
        return audit_doc_index(st, txn, e + 1, &v, true);
    }
    MDB_val ik = {IDX_KEY, ikey}, iv = {8, e + 9};
    if ((rc = mdb_put(txn, st->detidx_dbi, &ik, &iv, 0)))
        return rc;
    MDB_val ck = {8, e + 1}, cv;
    uint64_t count = 0;
    rc = mdb_get(txn, st->detidx_dbi, &ck, &cv);
    if (rc == 0 && cv.mv_size == 8)
        count = rd64(cv.mv_data);
    else if (rc && rc != MDB_NOTFOUND)
        return rc;
    count++;
    if ((rc = detection_retain(st, txn, e + 1, &count)))
        return rc;
    unsigned char cb[8];
    wr64(cb, count);
    cv = (MDB_val){8, cb};
    return mdb_put(txn, st->detidx_dbi, &ck, &cv, 0);
}

/* Marks superseded, by the record of amendment c, each record c names
 * that is stored under its key with its id and active; leaves the others.
 * Returns 0 or the LMDB error (-ENOMEM). */
static int apply_supersede(nd_store *st, MDB_txn *txn, change *c)
{
    const unsigned char *q = c->data + KEY_SIZE + change_value_len(c);
    const unsigned char *end = q + c->sup_len;
    while (q < end) {
        size_t id_len = rd16(q + KEY_SIZE);
        const unsigned char *id = q + KEY_SIZE + 2;
        MDB_val k = {KEY_SIZE, (void *)q}, v;
        q += KEY_SIZE + 2 + id_len;
        nd_record r;
        int rc = mdb_get(txn, st->dbi, &k, &v);
        if (rc == MDB_NOTFOUND || (rc == 0 && decode_value(&k, &v, &r) != 0))
            continue; /* gone, or not ours to read: left */
        if (rc)
            return rc;
        if (r.id_len != id_len || memcmp(r.id, id, id_len) != 0 || r.status != ND_CLAIM_ACTIVE)
            continue;
        r.status = ND_CLAIM_SUPERSEDED;
        r.superseded_by_us = rd_key(c->data);
        size_t vlen = strlen(r.version), vsize = nd_record_value_size(&r, vlen);
        unsigned char *buf = malloc(vsize);
        if (!buf)
            return ENOMEM;
        nd_record_value_encode(buf, &r, vlen); /* r points into the map: copied first */
        MDB_val nv = {vsize, buf};
        rc = mdb_put(txn, st->dbi, &k, &nv, 0);
        free(buf);
        if (rc)
            return rc;
    }
    return 0;
}

/* Applies a change to the record under its key (delete: with the
 * record's detections; amend: with the records it supersedes; delete or
 * amend: with its audit event, if any, in
 * the same transaction). */
static int apply_at(nd_store *st, MDB_txn *txn, change *c, txn_result *res)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, st->dbi, &cur);
    if (rc)
        return rc;
    rc = apply_at_key(st, txn, cur, c, res);
    mdb_cursor_close(cur);
    if (rc == 0 && c->status == 0 && c->kind == CHANGE_DELETE_AT && !c->keep_sketch)
        rc = detections_drop(st, txn, c->data);
    if (rc == 0 && c->status == 0 && c->kind == CHANGE_AMEND && c->sup_len)
        rc = apply_supersede(st, txn, c);
    if (rc == 0 && c->status == 0 && c->kind != CHANGE_REPLACE_AT && c->ev_len)
        rc = apply_event(st, txn, c->data + c->len - c->ev_len, c->ev_len, res);
    return rc;
}

/* Applies one CHANGE_EVENT. */
static int apply_event_change(nd_store *st, MDB_txn *txn, change *c, txn_result *res)
{
    int rc = apply_event(st, txn, c->data, c->len, res);
    if (rc == 0)
        c->status = 0;
    return rc;
}

/* Tells a short write on a full filesystem (EIO from LMDB) from an I/O
 * error by the space left. Returns ENOSPC or rc. */
static int commit_error(nd_store *st, int rc)
{
    struct statvfs sv;
    int fd;
    if (rc != EIO || !st->env || mdb_env_get_fd(st->env, &fd) || fstatvfs(fd, &sv))
        return rc;
    unsigned long long avail = (unsigned long long)sv.f_bavail * sv.f_frsize;
    return avail < FULL_SLACK ? ENOSPC : rc;
}

/* Begins a write transaction, reopening an environment that a failed
 * commit left unusable. Returns 0 or the LMDB error. */
static int write_begin(nd_store *st, MDB_txn **txn)
{
    int rc = st->env ? mdb_txn_begin(st->env, NULL, 0, txn) : MDB_PANIC;
    if (rc == MDB_PANIC && env_reopen(st) == 0)
        rc = mdb_txn_begin(st->env, NULL, 0, txn);
    return rc;
}

/* Writes info/stream_seq = seq in txn. Returns the LMDB result. */
static int put_stream_seq(MDB_txn *txn, MDB_dbi info, uint64_t seq)
{
    unsigned char b[8];
    wr_key(b, (int64_t)seq);
    MDB_val k = {sizeof(SEQ_KEY) - 1, SEQ_KEY}, v = {sizeof(b), b};
    return mdb_put(txn, info, &k, &v, 0);
}

/* Applies n changes starting at first in one write transaction. Sets each
 * change's status as it would be if the commit succeeds, and *res. Returns
 * the LMDB result of the transaction (0 when committed); the last_key hint
 * advances only with a commit.
 * The sketches of a run of puts are written after the run's records (and
 * before any other change, which may touch them): LMDB hands out new pages
 * in the order it needs them, so the records' leaves of one transaction
 * then lie side by side in data.mdb instead of between sketch pages, and
 * the start-up scan reads them in long runs (readahead.c). */
static int apply_txn(nd_store *st, change *first, size_t n, txn_result *res)
{
    MDB_txn *txn;
    *res = (txn_result){false, 0, 0};
    int rc = write_begin(st, &txn);
    if (rc)
        return rc;
    int64_t last = st->last_key;
    uint64_t seq = 0;               /* the greatest stream sequence in the batch */
    change *c = first, *run = NULL; /* run: the first put whose sketch waits */
    for (size_t i = 0; i < n && rc == 0; i++, c = c->next) {
        if (c->kind == CHANGE_PUT) {
            run = run ? run : c;
            rc = apply_put(st, txn, c, &last, res);
        } else {
            if (run && (rc = put_sketches(st, txn, run, c, res)) != 0)
                break;
            run = NULL;
            rc = c->kind == CHANGE_EVENT ? apply_event_change(st, txn, c, res)
                                         : apply_at(st, txn, c, res);
        }
        seq = c->stream_seq > seq ? c->stream_seq : seq;
    }
    if (rc == 0 && run)
        rc = put_sketches(st, txn, run, c, res);
    if (rc == 0) /* retention: bounded by what this commit added */
        rc = audit_trim(st, txn, res->audits + TRIM_SLACK);
    if (rc == 0 && seq > atomic_load(&st->stream_seq)) /* same transaction (issue 14) */
        rc = put_stream_seq(txn, st->info_dbi, seq);
    if (rc) {
        mdb_txn_abort(txn);
        return rc;
    }
    if ((rc = mdb_txn_commit(txn)) == 0) {
        st->last_key = last;
        if (seq > atomic_load(&st->stream_seq))
            atomic_store(&st->stream_seq, seq);
    }
    return commit_error(st, rc);
}

/* Updates the counters; writable follows the last transaction that had
 * something to write (a batch of deletes of missing ids proves nothing). */
static void count_txn(nd_store *st, int rc, size_t n, const txn_result *res)
{
    if (rc) {
        atomic_fetch_add(&st->failed_commits, 1);
        atomic_store(&st->writable, false);
        return;
    }
    atomic_fetch_add(&st->commits, 1);
    atomic_fetch_add(&st->changes, n);
    atomic_fetch_add(&st->appended, res->appended);
    uint64_t m = atomic_load(&st->max_batch);
    if (n > m)
        atomic_store(&st->max_batch, n);
    if (res->wrote)
        atomic_store(&st->writable, true);
}

static int fail_status(nd_store *st, int rc)
{
    if (!st->env) {
        pthread_mutex_lock(&st->mu);
        bool closing = st->closing;
        pthread_mutex_unlock(&st->mu);
        if (closing)
            return -ESHUTDOWN;
    }
    return mdb_errno(rc);
}

/* Commits change c alone. A deletion that does not fit at a full map (it
 * touches the records and the sketches) is tried again without its
 * sketch, which stays behind unreachable (keys are never reused), so that
 * deleting still frees space when nothing else can be written. */
static int apply_one(nd_store *st, change *c, txn_result *res)
{
    int rc = apply_txn(st, c, 1, res);
    if (rc && is_space_error(rc) && c->kind == CHANGE_DELETE_AT && !c->keep_sketch) {
        count_txn(st, rc, 1, res);
        c->keep_sketch = true;
        rc = apply_txn(st, c, 1, res);
    }
    return rc;
}

/* Commits the batch; when it fails for lack of space, retries each change
 * on its own so that those that fit are kept. */
static void commit_batch(nd_store *st, change *batch, size_t n)
{
    txn_result res;
    uint64_t t0 = (uint64_t)nd_clock_us();
    int rc = apply_txn(st, batch, n, &res);
    count_txn(st, rc, n, &res);
    if (rc == 0) {
        count_commit_time(st, (uint64_t)nd_clock_us() - t0);
        return;
    }
    if ((n > 1 || batch->kind == CHANGE_DELETE_AT) && is_space_error(rc)) {
        if (st->env)
            mdb_reader_check(st->env, NULL);
        for (change *c = batch; c; c = c->next) {
            int one = apply_one(st, c, &res);
            count_txn(st, one, 1, &res);
            if (one)
                c->status = fail_status(st, one);
        }
        return;
    }
    int status = fail_status(st, rc);
    for (change *c = batch; c; c = c->next)
        c->status = status;
}

/* One probe transaction: puts PROBE_BYTES under info/PROBE_KEY, or
 * deletes it. Returns 0 when committed, else the LMDB error. */
static int probe_txn(nd_store *st, bool put)
{
    MDB_txn *txn;
    MDB_dbi info;
    MDB_val k = {sizeof(PROBE_KEY) - 1, PROBE_KEY}, v = {PROBE_BYTES, NULL};
    int rc = write_begin(st, &txn);
    if (rc)
        return rc;
    rc = mdb_dbi_open(txn, DB_INFO, 0, &info);
    if (rc == 0 && put && (rc = mdb_put(txn, info, &k, &v, MDB_RESERVE)) == 0)
        memset(v.mv_data, 0, PROBE_BYTES);
    else if (rc == 0 && !put && (rc = mdb_del(txn, info, &k, NULL)) == MDB_NOTFOUND)
        rc = 0;
    if (rc) {
        mdb_txn_abort(txn);
        return rc;
    }
    return commit_error(st, mdb_txn_commit(txn));
}

/* Finds out whether the store can take writes, without a client's change:
 * commits PROBE_BYTES of new pages (which must reach the disk), then
 * deletes them again. Sets writable accordingly. Runs at open and, while
 * not writable, on the idle commit thread every PROBE_MS, so that
 * readiness returns when space does (a server out of its balancer's
 * rotation gets no registration that could prove it). */
static void probe_space(nd_store *st)
{
    int rc = probe_txn(st, true);
    if (rc == 0)
        rc = probe_txn(st, false);
    atomic_fetch_add(&st->probes, 1);
    atomic_store(&st->writable, rc == 0);
}

/* *ts = now + ms on CLOCK_MONOTONIC (the clock of `work`). */
static void deadline_in(struct timespec *ts, unsigned ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

/* Waits for changes or closing. Lock held. While not writable, probes
 * every PROBE_MS meanwhile. */
static void do_wait_work(nd_store *st)
{
    while (!st->head && !st->closing) {
        if (atomic_load(&st->writable)) {
            pthread_cond_wait(&st->work, &st->mu);
            continue;
        }
        struct timespec ts;
        deadline_in(&ts, PROBE_MS);
        if (pthread_cond_timedwait(&st->work, &st->mu, &ts) == ETIMEDOUT && !st->head &&
            !st->closing) {
            pthread_mutex_unlock(&st->mu);
            probe_space(st);
            pthread_mutex_lock(&st->mu);
        }
    }
}

/* Whether the queue holds a full batch (by count, or half the bytes the
 * queue takes). Lock held. */
static bool batch_full(const nd_store *st)
{
    return st->queued >= st->opts.max_batch || st->queued_bytes >= QUEUE_BYTES / 2;
}

/* With opts.gather_ms, waits (changes queued) until the queue holds a full
 * batch, the window ends, nd_store_hurry() or closing. Lock held. */
static void do_gather(nd_store *st)
{
    if (!st->opts.gather_ms)
        return;
    struct timespec ts;
    deadline_in(&ts, st->opts.gather_ms);
    st->gathering = true;
    while (!st->closing && !st->hurry && !batch_full(st))
        if (pthread_cond_timedwait(&st->work, &st->mu, &ts) == ETIMEDOUT)
            break;
    st->gathering = false;
    st->hurry = false;
}

/* Detaches up to max_batch changes from the queue. Lock held. */
static change *do_take_batch(nd_store *st, size_t *n)
{
    change *first = st->head, *last = NULL, *c = first;
    size_t k = 0, bytes = 0;
    while (c && k < st->opts.max_batch) {
        bytes += c->size;
        last = c;
        c = c->next;
        k++;
    }
    last->next = NULL;
    st->head = c;
    if (!c)
        st->tail = NULL;
    st->queued -= k;
    st->queued_bytes -= bytes;
    *n = k;
    return first;
}

/* Commit thread, between transactions: makes sure data.mdb extends at
 * least half the headroom past LMDB's last page, writing zeros at its end
 * (see "Headroom" above). Only ever writes past the end of the file as
 * fstat reports it, so never over a page of LMDB's. Gives up quietly (LMDB
 * grows the file itself, as without headroom) when the map would be
 * exceeded, the filesystem is close to full, or a write fails. */
static void keep_headroom(nd_store *st)
{
    MDB_envinfo info;
    MDB_stat est;
    int fd;
    if (!st->env || mdb_env_info(st->env, &info) || mdb_env_stat(st->env, &est))
        return;
    unsigned long long used = ((unsigned long long)info.me_last_pgno + 1) * est.ms_psize;
    unsigned long long room = used / 16;
    room = room < HEADROOM_MIN ? HEADROOM_MIN : room > HEADROOM_MAX ? HEADROOM_MAX : room;
    if (used + room / 2 <= st->zeroed_end)
        return; /* the common case: no system call */
    struct stat sb;
    struct statvfs sv;
    if (mdb_env_get_fd(st->env, &fd) || fstat(fd, &sb) || fstatvfs(fd, &sv))
        return;
    unsigned long long end = (unsigned long long)sb.st_size, want = used + room;
    if (want > info.me_mapsize)
        want = info.me_mapsize;
    st->zeroed_end = end;
    if (end >= want)
        return;
    unsigned long long avail = (unsigned long long)sv.f_bavail * sv.f_frsize;
    if (avail < 4 * (want - end) + FULL_SLACK)
        return; /* leave the last of the disk to LMDB itself */
    if (!st->zeros && !(st->zeros = calloc(1, ZERO_CHUNK)))
        return;
    while (end < want) {
        size_t n = want - end < ZERO_CHUNK ? (size_t)(want - end) : ZERO_CHUNK;
        ssize_t w = pwrite(fd, st->zeros, n, (off_t)end);
        if (w <= 0)
            break;
        end += (unsigned long long)w;
    }
    st->zeroed_end = end;
}

/* Tells the on-commit observer about c, committed (status 0). */
static void observe_record(nd_store *st, const change *c, nd_store_observer_fn fn);

/* Tells the event observer about the event encoded at e (len bytes). */
static void observe_event(nd_store *st, const unsigned char *e, size_t len)
{
    nd_store_event ev;
    MDB_val k = {EV_KEY, (void *)(e + 1)}, v = {len - EV_PREFIX, (void *)(e + EV_PREFIX)};
    if (st->base.event_observer && decode_event((nd_event_kind)e[0], &k, &v, &ev) == 0)
        st->base.event_observer(st->base.event_observer_arg, &ev);
}

static void observe(nd_store *st, const change *c)
{
    nd_store_observer_fn fn = st->base.observer;
    if (c->kind == CHANGE_EVENT) {
        observe_event(st, c->data, c->len);
        return;
    }
    if (fn)
        observe_record(st, c, fn);
    if (c->kind != CHANGE_REPLACE_AT && c->ev_len)
        observe_event(st, c->data + c->len - c->ev_len, c->ev_len);
}

/* Tells the record observer fn about c (a record change). */
static void observe_record(nd_store *st, const change *c, nd_store_observer_fn fn)
{
    nd_record rec = {.id = NULL};
    if (c->kind == CHANGE_DELETE_AT) {
        rec.id = (const char *)c->data + KEY_SIZE;
        rec.id_len = c->len - KEY_SIZE - c->ev_len;
        rec.registered_at_us = rd_key(c->data);
        fn(st->base.observer_arg, ND_STORE_DELETE, &rec);
        return;
    }
    MDB_val k = {KEY_SIZE, (void *)c->data};
    MDB_val v = {change_value_len(c), (void *)(c->data + KEY_SIZE)};
    if (decode_value(&k, &v, &rec) != 0)
        return; /* cannot happen: encoded by queue_record() */
    rec.sketch = c->sketch_len ? change_sketch(c) : NULL;
    rec.sketch_len = c->sketch_len;
    fn(st->base.observer_arg,
       c->kind == CHANGE_PUT     ? ND_STORE_PUT
       : c->kind == CHANGE_AMEND ? ND_STORE_AMEND
                                 : ND_STORE_REPLACE,
       &rec);
}

static void *commit_main(void *arg)
{
    nd_store *st = arg;
    pthread_setname_np(pthread_self(), "nd-commit");
    for (;;) {
        size_t n;
        pthread_mutex_lock(&st->mu);
        do_wait_work(st);
        if (!st->head) {
            pthread_mutex_unlock(&st->mu);
            break;
        }
        do_gather(st);
        change *batch = do_take_batch(st, &n);
        pthread_cond_broadcast(&st->space);
        pthread_mutex_unlock(&st->mu);

        commit_batch(st, batch, n);
        while (batch) {
            change *next = batch->next;
            if (batch->status && batch->status != -ENOENT)
                atomic_fetch_add(&st->failed_changes, 1);
            if (batch->status == 0)
                observe(st, batch);
            if (batch->done)
                batch->done(batch->arg, batch->status);
            free(batch);
            batch = next;
        }
        keep_headroom(st);
    }
    return NULL;
}

/* ---- public API ------------------------------------------------------------ */

void nd_store_options_default(nd_store_options *opts)
{
    memset(opts, 0, sizeof(*opts));
#if SIZE_MAX > 0xffffffffu
    opts->map_size = (size_t)64 << 30; /* virtual; the file grows as used */
#else
    opts->map_size = (size_t)1 << 30; /* 32-bit address space */
#endif
    opts->max_batch = 4096;       /* bounds one transaction's dirty pages */
    opts->sync = true;            /* durable acknowledgements */
    opts->detections_max = 10000; /* detections kept per original */
}

static void store_free(nd_store *st)
{
    if (st->env)
        mdb_env_close(st->env);
    if (st->lock_fd >= 0)
        close(st->lock_fd); /* releases the flock */
    pthread_cond_destroy(&st->space);
    pthread_cond_destroy(&st->work);
    pthread_mutex_destroy(&st->mu);
    pthread_mutex_destroy(&st->readahead_mu);
    pthread_rwlock_destroy(&st->env_lock);
    free(st->zeros);
    free(st->dir);
    nd_json_scratch_finish(&st->js);
    free(st);
}

static const nd_store_ops lmdb_ops; /* at the end */

int nd_store_open(nd_store **out, const char *dir, const nd_store_options *opts, char *err,
                  size_t errlen)
{
    *out = NULL;
    if (!dir || !*dir)
        return set_err(err, errlen, -EINVAL, "no data directory given");
    nd_store *st = calloc(1, sizeof(*st));
    if (!st || !(st->dir = strdup(dir))) {
        free(st);
        return set_err(err, errlen, -ENOMEM, "out of memory");
    }
    st->base.ops = &lmdb_ops;
    st->lock_fd = -1;
    pthread_rwlock_init(&st->env_lock, NULL);
    pthread_mutex_init(&st->mu, NULL);
    pthread_mutex_init(&st->readahead_mu, NULL);
    pthread_condattr_t mono;
    pthread_condattr_init(&mono);
    pthread_condattr_setclock(&mono, CLOCK_MONOTONIC); /* do_wait_work */
    pthread_cond_init(&st->work, &mono);
    pthread_condattr_destroy(&mono);
    pthread_cond_init(&st->space, NULL);
    if (opts)
        st->opts = *opts;
    else
        nd_store_options_default(&st->opts);
    st->base.detections_max = st->opts.detections_max;
    st->base.audit_max_entries = st->opts.audit_max_entries;
    st->base.audit_max_age_us = st->opts.audit_max_age_us;
    if (st->opts.max_batch == 0)
        st->opts.max_batch = 4096;
    if (st->opts.max_batch > MAX_BATCH)
        st->opts.max_batch = MAX_BATCH;
    st->queue_max = st->opts.max_batch * 4u > QUEUE_MIN ? st->opts.max_batch * 4u : QUEUE_MIN;

    bool dir_created = false, data_exists = false;
    int rc = ensure_dir(dir, "data directory", &dir_created, err, errlen);
    if (rc == 0 && (rc = take_lock(dir, err, errlen)) >= 0) {
        st->lock_fd = rc;
        rc = check_data_file(dir, &data_exists, err, errlen);
    }
    if (rc == 0 && !data_exists && st->opts.map_size == 0) {
        nd_store_options d;
        nd_store_options_default(&d);
        st->opts.map_size = d.map_size;
    }
    if (rc == 0 && (rc = env_open(st, err, errlen)) != 0 && !data_exists)
        remove_new_data(dir); /* e.g. disk full: do not leave a stub */
    if (rc == 0 && !data_exists && (rc = sync_dir(dir)) != 0)
        set_err(err, errlen, rc, "cannot sync data directory %s: %s", dir, strerror(-rc));
    if (rc == 0 && dir_created && (rc = dir_parent_sync(dir)) != 0)
        set_err(err, errlen, rc, "cannot sync the parent of %s: %s", dir, strerror(-rc));
    if (rc == 0) {
        probe_space(st); /* a full map or disk: open, not writable */
        rc = -pthread_create(&st->thread, NULL, commit_main, st);
        if (rc)
            set_err(err, errlen, rc, "cannot start the commit thread: %s", strerror(-rc));
    }
    if (rc) {
        store_free(st);
        return rc;
    }
    st->thread_started = true;
    *out = st;
    return 0;
}

/* Appends c to the queue, waiting for room (or, with opts.shed, not: c is
 * freed). Returns 0, -EBUSY (shed) or -ESHUTDOWN. */
static int enqueue(nd_store *st, change *c)
{
    pthread_mutex_lock(&st->mu);
    while (!st->closing && st->head &&
           (st->queued >= st->queue_max || st->queued_bytes + c->size > QUEUE_BYTES)) {
        if (st->opts.shed) {
            pthread_mutex_unlock(&st->mu);
            free(c);
            return -EBUSY;
        }
        pthread_cond_wait(&st->space, &st->mu);
    }
    if (st->closing) {
        pthread_mutex_unlock(&st->mu);
        free(c);
        return -ESHUTDOWN;
    }
    if (st->tail)
        st->tail->next = c;
    else
        st->head = c;
    st->tail = c;
    st->queued++;
    st->queued_bytes += c->size;
    if (!st->gathering || batch_full(st))
        pthread_cond_signal(&st->work);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

static void lmdb_hurry(nd_store *st)
{
    if (!st->opts.gather_ms)
        return; /* the commit thread never waits for more */
    pthread_mutex_lock(&st->mu);
    st->hurry = true;
    pthread_cond_signal(&st->work);
    pthread_mutex_unlock(&st->mu);
}

static change *change_new(enum change_kind kind, size_t len, nd_store_done_fn done, void *arg)
{
    size_t size = sizeof(change) + len;
    change *c = malloc(size);
    if (!c)
        return NULL;
    c->next = NULL;
    c->done = done;
    c->arg = arg;
    c->status = 0;
    c->kind = kind;
    c->len = (uint32_t)len;
    c->sketch_len = 0;
    c->keep_sketch = false;
    c->ev_len = 0;
    c->sup_len = 0;
    c->stream_seq = 0;
    c->size = size;
    return c;
}

static int queue_record(nd_store *st, enum change_kind kind, const nd_record *rec,
                        const nd_store_event *audit, nd_store_done_fn done, void *arg)
{
    size_t vlen = nd_record_check(rec);
    if (!st || !vlen || !nd_record_audit_ok(audit))
        return -EINVAL;
    size_t vsize = nd_record_value_size(rec, vlen), esize = audit ? event_size(audit) : 0;
    change *c = change_new(kind, KEY_SIZE + vsize + rec->sketch_len + esize, done, arg);
    if (!c)
        return -ENOMEM;
    wr_key(c->data, rec->registered_at_us);
    nd_record_value_encode(c->data + KEY_SIZE, rec, vlen);
    if (rec->sketch_len)
        memcpy(c->data + KEY_SIZE + vsize, rec->sketch, rec->sketch_len);
    if (audit)
        encode_event(c->data + KEY_SIZE + vsize + rec->sketch_len, audit);
    c->ev_len = (uint32_t)esize;
    c->sketch_len = (uint32_t)rec->sketch_len;
    c->stream_seq = rec->stream_seq;
    return enqueue(st, c);
}

static int lmdb_amend(nd_store *st, const nd_record *rec, const nd_store_event *audit,
                      nd_store_done_fn done, void *arg)
{
    if (!st || !rec || !nd_record_audit_ok(audit))
        return -EINVAL;
    nd_record r = *rec;
    r.sketch = NULL; /* kept as stored */
    r.sketch_len = 0;
    size_t vlen = nd_record_check(&r);
    if (!vlen)
        return -EINVAL;
    if (!nd_record_refs_ok(&r))
        return -EINVAL;
    size_t vsize = nd_record_value_size(&r, vlen), esize = audit ? event_size(audit) : 0, ssize = 0;
    size_t nsup = r.supersede ? r.nsupersede : 0;
    for (size_t i = 0; i < nsup; i++)
        ssize += KEY_SIZE + 2 + r.supersede[i].id_len;
    change *c = change_new(CHANGE_AMEND, KEY_SIZE + vsize + ssize + esize, done, arg);
    if (!c)
        return -ENOMEM;
    wr_key(c->data, r.registered_at_us);
    nd_record_value_encode(c->data + KEY_SIZE, &r, vlen);
    unsigned char *q = c->data + KEY_SIZE + vsize;
    for (size_t i = 0; i < nsup; i++) {
        wr_key(q, r.supersede[i].registered_at_us);
        q[KEY_SIZE] = (unsigned char)r.supersede[i].id_len;
        q[KEY_SIZE + 1] = (unsigned char)(r.supersede[i].id_len >> 8);
        memcpy(q + KEY_SIZE + 2, r.supersede[i].id, r.supersede[i].id_len);
        q += KEY_SIZE + 2 + r.supersede[i].id_len;
    }
    if (audit)
        encode_event(q, audit);
    c->ev_len = (uint32_t)esize;
    c->sup_len = (uint32_t)ssize;
    c->keep_sketch = true;
    c->stream_seq = rec->stream_seq;
    return enqueue(st, c);
}

static int lmdb_event_put(nd_store *st, const nd_store_event *ev, nd_store_done_fn done, void *arg)
{
    if (!st || !nd_record_event_ok(ev))
        return -EINVAL;
    size_t esize = event_size(ev);
    change *c = change_new(CHANGE_EVENT, esize, done, arg);
    if (!c)
        return -ENOMEM;
    encode_event(c->data, ev);
    c->ev_len = (uint32_t)esize;
    return enqueue(st, c);
}

static int lmdb_put(nd_store *st, const nd_record *rec, const nd_store_event *audit,
                    nd_store_done_fn done, void *arg)
{
    return queue_record(st, CHANGE_PUT, rec, audit, done, arg);
}

static int lmdb_replace(nd_store *st, const nd_record *rec, nd_store_done_fn done, void *arg)
{
    return queue_record(st, CHANGE_REPLACE_AT, rec, NULL, done, arg);
}

static int lmdb_delete_at(nd_store *st, const char *id, size_t id_len, int64_t registered_at_us,
                          uint64_t stream_seq, const nd_store_event *audit, nd_store_done_fn done,
                          void *arg)
{
    if (!st || !nd_record_id_ok(id, id_len) || registered_at_us < 0 || !nd_record_audit_ok(audit))
        return -EINVAL;
    size_t esize = audit ? event_size(audit) : 0;
    change *c = change_new(CHANGE_DELETE_AT, KEY_SIZE + id_len + esize, done, arg);
    if (!c)
        return -ENOMEM;
    wr_key(c->data, registered_at_us);
    memcpy(c->data + KEY_SIZE, id, id_len);
    if (audit)
        encode_event(c->data + KEY_SIZE + id_len, audit);
    c->ev_len = (uint32_t)esize;
    c->stream_seq = stream_seq;
    return enqueue(st, c);
}

/* Begins a read transaction with env_lock held shared. On success the
 * caller ends with read_end(). Returns 0 or -errno (lock released). */
static int read_begin(nd_store *st, MDB_txn **txn)
{
    pthread_rwlock_rdlock(&st->env_lock);
    int rc = st->env ? mdb_txn_begin(st->env, NULL, MDB_RDONLY, txn) : MDB_PANIC;
    if (rc) {
        pthread_rwlock_unlock(&st->env_lock);
        return mdb_errno(rc);
    }
    return 0;
}

static void read_end(nd_store *st, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&st->env_lock);
}

/* Starts reading the records ahead (readahead.h) unless it runs already. */
static void lmdb_prefetch(nd_store *st)
{
    pthread_mutex_lock(&st->readahead_mu);
    if (!st->readahead)
        st->readahead = nd_readahead_start(&st->env, &st->dbi, DB_RECORDS, &st->env_lock);
    pthread_mutex_unlock(&st->readahead_mu);
}

/* Takes the running read-ahead (NULL: none) for the caller to stop. */
static nd_readahead *readahead_take(nd_store *st)
{
    pthread_mutex_lock(&st->readahead_mu);
    nd_readahead *ra = st->readahead;
    st->readahead = NULL;
    pthread_mutex_unlock(&st->readahead_mu);
    return ra;
}

static int lmdb_scan(nd_store *st, int (*visit)(void *arg, const nd_record *rec), void *arg)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    MDB_val k, v;
    nd_record r;
    /* The records' leaves are read ahead, the sketches' between them not:
     * by the read-ahead nd_store_prefetch() started, or by a new one. Its
     * own shared hold of env_lock never waits behind a reopen waiting for
     * ours: the lock prefers readers (glibc's default). */
    lmdb_prefetch(st);
    nd_readahead *ra = readahead_take(st);
    int rc = read_begin(st, &txn);
    if (rc) {
        nd_readahead_stop(ra);
        return rc;
    }
    if ((rc = mdb_cursor_open(txn, st->dbi, &cur))) {
        nd_readahead_stop(ra);
        read_end(st, txn);
        return mdb_errno(rc);
    }
    int ret = 0;
    while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
        if ((ret = decode_value(&k, &v, &r)) || (ret = visit(arg, &r)))
            break;
    }
    if (ret == 0 && rc != MDB_NOTFOUND)
        ret = mdb_errno(rc);
    mdb_cursor_close(cur);
    nd_readahead_stop(ra);
    read_end(st, txn);
    return ret;
}

static int lmdb_get(nd_store *st, int64_t registered_at_us,
                    int (*visit)(void *arg, const nd_record *rec), void *arg)
{
    MDB_txn *txn;
    nd_record r;
    unsigned char key[KEY_SIZE];
    if (!st || registered_at_us < 0)
        return -EINVAL;
    wr_key(key, registered_at_us);
    int rc = read_begin(st, &txn);
    if (rc)
        return rc;
    MDB_val k = {KEY_SIZE, key}, v;
    rc = mdb_get(txn, st->dbi, &k, &v);
    if (rc)
        rc = mdb_errno(rc);
    else if ((rc = decode_value(&k, &v, &r)) == 0)
        rc = visit(arg, &r);
    read_end(st, txn);
    return rc;
}

static int lmdb_sketches(nd_store *st, const int64_t *at, size_t n,
                         int (*visit)(void *arg, size_t i, const uint8_t *buf, size_t len),
                         void *arg)
{
    MDB_txn *txn;
    unsigned char key[KEY_SIZE];
    if (!st)
        return -EINVAL;
    int rc = read_begin(st, &txn);
    if (rc)
        return rc;
    for (size_t i = 0; i < n && rc == 0; i++) {
        MDB_val k = {KEY_SIZE, key}, v;
        if (at[i] < 0) {
            rc = visit(arg, i, NULL, 0);
            continue;
        }
        wr_key(key, at[i]);
        int g = mdb_get(txn, st->sketch_dbi, &k, &v);
        if (g == 0)
            rc = visit(arg, i, v.mv_data, v.mv_size);
        else if (g == MDB_NOTFOUND)
            rc = visit(arg, i, NULL, 0);
        else
            rc = mdb_errno(g);
    }
    read_end(st, txn);
    return rc;
}

static int lmdb_events(nd_store *st, nd_event_kind kind, int64_t owner_at, int64_t before_at,
                       size_t limit, int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    if (!st || owner_at < 0 || (kind != ND_EVENT_DETECTION && kind != ND_EVENT_AUDIT))
        return -EINVAL;
    int rc = read_begin(st, &txn);
    if (rc)
        return rc;
    if ((rc = mdb_cursor_open(txn, kind == ND_EVENT_DETECTION ? st->det_dbi : st->audit_dbi,
                              &cur))) {
        read_end(st, txn);
        return mdb_errno(rc);
    }
    /* Seek the first key at or after (owner_at, before), step back once:
     * the newest strictly before it. */
    unsigned char start[EV_KEY], owner[8];
    wr_key(owner, owner_at);
    memcpy(start, owner, 8);
    wr_key(start + 8, before_at >= 0 ? before_at : INT64_MAX);
    MDB_val k = {EV_KEY, start}, v;
    rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    if (rc == 0 && before_at < 0 && k.mv_size == EV_KEY && memcmp(k.mv_data, start, EV_KEY) == 0)
        rc = 0; /* an event at INT64_MAX itself: the newest */
    else if (rc == 0)
        rc = mdb_cursor_get(cur, &k, &v, MDB_PREV);
    else if (rc == MDB_NOTFOUND)
        rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
    int ret = 0;
    size_t seen = 0;
    while (rc == 0 && (limit == 0 || seen < limit)) {
        nd_store_event ev;
        if (k.mv_size != EV_KEY || memcmp(k.mv_data, owner, 8) != 0)
            break;
        if ((ret = decode_event(kind, &k, &v, &ev)) || (ret = visit(arg, &ev)))
            break;
        seen++;
        rc = mdb_cursor_get(cur, &k, &v, MDB_PREV);
    }
    if (ret == 0 && rc && rc != MDB_NOTFOUND)
        ret = mdb_errno(rc);
    mdb_cursor_close(cur);
    read_end(st, txn);
    return ret;
}

/* One audit entry the index names (ak: its index key) if it is of document
 * doc: visited, *seen counted. Returns 0, visit's value, or -errno. */
static int audit_visit_indexed(nd_store *st, MDB_txn *txn, const unsigned char *ak, const char *doc,
                               size_t len, nd_json_scratch *js,
                               int (*visit)(void *arg, const nd_store_event *ev), void *arg,
                               size_t *seen)
{
    MDB_val k = {EV_KEY, (void *)(ak + 16)}, v;
    nd_store_event ev;
    const char *sd;
    size_t sl;
    int rc = mdb_get(txn, st->audit_dbi, &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0; /* cannot happen: dropped with its entry */
    if (rc)
        return mdb_errno(rc);
    if ((rc = decode_event(ND_EVENT_AUDIT, &k, &v, &ev)))
        return rc;
    if (!nd_store_audit_subject(ev.value, ev.value_len, js, &sd, &sl) || sl != len ||
        memcmp(sd, doc, len) != 0)
        return 0; /* another document of the same hash */
    (*seen)++;
    return visit(arg, &ev);
}

static int lmdb_audit_of(nd_store *st, int64_t owner_at, const char *doc, size_t len,
                         int64_t before_at, size_t limit,
                         int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    if (!st || owner_at < 0 || !doc || len == 0 || len > ND_ID_MAX)
        return -EINVAL;
    int rc = read_begin(st, &txn);
    if (rc)
        return rc;
    if ((rc = mdb_cursor_open(txn, st->auditdoc_dbi, &cur))) {
        read_end(st, txn);
        return mdb_errno(rc);
    }
    /* As lmdb_events(): seek (document, owner, before), step back. */
    unsigned char start[AIDX_KEY];
    audit_doc_key(start, doc, len, owner_at, before_at >= 0 ? before_at : INT64_MAX);
    MDB_val k = {AIDX_KEY, start}, v;
    rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    if (rc == 0 && before_at < 0 && k.mv_size == AIDX_KEY &&
        memcmp(k.mv_data, start, AIDX_KEY) == 0)
        rc = 0;
    else if (rc == 0)
        rc = mdb_cursor_get(cur, &k, &v, MDB_PREV);
    else if (rc == MDB_NOTFOUND)
        rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
    nd_json_scratch js = {0};
    int ret = 0;
    size_t seen = 0;
    while (rc == 0 && (limit == 0 || seen < limit)) {
        if (k.mv_size != AIDX_KEY || memcmp(k.mv_data, start, 24) != 0)
            break; /* another document or owner */
        if ((ret = audit_visit_indexed(st, txn, k.mv_data, doc, len, &js, visit, arg, &seen)))
            break;
        rc = mdb_cursor_get(cur, &k, &v, MDB_PREV);
    }
    if (ret == 0 && rc && rc != MDB_NOTFOUND)
        ret = mdb_errno(rc);
    nd_json_scratch_finish(&js);
    mdb_cursor_close(cur);
    read_end(st, txn);
    return ret;
}

static uint64_t lmdb_stream_seq(nd_store *st)
{
    return atomic_load(&st->stream_seq);
}

static int64_t lmdb_count(nd_store *st)
{
    MDB_txn *txn;
    MDB_stat ms;
    int rc = read_begin(st, &txn);
    if (rc)
        return rc;
    rc = mdb_stat(txn, st->dbi, &ms);
    read_end(st, txn);
    return rc ? mdb_errno(rc) : (int64_t)ms.ms_entries;
}

/* Copies env into dst_dir/data.mdb through a temporary file. */
static int copy_env(MDB_env *env, const char *dst_dir, char *err, size_t errlen)
{
    bool created;
    int rc = ensure_dir(dst_dir, "backup directory", &created, err, errlen);
    if (rc)
        return rc;
    char *final = path_join(dst_dir, DATA_NAME);
    char *tmp = path_join(dst_dir, DATA_NAME ".XXXXXX");
    int fd = -1;
    if (!final || !tmp) {
        rc = set_err(err, errlen, -ENOMEM, "out of memory");
        goto out;
    }
    if (access(final, F_OK) == 0) {
        rc = set_err(err, errlen, -EEXIST, "%s already holds a store", dst_dir);
        goto out;
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        set_err(err, errlen, rc, "cannot create a file in %s: %s", dst_dir, strerror(-rc));
        goto out;
    }
    rc = mdb_env_copyfd2(env, fd, MDB_CP_COMPACT);
    if (rc == MDB_INCOMPATIBLE && ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0)
        rc = mdb_env_copyfd2(env, fd, 0); /* compaction refused: page leak */
    if (rc) {
        set_err(err, errlen, mdb_errno(rc), "copying the store into %s failed: %s", dst_dir,
                mdb_strerror(rc));
        rc = mdb_errno(rc);
    } else if (fsync(fd)) {
        rc = -errno;
        set_err(err, errlen, rc, "cannot sync the copy in %s: %s", dst_dir, strerror(-rc));
    } else if (link(tmp, final)) {
        rc = -errno;
        set_err(err, errlen, rc, "cannot create %s: %s", final, strerror(-rc));
    } else if ((rc = sync_dir(dst_dir)) != 0) {
        set_err(err, errlen, rc, "cannot sync %s: %s", dst_dir, strerror(-rc));
    }
    close(fd);
    unlink(tmp);
    if (rc == 0 && created)
        dir_parent_sync(dst_dir);
out:
    free(final);
    free(tmp);
    return rc;
}

int nd_store_backup(nd_store *st, const char *dir, char *err, size_t errlen)
{
    if (!st || !dir || !*dir)
        return set_err(err, errlen, -EINVAL, "no backup directory given");
    pthread_rwlock_rdlock(&st->env_lock);
    int rc = st->env ? copy_env(st->env, dir, err, errlen)
                     : set_err(err, errlen, -EIO, "the store in %s is not open", st->dir);
    pthread_rwlock_unlock(&st->env_lock);
    return rc;
}

int nd_store_backup_path(const char *src_dir, const char *dst_dir, char *err, size_t errlen)
{
    MDB_env *env = NULL;
    bool exists;
    if (!src_dir || !*src_dir || !dst_dir || !*dst_dir)
        return set_err(err, errlen, -EINVAL, "no source or backup directory given");
    int rc = check_data_file(src_dir, &exists, err, errlen);
    if (rc == 0 && !exists)
        rc = set_err(err, errlen, -ENOENT, "no store in %s (no " DATA_NAME ")", src_dir);
    if (rc)
        return rc;
    if ((rc = mdb_env_create(&env)))
        return open_err(rc, src_dir, "mdb_env_create", err, errlen);
    mdb_env_set_maxdbs(env, MAX_DBS);
    if ((rc = claim_lock_file(src_dir, err, errlen)))
        goto out;
    if ((rc = mdb_env_open(env, src_dir, MDB_RDONLY | MDB_NOTLS, FILE_MODE))) {
        rc = open_err(rc, src_dir, "mdb_env_open", err, errlen);
        goto out;
    }
    if ((rc = check_size(env, src_dir, err, errlen)))
        goto out;
    rc = copy_env(env, dst_dir, err, errlen);
    if (rc == -EAGAIN) { /* the holder grew the map meanwhile */
        mdb_env_set_mapsize(env, 0);
        rc = copy_env(env, dst_dir, err, errlen);
    }
out:
    mdb_env_close(env);
    return rc;
}

static bool lmdb_writable(const nd_store *st)
{
    return st && atomic_load(&((nd_store *)st)->writable);
}

static void lmdb_get_stats(nd_store *st, nd_store_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!st)
        return;
    out->commits = atomic_load(&st->commits);
    out->changes = atomic_load(&st->changes);
    out->failed_commits = atomic_load(&st->failed_commits);
    out->failed_changes = atomic_load(&st->failed_changes);
    out->max_batch = atomic_load(&st->max_batch);
    out->reopens = atomic_load(&st->reopens);
    out->appended = atomic_load(&st->appended);
    out->probes = atomic_load(&st->probes);
    out->commit_us_sum = atomic_load(&st->commit_us_sum);
    for (unsigned i = 0; i <= ND_STORE_COMMIT_BUCKETS; i++)
        out->commit_buckets[i] = atomic_load(&st->commit_buckets[i]);
    pthread_mutex_lock(&st->mu);
    out->queued = st->queued;
    pthread_mutex_unlock(&st->mu);
}

static void lmdb_close(nd_store *st)
{
    if (!st)
        return;
    pthread_mutex_lock(&st->mu);
    st->closing = true;
    pthread_cond_broadcast(&st->work);
    pthread_cond_broadcast(&st->space);
    pthread_mutex_unlock(&st->mu);
    if (st->thread_started)
        pthread_join(st->thread, NULL);
    nd_readahead_stop(readahead_take(st));
    if (st->env && !st->opts.sync)
        mdb_env_sync(st->env, 1); /* a clean close is durable in any mode */
    store_free(st);
}

static const nd_store_ops lmdb_ops = {
    .name = "lmdb",
    .durable = true,
    .commits_in_call = false,
    .put = lmdb_put,
    .replace = lmdb_replace,
    .amend = lmdb_amend,
    .event_put = lmdb_event_put,
    .list_events = lmdb_events,
    .list_audit = lmdb_audit_of,
    .delete_at = lmdb_delete_at,
    .stream_seq = lmdb_stream_seq,
    .prefetch = lmdb_prefetch,
    .hurry = lmdb_hurry,
    .scan = lmdb_scan,
    .get = lmdb_get,
    .sketches = lmdb_sketches,
    .count = lmdb_count,
    .writable = lmdb_writable,
    .get_stats = lmdb_get_stats,
    .close = lmdb_close,
};
