/* registry.c - the registry's change state machine: a registration, an
 * upgrade, a deletion or a claim change queued to the store, completed
 * when it commits (waiters woken) and applied from the replication stream.
 * Documents and tables are docs.c's, the answer to a question verdict.c's;
 * locking is described in registry.h; loading at start is in loader.c. */
#include "registry.h"
#include "registry_internal.h"
#include "memo.h"
#include "verdict_internal.h"
#include "align.h"
#include "clock.h"
#include "fingerprint.h"
#include "utf8.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <xxhash.h>

/* A request waiting for the change of doc in flight (reg->waiters). */
typedef struct nd_waiter {
    struct nd_waiter *next;
    const nd_doc *doc;
    nd_registry_done_fn fn;
    void *arg;
} nd_waiter;

enum change_kind {
    CHANGE_PUT,     /* a registration */
    CHANGE_DELETE,  /* a deletion */
    CHANGE_UPGRADE, /* a document of another fingerprint version re-registered
                     * with the same text: doc replaces old, same time */
    CHANGE_AMEND,   /* a policy or status change: doc replaces old in place
                     * (same slot) once committed */
};

struct nd_reg_change {
    nd_registry *reg;
    uint32_t nanchors;                /* CHANGE_DELETE: the stored anchors of */
    uint32_t anchors[ND_ANCHORS_MAX]; /* doc, to unindex it once deleted */
    nd_doc *doc;                      /* a reference */
    nd_doc *old;                      /* CHANGE_UPGRADE, CHANGE_AMEND: the document
                                       * doc replaces (a reference) */
    enum change_kind kind;
    size_t inflight; /* CHANGE_PUT queued: its index in reg->inflight
                      * (SIZE_MAX: not there) */
    nd_registry_done_fn fn;
    void *arg;
    _Atomic int phase; /* enum change_phase: did the store commit within its call? */
    int status;        /* the store's status, when it did */
    /* CHANGE_AMEND, a restore: the live documents it supersedes
     * (references; DOC_AMENDING while it is in flight) and their
     * superseded copies (each holds the reference it is linked with). */
    nd_doc **sup_old, **sup_new;
    size_t nsup;
};

/* A store that commits a change within the call that queues it (the
 * memory store: nd_store_commits_in_call()) has it finished in place by the
 * caller, which answers at once. Any other store's done always hands the
 * change over (LMDB's commit thread may call it before the call returns). */
enum change_phase {
    PHASE_IN_CALL = 0,  /* the store call has not returned */
    PHASE_RETURNED = 1, /* it returned first: done hands the change over */
    PHASE_DONE = 2,     /* done ran within the call: its caller finishes it */
};

void nd_reg_clock_raise(nd_registry *reg, int64_t at)
{
    if (at > reg->beyond_us)
        reg->beyond_us = at;
    if (at <= reg->last_us)
        return;
    int64_t cap = nd_clock_wall_us() + ND_REGISTRY_AHEAD_US;
    reg->last_us = at < cap ? at : cap;
}

static int first_free(nd_registry *reg, int64_t at, int64_t *out);

static int64_t clock_next(nd_registry *reg)
{
    int64_t now = nd_clock_wall_us();
    if (now <= reg->last_us)
        now = reg->last_us + 1; /* the clock went back, or two in one µs */
    int64_t free_at;
    if (now <= reg->beyond_us && first_free(reg, now, &free_at) == 0)
        now = free_at; /* a time stored ahead of the clock is not handed out again */
    reg->last_us = now;
    return now;
}

/* Registrations queued and not completed: their changes (reg->inflight,
 * with reg->inflight_at their times), so that a given time never takes
 * the time of one (the store does not see it yet). Writer held. */
static int inflight_add(nd_registry *reg, nd_reg_change *ch)
{
    if (reg->ninflight == reg->inflight_cap) {
        size_t cap = reg->inflight_cap ? reg->inflight_cap * 2 : 64;
        int64_t *at = realloc(reg->inflight_at, cap * sizeof(*at));
        if (at)
            reg->inflight_at = at;
        nd_reg_change **c = realloc(reg->inflight, cap * sizeof(*c));
        if (c)
            reg->inflight = c;
        if (!at || !c)
            return -ENOMEM;
        reg->inflight_cap = cap;
    }
    ch->inflight = reg->ninflight;
    reg->inflight[reg->ninflight] = ch;
    reg->inflight_at[reg->ninflight++] = ch->doc->registered_at_us;
    return 0;
}

static void inflight_remove(nd_registry *reg, nd_reg_change *ch)
{
    size_t i = ch->inflight;
    if (i == SIZE_MAX)
        return;
    size_t last = --reg->ninflight;
    reg->inflight[i] = reg->inflight[last];
    reg->inflight_at[i] = reg->inflight_at[last];
    reg->inflight[i]->inflight = i;
    ch->inflight = SIZE_MAX;
}

static int visit_none(void *arg, const nd_record *rec)
{
    (void)arg, (void)rec;
    return 0;
}

/* The first time from at on that no stored record nor registration in
 * flight holds. Writer held. Returns 0 and *out, or the store's -errno. */
static int first_free(nd_registry *reg, int64_t at, int64_t *out)
{
    int64_t taken_max = reg->last_us > reg->beyond_us ? reg->last_us : reg->beyond_us;
    for (; at <= taken_max; at++) { /* later than every time handed out: free */
        bool taken = false;
        for (size_t i = 0; i < reg->ninflight && !taken; i++)
            taken = reg->inflight_at[i] == at;
        if (taken)
            continue;
        int rc = nd_store_get(reg->store, at, visit_none, NULL);
        if (rc == -ENOENT)
            break;
        if (rc < 0)
            return rc;
    }
    *out = at;
    return 0;
}

/* The time for a registration given at (an import): at, raised by 1 us
 * while a stored record or a registration in flight holds it. Lines of an
 * archive often share one time: the walk for at starts after the time
 * last handed out for it (given_memo), so that each costs one step, not
 * one per line before it (the times it skips were taken when handed out;
 * one freed since is simply not reused). Writer held. Returns 0 and *out,
 * or the store's -errno. */
static int given_time(nd_registry *reg, int64_t at, int64_t *out)
{
    size_t slot = (size_t)(((uint64_t)at * 0x9E3779B97F4A7C15ull) >> 58);
    int64_t from = at;
    if (reg->given_memo[slot].at == at && reg->given_memo[slot].next > at)
        from = reg->given_memo[slot].next;
    int rc = first_free(reg, from, out);
    if (rc == 0 && *out < INT64_MAX) {
        reg->given_memo[slot].at = at;
        reg->given_memo[slot].next = *out + 1;
    }
    return rc;
}

/* ---- life cycle ---- */

