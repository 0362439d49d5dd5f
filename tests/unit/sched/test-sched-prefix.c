/* The prefix cache's store (sched_prefix.c) through its interface, with a
 * fake backend whose only op frees a backend prefix (a malloc'd dummy that
 * remembers whether it was freed): the byte bound under random churn, every
 * prefix freed exactly once, referenced entries never evicted, the longest
 * image prefix found, other tokens or geometries never a hit, pending
 * claims, a shrinking bound, stale entries after a geometry change, and the
 * rows digest of a prefix's image against a snapshot's; and the prefix
 * cache's lines of /metrics. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched_prefix.h"
#include "sched/scheduler.h"
#include "testutil.h"
#include "util/errbuf.h"

#define MAX_PREFIXES 20000

/* The fake backend's prefix: which one, so a second free is seen. */
struct backend_prefix {
	int id;
};

static int n_made, n_freed;
static bool freed[MAX_PREFIXES];

static void fake_prefix_free(struct backend *be, struct backend_prefix *p)
{
	(void)be;
	ck_assert_int_lt(p->id, n_made);
	ck_assert_msg(!freed[p->id], "prefix %d freed twice", p->id);
	freed[p->id] = true;
	n_freed++;
	free(p);
}

static const struct backend_ops fake_ops = {.prefix_free = fake_prefix_free};
static struct backend fake_be = {.ops = &fake_ops};

static struct backend_prefix *prefix_make(void)
{
	ck_assert_int_lt(n_made, MAX_PREFIXES);
	struct backend_prefix *p = malloc(sizeof(*p));
	ck_assert_ptr_nonnull(p);
	p->id = n_made++;
	freed[p->id] = false;
	return p;
}

static struct sched_prefix *store_new(size_t max_bytes)
{
	char err[SINKD_ERR_LEN];
	struct sched_prefix *pc = NULL;
	n_made = n_freed = 0;
	ck_assert_msg(sched_prefix_new(&fake_be, max_bytes, &pc, err, sizeof(err)) == 0, "%s", err);
	return pc;
}

static void store_free(struct sched_prefix *pc)
{
	sched_prefix_free(pc);
	ck_assert_int_eq(n_freed, n_made);
}

static struct cache_geometry geom(int sinks)
{
	return tu_geometry(2, 2, 8, sinks, 40, true, 8, 4);
}

/* tokens[i] of prompt `family`: prompts of one family share their start. */
static void prompt(int32_t *tokens, int n, int family)
{
	for (int i = 0; i < n; i++)
		tokens[i] = family * 1000 + i;
}

static struct sched_prefix_entry *claim(struct sched_prefix *pc, enum sched_prefix_kind kind,
                                        const struct cache_geometry *g, const int32_t *tokens,
                                        int n)
{
	struct sched_prefix_entry *e = NULL;
	ck_assert_int_eq(sched_prefix_claim(pc, kind, g, tokens, n, 0, &e), 0);
	ck_assert_ptr_nonnull(e);
	return e;
}

/* A published SHARED entry of tokens[0, n) holding `bytes`. */
static struct sched_prefix_entry *shared(struct sched_prefix *pc, const struct cache_geometry *g,
                                         const int32_t *tokens, int n, size_t bytes)
{
	static const unsigned char rows[32] = {1};
	struct sched_prefix_entry *e = claim(pc, SCHED_PREFIX_SHARED, g, tokens, n);
	ck_assert_int_eq(sched_prefix_publish_shared(pc, e, prefix_make(), bytes, rows), 0);
	return e;
}

/* A published IMAGE entry of tokens[0, n) holding `bytes` (a dummy image). */
static struct sched_prefix_entry *image(struct sched_prefix *pc, const struct cache_geometry *g,
                                        const int32_t *tokens, int n, size_t bytes)
{
	struct sched_prefix_entry *e = claim(pc, SCHED_PREFIX_IMAGE, g, tokens, n);
	struct kv_image im = {.data = calloc(1, bytes), .bytes = bytes};
	ck_assert_ptr_nonnull(im.data);
	ck_assert_int_eq(sched_prefix_publish_image(pc, e, &im), 0);
	ck_assert_ptr_null(im.data);
	return e;
}

