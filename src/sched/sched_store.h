/* The session store's side of the scheduler's hand-over (sched_store.c):
 * where sessions leave for (the shared store, or the park of stored
 * responses without one), the leases a create, a restore, a fetch and a
 * change take there, what the sessions that left looked like, the model
 * identity that snapshots carry, their encoding, and the writer thread
 * that puts offloaded sessions into the store.  It knows neither struct
 * scheduler nor its sessions: the scheduler core (sched_offload.c,
 * scheduler.c) hands it ids, geometries, exported state and callbacks.
 *
 * Locking:
 *   shared, left, n_left, wq, n_wq, cap_wq, wq_stop   *mu: the scheduler's
 *                `mu`, given at init (the _locked calls are made with it)
 *   wq_cv        waited on with *mu (the writer sleeps there)
 *   have_identity, expect                   id_mu (hashing the model file
 *                happens under it, never under *mu)
 *   park         opened at init (it locks itself)
 *   log, model_path   set before any request, read-only after
 *   writer, writer_started, ops, ops_arg    started under *mu with the
 *                first offload; joined by sched_store_writer_stop once
 *                the engine thread is gone */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/sched_types.h"
#include "session/session_key.h"
#include "session/snapshot.h"

struct cache_geometry;
struct model_hparams;
struct sched_offload;
struct sinkd_config;
struct sinkd_log;

#define SCHED_LEFT_MAX 4096

/* A session that left for the store or the park, as it was then. */
struct sched_left {
	char id[SCHED_SESSION_ID_LEN];
	struct sched_left_info info;
};

/* A session's state as the engine copied it out: what a snapshot holds
 * besides the model and the geometry. */
struct sched_export {
	struct kv_image kv;
	int32_t *hist; /* (n_hist) oldest first */
	uint32_t n_hist;
	bool has_pending;
	uint64_t tokens_seen;
};

/* The writer thread's calls into the scheduler core, for each offload job
 * it takes from the queue: begin_locked with *mu held right after it took
 * the job, then write without it (the encode, the put, the finish). */
struct sched_store_writer_ops {
	void (*begin_locked)(void *arg, struct sched_offload *j);
	void (*write)(void *arg, struct sched_offload *j);
};

struct sched_store {
	pthread_mutex_t *mu;          /* the scheduler's lock (see above) */
	struct sinkd_log *log;        /* the store's failures (NULL: none) */
	struct session_store *shared; /* sessions.store_dir's store; NULL: none */
	/* Idle stored responses (parkable sessions) without a store: parked
	 * here as bytes, holding no reservation (store_memory.c). */
	struct session_store *park;
	/* What sessions that left from here looked like (oldest first, at
	 * most SCHED_LEFT_MAX): GET /v1/sessions/{id} shows it while they are
	 * in the store, without bringing them back. */
	struct sched_left *left;
	size_t n_left;
	char model_path[4096]; /* the model file, whose SHA-256 snapshots carry */
	pthread_mutex_t id_mu;
	bool have_identity;
	struct snapshot_expect expect; /* once have_identity */
	struct sched_offload **wq;     /* for the writer */
	size_t n_wq, cap_wq;
	bool wq_stop; /* the writer ends once the queue is empty */
	pthread_cond_t wq_cv;
	pthread_t writer;
	bool writer_started;
	const struct sched_store_writer_ops *ops;
	void *ops_arg;
};

/* Opens the park (responses.store_max_bytes, responses.store_ttl_s); mu is
 * the lock of the fields marked so above.  deinit is safe after a failed
 * init. */
int sched_store_init(struct sched_store *st, const struct sinkd_config *cfg, struct sinkd_log *log,
                     pthread_mutex_t *mu, char *err, size_t err_len);
/* After sched_store_writer_stop(): frees what is left. */
void sched_store_deinit(struct sched_store *st);
/* Where sessions leave for and come back from: the shared store, or
 * without one the park of stored responses. */
struct session_store *sched_leave_store(const struct sched_store *st);
/* Whether the leave store holds a session of that key. */
bool sched_store_holds(const struct sched_store *st, const char *id);
/* Before any request: the model file a snapshot names. */
void sched_store_set_model_file(struct sched_store *st, const char *path);

/* The model identity snapshots carry (hp's shape, the file's SHA-256
 * computed once, under id_mu). */
int sched_store_identity(struct sched_store *st, const struct model_hparams *hp,
                         struct snapshot_expect *out, char *err, size_t err_len);
/* A session's snapshot (session/snapshot.h) of its exported state, its
 * geometry, pinned tokens, key and owner, in a malloc'd buffer. */
int sched_store_encode(struct sched_store *st, const struct model_hparams *hp,
                       const struct cache_geometry *geom, int pinned, const char *id,
                       const char *owner, const struct sched_export *ex, unsigned char **out,
                       size_t *len, char *err, size_t err_len);
