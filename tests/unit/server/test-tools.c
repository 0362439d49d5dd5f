/* Tool calling: tool_set_parse's accept/reject table with the exact error
 * fields, each format's prompt text and whole chat prompt for one fixed
 * tool set (the strings worked out from the reference templates, JSON
 * checked against Python's json.dumps), the streaming parser on rendered
 * calls split at every byte position, the envelopes that are not calls, and
 * the forced call's schema. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/chat_template.h"
#include "server/tools.h"
#include "util/errbuf.h"
#include "testutil.h"

/* ---------------------------------------------------------------- fixtures */

#define T_WEATHER                                                                                  \
	"{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Get the " \
	"weather in a city.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{"      \
	"\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\"]}}}"
#define T_PING "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}"

/* The two tools as json.dumps writes them (checked with Python 3). */
#define J_WEATHER                                                                                  \
	"{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "     \
	"\"Get the weather in a city.\", \"parameters\": {\"type\": \"object\", \"properties\": "  \
	"{\"city\": {\"type\": \"string\"}, \"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": " \
	"[\"city\"]}}}"
#define J_PING                                                                                     \
	"{\"type\": \"function\", \"function\": {\"name\": \"ping\", \"parameters\": {\"type\": "  \
	"\"object\", \"properties\": {}}}}"
#define J4_WEATHER                                                                                 \
	"{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": "                  \
	"\"get_weather\",\n "                                                                      \
	"       \"description\": \"Get the weather in a city.\",\n        \"parameters\": {\n    " \
	" "                                                                                        \
	"       \"type\": \"object\",\n            \"properties\": {\n                \"city\": "  \
	"{\n                    \"type\": \"string\"\n                },\n                "        \
	"\"unit\": {\n                    \"enum\": [\n                        \"c\",\n          " \
	"              \"f\"\n                    ]\n                }\n            },\n         " \
	"   \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}"
#define J4_PING                                                                                    \
	"{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"ping\",\n      " \
	"  "                                                                                       \
	"\"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {}\n  " \
	"   "                                                                                      \
	"   }\n    }\n}"

#define HERMES_TEXT                                                                                \
	"# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are " \
	"provided with function signatures within <tools></tools> XML tags:\n<tools>\n" J_WEATHER  \
	"\n" J_PING                                                                                \
	"\n</tools>\n\nFor each function call, return a json object with function name and "       \
	"arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "             \
	"<function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
#define LLAMA3_TEXT                                                                                \
	"Given the following functions, please respond with a JSON for a function call with its "  \
	"proper arguments that best answers the given prompt.\n\nRespond in the format "           \
	"{\"name\": "                                                                              \
	"function name, \"parameters\": dictionary of argument name and its value}. Do not use "   \
	"variables.\n\n" J4_WEATHER "\n\n" J4_PING "\n\n"
#define MISTRAL_TEXT "[AVAILABLE_TOOLS][" J_WEATHER ", " J_PING "][/AVAILABLE_TOOLS]"
#define GENERIC_TEXT                                                                               \
	"# Tools\n\nYou can call the following tools. Each is given with its name, what it does "  \
	"and the JSON Schema of its arguments.\n\n## get_weather\nGet the weather in a "           \
	"city.\nArguments: {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "          \
	"\"string\"}, \"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}\n\n## "     \
	"ping\nArguments: {\"type\": \"object\", \"properties\": {}}\n\nTo call a tool, reply "    \
	"with a JSON object holding the tool's name and its arguments within "                     \
	"<tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <tool-name>, \"arguments\": "      \
	"<arguments-json-object>}\n</tool_call>\nWrite one such block for each call. The "         \
	"results come back within <tool_response></tool_response> tags. To answer without a "      \
	"tool, reply with plain text."

static const enum tool_format all_formats[] = {TOOL_FORMAT_GENERIC, TOOL_FORMAT_LLAMA3,
                                               TOOL_FORMAT_HERMES, TOOL_FORMAT_MISTRAL};

static cJSON *parse_json(const char *s)
{
	cJSON *j = cJSON_Parse(s);
	ck_assert_msg(j != NULL, "bad test JSON: %s", s);
	return j;
}

static int parse_set(const char *body, bool responses, struct tool_set *ts, struct api_error *e)
{
	cJSON *req = parse_json(body);
	int rc = tool_set_parse(req, responses, ts, e);
	cJSON_Delete(req); /* the set keeps copies */
	return rc;
}

/* get_weather and ping, tool_choice as given (a JSON value or NULL). */
static void fixed_set(struct tool_set *ts, const char *choice, bool parallel)
{
	char body[2048];
	snprintf(body, sizeof(body), "{\"tools\":[" T_WEATHER "," T_PING "]%s%s%s}",
	         choice ? ",\"tool_choice\":" : "", choice ? choice : "",
	         parallel ? "" : ",\"parallel_tool_calls\":false");
	struct api_error e = {0};
	ck_assert_msg(parse_set(body, false, ts, &e) == 0, "%s", e.message);
}

/* ---------------------------------------------------------------- parsing */

START_TEST(test_parse_accept)
{
	struct tool_set ts;
	struct api_error e = {0};
	fixed_set(&ts, NULL, true);
	ck_assert_uint_eq(ts.n_tools, 2);
	ck_assert_int_eq(ts.choice, TOOL_CHOICE_AUTO);
	ck_assert(ts.parallel);
	ck_assert_str_eq(ts.tools[0].name, "get_weather");
	ck_assert_str_eq(ts.tools[0].description, "Get the weather in a city.");
	ck_assert_ptr_null(ts.tools[1].description);
	cJSON *def = parse_json("{\"type\":\"object\",\"properties\":{}}");
	ck_assert(cJSON_Compare(ts.tools[1].parameters, def, true));
	cJSON_Delete(def);
	ck_assert(tool_set_offered(&ts));
	tool_set_deinit(&ts);
	ck_assert_uint_eq(ts.n_tools, 0);
	tool_set_deinit(&ts); /* twice is fine */

	fixed_set(&ts, "\"required\"", false);
	ck_assert_int_eq(ts.choice, TOOL_CHOICE_REQUIRED);
	ck_assert(!ts.parallel);
	tool_set_deinit(&ts);
	fixed_set(&ts, "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}", true);
	ck_assert_int_eq(ts.choice, TOOL_CHOICE_NAMED);
	ck_assert_uint_eq(ts.named, 1);
	tool_set_deinit(&ts);
	fixed_set(&ts, "\"none\"", true);
	ck_assert_int_eq(ts.choice, TOOL_CHOICE_NONE);
	ck_assert_uint_eq(ts.n_tools, 2);
	ck_assert(!tool_set_offered(&ts));
	tool_set_deinit(&ts);
	fixed_set(&ts, "null", true);
	ck_assert_int_eq(ts.choice, TOOL_CHOICE_AUTO);
	tool_set_deinit(&ts);

	/* nothing, or an empty list: no tools */
	const char *none[] = {"{}", "{\"tools\":[]}", "{\"tools\":null}",
	                      "{\"tools\":[],\"parallel_tool_calls\":true}"};
	for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
		ck_assert_int_eq(parse_set(none[i], false, &ts, &e), 0);
		ck_assert_uint_eq(ts.n_tools, 0);
		ck_assert_int_eq(ts.choice, TOOL_CHOICE_NONE);
		ck_assert(!tool_set_offered(&ts));
		tool_set_deinit(&ts);
	}

	/* a 64-character name, strict */
	ck_assert_int_eq(parse_set("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
	                           "\"a123456789b123456789c123456789d123456789e123456789f1234567"
	                           "89-_AB\",\"strict\":true,\"description\":null}}]}",
	                           false, &ts, &e),
	                 0);
	ck_assert_uint_eq(strlen(ts.tools[0].name), 64);
	ck_assert(ts.tools[0].strict);
	tool_set_deinit(&ts);

	/* the Responses API's flat form */
	ck_assert_int_eq(parse_set("{\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\","
	                           "\"description\":\"d\",\"parameters\":{\"type\":\"object\"},"
	                           "\"strict\":true}],\"tool_choice\":{\"type\":\"function\","
	                           "\"name\":\"get_weather\"}}",
	                           true, &ts, &e),
	                 0);
	ck_assert_int_eq(ts.choice, TOOL_CHOICE_NAMED);
	ck_assert_uint_eq(ts.named, 0);
	ck_assert_str_eq(ts.tools[0].description, "d");
	tool_set_deinit(&ts);
}
END_TEST

