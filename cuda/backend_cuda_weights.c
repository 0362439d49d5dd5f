/* Weights of the CUDA backend: every matrix goes to the device once, at
 * start, in the backend's dtype (bf16, f16 or f32).  A matrix already in the
 * dtype is copied as it is; any other (a block type: Q8_0, Q4_0, Q4_K, Q5_K,
 * Q6_K, Q4_1, Q5_0, Q5_1, MXFP4; or F32, F16, BF16) goes up as stored, in chunks of
 * rows of a few MiB, to a device staging buffer, from which
 * cuda_dequant_rows (dequant_kernels.cu) writes it in the dtype with
 * dequant.c's arithmetic and kv_row_store's rounding: no F32 copy of a row
 * is made on the host.  Norm vectors and biases stay f32.  A
 * mixture-of-experts layer's experts go up one block per kind (gate, up,
 * down), each expert a view of it, widened or (a block type, when asked or
 * when widened they would not fit) as stored, for backend_cuda_moe.c to
 * widen per forward.  It does not run the forward pass. */
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_impl.h"
#include "model/gguf.h"

#define UPLOAD_CHUNK_BYTES ((size_t)8 << 20)

static int dev_alloc(struct cuda_backend *c, void **p, size_t bytes, const char *what, char *err,
                     size_t err_len)
{
	if (cudaMalloc(p, bytes ? bytes : 1) != cudaSuccess) {
		cudaGetLastError();
		*p = NULL;
		return err_set(err, err_len, -ENOMEM,
		               "cuda backend: out of device memory for %s (%zu MiB; %zu MiB of "
		               "weights so far)",
		               what, bytes >> 20, c->weight_bytes >> 20);
	}
	c->weight_bytes += bytes;
	return 0;
}

static bool same_type(int ggml_type, int dt)
{
	return (ggml_type == GGML_TYPE_F32 && dt == CUDA_DT_F32) ||
	       (ggml_type == GGML_TYPE_F16 && dt == CUDA_DT_F16) ||
	       (ggml_type == GGML_TYPE_BF16 && dt == CUDA_DT_BF16);
}

static const char *dt_name(int dt)
{
	return dt == CUDA_DT_F32 ? "f32" : dt == CUDA_DT_F16 ? "f16" : "bf16";
}

/* Chunks of w's rows as stored -> staging -> dst (rows, cols) in dtype dt. */
static int dequant_chunks(struct cuda_backend *c, const struct weight_matrix *w, int dt,
                          void *stage, size_t per, unsigned char *dst, const char *what, char *err,
                          size_t err_len)
{
	size_t src_b = w->row_bytes, dst_b = (size_t)w->cols * dt_size(dt);
	for (size_t r0 = 0; r0 < (size_t)w->rows; r0 += per) {
		size_t n = (size_t)w->rows - r0 < per ? (size_t)w->rows - r0 : per;
		int e = (int)cudaMemcpy(stage, (const unsigned char *)w->data + r0 * src_b,
		                        n * src_b, cudaMemcpyHostToDevice);
		if (!e)
			e = cuda_dequant_rows(w->type, stage, src_b, (int)n, w->cols,
			                      dst + r0 * dst_b, dt, NULL);
		if (e)
			return err_set(err, err_len, -EIO,
			               "cuda backend: uploading %s (%s to %s, rows %zu..%zu): %s",
			               what, ggml_type_name(w->type), dt_name(dt), r0, r0 + n - 1,
			               cuda_error_string(e));
	}
	/* the forward pass runs on a non-blocking stream: the last chunk must be done */
	CU_TRY(cudaDeviceSynchronize(), "weight dequantization");
	return 0;
}

