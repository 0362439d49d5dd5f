/* The tiered attention-sink KV cache: per layer a sink tier (first tokens of
 * the stream, never evicted), a compressed tier (older window tokens, int8/
 * int4 when quantization is on, KIVI: keys per channel in groups of G tokens,
 * values per token) and a hot tier (newest tokens, full precision).  Each
 * tier is a ring: appending a token never moves the window.  All memory is
 * reserved at creation; cache_geometry_bound_bytes() is exactly what is reserved.
 *
 * Positions: keys are stored rotated by their stream index.  Window tokens
 * are a contiguous run of the stream, so query-to-window distances are the
 * same in cache ranks and stream indices; the query is rotated once by its
 * stream index for the window and once for the sinks (by its cache rank in
 * rope_positions=cache, by its stream index in =original).  Sinks are the
 * first tokens of the stream, so their stream index is their rank.  Storing
 * rotated keys makes attention a plain dot product, where rotating each
 * resident key at attention time would be several times slower.
 *
 * Between the hot and the quantized tier, tokens wait in full precision in a
 * staging ring of G-1 slots until a whole group can be quantized; groups are
 * only ever built from complete runs of G tokens, so revising (dropping the
 * newest tokens) is exact as long as it only drops hot or staged tokens.
 *
 * Attention itself is in attend.c.  This module does not know about models,
 * sessions or memory budgets (the scheduler reserves cache_geometry_bound_bytes). */
#include "cache/sinkcache.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/kvquant.h"
#include "cache/rope.h"
#include "cache/sinkcache_impl.h"
#include "util/cpu.h"
#include "util/errbuf.h"
#include "util/pages.h"
#include "util/tuning.h"

/* Carves a layer's front (sinks, hot, staging: fp32 parameters, then dtype
 * rows, then codes, so every array is aligned to its element) and back
 * (groups: parameters, then codes).  A shared cache's front has no sink
 * rows (they come last, so nothing else moves): kv_layer_init points them
 * into the prefix. */
static void kv_layer_carve(struct sinkcache *c, const struct cache_layout *lay,
                           struct kv_layer *L)
{
	const struct cache_tiers *lo = &lay->t;
	size_t n_kv = (size_t)c->g.n_kv_heads, d = (size_t)c->g.head_dim;
	size_t g = (size_t)lo->group, ng = (size_t)lo->n_groups;
	size_t s = c->prefix ? 0 : (size_t)lo->sink;
	size_t sink_row = lo->sink_quant ? lo->code_row : lo->fp_row;
	size_t a = (size_t)lo->anchor;
	float *fp = (float *)L->front;
	if (a > 0) {
		L->anc.pos = (uint64_t *)L->front;
		fp = (float *)(L->anc.pos + a);
		L->a_ko = fp, fp += n_kv * a * d;
		L->anc.score = fp, fp += a;
		L->anc.w_score = fp, fp += lo->window;
		L->anc.below = (int32_t *)fp;
		fp = (float *)(L->anc.below + a);
	}
	if (lo->sink_quant) {
		L->sink_kp = fp, fp += n_kv * s * 2;
		L->sink_vp = fp, fp += n_kv * s * 2;
	}
	unsigned char *p = (unsigned char *)fp;
	L->a_k = p, p += n_kv * a * lo->fp_row;
	L->a_v = p, p += n_kv * a * lo->fp_row;
	L->hot_k = p, p += n_kv * (size_t)lo->hot * lo->fp_row;
	L->hot_v = p, p += n_kv * (size_t)lo->hot * lo->fp_row;
	L->st_k = p, p += n_kv * (size_t)lo->stage * lo->fp_row;
	L->st_v = p, p += n_kv * (size_t)lo->stage * lo->fp_row;
	L->sink_k = p, p += n_kv * s * sink_row;
	L->sink_v = p, p += n_kv * s * sink_row;
	if (!L->mem)
		return;
	fp = (float *)L->mem;
	L->gkp = fp, fp += ng * n_kv * 2 * d;
	L->gvp = fp, fp += ng * n_kv * g * 2;
	p = (unsigned char *)fp;
	L->gk = p, p += ng * n_kv * g * lo->code_row;
	L->gv = p, p += ng * n_kv * g * lo->code_row;
}

static void kv_layer_clear(struct sinkcache *c, struct kv_layer *L)
{
	memset(&L->t, 0, sizeof(L->t));
	tier_anchors_reset(&L->caps, &L->anc);
	L->hot = (struct kv_ring){0, L->caps.hot};
	L->stage = (struct kv_ring){0, L->caps.group > 0 ? L->caps.group - 1 : 0};
	L->groups.head = 0;
	for (int i = 0; i < c->g.rope_dim; i++) {
		L->cs_win[i] = i % 2 ? 0.0 : 1.0;
		L->cs_sink[i] = i % 2 ? 0.0 : 1.0;
	}
}

/* The blocks are mapped on their own rather than taken from the heap: fresh
 * pages read as zero without being written, so a new session costs no
 * memset and touches (commits) only the pages its tokens reach, and the
 * pages go back to the system when the session ends; heap blocks this large
 * come back zeroed by calloc, a stall of every stream's tick.
 *
 * Every decode step reads the front of every layer of every session, so on
 * small pages attention waits on address translation: the fronts of all
 * layers are one block, on huge pages when it spans 2 MiB to
 * SINKCACHE_HUGE_FRONT_MAX.  A session's first token then commits about the
 * whole front at once, which its tokens fill soon anyway; larger fronts (no
 * quantization: the whole window is hot) keep small pages and commit only
 * what the tokens reach.  Measurements: tests/bench/results/code-notes.md. */
