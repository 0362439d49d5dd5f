/* The Responses API's request and response: the body checked as strict
 * JSON and read into gen_args (input items as chat messages, text.format as
 * the response format, tools in the flat form), response ids, the response
 * object and its stream of events.  Each event is built in one place and
 * goes both to the stream and into the whole object, so that what a
 * streaming client adds up is what stream:false returns.  It does not
 * tokenize or render prompts (api_responses.c) and does not own
 * connections (genstream.c). */
#include "session/session_key.h"
#include "server/responses.h"

#include <errno.h>
#include <math.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai.h"
#include "util/digest.h"
#include "util/errbuf.h"

#define RESPONSE_ID_ARG_MAX 128
#define RESP_RANDOM_HEX 24

/* ---- fields ------------------------------------------------------------------- */

static const char *const body_keys[] = {"model",
                                        "input",
                                        "instructions",
                                        "max_output_tokens",
                                        "temperature",
                                        "top_p",
                                        "stream",
                                        "text",
                                        "tools",
                                        "tool_choice",
                                        "parallel_tool_calls",
                                        "previous_response_id",
                                        "store",
                                        "metadata",
                                        "user",
                                        "truncation",
                                        "service_tier",
                                        "background",
                                        "include",
                                        "reasoning",
                                        "prompt",
                                        "conversation",
                                        "chat_template_kwargs",
                                        "structured_outputs",
                                        "guided_regex",
                                        "reasoning_format",
                                        NULL};
static const char *const message_item_keys[] = {"type", "role", "content", "id", "status", NULL};
static const char *const call_item_keys[] = {"type", "call_id", "name", "arguments",
                                             "id",   "status",  NULL};
static const char *const output_item_keys[] = {"type", "call_id", "output", "id", "status", NULL};
static const char *const part_keys[] = {"type", "text", NULL};
static const char *const text_keys[] = {"format", "verbosity", NULL};
static const char *const format_keys[] = {"type", "name", "schema", "strict", "description", NULL};

/* A known key given twice: param and message name its path. */
static int no_twice(const cJSON *o, const char *const *keys, const char *param, struct api_error *e)
{
	return request_fields_no_twice(o, keys, param, REQUEST_DUP_AS_PATH, e);
}

/* A required string field of an input item; param gets its path. */
static const cJSON *item_string(const cJSON *it, const char *key, const char *where, char *param,
                                size_t cap, struct api_error *e)
{
	const cJSON *v = request_field(it, key);
	snprintf(param, cap, "%s.%s", where, key);
	if (!v) {
		request_fail(e, param, "missing_required_parameter", "'%s' is required", param);
		return NULL;
	}
	if (!cJSON_IsString(v)) {
		request_fail(e, param, "invalid_type", "'%s' must be a string", param);
		return NULL;
	}
	return v;
}

/* ---- input ------------------------------------------------------------------------ */

/* The next message of a->messages (allocated for every item up front). */
static struct api_message *msg_next(struct gen_args *a, const char *role, struct api_error *e,
                                    const char *param)
{
	struct api_message *m = &a->messages[a->n_messages++];
	m->role = strdup(role);
	if (!m->role) {
		request_fail_oom(e, param);
		return NULL;
	}
	return m;
}

/* content: a string, or text parts [{"type":"input_text"|"output_text","text"}]
 * joined (as chat's parts are).  Images, files and audio are refused. */
static int content_text(const cJSON *c, const char *where, char **out, size_t *out_len,
                        struct api_error *e)
{
	char param[64], *s = NULL;
	size_t len = 0, cap = 0, k = 0;
	snprintf(param, sizeof(param), "%s", where);
	if (!c || (!cJSON_IsString(c) && !cJSON_IsArray(c)))
		return request_fail(e, param, c ? "invalid_type" : "missing_required_parameter",
		                    "'%s' must be a string or an array of input_text parts", param);
	int rc = cJSON_IsString(c) &&
	                 request_text_append(&s, &len, &cap, c->valuestring, strlen(c->valuestring))
	             ? -ENOMEM
	             : 0;
	const cJSON *part, *parts = cJSON_IsArray(c) ? c : NULL;
	cJSON_ArrayForEach(part, parts)
	{
		if (rc)
			break;
		snprintf(param, sizeof(param), "%s[%zu]", where, k++);
		const cJSON *type = cJSON_IsObject(part) ? request_field(part, "type") : NULL;
		const cJSON *text = cJSON_IsObject(part) ? request_field(part, "text") : NULL;
		if (!cJSON_IsString(type)) {
			rc = request_fail(e, param, "invalid_type",
			                  "'%s' must be {\"type\":\"input_text\",\"text\":...}",
			                  param);
		} else if (strcmp(type->valuestring, "input_text") &&
		           strcmp(type->valuestring, "output_text")) {
			snprintf(param, sizeof(param), "%s[%zu].type", where, k - 1);
			rc = request_fail(
			    e, param, "unsupported_value",
			    "'%s' is '%.40s': only text parts (input_text, output_text) are "
			    "supported",
			    param, type->valuestring);
		} else if (!cJSON_IsString(text)) {
			snprintf(param, sizeof(param), "%s[%zu].text", where, k - 1);
			rc = request_fail(e, param, "invalid_type", "'%s' must be a string", param);
		} else if (!(rc = no_twice(part, part_keys, param, e))) {
			rc = request_text_append(&s, &len, &cap, text->valuestring,
			                         strlen(text->valuestring))
			         ? -ENOMEM
			         : 0;
		}
	}
	if (!rc && !s && !(s = strdup("")))
		rc = -ENOMEM;
	if (rc == -ENOMEM)
		rc = request_fail_oom(e, where);
	if (rc) {
		free(s);
		return rc;
	}
	*out = s;
	*out_len = len;
	return 0;
}

