/* unit.h - the few assertion macros the C unit tests share.
 * CHECK records a failure and goes on; each test file ends with
 * `return unit_summary("name");`, which prints "N passed, M failed". */
#ifndef ND_UNIT_H
#define ND_UNIT_H

#include <stdio.h>

static int unit_passed, unit_failed;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (cond) {                                                         \
            unit_passed++;                                                  \
        } else {                                                            \
            unit_failed++;                                                  \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

static inline int unit_summary(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, unit_passed, unit_failed);
    return unit_failed ? 1 : 0;
}

#endif
