/* C launchers of the CUDA backend's kernels (cuda/kernels.cu, kv_kernels.cu,
 * dequant_kernels.cu) and their plain-C twins (cuda/twins.c).  A twin
 * computes the same thing on host memory with the same arguments; tests run
 * both and compare.  The backend calls exactly these launchers.
 *
 * All pointers of a launcher are device pointers (job arrays included);
 * stream is a cudaStream_t or NULL.  Launchers return 0 or a cudaError_t
 * code (see cuda_error_string).  dtype arguments are CUDA_DT_* (cuda_kv.h). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_kv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest run of keys one attention block scores (its shared memory). */
#define CUDA_ATTN_MAX_SPLIT 1024
#define CUDA_ATTN_DEFAULT_SPLIT 256

const char *cuda_error_string(int code);

/* x (n, dim) f32 <- rows tok[i] of table (n_vocab, dim) in dtype. */
int cuda_embed(const void *table, int dtype, int dim, const int32_t *tok, int n, float *x,
               void *stream);
/* out (n, dim) in out_dtype <- x / rms(x) * w; x (n, dim), w (dim).  out
 * may equal x (out_dtype f32): QK-norm normalises each head's row in place. */
int cuda_rmsnorm(const float *x, const float *w, int n, int dim, float eps, void *out,
                 int out_dtype, void *stream);
/* out (n, n_heads, head_dim) <- x rotated by token i's cos,sin (cs + i*cs_stride:
 * (rope_dim) doubles, as rope_cos_sin() writes them), then times scale.
 * out may equal x. */
int cuda_rope(const float *x, float *out, int n, int n_heads, int head_dim, int rope_dim, bool neox,
              const double *cs, int cs_stride, float scale, void *stream);
/* x (n_vec, head_dim): the first rope_dim values of each vector times
 * scale (rope_scale_rotated()). */
int cuda_rope_scale(float *x, int n_vec, int head_dim, int rope_dim, float scale, void *stream);
/* out (n) in out_dtype <- silu(gate) * up. */
int cuda_swiglu(const float *gate, const float *up, size_t n, void *out, int out_dtype,
                void *stream);
/* y (n, cols) += bias (cols) row by row. */
int cuda_add_bias(float *y, const float *bias, int n, int cols, void *stream);
/* out (n, dim) <- rows[i] of x (., dim). */
int cuda_gather_rows(const float *x, const int32_t *rows, int n, int dim, float *out, void *stream);

/* Mixture of experts (moe_kernels.cu).  The experts' activations, the
 * values of model/arch.h's enum model_expert_act. */
#define CUDA_MOE_ACT_SWIGLU 0
#define CUDA_MOE_ACT_SWIGLU_OAI 1
/* out (n) in out_dtype <- act(gate, up) as engine/moe.h's moe_expert_act
 * (alpha, limit: the clamped SwiGLU's). */
int cuda_moe_act(const float *gate, const float *up, size_t n, int act, float alpha, float limit,
                 void *out, int out_dtype, void *stream);
/* y (n, cols): row i += bias (., cols) row which[i] (each row's expert). */
int cuda_add_bias_rows(float *y, const float *bias, const int32_t *which, int n, int cols,
                       void *stream);
/* out (., dim): row rows[i] <- row i of x (n, dim); rows distinct. */
int cuda_scatter_rows(const float *x, const int32_t *rows, int n, int dim, float *out,
                      void *stream);
/* x (n, dim) += sum over ranks r = 0..k-1, in that order, of w[t*k + r] *
 * y row t*k + r; y (n*k, dim), w (n*k). */
int cuda_moe_sum(const float *y, const float *w, int n, int k, int dim, float *x, void *stream);

/* KV cache of `layer` (n_kv: kv heads of every job's session): stores k, v (n_tokens, n_kv, D) rows
 * of the jobs' tokens (k already rotated). */
int cuda_kv_append(const struct cuda_kv_append_job *jobs, int n_jobs, int n_kv, int layer,
                   const float *k, const float *v, void *stream);
