/* fuzz_body_common.h - what the body targets share: limits chosen by the
 * first input byte (so small limits get exercised too), and the checks every
 * refusal must pass before it becomes an HTTP answer. */
#ifndef ND_FUZZ_BODY_COMMON_H
#define ND_FUZZ_BODY_COMMON_H

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fingerprint.h"
#include "fuzz_util.h"
#include "request.h"

/* The fingerprinter, its scratch and the request parser, made once. */
static nd_fingerprinter *fp;
static nd_fp_scratch *fps;
static nd_request_parser parser;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (nd_fingerprinter_create(&fp) < 0 || nd_fp_scratch_create(&fps) < 0)
        abort();
    return 0;
}

/* A text the request reader accepted must fingerprint without error (the
 * reader validated its UTF-8). */
static void fingerprint_ok(const char *s, size_t n)
{
    nd_fingerprint_result r;
    int rc = nd_fingerprint(fp, fps, s, n, &r);
    FUZZ_CHECK(rc == 0, "a text of %zu bytes the reader accepted: %d", n, rc);
}

/* Byte 0 picks the limits; the body is the rest. */
static inline nd_request_limits fuzz_limits(uint8_t b)
{
    static const unsigned batch[4] = {1000, 1, 3, 16};
    static const size_t text[4] = {1 << 20, 0, 8, 300};
    static const size_t meta[4] = {16 * 1024, 2, 16, 200};
    return (nd_request_limits){.max_batch = batch[b & 3],
                               .max_text = text[(b >> 2) & 3],
                               .max_meta = meta[(b >> 4) & 3],
                               .default_k = (b >> 6) * 2};
}

/* A refusal is well formed: a status and code that go together, a message
 * that jansson takes as a JSON string, a field where one is due. */
static inline void fuzz_check_refusal(const nd_request_error *e)
{
    FUZZ_CHECK(e->code, "no code");
    FUZZ_CHECK(memchr(e->message, 0, sizeof(e->message)) && e->message[0], "message");
    FUZZ_CHECK(fuzz_utf8_valid((const uint8_t *)e->message, strlen(e->message)),
               "message not UTF-8: %s", e->message);
    json_t *s = json_string(e->message);
    FUZZ_CHECK(s, "jansson refuses the message");
    json_decref(s);
    FUZZ_CHECK(memchr(e->field, 0, sizeof(e->field)), "field not terminated");
    if (strcmp(e->code, "invalid_field") == 0) {
        FUZZ_CHECK(e->status == 400 && e->field[0], "invalid_field without a field");
        FUZZ_CHECK(strstr(e->message, e->field) || strcmp(e->field, "id") == 0,
                   "message does not name %s: %s", e->field, e->message);
    } else if (strcmp(e->code, "invalid_json") == 0) {
        FUZZ_CHECK(e->status == 400 && !e->field[0], "invalid_json");
        FUZZ_CHECK(!e->line == !e->column, "line without column");
    } else {
        FUZZ_CHECK(strcmp(e->code, "internal") == 0 && e->status == 500, "code %s", e->code);
    }
}

#endif
