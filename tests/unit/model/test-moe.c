/* The loader on mixture-of-experts files (gpt-oss, qwen3moe) that
 * sinkd-mkmodel (path in argv[1]) writes: the expert counts, each expert a
 * view of its 3-D tensor at the right offset, the router, biases, learned
 * sinks and the attention output bias equal to the file's values, MXFP4
 * experts dequantized at load, what one decode step reads, YaRN on
 * gpt-oss's sliding layers; and files edited here (a key or tensor dropped,
 * added or reshaped) refused naming the key or tensor. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/dequant.h"
#include "model/gguf_write.h"
#include "model/model.h"
#include "util/errbuf.h"
#include "testutil.h"

static const char *mkmodel_path;

/* The shape every file here has: q = 4 heads of 32 (wider than dim),
 * 4 experts of 32, 2 used. */
#define DIM 64
#define HEADS 4
#define KV_HEADS 2
#define HEAD_DIM 32
#define FFN 64
#define EXPERTS 4
#define USED 2
#define EFF 32
#define VOCAB 300
#define LAYERS 2

/* A file of architecture arch and type in path, with extra arguments
 * (NULL-terminated, may be NULL). */
static void mkmodel(char *path, size_t len, const char *arch, const char *type,
                    const char *const *extra)
{
	tu_temp_file(path, len, "sinkd-test-moe", NULL, 0);
	char *argv[40] = {(char *)mkmodel_path, "--out", path, "--arch", (char *)arch, "--type",
	                  (char *)type, "--dim", "64", "--layers", "2", "--heads", "4",
	                  "--kv-heads", "2", "--head-dim", "32", "--ffn", "64", "--vocab-size",
	                  "300"};
	int n = 21;
	bool moe = strcmp(arch, "gpt-oss") == 0 || strcmp(arch, "qwen3moe") == 0;
	static const char *const moe_args[] = {"--experts", "4", "--experts-used", "2",
	                                       "--expert-ffn", "32"};
	for (int i = 0; moe && i < 6; i++)
		argv[n++] = (char *)moe_args[i];
	for (int i = 0; extra && extra[i] && n < 38; i++)
		argv[n++] = (char *)extra[i];
	ck_assert_msg(tu_run_quiet(argv) == 0, "sinkd-mkmodel --arch %s --type %s failed", arch,
	              type);
}

/* ------------------------------------------------------------------------
 * Edited copies. */

struct edit {
	const char *drop_key;    /* a key left out */
	const char *u32_key;     /* a key set (added or replaced) to u32_value */
	uint32_t u32_value;
	const char *drop_tensor; /* a tensor left out */
	const char *add_tensor;  /* an F32 tensor of add_cols zeros added */
	uint64_t add_cols;
	const char *reshape;     /* a tensor given reshape_dims (same elements) */
	uint32_t reshape_n;
	uint64_t reshape_dims[3];
};

static void copy_keys(struct gguf_writer *w, const struct gguf_file *src, const struct edit *e)
{
	for (size_t i = 0; i < gguf_n_kv(src); i++) {
		const char *key = gguf_kv_key(src, i);
		enum gguf_value_type type;
		const void *data;
		size_t len;
		if ((e->drop_key && strcmp(key, e->drop_key) == 0) ||
		    (e->u32_key && strcmp(key, e->u32_key) == 0) ||
		    strcmp(key, "general.alignment") == 0)
			continue;
		ck_assert_int_eq(gguf_kv_raw(src, i, &type, &data, &len), 0);
		ck_assert_int_eq(gguf_writer_add_raw(w, key, type, data, len), 0);
	}
	if (e->u32_key)
		ck_assert_int_eq(gguf_writer_add_u32(w, e->u32_key, e->u32_value), 0);
}

