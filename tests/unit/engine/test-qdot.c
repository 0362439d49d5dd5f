/* The quantized dot kernels (engine/qdot.h) on random weight blocks of every
 * type (random code bytes, sane fp16 scales, K-quant 6-bit scales and mins
 * through all 64 values) and random activations with zeros and outliers:
 * every variant this CPU runs against the plain-C twin on tiles of every
 * shape, the twin against a float reference on the same rounded
 * activations, and the rounding of the activations itself against exact
 * float activations. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/qdot.h"
#include "engine/qdot_impl.h"
#include "model/dequant.h"

/* Variant vs twin: |v - s| <= QDOT_TOL_VARIANT * mag (mag: the sum of |terms|
 * the kernels add, see row_mag); only float summation order differs. */
#define QDOT_TOL_VARIANT 1e-5
/* Twin vs dequantize(w) . dequantize(xq) in double, relative to mag. */
#define QDOT_TOL_REFERENCE 1e-4

static const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K,
                                       GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_MXFP4};
#define N_TYPES (int)(sizeof(types) / sizeof(types[0]))

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Uniform in [0, 1). */
static double frand(void)
{
	return (double)(rnd() >> 11) / 9007199254740992.0;
}

static void put_half(uint8_t *p, float f)
{
	uint16_t h = f32_to_fp16(f);
	memcpy(p, &h, 2);
}

/* A scale of a sane size: 1e-3 .. 5e-2. */
static float rand_scale(void)
{
	return (float)(1e-3 + 4.9e-2 * frand());
}

/* Sets the 6-bit scale and min of sub-block j in the 12 packed bytes q (the
 * inverse of ggml's get_scale_min_k4). */
static void pack_scale_min_k4(uint8_t *q, int j, int sc, int mn)
{
	if (j < 4) {
		q[j] = (uint8_t)((q[j] & 0xc0) | sc);
		q[j + 4] = (uint8_t)((q[j + 4] & 0xc0) | mn);
	} else {
		q[j + 4] = (uint8_t)((sc & 0xf) | ((mn & 0xf) << 4));
		q[j - 4] = (uint8_t)((q[j - 4] & 0x3f) | ((sc >> 4) << 6));
		q[j] = (uint8_t)((q[j] & 0x3f) | ((mn >> 4) << 6));
	}
}

/* Random blocks of `type` for a row of n values.  The K-quants' first 8
 * super-blocks carry scales 0..63 and mins 63..0 (all 64 values of each);
 * later ones random bytes. */
static void make_row(enum ggml_type type, int n, uint8_t *row, int row_index)
{
	size_t bytes = ggml_row_bytes(type, (uint64_t)n);
	for (size_t i = 0; i < bytes; i++)
		row[i] = (uint8_t)rnd();
	int bv = qdot_block_values(type), nblk = n / bv;
	size_t bb = bytes / (size_t)nblk;
	for (int k = 0; k < nblk; k++) {
		uint8_t *b = row + (size_t)k * bb;
		switch (type) {
		case GGML_TYPE_Q8_0:
		case GGML_TYPE_Q4_0:
			put_half(b, rand_scale());
			break;
		case GGML_TYPE_Q4_K:
		case GGML_TYPE_Q5_K:
			put_half(b, rand_scale());
			put_half(b + 2, rand_scale());
			if (k < 8)
				for (int j = 0; j < 8; j++) {
					int v = (8 * (k + row_index) + j) % 64;
					pack_scale_min_k4(b + 4, j, v, 63 - v);
				}
			break;
		case GGML_TYPE_Q6_K:
			put_half(b + 208, rand_scale());
			break;
		case GGML_TYPE_MXFP4: /* E8M0 scales 2^-10 .. 2^5 */
			b[0] = (uint8_t)(118 + rnd() % 16);
			break;
		default:
			break;
		}
	}
}

/* Activations: uniform in [-1, 1], scattered zeros, one zero 32-block,
 * occasional outliers 100x (when outliers). */
