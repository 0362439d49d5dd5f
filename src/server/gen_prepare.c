/* A parsed request becomes the checked generation request the scheduler
 * receives: the constraint (the grammar cache), the prompt as token ids
 * (chat templates, the system prompt pin), and the request itself with
 * what the parsers left unchecked.  Shared by every generating endpoint;
 * it answers nothing itself (its callers do, through respond.h). */
#include "server/gen_prepare.h"

#include <errno.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "server/chat_format.h"
#include "server/chat_prompt.h"
#include "server/chat_render.h"
#include "server/tools.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

long gen_prepare_bad_token(const struct tokenizer *tok, const int32_t *ids, size_t n)
{
	int n_vocab = tokenizer_n_vocab(tok);
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= n_vocab)
			return (long)i;
	return -1;
}

/* The chat template module renders C strings, so a NUL inside a message
 * goes through it as 0xFF (never a byte of valid UTF-8, and request text is
 * valid UTF-8) and turns back into NUL in the rendered text. */
#define CHAT_NUL_STANDIN '\xff'

static void swap_bytes(char *s, size_t len, char from, char to)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] == from)
			s[i] = to;
}

/* The client's name of a's prompt: "messages", the Responses API's "input",
 * or a completion's "prompt". */
static const char *prompt_name(const struct gen_args *a)
{
	struct request_field_names names = gen_prepare_names(a, false);
	return request_field_name(&names, SCHED_FIELD_PROMPT);
}

/* What the model's chat template cannot take without a template: refused
 * by name, as before there were templates. */
static int no_template_fields(const struct gen_args *a, struct api_error *e)
{
	if (a->reasoning_effort)
		return request_fail(e, "reasoning_effort", "unsupported_parameter",
		                    "'reasoning_effort' is not supported by this server");
	if (a->chat_template_kwargs)
		return request_fail(e, "chat_template_kwargs", "unsupported_parameter",
		                    "'chat_template_kwargs' needs a chat template, and this model has "
		                    "none (model.chat_template sets one)");
	return 0;
}

/* The Responses API's reasoning.effort is the template's reasoning_effort:
 * refused where the template does not read it rather than dropped, since
 * the client asked for a model that reasons more or less. */
static int effort_refused(const struct gen_args *a, const struct chat_render *cr,
                          struct api_error *e)
{
	if (a->api != GEN_API_RESPONSES || !a->reasoning_effort ||
	    (cr && chat_render_caps(cr)->reasoning_effort))
		return 0;
	return request_fail(e, "reasoning.effort", "unsupported_parameter",
	                    "'reasoning.effort' cannot be set for this model: %s",
	                    cr ? "its chat template has no reasoning effort (it does not read "
	                         "reasoning_effort)"
	                       : "it has no chat template (model.chat_template sets one)");
}

/* The chat prompt's text: through the model's own template (cr), else the
 * C families with the messages from chat_first_new on.  pin: *system_end
 * is wanted. */
static int chat_text(const struct tokenizer *tok, const struct chat_render *cr,
                     struct gen_args *a, bool add_bos, bool pin, char **text, size_t *len,
                     size_t *system_end, struct api_error *e)
{
	char err[SINKD_ERR_LEN];
	bool nul = false;
	struct api_message *msgs = a->messages;
	size_t n = a->n_messages, first = a->chat_first_new;
	int rc = effort_refused(a, cr, e);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++)
		if (memchr(msgs[i].content, '\0', msgs[i].content_len)) {
			swap_bytes(msgs[i].content, msgs[i].content_len, '\0', CHAT_NUL_STANDIN);
			nul = true;
		}
	if (cr) {
		struct chat_render_input in = {.msgs = msgs,
		                               .n = n,
		                               .continuation = !add_bos,
		                               .first_new = first,
		                               .tools = a->tools,
		                               .reasoning_effort = a->reasoning_effort,
		                               .kwargs = a->chat_template_kwargs};
		/* the pinned part costs renders of its own: only when it is used */
		rc = chat_render_prompt(cr, &in, text, len, pin ? system_end : NULL, err,
		                        sizeof(err));
	} else {
		rc = no_template_fields(a, e);
		if (rc)
			return rc;
		rc = chat_prompt_render(tok, msgs + first, n - first, a->tools, text, system_end, err,
		                        sizeof(err));
		*len = rc ? 0 : strlen(*text);
	}
	if (!rc && nul)
		swap_bytes(*text, *len, CHAT_NUL_STANDIN, '\0');
	if (rc == -ENOMEM)
		return request_fail_oom(e, prompt_name(a));
	if (rc)
		return request_fail(e, prompt_name(a), "invalid_value", "%s", err);
	return 0;
}

