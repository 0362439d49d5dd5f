/* Quantized weight rows times quantized activations (see qdot.h): the
 * activation quantizer, the plain-C twin of every kernel, and the choice of
 * variant by CPU feature.  Per weight block the twin forms exact integer
 * sums and then one or two float products, blocks added in order; the ISA
 * files (qdot_avx2.c, qdot_avx512.c) form the same integers.  It does not
 * split work over threads or know about matrices: the matmul module does. */
#include "engine/qdot.h"
#include "engine/qdot_impl.h"

#include "model/dequant.h"
#include "model/wtype.h"
#include "util/cpu.h"
#include "util/half.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------ activations */

bool qdot_type_supported(enum ggml_type wtype)
{
	return wtype_integer_dot(wtype);
}

static bool is_k_quant(enum ggml_type wtype)
{
	return wtype == GGML_TYPE_Q4_K || wtype == GGML_TYPE_Q5_K || wtype == GGML_TYPE_Q6_K;
}

int qdot_block_values(enum ggml_type wtype)
{
	return !qdot_type_supported(wtype) ? 0 : is_k_quant(wtype) ? 256 : 32;
}

size_t qdot_act_bytes(enum ggml_type wtype, int n)
{
	if (!qdot_type_supported(wtype))
		return 0;
	if (is_k_quant(wtype))
		return (size_t)(n / 256) * sizeof(struct qdot_q8k_block);
	return (size_t)(n / 32) * sizeof(struct qdot_q8_block);
}

/* v (n) -> qs (n): scale max|v| / 127, round to nearest (as matmul.c's Q8
 * activations, so both paths see the same x); returns the scale. */
