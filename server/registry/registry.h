/* registry.h - the registered documents in memory: id -> record, a slot per
 * record, the fingerprint index over the slots, and the registration path
 * through the durable store.
 *
 * Concurrency (memcached's split: the writer lock serialises changes, lookups
 * take references the caller releases):
 * - One writer mutex serialises every change: the atomic "query the index,
 *   decide, insert into the index and the id map as pending, queue the store
 *   write" of a registration, deletions, and start-up loading. Because the
 *   decision and the insertion happen under one lock, of two near-duplicates
 *   registered at the same moment exactly one is original.
 * - Queries that do not register read the index without any lock (nd_index
 *   allows readers next to its one writer) and take a read lock on the
 *   id/slot tables only to take references on the documents they found.
 * - Every nd_doc handed out is a new reference: release it with
 *   nd_doc_release(), from any thread.
 *
 * Durability: a registration or deletion is acknowledged only after the
 * store (store.h: LMDB, or the memory store) reports it committed. A store
 * that commits within the call that queues the change (the memory store)
 * has it finished in place: the call answers at once (0). Otherwise (LMDB)
 * the done callback given to nd_registry_check()/nd_registry_delete() is
 * called exactly once, from the commit thread (or from whichever thread
 * completed a change the caller was waiting behind); it must only hand the
 * result to the caller's own thread, which then calls
 * nd_registry_complete(). */
#ifndef ND_REGISTRY_H
#define ND_REGISTRY_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anchor_index.h"
#include "claim.h"
#include "config.h"
#include "docs.h"
#include "fingerprint.h"
#include "index.h"
#include "question.h"
#include "registry_options.h"
#include "request.h"
#include "sketch.h"
#include "store.h"
#include "verdict.h"
#include "change.h"

/* The document (nd_doc, its references, lookups by id, the counts):
 * docs.h. The answer to a check (nd_check_res, nd_match, the verdict):
 * verdict.h. The options: registry_options.h. */

/* A check reaches the registry as three shapes (each borrowed for the
 * call): what was parsed (nd_check_req, request.h), the question made of
 * its text (nd_question: values, question.h) and, beside it, the asking
 * thread's sketches of the text (nd_question_scratch; NULL: none, every
 * SimHash hit within k counts, unverified). */

/* The most a given registration time (rq->registered_at_us) may lie ahead
 * of the server's clock: 5 minutes, for the skew between the clock of the
 * system that dated a document and this server's. */
#define ND_REGISTRY_AHEAD_US (5LL * 60 * 1000000)

/* Called during nd_registry_load() at most every progress_ms and at the end. */
typedef void (*nd_registry_progress_fn)(void *arg, uint64_t loaded, uint64_t total, uint64_t stale);

/* Creates an empty registry over store (borrowed, required: the LMDB store
 * or the memory store, whose changes complete at once). The registry is not
 * "loaded" until nd_registry_load() (or nd_registry_set_loaded() when there
 * is nothing to load) has run. Returns 0 and a new registry (free with
 * nd_registry_destroy()), -EINVAL (no store) or -ENOMEM. */
int nd_registry_create(nd_registry **out, nd_store *store, const nd_registry_options *opts);

/* Frees the registry and every document without a reference. No other
 * thread may use it; queued changes must have completed. NULL is allowed. */
void nd_registry_destroy(nd_registry *reg);

/* Rebuilds the documents from the store (one consistent scan, in
 * registration order). Records of another fingerprint version are kept by
 * id but left out of the index (nd_registry_stale_versions() lists them);
 * a record whose id was seen earlier in the scan is skipped (counted in
 * stats.duplicates). The clock continues after the greatest time loaded.
 * Built for millions of records: the id table and slots are sized from the
 * store's count, documents are carved from large arena blocks (returned by
 * nd_registry_destroy(), so no reference to a loaded document may outlive
 * the registry; a loaded document that is deleted keeps its bytes until
 * then), the anchor index is filled as each document is linked (an
 * nd_anchor_loader, finished after the scan) and the SimHash index is built
 * with one nd_index_insert_many() at the end. Lives in loader.c.
 * Calls progress at most every progress_ms and once at the end. Returns 0
 * and marks the registry loaded; -ECANCELED if *stop became true;
 * ND_REG_TOO_MANY_VERSIONS (records of more than 255 fingerprint versions
 * other than this build's); ND_REG_TOO_MANY_DOCS (more records than
 * ND_REG_DOCS_MAX); or the store's -errno / -ENOMEM (then the registry
 * stays not loaded). nd_registry_load_error() words any of them. */
#define ND_REG_TOO_MANY_VERSIONS (-ENOSPC)

/* What a failed nd_registry_load() met, for a log line: a static string. */
const char *nd_registry_load_error(int rc);

int nd_registry_load(nd_registry *reg, nd_registry_progress_fn progress, void *arg,
                     unsigned progress_ms, const atomic_bool *stop);

/* Marks an in-memory registry loaded. */
void nd_registry_set_loaded(nd_registry *reg);