void nd_registry_options_from_config(nd_registry_options *o, const nd_config *cfg)
{
    *o = (nd_registry_options){
        .max_matches = cfg->max_matches,
        .default_reprint = cfg->default_reprint == ND_CONFIG_REPRINT_FORBID ? ND_REPRINT_FORBID
                                                                            : ND_REPRINT_ALLOW,
        .max_verify = cfg->max_verify,
        .keep_text = cfg->keep_text,
    };
    nd_verdict_params_default(&o->params);
    o->params.min_resemblance = cfg->min_resemblance;
    o->params.min_containment = cfg->min_containment;
    o->share = (nd_share_params){.min_source_share = cfg->min_source_share,
                                 .min_quote_share = cfg->min_quote_share,
                                 .min_copied_share = cfg->min_copied_share};
    o->rewrite = cfg->rewrite_verdict == ND_CONFIG_REWRITE_REVIEW   ? ND_REWRITE_REVIEW
                 : cfg->rewrite_verdict == ND_CONFIG_REWRITE_IGNORE ? ND_REWRITE_IGNORE
                                                                    : ND_REWRITE_DUPLICATE;
    o->rewrite_params.min_coverage = ND_ALIGN_MIN_COVERAGE;
    o->rewrite_params.min_spread = ND_ALIGN_MIN_SPREAD;
    o->rewrite_params.max_long_gaps_a = ND_ALIGN_MAX_LONG_GAPS_A;
    o->rewrite_params.max_long_gaps_b = ND_ALIGN_MAX_LONG_GAPS_B;
    o->rewrite_params.min_coverage_xscript = ND_ALIGN_MIN_COVERAGE_XSCRIPT;
}

int nd_registry_create(nd_registry **out, nd_store *store, const nd_registry_options *opts)
{
    if (!store)
        return -EINVAL;
    nd_registry *reg = calloc(1, sizeof(*reg));
    if (!reg)
        return -ENOMEM;
    reg->store = store;
    reg->opts = *opts;
    if (reg->opts.max_matches == 0)
        reg->opts.max_matches = 100;
    reg->nbuckets = 1024;
    reg->buckets = calloc(reg->nbuckets, sizeof(*reg->buckets));
    int rc = reg->buckets ? nd_index_create(&reg->index) : -ENOMEM;
    if (rc == 0 && (rc = nd_anchor_index_create(&reg->anchors, ND_VERDICT_POSTING_CAP)) < 0)
        nd_index_destroy(reg->index);
    if (rc < 0) {
        free(reg->buckets);
        free(reg);
        return rc;
    }
    pthread_mutex_init(&reg->writer, NULL);
    pthread_rwlock_init(&reg->table, NULL);
    pthread_mutex_init(&reg->digest_mu, NULL);
    *out = reg;
    return 0;
}

void nd_registry_destroy(nd_registry *reg)
{
    if (!reg)
        return;
    /* Every linked document holds its slot: the slot table, read in order
     * (the arena's order too), releases them all. */
    for (uint32_t s = 0; s < reg->next_slot; s++)
        nd_doc_release(reg->slots[s]);
    while (reg->waiters) { /* none once every change has completed */
        nd_waiter *next = reg->waiters->next;
        free(reg->waiters);
        reg->waiters = next;
    }
    nd_index_destroy(reg->index);
    nd_anchor_index_destroy(reg->anchors);
    free(reg->buckets);
    free(reg->slots);
    free(reg->free_slots);
    while (reg->arena) {
        arena_block *next = reg->arena->next;
        munmap(reg->arena, reg->arena->size);
        reg->arena = next;
    }
    for (size_t i = 0; i < reg->nversions; i++)
        free((char *)reg->versions[i].version);
    free(reg->inflight);
    free(reg->inflight_at);
    pthread_rwlock_destroy(&reg->table);
    pthread_mutex_destroy(&reg->writer);
    pthread_mutex_destroy(&reg->digest_mu);
    free(reg);
}

void nd_registry_set_loaded(nd_registry *reg)
{
    atomic_store(&reg->loaded, true);
}

void nd_registry_shutdown(nd_registry *reg)
{
    atomic_store(&reg->shutdown, true);
}

static void store_done(void *arg, int status)
{
    nd_reg_change *ch = arg;
    int phase = PHASE_IN_CALL;
    ch->status = status;
    if (atomic_compare_exchange_strong(&ch->phase, &phase, PHASE_DONE))
        return; /* committed within the store call: finish_in_call() */
    ch->fn(ch->arg, ch, status);
}

/* Before the store call that queues ch: whether done may finish it in
 * place. */
static void phase_begin(nd_registry *reg, nd_reg_change *ch)
{
    atomic_init(&ch->phase, nd_store_commits_in_call(reg->store) ? PHASE_IN_CALL : PHASE_RETURNED);
}

/* After a store call that queued ch returned: true when the change was
 * committed (or refused) within it, so that the caller finishes it now.
 * For any other store ch is not touched: its done may already have handed
 * it over. */
static bool done_in_call(nd_registry *reg, nd_reg_change *ch)
{
    return nd_store_commits_in_call(reg->store) &&
           atomic_exchange(&ch->phase, PHASE_RETURNED) == PHASE_DONE;
}

static int complete_locked(nd_registry *reg, nd_reg_change *ch, int status, nd_waiter **woken);
static void change_free(nd_reg_change *ch);
static void wake(nd_waiter *w);

/* Finishes a change the store completed within its call, writer held (as
 * nd_registry_complete() would, without the queue's round trip). Returns
 * 0 when it took effect, else the store's status (the change is undone). */
static int finish_in_call(nd_registry *reg, nd_reg_change *ch)
{
    nd_waiter *w = NULL;
    int rc = complete_locked(reg, ch, ch->status, &w);
    wake(w); /* none can wait on a change that never left the writer; and
              * waking only hands the waiters over to their threads */
    change_free(ch);
    return rc;
}

/* Makes fn(arg) wait for the change of d in flight. Writer held. Returns
 * ND_REG_WAIT or -ENOMEM. */
static int add_waiter(nd_registry *reg, nd_doc *d, nd_registry_done_fn fn, void *arg)
{
    nd_waiter *w = malloc(sizeof(*w));
    if (!w)
        return -ENOMEM;
    *w = (nd_waiter){.next = reg->waiters, .doc = d, .fn = fn, .arg = arg};
    reg->waiters = w;
    d->waited = true;
    return ND_REG_WAIT;
}

static void wake(nd_waiter *w)
{
    while (w) {
        nd_waiter *next = w->next;
        w->fn(w->arg, NULL, 0);
        free(w);
        w = next;
    }
}

static nd_reg_change *change_new(nd_registry *reg, nd_doc *d, enum change_kind kind,
                                 nd_registry_done_fn fn, void *arg)
{
    nd_reg_change *ch = malloc(sizeof(*ch));
    if (!ch)
        return NULL;
    *ch = (nd_reg_change){
        .reg = reg, .doc = doc_ref(d), .kind = kind, .fn = fn, .arg = arg, .inflight = SIZE_MAX};
    return ch;
}

