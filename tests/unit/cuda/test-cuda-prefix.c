/* Shared prefixes on the CUDA backend (engine/backend.h: prefix_new,
 * session_new_shared, prefix_image), stories260K under a pinned geometry,
 * with quantization off and on (a window small enough that the
 * continuation evicts and quantizes):
 *   - a session B sharing the prefix of session A goes on bit for bit like
 *     A, in separate forwards and in forwards that hold both, across a
 *     revision; their images are byte-equal;
 *   - a snapshot of B imports into a plain session and into another
 *     shared one, which go on bit for bit; an image whose sink rows differ
 *     from the prefix's is refused naming the layer;
 *   - prefix_image(p, n) imports into a plain session that goes on like
 *     one that appended those n tokens (n = 1, S-1, S);
 *   - stats (n_shared, bytes_shared, bound and resident bytes), the trace's
 *     "shared" tier, and the arena: the prefix's block counted once, a
 *     shared session's window block only, everything back after the frees.
 * Exits 77 (skipped) without a GPU; built with -DSINKD_CUDA_EMU it runs on
 * the host emulation of CUDA (cuda/emu/). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "cache/cachetrace.h"
#include "cache/kvimage.h"
#include "cuda_device.h"
#include "engine/backend.h"
#include "util/errbuf.h"
#include "testutil.h"

#define N_PIN 10  /* the pinned prompt: S = 10 sinks (4 configured) */
#define N_MORE 44 /* tokens after it: the window fills, evicts, quantizes */

/* One backend on stories260K and the geometry its sessions share. */
struct fixture {
	struct model *m;
	struct backend *be;
	const struct backend_ops *ops;
	struct cache_geometry g;
	int n_vocab, S;
	size_t prefix_bytes; /* what prefix_new said its block holds */
	int32_t ids[N_PIN + 2 * N_MORE];
	char err[SINKD_ERR_LEN];
};

static void fixture_open(struct fixture *f, int window, bool quant, enum kv_dtype dt)
{
	memset(f, 0, sizeof(*f));
	ck_assert_msg(model_load(tu_shared_path("models/stories260K.gguf"), NULL, &f->m, f->err,
	                         sizeof(f->err)) == 0,
	              "%s", f->err);
	struct backend_cuda_options o = {.dtype = KV_DTYPE_F32, .cache_bytes = (size_t)32 << 20};
	ck_assert_msg(backend_cuda_new(f->m, NULL, &o, &f->be, f->err, sizeof(f->err)) == 0, "%s",
	              f->err);
	f->ops = f->be->ops;
	f->n_vocab = f->m->hp.n_vocab;
	f->g = tu_model_geometry(&f->m->hp, window);
	f->g.quant_enabled = quant;
	f->g.full_precision_recent = quant ? 8 : window;
	f->g.dtype = dt;
	cache_geometry_pin(&f->g, N_PIN);
	f->S = f->g.sink_keep_count;
	ck_assert_int_eq(f->S, N_PIN);
	for (int i = 0; i < N_PIN + 2 * N_MORE; i++)
		f->ids[i] = (int32_t)((i * 37 + 11 + i / 3) % f->n_vocab);
}

static void fixture_close(struct fixture *f)
{
	backend_free(f->be);
	model_free(f->m);
}

static struct backend_session *plain(struct fixture *f)
{
	struct backend_session *s = NULL;
	ck_assert_msg(f->ops->session_new(f->be, &f->g, &s, f->err, sizeof(f->err)) == 0, "%s",
	              f->err);
	return s;
}

static struct backend_session *sharing(struct fixture *f, const struct backend_prefix *p)
{
	struct backend_session *s = NULL;
	ck_assert_msg(f->ops->session_new_shared(f->be, p, &s, f->err, sizeof(f->err)) == 0, "%s",
	              f->err);
	return s;
}

