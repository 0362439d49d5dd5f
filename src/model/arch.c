/* The architecture table: one row per architecture sinkd loads, with what
 * sets it apart, and the accessors the loader, config, backends and
 * snapshots read it through.  It holds facts only: reading a file is the
 * loader's job (model.c), computing a layer the backends'. */
#include "model/arch.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/errbuf.h"

struct model_arch {
	const char *name;          /* general.architecture and key prefix */
	const char *snapshot_name; /* what session snapshots record */
	bool rope_neox;            /* RoPE over halves (NeoX) rather than adjacent pairs */
	enum model_bias qkv_bias;
	enum model_head_width head_width;
	enum model_norm norm;
	const char *norm_eps_key; /* after "<name>." */
	enum model_ffn ffn;
	bool fused_gate_up; /* ffn_up.weight holds gate then up rows */
	struct model_arch_moe moe; /* experts false: expert_count > 0 refused */
	enum model_layer_kind layer;
	struct model_arch_attn attn; /* beyond the Llama shape (zero: nothing) */
	/* the model-level tensors a file must or may have (name NULL: none);
	 * an optional output.weight means a tied head when it is absent */
	struct {
		const char *name;
		enum model_tensor_need need;
	} model_tensor[MODEL_T_COUNT];
	const char *layer_tensor[MODEL_LT_COUNT]; /* after "blk.N."; NULL: none */
	/* the "<name>.*" keys a file may hold, after the prefix: a family's
	 * list and the row's own additions (each NULL-ended, or NULL) */
	const char *const *keys, *const *keys_more;
};

/* The Llama family's keys (llama-arch.cpp's LLM_KV_* names): those the
 * loader reads, and those that do not change its forward pass: the
 * trained context and vocabulary size, the context a RoPE scaling was
 * fine-tuned from (informative for linear scaling; the types that use it
 * are refused), whether it was fine-tuned, and the experts used per token
 * (expert_count > 0 is refused).  The YaRN and alpha parameters, sliding
 * windows, soft-caps, logit or residual scales and the like are not here:
 * a file with them is refused. */
static const char *const llama_family_keys[] = {
    "context_length",
    "vocab_size",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "rope.dimension_count",
    "rope.freq_base",
    "rope.scale_linear",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.attn_factor",
    "rope.scaling.original_context_length",
    "rope.scaling.finetuned",
    "expert_count",
    "expert_used_count",
    NULL,
};

/* What phi3 files carry beyond the Llama family's keys: a sliding window
 * that llama.cpp's phi3 does not apply (it attends over the whole
 * context), so neither does sinkd. */
static const char *const phi3_keys[] = {"attention.sliding_window", NULL};

/* What the mixture-of-experts rows read beyond the Llama family's keys:
 * each expert's hidden width (gpt-oss: required, qwen3moe: default
 * feed_forward_length / expert_used_count, as llama.cpp). */
static const char *const qwen3moe_keys[] = {"expert_feed_forward_length", NULL};

/* gpt-oss's: the expert width, its sliding layers' window, pattern and
 * RoPE base (llama.cpp's openai-moe reads these three; no soft-caps). */
static const char *const gptoss_keys[] = {
    "expert_feed_forward_length",       "attention.sliding_window",
    "attention.sliding_window_pattern", "rope.freq_base_swa",
    NULL,
};

/* The Llama shape's layer tensor names, which the Gemma shape shares. */
#define LLAMA_LAYER_TENSORS                                                                        \
	[MODEL_LT_ATTN_NORM] = "attn_norm.weight", [MODEL_LT_Q] = "attn_q.weight",                 \
	[MODEL_LT_K] = "attn_k.weight", [MODEL_LT_V] = "attn_v.weight",                            \
	[MODEL_LT_O] = "attn_output.weight", [MODEL_LT_FFN_NORM] = "ffn_norm.weight",              \
	[MODEL_LT_GATE] = "ffn_gate.weight", [MODEL_LT_UP] = "ffn_up.weight",                      \
	[MODEL_LT_DOWN] = "ffn_down.weight", [MODEL_LT_BQ] = "attn_q.bias",                        \
	[MODEL_LT_BK] = "attn_k.bias", [MODEL_LT_BV] = "attn_v.bias"

