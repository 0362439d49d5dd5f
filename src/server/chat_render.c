/* The model's own Jinja chat template as the server's prompt renderer.
 *
 * Where the template comes from (model.chat_template, else the GGUF's
 * tokenizer.chat_template), what it can express (probed once by rendering
 * small conversations with needles, as llama.cpp does, since a template's
 * source says little reliably), and the render of one request: Hugging
 * Face's context (messages with tool-call arguments as objects, tools in
 * OpenAI's list form, add_generation_prompt, bos_token, eos_token, the
 * request's reasoning_effort and chat_template_kwargs), with polyfills
 * where probing found the template lacking.  The pinned system part is
 * found by rendering without the first user message, and a session's next
 * turn is what the new messages add to the rendering of the held ones
 * (chat_render_prompt).  Model output is not parsed here. */
#include "server/chat_render.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat/jinja.h"
#include "server/chat_format.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

/* A template file larger than this is refused (the largest real ones are
 * tens of KiB). */
#define CHAT_TEMPLATE_MAX_BYTES (4u << 20)
#define ORIGIN_LEN 600

struct chat_render {
	atomic_int refs;
	char *source; /* NUL-terminated */
	size_t source_len;
	char origin[ORIGIN_LEN];
	struct jinja_template *tmpl;
	char *bos_text, *eos_text;
	bool add_bos;
	struct chat_render_caps caps;
	bool developer_role;        /* the template knows "developer" (gpt-oss): kept as is */
	/* the reply format read from the source (chat_format.h), once; its
	 * tools are also what the polyfills write calls and results in */
	struct chat_format format;
};

/* ---------------------------------------------------------------- rendering */

static void drop_leading_bos(const struct chat_render *cr, char *s, size_t *len)
{
	size_t n = strlen(cr->bos_text);
	if (!cr->add_bos || n == 0 || *len < n || memcmp(s, cr->bos_text, n))
		return;
	memmove(s, s + n, *len - n + 1);
	*len -= n;
}

/* The context's fixed variables around messages (taken) and tools (taken;
 * NULL: not offered). */
static cJSON *context_new(const struct chat_render *cr, cJSON *messages, cJSON *tools, bool agp,
                          const struct chat_render_input *in)
{
	cJSON *ctx = cJSON_CreateObject();
	if (!ctx || !cJSON_AddItemToObject(ctx, "messages", messages)) {
		cJSON_Delete(ctx);
		cJSON_Delete(messages);
		cJSON_Delete(tools);
		return NULL;
	}
	if (tools && !cJSON_AddItemToObject(ctx, "tools", tools)) {
		cJSON_Delete(tools);
		goto fail;
	}
	if (!cJSON_AddBoolToObject(ctx, "add_generation_prompt", agp) ||
	    !cJSON_AddStringToObject(ctx, "bos_token", cr->bos_text) ||
	    !cJSON_AddStringToObject(ctx, "eos_token", cr->eos_text))
		goto fail;
	if (in && in->reasoning_effort &&
	    !cJSON_AddStringToObject(ctx, "reasoning_effort", in->reasoning_effort))
		goto fail;
	const cJSON *kw, *kwargs = in ? in->kwargs : NULL;
	cJSON_ArrayForEach(kw, kwargs)
	{
		if (!cJSON_AddItemReferenceToObject(ctx, kw->string, (cJSON *)kw))
			goto fail;
	}
	return ctx;
fail:
	cJSON_Delete(ctx);
	return NULL;
}

/* Renders ctx (deleted here) into *out with the leading BOS text dropped. */
static int render_ctx(const struct chat_render *cr, cJSON *ctx, char **out, size_t *len, char *err,
                      size_t err_len)
{
	*out = NULL;
	*len = 0;
	if (!ctx)
		return err_set(err, err_len, -ENOMEM, "out of memory rendering the chat template");
	int rc = jinja_render(cr->tmpl, ctx, NULL, out, len, err, err_len);
	cJSON_Delete(ctx);
	if (rc == 0)
		drop_leading_bos(cr, *out, len);
	return rc;
}

/* ---------------------------------------------------------------- probing */

#define PROBE_CALL_WITH(ARGS)                                                                      \
	"{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call12345\","          \
	"\"type\":\"function\",\"function\":{\"name\":\"sinkd_probe_call\",\"arguments\":" ARGS    \
	"}}]}"
