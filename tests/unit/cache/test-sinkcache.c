/* The tiered sink cache against hand-computed cases and against a naive
 * reference that keeps every token, rebuilds the resident set with simple
 * list operations, applies RoPE at rank (or stream) positions in long double
 * and computes attention in long double. */
#include <check.h>
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache/kvquant.h"
#include "cache/sinkcache.h"
#include "cache/sinkcache_impl.h"
#include "util/errbuf.h"
#include "testutil.h"
#include "util/sderr.h"

enum { NL = 2, NKV = 2, NH = 4, D = 16, MAXTOK = 400 };

static struct cache_geometry geom(int sinks, int window, bool quant, int bits, int hot)
{
	return tu_geometry(NL, NKV, D, sinks, window, quant, bits, hot);
}

/* A new cache of geometry g (the test fails with the cache's message if it
 * cannot be made). */
static struct sinkcache *new_cache(const struct cache_geometry *g)
{
	char err[SINKD_ERR_LEN];
	struct sinkcache *c = NULL;
	ck_assert_msg(sinkcache_new(g, &c, err, sizeof(err)) == 0, "%s", err);
	return c;
}

/* n tokens (all k, v) into one layer of c. */
static void append_tokens(struct sinkcache *c, int layer, const float *k, const float *v, int n)
{
	char err[SINKD_ERR_LEN];
	for (int t = 0; t < n; t++)
		ck_assert_msg(sinkcache_append(c, layer, k, v, err, sizeof(err)) == 0, "%s", err);
}

static float frand(void)
{
	return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
}

/* ---- naive reference ------------------------------------------------ */

struct rtok {
	int seq;    /* index into the data arrays */
	uint64_t s; /* stream index */
	int tier;   /* 0 hot, 1 staged, 2 quantized (window); 3 sink */
};

struct ref {
	struct cache_geometry g;
	int S, W, H, G;
	float k[MAXTOK][NL][NKV * D], v[MAXTOK][NL][NKV * D];   /* pre-RoPE inputs */
	float kq[MAXTOK][NL][NKV * D], vq[MAXTOK][NL][NKV * D]; /* dequantized (rotated k) */
	bool quantized[MAXTOK];
	struct rtok sink[64];
	int n_sink;
	struct rtok win[MAXTOK];
	int n_win;
	uint64_t T;
	int n_seq;
};

static void ref_rotate(const struct cache_geometry *g, const float *x, long double pos,
                       long double *y)
{
	int half = g->rope_dim / 2;
	for (int j = 0; j < g->head_dim; j++)
		y[j] = x[j];
	for (int i = 0; i < half; i++) {
		long double a = pos * powl((long double)g->rope_theta, -2.0L * i / g->rope_dim);
		int p0 = g->rope_neox ? i : 2 * i, p1 = g->rope_neox ? i + half : 2 * i + 1;
		long double x0 = x[p0], x1 = x[p1];
		y[p0] = x0 * cosl(a) - x1 * sinl(a);
		y[p1] = x0 * sinl(a) + x1 * cosl(a);
	}
}

static void ref_rotated_key(struct ref *r, int seq, int l, int h, uint64_t s, float *out)
{
	long double y[D];
	ref_rotate(&r->g, &r->k[seq][l][h * D], (long double)s, y);
	for (int j = 0; j < D; j++)
		out[j] = (float)y[j];
}

static void ref_init(struct ref *r, const struct cache_geometry *g)
{
	memset(r, 0, sizeof(*r));
	r->g = *g;
	r->S = g->sink_keep_count;
	r->W = g->strategy == CACHE_STRATEGY_FULL ? g->max_context_length - r->S : g->window_size;
	r->H = g->quant_enabled ? g->full_precision_recent : r->W;
	r->H = r->H < 1 ? 1 : r->H; /* the newest token is always full precision */
	r->G = cache_geometry_quant_group_size(g);
}

static void ref_quant_sink(struct ref *r, int seq, uint64_t s)
{
	uint8_t codes[D];
	float sc, mn, rk[D];
	for (int l = 0; l < NL; l++)
		for (int h = 0; h < NKV; h++) {
			ref_rotated_key(r, seq, l, h, s, rk);
			kvq_quant_row(rk, D, r->g.quant_bits, codes, &sc, &mn);
			kvq_dequant_row(codes, D, r->g.quant_bits, sc, mn, &r->kq[seq][l][h * D]);
			kvq_quant_row(&r->v[seq][l][h * D], D, r->g.quant_bits, codes, &sc, &mn);
			kvq_dequant_row(codes, D, r->g.quant_bits, sc, mn, &r->vq[seq][l][h * D]);
		}
	r->quantized[seq] = true;
}

/* Quantizes the staged tokens (exactly G of them) as one group. */
static void ref_quant_group(struct ref *r)
{
	int idx[64], n = 0;
	for (int i = 0; i < r->n_win; i++)
		if (r->win[i].tier == 1)
			idx[n++] = i;
	ck_assert_int_eq(n, r->G);
	static float rows[64][D];
	const float *rowp[64];
	uint8_t codes[64 * D];
	float sc[D], mn[D];
	size_t rb = kvq_code_bytes(D, r->g.quant_bits);
	for (int l = 0; l < NL; l++)
		for (int h = 0; h < NKV; h++) {
			for (int t = 0; t < n; t++) {
				struct rtok *tk = &r->win[idx[t]];
				ref_rotated_key(r, tk->seq, l, h, tk->s, rows[t]);
				rowp[t] = rows[t];
			}
			kvq_quant_channels(rowp, n, D, r->g.quant_bits, codes, sc, mn);
			for (int t = 0; t < n; t++) {
				struct rtok *tk = &r->win[idx[t]];
				for (int j = 0; j < D; j++)
					r->kq[tk->seq][l][h * D + j] =
					    (float)kvq_code_at(codes + t * rb, j, r->g.quant_bits) *
					        sc[j] +
					    mn[j];
				float vs, vm;
				uint8_t vc[D];
				kvq_quant_row(&r->v[tk->seq][l][h * D], D, r->g.quant_bits, vc, &vs,
				              &vm);
				kvq_dequant_row(vc, D, r->g.quant_bits, vs, vm,
				                &r->vq[tk->seq][l][h * D]);
			}
		}
	for (int t = 0; t < n; t++) {
		r->win[idx[t]].tier = 2;
		r->quantized[r->win[idx[t]].seq] = true;
	}
}

