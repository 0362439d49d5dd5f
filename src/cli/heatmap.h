/* PNG heatmaps of the tiered KV cache (8-bit RGB, libpng), from cache
 * traces (cache/cachetrace.h):
 *   step       one step: x = resident token in stream order (the union over
 *              layers; tick labels are stream indices), y = layer (0 on
 *              top), hue = tier, brightness = attention mass on a log scale
 *              from HEATMAP_MASS_FLOOR to 1; grey where a layer does not
 *              hold that token (another layer's anchor)
 *   lifecycle  steps accumulated: x = stream index, y = step (first on top),
 *              colour = the token's tier at that step, grey when it is not
 *              resident (evicted, or not yet seen), so sinks, quantization
 *              and eviction show as bands
 * Palette (Okabe-Ito, colour-blind safe): sink orange (230,159,0), anchor
 * reddish purple (204,121,167), compressed blue (0,114,178), hot bluish
 * green (0,158,115); not resident (224,224,224) on a white page.
 * Wider than HEATMAP_MAX_COLUMNS (or taller than HEATMAP_MAX_ROWS steps)
 * is downsampled: a pixel column shows, per row, the token of most mass
 * (step image) or the strongest tier present, sink > anchor > hot >
 * compressed > not resident (lifecycle). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "cache/cachetrace.h"

#define HEATMAP_MASS_FLOOR 1e-4f /* masses below show as this (the darkest shade) */
#define HEATMAP_MAX_COLUMNS 2048 /* plot columns before downsampling */
#define HEATMAP_MAX_LAYERS 1024  /* layers a step image accepts */
#define HEATMAP_MAX_ROWS 2048    /* lifecycle plot rows before downsampling */
#define HEATMAP_LIFE_DEFAULT_STEPS 4096
#define HEATMAP_LIFE_MAX_STEPS 65536  /* hard cap of heatmap_lifecycle_opts.max_steps */
#define HEATMAP_LIFE_RUNS_PER_STEP 64 /* average tier runs a step may use (memory bound) */
#define HEATMAP_LIFE_MAX_STREAM ((int64_t)1 << 30) /* stream indices a lifecycle accepts */

/* Which mass sets a step image's brightness. */
enum heatmap_mass { HEATMAP_MASS_MAX = 0, HEATMAP_MASS_MEAN, HEATMAP_MASS_EMA };

struct heatmap_rect {
	int x, y, w, h;
};

/* Where an image's parts are, in pixels (origin top left). */
struct heatmap_layout {
	int width, height;
	struct heatmap_rect title;
	struct heatmap_rect plot; /* the cells, n_bins x n_rows of cell_w x cell_h */
	int64_t n_cols;           /* tokens across: distinct stream indices (step) or
	                             stream length (lifecycle) */
	int n_bins;               /* plot columns: min(n_cols, HEATMAP_MAX_COLUMNS) */
	int n_items;              /* layers (step) or steps (lifecycle) */
	int n_rows;               /* plot rows: min(n_items, HEATMAP_MAX_ROWS) */
	int cell_w, cell_h;
	struct heatmap_rect legend; /* swatches, names (and the brightness ramps) */
	struct heatmap_rect swatch[CACHE_TIER_COUNT];
	struct heatmap_rect swatch_absent; /* lifecycle only: not resident; else all 0 */
};

/* The colour of a tier at a mass (brightness from HEATMAP_MASS_FLOOR, the
 * darkest, to 1, the palette colour itself). */
void heatmap_shade(enum cache_tier tier, float mass, uint8_t rgb[3]);
/* The palette colour of a tier, and the not-resident grey. */
void heatmap_tier_rgb(enum cache_tier tier, uint8_t rgb[3]);
void heatmap_absent_rgb(uint8_t rgb[3]);

/* Left pixel column of token column `col` (0 <= col < n_cols; for the
 * step image the col-th distinct stream index, for the lifecycle the
 * stream index) and top pixel row of item `item` (layer or step ordinal). */
int heatmap_layout_col_x(const struct heatmap_layout *l, int64_t col);
int heatmap_layout_row_y(const struct heatmap_layout *l, int item);

/* The step image's layout (what heatmap_step_write draws). */
int heatmap_step_layout(const struct cache_trace_step *t, struct heatmap_layout *out, char *err,
                        size_t err_len);
/* Writes the step image of t to path (created or replaced; removed again
 * on failure), brightness by mass_max. */
int heatmap_step_write(const struct cache_trace_step *t, const char *path, char *err,
                       size_t err_len);
int heatmap_step_write_mass(const struct cache_trace_step *t, enum heatmap_mass mass,
                            const char *path, char *err, size_t err_len);

/* ---- lifecycle: one row per step ----------------------------------------
 * Keeps, per step, the runs of consecutive stream indices of one tier (not
 * the trace), so its memory stays below
 * max_steps * (HEATMAP_LIFE_RUNS_PER_STEP * 16 + 16) bytes whatever the
 * stream length; a step that would pass either bound is refused (-ENOSPC)
 * and the steps before it stay. */
struct heatmap_lifecycle_opts {
	int layer;     /* the layer shown; -1: all layers, a token's tier in any
	                  layer that holds it (tiers differ between layers only by
	                  anchors); a zeroed struct shows layer 0 */
	int max_steps; /* 0: HEATMAP_LIFE_DEFAULT_STEPS; at most HEATMAP_LIFE_MAX_STEPS */
};

struct heatmap_lifecycle;

/* opts NULL: all layers, the default step cap. */
int heatmap_lifecycle_new(const struct heatmap_lifecycle_opts *opts, struct heatmap_lifecycle **out,
                          char *err, size_t err_len);
void heatmap_lifecycle_free(struct heatmap_lifecycle *h);
/* Records the tiers of t (checked with cache_trace_step_check; the
 * geometry in the title is the first step's).  -ERANGE: a stream index
 * from HEATMAP_LIFE_MAX_STREAM on, or a layer t lacks; -ENOSPC: full. */
int heatmap_lifecycle_add_step(struct heatmap_lifecycle *h, const struct cache_trace_step *t,
                               char *err, size_t err_len);
int heatmap_lifecycle_steps(const struct heatmap_lifecycle *h);
/* The layout of the image of the steps added so far (-EINVAL: none). */
int heatmap_lifecycle_layout(const struct heatmap_lifecycle *h, struct heatmap_layout *out,
                             char *err, size_t err_len);
int heatmap_lifecycle_write(const struct heatmap_lifecycle *h, const char *path, char *err,
                            size_t err_len);
