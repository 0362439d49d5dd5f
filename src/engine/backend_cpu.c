/* The CPU backend: the Llama forward pass (model/arch.h) over one batch of
 * tokens from many sessions, in host memory with one thread pool.
 *
 * All projections of a layer run for the whole batch at once (matmul.c: one
 * read of each weight per forward for up to 96 tokens), so a batch of B
 * tokens costs far less than B single-token calls.  Attention goes through
 * each session's sink cache, which applies RoPE: per layer and per token,
 * sinkcache_append() then sinkcache_attend().  Sessions with few tokens (the
 * decode steps of many streams) are attended in parallel, one session per
 * task; a session with many tokens (a prefill chunk), or any session when
 * there are fewer sessions than threads, is attended token by token with its
 * heads split over the threads.  A batch that a session cannot take is
 * refused before any cache is touched; an error from the cache during the
 * pass (not expected with a valid geometry) leaves that batch half-applied.
 *
 * It does not sample, schedule or tokenize, and one backend runs one forward
 * at a time (the engine thread owns it). */
#include "engine/backend.h"
#include "engine/batch.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/rope.h"
#include "cache/sinkcache.h"
#include "engine/matmul.h"
#include "engine/moe.h"
#include "engine/panels.h"
#include "engine/qpack.h"
#include "engine/tileplan.h"
#include "engine/threadpool.h"
#include "util/tuning.h"
#include "model/gguf.h"
#include "util/errbuf.h"
#include "util/log.h"
#include "util/pages.h"

/* The thresholds below are in util/tuning.h.  A forward of less work
 * than TUNING_FORWARD_PARALLEL_MIN_MACS, of a model whose weights stay in
 * the caches, runs on the calling thread alone: its steps are too short to
 * share, and the idle workers go to sleep after their spin, leaving their
 * cores to the server's TLS threads. */
#define HEAD_PARALLEL_MIN_TOKENS TUNING_HEAD_PARALLEL_MIN_TOKENS
#define ATTEND_PARALLEL_MIN_MACS TUNING_ATTEND_PARALLEL_MIN_MACS
#define FORWARD_PARALLEL_MIN_MACS TUNING_FORWARD_PARALLEL_MIN_MACS
#define FORWARD_SERIAL_MAX_WEIGHT_BYTES TUNING_FORWARD_SERIAL_MAX_WEIGHT_BYTES

/* Freed sessions' caches kept for the next new session of the same
 * geometry (util/tuning.h), their quantized groups given back to the
 * system (sinkcache_reset_trim).  These bytes are outside the scheduler's
 * KV budget, which counts the caches of live sessions. */
#define CPU_CACHE_POOL_MAX TUNING_CACHE_POOL_MAX
#define CPU_CACHE_POOL_BYTES TUNING_CACHE_POOL_BYTES

struct backend_session {
	struct batch_member batch; /* first: the batch being run (engine/batch.h) */
	struct sinkcache *cache;
};

/* A shared prefix: the cache's read-only sink tier (cache/sinkcache.h). */
struct backend_prefix {
	struct sinkcache_prefix *sinks;
};

struct cpu_backend;

/* One layer over the batch (layer_llama says what it must do). */
typedef int (*cpu_layer_fn)(struct cpu_backend *c, const struct backend_token *tokens, int *n_rows,
                            int layer, char *err, size_t err_len);

struct cpu_backend {
	struct backend base;
	cpu_layer_fn layer_forward; /* the model architecture's (layer_fns) */
	struct threadpool *pool;
	int n_threads;
	/* Of the forward being run: pool and n_threads, or NULL and 1 when it
	 * is too small to share (FORWARD_PARALLEL_MIN_MACS). */
	struct threadpool *run_pool;
	int run_threads;
	double token_macs; /* multiply-adds of one token's weight products */
	/* at most FORWARD_SERIAL_MAX_WEIGHT_BYTES: they stay in the caches */
	bool weights_cached;
	double parallel_min_macs; /* backend_options.parallel_min_macs or the default */
	/* Workspace for up to cap_tokens tokens, grown on demand. */
	size_t cap_tokens;
	float *x;        /* (n, dim) residual stream */
	float *xb;       /* (n, dim) normalised input of a block */
	float *q;        /* (n, n_heads*head_dim) */
	float *k;        /* (n, n_kv_heads*head_dim) */
	float *v;        /* (n, n_kv_heads*head_dim) */
	float *att;      /* (n, n_heads*head_dim) attention output */
	float *gate;     /* (n, ffn_dim) */
	float *up;       /* (n, ffn_dim) */
	float *proj;     /* (n, dim) output of wo / w_down */
	float *mass;     /* (2, n, n_heads) sink mass, then learned sink mass, of one layer */
	int *order;      /* (n) token indices grouped by session, stream order kept */
	int *sess_begin; /* (n+1) start of each session's run in order[] */
	struct backend_session **sessions; /* (n) distinct sessions of the batch */
	int *sess_rc;                      /* (n) append error per session */
	char (*sess_err)[SINKD_ERR_LEN];   /* (n) its message */
	int n_sessions;
	/* Mixture-of-experts layers (model_arch_moe; unused elsewhere): the
	 * batch's routing and, for up to cap_tokens tokens, its buffers.  The
	 * entries (token, rank) sit in moe_route.order's order, each expert's
	 * rows contiguous, so that one product per expert reads them at once. */
	struct moe_route route;
	float *moe_logits; /* (n, n_experts) router logits */
	float *moe_x;      /* (n*k, dim) normalised rows, by expert */
	float *moe_gate;   /* (n*k, expert_ffn_dim) */
	float *moe_up;     /* (n*k, expert_ffn_dim) */
	float *moe_y;      /* (n*k, dim) each entry's expert output */
	int *moe_pos;      /* (n*k) entry -> its row in the buffers above */
	/* The experts' matrices as the kernels read them (n_layers * 3 *
	 * n_experts: gate, up, down of each layer): copies with panels or
	 * packed layouts where make_panels gives them; c->layers point here. */
	struct weight_matrix *exp_mats;
	/* Per thread attention scratch. */
	size_t scratch_floats;
	float *scratch; /* (n_threads, scratch_floats) */
	/* Per thread attention weights of caches with anchors (sinkcache_observe). */
	size_t weight_floats;
	float *weights; /* (n_threads, weight_floats) */
	/* The model's matrices as the kernels read them: copies of its layers
	 * and output head with panels (panels.h) where this CPU has them. */
	struct model_layer *layers; /* (n_layers) */
	struct weight_matrix output;
	/* The token embedding table the lookups read: a copy on the block
	 * when the table lies in the model's file mapping (make_panels). */
	struct weight_matrix token_embd;
	/* The lookups read rows of the tied head's packed copy (output.panels)
	 * instead, and the table is not copied: it is held once. */
	bool embd_from_head;
	struct sinkd_log *log; /* may be NULL */
	void *panel_block; /* every matrix's panels and the embedding copy (pages_map) */
	bool stored_layout; /* backend_options.cpu_stored_layout: no packed copies */
	size_t panel_block_bytes;
	/* Caches of freed sessions (CPU_CACHE_POOL_MAX), emptied, for reuse. */
	struct sinkcache *cache_pool[CPU_CACHE_POOL_MAX];
	size_t cache_pool_bytes[CPU_CACHE_POOL_MAX];
	int cache_pool_n;
	size_t cache_pool_total; /* bytes of their fronts */
};