/* {"type":"message"?, "role", "content"} */
static int item_message(const cJSON *it, const char *where, struct gen_args *a, struct api_error *e)
{
	static const char *const roles[] = {"user", "system", "developer", "assistant"};
	char param[64];
	if (no_twice(it, message_item_keys, where, e))
		return -EINVAL;
	const cJSON *role = item_string(it, "role", where, param, sizeof(param), e);
	if (!role)
		return -EINVAL;
	bool known = false;
	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
		known |= !strcmp(role->valuestring, roles[i]);
	if (!known)
		return request_fail(e, param, "invalid_value",
		                    "'%s' must be user, system, developer or assistant", param);
	struct api_message *m = msg_next(a, role->valuestring, e, param);
	if (!m)
		return -EINVAL;
	snprintf(param, sizeof(param), "%s.content", where);
	return content_text(request_field(it, "content"), param, &m->content, &m->content_len, e);
}

/* The assistant message a function_call item belongs to: the one just
 * before it (its text, or the calls made together), else a new one. */
static struct api_message *call_message(struct gen_args *a, struct api_error *e, const char *param)
{
	struct api_message *last = a->n_messages ? &a->messages[a->n_messages - 1] : NULL;
	if (last && !strcmp(last->role, "assistant"))
		return last;
	struct api_message *m = msg_next(a, "assistant", e, param);
	if (m && !(m->content = strdup(""))) {
		request_fail_oom(e, param);
		return NULL;
	}
	return m;
}

/* {"type":"function_call","call_id","name","arguments"}: a call the
 * assistant made, as chat's tool_calls entry. */
static int item_call(const cJSON *it, const char *where, struct gen_args *a, struct api_error *e)
{
	char param[64];
	const cJSON *call_id, *name, *args;
	if (no_twice(it, call_item_keys, where, e) ||
	    !(call_id = item_string(it, "call_id", where, param, sizeof(param), e)) ||
	    !(name = item_string(it, "name", where, param, sizeof(param), e)) ||
	    !(args = item_string(it, "arguments", where, param, sizeof(param), e)))
		return -EINVAL;
	if (strchr(call_id->valuestring, REQUEST_NUL_STANDIN) ||
	    strchr(name->valuestring, REQUEST_NUL_STANDIN) ||
	    strchr(args->valuestring, REQUEST_NUL_STANDIN) || !*name->valuestring)
		return request_fail(e, where, "invalid_value",
		                    "'%s' must have a non-empty name and no NUL (\\u0000)", where);
	struct api_message *m = call_message(a, e, where);
	if (!m)
		return -EINVAL;
	if (!m->tool_calls && !(m->tool_calls = cJSON_CreateArray()))
		return request_fail_oom(e, where);
	cJSON *call = oa_tool_call(call_id->valuestring, name->valuestring, args->valuestring,
	                           strlen(args->valuestring));
	if (!call || !cJSON_AddItemToArray(m->tool_calls, call)) {
		cJSON_Delete(call);
		return request_fail_oom(e, where);
	}
	return 0;
}

/* {"type":"function_call_output","call_id","output"}: a tool's result. */
static int item_call_output(const cJSON *it, const char *where, struct gen_args *a,
                            struct api_error *e)
{
	char param[64];
	const cJSON *call_id;
	if (no_twice(it, output_item_keys, where, e) ||
	    !(call_id = item_string(it, "call_id", where, param, sizeof(param), e)))
		return -EINVAL;
	struct api_message *m = msg_next(a, "tool", e, param);
	if (!m || request_name_dup(call_id, param, param, &m->tool_call_id, e))
		return -EINVAL;
	snprintf(param, sizeof(param), "%s.output", where);
	return content_text(request_field(it, "output"), param, &m->content, &m->content_len, e);
}

static int input_item(const cJSON *it, size_t i, struct gen_args *a, struct api_error *e)
{
	char where[32], param[64];
	snprintf(where, sizeof(where), "input[%zu]", i);
	if (!cJSON_IsObject(it))
		return request_fail(e, where, "invalid_type",
		                    "'%s' must be an object (an input item)", where);
	const cJSON *type = request_field(it, "type");
	snprintf(param, sizeof(param), "%s.type", where);
	if (type && !cJSON_IsString(type))
		return request_fail(e, param, "invalid_type", "'%s' must be a string", param);
	const char *t = type ? type->valuestring : "message";
	if (!strcmp(t, "message"))
		return item_message(it, where, a, e);
	if (!strcmp(t, "function_call"))
		return item_call(it, where, a, e);
	if (!strcmp(t, "function_call_output"))
		return item_call_output(it, where, a, e);
	if (!strcmp(t, "reasoning"))
		return 0; /* a reply's reasoning sent back: the templates drop past reasoning */
	/* item_reference, built-in tool calls: items kept by OpenAI */
	return request_fail(e, param, "unsupported_value",
	                    "'%s' is '%.40s': supported input items are message, function_call and "
	                    "function_call_output (continue a stored conversation with "
	                    "previous_response_id)",
	                    param, t);
}