/* ids[from, from + n) into sessions ss[0..k) in forwards of chunk tokens
 * per session, all sessions in one forward (together) or one forward each;
 * every token's logits must be the same bits in every session. */
static void step_alike(struct fixture *f, struct backend_session **ss, int k, int from, int n,
                       int chunk, bool together)
{
	struct backend_token batch[64];
	float *lg = malloc((size_t)k * chunk * f->n_vocab * sizeof(float));
	size_t row = (size_t)f->n_vocab * sizeof(float);
	for (int i = from; i < from + n; i += chunk) {
		int c = from + n - i < chunk ? from + n - i : chunk, b = 0;
		for (int j = 0; j < k; j++) {
			for (int t = 0; t < c; t++)
				batch[b + t] = (struct backend_token){
				    .session = ss[j], .token = f->ids[i + t], .want_logits = true};
			if (!together) {
				ck_assert_msg(f->ops->forward(f->be, batch + b, (size_t)c,
				                              lg + (size_t)b * f->n_vocab, f->err,
				                              sizeof(f->err)) == 0,
				              "%s", f->err);
			}
			b += c;
		}
		if (together)
			ck_assert_msg(f->ops->forward(f->be, batch, (size_t)b, lg, f->err,
			                              sizeof(f->err)) == 0,
			              "%s", f->err);
		for (int j = 1; j < k; j++)
			ck_assert_msg(
			    memcmp(lg, lg + (size_t)j * c * f->n_vocab, (size_t)c * row) == 0,
			    "session %d: logits of tokens %d..%d not bit-identical", j, i,
			    i + c - 1);
	}
	free(lg);
}

static void export_of(struct fixture *f, struct backend_session *s, struct kv_image *im)
{
	ck_assert_msg(f->ops->session_export(f->be, s, im, f->err, sizeof(f->err)) == 0, "%s",
	              f->err);
}

static void assert_same_image(const struct kv_image *a, const struct kv_image *b)
{
	ck_assert_uint_eq(a->n.n_seen, b->n.n_seen);
	ck_assert_int_eq(a->n.n_sink, b->n.n_sink);
	ck_assert_int_eq(a->n.n_groups, b->n.n_groups);
	ck_assert_int_eq(a->n.n_hot, b->n.n_hot);
	ck_assert_uint_eq(a->bytes, b->bytes);
	ck_assert_msg(memcmp(a->data, b->data, a->bytes) == 0, "image bytes differ");
}

/* A session that appended the first n ids one token per forward, as the
 * prefix's source did. */
static struct backend_session *appended(struct fixture *f, int n)
{
	struct backend_session *s = plain(f);
	float *lg = malloc((size_t)f->n_vocab * sizeof(float));
	for (int i = 0; i < n; i++) {
		struct backend_token t = {.session = s, .token = f->ids[i], .want_logits = true};
		ck_assert_msg(f->ops->forward(f->be, &t, 1, lg, f->err, sizeof(f->err)) == 0, "%s",
		              f->err);
	}
	free(lg);
	return s;
}

/* prefix_image(p, n) into a plain session: the image of a session that
 * appended those n tokens, and it goes on like it. */
static void check_prefix_image(struct fixture *f, const struct backend_prefix *p, int n)
{
	struct kv_image pim, ref_im;
	ck_assert_msg(f->ops->prefix_image(f->be, p, n, &pim, f->err, sizeof(f->err)) == 0, "%s",
	              f->err);
	struct backend_session *ref = appended(f, n), *s = plain(f);
	export_of(f, ref, &ref_im);
	assert_same_image(&pim, &ref_im);
	ck_assert_msg(f->ops->session_import(f->be, s, &pim, f->err, sizeof(f->err)) == 0, "%s",
	              f->err);
	struct backend_session *both[2] = {ref, s};
	step_alike(f, both, 2, n, 6, 3, true);
	kv_image_free(&pim), kv_image_free(&ref_im);
	f->ops->session_free(f->be, ref);
	f->ops->session_free(f->be, s);
}

