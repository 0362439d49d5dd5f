/* Pre-tokenizers of byte-level BPE vocabularies: the ordered list of regular
 * expressions named by tokenizer.ggml.pre, applied one after another; each
 * splits every piece further into its matches and the text between them. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/regex.h"

struct pretok;

/* Reusable buffers of one split call; zero-initialise, pretok_buf_free. */
struct pretok_buf {
	uint32_t *cp;       /* (n_cp) code points of the text */
	uint8_t *cls;       /* (n_cp) category | 0x80 for whitespace */
	uint32_t *byte_off; /* (n_cp + 1) byte offset of each code point */
	size_t cap_cp;
	uint32_t *ends, *ends_next; /* piece ends, in code points */
	size_t n_ends, cap_ends, cap_ends_next;
	struct ure_scratch scratch;
};

struct pretok_flags {
	bool known;         /* false: missing or unknown name, "default" used */
	bool ignore_merges; /* a word that is a whole token is not merged (Llama 3) */
	bool add_bos;       /* BOS by default when the file does not say */
	bool no_bos;        /* the model has no BOS whatever the file says */
	bool nfc;           /* the original normalizes its input to NFC first (Qwen2) */
};

/* Looks up `name` (NULL or unknown: "default"). */
int pretok_new(const char *name, struct pretok **out, struct pretok_flags *flags, char *err,
               size_t err_len);
void pretok_free(struct pretok *p);
/* The canonical pre-tokenizer name that `name` resolved to. */
const char *pretok_name(const struct pretok *p);

/* Splits text into pieces.  On success buf->n_ends pieces; piece k spans
 * bytes [start, end) with end = buf->byte_off[buf->ends[k]] and start the
 * previous end (0 for the first). */
int pretok_split(const struct pretok *p, const char *text, size_t len, struct pretok_buf *buf);
void pretok_buf_free(struct pretok_buf *buf);
