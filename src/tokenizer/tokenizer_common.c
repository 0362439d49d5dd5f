/* Containers the tokenizer needs and C lacks: a string hash map over an
 * arena of NUL-separated strings (vocabulary and merges), a growable id
 * vector, and a binary heap of merge candidates; and the pair-merge loop
 * shared by BPE and SentencePiece (which pairs exist and their priority is
 * the caller's business, through a callback). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"
#include "util/utf8.h"

static uint64_t hash_bytes(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ull;
	}
	return h ^ (h >> 29);
}

int strmap_build(struct strmap *m, const char *arena, const uint32_t *off, uint32_t n,
                 bool keep_last)
{
	uint32_t cap = 16;
	while (cap < 2 * (uint64_t)n + 1)
		cap *= 2;
	m->slot = malloc(cap * sizeof(*m->slot));
	if (!m->slot)
		return -ENOMEM;
	memset(m->slot, 0xff, cap * sizeof(*m->slot));
	m->mask = cap - 1;
	m->arena = arena;
	m->off = off;
	for (uint32_t i = 0; i < n; i++) {
		const char *s = arena + off[i];
		size_t len = off[i + 1] - off[i] - 1;
		uint32_t h = (uint32_t)hash_bytes(s, len) & m->mask;
		for (;; h = (h + 1) & m->mask) {
			int32_t v = m->slot[h];
			if (v < 0) {
				m->slot[h] = (int32_t)i;
				break;
			}
			size_t vlen = off[v + 1] - off[v] - 1;
			if (vlen == len && memcmp(arena + off[v], s, len) == 0) {
				if (keep_last)
					m->slot[h] = (int32_t)i;
				break;
			}
		}
	}
	return 0;
}

int32_t strmap_find(const struct strmap *m, const char *s, size_t len)
{
	if (!m->slot)
		return -1;
	uint32_t h = (uint32_t)hash_bytes(s, len) & m->mask;
	for (;; h = (h + 1) & m->mask) {
		int32_t v = m->slot[h];
		if (v < 0)
			return -1;
		size_t vlen = m->off[v + 1] - m->off[v] - 1;
		if (vlen == len && memcmp(m->arena + m->off[v], s, len) == 0)
			return v;
	}
}

void strmap_free(struct strmap *m)
{
	free(m->slot);
	m->slot = NULL;
}

int idvec_push(struct idvec *iv, int32_t id)
{
	if (iv->n == iv->cap) {
		size_t cap = iv->cap ? iv->cap * 2 : 64;
		int32_t *v = realloc(iv->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		iv->v = v;
		iv->cap = cap;
	}
	iv->v[iv->n++] = id;
	return 0;
}

/* a pops before b */
static int before(const struct bigram *a, const struct bigram *b)
{
	return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

int heap_push(struct bigram_heap *h, struct bigram bg)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 64;
		struct bigram *b = realloc(h->b, cap * sizeof(*b));
		if (!b)
			return -ENOMEM;
		h->b = b;
		h->cap = cap;
	}
	size_t i = h->n++;
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!before(&bg, &h->b[parent]))
			break;
		h->b[i] = h->b[parent];
		i = parent;
	}
	h->b[i] = bg;
	return 0;
}

struct bigram heap_pop(struct bigram_heap *h)
{
	struct bigram top = h->b[0];
	struct bigram last = h->b[--h->n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && before(&h->b[c + 1], &h->b[c]))
			c++;
		if (!before(&h->b[c], &last))
			break;
		h->b[i] = h->b[c];
		i = c;
	}
	if (h->n > 0)
		h->b[i] = last;
	return top;
}

int symbols_split(const char *text, size_t n, struct symbol *sym, size_t *n_sym,
                  bigram_add_fn add, void *ctx)
{
	size_t k = 0;
	for (size_t offs = 0; offs < n; k++) {
		size_t l;
		utf8_decode((const unsigned char *)text + offs, n - offs, &l);
		sym[k] = (struct symbol){(int32_t)k - 1, offs + l == n ? -1 : (int32_t)k + 1,
		                         (uint32_t)offs, (uint32_t)l};
		offs += l;
	}
	*n_sym = k;
	for (size_t i = 1; i < k; i++)
		if (add(ctx, (int32_t)i - 1, (int32_t)i) < 0)
			return -ENOMEM;
	return 0;
}

int symbols_merge(struct symbol *sym, struct bigram_heap *heap, bigram_add_fn add, void *ctx)
{
	while (heap->n > 0) {
		struct bigram bg = heap_pop(heap);
		struct symbol *l = &sym[bg.left], *r = &sym[bg.right];
		if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size)
			continue;
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0)
			sym[r->next].prev = bg.left;
		if (add(ctx, l->prev, bg.left) < 0 || add(ctx, bg.left, l->next) < 0)
			return -ENOMEM;
	}
	return 0;
}
