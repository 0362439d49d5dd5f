/* Bookkeeping of the device KV cache of one session (cuda backend): tier
 * sizes and byte layout from a geometry, and for each appended token the
 * append / flush / attention jobs of the kernels.  The decisions (what is a
 * sink, when the window evicts, when a hot token ages into staging, when a
 * group is quantized, what revising may drop, which positions rotate the
 * query) are the tier policy's (src/cache/tierpolicy.c), as for the CPU
 * cache; only the storage differs: the staging and hot rings are one ring of
 * F slots where window token i sits at slot i mod F, so ageing a token moves
 * no data.  It also maps a session's rings to and from the canonical image
 * (cache/kvimage.h) on host copies of its blocks.  It launches nothing and
 * touches no device memory. */
#include "cuda_kvplan.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvquant.h"
#include "cache/rope.h"
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
	const struct cache_geometry *g = &sh->g;
	struct cuda_kv_view *v = &sh->layout;
	uint64_t n_kv = (uint64_t)g->n_kv_heads, d = (uint64_t)g->head_dim;
	uint64_t s = (uint64_t)sh->caps.sink, f = (uint64_t)sh->fp_cap;
	uint64_t ng = (uint64_t)sh->n_groups, gs = (uint64_t)sh->caps.group;
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
	uint64_t a = (uint64_t)sh->caps.anchor;
	v->off_ak = carve(&at, n_kv * a * fp_row);
	v->off_av = carve(&at, n_kv * a * fp_row);
	v->off_ako = carve(&at, n_kv * a * d * sizeof(float));
	sh->win_layer_bytes = at;
	v->sink_layer_bytes = sh->sink_layer_bytes;
	v->win_layer_bytes = sh->win_layer_bytes;
	v->n_kv = g->n_kv_heads;
	v->head_dim = g->head_dim;
	v->dtype = (int32_t)g->dtype;
	v->bits = g->quant_enabled ? g->quant_bits : 8;
	v->sink_cap = sh->caps.sink;
	v->fp_cap = sh->fp_cap;
	v->group = sh->caps.group;
	v->n_groups = sh->n_groups;
	v->sink_quant = sh->sink_quant;
	v->code_row = sh->code_row;
	v->anchor_cap = sh->caps.anchor;
}

int cuda_kv_shape_init(const struct cache_geometry *g, struct cuda_kv_shape *sh, char *err,
                       size_t err_len)
{
	struct cache_tiers t;
	int rc = cache_geometry_tiers_of(g, &t, err, err_len);
	if (rc)
		return rc;
	/* g may be sh's own copy (a kind's geometry made in place) */
	memset(&sh->caps, 0, sizeof(*sh) - offsetof(struct cuda_kv_shape, caps));
	if (g != &sh->g)
		sh->g = *g;
	tier_caps_of(g, &t, &sh->caps);
	sh->n_groups = t.n_groups;
	sh->fp_cap = t.group > 0 ? t.hot + t.group - 1 : t.window;
	sh->sink_quant = t.sink_quant;
	sh->code_row = (int)t.code_row;
	shape_layout(sh);
	return 0;
}