static struct cpu_backend *cpu_of(struct backend *be)
{
	return (struct cpu_backend *)be;
}

/* ============================================================ workspace */

static void moe_workspace_free(struct cpu_backend *c)
{
	float **bufs[] = {&c->moe_logits, &c->moe_x, &c->moe_gate, &c->moe_up, &c->moe_y};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
		free(*bufs[i]);
		*bufs[i] = NULL;
	}
	free(c->moe_pos);
	c->moe_pos = NULL;
}

/* The MoE buffers for n tokens (none for a dense model); 0 or -ENOMEM. */
static int moe_workspace_reserve(struct cpu_backend *c, size_t n, char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	if (hp->n_experts <= 0)
		return 0;
	size_t entries = n * (size_t)hp->n_experts_used, eff = (size_t)hp->expert_ffn_dim;
	int rc =
	    moe_route_reserve(&c->route, (int)n, hp->n_experts_used, hp->n_experts, err, err_len);
	if (rc)
		return rc;
	c->moe_logits = malloc(n * hp->n_experts * sizeof(float));
	c->moe_x = malloc(entries * hp->dim * sizeof(float));
	c->moe_gate = malloc(entries * eff * sizeof(float));
	c->moe_up = malloc(entries * eff * sizeof(float));
	c->moe_y = malloc(entries * hp->dim * sizeof(float));
	c->moe_pos = malloc(entries * sizeof(int));
	if (!c->moe_logits || !c->moe_x || !c->moe_gate || !c->moe_up || !c->moe_y || !c->moe_pos)
		return err_set(err, err_len, -ENOMEM,
		               "cpu backend: no memory for the experts of a batch of %zu tokens",
		               n);
	log_alloc(c->log, "cpu", "expert activations (grows with the largest batch)",
	          sizeof(float) * (n * hp->n_experts + entries * (2 * (size_t)hp->dim + 2 * eff)));
	return 0;
}

static void workspace_free(struct cpu_backend *c)
{
	float **bufs[] = {&c->x,   &c->xb,   &c->q,  &c->k,    &c->v,
	                  &c->att, &c->gate, &c->up, &c->proj, &c->mass};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
		free(*bufs[i]);
		*bufs[i] = NULL;
	}
	free(c->order);
	free(c->sess_begin);
	free(c->sessions);
	free(c->sess_rc);
	free(c->sess_err);
	c->sess_err = NULL;
	c->order = c->sess_begin = c->sess_rc = NULL;
	c->sessions = NULL;
	moe_workspace_free(c);
	c->cap_tokens = 0;
}

static int workspace_reserve(struct cpu_backend *c, size_t n, char *err, size_t err_len)
{
	if (n <= c->cap_tokens)
		return 0;
	const struct model_hparams *hp = &c->base.model->hp;
	size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
	workspace_free(c);
	c->x = malloc(n * hp->dim * sizeof(float));
	c->xb = malloc(n * hp->dim * sizeof(float));
	c->q = malloc(n * qd * sizeof(float));
	c->k = malloc(n * kvd * sizeof(float));
	c->v = malloc(n * kvd * sizeof(float));
	c->att = malloc(n * qd * sizeof(float));
	c->gate = malloc(n * hp->ffn_dim * sizeof(float));
	c->up = malloc(n * hp->ffn_dim * sizeof(float));
	c->proj = malloc(n * hp->dim * sizeof(float));
	c->mass = malloc(2 * n * hp->n_heads * sizeof(float));
	c->order = malloc(n * sizeof(int));
	c->sess_begin = malloc((n + 1) * sizeof(int));
	c->sessions = malloc(n * sizeof(*c->sessions));
	c->sess_rc = malloc(n * sizeof(int));
	c->sess_err = malloc(n * sizeof(*c->sess_err));
	if (!c->sess_err || !c->x || !c->xb || !c->q || !c->k || !c->v || !c->att || !c->gate ||
	    !c->up || !c->proj || !c->mass || !c->order || !c->sess_begin || !c->sessions ||
	    !c->sess_rc) {
		workspace_free(c);
		return err_set(err, err_len, -ENOMEM,
		               "cpu backend: no memory for a batch of %zu tokens", n);
	}
	int rc = moe_workspace_reserve(c, n, err, err_len);
	if (rc) {
		workspace_free(c);
		return rc;
	}
	c->cap_tokens = n;
	log_alloc(c->log, "cpu", "batch activations (grows with the largest batch)",
	          n * sizeof(float) * (3 * (size_t)hp->dim + 2 * qd + 2 * kvd + 2 * (size_t)hp->ffn_dim));
	return 0;
}

static int scratch_reserve(struct cpu_backend *c, size_t floats, char *err, size_t err_len)
{
	if (floats <= c->scratch_floats)
		return 0;
	float *s = malloc((size_t)c->n_threads * floats * sizeof(float));
	if (!s)
		return err_set(err, err_len, -ENOMEM,
		               "cpu backend: no memory for attention scratch");
	free(c->scratch);
	c->scratch = s;
	c->scratch_floats = floats;
	log_alloc(c->log, "cpu", "attention scratch, per thread",
	          (size_t)c->n_threads * floats * sizeof(float));
	return 0;
}

static int weights_reserve(struct cpu_backend *c, size_t floats, char *err, size_t err_len)
{
	if (floats <= c->weight_floats)
		return 0;
	float *w = malloc((size_t)c->n_threads * floats * sizeof(float));
	if (!w)
		return err_set(err, err_len, -ENOMEM,
		               "cpu backend: no memory for attention weights");
	free(c->weights);
	c->weights = w;
	c->weight_floats = floats;
	log_alloc(c->log, "cpu", "attention weights of caches with anchors, per thread",
	          (size_t)c->n_threads * floats * sizeof(float));
	return 0;
}

/* The key weights a cache with anchors needs from attention, per thread. */
static size_t weight_floats_of(const struct sinkcache *sc, int n_heads)
{
	if (!sinkcache_tracks_attention(sc))
		return 0;
	return (size_t)n_heads * cache_geometry_capacity_tokens(sinkcache_geometry(sc));
}

/* ============================================================== batch */

/* Groups the tokens by session (engine/batch.c) and checks that every
 * session can take its tokens; touches no cache. */
static int batch_plan(struct cpu_backend *c, const struct backend_token *tokens, size_t n,
                      char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	struct batch_plan plan = {.sessions = c->sessions, .begin = c->sess_begin, .order = c->order};
	int rc = batch_plan_make(tokens, n, hp->n_vocab, &plan, err, err_len);
	if (rc)
		return rc;
	c->n_sessions = plan.n_sessions;
	size_t scratch = 0, weights = 0;
	double macs = (double)n * c->token_macs;
	for (int j = 0; j < c->n_sessions; j++) {
		struct backend_session *s = c->sessions[j];
		macs += 2.0 * s->batch.n * hp->n_layers * hp->n_heads * hp->head_dim *
		        ((double)sinkcache_resident_tokens(s->cache) + s->batch.n);
		if (!sinkcache_can_append(s->cache, (size_t)s->batch.n))
			return err_set(err, err_len, -ENOSPC,
			               "session cannot take %d more tokens: its cache is full "
			               "(strategy full, max_context_length %d reached)",
			               s->batch.n,
			               sinkcache_geometry(s->cache)->max_context_length);
		size_t f = sinkcache_scratch_floats(sinkcache_geometry(s->cache));
		scratch = f > scratch ? f : scratch;
		f = weight_floats_of(s->cache, hp->n_heads);
		weights = f > weights ? f : weights;
	}
	bool parallel = c->n_threads > 1 && (macs >= c->parallel_min_macs || !c->weights_cached);
	c->run_pool = parallel ? c->pool : NULL;
	c->run_threads = parallel ? c->n_threads : 1;
	int rc2 = scratch_reserve(c, scratch, err, err_len);
	return rc2 ? rc2 : weights_reserve(c, weights, err, err_len);
}

