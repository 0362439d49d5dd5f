/* Jinja builtins other than filters: the operators, the tests (`is
 * defined`, ...), the methods of strings, lists and dicts, and the global
 * functions (range, namespace, raise_exception, strftime_now).  What the
 * reference (@huggingface/jinja) has behaves as there; what it lacks and
 * Jinja2 has (str.find, is divisibleby, ...) follows Jinja2, so a
 * template using it renders here and fails there.  Methods that would
 * change a value (list.append, dict.update, ...) are refused, as
 * transformers' immutable sandbox refuses them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <time.h>
#include <wctype.h>

#include "chat/jinja_internal.h"
#include "util/errbuf.h"
#include "util/utf8.h"

const struct jv *jargs_kw(const struct jargs *a, const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 0; i < a->nk; i++)
		if (a->kname_len[i] == n && memcmp(a->kname[i], name, n) == 0)
			return &a->kval[i];
	return NULL;
}

const struct jv *jargs_get(const struct jargs *a, size_t i, const char *name)
{
	if (i < a->n)
		return &a->pos[i];
	return name ? jargs_kw(a, name) : NULL;
}

static bool eq(const char *s, size_t n, const char *w)
{
	return n == strlen(w) && memcmp(s, w, n) == 0;
}

static int make_fn(struct jctx *c, const struct jn *at, const char *name, jbuiltin_fn fn,
		   struct jv self, struct jv *out)
{
	struct jfunc *f = jx_alloc(c, sizeof(*f));
	if (!f)
		return jx_nomem(c, at);
	*f = (struct jfunc){.kind = JFN_BUILTIN, .name = name, .fn = fn, .self = self};
	*out = (struct jv){.k = JV_FUNC, .u.fn = f};
	return 0;
}

/* ---- dicts, loops ---- */

int jx_dict_items(struct jctx *c, const struct jn *at, struct jv d, struct jv *out)
{
	const struct jdict *dict = d.u.d;
	int rc = jx_list_new(c, at, dict->n, out);
	for (size_t i = 0; !rc && i < dict->n; i++) {
		struct jv pair;
		if ((rc = jx_list_new(c, at, 2, &pair)))
			break;
		pair.u.l->v[0] = jv_str(dict->e[i].k, dict->e[i].kn);
		pair.u.l->v[1] = dict->e[i].v;
		out->u.l->v[i] = pair;
	}
	return rc;
}

int jx_dict_keys(struct jctx *c, const struct jn *at, struct jv d, struct jv *out)
{
	int rc = jx_list_new(c, at, d.u.d->n, out);
	for (size_t i = 0; !rc && i < d.u.d->n; i++)
		out->u.l->v[i] = jv_str(d.u.d->e[i].k, d.u.d->e[i].kn);
	return rc;
}

struct jv jx_loop_member(struct jloop *l, const char *name, size_t n)
{
	int64_t i = l->index0, len = l->length;
	if (eq(name, n, "index"))
		return jv_int(i + 1);
	if (eq(name, n, "index0"))
		return jv_int(i);
	if (eq(name, n, "revindex"))
		return jv_int(len - i);
	if (eq(name, n, "revindex0"))
		return jv_int(len - i - 1);
	if (eq(name, n, "first"))
		return jv_bool(i == 0);
	if (eq(name, n, "last"))
		return jv_bool(i == len - 1);
	if (eq(name, n, "length"))
		return jv_int(len);
	if (eq(name, n, "previtem"))
		return i > 0 ? l->items[i - 1] : jv_undef();
	if (eq(name, n, "nextitem"))
		return i < len - 1 ? l->items[i + 1] : jv_undef();
	return jv_undef();
}

int jx_loop_dict(struct jctx *c, struct jloop *l, struct jv *out)
{
	static const char *const names[] = {"index", "index0", "revindex", "revindex0", "first",
					    "last", "length", "previtem", "nextitem"};
	struct jdict *d = jx_dict_new(c);
	if (!d)
		return jx_nomem(c, NULL);
	for (size_t i = 0; i < 9; i++) {
		int rc = jx_dict_set(c, d, names[i], strlen(names[i]),
				     jx_loop_member(l, names[i], strlen(names[i])));
		if (rc)
			return rc;
	}
	*out = (struct jv){.k = JV_DICT, .u.d = d};
	return 0;
}