static void make_x(float *x, int n, bool outliers)
{
	for (int i = 0; i < n; i++) {
		double u = frand();
		x[i] = (float)(2.0 * frand() - 1.0);
		if (u < 0.05)
			x[i] = 0.0f;
		else if (outliers && u > 0.99)
			x[i] *= 100.0f;
	}
	if (n >= 64)
		memset(x + 32, 0, 32 * sizeof(float));
}

/* The row's values split as w = a - b: a the scaled codes, b the scaled
 * mins (K4 types; 0 elsewhere), so that sum |x| (|a| + |b|) bounds every
 * term the kernels add before they cancel. */
static void row_split(enum ggml_type type, const uint8_t *row, int n, float *a, float *b)
{
	size_t bytes = ggml_row_bytes(type, (uint64_t)n);
	if (type != GGML_TYPE_Q4_K && type != GGML_TYPE_Q5_K) {
		ck_assert_int_eq(dequantize_row(type, row, a, (uint64_t)n), 0);
		memset(b, 0, (size_t)n * sizeof(float));
		return;
	}
	uint8_t *tmp = malloc(bytes);
	size_t bb = bytes / (size_t)(n / 256);
	memcpy(tmp, row, bytes);
	for (int k = 0; k < n / 256; k++)
		put_half(tmp + k * bb + 2, 0.0f); /* dmin = 0: a */
	ck_assert_int_eq(dequantize_row(type, tmp, a, (uint64_t)n), 0);
	memcpy(tmp, row, bytes);
	for (int k = 0; k < n / 256; k++)
		put_half(tmp + k * bb, 0.0f); /* d = 0: -b */
	ck_assert_int_eq(dequantize_row(type, tmp, b, (uint64_t)n), 0);
	for (int i = 0; i < n; i++)
		b[i] = -b[i];
	free(tmp);
}

/* sum |xd| (|a| + |b|) over the row. */
static double row_mag(enum ggml_type type, const uint8_t *row, const float *xd, int n)
{
	float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
	row_split(type, row, n, a, b);
	double m = 0.0;
	for (int i = 0; i < n; i++)
		m += fabs((double)xd[i]) * (fabs((double)a[i]) + fabs((double)b[i]));
	free(a);
	free(b);
	return m;
}

/* A weight matrix and a batch of quantized activations for one case. */
struct qcase {
	enum ggml_type type;
	int n, rows, vecs;
	size_t row_bytes, act_bytes;
	uint8_t *w;  /* (rows, row_bytes) */
	float *x;    /* (vecs, n) */
	uint8_t *xq; /* (vecs, act_bytes) */
	float *xd;   /* (vecs, n): xq dequantized */
	double *mag; /* (vecs, rows) */
	float *twin; /* (vecs, rows): the scalar twin's products */
};

static void qcase_init(struct qcase *c, enum ggml_type type, int n, int rows, int vecs,
                       bool outliers)
{
	c->type = type;
	c->n = n;
	c->rows = rows;
	c->vecs = vecs;
	c->row_bytes = ggml_row_bytes(type, (uint64_t)n);
	c->act_bytes = qdot_act_bytes(type, n);
	ck_assert_uint_gt(c->act_bytes, 0);
	c->w = malloc((size_t)rows * c->row_bytes);
	c->x = malloc((size_t)vecs * n * sizeof(float));
	c->xq = malloc((size_t)vecs * c->act_bytes);
	c->xd = malloc((size_t)vecs * n * sizeof(float));
	c->mag = malloc((size_t)vecs * rows * sizeof(double));
	c->twin = malloc((size_t)vecs * rows * sizeof(float));
	for (int r = 0; r < rows; r++)
		make_row(type, n, c->w + (size_t)r * c->row_bytes, r);
	const struct qdot_kernels *k = qdot_kernels_get(type, QDOT_VARIANT_SCALAR);
	for (int b = 0; b < vecs; b++) {
		make_x(c->x + (size_t)b * n, n, outliers);
		qdot_act_quantize(type, c->x + (size_t)b * n, n, c->xq + (size_t)b * c->act_bytes);
		qdot_act_dequantize(type, c->xq + (size_t)b * c->act_bytes, n,
		                    c->xd + (size_t)b * n);
		for (int r = 0; r < rows; r++) {
			const uint8_t *row = c->w + (size_t)r * c->row_bytes;
			c->mag[b * rows + r] = row_mag(type, row, c->xd + (size_t)b * n, n);
			c->twin[b * rows + r] =
			    k->dot_row(row, c->xq + (size_t)b * c->act_bytes, n);
		}
	}
}

