/* The grammar builder: the schema and pattern compilers describe the text
 * they allow as expressions (bytes, sequences, alternatives, bounded
 * repetitions, calls of rules), and gb_finish turns each rule into a DFA
 * over bytes whose only other transitions are calls of rules (Thompson
 * construction, then subset construction per rule), then drops every state
 * and call that can never complete, so a matcher that is alive can always
 * still finish.  Nondeterminism is left only where a rule calls rules whose
 * texts start alike; the matcher follows those paths side by side.  It does
 * not know JSON; it does not match text (matcher.c does).
 *
 * Every step of the work (expressions made, NFA states and edges, subset
 * members and edges looked at, trimming passes) is counted against the
 * builder's work budget, and a build that runs past it fails with "too
 * complex to compile": a compile must never hold a server thread for long,
 * whatever the schema.  The budget counts steps, not time, so one schema
 * always compiles or fails the same way on a given build, and a failure
 * can be cached like a success (gcache.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"
#include "util/errbuf.h"

#define GB_MAX_NFA_STATES 1000000 /* per rule, while compiling */
#define GB_MAX_DFA_STATES 200000  /* in the whole grammar */
/* Steps are weighted so that one costs about the same time anywhere, some
 * 2 ns (the budget, GB_WORK_BUDGET, is in grammar_internal.h): looking at
 * an edge during subset construction counts as one, an NFA state in a
 * closure as 8 (sorted, hashed and interned), making an expression or an
 * NFA state or edge (fresh memory) as GB_COST_ALLOC, and each DFA state
 * as GB_COST_STATE on top. */
#define GB_COST_ALLOC 8
#define GB_COST_STATE 96 /* a DFA state: its set copied, its 256 bytes turned into edges */
#define GB_OVER_BUDGET (-ECANCELED) /* internal; reported as -EINVAL */

enum gx_kind { GX_SET, GX_LIT, GX_SEQ, GX_ALT, GX_REP, GX_CALL };

struct gexpr {
	uint8_t kind;
	int32_t a, b, c; /* SET: set; LIT: offset, length; SEQ/ALT: kids offset, count;
	                  * REP: child, min, max; CALL: rule */
};

struct gbuild {
	struct gexpr *x;
	size_t n_x, cap_x;
	uint32_t (*sets)[8];
	size_t n_sets, cap_sets;
	char *lits;
	size_t n_lits, cap_lits;
	int32_t *kids;
	size_t n_kids, cap_kids;
	int32_t *rules; /* rule -> expression, -1 until set */
	char **labels;  /* rule -> JSON path it stands for, or NULL (cap_rules of them) */
	size_t n_rules, cap_rules;
	uint64_t work, work_limit; /* steps taken and allowed (GB_WORK_BUDGET) */
	bool failed, over_budget;
};

