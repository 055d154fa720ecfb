/* unit.h - the checks and the runner the C unit tests share; every unit test
 * prints TAP (meson registers them with protocol 'tap').
 *
 *     int main(void)
 *     {
 *         UNIT_RUN(test_basic);       // "ok 1 - basic" or "not ok 1 - basic"
 *         UNIT_RUN(test_errors);      // "ok 2 - errors"
 *         return unit_summary("store"); // "1..2"; 0, or 1 if any check failed
 *     }
 *
 * A test point fails when any CHECK failed while its function ran. Checks
 * made outside UNIT_RUN (set-up in main, or a file that calls its tests
 * directly) become one more point, named after the file's test, in
 * unit_summary(). CHECK(cond) or CHECK(cond, fmt, ...) records the result and
 * goes on; REQUIRE does the same but returns from the (void) function at a
 * failure. Failures are printed on stderr with file, line and condition;
 * unit_note() prints figures as TAP comments on stdout ("# ..."), which is
 * the only other thing a unit test should print there. Checks may run on
 * several threads (the counters are atomic); UNIT_RUN and unit_summary run on
 * the main thread. */
#ifndef ND_UNIT_H
#define ND_UNIT_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static _Atomic int unit_passed, unit_failed;
static int unit_points;                      /* TAP test points printed */
static int unit_run_checks, unit_run_failed; /* checks and failures inside UNIT_RUN */
static int unit_failed_at_start;             /* unit_failed when the running test began */

/* Records a failed check: "FAIL file:line: cond[: message]" on stderr. */
static inline void unit_fail(const char *file, int line, const char *cond)
{
    unit_failed++;
    fprintf(stderr, "FAIL %s:%d: %s\n", file, line, cond);
}

__attribute__((format(printf, 4, 5))) static inline void
unit_failf(const char *file, int line, const char *cond, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    unit_failed++;
    fprintf(stderr, "FAIL %s:%d: %s: %s\n", file, line, cond, msg);
}

/* CHECK(cond) or CHECK(cond, fmt, ...): up to 20 message arguments. */
#define UNIT_CHECK_1(on_fail, cond)                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            unit_passed++;                                                                         \
        } else {                                                                                   \
            unit_fail(__FILE__, __LINE__, #cond);                                                  \
            on_fail;                                                                               \
        }                                                                                          \
    } while (0)
#define UNIT_CHECK_M(on_fail, cond, ...)                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            unit_passed++;                                                                         \
        } else {                                                                                   \
            unit_failf(__FILE__, __LINE__, #cond, __VA_ARGS__);                                    \
            on_fail;                                                                               \
        }                                                                                          \
    } while (0)
#define UNIT_PICK(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, \
                  _19, _20, _21, _22, which, ...)                                                  \
    which
#define UNIT_CHECK_ANY(on_fail, ...)                                                               \
    UNIT_PICK(__VA_ARGS__, UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_M,   \
              UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_M,  \
              UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_M,  \
              UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_M, UNIT_CHECK_1, unused)        \
    (on_fail, __VA_ARGS__)

#define CHECK(...) UNIT_CHECK_ANY((void)0, __VA_ARGS__)
#define REQUIRE(...) UNIT_CHECK_ANY(return, __VA_ARGS__)

/* A TAP comment line on stdout: "# " and the formatted text. */
__attribute__((format(printf, 1, 2))) static inline void unit_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("# ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
    va_end(ap);
}

/* Prints the next TAP test point: "ok N - name" or "not ok N - name". */
static inline void unit_point(int ok, const char *name)
{
    printf("%sok %d - %s\n", ok ? "" : "not ", ++unit_points, name);
    fflush(stdout);
}

/* Runs fn as one TAP test point named name ("test_" dropped): ok when no
 * check failed while it ran. */
static inline void unit_run(const char *name, void (*fn)(void))
{
    int checks = unit_passed + unit_failed, failed = unit_failed;
    if (strncmp(name, "test_", 5) == 0)
        name += 5;
    unit_failed_at_start = failed;
    fn();
    unit_run_checks += unit_passed + unit_failed - checks;
    unit_run_failed += unit_failed - failed;
    unit_point(unit_failed == failed, name);
}

#define UNIT_RUN(fn) unit_run(#fn, fn)

/* Whether a check failed since the running test began (to stop its loops). */
static inline int unit_test_failed(void)
{
    return unit_failed > unit_failed_at_start;
}

/* Ends the TAP stream: one more point, named name, for the checks made
 * outside UNIT_RUN (if any, or if there was no point at all), the plan
 * "1..N" and a comment with the totals. Returns the exit status: 0, or 1 if
 * any check failed. */
static inline int unit_summary(const char *name)
{
    int passed = unit_passed, failed = unit_failed;
    if (passed + failed > unit_run_checks || unit_points == 0)
        unit_point(failed == unit_run_failed, name);
    printf("1..%d\n# %s: %d checks passed, %d failed\n", unit_points, name, passed, failed);
    fflush(stdout);
    return failed ? 1 : 0;
}

/* A fixed pseudo-random sequence (xorshift64): tests are reproducible.
 * Set unit_rng_state to reseed. */
static uint64_t unit_rng_state = 88172645463325252ull;

static inline uint64_t unit_rng(void)
{
    unit_rng_state ^= unit_rng_state << 13;
    unit_rng_state ^= unit_rng_state >> 7;
    unit_rng_state ^= unit_rng_state << 17;
    return unit_rng_state;
}

#endif
