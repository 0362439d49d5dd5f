/* Learned sink logits (gpt-oss's attn_sinks) in the CPU cache's attention:
 * for every tier combination the cache has (kept sinks full precision or
 * quantized, anchors, int8 and int4 groups, staging, hot window, strategy
 * full, no kept sinks), GQA ratios 1 and 4, soft-cap off and on, attention
 * with a sink logit s per head must equal attention over the same keys
 * plus one extra key whose score is s and whose value is zero.  The
 * reference here reads the rows as the cache stores them (dequantizing
 * codes with their scales) and computes that extra-key softmax in double;
 * it also checks the kept sinks' mass, each key's weight (sink in the
 * denominator), the learned sink's mass and the trace's per-layer field. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cache/cachetrace.h"
#include "cache/kvquant.h"
#include "cache/rope.h"
#include "cache/sinkcache.h"
#include "cache/sinkcache_impl.h"
#include "testutil.h"
#include "util/errbuf.h"

enum { NL = 2, NKV = 2, D = 16, MAXH = 8, MAXR = 128 };

/* One resident key as the cache holds it: rotated key and value. */
struct ref_row {
	float k[D], v[D];
	bool by_rank; /* a sink or anchor: scored with the sink query */
};

static void load_fp(const struct sinkcache *c, const unsigned char *base, int cap, int kh, int slot,
                    float *out)
{
	kv_row_load(c->g.dtype, base + ((size_t)kh * (size_t)cap + (size_t)slot) * c->fp_row, out,
	            D);
}

static int ref_ring(const struct sinkcache *c, const struct kv_ring *ring, int n,
                    const unsigned char *kb, const unsigned char *vb, int kh, struct ref_row *rows)
{
	for (int i = 0; i < n; i++) {
		int slot = kv_ring_slot(ring, i);
		load_fp(c, kb, ring->cap, kh, slot, rows[i].k);
		load_fp(c, vb, ring->cap, kh, slot, rows[i].v);
		rows[i].by_rank = false;
	}
	return n;
}

static int ref_sinks(const struct sinkcache *c, const struct kv_layer *L, int kh,
                     struct ref_row *rows)
{
	int bits = c->g.quant_bits;
	for (int i = 0; i < L->t.n_sink; i++) {
		size_t at = (size_t)kh * (size_t)L->caps.sink + (size_t)i;
		if (L->sink_quant) {
			const float *kp = &L->sink_kp[2 * at], *vp = &L->sink_vp[2 * at];
			kvq_dequant_row(L->sink_k + at * c->code_row, D, bits, kp[0], kp[1],
			                rows[i].k);
			kvq_dequant_row(L->sink_v + at * c->code_row, D, bits, vp[0], vp[1],
			                rows[i].v);
		} else {
			load_fp(c, L->sink_k, L->caps.sink, kh, i, rows[i].k);
			load_fp(c, L->sink_v, L->caps.sink, kh, i, rows[i].v);
		}
		rows[i].by_rank = true;
	}
	return L->t.n_sink;
}

static int ref_groups(const struct sinkcache *c, const struct kv_layer *L, int kh,
                      struct ref_row *rows)
{
	int n = 0, gs = L->caps.group, bits = c->g.quant_bits;
	for (int gi = 0; gi < L->t.n_groups; gi++) {
		size_t gh = (size_t)kv_ring_slot(&L->groups, gi) * NKV + (size_t)kh;
		const float *kp = L->gkp + gh * 2 * D;
		for (int t = gi == 0 ? L->t.grp_dropped : 0; t < gs; t++, n++) {
			size_t row = gh * (size_t)gs + (size_t)t;
			const uint8_t *kc = L->gk + row * c->code_row;
			for (int j = 0; j < D; j++)
				rows[n].k[j] = (float)kvq_code_at(kc, j, bits) * kp[j] + kp[D + j];
			kvq_dequant_row(L->gv + row * c->code_row, D, bits, L->gvp[2 * row],
			                L->gvp[2 * row + 1], rows[n].v);
			rows[n].by_rank = false;
		}
	}
	return n;
}

/* Every resident key of kv head kh of layer l, in rank order. */
static int ref_rows(const struct sinkcache *c, int l, int kh, struct ref_row *rows)
{
	const struct kv_layer *L = &c->layers[l];
	int n = ref_sinks(c, L, kh, rows);
	struct kv_ring anchors = {0, L->caps.anchor};
	n += ref_ring(c, &anchors, L->anc.n, L->a_k, L->a_v, kh, rows + n);
	for (int i = L->t.n_sink; i < n; i++)
		rows[i].by_rank = true;
	n += ref_groups(c, L, kh, rows + n);
	n += ref_ring(c, &L->stage, L->t.n_stage, L->st_k, L->st_v, kh, rows + n);
	n += ref_ring(c, &L->hot, L->t.n_hot, L->hot_k, L->hot_v, kh, rows + n);
	return n;
}

