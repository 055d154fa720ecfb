/* log.c - JSON-lines logging to stderr. */
#include "log.h"
#include "clock.h"
#include "fmt.h"
#include "json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int log_level = ND_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

int nd_log_level_parse(const char *name)
{
    for (int i = 0; i <= ND_LOG_OFF; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    if (strcmp(name, "warning") == 0)
        return ND_LOG_WARN;
    return -EINVAL;
}

const char *nd_log_level_name(int level)
{
    if (level < 0 || level > ND_LOG_OFF)
        return "?";
    return level_names[level];
}

void nd_log_set_level(int level)
{
    atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

bool nd_log_enabled(int level)
{
    return level >= atomic_load_explicit(&log_level, memory_order_relaxed);
}

int64_t nd_log_now_us(void)
{
    return nd_clock_wall_us();
}

void nd_log_format_time(int64_t us, char out[32])
{
    int64_t secs = us / 1000000;
    int64_t frac = us % 1000000;
    if (frac < 0) {
        frac += 1000000;
        secs -= 1;
    }
    int64_t days = secs / 86400, rem = secs % 86400;
    if (rem < 0) {
        rem += 86400;
        days -= 1;
    }
    /* Civil date from days since 1970-01-01 (H. Hinnant's algorithm: exact
     * for the proleptic Gregorian calendar, no table, no locale). */
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t day = doy - (153 * mp + 2) / 5 + 1;
    int64_t month = mp < 10 ? mp + 3 : mp - 9;
    int64_t year = yoe + era * 400 + (month <= 2);
    if (year < 0 || year > 9999) { /* outside RFC 3339: the nearest time it can say */
        snprintf(out, 32, "%s",
                 year < 0 ? "0000-01-01T00:00:00.000000Z" : "9999-12-31T23:59:59.999999Z");
        return;
    }
    nd_fmt_fixed(out, (unsigned)year, 4);
    out[4] = '-';
    nd_fmt_fixed(out + 5, (unsigned)month, 2);
    out[7] = '-';
    nd_fmt_fixed(out + 8, (unsigned)day, 2);
    out[10] = 'T';
    nd_fmt_fixed(out + 11, (unsigned)(rem / 3600), 2);
    out[13] = ':';
    nd_fmt_fixed(out + 14, (unsigned)(rem / 60 % 60), 2);
    out[16] = ':';
    nd_fmt_fixed(out + 17, (unsigned)(rem % 60), 2);
    out[19] = '.';
    nd_fmt_fixed(out + 20, (unsigned)frac, 6);
    out[26] = 'Z';
    out[27] = '\0';
}

static bool put(char *buf, size_t cap, size_t *pos, const char *s, size_t n)
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

void nd_log_write(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

void nd_log_batch_flush(nd_log_batch *b)
{
    if (b->len) {
        nd_log_write(b->buf, b->len);
        b->len = 0;
    }
}

void nd_log_batch_add(nd_log_batch *b, const char *line, size_t len)
{
    if (b->len + len > sizeof(b->buf))
        nd_log_batch_flush(b);
    memcpy(b->buf + b->len, line, len);
    b->len += len;
}

/* Appends n bytes at out[*pos] (the access line is sized for all of them). */
static inline void put_raw(char *out, size_t *pos, const char *s, size_t n)
{
    memcpy(out + *pos, s, n);
    *pos += n;
}

#define PUT_LIT(out, pos, lit) put_raw((out), (pos), (lit), sizeof(lit) - 1)

static inline void put_u64(char *out, size_t *pos, uint64_t v)
{
    *pos += nd_fmt_u64(out + *pos, v);
}

size_t nd_log_format_access(char out[ND_LOG_ACCESS_MAX], const nd_log_access *a)
{
    size_t pos = 0;
    PUT_LIT(out, &pos, "{\"time\":\"");
    nd_log_format_time(nd_log_now_us(), out + pos);
    pos += strlen(out + pos);
    PUT_LIT(out, &pos, "\",\"level\":\"info\",\"msg\":\"request\",\"rid\":\"");
    put_raw(out, &pos, a->rid, strnlen(a->rid, 39));
    PUT_LIT(out, &pos, "\",\"method\":\"");
    put_raw(out, &pos, a->method, strlen(a->method));
    PUT_LIT(out, &pos, "\",\"path\":");
    size_t plen = a->path ? strlen(a->path) : 1;
    /* At most 256 bytes of the path: escaped, at most 1538 bytes. */
    nd_json_escape(out, pos + 1540, &pos, a->path ? a->path : "-", plen > 256 ? 256 : plen);
    PUT_LIT(out, &pos, ",\"client\":");
    size_t clen = a->client ? strnlen(a->client, 64) : 1;
    /* At most 64 bytes of a name of A-Z a-z 0-9 - . _ (auth.h): 66 bytes
     * with its quotes, never more (a name needing escapes is cut). */
    nd_json_escape(out, pos + 66, &pos, a->client ? a->client : "-", clen);
    PUT_LIT(out, &pos, ",\"status\":");
    put_u64(out, &pos, (uint64_t)(a->status < 0 ? 0 : a->status));
    uint64_t lat_us = a->latency_ns > 0 ? (uint64_t)a->latency_ns / 1000 : 0;
    PUT_LIT(out, &pos, ",\"latency_ms\":");
    put_u64(out, &pos, lat_us / 1000);
    out[pos++] = '.';
    nd_fmt_fixed(out + pos, lat_us % 1000, 3);
    pos += 3;
    PUT_LIT(out, &pos, ",\"bytes_in\":");
    put_u64(out, &pos, a->bytes_in);
    PUT_LIT(out, &pos, ",\"bytes_out\":");
    put_u64(out, &pos, a->bytes_out);
    PUT_LIT(out, &pos, ",\"worker\":");
    put_u64(out, &pos, a->worker);
    PUT_LIT(out, &pos, "}\n");
    return pos;
}

void nd_log_fields(int level, const char *fields, const char *fmt, ...)
{
    if (!nd_log_enabled(level))
        return;
    char line[ND_LOG_LINE_MAX];
    char msg[1024];
    char ts[32];
    va_list ap;
    va_start(ap, fmt);
    int mlen = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (mlen < 0)
        mlen = 0;
    if ((size_t)mlen >= sizeof(msg))
        mlen = sizeof(msg) - 1;
    nd_log_format_time(nd_log_now_us(), ts);
    /* Leave room for the closing '}' and newline, and for the truncation mark. */
    const size_t cap = sizeof(line) - 32;
    size_t pos = 0;
    int n = snprintf(line, cap, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":", ts,
                     nd_log_level_name(level));
    pos = (size_t)n;
    bool ok = nd_json_escape(line, cap, &pos, msg, (size_t)mlen);
    if (ok && fields)
        ok = put(line, cap, &pos, fields, strlen(fields));
    if (!ok) {
        /* Cut: close the record in a way that is still valid JSON. */
        pos = (size_t)n;
        nd_json_escape(line, cap, &pos, msg, (size_t)mlen < 200 ? (size_t)mlen : 200);
        const char *mark = ",\"truncated\":true";
        memcpy(line + pos, mark, strlen(mark));
        pos += strlen(mark);
    }
    line[pos++] = '}';
    line[pos++] = '\n';
    nd_log_write(line, pos);
}

_Noreturn void nd_die_oom(const char *where)
{
    nd_log(ND_LOG_ERROR, "out of memory in %s", where);
    abort();
}
