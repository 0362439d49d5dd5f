/* Jinja evaluator: renders a parsed template with a JSON context.  Each
 * render has its own arena, scopes and budgets; the tree is only read, so
 * threads may render one template at once.  Scoping is the reference's
 * (@huggingface/jinja): a for loop, a macro call and a call block open a
 * scope, if does not; {% set %} writes the innermost scope.  break and
 * continue travel up as return codes (JX_BREAK, JX_CONTINUE). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat/jinja_internal.h"
#include "util/errbuf.h"

#define JX_BREAK 1
#define JX_CONTINUE 2

#define JINJA_DEFAULT_STEPS 10000000ull
#define JINJA_DEFAULT_OUTPUT (16u << 20)
#define JINJA_DEFAULT_DEPTH 256u
#define JINJA_MAX_DEPTH 1024u

static int render_block(struct jctx *c, struct jscope *s, struct jn *const *body, size_t n,
			struct jbuf *out);

struct jscope *jx_scope_new(struct jctx *c, struct jscope *parent)
{
	struct jscope *s = jx_alloc(c, sizeof(*s));
	if (s)
		s->parent = parent;
	return s;
}

static int scope_set(struct jctx *c, struct jscope *s, const char *name, size_t n, struct jv v)
{
	return jx_dict_set(c, &s->vars, name, n, v);
}

static bool name_is(const char *s, size_t n, const char *w)
{
	return n == strlen(w) && memcmp(s, w, n) == 0;
}

struct jv jx_lookup(struct jctx *c, struct jscope *s, const char *name, size_t n)
{
	for (; s; s = s->parent) {
		struct jv *v = jx_dict_get(&s->vars, name, n);
		if (v)
			return *v;
	}
	if (name_is(name, n, "true") || name_is(name, n, "True"))
		return jv_bool(true);
	if (name_is(name, n, "false") || name_is(name, n, "False"))
		return jv_bool(false);
	if (name_is(name, n, "none") || name_is(name, n, "None"))
		return jv_none();
	struct jv fn;
	if (jx_global(c, name, n, &fn) == 0)
		return fn;
	return jv_undef();
}

static int enter(struct jctx *c, const struct jn *at)
{
	if (++c->depth > c->max_depth)
		return jx_err(c, at, JINJA_E_BUDGET, "nested deeper than %u (macro recursion?)",
			      c->max_depth);
	return 0;
}

/* ---- calls ---- */

static int eval_args(struct jctx *c, struct jscope *s, struct jn *const *args, size_t n,
		     struct jargs *out)
{
	size_t nk = 0;
	for (size_t i = 0; i < n; i++)
		nk += args[i]->kind == JN_KWARG;
	memset(out, 0, sizeof(*out));
	out->pos = jx_alloc(c, (n - nk + 1) * sizeof(*out->pos));
	out->kname = jx_alloc(c, (nk + 1) * sizeof(*out->kname));
	out->kname_len = jx_alloc(c, (nk + 1) * sizeof(*out->kname_len));
	out->kval = jx_alloc(c, (nk + 1) * sizeof(*out->kval));
	if (!out->pos || !out->kname || !out->kname_len || !out->kval)
		return jx_nomem(c, n ? args[0] : NULL);
	for (size_t i = 0; i < n; i++) {
		const struct jn *a = args[i];
		int rc;
		if (a->kind != JN_KWARG) {
			rc = jx_eval(c, s, a, &out->pos[out->n++]);
		} else {
			for (size_t k = 0; k < out->nk; k++)
				if (out->kname_len[k] == a->sn && memcmp(out->kname[k], a->s, a->sn) == 0)
					return jx_err(c, a, JINJA_E_RUNTIME,
						      "keyword argument '%.*s' given twice", (int)a->sn,
						      a->s);
			out->kname[out->nk] = a->s;
			out->kname_len[out->nk] = a->sn;
			rc = jx_eval(c, s, a->a, &out->kval[out->nk++]);
		}
		if (rc)
			return rc;
	}
	return 0;
}

/* Binds a macro's (or caller's) parameters in scope the reference's way:
 * positional, then by keyword, then defaults evaluated in the new scope. */