static struct sched_prefix_stats stats(const struct sched_prefix *pc)
{
	struct sched_prefix_stats st;
	sched_prefix_get_stats(pc, &st);
	return st;
}

START_TEST(test_referenced_entry_is_never_evicted)
{
	struct sched_prefix *pc = store_new(100);
	struct cache_geometry g = geom(20);
	int32_t a[20], b[20], c[20];
	prompt(a, 20, 1), prompt(b, 20, 2), prompt(c, 20, 3);
	struct sched_prefix_entry *ea = shared(pc, &g, a, 20, 60);
	sched_prefix_ref(pc, ea);
	/* b needs a's room: refused, its prefix freed, a stays */
	struct sched_prefix_entry *eb = claim(pc, SCHED_PREFIX_SHARED, &g, b, 20);
	unsigned char rows[32] = {2};
	ck_assert_int_eq(sched_prefix_publish_shared(pc, eb, prefix_make(), 60, rows), -ENOSPC);
	ck_assert_int_eq(n_freed, 1);
	ck_assert(freed[1] && !freed[0]);
	ck_assert_ptr_eq(sched_prefix_find_shared(pc, &g, a, 20), ea);
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, b, 20));
	struct sched_prefix_stats st = stats(pc);
	ck_assert_uint_eq(st.bytes, 60);
	ck_assert_uint_eq(st.bytes_referenced, 60);
	ck_assert_uint_eq(st.entries, 1);
	ck_assert_uint_eq(st.pending, 0);
	ck_assert_uint_eq(st.refs, 1);
	ck_assert_uint_eq(st.evicted, 0);
	/* a claim whose rows could never fit is refused up front */
	struct sched_prefix_entry *none = NULL;
	ck_assert_int_eq(sched_prefix_claim(pc, SCHED_PREFIX_SHARED, &g, c, 20, 101, &none),
	                 -ENOSPC);
	ck_assert_ptr_null(none);
	/* unreferenced, a is what makes room for c */
	sched_prefix_unref(pc, ea);
	struct sched_prefix_entry *ec = shared(pc, &g, c, 20, 60);
	ck_assert(freed[0]);
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, a, 20));
	ck_assert_ptr_eq(sched_prefix_find_shared(pc, &g, c, 20), ec);
	ck_assert_uint_eq(stats(pc).evicted, 1);
	ck_assert_uint_eq(stats(pc).bytes, 60);
	store_free(pc);
}
END_TEST

START_TEST(test_longest_image_prefix)
{
	struct sched_prefix *pc = store_new(1 << 20);
	struct cache_geometry g = geom(4);
	const int B = SCHED_PREFIX_BLOCK;
	int32_t t[4 * SCHED_PREFIX_BLOCK];
	prompt(t, 4 * B, 7);
	struct sched_prefix_entry *e1 = image(pc, &g, t, B, 100);
	struct sched_prefix_entry *e2 = image(pc, &g, t, 2 * B, 200);
	struct sched_prefix_entry *e3 = image(pc, &g, t, 3 * B, 300);
	ck_assert_int_eq(sched_prefix_entry_tokens(e3), 3 * B);
	ck_assert_uint_eq(sched_prefix_entry_bytes(e3), 300);
	ck_assert_uint_eq(sched_prefix_entry_image(e3)->bytes, 300);
	ck_assert_ptr_eq(sched_prefix_find_image(pc, &g, t, 4 * B), e3);
	ck_assert_ptr_eq(sched_prefix_find_image(pc, &g, t, 4 * B - 1), e3);
	ck_assert_ptr_eq(sched_prefix_find_image(pc, &g, t, 3 * B - 1), e2);
	ck_assert_ptr_eq(sched_prefix_find_image(pc, &g, t, B), e1);
	ck_assert_ptr_null(sched_prefix_find_image(pc, &g, t, B - 1));
	/* a prompt that differs inside the third block finds the second */
	int32_t u[4 * SCHED_PREFIX_BLOCK];
	memcpy(u, t, sizeof(u));
	u[2 * B + 5] = -1;
	ck_assert_ptr_eq(sched_prefix_find_image(pc, &g, u, 4 * B), e2);
	/* an image is not a shared entry of the same tokens, nor of another
	 * geometry */
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, t, 2 * B));
	struct cache_geometry h = geom(4);
	h.window_size = 32;
	ck_assert_ptr_null(sched_prefix_find_image(pc, &h, t, 4 * B));
	/* an image is a whole number of blocks */
	struct sched_prefix_entry *none = NULL;
	ck_assert_int_eq(sched_prefix_claim(pc, SCHED_PREFIX_IMAGE, &g, t, B + 1, 0, &none),
	                 -EINVAL);
	ck_assert_uint_eq(stats(pc).bytes, 600);
	store_free(pc);
}
END_TEST

