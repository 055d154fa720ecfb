/* replica.c - a node of a replicated neardup on NATS JetStream (replica.h). */
#include "replica.h"

#include "change.h"
#include "clock.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define SUBJECT_SUFFIX ".changes"
#define HDR_CHANGE "Nd-Change" /* "<origin>-<token>": which node's which change */
#define PROBE_MS 500           /* stream probe interval */
#define PROBE_WAIT_MAX 1000    /* longest wait for a probe's answer, ms */
#define NEXT_MSG_MS 200        /* applier's wait for an entry (then checks stopping) */
#define STALE_WAIT_MS 200      /* a refused change waits this long for the applier */
#define QUEUE_MAX 16384        /* local changes waiting for the publisher */
#define SERVERS_MAX 32
#define TOKEN_MAX 48

/* A local change: queued for the publisher, then (published) waiting for
 * the applier to meet it in the stream. */
typedef struct pub_item {
    struct pub_item *next;
    uint64_t token;
    uint64_t based; /* the last entry applied when it was decided */
    uint8_t *bytes; /* nd_change_encode() */
    size_t len;
    nd_store_done_fn done;
    void *arg;
} pub_item;

/* A stream change applied through the registry, committed: completed by
 * the completer thread (nd_registry_complete() takes the writer: not on
 * the store's commit thread). */
typedef struct completion {
    struct completion *next;
    nd_reg_change *ch;
    int status;
} completion;

typedef struct item_list {
    pub_item *head, *tail;
    size_t n;
} item_list;

struct nd_replica {
    nd_store_base base; /* first: the interface (store.h) */
    nd_store_ops ops;   /* the local store's, with this file's writes */
    nd_store *local;
    nd_registry *reg;
    char *servers, *stream, *node, *subject;
    unsigned stream_replicas, timeout_ms;
    uint64_t max_lag;
    char origin[17]; /* this process's random name in HDR_CHANGE */

    natsConnection *nc;
    jsCtx *js;

    pthread_mutex_t mu;      /* guards the lists, the counter and the flags below */
    pthread_cond_t work;     /* publisher: queued / stopping */
    pthread_cond_t progress; /* applied advanced, woken, completions, stopping */
    pthread_cond_t probe;    /* prober: stopping */
    item_list queue;         /* to publish, in decision order */
    item_list awaiting;      /* published (or being), in stream order */
    completion *done_head, **done_tail;
    uint64_t next_token;
    bool woken;    /* a registry wait of the applier ended */
    bool stopping; /* nd_store_close() began */
    bool started;
    pthread_t publisher, applier, prober, completer;

    _Atomic uint64_t applied_seq; /* last entry applied in memory */
    _Atomic uint64_t other_max;   /* last entry of another origin seen */
    _Atomic uint64_t own_last;    /* last entry this node published */
    _Atomic uint64_t stream_seq;  /* last entry of the stream known */
    _Atomic int64_t delay_ns;     /* last applied entry: publication to here */
    _Atomic bool writable, failed;
    _Atomic uint64_t published, applied, conflicts, unavailable;
};

static nd_replica *rep_of(const nd_store *st)
{
    return (nd_replica *)(void *)nd_store_base_of(st);
}

static void atomic_max(_Atomic uint64_t *a, uint64_t v)
{
    uint64_t cur = atomic_load(a);
    while (v > cur && !atomic_compare_exchange_weak(a, &cur, v))
        ;
}

static void list_push(item_list *l, pub_item *it)
{
    it->next = NULL;
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
    l->n++;
}

static pub_item *list_pop(item_list *l)
{
    pub_item *it = l->head;
    if (it) {
        l->head = it->next;
        if (!l->head)
            l->tail = NULL;
        l->n--;
    }
    return it;
}

/* Removes it from l if it is there; true when it was. */
static bool list_remove(item_list *l, pub_item *it)
{
    pub_item *prev = NULL;
    for (pub_item *p = l->head; p; prev = p, p = p->next) {
        if (p != it)
            continue;
        if (prev)
            prev->next = p->next;
        else
            l->head = p->next;
        if (l->tail == p)
            l->tail = prev;
        l->n--;
        return true;
    }
    return false;
}

static void item_finish(pub_item *it, int status)
{
    if (it->done)
        it->done(it->arg, status);
    free(it->bytes);
    free(it);
}

static void token_text(const nd_replica *r, uint64_t token, char out[TOKEN_MAX])
{
    snprintf(out, TOKEN_MAX, "%s-%" PRIu64, r->origin, token);
}

