/* Jinja lexer: the template source to tokens, the way @huggingface/jinja
 * reads it (the renderer our output must match byte for byte).  First the
 * source is rewritten as that library does before it lexes: one trailing
 * newline dropped, lstrip_blocks and trim_blocks applied as plain text
 * rewrites (so they also act inside string literals, unlike Jinja2), and
 * {% generation %} / {% endgeneration %} tags removed.  Every byte keeps
 * its offset in the original source so that errors name the line and
 * column the author wrote.  Also here: {% raw %}, which the reference lacks
 * (a template using it fails there). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"
#include "util/errbuf.h"
#include "util/utf8.h"

/* Sources larger than this are refused (real templates are tens of KiB;
 * lexing takes about ten bytes of working memory a byte). */
#define JINJA_MAX_SOURCE (4u << 20)

/* Text after a rewrite, with each byte's offset in the original source. */
struct ptext {
	char *s;
	uint32_t *off;
	size_t n;
};

static int ptext_init(struct ptext *p, size_t cap)
{
	p->n = 0;
	p->s = malloc(cap + 1);
	p->off = malloc((cap + 1) * sizeof(*p->off));
	if (!p->s || !p->off) {
		free(p->s);
		free(p->off);
		p->s = NULL;
		p->off = NULL;
		return JINJA_E_NOMEM;
	}
	return 0;
}

static void ptext_free(struct ptext *p)
{
	free(p->s);
	free(p->off);
	p->s = NULL;
	p->off = NULL;
}

static void ptext_put(struct ptext *dst, const struct ptext *src, size_t i)
{
	dst->s[dst->n] = src->s[i];
	dst->off[dst->n] = src->off[i];
	dst->n++;
}

static bool js_space_cp(uint32_t c)
{
	if (c <= 32)
		return c == 32 || (c >= 9 && c <= 13);
	return c == 160 || c == 5760 || (c >= 8192 && c <= 8202) || c == 8232 || c == 8233 ||
	       c == 8239 || c == 8287 || c == 12288 || c == 65279;
}

size_t jinja_js_space(const char *p, size_t n)
{
	size_t len = 0;
	if (n == 0)
		return 0;
	uint32_t c = utf8_decode((const unsigned char *)p, n, &len);
	return len > 0 && js_space_cp(c) ? len : 0;
}

size_t jinja_js_space_end(const char *p, size_t n)
{
	size_t end = n;
	while (end > 0) {
		size_t start = end - 1;
		while (start > 0 && end - start < 4 && ((unsigned char)p[start] & 0xC0) == 0x80)
			start--;
		size_t len = jinja_js_space(p + start, end - start);
		if (len != end - start)
			break;
		end = start;
	}
	return n - end;
}

/* lstrip_blocks as the reference does it: /^[ \t]*({[#%-])/gm -> "$1". */
static void pre_lstrip(const struct ptext *in, struct ptext *out)
{
	size_t i = 0;
	bool line_start = true;
	while (i < in->n) {
		if (line_start) {
			size_t j = i;
			while (j < in->n && (in->s[j] == ' ' || in->s[j] == '\t'))
				j++;
			if (j + 1 < in->n && in->s[j] == '{' && strchr("#%-", in->s[j + 1]) &&
			    in->s[j + 1] != '\0')
				i = j;
			line_start = false;
			continue;
		}
		char ch = in->s[i];
		ptext_put(out, in, i);
		i++;
		/* JavaScript's ^ in multiline mode follows \n, \r, U+2028 and U+2029 */
		if (ch == '\n' || ch == '\r')
			line_start = true;
		else if ((unsigned char)ch == 0xA8 || (unsigned char)ch == 0xA9)
			line_start = i >= 3 && (unsigned char)in->s[i - 3] == 0xE2 &&
				     (unsigned char)in->s[i - 2] == 0x80;
	}
}

