/* Token masks: the vocabulary as a byte trie (built once per model), and
 * the set of tokens a matcher state allows next, found by walking the trie
 * depth-first and advancing a copy of the state byte by byte, so a subtree
 * whose prefix is already invalid is skipped whole.
 *
 * Most of a walk does not depend on the stack: from an item (state, stack)
 * the walk stays inside the item's rule (and the rules it calls) until a
 * path returns from that rule.  So each state's walk "within its rule" is
 * done once per grammar and vocabulary and kept (the tokens it accepts, and
 * the trie nodes where a path left the rule); a mask is the union of those
 * for the state's items, plus short walks from the recorded trie nodes in
 * the real context of the stack.  Inside a string every string shares the
 * one string rule, so its big walk is done once for the whole grammar.  A
 * matcher also remembers its last few masks by exact state: inside a long
 * string or number the state repeats, and the mask is a copy. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

/* Per grammar and vocabulary; beyond it walks are redone.  With the
 * server's SERVER_GRAMMAR_CACHE grammars kept, this bounds what clients
 * sending many schemas can make the masks hold. */
#define GMASK_CACHE_BYTES (16u << 20)

/* ==== the vocabulary trie ==== */

struct vt_tok {
	const char *p;
	uint32_t len;
	int32_t id;
};

static int vt_tok_cmp(const void *a, const void *b)
{
	const struct vt_tok *x = a, *y = b;
	uint32_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->p, y->p, n);
	if (c)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* Every piece, in token order, and the EOG flags. */
static int vt_pieces(struct vocab_trie *t, const struct tokenizer *tok)
{
	int n = t->n_vocab;
	size_t total = 0;
	for (int32_t id = 0; id < n; id++) {
		t->is_eog[id] = tokenizer_is_eog(tok, id);
		if (!t->is_eog[id] && !tokenizer_is_control(tok, id))
			total += tokenizer_token_piece(tok, id, NULL, 0);
	}
	t->piece_bytes = malloc(total + 1);
	if (!t->piece_bytes)
		return -ENOMEM;
	size_t off = 0;
	for (int32_t id = 0; id < n; id++) {
		t->piece_off[id] = (uint32_t)off;
		if (!t->is_eog[id] && !tokenizer_is_control(tok, id))
			off +=
			    tokenizer_token_piece(tok, id, t->piece_bytes + off, total + 1 - off);
		if (t->is_eog[id])
			t->n_eog++;
	}
	t->piece_off[n] = (uint32_t)off;
	t->eog = malloc((t->n_eog ? t->n_eog : 1) * sizeof(*t->eog));
	if (!t->eog)
		return -ENOMEM;
	for (int32_t id = 0, k = 0; id < n; id++)
		if (t->is_eog[id])
			t->eog[k++] = id;
	uint64_t h = 1469598103934665603ull;
	for (int32_t id = 0; id < n; id++) {
		h = (h ^
		     (uint64_t)(t->is_eog[id] + 2 * (t->piece_off[id + 1] - t->piece_off[id]))) *
		    1099511628211ull;
		for (uint32_t k = t->piece_off[id]; k < t->piece_off[id + 1]; k++)
			h = (h ^ (unsigned char)t->piece_bytes[k]) * 1099511628211ull;
	}
	t->hash = h ^ (uint64_t)n;
	return 0;
}

/* Nodes in breadth-first order, so each node's children are contiguous:
 * node q covers sorted tokens [lo[q], hi[q]) that share its depth-byte
 * prefix; the ones exactly that long end at q. */
