/* Rotary position embedding for the cache: frequencies as double-double,
 * angles exact far beyond 10^7 positions (see rope.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* freq_i = freq_scale * theta^(-2i/rope_dim) / factors[i] for i in
 * [0, rope_dim/2), as hi + lo with hi the double nearest and lo the
 * remainder (from long double).  factors: (rope_dim/2) per-pair frequency
 * factors (llama3's rope_freqs.weight) or NULL for none; freq_scale: linear
 * RoPE scaling (1 / rope.scaling.factor), 1 for none.  Factors and a scale of
 * 1 give the same bits as none.  hi, lo: (rope_dim/2). */
void rope_freqs_init(double theta, int rope_dim, const float *factors, double freq_scale,
                     double *hi, double *lo);

/* YaRN (rope.scaling.type yarn), as ggml's rope computes it: the
 * correction band [low, high] of pairs from the original context ctx_orig
 * and beta_fast / beta_slow (in float, as ggml rounds them); pair i
 * below the band keeps its unscaled frequency, above it takes freq_scale,
 * and in between a linear blend weighted by ext_factor. */
/* llama.cpp's YaRN betas (it reads no key for them in llama or phi3 files). */
#define ROPE_YARN_BETA_FAST 32.0f
#define ROPE_YARN_BETA_SLOW 1.0f
struct rope_yarn {
	double ext_factor; /* 0: none (plain linear scaling) */
	int ctx_orig;      /* rope.scaling.original_context_length */
	float beta_fast, beta_slow;
};
/* rope_freqs_init with YaRN's blend when y is non-NULL with ext_factor
 * != 0 (the same bits as rope_freqs_init otherwise). */
void rope_freqs_init_yarn(double theta, int rope_dim, const float *factors, double freq_scale,
                          const struct rope_yarn *y, double *hi, double *lo);
/* Multiplies the first rope_dim values of each of n_vec head vectors of
 * head_dim (x: (n_vec, head_dim)) by scale: the magnitude ggml's rope gives
 * the rotated dims (their rotation is linear, so scaling first is the same). */
void rope_scale_rotated(float *x, size_t n_vec, int head_dim, int rope_dim, float scale);

/* cs: (rope_dim) holding cos(pos*freq_i), sin(pos*freq_i) for each i. */
void rope_cos_sin(const double *hi, const double *lo, int rope_dim, uint64_t pos, double *cs);

/* Rotates the first rope_dim values of one head vector x (head_dim) in place:
 * pairs (x[2i], x[2i+1]) (llama) or (x[i], x[i+rope_dim/2]) (neox, qwen2),
 * computed in double, rounded once. */
void rope_apply(float *x, const double *cs, int rope_dim, bool neox);
