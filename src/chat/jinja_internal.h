/* What the Jinja interpreter's files share (not for outside src/chat): the
 * arena every tree and render allocates from, the syntax tree, run-time
 * values and the per-render state.  The semantics follow @huggingface/jinja
 * (the renderer the byte-for-byte tests compare with); jinja.h is the
 * public face. */
#pragma once

#include <locale.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat/jinja.h"

/* ---- arena: bump allocation, freed all at once ---- */

struct jarena_chunk;
struct jarena {
	struct jarena_chunk *head;
	size_t used;  /* bytes taken from malloc so far */
	size_t limit; /* refuse past this (0: no limit) */
	bool over;    /* an allocation was refused for the limit */
};
/* n bytes, 16-aligned, zeroed; NULL when malloc fails or past the limit. */
void *jarena_alloc(struct jarena *a, size_t n);
void jarena_free(struct jarena *a);
/* A copy of p[0..n) with a NUL after it. */
char *jarena_strdup(struct jarena *a, const char *p, size_t n);

/* ---- syntax tree ---- */

enum jn_kind {
	/* statements */
	JN_TEXT, /* s: the text */
	JN_IF,   /* a: test, body, alt (an elif is one JN_IF in alt) */
	JN_FOR,  /* a: target (JN_NAME or JN_TUPLE), b: iterable, c: filter or NULL, body, alt: else */
	JN_SET,  /* a: target, b: value (NULL: the body is the value) */
	JN_MACRO, /* s: name, args: parameters (JN_NAME or JN_KWARG), body; flags: JF_* */
	JN_CALLBLOCK, /* a: the JN_CALL, args: caller's parameters, body; flags: JF_* */
	JN_FILTERBLOCK, /* a: the JN_FILTER (operand NULL), body */
	JN_BREAK,
	JN_CONTINUE,
	/* expressions */
	JN_STR,   /* s */
	JN_INT,   /* i */
	JN_FLOAT, /* f */
	JN_NAME,  /* s */
	JN_LIST,  /* args: items */
	JN_TUPLE, /* args: items */
	JN_DICT,  /* args: keys, alt: values */
	JN_MEMBER, /* a: object, b: computed key, or s (name) / i (integer) when b is NULL */
	JN_SLICE,  /* a: object, b: start, c: stop, d: step (each may be NULL) */
	JN_CALL,   /* a: callee, args (JN_KWARG for name=value) */
	JN_FILTER, /* a: operand, s: filter name, args */
	JN_TEST,   /* a: operand, s: test name, args; op: 1 when negated */
	JN_BINOP,  /* op: JOP_*, a, b */
	JN_UNARY,  /* op: JOP_NOT, JOP_NEG, JOP_POS; a */
	JN_TERNARY, /* a: condition, b: when true, c: when false */
	JN_SELECT,  /* a: value, b: condition ("x if c" without else) */
	JN_KWARG,   /* s: name, a: value */
};

enum jop {
	JOP_AND = 1, JOP_OR, JOP_EQ, JOP_NE, JOP_LT, JOP_GT, JOP_LE, JOP_GE, JOP_IN, JOP_NOTIN,
	JOP_ADD, JOP_SUB, JOP_CONCAT, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW,
	JOP_NOT, JOP_NEG, JOP_POS,
};

/* Which special names a macro (or call block) body reads. */
#define JF_CALLER 1u
#define JF_KWARGS 2u
#define JF_VARARGS 4u

struct jn {
	uint8_t kind;
	uint8_t op;
	uint8_t flags;
	uint32_t line, col;
	struct jn *a, *b, *c, *d;
	struct jn **body, **alt, **args;
	size_t n_body, n_alt, n_args;
	const char *s;
	size_t sn;
	int64_t i;
	double f;
};

struct jinja_template {
	struct jarena arena;
	struct jn **body;
	size_t n_body;
	const char **names; /* every variable name the source mentions */
	size_t *name_lens;
	size_t n_names;
};