int cuda_kv_kind_geometry(const struct cache_geometry *g, bool swa, struct cache_geometry *out)
{
	int n = 0, window = 0;
	for (int l = 0; l < g->n_layers && l < CACHE_GEOMETRY_MAX_LAYERS; l++) {
		bool slides = g->layer[l].own && g->layer[l].swa;
		if (slides)
			window = g->layer[l].window_size;
		n += slides == swa;
	}
	struct cache_layer_rope rope = cache_geometry_layer_rope(g, 0);
	for (int l = 0; swa && l < g->n_layers; l++)
		if (g->layer[l].own && g->layer[l].swa) {
			rope = cache_geometry_layer_rope(g, l);
			break;
		}
	*out = *g;
	memset(out->layer, 0, sizeof(out->layer));
	if (!swa)
		return n;
	out->strategy = CACHE_STRATEGY_SLIDING_WINDOW;
	out->sink_keep_count = 0;
	out->window_size = out->full_precision_recent = window;
	out->quant_enabled = false;
	out->protect_sinks = true;
	out->anchor_max = 0;
	out->rope_theta = rope.theta;
	out->rope_theta_swa = 0.0;
	out->rope_freq_scale = rope.freq_scale;
	/* scaled sliding layers (gpt-oss, gemma2) keep the factors and YaRN's
	 * blend too; the others turn unscaled */
	out->swa_rope_scaled = false;
	if (!g->swa_rope_scaled) {
		out->n_rope_factors = 0;
		out->rope_ext_factor = 0.0;
		out->rope_ctx_orig = 0;
	}
	return n;
}

size_t cuda_kv_session_bytes(const struct cuda_kv_shape *sh)
{
	return (sh->sink_layer_bytes + sh->win_layer_bytes) * (size_t)sh->g.n_layers;
}

void cuda_kv_state_init(struct cuda_kv_state *st)
{
	memset(st, 0, sizeof(*st));
}

int cuda_kv_resident(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st)
{
	return tier_resident(&sh->caps, &st->t);
}

bool cuda_kv_can_append(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st, size_t n)
{
	return tier_can_append(&sh->caps, &st->t, n);
}

static void fill_attn(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                      struct cuda_kv_attn_job *a)
{
	const struct tier_counts *t = &st->t;
	a->n_sink = t->n_sink;
	a->n_comp = t->n_groups * sh->caps.group - t->grp_dropped;
	a->comp_group0 =
	    sh->n_groups > 0 ? (int32_t)((st->groups_made - t->n_groups) % sh->n_groups) : 0;
	a->comp_row0 = t->grp_dropped;
	a->n_fp = t->n_stage + t->n_hot;
	a->fp_slot0 = sh->fp_cap > 0 ? (int32_t)(st->fp_start % sh->fp_cap) : 0;
}

/* The policy's step on the device rings: an evicted or grouped
 * full-precision token moves the ring's start; a completed group is a flush
 * job into the next group slot. */
void cuda_kv_plan_step(const struct cuda_kv_shape *sh, struct cuda_kv_state *st,
                       const struct cuda_kv_view *view, struct cuda_kv_step *out)
{
	struct tier_step ts;
	memset(out, 0, sizeof(*out));
	out->append.kv = *view;
	out->attn.kv = *view;
	tier_step(&sh->caps, &st->t, &ts);
	out->key_pos = ts.key_pos;
	if (ts.to_sink) {
		out->append.sink_slot = ts.sink_slot;
	} else {
		if (ts.evict == TIER_EVICT_STAGED || ts.evict == TIER_EVICT_HOT)
			st->fp_start++;
		if (ts.age == TIER_AGE_FLUSH) {
			out->has_flush = true;
			out->flush.group_slot = (int32_t)(st->groups_made % sh->n_groups);
			out->flush.fp_first = (int32_t)(st->fp_start % sh->fp_cap);
			out->flush.kv = *view;
			st->groups_made++;
			st->fp_start += sh->caps.group;
		}
		out->append.sink_slot = -1;
		/* the token follows the staged ones and the older hot ones */
		out->append.fp_slot =
		    (int32_t)((st->fp_start + st->t.n_stage + ts.hot_index) % sh->fp_cap);
	}
	fill_attn(sh, st, &out->attn);
	out->sink_pos = tier_sink_query_pos(&sh->g, &sh->caps, &st->t, 0);
}

int cuda_kv_plan_revise(const struct cuda_kv_shape *sh, struct cuda_kv_state *st, size_t n,
                        char *err, size_t err_len)
{
	return tier_revise(&sh->caps, &st->t, n, err, err_len);
}

