/* The quantizers (model/quantize.h) against the dequantizers: for every
 * block type, random rows of several distributions round-trip within a
 * relative RMS error bound per type; requantizing a dequantized row is
 * stable; blocks have ggml's byte sizes and nothing is written past them;
 * zero rows stay zero; hand-built Q4_0, Q8_0 and MXFP4 blocks give exactly the
 * bytes ggml's reference quantizer writes; bad lengths are refused with a
 * message naming the type. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dequant.h"
#include "model/quantize.h"
#include "util/errbuf.h"
#include "testutil.h"

#define ROW 1024 /* a multiple of every block size (256 for the K types) */
#define ROWS 8   /* rows per distribution */

/* Relative RMS error bounds (RMS of the error / RMS of the row), measured
 * with this test's rows (the table it prints) and set about 30% above the
 * worst row: first for the gauss, weights, uniform and tiny rows, then for
 * the outlier rows, whose large values stretch their blocks' scales.
 * Measured worst rows (gcc 12, x86-64):
 *          regular  outliers  requantization change
 *   Q8_0    0.55%    1.29%    0 (same bytes)
 *   Q6_K    2.13%    3.55%    1.44%
 *   Q5_K    3.84%    5.55%    1.62%
 *   Q5_1    3.98%    5.84%    0
 *   Q5_0    4.49%    9.36%    0
 *   Q4_K    7.52%   11.52%    1.10%
 *   Q4_1    8.25%   12.02%    0
 *   Q4_0    9.02%   15.97%    0 (same bytes)
 *   MXFP4  14.87%   20.48%    0
 * The K types refit their scales on a second pass, so requantizing moves
 * them a little; the 32-element types land on the same grid. */
struct type_case {
	enum ggml_type type;
	uint32_t block;        /* elements per block */
	size_t block_bytes;    /* ggml's sizeof(block_...) */
	double bound;          /* relative RMS error bound, regular rows */
	double bound_outliers; /* the same for rows with outliers */
	double requant;        /* bound on a second round trip's relative change */
};

static const struct type_case cases[] = {
    {GGML_TYPE_Q8_0, 32, 34, 0.0075, 0.017, 1e-4},
    {GGML_TYPE_Q4_0, 32, 18, 0.115, 0.20, 1e-4},
    {GGML_TYPE_Q4_1, 32, 20, 0.105, 0.155, 1e-4},
    {GGML_TYPE_Q5_0, 32, 22, 0.058, 0.12, 1e-4},
    {GGML_TYPE_Q5_1, 32, 24, 0.052, 0.076, 1e-4},
    {GGML_TYPE_Q4_K, 256, 144, 0.098, 0.15, 0.015},
    {GGML_TYPE_Q5_K, 256, 176, 0.050, 0.072, 0.021},
    {GGML_TYPE_Q6_K, 256, 210, 0.028, 0.046, 0.019},
    {GGML_TYPE_MXFP4, 32, 17, 0.195, 0.27, 1e-4},
};
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* ------------------------------------------------------------------------
 * Rows. */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s) /* (0, 1) */
{
	return ((double)(rng_next(s) >> 11) + 0.5) * 0x1p-53;
}

static float rng_gauss(uint64_t *s)
{
	double u = rng_uniform(s), v = rng_uniform(s);
	return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

enum dist { DIST_GAUSS, DIST_WEIGHTS, DIST_UNIFORM, DIST_OUTLIERS, DIST_TINY, N_DIST };
static const char *const dist_names[N_DIST] = {"gauss", "weights", "uniform", "outliers", "tiny"};

/* Row r of a distribution: N(0,1); N(0,0.02) like LLM weights; U(-1,1);
 * N(0,1) with 1% of values 30x larger; N(0,1e-3), where the K types' fp16
 * super-block scales get close to the subnormal range. */
static void make_row(enum dist d, int r, float *x)
{
	uint64_t s = 1000u * (uint64_t)d + (uint64_t)r + 1;
	for (int i = 0; i < ROW; i++) {
		float g = rng_gauss(&s);
		switch (d) {
		case DIST_GAUSS:
			x[i] = g;
			break;
		case DIST_WEIGHTS:
			x[i] = 0.02f * g;
			break;
		case DIST_UNIFORM:
			x[i] = (float)(2.0 * rng_uniform(&s) - 1.0);
			break;
		case DIST_OUTLIERS:
			x[i] = rng_uniform(&s) < 0.01 ? 30.0f * g : g;
			break;
		default:
			x[i] = 1e-3f * g;
			break;
		}
	}
}

static double rms(const float *x, int n)
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += (double)x[i] * x[i];
	return sqrt(s / n);
}

