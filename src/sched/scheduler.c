/* The scheduler's public side and its engine loop: request submission and
 * validation, the FIFO admission queue under the global KV budget, the table
 * of persistent sessions (create, inspect, delete, expire), cancellation,
 * reconfiguration and statistics.  The engine thread runs housekeeping under
 * the lock, then one tick (sched_tick.c) without it.  This file never calls
 * the backend's forward pass and never samples.
 *
 * Admission policy: one-shot requests need their cache bound reserved; they
 * are admitted strictly in FIFO order (the first that does not fit blocks the
 * ones behind it, so a large request is not starved by small ones).  Requests
 * on a persistent session need no new reservation (the session holds one) and
 * are admitted at the next tick regardless of the queue's head. */
#include "sched/scheduler_impl.h"
#include "session/store.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "engine/stopstr.h"
#include "grammar/grammar.h"
#include "util/digest.h"
#include "util/errbuf.h"
#include "util/log.h"
#include "util/sderr.h"
#include "util/monotime.h"

double sched_now(void)
{
	return monotime_s();
}

int sched_ptrs_push(void ***arr, size_t *n, size_t *cap, void *p)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		void **na = realloc(*arr, nc * sizeof(*na));
		if (!na)
			return -ENOMEM;
		*arr = na;
		*cap = nc;
	}
	(*arr)[(*n)++] = p;
	return 0;
}

void sched_ptrs_remove_at(void **arr, size_t *n, size_t i)
{
	memmove(arr + i, arr + i + 1, (*n - i - 1) * sizeof(*arr));
	(*n)--;
}

static void ptrs_remove(void **arr, size_t *n, const void *p)
{
	for (size_t i = 0; i < *n; i++)
		if (arr[i] == p) {
			sched_ptrs_remove_at(arr, n, i);
			return;
		}
}

/* Longest sleep of the engine thread while every decoder waits for its
 * client; scheduler_kick() normally ends it much sooner. */
#define FLOW_WAIT_MAX_S 0.05
/* Longest idle wait of the engine loop (its heartbeat's period when idle). */
#define HEARTBEAT_IDLE_S 1.0

#define PUSH(arr, n, cap, p) sched_ptrs_push((void ***)&(arr), &(n), &(cap), (p))

/* ---- budget and limits ------------------------------------------------- */

/* MemAvailable from /proc/meminfo in bytes, 0 when unreadable. */
static size_t mem_available_bytes(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kib = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
			break;
	fclose(f);
	return (size_t)kib * 1024;
}

/* The most tokens a stream may pin: the sink tier must stay smaller than the
 * window (sliding_window) or within the context (full). */
static int pinned_limit(const struct cache_geometry *g, int64_t configured)
{
	int64_t most = g->strategy == CACHE_STRATEGY_FULL ? g->max_context_length
	                                                  : g->window_size - 1;
	return (int)(configured < most ? configured : most);
}

/* -ENOSPC when a cache bound can never fit the KV budget. */
static int bound_fits_budget_locked(struct scheduler *s, size_t bound, char *err, size_t err_len)
{
	if (bound <= s->lim.budget_bytes)
		return 0;
	s->st.rejected_budget++;
	return err_set(err, err_len, -ENOSPC,
	               "a session's cache bound (%zu bytes) exceeds the KV budget (%zu bytes)",
	               bound, s->lim.budget_bytes);
}

static int pin_check_locked(const struct scheduler *s, const struct gen_request *q,
                            enum sched_field *field, char *err, size_t err_len)
{
	int rc = 0;
	if (q->pin_prefix_tokens < 0 || q->pin_prefix_tokens > s->lim.max_pinned_tokens)
		rc = err_set(err, err_len, SDERR_OUT_OF_RANGE,
		             "%d pinned tokens: inference.cache.max_pinned_tokens allows 0..%d "
		             "(at most window_size - 1)",
		             q->pin_prefix_tokens, s->lim.max_pinned_tokens);
	else if ((size_t)q->pin_prefix_tokens > q->n_prompt)
		rc = err_set(err, err_len, SDERR_OUT_OF_RANGE,
		             "%d pinned tokens: the prompt has only %zu (only prompt tokens can be "
		             "pinned)",
		             q->pin_prefix_tokens, q->n_prompt);
	if (rc)
		*field = SCHED_FIELD_PIN_PREFIX_TOKENS;
	return rc;
}

static void limits_from_config(struct scheduler *s, const struct sinkd_config *cfg,
                               struct sched_limits *lim)
{
	lim->max_batch_tokens =
	    cfg->scheduler.max_batch_tokens > 0 ? cfg->scheduler.max_batch_tokens : 1;
	lim->max_queue = cfg->scheduler.max_queue;
	lim->max_queue_wait_s = cfg->scheduler.max_queue_wait_s;
	lim->session_ttl_s = cfg->scheduler.session_ttl_s;
	lim->session_empty_ttl_s = cfg->scheduler.session_empty_ttl_s;
	lim->max_sessions = cfg->limits.max_sessions;
	lim->session_offload_s = cfg->scheduler.session_offload_s;
	lim->max_prompt_tokens = cfg->limits.max_prompt_tokens > 0
	                             ? cfg->limits.max_prompt_tokens
	                             : cfg->inference.max_context_length;
	lim->max_unsent_tokens = (size_t)cfg->scheduler.max_unsent_tokens;
	lim->monitor_input = cfg->monitoring.input_perplexity;
	lim->monitor_every = cfg->monitoring.input_perplexity_every;
	lim->alert_ratio = cfg->monitoring.perplexity_alert_ratio;
	lim->budget_auto = cfg->inference.cache.global_cache_limit_auto;
	lim->auto_fraction = cfg->inference.cache.auto_fraction;
	config_cache_geometry(cfg, &s->be->model->hp, &lim->geom);
	lim->max_pinned_tokens = pinned_limit(&lim->geom, cfg->inference.cache.max_pinned_tokens);
	lim->prefix_max_bytes = (size_t)cfg->inference.prefix_cache.max_bytes;
	if (!lim->budget_auto) {
		lim->budget_bytes = (size_t)cfg->inference.cache.global_cache_limit;
		return;
	}
	/* A backend with its own cache arena (cuda) sized it already. */
	if (s->be->ops->kv_budget_bytes) {
		lim->budget_bytes = s->be->ops->kv_budget_bytes(s->be);
		return;
	}
	/* "auto": a share of the host memory that is free now, plus what our own
	 * caches already hold, minus the weights (a mapped model's pages count
	 * as "available" page cache, yet they must stay resident). */
	size_t avail = mem_available_bytes() + s->resident;
	size_t weights = model_file_weight_bytes(s->be->model); /* every expert stays */
	avail = avail > weights ? avail - weights : 0;
	lim->budget_bytes = (size_t)((double)avail * lim->auto_fraction);
}

int scheduler_retry_after_s(struct scheduler *s)
{
	pthread_mutex_lock(&s->mu);
	int64_t w = s->lim.max_queue_wait_s;
	pthread_mutex_unlock(&s->mu);
	return w < 1 ? 1 : w > 60 ? 60 : (int)w;
}

int64_t scheduler_max_prompt_tokens(struct scheduler *s)
{
	pthread_mutex_lock(&s->mu);
	int64_t n = s->lim.max_prompt_tokens;
	pthread_mutex_unlock(&s->mu);
	return n;
}