static const struct {
	const char *body;
	bool responses;
	const char *code, *param;
} rejects[] = {
    {"{\"tools\":{}}", false, "invalid_type", "tools"},
    {"{\"tools\":[1]}", false, "invalid_type", "tools[0]"},
    {"{\"tools\":[{\"function\":{\"name\":\"f\"}}]}", false, "missing_required_parameter",
     "tools[0].type"},
    {"{\"tools\":[{\"type\":3}]}", false, "invalid_type", "tools[0].type"},
    {"{\"tools\":[{\"type\":\"retrieval\"}]}", false, "invalid_value", "tools[0].type"},
    {"{\"tools\":[{\"type\":\"function\"}]}", false, "missing_required_parameter",
     "tools[0].function"},
    {"{\"tools\":[{\"type\":\"function\",\"function\":\"f\"}]}", false, "invalid_type",
     "tools[0].function"},
    {"{\"tools\":[{\"type\":\"function\",\"function\":{}}]}", false, "missing_required_parameter",
     "tools[0].function.name"},
    {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":7}}]}", false, "invalid_type",
     "tools[0].function.name"},
    {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]}", false, "invalid_value",
     "tools[0].function.name"},
    {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get weather\"}}]}", false,
     "invalid_value", "tools[0].function.name"},
    {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a123456789b123456789c12345678"
     "9d123456789e123456789f123456789-_ABC\"}}]}",
     false, "invalid_value", "tools[0].function.name"},
    {"{\"tools\":[" T_PING "," T_WEATHER "," T_PING "]}", false, "invalid_value",
     "tools[2].function.name"},
    {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":5}}]}", false,
     "invalid_type", "tools[0].function.description"},
    {"{\"tools\":[" T_PING ",{\"type\":\"function\",\"function\":{\"name\":\"f\","
     "\"parameters\":\"x\"}}]}",
     false, "invalid_type", "tools[1].function.parameters"},
    {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]}", false,
     "invalid_type", "tools[0].function.parameters"},
    {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":\"yes\"}}]}",
     false, "invalid_type", "tools[0].function.strict"},
    {"{\"tool_choice\":\"auto\"}", false, "invalid_value", "tool_choice"},
    {"{\"tools\":[],\"tool_choice\":\"none\"}", false, "invalid_value", "tool_choice"},
    {"{\"tools\":[" T_PING "],\"tool_choice\":\"always\"}", false, "invalid_value", "tool_choice"},
    {"{\"tools\":[" T_PING "],\"tool_choice\":3}", false, "invalid_type", "tool_choice"},
    {"{\"tools\":[" T_PING "],\"tool_choice\":{\"function\":{\"name\":\"ping\"}}}", false,
     "missing_required_parameter", "tool_choice.type"},
    {"{\"tools\":[" T_PING "],\"tool_choice\":{\"type\":\"web_search\"}}", false, "invalid_value",
     "tool_choice.type"},
    {"{\"tools\":[" T_PING "],\"tool_choice\":{\"type\":\"function\"}}", false,
     "missing_required_parameter", "tool_choice.function"},
    {"{\"tools\":[" T_PING "],\"tool_choice\":{\"type\":\"function\",\"function\":{}}}", false,
     "missing_required_parameter", "tool_choice.function.name"},
    {"{\"tools\":[" T_PING "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
     "\"nope\"}}}",
     false, "invalid_value", "tool_choice.function.name"},
    {"{\"tools\":[" T_PING "],\"parallel_tool_calls\":\"yes\"}", false, "invalid_type",
     "parallel_tool_calls"},
    /* Responses API */
    {"{\"tools\":[" T_PING "]}", true, "missing_required_parameter", "tools[0].name"},
    {"{\"tools\":[{\"type\":\"web_search\"}]}", true, "invalid_value", "tools[0].type"},
    {"{\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":1}]}", true, "invalid_type",
     "tools[0].parameters"},
    {"{\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":{\"type\":"
     "\"function\",\"name\":\"g\"}}",
     true, "invalid_value", "tool_choice.name"},
    {"{\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":{\"type\":"
     "\"function\"}}",
     true, "missing_required_parameter", "tool_choice.name"},
};

START_TEST(test_parse_reject)
{
	for (size_t i = 0; i < sizeof(rejects) / sizeof(rejects[0]); i++) {
		struct tool_set ts;
		struct api_error e = {0};
		int rc = parse_set(rejects[i].body, rejects[i].responses, &ts, &e);
		ck_assert_msg(rc == -EINVAL, "%s: rc %d", rejects[i].body, rc);
		ck_assert_int_eq(e.status, 400);
		ck_assert_msg(!strcmp(e.code, rejects[i].code) &&
		                  !strcmp(e.param, rejects[i].param),
		              "%s: got %s at '%s' (%s), want %s at '%s'", rejects[i].body, e.code,
		              e.param, e.message, rejects[i].code, rejects[i].param);
		ck_assert_msg(strstr(e.message, rejects[i].param) != NULL, "%s", e.message);
		ck_assert_uint_eq(ts.n_tools, 0);
		ck_assert_ptr_null(ts.tools);
		tool_set_deinit(&ts);
	}
}
END_TEST

/* ---------------------------------------------------------------- prompts */

START_TEST(test_format_of)
{
	ck_assert_int_eq(tool_format_of(CHAT_FAMILY_LLAMA3), TOOL_FORMAT_LLAMA3);
	ck_assert_int_eq(tool_format_of(CHAT_FAMILY_CHATML), TOOL_FORMAT_HERMES);
	ck_assert_int_eq(tool_format_of(CHAT_FAMILY_MISTRAL), TOOL_FORMAT_MISTRAL);
	const enum chat_family generic[] = {CHAT_FAMILY_NONE,   CHAT_FAMILY_LLAMA2,
	                                    CHAT_FAMILY_ZEPHYR, CHAT_FAMILY_GEMMA,
	                                    CHAT_FAMILY_PHI3,   CHAT_FAMILY_UNKNOWN};
	for (size_t i = 0; i < sizeof(generic) / sizeof(generic[0]); i++)
		ck_assert_int_eq(tool_format_of(generic[i]), TOOL_FORMAT_GENERIC);
	ck_assert_str_eq(tool_format_name(TOOL_FORMAT_GENERIC), "generic");
	ck_assert_str_eq(tool_format_name(TOOL_FORMAT_LLAMA3), "llama-3");
	ck_assert_str_eq(tool_format_name(TOOL_FORMAT_HERMES), "hermes");
	ck_assert_str_eq(tool_format_name(TOOL_FORMAT_MISTRAL), "mistral");
}
END_TEST

START_TEST(test_prompt_text)
{
	static const struct {
		enum tool_format f;
		const char *want;
	} cases[] = {{TOOL_FORMAT_HERMES, HERMES_TEXT},
	             {TOOL_FORMAT_LLAMA3, LLAMA3_TEXT},
	             {TOOL_FORMAT_MISTRAL, MISTRAL_TEXT},
	             {TOOL_FORMAT_GENERIC, GENERIC_TEXT}};
	struct tool_set ts;
	char err[SINKD_ERR_LEN], *text = NULL;
	fixed_set(&ts, NULL, true);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_int_eq(tool_prompt_text(cases[i].f, &ts, &text, err, sizeof(err)), 0);
		ck_assert_str_eq(text, cases[i].want);
		free(text);
	}
	tool_set_deinit(&ts);
	/* tool_choice none, or no set: nothing */
	fixed_set(&ts, "\"none\"", true);
	text = (char *)1;
	ck_assert_int_eq(tool_prompt_text(TOOL_FORMAT_HERMES, &ts, &text, err, sizeof(err)), 0);
	ck_assert_ptr_null(text);
	ck_assert_int_eq(tool_prompt_text(TOOL_FORMAT_HERMES, NULL, &text, err, sizeof(err)), 0);
	ck_assert_ptr_null(text);
	tool_set_deinit(&ts);
}
END_TEST

