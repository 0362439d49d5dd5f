/* Internal state of the CUDA backend, shared by backend_cuda.c (sessions,
 * lifetime), backend_cuda_weights.c (upload) and backend_cuda_forward.c
 * (the forward pass).  Not for other modules. */
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>

#include "backend_cuda.h"
#include "cuda_arena.h"
#include "cuda_kernels.h"
#include "cuda_kvplan.h"
#include "cache/tiertrace.h"
#include "engine/batch.h"
#include "util/errbuf.h"

/* Returns from the enclosing function (rc, err, err_len in scope) on a CUDA
 * runtime error or a kernel launcher's error code. */
#define CU_TRY(call, what)                                                                         \
	do {                                                                                       \
		int e_ = (int)(call);                                                              \
		if (e_ != 0)                                                                       \
			return err_set(err, err_len, -EIO, "cuda backend: %s: %s", (what),         \
			               cudaGetErrorString((cudaError_t)e_));                       \
	} while (0)
#define BLAS_TRY(call, what)                                                                       \
	do {                                                                                       \
		cublasStatus_t s_ = (call);                                                        \
		if (s_ != CUBLAS_STATUS_SUCCESS)                                                   \
			return err_set(err, err_len, -EIO, "cuda backend: %s: %s", (what),         \
			               cublasGetStatusString(s_));                                 \
	} while (0)

struct cuda_weight {
	void *d; /* (rows, cols) row-major in the backend's dtype */
	int rows;
	int cols;
	/* stored: d holds the rows as the file stores them, of ggml type
	 * `type` and row_bytes each (an MoE expert kept as stored, widened
	 * into a scratch matrix before use) */
	bool stored;
	int type;
	size_t row_bytes;
};

struct cuda_layer_weights {
	float *attn_norm, *ffn_norm; /* (dim) */
	float *bq, *bk, *bv;         /* with Q/K/V biases: (q_dim), (kv_dim) x2; else NULL */
	float *q_norm, *k_norm;      /* with QK-norm: (head_dim) each; else NULL */
	float *attn_sinks;           /* gpt-oss: (n_heads) learned sink logits; else NULL */
	struct cuda_weight wq, wk, wv, wo, gate, up, down;
	/* the Gemma shape's norms: (dim) x2; else NULL */
	float *post_attn_norm, *post_ffw_norm;
	/* Mixture of experts (MODEL_LAYER_MOE; zero elsewhere, where gate, up
	 * and down above are the dense MLP): the attention output's bias (dim)
	 * or NULL; the router (n_experts, dim) in f32 and its bias (n_experts)
	 * or NULL;
	 * per expert e its gate and up (expert_ffn, dim) and down (dim,
	 * expert_ffn), exp_*[e] views of one block per kind; their biases
	 * (n_experts, expert_ffn) x2 and (n_experts, dim), or NULL. */
	float *bo;
	struct cuda_weight router;
	float *b_router;
	struct cuda_weight *exp_gate, *exp_up, *exp_down; /* (n_experts) */
	float *exp_b_gate, *exp_b_up, *exp_b_down;
};

struct backend_session {
	struct batch_member batch; /* first: the batch being run (engine/batch.h) */
	struct cuda_kv_shape sh;
	struct cuda_kv_state st;  /* committed after each forward */
	struct cuda_kv_state tmp; /* advanced while a forward is planned */
	struct cuda_kv_view view; /* layout with device bases */
	struct cuda_kv_anchors anc; /* each layer's anchor tier; empty without anchors */
	struct cuda_kv_step step;   /* the last planned token's (a forward with anchors: its only) */
	struct tier_trace *trace;   /* NULL unless its cache is traced (cache/tiertrace.h) */
	uint64_t sink_off, win_off;
	bool has_sink;
	/* A session made by session_new_shared: its sink rows are this
	 * prefix's block (view.sink_base), which it neither writes nor frees;
	 * NULL: its sink block is its own. */
	const struct backend_prefix *prefix;
	double *freq_hi, *freq_lo; /* (rope_dim/2) */
	/* With the model's sliding-window layers (NULL: none, every layer is
	 * global): sh, st, tmp, view, step and freq above are the global
	 * layers', whose blocks hold only those layers; swa the sliding ones'. */
	struct cuda_swa_layers *swa;
};

/* A shared prefix (engine/backend.h): a sink block of its shape's layout
 * in the low end of the arena, written once by prefix_new. */
