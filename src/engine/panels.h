/* Weight panels: a copy of a weight matrix re-laid for the AVX-512 kernels,
 * and the kernels that read it.
 *
 * Layout: rows in groups of 16; inside a group, column-major: element (r, k)
 * at group r / 16, offset k * 16 + r % 16, in the stored type (F32, F16 or
 * BF16); rows past the end are zero.  One 512-bit load then holds one column
 * of 16 output rows, so a product needs no horizontal sums, every weight
 * stream is sequential, and the addressing of a tile is one pointer plus
 * constant offsets.  Batches multiply a tile of 3 groups (48 rows) by 8
 * batch rows of x transposed (24 accumulators, 3 loads and 8 broadcasts per
 * 24 fused multiply-adds); decode streams 4 groups at a time. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "engine/threadpool.h"
#include "model/model.h"

/* Batch rows per tile: x is transposed in blocks of this many rows. */
#define PANELS_BATCH_ROWS 8

/* True when this CPU runs the panel kernels and the type has a panel layout. */
bool panels_supported(int ggml_type);
/* Bytes of the panels of w (rows rounded up to 16). */
size_t panels_bytes(const struct weight_matrix *w);
/* Writes the panels of w into out (panels_bytes(w), 64-byte aligned), the
 * groups split over the pool (may be NULL). */
void panels_pack(struct threadpool *pool, const struct weight_matrix *w, void *out);

/* Floats of x transposed for a batch of B rows of `cols` columns. */
size_t panels_xt_floats(int B, int cols);
/* xt: blocks of PANELS_BATCH_ROWS batch rows, each (cols, PANELS_BATCH_ROWS),
 * the last zero padded.  Vector code where the panel kernels run; the
 * _scalar twin is the portable path and the tests' reference. */
void panels_transpose_x(const float *x, int B, int cols, float *xt);
void panels_transpose_x_scalar(const float *x, int B, int cols, float *xt);

/* y(b, r) = x(b) . w(r) (+ bias(r)) for b in [0, B), r in [r0, r1), from
 * w->panels.  B == 1 reads x; larger batches read xt (panels_transpose_x of
 * x).  y is (B, w->rows); rows outside [r0, r1) are not written. */
void panels_rows(const struct weight_matrix *w, const float *bias, const float *x,
                 const float *xt, int B, float *y, int r0, int r1);
/* Where element (r, k) of w lies in w->panels, in elements of w's type
 * (the plain-C twin of the panel kernels reads them through it). */
size_t panels_element_index(const struct weight_matrix *w, int r, int k);
