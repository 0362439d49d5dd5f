/* Model loader: turns a validated GGUF file into a Llama-family model (an
 * architecture of model/arch.h, whose row names the keys and tensors read).
 * It reads the hyper-parameters from metadata, refuses a file holding a
 * "<arch>.*" key or a tensor the row does not name (either would be
 * skipped), finds every weight
 * tensor, checks its shape against them, and
 * decides where each one lives: matrices the engine computes with natively
 * (F32, F16, BF16 and the block types Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4)
 * point into the read-only mapping; the other block types (Q4_1, Q5_0,
 * Q5_1) are dequantized once to F16, near their file size, and their file
 * pages given back; norm vectors and biases always end up F32.  A
 * mixture-of-experts layer's 3-D expert tensors are placed like a matrix of
 * all their experts' rows and viewed as one matrix per expert.  It does not run the
 * network (engine/) nor read the vocabulary (tokenizer/). */
#include "model/model.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "model/dequant.h"
#include "model/wtype.h"
#include "util/digest.h"
#include "util/errbuf.h"
#include "util/log.h"
#include "util/pages.h"

#define MODEL_MAX_DIM (1 << 20)
#define MODEL_MAX_LAYERS 4096
#define MODEL_MAX_VOCAB (1 << 24)
/* The widest head the cache stores (SINKCACHE_MAX_HEAD_DIM). */
#define MODEL_MAX_HEAD_DIM 512

/* ------------------------------------------------------------------------
 * Hyper-parameters. */

static int own(struct model *m, void *buf);

struct load_ctx {
	struct model *m;
	const char *path;
	char prefix[32]; /* "<architecture>." */
	char *err;
	size_t err_len;
	struct sinkd_log *log; /* may be NULL */
};

/* Names a copy of tensor t the model owns in a debug line (log_alloc). */
static void log_copy(const struct load_ctx *c, const struct gguf_tensor *t, const char *as,
                     size_t bytes)
{
	char what[192];
	snprintf(what, sizeof(what), "copy of tensor '%s' as %s (its file pages are given back)",
	         t->name, as);
	log_alloc(c->log, "model", what, bytes);
}

/* Reads <arch>.<suffix> as an int in [lo, hi]; def < 0 means required. */
static int hp_int(struct load_ctx *c, const char *suffix, int64_t def, int64_t lo, int64_t hi,
                  int *out)
{
	char key[128];
	snprintf(key, sizeof(key), "%s%s", c->prefix, suffix);
	int64_t v;
	int rc = gguf_get_int(c->m->file, key, &v);
	if (rc == -ENOENT && def >= 0) {
		v = def;
	} else if (rc == -ENOENT) {
		return err_set(c->err, c->err_len, -EINVAL, "%s: required key '%s' is missing",
		               c->path, key);
	} else if (rc) {
		return err_set(c->err, c->err_len, -EINVAL, "%s: key '%s' is not an integer",
		               c->path, key);
	}
	if (v < lo || v > hi)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: key '%s' is %" PRId64 " (must be %" PRId64 "..%" PRId64 ")",
		               c->path, key, v, lo, hi);
	*out = (int)v;
	return 0;
}

static int hp_float(struct load_ctx *c, const char *suffix, double def, double lo, double hi,
                    double *out)
{
	char key[128];
	snprintf(key, sizeof(key), "%s%s", c->prefix, suffix);
	int rc = gguf_get_float(c->m->file, key, out);
	if (rc == -ENOENT)
		*out = def;
	else if (rc)
		return err_set(c->err, c->err_len, -EINVAL, "%s: key '%s' is not a number", c->path,
		               key);
	if (!(*out >= lo && *out <= hi))
		return err_set(c->err, c->err_len, -EINVAL, "%s: key '%s' is %g (must be %g..%g)",
		               c->path, key, *out, lo, hi);
	return 0;
}

static int read_arch(struct load_ctx *c)
{
	const char *s;
	size_t len;
	if (gguf_get_string(c->m->file, "general.architecture", &s, &len) != 0)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: 'general.architecture' is missing or not a string", c->path);
	char why[SINKD_ERR_LEN];
	int rc = model_arch_lookup(s, len, &c->m->hp.arch, why, sizeof(why));
	if (rc)
		return err_set(c->err, c->err_len, rc, "%s: %s", c->path, why);
	snprintf(c->prefix, sizeof(c->prefix), "%s.", model_arch_name(c->m->hp.arch));
	return 0;
}

/* Files that need more than their architecture's row says: mixture of
 * experts, and (rows whose heads split the embedding width) key/value
 * widths other than embedding_length / head_count. */
static int check_unsupported_variants(struct load_ctx *c)
{
	const struct model_hparams *hp = &c->m->hp;
	int experts = 0, key_len = 0, value_len = 0;
	int rc = hp_int(c, "expert_count", 0, 0, INT32_MAX, &experts);
	if (rc == 0 && experts > 0 && !model_arch_experts(hp->arch))
		return err_set(c->err, c->err_len, -ENOTSUP,
		               "%s: mixture-of-experts models (%sexpert_count %d) are not "
		               "supported for architecture '%s' (supported: gpt-oss, qwen3moe)",
		               c->path, c->prefix, experts, model_arch_name(hp->arch));
	if (rc || model_arch_head_width(hp->arch) != MODEL_HEAD_WIDTH_SPLIT)
		return rc;
	rc = hp_int(c, "attention.key_length", hp->head_dim, 1, INT32_MAX, &key_len);
	if (rc == 0)
		rc = hp_int(c, "attention.value_length", hp->head_dim, 1, INT32_MAX, &value_len);
	if (rc == 0 && (key_len != hp->head_dim || value_len != hp->head_dim))
		return err_set(
		    c->err, c->err_len, -ENOTSUP,
		    "%s: attention key/value width %d/%d differs from embedding_length / "
		    "head_count = %d, which is not supported",
		    c->path, key_len, value_len, hp->head_dim);
	return rc;
}

/* The head width: embedding_length / head_count, or for a row that reads
 * it attention.key_length, as llama.cpp reads them: each of key_length and
 * value_length defaults to embedding_length / head_count (which must then
 * divide), and they must be equal (sinkd's cache holds keys and values of
 * one width).  n_heads * head_dim may differ from embedding_length
 * (Mistral Nemo: 32 heads of 128 against 5120). */