static void qcase_free(struct qcase *c)
{
	free(c->w);
	free(c->x);
	free(c->xq);
	free(c->xd);
	free(c->mag);
	free(c->twin);
}

/* Worst |got - twin| / mag over the R x B block at (r0, b0); y (B, ldy). */
static double worst_vs_twin(const struct qcase *c, int r0, int R, int b0, int B, const float *y,
                            size_t ldy)
{
	double worst = 0.0;
	for (int b = 0; b < B; b++)
		for (int r = 0; r < R; r++) {
			double m = c->mag[(b0 + b) * c->rows + r0 + r];
			double e =
			    fabs((double)y[b * ldy + r] - c->twin[(b0 + b) * c->rows + r0 + r]);
			double rel = m > 0.0 ? e / m : (e > 0.0 ? INFINITY : 0.0);
			worst = rel > worst ? rel : worst;
		}
	return worst;
}

/* One variant on every tile shape, the any-shape driver and the row kernel. */
static double check_variant(const struct qcase *c, enum qdot_variant v)
{
	const struct qdot_kernels *k = qdot_kernels_get(c->type, v);
	ck_assert_ptr_nonnull(k);
	double worst = 0.0;
	float *y = malloc((size_t)c->vecs * c->rows * sizeof(float));
	for (int R = 1; R <= QDOT_TILE_ROWS && R <= c->rows; R++)
		for (int B = 1; B <= QDOT_TILE_VECS && B <= c->vecs; B++) {
			int r0 = c->rows - R, b0 = c->vecs - B; /* off the first row and vector */
			for (int i = 0; i < R * B; i++)
				y[i] = NAN;
			k->dot_tile(c->w + (size_t)r0 * c->row_bytes, c->row_bytes, R,
			            c->xq + (size_t)b0 * c->act_bytes, c->act_bytes, B, c->n, y,
			            (size_t)R);
			double e = worst_vs_twin(c, r0, R, b0, B, y, (size_t)R);
			ck_assert_msg(e <= QDOT_TOL_VARIANT, "%s %s n=%d tile %dx%d: %g",
			              ggml_type_name(c->type), qdot_variant_name(v), c->n, R, B, e);
			worst = e > worst ? e : worst;
		}
	size_t ldy = (size_t)c->rows + 3;
	float *yy = malloc((size_t)c->vecs * ldy * sizeof(float));
	qdot_rows(k, c->w, c->row_bytes, c->rows, c->xq, c->act_bytes, c->vecs, c->n, yy, ldy);
	double e = worst_vs_twin(c, 0, c->rows, 0, c->vecs, yy, ldy);
	ck_assert_msg(e <= QDOT_TOL_VARIANT, "%s %s n=%d rows %dx%d: %g", ggml_type_name(c->type),
	              qdot_variant_name(v), c->n, c->rows, c->vecs, e);
	worst = e > worst ? e : worst;
	for (int r = 0; r < c->rows; r++) {
		y[0] = k->dot_row(c->w + (size_t)r * c->row_bytes, c->xq, c->n);
		e = worst_vs_twin(c, r, 1, 0, 1, y, 1);
		ck_assert_msg(e <= QDOT_TOL_VARIANT, "%s %s row %d: %g", ggml_type_name(c->type),
		              qdot_variant_name(v), r, e);
		worst = e > worst ? e : worst;
	}
	free(yy);
	free(y);
	return worst;
}

