// Kernels of the device-resident tiered KV cache (layout in cuda_kv.h):
//   kv_append   stores one token's rotated K and V rows per job: in a sink
//               slot (full precision, or quantized per token) or in the
//               full-precision window ring
//   kv_flush    quantizes G full-precision window tokens into a group:
//               keys per channel, values per token (KIVI, kvquant.c's rule)
//   attention   one launch for all tokens of a wave (one per session): each
//               block scores one run of keys of one (token, head) over sink +
//               anchor + compressed (dequantized on the fly) + full-precision
//               tiers, softmax in fp32, and writes a partial (max, sum, sink
//               sum, weighted values); a combine kernel merges the runs
//               (flash-decoding), so long windows spread over many blocks,
//               and adds the model's learned sink logit (gpt-oss) there;
//               optionally it leaves every key's softmax weight behind
//   kv_anchor   anchor tier upkeep: moves anchor rows down, keeps the oldest
//               window token's rows as an anchor (dequantized), re-rotates
//               anchor keys to their ranks; bit-identical to sinkcache.c
// Twins: twin_kv_append, twin_kv_flush, twin_kv_anchor_ops, twin_attention
// (twins.c).
// What is stored where and when is decided on the host (cuda_kvplan.c).
#include <cmath>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

#define KV_THREADS 128
#define KV_WARPS (KV_THREADS / 32)

static cudaStream_t st(void *stream)
{
	return (cudaStream_t)stream;
}

// Block-wide reductions for KV_THREADS threads; every thread gets the result.
__device__ float block_reduce(float x, int op /* 0 sum, 1 max, 2 min */)
{
	__shared__ float red[KV_WARPS];
	__syncthreads();
	x = op == 0 ? warp_sum(x) : op == 1 ? warp_max(x) : warp_min(x);
	if ((threadIdx.x & 31) == 0)
		red[threadIdx.x >> 5] = x;
	__syncthreads();
	float r = red[0];
	for (int w = 1; w < KV_WARPS; w++)
		r = op == 0 ? r + red[w] : op == 1 ? fmaxf(r, red[w]) : fminf(r, red[w]);
	return r;
}

// kvq_quant_row() with the whole block: codes (Dc bytes), p = {scale, min}.
__device__ void quant_row_block(const float *x, int d, int bits, unsigned char *codes, float *p)
{
	float lo = INFINITY, hi = -INFINITY;
	for (int j = threadIdx.x; j < d; j += blockDim.x) {
		lo = fminf(lo, x[j]);
		hi = fmaxf(hi, x[j]);
	}
	lo = block_reduce(lo, 2);
	hi = block_reduce(hi, 1);
	float scale, mn;
	quant_params(lo, hi, bits, &scale, &mn);
	int per = bits == 8 ? 1 : 2;
	for (int b = threadIdx.x; b < d / per; b += blockDim.x) {
		int byte = 0;
		for (int e = 0; e < per; e++)
			byte |= quant_code(x[b * per + e], scale, mn, bits) << (4 * e);
		codes[b] = (unsigned char)byte;
	}
	if (threadIdx.x == 0) {
		p[0] = scale;
		p[1] = mn;
	}
}

// ------------------------------------------------------------- append