static double rel_rms_error(const float *x, const float *y, int n)
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
	return sqrt(s / n) / rms(x, n);
}

/* quantize -> dequantize; the buffer has a guard tail that must survive. */
static void round_trip(const struct type_case *c, const float *x, float *y, int n)
{
	size_t bytes = (size_t)n / c->block * c->block_bytes;
	uint8_t *q = malloc(bytes + 64);
	char err[SINKD_ERR_LEN] = "";
	memset(q, 0xa5, bytes + 64);
	ck_assert_int_eq(quantize_row(c->type, x, q, (uint64_t)n, err, sizeof(err)), 0);
	for (size_t i = bytes; i < bytes + 64; i++)
		ck_assert_msg(q[i] == 0xa5, "%s wrote past its %zu bytes", ggml_type_name(c->type),
		              bytes);
	ck_assert_int_eq(dequantize_row(c->type, q, y, (uint64_t)n), 0);
	free(q);
}

/* ------------------------------------------------------------------------
 * Tests. */

START_TEST(test_block_sizes)
{
	for (size_t k = 0; k < N_CASES; k++) {
		const struct type_case *c = &cases[k];
		ck_assert(quantize_supported(c->type));
		ck_assert_uint_eq(ggml_block_size(c->type), c->block);
		ck_assert_uint_eq(ggml_row_bytes(c->type, c->block), c->block_bytes);
		ck_assert_uint_eq(ggml_row_bytes(c->type, 4096), 4096 / c->block * c->block_bytes);
	}
	ck_assert(quantize_supported(GGML_TYPE_F16));
	ck_assert(!quantize_supported(GGML_TYPE_Q2_K));
	ck_assert(!quantize_supported(GGML_TYPE_Q8_1));
}
END_TEST

START_TEST(test_error_bounds)
{
	float *x = malloc(ROW * sizeof(float)), *y = malloc(ROW * sizeof(float));
	printf("relative RMS error, worst of %d rows of %d:\n%-6s", ROWS, ROW, "");
	for (int d = 0; d < N_DIST; d++)
		printf(" %9s", dist_names[d]);
	printf("\n");
	for (size_t k = 0; k < N_CASES; k++) {
		const struct type_case *c = &cases[k];
		printf("%-6s", ggml_type_name(c->type));
		for (int d = 0; d < N_DIST; d++) {
			double worst = 0;
			for (int r = 0; r < ROWS; r++) {
				make_row((enum dist)d, r, x);
				round_trip(c, x, y, ROW);
				double e = rel_rms_error(x, y, ROW);
				double bound = d == DIST_OUTLIERS ? c->bound_outliers : c->bound;
				worst = fmax(worst, e);
				ck_assert_msg(e <= bound,
				              "%s on %s row %d: relative RMS error %.4f > %.4f",
				              ggml_type_name(c->type), dist_names[d], r, e, bound);
			}
			printf(" %8.3f%%", 100 * worst);
		}
		printf("\n");
	}
	free(x);
	free(y);
}
END_TEST

/* Constant rows: positive and negative, and a row that is constant per
 * block but differs between blocks. */
START_TEST(test_constant_rows)
{
	float x[ROW], y[ROW];
	for (size_t k = 0; k < N_CASES; k++) {
		const struct type_case *c = &cases[k];
		for (int v = 0; v < 3; v++) {
			for (int i = 0; i < ROW; i++)
				x[i] = v == 0   ? 3.5f
				       : v == 1 ? -0.25f
				                : (float)(i / 256 + 1) * 0.1f;
			round_trip(c, x, y, ROW);
			double e = rel_rms_error(x, y, ROW);
			ck_assert_msg(e <= c->bound, "%s constant row %d: relative RMS error %.4f",
			              ggml_type_name(c->type), v, e);
		}
	}
}
END_TEST

