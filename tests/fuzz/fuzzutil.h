/* Helpers the libFuzzer targets share: inputs as files without touching the
 * disk (memfd), the shared data folder, and tokenizers loaded once per
 * process.  A helper that cannot do its job aborts: that is a harness bug,
 * and libFuzzer reports it with the input. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;
struct gguf_file;

/* A memfd holding data[0..n), named by a path ("/proc/self/fd/N") that
 * open(), fopen() and mmap() accept.  fuzz_file_close() closes it. */
struct fuzz_file {
	int fd;
	char path[64];
};
void fuzz_file_open(struct fuzz_file *f, const void *data, size_t n);
void fuzz_file_close(struct fuzz_file *f);

/* "$SINKD_SHARED/rel", or the shared folder next to the source tree that
 * the build recorded (SINKD_FUZZ_SHARED); a static buffer. */
const char *fuzz_shared_path(const char *rel);

/* The vocabularies the tokenizer targets use, loaded on first call:
 * SentencePiece (stories260K, llama-spm) and byte-level BPE with several
 * pre-tokenizers.  fuzz_vocab(i) for i < fuzz_n_vocabs(). */
size_t fuzz_n_vocabs(void);
const struct tokenizer *fuzz_vocab(size_t i);
/* Whether vocabulary i is SentencePiece (strips the first space on decode). */
int fuzz_vocab_is_spm(size_t i);
/* Whether every byte of text has a token in vocabulary i (a byte-level
 * vocabulary may lack some, and then drops them, as llama.cpp does). */
bool fuzz_vocab_has_bytes(size_t i, const char *text, size_t len);

/* The input split at NUL bytes into at most max strings: pieces[0..*n)
 * point into the returned copy (free it); what follows the max-th piece is
 * ignored. */
char *fuzz_split(const uint8_t *data, size_t size, char **pieces, size_t max, size_t *n);

/* Valid UTF-8 (strict: no overlongs, surrogates or code points past
 * U+10FFFF)? */
int fuzz_utf8_valid(const char *s, size_t n);
