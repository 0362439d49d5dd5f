/* The prefix cache in the scheduler (sched_share.c), on the real
 * stories260K model: a session whose pinned prefix was found in the cache
 * continues exactly as one that computed it (tokens, logprobs, perplexity,
 * through eviction and quantization); many sessions hold one copy of it
 * (the budget counts it once); the cache's bound holds under churn and a
 * referenced entry stays; streams that start together compute their prefix
 * once; a snapshot of a sharing session restores and continues exactly;
 * cached_tokens says what came from the cache; on CUDA, unreferenced
 * entries make way in the KV arena for sessions the budget admitted.
 * Built twice: on the CPU backend and (SINKD_CUDA_EMU) on the CUDA
 * backend's emulation. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SINKD_CUDA_EMU
#include "backend_cuda.h"
#endif
#include "config/config.h"
#include "sched/scheduler.h"
#include "util/errbuf.h"
#include "sched_fixture.h"
#include "testutil.h"

#ifdef SINKD_CUDA_EMU
#define PREFIX_LEN 24 /* the emulation is slow: a short prefix */
#define N_GEN 64
#else
#define PREFIX_LEN 40
#define N_GEN 120
#endif

#ifdef SINKD_CUDA_EMU
#define OV_BACKEND "inference.attention.dtype=float32" /* the backend's caches */
#define ON_EMU 1
#else
#define OV_BACKEND "inference.attention.dtype=bfloat16" /* the default */
#define ON_EMU 0
#endif

/* The settings every test runs under: a window that the continuation
 * overruns (eviction) with a hot tier smaller than it (quantization), and
 * room for the pinned prefix. */
#define OV_COMMON                                                                                  \
	"inference.cache.window_size=56", "inference.cache.sink_keep_count=4",                     \
	    "inference.cache.max_pinned_tokens=48", "inference.quantization.enabled=true",         \
	    "inference.quantization.full_precision_recent=16", "scheduler.max_batch_tokens=1024",  \
	    OV_BACKEND

#define N_OV(ov) (sizeof(ov) / sizeof((ov)[0]))

/* n token ids of the vocabulary, the same for the same seed. */
static void make_tokens(int32_t *out, int n, unsigned seed)
{
	unsigned x = seed * 2654435761u + 12345u;
	for (int i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		out[i] = 5 + (int32_t)((x >> 8) % 400u);
	}
}

struct run {
	int32_t tokens[N_GEN];
	float logprobs[N_GEN];
	int n, n_cached;
};

/* One request (pin, logprobs), run to its end; its tokens into *out. */
static void run_req(struct scheduler *s, const int32_t *ids, size_t n, int max_tokens,
                    const char *sid, int pin, struct run *out)
{
	struct coll *c = coll_new(s);
	c->pin = pin;
	c->want_logprobs = true;
	ck_assert_int_eq(submit(s, c, ids, n, max_tokens, sid, 0), 0);
	coll_wait(c);
	ck_assert_msg(c->finish != GEN_FINISH_ERROR, "error %d: %s", c->error_rc, c->error);
	ck_assert_int_eq(c->n_tokens, max_tokens);
	if (out) {
		out->n = c->n_tokens;
		out->n_cached = c->n_cached;
		memcpy(out->tokens, c->tokens, (size_t)c->n_tokens * sizeof(int32_t));
		memcpy(out->logprobs, c->logprobs, (size_t)c->n_tokens * sizeof(float));
	}
	coll_free(c);
}

static void new_session(struct scheduler *s, char id[SCHED_SESSION_ID_LEN])
{
	char err[SINKD_ERR_LEN];
	ck_assert_int_eq(scheduler_session_create(s, NULL, id, NULL, err, sizeof(err)), 0);
}

static void assert_same_run(const struct run *a, const struct run *b)
{
	ck_assert_int_eq(a->n, b->n);
	ck_assert_int_eq(memcmp(a->tokens, b->tokens, (size_t)a->n * sizeof(int32_t)), 0);
	ck_assert_int_eq(memcmp(a->logprobs, b->logprobs, (size_t)a->n * sizeof(float)), 0);
}

/* Waits (3 s) until n sessions share an entry: a one-shot request's
 * session leaves just after its DONE. */
static void wait_shared_sessions(struct scheduler *s, size_t n)
{
	struct scheduler_stats st;
	for (int i = 0; i < 300; i++) {
		scheduler_get_stats(s, &st);
		if (st.prefix_shared_sessions == n)
			return;
		usleep(10000);
	}
}

static void finish(struct scheduler *s, struct sinkd_config *cfg)
{
	wait_idle(s);
	scheduler_free(s);
	config_deinit(cfg);
}

/* Two sessions and a one-shot request start with the same pinned prefix:
 * the first computes it (a miss), the others share it (hits, cached_tokens
 * = the prefix); every one generates exactly what it does with the cache
 * off, through eviction and quantization, the same perplexity too. */
