/* The packed block weights (engine/qpack.h) on random matrices of every
 * packed type: every variant this CPU runs against the plain-C twin, the
 * twin against the stored layout's qdot twin (the same integer sums, so
 * both only by float summation order), over row counts that are and are
 * not multiples of QPACK_ROWS, one and several blocks per row, batches
 * 1..64, row sub-ranges that start and end inside a group, and through
 * matmul's QPACK families with a bias; and a row read back from the packed
 * copy (qpack_row_to_f32) is the stored row's floats, bit for bit. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/matmul.h"
#include "engine/qdot.h"
#include "engine/qpack.h"
#include "model/dequant.h"
#include "testutil.h"
#include "util/half.h"

/* |a - b| <= TOL * mag, mag = sum |w| |x| of the row (what the kernels add
 * before cancelling); both sides form the same integers. */
#define QPACK_TOL 2e-5

static const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K,
                                       GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
#define N_TYPES (int)(sizeof(types) / sizeof(types[0]))

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static float frand(void)
{
	return (float)((double)(rnd() >> 11) / 9007199254740992.0);
}

static void put_half(uint8_t *p, float f)
{
	uint16_t h = f32_to_fp16(f);
	memcpy(p, &h, 2);
}

/* Random code bytes with sane fp16 scales where the type keeps them. */
static void make_rows(enum ggml_type t, int rows, int cols, uint8_t *data)
{
	size_t rb = ggml_row_bytes(t, (uint64_t)cols);
	for (size_t i = 0; i < rb * (size_t)rows; i++)
		data[i] = (uint8_t)rnd();
	int bv = qdot_block_values(t);
	size_t bb = ggml_row_bytes(t, (uint64_t)bv);
	for (int r = 0; r < rows; r++)
		for (int k = 0; k < cols / bv; k++) {
			uint8_t *b = data + (size_t)r * rb + (size_t)k * bb;
			float s = 1e-3f + 4e-2f * frand();
			if (t == GGML_TYPE_Q6_K)
				put_half(b + 208, s);
			else
				put_half(b, s);
			if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K)
				put_half(b + 2, 1e-3f + 4e-2f * frand());
		}
}

/* A packed matrix and B quantized activation vectors. */
struct fixture {
	struct weight_matrix w;
	uint8_t *data;
	void *packed;
	float *x; /* (B, cols) */
	void *xq; /* B vectors of xq_bytes */
	size_t xq_bytes;
	float *mag; /* (B, rows): sum |w| |x| per output */
	int B;
};

static void fixture_init(struct fixture *f, enum ggml_type t, int rows, int cols, int B)
{
	memset(f, 0, sizeof(*f));
	f->w = (struct weight_matrix){
	    .type = t, .rows = rows, .cols = cols, .row_bytes = ggml_row_bytes(t, (uint64_t)cols)};
	f->data = malloc(f->w.row_bytes * (size_t)rows);
	make_rows(t, rows, cols, f->data);
	f->w.data = f->data;
	size_t pb = qpack_bytes(&f->w);
	ck_assert_uint_gt(pb, 0);
	f->packed = aligned_alloc(64, (pb + 63) & ~(size_t)63);
	memset(f->packed, 0xa5, pb); /* padding rows must be written, not left */
	qpack_pack(NULL, &f->w, f->packed);
	f->w.panels = f->packed;
	f->B = B;
	f->x = malloc(sizeof(float) * (size_t)B * cols);
	for (int i = 0; i < B * cols; i++)
		f->x[i] = frand() < 0.05f ? 0.0f : 2.0f * frand() - 1.0f;
	f->xq_bytes = qdot_act_bytes(t, cols);
	f->xq = aligned_alloc(64, ((size_t)B * f->xq_bytes + 63) & ~(size_t)63);
	for (int b = 0; b < B; b++)
		qdot_act_quantize(t, f->x + (size_t)b * cols, cols,
		                  (uint8_t *)f->xq + (size_t)b * f->xq_bytes);
	f->mag = calloc((size_t)B * rows, sizeof(float));
	float *wr = malloc(sizeof(float) * cols), *xr = malloc(sizeof(float) * cols);
	for (int r = 0; r < rows; r++) {
		ck_assert_int_eq(
		    dequantize_row(t, f->data + (size_t)r * f->w.row_bytes, wr, (uint64_t)cols), 0);
		for (int b = 0; b < B; b++) {
			qdot_act_dequantize(t, (uint8_t *)f->xq + (size_t)b * f->xq_bytes, cols,
			                    xr);
			double m = 0;
			for (int i = 0; i < cols; i++)
				m += fabs((double)wr[i] * xr[i]);
			/* the K-quant mins add a term of the same size again */
			f->mag[(size_t)b * rows + r] = (float)(2.0 * m + 1e-6);
		}
	}
	free(wr);
	free(xr);
}

