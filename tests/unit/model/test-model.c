/* The model loader: stories260K's hyper-parameters, the SHA-256 check,
 * synthetic llama/qwen2 files (written here with the GGUF writer) in every
 * storage type, the errors for wrong shapes, missing tensors and unsupported
 * types, and the sinkd-mkmodel tool (path in argv[1]) end to end: models it
 * writes in each block type load at about their file size, and run (on the
 * CPU backend) to the logits of their F32 conversion. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "model/dequant.h"
#include "model/gguf_write.h"
#include "model/model.h"
#include "util/digest.h"
#include "util/errbuf.h"
#include "testutil.h"

static const char *mkmodel_path;
START_TEST(test_stories_hparams)
{
	char err[SINKD_ERR_LEN];
	struct model *m;
	int rc = model_load(tu_shared_path("models/stories260K.gguf"), NULL, &m, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s", err);
	const struct model_hparams *hp = &m->hp;
	ck_assert_ptr_eq(hp->arch, model_arch_find("llama"));
	ck_assert_int_eq(hp->n_vocab, 512);
	ck_assert_int_eq(hp->dim, 64);
	ck_assert_int_eq(hp->n_layers, 5);
	ck_assert_int_eq(hp->n_heads, 8);
	ck_assert_int_eq(hp->n_kv_heads, 4);
	ck_assert_int_eq(hp->head_dim, 8);
	ck_assert_int_eq(hp->ffn_dim, 172);
	ck_assert_int_eq(hp->rope_dim, 8);
	ck_assert_double_eq(hp->rope_theta, 10000.0);
	ck_assert_float_eq_tol(hp->norm_eps, 1e-5f, 1e-10f);
	ck_assert_int_eq(hp->context_length, 2048);
	ck_assert(!hp->has_qkv_bias);
	ck_assert(!hp->tied_output);
	ck_assert_str_eq(m->name, "stories260K");
	/* F32 weights stay in the mapping */
	const struct gguf_tensor *t = gguf_find_tensor(m->file, "blk.4.ffn_down.weight");
	ck_assert_ptr_eq(m->layers[4].w_down.data, t->data);
	ck_assert_int_eq(m->layers[4].w_down.type, GGML_TYPE_F32);
	ck_assert_int_eq(m->layers[4].w_down.rows, 64);
	ck_assert_int_eq(m->layers[4].w_down.cols, 172);
	ck_assert_uint_eq(m->layers[4].w_down.row_bytes, 172 * 4);
	ck_assert_int_eq(m->layers[0].wk.rows, 32);
	ck_assert_int_eq(m->token_embd.rows, 512);
	ck_assert_ptr_ne(m->output.data, m->token_embd.data);
	/* norms are copies (read every step; model.c load_vector), equal to the file's */
	const struct gguf_tensor *on = gguf_find_tensor(m->file, "output_norm.weight");
	ck_assert_ptr_ne(m->output_norm, on->data);
	ck_assert_int_eq(memcmp(m->output_norm, on->data, 64 * sizeof(float)), 0);
	/* 5 layers * (q 64x64 + k,v 32x64 + o 64x64 + 3 * 172x64) + output 512x64 floats */
	size_t want = (size_t)(5 * (4096 + 2 * 2048 + 4096 + 3 * 172 * 64) + 512 * 64) * 4;
	ck_assert_uint_eq(model_weight_bytes(m), want);
	model_free(m);
}
END_TEST

START_TEST(test_sha256_check)
{
	char err[SINKD_ERR_LEN], want[65] = "";
	FILE *fp = fopen(tu_shared_path("models/SHA256SUMS"), "r");
	ck_assert_ptr_nonnull(fp);
	ck_assert_int_eq(fscanf(fp, "%64s", want), 1);
	fclose(fp);
	struct model *m;
	struct model_load_options opt = {.expected_sha256 = want};
	ck_assert_int_eq(
	    model_load(tu_shared_path("models/stories260K.gguf"), &opt, &m, err, sizeof(err)), 0);
	model_free(m);
	char bad[65];
	memcpy(bad, want, 65);
	bad[10] = bad[10] == '0' ? '1' : '0';
	opt.expected_sha256 = bad;
	ck_assert_int_lt(
	    model_load(tu_shared_path("models/stories260K.gguf"), &opt, &m, err, sizeof(err)), 0);
	ck_assert_ptr_null(m);
	ck_assert_ptr_nonnull(strstr(err, "SHA-256 mismatch"));
	ck_assert_ptr_nonnull(strstr(err, bad));
	ck_assert_ptr_nonnull(strstr(err, want));
	ck_assert_ptr_nonnull(strstr(err, "stories260K.gguf"));
}
END_TEST

/* ------------------------------------------------------------------------
 * Synthetic models. */

struct spec {
	const char *arch;
	int dim, heads, kv_heads, ffn, layers, vocab;
	enum ggml_type matrix_type[7]; /* wq wk wv wo gate up down */
	enum ggml_type embd_type, norm_type, bias_type;
	int tied, bias;
	const char *omit;      /* tensor left out */
	const char *bad_dims;  /* tensor written with rows and cols swapped */
	const char *odd_type;  /* tensor written as IQ2_XS */
	uint32_t alignment;    /* general.alignment, 0 = default */
	int pad_bytes;         /* general.name this long, to shift the data */
	const char *extra_key; /* an extra u32 metadata key (full name) ... */
	uint32_t extra_value;  /* ... and its value */
};

static uint64_t rng_state;

static uint32_t rng_u32(void)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(rng_state >> 33);
}

/* Plausible bytes of `n` elements of `type` (scales kept finite). */
static void fill(enum ggml_type type, uint8_t *p, size_t n_bytes)
{
	for (size_t i = 0; i < n_bytes; i++)
		p[i] = (uint8_t)rng_u32();
	uint16_t h = f32_to_fp16(0.01f);
	size_t bb = ggml_row_bytes(type, ggml_block_size(type));
	for (size_t b = 0; b + bb <= n_bytes; b += bb) {
		switch ((int)type) {
		case GGML_TYPE_F32:
			for (size_t k = 0; k < bb; k += 4) {
				float v = (float)((int)(rng_u32() % 2001) - 1000) * 1e-4f;
				memcpy(p + b + k, &v, 4);
			}
			break;
		case GGML_TYPE_F16:
		case GGML_TYPE_BF16: {
			float v = (float)((int)(rng_u32() % 2001) - 1000) * 1e-4f;
			uint16_t e = type == GGML_TYPE_F16 ? f32_to_fp16(v) : f32_to_bf16(v);
			memcpy(p + b, &e, 2);
			break;
		}
		case GGML_TYPE_Q6_K:
			memcpy(p + b + 208, &h, 2);
			break;
		case GGML_TYPE_Q4_K:
		case GGML_TYPE_Q5_K:
		case GGML_TYPE_Q4_1:
		case GGML_TYPE_Q5_1:
			memcpy(p + b + 2, &h, 2); /* fall through */
		default:
			memcpy(p + b, &h, 2);
			break;
		}
	}
}

