/* Plain-C twins of the CUDA backend's kernels: the same arguments and the
 * same arithmetic on host memory, written to be obviously right rather than
 * fast.  Wherever production CPU code computes the same thing, the twin
 * calls it (rope_apply, dequantize_row, kv_row_store/load,
 * kvq_quant_row/channels, kvq_dequant_row, moe_expert_act), so a kernel
 * that matches its twin matches the CPU backend.  Tests only; the backend
 * never runs these. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvquant.h"
#include "cache/rope.h"
#include "cuda_kernels.h"
#include "engine/moe.h"
#include "model/dequant.h"

float twin_dt_load(const void *row, int dtype, size_t i)
{
	if (dtype == CUDA_DT_F32)
		return ((const float *)row)[i];
	uint16_t h = ((const uint16_t *)row)[i];
	return dtype == CUDA_DT_F16 ? kv_f16_to_f32(h) : kv_bf16_to_f32(h);
}

void twin_dt_store(void *row, int dtype, size_t i, float x)
{
	if (dtype == CUDA_DT_F32)
		((float *)row)[i] = x;
	else
		((uint16_t *)row)[i] = dtype == CUDA_DT_F16 ? kv_f32_to_f16(x) : kv_f32_to_bf16(x);
}

void twin_embed(const void *table, int dtype, int dim, const int32_t *tok, int n, float *x)
{
	for (int i = 0; i < n; i++)
		for (int j = 0; j < dim; j++)
			x[(size_t)i * dim + j] =
			    twin_dt_load(table, dtype, (size_t)tok[i] * dim + (size_t)j);
}

/* As the CPU backend's rmsnorm_rows: sum of squares in double. */
void twin_rmsnorm(const float *x, const float *w, int n, int dim, float eps, void *out,
                  int out_dtype)
{
	for (int i = 0; i < n; i++) {
		const float *xr = x + (size_t)i * dim;
		double ss = 0.0;
		for (int j = 0; j < dim; j++)
			ss += (double)xr[j] * xr[j];
		float scale = (float)(1.0 / sqrt(ss / dim + (double)eps));
		for (int j = 0; j < dim; j++)
			twin_dt_store(out, out_dtype, (size_t)i * dim + j, xr[j] * scale * w[j]);
	}
}

void twin_geglu(const float *gate, const float *up, size_t n, void *out, int out_dtype)
{
	const float sqrt_2_over_pi = 0.79788456080286535587989211986876f, coef_a = 0.044715f;
	for (size_t i = 0; i < n; i++) {
		float x = gate[i];
		float g = 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
		twin_dt_store(out, out_dtype, i, g * up[i]);
	}
}

void twin_rmsnorm_add(float *x, const float *y, const float *w, int n, int dim, float eps)
{
	for (int i = 0; i < n; i++) {
		const float *yr = y + (size_t)i * dim;
		double ss = 0.0;
		for (int j = 0; j < dim; j++)
			ss += (double)yr[j] * yr[j];
		float scale = (float)(1.0 / sqrt(ss / dim + (double)eps));
		for (int j = 0; j < dim; j++)
			x[(size_t)i * dim + j] += yr[j] * scale * w[j];
	}
}

void twin_scale(float *x, size_t n, float scale)
{
	for (size_t i = 0; i < n; i++)
		x[i] *= scale;
}

void twin_softcap(float *x, size_t n, float cap)
{
	for (size_t i = 0; i < n; i++)
		x[i] = tanhf(x[i] * (1.0f / cap)) * cap;
}

void twin_rope(const float *x, float *out, int n, int n_heads, int head_dim, int rope_dim,
               bool neox, const double *cs, int cs_stride, float scale)
{
	for (int i = 0; i < n; i++)
		for (int h = 0; h < n_heads; h++) {
			size_t at = ((size_t)i * n_heads + h) * head_dim;
			if (out != x)
				memcpy(out + at, x + at, (size_t)head_dim * sizeof(float));
			rope_apply(out + at, cs + (size_t)i * cs_stride, rope_dim, neox);
			for (int j = 0; j < head_dim; j++)
				out[at + j] *= scale;
		}
}

void twin_rope_scale(float *x, int n_vec, int head_dim, int rope_dim, float scale)
{
	rope_scale_rotated(x, (size_t)(n_vec > 0 ? n_vec : 0), head_dim, rope_dim, scale);
}

void twin_swiglu(const float *gate, const float *up, size_t n, void *out, int out_dtype)
{
	for (size_t i = 0; i < n; i++)
		twin_dt_store(out, out_dtype, i, gate[i] / (1.0f + expf(-gate[i])) * up[i]);
}

