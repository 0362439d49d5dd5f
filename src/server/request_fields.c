/* The field rules every request parser shares: the refusal of a field (a
 * 400, or a 500 for memory), the one duplicate-key check, and the client's
 * name of a field the scheduler refuses.  Whole requests are parsed in
 * request.c and responses.c. */
#include "server/request_fields.h"

#include <errno.h>
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
