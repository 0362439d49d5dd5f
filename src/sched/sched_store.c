/* Sessions beyond one process: snapshots (the engine copies a session out,
 * an HTTP thread encodes it), restores (an HTTP thread checks a snapshot
 * whole and creates the session; the engine imports its cache on first use),
 * and the session store: idle sessions are exported by the engine, written
 * by a writer thread (so that no file I/O stalls a decode step) and then
 * leave this instance; a request for a session this instance does not hold
 * brings it back from the store under a lease. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched_internal.h"
#include "sched/sched_store.h"
#include "config/config.h"
#include "model/gguf.h"
#include "session/store.h"
#include "util/digest.h"
#include "util/log.h"

#define PUSH(arr, n, cap, p) sched_ptrs_push((void ***)&(arr), &(n), &(cap), (p))

static int hex_decode32(const char *hex, unsigned char out[32])
{
	for (int i = 0; i < 32; i++) {
		unsigned v = 0;
		for (int j = 0; j < 2; j++) {
			char c = hex[2 * i + j];
			v = v * 16 + (unsigned)(c >= 'a' ? c - 'a' + 10 : c - '0');
		}
		out[i] = (unsigned char)v;
	}
	return 0;
}

void scheduler_set_model_file(struct scheduler *s, const char *path)
{
	snprintf(s->model_path, sizeof(s->model_path), "%s", path ? path : "");
}

static void left_forget_locked(struct scheduler *s, const char *id);

int sched_store_init(struct sched_store *st, const struct sinkd_config *cfg, struct sinkd_log *log,
                     char *err, size_t err_len)
{
	pthread_mutex_init(&st->id_mu, NULL);
	pthread_cond_init(&st->wq_cv, NULL);
	struct session_store_options po = {.memory = true,
	                                   .max_bytes = (uint64_t)cfg->responses.store_max_bytes,
	                                   .per_key_bytes = UINT64_MAX,
	                                   .lease_timeout_s = 30,
	                                   .ttl_s = (double)cfg->responses.store_ttl_s,
	                                   .sweep_interval_s = 5,
	                                   .instance = "park",
	                                   .log = log};
	int rc = session_store_open(&po, &st->park, err, err_len);
	if (rc)
		err_prefix(err, err_len, "stored responses");
	return rc;
}

void sched_store_deinit(struct sched_store *st)
{
	free(st->wq);
	session_store_close(st->park);
	free(st->left);
	pthread_cond_destroy(&st->wq_cv);
	pthread_mutex_destroy(&st->id_mu);
}

struct session_store *sched_leave_store(const struct scheduler *s)
{
	return s->store.shared ? s->store.shared : s->store.park;
}

void scheduler_set_store(struct scheduler *s, struct session_store *store)
{
	pthread_mutex_lock(&s->mu);
	s->store.shared = store;
	pthread_mutex_unlock(&s->mu);
}

/* The model identity snapshots carry: the file's SHA-256 is computed once. */
static int identity(struct scheduler *s, struct snapshot_expect *out, char *err, size_t err_len)
{
	int rc = 0;
	pthread_mutex_lock(&s->store.id_mu);
	if (!s->store.have_identity) {
		char hex[65];
		const struct model_hparams *hp = &s->be->model->hp;
		rc = s->model_path[0] ? digest_file_sha256_hex(s->model_path, hex, err, err_len)
		                      : err_set(err, err_len, -ENOTSUP,
		                                "snapshots need the model file's path");
		if (!rc) {
			hex_decode32(hex, s->store.expect.model_sha256);
			s->store.expect.arch = hp->arch;
			s->store.expect.n_vocab = (uint32_t)hp->n_vocab;
			s->store.expect.n_layers = hp->n_layers;
			s->store.expect.n_kv_heads = hp->n_kv_heads;
			s->store.expect.head_dim = hp->head_dim;
			/* the RoPE every session's geometry gets from this model
			 * (config_cache_geometry), so a restore can be refused
			 * before a session is built with anything else */
			s->store.expect.rope_dim = hp->rope_dim;
			s->store.expect.rope_theta = hp->rope_theta;
			s->store.expect.rope_neox = model_arch_rope_neox(hp->arch);
			s->store.have_identity = true;
		}
	}
	*out = s->store.expect;
	pthread_mutex_unlock(&s->store.id_mu);
	return rc;
}

void sched_export_free(struct sched_export *ex)
{
	kv_image_free(&ex->kv);
	free(ex->hist);
	ex->hist = NULL;
}

