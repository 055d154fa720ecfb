/* test_request - request bodies and paths (server/core/request.c): good
 * requests become the one check request the registry is given (text, its
 * hash, id, register, k, meta), every refusal has its status, code and
 * field, ids are valid by characters, and the limits hold at their edges. */
#include <errno.h>
#include <stdlib.h>

#include <jansson.h>
#include <xxhash.h>

#include "request.h"
#include "unit.h"

static nd_request_parser parser;

static const nd_request_limits LIM = {
    .max_batch = 3, .max_meta = 40, .max_text = 64, .default_k = 3};

static nd_check_req cr;
static nd_request_error err;

/* Parses body as a check; returns the parser's result. */
static int check_body(const char *body)
{
    memset(&err, 0, sizeof(err));
    return nd_request_parse_check(&parser, body, strlen(body), &LIM, &cr, &err);
}

/* Whether the last refusal was status / code / field (NULL: none). */
static bool refused(int status, const char *code, const char *field)
{
    return err.status == status && err.code && strcmp(err.code, code) == 0 &&
           strcmp(err.field, field ? field : "") == 0 && err.message[0];
}

#define EXPECT_REFUSED(body_, status_, code_, field_)                                              \
    do {                                                                                           \
        CHECK(check_body(body_) == -1, "accepted: %s", body_);                                     \
        CHECK(refused(status_, code_, field_), "%s: %d %s [%s] %s", body_, err.status,             \
              err.code ? err.code : "-", err.field, err.message);                                  \
    } while (0)

static void test_check_good(void)
{
    REQUIRE(check_body("{\"text\":\"hello \\u00e9\\ud83d\\ude00\"}") == 0, "%s", err.message);
    CHECK(cr.text_len == 12 && memcmp(cr.text, "hello \xc3\xa9\xf0\x9f\x98\x80", 12) == 0);
    CHECK(cr.id == NULL && cr.id_len == 0 && !cr.do_register && cr.k == LIM.default_k);
    CHECK(cr.meta_raw == NULL && cr.meta == NULL);
    /* the text's hash (the question's, question.h): XXH3-128, canonical
     * (big-endian) bytes */
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(cr.text, cr.text_len));
    uint8_t h[16];
    nd_request_text_hash(cr.text, cr.text_len, h);
    CHECK(memcmp(h, c.digest, 16) == 0);

    const char *full = "{ \"meta\" : {\"b\": [1, 2.50, {}], \"a\": \"x\"}, \"k\": 3.0, "
                       "\"register\": true, \"id\": \"doc-\\u4e2d\", \"text\": \"abc\" }";
    REQUIRE(check_body(full) == 0, "%s", err.message);
    CHECK(cr.do_register && cr.k == 3 && cr.id_len == 7 &&
          memcmp(cr.id, "doc-\xe4\xb8\xad", 7) == 0);
    CHECK(cr.meta_raw && cr.meta_raw[0] == '{' && cr.meta_raw[cr.meta_raw_len - 1] == '}');
    CHECK(cr.meta == NULL, "meta is compacted only when asked");
    REQUIRE(nd_request_check_meta(&cr, &LIM, &err) == 0, "%s", err.message);
    CHECK(cr.meta && strcmp(cr.meta, "{\"b\":[1,2.5,{}],\"a\":\"x\"}") == 0, "%s", cr.meta);
    CHECK(cr.meta_len == strlen(cr.meta));
    CHECK(nd_request_compact_bound(cr.meta_raw, cr.meta_raw_len, SIZE_MAX) <= cr.meta_len);
    free(cr.meta);
    /* k: integers however written, 0 and 8 at the edges */
    const char *ks[] = {"0", "8", "30e-1", "0.3e1", "8.000", "-0"};
    const unsigned kv[] = {0, 8, 3, 3, 8, 0};
    for (int i = 0; i < 6; i++) {
        char body[64];
        snprintf(body, sizeof(body), "{\"text\":\"t\",\"k\":%s}", ks[i]);
        CHECK(check_body(body) == 0 && cr.k == kv[i], "%s: %s", body, err.message);
    }
    /* register false with no id, unknown fields ignored */
    CHECK(check_body("{\"text\":\"t\",\"register\":false,\"other\":[null]}") == 0 &&
          !cr.do_register);
    /* a check without meta: nothing to compact */
    CHECK(check_body("{\"text\":\"t\",\"id\":\"x\",\"register\":true}") == 0);
    CHECK(nd_request_check_meta(&cr, &LIM, &err) == 0 && cr.meta == NULL);
}