/* ============================================================ element ops */

/* The sum of squares in double, in 8 independent lanes (element j in lane
 * j % 8, added in a fixed tree): one chain of dependent double adds waits
 * on each add's latency. */
static double sum_squares(const float *x, int dim)
{
	double lane[8] = {0};
	int j = 0;
	for (; j + 8 <= dim; j += 8)
		for (int u = 0; u < 8; u++)
			lane[u] += (double)x[j + u] * x[j + u];
	for (; j < dim; j++)
		lane[j % 8] += (double)x[j] * x[j];
	return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
	       ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/* out(n, dim) = x / rms(x) * w, row by row; out may be x. */
static void rmsnorm_rows(float *out, const float *x, const float *w, int n, int dim, float eps)
{
	for (int i = 0; i < n; i++) {
		const float *xr = x + (size_t)i * dim;
		float *o = out + (size_t)i * dim;
		double ss = sum_squares(xr, dim);
		float scale = (float)(1.0 / sqrt(ss / dim + (double)eps));
		for (int j = 0; j < dim; j++)
			o[j] = xr[j] * scale * w[j];
	}
}

static void add_rows(float *x, const float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] += y[i];
}

static void scale_rows(float *x, size_t n, float scale)
{
	for (size_t i = 0; i < n; i++)
		x[i] *= scale;
}

/* ============================================================ attention */

struct attend_ctx {
	struct cpu_backend *c;
	const struct backend_token *tokens;
	int layer;
	int first_session; /* sessions [first, end) of the dispatch */
	int end_session;
	int token;         /* head-parallel: the token being attended */
	bool rows_cold;    /* head-parallel: the session's first token here */
	struct backend_session *session;
};

static void add_sink_mass(const struct attend_ctx *a, int t, int h0, int h1)
{
	const struct model_hparams *hp = &a->c->base.model->hp;
	float *dst = a->tokens[t].sink_mass, *ldst = a->tokens[t].learned_sink_mass;
	const float *m = a->c->mass + (size_t)t * hp->n_heads;
	const float *lm = m + a->c->cap_tokens * (size_t)hp->n_heads; /* learned_mass_of */
	for (int h = h0; dst && h < h1; h++)
		dst[(size_t)a->layer * hp->n_heads + h] += m[h];
	for (int h = h0; ldst && h < h1; h++)
		ldst[(size_t)a->layer * hp->n_heads + h] += lm[h];
}

static int append_token(struct cpu_backend *c, struct backend_session *s, int layer, int t,
                        char *err, size_t err_len)
{
	size_t kvd = (size_t)c->base.model->hp.n_kv_heads * c->base.model->hp.head_dim;
	return sinkcache_append(s->cache, layer, c->k + t * kvd, c->v + t * kvd, err, err_len);
}

/* Thread `thread`'s key weights for session s, or NULL when its cache
 * keeps no anchors. */
static float *session_weights(const struct cpu_backend *c, const struct backend_session *s,
                              int thread)
{
	if (!sinkcache_tracks_attention(s->cache))
		return NULL;
	return c->weights + (size_t)thread * c->weight_floats;
}

/* Token t's learned sink mass of one layer (n_heads): for the trace. */
static float *learned_mass_of(const struct cpu_backend *c, int t)
{
	return c->mass + (c->cap_tokens + (size_t)t) * (size_t)c->base.model->hp.n_heads;
}

/* Heads [h0, h1) of token t; key weights (when the cache keeps anchors)
 * into the weights of thread `wthread`, which the caller folds in. */
static void attend_heads(const struct attend_ctx *a, struct backend_session *s, int t, int h0,
                         int h1, int thread, int wthread, bool rows_cold)
{
	struct cpu_backend *c = a->c;
	const struct model_hparams *hp = &c->base.model->hp;
	size_t qd = (size_t)hp->n_heads * hp->head_dim;
	float *mass = a->tokens[t].sink_mass ? c->mass + (size_t)t * hp->n_heads : NULL;
	if (mass)
		memset(mass + h0, 0, (size_t)(h1 - h0) * sizeof(float));
	sinkcache_attend(s->cache, a->layer, c->q + t * qd, hp->n_heads, h0, h1, c->att + t * qd,
	                 c->scratch + (size_t)thread * c->scratch_floats, mass,
	                 learned_mass_of(c, t), session_weights(c, s, wthread), rows_cold);
	if (mass || a->tokens[t].learned_sink_mass)
		add_sink_mass(a, t, h0, h1);
}

/* One task = one session: all its tokens, all heads. */
static void attend_session_task(void *ctx, int task, int thread)
{
	const struct attend_ctx *a = ctx;
	struct cpu_backend *c = a->c;
	int j = a->first_session + task;
	struct backend_session *s = c->sessions[j];
	int n_heads = c->base.model->hp.n_heads;
	c->sess_rc[j] = 0;
	/* the session a thread takes after this one (tasks go in order to
	 * whichever thread is free): its new rows' cache lines, meanwhile */
	if (j + c->run_threads < a->end_session)
		sinkcache_prefetch_append(c->sessions[j + c->run_threads]->cache, a->layer);
	for (int o = c->sess_begin[j]; o < c->sess_begin[j + 1]; o++) {
		int t = c->order[o];
		int rc = append_token(c, s, a->layer, t, c->sess_err[j], SINKD_ERR_LEN);
		if (rc) {
			c->sess_rc[j] = rc;
			return;
		}
		attend_heads(a, s, t, 0, n_heads, thread, thread, o == c->sess_begin[j]);
		sinkcache_observe(s->cache, a->layer, session_weights(c, s, thread),
		                  learned_mass_of(c, t), n_heads);
	}
}

/* One task = one share of the heads of one token. */
static void attend_heads_task(void *ctx, int task, int thread)
{
	const struct attend_ctx *a = ctx;
	int h0, h1;
	threadpool_split(a->c->base.model->hp.n_heads, a->c->run_threads * 2, task, 1, &h0, &h1);
	if (h0 < h1)
		attend_heads(a, a->session, a->token, h0, h1, thread, 0, a->rows_cold);
}

/* A session with many tokens: serial appends, head-parallel attends. */
static int attend_long_session(struct attend_ctx *a, int j, char *err, size_t err_len)
{
	struct cpu_backend *c = a->c;
	const struct model_hparams *hp = &c->base.model->hp;
	struct backend_session *s = c->sessions[j];
	double macs = 2.0 * hp->n_heads * hp->head_dim *
	              ((double)sinkcache_resident_tokens(s->cache) + s->batch.n);
	bool parallel = c->run_threads > 1 && macs >= ATTEND_PARALLEL_MIN_MACS;
	a->session = s;
	for (int o = c->sess_begin[j]; o < c->sess_begin[j + 1]; o++) {
		int t = c->order[o];
		int rc = append_token(c, s, a->layer, t, err, err_len);
		if (rc)
			return rc;
		a->token = t;
		a->rows_cold = o == c->sess_begin[j];
		if (parallel)
			threadpool_run(c->run_pool, c->run_threads * 2, attend_heads_task, a);
		else
			attend_heads(a, s, t, 0, hp->n_heads, 0, 0, a->rows_cold);
		sinkcache_observe(s->cache, a->layer, session_weights(c, s, 0),
		                  learned_mass_of(c, t), hp->n_heads);
	}
	return 0;
}

