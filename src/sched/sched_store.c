/* The session store's side of the scheduler's hand-over: which store
 * sessions leave for (the shared one, or the park of stored responses),
 * the leases that keep two instances from holding one session at once
 * (create, restore, fetch, change), the record of what left, the model
 * identity and encoding of snapshots, and the writer thread that puts
 * offloaded sessions into the store so that no file I/O stalls a decode
 * step.  What is done with the scheduler's sessions around these calls
 * (export, import, the table, the counters) is sched_offload.c's. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/geometry.h"
#include "config/config.h"
#include "model/model.h"
#include "sched/sched_store.h"
#include "session/store.h"
#include "util/digest.h"
#include "util/errbuf.h"
#include "util/log.h"

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

int sched_store_init(struct sched_store *st, const struct sinkd_config *cfg, struct sinkd_log *log,
                     pthread_mutex_t *mu, char *err, size_t err_len)
{
	st->mu = mu;
	st->log = log;
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

struct session_store *sched_leave_store(const struct sched_store *st)
{
	return st->shared ? st->shared : st->park;
}

bool sched_store_holds(const struct sched_store *st, const char *id)
{
	struct session_store *ls = sched_leave_store(st);
	return ls && id && session_key_valid(id) && session_store_exists(ls, id);
}

void sched_store_set_model_file(struct sched_store *st, const char *path)
{
	snprintf(st->model_path, sizeof(st->model_path), "%s", path ? path : "");
}

int sched_store_identity(struct sched_store *st, const struct model_hparams *hp,
                         struct snapshot_expect *out, char *err, size_t err_len)
{
	int rc = 0;
	pthread_mutex_lock(&st->id_mu);
	if (!st->have_identity) {
		char hex[65];
		rc = st->model_path[0]
		         ? digest_file_sha256_hex(st->model_path, hex, err, err_len)
		         : err_set(err, err_len, -ENOTSUP, "snapshots need the model file's path");
		if (!rc) {
			hex_decode32(hex, st->expect.model_sha256);
			st->expect.arch = hp->arch;
			st->expect.n_vocab = (uint32_t)hp->n_vocab;
			st->expect.n_layers = hp->n_layers;
			st->expect.n_kv_heads = hp->n_kv_heads;
			st->expect.head_dim = hp->head_dim;
			/* the RoPE every session's geometry gets from this model
			 * (config_cache_geometry), so a restore can be refused
			 * before a session is built with anything else */
			st->expect.rope_dim = hp->rope_dim;
			st->expect.rope_theta = hp->rope_theta;
			st->expect.rope_neox = model_arch_rope_neox(hp->arch);
			st->expect.rope_freq_scale = hp->rope_freq_scale;
			st->expect.rope_factors = hp->rope_factors;
			st->expect.swa_window = hp->swa_window;
			st->expect.layer_swa = hp->layer_swa;
			st->expect.rope_theta_swa = hp->rope_theta_swa;
			st->expect.swa_rope_scaled = hp->swa_rope_scaled;
			st->have_identity = true;
		}
	}
	*out = st->expect;
	pthread_mutex_unlock(&st->id_mu);
	return rc;
}

void sched_export_free(struct sched_export *ex)
{
	kv_image_free(&ex->kv);
	free(ex->hist);
	ex->hist = NULL;
}

