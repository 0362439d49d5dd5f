/* The session snapshot format: a real cache's snapshot decodes to the same
 * fields and bytes, and a truncated, bit-flipped, foreign or hostile one is
 * refused with a message that says why (the hostile cases keep a correct
 * checksum, so the field checks themselves are what refuses them): among
 * them counters that would wrap, RoPE parameters that are not the model's
 * and K/V values that are not finite, in every tier and dtype. */
#include <check.h>
#include <errno.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvimage.h"
#include "cache/kvquant.h"
#include "cache/sinkcache.h"
#include "session/snapshot.h"
#include "util/errbuf.h"
#include "testutil.h"
#include "util/sderr.h"

enum { NL = 2, NKV = 2, D = 8, VOCAB = 300 };

static struct cache_geometry geom(void)
{
	struct cache_geometry g = tu_geometry(NL, NKV, D, 2, 40, true, 8, 8);
	g.dtype = KV_DTYPE_F16;
	return g;
}

static const struct snapshot_expect *expect(void)
{
	static struct snapshot_expect ex = {.n_vocab = VOCAB,
	                                    .n_layers = NL,
	                                    .n_kv_heads = NKV,
	                                    .head_dim = D,
	                                    .rope_dim = D,
	                                    .rope_theta = 10000.0,
	                                    .rope_neox = false};
	memset(ex.model_sha256, 0xab, 32);
	ex.arch = model_arch_find("llama");
	return &ex;
}

/* A snapshot of a real cache of geometry g that saw n tokens (the last one
 * pending).  revise > 0: every tenth token, the newest `revise` tokens are
 * revised and appended again, as revise_last_tokens does (where the cache
 * can revise that many). */
static unsigned char *make_of(struct cache_geometry g, int n, int revise, size_t *len,
                              struct kv_image *im, int32_t *hist)
{
	struct sinkcache *c;
	char err[SINKD_ERR_LEN];
	ck_assert_int_eq(sinkcache_new(&g, &c, err, sizeof(err)), 0);
	unsigned seed = 5;
	float k[NKV * D], v[NKV * D];
	int revised_at = -1;
	for (int t = 0; t < n - 1; t++) {
		for (int j = 0; j < NKV * D; j++)
			k[j] = (float)rand_r(&seed) / RAND_MAX, v[j] = (float)rand_r(&seed) / RAND_MAX;
		for (int l = 0; l < NL; l++)
			ck_assert_int_eq(sinkcache_append(c, l, k, v, err, sizeof(err)), 0);
		if (revise > 0 && t % 10 == 9 && t > revised_at &&
		    sinkcache_revise(c, (size_t)revise, err, sizeof(err)) == 0)
			revised_at = t, t -= revise;
	}
	ck_assert_msg(sinkcache_export(c, im, err, sizeof(err)) == 0, "%s", err);
	sinkcache_free(c);
	struct snapshot sn = {.n_vocab = VOCAB, .geom = g, .tokens_seen = (uint64_t)n,
	                      .has_pending = true, .kv = *im};
	memcpy(sn.model_sha256, expect()->model_sha256, 32);
	strcpy(sn.arch, "llama");
	strcpy(sn.id, "00ff00ff");
	strcpy(sn.owner, "key:1234abcd");
	sn.n_hist = n < 42 ? (uint32_t)n : 42;
	for (uint32_t i = 0; i < sn.n_hist; i++)
		hist[i] = (int32_t)(i * 7 % VOCAB);
	sn.hist = hist;
	unsigned char *buf;
	ck_assert_msg(snapshot_encode(&sn, &buf, len, err, sizeof(err)) == 0, "%s", err);
	return buf;
}

static unsigned char *make(int n, size_t *len, struct kv_image *im, int32_t *hist)
{
	return make_of(geom(), n, 0, len, im, hist);
}

/* Re-seals buf after an edit, so that only the field checks can refuse it. */
static void reseal(unsigned char *buf, size_t len)
{
	SHA256(buf, len - 32, buf + len - 32);
}

static void refused(const unsigned char *buf, size_t len, const struct snapshot_expect *ex,
                    int want_rc, const char *says)
{
	struct snapshot sn;
	char err[SINKD_ERR_LEN] = "";
	int rc = snapshot_decode(buf, len, ex, &sn, err, sizeof(err));
	ck_assert_msg(rc == want_rc, "rc %d (want %d): %s", rc, want_rc, err);
	ck_assert_msg(strstr(err, says), "'%s' lacks '%s'", err, says);
}