// grid (n_jobs, n_kv), block KV_THREADS.
__global__ void kv_append_kernel(const cuda_kv_append_job *jobs, int layer, const float *k,
                                 const float *v)
{
	const cuda_kv_append_job a = jobs[blockIdx.x];
	const cuda_kv_view &kv = a.kv;
	int h = blockIdx.y, d = kv.head_dim;
	size_t fp_row = (size_t)d * cuda_kv_dt_size(kv.dtype);
	const float *kh = k + ((size_t)a.token * kv.n_kv + h) * d;
	const float *vh = v + ((size_t)a.token * kv.n_kv + h) * d;
	unsigned char *rk, *rv;
	if (a.sink_slot >= 0 && kv.sink_quant) {
		unsigned char *L = cuda_kv_sink_layer(&kv, layer);
		size_t i = (size_t)h * kv.sink_cap + (size_t)a.sink_slot;
		quant_row_block(kh, d, kv.bits, L + kv.off_sink_k + i * kv.code_row,
		                (float *)(L + kv.off_sink_kp) + 2 * i);
		quant_row_block(vh, d, kv.bits, L + kv.off_sink_v + i * kv.code_row,
		                (float *)(L + kv.off_sink_vp) + 2 * i);
		return;
	}
	if (a.sink_slot >= 0) {
		unsigned char *L = cuda_kv_sink_layer(&kv, layer);
		rk = cuda_kv_row(L, kv.off_sink_k, h, kv.sink_cap, a.sink_slot, fp_row);
		rv = cuda_kv_row(L, kv.off_sink_v, h, kv.sink_cap, a.sink_slot, fp_row);
	} else {
		unsigned char *L = cuda_kv_win_layer(&kv, layer);
		rk = cuda_kv_row(L, kv.off_fp_k, h, kv.fp_cap, a.fp_slot, fp_row);
		rv = cuda_kv_row(L, kv.off_fp_v, h, kv.fp_cap, a.fp_slot, fp_row);
	}
	for (int j = threadIdx.x; j < d; j += blockDim.x) {
		dt_store(rk, kv.dtype, j, kh[j]);
		dt_store(rv, kv.dtype, j, vh[j]);
	}
}

extern "C" int cuda_kv_append(const struct cuda_kv_append_job *jobs, int n_jobs, int n_kv,
                              int layer, const float *k, const float *v, void *stream)
{
	if (n_jobs <= 0)
		return 0;
	dim3 grid(n_jobs, n_kv);
	CUDA_LAUNCH(kv_append_kernel, grid, KV_THREADS, st(stream), jobs, layer, k, v);
	return CUDA_LAUNCH_RC();
}

// -------------------------------------------------------------- flush

// grid (n_jobs, n_kv), block KV_THREADS.  Keys: one thread per code byte
// (1 or 2 channels) over the G rows; values: one warp per row.
__global__ void kv_flush_kernel(const cuda_kv_flush_job *jobs, int layer)
{
	const cuda_kv_flush_job f = jobs[blockIdx.x];
	const cuda_kv_view &kv = f.kv;
	int h = blockIdx.y, d = kv.head_dim, gs = kv.group, bits = kv.bits;
	int per = bits == 8 ? 1 : 2;
	size_t fp_row = (size_t)d * cuda_kv_dt_size(kv.dtype);
	unsigned char *L = cuda_kv_win_layer(&kv, layer);
	size_t gh = cuda_kv_gh(&kv, f.group_slot, h);
	float *gkp = (float *)(L + kv.off_gkp) + gh * 2 * (size_t)d;
	float *gvp = (float *)(L + kv.off_gvp) + gh * (size_t)gs * 2;
	unsigned char *gk = L + kv.off_gk + gh * (size_t)gs * kv.code_row;
	unsigned char *gv = L + kv.off_gv + gh * (size_t)gs * kv.code_row;
	for (int b = threadIdx.x; b < d / per; b += blockDim.x) {
		float scale[2], mn[2];
		for (int e = 0; e < per; e++) {
			int j = b * per + e;
			float lo = INFINITY, hi = -INFINITY;
			for (int r = 0; r < gs; r++) {
				int slot = (f.fp_first + r) % kv.fp_cap;
				float x =
				    dt_load(cuda_kv_row(L, kv.off_fp_k, h, kv.fp_cap, slot, fp_row),
				            kv.dtype, j);
				lo = fminf(lo, x);
				hi = fmaxf(hi, x);
			}
			quant_params(lo, hi, bits, &scale[e], &mn[e]);
			gkp[j] = scale[e];
			gkp[d + j] = mn[e];
		}
		for (int r = 0; r < gs; r++) {
			int slot = (f.fp_first + r) % kv.fp_cap;
			const unsigned char *row =
			    cuda_kv_row(L, kv.off_fp_k, h, kv.fp_cap, slot, fp_row);
			int byte = 0;
			for (int e = 0; e < per; e++)
				byte |= quant_code(dt_load(row, kv.dtype, b * per + e), scale[e],
				                   mn[e], bits)
				        << (4 * e);
			gk[(size_t)r * kv.code_row + b] = (unsigned char)byte;
		}
	}
	int lane = threadIdx.x & 31;
	for (int r = threadIdx.x >> 5; r < gs; r += KV_WARPS) {
		int slot = (f.fp_first + r) % kv.fp_cap;
		const unsigned char *row = cuda_kv_row(L, kv.off_fp_v, h, kv.fp_cap, slot, fp_row);
		float lo = INFINITY, hi = -INFINITY;
		for (int j = lane; j < d; j += 32) {
			float x = dt_load(row, kv.dtype, j);
			lo = fminf(lo, x);
			hi = fmaxf(hi, x);
		}
		lo = warp_min(lo);
		hi = warp_max(hi);
		float scale, mn;
		quant_params(lo, hi, bits, &scale, &mn);
		for (int b = lane; b < d / per; b += 32) {
			int byte = 0;
			for (int e = 0; e < per; e++)
				byte |=
				    quant_code(dt_load(row, kv.dtype, b * per + e), scale, mn, bits)
				    << (4 * e);
			gv[(size_t)r * kv.code_row + b] = (unsigned char)byte;
		}
		if (lane == 0) {
			gvp[2 * r] = scale;
			gvp[2 * r + 1] = mn;
		}
	}
}

