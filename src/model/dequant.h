/* Conversions between ggml element types and float: whole rows of every
 * type the loader accepts (F32, F16, BF16, Q8_0 and the dequantize-at-load
 * types Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "model/gguf.h"
#include "util/half.h" /* the scalars, for the users of the row conversions */

/* True when dequantize_row supports the type. */
bool dequant_supported(enum ggml_type type);

/* Converts n elements (a multiple of the type's block size) to float. */
int dequantize_row(enum ggml_type type, const void *src, float *dst, uint64_t n);