#define SINKCACHE_HUGE_FRONT_MAX TUNING_CACHE_HUGE_FRONT_MAX /* util/tuning.h */

static bool front_on_huge_pages(size_t bytes)
{
	return bytes >= PAGES_HUGE_BYTES && bytes <= SINKCACHE_HUGE_FRONT_MAX;
}

/* A layer's quantized groups (four runs in its back block: key codes, value
 * codes and their parameters, each filled in token order) go on huge pages
 * when the block spans 2 MiB or more: a long stream's attention reads them
 * all, and on small pages waits on address translation.  The first group
 * then commits about the whole block (a 2 MiB page per run, about its share
 * of the session's bound, which admission reserved anyway); a session of
 * fewer tokens than the hot tier plus one group commits none of it. */
static bool back_on_huge_pages(size_t bytes)
{
	return bytes >= PAGES_HUGE_BYTES;
}

/* Pages of the rows a token writes are made resident a chunk at a time
 * (pages_populate) instead of one page fault each: each token's rows of
 * every head land on different pages.  The chunk (util/tuning.h) keeps what
 * a short session commits ahead small (at most one chunk per head row
 * run). */
#define POPULATE_CHUNK TUNING_CACHE_POPULATE_CHUNK

/* Words of the bitmap of a block of bytes. */
static size_t populate_words(size_t bytes)
{
	return (bytes / POPULATE_CHUNK + 64) / 64;
}

/* The map of a block of bytes at base (pages_map): it spans whole pages.
 * done is NULL when out of memory. */
static struct populate_map populate_map_of(unsigned char *base, size_t bytes)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t whole = (bytes + page - 1) & ~(page - 1);
	return (struct populate_map){base, whole, calloc(populate_words(whole), sizeof(uint64_t))};
}

/* Before writes to [p, p + n) inside m's block. */
void kv_populate_range(struct populate_map *m, const void *p, size_t n)
{
	size_t off = (size_t)((const unsigned char *)p - m->base), end = m->bytes;
	for (size_t ch = off / POPULATE_CHUNK; ch <= (off + n - 1) / POPULATE_CHUNK; ch++) {
		uint64_t bit = (uint64_t)1 << (ch % 64);
		if (m->done[ch / 64] & bit)
			continue;
		m->done[ch / 64] |= bit;
		size_t start = ch * POPULATE_CHUNK;
		pages_populate(m->base + start,
		               end - start < POPULATE_CHUNK ? end - start : POPULATE_CHUNK);
	}
}

/* Before a write of one front row (fp_row bytes) at row. */
static void kv_front_populate(struct sinkcache *c, const void *row)
{
	kv_populate_range(&c->front_pop, row, c->fp_row);
}

/* The caps of every tier at its largest over the layers (what a trace of
 * any layer fits in). */
static void caps_widen(struct tier_caps *m, const struct tier_caps *c)
{
	m->sink = c->sink > m->sink ? c->sink : m->sink;
	m->window = c->window > m->window ? c->window : m->window;
	m->hot = c->hot > m->hot ? c->hot : m->hot;
	m->group = c->group > m->group ? c->group : m->group;
	m->anchor = c->anchor > m->anchor ? c->anchor : m->anchor;
	m->full = m->full || c->full;
	m->anchor_promote = c->anchor_promote;
	m->anchor_demote_steps = c->anchor_demote_steps;
}

/* The RoPE tables: the global layers', and the sliding layers' when some
 * layer slides (their base and scale differ). */
static int cache_rope_init(struct sinkcache *c, int half)
{
	for (int r = 0; r < 2; r++) {
		c->freq_hi[r] = calloc((size_t)half, sizeof(double));
		c->freq_lo[r] = calloc((size_t)half, sizeof(double));
		c->cs_memo[r][0] = calloc((size_t)half * 2, sizeof(double));
		c->cs_memo[r][1] = calloc((size_t)half * 2, sizeof(double));
		if (!c->freq_hi[r] || !c->freq_lo[r] || !c->cs_memo[r][0] || !c->cs_memo[r][1])
			return -ENOMEM;
	}
	for (int l = c->g.n_layers - 1; l >= 0; l--) {
		/* the last table set is layer 0's kind: a global layer's, or the
		 * sliding one when every layer slides */
		int r = c->g.layer[l].own && c->g.layer[l].swa ? 1 : 0;
		cache_geometry_layer_rope_freqs(&c->g, l, c->freq_hi[r], c->freq_lo[r]);
	}
	return 0;
}

/* Layer l's layout in this cache: a shared cache owns no sink rows, so its
 * front is smaller by them (and may then land on huge pages as a small
 * front does). */
static void kv_layout(const struct sinkcache *c, int l, struct cache_layout *lo)
{
	cache_geometry_layer_layout(&c->g, l, lo);
	if (!c->prefix)
		return;
	size_t sinks = (size_t)lo->t.sink * lo->sink_tok;
	lo->front_bytes -= sinks;
	lo->layer_bytes -= sinks;
	lo->front_stride = (lo->front_bytes + 63) & ~(size_t)63;
}

