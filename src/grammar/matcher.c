/* The incremental matcher: a parser state is the set of items (DFA state,
 * return stack) that the text so far can be in; each byte moves every item
 * along its byte edge and then closes the set over calls (push), returns
 * (pop) and duplicates.  Stacks are persistent nodes in one table per
 * matcher, so a step never copies a stack and a failed step is undone by
 * truncating the table.  The table only grows while text is accepted; it is
 * compacted to the nodes still in use now and then.  Masks are mask.c's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

#define GM_COMPACT_MIN 4096 /* nodes before a compaction is worth it */

int gitems_reserve(struct gitems *v, size_t extra)
{
	if (v->n + extra <= v->cap)
		return 0;
	size_t nc = v->cap ? v->cap : 16;
	while (nc < v->n + extra)
		nc *= 2;
	struct gitem *p = realloc(v->v, nc * sizeof(*p));
	if (!p)
		return -ENOMEM;
	v->v = p;
	v->cap = nc;
	return 0;
}

void gitems_deinit(struct gitems *v)
{
	free(v->v);
	*v = (struct gitems){0};
}

void gnodes_deinit(struct gnodes *v)
{
	free(v->v);
	*v = (struct gnodes){0};
}

static inline int items_add(struct gitems *v, int32_t state, int32_t stack)
{
	if (v->n == v->cap && gitems_reserve(v, 1))
		return -ENOMEM;
	v->v[v->n++] = (struct gitem){state, stack};
	return 0;
}

/* The node (ret, parent), reusing one made since `mark` (within one step,
 * items that call the same rule from the same place share a stack).
 * -1: too deep, the path is dropped; -ENOMEM - 1 on failure. */
static int32_t node_push(struct gnodes *v, size_t mark, int32_t parent, int32_t ret)
{
	for (size_t i = mark; i < v->n; i++)
		if (v->v[i].ret == ret && v->v[i].parent == parent)
			return (int32_t)i;
	int32_t depth = parent >= 0 ? v->v[parent].depth + 1 : 1;
	if (depth > GM_MAX_DEPTH)
		return -1;
	if (v->n == v->cap) {
		size_t nc = v->cap ? v->cap * 2 : 256;
		struct gnode *p = realloc(v->v, nc * sizeof(*p));
		if (!p)
			return -ENOMEM - 1;
		v->v = p;
		v->cap = nc;
	}
	v->v[v->n] = (struct gnode){.ret = ret, .parent = parent, .depth = depth};
	return (int32_t)v->n++;
}

static bool seen_before(const struct gitems *w, size_t i)
{
	for (size_t j = 0; j < i; j++)
		if (w->v[j].state == w->v[i].state && w->v[j].stack == w->v[i].stack)
			return true;
	return false;
}

int gm_advance(const struct grammar *g, struct gnodes *nodes, const struct gitem *in, size_t n_in,
               int byte, struct gitems *out, struct gitems *work, unsigned *flags)
{
	size_t mark = nodes->n, out0 = out->n;
	*flags = 0;
	work->n = 0;
	for (size_t i = 0; i < n_in; i++) {
		int32_t to =
		    byte < 0 ? in[i].state : gm_edge_target(g, in[i].state, (unsigned)byte);
		if (to >= 0 && items_add(work, to, in[i].stack))
			return -ENOMEM;
	}
	for (size_t w = 0; w < work->n; w++) {
		struct gitem it = work->v[w];
		if (w > 0 && seen_before(work, w))
			continue;
		const struct gstate *st = &g->states[it.state];
		if (st->n_edges && items_add(out, it.state, it.stack))
			return -ENOMEM;
		for (unsigned c = 0; c < st->n_calls; c++) {
			const struct gcall *call = &g->calls[st->call_off + c];
			int32_t k = node_push(nodes, mark, it.stack, call->ret);
			if (k < -1)
				return -ENOMEM;
			if (k >= 0 && items_add(work, call->start, k))
				return -ENOMEM;
		}
		if (!st->final)
			continue;
		if (it.stack < 0)
			*flags |= GM_BOTTOM;
		else if (items_add(work, nodes->v[it.stack].ret, nodes->v[it.stack].parent))
			return -ENOMEM;
	}
	return (int)(out->n - out0);
}

/* ---- the matcher ---- */

void gm_memo_clear(struct grammar_matcher *m)
{
	for (int i = 0; i < GM_MEMO; i++)
		m->memo[i].valid = false;
}

static int matcher_start(struct grammar_matcher *m)
{
	struct gitem first = {m->g->start, -1};
	unsigned flags;
	m->nodes.n = 0;
	m->cur.n = 0;
	m->live_nodes = 0;
	m->ended = false;
	gm_memo_clear(m);
	int n = gm_advance(m->g, &m->nodes, &first, 1, -1, &m->cur, &m->work, &flags);
	if (n < 0)
		return n;
	m->can_end = flags & GM_BOTTOM;
	return 0;
}

