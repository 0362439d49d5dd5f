/* The grammar cache and the compile budget, as a server sees them: a
 * schema too large to compile fails within the budget with a message that
 * says so and the JSON path at fault; its failure is cached like a
 * success (the same message and path again, no compile: it costs the
 * client no compile from its rate) and dropped like one; compiles that miss
 * the cache are limited per client, with a retry time; many threads asking
 * for the same failing schema at once get the same answer. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "grammar/grammar.h"
#include "util/errbuf.h"
#include "testutil.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The three schemas of issue 38 that used to take a server thread for a
 * quarter to half a second each, and the path each failure names. */
static cJSON *blowup_schema(int which)
{
	if (which == 0)
		return cJSON_Parse("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
		                   "\"minItems\":1000000}");
	if (which == 1)
		return cJSON_Parse("{\"type\":\"string\",\"pattern\":\"^[ab]*a[ab]{17}$\"}");
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", "object");
	cJSON *props = cJSON_AddObjectToObject(o, "properties");
	for (int i = 0; i < 10000; i++) {
		char name[32];
		snprintf(name, sizeof(name), "p%d", i);
		cJSON_AddStringToObject(cJSON_AddObjectToObject(props, name), "type", "string");
	}
	return o;
}

static const char *const blowup_path[] = {"$.minItems", "$.pattern", "$.properties"};
static const char *const blowup_name[] = {"minItems 1000000", "pattern ^[ab]*a[ab]{17}$",
                                          "10000 properties"};

/* ---- the budget ---- */

START_TEST(test_budget_blowups)
{
	char err[SINKD_ERR_LEN] = "", path[128] = "";
	struct grammar *g = (struct grammar *)1;
	cJSON *s = blowup_schema(_i);
	ck_assert_ptr_nonnull(s);
	double t0 = now_s();
	int rc = grammar_from_json_schema(s, &g, path, sizeof(path), err, sizeof(err));
	double ms = (now_s() - t0) * 1e3;
	cJSON_Delete(s);
	printf("# compile of %s: %.1f ms: %s at %s\n", blowup_name[_i], ms, err, path);
	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_ptr_null(g);
	ck_assert_msg(strstr(err, "too large or complex to compile within the compile budget"),
	              "message: %s", err);
	ck_assert_str_eq(path, blowup_path[_i]);
	/* The budget is 20 to 30 ms here (before it these took 70 to 200 ms);
	 * AddressSanitizer runs a few times slower, ThreadSanitizer some 30
	 * times (SINKD_TEST_TIME_SCALE). */
	const char *scale = getenv("SINKD_TEST_TIME_SCALE");
	double limit_ms = 500 * (scale && atof(scale) > 1 ? atof(scale) : 1);
	ck_assert_msg(ms < limit_ms, "%.0f ms (limit %.0f ms)", ms, limit_ms);
}
END_TEST

/* Big but ordinary schemas stay well inside the budget. */
START_TEST(test_budget_ordinary)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *props = cJSON_AddObjectToObject(o, "properties");
	cJSON *req = cJSON_AddArrayToObject(o, "required");
	for (int i = 0; i < 200; i++) {
		char name[32];
		snprintf(name, sizeof(name), "field_%d", i);
		cJSON *p = cJSON_AddObjectToObject(props, name);
		cJSON_AddStringToObject(p, "type", i % 3 ? "string" : "integer");
		if (i % 2)
			cJSON_AddItemToArray(req, cJSON_CreateString(name));
	}
	const char *const texts[] = {
	    "{\"type\":\"string\",\"maxLength\":1000}",
	    "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1000}",
	    "{\"type\":\"string\",\"pattern\":\"^[ab]*a[ab]{10}$\"}",
	    "{\"type\":\"string\",\"format\":\"date-time\"}",
	};
	for (size_t i = 0; i <= sizeof(texts) / sizeof(texts[0]); i++) {
		char err[SINKD_ERR_LEN] = "", path[128] = "";
		struct grammar *g = NULL;
		cJSON *s = i < sizeof(texts) / sizeof(texts[0]) ? cJSON_Parse(texts[i]) : o;
		int rc = grammar_from_json_schema(s, &g, path, sizeof(path), err, sizeof(err));
		ck_assert_msg(rc == 0, "schema %zu: %s at %s", i, err, path);
		grammar_unref(g);
		cJSON_Delete(s);
	}
}
END_TEST

