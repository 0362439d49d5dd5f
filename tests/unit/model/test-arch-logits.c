/* sinkd's logits against llama.cpp's, stored: each file of
 * tests/data/arch-logits/ (written by tests/bench/arch-logits.sh from a
 * llama.cpp built by hand) holds the sinkd-mkmodel arguments of a synthetic
 * model, prompts of token ids, and llama.cpp's last-position logits and
 * greedy tokens for them.  The test remakes each model with this build's
 * sinkd-mkmodel (all seeds fixed, so the same file), runs the sinkd-logits
 * drivers on it (strategy full, F32 K/V) and wants the logits within the
 * file's bound of the largest logit (1e-3 for F32, 0.04 for Q8_0, Q4_K and
 * MXFP4, as the block-type logits test) and, for F32, the same greedy
 * tokens.
 *
 *   test-arch-logits SINKD-MKMODEL SINKD-LOGITS [SINKD-LOGITS-EMU]
 *
 * The CPU driver takes every prompt; the CUDA emulation's (slower) the
 * first, shortest one.  A last case moves one stored logit past the bound
 * and wants the comparison to fail.  SINKD_ARCH_LOGITS_DIR replaces the
 * folder. */
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define MAX_FILES 64
#define MAX_DRIVERS 2
#define MAX_ARGS 64

static const char *mkmodel_path;
static const char *drivers[MAX_DRIVERS];
static int n_drivers;
static char ref_dir[1024];
static char ref_names[MAX_FILES][256];
static int n_refs;

/* Runs argv (argv[0] a path), its stdout into out_path (NULL: /dev/null);
 * the exit status, or -1 when it did not exit. */
static int run(char *const *argv, const char *out_path)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd =
		    open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || dup2(fd, 1) < 0)
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Makes the reference's model into path with its sinkd-mkmodel arguments. */
static void make_model(const cJSON *ref, const char *name, const char *path)
{
	const cJSON *args = cJSON_GetObjectItem(ref, "mkmodel");
	ck_assert_msg(cJSON_IsArray(args) && cJSON_GetArraySize(args) < MAX_ARGS - 4,
	              "%s: no mkmodel arguments", name);
	char *argv[MAX_ARGS];
	int n = 0;
	argv[n++] = (char *)mkmodel_path;
	argv[n++] = "--out";
	argv[n++] = (char *)path;
	const cJSON *a;
	cJSON_ArrayForEach(a, args)
	{
		ck_assert_msg(cJSON_IsString(a), "%s: mkmodel arguments are strings", name);
		argv[n++] = a->valuestring;
	}
	argv[n] = NULL;
	ck_assert_msg(run(argv, NULL) == 0, "%s: sinkd-mkmodel failed on its arguments", name);
}

/* "1,2,3" of a JSON array of ids (free it). */
static char *ids_csv(const cJSON *ids)
{
	size_t cap = 16 + 12 * (size_t)cJSON_GetArraySize(ids), len = 0;
	char *s = malloc(cap);
	ck_assert_ptr_nonnull(s);
	s[0] = '\0';
	const cJSON *t;
	cJSON_ArrayForEach(t, ids) len +=
	    (size_t)snprintf(s + len, cap - len, "%s%d", len ? "," : "", t->valueint);
	return s;
}

/* The driver's answer for one prompt against the stored one: its largest
 * |diff| over the largest stored logit, where, and whether the greedy
 * tokens are the same. */
struct verdict {
	double rel, scale;
	int worst;
	bool greedy_equal;
	char greedy[256];
};