START_TEST(test_other_tokens_are_not_a_hit)
{
	struct sched_prefix *pc = store_new(1 << 20);
	struct cache_geometry g = geom(20);
	int32_t t[20], u[20];
	prompt(t, 20, 4);
	struct sched_prefix_entry *e = shared(pc, &g, t, 20, 10);
	ck_assert_ptr_eq(sched_prefix_find_shared(pc, &g, t, 20), e);
	ck_assert_int_eq(sched_prefix_entry_kind(e), SCHED_PREFIX_SHARED);
	ck_assert_ptr_nonnull(sched_prefix_entry_prefix(e));
	ck_assert_ptr_null(sched_prefix_entry_image(e));
	/* the last token of the partial block differs */
	memcpy(u, t, sizeof(u));
	u[19]++;
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, u, 20));
	/* the first block differs */
	memcpy(u, t, sizeof(u));
	u[0] = 4 * 1000 + 1;
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, u, 20));
	/* shorter or longer: other prefixes */
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, t, 19));
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, t, 16));
	/* the same tokens under another geometry */
	struct cache_geometry h = geom(20);
	h.quant_bits = 4;
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &h, t, 20));
	ck_assert_ptr_null(sched_prefix_find_rows(pc, &h, (unsigned char[32]){1}));
	ck_assert_ptr_eq(sched_prefix_find_rows(pc, &g, (unsigned char[32]){1}), e);
	ck_assert_ptr_null(sched_prefix_find_rows(pc, &g, (unsigned char[32]){2}));
	store_free(pc);
}
END_TEST

/* More entries than the table has buckets (so chains are shared, by
 * pigeonhole): each prompt finds its own entry, and none finds another's.
 * (A full SHA-256 collision cannot be made; a hit is confirmed on the
 * tokens all the same.) */
START_TEST(test_many_entries_each_its_own)
{
	enum { N = 600 };
	struct sched_prefix *pc = store_new(1 << 20);
	struct cache_geometry g = geom(20);
	static struct sched_prefix_entry *e[N];
	int32_t t[20];
	for (int i = 0; i < N; i++) {
		prompt(t, 20, i);
		e[i] = shared(pc, &g, t, 20, 10);
	}
	for (int i = 0; i < N; i++) {
		prompt(t, 20, i);
		ck_assert_ptr_eq(sched_prefix_find_shared(pc, &g, t, 20), e[i]);
		t[10] = -1;
		ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, t, 20));
	}
	ck_assert_uint_eq(stats(pc).entries, N);
	store_free(pc);
}
END_TEST