/* trim_blocks as the reference does it: /([#%-]})\n/g -> "$1". */
static void pre_trim(const struct ptext *in, struct ptext *out)
{
	size_t i = 0;
	while (i < in->n) {
		if (i + 2 < in->n && strchr("#%-", in->s[i]) && in->s[i] != '\0' &&
		    in->s[i + 1] == '}' && in->s[i + 2] == '\n') {
			ptext_put(out, in, i);
			ptext_put(out, in, i + 1);
			i += 3;
			continue;
		}
		ptext_put(out, in, i);
		i++;
	}
}

static size_t skip_js_space(const char *s, size_t n, size_t i)
{
	size_t len;
	while (i < n && (len = jinja_js_space(s + i, n - i)) > 0)
		i += len;
	return i;
}

/* At s[i] == '{': the length of /{%(-?)\s*(?:end)?generation\s*(-?)%}/ there,
 * or 0; *lstrip and *rstrip say whether the dashes were there. */
static size_t match_generation(const char *s, size_t n, size_t i, bool *lstrip, bool *rstrip)
{
	size_t j = i;
	if (j + 1 >= n || s[j] != '{' || s[j + 1] != '%')
		return 0;
	j += 2;
	*lstrip = j < n && s[j] == '-';
	if (*lstrip)
		j++;
	j = skip_js_space(s, n, j);
	if (n - j >= 3 && memcmp(s + j, "end", 3) == 0 && n - j >= 13 &&
	    memcmp(s + j + 3, "generation", 10) == 0)
		j += 3;
	if (n - j < 10 || memcmp(s + j, "generation", 10) != 0)
		return 0;
	j = skip_js_space(s, n, j + 10);
	*rstrip = j < n && s[j] == '-';
	if (*rstrip)
		j++;
	if (j + 1 >= n || s[j] != '%' || s[j + 1] != '}')
		return 0;
	return j + 2 - i;
}

/* The reference drops {% generation %} and {% endgeneration %} before
 * lexing: the body renders as if the tags were not there. */
static void pre_generation(const struct ptext *in, struct ptext *out)
{
	size_t last = 0, i = 0;
	while (i < in->n) {
		bool lstrip, rstrip;
		size_t m = in->s[i] == '{' ? match_generation(in->s, in->n, i, &lstrip, &rstrip) : 0;
		if (m == 0) {
			i++;
			continue;
		}
		size_t end = i;
		while (lstrip && end > last) {
			size_t sp = jinja_js_space_end(in->s + last, end - last);
			if (sp == 0)
				break;
			end -= sp;
		}
		for (size_t k = last; k < end; k++)
			ptext_put(out, in, k);
		size_t after = skip_js_space(in->s, in->n, i + m);
		if (!rstrip)
			for (size_t k = i + m; k < after; k++)
				ptext_put(out, in, k);
		last = i = after;
	}
	for (size_t k = last; k < in->n; k++)
		ptext_put(out, in, k);
}

static int preprocess(const char *src, size_t len, struct ptext *out)
{
	struct ptext a = {0}, b = {0};
	int rc = ptext_init(&a, len);
	if (rc)
		return rc;
	memcpy(a.s, src, len);
	for (size_t i = 0; i < len; i++)
		a.off[i] = (uint32_t)i;
	a.n = len;
	if (a.n > 0 && a.s[a.n - 1] == '\n')
		a.n--;
	if ((rc = ptext_init(&b, len)))
		goto out;
	pre_lstrip(&a, &b);
	a.n = 0;
	pre_trim(&b, &a);
	b.n = 0;
	pre_generation(&a, &b);
	*out = b;
	b.s = NULL;
	b.off = NULL;
out:
	ptext_free(&a);
	ptext_free(&b);
	return rc;
}

/* ---- tokens ---- */

struct lexer {
	struct jarena *arena;
	const struct ptext *t;
	const char *src; /* the original source, for line and column */
	size_t src_len;
	uint32_t *line_start; /* offset where each line of src starts */
	size_t n_lines;
	size_t pos;
	int curly;
	struct jtok *toks;
	size_t n, cap;
	char *err;
	size_t err_len;
};

