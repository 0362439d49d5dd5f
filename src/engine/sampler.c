/* Token sampler: turns one row of logits into one token id, the way
 * llama.cpp's default chain does, and reports log-probabilities.
 *
 * Order per token: repetition penalty (llama.cpp: a positive logit is divided
 * by the penalty, a negative one multiplied), presence/frequency penalties
 * (OpenAI: logit -= presence*(count>0) + frequency*count), both over the last
 * repeat_last_n accepted tokens; then the log-softmax at temperature 1 of the
 * penalised logits, which is what res->logprob and res->top[] report; then
 * either greedy argmax (temperature 0, or below 1e-6 where 1/T would
 * overflow; ties go to the lowest id) or top-k, top-p,
 * min-p (all on temperature-1 probabilities, renormalised over the surviving
 * candidates as llama.cpp does), temperature, and a draw from a xoshiro256**
 * generator seeded through splitmix64: the same seed gives the same tokens on
 * every machine.
 *
 * Cost per token is O(n_vocab) plus O(k log k) for the candidates: top-k and
 * the top-N logprobs use a bounded heap; top-p never sorts the vocabulary: a
 * histogram of the mass by distance below the max picks the few buckets that
 * provably hold the nucleus, and a weighted quickselect (expected linear
 * time) finds the nucleus among their tokens; min-p and the draw need no
 * order at all.
 *
 * It does not decode text, stop on strings (see stopstr.c) or keep a
 * per-request history beyond the penalty window. */
#include "engine/sampler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"
#include "util/fastexp.h"

/* ---------------------------------------------------------------- params */

void sampler_params_default(struct sampler_params *p)
{
	memset(p, 0, sizeof(*p));
	p->temperature = 1.0f;
	p->top_k = 0;
	p->top_p = 1.0f;
	p->min_p = 0.0f;
	p->repeat_penalty = 1.0f;
	p->repeat_last_n = 64;
	p->presence_penalty = 0.0f;
	p->frequency_penalty = 0.0f;
	p->seed = 0;
	p->n_top_logprobs = 0;
	p->logprobs = false;
}

int sampler_params_validate(const struct sampler_params *p, char *err, size_t err_len)
{
	if (!isfinite(p->temperature) || p->temperature < 0.0f)
		return err_set(err, err_len, -EINVAL, "temperature must be >= 0 (got %g)",
			       (double)p->temperature);
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
		return err_set(err, err_len, -EINVAL, "top_p must be in (0, 1] (got %g)",
			       (double)p->top_p);
	if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
		return err_set(err, err_len, -EINVAL, "min_p must be in [0, 1] (got %g)",
			       (double)p->min_p);
	if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0.0f)
		return err_set(err, err_len, -EINVAL, "repeat_penalty must be > 0 (got %g)",
			       (double)p->repeat_penalty);
	if (p->repeat_last_n < -1)
		return err_set(err, err_len, -EINVAL, "repeat_last_n must be >= -1 (got %d)",
			       p->repeat_last_n);
	if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
		return err_set(err, err_len, -EINVAL, "presence_penalty must be in [-2, 2] (got %g)",
			       (double)p->presence_penalty);
	if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
		return err_set(err, err_len, -EINVAL,
			       "frequency_penalty must be in [-2, 2] (got %g)",
			       (double)p->frequency_penalty);
	if (p->n_top_logprobs < 0 || p->n_top_logprobs > SAMPLER_MAX_TOP_LOGPROBS)
		return err_set(err, err_len, -EINVAL, "n_top_logprobs must be in 0..%d (got %d)",
			       SAMPLER_MAX_TOP_LOGPROBS, p->n_top_logprobs);
	return 0;
}

/* ---------------------------------------------------------------- random */

