/* The canonical image of a tiered cache: its layout from the geometry and
 * the counts, and the checks that make a hostile image's counts harmless
 * before anything is sized from them. */
#include "cache/kvimage.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"

static int count_range(char *err, size_t err_len, const char *what, long long v, long long hi)
{
	if (v >= 0 && v <= hi)
		return 0;
	return err_set(err, err_len, -EINVAL, "cache image: %s: %lld is out of range (allowed 0..%lld)",
	               what, v, hi);
}

int kv_image_counts_window(const struct cache_geometry *g, const struct tier_counts *n)
{
	int group = cache_geometry_quant_group_size(g);
	return n->n_groups * group - n->grp_dropped + n->n_stage + n->n_hot;
}

/* Checks counts n against tiers t and lays out one layer of them. */
static int layout_with_tiers(const struct cache_geometry *g, const struct cache_tiers *t,
                             const struct tier_counts *n, struct kv_image_layout *lo, char *err,
                             size_t err_len)
{
	int rc;
	if ((rc = count_range(err, err_len, "n_sink", n->n_sink, t->sink)) ||
	    (rc = count_range(err, err_len, "n_groups", n->n_groups, t->n_groups)) ||
	    (rc = count_range(err, err_len, "grp_dropped", n->grp_dropped,
	                      t->group > 0 && n->n_groups > 0 ? t->group - 1 : 0)) ||
	    (rc = count_range(err, err_len, "n_stage", n->n_stage, t->stage)) ||
	    (rc = count_range(err, err_len, "n_hot", n->n_hot, t->hot)))
		return rc;
	long long window =
	    (long long)n->n_groups * t->group - n->grp_dropped + n->n_stage + n->n_hot;
	if (window > t->window)
		return err_set(err, err_len, -EINVAL,
		               "cache image: %lld window tokens exceed the window of %d", window,
		               t->window);
	if (window > 0 && n->n_sink < t->sink)
		return err_set(err, err_len, -EINVAL,
		               "cache image: %lld window tokens before the %d sink slots are full "
		               "(%d sinks)",
		               window, t->sink, n->n_sink);
	/* (moved counts ageings of tokens that a revision may have dropped since,
	 * so it is not bounded by the stream index) */
	if (n->n_seen < (uint64_t)n->n_sink + (uint64_t)window ||
	    n->evicted > n->n_seen - (uint64_t)n->n_sink - (uint64_t)window)
		return err_set(err, err_len, -EINVAL,
		               "cache image: stream index %llu is behind its %lld resident tokens "
		               "and %llu evicted ones",
		               (unsigned long long)n->n_seen, (long long)n->n_sink + window,
		               (unsigned long long)n->evicted);
	size_t n_kv = (size_t)g->n_kv_heads, d = (size_t)g->head_dim, gs = (size_t)t->group;
	size_t ns = (size_t)n->n_sink, nfp = (size_t)(n->n_stage + n->n_hot);
	lo->fp_row = t->fp_row;
	lo->code_row = t->code_row;
	lo->group = t->group;
	lo->sink_quant = t->sink_quant;
	lo->sink_row = t->sink_quant ? t->code_row : t->fp_row;
	size_t off = 0;
	lo->off_sink_k = off, off += n_kv * ns * lo->sink_row;
	lo->off_sink_v = off, off += n_kv * ns * lo->sink_row;
	if (t->sink_quant) {
		lo->off_sink_kp = off, off += n_kv * ns * 2 * sizeof(float);
		lo->off_sink_vp = off, off += n_kv * ns * 2 * sizeof(float);
	}
	lo->grp_off_k = 0;
	lo->grp_off_v = n_kv * gs * t->code_row;
	lo->grp_off_kp = 2 * n_kv * gs * t->code_row;
	lo->grp_off_vp = lo->grp_off_kp + n_kv * 2 * d * sizeof(float);
	lo->group_bytes = t->group > 0 ? lo->grp_off_vp + n_kv * gs * 2 * sizeof(float) : 0;
	lo->off_groups = off, off += (size_t)n->n_groups * lo->group_bytes;
	lo->off_fp_k = off, off += n_kv * nfp * t->fp_row;
	lo->off_fp_v = off, off += n_kv * nfp * t->fp_row;
	lo->layer_bytes = off;
	lo->total_bytes = off * (size_t)g->n_layers;
	return 0;
}

int kv_image_layout_of(const struct cache_geometry *g, const struct tier_counts *n,
                       struct kv_image_layout *lo, char *err, size_t err_len)
{
	struct cache_tiers t;
	int rc = cache_geometry_tiers_of(g, &t, err, err_len);
	memset(lo, 0, sizeof(*lo));
	if (rc)
		return rc;
	return layout_with_tiers(g, &t, n, lo, err, err_len);
}

