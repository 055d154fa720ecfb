/* pending.c - a request that waits: for the registry's change of its
 * document (ND_REG_QUEUED: answered after the commit; ND_REG_WAIT: asked
 * again behind another change of the id), for the store's commit of a
 * detection, for the replica's catch-up (consistency "latest"), asked
 * again after losing a race to another replica (-ESTALE). The callbacks
 * come from other threads; each posts the request back to its worker. */
#include "answer.h"
#include "log.h"
#include "pending.h"
#include "replica.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void op_free(op_state *op)
{
    if (!op)
        return;
    nd_check_res_release(&op->res);
    free(op->rq.meta);
    free(op->rq.policy);
    free(op->own_matches);
    free(op->journaled);
    if (op->on_heap) {
        free((char *)op->rq.id);
        free((char *)op->rq.text);
        free((char *)op->rq.account);
        free(op);
    }
}

/* ---- the detections (issue 13): a check with an id judged not original
 * is answered once its detection is durable ---- */

static void journal_resume(nd_task *t)
{
    nd_req *r = (nd_req *)((char *)t - offsetof(nd_req, task));
    op_state *op = r->op;
    r->op = NULL;
    if (op->status == 0) {
        op->recorded = true;
        reply_check(r, op);
    } else {
        nd_api_store_error(r, op->status, "the detection");
    }
    op_free(op);
}

/* From another thread: keeps status in r's op and runs resume on the
 * request's own loop. */
void op_post(nd_req *r, int status, void (*resume)(nd_task *t))
{
    op_state *op = r->op;
    op->status = status;
    r->task.fn = resume;
    nd_worker_post(r->worker, &r->task);
}

/* The store's commit of the journal entry (its thread, or this one for the
 * memory store): back to the request's own loop. */
void journal_done(void *arg, int status)
{
    op_post(arg, status, journal_resume);
}

/* Moves what a waiting answer needs out of the stack and the worker's
 * scratch: op itself (a query's lives on the handler's stack), its id and
 * account, its matches. Returns the op on the heap. */
op_state *op_keep(op_state *op)
{
    if (!op->on_heap) {
        op_state *h = malloc(sizeof(*h));
        char *id = op->rq.id ? malloc(op->rq.id_len + 1) : NULL;
        char *account = op->rq.account ? malloc(op->rq.account_len + 1) : NULL;
        if (!h || (op->rq.id && !id) || (op->rq.account && !account))
            nd_die_oom(__func__);
        *h = *op;
        h->on_heap = true;
        if (id) {
            memcpy(id, op->rq.id, op->rq.id_len);
            id[op->rq.id_len] = 0;
        }
        if (account) {
            memcpy(account, op->rq.account, op->rq.account_len);
            account[op->rq.account_len] = 0;
        }
        h->rq.id = id;
        h->rq.account = account;
        h->rq.text = NULL; /* answered without it */
        h->res.passages = h->passages;
        op = h;
    }
    if (op->res.nmatches && op->res.matches != op->own_matches) {
        if (!(op->own_matches = malloc(op->res.nmatches * sizeof(nd_match))))
            nd_die_oom(__func__);
        memcpy(op->own_matches, op->res.matches, op->res.nmatches * sizeof(nd_match));
        op->res.matches = op->own_matches;
    }
    op->res.hits = NULL;
    op->res.keys = NULL;
    op->res.ahits = NULL;
    return op;
}

/* Registry hand-off (another thread): back to the request's own loop. */
void op_done(void *arg, nd_reg_change *ch, int status)
{
    nd_req *r = arg;
    op_state *op = r->op;
    op->ch = ch;
    op->status = status;
    r->task.fn = op_resume;
    nd_worker_post(r->worker, &r->task);
}

/* ---- consistency "latest" (issue 14): a read waits until this replica
 * has applied the stream's last entry ---- */

static void latest_resume(nd_task *t)
{
    nd_req *r = (nd_req *)((char *)t - offsetof(nd_req, task));
    op_state *op = r->op;
    if (op->status == 0) {
        op->when_latest(r);
        return;
    }
    r->op = NULL;
    nd_api_latest_error(r, op->status);
    op_free(op);
}

/* The replica's thread: back to the request's own loop. */
static void latest_done(void *arg, int status)
{
    op_post(arg, status, latest_resume);
}

/* Runs then(r) on r->op (on the heap) once this node holds the stream's
 * latest state: now on a single node, after the catch-up on a replica;
 * answers the error if the replica cannot. */
void when_latest(nd_req *r, op_state *op, void (*then)(nd_req *r))
{
    nd_api *api = nd_api_of(r);
    r->op = op;
    if (!api->replica) {
        then(r);
        return;
    }
    op->when_latest = then;
    int rc = nd_replica_sync(api->replica, latest_done, r);
    if (rc < 0) {
        r->op = NULL;
        nd_api_latest_error(r, rc);
        op_free(op);
    }
}

/* Drops the last answer and asks the registry again. */
static void op_again(nd_req *r, op_state *op)
{
    nd_check_res_release(&op->res);
    free(op->own_matches);
    op->own_matches = NULL;
    if (op->is_delete)
        run_delete(r);
    else
        run_check(r);
}

void op_resume(nd_task *t)
{
    nd_req *r = (nd_req *)((char *)t - offsetof(nd_req, task));
    nd_api *api = nd_api_of(r);
    op_state *op = r->op;
    if (!op->ch) { /* waited behind another change of this id: ask again */
        op_again(r, op);
        return;
    }
    int rc = nd_registry_complete(api->reg, op->ch, op->status);
    op->ch = NULL;
    if (rc == -ESTALE && op->stale_tries++ < ND_API_STALE_TRIES) {
        op_again(r, op); /* another replica wrote first: on the newer state */
        return;
    }
    r->op = NULL;
    if (op->is_delete) {
        nd_metrics_event(api->metrics, rc == 0 ? ND_EV_DELETED : ND_EV_DELETE_FAILED);
        if (rc == 0)
            reply_deleted(r, op);
        else
            nd_api_store_error(r, rc, "the deletion");
    } else {
        nd_metrics_event(api->metrics, rc == 0 ? ND_EV_REGISTERED : ND_EV_REGISTER_FAILED);
        if (rc == 0) {
            answer_check(r, op);
            return;
        }
        nd_api_store_error(r, rc, "the registration");
    }
    op_free(op);
}