static int ref_count(const struct ref *r, int tier)
{
	int n = 0;
	for (int i = 0; i < r->n_win; i++)
		n += r->win[i].tier == tier;
	return n;
}

static void ref_append(struct ref *r, int seq)
{
	uint64_t s = r->T++;
	if (r->n_sink < r->S && r->n_win == 0 && s == (uint64_t)r->n_sink) {
		r->sink[r->n_sink++] = (struct rtok){seq, s, 3};
		if (r->g.quant_enabled && !r->g.protect_sinks)
			ref_quant_sink(r, seq, s);
		return;
	}
	if (r->n_win == r->W) {
		memmove(r->win, r->win + 1, sizeof(r->win[0]) * (size_t)(r->n_win - 1));
		r->n_win--;
	}
	if (ref_count(r, 0) == r->H && r->H < r->W) {
		for (int i = 0; i < r->n_win; i++)
			if (r->win[i].tier == 0) {
				r->win[i].tier = 1;
				break;
			}
		if (ref_count(r, 1) == r->G)
			ref_quant_group(r);
	}
	r->win[r->n_win++] = (struct rtok){seq, s, 0};
}

static void ref_revise(struct ref *r, int n)
{
	r->n_win -= n;
	r->T -= (uint64_t)n;
}

static int ref_revisable(const struct ref *r)
{
	return ref_count(r, 0) + ref_count(r, 1);
}

/* Attention of the newest token: out (NH, D), mass (NH). */
static void ref_attend(const struct ref *r, int l, const float *q, double *out, double *mass)
{
	const struct rtok *all[MAXTOK + 64];
	int n = 0;
	for (int i = 0; i < r->n_sink; i++)
		all[n++] = &r->sink[i];
	for (int i = 0; i < r->n_win; i++)
		all[n++] = &r->win[i];
	bool cache = r->g.rope_positions == ROPE_POSITIONS_CACHE;
	long double pos_q = cache ? (long double)(n - 1) : (long double)(r->T - 1);
	for (int h = 0; h < NH; h++) {
		int kh = h / (NH / NKV);
		long double sc[MAXTOK + 64], mx = -INFINITY, sum = 0, acc[D] = {0}, sink = 0;
		for (int i = 0; i < n; i++) {
			const struct rtok *t = all[i];
			long double pos_k = cache ? (long double)i : (long double)t->s;
			long double qr[D], kr[D], dot = 0;
			if (r->quantized[t->seq]) { /* key stored rotated by its stream index */
				ref_rotate(&r->g, q + h * D, pos_q - pos_k + (long double)t->s, qr);
				for (int j = 0; j < D; j++)
					kr[j] = r->kq[t->seq][l][kh * D + j];
			} else {
				ref_rotate(&r->g, q + h * D, pos_q, qr);
				ref_rotate(&r->g, &r->k[t->seq][l][kh * D], pos_k, kr);
			}
			for (int j = 0; j < D; j++)
				dot += qr[j] * kr[j];
			sc[i] = dot / sqrtl((long double)D);
			mx = fmaxl(mx, sc[i]);
		}
		for (int i = 0; i < n; i++) {
			sc[i] = expl(sc[i] - mx);
			sum += sc[i];
		}
		for (int i = 0; i < n; i++) {
			const struct rtok *t = all[i];
			const float *v = r->quantized[t->seq] ? &r->vq[t->seq][l][kh * D]
			                                      : &r->v[t->seq][l][kh * D];
			for (int j = 0; j < D; j++)
				acc[j] += sc[i] / sum * v[j];
			if (i < r->n_sink)
				sink += sc[i] / sum;
		}
		for (int j = 0; j < D; j++)
			out[h * D + j] = (double)acc[j];
		mass[h] = (double)sink;
	}
}

/* ---- driving both ---------------------------------------------------- */

static void fill_token(struct ref *r, int seq)
{
	for (int l = 0; l < NL; l++)
		for (int j = 0; j < NKV * D; j++) {
			r->k[seq][l][j] = frand() * 2.0f;
			r->v[seq][l][j] = frand();
		}
}

static void append_both(struct sinkcache *c, struct ref *r)
{
	char err[SINKD_ERR_LEN];
	int seq = r->n_seq++;
	ck_assert_int_lt(seq, MAXTOK);
	fill_token(r, seq);
	for (int l = 0; l < NL; l++)
		ck_assert_int_eq(
		    sinkcache_append(c, l, r->k[seq][l], r->v[seq][l], err, sizeof(err)), 0);
	ref_append(r, seq);
}

/* Compares attention of every layer; returns the worst relative error. */
static double compare_attend(struct sinkcache *c, struct ref *r)
{
	size_t ns = sinkcache_scratch_floats(&r->g);
	float *scratch = malloc(ns * sizeof(float) * 2);
	float q[NH * D], out[NH * D], mass[NH];
	double ro[NH * D], rm[NH], worst = 0;
	for (int l = 0; l < NL; l++) {
		for (int j = 0; j < NH * D; j++)
			q[j] = frand() * 2.0f;
		/* two callers over disjoint head ranges, as the engine does */
		sinkcache_attend(c, l, q, NH, 0, 1, out, scratch, mass, NULL, NULL, true);
		sinkcache_attend(c, l, q, NH, 1, NH, out, scratch + ns, mass, NULL, NULL,
		                 (l & 1) != 0);
		ref_attend(r, l, q, ro, rm);
		double scale = 1e-3;
		for (int j = 0; j < NH * D; j++)
			scale = fmax(scale, fabs(ro[j]));
		for (int j = 0; j < NH * D; j++)
			worst = fmax(worst, fabs(out[j] - ro[j]) / scale);
		for (int h = 0; h < NH; h++)
			worst = fmax(worst, fabs(mass[h] - rm[h]));
	}
	free(scratch);
	return worst;
}

