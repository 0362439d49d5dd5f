/* Bookkeeping of the device KV cache of one session (cuda backend): tier
 * sizes and byte layout from a geometry, and for each appended token the
 * append / flush / attention jobs of the kernels.  The decisions (what is a
 * sink, when the window evicts, when a hot token ages into staging, when a
 * group is quantized, what revising may drop, which positions rotate the
 * query) are those of src/cache/sinkcache.c, step for step; only the
 * storage differs: the staging and hot rings are one ring of F slots where
 * window token i sits at slot i mod F, so ageing a token moves no data.
 *
 * One difference: full_precision_recent = 0 with quantization is served with
 * a hot tier of one token (the CPU cache has no slot to stage from then).
 * It also maps a session's rings to and from the canonical image
 * (cache/kvimage.h) on host copies of its blocks.  It launches nothing and
 * touches no device memory. */
#include "cuda_kvplan.h"

#include <errno.h>
#include <string.h>

#include "cache/kvquant.h"
#include "util/errbuf.h"

_Static_assert(KV_DTYPE_F32 == CUDA_DT_F32 && KV_DTYPE_F16 == CUDA_DT_F16 &&
                   KV_DTYPE_BF16 == CUDA_DT_BF16,
               "cuda dtype codes follow enum kv_dtype");

#define ALIGN 256

static uint64_t carve(uint64_t *at, uint64_t bytes)
{
	uint64_t off = *at;
	*at = (off + bytes + ALIGN - 1) / ALIGN * ALIGN;
	return off;
}

static void shape_layout(struct cuda_kv_shape *sh)
{
	const struct sinkcache_geometry *g = &sh->g;
	struct cuda_kv_view *v = &sh->layout;
	uint64_t n_kv = (uint64_t)g->n_kv_heads, d = (uint64_t)g->head_dim;
	uint64_t s = (uint64_t)sh->sink_cap, f = (uint64_t)sh->fp_cap;
	uint64_t ng = (uint64_t)sh->n_groups, gs = (uint64_t)sh->group;
	uint64_t fp_row = d * kv_dtype_size(g->dtype), code_row = (uint64_t)sh->code_row;
	uint64_t at = 0;
	memset(v, 0, sizeof(*v));
	if (sh->sink_quant) {
		v->off_sink_kp = carve(&at, n_kv * s * 2 * sizeof(float));
		v->off_sink_vp = carve(&at, n_kv * s * 2 * sizeof(float));
		v->off_sink_k = carve(&at, n_kv * s * code_row);
		v->off_sink_v = carve(&at, n_kv * s * code_row);
	} else {
		v->off_sink_k = carve(&at, n_kv * s * fp_row);
		v->off_sink_v = carve(&at, n_kv * s * fp_row);
	}
	sh->sink_layer_bytes = s > 0 ? at : 0;
	at = 0;
	v->off_fp_k = carve(&at, n_kv * f * fp_row);
	v->off_fp_v = carve(&at, n_kv * f * fp_row);
	v->off_gkp = carve(&at, ng * n_kv * 2 * d * sizeof(float));
	v->off_gvp = carve(&at, ng * n_kv * gs * 2 * sizeof(float));
	v->off_gk = carve(&at, ng * n_kv * gs * code_row);
	v->off_gv = carve(&at, ng * n_kv * gs * code_row);
	sh->win_layer_bytes = at;
	v->sink_layer_bytes = sh->sink_layer_bytes;
	v->win_layer_bytes = sh->win_layer_bytes;
	v->n_kv = g->n_kv_heads;
	v->head_dim = g->head_dim;
	v->dtype = (int32_t)g->dtype;
	v->bits = g->quant_enabled ? g->quant_bits : 8;
	v->sink_cap = sh->sink_cap;
	v->fp_cap = sh->fp_cap;
	v->group = sh->group;
	v->n_groups = sh->n_groups;
	v->sink_quant = sh->sink_quant;
	v->code_row = sh->code_row;
}

