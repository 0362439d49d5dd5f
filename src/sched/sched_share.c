/* The scheduler's use of the prefix cache (sched_prefix.h): how a new
 * stream finds, computes and shares a pinned prefix, and what that does to
 * the KV budget.  The rules (issue 43's design):
 *
 *   S  a new stream with a pinned, shareable geometry whose feed starts
 *      with a published entry's S tokens gets a backend session that reads
 *      the entry's rows (session_new_shared) and skips those tokens;
 *   P  on a miss it claims the entry, its prefill stops once at stream
 *      index S, the sink tier becomes the entry (prefix_new, publish) and
 *      the session switches to sharing it, so no second copy stays;
 *   W  a stream whose entry is pending (another one computes it) sits out
 *      prefill until it is published (then S) or dropped (then P);
 *   R  a restored snapshot whose sinks are a published entry's rows shares
 *      them again (the backend checks them byte for byte);
 *   D  an append-only opening that is exactly the pinned prefix defers its
 *      tokens to the next request (whose feed starts with them);
 *   C  a new unpinned stream copies the cached image of its longest
 *      whole-block prefix (a copy: its window slides on its own) and
 *      publishes the longest one it passes.
 *
 * Budget: a session reserves its bound at admission; once it shares, its
 * reservation drops by the entry's bytes, which count once in
 * s->reserved while any session references the entry.  Unreferenced
 * entries are outside the budget, so when the backend has no room for a
 * session (the CUDA arena holds their rows) they are evicted and it tries
 * again (session_make).
 *
 * The store is the engine thread's alone; its figures reach
 * scheduler_get_stats through s->st under the lock. */
#include "sched/scheduler_impl.h"
#include "sched/sched_prefix.h"
#include "sched/sched_views.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"
#include "util/log.h"

int sched_share_init(struct scheduler *s, size_t max_bytes, char *err, size_t err_len)
{
	s->prefix_max_applied = max_bytes;
	s->prefix_geom_applied = s->lim.geom;
	int rc = sched_prefix_new(s->be, max_bytes, &s->prefix, err, err_len);
	if (rc)
		err_prefix(err, err_len, "prefix cache");
	return rc;
}

void sched_share_deinit(struct scheduler *s)
{
	if (s->prefix)
		sched_prefix_free(s->prefix); /* every backend session is freed by now */
	s->prefix = NULL;
}

static bool backend_shares(const struct scheduler *s)
{
	const struct backend_ops *o = s->be->ops;
	return s->prefix && o->prefix_new && o->prefix_free && o->session_new_shared &&
	       o->prefix_image;
}

/* Whether a geometry's sink tier can be an entry's rows (backend.h). */
static bool geometry_shares(const struct cache_geometry *g)
{
	char err[SINKD_ERR_LEN];
	return cache_geometry_share_check(g, err, sizeof(err)) == 0;
}

/* Rule C's streams: unpinned, no anchors (a canonical image holds none),
 * and a backend that copies caches in and out. */
static bool copy_eligible(const struct scheduler *s, const struct sched_session *ss)
{
	const struct backend_ops *o = s->be->ops;
	return s->prefix && s->prefix_max_applied > 0 && ss->pinned_tokens == 0 &&
	       ss->geom.anchor_max == 0 && o->session_export && o->session_import;
}

/* Rules S, P, W, D, R's streams: a pinned, shareable geometry. */
static bool pin_eligible(const struct scheduler *s, const struct sched_session *ss)
{
	return backend_shares(s) && s->prefix_max_applied > 0 && ss->pinned_tokens > 0 &&
	       geometry_shares(&ss->geom);
}

bool sched_share_eligible(const struct scheduler *s, const struct sched_session *ss)
{
	return copy_eligible(s, ss) || pin_eligible(s, ss);
}

/* Copies the store's figures into the counters ([mu] held). */
void sched_share_stats_locked(struct scheduler *s)
{
	struct sched_prefix_stats ps = {0};
	if (s->prefix)
		sched_prefix_get_stats(s->prefix, &ps);
	s->st.prefix_bytes = ps.bytes;
	s->st.prefix_entries = ps.entries;
	s->st.prefix_shared_sessions = ps.refs;
}

/* The store's figures now, before the request's events: a client that
 * saw DONE reads the entry it published. */
