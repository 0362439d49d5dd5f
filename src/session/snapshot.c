/* Session snapshot encoding and a reader that trusts nothing it has not
 * checked: fields are read through explicit little-endian accessors at
 * fixed offsets, every count is bounded by the geometry before it sizes
 * anything, and the total length must match what the counts imply.  A
 * snapshot that decodes is one this model could have written: its RoPE is
 * the model's, its counters hold the relations the tier policy keeps and
 * have room to grow, and its K/V values are finite, so a restored session
 * does not fail later, one step at a time, on what the reader let through.
 * It does not judge whether the values are the model's own (a client may
 * restore any cache it likes into its own session). */
#include "session/snapshot.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvquant.h"
#include "model/model.h"
#include "session/session_key.h"
#include "util/digest.h"
#include "util/errbuf.h"
#include "util/sderr.h"

static const char MAGIC[8] = {'S', 'I', 'N', 'K', 'D', 'S', 'E', 'S'};

enum {
	OFF_VERSION = 8,
	OFF_PINNED = 12,
	OFF_MODEL = 16,
	OFF_ARCH = 48,
	OFF_VOCAB = 80,
	OFF_GEOM = 84,
	OFF_ID = 132,
	OFF_OWNER = 168,
	OFF_SEEN = 232,
	OFF_PENDING = 240,
	OFF_NHIST = 244,
	OFF_COUNTS = 248,
	OFF_KVBYTES = 296,
	CHECKSUM_BYTES = 32,
};

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static uint64_t get64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static void put_geom(unsigned char *p, const struct cache_geometry *g)
{
	put32(p + 0, (uint32_t)g->n_layers);
	put32(p + 4, (uint32_t)g->n_kv_heads);
	put32(p + 8, (uint32_t)g->head_dim);
	put32(p + 12, (uint32_t)g->rope_dim);
	uint64_t theta;
	memcpy(&theta, &g->rope_theta, sizeof(theta));
	put64(p + 16, theta);
	unsigned char *b = p + 24;
	b[0] = g->rope_neox, b[1] = (unsigned char)g->strategy, b[2] = g->quant_enabled;
	b[3] = (unsigned char)g->quant_bits, b[4] = g->protect_sinks;
	b[5] = (unsigned char)g->rope_positions, b[6] = (unsigned char)g->dtype, b[7] = 0;
	put32(p + 32, (uint32_t)g->sink_keep_count);
	put32(p + 36, (uint32_t)g->window_size);
	put32(p + 40, (uint32_t)g->max_context_length);
	put32(p + 44, (uint32_t)g->full_precision_recent);
}

/* Reads a geometry and checks it; booleans must be 0 or 1. */
static int get_geom(const unsigned char *p, struct cache_geometry *g, char *err,
                    size_t err_len)
{
	const unsigned char *b = p + 24;
	for (int i = 0; i < 8; i++)
		if ((i == 0 || i == 2 || i == 4 || i == 7) && b[i] > (i == 7 ? 0 : 1))
			return err_set(err, err_len, -EINVAL,
			               "snapshot: cache geometry: byte %d is %u (allowed %s)", i, b[i],
			               i == 7 ? "0" : "0, 1");
	*g = (struct cache_geometry){
	    .n_layers = (int32_t)get32(p + 0),
	    .n_kv_heads = (int32_t)get32(p + 4),
	    .head_dim = (int32_t)get32(p + 8),
	    .rope_dim = (int32_t)get32(p + 12),
	    .rope_neox = b[0],
	    .strategy = (enum cache_strategy)b[1],
	    .quant_enabled = b[2],
	    .quant_bits = b[3],
	    .protect_sinks = b[4],
	    .rope_positions = (enum rope_positions)b[5],
	    .dtype = (enum kv_dtype)b[6],
	    .sink_keep_count = (int32_t)get32(p + 32),
	    .window_size = (int32_t)get32(p + 36),
	    .max_context_length = (int32_t)get32(p + 40),
	    .full_precision_recent = (int32_t)get32(p + 44),
	};
	uint64_t theta = get64(p + 16);
	memcpy(&g->rope_theta, &theta, sizeof(theta));
	char why[SINKD_ERR_LEN];
	int rc = cache_geometry_check(g, why, sizeof(why));
	if (rc)
		return err_set(err, err_len, -EINVAL, "snapshot: %s", why);
	return 0;
}

