/* Half precision (IEEE binary16, "f16") and bfloat16 to and from float. */
#pragma once

#include <stdint.h>

/* Exact: every f16 value, subnormals, infinities and NaNs included. */
float fp16_to_f32(uint16_t h);
/* Round to nearest even; overflow gives infinity; NaN stays a quiet NaN. */
uint16_t f32_to_fp16(float f);
/* Exact. */
float bf16_to_f32(uint16_t b);
/* Round to nearest even; NaN stays a quiet NaN. */
uint16_t f32_to_bf16(float f);
/* The f16 at p (no alignment needed) as float. */
float fp16_load_f32(const void *p);