static bool layer_slides(const struct cache_geometry *g, int l)
{
	return g->layer[l].own && g->layer[l].swa;
}

/* The global layers' tiers and the sliding layers' (n_swa 0: none), each
 * the same in every layer of its kind. */
static int plan_tiers(const struct cache_geometry *g, struct cache_tiers *tg,
                      struct cache_tiers *ts, int *n_swa, char *err, size_t err_len)
{
	struct cache_layout lo;
	int n_global = 0, rc = cache_geometry_check(g, err, err_len);
	*n_swa = 0;
	for (int l = 0; !rc && l < g->n_layers; l++) {
		bool swa = layer_slides(g, l);
		struct cache_tiers *t = swa ? ts : tg;
		int *seen = swa ? n_swa : &n_global;
		cache_geometry_layer_layout(g, l, &lo);
		if ((*seen)++ == 0)
			*t = lo.t;
		else if (memcmp(t, &lo.t, sizeof(*t)) != 0)
			rc = err_set(
			    err, err_len, -ENOTSUP,
			    "cache image: layer %d's span differs from the other %s layers'", l,
			    swa ? "sliding" : "global");
	}
	return rc;
}

int kv_image_plan_of(const struct cache_geometry *g, const struct tier_counts *n,
                     const struct tier_counts *n_swa, struct kv_image_plan *p, char *err,
                     size_t err_len)
{
	struct cache_tiers tg, ts;
	int swa_layers, rc;
	memset(p, 0, sizeof(*p));
	memset(&tg, 0, sizeof(tg));
	memset(&ts, 0, sizeof(ts));
	if ((rc = plan_tiers(g, &tg, &ts, &swa_layers, err, err_len)))
		return rc;
	int global_layers = g->n_layers - swa_layers;
	if (global_layers > 0 && (rc = layout_with_tiers(g, &tg, n, &p->global, err, err_len)))
		return rc;
	if (swa_layers > 0) {
		if ((rc = layout_with_tiers(g, &ts, n_swa, &p->swa, err, err_len)))
			return rc;
		if (n_swa->n_seen != n->n_seen || n_swa->moved != 0)
			return err_set(
			    err, err_len, -EINVAL,
			    "cache image: the sliding layers' counts (n_seen %llu, moved "
			    "%llu) are not of the stream of %llu tokens with nothing aged",
			    (unsigned long long)n_swa->n_seen, (unsigned long long)n_swa->moved,
			    (unsigned long long)n->n_seen);
	}
	p->total_bytes =
	    (size_t)global_layers * p->global.layer_bytes + (size_t)swa_layers * p->swa.layer_bytes;
	return 0;
}

const struct kv_image_layout *kv_image_plan_layer(const struct kv_image_plan *p,
                                                  const struct cache_geometry *g, int l,
                                                  size_t *offset)
{
	*offset = 0;
	for (int i = 0; i < l; i++)
		*offset += layer_slides(g, i) ? p->swa.layer_bytes : p->global.layer_bytes;
	return layer_slides(g, l) ? &p->swa : &p->global;
}

size_t kv_image_max_bytes(const struct cache_geometry *g)
{
	struct cache_layout lo;
	size_t total = 0;
	if (cache_geometry_check(g, NULL, 0))
		return 0;
	/* every tier at capacity at once: more than any reachable state holds */
	size_t n_kv = (size_t)g->n_kv_heads, d = (size_t)g->head_dim;
	for (int l = 0; l < g->n_layers; l++) {
		cache_geometry_layer_layout(g, l, &lo);
		const struct cache_tiers *t = &lo.t;
		size_t gs = (size_t)t->group;
		size_t sink_row = t->sink_quant ? t->code_row : t->fp_row;
		size_t sinks = 2 * n_kv * (size_t)t->sink *
		               (sink_row + (t->sink_quant ? 2 * sizeof(float) : 0));
		size_t group = t->group > 0
		                   ? 2 * n_kv * gs * t->code_row + n_kv * 2 * d * sizeof(float) +
		                         n_kv * gs * 2 * sizeof(float)
		                   : 0;
		size_t fp = 2 * n_kv * (size_t)(t->stage + t->hot) * t->fp_row;
		total += sinks + (size_t)t->n_groups * group + fp;
	}
	return total;
}

void kv_image_free(struct kv_image *im)
{
	if (!im)
		return;
	free(im->data);
	im->data = NULL;
	im->bytes = 0;
}
