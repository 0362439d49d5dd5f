/* Matmul kernels against a double-precision reference: every weight type
 * (F32, F16, BF16 and the block types Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4), every
 * kernel family against its plain-C twin, the selection table's picks at
 * batch sizes in each of its classes and past a register tile, odd row and
 * column counts, bias, several jobs in one dispatch, with and without the
 * thread pool.  Families that quantize x are checked on the x they see
 * (matmul_activation_round) and, for the qdot types, against exact x within
 * the bound that rounding allows. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/matmul.h"
#include "engine/panels.h"
#include "model/dequant.h"
#include "model/quantize.h"
#include "testutil.h"

/* A weight matrix built from random values in a given type, plus the exact
 * values it holds (decoded to double) for the reference. */
struct test_matrix {
	struct weight_matrix w;
	void *data;
	double *exact; /* (rows, cols) */
	void *panels;  /* the weight panels, when attached */
};

static uint64_t rng_state = 88172645463325252ull;

static float frand(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static uint16_t to_bf16(float f, double *exact)
{
	uint32_t bits;
	memcpy(&bits, &f, 4);
	bits += 0x7fff + ((bits >> 16) & 1);
	uint16_t h = (uint16_t)(bits >> 16);
	uint32_t back = (uint32_t)h << 16;
	float g;
	memcpy(&g, &back, 4);
	*exact = g;
	return h;
}

static uint16_t to_f16(float f, double *exact)
{
	_Float16 h = (_Float16)f;
	*exact = (double)h;
	uint16_t bits;
	memcpy(&bits, &h, 2);
	return bits;
}

/* Values per block of a block type, 1 for the float types. */
static int block_values(enum ggml_type type)
{
	return type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_MXFP4  ? 32
	       : type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q6_K ? 256
	                                                                                    : 1;
}

/* The qdot types other than Q8_0: rows written by the model's quantizer
 * (what sinkd-mkmodel writes) from random values whose scale changes per
 * 32 values, so the K-quants' sub-block scales and mins differ. */
static void make_quantized(struct test_matrix *m, enum ggml_type type, int rows, int cols)
{
	float *v = malloc((size_t)cols * sizeof(float));
	float *back = malloc((size_t)cols * sizeof(float));
	for (int r = 0; r < rows; r++) {
		uint8_t *row = (uint8_t *)m->data + (size_t)r * m->w.row_bytes;
		for (int c = 0; c < cols; c++)
			v[c] =
			    frand() * (float)(1 + (c / 32 + r) % 5) + 0.3f * (float)((c / 32) % 3);
		char err[128];
		ck_assert_msg(quantize_row(type, v, row, (uint64_t)cols, err, sizeof(err)) == 0,
		              "%s", err);
		dequantize_row(type, row, back, (uint64_t)cols);
		for (int c = 0; c < cols; c++)
			m->exact[(size_t)r * cols + c] = back[c];
	}
	free(v);
	free(back);
}

static void make_matrix(struct test_matrix *m, enum ggml_type type, int rows, int cols)
{
	size_t per_row = ggml_row_bytes(type, (uint64_t)cols);
	m->panels = NULL;
	m->data = calloc((size_t)rows, per_row);
	m->exact = calloc((size_t)rows * cols, sizeof(double));
	m->w = (struct weight_matrix){
	    .type = type, .rows = rows, .cols = cols, .data = m->data, .row_bytes = per_row};
	if (block_values(type) > 1 && type != GGML_TYPE_Q8_0) {
		make_quantized(m, type, rows, cols);
		return;
	}
	for (int r = 0; r < rows; r++) {
		uint8_t *row = (uint8_t *)m->data + (size_t)r * per_row;
		double *ex = m->exact + (size_t)r * cols;
		for (int c = 0; c < cols; c++) {
			float v = frand();
			if (type == GGML_TYPE_F32) {
				((float *)row)[c] = v;
				ex[c] = v;
			} else if (type == GGML_TYPE_F16) {
				((uint16_t *)row)[c] = to_f16(v, &ex[c]);
			} else if (type == GGML_TYPE_BF16) {
				((uint16_t *)row)[c] = to_bf16(v, &ex[c]);
			}
		}
		if (type != GGML_TYPE_Q8_0)
			continue;
		for (int b = 0; b < cols / 32; b++) {
			uint8_t *blk = row + (size_t)b * 34;
			float v[32], amax = 0;
			for (int i = 0; i < 32; i++) {
				v[i] = frand() * (float)(b + 1);
				amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
			}
			double d;
			uint16_t dh = to_f16(amax / 127.0f, &d);
			memcpy(blk, &dh, 2);
			for (int i = 0; i < 32; i++) {
				int q = (int)lrint(v[i] / d);
				q = q > 127 ? 127 : q < -127 ? -127 : q;
				((int8_t *)(blk + 2))[i] = (int8_t)q;
				ex[b * 32 + i] = d * q;
			}
		}
	}
}

static const char *ggml_type_name_test(enum ggml_type t)
{
	return ggml_type_name(t);
}

static void free_matrix(struct test_matrix *m)
{
	free(m->data);
	free(m->exact);
	free(m->panels);
}

/* Gives m weight panels (as the CPU backend does) when this CPU and the
 * type have them; the AUTO kernels then read the panels.  The stored rows
 * are scrambled afterwards, so a kernel that read them would fail. */
static void attach_panels(struct test_matrix *m, struct threadpool *pool)
{
	if (!panels_supported(m->w.type))
		return;
	m->panels = aligned_alloc(64, (panels_bytes(&m->w) + 63) & ~(size_t)63);
	ck_assert_ptr_nonnull(m->panels);
	panels_pack(pool, &m->w, m->panels);
	m->w.panels = m->panels;
	memset(m->data, 0x7f, (size_t)m->w.rows * m->w.row_bytes);
}

/* Relative tolerance (of the sum of |w x| terms) of a product against the
 * double reference on the same x: float summation order, and for the qdot
 * types the float products of their block scales (test-qdot.c's bound). */
static double type_eps(enum ggml_type type)
{
	return block_values(type) > 1 && type != GGML_TYPE_Q8_0 ? 1e-4 : 2e-6;
}

/* Checks y against the double reference with tol + |ref|-scaled eps. */
static void check_result(const struct test_matrix *m, const float *x, int B, const float *bias,
                         const float *y, const char *what)
{
	double eps = type_eps(m->w.type);
	int rows = m->w.rows, cols = m->w.cols;
	for (int b = 0; b < B; b++)
		for (int r = 0; r < rows; r++) {
			double ref = bias ? bias[r] : 0.0, mag = fabs(ref);
			for (int c = 0; c < cols; c++) {
				double t = m->exact[(size_t)r * cols + c] * x[(size_t)b * cols + c];
				ref += t;
				mag += fabs(t);
			}
			double got = y[(size_t)b * rows + r];
			if (!(fabs(got - ref) <= 1e-6 + eps * mag))
				ck_abort_msg("%s: y[%d][%d] = %.9g, reference %.9g (mag %.3g)",
				             what, b, r, got, ref, mag);
		}
}

/* Random x (nx) and bias (rows); the outputs y and y2 (ny each, y2 may be
 * NULL) poisoned with NaN so that a row no kernel wrote shows. */
static void random_inputs(float *x, int nx, float *bias, int rows, float *y, float *y2, int ny)
{
	for (int i = 0; i < nx; i++)
		x[i] = frand();
	for (int i = 0; i < rows; i++)
		bias[i] = frand();
	for (int i = 0; i < ny; i++) {
		y[i] = NAN;
		if (y2)
			y2[i] = NAN;
	}
}

static void run_case(struct threadpool *pool, enum matmul_isa isa, enum ggml_type type, int rows,
                     int cols, int B, bool with_bias, bool panels)
{
	struct test_matrix m = {0};
	make_matrix(&m, type, rows, cols);
	if (panels)
		attach_panels(&m, pool);
	float *x = malloc((size_t)B * cols * sizeof(float));
	float *y = malloc((size_t)B * rows * sizeof(float));
	float *bias = malloc((size_t)rows * sizeof(float));
	random_inputs(x, B * cols, bias, rows, y, NULL, B * rows);
	struct matmul_job job = {.w = &m.w, .bias = with_bias ? bias : NULL, .y = y};
	matmul_many(pool, isa, x, B, &job, 1);
	/* The integer paths multiply x rounded through int8 blocks. */
	if (matmul_family_rounds_activations(matmul_family_pick(isa, &m.w, B)))
		for (int b = 0; b < B; b++)
			matmul_activation_round(type, x + (size_t)b * cols, cols,
			                        x + (size_t)b * cols);
	char what[160];
	snprintf(what, sizeof(what), "%s isa=%d rows=%d cols=%d B=%d pool=%d bias=%d panels=%d",
	         ggml_type_name_test(type), isa, rows, cols, B, pool ? threadpool_size(pool) : 0,
	         with_bias, m.w.panels != NULL);
	check_result(&m, x, B, job.bias, y, what);
	free(x);
	free(y);
	free(bias);
	free_matrix(&m);
}

static const enum ggml_type all_types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16,
                                           GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K,
                                           GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_MXFP4};
