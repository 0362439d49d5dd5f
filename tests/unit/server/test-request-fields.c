/* The field rules every request parser shares (server/request_fields.c):
 * the one duplicate-key check in both of its namings, and the client's
 * name of each field the scheduler can refuse, per API. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/request_fields.h"
#include "testutil.h"

static const char *const keys[] = {"role", "content", "name", NULL};

/* parse a JSON object, run the check, free it */
static int dup_check(const char *json, const char *where, enum request_dup_naming naming,
                     struct api_error *e)
{
	cJSON *o = cJSON_Parse(json);
	ck_assert_ptr_nonnull(o);
	memset(e, 0, sizeof(*e));
	int rc = request_fields_no_twice(o, keys, where, naming, e);
	cJSON_Delete(o);
	return rc;
}

START_TEST(test_no_twice_passes_single_and_unknown_keys)
{
	struct api_error e;
	ck_assert_int_eq(dup_check("{\"role\":1,\"content\":2,\"other\":3,\"other\":4}", NULL,
	                           REQUEST_DUP_AT_WHERE, &e),
	                 0);
	ck_assert_int_eq(dup_check("{}", "messages", REQUEST_DUP_AS_PATH, &e), 0);
}
END_TEST

START_TEST(test_no_twice_names_the_key_at_where)
{
	struct api_error e;
	ck_assert_int_eq(dup_check("{\"name\":1,\"name\":2}", NULL, REQUEST_DUP_AT_WHERE, &e),
	                 -EINVAL);
	ck_assert_int_eq(e.status, 400);
	ck_assert_str_eq(e.code, "duplicate_field");
	ck_assert_str_eq(e.param, "name");
	ck_assert_str_eq(e.message, "'name' is given more than once");
	ck_assert_int_eq(dup_check("{\"content\":1,\"role\":2,\"content\":3}", "messages",
	                           REQUEST_DUP_AT_WHERE, &e),
	                 -EINVAL);
	ck_assert_str_eq(e.param, "messages");
	ck_assert_str_eq(e.message, "'content' is given more than once");
}
END_TEST

START_TEST(test_no_twice_names_the_path)
{
	struct api_error e;
	ck_assert_int_eq(dup_check("{\"role\":1,\"role\":2}", "input[2]", REQUEST_DUP_AS_PATH, &e),
	                 -EINVAL);
	ck_assert_str_eq(e.code, "duplicate_field");
	ck_assert_str_eq(e.param, "input[2].role");
	ck_assert_str_eq(e.message, "'input[2].role' is given more than once");
	ck_assert_int_eq(dup_check("{\"role\":1,\"role\":2}", NULL, REQUEST_DUP_AS_PATH, &e),
	                 -EINVAL);
	ck_assert_str_eq(e.param, "role");
	ck_assert_str_eq(e.message, "'role' is given more than once");
}
END_TEST

START_TEST(test_field_names_per_api)
{
	const struct request_field_names completions = {0}, chat = {.chat = true},
	                                 responses = {.responses = true, .chat = true},
	                                 append = {.append = true};
	ck_assert_ptr_null(request_field_name(&chat, SCHED_FIELD_NONE));
	ck_assert_str_eq(request_field_name(&completions, SCHED_FIELD_PROMPT), "prompt");
	ck_assert_str_eq(request_field_name(&chat, SCHED_FIELD_PROMPT), "messages");
	ck_assert_str_eq(request_field_name(&responses, SCHED_FIELD_PROMPT), "input");
	ck_assert_str_eq(request_field_name(&append, SCHED_FIELD_PROMPT), "text");
	ck_assert_str_eq(request_field_name(&chat, SCHED_FIELD_MAX_TOKENS), "max_tokens");
	ck_assert_str_eq(request_field_name(&responses, SCHED_FIELD_MAX_TOKENS),
	                 "max_output_tokens");
	ck_assert_str_eq(request_field_name(&completions, SCHED_FIELD_SESSION_ID), "session_id");
	ck_assert_str_eq(request_field_name(&responses, SCHED_FIELD_SESSION_ID),
	                 "previous_response_id");
	/* a chat pins its system prompt, not a count of tokens */
	ck_assert_str_eq(request_field_name(&completions, SCHED_FIELD_PIN_PREFIX_TOKENS),
	                 "pin_prefix_tokens");
	ck_assert_str_eq(request_field_name(&chat, SCHED_FIELD_PIN_PREFIX_TOKENS), "messages");
	ck_assert_str_eq(request_field_name(&responses, SCHED_FIELD_PIN_PREFIX_TOKENS),
	                 "instructions");
	ck_assert_str_eq(request_field_name(&append, SCHED_FIELD_REVISE_LAST_TOKENS),
	                 "revise_last_tokens");
	ck_assert_str_eq(request_field_name(&completions, SCHED_FIELD_LOGIT_BIAS), "logit_bias");
	ck_assert_str_eq(request_field_name(&completions, SCHED_FIELD_WINDOW_SIZE), "window_size");
	ck_assert_str_eq(request_field_name(&completions, SCHED_FIELD_SINK_KEEP_COUNT),
	                 "sink_keep_count");
}
END_TEST

START_TEST(test_fail_and_oom)
{
	struct api_error e;
	ck_assert_int_eq(request_fail(&e, "n", "invalid_value", "'n' must be %d", 1), -EINVAL);
	ck_assert_int_eq(e.status, 400);
	ck_assert_str_eq(e.param, "n");
	ck_assert_str_eq(e.message, "'n' must be 1");
	ck_assert_int_eq(request_fail_oom(&e, NULL), -EINVAL);
	ck_assert_int_eq(e.status, 500);
	ck_assert_str_eq(e.code, "out_of_memory");
	ck_assert_str_eq(e.param, "");
}
END_TEST

START_TEST(test_readers_name_the_field)
{
	struct api_error e;
	cJSON *o = cJSON_Parse("{\"n\":2.5,\"b\":1,\"z\":null,\"s\":\"a\\u0000b\"}");
	ck_assert_ptr_nonnull(o);
	ck_assert_ptr_null(request_field(o, "z")); /* null is absent */
	ck_assert_ptr_null(request_field(o, "missing"));
	double d = 7;
	ck_assert_int_eq(request_get_num(o, "z", 0, 10, true, &d, &e), 0);
	ck_assert(d == 7); /* the default stays */
	ck_assert_int_eq(request_get_num(o, "n", 0, 10, false, &d, &e), 0);
	ck_assert(d == 2.5);
	ck_assert_int_eq(request_get_num(o, "n", 0, 10, true, &d, &e), -EINVAL);
	ck_assert_str_eq(e.param, "n");
	ck_assert_str_eq(e.code, "invalid_type");
	ck_assert_int_eq(request_get_num(o, "n", 0, 2, false, &d, &e), -EINVAL);
	ck_assert_str_eq(e.code, "invalid_value");
	bool flag = false;
	ck_assert_int_eq(request_get_bool(o, "b", &flag, &e), -EINVAL);
	ck_assert_str_eq(e.message, "'b' must be a boolean");
	cJSON_Delete(o);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("request-fields");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_no_twice_passes_single_and_unknown_keys);
	tcase_add_test(tc, test_no_twice_names_the_key_at_where);
	tcase_add_test(tc, test_no_twice_names_the_path);
	tcase_add_test(tc, test_field_names_per_api);
	tcase_add_test(tc, test_fail_and_oom);
	tcase_add_test(tc, test_readers_name_the_field);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
