/* clock.h - the server's one monotonic clock (CLOCK_MONOTONIC), for
 * latencies, deadlines and durations. Wall time (log lines, registered_at)
 * is another clock on purpose: nd_log_now_us() in log.h. Header only; any
 * thread; never fails on Linux, never allocates. */
#ifndef ND_CLOCK_H
#define ND_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic time in nanoseconds (from an arbitrary origin: only differences
 * mean anything). */
static inline int64_t nd_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The same clock in microseconds. */
static inline int64_t nd_clock_us(void)
{
    return nd_clock_ns() / 1000;
}

/* The same clock in milliseconds. */
static inline int64_t nd_clock_ms(void)
{
    return nd_clock_ns() / 1000000;
}

#endif