/* The registering client of a stored record (nd_record.client): the
 * documents in memory do not keep it, so a write that rewrites a record
 * (an upgrade, an amendment) reads it back first. */
typedef struct stored_client {
    char name[ND_CLIENT_MAX];
    size_t len; /* 0: none */
} stored_client;

/* Copies rec's client into *sc. Returns 0. */
static int copy_client(stored_client *sc, const nd_record *rec)
{
    sc->len = rec->client && rec->client_len <= ND_CLIENT_MAX ? rec->client_len : 0;
    if (sc->len)
        memcpy(sc->name, rec->client, sc->len);
    return 0;
}

/* nd_store_get() visitor of copy_client(). */
static int get_client(void *arg, const nd_record *rec)
{
    return copy_client(arg, rec);
}

/* The store record of d; abuf (4 * ND_ANCHORS_MAX bytes) receives its
 * anchors in the store's byte order. */
static void record_of(const nd_registry *reg, const nd_doc *d, nd_record *rec, uint8_t *abuf)
{
    *rec = (nd_record){.id = nd_doc_id(d),
                       .id_len = d->id_len,
                       .simhash = d->simhash,
                       .version = nd_registry_doc_version(reg, d),
                       .registered_at_us = d->registered_at_us,
                       .chars = d->chars,
                       .meta = nd_doc_meta(d),
                       .meta_len = d->meta_len,
                       .account = nd_doc_account(d),
                       .account_len = d->account_len,
                       .policy = nd_doc_policy(d),
                       .policy_len = d->policy_len,
                       .status = d->status,
                       .superseded_by_us = nd_doc_superseded_by(d)};
    memcpy(rec->text_hash, d->text_hash, 16);
    const nd_doc_extra *x = doc_extra(d);
    if (x) {
        for (unsigned i = 0; i < x->nanchors; i++) {
            uint32_t a = x->anchors[i];
            abuf[4 * i] = (uint8_t)a;
            abuf[4 * i + 1] = (uint8_t)(a >> 8);
            abuf[4 * i + 2] = (uint8_t)(a >> 16);
            abuf[4 * i + 3] = (uint8_t)(a >> 24);
        }
        rec->anchors = x->nanchors ? abuf : NULL;
        rec->nanchors = x->nanchors;
        rec->sketch = nd_doc_extra_sketch(x);
        rec->sketch_len = x->sketch_len;
    }
}

/* Makes the document of rq and its question q (meta_len bytes of meta, the claim of like
 * (the request's own when NULL: its account and policy, active),
 * registered at at), pending when there is a store, and links it. Writer
 * held. Returns 0 and the document in *out (the registry's reference), or
 * -errno. */
static int link_request_doc(nd_registry *reg, const nd_check_req *rq, const nd_question *q,
                            const char *meta, size_t meta_len, const nd_doc *like, int64_t at,
                            nd_doc **out)
{
    nd_doc *d = like ? nd_reg_doc_new(rq->id, rq->id_len, meta, meta ? meta_len : 0,
                                      nd_doc_account(like), like->account_len, nd_doc_policy(like),
                                      like->policy_len, like->status)
                     : nd_reg_doc_new(rq->id, rq->id_len, meta, meta ? meta_len : 0, rq->account,
                                      rq->account_len, rq->policy, rq->policy_len, ND_CLAIM_ACTIVE);
    if (!d)
        return -ENOMEM;
    if (like)
        doc_set_superseded_by(d, nd_doc_superseded_by(like));
    d->simhash = q->simhash;
    d->chars = q->chars;
    memcpy(d->text_hash, q->text_hash, 16);
    d->registered_at_us = at;
    if (q->sketch_enc_len && q->sketch_enc_len <= ND_STORE_SKETCH_MAX) {
        unsigned na = q->nstore < ND_ANCHORS_MAX ? q->nstore : ND_ANCHORS_MAX;
        nd_doc_extra *x = doc_extra_new(q->store, na, q->sketch_enc, q->sketch_enc_len);
        doc_set_extra(d, x);
        if (!x) {
            nd_doc_release(d);
            return -ENOMEM;
        }
        const uint8_t *e = q->sketch_enc; /* nd_sketch_encode()'s header */
        if (q->sketch_enc_len >= 8)
            atomic_init(&d->sk_size,
                        sk_size_pack(e[1] >> 7, e[1] & 0x7F, (unsigned)e[2] | (unsigned)e[3] << 8));
    }
    d->state = DOC_PENDING; /* until the store commits it (maybe within its call) */
    int rc = nd_reg_link_doc(reg, d);
    if (rc < 0) {
        nd_doc_release(d);
        return rc;
    }
    *out = d;
    return 0;
}

/* Queues the store write of pending document d: a put, or with old the
 * replacement of old's record (an upgrade), with the registering client
 * client[0..client_len) (NULL: none; only the store keeps it) and the
 * text of text (its text or text_packed fields; NULL: none) when the
 * registry keeps texts (options.keep_text). Writer
 * held. Returns ND_REG_QUEUED; 0 when the store committed it within the call (d is live,
 * *finished set); -errno with *finished set when the store refused it
 * within the call (d is undone); or -errno with nothing queued (the caller
 * undoes d). */
static int queue_write(nd_registry *reg, nd_doc *d, nd_doc *old, uint64_t seq, const char *client,
                       size_t client_len, const nd_record *text, const nd_store_event *audit,
                       nd_registry_done_fn fn, void *arg, bool *finished)
{
    *finished = false;
    nd_reg_change *ch = change_new(reg, d, old ? CHANGE_UPGRADE : CHANGE_PUT, fn, arg);
    if (!ch)
        return -ENOMEM;
    ch->old = old ? doc_ref(old) : NULL;
    nd_record rec;
    uint8_t abuf[4 * ND_ANCHORS_MAX];
    record_of(reg, d, &rec, abuf);
    rec.stream_seq = seq;
    rec.client = client_len ? client : NULL;
    rec.client_len = client_len;
    if (text && reg->opts.keep_text) {
        rec.text = text->text;
        rec.text_len = text->text ? text->text_len : 0;
        rec.text_packed = text->text_packed;
        rec.text_packed_len = text->text_packed ? text->text_packed_len : 0;
    }
    /* Its time is taken from now on (until complete): a given time must
     * not take it. The commit thread's done cannot complete it before the
     * writer is released. */
    if (!old && !nd_store_commits_in_call(reg->store) && inflight_add(reg, ch) < 0) {
        change_free(ch);
        return -ENOMEM;
    }
    phase_begin(reg, ch);
    int rc = old ? nd_store_replace(reg->store, &rec, store_done, ch)
                 : nd_store_put_audited(reg->store, &rec, audit, store_done, ch);
    if (rc < 0) {
        inflight_remove(reg, ch);
        change_free(ch);
        return rc;
    }
    if (done_in_call(reg, ch)) {
        *finished = true;
        return finish_in_call(reg, ch);
    }
    atomic_fetch_add_explicit(&reg->npending, 1, memory_order_relaxed);
    return ND_REG_QUEUED;
}

