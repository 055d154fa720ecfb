/* backfill.h - POST /import: a running server takes the JSON
 * lines of an archive, as `neardup import` reads them (import.h), and
 * answers once every registration and detection of them is durable.
 *
 * One import at a time, on a thread of its own: the handler copies the
 * body and starts the thread, which runs nd_import_run() (the registry
 * serialises registrations anyway) and posts the answer back to the
 * request's worker, whose loop stays free for other clients meanwhile.
 * At shutdown nd_backfill_stop() makes a running import stop after its
 * current batch (answered 503 shutting_down with what was done; every line
 * it judged is durable and a re-sent body finishes it) and waits for it. */
#ifndef ND_BACKFILL_H
#define ND_BACKFILL_H

#include "corpus.h"
#include "http.h"
#include "reply.h"
#include "request.h"

typedef struct nd_backfill nd_backfill;

/* Creates the one-import-at-a-time state (nd_api.backfill). Returns 0 or
 * -ENOMEM. */
int nd_backfill_create(nd_backfill **out);

/* Makes a running import stop and waits until its thread has posted its
 * answer (the worker loops must still run to write it). Further imports
 * are refused (503 shutting_down). Main thread; NULL is allowed. */
void nd_backfill_stop(nd_backfill *bf);

/* Frees bf after nd_backfill_stop(); NULL is allowed. */
void nd_backfill_destroy(nd_backfill *bf);

/* Writes one event of an import (a duplicate: {"line","id","source",
 * "copied_share"}, the share as /check-original writes it; a
 * refused line: {"line","id","code","message"}) as a value with w; the
 * answer's "events" items and the lines `neardup import` prints. */
void nd_backfill_write_event(nd_reply *w, const nd_import_event *ev);

/* Writes "summary": {"lines",...,"seconds","complete"} as a member with w. */
void nd_backfill_write_summary(nd_reply *w, const nd_import_summary *s, bool complete);

/* The route handler of POST /import. */
void nd_backfill_handle(nd_req *r);

/* The detection of a line judged not original, for
 * nd_import_params.detection (the same entry a /check-original with an id
 * records): the value (new, caller frees) with *ev filled, or NULL. */
char *nd_backfill_detection(const nd_check_req *rq, const nd_check_res *res, nd_store_event *ev);

#endif
