/* record.c - the checks and the LMDB value layouts of records and events
 * (record.h).
 *
 * Value layout 4 (written when a claim field is set, else layout 3; layouts
 * 3 and 2, read too, are the same without
 * the optional tail and flag bits 1-3: no account, no policy, active; layout
 * 2 has byte 3 reserved 0 and no anchors), little-endian, fixed 38-byte
 * header then the id, two strings, the anchors and the optional tail:
 *
 *   off size
 *     0    1  format       ND_LAYOUT_4 (or 3, 2); a reader refuses any other value
 *     1    1  flags        bit 0: meta present; layout 4 only: bit 1 account
 *                          present, bit 2 policy present, bit 3 revoked
 *                          (status ND_CLAIM_REVOKED; clear: active), bit 4
 *                          superseded (status ND_CLAIM_SUPERSEDED, not
 *                          with bit 3), bit 7 registering client present;
 *                          a layout-4 reader refuses the bits it does not
 *                          know (5-6; one before bit 4 existed refuses 4-7,
 *                          one before bit 7 refuses 7: a store holding such
 *                          a record does not open with a build older than
 *                          the field)
 *     2    1  version_len  1..ND_VERSION_MAX
 *     3    1  nanchors     0..255 (layout 2: 0)
 *     4    2  id_len       u16, 1..ND_ID_MAX
 *     6    4  chars        u32
 *    10    8  simhash      u64
 *    18   16  text_hash
 *    34    4  meta_len     u32, 0 without meta
 *    38    .  id bytes     (id_len, no NUL)
 *     .    .  version bytes, NUL
 *     .    .  meta bytes, NUL       (only with flag bit 0)
 *     .  4*n  anchors      u32 each (sketch.h), for the anchor index at start
 *     .    2  account_len  u16, 1..ND_ACCOUNT_MAX   (only with flag bit 1)
 *     .    .  account bytes, NUL                    (only with flag bit 1)
 *     .    4  policy_len   u32, 0..ND_POLICY_MAX    (only with flag bit 2)
 *     .    .  policy bytes, NUL                     (only with flag bit 2)
 *     .    8  superseded_by  i64, the registered_at_us of the record whose
 *                            restore superseded this one (only with bit 4)
 *     .    1  client_len   u8, 1..ND_CLIENT_MAX     (only with flag bit 7)
 *     .    .  client bytes, NUL                     (only with flag bit 7)
 *
 * A record without account, policy and revoked status is written in
 * layout 3 (the same bytes), so a store keeps opening with the build before
 * layout 4 (a rollback) until a record uses them; it costs 0 bytes more.
 * An account costs 3 bytes plus its text, a policy 5 plus its text, the
 * registering client (the name of a token without a role; records of
 * operators, account tokens and anonymous callers have none) 2 plus its
 * name; it is last, so a value without it reads as before. The store
 * format (info/format) stays 2: it names the keys and databases, and a store written by an older build opens and reads as it
 * is (a build older than layout 4 reports -EBADMSG for a layout-4 value).
 *
 * registered_at_us is not repeated in the value: it is the key. Both strings
 * are stored NUL-terminated so a scan hands out pointers into the map
 * without copying (the id is handed out with its length).
 *
 * Event value layout 1 (a journal entry: a detection or an audit event,
 * stored under owner_at then at_us, 8 bytes big-endian each): byte 0 the
 * event layout (1), u16 copy_id_len, the copy id, the value text, NUL. */
#include "record.h"

#include <errno.h>

#define ND_LAYOUT_2 2 /* value layout version (first byte), read */
#define ND_LAYOUT_3 3 /* ... read: layout 2 plus anchors */
#define ND_LAYOUT_4 4 /* ... written: layout 3 plus account, policy, status */
#define HDR_SIZE 38u  /* value header, layout 2 */
#define FLAG_META 0x01u
#define FLAG_ACCOUNT 0x02u    /* layout 4 */
#define FLAG_POLICY 0x04u     /* layout 4 */
#define FLAG_REVOKED 0x08u    /* layout 4 */
#define FLAG_SUPERSEDED 0x10u /* layout 4 */
#define FLAG_CLIENT 0x80u     /* layout 4: the registering client, last */
#define FLAGS_4 0x9fu         /* the flags layout 4 knows */
#define EV_LAYOUT 1u          /* first byte of an event's value */
#define EV_HDR ND_EVENT_VALUE_HDR