static void test_check_errors(void)
{
    /* invalid JSON: a position */
    EXPECT_REFUSED("{\"text\": \"abc\",\n  \"id\" 1}", 400, "invalid_json", NULL);
    CHECK(err.line == 2 && err.column == 8, "line %u column %u", err.line, err.column);
    EXPECT_REFUSED("", 400, "invalid_json", NULL);
    EXPECT_REFUSED("[1]", 400, "invalid_json", NULL);
    EXPECT_REFUSED("{\"text\":\"a\",\"text\":\"b\"}", 400, "invalid_json", NULL);
    EXPECT_REFUSED("{\"text\":\"a\x01\"}", 400, "invalid_json", NULL);
    EXPECT_REFUSED("{\"text\":\"\\ud800\"}", 400, "invalid_json", NULL);
    EXPECT_REFUSED("{\"text\":\"\xff\"}", 400, "invalid_json", NULL);
    /* ND_REQUEST_MAX_MEMBERS fields pass, one more does not */
    char body[2048];
    size_t n = (size_t)snprintf(body, sizeof(body), "{\"text\":\"t\"");
    for (int i = 1; i < ND_REQUEST_MAX_MEMBERS; i++)
        n += (size_t)snprintf(body + n, sizeof(body) - n, ",\"f%d\":1", i);
    snprintf(body + n, sizeof(body) - n, "}");
    CHECK(check_body(body) == 0, "%d fields: %s", ND_REQUEST_MAX_MEMBERS, err.message);
    snprintf(body + n, sizeof(body) - n, ",\"one_more\":1}");
    EXPECT_REFUSED(body, 400, "invalid_json", NULL);
    CHECK(err.line == 0, "no position for too many fields");
    /* nesting: ND_REQUEST_MAX_DEPTH levels in all */
    char *deep = malloc(2 * ND_REQUEST_MAX_DEPTH + 64);
    n = (size_t)sprintf(deep, "{\"text\":\"t\",\"x\":");
    for (int i = 1; i < ND_REQUEST_MAX_DEPTH; i++)
        deep[n++] = '[';
    for (int i = 1; i < ND_REQUEST_MAX_DEPTH; i++)
        deep[n++] = ']';
    strcpy(deep + n, "}");
    CHECK(check_body(deep) == 0, "%d levels: %s", ND_REQUEST_MAX_DEPTH, err.message);
    memmove(deep + 17, deep + 16, strlen(deep + 16) + 1);
    deep[16] = '[';
    n = strlen(deep);
    memmove(deep + n - 1, "]}", 3);
    EXPECT_REFUSED(deep, 400, "invalid_json", NULL);
    free(deep);
    /* text */
    EXPECT_REFUSED("{}", 400, "invalid_field", "text");
    EXPECT_REFUSED("{\"text\":null}", 400, "invalid_field", "text");
    EXPECT_REFUSED("{\"text\":[\"a\"]}", 400, "invalid_field", "text");
    /* the field checks come before the text's size */
    EXPECT_REFUSED("{\"text\":\"0123456789012345678901234567890123456789012345678901234567890123"
                   "4\",\"k\":9}",
                   400, "invalid_field", "k");
    /* id */
    EXPECT_REFUSED("{\"text\":\"t\",\"id\":\"\"}", 400, "invalid_field", "id");
    EXPECT_REFUSED("{\"text\":\"t\",\"id\":null}", 400, "invalid_field", "id");
    EXPECT_REFUSED("{\"text\":\"t\",\"id\":5}", 400, "invalid_field", "id");
    EXPECT_REFUSED("{\"text\":\"t\",\"id\":\"a\\u0000\"}", 400, "invalid_field", "id");
    EXPECT_REFUSED("{\"text\":\"t\",\"id\":\"a\\n\"}", 400, "invalid_field", "id");
    EXPECT_REFUSED("{\"text\":\"t\",\"id\":\"a\\u007f\"}", 400, "invalid_field", "id");
    EXPECT_REFUSED("{\"text\":\"t\",\"id\":\"a\\u0085\"}", 400, "invalid_field", "id");
    /* register */
    EXPECT_REFUSED("{\"text\":\"t\",\"register\":\"yes\"}", 400, "invalid_field", "register");
    EXPECT_REFUSED("{\"text\":\"t\",\"register\":null}", 400, "invalid_field", "register");
    EXPECT_REFUSED("{\"text\":\"t\",\"register\":true}", 400, "invalid_field", "id");
    /* k */
    const char *bad_k[] = {
        "9",     "-1",        "2.5",
        "\"3\"", "null",      "true",
        "1e400", "3.0000001", "100000000000000000000000000000000000000000000000000"};
    for (size_t i = 0; i < sizeof(bad_k) / sizeof(bad_k[0]); i++) {
        snprintf(body, sizeof(body), "{\"text\":\"t\",\"k\":%s}", bad_k[i]);
        EXPECT_REFUSED(body, 400, "invalid_field", "k");
    }
    /* meta */
    EXPECT_REFUSED("{\"text\":\"t\",\"meta\":null}", 400, "invalid_field", "meta");
    EXPECT_REFUSED("{\"text\":\"t\",\"meta\":[1]}", 400, "invalid_field", "meta");
    EXPECT_REFUSED("{\"text\":\"t\",\"meta\":\"{}\"}", 400, "invalid_field", "meta");
    /* meta checked for a registration: within max_meta (40) as compact JSON */
    CHECK(check_body("{\"text\":\"t\",\"id\":\"i\",\"register\":true,"
                     "\"meta\":{\"a\":\"01234567890123456789012345678901\"}}") == 0);
    CHECK(nd_request_check_meta(&cr, &LIM, &err) == 0 && cr.meta_len == 40, "%s", err.message);
    free(cr.meta);
    CHECK(check_body("{\"text\":\"t\",\"id\":\"i\",\"register\":true,"
                     "\"meta\":{\"a\":\"012345678901234567890123456789012\"}}") == 0);
    CHECK(nd_request_check_meta(&cr, &LIM, &err) == -1 && refused(400, "invalid_field", "meta"));
    CHECK(cr.meta == NULL);
    /* escapes and numbers count as jansson writes them: {"a":"\u00e9\u00e9","b":[100.0]} */
    CHECK(check_body("{\"text\":\"t\",\"meta\":{\"a\":\"\\u00e9\\u00e9\",\"b\":[1e2]}}") == 0);
    CHECK(nd_request_check_meta(&cr, &LIM, &err) == 0, "%s", err.message);
    free(cr.meta);
    CHECK(check_body("{\"text\":\"t\",\"meta\":{\"a\":1,\"a\":2}}") == 0, "nested: raw");
    CHECK(nd_request_check_meta(&cr, &LIM, &err) == -1 && refused(400, "invalid_field", "meta"),
          "duplicate key in meta: %s", err.message);
    CHECK(check_body("{\"text\":\"t\",\"meta\":{\"a\\u0000\":1}}") == 0);
    CHECK(nd_request_check_meta(&cr, &LIM, &err) == -1 && refused(400, "invalid_field", "meta"),
          "NUL in a key: %s", err.message);
}

