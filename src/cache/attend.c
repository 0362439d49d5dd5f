/* Attention of one query over the tiered cache of one layer:
 * softmax(q.k / sqrt(head_dim)) over sink + anchor + compressed + staging +
 * hot tokens (and the model's learned sink logit, when it has one: a term
 * of the denominator with a zero value), in fp32 with a max-subtracted
 * softmax, GQA (query head h reads kv head h / (n_heads / n_kv_heads)).  Query heads that share a kv head are
 * processed together (up to ATTEND_MAX_HEADS), so each key and value row is
 * read once per group rather than once per head.  Quantized tokens are used
 * without materialising them:
 *   keys per channel   q.k = sum_j (q_j*scale_j)*c_j + sum_j q_j*min_j
 *   rows per token     q.k = scale * sum_j q_j*c_j + min * sum_j q_j
 *   values per token   out += (p*scale) * c + p*min
 * Reads the cache only; every temporary lives in the caller's scratch, so
 * disjoint head ranges may run on several threads at once.  It does not
 * change tiers or positions (sinkcache.c); the loops are attend_kernels.c. */
#include <math.h>
#include <string.h>

#include "cache/attend_kernels.h"
#include "cache/rope.h"
#include "cache/sinkcache_impl.h"
#include "util/tuning.h"

/* One group of r query heads on kv head kh, and its scratch. */
struct attend_ctx {
	const struct sinkcache *c;
	const struct kv_layer *L;
	int kh, r, d, ld;
	float *scores; /* (r, ld) scores, then exp(score - max): probabilities * sum */
	float *w;      /* (r, ld) exp * value scale of quantized rows */
	float *qw;     /* (r, d) queries rotated for window keys, scaled by 1/sqrt(d) */
	float *qs;     /* (r, d) same for sink and anchor keys */
	float *qsc;    /* (r, d) qw * per-channel key scale of one group */
	float *acc;    /* (r, ATTEND_PARTS, d) output accumulator, in parts (attend_kernels.h) */
	bool prefetch; /* rows not loaded ahead (load_ahead): prefetch them */
	float qsum[ATTEND_MAX_HEADS], bias[ATTEND_MAX_HEADS];
	float inv[ATTEND_MAX_HEADS]; /* 1 / sum of the exps: the output's scale */
};

size_t sinkcache_scratch_floats(const struct cache_geometry *g)
{
	size_t cap = cache_geometry_capacity_tokens(g), d = (size_t)g->head_dim;
	if (cap == 0)
		return 0;
	return ATTEND_MAX_HEADS * (2 * cap + (3 + ATTEND_PARTS) * d) + 16;
}

/* Cache prefetch of the rows a head group reads, when they are too many to
 * load ahead (load_ahead below), up to TUNING_ATTEND_PREFETCH_MAX bytes a
 * run (util/tuning.h says why). */
#define ATTEND_PREFETCH_MAX TUNING_ATTEND_PREFETCH_MAX

static void prefetch_bytes(const unsigned char *p, size_t bytes)
{
	if (bytes > ATTEND_PREFETCH_MAX)
		bytes = ATTEND_PREFETCH_MAX;
	for (size_t o = 0; o < bytes; o += 64)
		__builtin_prefetch(p + o, 0, 3);
}

static void prefetch_ring(const struct sinkcache *c, const struct kv_run *ring,
                          const unsigned char *base, int kh)
{
	const unsigned char *hb = base + (size_t)kh * (size_t)ring->cap * c->fp_row;
	int first = kv_run_first(ring);
	prefetch_bytes(hb + (size_t)ring->head * c->fp_row, (size_t)first * c->fp_row);
	prefetch_bytes(hb, (size_t)(ring->n - first) * c->fp_row);
}

/* Prefetch of the keys (values false) or values of kv head kh: the
 * full-precision tiers and quantized sinks (groups are long runs). */
