/* The request parser (src/server/request.c) against hostile bodies: strict
 * JSON (trailing bytes, leading zeros, huge numbers, deep nesting, invalid
 * UTF-8, raw control characters), NUL bytes carried as text, every known
 * field of every endpoint with every wrong type (a table), and arrays of
 * 160,000 token ids parsed in linear time. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/request.h"
#include "testutil.h"

enum parser { P_CMPL, P_CHAT, P_SESSION, P_APPEND, P_TOKENIZE, P_DETOKENIZE };

/* Runs one parser on body and frees what it returned: 0 or -EINVAL. */
static int run(enum parser p, const char *body, size_t len, struct api_error *e)
{
	struct gen_args g;
	struct append_args a;
	struct session_create_args c;
	struct tokenize_args t;
	int32_t *ids = NULL;
	size_t n = 0;
	int rc = -1;
	switch (p) {
	case P_CMPL:
	case P_CHAT:
		rc = gen_args_parse(body, len, p == P_CHAT, 256, &g, e);
		if (!rc)
			gen_args_deinit(&g);
		break;
	case P_SESSION:
		rc = session_create_args_parse(body, len, &c, e);
		break;
	case P_APPEND:
		rc = append_args_parse(body, len, 256, &a, e);
		if (!rc)
			append_args_deinit(&a);
		break;
	case P_TOKENIZE:
		rc = tokenize_args_parse(body, len, &t, e);
		if (!rc)
			free(t.content);
		break;
	case P_DETOKENIZE:
		rc = detokenize_args_parse(body, len, &ids, &n, e);
		free(ids);
		break;
	}
	return rc;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- strict JSON ---------------------------------------------------------- */

static const struct {
	const char *body;
	const char *param; /* "" for none */
	const char *code;
	const char *says; /* part of the message */
	size_t len;       /* 0: strlen(body) */
} json_cases[] = {
    {"{\"prompt\":\"x\"} x", "", "invalid_json", "after the JSON value"},
    {"{\"prompt\":\"x\"}{}", "", "invalid_json", "after the JSON value"},
    {"{\"prompt\":\"x\"}\0", "", "invalid_json", "after the JSON value", 15},
    {"{\"prompt\":\"x\",\"max_tokens\":01}", "max_tokens", "invalid_json", "leading zero"},
    {"{\"prompt\":\"x\",\"max_tokens\":-01}", "max_tokens", "invalid_json", "leading zero"},
    {"{\"prompt\":\"x\",\"top_k\":00}", "top_k", "invalid_json", "leading zero"},
    {"{\"prompt\":\"x\",\"temperature\":1.}", "temperature", "invalid_json", "decimal point"},
    {"{\"prompt\":\"x\",\"temperature\":.5}", "temperature", "invalid_json", "expected a value"},
    {"{\"prompt\":\"x\",\"temperature\":+1}", "temperature", "invalid_json", "expected a value"},
    {"{\"prompt\":\"x\",\"temperature\":1e}", "temperature", "invalid_json", "exponent"},
    {"{\"prompt\":\"x\",\"temperature\":0x1}", "temperature", "invalid_json", "invalid character"},
    {"{\"prompt\":\"x\",\"temperature\":NaN}", "temperature", "invalid_json", "expected a value"},
    {"{\"prompt\":\"x\",\"temperature\":Infinity}", "temperature", "invalid_json",
     "expected a value"},
    {"{\"prompt\":\"x\",\"temperature\":0.00000000000000000000000000000000000000000000000000000"
     "0000000001}",
     "temperature", "invalid_json", "longer than 63"},
    {"{\"prompt\":\"x\",\"max_tokens\":1e400}", "max_tokens", "invalid_value", "max_tokens"},
    {"{\"prompt\":\"x\",\"temperature\":-1e400}", "temperature", "invalid_value", "temperature"},
    {"{\"prompt\":\"x\",\"max_tokens\":1e20}", "max_tokens", "invalid_value", "between"},
    {"{\"prompt\":\"x\",\"seed\":1e20}", "seed", "invalid_value", "between"},
    {"{\"prompt\":\"x\",\"seed\":1e400}", "seed", "invalid_value", "between"},
    {"{\"prompt\":[1e20]}", "prompt", "invalid_type", "token id"},
    {"{\"prompt\":\"x\",\"max_tokens\":-0}", "max_tokens", "invalid_value", "between"},
    {"\xef\xbb\xbf{\"prompt\":\"x\"}", "", "invalid_json", "byte 0"},
    {"{\"prompt\":\"x\",}", "", "invalid_json", "string key"},
    {"{\"prompt\":[1,]}", "prompt", "invalid_json", "expected a value"},
    {"{\"prompt\" \"x\"}", "", "invalid_json", "':'"},
    {"{prompt:\"x\"}", "", "invalid_json", "string key"},
    {"{'prompt':'x'}", "", "invalid_json", "string key"},
    {"{\"prompt\":tru}", "prompt", "invalid_json", "expected a value"},
    {"{\"prompt\":\"x\",\"stream\":truex}", "stream", "invalid_json", "expected a value"},
    {"{\"prompt\":\"x\",\"max_tokens\":1.5.2}", "max_tokens", "invalid_json", "invalid character"},
    {"{\"prompt\":\"x", "prompt", "invalid_json", "unterminated"},
    {"{\"prompt\":\"x\"", "", "invalid_json", "expected ','"},
    {"{\"stop\":[\"a\" \"b\"],\"prompt\":\"x\"}", "stop", "invalid_json", "expected ','"},
    {"{\"prompt\":\"x\",\"prompt\":\"y\"}", "prompt", "duplicate_field", "more than once"},
    {"{\"prompt\":\"x\",\"stream\":true,\"stream\":false}", "stream", "duplicate_field",
     "more than once"},
    {"{\"prompt\":\"a\\x\"}", "prompt", "invalid_json", "escape"},
    {"{\"prompt\":\"a\\u12\"}", "prompt", "invalid_json", "4 hex digits"},
    {"{\"prompt\":\"a\\uD800\"}", "prompt", "invalid_json", "surrogate"},
    {"{\"prompt\":\"a\\uDC00\\uD800\"}", "prompt", "invalid_json", "surrogate"},
    {"{\"prompt\":\"a\\uD800\\u0041\"}", "prompt", "invalid_json", "surrogate"},
    {"{\"prompt\":\"a\nb\"}", "prompt", "invalid_json", "control character 0x0A"},
    {"{\"prompt\":\"a\tb\"}", "prompt", "invalid_json", "control character 0x09"},
    {"{\"prompt\":\"\xc3\x28\"}", "prompt", "invalid_json", "invalid UTF-8"},
    {"{\"prompt\":\"\xc0\xaf\"}", "prompt", "invalid_json", "invalid UTF-8"},     /* overlong */
    {"{\"prompt\":\"\xe0\x80\xaf\"}", "prompt", "invalid_json", "invalid UTF-8"}, /* overlong */
    {"{\"prompt\":\"\xed\xa0\x80\"}", "prompt", "invalid_json", "invalid UTF-8"}, /* surrogate */
    {"{\"prompt\":\"\xf4\x90\x80\x80\"}", "prompt", "invalid_json",
     "invalid UTF-8"}, /* > U+10FFFF */
    {"{\"prompt\":\"\xff\"}", "prompt", "invalid_json", "invalid UTF-8"},
    {"{\"prompt\":\"\xe2\x82\"}", "prompt", "invalid_json", "invalid UTF-8"},   /* cut short */
    {"{\"\xc3\x28\":1,\"prompt\":\"x\"}", "", "invalid_json", "invalid UTF-8"}, /* in a key */
    {"{\"stop\":[\"a\",\"\xc3\x28\"],\"prompt\":\"x\"}", "stop", "invalid_json", "'stop[1]'"},
    {"{\"stream_options\":{\"include_usage\":01},\"prompt\":\"x\"}", "stream_options.include_usage",
     "invalid_json", "leading zero"},
};

START_TEST(test_strict_json)
{
	for (size_t i = 0; i < sizeof(json_cases) / sizeof(json_cases[0]); i++) {
		const char *b = json_cases[i].body;
		size_t len = json_cases[i].len ? json_cases[i].len : strlen(b);
		struct api_error e;
		ck_assert_msg(run(P_CMPL, b, len, &e) == -EINVAL, "case %zu accepted", i);
		ck_assert_int_eq(e.status, 400);
		ck_assert_msg(!strcmp(e.param, json_cases[i].param), "case %zu: param '%s'", i,
		              e.param);
		ck_assert_msg(!strcmp(e.code, json_cases[i].code), "case %zu: code %s", i, e.code);
		ck_assert_msg(strstr(e.message, json_cases[i].says), "case %zu: %s", i, e.message);
	}
	/* whitespace around the value is fine; valid escapes and a surrogate pair decode */
	const char *ok =
	    " \t\r\n{\"prompt\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\\uDE00\xc3\xa9\"}"
	    " \n";
	struct gen_args a;
	struct api_error e;
	ck_assert_int_eq(gen_args_parse(ok, strlen(ok), false, 16, &a, &e), 0);
	ck_assert_str_eq(a.prompt, "\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9");
	gen_args_deinit(&a);
	/* -0 is zero; 1.5e1 is an integer */
	ok = "{\"prompt\":\"x\",\"top_k\":-0,\"max_tokens\":1.5e1,\"temperature\":-0.0}";
	ck_assert_int_eq(gen_args_parse(ok, strlen(ok), false, 16, &a, &e), 0);
	ck_assert_int_eq(a.sampling.top_k, 0);
	ck_assert_int_eq(a.max_tokens, 15);
	gen_args_deinit(&a);
}
END_TEST

/* depth levels of arrays as the value of "x" (or the body itself). */
static char *nested(size_t depth, bool in_field)
{
	char *b = malloc(2 * depth + 32), *w = b;
	if (in_field)
		w += sprintf(w, "{\"prompt\":\"x\",\"x\":");
	for (size_t i = 0; i < depth; i++)
		*w++ = '[';
	for (size_t i = 0; i < depth; i++)
		*w++ = ']';
	if (in_field)
		*w++ = '}';
	*w = '\0';
	return b;
}

START_TEST(test_deep_nesting)
{
	struct api_error e;
	/* 100,000 levels: a clear 400 at once, no recursion */
	char *b = nested(100000, false);
	double t0 = now_s();
	ck_assert_int_eq(run(P_CMPL, b, strlen(b), &e), -EINVAL);
	ck_assert_double_lt(now_s() - t0, 0.5);
	ck_assert_str_eq(e.code, "invalid_json");
	ck_assert_msg(strstr(e.message, "nested deeper than 64 levels at byte 64"), "%s",
	              e.message);
	free(b);
	b = nested(100000, true);
	ck_assert_int_eq(run(P_CMPL, b, strlen(b), &e), -EINVAL);
	ck_assert_str_eq(e.param, "x");
	free(b);
	/* the root object and 63 arrays are 64 levels: fine; one more is not */
	b = nested(REQUEST_MAX_DEPTH - 1, true);
	ck_assert_int_eq(run(P_CMPL, b, strlen(b), &e), 0);
	free(b);
	b = nested(REQUEST_MAX_DEPTH, true);
	ck_assert_int_eq(run(P_CMPL, b, strlen(b), &e), -EINVAL);
	free(b);
}
END_TEST

/* ---- NUL bytes -------------------------------------------------------------- */

#define ONCE "Once\\u0000 upon a time"
static const char once[] = "Once\0 upon a time"; /* 17 bytes */

START_TEST(test_nul_is_text)
{
	struct gen_args a;
	struct api_error e;
	const char *b = "{\"prompt\":\"" ONCE "\"}";
	ck_assert_int_eq(gen_args_parse(b, strlen(b), false, 16, &a, &e), 0);
	ck_assert_uint_eq(a.prompt_len, 17);
	ck_assert_mem_eq(a.prompt, once, 17);
	gen_args_deinit(&a);
	b = "{\"prompt\":[\"" ONCE "\"]}";
	ck_assert_int_eq(gen_args_parse(b, strlen(b), false, 16, &a, &e), 0);
	ck_assert_uint_eq(a.prompt_len, 17);
	ck_assert_mem_eq(a.prompt, once, 17);
	gen_args_deinit(&a);
	/* an escaped backslash before u0000 is six characters of text */
	b = "{\"prompt\":\"a\\\\u0000b\"}";
	ck_assert_int_eq(gen_args_parse(b, strlen(b), false, 16, &a, &e), 0);
	ck_assert_str_eq(a.prompt, "a\\u0000b");
	gen_args_deinit(&a);
	b = "{\"messages\":[{\"role\":\"user\",\"content\":\"" ONCE "\"},{\"role\":\"user\","
	    "\"content\":[{\"type\":\"text\",\"text\":\"\\u0000a\"},{\"type\":\"text\","
	    "\"text\":\"b\\u0000\"}]}]}";
	ck_assert_int_eq(gen_args_parse(b, strlen(b), true, 16, &a, &e), 0);
	ck_assert_uint_eq(a.messages[0].content_len, 17);
	ck_assert_mem_eq(a.messages[0].content, once, 17);
	ck_assert_uint_eq(a.messages[1].content_len, 4);
	ck_assert_mem_eq(a.messages[1].content, "\0ab\0", 4);
	gen_args_deinit(&a);

	struct tokenize_args t;
	b = "{\"content\":\"" ONCE "\"}";
	ck_assert_int_eq(tokenize_args_parse(b, strlen(b), &t, &e), 0);
	ck_assert_uint_eq(t.content_len, 17);
	ck_assert_mem_eq(t.content, once, 17);
	free(t.content);
	struct append_args ap;
	b = "{\"text\":\"" ONCE "\"}";
	ck_assert_int_eq(append_args_parse(b, strlen(b), 16, &ap, &e), 0);
	ck_assert_uint_eq(ap.text_len, 17);
	ck_assert_mem_eq(ap.text, once, 17);
	append_args_deinit(&ap);
}
END_TEST

/* Names are C strings downstream: a NUL in one is refused, never cut. */
START_TEST(test_nul_in_names)
{
	static const struct {
		enum parser p;
		const char *body;
		const char *param;
	} cases[] = {
	    {P_CMPL, "{\"prompt\":\"x\",\"model\":\"stories260K\\u0000x\"}", "model"},
	    {P_CMPL, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\\u0000\"]}", "stop"},
	    {P_CMPL, "{\"prompt\":\"x\",\"stop\":\"\\u0000\"}", "stop"},
	    {P_CMPL, "{\"prompt\":\"x\",\"session_id\":\"ab\\u0000cd\"}", "session_id"},
	    {P_CHAT, "{\"messages\":[{\"role\":\"user\\u0000\",\"content\":\"x\"}]}", "messages"},
	    {P_CHAT,
	     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\\u0000\",\"text\":"
	     "\"x\"}]}]}",
	     "messages"},
	    {P_APPEND, "{\"text\":\"x\",\"generate\":{\"stop\":\"a\\u0000\"}}", "generate.stop"},
	    /* a key with a NUL is another key: "prompt" stays missing */
	    {P_CMPL, "{\"prompt\\u0000\":\"x\"}", "prompt"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct api_error e;
		ck_assert_msg(run(cases[i].p, cases[i].body, strlen(cases[i].body), &e) == -EINVAL,
		              "case %zu accepted", i);
		ck_assert_msg(!strcmp(e.param, cases[i].param), "case %zu: param '%s'", i, e.param);
	}
	/* a raw NUL byte in a string is a raw control character */
	static const char raw[] = "{\"prompt\":\"a\0b\"}";
	struct api_error e;
	ck_assert_int_eq(run(P_CMPL, raw, sizeof(raw) - 1, &e), -EINVAL);
	ck_assert_str_eq(e.param, "prompt");
	ck_assert_ptr_nonnull(strstr(e.message, "control character 0x00"));
}
END_TEST

/* ---- every field, every wrong type ------------------------------------------- */

enum kind { K_STR = 1, K_INT = 2, K_FRAC = 4, K_BOOL = 8, K_NULL = 16, K_ARR = 32, K_OBJ = 64 };
#define K_NUM (K_INT | K_FRAC)

static const struct {
	const char *json;
	unsigned kind;
} samples[] = {
    {"\"x\"", K_STR}, {"1", K_INT},  {"1.5", K_FRAC}, {"true", K_BOOL},
    {"null", K_NULL}, {"[]", K_ARR}, {"{}", K_OBJ},
};

struct field_case {
	enum parser p;
	const char *fmt; /* the body, %s where the value goes */
	unsigned accepts;
	const char *param;
};

#define CMPL_BASE "{\"prompt\":\"x\","
#define CHAT_BASE "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
#define APPEND_BASE "{\"text\":\"x\",\"generate\":{"
/* The fields completions, chat and a session append's "generate" share. */
/* clang-format off */
#define COMMON(P, BASE, END, PRE) \
	{P, BASE "\"model\":%s" END, K_STR | K_NULL, PRE "model"}, \
	{P, BASE "\"stream\":%s" END, K_BOOL | K_NULL, PRE "stream"}, \
	{P, BASE "\"stream_options\":%s" END, K_OBJ | K_NULL, PRE "stream_options"}, \
	{P, BASE "\"stream_options\":{\"include_usage\":%s}" END, K_BOOL | K_NULL, \
	 PRE "stream_options.include_usage"}, \
	{P, BASE "\"n\":%s" END, K_INT | K_NULL, PRE "n"}, \
	{P, BASE "\"max_tokens\":%s" END, K_INT | K_NULL, PRE "max_tokens"}, \
	{P, BASE "\"temperature\":%s" END, K_NUM | K_NULL, PRE "temperature"}, \
	{P, BASE "\"top_p\":%s" END, K_NUM | K_NULL, PRE "top_p"}, \
	{P, BASE "\"top_k\":%s" END, K_INT | K_NULL, PRE "top_k"}, \
	{P, BASE "\"min_p\":%s" END, K_NUM | K_NULL, PRE "min_p"}, \
	{P, BASE "\"repeat_penalty\":%s" END, K_NUM | K_NULL, PRE "repeat_penalty"}, \
	{P, BASE "\"presence_penalty\":%s" END, K_NUM | K_NULL, PRE "presence_penalty"}, \
	{P, BASE "\"frequency_penalty\":%s" END, K_NUM | K_NULL, PRE "frequency_penalty"}, \
	{P, BASE "\"seed\":%s" END, K_INT | K_NULL, PRE "seed"}, \
	{P, BASE "\"stop\":%s" END, K_STR | K_ARR | K_NULL, PRE "stop"}, \
	{P, BASE "\"stop\":[%s]" END, K_STR, PRE "stop"}, \
	{P, BASE "\"ignore_eos\":%s" END, K_BOOL | K_NULL, PRE "ignore_eos"}
/* clang-format on */

static const struct field_case field_cases[] = {
    COMMON(P_CMPL, CMPL_BASE, "}", ""),
    {P_CMPL, CMPL_BASE "\"session_id\":%s}", K_STR | K_NULL, "session_id"},
    {P_CMPL, CMPL_BASE "\"logprobs\":%s}", K_INT | K_NULL, "logprobs"},
    {P_CMPL, "{\"prompt\":%s}", K_STR, "prompt"},
    {P_CMPL, "{\"prompt\":[%s]}", K_STR | K_INT | K_ARR, "prompt"},
    {P_CMPL, "{\"prompt\":[1,%s]}", K_INT, "prompt"},
    {P_CMPL, "{\"prompt\":[[%s]]}", K_INT, "prompt"},
    COMMON(P_CHAT, CHAT_BASE, "}", ""),
    {P_CHAT, CHAT_BASE "\"session_id\":%s}", K_STR | K_NULL, "session_id"},
    {P_CHAT, CHAT_BASE "\"max_completion_tokens\":%s}", K_INT | K_NULL, "max_completion_tokens"},
    {P_CHAT, CHAT_BASE "\"logprobs\":%s}", K_BOOL | K_NULL, "logprobs"},
    {P_CHAT, CHAT_BASE "\"logprobs\":true,\"top_logprobs\":%s}", K_INT | K_NULL, "top_logprobs"},
    {P_CHAT, "{\"messages\":%s}", 0, "messages"},
    {P_CHAT, "{\"messages\":[%s]}", 0, "messages"},
    {P_CHAT, "{\"messages\":[{\"role\":%s,\"content\":\"x\"}]}", 0, "messages"},
    {P_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":%s}]}", K_STR | K_ARR | K_NULL,
     "messages"},
    {P_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[%s]}]}", 0, "messages"},
    {P_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":%s,\"text\":\"x\"}]}]}", 0,
     "messages"},
    {P_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":%s}]}]}",
     K_STR, "messages"},
    {P_CHAT, CHAT_BASE "\"response_format\":%s}", K_OBJ | K_NULL, "response_format"},
    {P_CHAT, CHAT_BASE "\"response_format\":{\"type\":%s}}", K_STR, "response_format.type"},
    {P_CHAT, CHAT_BASE "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":%s}}", K_OBJ,
     "response_format.json_schema"},
    {P_CHAT, CHAT_BASE "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":%s}}}",
     K_OBJ | K_NULL, "response_format.json_schema.schema"},
    {P_CHAT, CHAT_BASE "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"strict\":%s}}}",
     K_BOOL | K_NULL, "response_format.json_schema.strict"},
    {P_CMPL, CMPL_BASE "\"logit_bias\":%s}", K_OBJ | K_NULL, "logit_bias"},
    {P_CMPL, CMPL_BASE "\"logit_bias\":{\"1\":%s}}", K_NUM, "logit_bias"},
    {P_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":%s}]}", K_STR | K_NULL,
     "messages"},
    {P_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":%s}]}", K_ARR | K_NULL,
     "messages"},
    {P_CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\",\"tool_call_id\":%s}]}", K_STR,
     "messages"},
    {P_SESSION, "{\"window_size\":%s}", K_INT | K_NULL, "window_size"},
    {P_SESSION, "{\"sink_keep_count\":%s}", K_INT | K_NULL, "sink_keep_count"},
    {P_APPEND, "{\"generate\":{},\"text\":%s}", K_STR | K_NULL, "text"},
    {P_APPEND, "{\"text\":\"x\",\"revise_last_tokens\":%s}", K_INT | K_NULL, "revise_last_tokens"},
    {P_APPEND, "{\"text\":\"x\",\"generate\":%s}", K_OBJ | K_NULL, "generate"},
    COMMON(P_APPEND, APPEND_BASE, "}}", "generate."),
    {P_APPEND, APPEND_BASE "\"logprobs\":%s}}", K_INT | K_NULL, "generate.logprobs"},
    {P_TOKENIZE, "{\"content\":%s}", K_STR, "content"},
    {P_TOKENIZE, "{\"content\":\"x\",\"add_special\":%s}", K_BOOL | K_NULL, "add_special"},
    {P_TOKENIZE, "{\"content\":\"x\",\"parse_special\":%s}", K_BOOL | K_NULL, "parse_special"},
    {P_DETOKENIZE, "{\"tokens\":%s}", K_ARR, "tokens"},
    {P_DETOKENIZE, "{\"tokens\":[%s]}", K_INT, "tokens"},
    {P_DETOKENIZE, "{\"tokens\":[1,%s]}", K_INT, "tokens"},
};

