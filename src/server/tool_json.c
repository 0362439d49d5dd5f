/* JSON text helpers for tool calling.
 *
 * The scanner is a push-down automaton over bytes: it says, for each byte,
 * whether the value goes on, ended, or is not JSON, so the tool-call parser
 * can stream a call's arguments while they are generated and still know the
 * moment they are complete.  It checks syntax only: it builds nothing and
 * does not check UTF-8 (cJSON, which parses the arguments later, does not
 * either).
 *
 * json_respace re-spaces text that is already known to be valid; it keeps
 * numbers and string escapes exactly as written, which cJSON's printer
 * would not (1.0 would become 1). */
#include "server/tool_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- buffer */

void tbuf_putn(struct tbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 128;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void tbuf_put(struct tbuf *b, const char *s)
{
	tbuf_putn(b, s, strlen(s));
}

void tbuf_putc(struct tbuf *b, char c)
{
	tbuf_putn(b, &c, 1);
}

void tbuf_reset(struct tbuf *b)
{
	b->len = 0;
	if (b->p)
		b->p[0] = '\0';
}

void tbuf_deinit(struct tbuf *b)
{
	free(b->p);
	*b = (struct tbuf){0};
}

char *tbuf_take(struct tbuf *b)
{
	tbuf_putn(b, "", 0); /* an empty result is still a string */
	if (b->oom) {
		tbuf_deinit(b);
		return NULL;
	}
	char *p = b->p;
	*b = (struct tbuf){0};
	return p;
}

/* ---------------------------------------------------------------- scanner */

enum jstate {
	J_VALUE,     /* a value is expected */
	J_ARR_FIRST, /* after '[': a value or ']' */
	J_OBJ_FIRST, /* after '{': a key or '}' */
	J_KEY,       /* after ',' in an object: a key */
	J_COLON,     /* after a key */
	J_NEXT,      /* after a member: ',' or the closer */
	J_STRING,
	J_ESCAPE,
	J_HEX,
	J_NUMBER,
	J_LITERAL,
	J_DONE,
};

/* Parts of a number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
enum npart { N_SIGN, N_ZERO, N_INT, N_POINT, N_FRAC, N_EXP_MARK, N_EXP_SIGN, N_EXP };

static bool json_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

void jscan_init(struct jscan *s)
{
	memset(s, 0, sizeof(*s));
	s->st = J_VALUE;
}

static enum jscan_rc value_end(struct jscan *s)
{
	if (s->depth == 0) {
		s->st = J_DONE;
		return JSCAN_DONE;
	}
	s->st = J_NEXT;
	return JSCAN_MORE;
}

static enum jscan_rc push(struct jscan *s, char open)
{
	if (s->depth == JSCAN_MAX_DEPTH)
		return JSCAN_ERROR;
	s->open[s->depth++] = open;
	s->st = open == '{' ? J_OBJ_FIRST : J_ARR_FIRST;
	return JSCAN_MORE;
}

static enum jscan_rc close_container(struct jscan *s, unsigned char c)
{
	char want = s->open[s->depth - 1] == '{' ? '}' : ']';
	if (c != want)
		return JSCAN_ERROR;
	s->depth--;
	return value_end(s);
}

static enum jscan_rc start_value(struct jscan *s, unsigned char c)
{
	static const char *const literals[] = {"true", "false", "null"};
	switch (c) {
	case '{':
	case '[':
		return push(s, (char)c);
	case '"':
		s->st = J_STRING;
		s->key = false;
		return JSCAN_MORE;
	case '-':
		s->st = J_NUMBER;
		s->sub = N_SIGN;
		return JSCAN_MORE;
	default:
		break;
	}
	if (digit(c)) {
		s->st = J_NUMBER;
		s->sub = c == '0' ? N_ZERO : N_INT;
		return JSCAN_MORE;
	}
	for (size_t i = 0; i < 3; i++) {
		if (c == (unsigned char)literals[i][0]) {
			s->st = J_LITERAL;
			s->literal = literals[i];
			s->sub = 1;
			return JSCAN_MORE;
		}
	}
	return JSCAN_ERROR;
}

/* The next part of a number after byte c, or -1 when c does not continue
 * it. */
static int number_next(int part, unsigned char c)
{
	bool e = c == 'e' || c == 'E';
	switch (part) {
	case N_SIGN:
		return c == '0' ? N_ZERO : digit(c) ? N_INT : -1;
	case N_ZERO:
		return c == '.' ? N_POINT : e ? N_EXP_MARK : -1;
	case N_INT:
		return digit(c) ? N_INT : c == '.' ? N_POINT : e ? N_EXP_MARK : -1;
	case N_POINT:
		return digit(c) ? N_FRAC : -1;
	case N_FRAC:
		return digit(c) ? N_FRAC : e ? N_EXP_MARK : -1;
	case N_EXP_MARK:
		return c == '+' || c == '-' ? N_EXP_SIGN : digit(c) ? N_EXP : -1;
	case N_EXP_SIGN:
	case N_EXP:
		return digit(c) ? N_EXP : -1;
	default:
		return -1;
	}
}

static bool number_complete(int part)
{
	return part == N_ZERO || part == N_INT || part == N_FRAC || part == N_EXP;
}

static enum jscan_rc number_byte(struct jscan *s, unsigned char c)
{
	int next = number_next(s->sub, c);
	if (next >= 0) {
		s->sub = next;
		return JSCAN_MORE;
	}
	if (!number_complete(s->sub))
		return JSCAN_ERROR;
	if (value_end(s) == JSCAN_DONE)
		return JSCAN_DONE_UNREAD;
	return jscan_byte(s, c); /* the byte after a member: ',' or a closer */
}

static enum jscan_rc string_byte(struct jscan *s, unsigned char c)
{
	switch (s->st) {
	case J_STRING:
		if (c == '"') {
			if (!s->key)
				return value_end(s);
			s->st = J_COLON;
			return JSCAN_MORE;
		}
		if (c == '\\')
			s->st = J_ESCAPE;
		return c < 0x20 ? JSCAN_ERROR : JSCAN_MORE;
	case J_ESCAPE:
		if (c == 'u') {
			s->st = J_HEX;
			s->sub = 4;
			return JSCAN_MORE;
		}
		s->st = J_STRING;
		return c && strchr("\"\\/bfnrt", c) ? JSCAN_MORE : JSCAN_ERROR;
	default: /* J_HEX */
		if (!(digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
			return JSCAN_ERROR;
		if (--s->sub == 0)
			s->st = J_STRING;
		return JSCAN_MORE;
	}
}

enum jscan_rc jscan_byte(struct jscan *s, unsigned char c)
{
	switch (s->st) {
	case J_VALUE:
	case J_ARR_FIRST:
		if (json_ws(c))
			return JSCAN_MORE;
		if (s->st == J_ARR_FIRST && c == ']')
			return close_container(s, c);
		return start_value(s, c);
	case J_OBJ_FIRST:
	case J_KEY:
		if (json_ws(c))
			return JSCAN_MORE;
		if (s->st == J_OBJ_FIRST && c == '}')
			return close_container(s, c);
		if (c != '"')
			return JSCAN_ERROR;
		s->st = J_STRING;
		s->key = true;
		return JSCAN_MORE;
	case J_COLON:
		if (json_ws(c))
			return JSCAN_MORE;
		if (c != ':')
			return JSCAN_ERROR;
		s->st = J_VALUE;
		return JSCAN_MORE;
	case J_NEXT:
		if (json_ws(c))
			return JSCAN_MORE;
		if (c == ',') {
			s->st = s->open[s->depth - 1] == '{' ? J_KEY : J_VALUE;
			return JSCAN_MORE;
		}
		return close_container(s, c);
	case J_STRING:
	case J_ESCAPE:
	case J_HEX:
		return string_byte(s, c);
	case J_NUMBER:
		return number_byte(s, c);
	case J_LITERAL:
		if (c != (unsigned char)s->literal[s->sub])
			return JSCAN_ERROR;
		if (s->literal[++s->sub] == '\0')
			return value_end(s);
		return JSCAN_MORE;
	default: /* J_DONE: nothing may follow */
		return JSCAN_ERROR;
	}
}

bool jscan_end(const struct jscan *s)
{
	return s->st == J_DONE || (s->st == J_NUMBER && s->depth == 0 && number_complete(s->sub));
}

bool json_text_valid(const char *s, size_t n)
{
	struct jscan js;
	jscan_init(&js);
	size_t i = 0;
	for (; i < n; i++) {
		enum jscan_rc rc = jscan_byte(&js, (unsigned char)s[i]);
		if (rc == JSCAN_ERROR)
			return false;
		if (rc != JSCAN_MORE) {
			i += rc == JSCAN_DONE; /* an unread byte is looked at below */
			break;
		}
	}
	if (i == n && !jscan_end(&js))
		return false;
	for (; i < n; i++)
		if (!json_ws((unsigned char)s[i]))
			return false;
	return true;
}

/* ---------------------------------------------------------------- writing */

static void newline(struct tbuf *b, int indent, int level)
{
	tbuf_putc(b, '\n');
	for (int i = 0; i < indent * level; i++)
		tbuf_putc(b, ' ');
}

/* The index of the first non-blank byte at or after i. */
static size_t skip_ws(const char *s, size_t n, size_t i)
{
	while (i < n && json_ws((unsigned char)s[i]))
		i++;
	return i;
}

/* Copies the string literal that starts at s[i] ('"'); returns the index
 * after its closing quote. */
static size_t copy_string(struct tbuf *b, const char *s, size_t n, size_t i)
{
	size_t start = i++;
	while (i < n && s[i] != '"')
		i += s[i] == '\\' ? 2 : 1;
	i = i < n ? i + 1 : n;
	tbuf_putn(b, s + start, i - start);
	return i;
}

void json_respace(struct tbuf *b, const char *s, size_t n, int indent)
{
	int level = 0;
	size_t i = 0;
	while (i < n) {
		char c = s[i];
		if (json_ws((unsigned char)c)) {
			i++;
		} else if (c == '"') {
			i = copy_string(b, s, n, i);
		} else if (c == '{' || c == '[') {
			size_t j = skip_ws(s, n, i + 1);
			tbuf_putc(b, c);
			if (j < n && (s[j] == '}' || s[j] == ']')) {
				tbuf_putc(b, s[j]); /* {} and [] stay on one line */
				i = j + 1;
				continue;
			}
			if (indent)
				newline(b, indent, ++level);
			i++;
		} else if (c == '}' || c == ']') {
			if (indent)
				newline(b, indent, --level);
			tbuf_putc(b, c);
			i++;
		} else if (c == ',') {
			tbuf_putc(b, ',');
			if (indent)
				newline(b, indent, level);
			else
				tbuf_putc(b, ' ');
			i++;
		} else if (c == ':') {
			tbuf_put(b, ": ");
			i++;
		} else {
			tbuf_putc(b, c);
			i++;
		}
	}
}

void json_put_string(struct tbuf *b, const char *s)
{
	tbuf_putc(b, '"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		const char *esc = NULL;
		switch (*p) {
		case '"':
			esc = "\\\"";
			break;
		case '\\':
			esc = "\\\\";
			break;
		case '\b':
			esc = "\\b";
			break;
		case '\f':
			esc = "\\f";
			break;
		case '\n':
			esc = "\\n";
			break;
		case '\r':
			esc = "\\r";
			break;
		case '\t':
			esc = "\\t";
			break;
		default:
			break;
		}
		if (esc) {
			tbuf_put(b, esc);
		} else if (*p < 0x20) {
			char u[8];
			snprintf(u, sizeof(u), "\\u%04x", *p);
			tbuf_put(b, u);
		} else {
			tbuf_putc(b, (char)*p);
		}
	}
	tbuf_putc(b, '"');
}