START_TEST(test_shared_prefix_exact)
{
	const char *ov_on[] = {OV_COMMON};
	const char *ov_off[] = {OV_COMMON, "inference.prefix_cache.max_bytes=0"};
	int32_t ids[PREFIX_LEN + 8];
	struct run got[3][2];
	double nll[2][2];
	make_tokens(ids, PREFIX_LEN + 8, 1);
	for (int on = 0; on < 2; on++) {
		struct sinkd_config cfg;
		struct scheduler *s = on ? sched_make(&cfg, ov_on, N_OV(ov_on))
		                         : sched_make(&cfg, ov_off, N_OV(ov_off));
		char a[SCHED_SESSION_ID_LEN], b[SCHED_SESSION_ID_LEN];
		new_session(s, a);
		new_session(s, b);
		run_req(s, ids, PREFIX_LEN + 8, N_GEN, a, PREFIX_LEN, &got[0][on]);
		ids[PREFIX_LEN + 2] += 1; /* another conversation, the same prefix */
		run_req(s, ids, PREFIX_LEN + 8, N_GEN, b, PREFIX_LEN, &got[1][on]);
		ids[PREFIX_LEN + 2] += 1;
		run_req(s, ids, PREFIX_LEN + 8, N_GEN, NULL, PREFIX_LEN, &got[2][on]);
		ids[PREFIX_LEN + 2] -= 2;
		struct sched_session_info info;
		ck_assert_int_eq(scheduler_session_info(s, a, &info), 0);
		ck_assert_int_eq(info.shared_prefix_tokens, on ? PREFIX_LEN : 0);
		ck_assert_int_eq(info.n_sink, PREFIX_LEN);
		nll[0][on] = info.perplexity.generated_nll;
		ck_assert_int_eq(scheduler_session_info(s, b, &info), 0);
		ck_assert_int_eq(info.shared_prefix_tokens, on ? PREFIX_LEN : 0);
		ck_assert_uint_eq(info.n_seen, PREFIX_LEN + 8 + N_GEN);
		ck_assert_uint_gt(info.n_seen, PREFIX_LEN + 56); /* the window moved on */
		nll[1][on] = info.perplexity.generated_nll;
		struct scheduler_stats st;
		wait_shared_sessions(s, on ? 2 : 0); /* the one-shot request's left */
		scheduler_get_stats(s, &st);
		ck_assert_uint_eq(st.prefix_hits, on ? 2 : 0);
		ck_assert_uint_eq(st.prefix_misses, on ? 1 : 0);
		ck_assert_uint_eq(st.prefix_tokens_reused, on ? 2 * PREFIX_LEN : 0);
		ck_assert_uint_eq(st.prefix_shared_sessions, on ? 2 : 0);
		ck_assert_uint_eq(st.prefix_entries, on ? 1 : 0);
		ck_assert_int_eq(scheduler_session_delete(s, a), 0);
		ck_assert_int_eq(scheduler_session_delete(s, b), 0);
		finish(s, &cfg);
	}
	for (int i = 0; i < 3; i++)
		assert_same_run(&got[i][0], &got[i][1]);
	ck_assert_int_eq(got[0][1].n_cached, 0);
	ck_assert_int_eq(got[1][1].n_cached, PREFIX_LEN);
	ck_assert_int_eq(got[2][1].n_cached, PREFIX_LEN);
	ck_assert_int_eq(got[1][0].n_cached, 0);
	for (int i = 0; i < 2; i++) {
		ck_assert(nll[i][0] > 0);
		ck_assert(nll[i][0] == nll[i][1]);
	}
}
END_TEST

#ifndef SINKD_CUDA_EMU
#define N_MANY 200
#define MANY_PREFIX 1000
#else
#define N_MANY 12
#define MANY_PREFIX 24
#endif

/* Many sessions opened together with the same ~1,000-token prefix: it is
 * computed once (one miss, the others wait and share: rule W), held once
 * (prefix_bytes one entry), and the budget counts it once. */