size_t snapshot_hist_cap(const struct cache_geometry *g)
{
	/* revisable tokens never exceed the window (the whole context for
	 * strategy full) plus the pending token */
	int most = g->strategy == CACHE_STRATEGY_FULL ? g->max_context_length : g->window_size;
	return (size_t)(most > 0 ? most : 0) + 2;
}

size_t snapshot_max_bytes(const struct cache_geometry *g)
{
	return SNAPSHOT_HEADER_BYTES + 4 * snapshot_hist_cap(g) + kv_image_max_bytes(g) +
	       CHECKSUM_BYTES;
}

void snapshot_sha256_hex(const void *bytes, size_t n, char out[65])
{
	digest_sha256_hex(bytes, n, out);
}

static void put_text(unsigned char *p, size_t cap, const char *s)
{
	memset(p, 0, cap);
	size_t n = s ? strnlen(s, cap - 1) : 0;
	memcpy(p, s, n);
}

static void put_counts(unsigned char *c, const struct tier_counts *n)
{
	put64(c + 0, n->n_seen);
	put64(c + 8, n->evicted);
	put64(c + 16, n->moved);
	put32(c + 24, (uint32_t)n->n_sink);
	put32(c + 28, (uint32_t)n->n_groups);
	put32(c + 32, (uint32_t)n->grp_dropped);
	put32(c + 36, (uint32_t)n->n_stage);
	put32(c + 40, (uint32_t)n->n_hot);
}

static struct tier_counts get_counts(const unsigned char *c)
{
	return (struct tier_counts){.n_seen = get64(c),
	                            .evicted = get64(c + 8),
	                            .moved = get64(c + 16),
	                            .n_sink = (int32_t)get32(c + 24),
	                            .n_groups = (int32_t)get32(c + 28),
	                            .grp_dropped = (int32_t)get32(c + 32),
	                            .n_stage = (int32_t)get32(c + 36),
	                            .n_hot = (int32_t)get32(c + 40)};
}

/* How many layers of g are model sliding-window layers, and their window. */
static int swa_layers_of(const struct cache_geometry *g, int *window)
{
	int n = 0;
	*window = 0;
	for (int l = 0; l < g->n_layers && l < CACHE_GEOMETRY_MAX_LAYERS; l++)
		if (g->layer[l].own && g->layer[l].swa) {
			*window = g->layer[l].window_size;
			n++;
		}
	return n;
}

/* Version 2's block: the sliding layers' window, count and counts. */
static void put_swa_block(unsigned char *p, const struct snapshot *sn)
{
	int window, n = swa_layers_of(&sn->geom, &window);
	put32(p, (uint32_t)window);
	put32(p + 4, (uint32_t)n);
	put_counts(p + 8, &sn->kv.n_swa);
}

int snapshot_encode(const struct snapshot *sn, unsigned char **out, size_t *out_len, char *err,
                    size_t err_len)
{
	struct kv_image_plan plan;
	int window;
	*out = NULL;
	*out_len = 0;
	int rc = kv_image_plan_of(&sn->geom, &sn->kv.n, &sn->kv.n_swa, &plan, err, err_len);
	if (rc)
		return rc;
	if (plan.total_bytes != sn->kv.bytes || sn->n_hist > snapshot_hist_cap(&sn->geom))
		return err_set(err, err_len, -EINVAL,
		               "snapshot: cache image of %zu bytes (its counts need %zu) or %u "
		               "history tokens (at most %zu)",
		               sn->kv.bytes, plan.total_bytes, sn->n_hist,
		               snapshot_hist_cap(&sn->geom));
	bool swa = swa_layers_of(&sn->geom, &window) > 0;
	size_t head = SNAPSHOT_HEADER_BYTES + (swa ? SNAPSHOT_SWA_BYTES : 0);
	size_t len = head + 4 * (size_t)sn->n_hist + sn->kv.bytes + CHECKSUM_BYTES;
	unsigned char *b = calloc(1, len);
	if (!b)
		return err_set(err, err_len, -ENOMEM, "snapshot: out of memory for %zu bytes", len);
	memcpy(b, MAGIC, sizeof(MAGIC));
	put32(b + OFF_VERSION, swa ? SNAPSHOT_VERSION_SWA : SNAPSHOT_VERSION);
	put32(b + OFF_PINNED, sn->pinned_tokens);
	memcpy(b + OFF_MODEL, sn->model_sha256, 32);
	put_text(b + OFF_ARCH, SNAPSHOT_ARCH_LEN, sn->arch);
	put32(b + OFF_VOCAB, sn->n_vocab);
	put_geom(b + OFF_GEOM, &sn->geom);
	put_text(b + OFF_ID, SNAPSHOT_ID_LEN, sn->id);
	put_text(b + OFF_OWNER, SNAPSHOT_OWNER_LEN, sn->owner);
	put64(b + OFF_SEEN, sn->tokens_seen);
	put32(b + OFF_PENDING, sn->has_pending);
	put32(b + OFF_NHIST, sn->n_hist);
	put_counts(b + OFF_COUNTS, &sn->kv.n);
	put64(b + OFF_KVBYTES, sn->kv.bytes);
	if (swa)
		put_swa_block(b + SNAPSHOT_HEADER_BYTES, sn);
	unsigned char *p = b + head;
	for (uint32_t i = 0; i < sn->n_hist; i++, p += 4)
		put32(p, (uint32_t)sn->hist[i]);
	if (sn->kv.bytes)
		memcpy(p, sn->kv.data, sn->kv.bytes);
	digest_sha256(b, len - CHECKSUM_BYTES, b + len - CHECKSUM_BYTES);
	*out = b;
	*out_len = len;
	return 0;
}