static int read_head_dim(struct load_ctx *c)
{
	struct model_hparams *hp = &c->m->hp;
	bool keys = model_arch_head_width(hp->arch) == MODEL_HEAD_WIDTH_KEYS;
	char key_k[128], key_v[128];
	snprintf(key_k, sizeof(key_k), "%sattention.key_length", c->prefix);
	snprintf(key_v, sizeof(key_v), "%sattention.value_length", c->prefix);
	bool split = !keys || !gguf_has_key(c->m->file, key_k) || !gguf_has_key(c->m->file, key_v);
	if (hp->n_heads % hp->n_kv_heads != 0 || (split && hp->dim % hp->n_heads != 0))
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: embedding_length %d, head_count %d, head_count_kv %d: the "
		               "width must divide into heads and the heads into KV groups",
		               c->path, hp->dim, hp->n_heads, hp->n_kv_heads);
	hp->head_dim = hp->dim / hp->n_heads;
	if (!keys)
		return 0;
	int split_dim = hp->head_dim, value_len = 0;
	int rc = hp_int(c, "attention.key_length", split_dim, 2, MODEL_MAX_HEAD_DIM, &hp->head_dim);
	if (rc == 0)
		rc = hp_int(c, "attention.value_length", split_dim, 2, MODEL_MAX_HEAD_DIM,
		            &value_len);
	if (rc == 0 && value_len != hp->head_dim)
		return err_set(c->err, c->err_len, -ENOTSUP,
		               "%s: '%s' %d differs from '%s' %d: sinkd holds keys and values "
		               "of one width",
		               c->path, key_v, value_len, key_k, hp->head_dim);
	if (rc == 0 && hp->head_dim % 2 != 0)
		return err_set(c->err, c->err_len, -EINVAL, "%s: '%s' %d is odd (allowed: even)",
		               c->path, key_k, hp->head_dim);
	return rc;
}

/* A file's string for a message: at most 47 bytes, control characters as '?'. */
static void printable(const char *s, size_t len, char out[48])
{
	size_t n = len < 47 ? len : 47;
	for (size_t i = 0; i < n; i++)
		out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	out[n] = '\0';
}

/* YaRN's magnitude as llama.cpp ends up applying it to the rotated dims
 * (in float, as it computes it): 1 + 0.1 ln(factor) for a factor above 1,
 * else 1; times attn_factor. */
static float yarn_mscale(double freq_scale, float attn_factor)
{
	float factor = (float)(1.0 / freq_scale);
	float m = factor <= 1.0f ? 1.0f : 0.1f * logf(factor) + 1.0f;
	return m * attn_factor;
}

/* <arch>.rope.scaling.* as llama.cpp reads them: no type means linear, and
 * linear turns every pair 1/factor as fast (factor from rope.scaling.factor,
 * else the older rope.scale_linear; 0: none); none ignores the factor; yarn
 * blends scaled and unscaled frequencies over the original context
 * (rope.scaling.original_context_length, else context_length) with
 * llama.cpp's ext_factor 1 and betas 32 / 1, and multiplies the rotated
 * dims by its magnitude.  rope.scaling.attn_factor multiplies them too.
 * longrope is taken where the row has longrope's factor tensors (phi3);
 * the other types (longrope for llama, ...) are refused rather than
 * skipped. */
static int read_rope_scaling(struct load_ctx *c)
{
	struct model_hparams *hp = &c->m->hp;
	hp->rope_freq_scale = 1.0;
	char key[128];
	snprintf(key, sizeof(key), "%srope.scaling.type", c->prefix);
	const char *type = "linear";
	size_t len = 6;
	if (gguf_has_key(c->m->file, key) && gguf_get_string(c->m->file, key, &type, &len))
		return err_set(c->err, c->err_len, -EINVAL, "%s: key '%s' is not a string", c->path,
		               key);
	bool none = len == 4 && memcmp(type, "none", 4) == 0;
	bool yarn = len == 4 && memcmp(type, "yarn", 4) == 0;
	/* longrope names what a row with long/short factor tensors does anyway
	 * (llama.cpp's phi3 graph reads the type nowhere) */
	bool longrope = len == 8 && memcmp(type, "longrope", 8) == 0 &&
	                model_arch_model_tensor(hp->arch, MODEL_T_ROPE_LONG) != NULL;
	if (!none && !yarn && !longrope && !(len == 6 && memcmp(type, "linear", 6) == 0)) {
		char shown[48];
		printable(type, len, shown);
		return err_set(c->err, c->err_len, -ENOTSUP,
		               "%s: key '%s' is '%s', which sinkd does not implement for %s "
		               "(allowed: none, linear, yarn%s)",
		               c->path, key, shown, model_arch_name(hp->arch),
		               model_arch_model_tensor(hp->arch, MODEL_T_ROPE_LONG) ? ", longrope"
		                                                                    : "");
	}
	double factor = 0.0, attn = 1.0;
	snprintf(key, sizeof(key), "%srope.scaling.factor", c->prefix);
	bool has_factor = gguf_has_key(c->m->file, key);
	int rc = hp_float(c, has_factor ? "rope.scaling.factor" : "rope.scale_linear", 0.0, 0.0,
	                  1e6, &factor);
	if (rc == 0)
		rc = hp_float(c, "rope.scaling.attn_factor", 1.0, 1e-6, 1e6, &attn);
	if (rc == 0)
		rc = hp_int(c, "rope.scaling.original_context_length", hp->context_length, 1,
		            INT32_MAX, &hp->rope_ctx_orig);
	if (rc)
		return rc;
	if (!none && factor != 0.0)
		hp->rope_freq_scale = 1.0 / factor;
	hp->rope_ext_factor = yarn ? 1.0 : 0.0;
	hp->rope_attn_scale = yarn ? yarn_mscale(hp->rope_freq_scale, (float)attn) : (float)attn;
	return 0;
}

/* llama.cpp reads a head width and rotated dims of their own for sliding
 * layers (key_length_swa, value_length_swa, rope.dimension_count_swa);
 * sinkd's layers share one, so a file whose differ is refused. */
static int check_swa_widths(struct load_ctx *c)
{
	const struct model_hparams *hp = &c->m->hp;
	static const char *const keys[] = {"attention.key_length_swa", "attention.value_length_swa",
	                                   "rope.dimension_count_swa"};
	for (int i = 0; i < 3; i++) {
		int full = i < 2 ? hp->head_dim : hp->rope_dim, v = 0;
		int rc = hp_int(c, keys[i], full, 1, INT32_MAX, &v);
		if (rc)
			return rc;
		if (v != full)
			return err_set(c->err, c->err_len, -ENOTSUP,
			               "%s: key '%s%s' is %d, which differs from the global layers' "
			               "%d: sliding layers of another width are not implemented",
			               c->path, c->prefix, keys[i], v, full);
	}
	return 0;
}

/* Every "<arch>.*" key of the file must be one the row knows: another
 * (a sliding window, a soft-cap, YaRN's parameters, a key of a newer
 * converter) could change the forward pass, so the file is refused naming
 * the first such key.  general.* and tokenizer.* keys are outside the rule. */
