/* The CPU forward pass of architecture rows against a plain float64
 * reference of the same network, written here from llama.cpp's graphs
 * (src/models/llama.cpp, qwen3.cpp, openai-moe-iswa.cpp, qwen3moe.cpp and
 * build_moe_ffn in llama-graph.cpp): synthetic F32 models from
 * sinkd-mkmodel (path in argv[1]) with heads wider than embedding_length /
 * head_count (attention.key_length, Mistral Nemo's shape), their
 * last-position logits within 1e-4 of the largest, and the head width
 * carried into the cache geometry and a session snapshot; qwen3's QK-norm
 * (a query norm of 2s gives other logits than one of 1s, each matching);
 * the mixture-of-experts rows (gpt-oss: router and expert biases, the
 * attention output bias, the clamped SwiGLU driven past its limit;
 * qwen3moe: softmax gating with renormalised weights, k = 1 and k = all),
 * an MXFP4 gpt-oss file (experts read as stored) against the reference of
 * its F32 conversion, and an MoE token's logits the same alone as in a
 * batch of 8 sessions. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "session/snapshot.h"
#include "util/errbuf.h"
#include "util/sderr.h"
#include "testutil.h"

static const char *mkmodel_path;

/* Writes a synthetic F32 model with sinkd-mkmodel (extra: more options)
 * to path and loads it. */
static struct model *make_model(char *path, size_t path_len, const char *extra)
{
	char cmd[2048], err[SINKD_ERR_LEN];
	snprintf(path, path_len, "/tmp/sinkd-arch-forward-%d.gguf", (int)getpid());
	snprintf(cmd, sizeof(cmd),
	         "'%s' --out '%s' --layers 2 --ffn 96 --vocab-size 300 --seed 3 %s >/dev/null",
	         mkmodel_path, path, extra);
	ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
	struct model *m = NULL;
	ck_assert_msg(model_load(path, NULL, &m, err, sizeof(err)) == 0, "%s", err);
	return m;
}

/* ------------------------------------------------------------------------
 * The reference: one token position at a time, every sum in double. */

static const float *rows_of(const struct weight_matrix *w)
{
	ck_assert_int_eq(w->type, GGML_TYPE_F32);
	return w->data;
}

/* y (w->rows) = W x (+ bias). */
static void ref_matvec(const struct weight_matrix *w, const double *x, const float *bias, double *y)
{
	const float *W = rows_of(w);
	for (int r = 0; r < w->rows; r++) {
		double s = bias ? bias[r] : 0.0;
		for (int c = 0; c < w->cols; c++)
			s += (double)W[(size_t)r * w->cols + c] * x[c];
		y[r] = s;
	}
}

/* out (n) = x / rms(x) * w; out may be x. */
static void ref_rmsnorm(const double *x, const float *w, int n, double eps, double *out)
{
	double ss = 0;
	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	double scale = 1.0 / sqrt(ss / n + eps);
	for (int i = 0; i < n; i++)
		out[i] = x[i] * scale * w[i];
}

/* One head's first rope_dim values turned by position pos. */
static void ref_rope(double *x, const struct model_hparams *hp, int pos)
{
	int half = hp->rope_dim / 2;
	bool neox = model_arch_rope_neox(hp->arch);
	for (int i = 0; i < half; i++) {
		double freq = pow(hp->rope_theta, -2.0 * i / hp->rope_dim) * hp->rope_freq_scale;
		double c = cos(pos * freq), s = sin(pos * freq);
		int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
		double x0 = x[a], x1 = x[b];
		x[a] = x0 * c - x1 * s;
		x[b] = x0 * s + x1 * c;
	}
}

struct ref_buf {
	int n, dim, qd, kvd, ffn;
	double *x, *xb, *q, *k, *v, *att, *proj, *gate, *up;
};

/* Q, K (normed per head where the model has QK-norm, then turned) and V of
 * every position, from the normed input xb. */
