/* Shared prefixes of the CUDA backend (engine/backend.h: prefix_new ..
 * prefix_image): a pinned prompt's sink tier copied once, device to device,
 * into a block of the KV arena that no session writes, and sessions whose
 * view reads their sinks from it.  The block has the layout of a session's
 * sink block (cuda/cuda_kv.h) and sits at the low end of the arena with the
 * sessions' own sink blocks, so the kernels and the L2 sink window need
 * nothing new.  What a shared session does besides (stats, traces,
 * snapshots) stays in backend_cuda.c; this file does not run forwards. */
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_impl.h"

/* Sharing needs one global kind of layer and full-precision sinks: what
 * cache_geometry_pin makes of a pinned stream. */
static int prefix_eligible(const struct backend_session *s, char *err, size_t err_len)
{
	if (s->swa)
		return err_set(err, err_len, -ENOTSUP,
		               "cuda backend: a shared prefix needs every layer global (this "
		               "geometry has the model's sliding-window layers)");
	if (s->sh.sink_quant || s->sh.caps.sink < 1)
		return err_set(err, err_len, -ENOTSUP,
		               "cuda backend: a shared prefix needs full-precision sinks "
		               "(protect_sinks or quantization off) and sink_keep_count >= 1 "
		               "(it is %d)",
		               s->sh.caps.sink);
	return 0;
}

int cudabe_prefix_new(struct backend *be, const struct backend_session *s,
                      struct backend_prefix **out, size_t *bytes, char *err, size_t err_len)
{
	struct cuda_backend *c = cuda_of(be);
	*out = NULL;
	int rc = prefix_eligible(s, err, err_len);
	if (rc)
		return rc;
	const struct tier_counts *t = &s->st.t;
	int S = s->sh.caps.sink;
	if (t->n_seen != (uint64_t)S || t->n_sink != S || cuda_kv_resident(&s->sh, &s->st) != S)
		return err_set(err, err_len, -EINVAL,
		               "cuda backend: a prefix is made from a session holding exactly its "
		               "%d sink tokens (it has seen %llu, %d in its sinks)",
		               S, (unsigned long long)t->n_seen, t->n_sink);
	struct backend_prefix *p = calloc(1, sizeof(*p));
	if (!p)
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of memory for a prefix");
	p->sh = s->sh;
	p->bytes = cache_geometry_sink_bytes(&s->sh.g);
	uint64_t block = s->sh.sink_layer_bytes * (uint64_t)s->sh.g.n_layers;
	if (cuda_arena_alloc(&c->arena, block, true, &p->off)) {
		free(p);
		return err_set(err, err_len, -ENOSPC,
		               "cuda backend: the KV arena (%llu MiB, %llu MiB in use) has no room "
		               "for a shared prefix of %llu KiB",
		               (unsigned long long)(c->arena.size >> 20),
		               (unsigned long long)(cuda_arena_used(&c->arena) >> 20),
		               (unsigned long long)(block >> 10));
	}
	rc = (int)cudaMemcpyAsync(c->arena_d + p->off, cuda_kv_sink_layer(&s->view, 0), block,
	                          cudaMemcpyDeviceToDevice, c->stream);
	rc = rc ? rc : (int)cudaStreamSynchronize(c->stream);
	if (rc) {
		cudabe_prefix_free(be, p);
		return err_set(err, err_len, -EIO, "cuda backend: copying a prefix: %s",
		               cudaGetErrorString((cudaError_t)rc));
	}
	cudabe_l2_window_update(c);
	*bytes = p->bytes;
	*out = p;
	return 0;
}

void cudabe_prefix_free(struct backend *be, struct backend_prefix *p)
{
	if (!p)
		return;
	cuda_arena_free(&cuda_of(be)->arena, p->off);
	cudabe_l2_window_update(cuda_of(be));
	free(p);
}

int cudabe_session_new_shared(struct backend *be, const struct backend_prefix *p,
                              struct backend_session **out, char *err, size_t err_len)
{
	*out = NULL;
	return cudabe_session_open(cuda_of(be), &p->sh.g, p, out, err, err_len);
}

