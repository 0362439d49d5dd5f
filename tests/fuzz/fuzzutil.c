/* Shared parts of the fuzz targets: see fuzzutil.h.  The vocabularies are
 * loaded once per process and never freed (libFuzzer's leak check only
 * looks at memory allocated while one input runs). */
#include "fuzzutil.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

#ifndef SINKD_FUZZ_SHARED
#define SINKD_FUZZ_SHARED "../shared"
#endif

void fuzz_file_open(struct fuzz_file *f, const void *data, size_t n)
{
	f->fd = memfd_create("sinkd-fuzz", MFD_CLOEXEC);
	if (f->fd < 0) {
		perror("memfd_create");
		abort();
	}
	const char *p = data;
	for (size_t done = 0; done < n;) {
		ssize_t w = write(f->fd, p + done, n - done);
		if (w <= 0) {
			perror("write");
			abort();
		}
		done += (size_t)w;
	}
	snprintf(f->path, sizeof(f->path), "/proc/self/fd/%d", f->fd);
}

void fuzz_file_close(struct fuzz_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
}

const char *fuzz_shared_path(const char *rel)
{
	static char path[4096];
	const char *dir = getenv("SINKD_SHARED");
	snprintf(path, sizeof(path), "%s/%s", dir && dir[0] ? dir : SINKD_FUZZ_SHARED, rel);
	return path;
}

/* Files under the shared folder; each brings its own pre-tokenizer. */
static const char *const vocab_files[] = {
    "models/stories260K.gguf",            /* SentencePiece, byte fallback */
    "vocab/ggml-vocab-llama-spm.gguf",    /* SentencePiece, 32k */
    "vocab/ggml-vocab-gpt-2.gguf",        /* BPE gpt-2 */
    "vocab/ggml-vocab-deepseek-llm.gguf", /* BPE, llama-3 style regexes */
    "vocab/ggml-vocab-deepseek-coder.gguf",
    "vocab/ggml-vocab-falcon.gguf",
    "vocab/ggml-vocab-starcoder.gguf",
    "vocab/ggml-vocab-refact.gguf",
    "vocab/ggml-vocab-mpt.gguf",
    "vocab/ggml-vocab-gpt-neox.gguf", /* no pre name: "default" */
};
#define N_VOCAB_FILES (sizeof(vocab_files) / sizeof(vocab_files[0]))

static struct tokenizer *vocabs[N_VOCAB_FILES];
static bool byte_ok[N_VOCAB_FILES][256];
static int vocabs_loaded;

/* Whether the text of byte b alone comes out of its tokens' pieces: not
 * so where a byte-level vocabulary lacks that byte's token (falcon has none
 * for some control bytes), which drops the byte as llama.cpp does. */
static bool byte_survives(const struct tokenizer *tok, unsigned char b)
{
	char err[SINKD_ERR_LEN], piece[256];
	int32_t *ids = NULL;
	size_t n = 0;
	bool found = false;
	if (tokenizer_encode(tok, (const char *)&b, 1, false, false, &ids, &n, err, sizeof(err)))
		abort();
	for (size_t i = 0; i < n && !found; i++) {
		size_t len = tokenizer_token_piece(tok, ids[i], piece, sizeof(piece));
		found = len < sizeof(piece) && memchr(piece, b, len) != NULL;
	}
	free(ids);
	return found;
}

static void load_vocabs(void)
{
	if (vocabs_loaded)
		return;
	for (size_t i = 0; i < N_VOCAB_FILES; i++) {
		char err[SINKD_ERR_LEN];
		struct gguf_file *f = NULL;
		const char *path = fuzz_shared_path(vocab_files[i]);
		if (gguf_open(path, &f, err, sizeof(err)) != 0 ||
		    tokenizer_new_from_gguf(f, &vocabs[i], err, sizeof(err)) != 0) {
			fprintf(stderr, "fuzz: cannot load %s: %s (set SINKD_SHARED)\n", path, err);
			abort();
		}
		gguf_close(f); /* the tokenizer keeps its own copies */
		for (int b = 0; b < 256; b++)
			byte_ok[i][b] = byte_survives(vocabs[i], (unsigned char)b);
	}
	vocabs_loaded = 1;
}

size_t fuzz_n_vocabs(void)
{
	return N_VOCAB_FILES;
}

const struct tokenizer *fuzz_vocab(size_t i)
{
	load_vocabs();
	return vocabs[i % N_VOCAB_FILES];
}

bool fuzz_vocab_has_bytes(size_t i, const char *text, size_t len)
{
	load_vocabs();
	for (size_t k = 0; k < len; k++)
		if (!byte_ok[i % N_VOCAB_FILES][(unsigned char)text[k]])
			return false;
	return true;
}

int fuzz_vocab_is_spm(size_t i)
{
	return tokenizer_pre_name(fuzz_vocab(i)) == NULL;
}

char *fuzz_split(const uint8_t *data, size_t size, char **pieces, size_t max, size_t *n)
{
	char *copy = malloc(size + 1);
	if (copy == NULL)
		abort();
	memcpy(copy, data, size);
	copy[size] = '\0';
	*n = 0;
	char *p = copy, *end = copy + size;
	while (*n < max) {
		pieces[(*n)++] = p;
		char *nul = memchr(p, '\0', (size_t)(end - p));
		if (nul == NULL)
			break;
		p = nul + 1;
	}
	return copy;
}

int fuzz_utf8_valid(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		unsigned char c = u[i];
		size_t need = c < 0x80                 ? 1
		              : c >= 0xC2 && c <= 0xDF ? 2
		              : c >= 0xE0 && c <= 0xEF ? 3
		              : c >= 0xF0 && c <= 0xF4 ? 4
		                                       : 0;
		if (need == 0 || i + need > n)
			return 0;
		for (size_t k = 1; k < need; k++)
			if ((u[i + k] & 0xC0) != 0x80)
				return 0;
		if ((c == 0xE0 && u[i + 1] < 0xA0) || (c == 0xED && u[i + 1] > 0x9F) ||
		    (c == 0xF0 && u[i + 1] < 0x90) || (c == 0xF4 && u[i + 1] > 0x8F))
			return 0;
		i += need;
	}
	return 1;
}