/* A mixture-of-experts layer's attention (the Q/K/V biases named, as the
 * row's qkv_bias says), router and expert matrices; the rest of each row's
 * layer (norms, the routers' and experts' biases) is its own. */
#define MOE_LAYER_TENSORS                                                                          \
	[MODEL_LT_ATTN_NORM] = "attn_norm.weight", [MODEL_LT_Q] = "attn_q.weight",                 \
	[MODEL_LT_K] = "attn_k.weight", [MODEL_LT_V] = "attn_v.weight",                            \
	[MODEL_LT_O] = "attn_output.weight", [MODEL_LT_BQ] = "attn_q.bias",                        \
	[MODEL_LT_BK] = "attn_k.bias", [MODEL_LT_BV] = "attn_v.bias",                              \
	[MODEL_LT_GATE_INP] = "ffn_gate_inp.weight", [MODEL_LT_GATE_EXPS] = "ffn_gate_exps.weight", \
	[MODEL_LT_UP_EXPS] = "ffn_up_exps.weight", [MODEL_LT_DOWN_EXPS] = "ffn_down_exps.weight"

/* What the mixture-of-experts rows share: NeoX RoPE, heads as wide as
 * key_length, RMSNorm, the MoE layer shape, the Llama family's keys and
 * model tensors; output: the need of output.weight (optional: tied). */
#define MOE_FAMILY(output_need)                                                                    \
	.rope_neox = true, .head_width = MODEL_HEAD_WIDTH_KEYS, .norm = MODEL_NORM_RMS,            \
	.norm_eps_key = "attention.layer_norm_rms_epsilon", .ffn = MODEL_FFN_SWIGLU,               \
	.layer = MODEL_LAYER_MOE, .keys = llama_family_keys,                                       \
	.model_tensor = {                                                                          \
	    [MODEL_T_TOKEN_EMBD] = {"token_embd.weight", MODEL_TENSOR_REQUIRED},                   \
	    [MODEL_T_OUTPUT_NORM] = {"output_norm.weight", MODEL_TENSOR_REQUIRED},                 \
	    [MODEL_T_OUTPUT] = {"output.weight", output_need},                                     \
	}

/* What the Gemma family reads beyond the Llama family's keys: its sliding
 * layers and soft-caps (llama-arch.cpp's names). */
static const char *const gemma_family_keys[] = {
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "attention.key_length_swa",
    "attention.value_length_swa",
    "rope.dimension_count_swa",
    "rope.freq_base_swa",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    NULL,
};

/* What the Llama family shares: heads as wide as attention.key_length
 * (default embedding_length / head_count, as llama.cpp reads it), RMSNorm,
 * SwiGLU, a head tied to the embedding when the file has no output.weight,
 * no experts, one layer shape and one set of tensor names; rope_factors:
 * the frequency-factor tensor's name and need (NULL, NONE: none); q_norm,
 * k_norm: the per-head QK-norm tensors' names (NULL: none). */
#define LLAMA_FAMILY(rope_factors, rope_need, q_norm, k_norm)                                      \
	.head_width = MODEL_HEAD_WIDTH_KEYS, .norm = MODEL_NORM_RMS,                               \
	.norm_eps_key = "attention.layer_norm_rms_epsilon", .ffn = MODEL_FFN_SWIGLU,               \
	.layer = MODEL_LAYER_LLAMA, .keys = llama_family_keys,                                     \
	.model_tensor =                                                                            \
	    {                                                                                      \
	        [MODEL_T_TOKEN_EMBD] = {"token_embd.weight", MODEL_TENSOR_REQUIRED},               \
	        [MODEL_T_OUTPUT_NORM] = {"output_norm.weight", MODEL_TENSOR_REQUIRED},             \
	        [MODEL_T_OUTPUT] = {"output.weight", MODEL_TENSOR_OPTIONAL},                       \
	        [MODEL_T_ROPE_FACTORS] = {rope_factors, rope_need},                                \
	},                                                                                         \
	.layer_tensor = {                                                                          \
	    LLAMA_LAYER_TENSORS,                                                                   \
	    [MODEL_LT_Q_NORM] = q_norm,                                                            \
	    [MODEL_LT_K_NORM] = k_norm,                                                            \
	}