/* instructions (a system message first), then input: a string (one user
 * message) or an array of items. */
static int parse_input(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	const cJSON *in = request_field(o, "input"), *ins = request_field(o, "instructions");
	if (!in)
		return request_fail(e, "input", "missing_required_parameter",
		                    "'input' is required");
	if (!cJSON_IsString(in) && (!cJSON_IsArray(in) || !in->child))
		return request_fail(e, "input", "invalid_type",
		                    "'input' must be a string or a non-empty array of input items");
	if (ins && !cJSON_IsString(ins))
		return request_fail(e, "instructions", "invalid_type",
		                    "'instructions' must be a string");
	size_t n = (cJSON_IsArray(in) ? (size_t)cJSON_GetArraySize(in) : 1) + (ins ? 1 : 0);
	if (!(a->messages = calloc(n, sizeof(*a->messages))))
		return request_fail_oom(e, "input");
	if (ins) {
		struct api_message *m = msg_next(a, "system", e, "instructions");
		if (!m ||
		    request_name_dup(ins, "instructions", "instructions", &a->instructions, e))
			return -EINVAL;
		if (!(m->content = request_text_dup(ins, &m->content_len)))
			return request_fail_oom(e, "instructions");
	}
	if (cJSON_IsString(in)) {
		struct api_message *m = msg_next(a, "user", e, "input");
		if (!m || !(m->content = request_text_dup(in, &m->content_len)))
			return request_fail_oom(e, "input");
		return 0;
	}
	size_t i = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, in)
	{
		if (input_item(it, i++, a, e))
			return -EINVAL;
	}
	return 0;
}

/* ---- settings ------------------------------------------------------------------ */

/* text: {"format": {"type":"text"} | {"type":"json_object"} |
 * {"type":"json_schema","name","schema","strict"}}. */
static int parse_text(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	const cJSON *text = request_field(o, "text"), *f;
	if (!text)
		return 0;
	if (!cJSON_IsObject(text))
		return request_fail(e, "text", "invalid_type", "'text' must be an object");
	if (no_twice(text, text_keys, "text", e))
		return -EINVAL;
	if (!(f = request_field(text, "format")))
		return 0;
	if (!cJSON_IsObject(f))
		return request_fail(e, "text.format", "invalid_type",
		                    "'text.format' must be an object");
	if (no_twice(f, format_keys, "text.format", e))
		return -EINVAL;
	return request_response_format(f, "text.format", true, a, e);
}

/* Function tools only: the built-in ones run at OpenAI. */
static int check_tool_types(const cJSON *o, struct api_error *e)
{
	const cJSON *tools = request_field(o, "tools"), *t;
	const cJSON *list = cJSON_IsArray(tools) ? tools : NULL;
	size_t i = 0;
	cJSON_ArrayForEach(t, list)
	{
		const cJSON *type = cJSON_IsObject(t) ? request_field(t, "type") : NULL;
		if (cJSON_IsString(type) && strcmp(type->valuestring, "function")) {
			char param[32];
			snprintf(param, sizeof(param), "tools[%zu].type", i);
			return request_fail(
			    e, param, "unsupported_value",
			    "'%s' is '%.40s': only function tools are supported (built-in "
			    "tools run on OpenAI's servers)",
			    param, type->valuestring);
		}
		i++;
	}
	return 0;
}

static int parse_tools(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	if (check_tool_types(o, e))
		return -EINVAL;
	struct tool_set *ts = calloc(1, sizeof(*ts));
	if (!ts)
		return request_fail_oom(e, "tools");
	int rc = tool_set_parse(o, true, ts, e);
	if (rc || ts->n_tools == 0) {
		tool_set_deinit(ts);
		free(ts);
		return rc;
	}
	a->tools = ts;
	return 0;
}

static bool null_or_absent(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return !v || cJSON_IsNull(v);
}

/* Fields OpenAI has that sinkd does not do: a 400 that says so, rather
 * than an answer that quietly is not what was asked. */
static int check_unsupported(const cJSON *o, struct api_error *e)
{
	static const char *const refused[] = {"prompt", "conversation"};
	const cJSON *bg = request_field(o, "background"), *inc = request_field(o, "include");
	if (bg && !cJSON_IsFalse(bg))
		return request_fail(e, "background", "unsupported_parameter",
		                    "'background' responses are not supported (stream instead)");
	if (inc && (!cJSON_IsArray(inc) || inc->child))
		return request_fail(e, "include", "unsupported_parameter",
		                    "'include' is not supported (no extra output data is kept)");
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		if (request_field(o, refused[i]))
			return request_fail(e, refused[i], "unsupported_parameter",
			                    "'%s' is not supported by this server", refused[i]);
	return 0;
}