struct backend_prefix {
	struct cuda_kv_shape sh; /* the geometry's (every layer global) */
	uint64_t off;            /* the block's arena offset: sh.sink_layer_bytes per layer */
	size_t bytes;            /* the geometry's sink share of the bound */
};

/* The model sliding-window layers of a session: their own shape, state,
 * blocks and RoPE, and where each layer sits in its kind's blocks. */
struct cuda_swa_layers {
	struct cache_geometry g; /* the session's, spans and all */
	struct cuda_kv_shape sh;
	struct cuda_kv_state st, tmp;
	struct cuda_kv_view view;
	struct cuda_kv_step step;
	uint64_t win_off;
	double *freq_hi, *freq_lo; /* (rope_dim/2) */
	uint8_t *slides;           /* (n_layers) layer l is a sliding one */
	int32_t *slot;             /* (n_layers) layer l's index in its kind's blocks */
};

/* Layer l's view: its kind's, with the bases moved so that the kernels'
 * base + l * layer_bytes lands on the layer's own block. */
static inline struct cuda_kv_view cudabe_layer_view(const struct backend_session *s, int l)
{
	if (!s->swa)
		return s->view;
	struct cuda_kv_view v = s->swa->slides[l] ? s->swa->view : s->view;
	int64_t d = (int64_t)s->swa->slot[l] - l;
	v.sink_base += (uint64_t)(d * (int64_t)v.sink_layer_bytes);
	v.win_base += (uint64_t)(d * (int64_t)v.win_layer_bytes);
	return v;
}

#define CUDA_GRAPH_SLOTS 8
#define CUDA_BLAS_WORKSPACE ((size_t)32 << 20)

/* One captured forward: key = its launch shape (see graph_key). */
struct cuda_graph_entry {
	int *key;
	size_t key_len;
	cudaGraphExec_t exec;
	uint64_t last_used;
};

/* Everything one forward uploads, packed in one buffer (host and device
 * copies laid out alike). */
struct batch_layout {
	size_t tok, rows, cs, append, flush, attn, a_ops, a_begin, a_angles, bytes;
};

struct cuda_backend;

/* One layer over the batch, enqueued on the backend's stream. */
typedef int (*cuda_layer_fn)(struct cuda_backend *c, const struct batch_layout *bl, int n,
                             int layer, char *err, size_t err_len);

struct cuda_backend {
	struct backend base;
	cuda_layer_fn layer_forward; /* the model architecture's (cudabe_layer_fn_of) */
	struct sinkd_log *log;
	int device;
	int wdt; /* CUDA_DT_* of weights and GEMM inputs */
	bool neox;
	cublasHandle_t blas;
	cudaStream_t stream;
	struct cuda_weight embd, out;
	bool out_tied;
	float *out_norm;
	struct cuda_layer_weights *layers;
	size_t weight_bytes;
	size_t
	    budget_bytes; /* KV budget (global_cache_limit or auto); the arena has slack beyond */
	/* KV arena */
	unsigned char *arena_d;
	struct cuda_arena arena;
	bool l2_sinks;
	size_t l2_max_window;
	/* device workspace for cap tokens */
	size_t cap;
	float *x, *proj, *q, *k, *v, *qw, *qs, *gate, *up, *logits, *mass;
	void *xb_h, *att_h, *hb_h; /* GEMM inputs in wdt */
	float *partial;
	size_t partial_cap;               /* floats */
	unsigned char *batch_d, *batch_h; /* batch_h pinned */
	size_t batch_cap;
	float *mass_h; /* (2, n_layers, cap, n_heads) pinned: sink, then learned sink mass */
	/* host plan of the batch being run */
	int *order, *sess_begin, *wave_begin, *flush_begin, *wave_max_res;
	struct backend_session **sessions;
	int n_sessions, n_waves;
	/* a forward with sessions that keep anchors or are traced: attention
	 * jobs and sink angles per layer, the anchor upkeep ops planned before
	 * it, and the key weights its attention gives back (their mean over
	 * heads too when a session is traced) */
	bool per_layer, kw_mean;
	/* a forward with sessions of the model's sliding-window layers (one
	 * wave, per_layer too): append and flush jobs per layer as well, each
	 * layer's from its kind, flush_n[l] flush jobs of layer l */
	bool per_layer_jobs;
	int flush_n[CACHE_GEOMETRY_MAX_LAYERS];
	struct cuda_kv_anchor_op *a_ops;
	int32_t *a_begin;
	double *a_angles;
	size_t a_ops_cap, a_begin_cap, a_angles_cap; /* elements */
	int n_a_ops, n_a_lists, n_a_angles;
	int key_ld;                 /* columns of the key weights: the most resident keys */
	float *kw;                  /* (cap, n_heads, key_ld) one layer's weights per head */
	float *kwmax, *kwmax_h;     /* (n_layers, cap, key_ld) largest over heads; host copy pinned */
	float *kwmean, *kwmean_h;   /* (n_layers, cap, key_ld) mean over heads; host copy pinned */
	size_t kw_cap, kwmax_cap, kwmean_cap; /* floats */
	/* captured forwards, keyed by the batch's launch shape */
	bool use_graphs;
	struct cuda_graph_entry graphs[CUDA_GRAPH_SLOTS];
	uint64_t graph_clock;
	float *logits_h; /* (CUDA_GRAPH_MAX_TOKENS, n_vocab) pinned: graphs copy logits here */
	void *blas_ws;   /* cuBLAS workspace (no allocation inside a capture) */
	/* a mixture-of-experts model's routing and expert buffers
	 * (backend_cuda_moe.c); NULL until its first forward */
	struct cuda_moe *moe;
	int experts_mode;    /* backend_cuda_options.experts */
	bool experts_stored; /* block-type experts kept as stored (decided at upload) */
};

