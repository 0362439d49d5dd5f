/* The CUDA backend: the Llama forward pass (model/arch.h) over one batch of
 * tokens from many sessions, with weights, activations and every session's
 * tiered KV cache in device memory.
 *
 * Projections run for the whole batch at once with cublasGemmEx (weights
 * and GEMM inputs in bf16/f16 with fp32 accumulation on tensor cores, or
 * fp32); residual adds are GEMMs with beta = 1.  Norms, RoPE, SwiGLU and the
 * cache are kernels in kernels.cu / kv_kernels.cu.  The cache decisions of
 * every token (tier, eviction, quantization, positions) are planned on the
 * host by cuda_kvplan.c, exactly as the CPU cache takes them; the tokens of
 * a batch are attended in waves: wave w holds the w-th token of every
 * session in the batch, so that one launch attends one token of many
 * sessions and a session's tokens still see the cache in stream order.
 * RoPE angles are computed on the host in double (rope_cos_sin) and shipped
 * with the batch.
 *
 * Device memory: weights, a workspace grown with the batch, and one KV arena
 * sized by the budget (cuda_arena.c: sink tiers low, window tiers high).
 * Every CUDA failure becomes an error message; nothing aborts.  It does not
 * sample, schedule or tokenize; one forward at a time (the engine thread). */
#include "util/tuning.h"
#include "backend_cuda.h"

#include <stdlib.h>
#include <string.h>

#include "backend_cuda_impl.h"
#include "util/log.h"

/* ============================================================ sessions */

void cudabe_l2_window_update(struct cuda_backend *c)
{
	if (!c->l2_sinks)
		return;
	cudabe_graphs_clear(c); /* captured kernels keep the window they saw */
	cudaStreamAttrValue attr;
	memset(&attr, 0, sizeof(attr));
	uint64_t end = cuda_arena_low_end(&c->arena);
	attr.accessPolicyWindow.base_ptr = c->arena_d;
	attr.accessPolicyWindow.num_bytes = end < c->l2_max_window ? end : c->l2_max_window;
	attr.accessPolicyWindow.hitRatio = 1.0f;
	attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
	attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
	if (cudaStreamSetAttribute(c->stream, cudaStreamAttributeAccessPolicyWindow, &attr) !=
	    cudaSuccess) {
		cudaGetLastError();
		log_msg(c->log, LOG_WARN, "cuda", "L2 sink window not applied");
	}
}

static void swa_layers_free(struct cuda_backend *c, struct cuda_swa_layers *w)
{
	if (!w)
		return;
	if (w->view.win_base)
		cuda_arena_free(&c->arena, w->win_off);
	free(w->freq_hi);
	free(w->freq_lo);
	free(w->slides);
	free(w->slot);
	free(w);
}

static void session_release(struct cuda_backend *c, struct backend_session *s)
{
	swa_layers_free(c, s->swa);
	if (s->has_sink)
		cuda_arena_free(&c->arena, s->sink_off);
	cuda_arena_free(&c->arena, s->win_off);
	cuda_kv_anchors_free(&s->anc);
	tier_trace_free(s->trace);
	free(s->freq_hi);
	free(s->freq_lo);
	free(s);
}

static int session_check_geometry(const struct cuda_backend *c, const struct cache_geometry *g,
                                  char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	int rc = backend_geometry_fits_model(c->base.model, g, err, err_len);
	if (rc)
		return rc;
	if (g->rope_neox != c->neox)
		return err_set(
		    err, err_len, -EINVAL,
		    "cache geometry: rope_dim %d / neox %d do not match the model (%d / %d)",
		    g->rope_dim, (int)g->rope_neox, hp->rope_dim, (int)c->neox);
	if (g->head_dim > CUDA_KV_MAX_HEAD_DIM)
		return err_set(err, err_len, -ENOTSUP, "cuda backend: head_dim %d is above %d",
		               g->head_dim, CUDA_KV_MAX_HEAD_DIM);
	for (int l = 0; l < g->n_layers; l++)
		if (g->layer[l].own && !g->layer[l].swa)
			return err_set(err, err_len, -ENOTSUP,
			               "cuda backend: layer %d keeps a span of its own that is not "
			               "the model's sliding window; the cpu backend holds it",
			               l);
	if (cache_geometry_per_layer(g) && g->anchor_max > 0)
		return err_set(err, err_len, -ENOTSUP,
		               "cuda backend: anchors beside the model's sliding-window layers are "
		               "not supported yet (inference.cache.anchors.enabled); the cpu "
		               "backend holds them");
	return 0;
}