static void compare_prompt(const char *name, const char *driver, const char *model,
                           const cJSON *prompt, struct verdict *v)
{
	const cJSON *want_logits = cJSON_GetObjectItem(prompt, "logits");
	const cJSON *want_greedy = cJSON_GetObjectItem(prompt, "greedy");
	ck_assert(cJSON_IsArray(want_logits) && cJSON_IsArray(want_greedy));
	char *toks = ids_csv(cJSON_GetObjectItem(prompt, "tokens"));
	char greedy[16], out[64];
	snprintf(greedy, sizeof(greedy), "%d", cJSON_GetArraySize(want_greedy));
	tu_temp_file(out, sizeof(out), "sinkd-test-alogits", NULL, 0);
	char *argv[] = {(char *)driver, "-m",       (char *)model, "--tokens",
	                toks,           "--greedy", greedy,        NULL};
	ck_assert_msg(run(argv, out) == 0, "%s: %s failed", name, driver);
	char *text = tu_slurp(out, NULL);
	cJSON *got = cJSON_Parse(text);
	free(text);
	unlink(out);
	free(toks);
	ck_assert_msg(got != NULL, "%s: %s printed no JSON", name, driver);
	const cJSON *logits = cJSON_GetObjectItem(got, "logits");
	int n = cJSON_GetArraySize(want_logits);
	ck_assert_msg(cJSON_GetArraySize(logits) == n, "%s: %d logits, want %d", name,
	              cJSON_GetArraySize(logits), n);
	double diff = 0;
	*v = (struct verdict){.worst = 0};
	for (int i = 0; i < n; i++)
		v->scale = fmax(v->scale, fabs(cJSON_GetArrayItem(want_logits, i)->valuedouble));
	for (int i = 0; i < n; i++) {
		double d = fabs(cJSON_GetArrayItem(logits, i)->valuedouble -
		                cJSON_GetArrayItem(want_logits, i)->valuedouble);
		if (d > diff)
			diff = d, v->worst = i;
	}
	ck_assert_msg(v->scale > 0.01, "%s: degenerate stored logits", name);
	v->rel = diff / v->scale;
	char *a = cJSON_PrintUnformatted(cJSON_GetObjectItem(got, "greedy"));
	char *b = cJSON_PrintUnformatted(want_greedy);
	v->greedy_equal = strcmp(a, b) == 0;
	snprintf(v->greedy, sizeof(v->greedy), "%s, llama.cpp's %s", a, b);
	free(a);
	free(b);
	cJSON_Delete(got);
}

static void check_prompt(const char *name, const char *driver, const char *model,
                         const cJSON *prompt, double bound, bool want_greedy)
{
	struct verdict v;
	compare_prompt(name, driver, model, prompt, &v);
	printf("%-26s %-32s %3d tokens: max |diff| / max |logit| %.3g (bound %g)\n", name, driver,
	       cJSON_GetArraySize(cJSON_GetObjectItem(prompt, "tokens")), v.rel, bound);
	ck_assert_msg(v.rel <= bound,
	              "%s (%s): logit %d differs from llama.cpp's by %g of the largest logit %g, "
	              "over the bound %g",
	              name, driver, v.worst, v.rel, v.scale, bound);
	ck_assert_msg(!want_greedy || v.greedy_equal, "%s (%s): greedy tokens %s", name, driver,
	              v.greedy);
}

/* The reference file `name`, parsed, and its model made into model. */
static cJSON *load_ref(const char *name, char *model, size_t model_len, double *bound)
{
	char path[1400];
	snprintf(path, sizeof(path), "%s/%s", ref_dir, name);
	char *text = tu_slurp(path, NULL);
	cJSON *ref = cJSON_Parse(text);
	free(text);
	ck_assert_msg(ref != NULL, "%s: not JSON", path);
	*bound = cJSON_GetNumberValue(cJSON_GetObjectItem(ref, "bound"));
	ck_assert_msg(*bound > 0 && *bound <= 0.04, "%s: bound %g", name, *bound);
	ck_assert_msg(cJSON_GetArraySize(cJSON_GetObjectItem(ref, "prompts")) > 0, "%s: no prompts",
	              name);
	tu_temp_file(model, model_len, "sinkd-test-amodel", NULL, 0);
	make_model(ref, name, model);
	return ref;
}