/* Quantizes G full-precision tokens into a group, for each job. */
int cuda_kv_flush(const struct cuda_kv_flush_job *jobs, int n_jobs, int n_kv, int layer,
                  void *stream);

/* Anchor upkeep (cuda_kv.h): list i is ops [begin[i], begin[i+1]), one
 * session's layer, run in order; lists touch disjoint rows.  angles: the
 * REKEY ops' rotations, rope_dim doubles each. */
int cuda_kv_anchor_ops(const struct cuda_kv_anchor_op *ops, const int32_t *begin, int n_lists,
                       int n_kv, const double *angles, int rope_dim, bool neox, void *stream);

/* Floats of the attention's partial buffer. */
size_t cuda_attention_partial_floats(int n_jobs, int n_heads, int head_dim, int max_resident,
                                     int split_len);
/* For each job and query head h (kv head h / (n_heads / n_kv)):
 * out[token, h] = softmax(q . K) V over the resident tokens, fp32 softmax;
 * qw, qs (n_tokens, n_heads, D): the query rotated for window / sink keys and
 * scaled by 1/sqrt(D).  Keys are split in runs of split_len (<=
 * CUDA_ATTN_MAX_SPLIT) scored by separate blocks, then combined
 * (flash-decoding).  max_resident: the most resident tokens of any job.
 * out (n_tokens, n_heads, D) in out_dtype; sink_mass (n_tokens, n_heads) or
 * NULL: softmax share of the sink tier.  key_weight (n_tokens, n_heads,
 * key_ld) or NULL: every resident key's softmax weight, in rank order
 * (columns past a job's resident tokens are left as they are); key_ld >=
 * max_resident.  partial: scratch of cuda_attention_partial_floats(). */
int cuda_attention(const struct cuda_kv_attn_job *jobs, int n_jobs, int max_resident, int layer,
                   int n_heads, const float *qw, const float *qs, int split_len, float *partial,
                   void *out, int out_dtype, float *sink_mass, float *key_weight, int key_ld,
                   void *stream);

/* cuda_attention with each score q.k soft-capped before the softmax:
 * cap * tanh(score / cap) (gemma2's attn_logit_softcapping; 0: none), and
 * the layer's learned sink logits: sinks (n_heads, device) or NULL, each a
 * softmax term of a key with a zero value (gpt-oss; not soft-capped; key
 * weights and sink_mass are shares of the sum with it); learned_mass
 * (n_tokens, n_heads) or NULL gets its share (0 without sinks). */
int cuda_attention_capped(const struct cuda_kv_attn_job *jobs, int n_jobs, int max_resident,
                          int layer, int n_heads, const float *qw, const float *qs, int split_len,
                          float *partial, void *out, int out_dtype, float *sink_mass,
                          float *key_weight, int key_ld, float softcap, const float *sinks,
                          float *learned_mass, void *stream);

/* Gemma's element-wise steps.  out (n) in out_dtype <- gelu(gate) * up,
 * GELU in llama.cpp's tanh approximation (GeGLU). */
int cuda_geglu(const float *gate, const float *up, size_t n, void *out, int out_dtype,
               void *stream);
/* x (n, dim) += y / rms(y) * w row by row (a norm after attention or
 * feed-forward, then the residual add); y (n, dim), w (dim). */
int cuda_rmsnorm_add(float *x, const float *y, const float *w, int n, int dim, float eps,
                     void *stream);
/* x (n) *= scale. */
int cuda_scale(float *x, size_t n, float scale, void *stream);
/* x (n) <- cap * tanh(x / cap) (a logit soft-cap). */
int cuda_softcap(float *x, size_t n, float cap, void *stream);

/* out_max (n, ld) <- the largest over heads of w (n, n_heads, ld), and
 * out_mean (n, ld; NULL: not wanted) <- the mean over heads (summed in head
 * order), first cols columns of each row (the others are left as they are). */