START_TEST(test_many_sessions_share_one_copy)
{
	char win[64], pin[64];
	snprintf(win, sizeof(win), "inference.cache.window_size=%d", MANY_PREFIX + 24);
	snprintf(pin, sizeof(pin), "inference.cache.max_pinned_tokens=%d", MANY_PREFIX);
	const char *ov[] = {win,
	                    pin,
	                    "inference.cache.sink_keep_count=4",
#ifndef SINKD_CUDA_EMU
	                    "inference.cache.global_cache_limit=8GiB",
#endif
	                    "inference.quantization.enabled=true",
	                    OV_BACKEND,
	                    "inference.quantization.full_precision_recent=8"};
	struct sinkd_config cfg;
	struct scheduler *s = sched_make(&cfg, ov, N_OV(ov));
	static char ids_[N_MANY][SCHED_SESSION_ID_LEN];
	static int32_t prompt[MANY_PREFIX + 4];
	struct coll *c[N_MANY];
	struct sched_session_info info;
	struct scheduler_stats st;
	make_tokens(prompt, MANY_PREFIX + 4, 2);
	for (int i = 0; i < N_MANY; i++)
		new_session(s, ids_[i]);
	ck_assert_int_eq(scheduler_session_info(s, ids_[0], &info), 0);
	size_t bound_unpinned = info.bytes_reserved;
	for (int i = 0; i < N_MANY; i++) {
		c[i] = coll_new(s);
		c[i]->pin = MANY_PREFIX;
		prompt[MANY_PREFIX + 1] = 5 + i; /* each conversation its own words */
		ck_assert_int_eq(submit(s, c[i], prompt, MANY_PREFIX + 4, 1, ids_[i], 0), 0);
	}
	int hits = 0;
	for (int i = 0; i < N_MANY; i++) {
		coll_wait(c[i]);
		ck_assert_msg(c[i]->finish != GEN_FINISH_ERROR, "%s", c[i]->error);
		hits += c[i]->n_cached == MANY_PREFIX;
		coll_free(c[i]);
	}
	ck_assert_int_eq(hits, N_MANY - 1);
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.prefix_misses, 1);
	ck_assert_uint_eq(st.prefix_hits, N_MANY - 1);
	ck_assert_uint_eq(st.prefix_shared_sessions, N_MANY);
	ck_assert_uint_eq(st.prefix_entries, 1);
	ck_assert_uint_gt(st.prefix_bytes, 0);
	size_t own = 0;
	for (int i = 0; i < N_MANY; i++) {
		ck_assert_int_eq(scheduler_session_info(s, ids_[i], &info), 0);
		ck_assert_int_eq(info.shared_prefix_tokens, MANY_PREFIX);
		ck_assert_int_eq(info.pinned_tokens, MANY_PREFIX);
		if (i == 0)
			own = info.bytes_reserved;
		ck_assert_uint_eq(info.bytes_reserved, own);
	}
	/* the pinned bound less the shared rows, per session; the rows once */
	ck_assert_uint_gt(own + st.prefix_bytes, bound_unpinned);
	ck_assert_uint_eq(st.kv_bytes_reserved, (size_t)N_MANY * own + st.prefix_bytes);
	printf("%d sessions sharing a %d-token prefix: prefix %zu bytes, each session %zu, "
	       "reserved %zu (%zu unshared)\n",
	       N_MANY, MANY_PREFIX, st.prefix_bytes, own, st.kv_bytes_reserved,
	       (size_t)N_MANY * (own + st.prefix_bytes));
	for (int i = 0; i < N_MANY; i++)
		ck_assert_int_eq(scheduler_session_delete(s, ids_[i]), 0);
	finish(s, &cfg);
}
END_TEST

/* Many distinct prefixes, sessions made and deleted at random: the cache
 * never holds more than max_bytes, and the entry a session still shares is
 * never evicted (it continues exactly, and a new stream still finds it). */
START_TEST(test_bound_under_churn)
{
	const char *ov_one[] = {OV_COMMON};
	const char *ov_off[] = {OV_COMMON, "inference.prefix_cache.max_bytes=0"};
	char max[64];
	struct sinkd_config cfg;
	int32_t keep[PREFIX_LEN + 4], p[PREFIX_LEN + 4];
	struct scheduler_stats st;
	/* one entry's bytes, and a cache of three and a half */
	struct scheduler *s = sched_make(&cfg, ov_one, N_OV(ov_one));
	make_tokens(p, PREFIX_LEN + 4, 99);
	run_req(s, p, PREFIX_LEN + 4, 1, NULL, PREFIX_LEN, NULL);
	scheduler_get_stats(s, &st);
	size_t max_bytes = st.prefix_bytes * 7 / 2;
	ck_assert_uint_gt(max_bytes, 0);
	finish(s, &cfg);
	snprintf(max, sizeof(max), "inference.prefix_cache.max_bytes=%zu", max_bytes);
	const char *ov_on[] = {OV_COMMON, max};
	s = sched_make(&cfg, ov_on, N_OV(ov_on));
	char kept[SCHED_SESSION_ID_LEN], live[6][SCHED_SESSION_ID_LEN];
	bool used[6] = {false};
	struct run a, b;
	make_tokens(keep, PREFIX_LEN + 4, 3);
	new_session(s, kept);
	run_req(s, keep, PREFIX_LEN + 4, 2, kept, PREFIX_LEN, NULL);
	unsigned x = 7;
	uint64_t hits0 = 0;
	for (int step = 0; step < 40; step++) {
		x = x * 1103515245u + 12345u;
		int slot = (int)((x >> 8) % 6u);
		if (used[slot]) {
			ck_assert_int_eq(scheduler_session_delete(s, live[slot]), 0);
			used[slot] = false;
			continue;
		}
		make_tokens(p, PREFIX_LEN + 4, 100 + (x >> 12) % 12u);
		new_session(s, live[slot]);
		used[slot] = true;
		run_req(s, p, PREFIX_LEN + 4, 1, live[slot], PREFIX_LEN, NULL);
		scheduler_get_stats(s, &st);
		ck_assert_uint_le(st.prefix_bytes, max_bytes);
		ck_assert_uint_gt(st.prefix_entries, 0);
	}
	scheduler_get_stats(s, &st);
	ck_assert_uint_gt(st.prefix_hits, 0);
	hits0 = st.prefix_hits;
	struct sched_session_info info;
	ck_assert_int_eq(scheduler_session_info(s, kept, &info), 0);
	ck_assert_int_eq(info.shared_prefix_tokens, PREFIX_LEN);
	run_req(s, NULL, 0, N_GEN, kept, 0, &a);
	/* its entry is still there for a new stream */
	char again[SCHED_SESSION_ID_LEN];
	new_session(s, again);
	keep[PREFIX_LEN + 1] += 1;
	run_req(s, keep, PREFIX_LEN + 4, 1, again, PREFIX_LEN, &b);
	keep[PREFIX_LEN + 1] -= 1;
	ck_assert_int_eq(b.n_cached, PREFIX_LEN);
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.prefix_hits, hits0 + 1);
	ck_assert_int_eq(scheduler_session_delete(s, again), 0);
	ck_assert_int_eq(scheduler_session_delete(s, kept), 0);
	for (int i = 0; i < 6; i++)
		if (used[i])
			ck_assert_int_eq(scheduler_session_delete(s, live[i]), 0);
	finish(s, &cfg);
	/* what the kept session generated, with no cache at all */
	s = sched_make(&cfg, ov_off, N_OV(ov_off));
	new_session(s, kept);
	run_req(s, keep, PREFIX_LEN + 4, 2, kept, PREFIX_LEN, NULL);
	run_req(s, NULL, 0, N_GEN, kept, 0, &b);
	assert_same_run(&a, &b);
	ck_assert_int_eq(scheduler_session_delete(s, kept), 0);
	finish(s, &cfg);
}
END_TEST

