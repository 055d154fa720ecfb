/* replica.c - a node of a replicated neardup on NATS JetStream (replica.h):
 * the store in front of the local one, the publisher, the prober, the
 * syncer, the connection and the node's life (replica_internal.h). */
#include "feed.h"
#include "record.h"
#include "replica_internal.h"

/* ---- the store interface: local changes are queued, stream changes pass ---- */

/* Queues a local change (encoded) for the publisher. Registry writer held
 * (so applied_seq is the state the change was decided on). */
static int queue_local(nd_replica *r, int kind, const nd_record *rec, const nd_store_event *audit,
                       nd_store_done_fn done, void *arg)
{
    bool unfenced = kind == ND_STORE_EVENT;
    if (!atomic_load(&r->writable) || atomic_load(&r->failed)) { /* never met by the applier */
        atomic_fetch_add(&r->unavailable, 1);
        return -ENOTCONN;
    }
    pub_item *it = calloc(1, sizeof(*it));
    if (!it)
        return -ENOMEM;
    int rc = nd_entry_encode(kind, rec, audit, &it->bytes, &it->len);
    if (rc == 0 && it->len > BATCH_BYTES && (rec->text || rec->text_packed)) {
        /* The text would take the entry past what one entry carries
         * (NATS's max_payload): the change goes without it, and no node
         * keeps it (GET /documents/{id}?text=true answers text_kept false). */
        nd_record bare = *rec;
        bare.text = NULL;
        bare.text_len = 0;
        bare.text_packed = NULL;
        bare.text_packed_len = 0;
        free(it->bytes);
        it->bytes = NULL;
        nd_log(ND_LOG_WARN,
               "replica: the text of %.*s (%zu bytes packed) is not kept: the stream entry would "
               "exceed %u bytes",
               (int)(rec->id_len < 200 ? rec->id_len : 200), rec->id, it->len, BATCH_BYTES);
        rc = nd_entry_encode(kind, &bare, audit, &it->bytes, &it->len);
    }
    if (rc < 0) {
        free(it);
        return rc;
    }
    it->based = unfenced ? UINT64_MAX : atomic_load(&r->applied_seq);
    it->unfenced = unfenced;
    it->done = done;
    it->arg = arg;
    pthread_mutex_lock(&r->mu);
    if (r->stopping || r->queue.n >= QUEUE_MAX) {
        rc = r->stopping ? -ESHUTDOWN : -EBUSY;
        pthread_mutex_unlock(&r->mu);
        free(it->bytes);
        free(it);
        return rc;
    }
    it->token = ++r->next_token;
    list_push(&r->queue, it);
    pthread_cond_signal(&r->work);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static int rep_put(nd_store *st, const nd_record *rec, const nd_store_event *audit,
                   nd_store_done_fn done, void *arg)
{
    nd_replica *r = rep_of(st);
    if (!rec->stream_seq)
        return queue_local(r, ND_STORE_PUT, rec, audit, done, arg);
    /* a stream change: the applier notes it */
    return nd_store_put_audited(r->local, rec, audit, done, arg);
}

static int rep_replace(nd_store *st, const nd_record *rec, nd_store_done_fn done, void *arg)
{
    nd_replica *r = rep_of(st);
    if (!rec->stream_seq)
        return queue_local(r, ND_STORE_REPLACE, rec, NULL, done, arg);
    return nd_store_replace(r->local, rec, done, arg); /* a stream change: the applier notes it */
}

static int rep_amend(nd_store *st, const nd_record *rec, const nd_store_event *audit,
                     nd_store_done_fn done, void *arg)
{
    nd_replica *r = rep_of(st);
    if (!rec->stream_seq) {
        nd_record r2 = *rec;
        r2.sketch = NULL; /* an amendment keeps the stored sketch */
        r2.sketch_len = 0;
        return queue_local(r, ND_STORE_AMEND, &r2, audit, done, arg);
    }
    /* a stream change: the applier notes it */
    return nd_store_amend(r->local, rec, audit, done, arg);
}

static int rep_delete_at(nd_store *st, const char *id, size_t id_len, int64_t at, uint64_t seq,
                         const nd_store_event *audit, nd_store_done_fn done, void *arg)
{
    nd_replica *r = rep_of(st);
    if (!seq) {
        nd_record rec = {.id = id, .id_len = id_len, .registered_at_us = at, .version = ""};
        return queue_local(r, ND_STORE_DELETE, &rec, audit, done, arg);
    }
    return nd_store_delete_audited(r->local, id, id_len, at, seq, audit, done, arg);
}

/* A journal write (a detection, an import's audit entry) travels in the
 * stream like every other write, so that every node holds the same
 * journals and the same event feed, in the same order. */
static int rep_event_put(nd_store *st, const nd_store_event *ev, nd_store_done_fn done, void *arg)
{
    nd_replica *r = rep_of(st);
    if (ev->stream_seq) /* a stream change: the applier notes it */
        return nd_store_event_put(r->local, ev, done, arg);
    if (!nd_record_event_ok(ev))
        return -EINVAL;
    nd_record rec = {.id = ev->copy_id, .id_len = ev->copy_id_len, .version = ""};
    return queue_local(r, ND_STORE_EVENT, &rec, ev, done, arg);
}

static int rep_events(nd_store *st, nd_event_kind kind, int64_t owner_at, int64_t before_at,
                      size_t limit, int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    return nd_store_events(rep_of(st)->local, kind, owner_at, before_at, limit, visit, arg);
}

static int rep_feed_scan(nd_store *st, uint64_t from, bool descending,
                         int (*visit)(void *arg, const nd_event_rec *ev), void *arg)
{
    return nd_store_feed_scan(rep_of(st)->local, from, descending, visit, arg);
}

static void rep_feed_bounds(nd_store *st, uint64_t *oldest, uint64_t *latest)
{
    nd_store_feed_bounds(rep_of(st)->local, oldest, latest);
}

static void rep_feed_hold(nd_store *st, uint64_t seq)
{
    nd_store_feed_hold(rep_of(st)->local, seq);
}

static int rep_audit_of(nd_store *st, int64_t owner_at, const char *doc, size_t len,
                        int64_t before_at, size_t limit,
                        int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    return nd_store_audit_of(rep_of(st)->local, owner_at, doc, len, before_at, limit, visit, arg);
}

static int rep_scan(nd_store *st, int (*visit)(void *arg, const nd_record *rec), void *arg)
{
    return nd_store_scan(rep_of(st)->local, visit, arg);
}

static int rep_get(nd_store *st, int64_t at, int (*visit)(void *arg, const nd_record *rec),
                   void *arg)
{
    return nd_store_get(rep_of(st)->local, at, visit, arg);
}

static int rep_sketches(nd_store *st, const int64_t *at, size_t n,
                        int (*visit)(void *arg, size_t i, const uint8_t *buf, size_t len),
                        void *arg)
{
    return nd_store_sketches(rep_of(st)->local, at, n, visit, arg);
}

static int rep_text(nd_store *st, int64_t at, int (*visit)(void *arg, const char *text, size_t len),
                    void *arg)
{
    return nd_store_text(rep_of(st)->local, at, visit, arg);
}

static int64_t rep_count(nd_store *st)
{
    return nd_store_count(rep_of(st)->local);
}

static uint64_t rep_stream_seq(nd_store *st)
{
    return nd_store_stream_seq(rep_of(st)->local);
}

static bool rep_writable(const nd_store *st)
{
    return nd_store_writable(rep_of(st)->local);
}

static void rep_get_stats(nd_store *st, nd_store_stats *out)
{
    nd_store_get_stats(rep_of(st)->local, out);
}

static void rep_close(nd_store *st);

static const nd_store_ops replica_ops = {
    .name = "replica",
    .durable = true,
    .commits_in_call = false,
    .put = rep_put,
    .replace = rep_replace,
    .amend = rep_amend,
    .event_put = rep_event_put,
    .list_events = rep_events,
    .list_audit = rep_audit_of,
    .feed_scan = rep_feed_scan,
    .feed_bounds = rep_feed_bounds,
    .feed_hold = rep_feed_hold,
    .delete_at = rep_delete_at,
    .scan = rep_scan,
    .get = rep_get,
    .sketches = rep_sketches,
    .text = rep_text,
    .count = rep_count,
    .stream_seq = rep_stream_seq,
    .writable = rep_writable,
    .get_stats = rep_get_stats,
    .close = rep_close,
};

/* ---- the publisher ---- */

/* Changes that lost the race: wait (a little) for the applier to apply
 * entry `target` (what another node wrote meanwhile), so that the callers'
 * second tries are decided on it, then report -ESTALE. items[0..n) are
 * finished. */
static void refuse_stale(nd_replica *r, pub_item **items, size_t n, uint64_t target)
{
    atomic_fetch_add(&r->conflicts, n);
    nd_log(ND_LOG_DEBUG, "replica: %zu changes lost the race to entry %" PRIu64, n, target);
    int64_t until = nd_clock_ms() + STALE_WAIT_MS;
    pthread_mutex_lock(&r->mu);
    while (!r->stopping && atomic_load(&r->applied_seq) < target && nd_clock_ms() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 5 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&r->progress, &r->mu, &ts);
    }
    /* Journal writes were decided on no state: they go again, first. */
    for (size_t i = n; i-- > 0;)
        if (items[i]->unfenced && !r->stopping) {
            items[i]->next = r->queue.head;
            r->queue.head = items[i];
            if (!r->queue.tail)
                r->queue.tail = items[i];
            r->queue.n++;
            items[i] = NULL;
        }
    pthread_cond_signal(&r->work);
    pthread_mutex_unlock(&r->mu);
    for (size_t i = 0; i < n; i++)
        if (items[i])
            item_finish(items[i], -ESTALE);
}

