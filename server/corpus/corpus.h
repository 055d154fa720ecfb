/* corpus.h - the one interface between the HTTP API (server/api/) and the
 * engine: the documents of one archive, how they are checked and
 * registered, read, deleted and amended, what is kept with them (texts,
 * copies, audit, the events feed), and whether the archive can answer
 * (loaded, writable, its replica's state).
 *
 * A handler reaches the corpus of its request through nd_api_corpus(r)
 * (answer.h), picked once per request: today it is always the server's one
 * corpus; a namespace picks another there, and nothing below changes.
 *
 * The shape is the store's (server/store/): a table of function pointers
 * (nd_corpus_ops) at the head of every implementation's object, and one
 * inline wrapper per operation. A table rather than a single set of
 * functions because the second implementation is already known: a shard
 * router that fans a check out to the corpora of several nodes and merges
 * their answers, behind these same calls. Implementations:
 *   corpus_local.c  one node's registry, store, replica (--nats), events
 *                   feed and webhook source, composed at start-up.
 * One indirect call per operation; no operation allocates on the caller's
 * behalf unless it says so.
 *
 * The asynchronous flow is the registry's (change.h): check, delete and
 * the claim changes return 0, ND_REG_QUEUED or ND_REG_WAIT (or -errno) and
 * call done(arg, change, status) on another thread; the request completes
 * the change on its own thread with nd_corpus_complete(). A store's or a
 * replica's (void *, int) callback is an nd_store_done_fn.
 *
 * A document crosses it as a value (nd_corpus_doc: its fields and borrowed
 * strings), never as the registry's document struct: nd_corpus_get() fills
 * one holding a reference, a check's matches are read through views
 * (nd_corpus_match_doc()), and the callbacks of a registration's or
 * deletion's audit entry and of a claim change receive views.
 *
 * This header is the API's one door to the engine: it brings the value
 * types the calls take and return, each from the header that defines it
 * without the engine's state (below: the check's request, question and
 * result, the asynchronous flow, claims, journal events and limits, the
 * events feed, an import's parameters) and the scratch a worker keeps for
 * a check's second pass (memo.h, pair.h). Not the registry's, the store's
 * or the replica's interfaces: a check's result and a worker's memo hold
 * references to registry documents as an opaque typedef (verdict.h,
 * memo.h), which the API cannot read (it reads views). server/api/
 * includes no engine header itself, and this header reaches none of those
 * interfaces (tests/test_api_corpus.py). */
#ifndef ND_CORPUS_H
#define ND_CORPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "change.h"       /* ND_REG_QUEUED, ND_REG_WAIT, nd_registry_done_fn */
#include "claim.h"        /* policies, actions, claim statuses */
#include "feed.h"         /* nd_event_rec */
#include "import.h"       /* nd_import_params, nd_import_summary */
#include "memo.h"         /* a worker's check scratch */
#include "pair.h"         /* a worker's passages scratch */
#include "question.h"     /* nd_question, ND_RECORD_VERSION */
#include "request.h"      /* nd_check_req */
#include "store_values.h" /* nd_store_event, limits, nd_store_done_fn */
#include "verdict.h"      /* nd_check_res, nd_match (their documents opaque) */

typedef struct nd_corpus nd_corpus;

/* A document as the corpus hands it out: values, and strings borrowed
 * from the corpus. A view from nd_corpus_get() holds a reference (ref) and
 * its strings stay valid until nd_corpus_doc_release(); a view of a check's
 * match or source (nd_corpus_match_doc(), nd_corpus_source_doc(),
 * nd_corpus_registered_doc()) holds none: valid while the result is (it
 * holds the references). Filling a view never allocates. */