/* The sliding layers of a session of geometry g (their blocks after the
 * global layers'); s->swa set before anything can fail, for the release. */
static int swa_layers_new(struct cuda_backend *c, struct backend_session *s,
                          const struct cache_geometry *g, char *err, size_t err_len)
{
	struct cuda_swa_layers *w = calloc(1, sizeof(*w));
	if (!(s->swa = w))
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of memory for a session");
	w->g = *g;
	/* the kind's geometry in the shape's own copy, then the shape from it */
	struct cache_geometry *kind = &w->sh.g;
	int n_swa = cuda_kv_kind_geometry(g, true, kind), rc;
	if ((rc = cuda_kv_shape_init(kind, &w->sh, err, err_len)))
		return rc;
	int half = g->rope_dim / 2 > 0 ? g->rope_dim / 2 : 1, n_global = 0, n_slide = 0;
	w->freq_hi = calloc((size_t)half, sizeof(double));
	w->freq_lo = calloc((size_t)half, sizeof(double));
	w->slides = calloc((size_t)g->n_layers, 1);
	w->slot = calloc((size_t)g->n_layers, sizeof(int32_t));
	if (!w->freq_hi || !w->freq_lo || !w->slides || !w->slot)
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of memory for a session");
	for (int l = 0; l < g->n_layers; l++) {
		w->slides[l] = g->layer[l].own && g->layer[l].swa;
		w->slot[l] = w->slides[l] ? n_slide++ : n_global++;
	}
	uint64_t win_b = w->sh.win_layer_bytes * (uint64_t)n_swa;
	if (cuda_arena_alloc(&c->arena, win_b, false, &w->win_off))
		return err_set(err, err_len, -ENOSPC,
		               "cuda backend: the KV arena (%llu MiB, %llu MiB in use) has no room "
		               "for the %d sliding-window layers of a session (%llu KiB)",
		               (unsigned long long)(c->arena.size >> 20),
		               (unsigned long long)(cuda_arena_used(&c->arena) >> 20), n_swa,
		               (unsigned long long)(win_b >> 10));
	cache_geometry_rope_freqs(&w->sh.g, w->freq_hi, w->freq_lo); /* the kind's RoPE */
	cuda_kv_state_init(&w->st);
	w->view = w->sh.layout;
	w->view.sink_base = (uint64_t)(uintptr_t)c->arena_d;
	w->view.win_base = (uint64_t)(uintptr_t)(c->arena_d + w->win_off);
	return 0;
}

