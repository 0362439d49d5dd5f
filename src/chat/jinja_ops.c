/* Jinja binary operators, in the order of checks @huggingface/jinja makes
 * (the renderer our output must match): == and != are JavaScript's loose
 * equality; arithmetic and < > only between numbers; ~ joins any two
 * values as JavaScript strings (undefined as ""); + joins when either side
 * is a string; `in` looks into lists (by identity for containers),
 * strings and dict keys.  x / 0 (and // or % with a float) gives Infinity
 * or NaN as there; where JavaScript would put Infinity or NaN into an
 * integer (n // 0, n % 0) or lose integer precision, we refuse with an
 * error instead. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

static const char *op_name(int op)
{
	static const char *const names[] = {"?",  "and", "or", "==", "!=", "<",  ">",
					    "<=", ">=",  "in", "not in", "+", "-",  "~",
					    "*",  "/",   "//", "%",  "**"};
	return op >= 0 && op <= JOP_POW ? names[op] : "?";
}

static double as_double(struct jv v)
{
	return v.k == JV_INT ? (double)v.u.i : v.k == JV_BOOL ? (double)v.u.b : v.u.f;
}

static int int_arith(struct jctx *c, const struct jn *at, int op, int64_t a, int64_t b,
		     struct jv *out)
{
	int64_t r = 0;
	bool over = false;
	switch (op) {
	case JOP_ADD:
		over = __builtin_add_overflow(a, b, &r);
		break;
	case JOP_SUB:
		over = __builtin_sub_overflow(a, b, &r);
		break;
	case JOP_MUL:
		over = __builtin_mul_overflow(a, b, &r);
		break;
	case JOP_FLOORDIV:
	case JOP_MOD:
		if (b == 0)
			return jx_err(c, at, JINJA_E_RUNTIME, "%s: division by zero", op_name(op));
		if (a == INT64_MIN && b == -1) {
			over = op == JOP_FLOORDIV;
			r = 0;
			break;
		}
		if (op == JOP_MOD) { /* JavaScript's %: the sign of the dividend */
			r = a % b;
		} else {
			r = a / b;
			if (a % b != 0 && ((a < 0) != (b < 0)))
				r--;
		}
		break;
	default:
		break;
	}
	if (over)
		return jx_err(c, at, JINJA_E_RUNTIME, "%s: integer overflow", op_name(op));
	*out = jv_int(r);
	return 0;
}

static int num_arith(struct jctx *c, const struct jn *at, int op, struct jv l, struct jv r,
		     struct jv *out, bool *done)
{
	*done = true;
	bool ints = l.k == JV_INT && r.k == JV_INT;
	double a = as_double(l), b = as_double(r);
	switch (op) {
	case JOP_ADD:
	case JOP_SUB:
	case JOP_MUL:
		if (ints)
			return int_arith(c, at, op, l.u.i, r.u.i, out);
		*out = jv_float(op == JOP_ADD ? a + b : op == JOP_SUB ? a - b : a * b);
		return 0;
	case JOP_DIV: /* x / 0 is Infinity or NaN, as in JavaScript */
		*out = jv_float(a / b);
		return 0;
	case JOP_FLOORDIV:
	case JOP_MOD:
		if (ints)
			return int_arith(c, at, op, l.u.i, r.u.i, out);
		/* a float operand: NaN or an infinity for 0, as JavaScript */
		*out = jv_float(op == JOP_MOD ? fmod(a, b) : floor(a / b));
		return 0;
	case JOP_LT:
		*out = jv_bool(ints ? l.u.i < r.u.i : a < b);
		return 0;
	case JOP_GT:
		*out = jv_bool(ints ? l.u.i > r.u.i : a > b);
		return 0;
	case JOP_LE:
		*out = jv_bool(ints ? l.u.i <= r.u.i : a <= b);
		return 0;
	case JOP_GE:
		*out = jv_bool(ints ? l.u.i >= r.u.i : a >= b);
		return 0;
	default:
		*done = false;
		return 0;
	}
}

static int power(struct jctx *c, const struct jn *at, struct jv l, struct jv r, struct jv *out)
{
	double a = as_double(l), b = as_double(r);
	if (a == 0 && b < 0)
		return jx_err(c, at, JINJA_E_RUNTIME, "**: 0 cannot be raised to a negative power");
	if (l.k == JV_FLOAT || r.k == JV_FLOAT || b < 0) {
		double p = pow(a, b);
		if (!isfinite(p))
			return jx_err(c, at, JINJA_E_RUNTIME, "**: the result is not a finite number");
		*out = jv_float(p);
		return 0;
	}
	int64_t base = l.k == JV_BOOL ? l.u.b : l.u.i, e = r.k == JV_BOOL ? r.u.b : r.u.i, acc = 1;
	while (e > 0) { /* by squaring: log2(e) steps, overflow checked */
		if ((e & 1) && __builtin_mul_overflow(acc, base, &acc))
			return jx_err(c, at, JINJA_E_RUNTIME, "**: integer overflow");
		e >>= 1;
		if (e && __builtin_mul_overflow(base, base, &base))
			return jx_err(c, at, JINJA_E_RUNTIME, "**: integer overflow");
	}
	*out = jv_int(acc);
	return 0;
}

