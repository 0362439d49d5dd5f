/* The CUDA backend end to end, against the CPU backend (backend_cpu_new)
 * and the independent stories260K reference:
 *   - stories260K, fp32 on the device: last-prompt logits within 1e-4 of the
 *     float64 reference and the reference's greedy continuation;
 *   - two sessions interleaved in the same batches (chunked prefill, then
 *     decode), a small tiered cache (sinks, int8 / int4 compressed tier,
 *     evictions), a revision in the middle: logits of every step close to
 *     the CPU backend's, greedy tokens identical, same cache stats, same
 *     sink mass;
 *   - a synthetic model from sinkd-mkmodel (argv[1]) in bf16 and q8_0:
 *     fp32 device compute gives the CPU's greedy tokens; bf16 compute stays
 *     within bf16 tolerance;
 *   - the same with captured CUDA graphs (cuda_graphs option);
 *   - small synthetic models in q8_0, q4_0, q4_k, q5_k, q6_k and q5_1
 *     (weights dequantized on the device): fp32 logits within 1e-3 of the
 *     CPU backend on the same weights widened to F32 on the host, greedy
 *     tokens identical; within 5e-2 of the CPU on the blocks themselves;
 *   - cache traces: a traced session's trace (slots, tiers, positions,
 *     masses, moving averages) as the CPU backend's, beside an untraced one;
 *   - qwen2's rotary halves and Q/K/V biases (biases added in memory);
 *   - a KV arena too small for a session: a clear -ENOSPC, and the backend
 *     keeps serving;
 *   - snapshots: the cpu and cuda images of the same tokens agree (float,
 *     int8 with evicted groups, int4 with quantized sinks, strategy full,
 *     revisions); an image imported into a fresh cuda or cpu session goes
 *     on like its source (cuda from cuda bit for bit); images that do not
 *     fit the geometry are refused and leave the session untouched.
 * Exits 77 (skipped) without a GPU; built with -DSINKD_CUDA_EMU it runs on
 * the host emulation of CUDA (cuda/emu/) at smaller sizes. */
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "cache/cachetrace.h"
#include "cache/kvimage.h"
#include "cache/kvquant.h"
#include "cuda_device.h"
#include "cuda_kernels.h"
#include "cuda_testutil.h"
#include "engine/backend.h"
#include "gemma_ref.h"
#include "model/dequant.h"
#include "util/errbuf.h"
#include "testutil.h"

static const char *mkmodel_path;
static char shared_dir[1024];

static struct model *load_model(const char *path)
{
	struct model *m = NULL;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(model_load(path, NULL, &m, err, sizeof(err)) == 0, "%s", err);
	return m;
}

static struct backend *new_gpu_opt(const struct model *m, enum kv_dtype dt, size_t cache_bytes,
                                   bool graphs)
{
	struct backend_cuda_options o = {.device = 0,
	                                 .dtype = dt,
	                                 .cache_bytes = cache_bytes,
	                                 .auto_fraction = 0.3,
	                                 .cuda_graphs = graphs};
	struct backend *be = NULL;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(backend_cuda_new(m, NULL, &o, &be, err, sizeof(err)) == 0, "%s", err);
	return be;
}

static struct backend *new_gpu(const struct model *m, enum kv_dtype dt, size_t cache_bytes)
{
	return new_gpu_opt(m, dt, cache_bytes, false);
}

static struct backend *new_cpu(const struct model *m)
{
	struct backend_options opt = {.n_threads = 2};
	struct backend *be = NULL;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(backend_cpu_new(m, &opt, &be, err, sizeof(err)) == 0, "%s", err);
	return be;
}

static struct cache_geometry geometry(const struct model *m, int window, bool quant, int bits,
                                          bool protect, enum kv_dtype dt)
{
	struct cache_geometry g = tu_model_geometry(&m->hp, window);
	g.quant_enabled = quant;
	g.quant_bits = bits;
	g.protect_sinks = protect;
	g.full_precision_recent = quant ? 8 : window;
	g.dtype = dt;
	return g;
}

static struct backend_session *open_session(struct backend *be, const struct cache_geometry *g)
{
	struct backend_session *s = NULL;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->session_new(be, g, &s, err, sizeof(err)) == 0, "%s", err);
	return s;
}

/* max |a - b| / max |b| */
static double rel_diff(const float *a, const float *b, size_t n)
{
	double d = 0.0, mx = 1e-30;
	for (size_t i = 0; i < n; i++) {
		d = fmax(d, fabs((double)a[i] - b[i]));
		mx = fmax(mx, fabs((double)b[i]));
	}
	return d / mx;
}

static void forward_ok(struct backend *be, const struct backend_token *t, size_t n, float *logits)
{
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->forward(be, t, n, logits, err, sizeof(err)) == 0, "%s: %s",
	              be->ops->name, err);
}

/* ------------------------------------------------------ two backends */

struct twin_run {
	struct backend *be[2]; /* cpu, gpu */
	struct backend_session *s[2][2];
	int n_vocab;
	double worst;    /* largest relative logits difference */
	int token_flips; /* greedy steps where the argmax differed */
	uint64_t anchors_promoted, anchors_demoted; /* the gpu sessions', at the end */
	struct cache_geometry geometry;
	double learned_mass;  /* the cpu's learned sink mass over the decode, all layers */
	bool traced;          /* session 0 of each backend traces its cache, session 1 not */
	uint64_t trace_steps; /* the gpu trace's steps, at the end */
};

static struct cache_trace_step *trace_of(struct backend *be, struct backend_session *s,
                                         const struct cache_geometry *g)
{
	char err[SINKD_ERR_LEN];
	struct cache_trace_step *t = cache_trace_step_new(g);
	ck_assert_ptr_nonnull(t);
	ck_assert_msg(be->ops->session_trace(be, s, t, err, sizeof(err)) == 0, "%s: %s",
	              be->ops->name, err);
	ck_assert_msg(cache_trace_step_check(t, err, sizeof(err)) == 0, "%s: %s", be->ops->name,
	              err);
	return t;
}

/* The gpu session's trace is the cpu one's: the same slots in the same
 * tiers at the same positions, masses within tol, and each layer's mean
 * masses summing to 1 (every head's softmax sums to 1). */
static void assert_traces_alike(struct twin_run *r, int j, const struct cache_geometry *g,
                                double tol)
{
	struct cache_trace_step *a = trace_of(r->be[0], r->s[0][j], g);
	struct cache_trace_step *b = trace_of(r->be[1], r->s[1][j], g);
	ck_assert_int_eq(a->attention, j == 0);
	ck_assert_int_eq(b->attention, j == 0);
	ck_assert_uint_eq(a->step, b->step);
	ck_assert_int_eq(a->stream_pos, b->stream_pos);
	ck_assert_int_eq(a->geometry.anchor_max, b->geometry.anchor_max);
	for (int l = 0; l < a->n_layers; l++) {
		const struct cache_trace_layer *la = &a->layers[l], *lb = &b->layers[l];
		ck_assert_int_eq(la->n_slots, lb->n_slots);
		double sum = 0.0;
		for (int i = 0; i < la->n_slots; i++) {
			const struct cache_trace_slot *x = &la->slots[i], *y = &lb->slots[i];
			ck_assert_int_eq(x->stream_index, y->stream_index);
			ck_assert_int_eq(x->tier, y->tier);
			ck_assert_int_eq(x->rope_pos, y->rope_pos);
			ck_assert_msg(fabs(x->mass_max - y->mass_max) <= tol &&
			                  fabs(x->mass_mean - y->mass_mean) <= tol &&
			                  fabs(x->mass_ema - y->mass_ema) <= tol,
			              "layer %d slot %d (stream %lld): cpu %g/%g/%g gpu %g/%g/%g", l,
			              i, (long long)x->stream_index, x->mass_max, x->mass_mean,
			              x->mass_ema, y->mass_max, y->mass_mean, y->mass_ema);
			sum += y->mass_mean;
		}
		ck_assert_int_eq(la->learned_sink, lb->learned_sink);
		ck_assert_msg(fabs(la->learned_sink_max - lb->learned_sink_max) <= tol &&
		                  fabs(la->learned_sink_mean - lb->learned_sink_mean) <= tol,
		              "layer %d learned sink: cpu %g/%g gpu %g/%g", l, la->learned_sink_max,
		              la->learned_sink_mean, lb->learned_sink_max, lb->learned_sink_mean);
		sum += lb->learned_sink_mean; /* a softmax term without a slot */
		if (j == 0)
			ck_assert_msg(fabs(sum - 1.0) <= 1e-5, "layer %d: masses sum to %.8f", l, sum);
	}
	if (j == 0)
		r->trace_steps = b->step;
	cache_trace_step_free(a);
	cache_trace_step_free(b);
}

