/* The backend seam: a small table of function pointers that runs the
 * forward pass of a batch of tokens from many sessions.  `cpu` is always
 * built; `cuda` plugs in when compiled.  Each backend owns the KV caches of
 * its sessions (host memory for cpu, device memory for cuda). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cachetrace.h"
#include "cache/geometry.h"
#include "cache/kvimage.h"
#include "model/model.h"

struct backend;
struct backend_session;
/* A read-only copy of one session's whole sink tier (a pinned prefix) that
 * new sessions of the same geometry share instead of computing it. */
struct backend_prefix;

/* One token of a batch.  Tokens of the same session appear in stream order. */
struct backend_token {
	struct backend_session *session;
	int32_t token;
	bool want_logits; /* logits rows are written in batch order of these */
	float *sink_mass; /* optional: (n_layers, n_heads) share given to sinks, accumulated */
	/* optional: (n_layers, n_heads) share given to the model's learned sink
	 * logits (gpt-oss; zero elsewhere), accumulated */
	float *learned_sink_mass;
};

struct backend_ops {
	const char *name;
	/* Batch rows the forward's products take in whole steps: a batch's
	 * last step costs about the same full or not, so the scheduler grants
	 * prompt rows in these steps (0 or 1: row by row). */
	int batch_rows_granule;
	/* Required. */
	int (*session_new)(struct backend *be, const struct cache_geometry *g,
			   struct backend_session **out, char *err, size_t err_len);
	void (*session_free)(struct backend *be, struct backend_session *s);
	int (*session_revise)(struct backend *be, struct backend_session *s, size_t n_tokens,
			      char *err, size_t err_len);
	void (*session_stats)(struct backend *be, const struct backend_session *s,
			      struct sinkcache_stats *out);
	bool (*session_can_append)(struct backend *be, const struct backend_session *s, size_t n);
	/* logits: (n_want_logits, n_vocab) */
	int (*forward)(struct backend *be, const struct backend_token *tokens, size_t n_tokens,
		       float *logits, char *err, size_t err_len);
	void (*destroy)(struct backend *be);
	/* Optional (NULL when absent). */
	/* Bytes this backend set aside for KV caches when global_cache_limit is
	 * "auto" (a device arena); NULL = caches live in host memory and the
	 * scheduler sizes the budget from free host memory. */
	size_t (*kv_budget_bytes)(const struct backend *be);
	/* Whether this backend can hold sessions of geometry g beyond what
	 * cache_geometry_check() covers (a reload validates the geometry of
	 * new sessions with it); NULL = any valid geometry. */
	int (*geometry_check)(const struct backend *be, const struct cache_geometry *g, char *err,
			      size_t err_len);
	/* A session's cache as a canonical image (cache/kvimage.h), for
	 * snapshots: export copies it out (allocating out->data), import loads
	 * one into a session that session_new just made with the image's
	 * geometry.  Both or neither (NULL: this backend cannot snapshot). */
	int (*session_export)(struct backend *be, const struct backend_session *s,
			      struct kv_image *out, char *err, size_t err_len);
	int (*session_import)(struct backend *be, struct backend_session *s,
			      const struct kv_image *in, char *err, size_t err_len);
	/* Cache traces (cache/cachetrace.h): trace_enable turns the collection
	 * of a session's attention masses on or off (off when it is made: it
	 * costs a reduction per layer and token); session_trace fills out
	 * (caller-owned slots, cache_trace_slots_per_layer() per layer) with
	 * the session's cache now.  Between forward passes.  Both or neither
	 * (NULL: this backend gives no traces). */
	int (*session_trace_enable)(struct backend *be, struct backend_session *s, bool on,
				    char *err, size_t err_len);
	int (*session_trace)(struct backend *be, const struct backend_session *s,
			     struct cache_trace_step *out, char *err, size_t err_len);
	/* Shared prefixes (sched's prefix cache).  All or none (NULL: this
	 * backend shares no prefix).  A geometry can share when every layer is
	 * global (no model sliding-window layer: cache_geometry_per_layer
	 * false) and its sinks are full precision (protect_sinks, as
	 * cache_geometry_pin makes them); otherwise these refuse with -ENOTSUP.
	 *
	 * prefix_new copies the sink tier of s into a block of the backend's
	 * own memory (device memory for cuda) that no session writes: s must
	 * hold exactly its S = sink_keep_count tokens (n_seen == n_sink == S,
	 * nothing in the window or anchors), else -EINVAL.  *bytes: what the
	 * block holds (the sink rows of every layer: the geometry's sink share
	 * of cache_geometry_bound_bytes).  The prefix keeps a copy of the
	 * geometry.  prefix_free frees it; every session sharing it must have
	 * been freed first. */
	int (*prefix_new)(struct backend *be, const struct backend_session *s,
			  struct backend_prefix **out, size_t *bytes, char *err, size_t err_len);
	void (*prefix_free)(struct backend *be, struct backend_prefix *p);
	/* A new session of p's geometry whose sink tier is p's rows, read in
	 * place: it holds those S tokens exactly as the session p was made from
	 * held them right after them (n_seen == S; what it computes next is
	 * bit-identical), owns only its window (and anchors), and allocates no
	 * sink rows.  session_stats reports n_shared = S and bytes_shared; its
	 * bytes_bound and bytes_resident count only what it owns.
	 * session_export of it carries the sink rows (a snapshot stays
	 * self-contained); session_import into it takes an image whose sinks
	 * are byte-equal to p's rows (-EINVAL naming the first layer that
	 * differs otherwise) and imports the rest.  session_revise never
	 * reaches sinks, so nothing it does writes p.  A traced session shows
	 * those slots as CACHE_TIER_SHARED. */
	int (*session_new_shared)(struct backend *be, const struct backend_prefix *p,
				  struct backend_session **out, char *err, size_t err_len);
	/* A canonical image (kv_image) of p's first n rows (1 <= n <= S): the
	 * state of a session of p's geometry that appended only those n
	 * tokens, for a session_import that copies rather than shares (a
	 * stream that must hold fewer than S tokens, or a snapshot).
	 * Allocates out->data. */
	int (*prefix_image)(struct backend *be, const struct backend_prefix *p, int n,
			    struct kv_image *out, char *err, size_t err_len);
};

/* A session geometry's shape against the model's (layers, kv heads,
 * head_dim, rotated dims), as every backend's session_new checks it;
 * -EINVAL naming both. */
int backend_geometry_fits_model(const struct model *m, const struct cache_geometry *g,
                                char *err, size_t err_len);

struct backend {
	const struct backend_ops *ops;
	const struct model *model;
};

struct sinkd_log;

struct backend_options {
	int n_threads; /* cpu: 0 = one per core */
	struct sinkd_log *log; /* may be NULL: where large allocations are named (debug) */
	/* cpu: a forward of fewer multiply-adds (weights and attention) of a
	 * model whose weights stay in the caches runs on the calling thread
	 * alone; 0 = the backend's default (tests set 1 to run every forward
	 * on all threads). */
	double parallel_min_macs;
	/* cpu: keep block-quantized weights as stored instead of packing them
	 * (engine/qpack.h); for tests and benchmarks that compare the two. */
	bool cpu_stored_layout;
};

int backend_cpu_new(const struct model *m, const struct backend_options *opt, struct backend **out,
		    char *err, size_t err_len);

/* Convenience wrappers over ops. */
static inline void backend_free(struct backend *be)
{
	if (be)
		be->ops->destroy(be);
}
