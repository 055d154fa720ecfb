/* test_log.c - server/ops/log.c's time formatter against gmtime_r + strftime,
 * the slow path it replaced, over edges and a million random times; the
 * server's one JSON string escaper (json.c, which log lines use) against the
 * escaper log.c had before, byte for byte, with and without room; and the
 * access-log line (nd_log_format_access) read back by jansson. */
#include "json.h"
#include "log.h"
#include "unit.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void reference(int64_t us, char out[32])
{
    time_t secs = (time_t)(us / 1000000);
    long frac = (long)(us % 1000000);
    if (frac < 0) {
        frac += 1000000;
        secs -= 1;
    }
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(out, 24, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%06ldZ", frac);
}

static int check_one(int64_t us)
{
    char got[32], want[32];
    memset(got, 'x', sizeof(got));
    nd_log_format_time(us, got);
    reference(us, want);
    CHECK(strcmp(got, want) == 0, "us=%lld got %s want %s", (long long)us, got, want);
    return strcmp(got, want) == 0;
}

/* ---- the escaper: log.c's own before it used json.c's (the reference) ---- */

/* Length of the valid UTF-8 sequence at s[i..len), or 0 if malformed. */
static size_t utf8_seq_len(const unsigned char *s, size_t len, size_t i)
{
    unsigned c = s[i];
    size_t need;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 2;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 3;
    else
        return 0;
    if (len - i <= need)
        return 0;
    for (size_t k = 1; k <= need; k++)
        if ((s[i + k] & 0xC0) != 0x80)
            return 0;
    /* overlongs / surrogates / > U+10FFFF in the second byte */
    unsigned c1 = s[i + 1];
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
        (c == 0xF4 && c1 > 0x8F))
        return 0;
    return need + 1;
}

static bool ref_put(char *buf, size_t cap, size_t *pos, const char *s, size_t n)
{
    if (*pos + n > cap) {
        size_t room = cap - *pos;
        memcpy(buf + *pos, s, room);
        *pos = cap;
        return false;
    }
    memcpy(buf + *pos, s, n);
    *pos += n;
    return true;
}

static bool reference_escape(char *buf, size_t cap, size_t *pos, const char *str, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str;
    if (!ref_put(buf, cap, pos, "\"", 1))
        return false;
    for (size_t i = 0; i < len;) {
        unsigned c = s[i];
        char esc[8];
        size_t n = 0;
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, n = 2;
        } else if (c == '\n') {
            esc[0] = '\\', esc[1] = 'n', n = 2;
        } else if (c == '\r') {
            esc[0] = '\\', esc[1] = 'r', n = 2;
        } else if (c == '\t') {
            esc[0] = '\\', esc[1] = 't', n = 2;
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4], esc[5] = hex[c & 15], n = 6;
        }
        if (n) {
            if (!ref_put(buf, cap, pos, esc, n))
                return false;
            i++;
            continue;
        }
        size_t sl = utf8_seq_len(s, len, i);
        if (sl == 0) {
            if (!ref_put(buf, cap, pos, "\xef\xbf\xbd", 3))
                return false;
            i++;
            continue;
        }
        if (!ref_put(buf, cap, pos, str + i, sl))
            return false;
        i += sl;
    }
    return ref_put(buf, cap, pos, "\"", 1);
}

#include <event2/buffer.h>
#include <jansson.h>

/* One string: nd_json_escape() == the reference for every room from none to
 * enough (the same bytes, *pos and result), and nd_json_write_string() gives
 * the same literal. */
static int check_escape(const char *s, size_t len)
{
    char got[1024], want[1024];
    int bad = 0;
    for (size_t cap = 0; cap <= 6 * len + 2 && cap <= sizeof(got); cap += (cap < 16 ? 1 : 7)) {
        size_t gp = 0, wp = 0;
        memset(got, 0, sizeof(got));
        memset(want, 0, sizeof(want));
        bool g = nd_json_escape(got, cap, &gp, s, len);
        bool w = reference_escape(want, cap, &wp, s, len);
        bool same = g == w && gp == wp && memcmp(got, want, gp) == 0;
        CHECK(same, "len %zu cap %zu: got %d/%zu want %d/%zu", len, cap, g, gp, w, wp);
        bad += !same;
    }
    size_t wp = 0;
    reference_escape(want, sizeof(want), &wp, s, len);
    struct evbuffer *b = evbuffer_new();
    CHECK(b && nd_json_write_string(b, s, len) == 0);
    size_t bl = b ? evbuffer_get_length(b) : 0;
    bool same = bl == wp && b && memcmp(evbuffer_pullup(b, -1), want, wp) == 0;
    CHECK(same, "write_string len %zu: %zu bytes, want %zu", len, bl, wp);
    evbuffer_free(b);
    return bad + !same;
}

