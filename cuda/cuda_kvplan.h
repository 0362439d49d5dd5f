/* Host-side bookkeeping of one session's device KV cache: tier sizes from a
 * cache geometry, and per appended token the jobs the kernels run (where its
 * K/V go, which group to quantize, what its query attends over).  It mirrors
 * the CPU cache (src/cache/sinkcache.c) decision for decision, so that the
 * cuda and cpu backends hold the same tokens in the same tiers.  Plain C,
 * no CUDA: the C twins and a host-only test use it too. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/geometry.h"
#include "cache/kvimage.h"
#include "cache/tierpolicy.h"
#include "cuda_kv.h"

/* Tier sizes and byte layout of a geometry. */
struct cuda_kv_shape {
	struct cache_geometry g;
	struct tier_caps caps; /* the tier policy's capacities (cache/tierpolicy.h) */
	int n_groups;   /* NG */
	int fp_cap;     /* F = H + G - 1, or W without groups */
	bool sink_quant;
	int code_row; /* bytes of one row of codes */
	size_t sink_layer_bytes, win_layer_bytes;
	struct cuda_kv_view layout; /* offsets and sizes; bases 0 */
};

/* One session's position in its stream (identical for all layers between
 * forward passes). */
struct cuda_kv_state {
	struct tier_counts t; /* what each tier holds: the tier policy's state */
	int64_t groups_made;  /* groups ever made: the next one goes to slot groups_made % NG */
	int64_t fp_start;     /* window index of the oldest full-precision token */
};

/* What one appended token needs, for every layer. */
struct cuda_kv_step {
	struct cuda_kv_append_job append;
	bool has_flush;
	struct cuda_kv_flush_job flush; /* runs before the append when has_flush */
	struct cuda_kv_attn_job attn;
	uint64_t key_pos;  /* stream index: rotation of the key and the window query */
	uint64_t sink_pos; /* rotation of the query for sink keys */
};

int cuda_kv_shape_init(const struct cache_geometry *g, struct cuda_kv_shape *sh, char *err,
                       size_t err_len);
/* The uniform geometry of one kind of g's layers, what a shape is made of
 * when g's layers differ: the global layers' (g without layer spans) or
 * (swa) the model sliding-window layers' (their window, all of it hot, no
 * sinks or anchors, unquantized, their RoPE).  Returns how many layers of
 * g are of that kind. */
int cuda_kv_kind_geometry(const struct cache_geometry *g, bool swa, struct cache_geometry *out);
/* Bytes of both blocks, all layers. */
size_t cuda_kv_session_bytes(const struct cuda_kv_shape *sh);

void cuda_kv_state_init(struct cuda_kv_state *st);
bool cuda_kv_can_append(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st, size_t n);
int cuda_kv_resident(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st);

/* Advances st by one token and fills its jobs; view holds the session's
 * block addresses (layout with bases set). */
void cuda_kv_plan_step(const struct cuda_kv_shape *sh, struct cuda_kv_state *st,
                       const struct cuda_kv_view *view, struct cuda_kv_step *out);

/* Drops the newest n tokens (same rule and message as sinkcache_revise). */
int cuda_kv_plan_revise(const struct cuda_kv_shape *sh, struct cuda_kv_state *st, size_t n,
                        char *err, size_t err_len);

/* Counts and bytes as sinkcache_get_stats() reports them. */
void cuda_kv_plan_stats(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                        struct sinkcache_stats *out);

/* ---- anchors: each layer's anchor tier (tierpolicy.h) on the device ---- */

/* One session's anchor bookkeeping: the committed tiers, the copy a
 * forward plans on (both share the window scores), and per layer the slot
 * moves of the last observation that the device has not carried out yet
 * (they run at the start of the next forward). */
struct cuda_kv_anchors {
	int n_layers, cap;
	struct tier_anchors *layer; /* (n_layers) committed */
	struct tier_anchors *plan;  /* (n_layers) while a forward is planned */
	int *pend_first;            /* (n_layers) first slot still to move; >= cap: none */
	int *pend_src;              /* (n_layers, cap) the moves, as tierpolicy.h describes */
	void *mem;
};