#define N_ALL_TYPES (int)(sizeof(all_types) / sizeof(all_types[0]))

/* Column counts for a type: cols_32 for the float types and 32-value
 * blocks (entries that are no multiple of the block skipped), cols_256 for
 * the K-quants. */
static int pick_cols(enum ggml_type type, int cols_32, int cols_256)
{
	int bv = block_values(type);
	return bv == 256 ? cols_256 : cols_32 % bv ? 0 : cols_32;
}

/* Every type, all three ISA settings, odd shapes, batch sizes across the
 * table's class edges and the tiles' edges. */
START_TEST(test_all_types_shapes)
{
	int rows_list[] = {1, 3, 4, 7, 33};
	int cols_list[] = {32, 64, 96, 13, 8, 200};
	/* the table's batch classes end at 1, 5, 11 */
	int b_list[] = {1, 2, 3, 4, 5, 6, 8, 9, 11, 12, 13, 17, 23, 24, 64, 67};
	enum matmul_isa isas[] = {MATMUL_ISA_GENERIC, MATMUL_ISA_AUTO, MATMUL_ISA_AVX2_F32};
	int cols_k[] = {256, 512, 256, 768, 512, 256};
	for (int t = 0; t < N_ALL_TYPES; t++)
		for (size_t ri = 0; ri < sizeof(rows_list) / sizeof(int); ri++)
			for (size_t ci = 0; ci < sizeof(cols_list) / sizeof(int); ci++) {
				int cols = pick_cols(all_types[t], cols_list[ci], cols_k[ci]);
				if (!cols || (block_values(all_types[t]) == 256 && ci >= 2))
					continue;
				for (size_t bi = 0; bi < sizeof(b_list) / sizeof(int); bi++)
					for (int i = 0; i < 3; i++)
						run_case(NULL, isas[i], all_types[t], rows_list[ri],
						         cols, b_list[bi], (bi + ri) % 2, false);
			}
}
END_TEST

