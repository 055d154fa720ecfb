/* lmdb_commit.c - the LMDB store's writes: the bounded queue submitters
 * append to (put, replace, amend, delete, event), and the group-commit
 * thread that applies a batch of them in one write transaction, retries a
 * batch that does not fit one write at a time, probes for space while not
 * writable, keeps zeroed headroom past the last page and runs the
 * callbacks (store_lmdb.c: "Concurrency", "Space",
 * "Headroom"). */
#include "lmdb_commit.h"
#include "lmdb_journals.h"
#include "lmdb_open.h"

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

/* The length of a record write's value (after the key, before the
 * text, the sketch or the event). */
static size_t op_value_len(const write_op *c)
{
    return c->len - KEY_SIZE - c->text_len - c->sketch_len - c->ev_len - c->sup_len;
}

/* A put's or replace's packed text (text_len bytes, after the value). */
static unsigned char *op_text(const write_op *c)
{
    return (unsigned char *)c->data + KEY_SIZE + op_value_len(c);
}

/* A put's or replace's sketch (sketch_len bytes, before the event). */
static unsigned char *op_sketch(const write_op *c)
{
    return (unsigned char *)c->data + c->len - c->ev_len - c->sketch_len;
}

/* Inserts a record. The key is tried with MDB_APPEND when it is above the
 * last_key hint; LMDB then checks it against the real last key and answers
 * MDB_KEYEXIST when it is not greater (out of order, or a duplicate), and
 * the put is retried as an ordinary insert, which tells the two apart.
 * A duplicate key gives the write -EEXIST and leaves the stored record. */