START_TEST(test_pending_entries)
{
	struct sched_prefix *pc = store_new(1000);
	struct cache_geometry g = geom(20);
	int32_t t[20];
	prompt(t, 20, 5);
	struct sched_prefix_entry *e = claim(pc, SCHED_PREFIX_SHARED, &g, t, 20);
	ck_assert(!sched_prefix_entry_ready(e));
	ck_assert_ptr_eq(sched_prefix_find_shared(pc, &g, t, 20), e);
	ck_assert_ptr_null(sched_prefix_entry_prefix(e));
	struct sched_prefix_entry *again = NULL;
	ck_assert_int_eq(sched_prefix_claim(pc, SCHED_PREFIX_SHARED, &g, t, 20, 0, &again),
	                 -EEXIST);
	struct sched_prefix_stats st = stats(pc);
	ck_assert_uint_eq(st.pending, 1);
	ck_assert_uint_eq(st.entries, 0);
	ck_assert_uint_eq(st.bytes, 0);
	sched_prefix_abandon(pc, e);
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, t, 20));
	ck_assert_uint_eq(stats(pc).pending, 0);
	/* abandoned, it may be claimed again, and published */
	e = shared(pc, &g, t, 20, 300);
	ck_assert(sched_prefix_entry_ready(e));
	ck_assert_int_eq(sched_prefix_claim(pc, SCHED_PREFIX_SHARED, &g, t, 20, 0, &again),
	                 -EEXIST);
	st = stats(pc);
	ck_assert_uint_eq(st.pending, 0);
	ck_assert_uint_eq(st.entries, 1);
	ck_assert_uint_eq(st.bytes, 300);
	/* off: claims refused, nothing found */
	sched_prefix_set_max_bytes(pc, 0);
	ck_assert_uint_eq(stats(pc).bytes, 0);
	ck_assert_int_eq(sched_prefix_claim(pc, SCHED_PREFIX_SHARED, &g, t, 20, 0, &again),
	                 -ENOSPC);
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, t, 20));
	store_free(pc);
}
END_TEST

START_TEST(test_shrink_evicts_least_recently_used)
{
	struct sched_prefix *pc = store_new(100);
	struct cache_geometry g = geom(20);
	int32_t a[20], b[20], c[20];
	prompt(a, 20, 1), prompt(b, 20, 2), prompt(c, 20, 3);
	struct sched_prefix_entry *ea = shared(pc, &g, a, 20, 30);
	shared(pc, &g, b, 20, 30);
	struct sched_prefix_entry *ec = shared(pc, &g, c, 20, 30);
	/* a used since: b is the least recently used; c is referenced */
	ck_assert_ptr_eq(sched_prefix_find_shared(pc, &g, a, 20), ea);
	sched_prefix_ref(pc, ec);
	sched_prefix_set_max_bytes(pc, 65);
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, b, 20));
	ck_assert_ptr_eq(sched_prefix_find_shared(pc, &g, a, 20), ea);
	ck_assert_uint_eq(stats(pc).bytes, 60);
	ck_assert_uint_eq(stats(pc).evicted, 1);
	/* below what c holds: a goes, c stays until its last session leaves */
	sched_prefix_set_max_bytes(pc, 20);
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, a, 20));
	ck_assert_ptr_eq(sched_prefix_find_shared(pc, &g, c, 20), ec);
	ck_assert_uint_eq(stats(pc).bytes, 30);
	ck_assert_int_eq(n_freed, 2);
	sched_prefix_unref(pc, ec);
	ck_assert_uint_eq(stats(pc).bytes, 0);
	ck_assert_int_eq(n_freed, 3);
	ck_assert_uint_eq(stats(pc).evicted, 3);
	store_free(pc);
}
END_TEST

/* The backend short of room: every unreferenced SHARED entry goes but the
 * one kept; referenced ones, pending claims and IMAGE entries (host memory)
 * stay. */
