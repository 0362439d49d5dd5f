/* Jinja filters (`x|trim`, `tools|tojson(indent=4)`, ...).  The ones
 * @huggingface/jinja has behave as there, including where it parts from
 * Jinja2: trim and the strip family remove JavaScript white space, join
 * prints items as JavaScript strings, tojson writes 2.0 as 2, string
 * lengths count UTF-16 units, selectattr reads a plain key.  The ones it
 * lacks (batch, max, min, sum, round, truncate, wordcount, select, ...)
 * follow Jinja2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

struct filter_call {
	struct jctx *c;
	struct jscope *s;
	const struct jn *at;
	const char *name;
	struct jv in;
	const struct jargs *a;
};

typedef int (*filter_fn)(struct filter_call *f, struct jv *out);

static int ferr_type(struct filter_call *f)
{
	return jx_err(f->c, f->at, JINJA_E_RUNTIME, "filter '%s' cannot take a %s", f->name,
		      jv_type_name(f->in));
}

static int arg_bool(struct filter_call *f, size_t i, const char *name, bool def, bool *out)
{
	const struct jv *v = jargs_get(f->a, i, name);
	*out = def;
	if (!v || v->k == JV_UNDEF)
		return 0;
	if (v->k != JV_BOOL)
		return jx_err(f->c, f->at, JINJA_E_RUNTIME, "filter '%s': %s must be a boolean",
			      f->name, name);
	*out = v->u.b;
	return 0;
}

static int arg_str(struct filter_call *f, size_t i, const char *name, const struct jv **out)
{
	*out = jargs_get(f->a, i, name);
	if (*out && (*out)->k != JV_STR && (*out)->k != JV_NONE && (*out)->k != JV_UNDEF)
		return jx_err(f->c, f->at, JINJA_E_RUNTIME, "filter '%s': %s must be a string",
			      f->name, name);
	if (*out && (*out)->k != JV_STR)
		*out = NULL;
	return 0;
}

/* ---- sorting (stable merge sort that can stop on an error) ---- */

struct sorter {
	struct jctx *c;
	const struct jn *at;
	const struct jv *keys;
	bool case_sensitive, reverse;
	int rc;
};

static int sort_cmp(struct sorter *s, size_t a, size_t b)
{
	int cmp = 0;
	if (!s->rc)
		s->rc = jv_compare(s->c, s->at, s->keys[a], s->keys[b], s->case_sensitive, &cmp);
	return s->reverse ? -cmp : cmp;
}

static void merge_sort(struct sorter *s, size_t *idx, size_t *tmp, size_t n)
{
	if (n < 2)
		return;
	size_t h = n / 2;
	merge_sort(s, idx, tmp, h);
	merge_sort(s, idx + h, tmp, n - h);
	size_t i = 0, j = h, k = 0;
	while (i < h && j < n)
		tmp[k++] = sort_cmp(s, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
	while (i < h)
		tmp[k++] = idx[i++];
	while (j < n)
		tmp[k++] = idx[j++];
	memcpy(idx, tmp, n * sizeof(*idx));
}

/* items sorted by keys (parallel arrays); *out a new list. */
static int sort_by_keys(struct jctx *c, const struct jn *at, const struct jv *items,
			const struct jv *keys, size_t n, bool case_sensitive, bool reverse,
			struct jv *out)
{
	size_t *idx = jx_alloc(c, (n + 1) * sizeof(*idx)), *tmp = jx_alloc(c, (n + 1) * sizeof(*tmp));
	if (!idx || !tmp)
		return jx_nomem(c, at);
	int rc = jx_charge(c, at, n * 8);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++)
		idx[i] = i;
	struct sorter s = {.c = c, .at = at, .keys = keys, .case_sensitive = case_sensitive,
			   .reverse = reverse};
	merge_sort(&s, idx, tmp, n);
	if (s.rc)
		return s.rc;
	if ((rc = jx_list_new(c, at, n, out)))
		return rc;
	for (size_t i = 0; i < n; i++)
		out->u.l->v[i] = items[idx[i]];
	return 0;
}

int jx_dictsort(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		struct jv *out)
{
	struct filter_call f = {.c = c, .at = at, .name = "dictsort", .in = self, .a = a};
	bool cs, rev;
	const struct jv *by;
	struct jv items;
	int rc = arg_bool(&f, 0, "case_sensitive", false, &cs);
	if (rc || (rc = arg_str(&f, 1, "by", &by)) || (rc = arg_bool(&f, 2, "reverse", false, &rev)))
		return rc;
	bool by_value = by && by->u.s.n == 5 && memcmp(by->u.s.p, "value", 5) == 0;
	if (by && !by_value && !(by->u.s.n == 3 && memcmp(by->u.s.p, "key", 3) == 0))
		return jx_err(c, at, JINJA_E_RUNTIME, "dictsort: by must be 'key' or 'value'");
	if ((rc = jx_dict_items(c, at, self, &items)))
		return rc;
	size_t n = items.u.l->n;
	struct jv *keys = jx_alloc(c, (n + 1) * sizeof(*keys));
	if (!keys)
		return jx_nomem(c, at);
	for (size_t i = 0; i < n; i++)
		keys[i] = items.u.l->v[i].u.l->v[by_value];
	return sort_by_keys(c, at, items.u.l->v, keys, n, cs, rev, out);
}