extern "C" int cuda_kv_flush(const struct cuda_kv_flush_job *jobs, int n_jobs, int n_kv, int layer,
                             void *stream)
{
	if (n_jobs <= 0)
		return 0;
	dim3 grid(n_jobs, n_kv);
	CUDA_LAUNCH(kv_flush_kernel, grid, KV_THREADS, st(stream), jobs, layer);
	return CUDA_LAUNCH_RC();
}

// ------------------------------------------------------------- anchors

// One op for kv head h.  Explicitly rounded arithmetic: no fused
// multiply-add, so that the rows are the CPU cache's bits.
__device__ void anchor_op_run(const cuda_kv_anchor_op &op, int h, const double *angles,
                              int rope_dim, bool neox)
{
	const cuda_kv_view &kv = op.kv;
	int d = kv.head_dim, a_cap = kv.anchor_cap;
	size_t fp_row = (size_t)d * cuda_kv_dt_size(kv.dtype), ko_row = (size_t)d * sizeof(float);
	unsigned char *L = cuda_kv_win_layer(&kv, op.layer);
	float *ko = (float *)cuda_kv_row(L, kv.off_ako, h, a_cap, op.dst, ko_row);
	unsigned char *av = cuda_kv_row(L, kv.off_av, h, a_cap, op.dst, fp_row);
	if (op.kind == CUDA_ANCHOR_MOVE) {
		const float *ko_src =
		    (const float *)cuda_kv_row(L, kv.off_ako, h, a_cap, op.src, ko_row);
		const uint16_t *av_src =
		    (const uint16_t *)cuda_kv_row(L, kv.off_av, h, a_cap, op.src, fp_row);
		for (int j = threadIdx.x; j < d; j += blockDim.x)
			ko[j] = ko_src[j];
		for (size_t j = threadIdx.x; j < fp_row / 2; j += blockDim.x)
			((uint16_t *)av)[j] = av_src[j];
	} else if (op.kind == CUDA_ANCHOR_KEEP && op.from_group) {
		size_t gh = cuda_kv_gh(&kv, op.group_slot, h),
		       gr = gh * (size_t)kv.group + op.group_row;
		const float *kp = (const float *)(L + kv.off_gkp) + gh * 2 * (size_t)d;
		const float *vp = (const float *)(L + kv.off_gvp) + gr * 2;
		const unsigned char *kc = L + kv.off_gk + gr * kv.code_row;
		const unsigned char *vc = L + kv.off_gv + gr * kv.code_row;
		for (int j = threadIdx.x; j < d; j += blockDim.x) {
			ko[j] = __fadd_rn(__fmul_rn(kp[j], (float)cuda_kv_code(kc, j, kv.bits)),
			                  kp[d + j]);
			float x =
			    __fadd_rn(__fmul_rn((float)cuda_kv_code(vc, j, kv.bits), vp[0]), vp[1]);
			dt_store(av, kv.dtype, j, x);
		}
	} else if (op.kind == CUDA_ANCHOR_KEEP) {
		const unsigned char *fk =
		    cuda_kv_row(L, kv.off_fp_k, h, kv.fp_cap, op.fp_slot, fp_row);
		const uint16_t *fv =
		    (const uint16_t *)cuda_kv_row(L, kv.off_fp_v, h, kv.fp_cap, op.fp_slot, fp_row);
		for (int j = threadIdx.x; j < d; j += blockDim.x)
			ko[j] = dt_load(fk, kv.dtype, j);
		for (size_t j = threadIdx.x; j < fp_row / 2; j += blockDim.x)
			((uint16_t *)av)[j] = fv[j];
	} else if (op.kind == CUDA_ANCHOR_REKEY) {
		unsigned char *ak = cuda_kv_row(L, kv.off_ak, h, a_cap, op.dst, fp_row);
		int rot = op.cs_at >= 0 ? rope_dim : 0, half = rot / 2;
		const double *c = angles + (op.cs_at >= 0 ? (size_t)op.cs_at * rope_dim : 0);
		for (int i = threadIdx.x; i < half; i += blockDim.x) {
			int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
			double x0 = ko[ia], x1 = ko[ib], co = c[2 * i], si = c[2 * i + 1];
			// rope_apply(): double products and sums, rounded to float once
			dt_store(ak, kv.dtype, ia,
			         (float)__dsub_rn(__dmul_rn(x0, co), __dmul_rn(x1, si)));
			dt_store(ak, kv.dtype, ib,
			         (float)__dadd_rn(__dmul_rn(x0, si), __dmul_rn(x1, co)));
		}
		for (int j = rot + threadIdx.x; j < d; j += blockDim.x)
			dt_store(ak, kv.dtype, j, ko[j]);
	}
}

