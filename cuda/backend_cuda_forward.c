/* The forward pass of the CUDA backend over one batch of tokens from many
 * sessions (see backend_cuda.c for the design).  Per forward: the host
 * plans every token's cache jobs and RoPE angles (cuda_kvplan.c,
 * rope_cos_sin) and uploads them in one copy; then per layer: RMSNorm,
 * Q/K/V GEMMs, RoPE, and per wave (the w-th token of every session)
 * flush -> append -> attention; the output projection and the MLP add into
 * the residual through GEMMs with beta = 1.  Logits of the tokens that want
 * them come back to the host; the sessions' cache states are committed only
 * when everything succeeded.  It does not allocate sessions or weights. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_impl.h"
#include "cache/rope.h"
#include "util/log.h"

#define BATCH_ALIGN 256

/* ============================================================ workspace */

static void host_plan_free(struct cuda_backend *c)
{
	free(c->order);
	free(c->sess_begin);
	free(c->wave_begin);
	free(c->flush_begin);
	free(c->wave_max_res);
	free(c->sessions);
	c->order = c->sess_begin = c->wave_begin = c->flush_begin = c->wave_max_res = NULL;
	c->sessions = NULL;
}

void cudabe_workspace_free(struct cuda_backend *c)
{
	cudabe_graphs_clear(c);
	float **f[] = {&c->x,  &c->proj, &c->q,  &c->k,      &c->v,    &c->qw,
	               &c->qs, &c->gate, &c->up, &c->logits, &c->mass, &c->partial};
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		cudaFree(*f[i]);
		*f[i] = NULL;
	}
	void **h[] = {&c->xb_h, &c->att_h, &c->hb_h, (void **)&c->batch_d};
	for (size_t i = 0; i < sizeof(h) / sizeof(h[0]); i++) {
		cudaFree(*h[i]);
		*h[i] = NULL;
	}
	cudaFreeHost(c->batch_h);
	cudaFreeHost(c->mass_h);
	c->batch_h = NULL;
	c->mass_h = NULL;
	host_plan_free(c);
	cudabe_moe_free(c);
	c->cap = c->partial_cap = c->batch_cap = 0;
	free(c->a_ops);
	free(c->a_begin);
	free(c->a_angles);
	c->a_ops = NULL;
	c->a_begin = NULL;
	c->a_angles = NULL;
	c->a_ops_cap = c->a_begin_cap = c->a_angles_cap = 0;
	cudaFree(c->kw);
	cudaFree(c->kwmax);
	cudaFreeHost(c->kwmax_h);
	cudaFree(c->kwmean);
	cudaFreeHost(c->kwmean_h);
	c->kw = c->kwmax = c->kwmax_h = c->kwmean = c->kwmean_h = NULL;
	c->kw_cap = c->kwmax_cap = c->kwmean_cap = 0;
}

static int dev_buf(void **p, size_t bytes, char *err, size_t err_len)
{
	if (cudaMalloc(p, bytes ? bytes : 1) == cudaSuccess)
		return 0;
	cudaGetLastError();
	*p = NULL;
	return err_set(err, err_len, -ENOMEM,
	               "cuda backend: out of device memory for a %zu KiB batch buffer",
	               bytes >> 10);
}

/* Device and host buffers for batches of up to n tokens. */
static int tokens_reserve(struct cuda_backend *c, size_t n, char *err, size_t err_len)
{
	if (n <= c->cap)
		return 0;
	const struct model_hparams *hp = &c->base.model->hp;
	size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
	size_t dt = dt_size(c->wdt), F = sizeof(float);
	cudabe_workspace_free(c);
	struct {
		void **p;
		size_t bytes;
	} bufs[] = {
	    {(void **)&c->x, n * hp->dim * F},
	    {(void **)&c->proj, n * hp->dim * F},
	    {(void **)&c->q, n * qd * F},
	    {(void **)&c->qw, n * qd * F},
	    {(void **)&c->qs, n * qd * F},
	    {(void **)&c->k, n * kvd * F},
	    {(void **)&c->v, n * kvd * F},
	    {(void **)&c->gate, n * hp->ffn_dim * F},
	    {(void **)&c->up, n * hp->ffn_dim * F},
	    {(void **)&c->logits, n * hp->n_vocab * F},
	    {(void **)&c->mass, 2 * n * hp->n_layers * hp->n_heads * F},
	    {&c->xb_h, n * hp->dim * dt},
	    {&c->att_h, n * qd * dt},
	    {&c->hb_h, n * hp->ffn_dim * dt},
	};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
		int rc = dev_buf(bufs[i].p, bufs[i].bytes, err, err_len);
		if (rc) {
			cudabe_workspace_free(c);
			return rc;
		}
	}
	if (cudaMallocHost((void **)&c->mass_h, 2 * n * hp->n_layers * hp->n_heads * F) !=
	    cudaSuccess) {
		cudaGetLastError();
		c->mass_h = NULL;
		cudabe_workspace_free(c);
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of pinned host memory");
	}
	c->order = malloc(n * sizeof(int));
	c->sess_begin = malloc((n + 1) * sizeof(int));
	c->wave_begin = malloc((n + 1) * sizeof(int));
	c->flush_begin = malloc((n + 1) * sizeof(int));
	c->wave_max_res = malloc(n * sizeof(int));
	c->sessions = malloc(n * sizeof(*c->sessions));
	if (!c->order || !c->sess_begin || !c->wave_begin || !c->flush_begin || !c->wave_max_res ||
	    !c->sessions) {
		cudabe_workspace_free(c);
		return err_set(err, err_len, -ENOMEM,
		               "cuda backend: no memory for a batch of %zu tokens", n);
	}
	c->cap = n;
	return 0;
}

static int partial_reserve(struct cuda_backend *c, size_t floats, char *err, size_t err_len)
{
	if (floats <= c->partial_cap)
		return 0;
	cudabe_graphs_clear(c);
	cudaFree(c->partial);
	c->partial_cap = 0;
	int rc = dev_buf((void **)&c->partial, floats * sizeof(float), err, err_len);
	if (!rc)
		c->partial_cap = floats;
	return rc;
}

static int batch_reserve(struct cuda_backend *c, size_t bytes, char *err, size_t err_len)
{
	if (bytes <= c->batch_cap)
		return 0;
	cudabe_graphs_clear(c);
	cudaFree(c->batch_d);
	cudaFreeHost(c->batch_h);
	c->batch_d = c->batch_h = NULL;
	c->batch_cap = 0;
	int rc = dev_buf((void **)&c->batch_d, bytes, err, err_len);
	if (rc)
		return rc;
	if (cudaMallocHost((void **)&c->batch_h, bytes) != cudaSuccess) {
		cudaGetLastError();
		c->batch_h = NULL;
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of pinned host memory");
	}
	c->batch_cap = bytes;
	return 0;
}

