/* Q8_0 and Q4_0 packed (engine/qpack.h, qpack_q0.h) on random stored blocks
 * (every code byte, -128 included; sane fp16 scales) and random
 * activations: the packer against the stored blocks element by element
 * (rows past the end zero); the plain-C twin against the stored layout's
 * qdot twin (bit for bit: the same integers, scaled in the same order);
 * every kernel this CPU runs against both, on rows not a multiple of the
 * group, one row, one and many blocks, B = 1, 2, 3, 7, 8, 9, 31, 64, 512,
 * sub-ranges [r0, r1) (rows outside untouched); and the matmul family with
 * a bias, threads and tile plans against the stored layout's qdot
 * family. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/matmul.h"
#include "engine/qdot.h"
#include "engine/qpack.h"
#include "engine/qpack_q0.h"
#include "engine/threadpool.h"
#include "model/dequant.h"
#include "util/half.h"
#include "testutil.h"

/* Kernel vs twin: |k - t| <= TOL * mag, mag the sum of |w| |x| over the
 * row (only the float summation order differs). */
#define QPACK_Q0_TOL 1e-5

static const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};

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

static size_t block_bytes(enum ggml_type t)
{
	return t == GGML_TYPE_Q8_0 ? 34 : 18;
}

/* A matrix of random stored blocks: w->data is owned by the caller (free). */
static struct weight_matrix random_matrix(enum ggml_type t, int rows, int cols)
{
	struct weight_matrix w = {.type = t, .rows = rows, .cols = cols};
	w.row_bytes = (size_t)cols / 32 * block_bytes(t);
	uint8_t *d = malloc(w.row_bytes * (size_t)rows);
	ck_assert_ptr_nonnull(d);
	for (size_t b = 0; b < w.row_bytes * (size_t)rows / block_bytes(t); b++) {
		uint8_t *p = d + b * block_bytes(t);
		uint16_t h = f32_to_fp16(1e-3f + 4.9e-2f * frand());
		memcpy(p, &h, 2);
		for (size_t i = 2; i < block_bytes(t); i++)
			p[i] = (uint8_t)rnd();
	}
	w.data = d;
	return w;
}

/* The packed copy of w into w->panels (free it). */
static void *pack(struct weight_matrix *w, struct threadpool *pool)
{
	size_t bytes = qpack_bytes(w);
	ck_assert_uint_gt(bytes, 0);
	void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	ck_assert_ptr_nonnull(p);
	memset(p, 0xa5, bytes); /* the packer must write every byte it owns */
	qpack_pack(pool, w, p);
	w->panels = p;
	return p;
}

/* B random activation vectors of w's cols, quantized: (free it). */
static void *random_xq(enum ggml_type t, int cols, int B, size_t *xq_bytes, float **x_out)
{
	*xq_bytes = qdot_act_bytes(t, cols);
	float *x = malloc(sizeof(float) * (size_t)cols * (size_t)B);
	uint8_t *xq = malloc(*xq_bytes * (size_t)B);
	ck_assert(x && xq);
	for (size_t i = 0; i < (size_t)cols * (size_t)B; i++)
		x[i] = (frand() - 0.5f) * (rnd() % 16 == 0 ? 40.0f : 2.0f);
	for (int b = 0; b < B; b++)
		qdot_act_quantize(t, x + (size_t)b * cols, cols, xq + (size_t)b * *xq_bytes);
	if (x_out)
		*x_out = x;
	else
		free(x);
	return xq;
}

/* sum |w| |x| of row r and vector b: the scale of the summation error. */
static double magnitude(const struct weight_matrix *w, int r, const void *xq, size_t xq_bytes,
                        int b)
{
	float wr[4096], xr[4096];
	ck_assert_int_le(w->cols, 4096);
	dequantize_row(w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes, wr,
	               (uint64_t)w->cols);
	qdot_act_dequantize(w->type, (const uint8_t *)xq + (size_t)b * xq_bytes, w->cols, xr);
	double m = 0;
	for (int i = 0; i < w->cols; i++)
		m += fabs((double)wr[i] * xr[i]);
	return m;
}