/* system, user, an assistant call, its result: with the tools offered. */
static char *render_convo(enum chat_family fam, const struct tool_set *ts, size_t *system_end)
{
	cJSON *calls =
	    parse_json("[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
	               "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]");
	const struct chat_message m[] = {
	    {"system", "You are helpful."},
	    {"user", "Weather in Paris?"},
	    {"assistant", NULL, calls},
	    {"tool", "{\"temp\": 21}"},
	};
	char *out = NULL, err[SINKD_ERR_LEN] = "";
	int rc = chat_template_apply_tools(fam, ts, m, 4, &out, system_end, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s: %s", chat_family_name(fam), err);
	cJSON_Delete(calls);
	return out;
}

#define HERMES_CALL                                                                                \
	"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "                      \
	"\"Paris\"}}\n</tool_call>"
#define HERMES_RESULT "<tool_response>\n{\"temp\": 21}\n</tool_response>"

START_TEST(test_chat_prompts)
{
	static const struct {
		enum chat_family fam;
		const char *want, *system_part;
	} cases[] = {
	    {CHAT_FAMILY_CHATML,
	     "<|im_start|>system\nYou are helpful.\n\n" HERMES_TEXT "<|im_end|>\n<|im_start|>user\n"
	     "Weather in Paris?<|im_end|>\n<|im_start|>assistant\n" HERMES_CALL "<|im_end|>\n"
	     "<|im_start|>user\n" HERMES_RESULT "<|im_end|>\n<|im_start|>assistant\n",
	     "<|im_start|>system\nYou are helpful.\n\n" HERMES_TEXT "<|im_end|>\n"},
	    {CHAT_FAMILY_LLAMA3,
	     "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting "
	     "Knowledge "
	     "Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are helpful.<|eot_id|>"
	     "<|start_header_id|>user<|end_header_id|>\n\n" LLAMA3_TEXT
	     "Weather in Paris?<|eot_id|>"
	     "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", "
	     "\"parameters\": {\"city\": \"Paris\"}}<|eot_id|><|start_header_id|>ipython"
	     "<|end_header_id|>\n\n{\"temp\": 21}<|eot_id|><|start_header_id|>assistant"
	     "<|end_header_id|>\n\n",
	     "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting "
	     "Knowledge "
	     "Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are helpful.<|eot_id|>"},
	    {CHAT_FAMILY_MISTRAL,
	     MISTRAL_TEXT
	     "[INST] You are helpful.\n\nWeather in Paris? [/INST][TOOL_CALLS][{\"name\": "
	     "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]</s>[TOOL_RESULTS]"
	     "{\"content\": {\"temp\": 21}}[/TOOL_RESULTS]",
	     MISTRAL_TEXT "[INST] You are helpful.\n\n"},
	    {CHAT_FAMILY_GEMMA,
	     "<start_of_turn>user\nYou are helpful.\n\n" GENERIC_TEXT "\n\nWeather in Paris?"
	     "<end_of_turn>\n<start_of_turn>model\n" HERMES_CALL
	     "<end_of_turn>\n<start_of_turn>user\n" HERMES_RESULT
	     "<end_of_turn>\n<start_of_turn>model\n",
	     "<start_of_turn>user\nYou are helpful.\n\n" GENERIC_TEXT "\n\n"},
	    {CHAT_FAMILY_NONE,
	     "You are helpful.\n\n" GENERIC_TEXT "\nWeather in Paris?\n" HERMES_CALL
	     "\n" HERMES_RESULT,
	     "You are helpful.\n\n" GENERIC_TEXT "\n"},
	};
	struct tool_set ts;
	fixed_set(&ts, NULL, true);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t end = 0;
		char *got = render_convo(cases[i].fam, &ts, &end);
		ck_assert_str_eq(got, cases[i].want);
		ck_assert_msg(end == strlen(cases[i].system_part) &&
		                  !strncmp(got, cases[i].system_part, end),
		              "%s: system part ends at %zu", chat_family_name(cases[i].fam), end);
		free(got);
	}
	tool_set_deinit(&ts);
}
END_TEST