/* ---- lexer (jinja_lex.c) ---- */

enum jt_type {
	JT_TEXT, JT_NUMBER, JT_STRING, JT_IDENT, JT_EQUALS, JT_LPAREN, JT_RPAREN,
	JT_OPEN_STMT, JT_CLOSE_STMT, JT_OPEN_EXPR, JT_CLOSE_EXPR, JT_LBRACKET, JT_RBRACKET,
	JT_LBRACE, JT_RBRACE, JT_COMMA, JT_DOT, JT_COLON, JT_PIPE, JT_ADD, JT_MUL, JT_POW,
	JT_CMP, JT_UNARY, JT_COMMENT, JT_EOF,
};

struct jtok {
	uint8_t type;
	const char *s; /* the value: decoded for strings, raw otherwise (arena) */
	size_t n;
	uint32_t line, col; /* where it starts in the original source */
};

/* Tokens of src (ending with one JT_EOF), in the arena. */
int jinja_lex(struct jarena *a, const char *src, size_t len, struct jtok **out, size_t *n_out,
	      char *err, size_t err_len);

/* JavaScript's idea of white space (what trim() and \s remove): the length
 * of the one at p[0..n), 0 when p does not start with one. */
size_t jinja_js_space(const char *p, size_t n);
/* The length of the white space that ends p[0..n). */
size_t jinja_js_space_end(const char *p, size_t n);

/* ---- values (jinja_value.c) ---- */

enum jv_kind {
	JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_FUNC, JV_LOOP,
};

struct jlist;
struct jdict;
struct jfunc;
struct jloop;

struct jv {
	uint8_t k;
	bool tuple; /* a JV_LIST made by a tuple literal */
	union {
		bool b;
		int64_t i;
		double f;
		struct {
			const char *p;
			size_t n;
		} s;
		struct jlist *l;
		struct jdict *d;
		struct jfunc *fn;
		struct jloop *loop;
	} u;
};

struct jlist {
	size_t n;
	struct jv *v;
};

struct jent {
	const char *k;
	size_t kn;
	struct jv v;
};
struct jdict {
	size_t n, cap;
	struct jent *e;
	uint32_t *slots; /* from 16 entries: open addressing, entry index + 1 (0: empty) */
	size_t n_slots;  /* a power of two, over twice n */
};

struct jloop {
	int64_t index0, length;
	const struct jv *items; /* for previtem / nextitem */
};

struct jctx;
struct jargs {
	size_t n;
	struct jv *pos;
	size_t nk;
	const char **kname;
	size_t *kname_len;
	struct jv *kval;
};

typedef int (*jbuiltin_fn)(struct jctx *c, const struct jn *at, struct jv self,
			   const struct jargs *args, struct jv *out);

enum jfunc_kind { JFN_BUILTIN, JFN_MACRO, JFN_CALLER };
struct jscope;
struct jfunc {
	uint8_t kind;
	const char *name;
	jbuiltin_fn fn;     /* JFN_BUILTIN: self is the receiver of a method */
	struct jv self;
	const struct jn *node; /* JFN_MACRO / JFN_CALLER */
	struct jscope *scope;  /* where it was defined */
};

struct jscope {
	struct jscope *parent;
	struct jdict vars;
};

/* A growable byte buffer (malloc'ed) bounded by the render's max_output. */
struct jbuf {
	char *p;
	size_t n, cap;
};

/* Per-render state. */
struct jctx {
	struct jarena arena;
	uint64_t steps, max_steps;
	size_t max_output;
	unsigned depth, max_depth;
	time_t now;
	struct jscope *globals;
	const struct jn *last; /* the node being evaluated: where an error without one is */
	locale_t ctype; /* C.UTF-8, made on first non-ASCII upper()/lower() */
	bool ctype_tried;
	struct jv caller; /* the caller a {% call %} block hands to the macro it calls */
	/* The render took a path that @huggingface/jinja refuses and Jinja2
	 * renders (jx_jinja2_only): from there on, Jinja2 is the only renderer
	 * to agree with, so where the two part ways sinkd follows Jinja2. */
	bool jinja2_only;
	char *err;
	size_t err_len;
};

