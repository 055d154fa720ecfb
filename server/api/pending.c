/* pending.c - the one continuation of a request that waits (pending.h):
 * the registry's hand-off and a store's or replica's callback post the
 * request back to its worker; there the change is completed or asked again
 * and the request answered once. Also the state a check or a document
 * request keeps while it waits (op_state), consistency "latest", and the
 * catch-up of a change answered without a write (ND_PENDING_LATEST). */
#include "answer.h"
#include "api.h"
#include "log.h"
#include "pending.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static nd_req *req_of(nd_task *t)
{
    return (nd_req *)((char *)t - offsetof(nd_req, task));
}

static void run(nd_req *r);

/* After the catch-up an ask asked for (ND_PENDING_LATEST): asks again, on
 * the stream's latest state, or answers why it could not be reached. */
static void latest_again(nd_req *r, int status)
{
    nd_pending *p = r->op;
    if (status == 0) {
        run(r);
        return;
    }
    r->op = NULL;
    p->steps->answer(r, p, status, false);
}

static void run(nd_req *r)
{
    nd_pending *p = r->op;
    int rc = p->steps->ask(r);
    if (rc == ND_REG_QUEUED || rc == ND_REG_WAIT || rc == ND_PENDING_ANSWERED)
        return; /* resume() answers, or the ask did */
    if (rc == ND_PENDING_LATEST && !p->latest) {
        nd_pending_catch_up(r, latest_again);
        return;
    }
    r->op = NULL;
    p->steps->answer(r, p, rc == ND_PENDING_LATEST ? -EPROTO : rc, false);
}

/* Asks the registry again: after a wait, or on the newer state after
 * another replica wrote first. */
static void again(nd_req *r, nd_pending *p)
{
    if (p->steps->again)
        p->steps->again(r);
    run(r);
}

void nd_pending_start(nd_req *r, const nd_pending_steps *steps)
{
    nd_pending *p = r->op;
    p->steps = steps;
    run(r);
}

/* The request's own loop, after the registry's hand-off. */
static void resume(nd_task *t)
{
    nd_req *r = req_of(t);
    nd_pending *p = r->op;
    if (!p->ch) { /* waited behind another change of this id: ask again */
        again(r, p);
        return;
    }
    int rc = nd_corpus_complete(nd_api_corpus(r), p->ch, p->status);
    p->ch = NULL;
    if (rc == -ESTALE && p->stale_tries++ < ND_API_STALE_TRIES) {
        again(r, p); /* another replica wrote first: on the newer state */
        return;
    }
    r->op = NULL;
    p->steps->answer(r, p, rc, true);
}

void nd_pending_done(void *arg, nd_reg_change *ch, int status)
{
    nd_req *r = arg;
    nd_pending *p = r->op;
    p->ch = ch;
    p->status = status;
    r->task.fn = resume;
    nd_worker_post(r->worker, &r->task);
}

static void resume_after(nd_task *t)
{
    nd_req *r = req_of(t);
    nd_pending *p = r->op;
    p->next(r, p->status);
}

void nd_pending_after(void *arg, int status)
{
    nd_req *r = arg;
    nd_pending *p = r->op;
    p->status = status;
    r->task.fn = resume_after;
    nd_worker_post(r->worker, &r->task);
}

bool nd_pending_at_latest(nd_req *r)
{
    nd_pending *p = r->op;
    return !nd_corpus_replicated(nd_api_corpus(r)) || p->latest;
}

void nd_pending_catch_up(nd_req *r, void (*then)(nd_req *r, int status))
{
    nd_corpus *corpus = nd_api_corpus(r);
    nd_pending *p = r->op;
    p->latest = true; /* once: the answer after it stands */
    if (!nd_corpus_replicated(corpus)) {
        then(r, 0);
        return;
    }
    p->next = then;
    int rc = nd_corpus_sync(corpus, nd_pending_after, r);
    if (rc < 0)
        then(r, rc);
}

/* ---- a check's or a document request's state ---- */

void op_free(op_state *op)
{
    if (!op)
        return;
    nd_check_res_release(&op->res);
    free(op->rq.meta);
    free(op->rq.policy);
    free(op->own_matches);
    if (op->own_pairs)
        free(op->pairs);
    free(op->journaled);
    if (op->on_heap) {
        free((char *)op->rq.id);
        free((char *)op->rq.text);
        free((char *)op->rq.account);
        free(op);
    }
}

/* ---- consistency "latest": a read waits until this replica has applied
 * the stream's last entry ---- */

static void latest_resume(nd_req *r, int status)
{
    op_state *op = r->op;
    if (status == 0) {
        op->when_latest(r);
        return;
    }
    r->op = NULL;
    nd_api_latest_error(r, status);
    op_free(op);
}

/* Runs then(r) on r->op (on the heap) once this node holds the stream's
 * latest state: now on a single node, after the catch-up on a replica;
 * answers the error if the replica cannot. */
void when_latest(nd_req *r, op_state *op, void (*then)(nd_req *r))
{
    nd_corpus *corpus = nd_api_corpus(r);
    r->op = op;
    if (!nd_corpus_replicated(corpus)) {
        then(r);
        return;
    }
    op->when_latest = then;
    op->pend.next = latest_resume;
    int rc = nd_corpus_sync(corpus, nd_pending_after, r);
    if (rc < 0) {
        r->op = NULL;
        nd_api_latest_error(r, rc);
        op_free(op);
    }
}
