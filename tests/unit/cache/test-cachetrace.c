/* Cache traces of the CPU sink cache against the geometry of a scripted
 * stream: sinks are the first tokens, the window the most recent ones, the
 * quantized slots its older part, anchors lie between them in stream order;
 * RoPE positions are ranks (or stream indices); a step's masses sum to 1
 * per head; tracing is off until asked for and costs nothing then. */
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cachetrace.h"
#include "cache/sinkcache.h"
#include "testutil.h"

enum { NL = 2, NKV = 2, NH = 4, D = 16 };

static unsigned long long rng = 0x9E3779B97F4A7C15ULL;
static float frand(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static struct cache_geometry geom(int sinks, int window, int bits, int hot)
{
	struct cache_geometry g =
	    tu_geometry(NL, NKV, D, sinks, window, bits > 0, bits > 0 ? bits : 8, hot);
	g.anchor_promote = 0.05f;
	g.anchor_demote_steps = 8;
	return g;
}

struct rig {
	struct sinkcache *c;
	float *scratch, *weights, out[NH * D];
	size_t ld;
	struct cache_trace_step step;
	struct cache_trace_layer layers[NL];
	/* the largest deviation from 1 of a head's weight sum in any step */
	double worst_head_sum;
};

static void rig_init(struct rig *r, const struct cache_geometry *g)
{
	memset(r, 0, sizeof(*r));
	char err[256];
	ck_assert_msg(sinkcache_new(g, &r->c, err, sizeof(err)) == 0, "%s", err);
	r->scratch = malloc(sinkcache_scratch_floats(g) * sizeof(float));
	r->ld = cache_geometry_capacity_tokens(g);
	r->weights = malloc((size_t)NH * r->ld * sizeof(float));
	size_t slots = cache_trace_slots_per_layer(g);
	for (int l = 0; l < NL; l++)
		r->layers[l].slots = calloc(slots, sizeof(struct cache_trace_slot));
	r->step.n_layers = NL;
	r->step.layers = r->layers;
	ck_assert(r->scratch && r->weights);
}

static void rig_free(struct rig *r)
{
	sinkcache_free(r->c);
	free(r->scratch);
	free(r->weights);
	for (int l = 0; l < NL; l++)
		free(r->layers[l].slots);
}

/* One token through every layer as the CPU backend runs it: append,
 * attend (key weights when the cache wants them), observe.  Every 7th
 * token's key points along the queries, so some tokens draw attention. */
static void rig_token(struct rig *r, int t)
{
	char err[256];
	float k[NKV * D], v[NKV * D], q[NH * D];
	for (int l = 0; l < NL; l++) {
		for (int i = 0; i < NKV * D; i++) {
			k[i] = frand() + (t % 7 == 0 && i % D == 0 ? 4.0f : 0.0f);
			v[i] = frand();
		}
		for (int i = 0; i < NH * D; i++)
			q[i] = frand() + (i % D == 0 ? 1.0f : 0.0f);
		ck_assert_msg(sinkcache_append(r->c, l, k, v, err, sizeof(err)) == 0, "%s", err);
		float *kw = sinkcache_tracks_attention(r->c) ? r->weights : NULL;
		sinkcache_attend(r->c, l, q, NH, 0, NH, r->out, r->scratch, NULL, NULL, kw, true);
		if (kw) {
			int n = sinkcache_resident_tokens(r->c);
			for (int h = 0; h < NH; h++) {
				double sum = 0.0;
				for (int i = 0; i < n; i++)
					sum += kw[(size_t)h * r->ld + (size_t)i];
				r->worst_head_sum = fmax(r->worst_head_sum, fabs(sum - 1.0));
			}
		}
		sinkcache_observe(r->c, l, kw, NULL, NH);
	}
}

static void rig_fill(struct rig *r)
{
	char err[256];
	ck_assert_msg(sinkcache_trace_fill(r->c, &r->step, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(cache_trace_step_check(&r->step, err, sizeof(err)) == 0, "%s", err);
}

/* A traced cache of geometry g that saw n tokens, its trace filled. */
static void rig_traced(struct rig *r, const struct cache_geometry *g, int n)
{
	char err[256];
	rig_init(r, g);
	ck_assert(sinkcache_trace_enable(r->c, true, err, sizeof(err)) == 0);
	for (int t = 0; t < n; t++)
		rig_token(r, t);
	rig_fill(r);
}

START_TEST(tiers_follow_the_geometry)
{
	/* 4 sinks, a window of 32 with the newest 8 in full precision and the
	 * older 24 in int8 groups */
	struct cache_geometry g = geom(4, 32, 8, 8);
	struct rig r;
	rig_init(&r, &g);
	ck_assert(!sinkcache_tracing(r.c));
	ck_assert(!sinkcache_tracks_attention(r.c));
	char err[256];
	ck_assert(sinkcache_trace_enable(r.c, true, err, sizeof(err)) == 0);
	ck_assert(sinkcache_tracks_attention(r.c));
	const int T = 100;
	for (int t = 0; t < T; t++)
		rig_token(&r, t);
	rig_fill(&r);
	ck_assert(r.step.attention);
	ck_assert_uint_eq(r.step.step, T);
	ck_assert_int_eq(r.step.stream_pos, T - 1);
	ck_assert_int_eq(r.step.geometry.sink_keep_count, 4);
	ck_assert_int_eq(r.step.geometry.window_size, 32);
	ck_assert_int_eq(r.step.geometry.quant_bits, 8);
	for (int l = 0; l < NL; l++) {
		const struct cache_trace_layer *ly = &r.layers[l];
		ck_assert_int_eq(ly->n_slots, 4 + 32);
		double sum_mean = 0.0;
		for (int i = 0; i < ly->n_slots; i++) {
			const struct cache_trace_slot *s = &ly->slots[i];
			int64_t want = i < 4 ? i : T - 32 + (i - 4);
			ck_assert_int_eq(s->stream_index, want);
			ck_assert_int_eq(s->rope_pos, i); /* RoPE by cache rank */
			enum cache_tier tier = i < 4                ? CACHE_TIER_SINK
			                       : i < 4 + 32 - 8     ? CACHE_TIER_COMPRESSED
			                                            : CACHE_TIER_HOT;
			ck_assert_msg(s->tier == tier, "layer %d slot %d: tier %s, want %s", l, i,
			              cache_tier_name(s->tier), cache_tier_name(tier));
			ck_assert(s->mass_max >= s->mass_mean && s->mass_max <= 1.0f);
			ck_assert(s->mass_ema >= 0.0f && s->mass_ema <= 1.0f);
			sum_mean += s->mass_mean;
		}
		/* the mean over heads of per-head sums of 1 */
		ck_assert_msg(fabs(sum_mean - 1.0) < 1e-5, "layer %d: masses sum to %.9f", l,
		              sum_mean);
		/* sinks were resident all along: their average is of many steps */
		ck_assert(ly->slots[0].mass_ema > 0.0f);
	}
	ck_assert_msg(r.worst_head_sum < 1e-5, "a head's weights sum to 1 +- %g",
	              r.worst_head_sum);
	rig_free(&r);
}
END_TEST

START_TEST(window_only_and_original_positions)
{
	struct cache_geometry g = geom(0, 16, 0, 16);
	g.rope_positions = ROPE_POSITIONS_ORIGINAL;
	struct rig r;
	rig_traced(&r, &g, 40);
	for (int l = 0; l < NL; l++) {
		ck_assert_int_eq(r.layers[l].n_slots, 16);
		for (int i = 0; i < 16; i++) {
			const struct cache_trace_slot *s = &r.layers[l].slots[i];
			ck_assert_int_eq(s->stream_index, 24 + i);
			ck_assert_int_eq(s->rope_pos, 24 + i); /* the ablation: stream positions */
			ck_assert(s->tier == CACHE_TIER_HOT);  /* nothing is quantized */
		}
	}
	rig_free(&r);
}
END_TEST

START_TEST(off_until_asked_and_after_reuse)
{
	struct cache_geometry g = geom(4, 32, 4, 8);
	struct rig r;
	rig_init(&r, &g);
	for (int t = 0; t < 20; t++)
		rig_token(&r, t);
	/* structure without masses: nothing was observed */
	rig_fill(&r);
	ck_assert(!r.step.attention);
	ck_assert_uint_eq(r.step.step, 0);
	ck_assert_int_eq(r.layers[0].n_slots, 20);
	for (int i = 0; i < 20; i++)
		ck_assert(r.layers[0].slots[i].mass_max == 0.0f);
	/* from the next step on */
	char err[256];
	ck_assert(sinkcache_trace_enable(r.c, true, err, sizeof(err)) == 0);
	rig_token(&r, 20);
	rig_fill(&r);
	ck_assert(r.step.attention);
	ck_assert_uint_eq(r.step.step, 1);
	/* a first step's average is that step's weight */
	for (int i = 0; i < r.layers[0].n_slots; i++)
		ck_assert(r.layers[0].slots[i].mass_ema == r.layers[0].slots[i].mass_max);
	/* revision: the dropped tokens leave the trace; their successors are new */
	ck_assert(sinkcache_revise(r.c, 3, err, sizeof(err)) == 0);
	rig_fill(&r);
	ck_assert_int_eq(r.layers[0].n_slots, 18);
	ck_assert_int_eq(r.layers[0].slots[17].stream_index, 17);
	rig_token(&r, 18);
	rig_fill(&r);
	ck_assert(r.layers[0].slots[18].mass_ema == r.layers[0].slots[18].mass_max);
	/* a cache kept for another stream stops tracing */
	sinkcache_reset_trim(r.c);
	ck_assert(!sinkcache_tracing(r.c));
	ck_assert(!sinkcache_tracks_attention(r.c));
	rig_free(&r);
}
END_TEST

START_TEST(anchors_between_sinks_and_window)
{
	struct cache_geometry g = geom(2, 16, 0, 16);
	g.anchor_max = 4;
	struct rig r;
	rig_init(&r, &g);
	char err[256];
	ck_assert(sinkcache_trace_enable(r.c, true, err, sizeof(err)) == 0);
	int seen_anchor = 0;
	for (int t = 0; t < 200; t++) {
		rig_token(&r, t);
		rig_fill(&r);
		for (int l = 0; l < NL; l++) {
			const struct cache_trace_layer *ly = &r.layers[l];
			int n_anchor = 0;
			for (int i = 0; i < ly->n_slots; i++) {
				const struct cache_trace_slot *s = &ly->slots[i];
				ck_assert_int_eq(s->rope_pos, i);
				if (i < 2 && t >= 2)
					ck_assert(s->tier == CACHE_TIER_SINK && s->stream_index == i);
				if (s->tier == CACHE_TIER_ANCHOR) {
					n_anchor++;
					/* older than the window, after the sinks */
					ck_assert(s->stream_index >= 2 && s->stream_index < t + 1 - 16);
				}
				if (i >= ly->n_slots - (t + 1 < 16 ? 0 : 16) && t >= 17)
					ck_assert(s->tier == CACHE_TIER_HOT);
			}
			ck_assert_int_le(n_anchor, 4);
			seen_anchor += n_anchor;
		}
	}
	ck_assert_msg(seen_anchor > 0, "the scripted stream made no anchors");
	ck_assert(r.worst_head_sum < 1e-5);
	rig_free(&r);
}
END_TEST

START_TEST(fill_checks_its_arguments)
{
	struct cache_geometry g = geom(4, 32, 0, 32);
	struct rig r;
	rig_init(&r, &g);
	char err[256];
	r.step.n_layers = NL + 1;
	ck_assert_int_eq(sinkcache_trace_fill(r.c, &r.step, err, sizeof(err)), -EINVAL);
	ck_assert(strstr(err, "layers"));
	rig_free(&r);
}
END_TEST

/* A model sliding-window layer (layer 0, 8 tokens) beside a global one:
 * its trace is its last 8 tokens, all hot, at their stream positions, and
 * says its window; the global layer's is the geometry's. */
START_TEST(sliding_layer_traced)
{
	struct cache_geometry g = geom(4, 16, 0, 16);
	cache_geometry_set_layer_swa(&g, 0, 8);
	struct rig r;
	rig_traced(&r, &g, 40);
	const struct cache_trace_layer *s = &r.layers[0], *w = &r.layers[1];
	ck_assert_int_eq(s->sliding_window, 8);
	ck_assert_int_eq(w->sliding_window, 0);
	ck_assert_int_eq(s->n_slots, 8);
	double mass = 0;
	for (int i = 0; i < 8; i++) {
		ck_assert_int_eq(s->slots[i].stream_index, 32 + i);
		ck_assert_int_eq(s->slots[i].tier, CACHE_TIER_HOT);
		mass += s->slots[i].mass_mean;
	}
	ck_assert_msg(fabs(mass - 1.0) < 1e-4, "sliding layer's masses sum to %g", mass);
	ck_assert_int_eq(w->n_slots, 4 + 16);
	ck_assert_int_eq(w->slots[3].tier, CACHE_TIER_SINK);
	ck_assert_int_eq(w->slots[4].stream_index, 24);
	cJSON *j = cache_trace_json(&r.step, NULL);
	char *text = cJSON_PrintUnformatted(j);
	ck_assert_ptr_nonnull(strstr(text, "\"layer\":0,\"n_slots\":8,\"sliding_window\":8"));
	ck_assert_ptr_null(strstr(text, "\"n_slots\":20,\"sliding_window\""));
	free(text);
	cJSON_Delete(j);
	rig_free(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cachetrace");
	TCase *tc = tcase_create("trace");
	tcase_add_test(tc, tiers_follow_the_geometry);
	tcase_add_test(tc, window_only_and_original_positions);
	tcase_add_test(tc, off_until_asked_and_after_reuse);
	tcase_add_test(tc, anchors_between_sinks_and_window);
	tcase_add_test(tc, fill_checks_its_arguments);
	tcase_add_test(tc, sliding_layer_traced);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