/* Layer l's caps, storage and RoPE table, its front at `front`. */
static int kv_layer_init(struct sinkcache *c, int l, unsigned char *front, int half)
{
	struct cache_layout lo;
	struct kv_layer *L = &c->layers[l];
	kv_layout(c, l, &lo);
	tier_caps_of(&c->g, &lo.t, &L->caps);
	caps_widen(&c->caps_max, &L->caps);
	L->sink_quant = lo.t.sink_quant;
	L->back_bytes = lo.back_bytes;
	L->sink_tok = lo.sink_tok;
	L->fp_tok = lo.fp_tok;
	L->group_bytes = lo.group_bytes;
	L->rope = c->g.layer[l].own && c->g.layer[l].swa ? 1 : 0;
	L->front = front;
	L->mem =
	    lo.back_bytes > 0 ? pages_map(lo.back_bytes, back_on_huge_pages(lo.back_bytes)) : NULL;
	if (L->mem)
		L->mem_pop = populate_map_of(L->mem, lo.back_bytes);
	L->cs_win = calloc((size_t)half * 2, sizeof(double));
	L->cs_sink = calloc((size_t)half * 2, sizeof(double));
	if ((lo.back_bytes > 0 && (!L->mem || !L->mem_pop.done)) || !L->cs_win || !L->cs_sink)
		return -ENOMEM;
	kv_layer_carve(c, &lo, L);
	if (c->prefix) {
		L->sink_k = kv_prefix_keys(c->prefix, l);
		L->sink_v = kv_prefix_values(c->prefix, l);
	}
	L->groups.cap = lo.t.n_groups;
	kv_layer_clear(c, L);
	return 0;
}

/* A cache of geometry g; prefix: the shared sink tier it reads (NULL: it
 * owns its sinks). */
static int cache_make(const struct cache_geometry *g, const struct sinkcache_prefix *prefix,
                      struct sinkcache **out, char *err, size_t err_len)
{
	struct cache_layout lo;
	int rc = cache_geometry_check(g, err, err_len);
	*out = NULL;
	if (rc)
		return rc;
	/* each layer keeps its own tiers (a model sliding-window layer beside
	 * global ones); the rows' widths are the same in every layer */
	cache_geometry_layer_layout(g, 0, &lo);
	struct sinkcache *c = calloc(1, sizeof(*c));
	if (!c)
		return err_set(err, err_len, -ENOMEM, "sink cache: out of memory");
	c->g = *g;
	c->prefix = prefix;
	c->fp_row = lo.t.fp_row;
	c->code_row = lo.t.code_row;
	c->load_ahead_max = cpu_l2_cache_bytes() / 4 * 3;
	c->bound_bytes =
	    cache_geometry_bound_bytes(g) - (prefix ? cache_geometry_sink_bytes(g) : 0);
	while (c->ref_layer + 1 < g->n_layers && g->layer[c->ref_layer].own &&
	       g->layer[c->ref_layer].swa)
		c->ref_layer++;
	int half = g->rope_dim / 2 > 0 ? g->rope_dim / 2 : 1, most_group = 1;
	for (int l = 0; l < g->n_layers; l++) {
		kv_layout(c, l, &lo);
		c->front_bytes += lo.front_stride;
		most_group = lo.t.group > most_group ? lo.t.group : most_group;
	}
	c->layers = calloc((size_t)g->n_layers, sizeof(*c->layers));
	c->flush_rows = calloc((size_t)most_group * (size_t)g->head_dim, sizeof(float));
	if (!c->layers || !c->flush_rows || cache_rope_init(c, half))
		goto oom;
	c->front = pages_map(c->front_bytes > 0 ? c->front_bytes : 1,
	                     front_on_huge_pages(c->front_bytes));
	c->front_pop = populate_map_of(c->front, c->front_bytes);
	if (!c->front || !c->front_pop.done)
		goto oom;
	size_t front_at = 0;
	for (int l = 0; l < g->n_layers; l++) {
		kv_layout(c, l, &lo);
		if (kv_layer_init(c, l, c->front + front_at, half))
			goto oom;
		front_at += lo.front_stride;
	}
	*out = c;
	return 0;
oom:
	sinkcache_free(c);
	return err_set(err, err_len, -ENOMEM, "sink cache: out of memory for %zu bytes per layer",
	               lo.layer_bytes);
}

int sinkcache_new(const struct cache_geometry *g, struct sinkcache **out, char *err,
                  size_t err_len)
{
	return cache_make(g, NULL, out, err, err_len);
}

/* A shared cache at rest: it holds the S shared tokens, as a cache that
 * appended them would (counts, and the angles of its newest token). */
static void kv_hold_shared(struct sinkcache *c)
{
	for (int l = 0; l < c->g.n_layers; l++) {
		struct kv_layer *L = &c->layers[l];
		L->t.n_seen = (uint64_t)L->caps.sink;
		L->t.n_sink = L->caps.sink;
		kv_layer_set_query_pos(c, L);
	}
}

