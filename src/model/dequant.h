/* Conversions between ggml element types and float: whole rows of every
 * type the loader accepts (F32, F16, BF16, Q8_0 and the dequantize-at-load
 * types Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "model/gguf.h"
#include "util/half.h" /* the scalars, for the users of the row conversions */

/* MXFP4 (ggml's block_mxfp4, 17 bytes per 32 values): the E8M0 exponent e,
 * then 16 bytes of 4-bit codes, value j < 16 the low nibble of byte j and
 * value 16 + j its high nibble.  A code's value is mxfp4_kvalues[code]
 * (E2M1 doubled, so integers) times 2^(e - 128): E8M0's 2^(e - 127) halved
 * to undo the doubling (ggml's GGML_E8M0_TO_FP32_HALF, denormal for e < 2). */
#define MXFP4_BLOCK_BYTES 17
extern const int8_t mxfp4_kvalues[16];

static inline float mxfp4_scale(uint8_t e)
{
	/* the float with that exponent: a denormal's bits for e < 2 */
	uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
	float s;
	memcpy(&s, &bits, sizeof(s));
	return s;
}

/* True when dequantize_row supports the type. */
bool dequant_supported(enum ggml_type type);

/* Converts n elements (a multiple of the type's block size) to float. */
int dequantize_row(enum ggml_type type, const void *src, float *dst, uint64_t n);