typedef struct nd_corpus_doc {
    const char *id; /* id_len bytes (1..ND_ID_MAX), not NUL-terminated */
    size_t id_len;
    const char *meta; /* compact JSON object, meta_len bytes; NULL: none */
    size_t meta_len;
    const char *account; /* the registering account; NULL: none */
    size_t account_len;
    const char *policy; /* the reprint policy (compact JSON, claim.h reads
                         * it); NULL: none, the server's default applies */
    size_t policy_len;
    const char *version; /* the fingerprint version, NUL-terminated,
                          * borrowed for the corpus's life: nd_corpus_get()
                          * only (NULL in a match's view) */
    uint64_t simhash;
    int64_t registered_at_us; /* UTC microseconds since the epoch */
    int64_t superseded_by_us; /* ND_CLAIM_SUPERSEDED: the registered_at_us
                               * of the document whose restore superseded it;
                               * 0 otherwise */
    uint32_t chars;           /* characters as read */
    int status;               /* ND_CLAIM_ACTIVE, _REVOKED, _SUPERSEDED */
    void *ref;                /* the implementation's: the reference held */
} nd_corpus_doc;

/* Builds the audit entry of a registration or deletion of d (the corpus's
 * writer held, before the store write; d borrowed for the call): fills *ev
 * (an ND_EVENT_AUDIT event) and returns its value (new: the corpus frees
 * it once queued), or NULL for none. */
typedef char *(*nd_corpus_audit_fn)(void *arg, const nd_corpus_doc *d, nd_store_event *ev);

/* A change of a document's claim decided on the document as it is when the
 * change is made (nd_claim_change's values): the corpus fills the inputs
 * and calls decide(decide_arg, c) once per attempt (again after
 * ND_REG_WAIT, on the newer state). Everything In is borrowed for the
 * call. */
typedef struct nd_corpus_claim_change {
    /* In: */
    nd_corpus_doc doc;             /* the live document: its policy and status now */
    const nd_corpus_doc *predated; /* a restore: the documents it now predates,
                                    * earliest first (nd_claim_change) */
    size_t npredated;
    bool predated_truncated;
    /* Out (valid until the change's done): */
    const char *policy; /* a policy change: the new policy (NULL: none) */
    size_t policy_len;
    const nd_store_event *audit; /* the audit entry (NULL: none) */
} nd_corpus_claim_change;

/* Sets *c's outputs; returns 0, or a negative value the change call
 * returns as it is (nothing changed). */
typedef int (*nd_corpus_decide_fn)(void *arg, nd_corpus_claim_change *c);

/* A replicated corpus's place in the stream (nd_corpus_replica_get()): values,
 * its strings borrowed for the corpus's life. */
typedef struct nd_corpus_replica {
    const char *node;
    const char *stream;
    const char *state; /* "ready", or why not (nd_corpus_ready()'s reasons) */
    uint64_t applied_seq, stored_seq, stream_seq, lag;
    bool connected, writable;
    uint64_t published, applied, entries, conflicts;
} nd_corpus_replica;

/* The counts of documents (nd_corpus_stats()): a snapshot. */
typedef struct nd_corpus_counts {
    uint64_t documents;     /* ids held, pending ones included */
    uint64_t index_entries; /* fingerprints in the index */
    uint64_t stale;         /* documents of another fingerprint version */
    uint64_t pending;       /* changes waiting for the store */
    uint64_t duplicates;    /* records skipped at load: id stored twice */
} nd_corpus_counts;

