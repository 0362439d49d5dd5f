/* OpenAI request parsing: strict JSON first (one linear pass), then type
 * and range checks that name the field (400), defaults as OpenAI documents
 * them, unknown fields ignored, every array walked once.  It does not
 * tokenize, render chat templates or check the model name (api.c does). */
#include "server/request.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/stopstr.h"
#include "grammar/grammar.h"
#include "server/openai.h"
#include "server/tools.h"
#include "session/session_key.h"
#include "util/errbuf.h"
#include "util/utf8.h"

#define COMPLETIONS_DEFAULT_MAX_TOKENS 16
#define JSON_MAX_NUMBER_LEN 63 /* cJSON reads at most 63 characters of a number */
#define NUL_STANDIN REQUEST_NUL_STANDIN

static int fail(struct api_error *e, const char *param, const char *code, const char *fmt, ...)
    SINKD_PRINTF(4, 5);
static int fail(struct api_error *e, const char *param, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = request_vfail(e, param, code, fmt, ap);
	va_end(ap);
	return rc;
}

/* Out of memory is the server's fault, not the request's: a 500 (as
 * respond.h maps -ENOMEM), still naming the field being read. */
static int fail_oom(struct api_error *e, const char *param, const char *what)
{
	int rc = fail(e, param, "out_of_memory", "%s", what);
	e->status = 500;
	return rc;
}

/* ---- strict JSON ------------------------------------------------------ */

/* cJSON accepts what RFC 8259 forbids (leading zeros, bytes after the value,
 * raw control characters, invalid UTF-8) and keeps its strings
 * NUL-terminated, so a "\u0000" would silently cut a prompt.  One pass with
 * an explicit stack (no recursion, linear in the body) checks the body
 * first, and a second one, only when the body has a "\u0000", swaps each
 * for NUL_STANDIN, which text fields turn back into NUL (dup_text). */

struct json_frame {
	bool object;
	const char *key; /* object: the current member's raw key; NULL while it is read */
	size_t key_len;
	size_t index; /* array: the current element */
};

struct json_scan {
	const char *body, *p, *end;
	struct json_frame st[REQUEST_MAX_DEPTH];
	int depth;
	size_t n_nul;       /* "\u0000" escapes seen */
	char *out;          /* the body with stand-ins (NULL: check only) */
	size_t out_len;     /* bytes of out written */
	const char *copied; /* the body before this is in out */
	struct api_error *e;
};

enum json_state { JSON_VALUE, JSON_KEY, JSON_AFTER };

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_alnum(char c)
{
	return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

/* Keys quoted in errors are client text: only plain identifiers are. */
static bool plain_key(const char *k, size_t n)
{
	if (!k || n == 0 || n > 40)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!is_alnum(k[i]) && k[i] != '_')
			return false;
	return true;
}

static void buf_add(char *buf, size_t cap, size_t *n, const char *fmt, ...) SINKD_PRINTF(4, 5);
static void buf_add(char *buf, size_t cap, size_t *n, const char *fmt, ...)
{
	if (*n >= cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	int w = vsnprintf(buf + *n, cap - *n, fmt, ap);
	va_end(ap);
	*n = w < 0 ? cap : *n + (size_t)w >= cap ? cap : *n + (size_t)w;
}

/* param: the object keys down to the first array ("generate.stop", as the
 * field checks name them); where: the whole path ("messages[2].content"). */
static void scan_path(const struct json_scan *sc, char *param, size_t param_cap, char *where,
                      size_t where_cap)
{
	size_t pn = 0, wn = 0;
	bool in_array = false;
	param[0] = where[0] = '\0';
	for (int i = 0; i < sc->depth; i++) {
		const struct json_frame *f = &sc->st[i];
		if (!f->object) {
			buf_add(where, where_cap, &wn, "[%zu]", f->index);
			in_array = true;
			continue;
		}
		if (!plain_key(f->key, f->key_len))
			break;
		buf_add(where, where_cap, &wn, "%s%.*s", wn ? "." : "", (int)f->key_len, f->key);
		if (!in_array)
			buf_add(param, param_cap, &pn, "%s%.*s", pn ? "." : "", (int)f->key_len,
			        f->key);
	}
	if (wn >= where_cap && where_cap > 4)
		memcpy(where + where_cap - 4, "...", 4);
}

static int scan_fail(struct json_scan *sc, const char *fmt, ...) SINKD_PRINTF(2, 3);
static int scan_fail(struct json_scan *sc, const char *fmt, ...)
{
	char what[160], param[64], where[160];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	scan_path(sc, param, sizeof(param), where, sizeof(where));
	return fail(sc->e, param[0] ? param : NULL, "invalid_json",
	            "invalid JSON: %s at byte %zu%s%s%s", what, (size_t)(sc->p - sc->body),
	            where[0] ? " (in '" : "", where, where[0] ? "')" : "");
}

static void skip_ws(struct json_scan *sc)
{
	while (sc->p < sc->end &&
	       (*sc->p == ' ' || *sc->p == '\t' || *sc->p == '\n' || *sc->p == '\r'))
		sc->p++;
}

/* Length of the UTF-8 character at p (RFC 3629: no overlongs, no
 * surrogates, at most U+10FFFF), 0 when invalid. */
static bool hex4(const char *p, unsigned *out)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		unsigned d = is_digit(c) ? (unsigned)(c - '0')
		             : (c | 0x20) >= 'a' && (c | 0x20) <= 'f'
		                 ? (unsigned)((c | 0x20) - 'a' + 10)
		                 : 16;
		if (d == 16)
			return false;
		v = v * 16 + d;
	}
	*out = v;
	return true;
}

/* A "\u0000" at p: counted, and swapped for the stand-in when rewriting. */
static void scan_nul(struct json_scan *sc, const char *p)
{
	sc->n_nul++;
	if (!sc->out)
		return;
	memcpy(sc->out + sc->out_len, sc->copied, (size_t)(p - sc->copied));
	sc->out_len += (size_t)(p - sc->copied);
	sc->out[sc->out_len++] = NUL_STANDIN;
	sc->copied = p + 6;
}

/* A \u escape at p (end - p >= 6 checked by the caller): its length. */
static int scan_unicode_escape(struct json_scan *sc, const char *p, size_t *len)
{
	unsigned cp = 0, low = 0;
	if (!hex4(p + 2, &cp))
		return scan_fail(sc, "\\u must be followed by 4 hex digits");
	*len = 6;
	if (cp >= 0xD800 && cp <= 0xDBFF) {
		if (sc->end - p < 12 || p[6] != '\\' || p[7] != 'u' || !hex4(p + 8, &low) ||
		    low < 0xDC00 || low > 0xDFFF)
			return scan_fail(sc, "unpaired UTF-16 surrogate \\u%04X in a string", cp);
		*len = 12;
	} else if (cp >= 0xDC00 && cp <= 0xDFFF) {
		return scan_fail(sc, "unpaired UTF-16 surrogate \\u%04X in a string", cp);
	} else if (cp == 0) {
		scan_nul(sc, p);
	}
	return 0;
}