static void attend_prefetch(const struct sinkcache *c, const struct kv_layer *L, int kh,
                            bool values)
{
	if (L->sink_quant) {
		size_t at = (size_t)kh * (size_t)L->caps.sink;
		prefetch_bytes((values ? L->sink_v : L->sink_k) + at * c->code_row,
		               (size_t)L->t.n_sink * c->code_row);
	} else {
		struct kv_run sinks = {0, L->t.n_sink, L->caps.sink};
		prefetch_ring(c, &sinks, values ? L->sink_v : L->sink_k, kh);
	}
	struct kv_run anchors = {0, L->anc.n, L->caps.anchor};
	if (L->anc.n > 0)
		prefetch_ring(c, &anchors, values ? L->a_v : L->a_k, kh);
	struct kv_run stage = kv_ring_run(&L->stage, L->t.n_stage);
	struct kv_run hot = kv_ring_run(&L->hot, L->t.n_hot);
	prefetch_ring(c, &stage, values ? L->st_v : L->st_k, kh);
	prefetch_ring(c, &hot, values ? L->hot_v : L->hot_k, kh);
}

/* Loading a query's rows ahead, when they fit in a core's L2 (three
 * quarters of it: sinkcache.load_ahead_max), with plain loads of four runs
 * side by side.  A decode step attends each session's
 * layer once, its rows cold (the matrix products ran in between), and the
 * cache prefetches above did not overlap the arithmetic: once a few dozen
 * misses were outstanding the next prefetch stalled the core.  Larger sets
 * (long windows) keep the prefetches: their start would be evicted before
 * use.  Measurements: tests/bench/results/code-notes.md. */
#define ATTEND_LOAD_RUNS TUNING_ATTEND_LOAD_RUNS

/* Loads every cache line of n runs of `bytes` bytes, side by side so their
 * misses overlap. */
static void load_runs(const unsigned char *const *runs, int n, size_t bytes)
{
	unsigned sum = 0;
	if (bytes == 0)
		return;
	for (size_t o = 0; o < bytes; o += 64)
		for (int j = 0; j < n; j++)
			sum += runs[j][o];
	for (int j = 0; j < n; j++)
		sum += runs[j][bytes - 1];
	__asm__ volatile("" : : "r"(sum)); /* the loads are the point */
}

/* Keys and values of kv heads [k0, k1) in `count` slots from `first` of
 * rows row_bytes apart, each head's slots cap rows apart: two heads (four
 * runs) at a time. */
static void load_head_rows(const unsigned char *kb, const unsigned char *vb, size_t row_bytes,
                           int cap, int first, int count, int k0, int k1)
{
	size_t head = (size_t)cap * row_bytes, at = (size_t)first * row_bytes;
	for (int kh = k0; kh < k1; kh += ATTEND_LOAD_RUNS / 2) {
		const unsigned char *runs[ATTEND_LOAD_RUNS];
		int n = 0;
		for (int h = kh; h < k1 && n < ATTEND_LOAD_RUNS; h++) {
			runs[n++] = kb + (size_t)h * head + at;
			runs[n++] = vb + (size_t)h * head + at;
		}
		load_runs(runs, n, (size_t)count * row_bytes);
	}
}

/* A full-precision ring's filled slots, in at most two runs. */
static void load_ring(const struct sinkcache *c, const struct kv_run *ring,
                      const unsigned char *kb, const unsigned char *vb, int k0, int k1)
{
	int first = kv_run_first(ring);
	load_head_rows(kb, vb, c->fp_row, ring->cap, ring->head, first, k0, k1);
	load_head_rows(kb, vb, c->fp_row, ring->cap, 0, ring->n - first, k0, k1);
}

/* Bytes of keys and values (with their quantization parameters) a query on
 * kv heads [k0, k1) reads in layer L. */
static size_t attend_bytes(const struct sinkcache *c, const struct kv_layer *L, int k0, int k1)
{
	size_t d = (size_t)c->g.head_dim, per_head;
	size_t sink_row = L->sink_quant ? c->code_row + 2 * sizeof(float) : c->fp_row;
	per_head = (size_t)L->t.n_sink * sink_row;
	per_head +=
	    (size_t)L->t.n_groups *
	    (2 * d * sizeof(float) + (size_t)L->caps.group * (c->code_row + 2 * sizeof(float)));
	per_head += (size_t)(L->anc.n + L->t.n_stage + L->t.n_hot) * c->fp_row;
	return 2 * per_head * (size_t)(k1 - k0);
}

