/* The reload transaction over the config table: changed keys reach the
 * subsystems the table names, a failing prepare leaves every subsystem as it
 * was (prepared states discarded, nothing committed), restart-only keys keep
 * their running values and are reported, secrets are masked, and the
 * digest of the file parsed is kept. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config/config_reload.h"
#include "util/errbuf.h"
#include "testutil.h"

/* A fake subsystem that records what the transaction did to it. */
struct fake {
	int prepared, committed, discarded;
	int fail;            /* prepare returns -EINVAL */
	int64_t window_seen; /* next->inference.cache.window_size at commit */
};

static int fake_prepare(void *ctx, const struct sinkd_config *next, void **out, char *err,
                        size_t err_len)
{
	struct fake *f = ctx;
	f->prepared++;
	*out = f;
	return f->fail ? err_set(err, err_len, -EINVAL, "refused by the fake") : 0;
}

static void fake_commit(void *ctx, const struct sinkd_config *next, void *p)
{
	struct fake *f = ctx;
	ck_assert_ptr_eq(p, f);
	f->committed++;
	f->window_seen = next->inference.cache.window_size;
}

static void fake_discard(void *ctx, void *p)
{
	((struct fake *)ctx)->discarded++;
}

static struct fake fakes[CONFIG_N_APPLIERS];
static struct config_applier_ops ops[CONFIG_N_APPLIERS];
static const struct config_applier_ops *op_list[CONFIG_N_APPLIERS];

static void fakes_reset(void)
{
	memset(fakes, 0, sizeof(fakes));
	for (int i = 0; i < CONFIG_N_APPLIERS; i++) {
		ops[i] = (struct config_applier_ops){"fake",       fake_prepare, fake_commit,
		                                     fake_discard, &fakes[i],    false};
		op_list[i] = &ops[i];
	}
}

static void load(struct sinkd_config *c, const char *const *sets, size_t n)
{
	struct config_errors errs = {0};
	int rc = config_load(c, NULL, sets, n, &errs);
	if (rc)
		config_errors_print(&errs, stderr);
	ck_assert_int_eq(rc, 0);
	config_errors_deinit(&errs);
}

static const struct config_change *find(const struct config_change *list, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(list[i].key, key))
			return &list[i];
	return NULL;
}

START_TEST(test_commit_all_that_changed)
{
	const char *a_sets[] = {"inference.cache.window_size=1000", "server.threads=2"};
	const char *b_sets[] = {"inference.cache.window_size=500", "server.threads=4",
	                        "logging.level=debug",
	                        "server.api_keys=sha256:"
	                        "abababababababababababababababababababababababababababababababab"};
	struct sinkd_config cur, next;
	struct config_reload_result res;
	char err[SINKD_ERR_LEN];
	load(&cur, a_sets, 2);
	load(&next, b_sets, 4);
	fakes_reset();
	ops[CONFIG_APPLY_TLS].every_reload = true;
	ck_assert_int_eq(config_reload_apply(&cur, &next, op_list, &res, err, sizeof(err)), 0);
	/* Each subsystem a changed key names, plus TLS (every reload). */
	ck_assert_int_eq(fakes[CONFIG_APPLY_SCHEDULER].committed, 1);
	ck_assert_int_eq(fakes[CONFIG_APPLY_SCHEDULER].window_seen, 500);
	ck_assert_int_eq(fakes[CONFIG_APPLY_LOGGING].committed, 1);
	ck_assert_int_eq(fakes[CONFIG_APPLY_SERVER].committed, 1);
	ck_assert_int_eq(fakes[CONFIG_APPLY_TLS].committed, 1);
	ck_assert_int_eq(fakes[CONFIG_APPLY_DAEMON].prepared, 0);
	/* The restart-only key keeps the running value and is reported. */
	ck_assert_int_eq(next.server.threads, 2);
	ck_assert_uint_eq(res.n_pending, 1);
	ck_assert_str_eq(res.pending[0].key, "server.threads");
	ck_assert_str_eq(res.pending[0].old_value, "2");
	ck_assert_str_eq(res.pending[0].new_value, "4");
	const struct config_change *w =
	    find(res.changed, res.n_changed, "inference.cache.window_size");
	ck_assert_ptr_nonnull(w);
	ck_assert_str_eq(w->old_value, "1000");
	ck_assert_str_eq(w->new_value, "500");
	const struct config_change *k = find(res.changed, res.n_changed, "server.api_keys");
	ck_assert_ptr_nonnull(k);
	ck_assert_str_eq(k->new_value, "[\"***\"]"); /* secrets never in a log */
	ck_assert_ptr_null(find(res.changed, res.n_changed, "server.threads"));
	config_reload_result_deinit(&res);
	config_deinit(&cur);
	config_deinit(&next);
}
END_TEST