/* ---- failures in the cache ---- */

START_TEST(test_failure_cached)
{
	struct grammar_cache *c = NULL;
	ck_assert_int_eq(grammar_cache_new(4, &c), 0);
	/* one budget for this client, then nothing for a long time: the
	 * blow-up spends it all, so a second answer for the same schema can
	 * only come from the cache */
	grammar_cache_set_rate(c, 1, 1e-6);
	const char who[] = "client-a";
	cJSON *s = blowup_schema(1);
	char err1[SINKD_ERR_LEN] = "", path1[128] = "", err2[SINKD_ERR_LEN] = "", path2[128] = "";
	struct grammar *g = NULL;
	int retry = -1;
	double t0 = now_s();
	ck_assert_int_eq(grammar_cache_get(c, who, sizeof(who), NULL, s, NULL, &g, &retry, path1,
	                                   sizeof(path1), err1, sizeof(err1)),
	                 -EINVAL);
	double t1 = now_s();
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(grammar_cache_get(c, who, sizeof(who), NULL, s, NULL, &g, &retry,
		                                   path2, sizeof(path2), err2, sizeof(err2)),
		                 -EINVAL);
		ck_assert_ptr_null(g);
		ck_assert_str_eq(err2, err1);
		ck_assert_str_eq(path2, path1);
		ck_assert_int_eq(retry, 0);
	}
	double t2 = now_s();
	printf("# pattern blow-up: compiled and cached in %.1f ms, then %.3f ms a hit\n",
	       (t1 - t0) * 1e3, (t2 - t1) * 1e3 / 3);
	ck_assert_str_eq(path1, "$.pattern");
	ck_assert_ptr_nonnull(strstr(err1, "compile budget"));
	/* a new schema from this client is over its rate now */
	cJSON *other = cJSON_Parse("{\"type\":\"integer\"}");
	ck_assert_int_eq(grammar_cache_get(c, who, sizeof(who), NULL, other, NULL, &g, &retry,
	                                   path2, sizeof(path2), err2, sizeof(err2)),
	                 -EAGAIN);
	/* the same schema wrapped differently is another entry */
	ck_assert_int_eq(grammar_cache_get(c, NULL, 0, "<x>", s, NULL, &g, NULL, path2,
	                                   sizeof(path2), err2, sizeof(err2)),
	                 -EINVAL);
	cJSON_Delete(other);
	cJSON_Delete(s);
	grammar_cache_free(c);
}
END_TEST