static int apply_put(nd_store *st, MDB_txn *txn, write_op *c, int64_t *last, txn_result *res)
{
    MDB_val k = {KEY_SIZE, c->data};
    size_t vsize = op_value_len(c);
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

/* Writes the packed text p[0..n) kept with the record at key (KEY_SIZE
 * bytes) as chunks of TEXT_CHUNK bytes, each tried with MDB_APPEND first
 * when append (a put: its keys follow every stored one's, mostly). */
static int text_put(nd_store *st, MDB_txn *txn, const unsigned char *key, const unsigned char *p,
                    size_t n, bool append)
{
    unsigned char tk[TEXT_KEY];
    int64_t t = rd_key(key);
    for (uint32_t i = 0; n > 0; i++) {
        size_t len = n < TEXT_CHUNK ? n : TEXT_CHUNK;
        wr_text_key(tk, t, i);
        MDB_val k = {TEXT_KEY, tk}, v = {len, (void *)p};
        int rc = append ? mdb_put(txn, st->text_dbi, &k, &v, MDB_APPEND) : MDB_KEYEXIST;
        if (rc == MDB_KEYEXIST) {
            v = (MDB_val){len, (void *)p};
            rc = mdb_put(txn, st->text_dbi, &k, &v, 0);
        }
        if (rc)
            return rc;
        p += len;
        n -= len;
    }
    return 0;
}

/* Deletes every chunk of the text kept with the record at key (none:
 * nothing). Returns 0 or the LMDB error. */
static int text_drop(nd_store *st, MDB_txn *txn, const unsigned char *key)
{
    MDB_cursor *cur;
    unsigned char tk[TEXT_KEY];
    int64_t t = rd_key(key);
    int rc = mdb_cursor_open(txn, st->text_dbi, &cur);
    if (rc)
        return rc;
    for (;;) {
        wr_text_key(tk, t, 0);
        MDB_val k = {TEXT_KEY, tk}, v;
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        if (rc || k.mv_size != TEXT_KEY || memcmp(k.mv_data, key, KEY_SIZE) != 0)
            break;
        if ((rc = mdb_cursor_del(cur, 0)) != 0)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND || rc == 0 ? 0 : rc;
}

/* Puts the sketches, then the texts, then the audit events, of the
 * records that the puts from first up to (not including) stop inserted
 * (apply_put: status 0). Sketches and texts are tried with MDB_APPEND
 * first, like the records, so that their leaves fill too. */
static int put_sketches(nd_store *st, MDB_txn *txn, write_op *first, const write_op *stop,
                        txn_result *res)
{
    for (write_op *c = first; c != stop; c = c->next) {
        if (c->kind != OP_PUT || c->status != 0 || !c->sketch_len)
            continue;
        MDB_val k = {KEY_SIZE, c->data};
        MDB_val sv = {c->sketch_len, op_sketch(c)};
        int rc = mdb_put(txn, st->sketch_dbi, &k, &sv, MDB_APPEND);
        if (rc == MDB_KEYEXIST) {
            sv = (MDB_val){c->sketch_len, op_sketch(c)};
            rc = mdb_put(txn, st->sketch_dbi, &k, &sv, 0);
        }
        if (rc)
            return rc;
    }
    for (write_op *c = first; c != stop; c = c->next) {
        if (c->kind != OP_PUT || c->status != 0 || !c->text_len)
            continue;
        int rc = text_put(st, txn, c->data, op_text(c), c->text_len, true);
        if (rc)
            return rc;
    }
    for (write_op *c = first; c != stop; c = c->next) {
        if (c->kind != OP_PUT || c->status != 0 || !c->ev_len)
            continue;
        int rc = lmdb_apply_event(st, txn, c->data + c->len - c->ev_len, c->ev_len, res);
        if (rc)
            return rc;
    }
    return 0;
}

/* The id a write at a key names: a deletion's own, or the replacing
 * value's. Returns its length (0: none). */
static size_t op_id(write_op *c, const unsigned char **id)
{
    if (c->kind == OP_DELETE_AT) {
        *id = c->data + KEY_SIZE;
        return c->len - KEY_SIZE - c->ev_len;
    }
    MDB_val nv = {op_value_len(c), c->data + KEY_SIZE};
    return value_id(&nv, id);
}

/* Deletes, or replaces with the write's value, the record under the
 * write's key if its id is the write's id. Else the write's status is
 * -ENOENT (no record there, or another id) or -EBADMSG (the stored value
 * cannot be decoded: left as it is), and nothing is written. */
static int apply_at_key(nd_store *st, MDB_txn *txn, MDB_cursor *cur, write_op *c, txn_result *res)
{
    MDB_val k = {KEY_SIZE, c->data}, v;
    const unsigned char *id = NULL, *vid = NULL;
    size_t id_len = op_id(c, &id);
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
    if (c->kind == OP_DELETE_AT) {
        rc = mdb_cursor_del(cur, 0);
    } else {
        MDB_val nv = {op_value_len(c), c->data + KEY_SIZE};
        k = (MDB_val){KEY_SIZE, c->data};
        rc = mdb_cursor_put(cur, &k, &nv, MDB_CURRENT);
    }
    /* The record's sketch goes (or is replaced) with it. */
    k = (MDB_val){KEY_SIZE, c->data};
    if (rc == 0 && c->kind == OP_REPLACE_AT && c->sketch_len) {
        MDB_val sv = {c->sketch_len, op_sketch(c)};
        rc = mdb_put(txn, st->sketch_dbi, &k, &sv, 0);
    } else if (rc == 0 && !c->keep_sketch) {
        rc = mdb_del(txn, st->sketch_dbi, &k, NULL);
        rc = rc == MDB_NOTFOUND ? 0 : rc;
    }
    /* So does its kept text (a replace's shorter text must not keep the
     * old one's last chunks: the old chunks go first). */
    if (rc == 0 && !c->keep_sketch)
        rc = text_drop(st, txn, c->data);
    if (rc == 0 && c->kind == OP_REPLACE_AT && c->text_len)
        rc = text_put(st, txn, c->data, op_text(c), c->text_len, false);
    if (rc)
        return rc;
    c->status = 0;
    res->wrote = true;
    return 0;
}

/* Marks superseded, by the record of amendment c, each record c names
 * that is stored under its key with its id and active; leaves the others.
 * Returns 0 or the LMDB error (-ENOMEM). */
static int apply_supersede(nd_store *st, MDB_txn *txn, write_op *c)
{
    const unsigned char *q = c->data + KEY_SIZE + op_value_len(c);
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

/* Applies a write to the record under its key (delete: with the
 * record's detections; amend: with the records it supersedes; delete or
 * amend: with its audit event, if any, in
 * the same transaction). */
static int apply_at(nd_store *st, MDB_txn *txn, write_op *c, txn_result *res)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, st->dbi, &cur);
    if (rc)
        return rc;
    rc = apply_at_key(st, txn, cur, c, res);
    mdb_cursor_close(cur);
    if (rc == 0 && c->status == 0 && c->kind == OP_DELETE_AT && !c->keep_sketch)
        rc = lmdb_detections_drop(st, txn, c->data);
    if (rc == 0 && c->status == 0 && c->kind == OP_AMEND && c->sup_len)
        rc = apply_supersede(st, txn, c);
    if (rc == 0 && c->status == 0 && c->kind != OP_REPLACE_AT && c->ev_len)
        rc = lmdb_apply_event(st, txn, c->data + c->len - c->ev_len, c->ev_len, res);
    return rc;
}

/* Applies one OP_EVENT. */
static int apply_event_op(nd_store *st, MDB_txn *txn, write_op *c, txn_result *res)
{
    int rc = lmdb_apply_event(st, txn, c->data, c->len, res);
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
    if (rc == MDB_PANIC && lmdb_env_reopen(st) == 0)
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

/* Applies n writes starting at first in one write transaction. Sets each
 * write's status as it would be if the commit succeeds, and *res. Returns
 * the LMDB result of the transaction (0 when committed); the last_key hint
 * advances only with a commit.
 * The sketches of a run of puts are written after the run's records (and
 * before any other write, which may touch them): LMDB hands out new pages
 * in the order it needs them, so the records' leaves of one transaction
 * then lie side by side in data.mdb instead of between sketch pages, and
 * the start-up scan reads them in long runs (readahead.c). */
static int apply_txn(nd_store *st, write_op *first, size_t n, txn_result *res)
{
    MDB_txn *txn;
    *res = (txn_result){false, 0, 0};
    int rc = write_begin(st, &txn);
    if (rc)
        return rc;
    int64_t last = st->last_key;
    uint64_t seq = 0;                 /* the greatest stream sequence in the batch */
    write_op *c = first, *run = NULL; /* run: the first put whose sketch waits */
    for (size_t i = 0; i < n && rc == 0; i++, c = c->next) {
        if (c->kind == OP_PUT) {
            run = run ? run : c;
            rc = apply_put(st, txn, c, &last, res);
        } else {
            if (run && (rc = put_sketches(st, txn, run, c, res)) != 0)
                break;
            run = NULL;
            rc = c->kind == OP_EVENT ? apply_event_op(st, txn, c, res) : apply_at(st, txn, c, res);
        }
        seq = c->stream_seq > seq ? c->stream_seq : seq;
    }
    if (rc == 0 && run)
        rc = put_sketches(st, txn, run, c, res);
    if (rc == 0) /* retention: bounded by what this commit added */
        rc = lmdb_audit_trim(st, txn, res->audits + TRIM_SLACK);
    if (rc == 0 && seq > atomic_load(&st->stream_seq)) /* same transaction as the write */
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
    atomic_fetch_add(&st->writes, n);
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

/* Commits write c alone. A deletion that does not fit at a full map (it
 * touches the records and the sketches) is tried again without its
 * sketch, which stays behind unreachable (keys are never reused), so that
 * deleting still frees space when nothing else can be written. */
static int apply_one(nd_store *st, write_op *c, txn_result *res)
{
    int rc = apply_txn(st, c, 1, res);
    if (rc && is_space_error(rc) && c->kind == OP_DELETE_AT && !c->keep_sketch) {
        count_txn(st, rc, 1, res);
        c->keep_sketch = true;
        rc = apply_txn(st, c, 1, res);
    }
    return rc;
}

/* Commits the batch; when it fails for lack of space, retries each write
 * on its own so that those that fit are kept. */
static void commit_batch(nd_store *st, write_op *batch, size_t n)
{
    txn_result res;
    uint64_t t0 = (uint64_t)nd_clock_us();
    int rc = apply_txn(st, batch, n, &res);
    count_txn(st, rc, n, &res);
    if (rc == 0) {
        count_commit_time(st, (uint64_t)nd_clock_us() - t0);
        return;
    }
    if ((n > 1 || batch->kind == OP_DELETE_AT) && is_space_error(rc)) {
        if (st->env)
            mdb_reader_check(st->env, NULL);
        for (write_op *c = batch; c; c = c->next) {
            int one = apply_one(st, c, &res);
            count_txn(st, one, 1, &res);
            if (one)
                c->status = fail_status(st, one);
        }
        return;
    }
    int status = fail_status(st, rc);
    for (write_op *c = batch; c; c = c->next)
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

/* Finds out whether the store can take writes, without a client's write:
 * commits PROBE_BYTES of new pages (which must reach the disk), then
 * deletes them again. Sets writable accordingly. Runs at open and, while
 * not writable, on the idle commit thread every PROBE_MS, so that
 * readiness returns when space does (a server out of its balancer's
 * rotation gets no registration that could prove it). */
void lmdb_probe_space(nd_store *st)
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

/* Waits for writes or closing. Lock held. While not writable, probes
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
            lmdb_probe_space(st);
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

/* With opts.gather_ms, waits (writes queued) until the queue holds a full
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

/* Detaches up to max_batch writes from the queue. Lock held. */
static write_op *do_take_batch(nd_store *st, size_t *n)
{
    write_op *first = st->head, *last = NULL, *c = first;
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

void *lmdb_commit_main(void *arg)
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
        write_op *batch = do_take_batch(st, &n);
        pthread_cond_broadcast(&st->space);
        pthread_mutex_unlock(&st->mu);

        commit_batch(st, batch, n);
        while (batch) {
            write_op *next = batch->next;
            if (batch->status && batch->status != -ENOENT)
                atomic_fetch_add(&st->failed_writes, 1);
            if (batch->done)
                batch->done(batch->arg, batch->status);
            free(batch);
            batch = next;
        }
        keep_headroom(st);
    }
    return NULL;
}

/* Appends c to the queue, waiting for room (or, with opts.shed, not: c is
 * freed). Returns 0, -EBUSY (shed) or -ESHUTDOWN. */
static int enqueue(nd_store *st, write_op *c)
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

void lmdb_hurry(nd_store *st)
{
    if (!st->opts.gather_ms)
        return; /* the commit thread never waits for more */
    pthread_mutex_lock(&st->mu);
    st->hurry = true;
    pthread_cond_signal(&st->work);
    pthread_mutex_unlock(&st->mu);
}

static write_op *write_op_new(enum write_kind kind, size_t len, nd_store_done_fn done, void *arg)
{
    size_t size = sizeof(write_op) + len;
    write_op *c = malloc(size);
    if (!c)
        return NULL;
    c->next = NULL;
    c->done = done;
    c->arg = arg;
    c->status = 0;
    c->kind = kind;
    c->len = (uint32_t)len;
    c->sketch_len = 0;
    c->text_len = 0;
    c->keep_sketch = false;
    c->ev_len = 0;
    c->sup_len = 0;
    c->stream_seq = 0;
    c->size = size;
    return c;
}

static int queue_record(nd_store *st, enum write_kind kind, const nd_record *rec,
                        const nd_store_event *audit, nd_store_done_fn done, void *arg)
{
    size_t vlen = nd_record_check(rec);
    if (!st || !vlen || !nd_record_audit_ok(audit))
        return -EINVAL;
    size_t vsize = nd_record_value_size(rec, vlen), esize = audit ? event_size(audit) : 0;
    const uint8_t *text;
    size_t tsize;
    uint8_t *packed; /* the text packed here (this thread), or NULL */
    int rc = nd_text_pack_record(rec, &text, &tsize, &packed);
    if (rc)
        return rc;
    write_op *c = write_op_new(kind, KEY_SIZE + vsize + tsize + rec->sketch_len + esize, done, arg);
    if (!c) {
        free(packed);
        return -ENOMEM;
    }
    wr_key(c->data, rec->registered_at_us);
    nd_record_value_encode(c->data + KEY_SIZE, rec, vlen);
    if (tsize)
        memcpy(c->data + KEY_SIZE + vsize, text, tsize);
    free(packed);
    if (rec->sketch_len)
        memcpy(c->data + KEY_SIZE + vsize + tsize, rec->sketch, rec->sketch_len);
    if (audit)
        encode_event(c->data + KEY_SIZE + vsize + tsize + rec->sketch_len, audit);
    c->ev_len = (uint32_t)esize;
    c->text_len = (uint32_t)tsize;
    c->sketch_len = (uint32_t)rec->sketch_len;
    c->stream_seq = rec->stream_seq;
    return enqueue(st, c);
}

int lmdb_amend(nd_store *st, const nd_record *rec, const nd_store_event *audit,
               nd_store_done_fn done, void *arg)
{
    if (!st || !rec || !nd_record_audit_ok(audit))
        return -EINVAL;
    nd_record r = *rec;
    r.sketch = NULL; /* kept as stored */
    r.sketch_len = 0;
    r.text = NULL; /* kept as stored */
    r.text_len = 0;
    r.text_packed = NULL;
    r.text_packed_len = 0;
    size_t vlen = nd_record_check(&r);
    if (!vlen)
        return -EINVAL;
    if (!nd_record_refs_ok(&r))
        return -EINVAL;
    size_t vsize = nd_record_value_size(&r, vlen), esize = audit ? event_size(audit) : 0, ssize = 0;
    size_t nsup = r.supersede ? r.nsupersede : 0;
    for (size_t i = 0; i < nsup; i++)
        ssize += KEY_SIZE + 2 + r.supersede[i].id_len;
    write_op *c = write_op_new(OP_AMEND, KEY_SIZE + vsize + ssize + esize, done, arg);
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

int lmdb_event_put(nd_store *st, const nd_store_event *ev, nd_store_done_fn done, void *arg)
{
    if (!st || !nd_record_event_ok(ev))
        return -EINVAL;
    size_t esize = event_size(ev);
    write_op *c = write_op_new(OP_EVENT, esize, done, arg);
    if (!c)
        return -ENOMEM;
    encode_event(c->data, ev);
    c->ev_len = (uint32_t)esize;
    return enqueue(st, c);
}

int lmdb_put(nd_store *st, const nd_record *rec, const nd_store_event *audit, nd_store_done_fn done,
             void *arg)
{
    return queue_record(st, OP_PUT, rec, audit, done, arg);
}

int lmdb_replace(nd_store *st, const nd_record *rec, nd_store_done_fn done, void *arg)
{
    return queue_record(st, OP_REPLACE_AT, rec, NULL, done, arg);
}

int lmdb_delete_at(nd_store *st, const char *id, size_t id_len, int64_t registered_at_us,
                   uint64_t stream_seq, const nd_store_event *audit, nd_store_done_fn done,
                   void *arg)
{
    if (!st || !nd_record_id_ok(id, id_len) || registered_at_us < 0 || !nd_record_audit_ok(audit))
        return -EINVAL;
    size_t esize = audit ? event_size(audit) : 0;
    write_op *c = write_op_new(OP_DELETE_AT, KEY_SIZE + id_len + esize, done, arg);
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