void cuda_kv_plan_stats(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                        struct sinkcache_stats *out)
{
	const struct cache_geometry *g = &sh->g;
	const struct tier_counts *t = &st->t;
	size_t n_kv = (size_t)g->n_kv_heads, d = (size_t)g->head_dim, gs = (size_t)sh->caps.group;
	size_t fp_row = d * kv_dtype_size(g->dtype), code_row = (size_t)sh->code_row;
	size_t fp_tok = 2 * n_kv * fp_row;
	size_t sink_tok = sh->sink_quant ? 2 * n_kv * (code_row + 2 * sizeof(float)) : fp_tok;
	size_t group_bytes =
	    n_kv * (2 * gs * code_row + 2 * d * sizeof(float) + gs * 2 * sizeof(float));
	memset(out, 0, sizeof(*out));
	out->n_seen = t->n_seen;
	out->n_sink = t->n_sink;
	out->n_hot = t->n_hot;
	out->n_compressed = tier_window(&sh->caps, t) - t->n_hot;
	out->n_resident = out->n_sink + out->n_compressed + out->n_hot;
	out->evicted_compressed = t->evicted;
	out->moved_to_compressed = t->moved;
	out->bytes_bound = cache_geometry_bound_bytes(g);
	out->bytes_resident =
	    ((size_t)t->n_sink * sink_tok + (size_t)(t->n_hot + t->n_stage) * fp_tok +
	     (size_t)t->n_groups * group_bytes) *
	    (size_t)g->n_layers;
}

/* ---- anchors ---------------------------------------------------------- */

int cuda_kv_anchors_init(const struct cuda_kv_shape *sh, struct cuda_kv_anchors *a, char *err,
                         size_t err_len)
{
	memset(a, 0, sizeof(*a));
	int L = sh->g.n_layers, A = sh->caps.anchor, W = sh->caps.window;
	if (A <= 0)
		return 0;
	/* per layer: two tiers' pos, score, below; window scores; pending */
	size_t per = 2 * (size_t)A * (sizeof(uint64_t) + sizeof(float) + sizeof(int32_t)) +
	             (size_t)W * sizeof(float) + (size_t)A * sizeof(int);
	size_t heads = 2 * (size_t)L * sizeof(struct tier_anchors) + (size_t)L * sizeof(int);
	unsigned char *p = calloc(1, heads + (size_t)L * per);
	if (!p)
		return err_set(err, err_len, -ENOMEM,
		               "cuda backend: no memory for the anchor tiers of %d layers", L);
	a->mem = p;
	a->n_layers = L;
	a->cap = A;
	a->layer = (struct tier_anchors *)p, p += (size_t)L * sizeof(struct tier_anchors);
	a->plan = (struct tier_anchors *)p, p += (size_t)L * sizeof(struct tier_anchors);
	a->pend_first = (int *)p, p += (size_t)L * sizeof(int);
	for (int l = 0; l < L; l++) {
		struct tier_anchors *t[2] = {&a->layer[l], &a->plan[l]};
		for (int k = 0; k < 2; k++) {
			t[k]->pos = (uint64_t *)p, p += (size_t)A * sizeof(uint64_t);
			t[k]->score = (float *)p, p += (size_t)A * sizeof(float);
			t[k]->below = (int32_t *)p, p += (size_t)A * sizeof(int32_t);
		}
		a->layer[l].w_score = a->plan[l].w_score = (float *)p;
		p += (size_t)W * sizeof(float);
		tier_anchors_reset(&sh->caps, &a->layer[l]);
		a->pend_first[l] = A;
	}
	a->pend_src = (int *)p;
	return 0;
}

void cuda_kv_anchors_free(struct cuda_kv_anchors *a)
{
	free(a->mem);
	memset(a, 0, sizeof(*a));
}