int sched_export_session(struct scheduler *s, struct sched_session *ss, struct sched_export *ex,
                         char *err, size_t err_len)
{
	memset(ex, 0, sizeof(*ex));
	int rc = 0;
	if (ss->bs) {
		rc = s->be->ops->session_export(s->be, ss->bs, &ex->kv, err, err_len);
	} else if (ss->restore_buf) { /* restored, not used since: the image as it came */
		ex->kv.n = ss->restore_kv.n;
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
		ex->hist[i] = ss->hist[(ss->hist_end + ss->hist_cap - ss->hist_n + i) % ss->hist_cap];
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

static int encode(struct scheduler *s, const struct cache_geometry *geom, int pinned,
                  const char *id, const char *owner, const struct sched_export *ex,
                  unsigned char **out, size_t *len, char *err, size_t err_len)
{
	struct snapshot_expect ident;
	int rc = identity(s, &ident, err, err_len);
	if (rc)
		return rc;
	struct snapshot sn = {.n_vocab = ident.n_vocab,
	                      .geom = *geom,
	                      .pinned_tokens = (uint32_t)pinned,
	                      .tokens_seen = ex->tokens_seen,
	                      .has_pending = ex->has_pending,
	                      .n_hist = ex->n_hist,
	                      .hist = ex->hist,
	                      .kv = ex->kv};
	memcpy(sn.model_sha256, ident.model_sha256, 32);
	snprintf(sn.arch, sizeof(sn.arch), "%s", model_arch_snapshot_name(ident.arch));
	snprintf(sn.id, sizeof(sn.id), "%s", session_key_id(id)); /* the client's id */
	snprintf(sn.owner, sizeof(sn.owner), "%s", owner);
	return snapshot_encode(&sn, out, len, err, err_len);
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
	rc = encode(s, &geom, pinned, sid, owner, &c.ex, out, len, err, err_len);
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
	size_t most = snapshot_max_bytes(&s->lim.geom) + 2 * cache_geometry_bound_bytes(&s->lim.geom);
	pthread_mutex_unlock(&s->mu);
	return most;
}

/* The geometry of a snapshot against what this instance serves: the backend
 * must hold it, and its bound may not exceed a configured session's with
 * the most pinned tokens allowed. */
static int restore_geometry_check(struct scheduler *s, const struct cache_geometry *g,
                                  char *err, size_t err_len)
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
                           const char *owner, int64_t owner_max, bool leased,
                           uint64_t generation, char id_out[SCHED_SESSION_ID_LEN], char *err,
                           size_t err_len)
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
	char holder[160] = "";
	if (!s->be->ops->session_import)
		return err_set(err, err_len, -ENOTSUP, "the %s backend cannot restore sessions",
		               s->be->ops->name);
	int rc = identity(s, &ex, err, err_len);
	if (rc)
		return rc;
	rc = snapshot_decode(buf, len, &ex, &sn, err, err_len);
	if (rc)
		return rc;
	/* the id the caller asked for, or the snapshot's own, in the caller's namespace */
	const char *want = o && o->id && o->id[0] ? o->id : sn.id;
	char key[SCHED_SESSION_ID_LEN];
	if (session_key_make(o ? o->owner : NULL, want, key)) {
		rc = err_set(err, err_len, -EINVAL, want == sn.id
		                                        ? "snapshot field id: not 1..32 hex digits"
		                                        : "session id: 1..32 hex digits");
		goto out;
	}
	if ((rc = restore_geometry_check(s, &sn.geom, err, err_len)))
		goto out;
	bool leased = false;
	uint64_t generation = 0;
	if (s->store.shared) {
		if (session_store_exists(s->store.shared, key)) {
			rc = err_set(err, err_len, -EEXIST, "session %s exists", want);
			goto out;
		}
		rc = session_store_lease_take(s->store.shared, key, &generation, holder, sizeof(holder), err,
		                              err_len);
		if (rc == -EBUSY)
			rc = err_set(err, err_len, -EEXIST, "session %s exists (held by instance %s)",
			             want, holder);
		else if (rc) {
			log_event(s->log, LOG_ERROR, "sched", "session store failed",
			          (struct log_field[]){LOG_STR("session", key), LOG_STR("error", err),
			                               LOG_END});
			rc = err_set(err, err_len, -EIO, "the session store failed (see the server log)");
		}
		if (rc)
			goto out;
		leased = true;
	}
	rc = restore_decoded(s, &sn, key, o ? o->owner : NULL, o ? o->owner_max : 0, leased,
	                     generation + 1, id_out, err, err_len);
	if (rc && leased)
		session_store_lease_release(s->store.shared, key);
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
	struct session_store *st = sched_leave_store(s);
	return st && id && session_key_valid(id) && session_store_exists(st, id);
}