static inline struct cuda_backend *cuda_of(struct backend *be)
{
	return (struct cuda_backend *)be;
}

static inline size_t dt_size(int dt)
{
	return dt == CUDA_DT_F32 ? 4 : 2;
}

static inline cudaDataType_t blas_type(int dt)
{
	return dt == CUDA_DT_F32 ? CUDA_R_32F : dt == CUDA_DT_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

/* backend_cuda.c: the L2 sink window over the arena's low blocks as they
 * are now (after a low block comes or goes). */
void cudabe_l2_window_update(struct cuda_backend *c);
/* backend_cuda.c: a new session of geometry g; with p (g is p's), one
 * that reads its sinks from p's block and owns only its window block. */
int cudabe_session_open(struct cuda_backend *c, const struct cache_geometry *g,
                        const struct backend_prefix *p, struct backend_session **out, char *err,
                        size_t err_len);
/* backend_cuda_prefix.c */
int cudabe_prefix_new(struct backend *be, const struct backend_session *s,
                      struct backend_prefix **out, size_t *bytes, char *err, size_t err_len);
void cudabe_prefix_free(struct backend *be, struct backend_prefix *p);
int cudabe_session_new_shared(struct backend *be, const struct backend_prefix *p,
                              struct backend_session **out, char *err, size_t err_len);
int cudabe_prefix_image(struct backend *be, const struct backend_prefix *p, int n,
                        struct kv_image *out, char *err, size_t err_len);
/* Whether image in's sink rows are byte-equal to p's (in must hold its S
 * sinks): -EINVAL naming the first layer that differs. */
int cudabe_prefix_check_image(struct cuda_backend *c, const struct backend_prefix *p,
                              const struct kv_image *in, char *err, size_t err_len);
/* backend_cuda_weights.c */
int cudabe_weights_upload(struct cuda_backend *c, char *err, size_t err_len);
void cudabe_weights_free(struct cuda_backend *c);
/* backend_cuda_forward.c */
int cudabe_forward(struct backend *be, const struct backend_token *tokens, size_t n_tokens,
                   float *logits, char *err, size_t err_len);
void cudabe_workspace_free(struct cuda_backend *c);
void cudabe_graphs_clear(struct cuda_backend *c);
/* The layer function of architecture a's layer shape, or NULL. */
cuda_layer_fn cudabe_layer_fn_of(const struct model_arch *a);
/* y (n, w->rows) = x (n, w->cols) . w^T + beta * y on the stream; w and x
 * in dtype dt (CUDA_DT_*). */
int cudabe_gemm(struct cuda_backend *c, const struct cuda_weight *w, int dt, const void *x, int n,
                float *y, float beta, char *err, size_t err_len);
/* backend_cuda_moe.c: layer l's mixture-of-experts feed-forward over the
 * n tokens' residual rows c->x, added into them (waits for the router on
 * the host: not inside a graph capture). */
int cudabe_moe_ffn(struct cuda_backend *c, int n, int l, char *err, size_t err_len);
void cudabe_moe_free(struct cuda_backend *c);