static int grow(void *pp, size_t *cap, size_t need, size_t elem)
{
	void **p = pp;
	if (need <= *cap)
		return 0;
	size_t nc = *cap ? *cap : 16;
	while (nc < need)
		nc *= 2;
	void *q = realloc(*p, nc * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = nc;
	return 0;
}

int gb_new(struct gbuild **out)
{
	*out = calloc(1, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	(*out)->work_limit = GB_WORK_BUDGET;
	return 0;
}

uint64_t gb_work(const struct gbuild *b)
{
	return b->work;
}

bool gb_spend(struct gbuild *b, uint64_t n)
{
	b->work += n;
	if (b->work <= b->work_limit)
		return false;
	b->over_budget = b->failed = true;
	return true;
}

bool gb_over_budget(const struct gbuild *b)
{
	return b->over_budget;
}

int gb_error(const struct gbuild *b, char *err, size_t err_len)
{
	if (b->over_budget)
		return err_set(err, err_len, -EINVAL,
		               "the schema is too large or complex to compile within the "
		               "compile budget of %llu steps (simplify the pattern, or lower "
		               "minItems/maxItems/maxLength or the number of properties)",
		               (unsigned long long)b->work_limit);
	return err_set(err, err_len, -ENOMEM, "out of memory");
}

void gb_free(struct gbuild *b)
{
	if (!b)
		return;
	free(b->x);
	free(b->sets);
	free(b->lits);
	free(b->kids);
	for (size_t i = 0; i < b->n_rules; i++)
		free(b->labels[i]);
	free(b->labels);
	free(b->rules);
	free(b);
}

bool gb_failed(const struct gbuild *b)
{
	return b->failed;
}

static int gx_add(struct gbuild *b, uint8_t kind, int32_t a, int32_t bb, int32_t c)
{
	if (b->failed || gb_spend(b, GB_COST_ALLOC) ||
	    grow(&b->x, &b->cap_x, b->n_x + 1, sizeof(*b->x))) {
		b->failed = true;
		return -1;
	}
	b->x[b->n_x] = (struct gexpr){.kind = kind, .a = a, .b = bb, .c = c};
	return (int)b->n_x++;
}

int gb_set(struct gbuild *b, const uint32_t set[8])
{
	if (b->failed || grow(&b->sets, &b->cap_sets, b->n_sets + 1, sizeof(*b->sets))) {
		b->failed = true;
		return -1;
	}
	memcpy(b->sets[b->n_sets], set, sizeof(b->sets[0]));
	return gx_add(b, GX_SET, (int32_t)b->n_sets++, 0, 0);
}

int gb_range(struct gbuild *b, uint8_t lo, uint8_t hi)
{
	uint32_t set[8] = {0};
	for (unsigned c = lo; c <= hi; c++)
		set[c / 32] |= 1u << (c % 32);
	return gb_set(b, set);
}

int gb_lit(struct gbuild *b, const char *s, size_t n)
{
	if (b->failed || gb_spend(b, n) || grow(&b->lits, &b->cap_lits, b->n_lits + n, 1)) {
		b->failed = true;
		return -1;
	}
	if (n)
		memcpy(b->lits + b->n_lits, s, n);
	b->n_lits += n;
	return gx_add(b, GX_LIT, (int32_t)(b->n_lits - n), (int32_t)n, 0);
}

int gb_str(struct gbuild *b, const char *s)
{
	return gb_lit(b, s, strlen(s));
}

static int gx_list(struct gbuild *b, uint8_t kind, const int *xs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (xs[i] < 0)
			b->failed = true;
	if (b->failed || gb_spend(b, n) ||
	    grow(&b->kids, &b->cap_kids, b->n_kids + n, sizeof(*b->kids))) {
		b->failed = true;
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		b->kids[b->n_kids + i] = xs[i];
	b->n_kids += n;
	return gx_add(b, kind, (int32_t)(b->n_kids - n), (int32_t)n, 0);
}

int gb_seq(struct gbuild *b, const int *xs, size_t n)
{
	if (n == 1)
		return xs[0];
	return gx_list(b, GX_SEQ, xs, n);
}

int gb_alt(struct gbuild *b, const int *xs, size_t n)
{
	if (n == 1)
		return xs[0];
	return gx_list(b, GX_ALT, xs, n);
}

int gb_seq2(struct gbuild *b, int x, int y)
{
	int xs[2] = {x, y};
	return gb_seq(b, xs, 2);
}

int gb_alt2(struct gbuild *b, int x, int y)
{
	int xs[2] = {x, y};
	return gb_alt(b, xs, 2);
}

int gb_rep(struct gbuild *b, int x, int min, int max)
{
	if (x < 0 || min < 0 || (max >= 0 && max < min)) {
		b->failed = true;
		return -1;
	}
	return gx_add(b, GX_REP, x, min, max);
}

int gb_opt(struct gbuild *b, int x)
{
	return gb_rep(b, x, 0, 1);
}

int gb_empty(struct gbuild *b)
{
	return gx_list(b, GX_SEQ, NULL, 0);
}

int gb_rule_new(struct gbuild *b)
{
	size_t cap = b->cap_rules;
	if (b->failed || gb_spend(b, GB_COST_ALLOC) ||
	    grow(&b->rules, &b->cap_rules, b->n_rules + 1, sizeof(*b->rules))) {
		b->failed = true;
		return -1;
	}
	if (cap != b->cap_rules) {
		char **l = realloc(b->labels, b->cap_rules * sizeof(*l));
		if (!l) {
			b->cap_rules = cap; /* the labels still have the old room */
			b->failed = true;
			return -1;
		}
		memset(l + cap, 0, (b->cap_rules - cap) * sizeof(*l));
		b->labels = l;
	}
	b->rules[b->n_rules] = -1;
	return (int)b->n_rules++;
}

void gb_rule_label(struct gbuild *b, int rule, const char *path)
{
	if (rule < 0 || b->labels[rule])
		return;
	b->labels[rule] = strdup(path); /* NULL on failure: only the path is lost */
}

void gb_rule_set(struct gbuild *b, int rule, int x)
{
	if (rule < 0 || x < 0) {
		b->failed = true;
		return;
	}
	b->rules[rule] = x;
}

int gb_call(struct gbuild *b, int rule)
{
	if (rule < 0) {
		b->failed = true;
		return -1;
	}
	return gx_add(b, GX_CALL, rule, 0, 0);
}

/* ==== Thompson NFA of one rule ==== */

enum { TE_EPS, TE_BYTE, TE_SET, TE_CALL };

struct tedge {
	int32_t next; /* the state's next edge, -1 at the end */
	int32_t to;
	int32_t arg; /* BYTE: the byte; SET: set index; CALL: rule */
	uint8_t kind;
};

struct tnfa {
	struct gbuild *b;   /* read, and charged for the work */
	const uint8_t *cls; /* byte -> class: bytes no edge tells apart share one */
	const uint8_t *rep; /* class -> its first byte */
	int n_cls;
	const uint32_t *set_off; /* set i's classes: set_cls[set_off[i]..set_off[i + 1]) */
	const uint8_t *set_cls;
	int32_t *head; /* state -> first edge */
	size_t n, cap;
	struct tedge *e;
	size_t n_e, cap_e;
	int rc;
};

static int32_t tn_state(struct tnfa *t)
{
	if (t->rc)
		return 0;
	if (t->n >= GB_MAX_NFA_STATES) {
		t->rc = -E2BIG;
		return 0;
	}
	if (gb_spend(t->b, GB_COST_ALLOC)) {
		t->rc = GB_OVER_BUDGET;
		return 0;
	}
	if (grow(&t->head, &t->cap, t->n + 1, sizeof(*t->head))) {
		t->rc = -ENOMEM;
		return 0;
	}
	t->head[t->n] = -1;
	return (int32_t)t->n++;
}

static void tn_edge(struct tnfa *t, int32_t from, uint8_t kind, int32_t arg, int32_t to)
{
	if (t->rc)
		return;
	if (gb_spend(t->b, GB_COST_ALLOC)) {
		t->rc = GB_OVER_BUDGET;
		return;
	}
	if (grow(&t->e, &t->cap_e, t->n_e + 1, sizeof(*t->e))) {
		t->rc = -ENOMEM;
		return;
	}
	t->e[t->n_e] = (struct tedge){.next = t->head[from], .to = to, .arg = arg, .kind = kind};
	t->head[from] = (int32_t)t->n_e++;
}

static void tn_emit(struct tnfa *t, int x, int32_t from, int32_t to);

/* x{min,max}: min copies in a row, then either a loop (max < 0) or
 * max - min copies that may each be the last. */
static void tn_emit_rep(struct tnfa *t, int x, int32_t min, int32_t max, int32_t from, int32_t to)
{
	int32_t cur = from;
	if (max == 0) {
		tn_edge(t, from, TE_EPS, 0, to);
		return;
	}
	for (int32_t i = 0; i < min; i++) {
		int32_t nxt = (i == min - 1 && max == min) ? to : tn_state(t);
		tn_emit(t, x, cur, nxt);
		cur = nxt;
	}
	if (max < 0) {
		int32_t loop = tn_state(t);
		tn_edge(t, cur, TE_EPS, 0, loop);
		tn_emit(t, x, loop, loop);
		tn_edge(t, loop, TE_EPS, 0, to);
		return;
	}
	for (int32_t i = min; i < max; i++) {
		tn_edge(t, cur, TE_EPS, 0, to);
		int32_t nxt = i == max - 1 ? to : tn_state(t);
		tn_emit(t, x, cur, nxt);
		cur = nxt;
	}
}

/* Adds the paths of expression x from state `from` to state `to`.  Loops
 * are only ever made on fresh states, so sibling alternatives that share
 * from/to cannot run into each other's loops. */
static void tn_emit(struct tnfa *t, int x, int32_t from, int32_t to)
{
	if (t->rc)
		return;
	const struct gexpr *e = &t->b->x[x];
	switch (e->kind) {
	case GX_SET:
		tn_edge(t, from, TE_SET, e->a, to);
		return;
	case GX_CALL:
		tn_edge(t, from, TE_CALL, e->a, to);
		return;
	case GX_LIT: {
		int32_t cur = from;
		if (e->b == 0)
			tn_edge(t, from, TE_EPS, 0, to);
		for (int32_t i = 0; i < e->b; i++) {
			int32_t nxt = i == e->b - 1 ? to : tn_state(t);
			tn_edge(t, cur, TE_BYTE, (uint8_t)t->b->lits[e->a + i], nxt);
			cur = nxt;
		}
		return;
	}
	case GX_SEQ: {
		int32_t cur = from;
		if (e->b == 0)
			tn_edge(t, from, TE_EPS, 0, to);
		for (int32_t i = 0; i < e->b; i++) {
			int32_t nxt = i == e->b - 1 ? to : tn_state(t);
			tn_emit(t, t->b->kids[e->a + i], cur, nxt);
			cur = nxt;
		}
		return;
	}
	case GX_ALT:
		for (int32_t i = 0; i < e->b; i++)
			tn_emit(t, t->b->kids[e->a + i], from, to);
		return;
	case GX_REP:
		tn_emit_rep(t, e->a, e->b, e->c, from, to);
		return;
	}
}

/* ==== subset construction ==== */

/* A DFA under construction: its states are sets of NFA states, interned. */
struct dfa {
	const struct tnfa *t;
	int32_t *pool; /* every set's members, back to back */
	size_t n_pool, cap_pool;
	uint32_t *set_off; /* (n+1) */
	size_t n, cap;
	int32_t *hash; /* open addressing, -1 empty */
	size_t hash_cap;
	/* closure scratch */
	uint32_t *stamp; /* (t->n) */
	uint32_t gen;
	int32_t *stk, *buf;
	size_t cap_stk, cap_buf;
	int32_t *tgt; /* dfa_bytes scratch: the targets of each class, back to back */
	size_t cap_tgt;
	int32_t exit; /* the NFA state where the rule ends */
	int rc;
};

static uint64_t set_hash(const int32_t *s, size_t n)
{
	uint64_t h = 1469598103934665603ull ^ n;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint32_t)s[i]) * 1099511628211ull;
	return h;
}

static int dfa_rehash(struct dfa *d)
{
	size_t nc = d->hash_cap ? d->hash_cap * 2 : 256;
	int32_t *h = malloc(nc * sizeof(*h));
	if (!h)
		return -ENOMEM;
	memset(h, 0xff, nc * sizeof(*h));
	for (size_t i = 0; i < d->n; i++) {
		const int32_t *s = d->pool + d->set_off[i];
		size_t len = d->set_off[i + 1] - d->set_off[i];
		size_t k = set_hash(s, len) & (nc - 1);
		while (h[k] >= 0)
			k = (k + 1) & (nc - 1);
		h[k] = (int32_t)i;
	}
	free(d->hash);
	d->hash = h;
	d->hash_cap = nc;
	return 0;
}

/* The id of set s (sorted), added when new; -1 on failure (d->rc). */
static int32_t dfa_intern(struct dfa *d, const int32_t *s, size_t len)
{
	if (d->rc)
		return -1;
	if ((d->n + 1) * 2 > d->hash_cap && (d->rc = dfa_rehash(d)))
		return -1;
	size_t k = set_hash(s, len) & (d->hash_cap - 1);
	for (; d->hash[k] >= 0; k = (k + 1) & (d->hash_cap - 1)) {
		int32_t id = d->hash[k];
		size_t l2 = d->set_off[id + 1] - d->set_off[id];
		if (l2 == len && !memcmp(d->pool + d->set_off[id], s, len * sizeof(*s)))
			return id;
	}
	if (grow(&d->pool, &d->cap_pool, d->n_pool + len, sizeof(*d->pool)) ||
	    grow(&d->set_off, &d->cap, d->n + 2, sizeof(*d->set_off))) {
		d->rc = -ENOMEM;
		return -1;
	}
	if (d->n == 0)
		d->set_off[0] = 0;
	if (len)
		memcpy(d->pool + d->n_pool, s, len * sizeof(*s));
	d->n_pool += len;
	d->set_off[d->n + 1] = (uint32_t)d->n_pool;
	d->hash[k] = (int32_t)d->n;
	return (int32_t)d->n++;
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

/* Interns the epsilon closure of seeds[0..n) (any order, duplicates fine). */
static int32_t dfa_close(struct dfa *d, const int32_t *seeds, size_t n)
{
	const struct tnfa *t = d->t;
	if (d->rc)
		return -1;
	if (++d->gen == 0) {
		memset(d->stamp, 0, t->n * sizeof(*d->stamp));
		d->gen = 1;
	}
	size_t n_stk = 0, n_buf = 0, steps = n;
	for (size_t i = 0; i < n; i++) {
		if (d->stamp[seeds[i]] == d->gen)
			continue;
		d->stamp[seeds[i]] = d->gen;
		if (grow(&d->stk, &d->cap_stk, n_stk + 1, sizeof(*d->stk)))
			goto oom;
		d->stk[n_stk++] = seeds[i];
	}
	while (n_stk) {
		int32_t s = d->stk[--n_stk];
		if (grow(&d->buf, &d->cap_buf, n_buf + 1, sizeof(*d->buf)))
			goto oom;
		d->buf[n_buf++] = s;
		for (int32_t k = t->head[s]; k >= 0; k = t->e[k].next) {
			int32_t to = t->e[k].to;
			steps++;
			if (t->e[k].kind != TE_EPS || d->stamp[to] == d->gen)
				continue;
			d->stamp[to] = d->gen;
			if (grow(&d->stk, &d->cap_stk, n_stk + 1, sizeof(*d->stk)))
				goto oom;
			d->stk[n_stk++] = to;
		}
	}
	if (gb_spend(t->b, steps + 8 * n_buf)) { /* + the sort, hash and interning */
		d->rc = GB_OVER_BUDGET;
		return -1;
	}
	qsort(d->buf, n_buf, sizeof(*d->buf), cmp_i32);
	return dfa_intern(d, d->buf, n_buf);
oom:
	d->rc = -ENOMEM;
	return -1;
}

/* The compiled states of all rules, growing as rules are added. */
struct gout {
	struct gstate *st;
	size_t n_st, cap_st;
	struct gedge *ed;
	size_t n_ed, cap_ed;
	struct gcall *ca; /* .start holds the callee's rule until gb_finish resolves it */
	size_t n_ca, cap_ca;
};

/* The byte edges of a DFA state's members, by the classes they cover:
 * without tgt, counts them (pos[c + 1] += the edges into class c); with
 * it, stores each edge's target at tgt[pos[c]++].  Returns how many. */
static size_t dfa_class_edges(const struct tnfa *t, const int32_t *set, size_t len, uint32_t *pos,
                              int32_t *tgt)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++)
		for (int32_t k = t->head[set[i]]; k >= 0; k = t->e[k].next) {
			const struct tedge *e = &t->e[k];
			uint8_t one;
			const uint8_t *cs = &one;
			uint32_t n_cs = 1;
			if (e->kind == TE_BYTE) {
				one = t->cls[(uint8_t)e->arg];
			} else if (e->kind == TE_SET) {
				cs = t->set_cls + t->set_off[e->arg];
				n_cs = t->set_off[e->arg + 1] - t->set_off[e->arg];
			} else {
				continue;
			}
			for (uint32_t j = 0; j < n_cs; j++) {
				if (tgt)
					tgt[pos[cs[j]]++] = e->to;
				else
					pos[cs[j] + 1]++;
			}
			n += n_cs;
		}
	return n;
}