static void ref_qkv(const struct model *m, const struct model_layer *L, struct ref_buf *b)
{
	const struct model_hparams *hp = &m->hp;
	int hd = hp->head_dim;
	for (int t = 0; t < b->n; t++) {
		double *q = b->q + (size_t)t * b->qd, *k = b->k + (size_t)t * b->kvd;
		ref_matvec(&L->wq, b->xb + (size_t)t * b->dim, L->bq, q);
		ref_matvec(&L->wk, b->xb + (size_t)t * b->dim, L->bk, k);
		ref_matvec(&L->wv, b->xb + (size_t)t * b->dim, L->bv, b->v + (size_t)t * b->kvd);
		for (int h = 0; h < hp->n_heads; h++) {
			if (L->q_norm)
				ref_rmsnorm(q + h * hd, L->q_norm, hd, hp->norm_eps, q + h * hd);
			ref_rope(q + h * hd, hp, t);
		}
		for (int h = 0; h < hp->n_kv_heads; h++) {
			if (L->k_norm)
				ref_rmsnorm(k + h * hd, L->k_norm, hd, hp->norm_eps, k + h * hd);
			ref_rope(k + h * hd, hp, t);
		}
	}
}

/* Causal grouped-query attention of every position into b->att; sinks
 * (n_heads) or NULL: each head's learned logit in the softmax's
 * denominator, with a zero value. */
static void ref_attention(const struct model_hparams *hp, const float *sinks, struct ref_buf *b)
{
	int hd = hp->head_dim, group = hp->n_heads / hp->n_kv_heads;
	double *score = malloc((size_t)b->n * sizeof(double));
	for (int t = 0; t < b->n; t++)
		for (int h = 0; h < hp->n_heads; h++) {
			const double *q = b->q + (size_t)t * b->qd + h * hd;
			int kvh = h / group;
			double mx = sinks ? sinks[h] : -INFINITY, sum = 0;
			for (int s = 0; s <= t; s++) {
				const double *k = b->k + (size_t)s * b->kvd + kvh * hd;
				double d = 0;
				for (int i = 0; i < hd; i++)
					d += q[i] * k[i];
				score[s] = d / sqrt((double)hd);
				mx = fmax(mx, score[s]);
			}
			for (int s = 0; s <= t; s++)
				sum += score[s] = exp(score[s] - mx);
			if (sinks)
				sum += exp(sinks[h] - mx);
			double *out = b->att + (size_t)t * b->qd + h * hd;
			for (int i = 0; i < hd; i++) {
				double o = 0;
				for (int s = 0; s <= t; s++)
					o += score[s] / sum *
					     b->v[(size_t)s * b->kvd + kvh * hd + i];
				out[i] = o;
			}
		}
	free(score);
}

/* An expert's activation of its gate g and up u (model_arch_moe). */
static double ref_expert_act(const struct model_arch_moe *am, double g, double u)
{
	if (am->act == MODEL_EXPERT_SWIGLU_OAI) {
		double lim = am->act_limit;
		g = fmin(g, lim);
		u = fmax(fmin(u, lim), -lim);
		return g / (1.0 + exp(-am->act_alpha * g)) * (u + 1.0);
	}
	return g / (1.0 + exp(-g)) * u;
}

/* sel (k): the experts with the largest router logits lg (ne), largest
 * first; w (k): their weights by the row's gating. */
static void ref_route(const struct model_arch_moe *am, const double *lg, int ne, int k, int *sel,
                      double *w)
{
	bool taken[256] = {false};
	ck_assert_int_le(ne, 256);
	for (int j = 0; j < k; j++) {
		int best = -1;
		for (int e = 0; e < ne; e++)
			if (!taken[e] && (best < 0 || lg[e] > lg[best]))
				best = e;
		taken[best] = true;
		sel[j] = best;
	}
	double mx = lg[sel[0]], sum = 0, chosen = 0;
	for (int e = 0; e < ne; e++)
		if (am->gating == MODEL_GATING_SOFTMAX || taken[e])
			sum += exp(lg[e] - mx);
	for (int j = 0; j < k; j++)
		chosen += w[j] = exp(lg[sel[j]] - mx) / sum;
	if (am->gating == MODEL_GATING_SOFTMAX && am->norm_weights)
		for (int j = 0; j < k; j++)
			w[j] /= chosen;
}