START_TEST(test_evict_unreferenced)
{
	struct sched_prefix *pc = store_new(1000);
	struct cache_geometry g = geom(20);
	int32_t a[20], b[20], c[20], d[20], e[20], i[16];
	prompt(a, 20, 1), prompt(b, 20, 2), prompt(c, 20, 3), prompt(d, 20, 4), prompt(e, 20, 5);
	prompt(i, 16, 6);
	struct sched_prefix_entry *ea = shared(pc, &g, a, 20, 30);
	struct sched_prefix_entry *eb = shared(pc, &g, b, 20, 40);
	shared(pc, &g, c, 20, 50);
	shared(pc, &g, d, 20, 60);
	struct sched_prefix_entry *ei = image(pc, &g, i, 16, 70);
	struct sched_prefix_entry *pend = claim(pc, SCHED_PREFIX_SHARED, &g, e, 20);
	sched_prefix_ref(pc, ea);
	ck_assert_uint_eq(sched_prefix_evict_unreferenced(pc, eb), 110);
	ck_assert_int_eq(n_freed, 2);
	ck_assert(freed[2] && freed[3] && !freed[0] && !freed[1]);
	ck_assert_ptr_eq(sched_prefix_find_shared(pc, &g, a, 20), ea);
	ck_assert_ptr_eq(sched_prefix_find_shared(pc, &g, b, 20), eb);
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, c, 20));
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &g, d, 20));
	ck_assert_ptr_eq(sched_prefix_find_image(pc, &g, i, 16), ei);
	ck_assert_ptr_eq(sched_prefix_find_shared(pc, &g, e, 20), pend);
	struct sched_prefix_stats st = stats(pc);
	ck_assert_uint_eq(st.evicted, 2);
	ck_assert_uint_eq(st.entries, 3);
	ck_assert_uint_eq(st.bytes, 30 + 40 + 70);
	ck_assert_uint_eq(st.pending, 1);
	/* nothing to keep: b goes too, and nothing is left to free after it */
	ck_assert_uint_eq(sched_prefix_evict_unreferenced(pc, NULL), 40);
	ck_assert_uint_eq(sched_prefix_evict_unreferenced(pc, NULL), 0);
	ck_assert_uint_eq(stats(pc).evicted, 3);
	sched_prefix_abandon(pc, pend);
	sched_prefix_unref(pc, ea);
	store_free(pc);
}
END_TEST

START_TEST(test_new_geometry_makes_entries_stale)
{
	struct sched_prefix *pc = store_new(1000);
	struct cache_geometry base = geom(4), pinned = geom(4);
	cache_geometry_pin(&pinned, 20);
	const int B = SCHED_PREFIX_BLOCK;
	int32_t t[2 * SCHED_PREFIX_BLOCK];
	prompt(t, 2 * B, 6);
	sched_prefix_set_geometry(pc, &base);
	struct sched_prefix_entry *es = shared(pc, &pinned, t, 20, 100);
	struct sched_prefix_entry *ei = image(pc, &base, t, B, 50);
	sched_prefix_ref(pc, es);
	/* a reload that kept the geometry changes nothing (the shared entry is
	 * of it: its geometry is the base pinned to its tokens) */
	sched_prefix_set_geometry(pc, &base);
	ck_assert_ptr_eq(sched_prefix_find_shared(pc, &pinned, t, 20), es);
	ck_assert_ptr_eq(sched_prefix_find_image(pc, &base, t, 2 * B), ei);
	struct sched_prefix_entry *pend = claim(pc, SCHED_PREFIX_IMAGE, &base, t, 2 * B);
	/* another geometry: the unreferenced image freed at once, the shared
	 * entry kept for its session but never found again */
	struct cache_geometry next = geom(4);
	next.window_size = 32;
	sched_prefix_set_geometry(pc, &next);
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &pinned, t, 20));
	ck_assert_ptr_null(sched_prefix_find_image(pc, &base, t, 2 * B));
	ck_assert_int_eq(n_freed, 0);
	ck_assert_uint_eq(stats(pc).bytes, 100);
	ck_assert_uint_eq(stats(pc).entries, 1);
	/* a claim computed under the old geometry is dropped at its publish */
	struct kv_image im = {.data = malloc(10), .bytes = 10};
	ck_assert_int_eq(sched_prefix_publish_image(pc, pend, &im), -ESTALE);
	ck_assert_uint_eq(stats(pc).pending, 0);
	/* the same tokens may be computed again; the stale entry leaves with
	 * its last session */
	struct sched_prefix_entry *again = NULL;
	ck_assert_int_eq(sched_prefix_claim(pc, SCHED_PREFIX_SHARED, &pinned, t, 20, 0, &again), 0);
	sched_prefix_abandon(pc, again);
	sched_prefix_unref(pc, es);
	ck_assert_int_eq(n_freed, 1);
	ck_assert_uint_eq(stats(pc).bytes, 0);
	ck_assert_uint_eq(stats(pc).entries, 0);
	ck_assert_ptr_null(sched_prefix_find_shared(pc, &pinned, t, 20));
	store_free(pc);
}
END_TEST