static int check_arch_keys(struct load_ctx *c)
{
	const struct model_hparams *hp = &c->m->hp;
	size_t plen = strlen(c->prefix);
	for (size_t i = 0; i < gguf_n_kv(c->m->file); i++) {
		const char *key = gguf_kv_key(c->m->file, i);
		if (strncmp(key, c->prefix, plen) != 0 ||
		    model_arch_knows_key(hp->arch, key + plen))
			continue;
		char shown[48];
		printable(key, strlen(key), shown);
		return err_set(
		    c->err, c->err_len, -ENOTSUP,
		    "%s: key '%s' is not one sinkd knows for architecture '%s' (it could "
		    "change the forward pass, so the file is refused rather than the key "
		    "ignored)",
		    c->path, shown, model_arch_name(hp->arch));
	}
	return 0;
}

/* Which layers slide (model_arch_attn): sliding_window and its pattern,
 * into a model-owned layer_swa (NULL when none does), and their RoPE base. */
static int read_sliding_layers(struct load_ctx *c, const struct model_arch_attn *fa)
{
	struct model_hparams *hp = &c->m->hp;
	int window = 0, period = 0;
	int rc = hp_int(c, "attention.sliding_window", fa->swa_window_default,
	                fa->swa_window_default > 0 ? 1 : 0, INT32_MAX, &window);
	if (rc == 0)
		rc = check_swa_widths(c);
	if (rc || window == 0)
		return rc;
	rc = hp_int(c, "attention.sliding_window_pattern", fa->swa_period_default, 0,
	            MODEL_MAX_LAYERS, &period);
	double theta_swa = 0.0;
	if (rc == 0)
		rc = hp_float(c, "rope.freq_base_swa",
		              fa->rope_theta_swa_default > 0 ? fa->rope_theta_swa_default
		                                             : hp->rope_theta,
		              1e-3, 1e12, &theta_swa);
	if (rc)
		return rc;
	uint8_t *swa = calloc((size_t)hp->n_layers, 1);
	if (swa == NULL || own(c->m, swa))
		return -ENOMEM;
	bool any = false;
	for (int l = 0; l < hp->n_layers; l++) {
		swa[l] = period == 0 || l % period < period - 1;
		any = any || swa[l];
	}
	if (!any)
		return 0;
	/* Rows whose sliding layers turn with the global scaling (gemma2,
	 * gpt-oss: llama.cpp's rope_freq_scale_train_swa = rope_freq_scale_train)
	 * get YaRN's blend and magnitude there too, as every layer: the cache
	 * geometry turns them so.  Elsewhere llama.cpp turns sliding layers at
	 * scale 1 but still applies YaRN's attention factor, unlike the global
	 * layers' magnitude, which sinkd does not compute. */
	hp->swa_rope_scaled = fa->swa_rope_scaled;
	if (hp->rope_ext_factor != 0.0 && !hp->swa_rope_scaled)
		return err_set(c->err, c->err_len, -ENOTSUP,
		               "%s: YaRN (%srope.scaling.type yarn) in a model with unscaled "
		               "sliding-window layers (architecture '%s') is not implemented",
		               c->path, c->prefix, model_arch_name(hp->arch));
	hp->swa_window = window;
	hp->layer_swa = swa;
	hp->rope_theta_swa = theta_swa;
	return 0;
}

/* What the row's attention and logits do beyond the Llama shape: soft-caps,
 * the query and embedding scales, sliding layers (model_arch_attn). */
static int read_attn_facts(struct load_ctx *c)
{
	struct model_hparams *hp = &c->m->hp;
	const struct model_arch_attn *fa = model_arch_attn(hp->arch);
	double cap = 0.0;
	int rc = 0;
	if (fa->attn_softcap) {
		rc = hp_float(c, "attn_logit_softcapping", fa->attn_softcap_default, 1e-3, 1e6,
		              &cap);
		hp->attn_softcap = (float)cap;
	}
	if (rc == 0 && fa->final_softcap) {
		rc = hp_float(c, "final_logit_softcapping", fa->final_softcap_default,
		              fa->final_softcap_default > 0 ? 1e-3 : 0.0, 1e6, &cap);
		hp->final_softcap = (float)cap;
	}
	if (fa->embed_scale)
		hp->embed_scale = sqrtf((float)hp->dim);
	if (fa->full_width_scale_layers > 0) {
		/* as llama.cpp: the width divided as integers, then the root */
		int width = hp->n_layers == fa->full_width_scale_layers ? hp->dim / hp->n_heads
		                                                        : hp->head_dim;
		hp->attn_scale = 1.0f / sqrtf((float)width);
	}
	if (rc == 0 && fa->sliding)
		rc = read_sliding_layers(c, fa);
	return rc;
}

/* The mixture-of-experts counts of a row with experts: expert_count (at
 * least 1), expert_used_count (the k of top-k, 1..expert_count) and each
 * expert's hidden width, expert_feed_forward_length (required by gpt-oss;
 * qwen3moe's default is feed_forward_length / expert_used_count, as
 * llama.cpp reads it). */
static int read_experts(struct load_ctx *c)
{
	struct model_hparams *hp = &c->m->hp;
	if (!model_arch_experts(hp->arch))
		return 0;
	int rc = hp_int(c, "expert_count", -1, 1, 1 << 16, &hp->n_experts);
	if (rc == 0)
		rc = hp_int(c, "expert_used_count", -1, 1, hp->n_experts, &hp->n_experts_used);
	if (rc)
		return rc;
	bool gptoss = model_arch_moe(hp->arch)->act == MODEL_EXPERT_SWIGLU_OAI;
	int def = gptoss ? -1 : hp->ffn_dim / hp->n_experts_used;
	return hp_int(c, "expert_feed_forward_length", def, 1, 4 * MODEL_MAX_DIM,
	              &hp->expert_ffn_dim);
}