static int vt_nodes(struct vocab_trie *t, struct vt_tok *v, size_t m)
{
	size_t max_nodes = t->piece_off[t->n_vocab] + 1;
	uint32_t *lo = malloc(max_nodes * sizeof(*lo)), *hi = malloc(max_nodes * sizeof(*hi));
	uint32_t *depth = malloc(max_nodes * sizeof(*depth));
	t->nodes = calloc(max_nodes, sizeof(*t->nodes));
	t->toks = malloc((m ? m : 1) * sizeof(*t->toks));
	int rc = -ENOMEM;
	if (!lo || !hi || !depth || !t->nodes || !t->toks)
		goto out;
	size_t n_nodes = 1, n_toks = 0;
	lo[0] = 0;
	hi[0] = (uint32_t)m;
	depth[0] = 0;
	for (size_t q = 0; q < n_nodes; q++) {
		uint32_t i = lo[q], d = depth[q];
		t->nodes[q].tok_off = (int32_t)n_toks;
		for (; i < hi[q] && v[i].len == d; i++)
			t->toks[n_toks++] = v[i].id;
		t->nodes[q].n_tok = (uint16_t)(n_toks - (size_t)t->nodes[q].tok_off);
		t->nodes[q].child = (int32_t)n_nodes;
		while (i < hi[q]) {
			unsigned char c = (unsigned char)v[i].p[d];
			uint32_t j = i;
			while (j < hi[q] && (unsigned char)v[j].p[d] == c)
				j++;
			t->nodes[n_nodes] = (struct vtnode){.byte = c};
			lo[n_nodes] = i;
			hi[n_nodes] = j;
			depth[n_nodes] = d + 1;
			n_nodes++;
			t->nodes[q].n_child++;
			i = j;
		}
	}
	t->n_nodes = n_nodes;
	/* the node array was sized for one node per piece byte, most of it
	 * never used: keep what is */
	struct vtnode *fit = realloc(t->nodes, n_nodes * sizeof(*t->nodes));
	if (fit)
		t->nodes = fit;
	t->n_toks = n_toks;
	rc = 0;
out:
	free(lo);
	free(hi);
	free(depth);
	return rc;
}

int vocab_trie_new(const struct tokenizer *tok, struct vocab_trie **out, char *err, size_t err_len)
{
	*out = NULL;
	struct vt_tok *v = NULL;
	struct vocab_trie *t = calloc(1, sizeof(*t));
	int rc = -ENOMEM;
	if (!t)
		goto out;
	t->n_vocab = tokenizer_n_vocab(tok);
	t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof(*t->piece_off));
	t->is_eog = calloc((size_t)t->n_vocab + 1, sizeof(*t->is_eog));
	if (!t->piece_off || !t->is_eog || (rc = vt_pieces(t, tok)))
		goto out;
	rc = -ENOMEM;
	v = malloc(((size_t)t->n_vocab + 1) * sizeof(*v));
	if (!v)
		goto out;
	size_t m = 0;
	for (int32_t id = 0; id < t->n_vocab; id++) {
		uint32_t len = t->piece_off[id + 1] - t->piece_off[id];
		if (len)
			v[m++] = (struct vt_tok){t->piece_bytes + t->piece_off[id], len, id};
	}
	qsort(v, m, sizeof(*v), vt_tok_cmp);
	if ((rc = vt_nodes(t, v, m)))
		goto out;
	*out = t;
	t = NULL;
out:
	free(v);
	vocab_trie_free(t);
	if (rc)
		err_set(err, err_len, rc, "out of memory building the vocabulary trie");
	return rc;
}

size_t vocab_trie_bytes(const struct vocab_trie *t)
{
	size_t n = (size_t)t->n_vocab;
	return t->n_nodes * sizeof(*t->nodes) + t->n_toks * sizeof(*t->toks) +
	       (size_t)t->piece_off[n] + (n + 1) * sizeof(*t->piece_off) + (n + 1) * sizeof(*t->is_eog) +
	       t->n_eog * sizeof(*t->eog);
}

void vocab_trie_free(struct vocab_trie *t)
{
	if (!t)
		return;
	free(t->nodes);
	free(t->toks);
	free(t->piece_bytes);
	free(t->piece_off);
	free(t->is_eog);
	free(t->eog);
	free(t);
}

int vocab_trie_n_vocab(const struct vocab_trie *t)
{
	return t->n_vocab;
}

/* ==== walks ==== */

struct i32vec {
	int32_t *v;
	size_t n, cap;
};