/* An implementation: the calls below, dispatched. */
typedef struct nd_corpus_ops {
    const char *name; /* "local" */
    /* state */
    bool (*loaded)(const nd_corpus *c);
    bool (*ready)(const nd_corpus *c, const char **why);
    bool (*writable)(const nd_corpus *c);
    bool (*durable)(const nd_corpus *c);
    bool (*replicated)(const nd_corpus *c);
    int (*sync)(nd_corpus *c, nd_store_done_fn done, void *arg);
    bool (*replica)(const nd_corpus *c, nd_corpus_replica *out);
    void (*stats)(const nd_corpus *c, nd_corpus_counts *out);
    int (*digest)(nd_corpus *c, uint64_t *documents, uint64_t *digest);
    /* documents */
    int (*check)(nd_corpus *c, const nd_check_req *rq, nd_corpus_audit_fn audit, void *audit_arg,
                 const nd_question *q, const nd_question_scratch *qs, nd_check_res *res,
                 nd_registry_done_fn done, void *arg);
    int (*complete)(nd_corpus *c, nd_reg_change *ch, int status);
    int (*get)(nd_corpus *c, const char *id, size_t id_len, nd_corpus_doc *out);
    void (*doc_release)(nd_corpus *c, nd_corpus_doc *d);
    int (*remove)(nd_corpus *c, const char *id, size_t id_len, nd_corpus_audit_fn audit,
                  void *audit_arg, nd_registry_done_fn done, void *arg);
    int (*change_policy)(nd_corpus *c, const char *id, size_t id_len, nd_corpus_decide_fn decide,
                         void *decide_arg, nd_registry_done_fn done, void *arg);
    int (*change_status)(nd_corpus *c, const char *id, size_t id_len, int status, unsigned k,
                         const nd_verdict_params *params, nd_corpus_decide_fn decide,
                         void *decide_arg, nd_registry_done_fn done, void *arg);
    int (*import)(nd_corpus *c, const char *buf, size_t len, const nd_import_params *p,
                  nd_import_report_fn report, void *arg, nd_import_summary *out);
    /* what is kept with them */
    int (*registered_by)(nd_corpus *c, int64_t registered_at_us, const char *client,
                         size_t client_len, bool *same);
    int (*id_at)(nd_corpus *c, int64_t registered_at_us, char *id, size_t *id_len);
    int (*text)(nd_corpus *c, int64_t registered_at_us,
                int (*visit)(void *arg, const char *text, size_t text_len), void *arg);
    int (*event_put)(nd_corpus *c, const nd_store_event *ev, nd_store_done_fn done, void *arg);
    int (*events)(nd_corpus *c, nd_event_kind kind, int64_t owner_at, int64_t before_at,
                  size_t limit, int (*visit)(void *arg, const nd_store_event *ev), void *arg);
    int (*audit_of)(nd_corpus *c, int64_t owner_at, const char *document, size_t document_len,
                    int64_t before_at, size_t limit,
                    int (*visit)(void *arg, const nd_store_event *ev), void *arg);
    void (*feed_bounds)(nd_corpus *c, uint64_t *oldest, uint64_t *latest);
    int (*feed_scan)(nd_corpus *c, uint64_t from, bool descending,
                     int (*visit)(void *arg, const nd_event_rec *ev), void *arg);
} nd_corpus_ops;

/* The head every implementation's object begins with. */
struct nd_corpus {
    const nd_corpus_ops *ops;
};

/* ---- state ---- */

/* True once the documents are loaded (before: most calls return -EAGAIN). */
static inline bool nd_corpus_loaded(const nd_corpus *c)
{
    return c->ops->loaded(c);
}

/* True when the corpus can answer; otherwise *why (static; why may be NULL)
 * is "loading", "storage_unavailable", or a replica's
 * "replication_unavailable", "replica_behind", "replica_failed". */
static inline bool nd_corpus_ready(const nd_corpus *c, const char **why)
{
    return c->ops->ready(c, why);
}

/* True while the storage takes writes (the store's nd_store_writable()). */
static inline bool nd_corpus_writable(const nd_corpus *c)
{
    return c->ops->writable(c);
}

/* True when what is committed survives a restart (false: --in-memory). */
static inline bool nd_corpus_durable(const nd_corpus *c)
{
    return c->ops->durable(c);
}

/* True when the corpus is one replica of several (changes go through a
 * stream, and a read at consistency "latest" must nd_corpus_sync()). */
static inline bool nd_corpus_replicated(const nd_corpus *c)
{
    return c->ops->replicated(c);
}

/* A replicated corpus only: done(arg, status) runs (another thread) once
 * this node holds the stream's latest state (replica.h's
 * nd_replica_sync()). Returns 0, or -errno (done not called). */
