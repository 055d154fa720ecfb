/* unit.h - the few assertion macros the C unit tests share.
 * CHECK records a failure and goes on; each test file ends with
 * `return unit_summary("name");`, which prints "N passed, M failed". */
#ifndef ND_UNIT_H
#define ND_UNIT_H

#include <stdint.h>
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

static inline int unit_summary(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, unit_passed, unit_failed);
    return unit_failed ? 1 : 0;
}

#endif