static void stats_refresh(struct scheduler *s)
{
	pthread_mutex_lock(&s->mu);
	sched_share_stats_locked(s);
	pthread_mutex_unlock(&s->mu);
}

/* The backend found no room (rc -ENOSPC) for a session or a prefix: on
 * CUDA the rows of entries no session references hold KV arena that the
 * budget does not count (s->reserved has referenced ones only), so they go,
 * all but keep, for one more try.  Whether anything was freed. */
static bool reclaim_room(struct scheduler *s, int rc, const struct sched_prefix_entry *keep)
{
	if (rc != -ENOSPC || !s->prefix)
		return false;
	size_t freed = sched_prefix_evict_unreferenced(s->prefix, keep);
	if (freed == 0)
		return false;
	log_event(s->log, LOG_INFO, "sched", "unreferenced prefixes evicted for a session's room",
	          (struct log_field[]){LOG_INT("bytes", freed), LOG_END});
	stats_refresh(s);
	return true;
}

static int backend_session_new(struct scheduler *s, const struct cache_geometry *g,
                               const struct sched_prefix_entry *e, struct backend_session **out,
                               char *err, size_t err_len)
{
	if (e)
		return s->be->ops->session_new_shared(s->be, sched_prefix_entry_prefix(e), out, err,
		                                      err_len);
	return s->be->ops->session_new(s->be, g, out, err, err_len);
}

/* Every backend session the scheduler makes: reading e's rows (e not
 * NULL) or its own, of geometry g; short of room, the unreferenced entries
 * but e and keep make way once. */
static int session_make(struct scheduler *s, const struct cache_geometry *g,
                        const struct sched_prefix_entry *e, const struct sched_prefix_entry *keep,
                        struct backend_session **out, char *err, size_t err_len)
{
	int rc = backend_session_new(s, g, e, out, err, err_len);
	if (reclaim_room(s, rc, e ? e : keep))
		rc = backend_session_new(s, g, e, out, err, err_len);
	return rc;
}

int sched_share_session_new(struct scheduler *s, struct sched_session *ss, char *err,
                            size_t err_len)
{
	return session_make(s, &ss->geom, NULL, NULL, &ss->bs, err, err_len);
}

/* ss now reads e's rows: its reservation drops by them, and they count
 * once in s->reserved while any session references e. */
static void session_take_ref(struct scheduler *s, struct sched_session *ss,
                             struct sched_prefix_entry *e)
{
	size_t bytes = sched_prefix_entry_bytes(e);
	bool first = sched_prefix_entry_refs(e) == 0;
	sched_prefix_ref(s->prefix, e);
	pthread_mutex_lock(&s->mu);
	if (first)
		s->reserved += bytes;
	size_t off = bytes < ss->bytes_reserved ? bytes : ss->bytes_reserved;
	ss->bytes_reserved -= off;
	s->reserved -= off;
	ss->shared_off = off;
	ss->shared_entry = e;
	sched_share_stats_locked(s);
	pthread_mutex_unlock(&s->mu);
}

/* The reference goes and ss owns its whole bound again (what its caller
 * releases, or keeps while it makes a new backend session). */
void sched_share_release(struct scheduler *s, struct sched_session *ss)
{
	struct sched_prefix_entry *e = ss->shared_entry;
	if (!e)
		return;
	ss->shared_entry = NULL;
	size_t bytes = sched_prefix_entry_bytes(e);
	bool last = sched_prefix_entry_refs(e) == 1;
	sched_prefix_unref(s->prefix, e);
	pthread_mutex_lock(&s->mu);
	if (last)
		s->reserved -= bytes;
	/* the session owns its whole bound again, which its caller releases */
	ss->bytes_reserved += ss->shared_off;
	s->reserved += ss->shared_off;
	ss->shared_off = 0;
	sched_share_stats_locked(s);
	pthread_mutex_unlock(&s->mu);
}

static void count_locked(struct scheduler *s, bool hit, int tokens)
{
	pthread_mutex_lock(&s->mu);
	if (hit) {
		s->st.prefix_hits++;
		s->st.prefix_tokens_reused += (uint64_t)tokens;
	} else {
		s->st.prefix_misses++;
	}
	pthread_mutex_unlock(&s->mu);
}

/* Rule S: a backend session over e's rows; the first S feed tokens are in
 * it already.  -errno when the backend cannot make one (the caller makes a
 * plain session instead). */