/* Waits until a deleted session has left the engine (its id free again). */
static void wait_gone(struct scheduler *s, const char *id)
{
	struct sched_session_info info;
	for (int i = 0; i < 300 && scheduler_session_info(s, id, &info) == 0; i++)
		usleep(10000);
	usleep(50000); /* the engine frees it at its next turn */
}

/* A snapshot of a sharing session restores into a scheduler whose cache is
 * empty and continues exactly as the uninterrupted session; restored where
 * the prefix is cached, it shares it again (rule R). */
START_TEST(test_snapshot_of_sharing_session)
{
	const char *ov[] = {OV_COMMON};
	struct sinkd_config cfg, cfg2;
	struct scheduler *s = sched_make(&cfg, ov, N_OV(ov));
	int32_t ids[PREFIX_LEN + 8];
	char a[SCHED_SESSION_ID_LEN], b[SCHED_SESSION_ID_LEN], r[SCHED_SESSION_ID_LEN];
	char err[SINKD_ERR_LEN];
	struct run want, got;
	struct sched_session_info info;
	make_tokens(ids, PREFIX_LEN + 8, 4);
	new_session(s, a);
	new_session(s, b);
	run_req(s, ids, PREFIX_LEN + 8, 2, a, PREFIX_LEN, NULL);
	ids[PREFIX_LEN + 3] += 1;
	run_req(s, ids, PREFIX_LEN + 8, 20, b, PREFIX_LEN, NULL);
	ck_assert_int_eq(scheduler_session_info(s, b, &info), 0);
	ck_assert_int_eq(info.shared_prefix_tokens, PREFIX_LEN);
	unsigned char *snap = NULL;
	size_t len = 0;
	ck_assert_int_eq(scheduler_session_snapshot(s, b, &snap, &len, err, sizeof(err)), 0);
	run_req(s, NULL, 0, N_GEN, b, 0, &want);

	struct scheduler *s2 = sched_make(&cfg2, ov, N_OV(ov));
	ck_assert_int_eq(scheduler_session_restore(s2, snap, len, NULL, r, err, sizeof(err)), 0);
	run_req(s2, NULL, 0, N_GEN, r, 0, &got);
	assert_same_run(&want, &got);
	ck_assert_int_eq(scheduler_session_info(s2, r, &info), 0);
	ck_assert_int_eq(info.shared_prefix_tokens, 0); /* nothing to share there */
	ck_assert_int_eq(scheduler_session_delete(s2, r), 0);
	finish(s2, &cfg2);
	/* where the prefix is cached, the restored session shares it again (R) */
	ck_assert_int_eq(scheduler_session_delete(s, b), 0);
	wait_gone(s, b);
	ck_assert_int_eq(scheduler_session_restore(s, snap, len, NULL, r, err, sizeof(err)), 0);
	run_req(s, NULL, 0, N_GEN, r, 0, &got);
	assert_same_run(&want, &got);
	ck_assert_int_eq(scheduler_session_info(s, r, &info), 0);
	ck_assert_int_eq(info.shared_prefix_tokens, PREFIX_LEN);
	struct scheduler_stats st;
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.prefix_shared_sessions, 2);
	free(snap);
	ck_assert_int_eq(scheduler_session_delete(s, a), 0);
	ck_assert_int_eq(scheduler_session_delete(s, r), 0);
	finish(s, &cfg);
}
END_TEST

/* Applies a config (overrides) to a running scheduler, as a reload does. */
static void reload(struct scheduler *s, struct sinkd_config *cfg2, const char *const *ov,
                   size_t n_ov)
{
	struct config_errors errs = {0};
	struct sched_prepared *p = NULL;
	char err[SINKD_ERR_LEN];
	ck_assert_int_eq(config_load(cfg2, NULL, ov, n_ov, &errs), 0);
	config_errors_deinit(&errs);
	ck_assert_msg(scheduler_prepare(s, cfg2, &p, err, sizeof(err)) == 0, "%s", err);
	scheduler_commit(s, p);
}

