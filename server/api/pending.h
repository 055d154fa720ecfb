/* pending.h - one continuation for a request whose answer waits on
 * another thread: it asks the registry, and when the registry queued the
 * change (ND_REG_QUEUED) or made it wait behind another of the same id
 * (ND_REG_WAIT) the registry's callback posts the request back to its
 * worker, which completes the change, asks again (after a wait, or after
 * losing a race to another replica: -ESTALE, up to ND_API_STALE_TRIES
 * times) and answers exactly once. A store's or a replica's (void *, int)
 * callback comes back the same way (nd_pending_after()).
 *
 * Each waiting resource keeps its state in r->op, an object whose first
 * member is an nd_pending, and gives two steps: ask (the registry call) and
 * answer. Nothing here allocates. Internal to server/api/. */
#ifndef ND_PENDING_H
#define ND_PENDING_H

#include "answer.h"
#include "api_worker.h"

/* What a step's ask returns when it answered itself (a 403 decided on the
 * current document) and freed its state. */
#define ND_PENDING_ANSWERED 0x7fff

/* What a step's ask returns (nothing written, its state kept) when its
 * answer would be decided on this node's local state alone, with no stream
 * entry whose expected-sequence check fences it: a restore or revoke that
 * changes nothing, a 404 of an id, a 403 on the document as held here, a
 * registration answered with the document its id holds or judged not
 * original on the documents held here (check.c). On a replica such an
 * answer may be stale (a node behind once answered a restore 200
 * "active" 1.6 s after another node's revoke was acknowledged), so the
 * request first waits until this node holds the
 * stream's latest state (nd_replica_sync(), as a read at consistency
 * "latest"), then is asked again, and that answer stands. Return it only
 * while nd_pending_at_latest() is false. */
#define ND_PENDING_LATEST 0x7ffe

typedef struct nd_pending_steps {
    /* Asks the registry for r (its state in r->op), with nd_pending_done
     * and r as the hand-off. Returns the registry's 0, ND_REG_QUEUED,
     * ND_REG_WAIT or -errno, or ND_PENDING_ANSWERED. */
    int (*ask)(nd_req *r);
    /* Drops what the last ask left before asking again (NULL: nothing). */
    void (*again)(nd_req *r);
    /* Answers rc and takes op (r->op is NULL by then): the ask's own result
     * (completed false) or the completed change's (completed true). */
    void (*answer)(nd_req *r, void *op, int rc, bool completed);
} nd_pending_steps;

/* The first member of every waiting request's state. */
typedef struct nd_pending {
    const nd_pending_steps *steps;
    nd_reg_change *ch;                   /* set by the hand-off: a change to complete */
    int status;                          /* the hand-off's or a callback's status */
    unsigned stale_tries;                /* asked again after another replica wrote first */
    bool latest;                         /* this replica caught up with the stream for it */
    void (*next)(nd_req *r, int status); /* what nd_pending_after() resumes */
} nd_pending;

/* Runs steps for r (r->op set: its state, an nd_pending first): asks,
 * and answers now unless the registry will call back. An ask that returns
 * ND_PENDING_LATEST is asked again once this replica caught up with the
 * stream; should it not (cut off, or behind past --nats-timeout-ms), the
 * answer step gets the sync's -ENOTCONN, -ETIMEDOUT or -ESHUTDOWN
 * (completed false). */
void nd_pending_start(nd_req *r, const nd_pending_steps *steps);

/* Whether an answer for r may be decided on this node's local state: one
 * node (no replica), or a replica that caught up with the stream for r
 * (after an ask returned ND_PENDING_LATEST, or nd_pending_catch_up()). */
bool nd_pending_at_latest(nd_req *r);

/* Makes r (r->op: its state, an nd_pending first) wait until this replica
 * holds the stream's latest state, then runs then(r, status) on r's worker:
 * status 0 (nd_pending_at_latest() is true from then on) or the sync's
 * -errno (-ENOTCONN, -ETIMEDOUT, -ESHUTDOWN, -ENOMEM). On one node then
 * runs at once with 0. Uses the nd_pending's next. */
void nd_pending_catch_up(nd_req *r, void (*then)(nd_req *r, int status));

/* The registry's hand-off (nd_reg_done_fn; another thread): posts r (arg)
 * back to its worker, which completes the change or asks again, then
 * answers. */
void nd_pending_done(void *arg, nd_reg_change *ch, int status);

/* A (void *arg, int status) callback of the store or the replica (another
 * thread, or this one): posts r (arg) back to its worker, where the
 * nd_pending's next(r, status) runs. Set next before handing it out. */
void nd_pending_after(void *arg, int status);

/* State of a /check-original or DELETE that waits for the store. */
typedef struct op_state {
    nd_pending pend; /* first */
    bool is_delete;
    /* The request as request.c parsed it (a DELETE: only its id), handed to
     * the registry as it is. Its text and id are borrowed from the body and
     * the worker's parser for a query, owned copies when on_heap (a
     * registration may be decided again after another request reused the
     * parser); its meta is owned. */
    nd_check_req rq;
    nd_question q; /* the question of its text (question.h), asked with rq */
    nd_check_res res;
    nd_match *own_matches; /* a queued answer's matches, out of the worker's scratch */
    /* The first npaired listed matches' passages on both sides: the
     * worker's scratch, or (own_pairs) a copy of its own for an answer
     * that waits. */
    api_match_pairs *pairs;
    size_t npaired;
    bool own_pairs;
    nd_passage passages[API_PASSAGES];
    int sketched;    /* the text's sketch mode + 1 while the worker's scratch holds it, else 0 */
    bool on_heap;    /* waits for the store: allocated, freed by op_free() */
    char *journaled; /* the detection being written */
    bool no_record;  /* the caller may not record a detection: answered without */
    bool recorded;   /* the detection was written */
    /* Consistency "latest": runs once the replica caught up. */
    void (*when_latest)(nd_req *r);
    bool want_text; /* GET /documents/{id}?text=true: the kept text too */
    /* A registration's audit entry (nd_corpus_check(), arg: the request);
     * NULL: none. */
    nd_corpus_audit_fn audit;
} op_state;

/* Frees op (what it owns; op itself when on_heap). NULL is allowed. */
void op_free(op_state *op);

/* Runs then(r) on r->op (on the heap) once this node holds the stream's
 * latest state; answers the error if the replica cannot. */
void when_latest(nd_req *r, op_state *op, void (*then)(nd_req *r));

#endif
