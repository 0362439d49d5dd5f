/* The mixture-of-experts feed-forward of the CUDA backend's MoE layers
 * (MODEL_LAYER_MOE; layer_moe in backend_cuda_forward.c runs the attention
 * and calls it).  Per layer: RMSNorm and the router GEMM on the device in
 * f32 whatever the weights' dtype (the logits choose experts, as the cpu
 * backend's f32 ones do), the router logits to the host, routing there by
 * engine/moe.c (the one policy both backends follow), the batch's entries
 * (token, rank) grouped by expert up in one copy; then the normed rows
 * gathered in that grouping,
 * and per active expert one gate and one up GEMM over its rows, bias and
 * activation over all rows at once, one down GEMM per expert, bias, the
 * rows scattered back to their entries and each token's entries summed
 * into the residual by the gating weights, rank 0 first.  The host waits
 * for the router in every MoE layer, so a forward of an MoE model is never
 * captured into a CUDA graph (run_graph runs it eagerly).  It does not
 * upload weights (backend_cuda_weights.c) or own the dense workspace. */
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_impl.h"
#include "engine/moe.h"

_Static_assert(CUDA_MOE_ACT_SWIGLU == (int)MODEL_EXPERT_SWIGLU &&
                   CUDA_MOE_ACT_SWIGLU_OAI == (int)MODEL_EXPERT_SWIGLU_OAI,
               "cuda_moe_act's act values are model_arch's");

/* Buffers for batches of up to cap tokens (m = cap * k entries). */
struct cuda_moe {
	size_t cap;
	struct moe_route route;
	float *xn;                /* (cap, dim) the tokens' RMSNorm in f32, the router's input */
	float *logits, *logits_h; /* (cap, n_experts) device, pinned host */
	/* the index lists of a batch, host (pinned) and device alike:
	 * tok[i]: token of grouped row i; entry[i]: its entry t*k + rank;
	 * expert[i]: its expert; then weight (m) floats: entry -> gate weight */
	unsigned char *lists_d, *lists_h;
	float *rows;      /* (m, dim) the gathered residual rows */
	void *in;         /* (m, dim) their RMSNorm in the weights' dtype */
	float *gate, *up; /* (m, expert_ffn) */
	void *act;        /* (m, expert_ffn) in the weights' dtype */
	float *down;      /* (m, dim) each grouped row's expert output */
	void *wide;       /* (expert_ffn * dim) a stored expert's matrix widened */
	float *entries;   /* (m, dim) the same by entry */
};

void cudabe_moe_free(struct cuda_backend *c)
{
	struct cuda_moe *x = c->moe;
	if (!x)
		return;
	void *dev[] = {x->xn, x->logits, x->lists_d, x->rows,    x->in,  x->gate,
	               x->up, x->act,    x->down,    x->entries, x->wide};
	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
		cudaFree(dev[i]);
	cudaFreeHost(x->logits_h);
	cudaFreeHost(x->lists_h);
	moe_route_free(&x->route);
	free(x);
	c->moe = NULL;
}

static size_t lists_bytes(size_t m)
{
	return m * (3 * sizeof(int32_t) + sizeof(float));
}

/* wide_bytes: the scratch matrix of experts kept as stored (0: none). */
static int moe_alloc(struct cuda_moe *x, const struct model_hparams *hp, size_t dt, size_t n,
                     size_t wide_bytes, char *err, size_t err_len)
{
	size_t m = n * (size_t)hp->n_experts_used, F = sizeof(float);
	size_t D = (size_t)hp->dim, H = (size_t)hp->expert_ffn_dim;
	struct {
		void **p;
		size_t bytes;
	} bufs[] = {
	    {(void **)&x->xn, n * D * F},
	    {(void **)&x->logits, n * (size_t)hp->n_experts * F},
	    {(void **)&x->lists_d, lists_bytes(m)},
	    {(void **)&x->rows, m * D * F},
	    {&x->in, m * D * dt},
	    {(void **)&x->gate, m * H * F},
	    {(void **)&x->up, m * H * F},
	    {&x->act, m * H * dt},
	    {(void **)&x->down, m * D * F},
	    {(void **)&x->entries, m * D * F},
	    {&x->wide, wide_bytes},
	};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		if (cudaMalloc(bufs[i].p, bufs[i].bytes ? bufs[i].bytes : 1) != cudaSuccess) {
			cudaGetLastError();
			*bufs[i].p = NULL;
			return err_set(err, err_len, -ENOMEM,
			               "cuda backend: out of device memory for the experts of a "
			               "batch of %zu tokens (%zu KiB)",
			               n, bufs[i].bytes >> 10);
		}
	if (cudaMallocHost((void **)&x->logits_h, n * (size_t)hp->n_experts * F) != cudaSuccess ||
	    cudaMallocHost((void **)&x->lists_h, lists_bytes(m)) != cudaSuccess) {
		cudaGetLastError();
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of pinned host memory");
	}
	return moe_route_reserve(&x->route, (int)n, hp->n_experts_used, hp->n_experts, err,
	                         err_len);
}

/* MoE buffers for batches of n tokens (grown, never shrunk). */
static int moe_reserve(struct cuda_backend *c, size_t n, char *err, size_t err_len)
{
	if (c->moe && n <= c->moe->cap)
		return 0;
	cudabe_moe_free(c);
	c->moe = calloc(1, sizeof(*c->moe));
	if (!c->moe)
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of memory");
	const struct model_hparams *hp = &c->base.model->hp;
	size_t dt = dt_size(c->wdt);
	size_t wide = c->experts_stored ? (size_t)hp->expert_ffn_dim * hp->dim * dt : 0;
	int rc = moe_alloc(c->moe, hp, dt, n, wide, err, err_len);
	if (rc) {
		cudabe_moe_free(c);
		return rc;
	}
	c->moe->cap = n;
	return 0;
}