static int f_dictsort(struct filter_call *f, struct jv *out)
{
	if (f->in.k != JV_DICT)
		return ferr_type(f);
	return jx_dictsort(f->c, f->at, f->in, f->a, out);
}

static int f_sort(struct filter_call *f, struct jv *out)
{
	bool rev, cs;
	const struct jv *attr = jargs_get(f->a, 2, "attribute");
	int rc = arg_bool(f, 0, "reverse", false, &rev);
	if (rc || (rc = arg_bool(f, 1, "case_sensitive", false, &cs)))
		return rc;
	if (f->in.k != JV_LIST)
		return ferr_type(f);
	size_t n = f->in.u.l->n;
	struct jv *keys = jx_alloc(f->c, (n + 1) * sizeof(*keys));
	if (!keys)
		return jx_nomem(f->c, f->at);
	char num[24];
	for (size_t i = 0; i < n; i++) {
		keys[i] = f->in.u.l->v[i];
		if (attr && attr->k == JV_STR)
			keys[i] = jx_attr_path(keys[i], attr->u.s.p, attr->u.s.n);
		else if (attr && attr->k == JV_INT) {
			snprintf(num, sizeof(num), "%lld", (long long)attr->u.i);
			keys[i] = jx_attr_path(keys[i], num, strlen(num));
		}
	}
	return sort_by_keys(f->c, f->at, f->in.u.l->v, keys, n, cs, rev, out);
}

/* ---- strings ---- */

int jx_str_replace(struct jctx *c, const struct jn *at, struct jv self, struct jv from,
		   struct jv to, int64_t count, struct jv *out)
{
	struct jbuf b = {0};
	const char *p = self.u.s.p, *end = p + self.u.s.n;
	int rc = 0;
	if (count == 0) {
		*out = self;
		return 0;
	}
	while (!rc && p <= end) {
		/* an empty pattern matches between code points */
		const char *hit = from.u.s.n == 0 ? p : memmem(p, (size_t)(end - p), from.u.s.p, from.u.s.n);
		if (!hit || count == 0)
			break;
		rc = jbuf_put(c, at, &b, p, (size_t)(hit - p));
		if (!rc)
			rc = jbuf_put(c, at, &b, to.u.s.p, to.u.s.n);
		if (count > 0)
			count--;
		if (from.u.s.n == 0) {
			if (hit == end) {
				p = end + 1;
				break;
			}
			size_t l = jv_cp_len(hit, (size_t)(end - hit));
			if (!rc)
				rc = jbuf_put(c, at, &b, hit, l);
			p = hit + l;
		} else {
			p = hit + from.u.s.n;
		}
	}
	if (!rc && p < end)
		rc = jbuf_put(c, at, &b, p, (size_t)(end - p));
	if (!rc)
		rc = jx_buf_value(c, at, &b, out);
	free(b.p);
	return rc;
}

static int f_replace(struct filter_call *f, struct jv *out)
{
	if (f->in.k != JV_STR)
		return ferr_type(f);
	struct jv m;
	int rc = jx_method(f->c, f->at, f->in, "replace", 7, &m);
	return rc ? rc : jx_call_value(f->c, f->at, m, f->a, out);
}

/* upper, lower, title, capitalize: the string methods of the same name. */
static int f_str_method(struct filter_call *f, struct jv *out)
{
	struct jv m;
	if (f->in.k != JV_STR)
		return ferr_type(f);
	int rc = jx_method(f->c, f->at, f->in, f->name, strlen(f->name), &m);
	struct jargs none = {0};
	return rc ? rc : jx_call_value(f->c, f->at, m, &none, out);
}

static int f_trim(struct filter_call *f, struct jv *out)
{
	if (f->in.k != JV_STR)
		return ferr_type(f);
	struct jv m;
	struct jargs none = {0};
	int rc = jx_method(f->c, f->at, f->in, "strip", 5, &m);
	return rc ? rc : jx_call_value(f->c, f->at, m, &none, out);
}

