/* The model's own chat template as the prompt renderer (chat_render.h):
 * what probing finds in small templates written like the real families
 * (ChatML with tools, Gemma without a system role and with alternating
 * turns), the polyfills a request then gets (system text folded into the
 * first user message, tools, calls and results in the generic tool text of
 * tools.h), Hugging Face's context (arguments as objects, bos/eos,
 * reasoning_effort, chat_template_kwargs), the leading BOS dropped, the
 * pinned system part found by rendering, a session's next turn rendered as
 * what it adds (also when the template rewrites earlier turns, as Qwen3
 * does), the errors, and loading from the config or a real GGUF. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "chat/jinja.h"
#include "model/gguf.h"
#include "server/chat_render.h"
#include "server/tools.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"
#include "testutil.h"

/* ChatML as Qwen writes it: tools in a system turn, calls and results. */
static const char tmpl_chatml_tools[] =
    "{%- if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ "
    "messages[0].content }}\n\n{% endif %}TOOLS:{% for t in tools %}{{ t.function.name "
    "}};{% endfor %}<|im_end|>\n{% elif messages[0].role == 'system' "
    "%}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}{% for m in "
    "messages %}{% if m.role == 'system' and loop.first %}{% elif m.role == 'assistant' "
    "%}<|im_start|>assistant\n{{ m.content }}{% if m.tool_calls %}{% for c in m.tool_calls "
    "%}<tool_call>{{ c.function.name }}:{{ c.function.arguments | tojson }}</tool_call>{% "
    "endfor %}{% endif %}<|im_end|>\n{% elif m.role == 'tool' %}<|im_start|>tool\n{{ "
    "m.content }}<|im_end|>\n{% else %}<|im_start|>{{ m.role }}\n{{ m.content "
    "}}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt "
    "%}<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false "
    "%}<think>\n\n</think>\n\n{% endif %}{% endif %}";