/* A NUL-padded text field: NUL-terminated inside its cap, printable, zeros after. */
static int get_text(const unsigned char *p, size_t cap, char *out, const char *what, char *err,
                    size_t err_len)
{
	size_t n = strnlen((const char *)p, cap);
	if (n == cap)
		return err_set(err, err_len, -EINVAL, "snapshot: %s is not NUL-terminated within %zu bytes",
		               what, cap);
	for (size_t i = 0; i < n; i++)
		if (!isprint(p[i]))
			return err_set(err, err_len, -EINVAL,
			               "snapshot: %s has a non-printable byte 0x%02x at %zu", what, p[i],
			               i);
	for (size_t i = n; i < cap; i++) /* one encoding per snapshot: padding is zeros */
		if (p[i])
			return err_set(err, err_len, -EINVAL,
			               "snapshot: %s has a nonzero padding byte at %zu", what, i);
	memcpy(out, p, n + 1);
	return 0;
}

static int hex_id_check(const char *id, char *err, size_t err_len)
{
	if (!session_id_valid(id))
		return err_set(err, err_len, -EINVAL,
		               "snapshot: session id '%s' is not 1..32 hex digits", id);
	return 0;
}

/* Version 2: the sliding layers' window and count, given to g's first
 * layers (the sizes do not depend on which; a restore places them as the
 * model says, take_model_layers). */
static int get_swa_spans(const unsigned char *head, size_t n, struct cache_geometry *g, char *err,
                         size_t err_len)
{
	if (n < SNAPSHOT_HEADER_BYTES + SNAPSHOT_SWA_BYTES)
		return err_set(err, err_len, -EINVAL,
		               "snapshot: %zu bytes, shorter than its %d-byte version 2 header", n,
		               SNAPSHOT_HEADER_BYTES + SNAPSHOT_SWA_BYTES);
	const unsigned char *p = head + SNAPSHOT_HEADER_BYTES;
	uint32_t window = get32(p), count = get32(p + 4);
	if (window < 1 || window > (1u << 24) || count < 1 || count > (uint32_t)g->n_layers)
		return err_set(err, err_len, -EINVAL,
		               "snapshot: %u sliding layers of window %u (allowed 1..%d layers, "
		               "window 1..%u)",
		               count, window, g->n_layers, 1u << 24);
	for (uint32_t l = 0; l < count; l++)
		cache_geometry_set_layer_swa(g, (int)l, (int)window);
	return 0;
}

int snapshot_peek_max_bytes(const unsigned char *head, size_t n, size_t *max_bytes, char *err,
                            size_t err_len)
{
	struct cache_geometry g;
	*max_bytes = 0;
	if (n < SNAPSHOT_HEADER_BYTES)
		return err_set(err, err_len, -EINVAL,
		               "snapshot: %zu bytes, shorter than its %d-byte header", n,
		               SNAPSHOT_HEADER_BYTES);
	if (memcmp(head, MAGIC, sizeof(MAGIC)))
		return err_set(err, err_len, -EINVAL,
		               "snapshot: not a sinkd session snapshot (bad magic)");
	uint32_t version = get32(head + OFF_VERSION);
	if (version != SNAPSHOT_VERSION && version != SNAPSHOT_VERSION_SWA)
		return err_set(err, err_len, -EINVAL,
		               "snapshot: format version %u; this build reads versions %d and %d",
		               version, SNAPSHOT_VERSION, SNAPSHOT_VERSION_SWA);
	int rc = get_geom(head + OFF_GEOM, &g, err, err_len);
	if (rc ||
	    (version == SNAPSHOT_VERSION_SWA && (rc = get_swa_spans(head, n, &g, err, err_len))))
		return rc;
	*max_bytes =
	    snapshot_max_bytes(&g) + (version == SNAPSHOT_VERSION_SWA ? SNAPSHOT_SWA_BYTES : 0);
	return 0;
}