/* Polls (3 s) until the cache holds `entries` entries. */
static void wait_entries(struct scheduler *s, size_t entries, struct scheduler_stats *st)
{
	for (int i = 0; i < 300; i++) {
		scheduler_get_stats(s, st);
		if (st->prefix_entries == entries)
			return;
		usleep(10000);
	}
}

/* A reload: max_bytes 0 empties the cache of what no session uses (a
 * sharing session keeps its rows and goes on exactly) and new streams find
 * nothing; a geometry change starts the cache anew; max_bytes back on, new
 * streams share again. */
START_TEST(test_reload)
{
	const char *ov_on[] = {OV_COMMON};
	const char *ov_off[] = {OV_COMMON, "inference.prefix_cache.max_bytes=0"};
	const char *ov_geom[] = {OV_COMMON, "inference.cache.window_size=60"};
	struct sinkd_config cfg, cfg2, cfg3, cfg4;
	struct scheduler_stats st;
	struct sched_session_info info;
	int32_t ids[PREFIX_LEN + 8], other[PREFIX_LEN + 8];
	char a[SCHED_SESSION_ID_LEN], b[SCHED_SESSION_ID_LEN];
	struct run r;
	make_tokens(ids, PREFIX_LEN + 8, 9);
	make_tokens(other, PREFIX_LEN + 8, 10);
	struct scheduler *s = sched_make(&cfg, ov_on, N_OV(ov_on));
	new_session(s, a);
	run_req(s, ids, PREFIX_LEN + 8, 2, a, PREFIX_LEN, NULL);
	run_req(s, other, PREFIX_LEN + 8, 2, NULL, PREFIX_LEN, NULL);
	wait_entries(s, 2, &st);
	ck_assert_uint_eq(st.prefix_entries, 2);
	size_t one = st.prefix_bytes / 2;
	reload(s, &cfg2, ov_off, N_OV(ov_off));
	wait_entries(s, 1, &st);
	ck_assert_uint_eq(st.prefix_entries, 1); /* the one session a shares */
	ck_assert_uint_eq(st.prefix_bytes, one);
	run_req(s, NULL, 0, 4, a, 0, NULL); /* a goes on */
	new_session(s, b);
	ids[PREFIX_LEN + 1] += 1;
	run_req(s, ids, PREFIX_LEN + 8, 2, b, PREFIX_LEN, &r);
	ck_assert_int_eq(r.n_cached, 0); /* off: nothing found */
	ck_assert_int_eq(scheduler_session_info(s, b, &info), 0);
	ck_assert_int_eq(info.shared_prefix_tokens, 0);
	ck_assert_int_eq(scheduler_session_delete(s, b), 0);
	reload(s, &cfg3, ov_geom, N_OV(ov_geom)); /* on again, another geometry */
	run_req(s, ids, PREFIX_LEN + 8, 2, NULL, PREFIX_LEN, &r);
	ck_assert_int_eq(r.n_cached, 0); /* the entry a shares is of the old geometry */
	run_req(s, ids, PREFIX_LEN + 8, 2, NULL, PREFIX_LEN, &r);
	ck_assert_int_eq(r.n_cached, PREFIX_LEN); /* the new geometry's */
	ck_assert_int_eq(scheduler_session_delete(s, a), 0);
	reload(s, &cfg4, ov_on, N_OV(ov_on));
	config_deinit(&cfg2);
	config_deinit(&cfg3);
	config_deinit(&cfg4);
	finish(s, &cfg);
}
END_TEST

/* Unpinned prompts with a common start (rule C): a later one copies the
 * cached image of its longest whole-block prefix (cached_tokens a multiple
 * of the block, at least one token computed) and generates exactly what it
 * does with the cache off, though the copied image holds evicted and
 * quantized rows and the window slides on past it. */
START_TEST(test_unpinned_copy)
{
	const char *ov_on[] = {OV_COMMON};
	const char *ov_off[] = {OV_COMMON, "inference.prefix_cache.max_bytes=0"};
	enum { N = 70 };
	int32_t ids[N];
	struct run got[3][2];
	for (int on = 0; on < 2; on++) {
		struct sinkd_config cfg;
		struct scheduler *s = on ? sched_make(&cfg, ov_on, N_OV(ov_on))
		                         : sched_make(&cfg, ov_off, N_OV(ov_off));
		char a[SCHED_SESSION_ID_LEN];
		make_tokens(ids, N, 8);
		run_req(s, ids, 40, N_GEN / 2, NULL, 0, &got[0][on]); /* caches 32 tokens */
		ids[50] += 1;
		new_session(s, a);
		run_req(s, ids, N, N_GEN, a, 0, &got[1][on]); /* takes 32, caches 64 */
		ids[66] += 1;
		run_req(s, ids, N, N_GEN / 2, NULL, 0, &got[2][on]); /* takes 64 */
		struct scheduler_stats st;
		scheduler_get_stats(s, &st);
		ck_assert_uint_eq(st.prefix_hits, on ? 2 : 0);
		ck_assert_uint_eq(st.prefix_tokens_reused, on ? 32 + 64 : 0);
		ck_assert_uint_eq(st.prefix_shared_sessions, 0);
		if (on)
			ck_assert_uint_ge(st.prefix_entries, 2);
		ck_assert_int_eq(scheduler_session_delete(s, a), 0);
		finish(s, &cfg);
	}
	for (int i = 0; i < 3; i++)
		assert_same_run(&got[i][0], &got[i][1]);
	ck_assert_int_eq(got[0][1].n_cached, 0);
	ck_assert_int_eq(got[1][1].n_cached, 32);
	ck_assert_int_eq(got[2][1].n_cached, 64);
}
END_TEST

