/* The field rules every request parser shares: the refusal of a field (a
 * 400, or a 500 for memory), typed readers that name the field they refuse,
 * the one duplicate-key check, and the client's name of a field the
 * scheduler refuses.  Whole requests are parsed in
 * request.c and responses.c. */
#include "server/request_fields.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int request_vfail(struct api_error *e, const char *param, const char *code, const char *fmt,
                  va_list ap)
{
	e->status = 400;
	e->code = code;
	e->retry_after_s = 0;
	snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	return -EINVAL;
}

int request_fail(struct api_error *e, const char *param, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = request_vfail(e, param, code, fmt, ap);
	va_end(ap);
	return rc;
}

int request_fail_oom(struct api_error *e, const char *param)
{
	int rc = request_fail(e, param, "out_of_memory", "%s", "out of memory");
	e->status = 500;
	return rc;
}

/* A present, non-null field. */
cJSON *request_field(const cJSON *o, const char *key)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

int request_get_bool(const cJSON *o, const char *key, bool *out, struct api_error *e)
{
	cJSON *v = request_field(o, key);
	if (!v)
		return 0;
	if (!cJSON_IsBool(v))
		return request_fail(e, key, "invalid_type", "'%s' must be a boolean", key);
	*out = cJSON_IsTrue(v);
	return 0;
}

static int get_num(const cJSON *o, const char *key, double lo, double hi, double *out,
                   struct api_error *e)
{
	cJSON *v = request_field(o, key);
	if (!v)
		return 0;
	if (!cJSON_IsNumber(v))
		return request_fail(e, key, "invalid_type", "'%s' must be a number", key);
	if (!isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
		return request_fail(e, key, "invalid_value",
		                    "'%s' must be between %.10g and %.10g, got %.10g", key, lo, hi,
		                    v->valuedouble);
	*out = v->valuedouble;
	return 0;
}

static int get_int(const cJSON *o, const char *key, double lo, double hi, double *out,
                   struct api_error *e)
{
	cJSON *v = request_field(o, key);
	if (v && (!cJSON_IsNumber(v) ||
	          (isfinite(v->valuedouble) && v->valuedouble != floor(v->valuedouble))))
		return request_fail(e, key, "invalid_type", "'%s' must be an integer", key);
	return get_num(o, key, lo, hi, out, e);
}

/* A text field's bytes with each stand-in turned back into NUL. */
char *request_text_dup(const cJSON *v, size_t *len)
{
	size_t n = strlen(v->valuestring);
	char *s = malloc(n + 1);
	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i++)
		s[i] = v->valuestring[i] == REQUEST_NUL_STANDIN ? '\0' : v->valuestring[i];
	s[n] = '\0';
	*len = n;
	return s;
}

/* Name-like fields are C strings downstream: a NUL is refused, never cut. */
static bool has_nul(const cJSON *v)
{
	return strchr(v->valuestring, REQUEST_NUL_STANDIN) != NULL;
}

int request_name_dup(const cJSON *v, const char *param, const char *what, char **out,
                     struct api_error *e)
{
	if (has_nul(v))
		return request_fail(e, param, "invalid_value",
		                    "'%s' must not contain NUL (\\u0000)", what);
	*out = strdup(v->valuestring);
	return *out ? 0 : request_fail_oom(e, param);
}

int request_get_num(const cJSON *o, const char *key, double lo, double hi, bool integer,
                    double *out, struct api_error *e)
{
	return integer ? get_int(o, key, lo, hi, out, e) : get_num(o, key, lo, hi, out, e);
}

static int dup_fail(struct api_error *e, const char *where, const char *key,
                    enum request_dup_naming naming)
{
	if (naming == REQUEST_DUP_AT_WHERE)
		return request_fail(e, where ? where : key, "duplicate_field",
		                    "'%s' is given more than once", key);
	char p[64];
	snprintf(p, sizeof(p), "%s%s%s", where ? where : "", where ? "." : "", key);
	return request_fail(e, p, "duplicate_field", "'%s' is given more than once", p);
}

int request_fields_no_twice(const cJSON *o, const char *const *keys, const char *where,
                            enum request_dup_naming naming, struct api_error *e)
{
	uint64_t seen = 0;
	const cJSON *m;
	cJSON_ArrayForEach(m, o)
	{
		for (unsigned i = 0; keys[i] && m->string; i++) {
			if (strcmp(m->string, keys[i]))
				continue;
			if (seen & (UINT64_C(1) << i))
				return dup_fail(e, where, keys[i], naming);
			seen |= UINT64_C(1) << i;
		}
	}
	return 0;
}

static const char *prompt_name(const struct request_field_names *n)
{
	return n->append ? "text" : n->responses ? "input" : n->chat ? "messages" : "prompt";
}

const char *request_field_name(const struct request_field_names *n, enum sched_field f)
{
	switch (f) {
	case SCHED_FIELD_NONE:
		return NULL;
	case SCHED_FIELD_PROMPT:
		return prompt_name(n);
	case SCHED_FIELD_MAX_TOKENS:
		return n->responses ? "max_output_tokens" : "max_tokens";
	case SCHED_FIELD_LOGIT_BIAS:
		return "logit_bias";
	case SCHED_FIELD_SESSION_ID:
		return n->responses ? "previous_response_id" : "session_id";
	case SCHED_FIELD_REVISE_LAST_TOKENS:
		return "revise_last_tokens";
	case SCHED_FIELD_PIN_PREFIX_TOKENS:
		/* a chat pins its system prompt (the Responses API: instructions) */
		return !n->chat ? "pin_prefix_tokens" : n->responses ? "instructions" : "messages";
	case SCHED_FIELD_WINDOW_SIZE:
		return "window_size";
	case SCHED_FIELD_SINK_KEEP_COUNT:
		return "sink_keep_count";
	}
	return NULL;
}
