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

/* log_alloc: one debug line naming what and how many bytes, from
 * LOG_ALLOC_MIN_BYTES on; nothing below it or above debug level. */
START_TEST(test_alloc_lines)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	struct sinkd_log *log = log_new(mem, LOG_DEBUG, LOG_FORMAT_JSON);
	log_alloc(log, "cpu", "small", LOG_ALLOC_MIN_BYTES - 1);
	log_alloc(log, "cpu", "weight block", 3 * LOG_ALLOC_MIN_BYTES);
	log_set_level(log, LOG_INFO);
	log_alloc(log, "cpu", "hidden at info", 8 * LOG_ALLOC_MIN_BYTES);
	log_alloc(NULL, "cpu", "no logger", 8 * LOG_ALLOC_MIN_BYTES);
	log_free(log);
	fclose(mem);
	ck_assert_ptr_null(strstr(buf, "small"));
	ck_assert_ptr_null(strstr(buf, "hidden at info"));
	ck_assert_msg(strstr(buf, "\"level\":\"debug\"") && strstr(buf, "\"for\":\"weight block\"") &&
	                  strstr(buf, "\"bytes\":3145728") && strstr(buf, "\"msg\":\"allocation\""),
	              "%s", buf);
	ck_assert_int_eq((int)(strchr(buf, '\n') - buf + 1), (int)strlen(buf)); /* one line */
	free(buf);
}
END_TEST

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

/* One event with the given message and fields, as the logger writes it. */
static char *capture_event(enum log_format format, const char *module, const char *msg,
                           const struct log_field *fields)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	struct sinkd_log *log = log_new(mem, LOG_DEBUG, format);
	log_event(log, LOG_WARN, module, msg, fields);
	log_free(log);
	fclose(mem);
	return buf;
}

/* True when s is one line: no byte below 0x20 but the final newline, no DEL,
 * no C1 or U+2028/U+2029, and valid UTF-8 (what the escaping promises). */
static int is_one_clean_line(const char *s)
{
	size_t len = strlen(s);
	if (len == 0 || s[len - 1] != '\n')
		return 0;
	for (size_t i = 0; i + 1 < len; i++) {
		const unsigned char *p = (const unsigned char *)s + i;
		if (p[0] < 0x20 || p[0] == 0x7F)
			return 0;
		if (p[0] < 0x80)
			continue;
		size_t n = (p[0] & 0xE0) == 0xC0   ? 2
		           : (p[0] & 0xF0) == 0xE0 ? 3
		           : (p[0] & 0xF8) == 0xF0 ? 4
		                                   : 0;
		if (n == 0 || p[0] == 0xC0 || p[0] == 0xC1 || i + n >= len)
			return 0;
		for (size_t k = 1; k < n; k++)
			if ((p[k] & 0xC0) != 0x80)
				return 0;
		if (p[0] == 0xC2 && p[1] <= 0x9F)
			return 0;
		if (p[0] == 0xE2 && p[1] == 0x80 && (p[2] == 0xA8 || p[2] == 0xA9))
			return 0;
		i += n - 1;
	}
	return 1;
}

static const char hostile[] = "x\ny\r\t\x1b[31m\x7f\xc2\x85\xe2\x80\xa8\xff\xc3\"\\ ok \xc3\xa9";

/* Every field value, the message and the module: a newline or other control
 * character in any of them cannot start a forged line in either format, and
 * a JSON line stays valid JSON that reads back as the text (invalid bytes as
 * U+FFFD). */
START_TEST(test_control_characters_escaped)
{
	struct log_field fields[] = {LOG_STR("path", hostile), LOG_STR("key\nforged", "v"),
	                             LOG_DBL("nan", 0.0 / 0.0), LOG_END};
	char *json = capture_event(LOG_FORMAT_JSON, "mod\n", hostile, fields);
	ck_assert_msg(is_one_clean_line(json), "%s", json);
	cJSON *o = cJSON_Parse(json);
	ck_assert_msg(o != NULL, "not JSON: %s", json);
	const char *want =
	    "x\ny\r\t\x1b[31m\x7f\xc2\x85\xe2\x80\xa8\xef\xbf\xbd\xef\xbf\xbd\"\\ ok "
	    "\xc3\xa9";
	ck_assert_str_eq(cJSON_GetObjectItem(o, "path")->valuestring, want);
	ck_assert_str_eq(cJSON_GetObjectItem(o, "msg")->valuestring, want);
	ck_assert_str_eq(cJSON_GetObjectItem(o, "module")->valuestring, "mod\n");
	ck_assert_str_eq(cJSON_GetObjectItem(o, "key\nforged")->valuestring, "v");
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "nan")));
	ck_assert_ptr_nonnull(strstr(json, "x\\ny\\r\\t\\u001b[31m\\u007f\\u0085\\u2028\\ufffd"));
	cJSON_Delete(o);
	free(json);

	char *text = capture_event(LOG_FORMAT_TEXT, "mod\n", hostile, fields);
	ck_assert_msg(is_one_clean_line(text), "%s", text);
	ck_assert_ptr_nonnull(strstr(text, " warn  [mod\\n] x\\ny\\r\\t\\u001b[31m"));
	ck_assert_ptr_nonnull(strstr(text,
	                             " path=\"x\\ny\\r\\t\\u001b[31m\\u007f\\u0085\\u2028\\ufffd"
	                             "\\ufffd\\\"\\\\ ok \xc3\xa9\""));
	ck_assert_ptr_nonnull(strstr(text, " key\\nforged=\"v\""));
	free(text);
}
END_TEST

/* A line longer than the logger's buffer is cut between characters and
 * fields, marked truncated, and still one valid JSON object. */
START_TEST(test_long_line_truncated_cleanly)
{
	char *big = malloc(6001);
	ck_assert_ptr_nonnull(big);
	for (int i = 0; i < 6000; i++)
		big[i] = "\xc3\xa9\n"[i % 3]; /* é and a newline, over and over */
	big[6000] = '\0';
	for (int cut = 0; cut < 2000; cut += 7) {
		/* The cut falls at every offset into the long value. */
		struct log_field fields[] = {LOG_STR("pad", big + 6000 - (size_t)cut % 600),
		                             LOG_STR("big", big), LOG_INT("after", 1), LOG_END};
		for (int f = 0; f < 2; f++) {
			char *out = capture_event(f ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT, "m", "msg",
			                          fields);
			ck_assert_msg(is_one_clean_line(out), "%s", out);
			ck_assert_int_le((int)strlen(out), 2048);
			if (f) {
				cJSON *o = cJSON_Parse(out);
				ck_assert_msg(o != NULL, "cut %d: not JSON: %s", cut, out);
				ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(o, "truncated")));
				ck_assert_ptr_null(cJSON_GetObjectItem(o, "after"));
				cJSON_Delete(o);
			} else {
				ck_assert_ptr_nonnull(strstr(out, "\" truncated=true\n"));
			}
			free(out);
		}
	}
	free(big);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_json_line);
	tcase_add_test(tc, test_alloc_lines);
	tcase_add_test(tc, test_user_text_redacted);
	tcase_add_test(tc, test_parse_names);
	tcase_add_test(tc, test_err_prefix);
	tcase_add_test(tc, test_control_characters_escaped);
	tcase_add_test(tc, test_long_line_truncated_cleanly);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