/* What a shared session reports: S sinks read from the prefix, its own
 * bytes only; the trace shows those sinks as "shared". */
static void check_shared_stats(struct fixture *f, struct backend_session *a,
                               struct backend_session *b)
{
	size_t prefix_bytes = f->prefix_bytes;
	struct sinkcache_stats sa, sb;
	f->ops->session_stats(f->be, a, &sa);
	f->ops->session_stats(f->be, b, &sb);
	ck_assert_uint_eq(sb.n_seen, sa.n_seen);
	ck_assert_int_eq(sb.n_sink, f->S);
	ck_assert_int_eq(sb.n_resident, sa.n_resident);
	ck_assert_int_eq(sa.n_shared, 0);
	ck_assert_uint_eq(sa.bytes_shared, 0);
	ck_assert_int_eq(sb.n_shared, f->S);
	ck_assert_uint_eq(sb.bytes_shared, prefix_bytes);
	ck_assert_uint_eq(sb.bytes_bound, cache_geometry_bound_bytes(&f->g) - prefix_bytes);
	ck_assert_uint_eq(sb.bytes_resident, sa.bytes_resident - prefix_bytes);
	struct cache_trace_step *t = cache_trace_step_new(&f->g);
	ck_assert_ptr_nonnull(t);
	ck_assert_msg(f->ops->session_trace(f->be, b, t, f->err, sizeof(f->err)) == 0, "%s",
	              f->err);
	for (int l = 0; l < t->n_layers; l++) {
		ck_assert_int_eq(t->layers[l].n_slots, sb.n_resident);
		for (int i = 0; i < t->layers[l].n_slots; i++) {
			enum cache_tier tier = t->layers[l].slots[i].tier;
			ck_assert_int_eq(tier == CACHE_TIER_SHARED, i < f->S);
			ck_assert_int_ne(tier, CACHE_TIER_SINK);
		}
	}
	cache_trace_step_free(t);
}

/* Image im with one byte of layer l's sink rows changed. */
static struct kv_image tampered(struct fixture *f, const struct kv_image *im, int l)
{
	struct kv_image_plan plan;
	struct tier_counts none = {0};
	size_t at;
	ck_assert_msg(kv_image_plan_of(&f->g, &im->n, &none, &plan, f->err, sizeof(f->err)) == 0,
	              "%s", f->err);
	kv_image_plan_layer(&plan, &f->g, l, &at);
	struct kv_image bad = *im;
	bad.data = malloc(im->bytes);
	memcpy(bad.data, im->data, im->bytes);
	bad.data[at + 5] ^= 0x10;
	return bad;
}

/* A snapshot of the shared session b (at N_PIN + n0 tokens) imports into a
 * plain session and into another shared one, which go on like a; a
 * snapshot with a changed sink byte is refused by a shared session. */
static void check_snapshots(struct fixture *f, const struct backend_prefix *p,
                            struct backend_session *a, struct backend_session *b, int n0)
{
	struct kv_image ia, ib;
	export_of(f, a, &ia);
	export_of(f, b, &ib);
	assert_same_image(&ia, &ib);
	struct backend_session *d = plain(f), *e = sharing(f, p), *x = sharing(f, p);
	ck_assert_msg(f->ops->session_import(f->be, d, &ib, f->err, sizeof(f->err)) == 0, "%s",
	              f->err);
	int last = f->g.n_layers - 1;
	struct kv_image bad = tampered(f, &ib, last);
	char want[64];
	snprintf(want, sizeof(want), "layer %d", last);
	ck_assert_int_eq(f->ops->session_import(f->be, e, &bad, f->err, sizeof(f->err)), -EINVAL);
	ck_assert_msg(strstr(f->err, want) != NULL, "%s", f->err);
	ck_assert_msg(f->ops->session_import(f->be, e, &ib, f->err, sizeof(f->err)) == 0, "%s",
	              f->err);
	ck_assert_int_eq(f->ops->session_import(f->be, e, &ib, f->err, sizeof(f->err)), -EBUSY);
	/* a shared session takes no image shorter than its prefix */
	struct kv_image short_im;
	ck_assert_msg(f->ops->prefix_image(f->be, p, f->S - 1, &short_im, f->err, sizeof(f->err)) ==
	                  0,
	              "%s", f->err);
	ck_assert_int_eq(f->ops->session_import(f->be, x, &short_im, f->err, sizeof(f->err)),
	                 -EINVAL);
	struct backend_session *all[4] = {a, b, d, e};
	step_alike(f, all, 4, N_PIN + n0, N_MORE - n0, 5, true);
	check_shared_stats(f, a, e);
	kv_image_free(&ia), kv_image_free(&ib), kv_image_free(&bad), kv_image_free(&short_im);
	f->ops->session_free(f->be, d);
	f->ops->session_free(f->be, e);
	f->ops->session_free(f->be, x);
}