/* ============================================================ plan */

static size_t align_up(size_t x)
{
	return (x + BATCH_ALIGN - 1) / BATCH_ALIGN * BATCH_ALIGN;
}

/* Angles and attention jobs are per layer (n_layers copies) in a forward
 * with anchors, where the sink query's rank and the anchor count differ by
 * layer; once otherwise. */
static void batch_layout_of(const struct cuda_backend *c, size_t n, struct batch_layout *bl)
{
	int rope_dim = c->base.model->hp.rope_dim;
	size_t at = 0, rd = (size_t)(rope_dim > 0 ? rope_dim : 1);
	size_t per = c->per_layer ? (size_t)c->base.model->hp.n_layers : 1;
	size_t jobs = c->per_layer_jobs ? per : 1;
	bl->tok = at, at = align_up(at + n * sizeof(int32_t));
	bl->rows = at, at = align_up(at + n * sizeof(int32_t));
	bl->cs = at, at = align_up(at + per * n * 2 * rd * sizeof(double));
	bl->append = at, at = align_up(at + jobs * n * sizeof(struct cuda_kv_append_job));
	bl->flush = at, at = align_up(at + jobs * n * sizeof(struct cuda_kv_flush_job));
	bl->attn = at, at = align_up(at + per * n * sizeof(struct cuda_kv_attn_job));
	bl->a_ops = at, at = align_up(at + (size_t)c->n_a_ops * sizeof(struct cuda_kv_anchor_op));
	bl->a_begin = at, at = align_up(at + (size_t)(c->n_a_lists + 1) * sizeof(int32_t));
	bl->a_angles = at, at = align_up(at + (size_t)c->n_a_angles * rd * sizeof(double));
	bl->bytes = at;
}

/* Groups the tokens by session and checks that every session can take its
 * tokens (engine/batch.c); touches no cache. */
static int batch_group(struct cuda_backend *c, const struct backend_token *tokens, size_t n,
                       char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	struct batch_plan plan = {.sessions = c->sessions, .begin = c->sess_begin, .order = c->order};
	int rc = batch_plan_make(tokens, n, hp->n_vocab, &plan, err, err_len);
	if (rc)
		return rc;
	c->n_sessions = plan.n_sessions;
	c->n_waves = plan.longest;
	for (int j = 0; j < c->n_sessions; j++) {
		struct backend_session *s = c->sessions[j];
		if (!cuda_kv_can_append(&s->sh, &s->st, (size_t)s->batch.n) ||
		    (s->swa && !cuda_kv_can_append(&s->swa->sh, &s->swa->st, (size_t)s->batch.n)))
			return err_set(err, err_len, -ENOSPC,
			               "session cannot take %d more tokens: its cache is full "
			               "(strategy full, max_context_length %d reached)",
			               s->batch.n, s->sh.g.max_context_length);
	}
	return 0;
}

/* Layer l's jobs of one token of session s from its kind's step (sw for
 * a sliding layer, gl for a global one), at token row t of n. */
static void layer_jobs(struct cuda_backend *c, struct backend_session *s, int l, size_t n, int w_at,
                       const struct cuda_kv_step *gl, const struct cuda_kv_step *sw,
                       struct cuda_kv_append_job *app, struct cuda_kv_flush_job *fl,
                       struct cuda_kv_attn_job *att)
{
	bool slides = s->swa && s->swa->slides[l];
	const struct cuda_kv_step *st = slides ? sw : gl;
	struct cuda_kv_view v = cudabe_layer_view(s, l);
	struct cuda_kv_append_job *a = &app[(size_t)l * n + (size_t)w_at];
	*a = st->append;
	a->kv = v;
	if (st->has_flush) {
		struct cuda_kv_flush_job *f = &fl[(size_t)l * n + (size_t)c->flush_n[l]++];
		*f = st->flush;
		f->kv = v;
	}
	struct cuda_kv_attn_job *j = &att[(size_t)l * n + (size_t)w_at];
	*j = st->attn;
	j->kv = v;
	j->n_anchor = !slides && s->anc.cap > 0 ? s->anc.plan[l].n : 0;
}

/* The plan of a forward whose sessions hold the model's sliding-window
 * layers: one wave (a token per session), every layer's jobs and angles
 * from its kind's step, as batch_fill's per-layer attention jobs. */
static void batch_fill_layers(struct cuda_backend *c, size_t n, double *cs,
                              struct cuda_kv_append_job *app, struct cuda_kv_flush_job *fl,
                              struct cuda_kv_attn_job *att)
{
	int rd = c->base.model->hp.rope_dim, cs_stride = 2 * (rd > 0 ? rd : 1);
	int n_layers = c->base.model->hp.n_layers, w_at = 0, max_res = 0;
	memset(c->flush_n, 0, (size_t)n_layers * sizeof(c->flush_n[0]));
	for (int j = 0; j < c->n_sessions; j++) {
		struct backend_session *s = c->sessions[j];
		struct cuda_swa_layers *w = s->swa;
		if (s->batch.n <= 0)
			continue;
		int t = c->order[c->sess_begin[j]];
		struct cuda_kv_step gl, sw;
		cuda_kv_plan_step(&s->sh, &s->tmp, &s->view, &gl);
		gl.append.token = gl.attn.token = t;
		s->step = gl;
		if (w) {
			w->tmp = w->st;
			cuda_kv_plan_step(&w->sh, &w->tmp, &w->view, &sw);
			sw.append.token = sw.attn.token = t;
			w->step = sw;
		}
		for (int l = 0; l < n_layers; l++) {
			bool slides = w && w->slides[l];
			layer_jobs(c, s, l, n, w_at, &gl, &sw, app, fl, att);
			const struct cuda_kv_attn_job *a = &att[(size_t)l * n + (size_t)w_at];
			const double *hi = slides ? w->freq_hi : s->freq_hi;
			const double *lo = slides ? w->freq_lo : s->freq_lo;
			double *cs_l = cs + ((size_t)l * n + (size_t)t) * (size_t)cs_stride;
			rope_cos_sin(hi, lo, rd, gl.key_pos, cs_l);
			rope_cos_sin(hi, lo, rd,
			             slides ? sw.sink_pos
			                    : tier_sink_query_pos(&s->sh.g, &s->sh.caps, &s->tmp.t,
			                                          a->n_anchor),
			             cs_l + cs_stride / 2);
			int res = a->n_sink + a->n_anchor + a->n_comp + a->n_fp;
			max_res = res > max_res ? res : max_res;
		}
		w_at++;
	}
	c->n_waves = 1;
	c->wave_begin[0] = 0, c->wave_begin[1] = w_at;
	c->flush_begin[0] = c->flush_begin[1] = 0;
	c->wave_max_res[0] = max_res;
}

