/* store_values.h - the values a store's callers hand it and get back,
 * without the store: the limits of a record's fields, a claim's status,
 * the record (nd_record), what a write does, the journals' events
 * (nd_store_event) and a write's done callback. store.h's interface takes
 * them (and includes this); a caller that only passes these values on (the
 * corpus's interface, the events feed) includes this alone. */
#ifndef ND_STORE_VALUES_H
#define ND_STORE_VALUES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ND_ID_MAX 1024            /* longest document id, bytes (the API takes 256 characters) */
#define ND_VERSION_MAX 32         /* longest fingerprint version string, bytes */
#define ND_META_MAX (16u << 20)   /* longest meta text, bytes */
#define ND_STORE_ANCHORS_MAX 255  /* most anchors in a record */
#define ND_STORE_SKETCH_MAX 4096  /* longest encoded sketch, bytes */
#define ND_ACCOUNT_MAX 1024       /* longest account, bytes (the API takes 256 characters) */
#define ND_POLICY_MAX (64u << 10) /* longest policy text, bytes */
#define ND_CLIENT_MAX 64          /* longest registering client's name, bytes */
#define ND_EVENT_VALUE_MAX (64u << 10)     /* longest event value text, bytes */
#define ND_EVENT_AT_MAX ((int64_t)1 << 62) /* latest event time, us */

/* A claim's status (nd_record.status; the registry's claim rule reads
 * it too: claim.h). */
enum nd_claim_status {
    ND_CLAIM_ACTIVE = 0,
    ND_CLAIM_REVOKED = 1,
    ND_CLAIM_SUPERSEDED = 2, /* a later original of a text whose earlier claim
                              * was restored (still evidence) */
};

/* The most records one amendment supersedes (nd_record.supersede). */
#define ND_STORE_SUPERSEDE_MAX 256

/* A stored record named by its key and id. */
typedef struct nd_record_ref {
    int64_t registered_at_us;
    const char *id; /* id_len bytes, 1..ND_ID_MAX */
    size_t id_len;
} nd_record_ref;

/* One registered document. In calls that take a record, every pointer is
 * borrowed for the duration of the call (the store copies what it keeps). */
typedef struct nd_record {
    const char *id; /* document id, id_len bytes, 1..ND_ID_MAX */
    size_t id_len;
    uint64_t simhash;
    const char *version;      /* fingerprint algorithm version, NUL-terminated */
    int64_t registered_at_us; /* server clock, UTC microseconds since the epoch */
    uint32_t chars;           /* characters after normalization */
    uint8_t text_hash[16];    /* XXH3-128 of the submitted text (idempotency) */
    const char *meta;         /* compact JSON object text, or NULL */
    size_t meta_len;
    const uint8_t *anchors; /* nanchors x 4 bytes (little-endian u32), kept in
                               * the record (a scan hands them out: start-up
                               * rebuilds the anchor index); NULL when none */
    uint32_t nanchors;      /* 0..ND_STORE_ANCHORS_MAX */
    uint8_t status;         /* ND_CLAIM_ACTIVE (older layouts),
                             * ND_CLAIM_REVOKED or ND_CLAIM_SUPERSEDED */
    const uint8_t *sketch;  /* put/replace only: the encoded sketch, stored in
                               * the "sketches" database under the same key in
                               * the same transaction (scans never read it:
                               * nd_store_sketches() does); NULL: none (a replace
                               * then removes the stored one) */
    size_t sketch_len;      /* 0..ND_STORE_SKETCH_MAX */
    const char *account;    /* the submitting account, account_len bytes
                               * (1..ND_ACCOUNT_MAX; a scan or get hands it
                               * out NUL-terminated), or NULL with 0 (none:
                               * records of older layouts, anonymous ones;
                               * account_len 0 means none) */
    size_t account_len;
    const char *policy; /* the reprint policy, compact JSON text of
                               * policy_len bytes (0..ND_POLICY_MAX; handed out
                               * NUL-terminated), or NULL (none) */
    size_t policy_len;
    const char *client; /* the named client (a token without a role) that
                         * registered it, client_len bytes (1..ND_CLIENT_MAX;
                         * a scan or get hands it out NUL-terminated), or
                         * NULL with 0 (none: registered by an operator, an
                         * account token or anonymously, or an older layout).
                         * Only the store keeps it: read it back with
                         * nd_store_get() when ownership matters */
    size_t client_len;
    uint64_t stream_seq;            /* put/replace/amend only: the replication stream's
                          * sequence of this write, written with
                          * it in the same transaction (nd_store_stream_seq()
                          * returns the greatest committed); 0: a local change
                          * (a replicated store publishes it first). Scans
                          * and gets hand out 0 */
    int64_t superseded_by_us;       /* ND_CLAIM_SUPERSEDED: the registered_at_us
                               * of the record whose amendment superseded
                               * it (kept with it); else ignored (handed out 0) */
    const nd_record_ref *supersede; /* amend only: the records (at most
                               * ND_STORE_SUPERSEDE_MAX) whose status becomes
                               * ND_CLAIM_SUPERSEDED (superseded_by_us: this
                               * record's time) in the amendment's
                               * transaction, each only if it is stored with
                               * that id and is ND_CLAIM_ACTIVE then (others
                               * are left as they are); NULL with 0: none
                               * (put and replace ignore it). Scans and
                               * gets hand out NULL, 0 */
    size_t nsupersede;
    const char *text; /* put/replace only: the text as submitted,
                                 * text_len bytes (0..ND_STORE_TEXT_MAX; any
                                 * bytes), kept packed (text_pack.h: zstd) in
                                 * the "texts" database under the same key in
                                 * the same transaction as the record (both or
                                 * neither), deleted with it, left by an amend;
                                 * read back with nd_store_text(). The store packs
                                 * it in the caller's thread. NULL (and
                                 * text_packed NULL): none kept (a replace then
                                 * removes the stored one). Scans and gets hand
                                 * out NULL, 0 */
    size_t text_len;
    const uint8_t *text_packed; /* put/replace only, instead of text: the text
                                 * already packed by nd_text_pack() (a replica's
                                 * stream entry carries these bytes), kept as
                                 * they are; its header must pass
                                 * nd_text_packed_len(). NULL: text is packed.
                                 * Scans and gets hand out NULL, 0 */
    size_t text_packed_len;
} nd_record;