static void note_applied(nd_replica *r, uint64_t seq)
{
    atomic_max(&r->applied_seq, seq);
    atomic_fetch_add(&r->applied, 1);
    pthread_mutex_lock(&r->mu);
    pthread_cond_broadcast(&r->progress);
    pthread_mutex_unlock(&r->mu);
}

/* ---- the store interface: local changes are queued, stream changes pass ---- */

/* Queues a local change (encoded) for the publisher. Registry writer held
 * (so applied_seq is the state the change was decided on). */
static int queue_local(nd_replica *r, int kind, const nd_record *rec, const nd_store_event *audit,
                       nd_store_done_fn done, void *arg)
{
    if (!atomic_load(&r->writable) || atomic_load(&r->failed)) { /* never met by the applier */
        atomic_fetch_add(&r->unavailable, 1);
        return -ENOTCONN;
    }
    pub_item *it = calloc(1, sizeof(*it));
    if (!it)
        return -ENOMEM;
    int rc = nd_change_encode(kind, rec, audit, &it->bytes, &it->len);
    if (rc < 0) {
        free(it);
        return rc;
    }
    it->based = atomic_load(&r->applied_seq);
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

static int rep_put(nd_store *st, const nd_record *rec, nd_store_done_fn done, void *arg)
{
    nd_replica *r = rep_of(st);
    if (!rec->stream_seq)
        return queue_local(r, ND_STORE_PUT, rec, NULL, done, arg);
    int rc = nd_store_put(r->local, rec, done, arg);
    if (rc == 0)
        atomic_max(&r->applied_seq, rec->stream_seq);
    return rc;
}

static int rep_replace(nd_store *st, const nd_record *rec, nd_store_done_fn done, void *arg)
{
    nd_replica *r = rep_of(st);
    if (!rec->stream_seq)
        return queue_local(r, ND_STORE_REPLACE, rec, NULL, done, arg);
    int rc = nd_store_replace(r->local, rec, done, arg);
    if (rc == 0)
        atomic_max(&r->applied_seq, rec->stream_seq);
    return rc;
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
    int rc = nd_store_amend(r->local, rec, audit, done, arg);
    if (rc == 0)
        atomic_max(&r->applied_seq, rec->stream_seq);
    return rc;
}

static int rep_delete_at(nd_store *st, const char *id, size_t id_len, int64_t at, uint64_t seq,
                         nd_store_done_fn done, void *arg)
{
    nd_replica *r = rep_of(st);
    if (!seq) {
        nd_record rec = {.id = id, .id_len = id_len, .registered_at_us = at, .version = ""};
        return queue_local(r, ND_STORE_DELETE, &rec, NULL, done, arg);
    }
    int rc = nd_store_delete_at_seq(r->local, id, id_len, at, seq, done, arg);
    if (rc == 0)
        atomic_max(&r->applied_seq, seq);
    return rc;
}

static int rep_event_put(nd_store *st, const nd_store_event *ev, nd_store_done_fn done, void *arg)
{
    return nd_store_event_put(rep_of(st)->local, ev, done, arg);
}

static int rep_events(nd_store *st, nd_event_kind kind, int64_t owner_at, int64_t before_at,
                      size_t limit, int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    return nd_store_events(rep_of(st)->local, kind, owner_at, before_at, limit, visit, arg);
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
    .events = rep_events,
    .delete_at = rep_delete_at,
    .scan = rep_scan,
    .get = rep_get,
    .sketches = rep_sketches,
    .count = rep_count,
    .stream_seq = rep_stream_seq,
    .writable = rep_writable,
    .get_stats = rep_get_stats,
    .close = rep_close,
};

/* ---- the publisher ---- */

/* A change that lost the race: waits (a little) for the applier to bring
 * in what another node wrote, so that the caller's second try is decided
 * on it, then reports -ESTALE. */
static void refuse_stale(nd_replica *r, pub_item *it)
{
    atomic_fetch_add(&r->conflicts, 1);
    nd_log(ND_LOG_DEBUG, "replica: change %" PRIu64 " (based on %" PRIu64 ") lost the race",
           it->token, it->based);
    int64_t until = nd_clock_ms() + STALE_WAIT_MS;
    pthread_mutex_lock(&r->mu);
    while (!r->stopping && nd_clock_ms() < until) {
        uint64_t other = atomic_load(&r->other_max), applied = atomic_load(&r->applied_seq);
        uint64_t last = atomic_load(&r->stream_seq);
        if (other > it->based && applied >= other && applied >= last)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 5 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&r->progress, &r->mu, &ts);
    }
    pthread_mutex_unlock(&r->mu);
    item_finish(it, -ESTALE);
}