/* Every element of the packed copy against the stored block. */
START_TEST(test_pack_layout)
{
	const int shapes[][2] = {{1, 64}, {17, 128}, {40, 192}, {16, 64}};
	for (size_t ti = 0; ti < 2; ti++)
		for (size_t si = 0; si < 4; si++) {
			enum ggml_type t = types[ti];
			struct weight_matrix w = random_matrix(t, shapes[si][0], shapes[si][1]);
			void *p = pack(&w, NULL);
			int groups = (w.rows + QPACK_ROWS - 1) / QPACK_ROWS;
			ck_assert_uint_eq(qpack_bytes(&w), (size_t)groups * (w.cols / 32) *
			                                       QPACK_ROWS * block_bytes(t));
			for (int r = 0; r < groups * QPACK_ROWS; r++)
				for (int k = 0; k < w.cols / 32; k++) {
					const uint8_t *gb =
					    (const uint8_t *)p + qpack_block_offset(&w, r, k / 2);
					int lane = r % QPACK_ROWS, h = k % 2;
					const uint8_t *src = r < w.rows
					                         ? (const uint8_t *)w.data +
					                               (size_t)r * w.row_bytes +
					                               (size_t)k * block_bytes(t)
					                         : NULL;
					uint16_t d, want_d = 0;
					if (src)
						memcpy(&want_d, src, 2);
					if (t == GGML_TYPE_Q8_0) {
						const struct qpack_q8_0_block *b = (const void *)gb;
						d = b->d[h][lane];
						for (int i = 0; i < 32; i++) {
							int code =
							    b->qs[h][i / 4][lane][i % 4] - 128;
							int want = src ? (int8_t)src[2 + i] : -128;
							ck_assert_int_eq(code, want);
						}
					} else {
						const struct qpack_q4_0_block *b = (const void *)gb;
						d = b->d[h][lane];
						for (int i = 0; i < 16; i++)
							ck_assert_uint_eq(
							    b->qs[h][i / 4][lane][i % 4],
							    src ? src[2 + i] : 0);
					}
					ck_assert_uint_eq(d, want_d);
				}
			free(p);
			free((void *)w.data);
		}
}
END_TEST

/* Runs kernel k on rows [r0, r1) of w, the rest of y at a sentinel. */
static void run_rows(qpack_rows_fn k, const struct weight_matrix *w, const void *xq,
                     size_t xq_bytes, int B, int r0, int r1, float *y)
{
	for (size_t i = 0; i < (size_t)B * w->rows; i++)
		y[i] = -7777.0f;
	k(w, xq, xq_bytes, B, y, (size_t)w->rows, r0, r1);
}

/* Kernel of variant v against the packed twin (within QPACK_Q0_TOL) and
 * the twin against the stored layout's qdot twin (exactly). */
static void check_shape(enum ggml_type t, enum qdot_variant v, int rows, int cols, int B, int r0,
                        int r1)
{
	struct weight_matrix w = random_matrix(t, rows, cols);
	void *p = pack(&w, NULL);
	size_t xs;
	uint8_t *xq = random_xq(t, cols, B, &xs, NULL);
	float *y = malloc(sizeof(float) * (size_t)B * rows);
	float *yt = malloc(sizeof(float) * (size_t)B * rows);
	ck_assert(y && yt);
	run_rows(qpack_rows_get(t, QDOT_VARIANT_SCALAR), &w, xq, xs, B, r0, r1, yt);
	run_rows(qpack_rows_get(t, v), &w, xq, xs, B, r0, r1, y);
	const struct qdot_kernels *stored = qdot_kernels_get(t, QDOT_VARIANT_SCALAR);
	for (int b = 0; b < B; b++)
		for (int r = 0; r < rows; r++) {
			size_t i = (size_t)b * rows + r;
			if (r < r0 || r >= r1) {
				ck_assert_msg(y[i] == -7777.0f && yt[i] == -7777.0f,
				              "%s row %d outside [%d, %d) written",
				              ggml_type_name(t), r, r0, r1);
				continue;
			}
			float s = stored->dot_row((const uint8_t *)w.data + (size_t)r * w.row_bytes,
			                          xq + (size_t)b * xs, cols);
			ck_assert_msg(yt[i] == s, "%s twin %g != stored twin %g (r %d b %d)",
			              ggml_type_name(t), yt[i], s, r, b);
			double tol = QPACK_Q0_TOL * magnitude(&w, r, xq, xs, b) + 1e-6;
			ck_assert_msg(fabs((double)y[i] - yt[i]) <= tol,
			              "%s %s: %g vs twin %g (rows %d cols %d B %d r %d b %d)",
			              ggml_type_name(t), qdot_variant_name(v), y[i], yt[i], rows,
			              cols, B, r, b);
		}
	free(y);
	free(yt);
	free(xq);
	free(p);
	free((void *)w.data);
}

