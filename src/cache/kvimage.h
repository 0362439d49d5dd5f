/* A session's tiered KV cache in one canonical byte order, the same for
 * every backend: what a snapshot carries, so that a cache exported by the
 * cpu backend imports into the cuda one and back.  Rows are stored as the
 * caches hold them (keys rotated by their stream index, full-precision rows
 * in the geometry's dtype, quantized groups as codes and fp32 parameters),
 * little-endian, in stream order whatever ring slot they sat in.
 *
 * Per layer, layers one after another (n_kv = n_kv_heads, D = head_dim,
 * Dc = code bytes of a row, e = dtype bytes, G = group size):
 *   sinks     n_sink tokens: full precision  k, v (n_kv, n_sink, D) e
 *             quantized sinks:                k, v (n_kv, n_sink, Dc) codes,
 *                                             kp, vp (n_kv, n_sink, 2) f32 scale,min
 *   groups    n_groups, oldest first, each:   gk (n_kv, G, Dc), gv (n_kv, G, Dc),
 *                                             gkp (n_kv, 2, D) f32 per-channel
 *                                             scale (row 0), min (row 1),
 *                                             gvp (n_kv, G, 2) f32 per-token
 *             (the oldest group's first grp_dropped rows were evicted; their
 *              bytes stay because the group's key parameters cover them)
 *   fp window n_stage + n_hot tokens, staged (older) first, then hot:
 *             k, v (n_kv, n_stage + n_hot, D) e
 * A model sliding-window layer (geometry.h: a swa span) is laid out the same
 * with its own counts (n_swa: no sinks, no groups, its window all hot), so
 * its part is only the fp window. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "cache/geometry.h"
#include "cache/tierpolicy.h"

struct sinkcache;

/* Byte offsets of the tiers inside one layer of an image. */
struct kv_image_layout {
	size_t sink_row;   /* bytes of one sink row (fp or codes) */
	size_t fp_row;     /* bytes of one full-precision row */
	size_t code_row;   /* bytes of one row of codes */
	int group;         /* G (0: no quantized window tier) */
	int sink_quant;    /* sinks are codes + parameters */
	size_t off_sink_k, off_sink_v, off_sink_kp, off_sink_vp;
	size_t off_groups; /* the first group; group_bytes apart */
	size_t group_bytes;
	size_t grp_off_k, grp_off_v, grp_off_kp, grp_off_vp; /* inside one group */
	size_t off_fp_k, off_fp_v;
	size_t layer_bytes;
	size_t total_bytes; /* layer_bytes * n_layers */
};

struct kv_image {
	struct tier_counts n;     /* the global layers' counts (every layer's when none slides) */
	struct tier_counts n_swa; /* the model sliding-window layers' (all alike); zero when none */
	unsigned char *data; /* total_bytes of the layout */
	size_t bytes;
};

/* Checks the counts against what a cache of geometry g can hold (each tier
 * within its capacity, the window within window_size, no window before the
 * sinks are full, the stream index not behind what is resident) and fills
 * the layout.  err names the count, its value and its allowed range. */
int kv_image_layout_of(const struct cache_geometry *g, const struct tier_counts *n,
                       struct kv_image_layout *lo, char *err, size_t err_len);

/* The layouts of an image whose geometry has model sliding-window layers
 * (any geometry: without them, swa is unused and every layer is global):
 * global checks and lays out the counts n against the global layers'
 * tiers, swa the counts n_swa against the sliding layers' (which must see
 * the same stream: n_seen equal, only hot tokens).  -ENOTSUP for spans of
 * their own other than one model window (no cache makes those). */
struct kv_image_plan {
	struct kv_image_layout global, swa;
	size_t total_bytes;
};
int kv_image_plan_of(const struct cache_geometry *g, const struct tier_counts *n,
                     const struct tier_counts *n_swa, struct kv_image_plan *p, char *err,
                     size_t err_len);
/* Layer l's layout in a plan; *offset is where its bytes start. */
const struct kv_image_layout *kv_image_plan_layer(const struct kv_image_plan *p,
                                                  const struct cache_geometry *g, int l,
                                                  size_t *offset);

/* The most bytes an image of geometry g can take (its counts at capacity). */
size_t kv_image_max_bytes(const struct cache_geometry *g);

/* Counts as sinkcache_stats reports them. */
int kv_image_counts_window(const struct cache_geometry *g, const struct tier_counts *n);

void kv_image_free(struct kv_image *im);

/* The cpu cache's side (sinkcache_image.c).  Export fills im (allocating
 * im->data; the cache must be consistent: every layer saw the same tokens);
 * import loads an image into an empty cache (new or reset) of the same
 * geometry, after which the cache behaves exactly as the exported one did. */
int sinkcache_export(const struct sinkcache *c, struct kv_image *im, char *err, size_t err_len);
int sinkcache_import(struct sinkcache *c, const struct kv_image *im, char *err, size_t err_len);
