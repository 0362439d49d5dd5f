/* The gemma fixture (gemma_ref.h): a GGUF writer of random gemma2/gemma3
 * models and a float64 brute-force forward of them, written from
 * llama.cpp's graph (src/models/gemma2.cpp, gemma3.cpp) and hparams, not
 * from sinkd's loader or backends. */
#include "gemma_ref.h"

#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf_write.h"
#include "util/errbuf.h"

struct gemma_layer {
	float *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *gate, *up, *down;
	float *post_attn_norm, *post_ffw_norm, *q_norm, *k_norm;
};

struct gemma_model {
	struct gemma_spec sp;
	bool qk_norm; /* gemma3 */
	float *embd;  /* (vocab, dim) */
	float *out_norm;
	struct gemma_layer *l;
};

struct gemma_spec gemma_spec_default(const char *arch)
{
	return (struct gemma_spec){.arch = arch,
	                           .dim = 32,
	                           .layers = 2,
	                           .heads = 4,
	                           .kv_heads = 2,
	                           .head_dim = 16,
	                           .ffn = 48,
	                           .vocab = 64,
	                           .attn_softcap = -1,
	                           .final_softcap = -1,
	                           .sliding_window = -1,
	                           .swa_pattern = -1,
	                           .rope_theta_swa = -1,
	                           .rope_theta = 10000.0f,
	                           .rope_factor = 0,
	                           .wscale = 0.35f,
	                           .key_length_swa = -1,
	                           .seed = 1};
}