/* reasoning: its effort is the chat template's reasoning_effort (where the
 * template has none, gen_prepare refuses it); a summary is not written, as
 * a model that reasons returns its own reasoning as reasoning items. */
static int parse_reasoning(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	static const char *const efforts[] = {"low", "medium", "high"};
	const cJSON *rsn = request_field(o, "reasoning");
	if (!rsn || cJSON_IsNull(rsn))
		return 0;
	if (!cJSON_IsObject(rsn) || !null_or_absent(rsn, "summary"))
		return request_fail(e, "reasoning", "unsupported_parameter",
		                    "'reasoning' takes only an effort here, e.g. {\"effort\": \"low\"}: "
		                    "a model that reasons returns its reasoning as reasoning items as "
		                    "it writes it, not a summary");
	const cJSON *eff = cJSON_GetObjectItemCaseSensitive(rsn, "effort");
	if (!eff || cJSON_IsNull(eff))
		return 0;
	bool known = false;
	for (size_t i = 0; cJSON_IsString(eff) && i < sizeof(efforts) / sizeof(efforts[0]); i++)
		known |= !strcmp(eff->valuestring, efforts[i]);
	if (!known)
		return request_fail(e, "reasoning.effort", "invalid_value",
		                    "'reasoning.effort' must be low, medium or high");
	if (!(a->reasoning_effort = strdup(eff->valuestring)))
		return request_fail_oom(e, "reasoning.effort");
	return 0;
}

/* Printable ASCII of at most RESPONSE_ID_ARG_MAX bytes; whether it names a
 * response of ours is the endpoint's question (404). */
static int parse_previous(const cJSON *o, struct gen_args *a, struct api_error *e)
{
	const cJSON *v = request_field(o, "previous_response_id");
	if (!v)
		return 0;
	size_t n = cJSON_IsString(v) ? strlen(v->valuestring) : 0;
	bool ok = n > 0 && n <= RESPONSE_ID_ARG_MAX;
	for (size_t i = 0; ok && i < n; i++)
		ok = v->valuestring[i] > ' ' && v->valuestring[i] <= '~';
	if (!ok)
		return request_fail(
		    e, "previous_response_id", cJSON_IsString(v) ? "invalid_value" : "invalid_type",
		    "'previous_response_id' must be a response id (printable ASCII, at most "
		    "%d bytes)",
		    RESPONSE_ID_ARG_MAX);
	return request_name_dup(v, "previous_response_id", "previous_response_id",
	                        &a->previous_response_id, e);
}

static int parse_settings(const cJSON *o, int64_t limit, struct gen_args *a, struct api_error *e)
{
	const cJSON *m = request_field(o, "model");
	if (m && !cJSON_IsString(m))
		return request_fail(e, "model", "invalid_type", "'model' must be a string");
	if (m && request_name_dup(m, "model", "model", &a->model, e))
		return -EINVAL;
	double mt = (double)limit, t = a->sampling.temperature, tp = a->sampling.top_p;
	int rc = request_get_num(o, "max_output_tokens", 1, (double)limit, true, &mt, e);
	if (!rc)
		rc = request_get_num(o, "temperature", 0, 2, false, &t, e);
	if (!rc)
		rc = request_get_num(o, "top_p", 0, 1, false, &tp, e);
	if (!rc && tp <= 0)
		rc = request_fail(e, "top_p", "invalid_value", "'top_p' must be greater than 0");
	if (!rc)
		rc = request_get_bool(o, "stream", &a->stream, e);
	if (!rc)
		rc = request_get_bool(o, "store", &a->store, e);
	a->max_tokens = (int)mt;
	a->sampling.temperature = (float)t;
	a->sampling.top_p = (float)tp;
	return rc;
}

int responses_args_parse(const char *body, size_t len, int64_t limit, struct gen_args *a,
                         struct api_error *e)
{
	memset(a, 0, sizeof(*a));
	memset(e, 0, sizeof(*e));
	a->api = GEN_API_RESPONSES;
	a->chat = true;
	a->store = true;
	sampler_params_default(&a->sampling);
	cJSON *root = NULL;
	int rc = request_parse_body(body, len, &root, e);
	if (rc)
		return rc;
	rc = no_twice(root, body_keys, NULL, e);
	if (!rc)
		rc = check_unsupported(root, e);
	if (!rc)
		rc = parse_reasoning(root, a, e);
	if (!rc)
		rc = parse_settings(root, limit, a, e);
	if (!rc)
		rc = parse_previous(root, a, e);
	if (!rc)
		rc = parse_text(root, a, e);
	if (!rc)
		rc = parse_tools(root, a, e);
	if (!rc)
		rc = request_output_fields(root, a, e);
	if (!rc)
		rc = parse_input(root, a, e);
	if (!rc)
		rc = request_parse_template_args(root, false, a, e);
	cJSON_Delete(root);
	if (rc)
		gen_args_deinit(a);
	return rc;
}

/* ---- ids ------------------------------------------------------------------------ */

static const char hex_digits[] = "0123456789abcdefABCDEF";