/* Plans wave after wave: jobs, angles, token ids, logits rows.  Wave w (the
 * w-th token of every session) joins the previous waves' launches when none
 * of its tokens quantizes a group or evicts: then no slot that an earlier
 * token of the group attends to is overwritten, every token's job counts
 * only the tokens before it, and appending all of them before attending
 * gives each token exactly the cache the CPU cache shows it.  A prompt
 * chunk thus costs one append and one attention launch per layer until the
 * window fills, instead of one per token. */
static void batch_fill(struct cuda_backend *c, const struct backend_token *tokens, size_t n,
                       const struct batch_layout *bl, int *n_want)
{
	int rd = c->base.model->hp.rope_dim, cs_stride = 2 * (rd > 0 ? rd : 1);
	int n_layers = c->per_layer ? c->base.model->hp.n_layers : 1;
	unsigned char *h = c->batch_h;
	int32_t *tok = (int32_t *)(h + bl->tok), *rows = (int32_t *)(h + bl->rows);
	double *cs = (double *)(h + bl->cs);
	struct cuda_kv_append_job *app = (struct cuda_kv_append_job *)(h + bl->append);
	struct cuda_kv_flush_job *fl = (struct cuda_kv_flush_job *)(h + bl->flush);
	struct cuda_kv_attn_job *att = (struct cuda_kv_attn_job *)(h + bl->attn);
	int w_at = 0, f_at = 0;
	*n_want = 0;
	for (size_t i = 0; i < n; i++) {
		tok[i] = tokens[i].token;
		if (tokens[i].want_logits)
			rows[(*n_want)++] = (int32_t)i;
	}
	for (int j = 0; j < c->n_sessions; j++)
		c->sessions[j]->tmp = c->sessions[j]->st;
	if (c->per_layer_jobs) {
		batch_fill_layers(c, n, cs, app, fl, att);
		return;
	}
	int n_groups = 0; /* wave groups launched together */
	for (int w = 0; w < c->n_waves; w++) {
		int w0 = w_at, f0 = f_at, max_res = 0;
		bool joins = w > 0;
		for (int j = 0; j < c->n_sessions; j++) {
			struct backend_session *s = c->sessions[j];
			if (s->batch.n <= w)
				continue;
			int t = c->order[c->sess_begin[j] + w];
			uint64_t evicted = s->tmp.t.evicted;
			struct cuda_kv_step step;
			cuda_kv_plan_step(&s->sh, &s->tmp, &s->view, &step);
			joins = joins && !step.has_flush && s->tmp.t.evicted == evicted;
			step.append.token = t;
			step.attn.token = t;
			app[w_at] = step.append;
			if (step.has_flush)
				fl[f_at++] = step.flush;
			s->step = step;
			double *cs_t = cs + (size_t)t * cs_stride;
			rope_cos_sin(s->freq_hi, s->freq_lo, rd, step.key_pos, cs_t);
			for (int l = 0; l < n_layers; l++) {
				struct cuda_kv_attn_job a = step.attn;
				double *cs_l = cs_t + (size_t)l * n * cs_stride;
				a.n_anchor = s->anc.cap > 0 ? s->anc.plan[l].n : 0;
				att[(size_t)l * n + w_at] = a;
				if (l > 0)
					memcpy(cs_l, cs_t, (size_t)(cs_stride / 2) * sizeof(double));
				rope_cos_sin(s->freq_hi, s->freq_lo, rd,
				             tier_sink_query_pos(&s->sh.g, &s->sh.caps, &s->tmp.t,
				                                 a.n_anchor),
				             cs_l + cs_stride / 2);
				int res = a.n_sink + a.n_anchor + a.n_comp + a.n_fp;
				max_res = res > max_res ? res : max_res;
			}
			w_at++;
		}
		if (!joins) {
			c->wave_begin[n_groups] = w0;
			c->flush_begin[n_groups] = f0;
			c->wave_max_res[n_groups++] = 0;
		}
		int *m = &c->wave_max_res[n_groups - 1];
		*m = max_res > *m ? max_res : *m;
	}
	c->n_waves = n_groups;
	c->wave_begin[n_groups] = w_at;
	c->flush_begin[n_groups] = f_at;
}

/* Host arrays for the anchor ops of a forward, at most what the sessions'
 * plans can write. */
static int anchor_plan_reserve(struct cuda_backend *c, char *err, size_t err_len)
{
	int L = c->base.model->hp.n_layers, rd = c->base.model->hp.rope_dim;
	size_t ops = 0, lists = 1, angles = 0;
	for (int j = 0; j < c->n_sessions; j++) {
		int a = c->sessions[j]->anc.cap;
		if (a <= 0)
			continue;
		ops += (size_t)L * CUDA_KV_ANCHOR_OPS(a);
		angles += (size_t)L * CUDA_KV_ANCHOR_ANGLES(a) * (size_t)(rd > 0 ? rd : 1);
		lists += (size_t)L;
	}
	if (ops > c->a_ops_cap) {
		free(c->a_ops);
		c->a_ops = malloc(ops * sizeof(*c->a_ops));
		c->a_ops_cap = c->a_ops ? ops : 0;
	}
	if (lists > c->a_begin_cap) {
		free(c->a_begin);
		c->a_begin = malloc(lists * sizeof(*c->a_begin));
		c->a_begin_cap = c->a_begin ? lists : 0;
	}
	if (angles > c->a_angles_cap) {
		free(c->a_angles);
		c->a_angles = malloc(angles * sizeof(*c->a_angles));
		c->a_angles_cap = c->a_angles ? angles : 0;
	}
	if ((ops && !c->a_ops) || !c->a_begin || (angles && !c->a_angles))
		return err_set(err, err_len, -ENOMEM,
		               "cuda backend: no memory to plan the anchor tiers of a batch");
	return 0;
}

/* The anchor upkeep of every session that keeps anchors, one list per
 * (session, layer) with work, planned on the sessions' plan copies before
 * batch_fill advances their states (a forward with anchors carries one
 * token per session). */