static int f_indent(struct filter_call *f, struct jv *out)
{
	const struct jv *w = jargs_get(f->a, 0, "width");
	bool first, blank;
	int rc = arg_bool(f, 1, "first", false, &first);
	if (rc || (rc = arg_bool(f, 2, "blank", false, &blank)))
		return rc;
	if (f->in.k != JV_STR)
		return ferr_type(f);
	if (w && w->k != JV_INT && w->k != JV_STR)
		return jx_err(f->c, f->at, JINJA_E_RUNTIME, "indent: width must be an integer or a string");
	struct jbuf pad = {0}, b = {0};
	int64_t width = !w ? 4 : w->k == JV_INT ? w->u.i : 0;
	for (int64_t i = 0; !rc && i < width; i++)
		rc = jbuf_put(f->c, f->at, &pad, " ", 1);
	if (!rc && w && w->k == JV_STR)
		rc = jbuf_put(f->c, f->at, &pad, w->u.s.p, w->u.s.n);
	const char *p = f->in.u.s.p, *end = p + f->in.u.s.n;
	for (size_t line = 0; !rc; line++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		if ((first || line > 0) && (blank || le > p))
			rc = jbuf_put(f->c, f->at, &b, pad.p, pad.n);
		if (!rc)
			rc = jbuf_put(f->c, f->at, &b, p, (size_t)(le - p) + (nl != NULL));
		if (!nl)
			break;
		p = nl + 1;
	}
	if (!rc)
		rc = jx_buf_value(f->c, f->at, &b, out);
	free(pad.p);
	free(b.p);
	return rc;
}

/* JavaScript's parseInt(s, 10) / parseFloat(s): the longest number at the
 * start after white space; false when there is none. */
static bool js_parse_number(const char *p, size_t n, bool integer, double *out)
{
	size_t i = 0, len;
	while (i < n && (len = jinja_js_space(p + i, n - i)) > 0)
		i += len;
	char buf[128];
	size_t k = 0;
	if (i < n && (p[i] == '+' || p[i] == '-'))
		buf[k++] = p[i++];
	if (!integer && n - i >= 8 && memcmp(p + i, "Infinity", 8) == 0) {
		*out = k && buf[0] == '-' ? -INFINITY : INFINITY;
		return true;
	}
	size_t digits = 0;
	while (i < n && k < sizeof(buf) - 8 && ((p[i] >= '0' && p[i] <= '9') ||
						(!integer && p[i] == '.' && !memchr(buf, '.', k)))) {
		digits += p[i] != '.';
		buf[k++] = p[i++];
	}
	if (digits == 0)
		return false;
	if (!integer && i + 1 < n && (p[i] == 'e' || p[i] == 'E')) {
		size_t j = i + 1, save = k;
		buf[k++] = 'e';
		if (j < n && (p[j] == '+' || p[j] == '-'))
			buf[k++] = p[j++];
		size_t ed = 0;
		while (j < n && k < sizeof(buf) - 1 && p[j] >= '0' && p[j] <= '9') {
			buf[k++] = p[j++];
			ed++;
		}
		if (ed == 0)
			k = save;
	}
	buf[k] = '\0';
	*out = strtod(buf, NULL);
	return true;
}

static int f_int_float(struct filter_call *f, struct jv *out)
{
	bool integer = f->name[0] == 'i';
	const struct jv *def = jargs_get(f->a, 0, "default");
	struct jv d = def ? *def : integer ? jv_int(0) : jv_float(0);
	struct jv in = f->in;
	double x;
	if (in.k == JV_STR) {
		if (!js_parse_number(in.u.s.p, in.u.s.n, integer, &x)) {
			*out = d;
			return 0;
		}
	} else if (in.k == JV_INT || in.k == JV_FLOAT || in.k == JV_BOOL) {
		x = in.k == JV_INT ? (double)in.u.i : in.k == JV_BOOL ? in.u.b : in.u.f;
		if (in.k == JV_INT && integer) {
			*out = in;
			return 0;
		}
	} else if (in.k == JV_NONE || in.k == JV_LIST || in.k == JV_DICT) {
		*out = d; /* Jinja2 catches int(None)'s TypeError (the reference refuses) */
		f->c->jinja2_only = true;
		return 0;
	} else {
		return ferr_type(f);
	}
	if (!integer) {
		*out = jv_float(x);
		return 0;
	}
	x = trunc(x);
	if (!(fabs(x) < 9.2e18))
		return jx_err(f->c, f->at, JINJA_E_RUNTIME, "int: %g does not fit an integer", x);
	*out = jv_int((int64_t)x);
	return 0;
}

static int f_abs(struct filter_call *f, struct jv *out)
{
	if (f->in.k == JV_FLOAT) {
		*out = jv_float(fabs(f->in.u.f));
		return 0;
	}
	if (f->in.k != JV_INT)
		return ferr_type(f);
	if (f->in.u.i == INT64_MIN)
		return jx_err(f->c, f->at, JINJA_E_RUNTIME, "abs: integer overflow");
	*out = jv_int(f->in.u.i < 0 ? -f->in.u.i : f->in.u.i);
	return 0;
}