/* ---- sessions ---------------------------------------------------------- */

struct sched_session *sched_session_find_locked(struct scheduler *s, const char *id)
{
	for (size_t i = 0; i < s->n_sessions; i++)
		if (strcmp(s->sessions[i]->id, id) == 0)
			return s->sessions[i];
	return NULL;
}

/* Tokens that can still be rolled back exactly: the un-fed last token plus
 * every resident non-sink token. */
static size_t session_revisable_locked(const struct sched_session *ss)
{
	size_t n = sched_revisable_cached(&ss->stats, &ss->geom);
	return n + (ss->has_pending ? 1 : 0);
}

/* When an idle session expires (the top of scheduler.h). */
static double session_expires_locked(const struct scheduler *s, const struct sched_session *ss)
{
	if (ss->used || s->lim.session_empty_ttl_s >= s->lim.session_ttl_s)
		return ss->last_used + (double)s->lim.session_ttl_s;
	return ss->created + (double)s->lim.session_empty_ttl_s;
}

static size_t sessions_owned_locked(const struct scheduler *s, const char *owner)
{
	size_t n = 0;
	for (size_t i = 0; i < s->n_sessions; i++)
		n += strcmp(s->sessions[i]->owner, owner) == 0;
	return n;
}

/* Of the owner's sessions in the store (keys), those not resident here. */
static size_t stored_elsewhere_locked(struct scheduler *s, char (*keys)[SESSION_KEY_LEN],
                                      size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += sched_session_find_locked(s, keys[i]) == NULL;
	return k;
}

/* limits.max_sessions and the owner's limit, which counts the owner's
 * sessions wherever they are (here, or offloaded to the store: stored, of
 * them the keys in the store); SDERR_MAX_SESSIONS / SDERR_OWNER_SESSIONS. */
static int session_limits_locked(struct scheduler *s, const struct session_settings *opt,
                                 char (*stored)[SESSION_KEY_LEN], size_t n_stored, char *err,
                                 size_t err_len)
{
	const char *owner = opt && opt->owner ? opt->owner : "";
	if (owner[0] && opt->owner_max > 0 &&
	    sessions_owned_locked(s, owner) + stored_elsewhere_locked(s, stored, n_stored) >=
	        (size_t)opt->owner_max) {
		s->st.rejected_owner_sessions++;
		return err_set(err, err_len, SDERR_OWNER_SESSIONS,
		               "this client holds %" PRId64 " persistent sessions, the most "
		               "limits.per_key.max_sessions allows (here and in the session "
		               "store); delete one (DELETE /v1/sessions/{id}) or let an idle "
		               "one expire",
		               opt->owner_max);
	}
	if (s->lim.max_sessions > 0 && (int64_t)s->n_sessions >= s->lim.max_sessions) {
		s->st.rejected_sessions++;
		return err_set(err, err_len, SDERR_MAX_SESSIONS,
		               "%zu persistent sessions exist, the most limits.max_sessions "
		               "allows; retry when one is deleted or expires",
		               s->n_sessions);
	}
	return 0;
}

int scheduler_session_retry_after_s(struct scheduler *s, const char *owner)
{
	double now = sched_now(), first = 0;
	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < s->n_sessions; i++) {
		const struct sched_session *ss = s->sessions[i];
		if (ss->busy_handle || (owner && strcmp(ss->owner, owner)))
			continue;
		double t = session_expires_locked(s, ss);
		if (first == 0 || t < first)
			first = t;
	}
	double wait = first > 0 ? first - now : (double)s->lim.session_ttl_s;
	pthread_mutex_unlock(&s->mu);
	return wait < 1 ? 1 : wait > 3600 ? 3600 : (int)ceil(wait);
}

static int settings_apply(const struct sched_limits *lim, const struct session_settings *opt,
                          struct cache_geometry *g, enum sched_field *field, char *err,
                          size_t err_len)
{
	*g = lim->geom;
	if (!opt)
		return 0;
	*field = SCHED_FIELD_WINDOW_SIZE;
	if (opt->window_size < 0 || opt->window_size > lim->geom.window_size)
		return err_set(err, err_len, -EINVAL, "window_size %d out of range (allowed 1..%d)",
		               opt->window_size, lim->geom.window_size);
	/* past the window's own range, what the geometry refuses is a sink tier
	 * that does not fit in the window */
	*field = SCHED_FIELD_SINK_KEEP_COUNT;
	if (opt->sink_keep_count < -1 || opt->sink_keep_count > lim->geom.sink_keep_count)
		return err_set(err, err_len, -EINVAL,
		               "sink_keep_count %d out of range (allowed 0..%d)",
		               opt->sink_keep_count, lim->geom.sink_keep_count);
	if (opt->window_size > 0)
		g->window_size = opt->window_size;
	if (opt->sink_keep_count >= 0)
		g->sink_keep_count = opt->sink_keep_count;
	if (g->full_precision_recent > g->window_size)
		g->full_precision_recent = g->window_size;
	int rc = cache_geometry_check(g, err, err_len);
	if (!rc)
		*field = SCHED_FIELD_NONE;
	return rc;
}

static struct sched_session *session_alloc(const struct cache_geometry *g, bool persistent)
{
	struct sched_session *ss = calloc(1, sizeof(*ss));
	if (!ss)
		return NULL;
	ss->geom = *g;
	ss->persistent = persistent;
	if (persistent) {
		ss->hist_cap = snapshot_hist_cap(g);
		ss->hist = malloc(ss->hist_cap * sizeof(*ss->hist));
		if (!ss->hist) {
			free(ss);
			return NULL;
		}
	}
	ss->created = ss->last_used = sched_now();
	return ss;
}

/* A random key in owner's namespace. */
static void session_id_make(const char *owner, char key[SCHED_SESSION_ID_LEN])
{
	char id[SESSION_ID_MAX + 1];
	unsigned char raw[16];
	if (RAND_bytes(raw, sizeof(raw)) != 1) {
		/* Never expected; fall back to a clock-derived id rather than fail. */
		uint64_t t = (uint64_t)(sched_now() * 1e9);
		for (size_t i = 0; i < sizeof(raw); i++)
			raw[i] = (unsigned char)(t >> (8 * (i % 8))) ^ (unsigned char)(i * 37);
	}
	digest_hex(raw, sizeof(raw), id);
	session_key_make(owner, id, key);
}

/* Stored responses whose request has ended and that are on their way to
 * the park or the store ([mu]). */
static bool parking_pending_locked(const struct scheduler *s)
{
	for (size_t i = 0; i < s->n_sessions; i++) {
		const struct sched_session *ss = s->sessions[i];
		if (ss->parkable && ss->used && !ss->busy_handle && !ss->deleted &&
		    (ss->offloading || !ss->offload_tried))
			return true;
	}
	return false;
}

void sched_ctl_wait_locked(struct scheduler *s, long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += ms * 1000 * 1000;
	if (ts.tv_nsec >= 1000000000L)
		ts.tv_sec++, ts.tv_nsec -= 1000000000L;
	pthread_cond_timedwait(&s->ctl_cv, &s->mu, &ts);
}

/* Admission never refuses a session because of stored responses: while
 * the budget lacks room and some are leaving (a tick away), it waits for
 * them (at most SCHED_PARK_WAIT_S; [mu], released while waiting). */