/* |a - b| within tol + eps * sum |w x| of row r of batch row b: float
 * summation order only (test-qdot.c's variant bound for the qdot types). */
static void check_close(const struct test_matrix *m, const float *x, int B, const float *a,
                        const float *b, const char *what)
{
	int rows = m->w.rows, cols = m->w.cols;
	double eps = type_eps(m->w.type) > 2e-6 ? 1e-5 : 2e-6;
	for (int bi = 0; bi < B; bi++)
		for (int r = 0; r < rows; r++) {
			double mag = 0;
			for (int c = 0; c < cols; c++)
				mag +=
				    fabs(m->exact[(size_t)r * cols + c] * x[(size_t)bi * cols + c]);
			double got = a[(size_t)bi * rows + r], want = b[(size_t)bi * rows + r];
			if (!(fabs(got - want) <= 1e-6 + eps * mag))
				ck_abort_msg("%s: y[%d][%d] = %.9g, twin %.9g (mag %.3g)", what, bi,
				             r, got, want, mag);
		}
}

/* A rounding family's y against the product with exact x: rounding to
 * int8 blocks moves each x by at most half its block's step, amax / 254,
 * so |error| <= sum over blocks of (sum |w| in the block) * amax / 254,
 * plus the float tolerance of check_result. */
static void check_rounding_bound(const struct test_matrix *m, const float *x, int B,
                                 const float *bias, const float *y, const char *what)
{
	int rows = m->w.rows, cols = m->w.cols, bv = block_values(m->w.type);
	bv = bv == 1 ? 32 : bv;
	for (int b = 0; b < B; b++)
		for (int r = 0; r < rows; r++) {
			const float *xb = x + (size_t)b * cols;
			const double *wr = m->exact + (size_t)r * cols;
			double ref = bias ? bias[r] : 0.0, mag = fabs(ref), bound = 0;
			for (int k = 0; k < cols; k += bv) {
				double amax = 0, wsum = 0;
				for (int i = k; i < k + bv; i++) {
					amax = fmax(amax, fabs(xb[i]));
					wsum += fabs(wr[i]);
					ref += wr[i] * xb[i];
					mag += fabs(wr[i] * xb[i]);
				}
				bound += wsum * amax / 254.0;
			}
			double got = y[(size_t)b * rows + r];
			if (!(fabs(got - ref) <=
			      bound * (1 + 1e-6) + 1e-6 + type_eps(m->w.type) * mag))
				ck_abort_msg(
				    "%s: y[%d][%d] = %.9g, exact-x reference %.9g, rounding "
				    "bound %.3g",
				    what, b, r, got, ref, bound);
		}
}

