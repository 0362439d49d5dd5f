/* Shared prefixes on the CPU backend (engine/backend.h: prefix_new,
 * session_new_shared, prefix_image) with the real stories260K model: a
 * session B sharing the pinned prefix that session A computed gives A's
 * logits bit for bit over 300+ further tokens (batches of mixed sizes, the
 * two apart and together in one forward, revisions, a window that evicts
 * and quantizes with int8, int4 and none), exports A's image, restores into
 * plain and shared sessions that go on exactly, refuses an image whose
 * sinks differ by one byte, counts only what it owns, shows its sinks as
 * tier "shared" and never writes the prefix; prefix_image(n) is the image of
 * a session that appended those n tokens. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cachetrace.h"
#include "engine/backend.h"
#include "util/errbuf.h"
#include "testutil.h"

enum { PIN = 24, SINKS = 4, WINDOW = 48, HOT = 8, FOLLOW = 320 };

static struct model *model;
static struct backend *be;
static int n_vocab;

static void setup(void)
{
	char err[SINKD_ERR_LEN];
	ck_assert_msg(model_load(tu_shared_path("models/stories260K.gguf"), NULL, &model, err,
	                         sizeof(err)) == 0,
	              "%s", err);
	struct backend_options opt = {.n_threads = 2, .parallel_min_macs = 1};
	ck_assert_msg(backend_cpu_new(model, &opt, &be, err, sizeof(err)) == 0, "%s", err);
	n_vocab = model->hp.n_vocab;
}

static void teardown(void)
{
	backend_free(be);
	model_free(model);
}

/* A small window (it evicts and quantizes within FOLLOW tokens) with the
 * first PIN tokens pinned: SINKS configured sinks widened to PIN, full
 * precision.  bits 0: no quantization. */
static struct cache_geometry pinned_geometry(int bits)
{
	struct cache_geometry g = tu_model_geometry(&model->hp, WINDOW);
	g.sink_keep_count = SINKS;
	g.quant_enabled = bits > 0;
	g.quant_bits = bits > 0 ? bits : 8;
	g.full_precision_recent = HOT;
	g.protect_sinks = false;
	cache_geometry_pin(&g, PIN);
	return g;
}

/* The stream's tokens: seeded, over the whole vocabulary. */
static void stream_ids(int32_t *ids, int n, unsigned seed)
{
	for (int i = 0; i < n; i++)
		ids[i] = (int32_t)(rand_r(&seed) % (unsigned)n_vocab);
}

static struct backend_session *session_of(const struct cache_geometry *g)
{
	struct backend_session *s = NULL;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->session_new(be, g, &s, err, sizeof(err)) == 0, "%s", err);
	return s;
}

static struct backend_session *shared_of(const struct backend_prefix *p)
{
	struct backend_session *s = NULL;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->session_new_shared(be, p, &s, err, sizeof(err)) == 0, "%s", err);
	return s;
}

/* One forward of n tokens of each of the sessions ss[0..k): together
 * (interleaved token by token) or one session after the other, logits of
 * every token into out[j] (n x n_vocab each). */
static void feed(struct backend_session **ss, int k, const int32_t *ids, int n, bool together,
                 float **out)
{
	char err[SINKD_ERR_LEN];
	struct backend_token *batch = calloc((size_t)(n * k), sizeof(*batch));
	float *rows = malloc((size_t)(n * k) * (size_t)n_vocab * sizeof(float));
	ck_assert(batch && rows);
	for (int j = 0; j < k; j++) {
		for (int i = 0; i < n; i++) {
			int at = together ? i * k + j : i;
			batch[at] = (struct backend_token){
			    .session = ss[j], .token = ids[i], .want_logits = true};
		}
		if (together)
			continue;
		ck_assert_msg(be->ops->forward(be, batch, (size_t)n, rows, err, sizeof(err)) == 0,
		              "%s", err);
		memcpy(out[j], rows, (size_t)n * (size_t)n_vocab * sizeof(float));
	}
	if (together) {
		ck_assert_msg(
		    be->ops->forward(be, batch, (size_t)(n * k), rows, err, sizeof(err)) == 0, "%s",
		    err);
		for (int j = 0; j < k; j++)
			for (int i = 0; i < n; i++)
				memcpy(out[j] + (size_t)i * n_vocab,
				       rows + (size_t)(i * k + j) * n_vocab,
				       (size_t)n_vocab * sizeof(float));
	}
	free(batch);
	free(rows);
}

