/* entry.c - the replication stream's entry layout (entry.h), written and
 * read with record.h's field helpers.
 *
 *   u8 layout (1; 2 when flag 2, 4 or 8 is set; 3 when flag 16 is set),
 *   u8 kind, u8 status,
 *   u8 flags (1: audit follows; layout 2: 2 superseded_by follows, 4
 *   supersede follows, 8 the registering client follows; at least
 *   one of them; layout 3: any of those, and 16: the kept text ends the
 *   entry)
 *   i64 registered_at_us, u64 simhash, u32 chars, 16 bytes text hash
 *   u16 id_len, id; u8 version_len, version, a NUL byte
 *   u32 meta_len + 1 (0: none), meta; u16 account_len, account;
 *   u32 policy_len + 1 (0: none), policy
 *   u16 nanchors, anchors (4 bytes each, as stored); u16 sketch_len, sketch
 *   superseded_by: i64 (status ND_CLAIM_SUPERSEDED only)
 *   supersede: u16 n, n x (i64 registered_at_us, u16 id_len, id)
 *   audit: u8 kind, i64 owner_at, i64 at_us, u32 value_len + 1 (0: none), value
 *   client: u8 client_len (1..ND_CLIENT_MAX), client
 *   text (layout 3): u32 packed_len (>= 2), the text packed (text_pack.h:
 *   u8 codec, one zstd frame), handed to the store as nd_record.text_packed
 * An entry with none of flags 2, 4, 8 and 16 is the same bytes as layout
 * 1; one without flag 16, as layout 2. A node reads all three (a rolling
 * upgrade: an older node refuses only the entries that carry a text, as
 * newer: -EPROTO).
 * Layout 4: a journal write (ND_STORE_EVENT), layout 2's fields with the
 * event as the audit (flag 1) and its copy id (if any) as the id. */
#include "entry.h"
#include "record.h"
#include "text_pack.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define LAYOUT 1u
/* Layout 1 with flag bits 2, 4 and 8, written only when one is set, so
 * that a node that knows only layout 1 reads every other entry and refuses
 * these as newer (-EPROTO). */
#define LAYOUT_SUPERSEDE 2u
#define FLAG_AUDIT 1u
#define FLAG_SUPERSEDED_BY 2u
#define FLAG_SUPERSEDE 4u
#define FLAG_CLIENT 8u
#define FLAGS_2 (FLAG_SUPERSEDED_BY | FLAG_SUPERSEDE | FLAG_CLIENT) /* layout 2's own */
/* Layout 2 with flag bit 16 (the kept text), written only when a record
 * carries a text (the previous layouts otherwise). */
#define LAYOUT_TEXT 3u
#define FLAG_TEXT 16u
/* A journal write (kind ND_STORE_EVENT: a detection, an import's audit
 * entry): layout 2's fields with the event as the audit and its copy id
 * as the id, under its own layout byte, so that a node that knows only
 * layouts 1 to 3 refuses it as newer (-EPROTO) instead of misreading it. */
#define LAYOUT_JOURNAL 4u

static size_t opt_len(const void *p, size_t n)
{
    return p ? n : 0;
}