int cudabe_session_open(struct cuda_backend *c, const struct cache_geometry *g,
                        const struct backend_prefix *p, struct backend_session **out, char *err,
                        size_t err_len)
{
	*out = NULL;
	int rc = session_check_geometry(c, g, err, err_len);
	if (rc)
		return rc;
	struct backend_session *s = calloc(1, sizeof(*s));
	if (!s)
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of memory for a session");
	/* with sliding layers the blocks below hold the global layers only:
	 * the shape of their kind, made in the shape's own copy */
	bool per_layer = cache_geometry_per_layer(g);
	int n_global = per_layer ? cuda_kv_kind_geometry(g, false, &s->sh.g) : g->n_layers;
	rc = cuda_kv_shape_init(per_layer ? &s->sh.g : g, &s->sh, err, err_len);
	if (rc) {
		free(s);
		return rc;
	}
	int half = g->rope_dim / 2 > 0 ? g->rope_dim / 2 : 1;
	s->freq_hi = calloc((size_t)half, sizeof(double));
	s->freq_lo = calloc((size_t)half, sizeof(double));
	/* a shared session's sinks are the prefix's block */
	uint64_t sink_b = p ? 0 : s->sh.sink_layer_bytes * (uint64_t)n_global;
	uint64_t win_b = s->sh.win_layer_bytes * (uint64_t)n_global;
	win_b = win_b > 0 ? win_b : 1; /* every layer slides: a block all the same */
	rc = !s->freq_hi || !s->freq_lo ? -ENOMEM : 0;
	if (!rc)
		rc = cuda_kv_anchors_init(&s->sh, &s->anc, NULL, 0);
	if (!rc && sink_b > 0) {
		rc = cuda_arena_alloc(&c->arena, sink_b, true, &s->sink_off);
		s->has_sink = rc == 0;
	}
	if (!rc)
		rc = cuda_arena_alloc(&c->arena, win_b, false, &s->win_off);
	if (rc) {
		if (s->has_sink)
			cuda_arena_free(&c->arena, s->sink_off);
		cuda_kv_anchors_free(&s->anc);
		free(s->freq_hi);
		free(s->freq_lo);
		free(s);
		return err_set(
		    err, err_len, rc == -ENOMEM ? -ENOMEM : -ENOSPC,
		    "cuda backend: the KV arena (%llu MiB, %llu MiB in use) has no room for a "
		    "session of %llu KiB",
		    (unsigned long long)(c->arena.size >> 20),
		    (unsigned long long)(cuda_arena_used(&c->arena) >> 20),
		    (unsigned long long)((sink_b + win_b) >> 10));
	}
	cache_geometry_rope_freqs(g, s->freq_hi, s->freq_lo);
	cuda_kv_state_init(&s->st);
	s->view = s->sh.layout;
	s->view.sink_base = (uint64_t)(uintptr_t)(c->arena_d + (s->has_sink ? s->sink_off : 0));
	if (p) { /* the state right after the prefix's S sink tokens */
		struct tier_counts n = {.n_seen = (uint64_t)s->sh.caps.sink,
		                        .n_sink = s->sh.caps.sink};
		cuda_kv_image_state(&n, &s->st);
		s->view.sink_base = (uint64_t)(uintptr_t)(c->arena_d + p->off);
		s->prefix = p;
	}
	s->view.win_base = (uint64_t)(uintptr_t)(c->arena_d + s->win_off);
	s->batch.slot = -1;
	if (per_layer && (rc = swa_layers_new(c, s, g, err, err_len))) {
		session_release(c, s);
		return rc;
	}
	cudabe_l2_window_update(c);
	*out = s;
	return 0;
}

static int cuda_session_new(struct backend *be, const struct cache_geometry *g,
                            struct backend_session **out, char *err, size_t err_len)
{
	return cudabe_session_open(cuda_of(be), g, NULL, out, err, err_len);
}

static void cuda_session_free(struct backend *be, struct backend_session *s)
{
	if (!s)
		return;
	session_release(cuda_of(be), s);
	cudabe_l2_window_update(cuda_of(be));
}

static int cuda_session_revise(struct backend *be, struct backend_session *s, size_t n_tokens,
                               char *err, size_t err_len)
{
	/* every layer must have the tokens: probe the sliding ones first */
	struct cuda_kv_state probe = s->swa ? s->swa->st : s->st;
	int rc = s->swa ? cuda_kv_plan_revise(&s->swa->sh, &probe, n_tokens, err, err_len) : 0;
	rc = rc ? rc : cuda_kv_plan_revise(&s->sh, &s->st, n_tokens, err, err_len);
	if (!rc && s->swa)
		s->swa->st = probe;
	for (int l = 0; !rc && s->trace && l < s->sh.g.n_layers; l++)
		tier_trace_revised(s->trace, l, s->st.t.n_seen);
	return rc;
}

