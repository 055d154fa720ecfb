/* import.c - the day-one backfill (import.h): the lines prepared ahead
 * (parsed, fingerprinted, sketched) by the threads, judged in order by the
 * registry, parked behind a pending document, reported and summed up. The
 * input and its lines are import_lines.c's. */
#include "import.h"
#include "import_lines_internal.h"
#include "pair.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "json.h"
#include "log.h"
#include "question.h"
#include "registry.h"
#include "sketch.h"
#include "store.h"
#include "text_pack.h"

#define BATCH 32        /* lines a thread prepares at a time */
#define PROGRESS_MS 250 /* progress bar redraws at most this often */
#define RING_AHEAD 64   /* batches prepared ahead beyond 4 per thread (2,048 lines) */

void nd_import_params_init(nd_import_params *p, const nd_config *cfg)
{
    *p = (nd_import_params){
        .lim = {.max_batch = cfg->max_batch,
                .max_meta = cfg->max_meta,
                .max_text = cfg->max_text,
                .default_k = cfg->k},
        .min_chars = cfg->min_chars,
        .keep_text = cfg->keep_text,
    };
}

/* ---- pass 2: lines parsed, fingerprinted and sketched ahead ---- */

typedef struct prep {
    const line_ref *ref;
    uint64_t seq;         /* the line's place in judging order (the importing thread's) */
    unsigned stale;       /* times its registration lost a replication race */
    struct asked *queued; /* ND_REG_QUEUED: the call's argument (conclude()) */
    const char *code;     /* refused: the error code, else NULL */
    char message[256];
    nd_check_req rq;
    nd_question q; /* the question of its text (values) */
    char id[ND_ID_MAX_UTF8 + 1];
    char account[ND_ID_MAX_UTF8 + 1];
    nd_sketch sketch[2]; /* the text's, made at once: the line is asked later */
    uint8_t *packed;     /* the text packed (nd_text_pack(); keep_text), owned:
                          * rq.text_packed points here; NULL: none */
    char *text;          /* a copy of the text, owned: the third stage reads it
                          * when the line has gray-zone candidates */
    size_t text_len;
} prep;

typedef struct batch {
    int64_t held; /* the batch index whose lines are here, or -1 */
    bool ready;
    size_t n;
    prep lines[BATCH];
} batch;

/* A thread's tools. */
typedef struct tools {
    nd_request_parser parser;
    nd_fp_scratch *fps;
    const nd_sketcher *sk; /* the import's (import_ctx.sk) */
    nd_sk_scratch *sks;
    nd_anchors anchors[2];
} tools;

/* A line set aside until the pending document its verdict waits on
 * commits (park()). */
typedef struct parked {
    prep *pr;         /* moved out of the ring (prep_move()) */
    int64_t judge_at; /* nd_check_res.wait_at_us */
} parked;

/* A report held back behind a parked line (its strings copied). */
typedef struct held_event {
    uint64_t seq;
    nd_import_event ev;
    char *strings; /* id, source and message, one allocation */
} held_event;

/* The argument of one nd_registry_check() call: which line asked, so that
 * a registration that lost a race to another replica (-ESTALE) is judged
 * again, and one of a predated import is audited once committed. Freed by
 * reg_done() for a wait, by the importing thread otherwise. */
typedef struct asked {
    struct import_ctx *c;
    const line_ref *ref;
    unsigned stale; /* the line's prep.stale */
    bool redo;      /* lost the race: judge it again */
    int64_t at;     /* the time registered at (an audited registration) */
    size_t id_len;  /* its id (an audited registration) */
    char id[ND_ID_MAX_UTF8 + 1];
} asked;

typedef struct completion {
    nd_reg_change *ch;
    int status;
    asked *a;
} completion;

typedef struct import_ctx {
    nd_registry *reg;
    nd_store *st;
    const nd_import_params *p;
    const nd_fingerprinter *fp; /* p->fp, or own_fp */
    nd_fingerprinter *own_fp;
    const nd_sketcher *sk; /* p->sk, or own_sk */
    nd_sketcher *own_sk;
    nd_pair_scratch *pair; /* the third stage's, for the judging thread (ask()) */
    const char *buf;
    const line_ref *refs;
    size_t nrefs, nbatches;
    /* the ring of batches */
    pthread_mutex_t mu;
    pthread_cond_t cv_ready, cv_free;
    batch *ring;
    size_t nring;
    size_t next;     /* next batch index a thread takes */
    size_t consumed; /* batches judged (their slots free) */
    bool abort;
    /* completions from the store's thread */
    pthread_mutex_t cmu;
    pthread_cond_t ccv;
    completion *comp, *comp_spare;
    size_t ncomp, capcomp, capspare;
    bool woken;           /* a WAIT's done arrived */
    uint64_t events_done; /* detections acknowledged */
    uint64_t events_failed;
    uint64_t audits_done; /* audit entries acknowledged (a predated import) */
    uint64_t audits_failed;
    /* the importing thread's own */
    struct parked *park; /* lines whose verdict waits on a pending document */
    size_t npark, cappark;
    int64_t park_before; /* the latest time a parked line is judged at */
    bool wake_seen;      /* a wake arrived since the parked lines were asked */
    bool settling;       /* settle_parked() is asking them (park[] in flux) */
    uint64_t seq;        /* lines judged so far (prep.seq) */
    held_event *held;    /* reports of lines after the first parked one, by seq */
    size_t nheld, capheld;
    nd_import_report_fn report;
    void *report_arg;
    uint64_t pending; /* registrations queued, not completed */
    uint64_t events_queued;
    uint64_t audits_queued;
    /* Given times judged against the documents before them only (asked
     * for, or the registry was empty at the start), else against all. */
    bool archive;
    /* Completions to act on outside drain(): lines to judge again,
     * registrations to audit (run_later()). */
    asked **later;
    size_t nlater, caplater;
    struct tools *redo_tools; /* the importing thread's, to prepare a line again */
    int fatal;
} import_ctx;

