/* The Responses API module (src/server/responses.c): request bodies
 * accepted and refused (a table: each refusal names its field path), input
 * items as chat messages, NUL bytes carried as text, response ids and the
 * session they name, the response object's echo of the request, and the
 * typed event stream checked event by event against what OpenAI sends
 * (order, sequence numbers, deltas that add up to the done texts, and the
 * whole object equal with and without a listener). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/responses.h"
#include "testutil.h"

#define LIMIT 256

/* ---- accepted bodies ----------------------------------------------------------- */

START_TEST(test_string_input)
{
	struct gen_args a;
	struct api_error e;
	const char *b = "{\"model\":\"m\",\"input\":\"Hello\",\"instructions\":\"Be brief.\","
	                "\"max_output_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,"
	                "\"stream\":true,\"metadata\":{\"k\":\"v\"},\"user\":\"u\","
	                "\"truncation\":\"auto\",\"service_tier\":\"auto\",\"include\":[],"
	                "\"background\":false,\"frobnicate\":[1,{\"x\":2}]}";
	ck_assert_int_eq(responses_args_parse(b, strlen(b), LIMIT, &a, &e), 0);
	ck_assert_int_eq(a.api, GEN_API_RESPONSES);
	ck_assert(a.chat && a.stream && a.store);
	ck_assert_str_eq(a.model, "m");
	ck_assert_int_eq(a.max_tokens, 7);
	ck_assert_float_eq_tol(a.sampling.temperature, 0.5, 1e-6);
	ck_assert_float_eq_tol(a.sampling.top_p, 0.9, 1e-6);
	ck_assert_uint_eq(a.n_messages, 2);
	ck_assert_str_eq(a.messages[0].role, "system");
	ck_assert_str_eq(a.messages[0].content, "Be brief.");
	ck_assert_str_eq(a.instructions, "Be brief.");
	ck_assert_str_eq(a.messages[1].role, "user");
	ck_assert_str_eq(a.messages[1].content, "Hello");
	ck_assert_ptr_null(a.tools);
	ck_assert_ptr_null(a.previous_response_id);
	ck_assert_int_eq(a.response_format, RESPONSE_FORMAT_TEXT);
	gen_args_deinit(&a);
	/* defaults: max_output_tokens is the limit, store true, no stream */
	b = "{\"input\":\"x\",\"store\":false,\"previous_response_id\":\"resp_ab_cd\"}";
	ck_assert_int_eq(responses_args_parse(b, strlen(b), LIMIT, &a, &e), 0);
	ck_assert_int_eq(a.max_tokens, LIMIT);
	ck_assert(!a.store && !a.stream);
	ck_assert_str_eq(a.previous_response_id, "resp_ab_cd");
	gen_args_deinit(&a);
}
END_TEST

/* Every item kind, in the order a client replays a conversation. */
START_TEST(test_items)
{
	struct gen_args a;
	struct api_error e;
	const char *b =
	    "{\"input\":["
	    "{\"role\":\"developer\",\"content\":\"Use tools.\"},"
	    "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
	    "\"text\":\"Weather \"},{\"type\":\"input_text\",\"text\":\"in Paris?\"}]},"
	    "{\"type\":\"message\",\"role\":\"assistant\",\"id\":\"msg_1\",\"status\":"
	    "\"completed\",\"content\":[{\"type\":\"output_text\",\"text\":\"Checking.\","
	    "\"annotations\":[]}]},"
	    "{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"weather\","
	    "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\",\"id\":\"fc_1\"},"
	    "{\"type\":\"function_call\",\"call_id\":\"call_2\",\"name\":\"time\","
	    "\"arguments\":\"{}\"},"
	    "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"sunny\"},"
	    "{\"type\":\"function_call_output\",\"call_id\":\"call_2\",\"output\":[{\"type\":"
	    "\"input_text\",\"text\":\"noon\"}]},"
	    "{\"role\":\"user\",\"content\":\"Thanks\"}]}";
	ck_assert_msg(responses_args_parse(b, strlen(b), LIMIT, &a, &e) == 0, "%s: %s", e.param,
	              e.message);
	ck_assert_uint_eq(a.n_messages, 6);
	ck_assert_str_eq(a.messages[0].role, "developer");
	ck_assert_str_eq(a.messages[1].content, "Weather in Paris?");
	/* the assistant's text and both calls are one turn */
	struct api_message *as = &a.messages[2];
	ck_assert_str_eq(as->role, "assistant");
	ck_assert_str_eq(as->content, "Checking.");
	ck_assert_int_eq(cJSON_GetArraySize(as->tool_calls), 2);
	cJSON *c0 = cJSON_GetArrayItem(as->tool_calls, 0);
	ck_assert_str_eq(cJSON_GetObjectItem(c0, "id")->valuestring, "call_1");
	ck_assert_str_eq(cJSON_GetObjectItem(c0, "type")->valuestring, "function");
	cJSON *fn = cJSON_GetObjectItem(c0, "function");
	ck_assert_str_eq(cJSON_GetObjectItem(fn, "name")->valuestring, "weather");
	ck_assert_str_eq(cJSON_GetObjectItem(fn, "arguments")->valuestring, "{\"city\":\"Paris\"}");
	ck_assert_str_eq(a.messages[3].role, "tool");
	ck_assert_str_eq(a.messages[3].tool_call_id, "call_1");
	ck_assert_str_eq(a.messages[3].content, "sunny");
	ck_assert_str_eq(a.messages[4].tool_call_id, "call_2");
	ck_assert_str_eq(a.messages[4].content, "noon");
	ck_assert_str_eq(a.messages[5].content, "Thanks");
	gen_args_deinit(&a);
	/* a call with no assistant text before it gets an assistant turn of its own */
	b = "{\"input\":[{\"role\":\"user\",\"content\":\"x\"},{\"type\":\"function_call\","
	    "\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{}\"}]}";
	ck_assert_int_eq(responses_args_parse(b, strlen(b), LIMIT, &a, &e), 0);
	ck_assert_uint_eq(a.n_messages, 2);
	ck_assert_str_eq(a.messages[1].role, "assistant");
	ck_assert_str_eq(a.messages[1].content, "");
	ck_assert_int_eq(cJSON_GetArraySize(a.messages[1].tool_calls), 1);
	gen_args_deinit(&a);
}
END_TEST

