/* The scheduler core's side of sessions beyond one process: snapshots
 * (the engine copies a session out, an HTTP thread encodes it), restores
 * (an HTTP thread checks a snapshot whole and creates the session; the
 * engine imports its cache on first use), and the session store: idle
 * sessions are exported by the engine, written by the store's writer
 * thread and then leave this instance; a request for a session this
 * instance does not hold brings it back from the store under a lease.
 * The store's own state and calls (leases, the park, what left, the
 * identity, the writer queue) are sched_store.c's; this file is what
 * happens to the scheduler's sessions, table and counters around them. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "model/model.h"
#include "sched/scheduler_impl.h"
#include "sched/sched_store.h"
#include "session/store.h"
#include "util/log.h"

#define PUSH(arr, n, cap, p) sched_ptrs_push((void ***)&(arr), &(n), &(cap), (p))

void scheduler_set_model_file(struct scheduler *s, const char *path)
{
	sched_store_set_model_file(&s->store, path);
}

void scheduler_set_store(struct scheduler *s, struct session_store *store)
{
	pthread_mutex_lock(&s->mu);
	s->store.shared = store;
	pthread_mutex_unlock(&s->mu);
}

int sched_export_session(struct scheduler *s, struct sched_session *ss, struct sched_export *ex,
                         char *err, size_t err_len)
{
	memset(ex, 0, sizeof(*ex));
	int rc = sched_share_materialize(s, ss, err, err_len); /* a snapshot holds its cache */
	if (rc)
		return rc;
	if (ss->bs) {
		rc = s->be->ops->session_export(s->be, ss->bs, &ex->kv, err, err_len);
	} else if (ss->restore_buf) { /* restored, not used since: the image as it came */
		ex->kv.n = ss->restore_kv.n;
		ex->kv.n_swa = ss->restore_kv.n_swa;
		ex->kv.bytes = ss->restore_kv.bytes;
		ex->kv.data = malloc(ex->kv.bytes ? ex->kv.bytes : 1);
		if (!ex->kv.data)
			rc = err_set(err, err_len, -ENOMEM, "out of memory");
		else if (ex->kv.bytes)
			memcpy(ex->kv.data, ss->restore_buf, ex->kv.bytes);
	}
	if (rc)
		return rc;
	ex->hist = malloc((ss->hist_n ? ss->hist_n : 1) * sizeof(int32_t));
	if (!ex->hist) {
		kv_image_free(&ex->kv);
		return err_set(err, err_len, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < ss->hist_n; i++)
		ex->hist[i] =
		    ss->hist[(ss->hist_end + ss->hist_cap - ss->hist_n + i) % ss->hist_cap];
	ex->n_hist = (uint32_t)ss->hist_n;
	pthread_mutex_lock(&s->mu);
	ex->has_pending = ss->has_pending;
	pthread_mutex_unlock(&s->mu);
	ex->tokens_seen = ex->kv.n.n_seen + (ex->has_pending ? 1 : 0);
	return 0;
}

int sched_import_pending(struct scheduler *s, struct sched_session *ss, char *err, size_t err_len)
{
	pthread_mutex_lock(&s->mu);
	unsigned char *buf = ss->restore_buf;
	struct kv_image im = ss->restore_kv;
	ss->restore_buf = NULL;
	pthread_mutex_unlock(&s->mu);
	if (!buf)
		return 0;
	im.data = buf;
	int rc = s->be->ops->session_import(s->be, ss->bs, &im, err, err_len);
	free(buf);
	return rc;
}

void sched_export_run(struct scheduler *s, struct sched_ctl *c)
{
	pthread_mutex_lock(&s->mu);
	bool busy = c->ss->busy_handle != 0, gone = c->ss->deleted;
	pthread_mutex_unlock(&s->mu);
	if (gone)
		c->rc = err_set(c->err, sizeof(c->err), -ENOENT, "no session %s",
		                session_key_id(c->ss->id));
	else if (busy)
		c->rc = err_set(c->err, sizeof(c->err), -EBUSY,
		                "session %s is busy with a request; snapshot it between requests",
		                session_key_id(c->ss->id));
	else
		c->rc = sched_export_session(s, c->ss, &c->ex, c->err, sizeof(c->err));
	pthread_mutex_lock(&s->mu);
	c->done = true;
	c->ss->ctl_refs--;
	pthread_mutex_unlock(&s->mu);
}

