/* The one reader of CLOCK_MONOTONIC: every module that times, paces or
 * waits asks here instead of keeping its own clock_gettime helper.  Not a
 * wall clock, and not injectable: modules that tests drive with a fake
 * clock (quota) take a clock callback and default to this one. */
#include "util/monotime.h"

#include <time.h>

static struct timespec mono_ts(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts;
}

double monotime_s(void)
{
	struct timespec ts = mono_ts();
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int64_t monotime_ms(void)
{
	struct timespec ts = mono_ts();
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t monotime_us(void)
{
	struct timespec ts = mono_ts();
	return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000ULL;
}