START_TEST(test_text_format)
{
	struct gen_args a;
	struct api_error e;
	const char *b = "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":"
	                "\"person\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":"
	                "{\"name\":{\"type\":\"string\"}},\"required\":[\"name\"]}},"
	                "\"verbosity\":\"low\"}}";
	ck_assert_int_eq(responses_args_parse(b, strlen(b), LIMIT, &a, &e), 0);
	ck_assert_int_eq(a.response_format, RESPONSE_FORMAT_JSON_SCHEMA);
	ck_assert_str_eq(a.response_schema_name, "person");
	ck_assert(a.response_strict);
	ck_assert_str_eq(cJSON_GetObjectItem(a.response_schema, "type")->valuestring, "object");
	gen_args_deinit(&a);
	b = "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_object\"}}}";
	ck_assert_int_eq(responses_args_parse(b, strlen(b), LIMIT, &a, &e), 0);
	ck_assert_int_eq(a.response_format, RESPONSE_FORMAT_JSON_OBJECT);
	gen_args_deinit(&a);
	b = "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"text\"}}}";
	ck_assert_int_eq(responses_args_parse(b, strlen(b), LIMIT, &a, &e), 0);
	ck_assert_int_eq(a.response_format, RESPONSE_FORMAT_TEXT);
	gen_args_deinit(&a);
}
END_TEST

/* Function tools in the flat form reach tool_set_parse (tools.c). */
START_TEST(test_tools)
{
	struct gen_args a;
	struct api_error e;
	const char *b = "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"weather\","
	                "\"description\":\"Weather of a city\",\"parameters\":{\"type\":"
	                "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":"
	                "[\"city\"]},\"strict\":true}],\"tool_choice\":\"required\","
	                "\"parallel_tool_calls\":false}";
	ck_assert_msg(responses_args_parse(b, strlen(b), LIMIT, &a, &e) == 0, "%s: %s", e.param,
	              e.message);
	ck_assert_ptr_nonnull(a.tools);
	ck_assert_uint_eq(a.tools->n_tools, 1);
	ck_assert_str_eq(a.tools->tools[0].name, "weather");
	ck_assert_int_eq(a.tools->choice, TOOL_CHOICE_REQUIRED);
	ck_assert(!a.tools->parallel);
	gen_args_deinit(&a);
}
END_TEST

/* "\u0000" in a text field is a NUL byte of the text; in a name it is refused. */
START_TEST(test_nul)
{
	struct gen_args a;
	struct api_error e;
	const char *b = "{\"input\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}";
	ck_assert_int_eq(responses_args_parse(b, strlen(b), LIMIT, &a, &e), 0);
	ck_assert_uint_eq(a.messages[0].content_len, 3);
	ck_assert_mem_eq(a.messages[0].content, "a\0b", 3);
	gen_args_deinit(&a);
	b = "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\\u0000\","
	    "\"output\":\"x\"}]}";
	ck_assert_int_eq(responses_args_parse(b, strlen(b), LIMIT, &a, &e), -EINVAL);
	ck_assert_str_eq(e.param, "input[0].call_id");
}
END_TEST

/* ---- refused bodies ----------------------------------------------------------------- */