/* The bias of expert e in biases (n_experts, width), or NULL. */
static const float *expert_bias(const float *biases, int e, int width)
{
	return biases ? biases + (size_t)e * width : NULL;
}

/* The mixture-of-experts feed-forward of one normed row xb into out (dim). */
static void ref_moe(const struct model *m, const struct model_layer *L, const double *xb,
                    double *out)
{
	const struct model_hparams *hp = &m->hp;
	const struct model_arch_moe *am = model_arch_moe(hp->arch);
	int ne = hp->n_experts, k = hp->n_experts_used, eff = hp->expert_ffn_dim;
	double *lg = malloc(ne * sizeof(double)), *g = malloc(eff * sizeof(double));
	double *u = malloc(eff * sizeof(double)), *d = malloc(hp->dim * sizeof(double));
	int sel[256] = {0};
	double w[256];
	ref_matvec(&L->w_router, xb, L->b_router, lg);
	ref_route(am, lg, ne, k, sel, w);
	memset(out, 0, hp->dim * sizeof(double));
	for (int j = 0; j < k; j++) {
		int e = sel[j];
		ref_matvec(&L->exp_gate[e], xb, expert_bias(L->exp_b_gate, e, eff), g);
		ref_matvec(&L->exp_up[e], xb, expert_bias(L->exp_b_up, e, eff), u);
		for (int i = 0; i < eff; i++)
			g[i] = ref_expert_act(am, g[i], u[i]);
		ref_matvec(&L->exp_down[e], g, expert_bias(L->exp_b_down, e, hp->dim), d);
		for (int i = 0; i < hp->dim; i++)
			out[i] += w[j] * d[i];
	}
	free(lg);
	free(g);
	free(u);
	free(d);
}

static void ref_layer(const struct model *m, const struct model_layer *L, struct ref_buf *b)
{
	const struct model_hparams *hp = &m->hp;
	for (int t = 0; t < b->n; t++)
		ref_rmsnorm(b->x + (size_t)t * b->dim, L->attn_norm, b->dim, hp->norm_eps,
		            b->xb + (size_t)t * b->dim);
	ref_qkv(m, L, b);
	ref_attention(hp, L->attn_sinks, b);
	for (int t = 0; t < b->n; t++) {
		double *x = b->x + (size_t)t * b->dim;
		ref_matvec(&L->wo, b->att + (size_t)t * b->qd, L->bo, b->proj);
		for (int i = 0; i < b->dim; i++)
			x[i] += b->proj[i];
		ref_rmsnorm(x, L->ffn_norm, b->dim, hp->norm_eps, b->xb);
		if (L->exp_gate) {
			ref_moe(m, L, b->xb, b->proj);
			for (int i = 0; i < b->dim; i++)
				x[i] += b->proj[i];
			continue;
		}
		ref_matvec(&L->w_gate, b->xb, NULL, b->gate);
		ref_matvec(&L->w_up, b->xb, NULL, b->up);
		for (int i = 0; i < b->ffn; i++)
			b->gate[i] = b->gate[i] / (1.0 + exp(-b->gate[i])) * b->up[i];
		ref_matvec(&L->w_down, b->gate, NULL, b->proj);
		for (int i = 0; i < b->dim; i++)
			x[i] += b->proj[i];
	}
}

