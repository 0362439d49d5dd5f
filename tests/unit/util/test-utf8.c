/* util/utf8: every code point round-trips through encode and decode, and
 * the RFC 3629 edges (overlongs, surrogates, above U+10FFFF, truncation)
 * decode as U+FFFD of length 1 or report an incomplete prefix. */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/utf8.h"
#include "testutil.h"

/* One code point's round trip; false at the first thing that is off. */
static bool round_trips(uint32_t cp)
{
	char buf[4];
	size_t len = utf8_encode(cp, buf), n = 0;
	const unsigned char *u = (const unsigned char *)buf;
	if (len != (cp < 0x80 ? 1u : cp < 0x800 ? 2u : cp < 0x10000 ? 3u : 4u))
		return false;
	if (utf8_sequence_status(u, len) != (int)len || utf8_decode(u, len, &n) != cp || n != len)
		return false;
	/* every proper prefix is incomplete, not invalid */
	return len == 1 || utf8_sequence_status(u, len - 1) == 0;
}

START_TEST(test_round_trip_all_scalars)
{
	uint32_t first_bad = UINT32_MAX;
	for (uint32_t cp = 0; cp < 0x110000 && first_bad == UINT32_MAX; cp++)
		if (!(cp >= 0xD800 && cp <= 0xDFFF) && !round_trips(cp))
			first_bad = cp;
	ck_assert_msg(first_bad == UINT32_MAX, "U+%04X does not round-trip", first_bad);
}
END_TEST

static void assert_invalid(const char *bytes, size_t len)
{
	size_t n = 0;
	ck_assert_int_eq(utf8_sequence_status((const unsigned char *)bytes, len), -1);
	ck_assert_uint_eq(utf8_decode((const unsigned char *)bytes, len, &n), 0xFFFD);
	ck_assert_uint_eq(n, 1);
}

START_TEST(test_invalid_sequences)
{
	assert_invalid("\xC0\xAF", 2);         /* overlong '/' */
	assert_invalid("\xC1\xBF", 2);         /* overlong */
	assert_invalid("\xE0\x80\xAF", 3);     /* overlong, 3 bytes */
	assert_invalid("\xF0\x80\x80\xAF", 4); /* overlong, 4 bytes */
	assert_invalid("\xED\xA0\x80", 3);     /* U+D800, a surrogate */
	assert_invalid("\xED\xBF\xBF", 3);     /* U+DFFF */
	assert_invalid("\xF4\x90\x80\x80", 4); /* U+110000 */
	assert_invalid("\xF5\x80\x80\x80", 4); /* lead byte past F4 */
	assert_invalid("\x80", 1);             /* a lone continuation byte */
	assert_invalid("\xFF", 1);
	assert_invalid("\xE2\x28\xA1", 3); /* bad continuation */
	/* Truncated: decode gives U+FFFD of length 1, status says incomplete. */
	size_t n = 0;
	ck_assert_uint_eq(utf8_decode((const unsigned char *)"\xE2\x82", 2, &n), 0xFFFD);
	ck_assert_uint_eq(n, 1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("utf8");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_round_trip_all_scalars);
	tcase_add_test(tc, test_invalid_sequences);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