#define PROBE_CALL PROBE_CALL_WITH("{\"probe_arg\":\"sinkd_probe_value\"}")

/* Whether rendering messages_json (with tools_json when not NULL) succeeds
 * and, when needle is not NULL, shows it. */
static bool probe(const struct chat_render *cr, const char *messages_json, const char *tools_json,
                  bool agp, const char *needle)
{
	char err[SINKD_ERR_LEN], *out = NULL;
	size_t len = 0;
	cJSON *msgs = cJSON_Parse(messages_json);
	cJSON *tools = tools_json ? cJSON_Parse(tools_json) : NULL;
	if (!msgs) {
		cJSON_Delete(tools);
		return false;
	}
	int rc = render_ctx(cr, context_new(cr, msgs, tools, agp, NULL), &out, &len, err,
	                    sizeof(err));
	bool ok = rc == 0 && (!needle || strstr(out, needle));
	free(out);
	return ok;
}

/* The argument's value shows wherever the template writes the object (as
 * JSON, or key by key); where only the text form shows it, the template
 * concatenates arguments as a string, and an object would be written as
 * "[object Map]". */
static bool probe_string_arguments(const struct chat_render *cr)
{
	return !probe(cr, "[{\"role\":\"user\",\"content\":\"u\"}," PROBE_CALL "]", NULL, false,
	              "sinkd_probe_value") &&
	       probe(cr,
	             "[{\"role\":\"user\",\"content\":\"u\"}," PROBE_CALL_WITH(
	                 "\"{\\\"probe_arg\\\":\\\"sinkd_probe_value\\\"}\"") "]",
	             NULL, false, "\"sinkd_probe_value\"");
}

static void probe_caps(struct chat_render *cr)
{
	struct chat_render_caps *c = &cr->caps;
	c->system_role = probe(cr,
	                       "[{\"role\":\"system\",\"content\":\"sinkd_probe_system\"},"
	                       "{\"role\":\"user\",\"content\":\"sinkd_probe_user\"}]",
	                       NULL, true, "sinkd_probe_system");
	c->alternating = !probe(cr,
	                        "[{\"role\":\"user\",\"content\":\"a\"},"
	                        "{\"role\":\"user\",\"content\":\"b\"}]",
	                        NULL, true, NULL) &&
	                 probe(cr,
	                       "[{\"role\":\"user\",\"content\":\"a\"},"
	                       "{\"role\":\"assistant\",\"content\":\"b\"},"
	                       "{\"role\":\"user\",\"content\":\"c\"}]",
	                       NULL, true, NULL);
	c->tools = probe(cr, "[{\"role\":\"user\",\"content\":\"sinkd_probe_user\"}]",
	                 "[{\"type\":\"function\",\"function\":{\"name\":\"sinkd_probe_tool\","
	                 "\"description\":\"a probe\",\"parameters\":{\"type\":\"object\","
	                 "\"properties\":{}}}}]",
	                 true, "sinkd_probe_tool");
	c->tool_calls = probe(cr,
	                      "[{\"role\":\"user\",\"content\":\"sinkd_probe_user\"}," PROBE_CALL
	                      "]",
	                      NULL, false, "sinkd_probe_call");
	c->string_arguments = c->tool_calls && probe_string_arguments(cr);
	c->reasoning_effort = jinja_template_uses(cr->tmpl, "reasoning_effort");
	c->tool_responses = probe(cr,
	                          "[{\"role\":\"user\",\"content\":\"sinkd_probe_user\"}," PROBE_CALL
	                          ",{\"role\":\"tool\",\"tool_call_id\":\"call12345\","
	                          "\"name\":\"sinkd_probe_call\",\"content\":\"sinkd_probe_result\"}]",
	                          NULL, true, "sinkd_probe_result");
}

/* ---------------------------------------------------------------- the object */

static char *dup_or_empty(const char *s)
{
	return strdup(s ? s : "");
}