static void load_ahead(const struct sinkcache *c, const struct kv_layer *L, int k0, int k1)
{
	if (L->sink_quant) {
		load_head_rows(L->sink_k, L->sink_v, c->code_row, L->caps.sink, 0, L->t.n_sink, k0,
		               k1);
		load_head_rows((const unsigned char *)L->sink_kp, (const unsigned char *)L->sink_vp,
		               2 * sizeof(float), L->caps.sink, 0, L->t.n_sink, k0, k1);
	} else {
		struct kv_run sinks = {0, L->t.n_sink, L->caps.sink};
		load_ring(c, &sinks, L->sink_k, L->sink_v, k0, k1);
	}
	if (L->anc.n > 0) {
		struct kv_run anchors = {0, L->anc.n, L->caps.anchor};
		load_ring(c, &anchors, L->a_k, L->a_v, k0, k1);
	}
	size_t nk = (size_t)c->g.n_kv_heads, d = (size_t)c->g.head_dim, gs = (size_t)L->caps.group;
	for (int i = 0; i < L->t.n_groups; i++) {
		/* a slot's heads lie side by side: one run of codes, keys and
		 * values, and one of parameters each */
		size_t gh = (size_t)kv_ring_slot(&L->groups, i) * nk + (size_t)k0;
		size_t nh = (size_t)(k1 - k0);
		const unsigned char *runs[4] = {L->gk + gh * gs * c->code_row,
		                                L->gv + gh * gs * c->code_row,
		                                (const unsigned char *)(L->gkp + gh * 2 * d),
		                                (const unsigned char *)(L->gvp + gh * gs * 2)};
		load_runs(runs, 2, nh * gs * c->code_row);
		load_runs(runs + 2, 1, nh * 2 * d * sizeof(float));
		load_runs(runs + 3, 1, nh * gs * 2 * sizeof(float));
	}
	struct kv_run stage = kv_ring_run(&L->stage, L->t.n_stage);
	struct kv_run hot = kv_ring_run(&L->hot, L->t.n_hot);
	load_ring(c, &stage, L->st_k, L->st_v, k0, k1);
	load_ring(c, &hot, L->hot_k, L->hot_v, k0, k1);
}

/* A full-precision ring of kv head kh in at most two contiguous runs. */
static void attend_fp_ring(struct attend_ctx *x, const struct kv_run *ring, bool window,
                           const unsigned char *base, int n0, bool mix)
{
	const struct sinkcache *c = x->c;
	const unsigned char *hb = base + (size_t)x->kh * (size_t)ring->cap * c->fp_row;
	int first = kv_run_first(ring);
	int runs[2][2] = {{ring->head, first}, {0, ring->n - first}};
	for (int k = 0; k < 2; k++) {
		const unsigned char *rows = hb + (size_t)runs[k][0] * c->fp_row;
		int n = runs[k][1];
		const float *q = window ? x->qw : x->qs;
		if (n == 0)
			continue;
		if (mix)
			attend_mix_rows(c->g.dtype, rows, c->fp_row, n, x->d, x->scores + n0, x->ld,
			                x->r, x->acc, n0, x->prefetch);
		else
			attend_score_rows(c->g.dtype, rows, c->fp_row, n, x->d, q, x->r,
			                  x->scores + n0, x->ld, x->prefetch);
		n0 += n;
	}
}