static int tools_init(tools *t, const nd_sketcher *sk)
{
    memset(t, 0, sizeof(*t));
    t->sk = sk;
    int rc = nd_fp_scratch_create(&t->fps);
    if (rc == 0)
        rc = nd_sk_scratch_create(&t->sks);
    return rc;
}

static void tools_finish(tools *t)
{
    nd_request_parser_finish(&t->parser);
    nd_fp_scratch_destroy(t->fps);
    nd_sk_scratch_destroy(t->sks);
}

static void refuse(prep *pr, const char *code, const char *fmt, const char *detail)
{
    pr->code = code;
    snprintf(pr->message, sizeof(pr->message), fmt, detail);
}

/* A refused line's id, when it is an object with a valid "id" (the
 * parser stopped before reading it): for its report. */
static void line_id(tools *t, prep *pr, const char *s, size_t len)
{
    size_t n = 0;
    nd_json_error jerr;
    if (pr->rq.id || nd_json_read_object(s, len, &t->parser.js, t->parser.members,
                                         ND_REQUEST_MAX_MEMBERS, &n, &jerr) < 0)
        return;
    const nd_json_member *m = nd_json_find(t->parser.members, n, "id");
    if (!m || m->value.type != ND_JSON_STRING ||
        !nd_request_id_valid(m->value.str, m->value.str_len))
        return;
    memcpy(pr->id, m->value.str, m->value.str_len);
    pr->id[m->value.str_len] = 0;
    pr->rq.id = pr->id;
    pr->rq.id_len = m->value.str_len;
}

/* Parses, validates, fingerprints and sketches one line into pr (as
 * handle_check() and sketch_check() of api.c do for a registration). */
static void prepare_line(import_ctx *c, tools *t, prep *pr, const line_ref *ref)
{
    const nd_import_params *p = c->p;
    free(pr->rq.meta);
    free(pr->rq.policy);
    free(pr->packed);
    pr->packed = NULL;
    free(pr->text);
    pr->text = NULL;
    pr->text_len = 0;
    pr->ref = ref;
    pr->code = NULL;
    pr->message[0] = 0;
    nd_check_req *rq = &pr->rq;
    nd_request_error e;
    int prc = nd_request_parse_check(&t->parser, c->buf + ref->off, ref->len, &p->lim, rq, &e);
    if (rq->id) { /* its own copy: the parser's scratch serves the next line */
        memcpy(pr->id, rq->id, rq->id_len);
        pr->id[rq->id_len] = 0;
        rq->id = pr->id;
    }
    if (rq->account) { /* likewise */
        memcpy(pr->account, rq->account, rq->account_len);
        pr->account[rq->account_len] = 0;
        rq->account = pr->account;
    }
    rq->client = p->client;
    rq->client_len = p->client ? p->client_len : 0;
    if (prc < 0) {
        pr->code = e.code;
        snprintf(pr->message, sizeof(pr->message), "%s", e.message);
        line_id(t, pr, c->buf + ref->off, ref->len);
        return;
    }
    if (!rq->id) {
        refuse(pr, "invalid_field", "%s", "an import line needs an \"id\"");
        return;
    }
    if (ref->at == AT_BAD) {
        refuse(pr, "invalid_field", "%s",
               "registered_at must be an RFC 3339 time (as the answers give it) or integer "
               "microseconds since the epoch");
        return;
    }
    if (ref->at == AT_RANGE) {
        refuse(pr, "invalid_field", "%s",
               "registered_at must lie from 1970-01-01T00:00:00.000001Z to "
               "9999-12-31T23:59:59.999999Z, without a leap second (:60); the epoch itself "
               "(0) is refused: leave registered_at out for the server's clock");
        return;
    }
    if (ref->at == AT_FUTURE) {
        refuse(pr, "invalid_field", "%s",
               "registered_at lies in the future: it may be at most 5 minutes after the "
               "server's clock");
        return;
    }
    rq->do_register = true;
    rq->registered_at_us = ref->at == AT_NONE ? 0 : ref->at; /* 0: the clock's */
    rq->judge_live = !c->archive;
    if (nd_request_check_meta(rq, &p->lim, &e) < 0 || nd_policy_of_check(rq, &e) < 0) {
        pr->code = e.code;
        snprintf(pr->message, sizeof(pr->message), "%s", e.message);
        return;
    }
    /* The question, as /check-original makes it (question.h). */
    int mode;
    nd_question_tools qt = {
        .fp = c->fp, .sk = t->sk, .fps = t->fps, .sks = t->sks, .anchors = t->anchors};
    int rc = nd_question_make(&qt, rq, &pr->q, p->min_chars, &mode);
    if (rc < 0) {
        refuse(pr, rc == -EILSEQ ? "invalid_field" : "internal", "%s",
               rc == -EILSEQ ? "text is not valid UTF-8" : strerror(-rc));
        return;
    }
    if (rc == ND_QUESTION_TOO_SHORT) {
        pr->code = "text_too_short";
        snprintf(pr->message, sizeof(pr->message),
                 "the text has %u characters after normalization; at least %u are needed to "
                 "judge it",
                 pr->q.chars, p->min_chars);
        return;
    }
    nd_question_scratch qs; /* made again in ask(): the line may move (prep_move()) */
    if ((rc = nd_question_sketch(&qt, rq, &pr->q, mode, true, true, pr->sketch, &qs)) < 0) {
        refuse(pr, "internal", "sketching failed: %s", strerror(-rc));
        return;
    }
    /* The text, packed here (in parallel) for the store to keep: the
     * parser's copy is gone after the next line. */
    rq->text_packed = NULL;
    rq->text_packed_len = 0;
    if (p->keep_text) {
        size_t n;
        if ((rc = nd_text_pack(rq->text, rq->text_len, &pr->packed, &n)) < 0) {
            refuse(pr, "internal", "packing the text failed: %s", strerror(-rc));
            return;
        }
        rq->text_packed = pr->packed;
        rq->text_packed_len = n;
    }
    if (!(pr->text = malloc(rq->text_len + 1))) {
        refuse(pr, "internal", "%s", "out of memory");
        return;
    }
    memcpy(pr->text, rq->text, rq->text_len);
    pr->text[rq->text_len] = 0;
    pr->text_len = rq->text_len;
    rq->text = NULL; /* borrowed from the parser: gone after the next line */
    rq->text_len = 0;
}