/* No system message: hermes and llama-3 make the system turn themselves;
 * tool_choice none offers nothing but still writes calls and results. */
START_TEST(test_chat_prompts_no_system)
{
	struct tool_set ts;
	fixed_set(&ts, NULL, true);
	const struct chat_message m[] = {{"user", "  Hi "}};
	char *out = NULL, err[SINKD_ERR_LEN];
	size_t end = 0;
	ck_assert_int_eq(
	    chat_template_apply_tools(CHAT_FAMILY_CHATML, &ts, m, 1, &out, &end, err, sizeof(err)),
	    0);
	ck_assert_str_eq(out, "<|im_start|>system\n" HERMES_TEXT "<|im_end|>\n<|im_start|>user\n  "
	                      "Hi <|im_end|>\n<|im_start|>assistant\n");
	ck_assert_uint_eq(end, strlen("<|im_start|>system\n" HERMES_TEXT "<|im_end|>\n"));
	free(out);
	ck_assert_int_eq(
	    chat_template_apply_tools(CHAT_FAMILY_LLAMA3, &ts, m, 1, &out, NULL, err, sizeof(err)),
	    0);
	ck_assert_str_eq(out, "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
	                      "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
	                      "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n" LLAMA3_TEXT
	                      "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
	free(out);
	/* llama-3 puts the tools in a user message: there must be one */
	const struct chat_message sys_only[] = {{"system", "S"}};
	ck_assert_int_eq(chat_template_apply_tools(CHAT_FAMILY_LLAMA3, &ts, sys_only, 1, &out, NULL,
	                                           err, sizeof(err)),
	                 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "first user message"));
	tool_set_deinit(&ts);

	fixed_set(&ts, "\"none\"", true);
	size_t end_none = 99;
	char *got = render_convo(CHAT_FAMILY_CHATML, &ts, &end_none);
	ck_assert_str_eq(got, "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n"
	                      "Weather in Paris?<|im_end|>\n<|im_start|>assistant\n" HERMES_CALL
	                      "<|im_end|>\n<|im_start|>user\n" HERMES_RESULT "<|im_end|>\n"
	                      "<|im_start|>assistant\n");
	free(got);
	got = render_convo(CHAT_FAMILY_MISTRAL, NULL, NULL);
	ck_assert_str_eq(got,
	                 "[INST] You are helpful.\n\nWeather in Paris? [/INST][TOOL_CALLS]"
	                 "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]</s>"
	                 "[TOOL_RESULTS]{\"content\": {\"temp\": 21}}[/TOOL_RESULTS]");
	free(got);
	tool_set_deinit(&ts);
}
END_TEST