static const char *rope_style(bool neox)
{
	return neox ? "halves, qwen2" : "adjacent pairs, llama";
}

/* The same model file with other RoPE parameters is not another model but a
 * crafted file (-EINVAL): a restored session would rotate its keys with
 * angles the model was not trained with, or (rope_dim 0) fail every append. */
static int check_rope(const struct cache_geometry *g, const struct snapshot_expect *ex,
                      char *err, size_t err_len)
{
	if (g->rope_dim != ex->rope_dim)
		return err_set(err, err_len, -EINVAL,
		               "snapshot field rope_dim: %d, this model's is %d", g->rope_dim,
		               ex->rope_dim);
	if (g->rope_theta != ex->rope_theta)
		return err_set(err, err_len, -EINVAL,
		               "snapshot field rope_theta: %.17g, this model's is %.17g",
		               g->rope_theta, ex->rope_theta);
	if (g->rope_neox != ex->rope_neox)
		return err_set(
		    err, err_len, -EINVAL,
		    "snapshot field rope_neox (RoPE style): %d (%s), this model's is %d (%s)",
		    g->rope_neox, rope_style(g->rope_neox), ex->rope_neox,
		    rope_style(ex->rope_neox));
	return 0;
}

/* A snapshot of this model file (its SHA-256 checked) was turning its keys
 * with this model's RoPE scale and factors, which the format leaves out. */
static void take_model_rope(struct cache_geometry *g, const struct snapshot_expect *ex)
{
	g->rope_freq_scale = ex->rope_freq_scale > 0.0 ? ex->rope_freq_scale : 1.0;
	g->n_rope_factors = 0;
	int n = ex->rope_dim / 2;
	if (ex->rope_factors && n > 0 && n <= SINKCACHE_MAX_HEAD_DIM / 2) {
		g->n_rope_factors = n;
		memcpy(g->rope_factors, ex->rope_factors, (size_t)n * sizeof(float));
	}
}

/* The model's sliding layers into a decoded geometry; a version 2 file
 * must have as many, of the same window (version 1: none). */
static int take_model_layers(const unsigned char *b, struct cache_geometry *g,
                             const struct snapshot_expect *ex, char *err, size_t err_len)
{
	struct model_hparams hp = {.n_layers = ex->n_layers,
	                           .swa_window = ex->swa_window,
	                           .layer_swa = ex->layer_swa,
	                           .rope_theta_swa = ex->rope_theta_swa,
	                           .swa_rope_scaled = ex->swa_rope_scaled};
	uint32_t window = 0, count = 0;
	if (get32(b + OFF_VERSION) == SNAPSHOT_VERSION_SWA) {
		window = get32(b + SNAPSHOT_HEADER_BYTES);
		count = get32(b + SNAPSHOT_HEADER_BYTES + 4);
	}
	cache_geometry_set_model_layers(g, &hp);
	int have_window, have = swa_layers_of(g, &have_window);
	if ((uint32_t)have != count || (count > 0 && (uint32_t)have_window != window))
		return err_set(err, err_len, SDERR_MODEL_MISMATCH,
		               "snapshot: %u sliding-window layers of %u tokens, this model's "
		               "geometry has %d of %d",
		               count, window, have, have ? have_window : 0);
	return 0;
}

