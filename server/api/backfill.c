/* backfill.c - POST /import (backfill.h). */
#include "backfill.h"
#include "answer.h"
#include "api.h"
#include "json.h"
#include "log.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>

#define EVENTS_MAX 10000 /* duplicates and refused lines listed in one answer */

struct nd_backfill {
    pthread_mutex_t mu;
    pthread_cond_t idle;
    bool busy;        /* the slot: an import runs, not answered yet */
    unsigned threads; /* import threads that have not posted their answer */
    bool stopped;     /* nd_backfill_stop() was called */
    atomic_bool stop; /* the running import stops after its batch */
};

/* One import: the request's copy of its body, what it reports, its result. */
typedef struct job {
    nd_backfill *bf;
    nd_req *r;
    nd_api *api;
    char *body;
    size_t len;
    struct evbuffer *events; /* the "events" array, written by job_report() */
    nd_reply ew;
    uint64_t nevents;
    nd_import_summary sum;
    bool predate; /* ?predate=true */
    int rc;
} job;

int nd_backfill_create(nd_backfill **out)
{
    nd_backfill *bf = calloc(1, sizeof(*bf));
    if (!bf)
        return -ENOMEM;
    pthread_mutex_init(&bf->mu, NULL);
    pthread_cond_init(&bf->idle, NULL);
    atomic_init(&bf->stop, false);
    *out = bf;
    return 0;
}

void nd_backfill_stop(nd_backfill *bf)
{
    if (!bf)
        return;
    pthread_mutex_lock(&bf->mu);
    bf->stopped = true;
    atomic_store(&bf->stop, true);
    while (bf->threads)
        pthread_cond_wait(&bf->idle, &bf->mu);
    pthread_mutex_unlock(&bf->mu);
}

void nd_backfill_destroy(nd_backfill *bf)
{
    if (!bf)
        return;
    pthread_mutex_destroy(&bf->mu);
    pthread_cond_destroy(&bf->idle);
    free(bf);
}

char *nd_backfill_detection(const nd_check_req *rq, const nd_check_res *res, nd_store_event *ev)
{
    return nd_workflow_detection(rq, res, ev);
}

static void job_free(job *j)
{
    if (!j)
        return;
    free(j->body);
    if (j->events)
        evbuffer_free(j->events);
    free(j);
}

void nd_backfill_write_event(nd_reply *w, const nd_import_event *ev)
{
    nd_reply_object(w);
    nd_reply_key(w, "line");
    nd_reply_u64(w, ev->line);
    nd_reply_key(w, "id");
    if (ev->id)
        nd_reply_string(w, ev->id, ev->id_len);
    else
        nd_reply_null(w);
    if (ev->duplicate) {
        nd_reply_key(w, "source");
        if (ev->source)
            nd_reply_string(w, ev->source, ev->source_len);
        else
            nd_reply_null(w);
        nd_reply_key(w, "copied_share");
        nd_reply_fraction(w, ev->copied_share);
    } else {
        nd_reply_key(w, "code");
        nd_reply_plain(w, ev->code, strlen(ev->code));
        nd_reply_key(w, "message");
        nd_reply_string(w, ev->message, strlen(ev->message));
    }
    nd_reply_object_end(w);
}

/* nd_import_report_fn: one item of "events" per duplicate and refused
 * line, the first EVENTS_MAX (the summary counts them all). */
static void job_report(void *arg, const nd_import_event *ev)
{
    job *j = arg;
    if (j->nevents++ < EVENTS_MAX)
        nd_backfill_write_event(&j->ew, ev);
}

void nd_backfill_write_summary(nd_reply *w, const nd_import_summary *s, bool complete)
{
    nd_reply_key(w, "summary");
    nd_reply_object(w);
    nd_reply_key(w, "lines");
    nd_reply_u64(w, s->lines);
    nd_reply_key(w, "imported");
    nd_reply_u64(w, s->imported);
    nd_reply_key(w, "existing");
    nd_reply_u64(w, s->existing);
    nd_reply_key(w, "duplicates");
    nd_reply_u64(w, s->duplicates);
    nd_reply_key(w, "errors");
    nd_reply_u64(w, s->errors);
    nd_reply_key(w, "detections");
    nd_reply_u64(w, s->detections);
    nd_reply_key(w, "seconds");
    char num[ND_JSON_REAL_MAX]; /* to the millisecond, written as every real is */
    nd_reply_raw(w, num, nd_json_format_real(round(s->seconds * 1000) / 1000, num));
    nd_reply_key(w, "complete");
    nd_reply_bool(w, complete);
    nd_reply_object_end(w);
}

