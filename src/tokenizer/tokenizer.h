/* Tokenizers read from GGUF metadata: SentencePiece-style (`llama`) and
 * GPT-2-style byte-level BPE (`gpt2`, pre-tokenizer from tokenizer.ggml.pre).
 * Also a streaming detokenizer that only ever emits whole UTF-8 characters. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"

struct tokenizer;

int tokenizer_new_from_gguf(const struct gguf_file *f, struct tokenizer **out, char *err,
			    size_t err_len);
void tokenizer_free(struct tokenizer *tok);

int tokenizer_n_vocab(const struct tokenizer *tok);
int32_t tokenizer_bos(const struct tokenizer *tok); /* -1 when none */
int32_t tokenizer_eos(const struct tokenizer *tok); /* -1 when none */
bool tokenizer_add_bos(const struct tokenizer *tok);
/* End-of-generation: eos, eot and similar control tokens. */
bool tokenizer_is_eog(const struct tokenizer *tok, int32_t id);
/* tokenizer.chat_template or NULL. */
const char *tokenizer_chat_template(const struct tokenizer *tok);
/* Finds a token whose text is exactly `text` (e.g. "<|im_end|>"), or -1. */
int32_t tokenizer_find_token(const struct tokenizer *tok, const char *text);

/* Encodes UTF-8 text.  add_special: prepend BOS when the model wants it
 * (tokenizer_add_bos); parse_special: recognise control-token texts such as
 * "<|im_start|>" inside the input.  *ids is malloc'ed; caller frees. */
int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len, bool add_special,
		     bool parse_special, int32_t **ids, size_t *n_ids, char *err, size_t err_len);

/* Decodes a whole sequence into a malloc'ed NUL-terminated string (control
 * tokens are skipped, but those tokenizer_is_control calls text; byte-fallback tokens become their bytes).  With a
 * SentencePiece space prefix the first space of the first text is dropped,
 * so decode(encode(s)) == s; invalid UTF-8 comes out as U+FFFD. */
int tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n_ids, char **text,
		     size_t *len, char *err, size_t err_len);

/* Streaming detokenizer: holds back an incomplete UTF-8 sequence until the
 * token that completes it arrives.  Embedded by value; init/deinit. */
struct detok_stream {
	const struct tokenizer *tok;
	unsigned char pending[8];
	size_t n_pending;
	bool at_start; /* SentencePiece: strip the leading space of the first piece */
};

void detok_stream_init(struct detok_stream *ds, const struct tokenizer *tok, bool strip_leading_space);
/* Appends the text of `id` to out (at most out_cap-1 bytes + NUL, out_cap >= 64)
 * and returns the number of bytes written: only complete characters. */
size_t detok_stream_push(struct detok_stream *ds, int32_t id, char *out, size_t out_cap);
/* Emits what is still pending (invalid bytes become U+FFFD). */
size_t detok_stream_flush(struct detok_stream *ds, char *out, size_t out_cap);

/* ---- Additions (tokenizer module) ----
 * A tokenizer is immutable once built: any number of threads may encode and
 * decode with it at once (each call allocates its own scratch). */

/* The bytes token `id` stands for (control tokens: none), truncated to
 * cap-1 bytes + NUL; returns the full length, like snprintf.  A piece may
 * end inside a UTF-8 character (byte tokens): use detok_stream to print. */
size_t tokenizer_token_piece(const struct tokenizer *tok, int32_t id, char *buf, size_t cap);
/* The longest piece any token can produce, in bytes. */
size_t tokenizer_max_piece_len(const struct tokenizer *tok);
/* The token's vocabulary text (e.g. "<|im_end|>", "\xe2\x96\x81the"), or NULL. */
const char *tokenizer_token_text(const struct tokenizer *tok, int32_t id);
/* A control token that prints nothing (not the output-syntax control
 * tokens the detokenizer prints: gpt-oss's <|channel|>, <|message|>,
 * <|start|>, <|constrain|>; DeepSeek's tool-call markers; Command-R's
 * action and thinking markers; Magistral's [THINK] and [/THINK]; Mistral's
 * [TOOL_CALLS], [ARGS], [CALL_ID]). */
bool tokenizer_is_control(const struct tokenizer *tok, int32_t id);
/* Byte-level BPE: the pre-tokenizer in use ("gpt-2", "llama-bpe", ...,
 * "default" for a missing or unknown name); NULL for SentencePiece. */
const char *tokenizer_pre_name(const struct tokenizer *tok);
/* False when the file names no pre-tokenizer or one we do not implement and
 * "default" stands in (ids may then differ from the original tokenizer's):
 * worth a warning in the log. */
bool tokenizer_pre_is_exact(const struct tokenizer *tok);