static void check_stats(struct sinkcache *c, const struct ref *r)
{
	struct sinkcache_stats st;
	sinkcache_get_stats(c, &st);
	ck_assert_uint_eq(st.n_seen, r->T);
	ck_assert_int_eq(st.n_sink, r->n_sink);
	ck_assert_int_eq(st.n_resident, r->n_sink + r->n_win);
	ck_assert_int_eq(st.n_hot, ref_count(r, 0));
	ck_assert_int_eq(st.n_compressed, ref_count(r, 1) + ref_count(r, 2));
	ck_assert_uint_le(st.bytes_resident, st.bytes_bound);
}

/* Streams n_steps tokens with occasional revisions, comparing every step. */
static void run_against_ref(const struct cache_geometry *g, int n_steps, double tol,
                            unsigned seed)
{
	static struct ref r;
	struct sinkcache *c;
	char err[SINKD_ERR_LEN];
	srand(seed);
	ck_assert_int_eq(sinkcache_new(g, &c, err, sizeof(err)), 0);
	ref_init(&r, g);
	double worst = 0;
	for (int step = 0; step < n_steps; step++) {
		if (step % 7 == 6 && r.n_seq + 8 < MAXTOK) {
			int n = 1 + rand() % 6;
			int rc = sinkcache_revise(c, (size_t)n, err, sizeof(err));
			if (n <= ref_revisable(&r)) {
				ck_assert_msg(rc == 0, "revise %d: %s", n, err);
				ref_revise(&r, n);
			} else {
				ck_assert_int_eq(rc, SDERR_CONFLICT);
				ck_assert_ptr_nonnull(strstr(err, "can revise at most"));
			}
		}
		if (r.n_seq >= MAXTOK || !sinkcache_can_append(c, 1))
			break;
		append_both(c, &r);
		check_stats(c, &r);
		worst = fmax(worst, compare_attend(c, &r));
	}
	ck_assert_msg(worst <= tol, "worst relative error %g > %g", worst, tol);
	sinkcache_free(c);
}

START_TEST(test_attend_modes_vs_reference)
{
	struct cache_geometry g;
	for (int pos = 0; pos < 2; pos++) {
		enum rope_positions rp = pos ? ROPE_POSITIONS_ORIGINAL : ROPE_POSITIONS_CACHE;
		g = geom(2, 8, false, 8, 0), g.rope_positions = rp;
		run_against_ref(&g, 40, 1e-5, 1);
		g = geom(3, 12, true, 8, 4), g.rope_positions = rp; /* C 8 -> G 8 */
		run_against_ref(&g, 60, 1e-5, 2);
		g = geom(2, 40, true, 4, 3), g.rope_positions = rp, g.protect_sinks = false;
		run_against_ref(&g, 140, 1e-5, 3); /* C 37 -> G 32, partial groups */
		g = geom(0, 10, true, 8, 0), g.rope_positions = rp, g.rope_neox = true,
		g.rope_dim = 8;
		run_against_ref(&g, 50, 1e-5, 4);
		g = geom(4, 20, false, 8, 0), g.rope_positions = rp, g.rope_neox = true;
		run_against_ref(&g, 70, 1e-5, 5);
	}
	g = geom(2, 8, false, 8, 0), g.dtype = KV_DTYPE_F16;
	run_against_ref(&g, 30, 3e-3, 6);
	g = geom(2, 8, true, 8, 2), g.dtype = KV_DTYPE_BF16;
	run_against_ref(&g, 30, 3e-2, 7);
	g = geom(4, 0, true, 8, 2), g.strategy = CACHE_STRATEGY_FULL, g.max_context_length = 30;
	run_against_ref(&g, 40, 1e-5, 8);
}
END_TEST

/* Appends token `s` with key `key` (all heads) and a one-hot value at dim s. */
static void append_onehot(struct sinkcache *c, int s, const float *key_head)
{
	float k[NKV * D], v[NKV * D] = {0};
	char err[SINKD_ERR_LEN];
	for (int h = 0; h < NKV; h++) {
		memcpy(k + h * D, key_head, sizeof(float) * D);
		v[h * D + s] = 1.0f;
	}
	for (int l = 0; l < NL; l++)
		ck_assert_int_eq(sinkcache_append(c, l, k, v, err, sizeof(err)), 0);
}

/* Attention weights of head 0 of the newest token, read off one-hot values:
 * p[s] is the weight of stream index s. */
static void weights_by_stream_index(struct sinkcache *c, float *p)
{
	float *scratch = malloc(sinkcache_scratch_floats(sinkcache_geometry(c)) * sizeof(float));
	float q[NH * D] = {0}, out[NH * D];
	for (int h = 0; h < NH; h++)
		q[h * D] = 1.0f;
	sinkcache_attend(c, NL - 1, q, NH, 0, NH, out, scratch, NULL, NULL, NULL, true);
	memcpy(p, out, sizeof(float) * D);
	free(scratch);
}

START_TEST(test_eviction_order)
{
	/* 2 sinks, window 4: after N appends the resident stream indices are
	 * {0, 1} and the last min(N-2, 4) of 2..N-1; zero keys -> uniform weights. */
	for (int quant = 0; quant < 2; quant++) {
		struct cache_geometry g = geom(2, 4, quant, 8, 1); /* quant: C 3 -> G 3 */
		struct sinkcache *c;
		float zero[D] = {0}, p[D];
		ck_assert_int_eq(sinkcache_new(&g, &c, NULL, 0), 0);
		for (int n = 1; n <= D; n++) {
			append_onehot(c, n - 1, zero);
			weights_by_stream_index(c, p);
			int resident = n < 6 ? n : 6;
			for (int s = 0; s < n; s++) {
				bool in = s < 2 || s >= n - 4;
				ck_assert_msg(fabsf(p[s] - (in ? 1.0f / resident : 0.0f)) < 1e-5f,
				              "quant %d after %d: weight of %d is %g", quant, n, s,
				              p[s]);
			}
		}
		struct sinkcache_stats st;
		sinkcache_get_stats(c, &st);
		ck_assert_uint_eq(st.evicted_compressed, D - 6);
		ck_assert_int_eq(st.n_hot, quant ? 1 : 4);
		sinkcache_free(c);
	}
}
END_TEST