/* The string at sc->p (its opening quote); *s, *n: its raw bytes. */
static int scan_string(struct json_scan *sc, const char **s, size_t *n)
{
	const char *start = ++sc->p;
	while (sc->p < sc->end) {
		unsigned char c = (unsigned char)*sc->p;
		size_t step = 1;
		if (c == '"') {
			*s = start;
			*n = (size_t)(sc->p - start);
			sc->p++;
			return 0;
		}
		if (c == '\\') {
			char x = sc->end - sc->p >= 2 ? sc->p[1] : 0;
			if (x == 'u' && sc->end - sc->p < 6)
				return scan_fail(sc, "\\u must be followed by 4 hex digits");
			else if (x == 'u' && scan_unicode_escape(sc, sc->p, &step))
				return -EINVAL;
			else if (x != 'u' && (!x || !strchr("\"\\/bfnrt", x)))
				return scan_fail(sc, "invalid escape sequence in a string");
			else if (x != 'u')
				step = 2;
		} else if (c < 0x20) {
			return scan_fail(sc,
			                 "raw control character 0x%02X in a string (write it as "
			                 "\\u%04X)",
			                 c, c);
		} else if (c >= 0x80) {
			int len = utf8_sequence_status((const unsigned char *)sc->p,
			                               (size_t)(sc->end - sc->p));
			if (len < 2) /* invalid, or cut off by the end of the body */
				return scan_fail(sc, "invalid UTF-8 in a string");
			step = (size_t)len;
		}
		sc->p += step;
	}
	return scan_fail(sc, "unterminated string");
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int scan_number(struct json_scan *sc)
{
	const char *start = sc->p;
	if (*sc->p == '-')
		sc->p++;
	if (sc->p >= sc->end || !is_digit(*sc->p))
		return scan_fail(sc, "a number needs digits");
	if (*sc->p == '0' && sc->end - sc->p > 1 && is_digit(sc->p[1]))
		return scan_fail(sc, "numbers may not start with 0 (leading zero)");
	while (sc->p < sc->end && is_digit(*sc->p))
		sc->p++;
	if (sc->p < sc->end && *sc->p == '.') {
		sc->p++;
		if (sc->p >= sc->end || !is_digit(*sc->p))
			return scan_fail(sc, "digits must follow a decimal point");
		while (sc->p < sc->end && is_digit(*sc->p))
			sc->p++;
	}
	if (sc->p < sc->end && (*sc->p == 'e' || *sc->p == 'E')) {
		sc->p++;
		if (sc->p < sc->end && (*sc->p == '+' || *sc->p == '-'))
			sc->p++;
		if (sc->p >= sc->end || !is_digit(*sc->p))
			return scan_fail(sc, "an exponent needs digits");
		while (sc->p < sc->end && is_digit(*sc->p))
			sc->p++;
	}
	if (sc->p < sc->end && (is_alnum(*sc->p) || *sc->p == '.'))
		return scan_fail(sc, "invalid character in a number");
	if (sc->p - start > JSON_MAX_NUMBER_LEN) {
		sc->p = start;
		return scan_fail(sc, "a number longer than %d characters", JSON_MAX_NUMBER_LEN);
	}
	return 0;
}

static int scan_scalar(struct json_scan *sc)
{
	static const char *const literals[] = {"true", "false", "null"};
	const char *s;
	size_t n;
	if (*sc->p == '"')
		return scan_string(sc, &s, &n);
	if (*sc->p == '-' || is_digit(*sc->p))
		return scan_number(sc);
	for (size_t i = 0; i < sizeof(literals) / sizeof(literals[0]); i++) {
		n = strlen(literals[i]);
		if ((size_t)(sc->end - sc->p) >= n && !memcmp(sc->p, literals[i], n) &&
		    ((size_t)(sc->end - sc->p) == n || !is_alnum(sc->p[n]))) {
			sc->p += n;
			return 0;
		}
	}
	return scan_fail(sc, "expected a value");
}

/* '{' or '[' at sc->p: a new frame; the state after it. */
static int scan_open(struct json_scan *sc, enum json_state *state)
{
	bool object = *sc->p == '{';
	if (sc->depth == REQUEST_MAX_DEPTH)
		return scan_fail(sc, "nested deeper than %d levels", REQUEST_MAX_DEPTH);
	sc->p++;
	sc->st[sc->depth++] = (struct json_frame){.object = object};
	skip_ws(sc);
	if (sc->p < sc->end && *sc->p == (object ? '}' : ']')) {
		sc->p++;
		sc->depth--;
		*state = JSON_AFTER;
	} else {
		*state = object ? JSON_KEY : JSON_VALUE;
	}
	return 0;
}

/* After a value: ',' or the frame's close; at the top, the end of the body. */
static int scan_after(struct json_scan *sc, enum json_state *state, bool *done)
{
	if (sc->depth == 0) {
		if (sc->p != sc->end)
			return scan_fail(sc, "unexpected bytes after the JSON value");
		*done = true;
		return 0;
	}
	struct json_frame *f = &sc->st[sc->depth - 1];
	if (sc->p < sc->end && *sc->p == ',') {
		sc->p++;
		f->key = NULL;
		f->index += !f->object;
		*state = f->object ? JSON_KEY : JSON_VALUE;
	} else if (sc->p < sc->end && *sc->p == (f->object ? '}' : ']')) {
		sc->p++;
		sc->depth--;
	} else {
		f->key = NULL; /* the object is at fault here, not its last member */
		return scan_fail(sc, f->object ? "expected ',' or '}'" : "expected ',' or ']'");
	}
	return 0;
}

static int scan_key(struct json_scan *sc, enum json_state *state)
{
	struct json_frame *f = &sc->st[sc->depth - 1];
	const char *k;
	size_t n;
	if (sc->p >= sc->end || *sc->p != '"')
		return scan_fail(sc, "expected a string key");
	if (scan_string(sc, &k, &n))
		return -EINVAL;
	skip_ws(sc);
	if (sc->p >= sc->end || *sc->p != ':')
		return scan_fail(sc, "expected ':' after a key");
	sc->p++;
	f->key = k;
	f->key_len = n;
	*state = JSON_VALUE;
	return 0;
}

/* Each turn consumes at least one byte or ends: linear in the body. */
static int json_scan_run(struct json_scan *sc)
{
	enum json_state state = JSON_VALUE;
	bool done = false;
	int rc = 0;
	while (!rc && !done) {
		skip_ws(sc);
		if (state == JSON_AFTER)
			rc = scan_after(sc, &state, &done);
		else if (sc->p >= sc->end)
			rc = scan_fail(sc, "the body ends early");
		else if (state == JSON_KEY)
			rc = scan_key(sc, &state);
		else if (*sc->p == '{' || *sc->p == '[')
			rc = scan_open(sc, &state);
		else if (!(rc = scan_scalar(sc)))
			state = JSON_AFTER;
	}
	return rc;
}

/* The body checked, with stand-ins for "\u0000" when it has any: *text is
 * body itself or *copy (free it). */
static int json_check(const char *body, size_t len, const char **text, size_t *text_len,
                      char **copy, struct api_error *e)
{
	struct json_scan sc = {.body = body, .p = body, .end = body + len, .e = e};
	*copy = NULL;
	*text = body;
	*text_len = len;
	if (json_scan_run(&sc))
		return -EINVAL;
	if (!sc.n_nul)
		return 0;
	sc = (struct json_scan){
	    .body = body, .p = body, .end = body + len, .e = e, .copied = body, .out = malloc(len)};
	if (!sc.out)
		return fail_oom(e, NULL, "out of memory");
	json_scan_run(&sc); /* cannot fail: the same bytes passed */
	memcpy(sc.out + sc.out_len, sc.copied, (size_t)(sc.end - sc.copied));
	*text_len = sc.out_len + (size_t)(sc.end - sc.copied);
	*text = *copy = sc.out;
	return 0;
}

static int parse_root(const char *body, size_t len, cJSON **root, struct api_error *e)
{
	const char *text;
	size_t text_len;
	char *copy;
	*root = NULL;
	if (!len)
		return fail(e, NULL, "invalid_json",
		            "request body is empty (expected a JSON object)");
	if (json_check(body, len, &text, &text_len, &copy, e))
		return -EINVAL;
	*root = cJSON_ParseWithLengthOpts(text, text_len, NULL, 0);
	free(copy);
	if (!*root) /* the body is valid JSON: cJSON ran out of memory */
		return fail_oom(e, NULL, "out of memory parsing the request body");
	if (!cJSON_IsObject(*root)) {
		cJSON_Delete(*root);
		*root = NULL;
		return fail(e, NULL, "invalid_json", "request body must be a JSON object");
	}
	return 0;
}

/* ---- fields ------------------------------------------------------------- */

/* The known keys of each object: one given twice is refused (cJSON would
 * take the first, a proxy in front of us perhaps the last). */
static const char *const gen_keys[] = {"model",
                                       "stream",
                                       "stream_options",
                                       "n",
                                       "max_tokens",
                                       "max_completion_tokens",
                                       "temperature",
                                       "top_p",
                                       "top_k",
                                       "min_p",
                                       "repeat_penalty",
                                       "presence_penalty",
                                       "frequency_penalty",
                                       "seed",
                                       "stop",
                                       "logprobs",
                                       "top_logprobs",
                                       "ignore_eos",
                                       "session_id",
                                       "pin_prefix_tokens",
                                       "prompt",
                                       "messages",
                                       "response_format",
                                       "tools",
                                       "tool_choice",
                                       "parallel_tool_calls",
                                       "logit_bias",
                                       "reasoning_format",
                                       "structured_outputs",
                                       "guided_regex",
                                       "echo",
                                       "suffix",
                                       "best_of",
                                       "functions",
                                       "function_call",
                                       "audio",
                                       "modalities",
                                       "prediction",
                                       "web_search_options",
                                       "reasoning_effort",
                                       "chat_template_kwargs",
                                       NULL};
static const char *const stream_options_keys[] = {"include_usage", NULL};
static const char *const message_keys[] = {"role",         "content",           "name",
                                           "tool_calls",   "tool_call_id",      "reasoning_content",
                                           NULL};
static const char *const part_keys[] = {"type", "text", NULL};
static const char *const session_keys[] = {"window_size", "sink_keep_count", NULL};
static const char *const append_keys[] = {"text", "revise_last_tokens", "generate",
                                          "pin_prefix_tokens", NULL};
static const char *const tokenize_keys[] = {"content", "add_special", "parse_special", NULL};
static const char *const detokenize_keys[] = {"tokens", NULL};

/* param NULL: the key itself. */
static int no_twice(const cJSON *o, const char *const *keys, const char *param, struct api_error *e)
{
	return request_fields_no_twice(o, keys, param, REQUEST_DUP_AT_WHERE, e);
}

/* The shared field readers (request_fields.c) under this file's short names. */
static cJSON *field(const cJSON *o, const char *key)
{
	return request_field(o, key);
}

static int get_bool(const cJSON *o, const char *key, bool *out, struct api_error *e)
{
	return request_get_bool(o, key, out, e);
}

static int get_num(const cJSON *o, const char *key, double lo, double hi, double *out,
                   struct api_error *e)
{
	return request_get_num(o, key, lo, hi, false, out, e);
}

static int get_int(const cJSON *o, const char *key, double lo, double hi, double *out,
                   struct api_error *e)
{
	return request_get_num(o, key, lo, hi, true, out, e);
}

static char *dup_text(const cJSON *v, size_t *len)
{
	return request_text_dup(v, len);
}

static int dup_name(const cJSON *v, const char *param, const char *what, char **out,
                    struct api_error *e)
{
	return request_name_dup(v, param, what, out, e);
}

static int stop_string(const cJSON *s, size_t i, struct gen_args *a, struct api_error *e)
{
	if (!cJSON_IsString(s))
		return fail(e, "stop", "invalid_type", "'stop[%zu]' must be a string", i);
	size_t len = strlen(s->valuestring);
	if (len == 0 || len > STOP_MAX_LEN)
		return fail(e, "stop", "invalid_value", "'stop' strings must have 1..%d bytes",
		            STOP_MAX_LEN);
	if (dup_name(s, "stop", "stop", &a->stops[a->n_stops], e))
		return -EINVAL;
	a->n_stops++;
	return 0;
}

static int parse_stop(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	cJSON *v = field(o, "stop");
	if (!v)
		return 0;
	if (!cJSON_IsString(v) && !cJSON_IsArray(v))
		return fail(e, "stop", "invalid_type",
		            "'stop' must be a string or an array of strings");
	size_t n = cJSON_IsString(v) ? 1 : (size_t)cJSON_GetArraySize(v);
	if (n > STOP_MAX_STRINGS)
		return fail(e, "stop", "invalid_value", "'stop' has more than %d strings",
		            STOP_MAX_STRINGS);
	a->stops = calloc(n ? n : 1, sizeof(char *));
	if (!a->stops)
		return fail_oom(e, "stop", "out of memory");
	if (cJSON_IsString(v))
		return stop_string(v, 0, a, e);
	size_t i = 0;
	const cJSON *s;
	cJSON_ArrayForEach(s, v)
	{
		if (stop_string(s, i++, a, e))
			return -EINVAL;
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

static int parse_stream_options(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	cJSON *so = field(o, "stream_options");
	if (!so)
		return 0;
	if (!cJSON_IsObject(so))
		return fail(e, "stream_options", "invalid_type",
		            "'stream_options' must be an object");
	if (no_twice(so, stream_options_keys, "stream_options.include_usage", e))
		return -EINVAL;
	cJSON *iu = field(so, "include_usage");
	if (iu && !cJSON_IsBool(iu))
		return fail(e, "stream_options.include_usage", "invalid_type",
		            "'stream_options.include_usage' must be a boolean");
	a->include_usage = cJSON_IsTrue(iu);
	if (iu && !a->stream)
		return fail(e, "stream_options", "invalid_value",
		            "'stream_options' is only allowed with 'stream': true");
	return 0;
}

/* The format's x_sinkd_whitespace ("compact", the default, or "pretty":
 * blanks allowed between JSON tokens) travels to the grammar as the
 * schema's root keyword GRAMMAR_WS_KEYWORD, so the grammar cache keys on
 * it; pretty json_object becomes the schema {"type": "object"}, which is
 * the same grammar. */
int request_response_format(const cJSON *fmt, const char *param, bool responses_api,
                            struct gen_args *a, struct api_error *e)
{
	char p[64];
	if (!cJSON_IsObject(fmt))
		return fail(e, param, "invalid_type", "'%s' must be an object", param);
	const cJSON *type = field(fmt, "type"), *ws = field(fmt, GRAMMAR_WS_KEYWORD);
	snprintf(p, sizeof(p), "%.40s." GRAMMAR_WS_KEYWORD, param);
	if (ws && !cJSON_IsString(ws))
		return fail(e, p, "invalid_type", "'%s' must be \"compact\" or \"pretty\"", p);
	if (ws && strcmp(ws->valuestring, "compact") && strcmp(ws->valuestring, "pretty"))
		return fail(e, p, "invalid_value",
		            "'%s' is \"%.40s\"; it must be \"compact\" (no whitespace between JSON "
		            "tokens, the default) or \"pretty\"",
		            p, ws->valuestring);
	bool pretty = ws && !strcmp(ws->valuestring, "pretty");
	snprintf(p, sizeof(p), "%.48s.type", param);
	if (!cJSON_IsString(type))
		return fail(e, p, "missing_required_parameter",
		            "'%s' must be \"text\", \"json_object\" or \"json_schema\"", p);
	if (!strcmp(type->valuestring, "text")) {
		a->response_format = RESPONSE_FORMAT_TEXT;
		return 0;
	}
	if (!strcmp(type->valuestring, "json_object") && !pretty) {
		a->response_format = RESPONSE_FORMAT_JSON_OBJECT;
		return 0;
	}
	if (!strcmp(type->valuestring, "json_object")) {
		a->response_format = RESPONSE_FORMAT_JSON_SCHEMA;
		a->response_schema =
		    cJSON_Parse("{\"type\":\"object\",\"" GRAMMAR_WS_KEYWORD "\":\"pretty\"}");
		return a->response_schema ? 0 : fail_oom(e, param, "out of memory");
	}
	if (strcmp(type->valuestring, "json_schema"))
		return fail(e, p, "invalid_value",
		            "'%s' is \"%.40s\"; it must be \"text\", \"json_object\" or "
		            "\"json_schema\"",
		            p, type->valuestring);
	/* Chat nests the schema in "json_schema"; the Responses API does not. */
	const cJSON *js = responses_api ? fmt : field(fmt, "json_schema");
	char where[48];
	snprintf(where, sizeof(where), "%.32s%s", param, responses_api ? "" : ".json_schema");
	if (!cJSON_IsObject(js))
		return fail(e, where, "missing_required_parameter",
		            "'%s' (an object with \"name\" and \"schema\") is required with type "
		            "json_schema",
		            where);
	const cJSON *name = field(js, "name"), *schema = field(js, "schema");
	const cJSON *strict = field(js, "strict");
	snprintf(p, sizeof(p), "%.48s.schema", where);
	if (schema && !cJSON_IsObject(schema))
		return fail(e, p, "invalid_type", "'%s' must be a JSON Schema object", p);
	if (!schema && responses_api) /* chat's json_schema.schema is optional, this one not */
		return fail(e, p, "missing_required_parameter",
		            "'%s' (a JSON Schema object) is required with type json_schema", p);
	snprintf(p, sizeof(p), "%.48s.strict", where);
	if (strict && !cJSON_IsBool(strict))
		return fail(e, p, "invalid_type", "'%s' must be a boolean", p);
	snprintf(p, sizeof(p), "%.48s.name", where);
	if (!cJSON_IsString(name))
		return fail(e, p, name ? "invalid_type" : "missing_required_parameter",
		            "'%s' (a string) is required with type json_schema", p);
	a->response_format = RESPONSE_FORMAT_JSON_SCHEMA;
	a->response_strict = strict && cJSON_IsTrue(strict);
	if (dup_name(name, p, p, &a->response_schema_name, e))
		return -EINVAL;
	/* No schema: any JSON value that is an object, as json_object. */
	a->response_schema = schema ? cJSON_Duplicate(schema, true) : cJSON_CreateObject();
	if (a->response_schema && ws) { /* the format's word over the schema's own */
		cJSON_DeleteItemFromObjectCaseSensitive(a->response_schema, GRAMMAR_WS_KEYWORD);
		if (pretty &&
		    !cJSON_AddStringToObject(a->response_schema, GRAMMAR_WS_KEYWORD, "pretty")) {
			cJSON_Delete(a->response_schema);
			a->response_schema = NULL;
		}
	}
	return a->response_schema ? 0 : fail_oom(e, param, "out of memory");
}

/* "logit_bias": {"<token id>": bias in -100..100, ...}; ids are checked
 * against the vocabulary by the caller (api.c), which knows the model. */
static int parse_logit_bias(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	const cJSON *lb = field(o, "logit_bias"), *m;
	if (!lb)
		return 0;
	if (!cJSON_IsObject(lb))
		return fail(e, "logit_bias", "invalid_type",
		            "'logit_bias' must be an object of token id strings to numbers");
	int n = cJSON_GetArraySize(lb);
	if (n > SAMPLER_MAX_BIAS)
		return fail(e, "logit_bias", "invalid_value",
		            "'logit_bias' has %d entries; at most %d are taken", n,
		            SAMPLER_MAX_BIAS);
	if (n == 0)
		return 0;
	a->logit_bias = calloc((size_t)n, sizeof(*a->logit_bias));
	if (!a->logit_bias)
		return fail_oom(e, "logit_bias", "out of memory");
	cJSON_ArrayForEach(m, lb)
	{
		const char *k = m->string;
		char *end = NULL;
		long id = -1;
		if (k && *k >= '0' && *k <= '9' && strlen(k) <= 10)
			id = strtol(k, &end, 10);
		if (id < 0 || id > INT32_MAX || !end || *end)
			return fail(
			    e, "logit_bias", "invalid_value",
			    "'logit_bias' key \"%.32s\" is not a token id (a decimal integer)",
			    k ? k : "");
		if (!cJSON_IsNumber(m) || !isfinite(m->valuedouble) || m->valuedouble < -100 ||
		    m->valuedouble > 100)
			return fail(e, "logit_bias", "invalid_value",
			            "'logit_bias[\"%s\"]' must be a number from -100 to 100", k);
		a->logit_bias[a->n_logit_bias++] =
		    (struct sampler_bias){.token = (int32_t)id, .bias = (float)m->valuedouble};
	}
	return 0;
}

/* OpenAI fields we do not implement: a 400 that names them, never silently
 * ignored (a client relying on one would get a different answer).  A value
 * that asks for the default (echo false, best_of 1, ...) is fine. */
static int refuse_unsupported(const cJSON *o, const struct gen_args *a, struct api_error *e)
{
	static const char *const always[] = {
	    "functions",  "function_call",      "audio",
	    "prediction", "web_search_options", "reasoning_effort"};
	for (size_t i = 0; i < sizeof(always) / sizeof(always[0]); i++)
		if (field(o, always[i]) && !(a->chat && !strcmp(always[i], "reasoning_effort")))
			return fail(e, always[i], "unsupported_parameter",
			            "'%s' is not supported by this server%s", always[i],
			            !strncmp(always[i], "function", 8)
			                ? " (deprecated by OpenAI: use 'tools' and 'tool_choice')"
			                : "");
	const cJSON *echo = field(o, "echo"), *suffix = field(o, "suffix");
	const cJSON *best_of = field(o, "best_of"), *mod = field(o, "modalities");
	if (echo && !cJSON_IsFalse(echo))
		return fail(e, "echo", "unsupported_parameter",
		            "'echo' is not supported: the reply holds only the generated text");
	if (suffix && !(cJSON_IsString(suffix) && !*suffix->valuestring))
		return fail(e, "suffix", "unsupported_parameter",
		            "'suffix' (insertion) is not supported by this server");
	if (best_of && !(cJSON_IsNumber(best_of) && best_of->valuedouble == 1))
		return fail(e, "best_of", "unsupported_parameter",
		            "'best_of' other than 1 is not supported by this server");
	if (mod && !(cJSON_IsArray(mod) && cJSON_GetArraySize(mod) == 1 &&
	             cJSON_IsString(mod->child) && !strcmp(mod->child->valuestring, "text")))
		return fail(e, "modalities", "unsupported_parameter",
		            "'modalities' other than [\"text\"] is not supported by this server");
	if (!a->chat && (field(o, "tools") || field(o, "tool_choice")))
		return fail(e, field(o, "tools") ? "tools" : "tool_choice", "invalid_value",
		            "tools are for /v1/chat/completions and /v1/responses");
	return 0;
}

static int parse_reasoning_format(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	const cJSON *rf = field(o, "reasoning_format");
	if (!rf || cJSON_IsNull(rf))
		return 0;
	static const char *const names[] = {"none", "auto", "deepseek"};
	bool ok = false;
	for (size_t i = 0; cJSON_IsString(rf) && i < 3; i++)
		ok |= !strcmp(rf->valuestring, names[i]);
	if (!ok)
		return fail(e, "reasoning_format", "invalid_value",
		            "'reasoning_format' must be \"none\" (reasoning stays in the "
		            "content), \"auto\" or \"deepseek\" (it goes to reasoning_content)");
	a->reasoning_in_content = !strcmp(rf->valuestring, "none");
	return 0;
}

/* structured_outputs.choice: the reply is one of the strings, as the
 * regex (?:s1|s2|...) with every regex character in them escaped. */
static int choice_regex(const cJSON *choice, struct gen_args *a, struct api_error *e)
{
	const char *param = a->regex_param = "structured_outputs.choice";
	if (!cJSON_IsArray(choice) || !choice->child)
		return fail(e, param, "invalid_type", "'%s' must be an array of strings", param);
	size_t len = 8;
	for (const cJSON *c = choice->child; c; c = c->next) {
		if (!cJSON_IsString(c))
			return fail(e, param, "invalid_type", "'%s' must be an array of strings",
			            param);
		len += 2 * strlen(c->valuestring) + 1;
	}
	char *re = malloc(len), *w = re;
	if (!re)
		return fail_oom(e, param, "out of memory");
	w += sprintf(w, "(?:");
	for (const cJSON *c = choice->child; c; c = c->next) {
		for (const char *s = c->valuestring; *s; s++) {
			if (strchr("\\.^$|?*+()[]{}", *s))
				*w++ = '\\';
			*w++ = *s;
		}
		*w++ = c->next ? '|' : ')';
	}
	*w = '\0';
	a->regex = re;
	return 0;
}

/* structured_outputs {"regex"} or {"choice"}, else guided_regex. */
static int parse_structured_outputs(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	const cJSON *so = field(o, "structured_outputs"), *re = field(o, "guided_regex");
	a->regex_param = "guided_regex";
	if (so && !cJSON_IsNull(so)) {
		if (!cJSON_IsObject(so))
			return fail(e, "structured_outputs", "invalid_type",
			            "'structured_outputs' must be an object");
		const cJSON *k = so->child;
		if (!k || k->next || (strcmp(k->string, "regex") && strcmp(k->string, "choice")))
			return fail(e, "structured_outputs", "unsupported_parameter",
			            "'structured_outputs' takes one of 'regex' and 'choice' (use "
			            "response_format for JSON)");
		if (!strcmp(k->string, "choice"))
			return choice_regex(k, a, e);
		re = k;
		a->regex_param = "structured_outputs.regex";
	}
	if (!re || cJSON_IsNull(re))
		return 0;
	if (!cJSON_IsString(re))
		return fail(e, a->regex_param, "invalid_type", "'%s' must be a string",
		            a->regex_param);
	a->regex = strdup(re->valuestring);
	return a->regex ? 0 : fail_oom(e, a->regex_param, "out of memory");
}

int request_output_fields(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	int rc = parse_reasoning_format(o, a, e);
	return rc ? rc : parse_structured_outputs(o, a, e);
}

static int parse_common(const cJSON *o, int64_t limit, struct gen_args *a, struct api_error *e)
{
	if (no_twice(o, gen_keys, NULL, e))
		return -EINVAL;
	cJSON *m = field(o, "model");
	if (m && !cJSON_IsString(m))
		return fail(e, "model", "invalid_type", "'model' must be a string");
	if (m && dup_name(m, "model", "model", &a->model, e))
		return -EINVAL;
	int rc = get_bool(o, "stream", &a->stream, e);
	if (!rc)
		rc = parse_stream_options(o, a, e);
	double n = 1;
	if (!rc)
		rc = get_int(o, "n", 1, 128, &n, e);
	if (!rc && n != 1)
		rc = fail(e, "n", "unsupported_parameter",
		          "'n' must be 1: one choice per request (send several requests instead)");
	if (!rc)
		rc = refuse_unsupported(o, a, e);
	const cJSON *rf = field(o, "response_format");
	if (!rc && rf)
		rc = request_response_format(rf, "response_format", false, a, e);
	if (!rc)
		rc = parse_logit_bias(o, a, e);
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
	if (!rc)
		rc = request_output_fields(o, a, e);
	return rc;
}

/* One walk over the array (cJSON_GetArrayItem(i) walks from the head each
 * time: quadratic).  The count is bounded by the caller (the scheduler's
 * limits.max_prompt_tokens, /detokenize in api.c). */
static int parse_prompt_ids(const cJSON *arr, struct gen_args *a, struct api_error *e)
{
	size_t n = (size_t)cJSON_GetArraySize(arr), i = 0;
	a->prompt_ids = malloc((n ? n : 1) * sizeof(int32_t));
	if (!a->prompt_ids)
		return fail_oom(e, "prompt", "out of memory");
	const cJSON *t;
	cJSON_ArrayForEach(t, arr)
	{
		if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) ||
		    t->valuedouble < 0 || t->valuedouble > INT32_MAX)
			return fail(e, "prompt", "invalid_type",
			            "'prompt[%zu]' must be a token id (non-negative integer)", i);
		a->prompt_ids[i++] = (int32_t)t->valuedouble;
	}
	a->n_prompt_ids = i;
	return 0;
}

static int prompt_text(const cJSON *v, struct gen_args *a, struct api_error *e)
{
	a->prompt = dup_text(v, &a->prompt_len);
	return a->prompt ? 0 : fail_oom(e, "prompt", "out of memory");
}

/* A string, [string], [int...] or [[int...]] — one prompt only (n = 1). */
static int parse_prompt(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	cJSON *p = field(o, "prompt");
	if (!p)
		return fail(e, "prompt", "missing_field", "'prompt' is required");
	if (cJSON_IsString(p))
		return prompt_text(p, a, e);
	cJSON *first = cJSON_IsArray(p) ? p->child : NULL;
	if (!first)
		return fail(e, "prompt", "invalid_type",
		            "'prompt' must be a string, an array of one string or an array of "
		            "token ids");
	if (cJSON_IsNumber(first))
		return parse_prompt_ids(p, a, e);
	if (first->next)
		return fail(e, "prompt", "invalid_value",
		            "only one prompt per request is supported");
	if (cJSON_IsString(first))
		return prompt_text(first, a, e);
	if (cJSON_IsArray(first))
		return parse_prompt_ids(first, a, e);
	return fail(e, "prompt", "invalid_type", "'prompt[0]' must be a string or token ids");
}

/* Appends n bytes to a growing buffer (doubling: linear overall). */
int request_text_append(char **s, size_t *len, size_t *cap, const char *t, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t c = (*len + n + 1) * 2;
		char *b = realloc(*s, c);
		if (!b)
			return -ENOMEM;
		*s = b;
		*cap = c;
	}
	for (size_t i = 0; i < n; i++)
		(*s)[*len + i] = t[i] == NUL_STANDIN ? '\0' : t[i];
	*len += n;
	(*s)[*len] = '\0';
	return 0;
}

