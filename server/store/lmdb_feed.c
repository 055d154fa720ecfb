/* lmdb_feed.c - the LMDB store's event feed (lmdb_feed.h). */
#include "lmdb_feed.h"
#include "log.h"

#define FEED_SEQ_KEY "feed_seq" /* info: the greatest feed seq handed out (8 bytes, BE) */

/* The feed's mark: DIR/events.seq, beside data.mdb but not in it, so that
 * replacing data.mdb with an older copy (README's restore) does not take
 * back the seqs handed out since. One line, rewritten in place:
 * "<handed> <reserved> <boot id>\n": handed, the greatest seq handed out
 * (written, not fsynced, in every transaction that appends events, before
 * its commit: exact across a kill -9 or a stop, as the page cache keeps
 * it); reserved, a bound never below handed, fsynced (with --sync) each
 * time handed passes it and then set MARK_RESERVE ahead (so one fsync per
 * MARK_RESERVE events); boot id, the kernel's boot in which handed was
 * last trusted (written at open). At open the feed goes on after handed
 * when the boot is the same, else after reserved (a power loss may have
 * lost handed's last writes), whichever is above data.mdb's own. A
 * replica's store (info/stream_seq set) has no mark: its feed follows the
 * replication stream, event for event with the other nodes'. */
#define MARK_NAME "events.seq"
#define MARK_RESERVE 256u
#define MARK_NUMS 42u /* "%020llu %020llu " */
#define MARK_BOOT 36u /* a boot id: a UUID's text */
#define MARK_LEN (MARK_NUMS + MARK_BOOT + 1)

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

/* ---- the mark (events.seq) ---- */

/* The kernel's boot id into out (MARK_BOOT chars and a NUL), or "-"s when
 * it cannot be read (then a mark is never trusted across a restart). */
static void boot_id(char out[MARK_BOOT + 1])
{
    memset(out, '-', MARK_BOOT);
    out[MARK_BOOT] = 0;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char b[MARK_BOOT + 8];
    ssize_t n = read(fd, b, sizeof(b));
    close(fd);
    if (n >= (ssize_t)MARK_BOOT)
        memcpy(out, b, MARK_BOOT);
}

/* Opens dir's mark file (flags: O_RDWR, with O_CREAT to make it). */
static int mark_open(const char *dir, int flags)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/" MARK_NAME, dir) >= sizeof(path))
        return -1;
    return open(path, flags | O_CLOEXEC, 0600);
}

/* Reads the mark of fd. Returns true with *handed, *reserved (and boot,
 * when not NULL) when it parses. */
static bool mark_read(int fd, uint64_t *handed, uint64_t *reserved, char *boot)
{
    char b[MARK_LEN + 1];
    ssize_t n = pread(fd, b, MARK_LEN, 0);
    if (n < (ssize_t)MARK_NUMS)
        return false;
    b[n] = 0;
    char *end;
    errno = 0;
    unsigned long long h = strtoull(b, &end, 10), r;
    if (errno || end != b + 20 || *end != ' ')
        return false;
    r = strtoull(end + 1, &end, 10);
    if (errno || end != b + 41 || *end != ' ' || r < h)
        return false;
    *handed = h;
    *reserved = r;
    if (boot) {
        if (n < (ssize_t)MARK_LEN - 1)
            return false;
        memcpy(boot, b + MARK_NUMS, MARK_BOOT);
        boot[MARK_BOOT] = 0;
    }
    return true;
}

/* Writes the numbers of the mark (and boot, when not NULL) in place.
 * Returns 0 or an errno. */
static int mark_write(int fd, uint64_t handed, uint64_t reserved, const char *boot, bool sync)
{
    char b[MARK_LEN + 1];
    int n = snprintf(b, sizeof(b), "%020llu %020llu %s\n", (unsigned long long)handed,
                     (unsigned long long)reserved, boot ? boot : "");
    size_t len = boot ? (size_t)n : MARK_NUMS;
    if (pwrite(fd, b, len, 0) != (ssize_t)len)
        return errno ? errno : EIO;
    return sync && fdatasync(fd) < 0 ? errno : 0;
}

/* Before a commit that hands out seqs up to handed: the mark says so, and
 * its reservation covers them durably. Returns 0 or an errno (the
 * transaction is then not committed). */