/* With its source gone and another session's sinks where the source's
 * were, a new shared session reads the prefix's rows: it goes on like a
 * plain session that imported prefix_image(p, S). */
static void check_outlives_source(struct fixture *f, const struct backend_prefix *p)
{
	struct backend_session *other = plain(f), *r = plain(f), *c = sharing(f, p);
	struct backend_session *rc[2] = {r, c};
	step_alike(f, &other, 1, N_PIN, N_PIN, 5, true);
	struct kv_image im;
	ck_assert_msg(f->ops->prefix_image(f->be, p, f->S, &im, f->err, sizeof(f->err)) == 0, "%s",
	              f->err);
	ck_assert_msg(f->ops->session_import(f->be, r, &im, f->err, sizeof(f->err)) == 0, "%s",
	              f->err);
	step_alike(f, rc, 2, N_PIN, 8, 4, true);
	kv_image_free(&im);
	for (int k = 0; k < 2; k++)
		f->ops->session_free(f->be, rc[k]);
	f->ops->session_free(f->be, other);
}

/* The whole story for one geometry. */
static void shared_prefix_case(int window, bool quant, enum kv_dtype dt)
{
	struct fixture f;
	fixture_open(&f, window, quant, dt);
	size_t used0 = backend_cuda_arena_used(f.be);
	size_t session_b = backend_cuda_session_bytes(&f.g);
	struct backend_session *a = appended(&f, N_PIN), *b;
	ck_assert_uint_eq(backend_cuda_arena_used(f.be) - used0, session_b);
	struct backend_prefix *p = NULL;
	ck_assert_msg(f.ops->prefix_new(f.be, a, &p, &f.prefix_bytes, f.err, sizeof(f.err)) == 0,
	              "%s", f.err);
	ck_assert_uint_eq(f.prefix_bytes, cache_geometry_sink_bytes(&f.g));
	ck_assert_uint_gt(f.prefix_bytes, 0);
	/* the block: the sink rows, each array aligned; counted once */
	size_t block = backend_cuda_arena_used(f.be) - used0 - session_b;
	ck_assert_uint_ge(block, f.prefix_bytes);
	ck_assert_uint_le(block, f.prefix_bytes + 2 * 256 * (size_t)f.g.n_layers);
	b = sharing(&f, p);
	struct backend_session *b2 = sharing(&f, p);
	ck_assert_uint_eq(backend_cuda_arena_used(f.be) - used0,
	                  session_b + block + 2 * (session_b - block));
	f.ops->session_free(f.be, b2);
	check_shared_stats(&f, a, b);
	/* a revision never reaches the (shared) sinks */
	ck_assert_int_ne(f.ops->session_revise(f.be, b, 1, f.err, sizeof(f.err)), 0);
	/* together and apart, then a revision, then on to the snapshots */
	struct backend_session *ab[2] = {a, b};
	step_alike(&f, ab, 2, N_PIN, 7, 3, true);
	step_alike(&f, ab, 2, N_PIN + 7, 9, 4, false);
	for (int k = 0; k < 2; k++)
		ck_assert_msg(f.ops->session_revise(f.be, ab[k], 2, f.err, sizeof(f.err)) == 0,
		              "%s", f.err);
	step_alike(&f, ab, 2, N_PIN + 14, 16, 5, true);
	check_shared_stats(&f, a, b);
	check_snapshots(&f, p, a, b, 30);
	struct sinkcache_stats st;
	f.ops->session_stats(f.be, b, &st);
	ck_assert_uint_gt(st.evicted_compressed, 0);
	if (quant)
		ck_assert_uint_gt(st.moved_to_compressed, 0);
	int ns[3] = {1, f.S - 1, f.S};
	for (int i = 0; i < 3; i++)
		check_prefix_image(&f, p, ns[i]);
	struct kv_image none;
	ck_assert_int_eq(f.ops->prefix_image(f.be, p, 0, &none, f.err, sizeof(f.err)), -EINVAL);
	ck_assert_int_eq(f.ops->prefix_image(f.be, p, f.S + 1, &none, f.err, sizeof(f.err)),
	                 -EINVAL);
	/* only a session holding exactly its sinks makes a prefix */
	struct backend_prefix *q = NULL;
	size_t qb = 0;
	ck_assert_int_eq(f.ops->prefix_new(f.be, a, &q, &qb, f.err, sizeof(f.err)), -EINVAL);
	ck_assert_ptr_null(q);
	f.ops->session_free(f.be, b);
	f.ops->session_free(f.be, a);
	ck_assert_uint_eq(backend_cuda_arena_used(f.be) - used0, block);
	check_outlives_source(&f, p);
	f.ops->prefix_free(f.be, p);
	ck_assert_uint_eq(backend_cuda_arena_used(f.be), used0);
	fixture_close(&f);
}