void sched_export_free(struct sched_export *ex);

/* ---- leases -------------------------------------------------------------- */

/* A new session's lease in the store: taken by the create (a named key,
 * with a store), already held (a restore that took it), or none. */
enum sched_lease { SCHED_LEASE_NONE = 0, SCHED_LEASE_HELD, SCHED_LEASE_TAKE };

/* What a create got from the store before the scheduler's checks. */
struct sched_store_claim {
	const char *id;                  /* the client's key; NULL: a new one is made */
	uint64_t generation;             /* the newest its lease knew of (0: none) */
	bool leased;                     /* the session holds its lease in the store */
	char (*stored)[SESSION_KEY_LEN]; /* (n_stored) the owner's keys in the store */
	size_t n_stored;
};

/* The scheduler's checks and the insert of a create (it takes its lock itself). */
typedef int (*sched_store_admit_fn)(void *arg, const struct sched_store_claim *claim,
                                    enum sched_field *field, char *err, size_t err_len);

/* A create's hand-over with the store, in one place: a named key that may
 * live in the store is leased first (so that two instances cannot create it
 * at once; -EEXIST when stored or held elsewhere, -EIO when the store
 * fails), the owner's stored keys are listed for its session limit (owner,
 * owner_max: limits.per_key.max_sessions, 0 none), then admit runs; when
 * admit fails, a lease taken here goes back.  Called without *mu.  *field:
 * the field at fault (SCHED_FIELD_SESSION_ID, or what admit says). */
int sched_store_create(struct sched_store *st, const char *owner, int64_t owner_max,
                       const char *want_id, enum sched_lease lease, sched_store_admit_fn admit,
                       void *arg, enum sched_field *field, char *err, size_t err_len);
/* A restore's lease on its key (want: the id the client named, for the
 * messages): none without a shared store (*leased false); -EEXIST when
 * the key is stored or held elsewhere, -EIO when the store fails.
 * *generation: the newest the lease knew of. */
int sched_store_restore_lease(struct sched_store *st, const char *key, const char *want,
                              uint64_t *generation, bool *leased, char *err, size_t err_len);
/* Gives back a lease taken on the shared store (a restore that failed). */
void sched_store_lease_release(struct sched_store *st, const char *key);
/* A stored session to bring back, under its lease: *buf (malloc'd) holds
 * its record, *sn decoded from it (snapshot_release, then free *buf),
 * *generation the one its state starts from (past the record's and the
 * lease's).  -ENOENT not in the store (lease given back), -EBUSY held by
 * another instance, -ESTALE or -EIO a record that cannot come back
 * (logged, lease given back), others the store's; with a client's message.
 * max_bytes: the largest record taken. */
int sched_store_fetch(struct sched_store *st, const struct model_hparams *hp, const char *id,
                      size_t max_bytes, unsigned char **buf, size_t *len, struct snapshot *sn,
                      uint64_t *generation, char *err, size_t err_len);
/* Before a session whose record is in the shared store changes: its lease
 * says that generation exists.  0, -EBUSY (another instance holds the
 * lease) or the store's error, with a message. */
int sched_store_mark_generation(struct sched_store *st, const char *id, uint64_t generation,
                                char *err, size_t err_len);
/* A session left for good (deleted or expired, not offloaded): its stored
 * file and its park entry go.  Called without *mu (the left list is the
 * caller's to update). */
void sched_store_forget(struct sched_store *st, const char *id);

/* ---- what left ----------------------------------------------------------- */

/* Remembers what a session looked like when it left; the oldest go first
 * past SCHED_LEFT_MAX.  *mu held. */
void sched_store_left_remember_locked(struct sched_store *st, const char *id,
                                      const struct sched_left_info *info);
/* Forgets it (brought back, removed, or gone from the store).  *mu held. */
void sched_store_left_forget_locked(struct sched_store *st, const char *id);
/* What it looked like, or -ENOENT.  *mu held. */
int sched_store_left_find_locked(const struct sched_store *st, const char *id,
                                 struct sched_left_info *out);

/* ---- the writer ---------------------------------------------------------- */

/* Starts the writer thread (once) with the core's calls; *mu held.  0 or
 * the error of pthread_create. */
int sched_store_writer_start_locked(struct sched_store *st,
                                    const struct sched_store_writer_ops *ops, void *arg);
/* Queues an offload job for the writer; *mu held.  -ENOMEM (or -ESRCH
 * without a writer): not queued, the job is still the caller's. */
int sched_store_writer_push_locked(struct sched_store *st, struct sched_offload *j);
/* Wakes the writer for what was pushed; *mu held. */
void sched_store_writer_wake_locked(struct sched_store *st);
/* The writer finishes what it was given and ends (without *mu; after the
 * engine thread is gone). */
void sched_store_writer_stop(struct sched_store *st);