int cuda_kv_shape_init(const struct sinkcache_geometry *g, struct cuda_kv_shape *sh, char *err,
                       size_t err_len)
{
	int rc = sinkcache_geometry_check(g, err, err_len);
	if (rc)
		return rc;
	bool full = g->strategy == CACHE_STRATEGY_FULL;
	memset(sh, 0, sizeof(*sh));
	sh->g = *g;
	sh->sink_cap = full && g->sink_keep_count > g->max_context_length ? g->max_context_length
	                                                                  : g->sink_keep_count;
	sh->window_cap = full ? g->max_context_length - sh->sink_cap : g->window_size;
	sh->hot_cap = g->quant_enabled ? g->full_precision_recent : sh->window_cap;
	sh->group = sinkcache_quant_group_size(g);
	if (sh->group > 0) {
		int comp = sh->window_cap - sh->hot_cap;
		sh->n_groups = full ? comp / sh->group : (comp + sh->group - 1) / sh->group;
		if (sh->hot_cap == 0)
			sh->hot_cap = 1;
		sh->fp_cap = sh->hot_cap + sh->group - 1;
	} else {
		sh->fp_cap = sh->window_cap;
	}
	sh->sink_quant = g->quant_enabled && !g->protect_sinks;
	sh->code_row = (int)kvq_code_bytes(g->head_dim, g->quant_enabled ? g->quant_bits : 8);
	shape_layout(sh);
	return 0;
}

size_t cuda_kv_session_bytes(const struct cuda_kv_shape *sh)
{
	return (sh->sink_layer_bytes + sh->win_layer_bytes) * (size_t)sh->g.n_layers;
}

void cuda_kv_state_init(struct cuda_kv_state *st)
{
	memset(st, 0, sizeof(*st));
}

static int window_count(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st)
{
	return st->groups_n * sh->group - st->grp_dropped + st->stage_n + st->hot_n;
}

int cuda_kv_resident(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st)
{
	return st->n_sink + window_count(sh, st);
}

bool cuda_kv_can_append(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st, size_t n)
{
	if (sh->g.strategy != CACHE_STRATEGY_FULL)
		return true;
	return n <= (size_t)sh->g.max_context_length - (size_t)cuda_kv_resident(sh, st);
}

/* Oldest window token leaves: from the oldest group, else staging, else hot. */
static void evict_oldest(const struct cuda_kv_shape *sh, struct cuda_kv_state *st)
{
	if (st->groups_n > 0) {
		if (++st->grp_dropped == sh->group) {
			st->groups_n--;
			st->grp_dropped = 0;
		}
	} else if (st->stage_n > 0) {
		st->stage_n--;
		st->fp_start++;
	} else {
		st->hot_n--;
		st->fp_start++;
	}
	st->evicted++;
}

/* The oldest hot token ages: into staging, or it completes a group. */
static void age_hot(const struct cuda_kv_shape *sh, struct cuda_kv_state *st,
                    const struct cuda_kv_view *view, struct cuda_kv_step *out)
{
	if (sh->group > 0 && st->stage_n == sh->group - 1) {
		out->has_flush = true;
		out->flush.group_slot = (int32_t)(st->groups_made % sh->n_groups);
		out->flush.fp_first = (int32_t)(st->fp_start % sh->fp_cap);
		out->flush.kv = *view;
		st->groups_made++;
		st->groups_n++;
		st->stage_n = 0;
		st->fp_start += sh->group;
	} else {
		st->stage_n++;
	}
	st->hot_n--;
	st->moved++;
}

static void fill_attn(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                      struct cuda_kv_attn_job *a)
{
	a->n_sink = st->n_sink;
	a->n_comp = st->groups_n * sh->group - st->grp_dropped;
	a->comp_group0 =
	    sh->n_groups > 0 ? (int32_t)((st->groups_made - st->groups_n) % sh->n_groups) : 0;
	a->comp_row0 = st->grp_dropped;
	a->n_fp = st->stage_n + st->hot_n;
	a->fp_slot0 = sh->fp_cap > 0 ? (int32_t)(st->fp_start % sh->fp_cap) : 0;
}

void cuda_kv_plan_step(const struct cuda_kv_shape *sh, struct cuda_kv_state *st,
                       const struct cuda_kv_view *view, struct cuda_kv_step *out)
{
	memset(out, 0, sizeof(*out));
	out->append.kv = *view;
	out->attn.kv = *view;
	out->key_pos = st->n_seen;
	bool sink = st->n_sink < sh->sink_cap && st->n_seen == (uint64_t)st->n_sink;
	if (sink) {
		out->append.sink_slot = st->n_sink++;
	} else {
		if (window_count(sh, st) == sh->window_cap)
			evict_oldest(sh, st);
		if (st->hot_n == sh->hot_cap)
			age_hot(sh, st, view, out);
		out->append.sink_slot = -1;
		out->append.fp_slot =
		    (int32_t)((st->fp_start + st->stage_n + st->hot_n) % sh->fp_cap);
		st->hot_n++;
	}
	st->n_seen++;
	fill_attn(sh, st, &out->attn);
	uint64_t rank = (uint64_t)cuda_kv_resident(sh, st) - 1;
	out->sink_pos = sh->g.rope_positions == ROPE_POSITIONS_CACHE ? rank : out->key_pos;
}

