/* Packed block weights (see qpack.h): the one table of packed types (group
 * block size, packer, plain-C twin, the ISA files' kernels), the packing
 * split over threads, and the twins.  A twin forms per block the same
 * integer sums as the vector kernels, so they differ only by float
 * summation order.  It does not choose when to pack (backend_cpu.c) or
 * which family runs (matmul.c). */
#include "engine/qpack.h"
#include "engine/qdot_impl.h"
#include "engine/qpack_impl.h"

#include "util/half.h"

#include <string.h>

/* ------------------------------------------------------------------ Q4_K */

/* One stored Q4_K block (144 bytes) into row r of a group block. */
static void pack_q4k_row(const uint8_t *src, int r, struct qpack_q4k_block *out)
{
	memcpy(&out->d[r], src, 2);
	memcpy(&out->dmin[r], src + 2, 2);
	for (int j = 0; j < 8; j++) {
		int sc, mn;
		qdot_scale_min_k4(j, src + 4, &sc, &mn);
		out->sc[j][r] = (uint8_t)sc;
		out->mn[j / 2][r][j % 2] = (uint8_t)mn;
	}
	const uint8_t *qs = src + 16;
	for (int m = 0; m < 4; m++)
		for (int c = 0; c < 8; c++)
			memcpy(out->qs[m][c][r], qs + 32 * m + 4 * c, 4);
}

/* Block k of group g of w into out; rows past the end stay zero. */
static void pack_q4k(const struct weight_matrix *w, int g, int k, void *out)
{
	struct qpack_q4k_block *blk = out;
	memset(blk, 0, sizeof(*blk));
	for (int r = 0; r < QPACK_ROWS && g * QPACK_ROWS + r < w->rows; r++)
		pack_q4k_row((const uint8_t *)w->data + (size_t)(g * QPACK_ROWS + r) * w->row_bytes +
		                 (size_t)k * QDOT_Q4_K_BYTES,
		             r, blk);
}

/* Row r (< QPACK_ROWS) of a group block times one activation block. */
static float q4k_block_dot(const struct qpack_q4k_block *blk, int r,
                           const struct qdot_q8k_block *x)
{
	int32_t sumi = 0, summ = 0;
	for (int j = 0; j < 8; j++) {
		int32_t dot = 0;
		for (int l = 0; l < 32; l++) {
			uint8_t q = blk->qs[j / 2][l / 4][r][l % 4];
			dot += (j % 2 ? q >> 4 : q & 0xf) * x->qs[32 * j + l];
		}
		sumi += blk->sc[j][r] * dot;
		summ += blk->mn[j / 2][r][j % 2] * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
	}
	return x->d * fp16_to_f32(blk->d[r]) * (float)sumi -
	       x->d * fp16_to_f32(blk->dmin[r]) * (float)summ;
}

static void rows_q4k_scalar(const struct weight_matrix *w, const void *xq, size_t xq_bytes, int B,
                            float *y, size_t ldy, int r0, int r1)
{
	int nblk = w->cols / 256;
	const struct qpack_q4k_block *p = w->panels;
	for (int b = 0; b < B; b++) {
		const struct qdot_q8k_block *x =
		    (const void *)((const uint8_t *)xq + (size_t)b * xq_bytes);
		for (int r = r0; r < r1; r++) {
			const struct qpack_q4k_block *g = p + (size_t)(r / QPACK_ROWS) * nblk;
			float s = 0.0f;
			for (int k = 0; k < nblk; k++)
				s += q4k_block_dot(&g[k], r % QPACK_ROWS, &x[k]);
			y[(size_t)b * ldy + r] = s;
		}
	}
}

/* ------------------------------------------------------------- the table */

/* Block k of group g of w, packed into out (one group block). */
typedef void (*pack_block_fn)(const struct weight_matrix *w, int g, int k, void *out);

/* One packed type: its group block, packer, twin, and the ISA files'
 * kernels (isa(vnni) for the 512- and 256-bit builds). */
struct qpack_type {
	enum ggml_type type;
	int block_values;
	size_t group_block_bytes;
	pack_block_fn pack;
	qpack_rows_fn twin;
	/* The 512-bit kernels when not qpack_avx512_rows' (NULL) */
	qpack_rows_fn (*avx512)(enum ggml_type t, bool vnni);
	/* The AMX kernels and their emulation (NULL: none) */
	qpack_rows_fn (*amx)(enum ggml_type t), (*amx_emulated)(enum ggml_type t);
};

