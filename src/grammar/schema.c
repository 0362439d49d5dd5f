/* The JSON Schema compiler: each schema becomes an expression of the
 * grammar builder over the bytes of its JSON text.  Strings, numbers,
 * integers and "any value" are shared rules, called wherever they are
 * needed, so every plain string of a grammar is the same rule and its mask
 * walk is done once (mask.c); patterned strings are one rule per pattern.
 * $ref targets are rules too, which is how recursion works.  Objects and
 * arrays are spelled out in place.  What the subset leaves out is an error
 * naming the keyword and its JSON path; nothing is silently dropped except
 * annotations.  It does not validate documents. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"
#include "grammar/schema.h"
#include "util/errbuf.h"

#define SC_MAX_DEPTH 128 /* nested schemas */
#define SC_PATH_LEN 512

struct sc_named {
	char *key; /* "ref:<pointer>" or "str:<canonical keywords>" */
	int rule;
};

struct sc {
	struct gbuild *b;
	const cJSON *root;
	char path[SC_PATH_LEN]; /* of the schema being compiled */
	size_t path_len;
	char *out_path, *err;
	size_t out_path_cap, err_len;
	int rc, depth;
	int ws; /* whitespace between JSON tokens */
	int r_string, r_number, r_integer, r_value, r_object, r_array; /* -1 until needed */
	struct sc_named *named;
	size_t n_named, cap_named;
};

/* ---- errors and paths ---- */

static int sc_fail(struct sc *sc, int code, const char *key, const char *fmt, ...)
    SINKD_PRINTF(4, 5);

/* Records the first error, at path + ".key" (key NULL: the path itself).
 * Returns -1, the failed expression. */
static int sc_fail(struct sc *sc, int code, const char *key, const char *fmt, ...)
{
	if (sc->rc)
		return -1;
	sc->rc = code;
	if (sc->err && sc->err_len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(sc->err, sc->err_len, fmt, ap);
		va_end(ap);
	}
	if (sc->out_path && sc->out_path_cap)
		snprintf(sc->out_path, sc->out_path_cap, "%s%s%s", sc->path, key ? "." : "",
		         key ? key : "");
	return -1;
}

/* Counts n steps of work against the build's budget; true (and the error
 * recorded at path + ".key") once past it. */
static bool sc_spend(struct sc *sc, uint64_t n, const char *key)
{
	if (!gb_spend(sc->b, n))
		return false;
	char err[SINKD_ERR_LEN];
	gb_error(sc->b, err, sizeof(err));
	sc_fail(sc, -EINVAL, key, "%s", err);
	return true;
}

static size_t path_push(struct sc *sc, const char *seg)
{
	size_t old = sc->path_len;
	int n = snprintf(sc->path + old, sizeof(sc->path) - old, ".%s", seg);
	sc->path_len =
	    n > 0 && old + (size_t)n < sizeof(sc->path) ? old + (size_t)n : sizeof(sc->path) - 1;
	return old;
}

static size_t path_push_index(struct sc *sc, const char *seg, int i)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%s[%d]", seg, i);
	return path_push(sc, buf);
}

static void path_pop(struct sc *sc, size_t old)
{
	sc->path_len = old;
	sc->path[old] = '\0';
}

/* Labels rule with the current path (+ ".key"), so a rule too large to
 * compile is reported where the schema asked for it. */
static void rule_label(struct sc *sc, int rule, const char *key)
{
	size_t old = key ? path_push(sc, key) : sc->path_len;
	gb_rule_label(sc->b, rule, sc->path);
	path_pop(sc, old);
}

/* ---- JSON primitives ---- */

static int sc_lit(struct sc *sc, const char *s)
{
	return gb_str(sc->b, s);
}

static int seq(struct sc *sc, const int *xs, size_t n)
{
	return gb_seq(sc->b, xs, n);
}

#define SEQ(sc, ...)                                                                               \
	seq((sc), (const int[]){__VA_ARGS__}, sizeof((int[]){__VA_ARGS__}) / sizeof(int))

/* A rule made on first use. */
static int shared_rule(struct sc *sc, int *slot, int (*define)(struct sc *))
{
	if (*slot < 0) {
		*slot = gb_rule_new(sc->b);
		if (*slot < 0)
			return -1;
		gb_rule_set(sc->b, *slot, define(sc));
	}
	return gb_call(sc->b, *slot);
}

static int def_string(struct sc *sc)
{
	int q = sc_lit(sc, "\"");
	return SEQ(sc, q, gb_rep(sc->b, pattern_any_char(sc->b), 0, -1), q);
}

static int int_part(struct sc *sc)
{
	struct gbuild *b = sc->b;
	int digits = gb_seq2(b, gb_range(b, '1', '9'), gb_rep(b, gb_range(b, '0', '9'), 0, -1));
	return gb_seq2(b, gb_opt(b, sc_lit(sc, "-")), gb_alt2(b, sc_lit(sc, "0"), digits));
}

static int def_integer(struct sc *sc)
{
	return int_part(sc);
}

static int def_number(struct sc *sc)
{
	struct gbuild *b = sc->b;
	int digits = gb_rep(b, gb_range(b, '0', '9'), 1, -1);
	int frac = gb_opt(b, gb_seq2(b, sc_lit(sc, "."), digits));
	int sign = gb_opt(b, gb_alt2(b, sc_lit(sc, "+"), sc_lit(sc, "-")));
	int exp = gb_opt(b, SEQ(sc, gb_alt2(b, sc_lit(sc, "e"), sc_lit(sc, "E")), sign, digits));
	return SEQ(sc, int_part(sc), frac, exp);
}

/* ---- integer bounds ---- */

#define SC_INT_BOUND 100000000000000000LL /* 10^17: bounds beyond it are refused */

static bool all_digits(const char *s, size_t n, char d)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != d)
			return false;
	return true;
}

/* The decimal strings of n digits from lo to hi (same length, lo <= hi),
 * split on the first digit where they differ. */