/* What Gemma 2 and 3 share: NeoX RoPE, no biases, heads as wide as
 * key_length, RMSNorm (the converter stores Gemma's 1 + w, so the weights
 * are used as they are), GeGLU, norms after attention and feed-forward, the
 * Gemma layer shape; output: the need of output.weight; qk_norm: the
 * per-head query and key norm tensors' names (NULL: none). */
#define GEMMA_FAMILY(output_need, q_norm, k_norm)                                                  \
	.rope_neox = true, .qkv_bias = MODEL_BIAS_NONE, .head_width = MODEL_HEAD_WIDTH_KEYS,       \
	.norm = MODEL_NORM_RMS, .norm_eps_key = "attention.layer_norm_rms_epsilon",                \
	.ffn = MODEL_FFN_GEGLU, .layer = MODEL_LAYER_GEMMA,                                        \
	.keys = llama_family_keys, .keys_more = gemma_family_keys,                                 \
	.model_tensor =                                                                            \
	    {                                                                                      \
	        [MODEL_T_TOKEN_EMBD] = {"token_embd.weight", MODEL_TENSOR_REQUIRED},               \
	        [MODEL_T_OUTPUT_NORM] = {"output_norm.weight", MODEL_TENSOR_REQUIRED},             \
	        [MODEL_T_OUTPUT] = {"output.weight", output_need},                                 \
	},                                                                                         \
	.layer_tensor = {                                                                          \
	    LLAMA_LAYER_TENSORS,                                                                   \
	    [MODEL_LT_POST_ATTN_NORM] = "post_attention_norm.weight",                              \
	    [MODEL_LT_POST_FFW_NORM] = "post_ffw_norm.weight",                                     \
	    [MODEL_LT_Q_NORM] = q_norm,                                                            \
	    [MODEL_LT_K_NORM] = k_norm,                                                            \
	}

