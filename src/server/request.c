/* OpenAI request parsing: type and range checks that name the field (400),
 * defaults as OpenAI documents them, unknown fields ignored.  It does not
 * tokenize, render chat templates or check the model name (api.c does). */
#include "server/request.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"

#define COMPLETIONS_DEFAULT_MAX_TOKENS 16

static int fail(struct api_error *e, const char *param, const char *code, const char *fmt, ...)
    SINKD_PRINTF(4, 5);
static int fail(struct api_error *e, const char *param, const char *code, const char *fmt, ...)
{
	e->status = 400;
	e->type = "invalid_request_error";
	e->code = code;
	snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int parse_root(const char *body, size_t len, cJSON **root, struct api_error *e)
{
	const char *end = NULL;
	*root = len ? cJSON_ParseWithLengthOpts(body, len, &end, 0) : NULL;
	if (!*root) {
		size_t at = end && end >= body ? (size_t)(end - body) : 0;
		if (!len)
			return fail(e, NULL, "invalid_json",
			            "request body is empty (expected a JSON object)");
		return fail(e, NULL, "invalid_json", "malformed JSON in request body near byte %zu",
		            at);
	}
	if (!cJSON_IsObject(*root)) {
		cJSON_Delete(*root);
		*root = NULL;
		return fail(e, NULL, "invalid_json", "request body must be a JSON object");
	}
	return 0;
}

/* A present, non-null field. */
static cJSON *field(const cJSON *o, const char *key)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_bool(const cJSON *o, const char *key, bool *out, struct api_error *e)
{
	cJSON *v = field(o, key);
	if (!v)
		return 0;
	if (!cJSON_IsBool(v))
		return fail(e, key, "invalid_type", "'%s' must be a boolean", key);
	*out = cJSON_IsTrue(v);
	return 0;
}

static int get_num(const cJSON *o, const char *key, double lo, double hi, double *out,
                   struct api_error *e)
{
	cJSON *v = field(o, key);
	if (!v)
		return 0;
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return fail(e, key, "invalid_type", "'%s' must be a number", key);
	if (v->valuedouble < lo || v->valuedouble > hi)
		return fail(e, key, "invalid_value",
		            "'%s' must be between %.10g and %.10g, got %.10g", key, lo, hi,
		            v->valuedouble);
	*out = v->valuedouble;
	return 0;
}

static int get_int(const cJSON *o, const char *key, double lo, double hi, double *out,
                   struct api_error *e)
{
	cJSON *v = field(o, key);
	if (v && (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)))
		return fail(e, key, "invalid_type", "'%s' must be an integer", key);
	return get_num(o, key, lo, hi, out, e);
}

static char *dup_string(const cJSON *v)
{
	return strdup(v->valuestring);
}

static int parse_stop(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	cJSON *v = field(o, "stop");
	if (!v)
		return 0;
	size_t n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? (size_t)cJSON_GetArraySize(v) : 0;
	if (!cJSON_IsString(v) && !cJSON_IsArray(v))
		return fail(e, "stop", "invalid_type",
		            "'stop' must be a string or an array of strings");
	if (n > STOP_MAX_STRINGS)
		return fail(e, "stop", "invalid_value", "'stop' has more than %d strings",
		            STOP_MAX_STRINGS);
	a->stops = calloc(n ? n : 1, sizeof(char *));
	if (!a->stops)
		return fail(e, "stop", "out_of_memory", "out of memory");
	for (size_t i = 0; i < n; i++) {
		const cJSON *s = cJSON_IsString(v) ? v : cJSON_GetArrayItem(v, (int)i);
		if (!cJSON_IsString(s))
			return fail(e, "stop", "invalid_type", "'stop[%zu]' must be a string", i);
		size_t len = strlen(s->valuestring);
		if (len == 0 || len > STOP_MAX_LEN)
			return fail(e, "stop", "invalid_value",
			            "'stop' strings must have 1..%d bytes", STOP_MAX_LEN);
		a->stops[a->n_stops++] = dup_string(s);
	}
	return 0;
}

