/* Fuzz target: request bodies through the API layer's parsers
 * (server/request.h).  The first byte picks the endpoint (its value mod 6:
 * '0' completions, '1' chat, '2' session create, '3' session append, '4'
 * tokenize, '5' detokenize); the rest is the body.  Beyond "no crash, no
 * leak, no sanitizer report" it checks what callers rely on: an error has a
 * 4xx or 5xx status, a code and a message; a success has every length consistent
 * with its NUL-terminated buffer, ids that are not negative, stop strings
 * the stop matcher accepts, and chat messages that every chat template
 * family, and two templates through chat_render.h (whole and as a
 * session's next turn), render or refuse with a message.  Chat bodies also
 * go through the Responses API parser (server/responses.h), and a
 * response_format that parses is compiled (grammar/grammar.h): it compiles
 * or is refused with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "engine/stopstr.h"
#include "grammar/grammar.h"
#include "server/chat_render.h"
#include "server/chat_template.h"
#include "server/request.h"
#include "server/responses.h"
#include "util/errbuf.h"

#define LIMIT_MAX_TOKENS 4096

static volatile unsigned sink; /* reads that ASan checks */

static void touch(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		sink += (unsigned char)s[i];
	if (s[len] != '\0')
		abort(); /* documented: len bytes + a NUL */
}

static void check_error(int rc, const struct api_error *e)
{
	if (rc == 0)
		return;
	if (rc > 0 || e->status < 400 || e->status > 599 || e->code == NULL ||
	    memchr(e->message, '\0', sizeof(e->message)) == NULL || e->message[0] == '\0' ||
	    memchr(e->param, '\0', sizeof(e->param)) == NULL)
		abort();
}

/* A chat request that parses renders in every template family, or is
 * refused with a message (roles mapped as chat_prompt.c maps them). */
static void check_chat_templates(const struct gen_args *a)
{
	struct chat_message *cm = calloc(a->n_messages ? a->n_messages : 1, sizeof(*cm));
	if (!cm)
		return;
	for (size_t i = 0; i < a->n_messages; i++) {
		const char *role = a->messages[i].role;
		cm[i].role = !strcmp(role, "developer") ? "system"
		             : !strcmp(role, "tool")    ? "user"
		                                        : role;
		cm[i].content = a->messages[i].content;
	}
	for (int fam = CHAT_FAMILY_NONE; fam <= CHAT_FAMILY_UNKNOWN; fam++) {
		char *text = NULL, err[SINKD_ERR_LEN] = "";
		size_t sys_end = 0;
		int rc = chat_template_apply((enum chat_family)fam, cm, a->n_messages, &text,
		                             &sys_end, err, sizeof(err));
		if ((rc == 0) != (text != NULL) || (rc != 0 && err[0] == '\0'))
			abort();
		if (text && sys_end > strlen(text))
			abort(); /* the pinned prefix lies inside the prompt */
		if (text)
			touch(text, strlen(text));
		free(text);
	}
	free(cm);
}

/* Chat messages that parse render through a model's own template (ChatML
 * that renders tools, calls and results; Gemma's shape without a system
 * role, alternating turns, so every polyfill runs), whole or as a
 * session's next turn, or are refused with a message; the pinned part lies
 * inside the prompt. */
static void check_chat_render(const struct gen_args *a)
{
	static const char *const src[] = {
	    "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t | tojson }}{% endfor "
	    "%}<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ "
	    "m.content }}{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function "
	    "| tojson }}</tool_call>{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if "
	    "add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
	    "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}{{ "
	    "raise_exception('System role not supported') }}{% endif %}{% if (m.role == 'user') "
	    "!= (loop.index0 % 2 == 0) %}{{ raise_exception('Roles must alternate') }}{% endif "
	    "%}<start_of_turn>{{ m.role }}\n{{ m.content | trim }}<end_of_turn>\n{% endfor %}"};
	static struct chat_render *cr[2]; /* made once: probing costs more than a render */
	struct chat_render_vocab v = {.bos_text = "<bos>", .eos_text = "<eos>", .add_bos = true};
	for (size_t i = 0; i < 2; i++) {
		char err[SINKD_ERR_LEN] = "";
		if (!cr[i] && chat_render_new(src[i], strlen(src[i]), "fuzz", &v, &cr[i], err,
		                              sizeof(err)) != 0)
			abort();
		for (int cont = 0; cont < 2; cont++) {
			struct chat_render_input in = {.msgs = a->messages,
			                               .n = a->n_messages,
			                               .continuation = cont,
			                               .first_new = cont ? a->n_messages / 2 : 0,
			                               .tools = a->tools,
			                               .reasoning_effort = a->reasoning_effort,
			                               .kwargs = a->chat_template_kwargs};
			char *text = NULL;
			size_t len = 0, sys_end = 0;
			int rc = chat_render_prompt(cr[i], &in, &text, &len, &sys_end, err, sizeof(err));
			if ((rc == 0) != (text != NULL) || (rc != 0 && err[0] == '\0'))
				abort();
			if (text && (sys_end > len || strlen(text) != len))
				abort();
			if (text)
				touch(text, len);
			free(text);
		}
	}
}