// grid (n_lists, n_kv), block KV_THREADS: list blockIdx.x for kv head
// blockIdx.y, its ops in order (a later op may read what an earlier wrote).
__global__ void kv_anchor_kernel(const cuda_kv_anchor_op *ops, const int32_t *begin,
                                 const double *angles, int rope_dim, bool neox)
{
	int first = begin[blockIdx.x], end = begin[blockIdx.x + 1];
	for (int i = first; i < end; i++) {
		const cuda_kv_anchor_op op = ops[i];
		anchor_op_run(op, blockIdx.y, angles, rope_dim, neox);
		__syncthreads();
	}
}

extern "C" int cuda_kv_anchor_ops(const struct cuda_kv_anchor_op *ops, const int32_t *begin,
                                  int n_lists, int n_kv, const double *angles, int rope_dim,
                                  bool neox, void *stream)
{
	if (n_lists <= 0 || n_kv <= 0)
		return 0;
	dim3 grid(n_lists, n_kv);
	CUDA_LAUNCH(kv_anchor_kernel, grid, KV_THREADS, st(stream), ops, begin, angles, rope_dim,
	            neox);
	return CUDA_LAUNCH_RC();
}

// ---------------------------------------------------------- attention

// One resident token's key or value row, wherever it lives.
struct tok_ref {
	const unsigned char *data; // dtype row, or codes
	const float *p;            // row: {scale, min}; channel: scale (D), min (D)
	int kind;                  // 0 full precision, 1 quantized per row, 2 per channel
};