/* Byte transitions of a DFA state: each member's edges are put under the
 * byte classes they cover (so a state costs its edges, not edges times
 * classes: most states have a few literal bytes out of dozens of classes);
 * classes with equal target lists share one target, and runs of bytes with
 * one target become one edge. */
static int dfa_bytes(struct dfa *d, struct gout *o, size_t base, const int32_t *set, size_t len)
{
	const struct tnfa *t = d->t;
	uint32_t off[257] = {0}; /* class c's targets: d->tgt[off[c]..off[c + 1]) */
	uint32_t fill[256];
	int32_t tg[256];
	size_t n = dfa_class_edges(t, set, len, off, NULL);
	if (gb_spend(t->b, len + 2 * n + (size_t)t->n_cls))
		return GB_OVER_BUDGET;
	if (grow(&d->tgt, &d->cap_tgt, n + 1, sizeof(*d->tgt)))
		return -ENOMEM;
	for (int c = 0; c < t->n_cls; c++) {
		off[c + 1] += off[c];
		fill[c] = off[c];
	}
	dfa_class_edges(t, set, len, fill, d->tgt);
	for (int c = 0; c < t->n_cls; c++) {
		uint32_t n_cur = off[c + 1] - off[c];
		if (c > 0 && n_cur == off[c] - off[c - 1] &&
		    (n_cur == 0 ||
		     !memcmp(d->tgt + off[c], d->tgt + off[c - 1], n_cur * sizeof(*d->tgt))))
			tg[c] = tg[c - 1];
		else
			tg[c] = n_cur ? dfa_close(d, d->tgt + off[c], n_cur) : -1;
		if (d->rc)
			return d->rc;
	}
	for (unsigned lo = 0; lo < 256;) {
		unsigned hi = lo;
		int32_t to = tg[t->cls[lo]];
		while (hi + 1 < 256 && tg[t->cls[hi + 1]] == to)
			hi++;
		if (to >= 0) {
			if (grow(&o->ed, &o->cap_ed, o->n_ed + 1, sizeof(*o->ed)))
				return -ENOMEM;
			o->ed[o->n_ed++] = (struct gedge){
			    .lo = (uint8_t)lo, .hi = (uint8_t)hi, .to = (int32_t)base + to};
		}
		lo = hi + 1;
	}
	return 0;
}

