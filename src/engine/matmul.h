/* Matrix products of the CPU backend: y(B, rows) = x(B, cols) · W(rows, cols)^T
 * for weights stored as F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K or MXFP4 (or
 * re-laid as panels), with AVX2 and AVX-512 kernels picked by one table at
 * run time and a portable C path.  Also the row conversion used for
 * embedding lookups. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "engine/threadpool.h"
#include "model/model.h"

/* Which kernels run.  AUTO: the best the CPU supports; for Q8_0 at
 * decode-sized batches and for Q4_0/Q4_K/Q5_K/Q6_K/MXFP4 at every batch size it
 * quantizes the activations to int8 blocks (as llama.cpp does) and
 * multiplies in integers.  AVX2_F32: AVX2 only, Q8_0 weights dequantized to
 * fp32 on the fly, the other block types in plain C (exact activations).
 * GENERIC: plain C. */
enum matmul_isa { MATMUL_ISA_AUTO = 0, MATMUL_ISA_GENERIC, MATMUL_ISA_AVX2_F32 };

/* The kernel families (matmul.c says what each is and where the table picks
 * it).  The first three are plain C: SCALAR is the portable path and the
 * twin of the dot and GEMM families, the other two are test twins only. */
enum matmul_family {
	MATMUL_FAMILY_SCALAR = 0,
	MATMUL_FAMILY_Q8_SCALAR,     /* Q8_0 times x rounded to Q8 */
	MATMUL_FAMILY_PANELS_SCALAR, /* reads the weight panels */
	MATMUL_FAMILY_DOT_AVX2,
	MATMUL_FAMILY_Q8_AVX2, /* Q8_0 times x rounded to Q8, in integers */
	MATMUL_FAMILY_GEMM_AVX2,
	MATMUL_FAMILY_DOT_AVX512, /* F32, F16, BF16 */
	MATMUL_FAMILY_GEMM_AVX512,
	MATMUL_FAMILY_PANELS,      /* F32, F16, BF16 with panels */
	MATMUL_FAMILY_QDOT_SCALAR, /* plain C: the qdot types times x quantized (engine/qdot.h) */
	MATMUL_FAMILY_QDOT,        /* the same with the best qdot variant this CPU runs */
	MATMUL_FAMILY_QPACK_SCALAR, /* plain C: packed block weights (engine/qpack.h) */
	MATMUL_FAMILY_QPACK,        /* the same with the best qpack kernel this CPU runs */
	MATMUL_FAMILY_QPACK_AMX,    /* Q8_0 and Q4_0 packed, batches on AMX int8 tiles */
	MATMUL_FAMILY_COUNT
};

/* True when the weight type is one the kernels read natively. */
bool matmul_type_supported(int ggml_type);
/* True when this CPU runs the AVX2/FMA/F16C kernels. */
bool matmul_have_avx2(void);
/* True when it also runs the AVX-512 kernels. */
bool matmul_have_avx512(void);

/* One product of a batch: y(B, w->rows) = x(B, w->cols) · w^T (+ bias).
 * bias: (w->rows) or NULL. */
struct matmul_job {
	const struct weight_matrix *w;
	const float *bias;
	float *y;
};

/* Runs up to MATMUL_MAX_JOBS products that share the input x(B, cols) in one
 * parallel dispatch, rows split over the pool's threads (pool may be NULL:
 * the calling thread does everything). */
#define MATMUL_MAX_JOBS 4
void matmul_many(struct threadpool *pool, enum matmul_isa isa, const float *x, int B,
                 const struct matmul_job *jobs, int n_jobs);

/* gate(B, rows) = silu(x . w_gate^T) * (x . w_up^T) in one parallel
 * dispatch: each thread's share of rows computes both products and then the
 * activation, so no serial pass over the batch follows.  up (B, rows) is
 * scratch.  The two matrices have the same shape (else it runs the two
 * products, then the activation on the calling thread). */
void matmul_swiglu(struct threadpool *pool, enum matmul_isa isa, const float *x, int B,
                   const struct weight_matrix *w_gate, const struct weight_matrix *w_up,
                   float *gate, float *up);

/* Convenience: one product. */
void matmul(struct threadpool *pool, const float *x, int B, const struct weight_matrix *w,
            float *y);

/* What the Q8 families see of x: x(n) rounded through Q8 blocks, n a
 * multiple of 32 (tests build their reference from it). */
void matmul_q8_activation_round(const float *x, int n, float *out);
/* What the rounding families (matmul_family_rounds_activations) see of x
 * for weights of ggml_type: x(n) rounded through int8 blocks of 32 values
 * (Q8_0, Q4_0) or 256 (the K-quants), n a multiple of the block; other
 * types see x itself.  out may be x. */
void matmul_activation_round(int ggml_type, const float *x, int n, float *out);
/* Whether Q8_0 products of a batch of B under isa take a Q8 family. */
bool matmul_q8_rounds_activations(enum matmul_isa isa, int B);

/* The family the selection table picks for a product of w with B batch
 * rows under isa. */
enum matmul_family matmul_family_pick(enum matmul_isa isa, const struct weight_matrix *w, int B);
/* Whether family f can multiply w here: the CPU runs it, it has w's type,
 * and w has the panels it reads. */
bool matmul_family_runs(enum matmul_family f, const struct weight_matrix *w);
/* The plain-C family that computes what f computes (f itself if plain C). */
enum matmul_family matmul_family_twin(enum matmul_family f);
/* Whether f multiplies x rounded through int8 blocks (matmul_activation_round). */
bool matmul_family_rounds_activations(enum matmul_family f);
/* A short name ("dot_avx2"), for tests and benchmarks. */
const char *matmul_family_name(enum matmul_family f);
/* matmul_many with every job run by family f instead of the table's pick,
 * for tests and benchmarks: -EINVAL unless f runs for every job's matrix. */
int matmul_many_family(struct threadpool *pool, enum matmul_family f, const float *x, int B,
                       const struct matmul_job *jobs, int n_jobs);

/* Converts row `row` of w to float: out (w->cols). */
void matmul_row_to_f32(const struct weight_matrix *w, int row, float *out);