static void where(const struct lexer *lx, size_t pos, uint32_t *line, uint32_t *col)
{
	size_t off = pos < lx->t->n ? lx->t->off[pos] : lx->src_len;
	size_t lo = 0, hi = lx->n_lines; /* the last line starting at or before off */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (lx->line_start[mid] <= off)
			lo = mid;
		else
			hi = mid;
	}
	*line = (uint32_t)lo + 1;
	*col = (uint32_t)(off - lx->line_start[lo]) + 1;
}

static int line_table(struct lexer *lx)
{
	size_t n = 1;
	for (size_t i = 0; i < lx->src_len; i++)
		n += lx->src[i] == '\n';
	lx->line_start = malloc(n * sizeof(*lx->line_start));
	if (!lx->line_start)
		return JINJA_E_NOMEM;
	lx->line_start[0] = 0;
	lx->n_lines = 1;
	for (size_t i = 0; i < lx->src_len; i++)
		if (lx->src[i] == '\n')
			lx->line_start[lx->n_lines++] = (uint32_t)(i + 1);
	return 0;
}

static int lex_err(struct lexer *lx, size_t pos, const char *what)
{
	uint32_t line, col;
	where(lx, pos, &line, &col);
	return err_set(lx->err, lx->err_len, JINJA_E_SYNTAX, "%u:%u: template: %s", line, col, what);
}

static int push(struct lexer *lx, uint8_t type, const char *s, size_t n, size_t pos)
{
	if (lx->n + 1 >= lx->cap) {
		size_t cap = lx->cap ? lx->cap * 2 : 256;
		struct jtok *t = realloc(lx->toks, cap * sizeof(*t));
		if (!t)
			return err_set(lx->err, lx->err_len, JINJA_E_NOMEM, "out of memory");
		lx->toks = t;
		lx->cap = cap;
	}
	struct jtok *t = &lx->toks[lx->n];
	t->type = type;
	t->s = jarena_strdup(lx->arena, s, n);
	if (!t->s)
		return err_set(lx->err, lx->err_len, JINJA_E_NOMEM, "out of memory");
	t->n = n;
	where(lx, pos, &t->line, &t->col);
	lx->n++;
	return 0;
}

/* {%- and {{- remove the white space that ends the text before them. */
static void strip_trailing(struct lexer *lx)
{
	if (lx->n == 0 || lx->toks[lx->n - 1].type != JT_TEXT)
		return;
	struct jtok *t = &lx->toks[lx->n - 1];
	t->n -= jinja_js_space_end(t->s, t->n);
	if (t->n == 0)
		lx->n--;
}

static void skip_leading(struct lexer *lx)
{
	lx->pos = skip_js_space(lx->t->s, lx->t->n, lx->pos);
}

static bool is_word(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_';
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static char at(const struct lexer *lx, size_t i)
{
	return i < lx->t->n ? lx->t->s[i] : '\0';
}

/* The reference's consumeWhile: running into the end of input is an error. */
static int consume_while(struct lexer *lx, bool (*pred)(char), size_t *start)
{
	*start = lx->pos;
	while (lx->pos < lx->t->n && pred(lx->t->s[lx->pos])) {
		if (++lx->pos >= lx->t->n)
			return lex_err(lx, lx->pos, "unexpected end of input");
	}
	return 0;
}

static int consume_space(struct lexer *lx)
{
	size_t len;
	while ((len = jinja_js_space(lx->t->s + lx->pos, lx->t->n - lx->pos)) > 0) {
		lx->pos += len;
		if (lx->pos >= lx->t->n)
			return lex_err(lx, lx->pos, "unexpected end of input");
	}
	return 0;
}

static int hex_value(const char *s, size_t n, uint32_t *v)
{
	*v = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9' ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (d < 0)
			return -1;
		*v = *v * 16 + (uint32_t)d;
	}
	return 0;
}