static inline struct jv jv_undef(void) { struct jv v = {0}; v.k = JV_UNDEF; return v; }
static inline struct jv jv_none(void) { struct jv v = {0}; v.k = JV_NONE; return v; }
static inline struct jv jv_bool(bool b) { struct jv v = {0}; v.k = JV_BOOL; v.u.b = b; return v; }
static inline struct jv jv_int(int64_t i) { struct jv v = {0}; v.k = JV_INT; v.u.i = i; return v; }
static inline struct jv jv_float(double f)
{
	struct jv v = {0};
	v.k = JV_FLOAT;
	v.u.f = f;
	return v;
}
static inline struct jv jv_str(const char *p, size_t n)
{
	struct jv v = {0};
	v.k = JV_STR;
	v.u.s.p = p;
	v.u.s.n = n;
	return v;
}

/* "LINE:COL: message" (at may be NULL: no position) into c->err; returns code. */
int jx_err(struct jctx *c, const struct jn *at, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The arena ran out or malloc failed. */
int jx_nomem(struct jctx *c, const struct jn *at);
/* Charges n steps; JINJA_E_BUDGET when the budget is spent. */
int jx_charge(struct jctx *c, const struct jn *at, uint64_t n);

void *jx_alloc(struct jctx *c, size_t n);
/* A new string value of n bytes (checked against max_output) */
int jx_str_new(struct jctx *c, const struct jn *at, size_t n, char **p, struct jv *out);
int jx_str_cat(struct jctx *c, const struct jn *at, const char *a, size_t an, const char *b,
	       size_t bn, struct jv *out);
int jx_list_new(struct jctx *c, const struct jn *at, size_t n, struct jv *out);
struct jdict *jx_dict_new(struct jctx *c);
/* Sets key (copied) to v, replacing an entry of that key. */
int jx_dict_set(struct jctx *c, struct jdict *d, const char *k, size_t kn, struct jv v);
/* The entry's value, or NULL. */
struct jv *jx_dict_get(const struct jdict *d, const char *k, size_t kn);

bool jv_truthy(struct jv v);
/* JavaScript's == on the two values (what the reference's == does). */
bool jv_loose_eq(struct jctx *c, struct jv a, struct jv b);
/* JavaScript's === (what `in` on a list uses). */
bool jv_strict_eq(struct jv a, struct jv b);
const char *jv_type_name(struct jv v);
/* Numeric comparison or string (case-folded unless case_sensitive) order,
 * refusing other mixes; *cmp -1/0/1. */
int jv_compare(struct jctx *c, const struct jn *at, struct jv a, struct jv b,
	       bool case_sensitive, int *cmp);

/* Appends to b (bounded by max_output). */
int jbuf_put(struct jctx *c, const struct jn *at, struct jbuf *b, const char *p, size_t n);
int jbuf_puts(struct jctx *c, const struct jn *at, struct jbuf *b, const char *s);
/* How {{ v }} prints v (none and undefined print nothing: the caller skips them). */
int jv_print(struct jctx *c, const struct jn *at, struct jbuf *b, struct jv v);
/* JavaScript's value.toString() on the value (what + and ~ concatenate). */
int jv_js_string(struct jctx *c, const struct jn *at, struct jbuf *b, struct jv v);
/* Python's str(v), as Jinja2 prints: None, True, lists and dicts as repr
 * ([1, 'a'], {'k': None}); for renders that follow Jinja2 (jinja2_only). */
int jv_py_str(struct jctx *c, const struct jn *at, struct jbuf *b, struct jv v);
/* JavaScript's Number.prototype.toString. */
void jv_js_number(double d, char *out, size_t out_len);

struct jjson_opts {
	int indent; /* 0: none */
	const char *item_sep, *key_sep;
	bool ensure_ascii, sort_keys, undef_null;
};
int jv_to_json(struct jctx *c, const struct jn *at, struct jbuf *b, struct jv v,
	       const struct jjson_opts *o, unsigned depth);
/* The buffer as a string value (copied into the arena); frees nothing. */
int jx_buf_value(struct jctx *c, const struct jn *at, const struct jbuf *b, struct jv *out);

struct cJSON;
int jv_from_json(struct jctx *c, const struct cJSON *j, struct jv *out, unsigned depth);

/* UTF-16 length of a UTF-8 string (what JavaScript's .length counts). */
size_t jv_utf16_len(const char *p, size_t n);
/* Length in bytes of the code point at p (1 for a stray byte). */
size_t jv_cp_len(const char *p, size_t n);

/* ---- evaluation (jinja_eval.c) ---- */

int jx_eval(struct jctx *c, struct jscope *s, const struct jn *e, struct jv *out);
int jx_call_value(struct jctx *c, const struct jn *at, struct jv fn, const struct jargs *args,
		  struct jv *out);
struct jv jx_lookup(struct jctx *c, struct jscope *s, const char *name, size_t n);

/* ---- builtins (jinja_builtins.c, jinja_filters.c) ---- */

/* l OP r for every binary operator but and / or, as the reference does it. */
int jx_binop(struct jctx *c, const struct jn *at, int op, struct jv l, struct jv r, struct jv *out);
/* Helpers the builtins share (jinja_filters.c). */
int jx_str_replace(struct jctx *c, const struct jn *at, struct jv self, struct jv from,
		   struct jv to, int64_t count, struct jv *out);
int jx_join(struct jctx *c, const struct jn *at, struct jv items, struct jv sep,
	    const struct jv *attr, struct jv *out);
int jx_dictsort(struct jctx *c, const struct jn *at, struct jv self, const struct jargs *a,
		struct jv *out);

int jx_filter(struct jctx *c, struct jscope *s, const struct jn *at, const char *name,
	      size_t name_len, struct jv in, const struct jargs *args, struct jv *out);
int jx_test(struct jctx *c, const struct jn *at, const char *name, size_t name_len, struct jv in,
	    const struct jargs *args, bool *out);
/* The method or attribute `name` of a non-mapping value (a bound builtin
 * function, or list/str .length); undefined when there is none. */
int jx_method(struct jctx *c, const struct jn *at, struct jv self, const char *name, size_t n,
	      struct jv *out);
/* A dict's own builtins (get, items, keys, values, dictsort). */
int jx_dict_method(struct jctx *c, const struct jn *at, struct jv self, const char *name, size_t n,
		   struct jv *out);
/* The global functions: range, namespace, raise_exception, strftime_now, dict. */
int jx_global(struct jctx *c, const char *name, size_t n, struct jv *out);

/* Keyword argument `name`, or NULL. */
const struct jv *jargs_kw(const struct jargs *a, const char *name);
/* Positional i, else keyword name, else NULL. */
const struct jv *jargs_get(const struct jargs *a, size_t i, const char *name);
/* A list of the dict's items as [key, value] pairs. */
int jx_dict_items(struct jctx *c, const struct jn *at, struct jv d, struct jv *out);
int jx_dict_keys(struct jctx *c, const struct jn *at, struct jv d, struct jv *out);
/* The string's code points as a list of one-character strings. */
int jx_str_chars(struct jctx *c, const struct jn *at, struct jv s, struct jv *out);
/* getattr along a dotted path as the reference's filters read it. */
struct jv jx_attr_path(struct jv item, const char *path, size_t n);
/* The loop object's members (undefined for a name it lacks). */
struct jv jx_loop_member(struct jloop *l, const char *name, size_t n);
/* A new scope under parent. */
struct jscope *jx_scope_new(struct jctx *c, struct jscope *parent);
/* The loop object as a dict (for printing or tojson). */
int jx_loop_dict(struct jctx *c, struct jloop *l, struct jv *out);