static int digits_between(struct sc *sc, const char *lo, const char *hi, size_t n)
{
	struct gbuild *b = sc->b;
	if (n == 0)
		return gb_empty(b);
	if (lo[0] == hi[0])
		return gb_seq2(b, gb_range(b, (uint8_t)lo[0], (uint8_t)lo[0]),
		               digits_between(sc, lo + 1, hi + 1, n - 1));
	char nines[24], zeros[24];
	memset(nines, '9', n - 1);
	memset(zeros, '0', n - 1);
	int any = n > 1 ? gb_rep(b, gb_range(b, '0', '9'), (int)n - 1, (int)n - 1) : gb_empty(b);
	int alts[3];
	size_t k = 0;
	char a = lo[0], z = hi[0];
	if (!all_digits(lo + 1, n - 1, '0')) {
		alts[k++] = gb_seq2(b, gb_range(b, (uint8_t)a, (uint8_t)a),
		                    digits_between(sc, lo + 1, nines, n - 1));
		a++;
	}
	if (!all_digits(hi + 1, n - 1, '9')) {
		alts[k++] = gb_seq2(b, gb_range(b, (uint8_t)z, (uint8_t)z),
		                    digits_between(sc, zeros, hi + 1, n - 1));
		z--;
	}
	if (a <= z)
		alts[k++] = gb_seq2(b, gb_range(b, (uint8_t)a, (uint8_t)z), any);
	return gb_alt(b, alts, k);
}

/* Integers from lo (>= 0) to hi (-1: no upper bound), without a sign or
 * leading zeros. */
static int nonneg_between(struct sc *sc, long long lo, long long hi)
{
	struct gbuild *b = sc->b;
	int alts[24];
	size_t k = 0;
	long long first = 1; /* smallest number of the current length */
	for (int len = 1; len <= 18 && (hi < 0 || first <= hi); len++) {
		long long last = first * 10 - 1;
		long long a = lo > (len == 1 ? 0 : first) ? lo : (len == 1 ? 0 : first);
		long long z = hi >= 0 && hi < last ? hi : last;
		if (hi < 0 && a > last) {
			first *= 10;
			continue;
		}
		if (hi < 0 && lo <= last && len > 1 && lo <= first) {
			/* every longer number too: [1-9][0-9]{len-1,} */
			alts[k++] = gb_seq2(b, gb_range(b, '1', '9'),
			                    gb_rep(b, gb_range(b, '0', '9'), len - 1, -1));
			break;
		}
		if (a <= z) {
			char sa[24], sz[24];
			snprintf(sa, sizeof(sa), "%lld", a);
			snprintf(sz, sizeof(sz), "%lld", z);
			alts[k++] = digits_between(sc, sa, sz, strlen(sa));
		}
		if (len == 18)
			break;
		first *= 10;
	}
	return k ? gb_alt(b, alts, k) : sc_fail(sc, -EINVAL, NULL, "the integer range is empty");
}

/* One bound of an integer schema: inclusive, or exclusive made inclusive. */
static int int_bound(struct sc *sc, const cJSON *s, bool upper, bool *has, long long *out)
{
	const cJSON *inc = cJSON_GetObjectItemCaseSensitive(s, upper ? "maximum" : "minimum");
	const cJSON *exc =
	    cJSON_GetObjectItemCaseSensitive(s, upper ? "exclusiveMaximum" : "exclusiveMinimum");
	*has = false;
	for (int i = 0; i < 2; i++) {
		const cJSON *v = i ? exc : inc;
		const char *kw = v ? v->string : NULL;
		if (!v)
			continue;
		if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
			return sc_fail(sc, -EINVAL, kw, "'%s' must be a number", kw);
		if (fabs(v->valuedouble) > (double)SC_INT_BOUND)
			return sc_fail(sc, -EINVAL, kw, "'%s' beyond 10^17 is not supported", kw);
		double d = v->valuedouble;
		long long x = upper ? (long long)floor(d) : (long long)ceil(d);
		if (i && (double)x == d) /* exclusive of an integer value */
			x += upper ? -1 : 1;
		if (!*has || (upper ? x < *out : x > *out))
			*out = x;
		*has = true;
	}
	return 0;
}

/* An integer within minimum / maximum (exclusive ones too). */
static int integer_between(struct sc *sc, const cJSON *s)
{
	struct gbuild *b = sc->b;
	bool has_lo, has_hi;
	long long lo = 0, hi = 0;
	if (int_bound(sc, s, false, &has_lo, &lo) || int_bound(sc, s, true, &has_hi, &hi))
		return -1;
	if (!has_lo && !has_hi)
		return shared_rule(sc, &sc->r_integer, def_integer);
	if (has_lo && has_hi && lo > hi)
		return sc_fail(sc, -EINVAL, "minimum", "no integer lies between the bounds");
	int minus = sc_lit(sc, "-");
	if (has_lo && lo >= 0)
		return nonneg_between(sc, lo, has_hi ? hi : -1);
	if (has_hi && hi < 0)
		return gb_seq2(b, minus, nonneg_between(sc, -hi, has_lo ? -lo : -1));
	return gb_alt2(b, gb_seq2(b, minus, nonneg_between(sc, 1, has_lo ? -lo : -1)),
	               nonneg_between(sc, 0, has_hi ? hi : -1));
}

/* A number within bounds: only "minimum": 0 can be written exactly (no
 * minus sign); other bounds on fractions are refused. */
