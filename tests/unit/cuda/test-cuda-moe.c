/* The CUDA backend's mixture-of-experts pieces:
 *   - end to end: synthetic gpt-oss (router and expert biases, clamped
 *     SwiGLU, top-k-then-softmax gating, attention output bias, sliding
 *     layers of a 16-token window) and qwen3moe (softmax gating
 *     renormalised, QK-norm) files from sinkd-mkmodel (argv[1]) in F32:
 *     two sessions in shared batches, chunked prefill then greedy decode,
 *     logits within 1e-3 of the CPU backend's (relative to the largest)
 *     and the same greedy tokens; Q8_0 and MXFP4 (experts MXFP4, the rest
 *     Q8_0) gpt-oss files the same against the CPU on their weights
 *     widened to F32 on the host; bf16 on the device within 5e-2;
 *   - MXFP4 weight dequantization on the device against values computed
 *     here from the format (E2M1 codes times 2^(e - 127), e8m0's subnormal
 *     scales included), in every dtype, byte for byte;
 *   - the expert kernels against their plain-C twins (cuda/twins.c): row
 *     gather by an index list, bias by each row's expert, SwiGLU and
 *     gpt-oss's clamped SwiGLU (the twin's against a reference written
 *     here too), the scatter of rows to their entries and each token's sum
 *     over its ranks by the gating weights.
 * Exits 77 (skipped) without a GPU; built with -DSINKD_CUDA_EMU it runs on
 * the host emulation of CUDA (cuda/emu/). */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "backend_cuda.h"
#include "cuda_device.h"
#include "cuda_kernels.h"
#include "cuda_testutil.h"
#include "engine/backend.h"
#include "model/dequant.h"
#include "model/gguf.h"
#include "model/model.h"
#include "util/errbuf.h"
#include "testutil.h"

static const char *mkmodel_path;

#define MXFP4_BYTES 17

static const int dtypes[] = {CUDA_DT_F32, CUDA_DT_F16, CUDA_DT_BF16};