static int check_model(const unsigned char *b, const struct snapshot *sn,
                       const struct snapshot_expect *ex, char *err, size_t err_len)
{
	if (memcmp(b + OFF_MODEL, ex->model_sha256, 32)) {
		char have[65], want[65];
		digest_hex(b + OFF_MODEL, DIGEST_SHA256_BYTES, have);
		digest_hex(ex->model_sha256, DIGEST_SHA256_BYTES, want);
		return err_set(err, err_len, SDERR_MODEL_MISMATCH,
		               "snapshot: of another model (file sha256 %.16s..., this instance "
		               "serves %.16s...)",
		               have, want);
	}
	if (ex->arch && strcmp(sn->arch, model_arch_snapshot_name(ex->arch)))
		return err_set(err, err_len, SDERR_MODEL_MISMATCH,
		               "snapshot: architecture '%s', this instance serves '%s'", sn->arch,
		               model_arch_snapshot_name(ex->arch));
	if (sn->n_vocab != ex->n_vocab || sn->geom.n_layers != ex->n_layers ||
	    sn->geom.n_kv_heads != ex->n_kv_heads || sn->geom.head_dim != ex->head_dim)
		return err_set(err, err_len, SDERR_MODEL_MISMATCH,
		               "snapshot: shape (vocabulary %u, %d layers, %d kv heads, head_dim %d) "
		               "is not the model's (%u, %d, %d, %d)",
		               sn->n_vocab, sn->geom.n_layers, sn->geom.n_kv_heads, sn->geom.head_dim,
		               ex->n_vocab, ex->n_layers, ex->n_kv_heads, ex->head_dim);
	return check_rope(&sn->geom, ex, err, err_len);
}

/* ---- the counters: bounded, and related as the tier policy keeps them ---- */

static int counter_bounded(uint64_t v, const char *field, char *err, size_t err_len)
{
	if (v < SNAPSHOT_MAX_STREAM_TOKENS)
		return 0;
	return err_set(err, err_len, -EINVAL,
	               "snapshot field %s: %llu, not below 2^53 (no stream gets that far; the "
	               "counter would overflow)",
	               field, (unsigned long long)v);
}

/* Every token appended went to a sink or the window and left the window only
 * by eviction (a revision takes n_seen back with the tokens), and a token
 * reaches staging or a group only by ageing out of the hot tier, so after
 * kv_image_layout_of() bounded each tier these hold exactly.  (moved has no
 * upper bound but the counter's: a revision drops staged tokens that were
 * counted.) */
static int check_counts(const struct cache_tiers *tiers, const struct tier_counts *n,
                        uint64_t tokens_seen, uint32_t pending, char *err, size_t err_len)
{
	const struct cache_tiers t = *tiers;
	uint64_t window =
	    (uint64_t)(n->n_groups * t.group - n->grp_dropped + n->n_stage + n->n_hot);
	uint64_t resident = (uint64_t)n->n_sink + window;
	if (n->n_seen != resident + n->evicted)
		return err_set(
		    err, err_len, -EINVAL,
		    "snapshot field evicted: %llu, but n_seen %llu is not its %llu resident "
		    "tokens plus the evicted ones",
		    (unsigned long long)n->evicted, (unsigned long long)n->n_seen,
		    (unsigned long long)resident);
	if (n->n_sink < t.sink && (n->evicted || n->moved))
		return err_set(
		    err, err_len, -EINVAL,
		    "snapshot field %s: %llu, but with %d of %d sink slots filled no token "
		    "entered the window yet",
		    n->evicted ? "evicted" : "moved",
		    (unsigned long long)(n->evicted ? n->evicted : n->moved), n->n_sink, t.sink);
	uint64_t aged = window - (uint64_t)n->n_hot + (t.group > 0 ? n->evicted : 0);
	if (n->moved < aged)
		return err_set(
		    err, err_len, -EINVAL,
		    "snapshot field moved: %llu, fewer than the %llu tokens that left the hot "
		    "tier (quantized, staged, or evicted from there)",
		    (unsigned long long)n->moved, (unsigned long long)aged);
	if (tokens_seen != n->n_seen + pending)
		return err_set(
		    err, err_len, -EINVAL,
		    "snapshot field tokens_seen: %llu, but the cache holds %llu (n_seen) "
		    "and %u pending",
		    (unsigned long long)tokens_seen, (unsigned long long)n->n_seen, pending);
	return 0;
}

/* ---- the cache image: every K/V value finite ------------------------------ */

/* The layer of the image being scanned, for the scan and its message. */
struct kv_scan {
	const unsigned char *layer; /* the layer's first byte */
	int layer_index;
	char *err;
	size_t err_len;
};