/* The escapes @huggingface/jinja refuses and Python's Jinja2 (which decodes
 * string literals as Python's unicode-escape codec does) accepts: a
 * backslash before a line end continues the line, \a, octal \NNN, and any
 * other ASCII character keeps its backslash.  Templates tested with
 * transformers or vLLM use them (Mistral Small 3.1's backslash-newline).
 * e is the character after the backslash, already consumed. */
static int lex_python_escape(struct lexer *lx, char e, char *o, size_t *on)
{
	const struct ptext *t = lx->t;
	if (e == '\r' && lx->pos < t->n && t->s[lx->pos] == '\n')
		lx->pos++;
	if (e == '\n' || e == '\r')
		return 0;
	if (e == 'a') {
		o[(*on)++] = '\a';
		return 0;
	}
	if (e >= '0' && e <= '7') {
		uint32_t cp = (uint32_t)(e - '0');
		for (int i = 0; i < 2 && lx->pos < t->n && t->s[lx->pos] >= '0' && t->s[lx->pos] <= '7'; i++)
			cp = cp * 8 + (uint32_t)(t->s[lx->pos++] - '0');
		*on += utf8_encode(cp, o + *on);
		return 0;
	}
	if (e == 'N' || (unsigned char)e < 0x20 || (unsigned char)e >= 0x7f)
		return lex_err(lx, lx->pos - 2,
			       "string: unknown escape (allowed: \\n \\t \\r \\b \\f \\v \\a "
			       "\\' \\\" \\\\ \\NNN \\xHH \\uHHHH \\UHHHHHHHH, a backslash before a "
			       "line end, or one before another printable ASCII character, which stays)");
	o[(*on)++] = '\\';
	o[(*on)++] = e;
	return 0;
}

/* One escape after a backslash at lx->pos; appends its UTF-8 to o. */
static int lex_escape(struct lexer *lx, char *o, size_t *on)
{
	const struct ptext *t = lx->t;
	char e = t->s[lx->pos++];
	static const char from[] = "ntrbfv'\"\\", to[] = "\n\t\r\b\f\v'\"\\";
	const char *hit = e ? strchr(from, e) : NULL;
	if (hit) {
		o[(*on)++] = to[hit - from];
		return 0;
	}
	if (e != 'x' && e != 'u' && e != 'U')
		return lex_python_escape(lx, e, o, on);
	size_t hl = e == 'x' ? 2 : e == 'u' ? 4 : 8;
	uint32_t cp;
	if (t->n - lx->pos < hl || hex_value(t->s + lx->pos, hl, &cp) || cp > 0x10FFFF)
		return lex_err(lx, lx->pos - 2, "string: invalid hexadecimal escape");
	lx->pos += hl;
	if (cp >= 0xD800 && cp < 0xDC00 && t->n - lx->pos >= 6 && t->s[lx->pos] == '\\' &&
	    t->s[lx->pos + 1] == 'u') {
		uint32_t lo;
		if (hex_value(t->s + lx->pos + 2, 4, &lo) == 0 && lo >= 0xDC00 && lo < 0xE000) {
			cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			lx->pos += 6;
		}
	}
	if (cp >= 0xD800 && cp < 0xE000)
		cp = 0xFFFD; /* a lone surrogate reaches UTF-8 output as U+FFFD */
	*on += utf8_encode(cp, o + *on);
	return 0;
}

static int lex_string(struct lexer *lx)
{
	const struct ptext *t = lx->t;
	size_t start = lx->pos;
	char quote = t->s[lx->pos++];
	/* decoded text is never longer than the source (\uHHHH is 6 bytes, at most 4 out) */
	char *o = malloc(t->n - lx->pos + 1);
	size_t on = 0;
	int rc = 0;
	if (!o)
		return err_set(lx->err, lx->err_len, JINJA_E_NOMEM, "out of memory");
	for (;;) {
		if (lx->pos >= t->n) {
			rc = lex_err(lx, start, "string: not closed");
			goto out;
		}
		char ch = t->s[lx->pos];
		if (ch == quote)
			break;
		lx->pos++;
		if (ch != '\\') {
			o[on++] = ch;
			continue;
		}
		if (lx->pos >= t->n) {
			rc = lex_err(lx, start, "string: not closed");
			goto out;
		}
		if ((rc = lex_escape(lx, o, &on)))
			goto out;
	}
	lx->pos++;
	rc = push(lx, JT_STRING, o, on, start);
out:
	free(o);
	return rc;
}