#define ND_STORE_TEXT_MAX ((size_t)1024 << 20) /* longest kept text, bytes (--max-text's largest) */

/* ---- the interface ---- */

/* What a write does (a replication stream write's kind, replica/entry.h). */
typedef enum nd_store_change {
    ND_STORE_PUT = 1,
    ND_STORE_REPLACE = 2,
    ND_STORE_DELETE = 3,
    ND_STORE_AMEND = 4, /* nd_store_amend(): rec without its sketch (NULL, 0:
                         * the stored one is unchanged) */
    ND_STORE_EVENT = 5, /* nd_store_event_put(): a journal write (a replicated
                         * stream's entry carries its copy id as rec.id) */
} nd_store_change;

/* The journals kept next to the records (see nd_store_event_put). */
typedef enum nd_event_kind {
    ND_EVENT_DETECTION = 1, /* a copy found of an original (owner_at: the
                             * original's registered_at_us) */
    ND_EVENT_AUDIT = 2,     /* a change of state, who did it (owner_at: 0 as
                             * the API uses it; any value >= 0 is kept). A
                             * value that is a JSON object with a string
                             * member "document" is indexed by it
                             * (nd_store_audit_of()) */
} nd_event_kind;

/* One journal entry. In calls that take one, every pointer is borrowed for
 * the call (the store copies it); one handed to a visit points into the
 * store and is valid only during that call. */
typedef struct nd_store_event {
    nd_event_kind kind;
    int64_t owner_at;    /* the journal it belongs to, >= 0 */
    int64_t at_us;       /* when, 0..ND_EVENT_AT_MAX; the store makes (kind, owner_at, at_us)
                       * unique by raising at_us by 1 us while it is taken
                       * (a visit sees the time stored) */
    const char *copy_id; /* DETECTION: the copy's id, 1..ND_ID_MAX bytes; an
                          * earlier detection of the same (owner_at, copy_id)
                          * is updated in place: its value is replaced, its
                          * at_us (the first detection) stays. AUDIT: NULL, 0 */
    size_t copy_id_len;
    const char *value; /* the entry's fields, compact JSON text of value_len
                        * bytes (0..ND_EVENT_VALUE_MAX), or NULL with 0;
                        * handed out never NULL, NUL-terminated */
    size_t value_len;
    uint64_t stream_seq; /* nd_store_event_put() only: the replication stream's
                          * position of this write, written in the same
                          * transaction (as nd_record.stream_seq); 0: a local
                          * write. Visits hand out 0 */
} nd_store_event;

typedef void (*nd_store_done_fn)(void *arg, int status);

#endif
