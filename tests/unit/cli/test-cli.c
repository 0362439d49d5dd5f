/* The `sinkd generate` and `sinkd tokenize` commands, run as a user runs
 * them: greedy generation on stories260K prints the reference continuation
 * and ends stderr with the stats JSON line; tokenize reproduces the ggml
 * test vectors of a vocabulary-only GGUF file; bad arguments exit 2. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static char tmpdir[] = "/tmp/sinkd-test-cli-XXXXXX";

/* Runs `$SINKD_BIN args` with stdin from in_path (or /dev/null); stdout and
 * stderr land in files of tmpdir.  Returns the exit status. */
static int run_sinkd(const char *args, const char *in_path)
{
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "\"%s\" %s <%s >%s/out 2>%s/err", getenv("SINKD_BIN"), args,
	         in_path ? in_path : "/dev/null", tmpdir, tmpdir);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *output(const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	return tu_slurp(path, NULL);
}

static const char *shared(void)
{
	const char *s = getenv("SINKD_SHARED");
	ck_assert_ptr_nonnull(s);
	ck_assert_ptr_nonnull(getenv("SINKD_BIN"));
	return s;
}

START_TEST(test_generate_greedy)
{
	char args[2048];
	cJSON *ref = tu_load_reference();
	const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), 0);
	snprintf(args, sizeof(args),
	         "generate --model %s/models/stories260K.gguf --prompt '%s' --temperature 0 "
	         "--max-tokens %d --stats-json --threads 2",
	         shared(), cJSON_GetObjectItem(p, "text")->valuestring,
	         cJSON_GetArraySize(cJSON_GetObjectItem(p, "greedy_continuation_ids")));
	ck_assert_int_eq(run_sinkd(args, NULL), 0);
	char *out = output("out"), *err = output("err");
	char want[2048];
	snprintf(want, sizeof(want), "%s\n",
	         cJSON_GetObjectItem(p, "greedy_continuation_text")->valuestring);
	ck_assert_str_eq(out, want);
	/* The last stderr line is exactly the stats object. */
	size_t n = strlen(err);
	ck_assert(n > 2 && err[n - 1] == '\n');
	err[n - 1] = 0;
	char *last = strrchr(err, '\n');
	last = last ? last + 1 : err;
	cJSON *stats = cJSON_Parse(last);
	ck_assert_msg(stats != NULL, "last stderr line is not JSON: %s", last);
	ck_assert_int_eq(cJSON_GetArraySize(stats), 6);
	/* the session's KV bytes: what it holds, within its bound */
	double kv = cJSON_GetObjectItem(stats, "kv_bytes_resident")->valuedouble;
	ck_assert(kv > 0 && kv <= cJSON_GetObjectItem(stats, "kv_bytes_bound")->valuedouble);
	ck_assert_int_eq(cJSON_GetObjectItem(stats, "prompt_tokens")->valueint,
	                 cJSON_GetArraySize(cJSON_GetObjectItem(p, "prompt_ids")));
	ck_assert_int_eq(cJSON_GetObjectItem(stats, "generated_tokens")->valueint, 32);
	ck_assert(cJSON_GetObjectItem(stats, "prompt_tok_s")->valuedouble > 0);
	ck_assert(cJSON_GetObjectItem(stats, "decode_tok_s")->valuedouble > 0);
	ck_assert_ptr_nonnull(strstr(last, "{\"prompt_tokens\":"));
	cJSON_Delete(stats);
	cJSON_Delete(ref);
	free(out);
	free(err);
}
END_TEST

/* Sampling is seeded; --set reaches the cache configuration. */
START_TEST(test_generate_seed_and_set)
{
	char args[2048];
	snprintf(args, sizeof(args),
	         "generate --model %s/models/stories260K.gguf --prompt 'Lily and Tom' --seed 7 "
	         "--temperature 0.9 --top-k 40 --top-p 0.95 --max-tokens 300 "
	         "--set inference.cache.window_size=32",
	         shared());
	ck_assert_int_eq(run_sinkd(args, NULL), 0);
	char *a = output("out");
	ck_assert_int_eq(run_sinkd(args, NULL), 0);
	char *b = output("out");
	ck_assert_str_eq(a, b);
	ck_assert_int_gt((int)strlen(a), 100);
	free(a);
	free(b);
	snprintf(args, sizeof(args),
	         "generate --model %s/models/stories260K.gguf --prompt x --set "
	         "inference.cache.window_size=0",
	         shared());
	ck_assert_int_eq(run_sinkd(args, NULL), 2);
	char *err = output("err");
	ck_assert_ptr_nonnull(strstr(err, "inference.cache.window_size"));
	free(err);
	ck_assert_int_eq(run_sinkd("generate --prompt x --bogus 1", NULL), 2);
	ck_assert_int_eq(run_sinkd("generate --model /nonexistent.gguf --prompt x", NULL), 1);
}
END_TEST

/* Splits s at "\n__ggml_vocab_test__\n"; returns the next entry (NUL-terminated in place). */
static char *next_entry(char **s)
{
	static const char sep[] = "\n__ggml_vocab_test__\n";
	if (!*s)
		return NULL;
	char *e = *s, *hit = strstr(e, sep);
	if (hit) {
		*hit = 0;
		*s = hit + sizeof(sep) - 1;
	} else {
		size_t n = strlen(e);
		if (n && e[n - 1] == '\n')
			e[n - 1] = 0;
		*s = NULL;
	}
	return e;
}

static void squeeze(char *s)
{
	char *o = s;
	for (char *p = s; *p; p++)
		if (*p != ' ' && *p != '\n')
			*o++ = *p;
		else if (o > s && o[-1] != ' ')
			*o++ = ' ';
	if (o > s && o[-1] == ' ')
		o--;
	*o = 0;
}

START_TEST(test_tokenize_vectors)
{
	char path[1024], args[2048], in_path[600];
	snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-llama-spm.gguf.inp", shared());
	char *inp = tu_slurp(path, NULL);
	snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-llama-spm.gguf.out", shared());
	char *outs = tu_slurp(path, NULL);
	snprintf(in_path, sizeof(in_path), "%s/in", tmpdir);
	snprintf(args, sizeof(args), "tokenize --model %s/vocab/ggml-vocab-llama-spm.gguf",
	         shared());
	char *rest = inp, *entry, *lines = outs;
	int n = 0;
	while ((entry = next_entry(&rest)) && n < 12) {
		FILE *f = fopen(in_path, "wb");
		fwrite(entry, 1, strlen(entry), f);
		fclose(f);
		ck_assert_int_eq(run_sinkd(args, in_path), 0);
		char *got = output("out");
		squeeze(got);
		char *want = lines, *eol = strchr(lines, '\n');
		ck_assert_ptr_nonnull(eol);
		*eol = 0;
		lines = eol + 1;
		char w[4096];
		snprintf(w, sizeof(w), "%s", want);
		squeeze(w);
		ck_assert_msg(!strcmp(got, w), "entry %d: got '%s', want '%s'", n, got, w);
		free(got);
		n++;
	}
	ck_assert_int_eq(n, 12);
	free(inp);
	free(outs);
	ck_assert_int_eq(run_sinkd("tokenize", NULL), 2);
}
END_TEST

int main(void)
{
	if (!mkdtemp(tmpdir))
		return EXIT_FAILURE;
	Suite *s = suite_create("cli");
	TCase *tc = tcase_create("generate-tokenize");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_generate_greedy);
	tcase_add_test(tc, test_generate_seed_and_set);
	tcase_add_test(tc, test_tokenize_vectors);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	if (system(cmd) != 0)
		failed++;
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