static float quantize_block(const float *v, int n, int8_t *qs)
{
	float amax = 0.0f;
	for (int i = 0; i < n; i++)
		amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
	float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
	for (int i = 0; i < n; i++) {
		int q = qdot_round(v[i] * id);
		qs[i] = (int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
	}
	return d;
}

void qdot_act_quantize(enum ggml_type wtype, const float *x, int n, void *xq)
{
	if (is_k_quant(wtype)) {
		struct qdot_q8k_block *b = xq;
		for (int k = 0; k < n / 256; k++, x += 256) {
			b[k].d = quantize_block(x, 256, b[k].qs);
			for (int g = 0; g < 16; g++) {
				int s = 0;
				for (int i = 0; i < 16; i++)
					s += b[k].qs[16 * g + i];
				b[k].bsums[g] = (int16_t)s;
			}
		}
	} else if (qdot_type_supported(wtype)) {
		struct qdot_q8_block *b = xq;
		for (int k = 0; k < n / 32; k++, x += 32) {
			b[k].d = quantize_block(x, 32, b[k].qs);
			b[k].sum = 0;
			for (int i = 0; i < 32; i++)
				b[k].sum += b[k].qs[i];
		}
	}
}

void qdot_act_dequantize(enum ggml_type wtype, const void *xq, int n, float *out)
{
	if (is_k_quant(wtype)) {
		const struct qdot_q8k_block *b = xq;
		for (int i = 0; i < n; i++)
			out[i] = b[i / 256].d * (float)b[i / 256].qs[i % 256];
	} else if (qdot_type_supported(wtype)) {
		const struct qdot_q8_block *b = xq;
		for (int i = 0; i < n; i++)
			out[i] = b[i / 32].d * (float)b[i / 32].qs[i % 32];
	}
}

/* ------------------------------------------------ the plain-C twin, by block
 * Each returns one weight block times one activation block as float. */

/* Q8_0: fp16 d, 32 int8. */
static float block_q8_0(const uint8_t *w, const void *xv)
{
	const struct qdot_q8_block *x = xv;
	const int8_t *q = (const int8_t *)(w + 2);
	int32_t sum = 0;
	for (int i = 0; i < 32; i++)
		sum += q[i] * x->qs[i];
	return fp16_load_f32(w) * x->d * (float)sum;
}

/* Q4_0: fp16 d, 16 bytes: value i is nibble (i % 16) of byte, low first, - 8. */
static float block_q4_0(const uint8_t *w, const void *xv)
{
	const struct qdot_q8_block *x = xv;
	const uint8_t *q = w + 2;
	int32_t sum = 0;
	for (int i = 0; i < 16; i++)
		sum += ((q[i] & 0xf) - 8) * x->qs[i] + ((q[i] >> 4) - 8) * x->qs[i + 16];
	return fp16_load_f32(w) * x->d * (float)sum;
}

/* MXFP4: E8M0 e, 16 bytes: value i is nibble (i / 16) of byte i % 16, low
 * first, a code into mxfp4_kvalues (model/dequant.h). */
static float block_mxfp4(const uint8_t *w, const void *xv)
{
	const struct qdot_q8_block *x = xv;
	const int8_t *kv = mxfp4_kvalues;
	const uint8_t *q = w + 1;
	int32_t sum = 0;
	for (int i = 0; i < 16; i++)
		sum += kv[q[i] & 0xf] * x->qs[i] + kv[q[i] >> 4] * x->qs[i + 16];
	return mxfp4_scale(w[0]) * x->d * (float)sum;
}

/* Q4_K / Q5_K share the scales and mins: d * sum_j sc_j * (q . x)_j and
 * dmin * sum_j m_j * (sum of x)_j, both exact integers. */
static float k4_combine(const uint8_t *w, const struct qdot_q8k_block *x, const int32_t dots[8])
{
	int32_t sumi = 0, summ = 0;
	for (int j = 0; j < 8; j++) {
		int sc, mn;
		qdot_scale_min_k4(j, w + 4, &sc, &mn);
		sumi += sc * dots[j];
		summ += mn * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
	}
	return x->d * fp16_load_f32(w) * (float)sumi - x->d * fp16_load_f32(w + 2) * (float)summ;
}

/* Q4_K: fp16 d, dmin, 12 bytes scales, 128 bytes: sub-block 2k is the low
 * nibbles of bytes [32k, 32k+32), 2k+1 the high ones. */
static float block_q4_k(const uint8_t *w, const void *xv)
{
	const struct qdot_q8k_block *x = xv;
	const uint8_t *qs = w + 16;
	int32_t dots[8] = {0};
	for (int k = 0; k < 4; k++)
		for (int l = 0; l < 32; l++) {
			dots[2 * k] += (qs[32 * k + l] & 0xf) * x->qs[64 * k + l];
			dots[2 * k + 1] += (qs[32 * k + l] >> 4) * x->qs[64 * k + 32 + l];
		}
	return k4_combine(w, x, dots);
}

/* Q5_K: as Q4_K, with bit j of qh[l] the fifth bit of value l of sub-block j. */
static float block_q5_k(const uint8_t *w, const void *xv)
{
	const struct qdot_q8k_block *x = xv;
	const uint8_t *qh = w + 16, *qs = w + 48;
	int32_t dots[8] = {0};
	for (int k = 0; k < 4; k++)
		for (int l = 0; l < 32; l++) {
			int lo = (qs[32 * k + l] & 0xf) | (((qh[l] >> (2 * k)) & 1) << 4);
			int hi = (qs[32 * k + l] >> 4) | (((qh[l] >> (2 * k + 1)) & 1) << 4);
			dots[2 * k] += lo * x->qs[64 * k + l];
			dots[2 * k + 1] += hi * x->qs[64 * k + 32 + l];
		}
	return k4_combine(w, x, dots);
}

/* Value e (0..255) of a Q6_K block, 0..63 (the stored value is this - 32). */
static int q6_k_value(const uint8_t *w, int e)
{
	int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
	const uint8_t *ql = w + 64 * h + (quarter & 1) * 32, *qh = w + 128 + 32 * h;
	int lo = quarter < 2 ? ql[l] & 0xf : ql[l] >> 4;
	return lo | (((qh[l] >> (2 * quarter)) & 3) << 4);
}

/* Q6_K: 128 bytes low nibbles, 64 bytes high pairs, 16 int8 scales (one
 * per 16 values), fp16 d. */
static float block_q6_k(const uint8_t *w, const void *xv)
{
	const struct qdot_q8k_block *x = xv;
	const int8_t *sc = (const int8_t *)(w + 192);
	int32_t sum = 0;
	for (int g = 0; g < 16; g++) {
		int32_t dot = 0;
		for (int i = 0; i < 16; i++)
			dot += (q6_k_value(w, 16 * g + i) - 32) * x->qs[16 * g + i];
		sum += sc[g] * dot;
	}
	return x->d * fp16_load_f32(w + 208) * (float)sum;
}

/* ------------------------------------------------------- the twin's table */

typedef float (*block_fn)(const uint8_t *w, const void *x);

struct scalar_type {
	block_fn block;
	int values;     /* per block */
	size_t w_bytes; /* per weight block */
	size_t x_bytes; /* per activation block */
};

static const struct scalar_type *scalar_type_of(enum ggml_type t)
{
	static const struct scalar_type q8_0 = {block_q8_0, 32, QDOT_Q8_0_BYTES, 40};
	static const struct scalar_type q4_0 = {block_q4_0, 32, QDOT_Q4_0_BYTES, 40};
	static const struct scalar_type q4_k = {block_q4_k, 256, QDOT_Q4_K_BYTES, 292};
	static const struct scalar_type q5_k = {block_q5_k, 256, QDOT_Q5_K_BYTES, 292};
	static const struct scalar_type q6_k = {block_q6_k, 256, QDOT_Q6_K_BYTES, 292};
	static const struct scalar_type mxfp4 = {block_mxfp4, 32, QDOT_MXFP4_BYTES, 40};
	switch (t) {
	case GGML_TYPE_Q8_0:
		return &q8_0;
	case GGML_TYPE_Q4_0:
		return &q4_0;
	case GGML_TYPE_Q4_K:
		return &q4_k;
	case GGML_TYPE_Q5_K:
		return &q5_k;
	case GGML_TYPE_Q6_K:
		return &q6_k;
	case GGML_TYPE_MXFP4:
		return &mxfp4;
	default:
		return NULL;
	}
}

static float scalar_row(const struct scalar_type *st, const uint8_t *w, const uint8_t *x, int n)
{
	float s = 0.0f;
	for (int k = 0; k < n / st->values; k++)
		s += st->block(w + k * st->w_bytes, x + k * st->x_bytes);
	return s;
}

#define DEFINE_SCALAR(T, TYPE)                                                                     \
	static float row_##T(const void *w, const void *xq, int n)                                 \
	{                                                                                          \
		return scalar_row(scalar_type_of(TYPE), w, xq, n);                                 \
	}                                                                                          \
	static void tile_##T(const void *w, size_t wb, int R, const void *xq, size_t xb, int B,    \
	                     int n, float *y, size_t ldy)                                          \
	{                                                                                          \
		for (int b = 0; b < B; b++)                                                        \
			for (int r = 0; r < R; r++)                                                \
				y[(size_t)b * ldy + r] = row_##T((const uint8_t *)w + r * wb,      \
				                                 (const uint8_t *)xq + b * xb, n); \
	}                                                                                          \
	static const struct qdot_kernels scalar_##T = {row_##T, tile_##T};