/* One row per architecture: what sets it apart, then its family. */
static const struct model_arch arch_table[] = {
    {.name = "llama",
     .snapshot_name = "llama",
     .rope_neox = false,
     .qkv_bias = MODEL_BIAS_OPTIONAL,
     LLAMA_FAMILY("rope_freqs.weight", MODEL_TENSOR_OPTIONAL, NULL, NULL)},
    {.name = "qwen2",
     .snapshot_name = "qwen2",
     .rope_neox = true,
     .qkv_bias = MODEL_BIAS_REQUIRED,
     LLAMA_FAMILY(NULL, MODEL_TENSOR_NONE, NULL, NULL)},
    /* llama.cpp: sliding window 4096 and every other layer (from layer 0)
     * by default, both soft-caps (50, 30), the head always token_embd */
    {.name = "gemma2",
     .snapshot_name = "gemma2",
     .attn = {.sliding = true,
              .swa_window_default = 4096,
              .swa_period_default = 2,
              .rope_theta_swa_default = 0.0,
              .swa_rope_scaled = true,
              .attn_softcap = true,
              .attn_softcap_default = 50.0,
              .final_softcap = true,
              .final_softcap_default = 30.0,
              .embed_scale = true,
              .full_width_scale_layers = 46},
     GEMMA_FAMILY(MODEL_TENSOR_NONE, NULL, NULL)},
    /* llama.cpp: layers slide only when the file has a sliding window,
     * five of every six, at RoPE base 10000 unscaled; QK-norm; no
     * attention soft-cap, a final one only when the file has the key */
    {.name = "gemma3",
     .snapshot_name = "gemma3",
     .attn = {.sliding = true,
              .swa_window_default = 0,
              .swa_period_default = 6,
              .rope_theta_swa_default = 10000.0,
              .swa_rope_scaled = false,
              .final_softcap = true,
              .final_softcap_default = 0.0,
              .embed_scale = true,
              .full_width_scale_layers = 62},
     GEMMA_FAMILY(MODEL_TENSOR_OPTIONAL, "attn_q_norm.weight", "attn_k_norm.weight")},
    /* llama.cpp's qwen3: an RMSNorm of each query and key head (weights
     * [key_length], the model's epsilon) between the projections and
     * RoPE; its real files have no Q/K/V biases */
    {.name = "qwen3",
     .snapshot_name = "qwen3",
     .rope_neox = true,
     .qkv_bias = MODEL_BIAS_NONE,
     LLAMA_FAMILY(NULL, MODEL_TENSOR_NONE, "attn_q_norm.weight", "attn_k_norm.weight")},
    /* Phi-3 and Phi-4-mini: the llama layer with Q/K/V in one matrix and
     * gate/up in another, NeoX RoPE over rope.dimension_count dims (Phi-4-mini
     * turns 96 of 128), longrope factor sets (which one: geometry.h).  Files
     * with separate attn_q/k/v (llama.cpp takes those too) are refused. */
    {.name = "phi3",
     .snapshot_name = "phi3",
     .rope_neox = true,
     .qkv_bias = MODEL_BIAS_NONE,
     .head_width = MODEL_HEAD_WIDTH_SPLIT,
     .norm = MODEL_NORM_RMS,
     .norm_eps_key = "attention.layer_norm_rms_epsilon",
     .ffn = MODEL_FFN_SWIGLU,
     .fused_gate_up = true,
     .layer = MODEL_LAYER_LLAMA,
     .keys = llama_family_keys,
     .keys_more = phi3_keys,
     .model_tensor =
         {
             [MODEL_T_TOKEN_EMBD] = {"token_embd.weight", MODEL_TENSOR_REQUIRED},
             [MODEL_T_OUTPUT_NORM] = {"output_norm.weight", MODEL_TENSOR_REQUIRED},
             [MODEL_T_OUTPUT] = {"output.weight", MODEL_TENSOR_OPTIONAL},
             [MODEL_T_ROPE_LONG] = {"rope_factors_long.weight", MODEL_TENSOR_OPTIONAL},
             [MODEL_T_ROPE_SHORT] = {"rope_factors_short.weight", MODEL_TENSOR_OPTIONAL},
         },
     .layer_tensor =
         {
             [MODEL_LT_ATTN_NORM] = "attn_norm.weight",
             [MODEL_LT_QKV] = "attn_qkv.weight",
             [MODEL_LT_O] = "attn_output.weight",
             [MODEL_LT_FFN_NORM] = "ffn_norm.weight",
             [MODEL_LT_UP] = "ffn_up.weight",
             [MODEL_LT_DOWN] = "ffn_down.weight",
         }},
    /* OpenAI's gpt-oss (llama.cpp's LLM_ARCH_OPENAI_MOE): the Llama
     * attention with Q/K/V and output biases and a learned sink logit per
     * head, every other layer (from layer 0) sliding over 128 positions
     * with the global layers' RoPE base and scaling (YaRN in the released
     * files), the FFN norm named post_attention_norm, a biased router whose
     * k largest logits are softmaxed into the weights, experts with biases
     * and the clamped SwiGLU; an untied head */
    {.name = "gpt-oss",
     .snapshot_name = "gpt-oss",
     .qkv_bias = MODEL_BIAS_REQUIRED,
     MOE_FAMILY(MODEL_TENSOR_REQUIRED),
     .moe = {.experts = true,
             .gating = MODEL_GATING_TOPK_SOFTMAX,
             .norm_weights = false,
             .act = MODEL_EXPERT_SWIGLU_OAI,
             .act_alpha = 1.702f,
             .act_limit = 7.0f},
     .attn = {.sliding = true,
              .swa_window_default = 128,
              .swa_period_default = 2,
              .rope_theta_swa_default = 0.0,
              .swa_rope_scaled = true,
              .learned_sinks = true},
     .keys_more = gptoss_keys,
     .layer_tensor =
         {
             MOE_LAYER_TENSORS,
             [MODEL_LT_BO] = "attn_output.bias",
             [MODEL_LT_SINKS] = "attn_sinks.weight",
             [MODEL_LT_FFN_NORM] = "post_attention_norm.weight",
             [MODEL_LT_GATE_INP_B] = "ffn_gate_inp.bias",
             [MODEL_LT_GATE_EXPS_B] = "ffn_gate_exps.bias",
             [MODEL_LT_UP_EXPS_B] = "ffn_up_exps.bias",
             [MODEL_LT_DOWN_EXPS_B] = "ffn_down_exps.bias",
         }},
    /* Qwen3-MoE: qwen3's attention (QK-norm, no biases), a router without
     * bias whose softmax over all experts gives the k most probable,
     * renormalised to sum 1, experts of plain SwiGLU without biases */
    {.name = "qwen3moe",
     .snapshot_name = "qwen3moe",
     .qkv_bias = MODEL_BIAS_NONE,
     MOE_FAMILY(MODEL_TENSOR_OPTIONAL),
     .moe = {.experts = true,
             .gating = MODEL_GATING_SOFTMAX,
             .norm_weights = true,
             .act = MODEL_EXPERT_SWIGLU},
     .keys_more = qwen3moe_keys,
     .layer_tensor =
         {
             MOE_LAYER_TENSORS,
             [MODEL_LT_Q_NORM] = "attn_q_norm.weight",
             [MODEL_LT_K_NORM] = "attn_k_norm.weight",
             [MODEL_LT_FFN_NORM] = "ffn_norm.weight",
         }},
};