static int f_string(struct filter_call *f, struct jv *out)
{
	if (f->in.k == JV_STR) {
		*out = f->in;
		return 0;
	}
	struct jbuf b = {0};
	int rc = f->in.k == JV_UNDEF ? 0
		 : f->in.k == JV_NONE ? jbuf_puts(f->c, f->at, &b, "None")
				      : jv_print(f->c, f->at, &b, f->in);
	if (!rc)
		rc = jx_buf_value(f->c, f->at, &b, out);
	free(b.p);
	return rc;
}

int jx_join(struct jctx *c, const struct jn *at, struct jv items, struct jv sep,
	    const struct jv *attr, struct jv *out)
{
	struct jbuf b = {0};
	int rc = 0;
	for (size_t i = 0; !rc && i < items.u.l->n; i++) {
		struct jv v = items.u.l->v[i];
		if (attr)
			v = jx_attr_path(v, attr->u.s.p, attr->u.s.n);
		if (i)
			rc = jbuf_put(c, at, &b, sep.u.s.p, sep.u.s.n);
		/* Array.prototype.join: null and undefined items are empty */
		if (!rc && v.k != JV_NONE && v.k != JV_UNDEF)
			rc = jv_js_string(c, at, &b, v);
	}
	if (!rc)
		rc = jx_buf_value(c, at, &b, out);
	free(b.p);
	return rc;
}

int jx_str_chars(struct jctx *c, const struct jn *at, struct jv s, struct jv *out)
{
	size_t n = 0;
	for (size_t k = 0; k < s.u.s.n; k += jv_cp_len(s.u.s.p + k, s.u.s.n - k))
		n++;
	int rc = jx_list_new(c, at, n, out);
	size_t i = 0;
	for (size_t k = 0; !rc && k < s.u.s.n; i++) {
		size_t l = jv_cp_len(s.u.s.p + k, s.u.s.n - k);
		out->u.l->v[i] = jv_str(s.u.s.p + k, l);
		k += l;
	}
	return rc;
}

static int f_join(struct filter_call *f, struct jv *out)
{
	const struct jv *sep, *attr;
	struct jv items = f->in;
	int rc = arg_str(f, 0, "separator", &sep);
	if (rc || (rc = arg_str(f, 1, "attribute", &attr)))
		return rc;
	if (items.k == JV_STR)
		rc = jx_str_chars(f->c, f->at, items, &items);
	else if (items.k != JV_LIST)
		return ferr_type(f);
	return rc ? rc : jx_join(f->c, f->at, items, sep ? *sep : jv_str("", 0), attr, out);
}

static int f_tojson(struct filter_call *f, struct jv *out)
{
	/* the reference reads keyword arguments only */
	const struct jv *ind = jargs_kw(f->a, "indent"), *sep = jargs_kw(f->a, "separators");
	bool ascii = false, sort = false;
	const struct jv *v;
	if ((v = jargs_kw(f->a, "ensure_ascii")) && v->k == JV_BOOL)
		ascii = v->u.b;
	if ((v = jargs_kw(f->a, "sort_keys")) && v->k == JV_BOOL)
		sort = v->u.b;
	if (ind && ind->k != JV_INT && ind->k != JV_NONE)
		return jx_err(f->c, f->at, JINJA_E_RUNTIME, "tojson: indent must be an integer");
	int64_t indent = ind && ind->k == JV_INT ? ind->u.i : 0;
	if (indent < 0 || indent > 64)
		indent = indent < 0 ? 0 : 64;
	struct jjson_opts o = {.indent = (int)indent, .item_sep = indent ? "," : ", ", .key_sep = ": ",
			       .ensure_ascii = ascii, .sort_keys = sort, .undef_null = true};
	if (sep && sep->k != JV_NONE) {
		if (sep->k != JV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].k != JV_STR ||
		    sep->u.l->v[1].k != JV_STR)
			return jx_err(f->c, f->at, JINJA_E_RUNTIME,
				      "tojson: separators must be a tuple of two strings");
		/* the separators are strings of the template or context: NUL-free */
		char *a = jarena_strdup(&f->c->arena, sep->u.l->v[0].u.s.p, sep->u.l->v[0].u.s.n);
		char *b = jarena_strdup(&f->c->arena, sep->u.l->v[1].u.s.p, sep->u.l->v[1].u.s.n);
		if (!a || !b)
			return jx_nomem(f->c, f->at);
		o.item_sep = a;
		o.key_sep = b;
	}
	struct jbuf b = {0};
	int rc = jv_to_json(f->c, f->at, &b, f->in, &o, 0);
	if (!rc)
		rc = jx_buf_value(f->c, f->at, &b, out);
	free(b.p);
	return rc;
}