DEFINE_SCALAR(q8_0, GGML_TYPE_Q8_0)
DEFINE_SCALAR(q4_0, GGML_TYPE_Q4_0)
DEFINE_SCALAR(q4_k, GGML_TYPE_Q4_K)
DEFINE_SCALAR(q5_k, GGML_TYPE_Q5_K)
DEFINE_SCALAR(q6_k, GGML_TYPE_Q6_K)
DEFINE_SCALAR(mxfp4, GGML_TYPE_MXFP4)

static const struct qdot_kernels *scalar_kernels(enum ggml_type t)
{
	switch (t) {
	case GGML_TYPE_Q8_0:
		return &scalar_q8_0;
	case GGML_TYPE_Q4_0:
		return &scalar_q4_0;
	case GGML_TYPE_Q4_K:
		return &scalar_q4_k;
	case GGML_TYPE_Q5_K:
		return &scalar_q5_k;
	case GGML_TYPE_Q6_K:
		return &scalar_q6_k;
	case GGML_TYPE_MXFP4:
		return &scalar_mxfp4;
	default:
		return NULL;
	}
}

/* --------------------------------------------------------------- variants */

#if defined(__x86_64__) && defined(__GNUC__)
static bool cpu_feature(enum qdot_variant v)
{
	switch (v) {
	case QDOT_VARIANT_AVX2:
		return cpu_has_avx2();
	case QDOT_VARIANT_AVXVNNI:
		return cpu_has_avx2() && cpu_has_avx_vnni();
	case QDOT_VARIANT_AVX512BW:
		return cpu_has_avx512();
	case QDOT_VARIANT_AVX512VNNI:
		return cpu_has_avx512() && cpu_has_avx512_vnni();
	default:
		return false;
	}
}
#else
static bool cpu_feature(enum qdot_variant v)
{
	return false;
}
#endif

