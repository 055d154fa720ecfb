/* import_lines.h - the input of an import (import_lines.c): a file or
 * body mapped into memory (gzip inflated first) and the registered_at
 * values its lines give. Public through import.h, which includes it; the
 * lines found in the input are import_lines_internal.h's. */
#ifndef ND_IMPORT_LINES_H
#define ND_IMPORT_LINES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An input file in memory. */
typedef struct nd_import_input {
    const char *buf;
    size_t len;
    void *map; /* private */
    size_t map_len;
} nd_import_input;

/* Maps the file at path ("-": standard input) into memory. A .gz file (or
 * any gzip stream, found by its magic bytes) and standard input are first
 * written, decompressed, to an unlinked temporary file in $TMPDIR (or
 * /tmp). Returns 0, or -errno with a reason in err[errlen]. */
int nd_import_input_open(nd_import_input *in, const char *path, char *err, size_t errlen);

/* Unmaps; safe on a zeroed or closed input. */
void nd_import_input_close(nd_import_input *in);

/* Parses a registered_at value: RFC 3339 ("2026-11-24T12:00:00.123456Z",
 * an offset instead of Z, up to 9 fraction digits, truncated to
 * microseconds) from str[0..len), or the integer v when is_int. Returns 0
 * and *us (microseconds since the epoch, 1 .. 9999-12-31T23:59:59.999999Z),
 * -EINVAL (not such a time) or -ERANGE (a time, but the epoch itself or
 * before, a leap second (:60), or after year 9999). */
int nd_import_parse_time(const char *str, size_t len, bool is_int, int64_t v, int64_t *us);

#endif