static int anchor_plan(struct cuda_backend *c, char *err, size_t err_len)
{
	int L = c->base.model->hp.n_layers, rd = c->base.model->hp.rope_dim;
	c->n_a_ops = c->n_a_lists = c->n_a_angles = 0;
	if (!c->per_layer)
		return 0;
	int rc = anchor_plan_reserve(c, err, err_len);
	if (rc)
		return rc;
	c->a_begin[0] = 0;
	for (int j = 0; j < c->n_sessions; j++) {
		struct backend_session *s = c->sessions[j];
		if (s->anc.cap <= 0)
			continue;
		cuda_kv_anchors_begin(&s->anc);
		for (int l = 0; l < L; l++) {
			int n_ops = 0, n_angles = 0;
			cuda_kv_anchors_plan(&s->sh, &s->anc, l, &s->st, &s->view, s->freq_hi,
			                     s->freq_lo, c->a_ops + c->n_a_ops, &n_ops,
			                     c->a_angles + (size_t)c->n_a_angles * (size_t)rd,
			                     c->n_a_angles, &n_angles);
			c->n_a_angles += n_angles;
			if (n_ops == 0)
				continue;
			c->n_a_ops += n_ops;
			c->a_begin[++c->n_a_lists] = c->n_a_ops;
		}
	}
	return 0;
}

/* Copies the planned anchor ops into the batch buffer. */
static void anchor_fill(struct cuda_backend *c, const struct batch_layout *bl)
{
	size_t rd = (size_t)(c->base.model->hp.rope_dim > 0 ? c->base.model->hp.rope_dim : 1);
	if (c->n_a_lists == 0)
		return;
	memcpy(c->batch_h + bl->a_ops, c->a_ops, (size_t)c->n_a_ops * sizeof(*c->a_ops));
	memcpy(c->batch_h + bl->a_begin, c->a_begin,
	       (size_t)(c->n_a_lists + 1) * sizeof(*c->a_begin));
	memcpy(c->batch_h + bl->a_angles, c->a_angles,
	       (size_t)c->n_a_angles * rd * sizeof(double));
}

/* A device buffer of floats that comes back to a pinned host copy, grown
 * to at least want floats. */
static int reduced_reserve(float **dev, float **host, size_t *cap, size_t want, char *err,
                           size_t err_len)
{
	if (want <= *cap)
		return 0;
	cudaFree(*dev);
	cudaFreeHost(*host);
	*dev = *host = NULL;
	*cap = 0;
	int rc = dev_buf((void **)dev, want * sizeof(float), err, err_len);
	if (rc)
		return rc;
	if (cudaMallocHost((void **)host, want * sizeof(float)) != cudaSuccess) {
		cudaGetLastError();
		*host = NULL;
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of pinned host memory");
	}
	*cap = want;
	return 0;
}

/* Device buffers for the key weights of n tokens over ld columns (and
 * their means when kw_mean). */
static int key_weight_reserve(struct cuda_backend *c, size_t n, int ld, char *err,
                              size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	size_t kw = n * (size_t)hp->n_heads * (size_t)ld, kmax = (size_t)hp->n_layers * n * ld;
	c->key_ld = ld;
	if (kw > c->kw_cap) {
		cudabe_graphs_clear(c);
		cudaFree(c->kw);
		c->kw = NULL;
		c->kw_cap = 0;
		int rc = dev_buf((void **)&c->kw, kw * sizeof(float), err, err_len);
		if (rc)
			return rc;
		c->kw_cap = kw;
	}
	int rc = reduced_reserve(&c->kwmax, &c->kwmax_h, &c->kwmax_cap, kmax, err, err_len);
	if (!rc && c->kw_mean)
		rc = reduced_reserve(&c->kwmean, &c->kwmean_h, &c->kwmean_cap, kmax, err, err_len);
	return rc;
}

static size_t batch_partial_floats(const struct cuda_backend *c)
{
	const struct model_hparams *hp = &c->base.model->hp;
	size_t most = 0;
	for (int w = 0; w < c->n_waves; w++) {
		size_t f = cuda_attention_partial_floats(
		    c->wave_begin[w + 1] - c->wave_begin[w], hp->n_heads, hp->head_dim,
		    c->wave_max_res[w], CUDA_ATTN_DEFAULT_SPLIT);
		most = f > most ? f : most;
	}
	return most;
}

/* ============================================================ layers */

/* y (n, w->rows) = x (n, w->cols) . w^T + beta * y.  Row-major W (rows,
 * cols) is column-major (cols, rows): y^T = op_T(W) x^T. */
int cudabe_gemm(struct cuda_backend *c, const struct cuda_weight *w, int dt, const void *x, int n,
                float *y, float beta, char *err, size_t err_len)
{
	float alpha = 1.0f;
	cudaDataType_t t = blas_type(dt);
	BLAS_TRY(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, n, w->cols, &alpha, w->d,
	                      t, w->cols, x, t, w->cols, &beta, y, CUDA_R_32F, w->rows,
	                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
	         "cublasGemmEx");
	return 0;
}

/* cudabe_gemm in the weights' dtype. */
static int gemm(struct cuda_backend *c, const struct cuda_weight *w, const void *x, int n, float *y,
                float beta, char *err, size_t err_len)
{
	return cudabe_gemm(c, w, c->wdt, x, n, y, beta, err, err_len);
}

static int attention_waves(struct cuda_backend *c, const struct batch_layout *bl, int layer,
                           char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	const struct cuda_kv_append_job *app = (const void *)(c->batch_d + bl->append);
	const struct cuda_kv_flush_job *fl = (const void *)(c->batch_d + bl->flush);
	const struct cuda_kv_attn_job *att = (const void *)(c->batch_d + bl->attn);
	float *mass = c->mass + (size_t)layer * c->cap * hp->n_heads;
	if (c->per_layer)
		att += (size_t)layer * (size_t)c->wave_begin[c->n_waves];
	if (c->per_layer_jobs) { /* one wave of the layer's own jobs */
		app += (size_t)layer * (size_t)c->wave_begin[c->n_waves];
		fl += (size_t)layer * (size_t)c->wave_begin[c->n_waves];
	}
	for (int w = 0; w < c->n_waves; w++) {
		int a0 = c->wave_begin[w], na = c->wave_begin[w + 1] - a0;
		int f0 = c->flush_begin[w], nf = c->flush_begin[w + 1] - f0;
		if (c->per_layer_jobs)
			nf = c->flush_n[layer];
		CU_TRY(cuda_kv_flush(fl + f0, nf, hp->n_kv_heads, layer, c->stream), "kv flush");
		CU_TRY(cuda_kv_append(app + a0, na, hp->n_kv_heads, layer, c->k, c->v, c->stream),
		       "kv append");
		CU_TRY(cuda_attention_capped(att + a0, na, c->wave_max_res[w], layer, hp->n_heads,
		                             c->qw, c->qs, CUDA_ATTN_DEFAULT_SPLIT, c->partial,
		                             c->att_h, c->wdt, mass, c->per_layer ? c->kw : NULL,
		                             c->key_ld, hp->attn_softcap,
		                             c->layers[layer].attn_sinks,
		                             mass + (size_t)hp->n_layers * c->cap * hp->n_heads,
		                             c->stream),
		       "attention");
	}
	if (c->per_layer) /* one wave: its tokens are rows 0..n-1 */
	{
		size_t at = (size_t)layer * c->wave_begin[c->n_waves] * (size_t)c->key_ld;
		CU_TRY(cuda_key_weight_reduce(c->kw, c->wave_begin[c->n_waves], hp->n_heads,
		                              c->key_ld, c->key_ld, c->kwmax + at,
		                              c->kw_mean ? c->kwmean + at : NULL, c->stream),
		       "key weights");
	}
	return 0;
}