bool qdot_variant_runs(enum qdot_variant v)
{
	if (v == QDOT_VARIANT_SCALAR)
		return true;
	return v > QDOT_VARIANT_SCALAR && v < QDOT_VARIANT_COUNT && cpu_feature(v) &&
	       qdot_kernels_get(GGML_TYPE_Q8_0, v) != NULL;
}

const char *qdot_variant_name(enum qdot_variant v)
{
	static const char *const names[QDOT_VARIANT_COUNT] = {"scalar", "avx2", "avxvnni",
	                                                      "avx512bw", "avx512vnni"};
	return v >= 0 && v < QDOT_VARIANT_COUNT ? names[v] : "?";
}

enum qdot_variant qdot_variant_best(void)
{
	for (int v = QDOT_VARIANT_COUNT - 1; v > QDOT_VARIANT_SCALAR; v--)
		if (qdot_variant_runs((enum qdot_variant)v))
			return (enum qdot_variant)v;
	return QDOT_VARIANT_SCALAR;
}

const struct qdot_kernels *qdot_kernels_get(enum ggml_type wtype, enum qdot_variant v)
{
	if (!qdot_type_supported(wtype))
		return NULL;
	switch (v) {
	case QDOT_VARIANT_SCALAR:
		return scalar_kernels(wtype);
	case QDOT_VARIANT_AVX2:
	case QDOT_VARIANT_AVXVNNI:
		return cpu_feature(v) ? qdot_avx2_kernels(wtype, v == QDOT_VARIANT_AVXVNNI) : NULL;
	case QDOT_VARIANT_AVX512BW:
	case QDOT_VARIANT_AVX512VNNI:
		return cpu_feature(v) ? qdot_avx512_kernels(wtype, v == QDOT_VARIANT_AVX512VNNI)
		                      : NULL;
	default:
		return NULL;
	}
}

void qdot_rows(const struct qdot_kernels *k, const void *w, size_t w_row_bytes, int R,
               const void *xq, size_t xq_bytes, int B, int n, float *y, size_t ldy)
{
	for (int r = 0; r < R; r += QDOT_TILE_ROWS) {
		int rr = R - r < QDOT_TILE_ROWS ? R - r : QDOT_TILE_ROWS;
		for (int b = 0; b < B; b += QDOT_TILE_VECS) {
			int bb = B - b < QDOT_TILE_VECS ? B - b : QDOT_TILE_VECS;
			k->dot_tile((const uint8_t *)w + (size_t)r * w_row_bytes, w_row_bytes, rr,
			            (const uint8_t *)xq + (size_t)b * xq_bytes, xq_bytes, bb, n,
			            y + (size_t)b * ldy + r, ldy);
		}
	}
}