/* Feeds prompts a and b interleaved, chunk tokens of each per forward. */
static void run_prefill(struct twin_run *r, const int32_t *a, int na, const int32_t *b, int nb,
                        int chunk)
{
	struct backend_token batch[64];
	float *lg[2];
	for (int k = 0; k < 2; k++)
		lg[k] = malloc(2 * (size_t)r->n_vocab * sizeof(float));
	int ia = 0, ib = 0;
	while (ia < na || ib < nb) {
		for (int k = 0; k < 2; k++) {
			int n = 0, ja = ia, jb = ib;
			for (int c = 0; c < chunk; c++) { /* a, b, a, b, ... */
				if (ja < na)
					batch[n++] =
					    (struct backend_token){.session = r->s[k][0],
					                           .token = a[ja],
					                           .want_logits = ja == na - 1},
					ja++;
				if (jb < nb)
					batch[n++] =
					    (struct backend_token){.session = r->s[k][1],
					                           .token = b[jb],
					                           .want_logits = jb == nb - 1},
					jb++;
			}
			forward_ok(r->be[k], batch, (size_t)n, lg[k]);
			if (k == 1) {
				int n_want = 0;
				for (int i = 0; i < n; i++)
					n_want += batch[i].want_logits;
				if (n_want)
					r->worst =
					    fmax(r->worst, rel_diff(lg[1], lg[0],
					                            (size_t)n_want * r->n_vocab));
				ia = ja, ib = jb;
			}
		}
	}
	free(lg[0]), free(lg[1]);
}

/* n greedy steps of both sessions in one batch; the CPU's tokens are fed to
 * both backends so that a flip is counted once and does not snowball. */
static void run_decode(struct twin_run *r, int32_t next_a, int32_t next_b, int n_steps,
                       int revise_at)
{
	const struct model_hparams *hp = &r->be[0]->model->hp;
	size_t nm = (size_t)hp->n_layers * hp->n_heads;
	float *lg[2], *mass[2];
	char err[SINKD_ERR_LEN];
	for (int k = 0; k < 2; k++) {
		lg[k] = malloc(2 * (size_t)r->n_vocab * sizeof(float));
		mass[k] = calloc(2 * nm, sizeof(float)); /* sinks', then learned sinks' */
	}
	for (int step = 0; step < n_steps; step++) {
		for (int k = 0; k < 2; k++) {
			struct backend_token batch[2] = {
			    {.session = r->s[k][0],
			     .token = next_a,
			     .want_logits = true,
			     .sink_mass = mass[k],
			     .learned_sink_mass = mass[k] + nm},
			    {.session = r->s[k][1], .token = next_b, .want_logits = true},
			};
			forward_ok(r->be[k], batch, 2, lg[k]);
		}
		r->worst = fmax(r->worst, rel_diff(lg[1], lg[0], 2 * (size_t)r->n_vocab));
		for (int j = 0; j < 2; j++)
			r->token_flips += argmax(lg[0] + j * r->n_vocab, r->n_vocab) !=
			                  argmax(lg[1] + j * r->n_vocab, r->n_vocab);
		next_a = argmax(lg[0], r->n_vocab);
		next_b = argmax(lg[0] + r->n_vocab, r->n_vocab);
		if (step == revise_at)
			for (int k = 0; k < 2; k++)
				ck_assert_msg(r->be[k]->ops->session_revise(r->be[k], r->s[k][0], 3,
				                                            err, sizeof(err)) == 0,
				              "%s", err);
	}
	for (size_t i = 0; i < 2 * nm; i++)
		ck_assert_msg(fabs(mass[0][i] - mass[1][i]) <= 1e-3 * n_steps,
		              "%s mass %zu: cpu %g gpu %g", i < nm ? "sink" : "learned sink", i % nm,
		              mass[0][i], mass[1][i]);
	for (size_t i = nm; i < 2 * nm; i++)
		r->learned_mass += mass[0][i];
	for (int j = 0; j < 2; j++) {
		struct sinkcache_stats a, b;
		r->be[0]->ops->session_stats(r->be[0], r->s[0][j], &a);
		r->be[1]->ops->session_stats(r->be[1], r->s[1][j], &b);
		ck_assert_uint_eq(a.n_seen, b.n_seen);
		ck_assert_int_eq(a.n_resident, b.n_resident);
		ck_assert_int_eq(a.n_compressed, b.n_compressed);
		ck_assert_uint_eq(a.bytes_resident, b.bytes_resident);
		ck_assert_uint_eq(a.evicted_compressed, b.evicted_compressed);
		ck_assert_int_eq(a.n_anchor, b.n_anchor);
		ck_assert_uint_eq(a.anchors_promoted, b.anchors_promoted);
		ck_assert_uint_eq(a.anchors_demoted, b.anchors_demoted);
		r->anchors_promoted += b.anchors_promoted;
		r->anchors_demoted += b.anchors_demoted;
	}
	const struct cache_geometry *g = &r->geometry;
	for (int j = 0; r->traced && j < 2; j++)
		assert_traces_alike(r, j, g, 1e-4 + 1e-2 * (g->dtype != KV_DTYPE_F32));
	for (int k = 0; k < 2; k++)
		free(lg[k]), free(mass[k]);
}

/* The cpu backend on m_cpu, the gpu one on m_gpu (the same network). */
static void twin_run_open2(struct twin_run *r, const struct model *m_cpu, const struct model *m_gpu,
                           enum kv_dtype dt, const struct cache_geometry *g, bool graphs)
{
	memset(r, 0, sizeof(*r));
	r->be[0] = new_cpu(m_cpu);
	r->be[1] = new_gpu_opt(m_gpu, dt, (size_t)64 << 20, graphs);
	r->n_vocab = m_gpu->hp.n_vocab;
	r->geometry = *g;
	for (int k = 0; k < 2; k++)
		for (int j = 0; j < 2; j++)
			r->s[k][j] = open_session(r->be[k], g);
}

/* Session 0 of both backends traces its cache from now on. */
static void twin_run_trace(struct twin_run *r)
{
	char err[SINKD_ERR_LEN];
	r->traced = true;
	for (int k = 0; k < 2; k++)
		ck_assert_msg(r->be[k]->ops->session_trace_enable(r->be[k], r->s[k][0], true, err,
		                                                  sizeof(err)) == 0,
		              "%s: %s", r->be[k]->ops->name, err);
}

static void twin_run_open(struct twin_run *r, const struct model *m, enum kv_dtype dt,
                          const struct cache_geometry *g, bool graphs)
{
	twin_run_open2(r, m, m, dt, g, graphs);
}

static void twin_run_close(struct twin_run *r)
{
	for (int k = 0; k < 2; k++) {
		for (int j = 0; j < 2; j++)
			r->be[k]->ops->session_free(r->be[k], r->s[k][j]);
		backend_free(r->be[k]);
	}
}

/* ------------------------------------------------------ stories260K */

static int32_t *ids_of(const cJSON *p, const char *key, int *n)
{
	const cJSON *arr = cJSON_GetObjectItem(p, key);
	*n = cJSON_GetArraySize(arr);
	int32_t *ids = malloc((size_t)*n * sizeof(int32_t));
	for (int i = 0; i < *n; i++)
		ids[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
	return ids;
}

static struct model *load_stories(void)
{
	char path[1200];
	snprintf(path, sizeof(path), "%s/models/stories260K.gguf", shared_dir);
	return load_model(path);
}

START_TEST(test_stories_reference)
{
	struct model *m = load_stories();
	struct backend *be = new_gpu(m, KV_DTYPE_F32, (size_t)256 << 20);
	cJSON *ref = tu_load_reference();
	int n_vocab = m->hp.n_vocab;
	float *logits = malloc((size_t)n_vocab * sizeof(float));
	const cJSON *p;
	cJSON_ArrayForEach(p, cJSON_GetObjectItem(ref, "prompts"))
	{
		int np, nc;
		int32_t *ids = ids_of(p, "prompt_ids", &np),
		        *cont = ids_of(p, "greedy_continuation_ids", &nc);
		struct cache_geometry g = geometry(m, 1024, false, 8, true, KV_DTYPE_F32);
		struct backend_session *s = open_session(be, &g);
		struct backend_token batch[64];
		for (int i = 0; i < np; i++)
			batch[i] = (struct backend_token){
			    .session = s, .token = ids[i], .want_logits = i == np - 1};
		forward_ok(be, batch, (size_t)np, logits);
		const cJSON *want = cJSON_GetObjectItem(p, "last_logits");
		for (int i = 0; i < n_vocab; i++)
			ck_assert_msg(fabs(logits[i] - cJSON_GetArrayItem(want, i)->valuedouble) <=
			                  1e-4,
			              "logit %d: %g vs %g", i, logits[i],
			              cJSON_GetArrayItem(want, i)->valuedouble);
		for (int i = 0; i < SIZE(nc, 4); i++) {
			int t = argmax(logits, n_vocab);
			ck_assert_int_eq(t, cont[i]);
			batch[0] =
			    (struct backend_token){.session = s, .token = t, .want_logits = true};
			forward_ok(be, batch, 1, logits);
		}
		be->ops->session_free(be, s);
		free(ids), free(cont);
	}
	free(logits);
	cJSON_Delete(ref);
	backend_free(be);
	model_free(m);
}
END_TEST

/* prompt + continuation of reference prompt i: real text */
static int32_t *story_tokens(const cJSON *ref, int i, int *n)
{
	const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), i);
	int np, nc;
	int32_t *a = ids_of(p, "prompt_ids", &np), *b = ids_of(p, "greedy_continuation_ids", &nc);
	a = realloc(a, (size_t)(np + nc) * sizeof(int32_t));
	memcpy(a + np, b, (size_t)nc * sizeof(int32_t));
	free(b);
	*n = np + nc;
	return a;
}

/* model_path NULL: stories260K itself. */
static void stories_vs_cpu_run(const char *model_path, const struct cache_geometry *gg, double tol,
                               bool graphs, bool trace, struct twin_run *out)
{
	struct model *m = model_path ? load_model(model_path) : load_stories();
	cJSON *ref = tu_load_reference();
	int na, nb;
	int32_t *a = story_tokens(ref, 0, &na), *b = story_tokens(ref, 1, &nb);
	struct cache_geometry g = *gg;
	g.n_layers = m->hp.n_layers, g.n_kv_heads = m->hp.n_kv_heads, g.head_dim = m->hp.head_dim;
	g.rope_dim = m->hp.rope_dim, g.rope_theta = m->hp.rope_theta;
	cache_geometry_set_rope_scaling(&g, &m->hp);
	struct twin_run r;
	twin_run_open(&r, m, KV_DTYPE_F32, &g, graphs);
	if (trace)
		twin_run_trace(&r);
	run_prefill(&r, a, na, b, nb, 7);
	run_decode(&r, 1, 2, SIZE(60, 10), SIZE(20, 5));
	ck_assert_msg(r.worst <= tol, "logits differ from the cpu backend by %g (relative)",
	              r.worst);
	ck_assert_int_eq(r.token_flips, 0);
	twin_run_close(&r);
	if (out)
		*out = r;
	free(a), free(b);
	cJSON_Delete(ref);
	model_free(m);
}

static void stories_vs_cpu(const struct cache_geometry *gg, double tol, bool graphs)
{
	stories_vs_cpu_run(NULL, gg, tol, graphs, false, NULL);
}

/* stories260K with layers 0, 1 and 3 marked as the model's sliding-window
 * layers (16 tokens, their own RoPE base) beside a 4+40 global cache,
 * unquantized and int8: prompts in chunks of both sessions, decode with a
 * revision, as the CPU backend runs them (its own test checks it against
 * strategy full); learned sink logits on a sliding and a global layer;
 * then with YaRN by 4 over 64 positions turning the sliding layers too
 * (gpt-oss's rule, swa_rope_scaled). */
START_TEST(test_stories_sliding_layers_vs_cpu)
{
	static const uint8_t slides[5] = {1, 1, 0, 1, 0};
	struct model *m = load_stories();
	m->hp.swa_window = 16;
	m->hp.layer_swa = slides;
	m->hp.rope_theta_swa = 500.0;
	/* learned sink logits (as gpt-oss's, whose sliding layers have them
	 * too) on sliding layer 0 and global layer 2 */
	float *sinks = calloc((size_t)m->hp.n_heads, sizeof(float));
	for (int h = 0; h < m->hp.n_heads; h++)
		sinks[h] = 0.5f * (float)h - 1.0f;
	m->layers[0].attn_sinks = m->layers[2].attn_sinks = sinks;
	struct cache_settings set = {.strategy = CACHE_STRATEGY_SLIDING_WINDOW,
	                             .sink_keep_count = 4,
	                             .window_size = 40,
	                             .max_context_length = 512,
	                             .full_precision_recent = 8,
	                             .quant_bits = 8,
	                             .protect_sinks = true,
	                             .dtype = KV_DTYPE_F32};
	cJSON *ref = tu_load_reference();
	int na, nb;
	int32_t *a = story_tokens(ref, 0, &na), *b = story_tokens(ref, 1, &nb);
	/* int8 only on a GPU: the emulation's short run never fills a group */
	int n_plain = SIZE(2, 1);
	for (int run = 0; run <= n_plain; run++) {
		int quant = run == 1 && run < n_plain, yarn = run == n_plain;
		m->hp.rope_ext_factor = yarn ? 1.0 : 0.0;
		m->hp.rope_freq_scale = yarn ? 0.25 : 1.0;
		m->hp.rope_ctx_orig = yarn ? 64 : 0;
		m->hp.swa_rope_scaled = yarn;
		struct cache_geometry g;
		struct twin_run r;
		set.quant_enabled = quant;
		cache_geometry_build(&set, &m->hp, &g);
		twin_run_open(&r, m, KV_DTYPE_F32, &g, false);
		run_prefill(&r, a, na, b, nb, 7);
		run_decode(&r, 1, 2, SIZE(60, 10), SIZE(20, 5));
		struct sinkcache_stats st[2];
		for (int k = 0; k < 2; k++)
			r.be[k]->ops->session_stats(r.be[k], r.s[k][0], &st[k]);
		ck_assert_uint_eq(st[1].bytes_bound, st[0].bytes_bound);
		ck_assert_uint_eq(st[1].bytes_resident, st[0].bytes_resident);
		ck_assert_int_eq(st[1].n_resident_swa, 16);
		ck_assert_int_eq(st[1].n_resident, st[0].n_resident);
		printf("sliding layers (%s%s): cuda vs cpu %.3g\n", quant ? "int8" : "f32",
		       yarn ? ", YaRN on every layer" : "", r.worst);
		ck_assert_msg(r.worst <= (quant ? 1e-3 : 1e-4),
		              "logits differ from the cpu backend by %g (relative)", r.worst);
		ck_assert_int_eq(r.token_flips, 0);
		ck_assert(r.learned_mass > 1e-3);
		twin_run_close(&r);
	}
	free(a), free(b);
	cJSON_Delete(ref);
	m->hp.layer_swa = NULL;
	m->layers[0].attn_sinks = m->layers[2].attn_sinks = NULL;
	free(sinks);
	model_free(m);
}
END_TEST

/* stories260K with llama3's rope_freqs.weight (factors 1, 2, 4, 8): both
 * backends turn keys and queries by the factors and agree. */
START_TEST(test_stories_rope_freqs_vs_cpu)
{
	char path[64];
	float f[4] = {1.0f, 2.0f, 4.0f, 8.0f};
	tu_temp_file(path, sizeof(path), "sinkd-test-rope", NULL, 0);
	char src[1200];
	snprintf(src, sizeof(src), "%s/models/stories260K.gguf", shared_dir);
	tu_gguf_with(src, path, "rope_freqs.weight", f, 4, NULL, NULL);
	struct model *m = load_model(path);
	ck_assert_ptr_nonnull(m->hp.rope_factors);
	struct cache_geometry plain = geometry(m, 1024, false, 8, true, KV_DTYPE_F32);
	/* a quantized window that evicts: keys turned again by cache rank */
	struct cache_geometry int8 = geometry(m, 40, true, 8, true, KV_DTYPE_BF16);
	model_free(m);
	stories_vs_cpu_run(path, &plain, 1e-4, false, false, NULL);
	stories_vs_cpu_run(path, &int8, 1e-3, false, false, NULL);
	unlink(path);
}
END_TEST