/* Attention of layer l into c->att_h: norm, Q/K/V (biases where the model
 * has them, then the Gemma shape's QK-norm), RoPE with the queries scaled
 * by the model's attn_scale (0: 1/sqrt(head_dim)), the cache. */
static int attention_core(struct cuda_backend *c, const struct batch_layout *bl, int n, int l,
                          char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	const struct cuda_layer_weights *L = &c->layers[l];
	const double *cs = (const double *)(c->batch_d + bl->cs);
	int rd = hp->rope_dim, cs_stride = 2 * (rd > 0 ? rd : 1);
	if (c->per_layer)
		cs += (size_t)l * (size_t)n * (size_t)cs_stride;
	float scale = hp->attn_scale > 0.0f ? hp->attn_scale : 1.0f / sqrtf((float)hp->head_dim);
	int rc;
	CU_TRY(
	    cuda_rmsnorm(c->x, L->attn_norm, n, hp->dim, hp->norm_eps, c->xb_h, c->wdt, c->stream),
	    "rmsnorm");
	if ((rc = gemm(c, &L->wq, c->xb_h, n, c->q, 0.0f, err, err_len)) ||
	    (rc = gemm(c, &L->wk, c->xb_h, n, c->k, 0.0f, err, err_len)) ||
	    (rc = gemm(c, &L->wv, c->xb_h, n, c->v, 0.0f, err, err_len)))
		return rc;
	if (L->bq) {
		CU_TRY(cuda_add_bias(c->q, L->bq, n, L->wq.rows, c->stream), "bias");
		CU_TRY(cuda_add_bias(c->k, L->bk, n, L->wk.rows, c->stream), "bias");
		CU_TRY(cuda_add_bias(c->v, L->bv, n, L->wv.rows, c->stream), "bias");
	}
	if (L->q_norm) {
		CU_TRY(cuda_rmsnorm(c->q, L->q_norm, n * hp->n_heads, hp->head_dim, hp->norm_eps,
		                    c->q, CUDA_DT_F32, c->stream),
		       "q norm");
		CU_TRY(cuda_rmsnorm(c->k, L->k_norm, n * hp->n_kv_heads, hp->head_dim,
		                    hp->norm_eps, c->k, CUDA_DT_F32, c->stream),
		       "k norm");
	}
	if (hp->rope_attn_scale != 0.0f && hp->rope_attn_scale != 1.0f) {
		/* YaRN's / longrope's magnitude on the rotated dims */
		CU_TRY(cuda_rope_scale(c->q, n * hp->n_heads, hp->head_dim, rd,
		                       hp->rope_attn_scale, c->stream),
		       "rope scale q");
		CU_TRY(cuda_rope_scale(c->k, n * hp->n_kv_heads, hp->head_dim, rd,
		                       hp->rope_attn_scale, c->stream),
		       "rope scale k");
	}
	CU_TRY(cuda_rope(c->k, c->k, n, hp->n_kv_heads, hp->head_dim, rd, c->neox, cs, cs_stride,
	                 1.0f, c->stream),
	       "rope k");
	CU_TRY(cuda_rope(c->q, c->qw, n, hp->n_heads, hp->head_dim, rd, c->neox, cs, cs_stride,
	                 scale, c->stream),
	       "rope q");
	CU_TRY(cuda_rope(c->q, c->qs, n, hp->n_heads, hp->head_dim, rd, c->neox, cs + cs_stride / 2,
	                 cs_stride, scale, c->stream),
	       "rope q sink");
	return attention_waves(c, bl, l, err, err_len);
}

static int layer_attention(struct cuda_backend *c, const struct batch_layout *bl, int n, int l,
                           char *err, size_t err_len)
{
	int rc = attention_core(c, bl, n, l, err, err_len);
	return rc ? rc : gemm(c, &c->layers[l].wo, c->att_h, n, c->x, 1.0f, err, err_len);
}

/* The MLP's input, both shapes: RMSNorm, then the gate and up products. */
static int mlp_gate_up(struct cuda_backend *c, int n, int l, char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	const struct cuda_layer_weights *L = &c->layers[l];
	int rc;
	CU_TRY(
	    cuda_rmsnorm(c->x, L->ffn_norm, n, hp->dim, hp->norm_eps, c->xb_h, c->wdt, c->stream),
	    "rmsnorm");
	if ((rc = gemm(c, &L->gate, c->xb_h, n, c->gate, 0.0f, err, err_len)) ||
	    (rc = gemm(c, &L->up, c->xb_h, n, c->up, 0.0f, err, err_len)))
		return rc;
	return 0;
}

static int layer_mlp(struct cuda_backend *c, int n, int l, char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	const struct cuda_layer_weights *L = &c->layers[l];
	int rc = mlp_gate_up(c, n, l, err, err_len);
	if (rc)
		return rc;
	CU_TRY(cuda_swiglu(c->gate, c->up, (size_t)n * hp->ffn_dim, c->hb_h, c->wdt, c->stream),
	       "swiglu");
	return gemm(c, &L->down, c->hb_h, n, c->x, 1.0f, err, err_len);
}

/* One layer of the Llama shape (MODEL_LAYER_LLAMA), enqueued: attention
 * (with the Q/K/V biases and QK-norm where the model has them) then the
 * SwiGLU MLP. */
static int layer_llama(struct cuda_backend *c, const struct batch_layout *bl, int n, int l,
                       char *err, size_t err_len)
{
	int rc = layer_attention(c, bl, n, l, err, err_len);
	return rc ? rc : layer_mlp(c, n, l, err, err_len);
}

/* One layer of the Gemma shape (MODEL_LAYER_GEMMA), enqueued: attention
 * (QK-norm, query scale and score soft-cap as the model says), RMSNorm of
 * its output before the residual add, then the GeGLU MLP with RMSNorm of
 * its output before the residual add. */