int cuda_key_weight_reduce(const float *w, int n, int n_heads, int ld, int cols, float *out_max,
                           float *out_mean, void *stream);

/* True when cuda_dequant_rows reads the ggml type: F32, F16, BF16, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4. */
bool cuda_dequant_supported(int ggml_type);
/* dst (rows, cols) in dst_dtype <- src (rows, src_row_bytes): rows of a GGUF
 * tensor of ggml_type as stored, cols a multiple of its block size;
 * dequant.c's values rounded as kv_row_store rounds them.  An unsupported
 * type or cols is cudaErrorInvalidValue. */
int cuda_dequant_rows(int ggml_type, const void *src, size_t src_row_bytes, int rows, int cols,
                      void *dst, int dst_dtype, void *stream);

/* Device-to-device copy bandwidth of a bytes-sized buffer (read + write
 * bytes per second, best of iters). */
int cuda_bandwidth_probe(size_t bytes, int iters, double *bytes_per_s, char *err, size_t err_len);

/* ---- plain C twins: same arguments, host pointers ------------------- */

void twin_embed(const void *table, int dtype, int dim, const int32_t *tok, int n, float *x);
void twin_rmsnorm(const float *x, const float *w, int n, int dim, float eps, void *out,
                  int out_dtype);
void twin_rope(const float *x, float *out, int n, int n_heads, int head_dim, int rope_dim,
               bool neox, const double *cs, int cs_stride, float scale);
void twin_rope_scale(float *x, int n_vec, int head_dim, int rope_dim, float scale);
void twin_key_weight_reduce(const float *w, int n, int n_heads, int ld, int cols, float *out_max,
                            float *out_mean);
void twin_swiglu(const float *gate, const float *up, size_t n, void *out, int out_dtype);
void twin_kv_append(const struct cuda_kv_append_job *jobs, int n_jobs, int n_kv, int layer,
                    const float *k, const float *v);
void twin_kv_flush(const struct cuda_kv_flush_job *jobs, int n_jobs, int n_kv, int layer);
void twin_kv_anchor_ops(const struct cuda_kv_anchor_op *ops, const int32_t *begin, int n_lists,
                        int n_kv, const double *angles, int rope_dim, bool neox);
/* out (f32 only here), sink_mass, key_weight as cuda_attention. */
void twin_attention(const struct cuda_kv_attn_job *jobs, int n_jobs, int layer, int n_heads,
                    const float *qw, const float *qs, float *out, float *sink_mass,
                    float *key_weight, int key_ld);
/* twin_attention with cuda_attention_capped's soft-cap and learned sinks. */
void twin_attention_capped(const struct cuda_kv_attn_job *jobs, int n_jobs, int layer, int n_heads,
                           const float *qw, const float *qs, float *out, float *sink_mass,
                           float *key_weight, int key_ld, float softcap, const float *sinks,
                           float *learned_mass);
void twin_geglu(const float *gate, const float *up, size_t n, void *out, int out_dtype);
void twin_rmsnorm_add(float *x, const float *y, const float *w, int n, int dim, float eps);
void twin_scale(float *x, size_t n, float scale);
void twin_softcap(float *x, size_t n, float cap);
void twin_dequant_rows(int ggml_type, const void *src, size_t src_row_bytes, int rows, int cols,
                       void *dst, int dst_dtype);
void twin_gather_rows(const float *x, const int32_t *rows, int n, int dim, float *out);
void twin_moe_act(const float *gate, const float *up, size_t n, int act, float alpha, float limit,
                  void *out, int out_dtype);
void twin_add_bias_rows(float *y, const float *bias, const int32_t *which, int n, int cols);
void twin_scatter_rows(const float *x, const int32_t *rows, int n, int dim, float *out);
void twin_moe_sum(const float *y, const float *w, int n, int k, int dim, float *x);
/* Element i of a row of dtype as float, and the rounding store. */
float twin_dt_load(const void *row, int dtype, size_t i);
void twin_dt_store(void *row, int dtype, size_t i, float x);

#ifdef __cplusplus
}
#endif
