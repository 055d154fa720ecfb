/* entry.h - one write of the replication stream: a store write (a
 * registration, an upgrade, a deletion, an amendment with its audit event)
 * as bytes, and back. A stream entry holds one or more of them, framed.
 * The record's fields are checked and stored by the store (record.h); this
 * layout is the stream's and is versioned with it.
 *
 * The layout (little-endian, version byte first) is private to this file
 * pair; a node refuses an entry of another version (nd_entry_decode()
 * -EPROTO), so a layout change needs a new version byte and a rolling
 * upgrade that reads both (layouts 1 to 3 are read: entry.c). */
#ifndef ND_ENTRY_H
#define ND_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define ND_ENTRY_NOOP 0 /* a write that changes nothing */

/* A decoded write. Its pointers point into the bytes decoded (valid while
 * they are); rec.stream_seq is 0 (the caller sets it). */
typedef struct nd_entry {
    int kind; /* nd_store_change, or ND_ENTRY_NOOP */
    nd_record rec;
    nd_store_event audit; /* when has_audit */
    int has_audit;
    nd_record_ref supersede[ND_STORE_SUPERSEDE_MAX]; /* rec.supersede points here */
} nd_entry;

/* Encodes a write into a new buffer (free() it): kind ND_STORE_EVENT (rec:
 * the journal write's copy id as id, version "", audit: the event),
 * ND_STORE_PUT,
 * (rec->supersede: at most ND_STORE_SUPERSEDE_MAX, ids non-empty),
 * ND_STORE_REPLACE, ND_STORE_AMEND (audit: its audit event or NULL; the
 * records rec->supersede names go with it) or
 * ND_STORE_DELETE (rec: id and registered_at_us only). A put's or
 * replace's text goes with it packed (rec->text_packed as it is, or
 * rec->text packed here: text_pack.h), to be kept by every node. Returns 0
 * with *out and *len, -EINVAL (a field over its limit, a packed text whose
 * header is refused), -ENOMEM. */
int nd_entry_encode(int kind, const nd_record *rec, const nd_store_event *audit, uint8_t **out,
                    size_t *len);

/* Decodes len bytes of buf into *ch (pointing into buf; a carried text as
 * ch->rec.text_packed, its header checked). Returns 0,
 * -EPROTO (another layout version) or -EBADMSG (truncated or malformed). */
int nd_entry_decode(const uint8_t *buf, size_t len, nd_entry *ch);

/* A stream entry holds one or more writes, in order, each framed as its
 * publisher's token (u64), its length (u32) and its nd_entry_encode()
 * bytes. */
#define ND_ENTRY_FRAME_HEAD 12

/* Writes the frame head of a write of len bytes into out. */
void nd_entry_frame_head(uint8_t out[ND_ENTRY_FRAME_HEAD], uint64_t token, uint32_t len);

/* Reads the frame at *off of an entry of len bytes: returns 1 with its
 * token, bytes and length (pointing into buf) and *off moved past it, 0 at
 * the end of the entry, -EBADMSG for a cut frame. */
int nd_entry_frame_next(const uint8_t *buf, size_t len, size_t *off, uint64_t *token,
                        const uint8_t **body, size_t *blen);

#endif
