/* Jinja parser: tokens to a read-only syntax tree, with the grammar and
 * operator precedence of @huggingface/jinja (lowest first: a if c else b,
 * or, and, not, comparisons and in, + - ~, * / // %, **, is, |, unary
 * sign, calls / attributes / subscripts).  That differs from Jinja2 in
 * places (there `~` binds looser than `+` and `-x|f` is -(x|f)); the tests
 * compare with the reference, so its choice wins.  Errors read
 * "LINE:COL: CONSTRUCT: message".  Nesting (brackets, blocks, unary
 * operators) is bounded so that hostile input cannot exhaust the stack. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"
#include "util/errbuf.h"

/* Deepest nesting of expressions and blocks the parser follows. */
#define JINJA_PARSE_MAX_DEPTH 100

struct nvec {
	struct jn **v;
	size_t n, cap;
};

struct parser {
	struct jarena *a;
	const struct jtok *t;
	size_t n, i;
	unsigned depth;
	unsigned loops;     /* for-bodies open around here (break / continue) */
	uint8_t *macro_flags; /* JF_* of the macro or call block being parsed */
	const char *ctx;    /* the construct being parsed, for messages */
	struct nvec names;  /* JN_NAME nodes, for jinja_template_uses */
	char *err;
	size_t err_len;
};

static int nvec_push(struct parser *p, struct nvec *v, struct jn *node)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 8;
		struct jn **nv = realloc(v->v, cap * sizeof(*nv));
		if (!nv)
			return err_set(p->err, p->err_len, JINJA_E_NOMEM, "out of memory");
		v->v = nv;
		v->cap = cap;
	}
	v->v[v->n++] = node;
	return 0;
}

/* Moves the vector into the arena. */
static int nvec_finish(struct parser *p, struct nvec *v, struct jn ***out, size_t *n)
{
	*out = NULL;
	*n = v->n;
	if (v->n) {
		*out = jarena_alloc(p->a, v->n * sizeof(**out));
		if (!*out) {
			free(v->v);
			v->v = NULL;
			return err_set(p->err, p->err_len, JINJA_E_NOMEM, "out of memory");
		}
		memcpy(*out, v->v, v->n * sizeof(**out));
	}
	free(v->v);
	v->v = NULL;
	v->n = v->cap = 0;
	return 0;
}

static const struct jtok *cur(const struct parser *p)
{
	return &p->t[p->i < p->n ? p->i : p->n - 1];
}

static const struct jtok *peek(const struct parser *p, size_t k)
{
	return &p->t[p->i + k < p->n ? p->i + k : p->n - 1];
}

static void describe(const struct jtok *t, char *buf, size_t len)
{
	switch (t->type) {
	case JT_EOF:
		snprintf(buf, len, "end of template");
		break;
	case JT_STRING:
		snprintf(buf, len, "a string");
		break;
	case JT_TEXT:
		snprintf(buf, len, "text");
		break;
	default:
		snprintf(buf, len, "'%.*s'", (int)(t->n > 24 ? 24 : t->n), t->s);
	}
}