/* dst: src with the edit applied. */
static void edited(const char *src, char *dst, size_t dst_len, const struct edit *e)
{
	char err[SINKD_ERR_LEN];
	struct gguf_file *f;
	struct gguf_writer *w;
	tu_temp_file(dst, dst_len, "sinkd-test-moe", NULL, 0);
	ck_assert_msg(gguf_open(src, &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(gguf_writer_new(dst, &w, err, sizeof(err)), 0);
	copy_keys(w, f, e);
	size_t n = gguf_n_tensors(f);
	for (size_t i = 0; i < n; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		if (e->drop_tensor && strcmp(t->name, e->drop_tensor) == 0)
			continue;
		bool re = e->reshape && strcmp(t->name, e->reshape) == 0;
		ck_assert_int_eq(gguf_writer_add_tensor(w, t->name, t->type,
		                                        re ? e->reshape_n : t->n_dims,
		                                        re ? e->reshape_dims : t->dims),
		                 0);
	}
	uint64_t cols = e->add_cols;
	if (e->add_tensor)
		ck_assert_int_eq(gguf_writer_add_tensor(w, e->add_tensor, GGML_TYPE_F32, 1, &cols),
		                 0);
	ck_assert_int_eq(gguf_writer_write_header(w, err, sizeof(err)), 0);
	for (size_t i = 0; i < n; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		if (!(e->drop_tensor && strcmp(t->name, e->drop_tensor) == 0))
			ck_assert_int_eq(gguf_writer_write_data(w, t->data, t->n_bytes, err,
			                                        sizeof(err)),
			                 0);
	}
	float *zeros = calloc(cols + 1, sizeof(float));
	if (e->add_tensor)
		ck_assert_int_eq(gguf_writer_write_data(w, zeros, cols * sizeof(float), err,
		                                        sizeof(err)),
		                 0);
	free(zeros);
	ck_assert_int_eq(gguf_writer_finish(w, err, sizeof(err)), 0);
	gguf_writer_free(w);
	gguf_close(f);
}

/* Loading src edited by e fails with rc, the message holding needle. */
static void assert_refused(const char *src, const struct edit *e, int rc, const char *needle)
{
	char path[64], err[SINKD_ERR_LEN] = "";
	edited(src, path, sizeof(path), e);
	struct model *m = NULL;
	ck_assert_int_eq(model_load(path, NULL, &m, err, sizeof(err)), rc);
	ck_assert_ptr_null(m);
	ck_assert_msg(strstr(err, needle), "message '%s' lacks '%s'", err, needle);
	unlink(path);
}

static struct model *load(const char *path)
{
	char err[SINKD_ERR_LEN];
	struct model *m = NULL;
	ck_assert_msg(model_load(path, NULL, &m, err, sizeof(err)) == 0, "%s", err);
	return m;
}

/* The n floats of F32 tensor name in m's file equal got. */
static void assert_file_values(const struct model *m, const char *name, const float *got,
                               size_t n)
{
	const struct gguf_tensor *t = gguf_find_tensor(m->file, name);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(t->type, GGML_TYPE_F32);
	ck_assert_uint_eq(t->n_elements, n);
	ck_assert_msg(memcmp(t->data, got, n * sizeof(float)) == 0, "%s differs from the file",
	              name);
}

/* ------------------------------------------------------------------------
 * Loading. */

START_TEST(test_gptoss_loads)
{
	char path[64], name[64];
	mkmodel(path, sizeof(path), "gpt-oss", "f32", NULL);
	struct model *m = load(path);
	const struct model_hparams *hp = &m->hp;
	ck_assert_str_eq(model_arch_name(hp->arch), "gpt-oss");
	ck_assert_int_eq(hp->n_experts, EXPERTS);
	ck_assert_int_eq(hp->n_experts_used, USED);
	ck_assert_int_eq(hp->expert_ffn_dim, EFF);
	ck_assert_int_eq(hp->head_dim, HEAD_DIM);
	ck_assert(!hp->tied_output && hp->has_qkv_bias);
	/* every other layer slides over 128, from layer 0 */
	ck_assert_int_eq(hp->swa_window, 128);
	ck_assert(hp->layer_swa && hp->layer_swa[0] && !hp->layer_swa[1]);
	ck_assert(hp->swa_rope_scaled);
	for (int l = 0; l < LAYERS; l++) {
		const struct model_layer *L = &m->layers[l];
		ck_assert_int_eq(L->w_gate.rows, 0); /* no dense MLP */
		ck_assert_int_eq(L->w_router.rows, EXPERTS);
		ck_assert_int_eq(L->w_router.cols, DIM);
		ck_assert_int_eq(L->w_router.type, GGML_TYPE_F32);
		ck_assert_int_eq(L->wo.cols, HEADS * HEAD_DIM);
		snprintf(name, sizeof(name), "blk.%d.ffn_up_exps.weight", l);
		const struct gguf_tensor *t = gguf_find_tensor(m->file, name);
		for (int e = 0; e < EXPERTS; e++) {
			ck_assert_ptr_eq(L->exp_up[e].data,
			                 (const char *)t->data + (size_t)e * EFF * DIM * sizeof(float));
			ck_assert_int_eq(L->exp_gate[e].rows, EFF);
			ck_assert_int_eq(L->exp_down[e].rows, DIM);
			ck_assert_int_eq(L->exp_down[e].cols, EFF);
		}
		snprintf(name, sizeof(name), "blk.%d.attn_sinks.weight", l);
		assert_file_values(m, name, L->attn_sinks, HEADS);
		snprintf(name, sizeof(name), "blk.%d.attn_output.bias", l);
		assert_file_values(m, name, L->bo, DIM);
		snprintf(name, sizeof(name), "blk.%d.ffn_gate_inp.bias", l);
		assert_file_values(m, name, L->b_router, EXPERTS);
		snprintf(name, sizeof(name), "blk.%d.ffn_gate_exps.bias", l);
		assert_file_values(m, name, L->exp_b_gate, EXPERTS * EFF);
		snprintf(name, sizeof(name), "blk.%d.ffn_down_exps.bias", l);
		assert_file_values(m, name, L->exp_b_down, EXPERTS * DIM);
	}
	/* a decode step reads the head, each layer's attention and router
	 * and 2 of 4 experts; the resident weights are all 4 */
	size_t attn = (size_t)(2 * HEADS * HEAD_DIM + 2 * KV_HEADS * HEAD_DIM) * DIM;
	size_t expert = 3 * (size_t)EFF * DIM, router = (size_t)EXPERTS * DIM;
	size_t head = (size_t)VOCAB * DIM;
	ck_assert_uint_eq(model_weight_bytes(m),
	                  4 * (head + LAYERS * (attn + router + USED * expert)));
	ck_assert_uint_eq(model_file_weight_bytes(m),
	                  4 * (head + LAYERS * (attn + router + EXPERTS * expert)));
	ck_assert_double_eq(model_weight_params(m),
	                    (double)(head + LAYERS * (attn + router + USED * expert)));
	model_free(m);
	unlink(path);
}
END_TEST

/* qwen3moe: QK-norm, no biases or sinks, no sliding layers; without
 * expert_feed_forward_length each expert is feed_forward_length /
 * expert_used_count wide (llama.cpp's default), which gpt-oss requires. */
START_TEST(test_qwen3moe_loads)
{
	char path[64], path2[64];
	mkmodel(path, sizeof(path), "qwen3moe", "q8_0", NULL);
	struct model *m = load(path);
	const struct model_layer *L = &m->layers[1];
	ck_assert_int_eq(m->hp.n_experts, EXPERTS);
	ck_assert_ptr_null(m->hp.layer_swa);
	ck_assert(!m->hp.has_qkv_bias && L->q_norm && L->k_norm);
	ck_assert(!L->bo && !L->attn_sinks && !L->b_router && !L->exp_b_gate && !L->exp_b_up &&
	          !L->exp_b_down);
	/* Q8_0 experts stay in the mapping, viewed per expert */
	const struct gguf_tensor *t = gguf_find_tensor(m->file, "blk.1.ffn_down_exps.weight");
	ck_assert_int_eq(L->exp_down[3].type, GGML_TYPE_Q8_0);
	ck_assert_ptr_eq(L->exp_down[3].data,
	                 (const char *)t->data + 3 * (size_t)DIM * ggml_row_bytes(t->type, EFF));
	ck_assert_int_eq(L->w_router.type, GGML_TYPE_F32); /* as llama-quantize leaves it */
	model_free(m);
	struct edit e = {.drop_key = "qwen3moe.expert_feed_forward_length"};
	edited(path, path2, sizeof(path2), &e);
	m = load(path2);
	ck_assert_int_eq(m->hp.expert_ffn_dim, FFN / USED);
	model_free(m);
	unlink(path2);
	unlink(path);
}
END_TEST

/* --type mxfp4: the experts MXFP4, kept as stored (each expert a view of
 * its rows of the file's 3-D tensor), every other matrix Q8_0 kept as
 * stored. */
START_TEST(test_mxfp4_experts_load)
{
	char path[64];
	mkmodel(path, sizeof(path), "gpt-oss", "mxfp4", NULL);
	struct model *m = load(path);
	const struct model_layer *L = &m->layers[0];
	ck_assert_int_eq(L->wq.type, GGML_TYPE_Q8_0);
	ck_assert_int_eq(m->output.type, GGML_TYPE_Q8_0);
	const struct gguf_tensor *t = gguf_find_tensor(m->file, "blk.0.ffn_gate_exps.weight");
	ck_assert_int_eq(t->type, GGML_TYPE_MXFP4);
	ck_assert_uint_eq(t->n_bytes, (size_t)EXPERTS * EFF * (DIM / 32) * MXFP4_BLOCK_BYTES);
	size_t row_bytes = ggml_row_bytes(t->type, DIM);
	for (int e = 0; e < EXPERTS; e++) {
		const struct weight_matrix *w = &L->exp_gate[e];
		ck_assert_int_eq(w->type, GGML_TYPE_MXFP4);
		ck_assert_uint_eq(w->row_bytes, row_bytes);
		ck_assert_ptr_eq(w->data, (const uint8_t *)t->data + (size_t)e * EFF * row_bytes);
	}
	model_free(m);
	unlink(path);
}
END_TEST

/* YaRN (the released gpt-oss files: factor 32 over 4096): every layer, the
 * sliding ones too, turns scaled. */
START_TEST(test_gptoss_yarn)
{
	char path[64];
	static const char *const yarn[] = {"--rope-scaling", "yarn:32:4096", "--context", "131072",
	                                   NULL};
	mkmodel(path, sizeof(path), "gpt-oss", "f32", yarn);
	struct model *m = load(path);
	ck_assert_double_eq(m->hp.rope_ext_factor, 1.0);
	ck_assert_double_eq_tol(m->hp.rope_freq_scale, 1.0 / 32, 1e-12);
	ck_assert_int_eq(m->hp.rope_ctx_orig, 4096);
	ck_assert(m->hp.swa_rope_scaled && m->hp.layer_swa[0]);
	model_free(m);
	unlink(path);
}
END_TEST

/* ------------------------------------------------------------------------
 * Refusals by name. */

START_TEST(test_refusals)
{
	char goss[64], qwen[64], llama[64];
	mkmodel(goss, sizeof(goss), "gpt-oss", "f32", NULL);
	mkmodel(qwen, sizeof(qwen), "qwen3moe", "f32", NULL);
	mkmodel(llama, sizeof(llama), "llama", "f32", NULL);
	/* experts in a dense row */
	struct edit e = {.u32_key = "llama.expert_count", .u32_value = 4};
	assert_refused(llama, &e, -ENOTSUP,
	               "mixture-of-experts models (llama.expert_count 4) are not supported for "
	               "architecture 'llama' (supported: gpt-oss, qwen3moe)");
	/* counts out of range, a missing width, a key of another variant */
	e = (struct edit){.u32_key = "gpt-oss.expert_used_count", .u32_value = 5};
	assert_refused(goss, &e, -EINVAL, "key 'gpt-oss.expert_used_count' is 5 (must be 1..4)");
	e = (struct edit){.u32_key = "qwen3moe.expert_count", .u32_value = 0};
	assert_refused(qwen, &e, -EINVAL, "key 'qwen3moe.expert_count' is 0 (must be 1..");
	e = (struct edit){.drop_key = "gpt-oss.expert_count"};
	assert_refused(goss, &e, -EINVAL, "required key 'gpt-oss.expert_count' is missing");
	e = (struct edit){.drop_key = "gpt-oss.expert_feed_forward_length"};
	assert_refused(goss, &e, -EINVAL,
	               "required key 'gpt-oss.expert_feed_forward_length' is missing");
	e = (struct edit){.u32_key = "gpt-oss.expert_shared_count", .u32_value = 1};
	assert_refused(goss, &e, -ENOTSUP,
	               "key 'gpt-oss.expert_shared_count' is not one sinkd knows for "
	               "architecture 'gpt-oss'");
	/* a count the tensors do not have */
	e = (struct edit){.u32_key = "gpt-oss.expert_count", .u32_value = 3};
	assert_refused(goss, &e, -EINVAL,
	               "tensor 'blk.0.ffn_gate_inp.weight' has dims [64, 4], expected [64, 3]");
	/* missing sinks, a 3-D tensor flattened, a shared expert, biases */
	e = (struct edit){.drop_tensor = "blk.1.attn_sinks.weight"};
	assert_refused(goss, &e, -EINVAL, "tensor 'blk.1.attn_sinks.weight' is missing");
	e = (struct edit){.drop_tensor = "blk.0.ffn_down_exps.bias"};
	assert_refused(goss, &e, -EINVAL, "tensor 'blk.0.ffn_down_exps.bias' is missing");
	e = (struct edit){.reshape = "blk.1.ffn_up_exps.weight",
	                  .reshape_n = 2,
	                  .reshape_dims = {DIM, EFF * EXPERTS}};
	assert_refused(goss, &e, -EINVAL,
	               "tensor 'blk.1.ffn_up_exps.weight' has dims [64, 128], expected [64, 32, "
	               "4]");
	e = (struct edit){.add_tensor = "blk.0.ffn_gate_shexp.weight", .add_cols = DIM};
	assert_refused(goss, &e, -ENOTSUP,
	               "tensor 'blk.0.ffn_gate_shexp.weight' is not part of a gpt-oss model");
	e = (struct edit){.add_tensor = "blk.0.ffn_gate_inp.bias", .add_cols = EXPERTS};
	assert_refused(qwen, &e, -ENOTSUP,
	               "tensor 'blk.0.ffn_gate_inp.bias' is not part of a qwen3moe model");
	e = (struct edit){.add_tensor = "blk.0.attn_q.bias", .add_cols = HEADS * HEAD_DIM};
	assert_refused(qwen, &e, -ENOTSUP,
	               "tensor 'blk.0.attn_q.bias': architecture 'qwen3moe' has no attention "
	               "biases");
	/* a dense MLP in an MoE row */
	e = (struct edit){.add_tensor = "blk.0.ffn_up.weight", .add_cols = DIM};
	assert_refused(goss, &e, -ENOTSUP,
	               "tensor 'blk.0.ffn_up.weight' is not part of a gpt-oss model");
	unlink(goss);
	unlink(qwen);
	unlink(llama);
}
END_TEST

/* sinkd-mkmodel's own refusals: MXFP4 for a dense row, expert options for
 * a dense row, more experts used than there are. */
START_TEST(test_mkmodel_refusals)
{
	char *mx[] = {(char *)mkmodel_path, "--out", "/dev/null", "--dim", "64", "--layers", "1",
	              "--heads", "4", "--ffn", "64", "--type", "mxfp4", NULL};
	ck_assert_int_eq(tu_run_quiet(mx), 2);
	char *ex[] = {(char *)mkmodel_path, "--out", "/dev/null", "--dim", "64", "--layers", "1",
	              "--heads", "4", "--ffn", "64", "--experts", "4", NULL};
	ck_assert_int_eq(tu_run_quiet(ex), 2);
	char *used[] = {(char *)mkmodel_path, "--out", "/dev/null", "--arch", "qwen3moe",
	                "--dim", "64", "--layers", "1", "--heads", "4", "--ffn", "64",
	                "--experts", "2", "--experts-used", "3", NULL};
	ck_assert_int_eq(tu_run_quiet(used), 2);
	used[16] = "2"; /* 2 of 2: fine */
	char path[64];
	tu_temp_file(path, sizeof(path), "sinkd-test-moe", NULL, 0);
	used[2] = path;
	ck_assert_int_eq(tu_run_quiet(used), 0);
	unlink(path);
}
END_TEST

int main(int argc, char **argv)
{
	mkmodel_path = argc > 1 ? argv[1] : NULL;
	if (mkmodel_path == NULL) {
		fprintf(stderr, "test-moe: no sinkd-mkmodel path given (argv[1])\n");
		return 77;
	}
	Suite *s = suite_create("moe");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_gptoss_loads);
	tcase_add_test(tc, test_qwen3moe_loads);
	tcase_add_test(tc, test_mxfp4_experts_load);
	tcase_add_test(tc, test_gptoss_yarn);
	tcase_add_test(tc, test_refusals);
	tcase_add_test(tc, test_mkmodel_refusals);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