/* Runs family f on a fresh matrix (given panels when f reads them) and
 * compares it with its twin, and the twin with the double reference.
 * Returns false when f does not run here for the type. */
static bool family_case(struct threadpool *pool, enum matmul_family f, enum ggml_type type,
                        int rows, int cols, int B, bool with_bias)
{
	struct test_matrix m = {0};
	make_matrix(&m, type, rows, cols);
	if (!matmul_family_runs(f, &m.w))
		attach_panels(&m, NULL);
	if (!matmul_family_runs(f, &m.w)) {
		free_matrix(&m);
		return false;
	}
	enum matmul_family twin = matmul_family_twin(f);
	ck_assert(matmul_family_runs(twin, &m.w));
	ck_assert_int_eq(matmul_family_rounds_activations(f),
	                 matmul_family_rounds_activations(twin));
	float *x = malloc((size_t)B * cols * sizeof(float));
	float *y = malloc((size_t)B * rows * sizeof(float));
	float *yt = malloc((size_t)B * rows * sizeof(float));
	float *bias = malloc((size_t)rows * sizeof(float));
	random_inputs(x, B * cols, bias, rows, y, yt, B * rows);
	struct matmul_job job = {.w = &m.w, .bias = with_bias ? bias : NULL, .y = y};
	ck_assert_int_eq(matmul_many_family(pool, f, x, B, &job, 1), 0);
	job.y = yt;
	ck_assert_int_eq(matmul_many_family(NULL, twin, x, B, &job, 1), 0);
	char what[160];
	snprintf(what, sizeof(what), "%s (%s) %s rows=%d cols=%d B=%d pool=%d bias=%d",
	         matmul_family_name(f), matmul_family_name(twin), ggml_type_name_test(type), rows,
	         cols, B, pool ? threadpool_size(pool) : 0, with_bias);
	if (matmul_family_rounds_activations(f)) {
		check_rounding_bound(&m, x, B, job.bias, y, what);
		for (int b = 0; b < B; b++)
			matmul_activation_round(type, x + (size_t)b * cols, cols,
			                        x + (size_t)b * cols);
	}
	check_close(&m, x, B, y, yt, what);
	check_result(&m, x, B, job.bias, yt, what);
	free(x);
	free(y);
	free(yt);
	free(bias);
	free_matrix(&m);
	return true;
}

/* Every family the CPU runs, every type it has, against its plain-C twin:
 * batch sizes in each class of the selection table and past each family's
 * tiles (4, 6, 8 and 12 batch rows, so last blocks are ragged), whether or
 * not the table picks the family there; rows around the 16-row groups and
 * 48-row tiles; columns around the vector widths and the GEMM's 256-column
 * steps; threaded sizes. */
START_TEST(test_families)
{
	struct threadpool *pool = NULL;
	ck_assert_int_eq(threadpool_new(3, &pool, NULL, 0), 0);
	int rows_list[] = {1, 17, 50};
	int cols_list[] = {13, 300}, cols_q8[] = {64, 288}, cols_k[] = {256, 512};
	int b_list[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 17, 25};
	for (int f = 0; f < MATMUL_FAMILY_COUNT; f++) {
		int ran = 0;
		for (int t = 0; t < N_ALL_TYPES; t++) {
			int bv = block_values(all_types[t]);
			for (size_t ri = 0; ri < sizeof(rows_list) / sizeof(int); ri++)
				for (int ci = 0; ci < 2; ci++)
					for (size_t bi = 0; bi < sizeof(b_list) / sizeof(int); bi++)
						ran += family_case(NULL, f, all_types[t],
						                   rows_list[ri],
						                   bv == 256  ? cols_k[ci]
						                   : bv == 32 ? cols_q8[ci]
						                              : cols_list[ci],
						                   b_list[bi], (bi + ri) % 2);
			for (int b = 1; b <= 13; b += 6)
				ran += family_case(pool, f, all_types[t], 301, 768, b, b % 2);
		}
		printf("family %-13s %4d cases\n", matmul_family_name(f), ran);
	}
	threadpool_free(pool);
}
END_TEST