/* Row lengths per type: one block, an odd count of blocks, several. */
static const int lengths_32[] = {32, 96, 256, 2080};
static const int lengths_256[] = {256, 768, 2048};

static int lengths_of(enum ggml_type type, const int **out)
{
	*out = qdot_block_values(type) == 32 ? lengths_32 : lengths_256;
	return qdot_block_values(type) == 32 ? 4 : 3;
}

START_TEST(test_variants_match_twin)
{
	for (int t = 0; t < N_TYPES; t++) {
		const int *lengths;
		int nl = lengths_of(types[t], &lengths);
		for (int l = 0; l < nl; l++) {
			struct qcase c;
			qcase_init(&c, types[t], lengths[l], 9, 17, true);
			for (int v = QDOT_VARIANT_SCALAR + 1; v < QDOT_VARIANT_COUNT; v++) {
				if (!qdot_variant_runs((enum qdot_variant)v))
					continue;
				double e = check_variant(&c, (enum qdot_variant)v);
				printf("qdot: %-5s n=%-5d %-11s worst |v - twin| / mag %.2e\n",
				       ggml_type_name(types[t]), lengths[l],
				       qdot_variant_name((enum qdot_variant)v), e);
			}
			qcase_free(&c);
		}
	}
}
END_TEST

/* The twin against sum dequantize(w) * dequantize(xq) in double. */
START_TEST(test_twin_vs_reference)
{
	for (int t = 0; t < N_TYPES; t++) {
		const int *lengths;
		int nl = lengths_of(types[t], &lengths);
		for (int l = 0; l < nl; l++) {
			struct qcase c;
			int n = lengths[l];
			qcase_init(&c, types[t], n, 5, 3, true);
			float *wd = malloc((size_t)n * sizeof(float));
			double worst = 0.0;
			for (int r = 0; r < c.rows; r++) {
				ck_assert_int_eq(dequantize_row(c.type,
				                                c.w + (size_t)r * c.row_bytes, wd,
				                                (uint64_t)n),
				                 0);
				for (int b = 0; b < c.vecs; b++) {
					double ref = 0.0;
					for (int i = 0; i < n; i++)
						ref += (double)wd[i] * c.xd[(size_t)b * n + i];
					double e = fabs(c.twin[b * c.rows + r] - ref) /
					           c.mag[b * c.rows + r];
					ck_assert_msg(e <= QDOT_TOL_REFERENCE, "%s n=%d: %g",
					              ggml_type_name(c.type), n, e);
					worst = e > worst ? e : worst;
				}
			}
			printf("qdot: %-5s n=%-5d twin vs float reference: worst / mag %.2e\n",
			       ggml_type_name(c.type), n, worst);
			free(wd);
			qcase_free(&c);
		}
	}
}
END_TEST

/* What rounding x to int8 blocks costs, against dequantize(w) . x with exact
 * x, relative to sum |w x|: every product stays inside the rigorous bound
 * sum_k |w_k| |x_k - xq_k| (|x_k - xq_k| <= d/2 of value k's block), and the
 * worst case over this test's 128 products stays under these (measured
 * here: uniform x worst ~3.6e-4, rms ~1e-4 for every type; with 1% outliers
 * at 100x, worst ~4e-3 for the 32-value blocks, ~1.3e-2 for the K-quants'
 * 256-value blocks, where one outlier coarsens 255 neighbours). */
static double activation_bound(enum ggml_type type, bool outliers)
{
	if (!outliers)
		return 1e-3;
	return qdot_block_values(type) == 32 ? 1.2e-2 : 4e-2;
}