START_TEST(test_round_trip)
{
	struct kv_image im;
	int32_t hist[64];
	size_t len;
	unsigned char *buf = make(100, &len, &im, hist);
	ck_assert_uint_le(len, snapshot_max_bytes(&(struct cache_geometry){0}) + len);
	struct cache_geometry g = geom();
	ck_assert_uint_le(len, snapshot_max_bytes(&g));
	struct snapshot sn;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(snapshot_decode(buf, len, expect(), &sn, err, sizeof(err)) == 0, "%s", err);
	ck_assert(cache_geometry_equal(&sn.geom, &g));
	ck_assert_str_eq(sn.id, "00ff00ff");
	ck_assert_str_eq(sn.owner, "key:1234abcd");
	ck_assert_str_eq(sn.arch, "llama");
	ck_assert_uint_eq(sn.tokens_seen, 100);
	ck_assert(sn.has_pending);
	ck_assert_uint_eq(sn.n_hist, 42);
	ck_assert_int_eq(memcmp(sn.hist, hist, 42 * 4), 0);
	ck_assert_int_eq(memcmp(&sn.kv.n, &im.n, sizeof(im.n)), 0);
	ck_assert_uint_eq(sn.kv.bytes, im.bytes);
	ck_assert_int_eq(memcmp(sn.kv.data, im.data, im.bytes), 0);
	/* what the restore endpoint sizes a body by */
	size_t max;
	ck_assert_int_eq(snapshot_peek_max_bytes(buf, SNAPSHOT_HEADER_BYTES, &max, err, sizeof(err)),
	                 0);
	ck_assert_uint_eq(max, snapshot_max_bytes(&g));
	snapshot_release(&sn);
	kv_image_free(&im);
	free(buf);
}
END_TEST

/* A snapshot does not carry the model's RoPE scale and frequency factors
 * (its model SHA-256 fixes them): the decoded geometry takes this model's,
 * so a restored session turns keys as the one exported did. */