static inline int nd_corpus_sync(nd_corpus *c, nd_store_done_fn done, void *arg)
{
    return c->ops->sync(c, done, arg);
}

/* Fills *out and returns true for a replicated corpus; false (out
 * untouched) for one node. Does not allocate. */
static inline bool nd_corpus_replica_get(const nd_corpus *c, nd_corpus_replica *out)
{
    return c->ops->replica(c, out);
}

/* The counts (a snapshot; no lock). */
static inline void nd_corpus_stats(const nd_corpus *c, nd_corpus_counts *out)
{
    c->ops->stats(c, out);
}

/* The committed documents' count and digest (registry's nd_registry_digest()):
 * 0, or -EAGAIN while loading. */
static inline int nd_corpus_digest(nd_corpus *c, uint64_t *documents, uint64_t *digest)
{
    return c->ops->digest(c, documents, digest);
}

/* ---- documents (the registry's calls give each one's results in full) ---- */

/* nd_registry_check(): checks rq, registering it when original and asked;
 * a registration's audit entry is audit(audit_arg, d, ev)'s (NULL: none;
 * rq->audit is the corpus's and ignored). No allocation beyond the
 * registry's. */
static inline int nd_corpus_check(nd_corpus *c, const nd_check_req *rq, nd_corpus_audit_fn audit,
                                  void *audit_arg, const nd_question *q,
                                  const nd_question_scratch *qs, nd_check_res *res,
                                  nd_registry_done_fn done, void *arg)
{
    return c->ops->check(c, rq, audit, audit_arg, q, qs, res, done, arg);
}

/* nd_registry_complete(): finishes a queued change on the caller's thread
 * (frees ch); 0, or the store's status. */
static inline int nd_corpus_complete(nd_corpus *c, nd_reg_change *ch, int status)
{
    return c->ops->complete(c, ch, status);
}

/* Looks up id: 0 and the document's view in *out, holding a reference
 * (release it with nd_corpus_doc_release()); -ENOENT or -EAGAIN (loading),
 * *out then zeroed (releasing it is allowed). Does not allocate. */
static inline int nd_corpus_get(nd_corpus *c, const char *id, size_t id_len, nd_corpus_doc *out)
{
    return c->ops->get(c, id, id_len, out);
}

/* Releases the reference a view from nd_corpus_get() holds (none: nothing
 * done) and clears it; its strings are not to be read after. Any thread. */
static inline void nd_corpus_doc_release(nd_corpus *c, nd_corpus_doc *d)
{
    c->ops->doc_release(c, d);
}

/* The views of a check's documents (nd_check_res, filled by
 * nd_corpus_check()): no reference is taken, they are valid while res
 * is; no allocation. match_doc: match m's document. source_doc: the
 * source the action names (false, out untouched: none). registered_doc:
 * the document res registered or found under the id (false: none).
 * is_source: whether m's document is res's source. Implemented in
 * corpus_doc.c. */
void nd_corpus_match_doc(const nd_match *m, nd_corpus_doc *out);
bool nd_corpus_source_doc(const nd_check_res *res, nd_corpus_doc *out);
bool nd_corpus_registered_doc(const nd_check_res *res, nd_corpus_doc *out);
bool nd_corpus_is_source(const nd_check_res *res, const nd_match *m);

/* nd_registry_delete(), its audit entry audit's (NULL: none). */
static inline int nd_corpus_delete(nd_corpus *c, const char *id, size_t id_len,
                                   nd_corpus_audit_fn audit, void *audit_arg,
                                   nd_registry_done_fn done, void *arg)
{
    return c->ops->remove(c, id, id_len, audit, audit_arg, done, arg);
}

/* nd_registry_change_policy(), decided by decide on the document's view. */
static inline int nd_corpus_change_policy(nd_corpus *c, const char *id, size_t id_len,
                                          nd_corpus_decide_fn decide, void *decide_arg,
                                          nd_registry_done_fn done, void *arg)
{
    return c->ops->change_policy(c, id, id_len, decide, decide_arg, done, arg);
}

