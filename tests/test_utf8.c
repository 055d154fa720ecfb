/* test_utf8.c - strict UTF-8 decoding and validation. */
#include <errno.h>
#include <string.h>

#include "unit.h"
#include "utf8.h"

static int valid(const char *s, size_t n)
{
    return nd_utf8_validate(s, n, NULL) == 0;
}

static void test_accepts_valid(void)
{
    CHECK(valid("", 0), "empty");
    CHECK(valid("hello", 5), "ascii");
    CHECK(valid("\xc2\x80", 2), "U+0080");
    CHECK(valid("\xdf\xbf", 2), "U+07FF");
    CHECK(valid("\xe0\xa0\x80", 3), "U+0800");
    CHECK(valid("\xef\xbf\xbf", 3), "U+FFFF");
    CHECK(valid("\xf0\x90\x80\x80", 4), "U+10000");
    CHECK(valid("\xf4\x8f\xbf\xbf", 4), "U+10FFFF");
    CHECK(valid("a\0b", 3), "NUL inside");
    CHECK(valid("中文", strlen("中文")), "han");
}

static void test_rejects_invalid(void)
{
    static const struct {
        const char *s;
        size_t n;
        const char *what;
    } bad[] = {
        {"\x80", 1, "lone continuation"},
        {"\xc0\xaf", 2, "overlong 2-byte"},
        {"\xc1\xbf", 2, "overlong C1"},
        {"\xe0\x80\xaf", 3, "overlong 3-byte"},
        {"\xf0\x80\x80\xaf", 4, "overlong 4-byte"},
        {"\xed\xa0\x80", 3, "surrogate D800"},
        {"\xed\xbf\xbf", 3, "surrogate DFFF"},
        {"\xf4\x90\x80\x80", 4, "above U+10FFFF"},
        {"\xf5\x80\x80\x80", 4, "F5 lead"},
        {"\xff", 1, "FF"},
        {"\xe4\xb8", 2, "truncated 3-byte"},
        {"\xe4\x41\x80", 3, "bad continuation"},
        {"ok\xf0\x9f\x98", 5, "truncated emoji at end"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(!valid(bad[i].s, bad[i].n), "%s accepted", bad[i].what);
    size_t off = 0;
    CHECK(nd_utf8_validate("abc\xff", 4, &off) == -EILSEQ && off == 3, "offset %zu", off);
}

static void test_encode_round_trip(void)
{
    static const uint32_t cps[] = {0,      0x41,   0x7F,   0x80,    0x7FF,   0x800,
                                   0x4E2D, 0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF};
    for (size_t i = 0; i < sizeof(cps) / sizeof(cps[0]); i++) {
        uint8_t buf[4];
        size_t n = nd_utf8_encode(cps[i], buf), pos = 0;
        uint32_t back = 0;
        CHECK(nd_utf8_decode(buf, n, &pos, &back) == 0 && back == cps[i] && pos == n, "U+%04X",
              cps[i]);
    }
}

int main(void)
{
    UNIT_RUN(test_accepts_valid);
    UNIT_RUN(test_rejects_invalid);
    UNIT_RUN(test_encode_round_trip);
    return unit_summary("utf8");
}
