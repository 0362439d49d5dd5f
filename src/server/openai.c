/* Builders for the OpenAI objects sinkd returns (completions and chat; the
 * Responses API's are in responses.c).  Parsing requests lives in
 * request.c; nothing here touches connections or the scheduler. */
#include "server/openai.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

const char *oa_finish_reason(enum gen_finish f)
{
	switch (f) {
	case GEN_FINISH_STOP:
		return "stop";
	case GEN_FINISH_LENGTH:
		return "length";
	default:
		return NULL;
	}
}

/* The JSON literal of len bytes, escaped as cJSON escapes (a NUL too). */
static char *json_literal(const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	char *out = malloc(len * 6 + 3), *w = out;
	if (!out)
		return NULL;
	*w++ = '"';
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *esc = c == '"'    ? "\\\""
		                  : c == '\\' ? "\\\\"
		                  : c == '\b' ? "\\b"
		                  : c == '\f' ? "\\f"
		                  : c == '\n' ? "\\n"
		                  : c == '\r' ? "\\r"
		                  : c == '\t' ? "\\t"
		                              : NULL;
		if (esc) {
			*w++ = esc[0];
			*w++ = esc[1];
		} else if (c < 0x20) {
			memcpy(w, "\\u00", 4);
			w[4] = hex[c >> 4];
			w[5] = hex[c & 15];
			w += 6;
		} else {
			*w++ = (char)c;
		}
	}
	*w++ = '"';
	*w = '\0';
	return out;
}

/* cJSON's strings end at the first NUL, and a NUL is text too (a byte
 * token 0x00): such text becomes a raw item holding its own escaped literal. */
cJSON *oa_string_n(const char *s, size_t len)
{
	if (!memchr(s, '\0', len)) {
		char small[256];
		char *tmp = len < sizeof(small) ? small : malloc(len + 1);
		if (!tmp)
			return NULL;
		memcpy(tmp, s, len);
		tmp[len] = '\0';
		cJSON *j = cJSON_CreateString(tmp);
		if (tmp != small)
			free(tmp);
		return j;
	}
	char *lit = json_literal(s, len);
	cJSON *j = lit ? cJSON_CreateRaw(lit) : NULL;
	free(lit);
	return j;
}

static cJSON *head(const struct oa_ctx *c, const char *object)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", c->id);
	cJSON_AddStringToObject(o, "object", object);
	cJSON_AddNumberToObject(o, "created", (double)c->created);
	cJSON_AddStringToObject(o, "model", c->model);
	cJSON_AddStringToObject(o, "system_fingerprint", "sinkd-" SINKD_VERSION);
	return o;
}

static void add_nullable(cJSON *o, const char *key, cJSON *v)
{
	cJSON_AddItemToObject(o, key, v ? v : cJSON_CreateNull());
}

static void add_str_or_null(cJSON *o, const char *key, const char *s)
{
	if (s)
		cJSON_AddStringToObject(o, key, s);
	else
		cJSON_AddNullToObject(o, key);
}

cJSON *oa_chunk(const struct oa_ctx *c, const char *text, size_t len, bool role, cJSON *logprobs,
                const char *finish_reason)
{
	cJSON *o = head(c, c->chat ? "chat.completion.chunk" : "text_completion");
	cJSON *choices = cJSON_AddArrayToObject(o, "choices");
	cJSON *ch = cJSON_CreateObject();
	cJSON_AddNumberToObject(ch, "index", 0);
	if (c->chat) {
		cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
		if (role)
			cJSON_AddStringToObject(delta, "role", "assistant");
		if (text || role)
			cJSON_AddItemToObject(delta, "content", oa_string_n(text ? text : "", len));
	} else {
		cJSON_AddItemToObject(ch, "text", oa_string_n(text ? text : "", text ? len : 0));
	}
	add_nullable(ch, "logprobs", logprobs);
	add_str_or_null(ch, "finish_reason", finish_reason);
	cJSON_AddItemToArray(choices, ch);
	if (c->include_usage)
		cJSON_AddNullToObject(o, "usage");
	return o;
}

cJSON *oa_reasoning_chunk(const struct oa_ctx *c, const char *text, size_t len, bool role,
                          cJSON *logprobs)
{
	cJSON *o = oa_chunk(c, NULL, 0, role, logprobs, NULL);
	cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
	cJSON *delta = cJSON_GetObjectItem(ch, "delta");
	if (role) /* the text is reasoning: content stays null in this delta */
		cJSON_ReplaceItemInObject(delta, "content", cJSON_CreateNull());
	cJSON_AddItemToObject(delta, "reasoning_content", oa_string_n(text, len));
	return o;
}

void oa_final_set_reasoning(cJSON *final, const char *text, size_t len)
{
	cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(final, "choices"), 0);
	cJSON *msg = cJSON_GetObjectItem(ch, "message");
	if (msg)
		cJSON_AddItemToObject(msg, "reasoning_content", oa_string_n(text, len));
}