#define SCHED_PARK_WAIT_S 5.0
static void wait_for_parking_locked(struct scheduler *s, size_t bound)
{
	double until = sched_now() + SCHED_PARK_WAIT_S;
	while (s->reserved + bound > s->lim.budget_bytes && parking_pending_locked(s) &&
	       sched_now() < until) {
		pthread_cond_signal(&s->cv); /* the engine's sweep sends them off */
		sched_ctl_wait_locked(s, 20);
	}
}

/* A restored session's stream history and cache image. */
static void session_fill_restored(struct sched_session *ss, const struct sched_restore *rs,
                                  const struct cache_geometry *g, size_t bound)
{
	size_t n = rs->n_hist < ss->hist_cap ? rs->n_hist : ss->hist_cap;
	memcpy(ss->hist, rs->hist + (rs->n_hist - n), n * sizeof(int32_t));
	ss->hist_n = n;
	ss->hist_end = n % ss->hist_cap;
	ss->has_pending = rs->has_pending;
	ss->pinned_tokens = rs->pinned_tokens;
	ss->used = true;
	ss->restore_buf = rs->kv_buf;
	ss->restore_kv = (struct kv_image){
	    .n = rs->kv_counts, .n_swa = rs->kv_counts_swa, .bytes = rs->kv_bytes};
	const struct tier_counts *c = &rs->kv_counts;
	int window = kv_image_counts_window(g, c);
	ss->stats = (struct sinkcache_stats){.n_seen = c->n_seen,
	                                     .n_resident = c->n_sink + window,
	                                     .n_sink = c->n_sink,
	                                     .n_compressed = window - c->n_hot,
	                                     .n_hot = c->n_hot,
	                                     .bytes_bound = bound,
	                                     .evicted_compressed = c->evicted,
	                                     .moved_to_compressed = c->moved};
	ss->stats.n_resident_swa = rs->kv_counts_swa.n_hot;
}

/* The scheduler's part of a create (rs NULL) or a restore, called by
 * sched_store_create() once the store had its say: the limits, the budget,
 * then the session; a restored one gets its stream history and its cache
 * image. */
struct create_args {
	struct scheduler *s;
	const struct session_settings *opt;
	const struct sched_restore *rs;
	char *id_out; /* [SCHED_SESSION_ID_LEN] */
};

static int session_admit(void *arg, const struct sched_store_claim *claim, enum sched_field *field,
                         char *err, size_t err_len)
{
	const struct create_args *a = arg;
	struct scheduler *s = a->s;
	const struct session_settings *opt = a->opt;
	const struct sched_restore *rs = a->rs;
	const char *want_id = claim->id;
	struct cache_geometry g;
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	*field = SCHED_FIELD_NONE;
	if (rs)
		g = *rs->geom;
	else
		rc = settings_apply(&s->lim, opt, &g, field, err, err_len);
	if (rc)
		goto out;
	if (want_id && sched_session_find_locked(s, want_id)) {
		*field = SCHED_FIELD_SESSION_ID;
		rc = err_set(err, err_len, -EEXIST, "session %s exists", session_key_id(want_id));
		goto out;
	}
	rc = session_limits_locked(s, opt, claim->stored, claim->n_stored, err, err_len);
	if (rc)
		goto out;
	size_t bound = cache_geometry_bound_bytes(&g);
	rc = bound_fits_budget_locked(s, bound, err, err_len);
	if (rc)
		goto out;
	wait_for_parking_locked(s, bound);
	if (s->reserved + bound > s->lim.budget_bytes) {
		s->st.rejected_queue_full++;
		rc = err_set(err, err_len, -EAGAIN, "KV cache budget exhausted; retry later");
		goto out;
	}
	struct sched_session *ss = session_alloc(&g, true);
	if (!ss || PUSH(s->sessions, s->n_sessions, s->cap_sessions, ss)) {
		if (ss)
			free(ss->hist);
		free(ss);
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
		goto out;
	}
	if (want_id)
		snprintf(ss->id, sizeof(ss->id), "%s", want_id);
	else
		do
			session_id_make(opt ? opt->owner : NULL, ss->id);
		while (s->n_sessions > 1 && sched_session_find_locked(s, ss->id) != ss);
	if (opt && opt->owner)
		snprintf(ss->owner, sizeof(ss->owner), "%s", opt->owner);
	ss->parkable = opt && opt->park_when_idle;
	if (rs)
		session_fill_restored(ss, rs, &g, bound);
	/* a state of its own from here: above anything its lease knew of */
	ss->generation = rs ? rs->generation : claim->generation + 1;
	ss->leased = claim->leased;
	ss->bytes_reserved = bound;
	s->reserved += bound;
	s->st.sessions_created++;
	memcpy(a->id_out, ss->id, SCHED_SESSION_ID_LEN);
	pthread_cond_signal(&s->cv); /* the TTL deadline changed */
out:
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* A create (rs NULL) or a restore: the key, then the store's lease and the
 * scheduler's checks (sched_store_create). */
static int session_create(struct scheduler *s, const struct session_settings *opt,
                          const struct sched_restore *rs, char id_out[SCHED_SESSION_ID_LEN],
                          enum sched_field *field, char *err, size_t err_len)
{
	const char *want_id = opt && opt->id && opt->id[0] ? opt->id : NULL;
	*field = want_id ? SCHED_FIELD_SESSION_ID : SCHED_FIELD_NONE; /* until the id is taken */
	if (want_id && !session_key_valid(want_id))
		return err_set(err, err_len, -EINVAL, "session id: 1..32 hex digits");
	struct create_args a = {.s = s, .opt = opt, .rs = rs, .id_out = id_out};
	enum sched_lease lease = !rs          ? SCHED_LEASE_TAKE
	                         : rs->leased ? SCHED_LEASE_HELD
	                                      : SCHED_LEASE_NONE;
	return sched_store_create(&s->store, opt ? opt->owner : NULL, opt ? opt->owner_max : 0,
	                          want_id, lease, session_admit, &a, field, err, err_len);
}

int scheduler_session_create(struct scheduler *s, const struct session_settings *opt,
                             char id_out[SCHED_SESSION_ID_LEN], enum sched_field *err_field,
                             char *err, size_t err_len)
{
	enum sched_field field = SCHED_FIELD_NONE;
	int rc = session_create(s, opt, NULL, id_out, &field, err, err_len);
	if (err_field)
		*err_field = rc ? field : SCHED_FIELD_NONE;
	return rc;
}

int sched_session_create_restored(struct scheduler *s, const struct session_settings *opt,
                                  const struct sched_restore *rs,
                                  char id_out[SCHED_SESSION_ID_LEN], char *err, size_t err_len)
{
	enum sched_field field; /* a snapshot's fields are not the client's */
	return session_create(s, opt, rs, id_out, &field, err, err_len);
}

void sched_session_info_locked(const struct sched_session *ss, double now,
                               struct sched_session_info *out)
{
	memset(out, 0, sizeof(*out));
	out->n_seen = ss->stats.n_seen + (uint64_t)ss->n_deferred + (ss->has_pending ? 1 : 0);
	out->n_resident = ss->stats.n_resident;
	out->n_sink = ss->stats.n_sink;
	out->n_compressed = ss->stats.n_compressed;
	out->n_hot = ss->stats.n_hot;
	out->bytes_resident = ss->stats.bytes_resident;
	out->bytes_reserved = ss->bytes_reserved;
	out->age_s = now - ss->created;
	out->busy = ss->busy_handle != 0;
	out->idle_s = out->busy ? 0 : now - ss->last_used;
	out->restored = ss->restore_buf != NULL;
	snprintf(out->owner, sizeof(out->owner), "%s", ss->owner);
	out->window_size = ss->geom.window_size;
	out->sink_keep_count = ss->geom.sink_keep_count;
	out->pinned_tokens = ss->pinned_tokens;
	out->shared_prefix_tokens = ss->stats.n_shared;
	for (int l = 0; l < ss->geom.n_layers; l++)
		if (ss->geom.layer[l].own && ss->geom.layer[l].swa) {
			out->sliding_layers++;
			out->sliding_window = ss->geom.layer[l].window_size;
		}
	out->sliding_resident = ss->stats.n_resident_swa;
	out->perplexity = ss->ppl_pub;
}

int scheduler_session_info(struct scheduler *s, const char *id, struct sched_session_info *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->mu);
	struct sched_session *ss = id ? sched_session_find_locked(s, id) : NULL;
	if (ss)
		sched_session_info_locked(ss, sched_now(), out);
	pthread_mutex_unlock(&s->mu);
	return ss ? 0 : -ENOENT;
}

