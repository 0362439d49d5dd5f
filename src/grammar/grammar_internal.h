/* What the files of src/grammar share and nobody else sees: the expression
 * builder that the schema and pattern compilers write into, the compiled
 * grammar (a recursive transition network: one small DFA over bytes per
 * rule, plus call edges into other rules), and the matcher's item sets and
 * stack nodes that the mask walk advances. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"

/* ---- expressions (gbuild.c) ----
 * An expression is an int handle into the builder; every constructor takes
 * and returns handles, and returns -1 when an argument is -1 or memory runs
 * out, so a compiler can nest calls and check once (gb_finish reports it). */
struct gbuild;

int gb_new(struct gbuild **out);
void gb_free(struct gbuild *b);
int gb_set(struct gbuild *b, const uint32_t set[8]); /* one byte of the set (bit b of set[b/32]) */
int gb_range(struct gbuild *b, uint8_t lo, uint8_t hi);
int gb_lit(struct gbuild *b, const char *s, size_t n); /* these bytes */
int gb_str(struct gbuild *b, const char *s);           /* gb_lit of a C string */
int gb_seq(struct gbuild *b, const int *xs, size_t n); /* n == 0: the empty string */
int gb_alt(struct gbuild *b, const int *xs, size_t n); /* n == 0: nothing matches */
int gb_seq2(struct gbuild *b, int x, int y);
int gb_alt2(struct gbuild *b, int x, int y);
int gb_rep(struct gbuild *b, int x, int min, int max); /* max < 0: unbounded */
int gb_opt(struct gbuild *b, int x);
int gb_empty(struct gbuild *b);
/* Rules are what recursion and sharing go through: a rule is declared,
 * called (gb_call), and defined later (gb_rule_set). */
int gb_rule_new(struct gbuild *b);
void gb_rule_set(struct gbuild *b, int rule, int x);
int gb_call(struct gbuild *b, int rule);
/* The JSON path a rule stands for (copied; the first label sticks): an
 * error while compiling that rule names it. */
void gb_rule_label(struct gbuild *b, int rule, const char *path);
bool gb_failed(const struct gbuild *b);
/* The work budget (gbuild.c): every step of building and compiling counts;
 * past the limit the build fails (gb_failed) and gb_over_budget says so.
 * GB_WORK_BUDGET steps, a new builder's limit, are 20 to 30 ms on one core
 * of the 2-core test machine (debugoptimized) whatever the schema. */
#define GB_WORK_BUDGET 12000000ull
uint64_t gb_work(const struct gbuild *b); /* steps taken so far */
/* Counts n steps of a compiler's own work (the schema compiler's lookups);
 * true, and the build failed, once past the budget. */
bool gb_spend(struct gbuild *b, uint64_t n);
bool gb_over_budget(const struct gbuild *b);
/* The error of a failed build: over the budget (-EINVAL, "too large or
 * complex to compile within the compile budget") or out of memory. */
int gb_error(const struct gbuild *b, char *err, size_t err_len);
/* Compiles every rule to a DFA, drops what can never complete, and makes
 * the grammar whose text is one match of root_rule.  On a schema's error
 * (-EINVAL) path (may be NULL) gets the label of the rule at fault, if any. */
int gb_finish(struct gbuild *b, int root_rule, struct grammar **out, char *path, size_t path_cap,
              char *err, size_t err_len);

/* ---- building a grammar (schema.c) ---- */
/* prefix, a value of schema (NULL: any JSON object), suffix; *work gets
 * the steps it took (may be NULL), failed or not. */
int grammar_build(const char *prefix, const cJSON *schema, const char *suffix, struct grammar **out,
                  uint64_t *work, char *path, size_t path_cap, char *err, size_t err_len);

/* One of the alternatives (grammar.h's grammar_alt), as grammar_build. */
int grammar_build_alts(const struct grammar_alt *alts, size_t n, struct grammar **out,
                       uint64_t *work, char *path, size_t path_cap, char *err, size_t err_len);

/* ---- the pattern subset (pattern.c) ---- */
/* The JSON-string body (between the quotes, as JSON text) whose decoded
 * content matches the regex `pattern`: characters come out unescaped except
 * '"', '\\' and control characters, which come out as their JSON escapes. */
int pattern_compile(struct gbuild *b, const char *pattern, int *out, char *err, size_t err_len);
/* One JSON-string character of any code point (unescaped, or an escape). */
int pattern_any_char(struct gbuild *b);
/* pattern_compile, or raw: the text itself (UTF-8, nothing escaped) that
 * matches the whole regex (^ and $ at its ends change nothing). */
int pattern_compile_mode(struct gbuild *b, const char *pattern, bool raw, int *out, char *err,
                         size_t err_len);
/* A grammar of the text that matches regex as a whole (structured outputs
 * with a regex); *work as grammar_build's. */
int grammar_build_regex(const char *regex, struct grammar **out, uint64_t *work, char *err,
                        size_t err_len);