cJSON *oa_usage(int n_prompt, int n_cached, int n_generated)
{
	cJSON *u = cJSON_CreateObject();
	cJSON_AddNumberToObject(u, "prompt_tokens", n_prompt);
	cJSON_AddNumberToObject(u, "completion_tokens", n_generated);
	cJSON_AddNumberToObject(u, "total_tokens", n_prompt + n_generated);
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"),
	                        "cached_tokens", n_cached);
	return u;
}

cJSON *oa_usage_chunk(const struct oa_ctx *c, int n_prompt, int n_cached, int n_generated)
{
	cJSON *o = head(c, c->chat ? "chat.completion.chunk" : "text_completion");
	cJSON_AddArrayToObject(o, "choices");
	cJSON_AddItemToObject(o, "usage", oa_usage(n_prompt, n_cached, n_generated));
	return o;
}

cJSON *oa_final(const struct oa_ctx *c, const char *text, size_t len, cJSON *logprobs,
                const char *finish_reason, int n_prompt, int n_cached, int n_generated)
{
	cJSON *o = head(c, c->chat ? "chat.completion" : "text_completion");
	cJSON *choices = cJSON_AddArrayToObject(o, "choices");
	cJSON *ch = cJSON_CreateObject();
	cJSON_AddNumberToObject(ch, "index", 0);
	if (c->chat) {
		cJSON *msg = cJSON_AddObjectToObject(ch, "message");
		cJSON_AddStringToObject(msg, "role", "assistant");
		cJSON_AddItemToObject(msg, "content", oa_string_n(text, len));
	} else {
		cJSON_AddItemToObject(ch, "text", oa_string_n(text, len));
	}
	add_nullable(ch, "logprobs", logprobs);
	add_str_or_null(ch, "finish_reason", finish_reason);
	cJSON_AddItemToArray(choices, ch);
	cJSON_AddItemToObject(o, "usage", oa_usage(n_prompt, n_cached, n_generated));
	return o;
}

cJSON *oa_tool_call_chunk(const struct oa_ctx *c, bool role, int index, const char *id,
                          const char *name, const char *args, size_t args_len)
{
	cJSON *o = head(c, "chat.completion.chunk");
	cJSON *choices = cJSON_AddArrayToObject(o, "choices");
	cJSON *ch = cJSON_CreateObject();
	cJSON_AddNumberToObject(ch, "index", 0);
	cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
	if (role) {
		cJSON_AddStringToObject(delta, "role", "assistant");
		cJSON_AddNullToObject(delta, "content");
	}
	cJSON *call = cJSON_CreateObject();
	cJSON_AddNumberToObject(call, "index", index);
	if (id) {
		cJSON_AddStringToObject(call, "id", id);
		cJSON_AddStringToObject(call, "type", "function");
	}
	cJSON *fn = cJSON_AddObjectToObject(call, "function");
	if (id)
		cJSON_AddStringToObject(fn, "name", name ? name : "");
	cJSON_AddItemToObject(fn, "arguments", oa_string_n(args ? args : "", args ? args_len : 0));
	cJSON_AddItemToArray(cJSON_AddArrayToObject(delta, "tool_calls"), call);
	cJSON_AddNullToObject(ch, "logprobs");
	cJSON_AddNullToObject(ch, "finish_reason");
	cJSON_AddItemToArray(choices, ch);
	if (c->include_usage)
		cJSON_AddNullToObject(o, "usage");
	return o;
}

cJSON *oa_tool_call(const char *id, const char *name, const char *args, size_t args_len)
{
	cJSON *call = cJSON_CreateObject();
	cJSON_AddStringToObject(call, "id", id);
	cJSON_AddStringToObject(call, "type", "function");
	cJSON *fn = cJSON_AddObjectToObject(call, "function");
	cJSON_AddStringToObject(fn, "name", name);
	cJSON_AddItemToObject(fn, "arguments", oa_string_n(args ? args : "", args ? args_len : 0));
	return call;
}

void oa_final_set_tool_calls(cJSON *final, cJSON *tool_calls)
{
	cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(final, "choices"), 0);
	cJSON *msg = cJSON_GetObjectItem(ch, "message");
	if (!msg) {
		cJSON_Delete(tool_calls);
		return;
	}
	cJSON *content = cJSON_GetObjectItem(msg, "content");
	if (cJSON_IsString(content) && !content->valuestring[0])
		cJSON_ReplaceItemInObject(msg, "content", cJSON_CreateNull());
	cJSON_AddItemToObject(msg, "tool_calls", tool_calls);
}