/* On the request's worker: the answer. */
static void job_answer(nd_task *t)
{
    nd_req *r = (nd_req *)((char *)t - offsetof(nd_req, task));
    job *j = r->op;
    r->op = NULL;
    nd_reply w;
    if (j->rc == 0) {
        nd_api_body_begin(r, &w);
        nd_reply_object(&w);
        nd_backfill_write_summary(&w, &j->sum, j->rc == 0);
        nd_reply_key(&w, "events");
        size_t n = evbuffer_get_length(j->events);
        const unsigned char *items = evbuffer_pullup(j->events, -1);
        if (!items)
            nd_die_oom(__func__);
        nd_reply_raw(&w, (const char *)items, n);
        nd_reply_key(&w, "events_truncated");
        nd_reply_bool(&w, j->nevents > EVENTS_MAX);
        nd_reply_object_end(&w);
        nd_api_body_send(r, &w, 200);
        job_free(j);
        return;
    }
    int status = 503;
    const char *code = "storage_unavailable", *why = strerror(-j->rc);
    if (j->rc == -ESTALE) { /* a line lost the race to other replicas ND_API_STALE_TRIES times */
        code = "replication_contention";
        why = "other replicas kept writing first";
        nd_req_add_header(r, "Retry-After", "1");
    } else if (j->rc == -ECANCELED || j->rc == -ESHUTDOWN) {
        code = "shutting_down";
        why = "the server is stopping";
        nd_req_add_header(r, "Retry-After", "1");
    } else if (j->rc == -ENOMEM) {
        status = 500;
        code = "internal";
    } else {
        nd_log(ND_LOG_WARN, "import stopped (request %s): %s", r->rid, why);
    }
    nd_reply_error_begin(nd_api_body_begin(r, &w), code,
                         "the import stopped: %s; every line judged before is durable, and "
                         "sending the body again finishes it",
                         why);
    nd_backfill_write_summary(&w, &j->sum, j->rc == 0);
    nd_reply_error_end(&w);
    nd_api_body_send(r, &w, status);
    job_free(j);
}

/* Waits for one store change's done. */
typedef struct sync_done {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int status;
} sync_done;

