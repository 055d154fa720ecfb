/* record.h - the bytes of a record and of a journal event (store.h's
 * nd_record and nd_store_event), in one place: the checks either must pass
 * before any store or stream takes it, the field-level helpers every
 * layout is written with, and the LMDB store's value layouts (a record's
 * value, layouts 2, 3 and 4; an event's value, layout 1: described in
 * record.c). The replication stream's entry layout (replica/entry.c) is
 * the other layout of the same record; it is built from these checks and
 * helpers, and is versioned with the stream, so it lives with the stream.
 *
 * Pure: no I/O, no allocation, no locks. */
#ifndef ND_RECORD_H
#define ND_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "store.h"

/* ---- checks ------------------------------------------------------------- */

/* True for a record id: non-NULL, 1..ND_ID_MAX bytes. */
bool nd_record_id_ok(const char *id, size_t id_len);

/* Checks rec for a put, a replace or an amend (every field within its
 * limit, no length without its pointer, a known status). Returns the
 * length of its version (1..ND_VERSION_MAX), or 0 when rec is refused. */
size_t nd_record_check(const nd_record *rec);

/* True when rec's supersede list (an amend's) is within
 * ND_STORE_SUPERSEDE_MAX and names each record by a valid id and a time. */
bool nd_record_refs_ok(const nd_record *rec);

/* True for an event a store may journal (nd_store_event_put): a detection
 * with a copy id, or an audit event without one; times and value in
 * their limits. */
bool nd_record_event_ok(const nd_store_event *ev);

/* True for the audit event that may go with a record change (NULL: none). */
bool nd_record_audit_ok(const nd_store_event *audit);

/* ---- field helpers -------------------------------------------------------- */

/* Little-endian n bytes (n <= 8) of v at p. */
static inline void nd_le_put(unsigned char *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* The little-endian n bytes (n <= 8) at p. */
static inline uint64_t nd_le_get(const unsigned char *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A time as 8 bytes big-endian (a key: bytewise order is numeric order). */
static inline void nd_key_put(unsigned char *p, int64_t t)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)((uint64_t)t >> (56 - 8 * i));
}

/* The time in the 8 big-endian bytes at p. */
static inline int64_t nd_key_get(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

/* Writes fields in order into a buffer sized beforehand. */
typedef struct nd_rec_writer {
    unsigned char *p;
} nd_rec_writer;

/* Writes n bytes of b (b may be NULL when n is 0). */
static inline void nd_rec_put_bytes(nd_rec_writer *w, const void *b, size_t n)
{
    if (n)
        memcpy(w->p, b, n);
    w->p += n;
}

/* Writes v as n little-endian bytes. */
static inline void nd_rec_put_u(nd_rec_writer *w, uint64_t v, unsigned n)
{
    nd_le_put(w->p, v, n);
    w->p += n;
}

/* Reads fields in order, never past end: a read past it sets bad and
 * gives 0 or NULL (the decode then refuses the bytes). */
typedef struct nd_rec_reader {
    const unsigned char *p, *end;
    bool bad;
} nd_rec_reader;

/* Reads n little-endian bytes (0 past the end). */
static inline uint64_t nd_rec_get_u(nd_rec_reader *r, unsigned n)
{
    if ((size_t)(r->end - r->p) < n) {
        r->bad = true;
        r->p = r->end;
        return 0;
    }
    uint64_t v = nd_le_get(r->p, n);
    r->p += n;
    return v;
}

/* Points at the next n bytes (NULL past the end). */
static inline const void *nd_rec_get_bytes(nd_rec_reader *r, size_t n)
{
    if ((size_t)(r->end - r->p) < n) {
        r->bad = true;
        r->p = r->end;
        return NULL;
    }
    const void *b = r->p;
    r->p += n;
    return b;
}

/* A length-prefixed optional field (prefix bytes of length + 1; 0: none,
 * given as NULL, 0). */
static inline const char *nd_rec_get_opt(nd_rec_reader *r, unsigned prefix, size_t *len)
{
    uint64_t n = nd_rec_get_u(r, prefix);
    *len = n ? (size_t)n - 1 : 0;
    if (!n)
        return NULL;
    const char *b = nd_rec_get_bytes(r, *len);
    return b ? b : "";
}

/* ---- the LMDB store's value layouts ------------------------------------------ */

#define ND_RECORD_KEY 8u /* a record's key: registered_at_us, big-endian */
#define ND_EVENT_KEY 16u /* an event's key: owner_at, at_us, big-endian */
#define ND_EVENT_VALUE_HDR                                                                         \
    3u /* an event value's bytes before the copy id: layout, u16 copy_id_len */

/* Bytes nd_record_value_encode() writes for r (vlen: its version's length,
 * from nd_record_check()). */
size_t nd_record_value_size(const nd_record *r, size_t vlen);

/* Writes r's value (layout 4 when a claim field or the client is set,
 * else layout 3) into p, nd_record_value_size() bytes. */
void nd_record_value_encode(unsigned char *p, const nd_record *r, size_t vlen);

/* Points *id at the id inside the value p of n bytes. Returns its length,
 * or 0 when it is not a value of layout 2, 3 or 4 (checks only what
 * reaching the id needs). */
size_t nd_record_value_id(const unsigned char *p, size_t n, const unsigned char **id);

/* Fills r from the value p of n bytes stored under the time at (pointers
 * into p; no sketch, no supersede list). Returns 0 or -EBADMSG. */
int nd_record_value_decode(int64_t at, const unsigned char *p, size_t n, nd_record *r);

/* Bytes nd_event_value_encode() writes for ev. */
size_t nd_event_value_size(const nd_store_event *ev);

/* Writes ev's value (layout 1: the layout byte, u16 copy_id_len, the copy
 * id, the value text, NUL) into p, nd_event_value_size() bytes. */
void nd_event_value_encode(unsigned char *p, const nd_store_event *ev);

/* Fills ev (kind, its key's times, pointers into p) from the value p of n
 * bytes. Returns 0 or -EBADMSG. */
int nd_event_value_decode(nd_event_kind kind, int64_t owner_at, int64_t at_us,
                          const unsigned char *p, size_t n, nd_store_event *ev);

#endif