/* What one head's attention gave: output, the kept sinks' and the learned
 * sink's masses, each key's weight. */
struct ref_out {
	double out[MAXH][D], kept[MAXH], learned[MAXH], kw[MAXH][MAXR];
	int n;
};

/* The extra-key softmax of head h over rows (n) with logit *sink (NULL:
 * none) and soft-cap cap (0: none), in double. */
static void ref_head(const struct sinkcache *c, const struct kv_layer *L,
                     const struct ref_row *rows, int n, const float *q, const float *sink,
                     float cap, int h, struct ref_out *r)
{
	float qw[D], qs[D];
	memcpy(qw, q, sizeof(qw));
	memcpy(qs, q, sizeof(qs));
	rope_apply(qw, L->cs_win, c->g.rope_dim, c->g.rope_neox);
	rope_apply(qs, L->cs_sink, c->g.rope_dim, c->g.rope_neox);
	double sc[MAXR + 1], mx = -INFINITY, sum = 0.0;
	for (int i = 0; i < n; i++) {
		const float *qq = rows[i].by_rank ? qs : qw;
		double dot = 0.0;
		for (int j = 0; j < D; j++)
			dot += (double)qq[j] * (double)rows[i].k[j];
		sc[i] = dot / sqrt((double)D);
		if (cap > 0.0f)
			sc[i] = cap * tanh(sc[i] / cap);
	}
	sc[n] = sink ? (double)*sink : -INFINITY; /* the extra key: never soft-capped */
	for (int i = 0; i <= n; i++)
		mx = fmax(mx, sc[i]);
	for (int i = 0; i <= n; i++)
		sum += sc[i] == -INFINITY ? 0.0 : exp(sc[i] - mx);
	memset(r->out[h], 0, sizeof(r->out[h]));
	r->kept[h] = 0.0;
	for (int i = 0; i < n; i++) {
		double p = exp(sc[i] - mx) / sum;
		for (int j = 0; j < D; j++)
			r->out[h][j] += p * rows[i].v[j];
		r->kw[h][i] = p;
		if (i < L->t.n_sink)
			r->kept[h] += p;
	}
	/* the extra key's value is zero: it adds to no output, only its weight */
	r->learned[h] = sink ? exp(sc[n] - mx) / sum : 0.0;
}

static void ref_attend(const struct sinkcache *c, int l, const float *q, int n_heads,
                       const float *sinks, float cap, struct ref_out *r)
{
	static struct ref_row rows[MAXR];
	int ratio = n_heads / NKV;
	for (int h = 0; h < n_heads; h++) {
		r->n = ref_rows(c, l, h / ratio, rows);
		ck_assert_int_le(r->n, MAXR);
		ref_head(c, &c->layers[l], rows, r->n, q + (size_t)h * D, sinks ? sinks + h : NULL,
		         cap, h, r);
	}
}

/* ---- driving the cache -------------------------------------------------- */

struct combo {
	const char *name;
	struct cache_geometry g;
	int steps;
	/* tiers the stream must have held at some step, so the combination
	 * is exercised: quantized groups, staging, anchors, quantized sinks */
	bool groups, stage, anchors, quant_sinks;
};

/* What a stream of one combination saw. */
struct seen {
	bool groups, stage, anchors, quant_sinks;
	double worst;
};

static double rel(double got, double want, double scale)
{
	return fabs(got - want) / scale;
}

/* Attends layer l's newest token with two callers over disjoint heads and
 * compares everything with the reference; returns the worst error. */