static int layer_gemma(struct cuda_backend *c, const struct batch_layout *bl, int n, int l,
                       char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	const struct cuda_layer_weights *L = &c->layers[l];
	int rc = attention_core(c, bl, n, l, err, err_len);
	if (rc || (rc = gemm(c, &L->wo, c->att_h, n, c->proj, 0.0f, err, err_len)))
		return rc;
	CU_TRY(cuda_rmsnorm_add(c->x, c->proj, L->post_attn_norm, n, hp->dim, hp->norm_eps,
	                        c->stream),
	       "post-attention norm");
	if ((rc = mlp_gate_up(c, n, l, err, err_len)))
		return rc;
	CU_TRY(cuda_geglu(c->gate, c->up, (size_t)n * hp->ffn_dim, c->hb_h, c->wdt, c->stream),
	       "geglu");
	if ((rc = gemm(c, &L->down, c->hb_h, n, c->proj, 0.0f, err, err_len)))
		return rc;
	CU_TRY(cuda_rmsnorm_add(c->x, c->proj, L->post_ffw_norm, n, hp->dim, hp->norm_eps,
	                        c->stream),
	       "post-feed-forward norm");
	return 0;
}

/* One layer of the mixture-of-experts shape (MODEL_LAYER_MOE), enqueued:
 * the Llama shape's attention (+ bo where the model has it), then the
 * experts (backend_cuda_moe.c), which route on the host. */
static int layer_moe(struct cuda_backend *c, const struct batch_layout *bl, int n, int l, char *err,
                     size_t err_len)
{
	const struct cuda_layer_weights *L = &c->layers[l];
	int rc = layer_attention(c, bl, n, l, err, err_len);
	if (rc)
		return rc;
	if (L->bo)
		CU_TRY(cuda_add_bias(c->x, L->bo, n, c->base.model->hp.dim, c->stream),
		       "attention output bias");
	return cudabe_moe_ffn(c, n, l, err, err_len);
}

/* The layer function of each layer shape (model/arch.h): a new shape adds
 * a row and a function here. */
static const cuda_layer_fn layer_fns[MODEL_LAYER_KINDS] = {
    [MODEL_LAYER_LLAMA] = layer_llama,
    [MODEL_LAYER_GEMMA] = layer_gemma,
    [MODEL_LAYER_MOE] = layer_moe,
};

cuda_layer_fn cudabe_layer_fn_of(const struct model_arch *a)
{
	enum model_layer_kind kind = model_arch_layer_kind(a);
	return (unsigned)kind < MODEL_LAYER_KINDS ? layer_fns[kind] : NULL;
}

static int output_logits(struct cuda_backend *c, const struct batch_layout *bl, int n_want,
                         float *logits, char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	if (n_want == 0)
		return 0;
	CU_TRY(cuda_gather_rows(c->x, (const int32_t *)(c->batch_d + bl->rows), n_want, hp->dim,
	                        c->proj, c->stream),
	       "gather");
	CU_TRY(cuda_rmsnorm(c->proj, c->out_norm, n_want, hp->dim, hp->norm_eps, c->xb_h, c->wdt,
	                    c->stream),
	       "rmsnorm");
	int rc = gemm(c, &c->out, c->xb_h, n_want, c->logits, 0.0f, err, err_len);
	if (rc)
		return rc;
	if (hp->final_softcap > 0.0f)
		CU_TRY(cuda_softcap(c->logits, (size_t)n_want * hp->n_vocab, hp->final_softcap,
		                    c->stream),
		       "logit soft-cap");
	CU_TRY(cudaMemcpyAsync(logits, c->logits, (size_t)n_want * hp->n_vocab * sizeof(float),
	                       cudaMemcpyDeviceToHost, c->stream),
	       "logits copy");
	return 0;
}

/* Sink masses of the tokens that asked, accumulated into their arrays. */
static void add_sink_mass(struct cuda_backend *c, const struct backend_token *tokens, size_t n)
{
	const struct model_hparams *hp = &c->base.model->hp;
	for (size_t i = 0; i < n; i++) {
		float *learned = tokens[i].learned_sink_mass;
		for (int l = 0; tokens[i].sink_mass && l < hp->n_layers; l++)
			for (int h = 0; h < hp->n_heads; h++)
				tokens[i].sink_mass[(size_t)l * hp->n_heads + h] +=
				    c->mass_h[((size_t)l * c->cap + i) * hp->n_heads + h];
		for (int l = 0; learned && l < hp->n_layers; l++) /* the buffer's second half */
			for (int h = 0; h < hp->n_heads; h++)
				learned[(size_t)l * hp->n_heads + h] +=
				    c->mass_h[(((size_t)hp->n_layers + l) * c->cap + i) * hp->n_heads + h];
	}
}

/* Everything of one forward on the stream, without waiting: upload of the
 * batch, layers, logits (n_want rows) to logits_dst, sink masses to mass_h. */
static int enqueue_forward(struct cuda_backend *c, size_t n, const struct batch_layout *bl,
                           int n_want, bool want_mass, float *logits_dst, char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	int rc = 0;
	CU_TRY(
	    cudaMemcpyAsync(c->batch_d, c->batch_h, bl->bytes, cudaMemcpyHostToDevice, c->stream),
	    "batch upload");
	if (c->n_a_lists > 0) /* before any layer's flush moves what a promotion copies */
		CU_TRY(cuda_kv_anchor_ops((const void *)(c->batch_d + bl->a_ops),
		                          (const int32_t *)(c->batch_d + bl->a_begin), c->n_a_lists,
		                          hp->n_kv_heads, (const double *)(c->batch_d + bl->a_angles),
		                          hp->rope_dim, c->neox, c->stream),
		       "anchor upkeep");
	CU_TRY(cuda_embed(c->embd.d, c->wdt, hp->dim, (const int32_t *)(c->batch_d + bl->tok),
	                  (int)n, c->x, c->stream),
	       "embed");
	if (hp->embed_scale > 0.0f)
		CU_TRY(cuda_scale(c->x, n * hp->dim, hp->embed_scale, c->stream), "embedding scale");
	for (int l = 0; l < hp->n_layers && !rc; l++)
		rc = c->layer_forward(c, bl, (int)n, l, err, err_len);
	rc = rc ? rc : output_logits(c, bl, n_want, logits_dst, err, err_len);
	if (!rc && (want_mass || c->per_layer)) /* traces read the learned sink's half */
		CU_TRY(cudaMemcpyAsync(c->mass_h, c->mass,
		                       2 * (size_t)hp->n_layers * c->cap * hp->n_heads *
		                           sizeof(float),
		                       cudaMemcpyDeviceToHost, c->stream),
		       "sink mass copy");
	size_t kw_bytes = (size_t)hp->n_layers * n * (size_t)c->key_ld * sizeof(float);
	if (!rc && c->per_layer)
		CU_TRY(cudaMemcpyAsync(c->kwmax_h, c->kwmax, kw_bytes, cudaMemcpyDeviceToHost,
		                       c->stream),
		       "key weights copy");
	if (!rc && c->per_layer && c->kw_mean)
		CU_TRY(cudaMemcpyAsync(c->kwmean_h, c->kwmean, kw_bytes, cudaMemcpyDeviceToHost,
		                       c->stream),
		       "key weights copy");
	return rc;
}

