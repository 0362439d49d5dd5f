/* The field rules every request parser shares (chat completions,
 * completions, sessions, the Responses API): the error a refused field
 * answers with, a known key given twice, and the name a client knows a
 * field by when the scheduler refuses it (it speaks of fields, never of
 * names: scheduler.h's enum sched_field).  It parses no whole request
 * (request.c, responses.c do) and renders no answer (respond.c). */
#pragma once

#include <stdarg.h>
#include <stdbool.h>

#include <cjson/cJSON.h>

#include "sched/scheduler.h"
#include "util/errbuf.h"

/* What a "\u0000" of a parsed body's text is until the text helpers turn
 * it back into NUL (never a byte of valid UTF-8). */
#define REQUEST_NUL_STANDIN '\xff'

/* A refused request: status, code, field and message for respond.h. */
struct api_error {
	int status;       /* 400, 404, ... (the OpenAI type follows from it: respond.h) */
	const char *code; /* "invalid_value", "invalid_type", "invalid_json", ... */
	char param[64];   /* the field, "" when none */
	char message[SINKD_ERR_LEN + 64];
	int retry_after_s; /* > 0: a Retry-After header (a 429 or 503) */
};

/* A 400 naming param (NULL: none); returns -EINVAL. */
int request_fail(struct api_error *e, const char *param, const char *code, const char *fmt, ...)
    SINKD_PRINTF(4, 5);
int request_vfail(struct api_error *e, const char *param, const char *code, const char *fmt,
                  va_list ap);
/* Out of memory is the server's fault, not the request's: e is a 500
 * "out_of_memory" (as respond.h maps -ENOMEM), still naming the field being
 * read; returns -EINVAL like request_fail. */
int request_fail_oom(struct api_error *e, const char *param);

/* Typed readers of a request object's fields; each returns 0 (absent or
 * null fields included: *out keeps its default) or -EINVAL / -ENOMEM with
 * e naming the field.  request_field: a present, non-null field.
 * request_get_num: a finite number in lo..hi (integer: a whole one).
 * request_text_dup: a text field's bytes (len set) with each stand-in back
 * as NUL.  request_name_dup: a name-like string, which is a C string
 * downstream: a NUL in it is refused (naming `what`), never cut. */
cJSON *request_field(const cJSON *o, const char *key);
int request_get_bool(const cJSON *o, const char *key, bool *out, struct api_error *e);
int request_get_num(const cJSON *o, const char *key, double lo, double hi, bool integer,
                    double *out, struct api_error *e);
char *request_text_dup(const cJSON *v, size_t *len);
int request_name_dup(const cJSON *v, const char *param, const char *what, char **out,
                     struct api_error *e);

/* How a duplicate key inside an object at `where` is named. */
enum request_dup_naming {
	/* param: where (the key itself when where is NULL); the message names
	 * the key alone (chat completions, completions, sessions) */
	REQUEST_DUP_AT_WHERE = 0,
	/* param and message: the path "where.key" (the key when where is
	 * NULL; the Responses API) */
	REQUEST_DUP_AS_PATH,
};
/* A known key (keys: NULL-terminated, at most 64) given twice in o is
 * refused, "duplicate_field": cJSON takes the first, a proxy in front of
 * us perhaps the last.  One walk over the members.  0 or -EINVAL. */
int request_fields_no_twice(const cJSON *o, const char *const *keys, const char *where,
                            enum request_dup_naming naming, struct api_error *e);

/* Which request a scheduler refusal answers: the client's names for its
 * fields follow from it. */
struct request_field_names {
	bool responses; /* the Responses API */
	bool chat;      /* chat completions or Responses: the prompt is messages */
	bool append;    /* POST /v1/sessions/{id}/append: the prompt is its text */
};
/* The client's name of field f ("messages", "input", "text" or "prompt" for
 * the prompt, "max_output_tokens" for a Responses max_tokens, ...); NULL
 * for SCHED_FIELD_NONE. */
const char *request_field_name(const struct request_field_names *n, enum sched_field f);
