/* fuzz_fingerprint_body - POST /fingerprint: the JSON body's parsing and
 * validation (server/core/request.c) as the handler runs it, then the
 * fingerprinting of every text it lets through.
 *
 * Invariants: a refusal is well formed (fuzz_body_common.h); an accepted
 * single text or batch keeps the limits (batch size, text length); the batch
 * iterates to exactly ntexts strings; and no text the JSON reader let through
 * is refused by the fingerprinter as invalid UTF-8 (the reader validates
 * it). */
#include <errno.h>

#include "fingerprint.h"
#include "fuzz_body_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    nd_request_limits lim = fuzz_limits(data[0]);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    nd_fingerprint_request rq;
    nd_request_error e;
    if (nd_request_parse_fingerprint(&parser, body, len, &lim, &rq, &e) < 0) {
        fuzz_check_refusal(&e);
        FUZZ_CHECK(e.status == 400, "status %d", e.status);
        return 0;
    }
    if (!rq.texts) {
        FUZZ_CHECK(rq.text && rq.text_len <= lim.max_text, "text of %zu bytes", rq.text_len);
        fingerprint_ok(rq.text, rq.text_len);
        return 0;
    }
    FUZZ_CHECK(!rq.text && rq.ntexts <= lim.max_batch, "batch of %zu", rq.ntexts);
    nd_json_iter it;
    nd_json_value t;
    size_t n = 0;
    nd_json_iter_init(&it, rq.texts, &parser.js);
    while (nd_json_iter_next(&it, &t)) {
        FUZZ_CHECK(t.type == ND_JSON_STRING && t.str_len <= lim.max_text, "item %zu", n);
        fingerprint_ok(t.str, t.str_len);
        n++;
    }
    FUZZ_CHECK(n == rq.ntexts, "iterated %zu of %zu", n, rq.ntexts);
    return 0;
}