static int share_entry(struct scheduler *s, struct sched_req *r, struct sched_prefix_entry *e,
                       char *err, size_t err_len)
{
	struct sched_session *ss = r->sess;
	int rc = session_make(s, &ss->geom, e, NULL, &ss->bs, err, err_len);
	if (rc)
		return rc;
	session_take_ref(s, ss, e);
	int n = sched_prefix_entry_tokens(e);
	r->n_fed = (size_t)n;
	/* of them, those of this request's prompt (not deferred by an earlier
	 * one); none of them computed */
	r->n_cached = n - (int)(r->n_hist_fed < (size_t)n ? r->n_hist_fed : (size_t)n);
	count_locked(s, true, n);
	return 0;
}

static int plain_session(struct scheduler *s, struct sched_session *ss, char *err, size_t err_len)
{
	return sched_share_session_new(s, ss, err, err_len);
}

/* Rule D: an append-only request whose stream is exactly the pinned
 * prefix, which the cache holds or is computing: nothing is forwarded, the
 * tokens wait in the stream (hist) for the next request, whose feed starts
 * with them.  Returns whether it deferred. */
static bool defer_prefix(struct scheduler *s, struct sched_req *r, struct sched_prefix_entry *e)
{
	struct sched_session *ss = r->sess;
	int S = ss->geom.sink_keep_count;
	if (!e || !ss->persistent || r->logits_at_end || r->n_feed_all != (size_t)S ||
	    r->n_feed + 1 != r->n_feed_all)
		return false;
	sched_session_set_deferred(s, ss, S - 1);
	r->n_fed = r->n_feed;
	r->n_cached = (int)(r->n_feed - (r->n_hist_fed < r->n_feed ? r->n_hist_fed : r->n_feed));
	return true;
}

/* A stream whose sampling forward must keep its shape: it copies the
 * entry's first S-1 rows (exact) and computes from token S-1 on. */
static int copy_rows(struct scheduler *s, struct sched_req *r, struct sched_prefix_entry *e,
                     char *err, size_t err_len)
{
	struct sched_session *ss = r->sess;
	struct kv_image im = {0};
	int n = sched_prefix_entry_tokens(e) - 1;
	if (n < 1)
		return plain_session(s, ss, err, err_len);
	int rc = session_make(s, &ss->geom, NULL, e, &ss->bs, err, err_len); /* e stays */
	if (rc)
		return rc;
	rc = s->be->ops->prefix_image(s->be, sched_prefix_entry_prefix(e), n, &im, err, err_len);
	if (!rc)
		rc = s->be->ops->session_import(s->be, ss->bs, &im, err, err_len);
	kv_image_free(&im);
	if (rc) { /* it computes them instead */
		s->be->ops->session_free(s->be, ss->bs);
		ss->bs = NULL;
		return plain_session(s, ss, err, err_len);
	}
	sched_prefix_ref(s->prefix, e); /* a hit: the most recently used */
	sched_prefix_unref(s->prefix, e);
	r->n_fed = (size_t)n;
	r->n_cached = n - (int)(r->n_hist_fed < (size_t)n ? r->n_hist_fed : (size_t)n);
	count_locked(s, true, n);
	return 0;
}

/* Whether the forward that samples keeps the batch-size class it has with
 * the cache off: the CPU matmul picks its kernels by batch size, and a
 * single row's logits may differ in the last bits from those of the same
 * token computed among others.  With `skip` tokens taken from the cache, a
 * request that samples forwards n_feed - skip rows, and with the cache off
 * n_feed (or, after a deferral, the pending token and the prompt). */
static bool same_shape(const struct sched_req *r, size_t skip)
{
	if (!r->logits_at_end)
		return true;
	size_t rows = r->n_feed - skip;
	size_t rows_off = r->n_feed - (r->n_hist_fed ? r->n_hist_fed - 1 : 0);
	return rows > 0 && (rows == 1) == (rows_off == 1);
}

/* A new stream's prefix is published: shared, copied (all but its last
 * row, when sharing would change the shape of the sampling forward) or
 * computed as if it were not there. */