int sinkcache_new_shared(const struct sinkcache_prefix *p, struct sinkcache **out, char *err,
                         size_t err_len)
{
	int rc = cache_make(&p->g, p, out, err, err_len);
	if (rc)
		return rc;
	kv_hold_shared(*out);
	return 0;
}

const struct sinkcache_prefix *sinkcache_shared_prefix(const struct sinkcache *c)
{
	return c->prefix;
}

void sinkcache_free(struct sinkcache *c)
{
	if (!c)
		return;
	for (int l = 0; c->layers && l < c->g.n_layers; l++) {
		pages_unmap(c->layers[l].mem, c->layers[l].back_bytes);
		free(c->layers[l].mem_pop.done);
		free(c->layers[l].cs_win);
		free(c->layers[l].cs_sink);
	}
	free(c->layers);
	free(c->sink_logits);
	pages_unmap(c->front, c->front_bytes > 0 ? c->front_bytes : 1);
	free(c->front_pop.done);
	for (int r = 0; r < 2; r++) {
		free(c->freq_hi[r]);
		free(c->freq_lo[r]);
		free(c->cs_memo[r][0]);
		free(c->cs_memo[r][1]);
	}
	free(c->flush_rows);
	tier_trace_free(c->trace);
	free(c);
}

const struct cache_geometry *sinkcache_geometry(const struct sinkcache *c)
{
	return &c->g;
}

bool sinkcache_can_append(const struct sinkcache *c, size_t n_tokens)
{
	for (int l = 0; l < c->g.n_layers; l++)
		if (!tier_can_append(&c->layers[l].caps, &c->layers[l].t, n_tokens))
			return false;
	return true;
}

/* ---- tiers: the policy's steps carried out on the rings ----------------- */

static void kv_ring_advance(struct kv_ring *r)
{
	r->head = r->head + 1 == r->cap ? 0 : r->head + 1;
}

static unsigned char *kv_row(unsigned char *base, size_t row_bytes, int cap, int head, int slot)
{
	return base + ((size_t)head * (size_t)cap + (size_t)slot) * row_bytes;
}

/* Quantizes the G-1 staged tokens plus the oldest hot token into the newest
 * group (the policy counted it already). */
static void kv_layer_flush_group(struct sinkcache *c, struct kv_layer *L, int hot_slot)
{
	int n_kv = c->g.n_kv_heads, d = c->g.head_dim, gs = L->caps.group, bits = c->g.quant_bits;
	int slot = kv_ring_slot(&L->groups, L->t.n_groups - 1);
	const float *rowp[SINKCACHE_MAX_GROUP];
	float vrow[SINKCACHE_MAX_HEAD_DIM];
	/* the slot's four runs, made resident first: a page fault per fresh
	 * page would cost more than the quantization itself */
	size_t nk = (size_t)n_kv, at = (size_t)slot;
	kv_populate_range(&L->mem_pop, L->gkp + at * nk * 2 * d, nk * 2 * d * sizeof(float));
	kv_populate_range(&L->mem_pop, L->gvp + at * nk * gs * 2, nk * gs * 2 * sizeof(float));
	kv_populate_range(&L->mem_pop, L->gk + at * nk * gs * c->code_row, nk * gs * c->code_row);
	kv_populate_range(&L->mem_pop, L->gv + at * nk * gs * c->code_row, nk * gs * c->code_row);
	for (int h = 0; h < n_kv; h++) {
		size_t gh = (size_t)slot * (size_t)n_kv + (size_t)h;
		for (int r = 0; r < gs; r++) {
			bool hot = r == gs - 1;
			int s = hot ? hot_slot : kv_ring_slot(&L->stage, r);
			int cap = hot ? L->hot.cap : L->stage.cap;
			float *kr = c->flush_rows + (size_t)r * (size_t)d;
			kv_row_load(c->g.dtype,
			            kv_row(hot ? L->hot_k : L->st_k, c->fp_row, cap, h, s), kr, d);
			rowp[r] = kr;
			kv_row_load(c->g.dtype,
			            kv_row(hot ? L->hot_v : L->st_v, c->fp_row, cap, h, s), vrow,
			            d);
			float *vp = L->gvp + (gh * (size_t)gs + (size_t)r) * 2;
			kvq_quant_row(vrow, d, bits,
			              L->gv + (gh * (size_t)gs + (size_t)r) * c->code_row, &vp[0],
			              &vp[1]);
		}
		float *kp = L->gkp + gh * 2 * (size_t)d;
		kvq_quant_channels(rowp, gs, d, bits, L->gk + gh * (size_t)gs * c->code_row, kp,
		                   kp + d);
	}
	L->stage.head = 0;
}

/* Moves the oldest hot token to the end of staging (or, completing a group,
 * quantizes); the policy counted the move. */
static void kv_layer_age_hot(struct sinkcache *c, struct kv_layer *L, enum tier_age age)
{
	int hs = L->hot.head;
	if (age == TIER_AGE_FLUSH) {
		kv_layer_flush_group(c, L, hs);
	} else {
		int ss = kv_ring_slot(&L->stage, L->t.n_stage - 1);
		for (int h = 0; h < c->g.n_kv_heads; h++) {
			unsigned char *dk = kv_row(L->st_k, c->fp_row, L->stage.cap, h, ss);
			unsigned char *dv = kv_row(L->st_v, c->fp_row, L->stage.cap, h, ss);
			kv_front_populate(c, dk);
			kv_front_populate(c, dv);
			memcpy(dk, kv_row(L->hot_k, c->fp_row, L->hot.cap, h, hs), c->fp_row);
			memcpy(dv, kv_row(L->hot_v, c->fp_row, L->hot.cap, h, hs), c->fp_row);
		}
	}
	kv_ring_advance(&L->hot);
}