static int mark_handed(nd_store *st, uint64_t handed)
{
    int fd = mark_open(st->dir, O_RDWR);
    bool made = fd < 0 && errno == ENOENT;
    if (made)
        fd = mark_open(st->dir, O_RDWR | O_CREAT);
    if (fd < 0)
        return errno ? errno : EIO;
    uint64_t h = 0, r = 0;
    char boot[MARK_BOOT + 1];
    if (made || !mark_read(fd, &h, &r, NULL))
        boot_id(boot), made = true; /* rewritten whole */
    bool reserve = handed > r;
    if (reserve)
        r = handed + MARK_RESERVE;
    int rc = mark_write(fd, handed, r, made ? boot : NULL, reserve && st->opts.sync);
    if (close(fd) < 0 && rc == 0)
        rc = errno;
    if (rc == 0 && made && st->opts.sync) {
        int dfd = open(st->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) < 0)
            rc = errno;
        if (dfd >= 0)
            close(dfd);
    }
    return rc;
}

/* At open (not a replica's store): the seq the feed goes on after, from
 * data.mdb's seq and the mark, which is rewritten for this boot. */
static uint64_t mark_floor(const char *dir, uint64_t seq, bool sync)
{
    int fd = mark_open(dir, O_RDWR | O_CREAT);
    if (fd < 0) {
        nd_log(ND_LOG_WARN, "the event feed's mark %s/" MARK_NAME " cannot be opened (%s)", dir,
               strerror(errno));
        return seq;
    }
    uint64_t h, r;
    char was[MARK_BOOT + 1], now[MARK_BOOT + 1];
    boot_id(now);
    bool kept = mark_read(fd, &h, &r, was);
    uint64_t after = !kept ? 0 : strcmp(was, now) == 0 && now[0] != '-' ? h : r;
    if (after > seq) {
        nd_log(ND_LOG_WARN,
               "the event feed goes on after seq %llu, not %llu: data.mdb is older than the "
               "feed this data directory handed out (%s/" MARK_NAME "%s); seqs %llu to %llu "
               "are not given again",
               (unsigned long long)after, (unsigned long long)seq, dir,
               after == h ? "" : ", its reservation: the machine restarted",
               (unsigned long long)seq + 1, (unsigned long long)after);
        seq = after;
    }
    int rc = mark_write(fd, seq, kept && r > seq ? r : seq, now, sync);
    if (close(fd) < 0 && rc == 0)
        rc = errno;
    if (rc)
        nd_log(ND_LOG_WARN, "the event feed's mark %s/" MARK_NAME " cannot be written (%s)", dir,
               strerror(rc));
    return seq;
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
    if (atomic_load(&st->stream_seq) == 0) { /* one node: its mark first */
        int rc = mark_handed(st, st->feed_next - 1);
        if (rc)
            return rc;
    }
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
    k = (MDB_val){sizeof(SEQ_KEY) - 1, SEQ_KEY};
    if (mdb_get(txn, info, &k, &v) == 0 && v.mv_size == 8 && rd_key(v.mv_data) > 0)
        return seq; /* a replica's: the stream decides */
    MDB_env *env = mdb_txn_env(txn);
    const char *dir;
    unsigned flags = 0;
    if (mdb_env_get_path(env, &dir) || mdb_env_get_flags(env, &flags))
        return seq;
    uint64_t after = mark_floor(dir, seq, !(flags & MDB_NOSYNC));
    if (after > seq) { /* kept in data.mdb too, with the open */
        unsigned char b[8];
        wr_key(b, (int64_t)after);
        k = (MDB_val){sizeof(FEED_SEQ_KEY) - 1, FEED_SEQ_KEY};
        v = (MDB_val){sizeof(b), b};
        if (mdb_put(txn, info, &k, &v, 0) == 0)
            seq = after;
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
    if (!descending && from >= (uint64_t)INT64_MAX) {
        rc = MDB_NOTFOUND; /* nothing after: keys are below 2^63 (no wrap to the first) */
    } else if (descending && from == 0) {
        rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
    } else {
        /* The first key at or after from (+1 ascending), then one back
         * descending: the newest before from. */
        uint64_t seek = descending ? from : from + 1; /* from < INT64_MAX ascending */
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
    if (lmdb_read_begin(st, &txn))
        return;
    if (mdb_cursor_open(txn, st->feed_dbi, &cur) == 0) {
        MDB_val k, v;
        if (mdb_cursor_get(cur, &k, &v, MDB_FIRST) == 0 && k.mv_size == 8)
            *oldest = (uint64_t)rd_key(k.mv_data);
        /* A commit is visible to readers a moment before feed_seq says so:
         * latest is never below an event a page may have shown. */
        if (mdb_cursor_get(cur, &k, &v, MDB_LAST) == 0 && k.mv_size == 8 &&
            (uint64_t)rd_key(k.mv_data) > *latest)
            *latest = (uint64_t)rd_key(k.mv_data);
        mdb_cursor_close(cur);
    }
    lmdb_read_end(st, txn);
}

void lmdb_feed_hold(nd_store *st, uint64_t seq)
{
    atomic_store(&st->feed_hold, seq);
}