START_TEST(test_rope_factors_from_model)
{
	float f[D / 2];
	for (int i = 0; i < D / 2; i++)
		f[i] = (float)(1 << (i % 4));
	struct cache_geometry g = geom();
	g.n_rope_factors = D / 2;
	memcpy(g.rope_factors, f, sizeof(f));
	g.rope_freq_scale = 0.5;
	struct kv_image im;
	int32_t hist[64];
	size_t len;
	unsigned char *buf = make_of(g, 60, 0, &len, &im, hist);
	struct snapshot_expect ex = *expect();
	ex.rope_factors = f;
	ex.rope_freq_scale = 0.5;
	struct snapshot sn;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(snapshot_decode(buf, len, &ex, &sn, err, sizeof(err)) == 0, "%s", err);
	ck_assert(cache_geometry_equal(&sn.geom, &g));
	snapshot_release(&sn);
	/* read by a model without them, the geometry has none */
	ck_assert_msg(snapshot_decode(buf, len, expect(), &sn, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(sn.geom.n_rope_factors, 0);
	ck_assert(!cache_geometry_equal(&sn.geom, &g));
	snapshot_release(&sn);
	kv_image_free(&im);
	free(buf);
}
END_TEST

START_TEST(test_truncated_and_flipped)
{
	struct kv_image im;
	int32_t hist[64];
	size_t len;
	unsigned char *buf = make(60, &len, &im, hist);
	size_t cuts[] = {0, 7, 100, SNAPSHOT_HEADER_BYTES - 1, SNAPSHOT_HEADER_BYTES + 10, len / 2,
	                 len - 1};
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		struct snapshot sn;
		char err[SINKD_ERR_LEN] = "";
		ck_assert_int_ne(snapshot_decode(buf, cuts[i], expect(), &sn, err, sizeof(err)), 0);
		ck_assert_msg(err[0], "no message for a cut at %zu", cuts[i]);
	}
	refused(buf, SNAPSHOT_HEADER_BYTES - 1, expect(), -EINVAL, "header");
	refused(buf, len - 1, expect(), -EBADMSG, "checksum");
	/* every bit of the cache image and of the history is covered */
	for (size_t at = SNAPSHOT_HEADER_BYTES; at < len - 32; at += 97) {
		buf[at] ^= 0x10;
		refused(buf, len, expect(), -EBADMSG, "checksum");
		buf[at] ^= 0x10;
	}
	unsigned char *longer = malloc(len + 8);
	memcpy(longer, buf, len);
	memset(longer + len, 0, 8);
	reseal(longer, len + 8);
	refused(longer, len + 8, expect(), -EINVAL, "bytes");
	free(longer);
	kv_image_free(&im);
	free(buf);
}
END_TEST

START_TEST(test_foreign)
{
	struct kv_image im;
	int32_t hist[64];
	size_t len;
	unsigned char *buf = make(30, &len, &im, hist);
	struct snapshot_expect other = *expect();
	other.model_sha256[5] ^= 1;
	refused(buf, len, &other, SDERR_MODEL_MISMATCH, "another model");
	other = *expect();
	other.arch = model_arch_find("qwen2");
	refused(buf, len, &other, SDERR_MODEL_MISMATCH, "architecture");
	other = *expect();
	other.head_dim = 16;
	refused(buf, len, &other, SDERR_MODEL_MISMATCH, "shape");
	memcpy(buf, "GGUF", 4);
	refused(buf, len, expect(), -EINVAL, "magic");
	memcpy(buf, "SINK", 4);
	buf[8] = 3; /* version (2 is a model with sliding-window layers) */
	reseal(buf, len);
	refused(buf, len, expect(), -EINVAL, "version 3");
	kv_image_free(&im);
	free(buf);
}
END_TEST

/* Fields edited and resealed: each is refused by its own check. */
START_TEST(test_hostile_fields)
{
	struct kv_image im;
	int32_t hist[64];
	size_t len;
	struct {
		size_t off;
		uint32_t value;
		const char *says;
	} cases[] = {
	    {84, 0, "n_layers"},               /* geometry */
	    {84 + 8, 513, "head_dim"},         /* over SINKCACHE_MAX_HEAD_DIM */
	    {84 + 36, 0x7fffffff, "window_size"},
	    {84 + 24 + 3, 5, "quant_bits"},
	    {84 + 24 + 2, 7, "byte 2"},
	    {132, 0x2f2e2e, "session id"},     /* "../" */
	    {168 + 63, 'x', "owner"},          /* not terminated */
	    {240, 2, "has_pending"},
	    {244, 1000000, "history tokens"},
	    {248 + 24, 3, "n_sink"},           /* more sinks than slots */
	    {248 + 40, 9, "n_hot"},
	    {248 + 28, 1000, "n_groups"},
	    {232, 5, "tokens_seen"},
	    {296, 12345, "cache image"},
	    {304, VOCAB, "history token 0"},
	    {12, 1000, "pinned tokens"},       /* more than the sink slots */
	    {80, 1, "shape"},                  /* n_vocab */
	    {48 + 10, 'x', "padding"},         /* after "llama\0": one encoding only */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		unsigned char *buf = make(60, &len, &im, hist);
		if (cases[i].off == 84 + 24 + 3 || cases[i].off == 84 + 24 + 2 ||
		    cases[i].off == 48 + 10)
			buf[cases[i].off] = (unsigned char)cases[i].value;
		else if (cases[i].off == 168 + 63)
			memset(buf + 168, 'x', 64);
		else
			memcpy(buf + cases[i].off, &cases[i].value, 4);
		reseal(buf, len);
		refused(buf, len, expect(), cases[i].off == 80 ? SDERR_MODEL_MISMATCH : -EINVAL, cases[i].says);
		kv_image_free(&im);
		free(buf);
	}
}
END_TEST

/* Real caches of other geometries (every dtype, quantized sinks, int4,
 * no quantization, strategy full, sinks not full yet), before and after
 * evictions, with and without revisions, pass every check: the counter relations and the finiteness
 * scan refuse only what no cache writes. */
START_TEST(test_real_caches_accepted)
{
	struct cache_geometry gs[6];
	for (int i = 0; i < 6; i++)
		gs[i] = geom();
	gs[0].dtype = KV_DTYPE_F32;
	gs[1].dtype = KV_DTYPE_BF16, gs[1].protect_sinks = false;
	gs[2].quant_bits = 4, gs[2].protect_sinks = false;
	gs[3].quant_enabled = false;
	gs[4].strategy = CACHE_STRATEGY_FULL, gs[4].max_context_length = 100;
	gs[5].full_precision_recent = 3; /* a group size that does not divide */
	int lengths[] = {2, 3, 30, 43, 60, 97};
	for (int i = 0; i < 6 * 6 * 2; i++) {
		/* revising 10 drops staged tokens too (moved counted them) */
		int geo = i % 6, n = lengths[i / 6 % 6], revise = i < 36 ? 0 : 10;
		struct kv_image im;
		int32_t hist[64];
		size_t len;
		unsigned char *buf = make_of(gs[geo], n, revise, &len, &im, hist);
		struct snapshot sn;
		char err[SINKD_ERR_LEN];
		int rc = snapshot_decode(buf, len, expect(), &sn, err, sizeof(err));
		ck_assert_msg(rc == 0, "geometry %d, %d tokens, revise %d: %s", geo, n, revise, err);
		snapshot_release(&sn);
		kv_image_free(&im);
		free(buf);
	}
}
END_TEST

static void put_u64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

enum { OFF_SEEN = 232, OFF_N_SEEN = 248, OFF_EVICTED = 256, OFF_MOVED = 264 };

/* Counters that would wrap or that no cache reaches: each is refused by the
 * check that names it, the others kept consistent. */
START_TEST(test_hostile_counters)
{
	struct kv_image im;
	int32_t hist[64];
	size_t len;
	const uint64_t huge = UINT64_MAX - 1; /* 2^64-2: one append from wrapping */
	for (int i = 0; i < 8; i++) {
		unsigned char *buf = make(60, &len, &im, hist);
		uint64_t seen = get_u64(buf + OFF_N_SEEN), evicted = get_u64(buf + OFF_EVICTED);
		uint64_t moved = get_u64(buf + OFF_MOVED);
		ck_assert_uint_gt(evicted, 0); /* the cases below need a real eviction */
		const char *says = NULL;
		switch (i) {
		case 0: /* n_seen and tokens seen both near 2^64, as the file says */
			put_u64(buf + OFF_N_SEEN, huge), put_u64(buf + OFF_SEEN, huge + 1);
			says = "snapshot field n_seen: 18446744073709551614";
			break;
		case 1: /* the stream index jumped with evictions to match */
			put_u64(buf + OFF_N_SEEN, seen + huge / 2);
			put_u64(buf + OFF_EVICTED, evicted + huge / 2);
			put_u64(buf + OFF_SEEN, seen + huge / 2 + 1);
			says = "snapshot field n_seen";
			break;
		case 2:
			put_u64(buf + OFF_MOVED, (uint64_t)1 << 60);
			says = "snapshot field moved";
			break;
		case 3: /* more evicted than the stream index leaves room for */
			put_u64(buf + OFF_EVICTED, evicted - 1);
			says = "snapshot field evicted";
			break;
		case 4: /* fewer ageings than the quantized and evicted tokens took */
			put_u64(buf + OFF_MOVED, moved - 1);
			says = "snapshot field moved";
			break;
		case 5:
			put_u64(buf + OFF_SEEN, seen + 2);
			says = "snapshot field tokens_seen";
			break;
		case 6: /* 2^53 itself is beyond the bound */
			put_u64(buf + OFF_N_SEEN, SNAPSHOT_MAX_STREAM_TOKENS);
			put_u64(buf + OFF_SEEN, SNAPSHOT_MAX_STREAM_TOKENS + 1);
			says = "snapshot field n_seen";
			break;
		case 7:
			put_u64(buf + OFF_EVICTED, huge);
			says = "snapshot field evicted";
			break;
		}
		reseal(buf, len);
		refused(buf, len, expect(), -EINVAL, says);
		refused(buf, len, NULL, -EINVAL, says); /* not a model check */
		kv_image_free(&im);
		free(buf);
	}
	/* sinks not full: no token went to the window, none was evicted */
	unsigned char *buf = make(2, &len, &im, hist);
	put_u64(buf + OFF_N_SEEN, 2), put_u64(buf + OFF_EVICTED, 1), put_u64(buf + OFF_SEEN, 3);
	reseal(buf, len);
	refused(buf, len, expect(), -EINVAL, "snapshot field evicted: 1, but with 1 of 2 sink");
	kv_image_free(&im);
	free(buf);
}
END_TEST

/* The model's file with another RoPE: refused as a crafted file (-EINVAL)
 * naming the field and the model's value; without a model to compare with
 * (the inspection tool) it decodes. */
START_TEST(test_hostile_rope)
{
	struct kv_image im;
	int32_t hist[64];
	size_t len;
	for (int i = 0; i < 4; i++) {
		unsigned char *buf = make(60, &len, &im, hist);
		double theta = 500000.0;
		const char *says = NULL;
		switch (i) {
		case 0:
			memset(buf + 84 + 12, 0, 4);
			says = "snapshot field rope_dim: 0, this model's is 8";
			break;
		case 1:
			buf[84 + 12] = 4;
			says = "snapshot field rope_dim: 4, this model's is 8";
			break;
		case 2:
			memcpy(buf + 84 + 16, &theta, 8);
			says = "snapshot field rope_theta: 500000, this model's is 10000";
			break;
		case 3:
			buf[84 + 24] = 1;
			says = "snapshot field rope_neox (RoPE style): 1";
			break;
		}
		reseal(buf, len);
		refused(buf, len, expect(), -EINVAL, says);
		struct snapshot sn;
		char err[SINKD_ERR_LEN];
		ck_assert_msg(snapshot_decode(buf, len, NULL, &sn, err, sizeof(err)) == 0, "%s",
		              err);
		snapshot_release(&sn);
		kv_image_free(&im);
		free(buf);
	}
	/* a qwen2 model refuses the llama style, naming both */
	unsigned char *buf = make(30, &len, &im, hist);
	struct snapshot_expect neox = *expect();
	neox.rope_neox = true;
	refused(buf, len, &neox, -EINVAL, "0 (adjacent pairs, llama), this model's is 1 (halves");
	kv_image_free(&im);
	free(buf);
}
END_TEST

/* Where a non-finite value goes, in the image of geometry g. */
enum kv_spot { SPOT_SINK_K, SPOT_SINK_PARAM, SPOT_GROUP_KP, SPOT_GROUP_VP, SPOT_WINDOW_V };

static void poison(unsigned char *buf, size_t len, const struct cache_geometry *g,
                   const struct kv_image *im, enum kv_spot spot, int layer, float value)
{
	struct kv_image_layout lo;
	char err[SINKD_ERR_LEN];
	ck_assert_int_eq(kv_image_layout_of(g, &im->n, &lo, err, sizeof(err)), 0);
	uint32_t n_hist;
	memcpy(&n_hist, buf + 244, 4);
	unsigned char *p =
	    buf + SNAPSHOT_HEADER_BYTES + 4 * (size_t)n_hist + (size_t)layer * lo.layer_bytes;
	ck_assert(p + lo.layer_bytes <= buf + len - 32);
	size_t e = kv_dtype_size(g->dtype), row = (size_t)g->head_dim;
	switch (spot) {
	case SPOT_SINK_K: /* the second kv head's first sink, element 3 */
		p += lo.off_sink_k + (1 * (size_t)im->n.n_sink * row + 3) * e;
		break;
	case SPOT_SINK_PARAM: /* the value scale of the first sink */
		p += lo.off_sink_vp;
		break;
	case SPOT_GROUP_KP: /* the newest group's key min of channel 5 */
		p += lo.off_groups + (size_t)(im->n.n_groups - 1) * lo.group_bytes + lo.grp_off_kp +
		     (row + 5) * 4;
		break;
	case SPOT_GROUP_VP:
		p += lo.off_groups + lo.grp_off_vp;
		break;
	case SPOT_WINDOW_V: /* the newest full-precision value, last element */
		p += lo.off_fp_v +
		     ((size_t)g->n_kv_heads * (size_t)(im->n.n_stage + im->n.n_hot) * row - 1) * e;
		break;
	}
	bool param = spot == SPOT_SINK_PARAM || spot == SPOT_GROUP_KP || spot == SPOT_GROUP_VP;
	if (param || g->dtype == KV_DTYPE_F32) {
		memcpy(p, &value, 4);
	} else {
		uint16_t h =
		    g->dtype == KV_DTYPE_F16 ? kv_f32_to_f16(value) : kv_f32_to_bf16(value);
		memcpy(p, &h, 2);
	}
	reseal(buf, len);
}

START_TEST(test_nonfinite_kv)
{
	struct {
		enum kv_dtype dtype;
		bool protect, quant;
		enum kv_spot spot;
		int layer;
		float value;
		const char *says;
	} cases[] = {
	    {KV_DTYPE_F16, true, true, SPOT_SINK_K, 0, NAN, "snapshot field sink k: layer 0"},
	    {KV_DTYPE_F32, true, true, SPOT_SINK_K, 1, -INFINITY,
	     "sink k: layer 1, element 19 is -inf"},
	    {KV_DTYPE_BF16, true, true, SPOT_WINDOW_V, 1, INFINITY, "snapshot field window v"},
	    {KV_DTYPE_F16, true, false, SPOT_WINDOW_V, 0, NAN, "snapshot field window v"},
	    {KV_DTYPE_F32, false, true, SPOT_SINK_PARAM, 0, NAN, "snapshot field sink v scale/min"},
	    {KV_DTYPE_F16, true, true, SPOT_GROUP_KP, 1, INFINITY,
	     "snapshot field group k scale/min"},
	    /* finite, but code 255 * scale overflows: a dequantized inf */
	    {KV_DTYPE_F16, true, true, SPOT_GROUP_VP, 0, 3e38f, "snapshot field group v scale/min"},
	    {KV_DTYPE_F16, true, true, SPOT_GROUP_VP, 0, -1.0f, "scale -1"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cache_geometry g = geom();
		g.dtype = cases[i].dtype, g.protect_sinks = cases[i].protect;
		g.quant_enabled = cases[i].quant;
		struct kv_image im;
		int32_t hist[64];
		size_t len;
		unsigned char *buf = make_of(g, 60, 0, &len, &im, hist);
		poison(buf, len, &g, &im, cases[i].spot, cases[i].layer, cases[i].value);
		refused(buf, len, expect(), -EINVAL, cases[i].says);
		refused(buf, len, NULL, -EINVAL, "K/V values must be finite");
		kv_image_free(&im);
		free(buf);
	}
}
END_TEST

/* A model whose layer 0 slides over 12 tokens: its snapshot is version 2
 * with the sliding layers' counts, restores into a cache that exports the
 * same image, and is refused by a model whose layers do not slide so (a
 * uniform geometry still writes version 1, as before). */
START_TEST(test_sliding_layers_round_trip)
{
	static const uint8_t layer_swa[NL] = {1, 0};
	struct snapshot_expect ex = *expect();
	ex.swa_window = 12;
	ex.layer_swa = layer_swa;
	struct cache_geometry g = geom();
	cache_geometry_set_layer_swa(&g, 0, 12);
	struct kv_image im, again;
	int32_t hist[64];
	size_t len, max;
	unsigned char *buf = make_of(g, 100, 3, &len, &im, hist);
	ck_assert_int_eq(buf[8], SNAPSHOT_VERSION_SWA);
	ck_assert_int_eq(im.n_swa.n_hot, 12);
	ck_assert_int_eq(im.n_swa.n_sink, 0);
	struct snapshot sn;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(snapshot_decode(buf, len, &ex, &sn, err, sizeof(err)) == 0, "%s", err);
	ck_assert(cache_geometry_equal(&sn.geom, &g));
	ck_assert_int_eq(memcmp(&sn.kv.n, &im.n, sizeof(im.n)), 0);
	ck_assert_int_eq(memcmp(&sn.kv.n_swa, &im.n_swa, sizeof(im.n_swa)), 0);
	ck_assert_int_eq(memcmp(sn.kv.data, im.data, im.bytes), 0);
	ck_assert_int_eq(snapshot_peek_max_bytes(buf, len, &max, err, sizeof(err)), 0);
	ck_assert_uint_ge(max, len);
	struct sinkcache *c;
	ck_assert_int_eq(sinkcache_new(&sn.geom, &c, err, sizeof(err)), 0);
	ck_assert_msg(sinkcache_import(c, &sn.kv, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(sinkcache_export(c, &again, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(again.bytes, im.bytes);
	ck_assert_int_eq(memcmp(again.data, im.data, im.bytes), 0);
	sinkcache_free(c);
	kv_image_free(&again);
	snapshot_release(&sn);
	refused(buf, len, expect(), SDERR_MODEL_MISMATCH, "1 sliding-window layers of 12 tokens");
	refused(buf, len, NULL, -EINVAL, "version 2");
	buf[SNAPSHOT_HEADER_BYTES + 8 + 40] = 13; /* the sliding layers' n_hot */
	reseal(buf, len);
	refused(buf, len, &ex, -EINVAL, "n_hot");
	free(buf);
	kv_image_free(&im);
	buf = make(20, &len, &im, hist);
	ck_assert_int_eq(buf[8], SNAPSHOT_VERSION);
	free(buf);
	kv_image_free(&im);
}
END_TEST

static Suite *snapshot_suite(void)
{
	Suite *s = suite_create("snapshot");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_rope_factors_from_model);
	tcase_add_test(tc, test_truncated_and_flipped);
	tcase_add_test(tc, test_foreign);
	tcase_add_test(tc, test_hostile_fields);
	tcase_add_test(tc, test_real_caches_accepted);
	tcase_add_test(tc, test_hostile_counters);
	tcase_add_test(tc, test_hostile_rope);
	tcase_add_test(tc, test_nonfinite_kv);
	tcase_add_test(tc, test_sliding_layers_round_trip);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(snapshot_suite());
}