/* Failures and successes share the capacity and the LRU order. */
START_TEST(test_failure_evicted)
{
	struct grammar_cache *c = NULL;
	ck_assert_int_eq(grammar_cache_new(2, &c), 0);
	grammar_cache_set_rate(c, 0.025, 1e-6); /* three small compiles for client b */
	const char who[] = "client-b";
	cJSON *bad = cJSON_Parse("{\"type\":\"integer\",\"multipleOf\":3}");
	cJSON *i = cJSON_Parse("{\"type\":\"integer\"}"), *n = cJSON_Parse("{\"type\":\"number\"}");
	char err[SINKD_ERR_LEN], path[128];
	struct grammar *g1 = NULL, *g2 = NULL, *g3 = NULL;
	int retry = 0;
	ck_assert_int_eq(grammar_cache_get(c, who, sizeof(who), NULL, bad, NULL, &g1, &retry, path,
	                                   sizeof(path), err, sizeof(err)),
	                 -EINVAL);
	ck_assert_str_eq(path, "$.multipleOf");
	ck_assert_int_eq(grammar_cache_get(c, who, sizeof(who), NULL, i, NULL, &g1, &retry, path,
	                                   sizeof(path), err, sizeof(err)),
	                 0);
	ck_assert_int_eq(grammar_cache_get(c, who, sizeof(who), NULL, n, NULL, &g2, &retry, path,
	                                   sizeof(path), err, sizeof(err)),
	                 0);
	/* capacity 2: the failure went first; asking again needs a compile,
	 * and client b has none left */
	ck_assert_int_eq(grammar_cache_get(c, who, sizeof(who), NULL, bad, NULL, &g3, &retry, path,
	                                   sizeof(path), err, sizeof(err)),
	                 -EAGAIN);
	ck_assert_int_ge(retry, 1);
	ck_assert_ptr_nonnull(strstr(err, "retry in"));
	ck_assert_int_eq(grammar_cache_get(c, who, sizeof(who), NULL, i, NULL, &g3, &retry, path,
	                                   sizeof(path), err, sizeof(err)),
	                 0);
	ck_assert_ptr_eq(g3, g1); /* hits cost nothing */
	grammar_unref(g1);
	grammar_unref(g2);
	grammar_unref(g3);
	cJSON_Delete(bad);
	cJSON_Delete(i);
	cJSON_Delete(n);
	grammar_cache_free(c);
}
END_TEST

/* ---- the rate ---- */

/* A schema not asked for before: small (maxLength k), or (blowup) one too
 * large to compile (minItems 900000 + k). */
static int get_new(struct grammar_cache *c, const char *who, int k, bool blowup, int *retry,
                   char *err, size_t err_len)
{
	char text[128], path[128];
	if (blowup)
		snprintf(text, sizeof(text), "{\"type\":\"array\",\"minItems\":%d}", 900000 + k);
	else
		snprintf(text, sizeof(text), "{\"type\":\"string\",\"maxLength\":%d}", k);
	cJSON *s = cJSON_Parse(text);
	struct grammar *g = NULL;
	int rc = grammar_cache_get(c, who, who ? strlen(who) : 0, NULL, s, NULL, &g, retry, path,
	                           sizeof(path), err, err_len);
	grammar_unref(g);
	cJSON_Delete(s);
	return rc;
}

/* A client's compiles cost what they use: many small ones pass, blow-ups
 * spend the whole burst at once. */