static void sync_done_cb(void *arg, int status)
{
    sync_done *s = arg;
    pthread_mutex_lock(&s->mu);
    s->status = status;
    s->done = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Writes the import's audit entry (its client, its summary) and waits for
 * its commit, so that the answer follows it. A failure is logged: the
 * lines judged are durable whatever becomes of the entry. */
static void audit_import(job *j)
{
    nd_reply w;
    struct evbuffer *buf = nd_text_begin(&w);
    nd_reply_object(&w);
    nd_backfill_write_summary(&w, &j->sum, j->rc == 0);
    nd_reply_object_end(&w);
    size_t dlen;
    char *detail = nd_text_done(&w, buf, &dlen);
    nd_store_event ev;
    char *value = nd_workflow_audit_event(j->r, "import", NULL, 0, detail, dlen, &ev);
    free(detail);
    sync_done s = {.done = false};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    int rc;
    while ((rc = nd_corpus_event_put(j->api->corpus, &ev, sync_done_cb, &s)) == -EBUSY)
        nanosleep(&(struct timespec){0, 1000000}, NULL); /* the store's queue is full */
    free(value);
    if (rc == 0) {
        pthread_mutex_lock(&s.mu);
        while (!s.done)
            pthread_cond_wait(&s.cv, &s.mu);
        pthread_mutex_unlock(&s.mu);
        rc = s.status;
    }
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    if (rc < 0)
        nd_log(ND_LOG_WARN, "import (request %s): its audit entry was not written: %s", j->r->rid,
               strerror(-rc));
}

static void *job_main(void *arg)
{
    job *j = arg;
    nd_backfill *bf = j->bf;
    nd_import_params p;
    nd_import_params_init(&p, j->api->cfg);
    if (j->r->who && j->r->who->is_client) { /* its documents are registered under it */
        p.client = j->r->who->name;
        p.client_len = strlen(p.client);
    }
    p.threads = 0; /* this thread alone: the workers keep the other core */
    p.stop = &bf->stop;
    p.detection = nd_backfill_detection;
    p.fp = j->api->fp;
    p.sk = j->api->sk;
    p.predate = j->predate;
    p.audit_client = j->r->client; /* read-only while the request waits */
    p.stale_tries = ND_API_STALE_TRIES;
    j->rc = nd_corpus_import(j->api->corpus, j->body, j->len, &p, job_report, j, &j->sum);
    free(j->body);
    j->body = NULL;
    if (j->sum.lines)
        audit_import(j);
    nd_reply_array_end(&j->ew);
    if (j->ew.failed)
        nd_die_oom(__func__);
    nd_req *r = j->r;
    r->task.fn = job_answer;
    /* The slot is free before the answer leaves: a client that sends its
     * next body once answered never finds it taken. */
    pthread_mutex_lock(&bf->mu);
    bf->busy = false;
    pthread_mutex_unlock(&bf->mu);
    nd_worker_post(r->worker, &r->task); /* j is the worker's from here */
    pthread_mutex_lock(&bf->mu);
    bf->threads--;
    pthread_cond_broadcast(&bf->idle);
    pthread_mutex_unlock(&bf->mu);
    return NULL;
}

/* Takes the one import slot: 0, or answers (409 running, 503 stopping). */
static int claim_slot(nd_req *r, nd_backfill *bf)
{
    pthread_mutex_lock(&bf->mu);
    bool stopped = bf->stopped, busy = bf->busy;
    if (!stopped && !busy) {
        bf->busy = true;
        bf->threads++;
    }
    pthread_mutex_unlock(&bf->mu);
    if (!stopped && !busy)
        return 0;
    nd_req_add_header(r, "Retry-After", "1");
    if (stopped)
        nd_api_error(r, 503, "shutting_down", "the server is stopping; retry");
    else
        nd_api_error(r, 409, "import_running",
                     "another import is running: one at a time; retry when it is answered");
    return -1;
}

static void release_slot(nd_backfill *bf)
{
    pthread_mutex_lock(&bf->mu);
    bf->busy = false;
    bf->threads--;
    pthread_cond_broadcast(&bf->idle);
    pthread_mutex_unlock(&bf->mu);
}

/* Reads "predate=true|false" from the query (NULL: none). Returns 0, or
 * -1 for another value. */
static int query_predate(const char *query, bool *predate)
{
    *predate = false;
    const char *v;
    size_t vlen;
    while ((v = nd_request_query_next(&query, "predate", &vlen))) {
        if (vlen == 4 && memcmp(v, "true", 4) == 0)
            *predate = true;
        else if (!(vlen == 5 && memcmp(v, "false", 5) == 0))
            return -1;
    }
    return 0;
}

/* A body without a non-blank line. */
static bool blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

void nd_backfill_handle(nd_req *r)
{
    nd_api *api = nd_api_of(r);
    nd_request_error e;
    if (!nd_api_is_operator(r) && !nd_api_is_client(r)) {
        nd_api_forbidden(r,
                         "importing is for operators and clients; the token \"%s\" is an "
                         "account token",
                         r->client);
        return;
    }
    if (!nd_request_lines_kind(nd_req_header(r, "Content-Type"), &e)) {
        nd_api_request_error(r, &e);
        return;
    }
    bool predate;
    if (query_predate(nd_api_query(r), &predate) < 0) {
        nd_api_error(r, 400, "invalid_field", "predate must be true or false");
        return;
    }
    if (!nd_corpus_loaded(nd_api_corpus(r))) {
        nd_api_loading(r);
        return;
    }
    size_t len;
    const char *body = nd_req_body(r, &len);
    if (!body) {
        nd_api_error(r, 500, "internal", "out of memory");
        return;
    }
    if (blank(body, len)) {
        nd_api_error(r, 400, "empty_body",
                     "the body holds no JSON lines (one {\"id\",\"text\",...} object a line)");
        return;
    }
    if (claim_slot(r, api->backfill) < 0)
        return;
    job *j = calloc(1, sizeof(*j));
    char *copy = malloc(len);
    struct evbuffer *events = evbuffer_new();
    if (!j || !copy || !events) {
        free(j);
        free(copy);
        if (events)
            evbuffer_free(events);
        release_slot(api->backfill);
        nd_api_error(r, 500, "internal", "out of memory");
        return;
    }
    memcpy(copy, body, len); /* the thread reads its own copy */
    *j = (job){.bf = api->backfill,
               .r = r,
               .api = api,
               .body = copy,
               .len = len,
               .events = events,
               .predate = predate};
    nd_reply_init(&j->ew, events);
    nd_reply_array(&j->ew);
    r->op = j;
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &attr, job_main, j);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        r->op = NULL;
        job_free(j);
        release_slot(api->backfill);
        nd_api_error(r, 500, "internal", "cannot start the import: %s", strerror(rc));
    }
}