static uint64_t splitmix64_next(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t rotl64(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman & Vigna). */
static uint64_t xoshiro_next(uint64_t st[4])
{
	uint64_t result = rotl64(st[1] * 5, 7) * 9;
	uint64_t t = st[1] << 17;
	st[2] ^= st[0];
	st[3] ^= st[1];
	st[1] ^= st[2];
	st[0] ^= st[3];
	st[2] ^= t;
	st[3] = rotl64(st[3], 45);
	return result;
}

/* Uniform double in [0, 1) with 53 random bits. */
static double xoshiro_uniform(uint64_t st[4])
{
	return (double)(xoshiro_next(st) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---------------------------------------------------------------- exp */

/* Sum of exp(row[i] - shift): exps a block at a time (a plain map that the
 * compiler vectorises), then adds in eight double lanes in a fixed order, so
 * the result does not depend on the compiler. */
static double sum_exp(const float *row, size_t n, float shift)
{
	enum { BLOCK = 256 };
	float e[BLOCK];
	double lane[8] = {0};
	for (size_t base = 0; base < n; base += BLOCK) {
		size_t m = n - base < BLOCK ? n - base : BLOCK;
		for (size_t i = 0; i < m; i++)
			e[i] = fastexp_f32(row[base + i] - shift);
		float acc[8] = {0}; /* float within a block, double across */
		size_t i = 0;
		for (; i + 8 <= m; i += 8)
			for (size_t j = 0; j < 8; j++)
				acc[j] += e[i + j];
		for (; i < m; i++)
			acc[0] += e[i];
		for (size_t j = 0; j < 8; j++)
			lane[j] += (double)acc[j];
	}
	double sum = 0.0;
	for (size_t j = 0; j < 8; j++)
		sum += lane[j];
	return sum;
}

/* ---------------------------------------------------------------- sampler */

struct cand {
	int32_t id;
	float logit;
	float prob; /* temperature-1 probability, filled by the filters */
};

struct sampler {
	struct sampler_params p;
	int n_vocab;
	uint64_t rng[4];

	/* Penalty window: the last `window` accepted tokens, as a ring (NULL
	 * when the window is unbounded, repeat_last_n == -1). */
	int32_t *ring;	  /* (window) */
	size_t window;	  /* capacity of ring; 0 = unbounded or penalties off */
	size_t ring_head; /* next slot to write */
	size_t ring_len;
	int32_t *count;	   /* (n_vocab) occurrences of each token in the window */
	int32_t *distinct; /* (n_distinct) tokens with count > 0 */
	int32_t *slot;	   /* (n_vocab) index of a token in distinct, -1 if absent */
	size_t n_distinct;

	struct cand *cand;  /* (n_vocab) scratch candidates */
	float *weight;	    /* (n_vocab) draw weights when nothing needs an order */
	double *block_sum;  /* (n_vocab / DRAW_BLOCK + 1) sums of weight per block */
};

enum { DRAW_BLOCK = 256 };

static bool penalties_on(const struct sampler_params *p)
{
	return p->repeat_last_n != 0 &&
	       (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
		p->frequency_penalty != 0.0f);
}

static void rng_seed(struct sampler *s)
{
	uint64_t x = s->p.seed;
	for (int i = 0; i < 4; i++)
		s->rng[i] = splitmix64_next(&x);
}

int sampler_new(const struct sampler_params *p, int n_vocab, struct sampler **out, char *err,
		size_t err_len)
{
	*out = NULL;
	int rc = sampler_params_validate(p, err, err_len);
	if (rc)
		return rc;
	if (n_vocab <= 0)
		return err_set(err, err_len, -EINVAL, "n_vocab must be > 0 (got %d)", n_vocab);
	struct sampler *s = calloc(1, sizeof(*s));
	if (!s)
		return err_set(err, err_len, -ENOMEM, "out of memory for the sampler");
	s->p = *p;
	s->n_vocab = n_vocab;
	s->cand = malloc((size_t)n_vocab * sizeof(*s->cand));
	s->weight = malloc((size_t)n_vocab * sizeof(*s->weight));
	s->block_sum = malloc(((size_t)n_vocab / DRAW_BLOCK + 1) * sizeof(*s->block_sum));
	if (!s->cand || !s->weight || !s->block_sum)
		goto oom;
	if (penalties_on(p)) {
		s->count = calloc((size_t)n_vocab, sizeof(*s->count));
		s->distinct = malloc((size_t)n_vocab * sizeof(*s->distinct));
		s->slot = malloc((size_t)n_vocab * sizeof(*s->slot));
		if (!s->count || !s->distinct || !s->slot)
			goto oom;
		memset(s->slot, 0xff, (size_t)n_vocab * sizeof(*s->slot));
		if (p->repeat_last_n > 0) {
			s->window = (size_t)p->repeat_last_n;
			s->ring = malloc(s->window * sizeof(*s->ring));
			if (!s->ring)
				goto oom;
		}
	}
	rng_seed(s);
	*out = s;
	return 0;
oom:
	sampler_free(s);
	return err_set(err, err_len, -ENOMEM, "out of memory for the sampler (n_vocab %d)",
		       n_vocab);
}

void sampler_free(struct sampler *s)
{
	if (!s)
		return;
	free(s->ring);
	free(s->count);
	free(s->distinct);
	free(s->slot);
	free(s->cand);
	free(s->weight);
	free(s->block_sum);
	free(s);
}

void sampler_reset(struct sampler *s)
{
	if (s->count) {
		for (size_t i = 0; i < s->n_distinct; i++) {
			s->count[s->distinct[i]] = 0;
			s->slot[s->distinct[i]] = -1;
		}
	}
	s->n_distinct = 0;
	s->ring_head = 0;
	s->ring_len = 0;
	rng_seed(s);
}

static void count_add(struct sampler *s, int32_t tok)
{
	if (s->count[tok]++ == 0) {
		s->slot[tok] = (int32_t)s->n_distinct;
		s->distinct[s->n_distinct++] = tok;
	}
}

static void count_remove(struct sampler *s, int32_t tok)
{
	if (--s->count[tok] == 0) {
		int32_t at = s->slot[tok];
		int32_t last = s->distinct[--s->n_distinct];
		s->distinct[at] = last;
		s->slot[last] = at;
		s->slot[tok] = -1;
	}
}

void sampler_accept(struct sampler *s, int32_t token)
{
	if (!s->count || token < 0 || token >= s->n_vocab)
		return;
	if (s->window) {
		if (s->ring_len == s->window)
			count_remove(s, s->ring[s->ring_head]);
		else
			s->ring_len++;
		s->ring[s->ring_head] = token;
		s->ring_head = (s->ring_head + 1) % s->window;
	}
	count_add(s, token);
}

static void apply_penalties(const struct sampler *s, float *logits)
{
	const struct sampler_params *p = &s->p;
	for (size_t i = 0; i < s->n_distinct; i++) {
		int32_t tok = s->distinct[i];
		int32_t n = s->count[tok];
		float l = logits[tok];
		if (p->repeat_penalty != 1.0f)
			l = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
		l -= p->presence_penalty + p->frequency_penalty * (float)n;
		logits[tok] = l;
	}
}

/* ---------------------------------------------------------------- selection */

/* Candidate a ranks before b: higher logit, then lower id. */
static bool cand_before(const struct cand *a, const struct cand *b)
{
	return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb)
{
	const struct cand *a = pa, *b = pb;
	if (cand_before(a, b))
		return -1;
	return cand_before(b, a) ? 1 : 0;
}

/* Min-heap (root = worst kept candidate) sift-down over heap[0..n). */
static void heap_sift_down(struct cand *heap, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, w = i;
		if (l < n && cand_before(&heap[w], &heap[l]))
			w = l;
		if (r < n && cand_before(&heap[w], &heap[r]))
			w = r;
		if (w == i)
			return;
		struct cand t = heap[i];
		heap[i] = heap[w];
		heap[w] = t;
		i = w;
	}
}

static void heap_sift_up(struct cand *heap, size_t i)
{
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!cand_before(&heap[parent], &heap[i]))
			return;
		struct cand t = heap[i];
		heap[i] = heap[parent];
		heap[parent] = t;
		i = parent;
	}
}

