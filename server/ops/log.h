/* log.h - JSON-lines logging to stderr: one object per line, for people and
 * for log collectors alike.
 *
 * Every line carries "time" (RFC 3339, UTC, microseconds) and "level". Lines
 * are written with one write(2) each and are at most ND_LOG_LINE_MAX bytes,
 * so lines from different threads never interleave, even on a pipe.
 *
 * The level is process-wide and set once at start-up (nd_log_set_level()
 * before any thread starts); reading it is safe from any thread. */
#ifndef ND_LOG_H
#define ND_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ND_LOG_LINE_MAX 4096 /* PIPE_BUF: longest line written atomically */

enum nd_log_level {
    ND_LOG_DEBUG = 0,
    ND_LOG_INFO = 1,
    ND_LOG_WARN = 2,
    ND_LOG_ERROR = 3,
    ND_LOG_OFF = 4,
};

/* Parses "debug", "info", "warn", "error" or "off". Returns the level, or
 * -EINVAL. */
int nd_log_level_parse(const char *name);

/* Returns the level's name ("info", ...); never NULL. */
const char *nd_log_level_name(int level);

/* Sets the process-wide level (call before starting threads). */
void nd_log_set_level(int level);

/* True if a line of this level would be written. */
bool nd_log_enabled(int level);

/* Writes {"time":..,"level":..,"msg":"<msg>"<fields>} where msg is formatted
 * printf-style and JSON-escaped, and fields is either NULL or a string of
 * extra members that starts with a comma and is already valid JSON (e.g.
 * ",\"port\":8080"). Lines longer than ND_LOG_LINE_MAX are cut and marked
 * "truncated". Strings are escaped by json.h's nd_json_escape(), the
 * server's one escaper (use it for the values in fields too). Does not
 * allocate. */
void nd_log_fields(int level, const char *fields, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* nd_log_fields() without extra fields. */
#define nd_log(level, ...) nd_log_fields((level), NULL, __VA_ARGS__)

/* Formats a UTC time given in microseconds since the epoch as RFC 3339 with
 * microseconds ("2024-05-01T12:34:56.123456Z") into out[32]. A time outside
 * years 0000-9999 (which RFC 3339 cannot say) is written as the nearest
 * one it can: 0000-01-01T00:00:00.000000Z or 9999-12-31T23:59:59.999999Z. */
void nd_log_format_time(int64_t us, char out[32]);

/* The server clock: UTC microseconds since the epoch (CLOCK_REALTIME:
 * nd_clock_wall_us(), clock.h). */
int64_t nd_log_now_us(void);

/* Writes len bytes (whole lines) to stderr with a single write(2), retrying
 * on EINTR. For callers that batch lines, such as the access log. */
void nd_log_write(const char *buf, size_t len);

/* ---- the access log: one "request" line per answered request ---- */

#define ND_LOG_ACCESS_MAX 2048 /* longest access line (the path is cut at 256 bytes) */

/* What one access-log line says (all borrowed by the formatter). */
typedef struct nd_log_access {
    const char *rid;    /* request id, at most 39 bytes are written */
    const char *method; /* "GET", ... */
    const char *path;   /* as received (NULL: "-"); at most 256 bytes, escaped */
    const char *client; /* the token's name (NULL: "-"): at most 64 bytes of
                         * A-Z a-z 0-9 - . _ (auth.h); never the token itself */
    int status;         /* negative: 0 */
    int64_t latency_ns; /* negative: 0 */
    uint64_t bytes_in, bytes_out;
    unsigned worker;
} nd_log_access;

/* Formats a's line, with "time" now, "level":"info", "msg":"request" and its
 * newline, into out. Returns its length (at most ND_LOG_ACCESS_MAX). Does not
 * allocate; any thread. */
size_t nd_log_format_access(char out[ND_LOG_ACCESS_MAX], const nd_log_access *a);

/* Whole lines gathered by one thread and written together (a worker's
 * access log; flushed at its tick and when it stops). Caller storage,
 * zero-initialised; not thread-safe; never allocates. */
typedef struct nd_log_batch {
    size_t len;
    char buf[ND_LOG_LINE_MAX];
} nd_log_batch;

/* Adds one whole line of len <= ND_LOG_LINE_MAX bytes, writing the batch
 * first when it would not fit (so no write exceeds ND_LOG_LINE_MAX). */
void nd_log_batch_add(nd_log_batch *b, const char *line, size_t len);

/* Writes what the batch holds (one write(2)) and empties it. */
void nd_log_batch_flush(nd_log_batch *b);

/* Logs "out of memory" with where, then aborts: server/'s single policy for
 * allocation failures (lib/ returns -ENOMEM; the server does not limp on). */
_Noreturn void nd_die_oom(const char *where);

#endif