START_TEST(test_one_refusal_applies_nothing)
{
	const char *b_sets[] = {"inference.cache.window_size=500", "logging.level=debug",
	                        "server.sse_keepalive_s=3"};
	struct sinkd_config cur, next;
	struct config_reload_result res;
	char err[SINKD_ERR_LEN];
	load(&cur, NULL, 0);
	load(&next, b_sets, 3);
	fakes_reset();
	fakes[CONFIG_APPLY_SCHEDULER].fail = 1;
	ops[CONFIG_APPLY_SCHEDULER].name = "scheduler";
	ck_assert_int_eq(config_reload_apply(&cur, &next, op_list, &res, err, sizeof(err)),
	                 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "scheduler: refused by the fake"));
	int prepared = 0;
	for (int i = 0; i < CONFIG_N_APPLIERS; i++) {
		ck_assert_int_eq(fakes[i].committed, 0);
		if (i != CONFIG_APPLY_SCHEDULER)
			ck_assert_int_eq(fakes[i].discarded, fakes[i].prepared);
		prepared += fakes[i].prepared;
	}
	ck_assert_int_ge(prepared, 2); /* the server was prepared, then dropped */
	config_reload_result_deinit(&res);
	config_deinit(&cur);
	config_deinit(&next);
}
END_TEST

START_TEST(test_no_change_prepares_nothing)
{
	struct sinkd_config cur, next;
	struct config_reload_result res;
	char err[SINKD_ERR_LEN];
	load(&cur, NULL, 0);
	load(&next, NULL, 0);
	fakes_reset();
	op_list[CONFIG_APPLY_LOGGING] = NULL; /* a subsystem not running */
	ck_assert_int_eq(config_reload_apply(&cur, &next, op_list, &res, err, sizeof(err)), 0);
	for (int i = 0; i < CONFIG_N_APPLIERS; i++)
		ck_assert_int_eq(fakes[i].prepared, 0);
	ck_assert_uint_eq(res.n_changed, 0);
	ck_assert_uint_eq(res.n_pending, 0);
	config_reload_result_deinit(&res);
	config_deinit(&cur);
	config_deinit(&next);
}
END_TEST

/* The config in force carries the SHA-256 of exactly the bytes parsed. */
START_TEST(test_source_digest)
{
	char dir[] = "/tmp/sinkd-reload-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char path[256];
	snprintf(path, sizeof(path), "%s/c.yaml", dir);
	FILE *f = fopen(path, "w");
	fputs("inference:\n  cache:\n    window_size: 64\n", f);
	fclose(f);
	struct sinkd_config c;
	struct config_errors errs = {0};
	ck_assert_int_eq(config_load(&c, path, NULL, 0, &errs), 0);
	/* sha256sum of those bytes */
	ck_assert_str_eq(c.source_sha256,
	                 "508da974ba0bbc8b79a038a8b930508b6842073ab5e1f311a70b00be5516c02a");
	config_deinit(&c);
	unlink(path);
	rmdir(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("config-reload");
	TCase *tc = tcase_create("reload");
	tcase_add_test(tc, test_commit_all_that_changed);
	tcase_add_test(tc, test_one_refusal_applies_nothing);
	tcase_add_test(tc, test_no_change_prepares_nothing);
	tcase_add_test(tc, test_source_digest);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
