/* The session snapshot file: one self-describing binary that carries a
 * persistent session from one process (or instance, or backend) to another.
 *
 * Layout, little-endian, fixed header then variable parts:
 *   0    "SINKDSES" magic, u32 format version, u32 pinned prefix tokens (in
 *        the sink tier; at most sink_keep_count; 0 = none)
 *   16   model file SHA-256 (32 bytes), architecture name (32, NUL-padded:
 *        model_arch_snapshot_name),
 *        u32 n_vocab
 *   84   cache geometry: i32 n_layers, n_kv_heads, head_dim, rope_dim,
 *        f64 rope_theta, u8 rope_neox, strategy, quant_enabled, quant_bits,
 *        protect_sinks, rope_positions, dtype, pad, i32 sink_keep_count,
 *        window_size, max_context_length, full_precision_recent
 *   132  session id (36, NUL-padded), owner (64, NUL-padded)
 *   232  stream: u64 tokens seen (pending token included), u32 has_pending,
 *        u32 n_hist
 *   248  cache counts (struct tier_counts): u64 n_seen, evicted, moved,
 *        i32 n_sink, n_groups, grp_dropped, n_stage, n_hot, pad
 *   296  u64 cache image bytes
 *   304  version 2 only (a model with sliding-window layers): u32 the
 *        sliding layers' window, u32 how many layers slide, their counts
 *        (48 bytes as at 248); which layers slide is the model's
 *   304 (v1) or 360 (v2)
 *        i32 hist[n_hist]: the newest stream tokens, oldest first (the
 *        revision window; the last one is the pending token when has_pending)
 *        then the cache image (cache/kvimage.h)
 *   end  SHA-256 of everything before it (32 bytes)
 * A session carries no sampling or detokenizer state between requests (each
 * request starts its own), so the stream state is the tokens above. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/kvimage.h"
#include "cache/geometry.h"
#include "model/arch.h"

/* Version 1 of a model whose layers are all global (what every snapshot
 * before sliding layers was, byte for byte), version 2 with sliding layers;
 * this build reads both. */
#define SNAPSHOT_VERSION 1
#define SNAPSHOT_VERSION_SWA 2
#define SNAPSHOT_HEADER_BYTES 304
#define SNAPSHOT_SWA_BYTES 56 /* the version 2 block after the header */
#define SNAPSHOT_ARCH_LEN 32
#define SNAPSHOT_ID_LEN 36
#define SNAPSHOT_OWNER_LEN 64

struct snapshot {
	unsigned char model_sha256[32];
	char arch[SNAPSHOT_ARCH_LEN];
	uint32_t n_vocab;
	struct cache_geometry geom;
	uint32_t pinned_tokens; /* of geom's sink tier, the pinned stream prefix */
	char id[SNAPSHOT_ID_LEN];
	char owner[SNAPSHOT_OWNER_LEN];
	uint64_t tokens_seen;
	bool has_pending;
	uint32_t n_hist;
	const int32_t *hist; /* decode: a copy the caller frees with snapshot_release() */
	struct kv_image kv;  /* decode: kv.data points into the decoded buffer */
};

/* Stream counters (tokens seen, the cache's n_seen, evicted, moved) stay
 * below this: a stream at 10^5 tokens/s takes millennia to reach it, and
 * every position below it is exact in a double, so a snapshot's counters
 * can always take more tokens without wrapping. */
#define SNAPSHOT_MAX_STREAM_TOKENS ((uint64_t)1 << 53)

/* What the reader serves: a snapshot of anything else is refused.  The
 * model fixes the cache's shape and its rotary embedding (what the session
 * of a restore is built with); the rest of the geometry is the session's. */
struct snapshot_expect {
	unsigned char model_sha256[32];
	const struct model_arch *arch; /* NULL: any */
	uint32_t n_vocab;
	int n_layers, n_kv_heads, head_dim;
	int rope_dim;      /* rotated dims per head */
	double rope_theta; /* compared bit for bit: both come from the model file */
	bool rope_neox;    /* RoPE style: halves or adjacent pairs (model_arch_rope_neox) */
	/* The model's RoPE scaling (model_hparams): not in the file, whose
	 * model SHA-256 fixes it; a decoded geometry gets these. */
	double rope_freq_scale;    /* 0 or 1: none */
	const float *rope_factors; /* (rope_dim/2) or NULL */
	/* The model's sliding-window layers (model_hparams): a decoded geometry
	 * gets their spans and RoPE base. */
	int swa_window;
	const uint8_t *layer_swa; /* (n_layers) or NULL */
	double rope_theta_swa;
	bool swa_rope_scaled; /* model_hparams.swa_rope_scaled */
};

/* The most revision-window tokens a session of geometry g keeps. */
size_t snapshot_hist_cap(const struct cache_geometry *g);
/* The largest snapshot of geometry g: what a restore body may carry. */
size_t snapshot_max_bytes(const struct cache_geometry *g);
/* From the first SNAPSHOT_HEADER_BYTES of a snapshot (a body still
 * arriving; SNAPSHOT_SWA_BYTES more for version 2): the most bytes the whole
 * file may have, from its geometry; -EINVAL with the reason when the
 * header is already not a snapshot (or too short for its version). */
int snapshot_peek_max_bytes(const unsigned char *head, size_t n, size_t *max_bytes, char *err,
                            size_t err_len);

/* Writes sn (kv.data and hist as given) into a malloc'd buffer. */
int snapshot_encode(const struct snapshot *sn, unsigned char **out, size_t *out_len, char *err,
                    size_t err_len);

/* Validates buf completely (length, magic, version, checksum, model, every
 * field, the cache counts against the geometry and against each other, the
 * stream counters below SNAPSHOT_MAX_STREAM_TOKENS, token ids against the
 * vocabulary, every K/V value of the cache image finite) before filling
 * out; nothing is sized from an unchecked field.  Another model's snapshot
 * is SDERR_MODEL_MISMATCH (util/sderr.h); one that claims this model but
 * not its RoPE (rope_dim, rope_theta, rope_neox) is -EINVAL, like any
 * other crafted field, and err names the field.  expect may be NULL (no model check: the inspection
 * tool).  On success out->kv.data points into buf and out->hist is
 * allocated. */
int snapshot_decode(const unsigned char *buf, size_t len, const struct snapshot_expect *expect,
                    struct snapshot *out, char *err, size_t err_len);
void snapshot_release(struct snapshot *sn);

/* SHA-256 of bytes, as 64 lowercase hex digits. */
void snapshot_sha256_hex(const void *bytes, size_t n, char out[65]);