/* A named key may live in the store (offloaded here or by another
 * instance): it is taken then, and its lease keeps two instances from
 * creating it at once.  *generation: the newest the lease knew of. */
static int create_lease(struct scheduler *s, const char *key, uint64_t *generation,
                        enum sched_field *field, char *err, size_t err_len)
{
	char holder[160] = "";
	if (scheduler_session_stored(s, key))
		return err_set(err, err_len, -EEXIST, "session %s exists", session_key_id(key));
	int rc = session_store_lease_take(s->store.shared, key, generation, holder, sizeof(holder),
	                                  err, err_len);
	if (rc == -EBUSY)
		return err_set(err, err_len, -EEXIST, "session %s exists (held by instance %s)",
		               session_key_id(key), holder);
	if (rc) {
		/* the store's failure, not the id's; its detail (a path, a host)
		 * goes to the log, not to the client */
		*field = SCHED_FIELD_NONE;
		log_event(s->log, LOG_ERROR, "sched", "session store failed",
		          (struct log_field[]){LOG_STR("session", key), LOG_STR("error", err),
		                               LOG_END});
		return err_set(err, err_len, -EIO, "the session store failed (see the server log)");
	}
	return rc;
}

/* The owner's keys in the store, for its session limit (none without a
 * store, a limit or an owner with a namespace of its own). */
static void create_stored_keys(struct scheduler *s, const struct session_settings *opt,
                               char (**keys)[SESSION_KEY_LEN], size_t *n)
{
	char tag[SESSION_OWNER_TAG_LEN + 1], err[SINKD_ERR_LEN];
	*keys = NULL;
	*n = 0;
	if (!s->store.shared || !opt || !opt->owner || opt->owner_max <= 0)
		return;
	session_owner_tag(opt->owner, tag);
	if (tag[0] && session_store_list(s->store.shared, opt->owner, keys, n, err, sizeof(err)))
		log_msg(s->log, LOG_WARN, "sched", "session store: listing sessions: %s", err);
}

int sched_store_create(struct scheduler *s, const struct session_settings *opt, const char *want_id,
                       enum sched_lease lease, sched_store_admit_fn admit, void *arg,
                       enum sched_field *field, char *err, size_t err_len)
{
	struct sched_store_claim claim = {.id = want_id, .leased = lease == SCHED_LEASE_HELD};
	bool took = false;
	if (lease == SCHED_LEASE_TAKE && want_id && s->store.shared) {
		int rc = create_lease(s, want_id, &claim.generation, field, err, err_len);
		if (rc)
			return rc;
		claim.leased = took = true;
	}
	create_stored_keys(s, opt, &claim.stored, &claim.n_stored);
	int rc = admit(s, arg, &claim, field, err, err_len);
	free(claim.stored);
	if (rc && took)
		session_store_lease_release(s->store.shared, want_id);
	return rc;
}

/* The lease of a session to bring back: -EBUSY (held live elsewhere) or
 * the store's failure, with the client's message. */
static int fetch_lease(struct scheduler *s, const char *id, uint64_t *generation, char *err,
                       size_t err_len)
{
	char holder[160] = "", why[SINKD_ERR_LEN];
	int rc = session_store_lease_take(sched_leave_store(s), id, generation, holder, sizeof(holder),
	                                  why, sizeof(why));
	if (rc == -EBUSY)
		return err_set(err, err_len, -EBUSY,
		               "session %s is held by instance %s; retry there or later",
		               session_key_id(id), holder);
	if (rc)
		return err_set(err, err_len, rc, "session store: %s", why);
	return 0;
}

/* A stored record that cannot come back: logged, the lease let go (kept
 * with its generation when the record is stale, so no one resumes it). */
static int fetch_refused(struct scheduler *s, const char *id, int rc, const char *why, char *err,
                         size_t err_len)
{
	session_store_lease_release(sched_leave_store(s), id);
	log_event(s->log, LOG_ERROR, "sched",
	          rc == -ESTALE ? "stored session is stale (refused)" : "stored session unreadable",
	          (struct log_field[]){LOG_STR("session", id), LOG_STR("error", why), LOG_END});
	if (rc == -ESTALE)
		return err_set(err, err_len, -ESTALE, "%s", why);
	return err_set(err, err_len, -EIO, "stored session %s cannot be restored: %s",
	               session_key_id(id), why);
}