/* Stores head h of a sink token in sink slot s; kh is rotated. */
static void kv_layer_store_sink(struct sinkcache *c, struct kv_layer *L, int h, int s,
                                const float *kh, const float *vh)
{
	int d = c->g.head_dim;
	if (L->sink_quant) {
		size_t i = (size_t)h * (size_t)L->caps.sink + (size_t)s;
		kvq_quant_row(kh, d, c->g.quant_bits, L->sink_k + i * c->code_row,
		              &L->sink_kp[2 * i], &L->sink_kp[2 * i + 1]);
		kvq_quant_row(vh, d, c->g.quant_bits, L->sink_v + i * c->code_row,
		              &L->sink_vp[2 * i], &L->sink_vp[2 * i + 1]);
	} else {
		kv_row_store(c->g.dtype, kv_row(L->sink_k, c->fp_row, L->caps.sink, h, s), kh, d);
		kv_row_store(c->g.dtype, kv_row(L->sink_v, c->fp_row, L->caps.sink, h, s), vh, d);
	}
}

/* Carries out a window token's eviction and ageing; returns its hot slot. */
static int kv_layer_window_slot(struct sinkcache *c, struct kv_layer *L,
                                const struct tier_step *st)
{
	switch (st->evict) {
	case TIER_EVICT_GROUP:
		kv_ring_advance(&L->groups);
		break;
	case TIER_EVICT_STAGED:
		kv_ring_advance(&L->stage);
		break;
	case TIER_EVICT_HOT:
		kv_ring_advance(&L->hot);
		break;
	case TIER_EVICT_GROUP_ROW: /* the oldest group's dropped rows are counted */
	case TIER_EVICT_NONE:
		break;
	}
	if (st->age != TIER_AGE_NONE)
		kv_layer_age_hot(c, L, st->age);
	return kv_ring_slot(&L->hot, st->hot_index);
}

/* rope_cos_sin(pos) of layer L's RoPE table into cs, computed once for all
 * layers of that table (64 sincos per call for a 64-dim head, three calls
 * per token and layer before). */
static void cache_cos_sin(struct sinkcache *c, const struct kv_layer *L, uint64_t pos, double *cs)
{
	size_t bytes = (size_t)c->g.rope_dim * sizeof(double);
	int r = L->rope;
	for (int i = 0; i < 2; i++)
		if (c->cs_memo_valid[r][i] && c->cs_memo_pos[r][i] == pos) {
			memcpy(cs, c->cs_memo[r][i], bytes);
			return;
		}
	int slot = c->cs_memo_next[r];
	c->cs_memo_next[r] = 1 - slot;
	rope_cos_sin(c->freq_hi[r], c->freq_lo[r], c->g.rope_dim, pos, c->cs_memo[r][slot]);
	c->cs_memo_pos[r][slot] = pos;
	c->cs_memo_valid[r][slot] = true;
	memcpy(cs, c->cs_memo[r][slot], bytes);
}

/* Angles for attending with the newest token (stream index n_seen - 1). */
void kv_layer_set_query_pos(struct sinkcache *c, struct kv_layer *L)
{
	if (L->t.n_seen == 0)
		return;
	cache_cos_sin(c, L, L->t.n_seen - 1, L->cs_win);
	cache_cos_sin(c, L, tier_sink_query_pos(&c->g, &L->caps, &L->t, L->anc.n), L->cs_sink);
}

/* Cache prefetch of the key and value rows of head h in slot `slot` of a
 * full-precision ring (k, v its bases), to be written or read. */
static void prefetch_kv_row(const struct sinkcache *c, const unsigned char *k,
                            const unsigned char *v, int cap, int h, int slot, bool write)
{
	const unsigned char *rows[2] = {kv_row((unsigned char *)k, c->fp_row, cap, h, slot),
	                                kv_row((unsigned char *)v, c->fp_row, cap, h, slot)};
	for (int j = 0; j < 2; j++)
		for (size_t o = 0; o < c->fp_row; o += 64) {
			if (write)
				__builtin_prefetch(rows[j] + o, 1, 3);
			else
				__builtin_prefetch(rows[j] + o, 0, 3);
		}
}

/* It reads the counters of a session another thread may be appending to
 * right now: only to pick cache lines to prefetch, where a stale value
 * prefetches a line for nothing; hidden from ThreadSanitizer for that. */