static int start_hit(struct scheduler *s, struct sched_req *r, struct sched_prefix_entry *e,
                     char *err, size_t err_len)
{
	size_t S = (size_t)sched_prefix_entry_tokens(e);
	if (r->n_feed >= S && same_shape(r, S)) {
		if (share_entry(s, r, e, err, err_len) == 0)
			return 0;
		log_event(s->log, LOG_WARN, "sched", "shared prefix refused; computing it",
		          (struct log_field[]){LOG_STR("error", err), LOG_END});
	} else if (r->n_feed >= S && same_shape(r, S - 1)) {
		return copy_rows(s, r, e, err, err_len);
	}
	return plain_session(s, r->sess, err, err_len);
}

/* Rule C: a new unpinned stream imports the longest cached image of its
 * first T tokens (whole blocks, at least one token left to compute), and
 * claims the longest one it will pass for the others. */
static int start_copy(struct scheduler *s, struct sched_req *r, char *err, size_t err_len)
{
	struct sched_session *ss = r->sess;
	size_t L = r->n_feed, B = SCHED_PREFIX_BLOCK, T = 0;
	int rc = plain_session(s, ss, err, err_len);
	if (rc || L < B + 1)
		return rc;
	struct sched_prefix_entry *e =
	    sched_prefix_find_image(s->prefix, &ss->geom, r->feed, (int)(L - 1));
	if (e && sched_prefix_entry_ready(e) &&
	    same_shape(r, (size_t)sched_prefix_entry_tokens(e)) &&
	    s->be->ops->session_import(s->be, ss->bs, sched_prefix_entry_image(e), err, err_len) ==
	        0) {
		T = (size_t)sched_prefix_entry_tokens(e);
		r->n_fed = T;
		r->n_cached = (int)T;
		count_locked(s, true, (int)T);
	} else if (!e || sched_prefix_entry_ready(e)) {
		count_locked(s, false, 0);
	}
	size_t want = (L - 1) / B * B;
	if (want > T && same_shape(r, want) &&
	    sched_prefix_claim(s->prefix, SCHED_PREFIX_IMAGE, &ss->geom, r->feed, (int)want, 0,
	                       &e) == 0) {
		r->claim = e;
		r->cut = want;
	}
	return 0;
}

int sched_share_start(struct scheduler *s, struct sched_req *r, char *err, size_t err_len)
{
	struct sched_session *ss = r->sess;
	int S = ss->geom.sink_keep_count;
	r->share_wait = false;
	if (ss->pinned_tokens == 0 && r->n_hist_fed == 0)
		return copy_eligible(s, ss) ? start_copy(s, r, err, err_len)
		                            : plain_session(s, ss, err, err_len);
	/* a stream deferred under settings that changed since computes itself */
	if (!pin_eligible(s, ss) || r->n_feed_all < (size_t)S)
		return plain_session(s, ss, err, err_len);
	struct sched_prefix_entry *e = sched_prefix_find_shared(s->prefix, &ss->geom, r->feed, S);
	if (defer_prefix(s, r, e))
		return 0;
	if (e && !sched_prefix_entry_ready(e)) { /* rule W: another stream computes it */
		r->share_wait = true;
		return 0;
	}
	if (e)
		return start_hit(s, r, e, err, err_len);
	count_locked(s, false, 0);
	/* rule P, or D's miss: cut at S; the rest must sample as it would */
	bool defer = r->n_feed + 1 == r->n_feed_all && r->n_feed_all == (size_t)S &&
	             ss->persistent && !r->logits_at_end;
	if ((defer || (r->n_feed >= (size_t)S && same_shape(r, (size_t)S))) &&
	    sched_prefix_claim(s->prefix, SCHED_PREFIX_SHARED, &ss->geom, r->feed, S,
	                       cache_geometry_sink_bytes(&ss->geom), &e) == 0) {
		r->claim = e;
		r->cut = (size_t)S;
		if (defer) { /* all S tokens computed, published, then deferred */
			r->n_feed = r->n_feed_all;
			r->defer_after = true;
		}
	}
	return plain_session(s, ss, err, err_len);
}

void sched_share_abandon(struct scheduler *s, struct sched_req *r)
{
	if (r->claim)
		sched_prefix_abandon(s->prefix, r->claim);
	r->claim = NULL;
}

/* Rule P's end: the rows of the session's sink tier into a published entry
 * (the claim), its digest from the entry's image. */
