/* Dot products of block-quantized GGUF weight rows (Q8_0, Q4_0, Q4_K, Q5_K,
 * Q6_K, MXFP4, blocks exactly as stored in the file) with activations quantized to
 * int8 blocks, in integers within each block: a plain-C twin and AVX2,
 * AVX-VNNI, AVX-512BW and AVX-512 VNNI variants, picked once by CPU feature.
 * Every variant forms the same per-block integer sums as the twin, so they
 * differ from it only by float summation order. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"

/* Rows and activation vectors of one register tile (qdot_kernels.dot_tile). */
#define QDOT_TILE_ROWS 4
#define QDOT_TILE_VECS 8

/* The kernel variants, in the order qdot_variant_best prefers the last. */
enum qdot_variant {
	QDOT_VARIANT_SCALAR = 0, /* the plain-C twin */
	QDOT_VARIANT_AVX2,       /* maddubs + madd */
	QDOT_VARIANT_AVXVNNI,    /* 256-bit vpdpbusd / vpdpwssd */
	QDOT_VARIANT_AVX512BW,   /* 512-bit maddubs + madd */
	QDOT_VARIANT_AVX512VNNI, /* 512-bit vpdpbusd / vpdpwssd */
	QDOT_VARIANT_COUNT
};

/* One weight row of n values (blocks of the type as in GGUF) times one
 * quantized activation vector (qdot_act_quantize) of n values. */
typedef float (*qdot_row_fn)(const void *w_row, const void *xq, int n);

/* y[b * ldy + r] = (weight row r) . (activation b) for r < R <= QDOT_TILE_ROWS
 * and b < B <= QDOT_TILE_VECS; each weight block is loaded once for all B.
 * w: R rows, w_row_bytes apart; xq: B activation vectors, xq_bytes apart;
 * n: values per row. */
typedef void (*qdot_tile_fn)(const void *w, size_t w_row_bytes, int R, const void *xq,
                             size_t xq_bytes, int B, int n, float *y, size_t ldy);

/* The kernels of one weight type under one variant. */
struct qdot_kernels {
	qdot_row_fn dot_row;
	qdot_tile_fn dot_tile;
};

/* x rounded to the nearest integer, ties to even (lrintf in the default
 * rounding mode) for |x| < 2^22, without lrintf's libm call: adding 1.5 *
 * 2^23 leaves the rounded value in the low mantissa bits.  The activation
 * quantizers round every value, where that call cost a tenth of a batch. */
static inline int qdot_round(float x)
{
	union {
		float f;
		int32_t i;
	} u = {.f = x + 12582912.0f};
	return (u.i & 0x007fffff) - 0x00400000;
}

/* True for the weight types these kernels read. */
bool qdot_type_supported(enum ggml_type wtype);
/* Values per weight block of the type (32 or 256); n must be a multiple. */
int qdot_block_values(enum ggml_type wtype);

/* Bytes of n activation values quantized for products with wtype weights
 * (0 for an unsupported type): 32-value blocks for Q8_0/Q4_0/MXFP4, 256-value
 * blocks with sums per 16 values for the K-quants. */
size_t qdot_act_bytes(enum ggml_type wtype, int n);
/* x (n floats, n a multiple of qdot_block_values) -> xq (qdot_act_bytes):
 * per block scale d = max|x| / 127, q = round(x / d). */
void qdot_act_quantize(enum ggml_type wtype, const float *x, int n, void *xq);
/* What the kernels see of x: xq back to n floats, d * q (tests build their
 * references from it). */
void qdot_act_dequantize(enum ggml_type wtype, const void *xq, int n, float *out);

/* Whether this CPU runs the variant. */
bool qdot_variant_runs(enum qdot_variant v);
/* A short name ("avx512vnni"), for tests and benchmarks. */
const char *qdot_variant_name(enum qdot_variant v);
/* The fastest variant this CPU runs. */
enum qdot_variant qdot_variant_best(void);
/* The kernels of wtype under v, or NULL when v does not run here or the
 * type is not supported. */
const struct qdot_kernels *qdot_kernels_get(enum ggml_type wtype, enum qdot_variant v);

/* dot_tile over any R x B (either may be 0): tiles of QDOT_TILE_ROWS rows,
 * each tile running every activation in groups of QDOT_TILE_VECS while its
 * weight rows are still in L1.  Arguments as in qdot_tile_fn. */
void qdot_rows(const struct qdot_kernels *k, const void *w, size_t w_row_bytes, int R,
               const void *xq, size_t xq_bytes, int B, int n, float *y, size_t ldy);