START_TEST(test_positions_by_rank)
{
	/* rope_dim 2: one frequency, theta^0 = 1 rad per position.  Keys and
	 * query are (1, 0, ...), so score_j = cos(pos_q - pos_j) / sqrt(16). */
	for (int orig = 0; orig < 2; orig++) {
		struct cache_geometry g = geom(2, 4, false, 8, 0);
		g.rope_dim = 2;
		g.rope_positions = orig ? ROPE_POSITIONS_ORIGINAL : ROPE_POSITIONS_CACHE;
		struct sinkcache *c;
		float key[D] = {1.0f}, p[D];
		ck_assert_int_eq(sinkcache_new(&g, &c, NULL, 0), 0);
		for (int s = 0; s < 10; s++)
			append_onehot(c, s, key);
		weights_by_stream_index(c, p);
		/* resident 0,1,6,7,8,9: ranks 0..5, query rank 5 (stream 9) */
		const int stream[6] = {0, 1, 6, 7, 8, 9}, rank[6] = {0, 1, 2, 3, 4, 5};
		double w[6], sum = 0;
		for (int i = 0; i < 6; i++) {
			double dist = orig ? 9 - stream[i] : 5 - rank[i];
			w[i] = exp(cos(dist) / 4.0);
			sum += w[i];
		}
		for (int i = 0; i < 6; i++)
			ck_assert_msg(fabs(p[stream[i]] - w[i] / sum) < 1e-6,
			              "orig %d stream %d: %g vs %g", orig, stream[i], p[stream[i]],
			              w[i] / sum);
		sinkcache_free(c);
	}
}
END_TEST

START_TEST(test_large_stream_index)
{
	/* 4 sinks, then the stream jumps to 10^7: positions must stay exact. */
	for (int mode = 0; mode < 3; mode++) {
		static struct ref r;
		struct cache_geometry g = geom(4, 16, mode == 2, 8, 4);
		g.rope_positions = mode == 1 ? ROPE_POSITIONS_ORIGINAL : ROPE_POSITIONS_CACHE;
		struct sinkcache *c;
		char err[SINKD_ERR_LEN];
		srand(40 + mode);
		ck_assert_int_eq(sinkcache_new(&g, &c, NULL, 0), 0);
		ref_init(&r, &g);
		for (int i = 0; i < 4; i++)
			append_both(c, &r);
		ck_assert_int_eq(sinkcache_debug_set_stream_index(c, 10000000, err, sizeof(err)),
		                 0);
		r.T = 10000000;
		double worst = 0;
		for (int i = 0; i < 40; i++) {
			append_both(c, &r);
			worst = fmax(worst, compare_attend(c, &r));
		}
		ck_assert_msg(worst < 1e-5, "mode %d: worst %g", mode, worst);
		sinkcache_free(c);
	}
}
END_TEST

START_TEST(test_bound_and_accounting)
{
	struct cache_geometry gs[5];
	bool reaches[5] = {true, true, true, false, false};
	gs[0] = geom(4, 12, false, 8, 0);
	gs[1] = geom(4, 72, true, 8, 8);                              /* C 64, G 32 */
	gs[2] = geom(2, 50, true, 4, 4), gs[2].protect_sinks = false; /* C 46, G 23 */
	gs[3] = geom(0, 45, true, 8, 8); /* C 37, G 32: one staging token short */
	gs[4] = geom(4, 0, true, 8, 4), gs[4].strategy = CACHE_STRATEGY_FULL,
	gs[4].max_context_length = 40;
	ck_assert_int_eq(cache_geometry_quant_group_size(&gs[1]), 32);
	ck_assert_int_eq(cache_geometry_quant_group_size(&gs[2]), 23);
	/* by hand: fp token 2 kv * 2 (K,V) * 16 * 4 B = 256 B */
	ck_assert_uint_eq(cache_geometry_bound_bytes(&gs[0]), NL * 16 * 256);
	/* sinks 4*256 + hot 8*256 + staging 31*256 + 2 groups of
	 * 2 kv * (2*32*16 codes + 2*16*4 key params + 32*2*4 value params) */
	ck_assert_uint_eq(cache_geometry_bound_bytes(&gs[1]),
	                  NL * (4 * 256 + 8 * 256 + 31 * 256 + 2 * 2816));
	for (int i = 0; i < 5; i++) {
		struct sinkcache *c;
		struct sinkcache_stats st;
		float k[NKV * D], v[NKV * D];
		size_t peak = 0;
		ck_assert_int_eq(sinkcache_new(&gs[i], &c, NULL, 0), 0);
		int cap = gs[i].strategy == CACHE_STRATEGY_FULL
		              ? gs[i].max_context_length
		              : gs[i].sink_keep_count + gs[i].window_size;
		for (int t = 0; t < 5 * cap && sinkcache_can_append(c, 1); t++) {
			for (int j = 0; j < NKV * D; j++)
				k[j] = frand(), v[j] = frand();
			for (int l = 0; l < NL; l++)
				ck_assert_int_eq(sinkcache_append(c, l, k, v, NULL, 0), 0);
			sinkcache_get_stats(c, &st);
			ck_assert_uint_eq(st.bytes_bound, cache_geometry_bound_bytes(&gs[i]));
			ck_assert_uint_le(st.bytes_resident, st.bytes_bound);
			ck_assert_int_le(st.n_resident, cap);
			peak = st.bytes_resident > peak ? st.bytes_resident : peak;
		}
		if (reaches[i])
			ck_assert_uint_eq(peak, st.bytes_bound);
		/* without a group size dividing the compressed tier, staging and the
		 * last group slot are never all full at once */
		ck_assert_uint_gt(peak, st.bytes_bound * 3 / 4);
		sinkcache_free(c);
	}
}
END_TEST