/* ---- the compiled grammar ---- */
struct gedge {
	uint8_t lo, hi; /* bytes lo..hi */
	int32_t to;
};

struct gcall {
	int32_t start; /* the called rule's first state */
	int32_t ret;   /* where this rule goes on when the call returns */
};

struct gstate {
	uint32_t edge_off, call_off; /* into grammar.edges / grammar.calls */
	uint16_t n_edges, n_calls;   /* edges sorted by lo, disjoint */
	bool final;                  /* the rule may return here */
};

struct gmask_cache; /* mask.c: per-vocabulary walks, by state */

struct grammar {
	atomic_int refs;
	struct gstate *states; /* (n_states) */
	struct gedge *edges;
	struct gcall *calls;
	size_t n_states, n_edges, n_calls;
	int32_t start;        /* the root rule's first state */
	pthread_mutex_t lock; /* guards caches */
	struct gmask_cache *caches;
};

void gmask_caches_free(struct gmask_cache *c, size_t n_states);

/* ---- matcher items (matcher.c) ----
 * A parser state is a set of items: a DFA state and a return stack.  Stacks
 * are persistent: a node is (return state, parent node), -1 is the empty
 * stack, so pushing never copies and items share their tails. */
#define GM_MAX_DEPTH 2048 /* nested calls; deeper paths are dropped */

struct gnode {
	int32_t ret, parent, depth;
};

struct gnodes {
	struct gnode *v;
	size_t n, cap;
};

struct gitem {
	int32_t state, stack;
};

struct gitems {
	struct gitem *v;
	size_t n, cap;
};

/* The state that `byte` leads to from `state`, or -1. */
static inline int32_t gm_edge_target(const struct grammar *g, int32_t state, unsigned byte)
{
	const struct gstate *st = &g->states[state];
	const struct gedge *e = g->edges + st->edge_off;
	for (unsigned k = 0; k < st->n_edges; k++) {
		if (byte < e[k].lo)
			return -1;
		if (byte <= e[k].hi)
			return e[k].to;
	}
	return -1;
}

#define GM_BOTTOM 1u /* a path returned from the bottom of the stack */

int gitems_reserve(struct gitems *v, size_t extra);
void gitems_deinit(struct gitems *v);
void gnodes_deinit(struct gnodes *v);

/* Advances the items in[0..n_in) by `byte` (or, byte < 0, by nothing: just
 * the closure) and appends the resulting items that wait for a byte to out
 * (calls pushed, finished rules popped, duplicates dropped).  *flags gets
 * GM_BOTTOM when some path popped the empty stack: the whole grammar may end
 * there, or, in a walk that started at a rule's own state, the text left
 * that rule.  New stack nodes are appended to nodes.  `work` is scratch.
 * Returns the number appended, or -ENOMEM. */
int gm_advance(const struct grammar *g, struct gnodes *nodes, const struct gitem *in, size_t n_in,
               int byte, struct gitems *out, struct gitems *work, unsigned *flags);

/* ---- the vocabulary trie (mask.c) ---- */
struct vtnode {
	int32_t child;   /* first child; children are contiguous, sorted by byte */
	int32_t tok_off; /* into vocab_trie.toks: the tokens whose piece ends here */
	uint16_t n_child;
	uint16_t n_tok;
	uint8_t byte; /* the byte that leads here from the parent */
};

struct vocab_trie {
	int n_vocab;
	struct vtnode *nodes; /* (n_nodes), 0 is the root */
	size_t n_nodes;
	int32_t *toks;       /* (n_toks) */
	size_t n_toks;
	char *piece_bytes;   /* every piece, back to back */
	uint32_t *piece_off; /* (n_vocab + 1): token i is piece_bytes[off[i]..off[i+1]) */
	bool *is_eog;        /* (n_vocab) */
	int32_t *eog;        /* (n_eog) */
	size_t n_eog;
	uint64_t hash; /* of every piece and EOG flag: the key of the mask caches */
};

/* ---- the matcher (matcher.c; mask.c computes its masks) ---- */
#define GM_MEMO 4 /* recent masks kept by exact state */

struct gmemo {
	struct gitem *items; /* the state the mask is for */
	size_t n, cap;
	bool can_end, valid;
	uint32_t *mask; /* (n_words) */
};

struct grammar_matcher {
	struct grammar *g; /* a reference */
	const struct vocab_trie *t;
	struct gnodes nodes;            /* stack nodes of cur (and garbage) */
	struct gnodes lnodes;           /* the stack nodes of a walk within one rule */
	struct gitems cur, next, spare; /* cur: the state; the others: scratch */
	struct gitems work, walk;       /* gm_advance's and the mask walk's scratch */
	bool can_end, ended;            /* ended: an EOG token was accepted */
	size_t live_nodes;              /* nodes still in use at the last compaction */
	uint32_t *mask;                 /* (n_words) grammar_matcher_apply's */
	struct gmemo memo[GM_MEMO];
	unsigned memo_next;
};

void gm_memo_clear(struct grammar_matcher *m);
