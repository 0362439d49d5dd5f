/* Tool calling: the request's function definitions, and the text each chat
 * family's model reads and writes around them.
 *
 * tool_set_parse validates `tools`, `tool_choice` and `parallel_tool_calls`
 * the way OpenAI does (errors name the field by its full path) and keeps
 * copies, because the request object is freed after parsing.
 *
 * The formats follow each family's reference template as far as a text
 * rendering can: JSON is written with Python's json.dumps spacing (", ",
 * ": "), because that is what the templates' `tojson` showed the model in
 * training.
 *
 *   hermes (chatml: Qwen2.x, Hermes): the tools in the system text inside
 *     <tools></tools>, one {"type": "function", "function": {...}} per line
 *     (Qwen2.5's text); a call is <tool_call>\n{"name", "arguments"}\n
 *     </tool_call>; results come back in a user turn, each inside
 *     <tool_response>\n...\n</tool_response>.
 *   llama-3 (3.1/3.2 JSON tool calling): the tools in the first user
 *     message, each as json.dumps(indent=4); a call is the whole reply
 *     {"name", "parameters"}, maybe after <|python_tag|>; results are
 *     "ipython" turns.
 *   mistral (v3): [AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS] before the last
 *     [INST]; a call is [TOOL_CALLS][{"name", "arguments"}, ...]; results
 *     [TOOL_RESULTS]{"content": ...}[/TOOL_RESULTS].
 *   generic (every other family, and models without a template): the
 *     hermes envelope, with the tools described in plain words in the
 *     system text (GENERIC_* below: the README quotes it).
 *
 * Where the text goes in the prompt is chat_template.c's business; finding
 * calls in generated text is tool_parser.c's.  This module does not
 * compile grammars (src/grammar does, from tool_call_constraint). */
#include "server/tools.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/tool_json.h"
#include "util/errbuf.h"

#define TOOL_NAME_MAX 64 /* OpenAI: ^[a-zA-Z0-9_-]{1,64}$ */

/* ---------------------------------------------------------------- parsing */

static int tool_fail(struct api_error *e, const char *code, const char *param, const char *fmt, ...)
    SINKD_PRINTF(4, 5);