__attribute__((no_sanitize_thread)) void sinkcache_prefetch_append(const struct sinkcache *c,
                                                                   int layer)
{
	if (layer < 0 || layer >= c->g.n_layers)
		return;
	const struct kv_layer *L = &c->layers[layer];
	if (L->t.n_sink < L->caps.sink || L->hot.cap == 0)
		return;
	/* the slot the next window token takes: after the ageing of a full
	 * ring it is the old head, which is where head + n points then too */
	int slot = kv_ring_slot(&L->hot, L->t.n_hot);
	/* A full hot ring ages its oldest token first: into the next staging
	 * slot, or, completing a group, with all staged rows into the quantizer.
	 * Those rows are as cold as the new one. */
	bool ages = L->t.n_hot == L->hot.cap && L->caps.group > 0;
	bool flushes = ages && L->t.n_stage == L->caps.group - 1;
	int stage_slot = ages && !flushes ? kv_ring_slot(&L->stage, L->t.n_stage) : -1;
	for (int h = 0; h < c->g.n_kv_heads; h++) {
		prefetch_kv_row(c, L->hot_k, L->hot_v, L->hot.cap, h, slot, true);
		if (stage_slot >= 0)
			prefetch_kv_row(c, L->st_k, L->st_v, L->stage.cap, h, stage_slot, true);
		for (int r = 0; flushes && r < L->t.n_stage; r++)
			prefetch_kv_row(c, L->st_k, L->st_v, L->stage.cap, h,
			                kv_ring_slot(&L->stage, r), false);
	}
}

/* ---- anchors: window tokens kept for the attention they receive --------- */

/* Key and value of kv head h of the oldest window token (before the step
 * that evicts it), as floats; keys rotated by its stream index. */
static void kv_layer_oldest_row(struct sinkcache *c, struct kv_layer *L, int h, float *k, float *v)
{
	int d = c->g.head_dim;
	if (L->t.n_groups > 0) {
		int gs = L->caps.group, bits = c->g.quant_bits, r = L->t.grp_dropped;
		size_t gh = (size_t)kv_ring_slot(&L->groups, 0) * (size_t)c->g.n_kv_heads + (size_t)h;
		const float *kp = L->gkp + gh * 2 * (size_t)d; /* per channel: scale, then min */
		const uint8_t *kc = L->gk + (gh * (size_t)gs + (size_t)r) * c->code_row;
		for (int j = 0; j < d; j++)
			k[j] = kp[j] * (float)kvq_code_at(kc, j, bits) + kp[d + j];
		const float *vp = L->gvp + (gh * (size_t)gs + (size_t)r) * 2;
		kvq_dequant_row(L->gv + (gh * (size_t)gs + (size_t)r) * c->code_row, d, bits, vp[0],
		                vp[1], v);
	} else if (L->t.n_stage > 0) {
		int s = L->stage.head;
		kv_row_load(c->g.dtype, kv_row(L->st_k, c->fp_row, L->stage.cap, h, s), k, d);
		kv_row_load(c->g.dtype, kv_row(L->st_v, c->fp_row, L->stage.cap, h, s), v, d);
	} else {
		int s = L->hot.head;
		kv_row_load(c->g.dtype, kv_row(L->hot_k, c->fp_row, L->hot.cap, h, s), k, d);
		kv_row_load(c->g.dtype, kv_row(L->hot_v, c->fp_row, L->hot.cap, h, s), v, d);
	}
}

/* Anchor j's attention keys from its stream-index keys: rotated back to its
 * rank n_sink + j (rope_positions cache), where the sink query sees them;
 * from the exact fp32 copy each time, so that rank changes never drift. */
static void kv_layer_anchor_rekey(struct sinkcache *c, struct kv_layer *L, int j)
{
	int d = c->g.head_dim, a = L->caps.anchor;
	uint64_t rank = (uint64_t)L->t.n_sink + (uint64_t)j;
	double cs[SINKCACHE_MAX_HEAD_DIM];
	bool rotate = c->g.rope_positions == ROPE_POSITIONS_CACHE && L->anc.pos[j] != rank;
	if (rotate) {
		rope_cos_sin(c->freq_hi[L->rope], c->freq_lo[L->rope], c->g.rope_dim,
		             L->anc.pos[j] - rank, cs);
		for (int i = 1; i < c->g.rope_dim; i += 2)
			cs[i] = -cs[i]; /* by -(pos - rank) */
	}
	float krow[SINKCACHE_MAX_HEAD_DIM];
	for (int h = 0; h < c->g.n_kv_heads; h++) {
		size_t at = (size_t)h * (size_t)a + (size_t)j;
		memcpy(krow, L->a_ko + at * (size_t)d, (size_t)d * sizeof(float));
		if (rotate)
			rope_apply(krow, cs, c->g.rope_dim, c->g.rope_neox);
		kv_row_store(c->g.dtype, kv_row(L->a_k, c->fp_row, a, h, j), krow, d);
	}
}

/* Carries out a change of the anchor slots (tierpolicy.h: src from first
 * on): rows move down to their new slots, the leaving window token's rows
 * (before the step that evicts it) fill its slot, and every slot from first
 * is rotated to its new rank. */
static void kv_layer_anchors_moved(struct sinkcache *c, struct kv_layer *L, int first,
                                   const int *src)
{
	int a = L->caps.anchor, d = c->g.head_dim;
	for (int i = first; i < L->anc.n; i++) {
		for (int h = 0; h < c->g.n_kv_heads; h++) {
			size_t at = (size_t)h * (size_t)a + (size_t)i;
			if (src[i] < 0) {
				float vrow[SINKCACHE_MAX_HEAD_DIM];
				kv_layer_oldest_row(c, L, h, L->a_ko + at * (size_t)d, vrow);
				kv_row_store(c->g.dtype, kv_row(L->a_v, c->fp_row, a, h, i), vrow, d);
			} else if (src[i] != i) {
				size_t from = (size_t)h * (size_t)a + (size_t)src[i];
				memcpy(L->a_ko + at * (size_t)d, L->a_ko + from * (size_t)d,
				       (size_t)d * sizeof(float));
				memcpy(kv_row(L->a_v, c->fp_row, a, h, i),
				       kv_row(L->a_v, c->fp_row, a, h, src[i]), c->fp_row);
			}
		}
		kv_layer_anchor_rekey(c, L, i);
	}
}