/* ============================================================ graphs */

void cudabe_graphs_clear(struct cuda_backend *c)
{
	for (int i = 0; i < CUDA_GRAPH_SLOTS; i++) {
		if (c->graphs[i].exec)
			cudaGraphExecDestroy(c->graphs[i].exec);
		free(c->graphs[i].key);
		memset(&c->graphs[i], 0, sizeof(c->graphs[i]));
	}
}

/* The launch shape of a forward: everything a captured graph bakes in
 * (grid sizes, copy sizes); job contents and angles travel in the batch
 * buffer, whose address is fixed.  key: (4 + 3 * n_waves) ints. */
static size_t graph_key(const struct cuda_backend *c, size_t n, int n_want, bool want_mass,
                        int *key)
{
	size_t k = 0;
	key[k++] = (int)n;
	key[k++] = n_want;
	key[k++] = want_mass;
	key[k++] = c->n_waves;
	for (int w = 0; w < c->n_waves; w++) {
		int splits =
		    (c->wave_max_res[w] + CUDA_ATTN_DEFAULT_SPLIT - 1) / CUDA_ATTN_DEFAULT_SPLIT;
		key[k++] = c->wave_begin[w + 1] - c->wave_begin[w];
		key[k++] = c->flush_begin[w + 1] - c->flush_begin[w];
		key[k++] = splits > 0 ? splits : 1;
	}
	return k;
}

static struct cuda_graph_entry *graph_find(struct cuda_backend *c, const int *key, size_t len)
{
	for (int i = 0; i < CUDA_GRAPH_SLOTS; i++) {
		struct cuda_graph_entry *g = &c->graphs[i];
		if (g->exec && g->key_len == len && memcmp(g->key, key, len * sizeof(int)) == 0)
			return g;
	}
	return NULL;
}

/* Captures the forward into the least recently used slot. */
static int graph_capture(struct cuda_backend *c, const int *key, size_t len, size_t n,
                         const struct batch_layout *bl, int n_want, bool want_mass,
                         struct cuda_graph_entry **out, char *err, size_t err_len)
{
	struct cuda_graph_entry *slot = &c->graphs[0];
	for (int i = 1; i < CUDA_GRAPH_SLOTS; i++)
		if (c->graphs[i].last_used < slot->last_used)
			slot = &c->graphs[i];
	if (slot->exec)
		cudaGraphExecDestroy(slot->exec);
	free(slot->key);
	memset(slot, 0, sizeof(*slot));
	cudaGraph_t graph = NULL;
	CU_TRY(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal),
	       "graph capture");
	int rc = enqueue_forward(c, n, bl, n_want, want_mass, c->logits_h, err, err_len);
	cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
	if (!rc && e == cudaSuccess)
		e = cudaGraphInstantiate(&slot->exec, graph, 0);
	if (graph)
		cudaGraphDestroy(graph);
	if (rc || e != cudaSuccess) {
		cudaGetLastError();
		slot->exec = NULL;
		return rc ? rc
		          : err_set(err, err_len, -EIO, "cuda backend: graph capture: %s",
		                    cudaGetErrorString(e));
	}
	slot->key = malloc(len * sizeof(int));
	if (!slot->key) {
		cudaGraphExecDestroy(slot->exec);
		slot->exec = NULL;
		return err_set(err, err_len, -ENOMEM, "cuda backend: out of memory");
	}
	memcpy(slot->key, key, len * sizeof(int));
	slot->key_len = len;
	*out = slot;
	return 0;
}

/* Replays (capturing first if needed) the forward; 1 when graphs do not
 * apply and the caller must run it eagerly. */
static int run_graph(struct cuda_backend *c, size_t n, const struct batch_layout *bl, int n_want,
                     bool want_mass, float *logits, char *err, size_t err_len)
{
	const struct model_hparams *hp = &c->base.model->hp;
	/* anchor upkeep varies from step to step: not a fixed launch shape; an
	 * MoE layer waits for its routing on the host, which a captured graph
	 * cannot: MoE models run without graphs */
	if (!c->use_graphs || c->per_layer || hp->n_experts > 0 || n > CUDA_GRAPH_MAX_TOKENS ||
	    (size_t)n_want > CUDA_GRAPH_MAX_TOKENS)
		return 1;
	int *key = malloc((4 + 3 * (size_t)c->n_waves) * sizeof(int));
	if (!key)
		return 1;
	size_t len = graph_key(c, n, n_want, want_mass, key);
	struct cuda_graph_entry *g = graph_find(c, key, len);
	char cap_err[SINKD_ERR_LEN];
	if (!g &&
	    graph_capture(c, key, len, n, bl, n_want, want_mass, &g, cap_err, sizeof(cap_err))) {
		log_event(c->log, LOG_WARN, "cuda", "graph capture failed; running without graphs",
		          (struct log_field[]){LOG_STR("error", cap_err), LOG_END});
		c->use_graphs = false;
		cudabe_graphs_clear(c);
		free(key);
		return 1;
	}
	free(key);
	g->last_used = ++c->graph_clock;
	CU_TRY(cudaGraphLaunch(g->exec, c->stream), "graph launch");
	CU_TRY(cudaStreamSynchronize(c->stream), "forward");
	if (n_want)
		memcpy(logits, c->logits_h, (size_t)n_want * hp->n_vocab * sizeof(float));
	return 0;
}

static int run_layers(struct cuda_backend *c, const struct backend_token *tokens, size_t n,
                      const struct batch_layout *bl, int n_want, float *logits, char *err,
                      size_t err_len)
{
	bool want_mass = false;
	for (size_t i = 0; i < n; i++)
		want_mass = want_mass || tokens[i].sink_mass || tokens[i].learned_sink_mass;
	int rc = run_graph(c, n, bl, n_want, want_mass, logits, err, err_len);
	if (rc == 1) {
		rc = enqueue_forward(c, n, bl, n_want, want_mass, logits, err, err_len);
		cudaError_t e = cudaStreamSynchronize(c->stream);
		if (!rc)
			CU_TRY(e, "forward");
	}
	if (rc)
		return rc;
	if (want_mass)
		add_sink_mass(c, tokens, n);
	return 0;
}

/* Token t's learned sink mass in layer l (n_heads), after a forward that
 * copied the masses back; NULL where the layer has no learned sinks. */
static const float *learned_mass_at(const struct cuda_backend *c, int l, int t)
{
	const struct model_hparams *hp = &c->base.model->hp;
	if (!c->layers[l].attn_sinks)
		return NULL;
	return c->mass_h + (((size_t)hp->n_layers + (size_t)l) * c->cap + (size_t)t) * hp->n_heads;
}

