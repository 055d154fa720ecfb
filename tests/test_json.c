/* test_json - what neardupd writes as JSON: the one string escaper
 * (server/core/json.c: nd_json_escape, nd_json_write_string) and the answer
 * writer on top of it (server/net/reply.c: commas, numbers, fractions, reals,
 * the error shape), and the one writer of reals (nd_json_format_real,
 * nd_json_dumps). jansson is the reference where the two agree by
 * design: the bytes of answers that jansson used to write (errors, documents,
 * deletions) must not change. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "json.h"
#include "reply.h"
#include "unit.h"

/* The evbuffer's bytes as a NUL-terminated string (static; one at a time). */
static const char *text_of(struct evbuffer *b)
{
    static char out[1 << 16];
    size_t n = evbuffer_get_length(b);
    if (n >= sizeof(out))
        n = sizeof(out) - 1;
    evbuffer_copyout(b, out, n);
    out[n] = 0;
    return out;
}

/* nd_json_write_string() of s[0..len) as a string. */
static const char *written(const char *s, size_t len)
{
    struct evbuffer *b = evbuffer_new();
    CHECK(nd_json_write_string(b, s, len) == 0);
    const char *t = text_of(b);
    evbuffer_free(b);
    return t;
}

/* nd_json_escape() of s[0..len) into a large buffer, as a string. */
static const char *escaped(const char *s, size_t len)
{
    static char buf[1 << 15];
    size_t pos = 0;
    CHECK(nd_json_escape(buf, sizeof(buf) - 1, &pos, s, len));
    buf[pos] = 0;
    return buf;
}

#define EXPECT_ESC(lit, want)                                                                      \
    do {                                                                                           \
        CHECK(strcmp(written(lit, sizeof(lit) - 1), want) == 0, "%s: %s", #lit,                    \
              written(lit, sizeof(lit) - 1));                                                      \
        CHECK(strcmp(escaped(lit, sizeof(lit) - 1), want) == 0, "%s (buffer): %s", #lit,           \
              escaped(lit, sizeof(lit) - 1));                                                      \
    } while (0)