/* Registers a new original document, at the time given (given_time()) or,
 * when at is 0, the clock's. Writer held. */
static int do_register(nd_registry *reg, const nd_check_req *rq, const nd_question *q, int64_t at,
                       nd_check_res *res, nd_registry_done_fn fn, void *arg)
{
    nd_doc *d;
    nd_reg_clock_raise(reg, at); /* later clock times come after it */
    int rc = link_request_doc(reg, rq, q, rq->meta, rq->meta_len, NULL, at ? at : clock_next(reg),
                              &d);
    if (rc < 0)
        return rc;
    res->registered = true;
    res->doc = doc_ref(d);
    bool finished;
    nd_store_event ev;
    char *audit = rq->audit ? rq->audit(rq->audit_arg, d, &ev) : NULL;
    nd_record text = {.text = rq->text,
                      .text_len = rq->text_len,
                      .text_packed = rq->text_packed,
                      .text_packed_len = rq->text_packed_len};
    rc = queue_write(reg, d, NULL, 0, rq->client, rq->client_len, &text, audit ? &ev : NULL, fn,
                     arg, &finished);
    free(audit); /* the store copied it */
    if (rc < 0) {
        nd_doc_release(res->doc);
        res->doc = NULL;
        res->registered = false;
        if (!finished)
            unlink_doc(reg, d);
    }
    return rc;
}

/* True when the metas a[0..alen) and b[0..blen) (compact JSON objects, or
 * NULL: none, the same as {}) hold the same members: the same bytes, or
 * read as equal (a meta stored before its reals were written short, keys
 * in another order). */
static bool same_meta(const char *a, size_t alen, const char *b, size_t blen)
{
    if (!a || !alen)
        a = "{}", alen = 2;
    if (!b || !blen)
        b = "{}", blen = 2;
    if (alen == blen && memcmp(a, b, alen) == 0)
        return true;
    json_t *ja = json_loadb(a, alen, JSON_ALLOW_NUL, NULL);
    json_t *jb = json_loadb(b, blen, JSON_ALLOW_NUL, NULL);
    bool same = ja && jb && json_equal(ja, jb);
    json_decref(ja);
    json_decref(jb);
    return same;
}

/* What a registration rq of d's id, with d's text, differs from d in
 * (enum nd_conflict): its account (none is an account of its own), else
 * (with_meta) the meta it brings (none brings nothing). Nothing a
 * registration brings is silently dropped: it is the document's already,
 * or the registration is refused. */
static int registration_conflict(const nd_doc *d, const nd_check_req *rq, bool with_meta)
{
    size_t alen = rq->account ? rq->account_len : 0;
    if (alen != d->account_len || (alen && memcmp(nd_doc_account(d), rq->account, alen) != 0))
        return ND_CONFLICT_ACCOUNT;
    if (with_meta && rq->meta && !same_meta(nd_doc_meta(d), d->meta_len, rq->meta, rq->meta_len))
        return ND_CONFLICT_META;
    return ND_CONFLICT_NONE;
}

/* The id is registered already. Writer held (locked: a registration, which
 * waits for a pending document its verdict would depend on) or a reference
 * held (a query). -EEXIST with res->conflict for another text, or for a
 * registration (rq->do_register) with another account or meta. */
static int answer_existing(nd_registry *reg, nd_doc *d, const nd_check_req *rq,
                           const nd_question *q, const nd_question_scratch *qs, nd_check_res *res,
                           bool locked, nd_registry_done_fn fn, void *arg)
{
    if (memcmp(d->text_hash, q->text_hash, 16) != 0) {
        res->conflict = ND_CONFLICT_TEXT;
        return -EEXIST;
    }
    if (rq->do_register && (res->conflict = registration_conflict(d, rq, true)))
        return -EEXIST;
    nd_doc *wait_on = NULL;
    int rc = nd_verdict_find(reg, rq, q, qs, d, d->registered_at_us, res, locked,
                             locked ? &wait_on : NULL);
    if (rc == 0 && wait_on) {
        nd_check_res_release(res);
        nd_verdict_clear(res);
        return add_waiter(reg, wait_on, fn, arg);
    }
    if (rc < 0) {
        nd_check_res_release(res);
        return rc;
    }
    res->doc = doc_ref(d);
    res->existing = true;
    res->registered = true;
    return 0;
}

/* The id holds a document of another fingerprint version (old, live) with
 * the same text: registers the text's current fingerprint in its place,
 * keeping its registration time (the claim), its account (another one is
 * -EEXIST, ND_CONFLICT_ACCOUNT) and its meta unless the request brings one.
 * The new document is linked at once, ahead of old
 * (which stays what readers get until the commit, and is unlinked then);
 * the answer is as for an existing document. Writer held. */
static int do_upgrade(nd_registry *reg, nd_doc *old, const nd_check_req *rq, const nd_question *q,
                      const nd_question_scratch *qs, nd_check_res *res, nd_registry_done_fn fn,
                      void *arg)
{
    if ((res->conflict = registration_conflict(old, rq, false)))
        return -EEXIST;
    const char *meta = rq->meta ? rq->meta : nd_doc_meta(old);
    size_t meta_len = rq->meta ? rq->meta_len : old->meta_len;
    nd_doc *d;
    int rc = link_request_doc(reg, rq, q, meta, meta_len, old, old->registered_at_us, &d);
    if (rc < 0)
        return rc;
    nd_doc *wait_on = NULL;
    if ((rc = nd_verdict_find(reg, rq, q, qs, d, d->registered_at_us, res, true, &wait_on)) < 0 ||
        wait_on) {
        unlink_doc(reg, d);
        if (rc == 0) { /* its verdict depends on a pending document */
            nd_check_res_release(res);
            nd_verdict_clear(res);
            rc = add_waiter(reg, wait_on, fn, arg);
        }
        return rc;
    }
    res->doc = doc_ref(d);
    res->existing = true;
    res->registered = true;
    bool finished;
    /* The document keeps the client that registered it. */
    stored_client sc = {.len = 0};
    if (nd_store_get(reg->store, old->registered_at_us, get_client, &sc) < 0)
        sc.len = 0;
    nd_record text = {.text = rq->text,
                      .text_len = rq->text_len,
                      .text_packed = rq->text_packed,
                      .text_packed_len = rq->text_packed_len};
    rc = queue_write(reg, d, old, 0, sc.name, sc.len, &text, NULL, fn, arg, &finished);
    if (rc < 0) {
        nd_check_res_release(res);
        nd_verdict_clear(res);
        if (!finished)
            unlink_doc(reg, d);
    }
    return rc;
}