/* Shutdown: from now on nd_registry_check() and
 * nd_registry_delete() return -ESHUTDOWN at once, without touching the
 * store, so that the store can be closed and freed while requests that
 * waited behind a change retry (they answer 503 shutting_down). Changes
 * already queued still complete with nd_registry_complete(). Any thread. */
void nd_registry_shutdown(nd_registry *reg);

/* Answers the check rq asking the question q (qs: its sketches), and
 * when original and rq->do_register, registers the document in the same
 * step (with q's fingerprint, text hash, stored anchors and encoded
 * sketch). Fills res (release it with
 * nd_check_res_release()). A registration stores rq->account and
 * rq->policy with the document (status active). rq->registered_at_us > 0
 * (an import) registers at that time instead of the clock's, raised by
 * 1 us while a document (stored or in flight) holds it; then only documents
 * registered before it are evidence, as for a re-check of a registered
 * id, unless rq->judge_live (every document is, as for a live check). A
 * given time later than the clock + ND_REGISTRY_AHEAD_US is -ERANGE.
 * Returns:
 * An id held by a document of another fingerprint version with the same
 * text is upgraded in place (same registered_at, the current fingerprint;
 * nd_store_replace()): answered as an existing document, ND_REG_QUEUED.
 *   0              answered; res is complete.
 *   0              also: registered, when the store committed it within
 *                  the call (res->registered).
 *   ND_REG_QUEUED  registered in memory, store write queued; res holds the
 *                  answer to give once nd_registry_complete() returns 0.
 *   ND_REG_WAIT    the id has a registration or deletion in flight, or (a
 *                  registration) no committed document is evidence but one
 *                  waiting for its commit would be: asked again after it.
 * Documents waiting for their first commit are never evidence nor
 * reported (a query skips them; a query by the id of one answers as for an
 * unknown id). The verdict is exact however many documents lie within k
 * (then truncated only cuts the list).
 *   -EEXIST        the id holds a different text, or (registering) the
 *                  same text under another account or with other meta:
 *                  res->conflict says which (enum nd_conflict); nothing
 *                  was changed, res is otherwise empty.
 *   -EAGAIN        still loading.
 *   -ENOMEM, or the store's -errno (e.g. -ESHUTDOWN) when the write could not
 *                  be queued (nothing was registered). */
int nd_registry_check(nd_registry *reg, const nd_check_req *rq, const nd_question *q,
                      const nd_question_scratch *qs, nd_check_res *res, nd_registry_done_fn done,
                      void *arg);

/* Makes room for extra more documents in the id and slot tables, ahead of
 * a bulk registration (an import), so that its registrations do not stop
 * to grow them on the way: growing the id table rehashes every document
 * held (~1 s of the importing thread at 6M documents, with the writer
 * held). Returns 0, ND_REG_TOO_MANY_DOCS (past ND_REG_DOCS_MAX) or -ENOMEM; either way
 * the documents are as they were. */
int nd_registry_reserve(nd_registry *reg, uint64_t extra);

/* Finishes a queued change with the store's status, on the caller's thread:
 * makes a registration live or undoes it, removes a deleted document or
 * keeps it, and wakes the requests waiting behind it. Frees ch. Returns 0
 * when the change took effect, else the store's status (e.g. -ENOSPC). */
int nd_registry_complete(nd_registry *reg, nd_reg_change *ch, int status);

/* Builds the audit entry of a change of document d (writer held, before
 * the store write): fills *ev (an ND_EVENT_AUDIT event) and returns its
 * value (new: the registry frees it once queued), or NULL for none. */
typedef char *(*nd_reg_audit_fn)(void *arg, const nd_doc *d, nd_store_event *ev);

/* Deletes the document id, with its detections; when audit is not NULL,
 * the entry audit(audit_arg, d, ...) builds is written in the deletion's
 * store transaction. Returns 0 (deleted: the store committed it within
 * the call),
 * ND_REG_QUEUED, ND_REG_WAIT, -ENOENT (no such id), -EAGAIN (loading), or
 * the store's -errno when the deletion could not be queued. */
int nd_registry_delete(nd_registry *reg, const char *id, size_t id_len, nd_reg_audit_fn audit,
                       void *audit_arg, nd_registry_done_fn done, void *arg);

/* Replaces the policy of document id by policy[0..policy_len) (compact
 * JSON as claim.h reads it, validated by the caller; NULL/0: none) and, when
 * audit is not NULL (an ND_EVENT_AUDIT event), writes that audit entry in
 * the same store transaction (nd_store_amend()). The document is replaced
 * by a new nd_doc (same id, slot, registered_at, the rest copied) once the
 * store commits; until then readers see the old one, and other changes of
 * the id wait behind it. Always writes (a PUT of the same policy too).
 * Returns as nd_registry_delete(): 0 (done: the store committed within the
 * call), ND_REG_QUEUED, ND_REG_WAIT, -ENOENT (no such id), -EAGAIN
 * (loading), -ESHUTDOWN, -EINVAL (policy over ND_POLICY_MAX), or the
 * store's -errno when the change could not be queued. */
int nd_registry_set_policy(nd_registry *reg, const char *id, size_t id_len, const char *policy,
                           size_t policy_len, const nd_store_event *audit, nd_registry_done_fn done,
                           void *arg);