void sinkcache_set_softcap(struct sinkcache *c, float cap)
{
	c->softcap = cap > 0.0f ? cap : 0.0f;
}

int sinkcache_set_learned_sinks(struct sinkcache *c, int layer, const float *logits, int n_heads,
                                char *err, size_t err_len)
{
	if (layer < 0 || layer >= c->g.n_layers)
		return err_set(err, err_len, -EINVAL,
		               "learned sinks: layer %d of a cache of %d layers", layer,
		               c->g.n_layers);
	if (n_heads <= 0 || n_heads % c->g.n_kv_heads ||
	    (c->sink_logits && n_heads != c->sink_logit_heads))
		return err_set(err, err_len, -EINVAL,
		               "learned sinks: %d heads for layer %d; want a multiple of the %d kv "
		               "heads%s",
		               n_heads, layer, c->g.n_kv_heads,
		               c->sink_logits ? ", the same count for every layer" : "");
	if (!c->sink_logits) {
		/* one copy for all layers: a cache may outlive the model's arrays */
		c->sink_logits = malloc((size_t)c->g.n_layers * (size_t)n_heads * sizeof(float));
		if (!c->sink_logits)
			return err_set(err, err_len, -ENOMEM, "learned sinks: out of memory");
		c->sink_logit_heads = n_heads;
	}
	float *dst = c->sink_logits + (size_t)layer * (size_t)n_heads;
	if (logits)
		memcpy(dst, logits, (size_t)n_heads * sizeof(float));
	c->layers[layer].sink_logits = logits ? dst : NULL;
	return 0;
}

bool sinkcache_has_learned_sinks(const struct sinkcache *c, int layer)
{
	return layer >= 0 && layer < c->g.n_layers && c->layers[layer].sink_logits;
}

bool sinkcache_tracks_attention(const struct sinkcache *c)
{
	return c->caps_max.anchor > 0 || c->trace;
}

void sinkcache_observe(struct sinkcache *c, int layer, const float *key_weight,
                       const float *learned_weight, int n_heads)
{
	kv_trace_observe(c, layer, key_weight, learned_weight, n_heads);
	if (!key_weight || layer < 0 || layer >= c->g.n_layers)
		return;
	struct kv_layer *L = &c->layers[layer];
	if (L->caps.anchor <= 0)
		return;
	size_t ld = (size_t)(L->caps.sink + L->caps.anchor + L->caps.window);
	int src[SINKCACHE_MAX_ANCHORS], before = L->anc.n;
	int first = tier_anchors_observe(&L->caps, &L->t, &L->anc, key_weight, n_heads, ld, src);
	kv_layer_anchors_moved(c, L, first, src);
	if (L->anc.n != before)
		kv_layer_set_query_pos(c, L);
}

int sinkcache_append(struct sinkcache *c, int layer, const float *k, const float *v, char *err,
                     size_t err_len)
{
	if (layer < 0 || layer >= c->g.n_layers)
		return err_set(err, err_len, -EINVAL, "sink cache: layer %d out of range (0..%d)",
		               layer, c->g.n_layers - 1);
	struct kv_layer *L = &c->layers[layer];
	if (!tier_can_append(&L->caps, &L->t, 1))
		return err_set(err, err_len, -ENOSPC,
		               "sink cache: full: max_context_length %d tokens reached",
		               c->g.max_context_length);
	int n_kv = c->g.n_kv_heads, d = c->g.head_dim;
	if (L->caps.anchor > 0) {
		int src[SINKCACHE_MAX_ANCHORS];
		kv_layer_anchors_moved(c, L, tier_anchors_leaving(&L->caps, &L->t, &L->anc, src),
		                       src);
	}
	struct tier_step st;
	tier_step(&L->caps, &L->t, &st);
	tier_anchors_entered(&L->caps, &L->anc, &st);
	bool sink = st.to_sink;
	int slot = sink ? st.sink_slot : kv_layer_window_slot(c, L, &st);
	float krot[SINKCACHE_MAX_HEAD_DIM];
	cache_cos_sin(c, L, st.key_pos, L->cs_win);
	for (int h = 0; h < n_kv; h++) {
		const float *vh = v + (size_t)h * d;
		memcpy(krot, k + (size_t)h * d, (size_t)d * sizeof(float));
		rope_apply(krot, L->cs_win, c->g.rope_dim, c->g.rope_neox);
		if (sink) {
			kv_layer_store_sink(c, L, h, slot, krot, vh);
		} else {
			unsigned char *dk = kv_row(L->hot_k, c->fp_row, L->hot.cap, h, slot);
			unsigned char *dv = kv_row(L->hot_v, c->fp_row, L->hot.cap, h, slot);
			kv_front_populate(c, dk);
			kv_front_populate(c, dv);
			kv_row_store(c->g.dtype, dk, krot, d);
			kv_row_store(c->g.dtype, dv, vh, d);
		}
	}
	kv_layer_set_query_pos(c, L);
	return 0;
}