int chat_render_new(const char *src, size_t len, const char *origin,
                    const struct chat_render_vocab *v, struct chat_render **out, char *err,
                    size_t err_len)
{
	*out = NULL;
	struct chat_render *cr = calloc(1, sizeof(*cr));
	if (!cr)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	atomic_init(&cr->refs, 1);
	snprintf(cr->origin, sizeof(cr->origin), "%s", origin);
	cr->source = malloc(len + 1);
	cr->bos_text = dup_or_empty(v->bos_text);
	cr->eos_text = dup_or_empty(v->eos_text);
	cr->add_bos = v->add_bos;
	int rc = 0;
	if (!cr->source || !cr->bos_text || !cr->eos_text) {
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
		goto out;
	}
	memcpy(cr->source, src, len);
	cr->source[len] = '\0';
	cr->source_len = len;
	char msg[SINKD_ERR_LEN];
	rc = jinja_parse(src, len, &cr->tmpl, msg, sizeof(msg));
	if (rc) {
		rc = err_set(err, err_len, rc == JINJA_E_NOMEM ? -ENOMEM : -EINVAL, "%s: %s", origin,
		             msg);
		goto out;
	}
	cr->developer_role = strstr(cr->source, "developer") != NULL;
	chat_format_detect(cr->source, &cr->format);
	probe_caps(cr);
	*out = cr;
	cr = NULL;
out:
	chat_render_unref(cr);
	return rc;
}

/* Reads a template file whole; origin names it. */
static int read_template_file(const char *path, const char *origin, char **text, size_t *len,
                              char *err, size_t err_len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return err_set(err, err_len, -errno, "%s: cannot open: %s", origin, strerror(errno));
	char *buf = malloc(CHAT_TEMPLATE_MAX_BYTES + 1);
	size_t n = buf ? fread(buf, 1, CHAT_TEMPLATE_MAX_BYTES + 1, f) : 0;
	int bad = buf ? ferror(f) : 0;
	fclose(f);
	if (!buf)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	if (bad || n > CHAT_TEMPLATE_MAX_BYTES) {
		free(buf);
		return err_set(err, err_len, -EINVAL, "%s: %s", origin,
		               bad ? "read error" : "larger than 4 MiB");
	}
	buf[n] = '\0';
	*text = buf;
	*len = n;
	return 0;
}

/* A configured value is template text when it holds a Jinja delimiter: no
 * sensible file name does. */
static bool is_inline_template(const char *value)
{
	return strstr(value, "{{") || strstr(value, "{%");
}

static const char *token_text_or_empty(const struct tokenizer *tok, int32_t id)
{
	const char *s = id >= 0 ? tokenizer_token_text(tok, id) : NULL;
	return s ? s : "";
}

int chat_render_load(const char *config_value, const struct tokenizer *tok,
                     const char *model_label, struct chat_render **out, char *err,
                     size_t err_len)
{
	*out = NULL;
	struct chat_render_vocab v = {.bos_text = token_text_or_empty(tok, tokenizer_bos(tok)),
	                              .eos_text = token_text_or_empty(tok, tokenizer_eos(tok)),
	                              .add_bos = tokenizer_add_bos(tok)};
	char origin[ORIGIN_LEN];
	if (config_value && config_value[0] && is_inline_template(config_value)) {
		return chat_render_new(config_value, strlen(config_value),
		                       "model.chat_template (inline)", &v, out, err, err_len);
	}
	if (config_value && config_value[0]) {
		char *text = NULL;
		size_t len = 0;
		snprintf(origin, sizeof(origin), "model.chat_template (%s)", config_value);
		int rc = read_template_file(config_value, origin, &text, &len, err, err_len);
		if (!rc)
			rc = chat_render_new(text, len, origin, &v, out, err, err_len);
		free(text);
		return rc;
	}
	const char *src = tokenizer_chat_template(tok);
	if (!src || !src[0])
		return 0;
	snprintf(origin, sizeof(origin), "tokenizer.chat_template of %s",
	         model_label ? model_label : "the model");
	return chat_render_new(src, strlen(src), origin, &v, out, err, err_len);
}

struct chat_render *chat_render_ref(struct chat_render *cr)
{
	if (cr)
		atomic_fetch_add(&cr->refs, 1);
	return cr;
}

void chat_render_unref(struct chat_render *cr)
{
	if (!cr || atomic_fetch_sub(&cr->refs, 1) != 1)
		return;
	jinja_template_free(cr->tmpl);
	free(cr->source);
	free(cr->bos_text);
	free(cr->eos_text);
	free(cr);
}

const char *chat_render_source(const struct chat_render *cr, size_t *len)
{
	if (len)
		*len = cr->source_len;
	return cr->source;
}

const struct chat_format *chat_render_format(const struct chat_render *cr)
{
	return &cr->format;
}

const char *chat_render_origin(const struct chat_render *cr)
{
	return cr->origin;
}