/* A wrong type is a 400 naming the field; a right one is never called a
 * wrong type (it may still be out of range). */
START_TEST(test_wrong_types)
{
	size_t n_wrong = 0;
	for (size_t i = 0; i < sizeof(field_cases) / sizeof(field_cases[0]); i++) {
		const struct field_case *c = &field_cases[i];
		for (size_t k = 0; k < sizeof(samples) / sizeof(samples[0]); k++) {
			char body[512];
			struct api_error e;
			snprintf(body, sizeof(body), c->fmt, samples[k].json);
			int rc = run(c->p, body, strlen(body), &e);
			if (samples[k].kind & c->accepts) {
				ck_assert_msg(rc == 0 || strcmp(e.code, "invalid_type"),
				              "%s: called a wrong type: %s", body, e.message);
				continue;
			}
			n_wrong++;
			ck_assert_msg(rc == -EINVAL, "%s: accepted", body);
			ck_assert_int_eq(e.status, 400);
			ck_assert_msg(!strcmp(e.param, c->param), "%s: param '%s', want '%s'", body,
			              e.param, c->param);
			/* under "generate" the message names the inner field */
			const char *leaf =
			    strncmp(c->param, "generate.", 9) ? c->param : c->param + 9;
			ck_assert_msg(strstr(e.message, leaf), "%s: message '%s' does not name %s",
			              body, e.message, leaf);
		}
	}
	ck_assert_uint_gt(n_wrong, 300);
}
END_TEST

