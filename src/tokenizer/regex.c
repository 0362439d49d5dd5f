/* The pre-tokenizer's regular expressions: a pattern is parsed into a small
 * tree, compiled to a backtracking program (CLASS / SPLIT / JMP / END /
 * NOTAHEAD / MATCH), and run with an explicit stack, so a long run of letters
 * costs heap, not C stack.  It supports what the tokenizer patterns use and
 * rejects the rest (lazy and possessive quantifiers, backreferences, general
 * lookaround, anchors other than $) with an error naming the pattern. */
#include "tokenizer/regex.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/unicode.h"
#include "util/errbuf.h"
#include "util/utf8.h"

#define REP_INF UINT32_MAX

enum re_op { OP_CLASS, OP_SPLIT, OP_JMP, OP_MATCH, OP_END, OP_NOTAHEAD };

struct re_insn {
	uint8_t op;
	uint32_t x, y; /* CLASS/NOTAHEAD: class index; SPLIT: first x, then y; JMP: x */
};

enum item_kind { IT_RANGE, IT_CATS, IT_NOTCATS, IT_SPACE, IT_NOTSPACE };

struct re_item {
	uint8_t kind;
	uint32_t lo, hi; /* IT_RANGE, inclusive */
	uint32_t mask;   /* IT_CATS / IT_NOTCATS: bits of enum ucat */
};

struct re_class {
	uint32_t first_item, n_items;
	bool negated;
};

struct ure {
	struct re_insn *code;
	size_t n_code, cap_code;
	struct re_class *classes;
	size_t n_classes, cap_classes;
	struct re_item *items;
	size_t n_items, cap_items;
};

/* ---- parse tree ---- */

enum node_kind { N_CLASS, N_SEQ, N_ALT, N_REP, N_END, N_NOTAHEAD };

struct node {
	uint8_t kind;
	uint32_t cls;      /* N_CLASS / N_NOTAHEAD */
	int first, last;   /* children (N_SEQ / N_ALT / N_REP) */
	int next;          /* sibling */
	uint32_t min, max; /* N_REP */
};

struct parser {
	const uint32_t *p; /* (n) pattern code points */
	size_t n, i;
	struct node *nodes;
	size_t n_nodes, cap_nodes;
	struct ure *re;
	const char *pattern;
	char *err;
	size_t err_len;
};

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 16;
	while (nc < need)
		nc *= 2;
	void *p = realloc(*arr, nc * elem);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = nc;
	return 0;
}

static int perr(struct parser *ps, const char *what)
{
	return err_set(ps->err, ps->err_len, -EINVAL, "regex %s at %zu: %s", ps->pattern, ps->i,
	               what);
}

static int new_node(struct parser *ps, enum node_kind kind)
{
	if (grow((void **)&ps->nodes, &ps->cap_nodes, ps->n_nodes + 1, sizeof(struct node)))
		return -ENOMEM;
	struct node *nd = &ps->nodes[ps->n_nodes];
	memset(nd, 0, sizeof(*nd));
	nd->kind = (uint8_t)kind;
	nd->first = nd->last = nd->next = -1;
	return (int)ps->n_nodes++;
}

static void add_child(struct parser *ps, int parent, int child)
{
	struct node *pn = &ps->nodes[parent];
	if (pn->last < 0)
		pn->first = child;
	else
		ps->nodes[pn->last].next = child;
	pn->last = child;
}

static int new_class(struct parser *ps, bool negated)
{
	struct ure *re = ps->re;
	if (grow((void **)&re->classes, &re->cap_classes, re->n_classes + 1,
	         sizeof(struct re_class)))
		return -ENOMEM;
	re->classes[re->n_classes] = (struct re_class){(uint32_t)re->n_items, 0, negated};
	return (int)re->n_classes++;
}

/* Items are appended to the most recently created class. */
static int add_item(struct parser *ps, struct re_item it)
{
	struct ure *re = ps->re;
	if (grow((void **)&re->items, &re->cap_items, re->n_items + 1, sizeof(struct re_item)))
		return -ENOMEM;
	re->items[re->n_items++] = it;
	re->classes[re->n_classes - 1].n_items++;
	return 0;
}

