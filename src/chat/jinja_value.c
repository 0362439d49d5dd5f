/* Jinja run-time values: the arena they live in, strings, lists and
 * ordered dicts, and how values print, compare and turn into JSON.  The
 * reference renderer (@huggingface/jinja) runs on JavaScript, and where a
 * chat template can see it, JavaScript shows through: numbers print as
 * JavaScript prints them (a float that is a whole number prints "2.0", but
 * 2.0 inside tojson or after + prints "2"), == is JavaScript's loose
 * equality, string lengths count UTF-16 units.  We follow it there and say
 * so at each place. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat/jinja_internal.h"
#include "util/errbuf.h"

/* ---- arena ---- */

#define JARENA_CHUNK (64u << 10)

struct jarena_chunk {
	struct jarena_chunk *next;
	size_t size, used;
	_Alignas(16) unsigned char data[];
};

void *jarena_alloc(struct jarena *a, size_t n)
{
	if (n > (SIZE_MAX >> 2))
		return NULL;
	n = (n + 15) & ~(size_t)15;
	if (n == 0)
		n = 16;
	struct jarena_chunk *h = a->head;
	if (!h || h->size - h->used < n) {
		size_t size = n > JARENA_CHUNK ? n : JARENA_CHUNK;
		if (a->limit && a->used + size + sizeof(*h) > a->limit) {
			a->over = true;
			return NULL;
		}
		h = malloc(sizeof(*h) + size);
		if (!h)
			return NULL;
		h->size = size;
		h->used = 0;
		a->used += size + sizeof(*h);
		/* a chunk for one large block goes behind the current one so
		 * that the room left in the current one stays usable */
		if (a->head && size > JARENA_CHUNK) {
			h->next = a->head->next;
			a->head->next = h;
		} else {
			h->next = a->head;
			a->head = h;
		}
	}
	void *p = h->data + h->used;
	h->used += n;
	memset(p, 0, n);
	return p;
}

void jarena_free(struct jarena *a)
{
	struct jarena_chunk *h = a->head;
	while (h) {
		struct jarena_chunk *next = h->next;
		free(h);
		h = next;
	}
	a->head = NULL;
	a->used = 0;
}

char *jarena_strdup(struct jarena *a, const char *p, size_t n)
{
	char *s = jarena_alloc(a, n + 1);
	if (s && n)
		memcpy(s, p, n);
	return s;
}

/* ---- errors and budgets ---- */

int jx_err(struct jctx *c, const struct jn *at, int code, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (code == JINJA_E_RAISED)
		return err_set(c->err, c->err_len, code, "%s", msg);
	if (!at)
		at = c->last;
	if (!at)
		return err_set(c->err, c->err_len, code, "%s", msg);
	return err_set(c->err, c->err_len, code, "%u:%u: %s", at->line, at->col, msg);
}

int jx_nomem(struct jctx *c, const struct jn *at)
{
	if (c->arena.over)
		return jx_err(c, at, JINJA_E_BUDGET, "memory budget of %zu bytes spent",
			      c->arena.limit);
	return jx_err(c, at, JINJA_E_NOMEM, "out of memory");
}

int jx_charge(struct jctx *c, const struct jn *at, uint64_t n)
{
	c->steps += n;
	if (c->steps > c->max_steps)
		return jx_err(c, at, JINJA_E_BUDGET, "step budget of %llu spent",
			      (unsigned long long)c->max_steps);
	return 0;
}

void *jx_alloc(struct jctx *c, size_t n)
{
	return jarena_alloc(&c->arena, n);
}

int jx_str_new(struct jctx *c, const struct jn *at, size_t n, char **p, struct jv *out)
{
	if (n > c->max_output)
		return jx_err(c, at, JINJA_E_BUDGET, "a string of %zu bytes, over the budget of %zu", n,
			      c->max_output);
	int rc = jx_charge(c, at, n / 64);
	if (rc)
		return rc;
	*p = jx_alloc(c, n + 1);
	if (!*p)
		return jx_nomem(c, at);
	*out = jv_str(*p, n);
	return 0;
}

int jx_str_cat(struct jctx *c, const struct jn *at, const char *a, size_t an, const char *b,
	       size_t bn, struct jv *out)
{
	char *p;
	if (an > SIZE_MAX / 2 || bn > SIZE_MAX / 2)
		return jx_err(c, at, JINJA_E_BUDGET, "string too long");
	int rc = jx_str_new(c, at, an + bn, &p, out);
	if (rc)
		return rc;
	if (an)
		memcpy(p, a, an);
	if (bn)
		memcpy(p + an, b, bn);
	return 0;
}