START_TEST(test_shared_prefix_float)
{
	shared_prefix_case(16, false, KV_DTYPE_F32);
}
END_TEST

START_TEST(test_shared_prefix_int8)
{
	shared_prefix_case(24, true, KV_DTYPE_BF16);
}
END_TEST

/* Geometries that cannot share: sinks quantized, or the model's
 * sliding-window layers. */
START_TEST(test_shared_prefix_refused)
{
	static const uint8_t slides[5] = {1, 0, 0, 0, 0};
	struct fixture f;
	fixture_open(&f, 24, true, KV_DTYPE_F32);
	struct backend_prefix *p = NULL;
	size_t bytes = 0;
	f.g.protect_sinks = false;
	struct backend_session *s = appended(&f, N_PIN);
	ck_assert_int_eq(f.ops->prefix_new(f.be, s, &p, &bytes, f.err, sizeof(f.err)), -ENOTSUP);
	ck_assert_msg(strstr(f.err, "protect_sinks") != NULL, "%s", f.err);
	f.ops->session_free(f.be, s);
	f.g.protect_sinks = true;
	f.m->hp.swa_window = 8;
	f.m->hp.layer_swa = slides;
	cache_geometry_set_model_layers(&f.g, &f.m->hp);
	s = appended(&f, N_PIN);
	ck_assert_int_eq(f.ops->prefix_new(f.be, s, &p, &bytes, f.err, sizeof(f.err)), -ENOTSUP);
	ck_assert_ptr_null(p);
	f.ops->session_free(f.be, s);
	f.m->hp.layer_swa = NULL;
	fixture_close(&f);
}
END_TEST

int main(void)
{
	/* no device: nothing to test (the -emu build always has its one) */
	if (cuda_device_count() == 0)
		return 77;
	Suite *s = suite_create("cuda-prefix");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_shared_prefix_float);
	tcase_add_test(tc, test_shared_prefix_int8);
	tcase_add_test(tc, test_shared_prefix_refused);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