/* Types and sizes of the tensors added so far, for streaming their data. */
struct added {
	enum ggml_type type;
	size_t n_bytes;
};
static struct added added[256];
static int n_added;

static void add(struct gguf_writer *w, const struct spec *s, const char *name, enum ggml_type type,
                uint64_t cols, uint64_t rows)
{
	if (s->omit && strcmp(name, s->omit) == 0)
		return;
	if (s->odd_type && strcmp(name, s->odd_type) == 0)
		type = (enum ggml_type)17; /* IQ2_XS */
	uint64_t dims[2] = {cols, rows};
	if (s->bad_dims && strcmp(name, s->bad_dims) == 0) {
		dims[0] = rows;
		dims[1] = cols;
	}
	ck_assert_int_eq(gguf_writer_add_tensor(w, name, type, rows ? 2 : 1, dims), 0);
	ck_assert_int_lt(n_added, 256);
	added[n_added].type = type;
	added[n_added++].n_bytes = ggml_row_bytes(type, dims[0]) * (rows ? dims[1] : 1);
}

/* Adds every tensor of the model described by s (order of stories260K). */
static void add_all(struct gguf_writer *w, const struct spec *s)
{
	uint64_t d = (uint64_t)s->dim, kv = d / (uint64_t)s->heads * (uint64_t)s->kv_heads;
	uint64_t f = (uint64_t)s->ffn;
	char n[64];
	add(w, s, "token_embd.weight", s->embd_type, d, (uint64_t)s->vocab);
	add(w, s, "output_norm.weight", s->norm_type, d, 0);
	if (!s->tied)
		add(w, s, "output.weight", s->embd_type, d, (uint64_t)s->vocab);
	for (int l = 0; l < s->layers; l++) {
		static const char *const mats[7] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
		                                    "ffn_gate", "ffn_up", "ffn_down"};
		uint64_t cols[7] = {d, d, d, d, d, d, f}, rows[7] = {d, kv, kv, d, f, f, d};
		for (int k = 0; k < 7; k++) {
			snprintf(n, sizeof(n), "blk.%d.%s.weight", l, mats[k]);
			add(w, s, n, s->matrix_type[k], cols[k], rows[k]);
		}
		snprintf(n, sizeof(n), "blk.%d.attn_norm.weight", l);
		add(w, s, n, s->norm_type, d, 0);
		snprintf(n, sizeof(n), "blk.%d.ffn_norm.weight", l);
		add(w, s, n, s->norm_type, d, 0);
		if (!s->bias)
			continue;
		uint64_t blen[3] = {d, kv, kv};
		static const char *const bn[3] = {"attn_q", "attn_k", "attn_v"};
		for (int k = 0; k < 3; k++) {
			snprintf(n, sizeof(n), "blk.%d.%s.bias", l, bn[k]);
			add(w, s, n, s->bias_type, blen[k], 0);
		}
	}
}

static void write_model(const char *path, const struct spec *s)
{
	char err[SINKD_ERR_LEN], key[96];
	struct gguf_writer *w;
	ck_assert_int_eq(gguf_writer_new(path, &w, err, sizeof(err)), 0);
	ck_assert_int_eq(gguf_writer_add_string(w, "general.architecture", s->arch), 0);
	const char *keys[5] = {"embedding_length", "block_count", "feed_forward_length",
	                       "attention.head_count", "attention.head_count_kv"};
	int vals[5] = {s->dim, s->layers, s->ffn, s->heads, s->kv_heads};
	for (int i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "%s.%s", s->arch, keys[i]);
		ck_assert_int_eq(gguf_writer_add_u32(w, key, (uint32_t)vals[i]), 0);
	}
	snprintf(key, sizeof(key), "%s.rope.freq_base", s->arch);
	ck_assert_int_eq(gguf_writer_add_f32(w, key, 1e6f), 0);
	if (s->alignment)
		ck_assert_int_eq(gguf_writer_set_alignment(w, s->alignment), 0);
	if (s->extra_key)
		ck_assert_int_eq(gguf_writer_add_u32(w, s->extra_key, s->extra_value), 0);
	/* a longer header moves every tensor's data: with alignment 1 the data
	 * section starts right after it (a padding tensor would be refused) */
	if (s->pad_bytes)
		ck_assert_int_eq(
		    gguf_writer_add_string(w, "general.name", &"xxxx"[4 - s->pad_bytes]), 0);
	n_added = 0;
	add_all(w, s);
	ck_assert_int_eq(gguf_writer_write_header(w, err, sizeof(err)), 0);
	rng_state = 42;
	for (int i = 0; i < n_added; i++) {
		uint8_t *buf = malloc(added[i].n_bytes);
		fill(added[i].type, buf, added[i].n_bytes);
		ck_assert_int_eq(gguf_writer_write_data(w, buf, added[i].n_bytes, err, sizeof(err)),
		                 0);
		free(buf);
	}
	ck_assert_int_eq(gguf_writer_finish(w, err, sizeof(err)), 0);
	gguf_writer_free(w);
}

static struct spec base_spec(void)
{
	struct spec s = {.arch = "llama",
	                 .dim = 256,
	                 .heads = 4,
	                 .kv_heads = 2,
	                 .ffn = 512,
	                 .layers = 2,
	                 .vocab = 40,
	                 .embd_type = GGML_TYPE_F32,
	                 .norm_type = GGML_TYPE_F32,
	                 .bias_type = GGML_TYPE_F32};
	for (int k = 0; k < 7; k++)
		s.matrix_type[k] = GGML_TYPE_F32;
	return s;
}