int jx_list_new(struct jctx *c, const struct jn *at, size_t n, struct jv *out)
{
	int rc = jx_charge(c, at, n);
	if (rc)
		return rc;
	struct jlist *l = jx_alloc(c, sizeof(*l));
	if (!l || n > SIZE_MAX / sizeof(struct jv) / 2)
		return jx_nomem(c, at);
	l->n = n;
	if (n && !(l->v = jx_alloc(c, n * sizeof(*l->v))))
		return jx_nomem(c, at);
	*out = (struct jv){.k = JV_LIST, .u.l = l};
	return 0;
}

struct jdict *jx_dict_new(struct jctx *c)
{
	return jx_alloc(c, sizeof(struct jdict));
}

#define JDICT_INDEX_FROM 16

static uint64_t key_hash(const char *k, size_t kn)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (size_t i = 0; i < kn; i++)
		h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
	return h;
}

struct jv *jx_dict_get(const struct jdict *d, const char *k, size_t kn)
{
	if (d->slots) {
		size_t mask = d->n_slots - 1;
		for (size_t i = key_hash(k, kn) & mask; d->slots[i]; i = (i + 1) & mask) {
			struct jent *e = &d->e[d->slots[i] - 1];
			if (e->kn == kn && memcmp(e->k, k, kn) == 0)
				return &e->v;
		}
		return NULL;
	}
	for (size_t i = 0; i < d->n; i++)
		if (d->e[i].kn == kn && memcmp(d->e[i].k, k, kn) == 0)
			return &d->e[i].v;
	return NULL;
}

/* (Re)builds the hash index of a dict grown past a few entries, so that a
 * context object with many keys does not make lookups quadratic. */
static int dict_reindex(struct jctx *c, struct jdict *d)
{
	size_t n_slots = 64;
	while (n_slots < 2 * d->n + 2)
		n_slots *= 2;
	uint32_t *slots = jx_alloc(c, n_slots * sizeof(*slots));
	if (!slots || d->n >= UINT32_MAX)
		return jx_nomem(c, NULL);
	for (size_t k = 0; k < d->n; k++) {
		size_t i = key_hash(d->e[k].k, d->e[k].kn) & (n_slots - 1);
		while (slots[i])
			i = (i + 1) & (n_slots - 1);
		slots[i] = (uint32_t)(k + 1);
	}
	d->slots = slots;
	d->n_slots = n_slots;
	return 0;
}

/* Keys are not copied: they are names in the tree, strings in the arena
 * or in the caller's context, which all outlive the render. */
int jx_dict_set(struct jctx *c, struct jdict *d, const char *k, size_t kn, struct jv v)
{
	struct jv *old = jx_dict_get(d, k, kn);
	if (old) {
		*old = v;
		return 0;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 8;
		struct jent *e = jx_alloc(c, cap * sizeof(*e));
		if (!e)
			return jx_nomem(c, NULL);
		if (d->n)
			memcpy(e, d->e, d->n * sizeof(*e));
		d->e = e;
		d->cap = cap;
	}
	d->e[d->n++] = (struct jent){.k = k, .kn = kn, .v = v};
	if (d->n < JDICT_INDEX_FROM)
		return 0;
	if (!d->slots || 2 * d->n + 2 > d->n_slots)
		return dict_reindex(c, d);
	size_t i = key_hash(k, kn) & (d->n_slots - 1);
	while (d->slots[i])
		i = (i + 1) & (d->n_slots - 1);
	d->slots[i] = (uint32_t)d->n;
	return 0;
}

/* ---- truth, equality, order ---- */

bool jv_truthy(struct jv v)
{
	switch (v.k) {
	case JV_BOOL:
		return v.u.b;
	case JV_INT:
		return v.u.i != 0;
	case JV_FLOAT:
		return v.u.f != 0 && !isnan(v.u.f);
	case JV_STR:
		return v.u.s.n > 0;
	case JV_LIST:
		return v.u.l->n > 0;
	case JV_DICT:
		return v.u.d->n > 0;
	case JV_NS: /* the reference: a namespace is always true */
	case JV_FUNC:
	case JV_LOOP:
		return true;
	default:
		return false;
	}
}

static bool is_num(struct jv v)
{
	return v.k == JV_INT || v.k == JV_FLOAT;
}

static double num(struct jv v)
{
	return v.k == JV_INT ? (double)v.u.i : v.k == JV_FLOAT ? v.u.f : v.k == JV_BOOL ? v.u.b : NAN;
}