static uint64_t rng = 4242;
static uint32_t urand(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(rng >> 33);
}
static float frand(void)
{
	return (float)(urand() & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* ------------------------------------------------------------ MXFP4 */

/* Value of E2M1 code c (sign bit 3; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6)
 * times the E8M0 scale 2^(e - 127), from the OCP format's definition;
 * code 8 (-0) is +0 as ggml's table has it. */
static float mxfp4_value(int c, int e)
{
	static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
	double v = ldexp((double)mag[c & 7], e - 127);
	return (float)((c & 8) && c != 8 ? -v : v);
}

/* rows of cols/32 random MXFP4 blocks, exponents from a list that covers
 * e8m0's subnormal scales (0, 1) and large ones; ref (rows, cols) floats. */
static unsigned char *mxfp4_rows(int rows, int cols, float *ref)
{
	static const int exps[] = {0, 1, 2, 100, 119, 126, 127, 128, 131, 140};
	int nb = cols / 32;
	unsigned char *q = malloc((size_t)rows * nb * MXFP4_BYTES);
	for (int r = 0; r < rows; r++)
		for (int b = 0; b < nb; b++) {
			unsigned char *blk = q + ((size_t)r * nb + b) * MXFP4_BYTES;
			int e = exps[urand() % (sizeof(exps) / sizeof(exps[0]))];
			blk[0] = (unsigned char)e;
			for (int j = 0; j < 16; j++)
				blk[1 + j] = (unsigned char)urand();
			for (int j = 0; j < 32; j++) {
				int c = j < 16 ? blk[1 + j] & 0xf : blk[1 + j - 16] >> 4;
				ref[(size_t)r * cols + b * 32 + j] = mxfp4_value(c, e);
			}
		}
	return q;
}

START_TEST(test_mxfp4_dequant)
{
	int rows = 7, cols = 320;
	size_t rb = (size_t)(cols / 32) * MXFP4_BYTES, n = (size_t)rows * cols;
	float *ref = malloc(n * sizeof(float));
	unsigned char *q = mxfp4_rows(rows, cols, ref);
	ck_assert(cuda_dequant_supported(GGML_TYPE_MXFP4));
	for (int t = 0; t < 3; t++) {
		int dt = dtypes[t];
		size_t ob = n * cuda_kv_dt_size(dt);
		unsigned char *want = malloc(ob), *got = malloc(ob);
		for (size_t i = 0; i < n; i++)
			twin_dt_store(want, dt, i, ref[i]);
		/* the host path (dequant.c) reads the blocks the same */
		unsigned char *host = malloc(ob);
		twin_dequant_rows(GGML_TYPE_MXFP4, q, rb, rows, cols, host, dt);
		ck_assert_msg(memcmp(host, want, ob) == 0, "dequant.c's mxfp4 to dtype %d", dt);
		free(host);
		void *dq = dev_from(q, (size_t)rows * rb), *dout = dev_from(NULL, ob);
		ck_assert_int_eq(
		    cuda_dequant_rows(GGML_TYPE_MXFP4, dq, rb, rows, cols, dout, dt, NULL), 0);
		to_host(got, dout, ob);
		size_t bad = 0;
		while (bad < ob && got[bad] == want[bad])
			bad++;
		ck_assert_msg(bad == ob, "mxfp4 to dtype %d: first difference at byte %zu", dt,
		              bad);
		cudaFree(dq), cudaFree(dout);
		free(want), free(got);
	}
	/* a row that is not whole blocks is refused */
	ck_assert_int_ne(
	    cuda_dequant_rows(GGML_TYPE_MXFP4, NULL, 17, 1, 40, NULL, CUDA_DT_F32, NULL), 0);
	free(q), free(ref);
}
END_TEST

/* ------------------------------------------------------ expert kernels */

/* gpt-oss's clamped SwiGLU as its model card writes it (llama.cpp's
 * swiglu_oai), in double: the twin's arithmetic must stay close to it. */
static double oai_ref(double g, double u, double alpha, double limit)
{
	double x = fmin(g, limit), y = fmax(fmin(u, limit), -limit);
	return x / (1.0 + exp(-alpha * x)) * (y + 1.0);
}

START_TEST(test_moe_act)
{
	size_t sizes[] = {1, 999, 4096 * 3 + 5};
	for (int si = 0; si < 3; si++)
		for (int act = 0; act < 2; act++)
			for (int t = 0; t < 3; t++) {
				size_t n = sizes[si], ob = n * cuda_kv_dt_size(dtypes[t]);
				float *g = malloc(n * 4), *u = malloc(n * 4);
				unsigned char *ref = malloc(ob), *got = malloc(ob);
				for (size_t i = 0; i < n; i++) /* past the clamp at 7 */
					g[i] = 12.0f * frand(), u[i] = 10.0f * frand();
				twin_moe_act(g, u, n, act, 1.702f, 7.0f, ref, dtypes[t]);
				void *dg = dev_from(g, n * 4), *du = dev_from(u, n * 4),
				     *dout = dev_from(NULL, ob);
				ck_assert_int_eq(cuda_moe_act(dg, du, n, act, 1.702f, 7.0f, dout,
				                              dtypes[t], NULL),
				                 0);
				to_host(got, dout, ob);
				double e = worst_err(got, ref, dtypes[t], n, 1e-6,
				                     dtypes[t] == CUDA_DT_F32 ? 1e-6 : 8e-3);
				ck_assert_msg(e <= 1.0, "act %d n %zu dtype %d: %.2f x tol", act, n,
				              dtypes[t], e);
				for (size_t i = 0; act == 1 && t == 0 && i < n; i++) {
					double r = oai_ref(g[i], u[i], 1.702, 7.0);
					ck_assert_msg(
					    fabs(((float *)ref)[i] - r) <= 1e-5 + 1e-5 * fabs(r),
					    "clamped swiglu (%g, %g): twin %g, reference %g", g[i],
					    u[i], ((float *)ref)[i], r);
				}
				cudaFree(dg), cudaFree(du), cudaFree(dout);
				free(g), free(u), free(ref), free(got);
			}
}
END_TEST

/* A batch's entries grouped by expert as moe_route_compute groups them:
 * gather the tokens' rows, add each row's expert bias, scatter back to the
 * entries, sum each token's ranks by weight into the residual. */
START_TEST(test_moe_gather_bias_scatter_sum)
{
	enum { N = 9, K = 3, E = 5 };
	int dims[] = {64, 300};
	for (int di = 0; di < 2; di++) {
		int dim = dims[di], m = N * K;
		int32_t order[N * K], tok[N * K], expert_of[N * K];
		float *x = malloc((size_t)N * dim * 4), *bias = malloc((size_t)E * dim * 4);
		float *w = malloc((size_t)m * 4), *res = malloc((size_t)N * dim * 4);
		for (int i = 0; i < N * dim; i++)
			x[i] = frand(), res[i] = frand();
		for (int i = 0; i < E * dim; i++)
			bias[i] = frand();
		/* entries in a shuffled order, as grouping by expert leaves them */
		for (int i = 0; i < m; i++)
			order[i] = i;
		for (int i = m - 1; i > 0; i--) {
			int j = (int)(urand() % (uint32_t)(i + 1)), s = order[i];
			order[i] = order[j], order[j] = s;
		}
		for (int i = 0; i < m; i++) {
			tok[i] = order[i] / K;
			expert_of[i] = (int32_t)(urand() % E);
			w[i] = 0.5f * frand() + 0.5f;
		}
		size_t rows_b = (size_t)m * dim * 4, x_b = (size_t)N * dim * 4;
		float *g_ref = malloc(rows_b), *g_got = malloc(rows_b);
		float *e_ref = malloc(rows_b), *e_got = malloc(rows_b);
		float *s_ref = malloc(x_b), *s_got = malloc(x_b);
		twin_gather_rows(x, tok, m, dim, g_ref);
		twin_add_bias_rows(g_ref, bias, expert_of, m, dim);
		twin_scatter_rows(g_ref, order, m, dim, e_ref);
		memcpy(s_ref, res, x_b);
		twin_moe_sum(e_ref, w, N, K, dim, s_ref);
		float *dx = dev_from(x, x_b), *db = dev_from(bias, (size_t)E * dim * 4);
		float *dw = dev_from(w, (size_t)m * 4), *dres = dev_from(res, x_b);
		float *dg = dev_from(NULL, rows_b), *de = dev_from(NULL, rows_b);
		int32_t *dtok = dev_from(tok, sizeof(tok)), *dord = dev_from(order, sizeof(order));
		int32_t *dexp = dev_from(expert_of, sizeof(expert_of));
		ck_assert_int_eq(cuda_gather_rows(dx, dtok, m, dim, dg, NULL), 0);
		ck_assert_int_eq(cuda_add_bias_rows(dg, db, dexp, m, dim, NULL), 0);
		ck_assert_int_eq(cuda_scatter_rows(dg, dord, m, dim, de, NULL), 0);
		ck_assert_int_eq(cuda_moe_sum(de, dw, N, K, dim, dres, NULL), 0);
		to_host(g_got, dg, rows_b);
		to_host(e_got, de, rows_b);
		to_host(s_got, dres, x_b);
		/* moves and one add per value: exact */
		ck_assert(memcmp(g_got, g_ref, rows_b) == 0);
		ck_assert(memcmp(e_got, e_ref, rows_b) == 0);
		/* entry t*K + r holds token t's row plus its expert's bias */
		for (int i = 0; i < m; i++)
			ck_assert(e_ref[(size_t)order[i] * dim] ==
			          x[(size_t)tok[i] * dim] + bias[(size_t)expert_of[i] * dim]);
		double e = worst_err(s_got, s_ref, CUDA_DT_F32, (size_t)N * dim, 1e-6, 1e-6);
		ck_assert_msg(e <= 1.0, "moe sum dim %d: %.2f x tol", dim, e);
		cudaFree(dx), cudaFree(db), cudaFree(dw), cudaFree(dres), cudaFree(dg);
		cudaFree(de), cudaFree(dtok), cudaFree(dord), cudaFree(dexp);
		free(x), free(bias), free(w), free(res), free(g_ref), free(g_got);
		free(e_ref), free(e_got), free(s_ref), free(s_got);
	}
}
END_TEST

/* The weighted sum keeps rank order: with weights that make the order
 * matter in float (1, 1e8, -1e8 against 1, 1, 1), rank 0 then 1 then 2
 * gives (1 + 1e8) - 1e8 = 0, not 1. */
START_TEST(test_moe_sum_rank_order)
{
	float y[3] = {1.0f, 1.0f, 1.0f}, w[3] = {1.0f, 1e8f, -1e8f}, x = 0.0f, got = -1.0f;
	float *dy = dev_from(y, sizeof(y)), *dw = dev_from(w, sizeof(w)), *dx = dev_from(&x, 4);
	ck_assert_int_eq(cuda_moe_sum(dy, dw, 1, 3, 1, dx, NULL), 0);
	to_host(&got, dx, 4);
	twin_moe_sum(y, w, 1, 3, 1, &x);
	ck_assert(got == 0.0f);
	ck_assert(x == 0.0f);
	cudaFree(dy), cudaFree(dw), cudaFree(dx);
}
END_TEST

/* ------------------------------------------------------------ end to end */

/* A synthetic model file of sinkd-mkmodel's options `args` at path. */
static void make_file(const char *args, char *path, size_t path_len)
{
	char cmd[2048];
	snprintf(path, path_len, "/tmp/sinkd-cuda-moe-%d.gguf", (int)getpid());
	snprintf(cmd, sizeof(cmd), "'%s' --out '%s' %s --seed 17 >/dev/null", mkmodel_path, path,
	         args);
	ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
}

static struct model *load(const char *path)
{
	char err[SINKD_ERR_LEN];
	struct model *m = NULL;
	ck_assert_msg(model_load(path, NULL, &m, err, sizeof(err)) == 0, "%s", err);
	return m;
}

/* The cpu backend (k 0) and the cuda one (k 1), two sessions each. */
struct pair {
	struct backend *be[2];
	struct backend_session *s[2][2];
	int n_vocab;
	double worst;    /* largest logits difference relative to the largest logit */
	int token_flips; /* greedy steps whose argmax differed */
};

static void pair_open(struct pair *p, const struct model *m_cpu, const struct model *m,
                      enum kv_dtype dt, int experts)
{
	char err[SINKD_ERR_LEN];
	struct backend_options opt = {.n_threads = 2};
	struct backend_cuda_options o = {
	    .device = 0,
	    .dtype = dt,
	    .cache_bytes = (size_t)64 << 20,
	    .auto_fraction = 0.3,
	    .cuda_graphs = true, /* asked for: an MoE model must run without them */
	    .experts = experts};
	memset(p, 0, sizeof(*p));
	ck_assert_msg(backend_cpu_new(m_cpu, &opt, &p->be[0], err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(backend_cuda_new(m, NULL, &o, &p->be[1], err, sizeof(err)) == 0, "%s", err);
	p->n_vocab = m->hp.n_vocab;
	struct cache_geometry g = tu_model_geometry(&m->hp, 48);
	g.dtype = KV_DTYPE_F32;
	for (int k = 0; k < 2; k++)
		for (int j = 0; j < 2; j++)
			ck_assert_msg(p->be[k]->ops->session_new(p->be[k], &g, &p->s[k][j], err,
			                                         sizeof(err)) == 0,
			              "%s", err);
}

static void pair_close(struct pair *p)
{
	for (int k = 0; k < 2; k++) {
		for (int j = 0; j < 2; j++)
			p->be[k]->ops->session_free(p->be[k], p->s[k][j]);
		backend_free(p->be[k]);
	}
}

/* One batch of n tokens on both backends; n_want rows of logits compared. */
static void pair_step(struct pair *p, struct backend_token *bt[2], int n, float *lg[2])
{
	char err[SINKD_ERR_LEN];
	int n_want = 0;
	for (int i = 0; i < n; i++)
		n_want += bt[0][i].want_logits;
	for (int k = 0; k < 2; k++)
		ck_assert_msg(p->be[k]->ops->forward(p->be[k], bt[k], (size_t)n, lg[k], err,
		                                     sizeof(err)) == 0,
		              "%s: %s", p->be[k]->ops->name, err);
	for (int r = 0; r < n_want; r++) {
		const float *a = lg[1] + (size_t)r * p->n_vocab,
		            *b = lg[0] + (size_t)r * p->n_vocab;
		double d = 0.0, mx = 1e-30;
		for (int i = 0; i < p->n_vocab; i++) {
			d = fmax(d, fabs((double)a[i] - b[i]));
			mx = fmax(mx, fabs((double)b[i]));
		}
		p->worst = fmax(p->worst, d / mx);
		p->token_flips += argmax(a, p->n_vocab) != argmax(b, p->n_vocab);
	}
}

/* Prompts of na and nb tokens interleaved in chunks, then n_steps greedy
 * steps of both sessions in one batch (the cpu's tokens fed to both). */
static void pair_run(struct pair *p, int na, int nb, int chunk, int n_steps)
{
	struct backend_token *bt[2];
	float *lg[2];
	for (int k = 0; k < 2; k++) {
		bt[k] = calloc((size_t)(na + nb), sizeof(struct backend_token));
		lg[k] = malloc(2 * (size_t)p->n_vocab * sizeof(float));
	}
	int at[2] = {0, 0}, len[2] = {na, nb}, next[2] = {3, 5};
	while (at[0] < na || at[1] < nb) {
		int n = 0;
		for (int j = 0; j < 2; j++)
			for (int c = 0; c < chunk && at[j] < len[j]; c++, at[j]++, n++)
				for (int k = 0; k < 2; k++)
					bt[k][n] = (struct backend_token){
					    .session = p->s[k][j],
					    .token =
					        (int32_t)((at[j] * (37 + 64 * j) + 5) % p->n_vocab),
					    .want_logits = at[j] == len[j] - 1};
		pair_step(p, bt, n, lg);
	}
	for (int step = 0; step < n_steps; step++) {
		for (int j = 0; j < 2; j++)
			for (int k = 0; k < 2; k++)
				bt[k][j] = (struct backend_token){
				    .session = p->s[k][j], .token = next[j], .want_logits = true};
		pair_step(p, bt, 2, lg);
		for (int j = 0; j < 2; j++)
			next[j] = argmax(lg[0] + (size_t)j * p->n_vocab, p->n_vocab);
	}
	for (int k = 0; k < 2; k++)
		free(bt[k]), free(lg[k]);
}

/* w widened to F32 (widen_matrix), its buffer kept in owned[*n_owned]. */
static void widen(struct weight_matrix *w, float **owned, int *n_owned)
{
	owned[(*n_owned)++] = widen_matrix(w);
}

/* Every matrix of an MoE model m widened to F32 (the head is untied). */
static float **widen_moe(struct model *m, int *n_owned)
{
	int ne = m->hp.n_experts;
	float **owned = malloc((size_t)(2 + m->hp.n_layers * (5 + 3 * ne)) * sizeof(float *));
	*n_owned = 0;
	ck_assert(m->output.data != m->token_embd.data);
	widen(&m->token_embd, owned, n_owned);
	widen(&m->output, owned, n_owned);
	for (int l = 0; l < m->hp.n_layers; l++) {
		struct model_layer *L = &m->layers[l];
		struct weight_matrix *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_router};
		for (int i = 0; i < 5; i++)
			widen(lw[i], owned, n_owned);
		for (int e = 0; e < ne; e++) {
			widen(&L->exp_gate[e], owned, n_owned);
			widen(&L->exp_up[e], owned, n_owned);
			widen(&L->exp_down[e], owned, n_owned);
		}
	}
	return owned;
}

/* The cuda backend on the file's weights against the cpu backend on the
 * same weights widened to F32 on the host, so that both route on the same
 * router logits up to summation order: within 1e-3 of the largest logit,
 * the same greedy tokens.  (The cpu on the blocks themselves quantizes its
 * activations to int8, which moves the router's logits enough to flip a
 * near tie between experts now and then: not a comparison that can be
 * bounded tightly.) */
static void moe_vs_cpu(const char *args, const char *what)
{
	char path[512];
	make_file(args, path, sizeof(path));
	struct model *m = load(path), *mf = load(path);
	ck_assert_int_gt(m->hp.n_experts, 1);
	int n_owned = 0;
	float **owned = widen_moe(mf, &n_owned);
	struct pair p;
	size_t bytes[2];
	static const int modes[] = {BACKEND_CUDA_EXPERTS_WIDENED, BACKEND_CUDA_EXPERTS_STORED};
	for (int i = 0; i < 2; i++) {
		pair_open(&p, mf, m, KV_DTYPE_F32, modes[i]);
		bytes[i] = backend_cuda_weight_bytes(p.be[1]);
		pair_run(&p, 29, 17, 8, SIZE(24, 6));
		ck_assert_msg(p.worst <= 1e-3,
		              "%s (experts mode %d): logits differ by %g (relative)", what,
		              modes[i], p.worst);
		ck_assert_int_eq(p.token_flips, 0);
		pair_close(&p);
	}
	/* experts kept as stored take their bytes in the file, not widened */
	size_t exp_file = 0;
	for (int l = 0; l < m->hp.n_layers; l++)
		for (int e = 0; e < m->hp.n_experts; e++) {
			const struct model_layer *L = &m->layers[l];
			exp_file += (size_t)L->exp_gate[e].rows * L->exp_gate[e].row_bytes +
			            (size_t)L->exp_up[e].rows * L->exp_up[e].row_bytes +
			            (size_t)L->exp_down[e].rows * L->exp_down[e].row_bytes;
		}
	size_t exp_wide = (size_t)m->hp.n_layers * m->hp.n_experts * 3 * m->hp.dim *
	                  m->hp.expert_ffn_dim * sizeof(float);
	ck_assert_uint_eq(bytes[0] - bytes[1], exp_wide - exp_file);
	/* bf16 on the device (the router still f32): close, not alike */
	pair_open(&p, mf, m, KV_DTYPE_BF16, BACKEND_CUDA_EXPERTS_AUTO);
	pair_run(&p, 29, 17, 8, SIZE(12, 4));
	ck_assert_msg(p.worst <= 5e-2, "%s bf16: logits differ by %g (relative)", what, p.worst);
	pair_close(&p);
	model_free(m);
	model_free(mf);
	for (int i = 0; i < n_owned; i++)
		free(owned[i]);
	free(owned);
	unlink(path);
}

#define GPT_OSS_SHAPE                                                                              \
	"--arch gpt-oss --dim 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 --ffn 96 "        \
	"--experts 8 --experts-used 3 --expert-ffn 96 --vocab-size 300 --sliding-window 16"

START_TEST(test_gpt_oss_vs_cpu)
{
	moe_vs_cpu(GPT_OSS_SHAPE, "gpt-oss");
	moe_vs_cpu(GPT_OSS_SHAPE " --type q8_0", "gpt-oss q8_0");
	moe_vs_cpu(GPT_OSS_SHAPE " --type mxfp4", "gpt-oss mxfp4");
}
END_TEST

START_TEST(test_qwen3moe_vs_cpu)
{
	moe_vs_cpu("--arch qwen3moe --dim 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 "
	           "--ffn 80 --experts 6 --experts-used 2 --expert-ffn 80 --vocab-size 300",
	           "qwen3moe");
}
END_TEST

int main(int argc, char **argv)
{
	if (cuda_device_count() == 0) { /* never with the emulation: it has one */
		printf("no CUDA device: skipped\n");
		return 77;
	}
	if (argc < 2) {
		fprintf(stderr, "usage: %s path/to/sinkd-mkmodel\n", argv[0]);
		return 1;
	}
	mkmodel_path = argv[1];
	Suite *s = suite_create("cuda-moe");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_mxfp4_dequant);
	tcase_add_test(tc, test_moe_act);
	tcase_add_test(tc, test_moe_gather_bias_scatter_sum);
	tcase_add_test(tc, test_moe_sum_rank_order);
	tcase_add_test(tc, test_gpt_oss_vs_cpu);
	tcase_add_test(tc, test_qwen3moe_vs_cpu);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