static const struct {
	const char *body;
	const char *param; /* "" for none */
	const char *code;
} refused[] = {
    {"", "", "invalid_json"},
    {"[]", "", "invalid_json"},
    {"{\"input\":\"x\"} x", "", "invalid_json"},
    {"{\"input\":\"x\",\"max_output_tokens\":01}", "max_output_tokens", "invalid_json"},
    {"{\"input\":\"x\",\"temperature\":1.}", "temperature", "invalid_json"},
    {"{\"input\":\"\x01\"}", "input", "invalid_json"},
    {"{\"input\":\"\xc3\x28\"}", "input", "invalid_json"},
    {"{\"input\":\"\\ud800\"}", "input", "invalid_json"},
    {"{\"input\":\"x\",\"input\":\"y\"}", "input", "duplicate_field"},
    {"{}", "input", "missing_required_parameter"},
    {"{\"input\":5}", "input", "invalid_type"},
    {"{\"input\":[]}", "input", "invalid_type"},
    {"{\"input\":[5]}", "input[0]", "invalid_type"},
    {"{\"input\":[{\"role\":\"user\",\"content\":\"x\"},{\"content\":\"y\"}]}", "input[1].role",
     "missing_required_parameter"},
    {"{\"input\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "input[0].role", "invalid_value"},
    {"{\"input\":[{\"role\":\"user\",\"content\":7}]}", "input[0].content", "invalid_type"},
    {"{\"input\":[{\"role\":\"user\"}]}", "input[0].content", "missing_required_parameter"},
    {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},"
     "{\"type\":\"input_text\",\"text\":\"b\"},{\"type\":\"input_image\",\"image_url\":\"u\"}]}]}",
     "input[0].content[2].type", "unsupported_value"},
    {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":3}]}]}",
     "input[0].content[0].text", "invalid_type"},
    {"{\"input\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}", "input[0].content[0]",
     "invalid_type"},
    {"{\"input\":[{\"role\":\"user\",\"content\":\"x\",\"role\":\"user\"}]}", "input[0].role",
     "duplicate_field"},
    {"{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_1\"}]}", "input[0].type",
     "unsupported_value"},
    {"{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "input[0].type",
     "unsupported_value"},
    {"{\"input\":[{\"type\":7}]}", "input[0].type", "invalid_type"},
    {"{\"input\":[{\"type\":\"function_call\",\"name\":\"f\",\"arguments\":\"{}\"}]}",
     "input[0].call_id", "missing_required_parameter"},
    {"{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"arguments\":\"{}\"}]}",
     "input[0].name", "missing_required_parameter"},
    {"{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\"}]}",
     "input[0].arguments", "missing_required_parameter"},
    {"{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\","
     "\"arguments\":{}}]}",
     "input[0].arguments", "invalid_type"},
    {"{\"input\":[{\"type\":\"function_call_output\",\"output\":\"x\"}]}", "input[0].call_id",
     "missing_required_parameter"},
    {"{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\"}]}", "input[0].output",
     "missing_required_parameter"},
    {"{\"input\":\"x\",\"instructions\":5}", "instructions", "invalid_type"},
    {"{\"input\":\"x\",\"model\":5}", "model", "invalid_type"},
    {"{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens", "invalid_value"},
    {"{\"input\":\"x\",\"max_output_tokens\":257}", "max_output_tokens", "invalid_value"},
    {"{\"input\":\"x\",\"max_output_tokens\":2.5}", "max_output_tokens", "invalid_type"},
    {"{\"input\":\"x\",\"max_output_tokens\":\"9\"}", "max_output_tokens", "invalid_type"},
    {"{\"input\":\"x\",\"temperature\":3}", "temperature", "invalid_value"},
    {"{\"input\":\"x\",\"temperature\":1e400}", "temperature", "invalid_value"},
    {"{\"input\":\"x\",\"top_p\":0}", "top_p", "invalid_value"},
    {"{\"input\":\"x\",\"stream\":\"yes\"}", "stream", "invalid_type"},
    {"{\"input\":\"x\",\"store\":1}", "store", "invalid_type"},
    {"{\"input\":\"x\",\"previous_response_id\":5}", "previous_response_id", "invalid_type"},
    {"{\"input\":\"x\",\"previous_response_id\":\"a b\"}", "previous_response_id", "invalid_value"},
    {"{\"input\":\"x\",\"background\":true}", "background", "unsupported_parameter"},
    {"{\"input\":\"x\",\"include\":[\"message.output_text.logprobs\"]}", "include",
     "unsupported_parameter"},
    {"{\"input\":\"x\",\"reasoning\":{\"effort\":\"extreme\"}}", "reasoning.effort",
     "invalid_value"},
    {"{\"input\":\"x\",\"reasoning\":{\"effort\":3}}", "reasoning.effort", "invalid_value"},
    {"{\"input\":\"x\",\"reasoning\":{\"effort\":\"low\",\"summary\":\"auto\"}}", "reasoning",
     "unsupported_parameter"},
    {"{\"input\":\"x\",\"reasoning\":{\"summary\":\"auto\"}}", "reasoning",
     "unsupported_parameter"},
    {"{\"input\":\"x\",\"reasoning\":\"high\"}", "reasoning", "unsupported_parameter"},
    {"{\"input\":\"x\",\"prompt\":{\"id\":\"p\"}}", "prompt", "unsupported_parameter"},
    {"{\"input\":\"x\",\"conversation\":\"conv_1\"}", "conversation", "unsupported_parameter"},
    {"{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{}},"
     "{\"type\":\"web_search\"}]}",
     "tools[1].type", "unsupported_value"},
    {"{\"input\":\"x\",\"tools\":[{\"type\":\"file_search\",\"vector_store_ids\":[]}]}",
     "tools[0].type", "unsupported_value"},
    {"{\"input\":\"x\",\"text\":5}", "text", "invalid_type"},
    {"{\"input\":\"x\",\"text\":{\"format\":\"json\"}}", "text.format", "invalid_type"},
    {"{\"input\":\"x\",\"text\":{\"format\":{}}}", "text.format.type",
     "missing_required_parameter"},
    {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}", "text.format.type",
     "invalid_value"},
    {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"schema\":{}}}}",
     "text.format.name", "missing_required_parameter"},
    {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\"}}}",
     "text.format.schema", "missing_required_parameter"},
    {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\","
     "\"schema\":{},\"strict\":\"yes\"}}}",
     "text.format.strict", "invalid_type"},
};

