/* clock.h - the server's two clocks: the monotonic one (CLOCK_MONOTONIC),
 * for latencies, deadlines and durations, and wall time (CLOCK_REALTIME:
 * log lines, registered_at, audit and event times), another clock on
 * purpose. Header only; any thread; never fails on Linux, never
 * allocates. */
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

/* Wall time: UTC microseconds since the epoch (CLOCK_REALTIME; may step
 * back or forward). The clock of nd_log_now_us() and of every stored time. */
static inline int64_t nd_clock_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif
