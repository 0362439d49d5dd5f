/* Every CUDA kernel against its plain-C twin (cuda/twins.c), llm.c style:
 * several sizes, dtypes and split lengths, |gpu - cpu| <= tol + eps*|cpu|.
 * The KV cache kernels run a few hundred tokens of several sessions through
 * append / flush / attention (evictions, int8 and int4 groups, quantized
 * sinks) and must leave the device cache byte-identical to the twin's and
 * attend within tolerance.  The anchor tier's upkeep (moves, kept window
 * tokens, re-rotated keys) must give the twin's bytes exactly, and the
 * attention's key weights (anchors included) the twin's softmax weights.
 * RoPE is checked at positions up to 10^7.
 * Weight dequantization (every GGUF block type, F32/F16/BF16 sources, into
 * each dtype) must give the host path's bytes exactly.
 * Exits 77 (skipped) without a GPU; built with -DSINKD_CUDA_EMU it runs the
 * same kernels on the host emulation (cuda/emu/) at smaller sizes. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/rope.h"
#include "cuda_testutil.h"
#include "cuda_device.h"
#include "cuda_kernels.h"
#include "cuda_kvplan.h"
#include "model/gguf.h"
#include "model/quantize.h"
#include "util/errbuf.h"
#include "testutil.h"

static uint64_t rng = 99;
static float frand(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static const int dtypes[] = {CUDA_DT_F32, CUDA_DT_F16, CUDA_DT_BF16};

/* Uniform integer in [0, n). */
static int irand(int n)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (int)((rng >> 33) % (uint64_t)n);
}

START_TEST(test_embed)
{
	int dims[] = {64, 100, 2048}, n = 9, vocab = 50;
	for (int di = 0; di < 3; di++)
		for (int t = 0; t < 3; t++) {
			int dim = dims[di], dt = dtypes[t];
			size_t tb = (size_t)vocab * dim * cuda_kv_dt_size(dt);
			unsigned char *table = malloc(tb);
			for (size_t i = 0; i < (size_t)vocab * dim; i++)
				twin_dt_store(table, dt, i, frand());
			int32_t tok[9] = {0, 3, 49, 7, 7, 12, 1, 0, 30};
			float *ref = malloc((size_t)n * dim * 4),
			      *got = malloc((size_t)n * dim * 4);
			twin_embed(table, dt, dim, tok, n, ref);
			void *dtab = dev_from(table, tb), *dtok = dev_from(tok, sizeof(tok));
			float *dx = dev_from(NULL, (size_t)n * dim * 4);
			ck_assert_int_eq(cuda_embed(dtab, dt, dim, dtok, n, dx, NULL), 0);
			to_host(got, dx, (size_t)n * dim * 4);
			ck_assert_msg(memcmp(got, ref, (size_t)n * dim * 4) == 0,
			              "embed dim %d dtype %d", dim, dt);
			cudaFree(dtab), cudaFree(dtok), cudaFree(dx);
			free(table), free(ref), free(got);
		}
}
END_TEST

START_TEST(test_rmsnorm)
{
	int dims[] = {64, 260, 2048}, ns[] = {1, 7, 33};
	for (int di = 0; di < 3; di++)
		for (int ni = 0; ni < 3; ni++)
			for (int t = 0; t < 3; t++) {
				int dim = dims[di], n = ns[ni], dt = dtypes[t];
				size_t nx = (size_t)n * dim, ob = nx * cuda_kv_dt_size(dt);
				float *x = malloc(nx * 4), *w = malloc((size_t)dim * 4);
				unsigned char *ref = malloc(ob), *got = malloc(ob);
				for (size_t i = 0; i < nx; i++)
					x[i] = 3.0f * frand();
				for (int i = 0; i < dim; i++)
					w[i] = 1.0f + frand();
				twin_rmsnorm(x, w, n, dim, 1e-5f, ref, dt);
				void *dx = dev_from(x, nx * 4), *dw = dev_from(w, (size_t)dim * 4),
				     *dout = dev_from(NULL, ob);
				ck_assert_int_eq(
				    cuda_rmsnorm(dx, dw, n, dim, 1e-5f, dout, dt, NULL), 0);
				to_host(got, dout, ob);
				/* sums in double: at most one rounding step apart */
				double e = worst_err(got, ref, dt, nx, 1e-6,
				                     dt == CUDA_DT_F32 ? 1e-6 : 8e-3);
				ck_assert_msg(e <= 1.0, "rmsnorm dim %d n %d dtype %d: %.2f x tol",
				              dim, n, dt, e);
				cudaFree(dx), cudaFree(dw), cudaFree(dout);
				free(x), free(w), free(ref), free(got);
			}
}
END_TEST

/* QK-norm: the rmsnorm kernel over each head's row of Q (n tokens x heads
 * rows of head_dim), written over its input, equals the twin's out-of-place
 * result and the twin run in place. */
START_TEST(test_rmsnorm_heads_in_place)
{
	int hds[] = {32, 64, 128}, n = 5, n_heads = 6;
	for (int hi = 0; hi < 3; hi++) {
		int hd = hds[hi], rows = n * n_heads;
		size_t nx = (size_t)rows * hd;
		float *x = malloc(nx * 4), *w = malloc((size_t)hd * 4), *ref = malloc(nx * 4);
		float *twin_in_place = malloc(nx * 4), *got = malloc(nx * 4);
		for (size_t i = 0; i < nx; i++)
			x[i] = 3.0f * frand();
		for (int i = 0; i < hd; i++)
			w[i] = 1.0f + 0.2f * frand();
		twin_rmsnorm(x, w, rows, hd, 1e-6f, ref, CUDA_DT_F32);
		memcpy(twin_in_place, x, nx * 4);
		twin_rmsnorm(twin_in_place, w, rows, hd, 1e-6f, twin_in_place, CUDA_DT_F32);
		ck_assert_int_eq(memcmp(twin_in_place, ref, nx * 4), 0);
		float *dx = dev_from(x, nx * 4), *dw = dev_from(w, (size_t)hd * 4);
		ck_assert_int_eq(cuda_rmsnorm(dx, dw, rows, hd, 1e-6f, dx, CUDA_DT_F32, NULL), 0);
		to_host(got, dx, nx * 4);
		double e = worst_err(got, ref, CUDA_DT_F32, nx, 1e-6, 1e-6);
		ck_assert_msg(e <= 1.0, "rmsnorm in place, head_dim %d: %.2f x tol", hd, e);
		cudaFree(dx), cudaFree(dw);
		free(x), free(w), free(ref), free(twin_in_place), free(got);
	}
}
END_TEST

START_TEST(test_rope_far_positions)
{
	/* Same host angles (rope_cos_sin, exact at any position), same double
	 * rotation: the kernel must give the CPU's bits. */
	const uint64_t pos[] = {0, 1, 17, 4095, 1000000, 10000000, 123456789};
	int n = 7, n_heads = 3;
	int shapes[][2] = {{64, 64}, {128, 128}, {128, 64}, {80, 32}};
	for (int si = 0; si < 4; si++)
		for (int neox = 0; neox < 2; neox++) {
			int hd = shapes[si][0], rd = shapes[si][1];
			double hi[64], lo[64], *cs = malloc((size_t)n * rd * sizeof(double));
			rope_freqs_init(500000.0, rd, NULL, 1.0, hi, lo);
			for (int i = 0; i < n; i++)
				rope_cos_sin(hi, lo, rd, pos[i], cs + (size_t)i * rd);
			size_t nx = (size_t)n * n_heads * hd;
			float *x = malloc(nx * 4), *ref = malloc(nx * 4), *got = malloc(nx * 4);
			for (size_t i = 0; i < nx; i++)
				x[i] = 4.0f * frand();
			float scale = 1.0f / sqrtf((float)hd);
			twin_rope(x, ref, n, n_heads, hd, rd, neox, cs, rd, scale);
			float *dx = dev_from(x, nx * 4);
			double *dcs = dev_from(cs, (size_t)n * rd * sizeof(double));
			ck_assert_int_eq(
			    cuda_rope(dx, dx, n, n_heads, hd, rd, neox, dcs, rd, scale, NULL), 0);
			to_host(got, dx, nx * 4);
			ck_assert_msg(memcmp(got, ref, nx * 4) == 0,
			              "rope head_dim %d rope_dim %d neox %d", hd, rd, neox);
			cudaFree(dx), cudaFree(dcs);
			free(cs), free(x), free(ref), free(got);
		}
}
END_TEST

START_TEST(test_rope_scale)
{
	/* YaRN's / longrope's magnitude on the rotated dims only: the CPU's
	 * bits, the dims past rope_dim untouched (full and partial rotary). */
	int shapes[][2] = {{64, 64}, {128, 96}, {96, 32}};
	int n_vec = 37;
	for (int si = 0; si < 3; si++) {
		int hd = shapes[si][0], rd = shapes[si][1];
		size_t nx = (size_t)n_vec * hd;
		float *x = malloc(nx * 4), *ref = malloc(nx * 4), *got = malloc(nx * 4);
		for (size_t i = 0; i < nx; i++)
			x[i] = 4.0f * frand();
		memcpy(ref, x, nx * 4);
		twin_rope_scale(ref, n_vec, hd, rd, 1.1386294f);
		float *dx = dev_from(x, nx * 4);
		ck_assert_int_eq(cuda_rope_scale(dx, n_vec, hd, rd, 1.1386294f, NULL), 0);
		to_host(got, dx, nx * 4);
		ck_assert_msg(memcmp(got, ref, nx * 4) == 0, "rope scale head_dim %d rope_dim %d",
		              hd, rd);
		for (int v = 0; v < n_vec; v++)
			for (int j = 0; j < hd; j++) {
				size_t at = (size_t)v * hd + j;
				ck_assert(j < rd ? got[at] != x[at] || x[at] == 0.0f : got[at] == x[at]);
			}
		cudaFree(dx);
		free(x), free(ref), free(got);
	}
}
END_TEST

START_TEST(test_swiglu_bias_gather)
{
	size_t sizes[] = {1, 1000, 5632 * 9 + 3};
	for (int si = 0; si < 3; si++)
		for (int t = 0; t < 3; t++) {
			size_t n = sizes[si], ob = n * cuda_kv_dt_size(dtypes[t]);
			float *g = malloc(n * 4), *u = malloc(n * 4);
			unsigned char *ref = malloc(ob), *got = malloc(ob);
			for (size_t i = 0; i < n; i++)
				g[i] = 8.0f * frand(), u[i] = frand();
			twin_swiglu(g, u, n, ref, dtypes[t]);
			void *dg = dev_from(g, n * 4), *du = dev_from(u, n * 4),
			     *dout = dev_from(NULL, ob);
			ck_assert_int_eq(cuda_swiglu(dg, du, n, dout, dtypes[t], NULL), 0);
			to_host(got, dout, ob);
			double e = worst_err(got, ref, dtypes[t], n, 1e-7,
			                     dtypes[t] == CUDA_DT_F32 ? 1e-6 : 8e-3);
			ck_assert_msg(e <= 1.0, "swiglu n %zu dtype %d: %.2f x tol", n, dtypes[t],
			              e);
			cudaFree(dg), cudaFree(du), cudaFree(dout);
			free(g), free(u), free(ref), free(got);
		}
	/* bias and row gather: exact */
	int n = 5, cols = 300;
	float y[5 * 300], b[300], want[5 * 300];
	int32_t rows[3] = {4, 0, 2};
	for (int i = 0; i < n * cols; i++)
		y[i] = frand();
	for (int j = 0; j < cols; j++)
		b[j] = frand();
	for (int i = 0; i < n * cols; i++)
		want[i] = y[i] + b[i % cols];
	float *dy = dev_from(y, sizeof(y)), *db = dev_from(b, sizeof(b)),
	      *dg = dev_from(NULL, 3 * cols * 4);
	int32_t *dr = dev_from(rows, sizeof(rows));
	ck_assert_int_eq(cuda_add_bias(dy, db, n, cols, NULL), 0);
	ck_assert_int_eq(cuda_gather_rows(dy, dr, 3, cols, dg, NULL), 0);
	float got[5 * 300];
	to_host(got, dy, sizeof(y));
	ck_assert(memcmp(got, want, sizeof(want)) == 0);
	to_host(got, dg, 3 * cols * 4);
	for (int r = 0; r < 3; r++)
		ck_assert(memcmp(got + r * cols, want + rows[r] * cols, cols * 4) == 0);
	cudaFree(dy), cudaFree(db), cudaFree(dg), cudaFree(dr);
}
END_TEST

/* Gemma's element-wise kernels against their twins: GeGLU in each dtype,
 * the post-norm with residual add, the embedding scale and logit soft-cap. */
START_TEST(test_gemma_elementwise)
{
	size_t n = 5632 * 3 + 7;
	float *g = malloc(n * 4), *u = malloc(n * 4);
	for (size_t i = 0; i < n; i++)
		g[i] = 8.0f * frand(), u[i] = frand();
	for (int t = 0; t < 3; t++) {
		size_t ob = n * cuda_kv_dt_size(dtypes[t]);
		unsigned char *ref = malloc(ob), *got = malloc(ob);
		twin_geglu(g, u, n, ref, dtypes[t]);
		void *dg = dev_from(g, n * 4), *du = dev_from(u, n * 4), *dout = dev_from(NULL, ob);
		ck_assert_int_eq(cuda_geglu(dg, du, n, dout, dtypes[t], NULL), 0);
		to_host(got, dout, ob);
		double e = worst_err(got, ref, dtypes[t], n, 1e-7,
		                     dtypes[t] == CUDA_DT_F32 ? 1e-6 : 8e-3);
		ck_assert_msg(e <= 1.0, "geglu dtype %d: %.2f x tol", dtypes[t], e);
		cudaFree(dg), cudaFree(du), cudaFree(dout);
		free(ref), free(got);
	}
	int rows = 7, dim = 300;
	size_t nx = (size_t)rows * dim;
	float *x = malloc(nx * 4), *y = malloc(nx * 4), *w = malloc((size_t)dim * 4);
	float *want = malloc(nx * 4), *have = malloc(nx * 4);
	for (size_t i = 0; i < nx; i++)
		x[i] = frand(), y[i] = 3.0f * frand();
	for (int i = 0; i < dim; i++)
		w[i] = 1.0f + frand();
	memcpy(want, x, nx * 4);
	twin_rmsnorm_add(want, y, w, rows, dim, 1e-6f);
	float *dx = dev_from(x, nx * 4), *dy = dev_from(y, nx * 4), *dw = dev_from(w, dim * 4);
	ck_assert_int_eq(cuda_rmsnorm_add(dx, dy, dw, rows, dim, 1e-6f, NULL), 0);
	to_host(have, dx, nx * 4);
	double e = worst_err(have, want, CUDA_DT_F32, nx, 1e-6, 1e-6);
	ck_assert_msg(e <= 1.0, "rmsnorm_add: %.2f x tol", e);
	/* scale, then soft-cap: element-wise, the same roundings */
	memcpy(want, y, nx * 4);
	twin_scale(want, nx, 5.5f);
	twin_softcap(want, nx, 4.0f);
	ck_assert_int_eq(cuda_scale(dy, nx, 5.5f, NULL), 0);
	ck_assert_int_eq(cuda_softcap(dy, nx, 4.0f, NULL), 0);
	to_host(have, dy, nx * 4);
	e = worst_err(have, want, CUDA_DT_F32, nx, 1e-6, 1e-6);
	ck_assert_msg(e <= 1.0, "scale and soft-cap: %.2f x tol", e);
	for (size_t i = 0; i < nx; i++)
		ck_assert(fabsf(have[i]) < 4.0f);
	cudaFree(dx), cudaFree(dy), cudaFree(dw);
	free(g), free(u), free(x), free(y), free(w), free(want), free(have);
}
END_TEST

/* The anchor scores' and the trace's reduction over heads: bit-identical
 * to the twin, columns past cols untouched, the mean optional. */
START_TEST(test_key_weight_reduce)
{
	enum { N = 3, H = 5, LD = 301, COLS = 290 };
	float *w = malloc(N * H * LD * sizeof(float));
	float ref_max[N * LD], ref_mean[N * LD], got_max[N * LD], got_mean[N * LD];
	for (int i = 0; i < N * H * LD; i++)
		w[i] = 0.5f + 0.5f * frand();
	for (int i = 0; i < N * LD; i++)
		ref_max[i] = ref_mean[i] = -7.0f;
	twin_key_weight_reduce(w, N, H, LD, COLS, ref_max, ref_mean);
	float *dw = dev_from(w, N * H * LD * sizeof(float));
	for (int with_mean = 0; with_mean < 2; with_mean++) {
		float sentinel[N * LD];
		for (int i = 0; i < N * LD; i++)
			sentinel[i] = -7.0f;
		float *dmax = dev_from(sentinel, sizeof(sentinel));
		float *dmean = dev_from(sentinel, sizeof(sentinel));
		ck_assert_int_eq(cuda_key_weight_reduce(dw, N, H, LD, COLS, dmax,
		                                        with_mean ? dmean : NULL, NULL),
		                 0);
		to_host(got_max, dmax, sizeof(got_max));
		to_host(got_mean, dmean, sizeof(got_mean));
		ck_assert(memcmp(got_max, ref_max, sizeof(ref_max)) == 0);
		if (with_mean)
			ck_assert(memcmp(got_mean, ref_mean, sizeof(ref_mean)) == 0);
		else
			ck_assert(memcmp(got_mean, sentinel, sizeof(sentinel)) == 0);
		cudaFree(dmax), cudaFree(dmean);
	}
	for (int t = 0; t < N; t++) {
		ck_assert(ref_max[t * LD + COLS] == -7.0f && ref_mean[t * LD + COLS] == -7.0f);
		float m = 0.0f, sum = 0.0f;
		for (int h = 0; h < H; h++) {
			m = fmaxf(m, w[(t * H + h) * LD + 7]);
			sum += w[(t * H + h) * LD + 7];
		}
		ck_assert(ref_max[t * LD + 7] == m);
		ck_assert(fabsf(ref_mean[t * LD + 7] - sum / H) <= 1e-7f);
		ck_assert(ref_mean[t * LD + 7] < m || H == 1);
	}
	cudaFree(dw);
	free(w);
}
END_TEST

/* --------------------------------------------------- weight dequantization */

static const enum ggml_type weight_types[] = {
    GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q4_K,
    GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16};

/* rows (rows, cols) of random floats, row r at one of several magnitudes
 * (f16's range included), some blocks zero, encoded as type by quantize.c. */
static unsigned char *random_weights(enum ggml_type type, int rows, int cols, size_t *row_bytes)
{
	static const float amp[] = {0.02f, 1.0f, 300.0f, 1e-3f};
	char err[SINKD_ERR_LEN];
	*row_bytes = ggml_row_bytes(type, (uint64_t)cols);
	unsigned char *q = malloc((size_t)rows * *row_bytes);
	float *x = malloc((size_t)cols * sizeof(float));
	for (int r = 0; r < rows; r++) {
		for (int j = 0; j < cols; j++)
			x[j] = (r % 5 == 4 && j < 256) ? 0.0f : amp[r % 4] * frand();
		ck_assert_msg(quantize_row(type, x, q + (size_t)r * *row_bytes, (uint64_t)cols, err,
		                           sizeof(err)) == 0,
		              "%s", err);
	}
	free(x);
	return q;
}

START_TEST(test_dequant_rows)
{
	/* every source type, every dtype: the device's rows are the host path's
	 * (dequantize_row + kv_row_store) byte for byte */
	int rows = SIZE(37, 6), cols = SIZE(2048, 512);
	for (size_t ti = 0; ti < sizeof(weight_types) / sizeof(weight_types[0]); ti++)
		for (int t = 0; t < 3; t++) {
			enum ggml_type type = weight_types[ti];
			int dt = dtypes[t];
			size_t rb, ob = (size_t)rows * cols * cuda_kv_dt_size(dt);
			unsigned char *q = random_weights(type, rows, cols, &rb);
			unsigned char *ref = malloc(ob), *got = malloc(ob);
			twin_dequant_rows(type, q, rb, rows, cols, ref, dt);
			void *dq = dev_from(q, (size_t)rows * rb), *dout = dev_from(NULL, ob);
			ck_assert(cuda_dequant_supported(type));
			ck_assert_int_eq(
			    cuda_dequant_rows(type, dq, rb, rows, cols, dout, dt, NULL), 0);
			to_host(got, dout, ob);
			size_t bad = 0;
			while (bad < ob && got[bad] == ref[bad])
				bad++;
			ck_assert_msg(bad == ob,
			              "dequant %s to dtype %d: first difference at byte %zu",
			              ggml_type_name(type), dt, bad);
			cudaFree(dq), cudaFree(dout);
			free(q), free(ref), free(got);
		}
	/* what the kernel does not read is refused, not guessed */
	ck_assert(!cuda_dequant_supported(GGML_TYPE_Q2_K));
	ck_assert_int_ne(
	    cuda_dequant_rows(GGML_TYPE_Q2_K, NULL, 84, 1, 256, NULL, CUDA_DT_F32, NULL), 0);
	ck_assert_int_ne(
	    cuda_dequant_rows(GGML_TYPE_Q4_K, NULL, 144, 1, 100, NULL, CUDA_DT_F32, NULL), 0);
}
END_TEST

/* ------------------------------------------------------------- KV cache */

#define N_LAYERS 2
#define N_HEADS 8
#define MAX_SESS 4

/* One session held twice: host blocks for the twins, device blocks for the
 * kernels, one shared plan. */
struct dual_session {
	struct cuda_kv_shape sh;
	struct cuda_kv_state st;
	unsigned char *h_sink, *h_win, *d_sink, *d_win;
	struct cuda_kv_view hv, dv;
	double hi[256], lo[256];
};

static void dual_init(struct dual_session *s, const struct cache_geometry *g)
{
	char err[SINKD_ERR_LEN];
	ck_assert_msg(cuda_kv_shape_init(g, &s->sh, err, sizeof(err)) == 0, "%s", err);
	cuda_kv_state_init(&s->st);
	size_t sb = s->sh.sink_layer_bytes * g->n_layers + 1,
	       wb = s->sh.win_layer_bytes * g->n_layers + 1;
	s->h_sink = calloc(1, sb);
	s->h_win = calloc(1, wb);
	s->d_sink = dev_from(NULL, sb);
	s->d_win = dev_from(NULL, wb);
	s->hv = s->dv = s->sh.layout;
	s->hv.sink_base = (uint64_t)(uintptr_t)s->h_sink;
	s->hv.win_base = (uint64_t)(uintptr_t)s->h_win;
	s->dv.sink_base = (uint64_t)(uintptr_t)s->d_sink;
	s->dv.win_base = (uint64_t)(uintptr_t)s->d_win;
	rope_freqs_init(g->rope_theta, g->rope_dim, NULL, 1.0, s->hi, s->lo);
}

static void dual_compare_bytes(struct dual_session *s)
{
	size_t sb = s->sh.sink_layer_bytes * s->sh.g.n_layers,
	       wb = s->sh.win_layer_bytes * s->sh.g.n_layers;
	unsigned char *buf = malloc(sb + wb + 1);
	to_host(buf, s->d_sink, sb);
	ck_assert_msg(memcmp(buf, s->h_sink, sb) == 0, "sink tier bytes differ from the twin");
	to_host(buf, s->d_win, wb);
	ck_assert_msg(memcmp(buf, s->h_win, wb) == 0, "window tier bytes differ from the twin");
	free(buf);
}

static void dual_free(struct dual_session *s)
{
	free(s->h_sink), free(s->h_win);
	cudaFree(s->d_sink), cudaFree(s->d_win);
}

/* What the kernels must leave alone in key_weight. */
static const float kw_sentinel = -12345.0f;
/* Key weight columns of the run_sessions buffer: more than any window + sinks there. */
#define KW_LD 2048

static void fill_sentinel(float *w, size_t n)
{
	for (size_t i = 0; i < n; i++)
		w[i] = kw_sentinel;
}

/* The kernel's key weights (got) against the twin's (ref): within 1e-6,
 * each head's row summing to 1 (less the learned sink's mass, learned
 * (n_tokens, n_heads) or NULL), the columns past its resident tokens
 * untouched. */
static void check_key_weights(const float *got, const float *ref,
                              const struct cuda_kv_attn_job *jobs, int n_jobs, int n_heads, int ld,
                              const float *learned, const char *what)
{
	for (int j = 0; j < n_jobs; j++) {
		const struct cuda_kv_attn_job *a = &jobs[j];
		int n_res = a->n_sink + a->n_anchor + a->n_comp + a->n_fp;
		for (int h = 0; h < n_heads; h++) {
			const float *g = got + ((size_t)a->token * n_heads + h) * ld;
			const float *r = ref + ((size_t)a->token * n_heads + h) * ld;
			double sum = 0.0, worst = 0.0;
			for (int i = 0; i < n_res; i++) {
				double e = fabs((double)g[i] - r[i]);
				if (!(e <= worst))
					worst = isnan(e) ? INFINITY : e;
				sum += g[i];
			}
			ck_assert_msg(worst <= 1e-6, "%s: job %d head %d: key weight off by %g",
			              what, j, h, worst);
			double want = learned ? 1.0 - learned[(size_t)a->token * n_heads + h] : 1.0;
			ck_assert_msg(n_res == 0 || fabs(sum - want) <= 1e-5,
			              "%s: job %d head %d: key weights sum to %.8f", what, j, h,
			              sum);
			for (int i = n_res; i < ld; i++)
				ck_assert_msg(
				    memcmp(&g[i], &kw_sentinel, sizeof(float)) == 0,
				    "%s: job %d head %d: column %d of %d resident written", what, j,
				    h, i, n_res);
		}
	}
}

/* n_sess sessions (one token each per wave) for n_waves waves through the
 * device kernels and the twins; split_len varies per wave. */
static void run_sessions(const struct cache_geometry *gs, int n_sess, int n_waves)
{
	struct dual_session ss[MAX_SESS];
	int d = gs[0].head_dim, n_kv = gs[0].n_kv_heads, rd = gs[0].rope_dim;
	size_t kvn = (size_t)n_sess * n_kv * d, qn = (size_t)n_sess * N_HEADS * d;
	float *k = malloc(kvn * 4), *v = malloc(kvn * 4), *q = malloc(qn * 4);
	float *qw = malloc(qn * 4), *qs = malloc(qn * 4), *out_t = malloc(qn * 4),
	      *out_d = malloc(qn * 4);
	float mass_t[MAX_SESS * N_HEADS], mass_d[MAX_SESS * N_HEADS];
	float learned_t[MAX_SESS * N_HEADS], learned_d[MAX_SESS * N_HEADS], sinks[N_HEADS];
	for (int h = 0; h < N_HEADS; h++) /* gpt-oss's learned sink logits: some far out */
		sinks[h] = h == 0 ? 8.0f : h == 1 ? -8.0f : 2.0f * frand();
	float *dsinks = dev_from(sinks, sizeof(sinks));
	float *dlearned = dev_from(NULL, sizeof(learned_d));
	size_t kwn = (size_t)n_sess * N_HEADS * KW_LD;
	float *kw_t = malloc(kwn * 4), *kw_d = malloc(kwn * 4);
	double *cs = malloc((size_t)n_sess * 2 * rd * sizeof(double));
	struct cuda_kv_append_job app[MAX_SESS];
	struct cuda_kv_flush_job fl[MAX_SESS], fl_d[MAX_SESS];
	struct cuda_kv_attn_job att[MAX_SESS], att_d[MAX_SESS];
	struct cuda_kv_append_job app_d[MAX_SESS];
	for (int s = 0; s < n_sess; s++)
		dual_init(&ss[s], &gs[s]);
	float *dk = dev_from(NULL, kvn * 4), *dv = dev_from(NULL, kvn * 4),
	      *dqw = dev_from(NULL, qn * 4), *dqs = dev_from(NULL, qn * 4),
	      *dout = dev_from(NULL, qn * 4), *dmass = dev_from(NULL, sizeof(mass_d)),
	      *dkw = dev_from(NULL, kwn * 4);
	void *djobs = dev_from(NULL, sizeof(att_d) + sizeof(app_d) + sizeof(fl_d));
	size_t pcap = cuda_attention_partial_floats(n_sess, N_HEADS, d, 1 << 16, 32);
	float *dpart = dev_from(NULL, pcap * 4);
	const int splits[] = {32, 64, 256, 1024};
	float scale = 1.0f / sqrtf((float)d);
	for (int w = 0; w < n_waves; w++) {
		int n_fl = 0, max_res = 0;
		for (int s = 0; s < n_sess; s++) {
			struct cuda_kv_step step;
			cuda_kv_plan_step(&ss[s].sh, &ss[s].st, &ss[s].hv, &step);
			app[s] = step.append, att[s] = step.attn;
			app[s].token = att[s].token = s;
			app_d[s] = app[s], att_d[s] = att[s];
			app_d[s].kv = att_d[s].kv = ss[s].dv;
			if (step.has_flush) {
				fl[n_fl] = step.flush;
				fl_d[n_fl] = step.flush;
				fl_d[n_fl++].kv = ss[s].dv;
			}
			rope_cos_sin(ss[s].hi, ss[s].lo, rd, step.key_pos, cs + (size_t)s * 2 * rd);
			rope_cos_sin(ss[s].hi, ss[s].lo, rd, step.sink_pos,
			             cs + (size_t)s * 2 * rd + rd);
			int res = att[s].n_sink + att[s].n_anchor + att[s].n_comp + att[s].n_fp;
			max_res = res > max_res ? res : max_res;
		}
		for (int l = 0; l < N_LAYERS; l++) {
			for (size_t i = 0; i < kvn; i++)
				k[i] = 2.0f * frand() + 0.3f, v[i] = frand();
			for (size_t i = 0; i < qn; i++)
				q[i] = 2.0f * frand();
			/* keys and queries rotated on the host: the rope kernel has its own test */
			twin_rope(k, k, n_sess, n_kv, d, rd, gs[0].rope_neox, cs, 2 * rd, 1.0f);
			twin_rope(q, qw, n_sess, N_HEADS, d, rd, gs[0].rope_neox, cs, 2 * rd,
			          scale);
			twin_rope(q, qs, n_sess, N_HEADS, d, rd, gs[0].rope_neox, cs + rd, 2 * rd,
			          scale);
			twin_kv_flush(fl, n_fl, n_kv, l);
			twin_kv_append(app, n_sess, n_kv, l, k, v);
			/* key weights in every other run of four waves (so at every split
			 * length); without them is the common case */
			bool want_kw = w % 8 >= 4;
			ck_assert_int_le(max_res, KW_LD);
			/* gemma2's score soft-cap in every other wave */
			float cap = w % 2 ? 3.0f : 0.0f;
			/* learned sinks in every third wave, so with and without the cap */
			bool learned = w % 3 == 1;
			twin_attention_capped(att, n_sess, l, N_HEADS, qw, qs, out_t, mass_t, kw_t,
			                      KW_LD, cap, learned ? sinks : NULL, learned_t);
			unsigned char *jb = djobs;
			ck_assert_int_eq(
			    cudaMemcpy(jb, att_d, sizeof(att_d), cudaMemcpyHostToDevice), 0);
			ck_assert_int_eq(cudaMemcpy(jb + sizeof(att_d), app_d, sizeof(app_d),
			                            cudaMemcpyHostToDevice),
			                 0);
			ck_assert_int_eq(cudaMemcpy(jb + sizeof(att_d) + sizeof(app_d), fl_d,
			                            sizeof(fl_d), cudaMemcpyHostToDevice),
			                 0);
			ck_assert_int_eq(cudaMemcpy(dk, k, kvn * 4, cudaMemcpyHostToDevice), 0);
			ck_assert_int_eq(cudaMemcpy(dv, v, kvn * 4, cudaMemcpyHostToDevice), 0);
			ck_assert_int_eq(cudaMemcpy(dqw, qw, qn * 4, cudaMemcpyHostToDevice), 0);
			ck_assert_int_eq(cudaMemcpy(dqs, qs, qn * 4, cudaMemcpyHostToDevice), 0);
			if (want_kw) {
				fill_sentinel(kw_d, kwn);
				ck_assert_int_eq(
				    cudaMemcpy(dkw, kw_d, kwn * 4, cudaMemcpyHostToDevice), 0);
			}
			ck_assert_int_eq(cuda_kv_flush((void *)(jb + sizeof(att_d) + sizeof(app_d)),
			                               n_fl, n_kv, l, NULL),
			                 0);
			ck_assert_int_eq(cuda_kv_append((void *)(jb + sizeof(att_d)), n_sess, n_kv,
			                                l, dk, dv, NULL),
			                 0);
			ck_assert_int_eq(cuda_attention_capped((void *)jb, n_sess, max_res, l,
			                                       N_HEADS, dqw, dqs, splits[w % 4], dpart,
			                                       dout, CUDA_DT_F32, dmass,
			                                       want_kw ? dkw : NULL, KW_LD, cap,
			                                       learned ? dsinks : NULL, dlearned,
			                                       NULL),
			                 0);
			to_host(out_d, dout, qn * 4);
			to_host(mass_d, dmass, (size_t)n_sess * N_HEADS * 4);
			to_host(learned_d, dlearned, (size_t)n_sess * N_HEADS * 4);
			double e = worst_err(out_d, out_t, CUDA_DT_F32, qn, 2e-5, 2e-4);
			ck_assert_msg(e <= 1.0, "wave %d layer %d: attention %.2f x tol", w, l, e);
			e = worst_err(mass_d, mass_t, CUDA_DT_F32, (size_t)n_sess * N_HEADS, 2e-5,
			              2e-4);
			ck_assert_msg(e <= 1.0, "wave %d layer %d: sink mass %.2f x tol", w, l, e);
			e = worst_err(learned_d, learned_t, CUDA_DT_F32, (size_t)n_sess * N_HEADS,
			              2e-5, 2e-4);
			ck_assert_msg(e <= 1.0, "wave %d layer %d: learned sink mass %.2f x tol", w,
			              l, e);
			for (int i = 0; i < n_sess * N_HEADS; i++)
				ck_assert(learned || learned_d[i] == 0.0f);
			if (want_kw) {
				to_host(kw_d, dkw, kwn * 4);
				check_key_weights(kw_d, kw_t, att, n_sess, N_HEADS, KW_LD,
				                  learned ? learned_t : NULL, "sessions");
			}
		}
		if (w % 25 == 24 || w == n_waves - 1)
			for (int s = 0; s < n_sess; s++)
				dual_compare_bytes(&ss[s]);
	}
	for (int s = 0; s < n_sess; s++)
		dual_free(&ss[s]);
	cudaFree(dk), cudaFree(dv), cudaFree(dqw), cudaFree(dqs), cudaFree(dout), cudaFree(dmass);
	cudaFree(dkw), cudaFree(djobs), cudaFree(dpart), cudaFree(dsinks), cudaFree(dlearned);
	free(k), free(v), free(q), free(qw), free(qs), free(out_t), free(out_d), free(cs);
	free(kw_t), free(kw_d);
}

static struct cache_geometry geom(int head_dim, int window, int sinks, bool quant, int bits,
                                      bool protect, int recent, enum kv_dtype dt)
{
	struct cache_geometry g =
	    tu_geometry(N_LAYERS, 2, head_dim, sinks, window, quant, bits, recent);
	g.protect_sinks = protect;
	g.dtype = dt;
	return g;
}

START_TEST(test_kv_one_session_tiers)
{
	struct cache_geometry g[4] = {
	    geom(64, 48, 4, false, 8, true, 16, KV_DTYPE_F32),
	    geom(64, 70, 4, true, 8, true, 16, KV_DTYPE_BF16),
	    geom(128, 64, 3, true, 4, false, 8, KV_DTYPE_F16),
	    geom(64, 300, 4, true, 8, true, 32, KV_DTYPE_BF16),
	};
	for (int i = 0; i < 4; i++)
		run_sessions(&g[i], 1, SIZE(160, 50));
}
END_TEST

START_TEST(test_kv_many_sessions_one_launch)
{
	/* different tiers and fill levels in the same launches */
	struct cache_geometry g[4] = {
	    geom(64, 40, 4, false, 8, true, 16, KV_DTYPE_BF16),
	    geom(64, 70, 4, true, 8, true, 16, KV_DTYPE_BF16),
	    geom(64, 64, 2, true, 4, false, 8, KV_DTYPE_BF16),
	    geom(64, 1500, 4, true, 8, true, 64, KV_DTYPE_BF16),
	};
	run_sessions(g, 4, SIZE(120, 30));
}
END_TEST

START_TEST(test_kv_long_window_splits)
{
	/* a window long enough for many splits of every length */
	struct cache_geometry g =
	    geom(128, SIZE(1100, 150), 4, true, 8, true, 128, KV_DTYPE_F16);
	run_sessions(&g, 1, SIZE(1150, 165));
}
END_TEST

/* ---------------------------------------------------- anchor tier, by hand */

/* Hand-made blocks of one session (no planner): sinks, fp ring, anchors and
 * groups at 64-byte aligned offsets, every byte random and every number in
 * it finite. */
struct hand_caps {
	int sinks, fp, anchors, group, n_groups;
};

struct hand_session {
	struct cuda_kv_view hv, dv; /* host and device views of the same layout */
	unsigned char *h_sink, *h_win, *d_sink, *d_win;
	size_t sink_bytes, win_bytes; /* all N_LAYERS layers */
};

static uint64_t carve(uint64_t *at, size_t bytes)
{
	uint64_t off = *at;
	*at += (bytes + 63) & ~(size_t)63;
	return off;
}

static struct cuda_kv_view hand_layout(int d, int dtype, int bits, bool sink_quant,
                                       struct hand_caps c)
{
	struct cuda_kv_view v;
	memset(&v, 0, sizeof(v));
	v.n_kv = 2, v.head_dim = d, v.dtype = dtype, v.bits = bits;
	v.sink_cap = c.sinks, v.fp_cap = c.fp, v.group = c.group, v.n_groups = c.n_groups;
	v.sink_quant = sink_quant, v.code_row = bits == 8 ? d : d / 2, v.anchor_cap = c.anchors;
	size_t fp_row = (size_t)d * cuda_kv_dt_size(dtype), nk = 2, ng = (size_t)c.n_groups * nk;
	uint64_t at = 0;
	size_t sink_row = sink_quant ? (size_t)v.code_row : fp_row;
	v.off_sink_k = carve(&at, nk * c.sinks * sink_row);
	v.off_sink_v = carve(&at, nk * c.sinks * sink_row);
	v.off_sink_kp = carve(&at, nk * c.sinks * 2 * sizeof(float));
	v.off_sink_vp = carve(&at, nk * c.sinks * 2 * sizeof(float));
	v.sink_layer_bytes = at;
	at = 0;
	v.off_fp_k = carve(&at, nk * c.fp * fp_row);
	v.off_fp_v = carve(&at, nk * c.fp * fp_row);
	v.off_ak = carve(&at, nk * c.anchors * fp_row);
	v.off_av = carve(&at, nk * c.anchors * fp_row);
	v.off_ako = carve(&at, nk * c.anchors * d * sizeof(float));
	v.off_gkp = carve(&at, ng * 2 * d * sizeof(float));
	v.off_gvp = carve(&at, ng * c.group * 2 * sizeof(float));
	v.off_gk = carve(&at, ng * c.group * v.code_row);
	v.off_gv = carve(&at, ng * c.group * v.code_row);
	v.win_layer_bytes = at;
	return v;
}

static void fill_f32(unsigned char *p, size_t n, float amp)
{
	for (size_t i = 0; i < n; i++)
		((float *)p)[i] = amp * frand();
}

static void fill_dt(unsigned char *p, int dtype, size_t n, float amp)
{
	for (size_t i = 0; i < n; i++)
		twin_dt_store(p, dtype, i, amp * frand());
}

/* A scale and min of codes of `bits` spanning about [-1, 1], as kvq_params makes them. */
static void quant_pair(int bits, float *scale, float *min)
{
	*scale = (2.0f + 0.5f * frand()) / (float)((1 << bits) - 1);
	*min = -1.0f + 0.25f * frand();
}

/* n (scale, min) pairs: per-token params. */
static void fill_pairs(unsigned char *p, size_t n, int bits)
{
	for (size_t i = 0; i < n; i++)
		quant_pair(bits, &((float *)p)[2 * i], &((float *)p)[2 * i + 1]);
}

/* n blocks of d scales then d mins: per-channel params of groups. */
static void fill_channels(unsigned char *p, size_t n, int d, int bits)
{
	float *f = (float *)p;
	for (size_t i = 0; i < n; i++)
		for (int j = 0; j < d; j++)
			quant_pair(bits, &f[2 * d * i + j], &f[2 * d * i + d + j]);
}

/* Random contents of both blocks; the device gets the same bytes. */
static void hand_session_init(struct hand_session *s, struct cuda_kv_view v)
{
	int d = v.head_dim, nk = v.n_kv;
	size_t nrow = (size_t)nk * d;
	s->sink_bytes = v.sink_layer_bytes * N_LAYERS;
	s->win_bytes = v.win_layer_bytes * N_LAYERS;
	s->h_sink = malloc(s->sink_bytes);
	s->h_win = malloc(s->win_bytes);
	for (size_t i = 0; i < s->sink_bytes; i++)
		s->h_sink[i] = (unsigned char)irand(256);
	for (size_t i = 0; i < s->win_bytes; i++)
		s->h_win[i] = (unsigned char)irand(256);
	for (int l = 0; l < N_LAYERS; l++) {
		unsigned char *S = s->h_sink + l * v.sink_layer_bytes;
		unsigned char *W = s->h_win + l * v.win_layer_bytes;
		if (v.sink_quant) {
			fill_pairs(S + v.off_sink_kp, (size_t)nk * v.sink_cap, v.bits);
			fill_pairs(S + v.off_sink_vp, (size_t)nk * v.sink_cap, v.bits);
		} else {
			fill_dt(S + v.off_sink_k, v.dtype, nrow * v.sink_cap, 2.0f);
			fill_dt(S + v.off_sink_v, v.dtype, nrow * v.sink_cap, 1.0f);
		}
		fill_dt(W + v.off_fp_k, v.dtype, nrow * v.fp_cap, 2.0f);
		fill_dt(W + v.off_fp_v, v.dtype, nrow * v.fp_cap, 1.0f);
		fill_dt(W + v.off_ak, v.dtype, nrow * v.anchor_cap, 2.0f);
		fill_dt(W + v.off_av, v.dtype, nrow * v.anchor_cap, 1.0f);
		fill_f32(W + v.off_ako, nrow * v.anchor_cap, 2.0f);
		fill_channels(W + v.off_gkp, (size_t)v.n_groups * nk, d, v.bits);
		fill_pairs(W + v.off_gvp, (size_t)v.n_groups * nk * v.group, v.bits);
	}
	s->d_sink = dev_from(s->h_sink, s->sink_bytes);
	s->d_win = dev_from(s->h_win, s->win_bytes);
	s->hv = s->dv = v;
	s->hv.sink_base = (uint64_t)(uintptr_t)s->h_sink;
	s->hv.win_base = (uint64_t)(uintptr_t)s->h_win;
	s->dv.sink_base = (uint64_t)(uintptr_t)s->d_sink;
	s->dv.win_base = (uint64_t)(uintptr_t)s->d_win;
}

static void hand_session_free(struct hand_session *s)
{
	free(s->h_sink), free(s->h_win);
	cudaFree(s->d_sink), cudaFree(s->d_win);
}

/* Kinds of anchor ops a test ran: MOVE, KEEP fp, KEEP group, REKEY rotated, REKEY as is. */
struct op_mix {
	int n[5];
};

/* n random ops on one layer: later ones often read what earlier ones wrote
 * (few slots), which the kernel's barriers must order. */
static void random_anchor_ops(struct cuda_kv_anchor_op *ops, int n, const struct cuda_kv_view *v,
                              int layer, int n_angles, struct op_mix *mix)
{
	int a = v->anchor_cap;
	for (int i = 0; i < n; i++) {
		struct cuda_kv_anchor_op *op = &ops[i];
		memset(op, 0, sizeof(*op));
		op->kv = *v, op->layer = layer, op->kind = irand(3), op->dst = irand(a);
		if (op->kind == CUDA_ANCHOR_MOVE) {
			op->dst = irand(a - 1);
			op->src = op->dst + 1 + irand(a - 1 - op->dst);
			mix->n[0]++;
		} else if (op->kind == CUDA_ANCHOR_KEEP) {
			op->from_group = irand(2);
			op->group_slot = irand(v->n_groups);
			op->group_row = irand(v->group);
			op->fp_slot = irand(v->fp_cap);
			mix->n[op->from_group ? 2 : 1]++;
		} else {
			op->cs_at = irand(n_angles + 1) - 1;
			mix->n[op->cs_at >= 0 ? 3 : 4]++;
		}
	}
}

#define ANC_OPS 12
#define ANC_LISTS 5
#define ANC_ANGLES 6

/* One configuration: lists of two sessions on both layers (one list empty)
 * in one launch; both window blocks must end byte-identical to the twin's. */
static void anchor_ops_case(int d, int rope_dim, int dtype, int bits, bool neox, struct op_mix *mix)
{
	struct hand_caps caps = {.sinks = 2, .fp = 10, .anchors = 6, .group = 4, .n_groups = 3};
	struct cuda_kv_view v = hand_layout(d, dtype, bits, false, caps);
	struct hand_session ss[2];
	hand_session_init(&ss[0], v);
	hand_session_init(&ss[1], v);
	unsigned char *before = malloc(ss[0].win_bytes), *got = malloc(ss[0].win_bytes);
	memcpy(before, ss[0].h_win, ss[0].win_bytes);
	/* rotations as kv_layer_anchor_rekey makes them: by -(pos - rank) */
	static const uint64_t pos[ANC_ANGLES] = {1, 3, 17, 900, 123457, 10000000};
	double hi[CUDA_KV_MAX_HEAD_DIM / 2], lo[CUDA_KV_MAX_HEAD_DIM / 2];
	double angles[ANC_ANGLES * CUDA_KV_MAX_HEAD_DIM];
	rope_freqs_init(10000.0, rope_dim, NULL, 1.0, hi, lo);
	for (int i = 0; i < ANC_ANGLES; i++) {
		double *cs = angles + (size_t)i * rope_dim;
		rope_cos_sin(hi, lo, rope_dim, pos[i], cs);
		for (int j = 1; j < rope_dim; j += 2)
			cs[j] = -cs[j];
	}
	/* lists: (session, layer) or -1 for an empty one */
	static const int list_sess[ANC_LISTS] = {0, 1, -1, 0, 1},
	                 list_layer[ANC_LISTS] = {0, 1, 0, 1, 0};
	struct cuda_kv_anchor_op ops[ANC_LISTS * ANC_OPS], ops_d[ANC_LISTS * ANC_OPS];
	int32_t begin[ANC_LISTS + 1];
	int n_ops = 0;
	for (int i = 0; i < ANC_LISTS; i++) {
		begin[i] = n_ops;
		if (list_sess[i] < 0)
			continue;
		struct hand_session *s = &ss[list_sess[i]];
		random_anchor_ops(ops + n_ops, ANC_OPS, &s->hv, list_layer[i], ANC_ANGLES, mix);
		for (int j = 0; j < ANC_OPS; j++) {
			ops_d[n_ops + j] = ops[n_ops + j];
			ops_d[n_ops + j].kv = s->dv;
		}
		n_ops += ANC_OPS;
	}
	begin[ANC_LISTS] = n_ops;
	twin_kv_anchor_ops(ops, begin, ANC_LISTS, v.n_kv, angles, rope_dim, neox);
	void *dops = dev_from(ops_d, sizeof(ops_d)), *dbegin = dev_from(begin, sizeof(begin));
	double *dang = dev_from(angles, sizeof(angles));
	ck_assert_int_eq(
	    cuda_kv_anchor_ops(dops, dbegin, ANC_LISTS, v.n_kv, dang, rope_dim, neox, NULL), 0);
	ck_assert_msg(memcmp(before, ss[0].h_win, ss[0].win_bytes) != 0, "the twin did nothing");
	for (int s = 0; s < 2; s++) {
		to_host(got, ss[s].d_win, ss[s].win_bytes);
		size_t bad = 0;
		while (bad < ss[s].win_bytes && got[bad] == ss[s].h_win[bad])
			bad++;
		ck_assert_msg(
		    bad == ss[s].win_bytes,
		    "anchor ops head_dim %d rope_dim %d dtype %d bits %d neox %d: session "
		    "%d: first difference at byte %zu of the window block",
		    d, rope_dim, dtype, bits, neox, s, bad);
	}
	cudaFree(dops), cudaFree(dbegin), cudaFree(dang);
	hand_session_free(&ss[0]), hand_session_free(&ss[1]);
	free(before), free(got);
}

START_TEST(test_kv_anchor_ops)
{
	/* rope_dim below and at head_dim, both pairings, every dtype, int8 and int4 groups */
	static const int shapes[][2] = {{64, 64}, {64, 32}, {128, 128}, {80, 48}};
	struct op_mix mix = {{0}};
	for (int si = 0; si < 4; si++)
		for (int t = 0; t < 3; t++)
			for (int bits = 8; bits >= 4; bits -= 4)
				for (int neox = 0; neox < 2; neox++)
					anchor_ops_case(shapes[si][0], shapes[si][1], dtypes[t],
					                bits, neox, &mix);
	for (int k = 0; k < 5; k++)
		ck_assert_msg(mix.n[k] > 0, "anchor op kind %d never ran", k);
}
END_TEST

#define ANC_JOBS 4

/* Attention over hand-made tiers with anchors: the jobs cover every tier,
 * ring wrap-arounds and a job without anchors. */
static void anchor_attention_case(int d, int dtype, int bits, bool sink_quant)
{
	struct hand_caps caps = {.sinks = 4, .fp = 40, .anchors = 6, .group = 16, .n_groups = 4};
	struct cuda_kv_view v = hand_layout(d, dtype, bits, sink_quant, caps);
	struct hand_session s;
	hand_session_init(&s, v);
	/* n_sink, n_anchor, n_comp, comp_group0, comp_row0, n_fp, fp_slot0 */
	static const int shape[ANC_JOBS][7] = {{4, 6, 40, 3, 5, 30, 25},
	                                       {2, 0, 0, 0, 0, 12, 37},
	                                       {4, 3, 16, 1, 0, 40, 0},
	                                       {1, 1, 0, 0, 0, 0, 0}};
	struct cuda_kv_attn_job jobs[ANC_JOBS], jobs_d[ANC_JOBS];
	int max_res = 0;
	for (int j = 0; j < ANC_JOBS; j++) {
		memset(&jobs[j], 0, sizeof(jobs[j]));
		jobs[j].token = (j + 1) % ANC_JOBS; /* tokens out of job order */
		jobs[j].n_sink = shape[j][0], jobs[j].n_anchor = shape[j][1];
		jobs[j].n_comp = shape[j][2], jobs[j].comp_group0 = shape[j][3];
		jobs[j].comp_row0 = shape[j][4], jobs[j].n_fp = shape[j][5];
		jobs[j].fp_slot0 = shape[j][6];
		jobs[j].kv = s.hv;
		jobs_d[j] = jobs[j];
		jobs_d[j].kv = s.dv;
		int res = shape[j][0] + shape[j][1] + shape[j][2] + shape[j][5];
		max_res = res > max_res ? res : max_res;
	}
	int ld = max_res + 5;
	size_t qn = (size_t)ANC_JOBS * N_HEADS * d, kwn = (size_t)ANC_JOBS * N_HEADS * ld;
	float *qw = malloc(qn * 4), *qs = malloc(qn * 4), *out_t = malloc(qn * 4),
	      *out_d = malloc(qn * 4), *out_n = malloc(qn * 4), *kw_t = malloc(kwn * 4),
	      *kw_d = malloc(kwn * 4);
	float mass_t[ANC_JOBS * N_HEADS], mass_d[ANC_JOBS * N_HEADS];
	float scale = 4.0f / sqrtf((float)d); /* peaked enough that weights differ */
	for (size_t i = 0; i < qn; i++)
		qw[i] = scale * frand(), qs[i] = scale * frand();
	float *dqw = dev_from(qw, qn * 4), *dqs = dev_from(qs, qn * 4);
	float *dout = dev_from(NULL, qn * 4), *dmass = dev_from(NULL, sizeof(mass_d));
	float *dkw = dev_from(NULL, kwn * 4);
	void *djobs = dev_from(jobs_d, sizeof(jobs_d));
	static const int splits[] = {32, 64, 1024};
	for (int l = 0; l < N_LAYERS; l++)
		for (int si = 0; si < 3; si++) {
			char what[96];
			snprintf(what, sizeof(what),
			         "head_dim %d dtype %d bits %d sink_quant %d layer %d split %d", d,
			         dtype, bits, sink_quant, l, splits[si]);
			size_t pf = cuda_attention_partial_floats(ANC_JOBS, N_HEADS, d, max_res,
			                                          splits[si]);
			float *dpart = dev_from(NULL, pf * 4);
			fill_sentinel(kw_t, kwn);
			fill_sentinel(kw_d, kwn);
			ck_assert_int_eq(cudaMemcpy(dkw, kw_d, kwn * 4, cudaMemcpyHostToDevice), 0);
			twin_attention(jobs, ANC_JOBS, l, N_HEADS, qw, qs, out_t, mass_t, kw_t, ld);
			ck_assert_int_eq(cuda_attention(djobs, ANC_JOBS, max_res, l, N_HEADS, dqw,
			                                dqs, splits[si], dpart, dout, CUDA_DT_F32,
			                                dmass, dkw, ld, NULL),
			                 0);
			to_host(out_d, dout, qn * 4);
			to_host(mass_d, dmass, sizeof(mass_d));
			to_host(kw_d, dkw, kwn * 4);
			double e = worst_err(out_d, out_t, CUDA_DT_F32, qn, 2e-5, 2e-4);
			ck_assert_msg(e <= 1.0, "%s: attention %.2f x tol", what, e);
			e = worst_err(mass_d, mass_t, CUDA_DT_F32, ANC_JOBS * N_HEADS, 2e-5, 2e-4);
			ck_assert_msg(e <= 1.0, "%s: sink mass %.2f x tol", what, e);
			check_key_weights(kw_d, kw_t, jobs, ANC_JOBS, N_HEADS, ld, NULL, what);
			/* without key weights: the same outputs, bit for bit */
			ck_assert_int_eq(cuda_attention(djobs, ANC_JOBS, max_res, l, N_HEADS, dqw,
			                                dqs, splits[si], dpart, dout, CUDA_DT_F32,
			                                dmass, NULL, 0, NULL),
			                 0);
			to_host(out_n, dout, qn * 4);
			ck_assert_msg(memcmp(out_n, out_d, qn * 4) == 0,
			              "%s: key weights changed the output", what);
			cudaFree(dpart);
		}
	cudaFree(dqw), cudaFree(dqs), cudaFree(dout), cudaFree(dmass), cudaFree(dkw);
	cudaFree(djobs);
	hand_session_free(&s);
	free(qw), free(qs), free(out_t), free(out_d), free(out_n), free(kw_t), free(kw_d);
}

START_TEST(test_attention_anchors_key_weight)
{
	static const int dims[] = {64, 128};
	for (int di = 0; di < 2; di++)
		for (int t = 0; t < 3; t++)
			for (int bits = 8; bits >= 4; bits -= 4)
				for (int sq = 0; sq < 2; sq++)
					anchor_attention_case(dims[di], dtypes[t], bits, sq);
}
END_TEST

int main(void)
{
	if (cuda_device_count() == 0) { /* never with the emulation: it has one */
		printf("no CUDA device: skipped\n");
		return 77;
	}
	Suite *s = suite_create("cuda-kernels");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_embed);
	tcase_add_test(tc, test_rmsnorm);
	tcase_add_test(tc, test_rmsnorm_heads_in_place);
	tcase_add_test(tc, test_rope_far_positions);
	tcase_add_test(tc, test_rope_scale);
	tcase_add_test(tc, test_swiglu_bias_gather);
	tcase_add_test(tc, test_gemma_elementwise);
	tcase_add_test(tc, test_key_weight_reduce);
	tcase_add_test(tc, test_dequant_rows);
	tcase_add_test(tc, test_kv_one_session_tiers);
	tcase_add_test(tc, test_kv_many_sessions_one_launch);
	tcase_add_test(tc, test_kv_long_window_splits);
	tcase_add_test(tc, test_kv_anchor_ops);
	tcase_add_test(tc, test_attention_anchors_key_weight);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