START_TEST(test_arch_logits)
{
	const char *name = ref_names[_i];
	char model[64];
	double bound;
	cJSON *ref = load_ref(name, model, sizeof(model), &bound);
	const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts");
	for (int d = 0; d < n_drivers; d++) {
		int n = d == 0 ? cJSON_GetArraySize(prompts) : 1;
		for (int p = 0; p < n; p++)
			check_prompt(name, drivers[d], model, cJSON_GetArrayItem(prompts, p), bound,
			             bound <= 1e-3);
	}
	unlink(model);
	cJSON_Delete(ref);
}
END_TEST

/* The comparison can fail: the first F32 reference with one stored logit
 * moved by twice the bound, and one greedy token changed, no longer
 * matches. */
START_TEST(test_perturbed_reference_fails)
{
	int f = 0;
	while (f < n_refs && !strstr(ref_names[f], "-f32."))
		f++;
	if (f == n_refs) {
		tu_skip("no F32 reference file");
		return;
	}
	char model[64];
	double bound;
	cJSON *ref = load_ref(ref_names[f], model, sizeof(model), &bound);
	cJSON *prompt = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), 0);
	struct verdict v;
	compare_prompt(ref_names[f], drivers[0], model, prompt, &v);
	ck_assert_msg(v.rel <= bound && v.greedy_equal, "%s: %g, greedy %s", ref_names[f], v.rel,
	              v.greedy);
	cJSON *logit = cJSON_GetArrayItem(cJSON_GetObjectItem(prompt, "logits"), 7);
	cJSON_SetNumberValue(logit, logit->valuedouble + 2 * bound * v.scale);
	cJSON *tok = cJSON_GetArrayItem(cJSON_GetObjectItem(prompt, "greedy"), 1);
	cJSON_SetNumberValue(tok, tok->valueint + 1);
	compare_prompt(ref_names[f], drivers[0], model, prompt, &v);
	ck_assert_msg(v.rel > bound && v.worst == 7, "a logit moved by 2x the bound: %g at %d",
	              v.rel, v.worst);
	ck_assert_msg(!v.greedy_equal, "a changed greedy token: %s", v.greedy);
	unlink(model);
	cJSON_Delete(ref);
}
END_TEST

static int by_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The reference files, sorted (before the suite: one loop test each). */
static int list_refs(void)
{
	const char *env = getenv("SINKD_ARCH_LOGITS_DIR");
	const char *root = getenv("SINKD_SOURCE_ROOT");
	if (env)
		snprintf(ref_dir, sizeof(ref_dir), "%s", env);
	else
		snprintf(ref_dir, sizeof(ref_dir), "%s/tests/data/arch-logits", root ? root : ".");
	DIR *dir = opendir(ref_dir);
	if (!dir)
		return -errno;
	struct dirent *e;
	while ((e = readdir(dir)) && n_refs < MAX_FILES) {
		size_t len = strlen(e->d_name);
		if (len > 5 && len < sizeof(ref_names[0]) && !strcmp(e->d_name + len - 5, ".json"))
			snprintf(ref_names[n_refs++], sizeof(ref_names[0]), "%s", e->d_name);
	}
	closedir(dir);
	qsort(ref_names, (size_t)n_refs, sizeof(ref_names[0]), by_name);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 2 + MAX_DRIVERS) {
		fprintf(stderr, "usage: %s SINKD-MKMODEL SINKD-LOGITS [SINKD-LOGITS-EMU]\n",
		        argv[0]);
		return 77;
	}
	mkmodel_path = argv[1];
	for (int i = 2; i < argc; i++)
		drivers[n_drivers++] = argv[i];
	if (list_refs() || n_refs == 0) {
		fprintf(stderr, "%s: no reference files in %s\n", argv[0], ref_dir);
		return EXIT_FAILURE;
	}
	Suite *s = suite_create("arch-logits");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_arch_logits, 0, n_refs);
	tcase_add_test(tc, test_perturbed_reference_fails);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
