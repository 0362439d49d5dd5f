/* Packed block weights (see qpack.h): the one table of packed types (group
 * block size, packer, plain-C twin, the ISA files' kernels), the packing
 * split over threads, and the twins.  A twin forms per block the same
 * integer sums as the vector kernels, so they differ only by float
 * summation order.  It does not choose when to pack (backend_cpu.c) or
 * which family runs (matmul.c). */
#include "engine/qpack.h"
#include "engine/qdot_impl.h"
#include "engine/qpack_impl.h"

#include "model/dequant.h"
#include "model/gguf.h"
#include "util/half.h"

#include <string.h>

/* ------------------------------------------------------------------ Q4_K */

/* The scales of one stored Q4_K/Q5_K block (d, dmin, 12 bytes) into row r. */
static void pack_k4_scales(const uint8_t *src, int r, struct qpack_k4_scales *out)
{
	memcpy(&out->d[r], src, 2);
	memcpy(&out->dmin[r], src + 2, 2);
	for (int j = 0; j < 8; j++) {
		int sc, mn;
		qdot_scale_min_k4(j, src + 4, &sc, &mn);
		out->sc[j][r] = (uint8_t)sc;
		out->mn[j / 2][r][j % 2] = (uint8_t)mn;
	}
}

/* The 128 code bytes of a stored Q4_K/Q5_K block into row r of the lines. */
static void pack_k4_codes(const uint8_t *qs, int r, uint8_t out[4][8][QPACK_ROWS][4])
{
	for (int m = 0; m < 4; m++)
		for (int c = 0; c < 8; c++)
			memcpy(out[m][c][r], qs + 32 * m + 4 * c, 4);
}

/* Row r of group g, block k, as stored. */
static const uint8_t *stored_block(const struct weight_matrix *w, int g, int r, int k, size_t bytes)
{
	return (const uint8_t *)w->data + (size_t)(g * QPACK_ROWS + r) * w->row_bytes +
	       (size_t)k * bytes;
}

/* Block k of group g of a Q4_K (qh NULL) or Q5_K matrix into a group
 * block's scales s and lines qh, qs; rows past the end stay as they are. */
static void pack_k4(const struct weight_matrix *w, int g, int k, struct qpack_k4_scales *s,
                    uint8_t (*qh)[QPACK_ROWS][4], uint8_t qs[4][8][QPACK_ROWS][4])
{
	size_t bytes = qh ? QDOT_Q5_K_BYTES : QDOT_Q4_K_BYTES;
	for (int r = 0; r < QPACK_ROWS && g * QPACK_ROWS + r < w->rows; r++) {
		const uint8_t *src = stored_block(w, g, r, k, bytes);
		pack_k4_scales(src, r, s);
		for (int c = 0; qh && c < 8; c++)
			memcpy(qh[c][r], src + 16 + 4 * c, 4);
		pack_k4_codes(src + (qh ? 48 : 16), r, qs);
	}
}

/* Block k of group g of w into out; rows past the end are zero. */
static void pack_q4k(const struct weight_matrix *w, int g, int k, void *out)
{
	struct qpack_q4k_block *blk = out;
	memset(blk, 0, sizeof(*blk));
	pack_k4(w, g, k, &blk->s, NULL, blk->qs);
}

static void pack_q5k(const struct weight_matrix *w, int g, int k, void *out)
{
	struct qpack_q5k_block *blk = out;
	memset(blk, 0, sizeof(*blk));
	pack_k4(w, g, k, &blk->s, blk->qh, blk->qs);
}

/* Row r's scales back into a stored block's d, dmin and 12 scale bytes:
 * the 6-bit values as qdot_scale_min_k4 reads them (every bit is used, so
 * the bytes are the file's). */
static void unpack_k4_scales(const struct qpack_k4_scales *s, int r, uint8_t *dst)
{
	uint8_t *q = dst + 4;
	memcpy(dst, &s->d[r], 2);
	memcpy(dst + 2, &s->dmin[r], 2);
	memset(q, 0, 12);
	for (int j = 0; j < 8; j++) {
		int sc = s->sc[j][r], mn = s->mn[j / 2][r][j % 2];
		if (j < 4) {
			q[j] |= (uint8_t)sc;
			q[j + 4] |= (uint8_t)mn;
		} else {
			q[j + 4] = (uint8_t)((sc & 0xf) | (mn & 0xf) << 4);
			q[j - 4] |= (uint8_t)((sc >> 4) << 6);
			q[j] |= (uint8_t)((mn >> 4) << 6);
		}
	}
}