const struct chat_render_caps *chat_render_caps(const struct chat_render *cr)
{
	return &cr->caps;
}

/* ---------------------------------------------------------------- messages */

/* Messages as the template sees them, with what the polyfills did. */
struct msg_list {
	cJSON *arr;
	size_t n_held;     /* entries that come from the held messages */
	size_t fold_len;   /* bytes of system text folded into the first user message */
	bool last_results; /* the last entry is a user turn of polyfilled tool results */
};

static bool add_str(cJSON *o, const char *key, const char *s)
{
	return !s || cJSON_AddStringToObject(o, key, s);
}

/* A call's arguments as an object, as Hugging Face passes them (text that
 * is not a JSON object stays a string), or, for a template that can only
 * write them as text (as_text), as JSON text. */
static cJSON *calls_json(const cJSON *calls, bool as_text)
{
	cJSON *copy = cJSON_Duplicate(calls, 1), *c;
	cJSON_ArrayForEach(c, copy)
	{
		cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
		cJSON *args = fn ? cJSON_GetObjectItemCaseSensitive(fn, "arguments") : NULL;
		cJSON *repl = NULL;
		if (!as_text && cJSON_IsString(args))
			repl = cJSON_Parse(args->valuestring);
		else if (as_text && args && !cJSON_IsString(args)) {
			char *text = cJSON_PrintUnformatted(args);
			repl = text ? cJSON_CreateString(text) : NULL;
			free(text);
		}
		if (cJSON_IsObject(repl) || cJSON_IsString(repl))
			cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", repl);
		else
			cJSON_Delete(repl);
	}
	return copy;
}

static char *join3(const char *a, const char *sep, const char *b)
{
	char *s = NULL;
	return asprintf(&s, "%s%s%s", a, sep, b) < 0 ? NULL : s;
}

/* An assistant message's calls written into its content (the template
 * does not render tool_calls): the family's call text after the content,
 * llama-3's alone, as chat_template.c writes them. */
static int calls_as_text(const struct chat_render *cr, const struct api_message *m, char **content,
                         char *err, size_t err_len)
{
	char *calls = NULL;
	int rc = tool_calls_text(cr->format.tools, m->tool_calls, &calls, err, err_len);
	if (rc)
		return rc;
	if (cr->format.tools == TOOL_FORMAT_LLAMA3 || !m->content[0]) {
		*content = calls;
		return 0;
	}
	*content = join3(m->content, cr->format.tools == TOOL_FORMAT_MISTRAL ? "" : "\n", calls);
	free(calls);
	return *content ? 0 : err_set(err, err_len, -ENOMEM, "out of memory");
}

/* A tool result as a user turn (the template does not render role tool);
 * a run of them is one turn joined by "\n", as Qwen2.5's template does. */
static int result_as_user(const struct chat_render *cr, const struct api_message *m,
                          struct msg_list *l, char *err, size_t err_len)
{
	char *res = NULL;
	int rc = tool_result_text(cr->format.tools, m->content, &res, err, err_len);
	if (rc)
		return rc;
	cJSON *last = l->last_results ? cJSON_GetArrayItem(l->arr, cJSON_GetArraySize(l->arr) - 1)
	                              : NULL;
	cJSON *content = last ? cJSON_GetObjectItemCaseSensitive(last, "content") : NULL;
	if (content) {
		char *joined = join3(content->valuestring, "\n", res);
		free(res);
		if (!joined || !cJSON_SetValuestring(content, joined)) {
			free(joined);
			return err_set(err, err_len, -ENOMEM, "out of memory");
		}
		free(joined);
		return 0;
	}
	cJSON *o = cJSON_CreateObject();
	bool ok = o && add_str(o, "role", "user") && add_str(o, "content", res) &&
	          cJSON_AddItemToArray(l->arr, o);
	free(res);
	if (!ok) {
		cJSON_Delete(o);
		return err_set(err, err_len, -ENOMEM, "out of memory");
	}
	l->last_results = true;
	return 0;
}