/* ---- structured output, logit_bias, refused fields ------------------------------ */

START_TEST(test_structured_fields)
{
	struct gen_args a;
	struct api_error e;
	const char *js = CHAT_BASE "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
	                           "{\"name\":\"trip\",\"strict\":true,\"schema\":{\"type\":\"object\"}}}}";
	ck_assert_int_eq(gen_args_parse(js, strlen(js), true, 64, &a, &e), 0);
	ck_assert_int_eq(a.response_format, RESPONSE_FORMAT_JSON_SCHEMA);
	ck_assert_str_eq(a.response_schema_name, "trip");
	ck_assert(a.response_strict);
	ck_assert_str_eq(cJSON_GetObjectItem(a.response_schema, "type")->valuestring, "object");
	gen_args_deinit(&a);
	const char *jo = CMPL_BASE "\"response_format\":{\"type\":\"json_object\"}}";
	ck_assert_int_eq(gen_args_parse(jo, strlen(jo), false, 64, &a, &e), 0);
	ck_assert_int_eq(a.response_format, RESPONSE_FORMAT_JSON_OBJECT);
	ck_assert_ptr_null(a.response_schema);
	gen_args_deinit(&a);

	const char *lb = CMPL_BASE "\"logit_bias\":{\"5\":-100,\"7\":3.5}}";
	ck_assert_int_eq(gen_args_parse(lb, strlen(lb), false, 64, &a, &e), 0);
	ck_assert_uint_eq(a.n_logit_bias, 2);
	ck_assert_int_eq(a.logit_bias[0].token, 5);
	ck_assert(a.logit_bias[0].bias == -100.0f);
	ck_assert_int_eq(a.logit_bias[1].token, 7);
	ck_assert(a.logit_bias[1].bias == 3.5f);
	gen_args_deinit(&a);

	const char *calls = "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},"
	                    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\","
	                    "\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"a\\\":1}\"}},"
	                    "{\"id\":\"call_2\",\"function\":{\"name\":\"put\"}}]},"
	                    "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"ok\"}]}";
	ck_assert_int_eq(gen_args_parse(calls, strlen(calls), true, 64, &a, &e), 0);
	ck_assert_uint_eq(a.n_messages, 3);
	ck_assert_str_eq(a.messages[1].content, "");
	cJSON *c0 = cJSON_GetArrayItem(a.messages[1].tool_calls, 0);
	cJSON *c1 = cJSON_GetArrayItem(a.messages[1].tool_calls, 1);
	ck_assert_str_eq(cJSON_GetObjectItem(c0, "id")->valuestring, "call_1");
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "function"), "arguments")->valuestring,
	                 "{\"a\":1}");
	ck_assert_str_eq(cJSON_GetObjectItem(c1, "type")->valuestring, "function");
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(c1, "function"), "arguments")->valuestring,
	                 "{}");
	ck_assert_str_eq(a.messages[2].tool_call_id, "call_1");
	gen_args_deinit(&a);

	static const struct {
		enum parser p;
		const char *body;
		const char *param;
	} bad[] = {
	    {P_CMPL, CMPL_BASE "\"echo\":true}", "echo"},
	    {P_CMPL, CMPL_BASE "\"suffix\":\"end\"}", "suffix"},
	    {P_CMPL, CMPL_BASE "\"best_of\":2}", "best_of"},
	    {P_CMPL, CMPL_BASE "\"n\":2}", "n"},
	    {P_CHAT, CHAT_BASE "\"functions\":[]}", "functions"},
	    {P_CHAT, CHAT_BASE "\"function_call\":\"auto\"}", "function_call"},
	    {P_CHAT, CHAT_BASE "\"modalities\":[\"text\",\"audio\"]}", "modalities"},
	    {P_CHAT, CHAT_BASE "\"audio\":{}}", "audio"},
	    {P_CMPL, CMPL_BASE "\"reasoning_effort\":\"low\"}", "reasoning_effort"},
	    {P_CHAT, CHAT_BASE "\"reasoning_effort\":\"extreme\"}", "reasoning_effort"},
	    {P_CHAT, CHAT_BASE "\"reasoning_effort\":1}", "reasoning_effort"},
	    {P_CHAT, CHAT_BASE "\"chat_template_kwargs\":[]}", "chat_template_kwargs"},
	    {P_CHAT, CHAT_BASE "\"chat_template_kwargs\":\"x\"}", "chat_template_kwargs"},
	    {P_CHAT, CHAT_BASE "\"chat_template_kwargs\":{\"messages\":[]}}", "chat_template_kwargs"},
	    {P_CMPL, CMPL_BASE "\"chat_template_kwargs\":{}}", "chat_template_kwargs"},
	    {P_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"reasoning_content\":\"r\"}]}", "messages"},
	    {P_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\",\"reasoning_content\":1}]}", "messages"},
	    {P_CMPL, CMPL_BASE "\"tools\":[]}", "tools"},
	    {P_CMPL, CMPL_BASE "\"logit_bias\":{\"-1\":1}}", "logit_bias"},
	    {P_CMPL, CMPL_BASE "\"logit_bias\":{\"x\":1}}", "logit_bias"},
	    {P_CMPL, CMPL_BASE "\"logit_bias\":{\"1\":100.5}}", "logit_bias"},
	    {P_CMPL, CMPL_BASE "\"response_format\":{\"type\":\"yaml\"}}", "response_format.type"},
	    {P_CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "messages"},
	    {P_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_call_id\":\"c\"}]}", "messages"},
	    {P_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}", "messages"},
	    {P_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\"}]}]}", "messages"},
	    {P_CHAT, CHAT_BASE "\"reasoning_format\":\"raw\"}", "reasoning_format"},
	    {P_CHAT, CHAT_BASE "\"reasoning_format\":true}", "reasoning_format"},
	    {P_CHAT, CHAT_BASE "\"structured_outputs\":\"a+\"}", "structured_outputs"},
	    {P_CHAT, CHAT_BASE "\"structured_outputs\":{\"json\":{}}}", "structured_outputs"},
	    {P_CHAT, CHAT_BASE "\"structured_outputs\":{\"regex\":5}}", "structured_outputs.regex"},
	    {P_CMPL, CMPL_BASE "\"guided_regex\":[\"a\"]}", "guided_regex"},
	    {P_CHAT, CHAT_BASE "\"structured_outputs\":{\"choice\":[]}}", "structured_outputs.choice"},
	    {P_CHAT, CHAT_BASE "\"structured_outputs\":{\"choice\":[1]}}", "structured_outputs.choice"},
	    {P_CHAT, CHAT_BASE "\"structured_outputs\":{\"regex\":\"a\",\"choice\":[\"b\"]}}",
	     "structured_outputs"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(run(bad[i].p, bad[i].body, strlen(bad[i].body), &e) == -EINVAL,
		              "%s: accepted", bad[i].body);
		ck_assert_int_eq(e.status, 400);
		ck_assert_msg(!strcmp(e.param, bad[i].param), "%s: param '%s'", bad[i].body, e.param);
	}
	/* reasoning_format and a regex (structured_outputs first, else guided_regex) */
	const char *rf = CHAT_BASE "\"reasoning_format\":\"none\",\"structured_outputs\":"
	                           "{\"regex\":\"a|b\"},\"guided_regex\":\"c\"}";
	ck_assert_int_eq(gen_args_parse(rf, strlen(rf), true, 64, &a, &e), 0);
	ck_assert(a.reasoning_in_content);
	ck_assert_str_eq(a.regex, "a|b");
	ck_assert_str_eq(a.regex_param, "structured_outputs.regex");
	gen_args_deinit(&a);
	const char *gr = CMPL_BASE "\"guided_regex\":\"[0-9]+\",\"reasoning_format\":\"auto\"}";
	ck_assert_int_eq(gen_args_parse(gr, strlen(gr), false, 64, &a, &e), 0);
	ck_assert(!a.reasoning_in_content);
	ck_assert_str_eq(a.regex, "[0-9]+");
	ck_assert_str_eq(a.regex_param, "guided_regex");
	gen_args_deinit(&a);
	const char *ch = CHAT_BASE "\"structured_outputs\":{\"choice\":[\"yes\",\"a.b|c\"]}}";
	ck_assert_int_eq(gen_args_parse(ch, strlen(ch), true, 64, &a, &e), 0);
	ck_assert_str_eq(a.regex, "(?:yes|a\\.b\\|c)");
	ck_assert_str_eq(a.regex_param, "structured_outputs.choice");
	gen_args_deinit(&a);
	/* what asks for the default is fine */
	static const char *const fine[] = {
	    CMPL_BASE "\"echo\":false,\"best_of\":1,\"suffix\":\"\",\"n\":1}",
	    CHAT_BASE "\"modalities\":[\"text\"],\"user\":\"u\",\"metadata\":{},\"store\":false}",
	};
	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++)
		ck_assert_msg(run(i ? P_CHAT : P_CMPL, fine[i], strlen(fine[i]), &e) == 0, "%s: %s",
		              fine[i], e.message);
}
END_TEST

