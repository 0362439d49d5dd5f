/* Fuzz target: the GGUF reader (model/gguf.h) on the input as a file, and
 * on what it accepts the two readers built on it: the tokenizer from GGUF
 * metadata and the Llama model loader.  Checks beyond the sanitizers: a
 * refusal names the file; every pointer an accessor returns lies inside
 * the mapping (reads past the file's end inside the last page are not
 * caught by ASan, so they are checked here); every tensor's byte size
 * matches its type and shape; a tokenizer that loads encodes and decodes. */
#include <stdlib.h>
#include <string.h>

#include "fuzzutil.h"
#include "model/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

static volatile unsigned sink;

static void check_inside(const struct gguf_file *f, const void *p, size_t n)
{
	const char *lo = gguf_map(f), *b = p;
	size_t size = gguf_file_size(f);
	if (b < lo || b > lo + size || n > (size_t)(lo + size - b))
		abort();
	if (n > 0)
		sink += (unsigned char)b[0] + (unsigned char)b[n - 1];
}

static void check_kv(const struct gguf_file *f, size_t i)
{
	const char *key = gguf_kv_key(f, i);
	enum gguf_value_type type;
	const void *raw;
	size_t raw_len;
	if (key == NULL || gguf_kv_raw(f, i, &type, &raw, &raw_len) != 0)
		abort();
	check_inside(f, raw, raw_len);
	if (!gguf_has_key(f, key))
		abort();
	int64_t iv;
	double dv;
	bool bv;
	const char *s;
	size_t len;
	if (gguf_get_int(f, key, &iv) == 0 || gguf_get_float(f, key, &dv) == 0 ||
	    gguf_get_bool(f, key, &bv) == 0)
		sink++;
	if (gguf_get_string(f, key, &s, &len) == 0)
		check_inside(f, s, len);
	enum gguf_value_type et;
	uint64_t count;
	if (gguf_get_array_info(f, key, &et, &count) != 0)
		return;
	/* The first and last few elements: enough to reach both ends. */
	for (uint64_t k = 0; k < count; k++) {
		if (k == 3 && count > 6)
			k = count - 3;
		if (et == GGUF_VALUE_STRING) {
			if (gguf_get_array_string(f, key, k, &s, &len) != 0)
				abort();
			check_inside(f, s, len);
		} else if (gguf_get_array_int(f, key, k, &iv) != 0 &&
		           gguf_get_array_float(f, key, k, &dv) != 0 && et != GGUF_VALUE_BOOL &&
		           et != GGUF_VALUE_ARRAY) {
			abort(); /* a numeric element that no getter reads */
		}
	}
	const void *data = gguf_get_array_data(f, key);
	if (data != NULL)
		check_inside(f, data, 0);
}

static void check_tensor(const struct gguf_file *f, const struct gguf_tensor *t)
{
	if (t == NULL || t->name == NULL || t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
		abort();
	uint64_t n = 1;
	for (uint32_t d = 0; d < t->n_dims; d++)
		n *= t->dims[d];
	size_t row = ggml_row_bytes(t->type, t->dims[0]);
	if (n != t->n_elements || (t->dims[0] > 0 && row * (n / t->dims[0]) != t->n_bytes))
		abort();
	check_inside(f, t->data, t->n_bytes);
	if (gguf_find_tensor(f, t->name) == NULL)
		abort();
}

static void check_tokenizer(const struct gguf_file *f)
{
	char err[SINKD_ERR_LEN];
	struct tokenizer *tok = NULL;
	if (tokenizer_new_from_gguf(f, &tok, err, sizeof(err)) != 0) {
		if (tok != NULL)
			abort();
		return;
	}
	static const char text[] = "Hello <|im_start|> w\xc3\xb6rld \xff 123\n\tthe end";
	int32_t *ids = NULL;
	size_t n_ids = 0;
	if (tokenizer_encode(tok, text, sizeof(text) - 1, true, true, &ids, &n_ids, err,
	                     sizeof(err)) == 0) {
		for (size_t i = 0; i < n_ids; i++)
			if (ids[i] < 0 || ids[i] >= tokenizer_n_vocab(tok))
				abort();
		char *out = NULL;
		size_t len = 0;
		if (tokenizer_decode(tok, ids, n_ids, &out, &len, err, sizeof(err)) == 0 &&
		    !fuzz_utf8_valid(out, len))
			abort();
		free(out);
	}
	free(ids);
	/* Every token's piece, through the streaming detokenizer. */
	struct detok_stream ds;
	char buf[4096 + 64];
	detok_stream_init(&ds, tok, true);
	int n_vocab = tokenizer_n_vocab(tok);
	for (int32_t id = -1; id <= n_vocab && id < 4096; id++) {
		size_t w = detok_stream_push(&ds, id, buf, sizeof(buf));
		if (!fuzz_utf8_valid(buf, w))
			abort();
	}
	detok_stream_flush(&ds, buf, sizeof(buf));
	tokenizer_free(tok);
}

static void check_model(const char *path)
{
	char err[SINKD_ERR_LEN] = "";
	struct model *m = NULL;
	if (model_load(path, NULL, &m, err, sizeof(err)) != 0) {
		if (m != NULL || strstr(err, path) == NULL)
			abort();
		return;
	}
	const struct model_hparams *hp = &m->hp;
	if (hp->n_vocab <= 0 || hp->dim <= 0 || hp->head_dim * hp->n_heads != hp->dim)
		abort();
	model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_file ff;
	fuzz_file_open(&ff, data, size);
	char err[SINKD_ERR_LEN] = "";
	struct gguf_file *f = NULL;
	int rc = gguf_open(ff.path, &f, err, sizeof(err));
	if (rc != 0) {
		if (rc > 0 || f != NULL || strstr(err, ff.path) == NULL)
			abort();
		fuzz_file_close(&ff);
		return 0;
	}
	for (size_t i = 0; i < gguf_n_kv(f); i++)
		check_kv(f, i);
	for (size_t i = 0; i < gguf_n_tensors(f); i++)
		check_tensor(f, gguf_tensor_at(f, i));
	check_tokenizer(f);
	gguf_close(f);
	check_model(ff.path);
	fuzz_file_close(&ff);
	return 0;
}