static int message_add(const struct chat_render *cr, const struct api_message *m,
                       struct msg_list *l, char *err, size_t err_len)
{
	bool tool = !strcmp(m->role, "tool");
	if (tool && !cr->caps.tool_responses)
		return result_as_user(cr, m, l, err, err_len);
	l->last_results = false;
	bool calls = m->tool_calls && cJSON_GetArraySize(m->tool_calls) > 0;
	const char *role = !strcmp(m->role, "developer") && !cr->developer_role ? "system" : m->role;
	char *content = NULL;
	if (calls && !cr->caps.tool_calls) {
		int rc = calls_as_text(cr, m, &content, err, err_len);
		if (rc)
			return rc;
	}
	cJSON *o = cJSON_CreateObject();
	bool ok = o && add_str(o, "role", role) &&
	          add_str(o, "content", content ? content : m->content) &&
	          add_str(o, "name", m->name) && add_str(o, "tool_call_id", m->tool_call_id) &&
	          add_str(o, "reasoning_content", m->reasoning_content);
	free(content);
	if (ok && calls && cr->caps.tool_calls) {
		cJSON *c = calls_json(m->tool_calls, cr->caps.string_arguments);
		ok = c && cJSON_AddItemToObject(o, "tool_calls", c);
		if (!ok)
			cJSON_Delete(c);
	}
	if (!ok || !cJSON_AddItemToArray(l->arr, o)) {
		cJSON_Delete(o);
		return err_set(err, err_len, -ENOMEM, "out of memory");
	}
	return 0;
}

static const char *role_of(const cJSON *m)
{
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
	return cJSON_IsString(r) ? r->valuestring : "";
}

static const char *content_of(const cJSON *m)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
	return cJSON_IsString(c) ? c->valuestring : "";
}

/* The index of the first user message, or -1. */
static int first_user(const cJSON *arr)
{
	int i = 0;
	const cJSON *m;
	cJSON_ArrayForEach(m, arr)
	{
		if (!strcmp(role_of(m), "user"))
			return i;
		i++;
	}
	return -1;
}

/* Inserts (or extends) a system message at the front; an inserted one
 * counts as held with the rest. */
static int system_add_front(struct msg_list *l, const char *text, char *err, size_t err_len)
{
	cJSON *arr = l->arr, *first = cJSON_GetArrayItem(arr, 0);
	if (first && !strcmp(role_of(first), "system")) {
		char *joined = join3(content_of(first), "\n\n", text);
		bool ok = joined && cJSON_ReplaceItemInObjectCaseSensitive(
		                        first, "content", cJSON_CreateString(joined));
		free(joined);
		return ok ? 0 : err_set(err, err_len, -ENOMEM, "out of memory");
	}
	cJSON *o = cJSON_CreateObject();
	if (!o || !add_str(o, "role", "system") || !add_str(o, "content", text) ||
	    !cJSON_InsertItemInArray(arr, 0, o)) {
		cJSON_Delete(o);
		return err_set(err, err_len, -ENOMEM, "out of memory");
	}
	if (l->n_held)
		l->n_held++;
	return 0;
}

/* No system role: the system messages before the first user message go in
 * front of its content, joined and followed by "\n\n" (as chat_template.c
 * does for gemma and mistral). */
static int fold_system(struct msg_list *l, char *err, size_t err_len)
{
	int u = first_user(l->arr);
	if (u <= 0)
		return 0;
	char *sys = strdup("");
	for (int i = 0; sys && i < u; i++) {
		const cJSON *m = cJSON_GetArrayItem(l->arr, i);
		if (strcmp(role_of(m), "system"))
			continue;
		char *next = join3(sys, "", content_of(m));
		free(sys);
		sys = next ? join3(next, "\n\n", "") : NULL;
		free(next);
	}
	cJSON *user = cJSON_GetArrayItem(l->arr, u);
	char *joined = sys ? join3(sys, "", content_of(user)) : NULL;
	bool ok = joined && cJSON_ReplaceItemInObjectCaseSensitive(user, "content",
	                                                           cJSON_CreateString(joined));
	size_t fold = sys ? strlen(sys) : 0;
	free(sys);
	free(joined);
	if (!ok)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	for (int i = u - 1; i >= 0; i--) {
		if (!strcmp(role_of(cJSON_GetArrayItem(l->arr, i)), "system")) {
			cJSON_DeleteItemFromArray(l->arr, i);
			if ((size_t)i < l->n_held)
				l->n_held--;
		}
	}
	l->fold_len = fold;
	return 0;
}

