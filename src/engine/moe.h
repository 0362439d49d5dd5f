/* Mixture-of-experts routing, the one policy both backends follow: from a
 * batch's router logits, each token's k experts and their weights by the
 * architecture's gating (model/arch.h: enum model_gating), then the batch's
 * tokens grouped by expert, so that a backend reads each active expert's
 * weights once per forward (CPU: one matrix product per active expert over
 * its tokens; CUDA: one launch per expert over a token index list).  Also
 * the experts' activations and what the scheduler's planner needs: the
 * experts a batch of n tokens is expected to touch.  Plain C, no threads,
 * no allocation after moe_route_reserve. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "model/arch.h"

/* One batch's routing.  Entries are (token, rank) pairs, n_tokens * k of
 * them: entry t*k + j is token t's j-th expert, experts by decreasing
 * logit (ties: the lower index first). */
struct moe_route {
	int n_tokens, k, n_experts;
	int *expert;   /* (n_tokens * k) entry -> expert */
	float *weight; /* (n_tokens * k) entry -> gating weight */
	/* Grouped by expert: the entries of expert e are
	 * order[start[e] .. start[e+1]) (entry indices, by increasing token);
	 * active[0 .. n_active) the experts with at least one token, by
	 * increasing index. */
	int *start; /* (n_experts + 1) */
	int *order; /* (n_tokens * k) */
	int *active;
	int n_active;
	size_t cap_entries, cap_experts; /* what reserve allocated */
};

/* Sizes r for batches of up to n_tokens tokens, k of n_experts each
 * (grows, never shrinks); -ENOMEM or -EINVAL (k outside 1..n_experts) with
 * err. */
int moe_route_reserve(struct moe_route *r, int n_tokens, int k, int n_experts, char *err,
                      size_t err_len);
void moe_route_free(struct moe_route *r);

/* Routes n_tokens tokens (<= reserved) from their router logits (n_tokens,
 * n_experts; the router's bias already added) by gating g, norm_weights as
 * model_arch_moe says, and groups them by expert. */
void moe_route_compute(struct moe_route *r, const float *logits, int n_tokens,
                       enum model_gating g, bool norm_weights);

/* gate[i] = act(gate[i], up[i]) for i < n: SwiGLU or gpt-oss's clamped one
 * (model_arch_moe's alpha and limit). */
void moe_expert_act(float *gate, const float *up, size_t n, enum model_expert_act act,
                    float alpha, float limit);

/* The experts a batch of n tokens is expected to touch when each picks k of
 * n_experts uniformly: n_experts * (1 - (1 - k/n_experts)^n). */
double moe_expected_active(int n_experts, int k, double n);