/* clang-format off */
static const struct qpack_type types[] = {
	{GGML_TYPE_Q4_K, 256, sizeof(struct qpack_q4k_block), pack_q4k, rows_q4k_scalar},
	/* two stored 32-value blocks per group block (qpack_impl.h) */
	{GGML_TYPE_Q8_0, 32 * QPACK_Q0_PAIR, sizeof(struct qpack_q8_0_block), qpack_q8_0_pack,
	 qpack_q8_0_rows_scalar, qpack_q0_avx512_rows, qpack_q0_amx_rows, qpack_q0_amx_emulated_rows},
	{GGML_TYPE_Q4_0, 32 * QPACK_Q0_PAIR, sizeof(struct qpack_q4_0_block), qpack_q4_0_pack,
	 qpack_q4_0_rows_scalar, qpack_q0_avx512_rows, qpack_q0_amx_rows, qpack_q0_amx_emulated_rows},
};
/* clang-format on */

static const struct qpack_type *type_of(enum ggml_type t)
{
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (types[i].type == t)
			return &types[i];
	return NULL;
}

bool qpack_supported(enum ggml_type t)
{
	return type_of(t) != NULL;
}

size_t qpack_group_block_bytes(enum ggml_type t)
{
	const struct qpack_type *qt = type_of(t);
	return qt ? qt->group_block_bytes : 0;
}

static int n_groups(const struct weight_matrix *w)
{
	return (w->rows + QPACK_ROWS - 1) / QPACK_ROWS;
}

size_t qpack_bytes(const struct weight_matrix *w)
{
	const struct qpack_type *qt = type_of(w->type);
	if (!qt || w->cols % qt->block_values)
		return 0;
	return (size_t)n_groups(w) * (size_t)(w->cols / qt->block_values) * qt->group_block_bytes;
}

size_t qpack_block_offset(const struct weight_matrix *w, int r, int k)
{
	const struct qpack_type *qt = type_of(w->type);
	size_t nblk = (size_t)(w->cols / qt->block_values);
	return ((size_t)(r / QPACK_ROWS) * nblk + (size_t)k) * qt->group_block_bytes;
}

void qpack_pack_groups(const struct weight_matrix *w, void *out, int g0, int g1)
{
	const struct qpack_type *qt = type_of(w->type);
	int nblk = w->cols / qt->block_values;
	for (int g = g0; g < g1; g++)
		for (int k = 0; k < nblk; k++)
			qt->pack(w, g, k,
			         (uint8_t *)out + ((size_t)g * nblk + k) * qt->group_block_bytes);
}

struct pack_job {
	const struct weight_matrix *w;
	void *out;
	int groups, parts;
};

static void pack_task(void *ctx, int task, int thread)
{
	(void)thread;
	const struct pack_job *j = ctx;
	int g0, g1;
	threadpool_split(j->groups, j->parts, task, 1, &g0, &g1);
	qpack_pack_groups(j->w, j->out, g0, g1);
}

void qpack_pack(struct threadpool *pool, const struct weight_matrix *w, void *out)
{
	if (!qpack_bytes(w))
		return;
	if (!pool) {
		qpack_pack_groups(w, out, 0, n_groups(w));
		return;
	}
	struct pack_job j = {.w = w, .out = out, .groups = n_groups(w),
	                     .parts = 4 * threadpool_size(pool)};
	threadpool_run(pool, j.parts, pack_task, &j);
}

qpack_rows_fn qpack_rows_get(enum ggml_type t, enum qdot_variant v)
{
	const struct qpack_type *qt = type_of(t);
	if (!qt || !qdot_variant_runs(v))
		return NULL;
	switch (v) {
	case QDOT_VARIANT_SCALAR:
		return qt->twin;
	case QDOT_VARIANT_AVX2:
	case QDOT_VARIANT_AVXVNNI:
		return qpack_avx2_rows(t, v == QDOT_VARIANT_AVXVNNI);
	case QDOT_VARIANT_AVX512BW:
	case QDOT_VARIANT_AVX512VNNI:
		return (qt->avx512 ? qt->avx512 : qpack_avx512_rows)(t, v == QDOT_VARIANT_AVX512VNNI);
	default:
		return NULL;
	}
}

qpack_rows_fn qpack_amx_rows_get(enum ggml_type t)
{
	const struct qpack_type *qt = type_of(t);
	return qt && qt->amx ? qt->amx(t) : NULL;
}

qpack_rows_fn qpack_amx_emulated_rows_get(enum ggml_type t)
{
	const struct qpack_type *qt = type_of(t);
	if (!qt || !qt->amx_emulated || !qdot_variant_runs(QDOT_VARIANT_AVX512VNNI))
		return NULL;
	return qt->amx_emulated(t);
}

enum qdot_variant qpack_variant_best(enum ggml_type t)
{
	for (int v = QDOT_VARIANT_COUNT - 1; v > QDOT_VARIANT_SCALAR; v--)
		if (qpack_rows_get(t, (enum qdot_variant)v))
			return (enum qdot_variant)v;
	return QDOT_VARIANT_SCALAR;
}