static void test_text_limit(void)
{
    char body[256];
    char text[80];
    memset(text, 'x', sizeof(text));
    /* LIM.max_text = 64 bytes of UTF-8: 64 pass, 65 do not, in both endpoints */
    snprintf(body, sizeof(body), "{\"text\":\"%.*s\"}", 64, text);
    CHECK(check_body(body) == 0);
    snprintf(body, sizeof(body), "{\"text\":\"%.*s\"}", 65, text);
    EXPECT_REFUSED(body, 400, "invalid_field", "text");
    /* escapes count as the bytes they decode to */
    snprintf(body, sizeof(body), "{\"text\":\"%.*s\\u00e9\"}", 62, text);
    CHECK(check_body(body) == 0 && cr.text_len == 64, "%s", err.message);
    snprintf(body, sizeof(body), "{\"text\":\"%.*s\\u4e2d\"}", 62, text);
    EXPECT_REFUSED(body, 400, "invalid_field", "text");
    CHECK(nd_request_text_size(64, &LIM, "text", &err) == 0);
    CHECK(nd_request_text_size(65, &LIM, "text", &err) == -1 &&
          refused(400, "invalid_field", "text"));
}

static void test_fingerprint_bodies(void)
{
    nd_fingerprint_request fr;
    const char *b = "{\"texts\":[\"a\",\"b\\n\",\"\"]}";
    CHECK(nd_request_parse_fingerprint(&parser, b, strlen(b), &LIM, &fr, &err) == 0 && fr.texts &&
          fr.ntexts == 3 && fr.text == NULL);
    nd_json_iter it;
    nd_json_value v;
    nd_json_iter_init(&it, fr.texts, &parser.js);
    CHECK(nd_json_iter_next(&it, &v) && v.str_len == 1 && v.str[0] == 'a');
    CHECK(nd_json_iter_next(&it, &v) && v.str_len == 2 && memcmp(v.str, "b\n", 2) == 0);
    CHECK(nd_json_iter_next(&it, &v) && v.str_len == 0);
    CHECK(!nd_json_iter_next(&it, &v));
    b = "{\"text\":\"one\"}";
    CHECK(nd_request_parse_fingerprint(&parser, b, strlen(b), &LIM, &fr, &err) == 0 && fr.text &&
          fr.text_len == 3 && !fr.texts);
    static const struct {
        const char *body, *field;
    } bad[] = {
        {"{\"texts\":[\"a\",\"b\",\"c\",\"d\"]}", "texts"}, /* max_batch 3 */
        {"{\"texts\":[\"a\",1]}", "texts[1]"},
        {"{\"texts\":[\"a\",\"b\",null]}", "texts[2]"},
        {"{\"texts\":\"a\"}", "texts"},
        {"{\"texts\":null}", "texts"},
        {"{\"text\":\"a\",\"texts\":[\"b\"]}", "texts"},
        {"{\"text\":null}", "text"},
        {"{}", "text"},
        {"{\"texts\":[\"a\",\"01234567890123456789012345678901234567890123456789012345678901234\"]"
         "}",
         "texts[1]"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&err, 0, sizeof(err));
        CHECK(nd_request_parse_fingerprint(&parser, bad[i].body, strlen(bad[i].body), &LIM, &fr,
                                           &err) == -1,
              "accepted %s", bad[i].body);
        CHECK(refused(400, "invalid_field", bad[i].field), "%s: %s [%s]", bad[i].body,
              err.code ? err.code : "-", err.field);
    }
}