static void attend_quant_sinks(struct attend_ctx *x, bool mix)
{
	const struct sinkcache *c = x->c;
	const struct kv_layer *L = x->L;
	size_t at = (size_t)x->kh * (size_t)L->caps.sink;
	int n = L->t.n_sink, bits = c->g.quant_bits;
	if (!mix) {
		attend_score_codes(bits, L->sink_k + at * c->code_row, c->code_row, n, x->d, x->qs,
		                   x->r, x->scores, x->ld);
		for (int h = 0; h < x->r; h++)
			for (int i = 0; i < n; i++) {
				const float *kp = &L->sink_kp[2 * (at + (size_t)i)];
				float *s = &x->scores[(size_t)h * x->ld + i];
				*s = kp[0] * *s + kp[1] * x->qsum[h];
			}
		return;
	}
	for (int h = 0; h < x->r; h++) {
		float bias = 0.0f;
		for (int i = 0; i < n; i++) {
			const float *vp = &L->sink_vp[2 * (at + (size_t)i)];
			float p = x->scores[(size_t)h * x->ld + i];
			x->w[(size_t)h * x->ld + i] = p * vp[0];
			bias += p * vp[1];
		}
		x->bias[h] += bias;
	}
	attend_mix_codes(bits, L->sink_v + at * c->code_row, c->code_row, n, x->d, x->w, x->ld,
	                 x->r, x->acc, 0);
}

/* One quantized group: rows [first, G) starting at score column n0. */
static void attend_group(struct attend_ctx *x, size_t gh, int first, int n0, bool mix)
{
	const struct sinkcache *c = x->c;
	const struct kv_layer *L = x->L;
	int gs = L->caps.group, n = gs - first, d = x->d, bits = c->g.quant_bits;
	size_t row0 = gh * (size_t)gs + (size_t)first;
	if (!mix) {
		const float *kp = L->gkp + gh * 2 * (size_t)d;
		float qm[ATTEND_MAX_HEADS];
		for (int h = 0; h < x->r; h++) {
			const float *qw = x->qw + (size_t)h * d;
			float *qsc = x->qsc + (size_t)h * d, m[4] = {0};
			for (int j = 0; j < d; j++)
				qsc[j] = qw[j] * kp[j];
			for (int j = 0; j + 4 <= d; j += 4) /* 4 chains: d is even, a tail of 2 */
				for (int u = 0; u < 4; u++)
					m[u] += qw[j + u] * kp[d + j + u];
			for (int j = d - d % 4; j < d; j++)
				m[0] += qw[j] * kp[d + j];
			qm[h] = (m[0] + m[1]) + (m[2] + m[3]);
		}
		attend_score_codes(bits, L->gk + row0 * c->code_row, c->code_row, n, d, x->qsc,
		                   x->r, x->scores + n0, x->ld);
		for (int h = 0; h < x->r; h++)
			for (int i = 0; i < n; i++)
				x->scores[(size_t)h * x->ld + n0 + i] += qm[h];
		return;
	}
	const float *vp = L->gvp + row0 * 2;
	for (int h = 0; h < x->r; h++) {
		const float *p = x->scores + (size_t)h * x->ld + n0;
		float *w = x->w + (size_t)h * x->ld + n0, bias = 0.0f;
		for (int i = 0; i < n; i++) {
			w[i] = p[i] * vp[2 * i];
			bias += p[i] * vp[2 * i + 1];
		}
		x->bias[h] += bias;
	}
	attend_mix_codes(bits, L->gv + row0 * c->code_row, c->code_row, n, d, x->w + n0, x->ld,
	                 x->r, x->acc, n0);
}

/* Scores (mix false) or value accumulation (mix true) over all tiers, in
 * one order: sinks, anchors, groups oldest first, staging, hot.  Returns
 * the count. */