#define N_ARCH ((int)(sizeof(arch_table) / sizeof(arch_table[0])))

int model_arch_count(void)
{
	return N_ARCH;
}

const struct model_arch *model_arch_at(int i)
{
	return i >= 0 && i < N_ARCH ? &arch_table[i] : NULL;
}

static const struct model_arch *find_len(const char *name, size_t len)
{
	for (int i = 0; i < N_ARCH; i++)
		if (strlen(arch_table[i].name) == len && memcmp(arch_table[i].name, name, len) == 0)
			return &arch_table[i];
	return NULL;
}

const struct model_arch *model_arch_find(const char *name)
{
	return name ? find_len(name, strlen(name)) : NULL;
}

int model_arch_lookup(const char *name, size_t len, const struct model_arch **out, char *err,
                      size_t err_len)
{
	*out = find_len(name, len);
	if (*out)
		return 0;
	/* the file's string, at most 63 bytes and control characters as '?' */
	char shown[64];
	size_t n = len < sizeof(shown) - 1 ? len : sizeof(shown) - 1;
	for (size_t i = 0; i < n; i++)
		shown[i] = (unsigned char)name[i] < 0x20 || name[i] == 0x7f ? '?' : name[i];
	shown[n] = '\0';
	char names[128] = "";
	size_t used = 0;
	for (int i = 0; i < N_ARCH && used < sizeof(names); i++)
		used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "",
		                         arch_table[i].name);
	return err_set(err, err_len, -EINVAL, "architecture '%s' is not supported (supported: %s)",
	               shown, names);
}

/* NULL reads as the first row: a zeroed struct model_hparams (as tests
 * build by hand) keeps meaning llama, as it did when the field was an enum. */
static const struct model_arch *row(const struct model_arch *a)
{
	return a ? a : &arch_table[0];
}

const char *model_arch_name(const struct model_arch *a)
{
	return row(a)->name;
}

const char *model_arch_snapshot_name(const struct model_arch *a)
{
	return row(a)->snapshot_name;
}

bool model_arch_rope_neox(const struct model_arch *a)
{
	return row(a)->rope_neox;
}

enum model_bias model_arch_qkv_bias(const struct model_arch *a)
{
	return row(a)->qkv_bias;
}

enum model_head_width model_arch_head_width(const struct model_arch *a)
{
	return row(a)->head_width;
}

enum model_norm model_arch_norm(const struct model_arch *a)
{
	return row(a)->norm;
}

const char *model_arch_norm_eps_key(const struct model_arch *a)
{
	return row(a)->norm_eps_key;
}

enum model_ffn model_arch_ffn(const struct model_arch *a)
{
	return row(a)->ffn;
}

bool model_arch_fused_gate_up(const struct model_arch *a)
{
	return row(a)->fused_gate_up;
}

bool model_arch_tied_output(const struct model_arch *a)
{
	return row(a)->model_tensor[MODEL_T_OUTPUT].need != MODEL_TENSOR_REQUIRED;
}

static bool listed(const char *const *list, const char *key)
{
	for (const char *const *k = list; k && *k; k++)
		if (strcmp(*k, key) == 0)
			return true;
	return false;
}

bool model_arch_knows_key(const struct model_arch *a, const char *suffix)
{
	return listed(row(a)->keys, suffix) || listed(row(a)->keys_more, suffix);
}

bool model_arch_experts(const struct model_arch *a)
{
	return row(a)->moe.experts;
}

const struct model_arch_moe *model_arch_moe(const struct model_arch *a)
{
	return &row(a)->moe;
}