static int bind_params(struct jctx *c, const struct jn *at, const struct jn *def,
		       const struct jargs *args, struct jscope *scope)
{
	bool *used = jx_alloc(c, args->nk + 1), *given = jx_alloc(c, def->n_args + 1);
	if (!used || !given)
		return jx_nomem(c, at);
	const char *what = def->kind == JN_MACRO ? "macro" : "call block";
	const char *name = def->s ? def->s : "caller";
	int name_len = def->s ? (int)def->sn : 6;
	int rc = 0;
	for (size_t i = 0; !rc && i < def->n_args; i++) {
		const struct jn *p = def->args[i];
		struct jv v = jv_undef();
		bool have = i < args->n;
		if (have)
			v = args->pos[i];
		for (size_t k = 0; !have && k < args->nk; k++) {
			if (!used[k] && args->kname_len[k] == p->sn &&
			    memcmp(args->kname[k], p->s, p->sn) == 0) {
				v = args->kval[k];
				used[k] = have = true;
			}
		}
		given[i] = have;
		rc = scope_set(c, scope, p->s, p->sn, v);
	}
	struct jdict *rest = jx_dict_new(c);
	if (!rest)
		return jx_nomem(c, at);
	for (size_t k = 0; !rc && k < args->nk; k++) {
		if (used[k])
			continue;
		if (!(def->flags & JF_KWARGS))
			return jx_err(c, at, JINJA_E_RUNTIME, "%s '%.*s' takes no keyword argument '%.*s'",
				      what, name_len, name, (int)args->kname_len[k], args->kname[k]);
		rc = jx_dict_set(c, rest, args->kname[k], args->kname_len[k], args->kval[k]);
	}
	if (!rc && (def->flags & JF_KWARGS))
		rc = scope_set(c, scope, "kwargs", 6, (struct jv){.k = JV_DICT, .u.d = rest});
	if (!rc && args->n > def->n_args) {
		if (!(def->flags & JF_VARARGS))
			return jx_err(c, at, JINJA_E_RUNTIME, "%s '%.*s' takes at most %zu argument(s)",
				      what, name_len, name, def->n_args);
	}
	if (!rc && (def->flags & JF_VARARGS)) {
		struct jv va;
		size_t extra = args->n > def->n_args ? args->n - def->n_args : 0;
		if (!(rc = jx_list_new(c, at, extra, &va))) {
			if (extra)
				memcpy(va.u.l->v, args->pos + def->n_args, extra * sizeof(struct jv));
			rc = scope_set(c, scope, "varargs", 7, va);
		}
	}
	for (size_t i = 0; !rc && i < def->n_args; i++) {
		const struct jn *p = def->args[i];
		if (p->kind == JN_KWARG && !given[i]) {
			struct jv v;
			if (!(rc = jx_eval(c, scope, p->a, &v)))
				rc = scope_set(c, scope, p->s, p->sn, v);
		}
	}
	return rc;
}

static int render_to_value(struct jctx *c, struct jscope *s, const struct jn *at,
			   struct jn *const *body, size_t n, struct jv *out)
{
	struct jbuf b = {0};
	/* break / continue (rc > 0) travel on to the loop around a set or
	 * filter block, as in the reference */
	int rc = render_block(c, s, body, n, &b);
	if (rc == 0)
		rc = jx_buf_value(c, at, &b, out);
	free(b.p);
	return rc;
}

static int call_macro(struct jctx *c, const struct jn *at, struct jfunc *fn,
		      const struct jargs *args, struct jv *out)
{
	const struct jn *def = fn->node;
	struct jv caller = c->caller;
	c->caller = jv_undef();
	struct jscope *parent = fn->scope;
	int rc = enter(c, at);
	if (rc)
		return rc;
	if (def->kind == JN_MACRO && (def->flags & JF_CALLER)) {
		if (!(parent = jx_scope_new(c, parent)) ||
		    (rc = scope_set(c, parent, "caller", 6, caller)))
			return rc ? rc : jx_nomem(c, at);
	}
	struct jscope *scope = jx_scope_new(c, parent);
	if (!scope)
		return jx_nomem(c, at);
	if ((rc = bind_params(c, at, def, args, scope)))
		return rc;
	rc = render_to_value(c, scope, at, def->body, def->n_body, out);
	c->depth--;
	return rc;
}

int jx_call_value(struct jctx *c, const struct jn *at, struct jv fn, const struct jargs *args,
		  struct jv *out)
{
	if (fn.k != JV_FUNC) {
		c->caller = jv_undef();
		return jx_err(c, at, JINJA_E_RUNTIME, "cannot call a %s", jv_type_name(fn));
	}
	if (fn.u.fn->kind == JFN_BUILTIN) {
		c->caller = jv_undef();
		return fn.u.fn->fn(c, at, fn.u.fn->self, args, out);
	}
	return call_macro(c, at, fn.u.fn, args, out);
}

/* ---- expressions ---- */