static int number_between(struct sc *sc, const cJSON *s)
{
	static const char *const kws[] = {"minimum", "maximum", "exclusiveMinimum",
	                                  "exclusiveMaximum"};
	const cJSON *min = NULL;
	for (size_t i = 0; i < 4; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, kws[i]);
		if (!v)
			continue;
		if (i || !cJSON_IsNumber(v) || v->valuedouble != 0)
			return sc_fail(sc, -EINVAL, kws[i],
			               "'%s' on a number is not supported (only \"minimum\": 0, or "
			               "\"type\": \"integer\" with any bounds)",
			               kws[i]);
		min = v;
	}
	if (!min)
		return shared_rule(sc, &sc->r_number, def_number);
	struct gbuild *b = sc->b;
	int digits = gb_rep(b, gb_range(b, '0', '9'), 1, -1);
	int lead =
	    gb_alt2(b, sc_lit(sc, "0"),
	            gb_seq2(b, gb_range(b, '1', '9'), gb_rep(b, gb_range(b, '0', '9'), 0, -1)));
	int frac = gb_opt(b, gb_seq2(b, sc_lit(sc, "."), digits));
	int sign = gb_opt(b, gb_alt2(b, sc_lit(sc, "+"), sc_lit(sc, "-")));
	int exp = gb_opt(b, SEQ(sc, gb_alt2(b, sc_lit(sc, "e"), sc_lit(sc, "E")), sign,
	                        gb_rep(b, gb_range(b, '0', '9'), 1, -1)));
	return SEQ(sc, lead, frac, exp);
}

static int call_value(struct sc *sc);
static int call_string(struct sc *sc)
{
	return shared_rule(sc, &sc->r_string, def_string);
}

/* open ws (x (ws sep ws x)* ws)? close: a JSON container of items x. */
static int container(struct sc *sc, const char *open, int x, const char *close)
{
	struct gbuild *b = sc->b;
	int more = gb_rep(b, SEQ(sc, sc->ws, sc_lit(sc, ","), sc->ws, x), 0, -1);
	int body = gb_opt(b, SEQ(sc, x, more, sc->ws));
	return SEQ(sc, sc_lit(sc, open), sc->ws, body, sc_lit(sc, close));
}

static int def_object(struct sc *sc)
{
	int kv = SEQ(sc, call_string(sc), sc->ws, sc_lit(sc, ":"), sc->ws, call_value(sc));
	return container(sc, "{", kv, "}");
}

static int def_array(struct sc *sc)
{
	return container(sc, "[", call_value(sc), "]");
}

static int call_object(struct sc *sc)
{
	return shared_rule(sc, &sc->r_object, def_object);
}

static int def_value(struct sc *sc)
{
	int xs[] = {call_object(sc),    shared_rule(sc, &sc->r_array, def_array),
	            call_string(sc),    shared_rule(sc, &sc->r_number, def_number),
	            sc_lit(sc, "true"), sc_lit(sc, "false"),
	            sc_lit(sc, "null")};
	return gb_alt(sc->b, xs, sizeof(xs) / sizeof(xs[0]));
}

static int call_value(struct sc *sc)
{
	return shared_rule(sc, &sc->r_value, def_value);
}

/* ---- named rules ($ref targets, patterned strings) ---- */

/* The rule under key; *fresh when it was just made (the caller defines it). */
static int named_rule(struct sc *sc, const char *key, bool *fresh)
{
	*fresh = false;
	if (sc_spend(sc, sc->n_named, NULL))
		return -1;
	for (size_t i = 0; i < sc->n_named; i++)
		if (!strcmp(sc->named[i].key, key))
			return sc->named[i].rule;
	if (sc->n_named == sc->cap_named) {
		size_t nc = sc->cap_named ? sc->cap_named * 2 : 16;
		struct sc_named *p = realloc(sc->named, nc * sizeof(*p));
		if (!p)
			return sc_fail(sc, -ENOMEM, NULL, "out of memory");
		sc->named = p;
		sc->cap_named = nc;
	}
	char *k = strdup(key);
	int rule = gb_rule_new(sc->b);
	if (!k || rule < 0) {
		free(k);
		return sc_fail(sc, -ENOMEM, NULL, "out of memory");
	}
	sc->named[sc->n_named++] = (struct sc_named){k, rule};
	*fresh = true;
	return rule;
}

static int compile(struct sc *sc, const cJSON *s);

/* "#", "#/$defs/x", any JSON pointer into the root document. */
static const cJSON *resolve(struct sc *sc, const char *ref, char *path, size_t path_cap)
{
	if (ref[0] != '#' || (ref[1] && ref[1] != '/'))
		return NULL;
	const cJSON *cur = sc->root;
	size_t pl = (size_t)snprintf(path, path_cap, "$");
	for (const char *p = ref + 1; *p == '/' && cur;) {
		char seg[256];
		size_t n = 0;
		for (p++; *p && *p != '/'; p++) {
			char c = *p;
			if (c == '~' && (p[1] == '0' || p[1] == '1'))
				c = *++p == '0' ? '~' : '/';
			if (n + 1 < sizeof(seg))
				seg[n++] = c;
		}
		seg[n] = '\0';
		if (cJSON_IsArray(cur)) {
			char *end;
			long i = strtol(seg, &end, 10);
			cur = *seg && !*end ? cJSON_GetArrayItem(cur, (int)i) : NULL;
		} else {
			cur =
			    cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, seg) : NULL;
		}
		if (pl < path_cap)
			pl += (size_t)snprintf(path + pl, path_cap - pl, ".%s", seg);
	}
	return cur;
}

static int compile_ref(struct sc *sc, const cJSON *ref)
{
	if (!cJSON_IsString(ref))
		return sc_fail(sc, -EINVAL, "$ref", "'$ref' must be a string");
	char key[1024], target_path[SC_PATH_LEN];
	snprintf(key, sizeof(key), "ref:%s", ref->valuestring);
	const cJSON *target = resolve(sc, ref->valuestring, target_path, sizeof(target_path));
	if (!target)
		return sc_fail(
		    sc, -EINVAL, "$ref",
		    "'$ref' \"%s\" does not resolve (only references into this schema, such "
		    "as #/$defs/NAME, are supported)",
		    ref->valuestring);
	bool fresh;
	int rule = named_rule(sc, key, &fresh);
	if (rule >= 0 && fresh) {
		char saved[SC_PATH_LEN];
		size_t saved_len = sc->path_len;
		memcpy(saved, sc->path, sizeof(saved));
		snprintf(sc->path, sizeof(sc->path), "%s", target_path);
		sc->path_len = strlen(sc->path);
		rule_label(sc, rule, NULL);
		gb_rule_set(sc->b, rule, compile(sc, target));
		memcpy(sc->path, saved, sizeof(saved));
		sc->path_len = saved_len;
	}
	return gb_call(sc->b, rule);
}