/* The entry of items[0..n): their frames, in order. NULL: out of memory. */
static uint8_t *entry_of(pub_item **items, size_t n, size_t *len)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += ND_ENTRY_FRAME_HEAD + items[i]->len;
    uint8_t *buf = malloc(total ? total : 1), *p = buf;
    if (!buf)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        nd_entry_frame_head(p, items[i]->token, (uint32_t)items[i]->len);
        memcpy(p + ND_ENTRY_FRAME_HEAD, items[i]->bytes, items[i]->len);
        p += ND_ENTRY_FRAME_HEAD + items[i]->len;
    }
    *len = total;
    return buf;
}

/* Publishes items[0..n) as one entry, expecting the stream to end at
 * tail (where this node knew it ended when the items were found fresh:
 * publish_queued()). Those the applier meets are finished by it; the
 * others are finished here. */
static void publish_entry(nd_replica *r, pub_item **items, size_t n, uint64_t tail)
{
    size_t len = 0;
    uint8_t *body = entry_of(items, n, &len);
    natsMsg *m = NULL;
    natsStatus s = body ? natsMsg_Create(&m, r->subject, NULL, (const char *)body, (int)len)
                        : NATS_NO_MEMORY;
    free(body);
    if (s == NATS_OK)
        s = natsMsgHeader_Set(m, HDR_ORIGIN, r->origin);
    if (s != NATS_OK) {
        natsMsg_Destroy(m);
        for (size_t i = 0; i < n; i++)
            item_finish(items[i], -ENOMEM);
        return;
    }
    /* Their tokens: once published, the applier may meet and free them. */
    uint64_t first = items[0]->token, last = items[n - 1]->token;
    pthread_mutex_lock(&r->mu); /* before: the applier may meet them before the ack */
    for (size_t i = 0; i < n; i++)
        list_push(&r->awaiting, items[i]);
    pthread_mutex_unlock(&r->mu);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = r->timeout_ms;
    if (tail)
        po.ExpectLastSeq = tail;
    else
        po.ExpectNoMessage = true; /* the stream's one subject: an empty stream */
    jsPubAck *ack = NULL;
    jsErrCode jerr = 0;
    s = js_PublishMsg(&ack, r->js, m, &po, &jerr);
    natsMsg_Destroy(m);
    /* Only items still awaiting are this thread's: the applier frees those it
     * met (they landed). */
    pthread_mutex_lock(&r->mu);
    size_t mine = 0;
    for (pub_item *it = r->awaiting.head, *next; it; it = next) {
        next = it->next;
        if (it->token < first || it->token > last)
            continue;
        if (s == NATS_OK) {
            it->seq = ack->Sequence;
            it->acked_ms = nd_clock_ms();
        } else if (list_remove(&r->awaiting, it)) {
            items[mine++] = it;
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (s == NATS_OK) {
        atomic_max(&r->own_last, ack->Sequence);
        atomic_max(&r->stream_seq, ack->Sequence);
        atomic_fetch_add(&r->published, n);
        atomic_fetch_add(&r->entries, 1);
        nd_log(ND_LOG_DEBUG, "replica: %zu changes published as entry %" PRIu64 " after %" PRIu64,
               n, ack->Sequence, tail);
        jsPubAck_Destroy(ack);
        return;
    }
    if (!mine)
        return;
    if (jerr == JSStreamWrongLastSequenceErr) {
        uint64_t known = atomic_load(&r->stream_seq); /* the stream ends after tail */
        refuse_stale(r, items, mine, known > tail ? known : tail + 1);
        return;
    }
    /* No answer (or another error): the outcome is unknown to the clients,
     * who are told so (503). Should the entry have landed, it is applied as
     * another node's, and this node's next entries, which expect the stream
     * to end before it, are refused until then. */
    nd_log(ND_LOG_WARN, "replica: publishing %zu changes failed: %s (JetStream error %d)", mine,
           natsStatus_GetText(s), (int)jerr);
    atomic_fetch_add(&r->unavailable, mine);
    if (s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS || s == NATS_CONNECTION_CLOSED)
        atomic_store(&r->writable, false);
    for (size_t i = 0; i < mine; i++)
        item_finish(items[i], -ETIMEDOUT);
}

/* Takes what is queued (up to BATCH_MAX changes, BATCH_BYTES), refuses
 * those decided before an entry of another node seen since, publishes the
 * rest as one entry. Called with r->mu held; returns with it held. */
static void publish_queued(nd_replica *r)
{
    pub_item *items[BATCH_MAX], *stale[BATCH_MAX];
    size_t n = 0, nstale = 0, bytes = 0;
    /* The end of the stream the entry will expect, read before other_max:
     * the applier counts an entry of another node in other_max before it
     * applies it (applied_seq), so any such entry that tail takes in is
     * counted in other, and the changes decided before it are refused here.
     * Read the other way round, tail could take in an entry that other
     * missed, and a change decided without that entry's documents would be
     * published after it (two near-duplicates both original). */
    uint64_t applied = atomic_load(&r->applied_seq), own = atomic_load(&r->own_last);
    uint64_t tail = applied > own ? applied : own;
    uint64_t other = atomic_load(&r->other_max);
    while (r->queue.head && n + nstale < BATCH_MAX &&
           (n == 0 || bytes + r->queue.head->len <= BATCH_BYTES)) {
        pub_item *it = list_pop(&r->queue);
        if (it->based < other) { /* decided before another node's entry */
            stale[nstale++] = it;
        } else {
            items[n++] = it;
            bytes += ND_ENTRY_FRAME_HEAD + it->len;
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (n) /* first: refuse_stale() waits, and tail would grow old */
        publish_entry(r, items, n, tail);
    if (nstale)
        refuse_stale(r, stale, nstale, other);
    pthread_mutex_lock(&r->mu);
}

static void *publisher_main(void *arg)
{
    nd_replica *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->queue.head && !r->stopping)
            pthread_cond_wait(&r->work, &r->mu);
        if (r->stopping)
            break;
        publish_queued(r);
    }
    pub_item *left = r->queue.head;
    r->queue = (item_list){NULL, NULL, 0};
    pthread_mutex_unlock(&r->mu);
    while (left) {
        pub_item *next = left->next;
        item_finish(left, -ESHUTDOWN);
        left = next;
    }
    return NULL;
}

/* ---- the prober ---- */

/* A follower of the stream's leader counts as heard from while the leader
 * last heard from it less than this ago: under nats-server's shortest
 * election timeout (4 s), so a leader cut off from its followers stops
 * counting them before they can elect another. Healthy: at most ~1 s (one
 * heartbeat). */
#define PROBE_PEER_FRESH_NS 3000000000LL

/* Whether a stream info answer comes from the stream's leader while it
 * hears from a quorum of its group. nats-server 2.9 also lets a member of a
 * group without a leader answer (after its election timeout; Leader empty),
 * and a leader cut off from the others answers as leader until it notices
 * its lost quorum (up to ~10 s; its followers' Active, the time since it
 * last heard from them, grows): both answer with their own copy of the
 * stream, which may miss entries the majority acknowledged meanwhile
 * (test_history: latest reads on the node of a partitioned NATS server
 * answered without registrations acknowledged elsewhere). */
static bool probe_quorate(const jsStreamInfo *si)
{
    const jsClusterInfo *ci = si->Cluster;
    if (!ci)
        return true; /* not clustered: the one server is the stream */
    if (!ci->Leader || !ci->Leader[0])
        return false;
    int heard = 1; /* the leader */
    for (int i = 0; i < ci->ReplicasLen; i++) {
        const jsPeerInfo *p = ci->Replicas[i];
        if (p && !p->Offline && p->Active >= 0 && p->Active < PROBE_PEER_FRESH_NS)
            heard++;
    }
    return heard >= (ci->ReplicasLen + 1) / 2 + 1;
}

/* One stream info request: the stream's last entry, and whether JetStream
 * (a quorum) answers: an answer of a leaderless member or of a leader
 * without its quorum counts as none (-ETIMEDOUT). Returns 0 or -errno. */
static int probe(nd_replica *r, unsigned wait_ms, uint64_t *first, uint64_t *last)
{
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = wait_ms;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, r->js, r->stream, &jo, &jerr);
    if (s != NATS_OK)
        return jerr == JSStreamNotFoundErr ? -ENOENT : -ETIMEDOUT;
    if (!probe_quorate(si)) {
        jsStreamInfo_Destroy(si);
        return -ETIMEDOUT;
    }
    if (first)
        *first = si->State.FirstSeq;
    *last = si->State.LastSeq;
    jsStreamInfo_Destroy(si);
    return 0;
}

int replica_entry_gone(nd_replica *r, uint64_t seq)
{
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = r->timeout_ms < PROBE_WAIT_MAX ? r->timeout_ms : PROBE_WAIT_MAX;
    jo.Stream.Info.DeletedDetails = true;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    if (js_GetStreamInfo(&si, r->js, r->stream, &jo, &jerr) != NATS_OK)
        return -ETIMEDOUT;
    int gone = -ETIMEDOUT;
    if (probe_quorate(si)) {
        const jsStreamState *st = &si->State;
        gone = seq < st->FirstSeq;
        for (int i = 0; !gone && seq <= st->LastSeq && i < st->DeletedLen; i++)
            gone = st->Deleted[i] == seq;
    }
    jsStreamInfo_Destroy(si);
    return gone;
}

static void *prober_main(void *arg)
{
    nd_replica *r = arg;
    unsigned wait = r->timeout_ms < PROBE_WAIT_MAX ? r->timeout_ms : PROBE_WAIT_MAX;
    while (!stopping(r)) {
        uint64_t last = 0;
        bool ok = natsConnection_Status(r->nc) == NATS_CONN_STATUS_CONNECTED &&
                  probe(r, wait, NULL, &last) == 0;
        if (ok)
            atomic_max(&r->stream_seq, last);
        if (ok != atomic_load(&r->writable))
            nd_log(ok ? ND_LOG_INFO : ND_LOG_WARN, "replica: stream %s %s", r->stream,
                   ok ? "answers again: taking writes" : "does not answer: refusing writes");
        atomic_store(&r->writable, ok);
        pthread_mutex_lock(&r->mu);
        if (!r->stopping) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += PROBE_MS * 1000000L;
            ts.tv_sec += ts.tv_nsec / 1000000000;
            ts.tv_nsec %= 1000000000;
            pthread_cond_timedwait(&r->probe, &r->mu, &ts);
        }
        pthread_mutex_unlock(&r->mu);
    }
    return NULL;
}