static int member_index(struct jctx *c, const struct jn *at, struct jv obj, int64_t i,
			struct jv *out)
{
	*out = jv_undef();
	if (obj.k == JV_LIST) {
		int64_t n = (int64_t)obj.u.l->n;
		if (i < 0)
			i += n;
		if (i >= 0 && i < n)
			*out = obj.u.l->v[i];
		return 0;
	}
	/* a string: code points (the reference's .at() counts UTF-16 units;
	 * they differ only past U+FFFF) */
	const char *p = obj.u.s.p;
	size_t n = obj.u.s.n, count = 0;
	int rc = jx_charge(c, at, n / 64);
	if (rc)
		return rc;
	for (size_t k = 0; k < n; k += jv_cp_len(p + k, n - k))
		count++;
	if (i < 0)
		i += (int64_t)count;
	if (i < 0 || i >= (int64_t)count)
		return 0;
	size_t k = 0;
	for (int64_t j = 0; j < i; j++)
		k += jv_cp_len(p + k, n - k);
	char *dst;
	size_t len = jv_cp_len(p + k, n - k);
	rc = jx_str_new(c, at, len, &dst, out);
	if (!rc)
		memcpy(dst, p + k, len);
	return rc;
}

static int loop_cycle(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *args,
		      struct jv *out)
{
	if (args->n == 0)
		return jx_err(c, at, JINJA_E_RUNTIME, "loop.cycle: needs at least one value");
	*out = args->pos[(size_t)self.u.loop->index0 % args->n];
	return 0;
}

static int member_get(struct jctx *c, const struct jn *at, struct jv obj, struct jv key,
		      struct jv *out)
{
	*out = jv_undef();
	if (obj.k == JV_DICT || obj.k == JV_NS || obj.k == JV_LOOP) {
		if (key.k != JV_STR)
			return jx_err(c, at, JINJA_E_RUNTIME, "cannot read a %s key of a %s",
				      jv_type_name(key), jv_type_name(obj));
		if (obj.k == JV_LOOP) {
			if (!name_is(key.u.s.p, key.u.s.n, "cycle")) {
				*out = jx_loop_member(obj.u.loop, key.u.s.p, key.u.s.n);
				return 0;
			}
			struct jfunc *f = jx_alloc(c, sizeof(*f));
			if (!f)
				return jx_nomem(c, at);
			*f = (struct jfunc){.kind = JFN_BUILTIN, .name = "cycle", .fn = loop_cycle,
					    .self = obj};
			*out = (struct jv){.k = JV_FUNC, .u.fn = f};
			return 0;
		}
		struct jv *v = jx_dict_get(obj.u.d, key.u.s.p, key.u.s.n);
		if (v) {
			*out = *v;
			return 0;
		}
		return obj.k == JV_DICT ? jx_dict_method(c, at, obj, key.u.s.p, key.u.s.n, out) : 0;
	}
	if ((obj.k == JV_LIST || obj.k == JV_STR) && key.k == JV_INT)
		return member_index(c, at, obj, key.u.i, out);
	if (key.k != JV_STR)
		return jx_err(c, at, JINJA_E_RUNTIME, "cannot read a %s key of a %s",
			      jv_type_name(key), jv_type_name(obj));
	return jx_method(c, at, obj, key.u.s.p, key.u.s.n, out);
}

static int slice_bound(struct jctx *c, struct jscope *s, const struct jn *e, bool *have,
		       int64_t *v)
{
	*have = false;
	if (!e)
		return 0;
	struct jv x;
	int rc = jx_eval(c, s, e, &x);
	if (rc)
		return rc;
	if (x.k == JV_UNDEF)
		return 0;
	if (x.k != JV_INT)
		return jx_err(c, e, JINJA_E_RUNTIME, "slice: bounds must be integers, not %s",
			      jv_type_name(x));
	*have = true;
	*v = x.u.i;
	return 0;
}

/* Python's slice rules as the reference applies them, over n items. */
static void slice_range(int64_t n, bool hs, int64_t start, bool he, int64_t stop, int64_t step,
			int64_t *from, int64_t *to)
{
	if (step >= 0) {
		start = !hs ? 0 : start < 0 ? (n + start > 0 ? n + start : 0) : (start < n ? start : n);
		stop = !he ? n : stop < 0 ? (n + stop > 0 ? n + stop : 0) : (stop < n ? stop : n);
	} else {
		start = !hs ? n - 1 : start < 0 ? (n + start > -1 ? n + start : -1)
					       : (start < n - 1 ? start : n - 1);
		stop = !he ? -1 : stop < -1 ? (n + stop > -1 ? n + stop : -1)
					    : (stop < n - 1 ? stop : n - 1);
	}
	*from = start;
	*to = stop;
}

