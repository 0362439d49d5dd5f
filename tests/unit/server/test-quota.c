/* The per-key limits' bookkeeping (server/quota.c) with an injected clock:
 * streams and queued counts per client, the per-minute prompt-token budget
 * and its refill, Retry-After values, eviction of idle clients under address
 * churn (bounded table), a reload that keeps the counts, client identities
 * (key digests, IPv4, IPv6 by /64), which API key auth_match reports, the
 * metrics text, and threads racing on one client. */
#include <check.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/auth.h"
#include "server/quota.h"
#include "testutil.h"

static double fake_now; /* seconds, the clock of every quota made here */

static double fake_clock(void *ctx)
{
	return *(double *)ctx;
}

static struct quota *quota_make(size_t max_clients, const struct quota_limits *lim)
{
	struct quota *q = NULL;
	char err[256];
	struct quota_options opt = {
	    .max_clients = max_clients, .clock = fake_clock, .clock_ctx = &fake_now};
	ck_assert_msg(quota_new(&opt, lim, &q, err, sizeof(err)) == 0, "%s", err);
	return q;
}

static struct quota_client addr4(const char *ip)
{
	struct sockaddr_in in = {.sin_family = AF_INET};
	struct quota_client c;
	ck_assert_int_eq(inet_pton(AF_INET, ip, &in.sin_addr), 1);
	quota_client_of(&c, NULL, (const struct sockaddr *)&in);
	return c;
}

static struct quota_client addr6(const char *ip)
{
	struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
	struct quota_client c;
	ck_assert_int_eq(inet_pton(AF_INET6, ip, &in6.sin6_addr), 1);
	quota_client_of(&c, NULL, (const struct sockaddr *)&in6);
	return c;
}

static struct quota_usage usage(struct quota *q, const struct quota_client *c)
{
	struct quota_usage u;
	quota_usage_of(q, c, &u);
	return u;
}

START_TEST(test_streams_and_queued)
{
	struct quota_limits lim = {.max_streams = 2, .max_queued = 1};
	struct quota *q = quota_make(16, &lim);
	struct quota_client a = addr4("10.0.0.1"), b = addr4("10.0.0.2");
	struct quota_verdict v;
	ck_assert(quota_begin(q, &a, 5, &v));
	ck_assert_int_eq(v.status, 0);
	/* One waits already: a second is refused by max_queued. */
	ck_assert(!quota_begin(q, &a, 5, &v));
	ck_assert_int_eq(v.limit, QUOTA_MAX_QUEUED);
	ck_assert_int_eq(v.status, 429);
	ck_assert_int_eq(v.retry_after_s, 1);
	ck_assert_ptr_nonnull(strstr(v.message, "limits.per_key.max_queued"));
	ck_assert_ptr_nonnull(strstr(v.message, "10.0.0.1"));
	ck_assert_str_eq(quota_limit_code(v.limit), "per_key_max_queued");
	quota_started(q, &a);
	ck_assert(quota_begin(q, &a, 5, &v));
	quota_started(q, &a);
	ck_assert_int_eq(usage(q, &a).streams, 2);
	ck_assert_int_eq(usage(q, &a).queued, 0);
	/* Two in flight: the third is refused by max_streams ... */
	ck_assert(!quota_begin(q, &a, 5, &v));
	ck_assert_int_eq(v.limit, QUOTA_MAX_STREAMS);
	ck_assert_str_eq(quota_limit_code(v.limit), "per_key_max_streams");
	ck_assert_ptr_nonnull(strstr(v.message, "limits.per_key.max_streams"));
	/* ... while another client is not. */
	ck_assert(quota_begin(q, &b, 5, &v));
	quota_end(q, &b, false); /* left the queue without starting (timeout, cancel) */
	ck_assert_int_eq(usage(q, &b).streams, 0);
	ck_assert_int_eq(usage(q, &b).queued, 0);
	quota_end(q, &a, true);
	ck_assert(quota_begin(q, &a, 5, &v));
	quota_end(q, &a, false);
	quota_end(q, &a, true);
	ck_assert_int_eq(usage(q, &a).streams, 0);
	/* An end too many changes nothing (never below zero). */
	quota_end(q, &a, true);
	ck_assert_int_eq(usage(q, &a).streams, 0);
	ck_assert_int_eq(usage(q, &a).queued, 0);
	struct quota_stats st;
	quota_get_stats(q, &st);
	ck_assert_uint_eq(st.rejected[QUOTA_MAX_QUEUED], 1);
	ck_assert_uint_eq(st.rejected[QUOTA_MAX_STREAMS], 1);
	/* Nobody known (kind 0) and a NULL quota: always allowed, not counted. */
	struct quota_client nobody = {0};
	for (int i = 0; i < 5; i++)
		ck_assert(quota_begin(q, &nobody, 5, &v));
	ck_assert(quota_begin(NULL, &a, 5, &v));
	quota_end(NULL, &a, true);
	quota_free(q);
}
END_TEST

