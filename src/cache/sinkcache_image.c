/* The cpu cache to and from its canonical image (cache/kvimage.h): rings are
 * unrolled into stream order on export, and an import lays the tokens out
 * from slot 0 as a cache that had just seen them would hold them.  A cache
 * sharing its sinks (sinkcache_new_shared) exports them from the prefix and
 * on import checks them against it instead of writing it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvimage.h"
#include "cache/sinkcache_impl.h"
#include "util/errbuf.h"

static unsigned char *row_at(unsigned char *base, size_t row_bytes, int cap, int head, int slot)
{
	return base + ((size_t)head * (size_t)cap + (size_t)slot) * row_bytes;
}

/* Copies between a layer's tiers and its part of an image: to the image
 * when `out`, else from it.  Import writes go through the populate maps;
 * the sinks of a shared cache are never written (checked equal before). */
static void layer_copy(struct sinkcache *c, struct kv_layer *L, const struct kv_image_layout *lo,
                       unsigned char *img, bool out)
{
	int n_kv = c->g.n_kv_heads, S = L->caps.sink, ns = c->prefix && !out ? 0 : L->t.n_sink;
	size_t d = (size_t)c->g.head_dim;
#define MOVE(pop, mem, im, bytes)                                                                \
	do {                                                                                     \
		if (out) {                                                                       \
			memcpy((im), (mem), (bytes));                                            \
		} else {                                                                         \
			kv_populate_range((pop), (mem), (bytes));                                \
			memcpy((mem), (im), (bytes));                                            \
		}                                                                                \
	} while (0)
	for (int h = 0; h < n_kv && ns > 0; h++) {
		size_t run = (size_t)ns * lo->sink_row, at = (size_t)h * run;
		MOVE(&c->front_pop, row_at(L->sink_k, lo->sink_row, S, h, 0), img + lo->off_sink_k + at,
		     run);
		MOVE(&c->front_pop, row_at(L->sink_v, lo->sink_row, S, h, 0), img + lo->off_sink_v + at,
		     run);
		if (!lo->sink_quant)
			continue;
		size_t prun = (size_t)ns * 2 * sizeof(float), pat = (size_t)h * prun;
		MOVE(&c->front_pop, L->sink_kp + (size_t)h * (size_t)S * 2, img + lo->off_sink_kp + pat,
		     prun);
		MOVE(&c->front_pop, L->sink_vp + (size_t)h * (size_t)S * 2, img + lo->off_sink_vp + pat,
		     prun);
	}
	size_t gs = (size_t)L->caps.group, nk = (size_t)n_kv;
	for (int i = 0; i < L->t.n_groups; i++) {
		size_t slot = (size_t)kv_ring_slot(&L->groups, i);
		unsigned char *g = img + lo->off_groups + (size_t)i * lo->group_bytes;
		size_t codes = nk * gs * c->code_row;
		MOVE(&L->mem_pop, L->gk + slot * codes, g + lo->grp_off_k, codes);
		MOVE(&L->mem_pop, L->gv + slot * codes, g + lo->grp_off_v, codes);
		MOVE(&L->mem_pop, L->gkp + slot * nk * 2 * d, g + lo->grp_off_kp,
		     nk * 2 * d * sizeof(float));
		MOVE(&L->mem_pop, L->gvp + slot * nk * gs * 2, g + lo->grp_off_vp,
		     nk * gs * 2 * sizeof(float));
	}
	size_t nfp = (size_t)(L->t.n_stage + L->t.n_hot);
	for (int h = 0; h < n_kv; h++)
		for (int i = 0; i < L->t.n_stage + L->t.n_hot; i++) {
			bool staged = i < L->t.n_stage;
			const struct kv_ring *r = staged ? &L->stage : &L->hot;
			int slot = kv_ring_slot(r, staged ? i : i - L->t.n_stage);
			size_t at = ((size_t)h * nfp + (size_t)i) * c->fp_row;
			MOVE(&c->front_pop, row_at(staged ? L->st_k : L->hot_k, c->fp_row, r->cap, h, slot),
			     img + lo->off_fp_k + at, c->fp_row);
			MOVE(&c->front_pop, row_at(staged ? L->st_v : L->hot_v, c->fp_row, r->cap, h, slot),
			     img + lo->off_fp_v + at, c->fp_row);
		}
#undef MOVE
}

/* The counts of the first global and the first sliding layer (each kind's
 * layers hold the same between forward passes). */
static void image_counts(const struct sinkcache *c, struct kv_image *im)
{
	im->n = c->layers[c->ref_layer].t;
	for (int l = 0; l < c->g.n_layers; l++)
		if (c->g.layer[l].own && c->g.layer[l].swa) {
			im->n_swa = c->layers[l].t;
			break;
		}
}