static int eval_slice(struct jctx *c, struct jscope *s, const struct jn *e, struct jv *out)
{
	struct jv obj;
	bool hs, he, hp;
	int64_t start = 0, stop = 0, step = 1;
	int rc = jx_eval(c, s, e->a, &obj);
	if (rc)
		return rc;
	if (obj.k != JV_LIST && obj.k != JV_STR)
		return jx_err(c, e, JINJA_E_RUNTIME, "cannot slice a %s", jv_type_name(obj));
	if ((rc = slice_bound(c, s, e->b, &hs, &start)) || (rc = slice_bound(c, s, e->c, &he, &stop)) ||
	    (rc = slice_bound(c, s, e->d, &hp, &step)))
		return rc;
	if (!hp)
		step = 1;
	/* items: list values, or the string's code points (offsets) */
	size_t n = obj.k == JV_LIST ? obj.u.l->n : 0;
	size_t *cps = NULL;
	if (obj.k == JV_STR) {
		if ((rc = jx_charge(c, e, obj.u.s.n / 16)))
			return rc;
		if (!(cps = jx_alloc(c, (obj.u.s.n + 1) * sizeof(*cps))))
			return jx_nomem(c, e);
		for (size_t k = 0; k < obj.u.s.n; k += jv_cp_len(obj.u.s.p + k, obj.u.s.n - k))
			cps[n++] = k;
		cps[n] = obj.u.s.n;
	}
	int64_t from, to, count = 0;
	slice_range((int64_t)n, hs, start, he, stop, step, &from, &to);
	/* counted, not stepped, so that a huge step cannot overflow */
	if (step > 0 && to > from)
		count = 1 + (to - from - 1) / step;
	else if (step < 0 && from > to)
		count = step == INT64_MIN ? 1 : 1 + (from - to - 1) / -step;
	if ((rc = jx_charge(c, e, (uint64_t)count)))
		return rc;
	if (obj.k == JV_LIST) {
		if ((rc = jx_list_new(c, e, (size_t)count, out)))
			return rc;
		for (int64_t k = 0; k < count; k++)
			out->u.l->v[k] = obj.u.l->v[from + k * step];
		return 0;
	}
	size_t bytes = 0;
	for (int64_t k = 0; k < count; k++)
		bytes += cps[from + k * step + 1] - cps[from + k * step];
	char *p;
	if ((rc = jx_str_new(c, e, bytes, &p, out)))
		return rc;
	for (int64_t k = 0; k < count; k++) {
		int64_t i = from + k * step;
		memcpy(p, obj.u.s.p + cps[i], cps[i + 1] - cps[i]);
		p += cps[i + 1] - cps[i];
	}
	return 0;
}

static int eval_member(struct jctx *c, struct jscope *s, const struct jn *e, struct jv *out)
{
	struct jv obj, key;
	int rc = jx_eval(c, s, e->a, &obj);
	if (rc)
		return rc;
	if (e->b)
		rc = jx_eval(c, s, e->b, &key);
	else if (e->op)
		key = jv_int(e->i);
	else
		key = jv_str(e->s, e->sn);
	return rc ? rc : member_get(c, e, obj, key, out);
}

static int eval_collection(struct jctx *c, struct jscope *s, const struct jn *e, struct jv *out)
{
	if (e->kind != JN_DICT) {
		int rc = jx_list_new(c, e, e->n_args, out);
		for (size_t i = 0; !rc && i < e->n_args; i++)
			rc = jx_eval(c, s, e->args[i], &out->u.l->v[i]);
		out->tuple = e->kind == JN_TUPLE;
		return rc;
	}
	struct jdict *d = jx_dict_new(c);
	if (!d)
		return jx_nomem(c, e);
	for (size_t i = 0; i < e->n_args; i++) {
		struct jv k, v;
		int rc = jx_eval(c, s, e->args[i], &k);
		if (rc)
			return rc;
		if (k.k != JV_STR)
			return jx_err(c, e->args[i], JINJA_E_RUNTIME, "dict keys must be strings, not %s",
				      jv_type_name(k));
		if ((rc = jx_eval(c, s, e->alt[i], &v)) || (rc = jx_dict_set(c, d, k.u.s.p, k.u.s.n, v)))
			return rc;
	}
	*out = (struct jv){.k = JV_DICT, .u.d = d};
	return 0;
}

