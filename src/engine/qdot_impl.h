/* Private to qdot.c and its ISA files: the quantized activation blocks and
 * the tables each ISA file hands to qdot.c. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "engine/qdot.h"
#include "model/dequant.h" /* MXFP4's layout, code values and scale */

/* Activations for Q8_0 and Q4_0 weights: 32 values, x ~ d * qs. */
struct qdot_q8_block {
	float d;
	int32_t sum; /* sum of qs: Q4_0's -8 offset without sign tricks */
	int8_t qs[32];
};
_Static_assert(sizeof(struct qdot_q8_block) == 40, "Q8 activation block is 40 bytes");

/* Activations for the K-quants (ggml's Q8_K): 256 values, x ~ d * qs. */
struct qdot_q8k_block {
	float d;
	int8_t qs[256];
	int16_t bsums[16]; /* sums of qs per 16 values: the K-quant mins */
};
_Static_assert(sizeof(struct qdot_q8k_block) == 292, "Q8_K activation block is 292 bytes");

/* Bytes of one weight block as stored in GGUF. */
#define QDOT_Q8_0_BYTES 34
#define QDOT_Q4_0_BYTES 18
#define QDOT_Q4_K_BYTES 144
#define QDOT_Q5_K_BYTES 176
#define QDOT_Q6_K_BYTES 210
#define QDOT_MXFP4_BYTES MXFP4_BLOCK_BYTES

/* MXFP4's code values (model/dequant.h: mxfp4_kvalues, -12..12) plus
 * QDOT_MXFP4_OFFSET, 0..24, an initializer list for the byte-shuffle
 * tables: unsigned codes as the byte products want them, the offset taken
 * off with the activations' sum (as Q4_0's 8). */
#define QDOT_MXFP4_OFFSET 12
#define QDOT_MXFP4_KVALUES_U 12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block from
 * its 12 packed bytes (ggml's get_scale_min_k4). */
static inline void qdot_scale_min_k4(int j, const uint8_t *q, int *sc, int *mn)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*mn = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
		*mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/* The kernels of wtype in qdot_avx2.c (vnni: the AVX-VNNI build) and
 * qdot_avx512.c (vnni: the AVX-512 VNNI build); NULL off x86 or for an
 * unsupported type. */
const struct qdot_kernels *qdot_avx2_kernels(enum ggml_type wtype, bool vnni);
const struct qdot_kernels *qdot_avx512_kernels(enum ggml_type wtype, bool vnni);
