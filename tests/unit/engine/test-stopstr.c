/* The stop-string matcher on real story text: every way of splitting the
 * stream into two or three pieces (and byte by byte) releases exactly the
 * text before the first stop string, never the stop string, and holds back
 * only what could still become one. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/stopstr.h"
#include "util/errbuf.h"
#include "testutil.h"

static const char story[] =
	"Once upon a time, there was a little girl named Lily. She loved to play "
	"outside in the park. One day, she saw a big, red ball. \"Mom, can I play?\" "
	"she asked.";

static struct stop_matcher *make(const char *const *stops, size_t n)
{
	struct stop_matcher *m = NULL;
	char err[SINKD_ERR_LEN];
	int rc = stop_matcher_new(stops, n, &m, err, sizeof(err));
	ck_assert_msg(rc == 0, "stop_matcher_new: %s", err);
	return m;
}

/* Streams text cut at the given positions (sorted, inside the text); returns
 * the released text (malloc'ed) and whether a stop fired. */
static char *stream(struct stop_matcher *m, const char *text, const size_t *cuts, size_t n_cuts,
		    bool *stopped)
{
	size_t len = strlen(text), pos = 0, got = 0;
	char *all = calloc(1, len + 1);
	char out[1024];
	*stopped = false;
	for (size_t c = 0; c <= n_cuts; c++) {
		size_t end = c < n_cuts ? cuts[c] : len;
		bool st = false;
		size_t n = stop_matcher_feed(m, text + pos, end - pos, out, sizeof(out), &st);
		ck_assert_uint_eq(strlen(out), n);
		ck_assert(!*stopped || n == 0); /* nothing after a stop */
		memcpy(all + got, out, n);
		got += n;
		*stopped |= st;
		pos = end;
	}
	size_t n = stop_matcher_flush(m, out, sizeof(out));
	ck_assert(!*stopped || n == 0);
	memcpy(all + got, out, n);
	all[got + n] = '\0';
	return all;
}

/* Every split in two and three pieces gives `want` and `want_stop`. */
static void check_all_splits(const char *const *stops, size_t n_stops, const char *text,
			     const char *want, bool want_stop)
{
	struct stop_matcher *m = make(stops, n_stops);
	size_t len = strlen(text);
	bool stopped;
	for (size_t a = 0; a <= len; a++) {
		for (size_t b = a; b <= len; b += (len > 60 ? 7 : 1)) {
			size_t cuts[2] = {a, b};
			stop_matcher_reset(m);
			char *got = stream(m, text, cuts, 2, &stopped);
			ck_assert_msg(strcmp(got, want) == 0, "cuts %zu,%zu: got '%s' want '%s'", a, b,
				      got, want);
			ck_assert_int_eq(stopped, want_stop);
			free(got);
		}
	}
	/* Byte by byte. */
	size_t *cuts = malloc(len * sizeof(*cuts));
	for (size_t i = 0; i < len; i++)
		cuts[i] = i + 1;
	stop_matcher_reset(m);
	char *got = stream(m, text, cuts, len ? len - 1 : 0, &stopped);
	ck_assert_str_eq(got, want);
	ck_assert_int_eq(stopped, want_stop);
	free(got);
	free(cuts);
	stop_matcher_free(m);
}

START_TEST(test_stop_in_story)
{
	const char *stops[] = {"One day", "\"Mom"};
	check_all_splits(stops, 2, story,
			 "Once upon a time, there was a little girl named Lily. She loved to play "
			 "outside in the park. ",
			 true);
}
END_TEST

START_TEST(test_no_stop_releases_everything)
{
	const char *stops[] = {"Lily!", "park.\n", "zzz"};
	check_all_splits(stops, 3, story, story, false);
	check_all_splits(NULL, 0, story, story, false);
}
END_TEST

START_TEST(test_partial_prefix_at_end_is_flushed)
{
	/* The text ends with "she ask", a prefix of "she asked?": held, then flushed. */
	const char *stops[] = {"she asked?"};
	check_all_splits(stops, 1, "\"Mom, can I play?\" she ask", "\"Mom, can I play?\" she ask",
			 false);
}
END_TEST