static int parse_sampling(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	struct sampler_params *p = &a->sampling;
	double t = p->temperature, tp = p->top_p, tk = p->top_k, mp = p->min_p;
	double rp = p->repeat_penalty, pp = 0, fp = 0, seed = 0;
	int rc = get_num(o, "temperature", 0, 2, &t, e);
	if (!rc)
		rc = get_num(o, "top_p", 0, 1, &tp, e);
	if (!rc && tp <= 0)
		rc = fail(e, "top_p", "invalid_value", "'top_p' must be greater than 0");
	if (!rc)
		rc = get_int(o, "top_k", -1, 1e9, &tk, e);
	if (!rc)
		rc = get_num(o, "min_p", 0, 1, &mp, e);
	if (!rc)
		rc = get_num(o, "repeat_penalty", 1e-6, 100, &rp, e);
	if (!rc)
		rc = get_num(o, "presence_penalty", -2, 2, &pp, e);
	if (!rc)
		rc = get_num(o, "frequency_penalty", -2, 2, &fp, e);
	if (!rc && field(o, "seed")) {
		rc = get_int(o, "seed", -9.2e18, 1.8e19, &seed, e);
		a->seed_given = true;
		p->seed = seed < 0 ? (uint64_t)(int64_t)seed : (uint64_t)seed;
	}
	p->temperature = (float)t;
	p->top_p = (float)tp;
	p->top_k = (int)tk;
	p->min_p = (float)mp;
	p->repeat_penalty = (float)rp;
	p->presence_penalty = (float)pp;
	p->frequency_penalty = (float)fp;
	return rc;
}

/* logprobs: completions take an integer 0..20 (top alternatives), chat a
 * boolean plus top_logprobs 0..20. */
static int parse_logprobs(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	double top = 0;
	int rc;
	if (a->chat) {
		rc = get_bool(o, "logprobs", &a->logprobs, e);
		if (!rc)
			rc = get_int(o, "top_logprobs", 0, SAMPLER_MAX_TOP_LOGPROBS, &top, e);
		if (!rc && top > 0 && !a->logprobs)
			rc = fail(e, "top_logprobs", "invalid_value",
			          "'top_logprobs' needs 'logprobs': true");
	} else {
		rc = get_int(o, "logprobs", 0, SAMPLER_MAX_TOP_LOGPROBS, &top, e);
		a->logprobs = !rc && field(o, "logprobs") != NULL;
	}
	a->sampling.n_top_logprobs = (int)top;
	a->sampling.logprobs = a->logprobs;
	return rc;
}

static int parse_common(const cJSON *o, int64_t limit, struct gen_args *a, struct api_error *e)
{
	cJSON *m = field(o, "model");
	if (m && !cJSON_IsString(m))
		return fail(e, "model", "invalid_type", "'model' must be a string");
	if (m)
		a->model = dup_string(m);
	int rc = get_bool(o, "stream", &a->stream, e);
	cJSON *so = field(o, "stream_options");
	if (!rc && so && !cJSON_IsObject(so))
		rc =
		    fail(e, "stream_options", "invalid_type", "'stream_options' must be an object");
	if (!rc && so)
		rc = get_bool(so, "include_usage", &a->include_usage, e);
	if (!rc && so && cJSON_IsBool(field(so, "include_usage")) && !a->stream)
		rc = fail(e, "stream_options", "invalid_value",
		          "'stream_options' is only allowed with 'stream': true");
	double n = 1;
	if (!rc)
		rc = get_int(o, "n", 1, 1, &n, e);
	double mt = a->chat ? (double)limit
	                    : (double)(limit < COMPLETIONS_DEFAULT_MAX_TOKENS
	                                   ? limit
	                                   : COMPLETIONS_DEFAULT_MAX_TOKENS);
	const char *mt_key =
	    a->chat && field(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
	if (!rc)
		rc = get_int(o, mt_key, 1, (double)limit, &mt, e);
	a->max_tokens = (int)mt;
	if (!rc)
		rc = parse_sampling(o, a, e);
	if (!rc)
		rc = parse_stop(o, a, e);
	if (!rc)
		rc = parse_logprobs(o, a, e);
	if (!rc)
		rc = get_bool(o, "ignore_eos", &a->ignore_eos, e);
	return rc;
}

static int parse_prompt_ids(const cJSON *arr, struct gen_args *a, struct api_error *e)
{
	size_t n = (size_t)cJSON_GetArraySize(arr);
	a->prompt_ids = malloc((n ? n : 1) * sizeof(int32_t));
	if (!a->prompt_ids)
		return fail(e, "prompt", "out_of_memory", "out of memory");
	for (size_t i = 0; i < n; i++) {
		const cJSON *t = cJSON_GetArrayItem(arr, (int)i);
		if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) ||
		    t->valuedouble < 0 || t->valuedouble > INT32_MAX)
			return fail(e, "prompt", "invalid_type",
			            "'prompt[%zu]' must be a token id (non-negative integer)", i);
		a->prompt_ids[i] = (int32_t)t->valuedouble;
	}
	a->n_prompt_ids = n;
	return 0;
}