struct jv jx_attr_path(struct jv item, const char *path, size_t n)
{
	size_t start = 0;
	while (start <= n) {
		const char *dot = memchr(path + start, '.', n - start);
		size_t end = dot ? (size_t)(dot - path) : n;
		const char *part = path + start;
		size_t pn = end - start;
		if (item.k == JV_DICT || item.k == JV_NS) {
			struct jv *v = jx_dict_get(item.u.d, part, pn);
			item = v ? *v : jv_undef();
		} else if (item.k == JV_LIST) {
			char buf[24];
			char *e;
			if (pn == 0 || pn >= sizeof(buf))
				return jv_undef();
			memcpy(buf, part, pn);
			buf[pn] = '\0';
			long long idx = strtoll(buf, &e, 10);
			if (e == buf || idx < 0 || (unsigned long long)idx >= item.u.l->n)
				return jv_undef();
			item = item.u.l->v[idx];
		} else {
			return jv_undef();
		}
		start = end + 1;
	}
	return item;
}

static int dict_get(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		    struct jv *out)
{
	if (a->n < 1 || a->pos[0].k != JV_STR)
		return jx_err(c, at, JINJA_E_RUNTIME, "dict.get: the key must be a string");
	struct jv *v = jx_dict_get(self.u.d, a->pos[0].u.s.p, a->pos[0].u.s.n);
	*out = v ? *v : a->n > 1 ? a->pos[1] : jv_none();
	return 0;
}

static int dict_items(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		      struct jv *out)
{
	(void)a;
	return jx_dict_items(c, at, self, out);
}

static int dict_keys(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		     struct jv *out)
{
	(void)a;
	return jx_dict_keys(c, at, self, out);
}

static int dict_values(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		       struct jv *out)
{
	(void)a;
	int rc = jx_list_new(c, at, self.u.d->n, out);
	for (size_t i = 0; !rc && i < self.u.d->n; i++)
		out->u.l->v[i] = self.u.d->e[i].v;
	return rc;
}

static const char *const mutating[] = {"append", "extend", "insert", "pop", "remove", "clear",
				       "sort", "reverse", "update", "setdefault", "popitem",
				       "add", "discard", NULL};

static int refuse_mutation(struct jctx *c, const struct jn *at, struct jv self, const char *name,
			   size_t n, bool *refused)
{
	*refused = false;
	for (size_t i = 0; mutating[i]; i++)
		if (eq(name, n, mutating[i])) {
			*refused = true;
			return jx_err(c, at, JINJA_E_RUNTIME,
				      "%s.%s(): templates may not change values (the sandbox refuses it)",
				      jv_type_name(self), mutating[i]);
		}
	return 0;
}

int jx_dict_method(struct jctx *c, const struct jn *at, struct jv self, const char *name, size_t n,
		   struct jv *out)
{
	static const struct {
		const char *name;
		jbuiltin_fn fn;
	} methods[] = {{"get", dict_get},       {"items", dict_items},       {"keys", dict_keys},
		       {"values", dict_values}, {"dictsort", jx_dictsort}};
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if (eq(name, n, methods[i].name))
			return make_fn(c, at, methods[i].name, methods[i].fn, self, out);
	bool refused;
	int rc = refuse_mutation(c, at, self, name, n, &refused);
	*out = jv_undef();
	return rc;
}

/* ---- string methods ---- */

static bool is_ascii_space(char ch)
{
	return ch == ' ' || (ch >= '\t' && ch <= '\r');
}

/* A code point in the other case (Unicode simple mappings, through the
 * C.UTF-8 locale; JavaScript's full mappings differ for a few, as ß). */
static uint32_t cp_case(struct jctx *c, uint32_t cp, bool up)
{
	if (cp < 0x80)
		return up ? (uint32_t)toupper((int)cp) : (uint32_t)tolower((int)cp);
	if (!c->ctype_tried) {
		c->ctype_tried = true;
		c->ctype = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
	}
	if (!c->ctype)
		return cp;
	wint_t r = up ? towupper_l((wint_t)cp, c->ctype) : towlower_l((wint_t)cp, c->ctype);
	return r > 0 && r <= 0x10FFFF ? (uint32_t)r : cp;
}

static bool ascii_word(uint32_t cp)
{
	return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
	       cp == '_';
}

/* upper / lower (0, 1): every character; title (2): the reference's
 * /\b\w/ upper-cases an ASCII word's first character and leaves the rest
 * (Python lowers them); capitalize (3): the first character only (Python
 * lowers the rest). */
