/* sinkd-mkmodel: writes a synthetic Llama model as GGUF v3 with random
 * weights, for tests and benchmarks of models larger than stories260K.
 * Weights are deterministic in --seed, approximately N(0, 0.02) so
 * activations stay in a sane range, norms are 1; the vocabulary (every
 * tokenizer.* key) is copied from a vocabulary GGUF, or a small byte-level
 * SentencePiece-style vocabulary is made up.  Tensor data is generated one
 * row at a time and streamed to disk, so multi-GB files need little memory.
 * The model it writes produces meaningless text: it is for speed and
 * plumbing, not quality.  With --from it instead converts an existing GGUF
 * model to --type, keeping every metadata key (the tokenizer included) and
 * re-encoding each matrix one row at a time. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/dequant.h"
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "model/quantize.h"
#include "tools/vocab_json.h"
#include "util/errbuf.h"
#include "util/monotime.h"

struct mk_options {
	const char *out;
	const char *vocab;
	const char *from; /* --from: convert this model instead of making one */
	int dim, layers, heads, kv_heads, ffn, vocab_size, context;
	enum ggml_type type;
	int tied;
	uint64_t seed;
};

/* ------------------------------------------------------------------------
 * Tensor types, by their command-line names. */

static const struct {
	const char *name;
	enum ggml_type type;
} type_names[] = {{"f32", GGML_TYPE_F32},   {"f16", GGML_TYPE_F16},   {"bf16", GGML_TYPE_BF16},
                  {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1},
                  {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1}, {"q4_k", GGML_TYPE_Q4_K},
                  {"q5_k", GGML_TYPE_Q5_K}, {"q6_k", GGML_TYPE_Q6_K}};
#define N_TYPE_NAMES (sizeof(type_names) / sizeof(type_names[0]))

static int parse_type(const char *s, enum ggml_type *t)
{
	for (size_t i = 0; i < N_TYPE_NAMES; i++)
		if (strcmp(s, type_names[i].name) == 0) {
			*t = type_names[i].type;
			return 0;
		}
	return -EINVAL;
}

static const char *type_cli_name(enum ggml_type t)
{
	for (size_t i = 0; i < N_TYPE_NAMES; i++)
		if (type_names[i].type == t)
			return type_names[i].name;
	return ggml_type_name(t);
}

/* ------------------------------------------------------------------------
 * Random numbers: splitmix64, and a fast approximately normal variate (sum
 * of four 16-bit uniforms, rescaled to unit variance). */

static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static float rng_normalish(uint64_t *state)
{
	uint64_t r = rng_next(state);
	int64_t sum = (int64_t)(r & 0xffff) + (int64_t)((r >> 16) & 0xffff) +
	              (int64_t)((r >> 32) & 0xffff) + (int64_t)(r >> 48);
	/* mean 2*65535, variance 4 * 65536^2 / 12 */
	return (float)(sum - 131070) * (1.7320508f / 65536.0f);
}

/* ------------------------------------------------------------------------
 * Vocabulary. */

static int copy_vocab(struct gguf_writer *w, const char *path, int *n_vocab, char *err,
                      size_t err_len)
{
	struct gguf_file *v;
	int rc = gguf_open(path, &v, err, err_len);
	if (rc)
		return rc;
	uint64_t count = 0;
	if (gguf_get_array_info(v, "tokenizer.ggml.tokens", NULL, &count) != 0 || count == 0 ||
	    count > (1 << 24)) {
		rc = err_set(err, err_len, -EINVAL, "%s: no usable tokenizer.ggml.tokens array",
		             path);
		goto out;
	}
	*n_vocab = (int)count;
	for (size_t i = 0; rc == 0 && i < gguf_n_kv(v); i++) {
		const char *key = gguf_kv_key(v, i);
		enum gguf_value_type type;
		const void *data;
		size_t len;
		if (strncmp(key, "tokenizer.", 10) != 0)
			continue;
		gguf_kv_raw(v, i, &type, &data, &len);
		rc = gguf_writer_add_raw(w, key, type, data, len);
	}
out:
	gguf_close(v);
	return rc;
}

/* Distinct printable pieces: "\xe2\x96\x81" (the SentencePiece word-start
 * mark) + one char, one char, then the mark + 2..4 chars in base 94. */