#define N_VOICE 4

struct voice {
	char id[SCHED_SESSION_ID_LEN];
	struct coll *c;
};

/* Submits one request on each conversation, all at once (the openings)
 * or one after another (the CPU kernels are picked by the batch's size, so
 * results compare only between batches alike), and waits for all. */
static void voice_step(struct scheduler *s, struct voice *v, const int32_t *sys, int n_sys, int pin,
                       int step, int max_tokens, size_t revise, int *n_cached)
{
	int32_t words[8];
	for (int i = 0; i < N_VOICE; i++) {
		if (!sys && i > 0)
			coll_wait(v[i - 1].c);
		v[i].c = coll_new(s);
		v[i].c->pin = pin;
		v[i].c->want_logprobs = true;
		make_tokens(words, 5, (unsigned)(1000 + step * 16 + i));
		const int32_t *ids = sys ? sys : words;
		int n = sys ? n_sys : 3 + (step + i) % 3;
		ck_assert_int_eq(submit(s, v[i].c, ids, (size_t)n, max_tokens, v[i].id, revise), 0);
	}
	for (int i = 0; i < N_VOICE; i++) {
		coll_wait(v[i].c);
		ck_assert_msg(v[i].c->finish != GEN_FINISH_ERROR, "%s", v[i].c->error);
		if (n_cached)
			n_cached[i] = v[i].c->n_cached;
	}
}

/* The voice client's flow: conversations opened together, each with its
 * system prompt alone (pinned, max_tokens 0: rule D defers it, the first
 * computes it once for all: rule W), then bursts of words with revisions
 * and a reply.  Every reply and its logprobs are what the cache off gives,
 * the prefix is computed once, and every conversation shares it. */
START_TEST(test_voice_flow)
{
	const char *ov_on[] = {OV_COMMON};
	const char *ov_off[] = {OV_COMMON, "inference.prefix_cache.max_bytes=0"};
	int32_t sys[PREFIX_LEN];
	struct run reply[2][N_VOICE];
	uint64_t seen[2][N_VOICE];
	make_tokens(sys, PREFIX_LEN, 6);
	for (int on = 0; on < 2; on++) {
		struct sinkd_config cfg;
		struct scheduler *s = on ? sched_make(&cfg, ov_on, N_OV(ov_on))
		                         : sched_make(&cfg, ov_off, N_OV(ov_off));
		struct voice v[N_VOICE];
		int cached[N_VOICE];
		struct sched_session_info info;
		struct scheduler_stats st;
		for (int i = 0; i < N_VOICE; i++)
			new_session(s, v[i].id);
		voice_step(s, v, sys, PREFIX_LEN, PREFIX_LEN, 0, 0, 0, cached);
		for (int i = 0; i < N_VOICE; i++) {
			coll_free(v[i].c);
			ck_assert_int_eq(scheduler_session_info(s, v[i].id, &info), 0);
			ck_assert_uint_eq(info.n_seen, PREFIX_LEN);
			ck_assert_int_eq(info.pinned_tokens, PREFIX_LEN);
		}
		scheduler_get_stats(s, &st);
		ck_assert_uint_eq(st.prefix_misses, on ? 1 : 0);
		ck_assert_uint_eq(st.prefix_entries, on ? 1 : 0);
		voice_step(s, v, NULL, 0, 0, 1, 0, 0, NULL);
		for (int i = 0; i < N_VOICE; i++)
			coll_free(v[i].c);
		voice_step(s, v, NULL, 0, 0, 2, 0, 2, NULL);
		for (int i = 0; i < N_VOICE; i++)
			coll_free(v[i].c);
		voice_step(s, v, NULL, 0, 0, 3, N_GEN / 4, 0, NULL);
		for (int i = 0; i < N_VOICE; i++) {
			struct coll *c = v[i].c;
			reply[on][i].n = c->n_tokens;
			memcpy(reply[on][i].tokens, c->tokens,
			       (size_t)c->n_tokens * sizeof(int32_t));
			memcpy(reply[on][i].logprobs, c->logprobs,
			       (size_t)c->n_tokens * sizeof(float));
			coll_free(c);
			ck_assert_int_eq(scheduler_session_info(s, v[i].id, &info), 0);
			ck_assert_int_eq(info.shared_prefix_tokens, on ? PREFIX_LEN : 0);
			seen[on][i] = info.n_seen;
		}
		scheduler_get_stats(s, &st);
		ck_assert_uint_eq(st.prefix_misses, on ? 1 : 0);
		ck_assert_uint_eq(st.prefix_hits, on ? N_VOICE : 0); /* at their first burst */
		ck_assert_uint_eq(st.prefix_tokens_reused, on ? N_VOICE * PREFIX_LEN : 0);
		ck_assert_uint_eq(st.prefix_shared_sessions, on ? N_VOICE : 0);
		ck_assert_uint_eq(st.prefix_entries, on ? 1 : 0);
		for (int i = 0; i < N_VOICE; i++)
			ck_assert_int_eq(scheduler_session_delete(s, v[i].id), 0);
		finish(s, &cfg);
	}
	for (int i = 0; i < N_VOICE; i++) {
		assert_same_run(&reply[0][i], &reply[1][i]);
		ck_assert_uint_eq(seen[0][i], seen[1][i]);
	}
}
END_TEST