/* The tools in OpenAI's list form. */
static cJSON *tools_json(const struct tool_set *ts)
{
	cJSON *arr = cJSON_CreateArray();
	for (size_t i = 0; arr && i < ts->n_tools; i++) {
		const struct tool_def *t = &ts->tools[i];
		cJSON *o = cJSON_CreateObject(), *fn = cJSON_CreateObject();
		bool ok = o && fn && add_str(o, "type", "function") &&
		          cJSON_AddItemToObject(o, "function", fn);
		if (!ok)
			cJSON_Delete(fn);
		ok = ok && add_str(fn, "name", t->name) && add_str(fn, "description", t->description);
		cJSON *params = ok ? cJSON_Duplicate(t->parameters, 1) : NULL;
		ok = ok && params && cJSON_AddItemToObject(fn, "parameters", params);
		if (ok && !params)
			cJSON_Delete(params);
		if (!ok || !cJSON_AddItemToArray(arr, o)) {
			cJSON_Delete(o);
			cJSON_Delete(arr);
			return NULL;
		}
	}
	return arr;
}

/* A session's next turn without its held messages: they are stood in for
 * by one exchange, so the template's preamble is not written again. */
static int stand_in(struct msg_list *l, char *err, size_t err_len)
{
	cJSON *u = cJSON_CreateObject(), *a = cJSON_CreateObject();
	bool ok = u && a && add_str(u, "role", "user") && add_str(u, "content", ".") &&
	          add_str(a, "role", "assistant") && add_str(a, "content", ".") &&
	          cJSON_AddItemToArray(l->arr, u);
	if (ok)
		u = NULL;
	ok = ok && cJSON_AddItemToArray(l->arr, a);
	if (!ok) {
		cJSON_Delete(u);
		cJSON_Delete(a);
		return err_set(err, err_len, -ENOMEM, "out of memory");
	}
	l->n_held = 2;
	return 0;
}

static int build_messages(const struct chat_render *cr, const struct chat_render_input *in,
                          bool offered, struct msg_list *l, char *err, size_t err_len)
{
	*l = (struct msg_list){.arr = cJSON_CreateArray()};
	if (!l->arr)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	int rc = 0;
	if (in->continuation && in->first_new == 0)
		rc = stand_in(l, err, err_len);
	for (size_t i = 0; i < in->n && !rc; i++) {
		if (in->continuation && i == in->first_new)
			l->last_results = false; /* a held turn is not extended */
		rc = message_add(cr, &in->msgs[i], l, err, err_len);
		if (i + 1 == in->first_new && in->continuation)
			l->n_held = (size_t)cJSON_GetArraySize(l->arr);
	}
	if (!rc && offered && !cr->caps.tools) {
		char *text = NULL;
		rc = tool_prompt_text(cr->format.tools, in->tools, &text, err, err_len);
		if (!rc && text)
			rc = system_add_front(l, text, err, err_len);
		free(text);
	}
	if (!rc && !cr->caps.system_role)
		rc = fold_system(l, err, err_len);
	return rc;
}

/* ---------------------------------------------------------------- the prompt */

/* The first n entries of arr as references (deleting the copy leaves arr
 * whole): a render only reads its messages, so a prompt's several renders
 * need no deep copy each.  An entry the caller changes must be replaced by
 * a real copy first (replace_content). */
static cJSON *head_of(const cJSON *arr, size_t n)
{
	cJSON *h = cJSON_CreateArray();
	cJSON *m;
	size_t i = 0;
	cJSON_ArrayForEach(m, arr)
	{
		if (!h || i++ >= n)
			break;
		if (!cJSON_AddItemReferenceToArray(h, m)) {
			cJSON_Delete(h);
			return NULL;
		}
	}
	return h;
}

/* Entry u of refs (a head_of copy) becomes a real copy with content as its
 * content. */
static bool replace_content(cJSON *refs, int u, const char *content)
{
	cJSON *copy = cJSON_Duplicate(cJSON_GetArrayItem(refs, u), 1);
	if (!copy || !cJSON_ReplaceItemInArray(refs, u, copy)) {
		cJSON_Delete(copy);
		return false;
	}
	return cJSON_ReplaceItemInObjectCaseSensitive(copy, "content", cJSON_CreateString(content));
}

static size_t common_prefix(const char *a, size_t na, const char *b, size_t nb)
{
	size_t i = 0;
	while (i < na && i < nb && a[i] == b[i])
		i++;
	return i;
}

/* Renders messages (taken) with the request's tools (tools_json's, built
 * once for all of a prompt's renders; NULL: none) and variables. */