static void cuda_session_stats(struct backend *be, const struct backend_session *s,
                               struct sinkcache_stats *out)
{
	cuda_kv_plan_stats(&s->sh, &s->st, out);
	cuda_kv_anchors_stats(&s->sh, &s->anc, out);
	if (s->prefix) { /* its S sinks are the prefix's rows, not its own */
		out->n_shared = out->n_sink;
		out->bytes_shared = s->prefix->bytes;
		out->bytes_bound -= s->prefix->bytes;
		out->bytes_resident -= s->prefix->bytes;
	}
	if (!s->swa)
		return;
	/* the plan counted every layer as its kind; each kind has its share */
	struct sinkcache_stats w;
	int n_swa = 0, L = s->swa->g.n_layers;
	for (int l = 0; l < L; l++)
		n_swa += s->swa->slides[l];
	cuda_kv_plan_stats(&s->swa->sh, &s->swa->st, &w);
	out->bytes_resident = out->bytes_resident / (size_t)L * (size_t)(L - n_swa) +
	                      w.bytes_resident / (size_t)L * (size_t)n_swa;
	out->bytes_bound = cache_geometry_bound_bytes(&s->swa->g);
	out->n_resident_swa = w.n_resident;
	if (n_swa == L) /* every layer slides: the figures are theirs */
		*out = (struct sinkcache_stats){.n_seen = w.n_seen,
		                                .n_resident = w.n_resident,
		                                .n_hot = w.n_hot,
		                                .bytes_resident = out->bytes_resident,
		                                .bytes_bound = out->bytes_bound,
		                                .evicted_compressed = w.evicted_compressed,
		                                .n_resident_swa = w.n_resident};
}

static bool cuda_session_can_append(struct backend *be, const struct backend_session *s, size_t n)
{
	return cuda_kv_can_append(&s->sh, &s->st, n) &&
	       (!s->swa || cuda_kv_can_append(&s->swa->sh, &s->swa->st, n));
}

/* ============================================================ traces */

/* A traced session's forwards run layer by layer and bring back each key's
 * weight, largest and mean over heads (backend_cuda_forward.c). */
static int cuda_session_trace_enable(struct backend *be, struct backend_session *s, bool on,
                                     char *err, size_t err_len)
{
	struct tier_caps most = s->sh.caps;
	if (s->swa && s->swa->sh.caps.window > most.window)
		most.window = s->swa->sh.caps.window; /* a trace's window scores fit every layer */
	return tier_trace_switch(&s->trace, &most, s->sh.g.n_layers, on, err, err_len);
}

static int cuda_session_trace(struct backend *be, const struct backend_session *s,
                              struct cache_trace_step *out, char *err, size_t err_len)
{
	const struct cache_geometry *g = s->swa ? &s->swa->g : &s->sh.g;
	if (out->n_layers != g->n_layers || !out->layers)
		return err_set(err, err_len, -EINVAL,
		               "cache trace: %d layers given for a cache of %d", out->n_layers,
		               g->n_layers);
	tier_trace_fill_step(s->trace, g, s->st.t.n_seen, out);
	for (int l = 0; l < g->n_layers; l++) {
		bool slides = s->swa && s->swa->slides[l];
		tier_trace_fill_layer(
		    s->trace, g, slides ? &s->swa->sh.caps : &s->sh.caps, l,
		    slides ? &s->swa->st.t : &s->st.t, s->anc.cap > 0 ? &s->anc.layer[l] : NULL,
		    s->prefix ? s->st.t.n_sink : 0, out->attention, &out->layers[l]);
		out->layers[l].learned_sink = be->model->layers[l].attn_sinks != NULL;
	}
	return 0;
}

/* ============================================================ snapshots */

/* A session's cache to and from its canonical image (cache/kvimage.h): one
 * layer at a time, both of its blocks go through a host staging buffer in
 * one copy each, and cuda_kvplan.c unrolls the rings there. */

/* Layer l's kind: its shape, state (or st_other for the global kind) and
 * the view that addresses its blocks. */
struct layer_kind {
	const struct cuda_kv_shape *sh;
	struct cuda_kv_view view;
	bool slides;
	bool shared_sink; /* its sinks are a shared prefix's: never written */
};

static struct layer_kind layer_kind_of(const struct backend_session *s, int l)
{
	bool slides = s->swa && s->swa->slides[l];
	return (struct layer_kind){.sh = slides ? &s->swa->sh : &s->sh,
	                           .view = cudabe_layer_view(s, l),
	                           .slides = slides,
	                           .shared_sink = s->prefix != NULL};
}

