/* openai.c's chat tool-call objects and typed SSE events, shape by shape
 * against OpenAI's: the first delta of a call (role, content null, id,
 * type, name, empty arguments), argument pieces (index and arguments
 * only), message.tool_calls with content null when there is no text, and
 * "event: <type>" framing, and usage with its cached prompt tokens. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai.h"
#include "testutil.h"

static const struct oa_ctx chat = {.chat = true, .id = "chatcmpl-1", .model = "m", .created = 1};

static cJSON *delta_of(cJSON *chunk)
{
	cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(chunk, "choices"), 0);
	return cJSON_GetObjectItem(ch, "delta");
}

START_TEST(test_call_chunks)
{
	cJSON *c = oa_tool_call_chunk(&chat, true, 0, "call_x", "weather", NULL, 0);
	ck_assert_str_eq(cJSON_GetObjectItem(c, "object")->valuestring, "chat.completion.chunk");
	cJSON *d = delta_of(c);
	ck_assert_str_eq(cJSON_GetObjectItem(d, "role")->valuestring, "assistant");
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(d, "content")));
	cJSON *call = cJSON_GetArrayItem(cJSON_GetObjectItem(d, "tool_calls"), 0);
	ck_assert_int_eq(cJSON_GetObjectItem(call, "index")->valueint, 0);
	ck_assert_str_eq(cJSON_GetObjectItem(call, "id")->valuestring, "call_x");
	ck_assert_str_eq(cJSON_GetObjectItem(call, "type")->valuestring, "function");
	cJSON *fn = cJSON_GetObjectItem(call, "function");
	ck_assert_str_eq(cJSON_GetObjectItem(fn, "name")->valuestring, "weather");
	ck_assert_str_eq(cJSON_GetObjectItem(fn, "arguments")->valuestring, "");
	cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "choices"), 0);
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(ch, "finish_reason")));
	cJSON_Delete(c);

	c = oa_tool_call_chunk(&chat, false, 1, NULL, NULL, "{\"a\":", 5);
	d = delta_of(c);
	ck_assert_ptr_null(cJSON_GetObjectItem(d, "role"));
	ck_assert_ptr_null(cJSON_GetObjectItem(d, "content"));
	call = cJSON_GetArrayItem(cJSON_GetObjectItem(d, "tool_calls"), 0);
	ck_assert_int_eq(cJSON_GetObjectItem(call, "index")->valueint, 1);
	ck_assert_ptr_null(cJSON_GetObjectItem(call, "id"));
	ck_assert_ptr_null(cJSON_GetObjectItem(call, "type"));
	fn = cJSON_GetObjectItem(call, "function");
	ck_assert_ptr_null(cJSON_GetObjectItem(fn, "name"));
	ck_assert_str_eq(cJSON_GetObjectItem(fn, "arguments")->valuestring, "{\"a\":");
	cJSON_Delete(c);
}
END_TEST

START_TEST(test_final_calls)
{
	cJSON *o = oa_final(&chat, "", 0, NULL, "tool_calls", 3, 0, 4);
	cJSON *calls = cJSON_CreateArray();
	cJSON_AddItemToArray(calls, oa_tool_call("call_x", "weather", "{\"city\":\"Oslo\"}", 15));
	oa_final_set_tool_calls(o, calls);
	cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
	ck_assert_str_eq(cJSON_GetObjectItem(ch, "finish_reason")->valuestring, "tool_calls");
	cJSON *msg = cJSON_GetObjectItem(ch, "message");
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(msg, "content")));
	cJSON *call = cJSON_GetArrayItem(cJSON_GetObjectItem(msg, "tool_calls"), 0);
	ck_assert_str_eq(cJSON_GetObjectItem(call, "id")->valuestring, "call_x");
	ck_assert_str_eq(cJSON_GetObjectItem(call, "type")->valuestring, "function");
	cJSON *fn = cJSON_GetObjectItem(call, "function");
	ck_assert_str_eq(cJSON_GetObjectItem(fn, "name")->valuestring, "weather");
	ck_assert_str_eq(cJSON_GetObjectItem(fn, "arguments")->valuestring, "{\"city\":\"Oslo\"}");
	cJSON_Delete(o);
	/* text before the call stays */
	o = oa_final(&chat, "Sure.", 5, NULL, "tool_calls", 3, 0, 4);
	oa_final_set_tool_calls(o, cJSON_CreateArray());
	ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
	ck_assert_str_eq(
	    cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "message"), "content")->valuestring,
	    "Sure.");
	cJSON_Delete(o);
}
END_TEST

static double cached_tokens(const cJSON *o)
{
	cJSON *u = cJSON_GetObjectItem(o, "usage");
	cJSON *d = cJSON_GetObjectItem(u, "prompt_tokens_details");
	cJSON *v = cJSON_GetObjectItem(d, "cached_tokens");
	ck_assert_msg(cJSON_IsNumber(v), "no usage.prompt_tokens_details.cached_tokens");
	ck_assert_double_eq(cJSON_GetObjectItem(u, "prompt_tokens")->valuedouble, 7);
	ck_assert_double_eq(cJSON_GetObjectItem(u, "completion_tokens")->valuedouble, 3);
	ck_assert_double_eq(cJSON_GetObjectItem(u, "total_tokens")->valuedouble, 10);
	return v->valuedouble;
}

/* usage.prompt_tokens_details.cached_tokens: the prompt tokens the prefix
 * cache supplied, in the whole object and the stream's usage chunk, chat and
 * completions alike, and 0 (not absent) when there were none. */
START_TEST(test_usage_cached_tokens)
{
	static const struct oa_ctx text = {.id = "cmpl-1", .model = "m", .created = 1};
	const struct oa_ctx *ctx[] = {&chat, &text};
	for (int i = 0; i < 2; i++) {
		cJSON *o = oa_final(ctx[i], "Hi", 2, NULL, "stop", 7, 5, 3);
		ck_assert_double_eq(cached_tokens(o), 5);
		cJSON_Delete(o);
		o = oa_usage_chunk(ctx[i], 7, 6, 3);
		ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "choices")), 0);
		ck_assert_double_eq(cached_tokens(o), 6);
		cJSON_Delete(o);
		o = oa_final(ctx[i], "Hi", 2, NULL, "stop", 7, 0, 3);
		ck_assert_double_eq(cached_tokens(o), 0);
		cJSON_Delete(o);
	}
}
END_TEST

START_TEST(test_sse_event)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	cJSON *ev = cJSON_CreateObject();
	cJSON_AddStringToObject(ev, "type", "response.created");
	ck_assert_int_eq(sse_append_event(&buf, &len, &cap, "response.created", ev), 0);
	ck_assert_str_eq(buf, "event: response.created\ndata: {\"type\":\"response.created\"}\n\n");
	ck_assert_uint_eq(len, strlen(buf));
	free(buf);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("openai");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_call_chunks);
	tcase_add_test(tc, test_final_calls);
	tcase_add_test(tc, test_usage_cached_tokens);
	tcase_add_test(tc, test_sse_event);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