/* A registration's first pass (res->memo): the verdict found without the
 * writer, for the figures of every candidate it verified (memo.h), which
 * the pass under the writer then reuses: that one reads and compares only
 * the documents registered, changed or pending meanwhile, so that
 * registrations verify in parallel and hold the writer briefly. A given
 * time's evidence bound is taken under the writer: no first pass then. */
static void first_pass(nd_registry *reg, const nd_check_req *rq, const nd_question *q,
                       const nd_question_scratch *qs, nd_check_res *res)
{
    nd_memo *memo = res->memo;
    if (!memo || !qs || !qs->sketch || rq->registered_at_us > 0)
        return;
    memo->mode = ND_MEMO_RECORD;
    int rc = nd_verdict_find(reg, rq, q, qs, NULL, INT64_MAX, res, false, NULL);
    if (rc == 0)
        nd_check_res_release(res);
    nd_verdict_clear(res);
    if (rc == 0)
        nd_memo_seal(memo);
    else
        nd_memo_clear(memo); /* verified under the writer, as without one */
}

static int check_register_locked(nd_registry *reg, const nd_check_req *rq, const nd_question *q,
                                 const nd_question_scratch *qs, nd_check_res *res,
                                 nd_registry_done_fn fn, void *arg)
{
    pthread_mutex_lock(&reg->writer);
    int rc;
    nd_doc *d = map_find(reg, rq->id, rq->id_len);
    if (d && d->state != DOC_LIVE) {
        rc = add_waiter(reg, d, fn, arg);
    } else if (d && nd_doc_stale(d) && memcmp(d->text_hash, q->text_hash, 16) == 0) {
        rc = do_upgrade(reg, d, rq, q, qs, res, fn, arg);
    } else if (d) {
        rc = answer_existing(reg, d, rq, q, qs, res, true, fn, arg);
    } else {
        nd_doc *wait_on = NULL;
        int64_t at = 0; /* the clock's */
        rc = rq->registered_at_us > 0 ? given_time(reg, rq->registered_at_us, &at) : 0;
        /* evidence: registered before it, or (the clock's time, or judged
         * live) every document */
        int64_t before = at && !rq->judge_live ? at : INT64_MAX;
        if (rc == 0)
            rc = nd_verdict_find(reg, rq, q, qs, NULL, before, res, true, &wait_on);
        if (rc == 0 && wait_on) {
            /* original unless the pending one commits: asked again then */
            nd_check_res_release(res);
            nd_verdict_clear(res);
            res->wait_at_us = before;
            rc = add_waiter(reg, wait_on, fn, arg);
        } else if (rc == 0 && res->original) {
            rc = do_register(reg, rq, q, at, res, fn, arg);
        }
    }
    pthread_mutex_unlock(&reg->writer);
    return rc;
}

static int check_register(nd_registry *reg, const nd_check_req *rq, const nd_question *q,
                          const nd_question_scratch *qs, nd_check_res *res, nd_registry_done_fn fn,
                          void *arg)
{
    first_pass(reg, rq, q, qs, res);
    int rc = check_register_locked(reg, rq, q, qs, res, fn, arg);
    if (res->memo)
        nd_memo_clear(res->memo);
    return rc;
}

int nd_registry_check(nd_registry *reg, const nd_check_req *rq, const nd_question *q,
                      const nd_question_scratch *qs, nd_check_res *res, nd_registry_done_fn fn,
                      void *arg)
{
    nd_verdict_clear(res);
    if (atomic_load(&reg->shutdown)) /* the store may be gone */
        return -ESHUTDOWN;
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    if (rq->k > ND_INDEX_MAX_K || (rq->do_register && !rq->id) || rq->registered_at_us < 0 ||
        rq->account_len > ND_ACCOUNT_MAX || rq->policy_len > ND_POLICY_MAX ||
        (rq->account_len && !rq->account) || (rq->policy_len && !rq->policy))
        return -EINVAL;
    if (rq->registered_at_us > nd_clock_wall_us() + ND_REGISTRY_AHEAD_US)
        return -ERANGE;
    if (rq->do_register)
        return check_register(reg, rq, q, qs, res, fn, arg);
    if (rq->id) {
        /* Only asking: a document waiting for its first commit does not
         * exist yet (an upgrade in flight answers with the old one); a
         * deleting one does until its deletion commits. */
        nd_doc *d = NULL;
        pthread_rwlock_rdlock(&reg->table);
        d = nd_reg_chain_find(reg, rq->id, rq->id_len, true);
        if (d)
            d = doc_ref(d);
        pthread_rwlock_unlock(&reg->table);
        if (d) {
            int rc = answer_existing(reg, d, rq, q, qs, res, false, NULL, NULL);
            nd_doc_release(d);
            return rc;
        }
    }
    return nd_verdict_find(reg, rq, q, qs, NULL, INT64_MAX, res, false, NULL);
}

/* Puts d (an amended copy of old, unlinked, with the reference it takes
 * over as the registry's) in old's place: same slot (so the indexes stay as
 * they are), same place in its id chain; old is unlinked and the
 * registry's reference on it dropped. Writer held. */
static void swap_doc(nd_registry *reg, nd_doc *old, nd_doc *d)
{
    d->slot = old->slot;
    d->state = DOC_LIVE;
    pthread_rwlock_wrlock(&reg->table);
    d->next = old->next; /* the chain links slots: d takes old's place */
    reg->slots[old->slot] = d;
    pthread_rwlock_unlock(&reg->table);
    old->state = DOC_GONE;
    old->next = 0;
    nd_doc_release(old);
}

static void change_free(nd_reg_change *ch)
{
    nd_doc_release(ch->doc);
    nd_doc_release(ch->old);
    for (size_t i = 0; i < ch->nsup; i++) {
        nd_doc_release(ch->sup_old[i]);
        nd_doc_release(ch->sup_new[i]); /* not linked: the change failed */
    }
    free(ch->sup_old);
    free(ch->sup_new);
    free(ch);
}

/* Moves the waiters of d from the registry to the end of *list (an
 * unwaited document costs nothing). Writer held. */
static void take_waiters(nd_registry *reg, nd_doc *d, nd_waiter **list)
{
    if (!d->waited)
        return;
    d->waited = false;
    while (*list)
        list = &(*list)->next;
    for (nd_waiter **pp = &reg->waiters; *pp;) {
        nd_waiter *w = *pp;
        if (w->doc != d) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        w->next = NULL;
        *list = w;
        list = &w->next;
    }
}

/* Makes ch take effect or undoes it; the waiters of its document go to
 * *woken (to wake once the writer is released). Writer held. Returns 0
 * when it took effect, else status. */