START_TEST(test_kernels_match_twins)
{
	const int shapes[][2] = {{1, 64}, {5, 64}, {16, 128}, {17, 192}, {33, 64}, {48, 768}};
	const int batches[] = {1, 2, 3, 7, 8, 9, 31, 64};
	int checked = 0;
	for (size_t ti = 0; ti < 2; ti++)
		for (int v = 0; v < QDOT_VARIANT_COUNT; v++) {
			if (!qpack_rows_get(types[ti], (enum qdot_variant)v))
				continue;
			checked += v != QDOT_VARIANT_SCALAR;
			for (size_t si = 0; si < 6; si++)
				for (size_t bi = 0; bi < 8; bi++)
					check_shape(types[ti], (enum qdot_variant)v, shapes[si][0],
					            shapes[si][1], batches[bi], 0, shapes[si][0]);
			/* a large batch once, and sub-ranges that start and end
			 * inside groups */
			check_shape(types[ti], (enum qdot_variant)v, 40, 128, 512, 0, 40);
			check_shape(types[ti], (enum qdot_variant)v, 70, 128, 9, 3, 37);
			check_shape(types[ti], (enum qdot_variant)v, 70, 128, 1, 16, 70);
			check_shape(types[ti], (enum qdot_variant)v, 70, 64, 5, 21, 22);
			check_shape(types[ti], (enum qdot_variant)v, 70, 64, 2, 5, 5);
		}
	if (!checked)
		fprintf(stderr, "note: no vector qpack kernel for Q8_0/Q4_0 runs here; "
		                "only the twin was checked\n");
}
END_TEST

/* The matmul families: QPACK (bias, threads) against the stored layout's
 * QDOT_SCALAR on the same rounded activations. */
START_TEST(test_family_with_bias)
{
	struct threadpool *pool = NULL;
	char err[128];
	ck_assert_int_eq(threadpool_new(2, &pool, err, sizeof(err)), 0);
	const int batches[] = {1, 4, 13, 64};
	for (size_t ti = 0; ti < 2; ti++) {
		enum ggml_type t = types[ti];
		struct weight_matrix w = random_matrix(t, 200, 256);
		void *p = pack(&w, pool);
		if (!matmul_family_runs(MATMUL_FAMILY_QPACK, &w)) {
			fprintf(stderr, "note: the qpack family does not run here for %s\n",
			        ggml_type_name(t));
			free(p);
			free((void *)w.data);
			continue;
		}
		float bias[200];
		for (int r = 0; r < 200; r++)
			bias[r] = frand() - 0.5f;
		/* without a tile plan, then passes of 5 vectors over blocks of
		 * two groups */
		for (size_t bi = 0; bi < 8; bi++) {
			int B = batches[bi % 4];
			w.plan_vecs_per_pass = bi < 4 ? 0 : 5;
			w.plan_groups_per_block = bi < 4 ? 0 : 2;
			float *x = malloc(sizeof(float) * 256 * (size_t)B);
			float *y = malloc(sizeof(float) * 200 * (size_t)B);
			float *yr = malloc(sizeof(float) * 200 * (size_t)B);
			ck_assert(x && y && yr);
			for (int i = 0; i < 256 * B; i++)
				x[i] = frand() - 0.5f;
			struct matmul_job job = {.w = &w, .bias = bias, .y = y};
			ck_assert_int_eq(
			    matmul_many_family(pool, MATMUL_FAMILY_QPACK, x, B, &job, 1), 0);
			struct weight_matrix stored = w;
			stored.panels = NULL;
			struct matmul_job ref = {.w = &stored, .bias = bias, .y = yr};
			ck_assert_int_eq(
			    matmul_many_family(NULL, MATMUL_FAMILY_QDOT_SCALAR, x, B, &ref, 1), 0);
			for (int i = 0; i < 200 * B; i++)
				ck_assert_msg(fabsf(y[i] - yr[i]) <= 1e-4f * (1.0f + fabsf(yr[i])),
				              "%s B %d [%d]: %g vs %g", ggml_type_name(t), B, i,
				              y[i], yr[i]);
			free(x);
			free(y);
			free(yr);
		}
		free(p);
		free((void *)w.data);
	}
	threadpool_free(pool);
}
END_TEST

/* Cols that are not whole group blocks get no packed copy (the stored
 * layout's kernels keep them). */
START_TEST(test_unpackable_cols)
{
	for (size_t ti = 0; ti < 2; ti++) {
		struct weight_matrix w = {.type = types[ti], .rows = 16, .cols = 96};
		ck_assert_uint_eq(qpack_bytes(&w), 0);
		ck_assert(qpack_supported(types[ti]));
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("qpack-q0");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_pack_layout);
	tcase_add_test(tc, test_kernels_match_twins);
	tcase_add_test(tc, test_family_with_bias);
	tcase_add_test(tc, test_unpackable_cols);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