/* Gemma's shape: no system role, turns that must alternate, BOS first. */
static const char tmpl_gemma[] =
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}{{ "
    "raise_exception('System role not supported') }}{% endif %}{% if (m.role == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}<start_of_turn>{{ 'model' if m.role == "
    "'assistant' else m.role }}\n{{ m.content | trim }}<end_of_turn>\n{% endfor %}{% if "
    "add_generation_prompt %}<start_of_turn>model\n{% endif %}";

/* Plain ChatML: a system role, nothing of tools. */
static const char tmpl_chatml[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor "
    "%}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/* Qwen3's habit: the last assistant turn gets an empty think block, earlier
 * ones not, so a conversation's render is not a prefix of a longer one. */
static const char tmpl_think[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' and "
    "loop.last %}<think>\n\n</think>\n\n{{ m.content.lstrip('\\n') }}{% else %}{{ m.content "
    "}}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt "
    "%}<|im_start|>assistant\n{% endif %}";

static const struct chat_render_vocab vocab = {
    .bos_text = "<bos>", .eos_text = "<eos>", .add_bos = true};

static struct chat_render *make(const char *src)
{
	char err[SINKD_ERR_LEN];
	struct chat_render *cr = NULL;
	int rc = chat_render_new(src, strlen(src), "test template", &vocab, &cr, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s", err);
	return cr;
}

static struct api_message msg(const char *role, const char *content)
{
	return (struct api_message){.role = (char *)role,
	                            .content = (char *)content,
	                            .content_len = strlen(content)};
}

/* system, user, assistant, user */
static const struct api_message convo[] = {
    {.role = (char *)"system", .content = (char *)"Be brief.", .content_len = 9},
    {.role = (char *)"user", .content = (char *)"Hi", .content_len = 2},
    {.role = (char *)"assistant", .content = (char *)"Hello", .content_len = 5},
    {.role = (char *)"user", .content = (char *)"Bye", .content_len = 3},
};

/* Renders msgs (no tools, no continuation) and returns the text. */
static char *render(const struct chat_render *cr, const struct chat_render_input *in,
                    size_t *system_end)
{
	char err[SINKD_ERR_LEN], *text = NULL;
	size_t len = 0;
	int rc = chat_render_prompt(cr, in, &text, &len, system_end, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_uint_eq(len, strlen(text));
	return text;
}

static char *render_msgs(const struct chat_render *cr, const struct api_message *m, size_t n,
                         size_t *system_end)
{
	struct chat_render_input in = {.msgs = m, .n = n};
	return render(cr, &in, system_end);
}

/* One tool, get_weather(city). */
static void weather_tools(struct tool_set *ts, enum tool_choice_kind choice)
{
	struct api_error e;
	cJSON *req = cJSON_Parse(
	    "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
	    "\"description\":\"Weather of a city\",\"parameters\":{\"type\":\"object\","
	    "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]}");
	ck_assert_ptr_nonnull(req);
	ck_assert_int_eq(tool_set_parse(req, false, ts, &e), 0);
	ts->choice = choice;
	cJSON_Delete(req);
}

static cJSON *weather_call(const char *args_json_text)
{
	cJSON *calls = cJSON_CreateArray(), *c = cJSON_CreateObject(), *fn = cJSON_CreateObject();
	cJSON_AddStringToObject(c, "id", "call_1");
	cJSON_AddStringToObject(c, "type", "function");
	cJSON_AddStringToObject(fn, "name", "get_weather");
	cJSON_AddStringToObject(fn, "arguments", args_json_text);
	cJSON_AddItemToObject(c, "function", fn);
	cJSON_AddItemToArray(calls, c);
	return calls;
}

START_TEST(test_probe)
{
	struct chat_render *cr = make(tmpl_chatml_tools);
	const struct chat_render_caps *c = chat_render_caps(cr);
	ck_assert(c->system_role && c->tools && c->tool_calls && c->tool_responses);
	ck_assert(!c->alternating);
	chat_render_unref(cr);
	cr = make(tmpl_gemma);
	c = chat_render_caps(cr);
	ck_assert(!c->system_role && !c->tools && !c->tool_calls && !c->tool_responses);
	ck_assert(c->alternating);
	chat_render_unref(cr);
	cr = make(tmpl_chatml);
	c = chat_render_caps(cr);
	ck_assert(c->system_role && !c->tools && !c->tool_calls && c->tool_responses);
	ck_assert(!c->alternating);
	size_t len = 0;
	ck_assert_str_eq(chat_render_source(cr, &len), tmpl_chatml);
	ck_assert_uint_eq(len, strlen(tmpl_chatml));
	ck_assert_str_eq(chat_render_origin(cr), "test template");
	chat_render_unref(cr);
}
END_TEST

/* The template's own output and the pinned part: ChatML's system turn;
 * for a template without a system role (Gemma's shape) the system text in
 * front of the first user message with "\n\n", the BOS the tokenizer adds
 * not written, and the pin up to the folded text (that turn alone trims to
 * "Be brief."). */
START_TEST(test_render_and_system_end)
{
	static const struct {
		const char *tmpl, *want, *pinned;
	} cases[] = {
	    {tmpl_chatml_tools,
	     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
	     "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
	     "<|im_start|>assistant\n",
	     "<|im_start|>system\nBe brief.<|im_end|>\n"},
	    {tmpl_gemma,
	     "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
	     "Hello<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n",
	     "<start_of_turn>user\nBe brief."},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct chat_render *cr = make(cases[i].tmpl);
		size_t se = 99;
		char *t = render_msgs(cr, convo, 4, &se);
		ck_assert_str_eq(t, cases[i].want);
		ck_assert_uint_eq(se, strlen(cases[i].pinned));
		free(t);
		chat_render_unref(cr);
	}
	/* no system message: nothing before the first user turn */
	struct chat_render *cr = make(tmpl_chatml_tools);
	size_t se = 99;
	char *t = render_msgs(cr, convo + 1, 1, &se);
	ck_assert_str_eq(t, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
	ck_assert_uint_eq(se, 0);
	free(t);
	chat_render_unref(cr);
}
END_TEST

/* A template that folds the system text into the first user turn itself
 * (Gemma 3's): the pin still covers that text, found by rendering the
 * first user message with nothing of its own. */
START_TEST(test_system_end_self_folded)
{
	struct chat_render *cr = make(
	    "{% if messages[0].role == 'system' %}{% set prefix = messages[0].content + '\\n\\n' "
	    "%}{% set msgs = messages[1:] %}{% else %}{% set prefix = '' %}{% set msgs = messages "
	    "%}{% endif %}{% for m in msgs %}<start_of_turn>{{ m.role }}\n{{ (prefix if loop.first "
	    "else '') + m.content }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt "
	    "%}<start_of_turn>model\n{% endif %}");
	ck_assert(chat_render_caps(cr)->system_role);
	struct api_message m[] = {msg("system", "Be brief."), msg("user", "Hi")};
	size_t se = 0;
	char *t = render_msgs(cr, m, 2, &se);
	ck_assert_str_eq(t, "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
	ck_assert_uint_eq(se, strlen("<start_of_turn>user\nBe brief.\n\n"));
	free(t);
	chat_render_unref(cr);
}
END_TEST

/* Tools offered to a template that renders them: the template's text; to
 * one that does not: the generic tool prompt in the system text, calls
 * and results as text. */
START_TEST(test_tools)
{
	struct tool_set ts = {0};
	weather_tools(&ts, TOOL_CHOICE_AUTO);
	struct api_message m[] = {msg("system", "Be brief."), msg("user", "Weather?")};
	struct chat_render *cr = make(tmpl_chatml_tools);
	struct chat_render_input in = {.msgs = m, .n = 2, .tools = &ts};
	size_t se = 0;
	char *t = render(cr, &in, &se);
	const char *sys = "<|im_start|>system\nBe brief.\n\nTOOLS:get_weather;<|im_end|>\n";
	ck_assert_uint_eq(se, strlen(sys));
	ck_assert(!strncmp(t, sys, strlen(sys)));
	free(t);
	/* tool_choice none: not offered */
	ts.choice = TOOL_CHOICE_NONE;
	t = render(cr, &in, NULL);
	ck_assert(!strstr(t, "TOOLS:"));
	free(t);
	ts.choice = TOOL_CHOICE_AUTO;
	chat_render_unref(cr);

	cr = make(tmpl_chatml); /* chatml: the hermes tool text */
	char err[SINKD_ERR_LEN], *tools_text = NULL;
	ck_assert_int_eq(tool_prompt_text(TOOL_FORMAT_HERMES, &ts, &tools_text, err, sizeof(err)),
	                 0);
	t = render(cr, &in, &se);
	char want[8192];
	snprintf(want, sizeof(want),
	         "<|im_start|>system\nBe brief.\n\n%s<|im_end|>\n<|im_start|>user\nWeather?"
	         "<|im_end|>\n<|im_start|>assistant\n",
	         tools_text);
	ck_assert_str_eq(t, want);
	ck_assert_uint_eq(se, strstr(want, "<|im_start|>user") - want);
	free(t);
	free(tools_text);
	chat_render_unref(cr);
	tool_set_deinit(&ts);
}
END_TEST

/* Calls and results a template does not render: written as text in the
 * family's generic tool format, results as a user turn. */
START_TEST(test_calls_as_text)
{
	struct chat_render *cr = make(tmpl_gemma);
	struct api_message m[] = {msg("user", "Weather?"), msg("assistant", ""), msg("tool", "sunny"),
	                          msg("tool", "warm")};
	m[1].tool_calls = weather_call("{\"city\":\"Paris\"}");
	m[2].tool_call_id = m[3].tool_call_id = (char *)"call_1";
	char err[SINKD_ERR_LEN], *calls = NULL, *r1 = NULL, *r2 = NULL;
	ck_assert_int_eq(tool_calls_text(TOOL_FORMAT_GENERIC, m[1].tool_calls, &calls, err,
	                                 sizeof(err)),
	                 0);
	ck_assert_int_eq(tool_result_text(TOOL_FORMAT_GENERIC, "sunny", &r1, err, sizeof(err)), 0);
	ck_assert_int_eq(tool_result_text(TOOL_FORMAT_GENERIC, "warm", &r2, err, sizeof(err)), 0);
	char *t = render_msgs(cr, m, 4, NULL);
	char want[4096];
	snprintf(want, sizeof(want),
	         "<start_of_turn>user\nWeather?<end_of_turn>\n<start_of_turn>model\n%s<end_of_turn>\n"
	         "<start_of_turn>user\n%s\n%s<end_of_turn>\n<start_of_turn>model\n",
	         calls, r1, r2);
	ck_assert_str_eq(t, want);
	free(t);
	free(calls);
	free(r1);
	free(r2);
	cJSON_Delete(m[1].tool_calls);
	chat_render_unref(cr);
}
END_TEST

/* Hugging Face passes a call's arguments as an object (text that is not
 * JSON stays a string); reasoning_content, name and tool_call_id reach the
 * template. */
START_TEST(test_context_fields)
{
	struct chat_render *cr = make(tmpl_chatml_tools);
	struct api_message m[] = {msg("user", "Weather?"), msg("assistant", "")};
	m[1].tool_calls = weather_call("{\"city\": \"Paris\"}");
	char *t = render_msgs(cr, m, 2, NULL);
	ck_assert_msg(strstr(t, "<tool_call>get_weather:{\"city\": \"Paris\"}</tool_call>"), "%s", t);
	free(t);
	cJSON_Delete(m[1].tool_calls);
	m[1].tool_calls = weather_call("not json");
	t = render_msgs(cr, m, 2, NULL);
	ck_assert_msg(strstr(t, "<tool_call>get_weather:\"not json\"</tool_call>"), "%s", t);
	free(t);
	cJSON_Delete(m[1].tool_calls);
	chat_render_unref(cr);

	cr = make("{% for m in messages %}{{ m.role }}|{{ m.content }}|{{ m.name }}|{{ "
	          "m.tool_call_id }}|{{ m.reasoning_content }};{% endfor %}");
	struct api_message r[] = {msg("user", "q"), msg("assistant", "a"), msg("tool", "x")};
	r[0].name = (char *)"ann";
	r[1].reasoning_content = (char *)"thought";
	r[2].tool_call_id = (char *)"call_9";
	t = render_msgs(cr, r, 3, NULL);
	ck_assert_str_eq(t, "user|q|ann||;assistant|a|||thought;tool|x||call_9|;");
	free(t);
	chat_render_unref(cr);
}
END_TEST

/* DeepSeek R1's template concatenates a call's arguments to the prompt
 * text: probing finds it, and the arguments reach it as JSON text, not as
 * an object it would write as "[object Map]".  A template that writes them
 * with tojson keeps objects. */
START_TEST(test_string_arguments)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/tests/integration/templates/%s",
	         getenv("SINKD_SOURCE_ROOT"), "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja");
	size_t n = 0;
	char *src = tu_slurp(path, &n);
	ck_assert_msg(src != NULL, "%s", path);
	struct chat_render *cr = make(src);
	free(src);
	ck_assert(chat_render_caps(cr)->tool_calls);
	ck_assert(chat_render_caps(cr)->string_arguments);
	struct api_message m[] = {msg("user", "Weather?"), msg("assistant", ""), msg("tool", "sunny")};
	m[1].tool_calls = weather_call("{\"city\": \"Paris\"}");
	m[2].tool_call_id = (char *)"call_1";
	char *t = render_msgs(cr, m, 3, NULL);
	ck_assert_msg(strstr(t, "get_weather\n```json\n{\"city\": \"Paris\"}\n```"), "%s", t);
	ck_assert_msg(!strstr(t, "[object"), "%s", t);
	free(t);
	cJSON *obj = cJSON_CreateObject();
	cJSON_AddStringToObject(obj, "city", "Oslo");
	cJSON_ReplaceItemInObjectCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(m[1].tool_calls, 0), "function"),
	    "arguments", obj);
	t = render_msgs(cr, m, 3, NULL);
	ck_assert_msg(strstr(t, "```json\n{\"city\":\"Oslo\"}\n```"), "%s", t);
	free(t);
	cJSON_Delete(m[1].tool_calls);
	chat_render_unref(cr);

	cr = make(tmpl_chatml_tools);
	ck_assert(chat_render_caps(cr)->tool_calls);
	ck_assert(!chat_render_caps(cr)->string_arguments);
	chat_render_unref(cr);
}
END_TEST

/* "developer" reads as "system" unless the template knows the role. */
START_TEST(test_developer_role)
{
	struct api_message m[] = {msg("developer", "D"), msg("user", "U")};
	struct chat_render *cr = make("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}");
	char *t = render_msgs(cr, m, 2, NULL);
	ck_assert_str_eq(t, "system:D;user:U;");
	free(t);
	chat_render_unref(cr);
	cr = make("{# developer #}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}");
	t = render_msgs(cr, m, 2, NULL);
	ck_assert_str_eq(t, "developer:D;user:U;");
	free(t);
	chat_render_unref(cr);
}
END_TEST

/* chat_template_kwargs become top-level variables; reasoning_effort too. */
START_TEST(test_kwargs_and_effort)
{
	struct chat_render *cr = make(tmpl_chatml_tools);
	struct api_message m[] = {msg("user", "Hi")};
	cJSON *kw = cJSON_Parse("{\"enable_thinking\": false}");
	struct chat_render_input in = {.msgs = m, .n = 1, .kwargs = kw};
	char *t = render(cr, &in, NULL);
	ck_assert_str_eq(t, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
	                    "</think>\n\n");
	free(t);
	cJSON_Delete(kw);
	kw = cJSON_Parse("{\"enable_thinking\": true}");
	in.kwargs = kw;
	t = render(cr, &in, NULL);
	ck_assert_str_eq(t, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
	free(t);
	cJSON_Delete(kw);
	chat_render_unref(cr);

	cr = make("{{ reasoning_effort | default('unset') }}/{{ custom.depth if custom is defined "
	          "}}/{{ eos_token }}");
	kw = cJSON_Parse("{\"custom\": {\"depth\": 3}}");
	in = (struct chat_render_input){.msgs = m, .n = 1, .kwargs = kw, .reasoning_effort = "high"};
	t = render(cr, &in, NULL);
	ck_assert_str_eq(t, "high/3/<eos>");
	free(t);
	in = (struct chat_render_input){.msgs = m, .n = 1};
	t = render(cr, &in, NULL);
	ck_assert_str_eq(t, "unset//<eos>");
	free(t);
	cJSON_Delete(kw);
	chat_render_unref(cr);
}
END_TEST

/* One leading BOS text goes when the tokenizer adds BOS itself; a later
 * one stays. */
START_TEST(test_bos)
{
	const char *src = "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ bos_token }}{% "
	                  "endfor %}";
	struct api_message m[] = {msg("user", "hi")};
	struct chat_render *cr = make(src);
	char *t = render_msgs(cr, m, 1, NULL);
	ck_assert_str_eq(t, "hi<bos>");
	free(t);
	chat_render_unref(cr);
	struct chat_render_vocab v = vocab;
	v.add_bos = false;
	char err[SINKD_ERR_LEN];
	ck_assert_int_eq(chat_render_new(src, strlen(src), "t", &v, &cr, err, sizeof(err)), 0);
	t = render_msgs(cr, m, 1, NULL);
	ck_assert_str_eq(t, "<bos>hi<bos>");
	free(t);
	chat_render_unref(cr);
}
END_TEST

/* A session's next turn: what the new messages add, after the held ones
 * or a stand-in exchange, with no preamble or BOS again; the same where
 * the template renders the held turns differently once answered. */
START_TEST(test_continuation)
{
	const char *want = "<|im_start|>user\nu2<|im_end|>\n<|im_start|>assistant\n";
	const char *srcs[] = {tmpl_chatml, tmpl_think, tmpl_chatml_tools};
	for (size_t s = 0; s < 3; s++) {
		struct chat_render *cr = make(srcs[s]);
		struct api_message m[] = {msg("system", "S"), msg("user", "u1"),
		                          msg("assistant", "a1"), msg("user", "u2")};
		struct chat_render_input in = {.msgs = m, .n = 4, .continuation = true, .first_new = 3};
		size_t se = 7;
		char *t = render(cr, &in, &se);
		ck_assert_msg(!strcmp(t, want), "template %zu: %s", s, t);
		ck_assert_uint_eq(se, 0);
		free(t);
		in = (struct chat_render_input){.msgs = m + 3, .n = 1, .continuation = true};
		t = render(cr, &in, NULL);
		ck_assert_msg(!strcmp(t, want), "template %zu, stand-in: %s", s, t);
		free(t);
		chat_render_unref(cr);
	}
	/* an answered turn rendered differently at its end too (Qwen3 strips
	 * the reply's leading newlines after the think block) */
	struct chat_render *think = make(tmpl_think);
	struct api_message q[] = {msg("user", "u1"), msg("assistant", "\n\n\n\n"),
	                          msg("user", "u2")};
	struct chat_render_input qi = {.msgs = q, .n = 3, .continuation = true, .first_new = 2};
	char *qt = render(think, &qi, NULL);
	ck_assert_str_eq(qt, want);
	free(qt);
	chat_render_unref(think);
	/* a preamble and turns that end alike, but a last answer ends otherwise
	 * (gpt-oss's <|return|>): the new turn starts at its own header */
	struct chat_render *fin = make(
	    "<|start|>system<|message|>preamble<|end|>{% for m in messages %}<|start|>{{ m.role "
	    "}}<|message|>{{ m.content }}{% if m.role == 'assistant' and loop.last and not "
	    "add_generation_prompt %}<|return|>{% else %}<|end|>{% endif %}{% endfor %}{% if "
	    "add_generation_prompt %}<|start|>assistant{% endif %}");
	struct api_message f[] = {msg("user", "u1"), msg("assistant", "a1"), msg("user", "u2")};
	for (size_t first = 0; first < 3; first += 2) {
		struct chat_render_input fi = {
		    .msgs = f + first, .n = 3 - first, .continuation = true, .first_new = 2 - first};
		qt = render(fin, &fi, NULL);
		ck_assert_str_eq(qt, "<|start|>user<|message|>u2<|end|><|start|>assistant");
		free(qt);
	}
	chat_render_unref(fin);
	/* Gemma's shape keeps its alternation through the stand-in */
	struct chat_render *cr = make(tmpl_gemma);
	struct api_message u = msg("user", "u2");
	struct chat_render_input in = {.msgs = &u, .n = 1, .continuation = true};
	char *t = render(cr, &in, NULL);
	ck_assert_str_eq(t, "<start_of_turn>user\nu2<end_of_turn>\n<start_of_turn>model\n");
	free(t);
	chat_render_unref(cr);
}
END_TEST

START_TEST(test_errors)
{
	char err[SINKD_ERR_LEN], *t = NULL;
	size_t len = 0;
	struct chat_render *cr = NULL;
	const char *bad = "{% if messages %}x";
	ck_assert_int_eq(chat_render_new(bad, strlen(bad), "tokenizer.chat_template of m.gguf",
	                                 &vocab, &cr, err, sizeof(err)),
	                 -EINVAL);
	ck_assert_ptr_null(cr);
	ck_assert_msg(!strncmp(err, "tokenizer.chat_template of m.gguf: 1:", 37), "%s", err);

	cr = make(tmpl_gemma); /* raise_exception: its message */
	struct api_message m[] = {msg("user", "a"), msg("user", "b")};
	struct chat_render_input in = {.msgs = m, .n = 2};
	ck_assert_int_eq(chat_render_prompt(cr, &in, &t, &len, NULL, err, sizeof(err)),
	                 JINJA_E_RAISED);
	ck_assert_str_eq(err, "Conversation roles must alternate user/assistant/user/assistant/...");
	ck_assert_ptr_null(t);
	chat_render_unref(cr);

	cr = make("{{ no_such_function() }}"); /* a call of nothing: where, in which template */
	in.n = 1;
	ck_assert_int_eq(chat_render_prompt(cr, &in, &t, &len, NULL, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "the chat template (test template) failed: 1:"), "%s", err);
	in.n = 0;
	ck_assert_int_eq(chat_render_prompt(cr, &in, &t, &len, NULL, err, sizeof(err)), -EINVAL);
	chat_render_unref(cr);
	ck_assert_int_eq(chat_render_new("a\0b", 3, "t", &vocab, &cr, err, sizeof(err)), -EINVAL);
}
END_TEST

static struct tokenizer *shared_tokenizer(const char *rel, struct gguf_file **f)
{
	char err[SINKD_ERR_LEN];
	struct tokenizer *tok = NULL;
	ck_assert_msg(gguf_open(tu_shared_path(rel), f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(tokenizer_new_from_gguf(*f, &tok, err, sizeof(err)) == 0, "%s", err);
	return tok;
}

/* model.chat_template (inline text or a file) before the GGUF's template;
 * neither: no renderer. */
START_TEST(test_load)
{
	char err[SINKD_ERR_LEN];
	struct gguf_file *f = NULL;
	struct chat_render *cr = NULL;
	struct tokenizer *tok = shared_tokenizer("models/stories260K.gguf", &f);
	ck_assert_int_eq(chat_render_load(NULL, tok, "s.gguf", &cr, err, sizeof(err)), 0);
	ck_assert_ptr_null(cr);
	ck_assert_int_eq(chat_render_load("", tok, "s.gguf", &cr, err, sizeof(err)), 0);
	ck_assert_ptr_null(cr);
	ck_assert_int_eq(chat_render_load("{{ messages[0].content }}", tok, "s.gguf", &cr, err,
	                                  sizeof(err)),
	                 0);
	ck_assert_str_eq(chat_render_origin(cr), "model.chat_template (inline)");
	chat_render_unref(cr);
	ck_assert_int_eq(chat_render_load("{% for %}", tok, "s.gguf", &cr, err, sizeof(err)),
	                 -EINVAL);
	ck_assert_msg(!strncmp(err, "model.chat_template (inline): 1:", 32), "%s", err);
	char path[64];
	tu_temp_file(path, sizeof(path), "chat-render", tmpl_chatml, strlen(tmpl_chatml));
	ck_assert_int_eq(chat_render_load(path, tok, "s.gguf", &cr, err, sizeof(err)), 0);
	char origin[128];
	snprintf(origin, sizeof(origin), "model.chat_template (%s)", path);
	ck_assert_str_eq(chat_render_origin(cr), origin);
	ck_assert_str_eq(chat_render_source(cr, NULL), tmpl_chatml);
	chat_render_unref(cr);
	unlink(path);
	ck_assert_int_lt(chat_render_load(path, tok, "s.gguf", &cr, err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, origin), "%s", err);
	tokenizer_free(tok);
	gguf_close(f);

	/* Phi-3's own template drops system messages: probing finds no system
	 * role, and the system text is folded into the first user turn. */
	tok = shared_tokenizer("vocab/ggml-vocab-phi-3.gguf", &f);
	ck_assert_int_eq(chat_render_load(NULL, tok, "phi-3.gguf", &cr, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(cr);
	ck_assert_str_eq(chat_render_origin(cr), "tokenizer.chat_template of phi-3.gguf");
	ck_assert(!chat_render_caps(cr)->system_role);
	struct api_message m[] = {msg("system", "Be brief."), msg("user", "Hi")};
	size_t se = 0;
	char *t = render_msgs(cr, m, 2, &se);
	ck_assert_msg(strstr(t, "<|user|>\nBe brief.\n\nHi<|end|>\n<|assistant|>\n"), "%s", t);
	ck_assert_uint_gt(se, 0);
	ck_assert_msg(!strncmp(t + se, "Hi<|end|>", 9), "pinned up to %zu of %s", se, t);
	free(t);
	chat_render_unref(cr);
	tokenizer_free(tok);
	gguf_close(f);
}
END_TEST

/* A reference outlives the renderer's owner. */
START_TEST(test_refcount)
{
	struct chat_render *cr = make(tmpl_chatml);
	struct chat_render *held = chat_render_ref(cr);
	chat_render_unref(cr);
	struct api_message m[] = {msg("user", "Hi")};
	char *t = render_msgs(held, m, 1, NULL);
	ck_assert_str_eq(t, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
	free(t);
	chat_render_unref(held);
	chat_render_unref(NULL);
	ck_assert_ptr_null(chat_render_ref(NULL));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("chat_render");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_probe);
	tcase_add_test(tc, test_render_and_system_end);
	tcase_add_test(tc, test_system_end_self_folded);
	tcase_add_test(tc, test_tools);
	tcase_add_test(tc, test_calls_as_text);
	tcase_add_test(tc, test_context_fields);
	tcase_add_test(tc, test_string_arguments);
	tcase_add_test(tc, test_developer_role);
	tcase_add_test(tc, test_kwargs_and_effort);
	tcase_add_test(tc, test_bos);
	tcase_add_test(tc, test_continuation);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_load);
	tcase_add_test(tc, test_refcount);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
