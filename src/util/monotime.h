/* The monotonic clock (CLOCK_MONOTONIC) in the units sinkd reads it in:
 * for deadlines, rates and durations, never for wall time. */
#pragma once

#include <stdint.h>

/* Seconds since an arbitrary fixed point. */
double monotime_s(void);
/* Milliseconds since the same point. */
int64_t monotime_ms(void);
/* Microseconds since the same point (what systemd's MONOTONIC_USEC wants). */
uint64_t monotime_us(void);
