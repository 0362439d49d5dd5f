/* Structured logger.  Each event is rendered into a local buffer and written
 * with one fwrite under a mutex, so lines from several threads never
 * interleave.  It does not rotate files or buffer events: stderr goes to the
 * journal, which does that. */
#include "util/log.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "util/utf8.h"

struct sinkd_log {
	FILE *stream;
	enum log_level level;
	enum log_format format;
	pthread_mutex_t lock;
};

static const char *const redacted_keys[] = {"prompt",  "text",	 "content", "completion",
					    "messages", "input", "output",  "body",
					    "delta",   "choices", NULL};

/* Room kept at the end of a line for what closes it: a string's quote, the
 * truncation mark, the JSON brace and the newline. */
#define LINE_RESERVE 32

struct line_buf {
	char data[2048];
	size_t len;
	int truncated; /* something did not fit: nothing more is added */
};

/* Appends all n bytes or, when they do not fit, nothing (so an escape or a
 * character is never cut) and marks the line truncated; returns 0 or -1. */
static int buf_put(struct line_buf *b, const char *s, size_t n)
{
	if (b->truncated || n > sizeof(b->data) - LINE_RESERVE - b->len) {
		b->truncated = 1;
		return -1;
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	return 0;
}

/* Appends into the reserve: only for the closing bytes of a line. */
static void buf_close(struct line_buf *b, const char *s)
{
	size_t n = strlen(s);
	if (n <= sizeof(b->data) - 2 - b->len) { /* keep "\n\0" */
		memcpy(b->data + b->len, s, n);
		b->len += n;
	}
}

static void buf_printf(struct line_buf *b, const char *fmt, ...) SINKD_PRINTF(2, 3);
static void buf_printf(struct line_buf *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		buf_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* Appends s with JSON string escaping (without the quotes): control
 * characters (C0, DEL, C1, U+2028/U+2029) escaped, bytes that are not UTF-8
 * as \ufffd, and unless bare (text format outside quotes) quotes and
 * backslashes.  So no value can end the line, start a forged one, drive a
 * terminal or make the JSON invalid.  Returns -1 when the line filled up. */
static int buf_put_escaped(struct line_buf *b, const char *s, int bare)
{
	size_t len = strlen(s);
	for (size_t i = 0; i < len;) {
		const unsigned char *p = (const unsigned char *)s + i;
		size_t step;
		uint32_t cp = utf8_decode(p, len - i, &step);
		char esc[8];
		int rc;
		if ((cp == '"' || cp == '\\') && !bare)
			rc = buf_put(b, cp == '"' ? "\\\"" : "\\\\", 2);
		else if (cp == '\n')
			rc = buf_put(b, "\\n", 2);
		else if (cp == '\t')
			rc = buf_put(b, "\\t", 2);
		else if (cp == '\r')
			rc = buf_put(b, "\\r", 2);
		else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 ||
		         cp == 0x2029 || (cp == 0xFFFD && step == 1))
			rc = buf_put(b, esc,
			             (size_t)snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)cp));
		else
			rc = buf_put(b, (const char *)p, step);
		if (rc)
			return -1;
		i += step;
	}
	return 0;
}

/* A JSON string; text format quotes values the same way.  A string cut by
 * the end of the line is still closed. */
static void buf_put_quoted(struct line_buf *b, const char *s)
{
	if (buf_put(b, "\"", 1))
		return;
	buf_put_escaped(b, s ? s : "", 0);
	buf_close(b, "\"");
}

int log_field_is_redacted(const char *key)
{
	if (key == NULL)
		return 0;
	for (size_t i = 0; redacted_keys[i]; i++)
		if (strcasecmp(key, redacted_keys[i]) == 0)
			return 1;
	return 0;
}

const char *log_level_name(enum log_level level)
{
	switch (level) {
	case LOG_DEBUG:
		return "debug";
	case LOG_INFO:
		return "info";
	case LOG_WARN:
		return "warn";
	case LOG_ERROR:
		return "error";
	}
	return "info";
}

int log_level_parse(const char *s, enum log_level *out)
{
	static const enum log_level levels[] = {LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR};
	for (size_t i = 0; i < 4; i++)
		if (s && strcmp(s, log_level_name(levels[i])) == 0) {
			*out = levels[i];
			return 0;
		}
	return -22;
}

int log_format_parse(const char *s, enum log_format *out)
{
	if (s && strcmp(s, "json") == 0)
		*out = LOG_FORMAT_JSON;
	else if (s && strcmp(s, "text") == 0)
		*out = LOG_FORMAT_TEXT;
	else
		return -22;
	return 0;
}

