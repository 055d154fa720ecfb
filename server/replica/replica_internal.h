/* replica_internal.h - what the two files of a replicated node share
 * (private to server/replica/): the constants, the local write waiting for
 * its entry (pub_item), struct nd_replica and its small helpers.
 *
 *   replica.c  the store in front of the local one (its writes queue a
 *              stream write), the publisher, the prober, the syncer
 *              (nd_replica_sync), the NATS connection and the stream, and
 *              the node's life (open, start, close, readiness, stats)
 *   applier.c  the applier: reads the stream's entries in order and applies
 *              each write (its own: the pending registry change; another
 *              node's: through the registry), fills gaps, and the
 *              completer that completes the registry's changes in order */
#ifndef ND_REPLICA_INTERNAL_H
#define ND_REPLICA_INTERNAL_H

#include "replica.h"
#include "entry.h"
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
#define HDR_ORIGIN "Nd-Origin"   /* the publishing process (its random name) */
#define PROBE_MS 500             /* stream probe interval */
#define PROBE_WAIT_MAX 1000      /* longest wait for a probe's answer, ms */
#define NEXT_MSG_MS 200          /* applier's wait for an entry (then checks stopping) */
#define STALE_WAIT_MS 200        /* a refused change waits this long for the applier */
#define QUEUE_MAX 16384          /* local changes waiting for the publisher */
#define BATCH_MAX 256            /* most changes in one stream entry */
#define BATCH_BYTES (512u << 10) /* and their bytes (NATS's max_payload is 1 MiB) */
#define POS_SHIFT 12             /* a change's position: entry << POS_SHIFT | index */
#define POS_MAX (1u << POS_SHIFT)
#define GAP_MS 500                /* no entry for this long while the stream has more: read them */
#define GAP_MAX 256               /* entries read directly per try */
#define STALL_MS 3000             /* behind and not moving for this long: not ready */
#define HEARTBEAT_NS 1000000000LL /* the consumer's idle heartbeat (a lost one is seen in ~2 s) */
#define SERVERS_MAX 32

/* A local change: queued for the publisher, then (published) waiting for
 * the applier to meet it in the stream. */
typedef struct pub_item {
    struct pub_item *next;
    uint64_t token;   /* this process's number of the change, in decision order */
    uint64_t based;   /* the last entry applied when it was decided */
    bool unfenced;    /* a journal write: decided on no state, so never stale
                       * (an entry refused for the stream's end is published
                       * again, not refused to its caller) */
    uint64_t seq;     /* its entry, once acknowledged (0 before) */
    int64_t acked_ms; /* when acknowledged (0 before) */
    uint8_t *bytes;   /* nd_entry_encode() */
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

/* A read waiting to see the stream's latest state (nd_replica_sync()). */
typedef struct sync_waiter {
    struct sync_waiter *next;
    uint64_t target;     /* the stream's last entry after the probe (0 before) */
    uint64_t need;       /* once target is applied: other_queued then, which
                          * other_completed must reach (then all visible) */
    bool applied;        /* target applied: need is set */
    int64_t deadline_ms; /* answered -ETIMEDOUT past it */
    int status;
    nd_store_done_fn done;
    void *arg;
} sync_waiter;

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
    char *shown; /* servers as logged: credentials redacted */
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
    _Atomic bool started; /* its threads run (nd_replica_start()): read by probes */
    sync_waiter *sync_new;     /* reads to probe for */
    sync_waiter *sync_waiting; /* probed: waiting until their target is visible */
    pthread_t publisher, applier, prober, completer, syncer;

    _Atomic uint64_t applied_seq; /* last entry applied in memory, whole */
    uint64_t resume_pos;          /* the local store's position at start: changes
                                   * up to it are committed (skipped) */
    _Atomic int64_t progress_ms;  /* when applied_seq last moved */
    _Atomic uint64_t other_max;   /* last entry of another origin seen */
    _Atomic uint64_t own_last;    /* last entry this node published */
    _Atomic uint64_t stream_seq;  /* last entry of the stream known */
    _Atomic int64_t delay_ns;     /* last applied entry: publication to here */
    _Atomic bool writable, failed;
    _Atomic uint64_t published, applied, conflicts, unavailable, entries, gap_fills;
    /* Other nodes' changes handed to the registry (ND_REG_QUEUED), and those
     * completed (visible to reads) since: completions run in that order. */
    _Atomic uint64_t other_queued, other_completed;
};

static inline nd_replica *rep_of(const nd_store *st)
{
    return (nd_replica *)(void *)nd_store_base_of(st);
}

static inline void atomic_max(_Atomic uint64_t *a, uint64_t v)
{
    uint64_t cur = atomic_load(a);
    while (v > cur && !atomic_compare_exchange_weak(a, &cur, v))
        ;
}

static inline void list_push(item_list *l, pub_item *it)
{
    it->next = NULL;
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
    l->n++;
}

static inline pub_item *list_pop(item_list *l)
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
static inline bool list_remove(item_list *l, pub_item *it)
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

static inline void item_finish(pub_item *it, int status)
{
    if (it->done)
        it->done(it->arg, status);
    free(it->bytes);
    free(it);
}

static inline void note_applied(nd_replica *r, uint64_t seq)
{
    atomic_max(&r->applied_seq, seq);
    atomic_store(&r->progress_ms, nd_clock_ms());
    atomic_fetch_add(&r->applied, 1);
    pthread_mutex_lock(&r->mu);
    pthread_cond_broadcast(&r->progress);
    pthread_mutex_unlock(&r->mu);
}

static inline bool stopping(nd_replica *r)
{
    pthread_mutex_lock(&r->mu);
    bool s = r->stopping;
    pthread_mutex_unlock(&r->mu);
    return s;
}

/* Whether the stream no longer holds entry seq, as its leader answers
 * while it hears from a quorum (replica.c): 1 when purged (before its
 * first entry) or deleted (nats stream rmm), 0 when it holds it or has not
 * reached it yet, -ETIMEDOUT when no such leader answered. One stream info
 * request with the deleted entries listed. */
int replica_entry_gone(nd_replica *r, uint64_t seq);

/* ---- threads started by replica.c, in applier.c ---- */

/* The applier thread (arg: the nd_replica). Returns NULL. */
void *replica_applier_main(void *arg);

/* The completer thread (arg: the nd_replica). Returns NULL. */
void *replica_completer_main(void *arg);

#endif
