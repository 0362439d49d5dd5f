/* sinkd-mkmodel: writes a synthetic model of any architecture in the
 * architecture table (--arch, llama by default) as GGUF v3 with random
 * weights, for tests and benchmarks of models larger than stories260K.
 * Its keys and tensor names are the row's, as llama.cpp's converter writes
 * them, so llama.cpp loads the same file.
 * Weights are deterministic in --seed, approximately N(0, 0.02) so
 * activations stay in a sane range, norms are 1 (QK-norms N(1, 0.2) and,
 * where the row has Gemma's post-norms, every norm random around 1, so that
 * a norm applied wrongly shows in the logits); the vocabulary (every
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

#include "model/arch.h"
#include "model/dequant.h"
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "model/quantize.h"
#include "tools/vocab_json.h"
#include "util/errbuf.h"
#include "util/monotime.h"

/* The widest head the cache stores (SINKCACHE_MAX_HEAD_DIM). */
#define SINKD_MKMODEL_MAX_HEAD_DIM 512

struct mk_options {
	const char *out;
	const char *vocab;
	const char *chat_template; /* --chat-template: the file's text (malloc'ed), or NULL */
	const char *from; /* --from: convert this model instead of making one */
	const struct model_arch *arch;
	int dim, layers, heads, kv_heads, ffn, vocab_size, context;
	int head_dim; /* --head-dim: 0 = dim / heads */
	int bias;     /* --bias: the optional Q/K/V biases too */
	enum ggml_type type;
	int tied;
	uint64_t seed;
	/* --rope-freqs: rope_freqs.weight's values (a shorter list repeats its
	 * last); --rope-scaling linear:F: the rope.scaling keys (0: none). */
	int n_rope_freqs;
	float rope_freqs[SINKD_MKMODEL_MAX_HEAD_DIM / 2];
	float rope_linear;
	/* the keys of rows with sliding layers and soft-caps (model_arch_attn),
	 * RoPE bases: -1 (0 for the bases) when not given */
	int sliding_window, swa_pattern;
	double attn_softcap, final_softcap;
	double rope_base, rope_base_swa;
	/* --rope-scaling yarn:F[:N]: type yarn instead of linear, and
	 * rope.scaling.original_context_length N (0: not written) */
	bool rope_yarn;
	int rope_orig_ctx;
	/* --rope-dim: rope.dimension_count (0: the head width); --rope-long /
	 * --rope-short: longrope's rope_factors_long / _short.weight values (phi3);
	 * --rope-orig-ctx: rope.scaling.original_context_length; --rope-attn-factor:
	 * rope.scaling.attn_factor (0: not written) */
	int rope_dim;
	/* --experts, --experts-used, --expert-ffn: a mixture-of-experts row's
	 * expert_count, expert_used_count and expert_feed_forward_length (0:
	 * the defaults 8, 2 and --ffn) */
	int experts, experts_used, expert_ffn;
	int n_rope_long, n_rope_short;
	float rope_long[SINKD_MKMODEL_MAX_HEAD_DIM / 2], rope_short[SINKD_MKMODEL_MAX_HEAD_DIM / 2];
	float rope_attn_factor;
};

/* ------------------------------------------------------------------------
 * Tensor types, by their command-line names. */

static const struct {
	const char *name;
	enum ggml_type type;
} type_names[] = {{"f32", GGML_TYPE_F32},   {"f16", GGML_TYPE_F16},   {"bf16", GGML_TYPE_BF16},
                  {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1},
                  {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1}, {"q4_k", GGML_TYPE_Q4_K},
                  {"q5_k", GGML_TYPE_Q5_K}, {"q6_k", GGML_TYPE_Q6_K},
                  {"mxfp4", GGML_TYPE_MXFP4}};
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
	uint64_t cols, rows; /* rows == 0: a vector of cols elements */
	uint64_t experts;    /* > 0: a 3-D expert tensor [cols, rows, experts] */
	bool f32;            /* F32 whatever --type (router, expert biases) */
	bool random;         /* a vector of random values (a bias), not ones (a norm) */
	float scale;         /* the random values' spread (0: 0.02) */
	const float *factors; /* RoPE factor values (a shorter list repeats its last) */
	int n_factors;
	bool near_one;        /* a norm of random values around 1 (QK-norm), so that a
	                         norm computed wrongly shows in the logits */
};

static int head_dim_of(const struct mk_options *o)
{
	return o->head_dim ? o->head_dim : o->dim / o->heads;
}

static int rope_dim_of(const struct mk_options *o)
{
	return o->rope_dim ? o->rope_dim : head_dim_of(o);
}

/* The values option of a RoPE factors tensor, and how many (0: none asked). */
static const float *factors_of(const struct mk_options *o, enum model_tensor t, int *n)
{
	*n = t == MODEL_T_ROPE_FACTORS ? o->n_rope_freqs
	     : t == MODEL_T_ROPE_LONG  ? o->n_rope_long
	     : t == MODEL_T_ROPE_SHORT ? o->n_rope_short
	                               : 0;
	return t == MODEL_T_ROPE_FACTORS ? o->rope_freqs
	       : t == MODEL_T_ROPE_LONG  ? o->rope_long
	                                 : o->rope_short;
}

/* The shape of model-level tensor t: cols and rows (0: a vector). */
static void model_tensor_shape(const struct mk_options *o, enum model_tensor t, uint64_t *cols,
                               uint64_t *rows)
{
	uint64_t dim = (uint64_t)o->dim, vocab = (uint64_t)o->vocab_size;
	*cols = dim;
	*rows = 0;
	switch (t) {
	case MODEL_T_TOKEN_EMBD:
	case MODEL_T_OUTPUT:
		*rows = vocab;
		break;
	case MODEL_T_OUTPUT_NORM:
		break;
	case MODEL_T_ROPE_FACTORS:
	case MODEL_T_ROPE_LONG:
	case MODEL_T_ROPE_SHORT:
	case MODEL_T_COUNT:
		*cols = (uint64_t)rope_dim_of(o) / 2;
		break;
	}
}