static void piece_name(int k, char out[8])
{
	static const char mark[] = "\xe2\x96\x81";
	if (k < 94) {
		snprintf(out, 8, "%s%c", mark, 33 + k);
		return;
	}
	if (k < 188) {
		snprintf(out, 8, "%c", 33 + k - 94);
		return;
	}
	int64_t j = k - 188, range = 94 * 94;
	int len = 2;
	while (j >= range && len < 4) {
		j -= range;
		range *= 94;
		len++;
	}
	memcpy(out, mark, 3);
	for (int d = len - 1; d >= 0; d--, j /= 94)
		out[3 + d] = (char)(33 + j % 94);
	out[3 + len] = '\0';
}

/* <unk>, <s>, </s>, the 256 byte tokens, then printable pieces. */
static int make_byte_vocab(struct gguf_writer *w, int n_vocab)
{
	char(*pieces)[8] = calloc((size_t)n_vocab, sizeof(*pieces));
	const char **ptrs = calloc((size_t)n_vocab, sizeof(*ptrs));
	float *scores = calloc((size_t)n_vocab, sizeof(float));
	int32_t *types = calloc((size_t)n_vocab, sizeof(int32_t));
	int rc = -ENOMEM;
	if (!pieces || !ptrs || !scores || !types)
		goto out;
	for (int i = 0; i < n_vocab; i++) {
		if (i < 3) {
			static const char *const special[] = {"<unk>", "<s>", "</s>"};
			snprintf(pieces[i], sizeof(pieces[i]), "%s", special[i]);
			types[i] = i == 0 ? 2 : 3;
		} else if (i < 259) {
			snprintf(pieces[i], sizeof(pieces[i]), "<0x%02X>", i - 3);
			types[i] = 6;
		} else {
			int k = i - 259;
			piece_name(k, pieces[i]);
			types[i] = 1;
			scores[i] = -(float)k;
		}
		ptrs[i] = pieces[i];
	}
	rc = gguf_writer_add_string(w, "tokenizer.ggml.model", "llama");
	rc = rc ? rc
	        : gguf_writer_add_string_array(w, "tokenizer.ggml.tokens", ptrs, (uint64_t)n_vocab);
	rc = rc ? rc
	        : gguf_writer_add_array(w, "tokenizer.ggml.scores", GGUF_VALUE_FLOAT32,
	                                (uint64_t)n_vocab, scores);
	rc = rc ? rc
	        : gguf_writer_add_array(w, "tokenizer.ggml.token_type", GGUF_VALUE_INT32,
	                                (uint64_t)n_vocab, types);
	rc = rc ? rc : gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
	rc = rc ? rc : gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
	rc = rc ? rc : gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
out:
	free(pieces);
	free(ptrs);
	free(scores);
	free(types);
	return rc;
}

/* ------------------------------------------------------------------------
 * Tensors. */

struct mk_tensor {
	char name[64];
	uint64_t cols, rows; /* rows == 0: a norm vector of cols elements */
};

/* The tensor list in file order; returns the count (<= cap). */
static int tensor_list(const struct mk_options *o, struct mk_tensor *t, int cap)
{
	int n = 0;
	uint64_t dim = (uint64_t)o->dim, kv = dim / (uint64_t)o->heads * (uint64_t)o->kv_heads;
	uint64_t ffn = (uint64_t)o->ffn, vocab = (uint64_t)o->vocab_size;
#define ADD(c, r, ...)                                                                             \
	do {                                                                                       \
		if (n < cap) {                                                                     \
			snprintf(t[n].name, sizeof(t[n].name), __VA_ARGS__);                       \
			t[n].cols = (c);                                                           \
			t[n].rows = (r);                                                           \
		}                                                                                  \
		n++;                                                                               \
	} while (0)
	ADD(dim, vocab, "token_embd.weight");
	ADD(dim, 0, "output_norm.weight");
	if (!o->tied)
		ADD(dim, vocab, "output.weight");
	for (int l = 0; l < o->layers; l++) {
		ADD(dim, 0, "blk.%d.attn_norm.weight", l);
		ADD(dim, dim, "blk.%d.attn_q.weight", l);
		ADD(dim, kv, "blk.%d.attn_k.weight", l);
		ADD(dim, kv, "blk.%d.attn_v.weight", l);
		ADD(dim, dim, "blk.%d.attn_output.weight", l);
		ADD(dim, 0, "blk.%d.ffn_norm.weight", l);
		ADD(dim, ffn, "blk.%d.ffn_gate.weight", l);
		ADD(dim, ffn, "blk.%d.ffn_up.weight", l);
		ADD(ffn, dim, "blk.%d.ffn_down.weight", l);
	}
#undef ADD
	return n;
}