/* Row r of a Q4_K (qh NULL) or Q5_K group block back into the stored
 * block dst (the inverse of pack_k4). */
static void unpack_k4(const struct qpack_k4_scales *s, const uint8_t (*qh)[QPACK_ROWS][4],
                      const uint8_t qs[4][8][QPACK_ROWS][4], int r, uint8_t *dst)
{
	unpack_k4_scales(s, r, dst);
	for (int c = 0; qh && c < 8; c++)
		memcpy(dst + 16 + 4 * c, qh[c][r], 4);
	uint8_t *codes = dst + (qh ? 48 : 16);
	for (int m = 0; m < 4; m++)
		for (int c = 0; c < 8; c++)
			memcpy(codes + 32 * m + 4 * c, qs[m][c][r], 4);
}

static void unpack_q4k(const void *gblock, int r, uint8_t *dst)
{
	const struct qpack_q4k_block *blk = gblock;
	unpack_k4(&blk->s, NULL, blk->qs, r, dst);
}

static void unpack_q5k(const void *gblock, int r, uint8_t *dst)
{
	const struct qpack_q5k_block *blk = gblock;
	unpack_k4(&blk->s, blk->qh, blk->qs, r, dst);
}

/* Row r (< QPACK_ROWS) of a Q4_K (qh NULL) or Q5_K group block times one
 * activation block. */
static float k4_block_dot(const struct qpack_k4_scales *s, const uint8_t qs[4][8][QPACK_ROWS][4],
                          const uint8_t (*qh)[QPACK_ROWS][4], int r, const struct qdot_q8k_block *x)
{
	int32_t sumi = 0, summ = 0;
	for (int j = 0; j < 8; j++) {
		int32_t dot = 0;
		for (int l = 0; l < 32; l++) {
			uint8_t q = qs[j / 2][l / 4][r][l % 4];
			int v = j % 2 ? q >> 4 : q & 0xf;
			if (qh)
				v |= ((qh[l / 4][r][l % 4] >> j) & 1) << 4;
			dot += v * x->qs[32 * j + l];
		}
		sumi += s->sc[j][r] * dot;
		summ += s->mn[j / 2][r][j % 2] * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
	}
	return x->d * fp16_to_f32(s->d[r]) * (float)sumi -
	       x->d * fp16_to_f32(s->dmin[r]) * (float)summ;
}

/* ------------------------------------------------------------------ Q6_K */

/* Value e (0..255) of a stored Q6_K block, 0..63 (stored value + 32). */
static int q6k_stored_value(const uint8_t *w, int e)
{
	int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
	const uint8_t *ql = w + 64 * h + (quarter & 1) * 32, *qh = w + 128 + 32 * h;
	int lo = quarter < 2 ? ql[l] & 0xf : ql[l] >> 4;
	return lo | (((qh[l] >> (2 * quarter)) & 3) << 4);
}

/* Block k of group g of w into out; rows past the end stay zero. */
static void pack_q6k(const struct weight_matrix *w, int g, int k, void *out)
{
	struct qpack_q6k_block *blk = out;
	memset(blk, 0, sizeof(*blk));
	for (int r = 0; r < QPACK_ROWS && g * QPACK_ROWS + r < w->rows; r++) {
		const uint8_t *src = stored_block(w, g, r, k, QDOT_Q6_K_BYTES);
		for (int e = 0; e < 256; e++) {
			int v = q6k_stored_value(src, e), j2 = e / 32, l = e % 32;
			blk->qs[j2 / 2][l / 4][r][l % 4] |= (uint8_t)((v & 15) << (4 * (j2 % 2)));
			blk->qh[j2 / 4][l / 4][r][l % 4] |= (uint8_t)((v >> 4) << (2 * (j2 % 4)));
		}
		for (int i = 0; i < 16; i++)
			blk->sc[i][r] = (int8_t)src[192 + i];
		memcpy(&blk->d[r], src + 208, 2);
	}
}

/* Row r of a group block back into the stored block dst (the inverse of
 * pack_q6k: value e's bits where q6k_stored_value reads them). */
