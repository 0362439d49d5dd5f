/* From a parsed request to the checked generation request the scheduler
 * receives, once for every generating endpoint (chat completions,
 * completions, session appends, the Responses API): the constraint it
 * decodes under, its prompt as token ids, and gen_prepare, which checks
 * what is left and fills struct gen_request (sched/scheduler.h).  The
 * scheduler checks none of it again.  The endpoints (api.c,
 * api_sessions.c, api_responses.c) call it; it calls none of them. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/scheduler.h"
#include "server/request.h"
#include "server/request_fields.h"
#include "server/server_impl.h"

struct tokenizer;

/* Checks a's logit_bias against the vocabulary and compiles the constraint
 * the generation decodes under (response_format json_object / json_schema,
 * or a required / named tool_choice in the model's tool format) into
 * a->grammar, through the server's grammar cache.  Returns 0, or -EINVAL /
 * -ENOMEM / -EAGAIN (the client's compile rate) with e set (a bad schema
 * names the keyword and its JSON path). */
int gen_prepare_constraint(struct request *r, struct gen_args *a, struct api_error *e);
/* a's prompt as token ids: given ids (checked against the vocabulary), a
 * completion prompt, or chat messages (with a->tools offered) rendered with
 * the model's template.  add_bos: a stream's first request.  Returns 0 or
 * -EINVAL with e set. */
int gen_prepare_prompt(struct request *r, struct gen_args *a, bool add_bos, int32_t **ids,
                       size_t *n, struct api_error *e);
/* The first of ids that is not in the vocabulary, or -1. */
long gen_prepare_bad_token(const struct tokenizer *tok, const int32_t *ids, size_t n);

/* Where a generation goes. */
struct gen_target {
	const char *session_key; /* a persistent session's key; NULL: one-shot */
	size_t revise_last_tokens;
	bool append_only; /* a session append without generation (max_tokens 0) */
};

/* The checked request: a's sampling, max_tokens (parsed within
 * limits.max_tokens), a prompt unless on a session (ids: from
 * gen_prepare_prompt or the tokenizer, so in the vocabulary), logit_bias
 * (checked by gen_prepare_constraint), a seed when a gave none.  ids pass
 * to *out, and a's stops, logit_bias and grammar move into it (a's fields
 * are cleared); gen_prepare_drop frees them when the request is not
 * submitted.  On error ids are freed, a keeps its fields and e says why. */
int gen_prepare(struct request *r, struct gen_args *a, int32_t *ids, size_t n_ids,
                const struct gen_target *t, struct gen_request *out, struct api_error *e);
void gen_prepare_drop(struct gen_request *req);

/* The client's names for the fields of a's request (request_fields.h). */
struct request_field_names gen_prepare_names(const struct gen_args *a, bool append);
