/* RoPE angles and rotation for the KV cache.
 *
 * Exactness: the angle pos*freq is what matters, and at pos = 10^7 the naive
 * float product is off by radians.  Here freq is a double-double (hi + lo,
 * from long double pow) and the product is split exactly:
 *     pos*hi = p + e   (p = fl(pos*hi), e = fma(pos, hi, -p), exact)
 *     angle  = p + (e + pos*lo)
 * sin/cos of p come from libm (exact argument reduction for any double);
 * the small remainder d = e + pos*lo (|d| < 1e-6 up to pos 2^40) is applied
 * as a first-order rotation (cos(p+d) = cos p - d sin p, error d^2/2 < 1e-12).
 * The angle is then good to about pos*freq*2^-64, i.e. 1e-12 rad at 10^7,
 * far below the fp32 rounding of the rotated values (6e-8 relative).
 * Per-pair frequency factors (llama3, longrope), linear scaling and YaRN's
 * blend enter the frequency once, when a cache is made; the per-token work
 * does not change.
 * It does not know about tiers or ranks; the cache picks the positions. */
#include "cache/rope.h"

#include <math.h>

void rope_freqs_init(double theta, int rope_dim, const float *factors, double freq_scale,
                     double *hi, double *lo)
{
	for (int i = 0; i < rope_dim / 2; i++) {
		long double f = powl((long double)theta, -2.0L * i / (long double)rope_dim);
		/* as ggml's rope: p * freq_scale * theta^(-2i/d) / freq_factor[i] */
		if (factors)
			f /= (long double)factors[i];
		f *= (long double)freq_scale;
		hi[i] = (double)f;
		lo[i] = (double)(f - (long double)hi[i]);
	}
}

/* ggml's corr_dim: the pair whose wavelength fits n_rot turns into the
 * original context, in float as ggml computes it. */
static float yarn_corr_dim(int rope_dim, int ctx_orig, float n_rot, float base)
{
	return (float)rope_dim * logf((float)ctx_orig / (n_rot * 2 * (float)M_PI)) /
	       (2 * logf(base));
}

void rope_freqs_init_yarn(double theta, int rope_dim, const float *factors, double freq_scale,
                          const struct rope_yarn *y, double *hi, double *lo)
{
	if (y == NULL || y->ext_factor == 0.0) {
		rope_freqs_init(theta, rope_dim, factors, freq_scale, hi, lo);
		return;
	}
	float low = floorf(yarn_corr_dim(rope_dim, y->ctx_orig, y->beta_fast, (float)theta));
	float high = ceilf(yarn_corr_dim(rope_dim, y->ctx_orig, y->beta_slow, (float)theta));
	low = low > 0.0f ? low : 0.0f;
	high = high < (float)(rope_dim - 1) ? high : (float)(rope_dim - 1);
	for (int i = 0; i < rope_dim / 2; i++) {
		long double f = powl((long double)theta, -2.0L * i / (long double)rope_dim);
		if (factors)
			f /= (long double)factors[i];
		float t = ((float)i - low) / fmaxf(0.001f, high - low);
		long double ramp = (1.0L - fminf(1.0f, fmaxf(0.0f, t))) * (long double)y->ext_factor;
		/* interpolated (times freq_scale) where ramp is 0, extrapolated at 1 */
		f *= (long double)freq_scale * (1.0L - ramp) + ramp;
		hi[i] = (double)f;
		lo[i] = (double)(f - (long double)hi[i]);
	}
}

void rope_scale_rotated(float *x, size_t n_vec, int head_dim, int rope_dim, float scale)
{
	for (size_t v = 0; v < n_vec; v++)
		for (int i = 0; i < rope_dim; i++)
			x[v * (size_t)head_dim + (size_t)i] *= scale;
}

void rope_cos_sin(const double *hi, const double *lo, int rope_dim, uint64_t pos, double *cs)
{
	double x = (double)pos; /* exact below 2^53 */
	for (int i = 0; i < rope_dim / 2; i++) {
		double p = x * hi[i];
		double d = fma(x, hi[i], -p) + x * lo[i];
		double s, c;
		sincos(p, &s, &c);
		cs[2 * i] = c - d * s;
		cs[2 * i + 1] = s + d * c;
	}
}

void rope_apply(float *x, const double *cs, int rope_dim, bool neox)
{
	int half = rope_dim / 2;
	for (int i = 0; i < half; i++) {
		int a = neox ? i : 2 * i;
		int b = neox ? i + half : 2 * i + 1;
		double c = cs[2 * i], s = cs[2 * i + 1];
		double x0 = x[a], x1 = x[b];
		x[a] = (float)(x0 * c - x1 * s);
		x[b] = (float)(x0 * s + x1 * c);
	}
}
