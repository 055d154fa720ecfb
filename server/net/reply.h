/* reply.h - the JSON answer bodies of neardupd, written in one place: a
 * small writer that appends JSON to an evbuffer as it goes (no tree, no
 * printf on the per-request path), with the server's one string escaper
 * (nd_json_escape() rules, json.h) and one number formatter (fmt.h), the
 * value formats of the contract (fingerprints as 16 hex digits, times in
 * RFC 3339, fractions with at most 4 decimals) and the error shape
 * {"error":{"code":...,"message":...[, extras]}}.
 *
 *     nd_reply w;
 *     nd_reply_init(&w, out);
 *     nd_reply_object(&w);
 *     nd_reply_key(&w, "id");
 *     nd_reply_string(&w, id, id_len);
 *     nd_reply_key(&w, "deleted");
 *     nd_reply_bool(&w, true);
 *     nd_reply_object_end(&w);
 *     if (nd_reply_finish(&w) < 0) ...   // the closing "\n"; -ENOMEM
 *
 * The writer places the commas; member order is the order of the calls.
 * Keys are the caller's literals and are not escaped. An append that fails
 * (out of memory) is remembered and reported by nd_reply_finish(). The
 * writer lives on the caller's stack and owns nothing; out is borrowed.
 * Does not allocate beyond the evbuffer's own growth. Not thread-safe (one
 * writer per buffer). */
#ifndef ND_REPLY_H
#define ND_REPLY_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;

typedef struct nd_reply {
    struct evbuffer *out; /* borrowed */
    bool comma;           /* the next value or key needs a comma before it */
    bool failed;          /* an append failed */
} nd_reply;

/* Starts writing at the end of out (which may hold bytes already). */
void nd_reply_init(nd_reply *w, struct evbuffer *out);

/* "{" and "}"; "[" and "]". */
void nd_reply_object(nd_reply *w);
void nd_reply_object_end(nd_reply *w);
void nd_reply_array(nd_reply *w);
void nd_reply_array_end(nd_reply *w);

/* "name": for the next value; name is a literal that needs no escaping. */
void nd_reply_key(nd_reply *w, const char *name);

/* A string, escaped (any bytes; see json.h). */
void nd_reply_string(nd_reply *w, const char *s, size_t len);

/* A string that needs no escaping (printable ASCII without '"' and '\\':
 * codes, versions, hex digits), copied as it is. */
void nd_reply_plain(nd_reply *w, const char *s, size_t len);

/* An unsigned integer in decimal (nd_fmt_u64()). */
void nd_reply_u64(nd_reply *w, uint64_t v);

/* true or false; null. */
void nd_reply_bool(nd_reply *w, bool v);
void nd_reply_null(nd_reply *w);

/* A JSON value written already (a stored compact "meta", a number made by
 * nd_json_format_real()), copied as it is. */
void nd_reply_raw(nd_reply *w, const char *json, size_t len);

/* A fraction in [0, 1] rounded to 4 decimals, trailing zeros dropped but
 * one ("0.8125", "0.5", "1.0", "0.0"); values outside are clamped. */
void nd_reply_fraction(nd_reply *w, double x);

/* A fingerprint: the string of its 16 lower-case hex digits. */
void nd_reply_simhash(nd_reply *w, uint64_t h);

/* A time, UTC microseconds since the epoch: an RFC 3339 string
 * (nd_log_format_time()). */
void nd_reply_time(nd_reply *w, int64_t us);

/* Opens an error body: {"error":{"code":code,"message":<fmt...>, leaving
 * the "error" object open for extra members (nd_reply_key() + value);
 * nd_reply_error_end() closes it. The message is cut at 511 bytes. */
void nd_reply_error_begin(nd_reply *w, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same with the message's arguments as a va_list. */
void nd_reply_error_beginv(nd_reply *w, const char *code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
void nd_reply_error_end(nd_reply *w);

/* Ends the body with "\n". Returns 0, or -ENOMEM if any append failed (the
 * body is then incomplete: the caller answers 500 or gives up). */
int nd_reply_finish(nd_reply *w);

#endif