static bool is_object(struct jv v)
{
	return v.k == JV_LIST || v.k == JV_DICT || v.k == JV_NS || v.k == JV_FUNC || v.k == JV_LOOP;
}

static const void *object_ptr(struct jv v)
{
	return v.k == JV_LIST ? (const void *)v.u.l
	       : v.k == JV_FUNC ? (const void *)v.u.fn
	       : v.k == JV_LOOP ? (const void *)v.u.loop
				: (const void *)v.u.d;
}

/* JavaScript's Number(string). */
static double js_str_number(const char *p, size_t n)
{
	size_t lead = 0;
	size_t len;
	while (lead < n && (len = jinja_js_space(p + lead, n - lead)) > 0)
		lead += len;
	n -= jinja_js_space_end(p + lead, n - lead);
	if (n <= lead)
		return 0;
	char buf[64];
	size_t m = n - lead;
	if (m >= sizeof(buf))
		return NAN;
	memcpy(buf, p + lead, m);
	buf[m] = '\0';
	if (strcmp(buf, "Infinity") == 0 || strcmp(buf, "+Infinity") == 0)
		return INFINITY;
	if (strcmp(buf, "-Infinity") == 0)
		return -INFINITY;
	for (size_t i = 0; i < m; i++)
		if (!strchr("0123456789+-.eE", buf[i]))
			return NAN;
	char *end;
	double d = strtod(buf, &end);
	return *end ? NAN : d;
}

/* A container against a string, number or boolean: JavaScript compares
 * the container's string form ("a,b" == ['a,b'] holds). */
static bool loose_eq_object(struct jctx *c, struct jv obj, struct jv prim)
{
	struct jbuf b = {0};
	bool eq = false;
	if (jv_js_string(c, NULL, &b, obj) == 0) {
		c->steps += b.n / 64; /* the next charge sees it */
		struct jv s = jv_str(b.p ? b.p : "", b.n);
		eq = jv_loose_eq(c, s, prim);
	}
	free(b.p);
	return eq;
}

bool jv_loose_eq(struct jctx *c, struct jv a, struct jv b)
{
	bool an = a.k == JV_UNDEF || a.k == JV_NONE, bn = b.k == JV_UNDEF || b.k == JV_NONE;
	if (an || bn)
		return an && bn;
	if (is_object(a) && is_object(b))
		return a.k == b.k && object_ptr(a) == object_ptr(b);
	if (is_object(a) || is_object(b))
		return is_object(a) ? loose_eq_object(c, a, b) : loose_eq_object(c, b, a);
	if (a.k == JV_STR && b.k == JV_STR) {
		c->steps += a.u.s.n / 64; /* the next charge sees it */
		return a.u.s.n == b.u.s.n && (a.u.s.p == b.u.s.p || memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0);
	}
	double x = a.k == JV_STR ? js_str_number(a.u.s.p, a.u.s.n) : num(a);
	double y = b.k == JV_STR ? js_str_number(b.u.s.p, b.u.s.n) : num(b);
	if (a.k == JV_INT && b.k == JV_INT)
		return a.u.i == b.u.i;
	return x == y;
}

bool jv_strict_eq(struct jv a, struct jv b)
{
	if (is_num(a) && is_num(b))
		return a.k == JV_INT && b.k == JV_INT ? a.u.i == b.u.i : num(a) == num(b);
	if (a.k != b.k)
		return false;
	switch (a.k) {
	case JV_UNDEF:
	case JV_NONE:
		return true;
	case JV_BOOL:
		return a.u.b == b.u.b;
	case JV_STR:
		return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
	default:
		return object_ptr(a) == object_ptr(b);
	}
}

const char *jv_type_name(struct jv v)
{
	static const char *names[] = {"undefined", "none",      "boolean",  "integer",
				      "float",     "string",    "list",     "dict",
				      "namespace", "function",  "loop"};
	if (v.k == JV_LIST && v.tuple)
		return "tuple";
	return v.k < sizeof(names) / sizeof(names[0]) ? names[v.k] : "?";
}

static int ascii_lower(int ch)
{
	return ch >= 'A' && ch <= 'Z' ? ch + 32 : ch;
}

static int str_cmp(const char *a, size_t an, const char *b, size_t bn, bool fold)
{
	size_t n = an < bn ? an : bn;
	if (a == b && an == bn)
		return 0;
	for (size_t i = 0; i < n; i++) {
		int x = (unsigned char)a[i], y = (unsigned char)b[i];
		if (fold) {
			x = ascii_lower(x);
			y = ascii_lower(y);
		}
		if (x != y)
			return x < y ? -1 : 1;
	}
	return an < bn ? -1 : an > bn ? 1 : 0;
}