/* Call transitions: one per called rule, to the closure of all its returns. */
static int dfa_calls(struct dfa *d, struct gout *o, size_t base, const int32_t *set, size_t len)
{
	const struct tnfa *t = d->t;
	int32_t *rets = NULL;
	size_t cap = 0;
	int rc = 0;
	for (size_t i = 0; i < len; i++)
		for (int32_t k = t->head[set[i]]; k >= 0; k = t->e[k].next) {
			if (gb_spend(t->b, 1)) {
				rc = GB_OVER_BUDGET;
				goto out;
			}
			if (t->e[k].kind != TE_CALL)
				continue;
			int32_t rule = t->e[k].arg;
			bool seen = false;
			for (size_t c = o->n_st ? o->st[o->n_st - 1].call_off : 0; c < o->n_ca; c++)
				seen |= o->ca[c].start == rule;
			if (seen)
				continue;
			size_t n = 0, steps = o->n_ca - (o->n_st ? o->st[o->n_st - 1].call_off : 0);
			for (size_t j = 0; j < len; j++)
				for (int32_t q = t->head[set[j]]; q >= 0; q = t->e[q].next) {
					steps++;
					if (t->e[q].kind != TE_CALL || t->e[q].arg != rule)
						continue;
					if (grow(&rets, &cap, n + 1, sizeof(*rets))) {
						rc = -ENOMEM;
						goto out;
					}
					rets[n++] = t->e[q].to;
				}
			if (gb_spend(t->b, steps)) {
				rc = GB_OVER_BUDGET;
				goto out;
			}
			int32_t to = dfa_close(d, rets, n);
			if (d->rc || grow(&o->ca, &o->cap_ca, o->n_ca + 1, sizeof(*o->ca))) {
				rc = d->rc ? d->rc : -ENOMEM;
				goto out;
			}
			o->ca[o->n_ca++] = (struct gcall){.start = rule, .ret = (int32_t)base + to};
		}
out:
	free(rets);
	return rc;
}

