/* fingerprint.c - POST /fingerprint: the fingerprint of one text (JSON or
 * plain) or of a batch. */
#include "answer.h"
#include "api.h"
#include "api_worker.h"
#include "handlers.h"

#include <errno.h>
#include <string.h>

#include <event2/buffer.h>

/* Fingerprints text; returns 0, -EILSEQ or -ENOMEM. */
static int fingerprint(nd_req *r, const char *text, size_t len, nd_fingerprint_result *res)
{
    nd_api *api = nd_api_of(r);
    int rc = nd_fingerprint(api->fp, aw_of(r)->fps, text, len, res);
    if (rc == 0) {
        nd_metrics_event(api->metrics, ND_EV_FINGERPRINTS);
        nd_metrics_add(api->metrics, ND_EV_FINGERPRINT_BYTES, len);
    }
    return rc;
}

static void add_fingerprint(nd_reply *w, const nd_fingerprint_result *fr)
{
    nd_reply_object(w);
    nd_reply_key(w, "simhash");
    nd_reply_simhash(w, fr->simhash);
    nd_reply_key(w, "chars");
    nd_reply_u64(w, fr->chars);
    nd_reply_key(w, "features");
    nd_reply_u64(w, fr->features);
    nd_reply_key(w, "version");
    nd_reply_plain(w, ND_FINGERPRINT_VERSION, strlen(ND_FINGERPRINT_VERSION));
    nd_reply_object_end(w);
}

static void reply_fingerprint(nd_req *r, const nd_fingerprint_result *fr)
{
    nd_reply w;
    add_fingerprint(nd_api_body_begin(r, &w), fr);
    nd_api_body_send(r, &w, 200);
}

void fingerprint_failed(nd_req *r, int rc, const char *field)
{
    if (rc == -EILSEQ)
        nd_api_invalid_field(r, field, "%s is not valid UTF-8", field);
    else
        nd_api_error(r, 500, "internal", "fingerprinting failed: %s", strerror(-rc));
}

/* Fingerprints a validated batch (nd_request_parse_fingerprint()). */
static void fingerprint_batch(nd_req *r, const nd_json_value *texts)
{
    api_worker *aw = aw_of(r);
    nd_json_iter it;
    nd_json_value t;
    size_t n = 0;
    nd_reply w;
    nd_reply_object(nd_api_body_begin(r, &w));
    nd_reply_key(&w, "results");
    nd_reply_array(&w);
    nd_json_iter_init(&it, texts, &aw->sh.parser.js);
    while (nd_json_iter_next(&it, &t)) {
        nd_fingerprint_result fr;
        int rc = fingerprint(r, t.str, t.str_len, &fr);
        if (rc < 0) {
            char field[32];
            snprintf(field, sizeof(field), "texts[%zu]", n);
            evbuffer_drain(aw->sh.out, evbuffer_get_length(aw->sh.out));
            fingerprint_failed(r, rc, field);
            return;
        }
        n++;
        add_fingerprint(&w, &fr);
    }
    nd_reply_array_end(&w);
    nd_reply_object_end(&w);
    nd_api_body_send(r, &w, 200);
}

void handle_fingerprint(nd_req *r)
{
    int kind = nd_api_content_kind(r, true);
    if (!kind)
        return;
    nd_request_limits lim = nd_api_limits(nd_req_config(r));
    nd_request_error e;
    nd_fingerprint_result fr;
    size_t len;
    const char *body = nd_req_body(r, &len);
    if (!body) {
        nd_api_error(r, 500, "internal", "out of memory");
        return;
    }
    if (kind == ND_BODY_TEXT) {
        if (nd_request_text_size(len, &lim, "text", &e) < 0) {
            nd_api_request_error(r, &e);
            return;
        }
        int rc = fingerprint(r, body, len, &fr);
        if (rc < 0)
            fingerprint_failed(r, rc, "text");
        else
            reply_fingerprint(r, &fr);
        return;
    }
    nd_fingerprint_request rq;
    if (nd_request_parse_fingerprint(&aw_of(r)->sh.parser, body, len, &lim, &rq, &e) < 0) {
        nd_api_request_error(r, &e);
    } else if (rq.texts) {
        fingerprint_batch(r, rq.texts);
    } else {
        int rc = fingerprint(r, rq.text, rq.text_len, &fr);
        if (rc < 0)
            fingerprint_failed(r, rc, "text");
        else
            reply_fingerprint(r, &fr);
    }
}
