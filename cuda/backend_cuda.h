/* The CUDA backend (cuda/): the same vtable as the CPU backend
 * (src/engine/backend.h), with weights, activations and every session's
 * tiered KV cache in device memory.  Plain C header; src/ calls it under
 * #ifdef SINKD_HAVE_CUDA and never includes a CUDA header. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "cache/geometry.h"
#include "engine/backend.h"

struct sinkd_log;

#define CUDA_GRAPH_MAX_TOKENS 256

struct backend_cuda_options {
	int device;            /* CUDA device index */
	enum kv_dtype dtype;   /* weights and activations on the device
	                        * (inference.attention.dtype); f32 runs fp32 GEMMs */
	size_t cache_bytes;    /* KV arena for all sessions (global_cache_limit); 0 = auto */
	double auto_fraction;  /* with cache_bytes 0: share of free device memory
	                        * after the weights (inference.cache.auto_fraction) */
	bool l2_sink_window;   /* keep the sink tiers of all sessions in L2
	                        * (access-policy window); off by default */
	bool cuda_graphs;      /* replay decode-sized forwards (<= CUDA_GRAPH_MAX_TOKENS
	                        * tokens) as captured CUDA graphs: fewer launch
	                        * overheads at small batches; off by default */
	/* A mixture-of-experts model's experts in a block type (MXFP4, Q8_0,
	 * ...): widened to the dtype at upload, or kept as stored on the device
	 * and widened per forward, one active expert at a time, into a scratch
	 * matrix before its GEMMs (device memory about the file's size, at the
	 * cost of that widening); BACKEND_CUDA_EXPERTS_AUTO (0) keeps them as
	 * stored only when widened they would take more than half the device's
	 * free memory. */
	int experts;
	struct sinkd_log *log; /* may be NULL */
};

enum {
	BACKEND_CUDA_EXPERTS_AUTO = 0,
	BACKEND_CUDA_EXPERTS_WIDENED,
	BACKEND_CUDA_EXPERTS_STORED,
};

/* Uploads the model to device copt->device and reserves the KV arena.
 * Errors (no device, out of device memory, ...) come back as a negative
 * errno with a message; nothing is left allocated. */
int backend_cuda_new(const struct model *m, const struct backend_options *opt,
                     const struct backend_cuda_options *copt, struct backend **out, char *err,
                     size_t err_len);

/* The KV budget in bytes (global_cache_limit, or what "auto" resolved to):
 * the scheduler's budget.  The arena itself is a little larger, so that
 * sessions whose cache_geometry_bound_bytes() fit the budget always fit it. */
size_t backend_cuda_cache_bytes(const struct backend *be);
/* Bytes of the weights on the device. */
size_t backend_cuda_weight_bytes(const struct backend *be);
/* Bytes of the KV arena in use: every session's blocks and each shared
 * prefix's block (counted once however many sessions read it). */
size_t backend_cuda_arena_used(const struct backend *be);
/* Device bytes one session of geometry g takes from the arena. */
size_t backend_cuda_session_bytes(const struct cache_geometry *g);
