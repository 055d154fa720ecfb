/* lmdb_journals.c - the LMDB store's journals (store_lmdb.c: "Events"):
 * writing an event into "detections" or "audit" in a write's transaction,
 * the detection_ids index and count, the audit_documents index, retention
 * of both, and reading them back (nd_store_events, nd_store_audit_of). */
#include "lmdb_journals.h"
#include "lmdb_feed.h"
#include "clock.h"

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

/* Indexes every stored audit entry by its document (the upgrade of a store
 * without audit_documents). Returns 0 or the LMDB error. */
int lmdb_audit_index_all(nd_store *st, MDB_txn *txn)
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
int lmdb_detections_drop(nd_store *st, MDB_txn *txn, const unsigned char *owner)
{
    int rc = drop_prefix(txn, st->det_dbi, owner);
    return rc ? rc : drop_prefix(txn, st->detidx_dbi, owner);
}

/* Drops the oldest audit entries while there are more than
 * audit_max_entries or the oldest is older than audit_max_age_us, at most
 * budget of them, with their index entries. Returns 0 or the LMDB error. */
int lmdb_audit_trim(nd_store *st, MDB_txn *txn, size_t budget)
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
    int64_t cutoff = age ? nd_clock_wall_us() - age : INT64_MIN;
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
 * oldest go beyond detections_max. A new entry (not a detection updated
 * in place) goes into the feed. Returns 0 or the LMDB error. */
int lmdb_apply_event(nd_store *st, MDB_txn *txn, unsigned char *e, size_t len,
                     const nd_record *subject, txn_result *res)
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
    if (rc == 0)
        rc = lmdb_feed_append(st, txn, e, len, subject);
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

int lmdb_events(nd_store *st, nd_event_kind kind, int64_t owner_at, int64_t before_at, size_t limit,
                int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    if (!st || owner_at < 0 || (kind != ND_EVENT_DETECTION && kind != ND_EVENT_AUDIT))
        return -EINVAL;
    int rc = lmdb_read_begin(st, &txn);
    if (rc)
        return rc;
    if ((rc = mdb_cursor_open(txn, kind == ND_EVENT_DETECTION ? st->det_dbi : st->audit_dbi,
                              &cur))) {
        lmdb_read_end(st, txn);
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
    lmdb_read_end(st, txn);
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

int lmdb_audit_of(nd_store *st, int64_t owner_at, const char *doc, size_t len, int64_t before_at,
                  size_t limit, int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    if (!st || owner_at < 0 || !doc || len == 0 || len > ND_ID_MAX)
        return -EINVAL;
    int rc = lmdb_read_begin(st, &txn);
    if (rc)
        return rc;
    if ((rc = mdb_cursor_open(txn, st->auditdoc_dbi, &cur))) {
        lmdb_read_end(st, txn);
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
    lmdb_read_end(st, txn);
    return ret;
}