int jv_compare(struct jctx *c, const struct jn *at, struct jv a, struct jv b,
	       bool case_sensitive, int *cmp)
{
	*cmp = 0;
	if ((a.k == JV_NONE && b.k == JV_NONE) || (a.k == JV_UNDEF && b.k == JV_UNDEF))
		return 0;
	bool an = a.k == JV_INT || a.k == JV_FLOAT || a.k == JV_BOOL;
	bool bn = b.k == JV_INT || b.k == JV_FLOAT || b.k == JV_BOOL;
	if (an && bn) {
		if (a.k == JV_INT && b.k == JV_INT)
			*cmp = a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
		else
			*cmp = num(a) < num(b) ? -1 : num(a) > num(b);
		return 0;
	}
	if (a.k == JV_STR && b.k == JV_STR) {
		*cmp = str_cmp(a.u.s.p, a.u.s.n, b.u.s.p, b.u.s.n, !case_sensitive);
		return 0;
	}
	return jx_err(c, at, JINJA_E_RUNTIME, "cannot compare %s with %s", jv_type_name(a),
		      jv_type_name(b));
}

/* ---- text ---- */

int jbuf_put(struct jctx *c, const struct jn *at, struct jbuf *b, const char *p, size_t n)
{
	if (n == 0)
		return 0;
	if (n > c->max_output || b->n > c->max_output - n)
		return jx_err(c, at, JINJA_E_BUDGET, "output over the budget of %zu bytes",
			      c->max_output);
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *np = realloc(b->p, cap);
		if (!np)
			return jx_err(c, at, JINJA_E_NOMEM, "out of memory");
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->n, p, n);
	b->n += n;
	b->p[b->n] = '\0';
	return 0;
}

int jbuf_puts(struct jctx *c, const struct jn *at, struct jbuf *b, const char *s)
{
	return jbuf_put(c, at, b, s, strlen(s));
}

int jx_buf_value(struct jctx *c, const struct jn *at, const struct jbuf *b, struct jv *out)
{
	char *p;
	int rc = jx_str_new(c, at, b->n, &p, out);
	if (!rc && b->n)
		memcpy(p, b->p, b->n);
	return rc;
}