START_TEST(test_stories_tiered_cache_vs_cpu)
{
	struct model *m = load_stories();
	struct cache_geometry plain = geometry(m, 1024, false, 8, true, KV_DTYPE_F32);
	struct cache_geometry int8 = geometry(m, 40, true, 8, true, KV_DTYPE_BF16);
	struct cache_geometry int4 = geometry(m, 36, true, 4, false, KV_DTYPE_F16);
	model_free(m);
	stories_vs_cpu(&plain, 1e-4, false);
	/* a full-precision window smaller than the prompts: every token evicts */
	struct cache_geometry small = plain;
	small.window_size = small.full_precision_recent = 24;
	stories_vs_cpu(&small, 1e-4, false);
	stories_vs_cpu(&int8, 1e-3, false);
	stories_vs_cpu(&int4, 5e-3, false);
	/* captured CUDA graphs replay the same forwards */
	stories_vs_cpu(&int8, 1e-3, true);
}
END_TEST

/* Anchors: prompts in chunks (the backend then runs one wave per forward)
 * and decode; promotions and demotions, per layer, as the CPU backend's. */
START_TEST(test_stories_anchors_vs_cpu)
{
	struct model *m = load_stories();
	struct cache_geometry g = geometry(m, 24, false, 8, true, KV_DTYPE_F32);
	model_free(m);
	g.anchor_max = 6;
	g.anchor_promote = 0.1f;
	g.anchor_demote_steps = 6;
	struct twin_run r;
	stories_vs_cpu_run(NULL, &g, 1e-4, false, false, &r);
	printf("anchors float32: %llu promoted, %llu demoted\n",
	       (unsigned long long)r.anchors_promoted, (unsigned long long)r.anchors_demoted);
	ck_assert_uint_gt(r.anchors_promoted, 0);
	ck_assert_uint_gt(r.anchors_demoted, 0);
	/* promotions out of int8 groups, bf16 rows */
	g.quant_enabled = true;
	g.full_precision_recent = 8;
	g.window_size = 40;
	g.dtype = KV_DTYPE_BF16;
	stories_vs_cpu_run(NULL, &g, 1e-3, false, false, &r);
	printf("anchors int8: %llu promoted, %llu demoted\n",
	       (unsigned long long)r.anchors_promoted, (unsigned long long)r.anchors_demoted);
	ck_assert_uint_gt(r.anchors_promoted, 0);
}
END_TEST

/* Cache traces: the cuda backend's trace of a session is the cpu backend's
 * (slots, tiers, positions, masses and their averages), over a prompt in
 * chunks, decode and a revision, with a session in the same batches that is
 * not traced; with and without anchors, float32 and int8 windows. */
START_TEST(test_stories_trace_vs_cpu)
{
	struct model *m = load_stories();
	struct cache_geometry plain = geometry(m, 24, false, 8, true, KV_DTYPE_F32);
	struct cache_geometry int8 = geometry(m, 40, true, 8, true, KV_DTYPE_F32);
	model_free(m);
	struct twin_run r;
	stories_vs_cpu_run(NULL, &plain, 1e-4, false, true, &r);
	ck_assert_uint_gt(r.trace_steps, 24);
	ck_assert(r.learned_mass == 0.0); /* no learned sink logits in this model */
	stories_vs_cpu_run(NULL, &int8, 1e-3, true, true, &r);
	struct cache_geometry anchors = plain;
	anchors.anchor_max = 6;
	anchors.anchor_promote = 0.1f;
	anchors.anchor_demote_steps = 6;
	stories_vs_cpu_run(NULL, &anchors, 1e-4, false, true, &r);
	ck_assert_uint_gt(r.anchors_promoted, 0);
	printf("trace: %llu steps traced, %llu anchors promoted\n",
	       (unsigned long long)r.trace_steps, (unsigned long long)r.anchors_promoted);
}
END_TEST

/* Learned sink logits (gpt-oss's attn_sinks) given to stories260K's
 * layers 1 and 3: the cuda backend's logits, kept sinks' masses and trace
 * (with the learned sink's mass per layer) are the cpu backend's, over an
 * int8 window with anchors, prompts in chunks, decode and a revision. */
START_TEST(test_stories_learned_sinks_vs_cpu)
{
	struct model *m = load_stories();
	const struct model_hparams *hp = &m->hp;
	float *sinks = malloc((size_t)hp->n_layers * hp->n_heads * sizeof(float));
	for (int l = 0; l < hp->n_layers; l++) {
		for (int h = 0; h < hp->n_heads; h++)
			sinks[l * hp->n_heads + h] = (float)((l * 7 + h * 3) % 5) - 1.0f;
		if (l % 2)
			m->layers[l].attn_sinks = sinks + (size_t)l * hp->n_heads;
	}
	struct cache_geometry g = geometry(m, 40, true, 8, true, KV_DTYPE_F32);
	g.anchor_max = 4;
	g.anchor_promote = 0.1f;
	g.anchor_demote_steps = 6;
	cJSON *ref = tu_load_reference();
	int na, nb;
	int32_t *a = story_tokens(ref, 0, &na), *b = story_tokens(ref, 1, &nb);
	struct twin_run r;
	twin_run_open(&r, m, KV_DTYPE_F32, &g, false);
	twin_run_trace(&r);
	run_prefill(&r, a, na, b, nb, 7);
	run_decode(&r, 1, 2, SIZE(40, 10), SIZE(20, 5));
	ck_assert_msg(r.worst <= 1e-3, "logits differ from the cpu backend by %g (relative)",
	              r.worst);
	ck_assert_int_eq(r.token_flips, 0);
	ck_assert(r.learned_mass > 1e-3);
	struct cache_trace_step *t = trace_of(r.be[1], r.s[1][0], &g);
	for (int l = 0; l < t->n_layers; l++) {
		ck_assert_int_eq(t->layers[l].learned_sink, l % 2);
		ck_assert(l % 2 ? t->layers[l].learned_sink_mean > 1e-3
		                : t->layers[l].learned_sink_max == 0.0f);
	}
	cache_trace_step_free(t);
	twin_run_close(&r);
	for (int l = 0; l < hp->n_layers; l++)
		m->layers[l].attn_sinks = NULL;
	free(sinks), free(a), free(b);
	cJSON_Delete(ref);
	model_free(m);
}
END_TEST

/* ---------------------------------------------------- synthetic model */

static struct model *make_synthetic(const char *type, char *path, size_t path_len)
{
	char cmd[2048];
	snprintf(path, path_len, "/tmp/sinkd-cuda-test-%d-%s.gguf", (int)getpid(), type);
	snprintf(cmd, sizeof(cmd),
	         "'%s' --out '%s' --dim 256 --layers 3 --heads 8 --kv-heads 2 --ffn 512 "
	         "--vocab-size 1000 --type %s --seed 11 >/dev/null",
	         mkmodel_path, path, type);
	ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
	return load_model(path);
}

static void synthetic_vs_cpu(const char *type)
{
	char path[512];
	struct model *m = make_synthetic(type, path, sizeof(path));
	int32_t a[40], b[23];
	for (int i = 0; i < 40; i++)
		a[i] = (int32_t)((i * 37 + 5) % m->hp.n_vocab);
	for (int i = 0; i < 23; i++)
		b[i] = (int32_t)((i * 101 + 9) % m->hp.n_vocab);
	struct cache_geometry g = geometry(m, 48, true, 8, true, KV_DTYPE_BF16);
	/* fp32 on the device: the CPU's greedy tokens */
	struct twin_run r;
	twin_run_open(&r, m, KV_DTYPE_F32, &g, false);
	run_prefill(&r, a, 40, b, 23, 16);
	run_decode(&r, 3, 4, SIZE(40, 6), 3);
	ck_assert_msg(r.worst <= 1e-3, "%s fp32: logits differ by %g (relative)", type, r.worst);
	ck_assert_int_eq(r.token_flips, 0);
	twin_run_close(&r);
	/* bf16 on the device: close, not bit-alike (activations rounded to bf16) */
	twin_run_open(&r, m, KV_DTYPE_BF16, &g, true);
	run_prefill(&r, a, 40, b, 23, 16);
	run_decode(&r, 3, 4, SIZE(20, 4), 2);
	ck_assert_msg(r.worst <= 5e-2, "%s bf16: logits differ by %g (relative)", type, r.worst);
	twin_run_close(&r);
	model_free(m);
	unlink(path);
}