static int write_tensor_data(struct gguf_writer *w, const struct mk_options *o,
                             const struct mk_tensor *t, uint64_t *rng, char *err, size_t err_len)
{
	enum ggml_type type = t->rows ? o->type : GGML_TYPE_F32;
	uint64_t rows = t->rows ? t->rows : 1;
	size_t row_bytes = ggml_row_bytes(type, t->cols);
	float *row = malloc(t->cols * sizeof(float));
	void *enc = malloc(row_bytes);
	int rc = 0;
	if (!row || !enc)
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
	for (uint64_t r = 0; rc == 0 && r < rows; r++) {
		for (uint64_t i = 0; i < t->cols; i++)
			row[i] = t->rows ? 0.02f * rng_normalish(rng) : 1.0f;
		rc = quantize_row(type, row, enc, t->cols, err, err_len);
		if (rc == 0)
			rc = gguf_writer_write_data(w, enc, row_bytes, err, err_len);
	}
	free(row);
	free(enc);
	return rc;
}

/* ------------------------------------------------------------------------
 * The file. */

static int add_hparams(struct gguf_writer *w, const struct mk_options *o)
{
	int rc = gguf_writer_add_string(w, "general.architecture", "llama");
	rc = rc ? rc : gguf_writer_add_string(w, "general.name", "sinkd-mkmodel");
	rc = rc ? rc : gguf_writer_add_u32(w, "llama.context_length", (uint32_t)o->context);
	rc = rc ? rc : gguf_writer_add_u32(w, "llama.embedding_length", (uint32_t)o->dim);
	rc = rc ? rc : gguf_writer_add_u32(w, "llama.block_count", (uint32_t)o->layers);
	rc = rc ? rc : gguf_writer_add_u32(w, "llama.feed_forward_length", (uint32_t)o->ffn);
	rc = rc ? rc : gguf_writer_add_u32(w, "llama.attention.head_count", (uint32_t)o->heads);
	rc = rc ? rc
	        : gguf_writer_add_u32(w, "llama.attention.head_count_kv", (uint32_t)o->kv_heads);
	rc = rc ? rc
	        : gguf_writer_add_u32(w, "llama.rope.dimension_count",
	                              (uint32_t)(o->dim / o->heads));
	rc = rc ? rc : gguf_writer_add_f32(w, "llama.rope.freq_base", 10000.0f);
	rc = rc ? rc : gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
	return rc;
}

static int write_model(struct mk_options *o, uint64_t *n_params, char *err, size_t err_len)
{
	struct gguf_writer *w;
	int rc = gguf_writer_new(o->out, &w, err, err_len);
	if (rc)
		return rc;
	rc = add_hparams(w, o);
	if (rc == 0 && o->vocab && vocab_json_is_json(o->vocab))
		rc = vocab_json_write(w, o->vocab, &o->vocab_size, err, err_len);
	else if (rc == 0 && o->vocab)
		rc = copy_vocab(w, o->vocab, &o->vocab_size, err, err_len);
	else if (rc == 0)
		rc = make_byte_vocab(w, o->vocab_size);
	int n = tensor_list(o, NULL, 0);
	struct mk_tensor *t = calloc((size_t)n, sizeof(*t));
	if (t == NULL)
		rc = -ENOMEM;
	if (rc == 0)
		tensor_list(o, t, n);
	for (int i = 0; rc == 0 && i < n; i++) {
		uint64_t dims[2] = {t[i].cols, t[i].rows};
		rc = gguf_writer_add_tensor(w, t[i].name, t[i].rows ? o->type : GGML_TYPE_F32,
		                            t[i].rows ? 2 : 1, dims);
		*n_params += t[i].cols * (t[i].rows ? t[i].rows : 1);
	}
	if (rc && err && !err[0])
		err_set(err, err_len, rc, "%s: cannot build the header: %s", o->out, strerror(-rc));
	if (rc == 0)
		rc = gguf_writer_write_header(w, err, err_len);
	uint64_t rng = o->seed;
	for (int i = 0; rc == 0 && i < n; i++)
		rc = write_tensor_data(w, o, &t[i], &rng, err, err_len);
	if (rc == 0)
		rc = gguf_writer_finish(w, err, err_len);
	free(t);
	gguf_writer_free(w);
	return rc;
}