START_TEST(test_overlapping_stops)
{
	/* The stop that ends first wins, whatever the split. */
	const char *stops[] = {"little girl", "little"};
	check_all_splits(stops, 2, "there was a little girl named Lily", "there was a ", true);
	const char *stops2[] = {"abcd", "bc"};
	check_all_splits(stops2, 2, "xxabcdyy", "xxa", true);
	/* A false start followed by the real one: "aab" with stop "ab". */
	const char *stops3[] = {"ab"};
	check_all_splits(stops3, 1, "aaab", "aa", true);
	/* Self-overlapping stop string. */
	const char *stops4[] = {"aab"};
	check_all_splits(stops4, 1, "xaaaab!", "xaa", true);
}
END_TEST

START_TEST(test_holds_back_only_prefixes)
{
	const char *stops[] = {"</s>", "<|im_end|>"};
	struct stop_matcher *m = make(stops, 2);
	char out[512];
	bool st;
	ck_assert_uint_eq(stop_matcher_feed(m, "Hello <", 7, out, sizeof(out), &st), 6);
	ck_assert_str_eq(out, "Hello ");
	ck_assert(!st);
	ck_assert_uint_eq(stop_matcher_feed(m, "|im", 3, out, sizeof(out), &st), 0);
	ck_assert_uint_eq(stop_matcher_feed(m, "_x", 2, out, sizeof(out), &st), 6);
	ck_assert_str_eq(out, "<|im_x"); /* no longer a prefix: released */
	ck_assert_uint_eq(stop_matcher_feed(m, " world</", 8, out, sizeof(out), &st), 6);
	ck_assert_str_eq(out, " world");
	ck_assert_uint_eq(stop_matcher_feed(m, "s>tail", 6, out, sizeof(out), &st), 0);
	ck_assert(st);
	ck_assert_uint_eq(stop_matcher_feed(m, "more", 4, out, sizeof(out), &st), 0);
	ck_assert(st);
	ck_assert_uint_eq(stop_matcher_flush(m, out, sizeof(out)), 0);
	stop_matcher_free(m);
}
END_TEST

START_TEST(test_small_output_buffer_loses_nothing)
{
	const char *stops[] = {"red ball"};
	struct stop_matcher *m = make(stops, 1);
	char out[8], all[512] = "";
	bool st = false;
	size_t n = stop_matcher_feed(m, story, strlen(story), out, sizeof(out), &st);
	ck_assert_uint_eq(n, 7);
	ck_assert(st);
	strcat(all, out);
	while ((n = stop_matcher_flush(m, out, sizeof(out))) > 0)
		strcat(all, out);
	ck_assert_str_eq(all, "Once upon a time, there was a little girl named Lily. She loved to "
			      "play outside in the park. One day, she saw a big, ");
	stop_matcher_free(m);
}
END_TEST

START_TEST(test_utf8_stop)
{
	const char *stops[] = {"\xc3\xa9t\xc3\xa9"}; /* "été" */
	check_all_splits(stops, 1, "un bel \xc3\xa9t\xc3\xa9 chaud", "un bel ", true);
}
END_TEST

START_TEST(test_errors)
{
	struct stop_matcher *m = (struct stop_matcher *)1;
	char err[SINKD_ERR_LEN];
	const char *many[17];
	for (int i = 0; i < 17; i++)
		many[i] = "x";
	ck_assert_int_eq(stop_matcher_new(many, 17, &m, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_null(m);
	ck_assert_ptr_nonnull(strstr(err, "16"));
	const char *empty[] = {"ok", ""};
	ck_assert_int_eq(stop_matcher_new(empty, 2, &m, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "stop string 1"));
	char long_stop[258];
	memset(long_stop, 'a', 257);
	long_stop[257] = '\0';
	const char *too_long[] = {long_stop};
	ck_assert_int_eq(stop_matcher_new(too_long, 1, &m, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "256"));
	long_stop[256] = '\0'; /* exactly 256 bytes is fine */
	ck_assert_int_eq(stop_matcher_new(too_long, 1, &m, err, sizeof(err)), 0);
	stop_matcher_free(m);
	ck_assert_int_eq(stop_matcher_new(many, 16, &m, err, sizeof(err)), 0);
	stop_matcher_free(m);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("stopstr");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_stop_in_story);
	tcase_add_test(tc, test_no_stop_releases_everything);
	tcase_add_test(tc, test_partial_prefix_at_end_is_flushed);
	tcase_add_test(tc, test_overlapping_stops);
	tcase_add_test(tc, test_holds_back_only_prefixes);
	tcase_add_test(tc, test_small_output_buffer_loses_nothing);
	tcase_add_test(tc, test_utf8_stop);
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