struct sinkd_log *log_new(FILE *stream, enum log_level level, enum log_format format)
{
	struct sinkd_log *log = calloc(1, sizeof(*log));
	if (log == NULL)
		return NULL;
	log->stream = stream;
	log->level = level;
	log->format = format;
	pthread_mutex_init(&log->lock, NULL);
	return log;
}

void log_free(struct sinkd_log *log)
{
	if (log == NULL)
		return;
	pthread_mutex_destroy(&log->lock);
	free(log);
}

void log_set_level(struct sinkd_log *log, enum log_level level)
{
	if (log) {
		pthread_mutex_lock(&log->lock);
		log->level = level;
		pthread_mutex_unlock(&log->lock);
	}
}

void log_set_format(struct sinkd_log *log, enum log_format format)
{
	if (log) {
		pthread_mutex_lock(&log->lock);
		log->format = format;
		pthread_mutex_unlock(&log->lock);
	}
}

int log_enabled(const struct sinkd_log *log, enum log_level level)
{
	return log != NULL && level >= log->level;
}

static void render_time(char *out, size_t len)
{
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	size_t n = strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000L);
}

static void render_value(struct line_buf *b, enum log_format format, const struct log_field *f)
{
	if (log_field_is_redacted(f->key)) {
		buf_put_quoted(b, "[redacted]");
		return;
	}
	switch (f->kind) {
	case LOG_FIELD_STR:
		buf_put_quoted(b, f->s);
		break;
	case LOG_FIELD_INT:
		buf_printf(b, "%lld", (long long)f->i);
		break;
	case LOG_FIELD_DBL:
		if (isfinite(f->d) || format != LOG_FORMAT_JSON)
			buf_printf(b, "%.6g", f->d);
		else
			buf_put(b, "null", 4); /* JSON has no NaN or infinity */
		break;
	case LOG_FIELD_END:
		break;
	}
}

/* A field whose value did not start before the line filled up is left out
 * whole, so a truncated JSON line still parses. */
static void render_field(struct line_buf *b, enum log_format format, const struct log_field *f)
{
	size_t start = b->len;
	if (format == LOG_FORMAT_JSON) {
		buf_put(b, ",", 1);
		buf_put_quoted(b, f->key);
		buf_put(b, ":", 1);
	} else {
		buf_put(b, " ", 1);
		buf_put_escaped(b, f->key ? f->key : "", 1);
		buf_put(b, "=", 1);
	}
	size_t value_at = b->len;
	if (!b->truncated)
		render_value(b, format, f);
	if (b->len == value_at)
		b->len = start;
}

void log_event(struct sinkd_log *log, enum log_level level, const char *module, const char *msg,
	       const struct log_field *fields)
{
	if (!log_enabled(log, level))
		return;
	struct line_buf b = {.len = 0};
	char ts[40];
	render_time(ts, sizeof(ts));
	pthread_mutex_lock(&log->lock);
	enum log_format format = log->format;
	if (format == LOG_FORMAT_JSON) {
		buf_printf(&b, "{\"time\":\"%s\",\"level\":\"%s\",\"module\":", ts,
			   log_level_name(level));
		buf_put_quoted(&b, module);
		buf_put(&b, ",\"msg\":", 7);
		buf_put_quoted(&b, msg);
	} else {
		buf_printf(&b, "%s %-5s [", ts, log_level_name(level));
		buf_put_escaped(&b, module ? module : "-", 1);
		buf_put(&b, "] ", 2);
		buf_put_escaped(&b, msg ? msg : "", 1);
	}
	for (const struct log_field *f = fields; f && f->kind != LOG_FIELD_END; f++)
		render_field(&b, format, f);
	if (b.truncated)
		buf_close(&b,
		          format == LOG_FORMAT_JSON ? ",\"truncated\":true" : " truncated=true");
	if (format == LOG_FORMAT_JSON)
		buf_close(&b, "}");
	b.data[b.len++] = '\n';
	fwrite(b.data, 1, b.len, log->stream);
	fflush(log->stream);
	pthread_mutex_unlock(&log->lock);
}

void log_alloc(struct sinkd_log *log, const char *module, const char *what, size_t bytes)
{
	if (bytes < LOG_ALLOC_MIN_BYTES || !log_enabled(log, LOG_DEBUG))
		return;
	struct log_field f[] = {LOG_STR("for", what), LOG_INT("bytes", bytes),
	                        LOG_DBL("mib", (double)bytes / (1 << 20)), LOG_END};
	log_event(log, LOG_DEBUG, module, "allocation", f);
}

void log_msg(struct sinkd_log *log, enum log_level level, const char *module, const char *fmt, ...)
{
	if (!log_enabled(log, level))
		return;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	struct log_field end = LOG_END;
	log_event(log, level, module, msg, &end);
}
