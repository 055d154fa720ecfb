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
 * The shape is the store's (store.h): a table of function pointers
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
 * The asynchronous flow is the registry's (registry.h): check, delete and
 * the claim changes return 0, ND_REG_QUEUED or ND_REG_WAIT (or -errno) and
 * call done(arg, change, status) on another thread; the request completes
 * the change on its own thread with nd_corpus_complete(). A store's or a
 * replica's (void *, int) callback is an nd_store_done_fn.
 *
 * This header is the API's one door to the engine: it brings the types
 * the calls take and return (registry.h: the check's request, question and
 * result, nd_doc and its accessors, claims; store.h: records and journal
 * events; feed.h: the events feed; import.h: an import's parameters), and
 * the scratch a worker keeps for a check's second pass (memo.h, pair.h).
 * server/api/ includes none of them itself (tests/test_api_corpus.py). */
#ifndef ND_CORPUS_H
#define ND_CORPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed.h"
#include "import.h"
#include "memo.h"
#include "pair.h"
#include "registry.h"
#include "store.h"

typedef struct nd_corpus nd_corpus;

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
    void (*stats)(const nd_corpus *c, nd_registry_stats *out);
    int (*digest)(nd_corpus *c, uint64_t *documents, uint64_t *digest);
    /* documents */
    int (*check)(nd_corpus *c, const nd_check_req *rq, const nd_question *q,
                 const nd_question_scratch *qs, nd_check_res *res, nd_registry_done_fn done,
                 void *arg);
    int (*complete)(nd_corpus *c, nd_reg_change *ch, int status);
    int (*get)(nd_corpus *c, const char *id, size_t id_len, nd_doc **out);
    const char *(*doc_version)(const nd_corpus *c, const nd_doc *d);
    int (*remove)(nd_corpus *c, const char *id, size_t id_len, nd_reg_audit_fn audit,
                  void *audit_arg, nd_registry_done_fn done, void *arg);
    int (*change_policy)(nd_corpus *c, const char *id, size_t id_len, nd_claim_decide_fn decide,
                         void *decide_arg, nd_registry_done_fn done, void *arg);
    int (*change_status)(nd_corpus *c, const char *id, size_t id_len, int status, unsigned k,
                         const nd_verdict_params *params, nd_claim_decide_fn decide,
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

/* True while the storage takes writes (store.h's nd_store_writable()). */
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
static inline void nd_corpus_stats(const nd_corpus *c, nd_registry_stats *out)
{
    c->ops->stats(c, out);
}

/* The committed documents' count and digest (registry's nd_registry_digest()):
 * 0, or -EAGAIN while loading. */
static inline int nd_corpus_digest(nd_corpus *c, uint64_t *documents, uint64_t *digest)
{
    return c->ops->digest(c, documents, digest);
}

/* ---- documents (registry.h gives each call's results in full) ---- */

/* nd_registry_check(): checks rq, registering it when original and asked. */
static inline int nd_corpus_check(nd_corpus *c, const nd_check_req *rq, const nd_question *q,
                                  const nd_question_scratch *qs, nd_check_res *res,
                                  nd_registry_done_fn done, void *arg)
{
    return c->ops->check(c, rq, q, qs, res, done, arg);
}

/* nd_registry_complete(): finishes a queued change on the caller's thread
 * (frees ch); 0, or the store's status. */
static inline int nd_corpus_complete(nd_corpus *c, nd_reg_change *ch, int status)
{
    return c->ops->complete(c, ch, status);
}

/* nd_registry_get(): 0 and a new reference in *out (nd_doc_release()),
 * -ENOENT or -EAGAIN. */
static inline int nd_corpus_get(nd_corpus *c, const char *id, size_t id_len, nd_doc **out)
{
    return c->ops->get(c, id, id_len, out);
}

/* The fingerprint version of d (static or borrowed from the corpus). */
static inline const char *nd_corpus_doc_version(const nd_corpus *c, const nd_doc *d)
{
    return c->ops->doc_version(c, d);
}

/* nd_registry_delete(). */
static inline int nd_corpus_delete(nd_corpus *c, const char *id, size_t id_len,
                                   nd_reg_audit_fn audit, void *audit_arg,
                                   nd_registry_done_fn done, void *arg)
{
    return c->ops->remove(c, id, id_len, audit, audit_arg, done, arg);
}

/* nd_registry_change_policy(). */
static inline int nd_corpus_change_policy(nd_corpus *c, const char *id, size_t id_len,
                                          nd_claim_decide_fn decide, void *decide_arg,
                                          nd_registry_done_fn done, void *arg)
{
    return c->ops->change_policy(c, id, id_len, decide, decide_arg, done, arg);
}

/* nd_registry_change_status(). */
static inline int nd_corpus_change_status(nd_corpus *c, const char *id, size_t id_len, int status,
                                          unsigned k, const nd_verdict_params *params,
                                          nd_claim_decide_fn decide, void *decide_arg,
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

/* ---- what is kept with them (store.h gives each call's results) ---- */

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