/* The selection table, for every type and ISA setting, with and without
 * panels, at batch sizes in each class: it only picks families that run
 * here for the matrix; plain C under GENERIC; the panel kernels whenever
 * AUTO has panels; and matmul_q8_rounds_activations says what its pick
 * does.  Prints the picks. */
START_TEST(test_table)
{
	int b_list[] = {1, 2, 5, 6, 11, 12, 13, 64};
	enum matmul_isa isas[] = {MATMUL_ISA_GENERIC, MATMUL_ISA_AVX2_F32, MATMUL_ISA_AUTO};
	for (int t = 0; t < N_ALL_TYPES; t++)
		for (int i = 0; i < 3; i++)
			for (int p = 0; p < 2; p++) {
				struct test_matrix m = {0};
				make_matrix(&m, all_types[t], 20, 256);
				if (p)
					attach_panels(&m, NULL);
				if (p && !m.w.panels) {
					free_matrix(&m);
					continue;
				}
				printf("table %-4s isa=%d panels=%d:",
				       ggml_type_name_test(all_types[t]), isas[i], p);
				for (size_t bi = 0; bi < sizeof(b_list) / sizeof(int); bi++) {
					int B = b_list[bi];
					enum matmul_family f = matmul_family_pick(isas[i], &m.w, B);
					printf(" %d:%s", B, matmul_family_name(f));
					ck_assert_msg(matmul_family_runs(f, &m.w), "%s cannot run",
					              matmul_family_name(f));
					if (isas[i] == MATMUL_ISA_GENERIC)
						ck_assert_int_eq(f, MATMUL_FAMILY_SCALAR);
					if (isas[i] == MATMUL_ISA_AUTO && m.w.panels)
						ck_assert_int_eq(f, MATMUL_FAMILY_PANELS);
					if (all_types[t] == GGML_TYPE_Q8_0)
						ck_assert_int_eq(
						    matmul_family_rounds_activations(f),
						    matmul_q8_rounds_activations(isas[i], B));
					/* the other block types: only qdot reads them fast */
					if (block_values(all_types[t]) > 1 &&
					    all_types[t] != GGML_TYPE_Q8_0 &&
					    isas[i] == MATMUL_ISA_AUTO && matmul_have_avx2())
						ck_assert_int_eq(f, MATMUL_FAMILY_QDOT);
				}
				printf("\n");
				free_matrix(&m);
			}
}
END_TEST

/* Sizes big enough to be split over threads. */
START_TEST(test_threaded)
{
	struct threadpool *pool = NULL;
	ck_assert_int_eq(threadpool_new(3, &pool, NULL, 0), 0);
	int b_list[] = {1, 2, 7, 16, 40};
	for (int t = 0; t < N_ALL_TYPES; t++)
		for (int bi = 0; bi < 5; bi++) {
			run_case(pool, MATMUL_ISA_AUTO, all_types[t], 301, 768, b_list[bi], bi % 2,
			         false);
			run_case(pool, MATMUL_ISA_GENERIC, all_types[t], 130,
			         pick_cols(all_types[t], 544, 512), b_list[bi], true, false);
			run_case(pool, MATMUL_ISA_AVX2_F32, all_types[t], 67, 512, b_list[bi],
			         false, false);
		}
	/* decode over many blocks, from panels where they exist: owners claim
	 * several blocks at once (read as four streams, and a remainder of
	 * groups), thieves one */
	for (int t = 0; t < N_ALL_TYPES; t++)
		run_case(pool, MATMUL_ISA_AUTO, all_types[t], 2000 + 3 * t,
		         pick_cols(all_types[t], 64, 256), 1, t % 2, true);
	threadpool_free(pool);
}
END_TEST

/* Several jobs sharing one input in one dispatch (Q, K, V; gate, up).  With
 * panels, the F16 and F32 jobs read panels: the second job starts at global
 * row 300, inside a 16-row group. */