int responses_id_new(const char *session_id, char out[RESPONSES_ID_LEN])
{
	unsigned char b[RESP_RANDOM_HEX / 2];
	char hex[RESP_RANDOM_HEX + 1];
	if (RAND_bytes(b, (int)sizeof(b)) != 1)
		return -EIO;
	digest_hex(b, sizeof(b), hex);
	if (session_id && *session_id)
		snprintf(out, RESPONSES_ID_LEN, "resp_%.32s_%s", session_id, hex);
	else
		snprintf(out, RESPONSES_ID_LEN, "resp_%s", hex);
	return 0;
}

int responses_id_session(const char *id, char session_id[SCHED_SESSION_ID_LEN])
{
	if (strncmp(id, "resp_", 5))
		return -ENOENT;
	const char *sid = id + 5, *end = strchr(sid, '_');
	size_t n = end ? (size_t)(end - sid) : 0;
	if (!end || !session_id_valid_n(sid, n))
		return -ENOENT;
	const char *tail = sid + n + 1;
	if (strlen(tail) != RESP_RANDOM_HEX || strspn(tail, hex_digits) != RESP_RANDOM_HEX)
		return -ENOENT;
	memcpy(session_id, sid, n);
	session_id[n] = '\0';
	return 0;
}

/* ---- the response object ------------------------------------------------------------- */

static void add_str_or_null(cJSON *o, const char *key, const char *s)
{
	if (s)
		cJSON_AddStringToObject(o, key, s);
	else
		cJSON_AddNullToObject(o, key);
}

/* A float setting as the client wrote it: 0.7f reads 0.7, not 0.699999988. */
static double float_setting(float f)
{
	char s[32];
	snprintf(s, sizeof(s), "%.6g", (double)f);
	return strtod(s, NULL);
}

static cJSON *tool_json(const struct tool_def *t)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", "function");
	cJSON_AddStringToObject(o, "name", t->name);
	add_str_or_null(o, "description", t->description);
	cJSON_AddItemToObject(o, "parameters", cJSON_Duplicate(t->parameters, true));
	cJSON_AddBoolToObject(o, "strict", t->strict);
	return o;
}

static cJSON *tool_choice_json(const struct tool_set *ts)
{
	if (!ts || ts->choice == TOOL_CHOICE_AUTO)
		return cJSON_CreateString("auto");
	if (ts->choice == TOOL_CHOICE_NONE)
		return cJSON_CreateString("none");
	if (ts->choice == TOOL_CHOICE_REQUIRED || ts->named >= ts->n_tools)
		return cJSON_CreateString("required");
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", "function");
	cJSON_AddStringToObject(o, "name", ts->tools[ts->named].name);
	return o;
}

static cJSON *text_json(const struct gen_args *a)
{
	cJSON *t = cJSON_CreateObject();
	cJSON *f = cJSON_AddObjectToObject(t, "format");
	if (a->response_format == RESPONSE_FORMAT_JSON_OBJECT) {
		cJSON_AddStringToObject(f, "type", "json_object");
	} else if (a->response_format == RESPONSE_FORMAT_JSON_SCHEMA) {
		cJSON_AddStringToObject(f, "type", "json_schema");
		cJSON_AddStringToObject(
		    f, "name", a->response_schema_name ? a->response_schema_name : "response");
		cJSON_AddItemToObject(f, "schema", cJSON_Duplicate(a->response_schema, true));
		cJSON_AddBoolToObject(f, "strict", a->response_strict);
	} else {
		cJSON_AddStringToObject(f, "type", "text");
	}
	return t;
}

cJSON *responses_object_new(const struct gen_args *a, const char *id, const char *model,
                            long created_at)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddStringToObject(o, "id", id);
	cJSON_AddStringToObject(o, "object", "response");
	cJSON_AddNumberToObject(o, "created_at", (double)created_at);
	cJSON_AddStringToObject(o, "status", "in_progress");
	cJSON_AddBoolToObject(o, "background", false);
	cJSON_AddNullToObject(o, "error");
	cJSON_AddNullToObject(o, "incomplete_details");
	add_str_or_null(o, "instructions", a->instructions);
	cJSON_AddNumberToObject(o, "max_output_tokens", a->max_tokens);
	cJSON_AddNullToObject(o, "max_tool_calls");
	cJSON_AddStringToObject(o, "model", model);
	cJSON_AddArrayToObject(o, "output");
	cJSON_AddBoolToObject(o, "parallel_tool_calls", a->tools ? a->tools->parallel : true);
	add_str_or_null(o, "previous_response_id", a->previous_response_id);
	cJSON *reasoning = cJSON_AddObjectToObject(o, "reasoning");
	add_str_or_null(reasoning, "effort", a->reasoning_effort);
	cJSON_AddNullToObject(reasoning, "summary");
	cJSON_AddStringToObject(o, "service_tier", "default");
	cJSON_AddBoolToObject(o, "store", a->store);
	cJSON_AddNumberToObject(o, "temperature", float_setting(a->sampling.temperature));
	cJSON_AddItemToObject(o, "text", text_json(a));
	cJSON_AddItemToObject(o, "tool_choice", tool_choice_json(a->tools));
	cJSON *tools = cJSON_AddArrayToObject(o, "tools");
	for (size_t i = 0; a->tools && i < a->tools->n_tools; i++)
		cJSON_AddItemToArray(tools, tool_json(&a->tools->tools[i]));
	cJSON_AddNumberToObject(o, "top_p", float_setting(a->sampling.top_p));
	cJSON_AddStringToObject(o, "truncation", "disabled");
	cJSON_AddNullToObject(o, "usage");
	cJSON_AddNullToObject(o, "user");
	cJSON_AddObjectToObject(o, "metadata");
	return o;
}