static double check_step(struct sinkcache *c, int l, int n_heads, const float *sinks, float cap,
                         float *scratch, size_t ns, float *kw, unsigned *seed)
{
	static struct ref_out r;
	float q[MAXH * D], out[MAXH * D], kept[MAXH], learned[MAXH];
	for (int j = 0; j < n_heads * D; j++)
		q[j] = tu_frand(seed) * 2.0f;
	size_t ld =
	    (size_t)(c->layers[l].caps.sink + c->layers[l].caps.anchor + c->layers[l].caps.window);
	sinkcache_attend(c, l, q, n_heads, 0, 1, out, scratch, kept, learned, kw, true);
	sinkcache_attend(c, l, q, n_heads, 1, n_heads, out, scratch + ns, kept, learned, kw, false);
	ref_attend(c, l, q, n_heads, sinks, cap, &r);
	double worst = 0.0, scale = 1e-3;
	for (int h = 0; h < n_heads; h++)
		for (int j = 0; j < D; j++)
			scale = fmax(scale, fabs(r.out[h][j]));
	for (int h = 0; h < n_heads; h++) {
		for (int j = 0; j < D; j++)
			worst = fmax(worst, rel(out[h * D + j], r.out[h][j], scale));
		worst = fmax(worst, fabs(kept[h] - r.kept[h]));
		worst = fmax(worst, fabs(learned[h] - r.learned[h]));
		for (int i = 0; i < r.n; i++)
			worst = fmax(worst, fabs(kw[(size_t)h * ld + (size_t)i] - r.kw[h][i]));
	}
	sinkcache_observe(c, l, kw, learned, n_heads);
	return worst;
}

static void note_tiers(const struct sinkcache *c, struct seen *s)
{
	for (int l = 0; l < NL; l++) {
		const struct kv_layer *L = &c->layers[l];
		s->groups = s->groups || L->t.n_groups > 0;
		s->stage = s->stage || L->t.n_stage > 0;
		s->anchors = s->anchors || L->anc.n > 0;
		s->quant_sinks = s->quant_sinks || (L->sink_quant && L->t.n_sink > 0);
	}
}

/* The layer's logits: spread over a few units, one head far above its
 * keys and one far below (the sink takes nearly all or nothing). */
static void make_sinks(float *sinks, int n_heads, unsigned *seed)
{
	for (int h = 0; h < n_heads; h++)
		sinks[h] = 3.0f * tu_frand(seed);
	sinks[0] = 25.0f;
	if (n_heads > 2)
		sinks[n_heads - 1] = -25.0f;
}

static void run_combo(const struct combo *cb, int ratio, float cap, unsigned seed)
{
	char err[SINKD_ERR_LEN];
	int n_heads = NKV * ratio;
	struct sinkcache *c = NULL;
	ck_assert_msg(sinkcache_new(&cb->g, &c, err, sizeof(err)) == 0, "%s: %s", cb->name, err);
	sinkcache_set_softcap(c, cap);
	float sinks[NL][MAXH];
	for (int l = 0; l < NL; l++) {
		make_sinks(sinks[l], n_heads, &seed);
		ck_assert_msg(
		    sinkcache_set_learned_sinks(c, l, sinks[l], n_heads, err, sizeof(err)) == 0,
		    "%s", err);
	}
	size_t ns = sinkcache_scratch_floats(&cb->g);
	size_t cap_tok = cache_geometry_capacity_tokens(&cb->g);
	float *scratch = malloc(2 * ns * sizeof(float));
	float *kw = malloc((size_t)n_heads * cap_tok * sizeof(float));
	ck_assert_ptr_nonnull(scratch);
	ck_assert_ptr_nonnull(kw);
	struct seen s = {0};
	for (int step = 0; step < cb->steps; step++) {
		tu_cache_append_random(c, &seed);
		note_tiers(c, &s);
		for (int l = 0; l < NL; l++) {
			/* every third step of layer 1 without its sinks: the
			 * reference's plain softmax, and a setter that clears */
			bool off = l == 1 && step % 3 == 2;
			if (off)
				ck_assert_int_eq(sinkcache_set_learned_sinks(c, l, NULL, n_heads,
				                                             err, sizeof(err)),
				                 0);
			s.worst = fmax(s.worst, check_step(c, l, n_heads, off ? NULL : sinks[l],
			                                   cap, scratch, ns, kw, &seed));
			if (off)
				ck_assert_int_eq(sinkcache_set_learned_sinks(
				                     c, l, sinks[l], n_heads, err, sizeof(err)),
				                 0);
		}
	}
	double tol = cb->g.dtype == KV_DTYPE_F32 ? 2e-5 : 2e-3;
	ck_assert_msg(s.worst <= tol, "%s, ratio %d, softcap %g: worst error %g > %g", cb->name,
	              ratio, (double)cap, s.worst, tol);
	ck_assert_msg(s.groups == cb->groups && s.stage == cb->stage && s.anchors == cb->anchors &&
	                  s.quant_sinks == cb->quant_sinks,
	              "%s: tiers seen groups %d stage %d anchors %d quantized sinks %d", cb->name,
	              s.groups, s.stage, s.anchors, s.quant_sinks);
	free(scratch);
	free(kw);
	sinkcache_free(c);
}