/* content: a string, or an array of {"type":"text","text":...} parts. */
static int message_content(const cJSON *c, size_t i, struct api_message *m, struct api_error *e)
{
	size_t len = 0, cap = 0;
	char *s = NULL;
	const cJSON *part;
	if (c && !cJSON_IsString(c) && !cJSON_IsArray(c))
		return fail(e, "messages", "invalid_type",
		            "'messages[%zu].content' must be a string or an array of text parts",
		            i);
	if (cJSON_IsString(c) &&
	    request_text_append(&s, &len, &cap, c->valuestring, strlen(c->valuestring)))
		return fail_oom(e, "messages", "out of memory");
	const cJSON *parts = cJSON_IsArray(c) ? c : NULL;
	cJSON_ArrayForEach(part, parts)
	{
		const cJSON *type = field(part, "type"), *text = field(part, "text");
		if (no_twice(part, part_keys, "messages", e)) {
			free(s);
			return -EINVAL;
		}
		if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") ||
		    !cJSON_IsString(text)) {
			free(s);
			return fail(e, "messages", "invalid_value",
			            "'messages[%zu].content' parts must be "
			            "{\"type\":\"text\",\"text\":...}",
			            i);
		}
		if (request_text_append(&s, &len, &cap, text->valuestring,
		                        strlen(text->valuestring))) {
			free(s);
			return fail_oom(e, "messages", "out of memory");
		}
	}
	m->content = s ? s : strdup("");
	m->content_len = len;
	return m->content ? 0 : fail_oom(e, "messages", "out of memory");
}