/* Compiles rule expression x (entry/exit states of its NFA) into o. */
/* Emits DFA state id (its edges, calls and finality) into o. */
static int dfa_state(struct dfa *d, struct gout *o, size_t base, size_t id)
{
	if (base + d->n > GB_MAX_DFA_STATES)
		return -E2BIG;
	if (gb_spend(d->t->b, GB_COST_STATE))
		return GB_OVER_BUDGET;
	if (grow(&o->st, &o->cap_st, o->n_st + 1, sizeof(*o->st)))
		return -ENOMEM;
	/* a copy: interning new sets may move the pool */
	size_t len = d->set_off[id + 1] - d->set_off[id];
	int32_t *set = malloc((len ? len : 1) * sizeof(*set));
	if (!set)
		return -ENOMEM;
	memcpy(set, d->pool + d->set_off[id], len * sizeof(*set));
	struct gstate *st = &o->st[o->n_st++];
	*st = (struct gstate){.edge_off = (uint32_t)o->n_ed, .call_off = (uint32_t)o->n_ca};
	st->final = bsearch(&d->exit, set, len, sizeof(*set), cmp_i32) != NULL;
	int rc = dfa_bytes(d, o, base, set, len);
	if (!rc)
		rc = dfa_calls(d, o, base, set, len);
	free(set);
	st = &o->st[o->n_st - 1];
	st->n_edges = (uint16_t)(o->n_ed - st->edge_off);
	st->n_calls = (uint16_t)(o->n_ca - st->call_off);
	return rc;
}

struct bclasses {
	uint8_t cls[256], rep[256];
	int n;
	uint32_t
	    *set_off; /* (n_sets + 1): set i's classes are set_cls[set_off[i]..set_off[i + 1]) */
	uint8_t *set_cls;
};