START_TEST(test_synthetic_bf16_and_q8_vs_cpu)
{
	synthetic_vs_cpu("bf16");
	if (SIZE(1, 0))
		synthetic_vs_cpu("q8_0");
}
END_TEST

/* Every matrix of m widened in memory to F32 by dequant.c (the host's
 * reading of the blocks); the buffers go to *owned (n_matrices of them). */
static void widen_to_f32(struct model *m, float **owned, int *n_owned)
{
	struct weight_matrix *ws[2 + 7 * 64];
	int n = 0;
	ws[n++] = &m->token_embd;
	bool tied = m->output.data == m->token_embd.data;
	if (!tied)
		ws[n++] = &m->output;
	ck_assert_int_le(m->hp.n_layers, 64);
	for (int l = 0; l < m->hp.n_layers; l++) {
		struct model_layer *L = &m->layers[l];
		struct weight_matrix *lw[] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
		                              &L->w_gate, &L->w_up, &L->w_down};
		for (int i = 0; i < 7; i++)
			ws[n++] = lw[i];
	}
	for (int i = 0; i < n; i++)
		owned[(*n_owned)++] = widen_matrix(ws[i]);
	if (tied)
		m->output = m->token_embd;
}

/* A small synthetic model in each block type (q5_1 reaches the device as the
 * F16 the loader widens it to): the device dequantizes the blocks as they are
 * stored, and its fp32 logits match the cpu backend's on the same weights
 * widened on the host; the cpu backend on the blocks themselves (int8
 * activations for the qdot types) stays within bf16 tolerance. */
START_TEST(test_synthetic_block_types_vs_cpu)
{
	const char *types[] = {"q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q5_1"};
	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
		char path[512], cmd[2048];
		snprintf(path, sizeof(path), "/tmp/sinkd-cuda-test-%d-small-%s.gguf", (int)getpid(),
		         types[ti]);
		snprintf(cmd, sizeof(cmd),
		         "'%s' --out '%s' --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 256 "
		         "--vocab-size 300 --type %s --seed 5 >/dev/null",
		         mkmodel_path, path, types[ti]);
		ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
		struct model *mq = load_model(path), *mf = load_model(path);
		float *owned[2 + 7 * 64];
		int n_owned = 0;
		widen_to_f32(mf, owned, &n_owned);
		int32_t a[24], b[13];
		for (int i = 0; i < 24; i++)
			a[i] = (int32_t)((i * 37 + 5) % mq->hp.n_vocab);
		for (int i = 0; i < 13; i++)
			b[i] = (int32_t)((i * 101 + 9) % mq->hp.n_vocab);
		struct cache_geometry g = geometry(mq, 48, true, 8, true, KV_DTYPE_BF16);
		struct twin_run r;
		twin_run_open2(&r, mf, mq, KV_DTYPE_F32, &g, false);
		run_prefill(&r, a, 24, b, 13, 8);
		run_decode(&r, 3, 4, SIZE(20, 4), 2);
		ck_assert_msg(r.worst <= 1e-3, "%s fp32: logits differ by %g (relative)", types[ti],
		              r.worst);
		ck_assert_int_eq(r.token_flips, 0);
		twin_run_close(&r);
		twin_run_open2(&r, mq, mq, KV_DTYPE_F32, &g, false);
		run_prefill(&r, a, 24, b, 13, 8);
		run_decode(&r, 3, 4, SIZE(20, 4), 2);
		ck_assert_msg(r.worst <= 5e-2, "%s vs the cpu's block kernels: logits differ by %g",
		              types[ti], r.worst);
		twin_run_close(&r);
		model_free(mq);
		model_free(mf);
		for (int i = 0; i < n_owned; i++)
			free(owned[i]);
		unlink(path);
	}
}
END_TEST

/* qwen2's differences: rotary halves (neox) and Q/K/V biases, on the
 * synthetic model with biases added in memory. */
START_TEST(test_qwen2_style_neox_and_bias)
{
	char path[512];
	struct model *m = make_synthetic("bf16", path, sizeof(path));
	m->hp.arch = model_arch_find("qwen2");
	int L = m->hp.n_layers, qd = m->hp.n_heads * m->hp.head_dim;
	int kvd = m->hp.n_kv_heads * m->hp.head_dim;
	float *bias = malloc((size_t)L * (qd + 2 * kvd) * sizeof(float));
	for (int i = 0; i < L * (qd + 2 * kvd); i++)
		bias[i] = 0.05f * (float)((i * 37) % 19 - 9);
	for (int l = 0; l < L; l++) {
		float *b = bias + (size_t)l * (qd + 2 * kvd);
		m->layers[l].bq = b;
		m->layers[l].bk = b + qd;
		m->layers[l].bv = b + qd + kvd;
	}
	int32_t a[30], b[17];
	for (int i = 0; i < 30; i++)
		a[i] = (int32_t)((i * 53 + 1) % m->hp.n_vocab);
	for (int i = 0; i < 17; i++)
		b[i] = (int32_t)((i * 29 + 7) % m->hp.n_vocab);
	struct cache_geometry g = geometry(m, 40, true, 8, true, KV_DTYPE_F32);
	ck_assert(g.rope_neox);
	struct twin_run r;
	twin_run_open(&r, m, KV_DTYPE_F32, &g, false);
	run_prefill(&r, a, 30, b, 17, 8);
	run_decode(&r, 5, 6, SIZE(30, 6), 3);
	ck_assert_msg(r.worst <= 1e-3, "qwen2-style: logits differ by %g (relative)", r.worst);
	ck_assert_int_eq(r.token_flips, 0);
	twin_run_close(&r);
	model_free(m);
	free(bias);
	unlink(path);
}
END_TEST

/* The gemma2 and gemma3 layer shape (GeGLU, post-norms, embedding scale,
 * soft-caps, QK-norm, heads wider than dim / n_heads) on both backends:
 * the same logits and greedy tokens (F32 weights and keys).  Prompts and
 * windows stay short of the sliding window, so the sliding mask (another
 * change) does not enter. */
static void gemma_vs_cpu(const struct gemma_spec *sp, const char *what)
{
	char path[64];
	tu_temp_file(path, sizeof(path), "sinkd-gemma-cuda", NULL, 0);
	gemma_model_free(gemma_write(sp, path));
	struct model *m = load_model(path);
	int32_t a[30], b[17];
	for (int i = 0; i < 30; i++)
		a[i] = (int32_t)((i * 53 + 1) % m->hp.n_vocab);
	for (int i = 0; i < 17; i++)
		b[i] = (int32_t)((i * 29 + 7) % m->hp.n_vocab);
	struct cache_geometry g = geometry(m, 64, false, 8, true, KV_DTYPE_F32);
	struct twin_run r;
	twin_run_open(&r, m, KV_DTYPE_F32, &g, false);
	run_prefill(&r, a, 30, b, 17, 8);
	run_decode(&r, 5, 6, SIZE(30, 6), 3);
	ck_assert_msg(r.worst <= 1e-4, "%s: logits differ by %g (relative)", what, r.worst);
	ck_assert_int_eq(r.token_flips, 0);
	twin_run_close(&r);
	model_free(m);
	unlink(path);
}

START_TEST(test_gemma_rows_vs_cpu)
{
	struct gemma_spec sp = gemma_spec_default("gemma2");
	sp.swa_pattern = 1; /* no layer slides: both backends' caches stay uniform */
	sp.attn_softcap = 2.0f; /* small caps, so that they bite */
	sp.final_softcap = 3.0f;
	gemma_vs_cpu(&sp, "gemma2");
	sp = gemma_spec_default("gemma3");
	sp.rope_theta = 1e6f;
	sp.rope_factor = 8.0f;
	gemma_vs_cpu(&sp, "gemma3");
}
END_TEST