/* Loads; on success returns the model, on failure NULL with err filled. */
static struct model *load(const char *path, char *err)
{
	struct model *m = NULL;
	int rc = model_load(path, NULL, &m, err, SINKD_ERR_LEN);
	ck_assert(rc == 0 ? m != NULL : m == NULL);
	return m;
}

/* The matrix equals the tensor dequantized row by row (rounded to the
 * nearest F16 where the loader converted a block type to F16). */
static void check_matrix(const struct model *m, const struct weight_matrix *w, const char *name)
{
	const struct gguf_tensor *t = gguf_find_tensor(m->file, name);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(w->cols, (int)t->dims[0]);
	ck_assert_int_eq(w->rows, (int)t->dims[1]);
	float *want = malloc((size_t)w->cols * sizeof(float));
	float *got = malloc((size_t)w->cols * sizeof(float));
	size_t trow = ggml_row_bytes(t->type, t->dims[0]);
	for (int r = 0; r < w->rows; r++) {
		dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * trow, want,
		               (uint64_t)w->cols);
		dequantize_row(w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes, got,
		               (uint64_t)w->cols);
		if (w->type == GGML_TYPE_F16 && t->type != GGML_TYPE_F16)
			for (int i = 0; i < w->cols; i++)
				want[i] = fp16_to_f32(f32_to_fp16(want[i]));
		ck_assert_int_eq(memcmp(want, got, (size_t)w->cols * sizeof(float)), 0);
	}
	free(want);
	free(got);
}

START_TEST(test_storage_types)
{
	char path[64], err[SINKD_ERR_LEN];
	tu_temp_file(path, sizeof(path), "sinkd-test-model", NULL, 0);
	struct spec s = base_spec();
	enum ggml_type types[7] = {GGML_TYPE_Q4_K, GGML_TYPE_Q8_0, GGML_TYPE_BF16, GGML_TYPE_F16,
	                           GGML_TYPE_Q6_K, GGML_TYPE_Q5_K, GGML_TYPE_Q4_0};
	memcpy(s.matrix_type, types, sizeof(types));
	s.embd_type = GGML_TYPE_Q5_1;
	s.norm_type = GGML_TYPE_BF16;
	s.tied = 1;
	write_model(path, &s);
	struct model *m = load(path, err);
	ck_assert_msg(m != NULL, "%s", err);
	ck_assert(m->hp.tied_output);
	ck_assert_int_eq(m->hp.n_vocab, 40);
	ck_assert_double_eq(m->hp.rope_theta, 1e6);
	ck_assert_int_eq(m->hp.rope_dim, 64);
	ck_assert_int_eq(m->hp.context_length, 2048); /* default */
	const struct model_layer *l = &m->layers[1];
	/* native types stay in the mapping; the rest (Q5_1) become F16 */
	const struct weight_matrix *kept[7] = {&l->wq,     &l->wk,   &l->wv,    &l->wo,
	                                       &l->w_gate, &l->w_up, &l->w_down};
	static const char *const kept_names[7] = {
	    "blk.1.attn_q.weight",      "blk.1.attn_k.weight",   "blk.1.attn_v.weight",
	    "blk.1.attn_output.weight", "blk.1.ffn_gate.weight", "blk.1.ffn_up.weight",
	    "blk.1.ffn_down.weight"};
	for (int k = 0; k < 7; k++) {
		ck_assert_int_eq(kept[k]->type, types[k]);
		ck_assert_ptr_eq(kept[k]->data, gguf_find_tensor(m->file, kept_names[k])->data);
	}
	ck_assert_uint_eq(l->wk.row_bytes, 8 * 34);
	ck_assert_int_eq(m->token_embd.type, GGML_TYPE_F16);
	ck_assert_ptr_eq(m->output.data, m->token_embd.data);
	check_matrix(m, &l->wq, "blk.1.attn_q.weight");
	check_matrix(m, &l->wk, "blk.1.attn_k.weight");
	check_matrix(m, &l->wv, "blk.1.attn_v.weight");
	check_matrix(m, &l->w_gate, "blk.1.ffn_gate.weight");
	check_matrix(m, &l->w_up, "blk.1.ffn_up.weight");
	check_matrix(m, &l->w_down, "blk.1.ffn_down.weight");
	check_matrix(m, &m->token_embd, "token_embd.weight");
	/* BF16 norms were converted to F32 */
	const struct gguf_tensor *nt = gguf_find_tensor(m->file, "blk.0.ffn_norm.weight");
	for (int i = 0; i < m->hp.dim; i++) {
		uint16_t b;
		memcpy(&b, (const uint8_t *)nt->data + 2 * i, 2);
		ck_assert_float_eq(m->layers[0].ffn_norm[i], bf16_to_f32(b));
	}
	ck_assert(!m->hp.has_qkv_bias);
	model_free(m);
	unlink(path);
}
END_TEST

START_TEST(test_qwen2_biases)
{
	char path[64], err[SINKD_ERR_LEN];
	tu_temp_file(path, sizeof(path), "sinkd-test-model", NULL, 0);
	struct spec s = base_spec();
	s.arch = "qwen2";
	s.bias = 1;
	s.bias_type = GGML_TYPE_F16;
	write_model(path, &s);
	struct model *m = load(path, err);
	ck_assert_msg(m != NULL, "%s", err);
	ck_assert_ptr_eq(m->hp.arch, model_arch_find("qwen2"));
	ck_assert(m->hp.has_qkv_bias);
	ck_assert(!m->hp.tied_output);
	const struct gguf_tensor *bk = gguf_find_tensor(m->file, "blk.1.attn_k.bias");
	ck_assert_uint_eq(bk->dims[0], 128);
	for (int i = 0; i < 128; i++) {
		uint16_t h;
		memcpy(&h, (const uint8_t *)bk->data + 2 * i, 2);
		ck_assert_float_eq(m->layers[1].bk[i], fp16_to_f32(h));
	}
	ck_assert_ptr_nonnull(m->layers[0].bq);
	ck_assert_ptr_nonnull(m->layers[0].bv);
	model_free(m);

	s.omit = "blk.1.attn_v.bias";
	write_model(path, &s);
	ck_assert_ptr_null(load(path, err));
	ck_assert_ptr_nonnull(strstr(err, "tensor 'blk.1.attn_v.bias' is missing"));
	ck_assert_ptr_nonnull(strstr(err, path));
	unlink(path);
}
END_TEST