static int str_case(struct jctx *c, const struct jn *at, struct jv self, int mode, struct jv *out)
{
	struct jbuf b = {0};
	bool word = false;
	int rc = 0;
	for (size_t i = 0; !rc && i < self.u.s.n;) {
		size_t len = 1;
		unsigned char ch = (unsigned char)self.u.s.p[i];
		uint32_t cp = ch < 0x80 ? ch : utf8_decode((const unsigned char *)self.u.s.p + i,
							   self.u.s.n - i, &len);
		bool valid = ch < 0x80 || cp != 0xFFFD || len > 1;
		uint32_t m = cp;
		if (mode <= 1)
			m = cp_case(c, cp, mode == 0);
		else if ((mode == 2 && !word && ascii_word(cp)) || (mode == 3 && i == 0))
			m = cp_case(c, cp, true);
		word = ascii_word(cp);
		char enc[4];
		if (!valid || m == cp)
			rc = jbuf_put(c, at, &b, self.u.s.p + i, len);
		else
			rc = jbuf_put(c, at, &b, enc, utf8_encode(m, enc));
		i += len;
	}
	if (!rc)
		rc = jx_buf_value(c, at, &b, out);
	free(b.p);
	return rc;
}

/* The string methods that take no argument, each a call of one helper. */
#define STR_METHOD(name, call)                                                                  \
	static int name(struct jctx *c, const struct jn *at, struct jv self,                   \
			const struct jargs *a, struct jv *out)                                  \
	{                                                                                      \
		(void)at;                                                                      \
		(void)a;                                                                       \
		return call;                                                                   \
	}

STR_METHOD(m_upper, str_case(c, at, self, 0, out))
STR_METHOD(m_lower, str_case(c, at, self, 1, out))
STR_METHOD(m_title, str_case(c, at, self, 2, out))
STR_METHOD(m_capitalize, str_case(c, at, self, 3, out))

/* strip / lstrip / rstrip remove JavaScript white space and ignore their
 * argument, as the reference does: .strip('\n') strips spaces too there
 * (Python would strip only newlines). */
static int str_trim(struct jctx *c, struct jv self, bool left, bool right, struct jv *out)
{
	const char *p = self.u.s.p;
	size_t n = self.u.s.n, len;
	(void)c;
	while (left && n > 0 && (len = jinja_js_space(p, n)) > 0) {
		p += len;
		n -= len;
	}
	if (right)
		n -= jinja_js_space_end(p, n);
	*out = jv_str(p, n);
	return 0;
}

STR_METHOD(m_strip, str_trim(c, self, true, true, out))
STR_METHOD(m_lstrip, str_trim(c, self, true, false, out))
STR_METHOD(m_rstrip, str_trim(c, self, false, true, out))

static bool has_affix(struct jv s, struct jv x, bool end)
{
	if (x.u.s.n > s.u.s.n)
		return false;
	const char *p = end ? s.u.s.p + s.u.s.n - x.u.s.n : s.u.s.p;
	return memcmp(p, x.u.s.p, x.u.s.n) == 0;
}

static int str_affix(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		     bool end, struct jv *out)
{
	const char *what = end ? "endswith" : "startswith";
	if (a->n < 1)
		return jx_err(c, at, JINJA_E_RUNTIME, "%s(): needs an argument", what);
	struct jv x = a->pos[0];
	if (x.k == JV_STR) {
		*out = jv_bool(has_affix(self, x, end));
		return 0;
	}
	if (x.k != JV_LIST)
		return jx_err(c, at, JINJA_E_RUNTIME, "%s(): the argument must be a string or a tuple of strings",
			      what);
	for (size_t i = 0; i < x.u.l->n; i++) {
		if (x.u.l->v[i].k != JV_STR)
			return jx_err(c, at, JINJA_E_RUNTIME, "%s(): tuple items must be strings", what);
		if (has_affix(self, x.u.l->v[i], end)) {
			*out = jv_bool(true);
			return 0;
		}
	}
	*out = jv_bool(false);
	return 0;
}

static int m_startswith(struct jctx *c, const struct jn *at, struct jv self,
			const struct jargs *a, struct jv *out)
{
	return str_affix(c, at, self, a, false, out);
}

static int m_endswith(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		      struct jv *out)
{
	return str_affix(c, at, self, a, true, out);
}

/* memmem: linear time, so that a hostile pattern cannot make a search
 * quadratic. */
static const char *find_bytes(const char *h, size_t hn, const char *n, size_t nn)
{
	if (nn == 0)
		return h;
	return memmem(h, hn, n, nn);
}

struct list_builder {
	struct jv *v;
	size_t n, cap;
};