/* ------------------------------------------------------------------------
 * Conversion of an existing model (--from). */

/* For a matrix whose rows do not split into the type's blocks: what
 * llama.cpp's quantizer falls back to for a K type when the rows split into
 * 32-element blocks, else F16 (lossless enough, any row length). */
static enum ggml_type fallback_type(enum ggml_type type, uint64_t cols)
{
	enum ggml_type alt = type == GGML_TYPE_Q4_K   ? GGML_TYPE_Q5_0
	                     : type == GGML_TYPE_Q5_K ? GGML_TYPE_Q5_1
	                     : type == GGML_TYPE_Q6_K ? GGML_TYPE_Q8_0
	                                              : type;
	return alt != type && cols % ggml_block_size(alt) == 0 ? alt : GGML_TYPE_F16;
}

/* The type a source tensor is written as: vectors (norms, biases) F32,
 * matrices --type unless their rows do not split into its blocks. */
static enum ggml_type converted_type(const struct gguf_tensor *t, enum ggml_type want)
{
	if (t->n_dims < 2)
		return GGML_TYPE_F32;
	if (t->dims[0] % ggml_block_size(want) == 0)
		return want;
	enum ggml_type alt = fallback_type(want, t->dims[0]);
	printf("note: %s: rows of %" PRIu64 " are not a multiple of %" PRIu32
	       " (the %s block size): written as %s\n",
	       t->name, t->dims[0], ggml_block_size(want), type_cli_name(want), type_cli_name(alt));
	return alt;
}

/* Every key but general.alignment (the writer lays the data out at its
 * own) and general.file_type (it describes the source's tensor types). */
static int copy_metadata(struct gguf_writer *w, const struct gguf_file *src)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < gguf_n_kv(src); i++) {
		const char *key = gguf_kv_key(src, i);
		enum gguf_value_type type;
		const void *data;
		size_t len;
		if (strcmp(key, "general.alignment") == 0 || strcmp(key, "general.file_type") == 0)
			continue;
		gguf_kv_raw(src, i, &type, &data, &len);
		rc = gguf_writer_add_raw(w, key, type, data, len);
	}
	return rc;
}

/* One tensor's data: copied as is when the type does not change, else
 * decoded and re-encoded one row at a time. */
static int convert_tensor_data(struct gguf_writer *w, const struct gguf_tensor *t,
                               enum ggml_type type, char *err, size_t err_len)
{
	if (type == t->type)
		return gguf_writer_write_data(w, t->data, t->n_bytes, err, err_len);
	uint64_t cols = t->dims[0], rows = t->n_elements / cols;
	size_t in_bytes = ggml_row_bytes(t->type, cols), out_bytes = ggml_row_bytes(type, cols);
	float *row = malloc(cols * sizeof(float));
	void *enc = malloc(out_bytes);
	int rc = 0;
	if (!row || !enc)
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
	for (uint64_t r = 0; rc == 0 && r < rows; r++) {
		rc = dequantize_row(t->type, (const uint8_t *)t->data + r * in_bytes, row, cols);
		rc = rc ? err_set(err, err_len, rc, "tensor '%s': cannot decode %s", t->name,
		                  ggml_type_name(t->type))
		        : quantize_row(type, row, enc, cols, err, err_len);
		if (rc == 0)
			rc = gguf_writer_write_data(w, enc, out_bytes, err, err_len);
	}
	free(row);
	free(enc);
	return rc;
}

/* The header: metadata, then every tensor with its new type (in types). */
static int convert_header(struct gguf_writer *w, const struct gguf_file *src, enum ggml_type want,
                          enum ggml_type *types, char *err, size_t err_len)
{
	int rc = copy_metadata(w, src);
	for (size_t i = 0; rc == 0 && i < gguf_n_tensors(src); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(src, i);
		if (!dequant_supported(t->type))
			return err_set(err, err_len, -ENOTSUP,
			               "%s: tensor '%s' has type %s, which "
			               "cannot be converted",
			               gguf_path(src), t->name, ggml_type_name(t->type));
		types[i] = converted_type(t, want);
		rc = gguf_writer_add_tensor(w, t->name, types[i], t->n_dims, t->dims);
	}
	if (rc && err && !err[0])
		err_set(err, err_len, rc, "cannot build the header: %s", strerror(-rc));
	return rc ? rc : gguf_writer_write_header(w, err, err_len);
}