/* Two results in a row, content beside a call, developer as system. */
START_TEST(test_chat_prompts_details)
{
	cJSON *calls = parse_json("[{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":"
	                          "\"ping\",\"arguments\":\"{}\"}},"
	                          "{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":"
	                          "\"get_weather\",\"arguments\":"
	                          "\"not json\"}}]");
	const struct chat_message m[] = {
	    {"developer", "Be brief."}, {"user", "Go"},    {"assistant", "Checking.", calls},
	    {"tool", "pong"},           {"tool", "sunny"},
	};
	char *out = NULL, err[SINKD_ERR_LEN];
	ck_assert_int_eq(
	    chat_template_apply_tools(CHAT_FAMILY_CHATML, NULL, m, 5, &out, NULL, err, sizeof(err)),
	    0);
	ck_assert_str_eq(out,
	                 "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nGo<|im_end|>\n"
	                 "<|im_start|>assistant\nChecking.\n<tool_call>\n{\"name\": \"ping\", "
	                 "\"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
	                 "\"get_weather\", \"arguments\": \"not json\"}\n</tool_call><|im_end|>\n"
	                 "<|im_start|>user\n<tool_response>\npong\n</tool_response>\n"
	                 "<tool_response>\nsunny\n</tool_response><|im_end|>\n"
	                 "<|im_start|>assistant\n");
	free(out);
	/* mistral: calls and results outside the alternation */
	ck_assert_int_eq(chat_template_apply_tools(CHAT_FAMILY_MISTRAL, NULL, m, 5, &out, NULL, err,
	                                           sizeof(err)),
	                 0);
	ck_assert_str_eq(out,
	                 "[INST] Be brief.\n\nGo [/INST]Checking.[TOOL_CALLS][{\"name\": \"ping\", "
	                 "\"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": \"not "
	                 "json\"}]</s>[TOOL_RESULTS]{\"content\": \"pong\"}[/TOOL_RESULTS]"
	                 "[TOOL_RESULTS]{\"content\": \"sunny\"}[/TOOL_RESULTS]");
	free(out);
	/* llama-3 writes the calls alone, one per line */
	ck_assert_int_eq(
	    chat_template_apply_tools(CHAT_FAMILY_LLAMA3, NULL, m, 3, &out, NULL, err, sizeof(err)),
	    0);
	ck_assert_str_eq(out,
	                 "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
	                 "<|start_header_id|>user<|end_header_id|>\n\nGo<|eot_id|>"
	                 "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"ping\", "
	                 "\"parameters\": {}}\n{\"name\": \"get_weather\", \"parameters\": \"not "
	                 "json\"}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
	free(out);
	/* gemma alternates: the results are one user turn */
	ck_assert_int_eq(
	    chat_template_apply_tools(CHAT_FAMILY_GEMMA, NULL, m, 5, &out, NULL, err, sizeof(err)),
	    0);
	free(out);
	/* an assistant message needs content or calls */
	const struct chat_message empty[] = {{"user", "a"}, {"assistant", NULL}};
	ck_assert_int_eq(chat_template_apply_tools(CHAT_FAMILY_CHATML, NULL, empty, 2, &out, NULL,
	                                           err, sizeof(err)),
	                 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "message 1: no content"));
	const struct chat_message odd[] = {{"user", "a"}, {"critic", "b"}};
	ck_assert_int_eq(chat_template_apply_tools(CHAT_FAMILY_CHATML, NULL, odd, 2, &out, NULL,
	                                           err, sizeof(err)),
	                 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "developer, user, assistant or tool"));
	cJSON_Delete(calls);
}
END_TEST

/* ---------------------------------------------------------------- parser */

/* The events of one run, adjacent CONTENT (or ARGS of one call) merged, as
 * the split of the text may cut them anywhere. */
struct rec_event {
	enum tool_event_kind kind;
	int index;
	char id[40], name[80];
	char *text;
	size_t len;
};
struct rec {
	struct rec_event ev[32];
	size_t n;
};

static void rec_cb(void *user, const struct tool_event *ev)
{
	struct rec *r = user;
	ck_assert(ev->kind != TOOL_EV_CONTENT || ev->len > 0);
	struct rec_event *last = r->n ? &r->ev[r->n - 1] : NULL;
	if (last && (ev->kind == TOOL_EV_CONTENT || ev->kind == TOOL_EV_ARGS) &&
	    last->kind == ev->kind && last->index == ev->index) {
		last->text = realloc(last->text, last->len + ev->len + 1);
		memcpy(last->text + last->len, ev->text, ev->len);
		last->len += ev->len;
		last->text[last->len] = '\0';
		return;
	}
	ck_assert_uint_lt(r->n, 32);
	struct rec_event *e = &r->ev[r->n++];
	memset(e, 0, sizeof(*e));
	e->kind = ev->kind;
	e->index = ev->index;
	if (ev->kind == TOOL_EV_CALL_BEGIN) {
		snprintf(e->id, sizeof(e->id), "%s", ev->id);
		snprintf(e->name, sizeof(e->name), "%s", ev->name);
	}
	if (ev->kind == TOOL_EV_CONTENT || ev->kind == TOOL_EV_ARGS) {
		e->text = malloc(ev->len + 1);
		memcpy(e->text, ev->text, ev->len);
		e->text[ev->len] = '\0';
		e->len = ev->len;
	}
}

static void rec_free(struct rec *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->ev[i].text);
	r->n = 0;
}

/* Runs text through a parser in pieces of at most `piece` bytes (0: whole),
 * or, with cut > 0, in the two pieces [0, cut) and [cut, len). */
static int run_parser(enum tool_format f, const struct tool_set *ts, const char *text, size_t piece,
                      size_t cut, struct rec *r)
{
	struct tool_parser *p = NULL;
	ck_assert_int_eq(tool_parser_new(f, ts, &p), 0);
	size_t len = strlen(text);
	r->n = 0;
	if (cut) {
		ck_assert_int_eq(tool_parser_feed(p, text, cut, rec_cb, r), 0);
		ck_assert_int_eq(tool_parser_feed(p, text + cut, len - cut, rec_cb, r), 0);
	} else {
		size_t step = piece ? piece : len;
		for (size_t at = 0; at < len; at += step)
			ck_assert_int_eq(tool_parser_feed(p, text + at,
			                                  len - at < step ? len - at : step, rec_cb,
			                                  r),
			                 0);
	}
	int n = tool_parser_finish(p, rec_cb, r);
	tool_parser_free(p);
	return n;
}

static bool id_ok(const char *id)
{
	if (strncmp(id, "call_", 5) || strlen(id) != 29)
		return false;
	for (const char *c = id + 5; *c; c++)
		if (!strchr("0123456789abcdef", *c))
			return false;
	return true;
}