static void many_jobs_case(int B, bool panels)
{
	struct threadpool *pool = NULL;
	ck_assert_int_eq(threadpool_new(2, &pool, NULL, 0), 0);
	int cols = 256, rows[3] = {300, 61, 97};
	enum ggml_type types[3] = {GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_F32};
	struct test_matrix m[3] = {0};
	struct matmul_job jobs[3];
	float *x = malloc((size_t)B * cols * sizeof(float));
	for (int i = 0; i < B * cols; i++)
		x[i] = frand();
	for (int j = 0; j < 3; j++) {
		make_matrix(&m[j], types[j], rows[j], cols);
		jobs[j] = (struct matmul_job){.w = &m[j].w, .y = malloc((size_t)B * rows[j] * 4)};
	}
	for (int p = 0; p < 2 && !panels; p++) {
		matmul_many(p ? pool : NULL, MATMUL_ISA_AVX2_F32, x, B, jobs, 3);
		for (int j = 0; j < 3; j++)
			check_result(&m[j], x, B, NULL, jobs[j].y, "many jobs");
	}
	/* AUTO: the Q8_0 job takes the integer path on rounded x, the others exact x. */
	float *xr = malloc((size_t)B * cols * sizeof(float));
	for (int b = 0; b < B; b++)
		matmul_q8_activation_round(x + (size_t)b * cols, cols, xr + (size_t)b * cols);
	if (panels) {
		attach_panels(&m[0], pool);
		attach_panels(&m[2], NULL);
	}
	matmul_many(pool, MATMUL_ISA_AUTO, x, B, jobs, 3);
	for (int j = 0; j < 3; j++)
		check_result(&m[j],
		             j == 1 && matmul_q8_rounds_activations(MATMUL_ISA_AUTO, B) ? xr : x, B,
		             NULL, jobs[j].y, "many jobs, auto");
	free(xr);
	for (int j = 0; j < 3; j++) {
		free(jobs[j].y);
		free_matrix(&m[j]);
	}
	free(x);
	threadpool_free(pool);
}

START_TEST(test_many_jobs)
{
	many_jobs_case(3, false);  /* dot kernels, Q8 integer path */
	many_jobs_case(13, false); /* packed GEMM */
	many_jobs_case(1, true);
	many_jobs_case(13, true);
}
END_TEST

START_TEST(test_row_to_f32)
{
	for (int t = 0; t < N_ALL_TYPES; t++) {
		struct test_matrix m;
		make_matrix(&m, all_types[t], 5, 512);
		float out[512];
		matmul_row_to_f32(&m.w, 3, out);
		for (int c = 0; c < 512; c++)
			ck_assert_double_eq_tol(out[c], m.exact[3 * 512 + c],
			                        1e-12 + 1e-6 * fabs(m.exact[3 * 512 + c]));
		ck_assert(matmul_type_supported(all_types[t]));
		free_matrix(&m);
	}
	/* the loader converts these to F16 */
	ck_assert(!matmul_type_supported(GGML_TYPE_Q4_1));
	ck_assert(!matmul_type_supported(GGML_TYPE_Q5_1));
}
END_TEST

/* The qdot types at every batch size from 1 to 40 (the 8-vector tiles'
 * remainders, and the 4-row tiles' with 37 rows), every family that runs
 * here for the type against its twin and the references, with and without
 * threads. */
START_TEST(test_qdot_batches)
{
	struct threadpool *pool = NULL;
	ck_assert_int_eq(threadpool_new(2, &pool, NULL, 0), 0);
	const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K,
	                                GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_MXFP4};
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
		for (int f = 0; f < MATMUL_FAMILY_COUNT; f++) {
			int ran = 0;
			for (int B = 1; B <= 40; B++)
				ran += family_case(B % 3 ? NULL : pool, (enum matmul_family)f,
				                   types[t], B % 2 ? 37 : 130, 512, B, B % 2);
			if (ran)
				printf("batches 1..40 %-5s %-12s\n", ggml_type_name(types[t]),
				       matmul_family_name(f));
		}
	threadpool_free(pool);
}
END_TEST

/* One dispatch whose jobs read x in both qdot activation formats (Q4_K:
 * 256-value blocks, Q4_0: 32) and as it is (F16), as the Q, K and V
 * products of a mixed-type file do, threaded and not, decode and batch. */
