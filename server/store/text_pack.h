/* text_pack.h - a kept text's stored form (the "texts" database of the
 * LMDB store, the memory store, the replication stream's entry): the text
 * as submitted, compressed with zstd.
 *
 * The form: u8 codec (ND_TEXT_PACK_ZSTD), then one zstd frame that records
 * the text's length in its header (ZSTD_getFrameContentSize()), so an
 * unpack allocates exactly once. Packing is deterministic for a given
 * libzstd and level: a replica keeps the bytes the origin packed.
 *
 * Pure apart from the allocation of the packed or unpacked bytes: no I/O,
 * no locks; any thread. */
#ifndef ND_TEXT_PACK_H
#define ND_TEXT_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define ND_TEXT_PACK_ZSTD 1 /* codec byte: one zstd frame follows */

/* The zstd level a text is packed at (proto/scale.md: "Kept texts" gives
 * the measurement it was chosen by). */
#define ND_TEXT_PACK_LEVEL 3

/* Packs text[0..len) (any bytes; len may be 0) into a new buffer the caller
 * frees: *out, *out_len. Returns 0, -EINVAL (len over ND_STORE_TEXT_MAX),
 * -ENOMEM. */
int nd_text_pack(const char *text, size_t len, uint8_t **out, size_t *out_len);

/* Checks the header of packed bytes p[0..n) and gives the text's length in
 * *len. Returns 0 or -EBADMSG (not a packed text of a known codec, or its
 * length over ND_STORE_TEXT_MAX). Reads the header only. */
int nd_text_packed_len(const uint8_t *p, size_t n, size_t *len);

/* Unpacks p[0..n) into a new NUL-terminated buffer the caller frees:
 * *out (len bytes + NUL), *len. Returns 0, -EBADMSG (corrupt, or not the
 * length its header says), -ENOMEM. */
int nd_text_unpack(const uint8_t *p, size_t n, char **out, size_t *len);

/* The packed text a put or replace of rec keeps: rec->text_packed as it
 * is (its header checked), or rec->text packed into a new buffer *owned
 * (the caller frees it; NULL when none was made), or none (*p NULL, *n 0).
 * Returns 0, -EINVAL (a text over ND_STORE_TEXT_MAX, a packed text whose
 * header does not pass nd_text_packed_len()), -ENOMEM. */
int nd_text_pack_record(const nd_record *rec, const uint8_t **p, size_t *n, uint8_t **owned);

#endif