/* ---- keywords ---- */

static const char *const annotations[] = {
    "title",    "description", "$schema",  "$id",       "default", "examples",
    "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions",
};

static const char *const keywords[] = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "const",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
};

static bool in_list(const char *k, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(k, list[i]))
			return true;
	return false;
}

static bool is_annotation(const char *k)
{
	return in_list(k, annotations, sizeof(annotations) / sizeof(annotations[0]));
}

/* A keyword that does not shape the value of s: an annotation, or the
 * whitespace option at the root (schema_whitespace read it). */
static bool is_passive(const struct sc *sc, const cJSON *s, const char *k)
{
	return is_annotation(k) || (s == sc->root && !strcmp(k, GRAMMAR_WS_KEYWORD));
}

/* Every keyword is known; numeric bounds get their own message. */
static int check_keywords(struct sc *sc, const cJSON *s)
{
	for (const cJSON *k = s->child; k; k = k->next) {
		if (is_passive(sc, s, k->string) ||
		    in_list(k->string, keywords, sizeof(keywords) / sizeof(keywords[0])))
			continue;
		if (!strcmp(k->string, "multipleOf"))
			return sc_fail(sc, -EINVAL, k->string,
			               "'multipleOf' is not supported (it cannot be enforced while "
			               "the digits are written)");
		return sc_fail(sc, -EINVAL, k->string, "unsupported keyword '%s'", k->string);
	}
	return 0;
}

/* With anyOf / oneOf / allOf / $ref, nothing but annotations beside them. */
static int check_alone(struct sc *sc, const cJSON *s, const char *kw)
{
	for (const cJSON *k = s->child; k; k = k->next)
		if (strcmp(k->string, kw) && !is_passive(sc, s, k->string))
			return sc_fail(
			    sc, -EINVAL, k->string,
			    "'%s' beside '%s' is not supported (move it into the branches)",
			    k->string, kw);
	return 0;
}

/* A non-negative integer keyword, or dflt when absent; -2 on error. */
static long get_count(struct sc *sc, const cJSON *s, const char *kw, long dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, kw);
	if (!v)
		return dflt;
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble) ||
	    v->valuedouble > 1e6) {
		sc_fail(sc, -EINVAL, kw, "'%s' must be a non-negative integer (at most 1000000)",
		        kw);
		return -2;
	}
	return (long)v->valuedouble;
}

/* ---- enum and const ---- */

static bool value_has_type(const cJSON *v, const char *type)
{
	if (!strcmp(type, "null"))
		return cJSON_IsNull(v);
	if (!strcmp(type, "boolean"))
		return cJSON_IsBool(v);
	if (!strcmp(type, "string"))
		return cJSON_IsString(v);
	if (!strcmp(type, "number"))
		return cJSON_IsNumber(v);
	if (!strcmp(type, "integer"))
		return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
		       fabs(v->valuedouble) < 9007199254740992.0;
	if (!strcmp(type, "object"))
		return cJSON_IsObject(v);
	if (!strcmp(type, "array"))
		return cJSON_IsArray(v);
	return false;
}

static bool type_allows(const cJSON *type, const cJSON *v)
{
	if (!type)
		return true;
	if (cJSON_IsString(type))
		return value_has_type(v, type->valuestring);
	for (const cJSON *t = type->child; t; t = t->next)
		if (cJSON_IsString(t) && value_has_type(v, t->valuestring))
			return true;
	return false;
}

/* The value's compact cJSON text, exactly. */
static int literal_value(struct sc *sc, const cJSON *v)
{
	char *text = cJSON_PrintUnformatted(v);
	if (!text)
		return sc_fail(sc, -ENOMEM, NULL, "out of memory");
	int x = sc_lit(sc, text);
	cJSON_free(text);
	return x;
}

static int compile_enum(struct sc *sc, const cJSON *s)
{
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
	const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
	const cJSON *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
	if (en && !cJSON_IsArray(en))
		return sc_fail(sc, -EINVAL, "enum", "'enum' must be an array");
	if (en && cn)
		return sc_fail(sc, -EINVAL, "const", "'const' beside 'enum' is not supported");
	int n = 0, *xs = calloc(en ? (size_t)cJSON_GetArraySize(en) + 1 : 1, sizeof(*xs));
	if (!xs)
		return sc_fail(sc, -ENOMEM, NULL, "out of memory");
	for (const cJSON *v = en ? en->child : cn; v; v = en ? v->next : NULL)
		if (type_allows(type, v))
			xs[n++] = literal_value(sc, v);
	int x = n ? gb_alt(sc->b, xs, (size_t)n)
	          : sc_fail(sc, -EINVAL, en ? "enum" : "const",
	                    en ? "'enum' has no value of the schema's type"
	                       : "'const' is not of the schema's type");
	free(xs);
	return x;
}

/* ---- strings ---- */

struct fmt {
	const char *name, *regex;
};

#define D2 "[0-9][0-9]"
#define TIME_HMS "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?"
#define OFFSET "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#define DATE                                                                                       \
	"[0-9][0-9][0-9][0-9]-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12]" \
	"[0-9]|30)|02-(0[1-9]|1[0-9]|2[0-9]))"
#define EMAIL_ATOM "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
#define DOMAIN_LABEL "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"