static int publish_claim(struct scheduler *s, struct sched_req *r, char *err, size_t err_len)
{
	struct sched_session *ss = r->sess;
	struct backend_prefix *p = NULL;
	struct kv_image im = {0};
	unsigned char digest[32];
	size_t bytes = 0;
	int S = sched_prefix_entry_tokens(r->claim);
	int rc = s->be->ops->prefix_new(s->be, ss->bs, &p, &bytes, err, err_len);
	if (reclaim_room(s, rc, NULL)) /* (the claim is pending: never evicted) */
		rc = s->be->ops->prefix_new(s->be, ss->bs, &p, &bytes, err, err_len);
	if (rc)
		goto fail;
	rc = s->be->ops->prefix_image(s->be, p, S, &im, err, err_len);
	if (!rc)
		rc = sched_prefix_rows_digest(&ss->geom, &im, digest, err, err_len);
	kv_image_free(&im);
	if (rc)
		goto fail;
	rc = sched_prefix_publish_shared(s->prefix, r->claim, p, bytes, digest);
	r->claim = NULL; /* published, or dropped with p */
	if (rc)
		err_set(err, err_len, rc, "no room in inference.prefix_cache.max_bytes");
	return rc;
fail:
	if (p)
		s->be->ops->prefix_free(s->be, p);
	sched_share_abandon(s, r);
	return rc;
}

/* The session switches to reading the entry it just published: its state
 * is exactly the same, its own copy of the rows goes. */
static void switch_to_shared(struct scheduler *s, struct sched_session *ss,
                             struct sched_prefix_entry *e)
{
	char err[SINKD_ERR_LEN];
	struct backend_session *nbs = NULL;
	if (session_make(s, &ss->geom, e, NULL, &nbs, err, sizeof(err)) != 0)
		return; /* it goes on with its own copy */
	s->be->ops->session_free(s->be, ss->bs);
	ss->bs = nbs;
	sched_trace_session_started(s, ss);
	session_take_ref(s, ss, e);
}

/* Rule C's end: the session's cache as it is now, into the claimed entry. */
static void publish_image(struct scheduler *s, struct sched_req *r)
{
	char err[SINKD_ERR_LEN];
	struct kv_image im = {0};
	struct sched_prefix_entry *e = r->claim;
	r->claim = NULL;
	if (s->be->ops->session_export(s->be, r->sess->bs, &im, err, sizeof(err)) != 0) {
		sched_prefix_abandon(s->prefix, e);
		return;
	}
	(void)sched_prefix_publish_image(s->prefix, e, &im); /* no room: dropped */
}

static void after_cut(struct scheduler *s, struct sched_req *r);

void sched_share_after_forward(struct scheduler *s, struct sched_req *r)
{
	if (!r->claim || r->n_fed != r->cut)
		return;
	if (sched_prefix_entry_kind(r->claim) == SCHED_PREFIX_IMAGE)
		publish_image(s, r);
	else
		after_cut(s, r);
	stats_refresh(s);
}

/* Rule P (or D's miss) at its cut: publish, then share or defer. */
static void after_cut(struct scheduler *s, struct sched_req *r)
{
	char err[SINKD_ERR_LEN];
	struct sched_prefix_entry *e = r->claim;
	int rc = publish_claim(s, r, err, sizeof(err));
	if (rc)
		log_event(s->log, LOG_DEBUG, "sched", "prefix not kept",
		          (struct log_field[]){LOG_STR("error", err), LOG_END});
	if (r->defer_after) { /* rule D: its S tokens wait in the stream */
		struct sched_session *ss = r->sess;
		s->be->ops->session_free(s->be, ss->bs);
		ss->bs = NULL;
		sched_session_set_deferred(s, ss, ss->geom.sink_keep_count - 1);
		r->n_fed = r->n_feed;
		return;
	}
	if (!rc)
		switch_to_shared(s, r->sess, e);
}

/* A reload: the engine applies the prefix cache's settings it has not yet. */
void sched_share_apply_limits(struct scheduler *s, size_t max_bytes, const struct cache_geometry *g)
{
	if (max_bytes != s->prefix_max_applied) {
		if (s->prefix)
			sched_prefix_set_max_bytes(s->prefix, max_bytes);
		s->prefix_max_applied = max_bytes;
	}
	if (!cache_geometry_equal(g, &s->prefix_geom_applied)) {
		if (s->prefix)
			sched_prefix_set_geometry(s->prefix, g);
		s->prefix_geom_applied = *g;
	}
}

