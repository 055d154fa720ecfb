/* lmdb_open.c - opening and reopening the LMDB store's environment
 * (lmdb_open.h): its databases, the store format, the index of an older
 * store's audit log, the reopen after MDB_PANIC. */
#include "lmdb_open.h"
#include "lmdb_feed.h"
#include "lmdb_journals.h"

/* Opens (creating them if missing) the databases added after records:
 * sketches, texts, then detections, detection_ids and audit (the journals),
 * events (the feed), and
 * audit_documents (built from the audit log when it is missing). */
static int open_added_dbs(MDB_txn *txn, nd_store *st, const char *dir, char *err, size_t errlen)
{
    int rc = mdb_dbi_open(txn, DB_SKETCHES, MDB_CREATE, &st->sketch_dbi);
    if (rc == 0)
        rc = mdb_dbi_open(txn, DB_TEXTS, MDB_CREATE, &st->text_dbi);
    if (rc == 0)
        rc = mdb_dbi_open(txn, DB_DETECTIONS, MDB_CREATE, &st->det_dbi);
    if (rc == 0)
        rc = mdb_dbi_open(txn, DB_DETECTION_IDS, MDB_CREATE, &st->detidx_dbi);
    if (rc == 0)
        rc = mdb_dbi_open(txn, DB_AUDIT, MDB_CREATE, &st->audit_dbi);
    if (rc == 0)
        rc = mdb_dbi_open(txn, DB_EVENTS, MDB_CREATE, &st->feed_dbi);
    if (rc == 0 && (rc = mdb_dbi_open(txn, DB_AUDIT_DOCS, 0, &st->auditdoc_dbi)) == MDB_NOTFOUND) {
        /* A store written before the index: index its audit log now, once. */
        rc = mdb_dbi_open(txn, DB_AUDIT_DOCS, MDB_CREATE, &st->auditdoc_dbi);
        if (rc == 0)
            rc = lmdb_audit_index_all(st, txn);
    }
    return rc ? lmdb_open_err(rc, dir, "journal databases", err, errlen) : 0;
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
            return lmdb_open_err(rc, dir, "main database", err, errlen);
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
            return lmdb_open_err(rc, dir, "create", err, errlen);
        st->info_dbi = info;
        return open_added_dbs(txn, st, dir, err, errlen);
    }
    if (rc)
        return lmdb_open_err(rc, dir, "info database", err, errlen);
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
        return lmdb_open_err(rc, dir, "records database", err, errlen);
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
int lmdb_env_open(nd_store *st, char *err, size_t errlen)
{
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    int rc = mdb_env_create(&env);
    if (rc)
        return lmdb_open_err(rc, st->dir, "mdb_env_create", err, errlen);
    mdb_env_set_maxdbs(env, MAX_DBS);
    mdb_env_set_maxreaders(env, MAX_READERS);
    if (st->opts.map_size)
        mdb_env_set_mapsize(env, st->opts.map_size);
    unsigned flags = MDB_NOTLS | (st->opts.sync ? 0 : MDB_NOSYNC);
    if ((rc = lmdb_claim_lock_file(st->dir, err, errlen)))
        goto fail;
    rc = mdb_env_open(env, st->dir, flags, FILE_MODE);
    if (rc) {
        rc = lmdb_open_err(rc, st->dir, "mdb_env_open", err, errlen);
        goto fail;
    }
    if ((rc = lmdb_check_size(env, st->dir, err, errlen)))
        goto fail;
    int dead = 0;
    mdb_reader_check(env, &dead); /* slots of crashed readers pin pages */
    if ((rc = mdb_txn_begin(env, NULL, 0, &txn))) {
        rc = lmdb_open_err(rc, st->dir, "mdb_txn_begin", err, errlen);
        goto fail;
    }
    if ((rc = open_dbs(txn, st, st->dir, err, errlen))) {
        mdb_txn_abort(txn);
        goto fail;
    }
    st->last_key = read_last_key(txn, st->dbi);
    atomic_store(&st->stream_seq, read_stream_seq(txn, st->info_dbi));
    atomic_store(&st->feed_seq, lmdb_feed_read_seq(txn, st->info_dbi, st->feed_dbi));
    if ((rc = mdb_txn_commit(txn))) {
        rc = lmdb_open_err(rc, st->dir, "mdb_txn_commit", err, errlen);
        goto fail;
    }
    st->env = env;
    return 0;
fail:
    mdb_env_close(env);
    return rc;
}

/* Commit thread only: replaces an environment left unusable (MDB_PANIC). */
int lmdb_env_reopen(nd_store *st)
{
    char err[256];
    pthread_rwlock_wrlock(&st->env_lock);
    if (st->env)
        mdb_env_close(st->env);
    st->env = NULL;
    int rc = lmdb_env_open(st, err, sizeof(err));
    pthread_rwlock_unlock(&st->env_lock);
    if (rc == 0)
        atomic_fetch_add(&st->reopens, 1);
    return rc;
}