static const struct fmt formats[] = {
    {"date", "^" DATE "$"},
    {"time", "^" TIME_HMS OFFSET "?$"},
    {"date-time", "^" DATE "T" TIME_HMS OFFSET "$"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
    {"email", "^" EMAIL_ATOM "(\\." EMAIL_ATOM ")*@" DOMAIN_LABEL "(\\." DOMAIN_LABEL ")+$"},
};

/* A string rule per distinct pattern/format/length bounds. */
static int string_rule(struct sc *sc, const char *key, const char *regex, long min, long max,
                       const char *kw)
{
	bool fresh;
	int rule = named_rule(sc, key, &fresh);
	if (rule < 0 || !fresh)
		return rule < 0 ? -1 : gb_call(sc->b, rule);
	int body;
	rule_label(sc, rule, kw ? kw : max >= 0 ? "maxLength" : "minLength");
	if (regex) {
		char err[SINKD_ERR_LEN] = "";
		int rc = pattern_compile(sc->b, regex, &body, err, sizeof(err));
		if (rc)
			return sc_fail(sc, rc, kw, "'%s': %s", kw, err);
	} else {
		body = gb_rep(sc->b, pattern_any_char(sc->b), (int)min, (int)max);
	}
	int q = sc_lit(sc, "\"");
	gb_rule_set(sc->b, rule, SEQ(sc, q, body, q));
	return gb_call(sc->b, rule);
}

static int compile_string(struct sc *sc, const cJSON *s)
{
	const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
	const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
	long min = get_count(sc, s, "minLength", 0), max = get_count(sc, s, "maxLength", -1);
	bool lengths = cJSON_GetObjectItemCaseSensitive(s, "minLength") ||
	               cJSON_GetObjectItemCaseSensitive(s, "maxLength");
	char key[2048];
	if (min < -1 || max < -1)
		return -1;
	if (max >= 0 && min > max)
		return sc_fail(sc, -EINVAL, "minLength", "'minLength' is greater than 'maxLength'");
	if (pat && fmt)
		return sc_fail(sc, -EINVAL, "pattern",
		               "'pattern' beside 'format' is not supported");
	if ((pat || fmt) && lengths)
		return sc_fail(sc, -EINVAL,
		               cJSON_GetObjectItemCaseSensitive(s, "minLength") ? "minLength"
		                                                                : "maxLength",
		               "'minLength'/'maxLength' beside '%s' is not supported",
		               pat ? "pattern" : "format");
	if (pat) {
		if (!cJSON_IsString(pat))
			return sc_fail(sc, -EINVAL, "pattern", "'pattern' must be a string");
		snprintf(key, sizeof(key), "pattern:%s", pat->valuestring);
		return string_rule(sc, key, pat->valuestring, 0, -1, "pattern");
	}
	if (fmt) {
		if (!cJSON_IsString(fmt))
			return sc_fail(sc, -EINVAL, "format", "'format' must be a string");
		for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
			if (!strcmp(fmt->valuestring, formats[i].name)) {
				snprintf(key, sizeof(key), "format:%s", formats[i].name);
				return string_rule(sc, key, formats[i].regex, 0, -1, "format");
			}
		return sc_fail(
		    sc, -EINVAL, "format",
		    "unsupported format '%s' (supported: date, time, date-time, uuid, email)",
		    fmt->valuestring);
	}
	if (!lengths)
		return call_string(sc);
	snprintf(key, sizeof(key), "length:%ld:%ld", min, max);
	return string_rule(sc, key, NULL, min, max, NULL);
}

/* ---- objects ---- */

struct prop {
	int kv; /* "name" ws : ws value */
	bool required;
};

#define SC_INLINE_PROPS 6 /* more properties: the tails become rules (size stays linear) */

/* after[i] = ", kv_j" for every j >= i, the optional ones each maybe left
 * out (after[n] is empty).  Few properties: spelled out for every i; more:
 * after[i] = item_i after[i+1] as a chain of rules, so n properties cost n. */
static int props_tails(struct sc *sc, const struct prop *p, int n, int *after)
{
	bool chain = n > SC_INLINE_PROPS;
	after[n] = gb_empty(sc->b);
	for (int i = n - 1; i >= 0; i--) {
		int item = SEQ(sc, sc->ws, sc_lit(sc, ","), sc->ws, p[i].kv);
		int x = gb_seq2(sc->b, p[i].required ? item : gb_opt(sc->b, item), after[i + 1]);
		if (chain) {
			int rule = gb_rule_new(sc->b);
			rule_label(sc, rule, "properties");
			gb_rule_set(sc->b, rule, x);
			x = gb_call(sc->b, rule);
		}
		after[i] = x;
	}
	return gb_failed(sc->b) ? -1 : 0;
}

/* At least one property, in order: the first one present is some j that
 * no required property precedes. */
static int props_nonempty(struct sc *sc, const struct prop *p, int n)
{
	int *xs = calloc((size_t)n + 1, sizeof(*xs)),
	    *after = calloc((size_t)n + 1, sizeof(*after));
	int k = 0, x = -1;
	if (!xs || !after) {
		x = sc_fail(sc, -ENOMEM, NULL, "out of memory");
		goto out;
	}
	if (props_tails(sc, p, n, after))
		goto out;
	for (int j = 0; j < n; j++) {
		xs[k++] = gb_seq2(sc->b, p[j].kv, after[j + 1]);
		if (p[j].required)
			break;
	}
	x = gb_alt(sc->b, xs, (size_t)k);
out:
	free(xs);
	free(after);
	return x;
}

static bool name_in(const cJSON *names, const char *name)
{
	for (const cJSON *r = names ? names->child : NULL; r; r = r->next)
		if (cJSON_IsString(r) && !strcmp(r->valuestring, name))
			return true;
	return false;
}

static int property_kv(struct sc *sc, const cJSON *prop)
{
	cJSON *name = cJSON_CreateString(prop->string);
	int key = name ? literal_value(sc, name) : sc_fail(sc, -ENOMEM, NULL, "out of memory");
	cJSON_Delete(name);
	size_t old = path_push(sc, "properties");
	path_push(sc, prop->string);
	int value = compile(sc, prop);
	path_pop(sc, old);
	return SEQ(sc, key, sc->ws, sc_lit(sc, ":"), sc->ws, value);
}

static int compile_listed(struct sc *sc, const cJSON *props, const cJSON *req)
{
	int n = cJSON_GetArraySize(props), i = 0;
	bool any_required = false;
	if (sc_spend(sc, (uint64_t)n * (uint64_t)(req ? cJSON_GetArraySize(req) : 0), "properties"))
		return -1; /* name_in below */
	struct prop *p = calloc((size_t)n + 1, sizeof(*p));
	if (!p)
		return sc_fail(sc, -ENOMEM, NULL, "out of memory");
	for (const cJSON *q = props->child; q; q = q->next, i++) {
		p[i].kv = property_kv(sc, q);
		p[i].required = name_in(req, q->string);
		any_required |= p[i].required;
	}
	int body = gb_seq2(sc->b, props_nonempty(sc, p, n), sc->ws);
	if (!any_required)
		body = gb_opt(sc->b, body);
	free(p);
	int x = SEQ(sc, sc_lit(sc, "{"), sc->ws, body, sc_lit(sc, "}"));
	if (x >= 0 && n > SC_INLINE_PROPS) {
		/* a rule of its own, so an object too large to compile is named */
		int rule = gb_rule_new(sc->b);
		rule_label(sc, rule, "properties");
		gb_rule_set(sc->b, rule, x);
		x = gb_call(sc->b, rule);
	}
	return x;
}

static int compile_object(struct sc *sc, const cJSON *s)
{
	const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
	const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
	const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
	if (props && !cJSON_IsObject(props))
		return sc_fail(sc, -EINVAL, "properties", "'properties' must be an object");
	if (req && !cJSON_IsArray(req))
		return sc_fail(sc, -EINVAL, "required", "'required' must be an array");
	int i = 0;
	if (req && props &&
	    sc_spend(sc, (uint64_t)cJSON_GetArraySize(req) * (uint64_t)cJSON_GetArraySize(props),
	             "required"))
		return -1;
	for (const cJSON *r = req ? req->child : NULL; r; r = r->next, i++)
		if (!cJSON_IsString(r) || !props ||
		    !cJSON_GetObjectItemCaseSensitive(props, r->valuestring)) {
			size_t old = path_push_index(sc, "required", i);
			sc_fail(sc, -EINVAL, NULL,
			        "required property %s%s%s is not listed in 'properties'",
			        cJSON_IsString(r) ? "'" : "",
			        cJSON_IsString(r) ? r->valuestring : "",
			        cJSON_IsString(r) ? "'" : "(not a string)");
			path_pop(sc, old);
			return -1;
		}
	if (add && !cJSON_IsBool(add) && !cJSON_IsObject(add))
		return sc_fail(sc, -EINVAL, "additionalProperties",
		               "'additionalProperties' must be a boolean or a schema");
	if (props && props->child)
		return compile_listed(sc, props, req);
	if (cJSON_IsFalse(add))
		return SEQ(sc, sc_lit(sc, "{"), sc->ws, sc_lit(sc, "}"));
	if (!cJSON_IsObject(add))
		return call_object(sc);
	size_t old = path_push(sc, "additionalProperties");
	int value = compile(sc, add);
	path_pop(sc, old);
	int kv = SEQ(sc, call_string(sc), sc->ws, sc_lit(sc, ":"), sc->ws, value);
	return container(sc, "{", kv, "}");
}

/* ---- arrays ---- */

/* The elements after the first i: ", e_i" and on, k prefix schemas first. */
static int array_tail(struct sc *sc, const int *prefix, int k, int rest, long min, long max, int i)
{
	if (max >= 0 && i >= max)
		return gb_empty(sc->b);
	if (i >= k) {
		if (rest < 0)
			return gb_empty(sc->b);
		int item = SEQ(sc, sc->ws, sc_lit(sc, ","), sc->ws, rest);
		return gb_rep(sc->b, item, min > i ? (int)(min - i) : 0,
		              max < 0 ? -1 : (int)(max - i));
	}
	int item = SEQ(sc, sc->ws, sc_lit(sc, ","), sc->ws, prefix[i],
	               array_tail(sc, prefix, k, rest, min, max, i + 1));
	return i < min ? item : gb_opt(sc->b, item);
}

static int compile_array(struct sc *sc, const cJSON *s)
{
	const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
	const cJSON *pre = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
	long min = get_count(sc, s, "minItems", 0), max = get_count(sc, s, "maxItems", -1);
	if (min < -1 || max < -1)
		return -1;
	if (items && !cJSON_IsBool(items) && !cJSON_IsObject(items))
		return sc_fail(sc, -EINVAL, "items", "'items' must be a schema");
	if (pre && !cJSON_IsArray(pre))
		return sc_fail(sc, -EINVAL, "prefixItems", "'prefixItems' must be an array");
	int k = pre ? cJSON_GetArraySize(pre) : 0, rest = -1, i = 0;
	int *prefix = calloc((size_t)k + 1, sizeof(*prefix));
	if (!prefix)
		return sc_fail(sc, -ENOMEM, NULL, "out of memory");
	for (const cJSON *p = pre ? pre->child : NULL; p; p = p->next, i++) {
		size_t old = path_push_index(sc, "prefixItems", i);
		prefix[i] = compile(sc, p);
		path_pop(sc, old);
	}
	if (cJSON_IsFalse(items)) {
		if (max < 0 || max > k)
			max = k;
	} else if (cJSON_IsObject(items)) {
		size_t old = path_push(sc, "items");
		rest = compile(sc, items);
		path_pop(sc, old);
	} else {
		rest = call_value(sc);
	}
	if (rest >= 0 && (min > 2 || max > 2)) {
		/* copied once per bounded position: as a rule, each copy is one call */
		int rule = gb_rule_new(sc->b);
		rule_label(sc, rule, "items");
		gb_rule_set(sc->b, rule, rest);
		rest = gb_call(sc->b, rule);
	}
	int x;
	if (max >= 0 && min > max)
		x = sc_fail(sc, -EINVAL, "minItems", "'minItems' is more than the array can hold");
	else if (max == 0)
		x = SEQ(sc, sc_lit(sc, "["), sc->ws, sc_lit(sc, "]"));
	else {
		int first = k > 0 ? prefix[0] : rest;
		int body = SEQ(sc, first, array_tail(sc, prefix, k, rest, min, max, 1), sc->ws);
		x = SEQ(sc, sc_lit(sc, "["), sc->ws, min > 0 ? body : gb_opt(sc->b, body),
		        sc_lit(sc, "]"));
	}
	if (x >= 0 && (min > 2 || max > 2)) {
		/* a rule of its own, so a count too large to compile is named */
		int rule = gb_rule_new(sc->b);
		rule_label(sc, rule, min >= max - min ? "minItems" : "maxItems");
		gb_rule_set(sc->b, rule, x);
		x = gb_call(sc->b, rule);
	}
	free(prefix);
	return x;
}

/* ---- types ---- */

static int compile_type(struct sc *sc, const cJSON *s, const char *type)
{
	if (!strcmp(type, "null"))
		return sc_lit(sc, "null");
	if (!strcmp(type, "boolean"))
		return gb_alt2(sc->b, sc_lit(sc, "true"), sc_lit(sc, "false"));
	if (!strcmp(type, "integer"))
		return integer_between(sc, s);
	if (!strcmp(type, "number"))
		return number_between(sc, s);
	if (!strcmp(type, "string"))
		return compile_string(sc, s);
	if (!strcmp(type, "object"))
		return compile_object(sc, s);
	if (!strcmp(type, "array"))
		return compile_array(sc, s);
	return sc_fail(sc, -EINVAL, "type", "unknown type '%s'", type);
}

static bool has_any(const cJSON *s, const char *const *kws, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (cJSON_GetObjectItemCaseSensitive(s, kws[i]))
			return true;
	return false;
}

/* No "type": the keywords tell (properties: an object, ...), else any value. */
static int compile_untyped(struct sc *sc, const cJSON *s)
{
	static const char *const obj[] = {"properties", "required", "additionalProperties"};
	static const char *const arr[] = {"items", "prefixItems", "minItems", "maxItems"};
	static const char *const str[] = {"minLength", "maxLength", "pattern", "format"};
	if (has_any(s, obj, 3))
		return compile_object(sc, s);
	if (has_any(s, arr, 4))
		return compile_array(sc, s);
	static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum",
	                                  "exclusiveMaximum"};
	if (has_any(s, str, 4))
		return compile_string(sc, s);
	if (has_any(s, num, 4))
		return sc_fail(sc, -EINVAL, "minimum",
		               "'minimum' and 'maximum' need \"type\": \"integer\" or \"number\"");
	return call_value(sc);
}

