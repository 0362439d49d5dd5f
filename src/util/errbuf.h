/* Error reporting convention shared by every module: functions return 0 on
 * success or a negative errno-style code, and write a human message into a
 * caller-provided buffer.  err_set() is safe with err == NULL or err_len == 0. */
#pragma once

#include <stddef.h>

#if defined(__GNUC__)
#define SINKD_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define SINKD_PRINTF(fmt_idx, arg_idx)
#endif

/* Writes the formatted message into err (truncated, always NUL-terminated)
 * and returns `code`, so callers can write `return err_set(...)`. */
int err_set(char *err, size_t err_len, int code, const char *fmt, ...) SINKD_PRINTF(4, 5);

/* Prefixes the message already in err with "prefix: ". */
void err_prefix(char *err, size_t err_len, const char *prefix);

#define SINKD_ERR_LEN 512