static int i32_add(struct i32vec *a, int32_t x)
{
	if (a->n == a->cap) {
		size_t nc = a->cap ? a->cap * 2 : 64;
		int32_t *p = realloc(a->v, nc * sizeof(*p));
		if (!p)
			return -ENOMEM;
		a->v = p;
		a->cap = nc;
	}
	a->v[a->n++] = x;
	return 0;
}

struct walker {
	const struct grammar *g;
	const struct vocab_trie *t;
	struct gnodes *nodes; /* stacks made during the walk are dropped on the way back */
	struct gitems *items; /* the item sets of the path from the start, back to back */
	struct gitems *work;
	bool local;        /* within a rule: leaving it is recorded, not followed */
	uint32_t *mask;    /* !local: accepted tokens go here */
	struct i32vec acc; /* local: accepted tokens */
	struct i32vec esc; /* local: trie nodes where a path left the rule */
	int rc;
};

/* One byte from the items at [off, off + n): the common case of one item
 * moving to a plain state needs no closure. */
static int walk_step(struct walker *w, size_t off, size_t n, unsigned byte, unsigned *flags)
{
	if (n == 1) {
		struct gitem it = w->items->v[off];
		int32_t to = gm_edge_target(w->g, it.state, byte);
		if (to < 0)
			return 0;
		const struct gstate *st = &w->g->states[to];
		if (!st->n_calls && !st->final) {
			*flags = 0;
			if (w->items->n == w->items->cap && gitems_reserve(w->items, 1))
				return -ENOMEM;
			w->items->v[w->items->n++] = (struct gitem){to, it.stack};
			return 1;
		}
	}
	return gm_advance(w->g, w->nodes, w->items->v + off, n, (int)byte, w->items, w->work,
	                  flags);
}

static void walk_accept(struct walker *w, const struct vtnode *tn)
{
	const int32_t *ids = w->t->toks + tn->tok_off;
	for (uint16_t i = 0; i < tn->n_tok; i++) {
		if (w->local) {
			if (i32_add(&w->acc, ids[i]))
				w->rc = -ENOMEM;
		} else {
			w->mask[ids[i] / 32] |= 1u << (ids[i] % 32);
		}
	}
}

/* The children of trie node `node`, from the items at [off, off + n). */
static void walk(struct walker *w, int32_t node, size_t off, size_t n)
{
	const struct vtnode *tn = &w->t->nodes[node];
	for (uint16_t c = 0; c < tn->n_child && !w->rc; c++) {
		int32_t child = tn->child + c;
		const struct vtnode *cn = &w->t->nodes[child];
		size_t mark = w->nodes->n, off2 = w->items->n;
		unsigned flags = 0;
		int k = walk_step(w, off, n, cn->byte, &flags);
		if (k < 0) {
			w->rc = k;
			return;
		}
		if (k > 0 || (flags & GM_BOTTOM)) {
			walk_accept(w, cn);
			if ((flags & GM_BOTTOM) && w->local && i32_add(&w->esc, child))
				w->rc = -ENOMEM;
			if (k > 0 && cn->n_child)
				walk(w, child, off2, (size_t)k);
		}
		w->nodes->n = mark;
		w->items->n = off2;
	}
}

/* ==== walks within a rule, kept per grammar and vocabulary ==== */

struct gwalk {
	uint32_t *bits; /* (n_words) when many tokens are accepted, else NULL */
	int32_t *acc;   /* (n_acc) otherwise */
	int32_t *esc;   /* (n_esc) */
	size_t n_acc, n_esc, bytes;
};

struct gmask_cache {
	uint64_t trie_hash;
	struct gwalk **by_state; /* (grammar n_states) */
	size_t bytes;
	struct gmask_cache *next;
};

static void gwalk_free(struct gwalk *gw)
{
	free(gw);
}

void gmask_caches_free(struct gmask_cache *c, size_t n_states)
{
	while (c) {
		struct gmask_cache *next = c->next;
		for (size_t s = 0; s < n_states; s++)
			gwalk_free(c->by_state[s]);
		free(c->by_state);
		free(c);
		c = next;
	}
}