__device__ tok_ref locate(const cuda_kv_attn_job &a, int layer, int h, int r, bool value)
{
	const cuda_kv_view &kv = a.kv;
	size_t fp_row = (size_t)kv.head_dim * cuda_kv_dt_size(kv.dtype);
	tok_ref t;
	if (r < a.n_sink) {
		unsigned char *L = cuda_kv_sink_layer(&kv, layer);
		if (kv.sink_quant) {
			size_t i = (size_t)h * kv.sink_cap + (size_t)r;
			t.data = L + (value ? kv.off_sink_v : kv.off_sink_k) + i * kv.code_row;
			t.p =
			    (const float *)(L + (value ? kv.off_sink_vp : kv.off_sink_kp)) + 2 * i;
			t.kind = 1;
		} else {
			t.data = cuda_kv_row(L, value ? kv.off_sink_v : kv.off_sink_k, h,
			                     kv.sink_cap, r, fp_row);
			t.p = NULL;
			t.kind = 0;
		}
		return t;
	}
	unsigned char *L = cuda_kv_win_layer(&kv, layer);
	int w = r - a.n_sink;
	if (w < a.n_anchor) {
		t.data = cuda_kv_row(L, value ? kv.off_av : kv.off_ak, h, kv.anchor_cap, w, fp_row);
		t.p = NULL;
		t.kind = 0;
		return t;
	}
	w -= a.n_anchor;
	if (w < a.n_comp) {
		int tt = a.comp_row0 + w;
		int g = (a.comp_group0 + tt / kv.group) % kv.n_groups, row = tt % kv.group;
		size_t gh = cuda_kv_gh(&kv, g, h);
		t.data = L + (value ? kv.off_gv : kv.off_gk) +
		         (gh * (size_t)kv.group + (size_t)row) * kv.code_row;
		if (value) {
			t.p = (const float *)(L + kv.off_gvp) + (gh * (size_t)kv.group + row) * 2;
			t.kind = 1;
		} else {
			t.p = (const float *)(L + kv.off_gkp) + gh * 2 * (size_t)kv.head_dim;
			t.kind = 2;
		}
		return t;
	}
	int slot = (a.fp_slot0 + (w - a.n_comp)) % kv.fp_cap;
	t.data = cuda_kv_row(L, value ? kv.off_fp_v : kv.off_fp_k, h, kv.fp_cap, slot, fp_row);
	t.p = NULL;
	t.kind = 0;
	return t;
}

__device__ __forceinline__ float tok_elem(const tok_ref &t, const cuda_kv_view &kv, int j)
{
	if (t.kind == 0)
		return dt_load(t.data, kv.dtype, j);
	float c = (float)cuda_kv_code(t.data, j, kv.bits);
	if (t.kind == 1)
		return c * t.p[0] + t.p[1];
	return c * t.p[j] + t.p[kv.head_dim + j];
}

// Partial record of one (job, head, split): m, l, sink l, pad, acc (D).
__device__ __forceinline__ float *partial_at(float *partial, int job, int n_heads, int h,
                                             int n_splits, int split, int d)
{
	return partial + (((size_t)job * n_heads + h) * n_splits + split) * (size_t)(d + 4);
}

// Resident tokens of a job: sinks, anchors, compressed, full precision.
__device__ __forceinline__ int attn_resident(const cuda_kv_attn_job &a)
{
	return a.n_sink + a.n_anchor + a.n_comp + a.n_fp;
}