/* ---- churn ---------------------------------------------------------------- */

#define CHURN_STEPS 20000
#define CHURN_MAX_BYTES 4096

struct churn {
	struct sched_prefix *pc;
	struct cache_geometry g;
	struct sched_prefix_entry *pending[64];
	int n_pending;
	struct sched_prefix_entry *held[256]; /* one per reference */
	int n_held;
	int published, refused;
};

static int pick(int n)
{
	return rand() % n;
}

/* A prompt of one of a few families: a SHARED prefix of 5, 21 or 37 tokens
 * or an IMAGE one of 1..3 blocks (few, so that sessions find them). */
static int churn_prompt(int32_t *t, enum sched_prefix_kind *kind)
{
	*kind = pick(2) ? SCHED_PREFIX_SHARED : SCHED_PREFIX_IMAGE;
	int n =
	    *kind == SCHED_PREFIX_SHARED ? 5 + 16 * pick(3) : SCHED_PREFIX_BLOCK * (1 + pick(3));
	prompt(t, n, pick(6));
	return n;
}

static void churn_claim(struct churn *c)
{
	int32_t t[64];
	enum sched_prefix_kind kind;
	int n = churn_prompt(t, &kind);
	struct sched_prefix_entry *e = NULL;
	if (c->n_pending == 64)
		return;
	int rc = sched_prefix_claim(c->pc, kind, &c->g, t, n, 0, &e);
	ck_assert(rc == 0 || rc == -EEXIST);
	if (rc == 0)
		c->pending[c->n_pending++] = e;
}

static void churn_publish(struct churn *c, bool abandon)
{
	if (c->n_pending == 0)
		return;
	int i = pick(c->n_pending);
	struct sched_prefix_entry *e = c->pending[i];
	c->pending[i] = c->pending[--c->n_pending];
	if (abandon) {
		sched_prefix_abandon(c->pc, e);
		return;
	}
	size_t bytes = 1 + (size_t)pick(CHURN_MAX_BYTES / 2);
	int rc;
	if (sched_prefix_entry_kind(e) == SCHED_PREFIX_SHARED) {
		unsigned char rows[32] = {0};
		rc = sched_prefix_publish_shared(c->pc, e, prefix_make(), bytes, rows);
	} else {
		struct kv_image im = {.data = malloc(bytes), .bytes = bytes};
		ck_assert_ptr_nonnull(im.data);
		rc = sched_prefix_publish_image(c->pc, e, &im);
	}
	ck_assert(rc == 0 || rc == -ENOSPC);
	rc == 0 ? c->published++ : c->refused++;
}

/* A session takes a reference on a published entry it finds. */
static void churn_ref(struct churn *c)
{
	int32_t t[64];
	enum sched_prefix_kind kind;
	int n = churn_prompt(t, &kind);
	struct sched_prefix_entry *e = kind == SCHED_PREFIX_SHARED
	                                   ? sched_prefix_find_shared(c->pc, &c->g, t, n)
	                                   : sched_prefix_find_image(c->pc, &c->g, t, n);
	if (!e || !sched_prefix_entry_ready(e) || c->n_held == 256)
		return;
	if (kind == SCHED_PREFIX_SHARED)
		ck_assert_int_eq(sched_prefix_entry_tokens(e), n);
	else
		ck_assert_int_le(sched_prefix_entry_tokens(e), n);
	sched_prefix_ref(c->pc, e);
	c->held[c->n_held++] = e;
}

static void churn_unref(struct churn *c)
{
	if (c->n_held == 0)
		return;
	int i = pick(c->n_held);
	struct sched_prefix_entry *e = c->held[i];
	c->held[i] = c->held[--c->n_held];
	ck_assert(sched_prefix_entry_ready(e) && sched_prefix_entry_refs(e) >= 1);
	sched_prefix_unref(c->pc, e);
}