/* Writes the k best tokens of logits (n floats) into out, best first.
 * O(n log k); returns the number written (min(k, n)). */
static size_t select_top(const float *logits, size_t n, size_t k, struct cand *out)
{
	size_t m = 0;
	if (k > n)
		k = n;
	if (k == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		struct cand c = {(int32_t)i, logits[i], 0.0f};
		if (m < k) {
			out[m] = c;
			heap_sift_up(out, m++);
		} else if (cand_before(&c, &out[0])) {
			out[0] = c;
			heap_sift_down(out, m, 0);
		}
	}
	qsort(out, m, sizeof(*out), cand_cmp);
	return m;
}

/* ---------------------------------------------------------------- logprobs */

static inline uint32_t is_nan_bits(float v)
{
	return (fastexp_bits(v) & 0x7fffffffu) > 0x7f800000u;
}

/* Max of row and whether it holds a NaN, 16 at a time in four GCC vectors
 * of 4 (SSE on a baseline x86-64 build): the element loop ran at about one
 * logit per cycle, on the engine thread between two forward passes. */
typedef float lanes4f __attribute__((vector_size(16)));
typedef int32_t lanes4i __attribute__((vector_size(16)));

static float row_max(const float *row, size_t n, bool *has_nan)
{
	lanes4f m[4];
	lanes4i b[4] = {{0}};
	for (int u = 0; u < 4; u++)
		m[u] = (lanes4f){-INFINITY, -INFINITY, -INFINITY, -INFINITY};
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		for (int u = 0; u < 4; u++) {
			lanes4f v;
			memcpy(&v, row + i + 4 * u, sizeof(v));
			lanes4i gt = v > m[u];
			b[u] |= v != v;
			m[u] = (lanes4f)(((lanes4i)v & gt) | ((lanes4i)m[u] & ~gt));
		}
	float mx = -INFINITY;
	int bad = 0;
	for (int u = 0; u < 4; u++)
		for (int j = 0; j < 4; j++) {
			mx = m[u][j] > mx ? m[u][j] : mx;
			bad |= b[u][j];
		}
	for (; i < n; i++) {
		bad |= is_nan_bits(row[i]);
		mx = row[i] > mx ? row[i] : mx;
	}
	*has_nan = bad != 0;
	return mx;
}

