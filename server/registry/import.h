/* import.h - the day-one backfill of an archive: JSON lines of an existing
 * archive registered through the same registry check as /check-original.
 *
 * A line is {"id", "text", "account"?, "registered_at"?, "meta"?,
 * "reprint"?, "whitelist"?} (the fields of a /check-original body, read by
 * the same parser, plus registered_at: RFC 3339 as the answers give it, or
 * integer microseconds since the epoch, from 1970-01-01T00:00:00.000001Z to
 * at most ND_REGISTRY_AHEAD_US after the clock; 0, a leap second, a time
 * after 9999 or in the future is a refused line). Lines are judged in registered_at
 * order (stable for ties; lines without one after all others, in file
 * order). Each is a registration: an original is registered under its
 * registered_at (none: the clock's), a line judged not original is
 * reported as a duplicate (with its source, the earliest claim among the
 * evidence) and recorded as a detection of that source (params.detection);
 * an id already holding the same text counts as existing, so that
 * re-running an import cut off by a kill finishes it. A store that sheds
 * (the server's: queue full) slows the import down, never fails it.
 *
 * Work split: a pass over the bytes finds the lines and their times
 * (split over the threads), then the threads parse, fingerprint and sketch
 * the lines in batches, in order, ahead of the calling thread, which alone
 * asks the registry (the registry serialises registrations anyway) and
 * completes the store's commits. Used by `neardup import` (a file, many
 * threads) and by POST /import (a body, the handler's own thread).
 *
 * A line whose verdict waits on a document still being written (a re-post
 * close behind its source: documents waiting for their commit are never
 * evidence) is set aside until that commit instead of holding the lines
 * after it up. Once the document commits the line is judged "not
 * original", so it registers nothing another line could see; the lines
 * judged ahead of it are those registered strictly after the time it is
 * judged at, with another id. Anything else waits for it. The outcome is
 * the one of judging in order (10M lines with 0.1 % close re-posts: the
 * wait had held the importing thread ~15 % of the time). */
#ifndef ND_IMPORT_H
#define ND_IMPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "fingerprint.h"
#include "import_lines.h"
#include "request.h"
#include "sketch.h"
#include "store_values.h" /* nd_store_event */
#include "verdict.h"      /* nd_check_res */

typedef struct nd_registry nd_registry; /* registry.h */
typedef struct nd_store nd_store;       /* store.h */

typedef struct nd_import_params {
    nd_request_limits lim;   /* as the server's (nd_import_params_init()) */
    unsigned min_chars;      /* shorter texts: error text_too_short */
    unsigned threads;        /* parsing and sketching threads; 0: the caller's */
    FILE *progress;          /* draw a progress bar here (a terminal), or NULL */
    const atomic_bool *stop; /* optional: stop taking lines once true */
    /* Optional, shared by every thread of the import (both are immutable
     * once made): the fingerprinter and the sketcher. NULL: the import
     * makes its own (a few milliseconds). */
    const nd_fingerprinter *fp;
    const nd_sketcher *sk;
    /* The detection of a line judged not original, as the store keeps it
     * (server/api: nd_backfill_detection()): the value (new, freed by the
     * import) with *ev filled, or NULL for none. NULL: none recorded. */
    char *(*detection)(const nd_check_req *rq, const nd_check_res *res, nd_store_event *ev);
    /* Predate (asked for explicitly): a line's registered_at is judged
     * against the documents registered before it only, even where the
     * registry held documents when the import began, so that a backdated
     * line may outrank a stored document it copies; each document so
     * registered at a given time gets an audit entry
     * {"client": audit_client, "action": "import_predate", "document",
     * "detail": {"registered_at", "line"}}. Without it that is so only when
     * the registry was empty at the start (an archive's first import);
     * otherwise every document is evidence, as for a live check: a
     * backdated copy of a stored document is reported as its duplicate. */
    bool predate;
    const char *audit_client; /* borrowed; NULL: null */
    /* Times a line whose registration lost a race to another replica
     * (-ESTALE) is judged again on the newer state before the import
     * stops with -ESTALE (0: never, for a store without replicas). */
    unsigned stale_tries;
    /* The registering client stored with every document imported
     * (nd_check_req.client; borrowed for the import), or NULL with 0. */
    const char *client;
    size_t client_len;
    /* Pack each line's text on the preparing threads, for the store to
     * keep with a registration (the registry keeps it when its own
     * options.keep_text is set too). */
    bool keep_text;
} nd_import_params;

/* Fills p from a server configuration (the daemon's, or the defaults for
 * the CLI), threads 0, no progress, no stop. */
void nd_import_params_init(nd_import_params *p, const nd_config *cfg);

/* What happened to one line that was not simply imported or existing. */
typedef struct nd_import_event {
    bool duplicate; /* true: a duplicate; false: an error */
    uint64_t line;  /* 1-based line number in the input */
    const char *id; /* the line's id (NULL when it has none) */
    size_t id_len;
    const char *source; /* duplicate: the source's id (borrowed) */
    size_t source_len;
    double copied_share; /* duplicate: nd_check_res.copied_share, as
                          * /check-original answers it for the text */
    const char *code;    /* error: "invalid_json", "invalid_field", "text_too_short",
                          * "id_conflict", "storage_unavailable", ... */
    const char *message; /* error: for people */
} nd_import_event;

/* Called on the importing thread for each duplicate and error, in the
 * order the lines are judged (a line set aside, see above, is reported
 * when it is judged, after lines that follow it). Pointers are valid
 * during the call. */
typedef void (*nd_import_report_fn)(void *arg, const nd_import_event *ev);

typedef struct nd_import_summary {
    uint64_t lines;      /* non-blank lines */
    uint64_t imported;   /* registered now (committed) */
    uint64_t existing;   /* the id held the same text already */
    uint64_t duplicates; /* judged not original: reported, not registered */
    uint64_t errors;     /* refused lines */
    uint64_t detections; /* detections recorded (committed) */
    double seconds;      /* wall time of nd_import_run() */
} nd_import_summary;

/* Imports the JSON lines in buf[0..len) into reg (loaded, over st). The
 * caller must be the only one completing reg's changes for the changes it
 * queues (it does so itself, on this thread). Returns 0 when every line was
 * judged (out complete; refused lines are counted in out->errors), or a
 * fatal -errno: the store refused a write (-ENOSPC, -EIO, -ESHUTDOWN...) or
 * -ENOMEM or -ECANCELED (stop): lines after it were not judged, every
 * change queued has completed. Allocates its working memory (about 24
 * bytes per line plus the batches in flight). */
int nd_import_run(nd_registry *reg, nd_store *st, const char *buf, size_t len,
                  const nd_import_params *p, nd_import_report_fn report, void *arg,
                  nd_import_summary *out);

#endif