START_TEST(test_refused)
{
	int i = _i;
	struct gen_args a;
	struct api_error e;
	const char *b = refused[i].body;
	int rc = responses_args_parse(b, strlen(b), LIMIT, &a, &e);
	ck_assert_msg(rc == -EINVAL, "%s: accepted", b);
	ck_assert_int_eq(e.status, 400);
	ck_assert_msg(!strcmp(e.param, refused[i].param), "%s: param '%s', want '%s' (%s)", b,
	              e.param, refused[i].param, e.message);
	ck_assert_msg(!strcmp(e.code, refused[i].code), "%s: code '%s', want '%s' (%s)", b, e.code,
	              refused[i].code, e.message);
	ck_assert_msg(!refused[i].param[0] || strstr(e.message, refused[i].param),
	              "%s: message '%s' does not name %s", b, e.message, refused[i].param);
	/* nothing is left to free: a second deinit of the zeroed args is safe */
	gen_args_deinit(&a);
}
END_TEST

/* ---- ids ------------------------------------------------------------------------------- */

START_TEST(test_ids)
{
	char id[RESPONSES_ID_LEN], id2[RESPONSES_ID_LEN], sid[SCHED_SESSION_ID_LEN];
	const char *session = "0123456789abcdef0123456789abcdef";
	ck_assert_int_eq(responses_id_new(session, id), 0);
	ck_assert_int_eq(responses_id_new(session, id2), 0);
	ck_assert_str_ne(id, id2);
	ck_assert_uint_eq(strlen(id), 5 + 32 + 1 + 24);
	ck_assert_int_eq(responses_id_session(id, sid), 0);
	ck_assert_str_eq(sid, session);
	/* one-shot ids name no session */
	ck_assert_int_eq(responses_id_new(NULL, id), 0);
	ck_assert(!strncmp(id, "resp_", 5));
	ck_assert_int_eq(responses_id_session(id, sid), -ENOENT);
	static const char *const bad[] = {
	    "",
	    "resp_",
	    "chatcmpl-1",
	    "resp__0123456789abcdef01234567",
	    "resp_ab_0123456789abcdef0123456",
	    "resp_ab_0123456789abcdef012345678",
	    "resp_xy_0123456789abcdef01234567",
	    "resp_0123456789abcdef0123456789abcdef0_0123456789abcdef01234567",
	    "resp_ab_0123456789abcdef0123456g",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(responses_id_session(bad[i], sid) == -ENOENT, "'%s' named a session",
		              bad[i]);
	ck_assert_int_eq(responses_id_session("resp_ab_0123456789abcdef01234567", sid), 0);
	ck_assert_str_eq(sid, "ab");
}
END_TEST

/* ---- the response object ------------------------------------------------------------ */

static struct gen_args parsed(const char *body)
{
	struct gen_args a;
	struct api_error e;
	ck_assert_msg(responses_args_parse(body, strlen(body), LIMIT, &a, &e) == 0, "%s: %s", body,
	              e.message);
	return a;
}

START_TEST(test_object_echo)
{
	struct gen_args a = parsed("{\"input\":\"x\",\"instructions\":\"Be kind.\","
	                           "\"max_output_tokens\":9,\"temperature\":0.7,\"top_p\":0.3,"
	                           "\"store\":false,\"previous_response_id\":\"resp_1_2\","
	                           "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"p\","
	                           "\"schema\":{\"type\":\"object\"}}}}");
	cJSON *o = responses_object_new(&a, "resp_abc", "stories", 1700000000);
	gen_args_deinit(&a);
	ck_assert_str_eq(cJSON_GetObjectItem(o, "id")->valuestring, "resp_abc");
	ck_assert_str_eq(cJSON_GetObjectItem(o, "object")->valuestring, "response");
	ck_assert_str_eq(cJSON_GetObjectItem(o, "status")->valuestring, "in_progress");
	ck_assert_str_eq(cJSON_GetObjectItem(o, "model")->valuestring, "stories");
	ck_assert_double_eq(cJSON_GetObjectItem(o, "created_at")->valuedouble, 1700000000);
	ck_assert_str_eq(cJSON_GetObjectItem(o, "instructions")->valuestring, "Be kind.");
	ck_assert_double_eq(cJSON_GetObjectItem(o, "max_output_tokens")->valuedouble, 9);
	/* the float settings read as sent, not as their float's nearest double */
	char *text = cJSON_PrintUnformatted(o);
	ck_assert_msg(strstr(text, "\"temperature\":0.7,"), "%s", text);
	ck_assert_msg(strstr(text, "\"top_p\":0.3,"), "%s", text);
	free(text);
	ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(o, "store")));
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(o, "parallel_tool_calls")));
	ck_assert_str_eq(cJSON_GetObjectItem(o, "previous_response_id")->valuestring, "resp_1_2");
	cJSON *f = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "text"), "format");
	ck_assert_str_eq(cJSON_GetObjectItem(f, "type")->valuestring, "json_schema");
	ck_assert_str_eq(cJSON_GetObjectItem(f, "name")->valuestring, "p");
	ck_assert_str_eq(cJSON_GetObjectItem(o, "tool_choice")->valuestring, "auto");
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "tools")), 0);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "output")), 0);
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "usage")));
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "error")));
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "incomplete_details")));
	ck_assert(cJSON_IsObject(cJSON_GetObjectItem(o, "metadata")));
	cJSON_Delete(o);
}
END_TEST