static int layer_download(struct cuda_backend *c, const struct layer_kind *k, int layer,
                          unsigned char *stage, char *err, size_t err_len)
{
	size_t sink_b = k->sh->sink_layer_bytes, win_b = k->sh->win_layer_bytes;
	if (sink_b > 0)
		CU_TRY(cudaMemcpyAsync(stage, cuda_kv_sink_layer(&k->view, layer), sink_b,
		                       cudaMemcpyDeviceToHost, c->stream),
		       "cache image download");
	CU_TRY(cudaMemcpyAsync(stage + sink_b, cuda_kv_win_layer(&k->view, layer), win_b,
	                       cudaMemcpyDeviceToHost, c->stream),
	       "cache image download");
	CU_TRY(cudaStreamSynchronize(c->stream), "cache image download");
	return 0;
}

static int layer_upload(struct cuda_backend *c, const struct layer_kind *k, int layer,
                        const unsigned char *stage, char *err, size_t err_len)
{
	size_t sink_b = k->sh->sink_layer_bytes, win_b = k->sh->win_layer_bytes;
	if (sink_b > 0 && !k->shared_sink)
		CU_TRY(cudaMemcpyAsync(cuda_kv_sink_layer(&k->view, layer), stage, sink_b,
		                       cudaMemcpyHostToDevice, c->stream),
		       "cache image upload");
	CU_TRY(cudaMemcpyAsync(cuda_kv_win_layer(&k->view, layer), stage + sink_b, win_b,
	                       cudaMemcpyHostToDevice, c->stream),
	       "cache image upload");
	CU_TRY(cudaStreamSynchronize(c->stream), "cache image upload");
	return 0;
}

/* The image plan of counts n (global layers) and n_swa (sliding layers),
 * each also checked against its kind's device rings. */
static int image_plan(const struct backend_session *s, const struct tier_counts *n,
                      const struct tier_counts *n_swa, struct kv_image_plan *plan, char *err,
                      size_t err_len)
{
	struct kv_image_layout lo;
	const struct cache_geometry *g = s->swa ? &s->swa->g : &s->sh.g;
	int rc = kv_image_plan_of(g, n, n_swa, plan, err, err_len);
	rc = rc ? rc : cuda_kv_image_layout(&s->sh, n, &lo, err, err_len);
	if (!rc && s->swa)
		rc = cuda_kv_image_layout(&s->swa->sh, n_swa, &lo, err, err_len);
	return rc;
}

/* The stage that holds one layer's blocks of either kind. */
static size_t stage_bytes(const struct backend_session *s)
{
	size_t b = s->sh.sink_layer_bytes + s->sh.win_layer_bytes;
	size_t w = s->swa ? s->swa->sh.sink_layer_bytes + s->swa->sh.win_layer_bytes : 0;
	return b > w ? b : w;
}

static int cuda_session_export(struct backend *be, const struct backend_session *s,
                               struct kv_image *out, char *err, size_t err_len)
{
	struct cuda_backend *c = cuda_of(be);
	struct kv_image_plan plan;
	memset(out, 0, sizeof(*out));
	if (s->sh.caps.anchor > 0) /* as the CPU cache says it */
		return err_set(err, err_len, -ENOTSUP,
		               "sink cache: a snapshot does not carry anchor tokens "
		               "(inference.cache.anchors.enabled is on for this session)");
	cuda_kv_image_counts(&s->st, &out->n);
	if (s->swa)
		cuda_kv_image_counts(&s->swa->st, &out->n_swa);
	int rc = image_plan(s, &out->n, &out->n_swa, &plan, err, err_len);
	if (rc)
		return rc;
	unsigned char *stage = malloc(stage_bytes(s));
	out->data = malloc(plan.total_bytes > 0 ? plan.total_bytes : 1);
	if (!stage || !out->data) {
		rc = err_set(err, err_len, -ENOMEM,
		             "cuda backend: out of memory for a %zu-byte cache image",
		             plan.total_bytes);
		goto out;
	}
	out->bytes = plan.total_bytes;
	for (int l = 0; l < s->sh.g.n_layers && !rc; l++) {
		struct layer_kind k = layer_kind_of(s, l);
		size_t at;
		const struct kv_image_layout *lo =
		    kv_image_plan_layer(&plan, s->swa ? &s->swa->g : &s->sh.g, l, &at);
		rc = layer_download(c, &k, l, stage, err, err_len);
		if (!rc)
			cuda_kv_image_layer_out(k.sh, k.slides ? &s->swa->st : &s->st, lo, stage,
			                        stage + k.sh->sink_layer_bytes, out->data + at);
	}
out:
	free(stage);
	if (rc)
		kv_image_free(out);
	return rc;
}