START_TEST(test_revise_exact)
{
	/* Appending 9 tokens and revising 3 == appending the first 6: outputs of
	 * the next tokens are bit-identical. */
	struct cache_geometry g = geom(2, 8, true, 8, 4); /* C 4, G 4 */
	struct sinkcache *a, *b;
	char err[SINKD_ERR_LEN];
	static float k[20][NKV * D], v[20][NKV * D];
	srand(99);
	for (int t = 0; t < 20; t++)
		for (int j = 0; j < NKV * D; j++)
			k[t][j] = frand(), v[t][j] = frand();
	ck_assert_int_eq(sinkcache_new(&g, &a, NULL, 0), 0);
	ck_assert_int_eq(sinkcache_new(&g, &b, NULL, 0), 0);
	for (int t = 0; t < 9; t++)
		for (int l = 0; l < NL; l++)
			sinkcache_append(a, l, k[t], v[t], NULL, 0);
	for (int t = 0; t < 6; t++)
		for (int l = 0; l < NL; l++)
			sinkcache_append(b, l, k[t], v[t], NULL, 0);
	/* 7 window tokens: hot 4, staged 3 -> at most 7 */
	ck_assert_int_eq(sinkcache_revise(a, 8, err, sizeof(err)), SDERR_CONFLICT);
	ck_assert_ptr_nonnull(strstr(err, "can revise at most 7 tokens"));
	ck_assert_int_eq(sinkcache_revise(a, 3, err, sizeof(err)), 0);
	float *scratch = malloc(sinkcache_scratch_floats(&g) * sizeof(float));
	float q[NH * D], oa[NH * D], ob[NH * D];
	for (int t = 10; t < 20; t++) {
		for (int l = 0; l < NL; l++) {
			sinkcache_append(a, l, k[t], v[t], NULL, 0);
			sinkcache_append(b, l, k[t], v[t], NULL, 0);
			for (int j = 0; j < NH * D; j++)
				q[j] = frand();
			sinkcache_attend(a, l, q, NH, 0, NH, oa, scratch, NULL, NULL, NULL, true);
			sinkcache_attend(b, l, q, NH, 0, NH, ob, scratch, NULL, NULL, NULL, false);
			ck_assert_int_eq(memcmp(oa, ob, sizeof(oa)), 0);
		}
	}
	/* after groups formed: only hot + staged tokens can go */
	struct sinkcache_stats st;
	sinkcache_get_stats(a, &st);
	ck_assert_int_eq(sinkcache_revise(a, (size_t)st.n_resident, err, sizeof(err)), SDERR_CONFLICT);
	ck_assert_ptr_nonnull(strstr(err, "sink tokens are never revised"));
	free(scratch);
	sinkcache_free(a);
	sinkcache_free(b);
}
END_TEST

START_TEST(test_full_strategy_refuses)
{
	struct cache_geometry g = geom(2, 0, false, 8, 0);
	g.strategy = CACHE_STRATEGY_FULL;
	g.max_context_length = 6;
	struct sinkcache *c;
	char err[SINKD_ERR_LEN];
	float k[NKV * D] = {0}, v[NKV * D] = {0};
	ck_assert_int_eq(sinkcache_new(&g, &c, err, sizeof(err)), 0);
	ck_assert(sinkcache_can_append(c, 6));
	ck_assert(!sinkcache_can_append(c, 7));
	for (int t = 0; t < 6; t++)
		for (int l = 0; l < NL; l++)
			ck_assert_int_eq(sinkcache_append(c, l, k, v, err, sizeof(err)), 0);
	ck_assert(!sinkcache_can_append(c, 1));
	ck_assert(sinkcache_can_append(c, 0));
	ck_assert_int_eq(sinkcache_append(c, 0, k, v, err, sizeof(err)), -ENOSPC);
	ck_assert_ptr_nonnull(strstr(err, "max_context_length 6"));
	ck_assert_int_eq(sinkcache_revise(c, 2, err, sizeof(err)), 0);
	ck_assert(sinkcache_can_append(c, 2));
	sinkcache_reset(c);
	ck_assert(sinkcache_can_append(c, 6));
	sinkcache_free(c);
}
END_TEST

START_TEST(test_geometry_errors)
{
	struct {
		struct cache_geometry g;
		const char *msg;
	} bad[9];
	for (int i = 0; i < 9; i++)
		bad[i].g = geom(4, 16, true, 8, 4);
	bad[0].g.sink_keep_count = 16,
	bad[0].msg = "sink_keep_count: 16 must be smaller than window_size 16";
	bad[1].g.full_precision_recent = 17,
	bad[1].msg = "full_precision_recent: 17 is out of range (allowed 0..16)";
	bad[2].g.quant_bits = 3, bad[2].msg = "quant_bits: 3 (allowed: 8, 4)";
	bad[3].g.head_dim = 15, bad[3].g.rope_dim = 14, bad[3].msg = "head_dim: 15 is odd";
	bad[4].g.rope_dim = 18, bad[4].msg = "rope_dim: 18 is out of range (allowed 0..16)";
	bad[5].g.window_size = 0, bad[5].msg = "window_size: 0 is out of range";
	bad[6].g.strategy = CACHE_STRATEGY_FULL, bad[6].g.max_context_length = 2,
	bad[6].msg = "sink_keep_count: 4 is out of range (allowed 0..2)";
	bad[7].g.n_kv_heads = 0, bad[7].msg = "n_kv_heads: 0 is out of range";
	bad[8].g.rope_theta = -1, bad[8].msg = "rope_theta";
	char err[SINKD_ERR_LEN];
	for (int i = 0; i < 9; i++) {
		ck_assert_int_eq(cache_geometry_check(&bad[i].g, err, sizeof(err)), -EINVAL);
		ck_assert_msg(strstr(err, bad[i].msg), "case %d: %s", i, err);
		ck_assert_uint_eq(cache_geometry_bound_bytes(&bad[i].g), 0);
		struct sinkcache *c = (void *)1;
		ck_assert_int_eq(sinkcache_new(&bad[i].g, &c, NULL, 0), -EINVAL);
		ck_assert_ptr_null(c);
	}
	struct cache_geometry ok = geom(0, 16, false, 8, 0);
	ck_assert_int_eq(cache_geometry_check(&ok, err, sizeof(err)), 0);
	ok.quant_bits = 5; /* ignored while quantization is off */
	ck_assert_int_eq(cache_geometry_check(&ok, err, sizeof(err)), 0);
}
END_TEST