static int lb_push(struct jctx *c, const struct jn *at, struct list_builder *b, struct jv v)
{
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 8;
		struct jv *nv = jx_alloc(c, cap * sizeof(*nv));
		if (!nv)
			return jx_nomem(c, at);
		if (b->n)
			memcpy(nv, b->v, b->n * sizeof(*nv));
		b->v = nv;
		b->cap = cap;
	}
	b->v[b->n++] = v;
	return jx_charge(c, at, 1);
}

static int lb_finish(struct jctx *c, const struct jn *at, struct list_builder *b, struct jv *out)
{
	int rc = jx_list_new(c, at, 0, out);
	if (!rc) {
		out->u.l->v = b->v;
		out->u.l->n = b->n;
	}
	return rc;
}

/* split on white space (sep none), Python's rules with maxsplit */
static int split_space(struct jctx *c, const struct jn *at, struct jv self, int64_t max,
		       struct list_builder *b)
{
	const char *p = self.u.s.p, *end = p + self.u.s.n;
	size_t len;
	int rc = 0;
	while (!rc) {
		while (p < end && (len = jinja_js_space(p, (size_t)(end - p))) > 0)
			p += len;
		if (p >= end)
			break;
		if (max >= 0 && (int64_t)b->n >= max) {
			rc = lb_push(c, at, b, jv_str(p, (size_t)(end - p)));
			break;
		}
		const char *w = p;
		while (p < end && jinja_js_space(p, (size_t)(end - p)) == 0)
			p += jv_cp_len(p, (size_t)(end - p));
		rc = lb_push(c, at, b, jv_str(w, (size_t)(p - w)));
	}
	return rc;
}

static int str_split(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		     bool from_right, struct jv *out)
{
	const struct jv *sep = jargs_get(a, 0, "sep"), *maxv = jargs_get(a, 1, "maxsplit");
	int64_t max = maxv && maxv->k == JV_INT ? maxv->u.i : -1;
	struct list_builder b = {0};
	int rc = 0;
	if (maxv && maxv->k != JV_INT)
		return jx_err(c, at, JINJA_E_RUNTIME, "split(): maxsplit must be an integer");
	if ((rc = jx_charge(c, at, self.u.s.n / 64)))
		return rc;
	if (!sep || sep->k == JV_NONE || sep->k == JV_UNDEF) {
		if ((rc = split_space(c, at, self, from_right ? -1 : max, &b)))
			return rc;
		return lb_finish(c, at, &b, out);
	}
	if (sep->k != JV_STR || sep->u.s.n == 0)
		return jx_err(c, at, JINJA_E_RUNTIME, "split(): the separator must be a non-empty string");
	const char *p = self.u.s.p, *end = p + self.u.s.n, *hit;
	while (!rc && (hit = find_bytes(p, (size_t)(end - p), sep->u.s.p, sep->u.s.n))) {
		if (!from_right && max >= 0 && (int64_t)b.n >= max)
			break;
		rc = lb_push(c, at, &b, jv_str(p, (size_t)(hit - p)));
		p = hit + sep->u.s.n;
	}
	if (!rc)
		rc = lb_push(c, at, &b, jv_str(p, (size_t)(end - p)));
	if (!rc && from_right && max >= 0 && (int64_t)b.n > max + 1) {
		/* rsplit: join the leading pieces back into one */
		size_t keep = (size_t)max, first = b.n - keep - 1;
		const char *s0 = b.v[0].u.s.p;
		const char *e0 = b.v[first].u.s.p + b.v[first].u.s.n;
		b.v[0] = jv_str(s0, (size_t)(e0 - s0));
		memmove(b.v + 1, b.v + first + 1, keep * sizeof(*b.v));
		b.n = keep + 1;
	}
	return rc ? rc : lb_finish(c, at, &b, out);
}

static int m_split(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		   struct jv *out)
{
	return str_split(c, at, self, a, false, out);
}

static int m_rsplit(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		    struct jv *out)
{
	return str_split(c, at, self, a, true, out);
}

static int m_replace(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		     struct jv *out)
{
	const struct jv *cnt = jargs_get(a, 2, "count");
	if (a->n < 2 || a->pos[0].k != JV_STR || a->pos[1].k != JV_STR)
		return jx_err(c, at, JINJA_E_RUNTIME, "replace(): needs two strings");
	if (cnt && cnt->k != JV_INT && cnt->k != JV_NONE)
		return jx_err(c, at, JINJA_E_RUNTIME, "replace(): count must be an integer");
	int64_t n = cnt && cnt->k == JV_INT ? cnt->u.i : -1;
	return jx_str_replace(c, at, self, a->pos[0], a->pos[1], n, out);
}

