/* The architectures sinkd loads, one descriptor each: everything that
 * differs between them (GGUF name and key prefix, RoPE style, biases, head
 * widths, norm, feed-forward, tied output head, per-layer tensor names, the
 * optional RoPE frequency-factor tensor, the
 * name snapshots carry, the shape of a layer that the backends compute).
 * The loader, the config's cache geometry, both backends and the session
 * snapshots read these through the accessors below; no other file names an
 * architecture.  A new architecture is a row in arch.c (and, when its layer
 * has a new shape, a layer function in each backend). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct model_arch;

/* The shape of one transformer layer: each backend keeps a table of layer
 * functions indexed by it, so an architecture picks its function once. */
enum model_layer_kind {
	/* pre-norm RMSNorm; grouped-query attention with optional Q/K/V
	 * biases, optional per-head QK-norm (an RMSNorm of each query and key
	 * head before RoPE, qwen3) and RoPE; RMSNorm; SwiGLU feed-forward;
	 * residual adds */
	MODEL_LAYER_LLAMA = 0,
	/* the Gemma shape: pre-norm RMSNorm; grouped-query attention with
	 * optional per-head QK-norm, RoPE and a query scale; RMSNorm of the
	 * attention output (post_attention_norm); residual add; RMSNorm;
	 * GeGLU feed-forward; RMSNorm of its output (post_ffw_norm); residual
	 * add (model_arch_attn says what else the row's attention does) */
	MODEL_LAYER_GEMMA,
	/* the Llama shape's attention (with what the row adds: Q/K/V and
	 * output biases, QK-norm, learned sink logits) and a mixture-of-experts
	 * feed-forward: router, top-k experts with the row's gating
	 * (model_arch_moe), each expert a gated MLP, their outputs summed by
	 * the gating weights (gpt-oss, qwen3moe) */
	MODEL_LAYER_MOE,
	MODEL_LAYER_KINDS
};

/* The tensors of one layer, in the order the loader reads them. */
enum model_layer_tensor {
	MODEL_LT_ATTN_NORM = 0,
	MODEL_LT_Q,
	MODEL_LT_K,
	MODEL_LT_V,
	MODEL_LT_O,
	MODEL_LT_FFN_NORM,
	MODEL_LT_GATE,
	MODEL_LT_UP,
	MODEL_LT_DOWN,
	/* Q, K and V rows stacked in one matrix (phi3), for a row whose
	 * MODEL_LT_Q/K/V are NULL: the loader views it as wq, wk, wv */
	MODEL_LT_QKV,
	MODEL_LT_BQ, /* the Q/K/V biases: as model_arch_qkv_bias says */
	MODEL_LT_BK,
	MODEL_LT_BV,
	/* the Gemma shape's tensors (required where a row names them) */
	MODEL_LT_POST_ATTN_NORM, /* (dim) RMSNorm of the attention output */
	MODEL_LT_POST_FFW_NORM,  /* (dim) RMSNorm of the feed-forward output */
	MODEL_LT_Q_NORM,         /* (head_dim) RMSNorm of each query head */
	MODEL_LT_K_NORM,         /* (head_dim) RMSNorm of each key head */
	/* gpt-oss: the attention output's bias (dim) and a learned sink logit
	 * per query head (n_heads, F32), required where a row names them */
	MODEL_LT_BO,
	MODEL_LT_SINKS,
	/* mixture of experts (MODEL_LAYER_MOE): the router (n_experts, dim)
	 * and its bias (n_experts, gpt-oss); the experts' matrices as 3-D
	 * tensors [cols, rows, n_experts] (gate and up: expert_ffn x dim;
	 * down: dim x expert_ffn) and their biases [rows, n_experts] (gpt-oss) */
	MODEL_LT_GATE_INP,
	MODEL_LT_GATE_INP_B,
	MODEL_LT_GATE_EXPS,
	MODEL_LT_UP_EXPS,
	MODEL_LT_DOWN_EXPS,
	MODEL_LT_GATE_EXPS_B,
	MODEL_LT_UP_EXPS_B,
	MODEL_LT_DOWN_EXPS_B,
	MODEL_LT_COUNT
};

/* Whether layer tensor t is one of the Q/K/V biases. */
static inline bool model_layer_tensor_is_bias(int t)
{
	return t >= MODEL_LT_BQ && t <= MODEL_LT_BV;
}

/* Whether a file of this architecture has Q/K/V biases. */
enum model_bias {
	MODEL_BIAS_NONE,     /* never: a file that has them is refused */
	MODEL_BIAS_OPTIONAL, /* when the file has blk.0's */
	MODEL_BIAS_REQUIRED, /* always: every layer must have them */
};