START_TEST(test_zero_rows)
{
	float x[ROW], y[ROW];
	memset(x, 0, sizeof(x));
	for (size_t k = 0; k < N_CASES; k++) {
		round_trip(&cases[k], x, y, ROW);
		for (int i = 0; i < ROW; i++)
			ck_assert_msg(y[i] == 0.0f, "%s: zero row gives %g at %d",
			              ggml_type_name(cases[k].type), y[i], i);
	}
}
END_TEST

/* dequantize(quantize(y)) for y already on a grid: Q8_0 and Q4_0 give the
 * same bytes again; the others move the values by at most a little. */
START_TEST(test_requantize_stable)
{
	float *x = malloc(ROW * sizeof(float)), *y = malloc(ROW * sizeof(float));
	float *z = malloc(ROW * sizeof(float));
	printf("requantization change (relative RMS), worst row:\n");
	for (size_t k = 0; k < N_CASES; k++) {
		const struct type_case *c = &cases[k];
		double worst = 0;
		for (int d = 0; d < N_DIST; d++)
			for (int r = 0; r < ROWS; r++) {
				make_row((enum dist)d, r, x);
				round_trip(c, x, y, ROW);
				round_trip(c, y, z, ROW);
				double e = rel_rms_error(y, z, ROW);
				worst = fmax(worst, e);
				if (c->type == GGML_TYPE_Q8_0 || c->type == GGML_TYPE_Q4_0)
					ck_assert_msg(memcmp(y, z, ROW * sizeof(float)) == 0,
					              "%s: requantizing %s row %d changed it",
					              ggml_type_name(c->type), dist_names[d], r);
				ck_assert_msg(e <= c->requant,
				              "%s: requantizing %s row %d moved it by %.4f",
				              ggml_type_name(c->type), dist_names[d], r, e);
			}
		printf("  %-6s %.4f%%\n", ggml_type_name(c->type), 100 * worst);
	}
	free(x);
	free(y);
	free(z);
}
END_TEST

/* x[j] = (j - 16) / 4: the largest magnitude is x[0] = -4, so d = -4 / -8 =
 * 0.5 (fp16 0x3800) and level (int)(x / d + 8.5), clamped to 15; ties like
 * x[2] = -3.5 -> 1.5 truncate down, as ggml's reference does. */
START_TEST(test_q4_0_bytes)
{
	static const uint8_t want[18] = {0x00, 0x38, 0x80, 0x91, 0x91, 0xa2, 0xa2, 0xb3, 0xb3,
	                                 0xc4, 0xc4, 0xd5, 0xd5, 0xe6, 0xe6, 0xf7, 0xf7, 0xf8};
	float x[32];
	uint8_t b[18];
	for (int j = 0; j < 32; j++)
		x[j] = (float)(j - 16) * 0.25f;
	ck_assert_int_eq(quantize_row(GGML_TYPE_Q4_0, x, b, 32, NULL, 0), 0);
	for (int i = 0; i < 18; i++)
		ck_assert_msg(b[i] == want[i], "Q4_0 byte %d: 0x%02x, want 0x%02x", i, b[i],
		              want[i]);
}
END_TEST

/* max |x| = 127 gives d = 1.0 (fp16 0x3c00); the +-0.4 offsets round away. */
START_TEST(test_q8_0_bytes)
{
	float x[32];
	uint8_t b[34], want[34] = {0x00, 0x3c};
	for (int j = 0; j < 32; j++) {
		int q = j * 8 - 127;
		x[j] = (float)q + (j == 0 ? 0.0f : 0.4f * (float)(j % 3 - 1));
		want[2 + j] = (uint8_t)(int8_t)q;
	}
	ck_assert_int_eq(quantize_row(GGML_TYPE_Q8_0, x, b, 32, NULL, 0), 0);
	for (int i = 0; i < 34; i++)
		ck_assert_msg(b[i] == want[i], "Q8_0 byte %d: 0x%02x, want 0x%02x", i, b[i],
		              want[i]);
	ck_assert_int_eq(quantize_row_q8_0(x, b, 32), 0);
	ck_assert_int_eq(memcmp(b, want, 34), 0);
}
END_TEST

/* MXFP4: the largest magnitude 15 gives e = floor(log2 15) - 2 + 127 = 128,
 * a scale of 1 on the doubled E2M1 levels 0 1 2 3 4 6 8 12 (codes 0..7,
 * their negatives 8..15); 15 and 13 clip to 12; ties take the first code
 * (1.5 -> 1, 5 -> 4, -5 -> -4, 0.5 -> 0, -0.25 -> 0 not -0), as ggml's
 * reference does.  Byte j holds value j's code low, value 16 + j's high. */