/* ---- events --------------------------------------------------------------------------- */

/* What a listener received, in order. */
struct collected {
	cJSON *events;    /* array of the event objects */
	bool types_match; /* each emit's type was its object's "type" */
};

static void collect(void *user, const char *type, cJSON *ev)
{
	struct collected *c = user;
	const cJSON *t = cJSON_GetObjectItem(ev, "type");
	if (!cJSON_IsString(t) || strcmp(t->valuestring, type))
		c->types_match = false;
	cJSON_AddItemToArray(c->events, ev);
}

static struct resp_stream *stream_new(struct collected *c, const char *id)
{
	struct gen_args a = parsed("{\"input\":\"x\"}");
	cJSON *o = responses_object_new(&a, id, "stories", 1);
	gen_args_deinit(&a);
	struct resp_stream *rs = NULL;
	if (c) {
		c->events = cJSON_CreateArray();
		c->types_match = true;
	}
	ck_assert_int_eq(resp_stream_new(o, c ? collect : NULL, c, &rs), 0);
	return rs;
}

/* "type,type,..." of the events. */
static void types_of(const cJSON *events, char *out, size_t cap)
{
	size_t n = 0;
	out[0] = '\0';
	const cJSON *ev;
	cJSON_ArrayForEach(ev, events)
	{
		n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "%s%s", n ? "," : "",
		                      cJSON_GetObjectItem(ev, "type")->valuestring);
	}
}

static void check_sequence(const cJSON *events)
{
	int i = 0;
	const cJSON *ev;
	cJSON_ArrayForEach(ev, events)
	{
		ck_assert_int_eq((int)cJSON_GetObjectItem(ev, "sequence_number")->valuedouble, i);
		i++;
	}
}

static const char *str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(o, key);
	ck_assert_msg(cJSON_IsString(v), "no string '%s'", key);
	return v->valuestring;
}

static double num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(o, key);
	ck_assert_msg(cJSON_IsNumber(v), "no number '%s'", key);
	return v->valuedouble;
}

START_TEST(test_events_text)
{
	struct collected c;
	struct resp_stream *rs = stream_new(&c, "resp_s1_0123456789abcdef01234567");
	ck_assert_int_eq(resp_stream_open(rs), 0);
	ck_assert_int_eq(resp_stream_text(rs, "Hel", 3), 0);
	ck_assert_int_eq(resp_stream_text(rs, "", 0), 0); /* held back: no event */
	ck_assert_int_eq(resp_stream_text(rs, "lo", 2), 0);
	cJSON *o = resp_stream_finish(rs, GEN_FINISH_STOP, 5, 3, 2);
	ck_assert_ptr_nonnull(o);
	char types[1024];
	types_of(c.events, types, sizeof(types));
	ck_assert_str_eq(types, "response.created,response.in_progress,response.output_item.added,"
	                        "response.content_part.added,response.output_text.delta,"
	                        "response.output_text.delta,response.output_text.done,"
	                        "response.content_part.done,response.output_item.done,"
	                        "response.completed");
	ck_assert(c.types_match);
	check_sequence(c.events);
	cJSON *created = cJSON_GetArrayItem(c.events, 0);
	ck_assert_str_eq(str(cJSON_GetObjectItem(created, "response"), "status"), "in_progress");
	cJSON *added = cJSON_GetArrayItem(c.events, 2);
	ck_assert_double_eq(num(added, "output_index"), 0);
	cJSON *item = cJSON_GetObjectItem(added, "item");
	const char *item_id = str(item, "id");
	ck_assert(!strncmp(item_id, "msg_", 4));
	ck_assert_str_eq(str(item, "type"), "message");
	ck_assert_str_eq(str(item, "status"), "in_progress");
	ck_assert_str_eq(str(item, "role"), "assistant");
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(item, "content")), 0);
	cJSON *part = cJSON_GetObjectItem(cJSON_GetArrayItem(c.events, 3), "part");
	ck_assert_str_eq(str(part, "type"), "output_text");
	ck_assert_str_eq(str(part, "text"), "");
	cJSON *d = cJSON_GetArrayItem(c.events, 4);
	ck_assert_str_eq(str(d, "item_id"), item_id);
	ck_assert_double_eq(num(d, "output_index"), 0);
	ck_assert_double_eq(num(d, "content_index"), 0);
	ck_assert_str_eq(str(d, "delta"), "Hel");
	ck_assert(cJSON_IsArray(cJSON_GetObjectItem(d, "logprobs")));
	ck_assert_str_eq(str(cJSON_GetArrayItem(c.events, 5), "delta"), "lo");
	ck_assert_str_eq(str(cJSON_GetArrayItem(c.events, 6), "text"), "Hello");
	part = cJSON_GetObjectItem(cJSON_GetArrayItem(c.events, 7), "part");
	ck_assert_str_eq(str(part, "text"), "Hello");
	item = cJSON_GetObjectItem(cJSON_GetArrayItem(c.events, 8), "item");
	ck_assert_str_eq(str(item, "status"), "completed");
	/* the completed event carries the whole response, equal to the one returned */
	cJSON *done = cJSON_GetObjectItem(cJSON_GetArrayItem(c.events, 9), "response");
	ck_assert(cJSON_Compare(done, o, true));
	ck_assert_str_eq(str(o, "status"), "completed");
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "incomplete_details")));
	cJSON *out = cJSON_GetObjectItem(o, "output");
	ck_assert_int_eq(cJSON_GetArraySize(out), 1);
	cJSON *msg = cJSON_GetArrayItem(out, 0);
	ck_assert_str_eq(str(msg, "id"), item_id);
	cJSON *p0 = cJSON_GetArrayItem(cJSON_GetObjectItem(msg, "content"), 0);
	ck_assert_str_eq(str(p0, "type"), "output_text");
	ck_assert_str_eq(str(p0, "text"), "Hello");
	ck_assert(cJSON_IsArray(cJSON_GetObjectItem(p0, "annotations")));
	cJSON *u = cJSON_GetObjectItem(o, "usage");
	ck_assert_double_eq(num(u, "input_tokens"), 5);
	ck_assert_double_eq(num(u, "output_tokens"), 2);
	ck_assert_double_eq(num(u, "total_tokens"), 7);
	/* 3 of the 5 input tokens came from the prefix cache (the streamed
	 * response.completed carries the same usage: compared above) */
	ck_assert_double_eq(num(cJSON_GetObjectItem(u, "input_tokens_details"), "cached_tokens"),
	                    3);
	ck_assert_double_eq(
	    num(cJSON_GetObjectItem(u, "output_tokens_details"), "reasoning_tokens"), 0);
	cJSON_Delete(o);
	cJSON_Delete(c.events);
	resp_stream_free(rs);
}
END_TEST

