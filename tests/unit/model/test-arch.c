/* The architecture table (model/arch.h): every row is consistent (unique
 * names that fit a snapshot, every layer tensor named, the layer shape its
 * norm and feed-forward imply), lookups of unknown names fail naming the
 * name and the supported ones, and real GGUF files (written here with the
 * GGUF writer, tensors named from each row) load as their row says: RoPE
 * style and biases carried into the model, missing required biases and
 * unknown architectures refused. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/arch.h"
#include "model/gguf_write.h"
#include "model/model.h"
#include "session/snapshot.h"
#include "util/errbuf.h"
#include "testutil.h"

#define DIM 64
#define HEADS 2
#define KV_HEADS 1
#define FFN 96
#define VOCAB 16
#define EXPERTS 4 /* a mixture-of-experts row's expert_count */
#define EXPERT_FFN 32

START_TEST(test_rows_consistent)
{
	int n = model_arch_count();
	ck_assert_int_ge(n, 2);
	ck_assert_ptr_null(model_arch_at(n));
	ck_assert_ptr_null(model_arch_at(-1));
	for (int i = 0; i < n; i++) {
		const struct model_arch *a = model_arch_at(i);
		ck_assert_ptr_nonnull(a);
		const char *name = model_arch_name(a);
		ck_assert_int_gt((int)strlen(name), 0);
		ck_assert_ptr_eq(model_arch_find(name), a);
		ck_assert_int_lt((int)strlen(model_arch_snapshot_name(a)), SNAPSHOT_ARCH_LEN);
		for (int j = 0; j < i; j++) {
			ck_assert_str_ne(model_arch_name(model_arch_at(j)), name);
			ck_assert_str_ne(model_arch_snapshot_name(model_arch_at(j)),
			                 model_arch_snapshot_name(a));
		}
		ck_assert_int_lt((int)model_arch_layer_kind(a), MODEL_LAYER_KINDS);
		/* both layer shapes compute RMSNorm; Gemma's GeGLU, Llama's SwiGLU */
		bool gemma = model_arch_layer_kind(a) == MODEL_LAYER_GEMMA;
		ck_assert_int_eq(model_arch_norm(a), MODEL_NORM_RMS);
		ck_assert_int_eq(model_arch_ffn(a), gemma ? MODEL_FFN_GEGLU : MODEL_FFN_SWIGLU);
		ck_assert_int_gt((int)strlen(model_arch_norm_eps_key(a)), 0);
		int weights = 0;
		/* Q, K, V named, or the stacked QKV instead (phi3) */
		bool fused = model_arch_layer_tensor(a, MODEL_LT_QKV) != NULL;
		for (int t = 0; t < MODEL_LT_COUNT; t++) {
			const char *tn = model_arch_layer_tensor(a, (enum model_layer_tensor)t);
			bool absent = fused ? t == MODEL_LT_Q || t == MODEL_LT_K || t == MODEL_LT_V
			                    : t == MODEL_LT_QKV;
			/* the Llama shape's tensors and biases are named in every row
			 * that has them; the Gemma norms and QK-norms in some */
			/* an MoE layer has experts instead of the dense MLP */
			bool moe = model_arch_layer_kind(a) == MODEL_LAYER_MOE;
			bool dense = t == MODEL_LT_GATE || t == MODEL_LT_UP || t == MODEL_LT_DOWN;
			absent = absent || (dense && moe) ||
			         (t == MODEL_LT_GATE && model_arch_fused_gate_up(a)) ||
			         (t >= MODEL_LT_BQ && model_arch_qkv_bias(a) == MODEL_BIAS_NONE &&
			          !tn) ||
			         (t > MODEL_LT_BV && !tn);
			ck_assert_msg(absent ? !tn : tn && *tn, "%s: layer tensor %d", name, t);
			for (int u = 0; u < t && tn; u++) {
				const char *un = model_arch_layer_tensor(a, (enum model_layer_tensor)u);
				ck_assert(!un || strcmp(un, tn) != 0);
			}
			weights += tn && !model_layer_tensor_is_bias(t);
		}
		ck_assert_int_eq(model_arch_layer_weights(a), weights);
		/* every row reads an embedding and a final norm; an optional
		 * output head is a tied one */
		ck_assert_int_eq(model_arch_model_tensor_need(a, MODEL_T_TOKEN_EMBD),
		                 MODEL_TENSOR_REQUIRED);
		ck_assert_int_eq(model_arch_model_tensor_need(a, MODEL_T_OUTPUT_NORM),
		                 MODEL_TENSOR_REQUIRED);
		ck_assert(
		    model_arch_tied_output(a) ==
		    (model_arch_model_tensor_need(a, MODEL_T_OUTPUT) != MODEL_TENSOR_REQUIRED));
		for (int t = 0; t < MODEL_LT_COUNT; t++)
			if (!model_layer_tensor_is_bias(t))
				ck_assert_int_eq(
				    model_arch_layer_tensor_need(a, (enum model_layer_tensor)t),
				    model_arch_layer_tensor(a, (enum model_layer_tensor)t)
				        ? MODEL_TENSOR_REQUIRED
				        : MODEL_TENSOR_NONE);
		ck_assert_ptr_null(model_arch_layer_tensor(a, MODEL_LT_COUNT));
	}
	/* what sets the Llama family's rows apart */
	const struct model_arch *llama = model_arch_find("llama"),
	                        *qwen2 = model_arch_find("qwen2"),
	                        *qwen3 = model_arch_find("qwen3");
	ck_assert(!model_arch_rope_neox(llama));
	ck_assert(model_arch_rope_neox(qwen2));
	ck_assert(model_arch_rope_neox(qwen3));
	ck_assert_int_eq(model_arch_qkv_bias(llama), MODEL_BIAS_OPTIONAL);
	ck_assert_int_eq(model_arch_qkv_bias(qwen2), MODEL_BIAS_REQUIRED);
	ck_assert_int_eq(model_arch_qkv_bias(qwen3), MODEL_BIAS_NONE);
	ck_assert_ptr_null(model_arch_layer_tensor(llama, MODEL_LT_Q_NORM));
	ck_assert_ptr_null(model_arch_layer_tensor(qwen2, MODEL_LT_K_NORM));
	ck_assert_str_eq(model_arch_layer_tensor(qwen3, MODEL_LT_Q_NORM), "attn_q_norm.weight");
	ck_assert_str_eq(model_arch_layer_tensor(qwen3, MODEL_LT_K_NORM), "attn_k_norm.weight");
	ck_assert_int_eq(model_arch_layer_weights(qwen3), model_arch_layer_weights(llama) + 2);
	for (int i = 0; i < 3; i++) /* every row reads key_length (Mistral Nemo) */
		ck_assert_int_eq(model_arch_head_width(model_arch_at(i)), MODEL_HEAD_WIDTH_KEYS);
	/* phi3: stacked Q/K/V and gate/up, NeoX, longrope's two factor sets */
	const struct model_arch *phi3 = model_arch_find("phi3");
	ck_assert(model_arch_rope_neox(phi3));
	ck_assert(model_arch_fused_gate_up(phi3) && !model_arch_fused_gate_up(llama));
	ck_assert_str_eq(model_arch_layer_tensor(phi3, MODEL_LT_QKV), "attn_qkv.weight");
	ck_assert_ptr_null(model_arch_layer_tensor(phi3, MODEL_LT_Q));
	ck_assert_int_eq(model_arch_model_tensor_need(phi3, MODEL_T_ROPE_LONG),
	                 MODEL_TENSOR_OPTIONAL);
	ck_assert_ptr_null(model_arch_rope_factors_tensor(phi3));
	ck_assert_int_eq(model_arch_layer_weights(phi3), 6);
	/* the mixture-of-experts rows: gpt-oss's top-k then softmax, unnormalised,
	 * clamped SwiGLU, learned sinks, sliding layers scaled with the global
	 * RoPE; qwen3moe's softmax then top-k renormalised, plain SwiGLU */
	const struct model_arch *goss = model_arch_find("gpt-oss"),
	                        *q3m = model_arch_find("qwen3moe");
	ck_assert(!model_arch_moe(llama)->experts && !model_arch_experts(qwen3));
	ck_assert(model_arch_experts(goss) && model_arch_experts(q3m));
	ck_assert_int_eq(model_arch_layer_kind(goss), MODEL_LAYER_MOE);
	ck_assert_int_eq(model_arch_moe(goss)->gating, MODEL_GATING_TOPK_SOFTMAX);
	ck_assert(!model_arch_moe(goss)->norm_weights);
	ck_assert_int_eq(model_arch_moe(goss)->act, MODEL_EXPERT_SWIGLU_OAI);
	ck_assert_float_eq(model_arch_moe(goss)->act_alpha, 1.702f);
	ck_assert_float_eq(model_arch_moe(goss)->act_limit, 7.0f);
	ck_assert(model_arch_attn(goss)->learned_sinks && model_arch_attn(goss)->swa_rope_scaled);
	ck_assert_str_eq(model_arch_layer_tensor(goss, MODEL_LT_FFN_NORM),
	                 "post_attention_norm.weight");
	ck_assert(!model_arch_tied_output(goss) && model_arch_tied_output(q3m));
	ck_assert_int_eq(model_arch_moe(q3m)->gating, MODEL_GATING_SOFTMAX);
	ck_assert(model_arch_moe(q3m)->norm_weights);
	ck_assert_int_eq(model_arch_moe(q3m)->act, MODEL_EXPERT_SWIGLU);
	ck_assert(!model_arch_attn(q3m)->learned_sinks && !model_arch_attn(q3m)->sliding);
	ck_assert_ptr_null(model_arch_layer_tensor(q3m, MODEL_LT_GATE_INP_B));
	ck_assert(model_arch_knows_key(q3m, "expert_feed_forward_length") &&
	          !model_arch_knows_key(qwen3, "expert_feed_forward_length"));
	/* a zeroed model_hparams reads as llama, as it always did */
	ck_assert_str_eq(model_arch_name(NULL), "llama");
}
END_TEST