/* After a forward with anchors or traces: the planned tiers become the
 * sessions', and each token's key weights feed its session's trace (as
 * attention saw the ranks, before anchors move) and anchor scores. */
static void attention_after(struct cuda_backend *c, size_t n)
{
	int L = c->base.model->hp.n_layers;
	for (int j = 0; j < c->n_sessions; j++) {
		struct backend_session *s = c->sessions[j];
		bool anchors = s->anc.cap > 0;
		if (!anchors && !s->trace)
			continue;
		if (anchors)
			cuda_kv_anchors_commit(&s->sh, &s->anc, &s->step);
		int t = s->step.attn.token;
		for (int l = 0; l < L; l++) {
			size_t at = ((size_t)l * n + (size_t)t) * (size_t)c->key_ld;
			bool slides = s->swa && s->swa->slides[l];
			if (s->trace)
				tier_trace_observe_learned(s->trace, l, learned_mass_at(c, l, t),
				                           c->base.model->hp.n_heads);
			if (s->trace && c->kw_mean)
				tier_trace_observe(s->trace,
				                   slides ? &s->swa->sh.caps : &s->sh.caps, l,
				                   slides ? &s->swa->st.t : &s->st.t,
				                   anchors ? &s->anc.layer[l] : NULL,
				                   c->kwmax_h + at, c->kwmean_h + at);
			if (anchors)
				cuda_kv_anchors_observe(&s->sh, &s->anc, l, &s->st, c->kwmax_h + at,
				                        (size_t)c->key_ld);
		}
	}
}

static int forward_once(struct cuda_backend *c, const struct backend_token *tokens, size_t n,
                        float *logits, char *err, size_t err_len)
{
	struct batch_layout bl;
	int n_want = 0;
	int rc = anchor_plan(c, err, err_len);
	if (rc)
		return rc;
	batch_layout_of(c, n, &bl);
	rc = batch_reserve(c, bl.bytes, err, err_len);
	if (rc)
		return rc;
	batch_fill(c, tokens, n, &bl, &n_want);
	anchor_fill(c, &bl);
	rc = partial_reserve(c, batch_partial_floats(c), err, err_len);
	if (!rc && c->per_layer)
		rc = key_weight_reserve(c, n, c->wave_max_res[0] > 0 ? c->wave_max_res[0] : 1, err,
		                        err_len);
	rc = rc ? rc : run_layers(c, tokens, n, &bl, n_want, logits, err, err_len);
	if (rc)
		return rc;
	for (int j = 0; j < c->n_sessions; j++) {
		c->sessions[j]->st = c->sessions[j]->tmp;
		if (c->sessions[j]->swa)
			c->sessions[j]->swa->st = c->sessions[j]->swa->tmp;
	}
	if (c->per_layer)
		attention_after(c, n);
	return 0;
}

/* A batch with anchors runs one wave per forward: which window token a
 * layer promotes depends on the attention of the step before. */
static int forward_by_waves(struct cuda_backend *c, const struct backend_token *tokens, size_t n,
                            float *logits, char *err, size_t err_len)
{
	size_t n_vocab = (size_t)c->base.model->hp.n_vocab;
	int n_waves = c->n_waves, rc = 0;
	int *wave_of = malloc(n * sizeof(int)), *out_row = malloc(n * sizeof(int));
	struct backend_token *sub = malloc(n * sizeof(*sub));
	float *sub_logits = NULL;
	if (!wave_of || !out_row || !sub) {
		rc = err_set(err, err_len, -ENOMEM, "cuda backend: out of memory");
		goto out;
	}
	size_t most = 0;
	for (int j = 0; j < c->n_sessions; j++)
		for (int w = 0; w < c->sessions[j]->batch.n; w++)
			wave_of[c->order[c->sess_begin[j] + w]] = w;
	for (size_t i = 0, r = 0; i < n; i++)
		out_row[i] = tokens[i].want_logits ? (int)r++ : -1;
	for (int w = 0; w < n_waves; w++) {
		size_t k = 0;
		for (size_t i = 0; i < n; i++)
			k += wave_of[i] == w;
		most = k > most ? k : most;
	}
	if (logits && !(sub_logits = malloc(most * n_vocab * sizeof(float)))) {
		rc = err_set(err, err_len, -ENOMEM, "cuda backend: out of memory");
		goto out;
	}
	for (int w = 0; w < n_waves && !rc; w++) {
		size_t k = 0;
		for (size_t i = 0; i < n; i++)
			if (wave_of[i] == w)
				sub[k++] = tokens[i];
		rc = batch_group(c, sub, k, err, err_len);
		rc = rc ? rc : forward_once(c, sub, k, sub_logits, err, err_len);
		for (size_t i = 0, q = 0, r = 0; !rc && i < n; i++) {
			if (wave_of[i] != w)
				continue;
			if (sub[q++].want_logits)
				memcpy(logits + (size_t)out_row[i] * n_vocab, sub_logits + r++ * n_vocab,
				       n_vocab * sizeof(float));
		}
	}
out:
	free(wave_of);
	free(out_row);
	free(sub);
	free(sub_logits);
	return rc;
}

int cudabe_forward(struct backend *be, const struct backend_token *tokens, size_t n_tokens,
                   float *logits, char *err, size_t err_len)
{
	struct cuda_backend *c = cuda_of(be);
	if (n_tokens == 0)
		return 0;
	if (n_tokens > (size_t)1 << 20)
		return err_set(err, err_len, -EINVAL, "batch of %zu tokens is too large", n_tokens);
	for (size_t i = 0; i < n_tokens; i++)
		if (tokens[i].want_logits && !logits)
			return err_set(err, err_len, -EINVAL,
			               "token %zu wants logits but no buffer given", i);
	CU_TRY(cudaSetDevice(c->device), "cudaSetDevice");
	int rc = tokens_reserve(c, n_tokens, err, err_len);
	rc = rc ? rc : batch_group(c, tokens, n_tokens, err, err_len);
	if (rc)
		return rc;
	c->per_layer = c->kw_mean = c->per_layer_jobs = false;
	for (int j = 0; j < c->n_sessions; j++) {
		c->kw_mean = c->kw_mean || c->sessions[j]->trace;
		c->per_layer_jobs = c->per_layer_jobs || c->sessions[j]->swa;
		c->per_layer = c->per_layer || c->sessions[j]->anc.cap > 0 ||
		               c->sessions[j]->trace || c->sessions[j]->swa;
	}
	if (c->per_layer && c->n_waves > 1)
		return forward_by_waves(c, tokens, n_tokens, logits, err, err_len);
	return forward_once(c, tokens, n_tokens, logits, err, err_len);
}
