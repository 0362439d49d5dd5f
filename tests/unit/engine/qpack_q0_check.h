/* Helpers of the Q8_0/Q4_0/MXFP4 packed tests (test-qpack-q0.c, test-qpack-amx.c):
 * random stored matrices and activations, packing, and the check of a
 * kernel against the packed twin and the stored layout's qdot twin.
 * Static functions: each test includes it once. */
#pragma once

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/matmul.h"
#include "engine/qdot.h"
#include "engine/qpack.h"
#include "engine/threadpool.h"
#include "model/dequant.h"
#include "util/half.h"
#include "testutil.h"

/* Kernel vs twin: |k - t| <= TOL * mag, mag the sum of |w| |x| over the
 * row (only the float summation order differs). */
#define QPACK_Q0_TOL 1e-5

static const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_MXFP4};
#define N_TYPES 3
/* The first N_AMX_TYPES of types have AMX kernels (MXFP4 has none). */
#define N_AMX_TYPES 2

/* The tests' random stream (testutil.h's tu_frand over rand_r). */
static unsigned rng_seed = 0x2545f491u;

/* Uniform in [0, 1). */
static float frand(void)
{
	return 0.5f * (tu_frand(&rng_seed) + 1.0f) * 0.9999999f;
}

/* A random byte, every value possible. */
static uint8_t rand_byte(void)
{
	return (uint8_t)(rand_r(&rng_seed) >> 7);
}

static size_t block_bytes(enum ggml_type t)
{
	return t == GGML_TYPE_Q8_0 ? 34 : t == GGML_TYPE_Q4_0 ? 18 : 17;
}

/* Bytes of a stored block's scale: fp16, or MXFP4's E8M0. */
static size_t scale_bytes(enum ggml_type t)
{
	return t == GGML_TYPE_MXFP4 ? 1 : 2;
}

/* A random stored scale at p: a sane fp16, or an E8M0 exponent around
 * 2^-8 (2^-1 .. 2^-17), now and then one of the denormal ones (0, 1). */
static void random_scale(enum ggml_type t, uint8_t *p)
{
	if (t == GGML_TYPE_MXFP4) {
		uint8_t b = rand_byte();
		*p = b < 16 ? (uint8_t)(b % 2) : (uint8_t)(111 + b % 16);
		return;
	}
	uint16_t h = f32_to_fp16(1e-3f + 4.9e-2f * frand());
	memcpy(p, &h, 2);
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
		random_scale(t, p);
		for (size_t i = scale_bytes(t); i < block_bytes(t); i++)
			p[i] = rand_byte();
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
		x[i] = (frand() - 0.5f) * (rand_byte() < 16 ? 40.0f : 2.0f);
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

/* Runs kernel k on rows [r0, r1) of w, the rest of y at a sentinel. */
static void run_rows(qpack_rows_fn k, const struct weight_matrix *w, const void *xq,
                     size_t xq_bytes, int B, int r0, int r1, float *y)
{
	for (size_t i = 0; i < (size_t)B * w->rows; i++)
		y[i] = -7777.0f;
	k(w, xq, xq_bytes, B, y, (size_t)w->rows, r0, r1);
}

/* Kernel k (named what) against the packed twin (within QPACK_Q0_TOL)
 * and the twin against the stored layout's qdot twin (exactly). */
static void check_kernel(enum ggml_type t, const char *what, qpack_rows_fn k, int rows, int cols,
                         int B, int r0, int r1)
{
	struct weight_matrix w = random_matrix(t, rows, cols);
	void *p = pack(&w, NULL);
	size_t xs;
	uint8_t *xq = random_xq(t, cols, B, &xs, NULL);
	float *y = malloc(sizeof(float) * (size_t)B * rows);
	float *yt = malloc(sizeof(float) * (size_t)B * rows);
	ck_assert(y && yt);
	run_rows(qpack_rows_get(t, QDOT_VARIANT_SCALAR), &w, xq, xs, B, r0, r1, yt);
	run_rows(k, &w, xq, xs, B, r0, r1, y);
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
			              ggml_type_name(t), what, y[i], yt[i], rows, cols, B, r, b);
		}
	free(y);
	free(yt);
	free(xq);
	free(p);
	free((void *)w.data);
}

/* The shapes of an AMX kernel k (named what): whole tiles of 16 vectors
 * and the rest, one tile, less than a tile, sub-ranges inside groups. */
static void check_amx_shapes(enum ggml_type t, const char *what, qpack_rows_fn k)
{
	const int cases[][5] = {
	    /* rows, cols, B, r0, r1 */
	    {16, 64, 16, 0, 16},   {17, 128, 17, 0, 17}, {33, 192, 31, 0, 33}, {48, 768, 32, 0, 48},
	    {40, 128, 512, 0, 40}, {70, 128, 48, 3, 37}, {70, 64, 64, 21, 22}, {5, 64, 15, 0, 5},
	    {20, 64, 1, 0, 20},    {70, 64, 16, 5, 5},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_kernel(t, what, k, cases[i][0], cases[i][1], cases[i][2], cases[i][3],
		             cases[i][4]);
}

/* Matmul family f (bias, threads, tile plans) against the stored layout's
 * QDOT_SCALAR on the same rounded activations, for every type; a type f
 * does not run is noted and left out. */
static void check_family(enum matmul_family f)
{
	struct threadpool *pool = NULL;
	char err[128];
	ck_assert_int_eq(threadpool_new(2, &pool, err, sizeof(err)), 0);
	const int batches[] = {1, 4, 13, 64};
	for (size_t ti = 0; ti < N_TYPES; ti++) {
		enum ggml_type t = types[ti];
		struct weight_matrix w = random_matrix(t, 200, 256);
		void *p = pack(&w, pool);
		if (!matmul_family_runs(f, &w)) {
			fprintf(stderr, "note: the %s family does not run here for %s\n",
			        matmul_family_name(f), ggml_type_name(t));
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
			ck_assert_int_eq(matmul_many_family(pool, f, x, B, &job, 1), 0);
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