int grammar_matcher_new(struct grammar *g, const struct vocab_trie *t, struct grammar_matcher **out)
{
	*out = NULL;
	if (!g || !t)
		return -EINVAL;
	struct grammar_matcher *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->g = grammar_ref(g);
	m->t = t;
	size_t n_words = ((size_t)t->n_vocab + 31) / 32;
	m->mask = malloc(n_words * sizeof(*m->mask));
	int rc = m->mask ? matcher_start(m) : -ENOMEM;
	if (rc) {
		grammar_matcher_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

void grammar_matcher_free(struct grammar_matcher *m)
{
	if (!m)
		return;
	gnodes_deinit(&m->nodes);
	gnodes_deinit(&m->lnodes);
	gitems_deinit(&m->cur);
	gitems_deinit(&m->next);
	gitems_deinit(&m->spare);
	gitems_deinit(&m->work);
	gitems_deinit(&m->walk);
	for (int i = 0; i < GM_MEMO; i++) {
		free(m->memo[i].items);
		free(m->memo[i].mask);
	}
	free(m->mask);
	grammar_unref(m->g);
	free(m);
}

void grammar_matcher_reset(struct grammar_matcher *m)
{
	/* the first closure needs no more memory than the matcher already has */
	if (matcher_start(m))
		m->cur.n = 0;
}

/* Keeps only the nodes that the current items use, renumbered (masks
 * remembered by stack ids go with the old numbers). */
static int compact(struct grammar_matcher *m)
{
	size_t n = m->nodes.n;
	int32_t *map = malloc(n * sizeof(*map));
	struct gnode *nv = malloc(n * sizeof(*nv));
	int32_t *chain = malloc(n * sizeof(*chain));
	if (!map || !nv || !chain) {
		free(map);
		free(nv);
		free(chain);
		return -ENOMEM;
	}
	memset(map, 0xff, n * sizeof(*map));
	size_t nn = 0;
	for (size_t i = 0; i < m->cur.n; i++) {
		size_t len = 0;
		for (int32_t k = m->cur.v[i].stack; k >= 0 && map[k] < 0; k = m->nodes.v[k].parent)
			chain[len++] = k;
		while (len-- > 0) { /* parents first, so each maps to an earlier node */
			struct gnode node = m->nodes.v[chain[len]];
			node.parent = node.parent >= 0 ? map[node.parent] : -1;
			nv[nn] = node;
			map[chain[len]] = (int32_t)nn++;
		}
		if (m->cur.v[i].stack >= 0)
			m->cur.v[i].stack = map[m->cur.v[i].stack];
	}
	free(m->nodes.v);
	m->nodes.v = nv;
	m->nodes.cap = n;
	m->nodes.n = nn;
	m->live_nodes = nn;
	gm_memo_clear(m);
	free(map);
	free(chain);
	return 0;
}

int grammar_matcher_accept_bytes(struct grammar_matcher *m, const char *bytes, size_t len)
{
	if (len == 0)
		return 0;
	if (m->ended)
		return -EINVAL;
	size_t mark = m->nodes.n;
	struct gitems *src = &m->cur;
	unsigned flags = 0;
	for (size_t i = 0; i < len; i++) {
		struct gitems *dst = src == &m->next ? &m->spare : &m->next;
		dst->n = 0;
		int n = gm_advance(m->g, &m->nodes, src->v, src->n, (unsigned char)bytes[i], dst,
		                   &m->work, &flags);
		if (n < 0 || (n == 0 && !(flags & GM_BOTTOM))) {
			m->nodes.n = mark;
			return n < 0 ? n : -EINVAL;
		}
		src = dst;
	}
	struct gitems keep = m->cur;
	m->cur = *src;
	*src = keep;
	m->can_end = flags & GM_BOTTOM;
	if (m->nodes.n > GM_COMPACT_MIN && m->nodes.n > 4 * m->live_nodes)
		compact(m); /* on failure the table just stays larger */
	return 0;
}

int grammar_matcher_accept_token(struct grammar_matcher *m, int32_t token)
{
	const struct vocab_trie *t = m->t;
	if (token < 0 || token >= t->n_vocab)
		return -EINVAL;
	if (t->is_eog[token]) {
		if (!m->can_end || m->ended)
			return -EINVAL;
		m->ended = true; /* nothing may follow the end of the generation */
		m->cur.n = 0;
		gm_memo_clear(m);
		return 0;
	}
	uint32_t off = t->piece_off[token], len = t->piece_off[token + 1] - off;
	if (len == 0)
		return -EINVAL; /* control tokens */
	return grammar_matcher_accept_bytes(m, t->piece_bytes + off, len);
}

bool grammar_matcher_can_end(const struct grammar_matcher *m)
{
	return m->can_end;
}

bool grammar_matcher_done(const struct grammar_matcher *m)
{
	return m->can_end && m->cur.n == 0;
}

static int copy_items(struct gitems *dst, const struct gitems *src)
{
	dst->n = 0;
	if (gitems_reserve(dst, src->n))
		return -ENOMEM;
	if (src->n)
		memcpy(dst->v, src->v, src->n * sizeof(*src->v));
	dst->n = src->n;
	return 0;
}

int grammar_matcher_copy_state(struct grammar_matcher *dst, const struct grammar_matcher *src)
{
	if (dst->g != src->g || dst->t != src->t)
		return -EINVAL;
	if (dst == src)
		return 0;
	if (dst->nodes.cap < src->nodes.n) {
		struct gnode *p = realloc(dst->nodes.v, src->nodes.n * sizeof(*p));
		if (!p)
			return -ENOMEM;
		dst->nodes.v = p;
		dst->nodes.cap = src->nodes.n;
	}
	if (copy_items(&dst->cur, &src->cur))
		return -ENOMEM;
	if (src->nodes.n)
		memcpy(dst->nodes.v, src->nodes.v, src->nodes.n * sizeof(*src->nodes.v));
	dst->nodes.n = src->nodes.n;
	dst->live_nodes = src->live_nodes;
	dst->can_end = src->can_end;
	dst->ended = src->ended;
	gm_memo_clear(dst);
	return 0;
}