/* Whether session j is attended alone with its heads over the threads:
 * prefill chunks always; single tokens when there are too few sessions to
 * keep the threads busy one session each. */
static bool attend_by_heads(const struct cpu_backend *c, int j)
{
	return c->sessions[j]->batch.n >= HEAD_PARALLEL_MIN_TOKENS ||
	       c->n_sessions < c->run_threads;
}

static int attention_layer(struct cpu_backend *c, const struct backend_token *tokens, int layer,
                           char *err, size_t err_len)
{
	struct attend_ctx a = {.c = c, .tokens = tokens, .layer = layer};
	/* Runs of short sessions go in one dispatch, one session per task. */
	int j = 0;
	while (j < c->n_sessions) {
		if (attend_by_heads(c, j)) {
			int rc = attend_long_session(&a, j, err, err_len);
			if (rc)
				return rc;
			j++;
			continue;
		}
		int e = j;
		while (e < c->n_sessions && !attend_by_heads(c, e))
			e++;
		a.first_session = j;
		a.end_session = e;
		if (c->run_pool)
			threadpool_run(c->run_pool, e - j, attend_session_task, &a);
		else
			for (int t = 0; t < e - j; t++)
				attend_session_task(&a, t, 0);
		for (int k = j; k < e; k++)
			if (c->sess_rc[k])
				return err_set(err, err_len, c->sess_rc[k], "layer %d: %s", layer,
				               c->sess_err[k]);
		j = e;
	}
	return 0;
}

/* ============================================================ forward */

static void embed_tokens(struct cpu_backend *c, const struct backend_token *tokens, size_t n)
{
	int dim = c->base.model->hp.dim;
	for (size_t i = 0; i < n; i++)
		if (c->embd_from_head)
			qpack_row_to_f32(&c->output, tokens[i].token, c->x + i * dim);
		else
			matmul_row_to_f32(&c->token_embd, tokens[i].token, c->x + i * dim);
	if (c->base.model->hp.embed_scale > 0.0f)
		scale_rows(c->x, n * dim, c->base.model->hp.embed_scale);
}

/* Moves the attention outputs and hidden states of the tokens that want
 * logits to the front, in batch order; returns how many. */
static int keep_logit_rows(struct cpu_backend *c, const struct backend_token *tokens, int n)
{
	const struct model_hparams *hp = &c->base.model->hp;
	size_t qd = (size_t)hp->n_heads * hp->head_dim, dim = (size_t)hp->dim;
	int kept = 0;
	for (int i = 0; i < n; i++) {
		if (!tokens[i].want_logits)
			continue;
		if (kept != i) {
			memcpy(c->att + kept * qd, c->att + i * qd, qd * sizeof(float));
			memcpy(c->x + kept * dim, c->x + i * dim, dim * sizeof(float));
		}
		kept++;
	}
	return kept;
}

/* Gemma's queries and keys before the cache turns them: RMSNorm of each
 * head where the model has QK-norm, then the queries scaled from the
 * cache's 1/sqrt(head_dim) to the model's attn_scale (0: that one).  For
 * the Llama shape (no norms, attn_scale 0) it does nothing. */
static void gemma_qk(struct cpu_backend *c, const struct model_layer *L, int n)
{
	const struct model_hparams *hp = &c->base.model->hp;
	if (L->q_norm) {
		rmsnorm_rows(c->q, c->q, L->q_norm, n * hp->n_heads, hp->head_dim, hp->norm_eps);
		rmsnorm_rows(c->k, c->k, L->k_norm, n * hp->n_kv_heads, hp->head_dim,
		             hp->norm_eps);
	}
	float usual = 1.0f / sqrtf((float)hp->head_dim);
	if (hp->attn_scale > 0.0f && hp->attn_scale != usual)
		scale_rows(c->q, (size_t)n * hp->n_heads * hp->head_dim,
		           hp->attn_scale / usual);
}

/* The attention half of a layer, both shapes: norm, Q/K/V (the biases
 * added where the model has them, NULL otherwise; Gemma's QK step),
 * attention, output projection (+ its bias bo where the model has one,
 * gpt-oss) into c->proj.  In the last layer only the
 * rows that want logits go on past attention (their keys and values are
 * what the cache needs from the others): a prompt chunk skips that layer's
 * output projection and feed-forward, and *n_rows becomes the rows kept,
 * moved to the front of c->x in batch order (0: nothing more to do). */
static int attention_block(struct cpu_backend *c, const struct backend_token *tokens, int *n_rows,
                           int layer, char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	const struct model_layer *L = &c->layers[layer];
	int n = *n_rows;
	/* A session attended alone appends on the calling thread while the
	 * others wait: the rows it writes are fetched during the Q/K/V product. */
	for (int j = 0; j < c->n_sessions; j++)
		if (attend_by_heads(c, j))
			sinkcache_prefetch_append(c->sessions[j]->cache, layer);
	rmsnorm_rows(c->xb, c->x, L->attn_norm, n, hp->dim, hp->norm_eps);
	struct matmul_job qkv[3] = {{.w = &L->wq, .bias = L->bq, .y = c->q},
	                            {.w = &L->wk, .bias = L->bk, .y = c->k},
	                            {.w = &L->wv, .bias = L->bv, .y = c->v}};
	matmul_many(c->run_pool, MATMUL_ISA_AUTO, c->xb, n, qkv, 3);
	gemma_qk(c, L, n);
	if (hp->rope_attn_scale != 0.0f && hp->rope_attn_scale != 1.0f) {
		/* YaRN's / longrope's magnitude on the dims the cache rotates */
		rope_scale_rotated(c->q, (size_t)n * hp->n_heads, hp->head_dim, hp->rope_dim,
		                   hp->rope_attn_scale);
		rope_scale_rotated(c->k, (size_t)n * hp->n_kv_heads, hp->head_dim, hp->rope_dim,
		                   hp->rope_attn_scale);
	}
	int rc = attention_layer(c, tokens, layer, err, err_len);
	if (rc)
		return rc;
	if (layer == hp->n_layers - 1) {
		n = *n_rows = keep_logit_rows(c, tokens, n);
		if (n == 0)
			return 0;
	}
	struct matmul_job o = {.w = &L->wo, .bias = L->bo, .y = c->proj};
	matmul_many(c->run_pool, MATMUL_ISA_AUTO, c->att, n, &o, 1);
	return 0;
}

/* ============================================================ experts */

/* Copies each entry's normalised row (c->xb of its token) to its row of
 * c->moe_x, grouped by expert as the routing ordered them, and records
 * where each entry's row went. */
static void moe_gather(struct cpu_backend *c, int n_entries)
{
	const struct moe_route *r = &c->route;
	size_t dim = (size_t)c->base.model->hp.dim;
	for (int i = 0; i < n_entries; i++) {
		int entry = r->order[i];
		c->moe_pos[entry] = i;
		memcpy(c->moe_x + i * dim, c->xb + (size_t)(entry / r->k) * dim,
		       dim * sizeof(float));
	}
}