static struct tool_event tev(enum tool_event_kind k, const char *text)
{
	return (struct tool_event){.kind = k,
	                           .index = 0,
	                           .id = k == TOOL_EV_CALL_BEGIN ? "call_abc" : NULL,
	                           .name = k == TOOL_EV_CALL_BEGIN ? "weather" : NULL,
	                           .text = text,
	                           .len = text ? strlen(text) : 0};
}

/* Text, then a call: the message closes before the function_call opens. */
static void feed_call(struct resp_stream *rs)
{
	struct tool_event evs[] = {tev(TOOL_EV_CONTENT, "Let me check."),
	                           tev(TOOL_EV_CALL_BEGIN, NULL), tev(TOOL_EV_ARGS, "{\"city\":"),
	                           tev(TOOL_EV_ARGS, "\"Paris\"}"), tev(TOOL_EV_CALL_END, NULL)};
	for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
		ck_assert_int_eq(resp_stream_call(rs, &evs[i]), 0);
}

START_TEST(test_events_call)
{
	struct collected c;
	struct resp_stream *rs = stream_new(&c, "resp_0123456789abcdef01234567");
	ck_assert_int_eq(resp_stream_open(rs), 0);
	feed_call(rs);
	cJSON *o = resp_stream_finish(rs, GEN_FINISH_STOP, 10, 0, 12);
	char types[2048];
	types_of(c.events, types, sizeof(types));
	ck_assert_str_eq(types, "response.created,response.in_progress,response.output_item.added,"
	                        "response.content_part.added,response.output_text.delta,"
	                        "response.output_text.done,response.content_part.done,"
	                        "response.output_item.done,response.output_item.added,"
	                        "response.function_call_arguments.delta,"
	                        "response.function_call_arguments.delta,"
	                        "response.function_call_arguments.done,response.output_item.done,"
	                        "response.completed");
	check_sequence(c.events);
	cJSON *added = cJSON_GetArrayItem(c.events, 8);
	ck_assert_double_eq(num(added, "output_index"), 1);
	cJSON *item = cJSON_GetObjectItem(added, "item");
	const char *fc_id = str(item, "id");
	ck_assert(!strncmp(fc_id, "fc_", 3));
	ck_assert_str_eq(str(item, "type"), "function_call");
	ck_assert_str_eq(str(item, "call_id"), "call_abc");
	ck_assert_str_eq(str(item, "name"), "weather");
	ck_assert_str_eq(str(item, "arguments"), "");
	ck_assert_str_eq(str(item, "status"), "in_progress");
	cJSON *d = cJSON_GetArrayItem(c.events, 9);
	ck_assert_str_eq(str(d, "item_id"), fc_id);
	ck_assert_double_eq(num(d, "output_index"), 1);
	ck_assert_str_eq(str(d, "delta"), "{\"city\":");
	cJSON *done = cJSON_GetArrayItem(c.events, 11);
	ck_assert_str_eq(str(done, "arguments"), "{\"city\":\"Paris\"}");
	ck_assert_str_eq(str(done, "name"), "weather");
	ck_assert_str_eq(str(done, "item_id"), fc_id);
	cJSON *out = cJSON_GetObjectItem(o, "output");
	ck_assert_int_eq(cJSON_GetArraySize(out), 2);
	ck_assert_str_eq(str(cJSON_GetArrayItem(out, 0), "type"), "message");
	cJSON *fc = cJSON_GetArrayItem(out, 1);
	ck_assert_str_eq(str(fc, "type"), "function_call");
	ck_assert_str_eq(str(fc, "status"), "completed");
	ck_assert_str_eq(str(fc, "arguments"), "{\"city\":\"Paris\"}");
	ck_assert_str_eq(str(fc, "call_id"), "call_abc");
	ck_assert_str_ne(str(cJSON_GetArrayItem(out, 0), "id"), fc_id);
	cJSON_Delete(o);
	cJSON_Delete(c.events);
	resp_stream_free(rs);
}
END_TEST