START_TEST(test_shape_and_type_errors)
{
	char path[64], err[SINKD_ERR_LEN];
	tu_temp_file(path, sizeof(path), "sinkd-test-model", NULL, 0);
	struct spec s = base_spec();
	s.bad_dims = "blk.1.attn_k.weight";
	write_model(path, &s);
	ck_assert_ptr_null(load(path, err));
	ck_assert_msg(
	    strstr(err, "tensor 'blk.1.attn_k.weight' has dims [128, 256], expected [256, 128]"),
	    "%s", err);

	s = base_spec();
	s.odd_type = "blk.0.ffn_down.weight";
	write_model(path, &s);
	ck_assert_ptr_null(load(path, err));
	ck_assert_msg(strstr(err, "tensor 'blk.0.ffn_down.weight' has type IQ2_XS, which sinkd "
	                          "does not support; supported: F32"),
	              "%s", err);

	s = base_spec();
	s.omit = "output_norm.weight";
	write_model(path, &s);
	ck_assert_ptr_null(load(path, err));
	ck_assert_ptr_nonnull(strstr(err, "tensor 'output_norm.weight' is missing"));

	s = base_spec();
	s.arch = "gpt2";
	write_model(path, &s);
	ck_assert_ptr_null(load(path, err));
	ck_assert_ptr_nonnull(strstr(err, "architecture 'gpt2' is not supported"));

	s = base_spec();
	s.extra_key = "llama.expert_count";
	s.extra_value = 8;
	write_model(path, &s);
	ck_assert_ptr_null(load(path, err));
	ck_assert_msg(strstr(err, "mixture-of-experts models (llama.expert_count 8)"), "%s", err);

	/* key_length without value_length: values stay 256 / 4 wide, which
	 * sinkd's cache (one width for both) does not hold */
	s = base_spec();
	s.extra_key = "llama.attention.key_length";
	s.extra_value = 128;
	write_model(path, &s);
	ck_assert_ptr_null(load(path, err));
	ck_assert_msg(strstr(err, "'llama.attention.value_length' 64 differs from "
	                          "'llama.attention.key_length' 128"),
	              "%s", err);

	s = base_spec();
	s.extra_key = "llama.attention.key_length"; /* equal to the default: fine */
	s.extra_value = 64;
	write_model(path, &s);
	struct model *m = load(path, err);
	ck_assert_msg(m != NULL, "%s", err);
	model_free(m);

	/* a "llama.*" key the row does not know is refused by name, never
	 * ignored; keys that do not change the forward pass are fine */
	const char *unknown[] = {"llama.attention.sliding_window", "llama.foo",
	                         "llama.rope.scaling.yarn_ext_factor", "llama.logit_scale"};
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		s = base_spec();
		s.extra_key = unknown[i];
		s.extra_value = 4096;
		write_model(path, &s);
		ck_assert_ptr_null(load(path, err));
		char want[160];
		snprintf(want, sizeof(want),
		         "key '%s' is not one sinkd knows for architecture 'llama'", unknown[i]);
		ck_assert_msg(strstr(err, want), "%s", err);
		ck_assert_ptr_nonnull(strstr(err, path));
	}
	const char *known[] = {"llama.vocab_size", "llama.rope.scaling.original_context_length",
	                       "llama.context_length", "qwen2.foo" /* not this row's prefix */};
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		s = base_spec();
		s.extra_key = known[i];
		s.extra_value = 4096;
		write_model(path, &s);
		m = load(path, err);
		ck_assert_msg(m != NULL, "%s: %s", known[i], err);
		model_free(m);
	}

	s = base_spec();
	s.kv_heads = 3; /* 4 heads do not split into 3 groups */
	write_model(path, &s);
	ck_assert_ptr_null(load(path, err));
	ck_assert_ptr_nonnull(strstr(err, "head_count_kv 3"));
	unlink(path);
}
END_TEST

/* general.alignment = 1: F32 data at odd addresses is copied to aligned
 * model memory (never read through a misaligned float pointer). */
START_TEST(test_unaligned_data)
{
	char path[64], err[SINKD_ERR_LEN];
	tu_temp_file(path, sizeof(path), "sinkd-test-model", NULL, 0);
	int misaligned = 0;
	for (int pad = 1; pad <= 3; pad++) {
		struct spec s = base_spec();
		s.alignment = 1;
		s.pad_bytes = pad;
		s.matrix_type[2] = GGML_TYPE_BF16;
		write_model(path, &s);
		struct model *m = load(path, err);
		ck_assert_msg(m != NULL, "%s", err);
		const struct model_layer *l = &m->layers[0];
		const struct weight_matrix *mats[3] = {&l->wq, &l->wv, &m->token_embd};
		const char *names[3] = {"blk.0.attn_q.weight", "blk.0.attn_v.weight",
		                        "token_embd.weight"};
		for (int k = 0; k < 3; k++) {
			const struct gguf_tensor *t = gguf_find_tensor(m->file, names[k]);
			size_t need = t->type == GGML_TYPE_F32 ? 4 : 2;
			ck_assert_uint_eq((uintptr_t)mats[k]->data % need, 0);
			if ((uintptr_t)t->data % need != 0) {
				misaligned++;
				ck_assert_ptr_ne(mats[k]->data, t->data);
			}
			check_matrix(m, mats[k], names[k]);
		}
		const struct gguf_tensor *nt = gguf_find_tensor(m->file, "blk.0.attn_norm.weight");
		ck_assert_uint_eq((uintptr_t)l->attn_norm % 4, 0);
		ck_assert_int_eq(memcmp(l->attn_norm, nt->data, 256 * 4), 0);
		model_free(m);
	}
	ck_assert_int_gt(misaligned, 0);
	unlink(path);
}
END_TEST

/* ------------------------------------------------------------------------
 * sinkd-mkmodel. */

