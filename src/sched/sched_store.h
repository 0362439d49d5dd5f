/* The scheduler's hand-over of sessions to and from the session store
 * (sched_store.c): where sessions leave for (the shared store, or the park
 * of stored responses without one), what the ones that left looked like,
 * the writer thread that puts offloaded sessions into the store, and the
 * model identity that snapshots carry.  The engine loop and the session
 * table stay in scheduler.c; this part reaches them only through the
 * functions at the end of this header.
 *
 * Locking:
 *   shared, left, n_left, wq, n_wq, cap_wq  the scheduler's `mu`
 *   wq_cv        waited on with `mu` (the writer sleeps there)
 *   have_identity, expect                   id_mu (hashing the model file
 *                happens under it, never under `mu`)
 *   park         opened with the scheduler (it locks itself)
 *   writer, writer_started                  started under `mu` with the
 *                first offload; joined by scheduler_free once the engine
 *                thread is gone */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/scheduler.h"
#include "session/session_key.h"
#include "session/snapshot.h"

struct scheduler;
struct sched_ctl;
struct sched_export;
struct sched_offload;
struct sched_restore;
struct sched_session;
struct sinkd_config;
struct sinkd_log;

#define SCHED_LEFT_MAX 4096

/* A session that left for the store or the park, as it was then. */
struct sched_left {
	char id[SCHED_SESSION_ID_LEN];
	struct sched_left_info info;
};

struct sched_store {
	struct session_store *shared; /* sessions.store_dir's store; NULL: none */
	/* Idle stored responses (parkable sessions) without a store: parked
	 * here as bytes, holding no reservation (store_memory.c). */
	struct session_store *park;
	/* What sessions that left from here looked like (oldest first, at
	 * most SCHED_LEFT_MAX): GET /v1/sessions/{id} shows it while they are
	 * in the store, without bringing them back. */
	struct sched_left *left;
	size_t n_left;
	pthread_mutex_t id_mu;
	bool have_identity;
	struct snapshot_expect expect; /* once have_identity */
	struct sched_offload **wq; /* for the writer */
	size_t n_wq, cap_wq;
	pthread_cond_t wq_cv;
	pthread_t writer;
	bool writer_started;
};

/* Opens the park (responses.store_max_bytes, responses.store_ttl_s);
 * deinit is safe after a failed init. */
int sched_store_init(struct sched_store *st, const struct sinkd_config *cfg, struct sinkd_log *log,
                     char *err, size_t err_len);
/* After sched_store_stop(): frees what is left. */
void sched_store_deinit(struct sched_store *st);
/* Where sessions leave for and come back from: the shared store, or
 * without one the park of stored responses. */
struct session_store *sched_leave_store(const struct scheduler *s);

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

/* The scheduler's checks and the insert of a create (takes `mu` itself). */
typedef int (*sched_store_admit_fn)(struct scheduler *s, void *arg,
                                    const struct sched_store_claim *claim, enum sched_field *field,
                                    char *err, size_t err_len);

/* A create's hand-over with the store, in one place: a named key that may
 * live in the store is leased first (so that two instances cannot create it
 * at once; -EEXIST when stored or held elsewhere, -EIO when the store
 * fails), the owner's stored keys are listed for its session limit, then
 * admit runs; when admit fails, a lease taken here goes back.  Called
 * without `mu`.  *field: the field at fault (SCHED_FIELD_SESSION_ID, or what admit says). */
int sched_store_create(struct scheduler *s, const struct session_settings *opt, const char *want_id,
                       enum sched_lease lease, sched_store_admit_fn admit, void *arg,
                       enum sched_field *field, char *err, size_t err_len);

/* Runs an EXPORT job taken from s->ctl (engine thread, lock not held):
 * the session copied out for its snapshot, or why not; marks it done. */
void sched_export_run(struct scheduler *s, struct sched_ctl *c);
/* Copies a session's state out (engine thread; the session is idle). */
int sched_export_session(struct scheduler *s, struct sched_session *ss, struct sched_export *ex,
                         char *err, size_t err_len);
void sched_export_free(struct sched_export *ex);
/* Imports a restored session's snapshot into its new backend session. */
int sched_import_pending(struct scheduler *s, struct sched_session *ss, char *err, size_t err_len);
/* Hands exported sessions to the writer thread. */
void sched_offload_queue(struct scheduler *s, struct sched_offload **jobs, size_t n);
/* A session left the table for good (deleted or expired, not offloaded):
 * its stored file and lease go too.  Called without the lock. */
void sched_store_forget(struct scheduler *s, const char *id);
void sched_store_stop(struct scheduler *s);

/* scheduler.c, for sched_store.c */
/* Creates a session from a snapshot (the checks of a create, the geometry
 * as restored). */
int sched_session_create_restored(struct scheduler *s, const struct session_settings *opt,
                                  const struct sched_restore *rs, char id_out[SCHED_SESSION_ID_LEN],
                                  char *err, size_t err_len);
/* The live session of that id, or NULL; mu held. */
struct sched_session *sched_session_find_locked(struct scheduler *s, const char *id);
/* What scheduler_session_info() reports of ss. */
void sched_session_info_locked(const struct sched_session *ss, double now,
                               struct sched_session_info *out);
/* Takes a session out of the table; the engine frees it once idle. */
void sched_session_kill_locked(struct scheduler *s, struct sched_session *ss);
