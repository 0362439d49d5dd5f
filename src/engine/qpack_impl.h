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

/* The kernels of the ISA files for type t (vnni: the VNNI build); NULL off
 * x86 or for a type they do not have. */
qpack_rows_fn qpack_avx512_rows(enum ggml_type t, bool vnni);
qpack_rows_fn qpack_avx2_rows(enum ggml_type t, bool vnni);

/* ---------------------------------------- Q8_0, Q4_0 and MXFP4 (qpack_q0*.c)
 * A group block holds two stored blocks (64 values) of QPACK_ROWS rows, so
 * that it is whole 64-byte lines with the fp16 scales kept as stored: the
 * copy is exactly the file's bytes, rearranged.  Within it, step s (values
 * 4s .. 4s+3 of a 32-value block) of all rows is one 64-byte line, row r
 * in 32-bit lane r: one broadcast of four activation bytes feeds every row.
 * The codes are unsigned, the instructions' unsigned operand: Q8_0 stores
 * q + 128, Q4_0 its nibbles (value - 8 as stored).  Both are undone per
 * block with the activation block's sum: sum (q + o) x = sum q x + o sum x. */

/* Stored 32-value blocks per group block. */
#define QPACK_Q0_PAIR 2

/* Q8_0: code + 128 of value 4 s + t of block h of row r at qs[h][s][r][t]. */
struct qpack_q8_0_block {
	uint16_t d[QPACK_Q0_PAIR][QPACK_ROWS]; /* fp16 scale of block h of row r */
	uint8_t qs[QPACK_Q0_PAIR][8][QPACK_ROWS][4];
};
_Static_assert(sizeof(struct qpack_q8_0_block) % 64 == 0, "Q8_0 group block is whole lines");

/* Q4_0: the stored byte 4 j + t of block h of row r at qs[h][j][r][t]: its
 * low nibble is value 4 j + t (step j), its high nibble value 16 + 4 j + t
 * (step j + 4), each value - 8 as stored. */
struct qpack_q4_0_block {
	uint16_t d[QPACK_Q0_PAIR][QPACK_ROWS];
	uint8_t qs[QPACK_Q0_PAIR][4][QPACK_ROWS][4];
};
_Static_assert(sizeof(struct qpack_q4_0_block) % 64 == 0, "Q4_0 group block is whole lines");

/* MXFP4: Q4_0's lines (each stored code byte where Q4_0's lies, its
 * nibbles codes into mxfp4_kvalues), the E8M0 scale bytes as stored in
 * place of the fp16 ones, padded to a whole line.  The kernels look the
 * nibbles up as QDOT_MXFP4_KVALUES_U (unsigned, offset 12) by a byte
 * shuffle and take the offset off with x's block sum, as qdot's do. */
struct qpack_mxfp4_block {
	uint8_t d[QPACK_Q0_PAIR][QPACK_ROWS]; /* E8M0 scale of block h of row r */
	uint8_t pad[64 - QPACK_Q0_PAIR * QPACK_ROWS];
	uint8_t qs[QPACK_Q0_PAIR][4][QPACK_ROWS][4];
};
_Static_assert(sizeof(struct qpack_mxfp4_block) % 64 == 0, "MXFP4 group block is whole lines");

/* Block k (values 64 k .. 64 k + 63) of group g of w, packed into out (one
 * group block); rows past the end are zero. */
void qpack_q8_0_pack(const struct weight_matrix *w, int g, int k, void *out);
void qpack_q4_0_pack(const struct weight_matrix *w, int g, int k, void *out);
void qpack_mxfp4_pack(const struct weight_matrix *w, int g, int k, void *out);
/* Row r of a group block back into its QPACK_Q0_PAIR stored blocks at dst
 * (the file's bytes: qpack_row_to_f32 dequantizes them). */
void qpack_q8_0_unpack(const void *gblock, int r, uint8_t *dst);
void qpack_q4_0_unpack(const void *gblock, int r, uint8_t *dst);
void qpack_mxfp4_unpack(const void *gblock, int r, uint8_t *dst);
/* The plain-C twins (qpack_rows_fn). */
void qpack_q8_0_rows_scalar(const struct weight_matrix *w, const void *xq, size_t xq_bytes, int B,
                            float *y, size_t ldy, int r0, int r1);
void qpack_q4_0_rows_scalar(const struct weight_matrix *w, const void *xq, size_t xq_bytes, int B,
                            float *y, size_t ldy, int r0, int r1);
void qpack_mxfp4_rows_scalar(const struct weight_matrix *w, const void *xq, size_t xq_bytes,
                             int B, float *y, size_t ldy, int r0, int r1);

/* The x86 kernels of Q8_0, Q4_0 and MXFP4 (qpack_q0_x86.c; vnni: the VNNI build;
 * NULL off x86 or for another type). */
qpack_rows_fn qpack_q0_avx512_rows(enum ggml_type t, bool vnni);
qpack_rows_fn qpack_q0_avx2_rows(enum ggml_type t, bool vnni);

/* The AMX kernels of Q8_0 and Q4_0 (qpack_q0_amx.c): whole tiles of 16
 * vectors on AMX int8 tiles, the rest through the AVX-512 VNNI kernel.
 * Run them only where cpu_has_amx_int8() (util/cpu.h); NULL off x86 or for
 * another type.  The emulated ones are the same code with the tile
 * instructions done in plain C: they run on any AVX-512 VNNI CPU, for
 * tests of the addressing and scaling. */
qpack_rows_fn qpack_q0_amx_rows(enum ggml_type t);
qpack_rows_fn qpack_q0_amx_emulated_rows(enum ggml_type t);