START_TEST(test_mixed_formats)
{
	struct threadpool *pool = NULL;
	ck_assert_int_eq(threadpool_new(2, &pool, NULL, 0), 0);
	int cols = 512, rows[3] = {300, 61, 97};
	enum ggml_type types[3] = {GGML_TYPE_Q4_K, GGML_TYPE_Q4_0, GGML_TYPE_F16};
	int b_list[] = {1, 3, 13, 33};
	for (int bi = 0; bi < 4; bi++) {
		int B = b_list[bi];
		struct test_matrix m[3] = {0};
		struct matmul_job jobs[3];
		float *x = malloc((size_t)B * cols * sizeof(float));
		float *xr = malloc((size_t)B * cols * sizeof(float));
		for (int i = 0; i < B * cols; i++)
			x[i] = frand();
		for (int j = 0; j < 3; j++) {
			make_matrix(&m[j], types[j], rows[j], cols);
			jobs[j] =
			    (struct matmul_job){.w = &m[j].w, .y = malloc((size_t)B * rows[j] * 4)};
		}
		matmul_many(bi % 2 ? pool : NULL, MATMUL_ISA_AUTO, x, B, jobs, 3);
		for (int j = 0; j < 3; j++) {
			bool rounds = matmul_family_rounds_activations(
			    matmul_family_pick(MATMUL_ISA_AUTO, &m[j].w, B));
			for (int b = 0; b < B; b++)
				matmul_activation_round(rounds ? types[j] : GGML_TYPE_F32,
				                        x + (size_t)b * cols, cols,
				                        xr + (size_t)b * cols);
			check_result(&m[j], xr, B, NULL, jobs[j].y, "mixed formats");
			free(jobs[j].y);
			free_matrix(&m[j]);
		}
		free(x);
		free(xr);
	}
	threadpool_free(pool);
}
END_TEST

/* Gate and up products fused with the SwiGLU activation, against
 * silu(g) * u from the double reference of both products. */
static void swiglu_case(struct threadpool *pool, enum matmul_isa isa, enum ggml_type type, int rows,
                        int cols, int B, bool panels)
{
	struct test_matrix g = {0}, u = {0};
	make_matrix(&g, type, rows, cols);
	make_matrix(&u, type, rows, cols);
	if (panels) {
		attach_panels(&g, pool);
		attach_panels(&u, pool);
	}
	float *x = malloc((size_t)B * cols * sizeof(float));
	float *gate = malloc((size_t)B * rows * sizeof(float));
	float *up = malloc((size_t)B * rows * sizeof(float));
	for (int i = 0; i < B * cols; i++)
		x[i] = 2.0f * frand();
	for (int i = 0; i < B * rows; i++)
		gate[i] = up[i] = NAN;
	matmul_swiglu(pool, isa, x, B, &g.w, &u.w, gate, up);
	if (matmul_family_rounds_activations(matmul_family_pick(isa, &g.w, B)))
		for (int b = 0; b < B; b++)
			matmul_activation_round(type, x + (size_t)b * cols, cols,
			                        x + (size_t)b * cols);
	for (int b = 0; b < B; b++)
		for (int r = 0; r < rows; r++) {
			double gs = 0, us = 0, mag = 0;
			for (int c = 0; c < cols; c++) {
				double xv = x[(size_t)b * cols + c];
				gs += g.exact[(size_t)r * cols + c] * xv;
				us += u.exact[(size_t)r * cols + c] * xv;
				mag += fabs(g.exact[(size_t)r * cols + c] * xv) +
				       fabs(u.exact[(size_t)r * cols + c] * xv);
			}
			double ref = gs / (1.0 + exp(-gs)) * us;
			double got = gate[(size_t)b * rows + r];
			if (!(fabs(got - ref) <= 1e-5 + 1e-5 * mag * (1.0 + fabs(gs) + fabs(us))))
				ck_abort_msg(
				    "swiglu %s isa=%d rows=%d cols=%d B=%d: [%d][%d] = %.9g, "
				    "reference %.9g",
				    ggml_type_name_test(type), isa, rows, cols, B, b, r, got, ref);
		}
	free(x);
	free(gate);
	free(up);
	free_matrix(&g);
	free_matrix(&u);
}