static int perr(struct parser *p, const struct jtok *t, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int perr(struct parser *p, const struct jtok *t, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return err_set(p->err, p->err_len, JINJA_E_SYNTAX, "%u:%u: %s: %s", t->line, t->col, p->ctx,
		       msg);
}

static int expected(struct parser *p, const char *what)
{
	char found[64];
	describe(cur(p), found, sizeof(found));
	return perr(p, cur(p), "expected %s, found %s", what, found);
}

static bool is_type(const struct parser *p, uint8_t type)
{
	return cur(p)->type == type;
}

static bool is_word(const struct parser *p, size_t k, const char *w)
{
	const struct jtok *t = peek(p, k);
	return t->type == JT_IDENT && t->n == strlen(w) && memcmp(t->s, w, t->n) == 0;
}

static int expect(struct parser *p, uint8_t type, const char *what)
{
	if (!is_type(p, type))
		return expected(p, what);
	p->i++;
	return 0;
}

static struct jn *node(struct parser *p, uint8_t kind, const struct jtok *at)
{
	struct jn *n = jarena_alloc(p->a, sizeof(*n));
	if (!n) {
		err_set(p->err, p->err_len, JINJA_E_NOMEM, "out of memory");
		return NULL;
	}
	n->kind = kind;
	n->line = at->line;
	n->col = at->col;
	return n;
}

static int enter(struct parser *p)
{
	if (++p->depth > JINJA_PARSE_MAX_DEPTH)
		return perr(p, cur(p), "nested deeper than %d levels", JINJA_PARSE_MAX_DEPTH);
	return 0;
}

static int parse_expr(struct parser *p, struct jn **out);
static int parse_primary(struct parser *p, struct jn **out);
static int parse_args(struct parser *p, bool params, struct jn ***args, size_t *n);

static int make_binop(struct parser *p, const struct jtok *at, uint8_t op, struct jn *l,
		      struct jn *r, struct jn **out)
{
	struct jn *n = node(p, JN_BINOP, at);
	if (!n)
		return JINJA_E_NOMEM;
	n->op = op;
	n->a = l;
	n->b = r;
	*out = n;
	return 0;
}

static int parse_member(struct parser *p, struct jn **obj);

static int parse_slice(struct parser *p, const struct jtok *at, struct jn **obj)
{
	struct jn *parts[3] = {0};
	size_t np = 0;
	bool slice = false;
	int rc;
	while (!is_type(p, JT_RBRACKET)) {
		if (np == 3)
			return perr(p, cur(p), "a slice has at most 3 parts");
		if (is_type(p, JT_COLON)) {
			parts[np++] = NULL;
			p->i++;
			slice = true;
			continue;
		}
		if ((rc = parse_expr(p, &parts[np++])))
			return rc;
		if (is_type(p, JT_COLON)) {
			p->i++;
			slice = true;
		} else if (!is_type(p, JT_RBRACKET)) {
			return expected(p, "']' or ':'");
		}
	}
	if (np == 0)
		return perr(p, cur(p), "expected a subscript in []");
	p->i++;
	struct jn *n = node(p, slice ? JN_SLICE : JN_MEMBER, at);
	if (!n)
		return JINJA_E_NOMEM;
	n->a = *obj;
	n->b = parts[0];
	if (slice) {
		n->c = parts[1];
		n->d = parts[2];
	}
	*obj = n;
	return 0;
}

static int parse_member(struct parser *p, struct jn **obj)
{
	int rc;
	while (is_type(p, JT_DOT) || is_type(p, JT_LBRACKET)) {
		const struct jtok *at = cur(p);
		p->i++;
		if (at->type == JT_LBRACKET) {
			if ((rc = enter(p)) || (rc = parse_slice(p, at, obj)))
				return rc;
			p->depth--;
			continue;
		}
		const struct jtok *name = cur(p);
		struct jn *n = node(p, JN_MEMBER, at);
		if (!n)
			return JINJA_E_NOMEM;
		n->a = *obj;
		if (name->type == JT_IDENT) {
			n->s = name->s;
			n->sn = name->n;
		} else if (name->type == JT_NUMBER && !memchr(name->s, '.', name->n)) {
			n->i = strtoll(name->s, NULL, 10);
			n->op = 1; /* an integer member: x.0 */
		} else {
			return expected(p, "a name or an integer after '.'");
		}
		p->i++;
		*obj = n;
	}
	return 0;
}

static int parse_call(struct parser *p, struct jn *callee, struct jn **out)
{
	for (;;) {
		struct jn *n = node(p, JN_CALL, cur(p));
		if (!n)
			return JINJA_E_NOMEM;
		n->a = callee;
		int rc = parse_args(p, false, &n->args, &n->n_args);
		if (rc || (rc = parse_member(p, &n)))
			return rc;
		callee = n;
		if (!is_type(p, JT_LPAREN))
			break;
	}
	*out = callee;
	return 0;
}

static int parse_unary(struct parser *p, struct jn **out)
{
	const struct jtok *t = cur(p);
	int rc;
	if ((t->type == JT_UNARY || t->type == JT_ADD) && t->n == 1 &&
	    (t->s[0] == '-' || t->s[0] == '+')) {
		p->i++;
		struct jn *n = node(p, JN_UNARY, t);
		if (!n)
			return JINJA_E_NOMEM;
		n->op = t->s[0] == '-' ? JOP_NEG : JOP_POS;
		if ((rc = enter(p)) || (rc = parse_unary(p, &n->a)))
			return rc;
		p->depth--;
		*out = n;
		return 0;
	}
	if ((rc = parse_primary(p, out)) || (rc = parse_member(p, out)))
		return rc;
	if (is_type(p, JT_LPAREN))
		return parse_call(p, *out, out);
	return 0;
}

static int parse_filter(struct parser *p, struct jn **out)
{
	int rc = parse_unary(p, out);
	while (!rc && is_type(p, JT_PIPE)) {
		p->i++;
		const struct jtok *name = cur(p);
		if (name->type != JT_IDENT)
			return expected(p, "a filter name after '|'");
		p->i++;
		struct jn *n = node(p, JN_FILTER, name);
		if (!n)
			return JINJA_E_NOMEM;
		n->a = *out;
		n->s = name->s;
		n->sn = name->n;
		if (is_type(p, JT_LPAREN)) {
			n->op = 1; /* called with parentheses */
			rc = parse_args(p, false, &n->args, &n->n_args);
		}
		*out = n;
	}
	return rc;
}

/* Beyond the reference (which takes no test arguments): `is divisibleby(3)`
 * and Jinja2's `is divisibleby 3` with one literal. */
static int parse_test_args(struct parser *p, struct jn *n)
{
	if (is_type(p, JT_LPAREN))
		return parse_args(p, false, &n->args, &n->n_args);
	if (is_type(p, JT_NUMBER) || is_type(p, JT_STRING)) {
		n->args = jarena_alloc(p->a, sizeof(*n->args));
		if (!n->args)
			return err_set(p->err, p->err_len, JINJA_E_NOMEM, "out of memory");
		n->n_args = 1;
		return parse_primary(p, &n->args[0]);
	}
	return 0;
}

static int parse_test(struct parser *p, struct jn **out)
{
	int rc = parse_filter(p, out);
	while (!rc && is_word(p, 0, "is")) {
		p->i++;
		bool negate = is_word(p, 0, "not");
		p->i += negate;
		const struct jtok *name = cur(p);
		if (name->type != JT_IDENT)
			return expected(p, "a test name after 'is'");
		p->i++;
		struct jn *n = node(p, JN_TEST, name);
		if (!n)
			return JINJA_E_NOMEM;
		n->a = *out;
		n->s = name->s;
		n->sn = name->n;
		n->op = negate;
		rc = parse_test_args(p, n);
		*out = n;
	}
	return rc;
}

static int parse_pow(struct parser *p, struct jn **out)
{
	int rc = parse_test(p, out);
	while (!rc && is_type(p, JT_POW)) {
		const struct jtok *at = cur(p);
		struct jn *r;
		p->i++;
		if ((rc = parse_test(p, &r)))
			return rc;
		rc = make_binop(p, at, JOP_POW, *out, r, out);
	}
	return rc;
}

static int parse_mul(struct parser *p, struct jn **out)
{
	int rc = parse_pow(p, out);
	while (!rc && is_type(p, JT_MUL)) {
		const struct jtok *at = cur(p);
		uint8_t op = at->s[0] == '*' ? JOP_MUL
			     : at->s[0] == '%' ? JOP_MOD
			     : at->n == 2      ? JOP_FLOORDIV
					       : JOP_DIV;
		struct jn *r;
		p->i++;
		if ((rc = parse_pow(p, &r)))
			return rc;
		rc = make_binop(p, at, op, *out, r, out);
	}
	return rc;
}

static int parse_add(struct parser *p, struct jn **out)
{
	int rc = parse_mul(p, out);
	while (!rc && is_type(p, JT_ADD)) {
		const struct jtok *at = cur(p);
		uint8_t op = at->s[0] == '+' ? JOP_ADD : at->s[0] == '-' ? JOP_SUB : JOP_CONCAT;
		struct jn *r;
		p->i++;
		if ((rc = parse_mul(p, &r)))
			return rc;
		rc = make_binop(p, at, op, *out, r, out);
	}
	return rc;
}

static int cmp_op(const struct jtok *t)
{
	static const char *names[] = {"==", "!=", "<", ">", "<=", ">="};
	static const uint8_t ops[] = {JOP_EQ, JOP_NE, JOP_LT, JOP_GT, JOP_LE, JOP_GE};
	for (size_t i = 0; i < 6; i++)
		if (t->n == strlen(names[i]) && memcmp(t->s, names[i], t->n) == 0)
			return ops[i];
	return 0;
}

static int parse_compare(struct parser *p, struct jn **out)
{
	int rc = parse_add(p, out);
	while (!rc) {
		const struct jtok *at = cur(p);
		uint8_t op;
		if (is_word(p, 0, "not") && is_word(p, 1, "in")) {
			op = JOP_NOTIN;
			p->i += 2;
		} else if (is_word(p, 0, "in")) {
			op = JOP_IN;
			p->i++;
		} else if (is_type(p, JT_CMP)) {
			op = (uint8_t)cmp_op(at);
			p->i++;
		} else {
			break;
		}
		struct jn *r;
		if ((rc = parse_add(p, &r)))
			return rc;
		rc = make_binop(p, at, op, *out, r, out);
	}
	return rc;
}

static int parse_not(struct parser *p, struct jn **out)
{
	if (!is_word(p, 0, "not"))
		return parse_compare(p, out);
	struct jn *n = node(p, JN_UNARY, cur(p));
	if (!n)
		return JINJA_E_NOMEM;
	p->i++;
	n->op = JOP_NOT;
	int rc = enter(p);
	if (rc || (rc = parse_not(p, &n->a)))
		return rc;
	p->depth--;
	*out = n;
	return 0;
}

static int parse_logic(struct parser *p, const char *word, struct jn **out)
{
	bool is_or = word[0] == 'o';
	int rc = is_or ? parse_logic(p, "and", out) : parse_not(p, out);
	while (!rc && is_word(p, 0, word)) {
		const struct jtok *at = cur(p);
		struct jn *r;
		p->i++;
		if ((rc = is_or ? parse_logic(p, "and", &r) : parse_not(p, &r)))
			return rc;
		rc = make_binop(p, at, is_or ? JOP_OR : JOP_AND, *out, r, out);
	}
	return rc;
}

static int parse_expr(struct parser *p, struct jn **out)
{
	int rc = enter(p);
	if (rc || (rc = parse_logic(p, "or", out)))
		return rc;
	if (is_word(p, 0, "if")) {
		const struct jtok *at = cur(p);
		p->i++;
		struct jn *test, *n;
		if ((rc = parse_logic(p, "or", &test)))
			return rc;
		if (is_word(p, 0, "else")) {
			p->i++;
			if (!(n = node(p, JN_TERNARY, at)))
				return JINJA_E_NOMEM;
			n->a = test;
			n->b = *out;
			if ((rc = parse_expr(p, &n->c)))
				return rc;
		} else {
			if (!(n = node(p, JN_SELECT, at)))
				return JINJA_E_NOMEM;
			n->a = *out;
			n->b = test;
		}
		*out = n;
	}
	p->depth--;
	return 0;
}

/* a, b, c: a tuple when there is a comma (for/set targets and values). */
static int parse_sequence(struct parser *p, bool primary, struct jn **out)
{
	const struct jtok *at = cur(p);
	int rc = primary ? parse_primary(p, out) : parse_expr(p, out);
	if (rc || !is_type(p, JT_COMMA))
		return rc;
	struct nvec items = {0};
	if ((rc = nvec_push(p, &items, *out)))
		return rc;
	while (is_type(p, JT_COMMA)) {
		p->i++;
		struct jn *e;
		if ((rc = primary ? parse_primary(p, &e) : parse_expr(p, &e)) ||
		    (rc = nvec_push(p, &items, e)))
			goto fail;
	}
	struct jn *n = node(p, JN_TUPLE, at);
	if (!n) {
		rc = JINJA_E_NOMEM;
		goto fail;
	}
	*out = n;
	return nvec_finish(p, &items, &n->args, &n->n_args);
fail:
	free(items.v);
	return rc;
}

static int parse_number(struct parser *p, const struct jtok *t, struct jn **out)
{
	char buf[64];
	if (t->n >= sizeof(buf))
		return perr(p, t, "number literal too long");
	memcpy(buf, t->s, t->n);
	buf[t->n] = '\0';
	bool is_float = memchr(t->s, '.', t->n) != NULL;
	struct jn *n = node(p, is_float ? JN_FLOAT : JN_INT, t);
	if (!n)
		return JINJA_E_NOMEM;
	errno = 0;
	if (is_float)
		n->f = strtod(buf, NULL);
	else
		n->i = strtoll(buf, NULL, 10);
	if (errno == ERANGE)
		return perr(p, t, "number %s out of range", buf);
	*out = n;
	return 0;
}

static int parse_string(struct parser *p, const struct jtok *t, struct jn **out)
{
	size_t total = t->n, k = 1;
	while (peek(p, k - 1)->type == JT_STRING) {
		if (k > 1)
			total += peek(p, k - 1)->n;
		k++;
	}
	struct jn *n = node(p, JN_STR, t);
	char *s = n ? jarena_alloc(p->a, total + 1) : NULL;
	if (!s)
		return err_set(p->err, p->err_len, JINJA_E_NOMEM, "out of memory");
	/* adjacent literals join: 'a' "b" is "ab" */
	size_t off = 0;
	while (is_type(p, JT_STRING)) {
		memcpy(s + off, cur(p)->s, cur(p)->n);
		off += cur(p)->n;
		p->i++;
	}
	n->s = s;
	n->sn = off;
	*out = n;
	return 0;
}

static int parse_list_or_dict(struct parser *p, const struct jtok *t, struct jn **out)
{
	bool dict = t->type == JT_LBRACE;
	struct nvec keys = {0}, vals = {0};
	struct jn *n = node(p, dict ? JN_DICT : JN_LIST, t);
	int rc = n ? enter(p) : JINJA_E_NOMEM;
	while (!rc && !is_type(p, dict ? JT_RBRACE : JT_RBRACKET)) {
		struct jn *e;
		if ((rc = parse_expr(p, &e)) || (rc = nvec_push(p, &keys, e)))
			break;
		if (dict) {
			if ((rc = expect(p, JT_COLON, "':' after a key")) ||
			    (rc = parse_expr(p, &e)) || (rc = nvec_push(p, &vals, e)))
				break;
		}
		if (is_type(p, JT_COMMA))
			p->i++;
	}
	if (rc) {
		free(keys.v);
		free(vals.v);
		return rc;
	}
	p->i++;
	p->depth--;
	*out = n;
	if ((rc = nvec_finish(p, &keys, &n->args, &n->n_args)))
		free(vals.v);
	else
		rc = nvec_finish(p, &vals, &n->alt, &n->n_alt);
	return rc;
}

static int note_name(struct parser *p, struct jn *n)
{
	static const struct {
		const char *name;
		uint8_t flag;
	} special[] = {{"caller", JF_CALLER}, {"kwargs", JF_KWARGS}, {"varargs", JF_VARARGS}};
	for (size_t i = 0; p->macro_flags && i < 3; i++)
		if (n->sn == strlen(special[i].name) && memcmp(n->s, special[i].name, n->sn) == 0)
			*p->macro_flags |= special[i].flag;
	return nvec_push(p, &p->names, n);
}

static int parse_primary(struct parser *p, struct jn **out)
{
	const struct jtok *t = cur(p);
	int rc;
	switch (t->type) {
	case JT_NUMBER:
		p->i++;
		return parse_number(p, t, out);
	case JT_STRING:
		return parse_string(p, t, out);
	case JT_IDENT:
		p->i++;
		if (!(*out = node(p, JN_NAME, t)))
			return JINJA_E_NOMEM;
		(*out)->s = t->s;
		(*out)->sn = t->n;
		return note_name(p, *out);
	case JT_LPAREN:
		p->i++;
		if ((rc = enter(p)) || (rc = parse_sequence(p, false, out)) ||
		    (rc = expect(p, JT_RPAREN, "')'")))
			return rc;
		p->depth--;
		return 0;
	case JT_LBRACKET:
	case JT_LBRACE:
		p->i++;
		return parse_list_or_dict(p, t, out);
	default:
		return expected(p, "an expression");
	}
}

/* ( args ): call arguments, or a macro's parameters (names, name=default). */
static int parse_args(struct parser *p, bool params, struct jn ***args, size_t *n)
{
	struct nvec v = {0};
	bool keyword = false;
	int rc = expect(p, JT_LPAREN, "'('");
	if (!rc)
		rc = enter(p);
	while (!rc && !is_type(p, JT_RPAREN)) {
		const struct jtok *at = cur(p);
		struct jn *e;
		if (is_type(p, JT_MUL) || is_type(p, JT_POW)) {
			rc = perr(p, at, "argument unpacking (* and **) is not supported");
			break;
		}
		if ((rc = parse_expr(p, &e)))
			break;
		if (is_type(p, JT_EQUALS)) {
			p->i++;
			if (e->kind != JN_NAME) {
				rc = perr(p, at, "expected a name before '='");
				break;
			}
			struct jn *kw = node(p, JN_KWARG, at);
			if (!kw || (rc = parse_expr(p, &kw->a))) {
				rc = kw ? rc : JINJA_E_NOMEM;
				break;
			}
			kw->s = e->s;
			kw->sn = e->sn;
			e = kw;
			keyword = true;
		} else if (keyword) {
			rc = perr(p, at, params ? "a parameter without default follows one with a default"
						: "a positional argument follows a keyword argument");
			break;
		} else if (params && e->kind != JN_NAME) {
			rc = perr(p, at, "expected a parameter name");
			break;
		}
		for (size_t i = 0; params && i < v.n; i++)
			if (v.v[i]->sn == e->sn && memcmp(v.v[i]->s, e->s, e->sn) == 0)
				rc = perr(p, at, "duplicate parameter '%.*s'", (int)e->sn, e->s);
		if (rc || (rc = nvec_push(p, &v, e)))
			break;
		if (is_type(p, JT_COMMA))
			p->i++;
	}
	if (!rc)
		rc = expect(p, JT_RPAREN, "')'");
	if (rc) {
		free(v.v);
		return rc;
	}
	p->depth--;
	return nvec_finish(p, &v, args, n);
}

/* ---- statements ---- */

static int parse_any(struct parser *p, struct jn **out);

/* Whether the next tokens are {% one-of-words. */
static bool at_stmt(const struct parser *p, const char *const *words)
{
	if (cur(p)->type != JT_OPEN_STMT)
		return false;
	for (size_t i = 0; words[i]; i++)
		if (is_word(p, 1, words[i]))
			return true;
	return false;
}

/* {% endX %}, {% else %} or {% elif %} that the open block does not take. */
static bool stray_end(const struct parser *p)
{
	const struct jtok *t = peek(p, 1);
	return t->type == JT_IDENT && ((t->n >= 3 && memcmp(t->s, "end", 3) == 0) ||
				       is_word(p, 1, "else") || is_word(p, 1, "elif"));
}

/* Statements up to one of `until` (left unconsumed). */
static int parse_block(struct parser *p, const struct jtok *opener, const char *const *until,
		       struct jn ***body, size_t *n)
{
	struct nvec v = {0};
	int rc = enter(p);
	const char *ctx = p->ctx;
	while (!rc && !at_stmt(p, until)) {
		if (is_type(p, JT_EOF)) {
			p->ctx = ctx;
			rc = perr(p, cur(p), "not closed (opened at %u:%u)", opener->line, opener->col);
			break;
		}
		if (cur(p)->type == JT_OPEN_STMT && stray_end(p)) {
			char found[64];
			describe(peek(p, 1), found, sizeof(found));
			p->ctx = ctx;
			rc = perr(p, peek(p, 1), "not closed (opened at %u:%u), found %s", opener->line,
				  opener->col, found);
			break;
		}
		struct jn *s = NULL;
		if ((rc = parse_any(p, &s)))
			break;
		p->ctx = ctx;
		if (s)
			rc = nvec_push(p, &v, s);
	}
	if (rc) {
		free(v.v);
		return rc;
	}
	p->depth--;
	return nvec_finish(p, &v, body, n);
}

/* {% word %} closing a block. */
static int parse_end(struct parser *p, const char *word)
{
	p->i += 2;
	(void)word;
	return expect(p, JT_CLOSE_STMT, "'%}'");
}

static int parse_if(struct parser *p, const struct jtok *opener, struct jn **out)
{
	static const char *const until[] = {"elif", "else", "endif", NULL};
	static const char *const endif[] = {"endif", NULL};
	struct jn *n = node(p, JN_IF, opener);
	int rc = n ? parse_expr(p, &n->a) : JINJA_E_NOMEM;
	if (rc || (rc = expect(p, JT_CLOSE_STMT, "'%}'")) ||
	    (rc = parse_block(p, opener, until, &n->body, &n->n_body)))
		return rc;
	*out = n;
	if (is_word(p, 1, "elif")) {
		const struct jtok *at = peek(p, 1);
		p->i += 2;
		n->alt = jarena_alloc(p->a, sizeof(*n->alt));
		if (!n->alt)
			return JINJA_E_NOMEM;
		n->n_alt = 1;
		if ((rc = enter(p)) || (rc = parse_if(p, at, &n->alt[0])))
			return rc;
		p->depth--;
		return 0;
	}
	if (is_word(p, 1, "else")) {
		p->i += 2;
		if ((rc = expect(p, JT_CLOSE_STMT, "'%}'")) ||
		    (rc = parse_block(p, opener, endif, &n->alt, &n->n_alt)))
			return rc;
	}
	return 0;
}

static int parse_for(struct parser *p, const struct jtok *opener, struct jn **out)
{
	static const char *const until[] = {"endfor", "else", NULL};
	static const char *const endfor[] = {"endfor", NULL};
	struct jn *n = node(p, JN_FOR, opener);
	int rc = n ? parse_sequence(p, true, &n->a) : JINJA_E_NOMEM;
	if (rc)
		return rc;
	if (n->a->kind != JN_NAME && n->a->kind != JN_TUPLE)
		return perr(p, opener, "the loop variable must be a name or names");
	if (!is_word(p, 0, "in"))
		return expected(p, "'in'");
	p->i++;
	if ((rc = parse_expr(p, &n->b)) || (rc = expect(p, JT_CLOSE_STMT, "'%}'")))
		return rc;
	if (n->b->kind == JN_SELECT) { /* for x in xs if cond */
		n->c = n->b->b;
		n->b = n->b->a;
	}
	p->loops++;
	rc = parse_block(p, opener, until, &n->body, &n->n_body);
	p->loops--;
	if (rc)
		return rc;
	if (is_word(p, 1, "else")) {
		p->i += 2;
		if ((rc = expect(p, JT_CLOSE_STMT, "'%}'")) ||
		    (rc = parse_block(p, opener, endfor, &n->alt, &n->n_alt)))
			return rc;
	}
	*out = n;
	return parse_end(p, "endfor");
}

static int parse_set(struct parser *p, const struct jtok *opener, struct jn **out)
{
	static const char *const endset[] = {"endset", NULL};
	struct jn *n = node(p, JN_SET, opener);
	int rc = n ? parse_sequence(p, false, &n->a) : JINJA_E_NOMEM;
	if (rc)
		return rc;
	*out = n;
	if (is_type(p, JT_EQUALS)) {
		p->i++;
		if ((rc = parse_sequence(p, false, &n->b)))
			return rc;
		return expect(p, JT_CLOSE_STMT, "'%}'");
	}
	if ((rc = expect(p, JT_CLOSE_STMT, "'=' or '%}'")) ||
	    (rc = parse_block(p, opener, endset, &n->body, &n->n_body)))
		return rc;
	return parse_end(p, "endset");
}

/* Special names declared as parameters are plain parameters. */
static void drop_declared(struct jn *n)
{
	for (size_t i = 0; i < n->n_args; i++) {
		const struct jn *a = n->args[i];
		if (a->sn == 6 && memcmp(a->s, "caller", 6) == 0)
			n->flags &= (uint8_t)~JF_CALLER;
		if (a->sn == 6 && memcmp(a->s, "kwargs", 6) == 0)
			n->flags &= (uint8_t)~JF_KWARGS;
		if (a->sn == 7 && memcmp(a->s, "varargs", 7) == 0)
			n->flags &= (uint8_t)~JF_VARARGS;
	}
}

/* The body of a macro or a call block, noting which special names it reads. */
static int parse_callable_body(struct parser *p, const struct jtok *opener, struct jn *n,
			       const char *end)
{
	const char *const until[] = {end, NULL};
	uint8_t *outer = p->macro_flags;
	unsigned loops = p->loops;
	p->macro_flags = &n->flags;
	p->loops = 0;
	int rc = parse_block(p, opener, until, n->kind == JN_MACRO ? &n->body : &n->body, &n->n_body);
	p->macro_flags = outer;
	p->loops = loops;
	drop_declared(n);
	if (outer)
		*outer |= n->flags;
	return rc ? rc : parse_end(p, end);
}

static int parse_macro(struct parser *p, const struct jtok *opener, struct jn **out)
{
	struct jn *n = node(p, JN_MACRO, opener);
	const struct jtok *name = cur(p);
	if (!n)
		return JINJA_E_NOMEM;
	if (name->type != JT_IDENT)
		return expected(p, "a macro name");
	p->i++;
	n->s = name->s;
	n->sn = name->n;
	int rc = parse_args(p, true, &n->args, &n->n_args);
	if (rc || (rc = expect(p, JT_CLOSE_STMT, "'%}'")))
		return rc;
	*out = n;
	return parse_callable_body(p, opener, n, "endmacro");
}

static int parse_callblock(struct parser *p, const struct jtok *opener, struct jn **out)
{
	struct jn *n = node(p, JN_CALLBLOCK, opener);
	int rc = 0;
	if (!n)
		return JINJA_E_NOMEM;
	if (is_type(p, JT_LPAREN) && (rc = parse_args(p, true, &n->args, &n->n_args)))
		return rc;
	const struct jtok *name = cur(p);
	if (name->type != JT_IDENT)
		return expected(p, "the name of the macro to call");
	struct jn *callee;
	if ((rc = parse_primary(p, &callee)))
		return rc;
	if (!(n->a = node(p, JN_CALL, name)))
		return JINJA_E_NOMEM;
	n->a->a = callee;
	if ((rc = parse_args(p, false, &n->a->args, &n->a->n_args)) ||
	    (rc = expect(p, JT_CLOSE_STMT, "'%}'")))
		return rc;
	*out = n;
	return parse_callable_body(p, opener, n, "endcall");
}

static int parse_filterblock(struct parser *p, const struct jtok *opener, struct jn **out)
{
	static const char *const until[] = {"endfilter", NULL};
	struct jn *n = node(p, JN_FILTERBLOCK, opener);
	const struct jtok *name = cur(p);
	if (!n)
		return JINJA_E_NOMEM;
	if (name->type != JT_IDENT)
		return expected(p, "a filter name");
	p->i++;
	if (!(n->a = node(p, JN_FILTER, name)))
		return JINJA_E_NOMEM;
	n->a->s = name->s;
	n->a->sn = name->n;
	int rc = 0;
	if (is_type(p, JT_LPAREN)) {
		n->a->op = 1;
		rc = parse_args(p, false, &n->a->args, &n->a->n_args);
	}
	if (rc || (rc = expect(p, JT_CLOSE_STMT, "'%}'")) ||
	    (rc = parse_block(p, opener, until, &n->body, &n->n_body)))
		return rc;
	*out = n;
	return parse_end(p, "endfilter");
}

static int parse_loopctl(struct parser *p, const struct jtok *opener, bool brk, struct jn **out)
{
	if (p->loops == 0)
		return perr(p, opener, "outside a loop");
	if (!(*out = node(p, brk ? JN_BREAK : JN_CONTINUE, opener)))
		return JINJA_E_NOMEM;
	return expect(p, JT_CLOSE_STMT, "'%}'");
}

static int parse_statement(struct parser *p, struct jn **out)
{
	static const char *const names[] = {"if", "for", "set", "macro", "call", "filter",
					    "break", "continue"};
	const struct jtok *open = cur(p);
	const struct jtok *name = peek(p, 1);
	p->i++;
	if (name->type != JT_IDENT) {
		p->ctx = "{% %}";
		return expected(p, "a statement name");
	}
	size_t which = 0;
	while (which < 8 && !(name->n == strlen(names[which]) &&
			      memcmp(name->s, names[which], name->n) == 0))
		which++;
	p->i++;
	if (which == 8) {
		p->ctx = "{% %}";
		return perr(p, name, "unknown or unexpected statement '%.*s'",
			    (int)(name->n > 24 ? 24 : name->n), name->s);
	}
	static const char *const ctxs[] = {"{% if %}", "{% for %}", "{% set %}", "{% macro %}",
					   "{% call %}", "{% filter %}", "{% break %}",
					   "{% continue %}"};
	p->ctx = ctxs[which];
	switch (which) {
	case 0: {
		int rc = parse_if(p, open, out);
		return rc ? rc : parse_end(p, "endif");
	}
	case 1:
		return parse_for(p, open, out);
	case 2:
		return parse_set(p, open, out);
	case 3:
		return parse_macro(p, open, out);
	case 4:
		return parse_callblock(p, open, out);
	case 5:
		return parse_filterblock(p, open, out);
	default:
		return parse_loopctl(p, open, which == 6, out);
	}
}

static int parse_any(struct parser *p, struct jn **out)
{
	const struct jtok *t = cur(p);
	*out = NULL;
	switch (t->type) {
	case JT_COMMENT:
		p->i++;
		return 0;
	case JT_TEXT:
		p->i++;
		if (!(*out = node(p, JN_TEXT, t)))
			return JINJA_E_NOMEM;
		(*out)->s = t->s;
		(*out)->sn = t->n;
		return 0;
	case JT_OPEN_STMT:
		return parse_statement(p, out);
	case JT_OPEN_EXPR: {
		p->ctx = "{{ }}";
		p->i++;
		int rc = parse_expr(p, out);
		return rc ? rc : expect(p, JT_CLOSE_EXPR, "'}}'");
	}
	default:
		p->ctx = "template";
		return expected(p, "text, {{ or {%");
	}
}

static int name_cmp(const void *a, const void *b)
{
	const struct jn *x = *(const struct jn *const *)a, *y = *(const struct jn *const *)b;
	if (x->sn != y->sn)
		return x->sn < y->sn ? -1 : 1;
	return memcmp(x->s, y->s, x->sn);
}

/* The distinct names, sorted so that a template with many is still quick. */
static int collect_names(struct parser *p, struct jinja_template *t)
{
	t->names = jarena_alloc(p->a, (p->names.n + 1) * sizeof(*t->names));
	t->name_lens = jarena_alloc(p->a, (p->names.n + 1) * sizeof(*t->name_lens));
	if (!t->names || !t->name_lens)
		return err_set(p->err, p->err_len, JINJA_E_NOMEM, "out of memory");
	if (p->names.n)
		qsort(p->names.v, p->names.n, sizeof(*p->names.v), name_cmp);
	for (size_t i = 0; i < p->names.n; i++) {
		const struct jn *n = p->names.v[i];
		if (i > 0 && name_cmp(&p->names.v[i - 1], &p->names.v[i]) == 0)
			continue;
		t->names[t->n_names] = n->s;
		t->name_lens[t->n_names++] = n->sn;
	}
	return 0;
}

int jinja_parse(const char *src, size_t len, struct jinja_template **out, char *err,
		size_t err_len)
{
	*out = NULL;
	struct jinja_template *t = calloc(1, sizeof(*t));
	if (!t)
		return err_set(err, err_len, JINJA_E_NOMEM, "out of memory");
	struct jtok *toks = NULL;
	size_t n_toks = 0;
	int rc = jinja_lex(&t->arena, src ? src : "", src ? len : 0, &toks, &n_toks, err, err_len);
	if (rc)
		goto fail;
	struct parser p = {.a = &t->arena, .t = toks, .n = n_toks, .ctx = "template", .err = err,
			   .err_len = err_len};
	struct nvec body = {0};
	while (!rc && !is_type(&p, JT_EOF)) {
		struct jn *s = NULL;
		rc = parse_any(&p, &s);
		if (!rc && s)
			rc = nvec_push(&p, &body, s);
	}
	if (rc)
		free(body.v);
	else
		rc = nvec_finish(&p, &body, &t->body, &t->n_body);
	if (!rc)
		rc = collect_names(&p, t);
	free(p.names.v);
	if (rc)
		goto fail;
	free(toks);
	*out = t;
	return 0;
fail:
	free(toks);
	jinja_template_free(t);
	return rc;
}

void jinja_template_free(struct jinja_template *t)
{
	if (!t)
		return;
	jarena_free(&t->arena);
	free(t);
}

bool jinja_template_uses(const struct jinja_template *t, const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 0; t && i < t->n_names; i++)
		if (t->name_lens[i] == n && memcmp(t->names[i], name, n) == 0)
			return true;
	return false;
}
