/* Attention of one query over the tiered cache of one layer:
 * softmax(q.k / sqrt(head_dim)) over sink + compressed + staging + hot
 * tokens, in fp32 with a max-subtracted softmax, GQA (query head h reads kv
 * head h / (n_heads / n_kv_heads)).  Quantized tokens are used without
 * materialising them:
 *   keys per channel   q.k = sum_j (q_j*scale_j)*c_j + sum_j q_j*min_j
 *   rows per token     q.k = scale * sum_j q_j*c_j + min * sum_j q_j
 *   values per token   out += (p*scale) * c + p*min
 * Reads the cache only; every temporary lives in the caller's scratch, so
 * disjoint head ranges may run on several threads at once.  It does not
 * change tiers or positions (sinkcache.c). */
#include <math.h>
#include <string.h>

#include "cache/kvquant.h"
#include "cache/rope.h"
#include "cache/sinkcache_impl.h"

/* Scratch of one head: scores (capacity) then these (head_dim each). */
struct attend_tmp {
	float *scores;
	float *qw;   /* query rotated for window keys, scaled by 1/sqrt(d) */
	float *qs;   /* query rotated for sink keys, scaled */
	float *row;  /* a key or value row converted from f16/bf16 */
	float *qsc;  /* qw * per-channel scale of a group */
	float *acc;  /* output accumulator */
	float *bias; /* (1) sum of p*min of quantized values */
};

static inline float attend_dot(const float *a, const float *b, int n)
{
	float s = 0.0f;
	for (int j = 0; j < n; j++)
		s += a[j] * b[j];
	return s;
}

static inline void attend_axpy(float *y, float a, const float *x, int n)
{
	for (int j = 0; j < n; j++)
		y[j] += a * x[j];
}

static const float *attend_load(const struct sinkcache *c, const unsigned char *row, float *tmp)
{
	if (c->g.dtype == KV_DTYPE_F32)
		return (const float *)row;
	kv_row_load(c->g.dtype, row, tmp, c->g.head_dim);
	return tmp;
}

/* Full-precision ring `r` of kv head kh: scores (r->n) or, with p != NULL,
 * accumulates values weighted by p. */
static void attend_fp_ring(const struct sinkcache *c, const struct kv_ring *r,
                           const unsigned char *base, int kh, const float *q, float *scores,
                           const float *p, struct attend_tmp *t)
{
	int d = c->g.head_dim;
	const unsigned char *head_base = base + (size_t)kh * (size_t)r->cap * c->fp_row;
	for (int i = 0; i < r->n; i++) {
		const unsigned char *row = head_base + (size_t)kv_ring_slot(r, i) * c->fp_row;
		const float *x = attend_load(c, row, t->row);
		if (p)
			attend_axpy(t->acc, p[i], x, d);
		else
			scores[i] = attend_dot(q, x, d);
	}
}

static inline float attend_code_dot(const float *q, const uint8_t *codes, int d, int bits)
{
	float s = 0.0f;
	if (bits == 8) {
		for (int j = 0; j < d; j++)
			s += q[j] * (float)codes[j];
	} else {
		for (int j = 0; j < d / 2; j++) {
			s += q[2 * j] * (float)(codes[j] & 15);
			s += q[2 * j + 1] * (float)(codes[j] >> 4);
		}
	}
	return s;
}

static inline void attend_code_axpy(float *y, float a, const uint8_t *codes, int d, int bits)
{
	if (bits == 8) {
		for (int j = 0; j < d; j++)
			y[j] += a * (float)codes[j];
	} else {
		for (int j = 0; j < d / 2; j++) {
			y[2 * j] += a * (float)(codes[j] & 15);
			y[2 * j + 1] += a * (float)(codes[j] >> 4);
		}
	}
}

/* Sink tier: scores against qs, or values weighted by p. */
static void attend_sinks(const struct sinkcache *c, const struct kv_layer *L, int kh, float *scores,
                         const float *p, struct attend_tmp *t)
{
	int d = c->g.head_dim, bits = c->g.quant_bits;
	if (!c->sink_quant) {
		struct kv_ring r = {0, L->n_sink, c->n_sink_cap};
		attend_fp_ring(c, &r, p ? L->sink_v : L->sink_k, kh, t->qs, scores, p, t);
		return;
	}
	float qsum = 0.0f;
	for (int j = 0; j < d && !p; j++)
		qsum += t->qs[j];
	for (int i = 0; i < L->n_sink; i++) {
		size_t at = (size_t)kh * (size_t)c->n_sink_cap + (size_t)i;
		if (p) {
			const float *vp = &L->sink_vp[2 * at];
			attend_code_axpy(t->acc, p[i] * vp[0], L->sink_v + at * c->code_row, d,
			                 bits);
			*t->bias += p[i] * vp[1];
		} else {
			const float *kp = &L->sink_kp[2 * at];
			scores[i] =
			    kp[0] * attend_code_dot(t->qs, L->sink_k + at * c->code_row, d, bits) +
			    kp[1] * qsum;
		}
	}
}