/* The walk within its rule from state s, for the cache. */
static int gwalk_compute(struct grammar_matcher *m, int32_t s, struct gwalk **out)
{
	size_t n_words = ((size_t)m->t->n_vocab + 31) / 32;
	struct walker w = {.g = m->g,
	                   .t = m->t,
	                   .nodes = &m->lnodes,
	                   .items = &m->walk,
	                   .work = &m->work,
	                   .local = true};
	m->lnodes.n = 0;
	m->walk.n = 0;
	if (gitems_reserve(&m->walk, 1))
		return -ENOMEM;
	m->walk.v[m->walk.n++] = (struct gitem){s, -1};
	walk(&w, 0, 0, 1);
	int rc = w.rc;
	if (rc)
		goto out;
	bool dense = w.acc.n > n_words;
	size_t bytes = sizeof(struct gwalk) + (dense ? n_words * 4 : w.acc.n * 4) + w.esc.n * 4;
	struct gwalk *gw = malloc(bytes);
	if (!gw) {
		rc = -ENOMEM;
		goto out;
	}
	int32_t *tail = (int32_t *)(gw + 1);
	*gw = (struct gwalk){.n_esc = w.esc.n, .bytes = bytes};
	gw->esc = tail;
	if (w.esc.n) /* an empty list may have no buffer */
		memcpy(gw->esc, w.esc.v, w.esc.n * sizeof(int32_t));
	tail += w.esc.n;
	if (dense) {
		gw->bits = (uint32_t *)tail;
		memset(gw->bits, 0, n_words * 4);
		for (size_t i = 0; i < w.acc.n; i++)
			gw->bits[w.acc.v[i] / 32] |= 1u << (w.acc.v[i] % 32);
	} else {
		gw->acc = tail;
		gw->n_acc = w.acc.n;
		if (w.acc.n)
			memcpy(gw->acc, w.acc.v, w.acc.n * sizeof(int32_t));
	}
	*out = gw;
out:
	free(w.acc.v);
	free(w.esc.v);
	return rc;
}

static struct gmask_cache *cache_for(struct grammar *g, uint64_t hash)
{
	for (struct gmask_cache *c = g->caches; c; c = c->next)
		if (c->trie_hash == hash)
			return c;
	struct gmask_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->by_state = calloc(g->n_states ? g->n_states : 1, sizeof(*c->by_state));
	if (!c->by_state) {
		free(c);
		return NULL;
	}
	c->trie_hash = hash;
	c->next = g->caches;
	g->caches = c;
	return c;
}

/* The walk within its rule from state s: the kept one, or one computed now
 * (kept when there is room; *owned says the caller frees it). */
static int gwalk_get(struct grammar_matcher *m, int32_t s, struct gwalk **out, bool *owned)
{
	struct grammar *g = m->g;
	pthread_mutex_lock(&g->lock);
	struct gmask_cache *c = cache_for(g, m->t->hash);
	struct gwalk *gw = c ? c->by_state[s] : NULL;
	pthread_mutex_unlock(&g->lock);
	*owned = false;
	if (gw) {
		*out = gw;
		return 0;
	}
	int rc = gwalk_compute(m, s, &gw);
	if (rc)
		return rc;
	pthread_mutex_lock(&g->lock);
	if (c && c->by_state[s]) { /* another thread was quicker */
		gwalk_free(gw);
		gw = c->by_state[s];
	} else if (c && c->bytes + gw->bytes <= GMASK_CACHE_BYTES) {
		c->by_state[s] = gw;
		c->bytes += gw->bytes;
	} else {
		*owned = true;
	}
	pthread_mutex_unlock(&g->lock);
	*out = gw;
	return 0;
}

/* ==== masks ==== */

static bool memo_find(struct grammar_matcher *m, uint32_t *mask, size_t n_words)
{
	for (int i = 0; i < GM_MEMO; i++) {
		struct gmemo *e = &m->memo[i];
		if (e->valid && e->can_end == m->can_end && e->n == m->cur.n &&
		    !memcmp(e->items, m->cur.v, e->n * sizeof(*e->items))) {
			memcpy(mask, e->mask, n_words * sizeof(*mask));
			return true;
		}
	}
	return false;
}

