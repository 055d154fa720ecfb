/* fuzz_check_body - POST /check-original: the JSON body's parsing and
 * validation (server/core/request.c), then what the handler does with an accepted
 * request before the registry: fingerprint the text; its hash is the text's.
 *
 * Invariants: a refusal is well formed (fuzz_body_common.h) and leaves no
 * "meta" behind (LeakSanitizer); an accepted request has a valid id when it
 * has one, an id when it registers, k in 0..8, a text within the limit that
 * the fingerprinter accepts, a raw "meta" that is an object, and (as a
 * registration does next, nd_request_check_meta()) a compact "meta" within
 * the limit whose size the raw bound never overestimated, written as the
 * server writes JSON and unchanged when read and written again. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "fingerprint.h"
#include "fuzz_body_common.h"
#include "json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    nd_request_limits lim = fuzz_limits(data[0]);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    nd_check_req cr;
    nd_request_error e;
    if (nd_request_parse_check(&parser, body, len, &lim, &cr, &e) < 0) {
        fuzz_check_refusal(&e);
        FUZZ_CHECK(cr.meta == NULL, "meta left on a refusal");
        return 0;
    }
    FUZZ_CHECK(cr.meta == NULL, "meta built by the parse");
    if (cr.meta_raw)
        FUZZ_CHECK(cr.meta_raw[0] == '{', "raw meta is not an object");
    if (nd_request_check_meta(&cr, &lim, &e) < 0) {
        fuzz_check_refusal(&e);
        FUZZ_CHECK(cr.meta == NULL, "meta left on a refusal");
        return 0;
    }
    FUZZ_CHECK(cr.text && cr.text_len <= lim.max_text, "text");
    if (cr.id)
        FUZZ_CHECK(nd_request_id_valid(cr.id, cr.id_len), "id");
    FUZZ_CHECK(!cr.do_register || cr.id, "registering without an id");
    FUZZ_CHECK(cr.k <= ND_K_MAX, "k %u", cr.k);
    if (cr.meta) {
        FUZZ_CHECK(strlen(cr.meta) == cr.meta_len && cr.meta_len <= lim.max_meta, "meta size");
        json_t *m = json_loadb(cr.meta, cr.meta_len, JSON_ALLOW_NUL, NULL);
        FUZZ_CHECK(json_is_object(m), "meta is not an object: %s", cr.meta);
        /* Compact as the server writes JSON (reals by nd_json_format_real(),
         * not jansson's %.17g): its own output read again writes the same. */
        char *again = nd_json_dumps(m, JSON_COMPACT);
        FUZZ_CHECK(again && strcmp(again, cr.meta) == 0, "meta is not compact: %s / %s", cr.meta,
                   again ? again : "(null)");
        size_t bound = nd_request_compact_bound(cr.meta_raw, cr.meta_raw_len, SIZE_MAX);
        FUZZ_CHECK(bound <= cr.meta_len, "bound %zu over the compact size %zu", bound, cr.meta_len);
        free(again);
        json_decref(m);
    }
    fingerprint_ok(cr.text, cr.text_len);
    free(cr.meta);
    return 0;
}