/* An assistant message's tool_calls, normalised to
 * [{"id","type":"function","function":{"name","arguments"}}]. */
static int message_tool_calls(const cJSON *calls, size_t i, struct api_message *out,
                              struct api_error *e)
{
	if (!cJSON_IsArray(calls))
		return fail(e, "messages", "invalid_type",
		            "'messages[%zu].tool_calls' must be an array", i);
	out->tool_calls = cJSON_CreateArray();
	if (!out->tool_calls)
		return fail_oom(e, "messages", "out of memory");
	size_t k = 0;
	const cJSON *c;
	cJSON_ArrayForEach(c, calls)
	{
		const cJSON *id = field(c, "id"), *type = field(c, "type"),
		            *fn = field(c, "function");
		const cJSON *name = fn ? field(fn, "name") : NULL;
		const cJSON *args = fn ? field(fn, "arguments") : NULL;
		if (!cJSON_IsObject(c) || !cJSON_IsString(id) ||
		    (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))) ||
		    !cJSON_IsObject(fn) || !cJSON_IsString(name) || !*name->valuestring ||
		    (args && !cJSON_IsString(args)))
			return fail(e, "messages", "invalid_value",
			            "'messages[%zu].tool_calls[%zu]' must be {\"id\": string, "
			            "\"type\": \"function\", \"function\": {\"name\": string, "
			            "\"arguments\": JSON text}}",
			            i, k);
		cJSON *n = oa_tool_call(id->valuestring, name->valuestring,
		                        args ? args->valuestring : "{}",
		                        strlen(args ? args->valuestring : "{}"));
		if (!n || !cJSON_AddItemToArray(out->tool_calls, n)) {
			cJSON_Delete(n);
			return fail_oom(e, "messages", "out of memory");
		}
		k++;
	}
	return 0;
}