/* Sets the claim status of document id (ND_CLAIM_ACTIVE: restore,
 * ND_CLAIM_REVOKED: revoke) as nd_registry_set_policy() sets a policy. A
 * restore also supersedes the documents it predates (nd_claim_change);
 * while it is in flight their changes wait behind it too.
 * When the document has that status already: 0 at once, nothing written
 * (no audit entry). -EINVAL for another status value. */
int nd_registry_set_status(nd_registry *reg, const char *id, size_t id_len, int status,
                           const nd_store_event *audit, nd_registry_done_fn done, void *arg);

/* A change of a document's claim decided on the document as it is when the
 * change is made (writer held), not as a caller read it before: a policy
 * PATCH merges into the current policy, and its audit entry names the
 * policy actually replaced; a restore lists the documents it now predates.
 * The registry fills the inputs and calls decide(decide_arg, c) once per
 * attempt (again after ND_REG_WAIT or a retry: on the newer state). */
typedef struct nd_claim_change {
    /* In: */
    const nd_doc *doc; /* the live document: its policy and status now */
    /* A restore (of a revoked or superseded claim): the active documents
     * of other accounts registered after it that are near-duplicates of it
     * (SimHash within the k given, verified with the sketches), earliest
     * first, at most the registry's max_matches (more: predated_truncated).
     * The restore makes them (up to ND_STORE_SUPERSEDE_MAX, the listed ones
     * first) ND_CLAIM_SUPERSEDED in its store transaction; checks of their
     * texts name this document as the source again. Borrowed for the
     * call. */
    nd_doc *const *predated;
    size_t npredated;
    bool predated_truncated;
    /* Out: */
    const char *policy; /* a policy change: the new policy, policy_len bytes
                         * (NULL: none), valid until the change's done */
    size_t policy_len;
    const nd_store_event *audit; /* the audit entry (NULL: none), valid
                                  * until the change's done */
} nd_claim_change;

/* Sets *c's outputs; returns 0, or a negative value the change call
 * returns as it is (nothing changed). */
typedef int (*nd_claim_decide_fn)(void *arg, nd_claim_change *c);

/* nd_registry_set_policy() with the policy and the audit entry decided by
 * decide on the current document (its output policy over ND_POLICY_MAX:
 * -EINVAL). Returns as nd_registry_set_policy(), or decide's error. */
int nd_registry_change_policy(nd_registry *reg, const char *id, size_t id_len,
                              nd_claim_decide_fn decide, void *decide_arg, nd_registry_done_fn done,
                              void *arg);

/* nd_registry_set_status() with the audit entry decided by decide on the
 * current document; a restore of a revoked claim fills c->predated (k:
 * the SimHash distance, params: the thresholds a check verifies with;
 * params NULL: the defaults). decide is not called when the status is
 * already the one asked for (0, nothing written). Returns as
 * nd_registry_set_status(), or decide's error. */
int nd_registry_change_status(nd_registry *reg, const char *id, size_t id_len, int status,
                              unsigned k, const nd_verdict_params *params,
                              nd_claim_decide_fn decide, void *decide_arg, nd_registry_done_fn done,
                              void *arg);

/* Applies a change read from the replication stream, decided by
 * the node that published it: kind ND_STORE_PUT (a registration; rec
 * complete, with anchors and sketch), ND_STORE_REPLACE (an upgrade of the
 * id's document at rec->registered_at_us), ND_STORE_DELETE (rec: id,
 * registered_at_us) or ND_STORE_AMEND (rec: the record with its new claim;
 * rec->supersede: the documents it supersedes, each only when held with
 * that id and time and active); audit: the change's audit event (a put,
 * delete or amend) or NULL. rec->stream_seq (> 0, required) is
 * written with the change in the same store transaction. No verdict is
 * made: the stream's order decided. Returns:
 *   ND_REG_QUEUED  applied in memory (pending), store write queued: done
 *                  follows as for nd_registry_check().
 *   0              applied within the call (a store that commits in its
 *                  call), or nothing to do (the same registration is here
 *                  already, a deletion of a document that is gone).
 *   ND_REG_WAIT    a local change of the id is in flight: apply again
 *                  when done(arg, NULL, 0) says so.
 *   -EEXIST        the id holds another registration (the logs diverged).
 *   -ENOENT        an upgrade or amendment of a document that is not here.
 *   -EINVAL, -ENOMEM, -EAGAIN (loading), -ESHUTDOWN, or the store's
 *                  -errno (nothing applied). */
int nd_registry_apply(nd_registry *reg, nd_store_change kind, const nd_record *rec,
                      const nd_store_event *audit, nd_registry_done_fn done, void *arg);

/* Fills out[0..cap) with the fingerprint versions other than the current
 * one that nd_registry_load() loaded documents of (a version seen only in
 * records skipped as repeated ids is left out), in order of first
 * appearance, and
 * returns how many there are (may exceed cap). Call after loading (it
 * reads what the loader wrote without a lock). Does not allocate. */
size_t nd_registry_stale_versions(const nd_registry *reg, nd_registry_version_count *out,
                                  size_t cap);

#endif