/* 60 tokens a minute: one a second, refilled continuously. */
START_TEST(test_token_budget_refill)
{
	struct quota_limits lim = {.prompt_tokens_per_minute = 60};
	fake_now = 1000;
	struct quota *q = quota_make(16, &lim);
	struct quota_client a = addr4("10.0.0.1"), b = addr4("10.0.0.2");
	struct quota_verdict v;
	ck_assert(quota_begin(q, &a, 40, &v));
	quota_end(q, &a, true);
	ck_assert(!quota_begin(q, &a, 30, &v)); /* 20 left */
	ck_assert_int_eq(v.limit, QUOTA_PROMPT_TOKENS);
	ck_assert_int_eq(v.status, 429);
	ck_assert_int_eq(v.retry_after_s, 10);
	ck_assert_str_eq(quota_limit_code(v.limit), "per_key_prompt_tokens_per_minute");
	ck_assert_ptr_nonnull(strstr(v.message, "limits.per_key.prompt_tokens_per_minute"));
	ck_assert(quota_begin(q, &b, 30, &v)); /* another client has its own budget */
	quota_end(q, &b, true);
	fake_now += 9.5;
	ck_assert(!quota_begin(q, &a, 30, &v)); /* 29.5 */
	ck_assert_int_eq(v.retry_after_s, 1);
	fake_now += 0.5;
	ck_assert(quota_begin(q, &a, 30, &v)); /* exactly 30 */
	quota_end(q, &a, true);
	ck_assert_double_lt(usage(q, &a).tokens, 0.001);
	/* Never more than a minute's worth, however long the pause. */
	fake_now += 1000;
	ck_assert_double_eq_tol(usage(q, &a).tokens, 60, 1e-9);
	/* A prompt above the whole budget can never pass: no Retry-After. */
	ck_assert(!quota_begin(q, &a, 61, &v));
	ck_assert_int_eq(v.limit, QUOTA_PROMPT_TOKENS);
	ck_assert_int_eq(v.retry_after_s, 0);
	ck_assert_ptr_nonnull(strstr(v.message, "never"));
	ck_assert_double_eq_tol(usage(q, &a).tokens, 60, 1e-9); /* refusals take nothing */
	quota_free(q);
}
END_TEST

/* Address churn: the table never holds more than max_clients entries; idle
 * ones are evicted oldest first, busy ones never; a full table of busy
 * clients refuses with 503; a minute of idleness empties it. */