/* nd_entry_encode() with the packed text text[0..tx) (NULL: none). */
static int encode(int kind, const nd_record *rec, const nd_store_event *audit, const uint8_t *text,
                  size_t tx, uint8_t **out, size_t *len)
{
    size_t vlen = rec->version ? strlen(rec->version) : 0;
    size_t meta = opt_len(rec->meta, rec->meta_len), acc = opt_len(rec->account, rec->account_len);
    size_t pol = opt_len(rec->policy, rec->policy_len);
    size_t na = rec->anchors ? rec->nanchors : 0, sk = opt_len(rec->sketch, rec->sketch_len);
    size_t val = audit ? opt_len(audit->value, audit->value_len) : 0;
    size_t nsup = rec->supersede ? rec->nsupersede : 0, sup = nsup ? 2 : 0;
    bool by = rec->status == ND_CLAIM_SUPERSEDED;
    size_t cl = opt_len(rec->client, rec->client_len);
    if (rec->id_len > 0xFFFF || vlen > 0xFF || meta >= 0xFFFFFFFFu || acc > 0xFFFF ||
        pol >= 0xFFFFFFFFu || na > 0xFFFF || sk > 0xFFFF || val >= 0xFFFFFFFFu ||
        nsup > ND_STORE_SUPERSEDE_MAX || cl > ND_CLIENT_MAX || tx > 0xFFFFFFFFu)
        return -EINVAL;
    for (size_t i = 0; i < nsup; i++) {
        if (!rec->supersede[i].id || !rec->supersede[i].id_len || rec->supersede[i].id_len > 0xFFFF)
            return -EINVAL;
        sup += 8 + 2 + rec->supersede[i].id_len;
    }
    size_t n = 4 + 8 + 8 + 4 + 16 + 2 + rec->id_len + 1 + vlen + 1 + 4 + meta + 2 + acc + 4 + pol +
               2 + 4 * na + 2 + sk + (by ? 8 : 0) + sup + (audit ? 1 + 8 + 8 + 4 + val : 0) +
               (cl ? 1 + cl : 0) + (text ? 4 + tx : 0);
    uint8_t *buf = malloc(n);
    if (!buf)
        return -ENOMEM;
    nd_rec_writer w = {buf};
    nd_rec_put_u(&w,
                 kind == ND_STORE_EVENT ? LAYOUT_JOURNAL
                 : text                 ? LAYOUT_TEXT
                 : by || nsup || cl     ? LAYOUT_SUPERSEDE
                                        : LAYOUT,
                 1);
    nd_rec_put_u(&w, (uint64_t)kind, 1);
    nd_rec_put_u(&w, rec->status, 1);
    nd_rec_put_u(&w,
                 (audit ? FLAG_AUDIT : 0) | (by ? FLAG_SUPERSEDED_BY : 0) |
                     (nsup ? FLAG_SUPERSEDE : 0) | (cl ? FLAG_CLIENT : 0) | (text ? FLAG_TEXT : 0),
                 1);
    nd_rec_put_u(&w, (uint64_t)rec->registered_at_us, 8);
    nd_rec_put_u(&w, rec->simhash, 8);
    nd_rec_put_u(&w, rec->chars, 4);
    nd_rec_put_bytes(&w, rec->text_hash, 16);
    nd_rec_put_u(&w, rec->id_len, 2);
    nd_rec_put_bytes(&w, rec->id, rec->id_len);
    nd_rec_put_u(&w, vlen, 1);
    nd_rec_put_bytes(&w, rec->version, vlen);
    nd_rec_put_u(&w, 0, 1);
    nd_rec_put_u(&w, rec->meta ? meta + 1 : 0, 4);
    nd_rec_put_bytes(&w, rec->meta, meta);
    nd_rec_put_u(&w, acc, 2);
    nd_rec_put_bytes(&w, rec->account, acc);
    nd_rec_put_u(&w, rec->policy ? pol + 1 : 0, 4);
    nd_rec_put_bytes(&w, rec->policy, pol);
    nd_rec_put_u(&w, na, 2);
    nd_rec_put_bytes(&w, rec->anchors, 4 * na);
    nd_rec_put_u(&w, sk, 2);
    nd_rec_put_bytes(&w, rec->sketch, sk);
    if (by)
        nd_rec_put_u(&w, (uint64_t)rec->superseded_by_us, 8);
    if (nsup) {
        nd_rec_put_u(&w, nsup, 2);
        for (size_t i = 0; i < nsup; i++) {
            nd_rec_put_u(&w, (uint64_t)rec->supersede[i].registered_at_us, 8);
            nd_rec_put_u(&w, rec->supersede[i].id_len, 2);
            nd_rec_put_bytes(&w, rec->supersede[i].id, rec->supersede[i].id_len);
        }
    }
    if (audit) {
        nd_rec_put_u(&w, (uint64_t)audit->kind, 1);
        nd_rec_put_u(&w, (uint64_t)audit->owner_at, 8);
        nd_rec_put_u(&w, (uint64_t)audit->at_us, 8);
        nd_rec_put_u(&w, audit->value ? val + 1 : 0, 4);
        nd_rec_put_bytes(&w, audit->value, val);
    }
    if (cl) {
        nd_rec_put_u(&w, cl, 1);
        nd_rec_put_bytes(&w, rec->client, cl);
    }
    if (text) {
        nd_rec_put_u(&w, tx, 4);
        nd_rec_put_bytes(&w, text, tx);
    }
    *out = buf;
    *len = n;
    return 0;
}