/* nd_registry_change_status(), decided by decide on the document's view
 * (a restore's predated views: allocated for the call; -ENOMEM). */
static inline int nd_corpus_change_status(nd_corpus *c, const char *id, size_t id_len, int status,
                                          unsigned k, const nd_verdict_params *params,
                                          nd_corpus_decide_fn decide, void *decide_arg,
                                          nd_registry_done_fn done, void *arg)
{
    return c->ops->change_status(c, id, id_len, status, k, params, decide, decide_arg, done,
                                 arg);
}

/* nd_import_run() into this corpus (import.h): blocks the calling thread. */
static inline int nd_corpus_import(nd_corpus *c, const char *buf, size_t len,
                                   const nd_import_params *p, nd_import_report_fn report,
                                   void *arg, nd_import_summary *out)
{
    return c->ops->import(c, buf, len, p, report, arg, out);
}

/* ---- what is kept with them (the store's calls give each one's results) ---- */

/* Sets *same to whether the document stored under registered_at_us was
 * registered by the client named client[0..client_len) (the store keeps
 * who registered; memory does not). Returns 0, or -ENOENT (no document at
 * that time), -EINVAL, -EBADMSG, -EIO (*same untouched). One store read;
 * does not allocate. */
static inline int nd_corpus_registered_by(nd_corpus *c, int64_t registered_at_us,
                                          const char *client, size_t client_len, bool *same)
{
    return c->ops->registered_by(c, registered_at_us, client, client_len, same);
}

/* Copies the id of the document stored under registered_at_us into
 * id[ND_ID_MAX] and sets *id_len (left as it was when the stored id is
 * longer). Returns 0, or -ENOENT (none stored at that time), -EINVAL,
 * -EBADMSG, -EIO. One store read; does not allocate. */
static inline int nd_corpus_id_at(nd_corpus *c, int64_t registered_at_us, char *id,
                                  size_t *id_len)
{
    return c->ops->id_at(c, registered_at_us, id, id_len);
}

/* nd_store_text(): visit(arg, text, len) once with the kept text. */
static inline int nd_corpus_text(nd_corpus *c, int64_t registered_at_us,
                                 int (*visit)(void *arg, const char *text, size_t text_len),
                                 void *arg)
{
    return c->ops->text(c, registered_at_us, visit, arg);
}

/* nd_store_event_put(): a journal write (a detection, an audit entry). */
static inline int nd_corpus_event_put(nd_corpus *c, const nd_store_event *ev,
                                      nd_store_done_fn done, void *arg)
{
    return c->ops->event_put(c, ev, done, arg);
}

/* nd_store_events(): a journal's events of owner_at, newest first. */
static inline int nd_corpus_events(nd_corpus *c, nd_event_kind kind, int64_t owner_at,
                                   int64_t before_at, size_t limit,
                                   int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    return c->ops->events(c, kind, owner_at, before_at, limit, visit, arg);
}

/* nd_store_audit_of(): the audit entries naming one document. */
static inline int nd_corpus_audit_of(nd_corpus *c, int64_t owner_at, const char *document,
                                     size_t document_len, int64_t before_at, size_t limit,
                                     int (*visit)(void *arg, const nd_store_event *ev),
                                     void *arg)
{
    return c->ops->audit_of(c, owner_at, document, document_len, before_at, limit, visit, arg);
}

/* nd_store_feed_bounds(): the oldest and newest position of the events feed. */
static inline void nd_corpus_feed_bounds(nd_corpus *c, uint64_t *oldest, uint64_t *latest)
{
    c->ops->feed_bounds(c, oldest, latest);
}

/* nd_store_feed_scan(): the events after (or before) position from. */
static inline int nd_corpus_feed_scan(nd_corpus *c, uint64_t from, bool descending,
                                      int (*visit)(void *arg, const nd_event_rec *ev), void *arg)
{
    return c->ops->feed_scan(c, from, descending, visit, arg);
}

#endif