/* a's JavaScript string followed by b's (undefined as ""). */
static int js_concat(struct jctx *c, const struct jn *at, struct jv a, struct jv b, struct jv *out)
{
	if (a.k == JV_STR && b.k == JV_STR)
		return jx_str_cat(c, at, a.u.s.p, a.u.s.n, b.u.s.p, b.u.s.n, out);
	struct jbuf buf = {0};
	int rc = jv_js_string(c, at, &buf, a);
	if (!rc)
		rc = jv_js_string(c, at, &buf, b);
	if (!rc)
		rc = jx_buf_value(c, at, &buf, out);
	free(buf.p);
	return rc;
}

static bool contains(struct jv hay, struct jv needle)
{
	if (hay.k == JV_LIST) {
		for (size_t i = 0; i < hay.u.l->n; i++)
			if (jv_strict_eq(hay.u.l->v[i], needle))
				return true;
		return false;
	}
	if (hay.k == JV_DICT)
		return jx_dict_get(hay.u.d, needle.u.s.p, needle.u.s.n) != NULL;
	return needle.u.s.n == 0 || memmem(hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n) != NULL;
}

static int unknown(struct jctx *c, const struct jn *at, int op, struct jv l, struct jv r)
{
	return jx_err(c, at, JINJA_E_RUNTIME, "operator '%s' between %s and %s is not supported",
		      op_name(op), jv_type_name(l), jv_type_name(r));
}

/* The reference's checks after the number and undefined/none cases. */
static int binop_rest(struct jctx *c, const struct jn *at, int op, struct jv l, struct jv r,
		      struct jv *out)
{
	bool in = op == JOP_IN || op == JOP_NOTIN;
	if (op == JOP_CONCAT)
		return js_concat(c, at, l, r, out);
	bool lnum = l.k == JV_INT || l.k == JV_FLOAT || l.k == JV_BOOL;
	bool rnum = r.k == JV_INT || r.k == JV_FLOAT || r.k == JV_BOOL;
	if (op == JOP_POW && lnum && rnum)
		return power(c, at, l, r, out);
	if (l.k == JV_LIST && r.k == JV_LIST) {
		if (op == JOP_ADD) {
			if (l.u.l->n > SIZE_MAX / 4 - r.u.l->n)
				return unknown(c, at, op, l, r);
			int rc = jx_list_new(c, at, l.u.l->n + r.u.l->n, out);
			if (rc)
				return rc;
			if (l.u.l->n)
				memcpy(out->u.l->v, l.u.l->v, l.u.l->n * sizeof(struct jv));
			if (r.u.l->n)
				memcpy(out->u.l->v + l.u.l->n, r.u.l->v, r.u.l->n * sizeof(struct jv));
			return 0;
		}
	} else if (r.k == JV_LIST && in) {
		int rc = jx_charge(c, at, r.u.l->n);
		*out = jv_bool(contains(r, l) == (op == JOP_IN));
		return rc;
	}
	if ((l.k == JV_STR || r.k == JV_STR) && op == JOP_ADD) {
		if (c->jinja2_only && l.k != r.k) /* Python's str + list is a TypeError */
			return jx_err(c, at, JINJA_E_RUNTIME,
				      "operator '+' between %s and %s: Jinja2 refuses it, and this render "
				      "follows Jinja2 (it went where only Jinja2 renders)",
				      jv_type_name(l), jv_type_name(r));
		return js_concat(c, at, l, r, out);
	}
	if (l.k == JV_STR && (r.k == JV_STR || r.k == JV_DICT) && in) {
		int rc = jx_charge(c, at, r.k == JV_STR ? r.u.s.n / 64 : r.u.d->n);
		*out = jv_bool(contains(r, l) == (op == JOP_IN));
		return rc;
	}
	return unknown(c, at, op, l, r);
}

int jx_binop(struct jctx *c, const struct jn *at, int op, struct jv l, struct jv r, struct jv *out)
{
	if (op == JOP_EQ || op == JOP_NE) {
		*out = jv_bool(jv_loose_eq(c, l, r) == (op == JOP_EQ));
		return 0;
	}
	bool lnum = l.k == JV_INT || l.k == JV_FLOAT, rnum = r.k == JV_INT || r.k == JV_FLOAT;
	if (lnum && rnum && op != JOP_CONCAT && op != JOP_POW) {
		bool done;
		int rc = num_arith(c, at, op, l, r, out, &done);
		if (rc || done)
			return rc;
		return unknown(c, at, op, l, r);
	}
	if (op == JOP_CONCAT && (l.k == JV_NONE || r.k == JV_NONE)) {
		/* Jinja2's ~ prints none as "None" (the reference refuses it) */
		c->jinja2_only = true;
		l = l.k == JV_NONE ? jv_str("None", 4) : l;
		r = r.k == JV_NONE ? jv_str("None", 4) : r;
	}
	if (l.k == JV_UNDEF || r.k == JV_UNDEF) {
		if (r.k == JV_UNDEF && (op == JOP_IN || op == JOP_NOTIN)) {
			*out = jv_bool(op == JOP_NOTIN);
			return 0;
		}
		if (op == JOP_CONCAT && l.k != JV_NONE && r.k != JV_NONE)
			return js_concat(c, at, l, r, out);
		return jx_err(c, at, JINJA_E_RUNTIME, "operator '%s' on an undefined value",
			      op_name(op));
	}
	if (l.k == JV_NONE || r.k == JV_NONE)
		return jx_err(c, at, JINJA_E_RUNTIME, "operator '%s' on none", op_name(op));
	return binop_rest(c, at, op, l, r, out);
}