int nd_entry_encode(int kind, const nd_record *rec, const nd_store_event *audit, uint8_t **out,
                    size_t *len)
{
    const uint8_t *text = NULL;
    size_t tx = 0;
    uint8_t *packed = NULL; /* rec->text packed here, or NULL */
    if (kind == ND_STORE_PUT || kind == ND_STORE_REPLACE) {
        int rc = nd_text_pack_record(rec, &text, &tx, &packed);
        if (rc)
            return rc;
    }
    int rc = encode(kind, rec, audit, text, tx, out, len);
    free(packed);
    return rc;
}

int nd_entry_decode(const uint8_t *buf, size_t len, nd_entry *ch)
{
    nd_rec_reader r = {buf, buf + len, false};
    memset(ch, 0, sizeof(*ch));
    unsigned layout = (unsigned)nd_rec_get_u(&r, 1);
    if (layout != LAYOUT && layout != LAYOUT_SUPERSEDE && layout != LAYOUT_TEXT &&
        layout != LAYOUT_JOURNAL)
        return r.bad ? -EBADMSG : -EPROTO;
    ch->kind = (int)nd_rec_get_u(&r, 1);
    if ((layout == LAYOUT_JOURNAL) != (ch->kind == ND_STORE_EVENT))
        return -EBADMSG;
    nd_record *rec = &ch->rec;
    rec->status = (uint8_t)nd_rec_get_u(&r, 1);
    unsigned flags = (unsigned)nd_rec_get_u(&r, 1);
    unsigned known = layout == LAYOUT             ? FLAG_AUDIT
                     : layout == LAYOUT_SUPERSEDE ? FLAG_AUDIT | FLAGS_2
                     : layout == LAYOUT_JOURNAL   ? FLAG_AUDIT | FLAGS_2
                                                  : FLAG_AUDIT | FLAGS_2 | FLAG_TEXT;
    if ((flags & ~known) || !(flags & FLAG_SUPERSEDED_BY) != (rec->status != ND_CLAIM_SUPERSEDED) ||
        (layout == LAYOUT_SUPERSEDE && !(flags & FLAGS_2)) ||
        (layout == LAYOUT_TEXT && !(flags & FLAG_TEXT)) ||
        (layout == LAYOUT_JOURNAL && !(flags & FLAG_AUDIT)))
        r.bad = true;
    rec->registered_at_us = (int64_t)nd_rec_get_u(&r, 8);
    rec->simhash = nd_rec_get_u(&r, 8);
    rec->chars = (uint32_t)nd_rec_get_u(&r, 4);
    const void *th = nd_rec_get_bytes(&r, 16);
    if (th)
        memcpy(rec->text_hash, th, 16);
    rec->id_len = (size_t)nd_rec_get_u(&r, 2);
    rec->id = nd_rec_get_bytes(&r, rec->id_len);
    size_t vlen = (size_t)nd_rec_get_u(&r, 1);
    rec->version = nd_rec_get_bytes(&r, vlen + 1);
    if (rec->version && (rec->version[vlen] != '\0' || memchr(rec->version, 0, vlen)))
        r.bad = true;
    rec->meta = nd_rec_get_opt(&r, 4, &rec->meta_len);
    rec->account_len = (size_t)nd_rec_get_u(&r, 2);
    rec->account = rec->account_len ? nd_rec_get_bytes(&r, rec->account_len) : NULL;
    rec->policy = nd_rec_get_opt(&r, 4, &rec->policy_len);
    rec->nanchors = (uint32_t)nd_rec_get_u(&r, 2);
    rec->anchors = rec->nanchors ? nd_rec_get_bytes(&r, 4 * (size_t)rec->nanchors) : NULL;
    rec->sketch_len = (size_t)nd_rec_get_u(&r, 2);
    rec->sketch = rec->sketch_len ? nd_rec_get_bytes(&r, rec->sketch_len) : NULL;
    if (flags & FLAG_SUPERSEDED_BY)
        rec->superseded_by_us = (int64_t)nd_rec_get_u(&r, 8);
    if (flags & FLAG_SUPERSEDE) {
        size_t nsup = (size_t)nd_rec_get_u(&r, 2);
        /* The refs live in the nd_entry (ND_STORE_SUPERSEDE_MAX of them). */
        if (nsup == 0 || nsup > ND_STORE_SUPERSEDE_MAX)
            r.bad = true;
        for (size_t i = 0; i < nsup && !r.bad; i++) {
            nd_record_ref *ref = &ch->supersede[i];
            ref->registered_at_us = (int64_t)nd_rec_get_u(&r, 8);
            ref->id_len = (size_t)nd_rec_get_u(&r, 2);
            ref->id = nd_rec_get_bytes(&r, ref->id_len);
            if (!ref->id_len)
                r.bad = true;
        }
        rec->supersede = ch->supersede;
        rec->nsupersede = nsup;
    }
    if (flags & FLAG_AUDIT) {
        ch->has_audit = 1;
        ch->audit.kind = (nd_event_kind)nd_rec_get_u(&r, 1);
        ch->audit.owner_at = (int64_t)nd_rec_get_u(&r, 8);
        ch->audit.at_us = (int64_t)nd_rec_get_u(&r, 8);
        ch->audit.value = nd_rec_get_opt(&r, 4, &ch->audit.value_len);
    }
    if (flags & FLAG_CLIENT) {
        rec->client_len = (size_t)nd_rec_get_u(&r, 1);
        rec->client = nd_rec_get_bytes(&r, rec->client_len);
        if (rec->client_len == 0 || rec->client_len > ND_CLIENT_MAX)
            r.bad = true;
    }
    if (flags & FLAG_TEXT) {
        rec->text_packed_len = (size_t)nd_rec_get_u(&r, 4);
        rec->text_packed = nd_rec_get_bytes(&r, rec->text_packed_len);
        size_t tl;
        if (!rec->text_packed || nd_text_packed_len(rec->text_packed, rec->text_packed_len, &tl) ||
            (ch->kind != ND_STORE_PUT && ch->kind != ND_STORE_REPLACE))
            r.bad = true;
    }
    if (r.bad || r.p != r.end || ch->kind < ND_ENTRY_NOOP || ch->kind > ND_STORE_EVENT)
        return -EBADMSG;
    if (ch->kind == ND_STORE_EVENT) { /* the journal write's copy id */
        ch->audit.copy_id = rec->id_len ? rec->id : NULL;
        ch->audit.copy_id_len = rec->id_len;
    }
    return 0;
}

void nd_entry_frame_head(uint8_t out[ND_ENTRY_FRAME_HEAD], uint64_t token, uint32_t len)
{
    nd_rec_writer w = {out};
    nd_rec_put_u(&w, token, 8);
    nd_rec_put_u(&w, len, 4);
}

int nd_entry_frame_next(const uint8_t *buf, size_t len, size_t *off, uint64_t *token,
                        const uint8_t **body, size_t *blen)
{
    if (*off >= len)
        return 0;
    nd_rec_reader r = {buf + *off, buf + len, false};
    *token = nd_rec_get_u(&r, 8);
    size_t n = (size_t)nd_rec_get_u(&r, 4);
    *body = nd_rec_get_bytes(&r, n);
    if (r.bad || !*body)
        return -EBADMSG;
    *blen = n;
    *off = (size_t)(r.p - buf);
    return 1;
}