static void prepare_batch(import_ctx *c, tools *t, batch *b, size_t index)
{
    size_t first = index * BATCH;
    b->n = c->nrefs - first < BATCH ? c->nrefs - first : BATCH;
    for (size_t i = 0; i < b->n; i++)
        prepare_line(c, t, &b->lines[i], &c->refs[first + i]);
}

/* The preparing threads run at nice PREP_NICE (Linux keeps a nice value
 * per thread). They are ahead of the importing thread by the ring, and when
 * all of them are runnable on too few cores, the scheduler's equal shares
 * slowed the importing thread, the one whose pace the import keeps: at
 * nice 10 it gets a core of its own (a 3M-line import: 53 s against 61.5 s
 * at nice 0, paired; nice 19 the same, nice 5 57 s). In the server it also
 * keeps a backfill's text work behind the workers' requests. */
#define PREP_NICE 10

static void *prep_main(void *arg)
{
    import_ctx *c = arg;
    tools t;
    /* best effort: raising one's own nice value needs no privilege */
    (void)setpriority(PRIO_PROCESS, (id_t)gettid(), PREP_NICE);
    if (tools_init(&t, c->sk) < 0) {
        tools_finish(&t);
        pthread_mutex_lock(&c->mu);
        c->abort = true;
        if (!c->fatal)
            c->fatal = -ENOMEM;
        pthread_cond_broadcast(&c->cv_ready);
        pthread_cond_broadcast(&c->cv_free);
        pthread_mutex_unlock(&c->mu);
        return NULL;
    }
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->abort || c->next >= c->nbatches)
            break;
        size_t i = c->next++;
        batch *b = &c->ring[i % c->nring];
        /* the slot's previous batch, i - nring, must have been judged
         * (then no other thread can hold the slot: batch i alone maps to it) */
        while (i >= c->consumed + c->nring && !c->abort)
            pthread_cond_wait(&c->cv_free, &c->mu);
        if (c->abort)
            break;
        b->held = (int64_t)i;
        b->ready = false;
        pthread_mutex_unlock(&c->mu);
        prepare_batch(c, &t, b, i);
        pthread_mutex_lock(&c->mu);
        b->ready = true;
        pthread_cond_broadcast(&c->cv_ready);
    }
    pthread_mutex_unlock(&c->mu);
    tools_finish(&t);
    return NULL;
}

/* ---- the importing thread ---- */

/* Makes room for one more element in arr (*cap elements of elem bytes, n
 * used), doubling it (first: the first capacity). Returns the array (moved
 * perhaps; *cap updated), or NULL when there is no memory (arr is kept). */
static void *room_for_one(void *arr, size_t *cap, size_t n, size_t elem, size_t first)
{
    if (n < *cap)
        return arr;
    size_t nc = *cap ? 2 * *cap : first;
    void *na = realloc(arr, nc * elem);
    if (na)
        *cap = nc;
    return na;
}

/* The registry's hand-off (the store's commit thread, or whoever woke a
 * waiter): queued for the importing thread. */
static void reg_done(void *arg, nd_reg_change *ch, int status)
{
    asked *a = arg;
    import_ctx *c = a->c;
    pthread_mutex_lock(&c->cmu);
    if (!ch) {
        c->woken = true;
        free(a); /* the wait's: the line asks again with a new one */
    } else {
        completion *comp = room_for_one(c->comp, &c->capcomp, c->ncomp, sizeof(*comp), 4096);
        if (!comp)
            nd_die_oom(__func__);
        c->comp = comp;
        c->comp[c->ncomp++] = (completion){ch, status, a};
    }
    pthread_cond_signal(&c->ccv);
    pthread_mutex_unlock(&c->cmu);
}

