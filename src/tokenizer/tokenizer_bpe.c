/* Byte-level BPE (GPT-2 style): the pre-tokenizer splits the text into
 * words, each word's bytes are mapped to printable code points
 * (bytes_to_unicode), and the adjacent pair whose "left right" merge has the
 * lowest rank is merged first (leftmost on ties), as llama.cpp's
 * llm_tokenizer_bpe does.  Special-token splitting happens in tokenizer.c.
 * Vocabularies whose original normalizes to NFC (Qwen2) get each fragment
 * normalized first, as Hugging Face does and llama.cpp does not. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/normalize.h"
#include "tokenizer/tokenizer_internal.h"
#include "util/utf8.h"

static bool byte_is_printable(int b)
{
	return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

void bpe_init_byte_map(struct tokenizer *tok)
{
	uint16_t next = 256;
	for (int b = 0; b < 256; b++)
		tok->byte_to_cp[b] = byte_is_printable(b) ? (uint16_t)b : next++;
}

int bpe_cp_to_byte(uint32_t cp)
{
	if (cp < 256)
		return byte_is_printable((int)cp) ? (int)cp : -1;
	if (cp >= 256 + 68)
		return -1;
	uint32_t k = 256;
	for (int b = 0; b < 256; b++) {
		if (byte_is_printable(b))
			continue;
		if (k++ == cp)
			return b;
	}
	return -1;
}

struct bpe_state {
	const struct tokenizer *tok;
	char *word; /* byte-mapped word, UTF-8 */
	size_t cap_word;
	char *key; /* "left right" scratch */
	struct symbol *sym;
	size_t cap_sym;
	struct bigram_heap heap;
};

static int try_add_bigram(void *ctx, int32_t left, int32_t right)
{
	struct bpe_state *st = ctx;
	if (left < 0 || right < 0)
		return 0;
	const struct symbol *l = &st->sym[left], *r = &st->sym[right];
	memcpy(st->key, st->word + l->start, l->n);
	st->key[l->n] = ' ';
	memcpy(st->key + l->n + 1, st->word + r->start, r->n);
	int32_t rank = strmap_find(&st->tok->merges, st->key, l->n + 1 + r->n);
	if (rank < 0)
		return 0;
	struct bigram bg = {left, right, -(float)rank, l->n + r->n};
	return heap_push(&st->heap, bg);
}

static int emit_symbol(const struct bpe_state *st, const struct symbol *s, struct idvec *out)
{
	const struct tokenizer *tok = st->tok;
	int32_t id = strmap_find(&tok->vocab, st->word + s->start, s->n);
	if (id >= 0)
		return idvec_push(out, id);
	/* As llama.cpp: try each byte of the mapped text on its own. */
	for (uint32_t j = 0; j < s->n; j++) {
		int32_t bid = strmap_find(&tok->vocab, st->word + s->start + j, 1);
		if (bid >= 0 && idvec_push(out, bid) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int merge_word(struct bpe_state *st, size_t n, struct idvec *out)
{
	size_t k;
	st->heap.n = 0;
	if (symbols_split(st->word, n, st->sym, &k, try_add_bigram, st) < 0 ||
	    symbols_merge(st->sym, &st->heap, try_add_bigram, st) < 0)
		return -ENOMEM;
	for (int32_t i = 0; i != -1; i = st->sym[i].next)
		if (emit_symbol(st, &st->sym[i], out) < 0)
			return -ENOMEM;
	return 0;
}

/* Maps bytes [a, b) of text into st->word; returns its length or -ENOMEM. */
static long map_word(struct bpe_state *st, const char *text, size_t a, size_t b)
{
	size_t need = 2 * (b - a) + 1; /* mapped code points are < U+0800 */
	if (need > st->cap_word) {
		char *w = realloc(st->word, need);
		char *k = realloc(st->key, need + 1);
		struct symbol *s = realloc(st->sym, need * sizeof(*s));
		if (w)
			st->word = w;
		if (k)
			st->key = k;
		if (s)
			st->sym = s;
		if (!w || !k || !s)
			return -ENOMEM;
		st->cap_word = need;
	}
	size_t n = 0;
	for (size_t i = a; i < b; i++)
		n += utf8_encode(st->tok->byte_to_cp[(unsigned char)text[i]], st->word + n);
	return (long)n;
}

static int bpe_encode_text(const struct tokenizer *tok, const char *text, size_t len,
                           struct idvec *out)
{
	struct pretok_buf pb = {0};
	struct bpe_state st = {.tok = tok};
	int rc = pretok_split(tok->pre, text, len, &pb);
	size_t start = 0;
	for (size_t k = 0; rc == 0 && k < pb.n_ends; k++) {
		size_t end = pb.byte_off[pb.ends[k]];
		long n = map_word(&st, text, start, end);
		start = end;
		if (n < 0) {
			rc = -ENOMEM;
			break;
		}
		int32_t id = tok->ignore_merges ? strmap_find(&tok->vocab, st.word, (size_t)n) : -1;
		if (id >= 0)
			rc = idvec_push(out, id);
		else if (n > 0)
			rc = merge_word(&st, (size_t)n, out);
	}
	pretok_buf_free(&pb);
	free(st.word);
	free(st.key);
	free(st.sym);
	free(st.heap.b);
	return rc;
}

int bpe_encode(const struct tokenizer *tok, const char *text, size_t len, struct idvec *out)
{
	char *norm = NULL;
	size_t norm_len = 0;
	if (tok->nfc && unicode_nfc(text, len, &norm, &norm_len) < 0)
		return -ENOMEM;
	int rc =
	    norm ? bpe_encode_text(tok, norm, norm_len, out) : bpe_encode_text(tok, text, len, out);
	free(norm);
	return rc;
}