struct attend_job {
	const struct sinkcache *c;
	const float *q;
	float *out, *mass;
	int h0, h1;
};

static void *attend_thread(void *arg)
{
	struct attend_job *j = arg;
	size_t n = sinkcache_scratch_floats(sinkcache_geometry(j->c));
	float *scratch = malloc(n * sizeof(float));
	for (int rep = 0; rep < 200; rep++)
		sinkcache_attend(j->c, 1, j->q, NH, j->h0, j->h1, j->out, scratch, j->mass, NULL,
		                 NULL, true);
	free(scratch);
	return NULL;
}

START_TEST(test_concurrent_head_ranges)
{
	/* Threads attending disjoint head ranges of one cache give exactly the
	 * single-caller result: no shared mutable state. */
	struct cache_geometry g = geom(2, 40, true, 4, 8);
	struct sinkcache *c;
	float k[NKV * D], v[NKV * D], q[NH * D], one[NH * D], many[NH * D], m1[NH], m2[NH];
	srand(3);
	ck_assert_int_eq(sinkcache_new(&g, &c, NULL, 0), 0);
	for (int t = 0; t < 70; t++) {
		for (int j = 0; j < NKV * D; j++)
			k[j] = frand(), v[j] = frand();
		for (int l = 0; l < NL; l++)
			sinkcache_append(c, l, k, v, NULL, 0);
	}
	for (int j = 0; j < NH * D; j++)
		q[j] = frand();
	float *scratch = malloc(sinkcache_scratch_floats(&g) * sizeof(float));
	sinkcache_attend(c, 1, q, NH, 0, NH, one, scratch, m1, NULL, NULL, true);
	free(scratch);
	struct attend_job jobs[NH];
	pthread_t th[NH];
	for (int h = 0; h < NH; h++) {
		jobs[h] = (struct attend_job){c, q, many, m2, h, h + 1};
		ck_assert_int_eq(pthread_create(&th[h], NULL, attend_thread, &jobs[h]), 0);
	}
	for (int h = 0; h < NH; h++)
		pthread_join(th[h], NULL);
	ck_assert_int_eq(memcmp(one, many, sizeof(one)), 0);
	ck_assert_int_eq(memcmp(m1, m2, sizeof(m1)), 0);
	sinkcache_free(c);
}
END_TEST

/* Layer blocks do not come from the heap, even after a large free has
 * raised glibc's mmap threshold (the heap would hand them out zeroed by a
 * memset of the whole bound on every new session). */
START_TEST(test_layer_blocks_mapped)
{
	struct cache_geometry g = geom(4, 65536, false, 8, 0);
	char err[SINKD_ERR_LEN];
	char *big = malloc((size_t)30 << 20);
	ck_assert_ptr_nonnull(big);
	big[0] = 1;
	free(big);
	struct mallinfo2 m0 = mallinfo2();
	struct sinkcache *c = NULL;
	ck_assert_int_eq(sinkcache_new(&g, &c, err, sizeof(err)), 0);
	struct mallinfo2 m1 = mallinfo2();
	ck_assert_uint_gt(cache_geometry_bound_bytes(&g), (size_t)16 << 20);
	ck_assert_msg(m1.uordblks + m1.hblkhd < m0.uordblks + m0.hblkhd + ((size_t)1 << 20),
	              "the cache took %zu heap bytes",
	              (size_t)(m1.uordblks + m1.hblkhd - m0.uordblks - m0.hblkhd));
	sinkcache_free(c);
}
END_TEST

static size_t resident_pages(const void *p, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (len + page - 1) / page, count = 0;
	unsigned char *vec = malloc(n);
	ck_assert_int_eq(mincore((void *)p, len, vec), 0);
	for (size_t i = 0; i < n; i++)
		count += vec[i] & 1;
	free(vec);
	return count;
}

/* Resident pages of [p, p + bytes), checked to be four whole 16 KiB chunks
 * (give or take the pages of a chunk boundary); `after` names the writes. */
static size_t four_chunks_resident(const void *p, size_t bytes, const char *after)
{
	size_t chunk_pages = 16384 / (size_t)sysconf(_SC_PAGESIZE);
	size_t n = resident_pages(p, bytes);
	ck_assert_msg(n >= 4 * chunk_pages && n <= 4 * chunk_pages + 8,
	              "%zu pages resident after %s (chunks of %zu pages)", n, after, chunk_pages);
	return n;
}

/* The pages a token's rows land on are made resident a chunk (16 KiB) at a
 * time, ahead of the rows that follow, and nothing else of the block is:
 * one window token (2 kv heads x key and value rows, each run on its own
 * chunk) commits 4 chunks, not the 64 MiB bound. */
START_TEST(test_rows_populated_in_chunks)
{
	struct cache_geometry g = geom(0, 65536, false, 8, 0);
	char err[SINKD_ERR_LEN];
	struct sinkcache *c = new_cache(&g);
	float k[NKV * D], v[NKV * D];
	for (int i = 0; i < NKV * D; i++)
		k[i] = v[i] = 0.5f;
	ck_assert_uint_eq(resident_pages(c->front, c->front_bytes), 0);
	ck_assert_int_eq(sinkcache_append(c, 0, k, v, err, sizeof(err)), 0);
	size_t n = four_chunks_resident(c->front, c->front_bytes, "one token");
	/* prefetching the next rows (any layer, in range or not) changes
	 * nothing that is resident */
	sinkcache_prefetch_append(c, -1);
	sinkcache_prefetch_append(c, 0);
	sinkcache_prefetch_append(c, NL);
	ck_assert_uint_eq(resident_pages(c->front, c->front_bytes), n);
	/* the next 15 tokens of each run need no new pages */
	for (int t = 1; t < 16; t++)
		ck_assert_int_eq(sinkcache_append(c, 0, k, v, err, sizeof(err)), 0);
	ck_assert_uint_eq(resident_pages(c->front, c->front_bytes), n);
	sinkcache_free(c);
}
END_TEST