/* name, tool_call_id (role tool) and tool_calls (role assistant). */
static int message_tool_fields(const cJSON *m, size_t i, struct api_message *out,
                               struct api_error *e)
{
	const cJSON *name = field(m, "name"), *call_id = field(m, "tool_call_id");
	const cJSON *calls = field(m, "tool_calls");
	bool tool = !strcmp(out->role, "tool");
	if (name && !cJSON_IsString(name))
		return fail(e, "messages", "invalid_type", "'messages[%zu].name' must be a string",
		            i);
	if (name && dup_name(name, "messages", "name", &out->name, e))
		return -EINVAL;
	if (tool && !cJSON_IsString(call_id))
		return fail(e, "messages", "missing_required_parameter",
		            "'messages[%zu]' has role tool: 'tool_call_id' (a string) is required",
		            i);
	if (!tool && call_id)
		return fail(e, "messages", "invalid_value",
		            "'messages[%zu].tool_call_id' belongs to role tool messages only", i);
	if (tool && dup_name(call_id, "messages", "tool_call_id", &out->tool_call_id, e))
		return -EINVAL;
	if (calls && strcmp(out->role, "assistant"))
		return fail(e, "messages", "invalid_value",
		            "'messages[%zu].tool_calls' belongs to role assistant messages only",
		            i);
	return calls ? message_tool_calls(calls, i, out, e) : 0;
}

