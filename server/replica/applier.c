/* applier.c - a replicated node's applier (replica_internal.h): the
 * stream's entries read in order and applied, this node's own writes
 * and the others', gaps filled, and the completer. */
#include "replica_internal.h"

/* ---- the applier ---- */

static void fail(nd_replica *r, uint64_t seq, const char *what, int rc)
{
    nd_log(ND_LOG_ERROR,
           "replica: entry %" PRIu64 " of stream %s: %s (%s); this node stops applying and is not "
           "ready: restart it (it resumes from its last committed entry)",
           seq, r->stream, what, strerror(rc < 0 ? -rc : rc));
    atomic_store(&r->failed, true);
}

/* Writes the journal write ch (an ND_STORE_EVENT) to the local store at
 * position pos. Returns as nd_store_event_put(). */
static int put_journal(nd_replica *r, const nd_entry *ch, uint64_t pos, nd_store_done_fn done,
                       void *arg)
{
    nd_store_event ev = ch->audit;
    ev.stream_seq = pos;
    return nd_store_event_put(r->local, &ev, done, arg);
}

/* Writes one of this node's own changes (pending in the registry) to the
 * local store at position pos; the registry's done callback answers the
 * client. */
static void apply_own(nd_replica *r, pub_item *it, const nd_entry *ch, uint64_t pos)
{
    const nd_record *rec = &ch->rec;
    int rc;
    do {
        switch (ch->kind) {
        case ND_STORE_PUT:
            rc = nd_store_put_audited(r->local, rec, ch->has_audit ? &ch->audit : NULL, it->done,
                                      it->arg);
            break;
        case ND_STORE_REPLACE: rc = nd_store_replace(r->local, rec, it->done, it->arg); break;
        case ND_STORE_AMEND:
            rc = nd_store_amend(r->local, rec, ch->has_audit ? &ch->audit : NULL, it->done,
                                it->arg);
            break;
        case ND_STORE_DELETE:
            rc = nd_store_delete_audited(r->local, rec->id, rec->id_len, rec->registered_at_us, pos,
                                         ch->has_audit ? &ch->audit : NULL, it->done, it->arg);
            break;
        case ND_STORE_EVENT: rc = put_journal(r, ch, pos, it->done, it->arg); break;
        default: rc = -EBADMSG;
        }
        if (rc == -EBUSY)
            usleep(1000); /* the local store's queue is full */
    } while (rc == -EBUSY && !stopping(r));
    if (rc < 0) {
        fail(r, pos >> POS_SHIFT, "the local store refused this node's own change", rc);
        it->done(it->arg, rc);
    }
    free(it->bytes);
    free(it);
}

static void apply_done(void *arg, nd_reg_change *ch, int status)
{
    nd_replica *r = arg;
    completion *c = ch ? malloc(sizeof(*c)) : NULL;
    pthread_mutex_lock(&r->mu);
    if (!ch) {
        r->woken = true;
    } else if (c) {
        c->next = NULL;
        c->ch = ch;
        c->status = status;
        *r->done_tail = c;
        r->done_tail = &c->next;
    } else {
        nd_log(ND_LOG_ERROR, "replica: out of memory completing an entry");
        atomic_store(&r->failed, true);
    }
    pthread_cond_broadcast(&r->progress);
    pthread_mutex_unlock(&r->mu);
}

/* Applies another node's change at position pos through the registry.
 * Returns false when applying stopped (failed, or stopping). */
static bool apply_other(nd_replica *r, const nd_entry *ch, uint64_t pos)
{
    if (ch->kind == ND_ENTRY_NOOP)
        return true;
    int rc;
    if (ch->kind == ND_STORE_EVENT) { /* a journal write: the registry holds none */
        while ((rc = put_journal(r, ch, pos, NULL, NULL)) == -EBUSY && !stopping(r))
            usleep(1000);
        if (rc < 0 && rc != -ESHUTDOWN && rc != -EBUSY)
            fail(r, pos >> POS_SHIFT, "writing a journal entry of it failed", rc);
        return rc >= 0;
    }
    for (;;) {
        pthread_mutex_lock(&r->mu);
        r->woken = false;
        pthread_mutex_unlock(&r->mu);
        rc = nd_registry_apply(r->reg, (nd_store_change)ch->kind, &ch->rec,
                               ch->has_audit ? &ch->audit : NULL, apply_done, r);
        if (rc == -EBUSY) {
            usleep(1000);
        } else if (rc == ND_REG_WAIT) { /* a local change of the id is in flight */
            nd_log(ND_LOG_DEBUG, "replica: position %" PRIx64 " waits for a local change", pos);
            pthread_mutex_lock(&r->mu);
            while (!r->woken && !r->stopping)
                pthread_cond_wait(&r->progress, &r->mu);
            pthread_mutex_unlock(&r->mu);
        } else {
            break;
        }
        if (stopping(r))
            return false;
    }
    if (rc < 0 && rc != -ESHUTDOWN)
        fail(r, pos >> POS_SHIFT, "applying a change of it failed", rc);
    if (rc == ND_REG_QUEUED) /* before note_applied() of its entry */
        atomic_fetch_add(&r->other_queued, 1);
    return rc >= 0;
}

