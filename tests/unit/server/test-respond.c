/* The one mapping from error codes to what an OpenAI client sees
 * (server/respond.c): the status, type and code of every code the scheduler
 * and the session store return, the types that follow from a status, and
 * that no code falls through to a client error by accident. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "server/respond.h"
#include "testutil.h"
#include "util/sderr.h"

struct want {
	int rc;
	int status;
	const char *type;
	const char *code;
	bool retry;
};

/* What scheduler.h promises its callers and what an OpenAI client expects. */
static const struct want table[] = {
    {-EINVAL, 400, "invalid_request_error", "invalid_value", false},
    {-E2BIG, 400, "invalid_request_error", "context_length_exceeded", false},
    {-EBADMSG, 400, "invalid_request_error", "invalid_snapshot", false},
    {-ENOENT, 404, "invalid_request_error", "session_not_found", false},
    {-EBUSY, 409, "invalid_request_error", "conflict", false},
    {-EEXIST, 409, "invalid_request_error", "session_exists", false},
    {-ENOMEM, 500, "server_error", "out_of_memory", false},
    {-ENOTSUP, 501, "server_error", "not_supported", false},
    {-EAGAIN, 503, "server_error", "overloaded", true},
    {-ENOSPC, 503, "server_error", "overloaded", true},
    {SDERR_MODEL_MISMATCH, 400, "invalid_request_error", "snapshot_model_mismatch", false},
    {SDERR_OUT_OF_RANGE, 400, "invalid_request_error", "invalid_value", false},
    {SDERR_CONFLICT, 409, "invalid_request_error", "conflict", false},
    {SDERR_OWNER_SESSIONS, 429, "rate_limit_error", "per_key_max_sessions", true},
    {SDERR_MAX_SESSIONS, 503, "server_error", "max_sessions", true},
    {SDERR_UNCHECKED, 500, "server_error", "internal_error", false},
};

START_TEST(test_kind_of_each_code)
{
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		const struct want *w = &table[i];
		const struct respond_kind *k = respond_kind_of(w->rc);
		ck_assert_msg(k->status == w->status, "rc %d: status %d", w->rc, k->status);
		ck_assert_str_eq(k->type, w->type);
		ck_assert_str_eq(k->code, w->code);
		ck_assert_msg(k->retry == w->retry, "rc %d: retry %d", w->rc, k->retry);
		/* the type is the status's, whichever way an answer is built */
		ck_assert_str_eq(k->type, respond_type_of(k->status));
	}
}
END_TEST

START_TEST(test_unknown_codes_are_the_servers)
{
	/* An error nobody mapped is never blamed on the request. */
	const int unknown[] = {-EIO, -ENOBUFS, -EPERM, -1, 0};
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		const struct respond_kind *k = respond_kind_of(unknown[i]);
		ck_assert_int_eq(k->status, 500);
		ck_assert_str_eq(k->type, "server_error");
		ck_assert_str_eq(k->code, "internal_error");
		ck_assert(!k->retry);
	}
}
END_TEST

START_TEST(test_type_of_status)
{
	ck_assert_str_eq(respond_type_of(400), "invalid_request_error");
	ck_assert_str_eq(respond_type_of(401), "authentication_error");
	ck_assert_str_eq(respond_type_of(404), "invalid_request_error");
	ck_assert_str_eq(respond_type_of(405), "invalid_request_error");
	ck_assert_str_eq(respond_type_of(409), "invalid_request_error");
	ck_assert_str_eq(respond_type_of(413), "invalid_request_error");
	ck_assert_str_eq(respond_type_of(429), "rate_limit_error");
	ck_assert_str_eq(respond_type_of(431), "invalid_request_error");
	ck_assert_str_eq(respond_type_of(500), "server_error");
	ck_assert_str_eq(respond_type_of(501), "server_error");
	ck_assert_str_eq(respond_type_of(503), "server_error");
}
END_TEST

/* Every sinkd code is in the table above (so its answer is tested), and
 * only the caller's-bug code is the server's internal error. */
START_TEST(test_every_sderr_code_is_mapped)
{
	for (int rc = SDERR_BASE; rc >= SDERR_LAST; rc--) {
		bool listed = false;
		for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
			listed = listed || table[i].rc == rc;
		ck_assert_msg(listed, "%s (%d) is not in the table", sderr_name(rc), rc);
		const struct respond_kind *k = respond_kind_of(rc);
		ck_assert_msg(rc == SDERR_UNCHECKED || strcmp(k->code, "internal_error") != 0,
		              "%s (%d) has no mapping", sderr_name(rc), rc);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("respond");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_kind_of_each_code);
	tcase_add_test(tc, test_unknown_codes_are_the_servers);
	tcase_add_test(tc, test_type_of_status);
	tcase_add_test(tc, test_every_sderr_code_is_mapped);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
