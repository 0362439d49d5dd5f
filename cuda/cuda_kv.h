/* Layout of one session's tiered KV cache in device memory (cuda backend),
 * and the small job records that tell the kernels what to do per token.
 * Plain C, included by the .c host code, the C twins and the .cu kernels.
 *
 * A session owns two blocks of the cache arena, each made of n_layers equal
 * layer blocks (layer l at base + l * layer_bytes):
 *   sink block    fp sinks:  sink_k, sink_v  (n_kv, S, D) dtype
 *                 quantized: sink_kp, sink_vp (n_kv, S, 2) f32 scale,min per
 *                            token; sink_k, sink_v (n_kv, S, Dc) codes
 *   window block  fp_k, fp_v (n_kv, F, D) dtype: ring of the full-precision
 *                            window tokens (staging + hot), window token i at
 *                            slot i mod F
 *                 ak, av (n_kv, A, D) dtype: anchor tokens (A = anchor slots,
 *                            0 without anchors), slots [0, n_anchor) in
 *                            stream order; keys rotated by their rank
 *                 ako (n_kv, A, D) f32: the anchors' keys rotated by their
 *                            stream index (rank changes re-rotate from it)
 *                 gkp (NG, n_kv, 2, D) f32 per-channel key scale (row 0) and
 *                            min (row 1); gvp (NG, n_kv, G, 2) f32 per-token
 *                            value scale,min; gk, gv (NG, n_kv, G, Dc) codes:
 *                            ring of quantized groups of G tokens
 * (D = head_dim, Dc = code bytes of a row, S = sink slots, F = fp ring slots,
 * G = group size, NG = group slots).  Keys are stored rotated by their
 * stream index, like the CPU cache (src/cache/sinkcache.c).
 * The sink blocks of all sessions are allocated at the low end of the arena,
 * so together they form one contiguous range that can be kept in L2. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define CUDA_KV_HD static inline __host__ __device__
#else
#define CUDA_KV_HD static inline
#endif

#define CUDA_KV_MAX_HEAD_DIM 512
/* Element types of full-precision rows: the values of enum kv_dtype. */
#define CUDA_DT_F32 0
#define CUDA_DT_F16 1
#define CUDA_DT_BF16 2

/* Where one session's tiers live; addresses are device addresses in the
 * backend and host addresses in the C twins. */
struct cuda_kv_view {
	uint64_t sink_base;        /* layer 0 of the sink block */
	uint64_t win_base;         /* layer 0 of the window block */
	uint64_t sink_layer_bytes; /* stride between layers */
	uint64_t win_layer_bytes;
	/* byte offsets inside one layer block */
	uint64_t off_sink_k, off_sink_v, off_sink_kp, off_sink_vp;
	uint64_t off_fp_k, off_fp_v, off_gk, off_gv, off_gkp, off_gvp;
	uint64_t off_ak, off_av, off_ako; /* anchors, in the window block */
	int32_t n_kv;
	int32_t head_dim;   /* D */
	int32_t dtype;      /* CUDA_DT_* of fp rows */
	int32_t bits;       /* 8 or 4 (codes) */
	int32_t sink_cap;   /* S */
	int32_t fp_cap;     /* F */
	int32_t group;      /* G, 0 when nothing is quantized in the window */
	int32_t n_groups;   /* NG */
	int32_t sink_quant; /* sinks stored as codes */
	int32_t code_row;   /* Dc */
	int32_t anchor_cap; /* A, 0 without anchors */
	int32_t pad_view;
};

/* Store one token's K (rotated) and V rows for all kv heads. */
struct cuda_kv_append_job {
	int32_t token;     /* row of k, v: (n_tokens, n_kv, D) */
	int32_t sink_slot; /* >= 0: sink slot; -1: window */
	int32_t fp_slot;   /* window: fp ring slot */
	int32_t pad;
	struct cuda_kv_view kv;
};