static int read_hparams(struct load_ctx *c)
{
	struct model_hparams *hp = &c->m->hp;
	int rc = read_arch(c);
	if (rc == 0)
		rc = hp_int(c, "embedding_length", -1, 1, MODEL_MAX_DIM, &hp->dim);
	if (rc == 0)
		rc = hp_int(c, "block_count", -1, 1, MODEL_MAX_LAYERS, &hp->n_layers);
	if (rc == 0)
		rc = hp_int(c, "feed_forward_length", -1, 1, 4 * MODEL_MAX_DIM, &hp->ffn_dim);
	if (rc == 0)
		rc = hp_int(c, "attention.head_count", -1, 1, hp->dim, &hp->n_heads);
	if (rc == 0)
		rc = hp_int(c, "attention.head_count_kv", hp->n_heads, 1, hp->n_heads,
		            &hp->n_kv_heads);
	if (rc == 0)
		rc = hp_int(c, "context_length", 2048, 1, INT32_MAX, &hp->context_length);
	if (rc == 0)
		rc = read_head_dim(c);
	if (rc)
		return rc;
	rc = hp_int(c, "rope.dimension_count", hp->head_dim, 2, hp->head_dim, &hp->rope_dim);
	if (rc == 0 && hp->rope_dim % 2 != 0)
		rc = err_set(c->err, c->err_len, -EINVAL, "%s: rope.dimension_count %d is odd",
		             c->path, hp->rope_dim);
	if (rc == 0)
		rc = hp_float(c, "rope.freq_base", 10000.0, 1e-3, 1e12, &hp->rope_theta);
	if (rc == 0)
		rc = read_rope_scaling(c);
	double eps = 0;
	if (rc == 0)
		rc = hp_float(c, model_arch_norm_eps_key(hp->arch), 1e-5, 1e-12, 1.0, &eps);
	hp->norm_eps = (float)eps;
	if (rc == 0)
		rc = read_attn_facts(c);
	if (rc == 0)
		rc = check_unsupported_variants(c);
	if (rc == 0)
		rc = read_experts(c);
	return rc ? rc : check_arch_keys(c);
}

/* ------------------------------------------------------------------------
 * Tensors. */

static int own(struct model *m, void *buf)
{
	void **grown = realloc(m->owned, (m->n_owned + 1) * sizeof(*grown));
	if (grown == NULL) {
		free(buf);
		return -ENOMEM;
	}
	m->owned = grown;
	m->owned[m->n_owned++] = buf;
	return 0;
}

/* "d0, d1, ..." of n dims into out. */
static void dims_text(const uint64_t *dims, uint32_t n, char *out, size_t out_len)
{
	size_t used = 0;
	out[0] = '\0';
	for (uint32_t i = 0; i < n && used < out_len; i++)
		used += (size_t)snprintf(out + used, out_len - used, "%s%" PRIu64, i ? ", " : "",
		                         dims[i]);
}

/* A tensor that must exist with dims [d0], [d0, d1] or [d0, d1, d2] (the
 * trailing zeros of d1, d2 absent). */
static int find_shaped3(struct load_ctx *c, const char *name, uint64_t d0, uint64_t d1,
                        uint64_t d2, const struct gguf_tensor **out)
{
	const struct gguf_tensor *t = gguf_find_tensor(c->m->file, name);
	if (t == NULL)
		return err_set(c->err, c->err_len, -EINVAL, "%s: tensor '%s' is missing", c->path,
		               name);
	const uint64_t want[3] = {d0, d1, d2};
	uint32_t n_want = d2 ? 3 : d1 ? 2 : 1;
	bool ok = t->n_dims == n_want;
	for (uint32_t i = 0; ok && i < n_want; i++)
		ok = t->dims[i] == want[i];
	if (!ok) {
		char found[96], expected[96];
		dims_text(t->dims, t->n_dims, found, sizeof(found));
		dims_text(want, n_want, expected, sizeof(expected));
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: tensor '%s' has dims [%s], expected [%s]", c->path, name, found,
		               expected);
	}
	*out = t;
	return 0;
}

/* A tensor that must exist with dims [d0] (d1 == 0) or [d0, d1]. */
static int find_shaped(struct load_ctx *c, const char *name, uint64_t d0, uint64_t d1,
                       const struct gguf_tensor **out)
{
	return find_shaped3(c, name, d0, d1, 0, out);
}

static int unsupported(struct load_ctx *c, const struct gguf_tensor *t)
{
	char names[160];
	wtype_names(names, sizeof(names));
	return err_set(c->err, c->err_len, -ENOTSUP,
	               "%s: tensor '%s' has type %s, which sinkd does not support; supported: %s",
	               c->path, t->name, ggml_type_name(t->type), names);
}

/* An F32 copy of tensor t in model-owned memory, `rows` rows of `cols`. */
static int to_f32(struct load_ctx *c, const struct gguf_tensor *t, uint64_t rows, uint64_t cols,
                  float **out)
{
	*out = NULL;
	if (!wtype_loadable(t->type))
		return unsupported(c, t);
	size_t bytes = (size_t)(rows * cols * sizeof(float));
	float *buf = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	if (buf == NULL)
		return err_set(c->err, c->err_len, -ENOMEM,
		               "%s: tensor '%s': cannot allocate %zu bytes", c->path, t->name,
		               bytes);
	size_t row_bytes = ggml_row_bytes(t->type, cols);
	for (uint64_t r = 0; r < rows; r++)
		dequantize_row(t->type, (const uint8_t *)t->data + r * row_bytes, buf + r * cols,
		               cols);
	int rc = own(c->m, buf);
	*out = buf;
	log_copy(c, t, "F32", bytes);
	return rc;
}

/* A norm or bias vector of n floats, always a copy: every forward reads it,
 * and read from the mapping it would fault back in the whole (up to 2 MiB)
 * page-cache folio around it after the matrices there gave their pages
 * back (backend_cpu.c), holding most of the file resident again. */
static int load_floats(struct load_ctx *c, const char *name, uint64_t d0, uint64_t d1,
                       const float **out)
{
	const struct gguf_tensor *t;
	int rc = find_shaped(c, name, d0, d1, &t);
	if (rc)
		return rc;
	uint64_t n = d0 * (d1 ? d1 : 1);
	if (t->type == GGML_TYPE_F32) {
		float *copy = malloc((size_t)n * sizeof(float));
		if (!copy)
			return err_set(c->err, c->err_len, -ENOMEM,
			               "%s: tensor '%s': out of memory", c->path, t->name);
		memcpy(copy, t->data, (size_t)n * sizeof(float));
		rc = own(c->m, copy);
		*out = rc ? NULL : copy;
		return rc;
	}
	float *buf = NULL;
	rc = to_f32(c, t, d1 ? d1 : 1, d0, &buf);
	*out = buf;
	return rc;
}

static int load_vector(struct load_ctx *c, const char *name, uint64_t n, const float **out)
{
	return load_floats(c, name, n, 0, out);
}

/* The largest finite F16. */
#define F16_MAX 65504.0f

/* An F16 copy of tensor t in model-owned memory, `rows` rows of `cols`:
 * *out stays NULL (and 0 is returned) when a value is beyond F16's range,
 * for the caller to take F32 instead. */
