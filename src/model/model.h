/* A Llama-family model (an architecture of model/arch.h) built from a
 * validated GGUF file:
 * hyper-parameters from metadata, weight matrices checked against them.
 * Matrices keep their file type when the engine computes with it natively
 * (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4); the other block
 * types (Q4_1, Q5_0, Q5_1) are dequantized at load to F16 (F32 for a
 * matrix with values beyond F16's range). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/arch.h"
#include "model/gguf.h"

struct model_hparams {
	const struct model_arch *arch; /* its row of the architecture table */
	int n_vocab;
	int dim;	     /* embedding width */
	int n_layers;
	int n_heads;
	int n_kv_heads;
	int head_dim;	     /* dim / n_heads, or key_length (model_arch_head_width) */
	int ffn_dim;	     /* hidden width of the SwiGLU MLP */
	int rope_dim;	     /* rotated dims per head (<= head_dim) */
	double rope_theta;   /* rope.freq_base, 10000 by default */
	/* linear RoPE scaling: 1 / rope.scaling.factor (0 or 1: none) */
	double rope_freq_scale;
	/* (rope_dim/2) llama3 per-pair frequency factors (rope_freqs.weight:
	 * in the mapping, or a model-owned copy when unaligned), or NULL */
	const float *rope_factors;
	/* longrope (phi3): rope_factors_long.weight / rope_factors_short.weight
	 * (rope_dim/2 each, or NULL); which set a cache turns by follows from
	 * its context against rope_ctx_orig (cache_geometry_set_rope_scaling) */
	const float *rope_factors_long, *rope_factors_short;
	/* YaRN: ext_factor 1 for rope.scaling.type yarn (0: none), over the
	 * original context rope_ctx_orig (rope.scaling.original_context_length,
	 * else context_length; longrope's threshold too) */
	double rope_ext_factor;
	int rope_ctx_orig;
	/* What the rotated dims of queries and keys are multiplied by, as
	 * llama.cpp's rope does: YaRN's magnitude times rope.scaling.attn_factor
	 * (0 or 1: none) */
	float rope_attn_scale;
	/* Model sliding-window layers (gemma2/3): a layer l with layer_swa[l]
	 * set attends over its last swa_window positions only, as the model
	 * was trained, with RoPE base rope_theta_swa (0: rope_theta); layer_swa
	 * is model-owned (n_layers), NULL when no layer slides. */
	int swa_window;
	const uint8_t *layer_swa;
	double rope_theta_swa;
	/* The Gemma shape's (model_arch_attn; 0 elsewhere): attention scores
	 * become attn_softcap * tanh(score / attn_softcap) and logits
	 * final_softcap * tanh(logit / final_softcap) (0: none); queries
	 * scale by attn_scale rather than 1/sqrt(head_dim) (0: that); the
	 * embedding rows by embed_scale (0: none). */
	float attn_softcap;
	float final_softcap;
	float attn_scale;
	float embed_scale;
	float norm_eps;	     /* RMSNorm epsilon */
	int context_length;  /* trained context, informative only */
	/* Mixture of experts (MODEL_LAYER_MOE; 0 elsewhere): n_experts
	 * (expert_count), n_experts_used (expert_used_count, the k of top-k),
	 * expert_ffn_dim (expert_feed_forward_length, else, as llama.cpp,
	 * feed_forward_length / expert_used_count): each expert's hidden width */
	int n_experts;
	int n_experts_used;
	int expert_ffn_dim;
	/* The sliding-window layers turn with the global layers' RoPE scaling
	 * (linear and YaRN) rather than unscaled (gpt-oss: llama.cpp's
	 * rope_freq_scale_train_swa = rope_freq_scale_train) */
	bool swa_rope_scaled;
	bool has_qkv_bias;   /* model_arch_qkv_bias: required, or optional and present */
	bool tied_output;    /* output head shares token_embd */
};

/* A row-major matrix of `rows` rows of `cols` elements: y = W x has
 * rows outputs.  In GGUF terms dims[0] == cols and dims[1] == rows. */