static void churn_check(const struct churn *c)
{
	struct sched_prefix_stats st = stats(c->pc);
	ck_assert_uint_le(st.bytes, CHURN_MAX_BYTES);
	ck_assert_uint_le(st.bytes_referenced, st.bytes);
	ck_assert_uint_eq(st.pending, (size_t)c->n_pending);
	ck_assert_uint_eq(st.refs, (size_t)c->n_held);
	for (int i = 0; i < c->n_held; i++)
		ck_assert(sched_prefix_entry_ready(c->held[i]));
}

START_TEST(test_bound_holds_under_churn)
{
	struct churn c = {.pc = store_new(CHURN_MAX_BYTES), .g = geom(4)};
	srand(43);
	for (int step = 0; step < CHURN_STEPS; step++) {
		int op = pick(10);
		if (op < 3)
			churn_claim(&c);
		else if (op < 5)
			churn_publish(&c, false);
		else if (op < 6)
			churn_publish(&c, true);
		else if (op < 8)
			churn_ref(&c);
		else
			churn_unref(&c);
		churn_check(&c);
	}
	/* the run did what it is for: publishes both kept and refused, and
	 * evictions for room */
	ck_assert_int_gt(c.published, 100);
	ck_assert_int_gt(c.refused, 0);
	ck_assert_uint_gt(stats(c.pc).evicted, 100);
	fprintf(stderr, "churn: %d published, %d refused, %llu evicted\n", c.published, c.refused,
	        (unsigned long long)stats(c.pc).evicted);
	while (c.n_held > 0)
		churn_unref(&c);
	while (c.n_pending > 0)
		churn_publish(&c, true);
	ck_assert_uint_eq(stats(c.pc).bytes_referenced, 0);
	store_free(c.pc);
}
END_TEST

/* ---- rows digest ------------------------------------------------------------ */

/* An image of counts n under g: every byte from `fill`, except the sink
 * rows of every layer, from `sink_seed`. */
static struct kv_image image_of(const struct cache_geometry *g, const struct tier_counts *n,
                                int sink_seed, int fill)
{
	char err[SINKD_ERR_LEN];
	struct kv_image_plan plan;
	struct tier_counts none = {0};
	ck_assert_msg(kv_image_plan_of(g, n, &none, &plan, err, sizeof(err)) == 0, "%s", err);
	struct kv_image im = {.n = *n, .data = malloc(plan.total_bytes), .bytes = plan.total_bytes};
	ck_assert_ptr_nonnull(im.data);
	memset(im.data, fill, im.bytes);
	for (int l = 0; l < g->n_layers; l++) {
		size_t off;
		const struct kv_image_layout *lo = kv_image_plan_layer(&plan, g, l, &off);
		for (size_t i = 0; i < lo->off_groups; i++)
			im.data[off + i] = (unsigned char)(sink_seed * 31 + l * 7 + (int)i);
	}
	return im;
}

static void rows_digest(const struct cache_geometry *g, const struct kv_image *im,
                        unsigned char out[32])
{
	char err[SINKD_ERR_LEN];
	ck_assert_msg(sched_prefix_rows_digest(g, im, out, err, sizeof(err)) == 0, "%s", err);
}