static int to_f16(struct load_ctx *c, const struct gguf_tensor *t, uint64_t rows, uint64_t cols,
                  uint16_t **out)
{
	*out = NULL;
	if (!wtype_loadable(t->type))
		return unsupported(c, t);
	size_t bytes = (size_t)(rows * cols * sizeof(uint16_t));
	uint16_t *buf = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	float *row = malloc((size_t)cols * sizeof(float));
	int rc = 0;
	if (buf == NULL || row == NULL) {
		rc = err_set(c->err, c->err_len, -ENOMEM,
		             "%s: tensor '%s': cannot allocate %zu bytes", c->path, t->name, bytes);
		goto out;
	}
	size_t row_bytes = ggml_row_bytes(t->type, cols);
	for (uint64_t r = 0; r < rows; r++) {
		dequantize_row(t->type, (const uint8_t *)t->data + r * row_bytes, row, cols);
		for (uint64_t i = 0; i < cols; i++) {
			if (!(fabsf(row[i]) <= F16_MAX))
				goto out; /* rc 0, *out NULL: F32 it is */
			buf[r * cols + i] = f32_to_fp16(row[i]);
		}
	}
	rc = own(c->m, buf);
	*out = rc ? NULL : buf;
	if (rc == 0)
		log_copy(c, t, "F16", bytes);
	buf = NULL; /* own() frees it on failure */
out:
	free(buf);
	free(row);
	return rc;
}

/* A (rows, cols) matrix: kept as stored; or copied, from a block type the
 * kernels do not read to F16 (F32 where F16 cannot hold it), from a
 * misaligned float type to F32.  A copied tensor's file pages are given
 * back: the model never reads them again. */
static int place_matrix(struct load_ctx *c, const struct gguf_tensor *t, int rows, int cols,
                        struct weight_matrix *w)
{
	int rc = 0;
	w->rows = rows;
	w->cols = cols;
	size_t align = t->type == GGML_TYPE_F32 ? 4 : 2;
	if (wtype_kept_as_stored(t->type) && (uintptr_t)t->data % align == 0) {
		w->type = t->type;
		w->data = t->data;
		w->row_bytes = ggml_row_bytes(t->type, (uint64_t)cols);
		return 0;
	}
	uint16_t *half = NULL;
	if (!wtype_kept_as_stored(t->type))
		rc = to_f16(c, t, (uint64_t)rows, (uint64_t)cols, &half);
	if (rc == 0 && half) {
		w->type = GGML_TYPE_F16;
		w->data = half;
		w->row_bytes = (size_t)cols * sizeof(uint16_t);
	} else if (rc == 0) {
		float *buf = NULL;
		rc = to_f32(c, t, (uint64_t)rows, (uint64_t)cols, &buf);
		w->type = GGML_TYPE_F32;
		w->data = buf;
		w->row_bytes = (size_t)cols * sizeof(float);
	}
	if (rc == 0)
		pages_release(t->data, ggml_row_bytes(t->type, (uint64_t)cols) * (size_t)rows);
	return rc;
}

static int load_matrix(struct load_ctx *c, const char *name, int rows, int cols,
                       struct weight_matrix *w)
{
	const struct gguf_tensor *t;
	int rc = find_shaped(c, name, (uint64_t)cols, (uint64_t)rows, &t);
	return rc ? rc : place_matrix(c, t, rows, cols, w);
}

/* A 3-D expert tensor [cols, rows, n_experts], placed as one matrix of
 * n_experts * rows rows (kept as stored, or converted like a 2-D one) and
 * viewed as n_experts matrices in a model-owned array: expert e's is the
 * whole's data from row e * rows on (a block row never straddles two). */
static int load_experts(struct load_ctx *c, const char *name, int rows, int cols,
                        struct weight_matrix **out)
{
	int n_exp = c->m->hp.n_experts;
	const struct gguf_tensor *t;
	int rc = find_shaped3(c, name, (uint64_t)cols, (uint64_t)rows, (uint64_t)n_exp, &t);
	if (rc)
		return rc;
	if ((int64_t)rows * n_exp > INT32_MAX)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: tensor '%s': %d experts of %d rows is too many", c->path, name,
		               n_exp, rows);
	struct weight_matrix whole = {0};
	rc = place_matrix(c, t, rows * n_exp, cols, &whole);
	struct weight_matrix *e = rc ? NULL : calloc((size_t)n_exp, sizeof(*e));
	if (rc == 0 && (e == NULL || own(c->m, e)))
		return -ENOMEM;
	for (int i = 0; rc == 0 && i < n_exp; i++) {
		e[i] = whole;
		e[i].rows = rows;
		e[i].data = (const uint8_t *)whole.data + (size_t)i * (size_t)rows * whole.row_bytes;
	}
	*out = e;
	return rc;
}

/* blk.<i>.<the architecture's name of tensor t>. */
static void layer_tensor_name(const struct load_ctx *c, int i, enum model_layer_tensor t, char *out,
                              size_t out_len)
{
	const char *name = model_arch_layer_tensor(c->m->hp.arch, t);
	snprintf(out, out_len, "blk.%d.%s", i, name ? name : "-");
}

/* The Gemma shape's norms where the row names them (n: the layer's
 * tensor names): after attention and feed-forward (dim), of each query and
 * key head (head_dim). */
static int load_gemma_norms(struct load_ctx *c, char (*n)[64], struct model_layer *l)
{
	const struct model_hparams *hp = &c->m->hp;
	const struct {
		enum model_layer_tensor t;
		int len;
		const float **out;
	} norms[] = {{MODEL_LT_POST_ATTN_NORM, hp->dim, &l->post_attn_norm},
	             {MODEL_LT_POST_FFW_NORM, hp->dim, &l->post_ffw_norm},
	             {MODEL_LT_Q_NORM, hp->head_dim, &l->q_norm},
	             {MODEL_LT_K_NORM, hp->head_dim, &l->k_norm}};
	int rc = 0;
	for (size_t k = 0; rc == 0 && k < sizeof(norms) / sizeof(norms[0]); k++)
		if (model_arch_layer_tensor(hp->arch, norms[k].t))
			rc = load_vector(c, n[norms[k].t], (uint64_t)norms[k].len, norms[k].out);
	return rc;
}

/* A matrix of stacked parts (phi3's attn_qkv: Q, K, V rows; ffn_up: gate,
 * up rows), loaded as one and viewed as n parts of rows[p] rows each: a
 * block row never straddles two parts, so a part is the whole's data from
 * its first row on. */
static int load_stacked(struct load_ctx *c, const char *name, int cols, int n, const int *rows,
                        struct weight_matrix *const *parts)
{
	int total = 0;
	for (int p = 0; p < n; p++)
		total += rows[p];
	struct weight_matrix whole;
	int rc = load_matrix(c, name, total, cols, &whole);
	if (rc)
		return rc;
	size_t at = 0;
	for (int p = 0; p < n; p++) {
		*parts[p] = whole;
		parts[p]->rows = rows[p];
		parts[p]->data = (const uint8_t *)whole.data + at * whole.row_bytes;
		at += (size_t)rows[p];
	}
	return 0;
}