static void fixture_free(struct fixture *f)
{
	free(f->data);
	free(f->packed);
	free(f->x);
	free(f->xq);
	free(f->mag);
}

static void expect_close(const struct fixture *f, const float *got, const float *want, int r0,
                         int r1, const char *what)
{
	for (int b = 0; b < f->B; b++)
		for (int r = r0; r < r1; r++) {
			size_t i = (size_t)b * f->w.rows + r;
			ck_assert_msg(fabsf(got[i] - want[i]) <= QPACK_TOL * f->mag[i],
			              "%s: %s rows %d cols %d B %d: y(%d, %d) = %g, want %g", what,
			              ggml_type_name(f->w.type), f->w.rows, f->w.cols, f->B, b, r,
			              got[i], want[i]);
		}
}

/* The stored layout's qdot twin: the reference every packed result meets. */
static void stored_twin(const struct fixture *f, float *y)
{
	const struct qdot_kernels *k = qdot_kernels_get(f->w.type, QDOT_VARIANT_SCALAR);
	for (int b = 0; b < f->B; b++)
		for (int r = 0; r < f->w.rows; r++)
			y[(size_t)b * f->w.rows + r] =
			    k->dot_row(f->data + (size_t)r * f->w.row_bytes,
			               (const uint8_t *)f->xq + (size_t)b * f->xq_bytes, f->w.cols);
}

/* Runs variant v over [r0, r1) into y (NaN elsewhere) and checks that it
 * wrote nothing outside. */
static void run_range(const struct fixture *f, qpack_rows_fn fn, int r0, int r1, float *y)
{
	size_t n = (size_t)f->B * f->w.rows;
	for (size_t i = 0; i < n; i++)
		y[i] = NAN;
	fn(&f->w, f->xq, f->xq_bytes, f->B, y, (size_t)f->w.rows, r0, r1);
	for (int b = 0; b < f->B; b++)
		for (int r = 0; r < f->w.rows; r++)
			if (r < r0 || r >= r1)
				ck_assert_msg(isnan(y[(size_t)b * f->w.rows + r]),
				              "row %d outside [%d, %d) written", r, r0, r1);
}

static const int shape_rows[] = {1, 5, 16, 17, 40, 67};
static const int shape_blocks[] = {1, 3};
static const int shape_B[] = {1, 2, 3, 7, 8, 9, 31, 64};

/* One shape: every variant over the whole range and two sub-ranges. */
static void check_shape(enum ggml_type t, int rows, int cols, int B)
{
	struct fixture f;
	fixture_init(&f, t, rows, cols, B);
	size_t n = (size_t)B * rows;
	float *want = malloc(n * sizeof(float)), *twin = malloc(n * sizeof(float));
	float *got = malloc(n * sizeof(float));
	stored_twin(&f, want);
	run_range(&f, qpack_rows_get(t, QDOT_VARIANT_SCALAR), 0, rows, twin);
	expect_close(&f, twin, want, 0, rows, "twin vs stored qdot twin");
	int ranges[3][2] = {{0, rows}, {rows / 3, rows - rows / 4}, {rows > 1 ? 1 : 0, rows}};
	for (int v = QDOT_VARIANT_SCALAR; v < QDOT_VARIANT_COUNT; v++) {
		qpack_rows_fn fn = qpack_rows_get(t, (enum qdot_variant)v);
		if (!fn)
			continue;
		for (int i = 0; i < 3; i++) {
			run_range(&f, fn, ranges[i][0], ranges[i][1], got);
			expect_close(&f, got, twin, ranges[i][0], ranges[i][1],
			             qdot_variant_name((enum qdot_variant)v));
		}
	}
	free(want);
	free(twin);
	free(got);
	fixture_free(&f);
}

START_TEST(test_variants_match_twins)
{
	int checked = 0;
	for (int ti = 0; ti < N_TYPES; ti++) {
		enum ggml_type t = types[ti];
		if (!qpack_supported(t))
			continue;
		int bv = qpack_block_values(t);
		for (size_t ri = 0; ri < sizeof(shape_rows) / sizeof(int); ri++)
			for (size_t ci = 0; ci < sizeof(shape_blocks) / sizeof(int); ci++)
				for (size_t bi = 0; bi < sizeof(shape_B) / sizeof(int); bi++)
					check_shape(t, shape_rows[ri], bv * shape_blocks[ci],
					            shape_B[bi]);
		checked++;
	}
	ck_assert_int_gt(checked, 0);
}
END_TEST

/* The layout is what qpack.h says: rows past the end of the last group are
 * zero, and each (row, block) lies in the group block qpack_block_offset
 * names (changing a stored block changes that group block only). */