/* This node's change with token, if it is the next one awaited (taken
 * off the list), else NULL. */
static pub_item *take_own(nd_replica *r, bool from_here, uint64_t token)
{
    if (!from_here)
        return NULL;
    pthread_mutex_lock(&r->mu);
    pub_item *it = r->awaiting.head;
    if (it && it->token == token)
        list_pop(&r->awaiting);
    else
        it = NULL;
    pthread_mutex_unlock(&r->mu);
    return it;
}

/* Applies stream entry seq (published at ts_ns, by origin), whose body is
 * data[0..len): each change at position seq << POS_SHIFT | index. Only the
 * entry after the last one applied: entries are applied in order and none
 * is passed over (fill_gap() reads the ones a consumer skipped). */
static void apply_entry(nd_replica *r, uint64_t seq, int64_t ts_ns, const char *origin,
                        const uint8_t *data, size_t len)
{
    if (seq != atomic_load(&r->applied_seq) + 1)
        return; /* applied already, or entries before it are not */
    bool from_here = origin && strcmp(origin, r->origin) == 0;
    size_t off = 0, blen = 0;
    uint64_t token;
    const uint8_t *body;
    unsigned idx = 0;
    int rc;
    while ((rc = nd_entry_frame_next(data, len, &off, &token, &body, &blen)) == 1) {
        uint64_t pos = seq << POS_SHIFT | idx++;
        if (idx > POS_MAX) {
            rc = -E2BIG;
            break;
        }
        nd_entry ch;
        if ((rc = nd_entry_decode(body, blen, &ch)) < 0)
            break;
        ch.rec.stream_seq = pos;
        pub_item *it = take_own(r, from_here, token);
        if (pos <= r->resume_pos) { /* committed before this start */
            if (it)
                item_finish(it, 0);
            continue;
        }
        if (it) {
            apply_own(r, it, &ch, pos);
        } else {
            atomic_max(&r->other_max, seq);
            if (!apply_other(r, &ch, pos))
                return;
        }
    }
    if (rc < 0) {
        fail(r, seq, rc == -EPROTO ? "written by a newer neardup" : "it cannot be decoded", rc);
        return;
    }
    if (ts_ns > 0) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        int64_t d = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec - ts_ns;
        atomic_store(&r->delay_ns, d > 0 ? d : 0);
    }
    note_applied(r, seq);
}

static void fill_gap(nd_replica *r);

static void apply_msg(nd_replica *r, natsMsg *m)
{
    jsMsgMetaData *meta = NULL;
    if (natsMsg_GetMetaData(&meta, m) != NATS_OK)
        return;
    uint64_t seq = meta->Sequence.Stream;
    atomic_max(&r->stream_seq, seq + meta->NumPending);
    int64_t ts = meta->Timestamp;
    jsMsgMetaData_Destroy(meta);
    if (seq > atomic_load(&r->applied_seq) + 1) {
        /* The consumer skipped entries (deleted ones; or its server's copy
         * lacks them): read from the stream's leader first, this one with
         * them. */
        fill_gap(r);
        return;
    }
    const char *origin = NULL;
    natsMsgHeader_Get(m, HDR_ORIGIN, &origin);
    apply_entry(r, seq, ts, origin, (const uint8_t *)natsMsg_GetData(m),
                (size_t)natsMsg_GetDataLength(m));
}

/* Fills a gap the subscription left (its server stopped: the library
 * makes a new consumer only after missed heartbeats; or it skipped
 * entries): reads the entries after the last applied one directly from the
 * stream. */
static void fill_gap(nd_replica *r)
{
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = r->timeout_ms < PROBE_WAIT_MAX ? r->timeout_ms : PROBE_WAIT_MAX;
    for (int i = 0; i < GAP_MAX && !stopping(r) && !atomic_load(&r->failed); i++) {
        uint64_t seq = atomic_load(&r->applied_seq) + 1;
        if (seq > atomic_load(&r->stream_seq))
            return;
        natsMsg *m = NULL;
        jsErrCode jerr = 0;
        natsStatus s = js_GetMsg(&m, r->js, r->stream, seq, &jo, &jerr);
        if (s != NATS_OK) {
            /* "No message found" comes from a server whose copy does not
             * hold the entry: deleted by hand (nothing to apply), or not
             * there yet (a leader just elected that has not applied its
             * log to its copy). Passing over the second lost the entry on
             * this node for good (a policy change, its audit
             * entry and its event, after this node was paused while the
             * stream's leader was stopped): passed over only when the
             * stream's leader, with its quorum, says it is gone. */
            if (jerr == JSNoMessageFoundErr && replica_entry_gone(r, seq) == 1) {
                nd_log(ND_LOG_WARN, "replica: entry %" PRIu64 " of stream %s was deleted: "
                       "nothing to apply", seq, r->stream);
                note_applied(r, seq);
                continue;
            }
            return; /* read again on the applier's next round */
        }
        const char *origin = NULL;
        natsMsgHeader_Get(m, HDR_ORIGIN, &origin);
        apply_entry(r, seq, natsMsg_GetTime(m), origin, (const uint8_t *)natsMsg_GetData(m),
                    (size_t)natsMsg_GetDataLength(m));
        natsMsg_Destroy(m);
        atomic_fetch_add(&r->gap_fills, 1);
    }
}