/* ---- events ------------------------------------------------------------------------ */

struct resp_item {
	bool call;      /* a function_call, else a message */
	bool reasoning; /* a reasoning item (not a call) */
	char id[RESPONSES_ID_LEN + 16];
	char *call_id; /* call: the parser's "call_..." */
	char *name;    /* call: the function */
	char *text;    /* the message's text, or the call's arguments */
	size_t len, cap;
	const char *status; /* "in_progress" until closed */
};

struct resp_stream {
	cJSON *response; /* as responses_object_new made it */
	resp_emit_fn emit;
	void *user;
	int64_t seq;
	struct resp_item *items;
	size_t n_items, cap_items;
	bool open;                      /* the last item is still open */
	char base[RESP_RANDOM_HEX + 1]; /* the id's random part, in item ids */
};

int resp_stream_new(cJSON *response, resp_emit_fn emit, void *user, struct resp_stream **out)
{
	struct resp_stream *rs = calloc(1, sizeof(*rs));
	if (!rs) {
		cJSON_Delete(response);
		return -ENOMEM;
	}
	rs->response = response;
	rs->emit = emit;
	rs->user = user;
	const cJSON *id = cJSON_GetObjectItem(response, "id");
	const char *tail = cJSON_IsString(id) ? strrchr(id->valuestring, '_') : NULL;
	snprintf(rs->base, sizeof(rs->base), "%s", tail ? tail + 1 : "0");
	*out = rs;
	return 0;
}

void resp_stream_free(struct resp_stream *rs)
{
	if (!rs)
		return;
	for (size_t i = 0; i < rs->n_items; i++) {
		free(rs->items[i].call_id);
		free(rs->items[i].name);
		free(rs->items[i].text);
	}
	free(rs->items);
	cJSON_Delete(rs->response);
	free(rs);
}

/* An event of that type with its sequence number (NULL: no one listens). */
static cJSON *ev_new(struct resp_stream *rs, const char *type)
{
	if (!rs->emit)
		return NULL;
	cJSON *ev = cJSON_CreateObject();
	if (!ev)
		return NULL;
	cJSON_AddStringToObject(ev, "type", type);
	cJSON_AddNumberToObject(ev, "sequence_number", (double)rs->seq++);
	return ev;
}

static int ev_send(struct resp_stream *rs, cJSON *ev)
{
	if (!ev)
		return rs->emit ? -ENOMEM : 0;
	const cJSON *type = cJSON_GetObjectItem(ev, "type");
	rs->emit(rs->user, type->valuestring, ev);
	return 0;
}

/* Where an item is: item_id and output_index (and content_index for text). */
static void ev_at(cJSON *ev, const struct resp_stream *rs, const struct resp_item *it, bool text)
{
	cJSON_AddStringToObject(ev, "item_id", it->id);
	cJSON_AddNumberToObject(ev, "output_index", (double)(it - rs->items));
	if (text)
		cJSON_AddNumberToObject(ev, "content_index", 0);
}

static cJSON *part_json(const struct resp_item *it)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "type", it->reasoning ? "reasoning_text" : "output_text");
	cJSON_AddItemToObject(p, "text", oa_string_n(it->text ? it->text : "", it->len));
	if (it->reasoning)
		return p;
	cJSON_AddArrayToObject(p, "annotations");
	cJSON_AddArrayToObject(p, "logprobs");
	return p;
}

/* {"id": "rs_...", "type": "reasoning", "summary": [], "content":
 * [{"type": "reasoning_text", "text"}], "status"}: the model's own
 * reasoning text, not a summary of it. */
static cJSON *reasoning_json(const struct resp_item *it)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", it->id);
	cJSON_AddStringToObject(o, "type", "reasoning");
	cJSON_AddArrayToObject(o, "summary");
	cJSON *content = cJSON_AddArrayToObject(o, "content");
	if (strcmp(it->status, "in_progress"))
		cJSON_AddItemToArray(content, part_json(it));
	cJSON_AddStringToObject(o, "status", it->status);
	return o;
}

static cJSON *item_json(const struct resp_item *it)
{
	if (it->reasoning)
		return reasoning_json(it);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", it->id);
	cJSON_AddStringToObject(o, "type", it->call ? "function_call" : "message");
	cJSON_AddStringToObject(o, "status", it->status);
	if (it->call) {
		cJSON_AddItemToObject(o, "arguments",
		                      oa_string_n(it->text ? it->text : "", it->len));
		cJSON_AddStringToObject(o, "call_id", it->call_id);
		cJSON_AddStringToObject(o, "name", it->name);
		return o;
	}
	cJSON_AddStringToObject(o, "role", "assistant");
	cJSON *content = cJSON_AddArrayToObject(o, "content");
	if (strcmp(it->status, "in_progress"))
		cJSON_AddItemToArray(content, part_json(it));
	return o;
}