static void test_escape_controls(void)
{
    EXPECT_ESC("", "\"\"");
    EXPECT_ESC("plain ascii 123", "\"plain ascii 123\"");
    EXPECT_ESC("q\"b\\s/", "\"q\\\"b\\\\s/\"");
    EXPECT_ESC("a\nb\rc\td", "\"a\\nb\\rc\\td\"");
    EXPECT_ESC("\x01\x08\x0c\x1f", "\"\\u0001\\u0008\\u000c\\u001f\"");
    EXPECT_ESC("del\x7f", "\"del\\u007f\"");
    /* NUL inside the string (meta may hold one) */
    CHECK(strcmp(written("a\0b", 3), "\"a\\u0000b\"") == 0, "%s", written("a\0b", 3));
    /* every control character, alone: a JSON string jansson reads back as it */
    for (int c = 0; c < 0x20; c++) {
        char s[1] = {(char)c};
        const char *w = written(s, 1);
        json_error_t jerr;
        json_t *v = json_loads(w, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        CHECK(v && json_string_length(v) == 1 && json_string_value(v)[0] == (char)c, "U+%04X: %s",
              c, w);
        json_decref(v);
    }
}

static void test_escape_unicode(void)
{
    EXPECT_ESC("caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87", "\"caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87\"");
    /* non-BMP (U+1D11E, U+1F600): copied as their 4 bytes, never as surrogates */
    EXPECT_ESC("\xf0\x9d\x84\x9e\xf0\x9f\x98\x80", "\"\xf0\x9d\x84\x9e\xf0\x9f\x98\x80\"");
    /* U+2028, U+00A0, the C1 control U+0085: copied (valid JSON as they are) */
    EXPECT_ESC("\xe2\x80\xa8\xc2\xa0\xc2\x85", "\"\xe2\x80\xa8\xc2\xa0\xc2\x85\"");
    /* invalid UTF-8: each bad byte becomes U+FFFD, so any bytes give JSON */
    EXPECT_ESC("a\xff"
               "b",
               "\"a\xef\xbf\xbd"
               "b\"");
    EXPECT_ESC("\x80", "\"\xef\xbf\xbd\"");
    EXPECT_ESC("\xc0\xaf", "\"\xef\xbf\xbd\xef\xbf\xbd\"");                 /* overlong */
    EXPECT_ESC("\xed\xa0\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""); /* surrogate */
    EXPECT_ESC("x\xe4\xb8", "\"x\xef\xbf\xbd\xef\xbf\xbd\"");               /* cut short */
    EXPECT_ESC("\xf4\x90\x80\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
}

/* Random strings: valid UTF-8 without control characters and DEL is
 * written exactly as jansson writes it (the old error bodies); any valid
 * UTF-8 reads back as itself; the evbuffer and buffer forms agree, also
 * for strings longer than any internal piece. */
static void test_escape_like_jansson(void)
{
    static const char *units[] = {"a",
                                  "Z",
                                  " ",
                                  "\"",
                                  "\\",
                                  "/",
                                  "\xc3\xa9",
                                  "\xe4\xb8\xad",
                                  "\xf0\x9f\x98\x80",
                                  "\xe2\x80\xa8",
                                  "\n",
                                  "\t",
                                  "\x01",
                                  "\x7f",
                                  "\r"};
    char s[8192];
    for (int round = 0; round < 400 && !unit_test_failed(); round++) {
        size_t len = 0, n = unit_rng() % (round < 300 ? 40 : 1800);
        bool plain = round % 2 == 0;
        for (size_t i = 0; i < n; i++) {
            const char *u = units[unit_rng() % (plain ? 10 : 15)];
            memcpy(s + len, u, strlen(u));
            len += strlen(u);
        }
        char *w = strdup(written(s, len));
        CHECK(strcmp(w, escaped(s, len)) == 0, "round %d: the two forms differ", round);
        json_t *j = json_stringn(s, len);
        char *ref = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
        if (plain)
            CHECK(strcmp(w, ref) == 0, "round %d: %s vs jansson %s", round, w, ref);
        json_t *back = json_loads(w, JSON_DECODE_ANY, NULL);
        CHECK(back && json_equal(back, j), "round %d: does not read back: %s", round, w);
        json_decref(back);
        json_decref(j);
        free(ref);
        free(w);
    }
}

static void test_escape_capped(void)
{
    char buf[16];
    memset(buf, '#', sizeof(buf));
    size_t pos = 0;
    /* "a\u0001b" needs 10 bytes; 8 do not hold it and nothing past 8 is touched */
    CHECK(!nd_json_escape(buf, 8, &pos,
                          "a\x01"
                          "b",
                          3));
    CHECK(pos == 8 && buf[8] == '#', "pos %zu", pos);
    pos = 0;
    CHECK(nd_json_escape(buf, 10, &pos,
                         "a\x01"
                         "b",
                         3) &&
          pos == 10);
    CHECK(memcmp(buf, "\"a\\u0001b\"", 10) == 0);
    pos = 12; /* already past cap */
    CHECK(!nd_json_escape(buf, 10, &pos, "", 0));
}

/* The body written by fn into a fresh buffer, as a string. */
static const char *reply_of(void (*fn)(nd_reply *w))
{
    struct evbuffer *b = evbuffer_new();
    nd_reply w;
    nd_reply_init(&w, b);
    fn(&w);
    CHECK(nd_reply_finish(&w) == 0);
    const char *t = text_of(b);
    evbuffer_free(b);
    return t;
}

static void write_nested(nd_reply *w)
{
    nd_reply_object(w);
    nd_reply_key(w, "a");
    nd_reply_array(w);
    nd_reply_array_end(w);
    nd_reply_key(w, "b");
    nd_reply_array(w);
    nd_reply_u64(w, 1);
    nd_reply_bool(w, false);
    nd_reply_null(w);
    nd_reply_string(w, "x\"", 2);
    nd_reply_object(w);
    nd_reply_object_end(w);
    nd_reply_object(w);
    nd_reply_key(w, "c");
    nd_reply_raw(w, "{\"m\":[1,2]}", 11);
    nd_reply_key(w, "d");
    nd_reply_plain(w, "ok", 2);
    nd_reply_object_end(w);
    nd_reply_array(w);
    nd_reply_array_end(w);
    nd_reply_array_end(w);
    nd_reply_key(w, "e");
    nd_reply_bool(w, true);
    nd_reply_object_end(w);
}

static void test_writer_structure(void)
{
    const char *t = reply_of(write_nested);
    CHECK(strcmp(t, "{\"a\":[],\"b\":[1,false,null,\"x\\\"\",{},{\"c\":{\"m\":[1,2]},\"d\":\"ok\"},"
                    "[]],\"e\":true}\n") == 0,
          "%s", t);
    json_t *v = json_loads(t, 0, NULL);
    CHECK(v != NULL);
    json_decref(v);
}

static uint64_t number_value;
static void write_number(nd_reply *w)
{
    nd_reply_u64(w, number_value);
}

static double fraction_value;
static void write_fraction(nd_reply *w)
{
    nd_reply_fraction(w, fraction_value);
}

static void test_numbers(void)
{
    static const struct {
        uint64_t v;
        const char *want;
    } ints[] = {{0, "0\n"},
                {7, "7\n"},
                {10, "10\n"},
                {4294967295u, "4294967295\n"},
                {UINT64_MAX, "18446744073709551615\n"}};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        number_value = ints[i].v;
        const char *t = reply_of(write_number);
        CHECK(strcmp(t, ints[i].want) == 0, "%s", t);
    }
    static const struct {
        double x;
        const char *want;
    } fr[] = {{0, "0.0\n"},          {-0.5, "0.0\n"},       {1, "1.0\n"},       {1.5, "1.0\n"},
              {0.5, "0.5\n"},        {0.8125, "0.8125\n"},  {0.25, "0.25\n"},   {0.1, "0.1\n"},
              {1.0 / 3, "0.3333\n"}, {2.0 / 3, "0.6667\n"}, {0.99996, "1.0\n"}, {0.00004, "0.0\n"},
              {0.0007, "0.0007\n"},  {0.5745, "0.5745\n"}};
    for (size_t i = 0; i < sizeof(fr) / sizeof(fr[0]); i++) {
        fraction_value = fr[i].x;
        const char *t = reply_of(write_fraction);
        CHECK(strcmp(t, fr[i].want) == 0, "%g: %s", fr[i].x, t);
    }
    /* reals: every similarity 1 - d/64 as jansson writes it (exact in
     * binary, so "%.17g" is its shortest form already) */
    for (int d = 0; d <= 64; d++) {
        double x = 1.0 - d / 64.0;
        char mine[ND_JSON_REAL_MAX];
        size_t n = nd_json_format_real(x, mine);
        json_t *j = json_real(x);
        char *ref = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
        CHECK(n == strlen(mine) && strcmp(mine, ref) == 0, "%.17g: %s vs jansson %s", x, mine, ref);
        free(ref);
        json_decref(j);
    }
    /* the shortest decimal that reads back, in jansson's form otherwise */
    static const struct {
        double x;
        const char *want;
    } re[] = {{0.958, "0.958"},        {0.1, "0.1"},           {1e-300, "1e-300"},
              {123456789.0, "123456789.0"}, {-2.5, "-2.5"},    {1e22, "1e22"},
              {3, "3.0"},              {0.1 + 0.2, "0.30000000000000004"},
              {1e-5, "1e-5"},          {0, "0.0"}};
    for (size_t i = 0; i < sizeof(re) / sizeof(re[0]); i++) {
        char mine[ND_JSON_REAL_MAX];
        size_t n = nd_json_format_real(re[i].x, mine);
        CHECK(n == strlen(mine) && strcmp(mine, re[i].want) == 0, "%.17g: %s", re[i].x, mine);
    }
    /* random doubles: each reads back, never longer than jansson's */
    srand(57);
    for (int i = 0; i < 20000 && !unit_test_failed(); i++) {
        uint64_t bits = 0;
        for (int b = 0; b < 4; b++)
            bits = bits << 16 | (uint64_t)(rand() & 0xffff);
        double x;
        memcpy(&x, &bits, sizeof(x));
        if (!isfinite(x))
            continue;
        if (i % 2)
            x = (double)(rand() % 100000) / 10000.0; /* figures like 0.958 */
        char mine[ND_JSON_REAL_MAX];
        nd_json_format_real(x, mine);
        json_t *j = json_real(x);
        char *ref = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
        CHECK(strtod(mine, NULL) == x && strlen(mine) <= strlen(ref), "%.17g: %s vs %s", x, mine,
              ref);
        free(ref);
        json_decref(j);
    }
}

/* nd_json_dumps(): jansson's text with each real in its shortest form;
 * strings, integers and the rest untouched. */
static void test_dumps(void)
{
    const char *in = "{\"f\":0.958,\"s\":\"0.95799999999999996 \\\" 1.50\",\"i\":-12,"
                     "\"a\":[1e22,-0.5,2.0,true,false,null,{\"e\":1.5e-7}],\"t\":0.1}";
    json_t *j = json_loads(in, 0, NULL);
    REQUIRE(j != NULL);
    char *ref = json_dumps(j, JSON_COMPACT);
    char *out = nd_json_dumps(j, JSON_COMPACT);
    REQUIRE(ref && out);
    CHECK(strstr(ref, "0.95799999999999996,"), "%s", ref); /* what jansson does */
    const char *want = "{\"f\":0.958,\"s\":\"0.95799999999999996 \\\" 1.50\",\"i\":-12,"
                       "\"a\":[1e22,-0.5,2.0,true,false,null,{\"e\":1.5e-7}],\"t\":0.1}";
    CHECK(strcmp(out, want) == 0, "%s", out);
    json_t *back = json_loads(out, 0, NULL);
    CHECK(back && json_equal(back, j));
    json_decref(back);
    free(out);
    out = nd_json_dumps(j, JSON_INDENT(2)); /* white space kept */
    REQUIRE(out);
    CHECK(strstr(out, "\"f\": 0.958,\n"), "%s", out);
    free(out);
    free(ref);
    json_decref(j);
}

static void write_error(nd_reply *w)
{
    nd_reply_error_begin(w, "invalid_field", "%s must be a string of %d", "texts[3]", 7);
    nd_reply_key(w, "field");
    nd_reply_string(w, "texts[3]", 8);
    nd_reply_error_end(w);
}

static void write_error_long(nd_reply *w)
{
    char big[600];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    nd_reply_error_begin(w, "internal", "%s", big);
    nd_reply_error_end(w);
}

static void write_error_numbers(nd_reply *w)
{
    nd_reply_error_begin(w, "text_too_short", "the text has %u characters: \"%s\"", 12u, "q\\");
    nd_reply_key(w, "chars");
    nd_reply_u64(w, 12);
    nd_reply_key(w, "min_chars");
    nd_reply_u64(w, 300);
    nd_reply_error_end(w);
}

/* The error body as http.c built it with jansson before: code, message,
 * then the extras, compact, and a newline. */
static char *jansson_error(const char *code, const char *msg, json_t *extra)
{
    json_t *e = json_object();
    json_object_set_new(e, "code", json_string(code));
    json_object_set_new(e, "message", json_string(msg));
    if (extra) {
        json_object_update(e, extra);
        json_decref(extra);
    }
    json_t *body = json_object();
    json_object_set_new(body, "error", e);
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char *out = malloc(strlen(s) + 2);
    sprintf(out, "%s\n", s);
    free(s);
    return out;
}

static void test_error_shape(void)
{
    char *ref = jansson_error("invalid_field", "texts[3] must be a string of 7",
                              json_pack("{s:s}", "field", "texts[3]"));
    const char *t = reply_of(write_error);
    CHECK(strcmp(t, ref) == 0, "%s vs jansson %s", t, ref);
    free(ref);
    ref = jansson_error("text_too_short", "the text has 12 characters: \"q\\\"",
                        json_pack("{s:i,s:i}", "chars", 12, "min_chars", 300));
    t = reply_of(write_error_numbers);
    CHECK(strcmp(t, ref) == 0, "%s vs jansson %s", t, ref);
    free(ref);
    /* the message is cut at 511 bytes, as before */
    t = reply_of(write_error_long);
    json_t *v = json_loads(t, 0, NULL);
    const char *msg = json_string_value(json_object_get(json_object_get(v, "error"), "message"));
    CHECK(msg && strlen(msg) == 511, "%s", t);
    json_decref(v);
}

int main(void)
{
    UNIT_RUN(test_escape_controls);
    UNIT_RUN(test_escape_unicode);
    UNIT_RUN(test_escape_like_jansson);
    UNIT_RUN(test_escape_capped);
    UNIT_RUN(test_writer_structure);
    UNIT_RUN(test_numbers);
    UNIT_RUN(test_dumps);
    UNIT_RUN(test_error_shape);
    return unit_summary("json");
}
