/* Mixture-of-experts routing (moe.h): each token's k experts and gating
 * weights from its router logits, the batch's entries grouped by expert by
 * a counting sort, the experts' activations, and the expected number of
 * experts a batch touches.  Both backends route through here so that a
 * token goes to the same experts with the same weights on either; it
 * computes no matrix product and allocates only in moe_route_reserve. */
#include "engine/moe.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "util/errbuf.h"

void moe_route_free(struct moe_route *r)
{
	free(r->expert);
	free(r->weight);
	free(r->start);
	free(r->order);
	free(r->active);
	*r = (struct moe_route){0};
}

int moe_route_reserve(struct moe_route *r, int n_tokens, int k, int n_experts, char *err,
                      size_t err_len)
{
	if (n_experts < 1 || k < 1 || k > n_experts || n_tokens < 0)
		return err_set(err, err_len, -EINVAL,
		               "moe routing: %d experts used of %d (allowed: 1 .. expert count, "
		               "expert count at least 1)",
		               k, n_experts);
	size_t entries = (size_t)n_tokens * k;
	if (entries <= r->cap_entries && (size_t)n_experts <= r->cap_experts) {
		r->k = k;
		r->n_experts = n_experts;
		return 0;
	}
	size_t ce = entries > r->cap_entries ? entries : r->cap_entries;
	size_t cx = (size_t)n_experts > r->cap_experts ? (size_t)n_experts : r->cap_experts;
	moe_route_free(r);
	r->expert = malloc((ce ? ce : 1) * sizeof(int));
	r->weight = malloc((ce ? ce : 1) * sizeof(float));
	r->order = malloc((ce ? ce : 1) * sizeof(int));
	r->start = malloc((cx + 1) * sizeof(int));
	r->active = malloc(cx * sizeof(int));
	if (!r->expert || !r->weight || !r->order || !r->start || !r->active) {
		moe_route_free(r);
		return err_set(err, err_len, -ENOMEM,
		               "moe routing: no memory for %zu token-expert entries", ce);
	}
	r->cap_entries = ce;
	r->cap_experts = cx;
	r->k = k;
	r->n_experts = n_experts;
	return 0;
}

/* Whether logit a (expert ia) ranks before b (expert ib): larger first,
 * the lower index on ties; a NaN ranks last so that it is never picked
 * over a number. */
static bool ranks_before(float a, int ia, float b, int ib)
{
	if (isnan(b))
		return !isnan(a) || ia < ib;
	if (isnan(a))
		return false;
	return a > b || (a == b && ia < ib);
}

/* sel[0..k) = the k best experts of one token's logits, best first
 * (insertion into a sorted list: k is small). */
static void top_k(const float *logits, int n_experts, int k, int *sel)
{
	int have = 0;
	for (int e = 0; e < n_experts; e++) {
		if (have == k && !ranks_before(logits[e], e, logits[sel[k - 1]], sel[k - 1]))
			continue;
		int pos = have < k ? have++ : k - 1;
		while (pos > 0 && ranks_before(logits[e], e, logits[sel[pos - 1]], sel[pos - 1])) {
			sel[pos] = sel[pos - 1];
			pos--;
		}
		sel[pos] = e;
	}
}

/* w[0..k) = the gating weights of the chosen experts sel[0..k), the best
 * (largest logit) first. */
static void gate_weights(const float *logits, int n_experts, const int *sel, int k,
                         enum model_gating g, bool norm_weights, float *w)
{
	float max = logits[sel[0]];
	double sum = 0.0;
	if (g == MODEL_GATING_SOFTMAX) {
		/* the chosen experts' probabilities under a softmax over all */
		for (int e = 0; e < n_experts; e++)
			if (!isnan(logits[e]))
				sum += exp((double)logits[e] - max);
		double chosen = 0.0;
		for (int j = 0; j < k; j++) {
			w[j] = (float)(exp((double)logits[sel[j]] - max) / sum);
			chosen += w[j];
		}
		if (norm_weights && chosen > 0.0)
			for (int j = 0; j < k; j++)
				w[j] = (float)(w[j] / chosen);
		return;
	}
	for (int j = 0; j < k; j++)
		sum += exp((double)logits[sel[j]] - max);
	for (int j = 0; j < k; j++)
		w[j] = (float)(exp((double)logits[sel[j]] - max) / sum);
}

/* start/order/active from expert[]: a counting sort of the entries by
 * expert, entries in increasing index (so by increasing token) within one. */
static void group_by_expert(struct moe_route *r)
{
	int n_entries = r->n_tokens * r->k;
	for (int e = 0; e <= r->n_experts; e++)
		r->start[e] = 0;
	for (int i = 0; i < n_entries; i++)
		r->start[r->expert[i] + 1]++;
	r->n_active = 0;
	for (int e = 0; e < r->n_experts; e++) {
		if (r->start[e + 1] > 0)
			r->active[r->n_active++] = e;
		r->start[e + 1] += r->start[e];
	}
	/* start[e] serves as e's cursor and ends at e's end, which is e+1's
	 * start: shifted back by one expert afterwards */
	for (int i = 0; i < n_entries; i++)
		r->order[r->start[r->expert[i]]++] = i;
	for (int e = r->n_experts; e > 0; e--)
		r->start[e] = r->start[e - 1];
	r->start[0] = 0;
}

void moe_route_compute(struct moe_route *r, const float *logits, int n_tokens, enum model_gating g,
                       bool norm_weights)
{
	int k = r->k, ne = r->n_experts;
	r->n_tokens = n_tokens;
	for (int t = 0; t < n_tokens; t++) {
		const float *l = logits + (size_t)t * ne;
		int *sel = r->expert + (size_t)t * k;
		top_k(l, ne, k, sel);
		gate_weights(l, ne, sel, k, g, norm_weights, r->weight + (size_t)t * k);
	}
	group_by_expert(r);
}

void moe_expert_act(float *gate, const float *up, size_t n, enum model_expert_act act, float alpha,
                    float limit)
{
	if (act == MODEL_EXPERT_SWIGLU_OAI) {
		for (size_t i = 0; i < n; i++) {
			float x = fminf(gate[i], limit);
			float y = fminf(fmaxf(up[i], -limit), limit);
			gate[i] = x / (1.0f + expf(-alpha * x)) * (y + 1.0f);
		}
		return;
	}
	for (size_t i = 0; i < n; i++) {
		float x = gate[i];
		gate[i] = x / (1.0f + expf(-x)) * up[i];
	}
}

double moe_expected_active(int n_experts, int k, double n)
{
	if (n_experts < 1 || k < 1 || n <= 0.0)
		return 0.0;
	if (k >= n_experts)
		return n_experts;
	return n_experts * (1.0 - pow(1.0 - (double)k / n_experts, n));
}
