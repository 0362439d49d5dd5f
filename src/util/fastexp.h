/* exp(x) for float after Cephes' expf: x = n ln2 + r with ln2 in two parts
 * (a high part exact in float and a low correction), exp(r) by a degree-5
 * polynomial in r, scaled by 2^n.  The constants live only here: the
 * scalar fastexp_f32 below and the 8- and 16-lane kernels (attention
 * softmax, SwiGLU) build their vector versions from them, so every copy
 * computes the same function. */
#pragma once

#include <stdint.h>
#include <string.h>

#define FASTEXP_LOG2E 1.44269504088896341f
#define FASTEXP_LN2_HI 0.693359375f
#define FASTEXP_LN2_LO -2.12194440e-4f
#define FASTEXP_P0 1.9875691500e-4f
#define FASTEXP_P1 1.3981999507e-3f
#define FASTEXP_P2 8.3334519073e-3f
#define FASTEXP_P3 4.1665795894e-2f
#define FASTEXP_P4 1.6666665459e-1f
#define FASTEXP_P5 5.0000001201e-1f

/* The bits of a float and the float of some bits (memcpy: no aliasing
 * trouble, compiled to a register move). */
static inline uint32_t fastexp_bits(float x)
{
	uint32_t b;
	memcpy(&b, &x, sizeof(b));
	return b;
}

static inline float fastexp_from_bits(uint32_t b)
{
	float x;
	memcpy(&x, &b, sizeof(x));
	return x;
}

/* exp(x), written without branches (the clamps are bit blends) so loops
 * over a vocabulary vectorise, and giving the same bits on every machine
 * (no libm): degree-6 in all (r + r^2 (P5 + ...)), at most 8.1e-8 relative
 * error on [-87, 88] against exp() in double; exactly 0 below -87 and for
 * -inf. */
static inline float fastexp_f32(float x)
{
	const float magic = 12582912.0f; /* 1.5 * 2^23: rounds to an integer */
	uint32_t lo = -(uint32_t)(x < -87.0f);
	uint32_t hi = -(uint32_t)(x > 88.0f);
	uint32_t xb = fastexp_bits(x);
	xb = (xb & ~lo) | (fastexp_bits(-87.0f) & lo);
	xb = (xb & ~hi) | (fastexp_bits(88.0f) & hi);
	float xc = fastexp_from_bits(xb);
	float t = xc * FASTEXP_LOG2E + magic;
	float n = t - magic;
	float r = xc - n * FASTEXP_LN2_HI - n * FASTEXP_LN2_LO;
	float p = FASTEXP_P0;
	p = p * r + FASTEXP_P1;
	p = p * r + FASTEXP_P2;
	p = p * r + FASTEXP_P3;
	p = p * r + FASTEXP_P4;
	p = p * r + FASTEXP_P5;
	p = p * r * r + r + 1.0f;
	uint32_t scale = (fastexp_bits(t) - fastexp_bits(magic) + 127u) << 23; /* 2^n */
	return fastexp_from_bits(fastexp_bits(p * fastexp_from_bits(scale)) & ~lo);
}