START_TEST(test_layout)
{
	struct fixture f;
	fixture_init(&f, GGML_TYPE_Q4_K, 21, 512, 1);
	size_t gb = qpack_group_block_bytes(GGML_TYPE_Q4_K), pb = qpack_bytes(&f.w);
	ck_assert_uint_eq(pb, 2 * 2 * gb);
	uint8_t *before = malloc(pb);
	memcpy(before, f.packed, pb);
	f.data[(size_t)19 * f.w.row_bytes + 144 + 20] ^= 0x5a; /* row 19, block 1, a code byte */
	qpack_pack(NULL, &f.w, f.packed);
	size_t at = qpack_block_offset(&f.w, 19, 1);
	ck_assert_uint_eq(at, 3 * gb);
	for (size_t i = 0; i < pb; i++)
		if (i < at || i >= at + gb)
			ck_assert_msg(((uint8_t *)f.packed)[i] == before[i], "byte %zu changed", i);
	ck_assert_msg(memcmp((uint8_t *)f.packed + at, before + at, gb) != 0, "block unchanged");
	free(before);
	fixture_free(&f);
}
END_TEST

/* Through matmul: QPACK and QPACK_SCALAR with a bias against QDOT_SCALAR
 * on the stored layout, and the table picks QPACK where panels exist. */
START_TEST(test_matmul_family)
{
	for (int ti = 0; ti < N_TYPES; ti++) {
		enum ggml_type t = types[ti];
		if (!qpack_supported(t))
			continue;
		struct fixture f;
		fixture_init(&f, t, 45, 2 * qpack_block_values(t), 9);
		float *bias = malloc(sizeof(float) * 45);
		for (int r = 0; r < 45; r++)
			bias[r] = 2.0f * frand() - 1.0f;
		size_t n = (size_t)f.B * 45;
		float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
		struct weight_matrix stored = f.w;
		stored.panels = NULL;
		struct matmul_job job = {.w = &stored, .bias = bias, .y = want};
		ck_assert_int_eq(
		    matmul_many_family(NULL, MATMUL_FAMILY_QDOT_SCALAR, f.x, f.B, &job, 1), 0);
		enum matmul_family fams[2] = {MATMUL_FAMILY_QPACK_SCALAR, MATMUL_FAMILY_QPACK};
		for (int i = 0; i < 2; i++) {
			job = (struct matmul_job){.w = &f.w, .bias = bias, .y = got};
			if (!matmul_family_runs(fams[i], &f.w))
				continue;
			ck_assert_int_eq(matmul_many_family(NULL, fams[i], f.x, f.B, &job, 1), 0);
			expect_close(&f, got, want, 0, 45, matmul_family_name(fams[i]));
		}
		ck_assert(!matmul_family_runs(MATMUL_FAMILY_QPACK_SCALAR, &stored));
		if (matmul_have_avx2() && qpack_variant_best(t) != QDOT_VARIANT_SCALAR)
			for (int B = 1; B <= 64; B *= 4)
				ck_assert_int_eq(matmul_family_pick(MATMUL_ISA_AUTO, &f.w, B),
				                 MATMUL_FAMILY_QPACK);
		free(bias);
		free(want);
		free(got);
		fixture_free(&f);
	}
}
END_TEST

/* qpack_row_to_f32 against matmul_row_to_f32 on the stored rows of type
 * t, every row of three groups (the last one partial) of six blocks: the
 * same bits, since a tied head's packed copy serves the embedding lookups.
 * Returns 1, or 0 for a type without a packed layout. */
static int check_rows_read_back(enum ggml_type t)
{
	if (!qpack_supported(t))
		return 0;
	struct fixture f;
	/* six stored blocks: three of Q8_0's and Q4_0's pairs */
	int rows = 2 * QPACK_ROWS + 5, cols = 6 * qdot_block_values(t);
	fixture_init(&f, t, rows, cols, 1);
	struct weight_matrix stored = f.w;
	stored.panels = NULL;
	float *want = malloc(sizeof(float) * cols), *got = malloc(sizeof(float) * cols);
	for (int r = 0; r < rows; r++) {
		matmul_row_to_f32(&stored, r, want);
		memset(got, 0xff, sizeof(float) * cols);
		qpack_row_to_f32(&f.w, r, got);
		ck_assert_msg(memcmp(got, want, sizeof(float) * cols) == 0,
		              "type %d row %d: packed row differs from the stored one", (int)t, r);
	}
	free(want);
	free(got);
	fixture_free(&f);
	return 1;
}

START_TEST(test_row_to_f32)
{
	int checked = 0;
	for (int ti = 0; ti < N_TYPES; ti++)
		checked += check_rows_read_back(types[ti]);
	ck_assert_int_gt(checked, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("qpack");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_variants_match_twins);
	tcase_add_test(tc, test_layout);
	tcase_add_test(tc, test_matmul_family);
	tcase_add_test(tc, test_row_to_f32);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