/* Ops and angles the plan of one layer writes at most. */
#define CUDA_KV_ANCHOR_OPS(cap) (2 * (cap) + 1)
#define CUDA_KV_ANCHOR_ANGLES(cap) (cap)

/* No anchors (and nothing allocated) unless sh keeps them. */
int cuda_kv_anchors_init(const struct cuda_kv_shape *sh, struct cuda_kv_anchors *a, char *err,
                         size_t err_len);
void cuda_kv_anchors_free(struct cuda_kv_anchors *a);
/* Starts planning a forward: the plan copy from the committed tiers. */
void cuda_kv_anchors_begin(struct cuda_kv_anchors *a);
/* The anchor ops of layer l for the next token, planned on the plan copy:
 * the pending moves, then the leaving window token's promotion, each moved
 * slot re-rotated.  st: the session before the token's step.  Writes
 * *n_ops ops (at most CUDA_KV_ANCHOR_OPS) and *n_angles angle rows of
 * rope_dim doubles (at most CUDA_KV_ANCHOR_ANGLES), the ops' cs_at counted
 * from angle0. */
void cuda_kv_anchors_plan(const struct cuda_kv_shape *sh, struct cuda_kv_anchors *a, int l,
                          const struct cuda_kv_state *st, const struct cuda_kv_view *view,
                          const double *freq_hi, const double *freq_lo,
                          struct cuda_kv_anchor_op *ops, int *n_ops, double *angles,
                          int angle0, int *n_angles);
/* The forward ran: the plan copy becomes the tiers, the pending moves are
 * done, and the token of step (a window token) starts unscored. */
void cuda_kv_anchors_commit(const struct cuda_kv_shape *sh, struct cuda_kv_anchors *a,
                            const struct cuda_kv_step *step);
/* The token's attention at layer l: key_weight (ld floats, rank order)
 * holds each resident key's weight, largest over heads; st: the session
 * after the step.  Demotions become pending moves. */
void cuda_kv_anchors_observe(const struct cuda_kv_shape *sh, struct cuda_kv_anchors *a, int l,
                             const struct cuda_kv_state *st, const float *key_weight, size_t ld);
/* Anchor counts and bytes into stats (after cuda_kv_plan_stats). */
void cuda_kv_anchors_stats(const struct cuda_kv_shape *sh, const struct cuda_kv_anchors *a,
                           struct sinkcache_stats *out);

/* ---- canonical image (cache/kvimage.h): what a snapshot carries */

/* Counts of the image of a session at st. */
void cuda_kv_image_counts(const struct cuda_kv_state *st, struct tier_counts *n);
/* Checks counts n against sh (kv_image_layout_of, then the device rings) and
 * fills lo.  err names the count. */
int cuda_kv_image_layout(const struct cuda_kv_shape *sh, const struct tier_counts *n,
                         struct kv_image_layout *lo, char *err, size_t err_len);
/* The state of a session that had just seen exactly n's tokens: sinks from
 * slot 0, groups from slot 0 (groups_made = n_groups), the full-precision
 * window from ring slot 0 (fp_start = 0). */
void cuda_kv_image_state(const struct tier_counts *n, struct cuda_kv_state *st);
/* One layer between host copies of its blocks (sink: sink_layer_bytes, win:
 * win_layer_bytes, in the device layout, rings where st places them) and
 * its part of an image (img: lo->layer_bytes): out fills img, in fills the
 * blocks' resident slots and leaves the other bytes as they are. */
void cuda_kv_image_layer_out(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                             const struct kv_image_layout *lo, const unsigned char *sink,
                             const unsigned char *win, unsigned char *img);
void cuda_kv_image_layer_in(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                            const struct kv_image_layout *lo, unsigned char *sink,
                            unsigned char *win, const unsigned char *img);