cJSON *oa_logprobs_new(bool chat)
{
	cJSON *lp = cJSON_CreateObject();
	if (chat) {
		cJSON_AddArrayToObject(lp, "content");
	} else {
		cJSON_AddArrayToObject(lp, "tokens");
		cJSON_AddArrayToObject(lp, "token_logprobs");
		cJSON_AddArrayToObject(lp, "top_logprobs");
		cJSON_AddArrayToObject(lp, "text_offset");
	}
	return lp;
}

/* The text of one token as it reads inside a stream (a SentencePiece word
 * keeps its leading space; may be empty for control tokens). */
static char *token_text(const struct tokenizer *tok, int32_t id, size_t *len)
{
	char buf[256];
	size_t n = 0;
	if (tok) {
		struct detok_stream ds;
		detok_stream_init(&ds, tok, false);
		n = detok_stream_push(&ds, id, buf, sizeof(buf));
		n += detok_stream_flush(&ds, buf + n, sizeof(buf) - n);
	}
	char *t = malloc(n + 1);
	if (t) {
		memcpy(t, buf, n);
		t[n] = '\0';
	}
	*len = t ? n : 0;
	return t;
}

static cJSON *bytes_array(const char *s, size_t len)
{
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; i < len; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)s[i]));
	return a;
}

static cJSON *chat_entry(const struct tokenizer *tok, int32_t id, float logprob)
{
	size_t n;
	char *t = token_text(tok, id, &n);
	cJSON *e = cJSON_CreateObject();
	cJSON_AddItemToObject(e, "token", oa_string_n(t ? t : "", n));
	cJSON_AddNumberToObject(e, "logprob", logprob);
	cJSON_AddItemToObject(e, "bytes", bytes_array(t ? t : "", n));
	free(t);
	return e;
}

void oa_logprobs_add(cJSON *lp, bool chat, const struct tokenizer *tok,
                     const struct sampler_result *res, size_t text_offset)
{
	if (chat) {
		cJSON *e = chat_entry(tok, res->token, res->logprob);
		cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
		for (int i = 0; i < res->n_top; i++)
			cJSON_AddItemToArray(
			    top, chat_entry(tok, res->top[i].token, res->top[i].logprob));
		cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "content"), e);
		return;
	}
	size_t n;
	char *t = token_text(tok, res->token, &n);
	cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "tokens"), oa_string_n(t ? t : "", n));
	free(t);
	cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"),
	                     cJSON_CreateNumber(res->logprob));
	cJSON *top = cJSON_CreateObject();
	for (int i = 0; i < res->n_top; i++) {
		size_t an;
		/* an object key is a C string: a NUL in one ends it there */
		char *a = token_text(tok, res->top[i].token, &an);
		if (!cJSON_GetObjectItem(top, a ? a : ""))
			cJSON_AddNumberToObject(top, a ? a : "", res->top[i].logprob);
		free(a);
	}
	cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), top);
	cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "text_offset"),
	                     cJSON_CreateNumber((double)text_offset));
}

cJSON *oa_error(const char *message, const char *type, const char *param, const char *code)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *e = cJSON_AddObjectToObject(o, "error");
	cJSON_AddStringToObject(e, "message", message);
	cJSON_AddStringToObject(e, "type", type);
	add_str_or_null(e, "param", param);
	add_str_or_null(e, "code", code);
	return o;
}

int sse_append_raw(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t nc = (*cap ? *cap : 1024);
		while (nc < *len + n + 1)
			nc *= 2;
		char *b = realloc(*buf, nc);
		if (!b)
			return -ENOMEM;
		*buf = b;
		*cap = nc;
	}
	memcpy(*buf + *len, s, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 0;
}

/* The JSON text of obj (freed) behind prefix, then a blank line. */
static int sse_append_json(char **buf, size_t *len, size_t *cap, const char *prefix,
                           size_t prefix_len, cJSON *obj)
{
	char *s = cJSON_PrintUnformatted(obj);
	cJSON_Delete(obj);
	if (!s)
		return -ENOMEM;
	int rc = sse_append_raw(buf, len, cap, prefix, prefix_len);
	if (!rc)
		rc = sse_append_raw(buf, len, cap, s, strlen(s));
	if (!rc)
		rc = sse_append_raw(buf, len, cap, "\n\n", 2);
	free(s);
	return rc;
}

int sse_append_event(char **buf, size_t *len, size_t *cap, const char *event, cJSON *obj)
{
	char prefix[128];
	int n = snprintf(prefix, sizeof(prefix), "event: %s\ndata: ", event);
	if (n < 0 || (size_t)n >= sizeof(prefix)) {
		cJSON_Delete(obj);
		return -EINVAL;
	}
	return sse_append_json(buf, len, cap, prefix, (size_t)n, obj);
}

int sse_append(char **buf, size_t *len, size_t *cap, cJSON *obj)
{
	if (!obj)
		return sse_append_raw(buf, len, cap, "data: [DONE]\n\n", 14);
	return sse_append_json(buf, len, cap, "data: ", 6, obj);
}