/* reasoning_content of an assistant message (null: absent). */
static int message_reasoning(const cJSON *m, size_t i, struct api_message *out,
                             struct api_error *e)
{
	const cJSON *r = field(m, "reasoning_content");
	if (!r || cJSON_IsNull(r))
		return 0;
	if (strcmp(out->role, "assistant"))
		return fail(e, "messages", "invalid_value",
		            "'messages[%zu].reasoning_content' belongs to role assistant messages only",
		            i);
	if (!cJSON_IsString(r))
		return fail(e, "messages", "invalid_type",
		            "'messages[%zu].reasoning_content' must be a string", i);
	out->reasoning_content = strdup(r->valuestring);
	return out->reasoning_content ? 0 : fail_oom(e, "messages", "out of memory");
}

static int parse_message(const cJSON *m, size_t i, struct api_message *out, struct api_error *e)
{
	static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
	const cJSON *role = field(m, "role");
	if (!cJSON_IsObject(m))
		return fail(e, "messages", "invalid_type", "'messages[%zu]' must be an object", i);
	if (!cJSON_IsString(role))
		return fail(e, "messages", "invalid_type", "'messages[%zu].role' must be a string",
		            i);
	if (no_twice(m, message_keys, "messages", e))
		return -EINVAL;
	bool known = false;
	for (size_t r = 0; r < sizeof(roles) / sizeof(roles[0]); r++)
		known |= !strcmp(role->valuestring, roles[r]);
	if (!known)
		return fail(e, "messages", "invalid_value",
		            "'messages[%zu].role' must be system, developer, user, assistant "
		            "or tool",
		            i);
	out->role = strdup(role->valuestring);
	if (!out->role)
		return fail_oom(e, "messages", "out of memory");
	int rc = message_content(field(m, "content"), i, out, e);
	if (!rc)
		rc = message_tool_fields(m, i, out, e);
	if (!rc)
		rc = message_reasoning(m, i, out, e);
	return rc;
}