/* Checks the logits and returns their max and, when lse_out is not NULL,
 * their log-sum-exp (temperature 1). */
static int logits_stats(const float *logits, int n, float *max_out, double *lse_out)
{
	bool has_nan;
	float mx = row_max(logits, (size_t)n, &has_nan);
	if (has_nan || mx == -INFINITY || mx == INFINITY)
		return -EINVAL;
	*max_out = mx;
	if (lse_out)
		*lse_out = (double)mx + log(sum_exp(logits, (size_t)n, mx));
	return 0;
}

static void report_top(struct sampler *s, const float *logits, double lse,
		       struct sampler_result *res)
{
	struct cand top[SAMPLER_MAX_TOP_LOGPROBS];
	size_t n = select_top(logits, (size_t)s->n_vocab, (size_t)s->p.n_top_logprobs, top);
	res->n_top = (int)n;
	for (size_t i = 0; i < n; i++) {
		res->top[i].token = top[i].id;
		res->top[i].logprob = (float)((double)top[i].logit - lse);
	}
}

/* ---------------------------------------------------------------- filters */

static void cand_swap(struct cand *a, struct cand *b)
{
	struct cand t = *a;
	*a = *b;
	*b = t;
}

/* Partitions c[lo..hi) around a median-of-three pivot: better candidates
 * first; returns the pivot's final index. */
static size_t partition(struct cand *c, size_t lo, size_t hi)
{
	size_t mid = lo + (hi - lo) / 2, last = hi - 1;
	if (cand_before(&c[mid], &c[lo]))
		cand_swap(&c[mid], &c[lo]);
	if (cand_before(&c[last], &c[lo]))
		cand_swap(&c[last], &c[lo]);
	if (cand_before(&c[last], &c[mid]))
		cand_swap(&c[last], &c[mid]);
	cand_swap(&c[mid], &c[last]); /* median to the end */
	size_t m = lo;
	for (size_t i = lo; i < last; i++)
		if (cand_before(&c[i], &c[last]))
			cand_swap(&c[i], &c[m++]);
	cand_swap(&c[m], &c[last]);
	return m;
}

/* Nucleus without a full sort (weighted quickselect, expected O(n)): moves
 * the smallest best-first prefix whose probability reaches `need` to
 * c[0..k) and returns k >= 1.  c[0..k) is not sorted; the ranking is the
 * total order of cand_before, so ties and the pivots are deterministic. */
static size_t nucleus_select(struct cand *c, size_t n, double need)
{
	size_t lo = 0, hi = n; /* c[0..lo) kept; boundary inside c[lo..hi) */
	while (hi - lo > 16) {
		size_t m = partition(c, lo, hi);
		double upper = 0.0;
		for (size_t i = lo; i < m; i++)
			upper += c[i].prob;
		if (upper >= need) {
			hi = m;
		} else if (upper + c[m].prob >= need) {
			return m + 1;
		} else {
			need -= upper + c[m].prob;
			lo = m + 1;
		}
	}
	qsort(c + lo, hi - lo, sizeof(*c), cand_cmp);
	double acc = 0.0;
	for (size_t i = lo; i < hi; i++) {
		acc += c[i].prob;
		if (acc >= need)
			return i + 1;
	}
	return hi > 0 ? hi : 1; /* rounding: keep everything looked at */
}