static int convert_model(const struct mk_options *o, uint64_t *n_params, char *err, size_t err_len)
{
	struct gguf_file *src = NULL;
	struct gguf_writer *w = NULL;
	enum ggml_type *types = NULL;
	int rc = gguf_open(o->from, &src, err, err_len);
	if (rc)
		return rc;
	rc = gguf_writer_new(o->out, &w, err, err_len);
	if (rc)
		goto out;
	types = calloc(gguf_n_tensors(src) + 1, sizeof(*types));
	if (types == NULL) {
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
		goto out;
	}
	rc = convert_header(w, src, o->type, types, err, err_len);
	for (size_t i = 0; rc == 0 && i < gguf_n_tensors(src); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(src, i);
		rc = convert_tensor_data(w, t, types[i], err, err_len);
		*n_params += t->n_elements;
	}
	if (rc == 0)
		rc = gguf_writer_finish(w, err, err_len);
out:
	free(types);
	gguf_writer_free(w);
	gguf_close(src);
	return rc;
}

/* ------------------------------------------------------------------------
 * Command line. */

static void usage(FILE *fp)
{
	fprintf(fp, "usage: sinkd-mkmodel --out FILE [--vocab VOCAB | --vocab-size N]\n"
	            "                     --dim D --layers L --heads H [--kv-heads K] --ffn F\n"
	            "                     [--type TYPE] [--tied] [--seed S] [--context C]\n"
	            "       sinkd-mkmodel --from MODEL.gguf --out FILE [--type TYPE]\n"
	            "TYPE: f32 (default) f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k; every\n"
	            "2-D weight gets it, the token embedding and output matrix included (like\n"
	            "llama.cpp's pure types); norm vectors and biases stay F32.  The q*_0/q*_1\n"
	            "types need rows that are multiples of 32 elements, the *_k types of 256.\n"
	            "Writes a GGUF v3 llama model with random weights (N(0, 0.02), norms 1).\n"
	            "The vocabulary and every tokenizer.* key come from --vocab: a GGUF file,\n"
	            "or a Hugging Face tokenizer.json (with the tokenizer_config.json beside it),\n"
	            "converted as llama.cpp's convert_hf_to_gguf.py does; without it a\n"
	            "byte-level vocabulary of --vocab-size (>= 259, default 512) tokens is made.\n"
	            "With --from it converts MODEL.gguf to TYPE, copying all its metadata; a\n"
	            "matrix whose rows do not split into TYPE's blocks is written, with a note,\n"
	            "as llama.cpp does: q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0 when rows are\n"
	            "multiples of 32, else f16.\n");
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < lo || v > hi)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

/* Every matrix row is --dim or --ffn long (ffn_down's), so both must split
 * into the type's blocks. */
static int check_block_size(const struct mk_options *o, char *err, size_t err_len)
{
	uint32_t bs = ggml_block_size(o->type);
	const char *name = o->dim % (int)bs ? "--dim" : o->ffn % (int)bs ? "--ffn" : NULL;
	if (name == NULL)
		return 0;
	return err_set(err, err_len, -EINVAL,
	               "--type %s needs %s to be a multiple of its block size %" PRIu32 ", not %d",
	               type_cli_name(o->type), name, bs, o->dim % (int)bs ? o->dim : o->ffn);
}

static int check_options(const struct mk_options *o, char *err, size_t err_len)
{
	if (o->from && !o->out)
		return err_set(err, err_len, -EINVAL, "--from needs --out");
	if (o->from &&
	    (o->vocab || o->dim || o->layers || o->heads || o->kv_heads || o->ffn || o->tied))
		return err_set(err, err_len, -EINVAL,
		               "--from takes the shapes and vocabulary from the model: drop "
		               "--vocab, --dim, --layers, --heads, --kv-heads, --ffn and --tied");
	if (o->from)
		return 0;
	if (!o->out || !o->dim || !o->layers || !o->heads || !o->ffn)
		return err_set(err, err_len, -EINVAL,
		               "--out, --dim, --layers, --heads and --ffn are required");
	if (o->dim % o->heads || (o->dim / o->heads) % 2 || o->heads % o->kv_heads)
		return err_set(err, err_len, -EINVAL,
		               "--dim must split into --heads of even width, and --heads into "
		               "--kv-heads groups");
	if (check_block_size(o, err, err_len))
		return -EINVAL;
	if (!o->vocab && o->vocab_size < 259)
		return err_set(err, err_len, -EINVAL, "--vocab-size must be at least 259");
	return 0;
}