/* Splits every class by membership in `in`. */
static void classes_refine(struct bclasses *c, const bool *in)
{
	int16_t map[256][2];
	uint8_t next[256];
	int n = 0;
	memset(map, 0xff, sizeof(map));
	for (int b = 0; b < 256; b++) {
		int16_t *slot = &map[c->cls[b]][in[b]];
		if (*slot < 0) {
			*slot = (int16_t)n;
			c->rep[n++] = (uint8_t)b;
		}
		next[b] = (uint8_t)*slot;
	}
	memcpy(c->cls, next, sizeof(next));
	c->n = n;
}

/* The coarsest partition of the bytes that every set and literal respects,
 * so subset construction looks at one byte per class, not at all 256. */
static void classes_build(const struct gbuild *b, struct bclasses *c)
{
	bool in[256], lit[256] = {false};
	memset(c->cls, 0, sizeof(c->cls));
	c->rep[0] = 0;
	c->n = 1;
	for (size_t i = 0; i < b->n_sets; i++) {
		if (i > 0 && !memcmp(b->sets[i], b->sets[i - 1], sizeof(b->sets[i])))
			continue;
		for (int k = 0; k < 256; k++)
			in[k] = b->sets[i][k / 32] >> (k % 32) & 1;
		classes_refine(c, in);
	}
	for (size_t i = 0; i < b->n_lits; i++)
		lit[(uint8_t)b->lits[i]] = true;
	for (int k = 0; k < 256; k++) {
		if (!lit[k])
			continue;
		memset(in, 0, sizeof(in));
		in[k] = true;
		classes_refine(c, in);
	}
}

/* Which classes each byte set covers: the classes respect every set, so a
 * class is in a set exactly when its first byte is. */
static int classes_of_sets(const struct gbuild *b, struct bclasses *c)
{
	c->set_off = calloc(b->n_sets + 1, sizeof(*c->set_off));
	if (!c->set_off)
		return -ENOMEM;
	for (size_t i = 0; i < b->n_sets; i++)
		for (int k = 0; k < c->n; k++)
			c->set_off[i + 1] += b->sets[i][c->rep[k] / 32] >> (c->rep[k] % 32) & 1;
	for (size_t i = 0; i < b->n_sets; i++)
		c->set_off[i + 1] += c->set_off[i];
	c->set_cls = malloc(c->set_off[b->n_sets] + 1);
	if (!c->set_cls)
		return -ENOMEM;
	for (size_t i = 0, j = 0; i < b->n_sets; i++)
		for (int k = 0; k < c->n; k++)
			if (b->sets[i][c->rep[k] / 32] >> (c->rep[k] % 32) & 1)
				c->set_cls[j++] = (uint8_t)k;
	return 0;
}

static int rule_compile(struct gbuild *b, const struct bclasses *bc, int x, struct gout *o,
                        char *err, size_t err_len)
{
	struct tnfa t = {.b = b,
	                 .cls = bc->cls,
	                 .rep = bc->rep,
	                 .n_cls = bc->n,
	                 .set_off = bc->set_off,
	                 .set_cls = bc->set_cls};
	struct dfa d = {.t = &t};
	int rc;
	int32_t entry = tn_state(&t), exit = tn_state(&t);
	tn_emit(&t, x, entry, exit);
	if ((rc = t.rc))
		goto out;
	d.stamp = calloc(t.n, sizeof(*d.stamp));
	if (!d.stamp) {
		rc = -ENOMEM;
		goto out;
	}
	size_t base = o->n_st;
	d.exit = exit;
	dfa_close(&d, &entry, 1);
	for (size_t id = 0; id < d.n && !d.rc && !rc; id++)
		rc = dfa_state(&d, o, base, id);
	if (rc)
		goto out;
	rc = d.rc;
out:
	if (rc == -E2BIG) /* the caller's fault, like any other bad schema */
		rc = err_set(err, err_len, -EINVAL,
		             "the schema is too large to compile (a pattern, maxLength or "
		             "maxItems expands to too many states)");
	else if (rc == GB_OVER_BUDGET)
		rc = gb_error(b, err, err_len);
	else if (rc)
		err_set(err, err_len, rc, "out of memory");
	free(t.head);
	free(t.e);
	free(d.pool);
	free(d.set_off);
	free(d.hash);
	free(d.stamp);
	free(d.stk);
	free(d.buf);
	free(d.tgt);
	return rc;
}

/* ==== trimming ==== */

/* Who depends on each state: its predecessors by edge (entry s << 1) and
 * the calls that need it as their start or return (entry call << 1 | 1). */
struct deps {
	uint32_t *off;   /* (n_st + 2): state s's entries are ent[off[s]..off[s + 1]) */
	uint32_t *ent;   /* (n_ed + 2 * n_ca) */
	int32_t *caller; /* (n_ca) the state each call leaves from */
};

static int deps_build(const struct gout *o, struct deps *d)
{
	d->off = calloc(o->n_st + 2, sizeof(*d->off));
	d->ent = malloc((o->n_ed + 2 * o->n_ca + 1) * sizeof(*d->ent));
	d->caller = malloc((o->n_ca + 1) * sizeof(*d->caller));
	if (!d->off || !d->ent || !d->caller)
		return -ENOMEM;
	uint32_t *cnt = d->off + 2; /* counted at off[to + 2], summed into off[to + 1] */
	for (size_t e = 0; e < o->n_ed; e++)
		cnt[o->ed[e].to]++;
	for (size_t c = 0; c < o->n_ca; c++) {
		cnt[o->ca[c].start]++;
		cnt[o->ca[c].ret]++;
	}
	for (size_t s = 1; s <= o->n_st; s++)
		d->off[s + 1] += d->off[s];
	for (size_t s = 0; s < o->n_st; s++) {
		const struct gstate *st = &o->st[s];
		for (uint32_t k = 0; k < st->n_edges; k++)
			d->ent[d->off[o->ed[st->edge_off + k].to + 1]++] = (uint32_t)s << 1;
		for (uint32_t k = 0; k < st->n_calls; k++) {
			uint32_t c = st->call_off + k;
			d->caller[c] = (int32_t)s;
			d->ent[d->off[o->ca[c].start + 1]++] = c << 1 | 1;
			d->ent[d->off[o->ca[c].ret + 1]++] = c << 1 | 1;
		}
	}
	return 0;
}