static void anchors_copy(struct tier_anchors *dst, const struct tier_anchors *src, int cap)
{
	dst->n = src->n;
	dst->promoted = src->promoted;
	dst->demoted = src->demoted;
	memcpy(dst->pos, src->pos, (size_t)cap * sizeof(*dst->pos));
	memcpy(dst->score, src->score, (size_t)cap * sizeof(*dst->score));
	memcpy(dst->below, src->below, (size_t)cap * sizeof(*dst->below));
}

void cuda_kv_anchors_begin(struct cuda_kv_anchors *a)
{
	for (int l = 0; l < a->n_layers; l++)
		anchors_copy(&a->plan[l], &a->layer[l], a->cap);
}

/* Where the oldest window token is before the step (its promotion's
 * source): the oldest group's front row, or the fp ring's oldest slot. */
static void oldest_window_row(const struct cuda_kv_shape *sh, const struct cuda_kv_state *st,
                              struct cuda_kv_anchor_op *op)
{
	if (st->t.n_groups > 0) {
		op->from_group = 1;
		op->group_slot = (int32_t)((st->groups_made - st->t.n_groups) % sh->n_groups);
		op->group_row = st->t.grp_dropped;
	} else {
		op->fp_slot = (int32_t)(st->fp_start % sh->fp_cap);
	}
}

void cuda_kv_anchors_plan(const struct cuda_kv_shape *sh, struct cuda_kv_anchors *a, int l,
                          const struct cuda_kv_state *st, const struct cuda_kv_view *view,
                          const double *freq_hi, const double *freq_lo,
                          struct cuda_kv_anchor_op *ops, int *n_ops, double *angles,
                          int angle0, int *n_angles)
{
	struct tier_anchors *t = &a->plan[l];
	const int *pend = a->pend_src + (size_t)l * (size_t)a->cap;
	int pend_first = a->pend_first[l], src[SINKCACHE_MAX_ANCHORS];
	int first = tier_anchors_leaving(&sh->caps, &st->t, t, src);
	int rd = sh->g.rope_dim;
	*n_ops = *n_angles = 0;
	/* the pending moves first, then the promotion's: slot i holds what the
	 * promotion took from slot s, which held what the pending move says */
	int from = first < pend_first ? first : pend_first;
	for (int i = from; i < t->n; i++) {
		int s = i < first ? i : src[i];
		if (s >= pend_first)
			s = pend[s];
		struct cuda_kv_anchor_op op = {.layer = l, .dst = i, .kv = *view};
		if (s < 0) {
			op.kind = CUDA_ANCHOR_KEEP;
			oldest_window_row(sh, st, &op);
			ops[(*n_ops)++] = op;
		} else if (s != i) {
			op.kind = CUDA_ANCHOR_MOVE;
			op.src = s;
			ops[(*n_ops)++] = op;
		}
	}
	for (int i = from; i < t->n; i++) {
		uint64_t rank = (uint64_t)sh->caps.sink + (uint64_t)i;
		struct cuda_kv_anchor_op op = {
		    .kind = CUDA_ANCHOR_REKEY, .layer = l, .dst = i, .cs_at = -1, .kv = *view};
		if (sh->g.rope_positions == ROPE_POSITIONS_CACHE && t->pos[i] != rank) {
			double *cs = angles + (size_t)*n_angles * (size_t)rd;
			/* the CPU cache's rekey: by -(pos - rank) */
			rope_cos_sin(freq_hi, freq_lo, rd, t->pos[i] - rank, cs);
			for (int j = 1; j < rd; j += 2)
				cs[j] = -cs[j];
			op.cs_at = angle0 + (*n_angles)++;
		}
		ops[(*n_ops)++] = op;
	}
}

void cuda_kv_anchors_commit(const struct cuda_kv_shape *sh, struct cuda_kv_anchors *a,
                            const struct cuda_kv_step *step)
{
	struct tier_step ts = {.to_sink = step->append.sink_slot >= 0, .key_pos = step->key_pos};
	for (int l = 0; l < a->n_layers; l++) {
		struct tier_anchors keep = a->layer[l];
		a->layer[l] = a->plan[l];
		a->plan[l] = keep;
		a->pend_first[l] = a->cap;
		tier_anchors_entered(&sh->caps, &a->layer[l], &ts);
	}
}

