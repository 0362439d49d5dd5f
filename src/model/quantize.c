/* Quantizers for the GGUF block formats, used by sinkd-mkmodel to write
 * synthetic models and to convert existing ones, and by tests.  They follow
 * ggml's reference (non-imatrix) algorithms so that a file written here
 * reads back like one from llama.cpp's quantize tool: Q4_0/Q5_0 take the
 * scale from the value of largest magnitude, Q4_1/Q5_1 from min and max,
 * Q4_K/Q5_K fit a scale and a min per 32-value sub-block by weighted least
 * squares over a few candidate grids, Q6_K fits a symmetric scale per 16
 * values; the K types then quantize those per-sub-block numbers against fp16
 * super-block scales.  Block layouts are ggml's, written byte by byte so
 * blocks need no alignment.  It is scalar code, knows no importance matrix,
 * and does not read the formats back (dequant.c does). */
#include "model/quantize.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "model/dequant.h"
#include "util/errbuf.h"

#define QK 32    /* elements per block of the 32-element formats */
#define QK_K 256 /* elements per K-type super-block */

/* Round to nearest, ties to even, as ggml's nearest_int does. */
static int nearest(float v)
{
	return (int)lrintf(v);
}

static int clamp_int(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* Stores v as fp16 at p and returns the value as stored: later steps must
 * quantize against what a reader will see, not against v. */
static float put_half(uint8_t *p, float v)
{
	uint16_t h = f32_to_fp16(v);
	memcpy(p, &h, 2);
	return fp16_to_f32(h);
}

/* ------------------------------------------------------------------------
 * 32-element blocks. */

/* Packs 32 levels of 4 or 5 bits: elements j and j + 16 share byte j of qs
 * (low, high nibble); the fifth bit of element j is bit j of the
 * little-endian u32 at qh (NULL for 4-bit formats). */
static void pack_nibbles(const uint8_t *q, uint8_t *qs, uint8_t *qh)
{
	uint32_t high = 0;
	for (int j = 0; j < 16; j++) {
		qs[j] = (uint8_t)((q[j] & 0xf) | ((q[j + 16] & 0xf) << 4));
		high |= (uint32_t)(q[j] >> 4) << j;
		high |= (uint32_t)(q[j + 16] >> 4) << (j + 16);
	}
	if (qh != NULL)
		memcpy(qh, &high, 4);
}

/* Q4_0 (half = 8) / Q5_0 (half = 16): x = (q - half) * d with
 * d = max / -half, max the value of largest magnitude, so that value lands
 * exactly on level 0 and the asymmetric extra level is spent on it.
 * Returns d; levels go to q. */
static float fit_symmetric32(const float *x, int half, uint8_t *q)
{
	float amax = 0.0f, max = 0.0f;
	for (int j = 0; j < QK; j++)
		if (fabsf(x[j]) > amax) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	float d = max / (float)-half;
	float id = d != 0.0f ? 1.0f / d : 0.0f;
	for (int j = 0; j < QK; j++)
		q[j] = (uint8_t)clamp_int((int)(x[j] * id + (float)half + 0.5f), 0, 2 * half - 1);
	return d;
}

/* Q4_1 (nmax = 15) / Q5_1 (nmax = 31): x = q * d + min over [min, max]. */
static void fit_affine32(const float *x, int nmax, uint8_t *q, float *d_out, float *min_out)
{
	float lo = x[0], hi = x[0];
	for (int j = 1; j < QK; j++) {
		lo = fminf(lo, x[j]);
		hi = fmaxf(hi, x[j]);
	}
	float d = (hi - lo) / (float)nmax;
	float id = d != 0.0f ? 1.0f / d : 0.0f;
	for (int j = 0; j < QK; j++)
		q[j] = (uint8_t)clamp_int((int)((x[j] - lo) * id + 0.5f), 0, nmax);
	*d_out = d;
	*min_out = lo;
}

/* Q4_0: fp16 d, 16 bytes of nibbles.  18 bytes. */
static void write_q4_0(const float *x, uint8_t *b)
{
	uint8_t q[QK];
	put_half(b, fit_symmetric32(x, 8, q));
	pack_nibbles(q, b + 2, NULL);
}

/* Q4_1: fp16 d, fp16 min, 16 bytes of nibbles.  20 bytes. */
static void write_q4_1(const float *x, uint8_t *b)
{
	uint8_t q[QK];
	float d, min;
	fit_affine32(x, 15, q, &d, &min);
	put_half(b, d);
	put_half(b + 2, min);
	pack_nibbles(q, b + 4, NULL);
}

/* Q5_0: fp16 d, u32 fifth bits, 16 bytes of nibbles.  22 bytes. */
static void write_q5_0(const float *x, uint8_t *b)
{
	uint8_t q[QK];
	put_half(b, fit_symmetric32(x, 16, q));
	pack_nibbles(q, b + 6, b + 2);
}

/* Q5_1: fp16 d, fp16 min, u32 fifth bits, 16 bytes of nibbles.  24 bytes. */
static void write_q5_1(const float *x, uint8_t *b)
{
	uint8_t q[QK];
	float d, min;
	fit_affine32(x, 31, q, &d, &min);
	put_half(b, d);
	put_half(b + 2, min);
	pack_nibbles(q, b + 8, b + 4);
}

/* Q8_0: fp16 d = max|x| / 127, 32 int8.  ggml rounds against d before
 * its fp16 rounding; rounding against the stored d, as sinkd always has,
 * keeps every value within half a step of what a reader decodes.
 * 34 bytes. */
static void write_q8_0(const float *x, uint8_t *b)
{
	float amax = 0.0f;
	for (int j = 0; j < QK; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	float d = put_half(b, amax / 127.0f);
	float id = d != 0.0f ? 1.0f / d : 0.0f;
	for (int j = 0; j < QK; j++) {
		float v = fminf(127.0f, fmaxf(-127.0f, roundf(x[j] * id)));
		b[2 + j] = (uint8_t)(int8_t)v;
	}
}

/* ------------------------------------------------------------------------
 * Q4_K and Q5_K: 8 sub-blocks of 32, each x = scale * q - min. */

/* L[i] = round((x[i] - lo) * iscale), clamped to 0..nmax. */
static void affine_levels(const float *x, int n, float lo, float iscale, int nmax, uint8_t *L)
{
	for (int i = 0; i < n; i++)
		L[i] = (uint8_t)clamp_int(nearest(iscale * (x[i] - lo)), 0, nmax);
}

/* Weighted squared error of scale * L + min against x. */
static float affine_error(const float *x, const float *w, int n, const uint8_t *L, float scale,
                          float min)
{
	float e = 0.0f;
	for (int i = 0; i < n; i++) {
		float diff = scale * (float)L[i] + min - x[i];
		e += w[i] * diff * diff;
	}
	return e;
}

/* Fits n (<= 32) values as scale * L + min, L in 0..nmax and min <= 0, in
 * the manner of ggml's make_qkx2_quants: the plain [min, max] grid first,
 * then grids of nmax + rmin + k * 0.1 steps (k = 0..nstep) across the range;
 * each grid's levels get their closed-form weighted-least-squares scale and
 * min, and the fit with the least weighted squared error wins.  Returns the
 * scale; *neg_min = -min (>= 0). */
static float fit_scale_min(const float *x, const float *w, int n, int nmax, float rmin, int nstep,
                           uint8_t *L, float *neg_min)
{
	float lo = x[0], hi = x[0], sum_w = 0.0f, sum_x = 0.0f;
	for (int i = 0; i < n; i++) {
		lo = fminf(lo, x[i]);
		hi = fmaxf(hi, x[i]);
		sum_w += w[i];
		sum_x += w[i] * x[i];
	}
	lo = fminf(lo, 0.0f); /* the format subtracts a min, so it cannot add one */
	if (hi == lo) {
		memset(L, 0, (size_t)n);
		*neg_min = -lo;
		return 0.0f;
	}
	float iscale = (float)nmax / (hi - lo), scale = 1.0f / iscale, min = lo;
	affine_levels(x, n, lo, iscale, nmax, L);
	float best = affine_error(x, w, n, L, scale, min);
	for (int k = 0; k <= nstep; k++) {
		uint8_t cand[QK];
		affine_levels(x, n, lo, ((float)nmax + rmin + 0.1f * (float)k) / (hi - lo), nmax,
		              cand);
		float sl = 0.0f, sl2 = 0.0f, sxl = 0.0f;
		for (int i = 0; i < n; i++) {
			float l = (float)cand[i];
			sl += w[i] * l;
			sl2 += w[i] * l * l;
			sxl += w[i] * l * x[i];
		}
		float det = sum_w * sl2 - sl * sl;
		if (det <= 0.0f)
			continue;
		float s = (sum_w * sxl - sum_x * sl) / det, m = (sl2 * sum_x - sl * sxl) / det;
		if (m > 0.0f) { /* refit through zero */
			m = 0.0f;
			s = sxl / sl2;
		}
		float e = affine_error(x, w, n, cand, s, m);
		if (e < best) {
			memcpy(L, cand, (size_t)n);
			best = e;
			scale = s;
			min = m;
		}
	}
	*neg_min = -min;
	return scale;
}

/* 8 (scale, min) pairs of 6 bits into the 12-byte array dequant.c's
 * scale_min_k4 reads: pairs 0-3 in the low 6 bits of bytes 0-3 / 4-7,
 * pairs 4-7 as nibbles of bytes 8-11 plus the top 2 bits of bytes 0-7. */
static void pack_scales_k4(const int *sc, const int *mn, uint8_t *q)
{
	for (int j = 0; j < 4; j++) {
		q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
		q[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
		q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
	}
}

/* The part Q4_K and Q5_K share: per sub-block a fitted scale and min (the
 * weights favour large values, as ggml's do), both quantized to 6 bits
 * against fp16 super-block scales d and dmin; then every value's level
 * against its sub-block's scale and min as stored.  Writes d, dmin and the
 * packed scales to b[0..15], the 256 levels to L. */
static void fit_superblock_k(const float *x, int nmax, float rmin, int nstep, uint8_t *b,
                             uint8_t *L)
{
	float scales[8], mins[8], w[QK], max_scale = 0.0f, max_min = 0.0f;
	for (int j = 0; j < 8; j++) {
		const float *xs = x + QK * j;
		float sum2 = 0.0f;
		for (int l = 0; l < QK; l++)
			sum2 += xs[l] * xs[l];
		float av = sqrtf(sum2 / QK);
		for (int l = 0; l < QK; l++)
			w[l] = av + fabsf(xs[l]);
		scales[j] = fit_scale_min(xs, w, QK, nmax, rmin, nstep, L + QK * j, &mins[j]);
		max_scale = fmaxf(max_scale, scales[j]);
		max_min = fmaxf(max_min, mins[j]);
	}
	float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
	float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
	int sc[8], mn[8];
	for (int j = 0; j < 8; j++) {
		sc[j] = clamp_int(nearest(inv_scale * scales[j]), 0, 63);
		mn[j] = clamp_int(nearest(inv_min * mins[j]), 0, 63);
	}
	float d = put_half(b, max_scale / 63.0f), dmin = put_half(b + 2, max_min / 63.0f);
	pack_scales_k4(sc, mn, b + 4);
	for (int j = 0; j < 8; j++) {
		float ds = d * (float)sc[j], dm = dmin * (float)mn[j];
		uint8_t *Lj = L + QK * j;
		if (ds == 0.0f) { /* every level decodes to -dm */
			memset(Lj, 0, QK);
			continue;
		}
		for (int l = 0; l < QK; l++)
			Lj[l] = (uint8_t)clamp_int(nearest((x[QK * j + l] + dm) / ds), 0, nmax);
	}
}

/* Q4_K: fp16 d, fp16 dmin, 12 bytes scales, 128 bytes of nibbles (sub-blocks
 * 2p and 2p + 1 share 32 bytes, low then high).  144 bytes. */
static void write_q4_k(const float *x, uint8_t *b)
{
	uint8_t L[QK_K];
	fit_superblock_k(x, 15, -1.0f, 20, b, L);
	uint8_t *qs = b + 16;
	for (int p = 0; p < 4; p++)
		for (int l = 0; l < QK; l++)
			qs[QK * p + l] = (uint8_t)(L[64 * p + l] | (L[64 * p + 32 + l] << 4));
}

/* Q5_K: as Q4_K plus 32 bytes of fifth bits (sub-block j's in bit j of byte
 * l) before the nibbles.  176 bytes. */
static void write_q5_k(const float *x, uint8_t *b)
{
	uint8_t L[QK_K];
	fit_superblock_k(x, 31, -0.5f, 15, b, L);
	uint8_t *qh = b + 16, *qs = b + 48;
	memset(qh, 0, 32);
	for (int p = 0; p < 4; p++)
		for (int l = 0; l < QK; l++) {
			int lo = L[64 * p + l], hi = L[64 * p + 32 + l];
			qs[QK * p + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
			qh[l] |= (uint8_t)(((lo >> 4) << (2 * p)) | ((hi >> 4) << (2 * p + 1)));
		}
}

/* ------------------------------------------------------------------------
 * Q6_K: 16 groups of 16, each x = d * scale * (q - 32). */

/* Levels of x on the symmetric grid of step 1/iscale, offset by nmax; with
 * x^2 weights, *sxl = sum w x l and *sl2 = sum w l^2. */
static void symmetric_levels(const float *x, int n, float iscale, int nmax, uint8_t *L, float *sxl,
                             float *sl2)
{
	*sxl = *sl2 = 0.0f;
	for (int i = 0; i < n; i++) {
		int l = clamp_int(nearest(iscale * x[i]), -nmax, nmax - 1);
		float w = x[i] * x[i];
		L[i] = (uint8_t)(l + nmax);
		*sxl += w * x[i] * (float)l;
		*sl2 += w * (float)(l * l);
	}
}

/* Fits n (<= 16) values as scale * (L - nmax), in the manner of ggml's
 * make_qx_quants with x^2 weights: the grid that puts the largest-magnitude
 * value on level -nmax, then 18 grids that put it at -(nmax +- 0.1 k); each
 * grid gets its least-squares scale, and the one that explains the most
 * weighted energy ((sum w x l)^2 / sum w l^2, i.e. the least squared error)
 * wins.  Returns the scale (negative when that value is positive). */
static float fit_scale_symmetric(const float *x, int n, int nmax, uint8_t *L)
{
	float amax = 0.0f, max = 0.0f;
	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			max = x[i];
		}
	if (amax < 1e-15f) {
		memset(L, nmax, (size_t)n);
		return 0.0f;
	}
	float sxl, sl2;
	symmetric_levels(x, n, -(float)nmax / max, nmax, L, &sxl, &sl2);
	float scale = sl2 > 0.0f ? sxl / sl2 : 0.0f, best = scale * sxl;
	for (int k = -9; k <= 9; k++) {
		uint8_t cand[16];
		if (k == 0)
			continue;
		symmetric_levels(x, n, -((float)nmax + 0.1f * (float)k) / max, nmax, cand, &sxl,
		                 &sl2);
		if (sl2 > 0.0f && sxl * sxl > best * sl2) {
			memcpy(L, cand, (size_t)n);
			scale = sxl / sl2;
			best = scale * sxl;
		}
	}
	return scale;
}

/* Packs 256 6-bit levels: in each half of 128, levels l, l+32, l+64, l+96
 * (l < 32) share low-nibble bytes l and l + 32 and the 2-bit pairs of qh
 * byte l. */
static void pack_q6_k(const uint8_t *L, uint8_t *ql, uint8_t *qh)
{
	for (int h = 0; h < 2; h++, L += 128, ql += 64, qh += 32)
		for (int l = 0; l < 32; l++) {
			ql[l] = (uint8_t)((L[l] & 15) | ((L[l + 64] & 15) << 4));
			ql[l + 32] = (uint8_t)((L[l + 32] & 15) | ((L[l + 96] & 15) << 4));
			qh[l] = (uint8_t)((L[l] >> 4) | ((L[l + 32] >> 4) << 2) |
			                  ((L[l + 64] >> 4) << 4) | ((L[l + 96] >> 4) << 6));
		}
}

/* Q6_K: 128 bytes low nibbles, 64 bytes high pairs, 16 int8 scales, fp16 d
 * with d = -max_scale / 128 so the largest group scale is -128.
 * 210 bytes. */
static void write_q6_k(const float *x, uint8_t *b)
{
	uint8_t L[QK_K];
	float scales[16], max_scale = 0.0f, max_abs = 0.0f;
	for (int g = 0; g < 16; g++) {
		scales[g] = fit_scale_symmetric(x + 16 * g, 16, 32, L + 16 * g);
		if (fabsf(scales[g]) > max_abs) {
			max_abs = fabsf(scales[g]);
			max_scale = scales[g];
		}
	}
	memset(b, 0, 210);
	if (max_abs < 1e-15f)
		return; /* all zeros: d = 0 */
	float iscale = -128.0f / max_scale;
	float d = put_half(b + 208, 1.0f / iscale);
	int8_t sc[16];
	for (int g = 0; g < 16; g++) {
		sc[g] = (int8_t)clamp_int(nearest(iscale * scales[g]), -128, 127);
		float ds = d * (float)sc[g];
		for (int i = 0; i < 16; i++) {
			int l = ds != 0.0f ? clamp_int(nearest(x[16 * g + i] / ds), -32, 31) : 0;
			L[16 * g + i] = (uint8_t)(l + 32);
		}
	}
	memcpy(b + 192, sc, 16);
	pack_q6_k(L, b, b + 128);
}

/* ------------------------------------------------------------------------
 * MXFP4 (layout: dequant.h), ggml's quantize_row_mxfp4_ref: the scale is
 * 2^(floor(log2 m) - 3) for the largest magnitude m, so m lands at 8..16
 * units and values beyond 12 units clip to 12 (the format's largest); each
 * value takes the code of least error, the first in code order on a tie
 * (so 0 over -0, the smaller magnitude between two levels). */

static int mxfp4_nearest_code(float x, float d)
{
	int best = 0;
	float best_err = fabsf((float)mxfp4_kvalues[0] * d - x);
	for (int i = 1; i < 16; i++) {
		float err = fabsf((float)mxfp4_kvalues[i] * d - x);
		if (err < best_err) {
			best = i;
			best_err = err;
		}
	}
	return best;
}

static void write_mxfp4(const float *x, uint8_t *b)
{
	float amax = 0.0f;
	for (int j = 0; j < QK; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	/* ggml's exponent, kept inside E8M0's finite range 0..254 */
	int e = amax > 0.0f ? (int)floorf(log2f(amax)) - 2 + 127 : 0;
	e = clamp_int(e, 0, 254);
	b[0] = (uint8_t)e;
	float d = mxfp4_scale((uint8_t)e);
	for (int j = 0; j < QK / 2; j++)
		b[1 + j] = (uint8_t)(mxfp4_nearest_code(x[j], d) |
		                     (mxfp4_nearest_code(x[j + QK / 2], d) << 4));
}

/* ------------------------------------------------------------------------
 * Rows. */

typedef void (*block_writer)(const float *x, uint8_t *block);

static block_writer block_writer_of(enum ggml_type type)
{
	switch (type) {
	case GGML_TYPE_Q4_0:
		return write_q4_0;
	case GGML_TYPE_Q4_1:
		return write_q4_1;
	case GGML_TYPE_Q5_0:
		return write_q5_0;
	case GGML_TYPE_Q5_1:
		return write_q5_1;
	case GGML_TYPE_Q8_0:
		return write_q8_0;
	case GGML_TYPE_Q4_K:
		return write_q4_k;
	case GGML_TYPE_Q5_K:
		return write_q5_k;
	case GGML_TYPE_Q6_K:
		return write_q6_k;
	case GGML_TYPE_MXFP4:
		return write_mxfp4;
	default:
		return NULL;
	}
}

bool quantize_supported(enum ggml_type type)
{
	return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 ||
	       block_writer_of(type) != NULL;
}

/* F16 / BF16: one 16-bit value per element, stored unaligned. */
static void write_16bit(const float *src, uint8_t *dst, uint64_t n, uint16_t (*conv)(float))
{
	for (uint64_t i = 0; i < n; i++) {
		uint16_t h = conv(src[i]);
		memcpy(dst + 2 * i, &h, 2);
	}
}

int quantize_row(enum ggml_type type, const float *src, void *dst, uint64_t n, char *err,
                 size_t err_len)
{
	uint8_t *out = dst;
	switch (type) {
	case GGML_TYPE_F32:
		memcpy(dst, src, (size_t)n * sizeof(float));
		return 0;
	case GGML_TYPE_F16:
		write_16bit(src, out, n, f32_to_fp16);
		return 0;
	case GGML_TYPE_BF16:
		write_16bit(src, out, n, f32_to_bf16);
		return 0;
	default:
		break;
	}
	block_writer fn = block_writer_of(type);
	if (fn == NULL)
		return err_set(err, err_len, -ENOTSUP, "cannot quantize to %s",
		               ggml_type_name(type));
	uint32_t bs = ggml_block_size(type);
	if (n % bs != 0)
		return err_set(err, err_len, -EINVAL,
		               "%s needs rows that are a multiple of its block size %" PRIu32
		               ", not %" PRIu64 " elements",
		               ggml_type_name(type), bs, n);
	size_t block_bytes = ggml_row_bytes(type, bs);
	for (uint64_t i = 0; i < n / bs; i++)
		fn(src + i * bs, out + i * block_bytes);
	return 0;
}

int quantize_row_q8_0(const float *src, void *dst, uint64_t n)
{
	return quantize_row(GGML_TYPE_Q8_0, src, dst, n, NULL, 0);
}