static struct kv_image export_of(const struct backend_session *s)
{
	struct kv_image im;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->session_export(be, s, &im, err, sizeof(err)) == 0, "%s", err);
	return im;
}

static void images_equal(const struct kv_image *a, const struct kv_image *b, const char *what)
{
	ck_assert_msg(a->bytes == b->bytes && memcmp(&a->n, &b->n, sizeof(a->n)) == 0 &&
	                  memcmp(a->data, b->data, a->bytes) == 0,
	              "%s: images differ", what);
}

/* The prefix's rows, all S of them, as an image. */
static struct kv_image prefix_rows(const struct backend_prefix *p, int s)
{
	struct kv_image im;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->prefix_image(be, p, s, &im, err, sizeof(err)) == 0, "%s", err);
	return im;
}

/* Batch sizes of the continuation, mixed: single tokens (decode steps),
 * small and larger prompt chunks. */
static const int chunk_sizes[] = {1, 7, 1, 1, 13, 2, 31, 1, 5, 24, 1, 3};

/* Feeds ids[0..n) to the k sessions in mixed chunks, alternately apart and
 * together, asserting every session's logits equal the first's at every
 * token; revises all by 2 tokens now and then. */
static void follow(struct backend_session **ss, int k, const int32_t *ids, int n)
{
	float *out[4];
	size_t row = (size_t)n_vocab * sizeof(float);
	for (int j = 0; j < k; j++)
		out[j] = malloc(32 * row);
	int i = 0;
	for (int c = 0; i < n; c++) {
		int m = chunk_sizes[c % (int)(sizeof(chunk_sizes) / sizeof(chunk_sizes[0]))];
		m = m < n - i ? m : n - i;
		feed(ss, k, ids + i, m, c % 3 == 1, out);
		for (int j = 1; j < k; j++)
			ck_assert_msg(
			    memcmp(out[0], out[j], (size_t)m * row) == 0,
			    "session %d's logits differ from session 0's at tokens %d..%d", j, i,
			    i + m - 1);
		i += m;
		if (c % 9 == 8) {
			char err[SINKD_ERR_LEN];
			for (int j = 0; j < k; j++)
				ck_assert_msg(
				    be->ops->session_revise(be, ss[j], 2, err, sizeof(err)) == 0,
				    "%s", err);
			i -= 2;
		}
	}
	for (int j = 0; j < k; j++)
		free(out[j]);
}

/* A trace of s whose first n_shared slots of every layer are tier
 * "shared" and the rest not. */
static void trace_shows_shared(const struct cache_geometry *g, const struct backend_session *s,
                               int n_shared)
{
	char err[SINKD_ERR_LEN];
	struct cache_trace_step *t = cache_trace_step_new(g);
	ck_assert_ptr_nonnull(t);
	ck_assert_msg(be->ops->session_trace(be, s, t, err, sizeof(err)) == 0, "%s", err);
	for (int l = 0; l < t->n_layers; l++) {
		ck_assert_int_gt(t->layers[l].n_slots, n_shared);
		for (int i = 0; i < t->layers[l].n_slots; i++)
			ck_assert_int_eq(t->layers[l].slots[i].tier == CACHE_TIER_SHARED,
			                 i < n_shared);
	}
	cache_trace_step_free(t);
}

