/* feed.h - the event feed: what a platform is told of the journals' writes.
 *
 * Every journal write that a platform acts on (a copy detected, a claim
 * revoked or restored, a policy changed, a document deleted, an import
 * finished) is also written, in the same store transaction, as one event
 * of the feed under the next sequence number (1, 2, ...: increasing, never
 * reused). The feed is what GET /events pages through and what webhooks
 * deliver. This file pair owns the events' types, their stored value
 * layout and their JSON form; both stores (LMDB, memory) use it.
 *
 * Pure functions: no state, any thread. */
#ifndef ND_FEED_H
#define ND_FEED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store_values.h" /* nd_store_event, nd_record */

/* An event's type (its name: nd_feed_type_name()). */
typedef enum nd_feed_type {
    ND_FEED_NONE = 0, /* a journal write the feed does not show */
    ND_FEED_COPY_DETECTED = 1,
    ND_FEED_CLAIM_REVOKED = 2,
    ND_FEED_CLAIM_RESTORED = 3,
    ND_FEED_POLICY_CHANGED = 4,
    ND_FEED_DOCUMENT_DELETED = 5,
    ND_FEED_IMPORT_FINISHED = 6,
} nd_feed_type;
#define ND_FEED_TYPES 7 /* one past the greatest type */

/* One event of the feed. Handed to a visit, every pointer points into the
 * store and is valid only during that call. */
typedef struct nd_event_rec {
    uint64_t seq;        /* its place in the feed, >= 1 */
    int64_t at_us;       /* when it was written (wall clock, UTC us) */
    nd_feed_type type;   /* never ND_FEED_NONE */
    const char *account; /* the account it concerns (the original's owner
                          * for a copy, the document's account otherwise),
                          * account_len bytes, or NULL with 0: none */
    size_t account_len;
    const char *data; /* its details: a compact JSON object text of
                       * data_len bytes, NUL-terminated */
    size_t data_len;
} nd_event_rec;

/* The name of type ("copy.detected", ...), or NULL for ND_FEED_NONE and
 * values out of range. */
const char *nd_feed_type_name(nd_feed_type type);

/* The type named by s (len bytes), or ND_FEED_NONE. */
nd_feed_type nd_feed_type_parse(const char *s, size_t len);

/* The type of a journal write: a detection is a copy; an audit entry is
 * typed by its "action" member (revoke, restore, policy, delete, import;
 * other actions are not shown: ND_FEED_NONE). */
nd_feed_type nd_feed_type_of(const nd_store_event *ev);

/* The data of a copy.detected event: the detection ev (its value as the
 * API writes it: {"id","account"?,"kind","resemblance","containment",
 * "distance"}) and its original (NULL: not readable) composed as
 * {"copy":{"id","account"},"original":{"id","registered_at","account"},
 * "kind","resemblance","containment","distance"}. Returns a new compact
 * JSON text (free() it) with *len, or NULL (no memory). */
char *nd_feed_detection_data(const nd_store_event *ev, const nd_record *original, size_t *len);

/* The feed's event for the journal write jev (seq 0: the store gives it):
 * its type, time, the account of subject (the record it concerns: the
 * original of a detection, the document of an audit entry; NULL: none
 * known) and its data (a detection's composed, an audit entry's value).
 * Returns 1 with *ev filled (its pointers into jev, subject and *owned: a
 * text to free() once ev is used, or NULL), 0 when the feed does not show
 * jev, or -ENOMEM. */
int nd_feed_event_of(const nd_store_event *jev, const nd_record *subject, nd_event_rec *ev,
                     char **owned);

/* The stored value of an event (its seq is the key): layout byte, type
 * byte, at_us (8, little-endian), u16 account length, the account, the
 * data text, NUL. */
size_t nd_feed_value_size(const nd_event_rec *ev);
void nd_feed_value_encode(unsigned char *p, const nd_event_rec *ev);

/* Fills ev from the stored value p of n bytes under seq (pointers into
 * p). Returns 0 or -EBADMSG. */
int nd_feed_value_decode(uint64_t seq, const unsigned char *p, size_t n, nd_event_rec *ev);

/* The event's id as the API and webhooks show it ("evt_" and 16 lowercase
 * hex digits of seq), written into out with its NUL. */
#define ND_EVENT_ID_LEN 20
void nd_event_id(uint64_t seq, char out[ND_EVENT_ID_LEN + 1]);

/* The longest head nd_event_json_head() writes: its members but the
 * account (under 160 bytes) and the account escaped (6 bytes a byte at
 * most). */
#define ND_EVENT_HEAD_MAX (192 + 6 * ND_ACCOUNT_MAX)

/* Writes the event's JSON object up to its data, {"id":"evt_...","seq":N,
 * "type":"...","at":"...","account":"..."|null,"data": (no NUL), into out
 * (ND_EVENT_HEAD_MAX bytes). Returns its length. Does not allocate. */
size_t nd_event_json_head(const nd_event_rec *ev, char *out);

/* The event's data as it is stored (a compact JSON object text, written by
 * this file's callers), in *data and *len: pointers into ev, or "{}" when
 * the stored text is not an object (a damaged value). The data is spliced
 * into answers as it is: never parsed and dumped again. */
void nd_event_data(const nd_event_rec *ev, const char **data, size_t *len);

/* The event as one compact JSON object: nd_event_json_head(), its data
 * (nd_event_data()) and "}". Returns a new text (free() it) with *len, or
 * NULL (no memory). */
char *nd_event_json(const nd_event_rec *ev, size_t *len);

#endif
