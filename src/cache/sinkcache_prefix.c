/* Shared sink tiers of the CPU cache: a read-only copy of one cache's whole
 * sink tier (a pinned prefix) that caches of the same geometry read in place
 * (sinkcache_new_shared), and the canonical image of its first n tokens for
 * a cache that copies rather than shares.  Sharing needs no copy-on-write:
 * nothing writes sinks once they are full, and a revision never reaches
 * them.  This file does not know which streams share a prefix or when it may
 * go: the scheduler's prefix store decides that. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvimage.h"
#include "cache/sinkcache.h"
#include "cache/sinkcache_impl.h"
#include "util/errbuf.h"
#include "util/pages.h"

/* Whether c holds exactly its S sinks in every layer. */
static int prefix_source_full(const struct sinkcache *c, char *err, size_t err_len)
{
	for (int l = 0; l < c->g.n_layers; l++) {
		const struct kv_layer *L = &c->layers[l];
		int S = L->caps.sink;
		if (L->t.n_seen != (uint64_t)S || L->t.n_sink != S || kv_layer_window(c, L) != 0 ||
		    L->anc.n != 0)
			return err_set(
			    err, err_len, -EINVAL,
			    "sink cache: a shared prefix is made from a cache holding "
			    "exactly its %d sinks; layer %d has seen %llu tokens (%d sinks, "
			    "%d window, %d anchors)",
			    S, l, (unsigned long long)L->t.n_seen, L->t.n_sink,
			    kv_layer_window(c, L), L->anc.n);
	}
	return 0;
}

int sinkcache_prefix_new(const struct sinkcache *c, struct sinkcache_prefix **out, size_t *bytes,
                         char *err, size_t err_len)
{
	*out = NULL;
	int rc = cache_geometry_share_check(&c->g, err, err_len);
	if (rc || (rc = prefix_source_full(c, err, err_len)))
		return rc;
	struct sinkcache_prefix *p = calloc(1, sizeof(*p));
	if (!p)
		return err_set(err, err_len, -ENOMEM, "sink cache: out of memory for a prefix");
	p->g = c->g;
	p->n_sink = c->layers[0].caps.sink;
	size_t half = (size_t)c->g.n_kv_heads * (size_t)p->n_sink * c->fp_row;
	p->layer_bytes = 2 * half;
	p->bytes = p->layer_bytes * (size_t)c->g.n_layers;
	/* every decode step of every sharing session reads all of it */
	p->mem = pages_map(p->bytes, p->bytes >= PAGES_HUGE_BYTES);
	if (!p->mem) {
		size_t want = p->bytes;
		free(p);
		return err_set(err, err_len, -ENOMEM,
		               "sink cache: out of memory for a %zu-byte shared prefix", want);
	}
	for (int l = 0; l < c->g.n_layers; l++) {
		memcpy(kv_prefix_keys(p, l), c->layers[l].sink_k, half);
		memcpy(kv_prefix_values(p, l), c->layers[l].sink_v, half);
	}
	*bytes = p->bytes;
	*out = p;
	return 0;
}

void sinkcache_prefix_free(struct sinkcache_prefix *p)
{
	if (!p)
		return;
	pages_unmap(p->mem, p->bytes);
	free(p);
}

const struct cache_geometry *sinkcache_prefix_geometry(const struct sinkcache_prefix *p)
{
	return &p->g;
}

int sinkcache_prefix_image(const struct sinkcache_prefix *p, int n, struct kv_image *out, char *err,
                           size_t err_len)
{
	struct kv_image_plan plan;
	struct tier_counts none;
	memset(out, 0, sizeof(*out));
	memset(&none, 0, sizeof(none));
	if (n < 1 || n > p->n_sink)
		return err_set(err, err_len, -EINVAL,
		               "sink cache: prefix image of %d tokens (allowed 1..%d)", n,
		               p->n_sink);
	out->n.n_seen = (uint64_t)n;
	out->n.n_sink = n;
	int rc = kv_image_plan_of(&p->g, &out->n, &none, &plan, err, err_len);
	if (rc)
		return rc;
	out->data = malloc(plan.total_bytes);
	if (!out->data)
		return err_set(err, err_len, -ENOMEM,
		               "sink cache: out of memory for a %zu-byte image", plan.total_bytes);
	out->bytes = plan.total_bytes;
	/* per layer and kv head, the first n of the head's S rows */
	for (int l = 0; l < p->g.n_layers; l++) {
		size_t at;
		const struct kv_image_layout *lo = kv_image_plan_layer(&plan, &p->g, l, &at);
		size_t run = (size_t)n * lo->sink_row, stride = (size_t)p->n_sink * lo->sink_row;
		for (int h = 0; h < p->g.n_kv_heads; h++) {
			memcpy(out->data + at + lo->off_sink_k + (size_t)h * run,
			       kv_prefix_keys(p, l) + (size_t)h * stride, run);
			memcpy(out->data + at + lo->off_sink_v + (size_t)h * run,
			       kv_prefix_values(p, l) + (size_t)h * stride, run);
		}
	}
	return 0;
}