/* The host upload path: dequant.c's row, then the cache's rounding. */
void twin_dequant_rows(int ggml_type, const void *src, size_t src_row_bytes, int rows, int cols,
                       void *dst, int dst_dtype)
{
	float *row = malloc((size_t)cols * sizeof(float));
	size_t out_b = (size_t)cols * cuda_kv_dt_size(dst_dtype);
	for (int r = 0; row && r < rows; r++) {
		dequantize_row((enum ggml_type)ggml_type, (const uint8_t *)src + r * src_row_bytes,
		               row, (uint64_t)cols);
		kv_row_store((enum kv_dtype)dst_dtype, (unsigned char *)dst + r * out_b, row, cols);
	}
	free(row);
}

/* ------------------------------------------------- mixture of experts */

void twin_gather_rows(const float *x, const int32_t *rows, int n, int dim, float *out)
{
	for (int i = 0; i < n; i++)
		memcpy(out + (size_t)i * dim, x + (size_t)rows[i] * dim,
		       (size_t)dim * sizeof(float));
}

/* moe_expert_act (engine/moe.c) on a copy of gate, then the dtype's
 * rounding. */
void twin_moe_act(const float *gate, const float *up, size_t n, int act, float alpha, float limit,
                  void *out, int out_dtype)
{
	float *g = malloc((n ? n : 1) * sizeof(float));
	if (!g)
		return; /* tests only: the comparison then fails visibly */
	memcpy(g, gate, n * sizeof(float));
	moe_expert_act(g, up, n, (enum model_expert_act)act, alpha, limit);
	for (size_t i = 0; i < n; i++)
		twin_dt_store(out, out_dtype, i, g[i]);
	free(g);
}

void twin_add_bias_rows(float *y, const float *bias, const int32_t *which, int n, int cols)
{
	for (int i = 0; i < n; i++)
		for (int j = 0; j < cols; j++)
			y[(size_t)i * cols + j] += bias[(size_t)which[i] * cols + j];
}

void twin_scatter_rows(const float *x, const int32_t *rows, int n, int dim, float *out)
{
	for (int i = 0; i < n; i++)
		memcpy(out + (size_t)rows[i] * dim, x + (size_t)i * dim,
		       (size_t)dim * sizeof(float));
}

void twin_moe_sum(const float *y, const float *w, int n, int k, int dim, float *x)
{
	for (int t = 0; t < n; t++)
		for (int j = 0; j < dim; j++) {
			float acc = 0.0f;
			for (int r = 0; r < k; r++)
				acc += w[(size_t)t * k + r] * y[((size_t)t * k + r) * dim + j];
			x[(size_t)t * dim + j] += acc;
		}
}

/* ------------------------------------------------------------ KV cache */

static void store_row(unsigned char *dst, int dtype, const float *src, int d)
{
	kv_row_store((enum kv_dtype)dtype, dst, src, d);
}

void twin_kv_append(const struct cuda_kv_append_job *jobs, int n_jobs, int n_kv, int layer,
                    const float *k, const float *v)
{
	for (int j = 0; j < n_jobs; j++) {
		const struct cuda_kv_append_job *a = &jobs[j];
		const struct cuda_kv_view *kv = &a->kv;
		int d = kv->head_dim;
		size_t fp_row = (size_t)d * cuda_kv_dt_size(kv->dtype);
		for (int h = 0; h < kv->n_kv; h++) {
			const float *kh = k + ((size_t)a->token * kv->n_kv + h) * d;
			const float *vh = v + ((size_t)a->token * kv->n_kv + h) * d;
			if (a->sink_slot >= 0 && kv->sink_quant) {
				unsigned char *L = cuda_kv_sink_layer(kv, layer);
				size_t i = (size_t)h * kv->sink_cap + (size_t)a->sink_slot;
				float *kp = (float *)(L + kv->off_sink_kp) + 2 * i;
				float *vp = (float *)(L + kv->off_sink_vp) + 2 * i;
				kvq_quant_row(kh, d, kv->bits,
				              L + kv->off_sink_k + i * kv->code_row, &kp[0],
				              &kp[1]);
				kvq_quant_row(vh, d, kv->bits,
				              L + kv->off_sink_v + i * kv->code_row, &vp[0],
				              &vp[1]);
			} else if (a->sink_slot >= 0) {
				unsigned char *L = cuda_kv_sink_layer(kv, layer);
				store_row(cuda_kv_row(L, kv->off_sink_k, h, kv->sink_cap,
				                      a->sink_slot, fp_row),
				          kv->dtype, kh, d);
				store_row(cuda_kv_row(L, kv->off_sink_v, h, kv->sink_cap,
				                      a->sink_slot, fp_row),
				          kv->dtype, vh, d);
			} else {
				unsigned char *L = cuda_kv_win_layer(kv, layer);
				store_row(
				    cuda_kv_row(L, kv->off_fp_k, h, kv->fp_cap, a->fp_slot, fp_row),
				    kv->dtype, kh, d);
				store_row(
				    cuda_kv_row(L, kv->off_fp_v, h, kv->fp_cap, a->fp_slot, fp_row),
				    kv->dtype, vh, d);
			}
		}
	}
}