/* Top-p without top-k buckets the vocabulary by distance below the max
 * logit (NUCLEUS_SCALE buckets per nat), finds the first buckets that hold
 * top_p of the mass, and hands only their tokens (a best-first prefix that
 * contains the nucleus, plus at most one bucket more) to nucleus_select. */
enum { NUCLEUS_BUCKETS = 128 };
#define NUCLEUS_SCALE 4.0f

static int nucleus_bucket(float mx, float logit)
{
	float d = mx - logit; /* >= 0; +inf for a masked token */
	return d < (float)NUCLEUS_BUCKETS / NUCLEUS_SCALE ? (int)(d * NUCLEUS_SCALE)
							 : NUCLEUS_BUCKETS - 1;
}

static size_t nucleus_from_logits(const struct sampler *s, const float *logits, float mx,
				  double lse, struct cand *c)
{
	size_t n = (size_t)s->n_vocab;
	float *prob = s->weight, shift = (float)lse;
	double mass[NUCLEUS_BUCKETS] = {0};
	for (size_t i = 0; i < n; i++)
		prob[i] = fastexp_f32(logits[i] - shift);
	for (size_t i = 0; i < n; i++)
		mass[nucleus_bucket(mx, logits[i])] += prob[i];
	int last = NUCLEUS_BUCKETS - 1;
	double acc = 0.0;
	for (int b = 0; b < NUCLEUS_BUCKETS; b++) {
		acc += mass[b];
		if (acc >= (double)s->p.top_p) {
			last = b;
			break;
		}
	}
	size_t m = 0;
	double kept = 0.0;
	for (size_t i = 0; i < n; i++) {
		if (logits[i] > -INFINITY && nucleus_bucket(mx, logits[i]) <= last) {
			c[m].id = (int32_t)i;
			c[m].logit = logits[i];
			c[m].prob = prob[i];
			kept += prob[i];
			m++;
		}
	}
	return nucleus_select(c, m, fmin((double)s->p.top_p, kept));
}

/* Min-p over candidates (any order): keeps p >= min_p * p_max in place. */
static size_t apply_min_p(struct cand *c, size_t n, float min_p, float mx)
{
	if (min_p <= 0.0f)
		return n;
	float cut = mx + logf(min_p);
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (c[i].logit >= cut)
			c[m++] = c[i];
	return m;
}

/* Draws one candidate with weights exp((logit - max) / T) (computed once,
 * in float, into the prob field which is not needed any more). */
static int32_t draw(struct sampler *s, struct cand *c, size_t n, float mx)
{
	if (n == 1)
		return c[0].id;
	float inv_t = 1.0f / s->p.temperature;
	double total = 0.0;
	for (size_t i = 0; i < n; i++) {
		c[i].prob = fastexp_f32((c[i].logit - mx) * inv_t);
		total += c[i].prob;
	}
	double r = xoshiro_uniform(s->rng) * total, acc = 0.0;
	for (size_t i = 0; i < n; i++) {
		acc += c[i].prob;
		if (r < acc)
			return c[i].id;
	}
	return c[n - 1].id; /* rounding: r landed on the total */
}

static int32_t argmax(const float *logits, int n, float mx);

/* Weights exp((l - mx) / T) of one block, 0 below cut; returns their sum. */
static double block_weights(const float *l, float *w, size_t m, float mx, float inv_t, float cut)
{
	for (size_t i = 0; i < m; i++) {
		uint32_t keep = -(uint32_t)(l[i] >= cut);
		w[i] = fastexp_from_bits(fastexp_bits(fastexp_f32((l[i] - mx) * inv_t)) & keep);
	}
	float acc[8] = {0};
	size_t i = 0;
	for (; i + 8 <= m; i += 8)
		for (size_t j = 0; j < 8; j++)
			acc[j] += w[i + j];
	for (; i < m; i++)
		acc[0] += w[i];
	double sum = 0.0;
	for (size_t j = 0; j < 8; j++)
		sum += (double)acc[j];
	return sum;
}