static int render_with(const struct chat_render *cr, const struct chat_render_input *in,
                       const cJSON *tools, cJSON *messages, bool agp, char **out, size_t *len,
                       char *err, size_t err_len)
{
	cJSON *ref = NULL;
	if (tools && !(ref = cJSON_CreateArrayReference(tools->child))) {
		cJSON_Delete(messages);
		return err_set(err, err_len, -ENOMEM, "out of memory");
	}
	return render_ctx(cr, context_new(cr, messages, ref, agp, in), out, len, err, err_len);
}

/* The common prefix of text and a render of the entries before the first
 * user message (index u), followed, when user_content is not NULL, by that
 * message with user_content as its content; 0 when that render fails. */
static size_t prefix_without_user(const struct chat_render *cr,
                                  const struct chat_render_input *in, const cJSON *tools,
                                  const cJSON *arr, int u, const char *user_content,
                                  const char *text, size_t len)
{
	cJSON *head = head_of(arr, (size_t)u + (user_content ? 1 : 0));
	if (head && user_content && !replace_content(head, u, user_content)) {
		cJSON_Delete(head);
		head = NULL;
	}
	if (!head)
		return 0;
	char err[SINKD_ERR_LEN], *pre = NULL;
	size_t n_pre = 0, end = 0;
	if (render_with(cr, in, tools, head, false, &pre, &n_pre, err, sizeof(err)) == 0)
		end = common_prefix(text, len, pre, n_pre);
	free(pre);
	return end;
}

/* What the template writes before the first user message: the common
 * prefix of the prompt and a render without that message.  Where the
 * system text is not in that part (the template folds it into the first
 * user turn itself, as Gemma 3's does, or sinkd folded it), the render
 * keeps that message with only the folded text (none) as its content. */
static size_t system_part(const struct chat_render *cr, const struct chat_render_input *in,
                          const cJSON *tools, const struct msg_list *l, const char *text,
                          size_t len)
{
	int u = first_user(l->arr);
	if (u < 0)
		return 0;
	if (l->fold_len) {
		char *sys = strndup(content_of(cJSON_GetArrayItem(l->arr, u)), l->fold_len);
		size_t end = sys ? prefix_without_user(cr, in, tools, l->arr, u, sys, text, len) : 0;
		free(sys);
		return end;
	}
	size_t end = prefix_without_user(cr, in, tools, l->arr, u, NULL, text, len);
	const char *sys = u > 0 ? content_of(cJSON_GetArrayItem(l->arr, u - 1)) : "";
	if (sys[0] && !memmem(text, end, sys, strlen(sys)))
		end = prefix_without_user(cr, in, tools, l->arr, u, "", text, len);
	return end;
}

/* The length of the longest common suffix of a[0..na) and b[0..nb). */
static size_t common_suffix(const char *a, size_t na, const char *b, size_t nb)
{
	size_t k = 0;
	while (k < na && k < nb && a[na - 1 - k] == b[nb - 1 - k])
		k++;
	return k;
}

/* A render of arr's first n entries (alone: none) and then a copy of entry
 * n whose content is one stand-in byte, \x01 (\x02 where the real content
 * starts with \x01), so that it differs from the real one at once. */
static int render_probe_turn(const struct chat_render *cr, const struct chat_render_input *in,
                             const cJSON *tools, const cJSON *arr, size_t n, bool alone,
                             char **out, size_t *len)
{
	char err[SINKD_ERR_LEN];
	cJSON *msgs = alone ? cJSON_CreateArray() : head_of(arr, n);
	cJSON *z = cJSON_Duplicate(cJSON_GetArrayItem(arr, (int)n), 1);
	const char *orig = content_of(cJSON_GetArrayItem(arr, (int)n));
	bool ok = msgs && z &&
	          cJSON_ReplaceItemInObjectCaseSensitive(
	              z, "content", cJSON_CreateString(orig[0] == '\x01' ? "\x02" : "\x01")) &&
	          cJSON_AddItemToArray(msgs, z);
	if (!ok) {
		cJSON_Delete(z);
		cJSON_Delete(msgs);
		return -ENOMEM;
	}
	return render_with(cr, in, tools, msgs, false, out, len, err, sizeof(err));
}