/* A mixture-of-experts row's counts: given, or the defaults. */
static int experts_of(const struct mk_options *o)
{
	return o->experts ? o->experts : 8;
}

static int expert_ffn_of(const struct mk_options *o)
{
	return o->expert_ffn ? o->expert_ffn : o->ffn;
}

/* The shape of a mixture-of-experts tensor t: cols, rows (0: a vector),
 * experts (0: not 3-D); false for another tensor. */
static bool moe_tensor_shape(const struct mk_options *o, enum model_layer_tensor t,
                             uint64_t *cols, uint64_t *rows, uint64_t *experts)
{
	uint64_t dim = (uint64_t)o->dim, ne = (uint64_t)experts_of(o);
	uint64_t eff = (uint64_t)expert_ffn_of(o);
	bool exps = t == MODEL_LT_GATE_EXPS || t == MODEL_LT_UP_EXPS || t == MODEL_LT_DOWN_EXPS;
	bool exp_bias = t == MODEL_LT_GATE_EXPS_B || t == MODEL_LT_UP_EXPS_B ||
	                t == MODEL_LT_DOWN_EXPS_B;
	bool down = t == MODEL_LT_DOWN_EXPS || t == MODEL_LT_DOWN_EXPS_B;
	*experts = exps ? ne : 0;
	*cols = t == MODEL_LT_GATE_INP_B ? ne : exp_bias && !down ? eff : dim;
	*rows = t == MODEL_LT_GATE_INP ? ne : exp_bias ? ne : 0;
	if (exps) {
		*cols = down ? eff : dim;
		*rows = down ? dim : eff;
	}
	return exps || exp_bias || t == MODEL_LT_GATE_INP || t == MODEL_LT_GATE_INP_B;
}

/* The shape of layer tensor t, as llama.cpp's converter writes it. */
static void layer_tensor_shape(const struct mk_options *o, enum model_layer_tensor t,
                               uint64_t *cols, uint64_t *rows, uint64_t *experts)
{
	uint64_t dim = (uint64_t)o->dim, hd = (uint64_t)head_dim_of(o);
	uint64_t q = hd * (uint64_t)o->heads, kv = hd * (uint64_t)o->kv_heads;
	uint64_t ffn = (uint64_t)o->ffn;
	if (moe_tensor_shape(o, t, cols, rows, experts))
		return;
	*cols = dim;
	*rows = 0;
	switch (t) {
	case MODEL_LT_ATTN_NORM:
	case MODEL_LT_FFN_NORM:
	case MODEL_LT_POST_ATTN_NORM:
	case MODEL_LT_POST_FFW_NORM:
	case MODEL_LT_BO:
		break;
	case MODEL_LT_SINKS:
		*cols = (uint64_t)o->heads;
		break;
	case MODEL_LT_Q_NORM:
	case MODEL_LT_K_NORM:
		*cols = hd;
		break;
	case MODEL_LT_Q:
		*rows = q;
		break;
	case MODEL_LT_K:
	case MODEL_LT_V:
		*rows = kv;
		break;
	case MODEL_LT_O:
		*cols = q;
		*rows = dim;
		break;
	case MODEL_LT_GATE:
		*rows = ffn;
		break;
	case MODEL_LT_UP: /* gate rows then up rows where the row fuses them */
		*rows = model_arch_fused_gate_up(o->arch) ? 2 * ffn : ffn;
		break;
	case MODEL_LT_QKV:
		*rows = q + 2 * kv;
		break;
	case MODEL_LT_DOWN:
		*cols = ffn;
		*rows = dim;
		break;
	case MODEL_LT_BQ:
		*cols = q;
		break;
	case MODEL_LT_BK:
	case MODEL_LT_BV:
		*cols = kv;
		break;
	default: /* the mixture-of-experts ones, above */
		break;
	}
}

/* Whether layer tensor t holds random values rather than ones (a norm):
 * the biases and the learned sink logits. */
static bool layer_tensor_random(enum model_layer_tensor t)
{
	return model_layer_tensor_is_bias(t) || t == MODEL_LT_BO || t == MODEL_LT_SINKS ||
	       t == MODEL_LT_GATE_INP_B || t == MODEL_LT_GATE_EXPS_B ||
	       t == MODEL_LT_UP_EXPS_B || t == MODEL_LT_DOWN_EXPS_B;
}

/* What a matrix of --type want is written as: mxfp4 means the experts
 * (3-D) MXFP4 and every other matrix Q8_0, as llama-quantize's MXFP4_MOE
 * and the released gpt-oss files; another type is every matrix's. */
static enum ggml_type matrix_type(enum ggml_type want, bool experts)
{
	return want != GGML_TYPE_MXFP4 || experts ? want : GGML_TYPE_Q8_0;
}

/* The type tensor t is written as: vectors, the router and the expert
 * biases F32 (llama.cpp's quantizer leaves ffn_gate_inp and biases so);
 * matrices as matrix_type says. */
static enum ggml_type tensor_type(const struct mk_options *o, const struct mk_tensor *t)
{
	if (t->rows == 0 || t->f32)
		return GGML_TYPE_F32;
	return matrix_type(o->type, t->experts > 0);
}

/* Whether the file gets a tensor the row may hold: required ones always,
 * optional ones when asked (the output head unless --tied, biases with
 * --bias); the rest never. */