/* How many of a chat prompt's ids hold its first system_end bytes (the
 * system part): the prefix's own tokens when the whole prompt starts with
 * them, else up to and including the first token that differs (it spans
 * the boundary). */
static int system_prefix_tokens(const struct tokenizer *tok, const char *text, size_t system_end,
                                const int32_t *ids, size_t n, int *pin, char *err, size_t err_len)
{
	int32_t *pre = NULL;
	size_t n_pre = 0;
	int rc = tokenizer_encode(tok, text, system_end, true, true, &pre, &n_pre, err, err_len);
	if (rc)
		return rc;
	size_t same = 0;
	while (same < n_pre && same < n && pre[same] == ids[same])
		same++;
	size_t k = same == n_pre ? n_pre : same + 1;
	*pin = (int)(k < n ? k : n);
	free(pre);
	return 0;
}

/* Who a compile that misses the grammar cache counts for: the client's
 * kind and id in who (1 + sizeof(r->client.id) bytes); 0: nobody. */
static size_t client_key(const struct request *r, unsigned char *who)
{
	if (!r->client.kind || r->client.len > sizeof(r->client.id))
		return 0;
	who[0] = r->client.kind;
	memcpy(who + 1, r->client.id, r->client.len);
	return 1 + (size_t)r->client.len;
}

/* A constraint through the server's grammar cache, a compile that misses
 * it counted for the request's client (its API key, else its address).
 * -EAGAIN: that client is over its compile rate; e says so with a 429. */
static int constraint_get(struct request *r, const char *prefix, const cJSON *schema,
                          const char *suffix, struct grammar **out, const char *param, char *path,
                          size_t path_cap, char *err, size_t err_len, struct api_error *e)
{
	unsigned char who[1 + sizeof(r->client.id)];
	size_t n_who = client_key(r, who);
	int retry_s = 0;
	int rc = grammar_cache_get(r->srv->grammars, n_who ? who : NULL, n_who, prefix, schema,
	                           suffix, out, &retry_s, path, path_cap, err, err_len);
	if (rc == -EAGAIN) {
		request_fail(e, param, "schema_compile_rate", "%s", err);
		e->status = 429;
		e->retry_after_s = retry_s > 0 ? retry_s : 1;
	}
	return rc;
}

/* Alternatives (a forced call in a format that names the tool outside
 * the JSON) through the grammar cache, limited like constraint_get. */
static int constraint_get_alts(struct request *r, const struct tool_constraint *c,
                               struct grammar **out, char *path, size_t path_cap, char *err,
                               size_t err_len, struct api_error *e)
{
	struct grammar_alt *alts = calloc(c->n, sizeof(*alts));
	if (!alts)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	for (size_t i = 0; i < c->n; i++)
		alts[i] = (struct grammar_alt){c->prefix[i], c->schema[i], c->suffix[i]};
	unsigned char who[1 + sizeof(r->client.id)];
	size_t n_who = client_key(r, who);
	int retry_s = 0;
	int rc = grammar_cache_get_alts(r->srv->grammars, n_who ? who : NULL, n_who, alts, c->n,
	                                out, &retry_s, path, path_cap, err, err_len);
	free(alts);
	if (rc == -EAGAIN) {
		request_fail(e, "tools", "schema_compile_rate", "%s", err);
		e->status = 429;
		e->retry_after_s = retry_s > 0 ? retry_s : 1;
	}
	return rc;
}

/* The constraint of a forced tool call: the call's envelope in the model's
 * tool format around the schema of {name, arguments} (or, where the name
 * is written outside the JSON, one envelope per tool around its
 * arguments). */