/* A string, [string], [int...] or [[int...]] — one prompt only (n = 1). */
static int parse_prompt(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	cJSON *p = field(o, "prompt");
	if (!p)
		return fail(e, "prompt", "missing_field", "'prompt' is required");
	if (cJSON_IsString(p)) {
		a->prompt = dup_string(p);
		return 0;
	}
	if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0)
		return fail(e, "prompt", "invalid_type",
		            "'prompt' must be a string, an array of one string or an array of "
		            "token ids");
	cJSON *first = cJSON_GetArrayItem(p, 0);
	if (cJSON_IsNumber(first))
		return parse_prompt_ids(p, a, e);
	if (cJSON_GetArraySize(p) > 1)
		return fail(e, "prompt", "invalid_value",
		            "only one prompt per request is supported");
	if (cJSON_IsString(first)) {
		a->prompt = dup_string(first);
		return 0;
	}
	if (cJSON_IsArray(first))
		return parse_prompt_ids(first, a, e);
	return fail(e, "prompt", "invalid_type", "'prompt[0]' must be a string or token ids");
}

/* content: a string, or an array of {"type":"text","text":...} parts. */
static int message_content(const cJSON *c, size_t i, char **out, struct api_error *e)
{
	if (!c) {
		*out = strdup("");
		return 0;
	}
	if (cJSON_IsString(c)) {
		*out = dup_string(c);
		return 0;
	}
	if (!cJSON_IsArray(c))
		return fail(e, "messages", "invalid_type",
		            "'messages[%zu].content' must be a string or an array of text parts",
		            i);
	size_t len = 0, cap = 0;
	char *s = NULL;
	const cJSON *part;
	cJSON_ArrayForEach(part, c)
	{
		const cJSON *type = field(part, "type"), *text = field(part, "text");
		if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") ||
		    !cJSON_IsString(text)) {
			free(s);
			return fail(e, "messages", "invalid_value",
			            "'messages[%zu].content' parts must be "
			            "{\"type\":\"text\",\"text\":...}",
			            i);
		}
		size_t n = strlen(text->valuestring);
		if (len + n + 1 > cap) {
			cap = (len + n + 1) * 2;
			char *t = realloc(s, cap);
			if (!t) {
				free(s);
				return fail(e, "messages", "out_of_memory", "out of memory");
			}
			s = t;
		}
		memcpy(s + len, text->valuestring, n + 1);
		len += n;
	}
	*out = s ? s : strdup("");
	return 0;
}

static int parse_messages(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
	cJSON *msgs = field(o, "messages");
	if (!msgs)
		return fail(e, "messages", "missing_field", "'messages' is required");
	if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
		return fail(e, "messages", "invalid_type", "'messages' must be a non-empty array");
	size_t n = (size_t)cJSON_GetArraySize(msgs);
	a->messages = calloc(n, sizeof(*a->messages));
	if (!a->messages)
		return fail(e, "messages", "out_of_memory", "out of memory");
	for (size_t i = 0; i < n; i++) {
		const cJSON *m = cJSON_GetArrayItem(msgs, (int)i), *role = field(m, "role");
		if (!cJSON_IsObject(m))
			return fail(e, "messages", "invalid_type",
			            "'messages[%zu]' must be an object", i);
		if (!cJSON_IsString(role))
			return fail(e, "messages", "invalid_type",
			            "'messages[%zu].role' must be a string", i);
		bool known = false;
		for (size_t r = 0; r < sizeof(roles) / sizeof(roles[0]); r++)
			known |= !strcmp(role->valuestring, roles[r]);
		if (!known)
			return fail(
			    e, "messages", "invalid_value",
			    "'messages[%zu].role' must be system, developer, user, assistant "
			    "or tool",
			    i);
		a->messages[i].role = dup_string(role);
		a->n_messages = i + 1;
		if (message_content(field(m, "content"), i, &a->messages[i].content, e))
			return -EINVAL;
	}
	return 0;
}

static int parse_session_id(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	cJSON *v = field(o, "session_id");
	if (!v)
		return 0;
	if (!cJSON_IsString(v) || !*v->valuestring)
		return fail(e, "session_id", "invalid_type",
		            "'session_id' must be a session id string");
	a->session_id = dup_string(v);
	return 0;
}

int gen_args_parse(const char *body, size_t len, bool chat, int64_t limit, struct gen_args *a,
                   struct api_error *e)
{
	memset(a, 0, sizeof(*a));
	memset(e, 0, sizeof(*e));
	a->chat = chat;
	sampler_params_default(&a->sampling);
	cJSON *root = NULL;
	int rc = parse_root(body, len, &root, e);
	if (rc)
		return rc;
	rc = parse_common(root, limit, a, e);
	if (!rc)
		rc = parse_session_id(root, a, e);
	if (!rc)
		rc = chat ? parse_messages(root, a, e) : parse_prompt(root, a, e);
	cJSON_Delete(root);
	if (rc)
		gen_args_deinit(a);
	return rc;
}