START_TEST(test_unknown_names)
{
	char err[SINKD_ERR_LEN] = "";
	const struct model_arch *a = (const struct model_arch *)1;
	ck_assert_ptr_null(model_arch_find("mamba"));
	ck_assert_ptr_null(model_arch_find("llam"));
	ck_assert_ptr_null(model_arch_find("llama2"));
	ck_assert_ptr_null(model_arch_find(NULL));
	ck_assert_int_eq(model_arch_lookup("mamba", 5, &a, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_null(a);
	ck_assert_msg(strstr(err, "architecture 'mamba' is not supported (supported: llama, qwen2, "),
	              "%s", err);
	/* a prefix of a known name is not that name; control bytes are shown as '?' */
	ck_assert_int_eq(model_arch_lookup("llama\n", 6, &a, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "architecture 'llama?' is not supported"), "%s", err);
	ck_assert_int_eq(model_arch_lookup("qwen2xyz", 5, &a, err, sizeof(err)), 0);
	ck_assert_ptr_eq(a, model_arch_find("qwen2"));
}
END_TEST

/* ------------------------------------------------------------------------
 * Files named from the table. */

struct file_spec {
	const char *arch;               /* general.architecture */
	const char *key_arch;           /* the prefix of the hyper-parameter keys */
	const struct model_arch *names; /* whose tensor names */
	bool bias;
};

/* The bytes of each tensor added, for writing their data in order. */
struct added {
	size_t bytes[MODEL_LT_COUNT + 3];
	int n;
};

static void add_tensor3(struct gguf_writer *w, const char *name, uint64_t cols, uint64_t rows,
                        uint64_t experts, struct added *added)
{
	uint64_t dims[3] = {cols, rows, experts};
	uint32_t n_dims = experts ? 3 : rows ? 2 : 1;
	ck_assert_int_eq(gguf_writer_add_tensor(w, name, GGML_TYPE_F32, n_dims, dims), 0);
	added->bytes[added->n++] =
	    (size_t)(cols * (rows ? rows : 1) * (experts ? experts : 1) * sizeof(float));
}

static void add_tensor(struct gguf_writer *w, const char *name, uint64_t cols, uint64_t rows,
                       struct added *added)
{
	add_tensor3(w, name, cols, rows, 0, added);
}

static void write_file(const char *path, const struct file_spec *s)
{
	char err[SINKD_ERR_LEN], key[96], n[96];
	struct gguf_writer *w;
	ck_assert_int_eq(gguf_writer_new(path, &w, err, sizeof(err)), 0);
	ck_assert_int_eq(gguf_writer_add_string(w, "general.architecture", s->arch), 0);
	static const char *const keys[5] = {"embedding_length", "block_count",
	                                    "feed_forward_length", "attention.head_count",
	                                    "attention.head_count_kv"};
	int vals[5] = {DIM, 1, FFN, HEADS, KV_HEADS};
	for (int i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "%s.%s", s->key_arch, keys[i]);
		ck_assert_int_eq(gguf_writer_add_u32(w, key, (uint32_t)vals[i]), 0);
	}
	static const char *const moe_keys[3] = {"expert_count", "expert_used_count",
	                                        "expert_feed_forward_length"};
	const int moe_vals[3] = {EXPERTS, 2, EXPERT_FFN};
	for (int i = 0; i < 3 && model_arch_experts(s->names); i++) {
		snprintf(key, sizeof(key), "%s.%s", s->key_arch, moe_keys[i]);
		ck_assert_int_eq(gguf_writer_add_u32(w, key, (uint32_t)moe_vals[i]), 0);
	}
	struct added added = {.n = 0};
	uint64_t d = DIM, kv = DIM / HEADS * KV_HEADS, f = FFN;
	add_tensor(w, "token_embd.weight", d, VOCAB, &added);
	add_tensor(w, "output_norm.weight", d, 0, &added);
	if (!model_arch_tied_output(s->names))
		add_tensor(w, "output.weight", d, VOCAB, &added);
	/* cols, rows of each layer tensor, in enum order */
	uint64_t hd = DIM / HEADS;
	uint64_t up = model_arch_fused_gate_up(s->names) ? 2 * f : f;
	/* ATTN_NORM Q K V O FFN_NORM GATE UP DOWN QKV BQ BK BV POST_ATTN_NORM
	 * POST_FFW_NORM Q_NORM K_NORM BO SINKS, then the experts' */
	uint64_t ne = EXPERTS, ef = EXPERT_FFN;
	uint64_t shape[MODEL_LT_COUNT][3] = {
	    {d, 0},      {d, d},       {d, kv},      {d, kv}, {d, d},  {d, 0},
	    {d, f},      {d, up},      {f, d},       {d, d + 2 * kv},  {d, 0},
	    {kv, 0},     {kv, 0},      {d, 0},       {d, 0},  {hd, 0}, {hd, 0},
	    {d, 0},      {HEADS, 0},   {d, ne},      {ne, 0}, {d, ef, ne},
	    {d, ef, ne}, {ef, d, ne},  {ef, ne},     {ef, ne}, {d, ne}};
	for (int t = 0; t < MODEL_LT_COUNT; t++) {
		const char *tn = model_arch_layer_tensor(s->names, (enum model_layer_tensor)t);
		if (!tn || (model_layer_tensor_is_bias(t) && !s->bias))
			continue;
		snprintf(n, sizeof(n), "blk.0.%s", tn);
		add_tensor3(w, n, shape[t][0], shape[t][1], shape[t][2], &added);
	}
	ck_assert_int_eq(gguf_writer_write_header(w, err, sizeof(err)), 0);
	/* the largest tensor: a stacked gate/up of 2 x FFN rows (phi3), or
	 * the experts' gate, up or down */
	static const float zeros[DIM * (FFN * 2 > EXPERT_FFN * EXPERTS ? FFN * 2
	                                                                : EXPERT_FFN * EXPERTS)];
	for (int i = 0; i < added.n; i++) {
		ck_assert_uint_le(added.bytes[i], sizeof(zeros));
		ck_assert_int_eq(gguf_writer_write_data(w, zeros, added.bytes[i], err, sizeof(err)),
		                 0);
	}
	ck_assert_int_eq(gguf_writer_finish(w, err, sizeof(err)), 0);
	gguf_writer_free(w);
}

static int load_spec(const struct file_spec *s, struct model **m, char *err, size_t err_len)
{
	char path[64];
	tu_temp_file(path, sizeof(path), "sinkd-arch", NULL, 0);
	write_file(path, s);
	int rc = model_load(path, NULL, m, err, err_len);
	unlink(path);
	return rc;
}

START_TEST(test_files_load_as_their_row)
{
	const struct model_arch *a = model_arch_at(_i);
	char err[SINKD_ERR_LEN];
	struct model *m = NULL;
	bool bias = model_arch_qkv_bias(a) != MODEL_BIAS_NONE;
	struct file_spec s = {model_arch_name(a), model_arch_name(a), a, bias};
	ck_assert_msg(load_spec(&s, &m, err, sizeof(err)) == 0, "%s", err);
	ck_assert_ptr_eq(m->hp.arch, a);
	ck_assert_int_eq(m->hp.head_dim, DIM / HEADS);
	ck_assert(m->hp.has_qkv_bias == bias);
	ck_assert(bias ? m->layers[0].bq != NULL : m->layers[0].bq == NULL);
	bool qk_norm = model_arch_layer_tensor(a, MODEL_LT_Q_NORM) != NULL;
	ck_assert(qk_norm ? m->layers[0].q_norm != NULL : m->layers[0].q_norm == NULL);
	ck_assert(qk_norm ? m->layers[0].k_norm != NULL : m->layers[0].k_norm == NULL);
	ck_assert(m->hp.tied_output == model_arch_tied_output(a));
	/* stacked matrices are viewed as their parts, in order */
	const struct model_layer *L = &m->layers[0];
	ck_assert_int_eq(L->wq.rows, DIM);
	ck_assert_int_eq(L->wk.rows, DIM / HEADS * KV_HEADS);
	bool moe = model_arch_layer_kind(a) == MODEL_LAYER_MOE;
	ck_assert_int_eq(L->w_gate.rows, moe ? 0 : FFN);
	ck_assert_int_eq(L->w_up.rows, moe ? 0 : FFN);
	ck_assert_int_eq(m->hp.n_experts, moe ? EXPERTS : 0);
	ck_assert_int_eq(L->w_router.rows, moe ? EXPERTS : 0);
	if (moe) { /* each expert a view of the 3-D tensor, in order */
		ck_assert_int_eq(L->exp_down[EXPERTS - 1].rows, DIM);
		ck_assert_int_eq(L->exp_down[EXPERTS - 1].cols, EXPERT_FFN);
		ck_assert_ptr_eq(L->exp_up[1].data, (const char *)L->exp_up[0].data +
		                                        (size_t)EXPERT_FFN * L->exp_up[0].row_bytes);
	}
	bool sinks = model_arch_attn(a)->learned_sinks;
	ck_assert(sinks ? L->attn_sinks && L->bo && L->b_router && L->exp_b_down
	                : !L->attn_sinks && !L->b_router);
	if (model_arch_fused_gate_up(a))
		ck_assert_ptr_eq(L->w_up.data,
		                 (const char *)L->w_gate.data + (size_t)FFN * L->w_gate.row_bytes);
	if (model_arch_layer_tensor(a, MODEL_LT_QKV))
		ck_assert_ptr_eq(L->wv.data,
		                 (const char *)L->wk.data + (size_t)L->wk.rows * L->wk.row_bytes);
	model_free(m);

	/* without biases: loaded where they are optional, refused where required */
	s.bias = false;
	int rc = load_spec(&s, &m, err, sizeof(err));
	if (model_arch_qkv_bias(a) == MODEL_BIAS_REQUIRED) {
		ck_assert_int_ne(rc, 0);
		ck_assert_msg(strstr(err, "tensor 'blk.0.attn_q.bias' is missing"), "%s", err);
	} else {
		ck_assert_msg(rc == 0, "%s", err);
		ck_assert(!m->hp.has_qkv_bias);
		model_free(m);
	}
}
END_TEST

START_TEST(test_unknown_architecture_file_refused)
{
	char err[SINKD_ERR_LEN];
	struct model *m = NULL;
	struct file_spec s = {"mamba", "mamba", model_arch_find("llama"), false};
	ck_assert_int_eq(load_spec(&s, &m, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_null(m);
	ck_assert_msg(
	    strstr(err, "architecture 'mamba' is not supported (supported: llama, qwen2, "), "%s",
	    err);
	/* keys under another architecture's prefix are not this one's */
	struct file_spec other = {"qwen2", "llama", model_arch_find("qwen2"), true};
	ck_assert_int_eq(load_spec(&other, &m, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "required key 'qwen2.embedding_length' is missing"), "%s", err);
}
END_TEST

/* A tensor of another row's shape is refused, naming it: a llama file
 * with qwen3's QK-norm; a qwen3 file with Q/K/V biases. */
START_TEST(test_other_rows_tensors_refused)
{
	char err[SINKD_ERR_LEN];
	struct model *m = NULL;
	struct file_spec s = {"llama", "llama", model_arch_find("qwen3"), false};
	ck_assert_int_eq(load_spec(&s, &m, err, sizeof(err)), -ENOTSUP);
	ck_assert_msg(strstr(err, "tensor 'blk.0.attn_q_norm.weight' is not part of a llama model"),
	              "%s", err);
	struct file_spec b = {"qwen3", "qwen3", model_arch_find("qwen3"), true};
	ck_assert_int_eq(load_spec(&b, &m, err, sizeof(err)), -ENOTSUP);
	ck_assert_msg(strstr(err, "tensor 'blk.0.attn_q.bias': architecture 'qwen3' has no "
	                          "attention biases"),
	              "%s", err);
}
END_TEST

/* phi3 reads Q/K/V stacked in attn_qkv: a phi3 file with llama's separate
 * attn_q/k/v and ffn_gate (which llama.cpp would take) is refused naming
 * the first of them, not loaded with them skipped. */
START_TEST(test_phi3_separate_qkv_refused)
{
	char err[SINKD_ERR_LEN];
	struct model *m = NULL;
	struct file_spec s = {"phi3", "phi3", model_arch_find("llama"), false};
	ck_assert_int_ne(load_spec(&s, &m, err, sizeof(err)), 0);
	ck_assert_ptr_null(m);
	ck_assert_msg(strstr(err, "is not part of a phi3 model") && strstr(err, "blk.0.attn_q"),
	              "%s", err);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("arch");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_rows_consistent);
	tcase_add_test(tc, test_unknown_names);
	tcase_add_loop_test(tc, test_files_load_as_their_row, 0, model_arch_count());
	tcase_add_test(tc, test_unknown_architecture_file_refused);
	tcase_add_test(tc, test_other_rows_tensors_refused);
	tcase_add_test(tc, test_phi3_separate_qkv_refused);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