/* Router logits of the n tokens to the host (the stream drained), routed
 * there, and the grouped index lists and weights up. */
static int moe_route(struct cuda_backend *c, int n, int l, char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	const struct cuda_layer_weights *L = &c->layers[l];
	const struct model_arch_moe *am = model_arch_moe(hp->arch);
	struct cuda_moe *x = c->moe;
	int rc, ne = hp->n_experts, k = hp->n_experts_used, m = n * k;
	CU_TRY(cuda_rmsnorm(c->x, L->ffn_norm, n, hp->dim, hp->norm_eps, x->xn, CUDA_DT_F32,
	                    c->stream),
	       "rmsnorm");
	if ((rc = cudabe_gemm(c, &L->router, CUDA_DT_F32, x->xn, n, x->logits, 0.0f, err, err_len)))
		return rc;
	if (L->b_router)
		CU_TRY(cuda_add_bias(x->logits, L->b_router, n, ne, c->stream), "router bias");
	CU_TRY(cudaMemcpyAsync(x->logits_h, x->logits, (size_t)n * ne * sizeof(float),
	                       cudaMemcpyDeviceToHost, c->stream),
	       "router logits copy");
	CU_TRY(cudaStreamSynchronize(c->stream), "router");
	moe_route_compute(&x->route, x->logits_h, n, am->gating, am->norm_weights);
	int32_t *tok = (int32_t *)x->lists_h, *entry = tok + m, *expert = entry + m;
	for (int i = 0; i < m; i++) {
		int e = x->route.order[i];
		tok[i] = e / k;
		entry[i] = e;
		expert[i] = x->route.expert[e];
	}
	memcpy(expert + m, x->route.weight, (size_t)m * sizeof(float));
	CU_TRY(cudaMemcpyAsync(x->lists_d, x->lists_h, lists_bytes((size_t)m),
	                       cudaMemcpyHostToDevice, c->stream),
	       "expert lists upload");
	return 0;
}

/* One GEMM per active expert over its grouped rows: out rows of w[e] from
 * in rows (in_cols wide, in the weights' dtype).  An expert kept as stored
 * is widened first into the scratch matrix, which the stream's order
 * frees for the next expert once its GEMM has read it. */
static int experts_gemm(struct cuda_backend *c, const struct cuda_weight *w, const void *in,
                        int in_cols, float *out, char *err, size_t err_len)
{
	const struct moe_route *r = &c->moe->route;
	size_t dt = dt_size(c->wdt);
	for (int a = 0; a < r->n_active; a++) {
		int e = r->active[a], s = r->start[e], cnt = r->start[e + 1] - s;
		const unsigned char *src = (const unsigned char *)in + (size_t)s * in_cols * dt;
		struct cuda_weight wide = {.d = c->moe->wide, .rows = w[e].rows, .cols = w[e].cols};
		if (w[e].stored)
			CU_TRY(cuda_dequant_rows(w[e].type, w[e].d, w[e].row_bytes, w[e].rows,
			                         w[e].cols, wide.d, c->wdt, c->stream),
			       "expert widening");
		int rc = cudabe_gemm(c, w[e].stored ? &wide : &w[e], c->wdt, src, cnt,
		                     out + (size_t)s * w[e].rows, 0.0f, err, err_len);
		if (rc)
			return rc;
	}
	return 0;
}

int cudabe_moe_ffn(struct cuda_backend *c, int n, int l, char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	const struct cuda_layer_weights *L = &c->layers[l];
	const struct model_arch_moe *am = model_arch_moe(hp->arch);
	int k = hp->n_experts_used, m = n * k, D = hp->dim, H = hp->expert_ffn_dim;
	int rc = moe_reserve(c, (size_t)n, err, err_len);
	rc = rc ? rc : moe_route(c, n, l, err, err_len);
	if (rc)
		return rc;
	struct cuda_moe *x = c->moe;
	const int32_t *tok = (const int32_t *)x->lists_d, *entry = tok + m, *expert = entry + m;
	const float *weight = (const float *)(expert + m);
	CU_TRY(cuda_gather_rows(c->x, tok, m, D, x->rows, c->stream), "expert rows");
	CU_TRY(cuda_rmsnorm(x->rows, L->ffn_norm, m, D, hp->norm_eps, x->in, c->wdt, c->stream),
	       "rmsnorm");
	if ((rc = experts_gemm(c, L->exp_gate, x->in, D, x->gate, err, err_len)) ||
	    (rc = experts_gemm(c, L->exp_up, x->in, D, x->up, err, err_len)))
		return rc;
	if (L->exp_b_gate)
		CU_TRY(cuda_add_bias_rows(x->gate, L->exp_b_gate, expert, m, H, c->stream),
		       "expert bias");
	if (L->exp_b_up)
		CU_TRY(cuda_add_bias_rows(x->up, L->exp_b_up, expert, m, H, c->stream),
		       "expert bias");
	CU_TRY(cuda_moe_act(x->gate, x->up, (size_t)m * H, (int)am->act, am->act_alpha,
	                    am->act_limit, x->act, c->wdt, c->stream),
	       "expert activation");
	if ((rc = experts_gemm(c, L->exp_down, x->act, H, x->down, err, err_len)))
		return rc;
	if (L->exp_b_down)
		CU_TRY(cuda_add_bias_rows(x->down, L->exp_b_down, expert, m, D, c->stream),
		       "expert bias");
	CU_TRY(cuda_scatter_rows(x->down, entry, m, D, x->entries, c->stream), "expert scatter");
	CU_TRY(cuda_moe_sum(x->entries, weight, n, k, D, c->x, c->stream), "expert sum");
	return 0;
}