/* Checked in full before the first byte goes up; a failed upload leaves
 * the session empty (its state is set only at the end). */
static int cuda_session_import(struct backend *be, struct backend_session *s,
                               const struct kv_image *in, char *err, size_t err_len)
{
	struct cuda_backend *c = cuda_of(be);
	struct kv_image_plan plan;
	if (s->sh.caps.anchor > 0)
		return err_set(err, err_len, -ENOTSUP,
		               "sink cache: a snapshot cannot restore into a cache with anchor "
		               "tokens (inference.cache.anchors.enabled)");
	int rc = image_plan(s, &in->n, &in->n_swa, &plan, err, err_len);
	if (rc)
		return rc;
	if (in->bytes != plan.total_bytes || (plan.total_bytes > 0 && !in->data))
		return err_set(err, err_len, -EINVAL,
		               "cuda backend: cache image holds %zu bytes, its counts need %zu",
		               in->bytes, plan.total_bytes);
	/* a shared session is empty holding only its prefix */
	uint64_t fresh = s->prefix ? (uint64_t)s->sh.caps.sink : 0;
	if (s->st.t.n_seen != fresh || cuda_kv_resident(&s->sh, &s->st) != (int)fresh ||
	    (s->swa && s->swa->st.t.n_seen != 0))
		return err_set(err, err_len, -EBUSY,
		               "cuda backend: import needs an empty session (it holds %llu tokens)",
		               (unsigned long long)s->st.t.n_seen);
	if (s->prefix && (rc = cudabe_prefix_check_image(c, s->prefix, in, err, err_len)))
		return rc;
	struct cuda_kv_state st, st_swa;
	cuda_kv_image_state(&in->n, &st);
	cuda_kv_image_state(&in->n_swa, &st_swa);
	/* zeroed: the slots the image does not fill go up as zeros */
	unsigned char *stage = calloc(1, stage_bytes(s));
	if (!stage)
		return err_set(err, err_len, -ENOMEM,
		               "cuda backend: out of memory importing a cache image");
	for (int l = 0; l < s->sh.g.n_layers && !rc; l++) {
		struct layer_kind k = layer_kind_of(s, l);
		size_t at;
		const struct kv_image_layout *lo =
		    kv_image_plan_layer(&plan, s->swa ? &s->swa->g : &s->sh.g, l, &at);
		memset(stage, 0, stage_bytes(s));
		cuda_kv_image_layer_in(k.sh, k.slides ? &st_swa : &st, lo, stage,
		                       stage + k.sh->sink_layer_bytes, in->data + at);
		rc = layer_upload(c, &k, l, stage, err, err_len);
	}
	free(stage);
	if (!rc)
		s->st = st;
	if (!rc && s->swa)
		s->swa->st = st_swa;
	return rc;
}

/* ============================================================ lifetime */

static void cuda_destroy(struct backend *be)
{
	struct cuda_backend *c = cuda_of(be);
	if (!c)
		return;
	cudabe_workspace_free(c);
	cudabe_weights_free(c);
	cudaFreeHost(c->logits_h);
	cudaFree(c->blas_ws);
	cudaFree(c->arena_d);
	cuda_arena_deinit(&c->arena);
	if (c->blas)
		cublasDestroy(c->blas);
	if (c->stream)
		cudaStreamDestroy(c->stream);
	free(c);
}

/* The device runs the whole forward, KV tiers included, in the dtype chosen
 * at start (weights are converted to it at load). */