static void rec_same(const struct rec *a, const struct rec *b, const char *what)
{
	ck_assert_msg(a->n == b->n, "%s: %zu events, want %zu", what, b->n, a->n);
	for (size_t i = 0; i < a->n; i++) {
		const struct rec_event *x = &a->ev[i], *y = &b->ev[i];
		ck_assert_msg(x->kind == y->kind && x->index == y->index, "%s: event %zu", what, i);
		ck_assert_str_eq(x->name, y->name);
		ck_assert_msg(x->len == y->len && (!x->len || !memcmp(x->text, y->text, x->len)),
		              "%s: event %zu text '%s', want '%s'", what, i, y->text ? y->text : "",
		              x->text ? x->text : "");
		if (x->kind == TOOL_EV_CALL_BEGIN)
			ck_assert_msg(id_ok(y->id), "%s: id %s", what, y->id);
	}
}

/* The same events whole, a byte at a time, and cut at every position. */
static int parse_all_splits(enum tool_format f, const struct tool_set *ts, const char *text,
                            struct rec *whole)
{
	int n = run_parser(f, ts, text, 0, 0, whole);
	struct rec r = {0};
	ck_assert_int_eq(run_parser(f, ts, text, 1, 0, &r), n);
	rec_same(whole, &r, "bytewise");
	rec_free(&r);
	for (size_t cut = 1; cut < strlen(text); cut++) {
		ck_assert_int_eq(run_parser(f, ts, text, 0, cut, &r), n);
		char what[64];
		snprintf(what, sizeof(what), "cut at %zu", cut);
		rec_same(whole, &r, what);
		rec_free(&r);
	}
	return n;
}

static void expect_call(const struct rec *r, size_t at, int index, const char *name,
                        const char *args)
{
	ck_assert_uint_ge(r->n, at + 3);
	ck_assert_int_eq(r->ev[at].kind, TOOL_EV_CALL_BEGIN);
	ck_assert_int_eq(r->ev[at].index, index);
	ck_assert_str_eq(r->ev[at].name, name);
	ck_assert_int_eq(r->ev[at + 1].kind, TOOL_EV_ARGS);
	ck_assert_int_eq(r->ev[at + 1].index, index);
	ck_assert_str_eq(r->ev[at + 1].text, args);
	cJSON *j = cJSON_Parse(r->ev[at + 1].text);
	ck_assert_msg(cJSON_IsObject(j), "arguments '%s' do not parse", r->ev[at + 1].text);
	cJSON_Delete(j);
	ck_assert_int_eq(r->ev[at + 2].kind, TOOL_EV_CALL_END);
	ck_assert_int_eq(r->ev[at + 2].index, index);
}

static void expect_content_only(enum tool_format f, const struct tool_set *ts, const char *text)
{
	struct rec r = {0};
	ck_assert_int_eq(parse_all_splits(f, ts, text, &r), 0);
	ck_assert_msg(r.n == 1 && r.ev[0].kind == TOOL_EV_CONTENT, "%s: %zu events", text, r.n);
	ck_assert_str_eq(r.ev[0].text, text);
	rec_free(&r);
}

/* Calls rendered as history come back through the parser unchanged. */
START_TEST(test_round_trip)
{
	cJSON *calls = parse_json(
	    "[{\"id\":\"x\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
	    "\"arguments\":\"{\\\"city\\\":\\\"Paris "
	    "\\\\\\\"centre\\\\\\\"\\\",\\\"unit\\\":\\\"c\\\","
	    "\\\"n\\\":[1.5e3,-0,true,null,{}]}\"}},"
	    "{\"id\":\"y\",\"type\":\"function\",\"function\":{\"name\":\"ping\",\"arguments\":\"{}"
	    "\"}}]");
	const char *args0 = "{\"city\": \"Paris \\\"centre\\\"\", \"unit\": \"c\", \"n\": [1.5e3, "
	                    "-0, true, null, {}]}";
	struct tool_set ts;
	fixed_set(&ts, NULL, true);
	for (size_t i = 0; i < sizeof(all_formats) / sizeof(all_formats[0]); i++) {
		enum tool_format f = all_formats[i];
		char *text = NULL, err[SINKD_ERR_LEN];
		ck_assert_int_eq(tool_calls_text(f, calls, &text, err, sizeof(err)), 0);
		struct rec r = {0};
		ck_assert_msg(parse_all_splits(f, &ts, text, &r) == 2, "%s: %s",
		              tool_format_name(f), text);
		ck_assert_uint_eq(r.n, 6);
		expect_call(&r, 0, 0, "get_weather", args0);
		expect_call(&r, 3, 1, "ping", "{}");
		ck_assert_str_ne(r.ev[0].id, r.ev[3].id);
		rec_free(&r);
		/* with content in front (llama-3: only after <|python_tag|>) */
		char with[1024];
		snprintf(with, sizeof(with), "%s%s",
		         f == TOOL_FORMAT_LLAMA3 ? "<|python_tag|>" : "Let me look.\n", text);
		ck_assert_int_eq(parse_all_splits(f, &ts, with, &r), 2);
		size_t at = f == TOOL_FORMAT_LLAMA3 ? 0 : 1;
		if (at) {
			ck_assert_int_eq(r.ev[0].kind, TOOL_EV_CONTENT);
			ck_assert_str_eq(r.ev[0].text, "Let me look.");
			ck_assert_int_eq(r.ev[0].index, -1);
		}
		expect_call(&r, at, 0, "get_weather", args0);
		expect_call(&r, at + 3, 1, "ping", "{}");
		ck_assert_uint_eq(r.n, at + 6);
		rec_free(&r);
		free(text);
	}
	tool_set_deinit(&ts);
	cJSON_Delete(calls);
}
END_TEST