static void unpack_q6k(const void *gblock, int r, uint8_t *dst)
{
	const struct qpack_q6k_block *blk = gblock;
	memset(dst, 0, QDOT_Q6_K_BYTES);
	for (int e = 0; e < 256; e++) {
		int j2 = e / 32, l = e % 32, h = e / 128, quarter = (e % 128) / 32;
		int lo = (blk->qs[j2 / 2][l / 4][r][l % 4] >> (4 * (j2 % 2))) & 15;
		int hi = (blk->qh[j2 / 4][l / 4][r][l % 4] >> (2 * (j2 % 4))) & 3;
		dst[64 * h + (quarter & 1) * 32 + l] |= (uint8_t)(lo << (quarter < 2 ? 0 : 4));
		dst[128 + 32 * h + l] |= (uint8_t)(hi << (2 * quarter));
	}
	for (int i = 0; i < 16; i++)
		dst[192 + i] = (uint8_t)blk->sc[i][r];
	memcpy(dst + 208, &blk->d[r], 2);
}

/* Row r of a group block times one activation block: per 16-value group
 * the dot of the 0..63 values less 32 times the group's sum of x (the
 * stored values' offset), times its scale. */
static float q6k_block_dot(const struct qpack_q6k_block *blk, int r, const struct qdot_q8k_block *x)
{
	int32_t sumi = 0;
	for (int gi = 0; gi < 16; gi++) {
		int32_t dot = -32 * x->bsums[gi];
		for (int e = 16 * gi; e < 16 * gi + 16; e++) {
			int j2 = e / 32, l = e % 32;
			int lo = (blk->qs[j2 / 2][l / 4][r][l % 4] >> (4 * (j2 % 2))) & 15;
			int hi = (blk->qh[j2 / 4][l / 4][r][l % 4] >> (2 * (j2 % 4))) & 3;
			dot += (lo | hi << 4) * x->qs[e];
		}
		sumi += blk->sc[gi][r] * dot;
	}
	return x->d * fp16_to_f32(blk->d[r]) * (float)sumi;
}

/* ------------------------------------------------------------- the twins */

typedef float (*block_dot_fn)(const void *blk, int r, const void *x);

/* y over [r0, r1) and B vectors, a group block and an activation block at
 * a time: the twins of every K-quant differ only in their block dot. */
static void rows_k_scalar(const struct weight_matrix *w, size_t gb_bytes, block_dot_fn dot,
                          const void *xq, size_t xq_bytes, int B, float *y, size_t ldy, int r0,
                          int r1)
{
	int nblk = w->cols / 256;
	for (int b = 0; b < B; b++) {
		const struct qdot_q8k_block *x =
		    (const void *)((const uint8_t *)xq + (size_t)b * xq_bytes);
		for (int r = r0; r < r1; r++) {
			const uint8_t *g =
			    (const uint8_t *)w->panels + (size_t)(r / QPACK_ROWS) * nblk * gb_bytes;
			float s = 0.0f;
			for (int k = 0; k < nblk; k++)
				s += dot(g + (size_t)k * gb_bytes, r % QPACK_ROWS, &x[k]);
			y[(size_t)b * ldy + r] = s;
		}
	}
}

static float q4k_dot(const void *blk, int r, const void *x)
{
	const struct qpack_q4k_block *p = blk;
	return k4_block_dot(&p->s, p->qs, NULL, r, x);
}

static float q5k_dot(const void *blk, int r, const void *x)
{
	const struct qpack_q5k_block *p = blk;
	return k4_block_dot(&p->s, p->qs, p->qh, r, x);
}

static float q6k_dot(const void *blk, int r, const void *x)
{
	return q6k_block_dot(blk, r, x);
}

static void rows_q4k_scalar(const struct weight_matrix *w, const void *xq, size_t xq_bytes, int B,
                            float *y, size_t ldy, int r0, int r1)
{
	rows_k_scalar(w, sizeof(struct qpack_q4k_block), q4k_dot, xq, xq_bytes, B, y, ldy, r0, r1);
}

static void rows_q5k_scalar(const struct weight_matrix *w, const void *xq, size_t xq_bytes, int B,
                            float *y, size_t ldy, int r0, int r1)
{
	rows_k_scalar(w, sizeof(struct qpack_q5k_block), q5k_dot, xq, xq_bytes, B, y, ldy, r0, r1);
}

static void rows_q6k_scalar(const struct weight_matrix *w, const void *xq, size_t xq_bytes, int B,
                            float *y, size_t ldy, int r0, int r1)
{
	rows_k_scalar(w, sizeof(struct qpack_q6k_block), q6k_dot, xq, xq_bytes, B, y, ldy, r0, r1);
}