/* A new quantized group's runs (key and value codes and parameters, four
 * runs in the layer's back block) are made resident a chunk at a time before
 * they are written, like the front's rows: the first group of a layer
 * commits four whole chunks, the next groups (inside them) nothing more.
 * (A back block of small pages: under 2 MiB.) */
START_TEST(test_groups_populated_in_chunks)
{
	struct cache_geometry g = geom(0, 4096, true, 8, 4);
	struct sinkcache *c = new_cache(&g);
	ck_assert_uint_lt(c->layers[0].back_bytes, (size_t)2 << 20);
	int G = cache_geometry_quant_group_size(&g);
	ck_assert_int_gt(G, 1);
	float k[NKV * D], v[NKV * D];
	for (int i = 0; i < NKV * D; i++)
		k[i] = v[i] = frand();
	const struct kv_layer *L = &c->layers[0];
	ck_assert_ptr_nonnull(L->mem);
	append_tokens(c, 0, k, v, 4 + G - 1);
	ck_assert_int_eq(L->t.n_groups, 0);
	ck_assert_uint_eq(resident_pages(L->mem, c->layers[0].back_bytes), 0);
	append_tokens(c, 0, k, v, 1);
	ck_assert_int_eq(L->t.n_groups, 1);
	size_t n = four_chunks_resident(L->mem, c->layers[0].back_bytes, "the first group");
	append_tokens(c, 0, k, v, G);
	ck_assert_int_eq(L->t.n_groups, 2);
	ck_assert_uint_eq(resident_pages(L->mem, c->layers[0].back_bytes), n);
	ck_assert_uint_eq(resident_pages(c->layers[1].mem, c->layers[0].back_bytes), 0);
	sinkcache_free(c);
}
END_TEST

/* Appends n tokens to every layer, all with zero keys and one shared value
 * row (i % D) * 0.25, then checks that attention in the last layer (equal
 * scores) returns that row within tol. */
static void check_shared_value_row(struct sinkcache *c, const struct cache_geometry *g, int n,
                                   float tol)
{
	char err[SINKD_ERR_LEN];
	float k[NKV * D], v[NKV * D], q[NH * D], out[NH * D];
	float *scratch = malloc(sinkcache_scratch_floats(g) * sizeof(float));
	ck_assert_ptr_nonnull(scratch);
	for (int i = 0; i < NKV * D; i++)
		k[i] = 0.0f, v[i] = (float)(i % D) * 0.25f;
	for (int i = 0; i < NH * D; i++)
		q[i] = 0.5f;
	for (int t = 0; t < n; t++)
		for (int l = 0; l < NL; l++)
			ck_assert_int_eq(sinkcache_append(c, l, k, v, err, sizeof(err)), 0);
	sinkcache_attend(c, NL - 1, q, NH, 0, NH, out, scratch, NULL, NULL, NULL, true);
	for (int h = 0; h < NH; h++)
		for (int j = 0; j < D; j++)
			ck_assert_float_eq_tol(out[h * D + j], (float)j * 0.25f, tol);
	free(scratch);
}

/* A front of 2..8 MiB (the hot tier of 8192 tokens) is one block on a
 * 2 MiB boundary, for huge pages; the layers' fronts lie inside it, 64-byte
 * aligned, and rows written through it read back. */
START_TEST(test_front_block_for_huge_pages)
{
	struct cache_geometry g = geom(4, 65536, true, 8, 8192);
	struct sinkcache *c = new_cache(&g);
	ck_assert_uint_ge(c->front_bytes, (size_t)2 << 20);
	ck_assert_uint_le(c->front_bytes, (size_t)8 << 20);
	ck_assert_uint_eq((uintptr_t)c->front % ((uintptr_t)2 << 20), 0);
	for (int l = 0; l < NL; l++) {
		const struct kv_layer *L = &c->layers[l];
		ck_assert_uint_eq((uintptr_t)L->front % 64, 0);
		ck_assert(L->front >= c->front);
		ck_assert(L->st_v +
		              (size_t)NKV * (size_t)(c->layers[0].caps.group - 1) * c->fp_row <=
		          c->front + c->front_bytes);
		ck_assert_ptr_nonnull(L->mem);
	}
	/* equal scores: the output is the value row all tokens share */
	check_shared_value_row(c, &g, 8, 1e-6f);
	sinkcache_free(c);
}
END_TEST

/* A back block of 2 MiB or more (the groups of a 65536-token window) is
 * mapped on a 2 MiB boundary, for huge pages, in every layer; groups written
 * through it read back. */
START_TEST(test_back_block_for_huge_pages)
{
	struct cache_geometry g = geom(0, 65536, true, 8, 4);
	struct sinkcache *c = new_cache(&g);
	ck_assert_uint_ge(c->layers[0].back_bytes, (size_t)2 << 20);
	for (int l = 0; l < NL; l++)
		ck_assert_uint_eq((uintptr_t)c->layers[l].mem % ((uintptr_t)2 << 20), 0);
	/* the same value row read back through the 8-bit codes of two groups
	 * (step 3.75/255) */
	check_shared_value_row(c, &g, 4 + 2 * cache_geometry_quant_group_size(&g), 0.02f);
	ck_assert_int_eq(c->layers[NL - 1].t.n_groups, 2);
	sinkcache_free(c);
}
END_TEST