static struct cache_geometry geom(int sinks, int window, bool quant, int bits, int hot)
{
	struct cache_geometry g = tu_geometry(NL, NKV, D, sinks, window, quant, bits, hot);
	g.rope_neox = true;
	return g;
}

static int combos(struct combo *out)
{
	int n = 0;
	out[n++] = (struct combo){"sinks + hot", geom(4, 12, false, 8, 0), 30, false, false};
	out[n++] = (struct combo){"no kept sinks", geom(0, 10, false, 8, 0), 20, false, false};
	out[n++] =
	    (struct combo){"int8 groups + staging + hot", geom(3, 24, true, 8, 4), 60, true, true};
	out[n++] =
	    (struct combo){"int4 groups + staging + hot", geom(2, 40, true, 4, 3), 90, true, true};
	struct cache_geometry g = geom(3, 20, true, 8, 4);
	g.protect_sinks = false;
	out[n++] = (struct combo){"quantized sinks int8", g, 50, true, true, false, true};
	g.quant_bits = 4;
	out[n++] = (struct combo){"quantized sinks int4", g, 50, true, true, false, true};
	g = geom(2, 8, false, 8, 0);
	g.anchor_max = 3;
	g.anchor_promote = 0.02f;
	g.anchor_demote_steps = 6;
	out[n++] = (struct combo){"anchors", g, 60, false, false, true};
	g = geom(2, 12, true, 8, 3);
	g.anchor_max = 2;
	g.anchor_promote = 0.02f;
	g.anchor_demote_steps = 6;
	out[n++] = (struct combo){"anchors + int8 groups", g, 60, true, true, true};
	g = geom(4, 0, true, 8, 2);
	g.strategy = CACHE_STRATEGY_FULL;
	g.max_context_length = 40;
	out[n++] = (struct combo){"strategy full", g, 40, true, true};
	g = geom(3, 12, false, 8, 0);
	g.dtype = KV_DTYPE_F16;
	out[n++] = (struct combo){"f16 rows", g, 25, false, false};
	return n;
}

START_TEST(test_extra_key_every_tier)
{
	struct combo cb[16];
	int n = combos(cb);
	for (int i = 0; i < n; i++)
		for (int ratio = 1; ratio <= 4; ratio *= 4)
			for (int capped = 0; capped < 2; capped++)
				run_combo(&cb[i], ratio, capped ? 2.0f : 0.0f,
				          (unsigned)(100 * i + 10 * ratio + capped));
}
END_TEST

/* Without learned sinks the outputs are bit-identical to a cache that
 * never had them, and a cleared layer is as if never set. */
START_TEST(test_none_is_unchanged)
{
	struct cache_geometry g = geom(3, 24, true, 8, 4);
	struct sinkcache *a = NULL, *b = NULL;
	ck_assert_int_eq(sinkcache_new(&g, &a, NULL, 0), 0);
	ck_assert_int_eq(sinkcache_new(&g, &b, NULL, 0), 0);
	float logits[4] = {1, 2, 3, 4};
	ck_assert_int_eq(sinkcache_set_learned_sinks(b, 0, logits, 4, NULL, 0), 0);
	ck_assert(sinkcache_has_learned_sinks(b, 0));
	ck_assert_int_eq(sinkcache_set_learned_sinks(b, 0, NULL, 4, NULL, 0), 0);
	ck_assert(!sinkcache_has_learned_sinks(b, 0));
	ck_assert(!sinkcache_has_learned_sinks(a, 1));
	size_t ns = sinkcache_scratch_floats(&g);
	float *scratch = malloc(ns * sizeof(float));
	float q[4 * D], oa[4 * D], ob[4 * D], la[4], lb[4];
	unsigned sa = 7, sb = 7, sq = 9;
	for (int t = 0; t < 40; t++) {
		tu_cache_append_random(a, &sa);
		tu_cache_append_random(b, &sb);
		for (int j = 0; j < 4 * D; j++)
			q[j] = tu_frand(&sq);
		sinkcache_attend(a, 0, q, 4, 0, 4, oa, scratch, NULL, la, NULL, true);
		sinkcache_attend(b, 0, q, 4, 0, 4, ob, scratch, NULL, lb, NULL, true);
		ck_assert_int_eq(memcmp(oa, ob, sizeof(oa)), 0);
		for (int h = 0; h < 4; h++)
			ck_assert(la[h] == 0.0f && lb[h] == 0.0f);
	}
	free(scratch);
	sinkcache_free(a);
	sinkcache_free(b);
}
END_TEST