bool sched_share_reload_due_locked(const struct scheduler *s)
{
	return s->lim.prefix_max_bytes != s->prefix_max_applied ||
	       !cache_geometry_equal(&s->lim.geom, &s->prefix_geom_applied);
}

/* Rule R: a restored snapshot whose sinks are a published entry's rows
 * gets a backend session that reads them (the import checks them byte for
 * byte).  0: done (ss->bs made, the image imported); else ss->bs stays
 * NULL and the snapshot is imported as it is. */
int sched_share_restored(struct scheduler *s, struct sched_session *ss)
{
	char err[SINKD_ERR_LEN];
	unsigned char digest[32];
	if (!pin_eligible(s, ss))
		return -ENOTSUP;
	pthread_mutex_lock(&s->mu);
	struct kv_image im = ss->restore_kv;
	im.data = ss->restore_buf;
	pthread_mutex_unlock(&s->mu);
	if (!im.data || im.n.n_sink != ss->geom.sink_keep_count ||
	    sched_prefix_rows_digest(&ss->geom, &im, digest, err, sizeof(err)) != 0)
		return -ENOENT;
	struct sched_prefix_entry *e = sched_prefix_find_rows(s->prefix, &ss->geom, digest);
	if (!e)
		return -ENOENT;
	int rc = session_make(s, &ss->geom, e, NULL, &ss->bs, err, sizeof(err));
	if (!rc)
		rc = s->be->ops->session_import(s->be, ss->bs, &im, err, sizeof(err));
	if (rc) {
		if (ss->bs)
			s->be->ops->session_free(s->be, ss->bs);
		ss->bs = NULL;
		return rc;
	}
	pthread_mutex_lock(&s->mu);
	ss->restore_buf = NULL;
	pthread_mutex_unlock(&s->mu);
	free(im.data);
	session_take_ref(s, ss, e);
	count_locked(s, true, 0);
	return 0;
}

/* Puts a deferred stream's tokens (rule D) into a backend session of its
 * own: copied from the entry when it is published, else computed. */
static int materialize_into(struct scheduler *s, struct sched_session *ss, const int32_t *tok,
                            int n, char *err, size_t err_len)
{
	int S = ss->geom.sink_keep_count;
	struct sched_prefix_entry *e = NULL;
	if (pin_eligible(s, ss) && (int)ss->hist_n >= S)
		e = sched_prefix_find_shared(s->prefix, &ss->geom, tok, S);
	if (e && sched_prefix_entry_ready(e)) {
		struct kv_image im = {0};
		int rc = s->be->ops->prefix_image(s->be, sched_prefix_entry_prefix(e), n, &im, err,
		                                  err_len);
		if (!rc)
			rc = s->be->ops->session_import(s->be, ss->bs, &im, err, err_len);
		kv_image_free(&im);
		if (!rc)
			return 0;
	}
	struct backend_token *b = calloc((size_t)n, sizeof(*b));
	float *logits = malloc((size_t)s->n_vocab * sizeof(float));
	int rc = b && logits ? 0 : err_set(err, err_len, -ENOMEM, "out of memory");
	for (int i = 0; !rc && i < n; i++)
		b[i] = (struct backend_token){.session = ss->bs, .token = tok[i]};
	if (!rc)
		rc = s->be->ops->forward(s->be, b, (size_t)n, logits, err, err_len);
	free(b);
	free(logits);
	return rc;
}

int sched_share_materialize(struct scheduler *s, struct sched_session *ss, char *err,
                            size_t err_len)
{
	int n = ss->n_deferred;
	if (ss->bs || n <= 0)
		return 0;
	int32_t *tok = malloc(ss->hist_n * sizeof(*tok));
	if (!tok)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	for (size_t i = 0; i < ss->hist_n; i++)
		tok[i] = ss->hist[(ss->hist_end + ss->hist_cap - ss->hist_n + i) % ss->hist_cap];
	int rc = plain_session(s, ss, err, err_len);
	if (!rc)
		rc = materialize_into(s, ss, tok, n, err, err_len);
	free(tok);
	if (rc) {
		if (ss->bs)
			s->be->ops->session_free(s->be, ss->bs);
		ss->bs = NULL;
		return rc;
	}
	sched_session_set_deferred(s, ss, 0);
	sched_trace_session_started(s, ss);
	return 0;
}
