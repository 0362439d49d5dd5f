/* The session snapshot format: a real cache's snapshot decodes to the same
 * fields and bytes, and a truncated, bit-flipped, foreign or hostile one is
 * refused with a message that says why (the hostile cases keep a correct
 * checksum, so the field checks themselves are what refuses them). */
#include <check.h>
#include <errno.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvimage.h"
#include "cache/sinkcache.h"
#include "session/snapshot.h"
#include "util/errbuf.h"
#include "testutil.h"

enum { NL = 2, NKV = 2, D = 8, VOCAB = 300 };

static struct sinkcache_geometry geom(void)
{
	return (struct sinkcache_geometry){
	    .n_layers = NL,
	    .n_kv_heads = NKV,
	    .head_dim = D,
	    .rope_dim = D,
	    .rope_theta = 10000.0,
	    .strategy = CACHE_STRATEGY_SLIDING_WINDOW,
	    .sink_keep_count = 2,
	    .window_size = 40,
	    .quant_enabled = true,
	    .quant_bits = 8,
	    .protect_sinks = true,
	    .full_precision_recent = 8,
	    .rope_positions = ROPE_POSITIONS_CACHE,
	    .dtype = KV_DTYPE_F16,
	};
}

static const struct snapshot_expect *expect(void)
{
	static struct snapshot_expect ex = {
	    .arch = "llama", .n_vocab = VOCAB, .n_layers = NL, .n_kv_heads = NKV, .head_dim = D};
	memset(ex.model_sha256, 0xab, 32);
	return &ex;
}

/* A snapshot of a real cache that saw n tokens (the last one pending). */
static unsigned char *make(int n, size_t *len, struct kv_image *im, int32_t *hist)
{
	struct sinkcache_geometry g = geom();
	struct sinkcache *c;
	char err[SINKD_ERR_LEN];
	ck_assert_int_eq(sinkcache_new(&g, &c, err, sizeof(err)), 0);
	unsigned seed = 5;
	float k[NKV * D], v[NKV * D];
	for (int t = 0; t < n - 1; t++) {
		for (int j = 0; j < NKV * D; j++)
			k[j] = (float)rand_r(&seed) / RAND_MAX, v[j] = (float)rand_r(&seed) / RAND_MAX;
		for (int l = 0; l < NL; l++)
			ck_assert_int_eq(sinkcache_append(c, l, k, v, err, sizeof(err)), 0);
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
	ck_assert_uint_le(len, snapshot_max_bytes(&(struct sinkcache_geometry){0}) + len);
	struct sinkcache_geometry g = geom();
	ck_assert_uint_le(len, snapshot_max_bytes(&g));
	struct snapshot sn;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(snapshot_decode(buf, len, expect(), &sn, err, sizeof(err)) == 0, "%s", err);
	ck_assert(sinkcache_geometry_equal(&sn.geom, &g));
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
	refused(buf, len, &other, -EXDEV, "another model");
	other = *expect();
	other.arch = "qwen2";
	refused(buf, len, &other, -EXDEV, "architecture");
	other = *expect();
	other.head_dim = 16;
	refused(buf, len, &other, -EXDEV, "shape");
	memcpy(buf, "GGUF", 4);
	refused(buf, len, expect(), -EINVAL, "magic");
	memcpy(buf, "SINK", 4);
	buf[8] = 2; /* version */
	reseal(buf, len);
	refused(buf, len, expect(), -EINVAL, "version 2");
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
	    {232, 5, "tokens seen"},
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
		refused(buf, len, expect(), cases[i].off == 80 ? -EXDEV : -EINVAL, cases[i].says);
		kv_image_free(&im);
		free(buf);
	}
}
END_TEST

static Suite *snapshot_suite(void)
{
	Suite *s = suite_create("snapshot");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_truncated_and_flipped);
	tcase_add_test(tc, test_foreign);
	tcase_add_test(tc, test_hostile_fields);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(snapshot_suite());
}