START_TEST(test_activation_rounding)
{
	int n = 4096, rows = 32, vecs = 4;
	for (int t = 0; t < N_TYPES; t++)
		for (int outliers = 0; outliers < 2; outliers++) {
			struct qcase c;
			qcase_init(&c, types[t], n, rows, vecs, outliers);
			float *wd = malloc((size_t)n * sizeof(float));
			double worst = 0.0, sq = 0.0;
			for (int r = 0; r < rows; r++) {
				dequantize_row(c.type, c.w + (size_t)r * c.row_bytes, wd,
				               (uint64_t)n);
				for (int b = 0; b < vecs; b++) {
					const float *x = c.x + (size_t)b * n,
					            *xd = c.xd + (size_t)b * n;
					double ref = 0.0, wx = 0.0, bound = 0.0;
					for (int i = 0; i < n; i++) {
						ref += (double)wd[i] * x[i];
						wx += fabs((double)wd[i] * x[i]);
						bound += fabs((double)wd[i]) * fabs(x[i] - xd[i]);
					}
					double e = fabs(c.twin[b * rows + r] - ref);
					ck_assert_msg(e <= bound + 1e-5 * c.mag[b * rows + r],
					              "%s: %g over the bound %g",
					              ggml_type_name(c.type), e, bound);
					worst = e / wx > worst ? e / wx : worst;
					sq += (e / wx) * (e / wx);
				}
			}
			printf(
			    "qdot: %-5s exact x%s: |twin - w.x| / sum|w x| worst %.2e rms %.2e\n",
			    ggml_type_name(c.type), outliers ? " (outliers)" : "", worst,
			    sqrt(sq / (rows * vecs)));
			ck_assert_msg(worst <= activation_bound(c.type, outliers), "%s: %g",
			              ggml_type_name(c.type), worst);
			free(wd);
			qcase_free(&c);
		}
}
END_TEST

/* The byte-shuffle table of MXFP4's codes is mxfp4_kvalues plus the offset
 * the kernels take off again, all unsigned bytes. */
START_TEST(test_mxfp4_table)
{
	const int8_t u[16] = {QDOT_MXFP4_KVALUES_U};
	for (int i = 0; i < 16; i++) {
		ck_assert_int_eq(u[i], mxfp4_kvalues[i] + QDOT_MXFP4_OFFSET);
		ck_assert_int_ge(u[i], 0);
	}
}
END_TEST

/* The quantized activations: scale max|x| / 127, |q| <= 127, sums as stored
 * (through qdot_act_dequantize and the Q4_0 twin, which reads them). */
START_TEST(test_act_quantize)
{
	float x[512], xd[512];
	make_x(x, 512, true);
	x[7] = 3.0f;
	for (int t = 0; t < N_TYPES; t++) {
		uint8_t *xq = malloc(qdot_act_bytes(types[t], 512));
		qdot_act_quantize(types[t], x, 512, xq);
		qdot_act_dequantize(types[t], xq, 512, xd);
		int bv = qdot_block_values(types[t]);
		for (int k = 0; k < 512 / bv; k++) {
			float amax = 0.0f;
			for (int i = 0; i < bv; i++)
				amax = fmaxf(amax, fabsf(x[k * bv + i]));
			for (int i = 0; i < bv; i++)
				ck_assert_msg(fabsf(x[k * bv + i] - xd[k * bv + i]) <=
				                  amax / 254.0f * (1.0f + 1e-5f),
				              "%s value %d", ggml_type_name(types[t]), k * bv + i);
		}
		free(xq);
	}
	ck_assert_uint_eq(qdot_act_bytes(GGML_TYPE_F32, 512), 0);
	ck_assert(!qdot_type_supported(GGML_TYPE_Q4_1));
	ck_assert_ptr_null(qdot_kernels_get(GGML_TYPE_F16, QDOT_VARIANT_SCALAR));
}
END_TEST

int main(void)
{
	printf("qdot: variants here:");
	for (int v = 0; v < QDOT_VARIANT_COUNT; v++)
		if (qdot_variant_runs((enum qdot_variant)v))
			printf(" %s", qdot_variant_name((enum qdot_variant)v));
	printf(" (best %s)\n", qdot_variant_name(qdot_variant_best()));
	Suite *s = suite_create("qdot");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_mxfp4_table);
	tcase_add_test(tc, test_act_quantize);
	tcase_add_test(tc, test_variants_match_twin);
	tcase_add_test(tc, test_twin_vs_reference);
	tcase_add_test(tc, test_activation_rounding);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