static void shared_run(int bits)
{
	char err[SINKD_ERR_LEN];
	struct cache_geometry g = pinned_geometry(bits);
	ck_assert_int_eq(g.sink_keep_count, PIN);
	int32_t pin[PIN], ids[FOLLOW + 64];
	stream_ids(pin, PIN, 11);
	stream_ids(ids, FOLLOW + 64, 12);
	struct backend_session *a = session_of(&g);
	float *scratch[1] = {malloc(32 * (size_t)n_vocab * sizeof(float))};
	feed(&a, 1, pin, 13, false, scratch);
	feed(&a, 1, pin + 13, PIN - 13, false, scratch);
	free(scratch[0]);
	struct backend_prefix *p = NULL;
	size_t bytes = 0;
	ck_assert_msg(be->ops->prefix_new(be, a, &p, &bytes, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(bytes, cache_geometry_sink_bytes(&g));
	struct kv_image rows0 = prefix_rows(p, PIN);
	struct backend_session *b = shared_of(p), *ab[2] = {a, b};
	struct sinkcache_stats st;
	be->ops->session_stats(be, b, &st);
	ck_assert_int_eq(st.n_shared, PIN);
	ck_assert_uint_eq(st.n_seen, PIN);
	ck_assert_uint_eq(st.bytes_shared, bytes);
	ck_assert_uint_eq(st.bytes_bound, cache_geometry_bound_bytes(&g) - bytes);
	ck_assert_uint_eq(st.bytes_resident, 0);
	follow(ab, 2, ids, FOLLOW / 2);

	/* a snapshot of B into a plain and into another shared session */
	struct kv_image snap = export_of(b), ea = export_of(a);
	images_equal(&snap, &ea, "export(A) against export(B)");
	kv_image_free(&ea);
	struct backend_session *c = session_of(&g), *d = shared_of(p);
	ck_assert_msg(be->ops->session_import(be, c, &snap, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(be->ops->session_import(be, d, &snap, err, sizeof(err)) == 0, "%s", err);
	struct backend_session *abcd[4] = {a, b, c, d};
	follow(abcd, 4, ids + FOLLOW / 2, FOLLOW / 2 + 64);
	ea = export_of(a);
	struct kv_image eb = export_of(b), ed = export_of(d);
	images_equal(&ea, &eb, "export(A) against export(B) at the end");
	images_equal(&ea, &ed, "export(A) against export(D) at the end");
	kv_image_free(&ea);
	kv_image_free(&eb);
	kv_image_free(&ed);

	be->ops->session_stats(be, b, &st);
	struct sinkcache_stats sa;
	be->ops->session_stats(be, a, &sa);
	ck_assert_int_eq(sa.n_shared, 0);
	ck_assert_int_eq(st.n_shared, PIN);
	ck_assert_int_gt(st.evicted_compressed, 0);
	if (bits)
		ck_assert_int_gt(st.moved_to_compressed, 0);
	ck_assert_uint_eq(st.bytes_resident + bytes, sa.bytes_resident);
	trace_shows_shared(&g, b, PIN);
	trace_shows_shared(&g, a, 0);

	/* one sink byte changed: a shared session refuses the image */
	struct backend_session *e = shared_of(p);
	snap.data[PIN] ^= 0x20;
	ck_assert_int_eq(be->ops->session_import(be, e, &snap, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "layer 0"), "%s", err);
	kv_image_free(&snap);

	/* nothing wrote the prefix: not the sessions, revisions or imports */
	struct kv_image rows1 = prefix_rows(p, PIN);
	images_equal(&rows0, &rows1, "the prefix's rows before and after");
	kv_image_free(&rows0);
	kv_image_free(&rows1);
	be->ops->session_free(be, e);
	be->ops->session_free(be, d);
	be->ops->session_free(be, c);
	be->ops->session_free(be, b);
	be->ops->session_free(be, a);
	be->ops->prefix_free(be, p);
}

START_TEST(test_shared_int8)
{
	shared_run(8);
}
END_TEST

START_TEST(test_shared_int4)
{
	shared_run(4);
}
END_TEST

START_TEST(test_shared_unquantized)
{
	shared_run(0);
}
END_TEST

/* ids into s one per forward: the products' kernels depend on the batch's
 * size, so rows computed in batches of other sizes may differ in the last
 * bits (batching is invisible only within rounding). */
static void feed_one_by_one(struct backend_session *s, const int32_t *ids, int n, float **out)
{
	for (int i = 0; i < n; i++)
		feed(&s, 1, ids + i, 1, false, out);
}

/* prefix_image(n) imported into a plain session is that of a session that
 * appended the first n tokens (as the prefix's session did, one by one),
 * and it goes on as that one. */
START_TEST(test_prefix_image)
{
	char err[SINKD_ERR_LEN];
	struct cache_geometry g = pinned_geometry(8);
	int32_t pin[PIN], ids[40];
	stream_ids(pin, PIN, 21);
	stream_ids(ids, 40, 22);
	float *out[2] = {malloc(32 * (size_t)n_vocab * sizeof(float)),
	                 malloc(32 * (size_t)n_vocab * sizeof(float))};
	struct backend_session *a = session_of(&g);
	feed_one_by_one(a, pin, PIN, out);
	struct backend_prefix *p = NULL;
	size_t bytes;
	ck_assert_msg(be->ops->prefix_new(be, a, &p, &bytes, err, sizeof(err)) == 0, "%s", err);
	const int ns[] = {1, PIN - 1, PIN};
	for (int k = 0; k < 3; k++) {
		struct backend_session *ref = session_of(&g), *imp = session_of(&g);
		feed_one_by_one(ref, pin, ns[k], out);
		struct kv_image pi, ri = export_of(ref);
		ck_assert_msg(be->ops->prefix_image(be, p, ns[k], &pi, err, sizeof(err)) == 0, "%s",
		              err);
		images_equal(&pi, &ri, "prefix_image(n) against a session of n tokens");
		ck_assert_msg(be->ops->session_import(be, imp, &pi, err, sizeof(err)) == 0, "%s",
		              err);
		struct kv_image ii = export_of(imp);
		images_equal(&ii, &ri, "the imported prefix image exported again");
		struct backend_session *two[2] = {ref, imp};
		follow(two, 2, ids, 40);
		kv_image_free(&pi);
		kv_image_free(&ri);
		kv_image_free(&ii);
		be->ops->session_free(be, ref);
		be->ops->session_free(be, imp);
	}
	struct kv_image none;
	ck_assert_int_eq(be->ops->prefix_image(be, p, PIN + 1, &none, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(be->ops->prefix_image(be, p, 0, &none, err, sizeof(err)), -EINVAL);
	be->ops->session_free(be, a);
	be->ops->prefix_free(be, p);
	free(out[0]);
	free(out[1]);
}
END_TEST

/* Refused: a session holding more or fewer than its S tokens (-EINVAL), a
 * geometry with quantized sinks (-ENOTSUP). */
START_TEST(test_refused)
{
	char err[SINKD_ERR_LEN];
	struct cache_geometry g = pinned_geometry(8);
	int32_t ids[PIN + 1];
	stream_ids(ids, PIN + 1, 31);
	float *out[1] = {malloc(32 * (size_t)n_vocab * sizeof(float))};
	struct backend_session *a = session_of(&g);
	struct backend_prefix *p = NULL;
	size_t bytes;
	feed(&a, 1, ids, PIN - 1, false, out);
	ck_assert_int_eq(be->ops->prefix_new(be, a, &p, &bytes, err, sizeof(err)), -EINVAL);
	feed(&a, 1, ids + PIN - 1, 2, false, out);
	ck_assert_int_eq(be->ops->prefix_new(be, a, &p, &bytes, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_null(p);
	be->ops->session_free(be, a);
	struct cache_geometry q = tu_model_geometry(&model->hp, WINDOW);
	q.quant_enabled = true, q.quant_bits = 8, q.full_precision_recent = HOT;
	q.protect_sinks = false;
	a = session_of(&q);
	feed(&a, 1, ids, q.sink_keep_count, false, out);
	ck_assert_int_eq(be->ops->prefix_new(be, a, &p, &bytes, err, sizeof(err)), -ENOTSUP);
	ck_assert_msg(strstr(err, "full-precision sinks"), "%s", err);
	be->ops->session_free(be, a);
	free(out[0]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("prefix-share");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_shared_int8);
	tcase_add_test(tc, test_shared_int4);
	tcase_add_test(tc, test_shared_unquantized);
	tcase_add_test(tc, test_prefix_image);
	tcase_add_test(tc, test_refused);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