/* A session opened with its system prompt alone (deferred, rule D) that
 * then asks for tokens at once (the logits of its last prefix token: the
 * rows before it copied), or is snapshotted first and restored elsewhere,
 * continues exactly as with the cache off. */
START_TEST(test_deferred_generate_and_snapshot)
{
	const char *ov_on[] = {OV_COMMON};
	const char *ov_off[] = {OV_COMMON, "inference.prefix_cache.max_bytes=0"};
	int32_t sys[PREFIX_LEN];
	struct run r[2][2];
	char err[SINKD_ERR_LEN];
	make_tokens(sys, PREFIX_LEN, 7);
	for (int on = 0; on < 2; on++) {
		struct sinkd_config cfg, cfg2;
		struct scheduler *s = on ? sched_make(&cfg, ov_on, N_OV(ov_on))
		                         : sched_make(&cfg, ov_off, N_OV(ov_off));
		char a[SCHED_SESSION_ID_LEN], b[SCHED_SESSION_ID_LEN], x[SCHED_SESSION_ID_LEN];
		new_session(s, a);
		new_session(s, b);
		run_req(s, sys, PREFIX_LEN, 0, a, PREFIX_LEN,
		        NULL); /* computes, publishes, defers */
		run_req(s, sys, PREFIX_LEN, 0, b, PREFIX_LEN, NULL); /* defers */
		run_req(s, NULL, 0, N_GEN / 2, b, 0, &r[on][0]);
		if (on)
			ck_assert_int_eq(r[on][0].n_cached, 0); /* all but one came earlier */
		unsigned char *snap = NULL;
		size_t len = 0;
		ck_assert_int_eq(scheduler_session_snapshot(s, a, &snap, &len, err, sizeof(err)),
		                 0);
		struct scheduler *s2 = sched_make(&cfg2, ov_off, N_OV(ov_off));
		ck_assert_int_eq(
		    scheduler_session_restore(s2, snap, len, NULL, x, err, sizeof(err)), 0);
		free(snap);
		run_req(s2, NULL, 0, N_GEN / 2, x, 0, &r[on][1]);
		ck_assert_int_eq(scheduler_session_delete(s2, x), 0);
		finish(s2, &cfg2);
		ck_assert_int_eq(scheduler_session_delete(s, a), 0);
		ck_assert_int_eq(scheduler_session_delete(s, b), 0);
		finish(s, &cfg);
	}
	assert_same_run(&r[0][0], &r[1][0]);
	assert_same_run(&r[0][1], &r[1][1]);
}
END_TEST

/* Where sharing would change the shape of the forward that samples (the
 * CPU kernels are picked by batch size), the prefix is copied but for its
 * last row or computed: a one-shot prompt one token past its pinned prefix
 * copies S-1 rows and computes 2; one that is the prefix alone computes
 * it.  Either gives what the cache off gives; with it off nothing counts. */
START_TEST(test_no_share_cases)
{
	const char *ov[] = {OV_COMMON};
	const char *ov_off[] = {OV_COMMON, "inference.prefix_cache.max_bytes=0"};
	struct sinkd_config cfg;
	int32_t ids[PREFIX_LEN + 4];
	struct run on[3], off[3];
	struct scheduler_stats st;
	make_tokens(ids, PREFIX_LEN + 4, 5);
	for (int k = 0; k < 2; k++) {
		struct scheduler *s =
		    k ? sched_make(&cfg, ov, N_OV(ov)) : sched_make(&cfg, ov_off, N_OV(ov_off));
		struct run *r = k ? on : off;
		run_req(s, ids, PREFIX_LEN + 4, 3, NULL, PREFIX_LEN, &r[0]); /* a miss: publishes */
		run_req(s, ids, PREFIX_LEN + 1, 3, NULL, PREFIX_LEN, &r[1]);
		run_req(s, ids, PREFIX_LEN, 3, NULL, PREFIX_LEN, &r[2]);
		scheduler_get_stats(s, &st);
		if (k) {
			ck_assert_int_eq(r[0].n_cached, 0);
			ck_assert_int_eq(r[1].n_cached, PREFIX_LEN - 1);
			ck_assert_int_eq(r[2].n_cached, 0);
			ck_assert_uint_eq(st.prefix_hits, 1);
			ck_assert_uint_eq(st.prefix_entries, 1);
		} else {
			ck_assert_uint_eq(st.prefix_hits + st.prefix_misses + st.prefix_entries, 0);
		}
		finish(s, &cfg);
	}
	for (int i = 0; i < 3; i++)
		assert_same_run(&on[i], &off[i]);
}
END_TEST