/* ---- reads at the stream's latest state (nd_replica_sync()) ---- */

/* Calls every waiter's done with its status and frees the list. No lock
 * held. */
static void sync_finish(sync_waiter *w)
{
    while (w) {
        sync_waiter *next = w->next;
        w->done(w->arg, w->status);
        free(w);
        w = next;
    }
}

/* Whether what w waits for is visible: its target entry applied, then the
 * registry's completion of every other node's change queued until then
 * (a registration is found by id only once committed). r->mu held. */
static bool sync_visible(nd_replica *r, sync_waiter *w)
{
    if (!w->applied && w->target <= atomic_load(&r->applied_seq)) {
        w->need = atomic_load(&r->other_queued);
        w->applied = true;
    }
    return w->applied && atomic_load(&r->other_completed) >= w->need;
}

/* Moves the waiters that are done (what they wait for visible, their
 * deadline passed, or the replica failed) out of r->sync_waiting. r->mu
 * held. */
static sync_waiter *sync_take_ready(nd_replica *r)
{
    int64_t now = nd_clock_ms();
    bool failed = atomic_load(&r->failed);
    sync_waiter *ready = NULL, **link = &r->sync_waiting;
    while (*link) {
        sync_waiter *w = *link;
        bool visible = sync_visible(r, w);
        if (visible || failed || now >= w->deadline_ms) {
            w->status = visible ? 0 : failed ? -ENOTCONN : -ETIMEDOUT;
            *link = w->next;
            w->next = ready;
            ready = w;
        } else {
            link = &w->next;
        }
    }
    return ready;
}