/* Publishes it, expecting the stream to end where this node knows it ends.
 * On success the applier finishes it; otherwise it is finished here. */
static void publish_one(nd_replica *r, pub_item *it)
{
    if (atomic_load(&r->other_max) > it->based) { /* decided before another node's entry */
        refuse_stale(r, it);
        return;
    }
    uint64_t applied = atomic_load(&r->applied_seq), own = atomic_load(&r->own_last);
    uint64_t tail = applied > own ? applied : own;
    char tok[TOKEN_MAX];
    token_text(r, it->token, tok);
    natsMsg *m = NULL;
    natsStatus s = natsMsg_Create(&m, r->subject, NULL, (const char *)it->bytes, (int)it->len);
    if (s == NATS_OK)
        s = natsMsgHeader_Set(m, HDR_CHANGE, tok);
    if (s != NATS_OK) {
        natsMsg_Destroy(m);
        item_finish(it, -ENOMEM);
        return;
    }
    pthread_mutex_lock(&r->mu); /* before: the applier may meet it before the ack */
    list_push(&r->awaiting, it);
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
    if (s == NATS_OK) {
        atomic_max(&r->own_last, ack->Sequence);
        atomic_max(&r->stream_seq, ack->Sequence);
        atomic_fetch_add(&r->published, 1);
        nd_log(ND_LOG_DEBUG, "replica: change %s published as entry %" PRIu64 " after %" PRIu64,
               tok, ack->Sequence, tail);
        jsPubAck_Destroy(ack);
        return;
    }
    pthread_mutex_lock(&r->mu);
    bool mine = list_remove(&r->awaiting, it); /* else the applier met it: it landed */
    pthread_mutex_unlock(&r->mu);
    if (!mine)
        return;
    if (jerr == JSStreamWrongLastSequenceErr) {
        refuse_stale(r, it);
        return;
    }
    /* No answer (or another error): the outcome is unknown to the client,
     * which is told so (503). Should the entry have landed, it is applied
     * as another node's, and this node's next entries, which expect the
     * stream to end before it, are refused until then. */
    nd_log(ND_LOG_WARN, "replica: publishing change %s failed: %s (JetStream error %d)", tok,
           natsStatus_GetText(s), (int)jerr);
    atomic_fetch_add(&r->unavailable, 1);
    if (s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS || s == NATS_CONNECTION_CLOSED)
        atomic_store(&r->writable, false);
    item_finish(it, -ETIMEDOUT);
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
        pub_item *it = list_pop(&r->queue);
        pthread_mutex_unlock(&r->mu);
        publish_one(r, it);
        pthread_mutex_lock(&r->mu);
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

/* ---- the applier ---- */

static bool stopping(nd_replica *r)
{
    pthread_mutex_lock(&r->mu);
    bool s = r->stopping;
    pthread_mutex_unlock(&r->mu);
    return s;
}

static void fail(nd_replica *r, uint64_t seq, const char *what, int rc)
{
    nd_log(ND_LOG_ERROR,
           "replica: entry %" PRIu64 " of stream %s: %s (%s); this node stops applying and is not "
           "ready: restart it (it resumes from its last committed entry)",
           seq, r->stream, what, strerror(rc < 0 ? -rc : rc));
    atomic_store(&r->failed, true);
}

/* Writes this node's own entry (its change is pending in the registry) to
 * the local store; the registry's done callback answers the client. */
static void apply_own(nd_replica *r, pub_item *it, const nd_change *ch, uint64_t seq)
{
    const nd_record *rec = &ch->rec;
    int rc;
    do {
        switch (ch->kind) {
        case ND_STORE_PUT: rc = nd_store_put(r->local, rec, it->done, it->arg); break;
        case ND_STORE_REPLACE: rc = nd_store_replace(r->local, rec, it->done, it->arg); break;
        case ND_STORE_AMEND:
            rc = nd_store_amend(r->local, rec, ch->has_audit ? &ch->audit : NULL, it->done,
                                it->arg);
            break;
        case ND_STORE_DELETE:
            rc = nd_store_delete_at_seq(r->local, rec->id, rec->id_len, rec->registered_at_us, seq,
                                        it->done, it->arg);
            break;
        default: rc = -EBADMSG;
        }
        if (rc == -EBUSY)
            usleep(1000); /* the local store's queue is full */
    } while (rc == -EBUSY && !stopping(r));
    if (rc < 0) {
        fail(r, seq, "the local store refused this node's own entry", rc);
        it->done(it->arg, rc);
    }
    free(it->bytes);
    free(it);
    note_applied(r, seq);
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

/* Applies another node's entry through the registry. */
static void apply_other(nd_replica *r, const nd_change *ch, uint64_t seq)
{
    atomic_max(&r->other_max, seq);
    if (ch->kind == ND_CHANGE_NOOP) {
        note_applied(r, seq);
        return;
    }
    int rc;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        r->woken = false;
        pthread_mutex_unlock(&r->mu);
        rc = nd_registry_apply(r->reg, (nd_store_change)ch->kind, &ch->rec,
                               ch->has_audit ? &ch->audit : NULL, apply_done, r);
        if (rc == -EBUSY) {
            usleep(1000);
        } else if (rc == ND_REG_WAIT) { /* a local change of the id is in flight */
            nd_log(ND_LOG_DEBUG, "replica: entry %" PRIu64 " waits for a local change", seq);
            pthread_mutex_lock(&r->mu);
            while (!r->woken && !r->stopping)
                pthread_cond_wait(&r->progress, &r->mu);
            pthread_mutex_unlock(&r->mu);
        } else {
            break;
        }
        if (stopping(r))
            return;
    }
    if (rc < 0 && rc != -ESHUTDOWN)
        fail(r, seq, "applying it failed", rc);
    else if (rc >= 0)
        note_applied(r, seq);
}

static void apply_msg(nd_replica *r, natsMsg *m)
{
    jsMsgMetaData *meta = NULL;
    if (natsMsg_GetMetaData(&meta, m) != NATS_OK)
        return;
    uint64_t seq = meta->Sequence.Stream;
    atomic_max(&r->stream_seq, seq + meta->NumPending);
    int64_t ts = meta->Timestamp;
    jsMsgMetaData_Destroy(meta);
    if (seq <= atomic_load(&r->applied_seq))
        return; /* applied already */
    const char *tok = NULL;
    natsMsgHeader_Get(m, HDR_CHANGE, &tok);
    nd_change ch;
    int rc = nd_change_decode((const uint8_t *)natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m),
                              &ch);
    if (rc < 0) {
        fail(r, seq, rc == -EPROTO ? "written by a newer neardup" : "cannot be decoded", rc);
        return;
    }
    ch.rec.stream_seq = seq;
    char want[TOKEN_MAX];
    pthread_mutex_lock(&r->mu);
    pub_item *it = r->awaiting.head;
    if (it)
        token_text(r, it->token, want);
    bool own = it && tok && strcmp(tok, want) == 0;
    if (own)
        list_pop(&r->awaiting);
    pthread_mutex_unlock(&r->mu);
    nd_log(ND_LOG_DEBUG, "replica: entry %" PRIu64 " kind %d from %s (%s)", seq, ch.kind,
           tok ? tok : "?", own ? "this node's" : "another node's");
    if (own)
        apply_own(r, it, &ch, seq);
    else
        apply_other(r, &ch, seq);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t d = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec - ts;
    atomic_store(&r->delay_ns, d > 0 ? d : 0);
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

static void *applier_main(void *arg)
{
    nd_replica *r = arg;
    natsSubscription *sub = subscribe(r);
    while (sub && !stopping(r)) {
        if (atomic_load(&r->failed)) {
            usleep(100 * 1000);
            continue;
        }
        natsMsg *m = NULL;
        natsStatus s = natsSubscription_NextMsg(&m, sub, NEXT_MSG_MS);
        if (s != NATS_OK) {
            if (s != NATS_TIMEOUT)
                usleep(10 * 1000);
            continue;
        }
        apply_msg(r, m);
        natsMsg_Destroy(m);
    }
    if (sub) {
        natsSubscription_Unsubscribe(sub);
        natsSubscription_Destroy(sub);
    }
    return NULL;
}

/* Completes the registry changes of applied entries, in commit order. */
static void *completer_main(void *arg)
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
                fail(r, nd_store_stream_seq(r->local), "the local store could not commit it", rc);
            free(c);
            c = next;
        }
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- the prober ---- */