START_TEST(test_mxfp4_bytes)
{
	static const float lo[16] = {8, 0, 1, -1, 1.5f, 2.5f, 5, 7, -5, 10, 13, 15, -0.25f,
	                             0.5f, -14, 3.4f};
	static const uint8_t want[17] = {0x80, 0xd6, 0xd0, 0xc1, 0xc9, 0xb1, 0xa2,
	                                 0x94, 0x95, 0x0c, 0x16, 0x17, 0x27, 0x30,
	                                 0x40, 0x4f, 0x53};
	float x[32];
	uint8_t b[17];
	for (int j = 0; j < 16; j++) {
		x[j] = lo[j];
		x[16 + j] = (float)(j - 8) * 0.75f; /* -6 .. 5.25 */
	}
	ck_assert_int_eq(quantize_row(GGML_TYPE_MXFP4, x, b, 32, NULL, 0), 0);
	for (int i = 0; i < 17; i++)
		ck_assert_msg(b[i] == want[i], "MXFP4 byte %d: 0x%02x, want 0x%02x", i, b[i],
		              want[i]);
	/* a scale of 2^-4: every value / 16, the same codes */
	for (int j = 0; j < 32; j++)
		x[j] *= 0.0625f;
	ck_assert_int_eq(quantize_row(GGML_TYPE_MXFP4, x, b, 32, NULL, 0), 0);
	ck_assert_int_eq(b[0], 0x80 - 4);
	ck_assert_int_eq(memcmp(b + 1, want + 1, 16), 0);
}
END_TEST

START_TEST(test_bad_lengths)
{
	float x[300] = {0};
	uint8_t b[1024];
	char err[SINKD_ERR_LEN];
	for (size_t k = 0; k < N_CASES; k++) {
		const struct type_case *c = &cases[k];
		err[0] = '\0';
		ck_assert_int_eq(quantize_row(c->type, x, b, c->block + 16, err, sizeof(err)),
		                 -EINVAL);
		char block[16];
		snprintf(block, sizeof(block), "%u", c->block);
		ck_assert_msg(strstr(err, ggml_type_name(c->type)) && strstr(err, block),
		              "message names neither type nor block size: %s", err);
	}
	ck_assert_int_eq(quantize_row(GGML_TYPE_Q2_K, x, b, 256, err, sizeof(err)), -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(err, "Q2_K"));
	ck_assert_int_eq(quantize_row_q8_0(x, b, 40), -EINVAL);
}
END_TEST

/* F32, F16 and BF16 are plain conversions. */
START_TEST(test_float_types)
{
	float x[8] = {1.0f, -2.5f, 0.1f, 65504.0f, 0.0f, -0.0f, 3.0e-5f, 100.0f}, y[8];
	uint8_t b[32];
	ck_assert_int_eq(quantize_row(GGML_TYPE_F32, x, b, 8, NULL, 0), 0);
	ck_assert_int_eq(memcmp(b, x, 32), 0);
	ck_assert_int_eq(quantize_row(GGML_TYPE_F16, x, b, 8, NULL, 0), 0);
	ck_assert_int_eq(dequantize_row(GGML_TYPE_F16, b, y, 8), 0);
	for (int i = 0; i < 8; i++)
		ck_assert_float_eq(y[i], fp16_to_f32(f32_to_fp16(x[i])));
	ck_assert_int_eq(quantize_row(GGML_TYPE_BF16, x, b, 8, NULL, 0), 0);
	ck_assert_int_eq(dequantize_row(GGML_TYPE_BF16, b, y, 8), 0);
	for (int i = 0; i < 8; i++)
		ck_assert_float_eq(y[i], bf16_to_f32(f32_to_bf16(x[i])));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("quantize");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_block_sizes);
	tcase_add_test(tc, test_error_bounds);
	tcase_add_test(tc, test_constant_rows);
	tcase_add_test(tc, test_zero_rows);
	tcase_add_test(tc, test_requantize_stable);
	tcase_add_test(tc, test_q4_0_bytes);
	tcase_add_test(tc, test_q8_0_bytes);
	tcase_add_test(tc, test_mxfp4_bytes);
	tcase_add_test(tc, test_bad_lengths);
	tcase_add_test(tc, test_float_types);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