static int compile_types(struct sc *sc, const cJSON *s, const cJSON *type)
{
	if (cJSON_IsString(type))
		return compile_type(sc, s, type->valuestring);
	if (!cJSON_IsArray(type) || !type->child)
		return sc_fail(sc, -EINVAL, "type", "'type' must be a type name or a list of them");
	int n = 0, xs[8];
	for (const cJSON *t = type->child; t; t = t->next) {
		if (!cJSON_IsString(t) || n == 8)
			return sc_fail(sc, -EINVAL, "type", "'type' must list type names");
		xs[n++] = compile_type(sc, s, t->valuestring);
	}
	return gb_alt(sc->b, xs, (size_t)n);
}

static int compile_branches(struct sc *sc, const cJSON *s, const char *kw)
{
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(s, kw);
	if (check_alone(sc, s, kw))
		return -1;
	if (!cJSON_IsArray(list) || !list->child)
		return sc_fail(sc, -EINVAL, kw, "'%s' must be a non-empty array of schemas", kw);
	int n = cJSON_GetArraySize(list), i = 0;
	if (!strcmp(kw, "allOf") && n != 1)
		return sc_fail(sc, -EINVAL, kw, "'allOf' is supported with one schema only");
	int *xs = calloc((size_t)n, sizeof(*xs));
	if (!xs)
		return sc_fail(sc, -ENOMEM, NULL, "out of memory");
	for (const cJSON *b = list->child; b; b = b->next, i++) {
		size_t old = path_push_index(sc, kw, i);
		xs[i] = compile(sc, b);
		path_pop(sc, old);
	}
	int x = gb_alt(sc->b, xs, (size_t)n);
	free(xs);
	return x;
}