static int tool_grammar(struct request *r, struct gen_args *a, struct api_error *e)
{
	char err[SINKD_ERR_LEN], path[128] = "";
	struct tool_constraint c;
	struct chat_render *cr = server_chat_render(r->srv);
	enum tool_format f = chat_prompt_tool_format(r->srv->tok, cr);
	chat_render_unref(cr);
	int rc = tool_constraint_build(f, a->tools, &c, err, sizeof(err));
	if (!rc && c.n == 1)
		rc = constraint_get(r, c.prefix[0], c.schema[0], c.suffix[0], &a->grammar, "tools",
		                    path, sizeof(path), err, sizeof(err), e);
	else if (!rc)
		rc = constraint_get_alts(r, &c, &a->grammar, path, sizeof(path), err, sizeof(err),
		                         e);
	if (rc == -ENOMEM)
		request_fail_oom(e, "tools");
	else if (rc == -EAGAIN)
		; /* e is set */
	else if (rc)
		request_fail(e, "tools", "invalid_value",
		             "a tool's 'parameters' cannot be used to constrain the call: %s%s%s",
		             err, path[0] ? " at " : "", path);
	tool_constraint_deinit(&c);
	return rc;
}

/* structured_outputs.regex: the whole output matches it. */
static int regex_grammar(struct request *r, struct gen_args *a, struct api_error *e)
{
	char err[SINKD_ERR_LEN];
	unsigned char who[1 + sizeof(r->client.id)];
	size_t n_who = client_key(r, who);
	int retry_s = 0;
	int rc = grammar_cache_get_regex(r->srv->grammars, n_who ? who : NULL, n_who, a->regex,
	                                 &a->grammar, &retry_s, err, sizeof(err));
	if (rc == -EAGAIN) {
		request_fail(e, a->regex_param, "schema_compile_rate", "%s", err);
		e->status = 429;
		e->retry_after_s = retry_s > 0 ? retry_s : 1;
	} else if (rc == -ENOMEM) {
		request_fail_oom(e, a->regex_param);
	} else if (rc) {
		request_fail(e, a->regex_param, "invalid_value", "'%s' cannot be used: %s",
		             a->regex_param, err);
	}
	return rc;
}

int gen_prepare_constraint(struct request *r, struct gen_args *a, struct api_error *e)
{
	const struct tokenizer *tok = r->srv->tok;
	int n_vocab = tokenizer_n_vocab(tok);
	for (size_t i = 0; i < a->n_logit_bias; i++)
		if (a->logit_bias[i].token >= n_vocab)
			return request_fail(
			    e, "logit_bias", "invalid_value",
			    "'logit_bias' key %d is not a token id of this model (0..%d)",
			    (int)a->logit_bias[i].token, n_vocab - 1);
	bool forced = a->tools && (a->tools->choice == TOOL_CHOICE_REQUIRED ||
	                           a->tools->choice == TOOL_CHOICE_NAMED);
	if (forced && a->regex)
		return request_fail(e, a->regex_param, "invalid_value",
		                    "'%s' cannot be combined with a tool_choice that forces a call",
		                    a->regex_param);
	if (forced)
		return tool_grammar(r, a, e);
	if (a->regex && a->response_format != RESPONSE_FORMAT_TEXT)
		return request_fail(e, a->regex_param, "invalid_value",
		                    "'%s' cannot be combined with '%s'", a->regex_param,
		                    a->api == GEN_API_RESPONSES ? "text.format"
		                                                : "response_format");
	if (a->regex)
		return regex_grammar(r, a, e);
	if (a->response_format == RESPONSE_FORMAT_TEXT)
		return 0;
	bool responses = a->api == GEN_API_RESPONSES;
	const char *param = responses ? "text.format" : "response_format";
	const cJSON *schema =
	    a->response_format == RESPONSE_FORMAT_JSON_SCHEMA ? a->response_schema : NULL;
	char err[SINKD_ERR_LEN], path[128] = "";
	int rc = constraint_get(r, NULL, schema, NULL, &a->grammar, param, path, sizeof(path), err,
	                        sizeof(err), e);
	if (rc == -ENOMEM)
		return request_fail_oom(e, param);
	if (rc == -EAGAIN)
		return rc;
	if (rc)
		return request_fail(
		    e, responses ? "text.format.schema" : "response_format.json_schema.schema",
		    "invalid_value", "the JSON Schema cannot be used: %s%s%s", err,
		    path[0] ? " at " : "", path);
	return 0;
}

/* The prompt as token ids: given ids, a completion prompt, or chat messages
 * rendered with the model's template. */