// grid (n_splits, n_heads, n_jobs), block KV_THREADS.  key_weight (n_tokens,
// n_heads, key_ld) or NULL: gets each key's raw score (combine normalizes).
// The bound keeps the register count where five blocks fit an SM (ptxas
// spills nothing at it for sm_80 and sm_90).
__global__ void __launch_bounds__(KV_THREADS, 5)
    attn_partial_kernel(const cuda_kv_attn_job *jobs, int layer, int n_heads, const float *qw,
                        const float *qs, int split_len, int n_splits, float *partial,
                        float *key_weight, int key_ld, float softcap)
{
	__shared__ float s_qw[CUDA_KV_MAX_HEAD_DIM], s_qs[CUDA_KV_MAX_HEAD_DIM];
	__shared__ float scores[CUDA_ATTN_MAX_SPLIT];
	__shared__ tok_ref vref[CUDA_ATTN_MAX_SPLIT]; // where each key's value row is
	const cuda_kv_attn_job a = jobs[blockIdx.z];
	int h = blockIdx.y, d = a.kv.head_dim, kh = h / (n_heads / a.kv.n_kv);
	int n_res = attn_resident(a);
	int begin = blockIdx.x * split_len, end = min(begin + split_len, n_res), n = end - begin;
	float *part = partial_at(partial, blockIdx.z, n_heads, h, n_splits, blockIdx.x, d);
	if (n <= 0) {
		for (int j = threadIdx.x; j < d; j += blockDim.x)
			part[4 + j] = 0.0f;
		if (threadIdx.x == 0) {
			part[0] = -INFINITY;
			part[1] = part[2] = part[3] = 0.0f;
		}
		return;
	}
	size_t qat = ((size_t)a.token * n_heads + h) * d;
	for (int j = threadIdx.x; j < d; j += blockDim.x) {
		s_qw[j] = qw[qat + j];
		s_qs[j] = qs[qat + j];
	}
	__syncthreads();
	int lane = threadIdx.x & 31;
	for (int i = threadIdx.x >> 5; i < n; i += KV_WARPS) { // one warp per key
		int r = begin + i;
		tok_ref t = locate(a, layer, kh, r, false);
		const float *q = r < a.n_sink + a.n_anchor ? s_qs : s_qw; // keys by rank
		float s = 0.0f;
		for (int j = lane; j < d; j += 32)
			s += q[j] * tok_elem(t, a.kv, j);
		s = warp_sum(s);
		if (softcap > 0.0f) // as the CPU's attend_softcap
			s = __fmul_rn(tanhf(__fmul_rn(s, 1.0f / softcap)), softcap);
		if (lane == 0) {
			scores[i] = s;
			vref[i] = locate(a, layer, kh, r, true);
		}
	}
	__syncthreads();
	float m = -INFINITY;
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		m = fmaxf(m, scores[i]);
	if (key_weight) { // raw scores of this run, in rank order
		float *kw = key_weight + ((size_t)a.token * n_heads + h) * key_ld + begin;
		for (int i = threadIdx.x; i < n; i += blockDim.x)
			kw[i] = scores[i];
	}
	m = block_reduce(m, 1);
	float l = 0.0f, ls = 0.0f;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		float p = expf(scores[i] - m);
		scores[i] = p;
		l += p;
		if (begin + i < a.n_sink)
			ls += p;
	}
	l = block_reduce(l, 0);
	ls = block_reduce(ls, 0); // its barriers publish the scores
	// Values: thread (g, j) sums dim j over keys g, g + groups, ...; with
	// head_dim below the block size the groups keep every thread busy.
	__shared__ float vsum[KV_THREADS];
	int groups = (int)blockDim.x / d > 0 ? (int)blockDim.x / d : 1;
	int g = (int)threadIdx.x / d < groups ? (int)threadIdx.x / d : groups;
	for (int j = (int)threadIdx.x - g * d; g < groups && j < d; j += (int)blockDim.x) {
		float acc = 0.0f;
		for (int i = g; i < n; i += groups)
			acc += scores[i] * tok_elem(vref[i], a.kv, j);
		if (groups == 1)
			part[4 + j] = acc;
		else
			vsum[g * d + j] = acc;
	}
	if (groups > 1) {
		__syncthreads();
		for (int j = threadIdx.x; j < d; j += blockDim.x) {
			float acc = 0.0f;
			for (int k = 0; k < groups; k++)
				acc += vsum[k * d + j];
			part[4 + j] = acc;
		}
	}
	if (threadIdx.x == 0) {
		part[0] = m;
		part[1] = l;
		part[2] = ls;
		part[3] = 0.0f;
	}
}