/* Expert e over its rows [p0, p0 + cnt) of the MoE buffers: gate and up
 * products (+ biases), the activation, the down product (+ bias) into
 * c->moe_y.  One read of each of its matrices for all its tokens. */
static void moe_expert_rows(struct cpu_backend *c, const struct model_layer *L, int e, int p0,
                            int cnt)
{
	const struct model_hparams *hp = &c->base.model->hp;
	const struct model_arch_moe *am = model_arch_moe(hp->arch);
	size_t eff = (size_t)hp->expert_ffn_dim, dim = (size_t)hp->dim;
	float *gate = c->moe_gate + p0 * eff, *up = c->moe_up + p0 * eff;
	struct matmul_job gu[2] = {
	    {.w = &L->exp_gate[e],
	     .bias = L->exp_b_gate ? L->exp_b_gate + e * eff : NULL,
	     .y = gate},
	    {.w = &L->exp_up[e], .bias = L->exp_b_up ? L->exp_b_up + e * eff : NULL, .y = up}};
	matmul_many(c->run_pool, MATMUL_ISA_AUTO, c->moe_x + p0 * dim, cnt, gu, 2);
	moe_expert_act(gate, up, (size_t)cnt * eff, am->act, am->act_alpha, am->act_limit);
	struct matmul_job down = {.w = &L->exp_down[e],
	                          .bias = L->exp_b_down ? L->exp_b_down + e * dim : NULL,
	                          .y = c->moe_y + p0 * dim};
	matmul_many(c->run_pool, MATMUL_ISA_AUTO, gate, cnt, &down, 1);
}

/* c->proj(n, dim): each token's expert outputs times their gating weights,
 * summed over its ranks 0..k-1 in turn (the order llama.cpp adds them). */
static void moe_combine(struct cpu_backend *c, int n)
{
	const struct moe_route *r = &c->route;
	size_t dim = (size_t)c->base.model->hp.dim;
	for (int t = 0; t < n; t++) {
		float *out = c->proj + t * dim;
		for (int j = 0; j < r->k; j++) {
			int entry = t * r->k + j;
			const float *y = c->moe_y + (size_t)c->moe_pos[entry] * dim;
			float w = r->weight[entry];
			for (size_t i = 0; i < dim; i++)
				out[i] = j == 0 ? y[i] * w : out[i] + y[i] * w;
		}
	}
}

/* The mixture-of-experts feed-forward of c->xb's n rows into c->proj:
 * router (+ bias), routing (engine/moe.h), one product per active expert
 * over its tokens, the weighted sum per token. */
static void moe_ffn(struct cpu_backend *c, const struct model_layer *L, int n)
{
	const struct model_hparams *hp = &c->base.model->hp;
	const struct model_arch_moe *am = model_arch_moe(hp->arch);
	struct moe_route *r = &c->route;
	struct matmul_job router = {.w = &L->w_router, .bias = L->b_router, .y = c->moe_logits};
	matmul_many(c->run_pool, MATMUL_ISA_AUTO, c->xb, n, &router, 1);
	moe_route_compute(r, c->moe_logits, n, am->gating, am->norm_weights);
	moe_gather(c, n * r->k);
	for (int a = 0; a < r->n_active; a++) {
		int e = r->active[a];
		moe_expert_rows(c, L, e, r->start[e], r->start[e + 1] - r->start[e]);
	}
	moe_combine(c, n);
}

/* ============================================================ layers */

/* One layer of the Llama shape (MODEL_LAYER_LLAMA) and of the MoE shape
 * (MODEL_LAYER_MOE) over the batch: attention_block (with the biases,
 * QK-norm and bo the model has), residual add, RMSNorm, SwiGLU or the
 * experts (moe_ffn), residual add. */
static int layer_llama(struct cpu_backend *c, const struct backend_token *tokens, int *n_rows,
                       int layer, char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	const struct model_layer *L = &c->layers[layer];
	int rc = attention_block(c, tokens, n_rows, layer, err, err_len);
	int n = *n_rows;
	if (rc || n == 0)
		return rc;
	add_rows(c->x, c->proj, (size_t)n * hp->dim);
	rmsnorm_rows(c->xb, c->x, L->ffn_norm, n, hp->dim, hp->norm_eps);
	if (L->exp_gate) {
		moe_ffn(c, L, n);
	} else {
		matmul_swiglu(c->run_pool, MATMUL_ISA_AUTO, c->xb, n, &L->w_gate, &L->w_up, c->gate,
		              c->up);
		matmul(c->run_pool, c->gate, n, &L->w_down, c->proj);
	}
	add_rows(c->x, c->proj, (size_t)n * hp->dim);
	return 0;
}

/* gate(n) = gelu(gate) * up, GELU in the tanh approximation llama.cpp
 * computes (GeGLU). */
static void geglu_rows(float *gate, const float *up, size_t n)
{
	const float sqrt_2_over_pi = 0.79788456080286535587989211986876f, coef_a = 0.044715f;
	for (size_t i = 0; i < n; i++) {
		float x = gate[i];
		gate[i] = 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x))) *
		          up[i];
	}
}

/* One layer of the Gemma shape (MODEL_LAYER_GEMMA) over the batch:
 * attention_block (with QK-norm and the query scale), RMSNorm of its output
 * before the residual add, RMSNorm, GeGLU, RMSNorm of its output before the
 * residual add.  The attention soft-cap is the cache's (cpu_session_new). */
static int layer_gemma(struct cpu_backend *c, const struct backend_token *tokens, int *n_rows,
                       int layer, char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	const struct model_layer *L = &c->layers[layer];
	int rc = attention_block(c, tokens, n_rows, layer, err, err_len);
	int n = *n_rows;
	if (rc || n == 0)
		return rc;
	rmsnorm_rows(c->proj, c->proj, L->post_attn_norm, n, hp->dim, hp->norm_eps);
	add_rows(c->x, c->proj, (size_t)n * hp->dim);
	rmsnorm_rows(c->xb, c->x, L->ffn_norm, n, hp->dim, hp->norm_eps);
	struct matmul_job ffn[2] = {{.w = &L->w_gate, .y = c->gate}, {.w = &L->w_up, .y = c->up}};
	matmul_many(c->run_pool, MATMUL_ISA_AUTO, c->xb, n, ffn, 2);
	geglu_rows(c->gate, c->up, (size_t)n * hp->ffn_dim);
	matmul(c->run_pool, c->gate, n, &L->w_down, c->proj);
	rmsnorm_rows(c->proj, c->proj, L->post_ffw_norm, n, hp->dim, hp->norm_eps);
	add_rows(c->x, c->proj, (size_t)n * hp->dim);
	return 0;
}

/* The layer function of each layer shape (model/arch.h): a new shape adds
 * a row and a function here. */
static const cpu_layer_fn layer_fns[MODEL_LAYER_KINDS] = {
    [MODEL_LAYER_LLAMA] = layer_llama,
    [MODEL_LAYER_GEMMA] = layer_gemma,
    [MODEL_LAYER_MOE] = layer_llama,
};

/* Final norm and output head for the first n_want rows of c->x: the tokens
 * that want logits, in batch order (the layer function). */