START_TEST(test_eviction_bounded)
{
	struct quota_limits lim = {.max_streams = 1, .prompt_tokens_per_minute = 600};
	fake_now = 50;
	struct quota *q = quota_make(4, &lim);
	struct quota_verdict v;
	struct quota_stats st;
	char ip[32];
	for (int i = 0; i < 10000; i++) {
		snprintf(ip, sizeof(ip), "10.%d.%d.%d", i >> 16 & 255, i >> 8 & 255, i & 255);
		struct quota_client c = addr4(ip);
		ck_assert(quota_begin(q, &c, 1, &v));
		quota_started(q, &c);
		quota_end(q, &c, true);
		fake_now += 0.001;
	}
	quota_get_stats(q, &st);
	ck_assert_uint_eq(st.clients, 4);
	ck_assert_uint_eq(st.evicted, 10000 - 4);
	/* The newest stay, the oldest went. */
	struct quota_client newest = addr4("10.0.39.15"), oldest = addr4("10.0.0.0");
	struct quota_usage u;
	ck_assert(quota_usage_of(q, &newest, &u));
	ck_assert(!quota_usage_of(q, &oldest, &u));
	/* Busy entries are never evicted: with 4 in flight a 5th client is refused. */
	struct quota_client busy[4];
	for (int i = 0; i < 4; i++) {
		snprintf(ip, sizeof(ip), "192.168.0.%d", i);
		busy[i] = addr4(ip);
		ck_assert(quota_begin(q, &busy[i], 1, &v));
	}
	struct quota_client extra = addr4("192.168.1.1");
	ck_assert(!quota_begin(q, &extra, 1, &v));
	ck_assert_int_eq(v.limit, QUOTA_TABLE_FULL);
	ck_assert_int_eq(v.status, 503);
	ck_assert_int_ge(v.retry_after_s, 1);
	/* A busy client keeps its count (max_streams 1 still refuses it). */
	ck_assert(!quota_begin(q, &busy[0], 1, &v));
	ck_assert_int_eq(v.limit, QUOTA_MAX_STREAMS);
	for (int i = 0; i < 4; i++)
		quota_end(q, &busy[i], false);
	ck_assert(quota_begin(q, &extra, 1, &v));
	quota_end(q, &extra, false);
	/* Idle for a minute: dropped at the next begin (their budgets are full). */
	fake_now += 61;
	struct quota_client one = addr4("172.16.0.1");
	ck_assert(quota_begin(q, &one, 1, &v));
	quota_get_stats(q, &st);
	ck_assert_uint_eq(st.clients, 1);
	quota_end(q, &one, false);
	quota_free(q);
}
END_TEST

/* A reload changes the limits, not the counts. */
START_TEST(test_reload_keeps_counts)
{
	struct quota_limits lim = {.max_streams = 1};
	fake_now = 10;
	struct quota *q = quota_make(16, &lim);
	struct quota_client a = addr4("10.1.1.1");
	struct quota_verdict v;
	ck_assert(quota_begin(q, &a, 30, &v));
	ck_assert(!quota_begin(q, &a, 30, &v));
	lim.max_streams = 2;
	quota_set_limits(q, &lim);
	ck_assert(quota_begin(q, &a, 30, &v)); /* the first still counts: now 2 */
	ck_assert_int_eq(usage(q, &a).streams, 2);
	lim.max_streams = 1;
	quota_set_limits(q, &lim);
	ck_assert(!quota_begin(q, &a, 30, &v));
	ck_assert_int_eq(usage(q, &a).streams, 2);
	struct quota_limits got;
	quota_get_limits(q, &got);
	ck_assert_int_eq(got.max_streams, 1);
	/* A budget switched on starts full; a lower one cuts what is left. */
	lim = (struct quota_limits){.prompt_tokens_per_minute = 30};
	quota_set_limits(q, &lim);
	ck_assert_double_eq_tol(usage(q, &a).tokens, 30, 1e-9);
	ck_assert(quota_begin(q, &a, 20, &v));
	lim.prompt_tokens_per_minute = 6;
	quota_set_limits(q, &lim);
	ck_assert_double_eq_tol(usage(q, &a).tokens, 6, 1e-9);
	ck_assert(!quota_begin(q, &a, 7, &v)); /* more than a minute's worth now */
	ck_assert_int_eq(v.retry_after_s, 0);
	ck_assert(quota_begin(q, &a, 6, &v));
	ck_assert(!quota_begin(q, &a, 3, &v));
	ck_assert_int_eq(v.retry_after_s, 30); /* 3 tokens at 6 a minute */
	ck_assert_int_eq(usage(q, &a).streams, 4);
	for (int i = 0; i < 4; i++)
		quota_end(q, &a, false);
	ck_assert_int_eq(usage(q, &a).streams, 0);
	ck_assert_int_eq(usage(q, &a).queued, 0);
	quota_free(q);
}
END_TEST