static int parse_args(int argc, char **argv, struct mk_options *o, char *err, size_t err_len)
{
	static const struct option longs[] = {
	    {"out", 1, 0, 'o'},      {"vocab", 1, 0, 'v'},  {"from", 1, 0, 'F'},
	    {"dim", 1, 0, 'd'},      {"layers", 1, 0, 'l'}, {"heads", 1, 0, 'h'},
	    {"kv-heads", 1, 0, 'k'}, {"ffn", 1, 0, 'f'},    {"vocab-size", 1, 0, 'n'},
	    {"type", 1, 0, 't'},     {"tied", 0, 0, 'T'},   {"seed", 1, 0, 's'},
	    {"context", 1, 0, 'c'},  {"help", 0, 0, 'H'},   {0, 0, 0, 0}};
	int c, rc = 0, idx = 0;
	while (rc == 0 && (c = getopt_long(argc, argv, "", longs, &idx)) != -1) {
		switch (c) {
		case 'o':
			o->out = optarg;
			break;
		case 'v':
			o->vocab = optarg;
			break;
		case 'F':
			o->from = optarg;
			break;
		case 'd':
			rc = parse_int(optarg, 2, 1 << 16, &o->dim);
			break;
		case 'l':
			rc = parse_int(optarg, 1, 1024, &o->layers);
			break;
		case 'h':
			rc = parse_int(optarg, 1, 1 << 12, &o->heads);
			break;
		case 'k':
			rc = parse_int(optarg, 1, 1 << 12, &o->kv_heads);
			break;
		case 'f':
			rc = parse_int(optarg, 1, 1 << 18, &o->ffn);
			break;
		case 'n':
			rc = parse_int(optarg, 1, 1 << 20, &o->vocab_size);
			break;
		case 't':
			rc = parse_type(optarg, &o->type);
			break;
		case 'T':
			o->tied = 1;
			break;
		case 's':
			o->seed = strtoull(optarg, NULL, 0);
			break;
		case 'c':
			rc = parse_int(optarg, 1, 1 << 24, &o->context);
			break;
		case 'H':
			usage(stdout);
			return 1;
		default:
			return err_set(err, err_len, -EINVAL, "unknown option (see --help)");
		}
		if (rc)
			return err_set(err, err_len, rc, "bad value for --%s: '%s'",
			               longs[idx].name, optarg);
	}
	if (optind < argc)
		return err_set(err, err_len, -EINVAL, "unexpected argument '%s'", argv[optind]);
	if (o->kv_heads == 0)
		o->kv_heads = o->heads; /* stays 0 with --from, which gives no --heads */
	return check_options(o, err, err_len);
}

int main(int argc, char **argv)
{
	struct mk_options o = {
	    .type = GGML_TYPE_F32, .vocab_size = 512, .context = 2048, .seed = 1};
	char err[SINKD_ERR_LEN] = "";
	int rc = parse_args(argc, argv, &o, err, sizeof(err));
	if (rc > 0)
		return 0;
	if (rc < 0) {
		fprintf(stderr, "sinkd-mkmodel: %s\n", err);
		usage(stderr);
		return 2;
	}
	double t0 = monotime_s();
	uint64_t n_params = 0;
	rc = o.from ? convert_model(&o, &n_params, err, sizeof(err))
	            : write_model(&o, &n_params, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "sinkd-mkmodel: %s\n", err);
		return 1;
	}
	double s = monotime_s() - t0;
	if (o.from) {
		printf("%s: %" PRIu64 " parameters of %s converted to %s; %.1f s\n", o.out,
		       n_params, o.from, type_cli_name(o.type), s);
		return 0;
	}
	printf("%s: llama, %" PRIu64
	       " parameters (%s), vocab %d, dim %d, %d layers, %d/%d heads, ffn %d%s; %.1f s\n",
	       o.out, n_params, ggml_type_name(o.type), o.vocab_size, o.dim, o.layers, o.heads,
	       o.kv_heads, o.ffn, o.tied ? ", tied output" : "", s);
	return 0;
}