int scheduler_session_fetch(struct scheduler *s, const char *id, char *err, size_t err_len)
{
	double t0 = sched_now();
	char why[SINKD_ERR_LEN];
	struct snapshot_expect ex;
	struct snapshot sn;
	unsigned char *buf = NULL;
	size_t len = 0;
	uint64_t lease_gen = 0, rec_gen = 0;
	struct session_store *st = sched_leave_store(s);
	if (!st || !id || !session_key_valid(id) || !s->be->ops->session_import)
		return err_set(err, err_len, -ENOENT, "no session %.40s",
		               id ? session_key_id(id) : "");
	/* the lease first, so that two instances never both bring it back */
	int rc = fetch_lease(s, id, &lease_gen, err, err_len);
	if (rc)
		return rc;
	rc = session_store_get(st, id, scheduler_snapshot_max_bytes(s), &buf, &len, &rec_gen,
	                       why, sizeof(why));
	if (rc == -ENOENT) {
		session_store_lease_release(st, id);
		pthread_mutex_lock(&s->mu);
		bool here = sched_session_find_locked(s, id) != NULL;
		pthread_mutex_unlock(&s->mu);
		return here ? 0 : err_set(err, err_len, -ENOENT, "no session %s", session_key_id(id));
	}
	if (!rc)
		rc = identity(s, &ex, why, sizeof(why));
	if (!rc)
		rc = snapshot_decode(buf, len, &ex, &sn, why, sizeof(why));
	if (!rc && !session_key_owned_by(id, sn.owner)) {
		snapshot_release(&sn);
		rc = err_set(why, sizeof(why), -EINVAL, "its owner is not the one its key names");
	}
	if (rc) {
		free(buf);
		return fetch_refused(s, id, rc, why, err, err_len);
	}
	/* its state is the record's until a request changes it
	 * (scheduler_session_will_change marks the lease then) */
	uint64_t gen = (rec_gen > lease_gen ? rec_gen : lease_gen) + 1;
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
	left_forget_locked(s, id);
	pthread_mutex_unlock(&s->mu);
	if (rc == -EEXIST) /* another request brought it back first */
		return 0;
	if (rc) {
		session_store_lease_release(st, id);
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

int scheduler_session_will_change(struct scheduler *s, const char *id, char *err,
                                  size_t err_len)
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
	char holder[160] = "", why[SINKD_ERR_LEN];
	int rc = session_store_lease_take(s->store.shared, id, NULL, holder, sizeof(holder), why,
	                                  sizeof(why));
	if (!rc)
		rc = session_store_lease_set_generation(s->store.shared, id, gen, why, sizeof(why));
	if (rc == -EBUSY || rc == -ESTALE)
		return err_set(err, err_len, -EBUSY,
		               "session %s is held by instance %s; retry there or later",
		               session_key_id(id), holder[0] ? holder : "another");
	if (rc)
		return err_set(err, err_len, rc, "session store: %s", why);
	pthread_mutex_lock(&s->mu);
	ss = sched_session_find_locked(s, id);
	if (ss && ss->generation == gen) {
		ss->gen_marked = true;
		ss->leased = true;
	}
	pthread_mutex_unlock(&s->mu);
	return 0;
}

void sched_store_forget(struct scheduler *s, const char *id)
{
	char err[SINKD_ERR_LEN];
	if (s->store.shared && id[0] && session_store_remove(s->store.shared, id, err, sizeof(err)))
		log_msg(s->log, LOG_WARN, "sched", "session store: %s", err);
	if (s->store.park && id[0])
		session_store_remove(s->store.park, id, err, sizeof(err));
	pthread_mutex_lock(&s->mu);
	left_forget_locked(s, id);
	pthread_mutex_unlock(&s->mu);
}

/* ---- the writer ---------------------------------------------------------- */

/* Forgets what a session looked like when it left ([mu]). */
static void left_forget_locked(struct scheduler *s, const char *id)
{
	for (size_t i = 0; i < s->store.n_left; i++)
		if (!strcmp(s->store.left[i].id, id)) {
			memmove(&s->store.left[i], &s->store.left[i + 1], (s->store.n_left - i - 1) * sizeof(*s->store.left));
			s->store.n_left--;
			return;
		}
}

/* Remembers what a session looked like when it left ([mu]); the oldest
 * go first past SCHED_LEFT_MAX. */
static void left_remember_locked(struct scheduler *s, const struct sched_session *ss,
                                 size_t bytes)
{
	left_forget_locked(s, ss->id);
	if (!s->store.left && !(s->store.left = malloc(SCHED_LEFT_MAX * sizeof(*s->store.left))))
		return;
	if (s->store.n_left == SCHED_LEFT_MAX)
		left_forget_locked(s, s->store.left[0].id);
	struct sched_left *l = &s->store.left[s->store.n_left++];
	memcpy(l->id, ss->id, sizeof(l->id));
	l->info = (struct sched_left_info){.n_seen = ss->stats.n_seen + (ss->has_pending ? 1 : 0),
	                                   .n_resident = ss->stats.n_resident,
	                                   .window_size = ss->geom.window_size,
	                                   .sink_keep_count = ss->geom.sink_keep_count,
	                                   .pinned_tokens = ss->pinned_tokens,
	                                   .bytes = bytes,
	                                   .parked = !s->store.shared};
}

int scheduler_session_left_info(struct scheduler *s, const char *id, struct sched_left_info *out)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < s->store.n_left; i++)
		if (!strcmp(s->store.left[i].id, id)) {
			*out = s->store.left[i].info;
			rc = 0;
		}
	pthread_mutex_unlock(&s->mu);
	if (rc == 0 && !scheduler_session_stored(s, id)) {
		/* evicted or expired there since */
		pthread_mutex_lock(&s->mu);
		left_forget_locked(s, id);
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
		session_store_lease_release(sched_leave_store(s), id);
	if (rc)
		log_event(s->log, LOG_ERROR, "sched", "session offload failed (kept resident)",
		          (struct log_field[]){LOG_STR("session", id), LOG_STR("error", why),
		                               LOG_END});
	else if (gone)
		log_event(s->log, LOG_INFO, "sched", "session offloaded to the store",
		          (struct log_field[]){LOG_STR("session", id),
		                               LOG_INT("bytes", (int64_t)bytes), LOG_END});
}