START_TEST(test_client_identity)
{
	unsigned char d1[32], d2[32];
	for (int i = 0; i < 32; i++) {
		d1[i] = (unsigned char)i;
		d2[i] = (unsigned char)(i + 1);
	}
	struct quota_client k1, k1b, k2;
	char name[QUOTA_CLIENT_NAME_LEN];
	struct sockaddr_in in = {.sin_family = AF_INET};
	inet_pton(AF_INET, "127.0.0.1", &in.sin_addr);
	/* A matched key wins over the address. */
	quota_client_of(&k1, d1, (const struct sockaddr *)&in);
	quota_client_of(&k1b, d1, NULL);
	quota_client_of(&k2, d2, NULL);
	ck_assert_int_eq(k1.kind, QUOTA_CLIENT_KEY);
	ck_assert_mem_eq(&k1, &k1b, sizeof(k1));
	quota_client_name(&k1, name);
	ck_assert_str_eq(name, "key:0001020304050607");
	struct quota_client v4 = addr4("127.0.0.1"), mapped = addr6("::ffff:127.0.0.1");
	ck_assert_mem_eq(&v4, &mapped, sizeof(v4));
	quota_client_name(&mapped, name);
	ck_assert_str_eq(name, "addr:127.0.0.1");
	/* IPv6: one /64 is one client. */
	struct quota_client a = addr6("2001:db8:1:2::1"), b = addr6("2001:db8:1:2:ffff::9");
	struct quota_client c = addr6("2001:db8:1:3::1");
	ck_assert_mem_eq(&a, &b, sizeof(a));
	ck_assert(memcmp(&a, &c, sizeof(a)) != 0);
	quota_client_name(&a, name);
	ck_assert_str_eq(name, "addr:2001:db8:1:2::/64");
	struct quota_client none;
	quota_client_of(&none, NULL, NULL);
	ck_assert_int_eq(none.kind, 0);
	quota_client_name(&none, name);
	ck_assert_str_eq(name, "");
	/* Counted apart. */
	struct quota_limits lim = {.max_streams = 1};
	struct quota *q = quota_make(16, &lim);
	struct quota_verdict v;
	ck_assert(quota_begin(q, &k1, 1, &v));
	ck_assert(quota_begin(q, &k2, 1, &v));
	ck_assert(quota_begin(q, &v4, 1, &v));
	ck_assert(!quota_begin(q, &mapped, 1, &v));
	ck_assert_ptr_nonnull(strstr(v.message, "127.0.0.1"));
	quota_free(q);
}
END_TEST

static void digest_line(const char *key, char out[72])
{
	unsigned char d[32];
	SHA256((const unsigned char *)key, strlen(key), d);
	int n = snprintf(out, 72, "sha256:");
	for (int i = 0; i < 32; i++)
		n += snprintf(out + n, (size_t)(72 - n), "%02x", d[i]);
}

/* Which key matched: its index, the same whatever the order of checks. */
START_TEST(test_auth_match_index)
{
	char k0[72], k1[72], k2[72], err[256];
	digest_line("key-zero", k0);
	digest_line("key-one", k1);
	digest_line("key-two", k2);
	char *keys[] = {k0, k1, k2};
	struct auth_keys ak;
	ck_assert_int_eq(auth_keys_parse(keys, 3, &ak, err, sizeof(err)), 0);
	int idx = 7;
	ck_assert(auth_match(&ak, "Bearer key-one", &idx));
	ck_assert_int_eq(idx, 1);
	ck_assert(auth_match(&ak, "Bearer key-two", &idx));
	ck_assert_int_eq(idx, 2);
	ck_assert(auth_match(&ak, "bearer  key-zero ", &idx));
	ck_assert_int_eq(idx, 0);
	ck_assert(!auth_match(&ak, "Bearer key-three", &idx));
	ck_assert_int_eq(idx, -1);
	ck_assert(!auth_match(&ak, NULL, &idx));
	ck_assert_int_eq(idx, -1);
	ck_assert(auth_check(&ak, "Bearer key-zero"));
	auth_keys_deinit(&ak);
	ck_assert_int_eq(auth_keys_parse(NULL, 0, &ak, err, sizeof(err)), 0);
	ck_assert(auth_match(&ak, NULL, &idx)); /* auth off: allowed, no key */
	ck_assert_int_eq(idx, -1);
	auth_keys_deinit(&ak);
}
END_TEST