/* logits (n_vocab) of the last of the n tokens ids. */
static void ref_forward(const struct model *m, const int32_t *ids, int n, double *logits)
{
	const struct model_hparams *hp = &m->hp;
	struct ref_buf b = {.n = n,
	                    .dim = hp->dim,
	                    .qd = hp->n_heads * hp->head_dim,
	                    .kvd = hp->n_kv_heads * hp->head_dim,
	                    .ffn = hp->ffn_dim};
	double **bufs[] = {&b.x, &b.xb, &b.q, &b.k, &b.v, &b.att, &b.proj, &b.gate, &b.up};
	size_t lens[] = {(size_t)n * b.dim, (size_t)n * b.dim, (size_t)n * b.qd,
	                 (size_t)n * b.kvd, (size_t)n * b.kvd, (size_t)n * b.qd,
	                 (size_t)b.dim,     (size_t)b.ffn,     (size_t)b.ffn};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		*bufs[i] = calloc(lens[i], sizeof(double));
	const float *E = rows_of(&m->token_embd);
	for (int t = 0; t < n; t++)
		for (int i = 0; i < b.dim; i++)
			b.x[(size_t)t * b.dim + i] = E[(size_t)ids[t] * b.dim + i];
	for (int l = 0; l < hp->n_layers; l++)
		ref_layer(m, &m->layers[l], &b);
	ref_rmsnorm(b.x + (size_t)(n - 1) * b.dim, m->output_norm, b.dim, hp->norm_eps, b.xb);
	ref_matvec(&m->output, b.xb, NULL, logits);
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		free(*bufs[i]);
}

/* ------------------------------------------------------------------------
 * The CPU backend. */

struct cpu_run {
	struct backend *be;
	struct backend_session *s;
	struct cache_geometry g;
};

static void cpu_open(struct cpu_run *r, const struct model *m)
{
	char err[SINKD_ERR_LEN];
	struct backend_options opt = {.n_threads = 2, .parallel_min_macs = 1};
	ck_assert_msg(backend_cpu_new(m, &opt, &r->be, err, sizeof(err)) == 0, "%s", err);
	r->g = tu_model_geometry(&m->hp, 1024);
	r->g.strategy = CACHE_STRATEGY_SLIDING_WINDOW;
	r->g.max_context_length = 2048;
	ck_assert_msg(r->be->ops->session_new(r->be, &r->g, &r->s, err, sizeof(err)) == 0, "%s",
	              err);
}

static void cpu_close(struct cpu_run *r)
{
	r->be->ops->session_free(r->be, r->s);
	backend_free(r->be);
}

/* The last token's logits of ids run through session s in chunks of 7. */
static void session_prefill(struct backend *be, struct backend_session *s, const int32_t *ids,
                            int n, float *logits)
{
	struct backend_token batch[7];
	char err[SINKD_ERR_LEN];
	for (int i = 0; i < n; i += 7) {
		int c = n - i < 7 ? n - i : 7;
		for (int j = 0; j < c; j++)
			batch[j] = (struct backend_token){
			    .session = s, .token = ids[i + j], .want_logits = i + j == n - 1};
		ck_assert_msg(be->ops->forward(be, batch, (size_t)c, logits, err, sizeof(err)) == 0,
		              "%s", err);
	}
}

/* The same through r's session, a new one. */
static void cpu_prefill(struct cpu_run *r, const int32_t *ids, int n, float *logits)
{
	session_prefill(r->be, r->s, ids, n, logits);
}

#define N_IDS 23

/* The CPU logits of m after N_IDS tokens against the reference's of
 * m_ref (the same network, F32): max |diff| / max |logit|, which must stay
 * below tol; logits_out (n_vocab) gets the CPU's when not NULL. */