static int dequant_upload(struct cuda_backend *c, const struct weight_matrix *w, int dt,
                          unsigned char *dst, const char *what, char *err, size_t err_len)
{
	if (!cuda_dequant_supported(w->type))
		return err_set(err, err_len, -ENOTSUP,
		               "cuda backend: %s: weights of type %s cannot be uploaded", what,
		               ggml_type_name(w->type));
	size_t per = UPLOAD_CHUNK_BYTES / w->row_bytes > 0 ? UPLOAD_CHUNK_BYTES / w->row_bytes : 1;
	if (per > (size_t)w->rows)
		per = w->rows > 0 ? (size_t)w->rows : 1;
	void *stage = NULL;
	if (cudaMalloc(&stage, per * w->row_bytes) != cudaSuccess) {
		cudaGetLastError();
		return err_set(err, err_len, -ENOMEM,
		               "cuda backend: out of device memory for the staging buffer of %s "
		               "(%zu KiB; %zu MiB of weights so far)",
		               what, per * w->row_bytes >> 10, c->weight_bytes >> 20);
	}
	int rc = dequant_chunks(c, w, dt, stage, per, dst, what, err, err_len);
	cudaFree(stage);
	return rc;
}

/* w's rows into dst (rows, cols) in dtype dt, already allocated. */
static int matrix_fill(struct cuda_backend *c, const struct weight_matrix *w, int dt, void *dst,
                       const char *what, char *err, size_t err_len)
{
	size_t row_b = (size_t)w->cols * dt_size(dt), total = row_b * (size_t)w->rows;
	if (same_type(w->type, dt) && w->row_bytes == row_b) {
		CU_TRY(cudaMemcpy(dst, w->data, total, cudaMemcpyHostToDevice), "weight upload");
		return 0;
	}
	return dequant_upload(c, w, dt, dst, what, err, err_len);
}

static int matrix_upload(struct cuda_backend *c, const struct weight_matrix *w,
                         struct cuda_weight *out, const char *what, char *err, size_t err_len)
{
	size_t row_b = (size_t)w->cols * dt_size(c->wdt), total = row_b * (size_t)w->rows;
	out->rows = w->rows;
	out->cols = w->cols;
	if (w->rows == 0) /* an MoE layer's dense MLP: none */
		return 0;
	int rc = dev_alloc(c, &out->d, total, what, err, err_len);
	return rc ? rc : matrix_fill(c, w, c->wdt, out->d, what, err, err_len);
}

/* The router in f32 whatever the dtype: its logits pick the experts, and
 * the cpu backend computes them in f32 (a near tie rounded differently
 * would send a token elsewhere). */
static int router_upload(struct cuda_backend *c, const struct weight_matrix *w,
                         struct cuda_weight *out, char *err, size_t err_len)
{
	out->rows = w->rows;
	out->cols = w->cols;
	int rc = dev_alloc(c, &out->d, (size_t)w->rows * w->cols * sizeof(float), "ffn_gate_inp",
	                   err, err_len);
	return rc ? rc : matrix_fill(c, w, CUDA_DT_F32, out->d, "ffn_gate_inp", err, err_len);
}

/* Expert e's rows as stored into dst. */
static int stored_fill(struct cuda_backend *c, const struct weight_matrix *w, void *dst,
                       const char *what, char *err, size_t err_len)
{
	if (!cuda_dequant_supported(w->type))
		return err_set(err, err_len, -ENOTSUP,
		               "cuda backend: %s: weights of type %s cannot be uploaded", what,
		               ggml_type_name(w->type));
	CU_TRY(cudaMemcpy(dst, w->data, (size_t)w->rows * w->row_bytes, cudaMemcpyHostToDevice),
	       "expert upload");
	return 0;
}

/* The n experts' matrices w[0..n) (one shape) into one device block, in
 * the dtype or (c->experts_stored, a block type) as stored; (*out)[e]
 * views expert e's part. */
static int experts_upload(struct cuda_backend *c, const struct weight_matrix *w, int n,
                          struct cuda_weight **out, const char *what, char *err, size_t err_len)
{
	bool stored = c->experts_stored && !same_type(w[0].type, c->wdt);
	size_t total = stored ? w[0].row_bytes * (size_t)w[0].rows
	                      : (size_t)w[0].cols * dt_size(c->wdt) * (size_t)w[0].rows;
	void *base = NULL;
	*out = calloc((size_t)n, sizeof(**out));
	if (!*out)
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of memory");
	int rc = dev_alloc(c, &base, total * (size_t)n, what, err, err_len);
	for (int e = 0; e < n && !rc; e++) {
		(*out)[e] = (struct cuda_weight){.d = (unsigned char *)base + (size_t)e * total,
		                                 .rows = w[0].rows,
		                                 .cols = w[0].cols,
		                                 .stored = stored,
		                                 .type = w[0].type,
		                                 .row_bytes = w[0].row_bytes};
		rc = stored ? stored_fill(c, &w[e], (*out)[e].d, what, err, err_len)
		            : matrix_fill(c, &w[e], c->wdt, (*out)[e].d, what, err, err_len);
	}
	return rc;
}

