/* Test fixture for the gemma2 / gemma3 rows: writes a small GGUF of either
 * (its keys and tensor names as llama.cpp's converter writes them, random
 * weights, norms random around 1) and computes its last-position logits by
 * brute force in double, straight from the weights it wrote and llama.cpp's
 * rules (not from the loader), for the CPU and CUDA backend tests.  The
 * reference attends over every earlier position with the layer's RoPE base
 * and, on sliding layers, only the last sliding_window positions. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct gemma_spec {
	const char *arch; /* "gemma2" or "gemma3" */
	int dim, layers, heads, kv_heads, head_dim, ffn, vocab;
	/* keys written only when >= 0 (else the row's default applies) */
	float attn_softcap;  /* gemma2.attn_logit_softcapping */
	float final_softcap; /* <arch>.final_logit_softcapping */
	int sliding_window;  /* attention.sliding_window */
	int swa_pattern;     /* attention.sliding_window_pattern */
	float rope_theta_swa; /* rope.freq_base_swa */
	float rope_theta;    /* rope.freq_base (always written) */
	float rope_factor;   /* > 0: rope.scaling.type linear, rope.scaling.factor */
	float wscale;        /* weights uniform in [-wscale, wscale] */
	int key_length_swa;  /* attention.key_length_swa, written when >= 0 */
	bool pattern_array;  /* sliding_window_pattern as a per-layer array */
	uint64_t seed;
};

/* A spec with every optional key absent: `arch`, 2 layers of width 32, 4
 * heads of 16 on 2 kv heads (n_heads * head_dim != dim), vocabulary 64. */
struct gemma_spec gemma_spec_default(const char *arch);

struct gemma_model; /* the weights written, for the reference */

/* Writes the GGUF to path (ck_assert on failure). */
struct gemma_model *gemma_write(const struct gemma_spec *sp, const char *path);
void gemma_model_free(struct gemma_model *g);

/* Last-position logits (vocab) of ids[0..n) by brute force. */
void gemma_reference(const struct gemma_model *g, const int32_t *ids, int n, double *logits);
/* The same with every layer global (no sliding window, every layer at the
 * global RoPE base and scaling): what a backend that ignores the model's
 * sliding layers computes. */
void gemma_reference_all_global(const struct gemma_model *g, const int32_t *ids, int n,
                                double *logits);