struct weight_matrix {
	enum ggml_type type; /* F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K or MXFP4 */
	int rows;
	int cols;
	const void *data;    /* into the mapping, or into model-owned memory */
	size_t row_bytes;
	/* The same weights re-laid for the CPU kernels, by type: panels for
	 * F32/F16/BF16 (engine/panels.h), the packed layout for the block types
	 * that have one (engine/qpack.h); owned by the backend that made them,
	 * NULL in the model itself. */
	const void *panels;
	/* The tile plan of the packed copy's integer GEMM (engine/tileplan.h),
	 * set with it by the backend from the machine's caches: activation
	 * vectors per pass over a block of rows, and row groups per block;
	 * 0 when there is none (one pass, the driver's block rows). */
	int plan_vecs_per_pass, plan_groups_per_block;
};

struct model_layer {
	const float *attn_norm;		/* (dim) */
	struct weight_matrix wq;	/* (n_heads*head_dim, dim) */
	struct weight_matrix wk;	/* (n_kv_heads*head_dim, dim) */
	struct weight_matrix wv;	/* (n_kv_heads*head_dim, dim) */
	struct weight_matrix wo;	/* (dim, n_heads*head_dim) */
	/* NULL unless has_qkv_bias: (n_heads*head_dim), (n_kv_heads*head_dim) x2 */
	const float *bq, *bk, *bv;
	/* NULL unless the row has QK-norm (qwen3, gemma3): (head_dim) each, an
	 * RMSNorm of every query and key head before RoPE */
	const float *q_norm, *k_norm;
	const float *ffn_norm;		/* (dim) */
	struct weight_matrix w_gate;	/* (ffn_dim, dim) */
	struct weight_matrix w_up;	/* (ffn_dim, dim) */
	struct weight_matrix w_down;	/* (dim, ffn_dim) */
	/* The Gemma shape's norms (NULL where the row has none) */
	const float *post_attn_norm;	/* (dim) */
	const float *post_ffw_norm;	/* (dim) */
	/* gpt-oss (NULL elsewhere): the attention output's bias (dim) and a
	 * learned sink logit per query head (n_heads) */
	const float *bo;
	const float *attn_sinks;
	/* Mixture of experts (MODEL_LAYER_MOE; zero elsewhere, and then
	 * w_gate/w_up/w_down are the dense MLP; in an MoE layer those three
	 * are empty, rows 0): the router (n_experts, dim) and its bias
	 * (n_experts) or NULL; each expert's matrices, views of the file's 3-D
	 * tensors, one struct weight_matrix per expert (model-owned arrays of
	 * n_experts): gate and up (expert_ffn_dim, dim), down (dim,
	 * expert_ffn_dim); their biases or NULL (gpt-oss): (n_experts,
	 * expert_ffn_dim) for gate and up, (n_experts, dim) for down, expert e's
	 * at e * width. */
	struct weight_matrix w_router;
	const float *b_router;
	struct weight_matrix *exp_gate, *exp_up, *exp_down;
	const float *exp_b_gate, *exp_b_up, *exp_b_down;
};

struct model {
	struct model_hparams hp;
	struct weight_matrix token_embd; /* (n_vocab, dim) */
	const float *output_norm;	 /* (dim) */
	struct weight_matrix output;	 /* (n_vocab, dim); == token_embd when tied */
	struct model_layer *layers;	 /* (n_layers) */
	struct gguf_file *file;		 /* owned: the mapping the weights point into */
	char name[128];			 /* file name without directory and .gguf */
	void **owned;			 /* buffers allocated at load (dequantized, converted) */
	size_t n_owned;
};

struct sinkd_log;

struct model_load_options {
	const char *expected_sha256; /* 64 hex chars or NULL to skip the check */
	struct sinkd_log *log;       /* may be NULL: where large copies are named (debug) */
};

int model_load(const char *path, const struct model_load_options *opt, struct model **out,
	       char *err, size_t err_len);
void model_free(struct model *m);

/* Bytes of the weight matrices one decode step reads, as stored: every
 * layer matrix and the output head, and of a mixture-of-experts layer the
 * router and n_experts_used experts' matrices (a token's share). */
size_t model_weight_bytes(const struct model *m);
/* Weights of those matrices: the multiply-adds of one token's products. */
double model_weight_params(const struct model *m);
/* The same as model_weight_bytes with every expert counted: what must stay
 * resident (equal to model_weight_bytes for a dense model). */
size_t model_file_weight_bytes(const struct model *m);
