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
	 * biases and RoPE; RMSNorm; SwiGLU feed-forward; residual adds */
	MODEL_LAYER_LLAMA = 0,
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
	MODEL_LT_COUNT
};

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
	/* attention.key_length / value_length (no row uses this yet) */
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
enum model_ffn { MODEL_FFN_SWIGLU };

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
/* Whether a file without output.weight reuses token_embd as the head. */
bool model_arch_tied_output(const struct model_arch *a);
/* Whether mixture-of-experts files (expert_count > 0) are loaded. */
bool model_arch_experts(const struct model_arch *a);
enum model_layer_kind model_arch_layer_kind(const struct model_arch *a);
/* The name of a layer tensor after "blk.N." ("attn_q.weight"), or NULL
 * when the architecture has no such tensor.  The biases have names even
 * where model_arch_qkv_bias is NONE: the loader refuses a file that has
 * them. */
const char *model_arch_layer_tensor(const struct model_arch *a, enum model_layer_tensor t);
/* The optional model-level tensor of per-pair RoPE frequency factors
 * (llama3's "rope_freqs.weight": F32, rope_dim/2 values), or NULL when the
 * architecture has none (a file that has it anyway is refused). */
const char *model_arch_rope_factors_tensor(const struct model_arch *a);
/* How many weight tensors (those before the biases) every layer has. */
int model_arch_layer_weights(const struct model_arch *a);
/* The name of model-level tensor t ("token_embd.weight"), or NULL when the
 * architecture has none. */
const char *model_arch_model_tensor(const struct model_arch *a, enum model_tensor t);
enum model_tensor_need model_arch_model_tensor_need(const struct model_arch *a,
                                                    enum model_tensor t);
/* What the row says of layer tensor t: the weights are required, the
 * biases as model_arch_qkv_bias says (NONE: not part of the model). */
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