/* stream:false builds the same object without any listener. */
START_TEST(test_whole_equals_stream)
{
	struct collected c;
	const char *id = "resp_0123456789abcdef01234567";
	struct resp_stream *a = stream_new(&c, id), *b = stream_new(NULL, id);
	resp_stream_open(a);
	resp_stream_open(b);
	feed_call(a);
	feed_call(b);
	cJSON *oa = resp_stream_finish(a, GEN_FINISH_STOP, 3, 0, 4);
	cJSON *ob = resp_stream_finish(b, GEN_FINISH_STOP, 3, 0, 4);
	ck_assert(cJSON_Compare(oa, ob, true));
	cJSON_Delete(oa);
	cJSON_Delete(ob);
	cJSON_Delete(c.events);
	resp_stream_free(a);
	resp_stream_free(b);
}
END_TEST

START_TEST(test_events_incomplete)
{
	struct collected c;
	struct resp_stream *rs = stream_new(&c, "resp_0123456789abcdef01234567");
	resp_stream_open(rs);
	resp_stream_text(rs, "Once", 4);
	cJSON *o = resp_stream_finish(rs, GEN_FINISH_LENGTH, 4, 0, 1);
	int n = cJSON_GetArraySize(c.events);
	cJSON *last = cJSON_GetArrayItem(c.events, n - 1);
	ck_assert_str_eq(str(last, "type"), "response.incomplete");
	ck_assert_str_eq(str(o, "status"), "incomplete");
	ck_assert_str_eq(str(cJSON_GetObjectItem(o, "incomplete_details"), "reason"),
	                 "max_output_tokens");
	/* none from the prefix cache: cached_tokens is there, 0 */
	cJSON *u = cJSON_GetObjectItem(o, "usage");
	ck_assert_double_eq(num(cJSON_GetObjectItem(u, "input_tokens_details"), "cached_tokens"),
	                    0);
	cJSON *msg = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "output"), 0);
	ck_assert_str_eq(str(msg, "status"), "incomplete");
	ck_assert_str_eq(
	    str(cJSON_GetObjectItem(cJSON_GetArrayItem(c.events, n - 2), "item"), "status"),
	    "incomplete");
	cJSON_Delete(o);
	cJSON_Delete(c.events);
	resp_stream_free(rs);
}
END_TEST

/* What a client sends back and echoes: reasoning items in input (dropped),
 * a reasoning field without effort or summary, and one with an effort. */
START_TEST(test_reasoning_accepted)
{
	struct gen_args a =
	    parsed("{\"input\":[{\"role\":\"user\",\"content\":\"hi\"},{\"type\":\"reasoning\","
	           "\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\","
	           "\"text\":\"hm\"}]},{\"role\":\"assistant\",\"content\":\"Hello\"}],"
	           "\"reasoning\":{\"effort\":null,\"summary\":null}}");
	ck_assert_uint_eq(a.n_messages, 2);
	ck_assert_str_eq(a.messages[1].role, "assistant");
	gen_args_deinit(&a);
	a = parsed("{\"input\":\"x\",\"reasoning\":{}}");
	ck_assert_ptr_null(a.reasoning_effort);
	gen_args_deinit(&a);
	/* an effort is the chat template's reasoning_effort, echoed back */
	a = parsed("{\"input\":\"x\",\"reasoning\":{\"effort\":\"high\"}}");
	ck_assert_str_eq(a.reasoning_effort, "high");
	cJSON *o = responses_object_new(&a, "resp_1", "m", 0);
	const cJSON *r = cJSON_GetObjectItem(o, "reasoning");
	ck_assert_str_eq(cJSON_GetObjectItem(r, "effort")->valuestring, "high");
	cJSON_Delete(o);
	gen_args_deinit(&a);
}
END_TEST

/* Reasoning, then text: a reasoning item (rs_, its reasoning_text part,
 * no summary) closed before the message opens; reasoning alone still gets
 * an empty message after it. */
START_TEST(test_events_reasoning)
{
	struct collected c;
	struct resp_stream *rs = stream_new(&c, "resp_0123456789abcdef01234567");
	resp_stream_open(rs);
	ck_assert_int_eq(resp_stream_reasoning(rs, "Let me ", 7), 0);
	ck_assert_int_eq(resp_stream_reasoning(rs, "see.", 4), 0);
	ck_assert_int_eq(resp_stream_text(rs, "Paris.", 6), 0);
	cJSON *o = resp_stream_finish(rs, GEN_FINISH_STOP, 4, 0, 9);
	char types[2048];
	types_of(c.events, types, sizeof(types));
	ck_assert_str_eq(types, "response.created,response.in_progress,response.output_item.added,"
	                        "response.content_part.added,response.reasoning_text.delta,"
	                        "response.reasoning_text.delta,response.reasoning_text.done,"
	                        "response.content_part.done,response.output_item.done,"
	                        "response.output_item.added,response.content_part.added,"
	                        "response.output_text.delta,response.output_text.done,"
	                        "response.content_part.done,response.output_item.done,"
	                        "response.completed");
	check_sequence(c.events);
	cJSON *out = cJSON_GetObjectItem(o, "output"), *r = cJSON_GetArrayItem(out, 0);
	ck_assert_str_eq(str(r, "type"), "reasoning");
	ck_assert_str_eq(str(r, "id"), "rs_0123456789abcdef01234567_0");
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r, "summary")), 0);
	cJSON *part = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "content"), 0);
	ck_assert_str_eq(str(part, "type"), "reasoning_text");
	ck_assert_str_eq(str(part, "text"), "Let me see.");
	ck_assert_str_eq(str(cJSON_GetArrayItem(out, 1), "type"), "message");
	cJSON *done = cJSON_GetArrayItem(c.events, 6);
	ck_assert_str_eq(str(done, "text"), "Let me see.");
	ck_assert_str_eq(str(done, "item_id"), "rs_0123456789abcdef01234567_0");
	cJSON_Delete(o);
	cJSON_Delete(c.events);
	resp_stream_free(rs);
	rs = stream_new(NULL, "resp_0123456789abcdef01234567");
	resp_stream_reasoning(rs, "hm", 2);
	o = resp_stream_finish(rs, GEN_FINISH_STOP, 4, 0, 1);
	out = cJSON_GetObjectItem(o, "output");
	ck_assert_int_eq(cJSON_GetArraySize(out), 2);
	ck_assert_str_eq(str(cJSON_GetArrayItem(out, 1), "type"), "message");
	cJSON_Delete(o);
	resp_stream_free(rs);
}
END_TEST

