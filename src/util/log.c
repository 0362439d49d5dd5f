/* Structured logger.  Each event is rendered into a local buffer and written
 * with one fwrite under a mutex, so lines from several threads never
 * interleave.  It does not rotate files or buffer events: stderr goes to the
 * journal, which does that. */
#include "util/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

struct sinkd_log {
	FILE *stream;
	enum log_level level;
	enum log_format format;
	pthread_mutex_t lock;
};

static const char *const redacted_keys[] = {"prompt",  "text",	 "content", "completion",
					    "messages", "input", "output",  "body",
					    "delta",   "choices", NULL};

struct line_buf {
	char data[2048];
	size_t len;
};

static void buf_put(struct line_buf *b, const char *s, size_t n)
{
	size_t room = sizeof(b->data) - 2 - b->len; /* keep space for "\n\0" */
	if (n > room)
		n = room;
	memcpy(b->data + b->len, s, n);
	b->len += n;
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

/* JSON string escaping; text format uses the same escaping inside quotes. */
static void buf_put_quoted(struct line_buf *b, const char *s)
{
	buf_put(b, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		if (*p == '"' || *p == '\\') {
			char esc[2] = {'\\', (char)*p};
			buf_put(b, esc, 2);
		} else if (*p < 0x20) {
			buf_printf(b, "\\u%04x", *p);
		} else {
			buf_put(b, (const char *)p, 1);
		}
	}
	buf_put(b, "\"", 1);
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

static void render_field(struct line_buf *b, enum log_format format, const struct log_field *f)
{
	if (format == LOG_FORMAT_JSON) {
		buf_put(b, ",", 1);
		buf_put_quoted(b, f->key);
		buf_put(b, ":", 1);
	} else {
		buf_printf(b, " %s=", f->key);
	}
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
		buf_printf(b, "%.6g", f->d);
		break;
	case LOG_FIELD_END:
		break;
	}
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
		buf_printf(&b, "%s %-5s [%s] %s", ts, log_level_name(level), module ? module : "-",
			   msg ? msg : "");
	}
	for (const struct log_field *f = fields; f && f->kind != LOG_FIELD_END; f++)
		render_field(&b, format, f);
	if (format == LOG_FORMAT_JSON)
		buf_put(&b, "}", 1);
	b.data[b.len++] = '\n';
	fwrite(b.data, 1, b.len, log->stream);
	fflush(log->stream);
	pthread_mutex_unlock(&log->lock);
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