static int complete_locked(nd_registry *reg, nd_reg_change *ch, int status, nd_waiter **woken)
{
    nd_doc *d = ch->doc;
    int rc = status;
    if (ch->kind == CHANGE_PUT || ch->kind == CHANGE_UPGRADE) {
        inflight_remove(reg, ch);
        if (status == 0) {
            d->state = DOC_LIVE;
            /* The store has its anchors and sketch now; readers without
             * the writer never read a stored document's extra. */
            free(doc_extra(d));
            doc_set_extra(d, NULL);
            digest_change(reg, d, ch->old);
        } else {
            unlink_doc(reg, d);
        }
        /* An upgrade's old document goes once the new one is durable; if
         * that failed, it stays (its record was not touched). */
        if (status == 0 && ch->old)
            unlink_doc(reg, ch->old);
    } else if (ch->kind == CHANGE_AMEND) {
        nd_doc *old = ch->old;
        if (status == 0) {
            digest_change(reg, d, old);
            swap_doc(reg, old, d);
        } else {
            old->state = DOC_LIVE; /* its record was not touched */
            nd_doc_release(d);     /* the reference it would have linked with */
        }
        take_waiters(reg, old, woken);
        for (size_t i = 0; i < ch->nsup; i++) { /* in the same transaction */
            if (status == 0) {
                digest_change(reg, ch->sup_new[i], ch->sup_old[i]);
                swap_doc(reg, ch->sup_old[i], ch->sup_new[i]);
                ch->sup_new[i] = NULL; /* linked */
            } else {
                ch->sup_old[i]->state = DOC_LIVE;
            }
            take_waiters(reg, ch->sup_old[i], woken);
        }
        return rc;
    } else if (status == 0 || status == -ENOENT) {
        digest_change(reg, NULL, d);
        nd_reg_unlink_doc_anchors(reg, d, ch->anchors, ch->nanchors);
        rc = 0;
    } else {
        d->state = DOC_LIVE;
    }
    take_waiters(reg, d, woken);
    return rc;
}

int nd_registry_reserve(nd_registry *reg, uint64_t extra)
{
    pthread_mutex_lock(&reg->writer);
    int rc = nd_reg_map_reserve(reg, extra);
    if (rc == 0)
        rc = nd_reg_slots_reserve(reg, extra);
    pthread_mutex_unlock(&reg->writer);
    return rc;
}

int nd_registry_complete(nd_registry *reg, nd_reg_change *ch, int status)
{
    nd_waiter *w = NULL;
    pthread_mutex_lock(&reg->writer);
    int rc = complete_locked(reg, ch, status, &w);
    atomic_fetch_sub_explicit(&reg->npending, 1, memory_order_relaxed);
    pthread_mutex_unlock(&reg->writer);
    wake(w);
    change_free(ch);
    return rc;
}

/* nd_store_get() visitor: copies the record's anchors into the change. */
static int read_anchors(void *arg, const nd_record *rec)
{
    nd_reg_change *ch = arg;
    unsigned n = rec->nanchors < ND_ANCHORS_MAX ? rec->nanchors : ND_ANCHORS_MAX;
    for (unsigned i = 0; i < n; i++) {
        const uint8_t *b = rec->anchors + 4 * i;
        ch->anchors[i] = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                         (uint32_t)b[3] << 24;
    }
    ch->nanchors = n;
    return 0;
}

/* Queues the deletion of live document d (seq: its stream entry, 0 for a
 * local change). Writer held. Returns as nd_registry_delete(). */
static int delete_live(nd_registry *reg, nd_doc *d, uint64_t seq, const nd_store_event *audit,
                       nd_registry_done_fn fn, void *arg)
{
    nd_reg_change *ch = change_new(reg, d, CHANGE_DELETE, fn, arg);
    if (!ch)
        return -ENOMEM;
    if (!doc_extra(d) && !nd_doc_stale(d)) /* its anchors, to unindex it */
        nd_store_get(reg->store, d->registered_at_us, read_anchors, ch);
    phase_begin(reg, ch);
    int rc = nd_store_delete_audited(reg->store, nd_doc_id(d), d->id_len, d->registered_at_us, seq,
                                     audit, store_done, ch);
    if (rc < 0) {
        change_free(ch);
        return rc;
    }
    d->state = DOC_DELETING;
    if (done_in_call(reg, ch))
        return finish_in_call(reg, ch); /* deleted (0) or kept */
    atomic_fetch_add_explicit(&reg->npending, 1, memory_order_relaxed);
    return ND_REG_QUEUED;
}

int nd_registry_delete(nd_registry *reg, const char *id, size_t id_len, nd_reg_audit_fn audit,
                       void *audit_arg, nd_registry_done_fn fn, void *arg)
{
    if (atomic_load(&reg->shutdown)) /* the store may be gone */
        return -ESHUTDOWN;
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    pthread_mutex_lock(&reg->writer);
    int rc = 0;
    nd_doc *d = map_find(reg, id, id_len);
    if (!d)
        rc = -ENOENT;
    else if (d->state != DOC_LIVE)
        rc = add_waiter(reg, d, fn, arg);
    else {
        nd_store_event ev;
        char *value = audit ? audit(audit_arg, d, &ev) : NULL;
        rc = delete_live(reg, d, 0, value ? &ev : NULL, fn, arg);
        free(value); /* the store copied it */
    }
    pthread_mutex_unlock(&reg->writer);
    return rc;
}

/* nd_store_get() visitor: the stored record's anchors, as stored. */
typedef struct stored_anchors {
    uint8_t bytes[4 * ND_STORE_ANCHORS_MAX];
    size_t n;
    stored_client client; /* kept by the amendment */
} stored_anchors;

static int copy_anchors(void *arg, const nd_record *rec)
{
    stored_anchors *sa = arg;
    sa->n = rec->anchors && rec->nanchors <= ND_STORE_ANCHORS_MAX ? rec->nanchors : 0;
    if (sa->n)
        memcpy(sa->bytes, rec->anchors, 4 * sa->n);
    return copy_client(&sa->client, rec);
}

/* Makes amendment ch (of the document registered at by_us) supersede the
 * live active documents docs[0..n): their superseded copies are made here
 * and linked when it commits. Writer held. Returns 0 or -ENOMEM (ch then
 * supersedes none). */
static int change_supersede(nd_reg_change *ch, nd_doc *const *docs, size_t n, int64_t by_us)
{
    if (!n)
        return 0;
    ch->sup_old = calloc(n, sizeof(*ch->sup_old));
    ch->sup_new = calloc(n, sizeof(*ch->sup_new));
    int rc = ch->sup_old && ch->sup_new ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const nd_doc *b = docs[i];
        nd_doc *nb = nd_reg_doc_new(nd_doc_id(b), b->id_len, nd_doc_meta(b), b->meta_len,
                                    nd_doc_account(b), b->account_len, nd_doc_policy(b),
                                    b->policy_len, ND_CLAIM_SUPERSEDED);
        if (!nb) {
            rc = -ENOMEM;
            break;
        }
        nd_reg_amended_from(nb, b);
        doc_set_superseded_by(nb, by_us);
        ch->sup_old[i] = doc_ref(docs[i]);
        ch->sup_new[i] = nb;
        ch->nsup = i + 1;
    }
    if (rc < 0) {
        for (size_t i = 0; i < ch->nsup; i++) {
            nd_doc_release(ch->sup_old[i]);
            nd_doc_release(ch->sup_new[i]);
        }
        free(ch->sup_old);
        free(ch->sup_new);
        ch->sup_old = ch->sup_new = NULL;
        ch->nsup = 0;
    }
    return rc;
}