/* No text at all: still one (empty) message, so output_text reads "". */
START_TEST(test_events_empty)
{
	struct collected c;
	struct resp_stream *rs = stream_new(&c, "resp_0123456789abcdef01234567");
	resp_stream_open(rs);
	cJSON *o = resp_stream_finish(rs, GEN_FINISH_STOP, 4, 0, 0);
	char types[1024];
	types_of(c.events, types, sizeof(types));
	ck_assert_str_eq(types, "response.created,response.in_progress,response.output_item.added,"
	                        "response.content_part.added,response.output_text.done,"
	                        "response.content_part.done,response.output_item.done,"
	                        "response.completed");
	cJSON *out = cJSON_GetObjectItem(o, "output");
	ck_assert_int_eq(cJSON_GetArraySize(out), 1);
	cJSON *p0 =
	    cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(out, 0), "content"), 0);
	ck_assert_str_eq(str(p0, "text"), "");
	cJSON_Delete(o);
	cJSON_Delete(c.events);
	resp_stream_free(rs);
}
END_TEST

START_TEST(test_events_fail)
{
	struct collected c;
	struct resp_stream *rs = stream_new(&c, "resp_0123456789abcdef01234567");
	resp_stream_open(rs);
	resp_stream_text(rs, "Once", 4);
	ck_assert_int_eq(
	    resp_stream_fail(rs, "the server is shutting down", "server_shutdown", NULL), 0);
	int n = cJSON_GetArraySize(c.events);
	cJSON *err = cJSON_GetArrayItem(c.events, n - 2),
	      *failed = cJSON_GetArrayItem(c.events, n - 1);
	ck_assert_str_eq(str(err, "type"), "error");
	ck_assert_str_eq(str(err, "code"), "server_shutdown");
	ck_assert_str_eq(str(err, "message"), "the server is shutting down");
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(err, "param")));
	ck_assert_str_eq(str(failed, "type"), "response.failed");
	cJSON *resp = cJSON_GetObjectItem(failed, "response");
	ck_assert_str_eq(str(resp, "status"), "failed");
	ck_assert_str_eq(str(cJSON_GetObjectItem(resp, "error"), "code"), "server_shutdown");
	check_sequence(c.events);
	cJSON_Delete(c.events);
	resp_stream_free(rs);
}
END_TEST

/* A NUL byte of the text is text in every event that carries it. */
START_TEST(test_events_nul)
{
	struct collected c;
	struct resp_stream *rs = stream_new(&c, "resp_0123456789abcdef01234567");
	resp_stream_text(rs, "a\0b", 3);
	cJSON *o = resp_stream_finish(rs, GEN_FINISH_STOP, 1, 0, 1);
	char *s = cJSON_PrintUnformatted(o);
	ck_assert_msg(strstr(s, "\"text\":\"a\\u0000b\""), "%s", s);
	free(s);
	s = cJSON_PrintUnformatted(c.events);
	ck_assert_msg(strstr(s, "\"delta\":\"a\\u0000b\""), "%s", s);
	free(s);
	cJSON_Delete(o);
	cJSON_Delete(c.events);
	resp_stream_free(rs);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("responses");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_string_input);
	tcase_add_test(tc, test_items);
	tcase_add_test(tc, test_text_format);
	tcase_add_test(tc, test_tools);
	tcase_add_test(tc, test_nul);
	tcase_add_loop_test(tc, test_refused, 0, (int)(sizeof(refused) / sizeof(refused[0])));
	tcase_add_test(tc, test_ids);
	tcase_add_test(tc, test_object_echo);
	tcase_add_test(tc, test_events_text);
	tcase_add_test(tc, test_events_call);
	tcase_add_test(tc, test_whole_equals_stream);
	tcase_add_test(tc, test_events_incomplete);
	tcase_add_test(tc, test_events_empty);
	tcase_add_test(tc, test_events_reasoning);
	tcase_add_test(tc, test_reasoning_accepted);
	tcase_add_test(tc, test_events_fail);
	tcase_add_test(tc, test_events_nul);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