static int attend_tiers(struct attend_ctx *x, bool mix)
{
	const struct sinkcache *c = x->c;
	const struct kv_layer *L = x->L;
	int n = L->t.n_sink;
	if (L->sink_quant) {
		attend_quant_sinks(x, mix);
	} else {
		struct kv_run sinks = {0, L->t.n_sink, L->caps.sink};
		attend_fp_ring(x, &sinks, false, mix ? L->sink_v : L->sink_k, 0, mix);
	}
	if (L->anc.n > 0) { /* keys by rank: the sink query */
		struct kv_run anchors = {0, L->anc.n, L->caps.anchor};
		attend_fp_ring(x, &anchors, false, mix ? L->a_v : L->a_k, n, mix);
		n += L->anc.n;
	}
	for (int i = 0; i < L->t.n_groups; i++) {
		size_t gh =
		    (size_t)kv_ring_slot(&L->groups, i) * (size_t)c->g.n_kv_heads + (size_t)x->kh;
		int first = i == 0 ? L->t.grp_dropped : 0;
		attend_group(x, gh, first, n, mix);
		n += L->caps.group - first;
	}
	struct kv_run stage = kv_ring_run(&L->stage, L->t.n_stage);
	struct kv_run hot = kv_ring_run(&L->hot, L->t.n_hot);
	attend_fp_ring(x, &stage, true, mix ? L->st_v : L->st_k, n, mix);
	n += L->t.n_stage;
	attend_fp_ring(x, &hot, true, mix ? L->hot_v : L->hot_k, n, mix);
	return n + L->t.n_hot;
}

static void attend_rotate_queries(struct attend_ctx *x, const float *q)
{
	int d = x->d;
	float scale = 1.0f / sqrtf((float)d);
	for (int h = 0; h < x->r; h++) {
		float *qw = x->qw + (size_t)h * d, *qs = x->qs + (size_t)h * d;
		memcpy(qw, q + (size_t)h * d, (size_t)d * sizeof(float));
		memcpy(qs, q + (size_t)h * d, (size_t)d * sizeof(float));
		rope_apply(qw, x->L->cs_win, x->c->g.rope_dim, x->c->g.rope_neox);
		rope_apply(qs, x->L->cs_sink, x->c->g.rope_dim, x->c->g.rope_neox);
		x->qsum[h] = 0.0f;
		for (int j = 0; j < d; j++) {
			qw[j] *= scale;
			qs[j] *= scale;
			x->qsum[h] += qs[j];
		}
	}
}

/* Softmax of scores[0..n) in place without the division: exp(score - max),
 * and *inv = 1 / their sum (the values are mixed with these weights and the
 * sum scaled once).  Returns the mass of the first n_sink.  learned: the
 * head's learned sink logit (NULL: none), one more term of the max and the
 * sum with a zero value; *learned_mass gets its share. */
static float attend_softmax(float *scores, int n, int n_sink, const float *learned, float *inv,
                            float *learned_mass)
{
	float sink = 0.0f, e = 0.0f;
	if (learned) {
		float sum = attend_exp_sum_sink(scores, n, *learned, &e);
		*inv = 1.0f / (sum + e);
	} else {
		*inv = 1.0f / attend_exp_sum(scores, n);
	}
	*learned_mass = e * *inv;
	for (int i = 0; i < n_sink; i++)
		sink += scores[i];
	return sink * *inv;
}

/* The model's soft-cap of the scores (sinkcache_set_softcap), as llama.cpp
 * computes it: scaled by 1/cap, tanh, scaled by cap. */
static void attend_softcap(struct attend_ctx *x, int n)
{
	float cap = x->c->softcap, inv = 1.0f / cap;
	for (int h = 0; h < x->r; h++) {
		float *s = x->scores + (size_t)h * x->ld;
		for (int i = 0; i < n; i++)
			s[i] = tanhf(s[i] * inv) * cap;
	}
}

/* Query heads [h0, h0 + r) on kv head kh; q, out, sink_mass and
 * learned_mass point at head h0 (key_weight, when given, at head h0's row),
 * learned (NULL: none) at head h0's learned sink logit. */