static float get_f32(const unsigned char *p)
{
	uint32_t u = get32(p);
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

/* Whether the element is inf or NaN: an all-ones exponent, in each dtype. */
static bool fp_bad(const unsigned char *p, enum kv_dtype dt)
{
	if (dt == KV_DTYPE_F32)
		return (get32(p) & 0x7f800000u) == 0x7f800000u;
	uint16_t h = (uint16_t)(p[0] | p[1] << 8);
	return dt == KV_DTYPE_F16 ? (h & 0x7c00u) == 0x7c00u : (h & 0x7f80u) == 0x7f80u;
}

static float fp_value(const unsigned char *p, enum kv_dtype dt)
{
	if (dt == KV_DTYPE_F32)
		return get_f32(p);
	uint16_t h = (uint16_t)(p[0] | p[1] << 8);
	return dt == KV_DTYPE_F16 ? kv_f16_to_f32(h) : kv_bf16_to_f32(h);
}

/* n full-precision elements at off. */
static int scan_fp(const struct kv_scan *x, size_t off, size_t n, enum kv_dtype dt,
                   const char *what)
{
	size_t e = kv_dtype_size(dt);
	const unsigned char *p = x->layer + off;
	for (size_t i = 0; i < n; i++, p += e)
		if (fp_bad(p, dt))
			return err_set(
			    x->err, x->err_len, -EINVAL,
			    "snapshot field %s: layer %d, element %zu is %g (K/V values must "
			    "be finite)",
			    what, x->layer_index, i, (double)fp_value(p, dt));
	return 0;
}

/* n (scale, min) pairs, pair i at off + i*pair_stride, min min_gap bytes
 * after its scale.  A row dequantizes to codes*scale + min (kvquant.h):
 * finite for every code when both ends of the code range are. */
static int scan_params(const struct kv_scan *x, size_t off, size_t n, size_t pair_stride,
                       size_t min_gap, int bits, const char *what)
{
	int top = (1 << bits) - 1;
	for (size_t i = 0; i < n; i++) {
		const unsigned char *p = x->layer + off + i * pair_stride;
		float scale = get_f32(p), min = get_f32(p + min_gap);
		const char *why = !isfinite(scale) || !isfinite(min) ? "not finite"
		                  : scale < 0                        ? "a negative scale"
		                  : !isfinite((float)top * scale + min)
		                      ? "code 2^bits-1 dequantizes to inf"
		                      : NULL;
		if (why)
			return err_set(
			    x->err, x->err_len, -EINVAL,
			    "snapshot field %s: layer %d, pair %zu is scale %g, min %g (%s; "
			    "K/V values must be finite)",
			    what, x->layer_index, i, (double)scale, (double)min, why);
	}
	return 0;
}

/* One layer's tiers in the order of the image (kvimage.h). */
static int scan_layer(const struct kv_scan *x, const struct cache_geometry *g,
                      const struct kv_image_layout *lo, const struct tier_counts *n)
{
	size_t n_kv = (size_t)g->n_kv_heads, d = (size_t)g->head_dim, gs = (size_t)lo->group;
	size_t ns = (size_t)n->n_sink, nfp = (size_t)(n->n_stage + n->n_hot);
	int bits = g->quant_bits, rc;
	if (lo->sink_quant) {
		if ((rc = scan_params(x, lo->off_sink_kp, n_kv * ns, 8, 4, bits,
		                      "sink k scale/min")) ||
		    (rc = scan_params(x, lo->off_sink_vp, n_kv * ns, 8, 4, bits,
		                      "sink v scale/min")))
			return rc;
	} else if ((rc = scan_fp(x, lo->off_sink_k, n_kv * ns * d, g->dtype, "sink k")) ||
	           (rc = scan_fp(x, lo->off_sink_v, n_kv * ns * d, g->dtype, "sink v"))) {
		return rc;
	}
	for (int i = 0; i < n->n_groups; i++) {
		size_t grp = lo->off_groups + (size_t)i * lo->group_bytes;
		/* keys: per kv head a row of d scales, then a row of d mins */
		for (size_t h = 0; h < n_kv; h++)
			if ((rc = scan_params(x, grp + lo->grp_off_kp + h * 2 * d * 4, d, 4, d * 4,
			                      bits, "group k scale/min")))
				return rc;
		if ((rc = scan_params(x, grp + lo->grp_off_vp, n_kv * gs, 8, 4, bits,
		                      "group v scale/min")))
			return rc;
	}
	if ((rc = scan_fp(x, lo->off_fp_k, n_kv * nfp * d, g->dtype, "window k")) ||
	    (rc = scan_fp(x, lo->off_fp_v, n_kv * nfp * d, g->dtype, "window v")))
		return rc;
	return 0;
}

static int check_kv_finite(const struct cache_geometry *g, const struct kv_image_plan *plan,
                           const struct kv_image *im, const unsigned char *data, char *err,
                           size_t err_len)
{
	for (int l = 0; l < g->n_layers; l++) {
		size_t at;
		const struct kv_image_layout *lo = kv_image_plan_layer(plan, g, l, &at);
		struct kv_scan x = {
		    .layer = data + at, .layer_index = l, .err = err, .err_len = err_len};
		int rc = scan_layer(&x, g, lo, lo == &plan->swa ? &im->n_swa : &im->n);
		if (rc)
			return rc;
	}
	return 0;
}

/* Both kinds of layers' counts related as the policy keeps them, each
 * against its own tiers. */
static int check_all_counts(const struct snapshot *sn, uint32_t pending, char *err, size_t err_len)
{
	struct cache_tiers t;
	struct cache_layout lo;
	int rc, window, n_swa = swa_layers_of(&sn->geom, &window);
	for (int swa = 0; swa < 2; swa++) {
		const struct tier_counts *n = swa ? &sn->kv.n_swa : &sn->kv.n;
		if (swa && n_swa == 0)
			break;
		int l = 0; /* the first layer of the kind (every layer when none slides) */
		while (l + 1 < sn->geom.n_layers &&
		       (sn->geom.layer[l].own && sn->geom.layer[l].swa) != (swa != 0))
			l++;
		cache_geometry_layer_layout(&sn->geom, l, &lo);
		t = lo.t;
		if ((rc = check_counts(&t, n, sn->tokens_seen, pending, err, err_len)))
			return rc;
	}
	return 0;
}

int snapshot_decode(const unsigned char *buf, size_t len, const struct snapshot_expect *expect,
                    struct snapshot *out, char *err, size_t err_len)
{
	struct snapshot sn;
	size_t max_len;
	int32_t *hist = NULL;
	memset(out, 0, sizeof(*out));
	memset(&sn, 0, sizeof(sn));
	int rc = snapshot_peek_max_bytes(buf, len, &max_len, err, err_len);
	if (rc)
		return rc;
	if (len < SNAPSHOT_HEADER_BYTES + CHECKSUM_BYTES || len > max_len)
		return err_set(err, err_len, -EINVAL,
		               "snapshot: %zu bytes; its geometry allows %d..%zu", len,
		               SNAPSHOT_HEADER_BYTES + CHECKSUM_BYTES, max_len);
	unsigned char md[DIGEST_SHA256_BYTES];
	digest_sha256(buf, len - CHECKSUM_BYTES, md);
	if (memcmp(md, buf + len - CHECKSUM_BYTES, CHECKSUM_BYTES))
		return err_set(err, err_len, -EBADMSG,
		               "snapshot: checksum mismatch (the file is corrupt or truncated)");
	memcpy(sn.model_sha256, buf + OFF_MODEL, 32);
	sn.n_vocab = get32(buf + OFF_VOCAB);
	if ((rc = get_text(buf + OFF_ARCH, SNAPSHOT_ARCH_LEN, sn.arch, "architecture", err,
	                   err_len)) ||
	    (rc = get_geom(buf + OFF_GEOM, &sn.geom, err, err_len)) ||
	    (rc = get_text(buf + OFF_ID, SNAPSHOT_ID_LEN, sn.id, "session id", err, err_len)) ||
	    (rc = hex_id_check(sn.id, err, err_len)) ||
	    (rc = get_text(buf + OFF_OWNER, SNAPSHOT_OWNER_LEN, sn.owner, "owner", err, err_len)))
		return rc;
	sn.pinned_tokens = get32(buf + OFF_PINNED);
	if (sn.pinned_tokens > (uint32_t)sn.geom.sink_keep_count)
		return err_set(err, err_len, -EINVAL,
		               "snapshot: %u pinned tokens, more than its %d sink slots",
		               sn.pinned_tokens, sn.geom.sink_keep_count);
	uint32_t version = get32(buf + OFF_VERSION);
	size_t head =
	    SNAPSHOT_HEADER_BYTES + (version == SNAPSHOT_VERSION_SWA ? SNAPSHOT_SWA_BYTES : 0);
	if (!expect && version == SNAPSHOT_VERSION_SWA)
		return err_set(err, err_len, -EINVAL,
		               "snapshot: version 2 (sliding-window layers) is read against its "
		               "model, which places the layers");
	if (expect && ((rc = check_model(buf, &sn, expect, err, err_len)) ||
	               (rc = take_model_layers(buf, &sn.geom, expect, err, err_len))))
		return rc;
	if (expect)
		take_model_rope(&sn.geom, expect);
	sn.tokens_seen = get64(buf + OFF_SEEN);
	uint32_t pending = get32(buf + OFF_PENDING);
	sn.n_hist = get32(buf + OFF_NHIST);
	const unsigned char *c = buf + OFF_COUNTS;
	sn.kv.n = get_counts(c);
	if (version == SNAPSHOT_VERSION_SWA) {
		sn.kv.n_swa = get_counts(buf + SNAPSHOT_HEADER_BYTES + 8);
		if (get32(buf + SNAPSHOT_HEADER_BYTES + 8 + 44) != 0)
			return err_set(
			    err, err_len, -EINVAL,
			    "snapshot: padding after the sliding layers' counts is not 0");
	}
	if (pending > 1)
		return err_set(err, err_len, -EINVAL, "snapshot: has_pending is %u (allowed 0, 1)",
		               pending);
	sn.has_pending = pending;
	if (get32(c + 44) != 0)
		return err_set(err, err_len, -EINVAL, "snapshot: padding after the counts is not 0");
	for (int swa = 0; swa < (version == SNAPSHOT_VERSION_SWA ? 2 : 1); swa++) {
		const struct tier_counts *n = swa ? &sn.kv.n_swa : &sn.kv.n;
		if ((rc = counter_bounded(n->n_seen, "n_seen", err, err_len)) ||
		    (rc = counter_bounded(n->evicted, "evicted", err, err_len)) ||
		    (rc = counter_bounded(n->moved, "moved", err, err_len)))
			return rc;
	}
	struct kv_image_plan plan;
	char why[SINKD_ERR_LEN];
	if ((rc = kv_image_plan_of(&sn.geom, &sn.kv.n, &sn.kv.n_swa, &plan, why, sizeof(why))))
		return err_set(err, err_len, rc, "snapshot: %s", why);
	if ((rc = check_all_counts(&sn, pending, err, err_len)))
		return rc;
	size_t cap = snapshot_hist_cap(&sn.geom);
	if (sn.n_hist > cap || sn.n_hist > sn.tokens_seen || sn.n_hist < pending)
		return err_set(
		    err, err_len, -EINVAL,
		    "snapshot field n_hist: %u history tokens (allowed %u..%zu, at most the "
		    "%llu tokens seen)",
		    sn.n_hist, pending, cap, (unsigned long long)sn.tokens_seen);
	uint64_t kv_bytes = get64(buf + OFF_KVBYTES);
	size_t want = head + 4 * (size_t)sn.n_hist + plan.total_bytes + CHECKSUM_BYTES;
	if (kv_bytes != plan.total_bytes || len != want)
		return err_set(
		    err, err_len, -EINVAL,
		    "snapshot: %zu bytes with a %llu-byte cache image; its counts need a "
		    "%zu-byte image and %zu bytes in all",
		    len, (unsigned long long)kv_bytes, plan.total_bytes, want);
	const unsigned char *kv = buf + head + 4 * (size_t)sn.n_hist;
	if ((rc = check_kv_finite(&sn.geom, &plan, &sn.kv, kv, err, err_len)))
		return rc;
	hist = malloc(4 * (size_t)(sn.n_hist ? sn.n_hist : 1));
	if (!hist)
		return err_set(err, err_len, -ENOMEM, "snapshot: out of memory");
	const unsigned char *p = buf + head;
	for (uint32_t i = 0; i < sn.n_hist; i++, p += 4) {
		hist[i] = (int32_t)get32(p);
		if (hist[i] < 0 || (uint32_t)hist[i] >= sn.n_vocab) {
			rc = err_set(err, err_len, -EINVAL,
			             "snapshot: history token %u is %d (allowed 0..%u)", i, hist[i],
			             sn.n_vocab - 1);
			free(hist);
			return rc;
		}
	}
	sn.hist = hist;
	sn.kv.data = (unsigned char *)p;
	sn.kv.bytes = plan.total_bytes;
	*out = sn;
	return 0;
}

void snapshot_release(struct snapshot *sn)
{
	if (!sn)
		return;
	free((void *)sn->hist);
	sn->hist = NULL;
	sn->kv.data = NULL;
}
