/* reply.c - JSON answer bodies: the writer of reply.h. */
#include "reply.h"
#include "fingerprint.h"
#include "fmt.h"
#include "json.h"
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#define KEY_MAX 64 /* longest key, bytes */

static void put(nd_reply *w, const char *s, size_t n)
{
    if (evbuffer_add(w->out, s, n) < 0)
        w->failed = true;
}

/* Writes buf[1..n) as the next value, with the comma at buf[0] when one is
 * due: one append per value. */
static void put_value(nd_reply *w, char *buf, size_t n)
{
    if (w->comma)
        put(w, buf, n);
    else
        put(w, buf + 1, n - 1);
    w->comma = true;
}

void nd_reply_init(nd_reply *w, struct evbuffer *out)
{
    w->out = out;
    w->comma = false;
    w->failed = false;
}

static void open_container(nd_reply *w, char c)
{
    char buf[2] = {',', c};
    put_value(w, buf, 2);
    w->comma = false;
}

void nd_reply_object(nd_reply *w)
{
    open_container(w, '{');
}

void nd_reply_array(nd_reply *w)
{
    open_container(w, '[');
}

void nd_reply_object_end(nd_reply *w)
{
    put(w, "}", 1);
    w->comma = true;
}

void nd_reply_array_end(nd_reply *w)
{
    put(w, "]", 1);
    w->comma = true;
}

void nd_reply_key(nd_reply *w, const char *name)
{
    char buf[KEY_MAX + 4];
    size_t n = strlen(name), pos = 0;
    if (n > KEY_MAX)
        n = KEY_MAX;
    if (w->comma)
        buf[pos++] = ',';
    buf[pos++] = '"';
    memcpy(buf + pos, name, n);
    pos += n;
    buf[pos++] = '"';
    buf[pos++] = ':';
    put(w, buf, pos);
    w->comma = false;
}

void nd_reply_string(nd_reply *w, const char *s, size_t len)
{
    if (w->comma)
        put(w, ",", 1);
    if (nd_json_write_string(w->out, s, len) < 0)
        w->failed = true;
    w->comma = true;
}

void nd_reply_plain(nd_reply *w, const char *s, size_t len)
{
    char buf[128];
    if (len + 3 > sizeof(buf)) { /* not the per-request case: escape anyway */
        nd_reply_string(w, s, len);
        return;
    }
    buf[0] = ',';
    buf[1] = '"';
    memcpy(buf + 2, s, len);
    buf[len + 2] = '"';
    put_value(w, buf, len + 3);
}

void nd_reply_raw(nd_reply *w, const char *json, size_t len)
{
    if (w->comma)
        put(w, ",", 1);
    put(w, json, len);
    w->comma = true;
}

void nd_reply_u64(nd_reply *w, uint64_t v)
{
    char buf[1 + ND_FMT_U64_MAX];
    buf[0] = ',';
    put_value(w, buf, 1 + nd_fmt_u64(buf + 1, v));
}

void nd_reply_bool(nd_reply *w, bool v)
{
    char buf[6];
    buf[0] = ',';
    memcpy(buf + 1, v ? "true" : "false", v ? 4 : 5);
    put_value(w, buf, v ? 5 : 6);
}

void nd_reply_null(nd_reply *w)
{
    char buf[5] = {',', 'n', 'u', 'l', 'l'};
    put_value(w, buf, 5);
}

void nd_reply_fraction(nd_reply *w, double x)
{
    char buf[8] = ",0.";
    long v = x <= 0 ? 0 : x >= 1 ? 10000 : (long)(x * 10000 + 0.5);
    if (v >= 10000) {
        memcpy(buf + 1, "1.0", 3);
        put_value(w, buf, 4);
        return;
    }
    for (int i = 6; i >= 3; i--, v /= 10)
        buf[i] = (char)('0' + v % 10);
    size_t n = 7;
    while (n > 4 && buf[n - 1] == '0')
        n--;
    put_value(w, buf, n);
}

void nd_reply_simhash(nd_reply *w, uint64_t h)
{
    char hex[17];
    nd_simhash_format(h, hex);
    nd_reply_plain(w, hex, 16);
}

void nd_reply_time(nd_reply *w, int64_t us)
{
    char ts[32];
    nd_log_format_time(us, ts);
    nd_reply_plain(w, ts, strlen(ts));
}

void nd_reply_error_begin(nd_reply *w, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    nd_reply_error_beginv(w, code, fmt, ap);
    va_end(ap);
}

void nd_reply_error_beginv(nd_reply *w, const char *code, const char *fmt, va_list ap)
{
    char msg[512];
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    if (n < 0)
        n = 0, msg[0] = 0;
    nd_reply_object(w);
    nd_reply_key(w, "error");
    nd_reply_object(w);
    nd_reply_key(w, "code");
    nd_reply_string(w, code, strlen(code));
    nd_reply_key(w, "message");
    nd_reply_string(w, msg, strlen(msg));
}

void nd_reply_error_end(nd_reply *w)
{
    nd_reply_object_end(w);
    nd_reply_object_end(w);
}

int nd_reply_finish(nd_reply *w)
{
    put(w, "\n", 1);
    w->comma = false;
    return w->failed ? -ENOMEM : 0;
}