/* Where the width of an attention head comes from. */
enum model_head_width {
	/* embedding_length / head_count; key_length and value_length, when
	 * present, must equal it */
	MODEL_HEAD_WIDTH_SPLIT,
	/* attention.key_length / value_length (default embedding_length /
	 * head_count), which must be equal; n_heads * head_dim may differ
	 * from embedding_length */
	MODEL_HEAD_WIDTH_KEYS,
};

/* The tensors outside the layers. */
enum model_tensor {
	MODEL_T_TOKEN_EMBD = 0,
	MODEL_T_OUTPUT_NORM,
	MODEL_T_OUTPUT,       /* optional: without it the head is token_embd */
	MODEL_T_ROPE_FACTORS, /* per-pair RoPE frequency factors (llama3) */
	MODEL_T_ROPE_LONG,    /* longrope's factors beyond the original context (phi3) */
	MODEL_T_ROPE_SHORT,   /* longrope's factors within it */
	MODEL_T_COUNT
};

/* What a row says of a tensor: a file must have it, may have it, or has
 * no business having it (refused by name, never skipped). */
enum model_tensor_need {
	MODEL_TENSOR_NONE = 0,
	MODEL_TENSOR_REQUIRED,
	MODEL_TENSOR_OPTIONAL,
};

enum model_norm { MODEL_NORM_RMS };
/* SwiGLU: silu(gate) * up; GeGLU: gelu(gate) * up, GELU in its tanh
 * approximation (as llama.cpp computes it). */
enum model_ffn { MODEL_FFN_SWIGLU, MODEL_FFN_GEGLU };

/* How a mixture-of-experts router's logits become k experts and their
 * weights (llama.cpp's llama_expert_gating_func_type and norm_w). */
enum model_gating {
	/* softmax over all experts, the k most probable, their probabilities
	 * as weights (renormalised to sum 1 where model_arch_moe.norm_weights:
	 * qwen3moe) */
	MODEL_GATING_SOFTMAX,
	/* the k largest logits, a softmax over those k as weights (gpt-oss) */
	MODEL_GATING_TOPK_SOFTMAX,
};

/* What an expert computes from its gate and up rows. */
enum model_expert_act {
	MODEL_EXPERT_SWIGLU, /* silu(gate) * up */
	/* gpt-oss's clamped SwiGLU: g = min(gate, limit), u = clamp(up,
	 * -limit, limit), g * sigmoid(alpha * g) * (u + 1) */
	MODEL_EXPERT_SWIGLU_OAI,
};

/* A row's mixture-of-experts facts (experts false: expert_count > 0 is
 * refused).  The counts come from <arch>.expert_count, expert_used_count
 * and expert_feed_forward_length (model_hparams). */
struct model_arch_moe {
	bool experts;
	enum model_gating gating;
	bool norm_weights;
	enum model_expert_act act;
	float act_alpha, act_limit; /* MODEL_EXPERT_SWIGLU_OAI: 1.702, 7.0 */
};

/* What a row's attention and logits do beyond the Llama shape, and which
 * keys say so (all zero for the Llama family).  Sliding-window layers:
 * <arch>.attention.sliding_window (absent: swa_window_default; 0: none)
 * and attention.sliding_window_pattern (absent: swa_period_default): layer
 * l slides unless l % period == period - 1 (period 0: every layer), as
 * llama.cpp's set_swa_pattern; their RoPE base rope.freq_base_swa (absent:
 * rope_theta_swa_default, 0 meaning rope.freq_base). */
struct model_arch_attn {
	bool sliding;               /* reads the keys above */
	int swa_window_default;     /* 0: no layer slides without the key */
	int swa_period_default;
	double rope_theta_swa_default;
	/* whether sliding layers take the linear RoPE scaling too (gemma2)
	 * rather than none (gemma3): sinkd computes only the latter */
	bool swa_rope_scaled;
	/* attn_logit_softcapping read (default attn_softcap_default):
	 * scores become cap * tanh(score / cap) before the softmax */
	bool attn_softcap;
	double attn_softcap_default;
	/* final_logit_softcapping read (default final_softcap_default, 0:
	 * none): logits become cap * tanh(logit / cap) */
	bool final_softcap;
	double final_softcap_default;
	/* the embedding rows scaled by sqrt(embedding_length) */
	bool embed_scale;
	/* > 0: queries scale by 1/sqrt(head_dim), except in a file of exactly
	 * this many layers by 1/sqrt(embedding_length / head_count), as
	 * llama.cpp does for the 27B models (their query_pre_attn_scalar);
	 * 0: the Llama scale 1/sqrt(head_dim) */
	int full_width_scale_layers;
	/* every query head has a learned sink logit (MODEL_LT_SINKS) that joins
	 * its softmax's denominator with a zero value (gpt-oss) */
	bool learned_sinks;
};