int sinkcache_export(const struct sinkcache *c, struct kv_image *im, char *err, size_t err_len)
{
	struct kv_image_plan plan;
	memset(im, 0, sizeof(*im));
	if (c->caps_max.anchor > 0)
		return err_set(err, err_len, -ENOTSUP,
		               "sink cache: a snapshot does not carry anchor tokens "
		               "(inference.cache.anchors.enabled is on for this session)");
	image_counts(c, im);
	for (int l = 0; l < c->g.n_layers; l++)
		if (c->layers[l].t.n_seen != im->n.n_seen)
			return err_set(err, err_len, -EINVAL,
			               "sink cache: cannot export between layers (layer %d at %llu "
			               "tokens, layer %d at %llu)",
			               l, (unsigned long long)c->layers[l].t.n_seen, c->ref_layer,
			               (unsigned long long)im->n.n_seen);
	int rc = kv_image_plan_of(&c->g, &im->n, &im->n_swa, &plan, err, err_len);
	if (rc)
		return rc;
	im->data = malloc(plan.total_bytes > 0 ? plan.total_bytes : 1);
	if (!im->data)
		return err_set(err, err_len, -ENOMEM,
		               "sink cache: out of memory for a %zu-byte image", plan.total_bytes);
	im->bytes = plan.total_bytes;
	for (int l = 0; l < c->g.n_layers; l++) {
		size_t at;
		const struct kv_image_layout *lo = kv_image_plan_layer(&plan, &c->g, l, &at);
		layer_copy((struct sinkcache *)c, &c->layers[l], lo, im->data + at, true);
	}
	return 0;
}

/* Before an import into a cache that shares its sinks: the image holds the
 * S sinks, each layer's rows byte-equal to the prefix's. */
static int import_shared_check(const struct sinkcache *c, const struct kv_image *im,
                               const struct kv_image_plan *plan, char *err, size_t err_len)
{
	int S = c->layers[0].caps.sink;
	if (im->n.n_sink != S)
		return err_set(err, err_len, -EINVAL,
		               "sink cache: image holds %d sink tokens; a cache sharing a prefix "
		               "holds its %d",
		               im->n.n_sink, S);
	for (int l = 0; l < c->g.n_layers; l++) {
		const struct kv_layer *L = &c->layers[l];
		size_t at, run = (size_t)c->g.n_kv_heads * (size_t)S * c->fp_row;
		const struct kv_image_layout *lo = kv_image_plan_layer(plan, &c->g, l, &at);
		if (memcmp(im->data + at + lo->off_sink_k, L->sink_k, run) ||
		    memcmp(im->data + at + lo->off_sink_v, L->sink_v, run))
			return err_set(err, err_len, -EINVAL,
			               "sink cache: image's sink rows of layer %d differ from the "
			               "shared prefix's (another system prompt or model)",
			               l);
	}
	return 0;
}

int sinkcache_import(struct sinkcache *c, const struct kv_image *im, char *err, size_t err_len)
{
	struct kv_image_plan plan;
	if (c->caps_max.anchor > 0)
		return err_set(err, err_len, -ENOTSUP,
		               "sink cache: a snapshot cannot restore into a cache with anchor "
		               "tokens (inference.cache.anchors.enabled)");
	int rc = kv_image_plan_of(&c->g, &im->n, &im->n_swa, &plan, err, err_len);
	if (rc)
		return rc;
	if (im->bytes != plan.total_bytes)
		return err_set(err, err_len, -EINVAL,
		               "sink cache: image holds %zu bytes, its counts need %zu", im->bytes,
		               plan.total_bytes);
	/* empty: a shared cache holds its shared sinks and nothing else */
	for (int l = 0; l < c->g.n_layers; l++) {
		uint64_t empty = c->prefix ? (uint64_t)c->layers[l].caps.sink : 0;
		if (c->layers[l].t.n_seen != empty)
			return err_set(err, err_len, -EBUSY,
			               "sink cache: import needs an empty cache (layer %d holds %llu "
			               "tokens)",
			               l, (unsigned long long)c->layers[l].t.n_seen);
	}
	if (c->prefix && (rc = import_shared_check(c, im, &plan, err, err_len)))
		return rc;
	for (int l = 0; l < c->g.n_layers; l++) {
		struct kv_layer *L = &c->layers[l];
		size_t at;
		const struct kv_image_layout *lo = kv_image_plan_layer(&plan, &c->g, l, &at);
		L->t = lo == &plan.swa ? im->n_swa : im->n;
		L->hot.head = L->stage.head = L->groups.head = 0;
		layer_copy(c, L, lo, im->data + at, false);
		kv_layer_set_query_pos(c, L);
	}
	return 0;
}
