/* lmdb_feed.c - the LMDB store's event feed (lmdb_feed.h). */
#include "lmdb_feed.h"
#include "log.h"

#define FEED_SEQ_KEY "feed_seq" /* info: the greatest feed seq handed out (8 bytes, BE) */

/* Reads the record stored under key (8 bytes) in txn into *r (pointers
 * into the map). Returns true when there is one that decodes. */
static bool stored_record(nd_store *st, MDB_txn *txn, const unsigned char *key, nd_record *r)
{
    MDB_val k = {KEY_SIZE, (void *)key}, v;
    return mdb_get(txn, st->dbi, &k, &v) == 0 && decode_value(&k, &v, r) == 0;
}

int lmdb_feed_append(nd_store *st, MDB_txn *txn, const unsigned char *e, size_t len,
                     const nd_record *subject)
{
    MDB_val k = {EV_KEY, (void *)(e + 1)}, v = {len - EV_PREFIX, (void *)(e + EV_PREFIX)};
    nd_store_event jev;
    nd_record original;
    if (decode_event((nd_event_kind)e[0], &k, &v, &jev) != 0)
        return 0; /* not ours to show */
    if (jev.kind == ND_EVENT_DETECTION && !subject && stored_record(st, txn, e + 1, &original))
        subject = &original;
    nd_event_rec ev;
    char *owned;
    int rc = nd_feed_event_of(&jev, subject, &ev, &owned);
    if (rc <= 0)
        return rc < 0 ? ENOMEM : 0;
    size_t size = nd_feed_value_size(&ev);
    unsigned char key[8];
    wr_key(key, (int64_t)st->feed_next);
    MDB_val fk = {sizeof(key), key}, fv = {size, NULL};
    rc = mdb_put(txn, st->feed_dbi, &fk, &fv, MDB_APPEND | MDB_RESERVE);
    if (rc == 0) {
        nd_feed_value_encode(fv.mv_data, &ev);
        st->feed_next++;
    }
    free(owned);
    return rc;
}

int lmdb_feed_trim(nd_store *st, MDB_txn *txn, size_t budget)
{
    int64_t age = st->opts.events_max_age_us;
    if (!age)
        return 0;
    uint64_t hold = atomic_load(&st->feed_hold);
    int64_t cutoff = nd_log_now_us() - age; /* the events' clock */
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, st->feed_dbi, &cur);
    if (rc)
        return rc;
    MDB_val k, v;
    for (; budget > 0; budget--) {
        if ((rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST)))
            break;
        nd_event_rec ev;
        uint64_t seq = k.mv_size == 8 ? (uint64_t)rd_key(k.mv_data) : 0;
        bool bad = nd_feed_value_decode(seq, v.mv_data, v.mv_size, &ev) != 0;
        if (seq > hold || (!bad && ev.at_us >= cutoff))
            break;
        if ((rc = mdb_cursor_del(cur, 0)))
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int lmdb_feed_note(nd_store *st, MDB_txn *txn)
{
    if (st->feed_next - 1 == atomic_load(&st->feed_seq))
        return 0;
    unsigned char b[8];
    wr_key(b, (int64_t)(st->feed_next - 1));
    MDB_val k = {sizeof(FEED_SEQ_KEY) - 1, FEED_SEQ_KEY}, v = {sizeof(b), b};
    return mdb_put(txn, st->info_dbi, &k, &v, 0);
}

uint64_t lmdb_feed_read_seq(MDB_txn *txn, MDB_dbi info, MDB_dbi events)
{
    MDB_val k = {sizeof(FEED_SEQ_KEY) - 1, FEED_SEQ_KEY}, v;
    uint64_t seq = 0;
    if (mdb_get(txn, info, &k, &v) == 0 && v.mv_size == 8)
        seq = (uint64_t)rd_key(v.mv_data);
    MDB_cursor *cur;
    if (mdb_cursor_open(txn, events, &cur) == 0) {
        if (mdb_cursor_get(cur, &k, &v, MDB_LAST) == 0 && k.mv_size == 8 &&
            (uint64_t)rd_key(k.mv_data) > seq)
            seq = (uint64_t)rd_key(k.mv_data);
        mdb_cursor_close(cur);
    }
    return seq;
}

int lmdb_feed_scan(nd_store *st, uint64_t from, bool descending,
                   int (*visit)(void *arg, const nd_event_rec *ev), void *arg)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    int rc = lmdb_read_begin(st, &txn);
    if (rc)
        return rc;
    if ((rc = mdb_cursor_open(txn, st->feed_dbi, &cur))) {
        lmdb_read_end(st, txn);
        return mdb_errno(rc);
    }
    unsigned char start[8];
    MDB_val k, v;
    if (descending && from == 0) {
        rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
    } else {
        /* The first key at or after from (+1 ascending), then one back
         * descending: the newest before from. */
        uint64_t seek = descending ? from : from + 1;
        wr_key(start, seek > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)seek);
        k = (MDB_val){sizeof(start), start};
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        if (descending)
            rc = rc == 0              ? mdb_cursor_get(cur, &k, &v, MDB_PREV)
                 : rc == MDB_NOTFOUND ? mdb_cursor_get(cur, &k, &v, MDB_LAST)
                                      : rc;
    }
    int out = 0;
    while (rc == 0 && out == 0) {
        nd_event_rec ev;
        uint64_t seq = k.mv_size == 8 ? (uint64_t)rd_key(k.mv_data) : 0;
        if (nd_feed_value_decode(seq, v.mv_data, v.mv_size, &ev) == 0)
            out = visit(arg, &ev);
        if (out == 0)
            rc = mdb_cursor_get(cur, &k, &v, descending ? MDB_PREV : MDB_NEXT);
    }
    mdb_cursor_close(cur);
    lmdb_read_end(st, txn);
    if (out)
        return out;
    return rc == MDB_NOTFOUND ? 0 : mdb_errno(rc);
}

void lmdb_feed_bounds(nd_store *st, uint64_t *oldest, uint64_t *latest)
{
    *latest = atomic_load(&st->feed_seq);
    *oldest = *latest ? *latest + 1 : 0;
    MDB_txn *txn;
    MDB_cursor *cur;
    if (!*latest || lmdb_read_begin(st, &txn))
        return;
    if (mdb_cursor_open(txn, st->feed_dbi, &cur) == 0) {
        MDB_val k, v;
        if (mdb_cursor_get(cur, &k, &v, MDB_FIRST) == 0 && k.mv_size == 8)
            *oldest = (uint64_t)rd_key(k.mv_data);
        mdb_cursor_close(cur);
    }
    lmdb_read_end(st, txn);
}

void lmdb_feed_hold(nd_store *st, uint64_t seq)
{
    atomic_store(&st->feed_hold, seq);
}
