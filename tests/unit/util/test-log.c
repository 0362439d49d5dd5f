/* The logger: formats, levels, and the rule that user text never reaches it. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"
#include "util/log.h"
#include "testutil.h"

static char *capture(enum log_format format, enum log_level level)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	struct sinkd_log *log = log_new(mem, level, format);
	struct log_field fields[] = {LOG_STR("request_id", "req-1"), LOG_INT("status", 200),
				     LOG_STR("prompt", "my secret prompt"),
				     LOG_STR("Content", "the completion"), LOG_DBL("ttft_ms", 1.5),
				     LOG_END};
	log_event(log, LOG_INFO, "http", "request \"done\"", fields);
	log_msg(log, LOG_DEBUG, "http", "debug %d", 7);
	log_free(log);
	fclose(mem);
	return buf;
}

START_TEST(test_json_line)
{
	char *out = capture(LOG_FORMAT_JSON, LOG_INFO);
	ck_assert_ptr_nonnull(strstr(out, "\"level\":\"info\""));
	ck_assert_ptr_nonnull(strstr(out, "\"module\":\"http\""));
	ck_assert_ptr_nonnull(strstr(out, "\"msg\":\"request \\\"done\\\"\""));
	ck_assert_ptr_nonnull(strstr(out, "\"status\":200"));
	ck_assert_ptr_nonnull(strstr(out, "\"ttft_ms\":1.5"));
	ck_assert_ptr_null(strstr(out, "debug 7")); /* below level */
	ck_assert_int_eq((int)(strchr(out, '\n') - out + 1), (int)strlen(out));
	free(out);
}
END_TEST

START_TEST(test_user_text_redacted)
{
	for (int f = 0; f < 2; f++) {
		char *out = capture(f ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT, LOG_DEBUG);
		ck_assert_ptr_null(strstr(out, "secret"));
		ck_assert_ptr_null(strstr(out, "the completion"));
		ck_assert_ptr_nonnull(strstr(out, "[redacted]"));
		ck_assert_ptr_nonnull(strstr(out, "debug 7"));
		free(out);
	}
}
END_TEST

START_TEST(test_parse_names)
{
	enum log_level lv;
	enum log_format fm;
	ck_assert_int_eq(log_level_parse("warn", &lv), 0);
	ck_assert_int_eq(lv, LOG_WARN);
	ck_assert_int_ne(log_level_parse("verbose", &lv), 0);
	ck_assert_int_eq(log_format_parse("json", &fm), 0);
	ck_assert_int_eq(fm, LOG_FORMAT_JSON);
	ck_assert_int_ne(log_format_parse("xml", &fm), 0);
}
END_TEST

START_TEST(test_err_prefix)
{
	char err[32];
	ck_assert_int_eq(err_set(err, sizeof(err), -5, "bad %s", "thing"), -5);
	err_prefix(err, sizeof(err), "file.yaml");
	ck_assert_str_eq(err, "file.yaml: bad thing");
	err_set(err, sizeof(err), -1, "%s", "0123456789012345678901234567890123456789");
	ck_assert_int_eq((int)strlen(err), 31);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_json_line);
	tcase_add_test(tc, test_user_text_redacted);
	tcase_add_test(tc, test_parse_names);
	tcase_add_test(tc, test_err_prefix);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