static void test_content_type(void)
{
    CHECK(nd_request_content_kind("application/json", false, &err) == ND_BODY_JSON);
    CHECK(nd_request_content_kind("  Application/JSON; charset=UTF-8", false, &err) ==
          ND_BODY_JSON);
    CHECK(nd_request_content_kind("application/json; charset=\"utf8\"", false, &err) ==
          ND_BODY_JSON);
    CHECK(nd_request_content_kind("text/plain; charset=utf-8", true, &err) == ND_BODY_TEXT);
    const char *bad[] = {NULL,
                         "",
                         "text/plain",
                         "application/jsonx",
                         "application/json; "
                         "charset=latin1",
                         "text/html"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&err, 0, sizeof(err));
        CHECK(nd_request_content_kind(bad[i], false, &err) == 0 &&
                  refused(415, "unsupported_media_type", NULL),
              "%s", bad[i] ? bad[i] : "(none)");
    }
    CHECK(nd_request_content_kind("text/plain; charset=latin1", true, &err) == 0);
}

/* A string of n copies of the UTF-8 sequence u. */
static char *repeat(const char *u, size_t n, size_t *len)
{
    size_t k = strlen(u);
    char *s = malloc(k * n + 1);
    for (size_t i = 0; i < n; i++)
        memcpy(s + i * k, u, k);
    s[k * n] = 0;
    *len = k * n;
    return s;
}