START_TEST(test_mkmodel)
{
	if (mkmodel_path == NULL) {
		tu_skip("test_mkmodel: no sinkd-mkmodel path given");
		return;
	}
	char p1[64], p2[64], err[SINKD_ERR_LEN];
	tu_temp_file(p1, sizeof(p1), "sinkd-test-model", NULL, 0);
	tu_temp_file(p2, sizeof(p2), "sinkd-test-model", NULL, 0);
	const char *vocab = strdup(tu_shared_path("vocab/ggml-vocab-llama-spm.gguf"));
	char *argv1[] = {(char *)mkmodel_path,
	                 "--out",
	                 p1,
	                 "--vocab",
	                 (char *)vocab,
	                 "--dim",
	                 "64",
	                 "--layers",
	                 "2",
	                 "--heads",
	                 "4",
	                 "--kv-heads",
	                 "2",
	                 "--ffn",
	                 "96",
	                 "--type",
	                 "q8_0",
	                 "--seed",
	                 "7",
	                 "--context",
	                 "512",
	                 NULL};
	ck_assert_int_eq(tu_run_quiet(argv1), 0);
	struct model *m = load(p1, err);
	ck_assert_msg(m != NULL, "%s", err);
	ck_assert_int_eq(m->hp.n_vocab, 32000);
	ck_assert_int_eq(m->hp.dim, 64);
	ck_assert_int_eq(m->hp.n_layers, 2);
	ck_assert_int_eq(m->hp.n_kv_heads, 2);
	ck_assert_int_eq(m->hp.ffn_dim, 96);
	ck_assert_int_eq(m->hp.context_length, 512);
	ck_assert_int_eq(m->layers[0].wq.type, GGML_TYPE_Q8_0);
	ck_assert_float_eq(m->layers[1].attn_norm[63], 1.0f);
	/* weights look like N(0, 0.02) */
	float row[96];
	double sum = 0, sum2 = 0;
	for (int r = 0; r < 64; r++) {
		dequantize_row(GGML_TYPE_Q8_0,
		               (const uint8_t *)m->layers[1].w_down.data +
		                   r * m->layers[1].w_down.row_bytes,
		               row, 96);
		for (int i = 0; i < 96; i++) {
			sum += row[i];
			sum2 += (double)row[i] * row[i];
		}
	}
	double n = 64 * 96, mean = sum / n, sd = sqrt(sum2 / n - mean * mean);
	ck_assert_double_lt(fabs(mean), 0.002);
	ck_assert_double_gt(sd, 0.018);
	ck_assert_double_lt(sd, 0.022);
	/* tokenizer keys were copied */
	const char *s;
	size_t len;
	ck_assert_int_eq(gguf_get_array_string(m->file, "tokenizer.ggml.tokens", 31999, &s, &len),
	                 0);
	bool add_bos;
	ck_assert_int_eq(gguf_get_bool(m->file, "tokenizer.ggml.add_bos_token", &add_bos), 0);
	model_free(m);

	/* same seed, same bytes; tied output drops output.weight */
	char *argv2[] = {(char *)mkmodel_path,
	                 "--out",
	                 p2,
	                 "--vocab-size",
	                 "300",
	                 "--dim",
	                 "32",
	                 "--layers",
	                 "1",
	                 "--heads",
	                 "2",
	                 "--ffn",
	                 "64",
	                 "--tied",
	                 "--type",
	                 "bf16",
	                 NULL};
	ck_assert_int_eq(tu_run_quiet(argv2), 0);
	m = load(p2, err);
	ck_assert_msg(m != NULL, "%s", err);
	ck_assert_int_eq(m->hp.n_vocab, 300);
	ck_assert(m->hp.tied_output);
	ck_assert_int_eq(m->hp.n_kv_heads, 2);
	model_free(m);
	char h1[65], h2[65];
	ck_assert_int_eq(digest_file_sha256_hex(p2, h1, err, sizeof(err)), 0);
	ck_assert_int_eq(tu_run_quiet(argv2), 0);
	ck_assert_int_eq(digest_file_sha256_hex(p2, h2, err, sizeof(err)), 0);
	ck_assert_str_eq(h1, h2);

	char *bad[] = {(char *)mkmodel_path,
	               "--out",
	               p2,
	               "--dim",
	               "30",
	               "--layers",
	               "1",
	               "--heads",
	               "4",
	               "--ffn",
	               "64",
	               NULL};
	ck_assert_int_eq(tu_run_quiet(bad), 2);
	unlink(p1);
	unlink(p2);
	free((void *)vocab);
}
END_TEST

/* ------------------------------------------------------------------------
 * Block-type models written by sinkd-mkmodel: memory and logits. */

static const char *const block_types[] = {"q8_0", "q4_0", "q4_k", "q5_k",
                                          "q6_k", "q4_1", "q5_0", "q5_1"};
#define N_BLOCK_TYPES (int)(sizeof(block_types) / sizeof(block_types[0]))

/* Whether the engine reads the type as stored (else the loader makes F16). */
static bool kept_as_stored(const char *type)
{
	return strcmp(type, "q4_1") && strcmp(type, "q5_0") && strcmp(type, "q5_1");
}

/* Writes a synthetic model of `type` with sinkd-mkmodel; from: convert that
 * file instead of making one.  shape: "--dim"... pairs, NULL-terminated. */
static void mkmodel(const char *out, const char *type, const char *from, const char *const *shape)
{
	char *argv[32];
	int n = 0;
	argv[n++] = (char *)mkmodel_path;
	argv[n++] = "--out";
	argv[n++] = (char *)out;
	argv[n++] = "--type";
	argv[n++] = (char *)type;
	if (from) {
		argv[n++] = "--from";
		argv[n++] = (char *)from;
	}
	for (int i = 0; !from && shape[i] && n < 30; i++)
		argv[n++] = (char *)shape[i];
	argv[n] = NULL;
	ck_assert_msg(tu_run_quiet(argv) == 0, "sinkd-mkmodel --type %s failed", type);
}

/* Resident bytes of this process: file-backed pages (file) and anonymous
 * ones (anon), from /proc/self/status.  A file on tmpfs (a CI machine's
 * /tmp, say) is mapped as shared memory, so RssShmem counts as file too. */
static void resident_bytes(size_t *file, size_t *anon)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned long kb;
	*file = *anon = 0;
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "RssFile: %lu kB", &kb) == 1 ||
		    sscanf(line, "RssShmem: %lu kB", &kb) == 1)
			*file += (size_t)kb << 10;
		else if (sscanf(line, "RssAnon: %lu kB", &kb) == 1)
			*anon = (size_t)kb << 10;
	}
	fclose(f);
}

/* Every weight matrix the forward pass reads (the head once when tied). */
static int model_matrices(const struct model *m, const struct weight_matrix **out)
{
	int n = 0;
	out[n++] = &m->token_embd;
	if (!m->hp.tied_output)
		out[n++] = &m->output;
	for (int l = 0; l < m->hp.n_layers; l++) {
		const struct model_layer *L = &m->layers[l];
		const struct weight_matrix *ws[7] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
		                                     &L->w_gate, &L->w_up, &L->w_down};
		for (int k = 0; k < 7; k++)
			out[n++] = ws[k];
	}
	return n;
}