void cuda_kv_anchors_observe(const struct cuda_kv_shape *sh, struct cuda_kv_anchors *a, int l,
                             const struct cuda_kv_state *st, const float *key_weight, size_t ld)
{
	struct tier_anchors *t = &a->layer[l];
	int *pend = a->pend_src + (size_t)l * (size_t)a->cap, src[SINKCACHE_MAX_ANCHORS];
	int first = tier_anchors_observe(&sh->caps, &st->t, t, key_weight, 1, ld, src);
	if (first >= t->n)
		return;
	/* composed with moves still pending (observations without a forward
	 * between them do not happen, but the composition costs nothing) */
	int pf = a->pend_first[l];
	for (int i = first; i < t->n; i++) {
		int s = src[i];
		pend[i] = s >= pf ? pend[s] : s;
	}
	a->pend_first[l] = first < pf ? first : pf;
}

void cuda_kv_anchors_stats(const struct cuda_kv_shape *sh, const struct cuda_kv_anchors *a,
                           struct sinkcache_stats *out)
{
	if (a->cap <= 0)
		return;
	out->n_anchor = a->layer[0].n;
	out->n_resident += out->n_anchor;
	for (int l = 0; l < a->n_layers; l++) {
		out->bytes_resident += cache_geometry_anchor_bytes(&sh->g, l, a->layer[l].n);
		out->anchors_promoted += a->layer[l].promoted;
		out->anchors_demoted += a->layer[l].demoted;
	}
}

/* ---- canonical image ------------------------------------------------ */

void cuda_kv_image_counts(const struct cuda_kv_state *st, struct tier_counts *n)
{
	*n = st->t;
}

int cuda_kv_image_layout(const struct cuda_kv_shape *sh, const struct tier_counts *n,
                         struct kv_image_layout *lo, char *err, size_t err_len)
{
	int rc = kv_image_layout_of(&sh->g, n, lo, err, err_len);
	if (rc)
		return rc;
	/* the CPU tiers bound the device rings; a mismatch here is a bug, not
	 * a bad image, but it must not write past a ring */
	if (n->n_groups > sh->n_groups || n->n_stage + n->n_hot > sh->fp_cap ||
	    n->n_hot > sh->caps.hot || lo->group != sh->caps.group ||
	    lo->code_row != (size_t)sh->code_row || lo->sink_quant != (int)sh->sink_quant)
		return err_set(err, err_len, -EINVAL,
		               "cuda backend: cache image (%d groups, %d staged, %d hot) does not "
		               "fit the device rings (%d groups, %d full-precision slots, %d hot)",
		               n->n_groups, n->n_stage, n->n_hot, sh->n_groups, sh->fp_cap,
		               sh->caps.hot);
	return 0;
}

void cuda_kv_image_state(const struct tier_counts *n, struct cuda_kv_state *st)
{
	*st = (struct cuda_kv_state){.t = *n, .groups_made = n->n_groups, .fp_start = 0};
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
	size_t S = (size_t)sh->caps.sink, ns = (size_t)st->t.n_sink, par = 2 * sizeof(float);
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
	size_t nk = (size_t)v->n_kv, d = (size_t)v->head_dim, gs = (size_t)sh->caps.group;
	size_t codes = nk * gs * (size_t)sh->code_row, kp = nk * 2 * d * sizeof(float);
	size_t vp = nk * gs * 2 * sizeof(float);
	for (int i = 0; i < st->t.n_groups; i++) {
		size_t slot = (size_t)((st->groups_made - st->t.n_groups + i) % sh->n_groups);
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
	size_t F = (size_t)sh->fp_cap, nfp = (size_t)(st->t.n_stage + st->t.n_hot),
	       row = lo->fp_row;
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