void twin_kv_flush(const struct cuda_kv_flush_job *jobs, int n_jobs, int n_kv, int layer)
{
	float rows[32][CUDA_KV_MAX_HEAD_DIM];
	const float *rowp[32];
	for (int j = 0; j < n_jobs; j++) {
		const struct cuda_kv_view *kv = &jobs[j].kv;
		unsigned char *L = cuda_kv_win_layer(kv, layer);
		int d = kv->head_dim, gs = kv->group;
		size_t fp_row = (size_t)d * cuda_kv_dt_size(kv->dtype);
		for (int h = 0; h < kv->n_kv; h++) {
			size_t gh = cuda_kv_gh(kv, jobs[j].group_slot, h);
			float *gkp = (float *)(L + kv->off_gkp) + gh * 2 * (size_t)d;
			float *gvp = (float *)(L + kv->off_gvp) + gh * (size_t)gs * 2;
			unsigned char *gk = L + kv->off_gk + gh * (size_t)gs * kv->code_row;
			unsigned char *gv = L + kv->off_gv + gh * (size_t)gs * kv->code_row;
			for (int r = 0; r < gs; r++) {
				int slot = (jobs[j].fp_first + r) % kv->fp_cap;
				kv_row_load(
				    (enum kv_dtype)kv->dtype,
				    cuda_kv_row(L, kv->off_fp_k, h, kv->fp_cap, slot, fp_row),
				    rows[r], d);
				rowp[r] = rows[r];
				float vrow[CUDA_KV_MAX_HEAD_DIM];
				kv_row_load(
				    (enum kv_dtype)kv->dtype,
				    cuda_kv_row(L, kv->off_fp_v, h, kv->fp_cap, slot, fp_row), vrow,
				    d);
				kvq_quant_row(vrow, d, kv->bits, gv + (size_t)r * kv->code_row,
				              &gvp[2 * r], &gvp[2 * r + 1]);
			}
			kvq_quant_channels(rowp, gs, d, kv->bits, gk, gkp, gkp + d);
		}
	}
}

/* One anchor op for kv head h, as sinkcache.c's kv_layer_anchors_moved,
 * kv_layer_oldest_row and kv_layer_anchor_rekey compute it. */
static void twin_anchor_op(const struct cuda_kv_anchor_op *op, int h, const double *angles,
                           int rope_dim, bool neox)
{
	const struct cuda_kv_view *kv = &op->kv;
	int d = kv->head_dim, a_cap = kv->anchor_cap;
	size_t fp_row = (size_t)d * cuda_kv_dt_size(kv->dtype), ko_row = (size_t)d * sizeof(float);
	unsigned char *L = cuda_kv_win_layer(kv, op->layer);
	float *ko = (float *)cuda_kv_row(L, kv->off_ako, h, a_cap, op->dst, ko_row);
	unsigned char *av = cuda_kv_row(L, kv->off_av, h, a_cap, op->dst, fp_row);
	if (op->kind == CUDA_ANCHOR_MOVE) {
		memcpy(ko, cuda_kv_row(L, kv->off_ako, h, a_cap, op->src, ko_row), ko_row);
		memcpy(av, cuda_kv_row(L, kv->off_av, h, a_cap, op->src, fp_row), fp_row);
	} else if (op->kind == CUDA_ANCHOR_KEEP && op->from_group) {
		size_t gh = cuda_kv_gh(kv, op->group_slot, h);
		size_t gr = gh * (size_t)kv->group + (size_t)op->group_row;
		const float *kp = (const float *)(L + kv->off_gkp) + gh * 2 * (size_t)d;
		const float *vp = (const float *)(L + kv->off_gvp) + gr * 2;
		const uint8_t *kc = L + kv->off_gk + gr * kv->code_row;
		float vrow[CUDA_KV_MAX_HEAD_DIM];
		for (int j = 0; j < d; j++)
			ko[j] = kp[j] * (float)kvq_code_at(kc, j, kv->bits) + kp[d + j];
		kvq_dequant_row(L + kv->off_gv + gr * kv->code_row, d, kv->bits, vp[0], vp[1],
		                vrow);
		store_row(av, kv->dtype, vrow, d);
	} else if (op->kind == CUDA_ANCHOR_KEEP) {
		kv_row_load((enum kv_dtype)kv->dtype,
		            cuda_kv_row(L, kv->off_fp_k, h, kv->fp_cap, op->fp_slot, fp_row), ko,
		            d);
		memcpy(av, cuda_kv_row(L, kv->off_fp_v, h, kv->fp_cap, op->fp_slot, fp_row),
		       fp_row);
	} else if (op->kind == CUDA_ANCHOR_REKEY) {
		float krow[CUDA_KV_MAX_HEAD_DIM];
		memcpy(krow, ko, ko_row);
		if (op->cs_at >= 0)
			rope_apply(krow, angles + (size_t)op->cs_at * rope_dim, rope_dim, neox);
		store_row(cuda_kv_row(L, kv->off_ak, h, a_cap, op->dst, fp_row), kv->dtype, krow,
		          d);
	}
}