/* Marks the states from which the rule can still return (a call counts
 * once both the callee can complete and its return state can), by a
 * worklist from the final states: linear, where sweeping until nothing
 * changes took a sweep per rule of a chain.  co: (n_st), zeroed. */
static int mark_live(const struct gout *o, bool *co)
{
	struct deps d = {0};
	int32_t *queue = malloc((o->n_st + 1) * sizeof(*queue));
	size_t head = 0, tail = 0;
	int rc = deps_build(o, &d);
	if (rc || !queue) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t s = 0; s < o->n_st; s++)
		if (o->st[s].final) {
			co[s] = true;
			queue[tail++] = (int32_t)s;
		}
	while (head < tail) {
		int32_t x = queue[head++];
		for (uint32_t k = d.off[x]; k < d.off[x + 1]; k++) {
			uint32_t v = d.ent[k] >> 1;
			int32_t s = d.ent[k] & 1 ? d.caller[v] : (int32_t)v;
			if (co[s] || (d.ent[k] & 1 && !(co[o->ca[v].start] && co[o->ca[v].ret])))
				continue;
			co[s] = true;
			queue[tail++] = s;
		}
	}
out:
	free(d.off);
	free(d.ent);
	free(d.caller);
	free(queue);
	return rc;
}

/* Drops every edge and call that leads where the rule can no longer
 * return (mark_live).  Fails when the root cannot complete at all. */
static int trim(struct gbuild *b, struct gout *o, int32_t root, char *err, size_t err_len)
{
	if (gb_spend(b, 4 * (o->n_st + o->n_ed + 2 * o->n_ca)))
		return gb_error(b, err, err_len);
	bool *co = calloc(o->n_st ? o->n_st : 1, sizeof(*co));
	if (!co || mark_live(o, co)) {
		free(co);
		return err_set(err, err_len, -ENOMEM, "out of memory");
	}
	size_t ne = 0, nc = 0;
	for (size_t s = 0; s < o->n_st; s++) {
		struct gstate *st = &o->st[s];
		uint32_t e0 = st->edge_off, c0 = st->call_off;
		st->edge_off = (uint32_t)ne;
		st->call_off = (uint32_t)nc;
		for (uint32_t k = 0; k < st->n_edges; k++)
			if (co[o->ed[e0 + k].to])
				o->ed[ne++] = o->ed[e0 + k];
		for (uint32_t k = 0; k < st->n_calls; k++) {
			struct gcall c = o->ca[c0 + k];
			if (co[c.start] && co[c.ret])
				o->ca[nc++] = c;
		}
		st->n_edges = (uint16_t)(ne - st->edge_off);
		st->n_calls = (uint16_t)(nc - st->call_off);
	}
	o->n_ed = ne;
	o->n_ca = nc;
	bool ok = co[root];
	free(co);
	if (!ok)
		return err_set(err, err_len, -EINVAL, "the schema admits no value");
	return 0;
}

/* ==== left recursion ==== */

/* A rule that can call itself before reading a byte would make the matcher
 * push forever, so such grammars are refused.  Rules whose text may be
 * empty (nullable) are skipped over; "r calls q first" follows calls made
 * from the states r reaches without a byte. */
struct lr {
	struct gbuild *b; /* charged for the work */
	const struct gout *o;
	const int32_t *rule_start;
	size_t n_rules;
	int32_t *rule_of; /* state -> its rule */
	int32_t *stack;   /* (states) */
	uint32_t *seen;   /* (states) stamp */
	uint32_t gen;
	bool *nullable; /* (rules) */
	uint8_t *color; /* (rules) 0 new, 1 on the path, 2 done */
};

static size_t lr_end(const struct lr *l, size_t r)
{
	return r + 1 < l->n_rules ? (size_t)l->rule_start[r + 1] : l->o->n_st;
}

/* Stamps the states of rule r reachable from its start without a byte. */
static void lr_reach(struct lr *l, size_t r)
{
	size_t top = 0;
	int32_t from = l->rule_start[r];
	l->gen++;
	l->stack[top++] = from;
	l->seen[from] = l->gen;
	while (top) {
		const struct gstate *st = &l->o->st[l->stack[--top]];
		gb_spend(l->b, 1 + st->n_calls); /* checked by the callers, once per walk */
		for (uint32_t k = 0; k < st->n_calls; k++) {
			const struct gcall *c = &l->o->ca[st->call_off + k];
			if (l->nullable[l->rule_of[c->start]] && l->seen[c->ret] != l->gen) {
				l->seen[c->ret] = l->gen;
				l->stack[top++] = c->ret;
			}
		}
	}
}

