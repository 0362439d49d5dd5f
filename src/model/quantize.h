/* Float rows to ggml storage types: the block-quantized formats Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4 (byte layouts exactly as GGUF/ggml
 * define them, the ones dequant.c reads) and the plain F32, F16 and BF16, so
 * a GGUF writer needs one call per row whatever the type. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"

/* True when quantize_row can write the type. */
bool quantize_supported(enum ggml_type type);

/* Encodes n floats (a multiple of the type's block size: 32, or 256 for the
 * K types) into dst, which holds ggml_row_bytes(type, n) bytes.  Returns 0,
 * -EINVAL when n is not a multiple of the block size, or -ENOTSUP for a type
 * it cannot write; err names the type. */
int quantize_row(enum ggml_type type, const float *src, void *dst, uint64_t n, char *err,
                 size_t err_len);

/* Q8_0 (34-byte blocks: scale = max|x| / 127 as fp16, q = round(x / scale));
 * the same as quantize_row(GGML_TYPE_Q8_0, ...) without a message. */
int quantize_row_q8_0(const float *src, void *dst, uint64_t n);