static int cuda_geometry_check(const struct backend *be, const struct cache_geometry *g,
                               char *err, size_t err_len)
{
	const struct cuda_backend *c = (const struct cuda_backend *)be;
	static const char *const names[] = {"float32", "float16", "bfloat16"};
	int rc = cache_geometry_per_layer(g) ? session_check_geometry(c, g, err, err_len) : 0;
	if (rc)
		return rc;
	if ((int)g->dtype == c->wdt)
		return 0;
	return err_set(err, err_len, -EINVAL,
	               "inference.attention.dtype: the cuda backend runs in %s, chosen at start; "
	               "restart to change it",
	               (unsigned)c->wdt < 3 ? names[c->wdt] : "?");
}

static const struct backend_ops cuda_ops = {
    .name = "cuda",
    .batch_rows_granule = TUNING_CUDA_BATCH_ROWS_GRANULE,
    .session_new = cuda_session_new,
    .session_free = cuda_session_free,
    .session_revise = cuda_session_revise,
    .session_stats = cuda_session_stats,
    .session_can_append = cuda_session_can_append,
    .forward = cudabe_forward,
    .destroy = cuda_destroy,
    .kv_budget_bytes = backend_cuda_cache_bytes,
    .geometry_check = cuda_geometry_check,
    .session_export = cuda_session_export,
    .session_import = cuda_session_import,
    .session_trace_enable = cuda_session_trace_enable,
    .session_trace = cuda_session_trace,
    .prefix_new = cudabe_prefix_new,
    .prefix_free = cudabe_prefix_free,
    .session_new_shared = cudabe_session_new_shared,
    .prefix_image = cudabe_prefix_image,
};

static int arena_create(struct cuda_backend *c, const struct backend_cuda_options *o, char *err,
                        size_t err_len)
{
	size_t bytes = o->cache_bytes;
	if (bytes == 0) {
		size_t free_b = 0, total_b = 0;
		CU_TRY(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
		double f =
		    o->auto_fraction > 0.0 && o->auto_fraction <= 1.0 ? o->auto_fraction : 0.5;
		bytes = (size_t)((double)free_b * f);
	}
	/* A session's arrays are aligned (cuda_kvplan.c), a little beyond the
	 * CPU bound the scheduler reserves: room for that, so that a budget the
	 * scheduler fills is never refused here. */
	c->budget_bytes = bytes;
	bytes += bytes / 16 + ((size_t)1 << 20);
	if (cudaMalloc((void **)&c->arena_d, bytes) != cudaSuccess) {
		cudaGetLastError();
		c->arena_d = NULL;
		return err_set(err, err_len, -ENOMEM,
		               "cuda backend: cannot allocate a KV arena of %zu MiB on device %d "
		               "(lower inference.cache.global_cache_limit)",
		               bytes >> 20, c->device);
	}
	cuda_arena_init(&c->arena, bytes);
	if (c->l2_sinks) {
		struct cudaDeviceProp prop;
		CU_TRY(cudaGetDeviceProperties(&prop, c->device), "cudaGetDeviceProperties");
		c->l2_max_window = (size_t)prop.accessPolicyMaxWindowSize;
		if (prop.persistingL2CacheMaxSize > 0)
			cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize,
			                   (size_t)prop.persistingL2CacheMaxSize);
		cudaGetLastError();
	}
	return 0;
}

static int backend_init(struct cuda_backend *c, const struct backend_cuda_options *o, char *err,
                        size_t err_len)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		cudaGetLastError();
		return err_set(err, err_len, -ENODEV, "cuda backend: no CUDA device");
	}
	if (o->device < 0 || o->device >= n)
		return err_set(err, err_len, -ENODEV,
		               "cuda backend: device %d out of range (0..%d)", o->device, n - 1);
	CU_TRY(cudaSetDevice(o->device), "cudaSetDevice");
	CU_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
	BLAS_TRY(cublasCreate(&c->blas), "cublasCreate");
	BLAS_TRY(cublasSetStream(c->blas, c->stream), "cublasSetStream");
	if (cudaMalloc(&c->blas_ws, CUDA_BLAS_WORKSPACE) != cudaSuccess) {
		cudaGetLastError();
		c->blas_ws = NULL;
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of device memory");
	}
	BLAS_TRY(cublasSetWorkspace(c->blas, c->blas_ws, CUDA_BLAS_WORKSPACE),
	         "cublasSetWorkspace");
	if (c->use_graphs) {
		size_t bytes =
		    (size_t)CUDA_GRAPH_MAX_TOKENS * c->base.model->hp.n_vocab * sizeof(float);
		CU_TRY(cudaMallocHost((void **)&c->logits_h, bytes), "pinned logits");
	}
	int rc = cudabe_weights_upload(c, err, err_len);
	return rc ? rc : arena_create(c, o, err, err_len);
}