START_TEST(test_metrics_text)
{
	struct quota_limits lim = {.max_streams = 1};
	struct quota *q = quota_make(16, &lim);
	struct quota_client a = addr4("10.0.0.1");
	struct quota_verdict v;
	ck_assert(quota_begin(q, &a, 1, &v));
	ck_assert(!quota_begin(q, &a, 1, &v));
	quota_count_rejection(q, QUOTA_SESSIONS_TOTAL);
	quota_count_rejection(q, QUOTA_MAX_SESSIONS);
	quota_count_rejection(q, QUOTA_MAX_SESSIONS);
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	quota_write_metrics(q, f);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(text, "# TYPE sinkd_quota_rejections_total counter\n"));
	ck_assert_ptr_nonnull(
	    strstr(text, "sinkd_quota_rejections_total{limit=\"per_key_max_streams\"} 1\n"));
	ck_assert_ptr_nonnull(
	    strstr(text, "sinkd_quota_rejections_total{limit=\"per_key_max_sessions\"} 2\n"));
	ck_assert_ptr_nonnull(
	    strstr(text, "sinkd_quota_rejections_total{limit=\"max_sessions\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(
	    text, "sinkd_quota_rejections_total{limit=\"per_key_prompt_tokens_per_minute\"} 0\n"));
	ck_assert_ptr_nonnull(strstr(text, "sinkd_quota_clients 1\n"));
	free(text);
	quota_end(q, &a, false);
	quota_free(q);
}
END_TEST

struct racer {
	struct quota *q;
	struct quota_client c;
	int allowed;
	atomic_int *in_flight; /* shared: begun and not yet ended */
	int most;              /* largest in_flight seen */
};

static void *race_main(void *arg)
{
	struct racer *r = arg;
	struct quota_verdict v;
	for (int i = 0; i < 20000; i++)
		if (quota_begin(r->q, &r->c, 1, &v)) {
			r->allowed++;
			int now = atomic_fetch_add(r->in_flight, 1) + 1;
			if (now > r->most)
				r->most = now;
			atomic_fetch_sub(r->in_flight, 1);
			if (i % 2)
				quota_started(r->q, &r->c);
			quota_end(r->q, &r->c, i % 2);
		}
	return NULL;
}

/* Four threads on one client and its limit of 3: never more than 3 in
 * flight (begin checks and counts under one lock), nothing left at the end. */
START_TEST(test_threads_one_client)
{
	struct quota_limits lim = {.max_streams = 3};
	struct quota *q = quota_make(16, &lim);
	struct racer r[4];
	pthread_t t[4];
	atomic_int in_flight = 0;
	for (int i = 0; i < 4; i++) {
		r[i] = (struct racer){.q = q, .c = addr4("10.9.9.9"), .in_flight = &in_flight};
		ck_assert_int_eq(pthread_create(&t[i], NULL, race_main, &r[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	int allowed = 0;
	for (int i = 0; i < 4; i++) {
		allowed += r[i].allowed;
		ck_assert_int_le(r[i].most, 3);
	}
	ck_assert_int_gt(allowed, 0);
	ck_assert_int_eq(usage(q, &r[0].c).streams, 0);
	ck_assert_int_eq(usage(q, &r[0].c).queued, 0);
	struct quota_stats st;
	quota_get_stats(q, &st);
	ck_assert_uint_eq(st.rejected[QUOTA_MAX_STREAMS] + (uint64_t)allowed, 4 * 20000);
	quota_free(q);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("quota");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_streams_and_queued);
	tcase_add_test(tc, test_token_budget_refill);
	tcase_add_test(tc, test_eviction_bounded);
	tcase_add_test(tc, test_reload_keeps_counts);
	tcase_add_test(tc, test_client_identity);
	tcase_add_test(tc, test_auth_match_index);
	tcase_add_test(tc, test_metrics_text);
	tcase_add_test(tc, test_threads_one_client);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
