/* Rotary position embedding for the cache: frequencies as double-double,
 * angles exact far beyond 10^7 positions (see rope.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* freq_i = freq_scale * theta^(-2i/rope_dim) / factors[i] for i in
 * [0, rope_dim/2), as hi + lo with hi the double nearest and lo the
 * remainder (from long double).  factors: (rope_dim/2) per-pair frequency
 * factors (llama3's rope_freqs.weight) or NULL for none; freq_scale: linear
 * RoPE scaling (1 / rope.scaling.factor), 1 for none.  Factors and a scale of
 * 1 give the same bits as none.  hi, lo: (rope_dim/2). */
void rope_freqs_init(double theta, int rope_dim, const float *factors, double freq_scale,
                     double *hi, double *lo);

/* cs: (rope_dim) holding cos(pos*freq_i), sin(pos*freq_i) for each i. */
void rope_cos_sin(const double *hi, const double *lo, int rope_dim, uint64_t pos, double *cs);

/* Rotates the first rope_dim values of one head vector x (head_dim) in place:
 * pairs (x[2i], x[2i+1]) (llama) or (x[i], x[i+rope_dim/2]) (neox, qwen2),
 * computed in double, rounded once. */
void rope_apply(float *x, const double *cs, int rope_dim, bool neox);