static float uniform(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* A tensor's values (n), made up: weights uniform, norms around 1. */
static float *values(struct gemma_model *g, size_t n, bool norm, uint64_t *rng)
{
	float *v = malloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		v[i] = norm ? 1.0f + 0.3f * uniform(rng) : g->sp.wscale * uniform(rng);
	return v;
}

struct tensor_out {
	char name[64];
	const float *data;
	uint64_t cols, rows; /* rows 0: a vector */
};

static int tensor_list(struct gemma_model *g, struct tensor_out *t, uint64_t *rng)
{
	const struct gemma_spec *sp = &g->sp;
	uint64_t d = (uint64_t)sp->dim, q = (uint64_t)sp->heads * sp->head_dim,
	         kv = (uint64_t)sp->kv_heads * sp->head_dim, f = (uint64_t)sp->ffn;
	int n = 0;
#define T(ptr, c, r, norm, ...)                                                                    \
	do {                                                                                       \
		(ptr) = values(g, (size_t)(c) * ((r) ? (r) : 1), norm, rng);                       \
		snprintf(t[n].name, sizeof(t[n].name), __VA_ARGS__);                              \
		t[n].data = (ptr);                                                                 \
		t[n].cols = (c);                                                                   \
		t[n].rows = (r);                                                                   \
		n++;                                                                               \
	} while (0)
	T(g->embd, d, (uint64_t)sp->vocab, false, "token_embd.weight");
	T(g->out_norm, d, 0, true, "output_norm.weight");
	for (int i = 0; i < sp->layers; i++) {
		struct gemma_layer *L = &g->l[i];
		T(L->attn_norm, d, 0, true, "blk.%d.attn_norm.weight", i);
		T(L->wq, d, q, false, "blk.%d.attn_q.weight", i);
		T(L->wk, d, kv, false, "blk.%d.attn_k.weight", i);
		T(L->wv, d, kv, false, "blk.%d.attn_v.weight", i);
		T(L->wo, q, d, false, "blk.%d.attn_output.weight", i);
		T(L->post_attn_norm, d, 0, true, "blk.%d.post_attention_norm.weight", i);
		if (g->qk_norm) {
			T(L->q_norm, (uint64_t)sp->head_dim, 0, true, "blk.%d.attn_q_norm.weight", i);
			T(L->k_norm, (uint64_t)sp->head_dim, 0, true, "blk.%d.attn_k_norm.weight", i);
		}
		T(L->ffn_norm, d, 0, true, "blk.%d.ffn_norm.weight", i);
		T(L->gate, d, f, false, "blk.%d.ffn_gate.weight", i);
		T(L->up, d, f, false, "blk.%d.ffn_up.weight", i);
		T(L->down, f, d, false, "blk.%d.ffn_down.weight", i);
		T(L->post_ffw_norm, d, 0, true, "blk.%d.post_ffw_norm.weight", i);
	}
#undef T
	return n;
}

static void add_keys(struct gguf_writer *w, const struct gemma_spec *sp)
{
	char k[128];
	const char *a = sp->arch;
#define U32(name, v)                                                                               \
	do {                                                                                       \
		snprintf(k, sizeof(k), "%s." name, a);                                             \
		ck_assert_int_eq(gguf_writer_add_u32(w, k, (uint32_t)(v)), 0);                     \
	} while (0)
#define F32(name, v)                                                                               \
	do {                                                                                       \
		snprintf(k, sizeof(k), "%s." name, a);                                             \
		ck_assert_int_eq(gguf_writer_add_f32(w, k, (float)(v)), 0);                        \
	} while (0)
	ck_assert_int_eq(gguf_writer_add_string(w, "general.architecture", a), 0);
	U32("context_length", 8192);
	U32("embedding_length", sp->dim);
	U32("block_count", sp->layers);
	U32("feed_forward_length", sp->ffn);
	U32("attention.head_count", sp->heads);
	U32("attention.head_count_kv", sp->kv_heads);
	U32("attention.key_length", sp->head_dim);
	U32("attention.value_length", sp->head_dim);
	F32("attention.layer_norm_rms_epsilon", 1e-6);
	F32("rope.freq_base", sp->rope_theta);
	if (sp->attn_softcap >= 0)
		F32("attn_logit_softcapping", sp->attn_softcap);
	if (sp->final_softcap >= 0)
		F32("final_logit_softcapping", sp->final_softcap);
	if (sp->sliding_window >= 0)
		U32("attention.sliding_window", sp->sliding_window);
	if (sp->swa_pattern >= 0)
		U32("attention.sliding_window_pattern", sp->swa_pattern);
	if (sp->key_length_swa >= 0)
		U32("attention.key_length_swa", sp->key_length_swa);
	if (sp->pattern_array) { /* as some converters write it: a bool per layer */
		uint8_t swa[64] = {0};
		snprintf(k, sizeof(k), "%s.attention.sliding_window_pattern", a);
		ck_assert_int_eq(gguf_writer_add_array(w, k, GGUF_VALUE_BOOL,
		                                       (uint64_t)sp->layers, swa),
		                 0);
	}
	if (sp->rope_theta_swa >= 0)
		F32("rope.freq_base_swa", sp->rope_theta_swa);
	if (sp->rope_factor > 0) {
		snprintf(k, sizeof(k), "%s.rope.scaling.type", a);
		ck_assert_int_eq(gguf_writer_add_string(w, k, "linear"), 0);
		F32("rope.scaling.factor", sp->rope_factor);
	}
#undef U32
#undef F32
}

struct gemma_model *gemma_write(const struct gemma_spec *sp, const char *path)
{
	struct gemma_model *g = calloc(1, sizeof(*g));
	g->sp = *sp;
	g->qk_norm = strcmp(sp->arch, "gemma3") == 0;
	g->l = calloc((size_t)sp->layers, sizeof(*g->l));
	int cap = 2 + 13 * sp->layers;
	struct tensor_out *t = calloc((size_t)cap, sizeof(*t));
	uint64_t rng = sp->seed;
	int n = tensor_list(g, t, &rng);
	char err[SINKD_ERR_LEN];
	struct gguf_writer *w;
	ck_assert_msg(gguf_writer_new(path, &w, err, sizeof(err)) == 0, "%s", err);
	add_keys(w, sp);
	for (int i = 0; i < n; i++) {
		uint64_t dims[2] = {t[i].cols, t[i].rows};
		ck_assert_int_eq(
		    gguf_writer_add_tensor(w, t[i].name, GGML_TYPE_F32, t[i].rows ? 2 : 1, dims), 0);
	}
	ck_assert_msg(gguf_writer_write_header(w, err, sizeof(err)) == 0, "%s", err);
	for (int i = 0; i < n; i++) {
		size_t bytes = t[i].cols * (t[i].rows ? t[i].rows : 1) * sizeof(float);
		ck_assert_msg(gguf_writer_write_data(w, t[i].data, bytes, err, sizeof(err)) == 0,
		              "%s", err);
	}
	ck_assert_msg(gguf_writer_finish(w, err, sizeof(err)) == 0, "%s", err);
	gguf_writer_free(w);
	free(t);
	return g;
}

void gemma_model_free(struct gemma_model *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->sp.layers; i++) {
		struct gemma_layer *L = &g->l[i];
		float *p[] = {L->attn_norm, L->wq,   L->wk, L->wv,   L->wo,
		              L->ffn_norm,  L->gate, L->up, L->down, L->post_attn_norm,
		              L->post_ffw_norm, L->q_norm, L->k_norm};
		for (size_t j = 0; j < sizeof(p) / sizeof(p[0]); j++)
			free(p[j]);
	}
	free(g->l);
	free(g->embd);
	free(g->out_norm);
	free(g);
}