/* A response_format compiles or is refused with a message. */
static void check_constraint(const struct gen_args *a)
{
	if (a->response_format == RESPONSE_FORMAT_TEXT)
		return;
	struct grammar *g = NULL;
	char path[128] = "", err[SINKD_ERR_LEN] = "";
	int rc = a->response_format == RESPONSE_FORMAT_JSON_SCHEMA
	             ? grammar_from_json_schema(a->response_schema, &g, path, sizeof(path), err,
	                                        sizeof(err))
	             : grammar_json_object(&g, err, sizeof(err));
	if ((rc == 0) != (g != NULL) || (rc != 0 && err[0] == '\0'))
		abort();
	grammar_unref(g);
}

static void check_gen(const struct gen_args *a)
{
	if (a->model)
		touch(a->model, strlen(a->model));
	if (a->session_id)
		touch(a->session_id, strlen(a->session_id));
	if (a->prompt)
		touch(a->prompt, a->prompt_len);
	for (size_t i = 0; i < a->n_prompt_ids; i++)
		if (a->prompt_ids[i] < 0)
			abort();
	for (size_t i = 0; i < a->n_messages; i++) {
		touch(a->messages[i].role, strlen(a->messages[i].role));
		touch(a->messages[i].content, a->messages[i].content_len);
	}
	if (a->max_tokens < 0 || a->max_tokens > LIMIT_MAX_TOKENS)
		abort();
	/* What the request layer accepts, the engine's stop matcher must take. */
	struct stop_matcher *m = NULL;
	if (stop_matcher_new((const char *const *)a->stops, a->n_stops, &m, NULL, 0) != 0)
		abort();
	stop_matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int endpoint = data[0] % 6;
	/* A copy of exactly the body's size: the parsers get a length, not a
	 * NUL-terminated string, so ASan sees any read past the end. */
	size_t len = size - 1;
	char *body = malloc(len ? len : 1);
	if (!body)
		return 0;
	memcpy(body, data + 1, len);
	struct api_error e;
	int rc;
	switch (endpoint) {
	case 0:
	case 1: {
		struct gen_args a;
		rc = gen_args_parse(body, len, endpoint == 1, LIMIT_MAX_TOKENS, &a, &e);
		check_error(rc, &e);
		if (rc == 0)
			check_gen(&a);
		if (rc == 0 && a.chat) {
			check_chat_templates(&a);
			check_chat_render(&a);
		}
		if (rc == 0)
			check_constraint(&a);
		gen_args_deinit(&a);
		if (endpoint == 1) {
			rc = responses_args_parse(body, len, LIMIT_MAX_TOKENS, &a, &e);
			check_error(rc, &e);
			if (rc == 0) {
				check_gen(&a);
				check_constraint(&a);
			}
			gen_args_deinit(&a);
		}
		break;
	}
	case 2: {
		struct session_create_args s;
		rc = session_create_args_parse(body, len, &s, &e);
		check_error(rc, &e);
		if (rc == 0 && (s.window_size < 0 || s.sink_keep_count < -1))
			abort();
		break;
	}
	case 3: {
		struct append_args a;
		rc = append_args_parse(body, len, LIMIT_MAX_TOKENS, &a, &e);
		check_error(rc, &e);
		if (rc == 0) {
			touch(a.text, a.text_len);
			if (a.generate)
				check_gen(&a.gen);
		}
		append_args_deinit(&a);
		break;
	}
	case 4: {
		struct tokenize_args t;
		rc = tokenize_args_parse(body, len, &t, &e);
		check_error(rc, &e);
		if (rc == 0)
			touch(t.content, t.content_len);
		free(t.content);
		break;
	}
	default: {
		int32_t *ids = NULL;
		size_t n = 0;
		rc = detokenize_args_parse(body, len, &ids, &n, &e);
		check_error(rc, &e);
		for (size_t i = 0; rc == 0 && i < n; i++)
			if (ids[i] < 0)
				abort();
		free(ids);
		break;
	}
	}
	free(body);
	return 0;
}