static int parse_messages(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	cJSON *msgs = field(o, "messages");
	if (!msgs)
		return fail(e, "messages", "missing_field", "'messages' is required");
	if (!cJSON_IsArray(msgs) || !msgs->child)
		return fail(e, "messages", "invalid_type", "'messages' must be a non-empty array");
	size_t n = (size_t)cJSON_GetArraySize(msgs);
	a->messages = calloc(n, sizeof(*a->messages));
	if (!a->messages)
		return fail_oom(e, "messages", "out of memory");
	const cJSON *m;
	cJSON_ArrayForEach(m, msgs)
	{
		int rc = parse_message(m, a->n_messages, &a->messages[a->n_messages], e);
		a->n_messages++; /* deinit frees what a failed message holds */
		if (rc)
			return rc;
	}
	return 0;
}

/* A session id (session_key.h): anything nameable may simply be unknown
 * (404), the rest is not an id at all. */
static int parse_session_id(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	cJSON *v = field(o, "session_id");
	if (!v)
		return 0;
	if (!cJSON_IsString(v) || !*v->valuestring)
		return fail(e, "session_id", "invalid_type",
		            "'session_id' must be a session id string");
	if (!session_id_nameable(v->valuestring))
		return fail(e, "session_id", "invalid_value",
		            "'session_id' must be printable ASCII of at most %d bytes",
		            SESSION_ID_NAME_MAX);
	return dup_name(v, "session_id", "session_id", &a->session_id, e);
}

/* "pin_prefix_tokens": completions and session appends count the tokens
 * themselves; a chat pins its system prompt by configuration instead. */
static int parse_pin(const cJSON *o, bool chat, int *out, struct api_error *e)
{
	double pin = 0;
	if (chat && field(o, "pin_prefix_tokens"))
		return fail(
		    e, "pin_prefix_tokens", "invalid_value",
		    "'pin_prefix_tokens' is for /v1/completions and session appends; a chat "
		    "pins its system prompt with inference.cache.pin_system_prompt");
	int rc = get_int(o, "pin_prefix_tokens", 0, 1 << 20, &pin, e);
	*out = (int)pin;
	return rc;
}

int request_parse_tools(const cJSON *root, bool responses_api, struct gen_args *a,
                        struct api_error *e)
{
	a->tools = calloc(1, sizeof(*a->tools));
	if (!a->tools)
		return fail_oom(e, "tools", "out of memory");
	return tool_set_parse(root, responses_api, a->tools, e);
}

