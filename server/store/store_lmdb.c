/* store_lmdb.c - the durable registry of documents, on LMDB: the LMDB
 * implementation of store.h's interface (lmdb_ops; nd_store_open()).
 * This file holds the store's face (open, reads, scans, backup, stats,
 * close, the ops table); lmdb_commit.c the queued writes and the commit
 * thread; lmdb_open.c opening and reopening the environment;
 * lmdb_journals.c the journals; lmdb_env.h and lmdb_env.c what they all
 * share; record.c the value layouts.
 *
 * Files. dir/data.mdb and dir/lock.mdb belong to LMDB. dir/neardup.lock is
 * ours: the open store holds flock(LOCK_EX) on it (and writes its pid into
 * it), because LMDB itself lets any number of processes write one
 * environment. The environment holds named databases: "info" (one key,
 * "format": "ndst" + u32 store format, now 2), "records", "sketches", "texts" and
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
 * Their value: event value layout 1 (record.c). "detection_ids" indexes
 * detections: the key owner_at (8) + XXH3-128 of the copy id (16) -> its
 * at_us (8, big-endian); the
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
 * from the log, once); they are written in the transactions of the writes
 * (a detection; a put's, delete's or amend's audit event) that make them.
 * A registration's audit entry and its index key cost ~270 bytes of
 * data.mdb (+20 % over 1000 registrations of ~2 KB texts) and 4 more dirty
 * pages in a commit of one registration (the index key's leaf lies at a
 * random place); measured on 2 shared cores against the build before them:
 * latency 1.01x (one client), durable registrations/s 1.00x (loadgen).
 * The "sketches" database holds each record's encoded sketch (sketch.h;
 * read only for the candidates of a query, so start-up scans stay small)
 * under the record's key, written and deleted in the record's transaction.
 * The "texts" database holds each record's kept text (nd_record.text),
 * packed (text_pack.h: u8 codec, one zstd frame), cut in chunks of
 * TEXT_CHUNK bytes under the keys (registered_at_us, chunk number 0..: 4
 * bytes big-endian), so that no value spills to overflow pages and six
 * chunks fill a leaf; written after the sketches of a transaction's puts
 * (MDB_APPEND), replaced by a replace (every old chunk first), left by an
 * amend, deleted with the record, in the record's transaction; a record
 * without a kept text has no key there; a chunk missing reads as -EBADMSG. Scans and
 * start-up never read it: it is read only by nd_store_text(), so a kept text
 * costs disk and no memory (proto/scale.md: "Kept texts").
 *
 * Concurrency. One mutex (mu) guards the FIFO of queued writes; submitters
 * append and signal `work`; the commit thread takes up to max_batch writes
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
 * A failed batch of several writes is retried one write per transaction,
 * so the writes that still fit are committed and only the rest get
 * -ENOSPC. Every later batch tries again, so writes resume by themselves
 * when space is freed (deleted records, finished readers, disk space), or
 * after a restart with a larger map_size; while no write comes, a probe
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
#include "lmdb_commit.h"
#include "lmdb_journals.h"
#include "lmdb_open.h"
/* ---- helpers ------------------------------------------------------------ */

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

/* ---- environment ---------------------------------------------------------- */

