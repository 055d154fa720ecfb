/* fuzz_json - server/core/json.c, the request reader, against jansson.
 *
 * The reader accepts exactly the RFC 8259 objects without a duplicate
 * top-level key, nested at most 512 deep, with at most cap members. jansson
 * is the reference, with its own known differences skipped: it refuses
 * integers beyond int64 and reals beyond double ("too big", "overflow"),
 * NUL in keys, nests 2048 deep, and ignores a NUL byte after a token.
 *
 * When both accept: the same members in the same order, each of the same
 * type; strings decoded to the same bytes; integers to the same value; each
 * member's raw span parses (jansson) to the member's value; every array
 * iterates (nd_json_iter) to jansson's elements; and the decoded strings are
 * unchanged after the iterations (the iterator's part of the scratch does
 * not overlap the reader's). The writer, nd_json_write_string(), turns each
 * decoded string back into a literal that jansson reads as the same bytes. */
#include <errno.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "fuzz_util.h"
#include "json.h"

#define CAP 32

static nd_json_scratch scratch;

static bool skip_jansson_error(const json_error_t *e)
{
    return strstr(e->text, "too big") || strstr(e->text, "overflow") || strstr(e->text, "NUL") ||
           strstr(e->text, "too deep") || strstr(e->text, "maximum parsing depth");
}

/* Compares one of our values (not arrays' contents) with jansson's. */
static void same_value(const nd_json_value *v, json_t *j)
{
    switch (v->type) {
    case ND_JSON_NULL: FUZZ_CHECK(json_is_null(j), "null"); break;
    case ND_JSON_TRUE: FUZZ_CHECK(json_is_true(j), "true"); break;
    case ND_JSON_FALSE: FUZZ_CHECK(json_is_false(j), "false"); break;
    case ND_JSON_NUMBER:
        FUZZ_CHECK(json_is_number(j), "number");
        if (v->is_int) {
            FUZZ_CHECK(json_is_integer(j) && json_integer_value(j) == v->i, "integer %lld",
                       (long long)v->i);
        } else {
            FUZZ_CHECK(!json_is_integer(j), "jansson integer %lld, ours not an int64",
                       (long long)json_integer_value(j));
        }
        break;
    case ND_JSON_STRING:
        FUZZ_CHECK(json_is_string(j), "string");
        FUZZ_CHECK(json_string_length(j) == v->str_len &&
                       memcmp(json_string_value(j), v->str, v->str_len) == 0,
                   "string of %zu bytes decoded differently", v->str_len);
        FUZZ_CHECK(fuzz_utf8_valid((const uint8_t *)v->str, v->str_len), "string not UTF-8");
        break;
    case ND_JSON_ARRAY: FUZZ_CHECK(json_is_array(j), "array"); break;
    case ND_JSON_OBJECT: FUZZ_CHECK(json_is_object(j), "object"); break;
    }
    /* The raw span is the value. */
    json_t *raw = json_loadb(v->raw, v->raw_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    FUZZ_CHECK(raw && json_equal(raw, j), "raw span of %zu bytes is not the value", v->raw_len);
    json_decref(raw);
}

/* The writer: s[0..n) (valid UTF-8) as a literal that decodes to itself. */
static void round_trip(const char *s, size_t n)
{
    struct evbuffer *b = evbuffer_new();
    FUZZ_CHECK(b && nd_json_write_string(b, s, n) == 0, "write");
    size_t len = evbuffer_get_length(b);
    const char *lit = (const char *)evbuffer_pullup(b, -1);
    json_error_t e;
    json_t *j = json_loadb(lit, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
    FUZZ_CHECK(j && json_is_string(j) && json_string_length(j) == n &&
                   memcmp(json_string_value(j), s, n) == 0,
               "literal of %zu bytes does not read back: %s", n, j ? "" : e.text);
    for (size_t i = 0; i < len; i++)
        FUZZ_CHECK((unsigned char)lit[i] >= 0x20, "raw control character in the literal");
    json_decref(j);
    evbuffer_free(b);
}

static void same_array(const nd_json_value *v, json_t *j)
{
    nd_json_iter it;
    nd_json_value e;
    size_t k = 0;
    nd_json_iter_init(&it, v, &scratch);
    while (nd_json_iter_next(&it, &e)) {
        FUZZ_CHECK(k < json_array_size(j), "array has more elements than jansson's %zu",
                   json_array_size(j));
        same_value(&e, json_array_get(j, k));
        k++;
    }
    FUZZ_CHECK(k == json_array_size(j), "array has %zu elements, jansson %zu", k,
               json_array_size(j));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    nd_json_member m[CAP];
    size_t n = 0;
    nd_json_error err;
    memset(&err, 0, sizeof(err));
    int rc = nd_json_read_object(buf, size, &scratch, m, CAP, &n, &err);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -E2BIG, "rc %d", rc);
    if (rc == -EINVAL) {
        FUZZ_CHECK(err.line >= 1 && err.column >= 1 && err.text[0], "error without position");
        FUZZ_CHECK(memchr(err.text, 0, sizeof(err.text)), "error text not terminated");
    }

    json_error_t jerr;
    json_t *j = json_loadb(buf, size, JSON_ALLOW_NUL, &jerr);
    if (!j) {
        FUZZ_CHECK(rc != 0 || skip_jansson_error(&jerr), "we accept what jansson refuses: %s",
                   jerr.text);
        return 0;
    }
    /* jansson skips a NUL byte after a token ({"a":1\0} parses): with one in
     * the input, only our acceptance is compared. */
    if (rc == -E2BIG || (rc == -EINVAL && strstr(err.text, "too deep")) ||
        (rc == -EINVAL && memchr(data, 0, size))) {
        json_decref(j);
        return 0;
    }
    if (rc == -EINVAL) {
        /* jansson accepted: not an object, or a duplicate top-level key. */
        if (json_is_object(j)) {
            FUZZ_CHECK(strstr(err.text, "duplicate"), "jansson accepts an object we refuse: %s",
                       err.text);
            json_t *strict = json_loadb(buf, size, JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, NULL);
            FUZZ_CHECK(!strict, "no duplicate key after all");
        }
        json_decref(j);
        return 0;
    }
    FUZZ_CHECK(json_is_object(j), "we accept a non-object");
    FUZZ_CHECK(json_object_size(j) == n, "%zu members, jansson %zu", n, json_object_size(j));
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_getn(j, m[i].key, m[i].key_len);
        FUZZ_CHECK(v, "member %zu not in jansson's object", i);
        same_value(&m[i].value, v);
    }
    for (size_t i = 0; i < n; i++)
        if (m[i].value.type == ND_JSON_ARRAY)
            same_array(&m[i].value, json_object_getn(j, m[i].key, m[i].key_len));
    /* Decoded keys and strings survive the iterations. */
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_getn(j, m[i].key, m[i].key_len);
        FUZZ_CHECK(v, "key %zu changed", i);
        if (m[i].value.type == ND_JSON_STRING) {
            FUZZ_CHECK(json_string_length(v) == m[i].value.str_len &&
                           memcmp(json_string_value(v), m[i].value.str, m[i].value.str_len) == 0,
                       "string %zu changed by iterating", i);
            round_trip(m[i].value.str, m[i].value.str_len);
        }
        round_trip(m[i].key, m[i].key_len);
    }
    json_decref(j);
    return 0;
}