static int str_arg(struct jctx *c, const struct jn *at, const struct jargs *a, const char *what,
		   struct jv *x)
{
	if (a->n < 1 || a->pos[0].k != JV_STR)
		return jx_err(c, at, JINJA_E_RUNTIME, "%s(): needs a string argument", what);
	*x = a->pos[0];
	return 0;
}

static int64_t cp_index(const char *p, size_t byte_off)
{
	int64_t n = 0;
	for (size_t k = 0; k < byte_off; k += jv_cp_len(p + k, byte_off - k))
		n++;
	return n;
}

static int m_find(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		  struct jv *out)
{
	struct jv x = {0};
	int rc = str_arg(c, at, a, "find", &x);
	if (rc || (rc = jx_charge(c, at, self.u.s.n / 64)))
		return rc;
	const char *hit = find_bytes(self.u.s.p, self.u.s.n, x.u.s.p, x.u.s.n);
	*out = jv_int(hit ? cp_index(self.u.s.p, (size_t)(hit - self.u.s.p)) : -1);
	return 0;
}

static int m_count(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		   struct jv *out)
{
	if (self.k == JV_LIST) {
		int64_t n = 0;
		for (size_t i = 0; a->n > 0 && i < self.u.l->n; i++)
			n += jv_strict_eq(self.u.l->v[i], a->pos[0]);
		*out = jv_int(n);
		return 0;
	}
	struct jv x = {0};
	int rc = str_arg(c, at, a, "count", &x);
	if (rc || (rc = jx_charge(c, at, self.u.s.n / 64)))
		return rc;
	int64_t n = 0;
	if (x.u.s.n == 0) {
		n = cp_index(self.u.s.p, self.u.s.n) + 1;
	} else {
		const char *p = self.u.s.p, *end = p + self.u.s.n, *hit;
		while ((hit = find_bytes(p, (size_t)(end - p), x.u.s.p, x.u.s.n))) {
			n++;
			p = hit + x.u.s.n;
		}
	}
	*out = jv_int(n);
	return 0;
}

static int m_join(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		  struct jv *out)
{
	if (a->n < 1 || a->pos[0].k != JV_LIST)
		return jx_err(c, at, JINJA_E_RUNTIME, "join(): needs a list");
	return jx_join(c, at, a->pos[0], self, NULL, out);
}