static const struct {
	const char *seq;
	uint8_t type;
} rules[] = {
	{"{%", JT_OPEN_STMT}, {"%}", JT_CLOSE_STMT}, {"{{", JT_OPEN_EXPR}, {"}}", JT_CLOSE_EXPR},
	{"(", JT_LPAREN},     {")", JT_RPAREN},      {"{", JT_LBRACE},     {"}", JT_RBRACE},
	{"[", JT_LBRACKET},   {"]", JT_RBRACKET},    {",", JT_COMMA},      {".", JT_DOT},
	{":", JT_COLON},      {"|", JT_PIPE},        {"<=", JT_CMP},       {">=", JT_CMP},
	{"==", JT_CMP},       {"!=", JT_CMP},        {"<", JT_CMP},        {">", JT_CMP},
	{"+", JT_ADD},        {"-", JT_ADD},         {"~", JT_ADD},        {"**", JT_POW},
	{"*", JT_MUL},        {"//", JT_MUL},        {"/", JT_MUL},        {"%", JT_MUL},
	{"=", JT_EQUALS},
};

/* At "{%" (or "{%-"): a {% raw %} tag?  Then the text up to {% endraw %}
 * becomes one text token. */
static int try_raw(struct lexer *lx, size_t open, bool *done)
{
	const struct ptext *t = lx->t;
	size_t j = skip_js_space(t->s, t->n, open);
	*done = false;
	if (t->n - j < 3 || memcmp(t->s + j, "raw", 3) != 0 || (j + 3 < t->n && is_word(t->s[j + 3])))
		return 0;
	j = skip_js_space(t->s, t->n, j + 3);
	bool rstrip = j < t->n && t->s[j] == '-';
	j += rstrip;
	if (j + 1 >= t->n || t->s[j] != '%' || t->s[j + 1] != '}')
		return 0;
	size_t body = j + 2;
	if (rstrip)
		body = skip_js_space(t->s, t->n, body);
	for (size_t k = body; k + 1 < t->n; k++) {
		if (t->s[k] != '{' || t->s[k + 1] != '%')
			continue;
		size_t m = k + 2;
		bool lstrip = m < t->n && t->s[m] == '-';
		m = skip_js_space(t->s, t->n, m + lstrip);
		if (t->n - m < 6 || memcmp(t->s + m, "endraw", 6) != 0)
			continue;
		m = skip_js_space(t->s, t->n, m + 6);
		bool after = m < t->n && t->s[m] == '-';
		m += after;
		if (m + 1 >= t->n || t->s[m] != '%' || t->s[m + 1] != '}')
			continue;
		size_t end = k;
		if (lstrip)
			end -= jinja_js_space_end(t->s + body, k - body);
		int rc = end > body ? push(lx, JT_TEXT, t->s + body, end - body, body) : 0;
		/* an empty comment token: what follows is text again */
		if (!rc)
			rc = push(lx, JT_COMMENT, "", 0, k);
		lx->pos = m + 2;
		if (after)
			skip_leading(lx);
		*done = true;
		return rc;
	}
	return lex_err(lx, open, "{% raw %}: not closed by {% endraw %}");
}

static int lex_text(struct lexer *lx, bool *pushed)
{
	const struct ptext *t = lx->t;
	size_t end = lx->pos;
	*pushed = false;
	for (;;) {
		const char *p = end < t->n ? memchr(t->s + end, '{', t->n - end) : NULL;
		if (!p) {
			end = t->n;
			break;
		}
		end = (size_t)(p - t->s);
		char next = at(lx, end + 1);
		if (next == '%' || next == '{' || next == '#')
			break;
		end++;
	}
	if (end == lx->pos)
		return 0;
	*pushed = true;
	int rc = push(lx, JT_TEXT, t->s + lx->pos, end - lx->pos, lx->pos);
	lx->pos = end;
	return rc;
}