static int eval_call(struct jctx *c, struct jscope *s, const struct jn *e, struct jv *out)
{
	struct jargs args;
	struct jv fn;
	int rc = eval_args(c, s, e->args, e->n_args, &args);
	if (rc || (rc = jx_eval(c, s, e->a, &fn)))
		return rc;
	if (fn.k == JV_UNDEF && (e->a->kind == JN_NAME || (e->a->kind == JN_MEMBER && e->a->s)))
		return jx_err(c, e, JINJA_E_RUNTIME, "'%.*s' is not a function or method here",
			      (int)e->a->sn, e->a->s);
	return jx_call_value(c, e, fn, &args, out);
}

static int eval_filter(struct jctx *c, struct jscope *s, const struct jn *e, struct jv *out)
{
	struct jv in;
	struct jargs args;
	int rc = jx_eval(c, s, e->a, &in);
	if (rc || (rc = eval_args(c, s, e->args, e->n_args, &args)))
		return rc;
	return jx_filter(c, s, e, e->s, e->sn, in, &args, out);
}

static int eval_test(struct jctx *c, struct jscope *s, const struct jn *e, struct jv *out)
{
	struct jv in;
	struct jargs args;
	bool r;
	int rc = jx_eval(c, s, e->a, &in);
	if (rc || (rc = eval_args(c, s, e->args, e->n_args, &args)) ||
	    (rc = jx_test(c, e, e->s, e->sn, in, &args, &r)))
		return rc;
	*out = jv_bool(e->op ? !r : r);
	return 0;
}

static int eval_unary(struct jctx *c, struct jscope *s, const struct jn *e, struct jv *out)
{
	struct jv v;
	int rc = jx_eval(c, s, e->a, &v);
	if (rc)
		return rc;
	if (e->op == JOP_NOT) {
		*out = jv_bool(!jv_truthy(v));
		return 0;
	}
	if (v.k == JV_BOOL)
		v = jv_int(v.u.b);
	if (v.k == JV_FLOAT) {
		*out = jv_float(e->op == JOP_NEG ? -v.u.f : v.u.f);
		return 0;
	}
	if (v.k != JV_INT)
		return jx_err(c, e, JINJA_E_RUNTIME, "unary %c: not a number but a %s",
			      e->op == JOP_NEG ? '-' : '+', jv_type_name(v));
	if (e->op == JOP_NEG && v.u.i == INT64_MIN)
		return jx_err(c, e, JINJA_E_RUNTIME, "integer overflow");
	*out = jv_int(e->op == JOP_NEG ? -v.u.i : v.u.i);
	return 0;
}

static int eval_binop(struct jctx *c, struct jscope *s, const struct jn *e, struct jv *out)
{
	struct jv l, r;
	int rc = jx_eval(c, s, e->a, &l);
	if (rc)
		return rc;
	if (e->op == JOP_AND || e->op == JOP_OR) { /* the operand itself, as Python */
		bool t = jv_truthy(l);
		if ((e->op == JOP_AND) != t) {
			*out = l;
			return 0;
		}
		return jx_eval(c, s, e->b, out);
	}
	if ((rc = jx_eval(c, s, e->b, &r)))
		return rc;
	return jx_binop(c, e, e->op, l, r, out);
}

static int eval_inner(struct jctx *c, struct jscope *s, const struct jn *e, struct jv *out)
{
	switch (e->kind) {
	case JN_STR:
		*out = jv_str(e->s, e->sn);
		return 0;
	case JN_INT:
		*out = jv_int(e->i);
		return 0;
	case JN_FLOAT:
		*out = jv_float(e->f);
		return 0;
	case JN_NAME:
		*out = jx_lookup(c, s, e->s, e->sn);
		return 0;
	case JN_LIST:
	case JN_TUPLE:
	case JN_DICT:
		return eval_collection(c, s, e, out);
	case JN_MEMBER:
		return eval_member(c, s, e, out);
	case JN_SLICE:
		return eval_slice(c, s, e, out);
	case JN_CALL:
		return eval_call(c, s, e, out);
	case JN_FILTER:
		return eval_filter(c, s, e, out);
	case JN_TEST:
		return eval_test(c, s, e, out);
	case JN_BINOP:
		return eval_binop(c, s, e, out);
	case JN_UNARY:
		return eval_unary(c, s, e, out);
	case JN_TERNARY: {
		struct jv cond;
		int rc = jx_eval(c, s, e->a, &cond);
		return rc ? rc : jx_eval(c, s, jv_truthy(cond) ? e->b : e->c, out);
	}
	case JN_SELECT: {
		struct jv cond;
		int rc = jx_eval(c, s, e->b, &cond);
		if (rc || !jv_truthy(cond)) {
			*out = jv_undef();
			return rc;
		}
		return jx_eval(c, s, e->a, out);
	}
	default:
		return jx_err(c, e, JINJA_E_RUNTIME, "not an expression");
	}
}

