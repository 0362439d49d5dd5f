/* SentencePiece-style BPE as llama.cpp's llm_tokenizer_spm does it: spaces
 * become U+2581 (with one prepended when asked), the text starts as one
 * symbol per UTF-8 character, and the adjacent pair whose concatenation is a
 * vocabulary token with the highest score is merged first (leftmost on ties)
 * until no pair forms a token.  Symbols that are not tokens fall back to
 * <0xNN> byte tokens.  Special-token splitting happens in tokenizer.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

#define SPACE_MARK "\xe2\x96\x81" /* U+2581 */

struct spm_state {
	const struct tokenizer *tok;
	const char *text; /* escaped text */
	struct symbol *sym;
	struct bigram_heap heap;
};

static int try_add_bigram(void *ctx, int32_t left, int32_t right)
{
	struct spm_state *st = ctx;
	if (left < 0 || right < 0)
		return 0;
	const struct symbol *l = &st->sym[left], *r = &st->sym[right];
	int32_t id = strmap_find(&st->tok->vocab, st->text + l->start, l->n + r->n);
	if (id < 0)
		return 0;
	struct bigram bg = {left, right, st->tok->score[id], l->n + r->n};
	return heap_push(&st->heap, bg);
}

/* Emits one final symbol: its token, or its bytes as byte tokens. */
static int emit_symbol(const struct spm_state *st, const struct symbol *s, struct idvec *out)
{
	const struct tokenizer *tok = st->tok;
	int32_t id = strmap_find(&tok->vocab, st->text + s->start, s->n);
	if (id >= 0)
		return idvec_push(out, id);
	for (uint32_t j = 0; j < s->n; j++) {
		unsigned char b = (unsigned char)st->text[s->start + j];
		int32_t bid = tok->byte_token[b];
		if (bid < 0)
			bid = strmap_find(&tok->vocab, (const char *)&b, 1);
		if (bid < 0)
			bid = tok->unk;
		if (bid >= 0 && idvec_push(out, bid) < 0)
			return -ENOMEM;
	}
	return 0;
}

int spm_encode(const struct tokenizer *tok, const char *text, size_t len, bool space_prefix,
               struct idvec *out)
{
	if (len >= UINT32_MAX / 4)
		return -E2BIG;
	char *esc = malloc(3 * len + 3);
	struct spm_state st = {.tok = tok, .text = esc};
	int rc = -ENOMEM;
	size_t n = 0, n_sym = 0;
	if (!esc)
		goto out;
	if (space_prefix) {
		memcpy(esc, SPACE_MARK, 3);
		n = 3;
	}
	for (size_t i = 0; i < len; i++) {
		if (text[i] == ' ') {
			memcpy(esc + n, SPACE_MARK, 3);
			n += 3;
		} else {
			esc[n++] = text[i];
		}
	}
	if (n == 0) {
		rc = 0;
		goto out;
	}
	st.sym = malloc(n * sizeof(*st.sym));
	/* Invalid UTF-8 makes one-byte symbols (llama.cpp would swallow the
	 * next bytes, a following U+2581 included, and lose the space). */
	if (!st.sym || symbols_split(esc, n, st.sym, &n_sym, try_add_bigram, &st) < 0 ||
	    symbols_merge(st.sym, &st.heap, try_add_bigram, &st) < 0)
		goto out;
	for (int32_t i = 0; i != -1; i = st.sym[i].next)
		if (emit_symbol(&st, &st.sym[i], out) < 0)
			goto out;
	rc = 0;
out:
	free(st.heap.b);
	free(st.sym);
	free(esc);
	return rc;
}