START_TEST(test_setter_refusals)
{
	struct cache_geometry g = geom(2, 8, false, 8, 0);
	struct sinkcache *c = NULL;
	char err[SINKD_ERR_LEN];
	float logits[8] = {0};
	ck_assert_int_eq(sinkcache_new(&g, &c, NULL, 0), 0);
	ck_assert_int_eq(sinkcache_set_learned_sinks(c, NL, logits, 4, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "layer 2"));
	ck_assert_int_eq(sinkcache_set_learned_sinks(c, 0, logits, 3, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "multiple of the 2 kv heads"));
	ck_assert_int_eq(sinkcache_set_learned_sinks(c, 0, logits, 4, err, sizeof(err)), 0);
	ck_assert_int_eq(sinkcache_set_learned_sinks(c, 1, logits, 8, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "the same count for every layer"));
	sinkcache_free(c);
}
END_TEST

/* The trace reports each layer's learned sink mass (largest and mean over
 * heads) beside its slots, in the JSON only for layers that have one. */
START_TEST(test_trace_field)
{
	enum { NH = 4 };
	struct cache_geometry g = geom(2, 8, false, 8, 0);
	struct sinkcache *c = NULL;
	char err[SINKD_ERR_LEN];
	ck_assert_int_eq(sinkcache_new(&g, &c, NULL, 0), 0);
	float logits[NH] = {0.5f, 2.0f, -1.0f, 1.0f};
	ck_assert_int_eq(sinkcache_set_learned_sinks(c, 1, logits, NH, err, sizeof(err)), 0);
	ck_assert_int_eq(sinkcache_trace_enable(c, true, err, sizeof(err)), 0);
	struct cache_trace_step *t = cache_trace_step_new(&g);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(sinkcache_trace_fill(c, t, err, sizeof(err)), 0);
	cJSON *j = cache_trace_json(t, NULL);
	cJSON *l1 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "layers"), 1);
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(l1, "learned_sink_mass_max")));
	cJSON_Delete(j);
	size_t ns = sinkcache_scratch_floats(&g), cap = cache_geometry_capacity_tokens(&g);
	float *scratch = malloc(ns * sizeof(float)), *kw = malloc(NH * cap * sizeof(float));
	float q[NH * D], out[NH * D], learned[NL][NH];
	unsigned seed = 3;
	for (int s = 0; s < 12; s++) {
		tu_cache_append_random(c, &seed);
		for (int l = 0; l < NL; l++) {
			for (int i = 0; i < NH * D; i++)
				q[i] = tu_frand(&seed);
			sinkcache_attend(c, l, q, NH, 0, NH, out, scratch, NULL, learned[l], kw,
			                 true);
			sinkcache_observe(c, l, kw, learned[l], NH);
		}
	}
	ck_assert_int_eq(sinkcache_trace_fill(c, t, err, sizeof(err)), 0);
	ck_assert_int_eq(cache_trace_step_check(t, err, sizeof(err)), 0);
	ck_assert(!t->layers[0].learned_sink && t->layers[1].learned_sink);
	float mx = 0.0f, sum = 0.0f;
	for (int h = 0; h < NH; h++) {
		ck_assert(learned[0][h] == 0.0f && learned[1][h] > 0.0f);
		mx = fmaxf(mx, learned[1][h]);
		sum += learned[1][h];
	}
	ck_assert(t->layers[1].learned_sink_max == mx);
	ck_assert(fabsf(t->layers[1].learned_sink_mean - sum / NH) < 1e-7f);
	j = cache_trace_json(t, NULL);
	cJSON *layers = cJSON_GetObjectItem(j, "layers");
	ck_assert_ptr_null(
	    cJSON_GetObjectItem(cJSON_GetArrayItem(layers, 0), "learned_sink_mass_max"));
	l1 = cJSON_GetArrayItem(layers, 1);
	ck_assert(fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(l1, "learned_sink_mass_max")) -
	               mx) < 1e-5);
	ck_assert(fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(l1, "learned_sink_mass_mean")) -
	               sum / NH) < 1e-5);
	cJSON_Delete(j);
	free(scratch);
	free(kw);
	cache_trace_step_free(t);
	sinkcache_free(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("learned-sinks");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_extra_key_every_tier);
	tcase_add_test(tc, test_none_is_unchanged);
	tcase_add_test(tc, test_setter_refusals);
	tcase_add_test(tc, test_trace_field);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