static int lex_comment(struct lexer *lx)
{
	const struct ptext *t = lx->t;
	size_t start = lx->pos;
	lx->pos += 2;
	bool before = at(lx, lx->pos) == '-';
	lx->pos += before;
	const char *end = NULL;
	for (size_t k = lx->pos; k + 1 < t->n; k++) {
		if (t->s[k] == '#' && t->s[k + 1] == '}') {
			end = t->s + k;
			break;
		}
	}
	if (!end)
		return lex_err(lx, start, "{# #}: comment not closed");
	size_t n = (size_t)(end - (t->s + lx->pos));
	bool after = n > 0 && t->s[lx->pos + n - 1] == '-';
	if (before)
		strip_trailing(lx);
	int rc = push(lx, JT_COMMENT, t->s + lx->pos, n - after, start);
	lx->pos += n + 2;
	if (after)
		skip_leading(lx);
	return rc;
}

/* '-' or '+' where a value cannot end: a signed number or a unary sign. */
static int lex_sign(struct lexer *lx)
{
	size_t start = lx->pos++;
	size_t ds;
	int rc = consume_while(lx, is_digit, &ds);
	if (rc)
		return rc;
	size_t end = lx->pos;
	if (end > ds && at(lx, end) == '.' && is_digit(at(lx, end + 1))) {
		lx->pos++;
		size_t fs;
		if ((rc = consume_while(lx, is_digit, &fs)))
			return rc;
	}
	bool num = lx->pos > ds;
	return push(lx, num ? JT_NUMBER : JT_UNARY, lx->t->s + start, lx->pos - start, start);
}

static int lex_number(struct lexer *lx, uint8_t last)
{
	size_t start;
	int rc = consume_while(lx, is_digit, &start);
	if (rc)
		return rc;
	if (last != JT_DOT && at(lx, lx->pos) == '.' && is_digit(at(lx, lx->pos + 1))) {
		lx->pos++;
		size_t fs;
		if ((rc = consume_while(lx, is_digit, &fs)))
			return rc;
	}
	return push(lx, JT_NUMBER, lx->t->s + start, lx->pos - start, start);
}

static int lex_rule(struct lexer *lx, bool *matched)
{
	const struct ptext *t = lx->t;
	*matched = false;
	for (size_t r = 0; r < sizeof(rules) / sizeof(rules[0]); r++) {
		size_t sl = strlen(rules[r].seq);
		if (rules[r].type == JT_CLOSE_EXPR && lx->curly > 0)
			continue;
		if (t->n - lx->pos < sl || memcmp(t->s + lx->pos, rules[r].seq, sl) != 0)
			continue;
		if (rules[r].type == JT_OPEN_STMT) {
			bool done;
			int rc = try_raw(lx, lx->pos + 2, &done);
			if (rc || done) {
				*matched = true;
				return rc;
			}
		}
		int rc = push(lx, rules[r].type, rules[r].seq, sl, lx->pos);
		if (rules[r].type == JT_OPEN_EXPR)
			lx->curly = 0;
		else if (rules[r].type == JT_LBRACE)
			lx->curly++;
		else if (rules[r].type == JT_RBRACE)
			lx->curly--;
		lx->pos += sl;
		*matched = true;
		return rc;
	}
	return 0;
}

/* At '{': a comment, or an opening tag with '-'. */
static int lex_open(struct lexer *lx, bool *done)
{
	char next = at(lx, lx->pos + 1);
	*done = true;
	if (next == '#')
		return lex_comment(lx);
	if (at(lx, lx->pos + 2) == '-' && (next == '%' || next == '{')) {
		strip_trailing(lx);
		if (next == '%') {
			bool raw;
			int rc = try_raw(lx, lx->pos + 3, &raw);
			if (rc || raw)
				return rc;
		}
		int rc = push(lx, next == '%' ? JT_OPEN_STMT : JT_OPEN_EXPR, next == '%' ? "{%" : "{{",
			      2, lx->pos);
		if (next == '{')
			lx->curly = 0;
		lx->pos += 3;
		return rc;
	}
	*done = false;
	return 0;
}