/* ---- linear time ------------------------------------------------------------- */

/* {"<key>":[1,1,...]} with n >= 1 ids (and max_tokens in a completion). */
static char *ids_body(const char *key, size_t n, bool completion)
{
	char *b = malloc(2 * n + 64), *w = b;
	w += sprintf(w, "{%s\"%s\":[1", completion ? "\"max_tokens\":1," : "", key);
	for (size_t i = 1; i < n; i++) {
		*w++ = ',';
		*w++ = '1';
	}
	strcpy(w, "]}");
	return b;
}

/* 160,000 ids took 90 s when every id was looked up from the array's head. */
START_TEST(test_ids_linear)
{
	struct api_error e;
	char *b = ids_body("tokens", 160000, false);
	int32_t *ids = NULL;
	size_t n = 0;
	double t0 = now_s();
	ck_assert_int_eq(detokenize_args_parse(b, strlen(b), &ids, &n, &e), 0);
	double dt = now_s() - t0;
	ck_assert_uint_eq(n, 160000);
	ck_assert_int_eq(ids[159999], 1);
	free(ids);
	free(b);
	b = ids_body("prompt", 160000, true);
	struct gen_args a;
	t0 = now_s();
	ck_assert_int_eq(gen_args_parse(b, strlen(b), false, 16, &a, &e), 0);
	dt += now_s() - t0;
	ck_assert_uint_eq(a.n_prompt_ids, 160000);
	gen_args_deinit(&a);
	free(b);
	printf("160,000 ids: detokenize + completion bodies parsed in %.3f s\n", dt);
	ck_assert_double_lt(dt, 2.0);
	/* 20,000 chat messages and 100 stop strings walk once too */
	size_t n_msg = 20000;
	b = malloc(n_msg * 40 + 64);
	char *w = b + sprintf(b, "{\"messages\":[");
	for (size_t i = 0; i < n_msg; i++)
		w += sprintf(w, "%s{\"role\":\"user\",\"content\":\"x\"}", i ? "," : "");
	strcpy(w, "]}");
	t0 = now_s();
	ck_assert_int_eq(gen_args_parse(b, strlen(b), true, 16, &a, &e), 0);
	ck_assert_double_lt(now_s() - t0, 1.0);
	ck_assert_uint_eq(a.n_messages, n_msg);
	gen_args_deinit(&a);
	free(b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("request");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_strict_json);
	tcase_add_test(tc, test_deep_nesting);
	tcase_add_test(tc, test_nul_is_text);
	tcase_add_test(tc, test_nul_in_names);
	tcase_add_test(tc, test_wrong_types);
	tcase_add_test(tc, test_ids_linear);
	tcase_add_test(tc, test_structured_fields);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