/* ---- the reference forward ---------------------------------------------- */

#define EPS 1e-6

static void rmsnorm(double *x, const float *w, int n)
{
	double ss = 0;
	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	double s = 1.0 / sqrt(ss / n + EPS);
	for (int i = 0; i < n; i++)
		x[i] = x[i] * s * w[i];
}

/* y (rows) = W (rows, cols) x */
static void matvec(double *y, const float *w, const double *x, int rows, int cols)
{
	for (int r = 0; r < rows; r++) {
		double s = 0;
		for (int c = 0; c < cols; c++)
			s += (double)w[(size_t)r * cols + c] * x[c];
		y[r] = s;
	}
}

/* NeoX RoPE of one head at position pos. */
static void rope(double *x, int hd, int pos, double theta, double freq_scale)
{
	int half = hd / 2;
	for (int i = 0; i < half; i++) {
		double a = pos * freq_scale * pow(theta, -2.0 * i / hd);
		double x0 = x[i], x1 = x[i + half];
		x[i] = x0 * cos(a) - x1 * sin(a);
		x[i + half] = x0 * sin(a) + x1 * cos(a);
	}
}

/* The facts llama.cpp reads from the keys, with its defaults. */
struct facts {
	bool gemma2;
	double attn_cap, final_cap, theta_swa, scale;
	int window, period;
};

static struct facts facts_of(const struct gemma_spec *sp)
{
	struct facts f = {.gemma2 = strcmp(sp->arch, "gemma2") == 0};
	f.attn_cap = f.gemma2 ? (sp->attn_softcap >= 0 ? sp->attn_softcap : 50.0) : 0.0;
	f.final_cap = sp->final_softcap >= 0 ? sp->final_softcap : f.gemma2 ? 30.0 : 0.0;
	f.window = sp->sliding_window >= 0 ? sp->sliding_window : f.gemma2 ? 4096 : 0;
	f.period = sp->swa_pattern >= 0 ? sp->swa_pattern : f.gemma2 ? 2 : 6;
	f.theta_swa = sp->rope_theta_swa >= 0 ? sp->rope_theta_swa
	              : f.gemma2              ? sp->rope_theta
	                                      : 10000.0;
	/* llama.cpp's 27B rule: 46 layers (gemma2), 62 (gemma3) scale by the
	 * split width, as integers divided */
	bool big = sp->layers == (f.gemma2 ? 46 : 62);
	f.scale = 1.0 / sqrt((double)(big ? sp->dim / sp->heads : sp->head_dim));
	return f;
}

static bool layer_slides(const struct facts *f, int l)
{
	return f->window > 0 && (f->period == 0 || l % f->period < f->period - 1);
}

static double gelu(double x)
{
	return 0.5 * x * (1.0 + tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)));
}

/* Attention of position p of one layer: K, V (n, kv_heads*hd) rotated keys
 * and values of positions 0..p; q (heads*hd) rotated and scaled. */
static void attend(const struct gemma_model *g, const struct facts *f, bool slides,
                   const double *q, const double *K, const double *V, int p, double *out)
{
	const struct gemma_spec *sp = &g->sp;
	int hd = sp->head_dim, kvd = sp->kv_heads * hd;
	double *s = malloc((size_t)(p + 1) * sizeof(double));
	int first = slides && p - f->window + 1 > 0 ? p - f->window + 1 : 0;
	for (int h = 0; h < sp->heads; h++) {
		int kh = h / (sp->heads / sp->kv_heads);
		double mx = -INFINITY, sum = 0;
		for (int j = first; j <= p; j++) {
			double d = 0;
			for (int i = 0; i < hd; i++)
				d += q[h * hd + i] * K[(size_t)j * kvd + kh * hd + i];
			if (f->attn_cap > 0)
				d = f->attn_cap * tanh(d / f->attn_cap);
			s[j] = d;
			mx = fmax(mx, d);
		}
		for (int j = first; j <= p; j++)
			sum += (s[j] = exp(s[j] - mx));
		for (int i = 0; i < hd; i++) {
			double o = 0;
			for (int j = first; j <= p; j++)
				o += s[j] * V[(size_t)j * kvd + kh * hd + i];
			out[h * hd + i] = o / sum;
		}
	}
	free(s);
}