/* Memory of each type's model: the bytes of the weight matrices as the
 * model holds them (pointing into the mapping or model-owned) against the
 * bytes of those tensors in the file: within 10% for the types kept as
 * stored (they are equal), 2 bytes per weight for the F16 conversions.
 * And what the process really holds after the load and a read of every
 * weight byte, from /proc/self/status against before the load: resident
 * file pages within 10% (+ 512 KiB of metadata, vectors and code) of the
 * kept matrices' bytes (none for the F16 conversions: their file pages were
 * given back), and anonymous memory at most the converted matrices' bytes
 * + 10% + 512 KiB (less when the allocator reuses pages it kept).  One
 * type per run (_i indexes block_types). */
START_TEST(test_block_type_memory)
{
	if (mkmodel_path == NULL) {
		tu_skip("test_block_type_memory: no sinkd-mkmodel path given");
		return;
	}
	static const char *const shape[] = {"--dim", "512",  "--layers",     "2",    "--heads", "4",
	                                    "--ffn", "1024", "--vocab-size", "2048", NULL};
	char path[64], err[SINKD_ERR_LEN];
	{
		int t = _i;
		tu_temp_file(path, sizeof(path), "sinkd-test-model", NULL, 0);
		mkmodel(path, block_types[t], NULL, shape);
		size_t file0, anon0, file1, anon1;
		resident_bytes(&file0, &anon0);
		struct model *m = load(path, err);
		ck_assert_msg(m != NULL, "%s", err);
		const struct weight_matrix *ws[64];
		int n = model_matrices(m, ws);
		size_t held = 0, in_file = 0, params = 0;
		uint64_t sum = 0;
		for (int i = 0; i < n; i++) {
			size_t bytes = (size_t)ws[i]->rows * ws[i]->row_bytes;
			held += bytes;
			params += (size_t)ws[i]->rows * (size_t)ws[i]->cols;
			for (size_t k = 0; k < bytes; k += 64)
				sum += ((const uint8_t *)ws[i]->data)[k];
		}
		for (size_t i = 0; i < gguf_n_tensors(m->file); i++)
			if (gguf_tensor_at(m->file, i)->n_dims == 2)
				in_file += gguf_tensor_at(m->file, i)->n_bytes;
		resident_bytes(&file1, &anon1);
		double df = (double)file1 - (double)file0, da = (double)anon1 - (double)anon0;
		bool kept = kept_as_stored(block_types[t]);
		printf("memory %-5s file matrices %8zu bytes, held %8zu (%.2fx); resident file "
		       "%+9.0f, anon %+9.0f [%u]\n",
		       block_types[t], in_file, held, (double)held / (double)in_file, df, da,
		       (unsigned)(sum & 1));
		/* metadata, vectors, code pages, each matrix's partial end pages */
		double slack = 512 << 10, shadow = 0;
#if TU_UNDER_ASAN
		/* AddressSanitizer maps a shadow byte for every 8 the reads above
		 * touch, and its instrumented code has more pages. */
		shadow = (double)held / 8;
		slack = 1 << 20;
#endif
		if (kept) {
			ck_assert_double_le(fabs((double)held - (double)in_file), 0.1 * in_file);
			ck_assert_double_le(fabs(df - (double)held), 0.1 * held + slack);
			ck_assert_double_le(da, shadow + slack);
		} else {
			ck_assert_uint_eq(held, 2 * params);
			ck_assert_double_le(df, slack);
			ck_assert_double_le(da, 1.1 * held + shadow + slack);
		}
		model_free(m);
		unlink(path);
	}
}
END_TEST

/* Full-precision cache large enough that nothing is evicted. */
static struct cache_geometry plain_geometry(const struct model_hparams *hp)
{
	struct cache_geometry g = tu_model_geometry(hp, 1024);
	g.max_context_length = 2048;
	return g;
}

#define LOGIT_PROMPT 16 /* tokens fed as one batch */
#define LOGIT_STEPS 4   /* then one at a time */

/* The model's logits after the prompt (logits[0]) and after each decode
 * step (logits[1 + k]), each (n_vocab), on a 2-thread CPU backend. */
static void model_logits(const struct model *m, float *logits)
{
	struct backend *be = NULL;
	struct backend_session *s = NULL;
	struct backend_options opt = {.n_threads = 2, .parallel_min_macs = 1};
	char err[SINKD_ERR_LEN];
	ck_assert_msg(backend_cpu_new(m, &opt, &be, err, sizeof(err)) == 0, "%s", err);
	struct cache_geometry g = plain_geometry(&m->hp);
	ck_assert_msg(be->ops->session_new(be, &g, &s, err, sizeof(err)) == 0, "%s", err);
	struct backend_token batch[LOGIT_PROMPT];
	int n_vocab = m->hp.n_vocab;
	for (int i = 0; i < LOGIT_PROMPT; i++)
		batch[i] = (struct backend_token){.session = s,
		                                  .token = (i * 37 + 5) % n_vocab,
		                                  .want_logits = i == LOGIT_PROMPT - 1};
	ck_assert_msg(be->ops->forward(be, batch, LOGIT_PROMPT, logits, err, sizeof(err)) == 0,
	              "%s", err);
	for (int k = 0; k < LOGIT_STEPS; k++) {
		batch[0] = (struct backend_token){
		    .session = s, .token = (k * 101 + 7) % n_vocab, .want_logits = true};
		ck_assert_msg(be->ops->forward(be, batch, 1, logits + (size_t)(k + 1) * n_vocab,
		                               err, sizeof(err)) == 0,
		              "%s", err);
	}
	be->ops->session_free(be, s);
	backend_free(be);
}

/* Largest |a - b| relative to the largest |b|, over n values. */
static double relative_diff(const float *a, const float *b, int n)
{
	double d = 0, scale = 0;
	for (int i = 0; i < n; i++) {
		d = fmax(d, fabs((double)a[i] - b[i]));
		scale = fmax(scale, fabs((double)b[i]));
	}
	ck_assert_msg(scale > 0.01, "degenerate logits");
	return d / scale;
}