/* A model sliding-window layer (layer 0, window SW, its own RoPE base)
 * beside a global layer (4 sinks, a window of 16, int8 groups): after 3*SW
 * tokens the sliding layer holds exactly the last SW, all full precision,
 * and attends over them at their stream positions; the global layer holds
 * what a cache of the global span alone holds; the bytes are the sum. */
enum { SW = 12 };

static void swa_reference(const float (*k)[NKV * D], const float (*v)[NKV * D], int n,
                          const float *q, double theta, float *out)
{
	for (int h = 0; h < NH; h++) {
		int kh = h / (NH / NKV), first = n > SW ? n - SW : 0;
		long double qr[D], kr[D], w[3 * SW], sum = 0, mx = -1e30L;
		struct cache_geometry g = tu_geometry(1, 1, D, 0, SW, false, 8, SW);
		g.rope_theta = theta;
		ref_rotate(&g, q + h * D, (long double)(n - 1), qr);
		for (int t = first; t < n; t++) {
			ref_rotate(&g, k[t] + kh * D, (long double)t, kr);
			long double dot = 0;
			for (int j = 0; j < D; j++)
				dot += qr[j] * kr[j];
			w[t - first] = dot / sqrtl((long double)D);
			mx = w[t - first] > mx ? w[t - first] : mx;
		}
		for (int t = first; t < n; t++)
			sum += (w[t - first] = expl(w[t - first] - mx));
		for (int j = 0; j < D; j++) {
			long double o = 0;
			for (int t = first; t < n; t++)
				o += w[t - first] / sum * v[t][kh * D + j];
			out[h * D + j] = (float)o;
		}
	}
}

START_TEST(test_swa_layer_keeps_its_window)
{
	struct cache_geometry u = geom(4, 16, true, 8, 4), g = u;
	g.rope_theta_swa = 500.0;
	cache_geometry_set_layer_swa(&g, 0, SW);
	struct sinkcache *c = new_cache(&g), *cu = new_cache(&u);
	static float k[3 * SW][NKV * D], v[3 * SW][NKV * D];
	float q[NH * D], out[NH * D], want[NH * D];
	float *scratch = calloc(sinkcache_scratch_floats(&g), sizeof(float));
	char err[SINKD_ERR_LEN];
	for (int t = 0; t < 3 * SW; t++) {
		for (int i = 0; i < NKV * D; i++)
			k[t][i] = frand(), v[t][i] = frand();
		for (int l = 0; l < NL; l++) {
			ck_assert_msg(sinkcache_append(c, l, k[t], v[t], err, sizeof(err)) == 0,
			              "%s", err);
			ck_assert_msg(sinkcache_append(cu, l, k[t], v[t], err, sizeof(err)) == 0,
			              "%s", err);
		}
		for (int i = 0; i < NH * D; i++)
			q[i] = frand();
		sinkcache_attend(c, 0, q, NH, 0, NH, out, scratch, NULL, NULL, NULL, true);
		swa_reference((const float(*)[NKV * D]) k, (const float(*)[NKV * D]) v, t + 1, q,
		              500.0, want);
		for (int i = 0; i < NH * D; i++)
			ck_assert_msg(fabsf(out[i] - want[i]) < 1e-4f, "token %d, %d: %g, want %g",
			              t, i, (double)out[i], (double)want[i]);
	}
	const struct kv_layer *S = &c->layers[0], *G = &c->layers[1];
	ck_assert_int_eq(S->t.n_sink + S->t.n_groups + S->t.n_stage, 0);
	ck_assert_int_eq(S->t.n_hot, SW);
	ck_assert_uint_eq(S->t.evicted, 2 * SW);
	ck_assert_mem_eq(&G->t, &cu->layers[1].t, sizeof(G->t));
	struct sinkcache_stats st, su;
	sinkcache_get_stats(c, &st);
	sinkcache_get_stats(cu, &su);
	size_t tok = 2 * NKV * D * sizeof(float);
	ck_assert_int_eq(st.n_resident, su.n_resident); /* the global layers' count */
	ck_assert_int_eq(st.n_resident_swa, SW);
	ck_assert_int_eq(su.n_resident_swa, 0);
	ck_assert_uint_eq(st.bytes_resident, SW * tok + su.bytes_resident / NL);
	ck_assert_uint_eq(st.bytes_bound, cache_geometry_bound_bytes(&g));
	ck_assert_uint_eq(st.bytes_bound, SW * tok + su.bytes_bound / NL);
	/* the global layer attends as the uniform cache's does */
	float outu[NH * D];
	sinkcache_attend(c, 1, q, NH, 0, NH, out, scratch, NULL, NULL, NULL, true);
	sinkcache_attend(cu, 1, q, NH, 0, NH, outu, scratch, NULL, NULL, NULL, true);
	ck_assert_mem_eq(out, outu, sizeof(out));
	/* a revision takes the newest tokens from every layer */
	ck_assert_msg(sinkcache_revise(c, 3, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(S->t.n_hot, SW - 3);
	free(scratch);
	sinkcache_free(c);
	sinkcache_free(cu);
}
END_TEST

static Suite *sinkcache_suite(void)
{
	Suite *s = suite_create("sinkcache");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_geometry_errors);
	tcase_add_test(tc, test_eviction_order);
	tcase_add_test(tc, test_positions_by_rank);
	tcase_add_test(tc, test_bound_and_accounting);
	tcase_add_test(tc, test_layer_blocks_mapped);
	tcase_add_test(tc, test_rows_populated_in_chunks);
	tcase_add_test(tc, test_front_block_for_huge_pages);
	tcase_add_test(tc, test_revise_exact);
	tcase_add_test(tc, test_groups_populated_in_chunks);
	tcase_add_test(tc, test_back_block_for_huge_pages);
	tcase_add_test(tc, test_full_strategy_refuses);
	tcase_add_test(tc, test_large_stream_index);
	tcase_add_test(tc, test_concurrent_head_ranges);
	tcase_add_test(tc, test_attend_modes_vs_reference);
	tcase_add_test(tc, test_swa_layer_keeps_its_window);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(sinkcache_suite());
}