/* One stream info request: the stream's last entry, and whether JetStream
 * (a quorum) answers. Returns 0 or -errno. */
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
    if (first)
        *first = si->State.FirstSeq;
    *last = si->State.LastSeq;
    jsStreamInfo_Destroy(si);
    return 0;
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

static int connect_nats(nd_replica *r, char *err, size_t errlen)
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
    if (s == NATS_OK)
        s = natsConnection_Connect(&r->nc, o);
    natsOptions_Destroy(o);
    free(list);
    if (s != NATS_OK)
        return set_err(err, errlen, n ? -ECONNREFUSED : -EINVAL, "cannot connect to NATS at %s: %s",
                       r->servers, natsStatus_GetText(s));
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
                           r->servers);
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
    r->base.copies_max = nd_store_base_of(local)->copies_max;
    r->servers = dup_or(opts->servers, "");
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
    if (!r->servers || !r->stream || !r->node || !r->subject) {
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
    uint64_t have = nd_store_stream_seq(local), first = 0, last = 0;
    atomic_init(&r->applied_seq, have);
    int64_t count = nd_store_count(local);
    int rc = have == 0 && count > 0
                 ? set_err(err, errlen, -EINVAL,
                           "the store holds %lld documents registered without replication (no "
                           "stream entry applied): a replica starts on an empty data directory "
                           "or a backup of a replica; register those documents again through "
                           "a replicated node (POST /import)",
                           (long long)count)
                 : connect_nats(r, err, errlen);
    if (rc == 0)
        rc = ensure_stream(r, &first, &last, err, errlen);
    if (rc == 0 && last > have && first > have + 1)
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
    nd_log(ND_LOG_INFO,
           "replica: node %s on stream %s at %s: %" PRIu64 " entries applied here, the stream "
           "ends at %" PRIu64,
           r->node, r->stream, r->servers, have, last);
    *out = r;
    return 0;
}