/* Quantized groups, oldest first (the oldest may have lost its first tokens). */
static int attend_groups(const struct sinkcache *c, const struct kv_layer *L, int kh, float *scores,
                         const float *p, struct attend_tmp *t)
{
	int d = c->g.head_dim, gs = c->group, bits = c->g.quant_bits, n = 0;
	for (int i = 0; i < L->groups.n; i++) {
		size_t gh =
		    (size_t)kv_ring_slot(&L->groups, i) * (size_t)c->g.n_kv_heads + (size_t)kh;
		const uint8_t *kc = L->gk + gh * (size_t)gs * c->code_row;
		const uint8_t *vc = L->gv + gh * (size_t)gs * c->code_row;
		const float *kp = L->gkp + gh * 2 * (size_t)d, *vp = L->gvp + gh * (size_t)gs * 2;
		int first = i == 0 ? L->grp_dropped : 0;
		float qm = 0.0f;
		if (!p) {
			for (int j = 0; j < d; j++) {
				t->qsc[j] = t->qw[j] * kp[j];
				qm += t->qw[j] * kp[d + j];
			}
		}
		for (int r = first; r < gs; r++, n++) {
			if (p) {
				attend_code_axpy(t->acc, p[n] * vp[2 * r],
				                 vc + (size_t)r * c->code_row, d, bits);
				*t->bias += p[n] * vp[2 * r + 1];
			} else {
				scores[n] = qm + attend_code_dot(
				                     t->qsc, kc + (size_t)r * c->code_row, d, bits);
			}
		}
	}
	return n;
}

/* Scores (p == NULL) or value accumulation over all tiers, in one order. */
static int attend_tiers(const struct sinkcache *c, const struct kv_layer *L, int kh, const float *p,
                        struct attend_tmp *t)
{
	int n = L->n_sink;
	attend_sinks(c, L, kh, t->scores, p, t);
	n += attend_groups(c, L, kh, t->scores + n, p ? p + n : NULL, t);
	attend_fp_ring(c, &L->stage, p ? L->st_v : L->st_k, kh, t->qw, t->scores + n,
	               p ? p + n : NULL, t);
	n += L->stage.n;
	attend_fp_ring(c, &L->hot, p ? L->hot_v : L->hot_k, kh, t->qw, t->scores + n,
	               p ? p + n : NULL, t);
	return n + L->hot.n;
}

static void attend_rotate_query(const struct sinkcache *c, const struct kv_layer *L,
                                const float *qh, struct attend_tmp *t)
{
	int d = c->g.head_dim;
	float scale = 1.0f / sqrtf((float)d);
	memcpy(t->qw, qh, (size_t)d * sizeof(float));
	memcpy(t->qs, qh, (size_t)d * sizeof(float));
	rope_apply(t->qw, L->cs_win, c->g.rope_dim, c->g.rope_neox);
	rope_apply(t->qs, L->cs_sink, c->g.rope_dim, c->g.rope_neox);
	for (int j = 0; j < d; j++) {
		t->qw[j] *= scale;
		t->qs[j] *= scale;
	}
}

/* Softmax of scores[0..n) in place (probabilities); returns the sink share. */
static float attend_softmax(float *scores, int n, int n_sink)
{
	float mx = -INFINITY, sum = 0.0f, sink = 0.0f;
	for (int i = 0; i < n; i++)
		mx = fmaxf(mx, scores[i]);
	for (int i = 0; i < n; i++) {
		scores[i] = expf(scores[i] - mx);
		sum += scores[i];
	}
	float inv = 1.0f / sum;
	for (int i = 0; i < n; i++) {
		scores[i] *= inv;
		if (i < n_sink)
			sink += scores[i];
	}
	return sink;
}

void sinkcache_attend(const struct sinkcache *c, int layer, const float *q, int n_heads,
                      int head_begin, int head_end, float *out, float *scratch, float *sink_mass)
{
	const struct kv_layer *L = &c->layers[layer];
	int d = c->g.head_dim, ratio = n_heads / c->g.n_kv_heads;
	int cap = c->n_sink_cap + c->window_cap;
	float bias = 0.0f;
	struct attend_tmp t = {
	    .scores = scratch,
	    .qw = scratch + cap,
	    .qs = scratch + cap + d,
	    .row = scratch + cap + 2 * d,
	    .qsc = scratch + cap + 3 * d,
	    .acc = scratch + cap + 4 * d,
	    .bias = &bias,
	};
	for (int h = head_begin; h < head_end; h++) {
		int kh = h / ratio;
		float *oh = out + (size_t)h * d;
		attend_rotate_query(c, L, q + (size_t)h * d, &t);
		int n = attend_tiers(c, L, kh, NULL, &t);
		if (n == 0) {
			memset(oh, 0, (size_t)d * sizeof(float));
			if (sink_mass)
				sink_mass[h] = 0.0f;
			continue;
		}
		float sink = attend_softmax(t.scores, n, L->n_sink);
		if (sink_mass)
			sink_mass[h] = sink;
		memset(t.acc, 0, (size_t)d * sizeof(float));
		bias = 0.0f;
		attend_tiers(c, L, kh, t.scores, &t);
		for (int j = 0; j < d; j++)
			oh[j] = t.acc[j] + bias;
	}
}