static int f_length(struct filter_call *f, struct jv *out)
{
	struct jv in = f->in;
	if (in.k == JV_LIST)
		*out = jv_int((int64_t)in.u.l->n);
	else if (in.k == JV_STR) {
		*out = jv_int((int64_t)jv_utf16_len(in.u.s.p, in.u.s.n));
		return jx_charge(f->c, f->at, in.u.s.n / 64);
	}
	else if (in.k == JV_DICT || in.k == JV_NS)
		*out = jv_int((int64_t)in.u.d->n);
	else
		return ferr_type(f);
	return 0;
}

static int f_first_last(struct filter_call *f, struct jv *out)
{
	struct jv in = f->in;
	int rc = 0;
	if (in.k == JV_STR)
		rc = jx_str_chars(f->c, f->at, in, &in);
	else if (in.k != JV_LIST)
		return ferr_type(f);
	size_t n = rc ? 0 : in.u.l->n;
	*out = n == 0 ? jv_undef() : in.u.l->v[f->name[0] == 'f' ? 0 : n - 1];
	return rc;
}

static int f_list(struct filter_call *f, struct jv *out)
{
	if (f->in.k == JV_LIST) {
		*out = f->in;
		return 0;
	}
	if (f->in.k == JV_STR)
		return jx_str_chars(f->c, f->at, f->in, out);
	if (f->in.k == JV_DICT)
		return jx_dict_keys(f->c, f->at, f->in, out);
	return ferr_type(f);
}

static int f_reverse(struct filter_call *f, struct jv *out)
{
	struct jv in = f->in;
	bool str = in.k == JV_STR;
	int rc = str ? jx_str_chars(f->c, f->at, in, &in) : in.k == JV_LIST ? 0 : ferr_type(f);
	if (rc)
		return rc;
	size_t n = in.u.l->n;
	struct jv r;
	if ((rc = jx_list_new(f->c, f->at, n, &r)))
		return rc;
	for (size_t i = 0; i < n; i++)
		r.u.l->v[i] = in.u.l->v[n - 1 - i];
	if (!str) {
		*out = r;
		return 0;
	}
	return jx_join(f->c, f->at, r, jv_str("", 0), NULL, out);
}

static int f_unique(struct filter_call *f, struct jv *out)
{
	if (f->in.k != JV_LIST)
		return ferr_type(f);
	size_t n = f->in.u.l->n, k = 0;
	int rc = jx_charge(f->c, f->at, n * n / 16);
	if (rc || (rc = jx_list_new(f->c, f->at, n, out)))
		return rc;
	for (size_t i = 0; i < n; i++) {
		struct jv v = f->in.u.l->v[i];
		bool seen = false;
		for (size_t j = 0; j < k && !seen; j++)
			seen = jv_strict_eq(out->u.l->v[j], v);
		if (!seen)
			out->u.l->v[k++] = v;
	}
	out->u.l->n = k;
	return 0;
}

static int f_items(struct filter_call *f, struct jv *out)
{
	if (f->in.k == JV_DICT)
		return jx_dict_items(f->c, f->at, f->in, out);
	if (f->in.k == JV_UNDEF) { /* Jinja2: an empty sequence */
		f->c->jinja2_only = true;
		return jx_list_new(f->c, f->at, 0, out);
	}
	return ferr_type(f);
}

static int f_default(struct filter_call *f, struct jv *out)
{
	const struct jv *d = jargs_get(f->a, 0, NULL);
	bool boolean;
	int rc = arg_bool(f, 1, "boolean", false, &boolean);
	if (rc)
		return rc;
	if (f->in.k == JV_UNDEF || (boolean && !jv_truthy(f->in)))
		*out = d ? *d : jv_str("", 0);
	else
		*out = f->in;
	return 0;
}

static int f_safe(struct filter_call *f, struct jv *out)
{
	*out = f->in;
	return 0;
}

static int f_bool(struct filter_call *f, struct jv *out)
{
	*out = jv_bool(jv_truthy(f->in));
	return 0;
}

static int f_attr(struct filter_call *f, struct jv *out)
{
	const struct jv *name = jargs_get(f->a, 0, "name");
	*out = jv_undef();
	if (!name || name->k != JV_STR)
		return jx_err(f->c, f->at, JINJA_E_RUNTIME, "attr: needs an attribute name");
	if (f->in.k == JV_DICT || f->in.k == JV_NS) {
		struct jv *v = jx_dict_get(f->in.u.d, name->u.s.p, name->u.s.n);
		if (v)
			*out = *v;
	}
	return 0;
}

