/* The one session-id rule (session/session_key.c) and the looser rule for
 * what a request may give as an id, as every caller (routes, request
 * bodies, response ids, snapshots, keys) now applies them. */
#include <check.h>
#include <string.h>

#include "session/session_key.h"
#include "testutil.h"

START_TEST(test_id_rule)
{
	ck_assert(session_id_valid("0"));
	ck_assert(session_id_valid("deadBEEF"));
	ck_assert(session_id_valid("0123456789abcdef0123456789ABCDEF")); /* 32 */
	ck_assert(!session_id_valid("0123456789abcdef0123456789ABCDEF0"));
	ck_assert(!session_id_valid(""));
	ck_assert(!session_id_valid(NULL));
	ck_assert(!session_id_valid("abcg"));
	ck_assert(!session_id_valid("ab cd"));
	ck_assert(!session_id_valid("ab-cd"));
}
END_TEST

START_TEST(test_id_rule_over_n_bytes)
{
	/* an id inside a path or a response id ends where its segment does */
	ck_assert(session_id_valid_n("abc/append", 3));
	ck_assert(!session_id_valid_n("abc/append", 4));
	ck_assert(!session_id_valid_n("abc", 0));
	char long_id[40];
	memset(long_id, 'a', sizeof(long_id));
	ck_assert(session_id_valid_n(long_id, SESSION_ID_MAX));
	ck_assert(!session_id_valid_n(long_id, SESSION_ID_MAX + 1));
}
END_TEST

START_TEST(test_nameable)
{
	char s[SESSION_ID_NAME_MAX + 2];
	memset(s, 'x', SESSION_ID_NAME_MAX);
	s[SESSION_ID_NAME_MAX] = '\0';
	ck_assert(session_id_nameable(s)); /* 64 bytes: may be unknown, is a name */
	s[SESSION_ID_NAME_MAX] = 'x';
	s[SESSION_ID_NAME_MAX + 1] = '\0';
	ck_assert(!session_id_nameable(s));
	ck_assert(session_id_nameable("not-hex~"));
	ck_assert(!session_id_nameable(""));
	ck_assert(!session_id_nameable("a b"));
	ck_assert(!session_id_nameable("a\tb"));
	ck_assert(!session_id_nameable("caf\xc3\xa9"));
	/* every valid id is nameable */
	ck_assert(session_id_nameable("0123456789abcdef0123456789ABCDEF"));
}
END_TEST

START_TEST(test_keys_follow_the_id_rule)
{
	char key[SESSION_KEY_LEN];
	ck_assert_int_eq(session_key_make("key:0123456789abcdef", "abc", key), 0);
	ck_assert_str_eq(key, "0123456789abcdef-abc");
	ck_assert(session_key_valid(key));
	ck_assert_str_eq(session_key_id(key), "abc");
	ck_assert_int_eq(session_key_make("", "abc", key), 0);
	ck_assert_str_eq(key, "abc");
	ck_assert_int_lt(session_key_make("", "xyz", key), 0);
	ck_assert(!session_key_valid("0123456789abcdef-xyz"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("session-key");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_id_rule);
	tcase_add_test(tc, test_id_rule_over_n_bytes);
	tcase_add_test(tc, test_nameable);
	tcase_add_test(tc, test_keys_follow_the_id_rule);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