/* Where the held messages end in the full prompt.  Where the full prompt
 * starts with the held messages' own render, right after it.  Else the
 * template renders held turns differently once more follow (Qwen3 drops
 * an answered turn's think block, gpt-oss ends a final answer with
 * <|return|> only when it is last): after the common prefix c comes the
 * held turns' rewritten tail, then the first new message's header, then
 * its content (at: found by rendering it in place with a stand-in
 * content).  The header is at most what precedes that content when the
 * message is rendered alone; the split s between tail and header is where
 * the tail ends most like the held render ends (ties: the earliest). */
static size_t held_end(const struct chat_render *cr, const struct chat_render_input *in,
                       const cJSON *tools, const struct msg_list *l, const char *full,
                       size_t n_full, const char *held, size_t n_held)
{
	size_t c = common_prefix(full, n_full, held, n_held);
	if (c == n_held || (size_t)cJSON_GetArraySize(l->arr) <= l->n_held)
		return c;
	char *placed = NULL, *alone = NULL;
	size_t n_placed = 0, n_alone = 0, end = c;
	if (render_probe_turn(cr, in, tools, l->arr, l->n_held, false, &placed, &n_placed) ||
	    render_probe_turn(cr, in, tools, l->arr, l->n_held, true, &alone, &n_alone))
		goto out;
	size_t at = common_prefix(full, n_full, placed, n_placed);
	const char *stand_in = memchr(alone, placed[at < n_placed ? at : 0], n_alone);
	if (at < c || at >= n_placed || (placed[at] != '\x01' && placed[at] != '\x02') ||
	    !stand_in)
		goto out;
	size_t header = common_suffix(full + c, at - c, alone, (size_t)(stand_in - alone));
	size_t best = 0;
	end = at - header;
	for (size_t s = at - header; s <= at; s++) {
		size_t like = common_suffix(full + c, s - c, held + c, n_held - c);
		if (like > best) {
			best = like;
			end = s;
		}
	}
out:
	free(placed);
	free(alone);
	return end;
}

/* A session's next turn: the full conversation's prompt from where the
 * held messages end. */
static int continuation(const struct chat_render *cr, const struct chat_render_input *in,
                        const cJSON *tools, const struct msg_list *l, char **text, size_t *len,
                        char *err, size_t err_len)
{
	char *held = NULL;
	size_t n_held = 0;
	cJSON *head = head_of(l->arr, l->n_held);
	if (!head)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	int rc = render_with(cr, in, tools, head, false, &held, &n_held, err, err_len);
	if (rc) {
		err_prefix(err, err_len, "the messages this session holds");
		return rc;
	}
	size_t end = held_end(cr, in, tools, l, *text, *len, held, n_held);
	free(held);
	memmove(*text, *text + end, *len - end + 1);
	*len -= end;
	return 0;
}

/* A render failure as the client reads it. */
static int render_error(const struct chat_render *cr, int rc, char *err, size_t err_len)
{
	if (rc == JINJA_E_RAISED || rc == -ENOMEM)
		return rc;
	char msg[SINKD_ERR_LEN];
	snprintf(msg, sizeof(msg), "%s", err);
	return err_set(err, err_len, -EINVAL, "the chat template (%s) failed: %s", cr->origin, msg);
}

int chat_render_prompt(const struct chat_render *cr, const struct chat_render_input *in,
                       char **text, size_t *len, size_t *system_end, char *err, size_t err_len)
{
	*text = NULL;
	*len = 0;
	if (system_end)
		*system_end = 0;
	if (in->n == 0)
		return err_set(err, err_len, -EINVAL, "the messages list is empty");
	bool offered = tool_set_offered(in->tools);
	struct msg_list l;
	int rc = build_messages(cr, in, offered, &l, err, err_len);
	cJSON *tools = !rc && offered && cr->caps.tools ? tools_json(in->tools) : NULL;
	cJSON *all = rc ? NULL : head_of(l.arr, (size_t)cJSON_GetArraySize(l.arr));
	if (!rc && (!all || (offered && cr->caps.tools && !tools))) {
		cJSON_Delete(all);
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
	}
	if (!rc)
		rc = render_with(cr, in, tools, all, true, text, len, err, err_len);
	if (!rc && in->continuation)
		rc = continuation(cr, in, tools, &l, text, len, err, err_len);
	else if (!rc && system_end)
		*system_end = system_part(cr, in, tools, &l, *text, *len);
	cJSON_Delete(tools);
	cJSON_Delete(l.arr);
	if (rc) {
		free(*text);
		*text = NULL;
		*len = 0;
		return render_error(cr, rc, err, err_len);
	}
	return 0;
}
