/* Structured logging to a stream (stderr in the daemon): one line per event,
 * JSON or "key=value" text, with time, level and module.  Prompt and
 * completion text must never reach the log: fields whose name says they hold
 * user text (prompt, text, content, completion, messages, ...) are redacted by
 * the logger itself, so a careless call site cannot leak them. */
#pragma once

#include <stdint.h>
#include <stdio.h>

#include "util/errbuf.h"

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_FORMAT_TEXT = 0, LOG_FORMAT_JSON };

enum log_field_kind { LOG_FIELD_END = 0, LOG_FIELD_STR, LOG_FIELD_INT, LOG_FIELD_DBL };

/* One typed key/value pair of a log event; build them with the LOG_* macros. */
struct log_field {
	enum log_field_kind kind;
	const char *key;
	const char *s;
	int64_t i;
	double d;
};

#define LOG_STR(k, v) ((struct log_field){.kind = LOG_FIELD_STR, .key = (k), .s = (v)})
#define LOG_INT(k, v) ((struct log_field){.kind = LOG_FIELD_INT, .key = (k), .i = (int64_t)(v)})
#define LOG_DBL(k, v) ((struct log_field){.kind = LOG_FIELD_DBL, .key = (k), .d = (double)(v)})
#define LOG_END ((struct log_field){.kind = LOG_FIELD_END})

struct sinkd_log;

/* Creates a logger writing to `stream` (not closed by log_free). */
struct sinkd_log *log_new(FILE *stream, enum log_level level, enum log_format format);
void log_free(struct sinkd_log *log);
void log_set_level(struct sinkd_log *log, enum log_level level);
void log_set_format(struct sinkd_log *log, enum log_format format);
int log_enabled(const struct sinkd_log *log, enum log_level level);

/* Emits one event; the field list ends with LOG_END.  log may be NULL (no-op),
 * which lets library code and tests run without a logger. */
void log_event(struct sinkd_log *log, enum log_level level, const char *module, const char *msg,
	       const struct log_field *fields);

/* Convenience: an event without fields, message formatted printf-style.
 * The formatted message must not contain user text; callers pass ids and
 * numbers only. */
void log_msg(struct sinkd_log *log, enum log_level level, const char *module, const char *fmt, ...)
	SINKD_PRINTF(4, 5);

/* Allocations of at least this many bytes made while starting (model,
 * backend, scheduler) are named in a debug line each (log_alloc), so that
 * the resident set a user measures can be read off the log. */
#define LOG_ALLOC_MIN_BYTES ((size_t)1 << 20)
/* A debug event "allocation" with the bytes and what they are for, when
 * bytes >= LOG_ALLOC_MIN_BYTES.  `what` names the purpose (no user text). */
void log_alloc(struct sinkd_log *log, const char *module, const char *what, size_t bytes);

/* Returns 1 if a field with this name would be redacted. */
int log_field_is_redacted(const char *key);

/* Parses "debug|info|warn|error" and "json|text"; return 0 or -EINVAL. */
int log_level_parse(const char *s, enum log_level *out);
int log_format_parse(const char *s, enum log_format *out);
const char *log_level_name(enum log_level level);