void twin_kv_anchor_ops(const struct cuda_kv_anchor_op *ops, const int32_t *begin, int n_lists,
                        int n_kv, const double *angles, int rope_dim, bool neox)
{
	for (int l = 0; l < n_lists; l++)
		for (int i = begin[l]; i < begin[l + 1]; i++)
			for (int h = 0; h < n_kv; h++)
				twin_anchor_op(&ops[i], h, angles, rope_dim, neox);
}

/* Resident token r of a job as floats (key or value), dequantized. */
static void twin_token_row(const struct cuda_kv_attn_job *a, int layer, int h, int r, bool value,
                           float *out)
{
	const struct cuda_kv_view *kv = &a->kv;
	int d = kv->head_dim;
	size_t fp_row = (size_t)d * cuda_kv_dt_size(kv->dtype);
	if (r < a->n_sink) {
		unsigned char *L = cuda_kv_sink_layer(kv, layer);
		if (kv->sink_quant) {
			size_t i = (size_t)h * kv->sink_cap + (size_t)r;
			const float *p =
			    (const float *)(L + (value ? kv->off_sink_vp : kv->off_sink_kp)) +
			    2 * i;
			kvq_dequant_row(L + (value ? kv->off_sink_v : kv->off_sink_k) +
			                    i * kv->code_row,
			                d, kv->bits, p[0], p[1], out);
		} else {
			kv_row_load((enum kv_dtype)kv->dtype,
			            cuda_kv_row(L, value ? kv->off_sink_v : kv->off_sink_k, h,
			                        kv->sink_cap, r, fp_row),
			            out, d);
		}
		return;
	}
	unsigned char *L = cuda_kv_win_layer(kv, layer);
	int w = r - a->n_sink;
	if (w < a->n_anchor) {
		kv_row_load(
		    (enum kv_dtype)kv->dtype,
		    cuda_kv_row(L, value ? kv->off_av : kv->off_ak, h, kv->anchor_cap, w, fp_row),
		    out, d);
		return;
	}
	w -= a->n_anchor;
	if (w < a->n_comp) {
		int t = a->comp_row0 + w;
		int g = (a->comp_group0 + t / kv->group) % kv->n_groups, row = t % kv->group;
		size_t gh = cuda_kv_gh(kv, g, h);
		const unsigned char *codes = L + (value ? kv->off_gv : kv->off_gk) +
		                             (gh * (size_t)kv->group + (size_t)row) * kv->code_row;
		if (value) {
			const float *p =
			    (const float *)(L + kv->off_gvp) + (gh * kv->group + row) * 2;
			kvq_dequant_row(codes, d, kv->bits, p[0], p[1], out);
		} else {
			const float *p = (const float *)(L + kv->off_gkp) + gh * 2 * (size_t)d;
			for (int j = 0; j < d; j++)
				out[j] = (float)cuda_kv_code(codes, j, kv->bits) * p[j] + p[d + j];
		}
		return;
	}
	int slot = (a->fp_slot0 + (w - a->n_comp)) % kv->fp_cap;
	kv_row_load(
	    (enum kv_dtype)kv->dtype,
	    cuda_kv_row(L, value ? kv->off_fp_v : kv->off_fp_k, h, kv->fp_cap, slot, fp_row), out,
	    d);
}