/* The draw when neither top-k nor top-p needs an order (min-p at most):
 * weights over the whole row in id order, found block by block. */
static int32_t draw_row(struct sampler *s, const float *logits, float mx)
{
	size_t n = (size_t)s->n_vocab, nb = (n + DRAW_BLOCK - 1) / DRAW_BLOCK;
	float inv_t = 1.0f / s->p.temperature;
	float cut = s->p.min_p > 0.0f ? mx + logf(s->p.min_p) : -INFINITY;
	double total = 0.0;
	for (size_t b = 0; b < nb; b++) {
		size_t at = b * DRAW_BLOCK, m = n - at < DRAW_BLOCK ? n - at : DRAW_BLOCK;
		s->block_sum[b] = block_weights(logits + at, s->weight + at, m, mx, inv_t, cut);
		total += s->block_sum[b];
	}
	double r = xoshiro_uniform(s->rng) * total, acc = 0.0;
	size_t b = 0;
	while (b + 1 < nb && (s->block_sum[b] == 0.0 || r >= acc + s->block_sum[b]))
		acc += s->block_sum[b++];
	size_t at = b * DRAW_BLOCK, end = n - at < DRAW_BLOCK ? n : at + DRAW_BLOCK;
	int32_t last = -1;
	for (size_t i = at; i < end; i++) {
		if (s->weight[i] == 0.0f)
			continue;
		last = (int32_t)i;
		acc += s->weight[i];
		if (r < acc)
			return last;
	}
	return last >= 0 ? last : argmax(logits, s->n_vocab, mx); /* rounding */
}

/* The first (lowest) id holding the max: whole blocks of 64 are tested
 * with a loop GCC vectorises, the block that holds it element by element. */
static int32_t argmax(const float *logits, int n, float mx)
{
	int i = 0;
	for (; i + 64 <= n; i += 64) {
		int hit = 0;
		for (int j = 0; j < 64; j++)
			hit |= logits[i + j] == mx;
		if (hit)
			break;
	}
	for (; i < n; i++)
		if (logits[i] == mx)
			return i;
	return 0;
}

/* The candidate set for a draw under top-k and/or top-p, then min-p;
 * returns how many are in s->cand. */
static size_t filter_candidates(struct sampler *s, const float *logits, float mx, double lse)
{
	const struct sampler_params *p = &s->p;
	struct cand *c = s->cand;
	size_t n;
	if (p->top_k > 0 && p->top_k < s->n_vocab) {
		n = select_top(logits, (size_t)s->n_vocab, (size_t)p->top_k, c);
		if (p->top_p < 1.0f) { /* renormalised over the k, as llama.cpp */
			double mass = 0.0;
			for (size_t i = 0; i < n; i++) {
				c[i].prob = fastexp_f32((float)((double)c[i].logit - lse));
				mass += c[i].prob;
			}
			n = nucleus_select(c, n, (double)p->top_p * mass);
		}
	} else {
		n = nucleus_from_logits(s, logits, mx, lse, c);
	}
	return apply_min_p(c, n, p->min_p, mx);
}

int sampler_sample(struct sampler *s, float *logits, struct sampler_result *res)
{
	float mx;
	double lse = 0.0;
	memset(res, 0, sizeof(*res));
	if (s->count)
		apply_penalties(s, logits);
	bool greedy = s->p.temperature < 1e-6f; /* 0, or so small that 1/T overflows */
	bool whole_row = (s->p.top_k <= 0 || s->p.top_k >= s->n_vocab) && s->p.top_p >= 1.0f;
	bool report = s->p.logprobs || s->p.n_top_logprobs > 0;
	bool need_lse = report || (!greedy && !whole_row);
	if (logits_stats(logits, s->n_vocab, &mx, need_lse ? &lse : NULL))
		return -EINVAL;
	if (s->p.n_top_logprobs > 0)
		report_top(s, logits, lse, res);
	int32_t tok;
	if (greedy) {
		tok = argmax(logits, s->n_vocab, mx);
	} else if (whole_row) {
		tok = draw_row(s, logits, mx);
	} else {
		size_t n = filter_candidates(s, logits, mx, lse);
		tok = draw(s, s->cand, n, mx);
	}
	res->token = tok;
	if (report)
		res->logprob = (float)((double)logits[tok] - lse);
	return 0;
}
