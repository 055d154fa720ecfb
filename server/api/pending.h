/* pending.h - a request that waits for the registry, the store or the
 * replica (pending.c), and the steps of the check and the document it
 * resumes. Internal to server/api/. */
#ifndef ND_PENDING_H
#define ND_PENDING_H

#include "answer.h"
#include "api_worker.h"
#include "registry.h"

/* State of a /check-original or DELETE that waits for the store. */
typedef struct op_state {
    bool is_delete;
    /* The request as request.c parsed it (a DELETE: only its id), handed to
     * the registry as it is. Its text and id are borrowed from the body and
     * the worker's parser for a query, owned copies when on_heap (a
     * registration may be decided again after another request reused the
     * parser); its meta is owned. */
    nd_check_req rq;
    nd_check_res res;
    nd_reg_change *ch; /* set by the hand-off: a change to complete */
    int status;
    nd_match *own_matches; /* a queued answer's matches, out of the worker's scratch */
    nd_passage passages[API_PASSAGES];
    int sketched;    /* the text's sketch mode + 1 while the worker's scratch holds it, else 0 */
    bool on_heap;    /* waits for the store: allocated, freed by op_free() */
    char *journaled; /* the detection being written (issue 13) */
    bool no_record;  /* the caller may not record a detection: answered without */
    bool recorded;   /* the detection was written */
    /* Decided again after losing a race to another replica (issue 14). */
    unsigned stale_tries;
    /* Consistency "latest": runs once the replica caught up (issue 14). */
    void (*when_latest)(nd_req *r);
} op_state;

/* Frees op (what it owns; op itself when on_heap). NULL is allowed. */
void op_free(op_state *op);

/* From another thread: keeps status in r's op and runs resume on the
 * request's own loop. */
void op_post(nd_req *r, int status, void (*resume)(nd_task *t));

/* The store's commit of a detection: back to the request's loop. */
void journal_done(void *arg, int status);

/* Moves what a waiting answer needs out of the stack and the worker's
 * scratch. Returns the op on the heap (aborts when out of memory). */
op_state *op_keep(op_state *op);

/* The registry's hand-off (another thread): back to the request's loop,
 * where op_resume() completes the change or asks again. */
void op_done(void *arg, nd_reg_change *ch, int status);
void op_resume(nd_task *t);

/* Runs then(r) on r->op (on the heap) once this node holds the stream's
 * latest state; answers the error if the replica cannot. */
void when_latest(nd_req *r, op_state *op, void (*then)(nd_req *r));

/* The steps pending.c resumes (check.c, documents.c): ask the registry
 * (run_check, run_delete), answer (answer_check takes op; reply_check,
 * reply_deleted do not). */
void run_check(nd_req *r);
void run_delete(nd_req *r);
void answer_check(nd_req *r, op_state *op);
void reply_check(nd_req *r, op_state *op);
void reply_deleted(nd_req *r, const op_state *op);

#endif
