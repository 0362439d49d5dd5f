/* Q8_0, Q4_0 and MXFP4 packed (layout: qpack_impl.h): the packers and the
 * plain-C twins.  The twin forms per stored block the integer sum of the unsigned
 * codes times x less the offset times x's block sum, which is the stored
 * layout's integer sum exactly, and scales it as qdot.c's twin does, so the
 * two twins agree to the bit.  The ISA files form the same integers. */
#include "engine/qdot_impl.h"
#include "engine/qpack_impl.h"

#include "util/half.h"

#include <string.h>

/* Writes the codes of one stored block (codes: past its scale) as row r
 * of block h of a group block. */
typedef void (*put_codes_fn)(const uint8_t *codes, int h, int r, void *out);

static void put_q8_0(const uint8_t *codes, int h, int r, void *out)
{
	struct qpack_q8_0_block *p = out;
	for (int i = 0; i < 32; i++)
		p->qs[h][i / 4][r][i % 4] = (uint8_t)(codes[i] ^ 0x80);
}

/* The 16 code bytes of a Q4_0 or MXFP4 block as row r of block h of the
 * nibble lines qs (the same lines in both). */
static void put_nibbles(const uint8_t *codes, int h, int r, uint8_t qs[][4][QPACK_ROWS][4])
{
	for (int j = 0; j < 4; j++)
		memcpy(qs[h][j][r], codes + 4 * j, 4);
}

static void put_q4_0(const uint8_t *codes, int h, int r, void *out)
{
	put_nibbles(codes, h, r, ((struct qpack_q4_0_block *)out)->qs);
}

static void put_mxfp4(const uint8_t *codes, int h, int r, void *out)
{
	put_nibbles(codes, h, r, ((struct qpack_mxfp4_block *)out)->qs);
}

/* Block k of group g of w (stored blocks of block_bytes, a scale of
 * scale_bytes first) into out, a group block of out_bytes whose first
 * member is the scales d[h][r], scale_bytes each. */
static void pack_pair(const struct weight_matrix *w, int g, int k, void *out, size_t out_bytes,
                      size_t block_bytes, size_t scale_bytes, put_codes_fn put)
{
	uint8_t *d = out;
	memset(out, 0, out_bytes);
	for (int h = 0; h < QPACK_Q0_PAIR; h++)
		for (int r = 0; r < QPACK_ROWS && g * QPACK_ROWS + r < w->rows; r++) {
			const uint8_t *src = (const uint8_t *)w->data +
			                     (size_t)(g * QPACK_ROWS + r) * w->row_bytes +
			                     (size_t)(QPACK_Q0_PAIR * k + h) * block_bytes;
			memcpy(d + (size_t)(h * QPACK_ROWS + r) * scale_bytes, src, scale_bytes);
			put(src + scale_bytes, h, r, out);
		}
}

void qpack_q8_0_pack(const struct weight_matrix *w, int g, int k, void *out)
{
	pack_pair(w, g, k, out, sizeof(struct qpack_q8_0_block), QDOT_Q8_0_BYTES, 2, put_q8_0);
}

void qpack_q4_0_pack(const struct weight_matrix *w, int g, int k, void *out)
{
	pack_pair(w, g, k, out, sizeof(struct qpack_q4_0_block), QDOT_Q4_0_BYTES, 2, put_q4_0);
}

void qpack_mxfp4_pack(const struct weight_matrix *w, int g, int k, void *out)
{
	pack_pair(w, g, k, out, sizeof(struct qpack_mxfp4_block), QDOT_MXFP4_BYTES, 1, put_mxfp4);
}

/* Writes row r of block h of a group block as the codes of one stored
 * block (the inverse of a put_codes_fn). */
typedef void (*get_codes_fn)(const void *gblock, int h, int r, uint8_t *codes);

static void get_q8_0(const void *gblock, int h, int r, uint8_t *codes)
{
	const struct qpack_q8_0_block *p = gblock;
	for (int i = 0; i < 32; i++)
		codes[i] = (uint8_t)(p->qs[h][i / 4][r][i % 4] ^ 0x80);
}

/* Row r of block h of the nibble lines qs as 16 code bytes (the inverse
 * of put_nibbles). */
static void get_nibbles(const uint8_t qs[][4][QPACK_ROWS][4], int h, int r, uint8_t *codes)
{
	for (int j = 0; j < 4; j++)
		memcpy(codes + 4 * j, qs[h][j][r], 4);
}

static void get_q4_0(const void *gblock, int h, int r, uint8_t *codes)
{
	get_nibbles(((const struct qpack_q4_0_block *)gblock)->qs, h, r, codes);
}

static void get_mxfp4(const void *gblock, int h, int r, uint8_t *codes)
{
	get_nibbles(((const struct qpack_mxfp4_block *)gblock)->qs, h, r, codes);
}