/* Queues the amendment ch of live document d (ch->doc: its amended copy,
 * unlinked, with the new claim; seq: its stream entry, 0 for a local
 * change), with the documents ch supersedes (change_supersede()) in the
 * same store transaction. Writer held. Returns as nd_registry_set_policy(); on an error
 * ch and its document are freed. */
static int queue_amend(nd_registry *reg, nd_doc *d, nd_reg_change *ch, const nd_store_event *audit,
                       uint64_t seq)
{
    nd_doc *nd = ch->doc;
    nd_reg_amended_from(nd, d);
    ch->old = doc_ref(d);
    /* The record as stored, with the new claim: its anchors are read
     * back (a loaded document does not keep them); its sketch stays. */
    stored_anchors sa = {.n = 0};
    int rc = nd_store_get(reg->store, d->registered_at_us, copy_anchors, &sa);
    nd_record rec;
    record_of(reg, nd, &rec, NULL);
    rec.anchors = sa.n ? sa.bytes : NULL;
    rec.nanchors = (unsigned)sa.n;
    rec.client = sa.client.len ? sa.client.name : NULL; /* its registering client stays */
    rec.client_len = sa.client.len;
    rec.stream_seq = seq;
    size_t nsup = ch->nsup;
    nd_record_ref *refs = nsup ? malloc(nsup * sizeof(*refs)) : NULL;
    if (nsup && !refs && (rc == 0 || rc == -ENOENT))
        rc = -ENOMEM;
    for (size_t i = 0; refs && i < nsup; i++)
        refs[i] = (nd_record_ref){.registered_at_us = ch->sup_old[i]->registered_at_us,
                                  .id = nd_doc_id(ch->sup_old[i]),
                                  .id_len = ch->sup_old[i]->id_len};
    rec.supersede = refs;
    rec.nsupersede = nsup;
    if (rc == 0 || rc == -ENOENT) { /* -ENOENT: the amend says so */
        phase_begin(reg, ch);
        rc = nd_store_amend(reg->store, &rec, audit, store_done, ch);
    }
    free(refs); /* the store keeps its copy */
    if (rc < 0) {
        change_free(ch);
        nd_doc_release(nd); /* the reference it would have linked with */
        return rc;
    }
    d->state = DOC_AMENDING;
    /* ch is not completed before the writer is released (or by
     * finish_in_call() below): its documents stay readable here. */
    for (size_t i = 0; i < nsup; i++)
        ch->sup_old[i]->state = DOC_AMENDING;
    if (done_in_call(reg, ch))
        return finish_in_call(reg, ch); /* amended (0) or kept */
    atomic_fetch_add_explicit(&reg->npending, 1, memory_order_relaxed);
    return ND_REG_QUEUED;
}

/* A policy or status change of id (see nd_registry_change_policy()): the
 * amended copy of the live document, as decide makes it on the document
 * as it is now, is written with nd_store_amend() and put in its place by
 * complete_locked(). Writer taken here. */
static int amend(nd_registry *reg, const char *id, size_t id_len, bool set_policy, int status,
                 unsigned k, const nd_verdict_params *params, nd_claim_decide_fn decide,
                 void *decide_arg, nd_registry_done_fn fn, void *arg)
{
    if (atomic_load(&reg->shutdown)) /* the store may be gone */
        return -ESHUTDOWN;
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    if (!set_policy && status != ND_CLAIM_ACTIVE && status != ND_CLAIM_REVOKED)
        return -EINVAL;
    pthread_mutex_lock(&reg->writer);
    int rc = 0;
    nd_doc *d = map_find(reg, id, id_len), *nd = NULL;
    nd_reg_change *ch = NULL;
    nd_claim_change c = {.doc = d};
    if (!d) {
        rc = -ENOENT;
    } else if (d->state != DOC_LIVE) {
        rc = add_waiter(reg, d, fn, arg);
    } else if (!set_policy && d->status == status) {
        rc = 0; /* unchanged: nothing written, so no stream entry fences it: a
                 * replica's API asks again on the stream's latest state
                 * (pending.h, ND_PENDING_LATEST) */
    } else {
        nd_doc **pre = NULL;
        size_t npre = 0;
        bool more = false;
        if (!set_policy && status == ND_CLAIM_ACTIVE)
            rc = nd_verdict_find_predated(reg, d, k, params, &pre, &npre, &more);
        /* A document it supersedes with a change in flight: after it. */
        for (size_t i = 0; rc == 0 && i < npre; i++)
            if (pre[i]->state != DOC_LIVE)
                rc = add_waiter(reg, pre[i], fn, arg);
        c.predated = pre;
        c.npredated = npre < reg->opts.max_matches ? npre : reg->opts.max_matches;
        c.predated_truncated = more || npre > c.npredated;
        if (rc == 0)
            rc = decide(decide_arg, &c);
        if (rc == 0 && set_policy && (c.policy_len > ND_POLICY_MAX || (c.policy_len && !c.policy)))
            rc = -EINVAL;
        if (rc == 0) {
            nd = nd_reg_doc_new(nd_doc_id(d), d->id_len, nd_doc_meta(d), d->meta_len,
                                nd_doc_account(d), d->account_len,
                                set_policy ? c.policy : nd_doc_policy(d),
                                set_policy ? (c.policy ? c.policy_len : 0) : d->policy_len,
                                set_policy ? d->status : status);
            if (nd && set_policy)
                doc_set_superseded_by(nd, nd_doc_superseded_by(d));
            ch = nd ? change_new(reg, nd, CHANGE_AMEND, fn, arg) : NULL;
            rc = ch ? change_supersede(ch, pre, npre, d->registered_at_us) : -ENOMEM;
            if (rc < 0 && ch) {
                change_free(ch);
                ch = NULL;
            }
        }
        for (size_t i = 0; i < npre; i++)
            nd_doc_release(pre[i]);
        free(pre);
    }
    if (ch)
        rc = queue_amend(reg, d, ch, c.audit, 0);
    else if (nd)
        nd_doc_release(nd);
    pthread_mutex_unlock(&reg->writer);
    return rc;
}

/* The fixed outputs of nd_registry_set_policy() / _set_status(). */
typedef struct fixed_claim {
    const char *policy;
    size_t policy_len;
    const nd_store_event *audit;
} fixed_claim;

