/* IEEE binary16 and bfloat16 <-> binary32, exact where the wider format
 * can hold the value (every f16 and bf16, subnormals included, is exact in
 * f32) and round to nearest even the other way.  The one scalar copy: the
 * loader, the CPU kernels' plain-C paths, the KV cache's element types and
 * the CUDA twins read these; vector kernels use the CPU's own conversion
 * instructions (F16C, AVX-512), which agree bit for bit. */
#include "util/half.h"

#include <math.h>
#include <string.h>

float fp16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t mant = h & 0x3ffu;
	uint32_t bits;
	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | (mant << 13); /* inf / nan */
	} else if (exp != 0) {
		bits = sign | ((exp + 112) << 23) | (mant << 13);
	} else if (mant == 0) {
		bits = sign;
	} else { /* subnormal: value = mant * 2^-24, exact in float */
		float v = (float)mant * 0x1p-24f;
		memcpy(&bits, &v, 4);
		bits |= sign;
	}
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

uint16_t f32_to_fp16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
	uint32_t ax = x & 0x7fffffffu;
	if (ax >= 0x7f800000u) /* inf or nan (keep nan quiet) */
		return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0);
	if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow */
		return sign | 0x7c00u;
	if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or 0 */
		float a;
		memcpy(&a, &ax, 4);
		/* a * 2^24 is the subnormal mantissa; rintf rounds to nearest even. */
		return sign | (uint16_t)rintf(a * 0x1p24f);
	}
	uint32_t mant = ax & 0x7fffffu;
	uint32_t exp = (ax >> 23) - 112;
	uint32_t h = (exp << 10) | (mant >> 13);
	uint32_t rest = mant & 0x1fffu;
	if (rest > 0x1000u || (rest == 0x1000u && (h & 1)))
		h++; /* may carry into the exponent, which is still correct */
	return sign | (uint16_t)h;
}

float bf16_to_f32(uint16_t b)
{
	uint32_t bits = (uint32_t)b << 16;
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

uint16_t f32_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}


float fp16_load_f32(const void *p)
{
	uint16_t h;
	memcpy(&h, p, sizeof(h));
	return fp16_to_f32(h);
}