/* The response object now: status, and every item so far. */
static cJSON *response_now(const struct resp_stream *rs, const char *status)
{
	cJSON *o = cJSON_Duplicate(rs->response, true);
	if (!o)
		return NULL;
	cJSON_ReplaceItemInObject(o, "status", cJSON_CreateString(status));
	cJSON *output = cJSON_CreateArray();
	for (size_t i = 0; i < rs->n_items; i++)
		cJSON_AddItemToArray(output, item_json(&rs->items[i]));
	cJSON_ReplaceItemInObject(o, "output", output);
	return o;
}

/* response.created and the like: {"type", "sequence_number", "response"}. */
static int ev_response(struct resp_stream *rs, const char *type, const char *status)
{
	cJSON *ev = ev_new(rs, type);
	if (ev)
		cJSON_AddItemToObject(ev, "response", response_now(rs, status));
	return ev_send(rs, ev);
}

int resp_stream_open(struct resp_stream *rs)
{
	int rc = ev_response(rs, "response.created", "in_progress");
	return rc ? rc : ev_response(rs, "response.in_progress", "in_progress");
}

static struct resp_item *item_add(struct resp_stream *rs, bool call, bool reasoning)
{
	if (rs->n_items == rs->cap_items) {
		size_t cap = rs->cap_items ? rs->cap_items * 2 : 4;
		struct resp_item *items = realloc(rs->items, cap * sizeof(*items));
		if (!items)
			return NULL;
		rs->items = items;
		rs->cap_items = cap;
	}
	struct resp_item *it = &rs->items[rs->n_items];
	memset(it, 0, sizeof(*it));
	it->call = call;
	it->reasoning = reasoning;
	it->status = "in_progress";
	snprintf(it->id, sizeof(it->id), "%s_%s_%zu",
	         call        ? "fc"
	         : reasoning ? "rs"
	                     : "msg",
	         rs->base, rs->n_items);
	rs->n_items++;
	rs->open = true;
	return it;
}

/* output_item.added (and for a message content_part.added). */
static int item_announce(struct resp_stream *rs, struct resp_item *it)
{
	cJSON *ev = ev_new(rs, "response.output_item.added");
	if (ev) {
		cJSON_AddNumberToObject(ev, "output_index", (double)(it - rs->items));
		cJSON_AddItemToObject(ev, "item", item_json(it));
	}
	int rc = ev_send(rs, ev);
	if (rc || it->call)
		return rc;
	ev = ev_new(rs, "response.content_part.added");
	if (ev) {
		ev_at(ev, rs, it, true);
		cJSON *part = part_json(it);
		cJSON_AddItemToObject(ev, "part", part);
	}
	return ev_send(rs, ev);
}

/* The open item is done (status completed or incomplete). */
static int item_close(struct resp_stream *rs, const char *status)
{
	struct resp_item *it = &rs->items[rs->n_items - 1];
	rs->open = false;
	it->status = status;
	cJSON *ev = ev_new(rs, it->call        ? "response.function_call_arguments.done"
	                       : it->reasoning ? "response.reasoning_text.done"
	                                       : "response.output_text.done");
	if (ev) {
		ev_at(ev, rs, it, !it->call);
		if (it->call)
			cJSON_AddStringToObject(ev, "name", it->name);
		cJSON_AddItemToObject(ev, it->call ? "arguments" : "text",
		                      oa_string_n(it->text ? it->text : "", it->len));
		if (!it->call && !it->reasoning)
			cJSON_AddArrayToObject(ev, "logprobs");
	}
	int rc = ev_send(rs, ev);
	if (!rc && !it->call && (ev = ev_new(rs, "response.content_part.done"))) {
		ev_at(ev, rs, it, true);
		cJSON_AddItemToObject(ev, "part", part_json(it));
		rc = ev_send(rs, ev);
	}
	if (!rc && (ev = ev_new(rs, "response.output_item.done"))) {
		cJSON_AddNumberToObject(ev, "output_index", (double)(it - rs->items));
		cJSON_AddItemToObject(ev, "item", item_json(it));
		rc = ev_send(rs, ev);
	}
	return rc;
}

static int text_grow(struct resp_item *it, const char *s, size_t n)
{
	if (it->len + n + 1 > it->cap) {
		size_t cap = (it->len + n + 1) * 2;
		char *t = realloc(it->text, cap);
		if (!t)
			return -ENOMEM;
		it->text = t;
		it->cap = cap;
	}
	memcpy(it->text + it->len, s, n);
	it->len += n;
	it->text[it->len] = '\0';
	return 0;
}

/* A delta event of the open item: output_text.delta or
 * function_call_arguments.delta. */
static int item_delta(struct resp_stream *rs, const char *s, size_t n)
{
	struct resp_item *it = &rs->items[rs->n_items - 1];
	if (text_grow(it, s, n))
		return -ENOMEM;
	cJSON *ev = ev_new(rs, it->call        ? "response.function_call_arguments.delta"
	                       : it->reasoning ? "response.reasoning_text.delta"
	                                       : "response.output_text.delta");
	if (ev) {
		ev_at(ev, rs, it, !it->call);
		cJSON_AddItemToObject(ev, "delta", oa_string_n(s, n));
		if (!it->call && !it->reasoning)
			cJSON_AddArrayToObject(ev, "logprobs");
	}
	return ev_send(rs, ev);
}