/* A detection's commit (the store's commit thread, or within the call). */
static void event_done(void *arg, int status)
{
    import_ctx *c = arg;
    pthread_mutex_lock(&c->cmu);
    if (status == 0)
        c->events_done++;
    else
        c->events_failed++;
    pthread_cond_signal(&c->ccv);
    pthread_mutex_unlock(&c->cmu);
}

/* An audit entry's commit (as event_done()). */
static void audit_done(void *arg, int status)
{
    import_ctx *c = arg;
    pthread_mutex_lock(&c->cmu);
    if (status == 0)
        c->audits_done++;
    else
        c->audits_failed++;
    pthread_cond_signal(&c->ccv);
    pthread_mutex_unlock(&c->cmu);
}

/* Waits until every detection and audit entry queued has committed.
 * Returns the number that failed. */
static uint64_t events_wait(import_ctx *c)
{
    nd_store_hurry(c->st);
    pthread_mutex_lock(&c->cmu);
    while (c->events_done + c->events_failed + c->audits_done + c->audits_failed <
           c->events_queued + c->audits_queued)
        pthread_cond_wait(&c->ccv, &c->cmu);
    uint64_t failed = c->events_failed + c->audits_failed;
    pthread_mutex_unlock(&c->cmu);
    return failed;
}

/* Keeps a for run_later(). */
static void later_add(import_ctx *c, asked *a)
{
    asked **grown = room_for_one(c->later, &c->caplater, c->nlater, sizeof(*grown), 64);
    if (!grown)
        nd_die_oom(__func__);
    c->later = grown;
    c->later[c->nlater++] = a;
}

/* Completes what the store finished. wait: block until at least one
 * completion (or a wake) arrived. Returns whether a wake arrived. */
static bool drain(import_ctx *c, nd_import_summary *out, bool wait)
{
    if (wait)
        nd_store_hurry(c->st); /* a gathering store: commit what we wait on */
    pthread_mutex_lock(&c->cmu);
    while (wait && !c->ncomp && !c->woken)
        pthread_cond_wait(&c->ccv, &c->cmu);
    completion *list = c->comp;
    size_t n = c->ncomp, cap = c->capcomp;
    bool woken = c->woken;
    c->woken = false;
    c->wake_seen |= woken;
    /* the spare array takes the store thread's appends meanwhile */
    c->comp = c->comp_spare;
    c->capcomp = c->capspare;
    c->ncomp = 0;
    pthread_mutex_unlock(&c->cmu);
    for (size_t i = 0; i < n; i++) {
        int rc = nd_registry_complete(c->reg, list[i].ch, list[i].status);
        asked *a = list[i].a;
        c->pending--;
        if (rc == 0)
            out->imported++;
        a->redo = rc == -ESTALE && a->stale < c->p->stale_tries && !c->fatal;
        if (rc < 0 && !a->redo && !c->fatal)
            c->fatal = rc;
        if (a->redo || (rc == 0 && a->id_len)) /* acted on by run_later() */
            later_add(c, a);
        else
            free(a);
    }
    c->comp_spare = list; /* only this thread touches the spare */
    c->capspare = cap;
    return woken;
}

/* Reports the held events that no parked line precedes, in order. */
static void flush_held(import_ctx *c)
{
    size_t i = 0;
    for (; i < c->nheld && (!c->npark || c->held[i].seq < c->park[0].pr->seq); i++) {
        c->report(c->report_arg, &c->held[i].ev);
        free(c->held[i].strings);
    }
    if (i) { /* (held is NULL until a first report is held) */
        memmove(c->held, c->held + i, (c->nheld - i) * sizeof(*c->held));
        c->nheld -= i;
    }
}

/* Holds a copy of ev (of the line judged seq-th). Returns false when there
 * is no memory for it. */
static bool hold(import_ctx *c, uint64_t seq, const nd_import_event *ev)
{
    held_event *held = room_for_one(c->held, &c->capheld, c->nheld, sizeof(*held), 64);
    if (!held)
        return false;
    c->held = held;
    size_t mlen = ev->message ? strlen(ev->message) + 1 : 0;
    char *m = malloc(ev->id_len + ev->source_len + mlen + 1);
    if (!m)
        return false;
    held_event h = {.seq = seq, .ev = *ev, .strings = m};
    if (ev->id)
        h.ev.id = memcpy(m, ev->id, ev->id_len);
    if (ev->source)
        h.ev.source = memcpy(m + ev->id_len, ev->source, ev->source_len);
    if (ev->message)
        h.ev.message = memcpy(m + ev->id_len + ev->source_len, ev->message, mlen);
    size_t at = c->nheld++; /* by seq: a parked line's comes after later ones */
    while (at && c->held[at - 1].seq > seq) {
        c->held[at] = c->held[at - 1];
        at--;
    }
    c->held[at] = h;
    return true;
}

/* Reports ev, of the line pr, in judging order: held while a line judged
 * before it is parked. */