static int compile(struct sc *sc, const cJSON *s)
{
	if (sc->rc)
		return -1;
	if (cJSON_IsTrue(s))
		return call_value(sc);
	if (cJSON_IsFalse(s))
		return sc_fail(sc, -EINVAL, NULL, "the schema 'false' admits no value");
	if (!cJSON_IsObject(s))
		return sc_fail(sc, -EINVAL, NULL, "a schema must be an object or a boolean");
	if (++sc->depth > SC_MAX_DEPTH) {
		sc->depth--;
		return sc_fail(sc, -EINVAL, NULL, "the schema is nested too deeply");
	}
	if (sc_spend(sc, 1, NULL)) { /* e.g. thousands of properties */
		sc->depth--;
		return -1;
	}
	int x = -1;
	const cJSON *v;
	if (check_keywords(sc, s))
		;
	else if ((v = cJSON_GetObjectItemCaseSensitive(s, "$ref")))
		x = check_alone(sc, s, "$ref") ? -1 : compile_ref(sc, v);
	else if (cJSON_GetObjectItemCaseSensitive(s, "anyOf"))
		x = compile_branches(sc, s, "anyOf");
	else if (cJSON_GetObjectItemCaseSensitive(s, "oneOf"))
		x = compile_branches(sc, s, "oneOf");
	else if (cJSON_GetObjectItemCaseSensitive(s, "allOf"))
		x = compile_branches(sc, s, "allOf");
	else if (cJSON_GetObjectItemCaseSensitive(s, "enum") ||
	         cJSON_GetObjectItemCaseSensitive(s, "const"))
		x = compile_enum(sc, s);
	else if ((v = cJSON_GetObjectItemCaseSensitive(s, "type")))
		x = compile_types(sc, s, v);
	else
		x = compile_untyped(sc, s);
	sc->depth--;
	return x;
}