/* Changes published and acknowledged (in the stream) that the applier has
 * not met for twice the JetStream wait: the node cannot read the stream.
 * Their clients get 503 (the change may have been made: they were told
 * so); they count as another node's, so that no later decision of this
 * node passes the fence without having seen them. */
static void expire_awaiting(nd_replica *r)
{
    pub_item *gone = NULL;
    int64_t now = nd_clock_ms();
    pthread_mutex_lock(&r->mu);
    for (pub_item *it = r->awaiting.head, *next; it; it = next) {
        next = it->next;
        if (!it->acked_ms || now - it->acked_ms < 2 * (int64_t)r->timeout_ms)
            continue;
        list_remove(&r->awaiting, it);
        atomic_max(&r->other_max, it->seq);
        it->next = gone;
        gone = it;
    }
    pthread_mutex_unlock(&r->mu);
    while (gone) {
        pub_item *next = gone->next;
        atomic_fetch_add(&r->unavailable, 1);
        item_finish(gone, -ETIMEDOUT);
        gone = next;
    }
}

static natsSubscription *subscribe(nd_replica *r)
{
    while (!stopping(r)) {
        jsSubOptions so;
        jsSubOptions_Init(&so);
        so.Stream = r->stream;
        so.Ordered = true;
        so.Config.DeliverPolicy = js_DeliverByStartSequence;
        so.Config.OptStartSeq = atomic_load(&r->applied_seq) + 1;
        so.Config.Heartbeat = HEARTBEAT_NS; /* a lost consumer is noticed sooner */
        natsSubscription *sub = NULL;
        jsErrCode jerr = 0;
        natsStatus s = js_SubscribeSync(&sub, r->js, r->subject, NULL, &so, &jerr);
        if (s == NATS_OK)
            return sub;
        nd_log(ND_LOG_WARN, "replica: cannot subscribe to stream %s: %s (JetStream error %d)",
               r->stream, natsStatus_GetText(s), (int)jerr);
        usleep(500 * 1000);
    }
    return NULL;
}

void *replica_applier_main(void *arg)
{
    nd_replica *r = arg;
    natsSubscription *sub = subscribe(r);
    while (sub && !stopping(r)) {
        if (atomic_load(&r->failed)) {
            expire_awaiting(r);
            usleep(100 * 1000);
            continue;
        }
        natsMsg *m = NULL;
        natsStatus s = natsSubscription_NextMsg(&m, sub, NEXT_MSG_MS);
        if (s == NATS_OK) {
            apply_msg(r, m);
            natsMsg_Destroy(m);
            continue;
        }
        if (s != NATS_TIMEOUT)
            usleep(10 * 1000);
        if (atomic_load(&r->stream_seq) > atomic_load(&r->applied_seq) &&
            nd_clock_ms() - atomic_load(&r->progress_ms) >= GAP_MS)
            fill_gap(r);
        expire_awaiting(r);
    }
    /* Destroy only: it removes the interest without deleting the consumer
     * (libnats >= 3.4), which the server removes by itself (an ephemeral
     * one, once nothing listens). natsSubscription_Unsubscribe() would
     * delete it, reading the consumer's name without the subscription's
     * lock while libnats' heartbeat timer may be recreating the ordered
     * consumer and freeing that name (a heap-use-after-free at shutdown). */
    natsSubscription_Destroy(sub);
    return NULL;
}

/* Completes the registry changes of applied entries, in commit order. */
void *replica_completer_main(void *arg)
{
    nd_replica *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->done_head && !r->stopping)
            pthread_cond_wait(&r->progress, &r->mu);
        completion *c = r->done_head;
        r->done_head = NULL;
        r->done_tail = &r->done_head;
        if (!c && r->stopping)
            break;
        pthread_mutex_unlock(&r->mu);
        while (c) {
            completion *next = c->next;
            int rc = nd_registry_complete(r->reg, c->ch, c->status);
            if (rc < 0)
                fail(r, nd_store_stream_seq(r->local) >> POS_SHIFT,
                     "the local store could not commit it", rc);
            atomic_fetch_add(&r->other_completed, 1);
            free(c);
            c = next;
        }
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->progress); /* reads waiting for it (syncer) */
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}
