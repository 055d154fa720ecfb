/* import_lines_internal.h - what the two rooms of an import share: the
 * lines found in the input and their times (import_lines.c), judged in
 * order by the run (import.c). Not for other modules: they see import.h. */
#ifndef ND_IMPORT_LINES_INTERNAL_H
#define ND_IMPORT_LINES_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define AT_NONE INT64_MAX /* no registered_at: after every given one */
/* registered_at refused (a given time is >= 1): */
#define AT_BAD (-1)                    /* not a time */
#define AT_RANGE (-2)                  /* the epoch or before, a leap second, after 9999 */
#define AT_FUTURE (-3)                 /* later than the clock + ND_REGISTRY_AHEAD_US */
#define LATEST_US 253402300799999999LL /* 9999-12-31T23:59:59.999999Z */
#define MAX_THREADS 64

/* One line of the input. */
typedef struct line_ref {
    int64_t at;   /* registered_at_us, AT_NONE, or a refusal (AT_BAD, AT_RANGE, AT_FUTURE) */
    uint64_t off; /* into the input */
    uint32_t len; /* without the line end */
    uint32_t no;  /* 1-based line number */
} line_ref;

/* Finds the lines of buf[0..len) (split over nthreads), numbers them,
 * reads their times (those after latest refused: AT_FUTURE) and sorts them
 * in judging order (by time, lines without one last, stable). Returns 0
 * and a new array (caller frees) of *n refs, or -ENOMEM. */
int nd_import_scan_lines(const char *buf, size_t len, unsigned nthreads, int64_t latest,
                         line_ref **out, size_t *n);

#endif