/* One query head; weights (n resident) or NULL gets each key's softmax
 * weight; learned (NULL: none) is the head's learned sink logit, a term of
 * the sum with a zero value, its share into *learned_mass. */
static void twin_attend_head(const struct cuda_kv_attn_job *a, int layer, int h, int kh,
                             const float *qw, const float *qs, float *out, float *mass,
                             float *weights, float softcap, const float *learned,
                             float *learned_mass)
{
	int d = a->kv.head_dim, n = a->n_sink + a->n_anchor + a->n_comp + a->n_fp;
	float row[CUDA_KV_MAX_HEAD_DIM], mx = learned ? *learned : -INFINITY, sum = 0.0f;
	float sink = 0.0f;
	memset(out, 0, (size_t)d * sizeof(float));
	if (mass)
		*mass = 0.0f;
	if (learned_mass)
		*learned_mass = learned ? 1.0f : 0.0f;
	if (n == 0)
		return;
	float *scores = malloc((size_t)n * sizeof(float));
	if (!scores)
		return; /* tests only: the comparison then fails visibly */
	for (int r = 0; r < n; r++) {
		const float *q = r < a->n_sink + a->n_anchor ? qs : qw; /* keys by rank */
		twin_token_row(a, layer, kh, r, false, row);
		float s = 0.0f;
		for (int j = 0; j < d; j++)
			s += q[j] * row[j];
		if (softcap > 0.0f)
			s = tanhf(s * (1.0f / softcap)) * softcap;
		scores[r] = s;
		mx = fmaxf(mx, s);
	}
	for (int r = 0; r < n; r++) {
		scores[r] = expf(scores[r] - mx);
		sum += scores[r];
		if (r < a->n_sink)
			sink += scores[r];
	}
	if (learned) {
		float e = expf(*learned - mx);
		sum += e;
		if (learned_mass)
			*learned_mass = e / sum;
	}
	for (int r = 0; weights && r < n; r++)
		weights[r] = scores[r] / sum;
	for (int r = 0; r < n; r++) {
		twin_token_row(a, layer, kh, r, true, row);
		for (int j = 0; j < d; j++)
			out[j] += scores[r] / sum * row[j];
	}
	if (mass)
		*mass = sink / sum;
	free(scores);
}

void twin_attention(const struct cuda_kv_attn_job *jobs, int n_jobs, int layer, int n_heads,
                    const float *qw, const float *qs, float *out, float *sink_mass,
                    float *key_weight, int key_ld)
{
	twin_attention_capped(jobs, n_jobs, layer, n_heads, qw, qs, out, sink_mass, key_weight,
	                      key_ld, 0.0f, NULL, NULL);
}

void twin_attention_capped(const struct cuda_kv_attn_job *jobs, int n_jobs, int layer, int n_heads,
                           const float *qw, const float *qs, float *out, float *sink_mass,
                           float *key_weight, int key_ld, float softcap, const float *sinks,
                           float *learned_mass)
{
	for (int j = 0; j < n_jobs; j++) {
		const struct cuda_kv_attn_job *a = &jobs[j];
		int d = a->kv.head_dim, ratio = n_heads / a->kv.n_kv;
		for (int h = 0; h < n_heads; h++) {
			size_t at = ((size_t)a->token * n_heads + h) * d;
			size_t th = (size_t)a->token * n_heads + h;
			twin_attend_head(a, layer, h, h / ratio, qw + at, qs + at, out + at,
			                 sink_mass ? &sink_mass[th] : NULL,
			                 key_weight ? key_weight + th * (size_t)key_ld : NULL,
			                 softcap, sinks ? &sinks[h] : NULL,
			                 learned_mass ? &learned_mass[th] : NULL);
		}
	}
}

void twin_key_weight_reduce(const float *w, int n, int n_heads, int ld, int cols, float *out_max,
                            float *out_mean)
{
	for (int t = 0; t < n; t++)
		for (int j = 0; j < cols; j++) {
			float m = 0.0f, sum = 0.0f;
			for (int h = 0; h < n_heads; h++) {
				float x = w[((size_t)t * n_heads + h) * ld + j];
				m = fmaxf(m, x);
				sum += x;
			}
			out_max[(size_t)t * ld + j] = m;
			if (out_mean)
				out_mean[(size_t)t * ld + j] = sum / (float)n_heads;
		}
}
