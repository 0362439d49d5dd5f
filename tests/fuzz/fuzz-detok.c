/* Fuzz target: the streaming detokenizer.  The first byte picks the
 * vocabulary (mod the number of them) and, in bit 7, a small output buffer
 * (64 bytes, the least the API allows); every further 3 bytes are one token
 * id (24 bits, mod n_vocab + 16, minus 8: ids below 0 and past the vocabulary
 * too).  Checks: every chunk is valid UTF-8 and fits its buffer; with a
 * buffer large enough for any piece, the chunks and the flush together are
 * exactly tokenizer_decode of the whole sequence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzzutil.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_vocab(0);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t vocab = (data[0] & 0x7F) % fuzz_n_vocabs();
	int small = data[0] >> 7;
	const struct tokenizer *tok = fuzz_vocab(vocab);
	int64_t n_vocab = tokenizer_n_vocab(tok);
	size_t n_ids = (size - 1) / 3;
	int32_t *ids = malloc((n_ids ? n_ids : 1) * sizeof(int32_t));
	if (!ids)
		return 0;
	for (size_t i = 0; i < n_ids; i++) {
		const uint8_t *p = data + 1 + 3 * i;
		int64_t raw = p[0] | (p[1] << 8) | (p[2] << 16);
		ids[i] = (int32_t)(raw % (n_vocab + 16) - 8);
	}
	/* Exactly cap bytes, so ASan sees a write past the buffer. */
	size_t cap = small ? 64 : tokenizer_max_piece_len(tok) + 64;
	char *chunk = malloc(cap);
	size_t all_cap = n_ids * (cap + 4) + cap + 1, all_len = 0;
	char *all = malloc(all_cap);
	if (!chunk || !all)
		abort();
	struct detok_stream ds;
	/* Strip the first space where decoding does: SentencePiece vocabularies. */
	detok_stream_init(&ds, tok, fuzz_vocab_is_spm(vocab));
	for (size_t i = 0; i <= n_ids; i++) {
		size_t w = i < n_ids ? detok_stream_push(&ds, ids[i], chunk, cap)
		                     : detok_stream_flush(&ds, chunk, cap);
		if (w >= cap || chunk[w] != '\0' || !fuzz_utf8_valid(chunk, w))
			abort();
		memcpy(all + all_len, chunk, w);
		all_len += w;
	}
	char err[SINKD_ERR_LEN];
	char *text = NULL;
	size_t len = 0;
	if (tokenizer_decode(tok, ids, n_ids, &text, &len, err, sizeof(err)) != 0)
		abort();
	if (!small && (len != all_len || memcmp(text, all, len) != 0)) {
		fprintf(stderr, "vocabulary %zu: streamed %zu bytes, decoded %zu\n", vocab, all_len,
		        len);
		abort();
	}
	free(text);
	free(all);
	free(chunk);
	free(ids);
	return 0;
}