static int tool_fail(struct api_error *e, const char *code, const char *param, const char *fmt, ...)
{
	e->status = 400;
	e->code = code;
	snprintf(e->param, sizeof(e->param), "%s", param);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int tool_oom(struct api_error *e, const char *param)
{
	e->status = 500;
	e->code = "out_of_memory";
	snprintf(e->param, sizeof(e->param), "%s", param);
	snprintf(e->message, sizeof(e->message), "out of memory reading '%s'", param);
	return -ENOMEM;
}

static const char *json_type_name(const cJSON *v)
{
	if (cJSON_IsString(v))
		return "a string";
	if (cJSON_IsNumber(v))
		return "a number";
	if (cJSON_IsBool(v))
		return "a boolean";
	if (cJSON_IsNull(v))
		return "null";
	if (cJSON_IsArray(v))
		return "an array";
	return "an object";
}

static int want_type(struct api_error *e, const char *param, const char *want, const cJSON *got)
{
	return tool_fail(e, "invalid_type", param,
	                 "Invalid type for '%s': expected %s, but got %s instead.", param, want,
	                 json_type_name(got));
}

static int missing(struct api_error *e, const char *param)
{
	return tool_fail(e, "missing_required_parameter", param,
	                 "Missing required parameter: '%s'.", param);
}

static const cJSON *get(const cJSON *o, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* get(), with JSON null read as absent. */
static const cJSON *get_opt(const cJSON *o, const char *key)
{
	const cJSON *v = get(o, key);
	return cJSON_IsNull(v) ? NULL : v;
}

static bool tool_name_valid(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > TOOL_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* "type": "function" of tools[i] or of tool_choice. */
static int check_function_type(const cJSON *o, const char *param, struct api_error *e)
{
	const cJSON *type = get(o, "type");
	if (!type)
		return missing(e, param);
	if (!cJSON_IsString(type))
		return want_type(e, param, "a string", type);
	if (strcmp(type->valuestring, "function"))
		return tool_fail(e, "invalid_value", param,
		                 "Invalid value for '%s': only 'function' is supported, got '%s'.",
		                 param, type->valuestring);
	return 0;
}

static int parse_tool_name(const cJSON *fn, const char *base, const struct tool_set *ts,
                           struct tool_def *d, struct api_error *e)
{
	char param[64];
	snprintf(param, sizeof(param), "%s.name", base);
	const cJSON *name = get(fn, "name");
	if (!name)
		return missing(e, param);
	if (!cJSON_IsString(name))
		return want_type(e, param, "a string", name);
	if (!tool_name_valid(name->valuestring))
		return tool_fail(e, "invalid_value", param,
		                 "Invalid value for '%s': a function name is 1 to 64 of a-z, A-Z, "
		                 "0-9, _ and -.",
		                 param);
	for (size_t k = 0; k < ts->n_tools; k++)
		if (!strcmp(ts->tools[k].name, name->valuestring))
			return tool_fail(
			    e, "invalid_value", param,
			    "Invalid value for '%s': the function name '%s' is used by "
			    "tools[%zu] already.",
			    param, name->valuestring, k);
	d->name = strdup(name->valuestring);
	return d->name ? 0 : tool_oom(e, param);
}

static cJSON *default_parameters(void)
{
	cJSON *o = cJSON_CreateObject();
	if (o && (!cJSON_AddStringToObject(o, "type", "object") ||
	          !cJSON_AddObjectToObject(o, "properties"))) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* description, parameters and strict of the function object fn. */
static int parse_tool_body(const cJSON *fn, const char *base, struct tool_def *d,
                           struct api_error *e)
{
	char param[64];
	const cJSON *desc = get_opt(fn, "description"), *params = get_opt(fn, "parameters");
	const cJSON *strict = get_opt(fn, "strict");
	snprintf(param, sizeof(param), "%s.description", base);
	if (desc && !cJSON_IsString(desc))
		return want_type(e, param, "a string", desc);
	if (desc && !(d->description = strdup(desc->valuestring)))
		return tool_oom(e, param);
	snprintf(param, sizeof(param), "%s.parameters", base);
	if (params && !cJSON_IsObject(params))
		return want_type(e, param, "an object", params);
	d->parameters = params ? cJSON_Duplicate(params, true) : default_parameters();
	if (!d->parameters)
		return tool_oom(e, param);
	snprintf(param, sizeof(param), "%s.strict", base);
	if (strict && !cJSON_IsBool(strict))
		return want_type(e, param, "a boolean", strict);
	d->strict = cJSON_IsTrue(strict);
	return 0;
}

/* tools[i]: chat's {"type", "function": {...}} or the Responses API's flat
 * {"type", "name", ...}.  On error d may hold parts (the caller frees). */
static int parse_tool(const cJSON *t, size_t i, bool responses_api, const struct tool_set *ts,
                      struct tool_def *d, struct api_error *e)
{
	char base[40], param[64]; /* base: "tools[N].function", N < 2^64 */
	snprintf(base, sizeof(base), "tools[%zu]", i);
	if (!cJSON_IsObject(t))
		return want_type(e, base, "an object", t);
	snprintf(param, sizeof(param), "%s.type", base);
	int rc = check_function_type(t, param, e);
	if (rc)
		return rc;
	const cJSON *fn = t;
	if (!responses_api) {
		snprintf(base, sizeof(base), "tools[%zu].function", i);
		fn = get(t, "function");
		if (!fn)
			return missing(e, base);
		if (!cJSON_IsObject(fn))
			return want_type(e, base, "an object", fn);
	}
	rc = parse_tool_name(fn, base, ts, d, e);
	return rc ? rc : parse_tool_body(fn, base, d, e);
}

static int parse_tools(const cJSON *tools, bool responses_api, struct tool_set *ts,
                       struct api_error *e)
{
	if (!cJSON_IsArray(tools))
		return want_type(e, "tools", "an array", tools);
	size_t n = (size_t)cJSON_GetArraySize(tools);
	if (n == 0)
		return 0; /* as no tools (OpenAI refuses [], clients send it) */
	ts->tools = calloc(n, sizeof(*ts->tools));
	if (!ts->tools)
		return tool_oom(e, "tools");
	const cJSON *t;
	cJSON_ArrayForEach(t, tools)
	{
		struct tool_def *d = &ts->tools[ts->n_tools];
		int rc = parse_tool(t, ts->n_tools, responses_api, ts, d, e);
		ts->n_tools++; /* so that deinit frees a partly filled entry */
		if (rc)
			return rc;
	}
	return 0;
}

static int parse_choice_string(const cJSON *c, struct tool_set *ts, struct api_error *e)
{
	static const struct {
		const char *name;
		enum tool_choice_kind kind;
	} kinds[] = {{"auto", TOOL_CHOICE_AUTO},
	             {"none", TOOL_CHOICE_NONE},
	             {"required", TOOL_CHOICE_REQUIRED}};
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		if (!strcmp(c->valuestring, kinds[k].name)) {
			ts->choice = kinds[k].kind;
			return 0;
		}
	}
	return tool_fail(e, "invalid_value", "tool_choice",
	                 "Invalid value for 'tool_choice': expected 'none', 'auto', 'required' or "
	                 "a named function, but got '%s'.",
	                 c->valuestring);
}

/* {"type": "function", "function": {"name"}} (chat) or {"type":
 * "function", "name"} (Responses). */
static int parse_choice_named(const cJSON *c, bool responses_api, struct tool_set *ts,
                              struct api_error *e)
{
	int rc = check_function_type(c, "tool_choice.type", e);
	if (rc)
		return rc;
	const cJSON *fn = c;
	if (!responses_api) {
		fn = get(c, "function");
		if (!fn)
			return missing(e, "tool_choice.function");
		if (!cJSON_IsObject(fn))
			return want_type(e, "tool_choice.function", "an object", fn);
	}
	const char *param = responses_api ? "tool_choice.name" : "tool_choice.function.name";
	const cJSON *name = get(fn, "name");
	if (!name)
		return missing(e, param);
	if (!cJSON_IsString(name))
		return want_type(e, param, "a string", name);
	for (size_t k = 0; k < ts->n_tools; k++) {
		if (!strcmp(ts->tools[k].name, name->valuestring)) {
			ts->choice = TOOL_CHOICE_NAMED;
			ts->named = k;
			return 0;
		}
	}
	return tool_fail(e, "invalid_value", param,
	                 "Invalid value for '%s': no function named '%s' in 'tools'.", param,
	                 name->valuestring);
}

static int parse_choice(const cJSON *request, bool responses_api, struct tool_set *ts,
                        struct api_error *e)
{
	const cJSON *c = get_opt(request, "tool_choice");
	if (!c) {
		ts->choice = ts->n_tools ? TOOL_CHOICE_AUTO : TOOL_CHOICE_NONE;
		return 0;
	}
	if (ts->n_tools == 0)
		return tool_fail(
		    e, "invalid_value", "tool_choice",
		    "Invalid value for 'tool_choice': 'tool_choice' is only allowed when "
		    "'tools' are specified.");
	if (cJSON_IsString(c))
		return parse_choice_string(c, ts, e);
	if (cJSON_IsObject(c))
		return parse_choice_named(c, responses_api, ts, e);
	return want_type(e, "tool_choice", "a string or an object", c);
}

int tool_set_parse(const cJSON *request, bool responses_api, struct tool_set *out,
                   struct api_error *e)
{
	*out = (struct tool_set){.choice = TOOL_CHOICE_NONE, .parallel = true};
	const cJSON *tools = get_opt(request, "tools");
	const cJSON *parallel = get_opt(request, "parallel_tool_calls");
	int rc = tools ? parse_tools(tools, responses_api, out, e) : 0;
	if (!rc)
		rc = parse_choice(request, responses_api, out, e);
	if (!rc && parallel && !cJSON_IsBool(parallel))
		rc = want_type(e, "parallel_tool_calls", "a boolean", parallel);
	if (rc) {
		tool_set_deinit(out);
		return rc;
	}
	out->parallel = !parallel || cJSON_IsTrue(parallel);
	return 0;
}

void tool_set_deinit(struct tool_set *ts)
{
	if (!ts)
		return;
	for (size_t i = 0; i < ts->n_tools; i++) {
		free(ts->tools[i].name);
		free(ts->tools[i].description);
		cJSON_Delete(ts->tools[i].parameters);
	}
	free(ts->tools);
	*ts = (struct tool_set){.choice = TOOL_CHOICE_NONE, .parallel = true};
}

/* ---------------------------------------------------------------- formats */

enum tool_format tool_format_of(enum chat_family fam)
{
	switch (fam) {
	case CHAT_FAMILY_LLAMA3:
		return TOOL_FORMAT_LLAMA3;
	case CHAT_FAMILY_CHATML:
		return TOOL_FORMAT_HERMES;
	case CHAT_FAMILY_MISTRAL:
		return TOOL_FORMAT_MISTRAL;
	default:
		return TOOL_FORMAT_GENERIC;
	}
}

const char *tool_format_name(enum tool_format f)
{
	switch (f) {
	case TOOL_FORMAT_LLAMA3:
		return "llama-3";
	case TOOL_FORMAT_HERMES:
		return "hermes";
	case TOOL_FORMAT_MISTRAL:
		return "mistral";
	case TOOL_FORMAT_DEEPSEEK:
		return "deepseek";
	case TOOL_FORMAT_COMMAND_R:
		return "command-r";
	case TOOL_FORMAT_HARMONY:
		return "harmony";
	case TOOL_FORMAT_MISTRAL_ARGS:
		return "mistral-args";
	case TOOL_FORMAT_DEEPSEEK_V3_1:
		return "deepseek-v3.1";
	default:
		return "generic";
	}
}

bool tool_set_offered(const struct tool_set *ts)
{
	return ts && ts->n_tools > 0 && ts->choice != TOOL_CHOICE_NONE;
}

/* ---------------------------------------------------------------- prompt text */

static const char hermes_head[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char hermes_tail[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";

static const char llama3_head[] =
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\nRespond in the format "
    "{\"name\": function name, \"parameters\": dictionary of argument name and its value}. "
    "Do not use variables.\n\n";

/* The generic text: GENERIC_HEAD, then per tool "## NAME\n", its
 * description and "\n" when it has one, "Arguments: " + the JSON Schema +
 * "\n\n", then GENERIC_TAIL. */
#define GENERIC_HEAD                                                                               \
	"# Tools\n\nYou can call the following tools. Each is given with its name, what it does "  \
	"and the JSON Schema of its arguments.\n\n"
#define GENERIC_TAIL                                                                               \
	"To call a tool, reply with a JSON object holding the tool's name and its arguments "      \
	"within <tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <tool-name>, "              \
	"\"arguments\": <arguments-json-object>}\n</tool_call>\nWrite one such block for each "    \
	"call. The results come back within <tool_response></tool_response> tags. To answer "      \
	"without a tool, reply with plain text."

/* Appends cJSON value v with json.dumps spacing. */
static void put_json(struct tbuf *b, const cJSON *v, int indent)
{
	char *raw = cJSON_PrintUnformatted(v);
	if (!raw) {
		b->oom = true;
		return;
	}
	json_respace(b, raw, strlen(raw), indent);
	cJSON_free(raw);
}

/* {"type": "function", "function": {"name", "description", "parameters"}}:
 * a tool as the templates' `tool | tojson` writes it. */
static void put_tool(struct tbuf *b, const struct tool_def *t, int indent)
{
	struct tbuf raw = {0};
	char *params = cJSON_PrintUnformatted(t->parameters);
	tbuf_put(&raw, "{\"type\":\"function\",\"function\":{\"name\":");
	json_put_string(&raw, t->name);
	if (t->description) {
		tbuf_put(&raw, ",\"description\":");
		json_put_string(&raw, t->description);
	}
	tbuf_put(&raw, ",\"parameters\":");
	tbuf_put(&raw, params ? params : "");
	tbuf_put(&raw, "}}");
	if (!params || raw.oom)
		b->oom = true;
	else
		json_respace(b, raw.p, raw.len, indent);
	cJSON_free(params);
	tbuf_deinit(&raw);
}

static void put_tools_text(struct tbuf *b, enum tool_format f, const struct tool_set *ts)
{
	switch (f) {
	case TOOL_FORMAT_HERMES:
		tbuf_put(b, hermes_head);
		for (size_t i = 0; i < ts->n_tools; i++) {
			tbuf_putc(b, '\n');
			put_tool(b, &ts->tools[i], 0);
		}
		tbuf_put(b, hermes_tail);
		break;
	case TOOL_FORMAT_LLAMA3:
		tbuf_put(b, llama3_head);
		for (size_t i = 0; i < ts->n_tools; i++) {
			put_tool(b, &ts->tools[i], 4);
			tbuf_put(b, "\n\n");
		}
		break;
	case TOOL_FORMAT_MISTRAL:
		tbuf_put(b, "[AVAILABLE_TOOLS][");
		for (size_t i = 0; i < ts->n_tools; i++) {
			if (i)
				tbuf_put(b, ", ");
			put_tool(b, &ts->tools[i], 0);
		}
		tbuf_put(b, "][/AVAILABLE_TOOLS]");
		break;
	default:
		tbuf_put(b, GENERIC_HEAD);
		for (size_t i = 0; i < ts->n_tools; i++) {
			const struct tool_def *t = &ts->tools[i];
			tbuf_put(b, "## ");
			tbuf_put(b, t->name);
			tbuf_putc(b, '\n');
			if (t->description) {
				tbuf_put(b, t->description);
				tbuf_putc(b, '\n');
			}
			tbuf_put(b, "Arguments: ");
			put_json(b, t->parameters, 0);
			tbuf_put(b, "\n\n");
		}
		tbuf_put(b, GENERIC_TAIL);
		break;
	}
}

int tool_prompt_text(enum tool_format f, const struct tool_set *ts, char **out, char *err,
                     size_t err_len)
{
	*out = NULL;
	if (!tool_set_offered(ts))
		return 0;
	struct tbuf b = {0};
	put_tools_text(&b, f, ts);
	*out = tbuf_take(&b);
	return *out ? 0 : err_set(err, err_len, -ENOMEM, "out of memory writing the tools");
}

/* ---------------------------------------------------------------- history */

/* A call's arguments as the model would have written them: JSON re-spaced,
 * anything else (a client's broken text) as a JSON string. */
static void put_arguments(struct tbuf *b, const char *args)
{
	if (json_text_valid(args, strlen(args)))
		json_respace(b, args, strlen(args), 0);
	else
		json_put_string(b, args);
}

static void put_call(struct tbuf *b, enum tool_format f, const char *name, const char *args)
{
	if (f != TOOL_FORMAT_LLAMA3 && f != TOOL_FORMAT_MISTRAL)
		tbuf_put(b, "<tool_call>\n");
	tbuf_put(b, "{\"name\": ");
	json_put_string(b, name);
	tbuf_put(b, f == TOOL_FORMAT_LLAMA3 ? ", \"parameters\": " : ", \"arguments\": ");
	put_arguments(b, args);
	tbuf_putc(b, '}');
	if (f != TOOL_FORMAT_LLAMA3 && f != TOOL_FORMAT_MISTRAL)
		tbuf_put(b, "\n</tool_call>");
}

int tool_calls_text(enum tool_format f, const cJSON *tool_calls, char **out, char *err,
                    size_t err_len)
{
	*out = NULL;
	struct tbuf b = {0};
	if (f == TOOL_FORMAT_MISTRAL)
		tbuf_put(&b, "[TOOL_CALLS][");
	size_t i = 0;
	const cJSON *c;
	cJSON_ArrayForEach(c, tool_calls)
	{
		const cJSON *fn = get(c, "function");
		const cJSON *name = get(fn, "name"), *args = get(fn, "arguments");
		if (!cJSON_IsString(name)) {
			tbuf_deinit(&b);
			return err_set(err, err_len, -EINVAL, "tool call %zu has no function name",
			               i);
		}
		if (i++)
			tbuf_put(&b, f == TOOL_FORMAT_MISTRAL ? ", " : "\n");
		put_call(&b, f, name->valuestring, cJSON_IsString(args) ? args->valuestring : "{}");
	}
	if (f == TOOL_FORMAT_MISTRAL)
		tbuf_putc(&b, ']');
	*out = tbuf_take(&b);
	return *out ? 0 : err_set(err, err_len, -ENOMEM, "out of memory writing tool calls");
}

int tool_result_text(enum tool_format f, const char *content, char **out, char *err, size_t err_len)
{
	struct tbuf b = {0};
	switch (f) {
	case TOOL_FORMAT_LLAMA3:
		tbuf_put(&b, content);
		break;
	case TOOL_FORMAT_MISTRAL:
		/* mistral-common's encoding: the content as JSON when it is JSON */
		tbuf_put(&b, "[TOOL_RESULTS]{\"content\": ");
		put_arguments(&b, content);
		tbuf_put(&b, "}[/TOOL_RESULTS]");
		break;
	default:
		tbuf_put(&b, "<tool_response>\n");
		tbuf_put(&b, content);
		tbuf_put(&b, "\n</tool_response>");
		break;
	}
	*out = tbuf_take(&b);
	return *out ? 0 : err_set(err, err_len, -ENOMEM, "out of memory writing a tool result");
}

/* ---------------------------------------------------------------- constraint */

/* The keys of a call object: the name's and the arguments'; Command-R's
 * calls also carry a "tool_call_id" first. */
struct call_keys {
	const char *name, *args;
	bool with_id;
};

/* {"type": "object", "properties": {"name": {"const"}, key: parameters},
 * "required": ["name", key], "additionalProperties": false} */
static cJSON *call_schema(const struct tool_def *t, const struct call_keys *k)
{
	cJSON *o = cJSON_CreateObject(), *props, *name, *req, *id;
	const char *required[] = {k->name, k->args, "tool_call_id"};
	if (!o || !cJSON_AddStringToObject(o, "type", "object") ||
	    !(props = cJSON_AddObjectToObject(o, "properties")) ||
	    (k->with_id && (!(id = cJSON_AddObjectToObject(props, "tool_call_id")) ||
	                    !cJSON_AddStringToObject(id, "const", "0"))) ||
	    !(name = cJSON_AddObjectToObject(props, k->name)) ||
	    !cJSON_AddStringToObject(name, "const", t->name) ||
	    !cJSON_AddItemToObject(props, k->args, cJSON_Duplicate(t->parameters, true)) ||
	    !(req = cJSON_CreateStringArray(required, k->with_id ? 3 : 2)) ||
	    !cJSON_AddItemToObject(o, "required", req) ||
	    !cJSON_AddFalseToObject(o, "additionalProperties")) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* One call object for the named tool, an anyOf of one per tool for
 * required, so that each name goes with its own arguments. */
static cJSON *choice_schema(const struct tool_set *ts, const struct call_keys *k)
{
	if (ts->choice == TOOL_CHOICE_NAMED || ts->n_tools == 1)
		return call_schema(&ts->tools[ts->choice == TOOL_CHOICE_NAMED ? ts->named : 0], k);
	cJSON *o = cJSON_CreateObject(), *any = cJSON_AddArrayToObject(o, "anyOf");
	if (!any) {
		cJSON_Delete(o);
		return NULL;
	}
	for (size_t i = 0; i < ts->n_tools; i++) {
		cJSON *one = call_schema(&ts->tools[i], k);
		if (!one || !cJSON_AddItemToArray(any, one)) {
			cJSON_Delete(one);
			cJSON_Delete(o);
			return NULL;
		}
	}
	return o;
}

int tool_call_constraint(enum tool_format f, const struct tool_set *ts, char **prefix,
                         cJSON **schema, char **suffix, char *err, size_t err_len)
{
	*prefix = *suffix = NULL;
	*schema = NULL;
	if (!ts || ts->n_tools == 0 ||
	    (ts->choice != TOOL_CHOICE_REQUIRED && ts->choice != TOOL_CHOICE_NAMED))
		return err_set(err, err_len, -EINVAL,
		               "a call is forced only by tool_choice required or a named function");
	const char *pre = "<tool_call>\n", *post = "\n</tool_call>";
	struct call_keys k = {"name", "arguments", false};
	if (f == TOOL_FORMAT_LLAMA3) {
		pre = post = ""; /* the whole reply is the call */
		k.args = "parameters";
	} else if (f == TOOL_FORMAT_MISTRAL) {
		pre = "[TOOL_CALLS][";
		post = "]";
	} else if (f == TOOL_FORMAT_COMMAND_R) {
		pre = "<|START_ACTION|>[";
		post = "]<|END_ACTION|>";
		k = (struct call_keys){"tool_name", "parameters", true};
	}
	*prefix = strdup(pre);
	*suffix = strdup(post);
	*schema = choice_schema(ts, &k);
	if (*prefix && *suffix && *schema)
		return 0;
	free(*prefix);
	free(*suffix);
	cJSON_Delete(*schema);
	*prefix = *suffix = NULL;
	*schema = NULL;
	return err_set(err, err_len, -ENOMEM, "out of memory building the tool call schema");
}

/* ---------------------------------------------------------------- named calls */

/* Formats that write the name outside the JSON: the envelope around one
 * tool's arguments. */
static bool name_outside(enum tool_format f)
{
	return f == TOOL_FORMAT_DEEPSEEK || f == TOOL_FORMAT_HARMONY ||
	       f == TOOL_FORMAT_MISTRAL_ARGS || f == TOOL_FORMAT_DEEPSEEK_V3_1;
}

#define DS_CALLS_BEGIN "<\uff5ctool\u2581calls\u2581begin\uff5c>"
#define DS_CALLS_END "<\uff5ctool\u2581calls\u2581end\uff5c>"
#define DS_CALL_BEGIN "<\uff5ctool\u2581call\u2581begin\uff5c>"
#define DS_CALL_END "<\uff5ctool\u2581call\u2581end\uff5c>"
#define DS_SEP "<\uff5ctool\u2581sep\uff5c>"

static int named_envelope(enum tool_format f, const char *name, char **prefix, char **suffix)
{
	struct tbuf pre = {0}, post = {0};
	if (f == TOOL_FORMAT_DEEPSEEK) {
		tbuf_put(&pre, DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP);
		tbuf_put(&pre, name);
		tbuf_put(&pre, "\n```json\n");
		tbuf_put(&post, "\n```" DS_CALL_END DS_CALLS_END);
	} else if (f == TOOL_FORMAT_DEEPSEEK_V3_1) {
		tbuf_put(&pre, DS_CALLS_BEGIN DS_CALL_BEGIN);
		tbuf_put(&pre, name);
		tbuf_put(&pre, DS_SEP);
		tbuf_put(&post, DS_CALL_END DS_CALLS_END);
	} else if (f == TOOL_FORMAT_MISTRAL_ARGS) {
		tbuf_put(&pre, "[TOOL_CALLS]");
		tbuf_put(&pre, name);
		tbuf_put(&pre, "[ARGS]");
		tbuf_put(&post, "");
	} else {
		tbuf_put(&pre, "<|channel|>commentary to=functions.");
		tbuf_put(&pre, name);
		tbuf_put(&pre, " <|constrain|>json<|message|>");
		tbuf_put(&post, "<|call|>");
	}
	*prefix = tbuf_take(&pre);
	*suffix = tbuf_take(&post);
	return *prefix && *suffix ? 0 : -ENOMEM;
}

void tool_constraint_deinit(struct tool_constraint *c)
{
	for (size_t i = 0; c && i < c->n; i++) {
		free(c->prefix[i]);
		free(c->suffix[i]);
		cJSON_Delete(c->schema[i]);
	}
	if (c) {
		free(c->prefix);
		free(c->suffix);
		free(c->schema);
		*c = (struct tool_constraint){0};
	}
}

static int constraint_alloc(struct tool_constraint *c, size_t n)
{
	c->prefix = calloc(n, sizeof(*c->prefix));
	c->suffix = calloc(n, sizeof(*c->suffix));
	c->schema = calloc(n, sizeof(*c->schema));
	return c->prefix && c->suffix && c->schema ? 0 : -ENOMEM;
}

int tool_constraint_build(enum tool_format f, const struct tool_set *ts,
                          struct tool_constraint *out, char *err, size_t err_len)
{
	*out = (struct tool_constraint){0};
	if (!name_outside(f)) {
		if (constraint_alloc(out, 1))
			goto oom;
		out->n = 1;
		int rc = tool_call_constraint(f, ts, out->prefix, out->schema, out->suffix, err,
		                              err_len);
		if (rc)
			tool_constraint_deinit(out);
		return rc;
	}
	if (!ts || ts->n_tools == 0 ||
	    (ts->choice != TOOL_CHOICE_REQUIRED && ts->choice != TOOL_CHOICE_NAMED))
		return err_set(err, err_len, -EINVAL,
		               "a call is forced only by tool_choice required or a named function");
	size_t first = ts->choice == TOOL_CHOICE_NAMED ? ts->named : 0;
	size_t n = ts->choice == TOOL_CHOICE_NAMED ? 1 : ts->n_tools;
	if (constraint_alloc(out, n))
		goto oom;
	for (size_t i = 0; i < n; i++, out->n++) {
		const struct tool_def *t = &ts->tools[first + i];
		if (named_envelope(f, t->name, &out->prefix[i], &out->suffix[i]) ||
		    !(out->schema[i] = cJSON_Duplicate(t->parameters, true))) {
			out->n++; /* so that deinit frees this one's parts */
			goto oom;
		}
	}
	return 0;
oom:
	tool_constraint_deinit(out);
	return err_set(err, err_len, -ENOMEM, "out of memory building the tool call schema");
}
