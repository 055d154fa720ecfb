/* json.h - a strict JSON reader for request bodies and a string writer for
 * answers: the hot path of /check-original and /fingerprint without a DOM.
 *
 * jansson builds a tree of every value, with a malloc per node and a slow
 * character loop over long strings; profiling showed it at a third of the
 * CPU time of /check-original for 2 KB articles. The reader here walks the
 * top-level object once, validates everything (RFC 8259: grammar, UTF-8,
 * escapes, surrogate pairs; no duplicate top-level keys), and hands out each
 * member's raw span plus, for strings, the decoded text: a pointer into the
 * body when the string has no escapes (the common case), else into a
 * scratch buffer sized once per body. Nested objects and arrays are
 * validated and returned raw (jansson may then read small ones, like
 * "meta"). Does not allocate except to grow the scratch. */
#ifndef ND_JSON_H
#define ND_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;

enum nd_json_type {
    ND_JSON_NULL,
    ND_JSON_FALSE,
    ND_JSON_TRUE,
    ND_JSON_NUMBER,
    ND_JSON_STRING,
    ND_JSON_ARRAY,
    ND_JSON_OBJECT,
};

typedef struct nd_json_value {
    enum nd_json_type type;
    const char *raw; /* the value as written in the body (borrowed) */
    size_t raw_len;
    const char *str; /* strings: decoded UTF-8, may hold NUL (borrowed) */
    size_t str_len;
    bool is_int; /* numbers: no fraction or exponent, fits in int64 */
    int64_t i;
} nd_json_value;

typedef struct nd_json_member {
    const char *key; /* decoded key (borrowed) */
    size_t key_len;
    nd_json_value value;
} nd_json_member;

typedef struct nd_json_error {
    unsigned line, column; /* 1-based position of the error */
    char text[96];
} nd_json_error;

/* Decoded strings live here; reused from body to body. */
typedef struct nd_json_scratch {
    char *buf;
    size_t cap;
} nd_json_scratch;

/* Frees the scratch memory (the struct is the caller's). */
void nd_json_scratch_finish(nd_json_scratch *s);

/* Reads buf[0..len) as one JSON object (surrounding white space allowed,
 * nothing else). Fills members[0..*n) with its members in order.
 * Returns 0; -EINVAL with *err filled for invalid JSON (also: not an
 * object, a duplicate top-level key, nesting deeper than 512); -E2BIG when
 * the object has more than cap members; -ENOMEM. Pointers stay valid until
 * the next call with the same scratch or until buf changes. */
int nd_json_read_object(const char *buf, size_t len, nd_json_scratch *scratch,
                        nd_json_member *members, size_t cap, size_t *n, nd_json_error *err);

/* Returns the member named key, or NULL. */
const nd_json_member *nd_json_find(const nd_json_member *members, size_t n, const char *key);

/* Iterates the elements of an array value read by nd_json_read_object(),
 * decoding strings into the same scratch. */
typedef struct nd_json_iter {
    const char *p, *end;
    char *out; /* where the next decoded string goes */
    bool done;
} nd_json_iter;

/* Starts iterating array (which must be an ND_JSON_ARRAY from the last
 * nd_json_read_object() call with scratch). */
void nd_json_iter_init(nd_json_iter *it, const nd_json_value *array, nd_json_scratch *scratch);

/* Reads the next element into *v. Returns 1, or 0 at the end. */
int nd_json_iter_next(nd_json_iter *it, nd_json_value *v);

/* The server's one JSON string escaper, in two outputs. Both write the
 * literal with its quotes; '"', '\\', \n, \r and \t get short escapes, other
 * control characters and DEL \u00XX, and bytes that are not valid UTF-8
 * U+FFFD (so any bytes give valid JSON). Neither allocates beyond the
 * evbuffer's own growth. */

/* Appends the literal for s[0..len) to out. Returns 0 or -ENOMEM. */
int nd_json_write_string(struct evbuffer *out, const char *s, size_t len);

/* Appends the literal for s[0..len) to buf[*pos..cap), advancing *pos. Never
 * writes past cap; returns false (buf filled to cap) when it did not fit.
 * For fixed buffers such as log lines. */
bool nd_json_escape(char *buf, size_t cap, size_t *pos, const char *s, size_t len);

/* The server's one writer of reals: every real in an answer, a stored
 * meta, an event or a webhook body is the shortest decimal that reads back
 * as the same double (0.958, where "%.17g" and jansson write
 * 0.95799999999999996), otherwise in jansson's form: an exponent without
 * '+' or leading zeros (1e22, 1e-5), ".0" after an integral value (3.0).
 * The figures of a check (resemblance, containment...) are rounded to 4
 * decimals before (nd_reply_fraction()), so each prints the same bytes
 * wherever it is shown. */
#define ND_JSON_REAL_MAX 32 /* the longest real written, with its NUL */

/* Writes x (finite) at out, NUL-terminated; returns its length (0 and an
 * empty string if it does not fit, which a finite double never does). Does
 * not allocate. */
size_t nd_json_format_real(double x, char out[ND_JSON_REAL_MAX]);

/* json_dumps(j, flags) with every real written by nd_json_format_real().
 * Returns a new string (the caller frees it), or NULL when jansson fails
 * (out of memory). */
struct json_t;
char *nd_json_dumps(const struct json_t *j, size_t flags);

#endif