/* The whitespace allowed between JSON tokens: none by default, since a
 * small model fills every blank it may write (a three-field object took
 * stories260K about 72 tokens with blanks, 36 without); with
 * GRAMMAR_WS_KEYWORD "pretty" at the root, 0 to GRAMMAR_MAX_WS of space,
 * LF, tab, CR, so a decode cannot spin on blanks. */
static int schema_whitespace(struct sc *sc, const cJSON *schema)
{
	const cJSON *v = cJSON_IsObject(schema)
	                     ? cJSON_GetObjectItemCaseSensitive(schema, GRAMMAR_WS_KEYWORD)
	                     : NULL;
	if (v && (!cJSON_IsString(v) ||
	          (strcmp(v->valuestring, "compact") && strcmp(v->valuestring, "pretty"))))
		return sc_fail(sc, -EINVAL, GRAMMAR_WS_KEYWORD,
		               "'%s' must be \"compact\" or \"pretty\"", GRAMMAR_WS_KEYWORD);
	struct gbuild *b = sc->b;
	if (!v || !strcmp(v->valuestring, "compact"))
		return gb_empty(b);
	int blank = gb_alt(b,
	                   (const int[]){gb_lit(b, " ", 1), gb_lit(b, "\n", 1), gb_lit(b, "\t", 1),
	                                 gb_lit(b, "\r", 1)},
	                   4);
	return gb_rep(b, blank, 0, GRAMMAR_MAX_WS);
}

int schema_compile(struct gbuild *b, const char *prefix, const cJSON *schema, const char *suffix,
                   int *root_rule, char *path, size_t path_cap, char *err, size_t err_len)
{
	struct sc sc = {.b = b,
	                .root = schema,
	                .path = "$",
	                .path_len = 1,
	                .out_path = path,
	                .out_path_cap = path_cap,
	                .err = err,
	                .err_len = err_len,
	                .r_string = -1,
	                .r_number = -1,
	                .r_integer = -1,
	                .r_value = -1,
	                .r_object = -1,
	                .r_array = -1};
	sc.ws = schema_whitespace(&sc, schema);
	int root = gb_rule_new(b);
	gb_rule_label(b, root, "$");
	int value = schema ? compile(&sc, schema) : call_object(&sc);
	int parts[3] = {gb_str(b, prefix ? prefix : ""), value, gb_str(b, suffix ? suffix : "")};
	gb_rule_set(b, root, gb_seq(b, parts, 3));
	for (size_t i = 0; i < sc.n_named; i++)
		free(sc.named[i].key);
	free(sc.named);
	if (sc.rc)
		return sc.rc;
	if (gb_failed(b))
		return gb_error(b, err, err_len);
	*root_rule = root;
	return 0;
}

/* A build's start: nothing out yet, a fresh builder. */
static int build_begin(struct gbuild **b, struct grammar **out, uint64_t *work, char *path,
                       size_t path_cap, char *err, size_t err_len)
{
	*out = NULL;
	if (work)
		*work = 0;
	if (path && path_cap)
		path[0] = '\0';
	int rc = gb_new(b);
	return rc ? err_set(err, err_len, rc, "out of memory") : 0;
}

/* A schema between an envelope, compiled and built: the one way a grammar
 * is made from a schema (grammar.c and gcache.c call it). */
int grammar_build(const char *prefix, const cJSON *schema, const char *suffix, struct grammar **out,
                  uint64_t *work, char *path, size_t path_cap, char *err, size_t err_len)
{
	struct gbuild *b = NULL;
	int root = -1;
	int rc = build_begin(&b, out, work, path, path_cap, err, err_len);
	if (rc)
		return rc;
	rc = schema_compile(b, prefix, schema, suffix, &root, path, path_cap, err, err_len);
	if (!rc)
		rc = gb_finish(b, root, out, path, path_cap, err, err_len);
	if (work)
		*work = gb_work(b);
	gb_free(b);
	return rc;
}

/* One of several schemas, each in its envelope (a forced tool call whose
 * name is written outside the JSON: one alternative per tool); each schema
 * is its own root for $ref.  A path in an error is the failing one's. */
int grammar_build_alts(const struct grammar_alt *alts, size_t n, struct grammar **out,
                       uint64_t *work, char *path, size_t path_cap, char *err, size_t err_len)
{
	struct gbuild *b = NULL;
	int rc = build_begin(&b, out, work, path, path_cap, err, err_len);
	if (rc)
		return rc;
	int *calls = calloc(n ? n : 1, sizeof(*calls)), top = gb_rule_new(b);
	rc = calls ? 0 : err_set(err, err_len, -ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < n; i++) {
		int rule = -1;
		rc = schema_compile(b, alts[i].prefix, alts[i].schema, alts[i].suffix, &rule, path,
		                    path_cap, err, err_len);
		calls[i] = rule;
		if (!rc)
			calls[i] = gb_call(b, rule);
	}
	if (!rc) {
		gb_rule_label(b, top, "$");
		gb_rule_set(b, top, gb_alt(b, calls, n));
		rc = gb_failed(b) ? gb_error(b, err, err_len)
		                  : gb_finish(b, top, out, path, path_cap, err, err_len);
	}
	if (work)
		*work = gb_work(b);
	free(calls);
	gb_free(b);
	return rc;
}