int sched_store_encode(struct sched_store *st, const struct model_hparams *hp,
                       const struct cache_geometry *geom, int pinned, const char *id,
                       const char *owner, const struct sched_export *ex, unsigned char **out,
                       size_t *len, char *err, size_t err_len)
{
	struct snapshot_expect ident;
	int rc = sched_store_identity(st, hp, &ident, err, err_len);
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

/* ---- leases -------------------------------------------------------------- */

/* A named key may live in the store (offloaded here or by another
 * instance): it is taken then, and its lease keeps two instances from
 * creating it at once.  *generation: the newest the lease knew of. */
static int create_lease(struct sched_store *st, const char *key, uint64_t *generation,
                        enum sched_field *field, char *err, size_t err_len)
{
	char holder[160] = "";
	if (sched_store_holds(st, key))
		return err_set(err, err_len, -EEXIST, "session %s exists", session_key_id(key));
	int rc = session_store_lease_take(st->shared, key, generation, holder, sizeof(holder), err,
	                                  err_len);
	if (rc == -EBUSY)
		return err_set(err, err_len, -EEXIST, "session %s exists (held by instance %s)",
		               session_key_id(key), holder);
	if (rc) {
		/* the store's failure, not the id's; its detail (a path, a host)
		 * goes to the log, not to the client */
		*field = SCHED_FIELD_NONE;
		log_event(
		    st->log, LOG_ERROR, "sched", "session store failed",
		    (struct log_field[]){LOG_STR("session", key), LOG_STR("error", err), LOG_END});
		return err_set(err, err_len, -EIO, "the session store failed (see the server log)");
	}
	return rc;
}

/* The owner's keys in the store, for its session limit (none without a
 * store, a limit or an owner with a namespace of its own). */
static void create_stored_keys(struct sched_store *st, const char *owner, int64_t owner_max,
                               char (**keys)[SESSION_KEY_LEN], size_t *n)
{
	char tag[SESSION_OWNER_TAG_LEN + 1], err[SINKD_ERR_LEN];
	*keys = NULL;
	*n = 0;
	if (!st->shared || !owner || owner_max <= 0)
		return;
	session_owner_tag(owner, tag);
	if (tag[0] && session_store_list(st->shared, owner, keys, n, err, sizeof(err)))
		log_msg(st->log, LOG_WARN, "sched", "session store: listing sessions: %s", err);
}

int sched_store_create(struct sched_store *st, const char *owner, int64_t owner_max,
                       const char *want_id, enum sched_lease lease, sched_store_admit_fn admit,
                       void *arg, enum sched_field *field, char *err, size_t err_len)
{
	struct sched_store_claim claim = {.id = want_id, .leased = lease == SCHED_LEASE_HELD};
	bool took = false;
	if (lease == SCHED_LEASE_TAKE && want_id && st->shared) {
		int rc = create_lease(st, want_id, &claim.generation, field, err, err_len);
		if (rc)
			return rc;
		claim.leased = took = true;
	}
	create_stored_keys(st, owner, owner_max, &claim.stored, &claim.n_stored);
	int rc = admit(arg, &claim, field, err, err_len);
	free(claim.stored);
	if (rc && took)
		session_store_lease_release(st->shared, want_id);
	return rc;
}

int sched_store_restore_lease(struct sched_store *st, const char *key, const char *want,
                              uint64_t *generation, bool *leased, char *err, size_t err_len)
{
	char holder[160] = "";
	*leased = false;
	*generation = 0;
	if (!st->shared)
		return 0;
	if (session_store_exists(st->shared, key))
		return err_set(err, err_len, -EEXIST, "session %s exists", want);
	int rc = session_store_lease_take(st->shared, key, generation, holder, sizeof(holder), err,
	                                  err_len);
	if (rc == -EBUSY)
		rc = err_set(err, err_len, -EEXIST, "session %s exists (held by instance %s)", want,
		             holder);
	else if (rc) {
		log_event(
		    st->log, LOG_ERROR, "sched", "session store failed",
		    (struct log_field[]){LOG_STR("session", key), LOG_STR("error", err), LOG_END});
		rc = err_set(err, err_len, -EIO, "the session store failed (see the server log)");
	}
	if (!rc)
		*leased = true;
	return rc;
}

void sched_store_lease_release(struct sched_store *st, const char *key)
{
	session_store_lease_release(st->shared, key);
}

/* The lease of a session to bring back: -EBUSY (held live elsewhere) or
 * the store's failure, with the client's message. */
static int fetch_lease(struct sched_store *st, const char *id, uint64_t *generation, char *err,
                       size_t err_len)
{
	char holder[160] = "", why[SINKD_ERR_LEN];
	int rc = session_store_lease_take(sched_leave_store(st), id, generation, holder,
	                                  sizeof(holder), why, sizeof(why));
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
static int fetch_refused(struct sched_store *st, const char *id, int rc, const char *why, char *err,
                         size_t err_len)
{
	session_store_lease_release(sched_leave_store(st), id);
	log_event(st->log, LOG_ERROR, "sched",
	          rc == -ESTALE ? "stored session is stale (refused)" : "stored session unreadable",
	          (struct log_field[]){LOG_STR("session", id), LOG_STR("error", why), LOG_END});
	if (rc == -ESTALE)
		return err_set(err, err_len, -ESTALE, "%s", why);
	return err_set(err, err_len, -EIO, "stored session %s cannot be restored: %s",
	               session_key_id(id), why);
}

int sched_store_fetch(struct sched_store *st, const struct model_hparams *hp, const char *id,
                      size_t max_bytes, unsigned char **buf, size_t *len, struct snapshot *sn,
                      uint64_t *generation, char *err, size_t err_len)
{
	char why[SINKD_ERR_LEN];
	struct snapshot_expect ex;
	uint64_t lease_gen = 0, rec_gen = 0;
	struct session_store *ls = sched_leave_store(st);
	*buf = NULL;
	*len = 0;
	/* the lease first, so that two instances never both bring it back */
	int rc = fetch_lease(st, id, &lease_gen, err, err_len);
	if (rc)
		return rc;
	rc = session_store_get(ls, id, max_bytes, buf, len, &rec_gen, why, sizeof(why));
	if (rc == -ENOENT) {
		session_store_lease_release(ls, id);
		return err_set(err, err_len, -ENOENT, "no session %s", session_key_id(id));
	}
	if (!rc)
		rc = sched_store_identity(st, hp, &ex, why, sizeof(why));
	if (!rc)
		rc = snapshot_decode(*buf, *len, &ex, sn, why, sizeof(why));
	if (!rc && !session_key_owned_by(id, sn->owner)) {
		snapshot_release(sn);
		rc = err_set(why, sizeof(why), -EINVAL, "its owner is not the one its key names");
	}
	if (rc) {
		free(*buf);
		*buf = NULL;
		return fetch_refused(st, id, rc, why, err, err_len);
	}
	/* its state is the record's until a request changes it
	 * (sched_store_mark_generation marks the lease then) */
	*generation = (rec_gen > lease_gen ? rec_gen : lease_gen) + 1;
	return 0;
}

int sched_store_mark_generation(struct sched_store *st, const char *id, uint64_t generation,
                                char *err, size_t err_len)
{
	char holder[160] = "", why[SINKD_ERR_LEN];
	int rc = session_store_lease_take(st->shared, id, NULL, holder, sizeof(holder), why,
	                                  sizeof(why));
	if (!rc)
		rc = session_store_lease_set_generation(st->shared, id, generation, why,
		                                        sizeof(why));
	if (rc == -EBUSY || rc == -ESTALE)
		return err_set(err, err_len, -EBUSY,
		               "session %s is held by instance %s; retry there or later",
		               session_key_id(id), holder[0] ? holder : "another");
	if (rc)
		return err_set(err, err_len, rc, "session store: %s", why);
	return 0;
}

void sched_store_forget(struct sched_store *st, const char *id)
{
	char err[SINKD_ERR_LEN];
	if (st->shared && id[0] && session_store_remove(st->shared, id, err, sizeof(err)))
		log_msg(st->log, LOG_WARN, "sched", "session store: %s", err);
	if (st->park && id[0])
		session_store_remove(st->park, id, err, sizeof(err));
}

/* ---- what left ----------------------------------------------------------- */

void sched_store_left_forget_locked(struct sched_store *st, const char *id)
{
	for (size_t i = 0; i < st->n_left; i++)
		if (!strcmp(st->left[i].id, id)) {
			memmove(&st->left[i], &st->left[i + 1],
			        (st->n_left - i - 1) * sizeof(*st->left));
			st->n_left--;
			return;
		}
}

void sched_store_left_remember_locked(struct sched_store *st, const char *id,
                                      const struct sched_left_info *info)
{
	sched_store_left_forget_locked(st, id);
	if (!st->left && !(st->left = malloc(SCHED_LEFT_MAX * sizeof(*st->left))))
		return;
	if (st->n_left == SCHED_LEFT_MAX)
		sched_store_left_forget_locked(st, st->left[0].id);
	struct sched_left *l = &st->left[st->n_left++];
	snprintf(l->id, sizeof(l->id), "%s", id);
	l->info = *info;
}

int sched_store_left_find_locked(const struct sched_store *st, const char *id,
                                 struct sched_left_info *out)
{
	int rc = -ENOENT;
	for (size_t i = 0; i < st->n_left; i++)
		if (!strcmp(st->left[i].id, id)) {
			*out = st->left[i].info;
			rc = 0;
		}
	return rc;
}

/* ---- the writer ---------------------------------------------------------- */

static void *writer_main(void *arg)
{
	struct sched_store *st = arg;
	pthread_mutex_lock(st->mu);
	for (;;) {
		while (st->n_wq == 0 && !st->wq_stop)
			pthread_cond_wait(&st->wq_cv, st->mu);
		if (st->n_wq == 0)
			break;
		struct sched_offload *j = st->wq[0];
		memmove(&st->wq[0], &st->wq[1], (st->n_wq - 1) * sizeof(*st->wq));
		st->n_wq--;
		st->ops->begin_locked(st->ops_arg, j);
		pthread_mutex_unlock(st->mu);
		st->ops->write(st->ops_arg, j);
		pthread_mutex_lock(st->mu);
	}
	pthread_mutex_unlock(st->mu);
	return NULL;
}

int sched_store_writer_start_locked(struct sched_store *st,
                                    const struct sched_store_writer_ops *ops, void *arg)
{
	if (st->writer_started)
		return 0;
	st->ops = ops;
	st->ops_arg = arg;
	int rc = -pthread_create(&st->writer, NULL, writer_main, st);
	if (!rc)
		st->writer_started = true;
	return rc;
}

int sched_store_writer_push_locked(struct sched_store *st, struct sched_offload *j)
{
	if (!st->writer_started)
		return -ESRCH;
	if (st->n_wq == st->cap_wq) {
		size_t cap = st->cap_wq ? 2 * st->cap_wq : 8;
		void *p = realloc(st->wq, cap * sizeof(*st->wq));
		if (!p)
			return -ENOMEM;
		st->wq = p;
		st->cap_wq = cap;
	}
	st->wq[st->n_wq++] = j;
	return 0;
}

void sched_store_writer_wake_locked(struct sched_store *st)
{
	pthread_cond_signal(&st->wq_cv);
}

void sched_store_writer_stop(struct sched_store *st)
{
	if (!st->writer_started)
		return;
	pthread_mutex_lock(st->mu);
	st->wq_stop = true;
	pthread_cond_broadcast(&st->wq_cv);
	pthread_mutex_unlock(st->mu);
	pthread_join(st->writer, NULL);
	st->writer_started = false;
}