static const char *const cat_names[UCAT_COUNT] = {
    "Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
    "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};

/* \p{Name}: one letter = the whole major class, two letters = one category. */
static int category_mask(struct parser *ps, uint32_t *mask)
{
	char name[4] = {0};
	size_t len = 0;
	if (ps->i >= ps->n || ps->p[ps->i] != '{')
		return perr(ps, "expected { after \\p");
	ps->i++;
	while (ps->i < ps->n && ps->p[ps->i] != '}' && len < 3)
		name[len++] = (char)ps->p[ps->i++];
	if (ps->i >= ps->n || ps->p[ps->i] != '}' || len == 0 || len > 2)
		return perr(ps, "bad \\p{...} name");
	ps->i++;
	*mask = 0;
	for (int c = 0; c < UCAT_COUNT; c++)
		if (cat_names[c][0] == name[0] && (len == 1 || cat_names[c][1] == name[1]))
			*mask |= UCAT_BIT(c);
	return *mask ? 0 : perr(ps, "unknown \\p{...} category");
}

/* Parses the escape after a backslash.  Returns 1 with *lit set for a
 * literal character, 0 with *it set for a class item, or negative. */
static int parse_escape(struct parser *ps, struct re_item *it, uint32_t *lit)
{
	if (ps->i >= ps->n)
		return perr(ps, "trailing backslash");
	uint32_t c = ps->p[ps->i++];
	memset(it, 0, sizeof(*it));
	switch (c) {
	case 's':
		it->kind = IT_SPACE;
		return 0;
	case 'S':
		it->kind = IT_NOTSPACE;
		return 0;
	case 'd':
		it->kind = IT_CATS;
		it->mask = UCAT_BIT(UCAT_ND);
		return 0;
	case 'D':
		it->kind = IT_NOTCATS;
		it->mask = UCAT_BIT(UCAT_ND);
		return 0;
	case 'p':
	case 'P':
		it->kind = c == 'p' ? IT_CATS : IT_NOTCATS;
		return category_mask(ps, &it->mask);
	case 'r':
		*lit = '\r';
		return 1;
	case 'n':
		*lit = '\n';
		return 1;
	case 't':
		*lit = '\t';
		return 1;
	case 'f':
		*lit = '\f';
		return 1;
	case 'v':
		*lit = '\v';
		return 1;
	default:
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
			return perr(ps, "unsupported escape");
		*lit = c;
		return 1;
	}
}

static int class_element(struct parser *ps)
{
	struct re_item it;
	uint32_t lo;
	int rc;
	if (ps->p[ps->i] == '\\') {
		ps->i++;
		rc = parse_escape(ps, &it, &lo);
		if (rc < 0)
			return rc;
		if (rc == 0)
			return add_item(ps, it);
	} else {
		lo = ps->p[ps->i++];
	}
	uint32_t hi = lo;
	if (ps->i + 1 < ps->n && ps->p[ps->i] == '-' && ps->p[ps->i + 1] != ']') {
		ps->i++;
		if (ps->p[ps->i] == '\\') {
			ps->i++;
			rc = parse_escape(ps, &it, &hi);
			if (rc < 0)
				return rc;
			if (rc == 0)
				return perr(ps, "class item as range end");
		} else {
			hi = ps->p[ps->i++];
		}
		if (hi < lo)
			return perr(ps, "reversed range");
	}
	return add_item(ps, (struct re_item){.kind = IT_RANGE, .lo = lo, .hi = hi});
}

/* After '[': items up to the closing ']'. */
static int parse_class(struct parser *ps)
{
	bool neg = ps->i < ps->n && ps->p[ps->i] == '^';
	if (neg)
		ps->i++;
	int cls = new_class(ps, neg);
	if (cls < 0)
		return cls;
	while (ps->i < ps->n && ps->p[ps->i] != ']') {
		int rc = class_element(ps);
		if (rc < 0)
			return rc;
	}
	if (ps->i >= ps->n)
		return perr(ps, "unterminated class");
	ps->i++;
	int nd = new_node(ps, N_CLASS);
	if (nd >= 0)
		ps->nodes[nd].cls = (uint32_t)cls;
	return nd;
}

static int single_class_node(struct parser *ps, struct re_item it, bool negated)
{
	int cls = new_class(ps, negated);
	if (cls < 0 || add_item(ps, it) < 0)
		return -ENOMEM;
	int nd = new_node(ps, N_CLASS);
	if (nd >= 0)
		ps->nodes[nd].cls = (uint32_t)cls;
	return nd;
}

static int parse_alt(struct parser *ps);
static int parse_atom(struct parser *ps);

static int parse_group(struct parser *ps)
{
	bool lookahead = false;
	if (ps->i + 1 < ps->n && ps->p[ps->i] == '?') {
		if (ps->p[ps->i + 1] == ':')
			ps->i += 2;
		else if (ps->p[ps->i + 1] == '!') {
			ps->i += 2;
			lookahead = true;
		} else
			return perr(ps, "unsupported group");
	}
	int nd = lookahead ? parse_atom(ps) : parse_alt(ps);
	if (nd < 0)
		return nd;
	if (ps->i >= ps->n || ps->p[ps->i] != ')')
		return perr(ps, lookahead ? "lookahead must be one class" : "missing )");
	ps->i++;
	if (!lookahead)
		return nd;
	if (ps->nodes[nd].kind != N_CLASS)
		return perr(ps, "lookahead must be one class");
	ps->nodes[nd].kind = N_NOTAHEAD;
	return nd;
}

static int parse_atom(struct parser *ps)
{
	uint32_t c = ps->p[ps->i++];
	struct re_item it = {0};
	uint32_t lit = c;
	switch (c) {
	case '(':
		return parse_group(ps);
	case '[':
		return parse_class(ps);
	case '$':
		return new_node(ps, N_END);
	case '.':
		return single_class_node(
		    ps, (struct re_item){.kind = IT_RANGE, .lo = '\n', .hi = '\n'}, true);
	case '^':
	case ')':
	case '*':
	case '+':
	case '?':
	case '{':
		ps->i--;
		return perr(ps, "unexpected character");
	case '\\': {
		int rc = parse_escape(ps, &it, &lit);
		if (rc < 0)
			return rc;
		if (rc == 0)
			return single_class_node(ps, it, false);
		break;
	}
	default:
		break;
	}
	return single_class_node(ps, (struct re_item){.kind = IT_RANGE, .lo = lit, .hi = lit},
	                         false);
}

static int parse_number(struct parser *ps, uint32_t *out)
{
	size_t start = ps->i;
	uint32_t v = 0;
	while (ps->i < ps->n && ps->p[ps->i] >= '0' && ps->p[ps->i] <= '9' && v < 100000)
		v = v * 10 + (ps->p[ps->i++] - '0');
	*out = v;
	return ps->i > start ? 0 : -1;
}

/* {n}, {n,}, {n,m} after the '{'. */
static int parse_interval(struct parser *ps, uint32_t *min, uint32_t *max)
{
	if (parse_number(ps, min) < 0)
		return perr(ps, "bad interval");
	*max = *min;
	if (ps->i < ps->n && ps->p[ps->i] == ',') {
		ps->i++;
		*max = REP_INF;
		if (ps->i < ps->n && ps->p[ps->i] != '}' && parse_number(ps, max) < 0)
			return perr(ps, "bad interval");
	}
	if (ps->i >= ps->n || ps->p[ps->i] != '}' || *max < *min)
		return perr(ps, "bad interval");
	ps->i++;
	return 0;
}

static int parse_repeat(struct parser *ps)
{
	int atom = parse_atom(ps);
	if (atom < 0 || ps->i >= ps->n)
		return atom;
	uint32_t min = 0, max = 0;
	switch (ps->p[ps->i]) {
	case '?':
		min = 0;
		max = 1;
		break;
	case '*':
		min = 0;
		max = REP_INF;
		break;
	case '+':
		min = 1;
		max = REP_INF;
		break;
	case '{':
		break;
	default:
		return atom;
	}
	ps->i++;
	if (ps->p[ps->i - 1] == '{' && parse_interval(ps, &min, &max) < 0)
		return -EINVAL;
	if (ps->i < ps->n && (ps->p[ps->i] == '?' || ps->p[ps->i] == '+'))
		return perr(ps, "lazy and possessive quantifiers are not supported");
	int rep = new_node(ps, N_REP);
	if (rep < 0)
		return rep;
	ps->nodes[rep].min = min;
	ps->nodes[rep].max = max;
	add_child(ps, rep, atom);
	return rep;
}

static int parse_seq(struct parser *ps)
{
	int seq = new_node(ps, N_SEQ);
	while (seq >= 0 && ps->i < ps->n && ps->p[ps->i] != '|' && ps->p[ps->i] != ')') {
		int a = parse_repeat(ps);
		if (a < 0)
			return a;
		add_child(ps, seq, a);
	}
	return seq;
}

static int parse_alt(struct parser *ps)
{
	int seq = parse_seq(ps);
	if (seq < 0 || ps->i >= ps->n || ps->p[ps->i] != '|')
		return seq;
	int alt = new_node(ps, N_ALT);
	if (alt < 0)
		return alt;
	add_child(ps, alt, seq);
	while (ps->i < ps->n && ps->p[ps->i] == '|') {
		ps->i++;
		seq = parse_seq(ps);
		if (seq < 0)
			return seq;
		add_child(ps, alt, seq);
	}
	return alt;
}

/* ---- code generation ---- */

static int emit(struct ure *re, uint8_t op, uint32_t x, uint32_t y)
{
	if (grow((void **)&re->code, &re->cap_code, re->n_code + 1, sizeof(struct re_insn)))
		return -ENOMEM;
	re->code[re->n_code] = (struct re_insn){op, x, y};
	return (int)re->n_code++;
}

static int gen(struct ure *re, const struct node *nodes, int nd);

static int gen_alt(struct ure *re, const struct node *nodes, const struct node *n)
{
	size_t n_jumps = 0;
	int jumps[64];
	for (int c = n->first; c >= 0; c = nodes[c].next) {
		int split = -1;
		if (nodes[c].next >= 0 && (split = emit(re, OP_SPLIT, 0, 0)) < 0)
			return split;
		if (split >= 0)
			re->code[split].x = (uint32_t)re->n_code;
		int rc = gen(re, nodes, c);
		if (rc < 0)
			return rc;
		if (nodes[c].next < 0)
			break;
		if (n_jumps == 64)
			return -E2BIG;
		if ((jumps[n_jumps++] = emit(re, OP_JMP, 0, 0)) < 0)
			return -ENOMEM;
		re->code[split].y = (uint32_t)re->n_code;
	}
	for (size_t j = 0; j < n_jumps; j++)
		re->code[jumps[j]].x = (uint32_t)re->n_code;
	return 0;
}

static int gen_rep(struct ure *re, const struct node *nodes, const struct node *n)
{
	int rc;
	for (uint32_t k = 0; k < n->min; k++)
		if ((rc = gen(re, nodes, n->first)) < 0)
			return rc;
	if (n->max == REP_INF) {
		int split = emit(re, OP_SPLIT, 0, 0);
		if (split < 0)
			return split;
		re->code[split].x = (uint32_t)re->n_code;
		if ((rc = gen(re, nodes, n->first)) < 0 ||
		    (rc = emit(re, OP_JMP, (uint32_t)split, 0)) < 0)
			return rc;
		re->code[split].y = (uint32_t)re->n_code;
		return 0;
	}
	if (n->max - n->min > 64)
		return -E2BIG;
	int splits[64];
	uint32_t n_opt = n->max - n->min;
	for (uint32_t k = 0; k < n_opt; k++) {
		if ((splits[k] = emit(re, OP_SPLIT, 0, 0)) < 0)
			return -ENOMEM;
		re->code[splits[k]].x = (uint32_t)re->n_code;
		if ((rc = gen(re, nodes, n->first)) < 0)
			return rc;
	}
	for (uint32_t k = 0; k < n_opt; k++)
		re->code[splits[k]].y = (uint32_t)re->n_code;
	return 0;
}

static int gen(struct ure *re, const struct node *nodes, int nd)
{
	const struct node *n = &nodes[nd];
	switch (n->kind) {
	case N_CLASS:
		return emit(re, OP_CLASS, n->cls, 0) < 0 ? -ENOMEM : 0;
	case N_NOTAHEAD:
		return emit(re, OP_NOTAHEAD, n->cls, 0) < 0 ? -ENOMEM : 0;
	case N_END:
		return emit(re, OP_END, 0, 0) < 0 ? -ENOMEM : 0;
	case N_SEQ:
		for (int c = n->first; c >= 0; c = nodes[c].next) {
			int rc = gen(re, nodes, c);
			if (rc < 0)
				return rc;
		}
		return 0;
	case N_ALT:
		return gen_alt(re, nodes, n);
	default:
		return gen_rep(re, nodes, n);
	}
}

static int decode_pattern(const char *pattern, uint32_t **out, size_t *n)
{
	size_t len = strlen(pattern), k = 0;
	uint32_t *cps = malloc((len + 1) * sizeof(*cps));
	if (!cps)
		return -ENOMEM;
	for (size_t i = 0; i < len;) {
		size_t step;
		cps[k++] = utf8_decode((const unsigned char *)pattern + i, len - i, &step);
		i += step;
	}
	*out = cps;
	*n = k;
	return 0;
}

int ure_compile(const char *pattern, struct ure **out, char *err, size_t err_len)
{
	*out = NULL;
	struct ure *re = calloc(1, sizeof(*re));
	struct parser ps = {.re = re, .pattern = pattern, .err = err, .err_len = err_len};
	uint32_t *cps = NULL;
	int rc = -ENOMEM;
	if (!re || decode_pattern(pattern, &cps, &ps.n) < 0)
		goto out;
	ps.p = cps;
	int root = parse_alt(&ps);
	if (root >= 0 && ps.i < ps.n)
		root = perr(&ps, "unbalanced )");
	if ((rc = root) < 0)
		goto out;
	if ((rc = gen(re, ps.nodes, root)) < 0 || (rc = emit(re, OP_MATCH, 0, 0)) < 0) {
		err_set(err, err_len, rc, "regex %s: too complex", pattern);
		goto out;
	}
	*out = re;
	re = NULL;
	rc = 0;
out:
	if (rc == -ENOMEM)
		err_set(err, err_len, rc, "regex %s: out of memory", pattern);
	free(cps);
	free(ps.nodes);
	ure_free(re);
	return rc;
}

void ure_free(struct ure *re)
{
	if (!re)
		return;
	free(re->code);
	free(re->classes);
	free(re->items);
	free(re);
}

void ure_scratch_free(struct ure_scratch *sc)
{
	free(sc->stack);
	sc->stack = NULL;
	sc->cap = 0;
}

static bool class_has(const struct ure *re, uint32_t cls, uint32_t cp, uint8_t cl)
{
	const struct re_class *c = &re->classes[cls];
	const struct re_item *it = &re->items[c->first_item];
	bool in = false;
	for (uint32_t k = 0; k < c->n_items && !in; k++, it++) {
		switch (it->kind) {
		case IT_RANGE:
			in = cp >= it->lo && cp <= it->hi;
			break;
		case IT_CATS:
			in = (it->mask >> (cl & 0x7F)) & 1;
			break;
		case IT_NOTCATS:
			in = !((it->mask >> (cl & 0x7F)) & 1);
			break;
		case IT_SPACE:
			in = (cl & 0x80) != 0;
			break;
		default:
			in = (cl & 0x80) == 0;
			break;
		}
	}
	return in != c->negated;
}

long ure_match_at(const struct ure *re, struct ure_scratch *sc, const struct ure_text *t,
                  size_t pos, size_t end)
{
	size_t sp = 0;
	uint32_t pc = 0;
	size_t p = pos;
	for (;;) {
		const struct re_insn *in = &re->code[pc];
		switch (in->op) {
		case OP_CLASS:
			if (p < end && class_has(re, in->x, t->cp[p], t->cls[p])) {
				p++;
				pc++;
				continue;
			}
			break;
		case OP_SPLIT:
			if (grow((void **)&sc->stack, &sc->cap, 2 * sp + 2, sizeof(uint32_t)))
				return -ENOMEM;
			sc->stack[2 * sp] = in->y;
			sc->stack[2 * sp + 1] = (uint32_t)p;
			sp++;
			pc = in->x;
			continue;
		case OP_JMP:
			pc = in->x;
			continue;
		case OP_MATCH:
			return (long)p;
		case OP_END:
			if (p == end) {
				pc++;
				continue;
			}
			break;
		default: /* OP_NOTAHEAD */
			if (!(p < end && class_has(re, in->x, t->cp[p], t->cls[p]))) {
				pc++;
				continue;
			}
			break;
		}
		if (sp == 0)
			return -1;
		sp--;
		pc = sc->stack[2 * sp];
		p = sc->stack[2 * sp + 1];
	}
}