int backend_cuda_new(const struct model *m, const struct backend_options *opt,
                     const struct backend_cuda_options *copt, struct backend **out, char *err,
                     size_t err_len)
{
	struct backend_cuda_options defaults = {.dtype = KV_DTYPE_BF16, .auto_fraction = 0.5};
	const struct backend_cuda_options *o = copt ? copt : &defaults;
	*out = NULL;
	if ((unsigned)o->dtype > KV_DTYPE_BF16)
		return err_set(err, err_len, -EINVAL, "cuda backend: dtype %d unknown",
		               (int)o->dtype);
	cuda_layer_fn layer = cudabe_layer_fn_of(m->hp.arch);
	if (!layer)
		return err_set(err, err_len, -ENOTSUP,
		               "cuda backend: architecture '%s' has no layer function",
		               model_arch_name(m->hp.arch));
	struct cuda_backend *c = calloc(1, sizeof(*c));
	if (!c)
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of memory");
	c->base.ops = &cuda_ops;
	c->base.model = m;
	c->log = o->log;
	c->device = o->device;
	c->wdt = (int)o->dtype;
	c->neox = model_arch_rope_neox(m->hp.arch);
	c->layer_forward = layer;
	c->l2_sinks = o->l2_sink_window;
	c->use_graphs = o->cuda_graphs;
	c->experts_mode = o->experts;
	int rc = backend_init(c, o, err, err_len);
	if (rc) {
		cuda_destroy(&c->base);
		return rc;
	}
	log_event(c->log, LOG_INFO, "cuda", "backend ready",
	          (struct log_field[]){LOG_INT("device", c->device),
	                               LOG_INT("weight_mib", c->weight_bytes >> 20),
	                               LOG_INT("kv_arena_mib", c->arena.size >> 20),
	                               LOG_INT("l2_sink_window", c->l2_sinks),
	                               LOG_INT("cuda_graphs", c->use_graphs),
	                               LOG_INT("experts_stored", c->experts_stored), LOG_END});
	*out = &c->base;
	return 0;
}

size_t backend_cuda_cache_bytes(const struct backend *be)
{
	return ((const struct cuda_backend *)be)->budget_bytes;
}

size_t backend_cuda_weight_bytes(const struct backend *be)
{
	return ((const struct cuda_backend *)be)->weight_bytes;
}

size_t backend_cuda_arena_used(const struct backend *be)
{
	return cuda_arena_used(&((const struct cuda_backend *)be)->arena);
}

size_t backend_cuda_session_bytes(const struct cache_geometry *g)
{
	if (!cache_geometry_per_layer(g)) {
		struct cuda_kv_shape sh;
		return cuda_kv_shape_init(g, &sh, NULL, 0) ? 0 : cuda_kv_session_bytes(&sh);
	}
	/* each kind's layers: the kind's bytes per layer */
	struct cuda_kv_shape *sh = malloc(sizeof(*sh));
	size_t bytes = 0;
	for (int swa = 0; sh && swa < 2; swa++) {
		int n = cuda_kv_kind_geometry(g, swa, &sh->g);
		if (n == 0)
			continue;
		if (cuda_kv_shape_init(&sh->g, sh, NULL, 0)) {
			bytes = 0;
			break;
		}
		bytes += cuda_kv_session_bytes(sh) / (size_t)g->n_layers * (size_t)n;
	}
	free(sh);
	return bytes;
}