/* ------------------------------------------------------------- the table */

/* Block k of group g of w, packed into out (one group block). */
typedef void (*pack_block_fn)(const struct weight_matrix *w, int g, int k, void *out);
/* Row r (< QPACK_ROWS) of one group block back into the stored block(s)
 * dst (the file's bytes of those block_values of the row). */
typedef void (*unpack_block_fn)(const void *gblock, int r, uint8_t *dst);

/* One packed type: its group block, packer, twin, and the ISA files'
 * kernels (isa(vnni) for the 512- and 256-bit builds). */
struct qpack_type {
	enum ggml_type type;
	int block_values;
	size_t group_block_bytes;
	pack_block_fn pack;
	unpack_block_fn unpack;
	qpack_rows_fn twin;
	/* The 512- and 256-bit kernels when not qpack_avx512_rows' and
	 * qpack_avx2_rows' (NULL) */
	qpack_rows_fn (*avx512)(enum ggml_type t, bool vnni), (*avx2)(enum ggml_type t, bool vnni);
	/* The AMX kernels and their emulation (NULL: none) */
	qpack_rows_fn (*amx)(enum ggml_type t), (*amx_emulated)(enum ggml_type t);
};

/* clang-format off */
static const struct qpack_type types[] = {
	{GGML_TYPE_Q4_K, 256, sizeof(struct qpack_q4k_block), pack_q4k, unpack_q4k, rows_q4k_scalar},
	{GGML_TYPE_Q5_K, 256, sizeof(struct qpack_q5k_block), pack_q5k, unpack_q5k, rows_q5k_scalar},
	{GGML_TYPE_Q6_K, 256, sizeof(struct qpack_q6k_block), pack_q6k, unpack_q6k, rows_q6k_scalar},
	/* two stored 32-value blocks per group block (qpack_impl.h) */
	{GGML_TYPE_Q8_0, 32 * QPACK_Q0_PAIR, sizeof(struct qpack_q8_0_block), qpack_q8_0_pack,
	 qpack_q8_0_unpack, qpack_q8_0_rows_scalar, qpack_q0_avx512_rows, qpack_q0_avx2_rows,
	 qpack_q0_amx_rows, qpack_q0_amx_emulated_rows},
	{GGML_TYPE_Q4_0, 32 * QPACK_Q0_PAIR, sizeof(struct qpack_q4_0_block), qpack_q4_0_pack,
	 qpack_q4_0_unpack, qpack_q4_0_rows_scalar, qpack_q0_avx512_rows, qpack_q0_avx2_rows,
	 qpack_q0_amx_rows, qpack_q0_amx_emulated_rows},
	{GGML_TYPE_MXFP4, 32 * QPACK_Q0_PAIR, sizeof(struct qpack_mxfp4_block), qpack_mxfp4_pack,
	 qpack_mxfp4_unpack, qpack_mxfp4_rows_scalar, qpack_q0_avx512_rows, qpack_q0_avx2_rows},
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

int qpack_block_values(enum ggml_type t)
{
	const struct qpack_type *qt = type_of(t);
	return qt ? qt->block_values : 0;
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

/* Most stored bytes one group block holds of a row (Q6_K's 210; Q8_0's
 * pair of blocks, 68). */
#define STORED_BLOCK_MAX 256
_Static_assert(QDOT_Q6_K_BYTES <= STORED_BLOCK_MAX &&
                   QPACK_Q0_PAIR * QDOT_Q8_0_BYTES <= STORED_BLOCK_MAX,
               "a row's stored blocks of one group block fit the unpack buffer");

void qpack_row_to_f32(const struct weight_matrix *w, int row, float *out)
{
	const struct qpack_type *qt = type_of(w->type);
	int nblk = w->cols / qt->block_values;
	uint8_t stored[STORED_BLOCK_MAX];
	for (int k = 0; k < nblk; k++) {
		qt->unpack((const uint8_t *)w->panels + qpack_block_offset(w, row, k),
		           row % QPACK_ROWS, stored);
		dequantize_row(w->type, stored, out + (size_t)k * qt->block_values,
		               (uint64_t)qt->block_values);
	}
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
	struct pack_job j = {
	    .w = w, .out = out, .groups = n_groups(w), .parts = 4 * threadpool_size(pool)};
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
		return (qt->avx2 ? qt->avx2 : qpack_avx2_rows)(t, v == QDOT_VARIANT_AVXVNNI);
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