/* selectattr / rejectattr / select / reject */
static int f_select(struct filter_call *f, struct jv *out)
{
	bool attr_mode = strstr(f->name, "attr") != NULL, keep_pass = f->name[0] == 's';
	const struct jargs *a = f->a;
	size_t ti = attr_mode ? 1 : 0;
	if (f->in.k != JV_LIST)
		return ferr_type(f);
	if (attr_mode && (a->n < 1 || a->pos[0].k != JV_STR))
		return jx_err(f->c, f->at, JINJA_E_RUNTIME, "%s: needs an attribute name", f->name);
	if (a->n > ti && a->pos[ti].k != JV_STR)
		return jx_err(f->c, f->at, JINJA_E_RUNTIME, "%s: the test name must be a string", f->name);
	struct jargs targs = {.n = a->n > ti + 1 ? a->n - ti - 1 : 0, .pos = a->pos + ti + 1};
	size_t n = f->in.u.l->n, k = 0;
	int rc = jx_list_new(f->c, f->at, n, out);
	for (size_t i = 0; !rc && i < n; i++) {
		struct jv item = f->in.u.l->v[i], v = item;
		bool pass = false;
		if (attr_mode) {
			if (item.k != JV_DICT && item.k != JV_NS)
				return jx_err(f->c, f->at, JINJA_E_RUNTIME,
					      "%s: items must be mappings, not %s", f->name, jv_type_name(item));
			struct jv *got = jx_dict_get(item.u.d, a->pos[0].u.s.p, a->pos[0].u.s.n);
			v = got ? *got : jv_undef();
			if (!got) { /* the reference: a missing key fails the test */
				if (!keep_pass)
					out->u.l->v[k++] = item;
				continue;
			}
		}
		if (a->n > ti)
			rc = jx_test(f->c, f->at, a->pos[ti].u.s.p, a->pos[ti].u.s.n, v, &targs, &pass);
		else
			pass = jv_truthy(v);
		if (!rc && pass == keep_pass)
			out->u.l->v[k++] = item;
	}
	if (!rc)
		out->u.l->n = k;
	return rc;
}

static int f_map(struct filter_call *f, struct jv *out)
{
	const struct jv *attr = jargs_kw(f->a, "attribute"), *def = jargs_kw(f->a, "default");
	if (f->in.k != JV_LIST)
		return ferr_type(f);
	size_t n = f->in.u.l->n;
	int rc = jx_list_new(f->c, f->at, n, out);
	if (rc)
		return rc;
	if (attr) {
		if (attr->k != JV_STR)
			return jx_err(f->c, f->at, JINJA_E_RUNTIME, "map: attribute must be a string");
		for (size_t i = 0; i < n; i++) {
			struct jv item = f->in.u.l->v[i];
			if (item.k != JV_DICT && item.k != JV_NS)
				return jx_err(f->c, f->at, JINJA_E_RUNTIME, "map: items must be mappings, not %s",
					      jv_type_name(item));
			struct jv v = jx_attr_path(item, attr->u.s.p, attr->u.s.n);
			out->u.l->v[i] = v.k == JV_UNDEF && def ? *def : v;
		}
		return 0;
	}
	/* map('filter', args...): beyond the reference, as Jinja2 */
	if (f->a->n < 1 || f->a->pos[0].k != JV_STR)
		return jx_err(f->c, f->at, JINJA_E_RUNTIME, "map: needs attribute= or a filter name");
	struct jargs rest = {.n = f->a->n - 1, .pos = f->a->pos + 1};
	for (size_t i = 0; !rc && i < n; i++)
		rc = jx_filter(f->c, f->s, f->at, f->a->pos[0].u.s.p, f->a->pos[0].u.s.n,
			       f->in.u.l->v[i], &rest, &out->u.l->v[i]);
	return rc;
}

static int f_batch(struct filter_call *f, struct jv *out)
{
	const struct jv *size = jargs_get(f->a, 0, "linecount"), *fill = jargs_get(f->a, 1, "fill_with");
	if (f->in.k != JV_LIST)
		return ferr_type(f);
	if (!size || size->k != JV_INT || size->u.i <= 0)
		return jx_err(f->c, f->at, JINJA_E_RUNTIME, "batch: needs a positive size");
	size_t n = f->in.u.l->n, per = (size_t)size->u.i, groups = (n + per - 1) / per;
	int rc = jx_list_new(f->c, f->at, groups, out);
	for (size_t g = 0; !rc && g < groups; g++) {
		size_t have = n - g * per < per ? n - g * per : per;
		size_t len = fill && fill->k != JV_NONE ? per : have;
		struct jv part;
		if ((rc = jx_list_new(f->c, f->at, len, &part)))
			break;
		for (size_t i = 0; i < len; i++)
			part.u.l->v[i] = i < have ? f->in.u.l->v[g * per + i] : *fill;
		out->u.l->v[g] = part;
	}
	return rc;
}

static int f_minmax(struct filter_call *f, struct jv *out)
{
	const struct jv *attr;
	bool cs;
	int rc = arg_bool(f, 0, "case_sensitive", false, &cs);
	if (rc || (rc = arg_str(f, 1, "attribute", &attr)))
		return rc;
	if (f->in.k != JV_LIST)
		return ferr_type(f);
	bool want_max = f->name[1] == 'a';
	*out = jv_undef();
	struct jv best_key = jv_undef();
	for (size_t i = 0; i < f->in.u.l->n; i++) {
		struct jv v = f->in.u.l->v[i], key = attr ? jx_attr_path(v, attr->u.s.p, attr->u.s.n) : v;
		int cmp = 0;
		if (i && (rc = jv_compare(f->c, f->at, key, best_key, cs, &cmp)))
			return rc;
		if (i == 0 || (want_max ? cmp > 0 : cmp < 0)) {
			*out = v;
			best_key = key;
		}
	}
	return 0;
}