static void output_logits(struct cpu_backend *c, int n_want, float *logits)
{
	const struct model *m = c->base.model;
	if (n_want == 0)
		return;
	rmsnorm_rows(c->xb, c->x, m->output_norm, n_want, m->hp.dim, m->hp.norm_eps);
	matmul(c->run_pool, c->xb, n_want, &c->output, logits);
	float cap = m->hp.final_softcap;
	if (cap > 0.0f) /* as llama.cpp: scaled by 1/cap, tanh, scaled by cap */
		for (size_t i = 0; i < (size_t)n_want * m->hp.n_vocab; i++)
			logits[i] = tanhf(logits[i] * (1.0f / cap)) * cap;
}

static int cpu_forward(struct backend *be, const struct backend_token *tokens, size_t n_tokens,
                       float *logits, char *err, size_t err_len)
{
	struct cpu_backend *c = cpu_of(be);
	if (n_tokens == 0)
		return 0;
	if (n_tokens > (size_t)1 << 24)
		return err_set(err, err_len, -EINVAL, "batch of %zu tokens is too large", n_tokens);
	int rc = workspace_reserve(c, n_tokens, err, err_len);
	if (rc)
		return rc;
	rc = batch_plan(c, tokens, n_tokens, err, err_len);
	if (rc)
		return rc;
	for (size_t i = 0; i < n_tokens; i++)
		if (tokens[i].want_logits && !logits)
			return err_set(err, err_len, -EINVAL,
			               "token %zu wants logits but no buffer given", i);
	embed_tokens(c, tokens, n_tokens);
	int n_rows = (int)n_tokens;
	for (int l = 0; l < be->model->hp.n_layers; l++) {
		rc = c->layer_forward(c, tokens, &n_rows, l, err, err_len);
		if (rc)
			return rc;
	}
	output_logits(c, n_rows, logits);
	return 0;
}

/* ============================================================ sessions */

/* Removes kept cache i from the pool, which stays oldest first. */
static struct sinkcache *cache_pool_take(struct cpu_backend *c, int i)
{
	struct sinkcache *cache = c->cache_pool[i];
	int after = c->cache_pool_n - i - 1;
	c->cache_pool_total -= c->cache_pool_bytes[i];
	memmove(&c->cache_pool[i], &c->cache_pool[i + 1], (size_t)after * sizeof(c->cache_pool[0]));
	memmove(&c->cache_pool_bytes[i], &c->cache_pool_bytes[i + 1],
	        (size_t)after * sizeof(c->cache_pool_bytes[0]));
	c->cache_pool_n--;
	return cache;
}

/* A session of geometry g: a kept cache of that geometry, else a new one,
 * else (prefix not NULL) a new cache sharing the prefix's sinks. */
static int session_make(struct backend *be, const struct cache_geometry *g,
                        const struct sinkcache_prefix *prefix, struct backend_session **out,
                        char *err, size_t err_len)
{
	*out = NULL;
	int rc = backend_geometry_fits_model(be->model, g, err, err_len);
	if (rc)
		return rc;
	struct backend_session *s = calloc(1, sizeof(*s));
	if (!s)
		return err_set(err, err_len, -ENOMEM, "cpu backend: out of memory for a session");
	struct cpu_backend *c = cpu_of(be);
	for (int i = c->cache_pool_n - 1; i >= 0 && !s->cache && !prefix; i--)
		if (cache_geometry_equal(sinkcache_geometry(c->cache_pool[i]), g))
			s->cache = cache_pool_take(c, i);
	if (!s->cache) {
		rc = prefix ? sinkcache_new_shared(prefix, &s->cache, err, err_len)
		            : sinkcache_new(g, &s->cache, err, err_len);
		if (rc) {
			free(s);
			return rc;
		}
	}
	sinkcache_set_softcap(s->cache, be->model->hp.attn_softcap);
	for (int l = 0; l < be->model->hp.n_layers && !rc; l++)
		rc = sinkcache_set_learned_sinks(s->cache, l, be->model->layers[l].attn_sinks,
		                                 be->model->hp.n_heads, err, err_len);
	if (rc) {
		sinkcache_free(s->cache);
		free(s);
		return rc;
	}
	s->batch.slot = -1;
	*out = s;
	return 0;
}

static int cpu_session_new(struct backend *be, const struct cache_geometry *g,
                           struct backend_session **out, char *err, size_t err_len)
{
	return session_make(be, g, NULL, out, err, err_len);
}

/* Keeps the emptied cache for reuse while the pool has room (the oldest
 * kept cache makes room for it), else frees it. */
static void cache_pool_put(struct cpu_backend *c, struct sinkcache *cache)
{
	size_t bytes = sinkcache_reset_trim(cache);
	if (bytes > CPU_CACHE_POOL_BYTES) {
		sinkcache_free(cache);
		return;
	}
	while (c->cache_pool_n > 0 && (c->cache_pool_n == CPU_CACHE_POOL_MAX ||
	                               c->cache_pool_total + bytes > CPU_CACHE_POOL_BYTES))
		sinkcache_free(cache_pool_take(c, 0));
	c->cache_pool[c->cache_pool_n] = cache;
	c->cache_pool_bytes[c->cache_pool_n++] = bytes;
	c->cache_pool_total += bytes;
}

static void cpu_session_free(struct backend *be, struct backend_session *s)
{
	if (!s)
		return;
	/* a shared cache is never empty (it holds the prefix) and must not
	 * outlive it: not kept for reuse */
	if (sinkcache_shared_prefix(s->cache))
		sinkcache_free(s->cache);
	else
		cache_pool_put(cpu_of(be), s->cache);
	free(s);
}

static int cpu_session_revise(struct backend *be, struct backend_session *s, size_t n_tokens,
                              char *err, size_t err_len)
{
	return sinkcache_revise(s->cache, n_tokens, err, err_len);
}

static void cpu_session_stats(struct backend *be, const struct backend_session *s,
                              struct sinkcache_stats *out)
{
	sinkcache_get_stats(s->cache, out);
}

static bool cpu_session_can_append(struct backend *be, const struct backend_session *s, size_t n)
{
	return sinkcache_can_append(s->cache, n);
}

static int cpu_session_export(struct backend *be, const struct backend_session *s,
                              struct kv_image *out, char *err, size_t err_len)
{
	return sinkcache_export(s->cache, out, err, err_len);
}

static int cpu_session_import(struct backend *be, struct backend_session *s,
                              const struct kv_image *in, char *err, size_t err_len)
{
	return sinkcache_import(s->cache, in, err, err_len);
}

static int cpu_session_trace_enable(struct backend *be, struct backend_session *s, bool on,
                                    char *err, size_t err_len)
{
	return sinkcache_trace_enable(s->cache, on, err, err_len);
}

static int cpu_session_trace(struct backend *be, const struct backend_session *s,
                             struct cache_trace_step *out, char *err, size_t err_len)
{
	return sinkcache_trace_fill(s->cache, out, err, err_len);
}

/* ---- shared prefixes: the cache's shared sink tiers (backend.h) ---- */

static int cpu_prefix_new(struct backend *be, const struct backend_session *s,
                          struct backend_prefix **out, size_t *bytes, char *err, size_t err_len)
{
	*out = NULL;
	struct backend_prefix *p = calloc(1, sizeof(*p));
	if (!p)
		return err_set(err, err_len, -ENOMEM, "cpu backend: out of memory for a prefix");
	int rc = sinkcache_prefix_new(s->cache, &p->sinks, bytes, err, err_len);
	if (rc) {
		free(p);
		return rc;
	}
	*out = p;
	return 0;
}