int scheduler_session_snapshot(struct scheduler *s, const char *id, unsigned char **out,
                               size_t *len, char *err, size_t err_len)
{
	struct sched_ctl c = {0};
	char owner[SCHED_OWNER_LEN], sid[SCHED_SESSION_ID_LEN];
	struct cache_geometry geom;
	int pinned;
	*out = NULL;
	*len = 0;
	if (!s->be->ops->session_export)
		return err_set(err, err_len, -ENOTSUP, "the %s backend cannot snapshot sessions",
		               s->be->ops->name);
	pthread_mutex_lock(&s->mu);
	struct sched_session *ss = id ? sched_session_find_locked(s, id) : NULL;
	if (!ss) {
		pthread_mutex_unlock(&s->mu);
		return err_set(err, err_len, -ENOENT, "no session %.40s",
		               id ? session_key_id(id) : "");
	}
	c.ss = ss;
	snprintf(owner, sizeof(owner), "%s", ss->owner);
	snprintf(sid, sizeof(sid), "%s", ss->id);
	geom = ss->geom;
	pinned = ss->pinned_tokens;
	if (PUSH(s->ctl, s->n_ctl, s->cap_ctl, &c)) {
		pthread_mutex_unlock(&s->mu);
		return err_set(err, err_len, -ENOMEM, "out of memory");
	}
	ss->ctl_refs++;
	pthread_cond_signal(&s->cv);
	while (!c.done)
		pthread_cond_wait(&s->ctl_cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	int rc = c.rc;
	if (rc) {
		err_set(err, err_len, rc, "%s", c.err);
		return rc;
	}
	/* ss may be gone by now (deleted since): only the copies are used */
	rc = sched_store_encode(&s->store, &s->be->model->hp, &geom, pinned, sid, owner, &c.ex, out,
	                        len, err, err_len);
	sched_export_free(&c.ex);
	if (!rc) {
		pthread_mutex_lock(&s->mu);
		s->st.snapshots++;
		s->st.snapshot_bytes += *len;
		pthread_mutex_unlock(&s->mu);
	}
	return rc;
}

/* A restored geometry's bound may not exceed a configured session's, but
 * its window (so its history of 4 bytes a token) may be longer; every
 * window token takes at least 2 bytes of the bound, so 3 bounds cover it. */
size_t scheduler_snapshot_max_bytes(struct scheduler *s)
{
	pthread_mutex_lock(&s->mu);
	size_t most =
	    snapshot_max_bytes(&s->lim.geom) + 2 * cache_geometry_bound_bytes(&s->lim.geom);
	pthread_mutex_unlock(&s->mu);
	return most;
}

/* The geometry of a snapshot against what this instance serves: the backend
 * must hold it, and its bound may not exceed a configured session's with
 * the most pinned tokens allowed. */
static int restore_geometry_check(struct scheduler *s, const struct cache_geometry *g, char *err,
                                  size_t err_len)
{
	int rc = 0;
	if (s->be->ops->geometry_check)
		rc = s->be->ops->geometry_check(s->be, g, err, err_len);
	if (rc)
		return rc;
	pthread_mutex_lock(&s->mu);
	struct cache_geometry widest = s->lim.geom;
	cache_geometry_pin(&widest, s->lim.max_pinned_tokens);
	size_t most = cache_geometry_bound_bytes(&widest);
	pthread_mutex_unlock(&s->mu);
	size_t bound = cache_geometry_bound_bytes(g);
	if (bound > most)
		return err_set(err, err_len, -E2BIG,
		               "the snapshot's cache bound (%zu bytes: window_size %d, "
		               "sink_keep_count %d) exceeds a configured session's (%zu bytes)",
		               bound, g->window_size, g->sink_keep_count, most);
	return 0;
}

/* Creates the session of a decoded snapshot under key, as generation. */
static int restore_decoded(struct scheduler *s, const struct snapshot *sn, const char *key,
                           const char *owner, int64_t owner_max, bool leased, uint64_t generation,
                           char id_out[SCHED_SESSION_ID_LEN], char *err, size_t err_len)
{
	unsigned char *kv = malloc(sn->kv.bytes ? sn->kv.bytes : 1);
	if (!kv)
		return err_set(err, err_len, -ENOMEM, "out of memory for a %zu-byte cache image",
		               sn->kv.bytes);
	if (sn->kv.bytes)
		memcpy(kv, sn->kv.data, sn->kv.bytes);
	struct session_settings set = {.window_size = sn->geom.window_size,
	                               .sink_keep_count = sn->geom.sink_keep_count,
	                               .id = key,
	                               .owner = owner,
	                               .owner_max = owner_max};
	struct sched_restore rs = {.geom = &sn->geom,
	                           .hist = sn->hist,
	                           .n_hist = sn->n_hist,
	                           .has_pending = sn->has_pending,
	                           .kv_counts = sn->kv.n,
	                           .kv_counts_swa = sn->kv.n_swa,
	                           .kv_buf = kv,
	                           .kv_bytes = sn->kv.bytes,
	                           .pinned_tokens = (int)sn->pinned_tokens,
	                           .leased = leased,
	                           .generation = generation};
	int rc = sched_session_create_restored(s, &set, &rs, id_out, err, err_len);
	if (rc)
		free(kv);
	return rc;
}

int scheduler_session_restore(struct scheduler *s, const unsigned char *buf, size_t len,
                              const struct session_restore_opts *o,
                              char id_out[SCHED_SESSION_ID_LEN], char *err, size_t err_len)
{
	double t0 = sched_now();
	struct snapshot_expect ex;
	struct snapshot sn;
	if (!s->be->ops->session_import)
		return err_set(err, err_len, -ENOTSUP, "the %s backend cannot restore sessions",
		               s->be->ops->name);
	int rc = sched_store_identity(&s->store, &s->be->model->hp, &ex, err, err_len);
	if (rc)
		return rc;
	rc = snapshot_decode(buf, len, &ex, &sn, err, err_len);
	if (rc)
		return rc;
	/* the id the caller asked for, or the snapshot's own, in the caller's namespace */
	const char *want = o && o->id && o->id[0] ? o->id : sn.id;
	char key[SCHED_SESSION_ID_LEN];
	if (session_key_make(o ? o->owner : NULL, want, key)) {
		rc = err_set(err, err_len, -EINVAL,
		             want == sn.id ? "snapshot field id: not 1..32 hex digits"
		                           : "session id: 1..32 hex digits");
		goto out;
	}
	if ((rc = restore_geometry_check(s, &sn.geom, err, err_len)))
		goto out;
	bool leased;
	uint64_t generation;
	rc = sched_store_restore_lease(&s->store, key, want, &generation, &leased, err, err_len);
	if (rc)
		goto out;
	rc = restore_decoded(s, &sn, key, o ? o->owner : NULL, o ? o->owner_max : 0, leased,
	                     generation + 1, id_out, err, err_len);
	if (rc && leased)
		sched_store_lease_release(&s->store, key);
	if (!rc) {
		pthread_mutex_lock(&s->mu);
		s->st.restores_api++;
		sched_hist_observe(&s->hist[SCHED_HIST_RESTORE_SECONDS], sched_now() - t0);
		pthread_mutex_unlock(&s->mu);
	}
out:
	snapshot_release(&sn);
	return rc;
}

bool scheduler_session_stored(struct scheduler *s, const char *id)
{
	return sched_store_holds(&s->store, id);
}

int scheduler_session_fetch(struct scheduler *s, const char *id, char *err, size_t err_len)
{
	double t0 = sched_now();
	char why[SINKD_ERR_LEN];
	struct snapshot sn;
	unsigned char *buf = NULL;
	size_t len = 0;
	uint64_t gen = 0;
	if (!sched_leave_store(&s->store) || !id || !session_key_valid(id) ||
	    !s->be->ops->session_import)
		return err_set(err, err_len, -ENOENT, "no session %.40s",
		               id ? session_key_id(id) : "");
	int rc =
	    sched_store_fetch(&s->store, &s->be->model->hp, id, scheduler_snapshot_max_bytes(s),
	                      &buf, &len, &sn, &gen, err, err_len);
	if (rc == -ENOENT) {
		pthread_mutex_lock(&s->mu);
		bool here = sched_session_find_locked(s, id) != NULL;
		pthread_mutex_unlock(&s->mu);
		return here ? 0 : rc;
	}
	if (rc)
		return rc;
	char id_out[SCHED_SESSION_ID_LEN];
	rc = restore_decoded(s, &sn, id, sn.owner, 0, true, gen, id_out, why, sizeof(why));
	if (!rc) {
		pthread_mutex_lock(&s->mu);
		struct sched_session *ss = sched_session_find_locked(s, id);
		if (ss)
			ss->has_record = true;
		pthread_mutex_unlock(&s->mu);
	}
	snapshot_release(&sn);
	free(buf);
	pthread_mutex_lock(&s->mu);
	sched_store_left_forget_locked(&s->store, id);
	pthread_mutex_unlock(&s->mu);
	if (rc == -EEXIST) /* another request brought it back first */
		return 0;
	if (rc) {
		session_store_lease_release(sched_leave_store(&s->store), id);
		return err_set(err, err_len, rc, "%s", why);
	}
	pthread_mutex_lock(&s->mu);
	s->st.restores_store++;
	sched_hist_observe(&s->hist[SCHED_HIST_RESTORE_SECONDS], sched_now() - t0);
	pthread_mutex_unlock(&s->mu);
	log_event(s->log, LOG_INFO, "sched", "session restored from the store",
	          (struct log_field[]){LOG_STR("session", id), LOG_INT("bytes", (int64_t)len),
	                               LOG_INT("generation", (int64_t)gen), LOG_END});
	return 0;
}

int scheduler_session_will_change(struct scheduler *s, const char *id, char *err, size_t err_len)
{
	if (!s->store.shared)
		return 0;
	pthread_mutex_lock(&s->mu);
	struct sched_session *ss = sched_session_find_locked(s, id);
	bool need = ss && ss->has_record && !ss->gen_marked;
	uint64_t gen = ss ? ss->generation : 0;
	pthread_mutex_unlock(&s->mu);
	if (!need)
		return 0;
	int rc = sched_store_mark_generation(&s->store, id, gen, err, err_len);
	if (rc)
		return rc;
	pthread_mutex_lock(&s->mu);
	ss = sched_session_find_locked(s, id);
	if (ss && ss->generation == gen) {
		ss->gen_marked = true;
		ss->leased = true;
	}
	pthread_mutex_unlock(&s->mu);
	return 0;
}

void sched_forget_stored(struct scheduler *s, const char *id)
{
	sched_store_forget(&s->store, id);
	pthread_mutex_lock(&s->mu);
	sched_store_left_forget_locked(&s->store, id);
	pthread_mutex_unlock(&s->mu);
}

/* ---- offloads ------------------------------------------------------------ */

/* Remembers what a session looked like when it left ([mu]). */
static void left_remember_locked(struct scheduler *s, const struct sched_session *ss, size_t bytes)
{
	struct sched_left_info info = {.n_seen = ss->stats.n_seen + (ss->has_pending ? 1 : 0),
	                               .n_resident = ss->stats.n_resident,
	                               .window_size = ss->geom.window_size,
	                               .sink_keep_count = ss->geom.sink_keep_count,
	                               .pinned_tokens = ss->pinned_tokens,
	                               .bytes = bytes,
	                               .parked = !s->store.shared};
	sched_store_left_remember_locked(&s->store, ss->id, &info);
}

int scheduler_session_left_info(struct scheduler *s, const char *id, struct sched_left_info *out)
{
	pthread_mutex_lock(&s->mu);
	int rc = sched_store_left_find_locked(&s->store, id, out);
	pthread_mutex_unlock(&s->mu);
	if (rc == 0 && !scheduler_session_stored(s, id)) {
		/* evicted or expired there since */
		pthread_mutex_lock(&s->mu);
		sched_store_left_forget_locked(&s->store, id);
		pthread_mutex_unlock(&s->mu);
		rc = -ENOENT;
	}
	return rc;
}

static void offload_finish(struct scheduler *s, struct sched_offload *j, int rc, size_t bytes,
                           const char *why)
{
	struct sched_session *ss = j->ss;
	bool gone = false;
	pthread_mutex_lock(&s->mu);
	ss->offloading = false;
	if (rc) {
		s->st.offload_failures++;
	} else if (!ss->offload_cancel && !ss->busy_handle && !ss->deleted) {
		/* written: the session leaves this instance, its file stays */
		ss->stored = true;
		ss->has_record = true;
		left_remember_locked(s, ss, bytes);
		sched_session_kill_locked(s, ss);
		s->st.offloads++;
		s->st.snapshot_bytes += bytes;
		sched_hist_observe(&s->hist[SCHED_HIST_OFFLOAD_SECONDS], sched_now() - j->t_start);
		gone = true;
	}
	if (!rc && !gone) {
		/* written, but a request came: what it changes is newer than the record */
		ss->has_record = true;
		ss->generation++;
		ss->gen_marked = false;
	}
	ss->offload_cancel = false;
	/* the write took the lease when the session held none */
	bool release = gone;
	ss->leased = ss->leased && !gone;
	char id[SCHED_SESSION_ID_LEN];
	memcpy(id, ss->id, sizeof(id));
	pthread_cond_broadcast(&s->ctl_cv);
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	if (release)
		session_store_lease_release(sched_leave_store(&s->store), id);
	if (rc)
		log_event(
		    s->log, LOG_ERROR, "sched", "session offload failed (kept resident)",
		    (struct log_field[]){LOG_STR("session", id), LOG_STR("error", why), LOG_END});
	else if (gone)
		log_event(s->log, LOG_INFO, "sched", "session offloaded to the store",
		          (struct log_field[]){LOG_STR("session", id),
		                               LOG_INT("bytes", (int64_t)bytes), LOG_END});
}

/* The writer took job j ([mu]): what the write needs of the session that
 * the lock guards. */
static void offload_begin_locked(void *arg, struct sched_offload *j)
{
	(void)arg;
	snprintf(j->owner, sizeof(j->owner), "%s", j->ss->owner);
	j->generation = j->ss->generation;
}

/* The writer thread's write of job j (lock not held): encoded, put into
 * the store, finished; j->ss stays valid: its ctl_refs is held until then. */
static void offload_write(void *arg, struct sched_offload *j)
{
	struct scheduler *s = arg;
	unsigned char *bytes = NULL;
	size_t len = 0;
	char err[SINKD_ERR_LEN] = "";
	int rc =
	    sched_store_encode(&s->store, &s->be->model->hp, &j->ss->geom, j->ss->pinned_tokens,
	                       j->ss->id, j->owner, &j->ex, &bytes, &len, err, sizeof(err));
	if (!rc)
		rc = session_store_put(sched_leave_store(&s->store), j->ss->id, j->generation,
		                       bytes, len, err, sizeof(err));
	free(bytes);
	sched_export_free(&j->ex);
	offload_finish(s, j, rc, len, err);
	pthread_mutex_lock(&s->mu);
	j->ss->ctl_refs--;
	pthread_mutex_unlock(&s->mu);
	free(j);
}

static const struct sched_store_writer_ops offload_ops = {.begin_locked = offload_begin_locked,
                                                          .write = offload_write};

void sched_offload_queue(struct scheduler *s, struct sched_offload **jobs, size_t n)
{
	pthread_mutex_lock(&s->mu);
	if (n > 0)
		sched_store_writer_start_locked(&s->store, &offload_ops, s);
	for (size_t i = 0; i < n; i++) {
		struct sched_offload *j = jobs[i];
		if (sched_store_writer_push_locked(&s->store, j)) {
			j->ss->offloading = false;
			j->ss->ctl_refs--;
			s->st.offload_failures++;
			sched_export_free(&j->ex);
			free(j);
		}
	}
	sched_store_writer_wake_locked(&s->store);
	pthread_mutex_unlock(&s->mu);
}

size_t scheduler_offload_all(struct scheduler *s, double timeout_s, size_t *failed)
{
	*failed = 0;
	if (!s->store.shared)
		return 0;
	pthread_mutex_lock(&s->mu);
	uint64_t before = s->st.offloads;
	s->offload_all = true;
	for (size_t i = 0; i < s->n_sessions; i++)
		s->sessions[i]->offload_tried = false;
	pthread_cond_signal(&s->cv);
	double until = sched_now() + timeout_s;
	for (;;) {
		size_t pending = 0; /* not tried yet (busy ones too), or being written */
		for (size_t i = 0; i < s->n_sessions; i++)
			pending += !s->sessions[i]->offload_tried || s->sessions[i]->offloading;
		if (pending == 0 || sched_now() >= until)
			break;
		sched_ctl_wait_locked(s, 50);
	}
	size_t done = (size_t)(s->st.offloads - before);
	*failed = s->n_sessions;
	s->offload_all = false;
	pthread_mutex_unlock(&s->mu);
	return done;
}