int request_parse_template_args(const cJSON *root, bool effort, struct gen_args *a,
                                struct api_error *e)
{
	static const char *const reserved[] = {"messages", "tools", "add_generation_prompt",
	                                       "bos_token", "eos_token", "reasoning_effort"};
	static const char *const efforts[] = {"none", "minimal", "low", "medium", "high"};
	const cJSON *kw = field(root, "chat_template_kwargs"), *k;
	const cJSON *re = effort ? field(root, "reasoning_effort") : NULL;
	if (kw && !cJSON_IsObject(kw))
		return fail(e, "chat_template_kwargs", "invalid_type",
		            "'chat_template_kwargs' must be an object (its keys become the chat "
		            "template's variables, e.g. {\"enable_thinking\": false})");
	cJSON_ArrayForEach(k, kw)
	{
		for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
			if (!strcmp(k->string, reserved[i]))
				return fail(e, "chat_template_kwargs", "invalid_value",
				            "'chat_template_kwargs.%s' is set by the server from the "
				            "request",
				            reserved[i]);
	}
	bool known = false;
	for (size_t i = 0; re && cJSON_IsString(re) && i < sizeof(efforts) / sizeof(efforts[0]); i++)
		known |= !strcmp(re->valuestring, efforts[i]);
	if (re && !known)
		return fail(e, "reasoning_effort", "invalid_value",
		            "'reasoning_effort' must be none, minimal, low, medium or high");
	if (kw && !(a->chat_template_kwargs = cJSON_Duplicate(kw, 1)))
		return fail_oom(e, "chat_template_kwargs", "out of memory");
	if (re && !(a->reasoning_effort = strdup(re->valuestring)))
		return fail_oom(e, "reasoning_effort", "out of memory");
	return 0;
}

int gen_args_parse(const char *body, size_t len, bool chat, int64_t limit, struct gen_args *a,
                   struct api_error *e)
{
	memset(a, 0, sizeof(*a));
	memset(e, 0, sizeof(*e));
	a->chat = chat;
	a->api = chat ? GEN_API_CHAT : GEN_API_COMPLETIONS;
	a->store = true;
	sampler_params_default(&a->sampling);
	cJSON *root = NULL;
	int rc = parse_root(body, len, &root, e);
	if (rc)
		return rc;
	rc = parse_common(root, limit, a, e);
	if (!rc)
		rc = parse_session_id(root, a, e);
	if (!rc)
		rc = parse_pin(root, chat, &a->pin_prefix_tokens, e);
	if (!rc)
		rc = chat ? parse_messages(root, a, e) : parse_prompt(root, a, e);
	if (!rc && chat && (field(root, "tools") || field(root, "tool_choice")))
		rc = request_parse_tools(root, false, a, e);
	if (!rc && chat)
		rc = request_parse_template_args(root, true, a, e);
	else if (!rc && field(root, "chat_template_kwargs"))
		rc = fail(e, "chat_template_kwargs", "unsupported_parameter",
		          "'chat_template_kwargs' is for chat requests (/v1/chat/completions, "
		          "/v1/responses)");
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
	rc = no_twice(root, session_keys, NULL, e);
	if (!rc)
		rc = get_int(root, "window_size", 1, 1 << 24, &w, e);
	if (!rc)
		rc = get_int(root, "sink_keep_count", 0, 1 << 20, &k, e);
	out->window_size = (int)w;
	out->sink_keep_count = (int)k;
	cJSON_Delete(root);
	return rc;
}

/* The "generate" object: completion fields, errors named "generate.<field>". */
static int append_generate(const cJSON *g, int64_t limit, struct append_args *a,
                           struct api_error *e)
{
	a->generate = true;
	a->gen.stream = false; /* whole JSON unless "stream": true, as for /v1/completions */
	int rc = parse_common(g, limit, &a->gen, e);
	if (rc && e->param[0]) {
		char p[sizeof(e->param)];
		snprintf(p, sizeof(p), "%s", e->param);
		snprintf(e->param, sizeof(e->param), "generate.%.48s", p);
	}
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
	rc = no_twice(root, append_keys, NULL, e);
	if (!rc && t && !cJSON_IsString(t))
		rc = fail(e, "text", "invalid_type", "'text' must be a string");
	if (!rc)
		rc = get_int(root, "revise_last_tokens", 0, 1 << 30, &revise, e);
	if (!rc && g && !cJSON_IsObject(g))
		rc = fail(e, "generate", "invalid_type", "'generate' must be an object");
	if (!rc && !t && !g && revise == 0)
		rc = fail(e, "text", "missing_field", "'text' or 'generate' is required");
	if (!rc)
		rc = parse_pin(root, false, &a->gen.pin_prefix_tokens, e);
	a->revise_last_tokens = (size_t)revise;
	a->text = cJSON_IsString(t) ? dup_text(t, &a->text_len) : strdup("");
	if (!rc && !a->text)
		rc = fail_oom(e, "text", "out of memory");
	if (!rc && g)
		rc = append_generate(g, limit, a, e);
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
	free(a->chat_marks);
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
		free(a->messages[i].name);
		free(a->messages[i].tool_call_id);
		cJSON_Delete(a->messages[i].tool_calls);
		free(a->messages[i].reasoning_content);
	}
	free(a->messages);
	cJSON_Delete(a->response_schema);
	free(a->response_schema_name);
	free(a->regex);
	if (a->tools) {
		tool_set_deinit(a->tools);
		free(a->tools);
	}
	free(a->logit_bias);
	grammar_unref(a->grammar);
	free(a->instructions);
	free(a->previous_response_id);
	cJSON_Delete(a->chat_template_kwargs);
	free(a->reasoning_effort);
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
	rc = no_twice(root, tokenize_keys, NULL, e);
	if (!rc && !c)
		rc = fail(e, "content", "missing_field", "'content' is required");
	else if (!cJSON_IsString(c))
		rc = fail(e, "content", "invalid_type", "'content' must be a string");
	if (!rc)
		rc = get_bool(root, "add_special", &out->add_special, e);
	if (!rc)
		rc = get_bool(root, "parse_special", &out->parse_special, e);
	if (!rc && !(out->content = dup_text(c, &out->content_len)))
		rc = fail_oom(e, "content", "out of memory");
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
	if (no_twice(root, detokenize_keys, NULL, e))
		rc = -EINVAL;
	else if (!t)
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

/* ---- shared with the Responses API parser ------------------------------ */

int request_parse_body(const char *body, size_t len, cJSON **root, struct api_error *e)
{
	return parse_root(body, len, root, e);
}