// grid (n_heads, n_jobs), block KV_THREADS: merges the splits of a (job, head),
// and turns the raw scores in key_weight (when not NULL) into softmax weights.
// sinks (n_heads) or NULL: the learned sink logit joins the max and the sum
// as one more key with a zero value (its share into learned_mass).
__global__ void attn_combine_kernel(const cuda_kv_attn_job *jobs, int n_heads, int n_splits,
                                    const float *partial, void *out, int out_dtype,
                                    float *sink_mass, float *key_weight, int key_ld,
                                    const float *sinks, float *learned_mass)
{
	const cuda_kv_attn_job a = jobs[blockIdx.y];
	int h = blockIdx.x, d = a.kv.head_dim;
	int n_res = attn_resident(a);
	size_t oat = ((size_t)a.token * n_heads + h) * d;
	float mx = sinks ? sinks[h] : -INFINITY, l = 0.0f, ls = 0.0f;
	for (int s = 0; s < n_splits; s++)
		mx = fmaxf(mx,
		           partial_at((float *)partial, blockIdx.y, n_heads, h, n_splits, s, d)[0]);
	float e_sink = sinks ? expf(sinks[h] - mx) : 0.0f;
	for (int s = 0; s < n_splits; s++) {
		const float *p =
		    partial_at((float *)partial, blockIdx.y, n_heads, h, n_splits, s, d);
		if (p[1] > 0.0f) {
			float w = expf(p[0] - mx);
			l += w * p[1];
			ls += w * p[2];
		}
	}
	l += e_sink; // a zero value: the outputs below only see it in l
	for (int j = threadIdx.x; j < d; j += blockDim.x) {
		float o = 0.0f;
		for (int s = 0; s < n_splits && n_res > 0; s++) {
			const float *p =
			    partial_at((float *)partial, blockIdx.y, n_heads, h, n_splits, s, d);
			if (p[1] > 0.0f)
				o += expf(p[0] - mx) * p[4 + j];
		}
		dt_store(out, out_dtype, oat + j, n_res > 0 ? o / l : 0.0f);
	}
	if (sink_mass && threadIdx.x == 0)
		sink_mass[(size_t)a.token * n_heads + h] = n_res > 0 ? ls / l : 0.0f;
	if (learned_mass && threadIdx.x == 0)
		learned_mass[(size_t)a.token * n_heads + h] = sinks ? e_sink / l : 0.0f;
	if (key_weight) {
		float *kw = key_weight + ((size_t)a.token * n_heads + h) * key_ld;
		for (int r = threadIdx.x; r < n_res; r += blockDim.x)
			kw[r] = expf(kw[r] - mx) / l;
	}
}

static int attn_splits(int max_resident, int split_len)
{
	int s = (max_resident + split_len - 1) / split_len;
	return s > 0 ? s : 1;
}

static int attn_split_len(int split_len)
{
	if (split_len <= 0)
		return CUDA_ATTN_DEFAULT_SPLIT;
	return split_len < 32                    ? 32
	       : split_len > CUDA_ATTN_MAX_SPLIT ? CUDA_ATTN_MAX_SPLIT
	                                         : split_len;
}

extern "C" size_t cuda_attention_partial_floats(int n_jobs, int n_heads, int head_dim,
                                                int max_resident, int split_len)
{
	int n_splits = attn_splits(max_resident, attn_split_len(split_len));
	return (size_t)n_jobs * n_heads * n_splits * (size_t)(head_dim + 4);
}

extern "C" int cuda_attention(const struct cuda_kv_attn_job *jobs, int n_jobs, int max_resident,
                              int layer, int n_heads, const float *qw, const float *qs,
                              int split_len, float *partial, void *out, int out_dtype,
                              float *sink_mass, float *key_weight, int key_ld, void *stream)
{
	return cuda_attention_capped(jobs, n_jobs, max_resident, layer, n_heads, qw, qs, split_len,
	                             partial, out, out_dtype, sink_mass, key_weight, key_ld, 0.0f,
	                             NULL, NULL, stream);
}

extern "C" int cuda_attention_capped(const struct cuda_kv_attn_job *jobs, int n_jobs,
                                     int max_resident, int layer, int n_heads, const float *qw,
                                     const float *qs, int split_len, float *partial, void *out,
                                     int out_dtype, float *sink_mass, float *key_weight,
                                     int key_ld, float softcap, const float *sinks,
                                     float *learned_mass, void *stream)
{
	if (n_jobs <= 0)
		return 0;
	split_len = attn_split_len(split_len);
	int n_splits = attn_splits(max_resident, split_len);
	dim3 grid(n_splits, n_heads, n_jobs);
	CUDA_LAUNCH(attn_partial_kernel, grid, KV_THREADS, st(stream), jobs, layer, n_heads, qw, qs,
	            split_len, n_splits, partial, key_weight, key_ld, softcap);
	int rc = CUDA_LAUNCH_RC();
	if (rc)
		return rc;
	dim3 grid2(n_heads, n_jobs);
	CUDA_LAUNCH(attn_combine_kernel, grid2, KV_THREADS, st(stream), jobs, n_heads, n_splits,
	            partial, out, out_dtype, sink_mass, key_weight, key_ld, sinks, learned_mass);
	return CUDA_LAUNCH_RC();
}