static void lr_nullable(struct lr *l)
{
	for (bool changed = true; changed;) {
		changed = false;
		for (size_t r = 0; r < l->n_rules && !gb_over_budget(l->b); r++) {
			if (l->nullable[r])
				continue;
			lr_reach(l, r);
			for (size_t s = (size_t)l->rule_start[r]; s < lr_end(l, r); s++)
				if (l->seen[s] == l->gen && l->o->st[s].final) {
					l->nullable[r] = changed = true;
					break;
				}
		}
	}
}

/* Depth-first over "calls first": true when it comes back to a rule on
 * the current path.  Recursion depth is at most the number of rules. */
static bool lr_cycle(struct lr *l, size_t r)
{
	l->color[r] = 1;
	if (gb_over_budget(l->b))
		return false; /* the caller reports it */
	lr_reach(l, r);
	uint32_t gen = l->gen;
	for (size_t s = (size_t)l->rule_start[r]; s < lr_end(l, r); s++) {
		if (l->seen[s] != gen)
			continue;
		const struct gstate *st = &l->o->st[s];
		for (uint32_t k = 0; k < st->n_calls; k++) {
			size_t q = (size_t)l->rule_of[l->o->ca[st->call_off + k].start];
			if (l->color[q] == 1 || (!l->color[q] && lr_cycle(l, q)))
				return true;
			if (gb_over_budget(l->b))
				return false;
			lr_reach(l, r); /* the callee's walk used the stamps */
			gen = l->gen;
		}
	}
	l->color[r] = 2;
	return false;
}

static int check_left_recursion(struct gbuild *b, const struct gout *o, const int32_t *rule_start,
                                size_t n_rules, char *err, size_t err_len)
{
	size_t n = o->n_st ? o->n_st : 1;
	struct lr l = {.b = b, .o = o, .rule_start = rule_start, .n_rules = n_rules};
	l.rule_of = malloc(n * sizeof(*l.rule_of));
	l.stack = malloc(n * sizeof(*l.stack));
	l.seen = calloc(n, sizeof(*l.seen));
	l.nullable = calloc(n_rules + 1, sizeof(*l.nullable));
	l.color = calloc(n_rules + 1, 1);
	int rc = 0;
	if (!l.rule_of || !l.stack || !l.seen || !l.nullable || !l.color) {
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t r = 0; r < n_rules; r++)
		for (size_t s = (size_t)rule_start[r]; s < lr_end(&l, r); s++)
			l.rule_of[s] = (int32_t)r;
	lr_nullable(&l);
	for (size_t r = 0; r < n_rules && !rc; r++)
		if (!l.color[r] && lr_cycle(&l, r))
			rc = err_set(err, err_len, -EINVAL,
			             "a $ref recursion can recur without any text in between");
	if (!rc && gb_over_budget(b))
		rc = gb_error(b, err, err_len);
out:
	free(l.rule_of);
	free(l.stack);
	free(l.seen);
	free(l.nullable);
	free(l.color);
	return rc;
}

int gb_finish(struct gbuild *b, int root_rule, struct grammar **out, char *path, size_t path_cap,
              char *err, size_t err_len)
{
	struct gout o = {0};
	struct bclasses bc = {0};
	int32_t *rule_start = NULL;
	struct grammar *g = NULL;
	int rc = 0;
	*out = NULL;
	if (b->failed || root_rule < 0) {
		rc = gb_error(b, err, err_len);
		goto out;
	}
	rule_start = malloc((b->n_rules ? b->n_rules : 1) * sizeof(*rule_start));
	if (!rule_start) {
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
		goto out;
	}
	if (gb_spend(b, 256 * (b->n_sets + 1))) { /* classes_build looks at every byte per set */
		rc = gb_error(b, err, err_len);
		goto out;
	}
	classes_build(b, &bc);
	if (classes_of_sets(b, &bc)) {
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t r = 0; r < b->n_rules; r++) {
		if (b->rules[r] < 0) {
			rc = err_set(err, err_len, -EINVAL, "internal: rule %zu is never defined",
			             r);
			goto out;
		}
		rule_start[r] = (int32_t)o.n_st;
		if ((rc = rule_compile(b, &bc, b->rules[r], &o, err, err_len))) {
			/* where in the schema the rule that blew up comes from */
			if (rc == -EINVAL && b->labels[r] && path && path_cap)
				snprintf(path, path_cap, "%s", b->labels[r]);
			goto out;
		}
	}
	for (size_t c = 0; c < o.n_ca; c++)
		o.ca[c].start = rule_start[o.ca[c].start];
	if ((rc = trim(b, &o, rule_start[root_rule], err, err_len)) ||
	    (rc = check_left_recursion(b, &o, rule_start, b->n_rules, err, err_len)))
		goto out;
	g = calloc(1, sizeof(*g));
	if (!g || pthread_mutex_init(&g->lock, NULL)) {
		free(g);
		g = NULL;
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
		goto out;
	}
	atomic_init(&g->refs, 1);
	g->states = o.st;
	g->n_states = o.n_st;
	g->edges = o.ed;
	g->n_edges = o.n_ed;
	g->calls = o.ca;
	g->n_calls = o.n_ca;
	g->start = rule_start[root_rule];
	o = (struct gout){0};
	*out = g;
out:
	free(o.st);
	free(o.ed);
	free(o.ca);
	free(rule_start);
	free(bc.set_off);
	free(bc.set_cls);
	return rc;
}