/* A closing "-%}" or "-}}" at lx->pos? */
static int lex_close_dash(struct lexer *lx, bool *done)
{
	char next = at(lx, lx->pos + 1);
	*done = false;
	if (at(lx, lx->pos) != '-' || at(lx, lx->pos + 2) != '}' || (next != '%' && next != '}'))
		return 0;
	*done = true;
	int rc = push(lx, next == '%' ? JT_CLOSE_STMT : JT_CLOSE_EXPR, next == '%' ? "%}" : "}}", 2,
		      lx->pos);
	lx->pos += 3;
	skip_leading(lx);
	return rc;
}

static int lex_step(struct lexer *lx)
{
	uint8_t last = lx->n ? lx->toks[lx->n - 1].type : JT_EOF;
	bool done;
	int rc;
	if (last == JT_EOF || last == JT_CLOSE_STMT || last == JT_CLOSE_EXPR || last == JT_COMMENT) {
		if ((rc = lex_text(lx, &done)) || done)
			return rc;
	}
	if (at(lx, lx->pos) == '{' && ((rc = lex_open(lx, &done)) || done))
		return rc;
	if ((rc = consume_space(lx)))
		return rc;
	if ((rc = lex_close_dash(lx, &done)) || done)
		return rc;
	char ch = at(lx, lx->pos);
	if (ch == '-' || ch == '+') {
		if (last == JT_TEXT || last == JT_EOF)
			return lex_err(lx, lx->pos, "unexpected character");
		if (last != JT_IDENT && last != JT_NUMBER && last != JT_STRING && last != JT_RPAREN &&
		    last != JT_RBRACKET)
			return lex_sign(lx);
	}
	if ((rc = lex_rule(lx, &done)) || done)
		return rc;
	if (ch == '\'' || ch == '"')
		return lex_string(lx);
	if (is_digit(ch))
		return lex_number(lx, last);
	if (is_word(ch)) {
		size_t start;
		if ((rc = consume_while(lx, is_word, &start)))
			return rc;
		return push(lx, JT_IDENT, lx->t->s + start, lx->pos - start, start);
	}
	char what[48];
	snprintf(what, sizeof(what), "unexpected character '%c'", ch >= 32 && ch < 127 ? ch : '?');
	return lex_err(lx, lx->pos, what);
}

int jinja_lex(struct jarena *a, const char *src, size_t len, struct jtok **out, size_t *n_out,
	      char *err, size_t err_len)
{
	if (len > JINJA_MAX_SOURCE)
		return err_set(err, err_len, JINJA_E_SYNTAX, "1:1: template: larger than %u bytes",
			       JINJA_MAX_SOURCE);
	if (memchr(src, '\0', len))
		return err_set(err, err_len, JINJA_E_SYNTAX, "1:1: template: contains a NUL byte");
	struct ptext t = {0};
	int rc = preprocess(src, len, &t);
	if (rc)
		return err_set(err, err_len, rc, "out of memory");
	struct lexer lx = {.arena = a, .t = &t, .src = src, .src_len = len, .err = err,
			   .err_len = err_len};
	if ((rc = line_table(&lx))) {
		rc = err_set(err, err_len, rc, "out of memory");
		goto out;
	}
	while (lx.pos < t.n)
		if ((rc = lex_step(&lx)))
			goto out;
	rc = push(&lx, JT_EOF, "", 0, t.n);
out:
	ptext_free(&t);
	free(lx.line_start);
	if (rc) {
		free(lx.toks);
		return rc;
	}
	*out = lx.toks;
	*n_out = lx.n;
	return 0;
}