/* A synthetic F32 model of sinkd-mkmodel's shape options `args`. */
static struct model *make_shaped(const char *args, char *path, size_t path_len)
{
	char cmd[2048];
	snprintf(path, path_len, "/tmp/sinkd-cuda-test-%d-shaped.gguf", (int)getpid());
	snprintf(cmd, sizeof(cmd), "'%s' --out '%s' %s --seed 13 >/dev/null", mkmodel_path, path,
	         args);
	ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
	return load_model(path);
}

/* fp32 on the device: the cpu backend's logits and greedy tokens. */
static void shaped_vs_cpu(const struct model *m, const char *what)
{
	int32_t a[26], b[15];
	for (int i = 0; i < 26; i++)
		a[i] = (int32_t)((i * 41 + 3) % m->hp.n_vocab);
	for (int i = 0; i < 15; i++)
		b[i] = (int32_t)((i * 23 + 11) % m->hp.n_vocab);
	struct cache_geometry g = geometry(m, 40, true, 8, true, KV_DTYPE_F32);
	struct twin_run r;
	twin_run_open(&r, m, KV_DTYPE_F32, &g, false);
	run_prefill(&r, a, 26, b, 15, 8);
	run_decode(&r, 3, 5, SIZE(24, 6), 3);
	ck_assert_msg(r.worst <= 1e-3, "%s: logits differ by %g (relative)", what, r.worst);
	ck_assert_int_eq(r.token_flips, 0);
	twin_run_close(&r);
}

/* Heads as wide as attention.key_length, not embedding_length / head_count
 * (Mistral Nemo's shape): 4 heads of 32 against a width of 64. */
START_TEST(test_key_length_heads_vs_cpu)
{
	char path[512];
	struct model *m = make_shaped("--dim 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 "
	                              "--ffn 128 --vocab-size 300",
	                              path, sizeof(path));
	ck_assert_int_eq(m->hp.head_dim, 32);
	shaped_vs_cpu(m, "llama, heads of 32 against 64 / 4");
	model_free(m);
	unlink(path);
}
END_TEST

/* qwen3: QK-norm (norms around 1 from sinkd-mkmodel), NeoX RoPE, no
 * biases, heads of 32 against 64 / 4. */
START_TEST(test_qwen3_vs_cpu)
{
	char path[512];
	struct model *m = make_shaped("--arch qwen3 --dim 64 --layers 2 --heads 4 --kv-heads 2 "
	                              "--head-dim 32 --ffn 128 --vocab-size 300",
	                              path, sizeof(path));
	ck_assert_ptr_nonnull(m->layers[1].k_norm);
	shaped_vs_cpu(m, "qwen3");
	model_free(m);
	unlink(path);
}
END_TEST

START_TEST(test_arena_full_is_an_error)
{
	struct model *m = load_stories();
	struct backend *be = new_gpu(m, KV_DTYPE_F32, (size_t)1 << 20);
	struct cache_geometry big = geometry(m, 20000, false, 8, true, KV_DTYPE_F32);
	struct cache_geometry small = geometry(m, 64, false, 8, true, KV_DTYPE_F32);
	struct backend_session *s = NULL, *t = NULL;
	char err[SINKD_ERR_LEN];
	ck_assert_uint_gt(backend_cuda_session_bytes(&big), backend_cuda_cache_bytes(be));
	ck_assert_int_eq(be->ops->session_new(be, &big, &s, err, sizeof(err)), -ENOSPC);
	ck_assert_ptr_null(s);
	ck_assert_msg(strstr(err, "KV arena") != NULL, "%s", err);
	/* small sessions until full, then free one and go on */
	struct backend_session *all[4096];
	int n = 0;
	while (n < 4096 && be->ops->session_new(be, &small, &all[n], err, sizeof(err)) == 0)
		n++;
	ck_assert_int_gt(n, 1);
	ck_assert_int_lt(n, 4096);
	be->ops->session_free(be, all[--n]);
	t = open_session(be, &small);
	float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
	struct backend_token tok = {.session = t, .token = 1, .want_logits = true};
	forward_ok(be, &tok, 1, logits);
	ck_assert(isfinite(logits[0]));
	be->ops->session_free(be, t);
	for (int i = 0; i < n; i++)
		be->ops->session_free(be, all[i]);
	free(logits);
	backend_free(be);
	model_free(m);
}
END_TEST

/* ------------------------------------------------------ snapshots */

/* Feeds ids to one session in forwards of chunk tokens; logits (n_vocab)
 * of the last token, and of each chunk's last token in all (may be NULL:
 * (ceil(n / chunk), n_vocab)). */
static void feed(struct backend *be, struct backend_session *s, const int32_t *ids, int n,
                 int chunk, float *logits, float *all)
{
	struct backend_token batch[64];
	int n_vocab = be->model->hp.n_vocab, k = 0;
	for (int i = 0; i < n; i += chunk, k++) {
		int m = n - i < chunk ? n - i : chunk;
		for (int j = 0; j < m; j++)
			batch[j] = (struct backend_token){
			    .session = s, .token = ids[i + j], .want_logits = j == m - 1};
		forward_ok(be, batch, (size_t)m, logits);
		if (all)
			memcpy(all + (size_t)k * n_vocab, logits, (size_t)n_vocab * sizeof(float));
	}
}

static void export_ok(struct backend *be, struct backend_session *s, struct kv_image *im)
{
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->session_export(be, s, im, err, sizeof(err)) == 0, "%s: %s",
	              be->ops->name, err);
}

static struct backend_session *imported(struct backend *be, const struct cache_geometry *g,
                                        const struct kv_image *im)
{
	char err[SINKD_ERR_LEN];
	struct backend_session *s = open_session(be, g);
	ck_assert_msg(be->ops->session_import(be, s, im, err, sizeof(err)) == 0, "%s: %s",
	              be->ops->name, err);
	return s;
}

static void assert_counts_equal(const struct tier_counts *a, const struct tier_counts *b)
{
	ck_assert_uint_eq(a->n_seen, b->n_seen);
	ck_assert_uint_eq(a->evicted, b->evicted);
	ck_assert_uint_eq(a->moved, b->moved);
	ck_assert_int_eq(a->n_sink, b->n_sink);
	ck_assert_int_eq(a->n_groups, b->n_groups);
	ck_assert_int_eq(a->grp_dropped, b->grp_dropped);
	ck_assert_int_eq(a->n_stage, b->n_stage);
	ck_assert_int_eq(a->n_hot, b->n_hot);
}

static void assert_images_identical(const struct kv_image *a, const struct kv_image *b)
{
	assert_counts_equal(&a->n, &b->n);
	ck_assert_uint_eq(a->bytes, b->bytes);
	ck_assert_msg(memcmp(a->data, b->data, a->bytes) == 0, "image bytes differ");
}

/* What a value y of the cpu image may differ by in the cuda one: 1e-3
 * absolute and relative plus two units in the last place of the dtype (cpu
 * and device keys come from different GEMMs and may round apart). */
static double fp_allowed(enum kv_dtype dt, double y)
{
	double ulp = dt == KV_DTYPE_F32 ? 0.0 : dt == KV_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
	return 1e-3 + (1e-3 + 2 * ulp) * fabs(y);
}

/* Largest |a - b| / allowed over a run of n full-precision values. */
static double fp_run_error(enum kv_dtype dt, const unsigned char *a, const unsigned char *b,
                           size_t n)
{
	double worst = 0.0;
	for (size_t i = 0; i < n; i++) {
		double x = twin_dt_load(a, (int)dt, i), y = twin_dt_load(b, (int)dt, i);
		worst = fmax(worst, fabs(x - y) / fp_allowed(dt, y));
	}
	return worst;
}

/* Quantized values were quantized from such rows: one quantization step
 * of either side more. */
struct q_run {
	enum kv_dtype dt;
	int d, bits;
	size_t code_row;
};

static double q_error(const struct q_run *q, double x, double y, float sx, float sy)
{
	return fabs(x - y) / (fp_allowed(q->dt, y) + fabs(sx) + fabs(sy));
}

/* Value j of row r of codes, dequantized with scale, min. */
static double dequant(const struct q_run *q, const unsigned char *codes, int r, int j, float scale,
                      float min)
{
	return kvq_code_at(codes + (size_t)r * q->code_row, j, q->bits) * (double)scale + min;
}