/* The first n rows of every layer of p into an image of a pure-sink cache:
 * one download of the block, then each layer's rows from slot 0. */
int cudabe_prefix_image(struct backend *be, const struct backend_prefix *p, int n,
                        struct kv_image *out, char *err, size_t err_len)
{
	struct cuda_backend *c = cuda_of(be);
	const struct cuda_kv_shape *sh = &p->sh;
	struct kv_image_plan plan;
	struct tier_counts none = {0};
	memset(out, 0, sizeof(*out));
	if (n < 1 || n > sh->caps.sink)
		return err_set(err, err_len, -EINVAL,
		               "cuda backend: a prefix image holds 1 to %d rows (asked %d)",
		               sh->caps.sink, n);
	out->n = (struct tier_counts){.n_seen = (uint64_t)n, .n_sink = n};
	int rc = kv_image_plan_of(&sh->g, &out->n, &none, &plan, err, err_len);
	if (rc)
		return rc;
	size_t block = sh->sink_layer_bytes * (size_t)sh->g.n_layers;
	unsigned char *stage = malloc(block);
	out->data = malloc(plan.total_bytes);
	if (!stage || !out->data) {
		rc = err_set(err, err_len, -ENOMEM,
		             "cuda backend: out of memory for a %zu-byte prefix image",
		             plan.total_bytes);
		goto out;
	}
	rc = (int)cudaMemcpyAsync(stage, c->arena_d + p->off, block, cudaMemcpyDeviceToHost,
	                          c->stream);
	rc = rc ? rc : (int)cudaStreamSynchronize(c->stream);
	if (rc) {
		rc = err_set(err, err_len, -EIO, "cuda backend: prefix image: %s",
		             cudaGetErrorString((cudaError_t)rc));
		goto out;
	}
	out->bytes = plan.total_bytes;
	struct cuda_kv_state st;
	cuda_kv_image_state(&out->n, &st);
	for (int l = 0; l < sh->g.n_layers; l++) {
		size_t at;
		const struct kv_image_layout *lo = kv_image_plan_layer(&plan, &sh->g, l, &at);
		/* a pure-sink image reads nothing of the window block */
		cuda_kv_image_layer_out(sh, &st, lo, stage + (size_t)l * sh->sink_layer_bytes, NULL,
		                        out->data + at);
	}
out:
	free(stage);
	if (rc)
		kv_image_free(out);
	return rc;
}

int cudabe_prefix_check_image(struct cuda_backend *c, const struct backend_prefix *p,
                              const struct kv_image *in, char *err, size_t err_len)
{
	int S = p->sh.caps.sink;
	if (in->n.n_sink != S)
		return err_set(err, err_len, -EINVAL,
		               "cuda backend: a session sharing a prefix of %d tokens takes images "
		               "of at least those %d sink tokens (this one has %d)",
		               S, S, in->n.n_sink);
	struct kv_image mine;
	struct kv_image_plan plan, pplan;
	struct tier_counts none = {0};
	int rc = cudabe_prefix_image(&c->base, p, S, &mine, err, err_len);
	rc = rc ? rc : kv_image_plan_of(&p->sh.g, &in->n, &none, &plan, err, err_len);
	rc = rc ? rc : kv_image_plan_of(&p->sh.g, &mine.n, &none, &pplan, err, err_len);
	for (int l = 0; !rc && l < p->sh.g.n_layers; l++) {
		size_t at, pat;
		kv_image_plan_layer(&plan, &p->sh.g, l, &at);
		const struct kv_image_layout *plo = kv_image_plan_layer(&pplan, &p->sh.g, l, &pat);
		/* an image's layer starts with its sinks: the pure-sink layer's bytes */
		if (memcmp(in->data + at, mine.data + pat, plo->layer_bytes) != 0)
			rc = err_set(
			    err, err_len, -EINVAL,
			    "cuda backend: the image's sink rows of layer %d differ from the "
			    "shared prefix's: it was not computed from the same prompt under "
			    "the same geometry",
			    l);
	}
	kv_image_free(&mine);
	return rc;
}