static double check_against(const struct model *m, const struct model *m_ref, double tol,
                            float *logits_out)
{
	int32_t ids[N_IDS];
	for (int i = 0; i < N_IDS; i++)
		ids[i] = (int32_t)((i * 37 + 5) % m->hp.n_vocab);
	int nv = m->hp.n_vocab;
	float *got = malloc((size_t)nv * sizeof(float));
	double *want = malloc((size_t)nv * sizeof(double));
	struct cpu_run r;
	cpu_open(&r, m);
	cpu_prefill(&r, ids, N_IDS, got);
	cpu_close(&r);
	ref_forward(m_ref, ids, N_IDS, want);
	double diff = 0, top = 0;
	for (int i = 0; i < nv; i++) {
		ck_assert(isfinite(got[i]));
		diff = fmax(diff, fabs(got[i] - want[i]));
		top = fmax(top, fabs(want[i]));
	}
	ck_assert_double_gt(top, 0.0);
	ck_assert_msg(diff / top < tol, "logits differ from the reference by %g of %g", diff, top);
	if (logits_out)
		memcpy(logits_out, got, (size_t)nv * sizeof(float));
	free(got);
	free(want);
	return diff / top;
}

/* check_against for an F32 model and its own reference, within 1e-4. */
static double check_against_reference(const struct model *m, float *logits_out)
{
	return check_against(m, m, 1e-4, logits_out);
}

/* ------------------------------------------------------------------------
 * Heads from attention.key_length. */

/* llama with 4 heads of 32 against embedding 64 (--head-dim writes
 * key_length and value_length): the matrices are 4 x 32 wide, the forward
 * matches the reference, and the cache geometry and a session snapshot
 * carry width 32, which a model of width 16 does not take. */