/* n_rows rows of codes with per-row params p (n_rows, 2) f32 scale,min. */
static double q_rows_error(const struct q_run *q, const unsigned char *ca, const unsigned char *cb,
                           const float *pa, const float *pb, int n_rows)
{
	double worst = 0.0;
	for (int r = 0; r < n_rows; r++)
		for (int j = 0; j < q->d; j++)
			worst =
			    fmax(worst, q_error(q, dequant(q, ca, r, j, pa[2 * r], pa[2 * r + 1]),
			                        dequant(q, cb, r, j, pb[2 * r], pb[2 * r + 1]),
			                        pa[2 * r], pb[2 * r]));
	return worst;
}

/* Group keys: params p (2, d) per-channel scale (row 0), min (row 1). */
static double q_channels_error(const struct q_run *q, const unsigned char *ca,
                               const unsigned char *cb, const float *pa, const float *pb,
                               int n_rows)
{
	double worst = 0.0;
	int d = q->d;
	for (int r = 0; r < n_rows; r++)
		for (int j = 0; j < d; j++)
			worst = fmax(worst,
			             q_error(q, dequant(q, ca, r, j, pa[j], pa[d + j]),
			                     dequant(q, cb, r, j, pb[j], pb[d + j]), pa[j], pb[j]));
	return worst;
}

/* Images of the same tokens from the cpu and the cuda backend: the same
 * counts, and every value within fp_run_error / q_error's allowance. */
static void assert_images_close(const struct cache_geometry *g, const struct kv_image *a,
                                const struct kv_image *b)
{
	struct kv_image_layout lo;
	char err[SINKD_ERR_LEN];
	assert_counts_equal(&a->n, &b->n);
	ck_assert_uint_eq(a->bytes, b->bytes);
	ck_assert_msg(kv_image_layout_of(g, &a->n, &lo, err, sizeof(err)) == 0, "%s", err);
	int n_kv = g->n_kv_heads, d = g->head_dim;
	int ns = a->n.n_sink, nfp = a->n.n_stage + a->n.n_hot, G = lo.group;
	struct q_run q = {.dt = g->dtype,
	                  .d = d,
	                  .bits = g->quant_enabled ? g->quant_bits : 8,
	                  .code_row = lo.code_row};
	double worst = 0.0;
	for (int l = 0; l < g->n_layers; l++) {
		const unsigned char *x = a->data + (size_t)l * lo.layer_bytes;
		const unsigned char *y = b->data + (size_t)l * lo.layer_bytes;
#define AT(p, off) ((p) + (off))
#define FAT(p, off) ((const float *)(const void *)((p) + (off)))
		if (lo.sink_quant)
			for (int h = 0; h < n_kv; h++)
				for (int kv = 0; kv < 2; kv++) {
					size_t c = (kv ? lo.off_sink_v : lo.off_sink_k) +
					           (size_t)h * ns * lo.code_row;
					size_t p = (kv ? lo.off_sink_vp : lo.off_sink_kp) +
					           (size_t)h * ns * 2 * sizeof(float);
					worst = fmax(worst, q_rows_error(&q, AT(x, c), AT(y, c),
					                                 FAT(x, p), FAT(y, p), ns));
				}
		else
			worst = fmax(worst,
			             fp_run_error(g->dtype, AT(x, lo.off_sink_k),
			                          AT(y, lo.off_sink_k), 2 * (size_t)n_kv * ns * d));
		for (int i = 0; i < a->n.n_groups; i++) {
			size_t gb = lo.off_groups + (size_t)i * lo.group_bytes;
			for (int h = 0; h < n_kv; h++) {
				size_t c = (size_t)h * G * lo.code_row;
				size_t kp = lo.grp_off_kp + (size_t)h * 2 * d * sizeof(float);
				size_t vp = lo.grp_off_vp + (size_t)h * G * 2 * sizeof(float);
				worst = fmax(worst,
				             q_channels_error(&q, AT(x, gb + lo.grp_off_k + c),
				                              AT(y, gb + lo.grp_off_k + c),
				                              FAT(x, gb + kp), FAT(y, gb + kp), G));
				worst =
				    fmax(worst, q_rows_error(&q, AT(x, gb + lo.grp_off_v + c),
				                             AT(y, gb + lo.grp_off_v + c),
				                             FAT(x, gb + vp), FAT(y, gb + vp), G));
			}
		}
		worst = fmax(worst, fp_run_error(g->dtype, AT(x, lo.off_fp_k), AT(y, lo.off_fp_k),
		                                 2 * (size_t)n_kv * nfp * d));
#undef AT
#undef FAT
	}
	ck_assert_msg(worst <= 1.0, "cpu and cuda images differ (%.2f x allowance)", worst);
}

/* A stream of stories260K tokens, the same for every backend. */
static int32_t *snap_tokens(int n, int n_vocab)
{
	int32_t *ids = malloc((size_t)n * sizeof(int32_t));
	for (int i = 0; i < n; i++)
		ids[i] = (int32_t)((i * 131 + 7 + i / 5 * 3) % n_vocab);
	return ids;
}

/* The same n tokens through the cpu and the cuda backend (a revision of 3
 * after revise_at when >= 0): their images agree; the cuda image imported
 * into a fresh cuda session and a fresh cpu one, and the cpu image into a
 * fresh cuda one, all go on like the originals over the next tokens (with
 * a revision): cuda from cuda bit for bit, across backends within tol. */
static void snapshot_case(const struct model *m, const struct cache_geometry *g, int n,
                          int revise_at, double tol, struct tier_counts *seen)
{
	struct backend *cpu = new_cpu(m), *gpu = new_gpu(m, KV_DTYPE_F32, (size_t)64 << 20);
	int n_vocab = m->hp.n_vocab, n_more = 13, chunk = 5,
	    n_chunks = (n_more + chunk - 1) / chunk;
	int32_t *ids = snap_tokens(n + 2 * n_more, n_vocab);
	float *lg = malloc((size_t)n_vocab * sizeof(float));
	char err[SINKD_ERR_LEN];
	struct backend_session *sc = open_session(cpu, g), *sg = open_session(gpu, g);
	int first = revise_at >= 0 ? revise_at : n;
	feed(cpu, sc, ids, first, 7, lg, NULL);
	feed(gpu, sg, ids, first, 7, lg, NULL);
	if (revise_at >= 0) {
		ck_assert_msg(cpu->ops->session_revise(cpu, sc, 3, err, sizeof(err)) == 0, "%s",
		              err);
		ck_assert_msg(gpu->ops->session_revise(gpu, sg, 3, err, sizeof(err)) == 0, "%s",
		              err);
		feed(cpu, sc, ids + first, n - first, 7, lg, NULL);
		feed(gpu, sg, ids + first, n - first, 7, lg, NULL);
	}
	struct kv_image ic, ig;
	export_ok(cpu, sc, &ic);
	export_ok(gpu, sg, &ig);
	if (cache_geometry_per_layer(g)) { /* sliding layers: the logits below judge the rows */
		assert_counts_equal(&ic.n, &ig.n);
		assert_counts_equal(&ic.n_swa, &ig.n_swa);
		ck_assert_uint_eq(ic.bytes, ig.bytes);
	} else {
		assert_images_close(g, &ic, &ig);
	}
	*seen = ig.n;
	struct backend_session *sg2 = imported(gpu, g, &ig), *sc2 = imported(cpu, g, &ig);
	struct backend_session *sg3 = imported(gpu, g, &ic);
	/* next tokens, a revision, more tokens: logits of every chunk */
	struct backend_session *all[5] = {sc, sg, sg2, sc2, sg3};
	struct backend *bes[5] = {cpu, gpu, gpu, cpu, gpu};
	float *out[5];
	for (int k = 0; k < 5; k++) {
		out[k] = malloc(2 * (size_t)n_chunks * n_vocab * sizeof(float));
		feed(bes[k], all[k], ids + n, n_more, chunk, lg, out[k]);
		ck_assert_msg(bes[k]->ops->session_revise(bes[k], all[k], 2, err, sizeof(err)) == 0,
		              "%s", err);
		feed(bes[k], all[k], ids + n + n_more, n_more, chunk, lg,
		     out[k] + (size_t)n_chunks * n_vocab);
	}
	size_t n_out = 2 * (size_t)n_chunks * n_vocab;
	ck_assert_msg(memcmp(out[1], out[2], n_out * sizeof(float)) == 0,
	              "cuda session imported from cuda: logits not bit-identical");
	ck_assert_msg(rel_diff(out[0], out[1], n_out) <= tol, "cpu vs cuda: %g",
	              rel_diff(out[0], out[1], n_out));
	ck_assert_msg(rel_diff(out[3], out[1], n_out) <= tol, "cpu from cuda image: %g",
	              rel_diff(out[3], out[1], n_out));
	ck_assert_msg(rel_diff(out[4], out[0], n_out) <= tol, "cuda from cpu image: %g",
	              rel_diff(out[4], out[0], n_out));
	struct kv_image a, b;
	export_ok(gpu, sg, &a);
	export_ok(gpu, sg2, &b);
	assert_images_identical(&a, &b);
	kv_image_free(&a), kv_image_free(&b);
	for (int k = 0; k < 5; k++) {
		bes[k]->ops->session_free(bes[k], all[k]);
		free(out[k]);
	}
	kv_image_free(&ic), kv_image_free(&ig);
	free(ids), free(lg);
	backend_free(cpu), backend_free(gpu);
}