int gen_prepare_prompt(struct request *r, struct gen_args *a, bool add_bos, int32_t **ids,
                       size_t *n, struct api_error *e)
{
	const struct tokenizer *tok = r->srv->tok;
	char err[SINKD_ERR_LEN];
	e->status = 400;
	e->code = "invalid_value";
	if (a->prompt_ids) {
		long bad = gen_prepare_bad_token(tok, a->prompt_ids, a->n_prompt_ids);
		if (bad >= 0) {
			snprintf(e->param, sizeof(e->param), "prompt");
			snprintf(e->message, sizeof(e->message),
			         "'prompt[%ld]' is not a token id of this model (0..%d)", bad,
			         tokenizer_n_vocab(tok) - 1);
			return -EINVAL;
		}
		*ids = a->prompt_ids;
		*n = a->n_prompt_ids;
		a->prompt_ids = NULL;
		return 0;
	}
	char *text = a->prompt;
	size_t len = a->prompt_len, system_end = 0;
	bool parse_special = false;
	if (a->chat) {
		text = NULL;
		struct chat_render *cr = server_chat_render(r->srv);
		bool pin = add_bos && server_pin_system_prompt(r->srv);
		int crc = chat_text(tok, cr, a, add_bos, pin, &text, &len, &system_end, e);
		struct chat_format cf;
		chat_prompt_format(tok, cr, &cf);
		chat_render_unref(cr);
		if (crc)
			return crc;
		parse_special = true; /* the template's own control tokens */
		a->reasoning_start = (int)chat_format_prompt_start(&cf, text, len);
	}
	int rc = tokenizer_encode(tok, text, len, add_bos, parse_special, ids, n, err, sizeof(err));
	/* Only a stream's first request (it starts with BOS) can pin. */
	if (!rc && a->chat && add_bos && system_end > 0 && server_pin_system_prompt(r->srv))
		rc = system_prefix_tokens(tok, text, system_end, *ids, *n, &a->pin_prefix_tokens,
		                          err, sizeof(err));
	if (a->chat)
		free(text);
	if (rc) {
		snprintf(e->param, sizeof(e->param), "%s", prompt_name(a));
		snprintf(e->message, sizeof(e->message), "%s", err);
	}
	return rc;
}

struct request_field_names gen_prepare_names(const struct gen_args *a, bool append)
{
	return (struct request_field_names){
	    .responses = a->api == GEN_API_RESPONSES, .chat = a->chat, .append = append};
}

static void free_stops(char **stops, size_t n)
{
	for (size_t i = 0; stops && i < n; i++)
		free(stops[i]);
	free(stops);
}

void gen_prepare_drop(struct gen_request *req)
{
	free(req->prompt_ids);
	free_stops(req->stops, req->n_stops);
	free(req->logit_bias);
	grammar_unref(req->grammar);
	req->prompt_ids = NULL;
	req->stops = NULL;
	req->logit_bias = NULL;
	req->grammar = NULL;
}

int gen_prepare(struct request *r, struct gen_args *a, int32_t *ids, size_t n_ids,
                const struct gen_target *t, struct gen_request *out, struct api_error *e)
{
	if (!t->session_key && n_ids == 0) {
		free(ids);
		struct request_field_names names = gen_prepare_names(a, r->ep == EP_SESSION_APPEND);
		return request_fail(e, request_field_name(&names, SCHED_FIELD_PROMPT),
		                    "invalid_value", "empty prompt");
	}
	*out = (struct gen_request){.prompt_ids = ids,
	                            .n_prompt = n_ids,
	                            .sampling = a->sampling,
	                            .max_tokens = t->append_only ? 0 : a->max_tokens,
	                            .want_logprobs = a->logprobs,
	                            .ignore_eos = a->ignore_eos,
	                            .session_id = t->session_key,
	                            .revise_last_tokens = t->revise_last_tokens,
	                            .pin_prefix_tokens = a->pin_prefix_tokens};
	if (!a->seed_given && RAND_bytes((unsigned char *)&out->sampling.seed, 8) != 1)
		out->sampling.seed = (uint64_t)(server_now() * 1e9);
	out->stops = a->stops;
	out->n_stops = a->n_stops;
	out->logit_bias = a->logit_bias;
	out->n_logit_bias = a->n_logit_bias;
	out->grammar = a->grammar;
	a->stops = NULL;
	a->n_stops = 0;
	a->logit_bias = NULL;
	a->n_logit_bias = 0;
	a->grammar = NULL;
	return 0;
}