#ifdef SINKD_CUDA_EMU
#define ROOM_BUDGET ((size_t)1 << 20) /* a KV budget small enough to fill */
#define ROOM_PIN 100
#define ROOM_PROMPT 4

/* The rows of entries no session references are in the CUDA KV arena but
 * not in the KV budget: a budget then filled with sessions would find the
 * arena short, so the backend's refusal evicts them and the session is made
 * after all.  Distinct pinned prefixes are published and left (their
 * sessions deleted) until they and three quarters of the budget overrun the
 * arena, then sessions that fill the budget each run a request: every one
 * succeeds, the entries are gone. */
START_TEST(test_unreferenced_prefixes_make_room)
{
	char err[SINKD_ERR_LEN], budget[64], pin[64];
	struct backend *be_fixture = fx.be; /* (NULL unless tests do not fork) */
	struct backend_cuda_options co = {.dtype = KV_DTYPE_F32, .cache_bytes = ROOM_BUDGET};
	ck_assert_msg(backend_cuda_new(fx.model, NULL, &co, &fx.be, err, sizeof(err)) == 0, "%s",
	              err);
	snprintf(budget, sizeof(budget), "inference.cache.global_cache_limit=%zu", ROOM_BUDGET);
	snprintf(pin, sizeof(pin), "inference.cache.max_pinned_tokens=%d", ROOM_PIN);
	const char *ov[] = {"inference.cache.window_size=120", "inference.cache.sink_keep_count=4",
	                    pin, budget, OV_BACKEND};
	struct sinkd_config cfg;
	struct scheduler *s = sched_make(&cfg, ov, N_OV(ov));
	struct scheduler_stats st = {0};
	int32_t p[ROOM_PIN + 4];
	char id[SCHED_SESSION_ID_LEN];
	size_t n_entries = 0;
	/* the arena: the budget, a sixteenth more and 1 MiB (backend_cuda.c) */
	size_t arena = ROOM_BUDGET + ROOM_BUDGET / 16 + ((size_t)1 << 20);
	while (st.prefix_bytes + ROOM_BUDGET / 4 * 3 <= arena) {
		ck_assert_uint_lt(n_entries, 64);
		make_tokens(p, ROOM_PIN + 4, 300 + (unsigned)n_entries);
		new_session(s, id);
		run_req(s, p, ROOM_PIN + 4, 1, id, ROOM_PIN, NULL);
		ck_assert_int_eq(scheduler_session_delete(s, id), 0);
		wait_gone(s, id);
		scheduler_get_stats(s, &st);
		ck_assert_uint_eq(st.prefix_entries, ++n_entries);
		ck_assert_uint_eq(st.prefix_shared_sessions, 0);
	}
	ck_assert_uint_eq(st.kv_bytes_reserved, 0); /* no entry counts in the budget */
	static char ids[256][SCHED_SESSION_ID_LEN];
	int n = 0;
	while (scheduler_session_create(s, NULL, ids[n], NULL, err, sizeof(err)) == 0)
		ck_assert_int_lt(++n, 256);
	ck_assert_int_gt(n, 1);
	for (int i = 0; i < n; i++) {
		struct coll *c = coll_new(s);
		make_tokens(p, ROOM_PROMPT, 900 + (unsigned)i);
		ck_assert_int_eq(submit(s, c, p, ROOM_PROMPT, 1, ids[i], 0), 0);
		coll_wait(c);
		ck_assert_msg(c->finish != GEN_FINISH_ERROR, "session %d of %d: error %d: %s", i, n,
		              c->error_rc, c->error);
		coll_free(c);
	}
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.prefix_entries, 0);
	ck_assert_uint_eq(st.prefix_bytes, 0);
	printf("%zu unreferenced prefixes evicted for %d sessions filling a %zu-byte budget\n",
	       n_entries, n, ROOM_BUDGET);
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(scheduler_session_delete(s, ids[i]), 0);
	finish(s, &cfg);
	backend_free(fx.be);
	fx.be = be_fixture;
}
END_TEST
#endif

int main(void)
{
	fixture_load();
	Suite *s = suite_create("scheduler-prefix");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_shared_prefix_exact);
	tcase_add_test(tc, test_many_sessions_share_one_copy);
	tcase_add_test(tc, test_snapshot_of_sharing_session);
	tcase_add_test(tc, test_voice_flow);
	tcase_add_test(tc, test_unpinned_copy);
#ifdef SINKD_CUDA_EMU
	tcase_add_test(tc, test_unreferenced_prefixes_make_room); /* the arena is CUDA's */
#endif
	if (!ON_EMU) { /* the emulation is slow: the cases above there */
		tcase_add_test(tc, test_bound_under_churn);
		tcase_add_test(tc, test_no_share_cases);
		tcase_add_test(tc, test_deferred_generate_and_snapshot);
		tcase_add_test(tc, test_reload);
	}
	suite_add_tcase(s, tc);
	int failed = tu_suite_failures(s);
	fixture_free();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