/* SINKD_TEST_LOGIT_SHAPE="--dim 768 --layers 12 ..." replaces the small
 * model below with another shape of sinkd-mkmodel (tests/bench/quant-logits.sh
 * runs the 134M one, too slow for the suite); false when it is unset. */
static bool logit_shape(const char **argv, int max, char *buf, size_t buf_len)
{
	const char *env = getenv("SINKD_TEST_LOGIT_SHAPE");
	if (env == NULL || *env == '\0')
		return false;
	ck_assert_msg(strlen(env) < buf_len, "SINKD_TEST_LOGIT_SHAPE is longer than %zu", buf_len);
	strcpy(buf, env);
	int n = 0;
	for (char *save = NULL, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		ck_assert_msg(n < max - 1, "SINKD_TEST_LOGIT_SHAPE has more than %d words", max - 1);
		argv[n++] = w;
	}
	argv[n] = NULL;
	return n > 0;
}

/* A model in each block type gives the logits of its F32 conversion
 * (sinkd-mkmodel --from, the dequantized reference), prompt and decode
 * steps.  What differs is the activations' rounding to int8 blocks in
 * the qdot products (the F16 conversions round weights to F16 instead):
 * measured up to about 1.7% of the largest logit on this model and 3.1% on
 * the 134M one (tests/bench/results/quant-logits.txt), asserted within 4%.
 * One type per run (_i indexes block_types). */
START_TEST(test_block_type_logits)
{
	if (mkmodel_path == NULL) {
		tu_skip("test_block_type_logits: no sinkd-mkmodel path given");
		return;
	}
	static const char *const small_shape[] = {"--dim", "256", "--layers",     "2",   "--heads",
	                                          "4",     "--ffn", "512", "--vocab-size", "512",
	                                          NULL};
	const char *parsed[24];
	char shape_buf[256];
	const char *const *shape =
	    logit_shape(parsed, 24, shape_buf, sizeof(shape_buf)) ? parsed : small_shape;
	char qpath[64], fpath[64], err[SINKD_ERR_LEN];
	{
		int t = _i;
		tu_temp_file(qpath, sizeof(qpath), "sinkd-test-model", NULL, 0);
		tu_temp_file(fpath, sizeof(fpath), "sinkd-test-model", NULL, 0);
		mkmodel(qpath, block_types[t], NULL, shape);
		mkmodel(fpath, "f32", qpath, NULL);
		struct model *q = load(qpath, err);
		ck_assert_msg(q != NULL, "%s", err);
		struct model *f = load(fpath, err);
		ck_assert_msg(f != NULL, "%s", err);
		ck_assert_int_eq(f->layers[0].wq.type, GGML_TYPE_F32);
		int n_vocab = q->hp.n_vocab;
		size_t n = (size_t)(1 + LOGIT_STEPS) * n_vocab;
		float *lq = malloc(n * sizeof(float)), *lf = malloc(n * sizeof(float));
		model_logits(q, lq);
		model_logits(f, lf);
		double worst = 0;
		for (int k = 0; k <= LOGIT_STEPS; k++)
			worst = fmax(worst, relative_diff(lq + (size_t)k * n_vocab,
			                                  lf + (size_t)k * n_vocab, n_vocab));
		printf("logits %-5s vs its f32 conversion: max |diff| %.4f of the largest logit\n",
		       block_types[t], worst);
		ck_assert_msg(worst < 0.04, "%s: logits differ by %.4f of their scale",
		              block_types[t], worst);
		free(lq);
		free(lf);
		model_free(q);
		model_free(f);
		unlink(qpath);
		unlink(fpath);
	}
}
END_TEST

/* stories260K rewritten as a Llama 3.1 converter would write it, with
 * rope_freqs.weight (llama3's per-pair RoPE frequency factors): factors of
 * 1 change no logit bit, factors 1, 2, 4, 8 change the logits, linear
 * scaling by 2 equals factors of 2; rope.scaling.attn_factor scales the
 * rotated dims (other logits); yarn loads; a tensor of the wrong shape and
 * a RoPE scaling type sinkd does not compute are refused with their names. */
static void stories_with(char *path, size_t len, const float *f, uint64_t n, const char *key,
                         const char *value)
{
	tu_temp_file(path, len, "sinkd-test-rope", NULL, 0);
	tu_gguf_with(tu_shared_path("models/stories260K.gguf"), path,
	             f ? "rope_freqs.weight" : NULL, f, n, key, value);
}