static void test_escape(void)
{
    static const char *const fixed[] = {
        "",
        "plain",
        "quote\" back\\slash",
        "\n\r\t\b\f\x01\x1f\x7f",
        "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80",
        "\xc3",
        "\xe4\xb8",
        "\xf0\x9f\x98",
        "\xc0\xaf",
        "\xed\xa0\x80",
        "\xf4\x90\x80\x80",
        "\xff\xfe",
        "/check-original?x=\"1\"",
    };
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        check_escape(fixed[i], strlen(fixed[i]));
    /* Random bytes drawn mostly from the interesting ones. */
    static const unsigned char pool[] = {'a',  'Z',  ' ',  '"',  '\\', '\n', '\r', '\t', 0,
                                         1,    0x1f, 0x7f, 0x80, 0xbf, 0xc2, 0xc3, 0xa9, 0xe4,
                                         0xb8, 0xad, 0xed, 0xa0, 0xf0, 0x9f, 0x98, 0xf4, 0xff};
    int bad = 0;
    for (int i = 0; i < 20000 && bad < 5; i++) {
        char s[120];
        size_t len = (size_t)(unit_rng() % sizeof(s));
        for (size_t k = 0; k < len; k++)
            s[k] = (char)pool[unit_rng() % sizeof(pool)];
        bad += check_escape(s, len) != 0;
    }
}

/* One access line: valid JSON, one line, each field as given; the path cut
 * at 256 bytes before escaping; a NULL path is "-". */
static void test_access(void)
{
    char path[400];
    memset(path, '"', sizeof(path) - 1);
    path[sizeof(path) - 1] = 0;
    const char *paths[] = {"/check-original", path, NULL, "/x\x01\xff"};
    const char *want[] = {"/check-original", NULL, "-", "/x\x01\xef\xbf\xbd"};
    for (int i = 0; i < 4; i++) {
        nd_log_access a = {.rid = "0-1f",
                           .method = "POST",
                           .path = paths[i],
                           .status = 201,
                           .latency_ns = 12345678,
                           .bytes_in = 2048,
                           .bytes_out = 17,
                           .worker = 3};
        char line[ND_LOG_ACCESS_MAX];
        size_t n = nd_log_format_access(line, &a);
        REQUIRE(n > 0 && n <= ND_LOG_ACCESS_MAX && line[n - 1] == '\n');
        CHECK(memchr(line, '\n', n - 1) == NULL, "one line");
        json_error_t e;
        json_t *j = json_loadb(line, n, 0, &e);
        REQUIRE(j != NULL, "%s: %.*s", e.text, (int)n, line);
        CHECK(strcmp(json_string_value(json_object_get(j, "msg")), "request") == 0);
        CHECK(strcmp(json_string_value(json_object_get(j, "level")), "info") == 0);
        CHECK(strcmp(json_string_value(json_object_get(j, "rid")), "0-1f") == 0);
        CHECK(strcmp(json_string_value(json_object_get(j, "method")), "POST") == 0);
        CHECK(json_integer_value(json_object_get(j, "status")) == 201);
        CHECK(json_real_value(json_object_get(j, "latency_ms")) == 12.345);
        CHECK(json_integer_value(json_object_get(j, "bytes_in")) == 2048);
        CHECK(json_integer_value(json_object_get(j, "bytes_out")) == 17);
        CHECK(json_integer_value(json_object_get(j, "worker")) == 3);
        const char *p = json_string_value(json_object_get(j, "path"));
        if (want[i])
            CHECK(p && strcmp(p, want[i]) == 0, "path %s", p ? p : "(none)");
        else
            CHECK(p && strlen(p) == 256 && strspn(p, "\"") == 256, "cut path");
        json_decref(j);
    }
}

static void test_time(void)
{
    const int64_t day = 86400LL * 1000000;
    const int64_t edges[] = {
        0,
        1,
        999999,
        1000000,
        -1,
        -999999,
        -1000000,
        -1000001,
        day - 1,
        day,
        951782400LL * 1000000 /* 2000-02-29 */,
        951868800LL * 1000000 - 1,
        4107542400LL * 1000000 /* 2100-03-01 */,
        253402300799LL * 1000000 + 999999 /* 9999-12-31T23:59:59.999999 */,
        1795000000LL * 1000000 + 123456,
    };
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
        check_one(edges[i]);
    /* Outside years 0000-9999 (RFC 3339's): the nearest time it can say;
     * years 0-999 with four digits. */
    const struct {
        int64_t us;
        const char *want;
    } outside[] = {
        {253402300800LL * 1000000, "9999-12-31T23:59:59.999999Z"},
        {INT64_MAX, "9999-12-31T23:59:59.999999Z"},
        {INT64_MAX - 1, "9999-12-31T23:59:59.999999Z"},
        {-62167219200LL * 1000000 - 1, "0000-01-01T00:00:00.000000Z"},
        {INT64_MIN, "0000-01-01T00:00:00.000000Z"},
        {-62167219200LL * 1000000, "0000-01-01T00:00:00.000000Z"},
        {-62135596800LL * 1000000 + 5, "0001-01-01T00:00:00.000005Z"},
        {-30610224000LL * 1000000, "1000-01-01T00:00:00.000000Z"},
    };
    for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
        char got[32];
        nd_log_format_time(outside[i].us, got);
        CHECK(strcmp(got, outside[i].want) == 0, "us=%lld got %s want %s", (long long)outside[i].us,
              got, outside[i].want);
    }
    /* Every day boundary of 1969..2101, and random instants up to year 9999. */
    int bad = 0;
    for (int64_t d = -366; d < 48000 && bad < 5; d++)
        bad += !check_one(d * day) + !check_one(d * day + day - 1);
    for (int i = 0; i < 1000000 && bad < 5; i++) {
        int64_t us = (int64_t)(unit_rng() % (253402300800ULL * 1000000ULL));
        bad += !check_one(us);
    }
}

int main(void)
{
    UNIT_RUN(test_time);
    UNIT_RUN(test_escape);
    UNIT_RUN(test_access);
    return unit_summary("log");
}
