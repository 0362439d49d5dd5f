/* Packed block weights: a copy of a block-quantized matrix (Q4_K, ...)
 * re-laid at load so that the integer kernels stream it without shuffles,
 * and the kernels that read it.  The copy lives in weight_matrix.panels
 * (backend_cpu.c makes it and gives the file's pages back), so the resident
 * set stays about the file's size.
 *
 * Layout, every type: rows in groups of QPACK_ROWS; a group's blocks (256
 * or 32 values of a row, as the stored type's) follow each other, each
 * holding that block of all QPACK_ROWS rows interleaved by the type's own
 * rule (qpack.c's table says where each type's rule lives).  Rows past the
 * end are zero.  Activations are the qdot formats (qdot_act_quantize), so a
 * packed matrix sees the same x as the stored one. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "engine/qdot.h"
#include "engine/threadpool.h"
#include "model/model.h"

/* Rows interleaved per group: one 32-bit lane of a 512-bit register per
 * row, so one broadcast of four activation bytes feeds all of them. */
#define QPACK_ROWS 16

/* True when the type has a packed layout (whatever this CPU runs). */
bool qpack_supported(enum ggml_type t);
/* Bytes of the packed copy of w (rows rounded up to QPACK_ROWS); 0 for a
 * type without one or cols not a multiple of its block. */
size_t qpack_bytes(const struct weight_matrix *w);
/* Values of a row in one group block (the stored block's, or two of
 * them for Q8_0, Q4_0 and MXFP4): cols must be a multiple to be packed; 0 for a
 * type without a packed layout. */
int qpack_block_values(enum ggml_type t);
/* Bytes of one group's block: QPACK_ROWS rows x one block of values. */
size_t qpack_group_block_bytes(enum ggml_type t);
/* Writes the packed copy of w into out (qpack_bytes(w), 64-byte aligned),
 * the groups split over the pool (may be NULL). */
void qpack_pack(struct threadpool *pool, const struct weight_matrix *w, void *out);
/* Packs only groups [g0, g1) of w into out (the whole copy's buffer). */
void qpack_pack_groups(const struct weight_matrix *w, void *out, int g0, int g1);

/* y(b, r) = w(r) . x(b) for r in [r0, r1), b < B, reading w->panels (the
 * packed copy) and xq = B activation vectors in the qdot format of w's
 * type (qdot_act_quantize), xq_bytes apart; y(b, r) at y[b * ldy + r].
 * Any r0 <= r1 <= w->rows; rows outside [r0, r1) are not written. */
typedef void (*qpack_rows_fn)(const struct weight_matrix *w, const void *xq, size_t xq_bytes, int B,
                              float *y, size_t ldy, int r0, int r1);
/* The kernel of type t under variant v (QDOT_VARIANT_SCALAR: the plain-C
 * twin), or NULL when there is none or v does not run on this CPU. */
qpack_rows_fn qpack_rows_get(enum ggml_type t, enum qdot_variant v);
/* The kernel of t on AMX int8 tiles, for batches (whole tiles of 16
 * vectors; the rest on the AVX-512 VNNI kernel), or NULL when t has none.
 * Run it only where cpu_has_amx_int8() (util/cpu.h). */
qpack_rows_fn qpack_amx_rows_get(enum ggml_type t);
/* The same code with the tile instructions done in plain C, for tests on
 * any CPU that runs the AVX-512 VNNI kernels (NULL elsewhere). */
qpack_rows_fn qpack_amx_emulated_rows_get(enum ggml_type t);
/* The best variant with a kernel for t on this CPU (SCALAR when no vector
 * one runs). */
enum qdot_variant qpack_variant_best(enum ggml_type t);
/* Row `row` of w as F32 into out (cols), read from the packed copy: each
 * block unpacked to its stored bytes and dequantized as matmul_row_to_f32
 * does, so the values are the same bits (a tied head's copy serves the
 * embedding lookups).  w->panels must hold the packed copy. */
void qpack_row_to_f32(const struct weight_matrix *w, int row, float *out);
/* Byte offset in the packed copy of the group block that holds row r's
 * block k (tests read the layout through it). */
size_t qpack_block_offset(const struct weight_matrix *w, int r, int k);