void jv_js_number(double d, char *out, size_t out_len)
{
	if (isnan(d)) {
		snprintf(out, out_len, "NaN");
		return;
	}
	if (isinf(d)) {
		snprintf(out, out_len, d < 0 ? "-Infinity" : "Infinity");
		return;
	}
	if (d == 0) {
		snprintf(out, out_len, "0");
		return;
	}
	char buf[40];
	for (int prec = 1; prec <= 17; prec++) { /* the shortest digits that read back */
		snprintf(buf, sizeof(buf), "%.*e", prec - 1, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	char digits[24];
	size_t k = 0;
	const char *p = buf;
	bool neg = *p == '-';
	p += neg;
	for (; *p && *p != 'e'; p++)
		if (*p != '.')
			digits[k++] = *p;
	while (k > 1 && digits[k - 1] == '0')
		k--;
	digits[k] = '\0';
	int n = atoi(p + 1) + 1; /* value = 0.DIGITS x 10^n */
	char tmp[64];
	size_t t = 0;
	if (neg)
		tmp[t++] = '-';
	if ((int)k <= n && n <= 21) {
		memcpy(tmp + t, digits, k);
		t += k;
		for (int i = (int)k; i < n; i++)
			tmp[t++] = '0';
	} else if (0 < n && n <= 21) {
		memcpy(tmp + t, digits, (size_t)n);
		t += (size_t)n;
		tmp[t++] = '.';
		memcpy(tmp + t, digits + n, k - (size_t)n);
		t += k - (size_t)n;
	} else if (-6 < n && n <= 0) {
		tmp[t++] = '0';
		tmp[t++] = '.';
		for (int i = 0; i < -n; i++)
			tmp[t++] = '0';
		memcpy(tmp + t, digits, k);
		t += k;
	} else {
		tmp[t++] = digits[0];
		if (k > 1) {
			tmp[t++] = '.';
			memcpy(tmp + t, digits + 1, k - 1);
			t += k - 1;
		}
		t += (size_t)snprintf(tmp + t, sizeof(tmp) - t, "e%c%d", n - 1 < 0 ? '-' : '+',
				      abs(n - 1));
	}
	tmp[t] = '\0';
	snprintf(out, out_len, "%s", tmp);
}

/* What the reference's FloatValue.toString prints. */
static void float_print(double d, char *out, size_t len)
{
	if (d == 0 && signbit(d))
		snprintf(out, len, "-0.0");
	else if (isfinite(d) && d == floor(d) && fabs(d) < 1e21)
		snprintf(out, len, "%.1f", d);
	else
		jv_js_number(d, out, len);
}

static int put_json_string(struct jctx *c, const struct jn *at, struct jbuf *b, const char *s,
			   size_t n, bool ascii)
{
	int rc = jbuf_put(c, at, b, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; !rc && i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		char esc[16];
		size_t cp_len = 1;
		if (ch >= 0x20 && ch != '"' && ch != '\\' && (!ascii || ch < 0x7F)) {
			run++;
			continue;
		}
		rc = jbuf_put(c, at, b, s + i - run, run);
		run = 0;
		if (rc)
			break;
		if (ch == '"' || ch == '\\')
			snprintf(esc, sizeof(esc), "\\%c", ch);
		else if (ch == '\n' || ch == '\r' || ch == '\t' || ch == '\b' || ch == '\f')
			snprintf(esc, sizeof(esc), "\\%c",
				 ch == '\n' ? 'n' : ch == '\r' ? 'r' : ch == '\t' ? 't' : ch == '\b' ? 'b' : 'f');
		else if (ch < 0x80)
			snprintf(esc, sizeof(esc), "\\u%04x", ch);
		else { /* ensure_ascii: \uXXXX per UTF-16 unit */
			cp_len = jv_cp_len(s + i, n - i);
			uint32_t cp = cp_len == 1 ? 0xFFFD : (uint32_t)(ch & (0x7F >> cp_len));
			for (size_t k = 1; k < cp_len; k++)
				cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
			if (cp >= 0x10000)
				snprintf(esc, sizeof(esc), "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
					 0xDC00 + ((cp - 0x10000) & 0x3FF));
			else
				snprintf(esc, sizeof(esc), "\\u%04x", cp);
		}
		rc = jbuf_puts(c, at, b, esc);
		i += cp_len - 1;
	}
	if (!rc)
		rc = jbuf_put(c, at, b, s + n - run, run);
	return rc ? rc : jbuf_put(c, at, b, "\"", 1);
}

/* The order of the reference's sort_keys (localeCompare): letters before
 * case, lower case first on a tie.  An approximation of ICU's root
 * collation that agrees on the ASCII keys of tool schemas. */
static int locale_cmp(const struct jent *a, const struct jent *b)
{
	int r = str_cmp(a->k, a->kn, b->k, b->kn, true);
	if (r)
		return r;
	return -str_cmp(a->k, a->kn, b->k, b->kn, false);
}

static int locale_qsort(const void *a, const void *b)
{
	return locale_cmp(a, b);
}

static int json_pad(struct jctx *c, const struct jn *at, struct jbuf *b, const struct jjson_opts *o,
		    unsigned depth)
{
	int rc = jbuf_put(c, at, b, "\n", 1);
	for (unsigned i = 0; !rc && i < depth; i++)
		for (int k = 0; !rc && k < o->indent; k++)
			rc = jbuf_put(c, at, b, " ", 1);
	return rc;
}

static int json_list(struct jctx *c, const struct jn *at, struct jbuf *b, struct jlist *l,
		     const struct jjson_opts *o, unsigned depth)
{
	int rc = jbuf_put(c, at, b, "[", 1);
	for (size_t i = 0; !rc && i < l->n; i++) {
		if (i)
			rc = jbuf_puts(c, at, b, o->item_sep);
		if (!rc && o->indent)
			rc = json_pad(c, at, b, o, depth + 1);
		if (!rc)
			rc = jv_to_json(c, at, b, l->v[i], o, depth + 1);
	}
	if (!rc && o->indent && l->n)
		rc = json_pad(c, at, b, o, depth);
	return rc ? rc : jbuf_put(c, at, b, "]", 1);
}

static int json_dict(struct jctx *c, const struct jn *at, struct jbuf *b, const struct jdict *d,
		     const struct jjson_opts *o, unsigned depth)
{
	struct jent *e = d->e;
	if (o->sort_keys && d->n > 1) {
		if (!(e = jx_alloc(c, d->n * sizeof(*e))))
			return jx_nomem(c, at);
		memcpy(e, d->e, d->n * sizeof(*e));
		qsort(e, d->n, sizeof(*e), locale_qsort);
	}
	int rc = jbuf_put(c, at, b, "{", 1);
	for (size_t i = 0; !rc && i < d->n; i++) {
		if (i)
			rc = jbuf_puts(c, at, b, o->item_sep);
		if (!rc && o->indent)
			rc = json_pad(c, at, b, o, depth + 1);
		if (!rc)
			rc = put_json_string(c, at, b, e[i].k, e[i].kn, o->ensure_ascii);
		if (!rc)
			rc = jbuf_puts(c, at, b, o->key_sep);
		if (!rc)
			rc = jv_to_json(c, at, b, e[i].v, o, depth + 1);
	}
	if (!rc && o->indent && d->n)
		rc = json_pad(c, at, b, o, depth);
	return rc ? rc : jbuf_put(c, at, b, "}", 1);
}

int jv_to_json(struct jctx *c, const struct jn *at, struct jbuf *b, struct jv v,
	       const struct jjson_opts *o, unsigned depth)
{
	char num_buf[40];
	if (depth > c->max_depth)
		return jx_err(c, at, JINJA_E_BUDGET, "tojson: nested deeper than %u", c->max_depth);
	switch (v.k) {
	case JV_NONE:
		return jbuf_puts(c, at, b, "null");
	case JV_UNDEF:
		return jbuf_puts(c, at, b, o->undef_null ? "null" : "undefined");
	case JV_BOOL:
		return jbuf_puts(c, at, b, v.u.b ? "true" : "false");
	case JV_INT:
		snprintf(num_buf, sizeof(num_buf), "%lld", (long long)v.u.i);
		return jbuf_puts(c, at, b, num_buf);
	case JV_FLOAT: /* JSON.stringify: 2.0 is "2", NaN and infinities are null */
		if (!isfinite(v.u.f))
			return jbuf_puts(c, at, b, "null");
		jv_js_number(v.u.f, num_buf, sizeof(num_buf));
		return jbuf_puts(c, at, b, num_buf);
	case JV_STR:
		return put_json_string(c, at, b, v.u.s.p, v.u.s.n, o->ensure_ascii);
	case JV_LIST:
		return json_list(c, at, b, v.u.l, o, depth);
	case JV_DICT:
	case JV_NS:
		return json_dict(c, at, b, v.u.d, o, depth);
	case JV_LOOP: {
		struct jv d;
		int rc = jx_loop_dict(c, v.u.loop, &d);
		return rc ? rc : json_dict(c, at, b, d.u.d, o, depth);
	}
	default:
		return jx_err(c, at, JINJA_E_RUNTIME, "cannot convert a %s to JSON", jv_type_name(v));
	}
}

int jv_print(struct jctx *c, const struct jn *at, struct jbuf *b, struct jv v)
{
	char num_buf[40];
	static const struct jjson_opts plain = {.item_sep = ", ", .key_sep = ": "};
	if (c->jinja2_only &&
	    (v.k == JV_LIST || v.k == JV_DICT || v.k == JV_NONE || v.k == JV_BOOL))
		return jv_py_str(c, at, b, v);
	switch (v.k) {
	case JV_STR:
		return jbuf_put(c, at, b, v.u.s.p, v.u.s.n);
	case JV_INT:
		snprintf(num_buf, sizeof(num_buf), "%lld", (long long)v.u.i);
		return jbuf_puts(c, at, b, num_buf);
	case JV_FLOAT:
		float_print(v.u.f, num_buf, sizeof(num_buf));
		return jbuf_puts(c, at, b, num_buf);
	case JV_BOOL:
		return jbuf_puts(c, at, b, v.u.b ? "true" : "false");
	case JV_NONE:
		return jbuf_puts(c, at, b, "null");
	case JV_UNDEF:
		return jbuf_puts(c, at, b, "undefined");
	case JV_FUNC: /* the reference prints a JavaScript function's source */
		return jbuf_puts(c, at, b, "[function]");
	default:
		return jv_to_json(c, at, b, v, &plain, 0);
	}
}

/* Python's repr of a string: single quotes unless it holds ' and no ",
 * backslash escapes for the quote, \\ and control characters.  Of the
 * characters Python's isprintable() refuses beyond those, only the C1
 * controls are escaped (\x80-\x9f); others (U+00A0, U+2028, ...) print as
 * they are, where Python would write \xa0 or \u2028. */
static int py_repr_str(struct jctx *c, const struct jn *at, struct jbuf *b, const char *s, size_t n)
{
	char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
	int rc = jbuf_put(c, at, b, &q, 1);
	for (size_t i = 0; !rc && i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		char esc[8];
		if (ch == '\\' || ch == (unsigned char)q)
			snprintf(esc, sizeof(esc), "\\%c", ch);
		else if (ch == '\n' || ch == '\r' || ch == '\t')
			snprintf(esc, sizeof(esc), "\\%c", ch == '\n' ? 'n' : ch == '\r' ? 'r' : 't');
		else if (ch < 0x20 || ch == 0x7f)
			snprintf(esc, sizeof(esc), "\\x%02x", ch);
		else if (ch == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
			 (unsigned char)s[i + 1] < 0xa0)
			snprintf(esc, sizeof(esc), "\\x%02x", (unsigned char)s[++i]);
		else {
			rc = jbuf_put(c, at, b, s + i, 1);
			continue;
		}
		rc = jbuf_puts(c, at, b, esc);
	}
	return rc ? rc : jbuf_put(c, at, b, &q, 1);
}

static int py_repr(struct jctx *c, const struct jn *at, struct jbuf *b, struct jv v, unsigned depth)
{
	int rc = 0;
	if (depth > c->max_depth)
		return jx_err(c, at, JINJA_E_BUDGET, "nested deeper than %u", c->max_depth);
	switch (v.k) {
	case JV_STR:
		return py_repr_str(c, at, b, v.u.s.p, v.u.s.n);
	case JV_LIST:
		rc = jbuf_puts(c, at, b, v.tuple ? "(" : "[");
		for (size_t i = 0; !rc && i < v.u.l->n; i++) {
			if (i)
				rc = jbuf_puts(c, at, b, ", ");
			if (!rc)
				rc = py_repr(c, at, b, v.u.l->v[i], depth + 1);
		}
		if (!rc && v.tuple && v.u.l->n == 1)
			rc = jbuf_puts(c, at, b, ",");
		return rc ? rc : jbuf_puts(c, at, b, v.tuple ? ")" : "]");
	case JV_DICT:
		rc = jbuf_puts(c, at, b, "{");
		for (size_t i = 0; !rc && i < v.u.d->n; i++) {
			const struct jent *e = &v.u.d->e[i];
			if (i)
				rc = jbuf_puts(c, at, b, ", ");
			if (!rc)
				rc = py_repr_str(c, at, b, e->k, e->kn);
			if (!rc)
				rc = jbuf_puts(c, at, b, ": ");
			if (!rc)
				rc = py_repr(c, at, b, e->v, depth + 1);
		}
		return rc ? rc : jbuf_puts(c, at, b, "}");
	default:
		return jv_py_str(c, at, b, v);
	}
}

/* Floats print as the reference's do (Python's repr but for exponents:
 * 1e-05 and 1e+16 in Python, 0.00001 and 10000000000000000.0 here). */
int jv_py_str(struct jctx *c, const struct jn *at, struct jbuf *b, struct jv v)
{
	switch (v.k) {
	case JV_NONE:
		return jbuf_puts(c, at, b, "None");
	case JV_BOOL:
		return jbuf_puts(c, at, b, v.u.b ? "True" : "False");
	case JV_UNDEF:
		return 0;
	case JV_LIST:
	case JV_DICT:
		return py_repr(c, at, b, v, 0);
	default:
		return jv_print(c, at, b, v);
	}
}

int jv_js_string(struct jctx *c, const struct jn *at, struct jbuf *b, struct jv v)
{
	char num_buf[40];
	if (c->jinja2_only && v.k != JV_UNDEF) /* str(v), as Jinja2's ~ and join do */
		return jv_print(c, at, b, v);
	switch (v.k) {
	case JV_FLOAT: /* a plain JavaScript number here: 2.0 is "2" */
		jv_js_number(v.u.f, num_buf, sizeof(num_buf));
		return jbuf_puts(c, at, b, num_buf);
	case JV_LIST: /* Array.prototype.toString: the items printed, joined by "," */
		for (size_t i = 0; i < v.u.l->n; i++) {
			int rc = i ? jbuf_put(c, at, b, ",", 1) : 0;
			if (!rc)
				rc = jv_print(c, at, b, v.u.l->v[i]);
			if (rc)
				return rc;
		}
		return 0;
	case JV_DICT:
	case JV_NS:
	case JV_LOOP:
		return jbuf_puts(c, at, b, "[object Map]");
	case JV_UNDEF:
		return 0;
	default:
		return jv_print(c, at, b, v);
	}
}

size_t jv_cp_len(const char *p, size_t n)
{
	unsigned char ch = (unsigned char)p[0];
	size_t need = ch < 0x80 ? 1 : ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : ch >= 0xC0 ? 2 : 1;
	if (need > n)
		return 1;
	for (size_t i = 1; i < need; i++)
		if (((unsigned char)p[i] & 0xC0) != 0x80)
			return 1;
	return need;
}

size_t jv_utf16_len(const char *p, size_t n)
{
	size_t units = 0;
	for (size_t i = 0; i < n;) {
		size_t l = jv_cp_len(p + i, n - i);
		units += l == 4 ? 2 : 1;
		i += l;
	}
	return units;
}

/* ---- the JSON context ---- */

/* "0", "17": a key JavaScript treats as an array index (below 2^32 - 1,
 * no leading zero or sign). */
static bool index_key(const char *k, uint32_t *idx)
{
	uint64_t v = 0;
	size_t n = strlen(k);
	if (n == 0 || n > 10 || (k[0] == '0' && n > 1))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (k[i] < '0' || k[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(k[i] - '0');
	}
	*idx = (uint32_t)v;
	return v < 0xFFFFFFFFull;
}

struct index_member {
	uint32_t idx;
	size_t pos; /* in the document: of equal keys, the last one's value wins */
	const struct cJSON *e;
};

static int index_member_cmp(const void *a, const void *b)
{
	const struct index_member *x = a, *y = b;
	if (x->idx != y->idx)
		return x->idx < y->idx ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int object_from_json(struct jctx *c, const struct cJSON *j, struct jv *out, unsigned depth)
{
	struct jdict *d = jx_dict_new(c);
	size_t n_index = 0, pos = 0;
	uint32_t idx;
	if (!d)
		return jx_nomem(c, NULL);
	for (const cJSON *e = j->child; e; e = e->next)
		n_index += index_key(e->string, &idx);
	struct index_member *im = jx_alloc(c, (n_index + 1) * sizeof(*im));
	if (!im)
		return jx_nomem(c, NULL);
	n_index = 0;
	for (const cJSON *e = j->child; e; e = e->next, pos++)
		if (index_key(e->string, &idx))
			im[n_index++] = (struct index_member){.idx = idx, .pos = pos, .e = e};
	qsort(im, n_index, sizeof(*im), index_member_cmp);
	/* JavaScript objects list array-index keys first, in numeric order,
	 * then the others as written: the reference iterates the parsed
	 * context in that order */
	for (size_t i = 0; i < n_index; i++) {
		struct jv v;
		int rc = jv_from_json(c, im[i].e, &v, depth + 1);
		if (rc || (rc = jx_dict_set(c, d, im[i].e->string, strlen(im[i].e->string), v)))
			return rc;
	}
	for (const cJSON *e = j->child; e; e = e->next) {
		struct jv v;
		if (index_key(e->string, &idx))
			continue;
		int rc = jv_from_json(c, e, &v, depth + 1);
		if (rc || (rc = jx_dict_set(c, d, e->string, strlen(e->string), v)))
			return rc;
	}
	*out = (struct jv){.k = JV_DICT, .u.d = d};
	return 0;
}

/* Strings and keys point into the caller's cJSON, which outlives the render. */
int jv_from_json(struct jctx *c, const struct cJSON *j, struct jv *out, unsigned depth)
{
	if (depth > c->max_depth)
		return jx_err(c, NULL, JINJA_E_BUDGET, "context nested deeper than %u", c->max_depth);
	if (cJSON_IsNull(j) || !j) {
		*out = jv_none();
	} else if (cJSON_IsBool(j)) {
		*out = jv_bool(cJSON_IsTrue(j));
	} else if (cJSON_IsNumber(j)) {
		double d = j->valuedouble;
		/* JavaScript's Number.isInteger decides, as the reference does */
		if (d == floor(d) && fabs(d) < 9.2e18)
			*out = jv_int((int64_t)d);
		else
			*out = jv_float(d);
	} else if (cJSON_IsString(j)) {
		*out = jv_str(j->valuestring, strlen(j->valuestring));
	} else if (cJSON_IsArray(j)) {
		int rc = jx_list_new(c, NULL, (size_t)cJSON_GetArraySize(j), out);
		size_t i = 0;
		for (const cJSON *e = j->child; !rc && e; e = e->next)
			rc = jv_from_json(c, e, &out->u.l->v[i++], depth + 1);
		return rc;
	} else if (cJSON_IsObject(j)) {
		return object_from_json(c, j, out, depth);
	} else {
		*out = jv_none();
	}
	return 0;
}