int cuda_kv_plan_revise(const struct cuda_kv_shape *sh, struct cuda_kv_state *st, size_t n,
                        char *err, size_t err_len)
{
	int most = st->hot_n + st->stage_n;
	if (n > (size_t)most)
		return sinkcache_revise_range_error(err, err_len, most, n, st->n_sink,
		                                    window_count(sh, st) - most, st->evicted);
	int from_hot = (int)n < st->hot_n ? (int)n : st->hot_n;
	st->hot_n -= from_hot;
	st->stage_n -= (int)n - from_hot;
	st->n_seen -= n;
	return 0;
}

void cuda_kv_plan_stats(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                        struct sinkcache_stats *out)
{
	const struct sinkcache_geometry *g = &sh->g;
	size_t n_kv = (size_t)g->n_kv_heads, d = (size_t)g->head_dim, gs = (size_t)sh->group;
	size_t fp_row = d * kv_dtype_size(g->dtype), code_row = (size_t)sh->code_row;
	size_t fp_tok = 2 * n_kv * fp_row;
	size_t sink_tok = sh->sink_quant ? 2 * n_kv * (code_row + 2 * sizeof(float)) : fp_tok;
	size_t group_bytes =
	    n_kv * (2 * gs * code_row + 2 * d * sizeof(float) + gs * 2 * sizeof(float));
	memset(out, 0, sizeof(*out));
	out->n_seen = st->n_seen;
	out->n_sink = st->n_sink;
	out->n_hot = st->hot_n;
	out->n_compressed = window_count(sh, st) - st->hot_n;
	out->n_resident = out->n_sink + out->n_compressed + out->n_hot;
	out->evicted_compressed = st->evicted;
	out->moved_to_compressed = st->moved;
	out->bytes_bound = sinkcache_bound_bytes(g);
	out->bytes_resident =
	    ((size_t)st->n_sink * sink_tok + (size_t)(st->hot_n + st->stage_n) * fp_tok +
	     (size_t)st->groups_n * group_bytes) *
	    (size_t)g->n_layers;
}

/* ---- canonical image ------------------------------------------------ */

void cuda_kv_image_counts(const struct cuda_kv_state *st, struct kv_image_counts *n)
{
	*n = (struct kv_image_counts){.n_seen = st->n_seen,
	                              .evicted = st->evicted,
	                              .moved = st->moved,
	                              .n_sink = st->n_sink,
	                              .n_groups = st->groups_n,
	                              .grp_dropped = st->grp_dropped,
	                              .n_stage = st->stage_n,
	                              .n_hot = st->hot_n};
}

int cuda_kv_image_layout(const struct cuda_kv_shape *sh, const struct kv_image_counts *n,
                         struct kv_image_layout *lo, char *err, size_t err_len)
{
	int rc = kv_image_layout_of(&sh->g, n, lo, err, err_len);
	if (rc)
		return rc;
	/* the CPU tiers bound the device rings; a mismatch here is a bug, not
	 * a bad image, but it must not write past a ring */
	if (n->n_groups > sh->n_groups || n->n_stage + n->n_hot > sh->fp_cap ||
	    n->n_hot > sh->hot_cap || lo->group != sh->group ||
	    lo->code_row != (size_t)sh->code_row || lo->sink_quant != (int)sh->sink_quant)
		return err_set(err, err_len, -EINVAL,
		               "cuda backend: cache image (%d groups, %d staged, %d hot) does not "
		               "fit the device rings (%d groups, %d full-precision slots, %d hot)",
		               n->n_groups, n->n_stage, n->n_hot, sh->n_groups, sh->fp_cap,
		               sh->hot_cap);
	return 0;
}

void cuda_kv_image_state(const struct kv_image_counts *n, struct cuda_kv_state *st)
{
	*st = (struct cuda_kv_state){.n_seen = n->n_seen,
	                             .n_sink = n->n_sink,
	                             .hot_n = n->n_hot,
	                             .stage_n = n->n_stage,
	                             .groups_n = n->n_groups,
	                             .grp_dropped = n->grp_dropped,
	                             .groups_made = n->n_groups,
	                             .fp_start = 0,
	                             .evicted = n->evicted,
	                             .moved = n->moved};
}

static void move_bytes(unsigned char *block, unsigned char *img, size_t bytes, bool to_image)
{
	if (to_image)
		memcpy(img, block, bytes);
	else
		memcpy(block, img, bytes);
}

