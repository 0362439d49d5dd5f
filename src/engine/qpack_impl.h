/* Private to qpack.c and its ISA files: the packed block layouts and the
 * kernel getters each ISA file hands to qpack.c's table. */
#pragma once

#include <stdint.h>

#include "engine/qpack.h"

/* The scales of a Q4_K or Q5_K group block: block k of QPACK_ROWS rows. */
struct qpack_k4_scales {
	uint16_t d[QPACK_ROWS];       /* fp16 scale of the row's block */
	uint16_t dmin[QPACK_ROWS];    /* fp16 scale of its mins */
	uint8_t sc[8][QPACK_ROWS];    /* 6-bit scale of sub-block j, row r */
	uint8_t mn[4][QPACK_ROWS][2]; /* 6-bit mins of sub-blocks 2t, 2t+1, row r */
};

/* Q4_K, one group block.  Value l of sub-block j of row r (as ggml numbers
 * them) is a nibble of qs[j / 2][l / 4][r][l % 4], the low one for even j,
 * the high one for odd: each 64-byte line is 4 values of two sub-blocks
 * for all 16 rows, one 32-bit lane per row, so a broadcast of 4 activation
 * bytes feeds it. */
struct qpack_q4k_block {
	struct qpack_k4_scales s;
	uint8_t qs[4][8][QPACK_ROWS][4];
};
_Static_assert(sizeof(struct qpack_q4k_block) % 64 == 0, "Q4_K group block is whole lines");

/* Q5_K, one group block: Q4_K's, and the fifth bit of value l of sub-block
 * j at bit j of qh[l / 4][r][l % 4] (the stored qh bytes, laid out as the
 * lines of qs). */
struct qpack_q5k_block {
	struct qpack_k4_scales s;
	uint8_t qh[8][QPACK_ROWS][4];
	uint8_t qs[4][8][QPACK_ROWS][4];
};
_Static_assert(sizeof(struct qpack_q5k_block) % 64 == 0, "Q5_K group block is whole lines");

/* Q6_K, one group block.  Values are numbered as in 32-value sub-blocks
 * j2 = e / 32 (the scales cover 16 values: g = e / 16); the low 4 bits of
 * value l of sub-block j2 lie as Q4_K's nibbles (qs[j2 / 2][l / 4][r][l %
 * 4], low for even j2), the high 2 at bits 2 (j2 % 4) of qh[j2 / 4][l /
 * 4][r][l % 4].  Fields ordered so that every line is 64-byte aligned. */
struct qpack_q6k_block {
	uint8_t qs[4][8][QPACK_ROWS][4];
	uint8_t qh[2][8][QPACK_ROWS][4];
	int8_t sc[16][QPACK_ROWS]; /* 8-bit scale of 16-value group g, row r */
	uint16_t d[QPACK_ROWS];    /* fp16 scale of the row's block */
	uint8_t pad[32];
};
_Static_assert(sizeof(struct qpack_q6k_block) % 64 == 0, "Q6_K group block is whole lines");

/* Activation vectors a kernel runs over all its rows per pass, a multiple
 * of tile: as many as keep about half of L2 (xq_bytes each). */
int qpack_vecs_per_pass(size_t xq_bytes, int tile);

/* The kernels of the ISA files for type t (vnni: the VNNI build); NULL off
 * x86 or for a type they do not have. */
qpack_rows_fn qpack_avx512_rows(enum ggml_type t, bool vnni);
qpack_rows_fn qpack_avx2_rows(enum ggml_type t, bool vnni);