/* Q, K, V: three matrices, or the row's stacked attn_qkv. */
static int load_qkv(struct load_ctx *c, char n[][64], struct model_layer *l)
{
	const struct model_hparams *hp = &c->m->hp;
	int q_dim = hp->n_heads * hp->head_dim, kv_dim = hp->n_kv_heads * hp->head_dim;
	if (model_arch_layer_tensor(hp->arch, MODEL_LT_QKV)) {
		const int rows[3] = {q_dim, kv_dim, kv_dim};
		struct weight_matrix *const parts[3] = {&l->wq, &l->wk, &l->wv};
		return load_stacked(c, n[MODEL_LT_QKV], hp->dim, 3, rows, parts);
	}
	int rc = load_matrix(c, n[MODEL_LT_Q], q_dim, hp->dim, &l->wq);
	if (rc == 0)
		rc = load_matrix(c, n[MODEL_LT_K], kv_dim, hp->dim, &l->wk);
	if (rc == 0)
		rc = load_matrix(c, n[MODEL_LT_V], kv_dim, hp->dim, &l->wv);
	return rc;
}

/* Gate and up: two matrices, or the row's ffn_up holding both. */
static int load_gate_up(struct load_ctx *c, char n[][64], struct model_layer *l)
{
	const struct model_hparams *hp = &c->m->hp;
	if (model_arch_fused_gate_up(hp->arch)) {
		const int rows[2] = {hp->ffn_dim, hp->ffn_dim};
		struct weight_matrix *const parts[2] = {&l->w_gate, &l->w_up};
		return load_stacked(c, n[MODEL_LT_UP], hp->dim, 2, rows, parts);
	}
	int rc = load_matrix(c, n[MODEL_LT_GATE], hp->ffn_dim, hp->dim, &l->w_gate);
	if (rc == 0)
		rc = load_matrix(c, n[MODEL_LT_UP], hp->ffn_dim, hp->dim, &l->w_up);
	return rc;
}

/* gpt-oss's attention output bias (dim) and learned sink logits
 * (n_heads), where the row names them. */
static int load_attn_extras(struct load_ctx *c, char (*n)[64], struct model_layer *l)
{
	const struct model_hparams *hp = &c->m->hp;
	int rc = 0;
	if (model_arch_layer_tensor(hp->arch, MODEL_LT_BO))
		rc = load_vector(c, n[MODEL_LT_BO], (uint64_t)hp->dim, &l->bo);
	if (rc == 0 && model_arch_layer_tensor(hp->arch, MODEL_LT_SINKS))
		rc = load_vector(c, n[MODEL_LT_SINKS], (uint64_t)hp->n_heads, &l->attn_sinks);
	return rc;
}

/* A mixture-of-experts layer's feed-forward: the router (n_experts, dim)
 * and its bias where the row names it, the three expert tensors and their
 * biases where named ([width, n_experts] each); w_gate/w_up/w_down stay
 * empty. */
static int load_moe(struct load_ctx *c, char (*n)[64], struct model_layer *l)
{
	const struct model_hparams *hp = &c->m->hp;
	int ne = hp->n_experts, ff = hp->expert_ffn_dim;
	int rc = load_matrix(c, n[MODEL_LT_GATE_INP], ne, hp->dim, &l->w_router);
	if (rc == 0)
		rc = load_experts(c, n[MODEL_LT_GATE_EXPS], ff, hp->dim, &l->exp_gate);
	if (rc == 0)
		rc = load_experts(c, n[MODEL_LT_UP_EXPS], ff, hp->dim, &l->exp_up);
	if (rc == 0)
		rc = load_experts(c, n[MODEL_LT_DOWN_EXPS], hp->dim, ff, &l->exp_down);
	const struct {
		enum model_layer_tensor t;
		int width, count;
		const float **out;
	} biases[] = {{MODEL_LT_GATE_INP_B, ne, 0, &l->b_router},
	              {MODEL_LT_GATE_EXPS_B, ff, ne, &l->exp_b_gate},
	              {MODEL_LT_UP_EXPS_B, ff, ne, &l->exp_b_up},
	              {MODEL_LT_DOWN_EXPS_B, hp->dim, ne, &l->exp_b_down}};
	for (size_t k = 0; rc == 0 && k < sizeof(biases) / sizeof(biases[0]); k++)
		if (model_arch_layer_tensor(hp->arch, biases[k].t))
			rc = load_floats(c, n[biases[k].t], (uint64_t)biases[k].width,
			                 (uint64_t)biases[k].count, biases[k].out);
	return rc;
}

/* The feed-forward: the dense MLP, or the row's mixture of experts. */
static int load_ffn(struct load_ctx *c, char (*n)[64], struct model_layer *l)
{
	const struct model_hparams *hp = &c->m->hp;
	if (model_arch_layer_kind(hp->arch) == MODEL_LAYER_MOE)
		return load_moe(c, n, l);
	int rc = load_gate_up(c, n, l);
	if (rc == 0)
		rc = load_matrix(c, n[MODEL_LT_DOWN], hp->dim, hp->ffn_dim, &l->w_down);
	return rc;
}

static int load_layer(struct load_ctx *c, int i, struct model_layer *l)
{
	const struct model_hparams *hp = &c->m->hp;
	int q_dim = hp->n_heads * hp->head_dim, kv_dim = hp->n_kv_heads * hp->head_dim;
	char n[MODEL_LT_COUNT][64];
	for (int k = 0; k < MODEL_LT_COUNT; k++)
		layer_tensor_name(c, i, (enum model_layer_tensor)k, n[k], sizeof(n[k]));
	int rc = load_vector(c, n[MODEL_LT_ATTN_NORM], (uint64_t)hp->dim, &l->attn_norm);
	if (rc == 0)
		rc = load_qkv(c, n, l);
	if (rc == 0)
		rc = load_matrix(c, n[MODEL_LT_O], hp->dim, q_dim, &l->wo);
	if (rc == 0)
		rc = load_vector(c, n[MODEL_LT_FFN_NORM], (uint64_t)hp->dim, &l->ffn_norm);
	if (rc == 0)
		rc = load_ffn(c, n, l);
	if (rc == 0)
		rc = load_gemma_norms(c, n, l);
	if (rc == 0)
		rc = load_attn_extras(c, n, l);
	if (rc || !hp->has_qkv_bias)
		return rc;
	rc = load_vector(c, n[MODEL_LT_BQ], (uint64_t)q_dim, &l->bq);
	if (rc == 0)
		rc = load_vector(c, n[MODEL_LT_BK], (uint64_t)kv_dim, &l->bk);
	if (rc == 0)
		rc = load_vector(c, n[MODEL_LT_BV], (uint64_t)kv_dim, &l->bv);
	return rc;
}