START_TEST(test_rate)
{
	struct grammar_cache *c = NULL;
	char err[SINKD_ERR_LEN];
	int retry = 0, k = 1;
	ck_assert_int_eq(grammar_cache_new(64, &c), 0);
	for (int i = 0; i < 50; i++)
		ck_assert_int_eq(get_new(c, "busy", k++, false, &retry, err, sizeof(err)), 0);
	/* a burst of GRAMMAR_CACHE_BURST (1) budget: one blow-up (a slow
	 * refill, so the time they take gives nothing back) */
	grammar_cache_set_rate(c, GRAMMAR_CACHE_BURST, 1e-9);
	for (int i = 0; i < GRAMMAR_CACHE_BURST; i++)
		ck_assert_int_eq(get_new(c, "flooder", k++, true, &retry, err, sizeof(err)),
		                 -EINVAL);
	ck_assert_int_eq(get_new(c, "flooder", k++, false, &retry, err, sizeof(err)), -EAGAIN);
	ck_assert_int_ge(retry, 1);
	ck_assert_msg(strstr(err, "too many new JSON schemas") && strstr(err, "retry in"), "%s",
	              err);
	/* others are not held up by it; nobody (NULL) is not limited */
	ck_assert_int_eq(get_new(c, "someone-else", k++, true, &retry, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(get_new(c, NULL, k++, true, &retry, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(get_new(c, NULL, k++, false, &retry, err, sizeof(err)), 0);
	/* the bucket refills: half a budget, a budget a second; a blow-up
	 * leaves it about half a budget short (less what refilled while it
	 * compiled), which is back within 0.6 s */
	grammar_cache_set_rate(c, 0.5, 1);
	ck_assert_int_eq(get_new(c, "flooder", k++, true, &retry, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(get_new(c, "flooder", k++, false, &retry, err, sizeof(err)), -EAGAIN);
	ck_assert_int_eq(retry, 1); /* whole seconds, rounded up */
	nanosleep(&(struct timespec){.tv_nsec = 600 * 1000000L}, NULL);
	ck_assert_int_eq(get_new(c, "flooder", k++, false, &retry, err, sizeof(err)), 0);
	grammar_cache_free(c);
}
END_TEST

/* More clients than the table holds: each still gets its burst, and the
 * one that is out of compiles stays out while others come and go. */
START_TEST(test_rate_many_clients)
{
	struct grammar_cache *c = NULL;
	char err[SINKD_ERR_LEN], who[32];
	int retry = 0, k = 1;
	ck_assert_int_eq(grammar_cache_new(8, &c), 0);
	grammar_cache_set_rate(c, 0.005, 1e-6); /* one small compile each */
	ck_assert_int_eq(get_new(c, "flooder", k++, false, &retry, err, sizeof(err)), 0);
	for (int i = 0; i < 200; i++) {
		snprintf(who, sizeof(who), "client-%d", i);
		ck_assert_int_eq(get_new(c, who, k++, false, &retry, err, sizeof(err)), 0);
		ck_assert_int_eq(get_new(c, who, k++, false, &retry, err, sizeof(err)), -EAGAIN);
		if (i % 10 == 0) /* seen recently, so not the one forgotten */
			ck_assert_int_eq(
			    get_new(c, "flooder", k++, false, &retry, err, sizeof(err)), -EAGAIN);
	}
	grammar_cache_free(c);
}
END_TEST

/* ---- threads ---- */

struct hammer {
	struct grammar_cache *c;
	const cJSON *schema;
	int rc[16];
	char err[16][SINKD_ERR_LEN];
};

static void *hammer_run(void *arg)
{
	struct hammer *h = arg;
	static const char who[] = "threads";
	for (int i = 0; i < 16; i++) {
		char path[128];
		struct grammar *g = NULL;
		h->rc[i] =
		    grammar_cache_get(h->c, who, sizeof(who), NULL, h->schema, NULL, &g, NULL, path,
		                      sizeof(path), h->err[i], sizeof(h->err[i]));
		grammar_unref(g);
	}
	return NULL;
}

START_TEST(test_threads)
{
	struct grammar_cache *c = NULL;
	ck_assert_int_eq(grammar_cache_new(4, &c), 0);
	cJSON *s = cJSON_Parse("{\"type\":\"string\",\"pattern\":\"^(a|b)*a(a|b){20}$\"}");
	struct hammer h[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		h[i] = (struct hammer){.c = c, .schema = s};
		ck_assert_int_eq(pthread_create(&th[i], NULL, hammer_run, &h[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 16; j++) {
			ck_assert_int_eq(h[i].rc[j], -EINVAL);
			ck_assert_str_eq(h[i].err[j], h[0].err[0]);
		}
	cJSON_Delete(s);
	grammar_cache_free(c);
}
END_TEST

static Suite *gcache_suite(void)
{
	Suite *s = suite_create("gcache");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_budget_blowups, 0, 3);
	tcase_add_test(tc, test_budget_ordinary);
	tcase_add_test(tc, test_failure_cached);
	tcase_add_test(tc, test_failure_evicted);
	tcase_add_test(tc, test_rate);
	tcase_add_test(tc, test_rate_many_clients);
	tcase_add_test(tc, test_threads);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(gcache_suite());
}