static void memo_store(struct grammar_matcher *m, const uint32_t *mask, size_t n_words)
{
	struct gmemo *e = &m->memo[m->memo_next++ % GM_MEMO];
	e->valid = false;
	if (!e->mask && !(e->mask = malloc(n_words * sizeof(*e->mask))))
		return;
	if (e->cap < m->cur.n) {
		struct gitem *p = realloc(e->items, m->cur.n * sizeof(*p));
		if (!p)
			return;
		e->items = p;
		e->cap = m->cur.n;
	}
	memcpy(e->items, m->cur.v, m->cur.n * sizeof(*e->items));
	memcpy(e->mask, mask, n_words * sizeof(*mask));
	e->n = m->cur.n;
	e->can_end = m->can_end;
	e->valid = true;
}

/* The paths that left item it's rule at the trie nodes gw->esc, followed
 * in the item's real context: returned to the caller on its stack. */
static int follow_escapes(struct grammar_matcher *m, struct gitem it, const struct gwalk *gw,
                          uint32_t *mask)
{
	struct gnode top = m->nodes.v[it.stack];
	struct gitem back = {top.ret, top.parent};
	size_t mark = m->nodes.n;
	unsigned flags;
	m->walk.n = 0;
	int k = gm_advance(m->g, &m->nodes, &back, 1, -1, &m->walk, &m->work, &flags);
	struct walker w = {.g = m->g,
	                   .t = m->t,
	                   .nodes = &m->nodes,
	                   .items = &m->walk,
	                   .work = &m->work,
	                   .mask = mask};
	for (size_t e = 0; k > 0 && e < gw->n_esc && !w.rc; e++)
		walk(&w, gw->esc[e], 0, (size_t)k);
	m->nodes.n = mark;
	return k < 0 ? k : w.rc;
}

int grammar_matcher_fill_mask(struct grammar_matcher *m, uint32_t *mask)
{
	size_t n_words = ((size_t)m->t->n_vocab + 31) / 32;
	if (memo_find(m, mask, n_words))
		return 0;
	memset(mask, 0, n_words * sizeof(*mask));
	if (m->ended)
		return 0;
	for (size_t i = 0; i < m->cur.n; i++) {
		struct gitem it = m->cur.v[i];
		struct gwalk *gw;
		bool owned;
		int rc = gwalk_get(m, it.state, &gw, &owned);
		if (rc)
			return rc;
		if (gw->bits)
			for (size_t k = 0; k < n_words; k++)
				mask[k] |= gw->bits[k];
		for (size_t k = 0; k < gw->n_acc; k++)
			mask[gw->acc[k] / 32] |= 1u << (gw->acc[k] % 32);
		if (it.stack >= 0 && gw->n_esc)
			rc = follow_escapes(m, it, gw, mask);
		if (owned)
			gwalk_free(gw);
		if (rc)
			return rc;
	}
	if (m->can_end)
		for (size_t i = 0; i < m->t->n_eog; i++)
			mask[m->t->eog[i] / 32] |= 1u << (m->t->eog[i] % 32);
	memo_store(m, mask, n_words);
	return 0;
}

int grammar_matcher_apply(struct grammar_matcher *m, float *logits)
{
	int rc = grammar_matcher_fill_mask(m, m->mask);
	if (rc)
		return rc;
	size_t n_vocab = (size_t)m->t->n_vocab, n_words = (n_vocab + 31) / 32;
	bool any = false;
	for (size_t k = 0; k < n_words; k++) {
		uint32_t bits = m->mask[k];
		any |= bits != 0;
		if (bits == 0xffffffffu)
			continue;
		size_t base = k * 32, lim = n_vocab - base < 32 ? n_vocab - base : 32;
		for (size_t j = 0; j < lim; j++)
			if (!(bits >> j & 1))
				logits[base + j] = -INFINITY;
	}
	return any ? 0 : -EINVAL;
}