/* ---- checks ------------------------------------------------------------- */

bool nd_record_id_ok(const char *id, size_t id_len)
{
    return id && id_len > 0 && id_len <= ND_ID_MAX;
}

size_t nd_record_check(const nd_record *rec)
{
    if (!rec || !nd_record_id_ok(rec->id, rec->id_len) || !rec->version ||
        rec->registered_at_us < 0)
        return 0;
    size_t vlen = strnlen(rec->version, ND_VERSION_MAX + 1);
    if (vlen == 0 || vlen > ND_VERSION_MAX || rec->meta_len > ND_META_MAX ||
        (!rec->meta && rec->meta_len) || rec->nanchors > ND_STORE_ANCHORS_MAX ||
        (!rec->anchors && rec->nanchors) || rec->sketch_len > ND_STORE_SKETCH_MAX ||
        (!rec->sketch && rec->sketch_len) || rec->account_len > ND_ACCOUNT_MAX ||
        (!rec->account && rec->account_len) || rec->policy_len > ND_POLICY_MAX ||
        (!rec->policy && rec->policy_len) || rec->status > ND_CLAIM_SUPERSEDED ||
        rec->client_len > ND_CLIENT_MAX || (!rec->client && rec->client_len) ||
        rec->text_len > ND_STORE_TEXT_MAX || (!rec->text && rec->text_len) ||
        (!rec->text_packed && rec->text_packed_len))
        return 0;
    return vlen;
}

bool nd_record_refs_ok(const nd_record *rec)
{
    size_t nsup = rec->supersede ? rec->nsupersede : 0;
    if (nsup > ND_STORE_SUPERSEDE_MAX)
        return false;
    for (size_t i = 0; i < nsup; i++)
        if (!nd_record_id_ok(rec->supersede[i].id, rec->supersede[i].id_len) ||
            rec->supersede[i].registered_at_us < 0)
            return false;
    return true;
}

bool nd_record_event_ok(const nd_store_event *ev)
{
    if (!ev || ev->owner_at < 0 || ev->at_us < 0 || ev->at_us > ND_EVENT_AT_MAX ||
        ev->value_len > ND_EVENT_VALUE_MAX || (!ev->value && ev->value_len))
        return false;
    if (ev->kind == ND_EVENT_DETECTION)
        return nd_record_id_ok(ev->copy_id, ev->copy_id_len);
    return ev->kind == ND_EVENT_AUDIT && !ev->copy_id && !ev->copy_id_len;
}

bool nd_record_audit_ok(const nd_store_event *audit)
{
    return !audit || (nd_record_event_ok(audit) && audit->kind == ND_EVENT_AUDIT);
}

/* ---- record value ------------------------------------------------------------ */

static bool has_account(const nd_record *r)
{
    return r->account_len > 0;
}

size_t nd_record_value_size(const nd_record *r, size_t vlen)
{
    return HDR_SIZE + r->id_len + vlen + 1 + (r->meta ? r->meta_len + 1 : 0) +
           4 * (size_t)r->nanchors + (has_account(r) ? 2 + r->account_len + 1 : 0) +
           (r->policy ? 4 + r->policy_len + 1 : 0) + (r->status == ND_CLAIM_SUPERSEDED ? 8 : 0) +
           (r->client_len ? 1 + r->client_len + 1 : 0);
}