static int decide_fixed(void *arg, nd_claim_change *c)
{
    const fixed_claim *f = arg;
    c->policy = f->policy;
    c->policy_len = f->policy_len;
    c->audit = f->audit;
    return 0;
}

int nd_registry_set_policy(nd_registry *reg, const char *id, size_t id_len, const char *policy,
                           size_t policy_len, const nd_store_event *audit, nd_registry_done_fn done,
                           void *arg)
{
    fixed_claim f = {.policy = policy, .policy_len = policy ? policy_len : 0, .audit = audit};
    if (f.policy_len > ND_POLICY_MAX || (policy_len && !policy))
        return -EINVAL;
    return amend(reg, id, id_len, true, 0, 0, NULL, decide_fixed, &f, done, arg);
}

int nd_registry_set_status(nd_registry *reg, const char *id, size_t id_len, int status,
                           const nd_store_event *audit, nd_registry_done_fn done, void *arg)
{
    fixed_claim f = {.audit = audit};
    return amend(reg, id, id_len, false, status, 0, NULL, decide_fixed, &f, done, arg);
}

int nd_registry_change_policy(nd_registry *reg, const char *id, size_t id_len,
                              nd_claim_decide_fn decide, void *decide_arg, nd_registry_done_fn done,
                              void *arg)
{
    return amend(reg, id, id_len, true, 0, 0, NULL, decide, decide_arg, done, arg);
}

int nd_registry_change_status(nd_registry *reg, const char *id, size_t id_len, int status,
                              unsigned k, const nd_verdict_params *params,
                              nd_claim_decide_fn decide, void *decide_arg, nd_registry_done_fn done,
                              void *arg)
{
    return amend(reg, id, id_len, false, status, k, params, decide, decide_arg, done, arg);
}

/* ---- changes read from the replication stream ---- */

/* A registration (old NULL) or an upgrade of old from the stream. Writer
 * held. */
static int apply_put(nd_registry *reg, nd_doc *old, const nd_record *rec,
                     const nd_store_event *audit, nd_registry_done_fn fn, void *arg)
{
    nd_doc *d = nd_reg_doc_of_record(reg, rec);
    if (!d)
        return -ENOMEM;
    if (!old) /* later clock times come after it (not beyond the clock + its skew) */
        nd_reg_clock_raise(reg, rec->registered_at_us);
    int rc = nd_reg_link_doc(reg, d);
    if (rc < 0) {
        nd_doc_release(d);
        return rc;
    }
    bool finished;
    rc = queue_write(reg, d, old, rec->stream_seq, rec->client, rec->client_len, rec,
                     old ? NULL : audit, fn, arg, &finished);
    if (rc < 0 && !finished)
        unlink_doc(reg, d);
    return rc;
}

/* A policy or status change of live document d from the stream: its claim
 * becomes rec's. Writer held. */
static int apply_amend(nd_registry *reg, nd_doc *d, const nd_record *rec,
                       const nd_store_event *audit, nd_registry_done_fn fn, void *arg)
{
    /* The documents it supersedes: those held here with the id and time
     * named, and active (as the store decides on the records). */
    size_t nsup = rec->supersede ? rec->nsupersede : 0, n = 0;
    if (nsup > ND_STORE_SUPERSEDE_MAX)
        return -EINVAL;
    nd_doc **sup = nsup ? malloc(nsup * sizeof(*sup)) : NULL;
    if (nsup && !sup)
        return -ENOMEM;
    for (size_t i = 0; i < nsup; i++) {
        const nd_record_ref *ref = &rec->supersede[i];
        nd_doc *b = ref->id ? map_find(reg, ref->id, ref->id_len) : NULL;
        if (!b || b == d || b->registered_at_us != ref->registered_at_us)
            continue;
        if (b->state != DOC_LIVE) { /* a local change of it in flight */
            free(sup);
            return add_waiter(reg, b, fn, arg);
        }
        if (b->status == ND_CLAIM_ACTIVE)
            sup[n++] = b;
    }
    nd_doc *nd = nd_reg_doc_new(nd_doc_id(d), d->id_len, nd_doc_meta(d), d->meta_len, rec->account,
                                rec->account_len, rec->policy, rec->policy_len, rec->status);
    if (nd && rec->status == ND_CLAIM_SUPERSEDED)
        doc_set_superseded_by(nd, rec->superseded_by_us);
    nd_reg_change *ch = nd ? change_new(reg, nd, CHANGE_AMEND, fn, arg) : NULL;
    int rc = ch ? change_supersede(ch, sup, n, d->registered_at_us) : -ENOMEM;
    free(sup);
    if (rc < 0) {
        if (ch)
            change_free(ch);
        nd_doc_release(nd);
        return rc;
    }
    return queue_amend(reg, d, ch, audit, rec->stream_seq);
}

static bool same_record(const nd_doc *d, const nd_record *rec)
{
    return d->registered_at_us == rec->registered_at_us &&
           memcmp(d->text_hash, rec->text_hash, 16) == 0;
}

int nd_registry_apply(nd_registry *reg, nd_store_change kind, const nd_record *rec,
                      const nd_store_event *audit, nd_registry_done_fn fn, void *arg)
{
    if (atomic_load(&reg->shutdown))
        return -ESHUTDOWN;
    if (!nd_registry_loaded(reg))
        return -EAGAIN;
    if (!rec || !rec->stream_seq || !rec->id || !rec->id_len || rec->id_len > ND_ID_MAX ||
        !rec->version || rec->account_len > ND_ACCOUNT_MAX || rec->policy_len > ND_POLICY_MAX)
        return -EINVAL;
    pthread_mutex_lock(&reg->writer);
    int rc;
    nd_doc *d = map_find(reg, rec->id, rec->id_len);
    if (d && d->state != DOC_LIVE) {
        rc = add_waiter(reg, d, fn, arg); /* a local change of the id in flight */
    } else if (kind == ND_STORE_PUT) {
        rc = !d ? apply_put(reg, NULL, rec, audit, fn, arg) : same_record(d, rec) ? 0 : -EEXIST;
    } else if (kind == ND_STORE_REPLACE) {
        rc = d && d->registered_at_us == rec->registered_at_us
                 ? apply_put(reg, d, rec, NULL, fn, arg)
                 : -ENOENT;
    } else if (kind == ND_STORE_DELETE) {
        rc = d && d->registered_at_us == rec->registered_at_us
                 ? delete_live(reg, d, rec->stream_seq, audit, fn, arg)
                 : 0; /* gone already */
    } else if (kind == ND_STORE_AMEND) {
        rc = d && d->registered_at_us == rec->registered_at_us
                 ? apply_amend(reg, d, rec, audit, fn, arg)
                 : -ENOENT;
    } else {
        rc = -EINVAL;
    }
    pthread_mutex_unlock(&reg->writer);
    return rc;
}