/* Envelopes that are not calls come out as the text they were. */
START_TEST(test_not_calls)
{
	static const char *const hermes[] = {
	    "<tool_ca",
	    "<tool_call>",
	    "<tool_call>\n{\"name\": \"get_we",
	    "<tool_call>\n{\"arguments\": {\"city\": \"Paris\"}",
	    "<tool_call>\nnot json\n</tool_call>",
	    "<tool_call>\n{\"name\": get_weather}</tool_call>",
	    "<tool_call>\n{\"name\": \"get_weather\"}\n</tool_call>",
	    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": [1]}\n</tool_call>",
	    "<tool_call>\n{\"name\": \"launch_rockets\", \"arguments\": {}}\n</tool_call>",
	    "<tool_call>\n{\"name\": \"pi\\u006eg\", \"arguments\": {}}\n</tool_call>",
	    "a < b <tool and <tool_call no",
	    "Plain text, no calls.\n\n",
	    "  {\"name\": \"ping\", \"arguments\": {}}",
	};
	struct tool_set ts;
	fixed_set(&ts, NULL, true);
	for (size_t i = 0; i < sizeof(hermes) / sizeof(hermes[0]); i++) {
		expect_content_only(TOOL_FORMAT_HERMES, &ts, hermes[i]);
		expect_content_only(TOOL_FORMAT_GENERIC, &ts, hermes[i]);
	}
	static const char *const llama3[] = {
	    "{\"city\": \"Paris\"}",
	    "{\"name\": \"John\", \"parameters\": {}}",
	    "Here: {\"name\": \"ping\", \"parameters\": {}}",
	    "{\"name\": \"ping\"}",
	    "<|python_tag|>brave_search.call(query=\"x\")",
	    "{\"a\": [1, 2, {\"b\": \"}\"}], \"name\": \"nope\", \"parameters\": {}}",
	};
	for (size_t i = 0; i < sizeof(llama3) / sizeof(llama3[0]); i++)
		expect_content_only(TOOL_FORMAT_LLAMA3, &ts, llama3[i]);
	static const char *const mistral[] = {
	    "[TOOL_CALLS] nope", "[TOOL_CALLS][]", "[TOOL_C",
	    "[TOOL_CALLS][{\"name\": \"nope\", \"arguments\": {}}]", "[INST] hi"};
	for (size_t i = 0; i < sizeof(mistral) / sizeof(mistral[0]); i++)
		expect_content_only(TOOL_FORMAT_MISTRAL, &ts, mistral[i]);
	/* no tool set: nothing is a call */
	expect_content_only(TOOL_FORMAT_HERMES, NULL,
	                    "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>");
	tool_set_deinit(&ts);
}
END_TEST

/* A call cut short, or broken after it began: CALL_END, not complete. */
START_TEST(test_incomplete_calls)
{
	struct tool_set ts;
	fixed_set(&ts, NULL, true);
	struct rec r = {0};
	ck_assert_int_eq(parse_all_splits(TOOL_FORMAT_HERMES, &ts,
	                                  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
	                                  "{\"city\": \"Par",
	                                  &r),
	                 0);
	ck_assert_uint_eq(r.n, 3);
	ck_assert_int_eq(r.ev[0].kind, TOOL_EV_CALL_BEGIN);
	ck_assert_str_eq(r.ev[1].text, "{\"city\": \"Par");
	ck_assert_int_eq(r.ev[2].kind, TOOL_EV_CALL_END);
	rec_free(&r);
	/* broken: the rest is text again */
	ck_assert_int_eq(
	    parse_all_splits(TOOL_FORMAT_HERMES, &ts,
	                     "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"a\": "
	                     "]}\n</tool_call>",
	                     &r),
	    0);
	ck_assert_uint_eq(r.n, 4);
	ck_assert_str_eq(r.ev[1].text, "{\"a\": ");
	ck_assert_int_eq(r.ev[2].kind, TOOL_EV_CALL_END);
	ck_assert_str_eq(r.ev[3].text, "]}\n</tool_call>");
	rec_free(&r);
	tool_set_deinit(&ts);
}
END_TEST

START_TEST(test_parallel)
{
	const char *two = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n"
	                  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
	                  "\"Oslo\"}}\n</tool_call>\nDone.";
	struct tool_set ts;
	struct rec r = {0};
	fixed_set(&ts, NULL, true);
	ck_assert_int_eq(parse_all_splits(TOOL_FORMAT_HERMES, &ts, two, &r), 2);
	ck_assert_uint_eq(r.n, 7);
	expect_call(&r, 0, 0, "ping", "{}");
	expect_call(&r, 3, 1, "get_weather", "{\"city\": \"Oslo\"}");
	ck_assert_str_eq(r.ev[6].text, "Done.");
	rec_free(&r);
	/* llama-3: bare objects separated by ';', arguments before the name,
	 * other members (a number right before '}') ignored */
	ck_assert_int_eq(parse_all_splits(TOOL_FORMAT_LLAMA3, &ts,
	                                  "  {\"name\": \"ping\", \"parameters\": {}, \"n\": 12}; "
	                                  "{\"parameters\": {\"city\": \"Rome\"}, \"id\": -1.5, "
	                                  "\"name\": \"get_weather\"}",
	                                  &r),
	                 2);
	ck_assert_uint_eq(r.n, 6);
	expect_call(&r, 0, 0, "ping", "{}");
	expect_call(&r, 3, 1, "get_weather", "{\"city\": \"Rome\"}");
	rec_free(&r);
	/* mistral: a list, an id member */
	ck_assert_int_eq(parse_all_splits(TOOL_FORMAT_MISTRAL, &ts,
	                                  "[TOOL_CALLS] [{\"name\": \"ping\", \"arguments\": {}, "
	                                  "\"id\": \"abc123def\"}, {\"name\": \"ping\", "
	                                  "\"arguments\": {\"x\": 1}}]",
	                                  &r),
	                 2);
	expect_call(&r, 3, 1, "ping", "{\"x\": 1}");
	rec_free(&r);
	tool_set_deinit(&ts);

	/* parallel_tool_calls false: the first call only */
	fixed_set(&ts, NULL, false);
	ck_assert_int_eq(parse_all_splits(TOOL_FORMAT_HERMES, &ts, two, &r), 1);
	ck_assert_uint_eq(r.n, 4);
	expect_call(&r, 0, 0, "ping", "{}");
	ck_assert_str_eq(r.ev[3].text, "Done.");
	rec_free(&r);
	tool_set_deinit(&ts);
}
END_TEST

