/* Fuzz target: the Jinja chat-template interpreter (chat/jinja.h), the
 * parser and the renderer, since a GGUF's template is untrusted input.
 * The input is the template's source; it renders with a fixed context
 * shaped like a chat request (system, user, an assistant tool call with
 * object arguments, a tool result, tools, add_generation_prompt) under
 * small budgets.  Checks: parse and render return only their documented
 * codes; every error but raise_exception's starts "LINE:COL: "; the output
 * is NUL-terminated at its length; a second render of the same parsed
 * template gives the same bytes (rendering leaves the tree as it was). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat/jinja.h"

static const char context_json[] =
	"{\"messages\":["
	"{\"role\":\"system\",\"content\":\"You are terse.\"},"
	"{\"role\":\"user\",\"content\":\"Weather in Paris? \\u00e9\\ud83d\\ude00\"},"
	"{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"check\",\"tool_calls\":["
	"{\"id\":\"call_123456789\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
	"\"arguments\":{\"city\":\"Paris\",\"days\":[1,2.5],\"metric\":true}}}]},"
	"{\"role\":\"tool\",\"tool_call_id\":\"call_123456789\",\"name\":\"get_weather\","
	"\"content\":\"{\\\"temp\\\": 21}\"},"
	"{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"<think>\\nhm\\n</think>ok\"},"
	"{\"type\":\"image\"}]}],"
	"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
	"\"description\":\"Get the weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
	"{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"array\"}},\"required\":[\"city\"]}}}],"
	"\"add_generation_prompt\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\","
	"\"enable_thinking\":false,\"n\":-3,\"x\":0.1}";

/* cJSON is read only while rendering: one context serves every input. */
static cJSON *context(void)
{
	static cJSON *ctx;
	if (!ctx && !(ctx = cJSON_Parse(context_json)))
		abort();
	return ctx;
}

static void check_where(const char *err)
{
	const char *p = err;
	size_t digits = 0;
	while (*p >= '0' && *p <= '9')
		p++, digits++;
	if (digits == 0 || *p++ != ':')
		abort();
	digits = 0;
	while (*p >= '0' && *p <= '9')
		p++, digits++;
	if (digits == 0 || p[0] != ':' || p[1] != ' ')
		abort();
}

static int render(const struct jinja_template *t, char **out, size_t *len, char *err, size_t n)
{
	struct jinja_env env = {.now = 1764892800,
				.limits = {.max_steps = 20000, .max_output = 1 << 16, .max_depth = 64}};
	int rc = jinja_render(t, context(), &env, out, len, err, n);
	if (rc == 0) {
		if (!*out || (*out)[*len] != '\0')
			abort();
		return 0;
	}
	if (*out)
		abort();
	if (rc != JINJA_E_RAISED && rc != JINJA_E_RUNTIME && rc != JINJA_E_BUDGET &&
	    rc != JINJA_E_NOMEM)
		abort();
	if (rc != JINJA_E_RAISED && rc != JINJA_E_NOMEM)
		check_where(err);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct jinja_template *t = NULL;
	char err[512];
	int rc = jinja_parse((const char *)data, size, &t, err, sizeof(err));
	if (rc) {
		if (t || (rc != JINJA_E_SYNTAX && rc != JINJA_E_NOMEM))
			abort();
		if (rc == JINJA_E_SYNTAX)
			check_where(err);
		return 0;
	}
	(void)jinja_template_uses(t, "tools");
	char *a = NULL, *b = NULL;
	size_t alen = 0, blen = 0;
	char err2[512];
	int rc1 = render(t, &a, &alen, err, sizeof(err));
	int rc2 = render(t, &b, &blen, err2, sizeof(err2));
	if (rc1 != rc2 || (rc1 == 0 && (alen != blen || memcmp(a, b, alen) != 0)))
		abort();
	if (rc1 != 0 && strcmp(err, err2) != 0)
		abort();
	free(a);
	free(b);
	jinja_template_free(t);
	return 0;
}