static void emit(import_ctx *c, const prep *pr, const nd_import_event *ev)
{
    if (!c->report)
        return;
    if (!c->npark && !c->nheld) {
        c->report(c->report_arg, ev);
        return;
    }
    if (!hold(c, pr->seq, ev))
        nd_die_oom(__func__);
    if (!c->settling) /* else settle_parked() flushes, parked lines in place */
        flush_held(c);
}

static void report_error(import_ctx *c, const prep *pr, nd_import_summary *out, const char *code,
                         const char *message)
{
    out->errors++;
    nd_import_event ev = {.line = pr->ref->no,
                          .id = pr->rq.id,
                          .id_len = pr->rq.id ? pr->rq.id_len : 0,
                          .code = code,
                          .message = message};
    emit(c, pr, &ev);
}

/* The store's queue is full (a store that sheds: the server's): waits for
 * this import's own changes to commit, or a millisecond when it has none
 * queued. Returns false when the import is to stop instead. */
static bool wait_for_room(import_ctx *c, nd_import_summary *out)
{
    if (c->p->stop && atomic_load(c->p->stop))
        return false;
    if (c->pending) {
        drain(c, out, true);
    } else {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    return true;
}

/* Records the detection of a duplicate (p->detection): queued, committed
 * before nd_import_run() returns. */
static void record_detection(import_ctx *c, const prep *pr, const nd_check_res *res,
                             nd_import_summary *out)
{
    nd_store_event ev;
    char *value = c->p->detection ? c->p->detection(&pr->rq, res, &ev) : NULL;
    if (!value)
        return;
    int rc;
    while ((rc = nd_store_event_put(c->st, &ev, event_done, c)) == -EBUSY && wait_for_room(c, out))
        ;
    free(value); /* the store copied it */
    if (rc == 0)
        c->events_queued++;
    else if (!c->fatal)
        c->fatal = rc;
}

/* Asks the registry about pr until it answers. A wait on a pending
 * document is waited out here, except (may_park) the wait of a new
 * document on pending evidence: then ND_REG_WAIT is returned (res empty,
 * res->wait_at_us set) and a wake follows the commit. */
static int ask(import_ctx *c, prep *pr, nd_check_res *res, nd_import_summary *out, bool may_park)
{
    for (;;) {
        asked *a = malloc(sizeof(*a));
        if (!a)
            return -ENOMEM;
        a->c = c;
        a->ref = pr->ref;
        a->stale = pr->stale;
        a->redo = false;
        a->id_len = 0; /* set by conclude() when the registration is to be audited */
        /* The line's own sketches, made at once; no passages in a summary.
         * The third stage tokenizes the line again when it has gray
         * candidates (its tokens are long gone), as a check would judge it. */
        if (!c->pair && nd_pair_scratch_create(&c->pair) < 0) {
            free(a);
            return -ENOMEM;
        }
        nd_question_scratch qs = {.sketch = pr->sketch,
                                  .lazy = NULL,
                                  .passages = NULL,
                                  .sk = c->sk,
                                  .third = c->pair,
                                  .text = pr->text,
                                  .text_len = pr->text_len};
        int rc = nd_registry_check(c->reg, &pr->rq, &pr->q, &qs, res, reg_done, a);
        if (rc == ND_REG_QUEUED)
            pr->queued = a; /* the importing thread's until drain() takes it */
        else if (rc != ND_REG_WAIT)
            free(a);
        if (rc == -EBUSY && wait_for_room(c, out))
            continue;
        if (rc != ND_REG_WAIT)
            return rc;
        if (may_park && res->wait_at_us > 0 && res->wait_at_us < INT64_MAX)
            return rc;
        while (!drain(c, out, true)) /* until the document it waits on commits */
            ;
    }
}

/* Whether a registration of pr (res) is audited: a new document at a
 * given time, in an import that asked to predate. */
static bool audited(const import_ctx *c, const prep *pr, const nd_check_res *res)
{
    return c->p->predate && pr->rq.registered_at_us > 0 && res->doc && !res->existing;
}

/* Fills a with what the audit entry of pr's registration (res) says. */
static void audit_note(asked *a, const prep *pr, const nd_check_res *res)
{
    a->at = res->doc->registered_at_us;
    memcpy(a->id, pr->rq.id, pr->rq.id_len);
    a->id_len = pr->rq.id_len;
}

/* Acts on the registry's answer rc about pr (not ND_REG_WAIT). */
static void conclude(import_ctx *c, prep *pr, nd_check_res *res, int rc, nd_import_summary *out)
{
    if (rc == ND_REG_QUEUED) {
        c->pending++;
        if (audited(c, pr, res))
            audit_note(pr->queued, pr, res);
    } else if (rc == 0 && res->registered) {
        if (res->existing) {
            out->existing++;
        } else {
            out->imported++; /* committed within the call (the memory store) */
            if (audited(c, pr, res)) {
                asked *a = calloc(1, sizeof(*a));
                if (!a)
                    nd_die_oom(__func__);
                a->c = c;
                a->ref = pr->ref;
                audit_note(a, pr, res);
                later_add(c, a);
            }
        }
    } else if (rc == -ESTALE && pr->stale < c->p->stale_tries) {
        asked *a = calloc(1, sizeof(*a)); /* lost a race within the call: again */
        if (!a)
            nd_die_oom(__func__);
        *a = (asked){.c = c, .ref = pr->ref, .stale = pr->stale, .redo = true};
        later_add(c, a);
    } else if (rc == 0) {
        out->duplicates++;
        record_detection(c, pr, res, out);
        const nd_doc *s = res->source ? res->source : nd_match_source(res->matches, res->nmatches);
        nd_import_event ev = {.duplicate = true,
                              .line = pr->ref->no,
                              .id = pr->rq.id,
                              .id_len = pr->rq.id_len,
                              .source = s ? nd_doc_id(s) : NULL,
                              .source_len = s ? s->id_len : 0,
                              .copied_share = res->copied_share};
        emit(c, pr, &ev);
    } else if (rc == -EEXIST) {
        report_error(c, pr, out, "id_conflict", nd_conflict_message(res->conflict));
    } else if (!c->fatal) { /* the store or the registry stopped: not judged */
        c->fatal = rc;
    }
    nd_check_res_release(res);
}

/* Moves a prepared line (its own pointers and what it owns) from src to
 * dst; src keeps nothing to free. */
static void prep_move(prep *dst, prep *src)
{
    *dst = *src;
    nd_check_req *rq = &dst->rq;
    if (src->rq.id == src->id)
        rq->id = dst->id;
    if (src->rq.account == src->account)
        rq->account = dst->account;
    src->rq.meta = NULL;
    src->rq.policy = NULL;
    src->packed = NULL; /* dst->rq.text_packed points at the same bytes */
    src->rq.text_packed = NULL;
    src->text = NULL;
    src->text_len = 0;
}

static void prep_free(prep *pr)
{
    free(pr->rq.meta);
    free(pr->rq.policy);
    free(pr->packed);
    free(pr->text);
    free(pr);
}

/* Sets pr aside (a new document whose verdict waits on a pending one,
 * judged at judge_at): the lines after it go on meanwhile. Its verdict,
 * once the pending document commits, is "not original" (that document is
 * evidence), so it registers nothing a later line could see; and a later
 * line is judged ahead of it only when that cannot change what it sees
 * (must_settle()). Returns false when there is no memory for it. */
static bool park(import_ctx *c, prep *pr, int64_t judge_at)
{
    parked *grown = room_for_one(c->park, &c->cappark, c->npark, sizeof(*grown), 16);
    if (!grown)
        return false;
    c->park = grown;
    prep *copy = malloc(sizeof(*copy));
    if (!copy)
        return false;
    prep_move(copy, pr);
    c->park[c->npark++] = (parked){copy, judge_at};
    if (judge_at > c->park_before)
        c->park_before = judge_at;
    return true;
}

/* Whether pr must wait for the parked lines to be judged first: when it
 * could be registered at or before a time a parked line is judged at
 * (then the parked line would see it, or be judged at another time), or
 * has a parked line's id. */
static bool must_settle(const import_ctx *c, const prep *pr)
{
    if (pr->code)
        return false; /* refused: registers nothing */
    if (pr->ref->at == AT_NONE || pr->ref->at <= c->park_before)
        return true;
    for (size_t i = 0; i < c->npark; i++) {
        const nd_check_req *q = &c->park[i].pr->rq;
        if (q->id_len == pr->rq.id_len && memcmp(q->id, pr->rq.id, q->id_len) == 0)
            return true;
    }
    return false;
}

/* Asks again about the parked lines, in their order, after a wake; those
 * still waiting stay parked. wait: until none is left (or the import
 * failed: the rest are dropped, not judged). */
static void settle_parked(import_ctx *c, nd_check_res *res, nd_import_summary *out, bool wait)
{
    while (c->npark) {
        if (c->fatal) {
            for (size_t i = 0; i < c->npark; i++)
                prep_free(c->park[i].pr);
            c->npark = 0;
            break;
        }
        if (!c->wake_seen) {
            if (!wait)
                break;
            while (!drain(c, out, true))
                ;
        }
        c->wake_seen = false;
        size_t kept = 0;
        c->park_before = 0;
        c->settling = true;
        for (size_t i = 0; i < c->npark; i++) {
            parked p = c->park[i];
            int rc = ask(c, p.pr, res, out, true);
            if (rc == ND_REG_WAIT) { /* another pending document */
                p.judge_at = res->wait_at_us;
                c->park[kept++] = p;
                if (p.judge_at > c->park_before)
                    c->park_before = p.judge_at;
                continue;
            }
            conclude(c, p.pr, res, rc, out);
            prep_free(p.pr);
        }
        c->npark = kept;
        c->settling = false;
        flush_held(c);
        if (!wait)
            break;
    }
}

/* Judges one prepared line, or parks it (park()). */
static void judge(import_ctx *c, prep *pr, nd_check_res *res, nd_import_summary *out)
{
    pr->seq = c->seq++;
    if (pr->code) {
        report_error(c, pr, out, pr->code, pr->message);
        return;
    }
    if (c->npark && c->wake_seen)
        settle_parked(c, res, out, false);
    if (c->npark && must_settle(c, pr))
        settle_parked(c, res, out, true);
    int rc = ask(c, pr, res, out, true);
    if (rc == ND_REG_WAIT) {
        if (park(c, pr, res->wait_at_us))
            return;
        rc = ask(c, pr, res, out, false);
    }
    conclude(c, pr, res, rc, out);
}

/* Queues the audit entry of a's registration (a predated import):
 * {"client","action":"import_predate","document","detail":{"registered_at",
 * "line"}}, committed before nd_import_run() returns. */
static void audit_put(import_ctx *c, const asked *a, nd_import_summary *out)
{
    const char *client = c->p->audit_client;
    size_t client_len = client ? strlen(client) : 0;
    size_t cap = 6 * (client_len + a->id_len) + 256; /* an escape is at most 6 bytes a byte */
    char *value = malloc(cap);
    if (!value)
        nd_die_oom(__func__);
    size_t pos = (size_t)snprintf(value, cap, "{\"client\":");
    if (client)
        nd_json_escape(value, cap, &pos, client, client_len);
    else
        pos += (size_t)snprintf(value + pos, cap - pos, "null");
    pos += (size_t)snprintf(value + pos, cap - pos, ",\"action\":\"import_predate\",\"document\":");
    nd_json_escape(value, cap, &pos, a->id, a->id_len);
    char at[32];
    nd_log_format_time(a->at, at);
    pos += (size_t)snprintf(value + pos, cap - pos,
                            ",\"detail\":{\"registered_at\":\"%s\",\"line\":%u}}", at, a->ref->no);
    nd_store_event ev = {.kind = ND_EVENT_AUDIT,
                         .owner_at = 0,
                         .at_us = nd_log_now_us(),
                         .value = value,
                         .value_len = pos};
    int rc;
    while ((rc = nd_store_event_put(c->st, &ev, audit_done, c)) == -EBUSY && wait_for_room(c, out))
        ;
    free(value); /* the store copied it */
    if (rc == 0)
        c->audits_queued++;
    else if (!c->fatal)
        c->fatal = rc;
}

/* Acts on the completions drain() kept: audits the registrations of a
 * predated import, and judges again (on the newer state) the lines whose
 * registration lost a race to another replica. */
static void run_later(import_ctx *c, nd_check_res *res, nd_import_summary *out)
{
    while (c->nlater) {
        asked **list = c->later;
        size_t n = c->nlater;
        c->later = NULL; /* what judging adds goes to a new list */
        c->nlater = c->caplater = 0;
        for (size_t i = 0; i < n; i++) {
            asked *a = list[i];
            if (!a->redo) {
                audit_put(c, a, out);
            } else if (!c->fatal) {
                if (!c->redo_tools) {
                    c->redo_tools = malloc(sizeof(*c->redo_tools));
                    if (!c->redo_tools || tools_init(c->redo_tools, c->sk) < 0)
                        nd_die_oom(__func__);
                }
                prep *pr = calloc(1, sizeof(*pr));
                if (!pr)
                    nd_die_oom(__func__);
                prepare_line(c, c->redo_tools, pr, a->ref);
                pr->stale = a->stale + 1;
                judge(c, pr, res, out);
                prep_free(pr); /* a parked line was moved out of it */
            }
            free(a);
        }
        free(list);
    }
}

static void progress_draw(import_ctx *c, FILE *f, size_t done, int64_t t0, bool last)
{
    double s = (double)(nd_clock_ms() - t0) / 1000.0;
    double rate = s > 0 ? (double)done / s : 0;
    size_t total = c->nrefs;
    double frac = total ? (double)done / (double)total : 1.0;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[30] = 0;
    double eta = rate > 0 ? (double)(total - done) / rate : 0;
    fprintf(f, "\r[%s] %5.1f%% %zu/%zu lines %.0f/s ETA %d:%02d ", bar, frac * 100, done, total,
            rate, (int)eta / 60, (int)eta % 60);
    if (last)
        fputc('\n', f);
    fflush(f);
}

int nd_import_run(nd_registry *reg, nd_store *st, const char *buf, size_t len,
                  const nd_import_params *p, nd_import_report_fn report, void *arg,
                  nd_import_summary *out)
{
    memset(out, 0, sizeof(*out));
    int64_t t0 = nd_clock_ms();
    import_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->reg = reg;
    c->st = st;
    c->p = p;
    c->buf = buf;
    c->report = report;
    c->report_arg = arg;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv_ready, NULL);
    pthread_cond_init(&c->cv_free, NULL);
    pthread_mutex_init(&c->cmu, NULL);
    pthread_cond_init(&c->ccv, NULL);
    unsigned nth = p->threads > MAX_THREADS ? MAX_THREADS : p->threads;
    nd_registry_stats rs;
    nd_registry_stats_get(reg, &rs);
    c->archive = p->predate || rs.documents == 0;
    line_ref *refs = NULL;
    int rc = nd_import_scan_lines(buf, len, nth, nd_log_now_us() + ND_REGISTRY_AHEAD_US, &refs,
                                  &c->nrefs);
    c->refs = refs;
    c->nbatches = (c->nrefs + BATCH - 1) / BATCH;
    out->lines = c->nrefs;
    nd_check_res res = {0};
    size_t cap = 1024 + ND_ANCHOR_HITS_MAX / ND_VERDICT_MIN_SHARED + ND_VERIFY_MAX;
    res.hits = calloc(cap, sizeof(*res.hits));
    res.matches = calloc(cap, sizeof(*res.matches));
    res.keys = calloc(cap, sizeof(*res.keys));
    res.cap = cap;
    res.ahits = calloc(ND_ANCHOR_HITS_MAX, sizeof(*res.ahits));
    res.acap = ND_ANCHOR_HITS_MAX;
    /* 4 batches per preparing thread and RING_AHEAD more (~290 KB each):
     * enough lines ahead to keep preparing while the importing thread waits
     * on a commit. Two threads, a 3M-line import, paired: 47-48 s with 66
     * batches against 50 s with 34 and 52 s with 10; 130 no better. */
    c->nring = nth ? 4 * (size_t)nth + RING_AHEAD : 1;
    c->ring = calloc(c->nring, sizeof(*c->ring));
    if (rc == 0 && (!res.hits || !res.matches || !res.keys || !res.ahits || !c->ring))
        rc = -ENOMEM;
    /* Room for every line (a hint: without it the tables grow as needed). */
    if (rc == 0 && c->nrefs)
        (void)nd_registry_reserve(reg, c->nrefs);
    if (rc == 0 && !(c->fp = p->fp)) {
        rc = nd_fingerprinter_create(&c->own_fp);
        c->fp = c->own_fp;
    }
    if (rc == 0 && !(c->sk = p->sk)) {
        rc = nd_sketcher_create(&c->own_sk);
        c->sk = c->own_sk;
    }
    pthread_t th[MAX_THREADS];
    unsigned started = 0;
    tools own;
    bool own_ok = false;
    if (rc == 0) {
        for (size_t i = 0; i < c->nring; i++)
            c->ring[i].held = -1;
        for (; started < nth; started++)
            if (pthread_create(&th[started], NULL, prep_main, c) != 0)
                break;
        if (started == 0) {
            rc = tools_init(&own, c->sk);
            own_ok = true;
        }
    }
    int64_t last_draw = nd_clock_ms();
    size_t done = 0;
    for (size_t bi = 0; rc == 0 && bi < c->nbatches; bi++) {
        batch *b = &c->ring[bi % c->nring];
        if (started == 0) {
            prepare_batch(c, &own, b, bi);
        } else {
            pthread_mutex_lock(&c->mu);
            while (!(b->held == (int64_t)bi && b->ready) && !c->abort)
                pthread_cond_wait(&c->cv_ready, &c->mu);
            bool aborted = c->abort;
            pthread_mutex_unlock(&c->mu);
            if (aborted)
                break;
        }
        for (size_t i = 0; i < b->n && !c->fatal; i++) {
            judge(c, &b->lines[i], &res, out);
            done++;
        }
        if (c->pending)
            drain(c, out, false);
        run_later(c, &res, out);
        if (started) {
            pthread_mutex_lock(&c->mu);
            b->held = -1;
            c->consumed = bi + 1;
            pthread_cond_broadcast(&c->cv_free);
            pthread_mutex_unlock(&c->mu);
        }
        if (c->fatal)
            break;
        if (p->stop && atomic_load(p->stop)) {
            c->fatal = -ECANCELED;
            break;
        }
        if (p->progress && nd_clock_ms() - last_draw >= PROGRESS_MS) {
            last_draw = nd_clock_ms();
            progress_draw(c, p->progress, done, t0, false);
        }
    }
    /* stop the threads, then finish every change queued */
    pthread_mutex_lock(&c->mu);
    c->abort = true;
    pthread_cond_broadcast(&c->cv_free);
    pthread_cond_broadcast(&c->cv_ready);
    pthread_mutex_unlock(&c->mu);
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    for (;;) {
        settle_parked(c, &res, out, true);
        flush_held(c); /* none parked now */
        while (c->pending)
            drain(c, out, true);
        if (!c->nlater)
            break;
        run_later(c, &res, out); /* may queue or park lines again */
    }
    if (events_wait(c) && !c->fatal)
        c->fatal = -EIO;
    out->detections = c->events_done;
    if (rc == 0)
        rc = c->fatal;
    if (p->progress && c->nrefs)
        progress_draw(c, p->progress, done, t0, true);
    if (own_ok)
        tools_finish(&own);
    if (c->redo_tools) {
        tools_finish(c->redo_tools);
        free(c->redo_tools);
    }
    for (size_t i = 0; c->ring && i < c->nring; i++)
        for (size_t j = 0; j < BATCH; j++) {
            free(c->ring[i].lines[j].rq.meta);
            free(c->ring[i].lines[j].rq.policy);
            free(c->ring[i].lines[j].packed);
            free(c->ring[i].lines[j].text);
        }
    nd_fingerprinter_destroy(c->own_fp);
    nd_sketcher_destroy(c->own_sk);
    nd_pair_scratch_destroy(c->pair);
    free(c->ring);
    free(c->later);
    free(c->park);
    free(c->held);
    free(c->comp);
    free(c->comp_spare);
    free(res.hits);
    free(res.matches);
    free(res.keys);
    free(res.ahits);
    free(refs);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv_ready);
    pthread_cond_destroy(&c->cv_free);
    pthread_mutex_destroy(&c->cmu);
    pthread_cond_destroy(&c->ccv);
    free(c);
    out->seconds = (double)(nd_clock_ms() - t0) / 1000.0;
    return rc;
}