static int str_class(struct jv self, int cls)
{
	if (self.u.s.n == 0)
		return 0;
	for (size_t i = 0; i < self.u.s.n; i++) {
		char ch = self.u.s.p[i];
		bool ok = cls == 0   ? ch >= '0' && ch <= '9'
			  : cls == 1 ? (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
			  : cls == 2 ? is_ascii_space(ch)
				     : (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') ||
					       (ch >= 'A' && ch <= 'Z');
		if (!ok)
			return 0;
	}
	return 1;
}

/* isdigit / isalpha / isspace / isalnum: ASCII classes, false when empty. */
static int str_is(struct jv self, int cls, struct jv *out)
{
	*out = jv_bool(str_class(self, cls));
	return 0;
}

STR_METHOD(m_isdigit, str_is(self, 0, out))
STR_METHOD(m_isalpha, str_is(self, 1, out))
STR_METHOD(m_isspace, str_is(self, 2, out))
STR_METHOD(m_isalnum, str_is(self, 3, out))

static int m_index(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		   struct jv *out)
{
	for (size_t i = 0; a->n > 0 && i < self.u.l->n; i++)
		if (jv_strict_eq(self.u.l->v[i], a->pos[0])) {
			*out = jv_int((int64_t)i);
			return 0;
		}
	return jx_err(c, at, JINJA_E_RUNTIME, "list.index(): value not in the list");
}

static const struct {
	const char *name;
	jbuiltin_fn fn;
} str_methods[] = {
	{"upper", m_upper},         {"lower", m_lower},       {"strip", m_strip},
	{"title", m_title},         {"capitalize", m_capitalize}, {"rstrip", m_rstrip},
	{"lstrip", m_lstrip},       {"startswith", m_startswith}, {"endswith", m_endswith},
	{"split", m_split},         {"rsplit", m_rsplit},     {"replace", m_replace},
	{"find", m_find},           {"count", m_count},       {"join", m_join},
	{"isdigit", m_isdigit},     {"isalpha", m_isalpha},   {"isspace", m_isspace},
	{"isalnum", m_isalnum},
};

int jx_method(struct jctx *c, const struct jn *at, struct jv self, const char *name, size_t n,
	      struct jv *out)
{
	*out = jv_undef();
	if (self.k == JV_STR) {
		if (eq(name, n, "length")) { /* JavaScript's .length: UTF-16 units */
			*out = jv_int((int64_t)jv_utf16_len(self.u.s.p, self.u.s.n));
			return jx_charge(c, at, self.u.s.n / 64);
		}
		for (size_t i = 0; i < sizeof(str_methods) / sizeof(str_methods[0]); i++)
			if (eq(name, n, str_methods[i].name))
				return make_fn(c, at, str_methods[i].name, str_methods[i].fn, self, out);
		return 0;
	}
	if (self.k == JV_LIST) {
		if (eq(name, n, "length")) {
			*out = jv_int((int64_t)self.u.l->n);
			return 0;
		}
		if (eq(name, n, "index"))
			return make_fn(c, at, "index", m_index, self, out);
		if (eq(name, n, "count"))
			return make_fn(c, at, "count", m_count, self, out);
		bool refused;
		return refuse_mutation(c, at, self, name, n, &refused);
	}
	return 0;
}

/* ---- globals ---- */

static int g_range(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		   struct jv *out)
{
	(void)self;
	int64_t v[3] = {0, 0, 1};
	if (a->n < 1 || a->n > 3)
		return jx_err(c, at, JINJA_E_RUNTIME, "range(): takes 1 to 3 integers");
	for (size_t i = 0; i < a->n; i++) {
		if (a->pos[i].k != JV_INT)
			return jx_err(c, at, JINJA_E_RUNTIME, "range(): arguments must be integers, not %s",
				      jv_type_name(a->pos[i]));
	}
	if (a->n == 1)
		v[1] = a->pos[0].u.i;
	else
		for (size_t i = 0; i < a->n; i++)
			v[i] = a->pos[i].u.i;
	if (v[2] == 0)
		return jx_err(c, at, JINJA_E_RUNTIME, "range(): step must not be zero");
	/* the count in unsigned arithmetic: no overflow for any bounds */
	uint64_t count = 0;
	if (v[2] > 0 && v[1] > v[0])
		count = ((uint64_t)v[1] - (uint64_t)v[0] - 1) / (uint64_t)v[2] + 1;
	else if (v[2] < 0 && v[1] < v[0])
		count = ((uint64_t)v[0] - (uint64_t)v[1] - 1) / (0 - (uint64_t)v[2]) + 1;
	if (count > c->max_steps)
		return jx_err(c, at, JINJA_E_BUDGET, "range(): %llu items, over the step budget of %llu",
			      (unsigned long long)count, (unsigned long long)c->max_steps);
	int rc = jx_list_new(c, at, (size_t)count, out);
	for (uint64_t i = 0; !rc && i < count; i++)
		out->u.l->v[i] = jv_int((int64_t)((uint64_t)v[0] + i * (uint64_t)v[2]));
	return rc;
}

static int ns_add_pair(struct jctx *c, const struct jn *at, struct jdict *d, struct jv pair)
{
	if (pair.k != JV_LIST || pair.u.l->n != 2 || pair.u.l->v[0].k != JV_STR)
		return jx_err(c, at, JINJA_E_RUNTIME,
			      "namespace(): expected a mapping or a list of [key, value] pairs");
	return jx_dict_set(c, d, pair.u.l->v[0].u.s.p, pair.u.l->v[0].u.s.n, pair.u.l->v[1]);
}

static int g_namespace(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		       struct jv *out)
{
	(void)self;
	struct jdict *d = jx_dict_new(c);
	int rc = 0;
	if (!d)
		return jx_nomem(c, at);
	if (a->n > 1)
		return jx_err(c, at, JINJA_E_RUNTIME, "namespace(): at most 1 positional argument");
	if (a->n == 1) {
		struct jv src = a->pos[0];
		if (src.k == JV_DICT) {
			for (size_t i = 0; !rc && i < src.u.d->n; i++)
				rc = jx_dict_set(c, d, src.u.d->e[i].k, src.u.d->e[i].kn, src.u.d->e[i].v);
		} else if (src.k == JV_LIST) {
			for (size_t i = 0; !rc && i < src.u.l->n; i++)
				rc = ns_add_pair(c, at, d, src.u.l->v[i]);
		} else {
			return jx_err(c, at, JINJA_E_RUNTIME, "namespace(): cannot read a %s",
				      jv_type_name(src));
		}
	}
	for (size_t i = 0; !rc && i < a->nk; i++)
		rc = jx_dict_set(c, d, a->kname[i], a->kname_len[i], a->kval[i]);
	*out = (struct jv){.k = JV_NS, .u.d = d};
	return rc;
}

static int g_dict(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		  struct jv *out)
{
	int rc = g_namespace(c, at, self, a, out);
	out->k = JV_DICT;
	return rc;
}

/* The message is the arguments as JavaScript prints an array of them. */
static int g_raise(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		   struct jv *out)
{
	(void)self;
	(void)out;
	struct jbuf b = {0};
	struct jlist l = {.n = a->n, .v = a->pos};
	int rc = jv_js_string(c, at, &b, (struct jv){.k = JV_LIST, .u.l = &l});
	if (!rc)
		rc = jx_err(c, at, JINJA_E_RAISED, "%s", b.p ? b.p : "");
	free(b.p);
	return rc;
}

/* strftime_now(format): the reference knows %Y %m %d %b %B %H %M and %%
 * and leaves any other directive as written (Python would expand %S, %p,
 * ...); the time is env->now in UTC. */
static int g_strftime(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		      struct jv *out)
{
	static const char *const months[] = {"January", "February", "March",     "April",
					     "May",     "June",     "July",      "August",
					     "September", "October", "November", "December"};
	(void)self;
	if (a->n < 1 || a->pos[0].k != JV_STR)
		return jx_err(c, at, JINJA_E_RUNTIME, "strftime_now(): needs a format string");
	struct tm tm;
	time_t now = c->now;
	if (!gmtime_r(&now, &tm))
		return jx_err(c, at, JINJA_E_RUNTIME, "strftime_now(): time out of range");
	struct jbuf b = {0};
	const char *f = a->pos[0].u.s.p;
	size_t n = a->pos[0].u.s.n;
	int rc = 0;
	for (size_t i = 0; !rc && i < n; i++) {
		char piece[32];
		char d = i + 1 < n && f[i] == '%' ? f[i + 1] : '\0';
		if (d == 'Y')
			snprintf(piece, sizeof(piece), "%d", tm.tm_year + 1900);
		else if (d == 'm' || d == 'd' || d == 'H' || d == 'M')
			snprintf(piece, sizeof(piece), "%02d",
				 d == 'm' ? tm.tm_mon + 1 : d == 'd' ? tm.tm_mday : d == 'H' ? tm.tm_hour : tm.tm_min);
		else if (d == 'b')
			snprintf(piece, sizeof(piece), "%.3s", months[tm.tm_mon]);
		else if (d == 'B')
			snprintf(piece, sizeof(piece), "%s", months[tm.tm_mon]);
		else if (d == '%')
			snprintf(piece, sizeof(piece), "%%");
		else {
			rc = jbuf_put(c, at, &b, f + i, 1);
			continue;
		}
		i++;
		rc = jbuf_puts(c, at, &b, piece);
	}
	if (!rc)
		rc = jx_buf_value(c, at, &b, out);
	free(b.p);
	return rc;
}

int jx_global(struct jctx *c, const char *name, size_t n, struct jv *out)
{
	static const struct {
		const char *name;
		jbuiltin_fn fn;
	} globals[] = {{"range", g_range},
		       {"namespace", g_namespace},
		       {"dict", g_dict},
		       {"raise_exception", g_raise},
		       {"strftime_now", g_strftime}};
	for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++)
		if (eq(name, n, globals[i].name))
			return make_fn(c, NULL, globals[i].name, globals[i].fn, jv_undef(), out);
	return -1;
}

/* ---- tests ---- */

static int test_arg(struct jctx *c, const struct jn *at, const char *name, const struct jargs *a,
		    struct jv *x)
{
	if (a->n < 1)
		return jx_err(c, at, JINJA_E_RUNTIME, "test '%s': needs an argument", name);
	*x = a->pos[0];
	return 0;
}

/* The reference's lower / upper tests: the string equals its lower
 * (upper) case form. */
static bool is_case_str(struct jctx *c, struct jv v, bool upper)
{
	for (size_t i = 0; i < v.u.s.n;) {
		size_t len = 1;
		unsigned char ch = (unsigned char)v.u.s.p[i];
		uint32_t cp = ch < 0x80 ? ch : utf8_decode((const unsigned char *)v.u.s.p + i,
							   v.u.s.n - i, &len);
		if (cp_case(c, cp, upper) != cp)
			return false;
		i += len;
	}
	return true;
}

static int test_compare(struct jctx *c, const struct jn *at, const char *name, struct jv in,
			const struct jargs *a, bool *out)
{
	struct jv x = {0};
	int cmp, rc = test_arg(c, at, name, a, &x);
	if (rc)
		return rc;
	if (!strcmp(name, "ne")) {
		*out = !jv_loose_eq(c, in, x);
		return 0;
	}
	if ((rc = jv_compare(c, at, in, x, true, &cmp)))
		return rc;
	*out = !strcmp(name, "lt")   ? cmp < 0
	       : !strcmp(name, "gt") ? cmp > 0
	       : !strcmp(name, "le") ? cmp <= 0
				     : cmp >= 0;
	return 0;
}

static int test_in(struct jctx *c, const struct jn *at, struct jv in, const struct jargs *a,
		   bool *out)
{
	struct jv x, r;
	int rc = test_arg(c, at, "in", a, &x);
	if (rc || (rc = jx_binop(c, at, JOP_IN, in, x, &r)))
		return rc;
	*out = r.u.b;
	return 0;
}

static int test_int(struct jctx *c, const struct jn *at, const char *name, struct jv in,
		    const struct jargs *a, bool *out)
{
	if (in.k != JV_INT)
		return jx_err(c, at, JINJA_E_RUNTIME, "test '%s': needs an integer, not %s", name,
			      jv_type_name(in));
	if (!strcmp(name, "odd") || !strcmp(name, "even")) {
		*out = (in.u.i % 2 != 0) == (name[0] == 'o');
		return 0;
	}
	struct jv d = {0};
	int rc = test_arg(c, at, name, a, &d);
	if (rc)
		return rc;
	if (d.k != JV_INT || d.u.i == 0)
		return jx_err(c, at, JINJA_E_RUNTIME, "test 'divisibleby': needs a non-zero integer");
	*out = d.u.i == -1 || in.u.i % d.u.i == 0;
	return 0;
}

int jx_test(struct jctx *c, const struct jn *at, const char *name, size_t n, struct jv in,
	    const struct jargs *a, bool *out)
{
	char nm[16];
	if (n >= sizeof(nm))
		return jx_err(c, at, JINJA_E_RUNTIME, "unknown test '%.*s'", (int)(n > 40 ? 40 : n), name);
	memcpy(nm, name, n);
	nm[n] = '\0';
	uint8_t k = in.k;
	struct jv x = {0};
	int rc;
	if (!strcmp(nm, "defined") || !strcmp(nm, "undefined"))
		*out = (k != JV_UNDEF) == (nm[0] == 'd');
	else if (!strcmp(nm, "none"))
		*out = k == JV_NONE;
	else if (!strcmp(nm, "boolean"))
		*out = k == JV_BOOL;
	else if (!strcmp(nm, "true") || !strcmp(nm, "false"))
		*out = k == JV_BOOL && in.u.b == (nm[0] == 't');
	else if (!strcmp(nm, "string"))
		*out = k == JV_STR;
	else if (!strcmp(nm, "number"))
		*out = k == JV_INT || k == JV_FLOAT;
	else if (!strcmp(nm, "integer"))
		*out = k == JV_INT;
	else if (!strcmp(nm, "float"))
		*out = k == JV_FLOAT;
	else if (!strcmp(nm, "mapping")) /* the reference: dicts, not namespaces */
		*out = k == JV_DICT || k == JV_LOOP;
	else if (!strcmp(nm, "iterable")) /* the reference: lists and strings, not dicts or tuples */
		*out = (k == JV_LIST && !in.tuple) || k == JV_STR;
	else if (!strcmp(nm, "sequence"))
		*out = k == JV_LIST || k == JV_DICT || k == JV_LOOP || k == JV_STR;
	else if (!strcmp(nm, "callable"))
		*out = k == JV_FUNC;
	else if (!strcmp(nm, "lower") || !strcmp(nm, "upper"))
		*out = k == JV_STR && is_case_str(c, in, nm[0] == 'u');
	else if (!strcmp(nm, "odd") || !strcmp(nm, "even") || !strcmp(nm, "divisibleby"))
		return test_int(c, at, nm, in, a, out);
	else if (!strcmp(nm, "equalto") || !strcmp(nm, "eq") || !strcmp(nm, "sameas")) {
		if ((rc = test_arg(c, at, nm, a, &x)))
			return rc;
		*out = jv_strict_eq(in, x);
	} else if (!strcmp(nm, "ne") || !strcmp(nm, "lt") || !strcmp(nm, "gt") ||
		   !strcmp(nm, "le") || !strcmp(nm, "ge"))
		return test_compare(c, at, nm, in, a, out);
	else if (!strcmp(nm, "in"))
		return test_in(c, at, in, a, out);
	else
		return jx_err(c, at, JINJA_E_RUNTIME, "unknown test '%s'", nm);
	return 0;
}