void nd_record_value_encode(unsigned char *p, const nd_record *r, size_t vlen)
{
    p[1] = (unsigned char)((r->meta ? FLAG_META : 0) | (has_account(r) ? FLAG_ACCOUNT : 0) |
                           (r->policy ? FLAG_POLICY : 0) |
                           (r->status == ND_CLAIM_REVOKED ? FLAG_REVOKED : 0) |
                           (r->status == ND_CLAIM_SUPERSEDED ? FLAG_SUPERSEDED : 0) |
                           (r->client_len ? FLAG_CLIENT : 0));
    p[0] = p[1] & ~FLAG_META ? ND_LAYOUT_4 : ND_LAYOUT_3; /* see "Value layout" */
    p[2] = (unsigned char)vlen;
    p[3] = (unsigned char)r->nanchors;
    nd_le_put(p + 4, r->id_len, 2);
    nd_le_put(p + 6, r->chars, 4);
    nd_le_put(p + 10, r->simhash, 8);
    memcpy(p + 18, r->text_hash, 16);
    nd_le_put(p + 34, r->meta ? (uint32_t)r->meta_len : 0, 4);
    unsigned char *q = p + HDR_SIZE;
    memcpy(q, r->id, r->id_len);
    q += r->id_len;
    memcpy(q, r->version, vlen);
    q[vlen] = '\0';
    q += vlen + 1;
    if (r->meta) {
        if (r->meta_len)
            memcpy(q, r->meta, r->meta_len);
        q[r->meta_len] = '\0';
        q += r->meta_len + 1;
    }
    if (r->nanchors)
        memcpy(q, r->anchors, 4 * (size_t)r->nanchors);
    q += 4 * (size_t)r->nanchors;
    if (has_account(r)) {
        nd_le_put(q, r->account_len, 2);
        memcpy(q + 2, r->account, r->account_len);
        q[2 + r->account_len] = '\0';
        q += 2 + r->account_len + 1;
    }
    if (r->policy) {
        nd_le_put(q, (uint32_t)r->policy_len, 4);
        if (r->policy_len)
            memcpy(q + 4, r->policy, r->policy_len);
        q[4 + r->policy_len] = '\0';
        q += 4 + r->policy_len + 1;
    }
    if (r->status == ND_CLAIM_SUPERSEDED) {
        nd_le_put(q, (uint64_t)r->superseded_by_us, 8);
        q += 8;
    }
    if (r->client_len) {
        q[0] = (unsigned char)r->client_len;
        memcpy(q + 1, r->client, r->client_len);
        q[1 + r->client_len] = '\0';
    }
}

size_t nd_record_value_id(const unsigned char *p, size_t n, const unsigned char **id)
{
    if (n < HDR_SIZE || p[0] < ND_LAYOUT_2 || p[0] > ND_LAYOUT_4)
        return 0;
    size_t len = nd_le_get(p + 4, 2);
    if (len == 0 || len > ND_ID_MAX || HDR_SIZE + len > n)
        return 0;
    *id = p + HDR_SIZE;
    return len;
}