enum model_layer_kind model_arch_layer_kind(const struct model_arch *a)
{
	return row(a)->layer;
}

const struct model_arch_attn *model_arch_attn(const struct model_arch *a)
{
	return &row(a)->attn;
}

const char *model_arch_layer_tensor(const struct model_arch *a, enum model_layer_tensor t)
{
	return (unsigned)t < MODEL_LT_COUNT ? row(a)->layer_tensor[t] : NULL;
}

const char *model_arch_rope_factors_tensor(const struct model_arch *a)
{
	return row(a)->model_tensor[MODEL_T_ROPE_FACTORS].name;
}

int model_arch_layer_weights(const struct model_arch *a)
{
	int n = 0;
	for (int t = 0; t < MODEL_LT_COUNT; t++)
		n += row(a)->layer_tensor[t] != NULL && !model_layer_tensor_is_bias(t);
	return n;
}

const char *model_arch_model_tensor(const struct model_arch *a, enum model_tensor t)
{
	return (unsigned)t < MODEL_T_COUNT ? row(a)->model_tensor[t].name : NULL;
}

enum model_tensor_need model_arch_model_tensor_need(const struct model_arch *a, enum model_tensor t)
{
	return model_arch_model_tensor(a, t) ? row(a)->model_tensor[t].need : MODEL_TENSOR_NONE;
}

enum model_tensor_need model_arch_layer_tensor_need(const struct model_arch *a,
                                                    enum model_layer_tensor t)
{
	if (model_arch_layer_tensor(a, t) == NULL)
		return MODEL_TENSOR_NONE;
	if (!model_layer_tensor_is_bias(t))
		return MODEL_TENSOR_REQUIRED;
	switch (row(a)->qkv_bias) {
	case MODEL_BIAS_REQUIRED:
		return MODEL_TENSOR_REQUIRED;
	case MODEL_BIAS_OPTIONAL:
		return MODEL_TENSOR_OPTIONAL;
	case MODEL_BIAS_NONE:
		break;
	}
	return MODEL_TENSOR_NONE;
}

/* "blk.<decimal without leading zeros>.", the layer in *layer; the rest
 * after it, or NULL. */
static const char *parse_layer(const char *name, int *layer)
{
	if (strncmp(name, "blk.", 4) != 0)
		return NULL;
	const char *p = name + 4;
	long v = 0;
	int digits = 0;
	for (; *p >= '0' && *p <= '9' && digits < 9; p++, digits++)
		v = v * 10 + (*p - '0');
	if (digits == 0 || *p != '.' || (digits > 1 && name[4] == '0'))
		return NULL;
	*layer = (int)v;
	return p + 1;
}

bool model_arch_tensor_parse(const struct model_arch *a, const char *name, int *layer, int *t)
{
	const char *rest = parse_layer(name, layer);
	if (rest) {
		for (int k = 0; k < MODEL_LT_COUNT; k++)
			if (row(a)->layer_tensor[k] && strcmp(rest, row(a)->layer_tensor[k]) == 0) {
				*t = k;
				return true;
			}
		return false;
	}
	*layer = -1;
	for (int k = 0; k < MODEL_T_COUNT; k++)
		if (row(a)->model_tensor[k].name &&
		    strcmp(name, row(a)->model_tensor[k].name) == 0) {
			*t = k;
			return true;
		}
	return false;
}

void model_arch_tensor_names(const struct model_arch *a, char *out, size_t out_len)
{
	size_t used = 0;
	const char *sep = "";
	out[0] = '\0';
	for (int k = 0; k < MODEL_T_COUNT && used < out_len; k++)
		if (model_arch_model_tensor_need(a, (enum model_tensor)k) != MODEL_TENSOR_NONE) {
			used += (size_t)snprintf(out + used, out_len - used, "%s%s", sep,
			                         row(a)->model_tensor[k].name);
			sep = ", ";
		}
	sep = "; per layer blk.N.: ";
	for (int k = 0; k < MODEL_LT_COUNT && used < out_len; k++)
		if (model_arch_layer_tensor_need(a, (enum model_layer_tensor)k) !=
		    MODEL_TENSOR_NONE) {
			used += (size_t)snprintf(out + used, out_len - used, "%s%s", sep,
			                         row(a)->layer_tensor[k]);
			sep = ", ";
		}
}