int jx_eval(struct jctx *c, struct jscope *s, const struct jn *e, struct jv *out)
{
	*out = jv_undef();
	c->last = e;
	int rc = jx_charge(c, e, 1);
	if (rc || (rc = enter(c, e)))
		return rc;
	rc = eval_inner(c, s, e, out);
	c->depth--;
	return rc;
}

/* ---- statements ---- */

static int bind_target(struct jctx *c, struct jscope *s, const struct jn *target, struct jv v)
{
	if (target->kind == JN_NAME)
		return scope_set(c, s, target->s, target->sn, v);
	if (v.k != JV_LIST)
		return jx_err(c, target, JINJA_E_RUNTIME, "cannot unpack a %s", jv_type_name(v));
	if (v.u.l->n != target->n_args)
		return jx_err(c, target, JINJA_E_RUNTIME, "too %s values to unpack (%zu for %zu names)",
			      v.u.l->n < target->n_args ? "few" : "many", v.u.l->n, target->n_args);
	for (size_t i = 0; i < target->n_args; i++) {
		const struct jn *t = target->args[i];
		if (t->kind != JN_NAME)
			return jx_err(c, t, JINJA_E_RUNTIME, "can only unpack into names");
		int rc = scope_set(c, s, t->s, t->sn, v.u.l->v[i]);
		if (rc)
			return rc;
	}
	return 0;
}

static int exec_set(struct jctx *c, struct jscope *s, const struct jn *st)
{
	struct jv v;
	int rc = st->b ? jx_eval(c, s, st->b, &v)
		       : render_to_value(c, s, st, st->body, st->n_body, &v);
	if (rc)
		return rc;
	const struct jn *t = st->a;
	if (t->kind == JN_NAME || t->kind == JN_TUPLE)
		return bind_target(c, s, t, v);
	if (t->kind == JN_MEMBER && !t->b && !t->op) {
		struct jv obj;
		if ((rc = jx_eval(c, s, t->a, &obj)))
			return rc;
		if (obj.k != JV_NS)
			return jx_err(c, t, JINJA_E_RUNTIME,
				      "{%% set %%}: cannot assign an attribute of a %s (only of a namespace)",
				      jv_type_name(obj));
		return jx_dict_set(c, obj.u.d, t->s, t->sn, v);
	}
	return jx_err(c, t, JINJA_E_RUNTIME, "{%% set %%}: cannot assign to this expression");
}

/* The items a for loop walks: the list, a dict's keys, filtered by the
 * loop's `if` (bound in a scope of its own). */
static int for_items(struct jctx *c, struct jscope *s, const struct jn *st, struct jv *items)
{
	struct jv it;
	int rc = jx_eval(c, s, st->b, &it);
	if (rc)
		return rc;
	if (it.k == JV_DICT)
		rc = jx_dict_keys(c, st->b, it, &it);
	else if (it.k == JV_STR || it.k == JV_UNDEF) {
		/* Jinja2 walks a string's characters, and nothing for undefined
		 * (so the else block runs); the reference refuses both */
		c->jinja2_only = true;
		rc = it.k == JV_STR ? jx_str_chars(c, st->b, it, &it) : jx_list_new(c, st->b, 0, &it);
	} else if (it.k != JV_LIST)
		return jx_err(c, st->b, JINJA_E_RUNTIME, "{%% for %%}: cannot iterate over a %s",
			      jv_type_name(it));
	if (rc)
		return rc;
	if (st->a->kind == JN_NAME && !st->c) {
		*items = it;
		return 0;
	}
	struct jscope *fs = jx_scope_new(c, s);
	if (!fs || (rc = jx_list_new(c, st, it.u.l->n, items)))
		return fs ? rc : jx_nomem(c, st);
	size_t k = 0;
	for (size_t i = 0; i < it.u.l->n; i++) {
		struct jv v = it.u.l->v[i], keep = jv_bool(true);
		if ((rc = bind_target(c, fs, st->a, v)))
			return rc;
		if (st->c && (rc = jx_eval(c, fs, st->c, &keep)))
			return rc;
		if (jv_truthy(keep))
			items->u.l->v[k++] = v;
	}
	items->u.l->n = k;
	return 0;
}

/* One loop object per loop, updated in place each iteration, so that a
 * long loop does not grow the arena (the reference makes a new one each
 * time; only a template that keeps `loop` in a variable could tell). */
