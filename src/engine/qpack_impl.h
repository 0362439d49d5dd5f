/* Private to qpack.c and its ISA files: the packed block layouts and the
 * kernel getters each ISA file hands to qpack.c's table. */
#pragma once

#include <stdint.h>

#include "engine/qpack.h"

/* Q4_K, one group block: block k of QPACK_ROWS rows.  Value l of sub-block
 * j of row r (as ggml numbers them) is a nibble of
 * qs[j / 2][l / 4][r][l % 4], the low one for even j, the high one for odd:
 * each 64-byte line is 4 values of two sub-blocks for all 16 rows, one
 * 32-bit lane per row, so a broadcast of 4 activation bytes feeds it. */
struct qpack_q4k_block {
	uint16_t d[QPACK_ROWS];    /* fp16 scale of the row's block */
	uint16_t dmin[QPACK_ROWS]; /* fp16 scale of its mins */
	uint8_t sc[8][QPACK_ROWS]; /* 6-bit scale of sub-block j, row r */
	uint8_t mn[4][QPACK_ROWS][2]; /* 6-bit mins of sub-blocks 2t, 2t+1, row r */
	uint8_t qs[4][8][QPACK_ROWS][4];
};
_Static_assert(sizeof(struct qpack_q4k_block) % 64 == 0, "Q4_K group block is whole lines");

/* The kernels of the ISA files for type t (vnni: the VNNI build); NULL off
 * x86 or for a type they do not have. */
qpack_rows_fn qpack_avx512_rows(enum ggml_type t, bool vnni);
qpack_rows_fn qpack_avx2_rows(enum ggml_type t, bool vnni);