/* Whether the layers have Q/K/V biases, as the architecture's row allows:
 * a file with biases its row does not know is refused, since they would
 * change the forward pass. */
static int read_qkv_bias(struct load_ctx *c)
{
	struct model_hparams *hp = &c->m->hp;
	char name[64];
	layer_tensor_name(c, 0, MODEL_LT_BQ, name, sizeof(name));
	bool present = gguf_find_tensor(c->m->file, name) != NULL;
	switch (model_arch_qkv_bias(hp->arch)) {
	case MODEL_BIAS_REQUIRED:
		hp->has_qkv_bias = true;
		return 0;
	case MODEL_BIAS_OPTIONAL:
		hp->has_qkv_bias = present;
		return 0;
	case MODEL_BIAS_NONE:
		break;
	}
	hp->has_qkv_bias = false;
	if (present)
		return err_set(c->err, c->err_len, -ENOTSUP,
		               "%s: tensor '%s': architecture '%s' has no attention biases",
		               c->path, name, model_arch_name(hp->arch));
	return 0;
}

/* A tensor of per-pair RoPE frequency factors: F32, rope_dim/2 positive
 * values. */
static int load_factors(struct load_ctx *c, const char *name, const float **out)
{
	const struct model_hparams *hp = &c->m->hp;
	const struct gguf_tensor *t;
	int rc = find_shaped(c, name, (uint64_t)hp->rope_dim / 2, 0, &t);
	if (rc)
		return rc;
	if (t->type != GGML_TYPE_F32)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: tensor '%s' has type %s, expected F32", c->path, name,
		               ggml_type_name(t->type));
	rc = load_vector(c, name, (uint64_t)hp->rope_dim / 2, out);
	for (int i = 0; rc == 0 && i < hp->rope_dim / 2; i++)
		if (!((*out)[i] > 0.0f) || !isfinite((*out)[i]))
			rc = err_set(c->err, c->err_len, -EINVAL,
			             "%s: tensor '%s': value %d is %g (must be > 0)", c->path, name,
			             i, (double)(*out)[i]);
	return rc;
}

/* The architecture's optional tensor of per-pair RoPE frequency factors
 * (llama3): F32, rope_dim/2 positive values.  A file that has
 * rope_freqs.weight where the row knows none is refused: computing without
 * it would give other logits without a word. */
static int read_rope_factors(struct load_ctx *c)
{
	struct model_hparams *hp = &c->m->hp;
	const char *name = model_arch_rope_factors_tensor(hp->arch);
	hp->rope_factors = NULL;
	if (name == NULL) {
		if (gguf_find_tensor(c->m->file, "rope_freqs.weight") == NULL)
			return 0;
		return err_set(c->err, c->err_len, -ENOTSUP,
		               "%s: tensor 'rope_freqs.weight' (RoPE frequency factors): "
		               "architecture '%s' does not use it",
		               c->path, model_arch_name(hp->arch));
	}
	if (gguf_find_tensor(c->m->file, name) == NULL)
		return 0;
	return load_factors(c, name, &hp->rope_factors);
}

/* longrope's two factor sets (phi3), each optional as in llama.cpp; which
 * one a cache turns by is the geometry's choice (cache_geometry_set_rope_scaling). */
static int read_longrope_factors(struct load_ctx *c)
{
	struct model_hparams *hp = &c->m->hp;
	const char *long_name = model_arch_model_tensor(hp->arch, MODEL_T_ROPE_LONG);
	const char *short_name = model_arch_model_tensor(hp->arch, MODEL_T_ROPE_SHORT);
	hp->rope_factors_long = hp->rope_factors_short = NULL;
	int rc = 0;
	if (long_name && gguf_find_tensor(c->m->file, long_name))
		rc = load_factors(c, long_name, &hp->rope_factors_long);
	if (rc == 0 && short_name && gguf_find_tensor(c->m->file, short_name))
		rc = load_factors(c, short_name, &hp->rope_factors_short);
	return rc;
}

/* What the model does with a tensor of the file its row knows: read it,
 * or not (its need is NONE, or it is an optional bias where blk.0 has none
 * and so no layer's is read). */
static bool tensor_is_read(const struct model_hparams *hp, int layer, int t)
{
	if (layer < 0)
		return model_arch_model_tensor_need(hp->arch, (enum model_tensor)t) !=
		       MODEL_TENSOR_NONE;
	if (model_layer_tensor_is_bias(t) && !hp->has_qkv_bias)
		return false;
	return model_arch_layer_tensor_need(hp->arch, (enum model_layer_tensor)t) !=
	       MODEL_TENSOR_NONE;
}

static int not_part(struct load_ctx *c, const char *shown)
{
	const struct model_hparams *hp = &c->m->hp;
	char names[480];
	model_arch_tensor_names(hp->arch, names, sizeof(names));
	/* llama.cpp's converter names a vision tower's tensors v.* and its
	 * projector's mm.*: sinkd runs the language model alone */
	bool vision = strncmp(shown, "v.", 2) == 0 || strncmp(shown, "mm.", 3) == 0;
	return err_set(c->err, c->err_len, -ENOTSUP,
	               "%s: tensor '%s' is not part of a %s model%s (sinkd reads: %s)", c->path,
	               shown, model_arch_name(hp->arch),
	               vision ? "; vision towers are not supported" : "", names);
}

/* Every tensor of the file must be one the model reads: one it would skip
 * (another architecture's, a layer beyond block_count, a bias of a model
 * without biases) could change the forward pass, so the file is refused
 * naming the first such tensor.  The required ones are checked as they are
 * loaded. */
static int check_tensor_names(struct load_ctx *c)
{
	const struct model_hparams *hp = &c->m->hp;
	size_t n = gguf_n_tensors(c->m->file);
	for (size_t i = 0; i < n; i++) {
		const char *name = gguf_tensor_at(c->m->file, i)->name;
		int layer = -1, t = 0;
		bool known = model_arch_tensor_parse(hp->arch, name, &layer, &t);
		if (known && layer < hp->n_layers && tensor_is_read(hp, layer, t))
			continue;
		char shown[48];
		printable(name, strlen(name), shown);
		if (!known || !tensor_is_read(hp, layer, t)) {
			if (known && layer >= 0 && model_layer_tensor_is_bias(t) &&
			    !hp->has_qkv_bias)
				return err_set(c->err, c->err_len, -EINVAL,
				               "%s: tensor '%s': blk.0 has no attention biases, "
				               "so no layer may have them",
				               c->path, shown);
			return not_part(c, shown);
		}
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: tensor '%s' is beyond the model's %d layers (%sblock_count)",
		               c->path, shown, hp->n_layers, c->prefix);
	}
	return 0;
}

