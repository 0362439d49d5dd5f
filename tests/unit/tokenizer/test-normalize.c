/* NFC (tokenizer/normalize), the normalizer of Qwen2/Qwen3's tokenizer.json:
 * composition of a base and its marks, singletons, canonical order, marks
 * that stay apart, Hangul by arithmetic, text that needs nothing, and bytes
 * that are not UTF-8 carried through.  (Every code point alone and 200,000
 * random mark sequences were compared with Python's unicodedata when the
 * module was written.) */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/normalize.h"
#include "testutil.h"

static void expect_nfc(const char *in, const char *want)
{
	char *out = NULL;
	size_t n = 0;
	ck_assert_int_eq(unicode_nfc(in, strlen(in), &out, &n), 0);
	ck_assert_msg(out != NULL, "no output for \"%s\"", in);
	ck_assert_uint_eq(n, strlen(want));
	ck_assert_msg(memcmp(out, want, n) == 0, "NFC(\"%s\") = \"%.*s\", want \"%s\"", in, (int)n,
	              out, want);
	free(out);
}

START_TEST(test_compose_and_singletons)
{
	expect_nfc("cafe\xcc\x81", "caf\xc3\xa9");              /* e U+0301 -> U+00E9 */
	expect_nfc("\xe2\x84\xaa", "K");                        /* Kelvin sign U+212A */
	expect_nfc("\xe2\x84\xab", "\xc3\x85");                 /* Angstrom -> U+00C5 */
	expect_nfc("\xef\xa4\x80", "\xe8\xb1\x88");             /* U+F900 -> U+8C48 */
	expect_nfc("a\xcc\x81\xcc\x82", "\xc3\xa1\xcc\x82");    /* a + acute + circumflex */
	expect_nfc("\xcd\x84", "\xcc\x88\xcc\x81");             /* U+0344 -> U+0308 U+0301 */
	expect_nfc("\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc"); /* excluded: U+0958 stays apart */
}
END_TEST

START_TEST(test_canonical_order)
{
	/* q + dot below (220) after dot above (230): reordered, nothing composes. */
	expect_nfc("q\xcc\x87\xcc\xa3", "q\xcc\xa3\xcc\x87");
	/* s + dot above + dot below -> U+1E69 (s with dot below and dot above). */
	expect_nfc("s\xcc\x87\xcc\xa3", "\xe1\xb9\xa9");
}
END_TEST

START_TEST(test_hangul)
{
	/* U+1112 U+1161 U+11AB -> U+D55C; U+D55C stays. */
	expect_nfc("\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab", "\xed\x95\x9c");
	expect_nfc("\xed\x95\x9c\xea\xb8\x80", "\xed\x95\x9c\xea\xb8\x80");
}
END_TEST

START_TEST(test_fast_path_and_raw_bytes)
{
	char *out = (char *)1;
	size_t n = 1;
	const char *plain = "plain ASCII and Latin-1 \xc3\xa9";
	ck_assert_int_eq(unicode_nfc(plain, strlen(plain), &out, &n), 0);
	ck_assert_ptr_null(out);
	ck_assert_uint_eq(n, 0);
	expect_nfc("\xff"
	           "e\xcc\x81\xfe",
	           "\xff\xc3\xa9\xfe");
	expect_nfc("\xcc", "\xcc"); /* a truncated sequence */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("normalize");
	TCase *tc = tcase_create("nfc");
	tcase_add_test(tc, test_compose_and_singletons);
	tcase_add_test(tc, test_canonical_order);
	tcase_add_test(tc, test_hangul);
	tcase_add_test(tc, test_fast_path_and_raw_bytes);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