/* Quantize G full-precision window tokens into one group slot. */
struct cuda_kv_flush_job {
	int32_t group_slot; /* destination group slot */
	int32_t fp_first;   /* fp ring slot of the group's first token (then +1 mod F) */
	int32_t pad[2];
	struct cuda_kv_view kv;
};

/* Attention of one token's query over its session's resident tokens, in
 * rank order: sinks, anchors, compressed (oldest group first),
 * full-precision window.  Sink and anchor keys meet the sink query. */
struct cuda_kv_attn_job {
	int32_t token; /* row of qw, qs, out: (n_tokens, n_heads, D) */
	int32_t n_sink;
	int32_t n_comp;      /* quantized window tokens */
	int32_t comp_group0; /* group slot of the oldest one */
	int32_t comp_row0;   /* its row in that group */
	int32_t n_fp;        /* full-precision window tokens */
	int32_t fp_slot0;    /* fp ring slot of the oldest one */
	int32_t n_anchor;    /* anchors of this layer: slots [0, n_anchor) */
	struct cuda_kv_view kv;
};

/* Anchor tier upkeep of one layer of one session (kv.layer rows), run in
 * list order before anything else of a forward:
 *   MOVE   slot src -> slot dst (ako and av rows), dst < src
 *   KEEP   the oldest window token (quantized: group slot group_slot, row
 *          group_row; else fp ring slot fp_slot) -> slot dst: its key
 *          dequantized to f32 into ako, its value in dtype into av
 *   REKEY  ak[dst] <- ako[dst] rotated by angles cs_at (rope_dim doubles,
 *          as rope_cos_sin() writes them, sines already negated), or
 *          stored as is when cs_at < 0; rounded to dtype once */
#define CUDA_ANCHOR_MOVE 0
#define CUDA_ANCHOR_KEEP 1
#define CUDA_ANCHOR_REKEY 2

struct cuda_kv_anchor_op {
	int32_t kind;
	int32_t layer;
	int32_t dst;
	int32_t src;        /* MOVE */
	int32_t from_group; /* KEEP: 1 when the token is quantized */
	int32_t group_slot; /* KEEP from a group */
	int32_t group_row;
	int32_t fp_slot;    /* KEEP from the fp ring */
	int32_t cs_at;      /* REKEY */
	int32_t pad;
	struct cuda_kv_view kv;
};

CUDA_KV_HD int cuda_kv_dt_size(int dtype)
{
	return dtype == CUDA_DT_F32 ? 4 : 2;
}

CUDA_KV_HD unsigned char *cuda_kv_sink_layer(const struct cuda_kv_view *v, int layer)
{
	return (unsigned char *)(uintptr_t)(v->sink_base + (uint64_t)layer * v->sink_layer_bytes);
}

CUDA_KV_HD unsigned char *cuda_kv_win_layer(const struct cuda_kv_view *v, int layer)
{
	return (unsigned char *)(uintptr_t)(v->win_base + (uint64_t)layer * v->win_layer_bytes);
}

/* Row (head h, slot s) of an array of (n_kv, cap, row_bytes). */
CUDA_KV_HD unsigned char *cuda_kv_row(unsigned char *base, uint64_t off, int h, int cap, int slot,
                                      size_t row_bytes)
{
	return base + off + ((size_t)h * (size_t)cap + (size_t)slot) * row_bytes;
}

/* Index of (group slot g, head h) into the group arrays. */
CUDA_KV_HD size_t cuda_kv_gh(const struct cuda_kv_view *v, int g, int h)
{
	return (size_t)g * (size_t)v->n_kv + (size_t)h;
}

/* Code j of a row of codes (int4: element 2i low nibble, 2i+1 high). */
CUDA_KV_HD int cuda_kv_code(const unsigned char *codes, int j, int bits)
{
	if (bits == 8)
		return codes[j];
	return (codes[j >> 1] >> ((j & 1) * 4)) & 15;
}