START_TEST(test_rows_digest_of_prefix_and_snapshot)
{
	struct cache_geometry g = geom(4);
	cache_geometry_pin(&g, 6);
	/* the prefix's image: its 6 sinks alone; a session's: the same sinks, a
	 * group, staged and hot tokens */
	struct tier_counts pure = {.n_seen = 6, .n_sink = 6};
	int group = cache_geometry_quant_group_size(&g);
	ck_assert_int_gt(group, 2);
	struct tier_counts session = {.n_seen = 6 + group + 2 + 4,
	                              .moved = group + 2,
	                              .n_sink = 6,
	                              .n_groups = 1,
	                              .n_stage = 2,
	                              .n_hot = 4};
	struct kv_image a = image_of(&g, &pure, 1, 0), b = image_of(&g, &session, 1, 0xab);
	struct kv_image c = image_of(&g, &session, 2, 0xab), d = image_of(&g, &session, 1, 0xcd);
	unsigned char da[32], db[32], dc[32], dd[32];
	rows_digest(&g, &a, da);
	rows_digest(&g, &b, db);
	rows_digest(&g, &c, dc);
	rows_digest(&g, &d, dd);
	ck_assert_mem_eq(da, db, 32);
	ck_assert_mem_eq(db, dd, 32); /* the window is not the prefix */
	ck_assert(memcmp(db, dc, 32) != 0);
	/* one byte of one layer's sink values differs */
	size_t off;
	struct kv_image_plan plan;
	ck_assert_int_eq(kv_image_plan_of(&g, &b.n, &b.n_swa, &plan, NULL, 0), 0);
	const struct kv_image_layout *lo = kv_image_plan_layer(&plan, &g, 1, &off);
	b.data[off + lo->off_sink_v + 3] ^= 1;
	rows_digest(&g, &b, db);
	ck_assert(memcmp(da, db, 32) != 0);
	/* fewer sinks: another digest; counts that do not fit, or bytes short of
	 * them, are refused */
	struct tier_counts five = {.n_seen = 5, .n_sink = 5};
	struct kv_image e = image_of(&g, &five, 1, 0);
	rows_digest(&g, &e, dd);
	ck_assert(memcmp(da, dd, 32) != 0);
	char err[SINKD_ERR_LEN];
	a.bytes--;
	ck_assert_int_eq(sched_prefix_rows_digest(&g, &a, dd, err, sizeof(err)), -EINVAL);
	a.bytes++;
	a.n.n_sink = 7;
	ck_assert_int_eq(sched_prefix_rows_digest(&g, &a, dd, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "n_sink"));
	kv_image_free(&a), kv_image_free(&b), kv_image_free(&c), kv_image_free(&d);
	kv_image_free(&e);
}
END_TEST

/* ---- /metrics ---------------------------------------------------------------- */

/* The prefix cache's metric lines carry the stats they are given, each with
 * its HELP and TYPE. */
START_TEST(test_metrics_lines)
{
	struct scheduler_stats st = {.prefix_hits = 11,
	                             .prefix_misses = 22,
	                             .prefix_tokens_reused = 3300,
	                             .prefix_bytes = 4400,
	                             .prefix_shared_sessions = 55,
	                             .prefix_entries = 6};
	static const struct {
		const char *name, *type;
		unsigned long long v;
	} want[] = {{"sinkd_prefix_cache_hits_total", "counter", 11},
	            {"sinkd_prefix_cache_misses_total", "counter", 22},
	            {"sinkd_prefix_cache_tokens_reused_total", "counter", 3300},
	            {"sinkd_prefix_cache_bytes", "gauge", 4400},
	            {"sinkd_prefix_cache_shared_sessions", "gauge", 55},
	            {"sinkd_prefix_cache_entries", "gauge", 6}};
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(mem);
	scheduler_write_prefix_metrics(&st, mem);
	fclose(mem);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		char line[160];
		snprintf(line, sizeof(line), "\n%s %llu\n", want[i].name, want[i].v);
		ck_assert_msg(strstr(text, line), "no line '%s' in:\n%s", line + 1, text);
		snprintf(line, sizeof(line), "# TYPE %s %s\n", want[i].name, want[i].type);
		ck_assert_msg(strstr(text, line), "no '%s'", line);
		snprintf(line, sizeof(line), "# HELP %s ", want[i].name);
		ck_assert_msg(strstr(text, line), "no '%s'", line);
	}
	free(text);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sched-prefix");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_referenced_entry_is_never_evicted);
	tcase_add_test(tc, test_longest_image_prefix);
	tcase_add_test(tc, test_other_tokens_are_not_a_hit);
	tcase_add_test(tc, test_many_entries_each_its_own);
	tcase_add_test(tc, test_pending_entries);
	tcase_add_test(tc, test_shrink_evicts_least_recently_used);
	tcase_add_test(tc, test_evict_unreferenced);
	tcase_add_test(tc, test_new_geometry_makes_entries_stale);
	tcase_add_test(tc, test_bound_holds_under_churn);
	tcase_add_test(tc, test_rows_digest_of_prefix_and_snapshot);
	tcase_add_test(tc, test_metrics_lines);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