static bool wanted(const struct mk_options *o, enum model_tensor_need need, bool is_output,
                   bool is_bias)
{
	if (need == MODEL_TENSOR_REQUIRED)
		return true;
	if (need != MODEL_TENSOR_OPTIONAL)
		return false;
	return is_output ? !o->tied : is_bias && o->bias;
}

/* The tensor list in file order (the model-level ones, then each layer's
 * in the row's order); returns the count (<= cap). */
static int tensor_list(const struct mk_options *o, struct mk_tensor *t, int cap)
{
	int n = 0;
	uint64_t cols, rows, experts = 0;
#define ADD(c, r, rnd, one, ...)                                                                   \
	do {                                                                                       \
		if (n < cap) {                                                                     \
			snprintf(t[n].name, sizeof(t[n].name), __VA_ARGS__);                       \
			t[n].cols = (c);                                                           \
			t[n].rows = (r);                                                           \
			t[n].random = (rnd);                                                       \
			t[n].near_one = (one);                                                     \
			t[n].experts = experts;                                                    \
		}                                                                                  \
		n++;                                                                               \
	} while (0)
	for (int k = 0; k < MODEL_T_COUNT; k++) {
		enum model_tensor mt = (enum model_tensor)k;
		int n_factors;
		const float *factors = factors_of(o, mt, &n_factors);
		if (!n_factors && !wanted(o, model_arch_model_tensor_need(o->arch, mt),
		                        mt == MODEL_T_OUTPUT, false))
			continue;
		model_tensor_shape(o, mt, &cols, &rows);
		experts = 0;
		ADD(cols, rows, false, false, "%s", model_arch_model_tensor(o->arch, mt));
		if (n <= cap && n_factors) {
			t[n - 1].factors = factors;
			t[n - 1].n_factors = n_factors;
		}
	}
	for (int l = 0; l < o->layers; l++)
		for (int k = 0; k < MODEL_LT_COUNT; k++) {
			enum model_layer_tensor lt = (enum model_layer_tensor)k;
			bool bias = model_layer_tensor_is_bias(lt);
			bool qk_norm = lt == MODEL_LT_Q_NORM || lt == MODEL_LT_K_NORM;
			if (!wanted(o, model_arch_layer_tensor_need(o->arch, lt), false, bias))
				continue;
			layer_tensor_shape(o, lt, &cols, &rows, &experts);
			ADD(cols, rows, layer_tensor_random(lt), qk_norm, "blk.%d.%s", l,
			    model_arch_layer_tensor(o->arch, lt));
			if (n <= cap) {
				/* the router and expert biases stay F32; sink
				 * logits spread N(0, 1) so that their share shows */
				t[n - 1].f32 = lt == MODEL_LT_GATE_INP || layer_tensor_random(lt);
				t[n - 1].scale = lt == MODEL_LT_SINKS ? 1.0f : 0.0f;
			}
		}
#undef ADD
	return n;
}