static int load_tensors(struct load_ctx *c)
{
	struct model *m = c->m;
	struct model_hparams *hp = &m->hp;
	size_t n_tensors = gguf_n_tensors(m->file);
	size_t per_layer = (size_t)model_arch_layer_weights(hp->arch);
	if ((size_t)hp->n_layers > n_tensors / per_layer)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: block_count %d needs at least %zu tensors, the file has %zu",
		               c->path, hp->n_layers, per_layer * (size_t)hp->n_layers, n_tensors);
	const struct gguf_tensor *emb = gguf_find_tensor(m->file, "token_embd.weight");
	if (emb == NULL)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: tensor 'token_embd.weight' is missing", c->path);
	if (emb->n_dims != 2 || emb->dims[1] > MODEL_MAX_VOCAB)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: tensor 'token_embd.weight' must have dims [%d, n_vocab <= %d]",
		               c->path, hp->dim, MODEL_MAX_VOCAB);
	hp->n_vocab = (int)emb->dims[1];
	hp->tied_output =
	    model_arch_tied_output(hp->arch) && gguf_find_tensor(m->file, "output.weight") == NULL;
	int rc = read_qkv_bias(c);
	if (rc == 0)
		rc = read_rope_factors(c);
	if (rc == 0)
		rc = read_longrope_factors(c);
	if (rc == 0)
		rc = check_tensor_names(c);
	if (rc == 0)
		rc = load_matrix(c, "token_embd.weight", hp->n_vocab, hp->dim, &m->token_embd);
	if (rc == 0)
		rc = load_vector(c, "output_norm.weight", (uint64_t)hp->dim, &m->output_norm);
	if (rc == 0 && hp->tied_output)
		m->output = m->token_embd;
	else if (rc == 0)
		rc = load_matrix(c, "output.weight", hp->n_vocab, hp->dim, &m->output);
	if (rc == 0 && (m->layers = calloc((size_t)hp->n_layers, sizeof(*m->layers))) == NULL)
		rc = -ENOMEM;
	for (int i = 0; rc == 0 && i < hp->n_layers; i++)
		rc = load_layer(c, i, &m->layers[i]);
	return rc;
}

/* ------------------------------------------------------------------------
 * Load / free. */

static int check_sha256(const char *path, const char *expected, char *err, size_t err_len)
{
	char hex[65];
	int rc = digest_file_sha256_hex(path, hex, err, err_len);
	if (rc)
		return rc;
	if (strlen(expected) != 64 || strcasecmp(hex, expected) != 0)
		return err_set(err, err_len, -EBADMSG,
		               "%s: SHA-256 mismatch: expected %.64s, file has %s", path, expected,
		               hex);
	return 0;
}

static void set_name(struct model *m, const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	size_t len = strlen(base);
	if (len > 5 && strcmp(base + len - 5, ".gguf") == 0)
		len -= 5;
	if (len >= sizeof(m->name))
		len = sizeof(m->name) - 1;
	memcpy(m->name, base, len);
	m->name[len] = '\0';
}

int model_load(const char *path, const struct model_load_options *opt, struct model **out,
               char *err, size_t err_len)
{
	*out = NULL;
	int rc = 0;
	if (opt && opt->expected_sha256 &&
	    (rc = check_sha256(path, opt->expected_sha256, err, err_len)))
		return rc;
	struct model *m = calloc(1, sizeof(*m));
	if (m == NULL)
		return err_set(err, err_len, -ENOMEM, "%s: out of memory", path);
	rc = gguf_open(path, &m->file, err, err_len);
	if (rc)
		goto out;
	set_name(m, path);
	struct load_ctx c = {.m = m, .path = path, .err = err, .err_len = err_len,
	                     .log = opt ? opt->log : NULL};
	rc = read_hparams(&c);
	if (rc == 0)
		rc = load_tensors(&c);
	if (rc == -ENOMEM)
		err_set(err, err_len, rc, "%s: out of memory while loading the model", path);
out:
	if (rc) {
		model_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

void model_free(struct model *m)
{
	if (m == NULL)
		return;
	for (size_t i = 0; i < m->n_owned; i++)
		free(m->owned[i]);
	free(m->owned);
	free(m->layers);
	gguf_close(m->file);
	free(m);
}

/* Sum of what `per_matrix` says of a mixture-of-experts layer's experts:
 * `experts` of them (all of them sized alike). */
static double sum_experts(const struct model_layer *l, int experts,
                          double (*per_matrix)(const struct weight_matrix *))
{
	if (l->exp_gate == NULL)
		return 0.0;
	return (double)experts *
	       (per_matrix(&l->exp_gate[0]) + per_matrix(&l->exp_up[0]) + per_matrix(&l->exp_down[0]));
}

/* Sum of what `per_matrix` says of each matrix a decode step reads in full:
 * every layer matrix and the output head (of token_embd it reads one row,
 * so that is not counted unless tied); of a mixture-of-experts layer the
 * router and `experts` experts' matrices (a token's k, or all of them). */
static double sum_step_matrices(const struct model *m, int experts,
                                double (*per_matrix)(const struct weight_matrix *))
{
	double sum = per_matrix(&m->output);
	for (int i = 0; i < m->hp.n_layers; i++) {
		const struct model_layer *l = &m->layers[i];
		const struct weight_matrix *ws[] = {&l->wq,     &l->wk,   &l->wv,    &l->wo,
		                                    &l->w_gate, &l->w_up, &l->w_down, &l->w_router};
		for (size_t j = 0; j < sizeof(ws) / sizeof(ws[0]); j++)
			sum += per_matrix(ws[j]);
		sum += sum_experts(l, experts, per_matrix);
	}
	return sum;
}

static double matrix_bytes(const struct weight_matrix *w)
{
	return (double)w->rows * (double)w->row_bytes;
}

static double matrix_params(const struct weight_matrix *w)
{
	return (double)w->rows * (double)w->cols;
}

size_t model_weight_bytes(const struct model *m)
{
	return (size_t)sum_step_matrices(m, m->hp.n_experts_used, matrix_bytes);
}

double model_weight_params(const struct model *m)
{
	return sum_step_matrices(m, m->hp.n_experts_used, matrix_params);
}

size_t model_file_weight_bytes(const struct model *m)
{
	return (size_t)sum_step_matrices(m, m->hp.n_experts, matrix_bytes);
}