/* The descriptor whose GGUF architecture name is `name`, or NULL. */
const struct model_arch *model_arch_find(const char *name);
/* The same for a file's string of len bytes (not NUL-terminated); an
 * unknown one: -EINVAL and "architecture 'NAME' is not supported
 * (supported: ...)" in err, NAME made printable. */
int model_arch_lookup(const char *name, size_t len, const struct model_arch **out, char *err,
                      size_t err_len);
/* The rows of the table, for listing and tests: 0 <= i < model_arch_count(). */
int model_arch_count(void);
const struct model_arch *model_arch_at(int i);

/* The accessors read a NULL descriptor as the table's first row (llama),
 * what a zeroed struct model_hparams always meant. */

/* general.architecture, also the prefix of its keys ("<name>.block_count"). */
const char *model_arch_name(const struct model_arch *a);
/* What a session snapshot records (at most 31 bytes). */
const char *model_arch_snapshot_name(const struct model_arch *a);
/* RoPE over the two halves of the rotated dims (NeoX), not adjacent pairs. */
bool model_arch_rope_neox(const struct model_arch *a);
enum model_bias model_arch_qkv_bias(const struct model_arch *a);
enum model_head_width model_arch_head_width(const struct model_arch *a);
enum model_norm model_arch_norm(const struct model_arch *a);
/* The key of the norm epsilon, after the prefix. */
const char *model_arch_norm_eps_key(const struct model_arch *a);
enum model_ffn model_arch_ffn(const struct model_arch *a);
/* Whether the FFN's up matrix (ffn_up.weight) holds the gate rows then the
 * up rows (phi3; llama.cpp's swiglu takes silu of the first half), with no
 * ffn_gate.weight: the loader views its halves as w_gate and w_up. */
bool model_arch_fused_gate_up(const struct model_arch *a);
/* Whether a file without output.weight reuses token_embd as the head
 * (always, where the row has no output.weight at all). */
bool model_arch_tied_output(const struct model_arch *a);
/* Whether the row knows the key "<name>.<suffix>": one the loader reads,
 * or one known not to change the forward pass (context_length,
 * vocab_size, ...).  A file with another "<name>.*" key is refused naming
 * it: the key could change the forward pass. */
bool model_arch_knows_key(const struct model_arch *a, const char *suffix);
/* Whether mixture-of-experts files (expert_count > 0) are loaded. */
bool model_arch_experts(const struct model_arch *a);
/* The row's mixture-of-experts facts (model_arch_moe above). */
const struct model_arch_moe *model_arch_moe(const struct model_arch *a);
enum model_layer_kind model_arch_layer_kind(const struct model_arch *a);
/* The row's attention and logit facts (model_arch_attn above). */
const struct model_arch_attn *model_arch_attn(const struct model_arch *a);
/* The name of a layer tensor after "blk.N." ("attn_q.weight"), or NULL
 * when the architecture has no such tensor.  The biases have names even
 * where model_arch_qkv_bias is NONE: the loader refuses a file that has
 * them. */
const char *model_arch_layer_tensor(const struct model_arch *a, enum model_layer_tensor t);
/* The optional model-level tensor of per-pair RoPE frequency factors
 * (llama3's "rope_freqs.weight": F32, rope_dim/2 values), or NULL when the
 * architecture has none (a file that has it anyway is refused). */
const char *model_arch_rope_factors_tensor(const struct model_arch *a);
/* How many tensors besides the biases every layer has. */
int model_arch_layer_weights(const struct model_arch *a);
/* The name of model-level tensor t ("token_embd.weight"), or NULL when the
 * architecture has none. */
const char *model_arch_model_tensor(const struct model_arch *a, enum model_tensor t);
enum model_tensor_need model_arch_model_tensor_need(const struct model_arch *a,
                                                    enum model_tensor t);
/* What the row says of layer tensor t: the named weights and norms are
 * required, the biases as model_arch_qkv_bias says (NONE: not part of the
 * model). */
enum model_tensor_need model_arch_layer_tensor_need(const struct model_arch *a,
                                                    enum model_layer_tensor t);
/* Which tensor of the row a file's tensor name is: a model-level one
 * (*layer -1, *t its enum model_tensor) or blk.<layer>.<layer tensor>
 * (*t its enum model_layer_tensor; <layer> decimal without leading zeros,
 * unchecked against block_count); false for a name the row does not know,
 * whatever its need. */
bool model_arch_tensor_parse(const struct model_arch *a, const char *name, int *layer, int *t);
/* The tensors a file of the row may hold, for an error message:
 * "token_embd.weight, ...; per layer blk.N.: attn_norm.weight, ...",
 * truncated to out_len. */
void model_arch_tensor_names(const struct model_arch *a, char *out, size_t out_len);
