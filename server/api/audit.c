/* audit.c - the journals' pages: GET /audit (the audit log) and the list
 * a document's copies are read from (nd_audit_page()), one read
 * transaction of the store each. */
#include "answer.h"
#include "api.h"
#include "audit.h"
#include "handlers.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

/* ---- lists: copies and the audit log ---- */

typedef struct page_walk {
    nd_reply *w;
    size_t limit, seen;
    int64_t last_at;      /* the last entry written */
    bool more;            /* one more entry than the limit exists */
    const char *document; /* audit: only entries of this document (NULL: all) */
    size_t document_len;
    nd_request_parser *parser;
    nd_req *viewer; /* audit: only entries this caller may see (NULL: all) */
} page_walk;

/* Whether the caller of pw may see the audit entry whose members are
 * mem[0..n): one it made itself (its client), or one about a document of
 * an account it acts for (the document's account now), or, for a client,
 * one about a document it registered (read from the store). */
static bool entry_visible(page_walk *pw, const nd_json_member *mem, size_t n)
{
    nd_req *r = pw->viewer;
    const nd_json_member *client = nd_json_find(mem, n, "client");
    if (client && client->value.type == ND_JSON_STRING && r->client &&
        client->value.str_len == strlen(r->client) &&
        memcmp(client->value.str, r->client, client->value.str_len) == 0)
        return true;
    const nd_json_member *doc = nd_json_find(mem, n, "document");
    nd_corpus_doc d;
    if (!doc || doc->value.type != ND_JSON_STRING ||
        nd_corpus_get(nd_api_corpus(r), doc->value.str, doc->value.str_len, &d) < 0)
        return false;
    bool visible = nd_api_is_client(r)
                       ? nd_api_registered(r, &d)
                       : d.account && nd_api_may_act_for(r, d.account, d.account_len);
    nd_corpus_doc_release(nd_api_corpus(r), &d);
    return visible;
}

/* Writes one stored value (a compact JSON object) with its time member
 * first (audit: "at") or last (copies: "detected_at"). */
static int visit_entry(void *arg, const nd_store_event *ev)
{
    page_walk *pw = arg;
    if (ev->value_len < 2 || ev->value[0] != '{' || ev->value[ev->value_len - 1] != '}')
        return 0; /* not written by this server: skipped */
    if (pw->document || pw->viewer) {
        size_t n;
        nd_json_member *mem = pw->parser->members;
        nd_json_error jerr;
        if (nd_json_read_object(ev->value, ev->value_len, &pw->parser->js, mem,
                                ND_REQUEST_MAX_MEMBERS, &n, &jerr) < 0)
            return 0;
        const nd_json_member *doc = nd_json_find(mem, n, "document");
        if (pw->document &&
            (!doc || doc->value.type != ND_JSON_STRING || doc->value.str_len != pw->document_len ||
             memcmp(doc->value.str, pw->document, pw->document_len) != 0))
            return 0;
        if (pw->viewer && !entry_visible(pw, mem, n))
            return 0;
    }
    if (pw->seen == pw->limit) {
        pw->more = true;
        return 1;
    }
    pw->seen++;
    pw->last_at = ev->at_us;
    nd_reply *w = pw->w;
    bool empty = ev->value_len == 2;
    if (ev->kind == ND_EVENT_AUDIT) {
        nd_reply_object(w);
        nd_reply_key(w, "at");
        nd_reply_time(w, ev->at_us);
        if (!empty) /* its members, after a comma the writer places */
            nd_reply_raw(w, ev->value + 1, ev->value_len - 2);
        nd_reply_object_end(w);
    } else {
        nd_reply_raw(w, ev->value, ev->value_len - 1); /* without its '}' */
        w->comma = !empty;
        nd_reply_key(w, "detected_at");
        nd_reply_time(w, ev->at_us);
        nd_reply_object_end(w);
    }
    return 0;
}

/* Writes the list of kind of owner as {"<name>":[...],"next_cursor":..}. */
void nd_audit_page(nd_req *r, const char *name, nd_event_kind kind, int64_t owner,
                   const nd_page_req *pg)
{
    nd_request_error e;
    int64_t before = -1;
    int ck = kind == ND_EVENT_AUDIT ? ND_CURSOR_AUDIT : ND_CURSOR_COPIES;
    if (pg->has_cursor && nd_request_cursor_decode(pg->cursor, ck, owner, &before, &e) < 0) {
        nd_api_request_error(r, &e);
        return;
    }
    nd_reply w;
    nd_api_body_begin(r, &w);
    nd_reply_object(&w);
    nd_reply_key(&w, name);
    nd_reply_array(&w);
    page_walk pw = {.w = &w,
                    .limit = pg->limit,
                    .document = pg->document,
                    .document_len = pg->document_len,
                    .parser = nd_api_parser(r),
                    .viewer = kind == ND_EVENT_AUDIT && !nd_api_is_operator(r) ? r : NULL};
    /* One more than asked, to know whether a next page exists; a filter
     * (document=) reads the audit log's index by document; a caller who
     * sees only some entries reads on until it has them. */
    size_t want = pw.viewer ? 0 : pg->limit + 1;
    int rc = pg->document
                 ? nd_corpus_audit_of(nd_api_corpus(r), owner, pg->document, pg->document_len, before,
                                     want, visit_entry, &pw)
                 : nd_corpus_events(nd_api_corpus(r), kind, owner, before, want, visit_entry, &pw);
    nd_reply_array_end(&w);
    if (rc < 0) {
        struct evbuffer *out = w.out; /* drop what was written */
        evbuffer_drain(out, evbuffer_get_length(out));
        nd_api_store_error(r, rc == -EAGAIN ? -EIO : rc, "reading the journal");
        return;
    }
    nd_reply_key(&w, "next_cursor");
    if (pw.more) {
        char cur[ND_CURSOR_TEXT_MAX];
        nd_request_cursor_encode(ck, owner, pw.last_at, cur);
        nd_reply_plain(&w, cur, strlen(cur));
    } else {
        nd_reply_null(&w);
    }
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 200);
}

void nd_workflow_audit(nd_req *r)
{
    /* Guarded whenever a token is set: it names clients. An operator sees
     * every entry, an account token those about documents of its accounts,
     * a client those about documents it registered, and both those they
     * made (nd_audit_page()). The token was asked for (routes.c). */
    nd_page_req pg;
    nd_request_error e;
    if (nd_request_parse_page(nd_api_query(r), true, &pg, &e) < 0) {
        nd_api_request_error(r, &e);
        return;
    }
    nd_audit_page(r, "entries", ND_EVENT_AUDIT, 0, &pg);
    free(pg.document);
}
