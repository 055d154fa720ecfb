/* test_log.c - server/log.c's time formatter against gmtime_r + strftime,
 * the slow path it replaced, over edges and a million random times. */
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

int main(void)
{
    const int64_t day = 86400LL * 1000000;
    const int64_t edges[] = {
        0, 1, 999999, 1000000, -1, -999999, -1000000, -1000001,
        day - 1, day, 951782400LL * 1000000 /* 2000-02-29 */,
        951868800LL * 1000000 - 1, 4107542400LL * 1000000 /* 2100-03-01 */,
        253402300799LL * 1000000 + 999999 /* 9999-12-31T23:59:59.999999 */,
        253402300800LL * 1000000 /* year 10000: the slow path */,
        -62167219200LL * 1000000 /* 0000-01-01 */,
        1795000000LL * 1000000 + 123456,
    };
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
        check_one(edges[i]);
    /* Every day boundary of 1969..2101, and random instants up to year 9999. */
    int bad = 0;
    for (int64_t d = -366; d < 48000 && bad < 5; d++)
        bad += !check_one(d * day) + !check_one(d * day + day - 1);
    for (int i = 0; i < 1000000 && bad < 5; i++) {
        int64_t us = (int64_t)(unit_rng() % (253402300800ULL * 1000000ULL));
        bad += !check_one(us);
    }
    return unit_summary("log");
}