static int set_loop(struct jctx *c, struct jscope *s, struct jloop **l, struct jv items, size_t i)
{
	if (!*l) {
		if (!(*l = jx_alloc(c, sizeof(**l))))
			return jx_nomem(c, NULL);
		(*l)->length = (int64_t)items.u.l->n;
		(*l)->items = items.u.l->v;
	}
	(*l)->index0 = (int64_t)i;
	return scope_set(c, s, "loop", 4, (struct jv){.k = JV_LOOP, .u.loop = *l});
}

/* An iteration that ends in break or continue drops what it rendered: the
 * reference throws out of its block and loses that text (Jinja2 keeps it). */
static int exec_for(struct jctx *c, struct jscope *s, const struct jn *st, struct jbuf *out)
{
	struct jscope *ls = jx_scope_new(c, s);
	struct jv items;
	if (!ls)
		return jx_nomem(c, st);
	int rc = for_items(c, ls, st, &items);
	if (rc)
		return rc;
	struct jbuf one = {0};
	struct jloop *loop = NULL;
	bool none_done = true;
	for (size_t i = 0; i < items.u.l->n; i++) {
		one.n = 0;
		if ((rc = jx_charge(c, st, 1)) || (rc = set_loop(c, ls, &loop, items, i)) ||
		    (rc = bind_target(c, ls, st->a, items.u.l->v[i])))
			break;
		rc = render_block(c, ls, st->body, st->n_body, &one);
		if (rc == JX_CONTINUE) {
			rc = 0;
			continue;
		}
		if (rc)
			break;
		none_done = false;
		if ((rc = jbuf_put(c, st, out, one.p, one.n)))
			break;
	}
	free(one.p);
	if (rc == JX_BREAK)
		rc = 0;
	if (!rc && none_done)
		rc = render_block(c, ls, st->alt, st->n_alt, out);
	return rc;
}

static int print_value(struct jctx *c, const struct jn *at, struct jbuf *out, struct jv v)
{
	if (c->jinja2_only && (v.k == JV_NONE || v.k == JV_BOOL)) /* Python's str() */
		return jbuf_puts(c, at, out, v.k == JV_NONE ? "None" : v.u.b ? "True" : "False");
	if (v.k == JV_NONE || v.k == JV_UNDEF)
		return 0;
	return jv_print(c, at, out, v);
}

static int exec_callblock(struct jctx *c, struct jscope *s, const struct jn *st, struct jbuf *out)
{
	struct jargs args;
	struct jv fn, res;
	struct jfunc *caller = jx_alloc(c, sizeof(*caller));
	if (!caller)
		return jx_nomem(c, st);
	*caller = (struct jfunc){.kind = JFN_CALLER, .name = "caller", .node = st, .scope = s};
	int rc = eval_args(c, s, st->a->args, st->a->n_args, &args);
	if (rc || (rc = jx_eval(c, s, st->a->a, &fn)))
		return rc;
	c->caller = (struct jv){.k = JV_FUNC, .u.fn = caller};
	if ((rc = jx_call_value(c, st, fn, &args, &res)))
		return rc;
	return print_value(c, st, out, res);
}

static int exec_filterblock(struct jctx *c, struct jscope *s, const struct jn *st, struct jbuf *out)
{
	struct jv body, res;
	struct jargs args;
	int rc = render_to_value(c, s, st, st->body, st->n_body, &body);
	if (rc || (rc = eval_args(c, s, st->a->args, st->a->n_args, &args)) ||
	    (rc = jx_filter(c, s, st->a, st->a->s, st->a->sn, body, &args, &res)))
		return rc;
	return print_value(c, st, out, res);
}

static int exec_stmt(struct jctx *c, struct jscope *s, const struct jn *st, struct jbuf *out)
{
	struct jv v;
	int rc;
	switch (st->kind) {
	case JN_TEXT:
		return jbuf_put(c, st, out, st->s, st->sn);
	case JN_IF:
		if ((rc = jx_eval(c, s, st->a, &v)))
			return rc;
		return jv_truthy(v) ? render_block(c, s, st->body, st->n_body, out)
				    : render_block(c, s, st->alt, st->n_alt, out);
	case JN_FOR:
		return exec_for(c, s, st, out);
	case JN_SET:
		return exec_set(c, s, st);
	case JN_MACRO: {
		struct jfunc *f = jx_alloc(c, sizeof(*f));
		if (!f)
			return jx_nomem(c, st);
		*f = (struct jfunc){.kind = JFN_MACRO, .name = st->s, .node = st, .scope = s};
		return scope_set(c, s, st->s, st->sn, (struct jv){.k = JV_FUNC, .u.fn = f});
	}
	case JN_CALLBLOCK:
		return exec_callblock(c, s, st, out);
	case JN_FILTERBLOCK:
		return exec_filterblock(c, s, st, out);
	case JN_BREAK:
		return JX_BREAK;
	case JN_CONTINUE:
		return JX_CONTINUE;
	default:
		if ((rc = jx_eval(c, s, st, &v)))
			return rc;
		return print_value(c, st, out, v);
	}
}