/* Probes the stream for the reads in fresh (r->mu not held) and moves them
 * to r->sync_waiting with the stream's last entry as their target; returns
 * them instead, with -ENOTCONN, when the stream did not answer. */
static sync_waiter *sync_probe(nd_replica *r, sync_waiter *fresh, unsigned wait_ms)
{
    uint64_t last = 0;
    bool ok = natsConnection_Status(r->nc) == NATS_CONN_STATUS_CONNECTED &&
              probe(r, wait_ms, NULL, &last) == 0;
    if (!ok) {
        for (sync_waiter *w = fresh; w; w = w->next)
            w->status = -ENOTCONN;
        return fresh;
    }
    atomic_max(&r->stream_seq, last);
    pthread_mutex_lock(&r->mu);
    while (fresh) {
        sync_waiter *w = fresh;
        fresh = w->next;
        w->target = last;
        w->next = r->sync_waiting;
        r->sync_waiting = w;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* One stream probe serves every read that arrived before it: each then
 * waits until this node has applied the stream's last entry as the probe
 * saw it (woken by the applier's progress). */
static void *syncer_main(void *arg)
{
    nd_replica *r = arg;
    unsigned wait = r->timeout_ms < PROBE_WAIT_MAX ? r->timeout_ms : PROBE_WAIT_MAX;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (!r->sync_new && !r->stopping) {
            struct timespec ts; /* the waiting ones' deadlines */
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += (r->sync_waiting ? 20 : 500) * 1000000L;
            ts.tv_sec += ts.tv_nsec / 1000000000;
            ts.tv_nsec %= 1000000000;
            pthread_cond_timedwait(&r->progress, &r->mu, &ts);
        }
        if (r->stopping)
            break;
        sync_waiter *fresh = r->sync_new;
        r->sync_new = NULL;
        pthread_mutex_unlock(&r->mu);
        sync_finish(fresh ? sync_probe(r, fresh, wait) : NULL);
        pthread_mutex_lock(&r->mu);
        sync_waiter *ready = sync_take_ready(r);
        pthread_mutex_unlock(&r->mu);
        sync_finish(ready);
        pthread_mutex_lock(&r->mu);
    }
    sync_waiter *left[2] = {r->sync_new, r->sync_waiting};
    r->sync_new = r->sync_waiting = NULL;
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < 2; i++) {
        for (sync_waiter *w = left[i]; w; w = w->next)
            w->status = -ESHUTDOWN;
        sync_finish(left[i]);
    }
    return NULL;
}

int nd_replica_sync(nd_replica *r, nd_store_done_fn done, void *arg)
{
    if (!atomic_load(&r->writable) || atomic_load(&r->failed))
        return -ENOTCONN; /* the probe would not be answered either */
    sync_waiter *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->deadline_ms = nd_clock_ms() + (int64_t)r->timeout_ms;
    w->done = done;
    w->arg = arg;
    pthread_mutex_lock(&r->mu);
    if (r->stopping || !atomic_load(&r->started)) { /* not yet tailing: not ready either */
        bool stopping = r->stopping;
        pthread_mutex_unlock(&r->mu);
        free(w);
        return stopping ? -ESHUTDOWN : -ENOTCONN;
    }
    w->next = r->sync_new;
    r->sync_new = w;
    pthread_cond_broadcast(&r->progress);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* ---- life cycle ---- */

static int set_err(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int set_err(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

/* Sets the authentication and TLS of opts on o. */
static natsStatus auth_options(natsOptions *o, const nd_replica_options *opts, const char **what)
{
    natsStatus s = NATS_OK;
    if (opts->user && (*what = "user and password"))
        s = natsOptions_SetUserInfo(o, opts->user, opts->password ? opts->password : "");
    if (s == NATS_OK && opts->token && (*what = "token"))
        s = natsOptions_SetToken(o, opts->token);
    if (s == NATS_OK && opts->creds_file && (*what = "credentials file"))
        s = natsOptions_SetUserCredentialsFromFiles(o, opts->creds_file, NULL);
    if (s == NATS_OK && opts->tls_ca && (*what = "TLS CA certificates")) {
        s = natsOptions_SetSecure(o, true);
        if (s == NATS_OK)
            s = natsOptions_LoadCATrustedCertificates(o, opts->tls_ca);
    }
    if (s == NATS_OK && opts->tls_cert && (*what = "TLS client certificate")) {
        s = natsOptions_SetSecure(o, true);
        if (s == NATS_OK)
            s = natsOptions_LoadCertificatesChain(o, opts->tls_cert, opts->tls_key);
    }
    return s;
}

/* libnats's last error text (e.g. "Authorization Violation"), or the
 * status's. */
static const char *nats_reason(natsStatus s)
{
    natsStatus last = NATS_OK;
    const char *t = nats_GetLastError(&last);
    if (t && *t == '(' && strstr(t, "): ")) /* "(conn.c:1905): " first */
        t = strstr(t, "): ") + 3;
    return t && *t ? t : natsStatus_GetText(s);
}

static int connect_nats(nd_replica *r, const nd_replica_options *opts, char *err, size_t errlen)
{
    char *list = strdup(r->servers);
    const char *urls[SERVERS_MAX];
    int n = 0;
    if (!list)
        return -ENOMEM;
    for (char *save = NULL, *t = strtok_r(list, ", ", &save); t && n < SERVERS_MAX;
         t = strtok_r(NULL, ", ", &save))
        urls[n++] = t;
    natsOptions *o = NULL;
    natsStatus s = n ? natsOptions_Create(&o) : NATS_INVALID_ARG;
    if (s == NATS_OK)
        s = natsOptions_SetServers(o, urls, n);
    if (s == NATS_OK)
        s = natsOptions_SetName(o, r->node);
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(o, r->timeout_ms);
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(o, -1); /* for ever */
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(o, 250);
    if (s == NATS_OK)
        s = natsOptions_SetPingInterval(o, 1000); /* a stopped server is noticed in ~3 s */
    if (s == NATS_OK)
        s = natsOptions_SetMaxPingsOut(o, 2);
    const char *what = NULL;
    if (s == NATS_OK && (s = auth_options(o, opts, &what)) != NATS_OK) {
        natsOptions_Destroy(o);
        free(list);
        return set_err(err, errlen, -EACCES, "NATS %s: %s", what, nats_reason(s));
    }
    if (s == NATS_OK)
        s = natsConnection_Connect(&r->nc, o);
    natsOptions_Destroy(o);
    free(list);
    if (s != NATS_OK) {
        const char *why = nats_reason(s);
        bool refused = s == NATS_NOT_PERMITTED || strcasestr(why, "authorization") ||
                       strcasestr(why, "authentication");
        return set_err(err, errlen,
                       refused ? -EACCES
                       : n     ? -ECONNREFUSED
                               : -EINVAL,
                       "cannot connect to NATS at %s: %s%s", r->shown, why,
                       refused ? " (NATS refused this node's credentials: check --nats-user and "
                                 "its password, --nats-token-file or --nats-creds)"
                               : "");
    }
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = r->timeout_ms;
    if ((s = natsConnection_JetStream(&r->js, r->nc, &jo)) != NATS_OK)
        return set_err(err, errlen, -ENOMEM, "JetStream context: %s", natsStatus_GetText(s));
    return 0;
}

/* Finds the stream, or creates it (file storage, stream_replicas). */
static int ensure_stream(nd_replica *r, uint64_t *first, uint64_t *last, char *err, size_t errlen)
{
    int rc = probe(r, r->timeout_ms, first, last);
    if (rc != -ENOENT) {
        if (rc < 0)
            return set_err(err, errlen, rc, "stream %s: JetStream does not answer at %s", r->stream,
                           r->shown);
        return 0;
    }
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    const char *subjects[1] = {r->subject};
    cfg.Name = r->stream;
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Replicas = r->stream_replicas;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_AddStream(&si, r->js, &cfg, NULL, &jerr);
    jsStreamInfo_Destroy(si);
    if (s != NATS_OK && (rc = probe(r, r->timeout_ms, first, last)) < 0) /* another node made it? */
        return set_err(err, errlen, -ETIMEDOUT, "cannot create stream %s (%u replicas): %s (%d)",
                       r->stream, r->stream_replicas, natsStatus_GetText(s), (int)jerr);
    if (s == NATS_OK) {
        nd_log(ND_LOG_INFO, "replica: created stream %s (subject %s, %u replicas, file storage)",
               r->stream, r->subject, r->stream_replicas);
        *first = *last = 0;
    }
    return 0;
}

static char *dup_or(const char *s, const char *dflt)
{
    return strdup(s && *s ? s : dflt);
}

int nd_replica_open(nd_replica **out, nd_store *local, const nd_replica_options *opts, char *err,
                    size_t errlen)
{
    *out = NULL;
    nd_replica *r = calloc(1, sizeof(*r));
    if (!r) {
        nd_store_close(local);
        return set_err(err, errlen, -ENOMEM, "out of memory");
    }
    r->local = local;
    r->ops = replica_ops;
    r->ops.durable = nd_store_durable(local);
    r->base.ops = &r->ops;
    r->base.detections_max = nd_store_base_of(local)->detections_max;
    r->servers = dup_or(opts->servers, "");
    r->shown = dup_or(opts->servers_shown, r->servers ? r->servers : "");
    r->stream = dup_or(opts->stream, "neardup");
    char host[256] = "node";
    gethostname(host, sizeof(host) - 1);
    r->node = dup_or(opts->node_name, host);
    r->stream_replicas = opts->stream_replicas ? opts->stream_replicas : 3;
    r->timeout_ms = opts->timeout_ms ? opts->timeout_ms : 2000;
    r->max_lag = opts->max_lag;
    size_t sl = r->stream ? strlen(r->stream) + sizeof(SUBJECT_SUFFIX) : 0;
    r->subject = sl ? malloc(sl) : NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->work, NULL);
    pthread_cond_init(&r->progress, NULL);
    pthread_cond_init(&r->probe, NULL);
    r->done_tail = &r->done_head;
    if (!r->servers || !r->shown || !r->stream || !r->node || !r->subject) {
        rep_close((nd_store *)(void *)r);
        return set_err(err, errlen, -ENOMEM, "out of memory");
    }
    snprintf(r->subject, sl, "%s%s", r->stream, SUBJECT_SUFFIX);
    uint8_t rnd[8] = {0};
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        uint64_t t = (uint64_t)nd_clock_ns() ^ (uint64_t)getpid() << 32;
        memcpy(rnd, &t, sizeof(rnd));
    }
    for (int i = 0; i < 8; i++)
        snprintf(r->origin + 2 * i, 3, "%02x", rnd[i]);
    /* The last change committed here; its entry is read again (the changes
     * after it in that entry may not be). */
    r->resume_pos = nd_store_stream_seq(local);
    uint64_t have = r->resume_pos >> POS_SHIFT, first = 0, last = 0;
    atomic_init(&r->applied_seq, have ? have - 1 : 0);
    atomic_init(&r->progress_ms, nd_clock_ms());
    int64_t count = nd_store_count(local);
    int rc = have == 0 && count > 0
                 ? set_err(err, errlen, -EINVAL,
                           "the store holds %lld documents registered without replication (no "
                           "stream entry applied): a replica starts on an empty data directory "
                           "or a backup of a replica; register those documents again through "
                           "a replicated node (POST /import)",
                           (long long)count)
                 : connect_nats(r, opts, err, errlen);
    if (rc == 0)
        rc = ensure_stream(r, &first, &last, err, errlen);
    if (rc == 0 && last > 0 && first > (have ? have : 1))
        rc = set_err(err, errlen, -ERANGE,
                     "stream %s holds entries %" PRIu64 "..%" PRIu64
                     " but this store has applied up to %" PRIu64
                     " only: the entries between were trimmed; restore a newer backup of a peer "
                     "(neardup backup) into the data directory",
                     r->stream, first, last, have);
    if (rc == 0 && last < have)
        rc = set_err(err, errlen, -ERANGE,
                     "this store has applied stream %s up to entry %" PRIu64
                     " but the stream ends at %" PRIu64
                     ": it belongs to another stream (or the stream was recreated); start on an "
                     "empty data directory or a backup of a peer",
                     r->stream, have, last);
    if (rc < 0) {
        rep_close((nd_store *)(void *)r);
        return rc;
    }
    atomic_init(&r->stream_seq, last);
    atomic_init(&r->writable, true);
    atomic_init(&r->started, false);
    nd_log(ND_LOG_INFO,
           "replica: node %s on stream %s at %s: %" PRIu64 " entries applied here, the stream "
           "ends at %" PRIu64,
           r->node, r->stream, r->shown, have, last);
    *out = r;
    return 0;
}

nd_store *nd_replica_store(nd_replica *r)
{
    return (nd_store *)(void *)r;
}

/* Tells every thread to stop (they return once they see it). */
static void stop_threads(nd_replica *r)
{
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_cond_broadcast(&r->progress);
    pthread_cond_broadcast(&r->work);
    pthread_cond_broadcast(&r->probe);
    pthread_mutex_unlock(&r->mu);
}

int nd_replica_start(nd_replica *r, nd_registry *reg)
{
    r->reg = reg;
    struct {
        pthread_t *thread;
        void *(*main)(void *);
    } threads[] = {{&r->completer, replica_completer_main},
                   {&r->applier, replica_applier_main},
                   {&r->publisher, publisher_main},
                   {&r->prober, prober_main},
                   {&r->syncer, syncer_main}};
    size_t n = 0;
    int rc = 0;
    while (n < sizeof(threads) / sizeof(threads[0]) &&
           (rc = pthread_create(threads[n].thread, NULL, threads[n].main, r)) == 0)
        n++;
    if (rc != 0) { /* the ones started stop again */
        stop_threads(r);
        while (n--)
            pthread_join(*threads[n].thread, NULL);
        nd_log(ND_LOG_ERROR, "replica: cannot start its threads: %s", strerror(rc));
        return -rc;
    }
    pthread_mutex_lock(&r->mu);
    atomic_store(&r->started, true);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static void rep_close(nd_store *st)
{
    nd_replica *r = rep_of(st);
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    bool started = atomic_load(&r->started);
    pthread_cond_broadcast(&r->work);
    pthread_cond_broadcast(&r->probe);
    pthread_cond_broadcast(&r->progress);
    pthread_mutex_unlock(&r->mu);
    if (started) {
        pthread_join(r->publisher, NULL);
        pthread_join(r->prober, NULL);
        pthread_join(r->syncer, NULL);
        pthread_join(r->applier, NULL);
    }
    /* Published, not met by the applier: in the stream (or not); this node
     * applies them at its next start. */
    pub_item *it;
    while ((it = list_pop(&r->awaiting)))
        item_finish(it, -ESHUTDOWN);
    while ((it = list_pop(&r->queue))) /* never started */
        item_finish(it, -ESHUTDOWN);
    nd_store_close(r->local); /* its last commits' done callbacks run */
    if (started) {
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->progress);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->completer, NULL);
    }
    if (r->js)
        jsCtx_Destroy(r->js);
    if (r->nc) {
        natsConnection_Close(r->nc);
        natsConnection_Destroy(r->nc);
    }
    nats_CloseAndWait(2000); /* its threads gone: nothing left for a leak check */
    pthread_cond_destroy(&r->progress);
    pthread_cond_destroy(&r->probe);
    pthread_cond_destroy(&r->work);
    pthread_mutex_destroy(&r->mu);
    free(r->servers);
    free(r->shown);
    free(r->stream);
    free(r->node);
    free(r->subject);
    free(r);
}

bool nd_replica_ready(const nd_replica *r, const char **why)
{
    nd_replica *m = (nd_replica *)(uintptr_t)r;
    const char *w = NULL;
    uint64_t last = atomic_load(&m->stream_seq), applied = atomic_load(&m->applied_seq);
    if (!atomic_load(&m->started))
        w = "loading"; /* loaded, its threads not started yet (nd_replica_start()) */
    else if (atomic_load(&m->failed))
        w = "replica_failed";
    else if (!atomic_load(&m->writable))
        w = "replication_unavailable";
    else if (last > applied && (last - applied > r->max_lag ||
                                nd_clock_ms() - atomic_load(&m->progress_ms) > STALL_MS))
        w = "replica_behind"; /* far behind, or not moving */
    if (why)
        *why = w;
    return w == NULL;
}

void nd_replica_stats_get(const nd_replica *r, nd_replica_stats *out)
{
    nd_replica *m = (nd_replica *)(uintptr_t)r;
    uint64_t last = atomic_load(&m->stream_seq), applied = atomic_load(&m->applied_seq);
    *out = (nd_replica_stats){
        .node = r->node,
        .stream = r->stream,
        .applied_seq = applied,
        .stream_seq = last > applied ? last : applied,
        .lag = last > applied ? last - applied : 0,
        .stored_seq = nd_store_stream_seq(m->local) >> POS_SHIFT,
        .lag_seconds = (double)atomic_load(&m->delay_ns) / 1e9,
        .connected = m->nc && natsConnection_Status(m->nc) == NATS_CONN_STATUS_CONNECTED,
        .writable = atomic_load(&m->writable),
        .failed = atomic_load(&m->failed),
        .published = atomic_load(&m->published),
        .applied = atomic_load(&m->applied),
        .conflicts = atomic_load(&m->conflicts),
        .unavailable = atomic_load(&m->unavailable),
        .entries = atomic_load(&m->entries),
        .gap_fills = atomic_load(&m->gap_fills),
    };
}