static void attend_head_group(struct attend_ctx *x, const float *q, float *out, float *sink_mass,
                              float *learned_mass, const float *learned, float *key_weight)
{
	int d = x->d, n_sink = x->L->t.n_sink;
	int n = kv_layer_window(x->c, x->L) + kv_layer_window_rank(x->L);
	if (n == 0) {
		memset(out, 0, (size_t)x->r * (size_t)d * sizeof(float));
		for (int h = 0; h < x->r; h++) {
			if (sink_mass)
				sink_mass[h] = 0.0f;
			if (learned_mass)
				learned_mass[h] = learned ? 1.0f : 0.0f;
		}
		return;
	}
	/* keys now (all lines requested at once), values for after the softmax,
	 * and the next kv head's keys for the next group */
	if (x->prefetch) {
		attend_prefetch(x->c, x->L, x->kh, false);
		attend_prefetch(x->c, x->L, x->kh, true);
		if (x->kh + 1 < x->c->g.n_kv_heads)
			attend_prefetch(x->c, x->L, x->kh + 1, false);
	}
	attend_rotate_queries(x, q);
	attend_tiers(x, false);
	if (x->c->softcap > 0.0f)
		attend_softcap(x, n);
	for (int h = 0; h < x->r; h++) {
		float lm;
		float m = attend_softmax(x->scores + (size_t)h * x->ld, n, n_sink,
		                         learned ? learned + h : NULL, &x->inv[h], &lm);
		if (sink_mass)
			sink_mass[h] = m;
		if (learned_mass)
			learned_mass[h] = lm;
		x->bias[h] = 0.0f;
		if (key_weight) {
			const float *e = x->scores + (size_t)h * x->ld;
			float *kw = key_weight + (size_t)h * x->ld;
			for (int i = 0; i < n; i++)
				kw[i] = e[i] * x->inv[h];
		}
	}
	memset(x->acc, 0, (size_t)x->r * ATTEND_PARTS * (size_t)d * sizeof(float));
	attend_tiers(x, true);
	for (int h = 0; h < x->r; h++) {
		const float *a = x->acc + (size_t)h * ATTEND_PARTS * d;
		for (int j = 0; j < d; j++)
			out[(size_t)h * d + j] =
			    (((a[j] + a[d + j]) + (a[2 * d + j] + a[3 * d + j])) + x->bias[h]) *
			    x->inv[h];
	}
}

void sinkcache_attend(const struct sinkcache *c, int layer, const float *q, int n_heads,
                      int head_begin, int head_end, float *out, float *scratch, float *sink_mass,
                      float *learned_mass, float *key_weight, bool rows_cold)
{
	int d = c->g.head_dim, ratio = n_heads / c->g.n_kv_heads;
	const struct kv_layer *L = &c->layers[layer];
	/* the layer's own stride: sinkcache_observe reads its weights so */
	int ld = L->caps.sink + L->caps.anchor + L->caps.window;
	size_t rd = (size_t)ATTEND_MAX_HEADS * (size_t)d;
	struct attend_ctx x = {
	    .c = c,
	    .L = L,
	    .d = d,
	    .ld = ld,
	    .scores = scratch,
	    .w = scratch + (size_t)ATTEND_MAX_HEADS * (size_t)ld,
	    .qw = scratch + 2 * (size_t)ATTEND_MAX_HEADS * (size_t)ld,
	};
	x.qs = x.qw + rd;
	x.qsc = x.qs + rd;
	x.acc = x.qsc + rd;
	/* rows just read (a prompt chunk's later tokens) are in some core's
	 * cache, and loading them again costs prefill more than it saves; they
	 * keep the prefetches, as the heads move between threads */
	x.prefetch = true;
	if (rows_cold && head_begin < head_end) {
		int k0 = head_begin / ratio, k1 = (head_end - 1) / ratio + 1;
		x.prefetch = attend_bytes(c, x.L, k0, k1) > c->load_ahead_max;
		if (!x.prefetch)
			load_ahead(c, x.L, k0, k1);
	}
	for (int h = head_begin; h < head_end; h += x.r) {
		x.kh = h / ratio;
		int group_end = (x.kh + 1) * ratio;
		x.r = group_end < head_end ? group_end - h : head_end - h;
		if (x.r > ATTEND_MAX_HEADS)
			x.r = ATTEND_MAX_HEADS;
		attend_head_group(&x, q + (size_t)h * d, out + (size_t)h * d,
		                  sink_mass ? sink_mass + h : NULL,
		                  learned_mass ? learned_mass + h : NULL,
		                  L->sink_logits ? L->sink_logits + h : NULL,
		                  key_weight ? key_weight + (size_t)h * ld : NULL);
	}
}