int sinkcache_revise(struct sinkcache *c, size_t n_tokens, char *err, size_t err_len)
{
	struct kv_layer *L0 = &c->layers[0];
	for (int l = 1; l < c->g.n_layers; l++)
		if (c->layers[l].t.n_seen != L0->t.n_seen)
			return err_set(err, err_len, -EINVAL,
			               "sink cache: cannot revise between layers (layer %d at %llu "
			               "tokens, layer 0 at %llu)",
			               l, (unsigned long long)c->layers[l].t.n_seen,
			               (unsigned long long)L0->t.n_seen);
	/* every layer must hold the tokens in full precision (a model
	 * sliding-window layer keeps fewer than a global one may) */
	for (int l = 0; l < c->g.n_layers; l++) {
		struct tier_counts probe = c->layers[l].t;
		int rc = tier_revise(&c->layers[l].caps, &probe, n_tokens, err, err_len);
		if (rc)
			return rc;
	}
	for (int l = 0; l < c->g.n_layers; l++) {
		struct kv_layer *L = &c->layers[l];
		tier_revise(&L->caps, &L->t, n_tokens, NULL, 0);
		kv_layer_set_query_pos(c, L);
	}
	kv_trace_revised(c);
	return 0;
}

void sinkcache_reset(struct sinkcache *c)
{
	for (int l = 0; l < c->g.n_layers; l++)
		kv_layer_clear(c, &c->layers[l]);
	if (c->prefix) /* back to the shared tokens; p is never written */
		kv_hold_shared(c);
	kv_trace_clear(c);
}

size_t sinkcache_reset_trim(struct sinkcache *c)
{
	sinkcache_reset(c);
	sinkcache_trace_enable(c, false, NULL, 0); /* the next stream did not ask */
	for (int l = 0; l < c->g.n_layers; l++) {
		struct kv_layer *L = &c->layers[l];
		if (!L->mem)
			continue;
		pages_discard(L->mem, L->back_bytes);
		memset(L->mem_pop.done, 0, populate_words(L->mem_pop.bytes) * sizeof(uint64_t));
	}
	size_t chunks = 0, words = populate_words(c->front_pop.bytes);
	for (size_t i = 0; i < words; i++)
		chunks += (size_t)__builtin_popcountll(c->front_pop.done[i]);
	size_t held = chunks * POPULATE_CHUNK;
	return held < c->front_pop.bytes ? held : c->front_pop.bytes;
}

int sinkcache_debug_set_stream_index(struct sinkcache *c, uint64_t index, char *err, size_t err_len)
{
	for (int l = 0; l < c->g.n_layers; l++) {
		struct kv_layer *L = &c->layers[l];
		if (kv_layer_window(c, L) != 0 || L->t.n_sink != L->caps.sink ||
		    index < L->t.n_seen)
			return err_set(err, err_len, -EINVAL,
			               "sink cache: stream index can only jump forward with the "
			               "sinks full and the window empty");
	}
	for (int l = 0; l < c->g.n_layers; l++)
		c->layers[l].t.n_seen = index;
	return 0;
}

int sinkcache_resident_tokens(const struct sinkcache *c)
{
	const struct kv_layer *L0 = &c->layers[c->ref_layer];
	return L0->t.n_sink + L0->anc.n + kv_layer_window(c, L0);
}

/* The counts are those of the first global layer (each global layer holds
 * the same); the bytes are every layer's own. */
void sinkcache_get_stats(const struct sinkcache *c, struct sinkcache_stats *out)
{
	const struct kv_layer *L0 = &c->layers[c->ref_layer];
	memset(out, 0, sizeof(*out));
	out->n_seen = L0->t.n_seen;
	out->n_sink = L0->t.n_sink;
	out->n_hot = L0->t.n_hot;
	out->n_compressed = kv_layer_window(c, L0) - L0->t.n_hot;
	out->n_anchor = L0->anc.n;
	out->n_resident = sinkcache_resident_tokens(c);
	out->evicted_compressed = L0->t.evicted;
	out->moved_to_compressed = L0->t.moved;
	out->bytes_bound = c->bound_bytes;
	if (c->prefix) {
		out->n_shared = L0->t.n_sink;
		out->bytes_shared = c->prefix->bytes;
	}
	for (int l = 0; l < c->g.n_layers; l++) {
		const struct kv_layer *L = &c->layers[l];
		int own_sinks = c->prefix ? 0 : L->t.n_sink;
		if (L->rope == 1) /* a model sliding-window layer: its window only */
			out->n_resident_swa = kv_layer_window(c, L);
		out->bytes_resident += (size_t)own_sinks * L->sink_tok +
		                       (size_t)(L->t.n_hot + L->t.n_stage) * L->fp_tok +
		                       (size_t)L->t.n_groups * L->group_bytes;
		if (L->caps.anchor > 0)
			out->bytes_resident += cache_geometry_anchor_bytes(&c->g, l, L->anc.n);
		out->anchors_promoted += L->anc.promoted;
		out->anchors_demoted += L->anc.demoted;
	}
}