/* Whether the model's block-type experts stay as stored on the device
 * (backend_cuda_options.experts). */
static int experts_decide(struct cuda_backend *c, char *err, size_t err_len)
{
	const struct model *m = c->base.model;
	c->experts_stored = false;
	if (m->hp.n_experts == 0 || c->experts_mode == BACKEND_CUDA_EXPERTS_WIDENED)
		return 0;
	if (c->experts_mode == BACKEND_CUDA_EXPERTS_STORED) {
		c->experts_stored = true;
		return 0;
	}
	size_t free_b = 0, total_b = 0, per = 3 * (size_t)m->hp.dim * m->hp.expert_ffn_dim;
	CU_TRY(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
	size_t widened = per * (size_t)m->hp.n_experts * m->hp.n_layers * dt_size(c->wdt);
	c->experts_stored = widened > free_b / 2;
	return 0;
}

static int vec_upload(struct cuda_backend *c, const float *src, size_t n, float **out, char *err,
                      size_t err_len)
{
	*out = NULL;
	if (!src)
		return 0;
	int rc = dev_alloc(c, (void **)out, n * sizeof(float), "a norm vector", err, err_len);
	if (rc)
		return rc;
	CU_TRY(cudaMemcpy(*out, src, n * sizeof(float), cudaMemcpyHostToDevice), "vector upload");
	return 0;
}

/* A mixture-of-experts layer's bo, router and experts (as stored; block
 * types dequantized on the device like the other matrices). */
static int moe_upload(struct cuda_backend *c, const struct model_layer *L,
                      struct cuda_layer_weights *d, char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	size_t ne = (size_t)hp->n_experts, F = (size_t)hp->expert_ffn_dim, D = (size_t)hp->dim;
	int rc = vec_upload(c, L->bo, D, &d->bo, err, err_len);
	if (rc || !L->exp_gate)
		return rc;
	rc = router_upload(c, &L->w_router, &d->router, err, err_len);
	rc = rc ? rc : vec_upload(c, L->b_router, ne, &d->b_router, err, err_len);
	rc = rc ? rc
	        : experts_upload(c, L->exp_gate, (int)ne, &d->exp_gate, "ffn_gate_exps", err,
	                         err_len);
	rc = rc ? rc
	        : experts_upload(c, L->exp_up, (int)ne, &d->exp_up, "ffn_up_exps", err, err_len);
	rc = rc ? rc
	        : experts_upload(c, L->exp_down, (int)ne, &d->exp_down, "ffn_down_exps", err,
	                         err_len);
	rc = rc ? rc : vec_upload(c, L->exp_b_gate, ne * F, &d->exp_b_gate, err, err_len);
	rc = rc ? rc : vec_upload(c, L->exp_b_up, ne * F, &d->exp_b_up, err, err_len);
	rc = rc ? rc : vec_upload(c, L->exp_b_down, ne * D, &d->exp_b_down, err, err_len);
	return rc;
}

static int layer_upload(struct cuda_backend *c, const struct model_layer *L,
                        struct cuda_layer_weights *d, char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
	int rc = vec_upload(c, L->attn_norm, (size_t)hp->dim, &d->attn_norm, err, err_len);
	rc = rc ? rc : vec_upload(c, L->ffn_norm, (size_t)hp->dim, &d->ffn_norm, err, err_len);
	rc = rc ? rc : vec_upload(c, L->bq, qd, &d->bq, err, err_len);
	rc = rc ? rc : vec_upload(c, L->bk, kvd, &d->bk, err, err_len);
	rc = rc ? rc : vec_upload(c, L->bv, kvd, &d->bv, err, err_len);
	rc = rc ? rc : vec_upload(c, L->q_norm, (size_t)hp->head_dim, &d->q_norm, err, err_len);
	rc = rc ? rc : vec_upload(c, L->k_norm, (size_t)hp->head_dim, &d->k_norm, err, err_len);
	rc = rc ? rc
	        : vec_upload(c, L->attn_sinks, (size_t)hp->n_heads, &d->attn_sinks, err, err_len);
	rc = rc ? rc : matrix_upload(c, &L->wq, &d->wq, "wq", err, err_len);
	rc = rc ? rc : matrix_upload(c, &L->wk, &d->wk, "wk", err, err_len);
	rc = rc ? rc : matrix_upload(c, &L->wv, &d->wv, "wv", err, err_len);
	rc = rc ? rc : matrix_upload(c, &L->wo, &d->wo, "wo", err, err_len);
	rc = rc ? rc : matrix_upload(c, &L->w_gate, &d->gate, "w_gate", err, err_len);
	rc = rc ? rc : matrix_upload(c, &L->w_up, &d->up, "w_up", err, err_len);
	rc = rc ? rc : matrix_upload(c, &L->w_down, &d->down, "w_down", err, err_len);
	/* the Gemma shape's norms, where the model has them */
	rc = rc ? rc : vec_upload(c, L->post_attn_norm, (size_t)hp->dim, &d->post_attn_norm, err,
	                          err_len);
	rc = rc ? rc : vec_upload(c, L->post_ffw_norm, (size_t)hp->dim, &d->post_ffw_norm, err,
	                          err_len);
	return rc ? rc : moe_upload(c, L, d, err, err_len);
}

int cudabe_weights_upload(struct cuda_backend *c, char *err, size_t err_len)
{
	const struct model *m = c->base.model;
	c->layers = calloc((size_t)m->hp.n_layers, sizeof(*c->layers));
	if (!c->layers)
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of memory");
	int rc = experts_decide(c, err, err_len);
	rc = rc ? rc : matrix_upload(c, &m->token_embd, &c->embd, "token_embd", err, err_len);
	rc = rc ? rc : vec_upload(c, m->output_norm, (size_t)m->hp.dim, &c->out_norm, err, err_len);
	c->out_tied = m->output.data == m->token_embd.data && m->output.type == m->token_embd.type;
	if (c->out_tied)
		c->out = c->embd;
	else if (!rc)
		rc = matrix_upload(c, &m->output, &c->out, "output", err, err_len);
	for (int l = 0; l < m->hp.n_layers && !rc; l++)
		rc = layer_upload(c, &m->layers[l], &c->layers[l], err, err_len);
	return rc;
}

static void moe_free(struct cuda_layer_weights *d)
{
	struct cuda_weight *exps[] = {d->exp_gate, d->exp_up, d->exp_down};
	for (size_t i = 0; i < sizeof(exps) / sizeof(exps[0]); i++) {
		if (exps[i])
			cudaFree(exps[i][0].d); /* the block all experts view */
		free(exps[i]);
	}
	void *vecs[] = {d->bo, d->router.d, d->b_router, d->exp_b_gate, d->exp_b_up, d->exp_b_down};
	for (size_t i = 0; i < sizeof(vecs) / sizeof(vecs[0]); i++)
		cudaFree(vecs[i]);
}

void cudabe_weights_free(struct cuda_backend *c)
{
	cudaFree(c->embd.d);
	if (!c->out_tied)
		cudaFree(c->out.d);
	cudaFree(c->out_norm);
	for (int l = 0; c->layers && l < c->base.model->hp.n_layers; l++) {
		struct cuda_layer_weights *d = &c->layers[l];
		void *ptrs[] = {d->attn_norm, d->ffn_norm, d->bq,   d->bk,    d->bv,
		                d->q_norm,    d->k_norm,   d->wq.d, d->wk.d,  d->wv.d,
		                d->wo.d,      d->gate.d,   d->up.d, d->down.d};
		for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++)
			cudaFree(ptrs[i]);
		void *norms[] = {d->post_attn_norm, d->post_ffw_norm, d->attn_sinks};
		for (size_t i = 0; i < sizeof(norms) / sizeof(norms[0]); i++)
			cudaFree(norms[i]);
		moe_free(d);
	}
	free(c->layers);
	c->layers = NULL;
}
