/* The regex subset of "pattern" (and of the string formats), compiled to
 * the bytes of a JSON string's body.  The regex is about the decoded
 * characters; each character has exactly one spelling in the output: UTF-8
 * as is, except '"', '\\' and control characters, which are written as
 * their JSON escapes (\" \\ \n \t \r \b \f, else \u00XX), so a pattern never
 * has to reason about escapes and the text stays short.  Character sets are
 * code point ranges turned into UTF-8 byte-range sequences.  Unanchored
 * patterns match anywhere (JSON Schema semantics): an unanchored end gets
 * any characters around it.  Also here: one character of a plain JSON
 * string, with every escape JSON allows. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"
#include "util/errbuf.h"

#define CP_MAX 0x10FFFF
#define CPSET_MAX 512 /* ranges in one class */
#define REP_MAX 1000  /* the largest {m,n} bound */

struct cpset {
	uint32_t lo[CPSET_MAX], hi[CPSET_MAX];
	int n;
};

/* ---- UTF-8 ranges ---- */

static int utf8_len(uint32_t c)
{
	return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

static void utf8_put(uint32_t c, uint8_t *out)
{
	switch (utf8_len(c)) {
	case 1:
		out[0] = (uint8_t)c;
		break;
	case 2:
		out[0] = (uint8_t)(0xC0 | c >> 6);
		out[1] = (uint8_t)(0x80 | (c & 0x3F));
		break;
	case 3:
		out[0] = (uint8_t)(0xE0 | c >> 12);
		out[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
		out[2] = (uint8_t)(0x80 | (c & 0x3F));
		break;
	default:
		out[0] = (uint8_t)(0xF0 | c >> 18);
		out[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
		out[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
		out[3] = (uint8_t)(0x80 | (c & 0x3F));
		break;
	}
}

/* The UTF-8 encodings of code points lo..hi (no surrogates inside): split
 * until every byte position ranges independently (as in RE2). */
static int utf8_range(struct gbuild *b, uint32_t lo, uint32_t hi)
{
	static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
	for (int i = 0; i < 3; i++)
		if (lo <= bounds[i] && hi > bounds[i])
			return gb_alt2(b, utf8_range(b, lo, bounds[i]),
			               utf8_range(b, bounds[i] + 1, hi));
	int n = utf8_len(lo);
	for (int i = 1; i < n; i++) {
		uint32_t m = (1u << (6 * i)) - 1;
		if ((lo & ~m) != (hi & ~m)) {
			if (lo & m)
				return gb_alt2(b, utf8_range(b, lo, lo | m),
				               utf8_range(b, (lo | m) + 1, hi));
			if ((hi & m) != m)
				return gb_alt2(b, utf8_range(b, lo, (hi & ~m) - 1),
				               utf8_range(b, hi & ~m, hi));
		}
	}
	uint8_t a[4], z[4];
	int xs[4];
	utf8_put(lo, a);
	utf8_put(hi, z);
	for (int i = 0; i < n; i++)
		xs[i] = gb_range(b, a[i], z[i]);
	return gb_seq(b, xs, (size_t)n);
}

/* ---- code point sets ---- */

static int cmp_range(const void *x, const void *y)
{
	const uint32_t *a = x, *b = y;
	return (a[0] > b[0]) - (a[0] < b[0]);
}

static int cpset_add(struct cpset *s, uint32_t lo, uint32_t hi)
{
	if (s->n == CPSET_MAX)
		return -E2BIG;
	s->lo[s->n] = lo;
	s->hi[s->n++] = hi;
	return 0;
}

/* Sorted, merged, surrogates removed. */
static void cpset_normalize(struct cpset *s)
{
	uint32_t(*r)[2] = malloc((size_t)(s->n ? s->n : 1) * sizeof(*r));
	if (!r)
		return;
	for (int i = 0; i < s->n; i++) {
		r[i][0] = s->lo[i];
		r[i][1] = s->hi[i];
	}
	qsort(r, (size_t)s->n, sizeof(*r), cmp_range);
	int n = 0;
	for (int i = 0; i < s->n; i++) {
		if (n && r[i][0] <= s->hi[n - 1] + 1) {
			if (r[i][1] > s->hi[n - 1])
				s->hi[n - 1] = r[i][1];
			continue;
		}
		s->lo[n] = r[i][0];
		s->hi[n++] = r[i][1];
	}
	s->n = n;
	free(r);
	/* cut the surrogates out */
	for (int i = 0; i < s->n; i++) {
		if (s->hi[i] < 0xD800 || s->lo[i] > 0xDFFF)
			continue;
		if (s->lo[i] >= 0xD800 && s->hi[i] <= 0xDFFF) {
			memmove(&s->lo[i], &s->lo[i + 1],
			        (size_t)(s->n - i - 1) * sizeof(uint32_t));
			memmove(&s->hi[i], &s->hi[i + 1],
			        (size_t)(s->n - i - 1) * sizeof(uint32_t));
			s->n--;
			i--;
		} else if (s->lo[i] < 0xD800 && s->hi[i] > 0xDFFF && s->n < CPSET_MAX) {
			memmove(&s->lo[i + 1], &s->lo[i], (size_t)(s->n - i) * sizeof(uint32_t));
			memmove(&s->hi[i + 1], &s->hi[i], (size_t)(s->n - i) * sizeof(uint32_t));
			s->n++;
			s->hi[i] = 0xD7FF;
			s->lo[i + 1] = 0xE000;
		} else if (s->lo[i] < 0xD800) {
			s->hi[i] = 0xD7FF;
		} else {
			s->lo[i] = 0xE000;
		}
	}
}

static void cpset_negate(struct cpset *s)
{
	cpset_normalize(s);
	struct cpset t = {.n = 0};
	uint32_t next = 0;
	for (int i = 0; i < s->n; i++) {
		if (s->lo[i] > next)
			cpset_add(&t, next, s->lo[i] - 1);
		next = s->hi[i] + 1;
	}
	if (next <= CP_MAX)
		cpset_add(&t, next, CP_MAX);
	*s = t;
	cpset_normalize(s);
}

/* The one JSON spelling of a character that must be escaped. */
static int escaped_char(struct gbuild *b, uint32_t c)
{
	char buf[8];
	switch (c) {
	case '"':
		return gb_str(b, "\\\"");
	case '\\':
		return gb_str(b, "\\\\");
	case '\n':
		return gb_str(b, "\\n");
	case '\t':
		return gb_str(b, "\\t");
	case '\r':
		return gb_str(b, "\\r");
	case '\b':
		return gb_str(b, "\\b");
	case '\f':
		return gb_str(b, "\\f");
	default:
		snprintf(buf, sizeof(buf), "\\u%04x", (unsigned)c);
		return gb_str(b, buf);
	}
}

static bool needs_escape(uint32_t c)
{
	return c < 0x20 || c == '"' || c == '\\';
}

/* One character of the set, as JSON-string text (raw: as UTF-8 itself). */
static int cpset_expr(struct gbuild *b, struct cpset *s, bool raw)
{
	cpset_normalize(s);
	if (raw) {
		int *rs = malloc((size_t)(s->n ? s->n : 1) * sizeof(*rs));
		if (!rs)
			return -1;
		for (int i = 0; i < s->n; i++)
			rs[i] = utf8_range(b, s->lo[i], s->hi[i]);
		int x = gb_alt(b, rs, (size_t)s->n);
		free(rs);
		return x;
	}
	int *xs = malloc((size_t)(3 * s->n + 40) * sizeof(*xs)), n = 0;
	if (!xs)
		return -1;
	for (int i = 0; i < s->n; i++) {
		uint32_t lo = s->lo[i], hi = s->hi[i];
		for (uint32_t c = lo; c <= hi && c < 0x5D; c++)
			if (needs_escape(c))
				xs[n++] = escaped_char(b, c);
		/* what is left of lo..hi, without the escaped characters */
		uint32_t cuts[][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, CP_MAX}};
		for (int k = 0; k < 3; k++) {
			uint32_t a = lo > cuts[k][0] ? lo : cuts[k][0];
			uint32_t z = hi < cuts[k][1] ? hi : cuts[k][1];
			if (a <= z)
				xs[n++] = utf8_range(b, a, z);
		}
	}
	int x = gb_alt(b, xs, (size_t)n);
	free(xs);
	return x;
}

static int hex4(struct gbuild *b, const char *first, const char *second)
{
	int h = gb_alt(
	    b, (const int[]){gb_range(b, '0', '9'), gb_range(b, 'a', 'f'), gb_range(b, 'A', 'F')},
	    3);
	int f = -1, s = -1;
	int fx[4], sx[4], nf = 0, ns = 0;
	for (const char *p = first; p[0] && p[1]; p += 2)
		fx[nf++] = gb_range(b, (uint8_t)p[0], (uint8_t)p[1]);
	for (const char *p = second; p && p[0] && p[1]; p += 2)
		sx[ns++] = gb_range(b, (uint8_t)p[0], (uint8_t)p[1]);
	f = gb_alt(b, fx, (size_t)nf);
	s = second ? gb_alt(b, sx, (size_t)ns) : h;
	return gb_seq(b, (const int[]){f, s, h, h}, 4);
}

int pattern_any_char(struct gbuild *b)
{
	struct cpset *s = calloc(1, sizeof(*s));
	if (!s)
		return -1;
	cpset_add(s, 0x20, 0x21);
	cpset_add(s, 0x23, 0x5B);
	cpset_add(s, 0x5D, CP_MAX);
	int plain = cpset_expr(b, s, false);
	free(s);
	/* \uXXXX: no lone surrogates (cJSON and most parsers refuse them) */
	int nonsur = gb_alt(
	    b, (const int[]){hex4(b, "09ACac", NULL), hex4(b, "EFef", NULL), hex4(b, "DDdd", "07")},
	    3);
	int pair = gb_seq(
	    b, (const int[]){hex4(b, "DDdd", "89ABab"), gb_str(b, "\\u"), hex4(b, "DDdd", "CFcf")},
	    3);
	int simple =
	    gb_alt(b,
	           (const int[]){gb_str(b, "\""), gb_str(b, "\\"), gb_str(b, "/"), gb_str(b, "b"),
	                         gb_str(b, "f"), gb_str(b, "n"), gb_str(b, "r"), gb_str(b, "t")},
	           8);
	int esc = gb_seq2(b, gb_str(b, "\\"),
	                  gb_alt2(b, simple, gb_seq2(b, gb_str(b, "u"), gb_alt2(b, nonsur, pair))));
	return gb_alt2(b, plain, esc);
}

/* ---- the regex parser ---- */

struct rp {
	struct gbuild *b;
	bool raw; /* characters as UTF-8 themselves, the whole text matched */
	const char *s;
	size_t i, n;
	char *err;
	size_t err_len;
	int rc;
};

static int rp_fail(struct rp *p, const char *fmt, const char *what)
{
	if (!p->rc) {
		char msg[200];
		snprintf(msg, sizeof(msg), fmt, what);
		p->rc = err_set(p->err, p->err_len, -EINVAL, "%s at offset %zu", msg, p->i);
	}
	return -1;
}

/* A UTF-8 character of the pattern itself. */
static int rp_char(struct rp *p, uint32_t *c)
{
	const unsigned char *s = (const unsigned char *)p->s + p->i;
	size_t left = p->n - p->i;
	int len = s[0] < 0x80             ? 1
	          : (s[0] & 0xE0) == 0xC0 ? 2
	          : (s[0] & 0xF0) == 0xE0 ? 3
	          : (s[0] & 0xF8) == 0xF0 ? 4
	                                  : 0;
	if (!len || (size_t)len > left)
		return rp_fail(p, "%s", "invalid UTF-8 in the pattern");
	uint32_t v = len == 1 ? s[0] : s[0] & (0x7F >> len);
	for (int k = 1; k < len; k++) {
		if ((s[k] & 0xC0) != 0x80)
			return rp_fail(p, "%s", "invalid UTF-8 in the pattern");
		v = v << 6 | (s[k] & 0x3F);
	}
	p->i += (size_t)len;
	*c = v;
	return 0;
}

static void add_class(struct cpset *s, char k)
{
	struct cpset t = {.n = 0};
	switch (k | 0x20) {
	case 'd':
		cpset_add(&t, '0', '9');
		break;
	case 'w':
		cpset_add(&t, '0', '9');
		cpset_add(&t, 'A', 'Z');
		cpset_add(&t, 'a', 'z');
		cpset_add(&t, '_', '_');
		break;
	default: /* s */
		cpset_add(&t, '\t', '\r');
		cpset_add(&t, ' ', ' ');
		break;
	}
	if (k >= 'A' && k <= 'Z')
		cpset_negate(&t);
	for (int i = 0; i < t.n; i++)
		cpset_add(s, t.lo[i], t.hi[i]);
}

static int hexval(char c)
{
	return c >= '0' && c <= '9'                     ? c - '0'
	       : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10
	                                                : -1;
}

/* After a backslash: a class (\d \w \s and negations) into set, or one
 * character into *c (returns 1 for a class, 0 for a character). */
static int rp_escape(struct rp *p, struct cpset *set, uint32_t *c)
{
	if (p->i >= p->n)
		return rp_fail(p, "%s", "a trailing backslash");
	char k = p->s[p->i];
	if (strchr("dwsDWS", k)) {
		p->i++;
		add_class(set, k);
		return 1;
	}
	static const char simple[] = "n\nt\tr\rf\fv\v0";
	const char *q = strchr("ntrfv0", k);
	if (q && k) {
		p->i++;
		*c = k == '0' ? 0 : (uint32_t)(unsigned char)simple[(q - "ntrfv0") * 2 + 1];
		return 0;
	}
	if (k == 'u' || k == 'x') {
		int len = k == 'u' ? 4 : 2;
		uint32_t v = 0;
		for (int j = 1; j <= len; j++) {
			int h = p->i + (size_t)j < p->n ? hexval(p->s[p->i + (size_t)j]) : -1;
			if (h < 0)
				return rp_fail(p, "%s", "a bad \\u or \\x escape");
			v = v * 16 + (uint32_t)h;
		}
		p->i += (size_t)len + 1;
		*c = v;
		return 0;
	}
	if ((k >= 'a' && k <= 'z') || (k >= 'A' && k <= 'Z') || (k >= '1' && k <= '9')) {
		char what[4] = {'\\', k, 0};
		return rp_fail(p, "unsupported escape %s", what);
	}
	return rp_char(p, c);
}

static int rp_class(struct rp *p)
{
	struct cpset *s = calloc(1, sizeof(*s));
	if (!s)
		return -1;
	bool neg = p->i < p->n && p->s[p->i] == '^';
	p->i += neg;
	int x = -1;
	for (bool first = true;; first = false) {
		if (p->i >= p->n) {
			rp_fail(p, "%s", "an unterminated [");
			goto out;
		}
		if (p->s[p->i] == ']' && !first) {
			p->i++;
			break;
		}
		uint32_t lo, hi;
		int kind = 0;
		if (p->s[p->i] == '\\') {
			p->i++;
			kind = rp_escape(p, s, &lo);
		} else {
			kind = rp_char(p, &lo);
		}
		if (kind < 0)
			goto out;
		if (kind == 1)
			continue;
		hi = lo;
		if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
			p->i++;
			int k2 =
			    p->s[p->i] == '\\' ? (p->i++, rp_escape(p, s, &hi)) : rp_char(p, &hi);
			if (k2 != 0 || hi < lo) {
				rp_fail(p, "%s", "a bad range in [...]");
				goto out;
			}
		}
		if (cpset_add(s, lo, hi)) {
			rp_fail(p, "%s", "a class with too many ranges");
			goto out;
		}
	}
	if (neg)
		cpset_negate(s);
	else
		cpset_normalize(s);
	x = s->n ? cpset_expr(p->b, s, p->raw) : rp_fail(p, "%s", "an empty class");
out:
	free(s);
	return x;
}

static int one_char(struct gbuild *b, uint32_t c, bool raw)
{
	struct cpset s = {.n = 0};
	cpset_add(&s, c, c);
	return cpset_expr(b, &s, raw);
}

static int any_but_newline(struct gbuild *b, bool raw)
{
	struct cpset *s = calloc(1, sizeof(*s));
	if (!s)
		return -1;
	cpset_add(s, '\n', '\n');
	cpset_add(s, '\r', '\r');
	cpset_add(s, 0x2028, 0x2029);
	cpset_negate(s);
	int x = cpset_expr(b, s, raw);
	free(s);
	return x;
}

/* Any character, in its one spelling (what an unanchored end allows). */
static int any_char(struct gbuild *b)
{
	struct cpset s = {.n = 0};
	cpset_add(&s, 0, CP_MAX);
	return cpset_expr(b, &s, false);
}

static int rp_alt(struct rp *p, int depth, bool top);

static int rp_group(struct rp *p, int depth)
{
	if (p->i + 1 < p->n && p->s[p->i] == '?') {
		char k = p->s[p->i + 1];
		if (k == ':') {
			p->i += 2;
		} else if ((k == '<' || k == 'P') && p->i + 2 < p->n && p->s[p->i + 2] != '=' &&
		           p->s[p->i + 2] != '!') {
			const char *end = memchr(p->s + p->i, '>', p->n - p->i);
			if (!end)
				return rp_fail(p, "%s", "a bad group name");
			p->i = (size_t)(end - p->s) + 1;
		} else {
			return rp_fail(p, "%s",
			               "lookaround and other (?...) groups are not supported");
		}
	}
	int x = rp_alt(p, depth + 1, false);
	if (p->i >= p->n || p->s[p->i] != ')')
		return rp_fail(p, "%s", "an unterminated (");
	p->i++;
	return x;
}

static int rp_atom(struct rp *p, int depth)
{
	char c = p->s[p->i];
	uint32_t cp;
	struct cpset set = {.n = 0};
	switch (c) {
	case '(':
		p->i++;
		return rp_group(p, depth);
	case '[':
		p->i++;
		return rp_class(p);
	case '.':
		p->i++;
		return any_but_newline(p->b, p->raw);
	case '\\': {
		p->i++;
		int k = rp_escape(p, &set, &cp);
		if (k < 0)
			return -1;
		return k ? cpset_expr(p->b, &set, p->raw) : one_char(p->b, cp, p->raw);
	}
	case '*':
	case '+':
	case '?':
	case '{':
		return rp_fail(p, "%s", "a quantifier with nothing before it");
	default:
		if (rp_char(p, &cp))
			return -1;
		return one_char(p->b, cp, p->raw);
	}
}

static int rp_number(struct rp *p, long *v)
{
	size_t start = p->i;
	*v = 0;
	while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9' && *v <= REP_MAX)
		*v = *v * 10 + (p->s[p->i++] - '0');
	return p->i > start && *v <= REP_MAX ? 0 : -1;
}

/* A quantifier after atom x, if there is one. */
static int rp_quant(struct rp *p, int x)
{
	long min, max;
	char c = p->s[p->i];
	if (c == '*' || c == '+' || c == '?') {
		p->i++;
		min = c == '+';
		max = c == '?' ? 1 : -1;
	} else if (c == '{') {
		p->i++;
		if (rp_number(p, &min))
			return rp_fail(p, "a bad {m,n} (bounds up to %s)", "1000");
		max = min;
		if (p->i < p->n && p->s[p->i] == ',') {
			p->i++;
			max = -1;
			if (p->i < p->n && p->s[p->i] != '}' && rp_number(p, &max))
				return rp_fail(p, "a bad {m,n} (bounds up to %s)", "1000");
		}
		if (p->i >= p->n || p->s[p->i] != '}' || (max >= 0 && max < min))
			return rp_fail(p, "%s", "a bad {m,n}");
		p->i++;
	} else {
		return x;
	}
	if (p->i < p->n && p->s[p->i] == '?') /* lazy: the same language */
		p->i++;
	if (p->i < p->n && strchr("*+?{", p->s[p->i]))
		return rp_fail(p, "%s", "a quantifier after a quantifier");
	return gb_rep(p->b, x, (int)min, (int)max);
}

/* A sequence up to | or ) or the end; top: ^ may open it and $ close it. */
static int rp_seq(struct rp *p, int depth, bool top, bool *start, bool *end)
{
	int *xs = NULL, n = 0, cap = 0, x;
	*start = *end = false;
	if (top && p->i < p->n && p->s[p->i] == '^') {
		p->i++;
		*start = true;
	}
	while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
		if (p->s[p->i] == '$' && top && (p->i + 1 == p->n || p->s[p->i + 1] == '|')) {
			p->i++;
			*end = true;
			break;
		}
		if (p->s[p->i] == '^' || p->s[p->i] == '$') {
			x = rp_fail(p, "%s",
			            "'^' and '$' are supported only at the ends of the pattern");
			break;
		}
		x = rp_quant(p, rp_atom(p, depth));
		if (x < 0 || p->rc)
			break;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			int *q = realloc(xs, (size_t)cap * sizeof(*q));
			if (!q) {
				x = -1;
				break;
			}
			xs = q;
		}
		xs[n++] = x;
	}
	x = p->rc ? -1 : gb_seq(p->b, xs, (size_t)n);
	free(xs);
	return x;
}