static void cpu_prefix_free(struct backend *be, struct backend_prefix *p)
{
	if (!p)
		return;
	sinkcache_prefix_free(p->sinks);
	free(p);
}

static int cpu_session_new_shared(struct backend *be, const struct backend_prefix *p,
                                  struct backend_session **out, char *err, size_t err_len)
{
	return session_make(be, sinkcache_prefix_geometry(p->sinks), p->sinks, out, err, err_len);
}

static int cpu_prefix_image(struct backend *be, const struct backend_prefix *p, int n,
                            struct kv_image *out, char *err, size_t err_len)
{
	return sinkcache_prefix_image(p->sinks, n, out, err, err_len);
}

static void cpu_destroy(struct backend *be)
{
	struct cpu_backend *c = cpu_of(be);
	for (int i = 0; i < c->cache_pool_n; i++)
		sinkcache_free(c->cache_pool[i]);
	threadpool_free(c->pool);
	workspace_free(c);
	free(c->scratch);
	free(c->weights);
	pages_unmap(c->panel_block, c->panel_block_bytes);
	free(c->layers);
	free(c->exp_mats);
	moe_route_free(&c->route);
	free(c);
}

static const struct backend_ops cpu_ops = {
    .name = "cpu",
    .batch_rows_granule = TUNING_CPU_BATCH_ROWS_GRANULE,
    .session_new = cpu_session_new,
    .session_free = cpu_session_free,
    .session_revise = cpu_session_revise,
    .session_stats = cpu_session_stats,
    .session_can_append = cpu_session_can_append,
    .forward = cpu_forward,
    .destroy = cpu_destroy,
    .session_export = cpu_session_export,
    .session_import = cpu_session_import,
    .session_trace_enable = cpu_session_trace_enable,
    .session_trace = cpu_session_trace,
    .prefix_new = cpu_prefix_new,
    .prefix_free = cpu_prefix_free,
    .session_new_shared = cpu_session_new_shared,
    .prefix_image = cpu_prefix_image,
};

static int check_matrix(const struct weight_matrix *w, const char *what, char *err, size_t err_len)
{
	if (!matmul_type_supported(w->type))
		return err_set(err, err_len, -ENOTSUP, "cpu backend: %s has unsupported type %d",
		               what, (int)w->type);
	return 0;
}

/* The router and experts of an MoE layer (none in a dense one). */
static int check_experts(const struct model *m, const struct model_layer *L, char *err,
                         size_t err_len)
{
	if (m->hp.n_experts <= 0 || !L->exp_gate)
		return 0;
	if (m->hp.n_experts_used < 1 || m->hp.n_experts_used > m->hp.n_experts)
		return err_set(err, err_len, -EINVAL,
		               "cpu backend: %d experts used of %d (allowed: 1 .. expert count)",
		               m->hp.n_experts_used, m->hp.n_experts);
	int rc = check_matrix(&L->w_router, "the expert router", err, err_len);
	for (int e = 0; e < m->hp.n_experts && !rc; e++) {
		rc = check_matrix(&L->exp_gate[e], "an expert matrix", err, err_len);
		rc = rc ? rc : check_matrix(&L->exp_up[e], "an expert matrix", err, err_len);
		rc = rc ? rc : check_matrix(&L->exp_down[e], "an expert matrix", err, err_len);
	}
	return rc;
}

static int check_model(const struct model *m, char *err, size_t err_len)
{
	enum model_layer_kind kind = model_arch_layer_kind(m->hp.arch);
	if ((unsigned)kind >= MODEL_LAYER_KINDS || !layer_fns[kind])
		return err_set(err, err_len, -ENOTSUP,
		               "cpu backend: architecture '%s' has no layer function",
		               model_arch_name(m->hp.arch));
	int rc = check_matrix(&m->token_embd, "token_embd", err, err_len);
	rc = rc ? rc : check_matrix(&m->output, "output", err, err_len);
	for (int l = 0; l < m->hp.n_layers && !rc; l++) {
		const struct model_layer *L = &m->layers[l];
		const struct weight_matrix *ws[] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
		                                    &L->w_gate, &L->w_up, &L->w_down};
		for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]) && !rc; i++)
			rc = check_matrix(ws[i], "a layer matrix", err, err_len);
		rc = rc ? rc : check_experts(m, L, err, err_len);
	}
	return rc;
}

static size_t matrix_bytes(const struct weight_matrix *w)
{
	return (size_t)w->rows * w->row_bytes;
}

/* Whether the matrix's bytes lie in the model's read-only file mapping. */
static bool in_file_mapping(const struct model *m, const struct weight_matrix *w)
{
	if (!m->file)
		return false;
	const uint8_t *map = gguf_map(m->file), *p = w->data;
	return map && p >= map && p + matrix_bytes(w) <= map + gguf_file_size(m->file);
}

/* Whether the block type has a packed layout (qpack.h) that a vector
 * kernel of this CPU reads: the plain-C twin alone does not repay packing. */
static bool wants_qpack(const struct weight_matrix *w)
{
	return qpack_bytes(w) > 0 && qpack_variant_best(w->type) != QDOT_VARIANT_SCALAR;
}

/* Whether w gets panels (or, for a block type, its packed copy): when the
 * kernels read them, unless the model dequantized w from its file into its
 * own memory (it would be held twice: it is read as it is; a model built in
 * memory, as in tests, gets panels). */
static bool wants_panel(const struct cpu_backend *c, const struct model *m,
                        const struct weight_matrix *w)
{
	return (panels_supported(w->type) || (wants_qpack(w) && !c->stored_layout)) &&
	       (!m->file || in_file_mapping(m, w));
}

/* Whether the embedding lookups can read the head's packed copy: the head
 * is the table (tied) and gets a packed layout, which qpack_row_to_f32
 * reads back as the stored rows. */
static bool embd_reads_head(const struct cpu_backend *c, const struct model *m)
{
	return m->output.data == m->token_embd.data && qpack_supported(m->output.type) &&
	       wants_panel(c, m, &m->output);
}

/* Bytes of w's panels or packed copy. */
static size_t relaid_bytes(const struct weight_matrix *w)
{
	return qpack_supported(w->type) ? qpack_bytes(w) : panels_bytes(w);
}