START_TEST(test_swiglu)
{
	struct threadpool *pool = NULL;
	ck_assert_int_eq(threadpool_new(2, &pool, NULL, 0), 0);
	int b_list[] = {1, 3, 8, 24, 33};
	enum matmul_isa isas[] = {MATMUL_ISA_GENERIC, MATMUL_ISA_AUTO};
	for (int t = 0; t < 2; t++)
		for (int bi = 0; bi < 5; bi++)
			for (int i = 0; i < 2; i++) {
				swiglu_case(pool, isas[i], all_types[t], 301, 768, b_list[bi],
				            false);
				swiglu_case(NULL, isas[i], all_types[t], 37, 200, b_list[bi],
				            false);
				swiglu_case(pool, isas[i], all_types[t], 301, 768, b_list[bi],
				            i == 1);
			}
	enum ggml_type block_types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q4_0};
	for (int t = 0; t < 3; t++)
		for (int bi = 0; bi < 5; bi++)
			swiglu_case(bi % 2 ? pool : NULL, MATMUL_ISA_AUTO, block_types[t], 301, 768,
			            b_list[bi], false);
	threadpool_free(pool);
}
END_TEST

/* Weight panels (what the CPU backend makes on AVX-512 machines) for
 * F32/F16/BF16: row counts around the 16-row groups and the 48-row batch
 * tiles, odd column counts, batch sizes around the 8-, 4- and 2-row tiles, with and
 * without threads. */
START_TEST(test_panels)
{
	if (!panels_supported(GGML_TYPE_F32)) {
		tu_skip("test_panels: no weight panels on this CPU (no AVX-512)");
		return;
	}
	struct threadpool *pool = NULL;
	ck_assert_int_eq(threadpool_new(3, &pool, NULL, 0), 0);
	int rows_list[] = {1, 3, 16, 17, 33, 50, 301};
	int cols_list[] = {13, 200, 768};
	int b_list[] = {1, 2, 3, 4, 7, 8, 9, 12, 16, 17, 19, 40};
	for (int t = 0; t < 3; t++)
		for (size_t ri = 0; ri < sizeof(rows_list) / sizeof(int); ri++)
			for (size_t ci = 0; ci < sizeof(cols_list) / sizeof(int); ci++)
				for (size_t bi = 0; bi < sizeof(b_list) / sizeof(int); bi++)
					run_case((bi + ci) % 2 ? pool : NULL, MATMUL_ISA_AUTO,
					         all_types[t], rows_list[ri], cols_list[ci],
					         b_list[bi], (bi + ri) % 2, true);
	threadpool_free(pool);
}
END_TEST

/* x transposed for the panel kernels: the vector code writes exactly what
 * the element loop writes (zero padding of the last block included) for
 * batch sizes around the 8-row blocks and column counts around the 8-column
 * steps; the padding is written even over stale bytes. */
START_TEST(test_transpose_x)
{
	int b_list[] = {1, 2, 7, 8, 9, 15, 16, 17, 33};
	int cols_list[] = {1, 7, 8, 9, 13, 64, 200, 768};
	for (size_t bi = 0; bi < sizeof(b_list) / sizeof(int); bi++)
		for (size_t ci = 0; ci < sizeof(cols_list) / sizeof(int); ci++) {
			int B = b_list[bi], cols = cols_list[ci];
			size_t n = panels_xt_floats(B, cols);
			float *x = malloc((size_t)B * cols * sizeof(float));
			float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
			for (int i = 0; i < B * cols; i++)
				x[i] = (float)(i * 7 % 101) - 50.0f;
			memset(a, 0x7f, n * sizeof(float));
			memset(b, 0x55, n * sizeof(float));
			panels_transpose_x(x, B, cols, a);
			panels_transpose_x_scalar(x, B, cols, b);
			ck_assert_msg(memcmp(a, b, n * sizeof(float)) == 0,
			              "transposes differ for %d rows of %d", B, cols);
			free(x);
			free(a);
			free(b);
		}
}
END_TEST

int main(void)
{
	printf("matmul: avx2 kernels %s, avx512 GEMM %s\n", matmul_have_avx2() ? "yes" : "no",
	       matmul_have_avx512() ? "yes" : "no");
	Suite *s = suite_create("matmul");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_all_types_shapes);
	tcase_add_test(tc, test_families);
	tcase_add_test(tc, test_table);
	tcase_add_test(tc, test_threaded);
	tcase_add_test(tc, test_many_jobs);
	tcase_add_test(tc, test_row_to_f32);
	tcase_add_test(tc, test_qdot_batches);
	tcase_add_test(tc, test_mixed_formats);
	tcase_add_test(tc, test_swiglu);
	tcase_add_test(tc, test_panels);
	tcase_add_test(tc, test_transpose_x);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
