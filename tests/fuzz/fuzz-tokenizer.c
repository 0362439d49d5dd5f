/* Fuzz target: the tokenizers (SentencePiece and byte-level BPE with each
 * pre-tokenizer of the shared vocabularies) over arbitrary bytes.  The
 * first byte picks the vocabulary (its value mod the number of them) and
 * the flags (bit 6: add_special, bit 7: parse_special); the rest is the
 * text.  Checks: every id is in the vocabulary; decoding gives valid UTF-8;
 * and for valid UTF-8 text without special-token parsing, decoding gives
 * the text back (SentencePiece: unless it holds U+2581, the space symbol;
 * byte-level BPE: unless it holds a byte the vocabulary has no token for). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzzutil.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_vocab(0); /* load them all before the first input */
	return 0;
}

static int round_trips(size_t vocab, const char *text, size_t len, int parse_special)
{
	if (parse_special || !fuzz_utf8_valid(text, len) || !fuzz_vocab_has_bytes(vocab, text, len))
		return 0;
	if (fuzz_vocab_is_spm(vocab) && memmem(text, len, "\xe2\x96\x81", 3) != NULL)
		return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t vocab = (data[0] & 0x3F) % fuzz_n_vocabs();
	int add_special = (data[0] >> 6) & 1, parse_special = (data[0] >> 7) & 1;
	const struct tokenizer *tok = fuzz_vocab(vocab);
	size_t len = size - 1;
	char *text = malloc(len ? len : 1); /* exactly len: ASan sees reads past it */
	if (!text)
		return 0;
	memcpy(text, data + 1, len);
	char err[SINKD_ERR_LEN];
	int32_t *ids = NULL;
	size_t n_ids = 0;
	if (tokenizer_encode(tok, text, len, add_special, parse_special, &ids, &n_ids, err,
	                     sizeof(err)) != 0) {
		fprintf(stderr, "encode failed: %s\n", err);
		abort();
	}
	for (size_t i = 0; i < n_ids; i++)
		if (ids[i] < 0 || ids[i] >= tokenizer_n_vocab(tok))
			abort();
	char *out = NULL;
	size_t out_len = 0;
	if (tokenizer_decode(tok, ids, n_ids, &out, &out_len, err, sizeof(err)) != 0)
		abort();
	if (strlen(out) > out_len || !fuzz_utf8_valid(out, out_len))
		abort();
	if (round_trips(vocab, text, len, parse_special) &&
	    (out_len != len || memcmp(out, text, len) != 0)) {
		fprintf(stderr,
		        "vocabulary %zu: decode(encode(text)) differs: %zu bytes in, %zu out\n",
		        vocab, len, out_len);
		abort();
	}
	free(out);
	free(ids);
	free(text);
	return 0;
}