int session_create_args_parse(const char *body, size_t len, struct session_create_args *out,
                              struct api_error *e)
{
	memset(e, 0, sizeof(*e));
	out->window_size = 0;
	out->sink_keep_count = -1;
	if (len == 0)
		return 0;
	cJSON *root = NULL;
	int rc = parse_root(body, len, &root, e);
	if (rc)
		return rc;
	double w = 0, k = -1;
	rc = get_int(root, "window_size", 1, 1 << 24, &w, e);
	if (!rc)
		rc = get_int(root, "sink_keep_count", 0, 1 << 20, &k, e);
	out->window_size = (int)w;
	out->sink_keep_count = (int)k;
	cJSON_Delete(root);
	return rc;
}

int append_args_parse(const char *body, size_t len, int64_t limit, struct append_args *a,
                      struct api_error *e)
{
	memset(a, 0, sizeof(*a));
	memset(e, 0, sizeof(*e));
	sampler_params_default(&a->gen.sampling);
	cJSON *root = NULL;
	int rc = parse_root(body, len, &root, e);
	if (rc)
		return rc;
	cJSON *t = field(root, "text"), *g = field(root, "generate");
	double revise = 0;
	if (t && !cJSON_IsString(t))
		rc = fail(e, "text", "invalid_type", "'text' must be a string");
	if (!rc)
		rc = get_int(root, "revise_last_tokens", 0, 1 << 30, &revise, e);
	if (!rc && g && !cJSON_IsObject(g))
		rc = fail(e, "generate", "invalid_type", "'generate' must be an object");
	if (!rc && !t && !g && revise == 0)
		rc = fail(e, "text", "missing_field", "'text' or 'generate' is required");
	a->revise_last_tokens = (size_t)revise;
	a->text = strdup(cJSON_IsString(t) ? t->valuestring : "");
	if (!rc && g) {
		a->generate = true;
		a->gen.stream = true; /* the reply streams unless asked otherwise */
		rc = parse_common(g, limit, &a->gen, e);
		if (rc && e->param[0]) {
			char p[sizeof(e->param)];
			snprintf(p, sizeof(p), "%s", e->param);
			snprintf(e->param, sizeof(e->param), "generate.%.48s", p);
		}
	}
	cJSON_Delete(root);
	if (rc)
		append_args_deinit(a);
	return rc;
}

void append_args_deinit(struct append_args *a)
{
	free(a->text);
	gen_args_deinit(&a->gen);
	memset(a, 0, sizeof(*a));
}

void gen_args_deinit(struct gen_args *a)
{
	free(a->model);
	free(a->session_id);
	for (size_t i = 0; i < a->n_stops; i++)
		free(a->stops[i]);
	free(a->stops);
	free(a->prompt);
	free(a->prompt_ids);
	for (size_t i = 0; i < a->n_messages; i++) {
		free(a->messages[i].role);
		free(a->messages[i].content);
	}
	free(a->messages);
	memset(a, 0, sizeof(*a));
}

int tokenize_args_parse(const char *body, size_t len, struct tokenize_args *out,
                        struct api_error *e)
{
	memset(out, 0, sizeof(*out));
	memset(e, 0, sizeof(*e));
	out->add_special = true;
	cJSON *root = NULL;
	int rc = parse_root(body, len, &root, e);
	if (rc)
		return rc;
	cJSON *c = field(root, "content");
	if (!c)
		rc = fail(e, "content", "missing_field", "'content' is required");
	else if (!cJSON_IsString(c))
		rc = fail(e, "content", "invalid_type", "'content' must be a string");
	if (!rc)
		rc = get_bool(root, "add_special", &out->add_special, e);
	if (!rc)
		rc = get_bool(root, "parse_special", &out->parse_special, e);
	if (!rc)
		out->content = dup_string(c);
	cJSON_Delete(root);
	return rc;
}

int detokenize_args_parse(const char *body, size_t len, int32_t **tokens, size_t *n_tokens,
                          struct api_error *e)
{
	memset(e, 0, sizeof(*e));
	*tokens = NULL;
	*n_tokens = 0;
	cJSON *root = NULL;
	int rc = parse_root(body, len, &root, e);
	if (rc)
		return rc;
	cJSON *t = field(root, "tokens");
	struct gen_args a = {0};
	if (!t)
		rc = fail(e, "tokens", "missing_field", "'tokens' is required");
	else if (!cJSON_IsArray(t))
		rc = fail(e, "tokens", "invalid_type", "'tokens' must be an array of token ids");
	else
		rc = parse_prompt_ids(t, &a, e);
	if (rc && !strcmp(e->param, "prompt")) {
		snprintf(e->param, sizeof(e->param), "tokens");
		snprintf(e->message, sizeof(e->message),
		         "'tokens' must hold token ids (non-negative integers)");
	}
	cJSON_Delete(root);
	if (rc) {
		free(a.prompt_ids);
		return rc;
	}
	*tokens = a.prompt_ids;
	*n_tokens = a.n_prompt_ids;
	return 0;
}