/* Row r of a group block into its stored blocks (block_bytes each, a
 * scale of scale_bytes first) at dst: the inverse of pack_pair. */
static void unpack_pair(const void *gblock, int r, uint8_t *dst, size_t block_bytes,
                        size_t scale_bytes, get_codes_fn get)
{
	const uint8_t *d = gblock;
	for (int h = 0; h < QPACK_Q0_PAIR; h++) {
		memcpy(dst + (size_t)h * block_bytes, d + (size_t)(h * QPACK_ROWS + r) * scale_bytes,
		       scale_bytes);
		get(gblock, h, r, dst + (size_t)h * block_bytes + scale_bytes);
	}
}

void qpack_q8_0_unpack(const void *gblock, int r, uint8_t *dst)
{
	unpack_pair(gblock, r, dst, QDOT_Q8_0_BYTES, 2, get_q8_0);
}

void qpack_q4_0_unpack(const void *gblock, int r, uint8_t *dst)
{
	unpack_pair(gblock, r, dst, QDOT_Q4_0_BYTES, 2, get_q4_0);
}

void qpack_mxfp4_unpack(const void *gblock, int r, uint8_t *dst)
{
	unpack_pair(gblock, r, dst, QDOT_MXFP4_BYTES, 1, get_mxfp4);
}

/* Row r (< QPACK_ROWS) of block h of a group block times activation block
 * x: the integer sum of codes times x, less offset times x's sum. */
static int32_t q8_0_dot(const struct qpack_q8_0_block *p, int h, int r,
                        const struct qdot_q8_block *x)
{
	int32_t s = 0;
	for (int i = 0; i < 32; i++)
		s += (int32_t)p->qs[h][i / 4][r][i % 4] * x->qs[i];
	return s - 128 * x->sum;
}

static int32_t q4_0_dot(const struct qpack_q4_0_block *p, int h, int r,
                        const struct qdot_q8_block *x)
{
	int32_t s = 0;
	for (int i = 0; i < 16; i++) {
		uint8_t q = p->qs[h][i / 4][r][i % 4];
		s += (q & 0xf) * x->qs[i] + (q >> 4) * x->qs[i + 16];
	}
	return s - 8 * x->sum;
}

/* MXFP4: the nibbles looked up as unsigned codes (kvalues + 12), less 12
 * times x's sum: sum kvalues x exactly, as qdot.c's twin forms it. */
static int32_t mxfp4_dot(const struct qpack_mxfp4_block *p, int h, int r,
                         const struct qdot_q8_block *x)
{
	static const uint8_t ku[16] = {QDOT_MXFP4_KVALUES_U};
	int32_t s = 0;
	for (int i = 0; i < 16; i++) {
		uint8_t q = p->qs[h][i / 4][r][i % 4];
		s += ku[q & 0xf] * x->qs[i] + ku[q >> 4] * x->qs[i + 16];
	}
	return s - QDOT_MXFP4_OFFSET * x->sum;
}

/* The twins: blocks in order, each (d_w * d_x) * integer sum as qdot.c's
 * (SCALE: the stored scale as a float). */
#define DEFINE_Q0_TWIN(T, BLOCK, DOT, SCALE)                                                              \
	void qpack_##T##_rows_scalar(const struct weight_matrix *w, const void *xq,                \
	                             size_t xq_bytes, int B, float *y, size_t ldy, int r0, int r1) \
	{                                                                                          \
		int npair = w->cols / (32 * QPACK_Q0_PAIR);                                        \
		const struct BLOCK *p = w->panels;                                                 \
		for (int b = 0; b < B; b++) {                                                      \
			const struct qdot_q8_block *x =                                            \
			    (const void *)((const uint8_t *)xq + (size_t)b * xq_bytes);            \
			for (int r = r0; r < r1; r++) {                                            \
				const struct BLOCK *g = p + (size_t)(r / QPACK_ROWS) * npair;      \
				int lane = r % QPACK_ROWS;                                         \
				float s = 0.0f;                                                    \
				for (int k = 0; k < npair * QPACK_Q0_PAIR; k++) {                  \
					const struct BLOCK *gb = &g[k / QPACK_Q0_PAIR];            \
					int h = k % QPACK_Q0_PAIR;                                 \
					s += SCALE(gb->d[h][lane]) * x[k].d *                      \
					     (float)DOT(gb, h, lane, &x[k]);                       \
				}                                                                  \
				y[(size_t)b * ldy + r] = s;                                        \
			}                                                                          \
		}                                                                                  \
	}

DEFINE_Q0_TWIN(q8_0, qpack_q8_0_block, q8_0_dot, fp16_to_f32)
DEFINE_Q0_TWIN(q4_0, qpack_q4_0_block, q4_0_dot, fp16_to_f32)
DEFINE_Q0_TWIN(mxfp4, qpack_mxfp4_block, mxfp4_dot, mxfp4_scale)
