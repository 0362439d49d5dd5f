/* Internals shared by the tokenizer's files: the vocabulary tables, the
 * string hash map, the growable id vector and the bigram heap that both
 * merge algorithms (SentencePiece and byte-level BPE) use. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

enum tok_kind { TOK_KIND_SPM, TOK_KIND_BPE };

/* tokenizer.ggml.token_type values. */
enum tok_type {
	TOK_TYPE_UNDEFINED = 0,
	TOK_TYPE_NORMAL = 1,
	TOK_TYPE_UNKNOWN = 2,
	TOK_TYPE_CONTROL = 3,
	TOK_TYPE_USER_DEFINED = 4,
	TOK_TYPE_UNUSED = 5,
	TOK_TYPE_BYTE = 6,
};

#define TOK_ATTR_LSTRIP 1 /* drop whitespace before the token when matched in text */
#define TOK_ATTR_RSTRIP 2 /* drop whitespace after it */
/* A control token whose text is output syntax a parser reads (gpt-oss's
 * harmony markers, DeepSeek's tool-call markers, Command-R's action and
 * thinking markers, Magistral's [THINK], Mistral's [TOOL_CALLS]): the
 * detokenizer prints it, and it counts as text, not control
 * (tokenizer_is_control), so a grammar may choose it. */
#define TOK_ATTR_PRINTED 4

/* Open-addressing map from the strings of an arena to their index. */
struct strmap {
	int32_t *slot; /* (mask + 1) index or -1 */
	uint32_t mask;
	const char *arena;   /* key i is arena[off[i] .. off[i+1]-1), NUL-separated */
	const uint32_t *off; /* (n + 1) */
};

int strmap_build(struct strmap *m, const char *arena, const uint32_t *off, uint32_t n,
                 bool keep_last);
int32_t strmap_find(const struct strmap *m, const char *s, size_t len);
void strmap_free(struct strmap *m);

struct idvec {
	int32_t *v;
	size_t n, cap;
};

int idvec_push(struct idvec *iv, int32_t id);

/* A candidate merge of two adjacent symbols; higher prio pops first, ties
 * go to the leftmost. */
struct bigram {
	int32_t left, right;
	float prio;
	uint32_t size; /* bytes of the merged text */
};

struct bigram_heap {
	struct bigram *b;
	size_t n, cap;
};

int heap_push(struct bigram_heap *h, struct bigram bg);
struct bigram heap_pop(struct bigram_heap *h); /* h->n > 0 */

/* A symbol of the merge algorithms: a span of the text, in a linked list. */
struct symbol {
	int32_t prev, next;
	uint32_t start, n; /* byte span; n == 0 once merged into its left neighbour */
};

/* Queues the merge of adjacent symbols left and right (either may be -1: no
 * neighbour) when the tokenizer knows the pair; 0 or -ENOMEM. */
typedef int (*bigram_add_fn)(void *ctx, int32_t left, int32_t right);

/* Splits text[0..n) (n > 0) into one symbol per UTF-8 character (invalid
 * bytes make one-byte symbols) in sym (room for n), queues every adjacent
 * pair through add, and sets *n_sym; 0 or -ENOMEM. */
int symbols_split(const char *text, size_t n, struct symbol *sym, size_t *n_sym,
                  bigram_add_fn add, void *ctx);
/* Merges the best queued pair, re-queueing its new neighbours, until the
 * heap is empty; the result is the list from sym[0].  0 or -ENOMEM. */
int symbols_merge(struct symbol *sym, struct bigram_heap *heap, bigram_add_fn add, void *ctx);

struct tokenizer {
	enum tok_kind kind;
	uint32_t n_vocab;
	char *text;    /* all token texts, NUL-separated */
	uint32_t *off; /* (n_vocab + 1) offsets into text */
	float *score;  /* (n_vocab) SentencePiece scores, 0 for BPE */
	uint8_t *type; /* (n_vocab) enum tok_type */
	uint8_t *attr; /* (n_vocab) TOK_ATTR_* */
	struct strmap vocab;

	char *merge_text;    /* BPE merges "a b", NUL-separated */
	uint32_t *merge_off; /* (n_merges + 1) */
	uint32_t n_merges;
	struct strmap merges; /* "a b" -> rank */
	struct pretok *pre;
	bool ignore_merges;
	bool pre_bos, pre_no_bos; /* pretok_flags add_bos / no_bos */
	bool pre_exact;           /* the file's pre-tokenizer name is known */
	bool nfc;                 /* normalize each fragment to NFC first (pretok_flags nfc) */
	uint16_t byte_to_cp[256]; /* GPT-2 bytes_to_unicode */

	int32_t byte_token[256]; /* SentencePiece <0xNN> ids, -1 when absent */
	int32_t bos, eos, unk, eot, eom;
	int32_t eog[16];
	size_t n_eog;
	bool add_bos, add_eos, add_space_prefix;

	int32_t *special; /* control/user/unknown ids, by first byte then longest */
	size_t n_special;
	uint32_t
	    special_first[257]; /* special[special_first[b] .. special_first[b+1]) start with b */

	char *chat_template;
	size_t max_piece; /* bytes: the longest piece tokenizer_piece can write */
};

static inline const char *tok_text(const struct tokenizer *tok, int32_t id, size_t *len)
{
	*len = tok->off[id + 1] - tok->off[id] - 1;
	return tok->text + tok->off[id];
}

/* Appends the ids of one text fragment (no special tokens inside). */
int spm_encode(const struct tokenizer *tok, const char *text, size_t len, bool space_prefix,
               struct idvec *out);
int bpe_encode(const struct tokenizer *tok, const char *text, size_t len, struct idvec *out);
/* GPT-2 byte <-> code point tables. */
void bpe_init_byte_map(struct tokenizer *tok);
/* Reverse of byte_to_cp: the byte, or -1 when cp is not a mapped byte. */
int bpe_cp_to_byte(uint32_t cp);

/* The bytes that `id` stands for (control tokens: none) into buf, which has
 * room for tok->max_piece bytes; returns the length. */
size_t tokenizer_piece(const struct tokenizer *tok, int32_t id, char *buf);
