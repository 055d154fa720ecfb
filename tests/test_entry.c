/* test_entry.c - the replication stream's entry layout (server/replica/
 * entry.c): every kind of change comes back field for field; a cut or
 * padded entry, or one of another layout, is refused, never half read. */
#include "entry.h"
#include "text_pack.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

static const uint8_t anchors[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
static const uint8_t sketch[9] = {0xA1, 0x85, 0x20, 0, 9, 8, 7, 6, 5};

static nd_record full_record(void)
{
    nd_record r = {.id = "doc-1",
                   .id_len = 5,
                   .simhash = 0x0123456789ABCDEFull,
                   .version = "nd-simhash-1+nd-sketch-2",
                   .registered_at_us = 1764115200123456ll,
                   .chars = 1234,
                   .meta = "{\"title\":\"t\"}",
                   .meta_len = 13,
                   .anchors = anchors,
                   .nanchors = 3,
                   .status = ND_CLAIM_REVOKED,
                   .sketch = sketch,
                   .sketch_len = sizeof(sketch),
                   .account = "acct",
                   .account_len = 4,
                   .policy = "{\"reprint\":\"forbid\"}",
                   .policy_len = 20,
                   .client = "alice-cms",
                   .client_len = 9,
                   .stream_seq = 99};
    for (int i = 0; i < 16; i++)
        r.text_hash[i] = (uint8_t)(0xF0 + i);
    return r;
}

static bool same_bytes(const void *a, size_t alen, const void *b, size_t blen)
{
    return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

static void round_trip(void)
{
    nd_record r = full_record();
    nd_store_event audit = {.kind = ND_EVENT_AUDIT,
                            .owner_at = r.registered_at_us,
                            .at_us = 1764115299000000ll,
                            .value = "{\"action\":\"revoke\"}",
                            .value_len = 19};
    for (int kind = ND_STORE_PUT; kind <= ND_STORE_AMEND; kind++) {
        uint8_t *buf = NULL;
        size_t len = 0;
        const nd_store_event *ev = kind == ND_STORE_AMEND ? &audit : NULL;
        REQUIRE(nd_entry_encode(kind, &r, ev, &buf, &len) == 0);
        nd_entry ch;
        CHECK(nd_entry_decode(buf, len, &ch) == 0, "kind %d", kind);
        CHECK(ch.kind == kind);
        const nd_record *d = &ch.rec;
        CHECK(same_bytes(d->id, d->id_len, r.id, r.id_len));
        CHECK(d->simhash == r.simhash && d->registered_at_us == r.registered_at_us);
        CHECK(d->chars == r.chars && d->status == r.status);
        CHECK(memcmp(d->text_hash, r.text_hash, 16) == 0);
        CHECK(strcmp(d->version, r.version) == 0); /* NUL-terminated, as the store wants */
        CHECK(same_bytes(d->meta, d->meta_len, r.meta, r.meta_len));
        CHECK(same_bytes(d->account, d->account_len, r.account, r.account_len));
        CHECK(same_bytes(d->policy, d->policy_len, r.policy, r.policy_len));
        CHECK(same_bytes(d->client, d->client_len, r.client, r.client_len));
        CHECK(d->nanchors == 3 && same_bytes(d->anchors, 12, anchors, 12));
        CHECK(same_bytes(d->sketch, d->sketch_len, sketch, sizeof(sketch)));
        CHECK(d->stream_seq == 0); /* the stream gives it, not the bytes */
        CHECK(ch.has_audit == (kind == ND_STORE_AMEND));
        if (ch.has_audit) {
            CHECK(ch.audit.kind == ND_EVENT_AUDIT && ch.audit.owner_at == audit.owner_at);
            CHECK(ch.audit.at_us == audit.at_us);
            CHECK(same_bytes(ch.audit.value, ch.audit.value_len, audit.value, audit.value_len));
        }
        free(buf);
    }
}

/* None (NULL) and empty stay apart where the store tells them apart. */
static void empty_fields(void)
{
    nd_record r = {.id = "x", .id_len = 1, .version = "v", .registered_at_us = 7};
    uint8_t *buf = NULL;
    size_t len = 0;
    REQUIRE(nd_entry_encode(ND_STORE_DELETE, &r, NULL, &buf, &len) == 0);
    nd_entry ch;
    REQUIRE(nd_entry_decode(buf, len, &ch) == 0);
    CHECK(ch.kind == ND_STORE_DELETE && ch.rec.registered_at_us == 7);
    CHECK(!ch.rec.meta && !ch.rec.policy && !ch.rec.account && !ch.rec.anchors && !ch.rec.sketch);
    CHECK(!ch.rec.client && ch.rec.client_len == 0);
    free(buf);
    r.meta = "";
    r.policy = "";
    REQUIRE(nd_entry_encode(ND_STORE_PUT, &r, NULL, &buf, &len) == 0);
    REQUIRE(nd_entry_decode(buf, len, &ch) == 0);
    CHECK(ch.rec.meta && ch.rec.meta_len == 0 && ch.rec.policy && ch.rec.policy_len == 0);
    free(buf);
}

/* A journal write (a detection) crosses the stream whole, under its own
 * layout byte, with its copy id; an import's audit entry has none. */
static void journal_writes(void)
{
    nd_store_event det = {.kind = ND_EVENT_DETECTION,
                          .owner_at = 1700000000000000,
                          .at_us = 1700000000123456,
                          .copy_id = "copy-7",
                          .copy_id_len = 6,
                          .value = "{\"kind\":\"near_duplicate\"}",
                          .value_len = 25};
    nd_record rec = {.id = det.copy_id, .id_len = det.copy_id_len, .version = ""};
    uint8_t *buf = NULL;
    size_t len = 0;
    REQUIRE(nd_entry_encode(ND_STORE_EVENT, &rec, &det, &buf, &len) == 0);
    CHECK(buf[0] == 4);
    nd_entry ch;
    REQUIRE(nd_entry_decode(buf, len, &ch) == 0);
    CHECK(ch.kind == ND_STORE_EVENT && ch.has_audit);
    CHECK(ch.audit.kind == ND_EVENT_DETECTION && ch.audit.owner_at == det.owner_at &&
          ch.audit.at_us == det.at_us);
    CHECK(ch.audit.copy_id_len == 6 && memcmp(ch.audit.copy_id, "copy-7", 6) == 0);
    CHECK(ch.audit.value_len == det.value_len && memcmp(ch.audit.value, det.value, 25) == 0);
    free(buf);
    nd_store_event imp = {.kind = ND_EVENT_AUDIT, .at_us = 5, .value = "{}", .value_len = 2};
    nd_record none = {.version = ""};
    REQUIRE(nd_entry_encode(ND_STORE_EVENT, &none, &imp, &buf, &len) == 0);
    REQUIRE(nd_entry_decode(buf, len, &ch) == 0);
    CHECK(ch.audit.kind == ND_EVENT_AUDIT && !ch.audit.copy_id && ch.audit.copy_id_len == 0);
    buf[3] = 0; /* no audit flag: not a journal write */
    CHECK(nd_entry_decode(buf, len, &ch) == -EBADMSG);
    free(buf);
}

static void refuses_bad_bytes(void)
{
    nd_record r = full_record();
    uint8_t *buf = NULL;
    size_t len = 0;
    REQUIRE(nd_entry_encode(ND_STORE_PUT, &r, NULL, &buf, &len) == 0);
    nd_entry ch;
    int cut_refused = 0;
    for (size_t n = 0; n < len; n++) /* every cut is refused */
        cut_refused += nd_entry_decode(buf, n, &ch) == -EBADMSG;
    CHECK(cut_refused == (int)len, "%d of %zu cuts refused", cut_refused, len);
    uint8_t *pad = malloc(len + 1);
    memcpy(pad, buf, len);
    pad[len] = 0;
    CHECK(nd_entry_decode(pad, len + 1, &ch) == -EBADMSG); /* trailing bytes */
    pad[0] = 9;                                            /* a layout this build does not know */
    CHECK(nd_entry_decode(pad, len, &ch) == -EPROTO);
    memcpy(pad, buf, len);
    pad[1] = 9; /* an unknown kind */
    CHECK(nd_entry_decode(pad, len, &ch) == -EBADMSG);
    memcpy(pad, buf, len);
    pad[0] = 4; /* a journal write's layout with a record's kind */
    CHECK(nd_entry_decode(pad, len, &ch) == -EBADMSG);
    free(pad);
    free(buf);
    nd_record big = r;
    big.id_len = 70000; /* over the u16 field: refused, not cut */
    CHECK(nd_entry_encode(ND_STORE_PUT, &big, NULL, &buf, &len) == -EINVAL);
    big = r;
    big.client_len = ND_CLIENT_MAX + 1; /* over the store's limit */
    CHECK(nd_entry_encode(ND_STORE_PUT, &big, NULL, &buf, &len) == -EINVAL);
}

/* The registering client is an optional trailing field: an entry without
 * one is the bytes of before (layout 1, flags 0), one with it is layout 2
 * (a node of layout 1 refuses it as newer) with flag 8, a length byte and
 * the name at the end. */
static void client_field(void)
{
    nd_record r = full_record();
    uint8_t *with = NULL, *without = NULL;
    size_t wlen = 0, olen = 0;
    REQUIRE(nd_entry_encode(ND_STORE_PUT, &r, NULL, &with, &wlen) == 0);
    r.client = NULL;
    r.client_len = 0;
    REQUIRE(nd_entry_encode(ND_STORE_PUT, &r, NULL, &without, &olen) == 0);
    CHECK(wlen == olen + 1 + 9, "%zu vs %zu", wlen, olen);
    CHECK(without[0] == 1 && with[0] == 2 && without[3] == 0 && with[3] == 8);
    CHECK(memcmp(with + 4, without + 4, olen - 4) == 0);
    CHECK(with[olen] == 9 && memcmp(with + olen + 1, "alice-cms", 9) == 0);
    nd_entry ch;
    with[olen] = 0; /* an empty name is refused */
    CHECK(nd_entry_decode(with, wlen - 9, &ch) == -EBADMSG);
    free(with);
    free(without);
}

/* A superseded record keeps whom it is superseded by; an amendment
 * carries the records it supersedes; every cut of one is refused. */
static void supersede_fields(void)
{
    nd_record r = full_record();
    r.client = NULL; /* (a client alone makes layout 2 too: client_field) */
    r.client_len = 0;
    r.status = ND_CLAIM_SUPERSEDED;
    r.superseded_by_us = 1764115100000001ll;
    nd_record_ref refs[2] = {{.registered_at_us = 5, .id = "B", .id_len = 1},
                             {.registered_at_us = 1764115300000000ll, .id = "doc-C", .id_len = 5}};
    r.supersede = refs;
    r.nsupersede = 2;
    uint8_t *buf = NULL;
    size_t len = 0;
    REQUIRE(nd_entry_encode(ND_STORE_AMEND, &r, NULL, &buf, &len) == 0);
    static nd_entry ch;
    REQUIRE(nd_entry_decode(buf, len, &ch) == 0);
    CHECK(buf[0] == 2, "layout %u: a layout-1 node refuses it as newer", buf[0]);
    CHECK(ch.rec.status == ND_CLAIM_SUPERSEDED && ch.rec.superseded_by_us == r.superseded_by_us);
    CHECK(ch.rec.nsupersede == 2 && ch.rec.supersede);
    for (size_t i = 0; i < 2 && ch.rec.supersede; i++)
        CHECK(ch.rec.supersede[i].registered_at_us == refs[i].registered_at_us &&
              same_bytes(ch.rec.supersede[i].id, ch.rec.supersede[i].id_len, refs[i].id,
                         refs[i].id_len));
    int cut_refused = 0;
    for (size_t n = 0; n < len; n++)
        cut_refused += nd_entry_decode(buf, n, &ch) == -EBADMSG;
    CHECK(cut_refused == (int)len, "%d of %zu cuts refused", cut_refused, len);
    free(buf);
    r.status = ND_CLAIM_ACTIVE; /* no superseded_by with another status */
    r.supersede = NULL;
    r.nsupersede = 0;
    REQUIRE(nd_entry_encode(ND_STORE_AMEND, &r, NULL, &buf, &len) == 0);
    REQUIRE(nd_entry_decode(buf, len, &ch) == 0);
    CHECK(buf[0] == 1 && ch.rec.superseded_by_us == 0 && !ch.rec.supersede &&
          ch.rec.nsupersede == 0);
    buf[0] = 2; /* layout 2 without either field: malformed */
    CHECK(nd_entry_decode(buf, len, &ch) == -EBADMSG);
    free(buf);
    r.supersede = refs;
    r.nsupersede = ND_STORE_SUPERSEDE_MAX + 1;
    CHECK(nd_entry_encode(ND_STORE_AMEND, &r, NULL, &buf, &len) == -EINVAL);
    refs[1].id_len = 0;
    r.nsupersede = 2;
    CHECK(nd_entry_encode(ND_STORE_AMEND, &r, NULL, &buf, &len) == -EINVAL);
}

/* full_record()'s put as the previous release (layout 2, no text) wrote
 * it: entries already in a stream when a node is upgraded. */
static const uint8_t layout2_put[] = {
    0x02, 0x01, 0x01, 0x08, 0x40, 0xa2, 0xd8, 0x13, 0x74, 0x44, 0x06, 0x00, 0xef, 0xcd, 0xab, 0x89,
    0x67, 0x45, 0x23, 0x01, 0xd2, 0x04, 0x00, 0x00, 0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7,
    0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, 0x05, 0x00, 0x64, 0x6f, 0x63, 0x2d, 0x31, 0x18,
    0x6e, 0x64, 0x2d, 0x73, 0x69, 0x6d, 0x68, 0x61, 0x73, 0x68, 0x2d, 0x31, 0x2b, 0x6e, 0x64, 0x2d,
    0x73, 0x6b, 0x65, 0x74, 0x63, 0x68, 0x2d, 0x32, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x74,
    0x69, 0x74, 0x6c, 0x65, 0x22, 0x3a, 0x22, 0x74, 0x22, 0x7d, 0x04, 0x00, 0x61, 0x63, 0x63, 0x74,
    0x15, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x72, 0x65, 0x70, 0x72, 0x69, 0x6e, 0x74, 0x22, 0x3a, 0x22,
    0x66, 0x6f, 0x72, 0x62, 0x69, 0x64, 0x22, 0x7d, 0x03, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
    0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x09, 0x00, 0xa1, 0x85, 0x20, 0x00, 0x09, 0x08, 0x07, 0x06,
    0x05, 0x09, 0x61, 0x6c, 0x69, 0x63, 0x65, 0x2d, 0x63, 0x6d, 0x73};

/* A put or replace carries its text packed (layout 3, flag 16, u32 length
 * and the packed bytes at the end); without a text the bytes are those of
 * the previous release, which still decode; an older node refuses layout 3
 * as newer; every cut of one, a bad codec or a text on a delete is refused. */
static void text_field(void)
{
    nd_record r = full_record();
    const char text[] = "原创 text with emoji \U0001F600 and a repeated phrase, a repeated phrase.";
    uint8_t *buf = NULL, *old = NULL;
    size_t len = 0, olen = 0;
    REQUIRE(nd_entry_encode(ND_STORE_PUT, &r, NULL, &old, &olen) == 0);
    CHECK(same_bytes(old, olen, layout2_put, sizeof(layout2_put)),
          "without a text: the previous release's bytes");
    nd_entry ch;
    REQUIRE(nd_entry_decode(layout2_put, sizeof(layout2_put), &ch) == 0);
    CHECK(ch.kind == ND_STORE_PUT && !ch.rec.text_packed && ch.rec.text_packed_len == 0);
    CHECK(same_bytes(ch.rec.client, ch.rec.client_len, "alice-cms", 9));
    r.text = text;
    r.text_len = sizeof(text) - 1;
    for (int kind = ND_STORE_PUT; kind <= ND_STORE_REPLACE; kind++) {
        REQUIRE(nd_entry_encode(kind, &r, NULL, &buf, &len) == 0);
        CHECK(buf[0] == 3 && buf[3] == (8 | 16), "layout %u flags %u", buf[0], buf[3]);
        CHECK(memcmp(buf + 4, old + 4, olen - 4) == 0, "the fields before the text as in layout 2");
        REQUIRE(nd_entry_decode(buf, len, &ch) == 0);
        CHECK(ch.kind == kind && ch.rec.text == NULL && ch.rec.text_packed);
        char *back = NULL;
        size_t blen = 0;
        CHECK(nd_text_unpack(ch.rec.text_packed, ch.rec.text_packed_len, &back, &blen) == 0);
        CHECK(same_bytes(back, blen, text, sizeof(text) - 1), "the text comes back");
        free(back);
        if (kind == ND_STORE_PUT) {
            int cut_refused = 0;
            for (size_t n = 0; n < len; n++)
                cut_refused += nd_entry_decode(buf, n, &ch) == -EBADMSG;
            CHECK(cut_refused == (int)len, "%d of %zu cuts refused", cut_refused, len);
            buf[olen + 4] = 9; /* the packed text's codec byte: unknown */
            CHECK(nd_entry_decode(buf, len, &ch) == -EBADMSG);
            buf[olen + 4] = ND_TEXT_PACK_ZSTD;
            buf[1] = ND_STORE_DELETE; /* a text only with a put or replace */
            CHECK(nd_entry_decode(buf, len, &ch) == -EBADMSG);
            buf[1] = ND_STORE_PUT;
            buf[0] = 2; /* flag 16 under layout 2: malformed */
            CHECK(nd_entry_decode(buf, len, &ch) == -EBADMSG);
        }
        free(buf);
    }
    /* Packed by the caller (the applier's record): carried as it is. */
    uint8_t *packed;
    size_t plen;
    REQUIRE(nd_text_pack(text, sizeof(text) - 1, &packed, &plen) == 0);
    r.text = NULL;
    r.text_len = 0;
    r.text_packed = packed;
    r.text_packed_len = plen;
    REQUIRE(nd_entry_encode(ND_STORE_PUT, &r, NULL, &buf, &len) == 0);
    REQUIRE(nd_entry_decode(buf, len, &ch) == 0);
    CHECK(same_bytes(ch.rec.text_packed, ch.rec.text_packed_len, packed, plen));
    free(buf);
    /* An amend or a delete never carries one; a bad packed text is refused. */
    REQUIRE(nd_entry_encode(ND_STORE_AMEND, &r, NULL, &buf, &len) == 0);
    CHECK(buf[0] == 2 && !(buf[3] & 16));
    free(buf);
    packed[0] = 7;
    CHECK(nd_entry_encode(ND_STORE_PUT, &r, NULL, &buf, &len) == -EINVAL);
    free(packed);
    free(old);
}

int main(void)
{
    UNIT_RUN(round_trip);
    UNIT_RUN(empty_fields);
    UNIT_RUN(refuses_bad_bytes);
    UNIT_RUN(journal_writes);
    UNIT_RUN(supersede_fields);
    UNIT_RUN(client_field);
    UNIT_RUN(text_field);
    return unit_summary("entry");
}