START_TEST(test_snapshot_float_and_int8)
{
	struct model *m = load_stories();
	struct tier_counts n;
	/* full precision, window smaller than the stream: the ring wraps */
	struct cache_geometry g = geometry(m, 48, false, 8, true, KV_DTYPE_F32);
	snapshot_case(m, &g, 90, -1, 1e-4, &n);
	ck_assert_uint_gt(n.evicted, 0);
	ck_assert_int_eq(n.n_hot, 48);
	/* int8 groups of 24 (two slots), groups evicted, mid-group at export */
	g = geometry(m, 56, true, 8, true, KV_DTYPE_BF16);
	snapshot_case(m, &g, 120, 70, 1e-3, &n);
	ck_assert_int_gt(n.n_groups, 0);
	ck_assert_int_gt(n.grp_dropped, 0);
	ck_assert_uint_gt(n.evicted, 0);
	model_free(m);
}
END_TEST

/* stories260K with layers 0, 1 and 3 sliding over 16 tokens beside a 4+44
 * global cache: a snapshot moves between the backends either way, its
 * sliding layers with their own counts. */
START_TEST(test_snapshot_sliding_layers)
{
	static const uint8_t slides[5] = {1, 1, 0, 1, 0};
	struct model *m = load_stories();
	m->hp.swa_window = 16;
	m->hp.layer_swa = slides;
	struct cache_geometry g = geometry(m, 44, false, 8, true, KV_DTYPE_F32);
	cache_geometry_set_model_layers(&g, &m->hp);
	struct tier_counts n;
	snapshot_case(m, &g, 70, 40, 1e-4, &n);
	ck_assert_uint_gt(n.evicted, 0);
	m->hp.layer_swa = NULL;
	model_free(m);
}
END_TEST

START_TEST(test_snapshot_int4_sinks_and_full)
{
	struct model *m = load_stories();
	struct tier_counts n;
	/* int4, quantized sinks, fp16 rows */
	struct cache_geometry g = geometry(m, 36, true, 4, false, KV_DTYPE_F16);
	snapshot_case(m, &g, 75, -1, 5e-3, &n);
	ck_assert_int_gt(n.n_groups, 0);
	ck_assert_int_gt(n.n_stage, 0);
	/* strategy full: nothing evicted, several groups */
	g = geometry(m, 0, true, 8, true, KV_DTYPE_F32);
	g.strategy = CACHE_STRATEGY_FULL;
	g.max_context_length = 110;
	g.full_precision_recent = 16; /* 90 compressed: three groups of 30 */
	snapshot_case(m, &g, 85, 40, 1e-3, &n);
	ck_assert_int_ge(n.n_groups, 2);
	ck_assert_uint_eq(n.evicted, 0);
	model_free(m);
}
END_TEST

/* Images whose counts the session's geometry cannot hold are refused with
 * -EINVAL and a message naming the count; the session stays empty and
 * usable, and a fitting image then imports as usual. */
START_TEST(test_snapshot_import_refused)
{
	struct model *m = load_stories();
	struct backend *be = new_gpu(m, KV_DTYPE_F32, (size_t)64 << 20);
	struct cache_geometry wide = geometry(m, 200, false, 8, true, KV_DTYPE_F32);
	struct cache_geometry narrow = geometry(m, 24, false, 8, true, KV_DTYPE_F32);
	int32_t *ids = snap_tokens(40, m->hp.n_vocab);
	float *lg = malloc((size_t)m->hp.n_vocab * sizeof(float));
	float *lg2 = malloc((size_t)m->hp.n_vocab * sizeof(float));
	char err[SINKD_ERR_LEN];
	struct backend_session *src = open_session(be, &narrow), *big = open_session(be, &wide);
	feed(be, src, ids, 30, 7, lg, NULL);
	feed(be, big, ids, 30, 7, lg, NULL);
	struct kv_image im, wim;
	export_ok(be, src, &im);
	export_ok(be, big, &wim);
	struct backend_session *s = open_session(be, &narrow);
	/* 26 window tokens into a window of 24 */
	ck_assert_int_eq(be->ops->session_import(be, s, &wim, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "n_hot: 26") != NULL, "%s", err);
	struct kv_image bad = im;
	bad.n.n_sink = 5;
	ck_assert_int_eq(be->ops->session_import(be, s, &bad, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "n_sink") != NULL, "%s", err);
	bad = im;
	bad.n.n_stage = 1; /* no staging tier without quantization */
	ck_assert_int_eq(be->ops->session_import(be, s, &bad, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "n_stage") != NULL, "%s", err);
	bad = im;
	bad.bytes--;
	ck_assert_int_eq(be->ops->session_import(be, s, &bad, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "bytes") != NULL, "%s", err);
	struct sinkcache_stats st;
	be->ops->session_stats(be, s, &st);
	ck_assert_uint_eq(st.n_seen, 0);
	ck_assert_int_eq(st.n_resident, 0);
	/* untouched: it imports the fitting image and goes on as the source */
	ck_assert_msg(be->ops->session_import(be, s, &im, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(be->ops->session_import(be, s, &im, err, sizeof(err)), -EBUSY);
	feed(be, src, ids + 30, 10, 4, lg, NULL);
	feed(be, s, ids + 30, 10, 4, lg2, NULL);
	ck_assert(memcmp(lg, lg2, (size_t)m->hp.n_vocab * sizeof(float)) == 0);
	kv_image_free(&im), kv_image_free(&wim);
	be->ops->session_free(be, s);
	be->ops->session_free(be, src);
	be->ops->session_free(be, big);
	free(ids), free(lg), free(lg2);
	backend_free(be);
	model_free(m);
}
END_TEST

int main(int argc, char **argv)
{
	if (cuda_device_count() == 0) {
		printf("no CUDA device: skipped\n");
		return 77;
	}
	const char *shared = getenv("SINKD_SHARED");
	if (!shared || argc < 2) {
		fprintf(stderr, "usage: SINKD_SHARED=dir %s path/to/sinkd-mkmodel\n", argv[0]);
		return 1;
	}
	snprintf(shared_dir, sizeof(shared_dir), "%s", shared);
	mkmodel_path = argv[1];
	Suite *s = suite_create("cuda-backend");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_stories_reference);
	tcase_add_test(tc, test_stories_tiered_cache_vs_cpu);
	tcase_add_test(tc, test_stories_rope_freqs_vs_cpu);
	tcase_add_test(tc, test_stories_sliding_layers_vs_cpu);
	tcase_add_test(tc, test_stories_anchors_vs_cpu);
	tcase_add_test(tc, test_stories_trace_vs_cpu);
	tcase_add_test(tc, test_stories_learned_sinks_vs_cpu);
	tcase_add_test(tc, test_synthetic_bf16_and_q8_vs_cpu);
	tcase_add_test(tc, test_synthetic_block_types_vs_cpu);
	tcase_add_test(tc, test_qwen2_style_neox_and_bias);
	tcase_add_test(tc, test_gemma_rows_vs_cpu);
	tcase_add_test(tc, test_key_length_heads_vs_cpu);
	tcase_add_test(tc, test_qwen3_vs_cpu);
	tcase_add_test(tc, test_arena_full_is_an_error);
	tcase_add_test(tc, test_snapshot_float_and_int8);
	tcase_add_test(tc, test_snapshot_int4_sinks_and_full);
	tcase_add_test(tc, test_snapshot_sliding_layers);
	tcase_add_test(tc, test_snapshot_import_refused);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