START_TEST(test_key_length_heads)
{
	char path[256], err[SINKD_ERR_LEN];
	struct model *m = make_model(path, sizeof(path),
	                             "--arch llama --dim 64 --heads 4 --kv-heads 2 --head-dim 32");
	ck_assert_int_eq(m->hp.head_dim, 32);
	ck_assert_int_eq(m->hp.rope_dim, 32);
	ck_assert_int_eq(m->layers[0].wq.rows, 128);
	ck_assert_int_eq(m->layers[0].wk.rows, 64);
	ck_assert_int_eq(m->layers[0].wo.cols, 128);
	ck_assert_int_eq(m->layers[0].wo.rows, 64);
	check_against_reference(m, NULL);

	struct cpu_run r;
	cpu_open(&r, m);
	ck_assert_int_eq(r.g.head_dim, 32);
	int32_t ids[9] = {3, 4, 5, 6, 7, 8, 9, 10, 11};
	float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
	cpu_prefill(&r, ids, 9, logits);
	struct kv_image im;
	ck_assert_msg(r.be->ops->session_export(r.be, r.s, &im, err, sizeof(err)) == 0, "%s", err);
	struct snapshot sn = {
	    .n_vocab = (uint32_t)m->hp.n_vocab, .geom = r.g, .tokens_seen = 9, .kv = im};
	strcpy(sn.arch, "llama");
	strcpy(sn.id, "00ff00ff");
	unsigned char *buf;
	size_t len;
	ck_assert_msg(snapshot_encode(&sn, &buf, &len, err, sizeof(err)) == 0, "%s", err);
	struct snapshot_expect ex = {.arch = m->hp.arch,
	                             .n_vocab = (uint32_t)m->hp.n_vocab,
	                             .n_layers = m->hp.n_layers,
	                             .n_kv_heads = m->hp.n_kv_heads,
	                             .head_dim = m->hp.head_dim,
	                             .rope_dim = m->hp.rope_dim,
	                             .rope_theta = m->hp.rope_theta,
	                             .rope_neox = model_arch_rope_neox(m->hp.arch),
	                             .rope_freq_scale = m->hp.rope_freq_scale};
	struct snapshot back;
	ck_assert_msg(snapshot_decode(buf, len, &ex, &back, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(back.geom.head_dim, 32);
	ck_assert(cache_geometry_equal(&back.geom, &r.g));
	/* a new session of the same geometry takes it */
	r.be->ops->session_free(r.be, r.s);
	ck_assert_msg(r.be->ops->session_new(r.be, &back.geom, &r.s, err, sizeof(err)) == 0, "%s",
	              err);
	ck_assert_msg(r.be->ops->session_import(r.be, r.s, &back.kv, err, sizeof(err)) == 0, "%s",
	              err);
	snapshot_release(&back);
	ex.head_dim = 16; /* embedding_length / head_count: another shape */
	ck_assert_int_eq(snapshot_decode(buf, len, &ex, &back, err, sizeof(err)),
	                 SDERR_MODEL_MISMATCH);
	ck_assert_msg(strstr(err, "head_dim 32"), "%s", err);
	free(buf);
	kv_image_free(&im);
	free(logits);
	cpu_close(&r);
	model_free(m);
	unlink(path);
}
END_TEST

/* The same shape with the heads split from the embedding (no --head-dim)
 * still matches: the reference is not tuned to the wide case. */
START_TEST(test_split_heads)
{
	char path[256];
	struct model *m = make_model(path, sizeof(path), "--arch llama --dim 64 --heads 4");
	ck_assert_int_eq(m->hp.head_dim, 16);
	check_against_reference(m, NULL);
	model_free(m);
	unlink(path);
}
END_TEST

/* ------------------------------------------------------------------------
 * qwen3: QK-norm. */

/* The largest |a - b| over n logits. */
static double max_diff(const float *a, const float *b, int n)
{
	double d = 0;
	for (int i = 0; i < n; i++)
		d = fmax(d, fabs((double)a[i] - b[i]));
	return d;
}

/* qwen3 with heads of 32 against 64 / 4: the norms sinkd-mkmodel writes
 * (around 1, not all 1), then query norms of all 2s and of all 1s: each
 * matches the reference, and the two give other logits (a forward that
 * skipped the norm would give the same). */
START_TEST(test_qwen3_qk_norm)
{
	char path[256];
	struct model *m = make_model(path, sizeof(path),
	                             "--arch qwen3 --dim 64 --heads 4 --kv-heads 2 --head-dim 32");
	ck_assert_str_eq(model_arch_name(m->hp.arch), "qwen3");
	ck_assert_int_eq(m->hp.head_dim, 32);
	ck_assert(!m->hp.has_qkv_bias);
	const struct model_layer *L0 = &m->layers[0];
	ck_assert_ptr_nonnull(L0->q_norm);
	ck_assert_ptr_nonnull(L0->k_norm);
	bool all_one = true;
	for (int i = 0; i < 32; i++)
		all_one = all_one && L0->q_norm[i] == 1.0f && L0->k_norm[i] == 1.0f;
	ck_assert(!all_one);
	check_against_reference(m, NULL);

	int nv = m->hp.n_vocab;
	float twos[32], ones[32], *with_twos = malloc((size_t)nv * 4), *with_ones = malloc(nv * 4);
	for (int i = 0; i < 32; i++)
		twos[i] = 2.0f, ones[i] = 1.0f;
	for (int l = 0; l < m->hp.n_layers; l++)
		m->layers[l].q_norm = twos;
	check_against_reference(m, with_twos);
	for (int l = 0; l < m->hp.n_layers; l++)
		m->layers[l].q_norm = ones;
	check_against_reference(m, with_ones);
	double top = 0;
	for (int i = 0; i < nv; i++)
		top = fmax(top, fabs(with_ones[i]));
	ck_assert_msg(max_diff(with_twos, with_ones, nv) > 1e-3 * top,
	              "query norms of 2 and of 1 give the same logits");
	free(with_twos);
	free(with_ones);
	model_free(m);
	unlink(path);
}
END_TEST

/* ------------------------------------------------------------------------
 * Mixture of experts. */

#define MOE_SHAPE "--dim 64 --heads 4 --kv-heads 2 --head-dim 32 --expert-ffn 64 "

/* The learned sink logits left out on both sides: the learned-sink tests
 * check attention with them; these check the experts. */
static void drop_sinks(struct model *m)
{
	for (int l = 0; l < m->hp.n_layers; l++)
		m->layers[l].attn_sinks = NULL;
}

/* gpt-oss: biases everywhere (Q/K/V, attention output, router, experts),
 * top-k then softmax, the clamped SwiGLU; then gate and up biases of +-12
 * that drive the activation past its limit of 7 both ways (random weights
 * alone stay far inside it). */
START_TEST(test_gpt_oss_experts)
{
	char path[256];
	struct model *m = make_model(path, sizeof(path),
	                             "--arch gpt-oss " MOE_SHAPE "--experts 8 --experts-used 2");
	ck_assert_str_eq(model_arch_name(m->hp.arch), "gpt-oss");
	ck_assert_int_eq(m->hp.n_experts, 8);
	ck_assert_int_eq(m->hp.expert_ffn_dim, 64);
	const struct model_layer *L0 = &m->layers[0];
	ck_assert(L0->bo && L0->b_router && L0->exp_b_gate && L0->exp_b_up && L0->exp_b_down);
	drop_sinks(m);
	check_against_reference(m, NULL);
	int n = m->hp.n_experts * m->hp.expert_ffn_dim;
	float *big = malloc((size_t)n * sizeof(float));
	for (int i = 0; i < n; i++)
		big[i] = i % 3 == 0 ? 12.0f : i % 3 == 1 ? -12.0f : 0.5f;
	for (int l = 0; l < m->hp.n_layers; l++)
		m->layers[l].exp_b_gate = m->layers[l].exp_b_up = big;
	check_against_reference(m, NULL);
	free(big);
	model_free(m);
	unlink(path);
}
END_TEST

/* qwen3moe: softmax over all experts, top-k, weights renormalised, plain
 * SwiGLU, QK-norm, no biases; with k = 2 of 8, k = 1 and k = all 4. */
START_TEST(test_qwen3moe_experts)
{
	const char *counts[] = {"--experts 8 --experts-used 2", "--experts 8 --experts-used 1",
	                        "--experts 4 --experts-used 4"};
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		char path[256], opts[256];
		snprintf(opts, sizeof(opts), "--arch qwen3moe " MOE_SHAPE "%s", counts[i]);
		struct model *m = make_model(path, sizeof(path), opts);
		ck_assert_str_eq(model_arch_name(m->hp.arch), "qwen3moe");
		ck_assert_ptr_null(m->layers[0].exp_b_gate);
		ck_assert_ptr_null(m->layers[0].b_router);
		check_against_reference(m, NULL);
		model_free(m);
		unlink(path);
	}
}
END_TEST

/* A gpt-oss file as sinkd-mkmodel --type mxfp4 writes it (experts MXFP4,
 * the other matrices Q8_0): its experts are read as stored, and its logits
 * match the reference forward of the same weights converted to F32 within
 * what rounding the activations to int8 costs. */
START_TEST(test_gpt_oss_mxfp4)
{
	char path[256], f32[300], cmd[1024], err[SINKD_ERR_LEN];
	struct model *m = make_model(path, sizeof(path),
	                             "--arch gpt-oss " MOE_SHAPE "--experts 8 --experts-used 2 "
	                             "--type mxfp4");
	ck_assert_int_eq(m->layers[0].exp_gate[0].type, GGML_TYPE_MXFP4);
	ck_assert_int_eq(m->layers[1].exp_down[7].type, GGML_TYPE_MXFP4);
	snprintf(f32, sizeof(f32), "%s.f32", path);
	snprintf(cmd, sizeof(cmd), "'%s' --from '%s' --out '%s' --type f32 >/dev/null",
	         mkmodel_path, path, f32);
	ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
	struct model *ref = NULL;
	ck_assert_msg(model_load(f32, NULL, &ref, err, sizeof(err)) == 0, "%s", err);
	drop_sinks(m);
	drop_sinks(ref);
	double d = check_against(m, ref, 2e-2, NULL);
	printf("gpt-oss MXFP4: |cpu - f32 reference| / max logit %.2e\n", d);
	model_free(ref);
	model_free(m);
	unlink(f32);
	unlink(path);
}
END_TEST

/* Each of 8 sessions' next-token logits in one batch of 8 (the tokens
 * grouped by expert together) equal its logits when that token is run
 * alone, within the CPU tolerance: on a gpt-oss F32 file (expert panels),
 * a qwen3moe Q8_0 file (experts packed) and a gpt-oss MXFP4 file. */
START_TEST(test_moe_batch_invariance)
{
	const char *files[] = {
	    "--arch gpt-oss " MOE_SHAPE "--experts 8 --experts-used 2",
	    "--arch qwen3moe " MOE_SHAPE "--experts 8 --experts-used 2 --type q8_0",
	    "--arch gpt-oss " MOE_SHAPE "--experts 8 --experts-used 2 --type mxfp4"};
	enum { N_SESS = 8, PROMPT = 9 };
	for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
		char path[256], err[SINKD_ERR_LEN];
		struct model *m = make_model(path, sizeof(path), files[f]);
		int nv = m->hp.n_vocab;
		struct cpu_run r;
		cpu_open(&r, m);
		float *alone = malloc((size_t)N_SESS * nv * sizeof(float));
		float *batched = malloc((size_t)N_SESS * nv * sizeof(float));
		struct backend_session *s[N_SESS];
		struct backend_token batch[N_SESS];
		for (int j = 0; j < N_SESS; j++) {
			int32_t ids[PROMPT + 1];
			for (int i = 0; i <= PROMPT; i++)
				ids[i] = (int32_t)((j * 53 + i * 17 + 5) % nv);
			struct backend_session *one;
			ck_assert(r.be->ops->session_new(r.be, &r.g, &one, err, sizeof(err)) == 0);
			session_prefill(r.be, one, ids, PROMPT + 1, alone + (size_t)j * nv);
			r.be->ops->session_free(r.be, one);
			ck_assert(r.be->ops->session_new(r.be, &r.g, &s[j], err, sizeof(err)) == 0);
			session_prefill(r.be, s[j], ids, PROMPT, batched);
			batch[j] = (struct backend_token){
			    .session = s[j], .token = ids[PROMPT], .want_logits = true};
		}
		ck_assert_msg(r.be->ops->forward(r.be, batch, N_SESS, batched, err, sizeof(err)) ==
		                  0,
		              "%s", err);
		for (int j = 0; j < N_SESS; j++) {
			const float *a = alone + (size_t)j * nv, *b = batched + (size_t)j * nv;
			double top = 0;
			for (int i = 0; i < nv; i++)
				top = fmax(top, fabs(a[i]));
			double d = max_diff(a, b, nv);
			ck_assert_msg(d <= 1e-4 * top, "%s: session %d differs by %g of %g",
			              files[f], j, d, top);
			r.be->ops->session_free(r.be, s[j]);
		}
		free(alone);
		free(batched);
		cpu_close(&r);
		model_free(m);
		unlink(path);
	}
}
END_TEST

int main(int argc, char **argv)
{
	mkmodel_path = argc > 1 ? argv[1] : NULL;
	if (mkmodel_path == NULL) {
		fprintf(stderr, "usage: %s path/to/sinkd-mkmodel\n", argv[0]);
		return 1;
	}
	Suite *s = suite_create("arch-forward");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_key_length_heads);
	tcase_add_test(tc, test_split_heads);
	tcase_add_test(tc, test_qwen3_qk_norm);
	tcase_add_test(tc, test_gpt_oss_experts);
	tcase_add_test(tc, test_qwen3moe_experts);
	tcase_add_test(tc, test_gpt_oss_mxfp4);
	tcase_add_test(tc, test_moe_batch_invariance);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