/* ---------------------------------------------------------------- constraint */

static const cJSON *member(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	ck_assert_msg(v != NULL, "no '%s'", key);
	return v;
}

static void check_call_schema(const cJSON *s, const struct tool_def *t, const char *key)
{
	ck_assert_str_eq(member(s, "type")->valuestring, "object");
	const cJSON *props = member(s, "properties");
	ck_assert_int_eq(cJSON_GetArraySize(props), 2);
	ck_assert_str_eq(props->child->string, "name"); /* the name comes out first */
	ck_assert_str_eq(member(member(props, "name"), "const")->valuestring, t->name);
	ck_assert(cJSON_Compare(member(props, key), t->parameters, true));
	const cJSON *req = member(s, "required");
	ck_assert_int_eq(cJSON_GetArraySize(req), 2);
	ck_assert_str_eq(cJSON_GetArrayItem(req, 0)->valuestring, "name");
	ck_assert_str_eq(cJSON_GetArrayItem(req, 1)->valuestring, key);
	ck_assert(cJSON_IsFalse(member(s, "additionalProperties")));
}

START_TEST(test_constraint)
{
	struct tool_set ts;
	char *prefix, *suffix, err[SINKD_ERR_LEN];
	cJSON *schema;
	fixed_set(&ts, "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}", true);
	ck_assert_int_eq(tool_call_constraint(TOOL_FORMAT_HERMES, &ts, &prefix, &schema, &suffix,
	                                      err, sizeof(err)),
	                 0);
	ck_assert_str_eq(prefix, "<tool_call>\n");
	ck_assert_str_eq(suffix, "\n</tool_call>");
	check_call_schema(schema, &ts.tools[0], "arguments");
	free(prefix);
	free(suffix);
	cJSON_Delete(schema);
	tool_set_deinit(&ts);

	/* three tools, required: one branch per tool */
	struct api_error e = {0};
	ck_assert_int_eq(parse_set("{\"tools\":[" T_WEATHER "," T_PING ",{\"type\":\"function\","
	                           "\"function\":{\"name\":\"add\",\"parameters\":{\"type\":"
	                           "\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}],"
	                           "\"tool_choice\":\"required\"}",
	                           false, &ts, &e),
	                 0);
	static const struct {
		enum tool_format f;
		const char *prefix, *suffix, *key;
	} fmts[] = {{TOOL_FORMAT_GENERIC, "<tool_call>\n", "\n</tool_call>", "arguments"},
	            {TOOL_FORMAT_LLAMA3, "", "", "parameters"},
	            {TOOL_FORMAT_MISTRAL, "[TOOL_CALLS][", "]", "arguments"}};
	for (size_t k = 0; k < sizeof(fmts) / sizeof(fmts[0]); k++) {
		ck_assert_int_eq(tool_call_constraint(fmts[k].f, &ts, &prefix, &schema, &suffix,
		                                      err, sizeof(err)),
		                 0);
		ck_assert_str_eq(prefix, fmts[k].prefix);
		ck_assert_str_eq(suffix, fmts[k].suffix);
		const cJSON *any = member(schema, "anyOf");
		ck_assert_int_eq(cJSON_GetArraySize(any), 3);
		for (int i = 0; i < 3; i++)
			check_call_schema(cJSON_GetArrayItem(any, i), &ts.tools[i], fmts[k].key);
		free(prefix);
		free(suffix);
		cJSON_Delete(schema);
	}
	tool_set_deinit(&ts);

	/* auto forces nothing */
	fixed_set(&ts, NULL, true);
	ck_assert_int_eq(tool_call_constraint(TOOL_FORMAT_HERMES, &ts, &prefix, &schema, &suffix,
	                                      err, sizeof(err)),
	                 -EINVAL);
	ck_assert_ptr_null(schema);
	tool_set_deinit(&ts);
}
END_TEST

/* A forced call, as the constraint makes the model write it, parses. */
START_TEST(test_constraint_output_parses)
{
	struct tool_set ts;
	fixed_set(&ts, "\"required\"", true);
	for (size_t i = 0; i < sizeof(all_formats) / sizeof(all_formats[0]); i++) {
		char *prefix, *suffix, err[SINKD_ERR_LEN], text[256];
		cJSON *schema;
		ck_assert_int_eq(tool_call_constraint(all_formats[i], &ts, &prefix, &schema,
		                                      &suffix, err, sizeof(err)),
		                 0);
		const char *key = all_formats[i] == TOOL_FORMAT_LLAMA3 ? "parameters" : "arguments";
		snprintf(text, sizeof(text),
		         "%s{\"name\":\"get_weather\",\"%s\":{\"city\":\"Lima\"}}%s", prefix, key,
		         suffix);
		struct rec r = {0};
		ck_assert_int_eq(parse_all_splits(all_formats[i], &ts, text, &r), 1);
		ck_assert_uint_eq(r.n, 3);
		expect_call(&r, 0, 0, "get_weather", "{\"city\":\"Lima\"}");
		rec_free(&r);
		free(prefix);
		free(suffix);
		cJSON_Delete(schema);
	}
	tool_set_deinit(&ts);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tools");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_parse_accept);
	tcase_add_test(tc, test_parse_reject);
	tcase_add_test(tc, test_format_of);
	tcase_add_test(tc, test_prompt_text);
	tcase_add_test(tc, test_chat_prompts);
	tcase_add_test(tc, test_chat_prompts_no_system);
	tcase_add_test(tc, test_chat_prompts_details);
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_not_calls);
	tcase_add_test(tc, test_incomplete_calls);
	tcase_add_test(tc, test_parallel);
	tcase_add_test(tc, test_constraint);
	tcase_add_test(tc, test_constraint_output_parses);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
