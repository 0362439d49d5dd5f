/* Unicode Normalization Form C, for the vocabularies whose Hugging Face
 * tokenizer normalizes its input to NFC before splitting it (Qwen2 and
 * Qwen3: their tokenizer.json's "normalizer"): canonical decomposition,
 * canonical ordering, canonical composition, Hangul included.  The tables
 * are in nfc_table.c, which gen_nfc_table.py writes from Python's Unicode
 * data (the version of unicode_table.c). */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct nfc_decomp {
	uint32_t cp, a, b; /* cp -> a b (b == 0: a singleton) */
};
struct nfc_ccc {
	uint32_t cp;
	uint8_t ccc; /* canonical combining class, non-zero */
};
struct nfc_comp {
	uint32_t a, b, c; /* a b -> c */
};

extern const struct nfc_decomp nfc_decomps[];
extern const size_t nfc_n_decomps;
extern const struct nfc_ccc nfc_cccs[];
extern const size_t nfc_n_cccs;
extern const struct nfc_comp nfc_comps[];
extern const size_t nfc_n_comps;

/* The NFC form of text[0..len): *out (malloc'ed) and *out_len, or *out =
 * NULL when the text needs no change because no code point in it is U+0300
 * or above (text below that is NFC as it stands).  Bytes that are not UTF-8
 * pass through unchanged.  0 or -ENOMEM. */
int unicode_nfc(const char *text, size_t len, char **out, size_t *out_len);