/* Takes neardup.lock in dir (flock, non-blocking). Returns the fd or -errno. */
static int take_lock(const char *dir, char *err, size_t errlen)
{
    char *path = lmdb_path_join(dir, LOCK_NAME);
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
    char *path = lmdb_path_join(dir, DATA_NAME);
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
    char *path = lmdb_path_join(dir, DATA_NAME);
    if (path)
        unlink(path);
    free(path);
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
    if (rc == 0 && (rc = lmdb_env_open(st, err, errlen)) != 0 && !data_exists)
        remove_new_data(dir); /* e.g. disk full: do not leave a stub */
    if (rc == 0 && !data_exists && (rc = sync_dir(dir)) != 0)
        set_err(err, errlen, rc, "cannot sync data directory %s: %s", dir, strerror(-rc));
    if (rc == 0 && dir_created && (rc = dir_parent_sync(dir)) != 0)
        set_err(err, errlen, rc, "cannot sync the parent of %s: %s", dir, strerror(-rc));
    if (rc == 0) {
        lmdb_probe_space(st); /* a full map or disk: open, not writable */
        rc = -pthread_create(&st->thread, NULL, lmdb_commit_main, st);
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
    int rc = lmdb_read_begin(st, &txn);
    if (rc) {
        nd_readahead_stop(ra);
        return rc;
    }
    if ((rc = mdb_cursor_open(txn, st->dbi, &cur))) {
        nd_readahead_stop(ra);
        lmdb_read_end(st, txn);
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
    lmdb_read_end(st, txn);
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
    int rc = lmdb_read_begin(st, &txn);
    if (rc)
        return rc;
    MDB_val k = {KEY_SIZE, key}, v;
    rc = mdb_get(txn, st->dbi, &k, &v);
    if (rc)
        rc = mdb_errno(rc);
    else if ((rc = decode_value(&k, &v, &r)) == 0)
        rc = visit(arg, &r);
    lmdb_read_end(st, txn);
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
    int rc = lmdb_read_begin(st, &txn);
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
    lmdb_read_end(st, txn);
    return rc;
}

static int lmdb_text(nd_store *st, int64_t registered_at_us,
                     int (*visit)(void *arg, const char *text, size_t len), void *arg)
{
    MDB_txn *txn;
    unsigned char key[TEXT_KEY];
    char *text = NULL;
    size_t len = 0;
    if (!st || registered_at_us < 0)
        return -EINVAL;
    wr_text_key(key, registered_at_us, 0);
    int rc = lmdb_read_begin(st, &txn);
    if (rc)
        return rc;
    MDB_cursor *cur;
    if ((rc = mdb_cursor_open(txn, st->text_dbi, &cur)) != 0) {
        lmdb_read_end(st, txn);
        return mdb_errno(rc);
    }
    /* Its chunks, in order: one is unpacked from the map as it is, several
     * are joined first. Unpacked inside the transaction; visited after it
     * ends, so a slow visit holds no reader slot. */
    MDB_val k = {TEXT_KEY, key}, v;
    unsigned char *joined = NULL;
    size_t n = 0;
    uint32_t i = 0;
    rc = mdb_errno(mdb_cursor_get(cur, &k, &v, MDB_SET_KEY));
    while (rc == 0) {
        MDB_val nk, nv;
        int next = mdb_cursor_get(cur, &nk, &nv, MDB_NEXT);
        if (next && next != MDB_NOTFOUND) {
            rc = mdb_errno(next);
            break;
        }
        bool more = next == 0 && nk.mv_size == TEXT_KEY && memcmp(nk.mv_data, key, KEY_SIZE) == 0;
        if (!more && !joined) { /* a text of one chunk */
            rc = nd_text_unpack(v.mv_data, v.mv_size, &text, &len);
            break;
        }
        unsigned char *grown = realloc(joined, n + v.mv_size);
        if (!grown) {
            rc = -ENOMEM;
            break;
        }
        joined = grown;
        memcpy(joined + n, v.mv_data, v.mv_size);
        n += v.mv_size;
        i++;
        if (!more) {
            rc = nd_text_unpack(joined, n, &text, &len);
            break;
        }
        unsigned char want[TEXT_KEY];
        wr_text_key(want, registered_at_us, i);
        if (memcmp(nk.mv_data, want, TEXT_KEY) != 0) {
            rc = -EBADMSG; /* a chunk missing */
            break;
        }
        v = nv;
    }
    free(joined);
    mdb_cursor_close(cur);
    lmdb_read_end(st, txn);
    if (rc == 0)
        rc = visit(arg, text, len);
    free(text);
    return rc;
}

static uint64_t lmdb_stream_seq(nd_store *st)
{
    return atomic_load(&st->stream_seq);
}

static int64_t lmdb_count(nd_store *st)
{
    MDB_txn *txn;
    MDB_stat ms;
    int rc = lmdb_read_begin(st, &txn);
    if (rc)
        return rc;
    rc = mdb_stat(txn, st->dbi, &ms);
    lmdb_read_end(st, txn);
    return rc ? mdb_errno(rc) : (int64_t)ms.ms_entries;
}

/* Copies env into dst_dir/data.mdb through a temporary file. */
static int copy_env(MDB_env *env, const char *dst_dir, char *err, size_t errlen)
{
    bool created;
    int rc = ensure_dir(dst_dir, "backup directory", &created, err, errlen);
    if (rc)
        return rc;
    char *final = lmdb_path_join(dst_dir, DATA_NAME);
    char *tmp = lmdb_path_join(dst_dir, DATA_NAME ".XXXXXX");
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
        return lmdb_open_err(rc, src_dir, "mdb_env_create", err, errlen);
    mdb_env_set_maxdbs(env, MAX_DBS);
    if ((rc = lmdb_claim_lock_file(src_dir, err, errlen)))
        goto out;
    if ((rc = mdb_env_open(env, src_dir, MDB_RDONLY | MDB_NOTLS, FILE_MODE))) {
        rc = lmdb_open_err(rc, src_dir, "mdb_env_open", err, errlen);
        goto out;
    }
    if ((rc = lmdb_check_size(env, src_dir, err, errlen)))
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
    out->changes = atomic_load(&st->writes);
    out->failed_commits = atomic_load(&st->failed_commits);
    out->failed_changes = atomic_load(&st->failed_writes);
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
    .text = lmdb_text,
    .count = lmdb_count,
    .writable = lmdb_writable,
    .get_stats = lmdb_get_stats,
    .close = lmdb_close,
};