static int f_sum(struct filter_call *f, struct jv *out)
{
	const struct jv *attr, *start = jargs_get(f->a, 1, "start");
	int rc = arg_str(f, 0, "attribute", &attr);
	if (rc)
		return rc;
	if (f->in.k != JV_LIST)
		return ferr_type(f);
	*out = start ? *start : jv_int(0);
	for (size_t i = 0; !rc && i < f->in.u.l->n; i++) {
		struct jv v = f->in.u.l->v[i];
		if (attr)
			v = jx_attr_path(v, attr->u.s.p, attr->u.s.n);
		if (v.k != JV_INT && v.k != JV_FLOAT)
			return jx_err(f->c, f->at, JINJA_E_RUNTIME, "sum: cannot add a %s", jv_type_name(v));
		rc = jx_binop(f->c, f->at, JOP_ADD, *out, v, out);
	}
	return rc;
}

static int f_round(struct filter_call *f, struct jv *out)
{
	const struct jv *prec = jargs_get(f->a, 0, "precision"), *method;
	int rc = arg_str(f, 1, "method", &method);
	if (rc)
		return rc;
	if (f->in.k != JV_INT && f->in.k != JV_FLOAT)
		return ferr_type(f);
	int64_t p = prec && prec->k == JV_INT ? prec->u.i : 0;
	if (p < -15 || p > 15)
		p = p < 0 ? -15 : 15;
	double x = f->in.k == JV_INT ? (double)f->in.u.i : f->in.u.f, m = pow(10, (double)p);
	char how = method ? method->u.s.p[0] : 'c';
	/* common: Python's round, halves to even */
	bool ceil_up = how == 'c' && method && method->u.s.n == 4;
	double r = how == 'f' ? floor(x * m) / m : ceil_up ? ceil(x * m) / m : nearbyint(x * m) / m;
	*out = jv_float(r);
	return 0;
}

static int f_wordcount(struct filter_call *f, struct jv *out)
{
	if (f->in.k != JV_STR)
		return ferr_type(f);
	int rc = jx_charge(f->c, f->at, f->in.u.s.n / 64);
	if (rc)
		return rc;
	int64_t words = 0;
	bool in_word = false;
	for (size_t i = 0; i < f->in.u.s.n;) {
		size_t sp = jinja_js_space(f->in.u.s.p + i, f->in.u.s.n - i);
		if (sp) {
			in_word = false;
			i += sp;
			continue;
		}
		words += !in_word;
		in_word = true;
		i += jv_cp_len(f->in.u.s.p + i, f->in.u.s.n - i);
	}
	*out = jv_int(words);
	return 0;
}

static int f_truncate(struct filter_call *f, struct jv *out)
{
	const struct jv *len = jargs_get(f->a, 0, "length"), *end;
	bool killwords;
	int rc = arg_bool(f, 1, "killwords", false, &killwords);
	if (rc || (rc = arg_str(f, 2, "end", &end)))
		return rc;
	if (f->in.k != JV_STR)
		return ferr_type(f);
	if ((rc = jx_charge(f->c, f->at, f->in.u.s.n / 64)))
		return rc;
	int64_t max = len && len->k == JV_INT ? len->u.i : 255;
	struct jv e = end ? *end : jv_str("...", 3);
	size_t n = 0, cut = 0;
	for (size_t k = 0; k < f->in.u.s.n; k += jv_cp_len(f->in.u.s.p + k, f->in.u.s.n - k))
		n++;
	if ((int64_t)n <= max + 5) { /* Jinja2's default leeway of 5 */
		*out = f->in;
		return 0;
	}
	int64_t keep = max - (int64_t)jv_utf16_len(e.u.s.p, e.u.s.n);
	for (int64_t i = 0; i < keep && cut < f->in.u.s.n; i++)
		cut += jv_cp_len(f->in.u.s.p + cut, f->in.u.s.n - cut);
	if (!killwords)
		while (cut > 0 && f->in.u.s.p[cut - 1] != ' ')
			cut--;
	while (!killwords && cut > 0 && f->in.u.s.p[cut - 1] == ' ')
		cut--;
	return jx_str_cat(f->c, f->at, f->in.u.s.p, cut, e.u.s.p, e.u.s.n, out);
}