/* Bytes a piece takes in the block: each piece starts 64-byte aligned. */
static size_t block_bytes(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

/* The tile plan of w's packed copy (tileplan.h) for this machine's caches
 * and n_threads threads. */
static void plan_packed(struct weight_matrix *w, const struct cpu_caches *caches, int n_threads)
{
	int groups = (w->rows + QPACK_ROWS - 1) / QPACK_ROWS;
	size_t group_bytes = qpack_bytes(w) / (size_t)groups;
	struct tile_plan p = tileplan_make(qdot_act_bytes(w->type, w->cols), group_bytes, groups,
	                                   n_threads, QDOT_TILE_VECS, caches);
	w->plan_vecs_per_pass = p.vecs_per_pass;
	w->plan_groups_per_block = p.groups_per_block;
}

/* c->layers: copies of the model's layers whose expert arrays are c's own
 * copies (c->exp_mats), which make_panels may give packed layouts;
 * -ENOMEM. */
static int copy_experts(struct cpu_backend *c, const struct model *m)
{
	int n_layers = m->hp.n_layers, ne = m->hp.n_experts;
	memcpy(c->layers, m->layers, (size_t)n_layers * sizeof(*c->layers));
	if (ne <= 0)
		return 0;
	c->exp_mats = calloc((size_t)n_layers * 3 * ne, sizeof(*c->exp_mats));
	if (!c->exp_mats)
		return -ENOMEM;
	for (int l = 0; l < n_layers; l++) {
		struct model_layer *L = &c->layers[l];
		struct weight_matrix **arr[3] = {&L->exp_gate, &L->exp_up, &L->exp_down};
		for (int i = 0; i < 3; i++) {
			struct weight_matrix *dst = c->exp_mats + ((size_t)l * 3 + i) * ne;
			if (!*arr[i])
				continue;
			memcpy(dst, *arr[i], (size_t)ne * sizeof(*dst));
			*arr[i] = dst;
		}
	}
	return 0;
}

/* Puts the router and expert matrices of layer L (none in a dense layer)
 * in ws; how many. */
static int layer_expert_matrices(const struct cpu_backend *c, struct model_layer *L,
                                 struct weight_matrix **ws)
{
	int n = 0, ne = c->base.model->hp.n_experts;
	if (!L->exp_gate)
		return 0;
	ws[n++] = &L->w_router;
	for (int e = 0; e < ne; e++) {
		ws[n++] = &L->exp_gate[e];
		ws[n++] = &L->exp_up[e];
		ws[n++] = &L->exp_down[e];
	}
	return n;
}

/* Copies the model's matrices into c, with panels where wants_panel() says
 * so, all in one block on huge pages (pages.h: the weights are one 0.2-0.5
 * GB stream per token, 2 MiB a TLB entry instead of 4 KiB).  The token
 * embedding table joins the block as it is stored: its rows are read at
 * random, and a row read from the file mapping's small pages after a step
 * had evicted their page tables costs a page walk (through guest and host
 * tables in a VM).  The block's pages come in as each piece is written
 * (huge pages: a fault per 2 MiB), not all up front: with each matrix's
 * file pages given back right after its piece, a model's file and block
 * are never resident together while it loads.  The file pages of each
 * copied matrix are given back, unless the embedding table, when it was
 * not copied, shares them (a tied head reads the table's copy).  A tied
 * head with a packed layout serves the lookups from its packed copy, and
 * the table is not copied at all (embd_reads_head).  Without memory for
 * the block the matrices stay as stored. */
static int make_panels(struct cpu_backend *c, const struct model *m, char *err, size_t err_len)
{
	int n_layers = m->hp.n_layers, n = 0;
	size_t per_layer = 7 + (m->hp.n_experts > 0 ? 1 + 3 * (size_t)m->hp.n_experts : 0);
	c->layers = calloc((size_t)n_layers, sizeof(*c->layers));
	struct weight_matrix **ws = calloc((size_t)n_layers * per_layer + 1, sizeof(*ws));
	if (!c->layers || !ws || copy_experts(c, m)) {
		free(ws);
		return err_set(err, err_len, -ENOMEM, "cpu backend: out of memory");
	}
	c->output = m->output;
	c->token_embd = m->token_embd;
	ws[n++] = &c->output;
	for (int l = 0; l < n_layers; l++) {
		struct model_layer *L = &c->layers[l];
		struct weight_matrix *lw[7] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
		                               &L->w_gate, &L->w_up, &L->w_down};
		for (int i = 0; i < 7; i++)
			ws[n++] = lw[i];
		n += layer_expert_matrices(c, L, ws + n);
	}
	bool embd_head = embd_reads_head(c, m);
	bool copy_embd = !embd_head && in_file_mapping(m, &m->token_embd);
	/* a tied head that will read the table's copy gets no re-laid copy:
	 * reserve none for it */
	bool head_reads_copy = copy_embd && m->output.data == m->token_embd.data;
	size_t total = copy_embd ? block_bytes(matrix_bytes(&m->token_embd)) : 0;
	for (int i = head_reads_copy ? 1 : 0; i < n; i++)
		if (wants_panel(c, m, ws[i]))
			total += block_bytes(relaid_bytes(ws[i]));
	if (total > 0)
		c->panel_block = pages_map(total, true);
	struct cpu_caches caches = cpu_caches_read();
	if (c->panel_block) {
		c->panel_block_bytes = total;
		c->embd_from_head = embd_head;
		log_alloc(c->log, "cpu",
		          "weights re-laid for the kernels and the token-embedding table (one "
		          "huge-page block; their file pages are given back)",
		          total);
		size_t at = 0;
		if (copy_embd) {
			size_t table = matrix_bytes(&m->token_embd);
			pages_populate(c->panel_block, table);
			memcpy(c->panel_block, m->token_embd.data, table);
			c->token_embd.data = c->panel_block;
			/* a tied head reads the copy too, as stored (the copy is
			 * not the file's, so wants_panel gives it no re-laid copy
			 * of its own): the table is resident once, and its file
			 * pages go now */
			if (head_reads_copy)
				c->output.data = c->token_embd.data;
			pages_release(m->token_embd.data, table);
			at = block_bytes(table);
		}
		for (int i = 0; i < n; i++) {
			struct weight_matrix *w = ws[i];
			if (!wants_panel(c, m, w))
				continue;
			w->panels = (unsigned char *)c->panel_block + at;
			at += block_bytes(relaid_bytes(w));
			if (qpack_supported(w->type)) {
				qpack_pack(c->pool, w, (void *)w->panels);
				plan_packed(w, &caches, threadpool_size(c->pool));
			} else
				panels_pack(c->pool, w, (void *)w->panels);
			/* at once, so that a large model's file pages and panels are
			 * not all resident together while it loads */
			if (in_file_mapping(m, w) &&
			    (w->data != m->token_embd.data || copy_embd || embd_head))
				pages_release(w->data, matrix_bytes(w));
		}
	}
	free(ws);
	return 0;
}

int backend_cpu_new(const struct model *m, const struct backend_options *opt, struct backend **out,
                    char *err, size_t err_len)
{
	*out = NULL;
	int rc = check_model(m, err, err_len);
	if (rc)
		return rc;
	struct cpu_backend *c = calloc(1, sizeof(*c));
	if (!c)
		return err_set(err, err_len, -ENOMEM, "cpu backend: out of memory");
	c->base.ops = &cpu_ops;
	c->base.model = m;
	c->log = opt ? opt->log : NULL;
	c->layer_forward = layer_fns[model_arch_layer_kind(m->hp.arch)];
	rc = threadpool_new(opt ? opt->n_threads : 0, &c->pool, err, err_len);
	if (rc) {
		free(c);
		return rc;
	}
	c->n_threads = threadpool_size(c->pool);
	c->token_macs = model_weight_params(m);
	c->weights_cached = model_weight_bytes(m) <= FORWARD_SERIAL_MAX_WEIGHT_BYTES;
	c->parallel_min_macs =
	    opt && opt->parallel_min_macs > 0 ? opt->parallel_min_macs : FORWARD_PARALLEL_MIN_MACS;
	c->stored_layout = opt && opt->cpu_stored_layout;
	rc = make_panels(c, m, err, err_len);
	if (rc) {
		cpu_destroy(&c->base);
		return rc;
	}
	*out = &c->base;
	return 0;
}