int nd_record_value_decode(int64_t at, const unsigned char *p, size_t n, nd_record *r)
{
    const unsigned char *id = NULL;
    size_t idlen = nd_record_value_id(p, n, &id);
    if (idlen == 0 || n < HDR_SIZE + idlen + 2)
        return -EBADMSG;
    size_t vlen = p[2];
    size_t mlen = nd_le_get(p + 34, 4);
    size_t nanchors = p[0] >= ND_LAYOUT_3 ? p[3] : 0;
    unsigned flags = p[0] == ND_LAYOUT_4 ? p[1] : p[1] & FLAG_META;
    bool has_meta = flags & FLAG_META;
    const unsigned char *ver = id + idlen;
    size_t body = HDR_SIZE + idlen + vlen + 1 + (has_meta ? mlen + 1 : 0);
    if (vlen == 0 || vlen > ND_VERSION_MAX || mlen > n || n < body + 4 * nanchors ||
        ver[vlen] != '\0' || (has_meta && p[body - 1] != '\0') || (flags & ~FLAGS_4) ||
        ((flags & FLAG_REVOKED) && (flags & FLAG_SUPERSEDED)))
        return -EBADMSG;
    size_t pos = body + 4 * nanchors, alen = 0, plen = 0, clen = 0;
    const unsigned char *acc = NULL, *pol = NULL, *cli = NULL;
    if (flags & FLAG_ACCOUNT) {
        if (n - pos < 3 || (alen = nd_le_get(p + pos, 2)) == 0 || alen > ND_ACCOUNT_MAX ||
            n - pos - 2 < alen + 1 || p[pos + 2 + alen] != '\0')
            return -EBADMSG;
        acc = p + pos + 2;
        pos += 2 + alen + 1;
    }
    if (flags & FLAG_POLICY) {
        if (n - pos < 5 || (plen = nd_le_get(p + pos, 4)) > ND_POLICY_MAX ||
            n - pos - 4 < plen + 1 || p[pos + 4 + plen] != '\0')
            return -EBADMSG;
        pol = p + pos + 4;
        pos += 4 + plen + 1;
    }
    int64_t by = 0;
    if (flags & FLAG_SUPERSEDED) {
        if (n - pos < 8)
            return -EBADMSG;
        by = (int64_t)nd_le_get(p + pos, 8);
        pos += 8;
    }
    if (flags & FLAG_CLIENT) {
        if (n - pos < 3 || (clen = p[pos]) == 0 || clen > ND_CLIENT_MAX || n - pos - 1 < clen + 1 ||
            p[pos + 1 + clen] != '\0')
            return -EBADMSG;
        cli = p + pos + 1;
        pos += 1 + clen + 1;
    }
    if (pos != n)
        return -EBADMSG;
    r->id = (const char *)id;
    r->id_len = idlen;
    r->registered_at_us = at;
    r->chars = (uint32_t)nd_le_get(p + 6, 4);
    r->simhash = nd_le_get(p + 10, 8);
    memcpy(r->text_hash, p + 18, 16);
    r->version = (const char *)ver;
    r->meta = has_meta ? (const char *)ver + vlen + 1 : NULL;
    r->meta_len = has_meta ? mlen : 0;
    r->anchors = nanchors ? p + body : NULL;
    r->nanchors = (uint32_t)nanchors;
    r->sketch = NULL;
    r->sketch_len = 0;
    r->account = (const char *)acc;
    r->account_len = alen;
    r->policy = (const char *)pol;
    r->policy_len = plen;
    r->status = flags & FLAG_REVOKED      ? ND_CLAIM_REVOKED
                : flags & FLAG_SUPERSEDED ? ND_CLAIM_SUPERSEDED
                                          : ND_CLAIM_ACTIVE;
    r->superseded_by_us = by;
    r->supersede = NULL;
    r->nsupersede = 0;
    r->client = (const char *)cli;
    r->client_len = clen;
    r->text = NULL;
    r->text_len = 0;
    r->text_packed = NULL;
    r->text_packed_len = 0;
    r->stream_seq = 0;
    return 0;
}

/* ---- event value ----------------------------------------------------------------- */

size_t nd_event_value_size(const nd_store_event *ev)
{
    return EV_HDR + ev->copy_id_len + ev->value_len + 1;
}

void nd_event_value_encode(unsigned char *q, const nd_store_event *ev)
{
    q[0] = EV_LAYOUT;
    nd_le_put(q + 1, ev->copy_id_len, 2);
    q += EV_HDR;
    if (ev->copy_id_len)
        memcpy(q, ev->copy_id, ev->copy_id_len);
    q += ev->copy_id_len;
    if (ev->value_len)
        memcpy(q, ev->value, ev->value_len);
    q[ev->value_len] = '\0';
}

int nd_event_value_decode(nd_event_kind kind, int64_t owner_at, int64_t at_us,
                          const unsigned char *p, size_t n, nd_store_event *ev)
{
    if (n < EV_HDR + 1 || p[0] != EV_LAYOUT || p[n - 1] != '\0')
        return -EBADMSG;
    size_t clen = nd_le_get(p + 1, 2);
    if (clen > ND_ID_MAX || EV_HDR + clen + 1 > n)
        return -EBADMSG;
    ev->kind = kind;
    ev->owner_at = owner_at;
    ev->at_us = at_us;
    ev->copy_id = clen ? (const char *)p + EV_HDR : NULL;
    ev->copy_id_len = clen;
    ev->value = (const char *)p + EV_HDR + clen;
    ev->value_len = n - EV_HDR - clen - 1;
    return 0;
}