nd_store *nd_replica_store(nd_replica *r)
{
    return (nd_store *)(void *)r;
}

int nd_replica_start(nd_replica *r, nd_registry *reg)
{
    r->reg = reg;
    int rc = pthread_create(&r->completer, NULL, completer_main, r);
    if (rc == 0 && (rc = pthread_create(&r->applier, NULL, applier_main, r)) != 0) {
        pthread_mutex_lock(&r->mu);
        r->stopping = true;
        pthread_cond_broadcast(&r->progress);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->completer, NULL);
    } else if (rc == 0 && (rc = pthread_create(&r->publisher, NULL, publisher_main, r)) != 0) {
        pthread_mutex_lock(&r->mu);
        r->stopping = true;
        pthread_cond_broadcast(&r->progress);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->applier, NULL);
        pthread_join(r->completer, NULL);
    } else if (rc == 0 && (rc = pthread_create(&r->prober, NULL, prober_main, r)) != 0) {
        pthread_mutex_lock(&r->mu);
        r->stopping = true;
        pthread_cond_broadcast(&r->progress);
        pthread_cond_broadcast(&r->work);
        pthread_cond_broadcast(&r->probe);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->publisher, NULL);
        pthread_join(r->applier, NULL);
        pthread_join(r->completer, NULL);
    }
    if (rc != 0) {
        nd_log(ND_LOG_ERROR, "replica: cannot start its threads: %s", strerror(rc));
        return -rc;
    }
    pthread_mutex_lock(&r->mu);
    r->started = true;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static void rep_close(nd_store *st)
{
    nd_replica *r = rep_of(st);
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    bool started = r->started;
    pthread_cond_broadcast(&r->work);
    pthread_cond_broadcast(&r->probe);
    pthread_cond_broadcast(&r->progress);
    pthread_mutex_unlock(&r->mu);
    if (started) {
        pthread_join(r->publisher, NULL);
        pthread_join(r->prober, NULL);
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
    if (atomic_load(&m->failed))
        w = "replica_failed";
    else if (!atomic_load(&m->writable))
        w = "replication_unavailable";
    else if (last > applied && last - applied > r->max_lag)
        w = "replica_behind";
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
        .lag_seconds = (double)atomic_load(&m->delay_ns) / 1e9,
        .connected = m->nc && natsConnection_Status(m->nc) == NATS_CONN_STATUS_CONNECTED,
        .writable = atomic_load(&m->writable),
        .failed = atomic_load(&m->failed),
        .published = atomic_load(&m->published),
        .applied = atomic_load(&m->applied),
        .conflicts = atomic_load(&m->conflicts),
        .unavailable = atomic_load(&m->unavailable),
    };
}