static int f_escape(struct filter_call *f, struct jv *out)
{
	struct jv in = f->in;
	struct jbuf b = {0};
	int rc = 0;
	if (in.k != JV_STR) {
		if ((rc = f_string(f, &in)))
			return rc;
	}
	for (size_t i = 0; !rc && i < in.u.s.n; i++) {
		char ch = in.u.s.p[i];
		const char *rep = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;"
				 : ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
		rc = rep ? jbuf_puts(f->c, f->at, &b, rep) : jbuf_put(f->c, f->at, &b, &ch, 1);
	}
	if (!rc)
		rc = jx_buf_value(f->c, f->at, &b, out);
	free(b.p);
	return rc;
}

static const struct {
	const char *name;
	filter_fn fn;
} filters[] = {
	{"safe", f_safe},         {"tojson", f_tojson},       {"trim", f_trim},
	{"length", f_length},     {"count", f_length},        {"upper", f_str_method},
	{"lower", f_str_method},  {"title", f_str_method},    {"capitalize", f_str_method},
	{"replace", f_replace},   {"indent", f_indent},       {"int", f_int_float},
	{"float", f_int_float},   {"abs", f_abs},             {"string", f_string},
	{"join", f_join},         {"first", f_first_last},    {"last", f_first_last},
	{"list", f_list},         {"reverse", f_reverse},     {"unique", f_unique},
	{"sort", f_sort},         {"items", f_items},         {"dictsort", f_dictsort},
	{"default", f_default},   {"d", f_default},           {"bool", f_bool},
	{"attr", f_attr},         {"selectattr", f_select},   {"rejectattr", f_select},
	{"select", f_select},     {"reject", f_select},       {"map", f_map},
	{"batch", f_batch},       {"max", f_minmax},          {"min", f_minmax},
	{"sum", f_sum},           {"round", f_round},         {"wordcount", f_wordcount},
	{"truncate", f_truncate}, {"escape", f_escape},       {"e", f_escape},
};

/* Where @huggingface/jinja refuses an undefined or none input and Jinja2
 * renders, render as Jinja2: its string filters read undefined as "" and
 * none as "None" (str(None); but truncate takes len(None) and fails), and
 * its sequence filters read undefined as an empty sequence (none stays an
 * error there, as in Jinja2).  Templates rely on it: Hermes 3's
 * `param_fields.description|trim` for a parameter without a description. */
static const char *const str_filters[] = {"trim", "upper", "lower", "title", "capitalize",
					  "replace", "wordcount", "truncate", NULL};
static const char *const seq_filters[] = {"length", "count", "join", "list", "sort", "unique",
					  "selectattr", "rejectattr", "select", "reject", "map",
					  "batch", "first", "last", "min", "max", "sum", NULL};

static bool name_in(const char *const *names, const char *name)
{
	for (; *names; names++)
		if (strcmp(*names, name) == 0)
			return true;
	return false;
}

static int lenient_input(struct jctx *c, const struct jn *at, const char *name, struct jv *in)
{
	bool undef = in->k == JV_UNDEF, none = in->k == JV_NONE;
	bool other = !undef && !none && in->k != JV_STR && strcmp(name, "truncate");
	if ((undef || (none && strcmp(name, "truncate"))) && name_in(str_filters, name)) {
		*in = undef ? jv_str("", 0) : jv_str("None", 4);
		c->jinja2_only = true;
	} else if ((other && name_in(str_filters, name)) ||
		   (in->k == JV_DICT && strcmp(name, "string") == 0)) {
		/* a number, list or dict: str() of it (Llama 3's content|trim of
		 * content parts prints their Python repr) */
		struct jbuf b = {0};
		c->jinja2_only = true;
		int rc = jv_py_str(c, at, &b, *in);
		if (!rc)
			rc = jx_buf_value(c, at, &b, in);
		free(b.p);
		return rc;
	} else if (undef && name_in(seq_filters, name)) {
		c->jinja2_only = true;
		return jx_list_new(c, at, 0, in);
	}
	return 0;
}

int jx_filter(struct jctx *c, struct jscope *s, const struct jn *at, const char *name,
	      size_t name_len, struct jv in, const struct jargs *args, struct jv *out)
{
	*out = jv_undef();
	for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) {
		if (strlen(filters[i].name) != name_len || memcmp(filters[i].name, name, name_len))
			continue;
		struct filter_call f = {.c = c, .s = s, .at = at, .name = filters[i].name, .in = in,
					.a = args};
		int rc = jx_charge(c, at, 1);
		if (rc || (rc = lenient_input(c, at, f.name, &f.in)))
			return rc;
		if (++c->depth > c->max_depth) /* map('map', 'map', ...) recurses */
			return jx_err(c, at, JINJA_E_BUDGET, "nested deeper than %u", c->max_depth);
		rc = filters[i].fn(&f, out);
		c->depth--;
		return rc;
	}
	return jx_err(c, at, JINJA_E_RUNTIME, "unknown filter '%.*s'",
		      (int)(name_len > 40 ? 40 : name_len), name);
}