static void test_id_valid(void)
{
    /* counted in characters: 256 of any width pass, 257 do not */
    static const char *widths[] = {"a", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80"};
    for (int w = 0; w < 4; w++) {
        size_t len;
        char *s = repeat(widths[w], ND_ID_MAX_CHARS, &len);
        CHECK(nd_request_id_valid(s, len), "256 characters of %d bytes", w + 1);
        free(s);
        s = repeat(widths[w], ND_ID_MAX_CHARS + 1, &len);
        CHECK(!nd_request_id_valid(s, len), "257 characters of %d bytes", w + 1);
        free(s);
    }
    CHECK(ND_ID_MAX_UTF8 == 4 * ND_ID_MAX_CHARS);
    CHECK(nd_request_id_valid("a", 1));
    CHECK(nd_request_id_valid("a b/c?d#e%f\"g\\h", 15), "printable ASCII of any kind");
    CHECK(nd_request_id_valid("\xc2\xa0", 2), "U+00A0 is not a control character");
    CHECK(!nd_request_id_valid("", 0));
    /* control characters: C0, DEL, C1 */
    for (unsigned c = 0; c < 0x20; c++) {
        char s[3] = {'x', (char)c, 'y'};
        CHECK(!nd_request_id_valid(s, 3), "U+%04X", c);
    }
    CHECK(!nd_request_id_valid("x\x7f", 2), "DEL");
    for (unsigned c = 0x80; c < 0xa0; c++) {
        char s[2] = {(char)0xc2, (char)c};
        CHECK(!nd_request_id_valid(s, 2), "U+%04X", c);
    }
    /* not UTF-8 */
    CHECK(!nd_request_id_valid("\xff", 1));
    CHECK(!nd_request_id_valid("\xc0\xaf", 2), "overlong");
    CHECK(!nd_request_id_valid("\xed\xa0\x80", 3), "surrogate");
    CHECK(!nd_request_id_valid("a\xe4\xb8", 3), "cut short");
}

static void test_document_id(void)
{
    char *id;
    size_t len;
    CHECK(nd_request_parse_document_id("a%22q%5Cb%2F%C3%A9", &id, &len, &err) == 0 && len == 8 &&
          memcmp(id, "a\"q\\b/\xc3\xa9", 8) == 0 && id[len] == 0);
    free(id);
    CHECK(nd_request_parse_document_id("plain-id", &id, &len, &err) == 0 && len == 8);
    free(id);
    memset(&err, 0, sizeof(err));
    CHECK(nd_request_parse_document_id("", &id, &len, &err) == -1 && id == NULL &&
          refused(404, "not_found", NULL));
    const char *bad[] = {"%01", "a%7F", "%C2%85", "%FF", "%C0%AF", "a%00b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&err, 0, sizeof(err));
        CHECK(nd_request_parse_document_id(bad[i], &id, &len, &err) == -1 && id == NULL &&
                  refused(400, "invalid_field", "id"),
              "%s", bad[i]);
    }
    /* 256 characters after decoding pass, 257 do not */
    size_t n;
    char *enc = repeat("%E4%B8%AD", ND_ID_MAX_CHARS, &n);
    CHECK(nd_request_parse_document_id(enc, &id, &len, &err) == 0 && len == 768);
    free(id);
    free(enc);
    enc = repeat("%E4%B8%AD", ND_ID_MAX_CHARS + 1, &n);
    CHECK(nd_request_parse_document_id(enc, &id, &len, &err) == -1);
    free(enc);
}

int main(void)
{
    UNIT_RUN(test_check_good);
    UNIT_RUN(test_check_errors);
    UNIT_RUN(test_text_limit);
    UNIT_RUN(test_fingerprint_bodies);
    UNIT_RUN(test_content_type);
    UNIT_RUN(test_id_valid);
    UNIT_RUN(test_document_id);
    nd_request_parser_finish(&parser);
    return unit_summary("request");
}