static int write_tensor_data(struct gguf_writer *w, const struct mk_options *o,
                             const struct mk_tensor *t, uint64_t *rng, char *err, size_t err_len)
{
	enum ggml_type type = tensor_type(o, t);
	uint64_t rows = (t->rows ? t->rows : 1) * (t->experts ? t->experts : 1);
	float scale = t->scale > 0.0f ? t->scale : 0.02f;
	size_t row_bytes = ggml_row_bytes(type, t->cols);
	float *row = malloc(t->cols * sizeof(float));
	void *enc = malloc(row_bytes);
	int rc = 0;
	if (!row || !enc)
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
	/* Gemma's norms: random around 1 (its converter stores 1 + w) */
	float spread = model_arch_layer_tensor(o->arch, MODEL_LT_POST_ATTN_NORM) ? 0.1f : 0.0f;
	for (uint64_t r = 0; rc == 0 && r < rows; r++) {
		for (uint64_t i = 0; i < t->cols; i++)
			row[i] = t->near_one            ? 1.0f + 0.2f * rng_normalish(rng)
			         : t->rows || t->random ? scale * rng_normalish(rng)
			         : spread > 0.0f        ? 1.0f + spread * rng_normalish(rng)
			                                : 1.0f;
		for (int i = 0; t->n_factors && i < (int)t->cols; i++)
			row[i] = t->factors[i < t->n_factors ? i : t->n_factors - 1];
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

/* "<arch>.<key>", the row's prefix before the key. */
static int add_arch_u32(struct gguf_writer *w, const struct mk_options *o, const char *key,
                        uint32_t v)
{
	char name[128];
	snprintf(name, sizeof(name), "%s.%s", model_arch_name(o->arch), key);
	return gguf_writer_add_u32(w, name, v);
}

static int add_arch_f32(struct gguf_writer *w, const struct mk_options *o, const char *key, float v)
{
	char name[128];
	snprintf(name, sizeof(name), "%s.%s", model_arch_name(o->arch), key);
	return gguf_writer_add_f32(w, name, v);
}

/* The keys of model_arch_attn (sliding layers, soft-caps) the row reads,
 * as its converter writes them. */
static int add_attn_keys(struct gguf_writer *w, const struct mk_options *o)
{
	const struct model_arch_attn *fa = model_arch_attn(o->arch);
	int rc = 0;
	if (fa->sliding) {
		int window = o->sliding_window >= 0        ? o->sliding_window
		             : fa->swa_window_default > 0 ? fa->swa_window_default
		                                          : 1024;
		if (window > 0)
			rc = add_arch_u32(w, o, "attention.sliding_window", (uint32_t)window);
		if (rc == 0 && o->swa_pattern >= 0)
			rc = add_arch_u32(w, o, "attention.sliding_window_pattern",
			                  (uint32_t)o->swa_pattern);
		if (rc == 0 && o->rope_base_swa > 0)
			rc = add_arch_f32(w, o, "rope.freq_base_swa", (float)o->rope_base_swa);
	}
	if (rc == 0 && fa->attn_softcap)
		rc = add_arch_f32(w, o, "attn_logit_softcapping",
		                  (float)(o->attn_softcap >= 0 ? o->attn_softcap
		                                               : fa->attn_softcap_default));
	double final = o->final_softcap >= 0 ? o->final_softcap : fa->final_softcap_default;
	if (rc == 0 && fa->final_softcap && final > 0)
		rc = add_arch_f32(w, o, "final_logit_softcapping", (float)final);
	return rc;
}

static int add_hparams(struct gguf_writer *w, const struct mk_options *o)
{
	int rc = gguf_writer_add_string(w, "general.architecture", model_arch_name(o->arch));
	rc = rc ? rc : gguf_writer_add_string(w, "general.name", "sinkd-mkmodel");
	rc = rc ? rc : add_arch_u32(w, o, "context_length", (uint32_t)o->context);
	rc = rc ? rc : add_arch_u32(w, o, "embedding_length", (uint32_t)o->dim);
	rc = rc ? rc : add_arch_u32(w, o, "block_count", (uint32_t)o->layers);
	rc = rc ? rc : add_arch_u32(w, o, "feed_forward_length", (uint32_t)o->ffn);
	rc = rc ? rc : add_arch_u32(w, o, "attention.head_count", (uint32_t)o->heads);
	rc = rc ? rc : add_arch_u32(w, o, "attention.head_count_kv", (uint32_t)o->kv_heads);
	/* as the converter writes head_dim when the config has one (always
	 * for the rows that read it) */
	if (o->head_dim || model_arch_head_width(o->arch) == MODEL_HEAD_WIDTH_KEYS) {
		uint32_t hd = (uint32_t)head_dim_of(o);
		rc = rc ? rc : add_arch_u32(w, o, "attention.key_length", hd);
		rc = rc ? rc : add_arch_u32(w, o, "attention.value_length", hd);
	}
	rc = rc ? rc : add_arch_u32(w, o, "rope.dimension_count", (uint32_t)rope_dim_of(o));
	rc = rc ? rc
	        : add_arch_f32(w, o, "rope.freq_base", o->rope_base > 0 ? (float)o->rope_base
	                                                                  : 10000.0f);
	if (o->rope_linear > 0) {
		char key[128];
		snprintf(key, sizeof(key), "%s.rope.scaling.type", model_arch_name(o->arch));
		rc = rc ? rc : gguf_writer_add_string(w, key, o->rope_yarn ? "yarn" : "linear");
		rc = rc ? rc : add_arch_f32(w, o, "rope.scaling.factor", o->rope_linear);
	}
	if (o->rope_attn_factor > 0)
		rc = rc ? rc : add_arch_f32(w, o, "rope.scaling.attn_factor", o->rope_attn_factor);
	if (o->rope_orig_ctx > 0) {
		rc = rc ? rc : add_arch_u32(w, o, "rope.scaling.original_context_length",
		                            (uint32_t)o->rope_orig_ctx);
	}
	rc = rc ? rc : add_arch_f32(w, o, model_arch_norm_eps_key(o->arch), 1e-5f);
	if (model_arch_experts(o->arch)) {
		rc = rc ? rc : add_arch_u32(w, o, "expert_count", (uint32_t)experts_of(o));
		rc = rc ? rc : add_arch_u32(w, o, "expert_used_count",
		                            (uint32_t)(o->experts_used ? o->experts_used : 2));
		rc = rc ? rc : add_arch_u32(w, o, "expert_feed_forward_length",
		                            (uint32_t)expert_ffn_of(o));
	}
	return rc ? rc : add_attn_keys(w, o);
}

static int write_model(struct mk_options *o, uint64_t *n_params, char *err, size_t err_len)
{
	struct gguf_writer *w;
	int rc = gguf_writer_new(o->out, &w, err, err_len);
	if (rc)
		return rc;
	rc = add_hparams(w, o);
	if (rc == 0 && o->vocab && vocab_json_is_json(o->vocab))
		rc = vocab_json_write(w, o->vocab, o->chat_template, &o->vocab_size, err, err_len);
	else if (rc == 0 && o->vocab)
		rc = copy_vocab(w, o->vocab, &o->vocab_size, err, err_len);
	else if (rc == 0)
		rc = make_byte_vocab(w, o->vocab_size);
	if (rc == 0 && o->chat_template && !(o->vocab && vocab_json_is_json(o->vocab)))
		rc = gguf_writer_add_string(w, "tokenizer.chat_template", o->chat_template);
	int n = tensor_list(o, NULL, 0);
	struct mk_tensor *t = calloc((size_t)n, sizeof(*t));
	if (t == NULL)
		rc = -ENOMEM;
	if (rc == 0)
		tensor_list(o, t, n);
	for (int i = 0; rc == 0 && i < n; i++) {
		uint64_t dims[3] = {t[i].cols, t[i].rows, t[i].experts};
		rc = gguf_writer_add_tensor(w, t[i].name, tensor_type(o, &t[i]),
		                            t[i].experts ? 3 : t[i].rows ? 2 : 1, dims);
		*n_params += t[i].cols * (t[i].rows ? t[i].rows : 1) *
		             (t[i].experts ? t[i].experts : 1);
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
	/* as llama.cpp's quantizer: the router and (expert) biases stay F32 */
	size_t len = strlen(t->name);
	if (t->n_dims < 2 || strstr(t->name, "ffn_gate_inp.weight") ||
	    (len >= 5 && strcmp(t->name + len - 5, ".bias") == 0))
		return GGML_TYPE_F32;
	want = matrix_type(want, t->n_dims == 3);
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
	fprintf(
	    fp,
	    "usage: sinkd-mkmodel --out FILE [--arch NAME] [--vocab VOCAB | --vocab-size N]\n"
	    "                     --dim D --layers L --heads H [--kv-heads K] --ffn F\n"
	    "                     [--head-dim HD] [--bias] [--type TYPE] [--tied]\n"
	    "                     [--seed S] [--context C] [--rope-base B]\n"
	    "                     [--rope-freqs F1,F2,...] [--rope-scaling linear:F|yarn:F[:N]]\n"
	    "                     [--rope-dim N] [--rope-long F1,...] [--rope-short F1,...]\n"
	    "                     [--rope-orig-ctx N] [--rope-attn-factor A]\n"
	    "                     [--sliding-window N] [--swa-pattern P] [--rope-base-swa B]\n"
	    "                     [--attn-softcap X] [--final-softcap X]\n"
	    "                     [--chat-template FILE]\n"
	    "                     [--experts N] [--experts-used K] [--expert-ffn F]\n"
	    "       sinkd-mkmodel --from MODEL.gguf --out FILE [--type TYPE]\n"
	    "       sinkd-mkmodel --list-archs\n"
	    "NAME: a row of the architecture table (--list-archs prints them; llama by\n"
	    "default); keys and tensor names are as llama.cpp's converter writes them.\n"
	    "--head-dim writes attention.key_length/value_length (default dim / heads);\n"
	    "--bias adds the Q/K/V biases where the architecture has them optional.\n"
	    "--rope-freqs writes rope_freqs.weight (llama3's per-pair RoPE factors; a\n"
	    "list shorter than head width / 2 repeats its last value); --rope-scaling\n"
	    "writes rope.scaling.type linear (or yarn) and rope.scaling.factor F, and\n"
	    "with :N rope.scaling.original_context_length N.  --rope-dim writes\n"
	    "rope.dimension_count (partial rotary; default the head width); --rope-long\n"
	    "and --rope-short write longrope's rope_factors_long / _short.weight (phi3);\n"
	    "--rope-orig-ctx rope.scaling.original_context_length; --rope-attn-factor\n"
	    "rope.scaling.attn_factor.\n"
	    "--rope-base: rope.freq_base (10000).\n"
	    "Rows with sliding-window layers (gemma2, gemma3): --sliding-window (the\n"
	    "row's default, else 1024; 0: none, all layers global), --swa-pattern\n"
	    "(sliding_window_pattern, written only when given), --rope-base-swa\n"
	    "(rope.freq_base_swa); --attn-softcap / --final-softcap where the row has\n"
	    "them (default the row's).  Their norms are random around 1.\n"
	    "Mixture-of-experts rows (gpt-oss, qwen3moe): --experts (expert_count, 8),\n"
	    "--experts-used (expert_used_count, the k of top-k, 2), --expert-ffn (each\n"
	    "expert's hidden width, default --ffn); the router (ffn_gate_inp) and the\n"
	    "biases stay F32 as llama.cpp's quantizer leaves them; gpt-oss's sliding\n"
	    "window defaults to 128 on every other layer, its sink logits are N(0, 1).\n"
	    "TYPE: f32 (default) f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k mxfp4;\n"
	    "mxfp4 (mixture-of-experts rows, and --from) writes the experts' 3-D tensors\n"
	    "MXFP4 and every other matrix Q8_0, as llama-quantize's MXFP4_MOE and the\n"
	    "released gpt-oss files.  Otherwise every\n"
	    "2-D weight gets it, the token embedding and output matrix included (like\n"
	    "llama.cpp's pure types); norm vectors and biases stay F32.  The q*_0/q*_1\n"
	    "types need rows that are multiples of 32 elements, the *_k types of 256.\n"
	    "Writes a GGUF v3 model with random weights (N(0, 0.02), norms 1, QK-norms\n"
	    "N(1, 0.2)).\n"
	    "The vocabulary and every tokenizer.* key come from --vocab: a GGUF file,\n"
	    "or a Hugging Face tokenizer.json (with the tokenizer_config.json beside it),\n"
	    "converted as llama.cpp's convert_hf_to_gguf.py does; without it a\n"
	    "byte-level vocabulary of --vocab-size (>= 259, default 512) tokens is made.\n"
	    "--chat-template FILE writes FILE's text as tokenizer.chat_template (instead\n"
	    "of the tokenizer_config.json's; not with a vocabulary GGUF).\n"
	    "With --from it converts MODEL.gguf to TYPE, copying all its metadata; a\n"
	    "matrix whose rows do not split into TYPE's blocks is written, with a note,\n"
	    "as llama.cpp does: q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0 when rows are\n"
	    "multiples of 32, else f16.\n");
}

/* --chat-template FILE: its whole text (a template is a few KiB; 1 MiB is
 * plenty). */
static int read_template(const char *path, struct mk_options *o, char *err, size_t err_len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return err_set(err, err_len, -errno, "--chat-template %s: %s", path, strerror(errno));
	char *text = malloc((1 << 20) + 1);
	size_t n = text ? fread(text, 1, 1 << 20, f) : 0;
	bool more = text && fgetc(f) != EOF;
	fclose(f);
	if (!text || more || n == 0) {
		free(text);
		return err_set(err, err_len, -EINVAL, "--chat-template %s: %s", path,
		               !text ? "out of memory" : more ? "larger than 1 MiB" : "empty");
	}
	text[n] = '\0';
	free((char *)o->chat_template);
	o->chat_template = text;
	return 0;
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

static int parse_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || *end || end == s || !(v >= lo && v <= hi))
		return -EINVAL;
	*out = v;
	return 0;
}

/* Every matrix row is --dim, --ffn (ffn_down's) or heads x head width
 * (attn_output's) long, so each must split into the type's blocks. */
static int check_block_size(const struct mk_options *o, char *err, size_t err_len)
{
	int bs = (int)ggml_block_size(o->type), q = o->heads * head_dim_of(o);
	int eff = model_arch_experts(o->arch) ? expert_ffn_of(o) : o->ffn;
	const char *name = o->dim % bs   ? "--dim"
	                   : o->ffn % bs ? "--ffn"
	                   : q % bs      ? "--heads x --head-dim"
	                   : eff % bs    ? "--expert-ffn"
	                                 : NULL;
	if (name == NULL)
		return 0;
	return err_set(err, err_len, -EINVAL,
	               "--type %s needs %s to be a multiple of its block size %d, not %d",
	               type_cli_name(o->type), name, bs,
	               o->dim % bs   ? o->dim
	               : o->ffn % bs ? o->ffn
	               : q % bs      ? q
	                             : eff);
}

/* The head width a row allows: its own key_length, or dim / heads. */
static int check_head_dim(const struct mk_options *o, char *err, size_t err_len)
{
	if (o->head_dim == 0)
		return o->dim % o->heads || (o->dim / o->heads) % 2
		           ? err_set(
		                 err, err_len, -EINVAL,
		                 "--dim must split into --heads of even width (or give --head-dim)")
		           : 0;
	if (o->head_dim % 2)
		return err_set(err, err_len, -EINVAL, "--head-dim must be even, not %d",
		               o->head_dim);
	if (model_arch_head_width(o->arch) == MODEL_HEAD_WIDTH_SPLIT &&
	    (o->dim % o->heads || o->head_dim != o->dim / o->heads))
		return err_set(err, err_len, -EINVAL,
		               "architecture %s takes its head width from --dim / --heads; "
		               "--head-dim must be %d or absent",
		               model_arch_name(o->arch), o->dim / o->heads);
	return 0;
}

/* --rope-freqs, --rope-long and --rope-short need a row with that factors
 * tensor and at most rope width / 2 values; --rope-dim an even width up to
 * the head's. */
static int check_rope_options(const struct mk_options *o, char *err, size_t err_len)
{
	const struct model_arch *arch = o->arch ? o->arch : model_arch_find("llama");
	static const char *const opt[MODEL_T_COUNT] = {[MODEL_T_ROPE_FACTORS] = "--rope-freqs",
	                                               [MODEL_T_ROPE_LONG] = "--rope-long",
	                                               [MODEL_T_ROPE_SHORT] = "--rope-short"};
	static const char *const tensor[MODEL_T_COUNT] = {
	    [MODEL_T_ROPE_FACTORS] = "rope_freqs.weight",
	    [MODEL_T_ROPE_LONG] = "rope_factors_long.weight",
	    [MODEL_T_ROPE_SHORT] = "rope_factors_short.weight"};
	if (o->from && (o->n_rope_freqs || o->rope_linear > 0 || o->rope_dim || o->n_rope_long ||
	                o->n_rope_short || o->rope_orig_ctx || o->rope_attn_factor > 0))
		return err_set(err, err_len, -EINVAL,
		               "--from keeps the model's RoPE: drop the --rope-* options");
	if (o->from)
		return 0;
	if (o->rope_dim && o->heads && (o->rope_dim % 2 || o->rope_dim > head_dim_of(o)))
		return err_set(err, err_len, -EINVAL,
		               "--rope-dim: %d (allowed: even, at most the head width %d)",
		               o->rope_dim, head_dim_of(o));
	for (int t = MODEL_T_ROPE_FACTORS; t < MODEL_T_COUNT; t++) {
		int n;
		factors_of(o, (enum model_tensor)t, &n);
		if (n && model_arch_model_tensor_need(arch, (enum model_tensor)t) ==
		             MODEL_TENSOR_NONE)
			return err_set(err, err_len, -EINVAL,
			               "%s: architecture %s has no RoPE factors tensor (%s)", opt[t],
			               model_arch_name(arch), tensor[t]);
		if (n && o->heads && n > rope_dim_of(o) / 2)
			return err_set(err, err_len, -EINVAL,
			               "%s: %d values, more than rope width / 2 = %d", opt[t], n,
			               rope_dim_of(o) / 2);
	}
	return 0;
}

/* "F1,F2,...": positive factors into f (*n of them). */
static int parse_rope_freqs(const char *s, float *f, int *n)
{
	*n = 0;
	while (*s) {
		char *end;
		float v = strtof(s, &end);
		if (end == s || !(v > 0) || *n == SINKD_MKMODEL_MAX_HEAD_DIM / 2)
			return -EINVAL;
		f[(*n)++] = v;
		s = *end == ',' && end[1] ? end + 1 : end;
		if (*s && s == end)
			return -EINVAL;
	}
	return *n ? 0 : -EINVAL;
}

/* The sliding-window and soft-cap options only where the row reads them. */
static int check_attn_options(const struct mk_options *o, char *err, size_t err_len)
{
	const struct model_arch_attn *fa = model_arch_attn(o->arch);
	const char *name = model_arch_name(o->arch);
	if (!fa->sliding && (o->sliding_window >= 0 || o->swa_pattern >= 0 || o->rope_base_swa > 0))
		return err_set(err, err_len, -EINVAL,
		               "--sliding-window, --swa-pattern, --rope-base-swa: architecture %s "
		               "has no sliding-window layers",
		               name);
	if (o->sliding_window == 0 && fa->swa_window_default > 0)
		return err_set(err, err_len, -EINVAL,
		               "--sliding-window 0: architecture %s always has sliding layers", name);
	if (o->attn_softcap >= 0 && !fa->attn_softcap)
		return err_set(err, err_len, -EINVAL,
		               "--attn-softcap: architecture %s has no attention soft-cap", name);
	if (o->final_softcap >= 0 && !fa->final_softcap)
		return err_set(err, err_len, -EINVAL,
		               "--final-softcap: architecture %s has no final logit soft-cap", name);
	if ((o->attn_softcap >= 0 && o->attn_softcap < 1e-3) ||
	    (o->final_softcap >= 0 && o->final_softcap < 1e-3 && fa->final_softcap_default > 0))
		return err_set(err, err_len, -EINVAL, "a soft-cap must be at least 0.001");
	return 0;
}

/* --experts, --experts-used and --expert-ffn only for a row with experts,
 * at most --experts used. */
static int check_expert_options(const struct mk_options *o, char *err, size_t err_len)
{
	bool given = o->experts || o->experts_used || o->expert_ffn;
	if (given && (o->from || !model_arch_experts(o->arch)))
		return err_set(err, err_len, -EINVAL,
		               "--experts, --experts-used, --expert-ffn: %s",
		               o->from ? "--from keeps the model's experts"
		                       : "the architecture has no experts (gpt-oss and qwen3moe do)");
	int used = o->experts_used ? o->experts_used : 2;
	if (o->type == GGML_TYPE_MXFP4 && !o->from && !model_arch_experts(o->arch))
		return err_set(err, err_len, -EINVAL,
		               "--type mxfp4 quantizes the experts of a mixture-of-experts "
		               "architecture (gpt-oss, qwen3moe), not a dense %s",
		               model_arch_name(o->arch));
	if (!o->from && model_arch_experts(o->arch) && used > experts_of(o))
		return err_set(err, err_len, -EINVAL,
		               "--experts-used %d is more than --experts %d", used, experts_of(o));
	return 0;
}

static int check_options(const struct mk_options *o, char *err, size_t err_len)
{
	if (check_expert_options(o, err, err_len))
		return -EINVAL;
	if (check_rope_options(o, err, err_len))
		return -EINVAL;
	if (o->from && !o->out)
		return err_set(err, err_len, -EINVAL, "--from needs --out");
	if (o->chat_template && (o->from || (o->vocab && !vocab_json_is_json(o->vocab))))
		return err_set(err, err_len, -EINVAL,
		               "--chat-template goes with a tokenizer.json --vocab or none (a GGUF "
		               "vocabulary or --from model keeps its own template)");
	bool attn_opts = o->sliding_window >= 0 || o->swa_pattern >= 0 || o->attn_softcap >= 0 ||
	                 o->final_softcap >= 0 || o->rope_base > 0 || o->rope_base_swa > 0;
	if (o->from && (o->vocab || o->dim || o->layers || o->heads || o->kv_heads || o->ffn ||
	                o->tied || o->head_dim || o->bias || o->arch || attn_opts))
		return err_set(
		    err, err_len, -EINVAL,
		    "--from takes the architecture, shapes and vocabulary from the model: "
		    "drop --arch, --vocab, --dim, --layers, --heads, --kv-heads, --ffn, "
		    "--head-dim, --bias, --tied and the RoPE, sliding-window and soft-cap "
		    "options");
	if (o->from)
		return 0;
	if (!o->out || !o->dim || !o->layers || !o->heads || !o->ffn)
		return err_set(err, err_len, -EINVAL,
		               "--out, --dim, --layers, --heads and --ffn are required");
	if (check_head_dim(o, err, err_len))
		return -EINVAL;
	if (o->heads % o->kv_heads)
		return err_set(err, err_len, -EINVAL, "--heads must split into --kv-heads groups");
	if (check_block_size(o, err, err_len))
		return -EINVAL;
	if (o->bias && model_arch_qkv_bias(o->arch) != MODEL_BIAS_OPTIONAL)
		return err_set(err, err_len, -EINVAL, "--bias: architecture %s %s Q/K/V biases",
		               model_arch_name(o->arch),
		               model_arch_qkv_bias(o->arch) == MODEL_BIAS_NONE ? "has no"
		                                                               : "always has");
	if (!o->vocab && o->vocab_size < 259)
		return err_set(err, err_len, -EINVAL, "--vocab-size must be at least 259");
	return check_attn_options(o, err, err_len);
}

static int parse_args(int argc, char **argv, struct mk_options *o, char *err, size_t err_len)
{
	static const struct option longs[] = {{"out", 1, 0, 'o'},
	                                      {"vocab", 1, 0, 'v'},
	                                      {"from", 1, 0, 'F'},
	                                      {"dim", 1, 0, 'd'},
	                                      {"layers", 1, 0, 'l'},
	                                      {"heads", 1, 0, 'h'},
	                                      {"kv-heads", 1, 0, 'k'},
	                                      {"ffn", 1, 0, 'f'},
	                                      {"vocab-size", 1, 0, 'n'},
	                                      {"type", 1, 0, 't'},
	                                      {"tied", 0, 0, 'T'},
	                                      {"seed", 1, 0, 's'},
	                                      {"context", 1, 0, 'c'},
	                                      {"help", 0, 0, 'H'},
	                                      {"arch", 1, 0, 'a'},
	                                      {"head-dim", 1, 0, 'D'},
	                                      {"bias", 0, 0, 'B'},
	                                      {"list-archs", 0, 0, 'L'},
	                                      {"rope-freqs", 1, 0, 'R'},
	                                      {"rope-scaling", 1, 0, 'S'},
	                                      {"sliding-window", 1, 0, 'W'},
	                                      {"swa-pattern", 1, 0, 'P'},
	                                      {"rope-base", 1, 0, 'e'},
	                                      {"rope-base-swa", 1, 0, 'E'},
	                                      {"attn-softcap", 1, 0, 'A'},
	                                      {"final-softcap", 1, 0, 'Z'},
	                                      {"rope-dim", 1, 0, 'y'},
	                                      {"rope-long", 1, 0, 'G'},
	                                      {"rope-short", 1, 0, 'g'},
	                                      {"rope-orig-ctx", 1, 0, 'O'},
	                                      {"rope-attn-factor", 1, 0, 'x'},
	                                      {"chat-template", 1, 0, 'C'},
	                                      {"experts", 1, 0, 'X'},
	                                      {"experts-used", 1, 0, 'U'},
	                                      {"expert-ffn", 1, 0, 'N'},
	                                      {0, 0, 0, 0}};
	int c, rc = 0, idx = 0;
	while (rc == 0 && (c = getopt_long(argc, argv, "", longs, &idx)) != -1) {
		switch (c) {
		case 'o':
			o->out = optarg;
			break;
		case 'v':
			o->vocab = optarg;
			break;
		case 'C':
			rc = read_template(optarg, o, err, err_len);
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
		case 'a':
			rc = model_arch_lookup(optarg, strlen(optarg), &o->arch, err, err_len);
			if (rc)
				return rc;
			break;
		case 'D':
			rc = parse_int(optarg, 2, SINKD_MKMODEL_MAX_HEAD_DIM, &o->head_dim);
			break;
		case 'B':
			o->bias = 1;
			break;
		case 'R':
			rc = parse_rope_freqs(optarg, o->rope_freqs, &o->n_rope_freqs);
			break;
		case 'y':
			rc = parse_int(optarg, 2, SINKD_MKMODEL_MAX_HEAD_DIM, &o->rope_dim);
			break;
		case 'G':
			rc = parse_rope_freqs(optarg, o->rope_long, &o->n_rope_long);
			break;
		case 'g':
			rc = parse_rope_freqs(optarg, o->rope_short, &o->n_rope_short);
			break;
		case 'O':
			rc = parse_int(optarg, 1, 1 << 24, &o->rope_orig_ctx);
			break;
		case 'x': {
			char *end;
			o->rope_attn_factor = strtof(optarg, &end);
			rc = o->rope_attn_factor > 0 && !*end ? 0 : -EINVAL;
			break;
		}
			break;
		case 'S': {
			char *end;
			o->rope_yarn = strncmp(optarg, "yarn:", 5) == 0;
			bool linear = strncmp(optarg, "linear:", 7) == 0;
			o->rope_linear = linear || o->rope_yarn
			                     ? strtof(optarg + (o->rope_yarn ? 5 : 7), &end)
			                     : 0;
			rc = (linear || o->rope_yarn) && o->rope_linear > 0 ? 0 : -EINVAL;
			if (rc == 0 && o->rope_yarn && *end == ':')
				o->rope_orig_ctx = (int)strtol(end + 1, &end, 10);
			rc = rc == 0 && !*end && o->rope_orig_ctx >= 0 ? 0 : -EINVAL;
			break;
		}
		case 'W':
			rc = parse_int(optarg, 0, 1 << 24, &o->sliding_window);
			break;
		case 'X':
			rc = parse_int(optarg, 1, 1 << 12, &o->experts);
			break;
		case 'U':
			rc = parse_int(optarg, 1, 1 << 12, &o->experts_used);
			break;
		case 'N':
			rc = parse_int(optarg, 1, 1 << 18, &o->expert_ffn);
			break;
		case 'P':
			rc = parse_int(optarg, 0, 1024, &o->swa_pattern);
			break;
		case 'e':
			rc = parse_double(optarg, 1e-3, 1e12, &o->rope_base);
			break;
		case 'E':
			rc = parse_double(optarg, 1e-3, 1e12, &o->rope_base_swa);
			break;
		case 'A':
			rc = parse_double(optarg, 0, 1e6, &o->attn_softcap);
			break;
		case 'Z':
			rc = parse_double(optarg, 0, 1e6, &o->final_softcap);
			break;
		case 'L':
			for (int i = 0; i < model_arch_count(); i++)
				printf("%s\n", model_arch_name(model_arch_at(i)));
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
	rc = check_options(o, err, err_len);
	if (!o->arch)
		o->arch = model_arch_find("llama");
	return rc;
}

int main(int argc, char **argv)
{
	struct mk_options o = {.type = GGML_TYPE_F32,
	                       .vocab_size = 512,
	                       .context = 2048,
	                       .seed = 1,
	                       .sliding_window = -1,
	                       .swa_pattern = -1,
	                       .attn_softcap = -1,
	                       .final_softcap = -1};
	char err[SINKD_ERR_LEN] = "";
	int rc = parse_args(argc, argv, &o, err, sizeof(err));
	if (rc > 0)
		return 0;
	if (rc < 0) {
		fprintf(stderr, "sinkd-mkmodel: %s\n", err);
		usage(stderr);
		free((char *)o.chat_template);
		return 2;
	}
	double t0 = monotime_s();
	uint64_t n_params = 0;
	rc = o.from ? convert_model(&o, &n_params, err, sizeof(err))
	            : write_model(&o, &n_params, err, sizeof(err));
	free((char *)o.chat_template);
	o.chat_template = NULL;
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
	printf("%s: %s, %" PRIu64
	       " parameters (%s), vocab %d, dim %d, %d layers, %d/%d heads of %d, ffn %d%s; %.1f "
	       "s\n",
	       o.out, model_arch_name(o.arch), n_params, ggml_type_name(o.type), o.vocab_size,
	       o.dim, o.layers, o.heads, o.kv_heads, head_dim_of(&o), o.ffn,
	       o.tied ? ", tied output" : "", s);
	if (model_arch_experts(o.arch))
		printf("%s: %d experts of ffn %d, %d used per token\n", o.out, experts_of(&o),
		       expert_ffn_of(&o), o.experts_used ? o.experts_used : 2);
	return 0;
}