void gemma_reference(const struct gemma_model *g, const int32_t *ids, int n, double *logits)
{
	const struct gemma_spec *sp = &g->sp;
	struct facts f = facts_of(sp);
	int d = sp->dim, hd = sp->head_dim, qd = sp->heads * hd, kvd = sp->kv_heads * hd;
	double *x = malloc((size_t)n * d * sizeof(double)), *xb = malloc(d * sizeof(double));
	double *K = malloc((size_t)n * kvd * sizeof(double)), *V = malloc((size_t)n * kvd * sizeof(double));
	double *Q = malloc((size_t)n * qd * sizeof(double)), *att = malloc(qd * sizeof(double));
	double *o = malloc(d * sizeof(double)), *gt = malloc(sp->ffn * sizeof(double)),
	       *up = malloc(sp->ffn * sizeof(double));
	for (int p = 0; p < n; p++)
		for (int i = 0; i < d; i++)
			x[(size_t)p * d + i] =
			    (double)(g->embd[(size_t)ids[p] * d + i] * sqrtf((float)d));
	for (int l = 0; l < sp->layers; l++) {
		const struct gemma_layer *L = &g->l[l];
		bool slides = layer_slides(&f, l);
		double theta = slides ? f.theta_swa : sp->rope_theta;
		/* gemma2's sliding layers take the linear scaling too (llama.cpp's
		 * rope_freq_scale_train_swa), gemma3's turn unscaled */
		double fs = (!slides || f.gemma2) && sp->rope_factor > 0 ? 1.0 / sp->rope_factor
		                                                         : 1.0;
		for (int p = 0; p < n; p++) {
			memcpy(xb, x + (size_t)p * d, d * sizeof(double));
			rmsnorm(xb, L->attn_norm, d);
			double *q = Q + (size_t)p * qd, *k = K + (size_t)p * kvd;
			matvec(q, L->wq, xb, qd, d);
			matvec(k, L->wk, xb, kvd, d);
			matvec(V + (size_t)p * kvd, L->wv, xb, kvd, d);
			for (int h = 0; h < sp->heads; h++) {
				if (L->q_norm)
					rmsnorm(q + h * hd, L->q_norm, hd);
				rope(q + h * hd, hd, p, theta, fs);
				for (int i = 0; i < hd; i++)
					q[h * hd + i] *= f.scale;
			}
			for (int h = 0; h < sp->kv_heads; h++) {
				if (L->k_norm)
					rmsnorm(k + h * hd, L->k_norm, hd);
				rope(k + h * hd, hd, p, theta, fs);
			}
		}
		for (int p = 0; p < n; p++) {
			double *xp = x + (size_t)p * d;
			attend(g, &f, slides, Q + (size_t)p * qd, K, V, p, att);
			matvec(o, L->wo, att, d, qd);
			rmsnorm(o, L->post_attn_norm, d);
			for (int i = 0; i < d; i++)
				xp[i] += o[i];
			memcpy(xb, xp, d * sizeof(double));
			rmsnorm(xb, L->ffn_norm, d);
			matvec(gt, L->gate, xb, sp->ffn, d);
			matvec(up, L->up, xb, sp->ffn, d);
			for (int i = 0; i < sp->ffn; i++)
				gt[i] = gelu(gt[i]) * up[i];
			matvec(o, L->down, gt, d, sp->ffn);
			rmsnorm(o, L->post_ffw_norm, d);
			for (int i = 0; i < d; i++)
				xp[i] += o[i];
		}
	}
	memcpy(xb, x + (size_t)(n - 1) * d, d * sizeof(double));
	rmsnorm(xb, g->out_norm, d);
	matvec(logits, g->embd, xb, sp->vocab, d);
	for (int i = 0; f.final_cap > 0 && i < sp->vocab; i++)
		logits[i] = f.final_cap * tanh(logits[i] / f.final_cap);
	free(x), free(xb), free(K), free(V), free(Q), free(att), free(o), free(gt), free(up);
}

void gemma_reference_all_global(const struct gemma_model *g, const int32_t *ids, int n,
                                double *logits)
{
	struct gemma_model global = *g;
	global.sp.sliding_window = 0;
	gemma_reference(&global, ids, n, logits);
}