static int render_block(struct jctx *c, struct jscope *s, struct jn *const *body, size_t n,
			struct jbuf *out)
{
	int rc = enter(c, n ? body[0] : NULL);
	for (size_t i = 0; !rc && i < n; i++) {
		c->last = body[i];
		if (!(rc = jx_charge(c, body[i], 1)))
			rc = exec_stmt(c, s, body[i], out);
	}
	c->depth--;
	return rc;
}

static void ctx_init(struct jctx *c, const struct jinja_env *env, char *err, size_t err_len)
{
	struct jinja_limits lim = env ? env->limits : (struct jinja_limits){0};
	c->max_steps = lim.max_steps ? lim.max_steps : JINJA_DEFAULT_STEPS;
	c->max_output = lim.max_output ? lim.max_output : JINJA_DEFAULT_OUTPUT;
	c->max_depth = lim.max_depth ? lim.max_depth : JINJA_DEFAULT_DEPTH;
	if (c->max_depth > JINJA_MAX_DEPTH) /* each level is a few C stack frames */
		c->max_depth = JINJA_MAX_DEPTH;
	/* working memory: what the output may hold, several times over for
	 * the strings a template builds on the way */
	c->arena.limit = c->max_output > (SIZE_MAX - (8u << 20)) / 4 ? SIZE_MAX
								      : 4 * c->max_output + (8u << 20);
	c->now = env && env->now ? env->now : time(NULL);
	c->err = err;
	c->err_len = err_len;
}

/* One render into *b; jinja2_only as struct jctx says, *went_jinja2 whether
 * the render took a path only Jinja2 renders. */
static int render_once(const struct jinja_template *t, const struct cJSON *context,
		       const struct jinja_env *env, bool jinja2_only, struct jbuf *b,
		       bool *went_jinja2, char *err, size_t err_len)
{
	struct jctx c = {0};
	int rc = 0;
	ctx_init(&c, env, err, err_len);
	c.jinja2_only = jinja2_only;
	if (!(c.globals = jx_scope_new(&c, NULL))) {
		rc = jx_nomem(&c, NULL);
		goto out;
	}
	for (const cJSON *e = context ? context->child : NULL; !rc && e; e = e->next) {
		struct jv v;
		if (!(rc = jv_from_json(&c, e, &v, 0)))
			rc = scope_set(&c, c.globals, e->string, strlen(e->string), v);
	}
	if (!rc)
		rc = render_block(&c, c.globals, t->body, t->n_body, b);
	if (rc > 0)
		rc = jx_err(&c, NULL, JINJA_E_RUNTIME, "break or continue outside a loop");
	if (!rc && !b->p && !(b->p = calloc(1, 1)))
		rc = err_set(err, err_len, JINJA_E_NOMEM, "out of memory");
out:
	*went_jinja2 = c.jinja2_only;
	if (c.ctype)
		freelocale(c.ctype);
	jarena_free(&c.arena);
	return rc;
}

/* A render that goes where only Jinja2 renders (the reference refuses) is
 * rendered again following Jinja2 from the start, so that what it did the
 * reference's way before that point (a string + a list, which Jinja2
 * refuses) follows Jinja2 too. */
int jinja_render(const struct jinja_template *t, const struct cJSON *context,
		 const struct jinja_env *env, char **out, size_t *out_len, char *err,
		 size_t err_len)
{
	struct jbuf b = {0};
	bool went_jinja2 = false;
	*out = NULL;
	if (out_len)
		*out_len = 0;
	if (context && !cJSON_IsObject(context))
		return err_set(err, err_len, JINJA_E_RUNTIME, "the context must be a JSON object");
	int rc = render_once(t, context, env, false, &b, &went_jinja2, err, err_len);
	if (went_jinja2) {
		free(b.p);
		b = (struct jbuf){0};
		rc = render_once(t, context, env, true, &b, &went_jinja2, err, err_len);
	}
	if (rc) {
		free(b.p);
		return rc;
	}
	*out = b.p;
	if (out_len)
		*out_len = b.n;
	return 0;
}