/* Text of a message (reasoning false) or of a reasoning item: into the
 * open item of that kind, else a new one after closing what is open. */
static int item_text(struct resp_stream *rs, bool reasoning, const char *text, size_t len)
{
	if (!len)
		return 0;
	const struct resp_item *last = rs->open ? &rs->items[rs->n_items - 1] : NULL;
	if (last && (last->call || last->reasoning != reasoning)) {
		int rc = item_close(rs, "completed");
		if (rc)
			return rc;
	}
	if (!rs->open) {
		struct resp_item *it = item_add(rs, false, reasoning);
		int rc = it ? item_announce(rs, it) : -ENOMEM;
		if (rc)
			return rc;
	}
	return item_delta(rs, text, len);
}

int resp_stream_text(struct resp_stream *rs, const char *text, size_t len)
{
	return item_text(rs, false, text, len);
}

int resp_stream_reasoning(struct resp_stream *rs, const char *text, size_t len)
{
	return item_text(rs, true, text, len);
}

static int call_begin(struct resp_stream *rs, const struct tool_event *ev)
{
	if (rs->open) {
		int rc = item_close(rs, "completed");
		if (rc)
			return rc;
	}
	struct resp_item *it = item_add(rs, true, false);
	if (!it)
		return -ENOMEM;
	it->call_id = strdup(ev->id ? ev->id : "");
	it->name = strdup(ev->name ? ev->name : "");
	if (!it->call_id || !it->name)
		return -ENOMEM;
	return item_announce(rs, it);
}

int resp_stream_call(struct resp_stream *rs, const struct tool_event *ev)
{
	switch (ev->kind) {
	case TOOL_EV_CONTENT:
		return resp_stream_text(rs, ev->text, ev->len);
	case TOOL_EV_CALL_BEGIN:
		return call_begin(rs, ev);
	case TOOL_EV_ARGS:
		if (!rs->open || !rs->items[rs->n_items - 1].call)
			return -EINVAL;
		return ev->len ? item_delta(rs, ev->text, ev->len) : 0;
	case TOOL_EV_CALL_END:
		return rs->open && rs->items[rs->n_items - 1].call ? item_close(rs, "completed")
		                                                   : -EINVAL;
	}
	return -EINVAL;
}

static cJSON *usage_json(int n_input, int n_cached, int n_output)
{
	cJSON *u = cJSON_CreateObject();
	cJSON_AddNumberToObject(u, "input_tokens", n_input);
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens",
	                        n_cached);
	cJSON_AddNumberToObject(u, "output_tokens", n_output);
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"),
	                        "reasoning_tokens", 0);
	cJSON_AddNumberToObject(u, "total_tokens", n_input + n_output);
	return u;
}

cJSON *resp_stream_finish(struct resp_stream *rs, enum gen_finish fin, int n_input, int n_cached,
                          int n_output)
{
	bool cut = fin == GEN_FINISH_LENGTH;
	const char *status = cut ? "incomplete" : "completed";
	bool output = false; /* a message or a call, not only reasoning */
	for (size_t i = 0; i < rs->n_items; i++)
		output |= !rs->items[i].reasoning;
	if (!output && rs->open && item_close(rs, status))
		return NULL;
	if (!output) {
		struct resp_item *it = item_add(rs, false, false);
		if (!it || item_announce(rs, it))
			return NULL;
	}
	if (rs->open && item_close(rs, status))
		return NULL;
	cJSON *o = response_now(rs, status);
	if (!o)
		return NULL;
	if (cut) {
		cJSON *d = cJSON_CreateObject();
		cJSON_AddStringToObject(d, "reason", "max_output_tokens");
		cJSON_ReplaceItemInObject(o, "incomplete_details", d);
	}
	cJSON_ReplaceItemInObject(o, "usage", usage_json(n_input, n_cached, n_output));
	cJSON *ev = ev_new(rs, cut ? "response.incomplete" : "response.completed");
	if (ev)
		cJSON_AddItemToObject(ev, "response", cJSON_Duplicate(o, true));
	if (ev_send(rs, ev)) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

int resp_stream_fail(struct resp_stream *rs, const char *message, const char *code,
                     const char *param)
{
	cJSON *ev = ev_new(rs, "error");
	if (ev) {
		add_str_or_null(ev, "code", code);
		cJSON_AddStringToObject(ev, "message", message);
		add_str_or_null(ev, "param", param);
	}
	int rc = ev_send(rs, ev);
	if (rc || !(ev = ev_new(rs, "response.failed")))
		return rc;
	cJSON *o = response_now(rs, "failed");
	cJSON *err = cJSON_CreateObject();
	add_str_or_null(err, "code", code);
	cJSON_AddStringToObject(err, "message", message);
	cJSON_ReplaceItemInObject(o, "error", err);
	cJSON_AddItemToObject(ev, "response", o);
	return ev_send(rs, ev);
}