static void cancel_locked(struct scheduler *s, uint64_t handle)
{
	for (size_t i = 0; i < s->n_queue; i++)
		if (s->queue[i]->handle == handle)
			s->queue[i]->cancelled = true;
	for (size_t i = 0; i < s->n_active; i++)
		if (s->active[i]->handle == handle)
			s->active[i]->cancelled = true;
}

/* Takes a session out of the table; the engine frees it once idle. */
void sched_session_kill_locked(struct scheduler *s, struct sched_session *ss)
{
	ptrs_remove((void **)s->sessions, &s->n_sessions, ss);
	ss->deleted = true;
	if (ss->busy_handle)
		cancel_locked(s, ss->busy_handle);
	if (PUSH(s->dead, s->n_dead, s->cap_dead, ss))
		ss->deleted = true; /* no memory for the list: leaks the session, keeps running */
}

int scheduler_chat_marks(struct scheduler *s, const char *id, struct sched_chat_mark **out,
                         size_t *n, uint64_t *n_seen, size_t *revisable)
{
	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&s->mu);
	struct sched_session *ss = id ? sched_session_find_locked(s, id) : NULL;
	int rc = ss ? 0 : -ENOENT;
	if (ss) {
		*n_seen = ss->stats.n_seen + (ss->has_pending ? 1 : 0);
		*revisable = session_revisable_locked(ss);
		if (ss->n_chat_marks) {
			*out = malloc(ss->n_chat_marks * sizeof(**out));
			if (*out) {
				memcpy(*out, ss->chat_marks, ss->n_chat_marks * sizeof(**out));
				*n = ss->n_chat_marks;
			} else {
				rc = -ENOMEM;
			}
		}
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int scheduler_chat_marks_set(struct scheduler *s, const char *id, const struct sched_chat_mark *m,
                             size_t n)
{
	struct sched_chat_mark *copy = n ? malloc(n * sizeof(*copy)) : NULL;
	if (n && !copy)
		return -ENOMEM;
	if (n)
		memcpy(copy, m, n * sizeof(*copy));
	pthread_mutex_lock(&s->mu);
	struct sched_session *ss = id ? sched_session_find_locked(s, id) : NULL;
	if (ss) {
		free(ss->chat_marks);
		ss->chat_marks = copy;
		ss->n_chat_marks = n;
		copy = NULL;
	}
	pthread_mutex_unlock(&s->mu);
	free(copy);
	return ss ? 0 : -ENOENT;
}

void scheduler_session_park_when_idle(struct scheduler *s, const char *id, bool held)
{
	pthread_mutex_lock(&s->mu);
	struct sched_session *ss = id ? sched_session_find_locked(s, id) : NULL;
	if (ss) {
		ss->parkable = true;
		/* the sweep skips a session whose leaving was tried, and one
		 * being written stays when cancelled; a request's start clears
		 * both, so it leaves once that request has ended */
		if (!ss->busy_handle) {
			if (ss->offloading)
				ss->offload_cancel = held;
			else
				ss->offload_tried = held;
			pthread_cond_signal(&s->cv);
		}
	}
	pthread_mutex_unlock(&s->mu);
}

int scheduler_session_delete(struct scheduler *s, const char *id)
{
	pthread_mutex_lock(&s->mu);
	struct sched_session *ss = id ? sched_session_find_locked(s, id) : NULL;
	if (ss) {
		sched_session_kill_locked(s, ss);
		pthread_cond_signal(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	if (ss || !scheduler_session_stored(s, id))
		return ss ? 0 : -ENOENT;
	/* only in the store: deleted there unless another instance holds it */
	char holder[160], err[SINKD_ERR_LEN];
	int rc = session_store_lease_take(sched_leave_store(&s->store), id, NULL, holder,
	                                  sizeof(holder), err, sizeof(err));
	if (rc)
		return rc;
	sched_forget_stored(s, id);
	return 0;
}

/* ---- submission -------------------------------------------------------- */

/* What the server checked before submitting (server/gen_prepare.c: the
 * prompt, max_tokens within limits.max_tokens, token ids in the vocabulary).
 * A request that fails here is its caller's bug, not the client's fault:
 * SDERR_UNCHECKED, with no field to blame. */
static int req_check_given(const struct scheduler *s, const struct gen_request *req, char *err,
                           size_t err_len)
{
	const char *why = !req->on_event                           ? "no event callback"
	                  : req->max_tokens < 0                    ? "max_tokens < 0"
	                  : !req->session_id && req->n_prompt == 0 ? "an empty prompt"
	                                                           : NULL;
	for (size_t i = 0; !why && i < req->n_prompt; i++)
		if (req->prompt_ids[i] < 0 || req->prompt_ids[i] >= s->n_vocab)
			why = "a prompt token id outside the vocabulary";
	for (size_t i = 0; !why && i < req->n_logit_bias; i++)
		if (req->logit_bias[i].token < 0 || req->logit_bias[i].token >= s->n_vocab)
			why = "a logit_bias token id outside the vocabulary";
	return why ? err_set(err, err_len, SDERR_UNCHECKED, "unchecked request: %s", why) : 0;
}

static int req_alloc(struct scheduler *s, const struct gen_request *req, struct sched_req **out,
                     char *err, size_t err_len)
{
	struct sched_req *r = calloc(1, sizeof(*r));
	int rc;
	if (!r)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	rc = sampler_new(&req->sampling, s->n_vocab, &r->sampler, err, err_len);
	if (rc)
		goto fail;
	if (req->n_stops) {
		rc = stop_matcher_new((const char *const *)req->stops, req->n_stops, &r->stop, err,
		                      err_len);
		if (rc)
			goto fail;
	}
	if (req->grammar) {
		rc = grammar_matcher_new(req->grammar, s->vocab, &r->gm);
		if (rc) {
			err_set(err, err_len, rc, "out of memory");
			goto fail;
		}
	}
	r->text_cap = 1024;
	for (size_t i = 0; i < req->n_stops; i++)
		r->text_cap += strlen(req->stops[i]);
	r->text = malloc(r->text_cap);
	if (!r->text) {
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
		goto fail;
	}
	r->logits_row = -1;
	*out = r;
	return 0;
fail:
	sampler_free(r->sampler);
	stop_matcher_free(r->stop);
	grammar_matcher_free(r->gm);
	free(r);
	return rc < 0 ? rc : -EINVAL;
}

/* The one length check of every request: what one request may send
 * (limits.max_prompt_tokens, every strategy) and, under strategy full, what
 * its stream may hold (kept tokens of a session + prompt + max_tokens). */
static int req_length_check_locked(const struct scheduler *s, const struct gen_request *q,
                                   const struct cache_geometry *g, size_t kept,
                                   enum sched_field *field, char *err, size_t err_len)
{
	int rc = 0;
	if (q->n_prompt > (uint64_t)s->lim.max_prompt_tokens)
		rc = err_set(err, err_len, -E2BIG,
		             "the prompt has %zu tokens; the context takes at most %" PRId64
		             " from one request (limits.max_prompt_tokens)",
		             q->n_prompt, s->lim.max_prompt_tokens);
	else if (g->strategy == CACHE_STRATEGY_FULL &&
	         kept + q->n_prompt + (size_t)q->max_tokens > (size_t)g->max_context_length)
		rc = err_set(err, err_len, -E2BIG,
		             "%zu tokens kept + prompt (%zu tokens) + max_tokens (%d) exceed "
		             "inference.max_context_length (%d) of strategy full",
		             kept, q->n_prompt, q->max_tokens, g->max_context_length);
	if (rc)
		*field = SCHED_FIELD_PROMPT; /* what the client can shorten */
	return rc;
}

/* A session's first request pins a prefix: the session's sink tier grows
 * to it and its reservation with it (the cache is made at that request, so
 * nothing is moved). */
static int session_pin_locked(struct scheduler *s, struct sched_session *ss,
                              const struct gen_request *q, enum sched_field *field, char *err,
                              size_t err_len)
{
	int rc = pin_check_locked(s, q, field, err, err_len);
	if (rc)
		return rc;
	*field = SCHED_FIELD_PIN_PREFIX_TOKENS;
	if (ss->used || ss->stats.n_seen > 0 || ss->has_pending)
		return err_set(err, err_len, SDERR_OUT_OF_RANGE,
		               "session %s already holds tokens: a prefix is pinned by a session's "
		               "first request",
		               session_key_id(ss->id));
	struct cache_geometry g = ss->geom;
	if (g.strategy == CACHE_STRATEGY_SLIDING_WINDOW && q->pin_prefix_tokens >= g.window_size)
		return err_set(err, err_len, SDERR_OUT_OF_RANGE,
		               "%d pinned tokens: session %s has window_size %d (allowed 0..%d)",
		               q->pin_prefix_tokens, session_key_id(ss->id), g.window_size, g.window_size - 1);
	*field = SCHED_FIELD_NONE;
	cache_geometry_pin(&g, q->pin_prefix_tokens);
	rc = cache_geometry_check(&g, err, err_len);
	if (rc)
		return rc;
	size_t bound = cache_geometry_bound_bytes(&g);
	size_t more = bound > ss->bytes_reserved ? bound - ss->bytes_reserved : 0;
	rc = bound_fits_budget_locked(s, bound, err, err_len);
	if (rc)
		return rc;
	if (s->reserved + more > s->lim.budget_bytes) {
		s->st.rejected_queue_full++;
		return err_set(err, err_len, -EAGAIN, "KV cache budget exhausted; retry later");
	}
	/* the history ring is sized by the window, which a pin leaves alone */
	s->reserved += more;
	ss->bytes_reserved += more;
	ss->geom = g;
	ss->pinned_tokens = q->pin_prefix_tokens;
	return 0;
}

/* Checks a request against its persistent session; marks the session busy. */
static int submit_on_session_locked(struct scheduler *s, struct sched_req *r, char *err,
                                    size_t err_len)
{
	struct gen_request *q = &r->req;
	struct sched_session *ss = sched_session_find_locked(s, q->session_id);
	q->err_field = SCHED_FIELD_SESSION_ID;
	if (!ss)
		return err_set(err, err_len, -ENOENT, "no session %.40s",
		               session_key_id(q->session_id));
	if (ss->offloading)
		ss->offload_cancel = true; /* it stays here: the request runs on it */
	if (ss->busy_handle) {
		s->st.rejected_busy++;
		return err_set(err, err_len, -EBUSY, "session %s is busy with another request",
		               session_key_id(ss->id));
	}
	size_t revisable = session_revisable_locked(ss);
	q->err_field = SCHED_FIELD_REVISE_LAST_TOKENS;
	if (q->revise_last_tokens > revisable)
		return err_set(
		    err, err_len, SDERR_CONFLICT,
		    "cannot revise %zu tokens: this session can revise its last %zu (its %d "
		    "cached tokens past the %d sink tokens, plus %d pending not yet fed): sink "
		    "tokens and tokens evicted from the window (up to %d tokens) are kept as "
		    "they are",
		    q->revise_last_tokens, revisable, ss->stats.n_resident - ss->stats.n_sink,
		    ss->stats.n_sink, ss->has_pending ? 1 : 0, ss->geom.window_size);
	q->err_field = SCHED_FIELD_NONE;
	if (q->n_prompt == 0 && q->max_tokens > 0 && revisable - q->revise_last_tokens == 0)
		return err_set(err, err_len, -EINVAL, "the session has no token to continue from");
	size_t kept = (size_t)ss->stats.n_resident + (size_t)ss->n_deferred +
	              (ss->has_pending ? 1 : 0) - q->revise_last_tokens;
	int rc = req_length_check_locked(s, q, &ss->geom, kept, &q->err_field, err, err_len);
	if (!rc && q->pin_prefix_tokens > 0)
		rc = session_pin_locked(s, ss, q, &q->err_field, err, err_len);
	if (rc)
		return rc;
	snprintf(r->sid, sizeof(r->sid), "%s", ss->id);
	r->sess = ss;
	return 0;
}

static int submit_one_shot_locked(struct scheduler *s, struct sched_req *r, char *err,
                                  size_t err_len)
{
	struct gen_request *q = &r->req;
	r->geom = s->lim.geom;
	int rc = pin_check_locked(s, q, &q->err_field, err, err_len);
	if (!rc && q->pin_prefix_tokens > 0) {
		cache_geometry_pin(&r->geom, q->pin_prefix_tokens);
		rc = cache_geometry_check(&r->geom, err, err_len);
	}
	if (rc)
		return rc;
	r->need_bytes = cache_geometry_bound_bytes(&r->geom);
	rc = bound_fits_budget_locked(s, r->need_bytes, err, err_len);
	if (rc)
		return rc;
	rc = req_length_check_locked(s, q, &r->geom, 0, &q->err_field, err, err_len);
	if (rc)
		return rc;
	r->sess = session_alloc(&r->geom, false);
	if (!r->sess)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	r->sess->pinned_tokens = q->pin_prefix_tokens;
	return 0;
}

/* Whether a one-shot request would have to wait in a full queue.  Requests
 * on a session wait for nothing and do not count; a request that is admitted
 * at once never counts either (so max_queue 0 means "no waiting"). */
static bool queue_full_locked(struct scheduler *s, const struct sched_req *r)
{
	size_t waiting = 0;
	for (size_t i = 0; i < s->n_queue; i++)
		waiting += !s->queue[i]->sess->persistent;
	if (waiting == 0 && s->reserved + r->need_bytes <= s->lim.budget_bytes)
		return false;
	return (int64_t)waiting >= s->lim.max_queue;
}

static int submit_locked(struct scheduler *s, struct sched_req *r, uint64_t *handle, char *err,
                         size_t err_len)
{
	int rc;
	if (s->stopping)
		return err_set(err, err_len, -EAGAIN, "scheduler is stopping");
	rc = r->req.session_id ? submit_on_session_locked(s, r, err, err_len)
	                       : submit_one_shot_locked(s, r, err, err_len);
	if (rc)
		return rc;
	if (!r->req.session_id && queue_full_locked(s, r)) {
		free(r->sess);
		r->sess = NULL;
		s->st.rejected_queue_full++;
		return err_set(err, err_len, -EAGAIN, "request queue full (%zu waiting)",
		               s->n_queue);
	}
	if (PUSH(s->queue, s->n_queue, s->cap_queue, r)) {
		if (!r->sess->persistent)
			free(r->sess);
		r->sess = NULL;
		return err_set(err, err_len, -ENOMEM, "out of memory");
	}
	r->handle = s->next_handle++;
	r->state = REQ_QUEUED;
	r->enqueued_at = sched_now();
	if (r->sess->persistent) {
		r->sess->busy_handle = r->handle;
		r->sess->used = true;
	}
	*handle = r->handle;
	pthread_cond_signal(&s->cv);
	return 0;
}

int scheduler_submit(struct scheduler *s, struct gen_request *req, uint64_t *handle, char *err,
                     size_t err_len)
{
	struct sched_req *r = NULL;
	req->err_field = SCHED_FIELD_NONE;
	int rc = req_check_given(s, req, err, err_len);
	if (rc)
		return rc;
	rc = req_alloc(s, req, &r, err, err_len);
	if (rc)
		return rc;
	r->req = *req;
	if (req->session_id) {
		snprintf(r->sid, sizeof(r->sid), "%s", req->session_id);
		r->req.session_id = r->sid;
	}
	snprintf(r->rid, sizeof(r->rid), "%s", req->request_id ? req->request_id : "");
	snprintf(r->owner, sizeof(r->owner), "%s", req->owner ? req->owner : "");
	r->req.request_id = r->rid;
	r->req.owner = r->owner;
	pthread_mutex_lock(&s->mu);
	rc = submit_locked(s, r, handle, err, err_len);
	pthread_mutex_unlock(&s->mu);
	if (rc) {
		req->err_field = r->req.err_field;
		/* The caller keeps its buffers: do not free them with r. */
		r->req.prompt_ids = NULL;
		r->req.stops = NULL;
		r->req.n_stops = 0;
		r->req.logit_bias = NULL;
		r->req.grammar = NULL;
		sched_req_free(r);
		return rc;
	}
	req->prompt_ids = NULL;
	req->stops = NULL;
	req->logit_bias = NULL;
	req->grammar = NULL;
	return 0;
}

void scheduler_cancel(struct scheduler *s, uint64_t handle)
{
	pthread_mutex_lock(&s->mu);
	cancel_locked(s, handle);
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* ---- engine loop: housekeeping under the lock ------------------------- */

/* Lists collected under the lock, acted on without it. */
struct housekeeping {
	struct sched_req **leave; /* queued requests leaving: timeout or cancel */
	size_t n_leave, cap_leave;
	struct sched_session **free_sessions;
	size_t n_free, cap_free;
	struct sched_session **offload;
	size_t n_offload, cap_offload;
	double next_deadline; /* earliest time something must happen; 0 none */
};

static void deadline_min(struct housekeeping *hk, double t)
{
	if (hk->next_deadline == 0 || t < hk->next_deadline)
		hk->next_deadline = t;
}

static bool leave_queue_locked(struct scheduler *s, struct housekeeping *hk, size_t i)
{
	if (PUSH(hk->leave, hk->n_leave, hk->cap_leave, s->queue[i]) != 0)
		return false;
	sched_ptrs_remove_at((void **)s->queue, &s->n_queue, i);
	return true;
}

/* Admits in FIFO order; requests on sessions need no reservation.  A request
 * that does not fit leaves with 503 once it waited max_queue_wait_s. */
static void admit_locked(struct scheduler *s, struct housekeeping *hk, double now)
{
	bool blocked = false;
	for (size_t i = 0; i < s->n_queue;) {
		struct sched_req *r = s->queue[i];
		if (r->cancelled && leave_queue_locked(s, hk, i))
			continue;
		bool fits = r->need_bytes == 0 ||
		            (!blocked && s->reserved + r->need_bytes <= s->lim.budget_bytes);
		if (fits && PUSH(s->active, s->n_active, s->cap_active, r) == 0) {
			sched_ptrs_remove_at((void **)s->queue, &s->n_queue, i);
			if (!r->sess->persistent)
				r->sess->bytes_reserved = r->need_bytes;
			s->reserved += r->need_bytes;
			r->state = r->pub_state = REQ_STARTING;
			s->st.admitted++;
			sched_hist_observe(&s->hist[SCHED_HIST_QUEUE_WAIT_SECONDS],
			                   now - r->enqueued_at);
			continue;
		}
		double deadline = r->enqueued_at + (double)s->lim.max_queue_wait_s;
		if (now >= deadline && leave_queue_locked(s, hk, i))
			continue;
		if (r->need_bytes)
			blocked = true;
		deadline_min(hk, deadline);
		i++;
	}
}

static void sessions_sweep_locked(struct scheduler *s, struct housekeeping *hk, double now)
{
	for (size_t i = 0; i < s->n_sessions;) {
		struct sched_session *ss = s->sessions[i];
		double expires = session_expires_locked(s, ss);
		if (!ss->busy_handle && now >= expires) {
			s->st.sessions_expired++;
			s->st.sessions_expired_empty += !ss->used;
			log_event(s->log, LOG_INFO, "sched", "session expired",
			          (struct log_field[]){LOG_STR("session", ss->id),
			                               LOG_DBL("idle_s", now - ss->last_used),
			                               LOG_INT("never_used", !ss->used), LOG_END});
			sched_session_kill_locked(s, ss);
			continue; /* the table shrank at i */
		}
		if (!ss->busy_handle)
			deadline_min(hk, expires);
		/* a stored response leaves as soon as its request has ended */
		bool park = ss->parkable && ss->used && !s->offload_all;
		if (!ss->busy_handle && !ss->offload_tried && !ss->offloading &&
		    (s->store.shared || park) && s->be->ops->session_export &&
		    (s->offload_all || s->lim.session_offload_s > 0 || park)) {
			double when = s->offload_all || park
			                  ? now
			                  : ss->last_used + (double)s->lim.session_offload_s;
			if (now >= when &&
			    PUSH(hk->offload, hk->n_offload, hk->cap_offload, ss) == 0) {
				ss->offload_tried = true;
				ss->offloading = true;
				ss->ctl_refs++; /* until the writer is done with it */
			} else {
				deadline_min(hk, when);
			}
		}
		i++;
	}
	for (size_t i = 0; i < s->n_dead;) {
		struct sched_session *ss = s->dead[i];
		if (!ss->busy_handle && ss->ctl_refs == 0 &&
		    PUSH(hk->free_sessions, hk->n_free, hk->cap_free, ss) == 0) {
			sched_ptrs_remove_at((void **)s->dead, &s->n_dead, i);
			continue;
		}
		i++;
	}
}

static void housekeeping_run(struct scheduler *s, struct housekeeping *hk)
{
	for (size_t i = 0; i < hk->n_leave; i++) {
		struct sched_req *r = hk->leave[i];
		if (r->cancelled) {
			sched_emit_done(s, r, GEN_FINISH_CANCELLED, 0, SCHED_FIELD_NONE, NULL);
		} else {
			pthread_mutex_lock(&s->mu);
			s->st.rejected_timeout++;
			pthread_mutex_unlock(&s->mu);
			sched_emit_done(s, r, GEN_FINISH_ERROR, -EAGAIN, SCHED_FIELD_NONE,
			                "timed out waiting for KV cache budget; retry later");
		}
		sched_req_retire(s, r);
	}
	for (size_t i = 0; i < hk->n_free; i++) {
		struct sched_session *ss = hk->free_sessions[i];
		if (ss->persistent && !ss->stored)
			sched_forget_stored(s, ss->id); /* deleted or expired: its file goes too */
		sched_session_release(s, ss);
		pthread_mutex_lock(&s->mu);
		s->reserved -= ss->bytes_reserved;
		s->resident -= ss->stats.bytes_resident;
		pthread_mutex_unlock(&s->mu);
		free(ss);
	}
	/* Idle sessions due for the store: copied out here (fast), written by
	 * the writer thread; each stays usable until its file is in place. */
	size_t n_jobs = 0;
	struct sched_offload **jobs = (struct sched_offload **)hk->offload;
	for (size_t i = 0; i < hk->n_offload; i++) {
		struct sched_session *ss = hk->offload[i];
		char err[SINKD_ERR_LEN];
		struct sched_offload *j = calloc(1, sizeof(*j));
		int rc = j ? sched_export_session(s, ss, &j->ex, err, sizeof(err))
		           : err_set(err, sizeof(err), -ENOMEM, "out of memory");
		if (rc) {
			free(j);
			pthread_mutex_lock(&s->mu);
			ss->offloading = false;
			ss->ctl_refs--;
			s->st.offload_failures++;
			pthread_mutex_unlock(&s->mu);
			log_event(s->log, LOG_ERROR, "sched", "session offload failed (kept resident)",
			          (struct log_field[]){LOG_STR("session", ss->id),
			                               LOG_STR("error", err), LOG_END});
			continue;
		}
		j->ss = ss;
		j->t_start = sched_now();
		jobs[n_jobs++] = j;
	}
	sched_offload_queue(s, jobs, n_jobs);
	hk->n_leave = hk->n_free = hk->n_offload = 0;
}

static void wait_for_work_locked(struct scheduler *s, double deadline)
{
	if (deadline == 0) {
		pthread_cond_wait(&s->cv, &s->mu);
		return;
	}
	struct timespec now_rt, ts;
	clock_gettime(CLOCK_REALTIME, &now_rt);
	double wait = deadline - sched_now() + 0.001;
	if (wait < 0)
		return;
	double t = (double)now_rt.tv_sec + (double)now_rt.tv_nsec * 1e-9 + wait;
	ts.tv_sec = (time_t)t;
	ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
	pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

void scheduler_kick(struct scheduler *s)
{
	atomic_fetch_add(&s->kicks, 1);
	if (atomic_load(&s->kick_wanted)) {
		pthread_mutex_lock(&s->mu);
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
	}
}

/* Test hook: the engine makes no progress while the stall file exists. */
static void stall_locked(struct scheduler *s)
{
	pthread_mutex_unlock(&s->mu);
	struct timespec ts = {0, 50 * 1000 * 1000};
	nanosleep(&ts, NULL);
	pthread_mutex_lock(&s->mu);
}

static void *engine_main(void *arg)
{
	struct scheduler *s = arg;
	struct housekeeping hk = {0};
	pthread_mutex_lock(&s->mu);
	while (!s->stopping) {
		if (s->stall_file[0] && access(s->stall_file, F_OK) == 0) {
			stall_locked(s);
			continue;
		}
		atomic_fetch_add(&s->heartbeat, 1);
		double now = sched_now();
		hk.next_deadline = 0;
		admit_locked(s, &hk, now);
		sessions_sweep_locked(s, &hk, now);
		struct sched_ctl *ctl[16];
		size_t n_ctl = 0;
		while (s->n_ctl > 0 && n_ctl < 16) {
			ctl[n_ctl++] = s->ctl[0];
			sched_ptrs_remove_at((void **)s->ctl, &s->n_ctl, 0);
		}
		bool work = s->n_active > 0 || hk.n_leave || hk.n_free || hk.n_offload || n_ctl ||
		            sched_share_reload_due_locked(s);
		if (!work) {
			/* Idle, the loop still turns every second so that its
			 * heartbeat (the systemd watchdog's evidence) goes on. */
			double beat = now + HEARTBEAT_IDLE_S;
			wait_for_work_locked(s, hk.next_deadline && hk.next_deadline < beat
			                            ? hk.next_deadline
			                            : beat);
			continue;
		}
		pthread_mutex_unlock(&s->mu);
		sched_ctl_run(s, ctl, n_ctl);
		housekeeping_run(s, &hk);
		unsigned kicks = atomic_load(&s->kicks);
		size_t n = sched_tick(s);
		pthread_mutex_lock(&s->mu);
		if (n == 0 && s->n_held) {
			/* Every decoder waits for its client: sleep until one takes
			 * tokens (a kick since the tick began counts), a request
			 * arrives or is cancelled.  The timeout is a safety net. */
			atomic_store(&s->kick_wanted, true);
			if (atomic_load(&s->kicks) == kicks && !s->stopping)
				wait_for_work_locked(s, sched_now() + FLOW_WAIT_MAX_S);
			atomic_store(&s->kick_wanted, false);
		}
	}
	pthread_mutex_unlock(&s->mu);
	free(hk.leave);
	free(hk.free_sessions);
	free(hk.offload);
	return NULL;
}

/* ---- lifecycle --------------------------------------------------------- */

/* Tells the pacing an MoE model's shape: its k experts' share of the
 * weight bytes one token's step reads (each layer's attention, router and
 * k experts, and the output head). */
static void pace_moe_from_model(struct sched_pace *p, const struct model *m)
{
	const struct model_hparams *hp = &m->hp;
	if (hp->n_experts <= 0)
		return;
	double experts = 0, dense = (double)m->output.rows * (double)m->output.row_bytes;
	for (int i = 0; i < hp->n_layers; i++) {
		const struct model_layer *l = &m->layers[i];
		const struct weight_matrix *shared[] = {
		    &l->wq, &l->wk, &l->wv, &l->wo, &l->w_router, &l->w_gate, &l->w_up, &l->w_down};
		for (size_t j = 0; j < sizeof(shared) / sizeof(shared[0]); j++)
			dense += (double)shared[j]->rows * (double)shared[j]->row_bytes;
		const struct weight_matrix *expert[] = {l->exp_gate, l->exp_up, l->exp_down};
		for (size_t j = 0; j < 3; j++)
			if (expert[j])
				experts += hp->n_experts_used * (double)expert[j]->rows *
				           (double)expert[j]->row_bytes;
	}
	if (experts > 0)
		sched_pace_set_moe(p, hp->n_experts, hp->n_experts_used,
		                   experts / (dense + experts));
}

int scheduler_new(const struct sinkd_config *cfg, struct backend *be, const struct tokenizer *tok,
                  struct sinkd_log *log, struct scheduler **out, char *err, size_t err_len)
{
	struct scheduler *s = calloc(1, sizeof(*s));
	int rc;
	if (!s)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	s->be = be;
	sched_pace_init(&s->pace,
	                be->ops->batch_rows_granule > 1 ? (size_t)be->ops->batch_rows_granule : 1);
	pace_moe_from_model(&s->pace, be->model);
	s->tok = tok;
	s->log = log;
	s->n_vocab = be->model->hp.n_vocab;
	sched_monitor_init(&s->monitor, log, s->n_vocab);
	s->next_handle = 1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_cond_init(&s->ctl_cv, NULL);
	sched_hist_init_all(s);
	rc = sched_store_init(&s->store, cfg, log, &s->mu, err, err_len);
	if (rc)
		goto fail;
	limits_from_config(s, cfg, &s->lim);
	rc = sched_share_init(s, s->lim.prefix_max_bytes, err, err_len);
	if (rc)
		goto fail;
	rc = vocab_trie_new(tok, &s->vocab, err, err_len);
	if (rc) {
		err_prefix(err, err_len, "vocabulary trie for constrained decoding");
		goto fail;
	}
	log_alloc(log, "sched", "vocabulary trie for constrained decoding",
	          vocab_trie_bytes(s->vocab));
	rc = cache_geometry_check(&s->lim.geom, err, err_len);
	if (rc) {
		err_prefix(err, err_len, "cache geometry");
		goto fail;
	}
	rc = -pthread_create(&s->thread, NULL, engine_main, s);
	if (rc) {
		err_set(err, err_len, rc, "cannot start the engine thread");
		goto fail;
	}
	s->thread_started = true;
	log_event(log, LOG_INFO, "sched", "scheduler started",
	          (struct log_field[]){
	              LOG_INT("kv_budget_bytes", s->lim.budget_bytes),
	              LOG_INT("session_bound_bytes", cache_geometry_bound_bytes(&s->lim.geom)),
	              LOG_INT("max_batch_tokens", s->lim.max_batch_tokens), LOG_END});
	*out = s;
	return 0;
fail:
	scheduler_free(s);
	return rc;
}

static void free_all_requests(struct scheduler *s, struct sched_req **list, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct sched_req *r = list[i];
		sched_emit_done(s, r, GEN_FINISH_CANCELLED, 0, SCHED_FIELD_NONE, NULL);
		if (r->sess && !r->sess->persistent) {
			sched_session_release(s, r->sess);
			free(r->sess);
		}
		sched_req_free(r);
	}
}

void scheduler_free(struct scheduler *s)
{
	if (!s)
		return;
	if (s->thread_started) {
		pthread_mutex_lock(&s->mu);
		s->stopping = true;
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->thread, NULL);
	}
	sched_store_writer_stop(&s->store); /* the writer finishes what it was given */
	/* The engine is gone: this thread owns everything now. */
	free_all_requests(s, s->queue, s->n_queue);
	free_all_requests(s, s->active, s->n_active);
	for (size_t i = 0; i < s->n_sessions; i++) {
		sched_session_release(s, s->sessions[i]);
		free(s->sessions[i]);
	}
	for (size_t i = 0; i < s->n_dead; i++) {
		sched_session_release(s, s->dead[i]);
		free(s->dead[i]);
	}
	sched_share_deinit(s); /* after the sessions that referenced its entries */
	free(s->queue);
	free(s->active);
	free(s->sessions);
	free(s->dead);
	free(s->ctl);
	free(s->batch);
	sched_store_deinit(&s->store);
	free(s->logits);
	sched_monitor_deinit(&s->monitor);
	free(s->cand);
	vocab_trie_free(s->vocab);
	pthread_cond_destroy(&s->cv);
	pthread_cond_destroy(&s->ctl_cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

struct sched_prepared {
	struct sched_limits lim;
};

/* The limits a config asks for, checked against the model and the backend:
 * the geometry of new sessions must be one the backend can hold and one
 * session's bound must fit the budget.  A budget below what is reserved now
 * is fine: admission waits until use falls under it. */
int scheduler_prepare(struct scheduler *s, const struct sinkd_config *cfg,
                      struct sched_prepared **out, char *err, size_t err_len)
{
	struct sched_prepared *p = calloc(1, sizeof(*p));
	if (!p)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	pthread_mutex_lock(&s->mu);
	bool was_auto = s->lim.budget_auto;
	double was_fraction = s->lim.auto_fraction;
	size_t was_budget = s->lim.budget_bytes;
	limits_from_config(s, cfg, &p->lim);
	pthread_mutex_unlock(&s->mu);
	struct sched_limits *lim = &p->lim;
	if (lim->budget_auto && was_auto && lim->auto_fraction == was_fraction)
		lim->budget_bytes = was_budget; /* keep the budget measured at start */
	int rc = cache_geometry_check(&lim->geom, err, err_len);
	if (!rc && s->be->ops->geometry_check)
		rc = s->be->ops->geometry_check(s->be, &lim->geom, err, err_len);
	if (rc) {
		err_prefix(err, err_len, "cache geometry of new sessions");
		goto fail;
	}
	size_t arena = s->be->ops->kv_budget_bytes ? s->be->ops->kv_budget_bytes(s->be) : 0;
	if (arena && lim->budget_bytes > arena) {
		rc = err_set(err, err_len, -EINVAL,
		             "inference.cache.global_cache_limit: %zu bytes exceed the device's "
		             "cache arena (%zu bytes, sized at start); restart to grow it",
		             lim->budget_bytes, arena);
		goto fail;
	}
	size_t bound = cache_geometry_bound_bytes(&lim->geom);
	if (bound > lim->budget_bytes) {
		rc = err_set(err, err_len, -EINVAL,
		             "inference.cache.global_cache_limit: %zu bytes cannot hold one "
		             "session's cache (%zu bytes for this geometry)",
		             lim->budget_bytes, bound);
		goto fail;
	}
	*out = p;
	return 0;
fail:
	free(p);
	return rc;
}

void scheduler_commit(struct scheduler *s, struct sched_prepared *p)
{
	pthread_mutex_lock(&s->mu);
	s->lim = p->lim;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	free(p);
}

void scheduler_prepared_free(struct sched_prepared *p)
{
	free(p);
}

uint64_t scheduler_heartbeat(struct scheduler *s)
{
	return atomic_load(&s->heartbeat);
}

void scheduler_set_stall_file(struct scheduler *s, const char *path)
{
	pthread_mutex_lock(&s->mu);
	snprintf(s->stall_file, sizeof(s->stall_file), "%s", path ? path : "");
	pthread_mutex_unlock(&s->mu);
}

void scheduler_get_stats(struct scheduler *s, struct scheduler_stats *out)
{
	pthread_mutex_lock(&s->mu);
	*out = s->st;
	out->queue_depth = s->n_queue;
	out->running = s->n_active;
	out->kv_bytes_reserved = s->reserved;
	out->kv_bytes_resident = s->resident;
	out->kv_bytes_budget = s->lim.budget_bytes;
	out->sessions = s->n_sessions;
	pthread_mutex_unlock(&s->mu);
}