START_TEST(test_rope_freqs)
{
	char err[SINKD_ERR_LEN], path[64];
	struct model *base = load(tu_shared_path("models/stories260K.gguf"), err);
	ck_assert_msg(base != NULL, "%s", err);
	int n_vocab = base->hp.n_vocab, half = base->hp.rope_dim / 2;
	size_t n = (size_t)(1 + LOGIT_STEPS) * n_vocab;
	float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
	model_logits(base, want);
	float f[64];
	ck_assert_int_le(half, 64);
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < half; i++)
			f[i] = pass ? (float)(1 << (i % 8)) : 1.0f;
		stories_with(path, sizeof(path), f, (uint64_t)half, NULL, NULL);
		struct model *m = load(path, err);
		ck_assert_msg(m != NULL, "%s", err);
		ck_assert_ptr_nonnull(m->hp.rope_factors);
		ck_assert(m->hp.rope_factors[half - 1] == f[half - 1]);
		model_logits(m, got);
		if (pass == 0)
			ck_assert_int_eq(memcmp(got, want, n * sizeof(float)), 0);
		else
			ck_assert_msg(relative_diff(got, want, n_vocab) > 1e-3,
			              "factors 1, 2, 4, ... left the logits as they were");
		model_free(m);
		unlink(path);
	}
	/* linear scaling by 2 (no type: linear, as llama.cpp reads it) turns
	 * every pair as factors of 2 do, to the bit */
	for (int i = 0; i < half; i++)
		f[i] = 2.0f;
	stories_with(path, sizeof(path), f, (uint64_t)half, NULL, NULL);
	struct model *m2 = load(path, err);
	ck_assert_msg(m2 != NULL, "%s", err);
	model_logits(m2, want);
	model_free(m2);
	unlink(path);
	tu_temp_file(path, sizeof(path), "sinkd-test-rope", NULL, 0);
	tu_gguf_with_f32(tu_shared_path("models/stories260K.gguf"), path,
	                 "llama.rope.scaling.factor", 2.0f);
	m2 = load(path, err);
	ck_assert_msg(m2 != NULL, "%s", err);
	ck_assert(m2->hp.rope_freq_scale == 0.5);
	model_logits(m2, got);
	ck_assert_int_eq(memcmp(got, want, n * sizeof(float)), 0);
	model_free(m2);
	unlink(path);
	/* an attention factor multiplies the rotated dims of queries and keys */
	tu_temp_file(path, sizeof(path), "sinkd-test-rope", NULL, 0);
	tu_gguf_with_f32(tu_shared_path("models/stories260K.gguf"), path,
	                 "llama.rope.scaling.attn_factor", 1.5f);
	m2 = load(path, err);
	ck_assert_msg(m2 != NULL, "%s", err);
	ck_assert(m2->hp.rope_attn_scale == 1.5f);
	model_logits(m2, got);
	model_logits(base, want);
	ck_assert_msg(relative_diff(got, want, n_vocab) > 1e-3,
	              "rope.scaling.attn_factor 1.5 left the logits as they were");
	model_free(m2);
	unlink(path);
	/* one value too many */
	stories_with(path, sizeof(path), f, (uint64_t)half + 1, NULL, NULL);
	ck_assert_ptr_null(load(path, err));
	ck_assert_msg(strstr(err, "rope_freqs.weight") != NULL, "%s", err);
	unlink(path);
	/* scaling types: none, linear and yarn load, others are refused by name */
	stories_with(path, sizeof(path), NULL, 0, "llama.rope.scaling.type", "none");
	struct model *m = load(path, err);
	ck_assert_msg(m != NULL, "%s", err);
	model_free(m);
	unlink(path);
	stories_with(path, sizeof(path), NULL, 0, "llama.rope.scaling.type", "yarn");
	m = load(path, err);
	ck_assert_msg(m != NULL, "%s", err);
	ck_assert(m->hp.rope_ext_factor == 1.0);
	ck_assert_int_eq(m->hp.rope_ctx_orig, m->hp.context_length);
	model_free(m);
	unlink(path);
	stories_with(path, sizeof(path), NULL, 0, "llama.rope.scaling.type", "longrope");
	ck_assert_ptr_null(load(path, err));
	ck_assert_msg(strstr(err, "llama.rope.scaling.type") && strstr(err, "'longrope'") &&
	                  strstr(err, "yarn"),
	              "%s", err);
	unlink(path);
	free(want);
	free(got);
	model_free(base);
}
END_TEST

/* A tensor the loader would skip is refused, naming it: another
 * architecture's (Qwen3's QK-norm) and a layer beyond block_count; the
 * file without them loads, and an optional tensor the row knows
 * (rope_freqs.weight above) is read. */
START_TEST(test_unknown_tensors)
{
	char err[SINKD_ERR_LEN], path[64];
	const char *stories = tu_shared_path("models/stories260K.gguf");
	struct model *m = load(stories, err);
	ck_assert_msg(m != NULL, "%s", err);
	ck_assert_int_lt(m->hp.n_layers, 99);
	float f[8] = {1, 1, 1, 1, 1, 1, 1, 1};
	model_free(m);
	tu_temp_file(path, sizeof(path), "sinkd-test-tensor", NULL, 0);
	tu_gguf_with(stories, path, "blk.0.attn_q_norm.weight", f, 8, NULL, NULL);
	ck_assert_ptr_null(load(path, err));
	ck_assert_msg(strstr(err, "tensor 'blk.0.attn_q_norm.weight' is not part of a llama "
	                          "model (sinkd reads: token_embd.weight") &&
	                  strstr(err, "attn_q.weight"),
	              "%s", err);
	unlink(path);
	tu_temp_file(path, sizeof(path), "sinkd-test-tensor", NULL, 0);
	tu_gguf_with(stories, path, "blk.99.attn_q.weight", f, 8, NULL, NULL);
	ck_assert_ptr_null(load(path, err));
	ck_assert_msg(strstr(err, "tensor 'blk.99.attn_q.weight' is beyond the model's") &&
	                  strstr(err, "llama.block_count"),
	              "%s", err);
	unlink(path);
	/* a layer written with a leading zero is not layer 1 */
	tu_temp_file(path, sizeof(path), "sinkd-test-tensor", NULL, 0);
	tu_gguf_with(stories, path, "blk.01.attn_q.weight", f, 8, NULL, NULL);
	ck_assert_ptr_null(load(path, err));
	ck_assert_msg(strstr(err, "tensor 'blk.01.attn_q.weight' is not part"), "%s", err);
	unlink(path);
	/* blk.0 has no biases, so a later layer's bias would be skipped */
	tu_temp_file(path, sizeof(path), "sinkd-test-tensor", NULL, 0);
	tu_gguf_with(stories, path, "blk.1.attn_q.bias", f, 8, NULL, NULL);
	ck_assert_ptr_null(load(path, err));
	ck_assert_msg(strstr(err, "tensor 'blk.1.attn_q.bias'"), "%s", err);
	unlink(path);
	/* a model-level tensor no row knows */
	tu_temp_file(path, sizeof(path), "sinkd-test-tensor", NULL, 0);
	tu_gguf_with(stories, path, "rope_factors_long.weight", f, 8, NULL, NULL);
	ck_assert_ptr_null(load(path, err));
	ck_assert_msg(strstr(err, "tensor 'rope_factors_long.weight' is not part"), "%s", err);
	unlink(path);
}
END_TEST

int main(int argc, char **argv)
{
	mkmodel_path = argc > 1 ? argv[1] : NULL;
	Suite *s = suite_create("model");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_stories_hparams);
	tcase_add_test(tc, test_sha256_check);
	tcase_add_test(tc, test_storage_types);
	tcase_add_test(tc, test_qwen2_biases);
	tcase_add_test(tc, test_shape_and_type_errors);
	tcase_add_test(tc, test_unaligned_data);
	tcase_add_test(tc, test_mkmodel);
	tcase_add_test(tc, test_rope_freqs);
	tcase_add_test(tc, test_unknown_tensors);
	tcase_add_loop_test(tc, test_block_type_memory, 0, N_BLOCK_TYPES);
	suite_add_tcase(s, tc);
	TCase *logits = tcase_create("logits"); /* CK_RUN_CASE=logits: these alone */
	tcase_add_loop_test(logits, test_block_type_logits, 0, N_BLOCK_TYPES);
	suite_add_tcase(s, logits);
	return tu_run_suite(s);
}