static int rp_alt(struct rp *p, int depth, bool top)
{
	if (depth > 64)
		return rp_fail(p, "%s", "groups nested too deeply");
	int xs[64], n = 0;
	for (;;) {
		bool start, end;
		int x = rp_seq(p, depth, top, &start, &end);
		if (x < 0)
			return -1;
		if (top && !p->raw) {
			int any = gb_rep(p->b, any_char(p->b), 0, -1);
			int parts[3] = {start ? gb_empty(p->b) : any, x,
			                end ? gb_empty(p->b) : any};
			x = gb_seq(p->b, parts, 3);
		}
		if (n == 64)
			return rp_fail(p, "%s", "too many alternatives");
		xs[n++] = x;
		if (p->i >= p->n || p->s[p->i] != '|')
			break;
		p->i++;
	}
	if (top && p->i < p->n)
		return rp_fail(p, "%s", "an unmatched )");
	return gb_alt(p->b, xs, (size_t)n);
}

int pattern_compile(struct gbuild *b, const char *pattern, int *out, char *err, size_t err_len)
{
	return pattern_compile_mode(b, pattern, false, out, err, err_len);
}

int pattern_compile_mode(struct gbuild *b, const char *pattern, bool raw, int *out, char *err,
                         size_t err_len)
{
	struct rp p = {
	    .b = b, .raw = raw, .s = pattern, .n = strlen(pattern), .err = err, .err_len = err_len};
	int x = rp_alt(&p, 0, true);
	if (p.rc)
		return p.rc;
	if (x < 0)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	*out = x;
	return 0;
}

int grammar_build_regex(const char *regex, struct grammar **out, uint64_t *work, char *err,
                        size_t err_len)
{
	struct gbuild *b = NULL;
	*out = NULL;
	if (work)
		*work = 0;
	int rc = gb_new(&b);
	if (rc)
		return err_set(err, err_len, rc, "out of memory");
	int root = gb_rule_new(b), body = -1;
	gb_rule_label(b, root, "$");
	rc = pattern_compile_mode(b, regex, true, &body, err, err_len);
	if (!rc) {
		gb_rule_set(b, root, body);
		rc = gb_failed(b) ? gb_error(b, err, err_len)
		                  : gb_finish(b, root, out, NULL, 0, err, err_len);
	}
	if (work)
		*work = gb_work(b);
	gb_free(b);
	return rc;
}