static void *writer_main(void *arg)
{
	struct scheduler *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (s->store.n_wq == 0 && !s->stopping)
			pthread_cond_wait(&s->store.wq_cv, &s->mu);
		if (s->store.n_wq == 0)
			break;
		struct sched_offload *j = s->store.wq[0];
		sched_ptrs_remove_at((void **)s->store.wq, &s->store.n_wq, 0);
		char owner[SCHED_OWNER_LEN];
		snprintf(owner, sizeof(owner), "%s", j->ss->owner);
		uint64_t generation = j->ss->generation;
		pthread_mutex_unlock(&s->mu);
		unsigned char *bytes = NULL;
		size_t len = 0;
		char err[SINKD_ERR_LEN] = "";
		/* j->ss stays valid: its ctl_refs is held until the job is done */
		int rc = encode(s, &j->ss->geom, j->ss->pinned_tokens, j->ss->id, owner, &j->ex,
		                &bytes, &len, err, sizeof(err));
		if (!rc)
			rc = session_store_put(sched_leave_store(s), j->ss->id, generation, bytes, len,
			                       err, sizeof(err));
		free(bytes);
		sched_export_free(&j->ex);
		offload_finish(s, j, rc, len, err);
		pthread_mutex_lock(&s->mu);
		j->ss->ctl_refs--;
		pthread_mutex_unlock(&s->mu);
		free(j);
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

void sched_offload_queue(struct scheduler *s, struct sched_offload **jobs, size_t n)
{
	pthread_mutex_lock(&s->mu);
	if (!s->store.writer_started && n > 0 &&
	    pthread_create(&s->store.writer, NULL, writer_main, s) == 0)
		s->store.writer_started = true;
	for (size_t i = 0; i < n; i++) {
		struct sched_offload *j = jobs[i];
		if (!s->store.writer_started || PUSH(s->store.wq, s->store.n_wq, s->store.cap_wq, j)) {
			j->ss->offloading = false;
			j->ss->ctl_refs--;
			s->st.offload_failures++;
			sched_export_free(&j->ex);
			free(j);
		}
	}
	pthread_cond_signal(&s->store.wq_cv);
	pthread_mutex_unlock(&s->mu);
}

void sched_store_stop(struct scheduler *s)
{
	if (!s->store.writer_started)
		return;
	pthread_mutex_lock(&s->mu);
	pthread_cond_broadcast(&s->store.wq_cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->store.writer, NULL);
	s->store.writer_started = false;
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
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L)
			ts.tv_sec++, ts.tv_nsec -= 1000000000L;
		pthread_cond_timedwait(&s->ctl_cv, &s->mu, &ts);
	}
	size_t done = (size_t)(s->st.offloads - before);
	*failed = s->n_sessions;
	s->offload_all = false;
	pthread_mutex_unlock(&s->mu);
	return done;
}
