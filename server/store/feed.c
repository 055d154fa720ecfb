/* feed.c - the event feed's types, stored layout and JSON form (feed.h). */
#include "feed.h"
#include "json.h"
#include "log.h"
#include "record.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FEED_LAYOUT 1u
#define FEED_HDR 12u /* layout, type, at_us (8), u16 account length */

static const char *const type_names[ND_FEED_TYPES] = {
    [ND_FEED_COPY_DETECTED] = "copy.detected",       [ND_FEED_CLAIM_REVOKED] = "claim.revoked",
    [ND_FEED_CLAIM_RESTORED] = "claim.restored",     [ND_FEED_POLICY_CHANGED] = "policy.changed",
    [ND_FEED_DOCUMENT_DELETED] = "document.deleted", [ND_FEED_IMPORT_FINISHED] = "import.finished",
};

/* The audit actions shown, by the type they are. */
static const struct {
    const char *action;
    nd_feed_type type;
} audit_types[] = {
    {"revoke", ND_FEED_CLAIM_REVOKED},   {"restore", ND_FEED_CLAIM_RESTORED},
    {"policy", ND_FEED_POLICY_CHANGED},  {"delete", ND_FEED_DOCUMENT_DELETED},
    {"import", ND_FEED_IMPORT_FINISHED},
};

const char *nd_feed_type_name(nd_feed_type type)
{
    return type > ND_FEED_NONE && type < ND_FEED_TYPES ? type_names[type] : NULL;
}

nd_feed_type nd_feed_type_parse(const char *s, size_t len)
{
    for (int t = ND_FEED_NONE + 1; t < ND_FEED_TYPES; t++)
        if (strlen(type_names[t]) == len && memcmp(type_names[t], s, len) == 0)
            return (nd_feed_type)t;
    return ND_FEED_NONE;
}

nd_feed_type nd_feed_type_of(const nd_store_event *ev)
{
    if (ev->kind == ND_EVENT_DETECTION)
        return ND_FEED_COPY_DETECTED;
    if (ev->kind != ND_EVENT_AUDIT || !ev->value || !ev->value_len)
        return ND_FEED_NONE;
    json_t *v = json_loadb(ev->value, ev->value_len, 0, NULL);
    const char *action = json_string_value(json_object_get(v, "action"));
    nd_feed_type type = ND_FEED_NONE;
    for (size_t i = 0; action && i < sizeof(audit_types) / sizeof(audit_types[0]); i++)
        if (strcmp(action, audit_types[i].action) == 0)
            type = audit_types[i].type;
    json_decref(v);
    return type;
}

/* A JSON string of len bytes, or null when s is NULL or empty. */
static json_t *string_or_null(const char *s, size_t len)
{
    json_t *j = s && len ? json_stringn(s, len) : NULL;
    return j ? j : json_null();
}

/* Writes us as the API's time text ("2026-11-29T10:00:00.000000Z"). */
static json_t *time_json(int64_t us)
{
    char ts[32];
    nd_log_format_time(us, ts);
    return json_string(ts);
}

/* Dumps j compactly, each real as the answers write it (json.h: 0.958, not
 * 0.95799999999999996), then frees it. Returns the text with *len, or NULL. */
static char *dump(json_t *j, size_t *len)
{
    char *out = j ? nd_json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (out)
        *len = strlen(out);
    return out;
}

char *nd_feed_detection_data(const nd_store_event *ev, const nd_record *original, size_t *len)
{
    json_t *v = json_loadb(ev->value ? ev->value : "", ev->value_len, 0, NULL);
    json_t *d = json_object(), *copy = json_object(), *orig = json_object();
    if (!d || !copy || !orig) {
        json_decref(v), json_decref(d), json_decref(copy), json_decref(orig);
        return NULL;
    }
    json_object_set_new(copy, "id", string_or_null(ev->copy_id, ev->copy_id_len));
    json_t *acct = json_object_get(v, "account");
    json_object_set(copy, "account", json_is_string(acct) ? acct : json_null());
    json_object_set_new(d, "copy", copy);
    if (original) {
        json_object_set_new(orig, "id", string_or_null(original->id, original->id_len));
        json_object_set_new(orig, "registered_at", time_json(original->registered_at_us));
        json_object_set_new(orig, "account",
                            string_or_null(original->account, original->account_len));
    } else {
        json_object_set_new(orig, "registered_at", time_json(ev->owner_at));
    }
    json_object_set_new(d, "original", orig);
    static const char *const figures[] = {"kind", "resemblance", "containment", "distance"};
    for (size_t i = 0; i < sizeof(figures) / sizeof(figures[0]); i++) {
        json_t *f = json_object_get(v, figures[i]);
        if (f)
            json_object_set(d, figures[i], f);
    }
    json_decref(v);
    return dump(d, len);
}