/* Sinks: slots 0..n_sink-1 of each head's run of S slots. */
static void image_sinks(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                        const struct kv_image_layout *lo, unsigned char *sink, unsigned char *img,
                        bool to_image)
{
	const struct cuda_kv_view *v = &sh->layout;
	size_t S = (size_t)sh->sink_cap, ns = (size_t)st->n_sink, par = 2 * sizeof(float);
	for (size_t h = 0; h < (size_t)v->n_kv && ns > 0; h++) {
		size_t run = ns * lo->sink_row;
		move_bytes(sink + v->off_sink_k + h * S * lo->sink_row,
		           img + lo->off_sink_k + h * run, run, to_image);
		move_bytes(sink + v->off_sink_v + h * S * lo->sink_row,
		           img + lo->off_sink_v + h * run, run, to_image);
		if (!sh->sink_quant)
			continue;
		move_bytes(sink + v->off_sink_kp + h * S * par,
		           img + lo->off_sink_kp + h * ns * par, ns * par, to_image);
		move_bytes(sink + v->off_sink_vp + h * S * par,
		           img + lo->off_sink_vp + h * ns * par, ns * par, to_image);
	}
}

/* Groups, oldest first: the resident ones end at slot groups_made - 1. */
static void image_groups(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                         const struct kv_image_layout *lo, unsigned char *win, unsigned char *img,
                         bool to_image)
{
	const struct cuda_kv_view *v = &sh->layout;
	size_t nk = (size_t)v->n_kv, d = (size_t)v->head_dim, gs = (size_t)sh->group;
	size_t codes = nk * gs * (size_t)sh->code_row, kp = nk * 2 * d * sizeof(float);
	size_t vp = nk * gs * 2 * sizeof(float);
	for (int i = 0; i < st->groups_n; i++) {
		size_t slot = (size_t)((st->groups_made - st->groups_n + i) % sh->n_groups);
		unsigned char *g = img + lo->off_groups + (size_t)i * lo->group_bytes;
		move_bytes(win + v->off_gk + slot * codes, g + lo->grp_off_k, codes, to_image);
		move_bytes(win + v->off_gv + slot * codes, g + lo->grp_off_v, codes, to_image);
		move_bytes(win + v->off_gkp + slot * kp, g + lo->grp_off_kp, kp, to_image);
		move_bytes(win + v->off_gvp + slot * vp, g + lo->grp_off_vp, vp, to_image);
	}
}

/* Full-precision window: token j (staged first) at ring slot
 * (fp_start + j) mod F, in at most two runs per head. */
static void image_fp(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                     const struct kv_image_layout *lo, unsigned char *win, unsigned char *img,
                     bool to_image)
{
	const struct cuda_kv_view *v = &sh->layout;
	size_t F = (size_t)sh->fp_cap, nfp = (size_t)(st->stage_n + st->hot_n), row = lo->fp_row;
	if (nfp == 0)
		return;
	size_t first = (size_t)(st->fp_start % sh->fp_cap);
	size_t run0 = F - first < nfp ? F - first : nfp;
	for (size_t h = 0; h < (size_t)v->n_kv; h++) {
		const uint64_t off[2] = {v->off_fp_k, v->off_fp_v};
		const size_t img_off[2] = {lo->off_fp_k, lo->off_fp_v};
		for (int kv = 0; kv < 2; kv++) {
			unsigned char *ring = win + off[kv] + h * F * row;
			unsigned char *at = img + img_off[kv] + h * nfp * row;
			move_bytes(ring + first * row, at, run0 * row, to_image);
			if (run0 < nfp)
				move_bytes(ring, at + run0 * row, (nfp - run0) * row, to_image);
		}
	}
}

/* The one walk over a layer's resident tokens for both directions. */
static void layer_copy(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                       const struct kv_image_layout *lo, unsigned char *sink, unsigned char *win,
                       unsigned char *img, bool to_image)
{
	image_sinks(sh, st, lo, sink, img, to_image);
	image_groups(sh, st, lo, win, img, to_image);
	image_fp(sh, st, lo, win, img, to_image);
}

void cuda_kv_image_layer_out(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                             const struct kv_image_layout *lo, const unsigned char *sink,
                             const unsigned char *win, unsigned char *img)
{
	layer_copy(sh, st, lo, (unsigned char *)sink, (unsigned char *)win, img, true);
}

void cuda_kv_image_layer_in(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                            const struct kv_image_layout *lo, unsigned char *sink,
                            unsigned char *win, const unsigned char *img)
{
	layer_copy(sh, st, lo, sink, win, (unsigned char *)img, false);
}