int nd_feed_event_of(const nd_store_event *jev, const nd_record *subject, nd_event_rec *ev,
                     char **owned)
{
    *owned = NULL;
    nd_feed_type type = nd_feed_type_of(jev);
    if (type == ND_FEED_NONE)
        return 0;
    *ev = (nd_event_rec){.type = type, .at_us = jev->at_us};
    if (subject && subject->account && subject->account_len) {
        ev->account = subject->account;
        ev->account_len = subject->account_len;
    }
    if (type == ND_FEED_COPY_DETECTED) {
        if (!(*owned = nd_feed_detection_data(jev, subject, &ev->data_len)))
            return -ENOMEM;
        ev->data = *owned;
    } else {
        ev->data = jev->value_len ? jev->value : "{}";
        ev->data_len = jev->value_len ? jev->value_len : 2;
    }
    return 1;
}

size_t nd_feed_value_size(const nd_event_rec *ev)
{
    return FEED_HDR + ev->account_len + ev->data_len + 1;
}

void nd_feed_value_encode(unsigned char *p, const nd_event_rec *ev)
{
    p[0] = FEED_LAYOUT;
    p[1] = (unsigned char)ev->type;
    nd_le_put(p + 2, (uint64_t)ev->at_us, 8);
    nd_le_put(p + 10, ev->account_len, 2);
    if (ev->account_len)
        memcpy(p + FEED_HDR, ev->account, ev->account_len);
    memcpy(p + FEED_HDR + ev->account_len, ev->data, ev->data_len);
    p[FEED_HDR + ev->account_len + ev->data_len] = 0;
}

int nd_feed_value_decode(uint64_t seq, const unsigned char *p, size_t n, nd_event_rec *ev)
{
    if (n < FEED_HDR + 1 || p[0] != FEED_LAYOUT || !nd_feed_type_name((nd_feed_type)p[1]))
        return -EBADMSG;
    size_t alen = (size_t)nd_le_get(p + 10, 2);
    if (FEED_HDR + alen + 1 > n || p[n - 1] != 0)
        return -EBADMSG;
    *ev = (nd_event_rec){.seq = seq,
                         .at_us = (int64_t)nd_le_get(p + 2, 8),
                         .type = (nd_feed_type)p[1],
                         .account = alen ? (const char *)p + FEED_HDR : NULL,
                         .account_len = alen,
                         .data = (const char *)p + FEED_HDR + alen,
                         .data_len = n - FEED_HDR - alen - 1};
    return 0;
}

void nd_event_id(uint64_t seq, char out[ND_EVENT_ID_LEN + 1])
{
    snprintf(out, ND_EVENT_ID_LEN + 1, "evt_%016llx", (unsigned long long)seq);
}

size_t nd_event_json_head(const nd_event_rec *ev, char *out)
{
    char id[ND_EVENT_ID_LEN + 1], at[32];
    nd_event_id(ev->seq, id);
    nd_log_format_time(ev->at_us, at);
    const char *type = nd_feed_type_name(ev->type);
    int n = snprintf(out, ND_EVENT_HEAD_MAX,
                     "{\"id\":\"%s\",\"seq\":%llu,\"type\":\"%s\",\"at\":\"%s\",\"account\":", id,
                     (unsigned long long)ev->seq, type ? type : "", at);
    size_t pos = n > 0 ? (size_t)n : 0;
    if (ev->account && ev->account_len && ev->account_len <= ND_ACCOUNT_MAX) {
        nd_json_escape(out, ND_EVENT_HEAD_MAX, &pos, ev->account, ev->account_len);
    } else {
        memcpy(out + pos, "null", 4);
        pos += 4;
    }
    memcpy(out + pos, ",\"data\":", 8);
    return pos + 8;
}

void nd_event_data(const nd_event_rec *ev, const char **data, size_t *len)
{
    if (ev->data && ev->data_len >= 2 && ev->data[0] == '{' && ev->data[ev->data_len - 1] == '}' &&
        !memchr(ev->data, 0, ev->data_len)) {
        *data = ev->data;
        *len = ev->data_len;
    } else {
        *data = "{}";
        *len = 2;
    }
}

char *nd_event_json(const nd_event_rec *ev, size_t *len)
{
    char head[ND_EVENT_HEAD_MAX];
    size_t hlen = nd_event_json_head(ev, head);
    const char *data;
    size_t dlen;
    nd_event_data(ev, &data, &dlen);
    char *out = malloc(hlen + dlen + 2);
    if (!out)
        return NULL;
    memcpy(out, head, hlen);
    memcpy(out + hlen, data, dlen);
    memcpy(out + hlen + dlen, "}", 2);
    *len = hlen + dlen + 1;
    return out;
}

/* nd_store_events_after()'s visit: counts up to limit. */
typedef struct after_walk {
    size_t left;
    int (*visit)(void *arg, const nd_event_rec *ev);
    void *arg;
} after_walk;

static int after_visit(void *arg, const nd_event_rec *ev)
{
    after_walk *w = arg;
    if (w->left == 0)
        return 1;
    w->left--;
    int rc = w->visit(w->arg, ev);
    return rc ? rc : w->left == 0 ? 1 : 0;
}

int nd_store_events_after(nd_store *st, uint64_t after, size_t limit,
                          int (*visit)(void *arg, const nd_event_rec *ev), void *arg)
{
    after_walk w = {limit, visit, arg};
    if (limit == 0)
        return 0;
    int rc = nd_store_feed_scan(st, after, false, after_visit, &w);
    return rc == 1 && w.left == 0 ? 0 : rc;
}
